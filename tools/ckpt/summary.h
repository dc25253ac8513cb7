/* summary.h - the text of a training analysis (ckpt_training_*), shared
 * by `ckpt inspect --summary` and the resume, memory and metadata sections
 * of `ckpt doctor`; the library writes the JSON (ckpt_training_json).
 *
 * Each cli_summary_* shows one part on stdout (lines indented by two
 * spaces). t may be NULL (the file could not be opened): the text says
 * so. */
#ifndef CKPT_SUMMARY_H
#define CKPT_SUMMARY_H

#include "cli.h"

/* Components with bytes and element counts, totals per kind, the
 * optimizer-to-model ratio, optimizer types and param_groups
 * hyperparameters; for a directory also its files. */
void cli_summary_memory(const ckpt_training *t);
/* The resume verdict, its reasons and warnings, the step counters. */
void cli_summary_resume(const ckpt_training *t);
/* Metadata entries by topic and the topics not carried. */
void cli_summary_metadata(const ckpt_training *t);

/* `ckpt inspect --summary PATH [--json]`: analyses a file or a directory
 * and prints the three parts (JSON: ckpt_training_json). Returns an exit code (CLI_*). */
int cli_summary_inspect(const char *path, int json);

#endif
