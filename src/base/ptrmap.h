/* ptrmap.h - the one pointer-keyed hash map. */
#ifndef CKPT_PTRMAP_H
#define CKPT_PTRMAP_H

#include <stddef.h>
#include <stdint.h>

/* A pointer-keyed hash map (open addressing) to uint64 values. */
typedef struct ckpt_ptrmap {
    const void **keys;
    uint64_t *vals;
    size_t cap, n;
} ckpt_ptrmap;
/* *val receives the value; 1 if found, else 0. */
int ckpt_ptrmap_get(const ckpt_ptrmap *m, const void *key, uint64_t *val);
/* 0 or CKPT_E_NOMEM (recorded). */
int ckpt_ptrmap_put(ckpt_ptrmap *m, const void *key, uint64_t val);
void ckpt_ptrmap_free(ckpt_ptrmap *m);

#endif
