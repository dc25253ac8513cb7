/* ptrmap.c - the pointer-keyed hash map (ptrmap.h). */
#include "base/ptrmap.h"

#include <stdint.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"

static size_t ptr_slot(const ckpt_ptrmap *m, const void *key) {
    uint64_t h = (uint64_t)(uintptr_t)key * 0x9E3779B97F4A7C15u;
    size_t i = (size_t)(h >> 17) & (m->cap - 1);
    while (m->keys[i] && m->keys[i] != key) i = (i + 1) & (m->cap - 1);
    return i;
}

int ckpt_ptrmap_get(const ckpt_ptrmap *m, const void *key, uint64_t *val) {
    if (!m->cap) return 0;
    size_t i = ptr_slot(m, key);
    if (!m->keys[i]) return 0;
    *val = m->vals[i];
    return 1;
}

int ckpt_ptrmap_put(ckpt_ptrmap *m, const void *key, uint64_t val) {
    if ((m->n + 1) * 2 > m->cap) {
        ckpt_ptrmap old = *m;
        if (old.cap > SIZE_MAX / 2 / sizeof *m->vals) return ckpt_err_nomem();
        size_t cap = old.cap ? old.cap * 2 : 64;
        m->keys = ckpt_malloc(cap * sizeof *m->keys);
        m->vals = ckpt_malloc(cap * sizeof *m->vals);
        if (!m->keys || !m->vals) {
            ckpt_free(m->keys);
            ckpt_free(m->vals);
            *m = old;
            return ckpt_err_nomem();
        }
        memset(m->keys, 0, cap * sizeof *m->keys);
        m->cap = cap;
        m->n = 0;
        for (size_t i = 0; i < old.cap; i++)
            if (old.keys[i]) {
                size_t s = ptr_slot(m, old.keys[i]);
                m->keys[s] = old.keys[i];
                m->vals[s] = old.vals[i];
                m->n++;
            }
        ckpt_free(old.keys);
        ckpt_free(old.vals);
    }
    size_t i = ptr_slot(m, key);
    if (!m->keys[i]) m->n++;
    m->keys[i] = key;
    m->vals[i] = val;
    return 0;
}

void ckpt_ptrmap_free(ckpt_ptrmap *m) {
    ckpt_free(m->keys);
    ckpt_free(m->vals);
    *m = (ckpt_ptrmap){0};
}
