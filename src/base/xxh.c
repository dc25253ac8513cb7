/* xxh.c - XXH3-64 at the CPU's vector width (xxh.h). */
#include "base/xxh.h"

#include "base/xxh_simd.h"

#include <ckpt.h>

enum width { SSE2, AVX2, AVX512 };

/* libgcc's cpu model checks the OS saves the registers (XCR0) too. */
static enum width width(void) {
#ifdef CKPT_XXH_X86
    if (__builtin_cpu_supports("avx512f")) return AVX512;
    if (__builtin_cpu_supports("avx2")) return AVX2;
#endif
    return SSE2;
}

void ckpt_xxh3_reset(XXH3_state_t *st) { (void)XXH3_64bits_reset(st); }

void ckpt_xxh3_update(XXH3_state_t *st, const void *p, size_t n) {
    switch (width()) {
#ifdef CKPT_XXH_X86
    case AVX512: ckpt_xxh3_update_avx512(st, p, n); return;
    case AVX2: ckpt_xxh3_update_avx2(st, p, n); return;
#endif
    default: (void)XXH3_64bits_update(st, p, n);
    }
}

uint64_t ckpt_xxh3_digest(const XXH3_state_t *st) {
    switch (width()) {
#ifdef CKPT_XXH_X86
    case AVX512: return ckpt_xxh3_digest_avx512(st);
    case AVX2: return ckpt_xxh3_digest_avx2(st);
#endif
    default: return XXH3_64bits_digest(st);
    }
}

uint64_t ckpt_xxh3_64(const void *data, size_t size) {
    const void *p = size ? data : "";
    switch (width()) {
#ifdef CKPT_XXH_X86
    case AVX512: return ckpt_xxh3_64_avx512(p, size);
    case AVX2: return ckpt_xxh3_64_avx2(p, size);
#endif
    default: return XXH3_64bits(p, size);
    }
}
