/* strmap.h - the one string-keyed hash map. */
#ifndef CKPT_STRMAP_H
#define CKPT_STRMAP_H

#include <stddef.h>
#include <stdint.h>

/* Open addressing (linear probing, load <= 1/2) from byte strings to a
 * size_t. Keys are borrowed: they must outlive the map. The hash is XXH3
 * with a per-process seed taken from an address (ASLR), so hostile names
 * cannot be chosen to collide. A zeroed struct is an empty map. */
/* 24 bytes: a manifest of a million names has two million slots. */
typedef struct ckpt_strmap_slot {
    const char *s; /* NULL: empty slot */
    uint32_t len;  /* keys are shorter than 4 GiB (ckpt_strmap_put) */
    uint32_t hash; /* the low 32 bits of the key's hash, which place it */
    size_t val;
} ckpt_strmap_slot;

typedef struct ckpt_strmap {
    ckpt_strmap_slot *slots;
    size_t cap, n; /* cap is 0 or a power of two */
} ckpt_strmap;

uint64_t ckpt_strmap_hash(const char *s, size_t len);
/* Room for `n` keys without rehashing. 0 or CKPT_E_NOMEM (recorded). */
int ckpt_strmap_reserve(ckpt_strmap *m, size_t n);
/* Inserts s -> val unless s is present. *slot receives the entry (new or
 * existing). Returns 1 when inserted, 0 when present, CKPT_E_NOMEM (also
 * for a key of 4 GiB or more). */
int ckpt_strmap_put(ckpt_strmap *m, const char *s, size_t len, size_t val, ckpt_strmap_slot **slot);
/* The same with hash = ckpt_strmap_hash(s, len) computed by the caller. */
int ckpt_strmap_put_hashed(ckpt_strmap *m, const char *s, size_t len, uint64_t hash, size_t val,
                           ckpt_strmap_slot **slot);
/* The entry for s, or NULL. hash: ckpt_strmap_hash(s, len). */
ckpt_strmap_slot *ckpt_strmap_find(const ckpt_strmap *m, const char *s, size_t len, uint64_t hash);
/* Asks the CPU to load the slot `hash` starts probing at, and (once that
 * slot is loaded) the key it holds when its hash matches: a table of a
 * million keys is far larger than the caches, so loops over many keys
 * hash a few keys ahead and prefetch (hints; no effect on results). */
void ckpt_strmap_prefetch(const ckpt_strmap *m, uint64_t hash);
void ckpt_strmap_prefetch_key(const ckpt_strmap *m, uint64_t hash);
void ckpt_strmap_free(ckpt_strmap *m);

#endif
