/* ckpt/keys.h - keys: manifests, match, diff, rename, key hygiene.
 * Part of the public API of libckpt; include <ckpt.h>. */
#ifndef CKPT_INCLUDE_KEYS_H
#define CKPT_INCLUDE_KEYS_H

#include "ckpt/file.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A manifest is a set of tensor keys with their dtype and shape: the
 * tensors of a checkpoint, or what a model expects. Names are unique and
 * looked up in O(1) (hash tables seeded per process, so crafted names
 * cannot force collisions); entries keep the order they were added in.
 *
 * JSON manifests are the output of `ckpt inspect --json`, or any object
 * with the same `tensors` list:
 *   {"tensors": [{"name": str, "dtype": str, "shape": [uint, ...]}, ...],
 *    "metadata": {str: str} | null, "ties": [[str, ...], ...] | null,
 *    "module_versions": {str: int} | null, "batchnorm_counters": [str, ...] | null}
 * Other fields (file, format, nbytes, sha256, values) are ignored;
 * "metadata" is optional and, like a safetensors __metadata__, may record
 * tied-weight aliases ("dropped name": "kept name", the convention of
 * safetensors' save_model). "ties" is optional: groups of names sharing
 * one parameter (what Python's ckpt.manifest(model) records from
 * named_parameters(remove_duplicate=False)); each name must be a listed
 * tensor of the group's dtype and shape. "module_versions" and
 * "batchnorm_counters" are optional (absent in manifests written before
 * them): see ckpt_manifest_set_version. dtype strings are compared as
 * written.
 * Parsing uses jansson (a DOM; the parse dominates every operation below
 * for large manifests). */
typedef struct ckpt_manifest ckpt_manifest;

/* One key of a manifest. Borrowed from the manifest. */
typedef struct ckpt_manifest_entry {
    const char *name;
    const char *dtype; /* ckpt_dtype_name style: "F32", "BF16"... */
    unsigned ndim;
    const uint64_t *shape;     /* ndim elements (non-NULL) */
    const ckpt_tensor *tensor; /* manifests of a file: the tensor; else NULL */
} ckpt_manifest_entry;

/* An empty manifest named `name` (for messages and reports; may be NULL).
 * Returns 0 or CKPT_E_NOMEM. Free with ckpt_manifest_free. */
CKPT_API int ckpt_manifest_new(ckpt_manifest **out, const char *name);
/* Appends a key; strings and shape are copied. Returns 0,
 * CKPT_E_INVALID_ARG (NULL name/dtype, ndim > CKPT_MAX_NDIM, a name
 * already present), CKPT_E_NOMEM. */
CKPT_API int ckpt_manifest_add(ckpt_manifest *m, const char *name, const char *dtype, unsigned ndim,
                               const uint64_t *shape);
/* Records a non-tensor leaf of the checkpoint (a step counter, a
 * scheduler's setting) by its flattened name ("scheduler.last_epoch"), so
 * that ckpt_match names its top-level entry among those a rewrite ignores
 * (ckpt_match_ignored and the rewrite's description) as it does for a
 * file's values: a manifest built from a loaded object gives the verdict
 * its file gives. Not a key: matching and diffs never see it. Returns 0,
 * CKPT_E_INVALID_ARG (NULL name), CKPT_E_NOMEM. */
CKPT_API int ckpt_manifest_add_leaf(ckpt_manifest *m, const char *name);
/* Records `key` as an entry of the checkpoint's root dict, holding a
 * tensor itself (tensor 1: a flat state dict's "lm_head.weight") or not
 * (a nested "model" or "optimizer" dict, an "epoch"; a uint8 or bool
 * tensor, torch.get_rng_state()'s, counts as not). A manifest built
 * from a loaded object records them so that ckpt_match sees the root its
 * file has: a rewrite selecting a subtree ("model") and leaving other
 * top-level entries out needs each of them to be a root entry holding no
 * weight tensor itself; manifests of files read their tree, and one with no
 * root entry recorded takes its entries as its names give them. Returns
 * 0, CKPT_E_INVALID_ARG (NULL key), CKPT_E_NOMEM. */
CKPT_API int ckpt_manifest_add_root_entry(ckpt_manifest *m, const char *key, int tensor);
/* The tensors of an opened file, in ckpt_file_tensor order (sorted), and
 * its metadata. Borrows f (names, shapes, tensors): f must outlive the
 * manifest. Returns 0 or CKPT_E_NOMEM. */
CKPT_API int ckpt_manifest_from_file(ckpt_manifest **out, const ckpt_file *f);
/* Records f's metadata as the manifest's (copied; replacing any), as
 * ckpt_manifest_from_file reads it: the tied-weight aliases ckpt_match
 * reads ("dropped name": "kept name", safetensors save_model) of a
 * manifest built from a loaded object (ckpt.load_state_dict from a path).
 * Returns 0, CKPT_E_INVALID_ARG (NULL m or f), CKPT_E_NOMEM. */
CKPT_API int ckpt_manifest_set_metadata(ckpt_manifest *m, const ckpt_file *f);
/* Records that keys a and b are one parameter (tied weights; transitive:
 * ties form groups). Returns 0, CKPT_E_INVALID_ARG (a name that is not a
 * key, different dtypes or shapes), CKPT_E_NOMEM. */
CKPT_API int ckpt_manifest_tie(ckpt_manifest *m, const char *a, const char *b);
/* BatchNorm's num_batches_tracked, as torch's load_state_dict fills it.
 * A BatchNorm (torch's _NormBase with track_running_stats) puts its
 * num_batches_tracked back itself when a state dict lacks it and the
 * state dict's _metadata gives the module no version, or one below 2
 * (weights saved before torch 0.4.1 such as old torchvision's, plain
 * dicts, safetensors files); with version 2 or more the key is missing.
 *
 * Checkpoint side: the version of a module, as torch.save records it in
 * a state dict's _metadata ({'version': v}), named as keys are: the
 * state dict's flattened name joined with the module's ("model.bn";
 * "model" for the module at that state dict's root, "" at the file's
 * root). A file's manifest records those of its tree (an int or bool
 * version; any other value torch would compare counts as 2: ckpt does
 * not guess, the key stays missing); JSON: "module_versions": {name:
 * int}. Setting a name again replaces its version. Returns 0,
 * CKPT_E_INVALID_ARG (NULL module), CKPT_E_NOMEM. */
CKPT_API int ckpt_manifest_set_version(ckpt_manifest *m, const char *module, int64_t version);
/* Records the module versions of f's state dicts, as
 * ckpt_manifest_from_file does (what `ckpt inspect --json` writes as
 * "module_versions"). Returns 0, CKPT_E_LIMIT (a walk bound of f's
 * limits, or the module-version budget: 16 _metadata and state entries
 * read per tensor and value of f, plus 65536, a fixed bound no
 * ckpt_limits field raises), CKPT_E_NOMEM. */
CKPT_API int ckpt_manifest_add_versions(ckpt_manifest *m, const ckpt_file *f);
CKPT_API size_t ckpt_manifest_version_count(const ckpt_manifest *m);
/* Module name of version i (order recorded), *version its version; NULL
 * out of range. Borrowed. */
CKPT_API const char *ckpt_manifest_version_at(const ckpt_manifest *m, size_t i, int64_t *version);
/* Expected side: key `name` is the num_batches_tracked of a BatchNorm
 * tracking running stats (what Python's ckpt.manifest(model) records;
 * JSON: "batchnorm_counters": [name, ...]): ckpt_match lists it as
 * DEFAULTED rather than missing where the checkpoint gives its module
 * (the name less its last segment) no version of 2 or more. Returns 0,
 * CKPT_E_INVALID_ARG (not a key), CKPT_E_NOMEM. */
CKPT_API int ckpt_manifest_add_batchnorm_counter(ckpt_manifest *m, const char *name);
CKPT_API size_t ckpt_manifest_batchnorm_counter_count(const ckpt_manifest *m);
/* Name of counter i (order recorded); NULL out of range. Borrowed. */
CKPT_API const char *ckpt_manifest_batchnorm_counter(const ckpt_manifest *m, size_t i);
/* Parses a JSON manifest (see above) of len bytes. `name` is used in
 * messages. Bounds: len <= limits.max_index_bytes, entries <=
 * max_tensors, names shorter than max_name_bytes (it counts the NUL, as
 * for a checkpoint's names), ndim <= max_ndim (limits may be
 * NULL: defaults). Returns 0; CKPT_E_FORMAT (not JSON, duplicate object
 * keys, \u0000 in a string, wrong types, duplicate names, a dimension that
 * is not a non-negative 64-bit integer, a tie naming no listed tensor or
 * tensors of different dtypes or shapes; the message names the entry
 * index), CKPT_E_LIMIT, CKPT_E_NOMEM. */
CKPT_API int ckpt_manifest_parse(ckpt_manifest **out, const void *json, size_t len,
                                 const char *name, const ckpt_limits *limits);
/* Reads `path` as a JSON manifest when it is a JSON object with a
 * "tensors" list, and as a checkpoint (ckpt_open, any format) otherwise;
 * the manifest then owns the opened file (ckpt_manifest_file). opts may be
 * NULL. Returns 0 or the code of ckpt_open / ckpt_manifest_parse
 * (CKPT_E_IO when the file cannot be read). */
CKPT_API int ckpt_manifest_load(ckpt_manifest **out, const char *path,
                                const ckpt_open_options *opts);
/* The keys the safetensors library's readers (load_file, load_model, and
 * torch's load_state_dict of what they return) see in m's file, when ckpt
 * wrote it and recorded tied names in "ckpt.aliases": m without those
 * names (ckpt_open and ckpt.load restore each as a name of its stored
 * tensor; those readers do not), each declared instead as an alias of
 * its stored name, as safetensors' save_model declares the copies it
 * drops ("dropped": "kept" in __metadata__): ckpt_match then lists it
 * missing unless the model ties it. *out is NULL when m's file records no
 * alias (m is that view already). Borrows m's file: free *out first.
 * Returns 0, CKPT_E_FORMAT (a malformed "ckpt.aliases"), CKPT_E_NOMEM. */
CKPT_API int ckpt_manifest_stored(ckpt_manifest **out, const ckpt_manifest *m);
/* NULL-safe. Closes the file ckpt_manifest_load opened. */
CKPT_API void ckpt_manifest_free(ckpt_manifest *m);

/* The name given at creation (path for ckpt_manifest_load). Borrowed. */
CKPT_API const char *ckpt_manifest_name(const ckpt_manifest *m);
/* The checkpoint behind the manifest, or NULL for JSON and built ones. */
CKPT_API const ckpt_file *ckpt_manifest_file(const ckpt_manifest *m);
CKPT_API size_t ckpt_manifest_count(const ckpt_manifest *m);
/* Entry i < ckpt_manifest_count; borrowed. */
CKPT_API const ckpt_manifest_entry *ckpt_manifest_entry_at(const ckpt_manifest *m, size_t i);
/* Exact lookup by full name; NULL if absent. O(1). */
CKPT_API const ckpt_manifest_entry *ckpt_manifest_find(const ckpt_manifest *m, const char *name);

/* ckpt_match: would loading `checkpoint` into a model expecting `expect`
 * (torch load_state_dict(strict=True) semantics) load every key?
 *
 * Keys are compared exactly on full names ("fc1.weight.bad_key" is
 * unexpected, never part of "fc1.weight"). A common name is `matched` when
 * dtype and shape agree too; otherwise it is listed in shape_mismatch
 * and/or dtype_mismatch (a name may be in both) and not counted.
 *
 * Prefix inference (FORMATS.md §4.6) runs when names are left unmatched on
 * both sides. A rewrite of checkpoint keys is: optionally drop the wrapper
 * segments "_orig_mod.", "_fsdp_wrapped_module." and
 * "_checkpoint_wrapped_module." wherever they stand (never as the last
 * segment), then replace a leading run of whole segments S by P (strip S,
 * add P, or both; stacked wrappers such as "module._orig_mod." or
 * "state_dict.model." are one run). A rewrite stands for a wrapper around
 * the whole model, or for a renamed part of it ("layers." -> "blocks."), so:
 *   - it covers only keys starting with S; the others keep their names
 *     (less dropped wrappers) and pair by them, as torch's
 *     consume_prefix_in_state_dict_if_present or a renaming dict
 *     comprehension leaves them, and count towards its matches;
 *   - it must cover more than half of the checkpoint keys (a wrapper), or
 *     pair every key it covers with more than half of the checkpoint keys
 *     pairing once rewritten (a renamed part), except in a training checkpoint ({"model":
 *     state dict, "optimizer": ..., "epoch": ...}): a rewrite stripping a
 *     subtree S whose keys pair one to one with every expected key (a
 *     BatchNorm counter aside: see Defaulted below), all
 *     other keys and non-tensor values lying in other top-level entries,
 *     selects that subtree, whatever its share of the keys (SGD momentum
 *     keeps one buffer per parameter, a model may hold many buffers); a
 *     tensor at the root named as an expected key makes the root a state
 *     dict, never such a checkpoint. Its description ends with " (other top-level
 *     entries ignored: epoch, optimizer)" (4 named at most, then ", ...",
 *     all of them in ckpt_match_ignored); applied, it leaves those
 *     entries out: their keys are not unexpected, nor paired;
 *   - S and P never share their first segment: no rewrite edits the middle
 *     of a key ("encoder.module.x" stays what it is).
 * Candidates come from whole-segment suffixes shared by unmatched keys
 * (a bounded sample of anchors, one pass over the expected keys); each is
 * evaluated over every key. A rewrite counts only if it matches more
 * expected names than the keys as they are. The best matches the most
 * names; between equal counts the simpler (fewer segments stripped and
 * added, dropping wrappers counting 2) wins; equal counts and simplicity
 * are a tie: no rewrite, the candidates are listed. Two rules forming the
 * same pairs are one rewrite (the simpler description is kept). With
 * opts->normalize the rewrite is applied only if the result is complete
 * (below) and no two checkpoint keys end up with one name.
 *
 * Allowed exceptions: a missing key matching a glob of allow_missing, an
 * unexpected key whose checkpoint name (or rewritten name) matches a glob
 * of allow_unexpected (fnmatch without flags: '*' crosses '.') is listed
 * under "allowed" instead of missing/unexpected; it never disappears.
 * Shape and dtype mismatches cannot be allowed.
 *
 * complete: no missing, unexpected, shape or dtype mismatch (besides the
 * allowed and the tied), and at least one key matched when anything is
 * expected. warning: "nothing would load: 0 of N expected keys match" or
 * "almost nothing would load: M of N expected keys match" (M matched plus
 * the tied missing keys < N/2), even when every exception is allowed; NULL
 * otherwise.
 *
 * Tied weights: a key shares a tensor with a partner of its side when
 * both are one storage (same storage id and offset; file-based manifests),
 * or the manifest records them as one parameter (ckpt_manifest_tie, JSON
 * "ties"), and the partner has the key's dtype and shape. A missing key
 * is "tied to X" when it shares a tensor with X, an expected key that is
 * matched: it is filled through X (torch loads one parameter once), so it
 * is satisfied: listed in TIED only (checkpoint NULL), never in missing
 * or allowed, and not counted by ckpt_match_matched. A missing key that
 * only the checkpoint's metadata records as an alias of the checkpoint
 * key matched to X (of its dtype and shape; safetensors save_model's
 * "dropped name": "kept name") while the expected side does not tie it
 * to X stays missing (or allowed): a loader that ignores the metadata
 * (torch's strict load_state_dict, safetensors load_model, transformers
 * with untied embeddings) leaves it at its init. It is listed in TIED
 * too, with checkpoint the key whose alias declares it, so that the
 * declared tie is named. An unexpected key sharing a tensor with a matched
 * checkpoint key, or aliased to one by the expected side's metadata,
 * stays unexpected (strict load_state_dict rejects a name the model lacks)
 * and is listed in TIED too. tied_to is the partner's name on the key's
 * own side.
 *
 * Defaulted: a missing expected key recorded as a BatchNorm counter
 * (ckpt_manifest_add_batchnorm_counter) whose module the checkpoint gives
 * no version of 2 or more (ckpt_manifest_set_version; the module's
 * checkpoint name is that of a paired key of the same module less its
 * last segment, under the applied rewrite; with no key of the module
 * paired, the counter stays missing) is filled by the module, as torch's strict
 * load_state_dict fills it: listed in DEFAULTED only, never in missing,
 * and it does not make the match incomplete. A key tied or allowed by a
 * glob is listed as such instead.
 *
 * Names in every list are the original names of their side: expected names
 * for missing keys and mismatches, checkpoint names for unexpected keys.
 * Lists are sorted by name (byte order).
 *
 * `ckpt match --json`: see docs/cli-json.md. */
typedef struct ckpt_match_options {
    unsigned version;                 /* CKPT_MATCH_OPTIONS_VERSION */
    int normalize;                    /* apply the inferred rewrite when it completes the match */
    const char *const *allow_missing; /* globs */
    size_t nallow_missing;
    const char *const *allow_unexpected; /* globs */
    size_t nallow_unexpected;
} ckpt_match_options;
#define CKPT_MATCH_OPTIONS_VERSION 1
#define CKPT_MATCH_OPTIONS_INIT                                                                    \
    {                                                                                              \
        .version = CKPT_MATCH_OPTIONS_VERSION, .normalize = 0, .allow_missing = NULL,              \
        .nallow_missing = 0, .allow_unexpected = NULL, .nallow_unexpected = 0                      \
    }
CKPT_API int ckpt_match_options_init(ckpt_match_options *opts, unsigned version);

typedef enum ckpt_match_list {
    CKPT_MATCH_MISSING = 0,        /* expected, not in the checkpoint */
    CKPT_MATCH_UNEXPECTED = 1,     /* in the checkpoint, not expected */
    CKPT_MATCH_SHAPE_MISMATCH = 2, /* both sides, shapes differ */
    CKPT_MATCH_DTYPE_MISMATCH = 3, /* both sides, dtypes differ */
    CKPT_MATCH_ALLOWED_MISSING = 4,
    CKPT_MATCH_ALLOWED_UNEXPECTED = 5,
    CKPT_MATCH_TIED = 6,     /* missing or unexpected, tied (tied_to) */
    CKPT_MATCH_DEFAULTED = 7 /* missing, filled by its BatchNorm as torch does */
} ckpt_match_list;

/* One listed key. Borrowed from the result. */
typedef struct ckpt_match_item {
    const char *name;
    const ckpt_manifest_entry *checkpoint; /* NULL for a missing key */
    const ckpt_manifest_entry *expected;   /* NULL for an unexpected key */
    const char *tied_to;                   /* TIED list only, else NULL */
    /* TIED: expected set and checkpoint NULL, filled through the tie;
     * checkpoint set and expected NULL, an unexpected key; both set, a
     * missing key the checkpoint alone declares tied (see ckpt_match) */
} ckpt_match_item;

/* A rewrite of checkpoint keys. description: e.g. "strip 'module.'",
 * "strip '_orig_mod.module.'", "drop '_orig_mod.' segments, strip
 * 'module.'", "add 'model.'", "replace 'model.' with 'backbone.'", with
 * " (not applicable: 'a' and 'b' both become 'c')" when it merges keys;
 * matches: expected names it matches; applied: 1 when the lists reflect
 * it (candidates: always 0). */
typedef struct ckpt_rewrite {
    const char *description;
    uint64_t matches;
    int applied;
} ckpt_rewrite;

typedef struct ckpt_match_result ckpt_match_result;

/* Compares the manifests; opts may be NULL (CKPT_MATCH_OPTIONS_INIT). Both
 * manifests must outlive the result (items point into them). Returns 0
 * whether or not the match is complete; CKPT_E_INVALID_ARG, CKPT_E_NOMEM.
 * Cost: O(keys) hash lookups plus, when inference runs, at most 12
 * candidate rewrites (24 with wrappers) evaluated over every checkpoint
 * key. Thread-safe for distinct results. */
CKPT_API int ckpt_match(ckpt_match_result **out, const ckpt_manifest *checkpoint,
                        const ckpt_manifest *expect, const ckpt_match_options *opts);
CKPT_API void ckpt_match_result_free(ckpt_match_result *r); /* NULL-safe */

CKPT_API int ckpt_match_complete(const ckpt_match_result *r);
/* Matched keys (same name, dtype and shape). */
CKPT_API uint64_t ckpt_match_matched(const ckpt_match_result *r);
CKPT_API size_t ckpt_match_count(const ckpt_match_result *r, ckpt_match_list list);
/* Item i of a list; borrowed; NULL out of range. */
CKPT_API const ckpt_match_item *ckpt_match_item_at(const ckpt_match_result *r, ckpt_match_list list,
                                                   size_t i);
/* The unique best rewrite, or NULL (none beats the keys as they are, or
 * two tie). Borrowed. */
CKPT_API const ckpt_rewrite *ckpt_match_rewrite(const ckpt_match_result *r);
/* Candidate rewrites, best first (matches descending, then simplicity,
 * then description): those matching more than half as many names as the
 * best, at most 8. Borrowed. */
CKPT_API size_t ckpt_match_candidate_count(const ckpt_match_result *r);
CKPT_API const ckpt_rewrite *ckpt_match_candidate(const ckpt_match_result *r, size_t i);
/* See "warning" above; borrowed, NULL when none. */
CKPT_API const char *ckpt_match_warning(const ckpt_match_result *r);
/* Names the model ties into one parameter (the ties `expect` records; for
 * an expected checkpoint, names of one storage and offset) that the
 * checkpoint holds as separate tensors, each of them loading: torch's load_state_dict copies
 * every one into the parameter, so the last copied wins and the others'
 * values are lost, silently. For each such group (3 named at most): its
 * names, whether their values differ (read and hashed when the checkpoint
 * is a file; "may differ" for manifests without bytes; groups whose
 * values are equal are not named), and which name wins: the last in the
 * expected manifest's order when that is the model's (a manifest of no
 * file, such as ckpt.manifest(model)'s); for an expected checkpoint
 * (names sorted) the model's module order decides. NULL when there is
 * none. Borrowed. */
CKPT_API const char *ckpt_match_tie_note(const ckpt_match_result *r);
/* When the best rewrite is not applied (no normalize, or incomplete) and,
 * under it, every checkpoint key pairs and loads while some model keys
 * stay missing (a DataParallel checkpoint of a model given a new head):
 * "it pairs every checkpoint key; 2 model keys would stay missing:
 * cls.weight, cls.bias (with them allowed missing, or with strict=False,
 * every checkpoint key loads)" (8 named at most, in the expected
 * manifest's order); NULL otherwise. Borrowed. */
CKPT_API const char *ckpt_match_rewrite_note(const ckpt_match_result *r);
/* The top-level entries ckpt_match_rewrite leaves out when it selects a
 * subtree (applied or not): first segments of the checkpoint keys and
 * (checkpoints, not JSON manifests) non-tensor values outside it,
 * distinct, sorted by bytes; none for other rewrites. i < count; NULL out
 * of range; borrowed. */
CKPT_API size_t ckpt_match_ignored_count(const ckpt_match_result *r);
CKPT_API const char *ckpt_match_ignored(const ckpt_match_result *r, size_t i);
/* The name ckpt_match_rewrite gives checkpoint entry i (keys it does not
 * cover keep their name, less any dropped wrapper segments), or NULL when
 * there is no rewrite. Borrowed. */
CKPT_API const char *ckpt_match_rewritten(const ckpt_match_result *r, size_t i);

/* ckpt_diff: two checkpoints (or, keys_only, two manifests) compared key by
 * key and value by value: common tensors of equal shape element by
 * element and, unless keys_only, the non-tensor leaves of the two trees
 * (ckpt_file_value: epoch, step, learning rates, flags, config).
 *
 * Trees: a safetensors file written by ckpt (with "ckpt.structure") is
 * compared as the tree it records (ckpt_convert's input: nesting, values,
 * dtypes and views), keys_only too, so a .pt and its conversion compare
 * equal, and differ where their epochs or learning rates do.
 *
 * Values: a tensor is bitwise equal when dtypes match and the logical
 * contents (ckpt_tensor_read bytes) are identical. Otherwise elements are
 * compared as values: every float width is widened to double (F16, BF16,
 * F8 E4M3/E5M2/E8M0/E4M3FNUZ/E5M2FNUZ, F32, F64; complex per component),
 * integers and BOOL as numbers (the same integer dtype exactly, beyond
 * 2^53 too); tensors of different dtypes are compared this way as well.
 * Element i differs unless |a-b| <= atol + rtol*|b|, where NaN equals NaN
 * and an infinity equals the same infinity (torch.testing.assert_close
 * with equal_nan; b is the reference). max_abs_diff = max |a-b|,
 * max_rel_diff = max |a-b|/|b| (infinite where b is 0 and a is not), both
 * over element pairs without NaN. Sub-byte and quantized dtypes (F4,
 * F6_*, Q*) are compared bitwise only (compared = 0).
 *
 * Leaves (paired by flattened name): ints exactly, however large; floats
 * by the rule above (rtol, atol; NaN equals NaN); str, bytes, bool and
 * none exactly; opaque objects by "module.qualname" (torch dtypes by
 * their canonical name: torch.float is torch.float32). Leaves of
 * different kinds differ (0 and 0.0, 1 and True).
 *
 * Key rewrites: when keys are left unpaired on both sides, the rewrite of
 * B's keys that ckpt_match(B, A) infers (unique best; FORMATS.md §4.6) is
 * reported when it pairs every key of both sides; or every key of A while
 * B's other keys keep their names in other top-level entries (B is a
 * training checkpoint holding A under 'model.', say); or every key of B
 * while A's other keys lie in top-level entries beside the one the
 * rewrite adds. opts->normalize applies it to B's tensor and value names
 * (names it does not cover are kept) before comparing; names in the
 * lists are then B's rewritten names.
 *
 * identical: no key or leaf only on one side, no shape or dtype
 * difference, no differing element in any common tensor (with rtol = atol
 * = 0: values equal, e.g. 0.0 and -0.0; bitwise_equal tells about the
 * bytes) and no differing leaf.
 *
 * `ckpt diff --json`: see docs/cli-json.md. */
typedef struct ckpt_diff_options {
    unsigned version; /* CKPT_DIFF_OPTIONS_VERSION */
    double rtol;      /* relative tolerance, >= 0 */
    double atol;      /* absolute tolerance, >= 0 */
    int keys_only;    /* 1: names, dtypes and shapes only (manifests OK) */
    int normalize;    /* 1: apply the key rewrite (above) to B's names */
    /* version 2: nexclude globs (fnmatch without flags: '*' crosses '.'):
     * tensors and values whose name (B's after an applied rewrite) matches
     * one are left out of every list, count and verdict */
    const char *const *exclude;
    size_t nexclude;
} ckpt_diff_options;
#define CKPT_DIFF_OPTIONS_VERSION 2
#define CKPT_DIFF_OPTIONS_INIT                                                                     \
    {                                                                                              \
        .version = CKPT_DIFF_OPTIONS_VERSION, .rtol = 0.0, .atol = 0.0, .keys_only = 0,            \
        .normalize = 0, .exclude = NULL, .nexclude = 0                                             \
    }
CKPT_API int ckpt_diff_options_init(ckpt_diff_options *opts, unsigned version);

/* At most this many NaN/Inf mismatch positions are kept per tensor. */
#define CKPT_DIFF_MAX_POSITIONS 16

/* Value comparison of one common tensor. Borrowed from the result. */
typedef struct ckpt_tensor_diff {
    const char *name;
    const ckpt_manifest_entry *a, *b;
    int bitwise_equal;
    int compared; /* 1: values compared (numeric dtypes) */
    uint64_t numel;
    uint64_t differing;  /* elements outside tolerance */
    double max_abs_diff; /* 0 when no element pair differs */
    double max_rel_diff;
    uint64_t nan_a, nan_b, inf_a, inf_b;         /* non-finite values per side
                                            (complex: per component) */
    uint64_t nonfinite_mismatch;                 /* elements where NaN/Inf do not agree */
    size_t npositions;                           /* first positions (flat row-major element */
    uint64_t positions[CKPT_DIFF_MAX_POSITIONS]; /* indices) of those */
} ckpt_tensor_diff;

typedef enum ckpt_diff_list {
    CKPT_DIFF_ONLY_IN_A = 0,
    CKPT_DIFF_ONLY_IN_B = 1,
    CKPT_DIFF_SHAPE_MISMATCH = 2,
    CKPT_DIFF_DTYPE_MISMATCH = 3
} ckpt_diff_list;

typedef struct ckpt_diff_result ckpt_diff_result;

/* Compares a and b (both must outlive the result); opts may be NULL.
 * Unless keys_only, both manifests must come from files
 * (ckpt_manifest_file), else CKPT_E_INVALID_ARG; so are negative or NaN
 * tolerances. Returns 0 whatever the differences; CKPT_E_NOMEM; a tensor
 * read error (ckpt_tensor_read codes); for a safetensors file whose
 * "ckpt.structure" is malformed, CKPT_E_FORMAT naming the problem (and
 * CKPT_E_LIMIT for a tree beyond the file's open limits). Cost: O(keys)
 * lookups, plus rewrite inference (ckpt_match's) when keys are unpaired
 * on both sides; values stream once (memcmp in 16 MiB prefetched windows
 * first, element-wise decoding only where the bytes or dtypes differ). */
CKPT_API int ckpt_diff(ckpt_diff_result **out, const ckpt_manifest *a, const ckpt_manifest *b,
                       const ckpt_diff_options *opts);
CKPT_API void ckpt_diff_result_free(ckpt_diff_result *r); /* NULL-safe */
CKPT_API int ckpt_diff_identical(const ckpt_diff_result *r);
/* Names in a list, sorted; the entries on both sides (NULL on the side a
 * name is missing from) via ckpt_diff_pair. Borrowed. */
CKPT_API size_t ckpt_diff_count(const ckpt_diff_result *r, ckpt_diff_list list);
CKPT_API const char *ckpt_diff_name(const ckpt_diff_result *r, ckpt_diff_list list, size_t i);
CKPT_API void ckpt_diff_pair(const ckpt_diff_result *r, ckpt_diff_list list, size_t i,
                             const ckpt_manifest_entry **a, const ckpt_manifest_entry **b);
/* For a key in CKPT_DIFF_ONLY_IN_A or _B: the key both sides have that it
 * is tied to, as ckpt_match finds ties (the same tensor on its own side,
 * or the other side's metadata naming that key as the kept copy of it:
 * a writer that drops tied copies, safetensors save_model, HF's
 * lm_head.weight tied to embed_tokens.weight), or NULL. Unless
 * keys_only, the key's tensor must also hold that key's values on its
 * own side (one storage, or the same bytes): a head of its own under a
 * name the other side's alias names is no tied copy. Borrowed. */
CKPT_API const char *ckpt_diff_tied_to(const ckpt_diff_result *r, ckpt_diff_list list, size_t i);
/* Common tensors of equal shape that are not bitwise equal, sorted by
 * name; ckpt_diff_equal_count counts the bitwise-equal ones. Both 0
 * with keys_only. */
CKPT_API size_t ckpt_diff_tensor_count(const ckpt_diff_result *r);
CKPT_API const ckpt_tensor_diff *ckpt_diff_tensor(const ckpt_diff_result *r, size_t i);
CKPT_API uint64_t ckpt_diff_equal_count(const ckpt_diff_result *r);

/* Non-tensor leaves only on one side, or on both with different values
 * (rules above). */
typedef enum ckpt_diff_value_list {
    CKPT_DIFF_VALUES_ONLY_IN_A = 0,
    CKPT_DIFF_VALUES_ONLY_IN_B = 1,
    CKPT_DIFF_VALUES_DIFFERING = 2
} ckpt_diff_value_list;

/* One listed leaf: a is NULL for a leaf only in B, b for one only in A.
 * Borrowed from the result. */
typedef struct ckpt_value_diff {
    const char *name;
    const ckpt_value *a, *b;
} ckpt_value_diff;

/* Lists sorted by name (byte order), all empty with keys_only; item i <
 * count, else NULL. Borrowed. */
CKPT_API size_t ckpt_diff_value_count(const ckpt_diff_result *r, ckpt_diff_value_list list);
CKPT_API const ckpt_value_diff *ckpt_diff_value(const ckpt_diff_result *r,
                                                ckpt_diff_value_list list, size_t i);
/* Leaves on both sides with equal values. */
CKPT_API uint64_t ckpt_diff_values_equal(const ckpt_diff_result *r);
/* The key rewrite of B (see "Key rewrites"), or NULL when none pairs the
 * keys: description as ckpt_match gives it, matches: key pairs it forms,
 * applied: 1 with normalize. Borrowed. */
CKPT_API const ckpt_rewrite *ckpt_diff_rewrite(const ckpt_diff_result *r);
/* The same for people: "B's keys are A's with 'module.' added", "B's
 * keys under 'model.' are A's; B's other top-level entries: epoch,
 * optimizer"; NULL when there is no rewrite. Borrowed. */
CKPT_API const char *ckpt_diff_rewrite_note(const ckpt_diff_result *r);

/* Renaming keys: rules applied in order to every tensor key.
 *   STRIP_PREFIX P: keys starting with P lose it (P is whole segments: a
 *     missing trailing '.' is implied); other keys are unchanged;
 *   ADD_PREFIX P: every key gains P (a bare top-level tensor "" becomes P
 *     without its dot);
 *   REPLACE OLD NEW: every occurrence of OLD made of whole segments (it
 *     starts a key or follows '.', and ends the key, or precedes '.', or
 *     ends with '.') becomes NEW, left to right: "_orig_mod." -> "" drops
 *     a wrapper wherever it stands; "layer" does not touch "layers.0";
 *   AUTO spec: the rewrite ckpt_match infers against spec, which must give
 *     a complete match (as with normalize and no allowed exception).
 * A rule that changes no key is refused (CKPT_E_NOTFOUND, naming it; for
 * AUTO: the keys already match); two keys that would end up with one name
 * are refused (CKPT_E_MISMATCH, naming both). */
typedef enum ckpt_rename_op {
    CKPT_RENAME_STRIP_PREFIX = 1,
    CKPT_RENAME_ADD_PREFIX = 2,
    CKPT_RENAME_REPLACE = 3,
    CKPT_RENAME_AUTO = 4
} ckpt_rename_op;

typedef struct ckpt_rename_rule {
    ckpt_rename_op op;
    const char *arg;           /* the prefix, or OLD */
    const char *arg2;          /* NEW (REPLACE) */
    const ckpt_manifest *spec; /* AUTO */
} ckpt_rename_rule;

/* The mapping old name -> new name for every key of a manifest. */
typedef struct ckpt_rename_plan ckpt_rename_plan;

/* Applies rules[0..nrules) to the keys of m (borrowed: m must outlive the
 * plan). Returns 0; CKPT_E_INVALID_ARG (an empty prefix or OLD, a NULL
 * spec); CKPT_E_NOTFOUND, CKPT_E_MISMATCH (see above; for AUTO also when
 * no complete rewrite exists, naming the best one); CKPT_E_NOMEM. */
CKPT_API int ckpt_rename_plan_new(ckpt_rename_plan **out, const ckpt_manifest *m,
                                  const ckpt_rename_rule *rules, size_t nrules);
CKPT_API void ckpt_rename_plan_free(ckpt_rename_plan *p); /* NULL-safe */
/* Keys in the plan (the manifest's order), and how many change. */
CKPT_API size_t ckpt_rename_plan_count(const ckpt_rename_plan *p);
CKPT_API size_t ckpt_rename_plan_changed(const ckpt_rename_plan *p);
/* Old and new name of key i; borrowed; NULL out of range. */
CKPT_API const char *ckpt_rename_plan_from(const ckpt_rename_plan *p, size_t i);
CKPT_API const char *ckpt_rename_plan_to(const ckpt_rename_plan *p, size_t i);

/* Renames the tensor keys of checkpoint `in` by the rules and writes the
 * result to `out` atomically (nothing is written when out is NULL: a dry
 * run). The output format is the input's: safetensors (a sharded set
 * becomes one file) or a torch zip (legacy and pickle inputs too); an out
 * whose extension names another format (.safetensors for a torch zip,
 * .pt/.pth/.bin/.ckpt for safetensors, .dcp) is refused with
 * CKPT_E_INVALID_ARG before anything is written; the
 * tree (for ckpt-written safetensors: the tree "ckpt.structure" records)
 * keeps its shape where it can: a tensor whose new name still starts with
 * the flattened path of one of its enclosing dicts stays in the deepest
 * such dict under the rest of its name (a flat state dict is renamed in
 * place, order kept); otherwise it moves to the root dict; dicts emptied
 * by moves disappear. Non-tensor values and metadata (less ckpt.* keys,
 * rewritten by the writer) are kept as they are. plan (may be NULL)
 * receives the mapping, which owns its names. Returns 0; the
 * ckpt_rename_plan_new codes; CKPT_E_INVALID_ARG (out named for another
 * format); CKPT_E_UNSUPPORTED (a tensor would move out
 * of a list or tuple, the root is not a dict to receive a moved tensor,
 * two tensors share a flattened name, two entries of one dict would share
 * a key; the writer's cases); the ckpt_open and writer codes. */
CKPT_API int ckpt_rename(ckpt_rename_plan **plan, const char *in, const char *out,
                         const ckpt_rename_rule *rules, size_t nrules,
                         const ckpt_open_options *opts);

/* Key hygiene of an opened file (for `ckpt doctor`): the wrapper segments
 * its tensor keys carry and the rename that removes them.
 * Wrappers: "module." (DataParallel/DDP; counted where it leads a key once
 * the other wrappers are dropped, never in the middle of a key), then
 * "_orig_mod." (torch.compile), "_fsdp_wrapped_module." (FSDP),
 * "_checkpoint_wrapped_module." (activation checkpointing), each counted
 * anywhere as a whole segment that is not the last; listed in the order
 * they stand in the keys, outermost first ("_orig_mod.module.x":
 * "_orig_mod.", then "module."). leading: every key holding it starts
 * with it ("module.": where the model's keys start). The fix: each wrapper other than "module."
 * stripped (leading) or replaced by nothing, then "module." stripped as
 * many times as it repeats; checked with ckpt_rename_plan_new: when it
 * would give two keys one name there is no fix and ckpt_keys_collision
 * says which. */
typedef struct ckpt_key_wrapper {
    const char *segment; /* "module.", "_orig_mod.", ... (static) */
    int leading;
    uint64_t keys; /* tensor keys holding it */
} ckpt_key_wrapper;

typedef struct ckpt_keys_report ckpt_keys_report;

/* Returns 0 (also for clean keys: no wrapper, no fix), CKPT_E_INVALID_ARG,
 * CKPT_E_NOMEM. The report owns what it holds: f may be closed first. */
CKPT_API int ckpt_keys_hygiene(ckpt_keys_report **out, const ckpt_file *f);
/* The same for a model state dict below the top level of a training
 * checkpoint: root is its place in the file, joined like tensor names
 * ("model", "state_dict", "model.module" never: the dict the model's keys
 * start in; NULL or "" is the top). "module." is then counted where the
 * keys of root start ("model.module.fc.weight"), and the fix replaces
 * "ROOT.module." by "ROOT." (the keys stay in their dict) where the top
 * level strips "module.". Other wrappers as above. */
CKPT_API int ckpt_keys_hygiene_at(ckpt_keys_report **out, const ckpt_file *f, const char *root);
CKPT_API void ckpt_keys_report_free(ckpt_keys_report *r); /* NULL-safe */
CKPT_API size_t ckpt_keys_wrapper_count(const ckpt_keys_report *r);
CKPT_API const ckpt_key_wrapper *ckpt_keys_wrapper(const ckpt_keys_report *r, size_t i);
/* The fix as rules for ckpt_rename (borrowed, static strings), and as
 * `ckpt rename IN OUT` arguments ("--strip-prefix 'module.'", shell-quoted;
 * NULL when there is nothing to fix). */
CKPT_API size_t ckpt_keys_fix_count(const ckpt_keys_report *r);
CKPT_API const ckpt_rename_rule *ckpt_keys_fix(const ckpt_keys_report *r, size_t i);
CKPT_API const char *ckpt_keys_fix_args(const ckpt_keys_report *r);
/* The same fix in Python, over the loaded dict `sd`
 * ("sd['model'] = {k.removeprefix('module.'): v for k, v in
 * sd['model'].items()}"; NULL when there is nothing to fix), and the key
 * prefix of the model subtree examined ("" or "model."). Borrowed. */
CKPT_API const char *ckpt_keys_fix_python(const ckpt_keys_report *r);
CKPT_API const char *ckpt_keys_root(const ckpt_keys_report *r);
/* Why there is no fix although wrappers were found ("'module.x' and 'x'
 * would both be named 'x'"), or NULL. Borrowed. */
CKPT_API const char *ckpt_keys_collision(const ckpt_keys_report *r);

/* The order of names in every human listing (`ckpt inspect`, diff, match,
 * rename, doctor): natural, digit runs compared as numbers ("layers.2"
 * before "layers.10"; leading zeros do not count), every other byte as
 * itself; names equal that way ("1" and "01") by their bytes, then by
 * position: one order, always. Writes to order[0..n) the indices of the
 * n names (NUL-terminated) in that order. Names already in order (a
 * state_dict's keys as torch.save writes them) cost n - 1 comparisons.
 * 0, CKPT_E_INVALID_ARG (order or names NULL while n > 0), CKPT_E_NOMEM
 * (order untouched). */
CKPT_API int ckpt_natural_order(size_t *order, const char *const *names, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* CKPT_INCLUDE_KEYS_H */
