/* sort.c - a natural merge sort (see sort.h). */
#include "base/sort.h"

#include <stdint.h>
#include <string.h>

#include "base/alloc.h"
#include "ckpt.h"

typedef int (*sort_cmp)(const void *, const void *);

/* One element, copied with a constant size for the sizes callers sort
 * (a pointer, small structs: inlined moves), else with memcpy. A call to
 * memcpy per element cost 15M of 679M instructions opening a 100k-tensor
 * .pt (a loop of words cost more than the call). */
static inline void copy1(unsigned char *out, const unsigned char *in, size_t size) {
    switch (size) {
    case 8: memcpy(out, in, 8); break;
    case 16: memcpy(out, in, 16); break;
    case 24: memcpy(out, in, 24); break;
    case 32: memcpy(out, in, 32); break;
    default: memcpy(out, in, size);
    }
}

/* Merges the sorted ranges [a, a + na) and [b, b + nb) (elements of
 * `size` bytes) into out, left first among equals (stable). */
static void merge(unsigned char *out, const unsigned char *a, size_t na, const unsigned char *b,
                  size_t nb, size_t size, sort_cmp cmp) {
    /* two runs already in order (a run broken only by the pass limit) */
    if (na && nb && cmp(a + (na - 1) * size, b) <= 0) {
        memcpy(out, a, na * size);
        memcpy(out + na * size, b, nb * size);
        return;
    }
    while (na && nb) {
        if (cmp(b, a) < 0) {
            copy1(out, b, size);
            b += size;
            nb--;
        } else {
            copy1(out, a, size);
            a += size;
            na--;
        }
        out += size;
    }
    memcpy(out, a, na * size);
    memcpy(out + na * size, b, nb * size);
}

int ckpt_sort(void *base, size_t n, size_t size, int (*cmp)(const void *, const void *)) {
    unsigned char *v = base;
    /* run starts, one slot more for the end; halved by every pass. Found
     * in one pass, allocated at the first descent: an array in order (the
     * common case) allocates nothing */
    size_t *starts = NULL, runs = 0;
    for (size_t i = 1; i < n; i++) {
        if (cmp(v + (i - 1) * size, v + i * size) <= 0) continue;
        if (!starts) {
            if (n >= SIZE_MAX / sizeof *starts || !(starts = ckpt_malloc((n + 1) * sizeof *starts)))
                return CKPT_E_NOMEM;
            starts[runs++] = 0;
        }
        starts[runs++] = i;
    }
    if (!starts) return 0;
    starts[runs] = n;
    unsigned char *tmp = n <= SIZE_MAX / size ? ckpt_malloc_huge(n * size) : NULL;
    if (!tmp) {
        ckpt_free(starts);
        return CKPT_E_NOMEM;
    }
    unsigned char *src = v, *dst = tmp;
    while (runs > 1) {
        size_t out = 0;
        for (size_t r = 0; r < runs; r += 2) {
            size_t lo = starts[r], mid = starts[r + 1], hi = r + 2 <= runs ? starts[r + 2] : mid;
            merge(dst + lo * size, src + lo * size, mid - lo, src + mid * size, hi - mid, size,
                  cmp);
            starts[out++] = lo;
        }
        starts[out] = n;
        runs = out;
        unsigned char *t = src;
        src = dst;
        dst = t;
    }
    if (src != v) memcpy(v, src, n * size);
    ckpt_free(starts);
    ckpt_free(tmp);
    return 0;
}
