/* flatten.h - names for the leaves of an object tree, by ckpt.h's rule:
 * dict keys as written (ckpt_value_key_text), list/tuple/set indices in
 * decimal, joined with "."; a bare root leaf is named "". */
#ifndef CKPT_FLATTEN_H
#define CKPT_FLATTEN_H

#include "base/alloc.h"
#include "ckpt.h"
#include "model/value.h"

typedef struct ckpt_named_value {
    const char *name;
    const ckpt_value *value;
} ckpt_named_value;

typedef struct ckpt_flat {
    ckpt_named_value *tensors; /* TENSOR leaves, sorted by name */
    size_t ntensors;
    ckpt_named_value *values; /* every other leaf, sorted by name */
    size_t nvalues;
    /* tensors whose name a later tensor took ({'w': a, b'w': b}, or
     * {'a': {'b': x}, 'a.b': y}): not listed, but in the tree that loaders
     * rebuild, so their storages need ids too; NULL when none */
    ckpt_named_value *shadowed;
    size_t nshadowed;
    /* leaves that different paths name alike ({'a.b': x, 'a': {'b': y}},
     * {'0': x, 0: y}, {'w': x, b'w': y}): both are listed, for torch.load
     * keeps both; how many such pairs, and the first one's name and paths
     * as Python subscripts ("['a.b']", "['a']['b']"); NULL when none */
    size_t ncollisions;
    const char *collision_name, *collision_paths[2];
} ckpt_flat;

/* Flattens root into arena `a`. For equal names reached by equal keys (a
 * key repeated in one dict, as a pickle may write it) the later leaf wins,
 * as a Python dict keeps the last of repeated keys; equal names reached by
 * different keys are both kept, next to each other, and counted in
 * ncollisions. Bounds: lim->max_tensors
 * leaves, lim->max_name_bytes per name, lim->max_depth nesting,
 * max_visits nodes visited and max_bytes of entries and names (a node
 * shared by several paths is visited and named once per path, so a
 * hostile DAG must be bounded). One walk charges each leaf to these
 * bounds before it is recorded, so an expansion past a bound is refused
 * with no more than the bound allocated for it. Errors (CKPT_E_LIMIT,
 * CKPT_E_FORMAT for a pickle MARK left in the tree, CKPT_E_NOMEM) name
 * file and member. A name that is a top-level string key's whole text is
 * that key's string, not a copy: root must live as long as `a`. */
int ckpt_flatten(ckpt_flat *out, ckpt_arena *a, const ckpt_value *root, const ckpt_limits *lim,
                 uint64_t max_visits, uint64_t max_bytes, const char *file, const char *member);

#endif
