/* ckpt/training.h - training checkpoints: components, resume readiness, metadata topics.
 * Part of the public API of libckpt; include <ckpt.h>. */
#ifndef CKPT_INCLUDE_TRAINING_H
#define CKPT_INCLUDE_TRAINING_H

#include "ckpt/file.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ckpt_training ckpt_training;

typedef enum ckpt_component_kind {
    CKPT_COMPONENT_MODEL = 0,
    CKPT_COMPONENT_OPTIMIZER = 1,
    CKPT_COMPONENT_SCHEDULER = 2,
    CKPT_COMPONENT_SCALER = 3,
    CKPT_COMPONENT_RNG = 4,
    CKPT_COMPONENT_COUNTER = 5,
    CKPT_COMPONENT_DATA = 6,
    CKPT_COMPONENT_OTHER = 7
} ckpt_component_kind;
/* "model", "optimizer", "scheduler", "scaler", "rng", "counter", "data",
 * "other"; "unknown" for other values. Static string. */
CKPT_API const char *ckpt_component_kind_name(ckpt_component_kind k);

/* One component. Strings and values are borrowed from the analysis (and,
 * for values, from the file they are in). */
typedef struct ckpt_component {
    ckpt_component_kind kind;
    const char *file;               /* the file it is in: ckpt_file_path() of the
                          analysed file, or its name inside the directory */
    const char *name;               /* its place in that file, joined like tensor names
                          ("optimizer_states.0"; "" is the root) */
    const char *type;               /* optimizer: "Adam/AdamW", "Adam/AdamW (amsgrad)",
                          "SGD", "SGD (momentum)", "Adagrad", "RMSprop",
                          "Adadelta", "Adamax", "NAdam", "ASGD", "Rprop",
                          "Adafactor", "unknown"; scheduler: "StepLR",
                          "LambdaLR", ... or "scheduler"; rng: "torch-cpu",
                          "torch-cuda", "numpy", "python"; counter: "int",
                          "float" or "0-dim F32 tensor" (any dtype name);
                          "" otherwise */
    const ckpt_value *value;        /* the subtree (model: the state dict, or the
                                container of loose tensors); for counters
                                read from a JSON file, a value owned by the
                                analysis; NULL for the root of a
                                safetensors file without ckpt.structure,
                                analysed from its tensors (ckpt_file_root
                                builds that dict on demand) */
    uint64_t tensors;               /* tensors in it */
    uint64_t elements;              /* their numel, summed */
    uint64_t bytes;                 /* their ckpt_tensor_nbytes, summed */
    uint64_t param_bytes;           /* model: bytes of its parameters (see above) */
    uint64_t state_bytes;           /* optimizer: bytes of its state tensors with
                                at least one dimension */
    uint64_t params;                /* optimizer: parameters in param_groups (state
                                entries when param_groups is missing) */
    uint64_t params_with_state;     /* optimizer: of those, with a state entry */
    const ckpt_value *param_groups; /* optimizer: the LIST of group dicts
                                       (hyperparameters; "params" lists the
                                       parameter indices), or NULL */
    double number;                  /* counter: its value (a 0-dim tensor is read); NaN
                          when it is not a number */
} ckpt_component;

typedef enum ckpt_resume {
    CKPT_RESUME_FULL = 0,
    CKPT_RESUME_PARTIAL = 1,
    CKPT_RESUME_WARM_START = 2,
    CKPT_RESUME_WEIGHTS_ONLY = 3
} ckpt_resume;
/* Full resume: optimizer state for every parameter its param_groups list,
 * each state tensor of its parameter's shape. Parameters are indices
 * (Optimizer.state_dict(): paired with the model's floating-point tensors
 * in order, else as a multiset of shapes) or fully qualified names
 * (torch.distributed.checkpoint.state_dict.get_state_dict, FSDP's
 * optim_state_dict: paired by name, a name the model lacks is partial). */
/* "full-resume", "partial", "warm-start-only", "weights-only"; "unknown"
 * for other values. Static string. */
CKPT_API const char *ckpt_resume_name(ckpt_resume r);

typedef enum ckpt_meta_topic {
    CKPT_META_ARCHITECTURE = 0,
    CKPT_META_DTYPE = 1,
    CKPT_META_PARALLEL = 2,
    CKPT_META_VERSIONS = 3,
    CKPT_META_OTHER = 4
} ckpt_meta_topic;
#define CKPT_META_TOPIC_COUNT 5
/* "architecture_config", "dtype_intent", "parallel_layout",
 * "library_versions", "other"; "unknown" for other values. Static. */
CKPT_API const char *ckpt_meta_topic_name(ckpt_meta_topic t);

/* One piece of metadata. Strings are borrowed from the analysis. */
typedef struct ckpt_meta_entry {
    ckpt_meta_topic topic;
    const char *file;        /* as ckpt_component.file */
    const char *source;      /* "__metadata__" (safetensors header or sharded
                           index metadata), "tree" (the object tree) or
                           "json" (a JSON file of a directory) */
    const char *key;         /* the metadata key, flattened tree path or JSON
                           key (nested keys joined with ".") */
    const char *text;        /* the value as text (metadata strings as written,
                           JSON values as compact JSON), or NULL when
                           `value` is set */
    const ckpt_value *value; /* the value in the object tree, or NULL */
} ckpt_meta_entry;

/* Analyses an opened checkpoint. f is borrowed and must outlive *out.
 * Reads no tensor bytes except those of 0-dim counter tensors. Returns 0,
 * or CKPT_E_NOMEM, CKPT_E_INVALID_ARG (out or f NULL). An object tree too
 * large to walk (more than 2^24 nodes visited) is not an error: the
 * analysis stops there and says so in a warning. Free with
 * ckpt_training_free. */
CKPT_API int ckpt_training_analyze(ckpt_training **out, const ckpt_file *f);

/* Analyses a directory in the Hugging Face Trainer layout (model weights as
 * model.safetensors, pytorch_model.bin or a sharded index with its shards,
 * optimizer.pt, scheduler.pt, rng_state*.pth, scaler.pt,
 * trainer_state.json, config.json...) or any directory of checkpoint
 * files: every regular file that is not hidden is opened (ckpt_open with
 * opts, which may be NULL) and analysed as one checkpoint; JSON files are
 * read for counters (trainer_state.json global_step and epoch) and
 * metadata; shards listed by an index are analysed through the index (a
 * "*.bin.index.json" whose shards ckpt_open cannot open as a set has each
 * shard opened alone). Files that are not checkpoints are listed by
 * ckpt_training_ignored; a file that looks like one (zip, pickle or
 * safetensors start) but does not open gives a warning. The analysis owns
 * the files it opened. Returns 0; CKPT_E_IO (dir unreadable, not a
 * directory); CKPT_E_LIMIT (more than limits.max_zip_entries entries);
 * CKPT_E_NOMEM; CKPT_E_INVALID_ARG. */
CKPT_API int ckpt_training_analyze_dir(ckpt_training **out, const char *dir,
                                       const ckpt_open_options *opts);
CKPT_API void ckpt_training_free(ckpt_training *t);

/* Components in discovery order (files by name, trees in insertion
 * order). Borrowed. */
CKPT_API size_t ckpt_training_component_count(const ckpt_training *t);
CKPT_API const ckpt_component *ckpt_training_component(const ckpt_training *t, size_t i);
/* Optimizer-to-model ratio: bytes of optimizer state tensors of at least
 * one dimension per byte of the model parameters the optimizers update
 * (ckpt_training_optimized_bytes); NaN without optimizer state or without
 * model parameter bytes. Adam holds 2 (exp_avg, exp_avg_sq), SGD with
 * momentum 1. */
CKPT_API double ckpt_training_optimizer_ratio(const ckpt_training *t);
/* The ratio's denominator: bytes of the model parameters each optimizer's
 * param_groups pair with (in order, by name or by shape, as the resume
 * verdict pairs them), so that frozen parameters, float buffers and a
 * second model (an EMA copy) without optimizer state are not counted;
 * when an optimizer has no param_groups or pairs with no model, every
 * model's parameter bytes (ckpt_component.param_bytes summed). */
CKPT_API uint64_t ckpt_training_optimized_bytes(const ckpt_training *t);

/* The verdict, the sentences that justify it, and the warnings (missing
 * scheduler, scaler or RNG state; unreadable files; a partial walk).
 * Sentences are borrowed, i < count. */
CKPT_API ckpt_resume ckpt_training_resume(const ckpt_training *t);
CKPT_API size_t ckpt_training_reason_count(const ckpt_training *t);
CKPT_API const char *ckpt_training_reason(const ckpt_training *t, size_t i);
CKPT_API size_t ckpt_training_warning_count(const ckpt_training *t);
CKPT_API const char *ckpt_training_warning(const ckpt_training *t, size_t i);

/* Metadata entries in discovery order; a topic with no entry is not
 * carried. Borrowed. */
CKPT_API size_t ckpt_training_meta_count(const ckpt_training *t);
CKPT_API const ckpt_meta_entry *ckpt_training_meta(const ckpt_training *t, size_t i);

/* The checkpoint files analysed (one for ckpt_training_analyze), in name
 * order, and their names as in ckpt_component.file. Borrowed. */
CKPT_API size_t ckpt_training_file_count(const ckpt_training *t);
CKPT_API const ckpt_file *ckpt_training_file(const ckpt_training *t, size_t i);
CKPT_API const char *ckpt_training_file_name(const ckpt_training *t, size_t i);
/* Path of the main weights file (the one holding the most model bytes;
 * without model weights, the largest file analysed), as it can be passed
 * to ckpt_open; NULL when nothing was analysed. Borrowed. */
CKPT_API const char *ckpt_training_weights_path(const ckpt_training *t);
/* Directory files that are not checkpoints (names inside the directory,
 * sorted), i < count. Borrowed. */
CKPT_API size_t ckpt_training_ignored_count(const ckpt_training *t);
CKPT_API const char *ckpt_training_ignored(const ckpt_training *t, size_t i);

#ifdef __cplusplus
}
#endif
#endif /* CKPT_INCLUDE_TRAINING_H */
