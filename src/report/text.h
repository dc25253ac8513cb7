/* text.h - small text helpers of the report layer. */
#ifndef CKPT_REPORT_TEXT_H
#define CKPT_REPORT_TEXT_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

/* "[32, 11616]" into buf (cap bytes, cut with "..." when it does not fit). */
const char *ckpt_report_dims(char *buf, size_t cap, unsigned ndim, const uint64_t *shape);
/* Hands b's bytes to the caller as a NUL-terminated string (*out, freed by
 * ckpt_string_free; *len its length when len is not NULL), or frees them:
 * 0, or CKPT_E_NOMEM when b failed. */
int ckpt_report_string(char **out, size_t *len, ckpt_buf *b);

#endif
