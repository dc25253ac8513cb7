/* test_xxh.c - XXH3-64 at every vector width ckpt builds (src/base/xxh.c)
 * gives libxxhash's own digests: one-shot and streamed in odd chunks, at
 * the sizes where XXH3 changes algorithm (0, 1-3, 4-8, 9-16, 17-128,
 * 129-240, one stripe, one block and many blocks). */
#include <stdlib.h>

#include "base/xxh.h"
#include "base/xxh_simd.h"
#include "ckpt.h"
#include "harness.h"

static const size_t sizes[] = {
    0, 1, 3, 4, 8, 9, 16, 17, 128, 129, 240, 241, 1023, 1024, 1025, 64 * 1024 + 3, (1u << 20) + 7};

static unsigned char *pattern(size_t n) {
    unsigned char *p = malloc(n ? n : 1);
    uint64_t x = 0x9E3779B97F4A7C15u;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        p[i] = (unsigned char)x;
    }
    return p;
}

/* The reference: libxxhash's build, not ckpt's. */
static uint64_t reference(const void *p, size_t n) { return XXH3_64bits(n ? p : "", n); }

static uint64_t streamed(const unsigned char *p, size_t n, size_t chunk) {
    XXH3_state_t st;
    ckpt_xxh3_reset(&st);
    for (size_t at = 0; at < n; at += chunk)
        ckpt_xxh3_update(&st, p + at, n - at < chunk ? n - at : chunk);
    return ckpt_xxh3_digest(&st);
}

TEST(known_answer) {
    /* xxhash's published XXH3_64bits of the empty input, seed 0 */
    CHECK(ckpt_xxh3_64(NULL, 0) == 0x2D06800538D394C2u);
    CHECK(streamed(NULL, 0, 1) == 0x2D06800538D394C2u);
}

TEST(dispatched_matches_libxxhash) {
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        size_t n = sizes[i];
        unsigned char *p = pattern(n);
        uint64_t want = reference(p, n);
        CHECK(ckpt_xxh3_64(p, n) == want);
        CHECK(streamed(p, n, 7) == want);
        CHECK(streamed(p, n, 4096 + 5) == want);
        free(p);
    }
}

#ifdef CKPT_XXH_X86
/* Each width the CPU runs, called directly (the dispatcher runs only the
 * widest), one-shot and over a state libxxhash reset. */
static void check_width(uint64_t (*one)(const void *, size_t),
                        void (*update)(void *, const void *, size_t),
                        uint64_t (*digest)(const void *)) {
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        size_t n = sizes[i];
        unsigned char *p = pattern(n);
        uint64_t want = reference(p, n);
        CHECK(one(n ? (const void *)p : "", n) == want);
        XXH3_state_t st;
        (void)XXH3_64bits_reset(&st);
        for (size_t at = 0; at < n; at += 333) update(&st, p + at, n - at < 333 ? n - at : 333);
        CHECK(digest(&st) == want);
        free(p);
    }
}

TEST(each_width_matches_libxxhash) {
    int ran = 0;
    if (__builtin_cpu_supports("avx2")) {
        check_width(ckpt_xxh3_64_avx2, ckpt_xxh3_update_avx2, ckpt_xxh3_digest_avx2);
        ran++;
    }
    if (__builtin_cpu_supports("avx512f")) {
        check_width(ckpt_xxh3_64_avx512, ckpt_xxh3_update_avx512, ckpt_xxh3_digest_avx512);
        ran++;
    }
    if (!ran) printf("  (no AVX2 on this CPU: only the baseline path checked)\n");
}
#endif

int main(void) {
    RUN(known_answer);
    RUN(dispatched_matches_libxxhash);
#ifdef CKPT_XXH_X86
    RUN(each_width_matches_libxxhash);
#endif
    return harness_end();
}
