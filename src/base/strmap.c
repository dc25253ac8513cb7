/* strmap.c - the one string-keyed hash map (strmap.h). */
#include "base/strmap.h"

#include <stdint.h>
#include <string.h>
#include <xxhash.h>

#include "base/alloc.h"
#include "base/error.h"

static uint64_t seed(void) {
    static const char here = 0;
    return (uint64_t)(uintptr_t)&here * 0x9e3779b97f4a7c15u;
}

uint64_t ckpt_strmap_hash(const char *s, size_t len) {
    return XXH3_64bits_withSeed(s, len, seed());
}

/* h: the low 32 bits of the hash (what a slot keeps). */
static ckpt_strmap_slot *probe(ckpt_strmap_slot *slots, size_t cap, const char *s, size_t len,
                               uint32_t h) {
    for (size_t i = h & (cap - 1);; i = (i + 1) & (cap - 1)) {
        ckpt_strmap_slot *sl = &slots[i];
        if (!sl->s || (sl->hash == h && sl->len == len && memcmp(sl->s, s, len) == 0)) return sl;
    }
}

int ckpt_strmap_reserve(ckpt_strmap *m, size_t n) {
    if (n <= m->cap / 2) return 0;
    size_t cap = m->cap ? m->cap : 16;
    while (cap / 2 < n) {
        if (cap > SIZE_MAX / 2 / sizeof(ckpt_strmap_slot))
            return ckpt_err(CKPT_E_NOMEM, "", "", CKPT_NO_OFFSET, "hash table too large");
        cap *= 2;
    }
    ckpt_strmap_slot *slots = ckpt_malloc(cap * sizeof *slots);
    if (!slots) return ckpt_err_nomem();
    memset(slots, 0, cap * sizeof *slots);
    for (size_t i = 0; i < m->cap; i++)
        if (m->slots[i].s)
            *probe(slots, cap, m->slots[i].s, m->slots[i].len, m->slots[i].hash) = m->slots[i];
    ckpt_free(m->slots);
    m->slots = slots;
    m->cap = cap;
    return 0;
}

int ckpt_strmap_put(ckpt_strmap *m, const char *s, size_t len, size_t val,
                    ckpt_strmap_slot **slot) {
    return ckpt_strmap_put_hashed(m, s, len, ckpt_strmap_hash(s, len), val, slot);
}

int ckpt_strmap_put_hashed(ckpt_strmap *m, const char *s, size_t len, uint64_t h, size_t val,
                           ckpt_strmap_slot **slot) {
    if (len > UINT32_MAX)
        return ckpt_err(CKPT_E_NOMEM, "", "", CKPT_NO_OFFSET, "hash table key of %zu bytes", len);
    int rc = ckpt_strmap_reserve(m, m->n + 1);
    if (rc) return rc;
    ckpt_strmap_slot *sl = probe(m->slots, m->cap, s, len, (uint32_t)h);
    *slot = sl;
    if (sl->s) return 0;
    *sl = (ckpt_strmap_slot){s, (uint32_t)len, (uint32_t)h, val};
    m->n++;
    return 1;
}

ckpt_strmap_slot *ckpt_strmap_find(const ckpt_strmap *m, const char *s, size_t len, uint64_t hash) {
    if (!m->cap || len > UINT32_MAX) return NULL;
    ckpt_strmap_slot *sl = probe(m->slots, m->cap, s, len, (uint32_t)hash);
    return sl->s ? sl : NULL;
}

void ckpt_strmap_prefetch(const ckpt_strmap *m, uint64_t hash) {
#if defined(__GNUC__)
    if (m->cap) __builtin_prefetch(&m->slots[(uint32_t)hash & (m->cap - 1)]);
#else
    (void)m;
    (void)hash;
#endif
}

void ckpt_strmap_prefetch_key(const ckpt_strmap *m, uint64_t hash) {
#if defined(__GNUC__)
    if (!m->cap) return;
    const ckpt_strmap_slot *sl = &m->slots[(uint32_t)hash & (m->cap - 1)];
    if (sl->s && sl->hash == (uint32_t)hash) __builtin_prefetch(sl->s);
#else
    (void)m;
    (void)hash;
#endif
}

void ckpt_strmap_free(ckpt_strmap *m) {
    ckpt_free(m->slots);
    memset(m, 0, sizeof *m);
}
