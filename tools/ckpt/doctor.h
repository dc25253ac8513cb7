/* doctor.h - sections of `ckpt doctor` rendered as text beside
 * cmd_doctor.c; the library (ckpt_doctor) computed them. */
#ifndef CKPT_DOCTOR_H
#define CKPT_DOCTOR_H

#include "cli.h"

/* The scan verdict of every file the report covers, with its findings. */
void cli_doctor_safety_show(const ckpt_doctor_report *r);
/* Wrapper prefixes on tensor keys, and the `ckpt rename` that removes
 * them. */
void cli_doctor_keys_show(const ckpt_doctor_report *r);

#endif
