/* alloc.c - the allocator hook and the arena. */
#include "base/alloc.h"
#include "base/pages.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"

static void *default_malloc(void *u, size_t n) {
    (void)u;
    return malloc(n);
}
static void *default_realloc(void *u, void *p, size_t n) {
    (void)u;
    return realloc(p, n);
}
static void default_free(void *u, void *p) {
    (void)u;
    free(p);
}

static ckpt_allocator hook = {default_malloc, default_realloc, default_free, NULL};

void ckpt_set_allocator(const ckpt_allocator *a) {
    if (a)
        hook = *a;
    else
        hook = (ckpt_allocator){default_malloc, default_realloc, default_free, NULL};
}

void *ckpt_malloc(size_t size) { return hook.malloc_fn(hook.user, size ? size : 1); }
void *ckpt_realloc(void *p, size_t size) { return hook.realloc_fn(hook.user, p, size ? size : 1); }
void ckpt_free(void *p) {
    if (p) hook.free_fn(hook.user, p);
}

/* Shared blocks are 64 KiB while the arena is small, then a power of two
 * up to 8 MiB, at most a sixteenth of what the arena holds (so that the
 * unused tail of the last one stays within that): a parse of many small
 * records makes few blocks. A request larger than 16 KiB gets a block of
 * its own so that big arrays do not waste the tail of a shared block. */
#define ARENA_BLOCK 65536u
#define ARENA_BLOCK_MAX ((size_t)8 << 20)
#define ARENA_OWN_BLOCK (ARENA_BLOCK / 4)
#define ARENA_ALIGN 16u

struct arena_block {
    struct arena_block *next;
    _Alignas(16) unsigned char data[];
};

/* A block of `size` bytes, its head included. Its pages are not advised
 * MADV_HUGEPAGE: measured on the project's VM under load (a 100k-tensor
 * .pt, interleaved runs), a 2 MiB fault that must compact or take memory
 * back from the host cost more than the 512 small faults it saves (verify
 * CPU median 0.30 s against 0.125 s, inspect 0.34 s against 0.26 s; only
 * on an idle machine was it faster). Its pages are populated at once
 * (ckpt_pages_populate: blocks of 64 KiB and more), which costs the same
 * page allocations without a fault taken for each page: verify of a
 * 100k-tensor .pt 1.8k page-fault exceptions instead of 19.8k, CPU median
 * of 15 interleaved runs 0.097 s against 0.108 s, peak RSS +2.3 MiB (the
 * unused end of the last block). */
static struct arena_block *new_block(size_t size) {
    struct arena_block *b = ckpt_malloc(size);
    if (!b) return NULL;
    ckpt_pages_populate(b, size);
    b->next = NULL;
    return b;
}

/* size bytes, zeroed when zero is set, when the current block has no
 * room for them (ckpt_arena_bump failed). */
void *ckpt_arena_take(ckpt_arena *a, size_t size, int zero) {
    if (size > SIZE_MAX - ARENA_ALIGN) return NULL;
    size_t need = (size + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
    if (need == 0) need = ARENA_ALIGN;
    if (need > ARENA_OWN_BLOCK) {
        if (need > SIZE_MAX - sizeof(struct arena_block)) return NULL;
        struct arena_block *big = new_block(sizeof(struct arena_block) + need);
        if (!big) return NULL;
        big->next = a->head; /* the current block stays current */
        a->head = big;
        if (zero) memset(big->data, 0, need);
        a->total += need;
        return big->data;
    }
    if (need > a->room) {
        size_t cap = ARENA_BLOCK;
        while (cap < ARENA_BLOCK_MAX && cap < a->total / 16) cap *= 2;
        struct arena_block *b = new_block(cap);
        if (!b) return NULL;
        cap -= sizeof(struct arena_block);
        b->next = a->head;
        a->head = b;
        a->cur = b->data;
        a->room = cap;
    }
    void *p = a->cur;
    a->cur += need;
    a->room -= need;
    a->total += need;
    return zero ? memset(p, 0, need) : p;
}

/* Text is packed at the top of the current block, the other allocations
 * take its bottom (a->cur stays 16-byte aligned): a million names of ~34
 * bytes take their bytes, not 48 each. */
char *ckpt_arena_strndup(ckpt_arena *a, const char *s, size_t n) {
    if (n == SIZE_MAX) return NULL;
    char *p;
    if (n < a->room) {
        a->room -= n + 1;
        a->total += n + 1;
        p = (char *)a->cur + a->room;
    } else if (!(p = ckpt_arena_take(a, n + 1, 0))) {
        return NULL;
    }
    if (n) memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

char *ckpt_arena_strdup(ckpt_arena *a, const char *s) {
    return ckpt_arena_strndup(a, s, strlen(s));
}

char *ckpt_arena_printf(ckpt_arena *a, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return NULL;
    char *p = ckpt_arena_alloc_raw(a, (size_t)n + 1); /* vsnprintf fills it */
    if (!p) return NULL;
    va_start(ap, fmt);
    vsnprintf(p, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return p;
}

int ckpt_arena_regrow(ckpt_arena *a, void **arr, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t ncap = *cap ? *cap : 4;
    while (ncap < need) {
        if (ncap > SIZE_MAX / 2) return -1;
        ncap *= 2;
    }
    uint64_t bytes;
    if (ckpt_mul_overflow(ncap, elem, &bytes) || bytes > SIZE_MAX) return -1;
    unsigned char *n = ckpt_arena_alloc_raw(a, (size_t)bytes); /* filled below */
    if (!n) return -1;
    if (*cap) memcpy(n, *arr, *cap * elem);
    memset(n + *cap * elem, 0, (ncap - *cap) * elem);
    *arr = n;
    *cap = ncap;
    return 0;
}

void ckpt_arena_free(ckpt_arena *a) {
    struct arena_block *b = a->head;
    while (b) {
        struct arena_block *next = b->next;
        ckpt_free(b);
        b = next;
    }
    a->head = NULL;
    a->total = 0;
    a->cur = NULL;
    a->room = 0;
}
