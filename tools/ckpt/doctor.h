/* doctor.h - parts of `ckpt doctor` that live beside cmd_doctor.c: each is
 * a section computed up front and then rendered as text or JSON. */
#ifndef CKPT_DOCTOR_H
#define CKPT_DOCTOR_H

#include "cli.h"

/* ------------------------------------------------------------ safety */

/* The scan verdict of every checkpoint file the doctor looks at. */
typedef struct cli_doctor_safety {
    const char **names;         /* as shown (borrowed) */
    ckpt_scan_report **reports; /* NULL where the scan itself failed */
    cli_error *errors;          /* why, where reports[i] is NULL */
    size_t n;
} cli_doctor_safety;

/* Scans paths[0..n) (names[i] is how each is shown). -1 when out of
 * memory, else 0 (a failed scan is recorded, not returned). */
int cli_doctor_safety_run(cli_doctor_safety *s, const char *const *paths,
                      const char *const *names, size_t n);
/* 1 unless every file is safe; writes "unsafe: os.system" or the like to
 * out when out is not NULL. */
int cli_doctor_safety_concern(const cli_doctor_safety *s, FILE *out);
/* Text on stdout when j is NULL, else {"verdict", "files": [...]}. */
void cli_doctor_safety_show(const cli_doctor_safety *s, cli_json_writer *j);
void cli_doctor_safety_free(cli_doctor_safety *s);

/* ------------------------------------------------------------ keys */

/* Key hygiene: wrapper segments (module., _orig_mod., FSDP and activation
 * checkpointing wrappers) on tensor keys, and the `ckpt rename` that
 * removes them (ckpt_keys_hygiene). */
typedef struct cli_doctor_keys {
    ckpt_keys_report *report; /* NULL when the file could not be opened */
    const char *path;         /* for the suggested command (borrowed) */
} cli_doctor_keys;

/* 0, or -1 when out of memory. f may be NULL (nothing to say). */
int cli_doctor_keys_run(cli_doctor_keys *k, const ckpt_file *f, const char *path);
/* 1 when keys carry wrappers; writes "keys: 'module.' on 12 keys" or the
 * like to out when out is not NULL. */
int cli_doctor_keys_concern(const cli_doctor_keys *k, FILE *out);
/* Text on stdout when j is NULL, else {"wrappers": [...], "fix": ...}. */
void cli_doctor_keys_show(const cli_doctor_keys *k, cli_json_writer *j);
void cli_doctor_keys_free(cli_doctor_keys *k);

#endif
