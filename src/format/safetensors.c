/* safetensors.c - the safetensors reader (FORMATS.md §1); sharded sets
 * (§1.7) are open/sharded.c's.
 *
 * A file is: u64 LE header length N, N bytes of JSON, then the byte buffer
 * that data_offsets are relative to. Open validates exactly what the
 * reference reader (safetensors tensor.rs, Metadata::validate) validates,
 * plus duplicate keys, and never touches tensor bytes: the cost is
 * O(header). Storages point straight into the mapping (zero-copy). */
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "model/dtype.h"
#include "base/error.h"
#include "model/file.h"
#include "format/safetensors.h"

/* One tensor entry of the header, as parsed. */
typedef struct st_entry {
    const char *name;  /* borrowed from the JSON document */
    ckpt_dtype dtype;
    uint32_t ndim;
    uint64_t *shape;   /* ndim elements (arena) */
    uint64_t begin, end;
    size_t index;      /* position in the header: keeps the sort stable */
} st_entry;

/* The dtypes of FORMATS.md §1.3. ckpt_dtype_from_name also knows names
 * that only torch has (C32, C128, quantized); safetensors has no such
 * dtype, so a header naming one is as invalid as an unknown string. */
static int is_safetensors_dtype(ckpt_dtype dt) {
    switch (dt) {
    case CKPT_DT_BOOL: case CKPT_DT_U8: case CKPT_DT_I8: case CKPT_DT_I16:
    case CKPT_DT_U16: case CKPT_DT_I32: case CKPT_DT_U32: case CKPT_DT_I64:
    case CKPT_DT_U64: case CKPT_DT_F16: case CKPT_DT_BF16: case CKPT_DT_F32:
    case CKPT_DT_F64: case CKPT_DT_C64: case CKPT_DT_F8_E5M2:
    case CKPT_DT_F8_E4M3: case CKPT_DT_F8_E8M0: case CKPT_DT_F8_E4M3FNUZ:
    case CKPT_DT_F8_E5M2FNUZ: case CKPT_DT_F4: case CKPT_DT_F6_E2M3:
    case CKPT_DT_F6_E3M2:
        return 1;
    default:
        return 0;
    }
}

int ckpt_json_fail(const json_error_t *err, const char *file, uint64_t base,
                   const char *what) {
    uint64_t off = base + (uint64_t)(err->position > 0 ? err->position : 0);
    if (json_error_code(err) == json_error_numeric_overflow)
        return ckpt_err(CKPT_E_FORMAT, file, "", off,
                        "%s: integer does not fit in 64 bits (expected a "
                        "non-negative integer below 2^63): %s",
                        what, err->text);
    return ckpt_err(CKPT_E_FORMAT, file, "", off,
                    "%s is not valid JSON (expected one UTF-8 JSON object, "
                    "unique keys, only whitespace around it): %s",
                    what, err->text);
}

/* A JSON integer >= 0, else -1. */
static int json_uint(const json_t *v, uint64_t *out) {
    if (!json_is_integer(v) || json_integer_value(v) < 0) return -1;
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

/* Absolute offset of byte `rel` of the byte buffer, or CKPT_NO_OFFSET if
 * that does not fit in 64 bits (rel comes from the file). */
static uint64_t data_offset(uint64_t n, uint64_t rel) {
    uint64_t off;
    if (ckpt_add_overflow(8 + n, rel, &off)) return CKPT_NO_OFFSET;
    return off;
}

static int read_metadata(ckpt_file *f, const json_t *md) {
    if (json_is_null(md)) return 0; /* serde Option: null reads as absent */
    if (!json_is_object(md))
        return ckpt_err(CKPT_E_FORMAT, f->path, "", 8,
                        "\"__metadata__\" must be an object of string values "
                        "(the key is reserved for metadata, not a tensor name)");
    size_t n = json_object_size(md);
    f->meta_keys = ckpt_arena_array(&f->arena, n ? n : 1, sizeof(char *));
    f->meta_vals = ckpt_arena_array(&f->arena, n ? n : 1, sizeof(char *));
    if (!f->meta_keys || !f->meta_vals)
        return ckpt_err(CKPT_E_NOMEM, f->path, "", 8, "out of memory");
    const char *key;
    const json_t *val;
    size_t i = 0;
    json_object_foreach((json_t *)md, key, val) {
        if (!json_is_string(val))
            return ckpt_err(CKPT_E_FORMAT, f->path, "", 8,
                            "\"__metadata__\" value of \"%s\" must be a string "
                            "(the key \"__metadata__\" is reserved for "
                            "metadata, not a tensor name)", key);
        f->meta_keys[i] = ckpt_arena_strdup(&f->arena, key);
        f->meta_vals[i] = ckpt_arena_strndup(&f->arena, json_string_value(val),
                                             json_string_length(val));
        if (!f->meta_keys[i] || !f->meta_vals[i])
            return ckpt_err(CKPT_E_NOMEM, f->path, "", 8, "out of memory");
        i++;
    }
    f->nmeta = n;
    f->has_metadata = 1;
    return 0;
}

/* Checks the schema of one tensor entry (TensorInfo): dtype, shape and
 * data_offsets; extra keys are ignored like serde does. */
static int parse_entry(ckpt_file *f, const char *name, const json_t *v,
                       st_entry *e) {
    const char *path = f->path;
    if (!json_is_object(v))
        return ckpt_err(CKPT_E_FORMAT, path, "", 8,
                        "tensor \"%s\": expected an object with dtype, shape "
                        "and data_offsets", name);
    const json_t *dt = json_object_get(v, "dtype");
    const json_t *shape = json_object_get(v, "shape");
    const json_t *offs = json_object_get(v, "data_offsets");
    if (!json_is_string(dt))
        return ckpt_err(CKPT_E_FORMAT, path, "", 8,
                        "tensor \"%s\": expected \"dtype\" to be a string", name);
    e->dtype = ckpt_dtype_from_name(json_string_value(dt));
    if (!is_safetensors_dtype(e->dtype))
        return ckpt_err(CKPT_E_FORMAT, path, "", 8,
                        "tensor \"%s\": unknown dtype \"%s\" (expected a "
                        "safetensors dtype such as F32, BF16, I64, F8_E4M3)",
                        name, json_string_value(dt));
    if (!json_is_array(shape))
        return ckpt_err(CKPT_E_FORMAT, path, "", 8,
                        "tensor \"%s\": expected \"shape\" to be an array of "
                        "non-negative integers", name);
    size_t ndim = json_array_size(shape);
    uint32_t max_ndim = f->opts.limits.max_ndim < CKPT_MAX_NDIM
                            ? f->opts.limits.max_ndim
                            : CKPT_MAX_NDIM;
    if (ndim > max_ndim)
        return ckpt_err(CKPT_E_LIMIT, path, "", 8,
                        "tensor \"%s\" has %zu dimensions, limit max_ndim is %u",
                        name, ndim, max_ndim);
    e->ndim = (uint32_t)ndim;
    e->shape = ckpt_arena_array(&f->arena, ndim ? ndim : 1, sizeof(uint64_t));
    if (!e->shape) return ckpt_err(CKPT_E_NOMEM, path, "", 8, "out of memory");
    for (size_t i = 0; i < ndim; i++)
        if (json_uint(json_array_get(shape, i), &e->shape[i]))
            return ckpt_err(CKPT_E_FORMAT, path, "", 8,
                            "tensor \"%s\": shape[%zu] is not a non-negative "
                            "integer", name, i);
    if (!json_is_array(offs) || json_array_size(offs) != 2 ||
        json_uint(json_array_get(offs, 0), &e->begin) ||
        json_uint(json_array_get(offs, 1), &e->end))
        return ckpt_err(CKPT_E_FORMAT, path, "", 8,
                        "tensor \"%s\": expected \"data_offsets\" to be "
                        "[begin, end], two non-negative integers", name);
    e->name = name;
    return 0;
}

static int by_offsets(const void *a, const void *b) {
    const st_entry *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* Metadata::validate (FORMATS.md §1.4 step 4-5) over entries sorted by
 * data_offsets: they must tile the byte buffer from 0 with no gap, overlap
 * or alias, each exactly numel x bits / 8 bytes, and the buffer must end
 * where the file ends. */
static int validate(ckpt_file *f, uint64_t n, const st_entry *es, size_t count) {
    const char *path = f->path;
    uint64_t data_len = (uint64_t)f->map_size - 8 - n;
    uint64_t start = 0;
    for (size_t i = 0; i < count; i++) {
        const st_entry *e = &es[i];
        uint64_t off = data_offset(n, e->begin);
        if (e->begin != start || e->end < e->begin)
            return ckpt_err(CKPT_E_FORMAT, path, "", off,
                            "tensor \"%s\": invalid data_offsets [%" PRIu64
                            ", %" PRIu64 "], expected [%" PRIu64 ", end >= "
                            "begin] (tensors must tile the data from 0 without "
                            "gaps, overlaps or shared bytes)",
                            e->name, e->begin, e->end, start);
        uint64_t numel = 1, nbits;
        for (uint32_t d = 0; d < e->ndim; d++)
            if (ckpt_mul_overflow(numel, e->shape[d], &numel))
                return ckpt_err(CKPT_E_FORMAT, path, "", off,
                                "tensor \"%s\": shape product overflows 64 "
                                "bits at dimension %u", e->name, d);
        if (ckpt_mul_overflow(numel, ckpt_dtype_bits(e->dtype), &nbits))
            return ckpt_err(CKPT_E_FORMAT, path, "", off,
                            "tensor \"%s\": %" PRIu64 " elements of %s "
                            "overflow 64 bits", e->name, numel,
                            ckpt_dtype_name(e->dtype));
        if (nbits % 8)
            return ckpt_err(CKPT_E_FORMAT, path, "", off,
                            "tensor \"%s\": misaligned, %" PRIu64 " elements "
                            "of %s are %" PRIu64 " bits, expected a whole "
                            "number of bytes", e->name, numel,
                            ckpt_dtype_name(e->dtype), nbits);
        if (e->end - e->begin != nbits / 8)
            return ckpt_err(CKPT_E_FORMAT, path, "", off,
                            "tensor \"%s\": data_offsets [%" PRIu64 ", %" PRIu64
                            "] span %" PRIu64 " bytes, expected %" PRIu64
                            " (%" PRIu64 " elements of %s)", e->name, e->begin,
                            e->end, e->end - e->begin, nbits / 8, numel,
                            ckpt_dtype_name(e->dtype));
        if (e->end > data_len)
            return ckpt_err(CKPT_E_TRUNCATED, path, "", off,
                            "truncated: tensor \"%s\": data ends at byte %" PRIu64
                            " of the buffer, but the file holds only %" PRIu64
                            " bytes after the header", e->name, e->end,
                            data_len);
        start = e->end;
    }
    if (start != data_len)
        return ckpt_err(CKPT_E_FORMAT, path, "", data_offset(n, start),
                        "%" PRIu64 " bytes after the last tensor, expected the "
                        "file to end at byte %" PRIu64 " (trailing data is "
                        "refused: polyglot files)", data_len - start,
                        data_offset(n, start));
    return 0;
}

/* Row-major strides the way torch computes them (a zero dimension counts
 * as 1), so views compare equal across formats. Only a zero-element tensor
 * can overflow here (otherwise every suffix product is <= numel); torch
 * refuses those shapes too ("Stride calculation overflowed"). */
static int contiguous_strides(const st_entry *e, uint64_t *stride) {
    uint64_t s = 1;
    for (uint32_t d = e->ndim; d-- > 0;) {
        stride[d] = s;
        if (d > 0 && ckpt_mul_overflow(s, e->shape[d] ? e->shape[d] : 1, &s))
            return -1;
    }
    return 0;
}

/* Builds f->root from validated entries. */
static int build_root(ckpt_file *f, uint64_t n, const st_entry *es,
                      size_t count) {
    f->root = ckpt_value_new(&f->arena, CKPT_KIND_DICT);
    if (!f->root) return ckpt_err(CKPT_E_NOMEM, f->path, "", 8, "out of memory");
    for (size_t i = 0; i < count; i++) {
        const st_entry *e = &es[i];
        uint64_t off = 8 + n + e->begin; /* <= map_size: validated */
        uint64_t stride[CKPT_MAX_NDIM];
        if (contiguous_strides(e, stride))
            return ckpt_err(CKPT_E_FORMAT, f->path, "", off,
                            "tensor \"%s\": strides overflow 64 bits",
                            e->name);
        ckpt_storage *st = ckpt_arena_alloc(&f->arena, sizeof *st);
        ckpt_value *key = ckpt_value_new_str(&f->arena, CKPT_KIND_STR, e->name,
                                             strlen(e->name));
        if (!st || !key)
            return ckpt_err(CKPT_E_NOMEM, f->path, "", off, "out of memory");
        st->dtype = e->dtype;
        st->nbytes = e->end - e->begin;
        st->data = f->map + off;
        st->key = key->u.s.p;
        st->member = "";
        st->file_offset = off;
        ckpt_value *tv;
        int rc = ckpt_tensor_new(&tv, &f->arena, st, e->dtype, e->ndim,
                                 e->shape, stride, 0, f->path, "", off);
        if (rc) return rc;
        if (ckpt_value_dict_set(&f->arena, f->root, key, tv))
            return ckpt_err(CKPT_E_NOMEM, f->path, "", off, "out of memory");
    }
    return 0;
}

/* Everything after the JSON parse; `doc` stays owned by the caller. */
static int read_header(ckpt_file *f, uint64_t n, json_t *doc) {
    if (!json_is_object(doc))
        return ckpt_err(CKPT_E_FORMAT, f->path, "", 8,
                        "header must be a JSON object, found an array");
    size_t keys = json_object_size(doc);
    size_t count = keys - (json_object_get(doc, "__metadata__") != NULL);
    if (count > f->opts.limits.max_tensors)
        return ckpt_err(CKPT_E_LIMIT, f->path, "", 8,
                        "header declares %zu tensors, limit max_tensors is "
                        "%" PRIu64, count, f->opts.limits.max_tensors);
    st_entry *es = ckpt_arena_array(&f->arena, count ? count : 1, sizeof *es);
    if (!es) return ckpt_err(CKPT_E_NOMEM, f->path, "", 8, "out of memory");
    const char *key;
    json_t *val;
    size_t i = 0;
    int rc;
    json_object_foreach(doc, key, val) {
        if (strcmp(key, "__metadata__") == 0)
            rc = read_metadata(f, val);
        else if ((rc = parse_entry(f, key, val, &es[i])) == 0)
            es[i].index = i, i++;
        if (rc) return rc;
    }
    qsort(es, count, sizeof *es, by_offsets);
    if ((rc = validate(f, n, es, count)) || (rc = build_root(f, n, es, count)))
        return rc;
    f->format = CKPT_FORMAT_SAFETENSORS;
    return 0;
}

/* ---------------------------------------------------------------- aliases */

/* A root entry, sorted by name for alias lookups. */
typedef struct named {
    const char *name;
    ckpt_value *value;
} named;

static int by_name(const void *a, const void *b) {
    return strcmp(((const named *)a)->name, ((const named *)b)->name);
}

/* Root dict value under `name`; NULL if none. O(log n). */
static ckpt_value *find_key(const named *sorted, size_t n, const char *name) {
    named probe = {name, NULL};
    const named *hit = bsearch(&probe, sorted, n, sizeof *sorted, by_name);
    return hit ? hit->value : NULL;
}

/* ckpt's safetensors writer stores a tensor reachable under several names
 * once and lists the other names in __metadata__ "ckpt.aliases" (JSON text
 * {"alias": "stored name", ...}; ckpt.h, "write"). Each alias becomes one
 * more root entry for the same tensor, so the file lists it under every
 * name as the original checkpoint did. A malformed entry is a format error:
 * the file would otherwise silently lose names. */
static int restore_aliases(ckpt_file *f) {
    const char *text = NULL;
    for (size_t i = 0; i < f->nmeta; i++)
        if (strcmp(f->meta_keys[i], "ckpt.aliases") == 0) text = f->meta_vals[i];
    if (!text) return 0;
    json_error_t err;
    json_t *doc = json_loads(text, JSON_REJECT_DUPLICATES, &err);
    if (!json_is_object(doc)) {
        json_decref(doc);
        return ckpt_err(CKPT_E_FORMAT, f->path, "", 8,
                        "__metadata__ \"ckpt.aliases\" must be a JSON object of "
                        "alias names to stored tensor names");
    }
    ckpt_value *root = f->root;
    size_t n = root->u.dict.n;
    named *sorted = ckpt_arena_array(&f->arena, n ? n : 1, sizeof *sorted);
    int rc = sorted ? 0 : ckpt_err(CKPT_E_NOMEM, f->path, "", 8, "out of memory");
    if (!rc) {
        for (size_t i = 0; i < n; i++)
            sorted[i] = (named){root->u.dict.keys[i]->u.s.p, root->u.dict.vals[i]};
        qsort(sorted, n, sizeof *sorted, by_name);
    }
    const char *alias;
    json_t *target;
    json_object_foreach(doc, alias, target) {
        if (rc) break;
        ckpt_value *t = json_is_string(target)
                            ? find_key(sorted, n, json_string_value(target))
                            : NULL;
        ckpt_value *key = NULL;
        if (!t || find_key(sorted, n, alias) || strcmp(alias, "__metadata__") == 0)
            rc = ckpt_err(CKPT_E_FORMAT, f->path, "", 8,
                          "__metadata__ \"ckpt.aliases\": alias \"%s\" must be a new "
                          "name for a stored tensor", alias);
        else if (!(key = ckpt_value_new_str(&f->arena, CKPT_KIND_STR, alias, strlen(alias))) ||
                 ckpt_value_dict_set(&f->arena, root, key, t))
            rc = ckpt_err(CKPT_E_NOMEM, f->path, "", 8, "out of memory");
    }
    json_decref(doc);
    return rc;
}

int ckpt_safetensors_read(ckpt_file *f) {
    if (f->map_size < 8)
        return ckpt_err(CKPT_E_TRUNCATED, f->path, "", 0,
                        "file is %zu bytes, expected at least 8 (the "
                        "safetensors header length)", f->map_size);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | f->map[i];
    /* bound N before anything is allocated from it */
    if (n > f->opts.limits.max_header_bytes)
        return ckpt_err(CKPT_E_LIMIT, f->path, "", 0,
                        "header length %" PRIu64 " exceeds the limit "
                        "max_header_bytes = %" PRIu64, n,
                        f->opts.limits.max_header_bytes);
    if (n > f->map_size - 8)
        return ckpt_err(CKPT_E_TRUNCATED, f->path, "", 0,
                        "header length %" PRIu64 " runs past the end of the "
                        "file (%zu bytes)", n, f->map_size);
    json_error_t err;
    json_t *doc = json_loadb((const char *)f->map + 8, (size_t)n,
                             JSON_REJECT_DUPLICATES, &err);
    if (!doc) return ckpt_json_fail(&err, f->path, 8, "safetensors header");
    int rc = read_header(f, n, doc);
    json_decref(doc);
    if (rc == 0) rc = restore_aliases(f);
    return rc;
}
