/* summary.h - renderings of a training analysis (ckpt_training_*), shared
 * by `ckpt inspect --summary` and the resume, memory and metadata sections
 * of `ckpt doctor`.
 *
 * Each summary_* shows one part: text on stdout (lines indented by two
 * spaces) when j is NULL, else exactly one JSON value. t may be NULL (the
 * file could not be opened): text says so, JSON is null. */
#ifndef CKPT_SUMMARY_H
#define CKPT_SUMMARY_H

#include "cli.h"

/* Components with bytes and element counts, totals per kind, the
 * optimizer-to-model ratio, optimizer types and param_groups
 * hyperparameters; for a directory also its files. */
void cli_summary_memory(const ckpt_training *t, cli_json_writer *j);
/* {"verdict", "reasons", "warnings", "counters"}. */
void cli_summary_resume(const ckpt_training *t, cli_json_writer *j);
/* Metadata entries by topic and the topics not carried. */
void cli_summary_metadata(const ckpt_training *t, cli_json_writer *j);
/* 1 when the verdict needs attention (partial, warm-start-only); then, if
 * out is not NULL, a short phrase for a verdict line is written to it. */
int cli_summary_concern(const ckpt_training *t, FILE *out);
/* "resume: full-resume", "weights only (a deployment file, not a resume
 * checkpoint)"... for a healthy verdict line. Static string. */
const char *cli_summary_phrase(const ckpt_training *t);

/* `ckpt inspect --summary PATH [--json]`: analyses a file or a directory
 * and prints the three parts. Returns an exit code (CLI_*). */
int cli_summary_inspect(const char *path, int json);

#endif
