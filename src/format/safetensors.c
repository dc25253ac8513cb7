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
#include "base/once.h"
#include "base/pages.h"
#include "model/file.h"
#include "model/walk.h"
#include "format/safetensors.h"
#include "base/json_scan.h"
#include "base/utf8.h"

/* One tensor entry of the header, as parsed (records live only while the
 * file is opened: the tensors are built from them). */
typedef struct st_entry {
    const char *name; /* the header buffer, then the names pool */
    uint64_t begin, end;
    size_t key_at; /* header offset of the name: header order, errors */
    size_t shape;  /* index of shape[0] in the parser's dims pool */
    uint8_t dtype; /* ckpt_dtype */
    uint8_t ndim;
} st_entry;
/* The dtypes of FORMATS.md §1.3. ckpt_dtype_from_name also knows names
 * that only torch has (C32, C128, quantized); safetensors has no such
 * dtype, so a header naming one is as invalid as an unknown string. */
static int is_safetensors_dtype(ckpt_dtype dt) {
    switch (dt) {
    case CKPT_DT_BOOL:
    case CKPT_DT_U8:
    case CKPT_DT_I8:
    case CKPT_DT_I16:
    case CKPT_DT_U16:
    case CKPT_DT_I32:
    case CKPT_DT_U32:
    case CKPT_DT_I64:
    case CKPT_DT_U64:
    case CKPT_DT_F16:
    case CKPT_DT_BF16:
    case CKPT_DT_F32:
    case CKPT_DT_F64:
    case CKPT_DT_C64:
    case CKPT_DT_F8_E5M2:
    case CKPT_DT_F8_E4M3:
    case CKPT_DT_F8_E8M0:
    case CKPT_DT_F8_E4M3FNUZ:
    case CKPT_DT_F8_E5M2FNUZ:
    case CKPT_DT_F4:
    case CKPT_DT_F6_E2M3:
    case CKPT_DT_F6_E3M2: return 1;
    default: return 0;
    }
}

int ckpt_json_fail(const json_error_t *err, const char *file, uint64_t base, const char *what) {
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

/* Absolute offset of byte `rel` of the byte buffer, or CKPT_NO_OFFSET if
 * that does not fit in 64 bits (rel comes from the file). */
static uint64_t data_offset(uint64_t n, uint64_t rel) {
    uint64_t off;
    if (ckpt_add_overflow(8 + n, rel, &off)) return CKPT_NO_OFFSET;
    return off;
}

/* ------------------------------------------------------------ header JSON */

/* The header parser: one pass over a private copy of the header with
 * serde_json's grammar (what the reference reader deserializes
 * HashMetadata with), building st_entry records directly. No tree, no
 * allocation per tensor: a name without escapes stays where it is in the
 * copy (its closing quote becomes its NUL), shapes go to one growing pool
 * (a shape equal to the previous tensor's is shared), entries to one
 * growing array; metadata strings are copied to the file's arena.
 * Duplicate names are found afterwards, by sorting. Errors name the byte
 * they stop at. */
typedef struct hp {
    ckpt_file *f;
    ckpt_json_scan j; /* over the header, N bytes at file offset 8 */
    uint8_t *buf;     /* the header's bytes (j.s), writable */
    st_entry *es;     /* tensors so far */
    size_t count, es_cap;
    uint64_t *dims; /* every shape, concatenated */
    size_t ndims, dims_cap;
    int seen_metadata;
} hp;

/* serde_json's recursion limit: 128 nested arrays/objects fail. */
#define HEADER_MAX_DEPTH 127

static int syntax(hp *p, const char *expected) { return ckpt_json_syntax(&p->j, expected); }
static int nomem(hp *p) { return ckpt_json_nomem(&p->j); }
static int peek(hp *p) { return ckpt_json_peek(&p->j); }
static int expect(hp *p, int c, const char *what) { return ckpt_json_expect(&p->j, c, what); }
static const char *string(hp *p, char *scratch, size_t cap, int keep, size_t *len) {
    return ckpt_json_string(&p->j, scratch, cap, keep, len);
}
static int number(hp *p, uint64_t *out) { return ckpt_json_number(&p->j, out); }
static int literal(hp *p, const char *word) { return ckpt_json_literal(&p->j, word); }
static int open_nested(hp *p) { return ckpt_json_open(&p->j); }
static int next(hp *p, int close) { return ckpt_json_next(&p->j, close); }
static int skip_value(hp *p) { return ckpt_json_skip(&p->j); }

/* "__metadata__": null (serde Option: absent) or an object of strings. */
static int read_metadata(hp *p) {
    ckpt_file *f = p->f;
    size_t len;
    if (peek(p) == 'n') return literal(p, "null");
    if (peek(p) != '{') {
        int rc = skip_value(p);
        return rc ? rc
                  : ckpt_err(CKPT_E_FORMAT, f->path, "", 8,
                             "\"__metadata__\" must be an object of string "
                             "values (the key is reserved for metadata, not a "
                             "tensor name)");
    }
    if (open_nested(p)) return -1;
    size_t cap = 0;
    if (peek(p) == '}')
        p->j.i++, p->j.depth--;
    else
        for (;;) {
            const char *key = string(p, NULL, 0, 1, &len);
            if (!key || expect(p, ':', "':'")) return -1;
            if (peek(p) != '"') {
                int rc = skip_value(p);
                return rc ? rc
                          : ckpt_err(CKPT_E_FORMAT, f->path, "", 8,
                                     "\"__metadata__\" value of \"%s\" must be a "
                                     "string (the key \"__metadata__\" is reserved "
                                     "for metadata, not a tensor name)",
                                     key);
            }
            const char *val = string(p, NULL, 0, 1, &len);
            if (!val) return -1;
            size_t vcap = cap;
            if (ckpt_arena_grow(&f->arena, (void **)&f->meta_keys, &cap, f->nmeta + 1,
                                sizeof(char *)) ||
                ckpt_arena_grow(&f->arena, (void **)&f->meta_vals, &vcap, f->nmeta + 1,
                                sizeof(char *)))
                return nomem(p);
            /* HashMap<String, String>: a repeated key keeps the last value */
            size_t k = 0;
            while (k < f->nmeta && strcmp(f->meta_keys[k], key) != 0) k++;
            f->meta_keys[k] = (char *)key;
            f->meta_vals[k] = (char *)val;
            if (k == f->nmeta) f->nmeta++;
            int rc = next(p, '}');
            if (rc) {
                if (rc < 0) return -1;
                break;
            }
        }
    f->has_metadata = 1;
    return 0;
}

/* A non-negative integer element of shape or data_offsets; `bad` is the
 * schema error for any other value. */
static int uint_elem(hp *p, uint64_t *out, const char *name, const char *bad, size_t i) {
    int c = peek(p);
    int rc = (c == '-' || (c >= '0' && c <= '9')) ? number(p, out) : 2;
    if (rc < 0) return -1;
    if (rc == 2 && skip_value(p)) return -1;
    if (rc) return ckpt_err(CKPT_E_FORMAT, p->f->path, "", 8, bad, name, i);
    return 0;
}

static int read_shape(hp *p, st_entry *e) {
    static const char bad[] = "tensor \"%s\": shape[%zu] is not a non-negative "
                              "integer";
    if (peek(p) != '[') {
        if (skip_value(p)) return -1;
        return ckpt_err(CKPT_E_FORMAT, p->f->path, "", 8,
                        "tensor \"%s\": expected \"shape\" to be an array of "
                        "non-negative integers",
                        e->name);
    }
    if (open_nested(p)) return -1;
    uint32_t max_ndim =
        p->f->opts.limits.max_ndim < CKPT_MAX_NDIM ? p->f->opts.limits.max_ndim : CKPT_MAX_NDIM;
    e->shape = p->ndims;
    size_t ndim = 0;
    int rc = 0;
    if (peek(p) == ']')
        p->j.i++, p->j.depth--;
    else
        while (rc == 0) {
            if (ndim == max_ndim)
                return ckpt_err(CKPT_E_LIMIT, p->f->path, "", 8,
                                "tensor \"%s\" has more than %u dimensions, limit "
                                "max_ndim is %u",
                                e->name, max_ndim, max_ndim);
            if (p->ndims == p->dims_cap) {
                size_t cap = p->dims_cap ? 2 * p->dims_cap : 1024;
                uint64_t *d = ckpt_realloc(p->dims, cap * sizeof *d);
                if (!d) return nomem(p);
                p->dims = d, p->dims_cap = cap;
            }
            if (uint_elem(p, &p->dims[p->ndims], e->name, bad, ndim)) return -1;
            p->ndims++, ndim++;
            if ((rc = next(p, ']')) < 0) return -1;
        }
    e->ndim = (uint8_t)ndim;
    /* the previous tensor's shape, when equal, is shared (layers repeat) */
    const st_entry *prev = p->count ? &p->es[p->count - 1] : NULL;
    if (ndim && prev && prev->ndim == ndim && prev->shape + ndim <= e->shape &&
        memcmp(p->dims + prev->shape, p->dims + e->shape, ndim * sizeof *p->dims) == 0) {
        p->ndims = e->shape;
        e->shape = prev->shape;
    }
    return 0;
}

static int read_offsets(hp *p, st_entry *e) {
    static const char bad[] = "tensor \"%s\": expected \"data_offsets\" to be "
                              "[begin, end], two non-negative integers%.0zu";
    uint64_t *slot[2] = {&e->begin, &e->end};
    size_t k = 0;
    int rc = 0;
    if (peek(p) != '[') {
        if (skip_value(p)) return -1;
        return ckpt_err(CKPT_E_FORMAT, p->f->path, "", 8, bad, e->name, k);
    }
    if (open_nested(p)) return -1;
    if (peek(p) == ']') return ckpt_err(CKPT_E_FORMAT, p->f->path, "", 8, bad, e->name, k);
    while (rc == 0) {
        uint64_t v;
        if (uint_elem(p, &v, e->name, bad, k)) return -1;
        if (k == 2) return ckpt_err(CKPT_E_FORMAT, p->f->path, "", 8, bad, e->name, k);
        *slot[k++] = v;
        if ((rc = next(p, ']')) < 0) return -1;
    }
    if (k != 2) return ckpt_err(CKPT_E_FORMAT, p->f->path, "", 8, bad, e->name, k);
    return 0;
}

/* One tensor entry (TensorInfo): dtype, shape and data_offsets, each
 * exactly once; unknown fields are skipped, as serde does. */
static int read_entry(hp *p, st_entry *e) {
    const char *path = p->f->path;
    if (peek(p) != '{') {
        if (skip_value(p)) return -1;
        return ckpt_err(CKPT_E_FORMAT, path, "", 8,
                        "tensor \"%s\": expected an object with dtype, shape "
                        "and data_offsets",
                        e->name);
    }
    if (open_nested(p)) return -1;
    static const char *const fields[3] = {"dtype", "shape", "data_offsets"};
    int seen[3] = {0, 0, 0}, rc = 0;
    if (peek(p) == '}')
        p->j.i++, p->j.depth--;
    else
        while (rc == 0) {
            char key[16], dt[16];
            size_t len;
            const char *k = string(p, key, sizeof key, 0, &len);
            if (!k || expect(p, ':', "':'")) return -1;
            int field = 3;
            for (int j = 0; j < 3; j++)
                if (len == strlen(fields[j]) && memcmp(k, fields[j], len) == 0) field = j;
            if (field < 3 && seen[field])
                return ckpt_err(CKPT_E_FORMAT, path, "", 8 + (uint64_t)p->j.i,
                                "tensor \"%s\": duplicate field \"%s\"", e->name, fields[field]);
            if (field < 3) seen[field] = 1;
            if (field == 0) {
                if (peek(p) != '"') {
                    if (skip_value(p)) return -1;
                    return ckpt_err(CKPT_E_FORMAT, path, "", 8,
                                    "tensor \"%s\": expected \"dtype\" to be a "
                                    "string",
                                    e->name);
                }
                const char *d = string(p, dt, sizeof dt, 0, &len);
                if (!d) return -1;
                size_t m = len < sizeof dt ? len : sizeof dt - 1;
                memmove(dt, d, m);
                dt[m] = '\0';
                ckpt_dtype dtype = len < sizeof dt ? ckpt_dtype_from_name(dt) : CKPT_DT_UNKNOWN;
                e->dtype = (uint8_t)dtype;
                if (!is_safetensors_dtype(dtype))
                    return ckpt_err(CKPT_E_FORMAT, path, "", 8,
                                    "tensor \"%s\": unknown dtype \"%.*s\" "
                                    "(expected a safetensors dtype such as F32, "
                                    "BF16, I64, F8_E4M3)",
                                    e->name, (int)m, dt);
            } else if (field == 1) {
                if (read_shape(p, e)) return -1;
            } else if (field == 2) {
                if (read_offsets(p, e)) return -1;
            } else if (skip_value(p)) {
                return -1;
            }
            if ((rc = next(p, '}')) < 0) return -1;
        }
    for (int j = 0; j < 3; j++)
        if (!seen[j])
            return ckpt_err(CKPT_E_FORMAT, path, "", 8,
                            j == 0   ? "tensor \"%s\": expected \"dtype\" to be a string"
                            : j == 1 ? "tensor \"%s\": expected \"shape\" to be an "
                                       "array of non-negative integers"
                                     : "tensor \"%s\": expected \"data_offsets\" to "
                                       "be [begin, end], two non-negative integers",
                            e->name);
    return 0;
}

/* A key of the header object, NUL-terminated: in place when it has no
 * escapes (its closing quote becomes the NUL; nothing reads that byte
 * again), else decoded again into the arena. */
static const char *tensor_name(hp *p, size_t key_at, size_t *len) {
    const char *s = string(p, NULL, 0, 0, len);
    if (!s) return NULL;
    size_t end = p->j.i - 1; /* the closing quote */
    if ((const uint8_t *)s + *len == p->buf + end) {
        p->buf[end] = '\0';
        return s;
    }
    p->j.i = key_at;
    return string(p, NULL, 0, 1, len);
}

/* The whole header: one object of tensor entries and "__metadata__". */
static int parse_header(hp *p) {
    ckpt_file *f = p->f;
    if (peek(p) != '{') return syntax(p, "'{' (the header is one JSON object)");
    if (open_nested(p)) return -1;
    int rc = 0;
    if (peek(p) == '}')
        p->j.i++, p->j.depth--;
    else
        while (rc == 0) {
            size_t key_at = p->j.i, len;
            const char *name = tensor_name(p, key_at, &len);
            if (!name || expect(p, ':', "':'")) return -1;
            if (strcmp(name, "__metadata__") == 0 && len == 12) {
                if (p->seen_metadata) {
                    p->j.i = key_at;
                    return syntax(p, "unique keys (duplicate \"__metadata__\")");
                }
                p->seen_metadata = 1;
                if (read_metadata(p)) return -1;
            } else {
                if (p->count == f->opts.limits.max_tensors)
                    return ckpt_err(CKPT_E_LIMIT, f->path, "", 8 + (uint64_t)key_at,
                                    "header declares more than %" PRIu64 " tensors, "
                                    "limit max_tensors is %" PRIu64,
                                    f->opts.limits.max_tensors, f->opts.limits.max_tensors);
                if (p->count == p->es_cap) {
                    size_t cap = p->es_cap ? 2 * p->es_cap : 256;
                    st_entry *es = ckpt_realloc(p->es, cap * sizeof *es);
                    if (!es) return nomem(p);
                    p->es = es, p->es_cap = cap;
                }
                st_entry *e = &p->es[p->count];
                memset(e, 0, sizeof *e);
                e->name = name;
                e->key_at = key_at;
                if (read_entry(p, e)) return -1;
                p->count++;
            }
            if ((rc = next(p, '}')) < 0) return -1;
        }
    if (peek(p) != -1) return syntax(p, "only whitespace after the header object");
    return 0;
}

/* Entries in header order (key_at) among equal keys. */
static int by_offsets(const void *a, const void *b) {
    const st_entry *x = *(const st_entry *const *)a, *y = *(const st_entry *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return x->key_at < y->key_at ? -1 : x->key_at > y->key_at;
}

static int by_entry_name(const void *a, const void *b) {
    const st_entry *x = *(const st_entry *const *)a, *y = *(const st_entry *const *)b;
    int c = strcmp(x->name, y->name);
    if (c) return c;
    return x->key_at < y->key_at ? -1 : x->key_at > y->key_at;
}

/* Row-major strides the way torch computes them (a zero dimension counts
 * as 1), so views compare equal across formats. Only a zero-element tensor
 * can overflow here (otherwise every suffix product is <= numel); torch
 * refuses those shapes too ("Stride calculation overflowed"). */
static int contiguous_strides(uint32_t ndim, const uint64_t *shape, uint64_t *stride) {
    uint64_t s = 1;
    for (uint32_t d = ndim; d-- > 0;) {
        stride[d] = s;
        if (d > 0 && ckpt_mul_overflow(s, shape[d] ? shape[d] : 1, &s)) return -1;
    }
    return 0;
}

/* e's dimensions in the pool; a 0-d tensor has none, and the pool of a
 * file whose tensors are all 0-d is NULL (no pointer arithmetic on it). */
static const uint64_t *entry_shape(const uint64_t *dims, const st_entry *e) {
    return e->ndim ? dims + e->shape : NULL;
}

/* Moves the names out of the header's copy into one pool of exactly
 * their bytes, so that the copy can go (a name is a third of an entry's
 * header text). A name is bounded as the flattening bounds names
 * (ckpt_walk_name_check). */
static int pool_names(ckpt_file *f, st_entry *es, size_t count) {
    size_t total = 0;
    for (size_t i = 0; i < count; i++) {
        size_t len = strlen(es[i].name);
        int rc = ckpt_walk_name_check(f->opts.limits.max_name_bytes, len, 0, f->path, "",
                                      8 + (uint64_t)es[i].key_at);
        if (rc) return rc;
        total += len + 1; /* at most the header's length */
    }
    char *pool = ckpt_arena_alloc_raw(&f->arena, total ? total : 1);
    if (!pool) return ckpt_err(CKPT_E_NOMEM, f->path, "", 8, "out of memory");
    for (size_t i = 0; i < count; i++) {
        size_t len = strlen(es[i].name) + 1;
        memcpy(pool, es[i].name, len);
        es[i].name = pool;
        pool += len;
    }
    return 0;
}

/* Keys are unique (serde_json would keep the last of repeated keys; ckpt
 * refuses the ambiguity). Over entries sorted by name: the error names
 * the first repetition in header order. */
static int check_unique(ckpt_file *f, st_entry *const *byname, size_t count) {
    const st_entry *dup = NULL;
    for (size_t i = 1; i < count; i++)
        if (strcmp(byname[i - 1]->name, byname[i]->name) == 0 &&
            (!dup || byname[i]->key_at < dup->key_at))
            dup = byname[i];
    if (!dup) return 0;
    return ckpt_err(CKPT_E_FORMAT, f->path, "", 8 + (uint64_t)dup->key_at,
                    "safetensors header is not valid JSON (expected one UTF-8 JSON object, "
                    "unique keys, only whitespace around it): duplicate key \"%s\"",
                    dup->name);
}

/* Metadata::validate (FORMATS.md §1.4 step 4-5) over entries sorted by
 * data_offsets: they must tile the byte buffer from 0 with no gap, overlap
 * or alias, each exactly numel x bits / 8 bytes, and the buffer must end
 * where the file ends. */
static int validate(ckpt_file *f, uint64_t n, st_entry *const *byoff, size_t count,
                    const uint64_t *dims) {
    const char *path = f->path;
    uint64_t data_len = (uint64_t)f->map_size - 8 - n;
    uint64_t start = 0;
    for (size_t i = 0; i < count; i++) {
        const st_entry *e = byoff[i];
        ckpt_dtype dtype = (ckpt_dtype)e->dtype;
        uint64_t off = data_offset(n, e->begin);
        if (e->begin != start || e->end < e->begin)
            return ckpt_err(CKPT_E_FORMAT, path, "", off,
                            "tensor \"%s\": invalid data_offsets [%" PRIu64 ", %" PRIu64
                            "], expected [%" PRIu64 ", end >= "
                            "begin] (tensors must tile the data from 0 without "
                            "gaps, overlaps or shared bytes)",
                            e->name, e->begin, e->end, start);
        const uint64_t *shape = entry_shape(dims, e);
        uint64_t numel = 1, nbits;
        for (uint32_t d = 0; d < e->ndim; d++)
            if (ckpt_mul_overflow(numel, shape[d], &numel))
                return ckpt_err(CKPT_E_FORMAT, path, "", off,
                                "tensor \"%s\": shape product overflows 64 "
                                "bits at dimension %u",
                                e->name, d);
        if (ckpt_mul_overflow(numel, ckpt_dtype_bits(dtype), &nbits))
            return ckpt_err(CKPT_E_FORMAT, path, "", off,
                            "tensor \"%s\": %" PRIu64 " elements of %s "
                            "overflow 64 bits",
                            e->name, numel, ckpt_dtype_name(dtype));
        if (nbits % 8)
            return ckpt_err(CKPT_E_FORMAT, path, "", off,
                            "tensor \"%s\": misaligned, %" PRIu64 " elements "
                            "of %s are %" PRIu64 " bits, expected a whole "
                            "number of bytes",
                            e->name, numel, ckpt_dtype_name(dtype), nbits);
        if (e->end - e->begin != nbits / 8)
            return ckpt_err(CKPT_E_FORMAT, path, "", off,
                            "tensor \"%s\": data_offsets [%" PRIu64 ", %" PRIu64 "] span %" PRIu64
                            " bytes, expected %" PRIu64 " (%" PRIu64 " elements of %s)",
                            e->name, e->begin, e->end, e->end - e->begin, nbits / 8, numel,
                            ckpt_dtype_name(dtype));
        uint64_t stride[CKPT_MAX_NDIM];
        if (contiguous_strides(e->ndim, shape, stride))
            return ckpt_err(CKPT_E_FORMAT, path, "", off, "tensor \"%s\": strides overflow 64 bits",
                            e->name);
        if (e->end > data_len)
            return ckpt_err(CKPT_E_TRUNCATED, path, "", off,
                            "truncated: tensor \"%s\": data ends at byte %" PRIu64
                            " of the buffer, but the file holds only %" PRIu64
                            " bytes after the header",
                            e->name, e->end, data_len);
        start = e->end;
    }
    if (start != data_len)
        return ckpt_err(CKPT_E_FORMAT, path, "", data_offset(n, start),
                        "%" PRIu64 " bytes after the last tensor, expected the "
                        "file to end at byte %" PRIu64 " (trailing data is "
                        "refused: polyglot files)",
                        data_len - start, data_offset(n, start));
    return 0;
}

/* f->tensors from validated entries sorted by name: what
 * ckpt_file_flatten would make of their tree, without the tree. Shapes
 * are one copy of the parser's pool; tensors that share a shape share
 * its strides. Until attach_storages, storage_offset holds the tensor's
 * file offset. */
static int build_tensors(ckpt_file *f, uint64_t n, st_entry *const *byname, size_t count,
                         const uint64_t *dims, size_t ndims) {
    size_t nstrides = 0;
    for (size_t i = 0; i < count; i++)
        if (i == 0 || byname[i]->shape != byname[i - 1]->shape ||
            byname[i]->ndim != byname[i - 1]->ndim)
            nstrides += byname[i]->ndim;
    ckpt_tensor *ts = ckpt_arena_array(&f->arena, count ? count : 1, sizeof *ts);
    uint64_t *shapes = ckpt_arena_array(&f->arena, ndims ? ndims : 1, sizeof *shapes);
    uint64_t *strides = ckpt_arena_array(&f->arena, nstrides ? nstrides : 1, sizeof *strides);
    if (!ts || !shapes || !strides) return ckpt_err(CKPT_E_NOMEM, f->path, "", 8, "out of memory");
    if (ndims) memcpy(shapes, dims, ndims * sizeof *shapes);
    uint64_t *stride = strides;
    for (size_t i = 0; i < count; i++) {
        const st_entry *e = byname[i];
        ckpt_tensor *t = &ts[i];
        t->name = e->name;
        t->dtype = (ckpt_dtype)e->dtype;
        t->ndim = e->ndim;
        t->shape = e->ndim ? shapes + e->shape : shapes;
        if (i > 0 && e->shape == byname[i - 1]->shape && e->ndim == byname[i - 1]->ndim) {
            t->stride = ts[i - 1].stride;
        } else {
            t->stride = stride;
            (void)contiguous_strides(e->ndim, t->shape, stride); /* validated */
            stride += e->ndim;
        }
        t->numel = 1;
        for (uint32_t d = 0; d < e->ndim; d++) t->numel *= t->shape[d]; /* validated */
        t->nbytes = e->end - e->begin;
        t->storage_offset = 8 + n + e->begin; /* <= map_size: validated */
    }
    f->tensors = ts;
    f->ntensors = count;
    return 0;
}

/* One storage per tensor, pointing straight into the mapping; ids in
 * name order, as ckpt_file_flatten numbers them, so f->storages is not
 * needed (file.h). */
static int attach_storages(ckpt_file *f) {
    size_t count = f->ntensors;
    ckpt_storage *sts = ckpt_arena_array(&f->arena, count ? count : 1, sizeof *sts);
    if (!sts) return ckpt_err(CKPT_E_NOMEM, f->path, "", 8, "out of memory");
    for (size_t i = 0; i < count; i++) {
        ckpt_tensor *t = &f->tensors[i];
        ckpt_storage *st = &sts[i];
        uint64_t off = t->storage_offset;
        st->dtype = t->dtype;
        st->nbytes = t->nbytes;
        st->data = f->map + off;
        st->source = &f->source;
        st->key = t->name;
        st->member = "";
        st->file_offset = off;
        st->id = i;
        t->storage = st;
        t->storage_offset = 0;
    }
    f->storages = NULL; /* storage i is tensor i's */
    f->nstorages = count;
    return 0;
}

/* Tensors in file order; equal offsets (empty tensors) by name. */
static int by_file_offset(const void *a, const void *b) {
    const ckpt_tensor *x = *(const ckpt_tensor *const *)a, *y = *(const ckpt_tensor *const *)b;
    uint64_t p = x->storage->file_offset, q = y->storage->file_offset;
    if (p != q) return p < q ? -1 : 1;
    if (x->nbytes != y->nbytes) return x->nbytes < y->nbytes ? -1 : 1;
    return x < y ? -1 : x > y;
}

int ckpt_safetensors_tree(ckpt_file *f) {
    size_t count = f->ntensors;
    ckpt_value *root = ckpt_value_new(&f->arena, CKPT_KIND_DICT);
    ckpt_value **keys = ckpt_arena_array(&f->arena, count ? count : 1, sizeof *keys);
    ckpt_value **vals = ckpt_arena_array(&f->arena, count ? count : 1, sizeof *vals);
    ckpt_tensor **order = ckpt_malloc((count ? count : 1) * sizeof *order);
    if (!root || !keys || !vals || !order) {
        ckpt_free(order);
        return ckpt_err(CKPT_E_NOMEM, f->path, "", 8, "out of memory");
    }
    for (size_t i = 0; i < count; i++) order[i] = &f->tensors[i];
    if (count > 1) qsort(order, count, sizeof *order, by_file_offset);
    root->u.dict.keys = keys;
    root->u.dict.vals = vals;
    root->u.dict.cap = count ? count : 1;
    int rc = 0;
    for (size_t i = 0; i < count && rc == 0; i++) {
        ckpt_value *key = ckpt_value_new(&f->arena, CKPT_KIND_STR);
        ckpt_value *val = ckpt_value_new(&f->arena, CKPT_KIND_TENSOR);
        if (!key || !val) {
            rc = ckpt_err(CKPT_E_NOMEM, f->path, "", 8, "out of memory");
            break;
        }
        key->u.s.p = (char *)order[i]->name;
        key->u.s.len = strlen(order[i]->name);
        val->u.tensor = order[i];
        keys[i] = key;
        vals[i] = val;
        root->u.dict.n = i + 1;
    }
    ckpt_free(order);
    if (rc == 0) {
        f->root = root;
        CKPT_ONCE_STORE(&f->tree_lazy, 0);
    }
    return rc;
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
        ckpt_value *t =
            json_is_string(target) ? find_key(sorted, n, json_string_value(target)) : NULL;
        ckpt_value *key = NULL;
        if (!t || find_key(sorted, n, alias) || strcmp(alias, "__metadata__") == 0)
            rc = ckpt_err(CKPT_E_FORMAT, f->path, "", 8,
                          "__metadata__ \"ckpt.aliases\": alias \"%s\" must be a new "
                          "name for a stored tensor",
                          alias);
        else if (!(key = ckpt_value_new_str(&f->arena, CKPT_KIND_STR, alias, strlen(alias))) ||
                 ckpt_value_dict_set(&f->arena, root, key, t))
            rc = ckpt_err(CKPT_E_NOMEM, f->path, "", 8, "out of memory");
    }
    json_decref(doc);
    return rc;
}

/* The header's bytes, copied with pread (source.h: a file that shrinks
 * while it is opened is an error, not SIGBUS) into a buffer of the
 * length N once that is checked against the limit and the file's size. */
static int read_header(ckpt_file *f, uint8_t **out, uint64_t *out_n) {
    *out = NULL;
    if (f->map_size < 8)
        return ckpt_err(CKPT_E_TRUNCATED, f->path, "", 0,
                        "file is %zu bytes, expected at least 8 (the "
                        "safetensors header length)",
                        f->map_size);
    uint8_t le[8];
    int rc = ckpt_source_read(&f->source, f->map, le, 8, "");
    if (rc) return rc;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | le[i];
    /* bound N before anything is allocated from it */
    if (n > f->opts.limits.max_header_bytes)
        return ckpt_err(CKPT_E_LIMIT, f->path, "", 0,
                        "header length %" PRIu64 " exceeds the limit "
                        "max_header_bytes = %" PRIu64,
                        n, f->opts.limits.max_header_bytes);
    if (n > f->map_size - 8)
        return ckpt_err(CKPT_E_TRUNCATED, f->path, "", 0,
                        "header length %" PRIu64 " runs past the end of the "
                        "file (%zu bytes)",
                        n, f->map_size);
    uint8_t *buf = ckpt_malloc(n ? (size_t)n : 1);
    if (!buf) return ckpt_err(CKPT_E_NOMEM, f->path, "", 8, "out of memory");
    /* memory (a mapping: ckpt.load(mmap=True) maps it MADV_RANDOM) is
     * asked for at once, not a read per page the copy faults in
     * (base/pages.h) */
    if (!ckpt_source_is_file(&f->source, f->map + 8, n))
        ckpt_pages_will_need(f->map + 8, (size_t)n);
    if ((rc = ckpt_source_read(&f->source, f->map + 8, buf, (size_t)n, ""))) {
        ckpt_free(buf);
        return rc;
    }
    *out = buf;
    *out_n = n;
    return 0;
}

/* Reads f as a safetensors file; with `build`, f->tensors and storages
 * get the tensors and the tree is left to ckpt_safetensors_tree, else
 * only the rules are checked (ckpt.aliases, which needs the names,
 * builds them anyway). Memory stays near the tensors' own records: the
 * header's copy goes once its names are pooled, the entries once the
 * tensors are built, before their storages are. */
static int read_file(ckpt_file *f, int build) {
    uint8_t *buf;
    uint64_t n = 0;
    int rc = read_header(f, &buf, &n);
    if (rc) return rc;
    hp p = {.f = f,
            .buf = buf,
            .j = {.s = buf,
                  .n = (size_t)n,
                  .max_depth = HEADER_MAX_DEPTH,
                  .arena = &f->arena,
                  .file = f->path,
                  .base = 8,
                  .what = "safetensors header"}};
    rc = parse_header(&p) ? ckpt_error_last()->code : 0;
    if (rc == 0) rc = pool_names(f, p.es, p.count);
    ckpt_free(buf);
    size_t count = p.count;
    st_entry **byname = NULL, **byoff = NULL;
    if (rc == 0) {
        byname = ckpt_malloc((count ? count : 1) * sizeof *byname);
        byoff = ckpt_malloc((count ? count : 1) * sizeof *byoff);
        if (!byname || !byoff) rc = ckpt_err(CKPT_E_NOMEM, f->path, "", 8, "out of memory");
    }
    if (rc == 0) {
        for (size_t i = 0; i < count; i++) byname[i] = byoff[i] = &p.es[i];
        if (count > 1) qsort(byname, count, sizeof *byname, by_entry_name);
        rc = check_unique(f, byname, count);
    }
    if (rc == 0) {
        if (count > 1) qsort(byoff, count, sizeof *byoff, by_offsets);
        rc = validate(f, n, byoff, count, p.dims);
    }
    ckpt_free(byoff);
    int aliases = 0;
    for (size_t i = 0; rc == 0 && i < f->nmeta; i++)
        aliases |= strcmp(f->meta_keys[i], "ckpt.aliases") == 0;
    if (rc == 0 && (build || aliases)) rc = build_tensors(f, n, byname, count, p.dims, p.ndims);
    ckpt_free(byname);
    ckpt_free(p.es);
    ckpt_free(p.dims);
    if (rc == 0 && (build || aliases)) rc = attach_storages(f);
    if (rc == 0 && aliases) {
        /* the aliases' names are the tree's: ckpt_file_flatten names them */
        rc = ckpt_safetensors_tree(f);
        if (rc == 0) rc = restore_aliases(f);
        f->tensors = NULL;
        f->ntensors = f->nstorages = 0;
        f->storages = NULL;
    } else if (rc == 0 && build) {
        f->tree_lazy = 1;
    }
    if (rc == 0 && build) f->format = CKPT_FORMAT_SAFETENSORS;
    return rc;
}

int ckpt_safetensors_read(ckpt_file *f) { return read_file(f, 1); }

int ckpt_safetensors_check(const uint8_t *p, size_t n, const ckpt_source *src, const char *path,
                           const ckpt_limits *limits) {
    ckpt_file f;
    memset(&f, 0, sizeof f);
    f.path = path;
    f.map = p;
    f.map_size = n;
    f.source.fd = -1;
    if (src) f.source = *src;
    f.opts.limits = *limits;
    int rc = read_file(&f, 0);
    ckpt_arena_free(&f.arena);
    return rc;
}
