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

/* The point in the sorted v[0..n) between the elements that go before key
 * and the rest: before means cmp(v[i], key) < t (t = 1: <= key, for the
 * left run; t = 0: < key, for the right one). Searched exponentially from
 * the start, or from the end (`from_end`), then by halves: about 2 log2(d)
 * comparisons for a point d elements from where it starts. */
static size_t boundary(const unsigned char *key, const unsigned char *v, size_t n, size_t size,
                       sort_cmp cmp, int t, int from_end) {
    size_t lo = 0, hi = n; /* v[0..lo) go before key, v[hi..n) do not */
    for (size_t d = 1; d <= n; d = d > (SIZE_MAX - 1) / 2 ? SIZE_MAX : 2 * d + 1) {
        if (!from_end) {
            if (cmp(v + (d - 1) * size, key) >= t) {
                hi = d - 1;
                break;
            }
            lo = d;
        } else {
            if (cmp(v + (n - d) * size, key) < t) {
                lo = n - d + 1;
                break;
            }
            hi = n - d;
        }
    }
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cmp(v + mid * size, key) < t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Galloping (timsort's): once one run has given GALLOP elements in a row,
 * the runs interleave in long stretches, each found by boundary() and
 * moved whole. */
#define GALLOP 7

/* Merges a[0..na) (a copy, in tmp) with b[0..nb), which lies in place
 * right after where a was, into out = b - na elements, front to back:
 * what is written never passes what is still to read of b. */
static void merge_lo(unsigned char *out, const unsigned char *a, size_t na, unsigned char *b,
                     size_t nb, size_t size, sort_cmp cmp) {
    size_t wa = 0, wb = 0; /* elements a and b gave in a row */
    while (na && nb) {
        if (wa < GALLOP && wb < GALLOP) {
            if (cmp(b, a) < 0) { /* left first among equals */
                copy1(out, b, size);
                b += size;
                nb--;
                wa = 0;
                wb++;
            } else {
                copy1(out, a, size);
                a += size;
                na--;
                wb = 0;
                wa++;
            }
            out += size;
            continue;
        }
        /* a's stretch up to b[0], then b's below a[0] (one at least) */
        wa = boundary(b, a, na, size, cmp, 1, 0);
        memcpy(out, a, wa * size);
        out += wa * size;
        a += wa * size;
        na -= wa;
        if (!na) break;
        wb = boundary(a, b, nb, size, cmp, 0, 0);
        memmove(out, b, wb * size);
        out += wb * size;
        b += wb * size;
        nb -= wb;
        if (wa < GALLOP && wb < GALLOP) wa = wb = 0;
    }
    memcpy(out, a, na * size); /* what is left of b is in place */
}

/* Merges a[0..na), in place, with b[0..nb) (a copy, in tmp), which lay
 * right after it, into the na + nb elements that end at end, back to
 * front: what is written never passes what is still to read of a. */
static void merge_hi(unsigned char *end, unsigned char *a, size_t na, const unsigned char *b,
                     size_t nb, size_t size, sort_cmp cmp) {
    unsigned char *out = end;
    size_t wa = 0, wb = 0;
    while (na && nb) {
        const unsigned char *x = a + (na - 1) * size, *y = b + (nb - 1) * size;
        if (wa < GALLOP && wb < GALLOP) {
            out -= size;
            if (cmp(y, x) < 0) { /* right last among equals */
                copy1(out, x, size);
                na--;
                wb = 0;
                wa++;
            } else {
                copy1(out, y, size);
                nb--;
                wa = 0;
                wb++;
            }
            continue;
        }
        /* a's stretch above b's last, then b's from a's last (one at least) */
        size_t keep = boundary(y, a, na, size, cmp, 1, 1);
        wa = na - keep;
        out -= wa * size;
        memmove(out, a + keep * size, wa * size);
        na = keep;
        if (!na) break;
        keep = boundary(a + (na - 1) * size, b, nb, size, cmp, 0, 1);
        wb = nb - keep;
        out -= wb * size;
        memcpy(out, b + keep * size, wb * size);
        nb = keep;
        if (wa < GALLOP && wb < GALLOP) wa = wb = 0;
    }
    memcpy(out - nb * size, b, nb * size); /* what is left of a is in place */
}

/* Merges the sorted runs v[0..na) and v[na..na + nb) in place, stably:
 * a's head up to b[0] and b's tail from a's last are in place already;
 * the shorter of what is left is copied to tmp and merged back. */
static void merge(unsigned char *v, size_t na, size_t nb, unsigned char *tmp, size_t size,
                  sort_cmp cmp) {
    unsigned char *a = v, *b = v + na * size;
    /* two runs already in order (a run broken only by the pass limit) */
    if (!na || !nb || cmp(b - size, b) <= 0) return;
    size_t k = boundary(b, a, na, size, cmp, 1, 0);
    a += k * size;
    na -= k;
    nb = boundary(b - size, b, nb, size, cmp, 0, 1); /* b[0] < a's last: nb >= 1 */
    if (na <= nb) {
        memcpy(tmp, a, na * size);
        merge_lo(a, tmp, na, b, nb, size, cmp);
    } else {
        memcpy(tmp, b, nb * size);
        merge_hi(b + nb * size, a, na, tmp, nb, size, cmp);
    }
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
    /* the shorter run of a merge, at most half of them */
    unsigned char *tmp = n / 2 <= SIZE_MAX / size ? ckpt_malloc(n / 2 * size) : NULL;
    if (!tmp) {
        ckpt_free(starts);
        return CKPT_E_NOMEM;
    }
    while (runs > 1) {
        size_t out = 0;
        for (size_t r = 0; r < runs; r += 2) {
            size_t lo = starts[r], mid = starts[r + 1], hi = r + 2 <= runs ? starts[r + 2] : mid;
            merge(v + lo * size, mid - lo, hi - mid, tmp, size, cmp);
            starts[out++] = lo;
        }
        starts[out] = n;
        runs = out;
    }
    ckpt_free(starts);
    ckpt_free(tmp);
    return 0;
}
