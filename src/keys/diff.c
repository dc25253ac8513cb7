/* diff.c - ckpt_diff: two checkpoints compared key by key and value by
 * value, tensors and the other leaves of their trees (see ckpt.h for the
 * exact rules).
 *
 * Tensor values stream: a memcmp over each pair of tensors first, window
 * by window (read with pread through model/tensor.h, never through the
 * mapping), and only tensors whose bytes differ, or whose dtypes differ,
 * are read again, decoded to double in blocks and compared element by
 * element.
 *
 * A safetensors file written by ckpt is compared as the tree it records
 * (ckpt_manifest_logical), so a .pt and its conversion compare equal,
 * epoch and learning rate included. When the key sets differ by a rewrite
 * ckpt_match would infer (a wrapper prefix, a training checkpoint's model
 * entry), the result names it, and normalize applies it to B's keys. */
#include <fnmatch.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/dtype.h"
#include "base/error.h"
#include "model/file.h"
#include "model/tensor.h"
#include "keys/keys.h"
#include "format/write.h"

#define NLISTS 4
#define NVLISTS 3
#define MAX_RULES 8
#define BLOCK 4096               /* components decoded at a time */
#define WINDOW ((size_t)4 << 20) /* bytes per side read at a time */

typedef struct pair {
    const char *name;
    const ckpt_manifest_entry *a, *b;
    const char *tied_to; /* one side's key only: the key both have it is tied to */
} pair;

/* B as compared: each key's partner in A, and the names B's keys and
 * values go by (rewritten under normalize). */
typedef struct bside {
    const ckpt_manifest *m;
    size_t *b2a;        /* per key: A's entry or CKPT_KEYS_NONE */
    const char **names; /* per key, or NULL: the keys' own names */
    const ckpt_named_value *values;
    size_t nvalues;
    unsigned char *outside; /* per key, or NULL: in a top-level entry the
                               applied rewrite leaves out (not compared) */
} bside;

struct ckpt_diff_result {
    ckpt_arena arena;
    int identical;
    pair *lists[NLISTS];
    size_t counts[NLISTS], caps[NLISTS];
    ckpt_tensor_diff *tensors;
    size_t ntensors, tcap;
    uint64_t equal;
    ckpt_value_diff *vlists[NVLISTS];
    size_t vcounts[NVLISTS], vcaps[NVLISTS];
    uint64_t vequal;
    int has_rewrite;
    ckpt_rewrite rewrite;
    const char *note;
    const char *a_entry; /* A's top-level entry holding B (an applied
                            rewrite adding it): A's others are left out */
    size_t a_entry_len;
    ckpt_manifest *owned[2]; /* logical trees of A and B */
};

static int push(ckpt_diff_result *r, ckpt_diff_list l, const char *name,
                const ckpt_manifest_entry *a, const ckpt_manifest_entry *b) {
    if (ckpt_arena_grow(&r->arena, (void **)&r->lists[l], &r->caps[l], r->counts[l] + 1,
                        sizeof(pair)))
        return ckpt_err_nomem();
    r->lists[l][r->counts[l]++] = (pair){name, a, b, NULL};
    return 0;
}

static int same_shape(const ckpt_manifest_entry *a, const ckpt_manifest_entry *b) {
    return a->ndim == b->ndim && memcmp(a->shape, b->shape, a->ndim * sizeof *a->shape) == 0;
}

/* ------------------------------------------------------------ decoding */

enum { K_NONE, K_FLOAT, K_COMPLEX, K_INT };

/* How elements of a dtype become doubles. */
typedef struct codec {
    ckpt_dtype dt;
    int kind;
    unsigned size;     /* bytes per component */
    double table[256]; /* 8-bit floats */
} codec;

/* An 8-bit float with `mbits` mantissa bits and exponent bias `bias`.
 * style 0: IEEE-like (max exponent: inf/NaN, E5M2); 1: "fn" (only
 * S.1111.111 is NaN, no inf, E4M3); 2: "fnuz" (0x80 is NaN, no inf, no -0). */
static double minifloat(unsigned v, unsigned mbits, int bias, int style) {
    unsigned ebits = 7 - mbits, emax = (1u << ebits) - 1, mmax = (1u << mbits) - 1;
    unsigned s = v >> 7, e = (v >> mbits) & emax, m = v & mmax;
    if (style == 2 && v == 0x80) return NAN;
    if (style == 1 && e == emax && m == mmax) return NAN;
    if (style == 0 && e == emax) return m ? NAN : (s ? -INFINITY : INFINITY);
    double frac = (double)m / (double)(1u << mbits);
    double mag = e ? ldexp(1.0 + frac, (int)e - bias) : ldexp(frac, 1 - bias);
    return s ? -mag : mag;
}

static void codec_init(codec *c, ckpt_dtype dt) {
    c->dt = dt;
    c->kind = K_FLOAT;
    c->size = ckpt_dtype_size(dt);
    switch (dt) {
    case CKPT_DT_F16:
    case CKPT_DT_BF16:
    case CKPT_DT_F32:
    case CKPT_DT_F64: break;
    case CKPT_DT_C32:
    case CKPT_DT_C64:
    case CKPT_DT_C128:
        c->kind = K_COMPLEX;
        c->size /= 2;
        break;
    case CKPT_DT_BOOL:
    case CKPT_DT_U8:
    case CKPT_DT_I8:
    case CKPT_DT_I16:
    case CKPT_DT_U16:
    case CKPT_DT_I32:
    case CKPT_DT_U32:
    case CKPT_DT_I64:
    case CKPT_DT_U64: c->kind = K_INT; break;
    case CKPT_DT_F8_E4M3:
        for (unsigned v = 0; v < 256; v++) c->table[v] = minifloat(v, 3, 7, 1);
        break;
    case CKPT_DT_F8_E5M2:
        for (unsigned v = 0; v < 256; v++) c->table[v] = minifloat(v, 2, 15, 0);
        break;
    case CKPT_DT_F8_E4M3FNUZ:
        for (unsigned v = 0; v < 256; v++) c->table[v] = minifloat(v, 3, 8, 2);
        break;
    case CKPT_DT_F8_E5M2FNUZ:
        for (unsigned v = 0; v < 256; v++) c->table[v] = minifloat(v, 2, 16, 2);
        break;
    case CKPT_DT_F8_E8M0: /* a power of two, no sign; 0xff is NaN */
        for (unsigned v = 0; v < 256; v++) c->table[v] = v == 255 ? NAN : ldexp(1.0, (int)v - 127);
        break;
    default: /* F4, F6_*, quantized: compared bitwise only */ c->kind = K_NONE; break;
    }
}

static float bits_to_float(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static double half_to_double(uint16_t h) {
    uint32_t s = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    float mag;
    if (e == 0)
        mag = (float)m * 0x1p-24f; /* subnormal: exact in float */
    else if (e == 31)
        mag = m ? NAN : INFINITY;
    else
        mag = bits_to_float(((e - 15 + 127) << 23) | (m << 13));
    return s ? -(double)mag : (double)mag;
}

/* Little-endian loads (the tensor reader's output is LE): one
 * memcpy on little-endian hosts, which compilers turn into a plain load. */
static uint64_t load(const uint8_t *p, unsigned n) {
    uint64_t v = 0;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(&v, p, n);
#else
    for (unsigned i = n; i-- > 0;) v = v << 8 | p[i];
#endif
    return v;
}

static uint32_t load32(const uint8_t *p) { return (uint32_t)load(p, 4); }
static uint16_t load16(const uint8_t *p) { return (uint16_t)load(p, 2); }

/* Decodes n components starting at p into out. */
static void decode(const codec *c, const uint8_t *p, size_t n, double *out) {
    size_t i;
    switch (c->dt) {
    case CKPT_DT_F32:
    case CKPT_DT_C64:
        for (i = 0; i < n; i++) out[i] = bits_to_float(load32(p + 4 * i));
        break;
    case CKPT_DT_F64:
    case CKPT_DT_C128:
        for (i = 0; i < n; i++) {
            uint64_t u = load(p + 8 * i, 8);
            memcpy(&out[i], &u, 8);
        }
        break;
    case CKPT_DT_F16:
    case CKPT_DT_C32:
        for (i = 0; i < n; i++) out[i] = half_to_double(load16(p + 2 * i));
        break;
    case CKPT_DT_BF16:
        for (i = 0; i < n; i++) out[i] = bits_to_float((uint32_t)load16(p + 2 * i) << 16);
        break;
    case CKPT_DT_BOOL:
        for (i = 0; i < n; i++) out[i] = p[i] != 0;
        break;
    case CKPT_DT_U8:
    case CKPT_DT_U16:
    case CKPT_DT_U32:
    case CKPT_DT_U64:
        for (i = 0; i < n; i++) out[i] = (double)load(p + c->size * i, c->size);
        break;
    case CKPT_DT_I8:
    case CKPT_DT_I16:
    case CKPT_DT_I32:
    case CKPT_DT_I64:
        for (i = 0; i < n; i++) {
            unsigned bits = 8 * c->size;
            uint64_t u = load(p + c->size * i, c->size);
            /* sign-extend from `bits` */
            int64_t v = bits == 64
                            ? (int64_t)u
                            : (int64_t)(u ^ (1ull << (bits - 1))) - (int64_t)(1ull << (bits - 1));
            out[i] = (double)v;
        }
        break;
    default: /* 8-bit floats */
        for (i = 0; i < n; i++) out[i] = c->table[p[i]];
        break;
    }
}

/* ------------------------------------------------------------ values */

typedef struct cmp_state {
    double atol, rtol;
    int exact_ints;          /* same integer dtype: raw bytes decide equality */
    unsigned per;            /* components per element */
    uint64_t last_differing; /* element last counted as differing, +1 */
    uint64_t last_noted;     /* element last counted as a NaN/Inf mismatch, +1 */
} cmp_state;

/* Counts a NaN/Inf disagreement once per element (complex elements have
 * two components) and keeps the first positions. */
static void note_position(ckpt_tensor_diff *d, cmp_state *st, uint64_t elem) {
    if (st->last_noted == elem + 1) return;
    st->last_noted = elem + 1;
    d->nonfinite_mismatch++;
    if (d->npositions < CKPT_DIFF_MAX_POSITIONS) d->positions[d->npositions++] = elem;
}

static void differ(ckpt_tensor_diff *d, cmp_state *st, uint64_t elem) {
    if (st->last_differing != elem + 1) {
        d->differing++;
        st->last_differing = elem + 1;
    }
}

/* Compares n decoded components starting at component index `first`. The
 * common cases go first: equal values, then finite differences. */
static void compare_block(ckpt_tensor_diff *d, cmp_state *st, const double *a, const double *b,
                          const uint8_t *ra, const uint8_t *rb, unsigned size, size_t n,
                          uint64_t first) {
    uint64_t nan_a = 0, nan_b = 0, inf_a = 0, inf_b = 0;
    for (size_t i = 0; i < n; i++) { /* branch-free: vectorizes */
        nan_a += (uint64_t)(a[i] != a[i]);
        nan_b += (uint64_t)(b[i] != b[i]);
        inf_a += (uint64_t)(fabs(a[i]) == INFINITY);
        inf_b += (uint64_t)(fabs(b[i]) == INFINITY);
    }
    d->nan_a += nan_a;
    d->nan_b += nan_b;
    d->inf_a += inf_a;
    d->inf_b += inf_b;
    int exact = st->atol == 0 && st->rtol == 0;
    for (size_t i = 0; i < n; i++) {
        double x = a[i], y = b[i];
        if (st->exact_ints) {
            /* integers that differ beyond double precision still differ */
            if (memcmp(ra + i * size, rb + i * size, size) == 0) continue;
        } else if (x == y) {
            continue; /* equal values: 0.0 and -0.0, the same infinity */
        }
        uint64_t elem = (first + i) / st->per;
        if (x != x || y != y) { /* NaN equals NaN only */
            if (!(x != x && y != y)) {
                differ(d, st, elem);
                note_position(d, st, elem);
            }
            continue;
        }
        if (isinf(x) || isinf(y)) { /* x != y: infinitely far apart */
            d->max_abs_diff = INFINITY;
            d->max_rel_diff = INFINITY;
            differ(d, st, elem);
            note_position(d, st, elem);
            continue;
        }
        double diff = fabs(x - y);
        double rel = y != 0 ? diff / fabs(y) : INFINITY;
        if (diff > d->max_abs_diff) d->max_abs_diff = diff;
        if (rel > d->max_rel_diff) d->max_rel_diff = rel;
        if (exact || !(diff <= st->atol + st->rtol * fabs(y))) differ(d, st, elem);
    }
}

/* NaN and Inf among n components of identical bytes (both sides), from
 * the bits: equal blocks need no decoding. */
static void count_nonfinite(const codec *c, const uint8_t *p, size_t n, uint64_t *nan,
                            uint64_t *inf) {
    uint64_t nn = 0, ni = 0;
    size_t i;
    switch (c->dt) {
    case CKPT_DT_F32:
    case CKPT_DT_C64:
        for (i = 0; i < n; i++) {
            uint32_t u = load32(p + 4 * i);
            int special = (u & 0x7f800000u) == 0x7f800000u, mant = (u & 0x007fffffu) != 0;
            nn += (uint64_t)(special & mant);
            ni += (uint64_t)(special & !mant);
        }
        break;
    case CKPT_DT_F64:
    case CKPT_DT_C128:
        for (i = 0; i < n; i++) {
            uint64_t u = load(p + 8 * i, 8);
            int special = (u & 0x7ff0000000000000u) == 0x7ff0000000000000u;
            int mant = (u & 0x000fffffffffffffu) != 0;
            nn += (uint64_t)(special & mant);
            ni += (uint64_t)(special & !mant);
        }
        break;
    case CKPT_DT_F16:
    case CKPT_DT_C32:
    case CKPT_DT_BF16: {
        uint16_t exp = c->dt == CKPT_DT_BF16 ? 0x7f80u : 0x7c00u;
        for (i = 0; i < n; i++) {
            uint16_t u = load16(p + 2 * i);
            int special = (u & exp) == exp, mant = (u & (uint16_t)(~exp & 0x7fffu)) != 0;
            nn += (uint64_t)(special & mant);
            ni += (uint64_t)(special & !mant);
        }
        break;
    }
    default:
        if (c->kind == K_FLOAT) /* 8-bit floats */
            for (i = 0; i < n; i++) {
                nn += (uint64_t)isnan(c->table[p[i]]);
                ni += (uint64_t)isinf(c->table[p[i]]);
            }
        break; /* integers have none */
    }
    *nan += nn;
    *inf += ni;
}

/* n elements of a 32- or 16-bit float dtype as floats (exact). */
static void decode_float(ckpt_dtype dt, const uint8_t *p, size_t n, float *out) {
    size_t i;
    if (dt == CKPT_DT_F32)
        for (i = 0; i < n; i++) out[i] = bits_to_float(load32(p + 4 * i));
    else if (dt == CKPT_DT_BF16)
        for (i = 0; i < n; i++) out[i] = bits_to_float((uint32_t)load16(p + 2 * i) << 16);
    else
        for (i = 0; i < n; i++) out[i] = (float)half_to_double(load16(p + 2 * i));
}

/* Same float dtype (F32, BF16, F16), n elements, no NaN or Inf on either
 * side: compared as floats in one loop without branches, which the
 * compiler vectorizes. Only the difference is taken in double (exact for
 * two floats' values up to rounding of the sum, as the double path). */
static void compare_finite_floats(ckpt_tensor_diff *d, const cmp_state *st, const float *a,
                                  const float *b, size_t n) {
    int exact = st->atol == 0 && st->rtol == 0;
    double max_abs = d->max_abs_diff, max_rel = d->max_rel_diff;
    uint64_t differing = 0;
    for (size_t i = 0; i < n; i++) {
        double x = a[i], y = b[i], ay = fabs(y);
        double diff = fabs(x - y);
        /* equal values have diff 0: no relative difference, not even at 0 */
        double rel = ay != 0 ? diff / ay : diff != 0 ? INFINITY : 0;
        max_abs = diff > max_abs ? diff : max_abs;
        max_rel = rel > max_rel ? rel : max_rel;
        differing += (uint64_t)(exact ? x != y : !(diff <= st->atol + st->rtol * ay));
    }
    d->max_abs_diff = max_abs;
    d->max_rel_diff = max_rel;
    d->differing += differing;
}

static int is_float32_or_16(ckpt_dtype dt) {
    return dt == CKPT_DT_F32 || dt == CKPT_DT_BF16 || dt == CKPT_DT_F16;
}

/* Compares n components starting at component `first`, pa/pb holding
 * their bytes; buf holds 2 x BLOCK doubles. */
static void compare_values(ckpt_tensor_diff *d, cmp_state *st, const uint8_t *pa, const uint8_t *pb,
                           uint64_t n, uint64_t first, const codec *ca, const codec *cb,
                           double *buf) {
    int same_dtype = ca->dt == cb->dt;
    for (uint64_t c = 0; c < n; c += BLOCK) {
        size_t k = (size_t)(n - c < BLOCK ? n - c : BLOCK);
        const uint8_t *ra = pa + c * ca->size, *rb = pb + c * cb->size;
        /* a tensor that differs in a few places is mostly equal blocks */
        if (same_dtype && memcmp(ra, rb, k * ca->size) == 0) {
            uint64_t nan = 0, inf = 0;
            count_nonfinite(ca, ra, k, &nan, &inf);
            d->nan_a += nan;
            d->nan_b += nan;
            d->inf_a += inf;
            d->inf_b += inf;
            continue;
        }
        if (same_dtype && is_float32_or_16(ca->dt)) {
            uint64_t nan_a = 0, inf_a = 0, nan_b = 0, inf_b = 0;
            count_nonfinite(ca, ra, k, &nan_a, &inf_a);
            count_nonfinite(cb, rb, k, &nan_b, &inf_b);
            if (nan_a + inf_a + nan_b + inf_b == 0) {
                float *fa = (float *)(void *)buf, *fb = fa + BLOCK;
                decode_float(ca->dt, ra, k, fa);
                decode_float(cb->dt, rb, k, fb);
                compare_finite_floats(d, st, fa, fb, k);
                continue;
            }
        }
        decode(ca, ra, k, buf);
        decode(cb, rb, k, buf + BLOCK);
        compare_block(d, st, buf, buf + BLOCK, ra, rb, ca->size, k, first + c);
    }
}

/* Both tensors' logical bytes, the same elements at a time, read through
 * tensor.h's reader into private windows (never the mapping). */
typedef struct pair_reader {
    ckpt_tensor_reader ra, rb;
    uint8_t *a, *b;
    uint64_t per;  /* elements per window (bytes for sub-byte dtypes) */
    size_t sa, sb; /* bytes per element (1 for sub-byte dtypes) */
} pair_reader;

static int pair_open(pair_reader *p, const ckpt_tensor *ta, const ckpt_tensor *tb) {
    memset(p, 0, sizeof *p);
    unsigned ea = ckpt_dtype_size(ckpt_tensor_dtype(ta)),
             eb = ckpt_dtype_size(ckpt_tensor_dtype(tb));
    p->sa = ea && eb ? ea : 1;
    p->sb = ea && eb ? eb : 1;
    p->per = WINDOW / (p->sa > p->sb ? p->sa : p->sb);
    int rc = ckpt_tensor_reader_init(&p->ra, ta);
    if (rc == 0) rc = ckpt_tensor_reader_init(&p->rb, tb);
    if (rc == 0) {
        p->a = ckpt_malloc(WINDOW);
        p->b = ckpt_malloc(WINDOW);
        if (!p->a || !p->b) rc = ckpt_err_nomem();
    }
    return rc;
}

static void pair_close(pair_reader *p) {
    ckpt_tensor_reader_free(&p->ra);
    ckpt_tensor_reader_free(&p->rb);
    ckpt_free(p->a);
    ckpt_free(p->b);
}

/* The next window: *n elements (0 at the end); both sides must agree. */
static int pair_next(pair_reader *p, uint64_t *n) {
    size_t ga = 0, gb = 0;
    int rc = ckpt_tensor_reader_next(&p->ra, p->a, (size_t)p->per * p->sa, &ga);
    if (rc == 0) rc = ckpt_tensor_reader_next(&p->rb, p->b, (size_t)p->per * p->sb, &gb);
    if (rc == 0 && ga / p->sa != gb / p->sb)
        rc = ckpt_err(CKPT_E_MISMATCH, "", ckpt_tensor_name(p->ra.t), CKPT_NO_OFFSET,
                      "tensor \"%s\": the two sides hold different element counts",
                      ckpt_tensor_name(p->ra.t));
    *n = ga / p->sa;
    return rc;
}

/* NaN and Inf among the first `elems` elements of t (per: components per
 * element), read again: the equal prefix before the first differing
 * window, whose counts both sides share. */
static int count_prefix(ckpt_tensor_diff *d, const ckpt_tensor *t, uint64_t elems, const codec *c,
                        unsigned per, uint8_t *buf, size_t cap) {
    if (c->kind != K_FLOAT && c->kind != K_COMPLEX) return 0; /* integers have none */
    ckpt_tensor_reader r;
    size_t esz = ckpt_dtype_size(ckpt_tensor_dtype(t)), got = 0;
    uint64_t nan = 0, inf = 0, left = elems;
    int rc = ckpt_tensor_reader_init(&r, t);
    while (rc == 0 && left) {
        size_t want = (size_t)(left < cap / esz ? left : cap / esz);
        if ((rc = ckpt_tensor_reader_next(&r, buf, want * esz, &got)) || got == 0) break;
        count_nonfinite(c, buf, got / esz * per, &nan, &inf);
        left -= got / esz;
    }
    ckpt_tensor_reader_free(&r);
    d->nan_a += nan;
    d->nan_b += nan;
    d->inf_a += inf;
    d->inf_b += inf;
    return rc;
}

/* Tensors of the same dtype, read once: windows are compared with memcmp
 * until the first that differs (equal tensors, the common case, cost one
 * pass at memcmp speed); from there on element by element, after the
 * NaN/Inf counts of the equal prefix. *equal: every byte equal. Without a
 * codec (dtypes compared bitwise only) the first difference ends it. */
static int compare_same(ckpt_tensor_diff *d, const ckpt_diff_options *o, const ckpt_tensor *ta,
                        const ckpt_tensor *tb, int *equal) {
    pair_reader p;
    int rc = pair_open(&p, ta, tb);
    codec *c = NULL;
    double *buf = NULL;
    cmp_state st = {o->atol, o->rtol, 0, 1, 0, 0};
    uint64_t n, first = 0; /* elements */
    *equal = 1;
    while (rc == 0 && (rc = pair_next(&p, &n)) == 0 && n) {
        if (*equal) {
            if (memcmp(p.a, p.b, (size_t)n * p.sa) == 0) {
                first += n;
                continue;
            }
            *equal = 0;
            c = ckpt_malloc(sizeof *c);
            if (!c) {
                rc = ckpt_err_nomem();
                break;
            }
            codec_init(c, ckpt_tensor_dtype(ta));
            if (c->kind == K_NONE) break;
            buf = ckpt_malloc(2 * BLOCK * sizeof *buf);
            if (!buf) {
                rc = ckpt_err_nomem();
                break;
            }
            st.exact_ints = c->kind == K_INT && c->dt != CKPT_DT_BOOL;
            st.per = c->kind == K_COMPLEX ? 2u : 1u;
            /* the decode buffer is free until compare_values */
            if (first && (rc = count_prefix(d, ta, first, c, st.per, (uint8_t *)buf,
                                            2 * BLOCK * sizeof *buf)) != 0)
                break;
        }
        compare_values(d, &st, p.a, p.b, n * st.per, first * st.per, c, c, buf);
        first += n;
    }
    if (rc == 0 && c && c->kind != K_NONE) d->compared = 1;
    pair_close(&p);
    ckpt_free(buf);
    ckpt_free(c);
    return rc;
}

static int compare_all(ckpt_tensor_diff *d, const ckpt_diff_options *o, const ckpt_tensor *ta,
                       const ckpt_tensor *tb, const codec *ca, const codec *cb) {
    double *buf = ckpt_malloc(2 * BLOCK * sizeof *buf);
    pair_reader p;
    int rc = buf ? pair_open(&p, ta, tb) : ckpt_err_nomem();
    if (!buf) memset(&p, 0, sizeof p);
    cmp_state st = {o->atol,
                    o->rtol,
                    ca->dt == cb->dt && ca->kind == K_INT && ca->dt != CKPT_DT_BOOL,
                    ca->kind == K_COMPLEX ? 2u : 1u,
                    0,
                    0};
    uint64_t n, first = 0;
    while (rc == 0 && (rc = pair_next(&p, &n)) == 0 && n) {
        compare_values(d, &st, p.a, p.b, n * st.per, first, ca, cb, buf);
        first += n * st.per;
    }
    pair_close(&p);
    ckpt_free(buf);
    if (rc == 0) d->compared = 1;
    return rc;
}

static int compare_tensor(ckpt_diff_result *r, const ckpt_diff_options *o,
                          const ckpt_manifest_entry *a, const ckpt_manifest_entry *b) {
    const ckpt_tensor *ta = a->tensor, *tb = b->tensor;
    ckpt_tensor_diff d;
    memset(&d, 0, sizeof d);
    d.name = a->name;
    d.a = a;
    d.b = b;
    d.numel = ckpt_tensor_numel(ta);
    ckpt_dtype da = ckpt_tensor_dtype(ta), db = ckpt_tensor_dtype(tb);
    int rc = 0;
    d.bitwise_equal = 0;
    if (da == db) rc = compare_same(&d, o, ta, tb, &d.bitwise_equal);
    codec *ca = NULL, *cb = NULL;
    if (!rc && da != db) {
        ca = ckpt_malloc(sizeof *ca);
        cb = ckpt_malloc(sizeof *cb);
        if (!ca || !cb) rc = ckpt_err_nomem();
    }
    if (!rc && ca) {
        codec_init(ca, da);
        codec_init(cb, db);
        int comparable = ca->kind != K_NONE && cb->kind != K_NONE &&
                         (ca->kind == K_COMPLEX) == (cb->kind == K_COMPLEX);
        if (comparable) rc = compare_all(&d, o, ta, tb, ca, cb);
    }
    ckpt_free(ca);
    ckpt_free(cb);
    if (rc) return rc;
    if (d.bitwise_equal) {
        r->equal++;
        return 0;
    }
    if (!d.compared || d.differing) r->identical = 0;
    if (ckpt_arena_grow(&r->arena, (void **)&r->tensors, &r->tcap, r->ntensors + 1, sizeof d))
        return ckpt_err_nomem();
    r->tensors[r->ntensors++] = d;
    return 0;
}

/* ------------------------------------------------------------ leaves */

/* A float pair under the tensor rule: NaN equals NaN, an infinity the
 * same infinity, else |x-y| <= atol + rtol*|y|. */
static int floats_equal(double x, double y, const ckpt_diff_options *o) {
    if (x == y) return 1;
    if (x != x || y != y) return x != x && y != y;
    if (isinf(x) || isinf(y)) return 0;
    return fabs(x - y) <= o->atol + o->rtol * fabs(y);
}

/* Opaque objects by qualname; torch dtypes by their canonical name
 * (torch.float is torch.float32). */
static int objects_equal(const ckpt_value *x, const ckpt_value *y) {
    const char *dx = ckpt_wr_dtype_ref(x), *dy = ckpt_wr_dtype_ref(y);
    if (dx && dy) return strcmp(dx, dy) == 0;
    const char *nx = ckpt_value_object_name(x), *ny = ckpt_value_object_name(y);
    return nx && ny && strcmp(nx, ny) == 0;
}

static int leaves_equal(const ckpt_value *x, const ckpt_value *y, const ckpt_diff_options *o) {
    ckpt_kind kind = ckpt_value_kind(x);
    if (kind != ckpt_value_kind(y)) return 0;
    size_t nx, ny;
    const char *sx, *sy;
    int64_t ix, iy;
    switch (kind) {
    case CKPT_KIND_BOOL: {
        int bx = 0, by = 0;
        ckpt_value_bool(x, &bx);
        ckpt_value_bool(y, &by);
        return bx == by;
    }
    case CKPT_KIND_INT:
        if (ckpt_value_int(x, &ix) == 0 && ckpt_value_int(y, &iy) == 0) return ix == iy;
        return strcmp(ckpt_value_int_decimal(x), ckpt_value_int_decimal(y)) == 0;
    case CKPT_KIND_FLOAT: {
        double fx = 0, fy = 0;
        ckpt_value_float(x, &fx);
        ckpt_value_float(y, &fy);
        return floats_equal(fx, fy, o);
    }
    case CKPT_KIND_STR:
    case CKPT_KIND_BYTES:
        sx = ckpt_value_str(x, &nx);
        sy = ckpt_value_str(y, &ny);
        return nx == ny && memcmp(sx, sy, nx) == 0;
    case CKPT_KIND_OBJECT: return objects_equal(x, y);
    default: return 1; /* NONE; containers and tensors are never leaves */
    }
}

static int vpush(ckpt_diff_result *r, ckpt_diff_value_list l, const char *name, const ckpt_value *a,
                 const ckpt_value *b) {
    if (ckpt_arena_grow(&r->arena, (void **)&r->vlists[l], &r->vcaps[l], r->vcounts[l] + 1,
                        sizeof(ckpt_value_diff)))
        return ckpt_err_nomem();
    r->vlists[l][r->vcounts[l]++] = (ckpt_value_diff){name, a, b};
    r->identical = 0;
    return 0;
}

/* A name opts->exclude leaves out of the comparison. */
static int excluded(const ckpt_diff_options *o, const char *name) {
    for (size_t i = 0; i < o->nexclude; i++)
        if (fnmatch(o->exclude[i], name, 0) == 0) return 1;
    return 0;
}

/* A name of A in a top-level entry other than r->a_entry, when an
 * applied rewrite adds B's keys under that entry: left out. */
static int a_outside(const ckpt_diff_result *r, const char *name) {
    size_t n = r->a_entry_len;
    return r->a_entry &&
           !(strncmp(name, r->a_entry, n) == 0 && (name[n] == '.' || name[n] == '\0'));
}

/* Both value lists are sorted by name: one merge. */
static int compare_leaves(ckpt_diff_result *r, const ckpt_manifest *a, const bside *b,
                          const ckpt_diff_options *o) {
    size_t i = 0, j = 0;
    int rc = 0;
    while (!rc && (i < a->nvalues || j < b->nvalues)) {
        int c = i == a->nvalues   ? 1
                : j == b->nvalues ? -1
                                  : strcmp(a->values[i].name, b->values[j].name);
        if (c <= 0 && (excluded(o, a->values[i].name) || a_outside(r, a->values[i].name))) {
            i += 1;
            j += c == 0;
        } else if (c >= 0 && excluded(o, b->values[j].name)) {
            j += 1;
            i += c == 0;
        } else if (c < 0) {
            rc = vpush(r, CKPT_DIFF_VALUES_ONLY_IN_A, a->values[i].name, a->values[i].value, NULL);
            i++;
        } else if (c > 0) {
            rc = vpush(r, CKPT_DIFF_VALUES_ONLY_IN_B, b->values[j].name, NULL, b->values[j].value);
            j++;
        } else {
            const ckpt_value *x = a->values[i].value, *y = b->values[j].value;
            if (leaves_equal(x, y, o))
                r->vequal++;
            else
                rc = vpush(r, CKPT_DIFF_VALUES_DIFFERING, a->values[i].name, x, y);
            i++;
            j++;
        }
    }
    return rc;
}

/* ------------------------------------------------------------ key rewrite */

/* How a rewrite of B's keys pairs them with A's (see pair_keys). */
enum { PAIRS_NONE, PAIRS_ALL, PAIRS_B_SUBTREE, PAIRS_A_SUBTREE };

typedef struct pairing {
    const ckpt_rule *rule;
    size_t *b2a;              /* ckpt_malloc'd */
    const char **names;       /* B's keys rewritten (kept only under normalize) */
    unsigned char *uncovered; /* per key of B, the rule leaves it (ditto) */
    uint64_t pairs;
    int kind;
} pairing;

typedef struct pair_state {
    ckpt_diff_result *r;
    pairing *p;
    int keep;
    unsigned char *hit; /* A's keys paired */
    size_t clash, lost_covered, lost_other;
    const ckpt_manifest *b;
} pair_state;

static int pair_key(void *ctx, size_t i, const char *name, size_t len, int covered, size_t j) {
    pair_state *st = ctx;
    pairing *p = st->p;
    if (st->keep && !(p->names[i] = ckpt_arena_strndup(&st->r->arena, name, len)))
        return ckpt_err_nomem();
    if (st->keep) p->uncovered[i] = !covered;
    p->b2a[i] = j;
    if (j != CKPT_KEYS_NONE) {
        st->clash += st->hit[j];
        st->hit[j] = 1;
        p->pairs++;
    } else if (covered) {
        st->lost_covered++;
    } else {
        /* kept apart under its own name: dropped wrappers could make two
         * names one */
        st->lost_other++;
        st->clash += len != strlen(st->b->entries[i].name);
    }
    return 0;
}

/* Rewrites B's keys by p->rule and says how they pair with A's: every key
 * on both sides (PAIRS_ALL); every key of A, the keys of B the rule does
 * not cover keeping their names in other top-level entries (a rule
 * selecting a subtree of B, PAIRS_B_SUBTREE); every key of B, A's other
 * keys lying in top-level entries other than the one the rule adds
 * (PAIRS_A_SUBTREE); or none of these (PAIRS_NONE, also when two keys of B
 * would get one name). The names are kept (in r's arena) when `keep`. */
static int pair_keys(ckpt_diff_result *r, const ckpt_manifest *a, const ckpt_manifest *b, int keep,
                     pairing *p) {
    const ckpt_rule *rule = p->rule;
    pair_state st = {r, p, keep, ckpt_malloc(a->n ? a->n : 1), 0, 0, 0, b};
    p->b2a = ckpt_malloc((b->n ? b->n : 1) * sizeof *p->b2a);
    if (keep) {
        p->names = ckpt_arena_array(&r->arena, b->n ? b->n : 1, sizeof *p->names);
        p->uncovered = ckpt_arena_alloc(&r->arena, b->n ? b->n : 1);
    }
    int rc = st.hit && p->b2a && (!keep || (p->names && p->uncovered)) ? 0 : ckpt_err_nomem();
    if (!rc) {
        memset(st.hit, 0, a->n);
        rc = ckpt_rule_lookup_all(rule, b, a, pair_key, &st);
    }
    /* A's keys left over must be whole top-level entries beside the one
     * the rule adds B's keys under */
    const char *dot = memchr(rule->add, '.', rule->add_len);
    size_t top = dot ? (size_t)(dot - rule->add) : rule->add_len;
    size_t lost_a = 0, lost_a_inside = 0;
    for (size_t j = 0; !rc && j < a->n; j++) {
        if (st.hit[j]) continue;
        lost_a++;
        const char *s = a->entries[j].name;
        size_t len = strlen(s);
        lost_a_inside +=
            len >= top && memcmp(s, rule->add, top) == 0 && (len == top || s[top] == '.');
    }
    ckpt_free(st.hit);
    p->kind = PAIRS_NONE;
    if (rc || st.clash) return rc;
    if (!lost_a && !st.lost_covered && !st.lost_other)
        p->kind = PAIRS_ALL;
    else if (!lost_a && !st.lost_covered && rule->select)
        p->kind = PAIRS_B_SUBTREE;
    else if (lost_a && !lost_a_inside && !st.lost_covered && !st.lost_other && rule->add_len)
        p->kind = PAIRS_A_SUBTREE;
    return 0;
}

/* "epoch, optimizer": the top-level entries of m outside prefix p. */
static const char *others_text(ckpt_diff_result *r, const ckpt_manifest *m, const char *p,
                               size_t plen) {
    ckpt_rule outside = {.strip = p, .strip_len = plen, .add = "", .add_len = 0};
    const char **names;
    size_t n;
    if (ckpt_rule_others(&names, &n, &r->arena, &outside, m)) return NULL;
    char *t = ckpt_arena_strdup(&r->arena, "");
    for (size_t k = 0; t && k < n; k++)
        t = ckpt_arena_printf(&r->arena, "%s%s%s", t, k ? ", " : "", names[k]);
    return t;
}

/* The relation in words, from A's side: "B's keys are A's with 'module.'
 * added". */
static const char *describe_pairing(ckpt_diff_result *r, const ckpt_manifest *a,
                                    const ckpt_manifest *b, const pairing *p, int normalize) {
    const char *left = normalize ? " (left out: not compared)" : "";
    const ckpt_rule *u = p->rule;
    int sa = (int)u->add_len, ss = (int)u->strip_len;
    if (p->kind == PAIRS_B_SUBTREE && !u->canon && !u->add_len) {
        const char *o = others_text(r, b, u->strip, u->strip_len);
        return o ? ckpt_arena_printf(&r->arena,
                                     "B's keys under '%.*s' are A's; B's other "
                                     "top-level entries: %s%s",
                                     ss, u->strip, o, left)
                 : NULL;
    }
    if (p->kind == PAIRS_A_SUBTREE && !u->canon && !u->strip_len) {
        const char *o = others_text(r, a, u->add, u->add_len);
        return o ? ckpt_arena_printf(&r->arena,
                                     "A's keys under '%.*s' are B's; A's other "
                                     "top-level entries: %s%s",
                                     sa, u->add, o, left)
                 : NULL;
    }
    if (p->kind == PAIRS_ALL && !u->canon) {
        if (u->strip_len && u->add_len)
            return ckpt_arena_printf(&r->arena, "B's keys are A's with '%.*s' replaced by '%.*s'",
                                     sa, u->add, ss, u->strip);
        if (u->strip_len)
            return ckpt_arena_printf(&r->arena, "B's keys are A's with '%.*s' added", ss, u->strip);
        return ckpt_arena_printf(&r->arena, "B's keys are A's without '%.*s'", sa, u->add);
    }
    return ckpt_arena_printf(&r->arena, "B's keys become A's by: %s", u->description);
}

static int cmp_named(const void *x, const void *y) {
    return strcmp(((const ckpt_named_value *)x)->name, ((const ckpt_named_value *)y)->name);
}

/* B's values under the rule's names, sorted again; those in the other
 * top-level entries of a subtree it selects (`select`) are left out. */
static int rename_values(ckpt_diff_result *r, const ckpt_rule *rule, int select, bside *bs) {
    const ckpt_manifest *b = bs->m;
    ckpt_named_value *vals = ckpt_arena_array(&r->arena, b->nvalues ? b->nvalues : 1, sizeof *vals);
    size_t n = 0;
    if (!vals) return ckpt_err_nomem();
    for (size_t i = 0; i < b->nvalues; i++) {
        const char *name = b->values[i].name;
        size_t len = strlen(name);
        char *buf = ckpt_arena_alloc(&r->arena, len + rule->add_len + 1);
        if (!buf) return ckpt_err_nomem();
        int covered;
        ckpt_rule_apply(rule, name, len, buf, &covered);
        if (covered || !select) vals[n++] = (ckpt_named_value){buf, b->values[i].value};
    }
    qsort(vals, n, sizeof *vals, cmp_named);
    bs->values = vals;
    bs->nvalues = n;
    return 0;
}

/* Pairs B's keys with A's by name (bs->b2a); when keys are left unpaired
 * on both sides, the rewrite of B's keys ckpt_match would infer against
 * A's (ckpt_rules_infer) is reported if it pairs them (pair_keys), and
 * under normalize the pairing and names follow it. */
static int pair_b(ckpt_diff_result *r, const ckpt_manifest *a, bside *bs,
                  const ckpt_diff_options *o) {
    const ckpt_manifest *b = bs->m;
    bs->b2a = ckpt_malloc((b->n ? b->n : 1) * sizeof *bs->b2a);
    if (!bs->b2a) return ckpt_err_nomem();
    size_t paired = ckpt_manifest_lookup_all(a, b, bs->b2a);
    if (paired == a->n || paired == b->n) return 0;
    ckpt_rule rules[MAX_RULES];
    size_t nrules = 0;
    int rc = ckpt_rules_infer(rules, MAX_RULES, &nrules, &r->arena, b, a, bs->b2a);
    pairing p = {ckpt_rules_best(rules, nrules), NULL, NULL, NULL, 0, PAIRS_NONE};
    if (!rc && p.rule) rc = pair_keys(r, a, b, o->normalize, &p);
    if (!rc && p.kind != PAIRS_NONE) {
        r->has_rewrite = 1;
        r->rewrite = (ckpt_rewrite){p.rule->description, p.pairs, o->normalize};
        if (!(r->note = describe_pairing(r, a, b, &p, o->normalize))) rc = ckpt_err_nomem();
        if (!rc && o->normalize) {
            /* the top-level entries the description calls ignored are:
             * not listed, not counted */
            ckpt_free(bs->b2a);
            bs->b2a = p.b2a;
            p.b2a = NULL;
            bs->names = p.names;
            if (p.kind == PAIRS_B_SUBTREE) bs->outside = p.uncovered;
            if (p.kind == PAIRS_A_SUBTREE) {
                const char *dot = memchr(p.rule->add, '.', p.rule->add_len);
                r->a_entry = p.rule->add;
                r->a_entry_len = dot ? (size_t)(dot - p.rule->add) : p.rule->add_len;
            }
            rc = rename_values(r, p.rule, p.kind == PAIRS_B_SUBTREE, bs);
        }
    }
    ckpt_free(p.b2a);
    return rc;
}

/* ------------------------------------------------------------ the diff */

static int cmp_pairs(const void *x, const void *y) {
    return strcmp(((const pair *)x)->name, ((const pair *)y)->name);
}

/* Lists come out in manifest order, usually sorted already: check first. */
static void sort_pairs(pair *v, size_t n) {
    for (size_t i = 1; i < n; i++)
        if (strcmp(v[i - 1].name, v[i].name) > 0) {
            qsort(v, n, sizeof *v, cmp_pairs);
            return;
        }
}

static int cmp_tdiffs(const void *x, const void *y) {
    return strcmp(((const ckpt_tensor_diff *)x)->name, ((const ckpt_tensor_diff *)y)->name);
}

/* A key on one side only, e, that match's rule ties to p, a key of its
 * own side both have: a tied copy when it holds p's values (one storage,
 * or the same bytes). The other side's alias names it (safetensors'
 * save_model records the dropped lm_head.weight), but this side's tensor
 * may be another one (another model's head). Names alone (keys_only,
 * manifests without tensors) cannot tell: the rule stands. *tied: 1 or 0. */
static int tied_copy(const ckpt_diff_options *o, const ckpt_manifest_entry *e,
                     const ckpt_manifest_entry *p, int *tied) {
    const ckpt_tensor *te = e->tensor, *tp = p->tensor;
    *tied = 1;
    if (o->keys_only || !te || !tp) return 0;
    if (ckpt_tensor_dtype(te) != ckpt_tensor_dtype(tp) || !same_shape(e, p)) {
        *tied = 0;
        return 0;
    }
    if (ckpt_tensor_storage_id(te) == ckpt_tensor_storage_id(tp) &&
        ckpt_tensor_file_offset(te) == ckpt_tensor_file_offset(tp) &&
        ckpt_tensor_is_contiguous(te) && ckpt_tensor_is_contiguous(tp))
        return 0;
    ckpt_tensor_diff d;
    memset(&d, 0, sizeof d);
    return compare_same(&d, o, te, tp, tied);
}

static int run(ckpt_diff_result *r, const ckpt_manifest *a, const bside *bs,
               const ckpt_diff_options *o) {
    const ckpt_manifest *b = bs->m;
    size_t *a2b = ckpt_malloc((a->n ? a->n : 1) * sizeof *a2b);
    if (!a2b) return ckpt_err_nomem();
    for (size_t i = 0; i < a->n; i++) a2b[i] = CKPT_KEYS_NONE;
    for (size_t j = 0; j < b->n; j++)
        if (bs->b2a[j] != CKPT_KEYS_NONE) a2b[bs->b2a[j]] = j;
    /* a key on one side only may be a copy of one both have that the
     * other side's writer dropped (a tied lm_head.weight): match's rule */
    size_t *tied_a = NULL, *tied_b = NULL;
    int rc = ckpt_keys_unpaired_ties(&tied_a, a, a2b, b, bs->b2a, NULL);
    if (!rc) rc = ckpt_keys_unpaired_ties(&tied_b, b, bs->b2a, a, a2b, bs->names);
    for (size_t i = 0; !rc && i < a->n; i++) {
        const ckpt_manifest_entry *ea = &a->entries[i];
        /* a pair has one name (B's rewritten to A's under normalize) */
        if (excluded(o, ea->name) || a_outside(r, ea->name)) continue;
        if (a2b[i] == CKPT_KEYS_NONE) {
            int tied = 0;
            rc = push(r, CKPT_DIFF_ONLY_IN_A, ea->name, ea, NULL);
            if (!rc && tied_a[i] != CKPT_KEYS_NONE)
                rc = tied_copy(o, ea, &a->entries[tied_a[i]], &tied);
            if (!rc && tied)
                r->lists[CKPT_DIFF_ONLY_IN_A][r->counts[CKPT_DIFF_ONLY_IN_A] - 1].tied_to =
                    a->entries[tied_a[i]].name;
            continue;
        }
        const ckpt_manifest_entry *eb = &b->entries[a2b[i]];
        int shape = same_shape(ea, eb);
        if (!shape) rc = push(r, CKPT_DIFF_SHAPE_MISMATCH, ea->name, ea, eb);
        if (!rc && strcmp(ea->dtype, eb->dtype) != 0)
            rc = push(r, CKPT_DIFF_DTYPE_MISMATCH, ea->name, ea, eb);
        if (!rc && shape && !o->keys_only) rc = compare_tensor(r, o, ea, eb);
    }
    for (size_t j = 0; !rc && j < b->n; j++) {
        const char *name = bs->names ? bs->names[j] : b->entries[j].name;
        if (bs->b2a[j] != CKPT_KEYS_NONE || excluded(o, name) || (bs->outside && bs->outside[j]))
            continue;
        rc = push(r, CKPT_DIFF_ONLY_IN_B, name, NULL, &b->entries[j]);
        size_t t = tied_b[j];
        int tied = 0;
        if (!rc && t != CKPT_KEYS_NONE) rc = tied_copy(o, &b->entries[j], &b->entries[t], &tied);
        if (!rc && tied)
            r->lists[CKPT_DIFF_ONLY_IN_B][r->counts[CKPT_DIFF_ONLY_IN_B] - 1].tied_to =
                bs->names ? bs->names[t] : b->entries[t].name;
    }
    ckpt_free(a2b);
    ckpt_free(tied_a);
    ckpt_free(tied_b);
    if (!rc && !o->keys_only) rc = compare_leaves(r, a, bs, o);
    if (rc) return rc;
    for (int l = 0; l < NLISTS; l++) {
        if (r->counts[l]) r->identical = 0;
        sort_pairs(r->lists[l], r->counts[l]);
    }
    if (r->ntensors > 1) qsort(r->tensors, r->ntensors, sizeof *r->tensors, cmp_tdiffs);
    return 0;
}

/* The trees compared are the logical ones of ckpt-written safetensors
 * files; B's keys are paired with A's, through a rewrite under normalize. */
static int compare(ckpt_diff_result *r, const ckpt_manifest *a, const ckpt_manifest *b,
                   const ckpt_diff_options *o) {
    int rc = ckpt_manifest_logical(&r->owned[0], a);
    if (!rc) rc = ckpt_manifest_logical(&r->owned[1], b);
    if (rc) return rc;
    if (r->owned[0]) a = r->owned[0];
    if (r->owned[1]) b = r->owned[1];
    bside bs = {b, NULL, NULL, b->values, b->nvalues, NULL};
    rc = pair_b(r, a, &bs, o);
    if (!rc) rc = run(r, a, &bs, o);
    ckpt_free(bs.b2a);
    return rc;
}

int ckpt_diff(ckpt_diff_result **out, const ckpt_manifest *a, const ckpt_manifest *b,
              const ckpt_diff_options *opts) {
    static const ckpt_diff_options defaults = CKPT_DIFF_OPTIONS_INIT;
    const ckpt_diff_options *o = opts ? opts : &defaults;
    CKPT_CHECK_OPTIONS(opts, CKPT_DIFF_OPTIONS_VERSION);
    if (!out || !a || !b)
        return ckpt_err(CKPT_E_INVALID_ARG, "", "", CKPT_NO_OFFSET,
                        "ckpt_diff needs two manifests");
    *out = NULL;
    if (o->nexclude && !o->exclude)
        return ckpt_err(CKPT_E_INVALID_ARG, "", "", CKPT_NO_OFFSET, "exclude is NULL");
    if (!(o->rtol >= 0) || !(o->atol >= 0))
        return ckpt_err(CKPT_E_INVALID_ARG, "", "", CKPT_NO_OFFSET,
                        "tolerances must be non-negative numbers");
    if (!o->keys_only && (!a->file || !b->file))
        return ckpt_err(CKPT_E_INVALID_ARG, !a->file ? a->name : b->name, "", CKPT_NO_OFFSET,
                        "comparing values needs checkpoints, not manifests (use keys_only)");
    ckpt_diff_result *r = ckpt_malloc(sizeof *r);
    if (!r) return ckpt_err_nomem();
    memset(r, 0, sizeof *r);
    r->identical = 1;
    int rc = compare(r, a, b, o);
    if (rc) {
        ckpt_diff_result_free(r);
        return rc;
    }
    *out = r;
    return 0;
}

void ckpt_diff_result_free(ckpt_diff_result *r) {
    if (!r) return;
    for (int k = 0; k < 2; k++) ckpt_manifest_free(r->owned[k]);
    ckpt_arena_free(&r->arena);
    ckpt_free(r);
}

int ckpt_diff_identical(const ckpt_diff_result *r) { return r->identical; }

size_t ckpt_diff_count(const ckpt_diff_result *r, ckpt_diff_list list) {
    return (unsigned)list < NLISTS ? r->counts[list] : 0;
}

const char *ckpt_diff_name(const ckpt_diff_result *r, ckpt_diff_list list, size_t i) {
    if ((unsigned)list >= NLISTS || i >= r->counts[list]) return NULL;
    return r->lists[list][i].name;
}

const char *ckpt_diff_tied_to(const ckpt_diff_result *r, ckpt_diff_list list, size_t i) {
    if ((unsigned)list >= NLISTS || i >= r->counts[list]) return NULL;
    return r->lists[list][i].tied_to;
}

void ckpt_diff_pair(const ckpt_diff_result *r, ckpt_diff_list list, size_t i,
                    const ckpt_manifest_entry **a, const ckpt_manifest_entry **b) {
    int ok = (unsigned)list < NLISTS && i < r->counts[list];
    if (a) *a = ok ? r->lists[list][i].a : NULL;
    if (b) *b = ok ? r->lists[list][i].b : NULL;
}

size_t ckpt_diff_tensor_count(const ckpt_diff_result *r) { return r->ntensors; }

const ckpt_tensor_diff *ckpt_diff_tensor(const ckpt_diff_result *r, size_t i) {
    return i < r->ntensors ? &r->tensors[i] : NULL;
}

uint64_t ckpt_diff_equal_count(const ckpt_diff_result *r) { return r->equal; }

size_t ckpt_diff_value_count(const ckpt_diff_result *r, ckpt_diff_value_list list) {
    return (unsigned)list < NVLISTS ? r->vcounts[list] : 0;
}

const ckpt_value_diff *ckpt_diff_value(const ckpt_diff_result *r, ckpt_diff_value_list list,
                                       size_t i) {
    if ((unsigned)list >= NVLISTS || i >= r->vcounts[list]) return NULL;
    return &r->vlists[list][i];
}

uint64_t ckpt_diff_values_equal(const ckpt_diff_result *r) { return r->vequal; }

const ckpt_rewrite *ckpt_diff_rewrite(const ckpt_diff_result *r) {
    return r->has_rewrite ? &r->rewrite : NULL;
}

const char *ckpt_diff_rewrite_note(const ckpt_diff_result *r) { return r->note; }
