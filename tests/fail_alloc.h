/* fail_alloc.h - an allocator hook whose nth call fails (curl's and
 * sqlite's torture tests): run an operation with n = 1, 2, ... until it
 * succeeds, and check each failure was CKPT_E_NOMEM and left nothing
 * behind.
 *
 *     for (int n = 1; rc != 0; n++) {
 *         fail_alloc_arm(n);
 *         rc = operation();
 *         fail_alloc_disarm();
 *     }
 *
 * Armed with 0 nothing fails: it counts the calls (fail_alloc_calls) and
 * the bytes they asked for (fail_alloc_bytes), for tests of what an
 * operation allocates at all.
 */
#ifndef CKPT_TESTS_FAIL_ALLOC_H
#define CKPT_TESTS_FAIL_ALLOC_H

#include <stdlib.h>

#include "ckpt.h"

static int fail_alloc_at, fail_alloc_calls;
static size_t fail_alloc_bytes;

static void *fail_alloc_malloc(void *u, size_t n) {
    (void)u;
    fail_alloc_bytes += n;
    return ++fail_alloc_calls == fail_alloc_at ? NULL : malloc(n);
}

static void *fail_alloc_realloc(void *u, void *p, size_t n) {
    (void)u;
    fail_alloc_bytes += n;
    return ++fail_alloc_calls == fail_alloc_at ? NULL : realloc(p, n);
}

static void fail_alloc_free(void *u, void *p) {
    (void)u;
    free(p);
}

/* From now on, allocation number nth (1-based; 0: none) fails, and calls
 * and bytes are counted from zero. */
static inline void fail_alloc_arm(int nth) {
    static const ckpt_allocator al = {fail_alloc_malloc, fail_alloc_realloc, fail_alloc_free, NULL};
    fail_alloc_at = nth;
    fail_alloc_calls = 0;
    fail_alloc_bytes = 0;
    ckpt_set_allocator(&al);
}

static inline void fail_alloc_disarm(void) { ckpt_set_allocator(NULL); }

#endif
