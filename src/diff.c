/* diff.c - ckpt_diff: two checkpoints compared key by key and value by
 * value (see ckpt.h for the exact rules).
 *
 * Values stream once: a memcmp over each pair of tensors first (memory
 * bandwidth; windows are prefetched and released like verify does), and
 * only tensors whose bytes differ, or whose dtypes differ, are decoded to
 * double in blocks and compared element by element. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "error.h"
#include "file.h"
#include "keys.h"

#define NLISTS 4
#define BLOCK 4096                     /* components decoded at a time */
#define WINDOW ((size_t)16 << 20)      /* bytes compared per prefetch */

typedef struct pair {
    const char *name;
    const ckpt_manifest_entry *a, *b;
} pair;

struct ckpt_diff_result {
    ckpt_arena arena;
    int identical;
    pair *lists[NLISTS];
    size_t counts[NLISTS], caps[NLISTS];
    ckpt_tensor_diff *tensors;
    size_t ntensors, tcap;
    uint64_t equal;
};

static int nomem(void) { return ckpt_err(CKPT_E_NOMEM, "", "", CKPT_NO_OFFSET, "out of memory"); }

static int push(ckpt_diff_result *r, ckpt_diff_list l, const char *name,
                const ckpt_manifest_entry *a, const ckpt_manifest_entry *b) {
    if (ckpt_arena_grow(&r->arena, (void **)&r->lists[l], &r->caps[l], r->counts[l] + 1,
                        sizeof(pair)))
        return nomem();
    r->lists[l][r->counts[l]++] = (pair){name, a, b};
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
    case CKPT_DT_F16: case CKPT_DT_BF16: case CKPT_DT_F32: case CKPT_DT_F64:
        break;
    case CKPT_DT_C32: case CKPT_DT_C64: case CKPT_DT_C128:
        c->kind = K_COMPLEX;
        c->size /= 2;
        break;
    case CKPT_DT_BOOL: case CKPT_DT_U8: case CKPT_DT_I8: case CKPT_DT_I16: case CKPT_DT_U16:
    case CKPT_DT_I32: case CKPT_DT_U32: case CKPT_DT_I64: case CKPT_DT_U64:
        c->kind = K_INT;
        break;
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
    default: /* F4, F6_*, quantized: compared bitwise only */
        c->kind = K_NONE;
        break;
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

/* Little-endian loads (ckpt_tensor_read and mapped data are LE): one
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
    case CKPT_DT_F32: case CKPT_DT_C64:
        for (i = 0; i < n; i++) out[i] = bits_to_float(load32(p + 4 * i));
        break;
    case CKPT_DT_F64: case CKPT_DT_C128:
        for (i = 0; i < n; i++) {
            uint64_t u = load(p + 8 * i, 8);
            memcpy(&out[i], &u, 8);
        }
        break;
    case CKPT_DT_F16: case CKPT_DT_C32:
        for (i = 0; i < n; i++) out[i] = half_to_double(load16(p + 2 * i));
        break;
    case CKPT_DT_BF16:
        for (i = 0; i < n; i++) out[i] = bits_to_float((uint32_t)load16(p + 2 * i) << 16);
        break;
    case CKPT_DT_BOOL:
        for (i = 0; i < n; i++) out[i] = p[i] != 0;
        break;
    case CKPT_DT_U8: case CKPT_DT_U16: case CKPT_DT_U32: case CKPT_DT_U64:
        for (i = 0; i < n; i++) out[i] = (double)load(p + c->size * i, c->size);
        break;
    case CKPT_DT_I8: case CKPT_DT_I16: case CKPT_DT_I32: case CKPT_DT_I64:
        for (i = 0; i < n; i++) {
            unsigned bits = 8 * c->size;
            uint64_t u = load(p + c->size * i, c->size);
            /* sign-extend from `bits` */
            int64_t v = bits == 64 ? (int64_t)u
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

/* A tensor's logical bytes: borrowed from the mapping when contiguous,
 * else gathered into `owned`. */
static int tensor_bytes(const ckpt_tensor *t, const uint8_t **p, uint8_t **owned) {
    const void *data;
    size_t size;
    *owned = NULL;
    if (ckpt_tensor_data(t, &data, &size) == 0) {
        *p = data;
        return 0;
    }
    uint64_t n = ckpt_tensor_nbytes(t);
    if (n > SIZE_MAX)
        return ckpt_err(CKPT_E_LIMIT, "", ckpt_tensor_name(t), CKPT_NO_OFFSET,
                        "tensor larger than the address space");
    *owned = ckpt_malloc((size_t)n);
    if (!*owned) return nomem();
    int rc = ckpt_tensor_read(t, *owned, (size_t)n);
    if (rc) {
        ckpt_free(*owned);
        *owned = NULL;
        return rc;
    }
    *p = *owned;
    return 0;
}

/* memcmp in windows, prefetching and then releasing mapped pages. */
static int bytes_equal(const ckpt_file *fa, const uint8_t *a, const ckpt_file *fb,
                       const uint8_t *b, uint64_t n) {
    for (uint64_t done = 0; done < n; done += WINDOW) {
        size_t len = (size_t)(n - done < WINDOW ? n - done : WINDOW);
        ckpt_file_prefetch(fa, a + done, len);
        ckpt_file_prefetch(fb, b + done, len);
        int same = memcmp(a + done, b + done, len) == 0;
        ckpt_file_release(fa, a + done, len);
        ckpt_file_release(fb, b + done, len);
        if (!same) return 0;
    }
    return 1;
}

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
    case CKPT_DT_F32: case CKPT_DT_C64:
        for (i = 0; i < n; i++) {
            uint32_t u = load32(p + 4 * i);
            int special = (u & 0x7f800000u) == 0x7f800000u, mant = (u & 0x007fffffu) != 0;
            nn += (uint64_t)(special & mant);
            ni += (uint64_t)(special & !mant);
        }
        break;
    case CKPT_DT_F64: case CKPT_DT_C128:
        for (i = 0; i < n; i++) {
            uint64_t u = load(p + 8 * i, 8);
            int special = (u & 0x7ff0000000000000u) == 0x7ff0000000000000u;
            int mant = (u & 0x000fffffffffffffu) != 0;
            nn += (uint64_t)(special & mant);
            ni += (uint64_t)(special & !mant);
        }
        break;
    case CKPT_DT_F16: case CKPT_DT_C32: case CKPT_DT_BF16: {
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

static int compare_values(ckpt_tensor_diff *d, const ckpt_diff_options *o, const uint8_t *pa,
                          const uint8_t *pb, const codec *ca, const codec *cb) {
    double *buf = ckpt_malloc(2 * BLOCK * sizeof *buf);
    if (!buf) return nomem();
    int same_dtype = ca->dt == cb->dt;
    cmp_state st = {o->atol, o->rtol, same_dtype && ca->kind == K_INT && ca->dt != CKPT_DT_BOOL,
                    ca->kind == K_COMPLEX ? 2u : 1u, 0, 0};
    uint64_t total = d->numel * st.per;
    for (uint64_t c = 0; c < total; c += BLOCK) {
        size_t n = (size_t)(total - c < BLOCK ? total - c : BLOCK);
        const uint8_t *ra = pa + c * ca->size, *rb = pb + c * cb->size;
        /* a tensor that differs in a few places is mostly equal blocks */
        if (same_dtype && memcmp(ra, rb, n * ca->size) == 0) {
            uint64_t nan = 0, inf = 0;
            count_nonfinite(ca, ra, n, &nan, &inf);
            d->nan_a += nan;
            d->nan_b += nan;
            d->inf_a += inf;
            d->inf_b += inf;
            continue;
        }
        decode(ca, ra, n, buf);
        decode(cb, rb, n, buf + BLOCK);
        compare_block(d, &st, buf, buf + BLOCK, ra, rb, ca->size, n, c);
    }
    ckpt_free(buf);
    d->compared = 1;
    return 0;
}

static int compare_tensor(ckpt_diff_result *r, const ckpt_diff_options *o, const ckpt_manifest *ma,
                          const ckpt_manifest *mb, const ckpt_manifest_entry *a,
                          const ckpt_manifest_entry *b) {
    const ckpt_tensor *ta = a->tensor, *tb = b->tensor;
    ckpt_tensor_diff d;
    memset(&d, 0, sizeof d);
    d.name = a->name;
    d.a = a;
    d.b = b;
    d.numel = ckpt_tensor_numel(ta);
    const uint8_t *pa, *pb;
    uint8_t *oa, *ob = NULL;
    int rc = tensor_bytes(ta, &pa, &oa);
    if (!rc) rc = tensor_bytes(tb, &pb, &ob);
    if (rc) {
        ckpt_free(oa);
        return rc;
    }
    ckpt_dtype da = ckpt_tensor_dtype(ta), db = ckpt_tensor_dtype(tb);
    d.bitwise_equal = da == db && bytes_equal(ma->file, pa, mb->file, pb, ckpt_tensor_nbytes(ta));
    codec *ca = NULL, *cb = NULL;
    if (!d.bitwise_equal) {
        ca = ckpt_malloc(sizeof *ca);
        cb = ckpt_malloc(sizeof *cb);
        if (!ca || !cb) rc = nomem();
    }
    if (!rc && ca) {
        codec_init(ca, da);
        codec_init(cb, db);
        int comparable = ca->kind != K_NONE && cb->kind != K_NONE &&
                         (ca->kind == K_COMPLEX) == (cb->kind == K_COMPLEX);
        if (comparable) rc = compare_values(&d, o, pa, pb, ca, cb);
    }
    ckpt_free(ca);
    ckpt_free(cb);
    ckpt_free(oa);
    ckpt_free(ob);
    if (rc) return rc;
    if (d.bitwise_equal) {
        r->equal++;
        return 0;
    }
    if (!d.compared || d.differing) r->identical = 0;
    if (ckpt_arena_grow(&r->arena, (void **)&r->tensors, &r->tcap, r->ntensors + 1, sizeof d))
        return nomem();
    r->tensors[r->ntensors++] = d;
    return 0;
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

static int run(ckpt_diff_result *r, const ckpt_manifest *a, const ckpt_manifest *b,
               const ckpt_diff_options *o) {
    int rc = 0;
    for (size_t i = 0; !rc && i < a->n; i++) {
        const ckpt_manifest_entry *ea = &a->entries[i];
        size_t j = ckpt_manifest_lookup(b, ea->name, a->lens[i]);
        if (j == CKPT_KEYS_NONE) {
            rc = push(r, CKPT_DIFF_ONLY_IN_A, ea->name, ea, NULL);
            continue;
        }
        const ckpt_manifest_entry *eb = &b->entries[j];
        int shape = same_shape(ea, eb);
        if (!shape) rc = push(r, CKPT_DIFF_SHAPE_MISMATCH, ea->name, ea, eb);
        if (!rc && strcmp(ea->dtype, eb->dtype) != 0)
            rc = push(r, CKPT_DIFF_DTYPE_MISMATCH, ea->name, ea, eb);
        if (!rc && shape && !o->keys_only) rc = compare_tensor(r, o, a, b, ea, eb);
    }
    for (size_t j = 0; !rc && j < b->n; j++)
        if (ckpt_manifest_lookup(a, b->entries[j].name, b->lens[j]) == CKPT_KEYS_NONE)
            rc = push(r, CKPT_DIFF_ONLY_IN_B, b->entries[j].name, NULL, &b->entries[j]);
    if (rc) return rc;
    for (int l = 0; l < NLISTS; l++) {
        if (r->counts[l]) r->identical = 0;
        sort_pairs(r->lists[l], r->counts[l]);
    }
    if (r->ntensors > 1) qsort(r->tensors, r->ntensors, sizeof *r->tensors, cmp_tdiffs);
    return 0;
}

int ckpt_diff(ckpt_diff_result **out, const ckpt_manifest *a, const ckpt_manifest *b,
              const ckpt_diff_options *opts) {
    static const ckpt_diff_options defaults = CKPT_DIFF_OPTIONS_INIT;
    const ckpt_diff_options *o = opts ? opts : &defaults;
    if (!out || !a || !b)
        return ckpt_err(CKPT_E_INVALID_ARG, "", "", CKPT_NO_OFFSET, "ckpt_diff needs two manifests");
    *out = NULL;
    if (!(o->rtol >= 0) || !(o->atol >= 0))
        return ckpt_err(CKPT_E_INVALID_ARG, "", "", CKPT_NO_OFFSET,
                        "tolerances must be non-negative numbers");
    if (!o->keys_only && (!a->file || !b->file))
        return ckpt_err(CKPT_E_INVALID_ARG, !a->file ? a->name : b->name, "", CKPT_NO_OFFSET,
                        "comparing values needs checkpoints, not manifests (use keys_only)");
    ckpt_diff_result *r = ckpt_malloc(sizeof *r);
    if (!r) return nomem();
    memset(r, 0, sizeof *r);
    r->identical = 1;
    int rc = run(r, a, b, o);
    if (rc) {
        ckpt_diff_free(r);
        return rc;
    }
    *out = r;
    return 0;
}

void ckpt_diff_free(ckpt_diff_result *r) {
    if (!r) return;
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
