/* detect.h - the one content sniff: which reader a file's first bytes
 * select. ckpt_detect_format (ckpt.h) is the public face; ckpt_open, the
 * scanner and doctor all decide through it. */
#ifndef CKPT_FORMAT_DETECT_H
#define CKPT_FORMAT_DETECT_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt.h"

/* Why a file whose head shows a format ckpt recognises but does not read
 * (PyTorch's "PYTORCH1" preview format, the pre-0.4 tar format) is
 * refused: a static message, with *offset the byte it is seen at; NULL for
 * any other head. ckpt_detect_format returns CKPT_FORMAT_UNKNOWN exactly
 * when this is not NULL or no format is shown. */
const char *ckpt_detect_unsupported(const uint8_t *p, size_t n, uint64_t *offset);

#endif
