/* keys.h - internals of the key audit: the manifest, key segments and
 * wrapper segments, and inferred rewrites. Shared by manifest.c, rules.c,
 * match.c, diff.c, rename.c and hygiene.c. */
#ifndef CKPT_KEYS_H
#define CKPT_KEYS_H

#include "base/alloc.h"
#include "base/strmap.h"
#include "ckpt.h"
#include "model/file.h"

#define CKPT_KEYS_NONE SIZE_MAX /* "no index" in pairings and lookups */

/* ------------------------------------------------------------ manifest */

#define CKPT_MANIFEST_SHAPES_BITS 6
typedef struct ckpt_manifest_shape { /* a shape copied into the arena */
    const uint64_t *dims;
    unsigned ndim;
} ckpt_manifest_shape;

typedef struct ckpt_module_version {
    const char *name;
    int64_t version;
} ckpt_module_version;

struct ckpt_manifest {
    ckpt_arena arena; /* copied strings and shapes */
    const char *name;
    ckpt_manifest_entry *entries; /* ckpt_realloc'd, n used; names < 4 GiB */
    size_t n, cap;
    ckpt_strmap index;                                          /* name -> entry index */
    ckpt_manifest_shape shapes[1 << CKPT_MANIFEST_SHAPES_BITS]; /* recent ones, shared */
    const char *const *meta_keys; /* metadata (aliases), nmeta pairs */
    const char *const *meta_vals;
    size_t nmeta;
    const ckpt_file *file;          /* the checkpoint, or NULL */
    ckpt_file *owned;               /* closed on free (ckpt_manifest_load) */
    const ckpt_named_value *values; /* non-tensor leaves, sorted by name */
    size_t nvalues;                 /* (checkpoints only) */
    const char **leaves;            /* names of non-tensor leaves recorded */
    size_t nleaves, cleaves;        /* by ckpt_manifest_add_leaf (arena) */
    size_t *tie_parent;             /* recorded ties (ckpt_manifest_tie): a */
    unsigned char *tie_rank;        /* union-find forest by rank (depth */
    size_t ntie;                    /* O(log n), never changed by a lookup)
                                       over the first ntie entries */
    ckpt_module_version *versions;  /* of the state dicts' _metadata */
    size_t nver, cver;              /* (checkpoint side; arena), in order */
    ckpt_strmap ver_index;          /* module name -> index */
    ckpt_strmap roots;              /* root dict entries recorded by */
                                    /* ckpt_manifest_add_root_entry: key ->
                                       1 tensor, 0 other */
    size_t *counters;               /* entries a BatchNorm fills itself */
    size_t ncounters, ccounters;    /* (expected side; arena) */
};

/* ------------------------------------------------------------ defaults
 * (defaults.c): module versions and BatchNorm counters, torch's
 * BatchNorm _load_from_state_dict rule. */

/* "module_versions" and "batchnorm_counters" of a JSON manifest (either
 * may be NULL: absent), once its tensors are indexed. 0, CKPT_E_FORMAT
 * (message naming the member), CKPT_E_NOMEM. */
struct json_t;
int ckpt_manifest_parse_defaults(ckpt_manifest *m, const struct json_t *versions,
                                 const struct json_t *counters);
/* Whether torch's BatchNorm fills its num_batches_tracked itself when the
 * checkpoint side c lacks it: c records no version of 2 or more for the
 * module named module[0..len) (as c names it). */
int ckpt_manifest_module_fills(const ckpt_manifest *c, const char *module, size_t len);

/* Index of `name` (len bytes) in m, or CKPT_KEYS_NONE. */
size_t ckpt_manifest_lookup(const ckpt_manifest *m, const char *name, size_t len);
/* out[i] = ckpt_manifest_lookup(m, entry i of `names`) for every entry;
 * returns how many were found. */
size_t ckpt_manifest_lookup_all(const ckpt_manifest *m, const ckpt_manifest *names, size_t *out);

/* The representative of entry i's tie group (i itself when untied); the
 * same for two entries recorded as one parameter. Read-only: manifests
 * are shared by concurrent matches. */
size_t ckpt_manifest_tie_root(const ckpt_manifest *m, size_t i);

/* Looks up n computed names in m, a few at a time ahead (hashed, slots
 * and keys prefetched), in order: get(ctx, i, buf, &len, &flag) returns
 * name i (len bytes), its own or written into buf (bufcap bytes, valid
 * until put is called for i); put(ctx, i, name, len, flag, j) receives it
 * with j = its index in m or CKPT_KEYS_NONE; flag passes from get to put.
 * Returns 0, CKPT_E_NOMEM, or the first non-zero result of put. */
typedef const char *(*ckpt_name_get)(void *ctx, size_t i, char *buf, size_t *len, int *flag);
typedef int (*ckpt_name_put)(void *ctx, size_t i, const char *name, size_t len, int flag, size_t j);
int ckpt_manifest_lookup_stream(const ckpt_manifest *m, size_t n, size_t bufcap, ckpt_name_get get,
                                ckpt_name_put put, void *ctx);

/* Appends entry `e` (its name copied, dtype, shape and tensor borrowed).
 * Returns 0, CKPT_E_INVALID_ARG for a name already present (the caller
 * words the error; nothing recorded), CKPT_E_NOMEM. */
int ckpt_manifest_push_entry(ckpt_manifest *m, const ckpt_manifest_entry *e);

/* The manifest of the tree a ckpt-written safetensors file records in
 * "ckpt.structure" (ckpt_structure_decode): its tensors with the dtypes
 * and views they had, and its non-tensor leaves, named and sorted as
 * ckpt_file_flatten names them, within the file's open limits. *out is
 * NULL when m's file records no tree (m is then its own logical view).
 * The result borrows m's file. Returns 0, ckpt_structure_decode's codes
 * (CKPT_E_FORMAT for a malformed structure), CKPT_E_LIMIT, CKPT_E_NOMEM. */
int ckpt_manifest_logical(ckpt_manifest **out, const ckpt_manifest *m);

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
 * covered: it keeps its name (less the wrappers dropped). */
typedef struct ckpt_rule {
    int canon;
    const char *strip;
    size_t strip_len;
    const char *add;
    size_t add_len;
    /* filled by ckpt_rules_infer */
    int select;          /* covers at most half of the checkpoint keys,
                             one subtree holding exactly the expected keys;
                             the others are other top-level entries */
    uint64_t matches;    /* distinct expected names hit */
    unsigned complexity; /* segments stripped and added, +2 with canon */
    const char *description;
} ckpt_rule;

/* Writes rule(s) into dst, which must hold len + add_len + 1 bytes, and
 * returns its length; *covered receives 1 when s starts with `strip`
 * (after dropping wrappers), else 0 and dst holds s without the wrappers. */
size_t ckpt_rule_apply(const ckpt_rule *r, const char *s, size_t len, char *dst, int *covered);

/* Applies r to every key of c, in order, and looks the result up in e
 * (ckpt_manifest_lookup_stream): visit(ctx, i, name, len, covered, j)
 * receives key i rewritten (name valid during the call), whether r covers
 * it, and its index in e or CKPT_KEYS_NONE. Returns 0, CKPT_E_NOMEM, or
 * the first non-zero result of visit. */
typedef int (*ckpt_rule_visit)(void *ctx, size_t i, const char *name, size_t len, int covered,
                               size_t j);
int ckpt_rule_lookup_all(const ckpt_rule *r, const ckpt_manifest *c, const ckpt_manifest *e,
                         ckpt_rule_visit visit, void *ctx);

/* Candidate rewrites of c's keys towards e's, given the identity pairing
 * (c2e[i]: entry of e with the same name or CKPT_KEYS_NONE). Only rules
 * matching more names than the identity pairing are returned, evaluated
 * and described (strings in `a`), sorted by matches descending, then
 * complexity ascending, then description; at most `max`. Two rules are
 * tied when both matches and complexity are equal. Returns 0 or
 * CKPT_E_NOMEM. */
int ckpt_rules_infer(ckpt_rule *out, size_t max, size_t *nout, ckpt_arena *a,
                     const ckpt_manifest *c, const ckpt_manifest *e, const size_t *c2e);

/* The unique best of rules[0..n) as ckpt_match names it: the first, unless
 * the second has as many matches and the same complexity; NULL if none. */
const ckpt_rule *ckpt_rules_best(const ckpt_rule *rules, size_t n);

/* The top-level entries of c that rule r leaves out: first segments of
 * c's keys and values (ckpt_manifest values) that do not start with
 * r->strip (after dropping wrappers with r->canon), distinct, sorted by
 * bytes, in `a`. Returns 0 or CKPT_E_NOMEM. */
int ckpt_rule_others(const char ***out, size_t *n, ckpt_arena *a, const ckpt_rule *r,
                     const ckpt_manifest *c);

/* When checkpoint c is a PEFT LoRA adapter (lora_A/lora_B factors are at
 * least half its keys): what ckpt_match says instead of "nothing would
 * load" against the base model e: whether every module it targets is in
 * e with the shapes its factors need (adapter.c; in `a`). NULL when c is
 * not one, or out of memory (*nomem set). */
const char *ckpt_adapter_note(const ckpt_manifest *c, const ckpt_manifest *e, ckpt_arena *a,
                              int *nomem);

/* The same rule on an opened file: its lora_A/lora_B factor count when it
 * is a PEFT LoRA adapter (*modules: the modules they target), else 0. */
size_t ckpt_adapter_factors(const ckpt_file *f, size_t *modules);

/* ------------------------------------------------------------ ties */

/* The one rule for a key present on one side only that is a copy of a
 * key both sides have (match's tied unexpected keys, diff's one-sided
 * keys): for each entry i of `own` that own2other leaves unpaired,
 * (*out)[i] is the smallest-named paired entry of own sharing its tensor
 * (same storage and offset, dtype and shape, or a recorded tie group), or
 * else the paired entry of own whose partner `other`'s metadata names as
 * the kept copy of i ("dropped": "kept", safetensors save_model), or
 * CKPT_KEYS_NONE; paired entries get CKPT_KEYS_NONE. names: own's names as
 * other calls them (under a rewrite), NULL for their own. (*out) is
 * ckpt_malloc'd. Returns 0 or CKPT_E_NOMEM. */
int ckpt_keys_unpaired_ties(size_t **out, const ckpt_manifest *own, const size_t *own2other,
                            const ckpt_manifest *other, const size_t *other2own,
                            const char *const *names);

#endif
