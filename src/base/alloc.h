/* alloc.h - the one allocator hook, overflow-checked arithmetic, and the
 * arena that owns everything a ckpt_file builds. */
#ifndef CKPT_ALLOC_H
#define CKPT_ALLOC_H

#include <stddef.h>
#include <stdint.h>

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
 * strings (ckpt_arena_strndup: packed, unaligned). Functions
 * return NULL on allocation failure or size overflow (the caller reports
 * CKPT_E_NOMEM with its own context). A zeroed struct is an empty arena.
 * A shared block is zeroed once when it is made, so that the many small
 * allocations of a parse (a few per pickle opcode) are a pointer bump
 * inlined at the caller, not a call and a memset each. */
typedef struct ckpt_arena {
    struct arena_block *head;
    uint64_t total;     /* bytes handed out, for memory accounting */
    unsigned char *cur; /* the zeroed, unused rest of the current block */
    size_t room;        /* its size in bytes (0: none) */
} ckpt_arena;

/* The slow path of ckpt_arena_alloc/_raw: a new block. */
void *ckpt_arena_take(ckpt_arena *a, size_t size, int zero);

static inline void *ckpt_arena_alloc(ckpt_arena *a, size_t size) {
    size_t need = (size + 15u) & ~(size_t)15u; /* wraps below size on overflow */
    if (need < size || need == 0 || need > a->room) return ckpt_arena_take(a, size, 1);
    void *p = a->cur;
    a->cur += need;
    a->room -= need;
    a->total += need;
    return p;
}
/* Like ckpt_arena_alloc but not zeroed when it needs a block of its own
 * (a large copy the caller fills entirely: a zip member, a pool of
 * names); small ones come zeroed from a shared block all the same. */
void *ckpt_arena_alloc_raw(ckpt_arena *a, size_t size);
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
 * elements, doubling; old contents are copied. Returns 0 or -1. */
int ckpt_arena_grow(ckpt_arena *a, void **arr, size_t *cap, size_t need, size_t elem);
void ckpt_arena_free(ckpt_arena *a);

#endif
