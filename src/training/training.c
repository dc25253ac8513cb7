/* training.c - the components of a training checkpoint (ckpt_training_*;
 * the rules are in ckpt.h), recorded in the analysis record (record.c).
 *
 * One walk over each file's object tree sorts subtrees into components by
 * their structure (an optimizer is "state" + "param_groups" wherever it
 * sits, a state dict is a dict whose leaves are all tensors...). Once every
 * file is in, ckpt_tr_finish pairs each optimizer's per-parameter state
 * with the model's parameters and decides the verdict. Only shapes and
 * sizes are looked at: no tensor bytes are read but those of 0-dim
 * counters. */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/once.h"
#include "base/sort.h"
#include "training/training.h"
#include "model/file.h"
#include "model/value.h"
#include "model/walk.h"
#include "format/structure.h"

/* 1 when k (len bytes, NULL allowed) contains `part`. */
static int key_has(const char *k, size_t len, const char *part) {
    size_t n = strlen(part), i;

    for (i = 0; k && i + n <= len; i++)
        if (memcmp(k + i, part, n) == 0) return 1;
    return 0;
}

static int is_number(const ckpt_value *v) {
    return v && (v->kind == CKPT_KIND_INT || v->kind == CKPT_KIND_FLOAT);
}

/* ------------------------------------------------------------ components */

typedef struct walker {
    ckpt_training *t;
    const char *file;
    int ordered;            /* dict order is the writer's (pickles) */
    const ckpt_limits *lim; /* of the file: every walk is bounded by them */
} walker;

/* Walks the subtree v with enter(ctx), bounded by the file's limits. With
 * a prefix (v's own path), the walk builds names. */
static int subwalk(const walker *w, const ckpt_value *v, ckpt_walk_fn enter, void *ctx,
                   const char *prefix) {
    ckpt_walk sub;

    ckpt_walk_init(&sub, w->lim, w->file, NULL);
    sub.enter = enter;
    sub.ctx = ctx;
    sub.names = prefix != NULL;
    sub.prefix = prefix;
    return ckpt_walk_run(&sub, v);
}

/* The node's path: a tensor's own flattened name when it is that (no
 * copy per tensor), else a copy in the analysis' arena; NULL when out of
 * memory. */
static const char *path_of(ckpt_training *t, const ckpt_walk *w, const ckpt_walk_frame *node) {
    if (node->value->kind == CKPT_KIND_TENSOR) {
        const char *own = node->value->u.tensor->name;
        if (strnlen(own, node->name_len + 1) == node->name_len &&
            memcmp(own, w->name, node->name_len) == 0)
            return own;
    }
    return ckpt_arena_strndup(&t->arena, w->name, node->name_len);
}

/* Appends a component of w's file; its index through *idx. */
static int comp_add(walker *w, ckpt_component_kind kind, const char *path, const char *type,
                    const ckpt_value *v, size_t *idx) {
    return ckpt_tr_comp_add(w->t, w->file, w->ordered, kind, path, type, v, idx);
}

static int add_counter(walker *w, const char *path, const ckpt_value *v) {
    return ckpt_tr_add_counter(w->t, w->file, w->ordered, path, v);
}

typedef struct summer {
    ckpt_training *t;
    ckpt_component *c;
    int state;
} summer;

static int sum_enter(ckpt_walk *w, ckpt_walk_frame *node) {
    summer *s = w->ctx;
    const ckpt_value *v = node->value;

    if (!ckpt_tr_visit(s->t)) return CKPT_WALK_SKIP;
    switch (v->kind) {
    case CKPT_KIND_TENSOR:
        ckpt_tr_count_tensor(s->c, v->u.tensor);
        if (s->state && v->u.tensor->ndim > 0) s->c->state_bytes += v->u.tensor->nbytes;
        return CKPT_WALK_SKIP;
    case CKPT_KIND_LIST:
    case CKPT_KIND_TUPLE:
    case CKPT_KIND_SET:
    case CKPT_KIND_DICT: return CKPT_WALK_DESCEND;
    default: return CKPT_WALK_SKIP;
    }
}

/* Sums every tensor under v into component idx (and, with `state`, those
 * of at least one dimension into state_bytes). */
static int sum_tensors(const walker *w, size_t idx, const ckpt_value *v, int state) {
    summer s = {w->t, &w->t->comps[idx].pub, state};

    return subwalk(w, v, sum_enter, &s, NULL);
}

static int simple(walker *w, ckpt_component_kind kind, const char *path, const char *type,
                  const ckpt_value *v) {
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

static int weights_enter(ckpt_walk *w, ckpt_walk_frame *node) {
    weigher *g = w->ctx;
    const ckpt_value *v = node->value;
    size_t n;

    if (!ckpt_tr_visit(g->t)) goto no;
    if (v->kind == CKPT_KIND_TENSOR) {
        g->weights |= v->u.tensor->dtype != CKPT_DT_U8 && v->u.tensor->dtype != CKPT_DT_BOOL;
        return CKPT_WALK_SKIP;
    }
    if (v->kind == CKPT_KIND_DICT)
        n = v->u.dict.n;
    else if (ckpt_tr_is_seq(v))
        n = v->u.seq.n;
    else
        goto no;
    if (n > 0) return CKPT_WALK_DESCEND;
no:
    g->all = 0;
    return CKPT_WALK_STOP;
}

/* 1 in *weights when every leaf under dict v is a tensor and one of them
 * is neither uint8 nor bool (dicts of byte tensors are RNG states, not
 * weights). */
static int weights_tree(const walker *w, const ckpt_value *v, int *weights) {
    weigher g = {w->t, 0, 1};
    int rc = subwalk(w, v, weights_enter, &g, NULL);

    *weights = rc == 0 && g.all && g.weights;
    return rc;
}

static int model_tensor(ckpt_training *t, tr_comp *c, const char *name, const ckpt_tensor *x) {
    tr_tensor *e;

    if (ckpt_arena_grow(&t->arena, (void **)&c->tensors, &c->cap, c->ntensors + 1,
                        sizeof *c->tensors))
        return ckpt_tr_nomem();
    e = &c->tensors[c->ntensors++];
    e->name = name;
    e->t = x;
    ckpt_tr_count_tensor(&c->pub, x);
    if (ckpt_tr_is_param(e)) c->pub.param_bytes += x->nbytes;
    return 0;
}

typedef struct gatherer {
    ckpt_training *t;
    size_t idx;
} gatherer;

static int collect_enter(ckpt_walk *w, ckpt_walk_frame *node) {
    gatherer *g = w->ctx;
    const char *name;
    int rc;

    if (node->value->kind == CKPT_KIND_TENSOR) {
        if ((name = path_of(g->t, w, node)) == NULL) return ckpt_tr_nomem();
        rc = model_tensor(g->t, &g->t->comps[g->idx], name, node->value->u.tensor);
        return rc ? rc : CKPT_WALK_SKIP;
    }
    return ckpt_tr_visit(g->t) ? CKPT_WALK_DESCEND : CKPT_WALK_SKIP;
}

/* Collects the tensors of a weights tree at `path` in order, with their
 * names. */
static int collect(const walker *w, size_t idx, const ckpt_value *v, const char *path) {
    gatherer g = {w->t, idx};

    return subwalk(w, v, collect_enter, &g, path);
}

/* ---- optimizer */

/* Keys present in any per-parameter entry (bit K_x), and those holding a
 * tensor somewhere (*tensors). */
static unsigned state_flags(const ckpt_value *state, unsigned *tensors) {
    unsigned flags = 0;
    size_t i, j, len;
    char tmp[32];

    *tensors = 0;
    for (i = 0; state && i < state->u.dict.n; i++) {
        const ckpt_value *e = state->u.dict.vals[i];

        for (j = 0; e->kind == CKPT_KIND_DICT && j < e->u.dict.n; j++) {
            const char *k = ckpt_value_key_text(e->u.dict.keys[j], tmp, sizeof tmp, &len);
            int s = ckpt_tr_state_key(k, len);

            if (s < 0) continue;
            flags |= 1u << s;
            if (e->u.dict.vals[j]->kind == CKPT_KIND_TENSOR) *tensors |= 1u << s;
        }
    }
    return flags;
}

/* A group hyperparameter as a number (0 when absent). */
static double group_number(const ckpt_value *groups, const char *key, int *present) {
    const ckpt_value *g = ckpt_tr_is_seq(groups) && groups->u.seq.n
                              ? ckpt_tr_dict_get(groups->u.seq.items[0], key)
                              : NULL;

    *present = is_number(g);
    if (!*present) return 0;
    return g->kind == CKPT_KIND_INT ? (double)g->u.i.v : g->u.f;
}

#define HAS(k) (flags & (1u << (k)))

static const char *optimizer_type(const ckpt_value *state, const ckpt_value *groups) {
    unsigned tensors, flags = state_flags(state, &tensors);
    int has_momentum;
    double momentum = group_number(groups, "momentum", &has_momentum);

    if (HAS(TR_K_FACTORED)) return "Adafactor";
    if (HAS(TR_K_SQUARE_AVG)) return HAS(TR_K_ACC_DELTA) ? "Adadelta" : "RMSprop";
    if (HAS(TR_K_EXP_INF)) return "Adamax";
    if (HAS(TR_K_MU_PRODUCT)) return "NAdam";
    if (HAS(TR_K_EXP_AVG) && HAS(TR_K_EXP_AVG_SQ)) {
        /* the same state; torch >= 2.6 writes which one in every group
         * (AdamW is Adam with decoupled_weight_decay=True), older ones
         * do not: then it cannot be told */
        const ckpt_value *d = groups && groups->u.seq.n ? ckpt_tr_dict_get(groups->u.seq.items[0],
                                                                           "decoupled_weight_decay")
                                                        : NULL;
        int ams = HAS(TR_K_MAX_EXP_AVG_SQ) != 0;
        if (!d || d->kind != CKPT_KIND_BOOL) return ams ? "Adam/AdamW (amsgrad)" : "Adam/AdamW";
        if (d->u.b) return ams ? "AdamW (amsgrad)" : "AdamW";
        return ams ? "Adam (amsgrad)" : "Adam";
    }
    if (HAS(TR_K_ETA) && HAS(TR_K_MU) && HAS(TR_K_AX)) return "ASGD";
    if (HAS(TR_K_PREV) && HAS(TR_K_STEP_SIZE)) return "Rprop";
    if (HAS(TR_K_SUM)) return "Adagrad";
    if (tensors & (1u << TR_K_MOMENTUM_BUFFER)) return "SGD (momentum)";
    if ((flags & ~(1u << TR_K_MOMENTUM_BUFFER)) == 0 && has_momentum &&
        ckpt_tr_dict_get(groups->u.seq.items[0], "dampening"))
        return momentum == 0 ? "SGD" : "SGD (momentum)";
    return "unknown";
}

#undef HAS

/* A state dict of an optimizer: "state" (a dict) plus "param_groups" (a
 * list), or a "state" whose entries are all dicts and name known keys. */
static int is_optimizer(const ckpt_value *v) {
    const ckpt_value *state = ckpt_tr_dict_get(v, "state");
    unsigned tensors;
    size_t i;

    if (state == NULL || state->kind != CKPT_KIND_DICT) return 0;
    if (ckpt_tr_is_seq(ckpt_tr_dict_get(v, "param_groups"))) return 1;
    if (state->u.dict.n == 0) return 0;
    for (i = 0; i < state->u.dict.n; i++)
        if (state->u.dict.vals[i]->kind != CKPT_KIND_DICT) return 0;
    return state_flags(state, &tensors) != 0;
}

static int add_optimizer(walker *w, const ckpt_value *v, const char *path) {
    ckpt_training *t = w->t;
    const ckpt_value *state = ckpt_tr_dict_get(v, "state");
    const ckpt_value *groups = ckpt_tr_dict_get(v, "param_groups");
    ckpt_component *c;
    size_t idx, i, len;
    char tmp[32];
    int rc;

    if (!ckpt_tr_is_seq(groups)) groups = NULL;
    rc = comp_add(w, CKPT_COMPONENT_OPTIMIZER, path, optimizer_type(state, groups), v, &idx);
    if (rc) return rc;
    c = &t->comps[idx].pub;
    c->param_groups = groups;
    if ((rc = sum_tensors(w, idx, state, 1)) || (groups && (rc = sum_tensors(w, idx, groups, 0))))
        return rc;
    /* The step counter: the first entry's, as written (its type differs
     * between optimizers and torch versions). */
    for (i = 0; i < state->u.dict.n; i++) {
        const ckpt_value *step = ckpt_tr_dict_get(state->u.dict.vals[i], "step");
        const char *k = ckpt_value_key_text(state->u.dict.keys[i], tmp, sizeof tmp, &len);
        char *name;

        if (step == NULL) continue;
        name = ckpt_arena_printf(&t->arena, "%s%sstate.%.*s.step", path, path[0] ? "." : "",
                                 (int)len, k);
        if (name == NULL) return ckpt_tr_nomem();
        return add_counter(w, name, step);
    }
    return 0;
}

/* ---- the other kinds */

static int is_scheduler(const ckpt_value *v) {
    const ckpt_value *last = ckpt_tr_dict_get(v, "last_epoch");

    return last && last->kind == CKPT_KIND_INT &&
           (ckpt_tr_dict_get(v, "_step_count") || ckpt_tr_dict_get(v, "base_lrs") ||
            ckpt_tr_dict_get(v, "_last_lr") ||
            (ckpt_tr_dict_get(v, "patience") && ckpt_tr_dict_get(v, "num_bad_epochs")));
}

/* The torch.optim.lr_scheduler class whose state_dict has these keys. */
static const char *scheduler_type(const ckpt_value *v) {
    static const struct {
        const char *key, *key2, *type;
    } table[] = {
        {"_schedulers", NULL, "SequentialLR/ChainedScheduler"},
        {"lr_lambdas", NULL, "LambdaLR"},
        {"milestones", NULL, "MultiStepLR"},
        {"patience", NULL, "ReduceLROnPlateau"},
        {"T_0", NULL, "CosineAnnealingWarmRestarts"},
        {"T_max", NULL, "CosineAnnealingLR"},
        {"total_steps", NULL, "OneCycleLR"},
        {"total_size", NULL, "CyclicLR"},
        {"start_factor", NULL, "LinearLR"},
        {"power", NULL, "PolynomialLR"},
        {"factor", "total_iters", "ConstantLR"},
        {"step_size", "gamma", "StepLR"},
        {"gamma", NULL, "ExponentialLR"},
    };
    size_t i;

    for (i = 0; i < sizeof table / sizeof *table; i++)
        if (ckpt_tr_dict_get(v, table[i].key) &&
            (table[i].key2 == NULL || ckpt_tr_dict_get(v, table[i].key2)))
            return table[i].type;
    return "scheduler";
}

/* A GradScaler's state dict, by its keys (has(ctx, key): present). */
static int scaler_keys(int (*has)(const void *ctx, const char *key), const void *ctx) {
    return has(ctx, "scale") &&
           (has(ctx, "_growth_tracker") || has(ctx, "growth_tracker") || has(ctx, "growth_factor"));
}

static int dict_has(const void *v, const char *key) { return ckpt_tr_dict_get(v, key) != NULL; }

static int is_scaler(const ckpt_value *v) { return scaler_keys(dict_has, v); }

/* numpy's legacy ('MT19937', keys, pos, has_gauss, cached_gaussian). */
static int is_numpy_rng(const ckpt_value *v) {
    const ckpt_value *name;

    if (!ckpt_tr_is_seq(v) || v->u.seq.n < 3) return 0;
    name = v->u.seq.items[0];
    return name->kind == CKPT_KIND_STR && strcmp(name->u.s.p, "MT19937") == 0 &&
           v->u.seq.items[1]->kind == CKPT_KIND_TENSOR;
}

/* numpy Generator's bit_generator.state: {'bit_generator': 'PCG64', ...}. */
static int is_numpy_bitgen(const ckpt_value *v) {
    const ckpt_value *name = ckpt_tr_dict_get(v, "bit_generator");

    return name && name->kind == CKPT_KIND_STR && ckpt_tr_dict_get(v, "state");
}

/* random.getstate(): (version, tuple of 625 ints, gauss_next). */
static int is_python_rng(const ckpt_value *v) {
    const ckpt_value *ver, *words, *gauss;
    size_t i;

    if (!ckpt_tr_is_seq(v) || v->u.seq.n != 3) return 0;
    ver = v->u.seq.items[0];
    words = v->u.seq.items[1];
    gauss = v->u.seq.items[2];
    if (ver->kind != CKPT_KIND_INT || !ckpt_tr_is_seq(words) || words->u.seq.n != 625 ||
        (gauss->kind != CKPT_KIND_NONE && gauss->kind != CKPT_KIND_FLOAT))
        return 0;
    for (i = 0; i < words->u.seq.n; i++)
        if (words->u.seq.items[i]->kind != CKPT_KIND_INT) return 0;
    return 1;
}

/* torch.get_rng_state() is a 1-D uint8 tensor of
 * sizeof(CPUGeneratorImplState) = 5056 bytes (torch 1.x and 2.x). */
#define TORCH_CPU_RNG_BYTES 5056u

static int is_byte_vector(const ckpt_tensor *x) {
    return x && x->dtype == CKPT_DT_U8 && x->ndim == 1;
}

/* The RNG a byte vector under `key` holds, or NULL. */
static const char *torch_rng(const ckpt_tensor *x, const char *key, size_t len) {
    if (!is_byte_vector(x)) return NULL;
    if (key_has(key, len, "cuda")) return "torch-cuda";
    if (x->numel == TORCH_CPU_RNG_BYTES || ckpt_tr_key_is(key, len, "cpu") ||
        ckpt_tr_key_is(key, len, "torch") || key_has(key, len, "rng"))
        return "torch-cpu";
    return NULL;
}

/* torch.cuda.get_rng_state_all(): a list of byte vectors. */
static int is_cuda_rng_list(const ckpt_value *v, const char *key, size_t len) {
    size_t i;

    if (!ckpt_tr_is_seq(v) || v->u.seq.n == 0 || !key_has(key, len, "cuda")) return 0;
    for (i = 0; i < v->u.seq.n; i++)
        if (!is_byte_vector(ckpt_tr_as_tensor(v->u.seq.items[i]))) return 0;
    return 1;
}

static int is_counter_key(const char *k, size_t len) {
    static const char *const names[] = {
        "epoch",           "epochs",       "current_epoch", "step",       "steps",
        "global_step",     "global_steps", "iteration",     "iterations", "iter",
        "num_updates",     "updates",      "total_steps",   "num_steps",  "train_step",
        "completed_steps", "n_iter",
    };
    size_t i;

    for (i = 0; i < sizeof names / sizeof *names; i++)
        if (ckpt_tr_key_is(k, len, names[i])) return 1;
    return 0;
}

/* Where a data loader or sampler stopped. */
static int is_data_key(const char *k, size_t len) {
    static const char *const names[] = {
        "loops",        "consumed_samples", "consumed_train_samples", "samples_seen",  "batch_idx",
        "batches_seen", "data_state",       "dataset_state",          "data_position",
    };
    size_t i;

    if (key_has(k, len, "sampler") || key_has(k, len, "dataloader") ||
        key_has(k, len, "data_loader"))
        return 1;
    for (i = 0; i < sizeof names / sizeof *names; i++)
        if (ckpt_tr_key_is(k, len, names[i])) return 1;
    return 0;
}

/* ------------------------------------------------------------ the walk */

/* A tensor directly in a container under `key`: an RNG state (*rng), a
 * counter (1), or neither (0). */
static int leaf_role(const ckpt_tensor *x, const char *key, size_t klen, const char **rng) {
    *rng = torch_rng(x, key, klen);
    return *rng || (x->numel == 1 && is_counter_key(key, klen));
}

/* Records tensor value v as the RNG state or counter leaf_role found. */
static int leaf_component(walker *w, const ckpt_value *v, const char *path, const char *rng) {
    return rng ? simple(w, CKPT_COMPONENT_RNG, path, rng, v) : add_counter(w, path, v);
}

/* A tensor directly in a container: an RNG state, a counter, or neither
 * (*loose). */
static int leaf_tensor(walker *w, const ckpt_value *v, const char *path, const char *key,
                       size_t klen, int *loose) {
    const char *rng;

    *loose = !leaf_role(v->u.tensor, key, klen, &rng);
    return *loose ? 0 : leaf_component(w, v, path, rng);
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

static int descend(walker *w, ckpt_walk_frame *node, const char *path, int optimizer) {
    parent *p = ckpt_arena_alloc(&w->t->arena, sizeof *p);

    if (p == NULL) return ckpt_tr_nomem();
    p->path = path;
    p->optimizer = optimizer;
    p->group = SIZE_MAX;
    node->user = (uintptr_t)p;
    return CKPT_WALK_DESCEND;
}

/* A tensor child of container p. */
static int child_tensor(walker *w, parent *p, const ckpt_value *container, const ckpt_value *v,
                        const char *path, const char *key, size_t klen) {
    ckpt_training *t = w->t;
    int loose, rc = leaf_tensor(w, v, path, key, klen, &loose);

    if (rc == 0 && loose && p->group == SIZE_MAX)
        rc = comp_add(w, CKPT_COMPONENT_OTHER, p->path, NULL, container, &p->group);
    if (rc == 0 && loose) rc = model_tensor(t, &t->comps[p->group], path, v->u.tensor);
    return rc;
}

/* Loose tensors of a container are model weights once one of them is a
 * parameter of at least one dimension. */
static void loose_kind(tr_comp *c) {
    for (size_t i = 0; i < c->ntensors; i++)
        if (ckpt_tr_is_param(&c->tensors[i]) && c->tensors[i].t->ndim > 0)
            c->pub.kind = CKPT_COMPONENT_MODEL;
}

static int walk_leave(ckpt_walk *ww, ckpt_walk_frame *node) {
    walker *w = ww->ctx;
    const parent *p = (const parent *)node->user;

    if (p->group != SIZE_MAX) loose_kind(&w->t->comps[p->group]);
    return 0;
}

/* A value under a key that names a metadata topic: recorded whole, and
 * configuration-like values are looked into. */
static int meta_value(walker *w, int topic, const ckpt_value *v, const char *path) {
    int rc = ckpt_tr_meta_add(w->t, (ckpt_meta_topic)topic, w->file, "tree", path, NULL, v);

    if (rc == 0 && (v->kind == CKPT_KIND_DICT || v->kind == CKPT_KIND_OBJECT))
        rc = ckpt_tr_meta_scan(w->t, w->file, path, v, 3);
    return rc;
}

/* A node that is not a tensor in a container: a component, metadata, or a
 * container to descend into. */
static int classify(walker *w, ckpt_walk_frame *node, const char *path, const char *key,
                    size_t klen, int topic) {
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
        if (is_scheduler(v)) return simple(w, CKPT_COMPONENT_SCHEDULER, path, scheduler_type(v), v);
        if (is_scaler(v)) return simple(w, CKPT_COMPONENT_SCALER, path, NULL, v);
        if (is_numpy_bitgen(v)) return simple(w, CKPT_COMPONENT_RNG, path, "numpy", v);
        if (is_data_key(key, klen)) return simple(w, CKPT_COMPONENT_DATA, path, NULL, v);
        if (topic >= 0) return meta_value(w, topic, v, path);
        if ((rc = weights_tree(w, v, &weights))) return rc;
        if (weights) {
            if ((rc = comp_add(w, CKPT_COMPONENT_MODEL, path, NULL, v, &idx))) return rc;
            return collect(w, idx, v, path);
        }
        return descend(w, node, path, 0);
    case CKPT_KIND_LIST:
    case CKPT_KIND_TUPLE:
    case CKPT_KIND_SET:
        if (is_python_rng(v)) return simple(w, CKPT_COMPONENT_RNG, path, "python", v);
        if (is_numpy_rng(v)) return simple(w, CKPT_COMPONENT_RNG, path, "numpy", v);
        if (is_cuda_rng_list(v, key, klen))
            return simple(w, CKPT_COMPONENT_RNG, path, "torch-cuda", v);
        if (is_data_key(key, klen)) return simple(w, CKPT_COMPONENT_DATA, path, NULL, v);
        if (topic >= 0) return meta_value(w, topic, v, path);
        return descend(w, node, path, 0);
    case CKPT_KIND_TENSOR: /* the root */
        rc = leaf_tensor(w, v, path, key, klen, &loose);
        if (rc || !loose) return rc;
        if ((rc = comp_add(w, CKPT_COMPONENT_OTHER, path, NULL, v, &idx))) return rc;
        if ((rc = model_tensor(t, &t->comps[idx], path, v->u.tensor))) return rc;
        if (ckpt_tr_is_param(&t->comps[idx].tensors[0]))
            t->comps[idx].pub.kind = CKPT_COMPONENT_MODEL;
        return 0;
    case CKPT_KIND_INT:
    case CKPT_KIND_FLOAT:
        if (is_counter_key(key, klen)) return add_counter(w, path, v);
        if (is_data_key(key, klen)) return simple(w, CKPT_COMPONENT_DATA, path, NULL, v);
        return topic >= 0 ? meta_value(w, topic, v, path) : 0;
    case CKPT_KIND_OBJECT:
        /* argparse.Namespace, TrainingArguments...: never called, but their
         * BUILD state is data worth reading. */
        if (topic >= 0) return meta_value(w, topic, v, path);
        return ckpt_tr_meta_scan(t, w->file, path, v, 3);
    default: return topic >= 0 ? meta_value(w, topic, v, path) : 0;
    }
}

static int walk_enter(ckpt_walk *ww, ckpt_walk_frame *node) {
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
        (ckpt_tr_key_is(key, klen, "state") || ckpt_tr_key_is(key, klen, "param_groups")))
        return CKPT_WALK_SKIP;
    if (p == NULL || node->value->kind != CKPT_KIND_TENSOR) {
        if (!ckpt_tr_visit(w->t)) return CKPT_WALK_SKIP;
    }
    if ((path = path_of(w->t, ww, node)) == NULL) return ckpt_tr_nomem();
    if (p && node->value->kind == CKPT_KIND_TENSOR)
        rc = child_tensor(w, p, up->value, node->value, path, key, klen);
    else
        rc =
            classify(w, node, path, key, klen, key ? ckpt_tr_topic(key, klen, ww->depth <= 1) : -1);
    return rc ? rc : (int)(node->user ? CKPT_WALK_DESCEND : CKPT_WALK_SKIP);
}

/* ------------------------------------------------------------ a flat root */

/* A safetensors file without ckpt.structure whose tree is not built yet:
 * that tree would be a dict of its tensors by name in file order
 * (ckpt_safetensors_tree), as big as the tensors themselves, so the walk's
 * verdicts on it come from the file's sorted tensors instead. Such a dict
 * is no optimizer, scheduler or numpy generator (their keys hold
 * non-tensors); it is a scaler by scaler_keys; it is model weights when a
 * tensor is neither uint8 nor bool (weights_tree); else each tensor is an
 * RNG state, a counter or a loose tensor (leaf_role, loose_kind).
 * Components at the root have no value: ckpt_file_root builds it. */
static int is_flat(const ckpt_file *f) {
    return f->format == CKPT_FORMAT_SAFETENSORS && CKPT_ONCE_LOAD(&f->tree_lazy) &&
           !ckpt_structure_present(f);
}

static int flat_has(const void *f, const char *key) {
    return ckpt_file_find_tensor(f, key) != NULL;
}

/* The tree's order: file offset, then size, then name (safetensors.c's
 * by_file_offset over tensors sorted by name). */
static int by_file_order(const void *a, const void *b) {
    const ckpt_tensor *x = ((const tr_tensor *)a)->t, *y = ((const tr_tensor *)b)->t;
    uint64_t p = x->storage->file_offset, q = y->storage->file_offset;
    if (p != q) return p < q ? -1 : 1;
    if (x->nbytes != y->nbytes) return x->nbytes < y->nbytes ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* f's tensors in file order, with their names: n entries in the
 * analysis' arena (a model component's tensors, as they are). */
static tr_tensor *file_order(ckpt_training *t, const ckpt_file *f) {
    size_t n = f->ntensors;
    tr_tensor *o = ckpt_arena_array(&t->arena, n ? n : 1, sizeof *o);

    if (o == NULL) return NULL;
    for (size_t i = 0; i < n; i++) o[i] = (tr_tensor){f->tensors[i].name, &f->tensors[i]};
    /* mostly in order already: writers lay tensors out by name */
    return ckpt_sort(o, n, sizeof *o, by_file_order) ? NULL : o;
}

/* The tensors of a component at the flat root, as sum_tensors counts a
 * dict of them (the dict is a visit too). */
static void flat_sum(walker *w, size_t idx, const tr_tensor *o, size_t n) {
    if (!ckpt_tr_visit(w->t)) return;
    for (size_t i = 0; i < n && ckpt_tr_visit(w->t); i++)
        ckpt_tr_count_tensor(&w->t->comps[idx].pub, o[i].t);
}

/* weights_tree over the flat root. */
static int flat_weights(walker *w, const tr_tensor *o, size_t n) {
    int weights = 0;

    if (!ckpt_tr_visit(w->t) || n == 0) return 0;
    for (size_t i = 0; i < n; i++) {
        if (!ckpt_tr_visit(w->t)) return 0;
        weights |= o[i].t->dtype != CKPT_DT_U8 && o[i].t->dtype != CKPT_DT_BOOL;
    }
    return weights;
}

/* Each tensor of the flat root as a child of it (child_tensor). */
static int flat_children(walker *w, const tr_tensor *o, size_t n) {
    ckpt_training *t = w->t;
    size_t group = SIZE_MAX;
    int rc = 0;

    for (size_t i = 0; rc == 0 && i < n; i++) {
        const char *rng;
        ckpt_value *v;

        if (!leaf_role(o[i].t, o[i].name, strlen(o[i].name), &rng)) {
            if (group == SIZE_MAX) rc = comp_add(w, CKPT_COMPONENT_OTHER, "", NULL, NULL, &group);
            if (rc == 0) rc = model_tensor(t, &t->comps[group], o[i].name, o[i].t);
            continue;
        }
        /* a value for the component, as the tree would hold it */
        if ((v = ckpt_value_new(&t->arena, CKPT_KIND_TENSOR)) == NULL) return ckpt_tr_nomem();
        v->u.tensor = (ckpt_tensor *)(uintptr_t)o[i].t;
        rc = leaf_component(w, v, o[i].name, rng);
    }
    if (rc == 0 && group != SIZE_MAX) loose_kind(&t->comps[group]);
    return rc;
}

/* walk_enter's classify of the flat root. */
static int add_flat(walker *w, const ckpt_file *f) {
    ckpt_training *t = w->t;
    size_t n = f->ntensors, idx;
    tr_tensor *o;
    int rc = 0;

    if (!ckpt_tr_visit(t)) return 0;
    if ((o = file_order(t, f)) == NULL) return ckpt_tr_nomem();
    if (scaler_keys(flat_has, f)) {
        if ((rc = comp_add(w, CKPT_COMPONENT_SCALER, "", NULL, NULL, &idx)) == 0)
            flat_sum(w, idx, o, n);
    } else if (flat_weights(w, o, n)) {
        /* collect: the order is the array itself */
        rc = comp_add(w, CKPT_COMPONENT_MODEL, "", NULL, NULL, &idx);
        if (rc == 0 && ckpt_tr_visit(t)) {
            tr_comp *c = &t->comps[idx];
            for (size_t i = 0; i < n; i++) {
                ckpt_tr_count_tensor(&c->pub, o[i].t);
                if (ckpt_tr_is_param(&o[i])) c->pub.param_bytes += o[i].t->nbytes;
            }
            c->tensors = o;
            c->ntensors = c->cap = n;
        }
    } else {
        rc = flat_children(w, o, n);
    }
    return rc;
}

int ckpt_tr_add_file(ckpt_training *t, const ckpt_file *f, const char *name) {
    walker w;
    ckpt_walk ww;
    const ckpt_value *root = NULL;
    ckpt_format fmt = ckpt_file_format(f);
    const char *file = ckpt_arena_strdup(&t->arena, name);
    int rc;

    if (file == NULL) return ckpt_tr_nomem();
    /* safetensors written by ckpt convert keep the original tree (the
     * optimizer's param_groups, counters, nesting) in ckpt.structure. */
    int flat = is_flat(f);
    rc = flat ? 0 : ckpt_structure_decode(&root, f, &t->arena);
    if (rc == CKPT_E_NOMEM) return rc;
    if (rc) {
        root = ckpt_file_root(f);
        if (ckpt_tr_warn(t,
                         "%s: ckpt.structure is unreadable (%s): "
                         "analysed as flat tensors",
                         file, ckpt_error_last()->message))
            return CKPT_E_NOMEM;
    }
    if (ckpt_arena_grow(&t->arena, (void **)&t->files, &t->cfiles, t->nfiles + 1, sizeof *t->files))
        return ckpt_tr_nomem();
    t->files[t->nfiles].f = f;
    t->files[t->nfiles++].name = file;
    w.t = t;
    w.file = file;
    w.lim = &f->opts.limits;
    w.ordered = !flat && (root != ckpt_file_root(f) || (fmt != CKPT_FORMAT_SAFETENSORS &&
                                                        fmt != CKPT_FORMAT_SAFETENSORS_SHARDED));
    ckpt_walk_init(&ww, w.lim, file, NULL);
    ww.names = 1;
    ww.enter = walk_enter;
    ww.leave = walk_leave;
    ww.ctx = &w;
    rc = flat ? add_flat(&w, f) : root ? ckpt_walk_run(&ww, root) : 0;
    /* a tree past the file's bounds (depth, visits, a cycle) is analysed
     * as far as the walk went */
    if (rc == CKPT_E_LIMIT || rc == CKPT_E_UNSUPPORTED) {
        t->cut = 1;
        rc = 0;
    }
    if (rc) return rc;
    return ckpt_tr_meta_file(t, f, file);
}

/* ------------------------------------------------------------ public API */

int ckpt_training_analyze(ckpt_training **out, const ckpt_file *f) {
    ckpt_training *t;
    int rc;

    if (out) *out = NULL;
    if (out == NULL || f == NULL)
        return ckpt_err(CKPT_E_INVALID_ARG, "", NULL, CKPT_NO_OFFSET, "out or f is NULL");
    if ((rc = ckpt_tr_new(&t))) return rc;
    rc = ckpt_tr_add_file(t, f, ckpt_file_path(f));
    if (rc == 0) rc = ckpt_tr_finish(t, NULL);
    if (rc) {
        ckpt_training_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

void ckpt_training_free(ckpt_training *t) {
    size_t i;

    if (t == NULL) return;
    for (i = 0; i < t->nowned; i++) ckpt_close(t->owned[i]);
    ckpt_arena_free(&t->arena);
    ckpt_free(t);
}

const char *ckpt_component_kind_name(ckpt_component_kind k) {
    static const char *const names[] = {"model", "optimizer", "scheduler", "scaler",
                                        "rng",   "counter",   "data",      "other"};

    return (unsigned)k < sizeof names / sizeof *names ? names[k] : "unknown";
}

const char *ckpt_resume_name(ckpt_resume r) {
    static const char *const names[] = {"full-resume", "partial", "warm-start-only",
                                        "weights-only"};

    return (unsigned)r < sizeof names / sizeof *names ? names[r] : "unknown";
}

size_t ckpt_training_component_count(const ckpt_training *t) { return t->ncomps; }

const ckpt_component *ckpt_training_component(const ckpt_training *t, size_t i) {
    return i < t->ncomps ? &t->comps[i].pub : NULL;
}

double ckpt_training_optimizer_ratio(const ckpt_training *t) { return t->ratio; }
uint64_t ckpt_training_optimized_bytes(const ckpt_training *t) { return t->optimized_bytes; }

ckpt_resume ckpt_training_resume(const ckpt_training *t) { return t->verdict; }

size_t ckpt_training_reason_count(const ckpt_training *t) { return t->nreasons; }

const char *ckpt_training_reason(const ckpt_training *t, size_t i) {
    return i < t->nreasons ? t->reasons[i] : NULL;
}

size_t ckpt_training_warning_count(const ckpt_training *t) { return t->nwarnings; }

const char *ckpt_training_warning(const ckpt_training *t, size_t i) {
    return i < t->nwarnings ? t->warnings[i] : NULL;
}

size_t ckpt_training_meta_count(const ckpt_training *t) { return t->nmeta; }

const ckpt_meta_entry *ckpt_training_meta(const ckpt_training *t, size_t i) {
    return i < t->nmeta ? &t->meta[i] : NULL;
}

size_t ckpt_training_file_count(const ckpt_training *t) { return t->nfiles; }

const ckpt_file *ckpt_training_file(const ckpt_training *t, size_t i) {
    return i < t->nfiles ? t->files[i].f : NULL;
}

const char *ckpt_training_file_name(const ckpt_training *t, size_t i) {
    return i < t->nfiles ? t->files[i].name : NULL;
}

const char *ckpt_training_weights_path(const ckpt_training *t) { return t->weights_path; }

size_t ckpt_training_ignored_count(const ckpt_training *t) { return t->nignored; }

const char *ckpt_training_ignored(const ckpt_training *t, size_t i) {
    return i < t->nignored ? t->ignored[i] : NULL;
}
