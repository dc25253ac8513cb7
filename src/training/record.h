/* record.h - the analysis record behind ckpt_training_* and what every
 * part of the analysis shares: sentences (reasons, warnings), components,
 * the visit budget, and queries on object trees (record.c). Below the
 * recognisers (training.c), the verdict (resume.c) and the metadata
 * topics (meta.c), so that none of them depends on another's helpers. */
#ifndef CKPT_TR_RECORD_H
#define CKPT_TR_RECORD_H

#include <stdarg.h>

#include "base/alloc.h"
#include "ckpt.h"

/* A tensor of a model component, with its flattened name in its file. */
typedef struct tr_tensor {
    const char *name;
    const ckpt_tensor *t;
} tr_tensor;

/* A component and what the verdict needs besides the public record. */
typedef struct tr_comp {
    ckpt_component pub;
    tr_tensor *tensors; /* model: every tensor, in state-dict order */
    size_t ntensors, cap;
    int ordered; /* model: the order is the module's (a pickled state
                            dict, not a safetensors header) */
} tr_comp;

/* A file analysed and the name components give for it. */
typedef struct tr_file {
    const ckpt_file *f;
    const char *name;
} tr_file;

struct ckpt_training {
    ckpt_arena arena; /* owns everything below but the files */
    tr_comp *comps;
    size_t ncomps, ccomps;
    const char **reasons, **warnings;
    size_t nreasons, creasons, nwarnings, cwarnings;
    ckpt_meta_entry *meta;
    size_t nmeta, cmeta;
    tr_file *files; /* analysed, in name order */
    size_t nfiles, cfiles;
    ckpt_file **owned; /* opened by analyze_dir: closed on free */
    size_t nowned, cowned;
    const char **ignored;
    size_t nignored, cignored;
    const char *weights_path;
    ckpt_resume verdict;
    double ratio;
    uint64_t optimized_bytes; /* model parameter bytes the optimizers were paired with */
    int unpaired;             /* an optimizer was paired with no model */
    uint64_t budget;          /* tree nodes left to visit */
    int cut;                  /* the budget ran out */
    int nomem;                /* an allocation for a sentence failed (sticky) */
};

/* Allocates an empty analysis; 0 or CKPT_E_NOMEM. */
int ckpt_tr_new(ckpt_training **out);

/* Appends a printf-formatted sentence; 0 or CKPT_E_NOMEM. */
int ckpt_tr_warn(ckpt_training *t, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
int ckpt_tr_reason(ckpt_training *t, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* 0 once the budget of tree nodes to visit is spent (and the analysis is
 * marked cut), else 1. */
int ckpt_tr_visit(ckpt_training *t);
/* Appends s to a growing array of strings in the arena; 0 or -1. */
int ckpt_tr_push_str(ckpt_training *t, const char ***arr, size_t *n, size_t *cap, const char *s);

/* ---- tree queries */

/* Records CKPT_E_NOMEM and returns it. */
int ckpt_tr_nomem(void);
/* s, or "?" when building it ran out of memory: the failure is sticky
 * (t->nomem) and fails the analysis in ckpt_tr_finish, so that sentences
 * can be composed inline. */
const char *ckpt_tr_sticky(ckpt_training *t, const char *s);
/* Appends a reason from a va_list; 0 or CKPT_E_NOMEM. */
int ckpt_tr_vreason(ckpt_training *t, const char *fmt, va_list ap);
/* The value of string key `key` in a dict (the last one, as Python keeps),
 * or NULL (also when d is not a dict). */
const ckpt_value *ckpt_tr_dict_get(const ckpt_value *d, const char *key);
/* 1 for a LIST or TUPLE. */
int ckpt_tr_is_seq(const ckpt_value *v);
/* The tensor of a TENSOR value, else NULL. */
const ckpt_tensor *ckpt_tr_as_tensor(const ckpt_value *v);
int ckpt_tr_same_shape(const ckpt_tensor *a, const ckpt_tensor *b);
/* Orders shapes: by ndim, then dimension by dimension. */
int ckpt_tr_cmp_shape(const ckpt_tensor *a, const ckpt_tensor *b);
/* "[8, 4]" in the arena (sticky on failure). */
const char *ckpt_tr_shape_text(ckpt_training *t, const ckpt_tensor *x);
int ckpt_tr_ends_with(const char *s, const char *suffix);
/* A model tensor an optimizer trains: floating point, and not BatchNorm's
 * running_mean / running_var. */
int ckpt_tr_is_param(const tr_tensor *x);
/* The parameter index an optimizer "state" key or "params" item stands
 * for: a non-negative int, or its decimal text. 1 and *id, or 0. */
int ckpt_tr_param_id(const ckpt_value *k, uint64_t *id);
/* 1 when a per-parameter state key holds a tensor of the parameter's
 * shape (exp_avg, exp_avg_sq, momentum_buffer, sum, square_avg...). */
int ckpt_tr_shaped_key(const char *k, size_t len);

/* 1 when k (len bytes, NULL allowed) is `name`. */
int ckpt_tr_key_is(const char *k, size_t len, const char *name);

/* ---- components */

/* Appends a component of `file` (ordered: its dict order is the writer's);
 * its index through *idx. 0 or CKPT_E_NOMEM. */
int ckpt_tr_comp_add(ckpt_training *t, const char *file, int ordered, ckpt_component_kind kind,
                     const char *path, const char *type, const ckpt_value *v, size_t *idx);
/* Adds tensor x to c's counts. */
void ckpt_tr_count_tensor(ckpt_component *c, const ckpt_tensor *x);
/* Appends a counter component for v (an int, float or one-element
 * tensor, whose value is read). 0 or CKPT_E_NOMEM. */
int ckpt_tr_add_counter(ckpt_training *t, const char *file, int ordered, const char *path,
                        const ckpt_value *v);
/* Adds a counter read from a JSON file: an int or float value built in the
 * analysis' arena. 0 or CKPT_E_NOMEM. */
int ckpt_tr_add_json_counter(ckpt_training *t, const char *file, const char *key, int is_int,
                             int64_t i, double d);

/* ---- optimizer state */

/* Per-parameter state keys of torch.optim (and Adafactor's factored
 * ones), as ckpt_tr_state_key numbers them. */
enum {
    TR_K_STEP,
    TR_K_EXP_AVG,
    TR_K_EXP_AVG_SQ,
    TR_K_MAX_EXP_AVG_SQ,
    TR_K_MOMENTUM_BUFFER,
    TR_K_SUM,
    TR_K_SQUARE_AVG,
    TR_K_ACC_DELTA,
    TR_K_GRAD_AVG,
    TR_K_EXP_INF,
    TR_K_MU_PRODUCT,
    TR_K_ETA,
    TR_K_MU,
    TR_K_AX,
    TR_K_PREV,
    TR_K_STEP_SIZE,
    TR_K_FACTORED,
    TR_K_COUNT
};
/* The TR_K_* a per-parameter state key names, or -1. */
int ckpt_tr_state_key(const char *k, size_t len);

#endif
