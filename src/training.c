/* training.c - the components of a training checkpoint and whether training
 * can resume from it (ckpt_training_*; the rules are in ckpt.h).
 *
 * One walk over each file's object tree sorts subtrees into components by
 * their structure (an optimizer is "state" + "param_groups" wherever it
 * sits, a state dict is a dict whose leaves are all tensors...). Once every
 * file is in, ckpt_tr_finish pairs each optimizer's per-parameter state
 * with the model's parameters and decides the verdict. Only shapes and
 * sizes are looked at: no tensor bytes are read but those of 0-dim
 * counters. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "training.h"
#include "value.h"

/* Tree nodes visited per analysis before it stops: shared references in a
 * hostile pickle can make a small file an exponentially large tree. */
#define WALK_BUDGET ((uint64_t)1 << 24)
/* Parameters named per problem sentence before "and N more". */
#define NAMES_MAX 8
/* Bytes of a 0-dim counter tensor that are read (its value). */
#define COUNTER_BYTES_MAX 8

/* ------------------------------------------------------------ strings */

static int vpush(ckpt_training *t, const char ***arr, size_t *n, size_t *cap,
                 const char *fmt, va_list ap)
{
    va_list ap2;
    int len;
    char *s;

    va_copy(ap2, ap);
    len = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (len < 0)
        return CKPT_E_NOMEM;
    s = ckpt_arena_alloc(&t->arena, (size_t)len + 1);
    if (s == NULL)
        return ckpt_err(CKPT_E_NOMEM, "", NULL, CKPT_NO_OFFSET,
                        "out of memory");
    vsnprintf(s, (size_t)len + 1, fmt, ap);
    return ckpt_tr_push_str(t, arr, n, cap, s);
}

int ckpt_tr_push_str(ckpt_training *t, const char ***arr, size_t *n,
                     size_t *cap, const char *s)
{
    if (ckpt_arena_grow(&t->arena, (void **)arr, cap, *n + 1, sizeof **arr))
        return ckpt_err(CKPT_E_NOMEM, "", NULL, CKPT_NO_OFFSET,
                        "out of memory");
    (*arr)[(*n)++] = s;
    return 0;
}

int ckpt_tr_warn(ckpt_training *t, const char *fmt, ...)
{
    va_list ap;
    int rc;

    va_start(ap, fmt);
    rc = vpush(t, &t->warnings, &t->nwarnings, &t->cwarnings, fmt, ap);
    va_end(ap);
    return rc;
}

int ckpt_tr_reason(ckpt_training *t, const char *fmt, ...)
{
    va_list ap;
    int rc;

    va_start(ap, fmt);
    rc = vpush(t, &t->reasons, &t->nreasons, &t->creasons, fmt, ap);
    va_end(ap);
    return rc;
}

static int nomem(void)
{
    return ckpt_err(CKPT_E_NOMEM, "", NULL, CKPT_NO_OFFSET, "out of memory");
}

/* ------------------------------------------------------------ tree helpers */

int ckpt_tr_visit(ckpt_training *t)
{
    if (t->budget == 0) {
        t->cut = 1;
        return 0;
    }
    t->budget--;
    return 1;
}

const char *ckpt_tr_key_text(const ckpt_value *k, char tmp[32], size_t *len)
{
    const char *s;

    switch (k->kind) {
    case CKPT_KIND_STR:
    case CKPT_KIND_BYTES:
        *len = k->u.s.len;
        return k->u.s.p;
    case CKPT_KIND_INT:
        s = ckpt_value_int_decimal(k);
        break;
    case CKPT_KIND_BOOL:
        s = k->u.b ? "True" : "False";
        break;
    case CKPT_KIND_NONE:
        s = "None";
        break;
    case CKPT_KIND_FLOAT:
        snprintf(tmp, 32, "%.17g", k->u.f);
        s = tmp;
        break;
    default:
        s = ckpt_kind_name(ckpt_value_kind(k));
        break;
    }
    *len = strlen(s);
    return s;
}

static int key_is(const char *k, size_t len, const char *name)
{
    return k && strlen(name) == len && memcmp(k, name, len) == 0;
}

static int key_has(const char *k, size_t len, const char *part)
{
    size_t n = strlen(part), i;

    for (i = 0; k && i + n <= len; i++)
        if (memcmp(k + i, part, n) == 0)
            return 1;
    return 0;
}

/* The value of string key `key` in a dict (the last one, as Python keeps),
 * or NULL. */
static const ckpt_value *dict_get(const ckpt_value *d, const char *key)
{
    const ckpt_value *found = NULL;
    size_t n, i;

    if (d == NULL || d->kind != CKPT_KIND_DICT)
        return NULL;
    n = strlen(key);
    for (i = 0; i < d->u.dict.n; i++) {
        const ckpt_value *k = d->u.dict.keys[i];

        if (k->kind == CKPT_KIND_STR && k->u.s.len == n &&
            memcmp(k->u.s.p, key, n) == 0)
            found = d->u.dict.vals[i];
    }
    return found;
}

static int is_seq(const ckpt_value *v)
{
    return v && (v->kind == CKPT_KIND_LIST || v->kind == CKPT_KIND_TUPLE);
}

static int is_number(const ckpt_value *v)
{
    return v && (v->kind == CKPT_KIND_INT || v->kind == CKPT_KIND_FLOAT);
}

static const ckpt_tensor *as_tensor(const ckpt_value *v)
{
    return v && v->kind == CKPT_KIND_TENSOR ? v->u.tensor : NULL;
}

static char *join(ckpt_training *t, const char *path, const char *seg,
                  size_t len)
{
    if (path[0] == '\0')
        return ckpt_arena_strndup(&t->arena, seg, len);
    return ckpt_arena_printf(&t->arena, "%s.%.*s", path, (int)len, seg);
}

static int same_shape(const ckpt_tensor *a, const ckpt_tensor *b)
{
    return a->ndim == b->ndim &&
           (a->ndim == 0 ||
            memcmp(a->shape, b->shape, a->ndim * sizeof *a->shape) == 0);
}

static int cmp_shape(const ckpt_tensor *a, const ckpt_tensor *b)
{
    uint32_t d;

    if (a->ndim != b->ndim)
        return a->ndim < b->ndim ? -1 : 1;
    for (d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d])
            return a->shape[d] < b->shape[d] ? -1 : 1;
    return 0;
}

/* "[8, 4]" in the arena. */
static const char *shape_text(ckpt_training *t, const ckpt_tensor *x)
{
    char buf[256];
    size_t used = 0;
    uint32_t d;

    buf[used++] = '[';
    for (d = 0; d < x->ndim && used + 48 < sizeof buf; d++)
        used += (size_t)snprintf(buf + used, sizeof buf - used,
                                 "%s%llu", d ? ", " : "",
                                 (unsigned long long)x->shape[d]);
    if (d < x->ndim)
        used += (size_t)snprintf(buf + used, sizeof buf - used, ", ...");
    snprintf(buf + used, sizeof buf - used, "]");
    return ckpt_arena_strdup(&t->arena, buf);
}

static int is_float(ckpt_dtype dt)
{
    switch (dt) {
    case CKPT_DT_F16: case CKPT_DT_BF16: case CKPT_DT_F32: case CKPT_DT_F64:
    case CKPT_DT_F8_E5M2: case CKPT_DT_F8_E4M3: case CKPT_DT_F8_E8M0:
    case CKPT_DT_F8_E4M3FNUZ: case CKPT_DT_F8_E5M2FNUZ: case CKPT_DT_F4:
    case CKPT_DT_F6_E2M3: case CKPT_DT_F6_E3M2:
        return 1;
    default:
        return 0;
    }
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);

    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* A model tensor an optimizer trains: floating point, and not one of
 * BatchNorm's running statistics (the only float buffers every torch model
 * zoo has; others make the counts differ and are matched by shape). */
static int is_param(const tr_tensor *x)
{
    return is_float(x->t->dtype) && !ends_with(x->name, "running_mean") &&
           !ends_with(x->name, "running_var");
}

/* The value of a tensor of one element (a counter), or NaN. */
static double tensor_number(const ckpt_tensor *x)
{
    unsigned char b[COUNTER_BYTES_MAX];
    uint32_t u32;
    uint16_t u16;
    float f;
    double d;
    int64_t i64;
    int32_t i32;
    int16_t i16;

    if (x->numel != 1 || x->nbytes > sizeof b ||
        ckpt_tensor_read(x, b, sizeof b) != 0)
        return NAN;
    switch (x->dtype) {
    case CKPT_DT_F32: memcpy(&f, b, 4); return f;
    case CKPT_DT_F64: memcpy(&d, b, 8); return d;
    case CKPT_DT_I64: memcpy(&i64, b, 8); return (double)i64;
    case CKPT_DT_I32: memcpy(&i32, b, 4); return i32;
    case CKPT_DT_I16: memcpy(&i16, b, 2); return i16;
    case CKPT_DT_I8: return (int8_t)b[0];
    case CKPT_DT_U8: case CKPT_DT_BOOL: return b[0];
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
        d = e == 0 ? ldexp(m, -24)
            : e == 31 ? (m ? NAN : INFINITY) : ldexp(m + 1024, (int)e - 25);
        return (u16 & 0x8000u) ? -d : d;
    }
    default:
        return NAN;
    }
}

/* ------------------------------------------------------------ components */

typedef struct walker {
    ckpt_training *t;
    const char *file;
    int ordered; /* dict order is the writer's (pickles) */
} walker;

/* Appends a component; returns its index through *idx. */
static int comp_add(walker *w, ckpt_component_kind kind, const char *path,
                    const char *type, const ckpt_value *v, size_t *idx)
{
    ckpt_training *t = w->t;
    tr_comp *c;

    if (ckpt_arena_grow(&t->arena, (void **)&t->comps, &t->ccomps,
                        t->ncomps + 1, sizeof *t->comps))
        return nomem();
    c = &t->comps[t->ncomps];
    memset(c, 0, sizeof *c);
    c->pub.kind = kind;
    c->pub.file = w->file;
    c->pub.name = path;
    c->pub.type = type ? type : "";
    c->pub.value = v;
    c->pub.number = NAN;
    c->ordered = w->ordered;
    *idx = t->ncomps++;
    return 0;
}

static void count_tensor(ckpt_component *c, const ckpt_tensor *x)
{
    c->tensors++;
    c->elements += x->numel;
    c->bytes += x->nbytes;
}

/* Sums every tensor under v into c (and, with `state`, those of at least
 * one dimension into state_bytes). */
static void sum_tensors(ckpt_training *t, ckpt_component *c,
                        const ckpt_value *v, int state, unsigned depth)
{
    size_t i;

    if (!ckpt_tr_visit(t) || depth > CKPT_MAX_NDIM * 16)
        return;
    switch (v->kind) {
    case CKPT_KIND_TENSOR:
        count_tensor(c, v->u.tensor);
        if (state && v->u.tensor->ndim > 0)
            c->state_bytes += v->u.tensor->nbytes;
        break;
    case CKPT_KIND_LIST:
    case CKPT_KIND_TUPLE:
    case CKPT_KIND_SET:
        for (i = 0; i < v->u.seq.n; i++)
            sum_tensors(t, c, v->u.seq.items[i], state, depth + 1);
        break;
    case CKPT_KIND_DICT:
        for (i = 0; i < v->u.dict.n; i++)
            sum_tensors(t, c, v->u.dict.vals[i], state, depth + 1);
        break;
    default:
        break;
    }
}

static int simple(walker *w, ckpt_component_kind kind, const char *path,
                  const char *type, const ckpt_value *v)
{
    size_t idx;
    int rc = comp_add(w, kind, path, type, v, &idx);

    if (rc == 0)
        sum_tensors(w->t, &w->t->comps[idx].pub, v, 0, 0);
    return rc;
}

/* ---- model */

/* 1 when every leaf under dict v is a tensor and one of them is neither
 * uint8 nor bool (dicts of byte tensors are RNG states, not weights). */
static int weights_tree(ckpt_training *t, const ckpt_value *v, int *weights,
                        unsigned depth)
{
    size_t i, n;
    const ckpt_value *child;

    if (!ckpt_tr_visit(t) || depth > CKPT_MAX_NDIM * 16)
        return 0;
    if (v->kind == CKPT_KIND_TENSOR) {
        *weights |= v->u.tensor->dtype != CKPT_DT_U8 &&
                    v->u.tensor->dtype != CKPT_DT_BOOL;
        return 1;
    }
    if (v->kind == CKPT_KIND_DICT)
        n = v->u.dict.n;
    else if (is_seq(v))
        n = v->u.seq.n;
    else
        return 0;
    if (n == 0)
        return 0;
    for (i = 0; i < n; i++) {
        child = v->kind == CKPT_KIND_DICT ? v->u.dict.vals[i]
                                          : v->u.seq.items[i];
        if (!weights_tree(t, child, weights, depth + 1))
            return 0;
    }
    return 1;
}

static int model_tensor(ckpt_training *t, tr_comp *c, const char *name,
                        const ckpt_tensor *x)
{
    tr_tensor *e;

    if (ckpt_arena_grow(&t->arena, (void **)&c->tensors, &c->cap,
                        c->ntensors + 1, sizeof *c->tensors))
        return nomem();
    e = &c->tensors[c->ntensors++];
    e->name = name;
    e->t = x;
    count_tensor(&c->pub, x);
    if (is_param(e))
        c->pub.param_bytes += x->nbytes;
    return 0;
}

/* Collects the tensors of a weights tree in order, with their names. */
static int collect(ckpt_training *t, size_t idx, const ckpt_value *v,
                   const char *path, unsigned depth)
{
    char tmp[32];
    size_t i, n, len;
    const char *k;
    char *name;
    int rc;

    if (v->kind == CKPT_KIND_TENSOR)
        return model_tensor(t, &t->comps[idx], path, v->u.tensor);
    if (!ckpt_tr_visit(t) || depth > CKPT_MAX_NDIM * 16)
        return 0;
    n = v->kind == CKPT_KIND_DICT ? v->u.dict.n : v->u.seq.n;
    for (i = 0; i < n; i++) {
        if (v->kind == CKPT_KIND_DICT) {
            k = ckpt_tr_key_text(v->u.dict.keys[i], tmp, &len);
        } else {
            len = (size_t)snprintf(tmp, sizeof tmp, "%zu", i);
            k = tmp;
        }
        if ((name = join(t, path, k, len)) == NULL)
            return nomem();
        rc = collect(t, idx,
                     v->kind == CKPT_KIND_DICT ? v->u.dict.vals[i]
                                               : v->u.seq.items[i],
                     name, depth + 1);
        if (rc)
            return rc;
    }
    return 0;
}

/* ---- optimizer */

/* Per-parameter state keys of torch.optim (and Adafactor's factored ones):
 * which optimizer wrote them, and whether the tensor has the parameter's
 * shape. */
enum {
    K_STEP, K_EXP_AVG, K_EXP_AVG_SQ, K_MAX_EXP_AVG_SQ, K_MOMENTUM_BUFFER,
    K_SUM, K_SQUARE_AVG, K_ACC_DELTA, K_GRAD_AVG, K_EXP_INF, K_MU_PRODUCT,
    K_ETA, K_MU, K_AX, K_PREV, K_STEP_SIZE, K_FACTORED, K_COUNT
};
static const struct {
    const char *name;
    int shaped;
} state_keys[K_COUNT] = {
    { "step", 0 },           { "exp_avg", 1 },      { "exp_avg_sq", 1 },
    { "max_exp_avg_sq", 1 }, { "momentum_buffer", 1 }, { "sum", 1 },
    { "square_avg", 1 },     { "acc_delta", 1 },    { "grad_avg", 1 },
    { "exp_inf", 1 },        { "mu_product", 0 },   { "eta", 0 },
    { "mu", 0 },             { "ax", 1 },           { "prev", 1 },
    { "step_size", 1 },      { "exp_avg_sq_row", 0 },
};

static int state_key(const char *k, size_t len)
{
    int i;

    if (ends_with(k, "_row") || ends_with(k, "_col"))
        return K_FACTORED;
    for (i = 0; i < K_COUNT; i++)
        if (key_is(k, len, state_keys[i].name))
            return i;
    return -1;
}

/* Keys present in any per-parameter entry (bit K_x), and those holding a
 * tensor somewhere (*tensors). */
static unsigned state_flags(const ckpt_value *state, unsigned *tensors)
{
    unsigned flags = 0;
    size_t i, j, len;
    char tmp[32];

    *tensors = 0;
    for (i = 0; state && i < state->u.dict.n; i++) {
        const ckpt_value *e = state->u.dict.vals[i];

        for (j = 0; e->kind == CKPT_KIND_DICT && j < e->u.dict.n; j++) {
            const char *k = ckpt_tr_key_text(e->u.dict.keys[j], tmp, &len);
            int s = state_key(k, len);

            if (s < 0)
                continue;
            flags |= 1u << s;
            if (e->u.dict.vals[j]->kind == CKPT_KIND_TENSOR)
                *tensors |= 1u << s;
        }
    }
    return flags;
}

/* A group hyperparameter as a number (0 when absent). */
static double group_number(const ckpt_value *groups, const char *key,
                           int *present)
{
    const ckpt_value *g = is_seq(groups) && groups->u.seq.n
                              ? dict_get(groups->u.seq.items[0], key)
                              : NULL;

    *present = is_number(g);
    if (!*present)
        return 0;
    return g->kind == CKPT_KIND_INT ? (double)g->u.i.v : g->u.f;
}

#define HAS(k) (flags & (1u << (k)))

static const char *optimizer_type(const ckpt_value *state,
                                  const ckpt_value *groups)
{
    unsigned tensors, flags = state_flags(state, &tensors);
    int has_momentum;
    double momentum = group_number(groups, "momentum", &has_momentum);

    if (HAS(K_FACTORED))
        return "Adafactor";
    if (HAS(K_SQUARE_AVG))
        return HAS(K_ACC_DELTA) ? "Adadelta" : "RMSprop";
    if (HAS(K_EXP_INF))
        return "Adamax";
    if (HAS(K_MU_PRODUCT))
        return "NAdam";
    if (HAS(K_EXP_AVG) && HAS(K_EXP_AVG_SQ))
        return HAS(K_MAX_EXP_AVG_SQ) ? "Adam/AdamW (amsgrad)" : "Adam/AdamW";
    if (HAS(K_ETA) && HAS(K_MU) && HAS(K_AX))
        return "ASGD";
    if (HAS(K_PREV) && HAS(K_STEP_SIZE))
        return "Rprop";
    if (HAS(K_SUM))
        return "Adagrad";
    if (tensors & (1u << K_MOMENTUM_BUFFER))
        return "SGD (momentum)";
    if ((flags & ~(1u << K_MOMENTUM_BUFFER)) == 0 && has_momentum &&
        dict_get(groups->u.seq.items[0], "dampening"))
        return momentum == 0 ? "SGD" : "SGD (momentum)";
    return "unknown";
}

#undef HAS

/* A state dict of an optimizer: "state" (a dict) plus "param_groups" (a
 * list), or a "state" whose entries are all dicts and name known keys. */
static int is_optimizer(const ckpt_value *v)
{
    const ckpt_value *state = dict_get(v, "state");
    unsigned tensors;
    size_t i;

    if (state == NULL || state->kind != CKPT_KIND_DICT)
        return 0;
    if (is_seq(dict_get(v, "param_groups")))
        return 1;
    if (state->u.dict.n == 0)
        return 0;
    for (i = 0; i < state->u.dict.n; i++)
        if (state->u.dict.vals[i]->kind != CKPT_KIND_DICT)
            return 0;
    return state_flags(state, &tensors) != 0;
}

/* The parameter index a "state" key stands for: an int, or its decimal
 * text (as JSON round trips write it). */
static int param_id(const ckpt_value *k, uint64_t *id)
{
    const char *s;
    char *end;
    unsigned long long x;

    if (k->kind == CKPT_KIND_INT && k->u.i.decimal == NULL && k->u.i.v >= 0) {
        *id = (uint64_t)k->u.i.v;
        return 1;
    }
    if (k->kind != CKPT_KIND_STR || k->u.s.len == 0 || k->u.s.len > 19)
        return 0;
    s = k->u.s.p;
    if (s[0] < '0' || s[0] > '9')
        return 0;
    x = strtoull(s, &end, 10);
    if (*end != '\0')
        return 0;
    *id = x;
    return 1;
}

/* The type of a counter as shown: "int", "float", "0-dim F32 tensor". */
static const char *counter_type(ckpt_training *t, const ckpt_value *v)
{
    const ckpt_tensor *x = as_tensor(v);

    if (x == NULL)
        return ckpt_kind_name(ckpt_value_kind(v));
    if (x->ndim == 0)
        return ckpt_arena_printf(&t->arena, "0-dim %s tensor",
                                 ckpt_dtype_name(x->dtype));
    return ckpt_arena_printf(&t->arena, "%s tensor %s",
                             ckpt_dtype_name(x->dtype), shape_text(t, x));
}

static int add_counter(walker *w, const char *path, const ckpt_value *v)
{
    ckpt_training *t = w->t;
    const char *type = counter_type(t, v);
    size_t idx;
    int rc;

    if (type == NULL)
        return nomem();
    if ((rc = comp_add(w, CKPT_COMPONENT_COUNTER, path, type, v, &idx)))
        return rc;
    if (v->kind == CKPT_KIND_TENSOR) {
        count_tensor(&t->comps[idx].pub, v->u.tensor);
        t->comps[idx].pub.number = tensor_number(v->u.tensor);
    } else if (v->kind == CKPT_KIND_INT) {
        t->comps[idx].pub.number = (double)v->u.i.v;
    } else if (v->kind == CKPT_KIND_FLOAT) {
        t->comps[idx].pub.number = v->u.f;
    }
    return 0;
}

static int add_optimizer(walker *w, const ckpt_value *v, const char *path)
{
    ckpt_training *t = w->t;
    const ckpt_value *state = dict_get(v, "state");
    const ckpt_value *groups = dict_get(v, "param_groups");
    ckpt_component *c;
    size_t idx, i, len;
    char tmp[32];
    int rc;

    if (!is_seq(groups))
        groups = NULL;
    rc = comp_add(w, CKPT_COMPONENT_OPTIMIZER, path,
                  optimizer_type(state, groups), v, &idx);
    if (rc)
        return rc;
    c = &t->comps[idx].pub;
    c->param_groups = groups;
    sum_tensors(t, c, state, 1, 0);
    if (groups)
        sum_tensors(t, c, groups, 0, 0);
    /* The step counter: the first entry's, as written (its type differs
     * between optimizers and torch versions). */
    for (i = 0; i < state->u.dict.n; i++) {
        const ckpt_value *step = dict_get(state->u.dict.vals[i], "step");
        const char *k = ckpt_tr_key_text(state->u.dict.keys[i], tmp, &len);
        char *name;

        if (step == NULL)
            continue;
        name = ckpt_arena_printf(&t->arena, "%s%sstate.%.*s.step", path,
                                 path[0] ? "." : "", (int)len, k);
        if (name == NULL)
            return nomem();
        return add_counter(w, name, step);
    }
    return 0;
}

/* ---- the other kinds */

static int is_scheduler(const ckpt_value *v)
{
    const ckpt_value *last = dict_get(v, "last_epoch");

    return last && last->kind == CKPT_KIND_INT &&
           (dict_get(v, "_step_count") || dict_get(v, "base_lrs") ||
            dict_get(v, "_last_lr") ||
            (dict_get(v, "patience") && dict_get(v, "num_bad_epochs")));
}

/* The torch.optim.lr_scheduler class whose state_dict has these keys. */
static const char *scheduler_type(const ckpt_value *v)
{
    static const struct {
        const char *key, *key2, *type;
    } table[] = {
        { "_schedulers", NULL, "SequentialLR/ChainedScheduler" },
        { "lr_lambdas", NULL, "LambdaLR" },
        { "milestones", NULL, "MultiStepLR" },
        { "patience", NULL, "ReduceLROnPlateau" },
        { "T_0", NULL, "CosineAnnealingWarmRestarts" },
        { "T_max", NULL, "CosineAnnealingLR" },
        { "total_steps", NULL, "OneCycleLR" },
        { "total_size", NULL, "CyclicLR" },
        { "start_factor", NULL, "LinearLR" },
        { "power", NULL, "PolynomialLR" },
        { "factor", "total_iters", "ConstantLR" },
        { "step_size", "gamma", "StepLR" },
        { "gamma", NULL, "ExponentialLR" },
    };
    size_t i;

    for (i = 0; i < sizeof table / sizeof *table; i++)
        if (dict_get(v, table[i].key) &&
            (table[i].key2 == NULL || dict_get(v, table[i].key2)))
            return table[i].type;
    return "scheduler";
}

static int is_scaler(const ckpt_value *v)
{
    return dict_get(v, "scale") &&
           (dict_get(v, "_growth_tracker") || dict_get(v, "growth_tracker") ||
            dict_get(v, "growth_factor"));
}

/* numpy's legacy ('MT19937', keys, pos, has_gauss, cached_gaussian). */
static int is_numpy_rng(const ckpt_value *v)
{
    const ckpt_value *name;

    if (!is_seq(v) || v->u.seq.n < 3)
        return 0;
    name = v->u.seq.items[0];
    return name->kind == CKPT_KIND_STR && strcmp(name->u.s.p, "MT19937") == 0 &&
           v->u.seq.items[1]->kind == CKPT_KIND_TENSOR;
}

/* numpy Generator's bit_generator.state: {'bit_generator': 'PCG64', ...}. */
static int is_numpy_bitgen(const ckpt_value *v)
{
    const ckpt_value *name = dict_get(v, "bit_generator");

    return name && name->kind == CKPT_KIND_STR && dict_get(v, "state");
}

/* random.getstate(): (version, tuple of 625 ints, gauss_next). */
static int is_python_rng(const ckpt_value *v)
{
    const ckpt_value *ver, *words, *gauss;
    size_t i;

    if (!is_seq(v) || v->u.seq.n != 3)
        return 0;
    ver = v->u.seq.items[0];
    words = v->u.seq.items[1];
    gauss = v->u.seq.items[2];
    if (ver->kind != CKPT_KIND_INT || !is_seq(words) ||
        words->u.seq.n != 625 ||
        (gauss->kind != CKPT_KIND_NONE && gauss->kind != CKPT_KIND_FLOAT))
        return 0;
    for (i = 0; i < words->u.seq.n; i++)
        if (words->u.seq.items[i]->kind != CKPT_KIND_INT)
            return 0;
    return 1;
}

/* torch.get_rng_state() is a 1-D uint8 tensor of
 * sizeof(CPUGeneratorImplState) = 5056 bytes (torch 1.x and 2.x). */
#define TORCH_CPU_RNG_BYTES 5056u

static int is_byte_vector(const ckpt_tensor *x)
{
    return x && x->dtype == CKPT_DT_U8 && x->ndim == 1;
}

/* The RNG a byte vector under `key` holds, or NULL. */
static const char *torch_rng(const ckpt_tensor *x, const char *key,
                             size_t len)
{
    if (!is_byte_vector(x))
        return NULL;
    if (key_has(key, len, "cuda"))
        return "torch-cuda";
    if (x->numel == TORCH_CPU_RNG_BYTES || key_is(key, len, "cpu") ||
        key_is(key, len, "torch") || key_has(key, len, "rng"))
        return "torch-cpu";
    return NULL;
}

/* torch.cuda.get_rng_state_all(): a list of byte vectors. */
static int is_cuda_rng_list(const ckpt_value *v, const char *key, size_t len)
{
    size_t i;

    if (!is_seq(v) || v->u.seq.n == 0 || !key_has(key, len, "cuda"))
        return 0;
    for (i = 0; i < v->u.seq.n; i++)
        if (!is_byte_vector(as_tensor(v->u.seq.items[i])))
            return 0;
    return 1;
}

static int is_counter_key(const char *k, size_t len)
{
    static const char *const names[] = {
        "epoch", "epochs", "current_epoch", "step", "steps", "global_step",
        "global_steps", "iteration", "iterations", "iter", "num_updates",
        "updates", "total_steps", "num_steps", "train_step",
        "completed_steps", "n_iter",
    };
    size_t i;

    for (i = 0; i < sizeof names / sizeof *names; i++)
        if (key_is(k, len, names[i]))
            return 1;
    return 0;
}

/* Where a data loader or sampler stopped. */
static int is_data_key(const char *k, size_t len)
{
    static const char *const names[] = {
        "loops", "consumed_samples", "consumed_train_samples",
        "samples_seen", "batch_idx", "batches_seen", "data_state",
        "dataset_state", "data_position",
    };
    size_t i;

    if (key_has(k, len, "sampler") || key_has(k, len, "dataloader") ||
        key_has(k, len, "data_loader"))
        return 1;
    for (i = 0; i < sizeof names / sizeof *names; i++)
        if (key_is(k, len, names[i]))
            return 1;
    return 0;
}

/* ------------------------------------------------------------ the walk */

static int walk(walker *w, const ckpt_value *v, const char *path,
                const char *key, size_t klen, unsigned depth);

/* A tensor directly in a container: an RNG state, a counter, or neither
 * (*loose). */
static int leaf_tensor(walker *w, const ckpt_value *v, const char *path,
                       const char *key, size_t klen, int *loose)
{
    const ckpt_tensor *x = v->u.tensor;
    const char *rng = torch_rng(x, key, klen);

    *loose = 0;
    if (rng)
        return simple(w, CKPT_COMPONENT_RNG, path, rng, v);
    if (x->numel == 1 && is_counter_key(key, klen))
        return add_counter(w, path, v);
    *loose = 1;
    return 0;
}

/* The children of a container that is no component itself. Tensors among
 * them that are not RNG states or counters form one component: model
 * weights when one is a floating-point array, else "other". */
static int walk_children(walker *w, const ckpt_value *v, const char *path,
                         unsigned depth)
{
    ckpt_training *t = w->t;
    int is_dict = v->kind == CKPT_KIND_DICT;
    size_t n = is_dict ? v->u.dict.n : v->u.seq.n, i, len, group = SIZE_MAX;
    char tmp[32];
    int rc, loose;

    for (i = 0; i < n; i++) {
        const ckpt_value *child = is_dict ? v->u.dict.vals[i]
                                          : v->u.seq.items[i];
        const char *k;
        char *cpath;

        if (is_dict) {
            k = ckpt_tr_key_text(v->u.dict.keys[i], tmp, &len);
        } else {
            len = (size_t)snprintf(tmp, sizeof tmp, "%zu", i);
            k = tmp;
        }
        if ((cpath = join(t, path, k, len)) == NULL)
            return nomem();
        if (child->kind != CKPT_KIND_TENSOR) {
            rc = walk(w, child, cpath, is_dict ? k : NULL,
                      is_dict ? len : 0, depth + 1);
        } else {
            rc = leaf_tensor(w, child, cpath, is_dict ? k : NULL,
                             is_dict ? len : 0, &loose);
            if (rc == 0 && loose && group == SIZE_MAX)
                rc = comp_add(w, CKPT_COMPONENT_OTHER, path, NULL, v, &group);
            if (rc == 0 && loose)
                rc = model_tensor(t, &t->comps[group], cpath, child->u.tensor);
        }
        if (rc)
            return rc;
    }
    if (group != SIZE_MAX) {
        tr_comp *c = &t->comps[group];

        for (i = 0; i < c->ntensors; i++)
            if (is_param(&c->tensors[i]) && c->tensors[i].t->ndim > 0)
                c->pub.kind = CKPT_COMPONENT_MODEL;
    }
    return 0;
}

/* A value under a key that names a metadata topic: recorded whole, and
 * configuration-like values are looked into. */
static int meta_value(walker *w, int topic, const ckpt_value *v,
                      const char *path)
{
    int rc = ckpt_tr_meta_add(w->t, (ckpt_meta_topic)topic, w->file, "tree",
                              path, NULL, v);

    if (rc == 0 &&
        (v->kind == CKPT_KIND_DICT || v->kind == CKPT_KIND_OBJECT))
        rc = ckpt_tr_meta_scan(w->t, w->file, path, v, 3);
    return rc;
}

static int walk(walker *w, const ckpt_value *v, const char *path,
                const char *key, size_t klen, unsigned depth)
{
    ckpt_training *t = w->t;
    int weights = 0, topic, loose, rc;
    size_t idx;

    if (!ckpt_tr_visit(t))
        return 0;
    topic = key ? ckpt_tr_topic(key, klen, depth <= 1) : -1;
    switch (v->kind) {
    case CKPT_KIND_DICT:
        if (is_optimizer(v))
            return add_optimizer(w, v, path);
        if (is_scheduler(v))
            return simple(w, CKPT_COMPONENT_SCHEDULER, path,
                          scheduler_type(v), v);
        if (is_scaler(v))
            return simple(w, CKPT_COMPONENT_SCALER, path, NULL, v);
        if (is_numpy_bitgen(v))
            return simple(w, CKPT_COMPONENT_RNG, path, "numpy", v);
        if (is_data_key(key, klen))
            return simple(w, CKPT_COMPONENT_DATA, path, NULL, v);
        if (topic >= 0)
            return meta_value(w, topic, v, path);
        if (weights_tree(t, v, &weights, 0) && weights) {
            if ((rc = comp_add(w, CKPT_COMPONENT_MODEL, path, NULL, v, &idx)))
                return rc;
            return collect(t, idx, v, path, 0);
        }
        return walk_children(w, v, path, depth);
    case CKPT_KIND_LIST:
    case CKPT_KIND_TUPLE:
    case CKPT_KIND_SET:
        if (is_python_rng(v))
            return simple(w, CKPT_COMPONENT_RNG, path, "python", v);
        if (is_numpy_rng(v))
            return simple(w, CKPT_COMPONENT_RNG, path, "numpy", v);
        if (is_cuda_rng_list(v, key, klen))
            return simple(w, CKPT_COMPONENT_RNG, path, "torch-cuda", v);
        if (is_data_key(key, klen))
            return simple(w, CKPT_COMPONENT_DATA, path, NULL, v);
        if (topic >= 0)
            return meta_value(w, topic, v, path);
        return walk_children(w, v, path, depth);
    case CKPT_KIND_TENSOR: /* the root, or an item of a set */
        rc = leaf_tensor(w, v, path, key, klen, &loose);
        if (rc || !loose)
            return rc;
        if ((rc = comp_add(w, CKPT_COMPONENT_OTHER, path, NULL, v, &idx)))
            return rc;
        if ((rc = model_tensor(t, &t->comps[idx], path, v->u.tensor)))
            return rc;
        if (is_param(&t->comps[idx].tensors[0]))
            t->comps[idx].pub.kind = CKPT_COMPONENT_MODEL;
        return 0;
    case CKPT_KIND_INT:
    case CKPT_KIND_FLOAT:
        if (is_counter_key(key, klen))
            return add_counter(w, path, v);
        if (is_data_key(key, klen))
            return simple(w, CKPT_COMPONENT_DATA, path, NULL, v);
        return topic >= 0 ? meta_value(w, topic, v, path) : 0;
    case CKPT_KIND_OBJECT:
        /* argparse.Namespace, TrainingArguments...: never called, but their
         * BUILD state is data worth reading. */
        if (topic >= 0)
            return meta_value(w, topic, v, path);
        return ckpt_tr_meta_scan(t, w->file, path, v, 3);
    default:
        return topic >= 0 ? meta_value(w, topic, v, path) : 0;
    }
}

int ckpt_tr_add_file(ckpt_training *t, const ckpt_file *f, const char *name)
{
    walker w;
    const ckpt_value *root = ckpt_file_root(f);
    ckpt_format fmt = ckpt_file_format(f);
    const char *file = ckpt_arena_strdup(&t->arena, name);
    int rc;

    if (file == NULL)
        return nomem();
    if (ckpt_arena_grow(&t->arena, (void **)&t->files, &t->cfiles,
                        t->nfiles + 1, sizeof *t->files))
        return nomem();
    t->files[t->nfiles].f = f;
    t->files[t->nfiles++].name = file;
    w.t = t;
    w.file = file;
    w.ordered = fmt != CKPT_FORMAT_SAFETENSORS &&
                fmt != CKPT_FORMAT_SAFETENSORS_SHARDED;
    if (root && (rc = walk(&w, root, "", NULL, 0, 0)))
        return rc;
    return ckpt_tr_meta_file(t, f, file);
}

int ckpt_tr_add_json_counter(ckpt_training *t, const char *file,
                             const char *key, int is_int, int64_t i, double d)
{
    walker w = { t, file, 0 };
    ckpt_value *v = is_int ? ckpt_value_new_int(&t->arena, i)
                           : ckpt_value_new_float(&t->arena, d);
    const char *path = ckpt_arena_strdup(&t->arena, key);

    if (v == NULL || path == NULL)
        return nomem();
    return add_counter(&w, path, v);
}

/* ------------------------------------------------------------ matching */

/* One parameter of an optimizer: its index in param_groups order, its id,
 * its state entry and a state tensor with the parameter's shape. */
typedef struct opt_param {
    size_t pos;
    uint64_t id;
    const ckpt_value *entry;
    const ckpt_tensor *shaped;
} opt_param;

typedef struct state_entry {
    uint64_t id;
    size_t seq;
    const ckpt_value *entry;
} state_entry;

static int cmp_state_entry(const void *a, const void *b)
{
    const state_entry *x = a, *y = b;

    if (x->id != y->id)
        return x->id < y->id ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static int cmp_param_shape(const void *a, const void *b)
{
    const opt_param *x = a, *y = b;
    int c = cmp_shape(x->shaped, y->shaped);

    return c ? c : (x->pos > y->pos) - (x->pos < y->pos);
}

static int cmp_tensor_shape(const void *a, const void *b)
{
    return cmp_shape(*(const ckpt_tensor *const *)a,
                     *(const ckpt_tensor *const *)b);
}

/* The last entry for id in the sorted array, or NULL. */
static const ckpt_value *find_entry(const state_entry *es, size_t n,
                                    uint64_t id)
{
    size_t lo = 0, hi = n;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;

        if (es[mid].id <= id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo > 0 && es[lo - 1].id == id ? es[lo - 1].entry : NULL;
}

/* A model's parameters, in its order. */
typedef struct model_params {
    const tr_tensor **p;
    size_t n;
    int ordered;
} model_params;

/* Everything one optimizer check needs and produces. */
typedef struct check {
    ckpt_training *t;
    const ckpt_component *opt;
    const char *where;      /* "'optimizer'" */
    opt_param *params;
    size_t nparams;
    model_params *models;
    size_t nmodels;
    const model_params *named; /* a model with as many parameters, for
                                  naming parameters, or NULL */
    size_t problems;
    const char *how;        /* how the shapes were matched, or NULL */
} check;

/* "2 (model.fc2.weight)" for parameter number pos, in the arena. */
static const char *param_label(check *k, const opt_param *p)
{
    if (k->named && p->pos < k->named->n)
        return ckpt_arena_printf(&k->t->arena, "%llu (%s)",
                                 (unsigned long long)p->id,
                                 k->named->p[p->pos]->name);
    return ckpt_arena_printf(&k->t->arena, "%llu", (unsigned long long)p->id);
}

static int problem(check *k, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static int problem(check *k, const char *fmt, ...)
{
    va_list ap;
    int rc;

    k->problems++;
    va_start(ap, fmt);
    rc = vpush(k->t, &k->t->reasons, &k->t->nreasons, &k->t->creasons, fmt,
               ap);
    va_end(ap);
    return rc;
}

/* Gathers the per-parameter list: from param_groups in order, or without
 * them from the state's own indices. */
static int gather_params(check *k, const ckpt_value *state,
                         const ckpt_value *groups, state_entry **entries,
                         size_t *nentries)
{
    ckpt_training *t = k->t;
    size_t n = state ? state->u.dict.n : 0, i, j, m = 0, cap = 0, bad = 0;
    state_entry *es = ckpt_arena_array(&t->arena, n ? n : 1, sizeof *es);

    if (es == NULL)
        return nomem();
    for (i = 0; i < n; i++) {
        if (param_id(state->u.dict.keys[i], &es[m].id)) {
            es[m].seq = i;
            es[m++].entry = state->u.dict.vals[i];
        } else {
            bad++;
        }
    }
    qsort(es, m, sizeof *es, cmp_state_entry);
    *entries = es;
    *nentries = m;
    if (bad && problem(k, "%s: %zu \"state\" key%s %s not a parameter index",
                       k->where, bad, bad == 1 ? "" : "s",
                       bad == 1 ? "is" : "are"))
        return CKPT_E_NOMEM;
    if (groups == NULL) {
        for (i = 0; i < m; i++) {
            if (i + 1 < m && es[i + 1].id == es[i].id)
                continue; /* the later entry wins */
            if (ckpt_arena_grow(&t->arena, (void **)&k->params, &cap,
                                k->nparams + 1, sizeof *k->params))
                return nomem();
            k->params[k->nparams].id = es[i].id;
            k->params[k->nparams].pos = k->nparams;
            k->nparams++;
        }
        return 0;
    }
    for (i = 0; i < groups->u.seq.n; i++) {
        const ckpt_value *ids = dict_get(groups->u.seq.items[i], "params");

        if (!is_seq(ids)) {
            if (problem(k, "%s: param group %zu has no \"params\" list",
                        k->where, i))
                return CKPT_E_NOMEM;
            continue;
        }
        for (j = 0; j < ids->u.seq.n; j++) {
            uint64_t id;

            if (!param_id(ids->u.seq.items[j], &id)) {
                if (problem(k, "%s: param group %zu lists a parameter that "
                               "is not an index", k->where, i))
                    return CKPT_E_NOMEM;
                continue;
            }
            if (ckpt_arena_grow(&t->arena, (void **)&k->params, &cap,
                                k->nparams + 1, sizeof *k->params))
                return nomem();
            k->params[k->nparams].id = id;
            k->params[k->nparams].pos = k->nparams;
            k->nparams++;
        }
    }
    return 0;
}

/* Finds each parameter's entry and a tensor of its shape; names the
 * parameters without state and entries whose state tensors disagree. */
static int attach_state(check *k, const state_entry *es, size_t nes,
                        int stateless, size_t *with_state)
{
    ckpt_training *t = k->t;
    size_t i, j, missing = 0, shown = 0, len;
    char *list = NULL, tmp[32];

    *with_state = 0;
    for (i = 0; i < k->nparams; i++) {
        opt_param *p = &k->params[i];

        p->entry = find_entry(es, nes, p->id);
        if (p->entry == NULL) {
            missing++;
            continue;
        }
        (*with_state)++;
        for (j = 0; p->entry->kind == CKPT_KIND_DICT &&
                    j < p->entry->u.dict.n; j++) {
            const char *key = ckpt_tr_key_text(p->entry->u.dict.keys[j], tmp, &len);
            int s = state_key(key, len);
            const ckpt_tensor *x = as_tensor(p->entry->u.dict.vals[j]);

            if (s < 0 || !state_keys[s].shaped || x == NULL)
                continue;
            if (p->shaped == NULL) {
                p->shaped = x;
            } else if (!same_shape(p->shaped, x) &&
                       problem(k, "%s: parameter %s: state tensors disagree "
                                  "(%.*s %s, another %s)",
                               k->where, param_label(k, p), (int)len, key,
                               shape_text(t, x), shape_text(t, p->shaped))) {
                return CKPT_E_NOMEM;
            }
        }
    }
    if (missing == 0 || stateless)
        return 0;
    list = ckpt_arena_strdup(&t->arena, "");
    for (i = 0; list && i < k->nparams; i++) {
        if (k->params[i].entry)
            continue;
        if (shown == NAMES_MAX) {
            list = ckpt_arena_printf(&t->arena, "%s and %zu more", list,
                                     missing - shown);
            break;
        }
        list = ckpt_arena_printf(&t->arena, "%s%s%s", list,
                                 shown ? ", " : "",
                                 param_label(k, &k->params[i]));
        shown++;
    }
    if (list == NULL)
        return nomem();
    return problem(k, "%s: %zu of %zu parameter%s in param_groups ha%s no "
                      "optimizer state: %s",
                   k->where, missing, k->nparams,
                   k->nparams == 1 ? "" : "s", missing == 1 ? "s" : "ve",
                   list);
}

/* Pairs state shapes with the model's parameters: in order with a model of
 * as many parameters; else, unless that model's order is authoritative, as
 * a multiset of shapes over every model's parameters. */
static int match_shapes(check *k)
{
    ckpt_training *t = k->t;
    const model_params *auth = NULL;
    opt_param *q;
    const ckpt_tensor **pool;
    size_t i, j, nq = 0, npool = 0, bad = 0;

    for (i = 0; i < k->nmodels; i++) {
        const model_params *m = &k->models[i];
        int ok = m->n == k->nparams;

        for (j = 0; ok && j < k->nparams; j++)
            ok = k->params[j].shaped == NULL ||
                 same_shape(k->params[j].shaped, m->p[j]->t);
        if (ok) {
            k->how = "in order";
            return 0;
        }
        if (m->n == k->nparams && m->ordered && auth == NULL)
            auth = m;
    }
    if (auth) {
        for (j = 0; j < k->nparams; j++) {
            const opt_param *p = &k->params[j];

            if (p->shaped == NULL || same_shape(p->shaped, auth->p[j]->t))
                continue;
            if (++bad <= NAMES_MAX &&
                problem(k, "%s: parameter %s: state shape %s, the model's "
                           "parameter has %s",
                        k->where, param_label(k, p), shape_text(t, p->shaped),
                        shape_text(t, auth->p[j]->t)))
                return CKPT_E_NOMEM;
        }
        if (bad > NAMES_MAX &&
            problem(k, "%s: and %zu more shape mismatches", k->where,
                    bad - NAMES_MAX))
            return CKPT_E_NOMEM;
        return 0;
    }
    for (i = 0; i < k->nmodels; i++)
        npool += k->models[i].n;
    q = ckpt_arena_array(&t->arena, k->nparams + 1, sizeof *q);
    pool = ckpt_arena_array(&t->arena, npool + 1, sizeof *pool);
    if (q == NULL || pool == NULL)
        return nomem();
    for (j = 0; j < k->nparams; j++)
        if (k->params[j].shaped)
            q[nq++] = k->params[j];
    npool = 0;
    for (i = 0; i < k->nmodels; i++)
        for (j = 0; j < k->models[i].n; j++)
            pool[npool++] = k->models[i].p[j]->t;
    qsort(q, nq, sizeof *q, cmp_param_shape);
    qsort(pool, npool, sizeof *pool, cmp_tensor_shape);
    for (i = j = 0; i < nq; i++) {
        while (j < npool && cmp_shape(pool[j], q[i].shaped) < 0)
            j++;
        if (j < npool && cmp_shape(pool[j], q[i].shaped) == 0) {
            j++;
            continue;
        }
        if (++bad <= NAMES_MAX &&
            problem(k, "%s: parameter %s: state shape %s matches no model "
                       "parameter left",
                    k->where, param_label(k, &q[i]),
                    shape_text(t, q[i].shaped)))
            return CKPT_E_NOMEM;
    }
    if (bad > NAMES_MAX &&
        problem(k, "%s: and %zu more parameters whose state matches no model "
                   "parameter", k->where, bad - NAMES_MAX))
        return CKPT_E_NOMEM;
    if (bad == 0 && nq > 0)
        k->how = "by shape (the optimizer's parameter order is not the "
                 "model's)";
    return 0;
}

static const char *where(ckpt_training *t, const ckpt_component *c,
                         int dir_mode)
{
    if (!dir_mode)
        return ckpt_arena_printf(&t->arena, "'%s'",
                                 c->name[0] ? c->name : "(root)");
    if (c->name[0] == '\0')
        return ckpt_arena_printf(&t->arena, "'%s'", c->file);
    return ckpt_arena_printf(&t->arena, "'%s:%s'", c->file, c->name);
}

/* Checks one optimizer against the models; problems become reasons. */
static int check_optimizer(ckpt_training *t, tr_comp *oc, model_params *models,
                           size_t nmodels, int dir_mode, size_t *problems,
                           const char **how)
{
    ckpt_component *c = &oc->pub;
    const ckpt_value *state = dict_get(c->value, "state");
    check k;
    state_entry *es;
    size_t nes, with_state, i, mparams = 0;
    int rc;

    memset(&k, 0, sizeof k);
    k.t = t;
    k.opt = c;
    k.models = models;
    k.nmodels = nmodels;
    if ((k.where = where(t, c, dir_mode)) == NULL)
        return nomem();
    if (c->param_groups == NULL &&
        problem(&k, "%s: no \"param_groups\": the hyperparameters and the "
                    "list of parameters are missing (torch's "
                    "Optimizer.load_state_dict needs them)", k.where))
        return CKPT_E_NOMEM;
    if ((rc = gather_params(&k, state, c->param_groups, &es, &nes)))
        return rc;
    for (i = 0; i < nmodels; i++) {
        if (models[i].n == k.nparams && k.named == NULL)
            k.named = &models[i];
        mparams = models[i].n > mparams ? models[i].n : mparams;
    }
    /* SGD without momentum needs no state: torch 1.13 writes entries
     * holding None, later versions none at all. */
    if ((rc = attach_state(&k, es, nes, strcmp(c->type, "SGD") == 0,
                           &with_state)))
        return rc;
    c->params = k.nparams;
    c->params_with_state = with_state;
    if (c->param_groups == NULL && mparams > k.nparams &&
        problem(&k, "%s: state for %zu parameter%s, the model has %zu",
                k.where, k.nparams, k.nparams == 1 ? "" : "s", mparams))
        return CKPT_E_NOMEM;
    if (nmodels > 0 && (rc = match_shapes(&k)))
        return rc;
    *problems = k.problems;
    *how = k.how;
    return 0;
}

/* ------------------------------------------------------------ verdict */

static int has_kind(const ckpt_training *t, ckpt_component_kind kind)
{
    size_t i;

    for (i = 0; i < t->ncomps; i++)
        if (t->comps[i].pub.kind == kind)
            return 1;
    return 0;
}

/* "scheduler (StepLR) at 'scheduler', rng (numpy) at 'rng.numpy'" for the
 * components of the given kinds, or "" when there are none. */
static const char *list_kinds(ckpt_training *t, const ckpt_component_kind *kinds,
                              size_t nkinds, int dir_mode)
{
    const char *s = "";
    size_t i, j, shown = 0, total = 0;

    for (i = 0; i < t->ncomps; i++) {
        const ckpt_component *c = &t->comps[i].pub;

        for (j = 0; j < nkinds && c->kind != kinds[j]; j++)
            ;
        if (j == nkinds)
            continue;
        if (shown++ == NAMES_MAX) {
            total++;
            continue;
        }
        s = ckpt_arena_printf(&t->arena, "%s%s%s%s%s%s at %s", s,
                              shown > 1 ? ", " : "",
                              ckpt_component_kind_name(c->kind),
                              c->type[0] ? " (" : "", c->type,
                              c->type[0] ? ")" : "", where(t, c, dir_mode));
        if (s == NULL)
            return NULL;
    }
    if (total)
        s = ckpt_arena_printf(&t->arena, "%s and %zu more", s, total);
    return s;
}

/* The parameters of each model component, in order. */
static int model_list(ckpt_training *t, model_params **out, size_t *n)
{
    model_params *ms;
    size_t i, j, m = 0;

    ms = ckpt_arena_array(&t->arena, t->ncomps + 1, sizeof *ms);
    if (ms == NULL)
        return nomem();
    for (i = 0; i < t->ncomps; i++) {
        tr_comp *c = &t->comps[i];

        if (c->pub.kind != CKPT_COMPONENT_MODEL)
            continue;
        ms[m].p = ckpt_arena_array(&t->arena, c->ntensors + 1,
                                   sizeof *ms[m].p);
        if (ms[m].p == NULL)
            return nomem();
        for (j = 0; j < c->ntensors; j++)
            if (is_param(&c->tensors[j]))
                ms[m].p[ms[m].n++] = &c->tensors[j];
        ms[m].ordered = c->ordered;
        m++;
    }
    *out = ms;
    *n = m;
    return 0;
}

static int reason_models(ckpt_training *t, int dir_mode)
{
    size_t i;

    for (i = 0; i < t->ncomps; i++) {
        const ckpt_component *c = &t->comps[i].pub;

        if (c->kind == CKPT_COMPONENT_MODEL &&
            ckpt_tr_reason(t, "model weights at %s: %llu tensor%s, %llu "
                              "bytes",
                           where(t, c, dir_mode),
                           (unsigned long long)c->tensors,
                           c->tensors == 1 ? "" : "s",
                           (unsigned long long)c->bytes))
            return CKPT_E_NOMEM;
    }
    return 0;
}

static int decide(ckpt_training *t, int dir_mode)
{
    static const ckpt_component_kind training_state[] = {
        CKPT_COMPONENT_SCHEDULER, CKPT_COMPONENT_SCALER, CKPT_COMPONENT_RNG,
        CKPT_COMPONENT_DATA
    };
    static const ckpt_component_kind counters[] = { CKPT_COMPONENT_COUNTER };
    model_params *models;
    size_t nmodels, i, problems = 0, first;
    const char *s;
    int rc;

    if ((rc = model_list(t, &models, &nmodels)))
        return rc;
    if (has_kind(t, CKPT_COMPONENT_OPTIMIZER)) {
        if ((rc = reason_models(t, dir_mode)))
            return rc;
        if (nmodels == 0 &&
            ckpt_tr_reason(t, "optimizer state but no model weights to "
                              "resume"))
            return CKPT_E_NOMEM;
        problems += nmodels == 0;
        for (i = 0; i < t->ncomps; i++) {
            tr_comp *c = &t->comps[i];
            size_t n = 0;
            const char *how = NULL;

            if (c->pub.kind != CKPT_COMPONENT_OPTIMIZER)
                continue;
            first = t->nreasons;
            rc = check_optimizer(t, c, models, nmodels, dir_mode, &n, &how);
            if (rc)
                return rc;
            problems += n;
            if (n == 0 && first == t->nreasons &&
                ckpt_tr_reason(t, "optimizer %s at %s: state for all %llu "
                                  "parameter%s in param_groups%s%s",
                               c->pub.type, where(t, &c->pub, dir_mode),
                               (unsigned long long)c->pub.params,
                               c->pub.params == 1 ? "" : "s",
                               how ? ", shapes match the model's parameters "
                                   : "",
                               how ? how : ""))
                return CKPT_E_NOMEM;
        }
        t->verdict = problems ? CKPT_RESUME_PARTIAL : CKPT_RESUME_FULL;
        return 0;
    }
    s = list_kinds(t, training_state, 4, dir_mode);
    if (s == NULL)
        return nomem();
    if (s[0]) {
        t->verdict = CKPT_RESUME_WARM_START;
        return ckpt_tr_reason(t, "training state but no optimizer state: %s; "
                                 "resuming from it restarts the optimizer "
                                 "(moments, momentum) from zero", s);
    }
    t->verdict = CKPT_RESUME_WEIGHTS_ONLY;
    if (nmodels == 0)
        return ckpt_tr_reason(t, "no model weights, optimizer or training "
                                 "state found");
    if (ckpt_tr_reason(t, "model weights only, no optimizer or training "
                          "state: a deployment file, not a resume "
                          "checkpoint") ||
        reason_models(t, dir_mode))
        return CKPT_E_NOMEM;
    s = list_kinds(t, counters, 1, dir_mode);
    if (s == NULL)
        return nomem();
    return s[0] ? ckpt_tr_reason(t, "counters: %s", s) : 0;
}

static int warn_missing(ckpt_training *t)
{
    if (!has_kind(t, CKPT_COMPONENT_SCHEDULER) &&
        ckpt_tr_warn(t, "no LR scheduler state: the learning-rate schedule "
                        "would restart"))
        return CKPT_E_NOMEM;
    if (!has_kind(t, CKPT_COMPONENT_SCALER) &&
        ckpt_tr_warn(t, "no AMP grad scaler state (fp16 mixed-precision "
                        "training needs one to resume its loss scale)"))
        return CKPT_E_NOMEM;
    if (!has_kind(t, CKPT_COMPONENT_RNG) &&
        ckpt_tr_warn(t, "no RNG state: data order, dropout and "
                        "augmentation would differ from an uninterrupted "
                        "run"))
        return CKPT_E_NOMEM;
    if (t->cut &&
        ckpt_tr_warn(t, "the object tree is too large to examine fully: "
                        "the analysis is partial"))
        return CKPT_E_NOMEM;
    return 0;
}

/* The file holding the most model bytes (without models, the largest). */
static const char *weights_file(const ckpt_training *t)
{
    const char *best = NULL;
    uint64_t most = 0, size;
    size_t i;

    for (i = 0; i < t->ncomps; i++) {
        const ckpt_component *c = &t->comps[i].pub;

        if (c->kind == CKPT_COMPONENT_MODEL &&
            (best == NULL || c->bytes > most)) {
            best = c->file;
            most = c->bytes;
        }
    }
    if (best)
        return best;
    for (i = 0; i < t->nfiles; i++) {
        size = ckpt_file_size(t->files[i].f);
        if (best == NULL || size > most) {
            best = t->files[i].name;
            most = size;
        }
    }
    return best;
}

int ckpt_tr_finish(ckpt_training *t, const char *dir)
{
    uint64_t state = 0, params = 0;
    const char *file;
    size_t i;
    int rc;

    if ((rc = decide(t, dir != NULL)) || (rc = warn_missing(t)))
        return rc;
    for (i = 0; i < t->ncomps; i++) {
        state += t->comps[i].pub.state_bytes;
        if (t->comps[i].pub.kind == CKPT_COMPONENT_MODEL)
            params += t->comps[i].pub.param_bytes;
    }
    t->ratio = has_kind(t, CKPT_COMPONENT_OPTIMIZER) && params
                   ? (double)state / (double)params
                   : NAN;
    file = weights_file(t);
    if (file && dir)
        file = ckpt_arena_printf(&t->arena, "%s/%s", dir, file);
    else if (file)
        for (i = 0; i < t->nfiles; i++)
            if (strcmp(t->files[i].name, file) == 0)
                file = ckpt_file_path(t->files[i].f);
    if (file == NULL && t->nfiles)
        return nomem();
    t->weights_path = file;
    return 0;
}

/* ------------------------------------------------------------ public API */

int ckpt_tr_new(ckpt_training **out)
{
    ckpt_training *t = ckpt_malloc(sizeof *t);

    *out = NULL;
    if (t == NULL)
        return nomem();
    memset(t, 0, sizeof *t);
    t->budget = WALK_BUDGET;
    t->ratio = NAN;
    t->verdict = CKPT_RESUME_WEIGHTS_ONLY;
    *out = t;
    return 0;
}

int ckpt_training_analyze(ckpt_training **out, const ckpt_file *f)
{
    ckpt_training *t;
    int rc;

    if (out == NULL || f == NULL)
        return ckpt_err(CKPT_E_INVALID_ARG, "", NULL, CKPT_NO_OFFSET,
                        "out or f is NULL");
    *out = NULL;
    if ((rc = ckpt_tr_new(&t)))
        return rc;
    rc = ckpt_tr_add_file(t, f, ckpt_file_path(f));
    if (rc == 0)
        rc = ckpt_tr_finish(t, NULL);
    if (rc) {
        ckpt_training_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

void ckpt_training_free(ckpt_training *t)
{
    size_t i;

    if (t == NULL)
        return;
    for (i = 0; i < t->nowned; i++)
        ckpt_close(t->owned[i]);
    ckpt_arena_free(&t->arena);
    ckpt_free(t);
}

const char *ckpt_component_kind_name(ckpt_component_kind k)
{
    static const char *const names[] = { "model", "optimizer", "scheduler",
                                         "scaler", "rng", "counter", "data",
                                         "other" };

    return (unsigned)k < sizeof names / sizeof *names ? names[k] : "unknown";
}

const char *ckpt_resume_name(ckpt_resume r)
{
    static const char *const names[] = { "full-resume", "partial",
                                         "warm-start-only", "weights-only" };

    return (unsigned)r < sizeof names / sizeof *names ? names[r] : "unknown";
}

size_t ckpt_training_component_count(const ckpt_training *t)
{
    return t->ncomps;
}

const ckpt_component *ckpt_training_component(const ckpt_training *t,
                                              size_t i)
{
    return i < t->ncomps ? &t->comps[i].pub : NULL;
}

double ckpt_training_optimizer_ratio(const ckpt_training *t)
{
    return t->ratio;
}

ckpt_resume ckpt_training_resume(const ckpt_training *t)
{
    return t->verdict;
}

size_t ckpt_training_reason_count(const ckpt_training *t)
{
    return t->nreasons;
}

const char *ckpt_training_reason(const ckpt_training *t, size_t i)
{
    return i < t->nreasons ? t->reasons[i] : NULL;
}

size_t ckpt_training_warning_count(const ckpt_training *t)
{
    return t->nwarnings;
}

const char *ckpt_training_warning(const ckpt_training *t, size_t i)
{
    return i < t->nwarnings ? t->warnings[i] : NULL;
}

size_t ckpt_training_meta_count(const ckpt_training *t)
{
    return t->nmeta;
}

const ckpt_meta_entry *ckpt_training_meta(const ckpt_training *t, size_t i)
{
    return i < t->nmeta ? &t->meta[i] : NULL;
}

size_t ckpt_training_file_count(const ckpt_training *t)
{
    return t->nfiles;
}

const ckpt_file *ckpt_training_file(const ckpt_training *t, size_t i)
{
    return i < t->nfiles ? t->files[i].f : NULL;
}

const char *ckpt_training_file_name(const ckpt_training *t, size_t i)
{
    return i < t->nfiles ? t->files[i].name : NULL;
}

const char *ckpt_training_weights_path(const ckpt_training *t)
{
    return t->weights_path;
}

size_t ckpt_training_ignored_count(const ckpt_training *t)
{
    return t->nignored;
}

const char *ckpt_training_ignored(const ckpt_training *t, size_t i)
{
    return i < t->nignored ? t->ignored[i] : NULL;
}
