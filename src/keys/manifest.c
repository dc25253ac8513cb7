/* manifest.c - sets of tensor keys (name, dtype, shape) from a checkpoint,
 * from a JSON manifest (`ckpt inspect --json` output), or built by hand;
 * the input of ckpt_match and ckpt_diff. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/json_scan.h"
#include "base/source.h"
#include "model/flatten.h"
#include "model/file.h"
#include "model/walk.h"
#include "keys/keys.h"
#include "format/structure.h"
#include "format/write.h"

static ckpt_manifest *manifest_new(const char *name) {
    ckpt_manifest *m = ckpt_malloc(sizeof *m);
    if (!m) return NULL;
    memset(m, 0, sizeof *m);
    m->name = ckpt_arena_strdup(&m->arena, name ? name : "");
    if (!m->name) {
        ckpt_free(m);
        return NULL;
    }
    return m;
}

int ckpt_manifest_new(ckpt_manifest **out, const char *name) {
    *out = manifest_new(name);
    if (!*out) return ckpt_err(CKPT_E_NOMEM, name, "", CKPT_NO_OFFSET, "out of memory");
    return 0;
}

void ckpt_manifest_free(ckpt_manifest *m) {
    if (!m) return;
    ckpt_strmap_free(&m->index);
    ckpt_strmap_free(&m->ver_index);
    ckpt_strmap_free(&m->roots);
    ckpt_free(m->entries);
    ckpt_free(m->tie_parent);
    ckpt_free(m->tie_rank);
    ckpt_close(m->owned);
    ckpt_arena_free(&m->arena);
    ckpt_free(m);
}

/* Room for n more entries. */
static int reserve(ckpt_manifest *m, size_t more) {
    size_t need;
    if (__builtin_add_overflow(m->n, more, &need) || need > SIZE_MAX / sizeof(ckpt_manifest_entry))
        return ckpt_err(CKPT_E_NOMEM, m->name, "", CKPT_NO_OFFSET, "too many keys");
    if (need > m->cap) {
        size_t cap = m->cap ? m->cap : 16;
        while (cap < need) cap = cap > SIZE_MAX / 4 / sizeof(ckpt_manifest_entry) ? need : cap * 2;
        ckpt_manifest_entry *e = ckpt_realloc(m->entries, cap * sizeof *e);
        if (!e) return ckpt_err(CKPT_E_NOMEM, m->name, "", CKPT_NO_OFFSET, "out of memory");
        m->entries = e;
        m->cap = cap;
    }
    return 0;
}

/* Appends an entry whose strings and shape already live long enough, not
 * indexed yet; len is strlen(e->name). A name of 4 GiB or more is
 * refused (CKPT_E_LIMIT), as the index would. */
static int append(ckpt_manifest *m, const ckpt_manifest_entry *e, size_t len) {
    if (len > UINT32_MAX)
        return ckpt_err(CKPT_E_LIMIT, m->name, "", CKPT_NO_OFFSET,
                        "name of %zu bytes: expected less than 4 GiB", len);
    int rc = reserve(m, 1);
    if (rc) return rc;
    m->entries[m->n] = *e;
    m->n++;
    return 0;
}

/* Gives back the room reserve() doubled into beyond the n entries (up
 * to half of them for a manifest read without a count). */
static void shrink(ckpt_manifest *m) {
    if (m->n == m->cap || m->n == 0) return;
    ckpt_manifest_entry *e = ckpt_realloc(m->entries, m->n * sizeof *e);
    if (!e) return; /* the larger block is kept */
    m->entries = e;
    m->cap = m->n;
}

/* Names hashed (and their slots prefetched) ahead of the one indexed or
 * looked up, their keys prefetched AHEAD / 2 ahead: a table of a million
 * keys is far larger than the caches. */
#define AHEAD 16

/* Indexes entries [from, n) in order. Returns 0, CKPT_E_NOMEM, or
 * CKPT_E_INVALID_ARG for a repeated name (the caller words the error with
 * *dup, the entry repeating an earlier one; entries from *dup on are
 * dropped). */
static int index_from(ckpt_manifest *m, size_t from, size_t *dup) {
    uint64_t hash[AHEAD];
    size_t len[AHEAD];
    /* the table once for every entry (no rehash while indexing) */
    int rc = ckpt_strmap_reserve(&m->index, m->n);
    if (rc) return rc;
    for (size_t i = from; i < m->n + AHEAD; i++) {
        if (i >= from + AHEAD) {
            size_t k = i - AHEAD;
            ckpt_strmap_slot *slot;
            rc = ckpt_strmap_put_hashed(&m->index, m->entries[k].name, len[k % AHEAD],
                                        hash[k % AHEAD], k, &slot);
            if (rc < 0) return rc;
            if (rc == 0) {
                *dup = k;
                m->n = k;
                return CKPT_E_INVALID_ARG;
            }
        }
        if (i < m->n) {
            len[i % AHEAD] = strlen(m->entries[i].name);
            hash[i % AHEAD] = ckpt_strmap_hash(m->entries[i].name, len[i % AHEAD]);
            ckpt_strmap_prefetch(&m->index, hash[i % AHEAD]);
        }
    }
    return 0;
}

/* append() and index the entry. CKPT_E_INVALID_ARG for a repeated name
 * (the caller words the error). */
static int push(ckpt_manifest *m, const ckpt_manifest_entry *e, size_t len) {
    size_t dup;
    int rc = append(m, e, len);
    return rc ? rc : index_from(m, m->n - 1, &dup);
}

static const uint64_t no_dims[1] = {0};

/* A copy of dims in m, shared with an equal shape copied before: most
 * manifests hold a few shapes many times (every layer alike), found in a
 * small table by a hash of the dims. NULL when out of memory. */
static const uint64_t *shape_copy(ckpt_manifest *m, const uint64_t *dims, unsigned ndim) {
    if (!ndim) return no_dims;
    uint64_t h = ndim;
    for (unsigned d = 0; d < ndim; d++) h = (h ^ dims[d]) * 0x9E3779B97F4A7C15u;
    ckpt_manifest_shape *c = &m->shapes[h >> (64 - CKPT_MANIFEST_SHAPES_BITS)];
    if (c->ndim == ndim && memcmp(c->dims, dims, ndim * sizeof *dims) == 0) return c->dims;
    uint64_t *copy = ckpt_arena_array(&m->arena, ndim, sizeof *copy);
    if (!copy) return NULL;
    memcpy(copy, dims, ndim * sizeof *dims);
    *c = (ckpt_manifest_shape){copy, ndim};
    return copy;
}

int ckpt_manifest_add(ckpt_manifest *m, const char *name, const char *dtype, unsigned ndim,
                      const uint64_t *shape) {
    if (!m || !name || !dtype || ndim > CKPT_MAX_NDIM || (ndim && !shape))
        return ckpt_err(CKPT_E_INVALID_ARG, m ? m->name : "", "", CKPT_NO_OFFSET,
                        "manifest entry needs a name, a dtype and at most %d dimensions",
                        CKPT_MAX_NDIM);
    ckpt_manifest_entry e = {0};
    e.name = ckpt_arena_strdup(&m->arena, name);
    e.dtype = ckpt_arena_strdup(&m->arena, dtype);
    e.ndim = ndim;
    e.shape = shape_copy(m, shape, ndim);
    if (!e.name || !e.dtype || !e.shape)
        return ckpt_err(CKPT_E_NOMEM, m->name, "", CKPT_NO_OFFSET, "out of memory");
    int rc = push(m, &e, strlen(e.name));
    if (rc == CKPT_E_INVALID_ARG)
        return ckpt_err(rc, m->name, "", CKPT_NO_OFFSET, "duplicate key '%s'", name);
    return rc;
}

/* ------------------------------------------------------------ ties */

size_t ckpt_manifest_tie_root(const ckpt_manifest *m, size_t i) {
    while (i < m->ntie && m->tie_parent[i] != i) i = m->tie_parent[i];
    return i;
}

/* The forest covers every entry added so far (entries added later start
 * untied). */
static int tie_reserve(ckpt_manifest *m) {
    if (m->ntie == m->n) return 0;
    size_t *p = ckpt_realloc(m->tie_parent, m->n * sizeof *p);
    if (p) m->tie_parent = p;
    unsigned char *r = p ? ckpt_realloc(m->tie_rank, m->n) : NULL;
    if (!r) return ckpt_err(CKPT_E_NOMEM, m->name, "", CKPT_NO_OFFSET, "out of memory");
    m->tie_rank = r;
    for (size_t i = m->ntie; i < m->n; i++) {
        p[i] = i;
        r[i] = 0;
    }
    m->ntie = m->n;
    return 0;
}

/* Ties entries a and b; CKPT_E_INVALID_ARG when their dtypes or shapes
 * differ (one parameter has one of each; the caller words the error). */
static int tie(ckpt_manifest *m, size_t a, size_t b) {
    const ckpt_manifest_entry *x = &m->entries[a], *y = &m->entries[b];
    if (strcmp(x->dtype, y->dtype) != 0 || x->ndim != y->ndim ||
        memcmp(x->shape, y->shape, x->ndim * sizeof *x->shape) != 0)
        return CKPT_E_INVALID_ARG;
    int rc = tie_reserve(m);
    if (rc) return rc;
    a = ckpt_manifest_tie_root(m, a);
    b = ckpt_manifest_tie_root(m, b);
    if (a == b) return 0;
    if (m->tie_rank[a] < m->tie_rank[b]) {
        size_t t = a;
        a = b;
        b = t;
    }
    m->tie_parent[b] = a;
    if (m->tie_rank[a] == m->tie_rank[b]) m->tie_rank[a]++;
    return 0;
}

int ckpt_manifest_tie(ckpt_manifest *m, const char *a, const char *b) {
    if (!m || !a || !b)
        return ckpt_err(CKPT_E_INVALID_ARG, m ? m->name : "", "", CKPT_NO_OFFSET,
                        "ckpt_manifest_tie needs a manifest and two names");
    size_t i = ckpt_manifest_lookup(m, a, strlen(a)), j = ckpt_manifest_lookup(m, b, strlen(b));
    if (i == CKPT_KEYS_NONE || j == CKPT_KEYS_NONE)
        return ckpt_err(CKPT_E_INVALID_ARG, m->name, "", CKPT_NO_OFFSET,
                        "tie of '%s' and '%s': '%s' is not a key", a, b,
                        i == CKPT_KEYS_NONE ? a : b);
    int rc = tie(m, i, j);
    if (rc == CKPT_E_INVALID_ARG)
        return ckpt_err(rc, m->name, "", CKPT_NO_OFFSET,
                        "tie of '%s' and '%s': one parameter has one dtype and shape, "
                        "these differ",
                        a, b);
    return rc;
}

int ckpt_manifest_from_file(ckpt_manifest **out, const ckpt_file *f) {
    *out = NULL;
    ckpt_manifest *m = manifest_new(ckpt_file_path(f));
    if (!m) return ckpt_err(CKPT_E_NOMEM, ckpt_file_path(f), "", CKPT_NO_OFFSET, "out of memory");
    size_t n = ckpt_file_tensor_count(f), dup;
    int rc = reserve(m, n);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const ckpt_tensor *t = ckpt_file_tensor(f, i);
        ckpt_manifest_entry e = {ckpt_tensor_name(t), ckpt_dtype_name(ckpt_tensor_dtype(t)),
                                 ckpt_tensor_ndim(t), ckpt_tensor_shape(t), t};
        rc = append(m, &e, strlen(e.name));
    }
    if (rc == 0) rc = index_from(m, 0, &dup);
    /* flattening keeps one tensor per name, so this cannot repeat */
    if (rc == CKPT_E_INVALID_ARG)
        rc = ckpt_err(CKPT_E_FORMAT, m->name, "", CKPT_NO_OFFSET, "duplicate tensor name '%s'",
                      m->entries[dup].name);
    if (rc) {
        ckpt_manifest_free(m);
        return rc;
    }
    m->file = f;
    m->meta_keys = f->meta_keys;
    m->meta_vals = f->meta_vals;
    m->nmeta = f->nmeta;
    m->values = f->values;
    m->nvalues = f->nvalues;
    if ((rc = ckpt_manifest_add_versions(m, f))) {
        ckpt_manifest_free(m);
        return rc;
    }
    *out = m;
    return 0;
}

int ckpt_manifest_stored(ckpt_manifest **out, const ckpt_manifest *m) {
    const ckpt_file *f = m ? m->file : NULL;
    const char *text = NULL;
    *out = NULL;
    for (size_t i = 0; f && i < f->nmeta; i++)
        if (strcmp(f->meta_keys[i], CKPT_META_ALIASES) == 0) text = f->meta_vals[i];
    if (!text) return 0;
    json_t *doc = json_loads(text, JSON_REJECT_DUPLICATES, NULL);
    size_t na = json_is_object(doc) ? json_object_size(doc) : 0;
    if (!json_is_object(doc)) {
        json_decref(doc);
        return ckpt_err(CKPT_E_FORMAT, m->name, "", 8,
                        "__metadata__ \"" CKPT_META_ALIASES "\" must be a JSON object");
    }
    ckpt_manifest *s = manifest_new(m->name);
    const char **keys = s ? ckpt_arena_array(&s->arena, m->nmeta + na + 1, sizeof *keys) : NULL;
    const char **vals = keys ? ckpt_arena_array(&s->arena, m->nmeta + na + 1, sizeof *vals) : NULL;
    int rc = vals ? reserve(s, m->n) : ckpt_err_nomem();
    for (size_t k = 0; !rc && k < m->nmeta; k++) {
        keys[k] = m->meta_keys[k];
        vals[k] = m->meta_vals[k];
    }
    size_t nmeta = m->nmeta;
    const char *alias;
    json_t *target;
    json_object_foreach(doc, alias, target) {
        if (rc || !json_is_string(target)) continue;
        if (!(keys[nmeta] = ckpt_arena_strdup(&s->arena, alias)) ||
            !(vals[nmeta] = ckpt_arena_strdup(&s->arena, json_string_value(target))))
            rc = ckpt_err_nomem();
        else
            nmeta++;
    }
    for (size_t i = 0; !rc && i < m->n; i++)
        if (!json_object_get(doc, m->entries[i].name))
            rc = append(s, &m->entries[i], strlen(m->entries[i].name));
    json_decref(doc);
    size_t dup;
    if (!rc) rc = index_from(s, 0, &dup);
    if (!rc) {
        s->file = f;
        s->meta_keys = keys;
        s->meta_vals = vals;
        s->nmeta = nmeta;
        s->values = m->values;
        s->nvalues = m->nvalues;
        rc = ckpt_manifest_add_versions(s, f);
    }
    if (rc) {
        ckpt_manifest_free(s);
        return rc;
    }
    *out = s;
    return 0;
}

int ckpt_manifest_set_metadata(ckpt_manifest *m, const ckpt_file *f) {
    if (!m || !f)
        return ckpt_err(CKPT_E_INVALID_ARG, m ? m->name : "", "", CKPT_NO_OFFSET,
                        "manifest metadata needs a manifest and a file");
    size_t n = f->nmeta;
    const char **keys = ckpt_arena_array(&m->arena, n ? n : 1, sizeof *keys);
    const char **vals = ckpt_arena_array(&m->arena, n ? n : 1, sizeof *vals);
    for (size_t i = 0; keys && vals && i < n; i++)
        if (!(keys[i] = ckpt_arena_strdup(&m->arena, f->meta_keys[i])) ||
            !(vals[i] = ckpt_arena_strdup(&m->arena, f->meta_vals[i])))
            keys = NULL;
    if (!keys || !vals) return ckpt_err(CKPT_E_NOMEM, m->name, "", CKPT_NO_OFFSET, "out of memory");
    m->meta_keys = keys;
    m->meta_vals = vals;
    m->nmeta = n;
    return 0;
}

int ckpt_manifest_add_leaf(ckpt_manifest *m, const char *name) {
    if (!m || !name)
        return ckpt_err(CKPT_E_INVALID_ARG, m ? m->name : "", "", CKPT_NO_OFFSET,
                        "manifest leaf needs a name");
    if (ckpt_arena_grow(&m->arena, (void **)&m->leaves, &m->cleaves, m->nleaves + 1,
                        sizeof *m->leaves) ||
        !(m->leaves[m->nleaves] = ckpt_arena_strdup(&m->arena, name)))
        return ckpt_err(CKPT_E_NOMEM, m->name, "", CKPT_NO_OFFSET, "out of memory");
    m->nleaves++;
    return 0;
}

int ckpt_manifest_add_root_entry(ckpt_manifest *m, const char *key, int tensor) {
    if (!m || !key)
        return ckpt_err(CKPT_E_INVALID_ARG, m ? m->name : "", "", CKPT_NO_OFFSET,
                        "manifest root entry needs a key");
    size_t len = strlen(key);
    char *copy = ckpt_arena_strndup(&m->arena, key, len);
    ckpt_strmap_slot *sl;
    if (!copy || ckpt_strmap_put(&m->roots, copy, len, tensor != 0, &sl) < 0)
        return ckpt_err(CKPT_E_NOMEM, m->name, "", CKPT_NO_OFFSET, "out of memory");
    sl->val = tensor != 0;
    return 0;
}

int ckpt_manifest_push_entry(ckpt_manifest *m, const ckpt_manifest_entry *e) {
    size_t len = strlen(e->name);
    ckpt_manifest_entry copy = *e;
    if (!(copy.name = ckpt_arena_strndup(&m->arena, e->name, len)))
        return ckpt_err(CKPT_E_NOMEM, m->name, "", CKPT_NO_OFFSET, "out of memory");
    return push(m, &copy, len);
}

/* ------------------------------------------------------------ logical tree */

/* Flattens a value tree the way ckpt_file_flatten does (file.c): dict keys
 * as text, list/tuple/set indices in decimal, joined with "."; equal names
 * from different keys are both kept (and refused as duplicates), a key
 * one dict repeats keeps its later value (flatten.h). */
static int from_tree(ckpt_manifest *m, const ckpt_value *root, const ckpt_file *f) {
    ckpt_flat fl;
    int rc = ckpt_file_flatten_value(f, &m->arena, root, CKPT_META_STRUCTURE, &fl);
    if (rc) return rc;
    rc = reserve(m, fl.ntensors);
    for (size_t i = 0; !rc && i < fl.ntensors; i++) {
        const ckpt_tensor *t = fl.tensors[i].value->u.tensor;
        ckpt_manifest_entry e = {fl.tensors[i].name, ckpt_dtype_name(t->dtype), t->ndim, t->shape,
                                 t};
        rc = append(m, &e, strlen(e.name));
    }
    size_t dup;
    if (!rc) rc = index_from(m, 0, &dup); /* names are unique now */
    m->values = fl.values;
    m->nvalues = fl.nvalues;
    return rc;
}

int ckpt_manifest_logical(ckpt_manifest **out, const ckpt_manifest *m) {
    *out = NULL;
    if (!m->file) return 0;
    ckpt_manifest *lm = manifest_new(m->name);
    if (!lm) return ckpt_err(CKPT_E_NOMEM, m->name, "", CKPT_NO_OFFSET, "out of memory");
    const ckpt_value *root = NULL;
    int rc = ckpt_structure_decode(&root, m->file, &lm->arena);
    if (!rc && root != ckpt_file_root(m->file)) {
        lm->file = m->file;
        lm->meta_keys = m->meta_keys;
        lm->meta_vals = m->meta_vals;
        lm->nmeta = m->nmeta;
        if (!(rc = from_tree(lm, root, m->file))) {
            *out = lm;
            return 0;
        }
    }
    ckpt_manifest_free(lm);
    return rc;
}

/* ------------------------------------------------------------ JSON */

static int bad(const ckpt_manifest *m, size_t i, const char *what) {
    return ckpt_err(CKPT_E_FORMAT, m->name, "", CKPT_NO_OFFSET, "manifest tensors[%zu]: %s", i,
                    what);
}

/* A JSON string copied into the arena; NULL if v is not a string. jansson
 * refuses \u0000 (no JSON_ALLOW_NUL), so the copy is a C string. */
static const char *json_text(ckpt_manifest *m, const json_t *v) {
    return json_is_string(v)
               ? ckpt_arena_strndup(&m->arena, json_string_value(v), json_string_length(v))
               : NULL;
}

static int parse_entry(ckpt_manifest *m, size_t i, const json_t *t, const ckpt_limits *lim) {
    if (!json_is_object(t)) return bad(m, i, "expected an object");
    const json_t *jname = json_object_get(t, "name");
    if (json_is_string(jname) &&
        !ckpt_walk_name_fits(lim->max_name_bytes, json_string_length(jname), 0))
        return ckpt_err(CKPT_E_LIMIT, m->name, "", CKPT_NO_OFFSET,
                        "manifest tensors[%zu]: name of %zu bytes: expected at most %" PRIu64
                        " (max_name_bytes %" PRIu64 " counts the NUL, as for a checkpoint's names)",
                        i, json_string_length(jname),
                        lim->max_name_bytes ? lim->max_name_bytes - 1 : 0, lim->max_name_bytes);
    const char *name = json_text(m, jname);
    if (!name) return bad(m, i, "expected \"name\" to be a string");
    /* most manifests hold a few dtypes, often in runs: reuse the text */
    const json_t *jdtype = json_object_get(t, "dtype");
    const char *prev = m->n ? m->entries[m->n - 1].dtype : NULL, *dtype;
    if (prev && json_is_string(jdtype) && strcmp(json_string_value(jdtype), prev) == 0)
        dtype = prev;
    else if (!json_is_string(jdtype) || json_string_length(jdtype) > 64 ||
             !(dtype = json_text(m, jdtype)))
        return bad(m, i, "expected \"dtype\" to be a short string");
    const json_t *shape = json_object_get(t, "shape");
    if (!json_is_array(shape)) return bad(m, i, "expected \"shape\" to be a list");
    size_t ndim = json_array_size(shape);
    unsigned max_ndim = lim->max_ndim < CKPT_MAX_NDIM ? lim->max_ndim : CKPT_MAX_NDIM;
    if (ndim > max_ndim)
        return ckpt_err(CKPT_E_LIMIT, m->name, "", CKPT_NO_OFFSET,
                        "manifest tensors[%zu]: %zu dimensions (limit %u)", i, ndim, max_ndim);
    uint64_t dims[CKPT_MAX_NDIM];
    for (size_t d = 0; d < ndim; d++) {
        const json_t *v = json_array_get(shape, d);
        if (!json_is_integer(v) || json_integer_value(v) < 0)
            return bad(m, i, "expected each dimension to be a non-negative integer");
        dims[d] = (uint64_t)json_integer_value(v);
    }
    ckpt_manifest_entry e = {name, dtype, (unsigned)ndim, shape_copy(m, dims, (unsigned)ndim),
                             NULL};
    if (!e.shape) return ckpt_err(CKPT_E_NOMEM, m->name, "", CKPT_NO_OFFSET, "out of memory");
    return append(m, &e, json_string_length(jname));
}

/* "metadata": an object of strings, or null/absent. */
static int parse_metadata(ckpt_manifest *m, const json_t *md) {
    if (!md || json_is_null(md)) return 0;
    if (!json_is_object(md))
        return ckpt_err(CKPT_E_FORMAT, m->name, "", CKPT_NO_OFFSET,
                        "manifest \"metadata\": expected an object of strings or null");
    size_t n = json_object_size(md);
    const char **keys = ckpt_arena_array(&m->arena, n ? n : 1, sizeof *keys);
    const char **vals = ckpt_arena_array(&m->arena, n ? n : 1, sizeof *vals);
    if (!keys || !vals) return ckpt_err(CKPT_E_NOMEM, m->name, "", CKPT_NO_OFFSET, "out of memory");
    const char *k;
    const json_t *v;
    size_t i = 0;
    json_object_foreach((json_t *)md, k, v) {
        /* values that are not strings cannot be aliases: skip them */
        if (!json_is_string(v)) continue;
        keys[i] = ckpt_arena_strdup(&m->arena, k);
        vals[i] = json_text(m, v);
        if (!keys[i]) return ckpt_err(CKPT_E_NOMEM, m->name, "", CKPT_NO_OFFSET, "out of memory");
        if (vals[i]) i++;
    }
    m->meta_keys = keys;
    m->meta_vals = vals;
    m->nmeta = i;
    return 0;
}

/* "ties": a list of name groups, each one parameter (optional; null or
 * absent: none). Bounded by the document: every name is a listed tensor. */
static int parse_ties(ckpt_manifest *m, const json_t *ties) {
    if (!ties || json_is_null(ties)) return 0;
    if (!json_is_array(ties))
        return ckpt_err(CKPT_E_FORMAT, m->name, "", CKPT_NO_OFFSET,
                        "manifest \"ties\": expected a list of lists of names or null");
    for (size_t g = 0; g < json_array_size(ties); g++) {
        const json_t *group = json_array_get(ties, g);
        if (!json_is_array(group))
            return ckpt_err(CKPT_E_FORMAT, m->name, "", CKPT_NO_OFFSET,
                            "manifest ties[%zu]: expected a list of names", g);
        size_t first = CKPT_KEYS_NONE;
        for (size_t k = 0; k < json_array_size(group); k++) {
            const json_t *v = json_array_get(group, k);
            size_t i = json_is_string(v)
                           ? ckpt_manifest_lookup(m, json_string_value(v), json_string_length(v))
                           : CKPT_KEYS_NONE;
            if (i == CKPT_KEYS_NONE)
                return ckpt_err(CKPT_E_FORMAT, m->name, "", CKPT_NO_OFFSET,
                                "manifest ties[%zu][%zu]: expected the name of a listed tensor", g,
                                k);
            if (first == CKPT_KEYS_NONE) first = i;
            int rc = tie(m, first, i);
            if (rc == CKPT_E_INVALID_ARG)
                return ckpt_err(CKPT_E_FORMAT, m->name, "", CKPT_NO_OFFSET,
                                "manifest ties[%zu]: '%s' and '%s' differ in dtype or shape, so "
                                "they cannot be one parameter",
                                g, m->entries[first].name, m->entries[i].name);
            if (rc) return rc;
        }
    }
    return 0;
}

/* Parses an already loaded document. */
static int from_json(ckpt_manifest *m, const json_t *doc, const ckpt_limits *lim) {
    const json_t *tensors = json_is_object(doc) ? json_object_get(doc, "tensors") : NULL;
    if (!json_is_array(tensors))
        return ckpt_err(CKPT_E_FORMAT, m->name, "", CKPT_NO_OFFSET,
                        "not a manifest: expected a JSON object with a \"tensors\" list "
                        "(the output of ckpt inspect --json)");
    size_t n = json_array_size(tensors);
    if (n > lim->max_tensors)
        return ckpt_err(CKPT_E_LIMIT, m->name, "", CKPT_NO_OFFSET,
                        "manifest lists %zu tensors (limit %" PRIu64 ")", n, lim->max_tensors);
    int rc = reserve(m, n);
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = parse_entry(m, i, json_array_get(tensors, i), lim);
    size_t dup;
    if (rc == 0 && (rc = index_from(m, 0, &dup)) == CKPT_E_INVALID_ARG)
        return ckpt_err(CKPT_E_FORMAT, m->name, "", CKPT_NO_OFFSET,
                        "manifest tensors[%zu]: duplicate name '%s'", dup, m->entries[dup].name);
    if (rc == 0) rc = parse_metadata(m, json_object_get(doc, "metadata"));
    if (rc == 0) rc = parse_ties(m, json_object_get(doc, "ties"));
    if (rc == 0)
        rc = ckpt_manifest_parse_defaults(m, json_object_get(doc, "module_versions"),
                                          json_object_get(doc, "batchnorm_counters"));
    return rc;
}

/* ------------------------------------------------------------ one pass */

/* The manifest read in one pass with no tree (base/json_scan.h): what
 * `ckpt inspect --json` writes, a million keys in a fraction of a second.
 * It accepts exactly what from_json accepts, or steps aside: anything it
 * does not read exactly (an error, a limit, a duplicate, escapes in an
 * object key, very many keys in one object) returns SCAN_DEFER and the
 * jansson path decides and words the message, so both agree. */
#define SCAN_DEFER 2    /* not 1: ckpt_json_next answers 1 for "closed" */
#define SCAN_KEYS 32    /* keys per object checked for duplicates */
#define SCAN_KEY_MAX 64 /* bytes of such a key */

typedef struct scan_keys {
    char text[SCAN_KEYS][SCAN_KEY_MAX];
    size_t len[SCAN_KEYS], n;
} scan_keys;

/* The next object key into k->text[k->n]; SCAN_DEFER for a repeated,
 * escaped-and-long or one-too-many key. */
static int scan_key(ckpt_json_scan *s, scan_keys *k, const char **key, size_t *len) {
    if (k->n == SCAN_KEYS) return SCAN_DEFER;
    char *slot = k->text[k->n];
    const char *t = ckpt_json_string(s, slot, SCAN_KEY_MAX, 0, len);
    if (!t || *len >= SCAN_KEY_MAX || ckpt_json_expect(s, ':', "':'")) return SCAN_DEFER;
    if (t != slot) memcpy(slot, t, *len);
    for (size_t i = 0; i < k->n; i++)
        if (k->len[i] == *len && memcmp(k->text[i], slot, *len) == 0) return SCAN_DEFER;
    k->len[k->n++] = *len;
    *key = slot;
    return 0;
}

/* A number jansson takes: an integer that fits a long long, a real that
 * does not overflow a double. */
static int scan_number(ckpt_json_scan *s) {
    uint64_t v;
    size_t start = s->i;
    int rc = ckpt_json_number(s, &v);
    if (rc == 0) return v > (uint64_t)INT64_MAX ? SCAN_DEFER : 0;
    char text[64];
    size_t len = s->i - start;
    if (rc < 0 || len >= sizeof text) return SCAN_DEFER;
    memcpy(text, s->s + start, len);
    text[len] = '\0';
    errno = 0;
    if (strpbrk(text, ".eE")) {
        double d = strtod(text, NULL);
        return errno == ERANGE && (d == HUGE_VAL || d == -HUGE_VAL) ? SCAN_DEFER : 0;
    }
    (void)strtoll(text, NULL, 10);
    return errno == ERANGE ? SCAN_DEFER : 0;
}

/* Skips a value as jansson would accept it (unique keys in every object). */
static int scan_skip(ckpt_json_scan *s) {
    int c = ckpt_json_peek(s);
    if (c == '-' || (c >= '0' && c <= '9')) return scan_number(s);
    if (c != '[' && c != '{') return ckpt_json_skip(s) ? SCAN_DEFER : 0;
    if (ckpt_json_open(s)) return SCAN_DEFER;
    int close = c == '[' ? ']' : '}', rc = 0;
    if (ckpt_json_empty(s, close)) return 0;
    scan_keys *k = NULL;
    if (c == '{' && !(k = ckpt_malloc(sizeof *k))) return CKPT_E_NOMEM;
    if (k) k->n = 0;
    do {
        const char *key;
        size_t len;
        if (k && (rc = scan_key(s, k, &key, &len))) break;
        if ((rc = scan_skip(s))) break;
    } while ((rc = ckpt_json_next(s, close)) == 0);
    ckpt_free(k);
    return rc < 0 ? (rc == CKPT_E_NOMEM ? rc : SCAN_DEFER) : rc == 1 ? 0 : rc;
}

static int scan_entry(ckpt_json_scan *s, ckpt_manifest *m, const ckpt_limits *lim) {
    if (ckpt_json_peek(s) != '{' || ckpt_json_open(s) || ckpt_json_empty(s, '}')) return SCAN_DEFER;
    scan_keys k = {.n = 0};
    const char *name = NULL, *dtype = NULL;
    size_t name_len = 0, ndim = 0;
    uint64_t dims[CKPT_MAX_NDIM];
    int has_shape = 0, rc;
    do {
        const char *key, *t;
        size_t len;
        if ((rc = scan_key(s, &k, &key, &len))) return rc;
        if (len == 4 && memcmp(key, "name", 4) == 0) {
            if (ckpt_json_peek(s) != '"' || !(t = ckpt_json_string(s, NULL, 0, 1, &name_len)))
                return SCAN_DEFER;
            if (!ckpt_walk_name_fits(lim->max_name_bytes, name_len, 0) || strlen(t) != name_len)
                return SCAN_DEFER;
            name = t;
        } else if (len == 5 && memcmp(key, "dtype", 5) == 0) {
            char tmp[65];
            const char *prev = m->n ? m->entries[m->n - 1].dtype : NULL;
            if (ckpt_json_peek(s) != '"' || !(t = ckpt_json_string(s, tmp, 64, 0, &len)) ||
                len > 64)
                return SCAN_DEFER;
            if (prev && strlen(prev) == len && memcmp(prev, t, len) == 0)
                dtype = prev;
            else if (memchr(t, 0, len) || !(dtype = ckpt_arena_strndup(&m->arena, t, len)))
                return dtype ? SCAN_DEFER : CKPT_E_NOMEM;
        } else if (len == 5 && memcmp(key, "shape", 5) == 0) {
            if (ckpt_json_peek(s) != '[' || ckpt_json_open(s)) return SCAN_DEFER;
            has_shape = 1;
            if (!ckpt_json_empty(s, ']')) do {
                    uint64_t v;
                    int c = ckpt_json_peek(s);
                    /* jansson's integers are long long; -0 and the rest defer */
                    if (c < '0' || c > '9' || ckpt_json_number(s, &v) != 0 ||
                        v > (uint64_t)INT64_MAX || ndim == CKPT_MAX_NDIM || ndim >= lim->max_ndim)
                        return SCAN_DEFER;
                    dims[ndim++] = v;
                } while ((rc = ckpt_json_next(s, ']')) == 0);
            if (rc < 0) return SCAN_DEFER;
        } else if ((rc = scan_skip(s))) {
            return rc;
        }
    } while ((rc = ckpt_json_next(s, '}')) == 0);
    if (rc < 0 || !name || !dtype || !has_shape) return SCAN_DEFER;
    const uint64_t *shape = shape_copy(m, dims, (unsigned)ndim);
    if (!shape) return CKPT_E_NOMEM;
    ckpt_manifest_entry e = {name, dtype, (unsigned)ndim, shape, NULL};
    rc = append(m, &e, name_len);
    return rc == CKPT_E_NOMEM ? rc : rc ? SCAN_DEFER : 0; /* a 4 GiB name: jansson words it */
}

/* "metadata": null, or an object whose string values are kept. */
static int scan_metadata(ckpt_json_scan *s, ckpt_manifest *m) {
    if (ckpt_json_peek(s) == 'n') return ckpt_json_literal(s, "null") ? SCAN_DEFER : 0;
    if (ckpt_json_peek(s) != '{' || ckpt_json_open(s)) return SCAN_DEFER;
    if (ckpt_json_empty(s, '}')) return 0;
    scan_keys *k = ckpt_malloc(sizeof *k);
    if (!k) return CKPT_E_NOMEM;
    k->n = 0;
    size_t cap = 0, vcap = 0, n = 0;
    const char **keys = NULL, **vals = NULL;
    int rc;
    do {
        const char *key, *val;
        size_t len;
        if ((rc = scan_key(s, k, &key, &len))) break;
        if (ckpt_json_peek(s) != '"') {
            if ((rc = scan_skip(s))) break;
            continue;
        }
        size_t vlen;
        if (!(val = ckpt_json_string(s, NULL, 0, 1, &vlen)) || strlen(val) != vlen) {
            rc = SCAN_DEFER;
            break;
        }
        if (ckpt_arena_grow(&m->arena, (void **)&keys, &cap, n + 1, sizeof *keys) ||
            ckpt_arena_grow(&m->arena, (void **)&vals, &vcap, n + 1, sizeof *vals) ||
            !(keys[n] = ckpt_arena_strndup(&m->arena, key, len))) {
            rc = CKPT_E_NOMEM;
            break;
        }
        vals[n++] = val;
    } while ((rc = ckpt_json_next(s, '}')) == 0);
    ckpt_free(k);
    m->meta_keys = keys;
    m->meta_vals = vals;
    m->nmeta = n;
    return rc < 0 && rc != CKPT_E_NOMEM ? SCAN_DEFER : rc == 1 ? 0 : rc;
}

/* "ties" at s->i, read once the tensors are indexed (a tie names listed
 * tensors, wherever its key comes): what parse_ties reads, or SCAN_DEFER
 * for anything it refuses (it words the message) and for escapes in a
 * name; CKPT_E_NOMEM. */
static int scan_ties(ckpt_json_scan *s, ckpt_manifest *m) {
    int c = ckpt_json_peek(s), rc;
    if (c == 'n') return ckpt_json_literal(s, "null") ? SCAN_DEFER : 0;
    if (c != '[' || ckpt_json_open(s)) return SCAN_DEFER;
    if (ckpt_json_empty(s, ']')) return 0;
    do {
        if (ckpt_json_peek(s) != '[' || ckpt_json_open(s)) return SCAN_DEFER;
        if (ckpt_json_empty(s, ']')) continue;
        size_t first = CKPT_KEYS_NONE;
        do {
            size_t len;
            const char *name = ckpt_json_string(s, NULL, 0, 0, &len);
            if (!name || (const unsigned char *)name + len != s->s + s->i - 1)
                return SCAN_DEFER; /* not a string, or escaped */
            size_t i = ckpt_manifest_lookup(m, name, len);
            if (i == CKPT_KEYS_NONE) return SCAN_DEFER;
            if (first == CKPT_KEYS_NONE) first = i;
            if ((rc = tie(m, first, i))) return rc == CKPT_E_INVALID_ARG ? SCAN_DEFER : rc;
        } while ((rc = ckpt_json_next(s, ']')) == 0);
        if (rc < 0) return SCAN_DEFER;
    } while ((rc = ckpt_json_next(s, ']')) == 0);
    return rc < 0 ? SCAN_DEFER : 0;
}

/* The text the one pass reads: all of it in memory (fd < 0), or a window
 * onto the file that slides forward as the pass reads it (ckpt_manifest_
 * load: the text of a million keys is as large as their index, and is
 * never whole in memory beside them). The pass reads in steps (an
 * object member, a tensor), each ending on a ',' or a closing bracket, so
 * a step that succeeds never read a token cut by the window's end; a step
 * that fails is run again on a window that holds more, and fails for good
 * only once the whole rest of the text was there. */
typedef struct scan_text {
    int fd;             /* -1: s holds the whole text */
    uint64_t size;      /* bytes of the text */
    unsigned char *buf; /* the window (fd >= 0), cap bytes */
    size_t cap;
} scan_text;

#define SCAN_WINDOW ((size_t)1 << 20) /* first window size, bytes */

/* After a step that began at s->i = at failed: 1 when the window now
 * holds more text from `at` on (moved to begin there, or grown when it
 * already did, then filled), so the step can run again with s->i = 0; 0
 * when it held the whole rest (the step failed for good); CKPT_E_NOMEM.
 * A file that ends early (it shrank) ends the text there. */
static int scan_more(scan_text *t, ckpt_json_scan *s, size_t at) {
    if (t->fd < 0 || s->base + s->n >= t->size) return 0;
    if (at == 0) { /* at least twice as large, at most the rest */
        uint64_t rest = t->size - s->base;
        size_t cap = t->cap > SIZE_MAX / 2 ? SIZE_MAX : t->cap ? 2 * t->cap : SCAN_WINDOW;
        if (cap > rest) cap = (size_t)rest;
        unsigned char *b = ckpt_realloc(t->buf, cap);
        if (!b) return CKPT_E_NOMEM;
        t->buf = b;
        t->cap = cap;
    } else {
        memmove(t->buf, t->buf + at, s->n - at);
        s->base += at;
        s->n -= at;
    }
    s->s = t->buf;
    s->i = 0;
    while (s->n < t->cap && s->base + s->n < t->size) {
        uint64_t left = t->size - s->base - s->n;
        size_t want = t->cap - s->n < left ? t->cap - s->n : (size_t)left;
        ssize_t r = pread(t->fd, t->buf + s->n, want, (off_t)(s->base + s->n));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            t->size = s->base + s->n;
            break;
        }
        s->n += (size_t)r;
    }
    return 1;
}

typedef struct scan_pass {
    ckpt_json_scan s;
    scan_text t;
    ckpt_manifest *m;
    const ckpt_limits *lim;
    scan_keys *k; /* the top-level object's keys */
    int tensors;  /* "tensors" seen */
    int closed;   /* the step closed its container */
    char *ties;   /* a copy of the "ties" value, nties bytes */
    size_t nties;
    char *defaults[2]; /* copies of "module_versions", "batchnorm_counters" */
    size_t ndefaults[2];
} scan_pass;

/* Runs step(p) from p->s.i, again on more text while it fails for want
 * of it. 0, SCAN_DEFER or CKPT_E_NOMEM. */
static int scan_step(scan_pass *p, int (*step)(scan_pass *)) {
    for (;;) {
        size_t at = p->s.i, nkeys = p->k->n, n = p->m->n;
        unsigned depth = p->s.depth;
        int rc = step(p);
        if (rc != SCAN_DEFER) return rc;
        p->s.i = at;
        p->s.depth = depth;
        p->k->n = nkeys;
        p->m->n = n; /* a tensor read before its step failed */
        if ((rc = scan_more(&p->t, &p->s, at)) <= 0) return rc < 0 ? rc : SCAN_DEFER;
    }
}

/* A ',' or the container's end after a value: p->closed. */
static int scan_next(scan_pass *p, int close) {
    int rc = ckpt_json_next(&p->s, close);
    if (rc < 0) return SCAN_DEFER;
    p->closed = rc;
    return 0;
}

/* The document's '{' and what follows it (not yet its end). */
static int step_open(scan_pass *p) {
    if (ckpt_json_peek(&p->s) != '{' || ckpt_json_open(&p->s)) return SCAN_DEFER;
    int c = ckpt_json_peek(&p->s);
    return c == -1 || c == '}' ? SCAN_DEFER : 0; /* {}: no "tensors" */
}

/* One member of the document up to the ',' or '}' after it; for
 * "tensors", up to its first entry (p->closed: the list is empty). */
static int step_member(scan_pass *p) {
    ckpt_json_scan *s = &p->s;
    const char *key;
    size_t klen;
    int rc;
    if ((rc = scan_key(s, p->k, &key, &klen))) return rc;
    if (klen == 7 && memcmp(key, "tensors", 7) == 0) {
        p->tensors = 1;
        if (ckpt_json_peek(s) != '[' || ckpt_json_open(s)) return SCAN_DEFER;
        int c = ckpt_json_peek(s);
        if (c == -1) return SCAN_DEFER;
        p->closed = ckpt_json_empty(s, ']');
        return 0;
    }
    if (klen == 8 && memcmp(key, "metadata", 8) == 0) {
        if ((rc = scan_metadata(s, p->m))) return rc;
    } else if ((klen == 15 && memcmp(key, "module_versions", 15) == 0) ||
               (klen == 18 && memcmp(key, "batchnorm_counters", 18) == 0)) {
        /* rare and small: a copy, read with jansson once the tensors are
         * indexed (ckpt_manifest_parse_defaults, as from_json reads it) */
        int d = klen == 18;
        size_t at = s->i;
        if ((rc = scan_skip(s))) return rc;
        ckpt_free(p->defaults[d]);
        if (!(p->defaults[d] = ckpt_malloc(s->i - at))) return CKPT_E_NOMEM;
        memcpy(p->defaults[d], s->s + at, s->i - at);
        p->ndefaults[d] = s->i - at;
    } else if (klen == 4 && memcmp(key, "ties", 4) == 0) {
        /* read once the tensors are indexed (a tie names listed tensors,
         * wherever its key comes): a copy outlives the window */
        size_t at = s->i;
        if ((rc = scan_skip(s))) return rc;
        ckpt_free(p->ties);
        if (!(p->ties = ckpt_malloc(s->i - at))) return CKPT_E_NOMEM;
        memcpy(p->ties, s->s + at, s->i - at);
        p->nties = s->i - at;
    } else if ((rc = scan_skip(s))) {
        return rc;
    }
    return scan_next(p, '}');
}

/* One entry of "tensors" up to the ',' or ']' after it. */
static int step_tensor(scan_pass *p) {
    int rc;
    if (p->m->n == p->lim->max_tensors) return SCAN_DEFER;
    if ((rc = scan_entry(&p->s, p->m, p->lim))) return rc;
    return scan_next(p, ']');
}

static int step_member_end(scan_pass *p) { return scan_next(p, '}'); }

static int scan_pass_run(scan_pass *p) {
    int rc = scan_step(p, step_open);
    while (!rc) {
        if ((rc = scan_step(p, step_member))) break;
        if (p->tensors == 1) { /* the entries, then the member's end */
            p->tensors = 2;
            while (!p->closed && !(rc = scan_step(p, step_tensor))) {
            }
            if (rc || (rc = scan_step(p, step_member_end))) break;
        }
        if (p->closed) break;
    }
    if (rc) return rc;
    if (!p->tensors) return SCAN_DEFER;
    /* nothing but whitespace up to the end of the text */
    do {
        if (ckpt_json_peek(&p->s) != -1) return SCAN_DEFER;
    } while ((rc = scan_more(&p->t, &p->s, p->s.i)) > 0);
    return rc;
}

/* The copies of "module_versions" and "batchnorm_counters": 0,
 * SCAN_DEFER for anything from_json refuses (it words the message),
 * CKPT_E_NOMEM. */
static int scan_defaults(ckpt_manifest *m, const scan_pass *p) {
    json_t *v[2] = {NULL, NULL};
    int rc = 0;
    for (int d = 0; d < 2 && !rc; d++)
        if (p->defaults[d] && !(v[d] = json_loadb(p->defaults[d], p->ndefaults[d],
                                                  JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, NULL)))
            rc = SCAN_DEFER;
    if (!rc && (rc = ckpt_manifest_parse_defaults(m, v[0], v[1])) == CKPT_E_FORMAT) rc = SCAN_DEFER;
    json_decref(v[0]);
    json_decref(v[1]);
    return rc;
}

/* 0 with m filled from t (s: the scanner over t's start), SCAN_DEFER (m
 * then holds a partial result: discard it), or CKPT_E_NOMEM. */
static int scan_manifest(ckpt_manifest *m, scan_text *t, ckpt_json_scan *s,
                         const ckpt_limits *lim) {
    scan_pass p = {.s = *s, .t = *t, .m = m, .lim = lim};
    int rc = t->size > lim->max_index_bytes             ? SCAN_DEFER
             : (p.k = ckpt_malloc(sizeof *p.k)) != NULL ? 0
                                                        : CKPT_E_NOMEM;
    if (rc == 0) {
        p.k->n = 0;
        rc = scan_pass_run(&p);
        ckpt_free(p.k);
    }
    if (t->fd >= 0) ckpt_free(p.t.buf); /* the window: the names are copies */
    t->buf = NULL;
    size_t dup;
    if (rc == 0) shrink(m);
    if (rc == 0 && (rc = index_from(m, 0, &dup)) == CKPT_E_INVALID_ARG) rc = SCAN_DEFER;
    if (rc == 0 && p.ties) {
        p.s.s = (const unsigned char *)p.ties;
        p.s.n = p.nties;
        p.s.i = 0;
        p.s.depth = 1;
        rc = scan_ties(&p.s, m);
    }
    if (rc == 0 && (p.defaults[0] || p.defaults[1])) rc = scan_defaults(m, &p);
    ckpt_free(p.ties);
    ckpt_free(p.defaults[0]);
    ckpt_free(p.defaults[1]);
    return rc;
}

/* Fills *out from t in one pass, or SCAN_DEFER: the tree decides. */
static int parse_text(ckpt_manifest **out, scan_text *t, const char *name, const ckpt_limits *lim) {
    ckpt_manifest *m = manifest_new(name);
    int rc = CKPT_E_NOMEM;
    if (m) {
        ckpt_json_scan s = {.s = t->buf,
                            .n = t->fd < 0 ? (size_t)t->size : 0,
                            .max_depth = 1000,
                            .arena = &m->arena,
                            .file = m->name,
                            .what = "manifest"};
        rc = t->fd < 0 ? 0 : scan_more(t, &s, 0); /* the first window */
        if (rc >= 0) rc = scan_manifest(m, t, &s, lim);
    }
    if (rc == 0) {
        *out = m;
        return 0;
    }
    ckpt_manifest_free(m);
    if (rc != SCAN_DEFER) return ckpt_err(CKPT_E_NOMEM, name, "", CKPT_NO_OFFSET, "out of memory");
    return SCAN_DEFER;
}

static json_t *load_json(const void *json, size_t len, const char *name, const ckpt_limits *lim,
                         int *rc) {
    if (len > lim->max_index_bytes) {
        *rc = ckpt_err(CKPT_E_LIMIT, name, "", CKPT_NO_OFFSET,
                       "manifest is %zu bytes (limit %" PRIu64 ")", len, lim->max_index_bytes);
        return NULL;
    }
    json_error_t err;
    json_t *doc = json_loadb(json, len, JSON_REJECT_DUPLICATES, &err);
    if (!doc)
        *rc = ckpt_err(CKPT_E_FORMAT, name, "", (uint64_t)(err.position > 0 ? err.position : 0),
                       "manifest is not valid JSON (expected one object with unique keys): %s",
                       err.text);
    return doc;
}

int ckpt_manifest_parse(ckpt_manifest **out, const void *json, size_t len, const char *name,
                        const ckpt_limits *limits) {
    ckpt_limits defaults = CKPT_LIMITS_INIT;
    const ckpt_limits *lim = limits ? limits : &defaults;
    *out = NULL;
    scan_text t = {-1, len, (unsigned char *)(uintptr_t)json, 0};
    int rc = parse_text(out, &t, name, lim);
    if (rc != SCAN_DEFER) return rc;
    rc = 0;
    json_t *doc = load_json(json, len, name, lim, &rc);
    if (!doc) return rc;
    ckpt_manifest *m = manifest_new(name);
    rc = m ? from_json(m, doc, lim)
           : ckpt_err(CKPT_E_NOMEM, name, "", CKPT_NO_OFFSET, "out of memory");
    json_decref(doc);
    if (rc) {
        ckpt_manifest_free(m);
        return rc;
    }
    *out = m;
    return 0;
}

/* ------------------------------------------------------------ load */

/* Reads n bytes from fd's start into buf: 0, or -1 (error, or the file
 * ended first). */
static int read_exact(int fd, char *buf, size_t n) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, buf + got, n - got, (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        got += (size_t)r;
    }
    return 0;
}

/* Whole file into memory, at most `max` bytes; NULL with *rc set. */
static char *read_all(const char *path, uint64_t max, size_t *len, int *rc) {
    struct stat st;
    const char *why;
    int fd = ckpt_open_regular(path, &st, &why);
    if (fd < 0) {
        *rc = ckpt_err(CKPT_E_IO, path, "", CKPT_NO_OFFSET, "cannot read: %s", why);
        return NULL;
    }
    char *buf = NULL;
    if ((uint64_t)st.st_size > max) {
        *rc = ckpt_err(CKPT_E_LIMIT, path, "", CKPT_NO_OFFSET,
                       "manifest is %lld bytes (limit %" PRIu64 ")", (long long)st.st_size, max);
    } else if (!(buf = ckpt_malloc((size_t)st.st_size + 1))) {
        *rc = ckpt_err(CKPT_E_NOMEM, path, "", CKPT_NO_OFFSET, "out of memory");
    } else if (read_exact(fd, buf, (size_t)st.st_size)) {
        *rc = ckpt_err(CKPT_E_IO, path, "", CKPT_NO_OFFSET, "read failed");
        ckpt_free(buf);
        buf = NULL;
    } else {
        *len = (size_t)st.st_size;
    }
    close(fd);
    return buf;
}

/* 1 when the file's first non-blank byte is '{': a JSON document (a
 * manifest or a sharded index). A safetensors file starts with its header
 * length, whose low byte may happen to be '{': such a file fails to parse
 * as JSON and is then opened as a checkpoint. */
static int looks_like_json(const char *path) {
    const char *why;
    int fd = ckpt_open_regular(path, NULL, &why);
    if (fd < 0) return 0;
    char head[4096];
    ssize_t n;
    int c = -1;
    for (off_t at = 0; c < 0 && (n = pread(fd, head, sizeof head, at)) > 0; at += n)
        for (ssize_t i = 0; c < 0 && i < n; i++)
            if (head[i] != ' ' && head[i] != '\t' && head[i] != '\n' && head[i] != '\r')
                c = (unsigned char)head[i];
    close(fd);
    return c == '{';
}

static int load_checkpoint(ckpt_manifest **out, const char *path, const ckpt_open_options *opts) {
    ckpt_file *f = NULL;
    int rc = ckpt_open(&f, path, opts);
    if (rc) return rc;
    rc = ckpt_manifest_from_file(out, f);
    if (rc) {
        ckpt_close(f);
        return rc;
    }
    (*out)->owned = f;
    return 0;
}

int ckpt_manifest_load(ckpt_manifest **out, const char *path, const ckpt_open_options *opts) {
    ckpt_open_options defaults = CKPT_OPEN_OPTIONS_INIT;
    CKPT_CHECK_OPTIONS(opts, CKPT_OPEN_OPTIONS_VERSION);
    const ckpt_limits *lim = opts ? &opts->limits : &defaults.limits;
    *out = NULL;
    if (!looks_like_json(path)) return load_checkpoint(out, path, opts);

    /* one pass over a window of the file; the rare text it leaves to
     * jansson (a repeated name, a tie it does not read) is read whole */
    struct stat st;
    const char *why;
    int fd = ckpt_open_regular(path, &st, &why), rc;
    if (fd < 0) return ckpt_err(CKPT_E_IO, path, "", CKPT_NO_OFFSET, "cannot read: %s", why);
    if ((uint64_t)st.st_size > lim->max_index_bytes) {
        close(fd);
        return ckpt_err(CKPT_E_LIMIT, path, "", CKPT_NO_OFFSET,
                        "manifest is %lld bytes (limit %" PRIu64 ")", (long long)st.st_size,
                        lim->max_index_bytes);
    }
    scan_text t = {fd, (uint64_t)st.st_size, NULL, 0};
    rc = parse_text(out, &t, path, lim);
    close(fd);
    if (rc != SCAN_DEFER) return rc;
    size_t len = 0;
    char *buf = read_all(path, lim->max_index_bytes, &len, &rc);
    if (!buf) return rc;
    rc = 0;
    json_t *doc = load_json(buf, len, path, lim, &rc);
    ckpt_free(buf);
    if (!doc || !json_is_array(json_object_get(doc, "tensors"))) {
        /* not a manifest: a sharded index, or a checkpoint after all; when
         * that fails too, the JSON problem is the one to report */
        json_decref(doc);
        ckpt_error saved = *ckpt_error_last();
        char msg[512];
        snprintf(msg, sizeof msg, "%s", saved.message);
        int rc2 = load_checkpoint(out, path, opts);
        if (rc2 == 0 || doc) return rc2;
        return ckpt_err(rc, path, "", saved.offset, "%s", msg);
    }
    ckpt_manifest *m = manifest_new(path);
    rc = m ? from_json(m, doc, lim)
           : ckpt_err(CKPT_E_NOMEM, path, "", CKPT_NO_OFFSET, "out of memory");
    json_decref(doc);
    if (rc) {
        ckpt_manifest_free(m);
        return rc;
    }
    *out = m;
    return 0;
}

/* ------------------------------------------------------------ accessors */

const char *ckpt_manifest_name(const ckpt_manifest *m) { return m->name; }
const ckpt_file *ckpt_manifest_file(const ckpt_manifest *m) { return m->file; }
size_t ckpt_manifest_count(const ckpt_manifest *m) { return m->n; }

const ckpt_manifest_entry *ckpt_manifest_entry_at(const ckpt_manifest *m, size_t i) {
    return i < m->n ? &m->entries[i] : NULL;
}

size_t ckpt_manifest_lookup(const ckpt_manifest *m, const char *name, size_t len) {
    ckpt_strmap_slot *s = ckpt_strmap_find(&m->index, name, len, ckpt_strmap_hash(name, len));
    return s ? s->val : CKPT_KEYS_NONE;
}

int ckpt_manifest_lookup_stream(const ckpt_manifest *m, size_t n, size_t bufcap, ckpt_name_get get,
                                ckpt_name_put put, void *ctx) {
    struct {
        const char *name;
        size_t len;
        uint64_t hash;
        int flag;
    } ring[AHEAD];
    char *bufs = bufcap && bufcap <= SIZE_MAX / AHEAD ? ckpt_malloc(AHEAD * bufcap) : NULL;
    if (bufcap && !bufs)
        return ckpt_err(CKPT_E_NOMEM, m->name, "", CKPT_NO_OFFSET, "out of memory");
    int rc = 0;
    for (size_t i = 0; !rc && i < n + AHEAD; i++) {
        if (i >= AHEAD) { /* name i - AHEAD: its slot and key are in cache */
            size_t k = i - AHEAD;
            ckpt_strmap_slot *sl = ckpt_strmap_find(&m->index, ring[k % AHEAD].name,
                                                    ring[k % AHEAD].len, ring[k % AHEAD].hash);
            rc = put(ctx, k, ring[k % AHEAD].name, ring[k % AHEAD].len, ring[k % AHEAD].flag,
                     sl ? sl->val : CKPT_KEYS_NONE);
        }
        if (i >= AHEAD / 2 && i - AHEAD / 2 < n) /* its slot has arrived */
            ckpt_strmap_prefetch_key(&m->index, ring[(i - AHEAD / 2) % AHEAD].hash);
        if (i < n) {
            size_t r = i % AHEAD; /* put() for i - AHEAD is done with it */
            ring[r].flag = 0;
            ring[r].name =
                get(ctx, i, bufs ? bufs + r * bufcap : NULL, &ring[r].len, &ring[r].flag);
            ring[r].hash = ckpt_strmap_hash(ring[r].name, ring[r].len);
            ckpt_strmap_prefetch(&m->index, ring[r].hash);
        }
    }
    ckpt_free(bufs);
    return rc;
}

typedef struct lookup_all {
    const ckpt_manifest *names;
    size_t *out, found;
} lookup_all;

static const char *entry_name(void *ctx, size_t i, char *buf, size_t *len, int *flag) {
    const lookup_all *l = ctx;
    (void)buf;
    (void)flag;
    *len = strlen(l->names->entries[i].name);
    return l->names->entries[i].name;
}

static int store_index(void *ctx, size_t i, const char *name, size_t len, int flag, size_t j) {
    lookup_all *l = ctx;
    (void)name;
    (void)len;
    (void)flag;
    l->out[i] = j;
    l->found += j != CKPT_KEYS_NONE;
    return 0;
}

size_t ckpt_manifest_lookup_all(const ckpt_manifest *m, const ckpt_manifest *names, size_t *out) {
    lookup_all l = {names, out, 0};
    ckpt_manifest_lookup_stream(m, names->n, 0, entry_name, store_index, &l); /* cannot fail */
    return l.found;
}

const ckpt_manifest_entry *ckpt_manifest_find(const ckpt_manifest *m, const char *name) {
    size_t i = ckpt_manifest_lookup(m, name, strlen(name));
    return i == CKPT_KEYS_NONE ? NULL : &m->entries[i];
}
