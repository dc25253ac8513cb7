/* manifest.c - sets of tensor keys (name, dtype, shape) from a checkpoint,
 * from a JSON manifest (`ckpt inspect --json` output), or built by hand;
 * the input of ckpt_match and ckpt_diff. */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "error.h"
#include "file.h"
#include "keys.h"

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
    ckpt_free(m->entries);
    ckpt_free(m->lens);
    ckpt_close(m->owned);
    ckpt_arena_free(&m->arena);
    ckpt_free(m);
}

/* Room for n more entries in entries/lens and the index. */
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
        size_t *l = ckpt_realloc(m->lens, cap * sizeof *l);
        if (!l) return ckpt_err(CKPT_E_NOMEM, m->name, "", CKPT_NO_OFFSET, "out of memory");
        m->lens = l;
        m->cap = cap;
    }
    return ckpt_strmap_reserve(&m->index, need);
}

/* Appends an entry whose strings and shape already live long enough.
 * CKPT_E_INVALID_ARG for a repeated name (the caller words the error). */
static int push(ckpt_manifest *m, const ckpt_manifest_entry *e) {
    int rc = reserve(m, 1);
    if (rc) return rc;
    size_t len = strlen(e->name);
    ckpt_strmap_slot *slot;
    rc = ckpt_strmap_put(&m->index, e->name, len, m->n, &slot);
    if (rc < 0) return rc;
    if (rc == 0) return CKPT_E_INVALID_ARG;
    m->entries[m->n] = *e;
    m->lens[m->n] = len;
    m->n++;
    return 0;
}

static const uint64_t no_dims[1] = {0};

int ckpt_manifest_add(ckpt_manifest *m, const char *name, const char *dtype,
                      unsigned ndim, const uint64_t *shape) {
    if (!m || !name || !dtype || ndim > CKPT_MAX_NDIM || (ndim && !shape))
        return ckpt_err(CKPT_E_INVALID_ARG, m ? m->name : "", "", CKPT_NO_OFFSET,
                        "manifest entry needs a name, a dtype and at most %d dimensions",
                        CKPT_MAX_NDIM);
    ckpt_manifest_entry e = {0};
    e.name = ckpt_arena_strdup(&m->arena, name);
    e.dtype = ckpt_arena_strdup(&m->arena, dtype);
    e.ndim = ndim;
    e.shape = ndim ? ckpt_arena_array(&m->arena, ndim, sizeof(uint64_t)) : no_dims;
    if (!e.name || !e.dtype || !e.shape)
        return ckpt_err(CKPT_E_NOMEM, m->name, "", CKPT_NO_OFFSET, "out of memory");
    if (ndim) memcpy((uint64_t *)e.shape, shape, ndim * sizeof *shape);
    int rc = push(m, &e);
    if (rc == CKPT_E_INVALID_ARG)
        return ckpt_err(rc, m->name, "", CKPT_NO_OFFSET, "duplicate key '%s'", name);
    return rc;
}

int ckpt_manifest_from_file(ckpt_manifest **out, const ckpt_file *f) {
    *out = NULL;
    ckpt_manifest *m = manifest_new(ckpt_file_path(f));
    if (!m) return ckpt_err(CKPT_E_NOMEM, ckpt_file_path(f), "", CKPT_NO_OFFSET, "out of memory");
    size_t n = ckpt_file_tensor_count(f);
    int rc = reserve(m, n);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const ckpt_tensor *t = ckpt_file_tensor(f, i);
        ckpt_manifest_entry e = {ckpt_tensor_name(t), ckpt_dtype_name(ckpt_tensor_dtype(t)),
                                 ckpt_tensor_ndim(t), ckpt_tensor_shape(t), t};
        rc = push(m, &e);
        /* flattening keeps one tensor per name, so this cannot repeat */
        if (rc == CKPT_E_INVALID_ARG)
            rc = ckpt_err(CKPT_E_FORMAT, m->name, "", CKPT_NO_OFFSET, "duplicate tensor name '%s'",
                          e.name);
    }
    if (rc) {
        ckpt_manifest_free(m);
        return rc;
    }
    m->file = f;
    m->meta_keys = f->meta_keys;
    m->meta_vals = f->meta_vals;
    m->nmeta = f->nmeta;
    *out = m;
    return 0;
}

/* ------------------------------------------------------------ JSON */

static int bad(const ckpt_manifest *m, size_t i, const char *what) {
    return ckpt_err(CKPT_E_FORMAT, m->name, "", CKPT_NO_OFFSET, "manifest tensors[%zu]: %s", i,
                    what);
}

/* A JSON string copied into the arena; NULL if v is not a string. jansson
 * refuses \u0000 (no JSON_ALLOW_NUL), so the copy is a C string. */
static const char *json_text(ckpt_manifest *m, const json_t *v, size_t max, int *too_long) {
    if (!json_is_string(v)) return NULL;
    size_t len = json_string_length(v);
    if (len > max) {
        *too_long = 1;
        return NULL;
    }
    return ckpt_arena_strndup(&m->arena, json_string_value(v), len);
}

static int parse_entry(ckpt_manifest *m, size_t i, const json_t *t, const ckpt_limits *lim) {
    if (!json_is_object(t)) return bad(m, i, "expected an object");
    int too_long = 0;
    const char *name = json_text(m, json_object_get(t, "name"), lim->max_name_bytes, &too_long);
    if (too_long)
        return ckpt_err(CKPT_E_LIMIT, m->name, "", CKPT_NO_OFFSET,
                        "manifest tensors[%zu]: name longer than %" PRIu64 " bytes", i,
                        lim->max_name_bytes);
    if (!name) return bad(m, i, "expected \"name\" to be a string");
    const char *dtype = json_text(m, json_object_get(t, "dtype"), 64, &too_long);
    if (!dtype) return bad(m, i, "expected \"dtype\" to be a short string");
    const json_t *shape = json_object_get(t, "shape");
    if (!json_is_array(shape)) return bad(m, i, "expected \"shape\" to be a list");
    size_t ndim = json_array_size(shape);
    if (ndim > lim->max_ndim)
        return ckpt_err(CKPT_E_LIMIT, m->name, "", CKPT_NO_OFFSET,
                        "manifest tensors[%zu]: %zu dimensions (limit %u)", i, ndim, lim->max_ndim);
    uint64_t *dims = ndim ? ckpt_arena_array(&m->arena, ndim, sizeof *dims) : (uint64_t *)no_dims;
    if (!dims) return ckpt_err(CKPT_E_NOMEM, m->name, "", CKPT_NO_OFFSET, "out of memory");
    for (size_t d = 0; d < ndim; d++) {
        const json_t *v = json_array_get(shape, d);
        if (!json_is_integer(v) || json_integer_value(v) < 0)
            return bad(m, i, "expected each dimension to be a non-negative integer");
        dims[d] = (uint64_t)json_integer_value(v);
    }
    ckpt_manifest_entry e = {name, dtype, (unsigned)ndim, dims, NULL};
    int rc = push(m, &e);
    if (rc == CKPT_E_INVALID_ARG)
        return ckpt_err(CKPT_E_FORMAT, m->name, "", CKPT_NO_OFFSET,
                        "manifest tensors[%zu]: duplicate name '%s'", i, name);
    return rc;
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
        int too_long = 0;
        /* values that are not strings cannot be aliases: skip them */
        if (!json_is_string(v)) continue;
        keys[i] = ckpt_arena_strdup(&m->arena, k);
        vals[i] = json_text(m, v, SIZE_MAX, &too_long);
        if (!keys[i]) return ckpt_err(CKPT_E_NOMEM, m->name, "", CKPT_NO_OFFSET, "out of memory");
        if (vals[i]) i++;
    }
    m->meta_keys = keys;
    m->meta_vals = vals;
    m->nmeta = i;
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
    if (rc == 0) rc = parse_metadata(m, json_object_get(doc, "metadata"));
    return rc;
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
    int rc = 0;
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

/* Whole file into memory, at most `max` bytes; NULL with *rc set. */
static char *read_all(const char *path, uint64_t max, size_t *len, int *rc) {
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        *rc = ckpt_err(CKPT_E_IO, path, "", CKPT_NO_OFFSET, "cannot open: %s", strerror(errno));
        return NULL;
    }
    struct stat st;
    char *buf = NULL;
    if (fstat(fileno(fp), &st) != 0 || st.st_size < 0) {
        *rc = ckpt_err(CKPT_E_IO, path, "", CKPT_NO_OFFSET, "cannot stat: %s", strerror(errno));
    } else if ((uint64_t)st.st_size > max) {
        *rc = ckpt_err(CKPT_E_LIMIT, path, "", CKPT_NO_OFFSET,
                       "manifest is %lld bytes (limit %" PRIu64 ")", (long long)st.st_size, max);
    } else if (!(buf = ckpt_malloc((size_t)st.st_size + 1))) {
        *rc = ckpt_err(CKPT_E_NOMEM, path, "", CKPT_NO_OFFSET, "out of memory");
    } else if (fread(buf, 1, (size_t)st.st_size, fp) != (size_t)st.st_size) {
        *rc = ckpt_err(CKPT_E_IO, path, "", CKPT_NO_OFFSET, "read failed");
        ckpt_free(buf);
        buf = NULL;
    } else {
        *len = (size_t)st.st_size;
    }
    fclose(fp);
    return buf;
}

/* 1 when the file's first non-blank byte is '{': a JSON document (a
 * manifest or a sharded index). A safetensors file starts with its header
 * length, whose low byte may happen to be '{': such a file fails to parse
 * as JSON and is then opened as a checkpoint. */
static int looks_like_json(const char *path) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return 0;
    int c;
    do c = fgetc(fp);
    while (c == ' ' || c == '\t' || c == '\n' || c == '\r');
    fclose(fp);
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
    const ckpt_limits *lim = opts ? &opts->limits : &defaults.limits;
    *out = NULL;
    if (!looks_like_json(path)) return load_checkpoint(out, path, opts);

    size_t len = 0;
    int rc = 0;
    char *buf = read_all(path, lim->max_index_bytes, &len, &rc);
    if (!buf) return rc;
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
    rc = m ? from_json(m, doc, lim) : ckpt_err(CKPT_E_NOMEM, path, "", CKPT_NO_OFFSET, "out of memory");
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

const ckpt_manifest_entry *ckpt_manifest_find(const ckpt_manifest *m, const char *name) {
    size_t i = ckpt_manifest_lookup(m, name, strlen(name));
    return i == CKPT_KEYS_NONE ? NULL : &m->entries[i];
}
