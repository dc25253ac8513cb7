/* test_sort.c - ckpt_sort (natural merge sort) against qsort, the
 * decimal indices torch names its storages with, and the arena's zeroing. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/decimal.h"
#include "base/sort.h"
#include "ckpt.h"
#include "harness.h"

typedef struct item {
    unsigned key, seq;
} item;

static int by_key(const void *pa, const void *pb) {
    const item *x = pa, *y = pb;
    return (x->key > y->key) - (x->key < y->key);
}

static int by_key_then_seq(const void *pa, const void *pb) {
    const item *x = pa, *y = pb;
    int c = by_key(pa, pb);
    return c ? c : (x->seq > y->seq) - (x->seq < y->seq);
}

/* Sorts v[0..n) with ckpt_sort by key alone and checks it against qsort by
 * (key, seq): equal keys keep their input order (stable). */
static void check_sorted(item *v, size_t n) {
    item *want = malloc((n ? n : 1) * sizeof *want);
    if (!want) abort();
    for (size_t i = 0; i < n; i++) v[i].seq = (unsigned)i;
    memcpy(want, v, n * sizeof *v);
    qsort(want, n, sizeof *want, by_key_then_seq);
    CHECK_EQ_INT(ckpt_sort(v, n, sizeof *v, by_key), 0);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += v[i].key != want[i].key || v[i].seq != want[i].seq;
    CHECK_EQ_INT(bad, 0);
    free(want);
}

TEST(sort_matches_qsort) {
    enum { N = 5000 };
    static item v[N];
    /* empty, one, in order, reversed (N runs), torch's member names'
     * shape (runs per digit count), random with many equal keys */
    check_sorted(v, 0);
    v[0].key = 7;
    check_sorted(v, 1);
    for (unsigned i = 0; i < N; i++) v[i].key = i;
    check_sorted(v, N);
    for (unsigned i = 0; i < N; i++) v[i].key = N - i;
    check_sorted(v, N);
    for (unsigned i = 0; i < N; i++) v[i].key = i < 10 ? i * 1000 : i < 100 ? i * 10 : i;
    check_sorted(v, N);
    srand(1);
    for (size_t n = 2; n < 70; n++) {
        for (size_t i = 0; i < n; i++) v[i].key = (unsigned)rand() % 8;
        check_sorted(v, n);
    }
    for (unsigned i = 0; i < N; i++) v[i].key = (unsigned)rand() % 100;
    check_sorted(v, N);
}

static size_t ncmp;
static int by_key_counted(const void *pa, const void *pb) {
    ncmp++;
    return by_key(pa, pb);
}

/* Two runs, of na and nb keys, that interleave in stretches of `stretch`
 * equal-or-rising keys (the left run's last key of a stretch equals the
 * right one's first: ties cross the boundary); returns the comparisons
 * ckpt_sort took to merge them (past the na + nb - 1 that find the runs). */
static size_t sort_two_runs(item *v, size_t na, size_t nb, size_t stretch) {
    for (size_t i = 0; i < na; i++)
        v[i].key = (unsigned)((i / stretch) * 2 * stretch + i % stretch);
    for (size_t i = 0; i < nb; i++)
        v[na + i].key = (unsigned)((i / stretch) * 2 * stretch + stretch - 1 + i % stretch);
    for (size_t i = 0; i < na + nb; i++) v[i].seq = (unsigned)i;
    item *want = malloc((na + nb) * sizeof *want);
    if (!want) abort();
    memcpy(want, v, (na + nb) * sizeof *v);
    qsort(want, na + nb, sizeof *want, by_key_then_seq);
    ncmp = 0;
    CHECK_EQ_INT(ckpt_sort(v, na + nb, sizeof *v, by_key_counted), 0);
    size_t bad = 0;
    for (size_t i = 0; i < na + nb; i++) bad += v[i].key != want[i].key || v[i].seq != want[i].seq;
    CHECK_EQ_INT(bad, 0);
    free(want);
    return ncmp - (na + nb - 1);
}

TEST(sort_gallops_through_stretches) {
    enum { N = 8192 };
    static item v[2 * N];
    /* runs that interleave in stretches of 256: galloping finds each
     * stretch in about 2 log2(256) comparisons (about 550 in all), where
     * one at a time takes one an element (about N); the left run shorter (merged front to
     * back), then the right one (back to front) */
    size_t lo = sort_two_runs(v, N / 2, N, 256), hi = sort_two_runs(v, N, N / 2, 256);
    CHECK(lo < N / 8);
    CHECK(hi < N / 8);
    /* short stretches (no galloping, one at a time) and lengths around
     * the switch to galloping, both ways round */
    for (size_t stretch = 1; stretch < 20; stretch++) {
        sort_two_runs(v, 300, 301 + stretch, stretch);
        sort_two_runs(v, 301 + stretch, 300, stretch);
    }
    /* torch's names: a state_dict's keys in insertion order, numbered
     * layers and blocks, sorted as text */
    for (unsigned i = 0; i < N; i++) {
        unsigned layer = i / 64, block = i % 64;
        unsigned l = layer < 10 ? layer * 100 : layer < 100 ? layer * 10 + 1 : layer;
        v[i].key = l * 1000 + (block < 10 ? block * 10 : block);
    }
    check_sorted(v, N);
}

static size_t allocs_left;
static void *failing_malloc(void *u, size_t n) {
    (void)u;
    if (allocs_left == 0) return NULL;
    allocs_left--;
    return malloc(n);
}
static void *plain_realloc(void *u, void *p, size_t n) {
    (void)u;
    return realloc(p, n);
}
static void plain_free(void *u, void *p) {
    (void)u;
    free(p);
}

TEST(sort_out_of_memory) {
    item v[4] = {{3, 0}, {1, 1}, {2, 2}, {0, 3}}, in[4];
    memcpy(in, v, sizeof v);
    const ckpt_allocator failing = {failing_malloc, plain_realloc, plain_free, NULL};
    ckpt_set_allocator(&failing);
    for (size_t ok = 0; ok < 2; ok++) { /* the run starts, then the scratch copy */
        allocs_left = ok;
        CHECK_EQ_INT(ckpt_sort(v, 4, sizeof *v, by_key), CKPT_E_NOMEM);
        CHECK(memcmp(v, in, sizeof v) == 0); /* unchanged */
    }
    /* an array in order needs no memory */
    allocs_left = 0;
    item sorted[3] = {{1, 0}, {2, 1}, {2, 2}};
    CHECK_EQ_INT(ckpt_sort(sorted, 3, sizeof *sorted, by_key), 0);
    ckpt_set_allocator(NULL);
    CHECK_EQ_INT(ckpt_sort(v, 4, sizeof *v, by_key), 0);
    CHECK_EQ_INT(v[0].key, 0);
    CHECK_EQ_INT(v[3].key, 3);
}

/* Blocks come from malloc dirty: the arena zeroes what ckpt_arena_alloc
 * and the grown tail of ckpt_arena_grow hand out, never the block. */
static void *dirty_malloc(void *u, size_t n) {
    (void)u;
    void *p = malloc(n);
    if (p) memset(p, 0xA5, n);
    return p;
}

static size_t nonzero(const unsigned char *p, size_t n) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += p[i] != 0;
    return bad;
}

TEST(arena_zeroes_what_it_hands_out) {
    const ckpt_allocator dirty = {dirty_malloc, plain_realloc, plain_free, NULL};
    ckpt_set_allocator(&dirty);
    ckpt_arena a = {0};
    size_t bad = 0;
    /* small ones from shared blocks (several of them), text packed at the
     * top between them, and requests big enough for a block of their own */
    for (size_t i = 0; i < 3000; i++) {
        size_t n = i % 7 == 0 ? 20000 + i : 1 + i % 200;
        unsigned char *p = ckpt_arena_alloc(&a, n);
        CHECK(p != NULL);
        bad += nonzero(p, n);
        char *t = ckpt_arena_strndup(&a, "layer.weight", 12);
        CHECK(t != NULL && strcmp(t, "layer.weight") == 0);
    }
    CHECK_EQ_INT(bad, 0);
    /* a grown array keeps its items and zeroes the rest */
    unsigned *arr = NULL;
    size_t cap = 0;
    for (unsigned i = 0; i < 1000; i++) {
        CHECK_EQ_INT(ckpt_arena_grow(&a, (void **)&arr, &cap, i + 1, sizeof *arr), 0);
        bad += nonzero((const unsigned char *)(arr + i), (cap - i) * sizeof *arr);
        arr[i] = i + 1;
    }
    for (unsigned i = 0; i < 1000; i++) bad += arr[i] != i + 1;
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(cap, 1024);
    ckpt_arena_free(&a);
    ckpt_set_allocator(NULL);
}

/* The arena's shared blocks are a power of two, head included, from 64
 * KiB up to 8 MiB; every block is handed back to the hook's free. */
static size_t sizes[256], nsizes, nlive;

static void *tracking_malloc(void *u, size_t n) {
    (void)u;
    void *p = malloc(n);
    if (p && nsizes < 256) sizes[nsizes++] = n;
    nlive += p != NULL;
    return p;
}

static void tracking_free(void *u, void *p) {
    (void)u;
    nlive -= p != NULL;
    free(p);
}

TEST(arena_blocks_whole_pages) {
    const ckpt_allocator tracking = {tracking_malloc, plain_realloc, tracking_free, NULL};
    ckpt_set_allocator(&tracking);
    ckpt_arena a = {0};
    size_t bad = 0, big = 0;
    for (size_t i = 0; i < 8000; i++) { /* 80 MB in pieces too small for a block of their own */
        unsigned char *p = ckpt_arena_alloc_raw(&a, 10000);
        CHECK(p != NULL);
        if (p) memset(p, 0x5A, 10000);
    }
    for (size_t i = 0; i < nsizes; i++) {
        size_t block = sizes[i];
        big += block == (size_t)8 << 20;
        bad += (block & (block - 1)) != 0 || block < ((size_t)64 << 10) || block > (size_t)8 << 20;
    }
    CHECK_EQ_INT(bad, 0);
    CHECK(big >= 2);
    CHECK(nsizes < 256);
    ckpt_arena_free(&a);
    CHECK_EQ_INT(nlive, 0);
    ckpt_set_allocator(NULL);
}

static int index_of(const char *s, size_t limit) {
    size_t out = 12345;
    if (!ckpt_decimal_index(s, strlen(s), limit, &out)) return -1;
    return (int)out;
}

TEST(decimal_index) {
    CHECK_EQ_INT(index_of("0", 1), 0);
    CHECK_EQ_INT(index_of("7", 100), 7);
    CHECK_EQ_INT(index_of("99", 100), 99);
    CHECK_EQ_INT(index_of("100", 100), -1); /* not below the limit */
    CHECK_EQ_INT(index_of("0", 0), -1);
    CHECK_EQ_INT(index_of("", 10), -1);
    CHECK_EQ_INT(index_of("01", 10), -1); /* str(1) is "1" */
    CHECK_EQ_INT(index_of("00", 10), -1);
    CHECK_EQ_INT(index_of("-1", 10), -1);
    CHECK_EQ_INT(index_of("+1", 10), -1);
    CHECK_EQ_INT(index_of("1a", 10), -1);
    CHECK_EQ_INT(index_of(" 1", 10), -1);
    CHECK_EQ_INT(index_of("1000000", 1000001), 1000000);
    /* no overflow near SIZE_MAX: 20 digits and more */
    size_t out = 0;
    CHECK_EQ_INT(ckpt_decimal_index("18446744073709551615", 20, SIZE_MAX, &out), 0);
    CHECK_EQ_INT(ckpt_decimal_index("99999999999999999999999", 23, SIZE_MAX, &out), 0);
    CHECK_EQ_INT(ckpt_decimal_index("18446744073709551614", 20, SIZE_MAX, &out),
                 SIZE_MAX == UINT64_MAX);
}

/* A reference natural compare, token by token: digit runs by value
 * (length without leading zeros, then digits), other bytes as bytes;
 * names equal that way by strcmp. */
static int natural_ref(const char *a, const char *b) {
    const char *x = a, *y = b;
    while (*x && *y) {
        int dx = *x >= '0' && *x <= '9', dy = *y >= '0' && *y <= '9';
        if (dx && dy) {
            size_t nx = strspn(x, "0123456789"), ny = strspn(y, "0123456789"), zx = 0, zy = 0;
            while (zx + 1 < nx && x[zx] == '0') zx++;
            while (zy + 1 < ny && y[zy] == '0') zy++;
            if (nx - zx != ny - zy) return nx - zx < ny - zy ? -1 : 1;
            int c = memcmp(x + zx, y + zy, nx - zx);
            if (c) return c;
            x += nx, y += ny;
            continue;
        }
        /* a digit run compares as its first digit with other bytes */
        if (*x != *y) return (unsigned char)*x < (unsigned char)*y ? -1 : 1;
        x++, y++;
    }
    if (*x || *y) return *x ? 1 : -1;
    return strcmp(a, b);
}

TEST(natural_order) {
    /* torch's names: numbers by value; ties of equal value by bytes, then
     * by position */
    const char *names[] = {"layers.10.weight",
                           "layers.2.weight",
                           "layers.2.bias",
                           "b",
                           "a10",
                           "a9",
                           "a09",
                           "a9",
                           "",
                           "x1y02",
                           "x01y2",
                           "x1y2",
                           "n123456789012345678901234567890",
                           "n99",
                           "0",
                           "00",
                           "a.b",
                           "a0"};
    size_t n = sizeof names / sizeof *names, order[sizeof names / sizeof *names];
    CHECK_EQ_INT(ckpt_natural_order(order, names, n), 0);
    const char *want[] = {"",
                          "0",
                          "00",
                          "a.b",
                          "a0",
                          "a09",
                          "a9",
                          "a9",
                          "a10",
                          "b",
                          "layers.2.bias",
                          "layers.2.weight",
                          "layers.10.weight",
                          "n99",
                          "n123456789012345678901234567890",
                          "x01y2",
                          "x1y02",
                          "x1y2"};
    for (size_t i = 0; i < n; i++) CHECK_EQ_STR(names[order[i]], want[i]);
    CHECK(order[6] == 5 && order[7] == 7); /* the two "a9": by position */
    /* 300-digit runs (the long length form) against shorter ones */
    char big[2][310];
    memset(big[0], '9', 300), memset(big[1], '1', 301);
    big[0][300] = big[1][301] = '\0';
    const char *two[] = {big[1], big[0], "9"};
    CHECK_EQ_INT(ckpt_natural_order(order, two, 3), 0);
    CHECK(order[0] == 2 && order[1] == 1 && order[2] == 0);
    /* random names against the reference, and names in order stay so */
    enum { N = 3000 };
    static char buf[N][16];
    static const char *rnd[N];
    static size_t got[N];
    unsigned seed = 12345;
    for (size_t i = 0; i < N; i++) {
        size_t len = 0;
        for (size_t k = 0, m = (seed = seed * 1103515245u + 12345u) >> 16 & 7; k <= m; k++) {
            unsigned r = (seed = seed * 1103515245u + 12345u) >> 16;
            buf[i][len++] = "0019.ab"[r % 7];
        }
        buf[i][len] = '\0';
        rnd[i] = buf[i];
    }
    CHECK_EQ_INT(ckpt_natural_order(got, rnd, N), 0);
    size_t bad = 0;
    for (size_t i = 1; i < N; i++) {
        int c = natural_ref(rnd[got[i - 1]], rnd[got[i]]);
        bad += c > 0 || (c == 0 && got[i - 1] > got[i]);
    }
    CHECK_EQ_INT(bad, 0);
    static char seq[N][24];
    for (size_t i = 0; i < N; i++) {
        snprintf(seq[i], sizeof seq[i], "layers.%zu.weight", i);
        rnd[i] = seq[i];
    }
    CHECK_EQ_INT(ckpt_natural_order(got, rnd, N), 0);
    for (size_t i = 0; i < N; i++) bad += got[i] != i;
    CHECK_EQ_INT(bad, 0);
    /* arguments */
    CHECK_EQ_INT(ckpt_natural_order(NULL, NULL, 0), 0);
    CHECK_EQ_INT(ckpt_natural_order(NULL, names, 1), CKPT_E_INVALID_ARG);
    CHECK_EQ_INT(ckpt_natural_order(order, NULL, 1), CKPT_E_INVALID_ARG);
    const char *hole[] = {"a", NULL};
    CHECK_EQ_INT(ckpt_natural_order(order, hole, 2), CKPT_E_INVALID_ARG);
}

int main(void) {
    RUN(sort_matches_qsort);
    RUN(sort_gallops_through_stretches);
    RUN(sort_out_of_memory);
    RUN(decimal_index);
    RUN(arena_zeroes_what_it_hands_out);
    RUN(arena_blocks_whole_pages);
    RUN(natural_order);
    return harness_end();
}
