/* acct.h - an accounting allocator hook for memory tests: the live bytes
 * allocated through ckpt's allocator and their peak; an allocation past
 * acct_budget live bytes fails. Tests check memory this way, never time. */
#ifndef CKPT_TESTS_ACCT_H
#define CKPT_TESTS_ACCT_H

#include <stdlib.h>
#include <string.h>

#include "ckpt.h"

static size_t acct_live, acct_peak, acct_budget = (size_t)512 << 20;

static void *acct_malloc(void *u, size_t n) {
    (void)u;
    if (n > acct_budget - acct_live) return NULL;
    size_t *p = malloc(n + 16);
    if (!p) return NULL;
    *p = n;
    acct_live += n;
    if (acct_live > acct_peak) acct_peak = acct_live;
    return (char *)p + 16;
}

static void acct_free(void *u, void *q) {
    (void)u;
    if (!q) return;
    size_t *p = (size_t *)(void *)((char *)q - 16);
    acct_live -= *p;
    free(p);
}

static void *acct_realloc(void *u, void *q, size_t n) {
    if (!q) return acct_malloc(u, n);
    size_t old = *(size_t *)(void *)((char *)q - 16);
    void *nq = acct_malloc(u, n);
    if (!nq) return NULL;
    memcpy(nq, q, old < n ? old : n);
    acct_free(u, q);
    return nq;
}

static const ckpt_allocator acct_allocator = {acct_malloc, acct_realloc, acct_free, NULL};

#endif
