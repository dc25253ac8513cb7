/* index_json.h - the shard files of a sharded-checkpoint index
 * ("*.safetensors.index.json", "*.bin.index.json") as the loaders read
 * them: `json.load(open(path, encoding="utf-8"))["weight_map"].values()`.
 *
 * The document is read with Python's json rules, not RFC 8259's: NaN,
 * Infinity and -Infinity are numbers; integers of any size; duplicate keys
 * keep the last value (so a shard named only under a replaced key is not
 * opened, and one under the last is); lone surrogates in \u escapes are
 * allowed; raw control characters in strings, single quotes, comments,
 * trailing commas, leading zeros, a byte-order mark and text after the
 * value are errors, as is input that is not strict UTF-8. What json
 * rejects, ckpt rejects (with the offset json would name). */
#ifndef CKPT_INDEX_JSON_H
#define CKPT_INDEX_JSON_H

#include "base/alloc.h"
#include "ckpt.h"

typedef struct ckpt_index_shard {
    const char *name; /* UTF-8 (a lone surrogate as its 3-byte form),
                         NUL-terminated; may hold a NUL from "\u0000" */
    size_t len;
    const char *key; /* the weight_map key (a tensor name), decoded alike */
    size_t key_len;
    size_t order;    /* the key's first place in weight_map: Python's dict order */
    uint64_t offset; /* of the value in the document */
    int surrogate;   /* holds a lone surrogate: no file name json's
                         caller could open as UTF-8 */
} ckpt_index_shard;

typedef struct ckpt_index {
    int has_weight_map;       /* the top-level object's last "weight_map"
                             value is an object */
    ckpt_index_shard *shards; /* its string values, one per distinct key
                                 (the last value of each), in the
                                 dict's order; not deduplicated */
    size_t nshards;
    size_t non_strings;         /* values that are not strings */
    uint64_t first_non_string;  /* offset of the first of them */
    const char *non_string_key; /* and its key */
    uint64_t metadata_at;       /* the last top-level "metadata" value: */
    size_t metadata_len;        /* its text (0: none) */
} ckpt_index;

/* Reads doc[0..n). Nesting deeper than max_depth is refused (Python
 * stops near 1000 levels too). All memory from `a`; `file` names the
 * input in errors. Errors: CKPT_E_FORMAT with the offset json reports
 * (not JSON, or the top level is not an object), CKPT_E_LIMIT,
 * CKPT_E_NOMEM. */
int ckpt_index_read(ckpt_index *ix, ckpt_arena *a, const uint8_t *doc, size_t n, const char *file,
                    uint32_t max_depth);

#endif
