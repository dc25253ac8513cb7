/* convert.c - ckpt_convert: open any checkpoint, recover its full tree
 * (for safetensors written by ckpt, from "ckpt.structure"), keep what
 * --select asks for, merge the metadata and write the other format.
 *
 * The structure decoder reads text from the file, so it is as strict as
 * the other readers: every tag, type, index and size is checked, tensor
 * views are bounds-checked against their storage by ckpt_tensor_new, and
 * a storage rebuilt from views may not exceed limits.max_inflate_bytes. */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "model/dtype.h"
#include "base/error.h"
#include "model/file.h"
#include "format/write.h"

/* ------------------------------------------------------------ structure */

typedef struct decoder {
    const ckpt_file *f;
    ckpt_arena *a;
    ckpt_value **nodes;       /* containers and tensors in document order */
    size_t n, cap;
    int version;              /* 1, or 2: dicts may have "class" and "state" */
    const json_t *storages;   /* "storages" array, or NULL */
    ckpt_storage **groups;    /* rebuilt storages, by index */
    unsigned char *backed;    /* 1: the group's bytes are a stored tensor */
} decoder;

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static int bad(const decoder *d, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ckpt_err(CKPT_E_FORMAT, d->f->path, CKPT_META_STRUCTURE, CKPT_NO_OFFSET,
                    "%s: %s", CKPT_META_STRUCTURE, msg);
}

static int nomem(const decoder *d) {
    return ckpt_err(CKPT_E_NOMEM, d->f->path, "", CKPT_NO_OFFSET, "out of memory");
}

static int json_u64(const json_t *v, uint64_t *out) {
    if (!json_is_integer(v) || json_integer_value(v) < 0) return -1;
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

static int register_node(decoder *d, ckpt_value *v) {
    if (ckpt_arena_grow(d->a, (void **)&d->nodes, &d->cap, d->n + 1, sizeof *d->nodes))
        return nomem(d);
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
        iv->u.i.decimal = neg ? ckpt_arena_printf(d->a, "-%s", s + skip)
                              : ckpt_arena_strdup(d->a, s + skip);
        if (!iv->u.i.decimal) return nomem(d);
    }
    *out = iv;
    return 0;
}

static int decode(decoder *d, const json_t *j, uint32_t depth, ckpt_value **out);

static int decode_seq(decoder *d, const json_t *items, int kind, uint32_t depth,
                      ckpt_value **out) {
    if (!json_is_array(items)) return bad(d, "a %s must hold an array", ckpt_kind_name(kind));
    ckpt_value *v = ckpt_value_new(d->a, kind);
    if (!v) return nomem(d);
    int rc = register_node(d, v);
    for (size_t i = 0; !rc && i < json_array_size(items); i++) {
        ckpt_value *item;
        if ((rc = decode(d, json_array_get(items, i), depth + 1, &item))) break;
        if (ckpt_value_append(d->a, v, item)) rc = nomem(d);
    }
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
            return bad(d, "\"class\" \"%.60s\" is not collections.OrderedDict or "
                       "collections.Counter", name);
    } else if (state) {
        return bad(d, "a plain dict has no \"state\" (attributes need a \"class\")");
    }
    int rc = register_node(d, v);
    for (size_t i = 0; !rc && i < json_array_size(pairs); i++) {
        const json_t *p = json_array_get(pairs, i);
        ckpt_value *k, *val;
        if (!json_is_array(p) || json_array_size(p) != 2)
            return bad(d, "dict item %zu is not a [key, value] pair", i);
        if ((rc = decode(d, json_array_get(p, 0), depth + 1, &k))) break;
        if ((rc = decode(d, json_array_get(p, 1), depth + 1, &val))) break;
        if (ckpt_value_dict_set(d->a, v, k, val)) rc = nomem(d);
    }
    if (!rc && state) {
        rc = decode(d, state, depth + 1, &v->u.dict.state);
        if (!rc && v->u.dict.state->kind != CKPT_KIND_DICT)
            rc = bad(d, "a dict's \"state\" must be a dict");
    }
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
    while (rc == 0 && (rc = ckpt_tensor_reader_next(&r, buf, SCATTER_WINDOW - SCATTER_WINDOW % esz,
                                                    &got)) == 0 && got) {
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
    *st = (ckpt_storage){.dtype = CKPT_DT_U8, .nbytes = nbytes, .key = "", .member = "",
                         .file_offset = CKPT_NO_OFFSET};
    const json_t *full = json_object_get(s, "data");
    if (full) {
        const ckpt_tensor *t = json_is_string(full)
                                   ? ckpt_file_find_tensor(d->f, json_string_value(full))
                                   : NULL;
        const void *p;
        size_t n;
        if (!t || ckpt_tensor_data(t, &p, &n) || n != nbytes)
            return bad(d, "storage %" PRIu64 ": \"data\" must name a stored tensor of "
                       "%" PRIu64 " bytes", g, nbytes);
        st->data = p;
        st->source = t->storage->source;
        st->member = ckpt_tensor_member(t);
        st->file_offset = ckpt_tensor_file_offset(t);
        d->backed[g] = 1;
    } else {
        if (nbytes > d->f->opts.limits.max_inflate_bytes || nbytes > SIZE_MAX)
            return ckpt_err(CKPT_E_LIMIT, d->f->path, CKPT_META_STRUCTURE, CKPT_NO_OFFSET,
                            "%s: storage %" PRIu64 " of %" PRIu64 " bytes exceeds "
                            "max_inflate_bytes", CKPT_META_STRUCTURE, g, nbytes);
        st->data = ckpt_arena_alloc(d->a, nbytes ? (size_t)nbytes : 1); /* zeroed */
        if (!st->data) return nomem(d);
    }
    d->groups[g] = st;
    *out = st;
    return 0;
}

/* Complex dtypes stored as their real components (the only overrides the
 * writer makes). */
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
    const json_t *jd = json_object_get(j, "dtype");
    if (jd) {
        ckpt_dtype want = json_is_string(jd) ? ckpt_dtype_from_name(json_string_value(jd))
                                             : CKPT_DT_UNKNOWN;
        if (!override_ok(want, dt) || ndim == 0 || data->shape[ndim - 1] != 2)
            return bad(d, "tensor \"%s\": dtype %s cannot be read from %s with shape "
                       "[..., 2]", ckpt_tensor_name(data),
                       json_is_string(jd) ? json_string_value(jd) : "?",
                       ckpt_dtype_name(dt));
        dt = want;
        ndim--;
    }
    const json_t *rg = json_object_get(j, "requires_grad"), *param = json_object_get(j, "parameter");
    if (rg && !json_is_boolean(rg)) return bad(d, "\"requires_grad\" must be a boolean");
    if (param && !json_is_boolean(param)) return bad(d, "\"parameter\" must be a boolean");
    uint64_t stride[CKPT_MAX_NDIM], offset = 0;
    ckpt_storage *st = data->storage;
    const json_t *jg = json_object_get(j, "storage");
    uint64_t g = 0;
    if (jg) {
        const json_t *js = json_object_get(j, "stride");
        if (json_u64(jg, &g) || json_u64(json_object_get(j, "offset"), &offset) ||
            !json_is_array(js) || json_array_size(js) != ndim)
            return bad(d, "tensor \"%s\": \"storage\" needs an index, an \"offset\" "
                       "and %u strides", ckpt_tensor_name(data), ndim);
        for (uint32_t i = 0; i < ndim; i++)
            if (json_u64(json_array_get(js, i), &stride[i]))
                return bad(d, "tensor \"%s\": strides must be non-negative integers",
                           ckpt_tensor_name(data));
        int rc = group_storage(d, g, &st);
        if (rc) return rc;
    } else {
        contiguous_strides(data->shape, ndim, stride);
        offset = data->storage_offset;
    }
    ckpt_value *v;
    int rc = ckpt_tensor_new(&v, d->a, st, dt, ndim, data->shape, stride, offset,
                             d->f->path, CKPT_META_STRUCTURE, CKPT_NO_OFFSET);
    if (rc) return rc;
    if (v->u.tensor->nbytes != nbytes)
        return bad(d, "tensor \"%s\": the view holds %" PRIu64 " bytes, the stored "
                   "tensor %zu", ckpt_tensor_name(data), v->u.tensor->nbytes, nbytes);
    if (jg && !d->backed[g]) {
        if (ckpt_dtype_size(dt) == 0)
            return bad(d, "tensor \"%s\": views of sub-byte dtypes cannot be rebuilt",
                       ckpt_tensor_name(data));
        if ((rc = scatter(v->u.tensor, data))) return rc;
    }
    v->u.tensor->requires_grad = json_is_true(rg);
    v->u.tensor->is_parameter = json_is_true(param);
    *out = v;
    return register_node(d, v);
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
        v = ckpt_value_new_str(d->a, CKPT_KIND_STR, json_string_value(j),
                               json_string_length(j));
        break;
    case JSON_ARRAY: return bad(d, "unexpected array (containers are tagged objects)");
    case JSON_OBJECT: {
        const json_t *x;
        if (json_object_get(j, "tensor")) return decode_tensor(d, j, out);
        if (json_object_get(j, "dict")) return decode_dict(d, j, depth, out);
        if (json_object_size(j) != 1) return bad(d, "expected an object with one tag");
        if ((x = json_object_get(j, "list"))) return decode_seq(d, x, CKPT_KIND_LIST, depth, out);
        if ((x = json_object_get(j, "tuple"))) return decode_seq(d, x, CKPT_KIND_TUPLE, depth, out);
        if ((x = json_object_get(j, "set"))) return decode_seq(d, x, CKPT_KIND_SET, depth, out);
        if ((x = json_object_get(j, "ref"))) {
            uint64_t n;
            if (json_u64(x, &n) || n >= d->n)
                return bad(d, "\"ref\" %" PRId64 " names no earlier node",
                           json_is_integer(x) ? (int64_t)json_integer_value(x) : -1);
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
        if ((x = json_object_get(j, "bytes"))) {
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

int ckpt_write_logical_root(const ckpt_value **out, const ckpt_file *f, ckpt_arena *a) {
    *out = f->root;
    const char *text = f->format == CKPT_FORMAT_SAFETENSORS ? find_meta(f, CKPT_META_STRUCTURE)
                                                           : NULL;
    if (!text) return 0;
    decoder d = {.f = f, .a = a};
    json_error_t err;
    json_t *doc = json_loads(text, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &err);
    if (!doc) return bad(&d, "not valid JSON: %s", err.text);
    int rc;
    const json_t *ver = json_object_get(doc, "version"), *root = json_object_get(doc, "root");
    d.storages = json_object_get(doc, "storages");
    if (!json_is_integer(ver) || json_integer_value(ver) < 1 || json_integer_value(ver) > 2 ||
        !root)
        rc = bad(&d, "expected {\"version\": 1 or 2, \"root\": ...}");
    else if (d.storages && !json_is_array(d.storages))
        rc = bad(&d, "\"storages\" must be an array");
    else {
        ckpt_value *v;
        d.version = (int)json_integer_value(ver);
        rc = decode(&d, root, 0, &v);
        if (!rc) *out = v;
    }
    json_decref(doc);
    return rc;
}

/* ------------------------------------------------------------ select */

typedef struct selector {
    const ckpt_convert_options *o;
    ckpt_arena *a;
    char *buf;
    size_t len, cap;
    uint32_t max_depth;
    int any;             /* something was selected */
} selector;

/* `name` (len bytes) is selected whole by prefix p. */
static int covers(const char *p, const char *name, size_t len) {
    size_t n = strlen(p);
    if (n && p[n - 1] == '.') return len >= n && memcmp(name, p, n) == 0;
    return len >= n && memcmp(name, p, n) == 0 && (len == n || name[n] == '.');
}

/* `name` lies on the way to prefix p. */
static int leads_to(const char *p, const char *name, size_t len) {
    return len == 0 || (strlen(p) > len && memcmp(p, name, len) == 0 && p[len] == '.');
}

static int sel_walk(selector *s, const ckpt_value *v, uint32_t depth, const ckpt_value **out);

static int sel_child(selector *s, const char *seg, size_t n, const ckpt_value *v, uint32_t depth,
                     const ckpt_value **out) {
    size_t saved = s->len, need = s->len + 1 + n + 1;
    if (need > s->cap) {
        char *nb = ckpt_realloc(s->buf, need * 2);
        if (!nb) return ckpt_err_nomem();
        s->buf = nb;
        s->cap = need * 2;
    }
    if (s->len) s->buf[s->len++] = '.';
    memcpy(s->buf + s->len, seg, n);
    s->len += n;
    int rc = sel_walk(s, v, depth + 1, out);
    s->len = saved;
    return rc;
}

/* *out: v when selected whole, a copy holding the selected parts, or NULL. */
static int sel_walk(selector *s, const ckpt_value *v, uint32_t depth, const ckpt_value **out) {
    int whole = 0, on_way = 0;
    for (size_t i = 0; i < s->o->nselect; i++) {
        whole |= s->len > 0 && covers(s->o->select[i], s->buf, s->len);
        on_way |= leads_to(s->o->select[i], s->buf, s->len);
    }
    *out = NULL;
    if (whole) {
        s->any = 1;
        *out = v;
        return 0;
    }
    int container = v->kind == CKPT_KIND_DICT || v->kind == CKPT_KIND_LIST ||
                    v->kind == CKPT_KIND_TUPLE || v->kind == CKPT_KIND_SET;
    if (!on_way || !container) return 0;
    if (depth > s->max_depth)
        return ckpt_err(CKPT_E_LIMIT, "", "", CKPT_NO_OFFSET,
                        "containers nested deeper than %u", s->max_depth);
    /* a state dict stays an OrderedDict with its _metadata */
    ckpt_value *copy = ckpt_value_new_like(s->a, v);
    if (!copy) return ckpt_err_nomem();
    size_t n = v->kind == CKPT_KIND_DICT ? v->u.dict.n : v->u.seq.n;
    for (size_t i = 0; i < n; i++) {
        char tmp[32];
        const char *seg;
        size_t seglen;
        const ckpt_value *child = v->kind == CKPT_KIND_DICT ? v->u.dict.vals[i] : v->u.seq.items[i];
        if (v->kind == CKPT_KIND_DICT) {
            const ckpt_value *k = v->u.dict.keys[i];
            /* selection is by flattened name: only str and int keys */
            if (k->kind == CKPT_KIND_STR) {
                seg = k->u.s.p;
                seglen = k->u.s.len;
            } else if (k->kind == CKPT_KIND_INT) {
                seg = ckpt_value_int_decimal(k);
                seglen = strlen(seg);
            } else {
                continue;
            }
        } else {
            seglen = (size_t)snprintf(tmp, sizeof tmp, "%zu", i);
            seg = tmp;
        }
        const ckpt_value *kept;
        int rc = sel_child(s, seg, seglen, child, depth, &kept);
        if (rc) return rc;
        if (!kept) continue;
        if (v->kind == CKPT_KIND_DICT
                ? ckpt_value_dict_set(s->a, copy, v->u.dict.keys[i], (ckpt_value *)kept)
                : ckpt_value_append(s->a, copy, (ckpt_value *)kept))
            return ckpt_err_nomem();
    }
    if (ckpt_value_len(copy) || depth == 0) *out = copy;
    return 0;
}

static int select_tree(const ckpt_value **root, const ckpt_convert_options *o, ckpt_arena *a,
                       uint32_t max_depth) {
    if (!o->nselect) return 0;
    selector s = {.o = o, .a = a, .max_depth = max_depth};
    for (size_t i = 0; i < o->nselect; i++)
        if (!o->select[i] || !o->select[i][0])
            return ckpt_err(CKPT_E_INVALID_ARG, "", "", CKPT_NO_OFFSET,
                            "select prefixes must be non-empty strings");
    const ckpt_value *out;
    int rc = sel_walk(&s, *root, 0, &out);
    ckpt_free(s.buf);
    if (rc) return rc;
    if (!s.any)
        return ckpt_err(CKPT_E_NOTFOUND, "", "", CKPT_NO_OFFSET,
                        "no tensor or value matches the selection \"%s\"%s", o->select[0],
                        o->nselect > 1 ? " (or the others)" : "");
    *root = out;
    return 0;
}

/* ------------------------------------------------------------ metadata */

typedef struct meta_list {
    const char **keys, **vals;
    size_t n, kcap, vcap;
} meta_list;

/* Sets k to v, replacing an earlier value of k (later sources win). */
static int meta_set(meta_list *m, ckpt_arena *a, const char *k, const char *v) {
    for (size_t i = 0; i < m->n; i++)
        if (strcmp(m->keys[i], k) == 0) {
            m->vals[i] = v;
            return 0;
        }
    if (ckpt_arena_grow(a, (void **)&m->keys, &m->kcap, m->n + 1, sizeof *m->keys) ||
        ckpt_arena_grow(a, (void **)&m->vals, &m->vcap, m->n + 1, sizeof *m->vals))
        return ckpt_err_nomem();
    m->keys[m->n] = k;
    m->vals[m->n++] = v;
    return 0;
}

static int merge_metadata(meta_list *m, const ckpt_file *f, const ckpt_convert_options *o,
                          ckpt_arena *a) {
    size_t plen = strlen(CKPT_META_PREFIX);
    int rc = 0;
    for (size_t i = 0; !rc && i < f->nmeta; i++)
        if (strncmp(f->meta_keys[i], CKPT_META_PREFIX, plen) != 0)
            rc = meta_set(m, a, f->meta_keys[i], f->meta_vals[i]);
    if (!rc && o->config_json) {
        json_error_t err;
        json_t *cfg = json_loads(o->config_json, JSON_REJECT_DUPLICATES, &err);
        if (!json_is_object(cfg)) {
            json_decref(cfg);
            return ckpt_err(CKPT_E_INVALID_ARG, "", "", CKPT_NO_OFFSET,
                            "config is not a JSON object%s%s", cfg ? "" : ": ",
                            cfg ? "" : err.text);
        }
        char *text = json_dumps(cfg, JSON_COMPACT);
        json_decref(cfg);
        const char *copy = text ? ckpt_arena_strdup(a, text) : NULL;
        free(text);
        rc = copy ? meta_set(m, a, "config", copy)
                  : ckpt_err_nomem();
    }
    for (size_t i = 0; !rc && i < o->write.nmeta; i++) {
        if (!o->write.meta_keys || !o->write.meta_values || !o->write.meta_keys[i] ||
            !o->write.meta_values[i])
            return ckpt_err(CKPT_E_INVALID_ARG, "", "", CKPT_NO_OFFSET,
                            "metadata entry %zu is NULL", i);
        rc = meta_set(m, a, o->write.meta_keys[i], o->write.meta_values[i]);
    }
    return rc;
}

/* ------------------------------------------------------------ convert */

static ckpt_format format_for(const char *path) {
    static const struct {
        const char *ext;
        ckpt_format format;
    } exts[] = {{".safetensors", CKPT_FORMAT_SAFETENSORS}, {".pt", CKPT_FORMAT_TORCH_ZIP},
                {".pth", CKPT_FORMAT_TORCH_ZIP},           {".bin", CKPT_FORMAT_TORCH_ZIP},
                {".ckpt", CKPT_FORMAT_TORCH_ZIP}};
    size_t n = strlen(path);
    for (size_t i = 0; i < sizeof exts / sizeof *exts; i++) {
        size_t e = strlen(exts[i].ext);
        if (n > e && strcasecmp(path + n - e, exts[i].ext) == 0) return exts[i].format;
    }
    return (ckpt_format)0;
}

/* Opens and verifies the written temporary file `tmp` like `ckpt verify`
 * would (with the limits the input was read with): convert never leaves
 * behind a file its own reader rejects. */
static int verify_output(const char *tmp, const char *out, const ckpt_open_options *open) {
    ckpt_file *f;
    int rc = ckpt_open(&f, tmp, open);
    if (rc == 0) rc = ckpt_verify(f, NULL);
    ckpt_close(f);
    if (rc == 0) return 0;
    /* copies: ckpt_err rewrites the record they point into */
    const ckpt_error *e = ckpt_error_last();
    char member[256], msg[512];
    snprintf(member, sizeof member, "%s", e->member);
    snprintf(msg, sizeof msg, "%s", e->message);
    return ckpt_err(rc, out, member, e->offset,
                    "the converted file does not read back, so it was not written: %s", msg);
}

/* ckpt_write_value, with the output verified before it replaces `out`. */
static int write_verified(const ckpt_value *root, const char *out, ckpt_format fmt,
                          const ckpt_write_options *w, const ckpt_open_options *open,
                          ckpt_write_stats *stats) {
    ckpt_atomic a;
    int rc = ckpt_atomic_begin(&a, out);
    if (rc) return rc;
    rc = ckpt_write_value_to(&a, root, fmt, w, stats);
    if (rc == 0) rc = verify_output(a.tmp, out, open);
    if (rc == 0) return ckpt_atomic_commit(&a, w->backup);
    ckpt_atomic_abort(&a);
    return rc;
}

int ckpt_convert(const char *in, const char *out, const ckpt_convert_options *opts,
                 ckpt_convert_report *report) {
    ckpt_convert_options defaults = CKPT_CONVERT_OPTIONS_INIT;
    const ckpt_convert_options *o = opts ? opts : &defaults;
    CKPT_CHECK_OPTIONS(opts, CKPT_CONVERT_OPTIONS_VERSION);
    if (report) *report = (ckpt_convert_report){0};
    if (!in || !out)
        return ckpt_err(CKPT_E_INVALID_ARG, "", "", CKPT_NO_OFFSET, "path is NULL");
    ckpt_format fmt = o->format ? o->format : format_for(out);
    if (fmt != CKPT_FORMAT_SAFETENSORS && fmt != CKPT_FORMAT_TORCH_ZIP)
        return ckpt_err(CKPT_E_INVALID_ARG, out, "", CKPT_NO_OFFSET,
                        "no output format: name the output *.safetensors or *.pt "
                        "(.pth, .bin, .ckpt), or give the format");
    if (o->nselect && !o->select)
        return ckpt_err(CKPT_E_INVALID_ARG, "", "", CKPT_NO_OFFSET, "select is NULL");
    ckpt_file *f;
    int rc = ckpt_open(&f, in, &o->open);
    if (rc) return rc;
    ckpt_arena a = {0};
    const ckpt_value *root;
    meta_list m = {0};
    ckpt_write_stats stats;
    rc = ckpt_write_logical_root(&root, f, &a);
    if (!rc && !root)
        rc = ckpt_err(CKPT_E_FORMAT, in, "", CKPT_NO_OFFSET, "the file holds no object");
    if (!rc) rc = select_tree(&root, o, &a, f->opts.limits.max_depth);
    if (!rc) rc = merge_metadata(&m, f, o, &a);
    if (!rc) {
        ckpt_write_options w = CKPT_WRITE_OPTIONS_INIT;
        w.meta_keys = m.keys;
        w.meta_values = m.vals;
        w.nmeta = m.n;
        w.backup = o->write.backup;
        rc = write_verified(root, out, fmt, &w, &o->open, &stats);
    }
    if (!rc && report) *report = (ckpt_convert_report){fmt, stats.tensors, stats.bytes};
    ckpt_arena_free(&a);
    ckpt_close(f);
    return rc;
}
