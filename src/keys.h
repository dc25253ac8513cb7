/* keys.h - internals of the key audit: the manifest, a string hash map,
 * key segments and wrapper segments, and inferred rewrites. Shared by
 * manifest.c, keys.c, match.c, diff.c and rename.c. */
#ifndef CKPT_KEYS_H
#define CKPT_KEYS_H

#include "alloc.h"
#include "ckpt.h"

#define CKPT_KEYS_NONE SIZE_MAX /* "no index" in pairings and lookups */

/* ------------------------------------------------------------ hash map */

/* Open addressing (linear probing, load <= 1/2) from byte strings to a
 * size_t. Keys are borrowed: they must outlive the map. The hash is XXH3
 * with a per-process seed taken from an address (ASLR), so hostile names
 * cannot be chosen to collide. A zeroed struct is an empty map. */
typedef struct ckpt_strmap_slot {
    const char *s; /* NULL: empty slot */
    size_t len;
    uint64_t hash;
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
 * existing). Returns 1 when inserted, 0 when present, CKPT_E_NOMEM. */
int ckpt_strmap_put(ckpt_strmap *m, const char *s, size_t len, size_t val,
                    ckpt_strmap_slot **slot);
/* The entry for s, or NULL. hash: ckpt_strmap_hash(s, len). */
ckpt_strmap_slot *ckpt_strmap_find(const ckpt_strmap *m, const char *s,
                                   size_t len, uint64_t hash);
void ckpt_strmap_free(ckpt_strmap *m);

/* ------------------------------------------------------------ manifest */

struct ckpt_manifest {
    ckpt_arena arena;             /* copied strings and shapes */
    const char *name;
    ckpt_manifest_entry *entries; /* ckpt_realloc'd, n used */
    size_t *lens;                 /* strlen of each name */
    size_t n, cap;
    ckpt_strmap index;            /* name -> entry index */
    const char *const *meta_keys; /* metadata (aliases), nmeta pairs */
    const char *const *meta_vals;
    size_t nmeta;
    const ckpt_file *file;        /* the checkpoint, or NULL */
    ckpt_file *owned;             /* closed on free (ckpt_manifest_load) */
};

/* Index of `name` (len bytes) in m, or CKPT_KEYS_NONE. */
size_t ckpt_manifest_lookup(const ckpt_manifest *m, const char *name,
                            size_t len);

/* ------------------------------------------------------------ segments */

/* Wrapper segments that modules insert into keys: torch.compile's
 * OptimizedModule (_orig_mod), FSDP1 and activation checkpointing
 * (FORMATS.md §4.6). Bit i of a wrapper mask is ckpt_wrappers[i]. */
#define CKPT_NWRAPPERS 3
extern const char *const ckpt_wrappers[CKPT_NWRAPPERS]; /* "_orig_mod." ... */

/* Mask of the wrapper segments occurring in key s as whole segments that
 * are not the last one. */
unsigned ckpt_key_wrappers(const char *s, size_t len);
/* Copies s without its wrapper segments into dst (len + 1 bytes) and
 * returns the new length. */
size_t ckpt_key_drop_wrappers(const char *s, size_t len, char *dst);
/* 1 when s[pos..pos+n) is made of whole segments of s: it starts at 0 or
 * after '.', and ends at the end of s, or before '.', or with '.'. */
int ckpt_key_aligned(const char *s, size_t len, size_t pos, size_t n);

/* ------------------------------------------------------------ rewrites */

/* One rewrite of checkpoint keys (see ckpt_match in ckpt.h): drop wrapper
 * segments when `canon`, then replace the leading `strip` (whole segments,
 * "" for none) by `add`. A key that does not start with `strip` is not
 * covered: a rewrite stands for a wrapper around the whole model. */
typedef struct ckpt_rule {
    int canon;
    const char *strip;
    size_t strip_len;
    const char *add;
    size_t add_len;
    /* filled by ckpt_rules_infer */
    uint64_t matches;     /* distinct expected names hit */
    unsigned complexity;  /* segments stripped and added, +2 with canon */
    const char *description;
} ckpt_rule;

/* Writes rule(s) into dst, which must hold len + add_len + 1 bytes, and
 * returns its length; *covered receives 1 when s starts with `strip`
 * (after dropping wrappers), else 0 and dst holds s without the wrappers. */
size_t ckpt_rule_apply(const ckpt_rule *r, const char *s, size_t len, char *dst, int *covered);

/* Candidate rewrites of c's keys towards e's, given the identity pairing
 * (c2e[i]: entry of e with the same name or CKPT_KEYS_NONE). Only rules
 * matching more names than the identity pairing are returned, evaluated
 * and described (strings in `a`), sorted by matches descending, then
 * complexity ascending, then description; at most `max`. Two rules are
 * tied when both matches and complexity are equal. Returns 0 or
 * CKPT_E_NOMEM. */
int ckpt_rules_infer(ckpt_rule *out, size_t max, size_t *nout, ckpt_arena *a,
                     const ckpt_manifest *c, const ckpt_manifest *e,
                     const size_t *c2e);

#endif
