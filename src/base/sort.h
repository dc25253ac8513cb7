/* sort.h - the one sort for long arrays that arrive mostly in order. */
#ifndef CKPT_SORT_H
#define CKPT_SORT_H

#include <stddef.h>

/* Sorts n elements of `size` bytes at base by cmp (<0, 0, >0), stably, with
 * a natural merge sort: the ascending runs the input already holds are
 * found in one pass and merged pairwise, in place, so an array in order
 * costs n - 1 comparisons and one in r runs O(n log r) (a zip directory in
 * writing order, the keys of a state_dict in insertion order: a few runs
 * each, where qsort's merge sort spends log2(n) comparisons per element).
 * A merge skips what is in place already and gallops (timsort's) through
 * runs that interleave in long stretches, as numbered names do. 0, or
 * CKPT_E_NOMEM (nothing recorded: the caller names what it sorted) when
 * the scratch copy of half the array cannot be allocated; base is then
 * unchanged. */
int ckpt_sort(void *base, size_t n, size_t size, int (*cmp)(const void *, const void *));

#endif
