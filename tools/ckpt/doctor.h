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

#endif
