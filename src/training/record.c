/* record.c - the analysis record behind ckpt_training_* (record.h): its
 * sentences, components and visit budget, and the queries on object
 * trees the recognisers (training.c), the verdict (resume.c) and the
 * metadata topics (meta.c) share. */
#include "training/record.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "model/dtype.h"
#include "model/value.h"

/* Tree nodes visited per analysis before it stops: shared references in a
 * hostile pickle can make a small file an exponentially large tree. */
#define WALK_BUDGET ((uint64_t)1 << 24)
/* Bytes of a 0-dim counter tensor that are read (its value). */
#define COUNTER_BYTES_MAX 8

int ckpt_tr_new(ckpt_training **out) {
    ckpt_training *t = ckpt_malloc(sizeof *t);

    *out = NULL;
    if (t == NULL) return ckpt_tr_nomem();
    memset(t, 0, sizeof *t);
    t->budget = WALK_BUDGET;
    t->ratio = NAN;
    t->verdict = CKPT_RESUME_WEIGHTS_ONLY;
    *out = t;
    return 0;
}

/* ------------------------------------------------------------ strings */

static int vpush(ckpt_training *t, const char ***arr, size_t *n, size_t *cap, const char *fmt,
                 va_list ap) {
    va_list ap2;
    int len;
    char *s;

    va_copy(ap2, ap);
    len = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    s = len < 0 ? NULL : ckpt_arena_alloc(&t->arena, (size_t)len + 1);
    if (s == NULL) return ckpt_tr_nomem();
    vsnprintf(s, (size_t)len + 1, fmt, ap);
    return ckpt_tr_push_str(t, arr, n, cap, s);
}

int ckpt_tr_push_str(ckpt_training *t, const char ***arr, size_t *n, size_t *cap, const char *s) {
    if (ckpt_arena_grow(&t->arena, (void **)arr, cap, *n + 1, sizeof **arr)) return ckpt_tr_nomem();
    (*arr)[(*n)++] = s;
    return 0;
}

int ckpt_tr_warn(ckpt_training *t, const char *fmt, ...) {
    va_list ap;
    int rc;

    va_start(ap, fmt);
    rc = vpush(t, &t->warnings, &t->nwarnings, &t->cwarnings, fmt, ap);
    va_end(ap);
    return rc;
}

int ckpt_tr_vreason(ckpt_training *t, const char *fmt, va_list ap) {
    return vpush(t, &t->reasons, &t->nreasons, &t->creasons, fmt, ap);
}

int ckpt_tr_reason(ckpt_training *t, const char *fmt, ...) {
    va_list ap;
    int rc;

    va_start(ap, fmt);
    rc = ckpt_tr_vreason(t, fmt, ap);
    va_end(ap);
    return rc;
}

int ckpt_tr_nomem(void) { return ckpt_err_nomem(); }

/* ------------------------------------------------------------ tree helpers */

int ckpt_tr_visit(ckpt_training *t) {
    if (t->budget == 0) {
        t->cut = 1;
        return 0;
    }
    t->budget--;
    return 1;
}

int ckpt_tr_key_is(const char *k, size_t len, const char *name) {
    return k && strlen(name) == len && memcmp(k, name, len) == 0;
}

/* The value of string key `key` in a dict (the last one, as Python keeps),
 * or NULL. */
const ckpt_value *ckpt_tr_dict_get(const ckpt_value *d, const char *key) {
    const ckpt_value *found = NULL;
    size_t n, i;

    if (d == NULL || d->kind != CKPT_KIND_DICT) return NULL;
    n = strlen(key);
    for (i = 0; i < d->u.dict.n; i++) {
        const ckpt_value *k = d->u.dict.keys[i];

        if (k->kind == CKPT_KIND_STR && k->u.s.len == n && memcmp(k->u.s.p, key, n) == 0)
            found = d->u.dict.vals[i];
    }
    return found;
}

int ckpt_tr_is_seq(const ckpt_value *v) {
    return v && (v->kind == CKPT_KIND_LIST || v->kind == CKPT_KIND_TUPLE);
}

const ckpt_tensor *ckpt_tr_as_tensor(const ckpt_value *v) {
    return v && v->kind == CKPT_KIND_TENSOR ? v->u.tensor : NULL;
}

/* s, or "?" when building it ran out of memory: the failure is sticky
 * (t->nomem) and fails the analysis at its end, so that sentences can be
 * composed inline. */
const char *ckpt_tr_sticky(ckpt_training *t, const char *s) {
    if (s) return s;
    t->nomem = 1;
    return "?";
}

int ckpt_tr_same_shape(const ckpt_tensor *a, const ckpt_tensor *b) {
    return a->ndim == b->ndim &&
           (a->ndim == 0 || memcmp(a->shape, b->shape, a->ndim * sizeof *a->shape) == 0);
}

int ckpt_tr_cmp_shape(const ckpt_tensor *a, const ckpt_tensor *b) {
    uint32_t d;

    if (a->ndim != b->ndim) return a->ndim < b->ndim ? -1 : 1;
    for (d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d]) return a->shape[d] < b->shape[d] ? -1 : 1;
    return 0;
}

/* "[8, 4]" in the arena. */
const char *ckpt_tr_shape_text(ckpt_training *t, const ckpt_tensor *x) {
    char buf[256];
    size_t used = 0;
    uint32_t d;

    buf[used++] = '[';
    for (d = 0; d < x->ndim && used + 48 < sizeof buf; d++)
        used += (size_t)snprintf(buf + used, sizeof buf - used, "%s%llu", d ? ", " : "",
                                 (unsigned long long)x->shape[d]);
    if (d < x->ndim) used += (size_t)snprintf(buf + used, sizeof buf - used, ", ...");
    snprintf(buf + used, sizeof buf - used, "]");
    return ckpt_tr_sticky(t, ckpt_arena_strdup(&t->arena, buf));
}

int ckpt_tr_ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);

    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* A model tensor an optimizer trains: floating point, and not one of
 * BatchNorm's running statistics (the only float buffers every torch model
 * zoo has; others make the counts differ and are matched by shape). */
int ckpt_tr_is_param(const tr_tensor *x) {
    return ckpt_dtype_is_float(x->t->dtype) && !ckpt_tr_ends_with(x->name, "running_mean") &&
           !ckpt_tr_ends_with(x->name, "running_var");
}

/* The value of a tensor of one element (a counter), or NaN. */
static double tensor_number(const ckpt_tensor *x) {
    unsigned char b[COUNTER_BYTES_MAX];
    uint32_t u32;
    uint16_t u16;
    float f;
    double d;
    int64_t i64;
    int32_t i32;
    int16_t i16;

    if (x->numel != 1 || x->nbytes > sizeof b || ckpt_tensor_read(x, b, sizeof b) != 0) return NAN;
    switch (x->dtype) {
    case CKPT_DT_F32: memcpy(&f, b, 4); return f;
    case CKPT_DT_F64: memcpy(&d, b, 8); return d;
    case CKPT_DT_I64: memcpy(&i64, b, 8); return (double)i64;
    case CKPT_DT_I32: memcpy(&i32, b, 4); return i32;
    case CKPT_DT_I16: memcpy(&i16, b, 2); return i16;
    case CKPT_DT_I8: return (int8_t)b[0];
    case CKPT_DT_U8:
    case CKPT_DT_BOOL: return b[0];
    case CKPT_DT_BF16:
        memcpy(&u16, b, 2);
        u32 = (uint32_t)u16 << 16;
        memcpy(&f, &u32, 4);
        return f;
    case CKPT_DT_F16: {
        unsigned e;
        double m;

        memcpy(&u16, b, 2);
        e = (u16 >> 10) & 0x1fu;
        m = u16 & 0x3ffu;
        d = e == 0    ? ldexp(m, -24)
            : e == 31 ? (m != 0 ? NAN : INFINITY)
                      : ldexp(m + 1024, (int)e - 25);
        return (u16 & 0x8000u) ? -d : d;
    }
    default: return NAN;
    }
}

/* ------------------------------------------------------------ components */

int ckpt_tr_comp_add(ckpt_training *t, const char *file, int ordered, ckpt_component_kind kind,
                     const char *path, const char *type, const ckpt_value *v, size_t *idx) {
    tr_comp *c;

    *idx = 0;
    if (ckpt_arena_grow(&t->arena, (void **)&t->comps, &t->ccomps, t->ncomps + 1, sizeof *t->comps))
        return ckpt_tr_nomem();
    c = &t->comps[t->ncomps];
    memset(c, 0, sizeof *c);
    c->pub.kind = kind;
    c->pub.file = file;
    c->pub.name = path;
    c->pub.type = type ? type : "";
    c->pub.value = v;
    c->pub.number = NAN;
    c->ordered = ordered;
    *idx = t->ncomps++;
    return 0;
}

void ckpt_tr_count_tensor(ckpt_component *c, const ckpt_tensor *x) {
    c->tensors++;
    c->elements += x->numel;
    c->bytes += x->nbytes;
}

/* The type of a counter as shown: "int", "float", "0-dim F32 tensor". */
static const char *counter_type(ckpt_training *t, const ckpt_value *v) {
    const ckpt_tensor *x = ckpt_tr_as_tensor(v);

    if (x == NULL) return ckpt_kind_name(ckpt_value_kind(v));
    if (x->ndim == 0)
        return ckpt_tr_sticky(
            t, ckpt_arena_printf(&t->arena, "0-dim %s tensor", ckpt_dtype_name(x->dtype)));
    return ckpt_tr_sticky(t, ckpt_arena_printf(&t->arena, "%s tensor %s", ckpt_dtype_name(x->dtype),
                                               ckpt_tr_shape_text(t, x)));
}

int ckpt_tr_add_counter(ckpt_training *t, const char *file, int ordered, const char *path,
                        const ckpt_value *v) {
    const char *type = counter_type(t, v);
    size_t idx;
    int rc;

    if ((rc = ckpt_tr_comp_add(t, file, ordered, CKPT_COMPONENT_COUNTER, path, type, v, &idx)))
        return rc;
    if (v->kind == CKPT_KIND_TENSOR) {
        ckpt_tr_count_tensor(&t->comps[idx].pub, v->u.tensor);
        t->comps[idx].pub.number = tensor_number(v->u.tensor);
    } else if (v->kind == CKPT_KIND_INT) {
        t->comps[idx].pub.number = v->u.i.decimal ? strtod(v->u.i.decimal, NULL) : (double)v->u.i.v;
    } else if (v->kind == CKPT_KIND_FLOAT) {
        t->comps[idx].pub.number = v->u.f;
    }
    return 0;
}

int ckpt_tr_add_json_counter(ckpt_training *t, const char *file, const char *key, int is_int,
                             int64_t i, double d) {
    ckpt_value *v = is_int ? ckpt_value_new_int(&t->arena, i) : ckpt_value_new_float(&t->arena, d);
    const char *path = ckpt_arena_strdup(&t->arena, key);

    if (v == NULL || path == NULL) return ckpt_tr_nomem();
    return ckpt_tr_add_counter(t, file, 0, path, v);
}

/* ------------------------------------------------------------ optimizer state */

/* Per-parameter state keys of torch.optim (and Adafactor's factored ones):
 * which optimizer wrote them, and whether the tensor has the parameter's
 * shape. */
static const struct {
    const char *name;
    int shaped;
} state_keys[TR_K_COUNT] = {
    {"step", 0},
    {"exp_avg", 1},
    {"exp_avg_sq", 1},
    {"max_exp_avg_sq", 1},
    {"momentum_buffer", 1},
    {"sum", 1},
    {"square_avg", 1},
    {"acc_delta", 1},
    {"grad_avg", 1},
    {"exp_inf", 1},
    {"mu_product", 0},
    {"eta", 0},
    {"mu", 0},
    {"ax", 1},
    {"prev", 1},
    {"step_size", 1},
    {"exp_avg_sq_row", 0},
};

int ckpt_tr_state_key(const char *k, size_t len) {
    int i;

    if (ckpt_tr_ends_with(k, "_row") || ckpt_tr_ends_with(k, "_col")) return TR_K_FACTORED;
    for (i = 0; i < TR_K_COUNT; i++)
        if (ckpt_tr_key_is(k, len, state_keys[i].name)) return i;
    return -1;
}

int ckpt_tr_shaped_key(const char *k, size_t len) {
    int s = ckpt_tr_state_key(k, len);

    return s >= 0 && state_keys[s].shaped;
}

/* The parameter index a "state" key stands for: an int, or its decimal
 * text (as JSON round trips write it). */
int ckpt_tr_param_id(const ckpt_value *k, uint64_t *id) {
    const char *s;
    char *end;
    unsigned long long x;

    if (k->kind == CKPT_KIND_INT && k->u.i.decimal == NULL && k->u.i.v >= 0) {
        *id = (uint64_t)k->u.i.v;
        return 1;
    }
    if (k->kind != CKPT_KIND_STR || k->u.s.len == 0 || k->u.s.len > 19) return 0;
    s = k->u.s.p;
    if (s[0] < '0' || s[0] > '9') return 0;
    x = strtoull(s, &end, 10);
    if (*end != '\0') return 0;
    *id = x;
    return 1;
}
