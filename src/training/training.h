/* training.h - the analysis behind ckpt_training_*: the recognisers of
 * training.c (components of one object tree), the verdict of resume.c,
 * the metadata topics of meta.c, used by dir.c (Hugging Face Trainer
 * directories). All of them fill the record of record.h. */
#ifndef CKPT_TRAINING_H
#define CKPT_TRAINING_H

#include "base/alloc.h"
#include "ckpt.h"
#include "training/record.h"

/* Finds the components and metadata of f's tree; `name` is what
 * components' `file` says. f must outlive t. 0 or CKPT_E_NOMEM. */
int ckpt_tr_add_file(ckpt_training *t, const ckpt_file *f, const char *name);
/* Matches optimizers to models, decides the verdict, the ratio and the
 * weights path. `dir` prefixes the weights file name (NULL for a single
 * file). 0 or CKPT_E_NOMEM. */
int ckpt_tr_finish(ckpt_training *t, const char *dir);

/* ---- training_meta.c */

/* The topic a key names ("torch_dtype" -> DTYPE, "transformers_version" ->
 * VERSIONS...), or -1 when it names none. `top` admits the generic names
 * ("config", "args") that only mean an architecture config at the top
 * level of a tree or file. */
int ckpt_tr_topic(const char *key, size_t len, int top);
/* Appends an entry (strings copied). 0 or CKPT_E_NOMEM. */
int ckpt_tr_meta_add(ckpt_training *t, ckpt_meta_topic topic, const char *file, const char *source,
                     const char *key, const char *text, const ckpt_value *value);
/* safetensors __metadata__ / index metadata of f: every key becomes an
 * entry (OTHER when it names no topic); values that are JSON objects are
 * looked into. 0 or CKPT_E_NOMEM. */
int ckpt_tr_meta_file(ckpt_training *t, const ckpt_file *f, const char *file);
/* The keys inside a configuration-like value (dict, or an opaque object's
 * state) that name a topic, `depth` levels down at most. path is the
 * value's own flattened path. 0 or CKPT_E_NOMEM. */
int ckpt_tr_meta_scan(ckpt_training *t, const char *file, const char *path, const ckpt_value *v,
                      unsigned depth);
/* A JSON file of a directory (bytes, len): config.json-like files give
 * metadata, trainer_state.json its counters; "weight_map" indexes are the
 * caller's business. 0 or CKPT_E_NOMEM; unparsable JSON is ignored
 * (*parsed = 0). */
int ckpt_tr_meta_json(ckpt_training *t, const char *file, const char *bytes, size_t len,
                      int *parsed);

#endif
