/* training_resume.c - whether training can resume from a checkpoint: each
 * optimizer's per-parameter state is paired with the model's parameters
 * (by name when the optimizer names its parameters by fully qualified
 * name, as torch.distributed.checkpoint.state_dict's get_state_dict and
 * FSDP's optim_state_dict write it; otherwise in order when the model's
 * order is known, else as a multiset of shapes), and the verdict, its reasons, the warnings, the optimizer-to-model ratio
 * and the main weights file are decided (ckpt_tr_finish; rules in ckpt.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/strmap.h"
#include "open/model_dir.h"
#include "training/training.h"
#include "model/value.h"

/* Parameters named per problem sentence before "and N more". */
#define NAMES_MAX 8

/* The id of a parameter named by its fully qualified name ("fc1.weight"):
 * this bit and the name's number in the check's list of names. An index
 * with this bit set (above 2^63) is no parameter index. */
#define FQN_BIT (UINT64_C(1) << 63)

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

static int cmp_state_entry(const void *a, const void *b) {
    const state_entry *x = a, *y = b;

    if (x->id != y->id) return x->id < y->id ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static int cmp_param_shape(const void *a, const void *b) {
    const opt_param *x = a, *y = b;
    int c = ckpt_tr_cmp_shape(x->shaped, y->shaped);

    return c ? c : (x->pos > y->pos) - (x->pos < y->pos);
}

static int cmp_tensor_shape(const void *a, const void *b) {
    return ckpt_tr_cmp_shape(*(const ckpt_tensor *const *)a, *(const ckpt_tensor *const *)b);
}

/* The last entry for id in the sorted array, or NULL. */
static const ckpt_value *find_entry(const state_entry *es, size_t n, uint64_t id) {
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

/* A model's parameters, in its order, and the component's path ("model"). */
typedef struct model_params {
    const tr_tensor **p;
    size_t n;
    const char *path;
    int ordered;
} model_params;

/* A model tensor's name inside its component: "fc1.weight" for
 * "model.fc1.weight" of the model at "model". */
static const char *name_in_model(const model_params *m, const tr_tensor *x) {
    size_t n = strlen(m->path);

    if (n && strncmp(x->name, m->path, n) == 0 && x->name[n] == '.') return x->name + n + 1;
    return x->name;
}

/* Everything one optimizer check needs and produces. */
typedef struct check {
    ckpt_training *t;
    const ckpt_component *opt;
    const char *where; /* "'optimizer'" */
    opt_param *params;
    size_t nparams;
    model_params *models;
    size_t nmodels;
    const model_params *named; /* a model with as many parameters, for
                                  naming parameters, or NULL */
    size_t problems;
    const char *how;       /* how the shapes were matched, or NULL */
    uint64_t paired_bytes; /* bytes of the model parameters paired with
                              the optimizer's */
    int paired;            /* the optimizer's parameters were paired */
    ckpt_strmap names;     /* fully qualified parameter name -> its number */
    const char **fqns;     /* the names by number (borrowed from the tree) */
    size_t nfqns, cfqns;
} check;

/* The id of an optimizer "state" key or "params" item: an index, or a
 * parameter's fully qualified name (numbered in order of appearance).
 * 1 and *id, 0 when it is neither, CKPT_E_NOMEM. */
static int param_key(check *k, const ckpt_value *v, uint64_t *id) {
    ckpt_strmap_slot *slot;
    int rc;

    if (ckpt_tr_param_id(v, id)) return (*id & FQN_BIT) == 0;
    if (v->kind != CKPT_KIND_STR || v->u.s.len == 0) return 0;
    rc = ckpt_strmap_put(&k->names, v->u.s.p, v->u.s.len, k->nfqns, &slot);
    if (rc < 0) return CKPT_E_NOMEM;
    if (rc == 1) {
        if (ckpt_arena_grow(&k->t->arena, (void **)&k->fqns, &k->cfqns, k->nfqns + 1,
                            sizeof *k->fqns))
            return ckpt_tr_nomem();
        k->fqns[k->nfqns++] = v->u.s.p;
    }
    *id = FQN_BIT | (uint64_t)slot->val;
    return 1;
}

/* "2 (model.fc2.weight)" for parameter number pos, or "'fc2.weight'" for
 * a parameter named by name, in the arena. */
static const char *param_label(check *k, const opt_param *p) {
    if (p->id & FQN_BIT)
        return ckpt_tr_sticky(k->t,
                              ckpt_arena_printf(&k->t->arena, "'%s'", k->fqns[p->id & ~FQN_BIT]));
    if (k->named && p->pos < k->named->n)
        return ckpt_tr_sticky(k->t, ckpt_arena_printf(&k->t->arena, "%llu (%s)",
                                                      (unsigned long long)p->id,
                                                      k->named->p[p->pos]->name));
    return ckpt_tr_sticky(k->t, ckpt_arena_printf(&k->t->arena, "%llu", (unsigned long long)p->id));
}

static int problem(check *k, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static int problem(check *k, const char *fmt, ...) {
    va_list ap;
    int rc;

    k->problems++;
    va_start(ap, fmt);
    rc = ckpt_tr_vreason(k->t, fmt, ap);
    va_end(ap);
    return rc;
}

/* Gathers the per-parameter list: from param_groups in order, or without
 * them from the state's own indices. */
static int gather_params(check *k, const ckpt_value *state, const ckpt_value *groups,
                         state_entry **entries, size_t *nentries) {
    ckpt_training *t = k->t;
    size_t n = state ? state->u.dict.n : 0, i, j, m = 0, cap = 0, bad = 0;
    state_entry *es = ckpt_arena_array(&t->arena, n ? n : 1, sizeof *es);
    int rc;

    if (es == NULL) return ckpt_tr_nomem();
    for (i = 0; i < n; i++) {
        if ((rc = param_key(k, state->u.dict.keys[i], &es[m].id)) < 0) return rc;
        if (rc) {
            es[m].seq = i;
            es[m++].entry = state->u.dict.vals[i];
        } else {
            bad++;
        }
    }
    qsort(es, m, sizeof *es, cmp_state_entry);
    *entries = es;
    *nentries = m;
    if (bad && problem(k, "%s: %zu \"state\" key%s %s neither a parameter index nor a name",
                       k->where, bad, bad == 1 ? "" : "s", bad == 1 ? "is" : "are"))
        return CKPT_E_NOMEM;
    if (groups == NULL) {
        for (i = 0; i < m; i++) {
            if (i + 1 < m && es[i + 1].id == es[i].id) continue; /* the later entry wins */
            if (ckpt_arena_grow(&t->arena, (void **)&k->params, &cap, k->nparams + 1,
                                sizeof *k->params))
                return ckpt_tr_nomem();
            k->params[k->nparams].id = es[i].id;
            k->params[k->nparams].pos = k->nparams;
            k->nparams++;
        }
        return 0;
    }
    for (i = 0; i < groups->u.seq.n; i++) {
        const ckpt_value *ids = ckpt_tr_dict_get(groups->u.seq.items[i], "params");

        if (!ckpt_tr_is_seq(ids)) {
            if (problem(k, "%s: param group %zu has no \"params\" list", k->where, i))
                return CKPT_E_NOMEM;
            continue;
        }
        for (j = 0, bad = 0; j < ids->u.seq.n; j++) {
            uint64_t id;

            if ((rc = param_key(k, ids->u.seq.items[j], &id)) < 0) return rc;
            if (rc == 0) {
                bad++;
                continue;
            }
            if (ckpt_arena_grow(&t->arena, (void **)&k->params, &cap, k->nparams + 1,
                                sizeof *k->params))
                return ckpt_tr_nomem();
            k->params[k->nparams].id = id;
            k->params[k->nparams].pos = k->nparams;
            k->nparams++;
        }
        if (bad && problem(k,
                           "%s: param group %zu lists %zu parameter%s that %s neither an "
                           "index nor a name",
                           k->where, i, bad, bad == 1 ? "" : "s", bad == 1 ? "is" : "are"))
            return CKPT_E_NOMEM;
    }
    return 0;
}

/* Finds each parameter's entry and a tensor of its shape; names the
 * parameters without state and entries whose state tensors disagree. */
static int attach_state(check *k, const state_entry *es, size_t nes, int stateless,
                        size_t *with_state) {
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
        for (j = 0; p->entry->kind == CKPT_KIND_DICT && j < p->entry->u.dict.n; j++) {
            const char *key = ckpt_value_key_text(p->entry->u.dict.keys[j], tmp, sizeof tmp, &len);
            const ckpt_tensor *x = ckpt_tr_as_tensor(p->entry->u.dict.vals[j]);

            if (!ckpt_tr_shaped_key(key, len) || x == NULL) continue;
            if (p->shaped == NULL) {
                p->shaped = x;
            } else if (!ckpt_tr_same_shape(p->shaped, x) &&
                       problem(k,
                               "%s: parameter %s: state tensors disagree "
                               "(%.*s %s, another %s)",
                               k->where, param_label(k, p), (int)len, key, ckpt_tr_shape_text(t, x),
                               ckpt_tr_shape_text(t, p->shaped))) {
                return CKPT_E_NOMEM;
            }
        }
    }
    if (missing == 0 || stateless) return 0;
    list = ckpt_arena_strdup(&t->arena, "");
    for (i = 0; list && i < k->nparams; i++) {
        if (k->params[i].entry) continue;
        if (shown == NAMES_MAX) {
            list = ckpt_arena_printf(&t->arena, "%s and %zu more", list, missing - shown);
            break;
        }
        list = ckpt_arena_printf(&t->arena, "%s%s%s", list, shown ? ", " : "",
                                 param_label(k, &k->params[i]));
        shown++;
    }
    if (list == NULL) return ckpt_tr_nomem();
    return problem(k,
                   "%s: %zu of %zu parameter%s in param_groups ha%s no "
                   "optimizer state: %s",
                   k->where, missing, k->nparams, k->nparams == 1 ? "" : "s",
                   missing == 1 ? "s" : "ve", list);
}

/* Pairs parameters named by name with the model parameters of that name
 * (a name several models hold: the first model's); names every parameter
 * no model holds and every state shape that differs from its parameter's. */
static int match_names(check *k) {
    ckpt_training *t = k->t;
    ckpt_strmap byname = {0};
    const tr_tensor **pool;
    size_t i, j, npool = 0, absent = 0, bad = 0;
    int rc = 0;

    for (i = 0; i < k->nmodels; i++) npool += k->models[i].n;
    pool = ckpt_arena_array(&t->arena, npool + 1, sizeof *pool);
    if (pool == NULL || ckpt_strmap_reserve(&byname, npool)) {
        ckpt_strmap_free(&byname);
        return ckpt_tr_nomem();
    }
    npool = 0;
    for (i = 0; i < k->nmodels; i++)
        for (j = 0; j < k->models[i].n; j++) {
            const char *name = name_in_model(&k->models[i], k->models[i].p[j]);
            ckpt_strmap_slot *slot;

            pool[npool] = k->models[i].p[j];
            if (ckpt_strmap_put(&byname, name, strlen(name), npool++, &slot) < 0) {
                ckpt_strmap_free(&byname);
                return ckpt_tr_nomem();
            }
        }
    for (i = 0; i < k->nparams && rc == 0; i++) {
        const opt_param *p = &k->params[i];
        const char *name;
        const ckpt_strmap_slot *slot;
        size_t len;

        if ((p->id & FQN_BIT) == 0) continue;
        name = k->fqns[p->id & ~FQN_BIT];
        len = strlen(name);
        slot = ckpt_strmap_find(&byname, name, len, ckpt_strmap_hash(name, len));
        if (slot) k->paired_bytes += pool[slot->val]->t->nbytes;
        if (slot == NULL) {
            if (++absent <= NAMES_MAX)
                rc = problem(k, "%s: parameter %s is not a parameter of the model", k->where,
                             param_label(k, p));
        } else if (p->shaped && !ckpt_tr_same_shape(p->shaped, pool[slot->val]->t)) {
            if (++bad <= NAMES_MAX)
                rc = problem(k, "%s: parameter %s: state shape %s, the model's parameter has %s",
                             k->where, param_label(k, p), ckpt_tr_shape_text(t, p->shaped),
                             ckpt_tr_shape_text(t, pool[slot->val]->t));
        }
    }
    ckpt_strmap_free(&byname);
    if (rc) return CKPT_E_NOMEM;
    if (absent > NAMES_MAX && problem(k, "%s: and %zu more parameters the model does not hold",
                                      k->where, absent - NAMES_MAX))
        return CKPT_E_NOMEM;
    if (bad > NAMES_MAX &&
        problem(k, "%s: and %zu more shape mismatches", k->where, bad - NAMES_MAX))
        return CKPT_E_NOMEM;
    if (absent == 0 && bad == 0) k->how = "by name";
    k->paired = 1;
    return 0;
}

/* 1 when some parameter is named by its fully qualified name. */
static int named_by_name(const check *k) {
    size_t i;

    for (i = 0; i < k->nparams; i++)
        if (k->params[i].id & FQN_BIT) return 1;
    return 0;
}

/* The optimizer's parameters are model m's, in order. */
static void pair_in_order(check *k, const model_params *m) {
    for (size_t j = 0; j < k->nparams; j++) k->paired_bytes += m->p[j]->t->nbytes;
    k->paired = 1;
}

/* Pairs state shapes with the model's parameters: in order with a model of
 * as many parameters; else, unless that model's order is authoritative, as
 * a multiset of shapes over every model's parameters. */
static int match_shapes(check *k) {
    ckpt_training *t = k->t;
    const model_params *auth = NULL;
    opt_param *q;
    const ckpt_tensor **pool;
    size_t i, j, nq = 0, npool = 0, bad = 0;

    for (i = 0; i < k->nmodels; i++) {
        const model_params *m = &k->models[i];
        int ok = m->n == k->nparams;

        for (j = 0; ok && j < k->nparams; j++)
            ok = k->params[j].shaped == NULL || ckpt_tr_same_shape(k->params[j].shaped, m->p[j]->t);
        if (ok) {
            k->how = "in order";
            pair_in_order(k, m);
            return 0;
        }
        if (m->n == k->nparams && m->ordered && auth == NULL) auth = m;
    }
    if (auth) {
        pair_in_order(k, auth);
        for (j = 0; j < k->nparams; j++) {
            const opt_param *p = &k->params[j];

            if (p->shaped == NULL || ckpt_tr_same_shape(p->shaped, auth->p[j]->t)) continue;
            if (++bad <= NAMES_MAX &&
                problem(k,
                        "%s: parameter %s: state shape %s, the model's "
                        "parameter has %s",
                        k->where, param_label(k, p), ckpt_tr_shape_text(t, p->shaped),
                        ckpt_tr_shape_text(t, auth->p[j]->t)))
                return CKPT_E_NOMEM;
        }
        if (bad > NAMES_MAX &&
            problem(k, "%s: and %zu more shape mismatches", k->where, bad - NAMES_MAX))
            return CKPT_E_NOMEM;
        return 0;
    }
    for (i = 0; i < k->nmodels; i++) npool += k->models[i].n;
    q = ckpt_arena_array(&t->arena, k->nparams + 1, sizeof *q);
    pool = ckpt_arena_array(&t->arena, npool + 1, sizeof *pool);
    if (q == NULL || pool == NULL) return ckpt_tr_nomem();
    for (j = 0; j < k->nparams; j++)
        if (k->params[j].shaped) q[nq++] = k->params[j];
    npool = 0;
    for (i = 0; i < k->nmodels; i++)
        for (j = 0; j < k->models[i].n; j++) pool[npool++] = k->models[i].p[j]->t;
    qsort(q, nq, sizeof *q, cmp_param_shape);
    qsort(pool, npool, sizeof *pool, cmp_tensor_shape);
    k->paired = 1;
    for (i = j = 0; i < nq; i++) {
        while (j < npool && ckpt_tr_cmp_shape(pool[j], q[i].shaped) < 0) j++;
        if (j < npool && ckpt_tr_cmp_shape(pool[j], q[i].shaped) == 0) {
            k->paired_bytes += pool[j++]->nbytes;
            continue;
        }
        if (++bad <= NAMES_MAX &&
            problem(k,
                    "%s: parameter %s: state shape %s matches no model "
                    "parameter left",
                    k->where, param_label(k, &q[i]), ckpt_tr_shape_text(t, q[i].shaped)))
            return CKPT_E_NOMEM;
    }
    if (bad > NAMES_MAX && problem(k,
                                   "%s: and %zu more parameters whose state matches no model "
                                   "parameter",
                                   k->where, bad - NAMES_MAX))
        return CKPT_E_NOMEM;
    if (bad > 0 || nq == 0) return 0;
    for (i = 0; i < k->nmodels && k->models[i].n != k->nparams; i++)
        ;
    if (i < k->nmodels) {
        k->how = "as a multiset of shapes (the optimizer's parameter order is not the model's)";
    } else {
        /* no model has as many: buffers or frozen parameters are among the
         * model's floating-point tensors, and no order can pair them */
        k->how = ckpt_tr_sticky(
            t, ckpt_arena_printf(&t->arena,
                                 "as a multiset of shapes (the model has %zu floating-point "
                                 "tensors, the optimizer %zu parameters: buffers or frozen "
                                 "parameters are not paired in order)",
                                 npool, k->nparams));
    }
    return 0;
}

/* "'model'" (a file's tree) or "'optimizer.pt:state'" (a directory):
 * where a component is, for sentences. */
static const char *where(ckpt_training *t, const ckpt_component *c, int dir_mode) {
    if (!dir_mode)
        return ckpt_tr_sticky(
            t, ckpt_arena_printf(&t->arena, "'%s'", c->name[0] ? c->name : "(root)"));
    if (c->name[0] == '\0') return ckpt_tr_sticky(t, ckpt_arena_printf(&t->arena, "'%s'", c->file));
    return ckpt_tr_sticky(t, ckpt_arena_printf(&t->arena, "'%s:%s'", c->file, c->name));
}

/* Checks one optimizer against the models; problems become reasons. */
static int check_optimizer(ckpt_training *t, tr_comp *oc, model_params *models, size_t nmodels,
                           int dir_mode, size_t *problems, const char **how) {
    ckpt_component *c = &oc->pub;
    const ckpt_value *state = ckpt_tr_dict_get(c->value, "state");
    check k;
    state_entry *es = NULL;
    size_t nes = 0, with_state = 0, i, mparams = 0;
    int rc;

    memset(&k, 0, sizeof k);
    k.t = t;
    k.opt = c;
    k.models = models;
    k.nmodels = nmodels;
    k.where = where(t, c, dir_mode);
    if (c->param_groups == NULL && problem(&k,
                                           "%s: no \"param_groups\": the hyperparameters and the "
                                           "list of parameters are missing (torch's "
                                           "Optimizer.load_state_dict needs them)",
                                           k.where))
        return CKPT_E_NOMEM;
    rc = gather_params(&k, state, c->param_groups, &es, &nes);
    for (i = 0; i < nmodels; i++) {
        if (models[i].n == k.nparams && k.named == NULL) k.named = &models[i];
        mparams = models[i].n > mparams ? models[i].n : mparams;
    }
    /* SGD without momentum needs no state: torch 1.13 writes entries
     * holding None, later versions none at all. */
    if (rc == 0) rc = attach_state(&k, es, nes, strcmp(c->type, "SGD") == 0, &with_state);
    if (rc == 0) {
        c->params = k.nparams;
        c->params_with_state = with_state;
    }
    if (rc == 0 && c->param_groups == NULL && mparams > k.nparams &&
        problem(&k, "%s: state for %zu parameter%s, the model has %zu", k.where, k.nparams,
                k.nparams == 1 ? "" : "s", mparams))
        rc = CKPT_E_NOMEM;
    if (rc == 0 && nmodels > 0) rc = named_by_name(&k) ? match_names(&k) : match_shapes(&k);
    t->optimized_bytes += k.paired_bytes;
    t->unpaired |= !k.paired || c->param_groups == NULL; /* which parameters: unknown */
    ckpt_strmap_free(&k.names);
    *problems = k.problems;
    *how = k.how;
    return rc;
}

/* ------------------------------------------------------------ verdict */

static int has_kind(const ckpt_training *t, ckpt_component_kind kind) {
    size_t i;

    for (i = 0; i < t->ncomps; i++)
        if (t->comps[i].pub.kind == kind) return 1;
    return 0;
}

/* "scheduler (StepLR) at 'scheduler', rng (numpy) at 'rng.numpy'" for the
 * components of the given kinds, or "" when there are none. */
static const char *list_kinds(ckpt_training *t, const ckpt_component_kind *kinds, size_t nkinds,
                              int dir_mode) {
    const char *s = "";
    size_t i, j, shown = 0, total = 0;

    for (i = 0; i < t->ncomps; i++) {
        const ckpt_component *c = &t->comps[i].pub;

        for (j = 0; j < nkinds && c->kind != kinds[j]; j++)
            ;
        if (j == nkinds) continue;
        if (shown++ == NAMES_MAX) {
            total++;
            continue;
        }
        s = ckpt_arena_printf(&t->arena, "%s%s%s%s%s%s at %s", s, shown > 1 ? ", " : "",
                              ckpt_component_kind_name(c->kind), c->type[0] ? " (" : "", c->type,
                              c->type[0] ? ")" : "", where(t, c, dir_mode));
        if (s == NULL) return NULL;
    }
    if (total) s = ckpt_arena_printf(&t->arena, "%s and %zu more", s, total);
    return s;
}

/* The parameters of each model component, in order. */
static int model_list(ckpt_training *t, model_params **out, size_t *n) {
    model_params *ms;
    size_t i, j, m = 0;

    ms = ckpt_arena_array(&t->arena, t->ncomps + 1, sizeof *ms);
    if (ms == NULL) return ckpt_tr_nomem();
    for (i = 0; i < t->ncomps; i++) {
        tr_comp *c = &t->comps[i];

        if (c->pub.kind != CKPT_COMPONENT_MODEL) continue;
        ms[m].p = ckpt_arena_array(&t->arena, c->ntensors + 1, sizeof *ms[m].p);
        if (ms[m].p == NULL) return ckpt_tr_nomem();
        for (j = 0; j < c->ntensors; j++)
            if (ckpt_tr_is_param(&c->tensors[j])) ms[m].p[ms[m].n++] = &c->tensors[j];
        ms[m].ordered = c->ordered;
        ms[m].path = c->pub.name;
        m++;
    }
    *out = ms;
    *n = m;
    return 0;
}

/* Tensors by what they hold: storage, offset, dtype, bytes. */
static int by_data(const void *x, const void *y) {
    const ckpt_tensor *a = *(const ckpt_tensor *const *)x, *b = *(const ckpt_tensor *const *)y;
    if (a->storage != b->storage) return (uintptr_t)a->storage < (uintptr_t)b->storage ? -1 : 1;
    if (a->storage_offset != b->storage_offset)
        return a->storage_offset < b->storage_offset ? -1 : 1;
    if (a->dtype != b->dtype) return a->dtype < b->dtype ? -1 : 1;
    if (a->nbytes != b->nbytes) return a->nbytes < b->nbytes ? -1 : 1;
    return 0;
}

/* The distinct tensors of a model component and their bytes: names tied
 * to one tensor (embed.weight and head.weight, one storage and offset)
 * count once, as the model holds one parameter. */
static int distinct_tensors(ckpt_training *t, const tr_comp *c, uint64_t *n, uint64_t *bytes) {
    const ckpt_tensor **v = ckpt_arena_array(&t->arena, c->ntensors + 1, sizeof *v);
    if (v == NULL) return ckpt_tr_nomem();
    for (size_t i = 0; i < c->ntensors; i++) v[i] = c->tensors[i].t;
    qsort(v, c->ntensors, sizeof *v, by_data);
    *n = *bytes = 0;
    for (size_t i = 0; i < c->ntensors; i++) {
        if (i && by_data(&v[i - 1], &v[i]) == 0) continue;
        (*n)++;
        *bytes += v[i]->nbytes;
    }
    return 0;
}

static int reason_models(ckpt_training *t, int dir_mode) {
    size_t i;

    for (i = 0; i < t->ncomps; i++) {
        const tr_comp *tc = &t->comps[i];
        const ckpt_component *c = &tc->pub;
        uint64_t n = c->tensors, bytes = c->bytes;
        const char *tied = "";

        if (c->kind != CKPT_COMPONENT_MODEL) continue;
        if (tc->ntensors == c->tensors && distinct_tensors(t, tc, &n, &bytes)) return CKPT_E_NOMEM;
        if (n < c->tensors &&
            !(tied = ckpt_arena_printf(&t->arena, " (%llu names: %llu tied to another)",
                                       (unsigned long long)c->tensors,
                                       (unsigned long long)(c->tensors - n))))
            return ckpt_tr_nomem();
        if (ckpt_tr_reason(t, "model weights at %s: %llu tensor%s, %llu bytes%s",
                           where(t, c, dir_mode), (unsigned long long)n, n == 1 ? "" : "s",
                           (unsigned long long)bytes, tied))
            return CKPT_E_NOMEM;
    }
    return 0;
}

static int decide(ckpt_training *t, int dir_mode) {
    static const ckpt_component_kind training_state[] = {
        CKPT_COMPONENT_SCHEDULER, CKPT_COMPONENT_SCALER, CKPT_COMPONENT_RNG, CKPT_COMPONENT_DATA};
    model_params *models = NULL;
    size_t nmodels = 0, i, problems = 0, first;
    const char *s;
    int rc;

    if ((rc = model_list(t, &models, &nmodels))) return rc;
    if (has_kind(t, CKPT_COMPONENT_OPTIMIZER)) {
        if ((rc = reason_models(t, dir_mode))) return rc;
        if (nmodels == 0 && ckpt_tr_reason(t, "optimizer state but no model weights to "
                                              "resume"))
            return CKPT_E_NOMEM;
        problems += nmodels == 0;
        for (i = 0; i < t->ncomps; i++) {
            tr_comp *c = &t->comps[i];
            size_t n = 0;
            const char *how = NULL;

            if (c->pub.kind != CKPT_COMPONENT_OPTIMIZER) continue;
            first = t->nreasons;
            rc = check_optimizer(t, c, models, nmodels, dir_mode, &n, &how);
            if (rc) return rc;
            problems += n;
            if (n || first != t->nreasons) continue;
            /* SGD without momentum: torch 2.x writes no state at all, 1.13
             * entries holding None; either way nothing per parameter */
            if (strcmp(c->pub.type, "SGD") == 0)
                rc = ckpt_tr_reason(t,
                                    "optimizer SGD at %s: without momentum it keeps no "
                                    "per-parameter state; param_groups (hyperparameters, %llu "
                                    "parameter%s) is all a resume needs",
                                    where(t, &c->pub, dir_mode), (unsigned long long)c->pub.params,
                                    c->pub.params == 1 ? "" : "s");
            else
                rc = ckpt_tr_reason(
                    t,
                    "optimizer %s at %s: state for all %llu parameter%s in "
                    "param_groups%s%s",
                    c->pub.type, where(t, &c->pub, dir_mode), (unsigned long long)c->pub.params,
                    c->pub.params == 1 ? "" : "s",
                    how ? ", shapes match the model's parameters " : "", how ? how : "");
            if (rc) return rc;
        }
        t->verdict = problems ? CKPT_RESUME_PARTIAL : CKPT_RESUME_FULL;
        return 0;
    }
    s = list_kinds(t, training_state, 4, dir_mode);
    if (s == NULL) return ckpt_tr_nomem();
    if (s[0]) {
        t->verdict = CKPT_RESUME_WARM_START;
        return ckpt_tr_reason(t,
                              "training state but no optimizer state: %s; "
                              "resuming from it restarts the optimizer "
                              "(moments, momentum) from zero",
                              s);
    }
    t->verdict = CKPT_RESUME_WEIGHTS_ONLY;
    if (nmodels == 0)
        return ckpt_tr_reason(t, "no model weights, optimizer or training "
                                 "state found");
    /* counters (an epoch beside the weights) are listed with their values
     * by the report, as for every verdict: not repeated as a reason */
    if (ckpt_tr_reason(t, "model weights only, no optimizer or training "
                          "state: a deployment file, not a resume "
                          "checkpoint") ||
        reason_models(t, dir_mode))
        return CKPT_E_NOMEM;
    return 0;
}

/* 1 when some analysed file holds F16 or BF16 tensors: only then can the
 * run have used AMP, whose GradScaler state a resume needs. */
static int has_half_tensors(const ckpt_training *t) {
    size_t i, k;

    for (i = 0; i < t->nfiles; i++)
        for (k = 0; k < ckpt_file_tensor_count(t->files[i].f); k++) {
            ckpt_dtype dt = ckpt_tensor_dtype(ckpt_file_tensor(t->files[i].f, k));

            if (dt == CKPT_DT_F16 || dt == CKPT_DT_BF16) return 1;
        }
    return 0;
}

/* Missing training state matters only to a resume: a weights-only file
 * is a deployment file and is not warned about. A grad scaler is only
 * used with AMP, so only half-precision tensors make its absence news. */
static int warn_missing(ckpt_training *t) {
    int resume = t->verdict != CKPT_RESUME_WEIGHTS_ONLY;

    if (resume && !has_kind(t, CKPT_COMPONENT_SCHEDULER) &&
        ckpt_tr_warn(t, "no LR scheduler state: the learning-rate schedule "
                        "would restart"))
        return CKPT_E_NOMEM;
    if (resume && !has_kind(t, CKPT_COMPONENT_SCALER) && has_half_tensors(t) &&
        ckpt_tr_warn(t, "no AMP grad scaler state (fp16 mixed-precision "
                        "training needs one to resume its loss scale)"))
        return CKPT_E_NOMEM;
    if (resume && !has_kind(t, CKPT_COMPONENT_RNG) &&
        ckpt_tr_warn(t, "no RNG state: data order, dropout and "
                        "augmentation would differ from an uninterrupted "
                        "run"))
        return CKPT_E_NOMEM;
    if (t->cut && ckpt_tr_warn(t, "the object tree is too large to examine fully: "
                                  "the analysis is partial"))
        return CKPT_E_NOMEM;
    return 0;
}

/* The weights file: of a model directory's copies of one save
 * (model.safetensors beside pytorch_model.bin), the one from_pretrained
 * and ckpt_open of the directory read; else the file holding the most
 * model bytes (without models, the largest). */
static const char *weights_file(const ckpt_training *t) {
    const char *best = NULL;
    uint64_t most = 0, size;
    int rank = 0; /* best's ckpt_model_dir_rank, 0: none */
    size_t i;

    for (i = 0; i < t->ncomps; i++) {
        const ckpt_component *c = &t->comps[i].pub;
        int r = c->kind == CKPT_COMPONENT_MODEL ? ckpt_model_dir_rank(c->file) : 0;

        if (c->kind != CKPT_COMPONENT_MODEL) continue;
        if (best == NULL || (r && (!rank || r < rank)) || (!r && !rank && c->bytes > most)) {
            best = c->file;
            most = c->bytes;
            rank = r;
        }
    }
    if (best) return best;
    for (i = 0; i < t->nfiles; i++) {
        size = ckpt_file_size(t->files[i].f);
        if (best == NULL || size > most) {
            best = t->files[i].name;
            most = size;
        }
    }
    return best;
}

int ckpt_tr_finish(ckpt_training *t, const char *dir) {
    uint64_t state = 0, params = 0;
    const char *file;
    size_t i;
    int rc;

    if ((rc = decide(t, dir != NULL)) || (rc = warn_missing(t))) return rc;
    for (i = 0; i < t->ncomps; i++) {
        state += t->comps[i].pub.state_bytes;
        if (t->comps[i].pub.kind == CKPT_COMPONENT_MODEL) params += t->comps[i].pub.param_bytes;
    }
    /* per byte of the parameters the optimizers update, as their
     * param_groups pair them with the model's (frozen parameters, float
     * buffers and a second model such as an EMA copy have no state), else
     * (an optimizer without param_groups or model) of every model
     * parameter */
    if (t->optimized_bytes && !t->unpaired) params = t->optimized_bytes;
    t->optimized_bytes = params;
    t->ratio =
        has_kind(t, CKPT_COMPONENT_OPTIMIZER) && params ? (double)state / (double)params : NAN;
    file = weights_file(t);
    if (file && dir)
        file = ckpt_arena_printf(&t->arena, "%s/%s", dir, file);
    else if (file)
        for (i = 0; i < t->nfiles; i++)
            if (strcmp(t->files[i].name, file) == 0) file = ckpt_file_path(t->files[i].f);
    if (file == NULL && t->nfiles) return ckpt_tr_nomem();
    t->weights_path = file;
    return t->nomem ? ckpt_tr_nomem() : 0;
}
