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
 */
#ifndef CKPT_TESTS_FAIL_ALLOC_H
#define CKPT_TESTS_FAIL_ALLOC_H

#include <stdlib.h>

#include "ckpt.h"

static int fail_alloc_at, fail_alloc_calls;

static void *fail_alloc_malloc(void *u, size_t n) {
    (void)u;
    return ++fail_alloc_calls == fail_alloc_at ? NULL : malloc(n);
}

static void *fail_alloc_realloc(void *u, void *p, size_t n) {
    (void)u;
    return ++fail_alloc_calls == fail_alloc_at ? NULL : realloc(p, n);
}

static void fail_alloc_free(void *u, void *p) {
    (void)u;
    free(p);
}

/* From now on, allocation number nth (1-based) fails. */
static inline void fail_alloc_arm(int nth) {
    static const ckpt_allocator al = {fail_alloc_malloc, fail_alloc_realloc, fail_alloc_free, NULL};
    fail_alloc_at = nth;
    fail_alloc_calls = 0;
    ckpt_set_allocator(&al);
}

static inline void fail_alloc_disarm(void) { ckpt_set_allocator(NULL); }

#endif
