/* alloc.h - the one allocator hook, overflow-checked arithmetic, and the
 * arena that owns everything a ckpt_file builds. */
#ifndef CKPT_ALLOC_H
#define CKPT_ALLOC_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

void *ckpt_malloc(size_t size);
void *ckpt_realloc(void *p, size_t size);
void ckpt_free(void *p);

/* 1 when a op b overflows (result not written), else 0 and *r = a op b. */
static inline int ckpt_mul_overflow(uint64_t a, uint64_t b, uint64_t *r) {
    return __builtin_mul_overflow(a, b, r);
}
static inline int ckpt_add_overflow(uint64_t a, uint64_t b, uint64_t *r) {
    return __builtin_add_overflow(a, b, r);
}

/* A bump allocator: many small allocations, one free. Blocks come from
 * ckpt_malloc; allocations are zeroed and 16-byte aligned, but for
 * strings (ckpt_arena_strndup: packed, unaligned) and raw ones. Functions
 * return NULL on allocation failure or size overflow (the caller reports
 * CKPT_E_NOMEM with its own context). A zeroed struct is an empty arena.
 * A block is never zeroed as a whole: each allocation zeroes its own
 * bytes (a few stores, inlined at the caller for a struct), so that text
 * and arrays the caller fills are written once, not twice, and no page is
 * touched before it is used. */
typedef struct ckpt_arena {
    struct arena_block *head;
    uint64_t total;     /* bytes handed out, for memory accounting */
    unsigned char *cur; /* the unused rest of the current block */
    size_t room;        /* its size in bytes (0: none) */
} ckpt_arena;

/* The slow path of ckpt_arena_alloc/_raw: a new block. */
void *ckpt_arena_take(ckpt_arena *a, size_t size, int zero);

/* size bytes from the current block, not zeroed, or NULL when it has no
 * room for them. */
static inline void *ckpt_arena_bump(ckpt_arena *a, size_t size, size_t *need) {
    *need = (size + 15u) & ~(size_t)15u; /* wraps below size on overflow */
    if (*need < size || *need == 0 || *need > a->room) return NULL;
    void *p = a->cur;
    a->cur += *need;
    a->room -= *need;
    a->total += *need;
    return p;
}
static inline void *ckpt_arena_alloc(ckpt_arena *a, size_t size) {
    size_t need;
    void *p = ckpt_arena_bump(a, size, &need);
    return p ? memset(p, 0, need) : ckpt_arena_take(a, size, 1);
}
/* Like ckpt_arena_alloc but never zeroed: for bytes the caller fills
 * entirely (a zip member, a pool of names, a copied array). */
static inline void *ckpt_arena_alloc_raw(ckpt_arena *a, size_t size) {
    size_t need;
    void *p = ckpt_arena_bump(a, size, &need);
    return p ? p : ckpt_arena_take(a, size, 0);
}
/* n * size bytes, with the multiplication checked. */
static inline void *ckpt_arena_array(ckpt_arena *a, size_t n, size_t size) {
    uint64_t total;
    if (ckpt_mul_overflow(n, size, &total) || total > SIZE_MAX) return NULL;
    return ckpt_arena_alloc(a, (size_t)total);
}
/* Copy of s[0..n) plus a terminating NUL. */
char *ckpt_arena_strndup(ckpt_arena *a, const char *s, size_t n);
char *ckpt_arena_strdup(ckpt_arena *a, const char *s);
/* printf into the arena. */
char *ckpt_arena_printf(ckpt_arena *a, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Grows *arr (elements of elem bytes, capacity *cap) to hold `need`
 * elements, doubling; old contents are copied, the rest zeroed. Returns
 * 0 or -1. The check that there is room already is inlined at the caller
 * (a dict's keys, the pickle machine's marks: once per item); the growth
 * is ckpt_arena_regrow. */
int ckpt_arena_regrow(ckpt_arena *a, void **arr, size_t *cap, size_t need, size_t elem);
static inline int ckpt_arena_grow(ckpt_arena *a, void **arr, size_t *cap, size_t need,
                                  size_t elem) {
    return need <= *cap ? 0 : ckpt_arena_regrow(a, arr, cap, need, elem);
}
void ckpt_arena_free(ckpt_arena *a);

#endif
