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
 * ckpt_malloc; allocations are zeroed and 16-byte aligned. Functions
 * return NULL on allocation failure or size overflow (the caller reports
 * CKPT_E_NOMEM with its own context). A zeroed struct is an empty arena. */
typedef struct ckpt_arena {
    struct arena_block *head;
    uint64_t total; /* bytes handed out, for memory accounting */
} ckpt_arena;

void *ckpt_arena_alloc(ckpt_arena *a, size_t size);
/* Like ckpt_arena_alloc but not zeroed, for the many small structs a
 * caller fills entirely (the pickle machine's str values in scan mode). */
void *ckpt_arena_alloc_raw(ckpt_arena *a, size_t size);
/* n * size bytes, with the multiplication checked. */
void *ckpt_arena_array(ckpt_arena *a, size_t n, size_t size);
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
