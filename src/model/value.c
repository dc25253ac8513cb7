/* value.c - constructors for the object tree and its public accessors. */
#include "model/value.h"

#include <stdio.h>
#include <string.h>

#include "model/dtype.h"
#include "base/error.h"

ckpt_value *ckpt_value_new_int(ckpt_arena *a, int64_t x) {
    ckpt_value *v = ckpt_value_new(a, CKPT_KIND_INT);
    if (v) v->u.i.v = x;
    return v;
}

/* Decimal text of a two's-complement little-endian integer: the magnitude is
 * divided by 10^9 repeatedly (quadratic in n, hence the caller's bound). */
static char *le_to_decimal(ckpt_arena *a, const uint8_t *le, size_t n) {
    int neg = (le[n - 1] & 0x80) != 0;
    size_t words = (n + 3) / 4;
    uint32_t *mag = ckpt_arena_array(a, words, sizeof *mag);
    /* at most 10 digits per 32-bit word, plus sign and NUL */
    char *digits = ckpt_arena_alloc(a, words * 10 + 2);
    if (!mag || !digits) return NULL;
    for (size_t i = 0; i < words * 4; i++) {
        uint8_t byte = i < n ? le[i] : (neg ? 0xFF : 0);
        mag[i / 4] |= (uint32_t)byte << (8 * (i % 4));
    }
    if (neg) { /* two's complement negate */
        uint64_t carry = 1;
        for (size_t i = 0; i < words; i++) {
            uint64_t x = (uint64_t)(uint32_t)~mag[i] + carry;
            mag[i] = (uint32_t)x;
            carry = x >> 32;
        }
    }
    size_t nd = 0, top = words;
    char *rev = digits;
    while (top > 0) {
        uint64_t rem = 0;
        for (size_t i = top; i-- > 0;) {
            uint64_t cur = (rem << 32) | mag[i];
            mag[i] = (uint32_t)(cur / 1000000000u);
            rem = cur % 1000000000u;
        }
        while (top > 0 && mag[top - 1] == 0) top--;
        for (int k = 0; k < 9; k++) {
            rev[nd++] = (char)('0' + rem % 10);
            rem /= 10;
            if (top == 0 && rem == 0) break;
        }
    }
    while (nd > 1 && rev[nd - 1] == '0') nd--;
    if (neg) rev[nd++] = '-';
    for (size_t i = 0; i < nd / 2; i++) {
        char t = rev[i];
        rev[i] = rev[nd - 1 - i];
        rev[nd - 1 - i] = t;
    }
    rev[nd] = '\0';
    return rev;
}

ckpt_value *ckpt_value_new_int_le(ckpt_arena *a, const uint8_t *le, size_t n) {
    ckpt_value *v = ckpt_value_new(a, CKPT_KIND_INT);
    if (!v || n == 0) return v;
    /* fits in int64 when every byte beyond the 8th is pure sign extension */
    int neg = (le[n - 1] & 0x80) != 0;
    size_t sig = n;
    while (sig > 1 && le[sig - 1] == (neg ? 0xFF : 0) && ((le[sig - 2] & 0x80) != 0) == neg) sig--;
    if (sig <= 8) {
        uint64_t u = neg ? UINT64_MAX : 0;
        for (size_t i = 0; i < sig; i++) {
            u &= ~((uint64_t)0xFF << (8 * i));
            u |= (uint64_t)le[i] << (8 * i);
        }
        v->u.i.v = (int64_t)u;
        return v;
    }
    v->u.i.decimal = le_to_decimal(a, le, sig);
    return v->u.i.decimal ? v : NULL;
}

ckpt_value *ckpt_value_new_float(ckpt_arena *a, double x) {
    ckpt_value *v = ckpt_value_new(a, CKPT_KIND_FLOAT);
    if (v) v->u.f = x;
    return v;
}

ckpt_value *ckpt_value_new_bool(ckpt_arena *a, int x) {
    ckpt_value *v = ckpt_value_new(a, CKPT_KIND_BOOL);
    if (v) v->u.b = x != 0;
    return v;
}

ckpt_value *ckpt_value_new_str(ckpt_arena *a, int kind, const void *p, size_t len) {
    ckpt_value *v = ckpt_value_new(a, kind);
    if (!v) return NULL;
    v->u.s.p = ckpt_arena_strndup(a, p, len);
    v->u.s.len = len;
    return v->u.s.p ? v : NULL;
}

ckpt_value *ckpt_value_new_object(ckpt_arena *a, const char *name) {
    ckpt_value *v = ckpt_value_new(a, CKPT_KIND_OBJECT);
    if (!v) return NULL;
    v->u.obj.name = ckpt_arena_strdup(a, name);
    return v->u.obj.name ? v : NULL;
}

ckpt_value *ckpt_value_new_global(ckpt_arena *a, const char *module, const char *name) {
    ckpt_value *v = ckpt_value_new(a, CKPT_KIND_GLOBAL_);
    if (!v) return NULL;
    v->u.global.module = ckpt_arena_strdup(a, module);
    v->u.global.name = ckpt_arena_strdup(a, name);
    v->u.global.qualname = ckpt_arena_printf(a, "%s.%s", module, name);
    if (!v->u.global.module || !v->u.global.name || !v->u.global.qualname) return NULL;
    return v;
}

const char *ckpt_value_kind_name(int kind) {
    switch (kind) {
    case CKPT_KIND_GLOBAL_: return "global";
    case CKPT_KIND_STORAGE_: return "storage";
    case CKPT_KIND_MARK_: return "mark";
    default: return ckpt_kind_name((ckpt_kind)kind);
    }
}

const char *ckpt_dict_class_name(int cls) {
    switch (cls) {
    case CKPT_DICT_ORDERED:
    case CKPT_DICT_MODULE: return "collections.OrderedDict";
    case CKPT_DICT_COUNTER: return "collections.Counter";
    default: return NULL;
    }
}

ckpt_value *ckpt_value_new_like(ckpt_arena *a, const ckpt_value *v) {
    ckpt_value *c = ckpt_value_new(a, v->kind);
    if (c && v->kind == CKPT_KIND_DICT) {
        c->dict_class = v->dict_class;
        c->u.dict.state = v->u.dict.state;
    }
    if (c) c->alt = v->alt;
    return c;
}

int ckpt_value_append(ckpt_arena *a, ckpt_value *seq, ckpt_value *item) {
    if (seq->kind == CKPT_KIND_OBJECT) {
        if (!seq->u.obj.items) {
            seq->u.obj.items = ckpt_value_new(a, CKPT_KIND_LIST);
            if (!seq->u.obj.items) return CKPT_E_NOMEM;
        }
        seq = seq->u.obj.items;
    }
    if (ckpt_arena_grow(a, (void **)&seq->u.seq.items, &seq->u.seq.cap, seq->u.seq.n + 1,
                        sizeof(ckpt_value *)))
        return CKPT_E_NOMEM;
    seq->u.seq.items[seq->u.seq.n++] = item;
    return 0;
}

static int hashable(const ckpt_value *v, unsigned depth, size_t *budget, const char **what) {
    if (!*budget) return CKPT_E_LIMIT;
    --*budget;
    switch (v->kind) {
    case CKPT_KIND_LIST: *what = "list"; return CKPT_E_FORMAT;
    case CKPT_KIND_DICT: /* a module object (hashed by identity) is one too */
        if (v->dict_class == CKPT_DICT_MODULE) return 0;
        *what = "dict";
        return CKPT_E_FORMAT;
    case CKPT_KIND_SET:
        if (v->alt) return 0;
        *what = "set";
        return CKPT_E_FORMAT;
    case CKPT_KIND_BYTES:
        if (!v->alt) return 0;
        *what = "bytearray";
        return CKPT_E_FORMAT;
    case CKPT_KIND_TENSOR: /* a torch tensor hashes by identity, an ndarray not */
        if (!v->u.tensor->is_numpy) return 0;
        *what = "numpy.ndarray";
        return CKPT_E_FORMAT;
    case CKPT_KIND_OBJECT: /* an ndarray before its BUILD; a slice (until Python 3.12) */
        if (strcmp(v->u.obj.name, "numpy.ndarray") && strcmp(v->u.obj.name, "builtins.slice"))
            return 0;
        *what = v->u.obj.name;
        return CKPT_E_FORMAT;
    case CKPT_KIND_TUPLE:
        if (!depth) return CKPT_E_LIMIT;
        for (size_t i = 0; i < v->u.seq.n; i++) {
            int rc = hashable(v->u.seq.items[i], depth - 1, budget, what);
            if (rc) return rc;
        }
        return 0;
    default: return 0;
    }
}

int ckpt_value_hashable(const ckpt_value *v, const char *as, char *msg, size_t cap) {
    size_t budget = 65536;
    const char *what = "tuple";
    int rc = hashable(v, 1000, &budget, &what);
    if (rc == CKPT_E_LIMIT)
        snprintf(msg, cap,
                 "a %s that is a tuple nested deeper than 1000 or holding more than 65536 "
                 "values (through the memo)",
                 as);
    else if (rc)
        snprintf(msg, cap, "expected a hashable %s, got a %s%s", as, what,
                 v->kind == CKPT_KIND_TUPLE ? " inside a tuple" : "");
    return rc;
}

int ckpt_value_key_check(const ckpt_value *k, char *msg, size_t cap) {
    if (k->kind != CKPT_KIND_STR && k->kind != CKPT_KIND_BYTES) return 0;
    int surrogate = k->kind == CKPT_KIND_STR && k->dict_class == CKPT_STR_SURROGATE;
    if (!surrogate && !memchr(k->u.s.p, 0, k->u.s.len)) return 0;
    char shown[80];
    size_t o = 0;
    for (size_t i = 0; i < k->u.s.len && o + 8 < sizeof shown; i++) {
        unsigned char c = (unsigned char)k->u.s.p[i];
        if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'')
            shown[o++] = (char)c;
        else
            o += (size_t)snprintf(shown + o, sizeof shown - o, "\\x%02x", c);
    }
    shown[o] = '\0';
    snprintf(msg, cap,
             "dict key %s'%s'%s holds %s: Python keeps the whole %s, ckpt's names %s, so two "
             "such keys could show as one; refused",
             k->kind == CKPT_KIND_BYTES ? "b" : "", shown, o + 8 >= sizeof shown ? "..." : "",
             surrogate ? "a lone surrogate (here U+FFFD, \\xef\\xbf\\xbd)" : "a NUL byte",
             k->kind == CKPT_KIND_BYTES ? "bytes" : "str",
             surrogate ? "are UTF-8" : "end at a NUL");
    return CKPT_E_UNSUPPORTED;
}

/* A bool, a 64-bit int or a float as Python compares numbers: an
 * integral value as an int (is_int), else a double. 0 when v is none. */
static int number_of(const ckpt_value *v, int64_t *i, double *f, int *is_int) {
    switch (v->kind) {
    case CKPT_KIND_BOOL: *i = v->u.b != 0, *is_int = 1; return 1;
    case CKPT_KIND_INT:
        if (v->u.i.decimal) return 0; /* beyond 64 bits: equal to no float key here */
        *i = v->u.i.v, *is_int = 1;
        return 1;
    case CKPT_KIND_FLOAT:
        *f = v->u.f;
        *is_int =
            *f >= -9223372036854775808.0 && *f < 9223372036854775808.0 && *f == (double)(int64_t)*f;
        if (*is_int) *i = (int64_t)*f;
        return 1;
    default: return 0;
    }
}

int ckpt_value_key_equal(const ckpt_value *x, const ckpt_value *y, size_t *budget) {
    int64_t xi = 0, yi = 0;
    double xf = 0, yf = 0;
    int xint = 0, yint = 0;
    if (x == y) return 1;
    if (!*budget) return 0;
    --*budget;
    if (number_of(x, &xi, &xf, &xint) && number_of(y, &yi, &yf, &yint))
        return xint ? yint && xi == yi : !yint && xf == yf; /* NaN != NaN */
    if (x->kind != y->kind) return 0;
    switch (x->kind) {
    case CKPT_KIND_NONE: return 1;
    case CKPT_KIND_INT: /* both beyond 64 bits */
        return strcmp(ckpt_value_int_decimal(x), ckpt_value_int_decimal(y)) == 0;
    case CKPT_KIND_STR: /* a torch.device is no str */
        if (x->dict_class != y->dict_class) return 0;
        /* fall through */
    case CKPT_KIND_BYTES:
        return x->u.s.len == y->u.s.len && !memcmp(x->u.s.p, y->u.s.p, x->u.s.len);
    case CKPT_KIND_TUPLE:
        if (x->u.seq.n != y->u.seq.n) return 0;
        for (size_t i = 0; i < x->u.seq.n; i++)
            if (!ckpt_value_key_equal(x->u.seq.items[i], y->u.seq.items[i], budget)) return 0;
        return 1;
    default: return 0; /* objects hash by identity; a frozenset is told apart (listed twice) */
    }
}

/* A DICT's alt beyond bit 0 (a bool or float key: ckpt_value.alt, set by
 * its builders): which kinds of number key it holds, kept by
 * ckpt_value_dict_set once it has seen every key (KEYS_SEEN: set at the
 * first key; a builder's plain `alt = 1` clears it, and every key is
 * compared again). A key has a twin only among keys of another kind, so
 * a dict of 100k int keys and one True compares none (0 and 1 aside):
 * before, each int key was compared with every earlier key, quadratic,
 * and refused at max_pickle_ops. */
enum { KEY_BOOL = 2, KEY_INTEGRAL_FLOAT = 4, KEY_INT = 8, KEYS_SEEN = 0x80 };

/* Whether a key of d can equal number k (integral, value ki) under
 * another name, from the kinds of d's keys. */
static int twin_possible(const ckpt_value *d, const ckpt_value *k, int64_t ki) {
    unsigned seen = d->alt;
    int small = ki == 0 || ki == 1; /* False and True */
    if (!(seen & KEYS_SEEN)) return 1;
    switch (k->kind) {
    case CKPT_KIND_BOOL: return (seen & (KEY_INT | KEY_INTEGRAL_FLOAT)) != 0;
    case CKPT_KIND_INT: return (small && (seen & KEY_BOOL)) || (seen & KEY_INTEGRAL_FLOAT);
    default: /* an integral float: 0.0 and -0.0 are two names of one key */
        return (seen & KEY_INT) || (small && (seen & KEY_BOOL)) ||
               (ki == 0 && (seen & KEY_INTEGRAL_FLOAT));
    }
}

size_t ckpt_value_dict_twin(const ckpt_value *d, const ckpt_value *k, uint64_t *work) {
    int64_t ki, xi;
    double kf, xf;
    int kint, xint;
    if (d->kind != CKPT_KIND_DICT || !number_of(k, &ki, &kf, &kint)) return SIZE_MAX;
    if (!d->alt && k->kind == CKPT_KIND_INT) return SIZE_MAX;
    /* a float that is not integral equals only floats of its text (NaN
     * none): one name, told apart when flattened, so no scan, which
     * made a dict of 100k such keys quadratic (refused at max_ops) */
    if (!kint || !twin_possible(d, k, ki)) return SIZE_MAX;
    *work += d->u.dict.n;
    for (size_t j = 0; j < d->u.dict.n; j++) {
        const ckpt_value *x = d->u.dict.keys[j];
        if (!number_of(x, &xi, &xf, &xint) || (x->kind == k->kind && k->kind != CKPT_KIND_FLOAT))
            continue; /* equal ints or bools have one name already */
        if (kint ? xint && xi == ki : !xint && xf == kf) return j;
    }
    return SIZE_MAX;
}

/* The kinds of number key d holds (see KEYS_SEEN), with key. */
static void note_key(ckpt_value *d, const ckpt_value *key) {
    int64_t i;
    double f;
    int integral;
    if (d->u.dict.n == 0) d->alt |= KEYS_SEEN;
    if (!number_of(key, &i, &f, &integral) || !integral) return;
    d->alt |= key->kind == CKPT_KIND_BOOL  ? KEY_BOOL
              : key->kind == CKPT_KIND_INT ? KEY_INT
                                           : KEY_INTEGRAL_FLOAT;
}

int ckpt_value_dict_set(ckpt_arena *a, ckpt_value *d, ckpt_value *key, ckpt_value *val) {
    if (d->kind == CKPT_KIND_OBJECT) {
        if (!d->u.obj.items) {
            d->u.obj.items = ckpt_value_new(a, CKPT_KIND_DICT);
            if (!d->u.obj.items) return CKPT_E_NOMEM;
        }
        d = d->u.obj.items;
    }
    size_t cap = d->u.dict.cap;
    if (ckpt_arena_grow(a, (void **)&d->u.dict.keys, &cap, d->u.dict.n + 1, sizeof(ckpt_value *)))
        return CKPT_E_NOMEM;
    cap = d->u.dict.cap;
    if (ckpt_arena_grow(a, (void **)&d->u.dict.vals, &cap, d->u.dict.n + 1, sizeof(ckpt_value *)))
        return CKPT_E_NOMEM;
    d->u.dict.cap = cap;
    if (d->kind == CKPT_KIND_DICT) note_key(d, key);
    d->u.dict.keys[d->u.dict.n] = key;
    d->u.dict.vals[d->u.dict.n++] = val;
    return 0;
}

/* n rounded up to the arena's alignment */
#define ALIGN16(n) (((n) + 15u) & ~(size_t)15u)

int ckpt_tensor_new(ckpt_value **out, ckpt_arena *a, ckpt_storage *st, ckpt_dtype dtype,
                    uint32_t ndim, const uint64_t *shape, const uint64_t *stride,
                    uint64_t storage_offset, const char *file, const char *member,
                    uint64_t offset) {
    *out = NULL;
    unsigned bits = ckpt_dtype_bits(dtype);
    if (bits == 0) return ckpt_err(CKPT_E_FORMAT, file, member, offset, "unknown dtype");
    if (ndim > CKPT_MAX_NDIM)
        return ckpt_err(CKPT_E_LIMIT, file, member, offset,
                        "tensor has %u dimensions, at most %d supported", ndim, CKPT_MAX_NDIM);
    uint64_t numel = 1, last = storage_offset, nbits, total_bits, end_bits;
    for (uint32_t i = 0; i < ndim; i++)
        if (ckpt_mul_overflow(numel, shape[i], &numel))
            return ckpt_err(CKPT_E_FORMAT, file, member, offset,
                            "tensor shape overflows 64 bits at dimension %u", i);
    if (ckpt_mul_overflow(numel, bits, &nbits) || nbits % 8)
        return ckpt_err(CKPT_E_FORMAT, file, member, offset,
                        "tensor of %llu %s elements is not a whole number of bytes",
                        (unsigned long long)numel, ckpt_dtype_name(dtype));
    if (numel > 0) {
        /* highest element index the view touches */
        for (uint32_t i = 0; i < ndim; i++) {
            uint64_t span;
            if (ckpt_mul_overflow(shape[i] - 1, stride[i], &span) ||
                ckpt_add_overflow(last, span, &last))
                return ckpt_err(CKPT_E_FORMAT, file, member, offset,
                                "tensor view overflows 64 bits");
        }
        if (ckpt_add_overflow(last, 1, &end_bits) ||
            ckpt_mul_overflow(end_bits, bits, &total_bits) || total_bits > st->nbytes * 8 ||
            st->nbytes > UINT64_MAX / 8)
            return ckpt_err(CKPT_E_FORMAT, file, member, offset,
                            "tensor view (offset %llu, %llu elements of %s) "
                            "reaches past its storage of %llu bytes",
                            (unsigned long long)storage_offset, (unsigned long long)numel,
                            ckpt_dtype_name(dtype), (unsigned long long)st->nbytes);
    }
    /* the tensor, its value, shape and stride in one allocation: a state
     * dict of a million one-dimensional tensors holds a million of each
     * (the arena's total grows as by three, each size a multiple of the
     * alignment) */
    enum { AT_V = ALIGN16(sizeof(ckpt_tensor)), AT_SH = AT_V + ALIGN16(sizeof(ckpt_value)) };
    size_t dims = ndim ? ndim : 1; /* <= CKPT_MAX_NDIM: checked */
    char *block = ckpt_arena_alloc_raw(a, AT_SH + 2 * dims * sizeof(uint64_t));
    if (!block) return ckpt_err(CKPT_E_NOMEM, file, member, offset, "out of memory");
    memset(block, 0, AT_SH);
    ckpt_tensor *t = (ckpt_tensor *)block;
    ckpt_value *v = (ckpt_value *)(block + AT_V);
    uint64_t *sh = (uint64_t *)(block + AT_SH), *sd = sh + dims;
    v->kind = CKPT_KIND_TENSOR;
    if (!ndim) sh[0] = sd[0] = 0;
    if (ndim) {
        memcpy(sh, shape, ndim * sizeof *sh);
        memcpy(sd, stride, ndim * sizeof *sd);
    }
    t->name = "";
    t->dtype = dtype;
    t->ndim = (uint8_t)ndim; /* <= CKPT_MAX_NDIM: checked */
    t->shape = sh;
    t->stride = sd;
    t->storage_offset = storage_offset;
    t->numel = numel;
    t->nbytes = nbits / 8;
    t->storage = st;
    v->u.tensor = t;
    *out = v;
    return 0;
}

const char *ckpt_value_key_text(const ckpt_value *k, char *tmp, size_t cap, size_t *len) {
    switch (k->kind) {
    case CKPT_KIND_STR:
    case CKPT_KIND_BYTES: *len = k->u.s.len; return k->u.s.p;
    case CKPT_KIND_INT: {
        const char *d = ckpt_value_int_decimal(k);
        *len = strlen(d);
        return d;
    }
    case CKPT_KIND_BOOL: *len = k->u.b ? 4 : 5; return k->u.b ? "True" : "False";
    case CKPT_KIND_NONE: *len = 4; return "None";
    case CKPT_KIND_FLOAT: {
        int n = snprintf(tmp, cap, "%.17g", k->u.f);
        *len = n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
        return tmp;
    }
    default: {
        const char *kind = ckpt_kind_name(ckpt_value_kind(k));
        *len = strlen(kind);
        return kind;
    }
    }
}

/* ---------------------------------------------------------------- public */

ckpt_kind ckpt_value_kind(const ckpt_value *v) {
    return v->kind < CKPT_KIND_GLOBAL_ ? (ckpt_kind)v->kind : CKPT_KIND_OBJECT;
}

const char *ckpt_kind_name(ckpt_kind k) {
    static const char *names[] = {"none", "bool",  "int",  "float", "str",    "bytes",
                                  "list", "tuple", "dict", "set",   "tensor", "object"};
    return (unsigned)k < sizeof names / sizeof *names ? names[k] : "unknown";
}

int ckpt_value_bool(const ckpt_value *v, int *out) {
    if (v->kind != CKPT_KIND_BOOL) return CKPT_E_INVALID_ARG;
    *out = v->u.b ? 1 : 0;
    return 0;
}

int ckpt_value_int(const ckpt_value *v, int64_t *out) {
    if (v->kind != CKPT_KIND_INT) return CKPT_E_INVALID_ARG;
    if (v->u.i.decimal) return CKPT_E_LIMIT;
    *out = v->u.i.v;
    return 0;
}

const char *ckpt_value_int_decimal(const ckpt_value *v) {
    if (v->kind != CKPT_KIND_INT) return NULL;
    if (v->u.i.decimal) return v->u.i.decimal;
    /* small ints get their text on demand; the buffer is per value kind of
     * thing we cannot allocate from a const tree, so use a thread-local ring */
    static _Thread_local char ring[8][24];
    static _Thread_local unsigned slot;
    char *buf = ring[slot++ % 8];
    int64_t x = v->u.i.v;
    uint64_t m = x < 0 ? (uint64_t)0 - (uint64_t)x : (uint64_t)x;
    char tmp[24];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + m % 10);
        m /= 10;
    } while (m);
    size_t k = 0;
    if (x < 0) buf[k++] = '-';
    while (n) buf[k++] = tmp[--n];
    buf[k] = '\0';
    return buf;
}

int ckpt_value_float(const ckpt_value *v, double *out) {
    if (v->kind != CKPT_KIND_FLOAT) return CKPT_E_INVALID_ARG;
    *out = v->u.f;
    return 0;
}

const char *ckpt_value_str(const ckpt_value *v, size_t *len) {
    if (v->kind != CKPT_KIND_STR && v->kind != CKPT_KIND_BYTES) return NULL;
    if (len) *len = v->u.s.len;
    return v->u.s.p;
}

size_t ckpt_value_len(const ckpt_value *v) {
    switch (v->kind) {
    case CKPT_KIND_LIST:
    case CKPT_KIND_TUPLE:
    case CKPT_KIND_SET: return v->u.seq.n;
    case CKPT_KIND_DICT: return v->u.dict.n;
    default: return 0;
    }
}

const ckpt_value *ckpt_value_item(const ckpt_value *v, size_t i) {
    if (i >= ckpt_value_len(v)) return NULL;
    return v->kind == CKPT_KIND_DICT ? v->u.dict.vals[i] : v->u.seq.items[i];
}

const ckpt_value *ckpt_value_key(const ckpt_value *v, size_t i) {
    if (v->kind != CKPT_KIND_DICT || i >= v->u.dict.n) return NULL;
    return v->u.dict.keys[i];
}

const ckpt_tensor *ckpt_value_tensor(const ckpt_value *v) {
    return v->kind == CKPT_KIND_TENSOR ? v->u.tensor : NULL;
}

const char *ckpt_value_dict_class(const ckpt_value *v) {
    return v->kind == CKPT_KIND_DICT ? ckpt_dict_class_name(v->dict_class) : NULL;
}

const ckpt_value *ckpt_value_dict_state(const ckpt_value *v) {
    return v->kind == CKPT_KIND_DICT ? v->u.dict.state : NULL;
}

int ckpt_tensor_is_parameter(const ckpt_tensor *t) { return t->is_parameter; }

int ckpt_tensor_is_numpy(const ckpt_tensor *t) { return t->is_numpy; }

int ckpt_tensor_requires_grad(const ckpt_tensor *t) { return t->requires_grad; }

int ckpt_value_is_frozenset(const ckpt_value *v) { return v->kind == CKPT_KIND_SET && v->alt; }

const char *ckpt_value_class(const ckpt_value *v) {
    if (!v->alt) return NULL;
    switch (v->kind) {
    case CKPT_KIND_SET: return "builtins.frozenset";
    case CKPT_KIND_TUPLE: return "torch.Size";
    case CKPT_KIND_STR: return "torch.device";
    case CKPT_KIND_BYTES: return "builtins.bytearray";
    default: return NULL;
    }
}

ckpt_dtype ckpt_value_numpy_dtype(const ckpt_value *v) {
    int scalar =
        v->kind == CKPT_KIND_BOOL || v->kind == CKPT_KIND_INT || v->kind == CKPT_KIND_FLOAT;
    return scalar ? (ckpt_dtype)v->np_dtype : CKPT_DT_UNKNOWN;
}

const char *ckpt_value_object_name(const ckpt_value *v) {
    if (v->kind == CKPT_KIND_OBJECT) return v->u.obj.name;
    /* internal kinds show as objects: a global reference left as a leaf
     * (e.g. a torch dtype) is named by its qualname */
    if (v->kind == CKPT_KIND_GLOBAL_) return v->u.global.qualname;
    if (v->kind == CKPT_KIND_STORAGE_) return "torch.storage";
    if (v->kind == CKPT_KIND_MARK_) return "pickle.mark";
    return NULL;
}

const ckpt_value *ckpt_value_object_args(const ckpt_value *v) {
    return v->kind == CKPT_KIND_OBJECT ? v->u.obj.args : NULL;
}

const ckpt_value *ckpt_value_object_state(const ckpt_value *v) {
    return v->kind == CKPT_KIND_OBJECT ? v->u.obj.state : NULL;
}
