/* builders.c - the allowlist and the C data builders behind it (see
 * builders.h). A builder receives the argument tuple of a REDUCE/NEWOBJ
 * and returns a value of the checkpoint model; it never runs anything
 * from the pickle. Argument shapes Python would reject are CKPT_E_FORMAT;
 * shapes we do not model give the opaque object the machine would have
 * made, so no data is lost and nothing fails that Python would load. */
#include "format/pickle_builders.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "model/device.h"
#include "model/dtype.h"
#include "base/error.h"

typedef int (*builder_fn)(ckpt_value **out, const pk_build_ctx *c, const ckpt_value *callable,
                          ckpt_value *args);

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static int
fail(const pk_build_ctx *c, int code, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ckpt_err(code, c->file, c->member, c->offset, "%s", msg);
}

/* fail() blaming argument v: at the opcode that built it, when known. */
#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
static int
fail_at(const pk_build_ctx *c, const ckpt_value *v, int code, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    uint64_t at = ckpt_value_at(v, c->base);
    return ckpt_err(code, c->file, c->member, at != CKPT_NO_OFFSET ? at : c->offset, "%s", msg);
}

static int nomem(const pk_build_ctx *c) { return fail(c, CKPT_E_NOMEM, "out of memory"); }

/* Counts n items or bytes copied against the work limit (ops_limit). */
static int charge(const pk_build_ctx *c, uint64_t n) {
    uint64_t total;
    if (!c->ops) return 0;
    if (ckpt_add_overflow(*c->ops, n, &total) || total > c->ops_limit)
        return fail(c, CKPT_E_LIMIT,
                    "pickle work (opcodes and copies) exceeds %" PRIu64
                    " for a pickle of this size",
                    c->ops_limit);
    *c->ops = total;
    return 0;
}

/* The machine's rendering of a call it does not interpret. */
int ckpt_builders_opaque(ckpt_value **out, const pk_build_ctx *c, const char *name,
                         ckpt_value *args, ckpt_value *kwargs) {
    if (kwargs && kwargs->u.dict.n) {
        ckpt_value *all = ckpt_value_new(c->arena, CKPT_KIND_TUPLE);
        if (!all) return nomem(c);
        for (size_t i = 0; i < args->u.seq.n; i++)
            if (ckpt_value_append(c->arena, all, args->u.seq.items[i])) return nomem(c);
        if (ckpt_value_append(c->arena, all, kwargs)) return nomem(c);
        args = all;
    }
    *out = ckpt_value_new(c->arena, CKPT_KIND_OBJECT);
    if (!*out) return nomem(c);
    (*out)->u.obj.name = name;
    (*out)->u.obj.args = args;
    return 0;
}

static int opaque(ckpt_value **out, const pk_build_ctx *c, const ckpt_value *callable,
                  ckpt_value *args) {
    return ckpt_builders_opaque(out, c, callable->u.global.qualname, args, NULL);
}

static size_t nargs(const ckpt_value *args) { return args->u.seq.n; }
static ckpt_value *arg(const ckpt_value *args, size_t i) { return args->u.seq.items[i]; }

static int is_seq(const ckpt_value *v) {
    return v->kind == CKPT_KIND_LIST || v->kind == CKPT_KIND_TUPLE || v->kind == CKPT_KIND_SET;
}

/* By length: a str may hold NUL bytes, and in scan mode it is not
 * NUL-terminated (pickle.h). */
static int is_str(const ckpt_value *v, const char *s) {
    size_t n = strlen(s);
    return v->kind == CKPT_KIND_STR && v->u.s.len == n && !memcmp(v->u.s.p, s, n);
}

static int get_u64(const ckpt_value *v, uint64_t *out) {
    if (v->kind != CKPT_KIND_INT || v->u.i.decimal || v->u.i.v < 0) return -1;
    *out = (uint64_t)v->u.i.v;
    return 0;
}

/* bool or int, as a Python truth value */
static int get_flag(const ckpt_value *v, int *out) {
    if (v->kind == CKPT_KIND_BOOL)
        *out = v->u.b;
    else if (v->kind == CKPT_KIND_INT)
        *out = v->u.i.decimal || v->u.i.v;
    else
        return -1;
    return 0;
}

/* ---------------------------------------------------------------- containers */

/* The arguments of list, tuple, set, frozenset, torch.Size, dict,
 * OrderedDict and Counter that each refuses with TypeError: two or more,
 * or one that is no iterable (None, a bool, an int, a float; Counter takes
 * None as no argument). */
static int refused_args(const pk_build_ctx *c, const ckpt_value *callable, const ckpt_value *args) {
    if (nargs(args) > 1)
        return fail(c, CKPT_E_FORMAT,
                    "%s: expected at most 1 argument, got %zu (Python raises "
                    "TypeError)",
                    callable->u.global.qualname, nargs(args));
    const ckpt_value *x = nargs(args) ? arg(args, 0) : NULL;
    if (x && (x->kind == CKPT_KIND_BOOL || x->kind == CKPT_KIND_INT || x->kind == CKPT_KIND_FLOAT ||
              (x->kind == CKPT_KIND_NONE && strcmp(callable->u.global.name, "Counter"))))
        return fail_at(c, x, CKPT_E_FORMAT, "%s: a %s is not iterable (Python raises TypeError)",
                       callable->u.global.qualname, ckpt_value_kind_name(x->kind));
    return 0;
}

/* list(x), tuple(x), set(x), frozenset(x), torch.Size(x): the items of a
 * list, tuple or set (a dict gives its keys). */
static int seq_of(ckpt_value **out, const pk_build_ctx *c, const ckpt_value *callable,
                  ckpt_value *args, int kind) {
    int rc = refused_args(c, callable, args);
    if (rc) return rc;
    if (nargs(args) > 1 ||
        (nargs(args) == 1 && !is_seq(arg(args, 0)) && arg(args, 0)->kind != CKPT_KIND_DICT))
        return opaque(out, c, callable, args);
    ckpt_value *v = ckpt_value_new(c->arena, kind);
    if (!v) return nomem(c);
    if (nargs(args) == 1) {
        const ckpt_value *src = arg(args, 0);
        size_t n = src->kind == CKPT_KIND_DICT ? src->u.dict.n : src->u.seq.n;
        ckpt_value **items = src->kind == CKPT_KIND_DICT ? src->u.dict.keys : src->u.seq.items;
        rc = charge(c, n);
        if (rc) return rc;
        if (n) {
            v->u.seq.items = ckpt_arena_array(c->arena, n, sizeof *items);
            if (!v->u.seq.items) return nomem(c);
            memcpy(v->u.seq.items, items, n * sizeof *items);
            v->u.seq.n = v->u.seq.cap = n;
        }
    }
    *out = v;
    return 0;
}

static int b_list(ckpt_value **out, const pk_build_ctx *c, const ckpt_value *callable,
                  ckpt_value *args) {
    return seq_of(out, c, callable, args, CKPT_KIND_LIST);
}

static int b_tuple(ckpt_value **out, const pk_build_ctx *c, const ckpt_value *callable,
                   ckpt_value *args) {
    return seq_of(out, c, callable, args, CKPT_KIND_TUPLE);
}

/* torch.Size(x): a tuple of ints, kept as a torch.Size (torch.load gives
 * one back). torch.Size takes an int of 64 bits or a bool (as 0 or 1) and
 * refuses other items. */
static int b_size(ckpt_value **out, const pk_build_ctx *c, const ckpt_value *callable,
                  ckpt_value *args) {
    int rc = seq_of(out, c, callable, args, CKPT_KIND_TUPLE);
    if (rc || (*out)->kind != CKPT_KIND_TUPLE) return rc;
    for (size_t i = 0; i < (*out)->u.seq.n; i++) {
        ckpt_value **item = &(*out)->u.seq.items[i];
        if ((*item)->kind == CKPT_KIND_BOOL) {
            ckpt_value *v = ckpt_value_new(c->arena, CKPT_KIND_INT);
            if (!v) return nomem(c);
            v->u.i.v = (*item)->u.b;
            *item = v;
        } else if ((*item)->kind != CKPT_KIND_INT) {
            return fail_at(c, *item, CKPT_E_FORMAT, "torch.Size: item %zu is a %s, not an int", i,
                           ckpt_value_kind_name((*item)->kind));
        } else if ((*item)->u.i.decimal) {
            return fail_at(c, *item, CKPT_E_FORMAT,
                           "torch.Size: item %zu is an int beyond 64 bits (torch raises)", i);
        }
    }
    (*out)->alt = 1;
    return 0;
}

/* Python hashes dict keys and set items (ckpt_value_hashable). */
static int hash_check(const pk_build_ctx *c, const ckpt_value *k, const char *fn, const char *as) {
    char msg[160];
    int rc = ckpt_value_hashable(k, as, msg, sizeof msg);
    return rc ? fail_at(c, k, rc, "%s: %s", fn, msg) : 0;
}

static int b_set(ckpt_value **out, const pk_build_ctx *c, const ckpt_value *callable,
                 ckpt_value *args) {
    int rc = seq_of(out, c, callable, args, CKPT_KIND_SET);
    if (rc || (*out)->kind != CKPT_KIND_SET) return rc;
    for (size_t i = 0; i < (*out)->u.seq.n; i++)
        if ((rc = hash_check(c, (*out)->u.seq.items[i], callable->u.global.qualname, "item")))
            return rc;
    (*out)->alt = !strcmp(callable->u.global.name, "frozenset");
    return 0;
}

/* The dict class of the allowlist entry of callable (allow >= 2: only
 * allowlisted globals reach a builder), read from the table, not by
 * comparing names on every call. */
static int dict_class_of(const ckpt_value *callable);
/* the allowlist entries of the collections classes, by index */
enum { E_ORDERED_DICT, E_COUNTER };

/* dict(), dict(mapping), dict(pairs); OrderedDict and Counter likewise,
 * the class recorded so that writers rebuild it. */
static int b_dict(ckpt_value **out, const pk_build_ctx *c, const ckpt_value *callable,
                  ckpt_value *args) {
    int rc = refused_args(c, callable, args);
    if (rc) return rc;
    const ckpt_value *src = nargs(args) == 1 ? arg(args, 0) : NULL;
    if (src && src->kind == CKPT_KIND_NONE) src = NULL; /* Counter(None) */
    if (nargs(args) > 1 || (src && src->kind != CKPT_KIND_DICT && src->kind != CKPT_KIND_LIST &&
                            src->kind != CKPT_KIND_TUPLE))
        return opaque(out, c, callable, args);
    ckpt_value *d = ckpt_value_new(c->arena, CKPT_KIND_DICT);
    if (!d) return nomem(c);
    d->dict_class = (uint8_t)dict_class_of(callable);
    size_t n = src ? (src->kind == CKPT_KIND_DICT ? src->u.dict.n : src->u.seq.n) : 0;
    rc = charge(c, n);
    if (rc) return rc;
    for (size_t i = 0; i < n; i++) {
        ckpt_value *k, *v;
        if (src->kind == CKPT_KIND_DICT) {
            k = src->u.dict.keys[i];
            v = src->u.dict.vals[i];
        } else {
            const ckpt_value *pair = src->u.seq.items[i];
            if ((pair->kind != CKPT_KIND_TUPLE && pair->kind != CKPT_KIND_LIST) ||
                pair->u.seq.n != 2)
                return fail(c, CKPT_E_FORMAT,
                            "%s: expected (key, value) pairs, item %zu is not one",
                            callable->u.global.qualname, i);
            k = pair->u.seq.items[0];
            v = pair->u.seq.items[1];
            if ((rc = hash_check(c, k, callable->u.global.qualname, "key"))) return rc;
            char msg[256];
            if ((rc = ckpt_value_key_check(k, msg, sizeof msg)))
                return fail_at(c, k, rc, "%s: %s", callable->u.global.qualname, msg);
        }
        uint64_t work = 0; /* a key Python finds equal to an earlier one */
        size_t twin = ckpt_value_dict_twin(d, k, &work);
        if ((rc = charge(c, work))) return rc;
        if (twin != SIZE_MAX) {
            d->u.dict.vals[twin] = v;
            continue;
        }
        if (k->kind == CKPT_KIND_BOOL || k->kind == CKPT_KIND_FLOAT) d->alt |= 1;
        if (ckpt_value_dict_set(c->arena, d, k, v)) return nomem(c);
    }
    *out = d;
    return 0;
}

/* Counter(mapping) copies it, Counter(None) is empty; Counter(iterable)
 * would count, not modelled. */
static int b_counter(ckpt_value **out, const pk_build_ctx *c, const ckpt_value *callable,
                     ckpt_value *args) {
    int rc = refused_args(c, callable, args);
    if (rc) return rc;
    if (nargs(args) == 0 || arg(args, 0)->kind == CKPT_KIND_DICT ||
        arg(args, 0)->kind == CKPT_KIND_NONE)
        return b_dict(out, c, callable, args);
    return opaque(out, c, callable, args);
}

/* ---------------------------------------------------------------- bytes */

/* Next code point of valid UTF-8 (the machine guarantees STR is valid). */
static uint32_t next_cp(const uint8_t *s, size_t *i) {
    uint8_t b = s[(*i)++];
    if (b < 0x80) return b;
    size_t more = b >= 0xF0 ? 3 : b >= 0xE0 ? 2 : 1;
    uint32_t cp = b & (0x3Fu >> more);
    while (more--) cp = cp << 6 | (s[(*i)++] & 0x3Fu);
    return cp;
}

/* str.encode for latin-1, ASCII and UTF-8 (the encodings pickles use for
 * bytes: protocol-2 bytes are _codecs.encode(latin1_text, 'latin1'));
 * 1 when the encoding is not one of those. */
static int encode(ckpt_value **out, const pk_build_ctx *c, const ckpt_value *str,
                  const char *encoding) {
    char norm[16];
    size_t k = 0;
    for (const char *e = encoding; *e; e++) {
        if (*e == '-' || *e == '_' || *e == ' ') continue;
        if (k == sizeof norm - 1) return 1;
        norm[k++] = (char)(*e >= 'A' && *e <= 'Z' ? *e - 'A' + 'a' : *e);
    }
    norm[k] = '\0';
    uint32_t max;
    if (!strcmp(norm, "latin1") || !strcmp(norm, "latin") || !strcmp(norm, "l1") ||
        !strcmp(norm, "iso88591"))
        max = 0xFF;
    else if (!strcmp(norm, "ascii"))
        max = 0x7F;
    else if (!strcmp(norm, "utf8"))
        max = 0x10FFFF;
    else
        return 1;
    const uint8_t *s = (const uint8_t *)str->u.s.p;
    size_t n = str->u.s.len, ascii = 1;
    for (size_t i = 0; i < n && ascii; i++) ascii = s[i] < 0x80;
    ckpt_value *v = ckpt_value_new(c->arena, CKPT_KIND_BYTES);
    if (!v) return nomem(c);
    if (ascii || max == 0x10FFFF) { /* same bytes: share the immutable buffer */
        v->u.s.p = str->u.s.p;
        v->u.s.len = n;
        *out = v;
        return 0;
    }
    int rc = charge(c, n);
    if (rc) return rc;
    uint8_t *buf = ckpt_arena_alloc(c->arena, n + 1);
    if (!buf) return nomem(c);
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp = next_cp(s, &i);
        if (cp > max)
            return fail(c, CKPT_E_FORMAT, "_codecs.encode: U+%04" PRIX32 " cannot be encoded as %s",
                        cp, encoding);
        buf[o++] = (uint8_t)cp;
    }
    v->u.s.p = (char *)buf;
    v->u.s.len = o;
    *out = v;
    return 0;
}

/* _codecs.encode(obj, encoding='utf-8'[, errors]) */
static int b_encode(ckpt_value **out, const pk_build_ctx *c, const ckpt_value *callable,
                    ckpt_value *args) {
    size_t n = nargs(args);
    if (n >= 1 && n <= 3 && arg(args, 0)->kind == CKPT_KIND_STR &&
        (n == 1 || arg(args, 1)->kind == CKPT_KIND_STR) &&
        (n < 3 || is_str(arg(args, 2), "strict"))) {
        int rc = encode(out, c, arg(args, 0), n == 1 ? "utf-8" : arg(args, 1)->u.s.p);
        if (rc <= 0) return rc;
    }
    return opaque(out, c, callable, args);
}

/* bytes()/bytearray(): empty, a copy of bytes, or (str, encoding). */
static int bytes_of(ckpt_value **out, const pk_build_ctx *c, const ckpt_value *callable,
                    ckpt_value *args) {
    size_t n = nargs(args);
    if (n == 0) {
        *out = ckpt_value_new_str(c->arena, CKPT_KIND_BYTES, "", 0);
        return *out ? 0 : nomem(c);
    }
    const ckpt_value *x = arg(args, 0);
    if (n == 1 && x->kind == CKPT_KIND_BYTES) { /* bytes are immutable: share */
        if (!(*out = ckpt_value_new(c->arena, CKPT_KIND_BYTES))) return nomem(c);
        (*out)->u.s = x->u.s;
        return 0;
    }
    if (n >= 2 && n <= 3 && x->kind == CKPT_KIND_STR && arg(args, 1)->kind == CKPT_KIND_STR &&
        (n < 3 || is_str(arg(args, 2), "strict"))) {
        int rc = encode(out, c, x, arg(args, 1)->u.s.p);
        if (rc <= 0) return rc;
    }
    return opaque(out, c, callable, args);
}

static int b_bytes(ckpt_value **out, const pk_build_ctx *c, const ckpt_value *callable,
                   ckpt_value *args) {
    int rc = bytes_of(out, c, callable, args);
    if (!rc && (*out)->kind == CKPT_KIND_BYTES && !strcmp(callable->u.global.name, "bytearray")) {
        /* a value of its own (the bytes may be shared), its buffer shared */
        const ckpt_value *b = *out;
        if (!(*out = ckpt_value_new(c->arena, CKPT_KIND_BYTES))) return nomem(c);
        (*out)->u.s = b->u.s;
        (*out)->alt = 1;
    }
    return rc;
}

/* ---------------------------------------------------------------- torch */

/* torch.device('cpu') -> "cpu"; ('cuda', 0) -> "cuda:0"; ('cuda', None),
 * torch.device(a device): a STR of its own marked as a torch.device
 * (torch.load gives one back), checked as c10::Device checks it: what
 * torch refuses is CKPT_E_FORMAT. An int alone (a CUDA index, or an
 * error where no accelerator is) and results of calls stay opaque. */
static int b_device(ckpt_value **out, const pk_build_ctx *c, const ckpt_value *callable,
                    ckpt_value *args) {
    size_t n = nargs(args);
    const ckpt_value *a0 = n ? arg(args, 0) : NULL, *a1 = n == 2 ? arg(args, 1) : NULL;
    if (n == 1 && a0->kind == CKPT_KIND_STR && a0->alt) { /* a device */
        if (!(*out = ckpt_value_new(c->arena, CKPT_KIND_STR))) return nomem(c);
        (*out)->u.s = a0->u.s;
        (*out)->alt = 1;
        return 0;
    }
    if ((n == 1 && (a0->kind == CKPT_KIND_INT || a0->kind == CKPT_KIND_OBJECT)) ||
        (n == 2 && (a0->kind == CKPT_KIND_OBJECT || a1->kind == CKPT_KIND_OBJECT)))
        return opaque(out, c, callable, args);
    if (n < 1 || n > 2 || a0->kind != CKPT_KIND_STR ||
        (a1 && a1->kind != CKPT_KIND_NONE && a1->kind != CKPT_KIND_INT))
        return fail(c, CKPT_E_FORMAT,
                    "torch.device: expected (type) or (type, index) as str and int, got %zu "
                    "arguments (torch raises TypeError)",
                    n);
    const char *type = NULL;
    int index = -1, rc;
    char msg[160];
    if ((rc = ckpt_device_parse(a0->u.s.p, a0->u.s.len, &type, &index, msg, sizeof msg)))
        return fail_at(c, a0, rc, "torch.device: %s", msg);
    if (a1 && (index >= 0 || a0->u.s.len > strlen(type)))
        return fail_at(c, a0, CKPT_E_FORMAT,
                       "torch.device: a type string with an index and an index argument "
                       "(torch raises 'must not include an index')");
    if (a1 && a1->kind == CKPT_KIND_INT) {
        if (a1->u.i.decimal || a1->u.i.v < 0)
            return fail_at(c, a1, CKPT_E_FORMAT, "torch.device: index %s (torch raises)",
                           a1->u.i.decimal ? "beyond 64 bits" : "below 0");
        if ((rc = ckpt_device_index((uint64_t)a1->u.i.v, &index, msg, sizeof msg)))
            return fail_at(c, a1, rc, "torch.device: %s", msg);
    }
    char *s = index < 0 ? ckpt_arena_printf(c->arena, "%s", type)
                        : ckpt_arena_printf(c->arena, "%s:%d", type, index);
    if (!s || !(*out = ckpt_value_new(c->arena, CKPT_KIND_STR))) return nomem(c);
    (*out)->u.s.p = s;
    (*out)->u.s.len = strlen(s);
    (*out)->alt = 1;
    return 0;
}

/* The steps of a tensor rebuild, one per tensor of a state_dict, in
 * their caller: a call each cost more than the work of most. */
#if defined(__GNUC__)
#define INLINE static inline __attribute__((always_inline))
#else
#define INLINE static inline
#endif

/* size and stride of a tensor rebuild: lists or tuples of non-negative
 * ints of equal length, at most limits->max_ndim. */
INLINE int get_dims(const pk_build_ctx *c, const char *fn, const ckpt_value *size,
                    const ckpt_value *stride, uint64_t *shape, uint64_t *strides, uint32_t *ndim) {
    if ((size->kind != CKPT_KIND_TUPLE && size->kind != CKPT_KIND_LIST) ||
        (stride->kind != CKPT_KIND_TUPLE && stride->kind != CKPT_KIND_LIST))
        return fail_at(
            c, size->kind != CKPT_KIND_TUPLE && size->kind != CKPT_KIND_LIST ? size : stride,
            CKPT_E_FORMAT, "%s: expected size and stride tuples, got a %s and a %s", fn,
            ckpt_value_kind_name(size->kind), ckpt_value_kind_name(stride->kind));
    size_t n = size->u.seq.n;
    if (stride->u.seq.n != n)
        return fail_at(c, stride, CKPT_E_FORMAT,
                       "%s: expected size and stride of equal length, got %zu and %zu", fn, n,
                       stride->u.seq.n);
    uint32_t max = c->limits->max_ndim < CKPT_MAX_NDIM ? c->limits->max_ndim : CKPT_MAX_NDIM;
    if (n > max)
        return fail_at(c, size, CKPT_E_LIMIT,
                       "%s: tensor of %zu dimensions, at most %" PRIu32 " allowed", fn, n, max);
    for (size_t i = 0; i < n; i++)
        if (get_u64(size->u.seq.items[i], &shape[i]) ||
            get_u64(stride->u.seq.items[i], &strides[i]))
            return fail_at(c,
                           get_u64(size->u.seq.items[i], &shape[i]) ? size->u.seq.items[i]
                                                                    : stride->u.seq.items[i],
                           CKPT_E_FORMAT,
                           "%s: expected non-negative ints in size and stride (dimension %zu)", fn,
                           i);
    *ndim = (uint32_t)n;
    return 0;
}

/* The tensor view (storage, offset, size, stride) of a rebuild call's first
 * four arguments; dt UNKNOWN takes the storage's dtype. */
INLINE int view_of(ckpt_value **out, const pk_build_ctx *c, const char *fn, const ckpt_value *args,
                   ckpt_dtype dt) {
    const ckpt_value *st = arg(args, 0);
    if (st->kind != CKPT_KIND_STORAGE_)
        return fail_at(c, st, CKPT_E_FORMAT,
                       "%s: expected a storage (from a persistent id) as argument 1, got a %s", fn,
                       ckpt_value_kind_name(st->kind));
    uint64_t offset, shape[CKPT_MAX_NDIM], stride[CKPT_MAX_NDIM];
    uint32_t ndim = 0; /* get_dims sets it; inlined, gcc cannot tell */
    int rc;
    if (get_u64(arg(args, 1), &offset))
        return fail_at(c, arg(args, 1), CKPT_E_FORMAT,
                       "%s: expected a non-negative int storage offset, got a %s", fn,
                       ckpt_value_kind_name(arg(args, 1)->kind));
    if ((rc = get_dims(c, fn, arg(args, 2), arg(args, 3), shape, stride, &ndim))) return rc;
    return ckpt_tensor_new(out, c->arena, st->u.storage,
                           dt == CKPT_DT_UNKNOWN ? st->u.storage->dtype : dt, ndim, shape, stride,
                           offset, c->file, c->member, c->offset);
}

/* torch._utils._rebuild_tensor(storage, offset, size, stride),
 * _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks
 * [, metadata]), _rebuild_tensor_v3(..., hooks, dtype[, metadata]). v2 and
 * v1 take the storage's dtype; v3 storages are untyped bytes. Hooks are
 * ignored. Metadata setting torch's conj or neg bit (a saved x.conj(),
 * x.conj().imag: torch.load gives the conjugate or negation of the stored
 * values, torch 1.13 refuses the 7th argument) is refused by name: the
 * stored bytes are not the tensor. */
static int rebuild_tensor(ckpt_value **out, const pk_build_ctx *c, const ckpt_value *callable,
                          ckpt_value *args, int version) {
    const char *fn = callable->u.global.qualname;
    size_t min = version == 1 ? 4 : version == 2 ? 6 : 7;
    size_t max = version == 1 ? 4 : min + 1, n = nargs(args);
    if (n < min || n > max)
        return fail(c, CKPT_E_FORMAT, "%s: expected %zu to %zu arguments, got %zu", fn, min, max,
                    n);
    int requires_grad = 0, rc;
    if (version >= 2 && get_flag(arg(args, 4), &requires_grad))
        return fail_at(c, arg(args, 4), CKPT_E_FORMAT,
                       "%s: expected a bool requires_grad, got a %s", fn,
                       ckpt_value_kind_name(arg(args, 4)->kind));
    ckpt_dtype dt = CKPT_DT_UNKNOWN;
    if (version == 3) {
        const ckpt_value *d = arg(args, 6);
        if (d->kind != CKPT_KIND_GLOBAL_ || strcmp(d->u.global.module, "torch"))
            return fail_at(c, d, CKPT_E_FORMAT,
                           "%s: expected a torch dtype as argument 7, got a %s", fn,
                           ckpt_value_kind_name(d->kind));
        dt = ckpt_dtype_from_torch_name(d->u.global.name);
        if (dt == CKPT_DT_UNKNOWN)
            return fail_at(c, d, CKPT_E_UNSUPPORTED, "%s: dtype %s is not supported", fn,
                           d->u.global.qualname);
    }
    const ckpt_value *meta = version >= 2 && n == max ? arg(args, max - 1) : NULL;
    for (size_t i = 0; meta && meta->kind == CKPT_KIND_DICT && i < meta->u.dict.n; i++) {
        const ckpt_value *k = meta->u.dict.keys[i];
        int set = 0;
        if ((is_str(k, "conj") || is_str(k, "neg")) && !get_flag(meta->u.dict.vals[i], &set) && set)
            return fail_at(c, meta, CKPT_E_UNSUPPORTED,
                           "%s: the tensor carries torch's %.*s bit (metadata {'%.*s': True}): "
                           "torch.load gives the %s of the stored values, which ckpt does not "
                           "compute",
                           fn, (int)k->u.s.len, k->u.s.p, (int)k->u.s.len, k->u.s.p,
                           is_str(k, "conj") ? "complex conjugate" : "negation");
    }
    if ((rc = view_of(out, c, fn, args, dt))) return rc;
    (*out)->u.tensor->requires_grad = requires_grad != 0;
    return 0;
}

/* one builder per version: the allowlist entry names it, no name compared
 * per call */
static int b_tensor(ckpt_value **out, const pk_build_ctx *c, const ckpt_value *callable,
                    ckpt_value *args) {
    return rebuild_tensor(out, c, callable, args, 1);
}
static int b_tensor_v2(ckpt_value **out, const pk_build_ctx *c, const ckpt_value *callable,
                       ckpt_value *args) {
    return rebuild_tensor(out, c, callable, args, 2);
}
static int b_tensor_v3(ckpt_value **out, const pk_build_ctx *c, const ckpt_value *callable,
                       ckpt_value *args) {
    return rebuild_tensor(out, c, callable, args, 3);
}

/* d[key] = v for a str key; 0 or CKPT_E_NOMEM. */
static int put(const pk_build_ctx *c, ckpt_value *d, const char *key, ckpt_value *v) {
    ckpt_value *k = ckpt_value_new_str(c->arena, CKPT_KIND_STR, key, strlen(key));
    if (!k || !v || ckpt_value_dict_set(c->arena, d, k, v)) return nomem(c);
    return 0;
}

static ckpt_value *new_str(const pk_build_ctx *c, const char *s) {
    return ckpt_value_new_str(c->arena, CKPT_KIND_STR, s, strlen(s));
}

/* torch._utils._rebuild_qtensor(storage, offset, size, stride,
 * quantizer_params, requires_grad, hooks): a dict of the tensor's parts,
 * named after torch's accessors (FORMATS.md, "quantized tensors"):
 * int_repr (the stored integers: U8 for quint8, I8 for qint8, I32 for
 * qint32, as Tensor.int_repr() gives them), dtype ("quint8"...), qscheme
 * ("per_tensor_affine"...), and scale, zero_point (per tensor: a float and
 * an int; per channel: the tensors or lists of scales and zero points)
 * plus axis. Packed 4- and 2-bit storages and other qschemes stay opaque. */
static int b_qtensor(ckpt_value **out, const pk_build_ctx *c, const ckpt_value *callable,
                     ckpt_value *args) {
    const char *fn = callable->u.global.qualname;
    if (nargs(args) != 7)
        return fail(c, CKPT_E_FORMAT, "%s: expected 7 arguments, got %zu", fn, nargs(args));
    const ckpt_value *st = arg(args, 0), *qp = arg(args, 4);
    if (st->kind != CKPT_KIND_STORAGE_ || qp->kind != CKPT_KIND_TUPLE || qp->u.seq.n < 1 ||
        qp->u.seq.items[0]->kind != CKPT_KIND_GLOBAL_)
        return opaque(out, c, callable, args);
    ckpt_dtype qdt = st->u.storage->dtype, dt;
    const char *qname;
    switch (qdt) {
    case CKPT_DT_QU8: dt = CKPT_DT_U8, qname = "quint8"; break;
    case CKPT_DT_QI8: dt = CKPT_DT_I8, qname = "qint8"; break;
    case CKPT_DT_QI32: dt = CKPT_DT_I32, qname = "qint32"; break;
    default: return opaque(out, c, callable, args);
    }
    const char *scheme = qp->u.seq.items[0]->u.global.name;
    int per_tensor = !strcmp(scheme, "per_tensor_affine") && qp->u.seq.n == 3;
    int per_channel = (!strcmp(scheme, "per_channel_affine") ||
                       !strcmp(scheme, "per_channel_affine_float_qparams")) &&
                      qp->u.seq.n == 4;
    if (!per_tensor && !per_channel) return opaque(out, c, callable, args);
    /* torch.save writes per_channel_affine for float_qparams too: the
     * quantizer torch.load makes is float_qparams when the zero points
     * are floating point (make_per_channel_affine_quantizer) */
    const ckpt_value *zp = qp->u.seq.items[2];
    if (per_channel && zp->kind == CKPT_KIND_TENSOR && ckpt_dtype_is_float(zp->u.tensor->dtype))
        scheme = "per_channel_affine_float_qparams";
    ckpt_value *t, *d = ckpt_value_new(c->arena, CKPT_KIND_DICT);
    int requires_grad, rc;
    if (!d) return nomem(c);
    if (get_flag(arg(args, 5), &requires_grad))
        return fail_at(c, arg(args, 5), CKPT_E_FORMAT,
                       "%s: expected a bool requires_grad, got a %s", fn,
                       ckpt_value_kind_name(arg(args, 5)->kind));
    if ((rc = view_of(&t, c, fn, args, dt))) return rc;
    t->u.tensor->requires_grad = requires_grad != 0;
    if ((rc = put(c, d, "int_repr", t)) || (rc = put(c, d, "dtype", new_str(c, qname))) ||
        (rc = put(c, d, "qscheme", new_str(c, scheme))) ||
        (rc = put(c, d, "scale", qp->u.seq.items[1])) ||
        (rc = put(c, d, "zero_point", qp->u.seq.items[2])) ||
        (per_channel && (rc = put(c, d, "axis", qp->u.seq.items[3]))))
        return rc;
    *out = d;
    return 0;
}

/* torch._utils._rebuild_sparse_tensor(layout, data) (and torch 1.x's
 * _rebuild_sparse_csr_tensor(layout, data) for CSR), the layout being
 * torch.serialization._get_layout("torch.sparse_coo") (opaque here): a dict
 * of the tensor's parts named after torch's accessors: layout
 * ("sparse_coo"...), size, values, and indices (COO) or crow_indices and
 * col_indices (CSR, BSR) or ccol_indices and row_indices (CSC, BSC); a COO
 * tensor torch 2.x saved also is_coalesced (a bool: torch.load marks the
 * tensor so, Tensor.is_coalesced()). */
static int b_sparse(ckpt_value **out, const pk_build_ctx *c, const ckpt_value *callable,
                    ckpt_value *args) {
    static const struct {
        const char *layout, *compressed, *plain;
    } layouts[] = {{"torch.sparse_coo", "indices", NULL},
                   {"torch.sparse_csr", "crow_indices", "col_indices"},
                   {"torch.sparse_bsr", "crow_indices", "col_indices"},
                   {"torch.sparse_csc", "ccol_indices", "row_indices"},
                   {"torch.sparse_bsc", "ccol_indices", "row_indices"}};
    const ckpt_value *lay = nargs(args) == 2 ? arg(args, 0) : NULL, *data = NULL;
    if (!lay || lay->kind != CKPT_KIND_OBJECT ||
        strcmp(lay->u.obj.name, "torch.serialization._get_layout") || !lay->u.obj.args ||
        lay->u.obj.args->u.seq.n != 1 || lay->u.obj.args->u.seq.items[0]->kind != CKPT_KIND_STR ||
        arg(args, 1)->kind != CKPT_KIND_TUPLE)
        return opaque(out, c, callable, args);
    data = arg(args, 1);
    const ckpt_value *name = lay->u.obj.args->u.seq.items[0];
    for (size_t i = 0; i < sizeof layouts / sizeof *layouts; i++) {
        if (!is_str(name, layouts[i].layout)) continue;
        int coo = !layouts[i].plain;
        size_t n = data->u.seq.n;
        /* COO: (indices, values, size[, is_coalesced]); compressed:
         * (compressed_indices, plain_indices, values, size) */
        if (coo ? n != 3 && n != 4 : n != 4) return opaque(out, c, callable, args);
        ckpt_value *d = ckpt_value_new(c->arena, CKPT_KIND_DICT);
        if (!d) return nomem(c);
        ckpt_value **it = data->u.seq.items;
        int rc;
        if ((rc = put(c, d, "layout", new_str(c, layouts[i].layout + 6))) ||
            (rc = put(c, d, layouts[i].compressed, it[0])) ||
            (!coo && (rc = put(c, d, layouts[i].plain, it[1]))) ||
            (rc = put(c, d, "values", it[coo ? 1 : 2])) ||
            (rc = put(c, d, "size", it[coo ? 2 : 3])) ||
            (coo && n == 4 && it[3]->kind == CKPT_KIND_BOOL &&
             (rc = put(c, d, "is_coalesced", it[3]))))
            return rc;
        *out = d;
        return 0;
    }
    return opaque(out, c, callable, args);
}

/* _rebuild_parameter(data, requires_grad, hooks),
 * _rebuild_parameter_with_state(data, requires_grad, hooks, state) and
 * Parameter(data, requires_grad=True): a new tensor node viewing data's
 * storage, marked as a parameter (as in Python, the parameter is another
 * object than its data). The hooks and the attribute state are not kept.
 * Data that is not a tensor (e.g. an uninterpreted quantized tensor)
 * passes through. */
static int b_parameter(ckpt_value **out, const pk_build_ctx *c, const ckpt_value *callable,
                       ckpt_value *args) {
    if (nargs(args) == 0) return opaque(out, c, callable, args);
    ckpt_value *data = arg(args, 0);
    int requires_grad = 1;
    if (nargs(args) >= 2 && get_flag(arg(args, 1), &requires_grad))
        return fail_at(c, arg(args, 1), CKPT_E_FORMAT,
                       "%s: expected a bool requires_grad, got a %s", callable->u.global.qualname,
                       ckpt_value_kind_name(arg(args, 1)->kind));
    if (data->kind != CKPT_KIND_TENSOR) {
        *out = data;
        return 0;
    }
    ckpt_value *p = ckpt_value_new(c->arena, CKPT_KIND_TENSOR);
    ckpt_tensor *t = ckpt_arena_alloc(c->arena, sizeof *t);
    if (!p || !t) return nomem(c);
    *t = *data->u.tensor; /* shape and stride arrays are shared, never changed */
    t->requires_grad = requires_grad != 0;
    t->is_parameter = 1;
    p->u.tensor = t;
    *out = p;
    return 0;
}

static void emit_call(const pk_build_ctx *c, const ckpt_value *func, int allowed) {
    if (!c->on_event) return;
    int global = func->kind == CKPT_KIND_GLOBAL_;
    pk_event ev = {.kind = PK_EV_CALL,
                   .opcode = c->opcode,
                   .offset = c->offset,
                   .module = global ? func->u.global.module : "?",
                   .name = global ? func->u.global.name : "?",
                   .allowed = allowed,
                   .symbolic = !global || !strcmp(func->u.global.module, "?")};
    c->on_event(c->event_ctx, &ev);
}

/* The value of attribute `key` in an attribute dict (the last of repeated
 * keys, as Python keeps it); NULL if d is no dict or has none. */
static const ckpt_value *attr(const ckpt_value *d, const char *key) {
    if (!d || d->kind != CKPT_KIND_DICT) return NULL;
    for (size_t i = d->u.dict.n; i-- > 0;)
        if (is_str(d->u.dict.keys[i], key)) return d->u.dict.vals[i];
    return NULL;
}

/* The BUILD state of an OBJECT of class module.Name (any module when
 * module is NULL); NULL otherwise. */
static const ckpt_value *state_of(const ckpt_value *v, const char *name) {
    if (!v || v->kind != CKPT_KIND_OBJECT) return NULL;
    const char *dot = strrchr(v->u.obj.name, '.');
    return dot && !strcmp(dot + 1, name) ? v->u.obj.state : NULL;
}

/* A DTensor placement as torch's repr writes Shard and Replicate:
 * "Class(field=value, ...)" from the object's int, bool and str fields. */
static ckpt_value *placement(const pk_build_ctx *c, const ckpt_value *p) {
    char buf[160];
    size_t n = 0;
    const char *name = p->kind == CKPT_KIND_OBJECT ? strrchr(p->u.obj.name, '.') : NULL;
    if (!name) return new_str(c, "?");
    n += (size_t)snprintf(buf, sizeof buf, "%s(", name + 1);
    const ckpt_value *st = p->u.obj.state;
    for (size_t i = 0; st && st->kind == CKPT_KIND_DICT && i < st->u.dict.n; i++) {
        const ckpt_value *k = st->u.dict.keys[i], *v = st->u.dict.vals[i];
        if (k->kind != CKPT_KIND_STR || n >= sizeof buf) continue;
        const char *sep = n > strlen(name + 1) + 1 ? ", " : "";
        if (v->kind == CKPT_KIND_INT && !v->u.i.decimal)
            n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%.40s=%lld", sep, k->u.s.p,
                                  (long long)v->u.i.v);
        else if (v->kind == CKPT_KIND_BOOL)
            n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%.40s=%s", sep, k->u.s.p,
                                  v->u.b ? "True" : "False");
        else if (v->kind == CKPT_KIND_STR)
            n +=
                (size_t)snprintf(buf + n, sizeof buf - n, "%s%.40s=%.40s", sep, k->u.s.p, v->u.s.p);
    }
    if (n < sizeof buf) snprintf(buf + n, sizeof buf - n, ")");
    return new_str(c, buf);
}

/* The shape of a DTensor's DeviceMesh: torch >= 2.9 keeps a _layout whose
 * axes each have a (sub)shape, multiplied out; earlier ones the mesh tensor
 * of ranks. NULL when neither is there. */
static ckpt_value *mesh_shape(const pk_build_ctx *c, const ckpt_value *mesh) {
    const ckpt_value *st = state_of(mesh, "DeviceMesh"), *m = attr(st, "mesh");
    ckpt_value *shape = ckpt_value_new(c->arena, CKPT_KIND_TUPLE);
    if (!shape) return NULL;
    if (m && m->kind == CKPT_KIND_TENSOR) {
        for (uint32_t i = 0; i < m->u.tensor->ndim; i++)
            if (ckpt_value_append(c->arena, shape,
                                  ckpt_value_new_int(c->arena, (int64_t)m->u.tensor->shape[i])))
                return NULL;
        return shape;
    }
    const ckpt_value *axes = attr(state_of(attr(st, "_layout"), "_MeshLayout"), "axes");
    if (!axes || axes->kind != CKPT_KIND_TUPLE) return shape;
    for (size_t i = 0; i < axes->u.seq.n; i++) {
        const ckpt_value *sub =
            attr(axes->u.seq.items[i]->kind == CKPT_KIND_OBJECT ? axes->u.seq.items[i]->u.obj.state
                                                                : NULL,
                 "shape");
        int64_t size = 1;
        for (size_t k = 0; sub && sub->kind == CKPT_KIND_TUPLE && k < sub->u.seq.n; k++) {
            const ckpt_value *e = sub->u.seq.items[k];
            if (e->kind == CKPT_KIND_INT && !e->u.i.decimal && e->u.i.v >= 0 &&
                e->u.i.v <= INT32_MAX && size <= INT32_MAX)
                size *= e->u.i.v;
        }
        if (ckpt_value_append(c->arena, shape, ckpt_value_new_int(c->arena, size))) return NULL;
    }
    return shape;
}

/* A DTensor saved whole (torch.save of an FSDP2 state dict):
 * _rebuild_from_type_v2(_rebuild_wrapper_subclass, DTensor, args,
 * {'_local_tensor': shard, '_spec': DTensorSpec}) becomes a dict of
 * local_tensor (this rank's shard), placements ("Shard(dim=0)", ...),
 * mesh_shape and global_shape (FORMATS.md, "DTensor"). Returns 1 when
 * `type` is no DTensor or the state lacks its shard (the caller goes on as
 * for any wrapper subclass), 0 with *out, or an error. */
static int dtensor(ckpt_value **out, const pk_build_ctx *c, const ckpt_value *type,
                   const ckpt_value *state) {
    if (type->kind != CKPT_KIND_GLOBAL_ || strcmp(type->u.global.name, "DTensor") ||
        strncmp(type->u.global.module, "torch.distributed", 17))
        return 1;
    /* Tensor._reduce_ex state: (__dict__, slots) as DTensor has __slots__ */
    if (state->kind == CKPT_KIND_TUPLE && state->u.seq.n == 2) state = state->u.seq.items[1];
    const ckpt_value *local = attr(state, "_local_tensor"), *spec = attr(state, "_spec");
    if (!local || local->kind != CKPT_KIND_TENSOR) return 1;
    const ckpt_value *sst = state_of(spec, "DTensorSpec"), *pl = attr(sst, "placements"),
                     *meta = attr(sst, "tensor_meta");
    ckpt_value *d = ckpt_value_new(c->arena, CKPT_KIND_DICT),
               *places = ckpt_value_new(c->arena, CKPT_KIND_TUPLE);
    if (!d || !places) return nomem(c);
    for (size_t i = 0; pl && pl->kind == CKPT_KIND_TUPLE && i < pl->u.seq.n; i++)
        if (ckpt_value_append(c->arena, places, placement(c, pl->u.seq.items[i]))) return nomem(c);
    int rc;
    if ((rc = put(c, d, "local_tensor", (ckpt_value *)local)) ||
        (rc = put(c, d, "placements", places)) ||
        (rc = put(c, d, "mesh_shape", mesh_shape(c, attr(sst, "mesh")))))
        return rc;
    /* TensorMeta(shape, stride, dtype), a namedtuple made by NEWOBJ */
    if (meta && meta->kind == CKPT_KIND_OBJECT && meta->u.obj.args &&
        meta->u.obj.args->u.seq.n == 3 &&
        (rc = put(c, d, "global_shape", meta->u.obj.args->u.seq.items[0])))
        return rc;
    *out = d;
    return 0;
}

/* torch._tensor._rebuild_from_type_v2(func, type, args, state): Python
 * calls func(*args), so func is treated like the callable of a REDUCE (our
 * builder when allowlisted, else an opaque object, with its own event).
 * The subclass `type` and the attribute state are not applied. */
static int b_from_type_v2(ckpt_value **out, const pk_build_ctx *c, const ckpt_value *callable,
                          ckpt_value *args) {
    const char *fn = callable->u.global.qualname;
    if (nargs(args) != 4)
        return fail(c, CKPT_E_FORMAT, "%s: expected 4 arguments, got %zu", fn, nargs(args));
    ckpt_value *func = arg(args, 0), *fargs = arg(args, 2);
    if (fargs->kind != CKPT_KIND_TUPLE)
        return fail(c, CKPT_E_FORMAT, "%s: expected an argument tuple, got a %s", fn,
                    ckpt_value_kind_name(fargs->kind));
    if (func->kind != CKPT_KIND_GLOBAL_) {
        emit_call(c, func, 0);
        return ckpt_builders_opaque(out, c, "?", fargs, NULL);
    }
    /* a nested wrapper would recurse as deep as the pickle nests tuples */
    if (!strcmp(func->u.global.qualname, fn))
        return fail(c, CKPT_E_FORMAT, "%s: expected a rebuild function, got itself", fn);
    int allowed = strcmp(func->u.global.module, "?") && func->u.global.allow != 0;
    emit_call(c, func, allowed);
    if (!c->scan_only && allowed && !strcmp(func->u.global.name, "_rebuild_wrapper_subclass")) {
        int rc = dtensor(out, c, arg(args, 1), arg(args, 3));
        if (rc <= 0) return rc;
    }
    if (allowed) return ckpt_builders_call(out, c, func, fargs, NULL);
    return ckpt_builders_opaque(out, c, func->u.global.qualname, fargs, NULL);
}

/* ---------------------------------------------------------------- numpy */

/* Type code ("f8") and byte order of a numpy.dtype object: its args are
 * (code, align, copy) and its BUILD state (version, endian, ...). The
 * code is copied into code[NP_CODE] (str values need not end in NUL);
 * NULL when d is no dtype or its code is longer than any numeric one. */
#define NP_CODE 16
static const char *np_dtype(const ckpt_value *d, int *big_endian, char *code) {
    if (d->kind != CKPT_KIND_OBJECT || strcmp(d->u.obj.name, "numpy.dtype") || !d->u.obj.args ||
        d->u.obj.args->u.seq.n < 1 || d->u.obj.args->u.seq.items[0]->kind != CKPT_KIND_STR)
        return NULL;
    const ckpt_value *s = d->u.obj.args->u.seq.items[0];
    if (s->u.s.len >= NP_CODE || memchr(s->u.s.p, '\0', s->u.s.len)) return NULL;
    memcpy(code, s->u.s.p, s->u.s.len);
    code[s->u.s.len] = '\0';
    const ckpt_value *state = d->u.obj.state;
    *big_endian = state && state->kind == CKPT_KIND_TUPLE && state->u.seq.n > 1 &&
                  is_str(state->u.seq.items[1], ">");
    return code;
}

/* IEEE half to double, built bit by bit (no libm). */
static double half_to_double(uint16_t h) {
    uint64_t sign = (uint64_t)(h >> 15) << 63, mant = h & 0x3FFu;
    int exp = (h >> 10) & 0x1F;
    uint64_t bits;
    if (exp == 0x1F) { /* inf, nan */
        bits = sign | (uint64_t)0x7FF << 52 | mant << 42;
    } else if (exp == 0 && mant == 0) {
        bits = sign;
    } else {
        int e = exp - 15;
        if (exp == 0) { /* subnormal: normalise */
            e = -14;
            while (!(mant & 0x400)) mant <<= 1, e--;
            mant &= 0x3FF;
        }
        bits = sign | (uint64_t)(e + 1023) << 52 | mant << 42;
    }
    double d;
    memcpy(&d, &bits, sizeof d);
    return d;
}

/* numpy.core.multiarray.scalar(dtype, bytes): bool, int or float from the
 * element bytes; object scalars are their second argument. */
static int b_np_scalar(ckpt_value **out, const pk_build_ctx *c, const ckpt_value *callable,
                       ckpt_value *args) {
    int big = 0;
    char buf[NP_CODE];
    const char *code = nargs(args) == 2 ? np_dtype(arg(args, 0), &big, buf) : NULL;
    if (!code) return opaque(out, c, callable, args);
    if (code[0] == 'O') {
        *out = arg(args, 1);
        return 0;
    }
    /* no event depends on a number (and protocol-2 bytes are _codecs
     * calls, not run in scan mode) */
    if (c->scan_only) return opaque(out, c, callable, args);
    char kind = code[0];
    size_t size = 0;
    if ((kind == 'b' || kind == 'i' || kind == 'u' || kind == 'f') && code[1] && !code[2] &&
        strchr("1248", code[1]))
        size = (size_t)(code[1] - '0');
    if (!size || (kind == 'b' && size != 1) || (kind == 'f' && size == 1))
        return opaque(out, c, callable, args);
    const ckpt_value *data = arg(args, 1);
    if (data->kind != CKPT_KIND_BYTES && data->kind != CKPT_KIND_STR)
        return fail(c, CKPT_E_FORMAT, "%s: expected the element bytes, got a %s",
                    callable->u.global.qualname, ckpt_value_kind_name(data->kind));
    if (data->u.s.len != size)
        return fail(c, CKPT_E_FORMAT, "%s: dtype %s expects %zu bytes, got %zu",
                    callable->u.global.qualname, code, size, data->u.s.len);
    uint8_t le[9] = {0};
    const uint8_t *p = (const uint8_t *)data->u.s.p;
    for (size_t i = 0; i < size; i++) le[i] = big ? p[size - 1 - i] : p[i];
    uint64_t u = 0;
    for (size_t i = size; i-- > 0;) u = u << 8 | le[i];
    if (kind == 'b') {
        *out = ckpt_value_new_bool(c->arena, u != 0);
    } else if (kind == 'f') {
        double d;
        if (size == 2) {
            d = half_to_double((uint16_t)u);
        } else if (size == 4) {
            float f;
            uint32_t w = (uint32_t)u;
            memcpy(&f, &w, sizeof f);
            d = f;
        } else {
            memcpy(&d, &u, sizeof d);
        }
        *out = ckpt_value_new_float(c->arena, d);
    } else if (kind == 'u') { /* le[size] is 0: a non-negative two's complement */
        *out = ckpt_value_new_int_le(c->arena, le, size + 1);
    } else {
        *out = ckpt_value_new_int_le(c->arena, le, size);
    }
    if (!*out) return nomem(c);
    (*out)->np_dtype = (uint8_t)ckpt_dtype_from_numpy(code);
    return 0;
}

/* numpy.core.multiarray._reconstruct(numpy.ndarray, (0,), b'b'): an empty
 * ndarray that BUILD fills; kept as an OBJECT "numpy.ndarray" until then.
 * Other subtypes (masked arrays, matrices...) have other states: opaque. */
static int b_np_reconstruct(ckpt_value **out, const pk_build_ctx *c, const ckpt_value *callable,
                            ckpt_value *args) {
    const ckpt_value *sub = nargs(args) == 3 ? arg(args, 0) : NULL;
    if (!sub || sub->kind != CKPT_KIND_GLOBAL_ || strcmp(sub->u.global.qualname, "numpy.ndarray"))
        return opaque(out, c, callable, args);
    return ckpt_builders_opaque(out, c, "numpy.ndarray", args, NULL);
}

/* ndarray.__setstate__((version, shape, dtype, is_fortran, rawdata)) or the
 * older 4-tuple without version. Returns 1 when the placeholder became a
 * tensor, 0 when the state is not one we model (object arrays, string or
 * structured dtypes), or an error. */
static int np_setstate(const pk_build_ctx *c, ckpt_value *target, const ckpt_value *state) {
    if (state->kind != CKPT_KIND_TUPLE || state->u.seq.n < 4 || state->u.seq.n > 5) return 0;
    ckpt_value **s = state->u.seq.items + (state->u.seq.n == 5);
    const ckpt_value *shape_v = s[0], *raw = s[3];
    int big = 0, fortran;
    char buf[NP_CODE];
    const char *code = np_dtype(s[1], &big, buf);
    ckpt_dtype dt = code ? ckpt_dtype_from_numpy(code) : CKPT_DT_UNKNOWN;
    if (shape_v->kind != CKPT_KIND_TUPLE || dt == CKPT_DT_UNKNOWN ||
        (raw->kind != CKPT_KIND_BYTES && raw->kind != CKPT_KIND_STR) || get_flag(s[2], &fortran))
        return 0;
    uint64_t shape[CKPT_MAX_NDIM], stride[CKPT_MAX_NDIM], numel = 1, nbytes;
    uint32_t ndim;
    int rc = get_dims(c, "numpy.ndarray", shape_v, shape_v, shape, stride, &ndim);
    if (rc) return rc;
    for (uint32_t i = 0; i < ndim; i++)
        if (ckpt_mul_overflow(numel, shape[i], &numel))
            return fail(c, CKPT_E_FORMAT, "numpy.ndarray: shape overflows 64 bits");
    if (ckpt_mul_overflow(numel, ckpt_dtype_size(dt), &nbytes) || nbytes != raw->u.s.len)
        return fail(c, CKPT_E_FORMAT,
                    "numpy.ndarray: expected %" PRIu64 " elements of %s, got %zu bytes", numel,
                    code, raw->u.s.len);
    /* element strides: C order, or Fortran order when is_fortran */
    uint64_t step = 1;
    for (uint32_t k = 0; k < ndim; k++) {
        uint32_t i = fortran ? k : ndim - 1 - k;
        stride[i] = step;
        if (ckpt_mul_overflow(step, shape[i], &step))
            return fail(c, CKPT_E_FORMAT, "numpy.ndarray: strides overflow 64 bits");
    }
    ckpt_storage *st = ckpt_arena_alloc(c->arena, sizeof *st);
    if (!st) return nomem(c);
    /* the bytes already live in the arena (the BYTES value): point at them */
    st->dtype = dt;
    st->nbytes = raw->u.s.len;
    st->data = (const uint8_t *)raw->u.s.p;
    st->key = "";
    st->member = "";
    st->file_offset = CKPT_NO_OFFSET;
    st->big_endian = big && ckpt_dtype_size(dt) > 1;
    ckpt_value *t;
    if ((rc = ckpt_tensor_new(&t, c->arena, st, dt, ndim, shape, stride, 0, c->file, c->member,
                              c->offset)))
        return rc;
    t->u.tensor->is_numpy = 1;
    target->kind = CKPT_KIND_TENSOR;
    target->u.tensor = t->u.tensor;
    return 1;
}

/* ---------------------------------------------------------------- allowlist */

/* What NEWOBJ's cls.__new__(cls, *args) is for an entry: pickle.load
 * refuses a cls that is no type (a function, a qscheme); list, set, dict
 * and bytearray's __new__ (OrderedDict and Counter's too) ignore the
 * arguments, which __init__ would take; other classes' build from them. */
enum { NEW_FAILS, NEW_EMPTY, NEW_CALL };

static const struct entry {
    const char *module, *name;
    builder_fn fn;     /* NULL: allowed, called gives an opaque object */
    int newobj;        /* NEW_* */
    int torch_refuses; /* off torch >= 2.6's weights_only allowlist */
} allowlist[] = {
    [E_ORDERED_DICT] = {"collections", "OrderedDict", b_dict, NEW_EMPTY, 0},
    [E_COUNTER] = {"collections", "Counter", b_counter, NEW_EMPTY, 0},
    {"builtins", "dict", b_dict, NEW_EMPTY, 1},
    {"builtins", "list", b_list, NEW_EMPTY, 1},
    {"builtins", "tuple", b_tuple, NEW_CALL, 1},
    {"builtins", "set", b_set, NEW_EMPTY, 0},
    {"builtins", "frozenset", b_set, NEW_CALL, 1},
    {"builtins", "bytes", b_bytes, NEW_CALL, 1},
    {"builtins", "bytearray", b_bytes, NEW_EMPTY, 0},
    {"builtins", "complex", NULL, NEW_CALL, 0},
    {"builtins", "slice", NULL, NEW_CALL, 1},
    {"_codecs", "encode", b_encode, NEW_FAILS, 0},
    {"torch._utils", "_rebuild_tensor", b_tensor, NEW_FAILS, 0},
    {"torch._utils", "_rebuild_tensor_v2", b_tensor_v2, NEW_FAILS, 0},
    {"torch._utils", "_rebuild_tensor_v3", b_tensor_v3, NEW_FAILS, 0},
    {"torch._utils", "_rebuild_parameter", b_parameter, NEW_FAILS, 0},
    {"torch._utils", "_rebuild_parameter_with_state", b_parameter, NEW_FAILS, 0},
    /* on torch's weights_only allowlist, not interpreted here */
    {"torch._utils", "_rebuild_qtensor", b_qtensor, NEW_FAILS, 0},
    {"torch._utils", "_rebuild_sparse_tensor", b_sparse, NEW_FAILS, 0},
    {"torch._utils", "_rebuild_sparse_csr_tensor", b_sparse, NEW_FAILS, 1}, /* torch 1.x CSR */
    {"torch._utils", "_rebuild_meta_tensor_no_storage", NULL, NEW_FAILS, 0},
    {"torch._utils", "_rebuild_nested_tensor", NULL, NEW_FAILS, 0},
    {"torch._utils", "_rebuild_wrapper_subclass", NULL, NEW_FAILS, 0},
    {"torch._utils", "_rebuild_device_tensor_from_numpy", NULL, NEW_FAILS, 0},
    {"torch._utils", "_rebuild_device_tensor_from_cpu_tensor", NULL, NEW_FAILS, 0},
    {"torch._tensor", "_rebuild_from_type_v2", b_from_type_v2, NEW_FAILS, 0},
    {"torch.nn.parameter", "Parameter", b_parameter, NEW_CALL, 0},
    {"torch", "Tensor", NULL, NEW_CALL, 0},
    {"torch", "Size", b_size, NEW_CALL, 0},
    {"torch", "device", b_device, NEW_CALL, 0},
    {"torch.serialization", "_get_layout", NULL, NEW_FAILS, 0},
    {"torch", "per_tensor_affine", NULL, NEW_FAILS, 0},
    {"torch", "per_tensor_symmetric", NULL, NEW_FAILS, 0},
    {"torch", "per_channel_affine", NULL, NEW_FAILS, 0},
    {"torch", "per_channel_symmetric", NULL, NEW_FAILS, 0},
    {"torch", "per_channel_affine_float_qparams", NULL, NEW_FAILS, 0},
    {"numpy", "dtype", NULL, NEW_CALL, 1},
    {"numpy", "ndarray", NULL, NEW_CALL, 1},
    {"numpy.core.multiarray", "scalar", b_np_scalar, NEW_FAILS, 1},
    {"numpy._core.multiarray", "scalar", b_np_scalar, NEW_FAILS, 1},
    {"numpy.core.multiarray", "_reconstruct", b_np_reconstruct, NEW_FAILS, 1},
    {"numpy._core.multiarray", "_reconstruct", b_np_reconstruct, NEW_FAILS, 1},
};

static int dict_class_of(const ckpt_value *callable) {
    int e = callable->u.global.allow - 2;
    return e == E_ORDERED_DICT ? CKPT_DICT_ORDERED
           : e == E_COUNTER    ? CKPT_DICT_COUNTER
                               : CKPT_DICT_PLAIN;
}

static const struct entry *find(const char *module, const char *name) {
    /* called once per REDUCE (a state_dict: a few per tensor); the first
     * bytes rule out most entries without a call */
    for (size_t i = 0; i < sizeof allowlist / sizeof *allowlist; i++)
        if (module[0] == allowlist[i].module[0] && name[0] == allowlist[i].name[0] &&
            !strcmp(module, allowlist[i].module) && !strcmp(name, allowlist[i].name))
            return &allowlist[i];
    return NULL;
}

/* torch dtypes without a ckpt_dtype that weights_only allows (torch.uint1
 * to uint7, int1 to int7, packed float4 and bits types), and the legacy
 * tensor classes (torch[.cuda][.sparse].FloatTensor...): allowed, any
 * tensor of theirs is unsupported or opaque. */
static int other_torch_dtype(const char *module, const char *name) {
    static const char *const dtypes[] = {"float4_e2m1fn_x2", "bits1x8", "bits2x4", "bits4x2"};
    if (strcmp(module, "torch")) return 0;
    if ((!strncmp(name, "uint", 4) && name[4] >= '1' && name[4] <= '7' && !name[5]) ||
        (!strncmp(name, "int", 3) && name[3] >= '1' && name[3] <= '7' && !name[4]))
        return 1;
    for (size_t i = 0; i < sizeof dtypes / sizeof *dtypes; i++)
        if (!strcmp(name, dtypes[i])) return 1;
    return 0;
}

/* A torch dtype weights_only allows (torch.float32, torch.uint3...): an
 * object, no class. */
static int torch_dtype(const char *module, const char *name) {
    return other_torch_dtype(module, name) ||
           (!strcmp(module, "torch") && ckpt_dtype_from_torch_name(name) != CKPT_DT_UNKNOWN);
}

static int other_torch_name(const char *module, const char *name) {
    static const char *const classes[] = {"BFloat16", "Bool", "Byte", "Char", "Double",
                                          "Float",    "Half", "Int",  "Long", "Short"};
    if (other_torch_dtype(module, name)) return 1;
    if (strcmp(module, "torch") && strcmp(module, "torch.cuda") && strcmp(module, "torch.sparse") &&
        strcmp(module, "torch.cuda.sparse"))
        return 0;
    size_t n = strlen(name);
    if (n < 7 || strcmp(name + n - 6, "Tensor")) return 0;
    for (size_t i = 0; i < sizeof classes / sizeof *classes; i++)
        if (strlen(classes[i]) == n - 6 && !strncmp(name, classes[i], n - 6))
            return strcmp(module + strlen(module) - 6, "sparse") || strcmp(classes[i], "Bool");
    return 0;
}

int ckpt_builders_allow(const char *module, const char *name) {
    const struct entry *e = find(module, name);
    if (e) return 2 + (int)(e - allowlist);
    return ckpt_builders_allowed(module, name);
}

int ckpt_builders_scan_alike(const char *module, const char *name) {
    return (!strcmp(module, "collections") && !strcmp(name, "OrderedDict")) ||
           (!strcmp(module, "torch._utils") && !strcmp(name, "_rebuild_tensor_v2"));
}

int ckpt_builders_allowed(const char *module, const char *name) {
    if (find(module, name) || other_torch_name(module, name)) return 1;
    /* storage types, named in persistent ids (torch.cuda for legacy GPU saves) */
    if ((!strcmp(module, "torch") || !strcmp(module, "torch.cuda") ||
         !strcmp(module, "torch.storage")) &&
        (ckpt_dtype_from_storage_class(name) != CKPT_DT_UNKNOWN || !strcmp(name, "TypedStorage") ||
         !strcmp(name, "_LegacyStorage")))
        return 1;
    return torch_dtype(module, name);
}

/* torch.<name> is a dtype as str(dtype) spells it, not an alias such as
 * torch.float (torch's allowlist is keyed by str(dtype)) */
static int canonical_dtype(const char *name) {
    static const char *const aliases[] = {"float", "double", "half",   "long",   "int",
                                          "short", "chalf",  "cfloat", "cdouble"};
    for (size_t i = 0; i < sizeof aliases / sizeof *aliases; i++)
        if (!strcmp(name, aliases[i])) return 0;
    return ckpt_dtype_from_torch_name(name) != CKPT_DT_UNKNOWN;
}

int ckpt_builders_weights_only(const char *module, const char *name) {
    const struct entry *e = find(module, name);
    if (e) return !e->torch_refuses;
    if (other_torch_name(module, name)) return 1;
    int cuda = !strcmp(module, "torch.cuda");
    if (!strcmp(module, "torch") || cuda) {
        /* torch._storage_classes: legacy typed storages; CUDA has no
         * quantized ones */
        size_t n = strlen(name);
        if (n > 7 && !strcmp(name + n - 7, "Storage") && strcmp(name, "UntypedStorage") &&
            ckpt_dtype_from_storage_class(name) != CKPT_DT_UNKNOWN)
            return !cuda || name[0] != 'Q';
        return !cuda && canonical_dtype(name);
    }
    return !strcmp(module, "torch.storage") &&
           (!strcmp(name, "TypedStorage") || !strcmp(name, "UntypedStorage"));
}

int ckpt_builders_call(ckpt_value **out, const pk_build_ctx *c, ckpt_value *callable,
                       ckpt_value *args, ckpt_value *kwargs) {
    *out = NULL;
    int allow = callable->u.global.allow;
    const struct entry *e = allow >= 2 ? &allowlist[allow - 2] : NULL;
    /* a scan only needs the events and what later opcodes see of a
     * value: the builder that makes calls of its own runs, and those whose
     * result may be an argument itself (object scalars) or is named after
     * one (ndarray) */
    if (!e || !e->fn || (kwargs && kwargs->u.dict.n) ||
        (c->scan_only && e->fn != b_from_type_v2 && e->fn != b_np_reconstruct &&
         e->fn != b_np_scalar))
        return ckpt_builders_opaque(out, c, callable->u.global.qualname, args, kwargs);
    return e->fn(out, c, callable, args);
}

int ckpt_builders_forgets_args(const ckpt_value *callable) {
    int allow = callable->kind == CKPT_KIND_GLOBAL_ ? callable->u.global.allow : 0;
    const struct entry *e = allow >= 2 ? &allowlist[allow - 2] : NULL;
    if (e && (e->fn == b_tensor || e->fn == b_tensor_v2 || e->fn == b_tensor_v3)) return 1;
    return e && e->fn == b_dict ? 2 : 0;
}

int ckpt_builders_new(ckpt_value **out, const pk_build_ctx *c, ckpt_value *callable,
                      ckpt_value *args, ckpt_value *kwargs) {
    int allow = callable->u.global.allow;
    const struct entry *e = allow >= 2 ? &allowlist[allow - 2] : NULL;
    const char *module = callable->u.global.module, *name = callable->u.global.name;
    if (c->scan_only) return ckpt_builders_call(out, c, callable, args, kwargs);
    if ((e && e->newobj == NEW_FAILS) || (!e && torch_dtype(module, name)))
        return fail(c, CKPT_E_FORMAT,
                    "NEWOBJ: %s is no class (pickle.load raises 'NEWOBJ class argument must be "
                    "a type')",
                    callable->u.global.qualname);
    if (e && e->newobj == NEW_EMPTY) {
        ckpt_value *none = ckpt_value_new(c->arena, CKPT_KIND_TUPLE);
        if (!none) return nomem(c);
        return ckpt_builders_call(out, c, callable, none, NULL);
    }
    return ckpt_builders_call(out, c, callable, args, kwargs);
}

/* Python's load_build on an instance without __setstate__: a state that
 * is no dict (nor None) is "state is not a dictionary"; a dict state goes
 * into the instance's __dict__; a (state, slotstate) pair splits, and its
 * slotstate must be a dict (None included: "slot state is not a
 * dictionary", Python 3.11) whose entries are set as attributes.
 * state_form: -1 for a state Python refuses on any such instance, -2 for
 * one that holds the result of a call (an object: it may be a dict), 0
 * for one that sets nothing, 1 for one that sets attributes (a dict of
 * entries; in a scan, dicts hold none, so there it is 0). */
static int state_form(const ckpt_value *state) {
    const ckpt_value *d = state, *slots = NULL;
    if (state->kind == CKPT_KIND_TUPLE && state->u.seq.n == 2) {
        d = state->u.seq.items[0];
        slots = state->u.seq.items[1];
        if (slots->kind == CKPT_KIND_OBJECT) return -2;
        if (slots->kind != CKPT_KIND_DICT) return -1;
    }
    if (d->kind == CKPT_KIND_OBJECT) return -2;
    if (d->kind != CKPT_KIND_NONE && d->kind != CKPT_KIND_DICT) return -1;
    return (d->kind == CKPT_KIND_DICT && d->u.dict.n) || (slots && slots->u.dict.n);
}

/* BUILD on a value of a builtin type (a plain dict, list, tuple, set,
 * str, bytes, int, float, bool, None), which has no __setstate__, no
 * __dict__ and no settable attribute: only a state of None or (None, {})
 * passes (a dict state fails on the missing __dict__ even when empty).
 * On a storage (a TypedStorage, which has a __dict__) a state that sets
 * attributes could change the dtype or bytes torch reads from it: refused
 * as unsupported. */
static int builtin_setstate(const pk_build_ctx *c, const ckpt_value *target,
                            const ckpt_value *state) {
    int form = state_form(state);
    if (target->kind == CKPT_KIND_STORAGE_) {
        if (form == 0) return 0;
        return fail(c, form < 0 ? CKPT_E_FORMAT : CKPT_E_UNSUPPORTED,
                    form < 0 ? "BUILD: expected a dict state for a storage"
                             : "BUILD: a state that sets attributes of a storage (its dtype or "
                               "bytes as torch reads them) is not read");
    }
    if (form == 0 &&
        (state->kind == CKPT_KIND_NONE ||
         (state->kind == CKPT_KIND_TUPLE && state->u.seq.items[0]->kind == CKPT_KIND_NONE)))
        return 0;
    return fail(c, CKPT_E_FORMAT,
                "BUILD: a %s takes no state but None or (None, {}) (it has no __dict__ "
                "or attributes)",
                ckpt_value_kind_name(target->kind));
}

/* BUILD on an OrderedDict or Counter: Python's load_build sets the
 * attributes of a dict state, or of both dicts of a (state, slotstate)
 * pair, in the instance's __dict__. They are copied into dict.state (a
 * later SETITEM on the memoized state dict does not change them, as in
 * Python); a second BUILD adds to them. A state Python refuses fails;
 * parts that are objects (a call's result) are ignored. */
static int dict_setstate(const pk_build_ctx *c, ckpt_value *target, const ckpt_value *state) {
    if (target->dict_class == CKPT_DICT_PLAIN) return builtin_setstate(c, target, state);
    if (target->dict_class != CKPT_DICT_MODULE && state_form(state) == -1)
        return fail(c, CKPT_E_FORMAT,
                    "BUILD: a %s takes None, a dict or a (None or dict, dict) pair as its state "
                    "(Python: state or slot state is not a dictionary)",
                    ckpt_dict_class_name(target->dict_class));
    const ckpt_value *parts[2] = {state, NULL};
    if (state->kind == CKPT_KIND_TUPLE && state->u.seq.n == 2) {
        parts[0] = state->u.seq.items[0];
        parts[1] = state->u.seq.items[1];
        if (parts[0]->kind == CKPT_KIND_NONE) parts[0] = NULL;
    }
    for (size_t i = 0; i < 2; i++)
        if (parts[i] && parts[i]->kind != CKPT_KIND_DICT) return 0;
    for (size_t i = 0; i < 2; i++) {
        const ckpt_value *p = parts[i];
        if (!p || p->u.dict.n == 0) continue;
        int rc = charge(c, p->u.dict.n);
        if (rc) return rc;
        if (!target->u.dict.state &&
            !(target->u.dict.state = ckpt_value_new(c->arena, CKPT_KIND_DICT)))
            return nomem(c);
        for (size_t k = 0; k < p->u.dict.n; k++)
            if (ckpt_value_dict_set(c->arena, target->u.dict.state, p->u.dict.keys[k],
                                    p->u.dict.vals[k]))
                return nomem(c);
    }
    return 0;
}

/* Adds the entries of `from` to the state dict d: a tensor as prefix, or
 * each entry of a module's state dict (already converted: children are
 * built before their parent) as prefix.key, as Module.state_dict() names
 * them. Other values are not part of a state dict. */
static int add_state(const pk_build_ctx *c, ckpt_value *d, const ckpt_value *prefix,
                     ckpt_value *v) {
    if (prefix->kind != CKPT_KIND_STR) return 0;
    if (v->kind == CKPT_KIND_TENSOR)
        return ckpt_value_dict_set(c->arena, d, (ckpt_value *)prefix, v) ? nomem(c) : 0;
    if (v->kind != CKPT_KIND_DICT || v->dict_class != CKPT_DICT_MODULE) return 0;
    int rc = charge(c, v->u.dict.n);
    if (rc) return rc;
    for (size_t i = 0; i < v->u.dict.n; i++) {
        const ckpt_value *k = v->u.dict.keys[i];
        ckpt_value *key = ckpt_value_new(c->arena, CKPT_KIND_STR);
        size_t n = prefix->u.s.len + 1 + k->u.s.len;
        if (!key || !(key->u.s.p = ckpt_arena_alloc(c->arena, n + 1))) return nomem(c);
        memcpy(key->u.s.p, prefix->u.s.p, prefix->u.s.len);
        key->u.s.p[prefix->u.s.len] = '.';
        memcpy(key->u.s.p + prefix->u.s.len + 1, k->u.s.p, k->u.s.len + 1);
        key->u.s.len = n;
        if (ckpt_value_dict_set(c->arena, d, key, v->u.dict.vals[i])) return nomem(c);
    }
    return 0;
}

static int in_set(const ckpt_value *set, const ckpt_value *s) {
    for (size_t i = 0;
         set && (set->kind == CKPT_KIND_SET || set->kind == CKPT_KIND_LIST) && i < set->u.seq.n;
         i++) {
        const ckpt_value *e = set->u.seq.items[i];
        if (e->kind == CKPT_KIND_STR && e->u.s.len == s->u.s.len &&
            !memcmp(e->u.s.p, s->u.s.p, s->u.s.len))
            return 1;
    }
    return 0;
}

/* BUILD of a module object (never run: its class is not imported) becomes
 * its state dict in place, a CKPT_DICT_MODULE dict named as
 * Module.state_dict() names it (FORMATS.md, "whole-model pickles"):
 * - an nn.Module (torch.save(model)): state {'_parameters', '_buffers',
 *   '_modules', ...}: parameters and buffers that are not None, less the
 *   buffers named in _non_persistent_buffers_set, then each child's
 *   entries under its name;
 * - a TorchScript object (class __torch__.*; torch.jit.save's data.pkl):
 *   state {attribute: value}: its tensor attributes and its child objects'
 *   entries, in attribute order (TorchScript keeps parameters, buffers and
 *   submodules as plain attributes; code/ is never read).
 * Returns 1 when converted, 0 when the object is no module, or an error. */
static int module_setstate(const pk_build_ctx *c, ckpt_value *target, const ckpt_value *state) {
    const ckpt_value *params = attr(state, "_parameters"), *bufs = attr(state, "_buffers"),
                     *mods = attr(state, "_modules");
    int script = !strncmp(target->u.obj.name, "__torch__.", 10);
    if (!script && !(params && bufs && mods && params->kind == CKPT_KIND_DICT &&
                     bufs->kind == CKPT_KIND_DICT && mods->kind == CKPT_KIND_DICT))
        return 0;
    if (!state || state->kind != CKPT_KIND_DICT) return 0;
    ckpt_value *d = ckpt_value_new(c->arena, CKPT_KIND_DICT);
    if (!d) return nomem(c);
    d->dict_class = CKPT_DICT_MODULE;
    const ckpt_value *parts[3] = {script ? state : params, script ? NULL : bufs,
                                  script ? NULL : mods};
    const ckpt_value *skip = attr(state, "_non_persistent_buffers_set");
    for (size_t p = 0; p < 3; p++) {
        if (!parts[p]) continue;
        int rc = charge(c, parts[p]->u.dict.n);
        if (rc) return rc;
        for (size_t i = 0; i < parts[p]->u.dict.n; i++) {
            const ckpt_value *k = parts[p]->u.dict.keys[i];
            if (p == 1 && k->kind == CKPT_KIND_STR && in_set(skip, k)) continue;
            if ((rc = add_state(c, d, k, parts[p]->u.dict.vals[i]))) return rc;
        }
    }
    target->kind = CKPT_KIND_DICT;
    target->dict_class = CKPT_DICT_MODULE;
    target->u.dict = d->u.dict;
    return 1;
}

int ckpt_builders_build(const pk_build_ctx *c, ckpt_value *target, ckpt_value *state) {
    switch (target->kind) {
    case CKPT_KIND_DICT: /* OrderedDict: the _metadata attribute */
        return dict_setstate(c, target, state);
    case CKPT_KIND_TENSOR: /* Parameter state, legacy Tensor.set_ */ return 0;
    case CKPT_KIND_OBJECT:
        if (!c->scan_only && !strcmp(target->u.obj.name, "numpy.ndarray")) {
            int rc = np_setstate(c, target, state);
            if (rc) return rc < 0 ? rc : 0;
        }
        if (!c->scan_only) {
            int rc = module_setstate(c, target, state);
            if (rc) return rc < 0 ? rc : 0;
        }
        target->u.obj.state = state;
        return 0;
    default: return builtin_setstate(c, target, state);
    }
}
