/* doctor.h - parts of `ckpt doctor` that live beside cmd_doctor.c: each is
 * a section computed up front and then rendered as text or JSON. */
#ifndef CKPT_DOCTOR_H
#define CKPT_DOCTOR_H

#include "cli.h"

/* ------------------------------------------------------------ safety */

/* The scan verdict of every checkpoint file the doctor looks at. */
typedef struct doctor_safety {
    const char **names;         /* as shown (borrowed) */
    ckpt_scan_report **reports; /* NULL where the scan itself failed */
    cli_error *errors;          /* why, where reports[i] is NULL */
    size_t n;
} doctor_safety;

/* Scans paths[0..n) (names[i] is how each is shown). -1 when out of
 * memory, else 0 (a failed scan is recorded, not returned). */
int doctor_safety_run(doctor_safety *s, const char *const *paths,
                      const char *const *names, size_t n);
/* 1 unless every file is safe; writes "unsafe: os.system" or the like to
 * out when out is not NULL. */
int doctor_safety_concern(const doctor_safety *s, FILE *out);
/* Text on stdout when j is NULL, else {"verdict", "files": [...]}. */
void doctor_safety_show(const doctor_safety *s, json_writer *j);
void doctor_safety_free(doctor_safety *s);

/* ------------------------------------------------------------ keys */

/* Key hygiene: wrapper segments (module., _orig_mod., FSDP and activation
 * checkpointing wrappers) on tensor keys, and the `ckpt rename` that
 * removes them (ckpt_keys_hygiene). */
typedef struct doctor_keys {
    ckpt_keys_report *report; /* NULL when the file could not be opened */
    const char *path;         /* for the suggested command (borrowed) */
} doctor_keys;

/* 0, or -1 when out of memory. f may be NULL (nothing to say). */
int doctor_keys_run(doctor_keys *k, const ckpt_file *f, const char *path);
/* 1 when keys carry wrappers; writes "keys: 'module.' on 12 keys" or the
 * like to out when out is not NULL. */
int doctor_keys_concern(const doctor_keys *k, FILE *out);
/* Text on stdout when j is NULL, else {"wrappers": [...], "fix": ...}. */
void doctor_keys_show(const doctor_keys *k, json_writer *j);
void doctor_keys_free(doctor_keys *k);

#endif
