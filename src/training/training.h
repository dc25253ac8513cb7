/* training.h - the analysis behind ckpt_training_*: shared by training.c
 * (components of one object tree, the resume verdict), training_meta.c
 * (metadata topics) and training_dir.c (Hugging Face Trainer directories). */
#ifndef CKPT_TRAINING_H
#define CKPT_TRAINING_H

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
    tr_tensor *tensors;  /* model: every tensor, in state-dict order */
    size_t ntensors, cap;
    int ordered;         /* model: the order is the module's (a pickled state
                            dict, not a safetensors header) */
} tr_comp;

/* A file analysed and the name components give for it. */
typedef struct tr_file {
    const ckpt_file *f;
    const char *name;
} tr_file;

struct ckpt_training {
    ckpt_arena arena;   /* owns everything below but the files */
    tr_comp *comps;
    size_t ncomps, ccomps;
    const char **reasons, **warnings;
    size_t nreasons, creasons, nwarnings, cwarnings;
    ckpt_meta_entry *meta;
    size_t nmeta, cmeta;
    tr_file *files;      /* analysed, in name order */
    size_t nfiles, cfiles;
    ckpt_file **owned;       /* opened by analyze_dir: closed on free */
    size_t nowned, cowned;
    const char **ignored;
    size_t nignored, cignored;
    const char *weights_path;
    ckpt_resume verdict;
    double ratio;
    uint64_t budget; /* tree nodes left to visit */
    int cut;         /* the budget ran out */
    int nomem;       /* an allocation for a sentence failed (sticky) */
};

/* Allocates an empty analysis; 0 or CKPT_E_NOMEM. */
int ckpt_tr_new(ckpt_training **out);
/* Finds the components and metadata of f's tree; `name` is what
 * components' `file` says. f must outlive t. 0 or CKPT_E_NOMEM. */
int ckpt_tr_add_file(ckpt_training *t, const ckpt_file *f, const char *name);
/* Adds a counter read from a JSON file: an int or float value built in the
 * analysis' arena. 0 or CKPT_E_NOMEM. */
int ckpt_tr_add_json_counter(ckpt_training *t, const char *file,
                             const char *key, int is_int, int64_t i,
                             double d);
/* Matches optimizers to models, decides the verdict, the ratio and the
 * weights path. `dir` prefixes the weights file name (NULL for a single
 * file). 0 or CKPT_E_NOMEM. */
int ckpt_tr_finish(ckpt_training *t, const char *dir);

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
int ckpt_tr_push_str(ckpt_training *t, const char ***arr, size_t *n,
                     size_t *cap, const char *s);

/* ---- helpers (training.c) */

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

/* ---- training_meta.c */

/* The topic a key names ("torch_dtype" -> DTYPE, "transformers_version" ->
 * VERSIONS...), or -1 when it names none. `top` admits the generic names
 * ("config", "args") that only mean an architecture config at the top
 * level of a tree or file. */
int ckpt_tr_topic(const char *key, size_t len, int top);
/* Appends an entry (strings copied). 0 or CKPT_E_NOMEM. */
int ckpt_tr_meta_add(ckpt_training *t, ckpt_meta_topic topic,
                     const char *file, const char *source, const char *key,
                     const char *text, const ckpt_value *value);
/* safetensors __metadata__ / index metadata of f: every key becomes an
 * entry (OTHER when it names no topic); values that are JSON objects are
 * looked into. 0 or CKPT_E_NOMEM. */
int ckpt_tr_meta_file(ckpt_training *t, const ckpt_file *f, const char *file);
/* The keys inside a configuration-like value (dict, or an opaque object's
 * state) that name a topic, `depth` levels down at most. path is the
 * value's own flattened path. 0 or CKPT_E_NOMEM. */
int ckpt_tr_meta_scan(ckpt_training *t, const char *file, const char *path,
                      const ckpt_value *v, unsigned depth);
/* A JSON file of a directory (bytes, len): config.json-like files give
 * metadata, trainer_state.json its counters; "weight_map" indexes are the
 * caller's business. 0 or CKPT_E_NOMEM; unparsable JSON is ignored
 * (*parsed = 0). */
int ckpt_tr_meta_json(ckpt_training *t, const char *file, const char *bytes,
                      size_t len, int *parsed);

#endif
