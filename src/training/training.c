/* training.c - the components of a training checkpoint (ckpt_training_*;
 * the rules are in ckpt.h), and the helpers the other training_*.c share.
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

#include "base/error.h"
#include "training/training.h"
#include "model/file.h"
#include "model/value.h"
#include "model/walk.h"
#include "format/structure.h"

/* Tree nodes visited per analysis before it stops: shared references in a
 * hostile pickle can make a small file an exponentially large tree. */
#define WALK_BUDGET ((uint64_t)1 << 24)
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
    s = len < 0 ? NULL : ckpt_arena_alloc(&t->arena, (size_t)len + 1);
    if (s == NULL)
        return ckpt_tr_nomem();
    vsnprintf(s, (size_t)len + 1, fmt, ap);
    return ckpt_tr_push_str(t, arr, n, cap, s);
}

int ckpt_tr_push_str(ckpt_training *t, const char ***arr, size_t *n,
                     size_t *cap, const char *s)
{
    if (ckpt_arena_grow(&t->arena, (void **)arr, cap, *n + 1, sizeof **arr))
        return ckpt_tr_nomem();
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

int ckpt_tr_vreason(ckpt_training *t, const char *fmt, va_list ap)
{
    return vpush(t, &t->reasons, &t->nreasons, &t->creasons, fmt, ap);
}

int ckpt_tr_reason(ckpt_training *t, const char *fmt, ...)
{
    va_list ap;
    int rc;

    va_start(ap, fmt);
    rc = ckpt_tr_vreason(t, fmt, ap);
    va_end(ap);
    return rc;
}

int ckpt_tr_nomem(void)
{
    return ckpt_err_nomem();
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
const ckpt_value *ckpt_tr_dict_get(const ckpt_value *d, const char *key)
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

int ckpt_tr_is_seq(const ckpt_value *v)
{
    return v && (v->kind == CKPT_KIND_LIST || v->kind == CKPT_KIND_TUPLE);
}

static int is_number(const ckpt_value *v)
{
    return v && (v->kind == CKPT_KIND_INT || v->kind == CKPT_KIND_FLOAT);
}

const ckpt_tensor *ckpt_tr_as_tensor(const ckpt_value *v)
{
    return v && v->kind == CKPT_KIND_TENSOR ? v->u.tensor : NULL;
}

/* s, or "?" when building it ran out of memory: the failure is sticky
 * (t->nomem) and fails the analysis at its end, so that sentences can be
 * composed inline. */
const char *ckpt_tr_sticky(ckpt_training *t, const char *s)
{
    if (s)
        return s;
    t->nomem = 1;
    return "?";
}

int ckpt_tr_same_shape(const ckpt_tensor *a, const ckpt_tensor *b)
{
    return a->ndim == b->ndim &&
           (a->ndim == 0 ||
            memcmp(a->shape, b->shape, a->ndim * sizeof *a->shape) == 0);
}

int ckpt_tr_cmp_shape(const ckpt_tensor *a, const ckpt_tensor *b)
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
const char *ckpt_tr_shape_text(ckpt_training *t, const ckpt_tensor *x)
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
    return ckpt_tr_sticky(t, ckpt_arena_strdup(&t->arena, buf));
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

int ckpt_tr_ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);

    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* A model tensor an optimizer trains: floating point, and not one of
 * BatchNorm's running statistics (the only float buffers every torch model
 * zoo has; others make the counts differ and are matched by shape). */
int ckpt_tr_is_param(const tr_tensor *x)
{
    return is_float(x->t->dtype) &&
           !ckpt_tr_ends_with(x->name, "running_mean") &&
           !ckpt_tr_ends_with(x->name, "running_var");
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
            : e == 31 ? (m != 0 ? NAN : INFINITY) : ldexp(m + 1024, (int)e - 25);
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
    const ckpt_limits *lim; /* of the file: every walk is bounded by them */
} walker;

/* Walks the subtree v with enter(ctx), bounded by the file's limits. With
 * a prefix (v's own path), the walk builds names. */
static int subwalk(const walker *w, const ckpt_value *v, ckpt_walk_fn enter,
                   void *ctx, const char *prefix)
{
    ckpt_walk sub;

    ckpt_walk_init(&sub, w->lim, w->file, NULL);
    sub.enter = enter;
    sub.ctx = ctx;
    sub.names = prefix != NULL;
    sub.prefix = prefix;
    return ckpt_walk_run(&sub, v);
}

/* The node's path, copied into the analysis' arena; NULL when out of
 * memory. */
static const char *path_of(ckpt_training *t, const ckpt_walk *w,
                           const ckpt_walk_frame *node)
{
    return ckpt_arena_strndup(&t->arena, w->name, node->name_len);
}

/* Appends a component; returns its index through *idx. */
static int comp_add(walker *w, ckpt_component_kind kind, const char *path,
                    const char *type, const ckpt_value *v, size_t *idx)
{
    ckpt_training *t = w->t;
    tr_comp *c;

    *idx = 0;
    if (ckpt_arena_grow(&t->arena, (void **)&t->comps, &t->ccomps,
                        t->ncomps + 1, sizeof *t->comps))
        return ckpt_tr_nomem();
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

typedef struct summer {
    ckpt_training *t;
    ckpt_component *c;
    int state;
} summer;

static int sum_enter(ckpt_walk *w, ckpt_walk_frame *node)
{
    summer *s = w->ctx;
    const ckpt_value *v = node->value;

    if (!ckpt_tr_visit(s->t))
        return CKPT_WALK_SKIP;
    switch (v->kind) {
    case CKPT_KIND_TENSOR:
        count_tensor(s->c, v->u.tensor);
        if (s->state && v->u.tensor->ndim > 0)
            s->c->state_bytes += v->u.tensor->nbytes;
        return CKPT_WALK_SKIP;
    case CKPT_KIND_LIST:
    case CKPT_KIND_TUPLE:
    case CKPT_KIND_SET:
    case CKPT_KIND_DICT:
        return CKPT_WALK_DESCEND;
    default:
        return CKPT_WALK_SKIP;
    }
}

/* Sums every tensor under v into component idx (and, with `state`, those
 * of at least one dimension into state_bytes). */
static int sum_tensors(const walker *w, size_t idx, const ckpt_value *v,
                       int state)
{
    summer s = { w->t, &w->t->comps[idx].pub, state };

    return subwalk(w, v, sum_enter, &s, NULL);
}

static int simple(walker *w, ckpt_component_kind kind, const char *path,
                  const char *type, const ckpt_value *v)
{
    size_t idx;
    int rc = comp_add(w, kind, path, type, v, &idx);

    return rc ? rc : sum_tensors(w, idx, v, 0);
}

/* ---- model */

typedef struct weigher {
    ckpt_training *t;
    int weights; /* a tensor that is neither uint8 nor bool */
    int all;     /* every leaf so far is a tensor */
} weigher;

static int weights_enter(ckpt_walk *w, ckpt_walk_frame *node)
{
    weigher *g = w->ctx;
    const ckpt_value *v = node->value;
    size_t n;

    if (!ckpt_tr_visit(g->t))
        goto no;
    if (v->kind == CKPT_KIND_TENSOR) {
        g->weights |= v->u.tensor->dtype != CKPT_DT_U8 &&
                      v->u.tensor->dtype != CKPT_DT_BOOL;
        return CKPT_WALK_SKIP;
    }
    if (v->kind == CKPT_KIND_DICT)
        n = v->u.dict.n;
    else if (ckpt_tr_is_seq(v))
        n = v->u.seq.n;
    else
        goto no;
    if (n > 0)
        return CKPT_WALK_DESCEND;
no:
    g->all = 0;
    return CKPT_WALK_STOP;
}

/* 1 in *weights when every leaf under dict v is a tensor and one of them
 * is neither uint8 nor bool (dicts of byte tensors are RNG states, not
 * weights). */
static int weights_tree(const walker *w, const ckpt_value *v, int *weights)
{
    weigher g = { w->t, 0, 1 };
    int rc = subwalk(w, v, weights_enter, &g, NULL);

    *weights = rc == 0 && g.all && g.weights;
    return rc;
}

static int model_tensor(ckpt_training *t, tr_comp *c, const char *name,
                        const ckpt_tensor *x)
{
    tr_tensor *e;

    if (ckpt_arena_grow(&t->arena, (void **)&c->tensors, &c->cap,
                        c->ntensors + 1, sizeof *c->tensors))
        return ckpt_tr_nomem();
    e = &c->tensors[c->ntensors++];
    e->name = name;
    e->t = x;
    count_tensor(&c->pub, x);
    if (ckpt_tr_is_param(e))
        c->pub.param_bytes += x->nbytes;
    return 0;
}

typedef struct gatherer {
    ckpt_training *t;
    size_t idx;
} gatherer;

static int collect_enter(ckpt_walk *w, ckpt_walk_frame *node)
{
    gatherer *g = w->ctx;
    const char *name;
    int rc;

    if (node->value->kind == CKPT_KIND_TENSOR) {
        if ((name = path_of(g->t, w, node)) == NULL)
            return ckpt_tr_nomem();
        rc = model_tensor(g->t, &g->t->comps[g->idx], name,
                          node->value->u.tensor);
        return rc ? rc : CKPT_WALK_SKIP;
    }
    return ckpt_tr_visit(g->t) ? CKPT_WALK_DESCEND : CKPT_WALK_SKIP;
}

/* Collects the tensors of a weights tree at `path` in order, with their
 * names. */
static int collect(const walker *w, size_t idx, const ckpt_value *v,
                   const char *path)
{
    gatherer g = { w->t, idx };

    return subwalk(w, v, collect_enter, &g, path);
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

    if (ckpt_tr_ends_with(k, "_row") || ckpt_tr_ends_with(k, "_col"))
        return K_FACTORED;
    for (i = 0; i < K_COUNT; i++)
        if (key_is(k, len, state_keys[i].name))
            return i;
    return -1;
}

int ckpt_tr_shaped_key(const char *k, size_t len)
{
    int s = state_key(k, len);

    return s >= 0 && state_keys[s].shaped;
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
            const char *k = ckpt_value_key_text(e->u.dict.keys[j], tmp, sizeof tmp, &len);
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
    const ckpt_value *g = ckpt_tr_is_seq(groups) && groups->u.seq.n
                              ? ckpt_tr_dict_get(groups->u.seq.items[0], key)
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
        ckpt_tr_dict_get(groups->u.seq.items[0], "dampening"))
        return momentum == 0 ? "SGD" : "SGD (momentum)";
    return "unknown";
}

#undef HAS

/* A state dict of an optimizer: "state" (a dict) plus "param_groups" (a
 * list), or a "state" whose entries are all dicts and name known keys. */
static int is_optimizer(const ckpt_value *v)
{
    const ckpt_value *state = ckpt_tr_dict_get(v, "state");
    unsigned tensors;
    size_t i;

    if (state == NULL || state->kind != CKPT_KIND_DICT)
        return 0;
    if (ckpt_tr_is_seq(ckpt_tr_dict_get(v, "param_groups")))
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
int ckpt_tr_param_id(const ckpt_value *k, uint64_t *id)
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
    const ckpt_tensor *x = ckpt_tr_as_tensor(v);

    if (x == NULL)
        return ckpt_kind_name(ckpt_value_kind(v));
    if (x->ndim == 0)
        return ckpt_tr_sticky(t, ckpt_arena_printf(&t->arena, "0-dim %s tensor",
                                           ckpt_dtype_name(x->dtype)));
    return ckpt_tr_sticky(t, ckpt_arena_printf(&t->arena, "%s tensor %s",
                                       ckpt_dtype_name(x->dtype),
                                       ckpt_tr_shape_text(t, x)));
}

static int add_counter(walker *w, const char *path, const ckpt_value *v)
{
    ckpt_training *t = w->t;
    const char *type = counter_type(t, v);
    size_t idx;
    int rc;

    if ((rc = comp_add(w, CKPT_COMPONENT_COUNTER, path, type, v, &idx)))
        return rc;
    if (v->kind == CKPT_KIND_TENSOR) {
        count_tensor(&t->comps[idx].pub, v->u.tensor);
        t->comps[idx].pub.number = tensor_number(v->u.tensor);
    } else if (v->kind == CKPT_KIND_INT) {
        t->comps[idx].pub.number = v->u.i.decimal
                                       ? strtod(v->u.i.decimal, NULL)
                                       : (double)v->u.i.v;
    } else if (v->kind == CKPT_KIND_FLOAT) {
        t->comps[idx].pub.number = v->u.f;
    }
    return 0;
}

static int add_optimizer(walker *w, const ckpt_value *v, const char *path)
{
    ckpt_training *t = w->t;
    const ckpt_value *state = ckpt_tr_dict_get(v, "state");
    const ckpt_value *groups = ckpt_tr_dict_get(v, "param_groups");
    ckpt_component *c;
    size_t idx, i, len;
    char tmp[32];
    int rc;

    if (!ckpt_tr_is_seq(groups))
        groups = NULL;
    rc = comp_add(w, CKPT_COMPONENT_OPTIMIZER, path,
                  optimizer_type(state, groups), v, &idx);
    if (rc)
        return rc;
    c = &t->comps[idx].pub;
    c->param_groups = groups;
    if ((rc = sum_tensors(w, idx, state, 1)) ||
        (groups && (rc = sum_tensors(w, idx, groups, 0))))
        return rc;
    /* The step counter: the first entry's, as written (its type differs
     * between optimizers and torch versions). */
    for (i = 0; i < state->u.dict.n; i++) {
        const ckpt_value *step =
            ckpt_tr_dict_get(state->u.dict.vals[i], "step");
        const char *k = ckpt_value_key_text(state->u.dict.keys[i], tmp, sizeof tmp, &len);
        char *name;

        if (step == NULL)
            continue;
        name = ckpt_arena_printf(&t->arena, "%s%sstate.%.*s.step", path,
                                 path[0] ? "." : "", (int)len, k);
        if (name == NULL)
            return ckpt_tr_nomem();
        return add_counter(w, name, step);
    }
    return 0;
}

/* ---- the other kinds */

static int is_scheduler(const ckpt_value *v)
{
    const ckpt_value *last = ckpt_tr_dict_get(v, "last_epoch");

    return last && last->kind == CKPT_KIND_INT &&
           (ckpt_tr_dict_get(v, "_step_count") ||
            ckpt_tr_dict_get(v, "base_lrs") ||
            ckpt_tr_dict_get(v, "_last_lr") ||
            (ckpt_tr_dict_get(v, "patience") &&
             ckpt_tr_dict_get(v, "num_bad_epochs")));
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
        if (ckpt_tr_dict_get(v, table[i].key) &&
            (table[i].key2 == NULL || ckpt_tr_dict_get(v, table[i].key2)))
            return table[i].type;
    return "scheduler";
}

static int is_scaler(const ckpt_value *v)
{
    return ckpt_tr_dict_get(v, "scale") &&
           (ckpt_tr_dict_get(v, "_growth_tracker") ||
            ckpt_tr_dict_get(v, "growth_tracker") ||
            ckpt_tr_dict_get(v, "growth_factor"));
}

/* numpy's legacy ('MT19937', keys, pos, has_gauss, cached_gaussian). */
static int is_numpy_rng(const ckpt_value *v)
{
    const ckpt_value *name;

    if (!ckpt_tr_is_seq(v) || v->u.seq.n < 3)
        return 0;
    name = v->u.seq.items[0];
    return name->kind == CKPT_KIND_STR && strcmp(name->u.s.p, "MT19937") == 0 &&
           v->u.seq.items[1]->kind == CKPT_KIND_TENSOR;
}

/* numpy Generator's bit_generator.state: {'bit_generator': 'PCG64', ...}. */
static int is_numpy_bitgen(const ckpt_value *v)
{
    const ckpt_value *name = ckpt_tr_dict_get(v, "bit_generator");

    return name && name->kind == CKPT_KIND_STR && ckpt_tr_dict_get(v, "state");
}

/* random.getstate(): (version, tuple of 625 ints, gauss_next). */
static int is_python_rng(const ckpt_value *v)
{
    const ckpt_value *ver, *words, *gauss;
    size_t i;

    if (!ckpt_tr_is_seq(v) || v->u.seq.n != 3)
        return 0;
    ver = v->u.seq.items[0];
    words = v->u.seq.items[1];
    gauss = v->u.seq.items[2];
    if (ver->kind != CKPT_KIND_INT || !ckpt_tr_is_seq(words) ||
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

    if (!ckpt_tr_is_seq(v) || v->u.seq.n == 0 || !key_has(key, len, "cuda"))
        return 0;
    for (i = 0; i < v->u.seq.n; i++)
        if (!is_byte_vector(ckpt_tr_as_tensor(v->u.seq.items[i])))
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

/* A container that is no component itself, whose children are walked (an
 * optimizer's state dict too, but for its "state" and "param_groups").
 * Tensors among the children that are not RNG states or counters form one
 * component: model weights when one is a floating-point array, else
 * "other". */
typedef struct parent {
    const char *path;
    int optimizer;
    size_t group; /* the component of its loose tensors, or SIZE_MAX */
} parent;

static int descend(walker *w, ckpt_walk_frame *node, const char *path,
                   int optimizer)
{
    parent *p = ckpt_arena_alloc(&w->t->arena, sizeof *p);

    if (p == NULL)
        return ckpt_tr_nomem();
    p->path = path;
    p->optimizer = optimizer;
    p->group = SIZE_MAX;
    node->user = (uintptr_t)p;
    return CKPT_WALK_DESCEND;
}

/* A tensor child of container p. */
static int child_tensor(walker *w, parent *p, const ckpt_value *container,
                        const ckpt_value *v, const char *path,
                        const char *key, size_t klen)
{
    ckpt_training *t = w->t;
    int loose, rc = leaf_tensor(w, v, path, key, klen, &loose);

    if (rc == 0 && loose && p->group == SIZE_MAX)
        rc = comp_add(w, CKPT_COMPONENT_OTHER, p->path, NULL, container,
                      &p->group);
    if (rc == 0 && loose)
        rc = model_tensor(t, &t->comps[p->group], path, v->u.tensor);
    return rc;
}

static int walk_leave(ckpt_walk *ww, ckpt_walk_frame *node)
{
    walker *w = ww->ctx;
    const parent *p = (const parent *)node->user;
    tr_comp *c;
    size_t i;

    if (p->group == SIZE_MAX)
        return 0;
    c = &w->t->comps[p->group];
    for (i = 0; i < c->ntensors; i++)
        if (ckpt_tr_is_param(&c->tensors[i]) && c->tensors[i].t->ndim > 0)
            c->pub.kind = CKPT_COMPONENT_MODEL;
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

/* A node that is not a tensor in a container: a component, metadata, or a
 * container to descend into. */
static int classify(walker *w, ckpt_walk_frame *node, const char *path,
                    const char *key, size_t klen, int topic)
{
    ckpt_training *t = w->t;
    const ckpt_value *v = node->value;
    int weights, loose, rc;
    size_t idx;

    switch (v->kind) {
    case CKPT_KIND_DICT:
        if (is_optimizer(v)) {
            rc = add_optimizer(w, v, path);
            return rc ? rc : descend(w, node, path, 1);
        }
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
        if ((rc = weights_tree(w, v, &weights)))
            return rc;
        if (weights) {
            if ((rc = comp_add(w, CKPT_COMPONENT_MODEL, path, NULL, v, &idx)))
                return rc;
            return collect(w, idx, v, path);
        }
        return descend(w, node, path, 0);
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
        return descend(w, node, path, 0);
    case CKPT_KIND_TENSOR: /* the root */
        rc = leaf_tensor(w, v, path, key, klen, &loose);
        if (rc || !loose)
            return rc;
        if ((rc = comp_add(w, CKPT_COMPONENT_OTHER, path, NULL, v, &idx)))
            return rc;
        if ((rc = model_tensor(t, &t->comps[idx], path, v->u.tensor)))
            return rc;
        if (ckpt_tr_is_param(&t->comps[idx].tensors[0]))
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

static int walk_enter(ckpt_walk *ww, ckpt_walk_frame *node)
{
    walker *w = ww->ctx;
    ckpt_walk_frame *up = ckpt_walk_up(ww, 1);
    parent *p = up ? (parent *)up->user : NULL;
    const char *key = NULL, *path;
    size_t klen = 0;
    int rc;

    if (node->role == CKPT_WALK_VALUE) {
        key = ckpt_walk_segment(ww, node);
        klen = node->seg_len;
    }
    if (p && p->optimizer &&
        (key_is(key, klen, "state") || key_is(key, klen, "param_groups")))
        return CKPT_WALK_SKIP;
    if (p == NULL || node->value->kind != CKPT_KIND_TENSOR) {
        if (!ckpt_tr_visit(w->t))
            return CKPT_WALK_SKIP;
    }
    if ((path = path_of(w->t, ww, node)) == NULL)
        return ckpt_tr_nomem();
    if (p && node->value->kind == CKPT_KIND_TENSOR)
        rc = child_tensor(w, p, up->value, node->value, path, key, klen);
    else
        rc = classify(w, node, path, key, klen,
                      key ? ckpt_tr_topic(key, klen, ww->depth <= 1) : -1);
    return rc ? rc : (int)(node->user ? CKPT_WALK_DESCEND : CKPT_WALK_SKIP);
}

int ckpt_tr_add_file(ckpt_training *t, const ckpt_file *f, const char *name)
{
    walker w;
    ckpt_walk ww;
    const ckpt_value *root = NULL;
    ckpt_format fmt = ckpt_file_format(f);
    const char *file = ckpt_arena_strdup(&t->arena, name);
    int rc;

    if (file == NULL)
        return ckpt_tr_nomem();
    /* safetensors written by ckpt convert keep the original tree (the
     * optimizer's param_groups, counters, nesting) in ckpt.structure. */
    rc = ckpt_structure_decode(&root, f, &t->arena);
    if (rc == CKPT_E_NOMEM)
        return rc;
    if (rc) {
        root = ckpt_file_root(f);
        if (ckpt_tr_warn(t, "%s: ckpt.structure is unreadable (%s): "
                            "analysed as flat tensors",
                         file, ckpt_error_last()->message))
            return CKPT_E_NOMEM;
    }
    if (ckpt_arena_grow(&t->arena, (void **)&t->files, &t->cfiles,
                        t->nfiles + 1, sizeof *t->files))
        return ckpt_tr_nomem();
    t->files[t->nfiles].f = f;
    t->files[t->nfiles++].name = file;
    w.t = t;
    w.file = file;
    w.lim = &f->opts.limits;
    w.ordered = root != ckpt_file_root(f) ||
                (fmt != CKPT_FORMAT_SAFETENSORS &&
                 fmt != CKPT_FORMAT_SAFETENSORS_SHARDED);
    ckpt_walk_init(&ww, w.lim, file, NULL);
    ww.names = 1;
    ww.enter = walk_enter;
    ww.leave = walk_leave;
    ww.ctx = &w;
    rc = root ? ckpt_walk_run(&ww, root) : 0;
    /* a tree past the file's bounds (depth, visits, a cycle) is analysed
     * as far as the walk went */
    if (rc == CKPT_E_LIMIT || rc == CKPT_E_UNSUPPORTED) {
        t->cut = 1;
        rc = 0;
    }
    if (rc)
        return rc;
    return ckpt_tr_meta_file(t, f, file);
}

int ckpt_tr_add_json_counter(ckpt_training *t, const char *file,
                             const char *key, int is_int, int64_t i, double d)
{
    walker w = { t, file, 0, NULL };
    ckpt_value *v = is_int ? ckpt_value_new_int(&t->arena, i)
                           : ckpt_value_new_float(&t->arena, d);
    const char *path = ckpt_arena_strdup(&t->arena, key);

    if (v == NULL || path == NULL)
        return ckpt_tr_nomem();
    return add_counter(&w, path, v);
}

/* ------------------------------------------------------------ public API */

int ckpt_tr_new(ckpt_training **out)
{
    ckpt_training *t = ckpt_malloc(sizeof *t);

    *out = NULL;
    if (t == NULL)
        return ckpt_tr_nomem();
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

    if (out)
        *out = NULL;
    if (out == NULL || f == NULL)
        return ckpt_err(CKPT_E_INVALID_ARG, "", NULL, CKPT_NO_OFFSET,
                        "out or f is NULL");
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
