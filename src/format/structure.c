/* structure.c - the decoder of ckpt's own "ckpt.structure" metadata: the
 * original tree of a safetensors file written by ckpt (its encoder is
 * build_structure in safetensors_write.c).
 *
 * The decoder reads text from the file, so it is as strict as the other
 * readers: every tag, type, index and size is checked, tensor views are
 * bounds-checked against their storage by ckpt_tensor_new, a storage
 * rebuilt from views may not exceed limits.max_inflate_bytes, and a "ref"
 * may name only a node that is complete: a container's ref inside itself
 * would make the tree cyclic, which the writer never produces. */
#include "format/structure.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/once.h"
#include "model/device.h"
#include "model/dtype.h"
#include "model/file.h"
#include "format/write.h"

typedef struct decoder {
    const ckpt_file *f;
    ckpt_arena *a;
    ckpt_value **nodes; /* containers and tensors in document order */
    size_t n, cap;
    unsigned char *open; /* parallels nodes: 1 while a container's
                                 items are being decoded */
    size_t open_cap;
    int version;            /* 1; 2: dicts may have "class" and "state",
                               numpy, frozenset, Size, device, bytearray
                               tags; 3: a bytearray is numbered for "ref" */
    const json_t *storages; /* "storages" array, or NULL */
    ckpt_storage **groups;  /* rebuilt storages, by index */
    unsigned char *backed;  /* 1: the group's bytes are a stored tensor */
} decoder;

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static int
bad(const decoder *d, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ckpt_err(CKPT_E_FORMAT, d->f->path, CKPT_META_STRUCTURE, CKPT_NO_OFFSET, "%s: %s",
                    CKPT_META_STRUCTURE, msg);
}

static int nomem(const decoder *d) {
    return ckpt_err(CKPT_E_NOMEM, d->f->path, "", CKPT_NO_OFFSET, "out of memory");
}

static int json_u64(const json_t *v, uint64_t *out) {
    if (!json_is_integer(v) || json_integer_value(v) < 0) return -1;
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

/* Numbers v for "ref"; a container stays open (unreferenceable) until
 * its items are decoded. */
static int register_node(decoder *d, ckpt_value *v, int open) {
    if (ckpt_arena_grow(d->a, (void **)&d->nodes, &d->cap, d->n + 1, sizeof *d->nodes) ||
        ckpt_arena_grow(d->a, (void **)&d->open, &d->open_cap, d->n + 1, 1))
        return nomem(d);
    d->open[d->n] = (unsigned char)open;
    d->nodes[d->n++] = v;
    return 0;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* A decimal integer beyond int64 (the writer's {"int": "..."}). */
static int decode_bigint(decoder *d, const char *s, ckpt_value **out) {
    size_t n = strlen(s), neg = s[0] == '-';
    /* no longer than the pickle reader accepts (CKPT_BIGINT_MAX_BYTES;
     * 256^k < 10^(2.41 k)) */
    if (n == neg || n - neg > CKPT_BIGINT_MAX_BYTES * 241 / 100 + 1 ||
        strspn(s + neg, "0123456789") != n - neg)
        return bad(d, "\"int\" must be decimal digits, got \"%.40s\"", s);
    errno = 0;
    long long v = strtoll(s, NULL, 10);
    ckpt_value *iv = ckpt_value_new_int(d->a, (int64_t)v);
    if (!iv) return nomem(d);
    if (errno == ERANGE) {
        size_t skip = neg;
        while (s[skip] == '0' && s[skip + 1]) skip++; /* no leading zeros */
        iv->u.i.decimal =
            neg ? ckpt_arena_printf(d->a, "-%s", s + skip) : ckpt_arena_strdup(d->a, s + skip);
        if (!iv->u.i.decimal) return nomem(d);
    }
    *out = iv;
    return 0;
}

static int decode(decoder *d, const json_t *j, uint32_t depth, ckpt_value **out);

/* Python hashes set items and dict keys as it builds them
 * (ckpt_value_hashable): what it cannot is no tree it can rebuild. */
static int hashable(decoder *d, const ckpt_value *v, const char *as) {
    char msg[160];
    return ckpt_value_hashable(v, as, msg, sizeof msg) ? bad(d, "%s", msg) : 0;
}

static int decode_seq(decoder *d, const json_t *items, int kind, uint32_t depth, ckpt_value **out) {
    if (!json_is_array(items)) return bad(d, "a %s must hold an array", ckpt_value_kind_name(kind));
    ckpt_value *v = ckpt_value_new(d->a, kind);
    if (!v) return nomem(d);
    size_t id = d->n;
    int rc = register_node(d, v, 1);
    for (size_t i = 0; !rc && i < json_array_size(items); i++) {
        ckpt_value *item;
        if ((rc = decode(d, json_array_get(items, i), depth + 1, &item))) break;
        if (kind == CKPT_KIND_SET && (rc = hashable(d, item, "set item"))) break;
        if (ckpt_value_append(d->a, v, item)) rc = nomem(d);
    }
    if (!rc) d->open[id] = 0;
    *out = v;
    return rc;
}

/* {"dict": [[K, V]...]} and, from version 2, "class" (the mapping class)
 * and "state" (its attributes, a dict; only with a class), decoded after
 * the items as the writer wrote them, so "ref" numbering agrees. */
static int decode_dict(decoder *d, const json_t *j, uint32_t depth, ckpt_value **out) {
    const json_t *pairs = json_object_get(j, "dict"), *cls = json_object_get(j, "class"),
                 *state = json_object_get(j, "state");
    if (json_object_size(j) != 1 + (size_t)(cls != NULL) + (size_t)(state != NULL) ||
        (d->version < 2 && json_object_size(j) != 1))
        return bad(d, "a dict object holds \"dict\"%s and nothing else",
                   d->version < 2 ? "" : ", \"class\", \"state\"");
    if (!json_is_array(pairs)) return bad(d, "a dict must hold an array of [key, value]");
    ckpt_value *v = ckpt_value_new(d->a, CKPT_KIND_DICT);
    if (!v) return nomem(d);
    if (cls) {
        const char *name = json_is_string(cls) ? json_string_value(cls) : "";
        if (strcmp(name, ckpt_dict_class_name(CKPT_DICT_ORDERED)) == 0)
            v->dict_class = CKPT_DICT_ORDERED;
        else if (strcmp(name, ckpt_dict_class_name(CKPT_DICT_COUNTER)) == 0)
            v->dict_class = CKPT_DICT_COUNTER;
        else
            return bad(d,
                       "\"class\" \"%.60s\" is not collections.OrderedDict or "
                       "collections.Counter",
                       name);
    } else if (state) {
        return bad(d, "a plain dict has no \"state\" (attributes need a \"class\")");
    }
    size_t id = d->n;
    int rc = register_node(d, v, 1);
    for (size_t i = 0; !rc && i < json_array_size(pairs); i++) {
        const json_t *p = json_array_get(pairs, i);
        ckpt_value *k, *val;
        if (!json_is_array(p) || json_array_size(p) != 2)
            return bad(d, "dict item %zu is not a [key, value] pair", i);
        if ((rc = decode(d, json_array_get(p, 0), depth + 1, &k))) break;
        if ((rc = hashable(d, k, "dict key"))) break;
        if ((rc = decode(d, json_array_get(p, 1), depth + 1, &val))) break;
        if (ckpt_value_dict_set(d->a, v, k, val)) rc = nomem(d);
    }
    if (!rc && state) {
        rc = decode(d, state, depth + 1, &v->u.dict.state);
        if (!rc && v->u.dict.state->kind != CKPT_KIND_DICT)
            rc = bad(d, "a dict's \"state\" must be a dict");
    }
    if (!rc) d->open[id] = 0;
    *out = v;
    return rc;
}

/* Row-major strides as torch computes them (a zero dimension counts as 1).
 * Only reached for shapes ckpt_tensor_new accepted, whose products fit. */
static void contiguous_strides(const uint64_t *shape, uint32_t ndim, uint64_t *stride) {
    uint64_t s = 1;
    for (uint32_t i = ndim; i-- > 0;) {
        stride[i] = s;
        s *= shape[i] ? shape[i] : 1;
    }
}

/* Copies the stored tensor's elements to where view t sits in its storage
 * (the inverse of a gather), read through the tensor reader (pread, not
 * the mapping) a window at a time. */
#define SCATTER_WINDOW ((size_t)4 << 20)

static int scatter(const ckpt_tensor *t, const ckpt_tensor *stored) {
    unsigned esz = ckpt_dtype_size(t->dtype);
    uint8_t *dst = (uint8_t *)t->storage->data;
    uint64_t idx[CKPT_MAX_NDIM] = {0}, pos = t->storage_offset;
    ckpt_tensor_reader r;
    int rc = ckpt_tensor_reader_init(&r, stored);
    uint8_t *buf = rc ? NULL : ckpt_malloc(SCATTER_WINDOW);
    if (rc == 0 && !buf) rc = ckpt_err_nomem();
    size_t got = 0;
    while (rc == 0 &&
           (rc = ckpt_tensor_reader_next(&r, buf, SCATTER_WINDOW - SCATTER_WINDOW % esz, &got)) ==
               0 &&
           got) {
        for (size_t n = 0; n + esz <= got; n += esz) {
            memcpy(dst + pos * esz, buf + n, esz);
            for (uint32_t i = t->ndim; i-- > 0;) {
                if (++idx[i] < t->shape[i]) {
                    pos += t->stride[i];
                    break;
                }
                pos -= (t->shape[i] - 1) * t->stride[i];
                idx[i] = 0;
            }
        }
    }
    ckpt_free(buf);
    ckpt_tensor_reader_free(&r);
    return rc;
}

/* Storage `g` of "storages": the stored tensor that covers it whole, or a
 * zeroed buffer the views are scattered into. */
static int group_storage(decoder *d, uint64_t g, ckpt_storage **out) {
    size_t count = json_array_size(d->storages);
    if (g >= count) return bad(d, "storage %" PRIu64 " does not exist", g);
    if (!d->groups) {
        d->groups = ckpt_arena_array(d->a, count, sizeof *d->groups);
        d->backed = ckpt_arena_array(d->a, count, 1);
        if (!d->groups || !d->backed) return nomem(d);
    }
    if (d->groups[g]) {
        *out = d->groups[g];
        return 0;
    }
    const json_t *s = json_array_get(d->storages, (size_t)g);
    uint64_t nbytes;
    if (!json_is_object(s) || json_u64(json_object_get(s, "nbytes"), &nbytes))
        return bad(d, "storage %" PRIu64 " needs a non-negative \"nbytes\"", g);
    ckpt_storage *st = ckpt_arena_alloc(d->a, sizeof *st);
    if (!st) return nomem(d);
    /* ids past the file's own: views of one group share it, and only them */
    *st = (ckpt_storage){.dtype = CKPT_DT_U8,
                         .nbytes = nbytes,
                         .key = "",
                         .member = "",
                         .file_offset = CKPT_NO_OFFSET,
                         .id = d->f->nstorages + g};
    const json_t *full = json_object_get(s, "data");
    if (full) {
        const ckpt_tensor *t =
            json_is_string(full) ? ckpt_file_find_tensor(d->f, json_string_value(full)) : NULL;
        const void *p;
        size_t n;
        if (!t || ckpt_tensor_data(t, &p, &n) || n != nbytes)
            return bad(d,
                       "storage %" PRIu64 ": \"data\" must name a stored tensor of "
                       "%" PRIu64 " bytes",
                       g, nbytes);
        st->data = p;
        st->source = t->storage->source;
        st->member = ckpt_tensor_member(t);
        st->file_offset = ckpt_tensor_file_offset(t);
        if (t->storage_offset == 0 && t->storage->nbytes == nbytes) { /* its sums too */
            st->crc32 = t->storage->crc32;
            st->has_crc32 = t->storage->has_crc32;
            st->xxh3 = t->storage->xxh3;
            st->has_xxh3 = t->storage->has_xxh3;
        }
        d->backed[g] = 1;
    } else {
        if (nbytes > d->f->opts.limits.max_inflate_bytes || nbytes > SIZE_MAX)
            return ckpt_err(CKPT_E_LIMIT, d->f->path, CKPT_META_STRUCTURE, CKPT_NO_OFFSET,
                            "%s: storage %" PRIu64 " of %" PRIu64 " bytes exceeds "
                            "max_inflate_bytes",
                            CKPT_META_STRUCTURE, g, nbytes);
        st->data = ckpt_arena_alloc(d->a, nbytes ? (size_t)nbytes : 1); /* zeroed */
        if (!st->data) return nomem(d);
    }
    d->groups[g] = st;
    *out = st;
    return 0;
}

/* Complex dtypes stored as their real components (the only overrides the
 * writer makes besides F4_X2, stored as F4). */
static int override_ok(ckpt_dtype want, ckpt_dtype stored) {
    return (want == CKPT_DT_C128 && stored == CKPT_DT_F64) ||
           (want == CKPT_DT_C32 && stored == CKPT_DT_F16);
}

static int decode_tensor(decoder *d, const json_t *j, ckpt_value **out) {
    const json_t *name = json_object_get(j, "tensor");
    const ckpt_tensor *data =
        json_is_string(name) ? ckpt_file_find_tensor(d->f, json_string_value(name)) : NULL;
    if (!data)
        return bad(d, "\"tensor\" must name a stored tensor, got \"%.200s\"",
                   json_is_string(name) ? json_string_value(name) : "(not a string)");
    const void *bytes;
    size_t nbytes;
    if (ckpt_tensor_data(data, &bytes, &nbytes))
        return bad(d, "stored tensor \"%s\" is not contiguous", ckpt_tensor_name(data));
    ckpt_dtype dt = data->dtype;
    uint32_t ndim = data->ndim;
    uint64_t shape[CKPT_MAX_NDIM];
    memcpy(shape, data->shape, ndim * sizeof *shape);
    const json_t *jd = json_object_get(j, "dtype");
    if (jd && dt == CKPT_DT_F4 && json_is_string(jd) &&
        ckpt_dtype_from_name(json_string_value(jd)) == CKPT_DT_F4_X2) {
        if (ndim == 0 || shape[ndim - 1] % 2)
            return bad(d,
                       "tensor \"%s\": dtype F4_X2 needs an F4 shape whose last "
                       "dimension is even",
                       ckpt_tensor_name(data));
        dt = CKPT_DT_F4_X2; /* two F4 values a byte: the last dimension halves */
        shape[ndim - 1] /= 2;
    } else if (jd) {
        ckpt_dtype want =
            json_is_string(jd) ? ckpt_dtype_from_name(json_string_value(jd)) : CKPT_DT_UNKNOWN;
        if (!override_ok(want, dt) || ndim == 0 || data->shape[ndim - 1] != 2)
            return bad(d,
                       "tensor \"%s\": dtype %s cannot be read from %s with shape "
                       "[..., 2]",
                       ckpt_tensor_name(data), json_is_string(jd) ? json_string_value(jd) : "?",
                       ckpt_dtype_name(dt));
        dt = want;
        ndim--;
    }
    const json_t *rg = json_object_get(j, "requires_grad"),
                 *param = json_object_get(j, "parameter"), *np = json_object_get(j, "numpy");
    if (rg && !json_is_boolean(rg)) return bad(d, "\"requires_grad\" must be a boolean");
    if (param && !json_is_boolean(param)) return bad(d, "\"parameter\" must be a boolean");
    if (np && (!json_is_boolean(np) || d->version < 2))
        return bad(d, "\"numpy\" must be a boolean, from version 2");
    if (json_is_true(np) && !ckpt_dtype_numpy_code(dt))
        return bad(d, "tensor \"%s\": numpy has no dtype %s", ckpt_tensor_name(data),
                   ckpt_dtype_name(dt));
    uint64_t stride[CKPT_MAX_NDIM], offset = 0;
    ckpt_storage *st = data->storage;
    const json_t *jg = json_object_get(j, "storage");
    uint64_t g = 0;
    if (jg) {
        const json_t *js = json_object_get(j, "stride");
        if (json_u64(jg, &g) || json_u64(json_object_get(j, "offset"), &offset) ||
            !json_is_array(js) || json_array_size(js) != ndim)
            return bad(d,
                       "tensor \"%s\": \"storage\" needs an index, an \"offset\" "
                       "and %u strides",
                       ckpt_tensor_name(data), ndim);
        for (uint32_t i = 0; i < ndim; i++)
            if (json_u64(json_array_get(js, i), &stride[i]))
                return bad(d, "tensor \"%s\": strides must be non-negative integers",
                           ckpt_tensor_name(data));
        int rc = group_storage(d, g, &st);
        if (rc) return rc;
    } else {
        contiguous_strides(shape, ndim, stride);
        offset = data->storage_offset;
    }
    ckpt_value *v;
    int rc = ckpt_tensor_new(&v, d->a, st, dt, ndim, shape, stride, offset, d->f->path,
                             CKPT_META_STRUCTURE, CKPT_NO_OFFSET);
    if (rc) return rc;
    if (v->u.tensor->nbytes != nbytes)
        return bad(d,
                   "tensor \"%s\": the view holds %" PRIu64 " bytes, the stored "
                   "tensor %zu",
                   ckpt_tensor_name(data), v->u.tensor->nbytes, nbytes);
    if (jg && !d->backed[g]) {
        if (ckpt_dtype_size(dt) == 0)
            return bad(d, "tensor \"%s\": views of sub-byte dtypes cannot be rebuilt",
                       ckpt_tensor_name(data));
        if ((rc = scatter(v->u.tensor, data))) return rc;
    }
    v->u.tensor->requires_grad = json_is_true(rg);
    v->u.tensor->is_parameter = json_is_true(param);
    v->u.tensor->is_numpy = json_is_true(np);
    *out = v;
    return register_node(d, v, 0);
}

/* Whether v is a value of the numpy scalar type dt: a bool for BOOL, a
 * float for F16/F32/F64, an int in range for the integer types (the
 * pickle reader makes no other; complex scalars stay objects). */
static int np_scalar_fits(const ckpt_value *v, ckpt_dtype dt) {
    switch (dt) {
    case CKPT_DT_BOOL: return v->kind == CKPT_KIND_BOOL;
    case CKPT_DT_F16:
    case CKPT_DT_F32:
    case CKPT_DT_F64: return v->kind == CKPT_KIND_FLOAT;
    case CKPT_DT_U64: /* up to 2^64 - 1: past int64 only as decimal text */
        return v->kind == CKPT_KIND_INT &&
               (v->u.i.decimal ? v->u.i.decimal[0] != '-' && strlen(v->u.i.decimal) <= 20 &&
                                     (strlen(v->u.i.decimal) < 20 ||
                                      strcmp(v->u.i.decimal, "18446744073709551615") <= 0)
                               : v->u.i.v >= 0);
    case CKPT_DT_I64: return v->kind == CKPT_KIND_INT && !v->u.i.decimal;
    case CKPT_DT_U8:
    case CKPT_DT_U16:
    case CKPT_DT_U32:
    case CKPT_DT_I8:
    case CKPT_DT_I16:
    case CKPT_DT_I32: {
        unsigned bits = ckpt_dtype_bits(dt);
        int sign = dt == CKPT_DT_I8 || dt == CKPT_DT_I16 || dt == CKPT_DT_I32;
        int64_t lo = sign ? -((int64_t)1 << (bits - 1)) : 0;
        int64_t hi = sign ? ((int64_t)1 << (bits - 1)) - 1 : ((int64_t)1 << bits) - 1;
        return v->kind == CKPT_KIND_INT && !v->u.i.decimal && v->u.i.v >= lo && v->u.i.v <= hi;
    }
    default: return 0;
    }
}

/* {"numpy": dtype name, "value": V} (version 2): a numpy scalar, V a
 * bool, int or float its dtype holds. */
static int decode_numpy(decoder *d, const json_t *j, uint32_t depth, ckpt_value **out) {
    const json_t *name = json_object_get(j, "numpy"), *val = json_object_get(j, "value");
    ckpt_dtype dt =
        json_is_string(name) ? ckpt_dtype_from_name(json_string_value(name)) : CKPT_DT_UNKNOWN;
    if (d->version < 2 || json_object_size(j) != 2 || !val || !ckpt_dtype_numpy_code(dt))
        return bad(d, "a numpy scalar is {\"numpy\": a numpy dtype, \"value\": V}, "
                      "from version 2");
    ckpt_value *v;
    int rc = decode(d, val, depth + 1, &v);
    if (rc) return rc;
    if (!np_scalar_fits(v, dt))
        return bad(d, "numpy %s scalar: the value is not one of its values", ckpt_dtype_name(dt));
    v->np_dtype = (uint8_t)dt;
    *out = v;
    return 0;
}

static int decode(decoder *d, const json_t *j, uint32_t depth, ckpt_value **out) {
    ckpt_value *v = NULL;
    if (depth > d->f->opts.limits.max_depth)
        return ckpt_err(CKPT_E_LIMIT, d->f->path, CKPT_META_STRUCTURE, CKPT_NO_OFFSET,
                        "%s: nested deeper than %u", CKPT_META_STRUCTURE,
                        d->f->opts.limits.max_depth);
    switch (json_typeof(j)) {
    case JSON_NULL: v = ckpt_value_new(d->a, CKPT_KIND_NONE); break;
    case JSON_TRUE: v = ckpt_value_new_bool(d->a, 1); break;
    case JSON_FALSE: v = ckpt_value_new_bool(d->a, 0); break;
    case JSON_INTEGER: v = ckpt_value_new_int(d->a, json_integer_value(j)); break;
    case JSON_REAL: v = ckpt_value_new_float(d->a, json_real_value(j)); break;
    case JSON_STRING:
        v = ckpt_value_new_str(d->a, CKPT_KIND_STR, json_string_value(j), json_string_length(j));
        break;
    case JSON_ARRAY: return bad(d, "unexpected array (containers are tagged objects)");
    case JSON_OBJECT: {
        const json_t *x;
        if (json_object_get(j, "tensor")) return decode_tensor(d, j, out);
        if (json_object_get(j, "dict")) return decode_dict(d, j, depth, out);
        if (json_object_get(j, "numpy")) return decode_numpy(d, j, depth, out);
        if (json_object_size(j) != 1) return bad(d, "expected an object with one tag");
        if ((x = json_object_get(j, "list"))) return decode_seq(d, x, CKPT_KIND_LIST, depth, out);
        if ((x = json_object_get(j, "tuple"))) return decode_seq(d, x, CKPT_KIND_TUPLE, depth, out);
        if ((x = json_object_get(j, "set"))) return decode_seq(d, x, CKPT_KIND_SET, depth, out);
        if ((x = json_object_get(j, "frozenset")) && d->version >= 2) {
            int rc = decode_seq(d, x, CKPT_KIND_SET, depth, out);
            if (!rc) (*out)->alt = 1;
            return rc;
        }
        if ((x = json_object_get(j, "size")) && d->version >= 2) {
            int rc = decode_seq(d, x, CKPT_KIND_TUPLE, depth, out);
            for (size_t i = 0; !rc && i < (*out)->u.seq.n; i++)
                if ((*out)->u.seq.items[i]->kind != CKPT_KIND_INT ||
                    (*out)->u.seq.items[i]->u.i.decimal)
                    return bad(d, "\"size\" (a torch.Size) holds ints of 64 bits only");
            if (!rc) (*out)->alt = 1;
            return rc;
        }
        if ((x = json_object_get(j, "device")) && d->version >= 2) {
            if (!json_is_string(x)) return bad(d, "\"device\" must be a string");
            const char *type;
            int index, rc;
            char msg[160];
            if ((rc = ckpt_device_parse(json_string_value(x), json_string_length(x), &type, &index,
                                        msg, sizeof msg)))
                return bad(d, "\"device\": %s", msg);
            char *text = index < 0 ? ckpt_arena_printf(d->a, "%s", type)
                                   : ckpt_arena_printf(d->a, "%s:%d", type, index);
            v = text ? ckpt_value_new_str(d->a, CKPT_KIND_STR, text, strlen(text)) : NULL;
            if (v) v->alt = 1;
            break;
        }
        if ((x = json_object_get(j, "ref"))) {
            uint64_t n;
            if (json_u64(x, &n) || n >= d->n)
                return bad(d, "\"ref\" %" PRId64 " names no earlier node",
                           json_is_integer(x) ? (int64_t)json_integer_value(x) : -1);
            if (d->open[n])
                return bad(d,
                           "\"ref\" %" PRIu64 " names a container from inside it "
                           "(a cycle)",
                           n);
            *out = d->nodes[n];
            return 0;
        }
        if ((x = json_object_get(j, "int"))) {
            if (!json_is_string(x)) return bad(d, "\"int\" must be a decimal string");
            return decode_bigint(d, json_string_value(x), out);
        }
        if ((x = json_object_get(j, "float"))) {
            const char *s = json_is_string(x) ? json_string_value(x) : "";
            uint64_t bits = 0;
            size_t i = 0;
            for (; s[i] && hexval(s[i]) >= 0; i++) bits = bits << 4 | (uint64_t)hexval(s[i]);
            if (i != 16 || s[i]) return bad(d, "\"float\" must be 16 hex digits");
            double f;
            memcpy(&f, &bits, sizeof f);
            v = ckpt_value_new_float(d->a, f);
            break;
        }
        int bytearray = (x = json_object_get(j, "bytearray")) && d->version >= 2;
        if (bytearray || (x = json_object_get(j, "bytes"))) {
            const char *s = json_is_string(x) ? json_string_value(x) : NULL;
            size_t n = s ? strlen(s) : 1;
            if (n % 2) return bad(d, "\"bytes\" must be an even number of hex digits");
            v = ckpt_value_new(d->a, CKPT_KIND_BYTES);
            char *p = ckpt_arena_alloc(d->a, n / 2 + 1);
            if (!v || !p) return nomem(d);
            for (size_t i = 0; i < n / 2; i++) {
                int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
                if (hi < 0 || lo < 0) return bad(d, "\"bytes\" must be lowercase hex");
                p[i] = (char)(hi << 4 | lo);
            }
            v->u.s.p = p;
            v->u.s.len = n / 2;
            v->alt = (uint8_t)bytearray;
            if (bytearray && d->version >= 3) return register_node(d, *out = v, 0);
            break;
        }
        if ((x = json_object_get(j, "dtype"))) {
            const char *s = json_is_string(x) ? json_string_value(x) : "";
            if (ckpt_dtype_from_torch_name(s) == CKPT_DT_UNKNOWN)
                return bad(d, "\"dtype\" \"%.40s\" is not a torch dtype", s);
            v = ckpt_value_new_global(d->a, "torch", s);
            break;
        }
        return bad(d, "unknown tag \"%.40s\"", json_object_iter_key(json_object_iter((json_t *)j)));
    }
    }
    if (!v) return nomem(d);
    *out = v;
    return 0;
}

static const char *find_meta(const ckpt_file *f, const char *key) {
    for (size_t i = 0; i < f->nmeta; i++)
        if (strcmp(f->meta_keys[i], key) == 0) return f->meta_vals[i];
    return NULL;
}

int ckpt_structure_present(const ckpt_file *f) {
    return f->format == CKPT_FORMAT_SAFETENSORS && find_meta(f, CKPT_META_STRUCTURE) != NULL;
}

int ckpt_structure_decode(const ckpt_value **out, const ckpt_file *f, ckpt_arena *a) {
    return ckpt_structure_decode_storages(out, NULL, NULL, f, a);
}

int ckpt_structure_decode_storages(const ckpt_value **out, ckpt_storage ***groups, size_t *ngroups,
                                   const ckpt_file *f, ckpt_arena *a) {
    if (groups) *groups = NULL;
    if (ngroups) *ngroups = 0;
    int rc = ckpt_file_tree(out, f);
    if (rc) return rc;
    const char *text = ckpt_structure_present(f) ? find_meta(f, CKPT_META_STRUCTURE) : NULL;
    if (!text) return 0;
    decoder d = {.f = f, .a = a};
    json_error_t err;
    json_t *doc = json_loads(text, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &err);
    if (!doc) return bad(&d, "not valid JSON: %s", err.text);
    const json_t *ver = json_object_get(doc, "version"), *root = json_object_get(doc, "root");
    d.storages = json_object_get(doc, "storages");
    if (!json_is_integer(ver) || json_integer_value(ver) < 1 || json_integer_value(ver) > 3 ||
        !root)
        rc = bad(&d, "expected {\"version\": 1, 2 or 3, \"root\": ...}");
    else if (d.storages && !json_is_array(d.storages))
        rc = bad(&d, "\"storages\" must be an array");
    else {
        ckpt_value *v;
        d.version = (int)json_integer_value(ver);
        rc = decode(&d, root, 0, &v);
        if (!rc) *out = v;
        if (!rc && groups && d.groups) {
            *groups = d.groups;
            *ngroups = json_array_size(d.storages);
        }
    }
    json_decref(doc);
    return rc;
}

int ckpt_file_logical_root(const ckpt_value **out, const ckpt_file *cf) {
    if (!out || !cf)
        return ckpt_err(CKPT_E_INVALID_ARG, "", "", CKPT_NO_OFFSET, "out or f is NULL");
    *out = NULL;
    ckpt_file *f = (ckpt_file *)cf; /* the cache: a first-call write, under once.h's lock */
    int rc = 0;
    if (!CKPT_ONCE_LOAD(&f->logical_done)) {
        ckpt_once_lock();
        if (!f->logical_done) {
            const ckpt_value *root = NULL;
            rc = ckpt_structure_decode_storages(&root, &f->logical_storages, &f->nlogical_storages,
                                                f, &f->arena);
            if (rc == 0) { /* not cached on failure: the error is recorded again */
                f->logical = root;
                CKPT_ONCE_STORE(&f->logical_done, 1);
            }
        }
        ckpt_once_unlock();
    }
    *out = rc ? NULL : f->logical;
    return rc;
}
