/* training_json.h - the JSON of a training analysis: its memory, resume
 * and metadata parts, shared by `ckpt inspect --summary --json`
 * (ckpt_training_json) and the doctor report's sections. */
#ifndef CKPT_REPORT_TRAINING_JSON_H
#define CKPT_REPORT_TRAINING_JSON_H

#include "report/json.h"

/* Each writes exactly one JSON value; null when t is NULL (the file could
 * not be opened). */
/* {"components", "by_kind", "model_parameter_bytes", ..., "files",
 * "ignored"} */
void ckpt_report_memory(ckpt_jw *j, const ckpt_training *t);
/* {"verdict", "reasons", "warnings", "counters"} */
void ckpt_report_resume(ckpt_jw *j, const ckpt_training *t);
/* {TOPIC: [{"file", "source", "key", "value"}...], ..., "not_carried"} */
void ckpt_report_metadata(ckpt_jw *j, const ckpt_training *t);

#endif
