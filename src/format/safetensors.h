/* safetensors.h - what the safetensors reader shares with the sharded
 * index reader (open/sharded.c) and the scan (jobs/scan.c). The reader itself, ckpt_safetensors_read,
 * is declared with the other format readers in model/file.h. */
#ifndef CKPT_SAFETENSORS_H
#define CKPT_SAFETENSORS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "base/source.h"
#include "ckpt.h"

/* Records a jansson parse failure of `what` in `file` as CKPT_E_FORMAT and
 * returns it. jansson reports the byte position just past the offending
 * token, relative to the parsed buffer; `base` makes it absolute. */
int ckpt_json_fail(const json_error_t *err, const char *file, uint64_t base, const char *what);

/* Checks a safetensors file (p, n bytes) by every rule
 * ckpt_safetensors_read applies, without building its tensors: the scan's
 * question. Its header is read through src (base/source.h; NULL for
 * memory). 0 or the error code, recorded as the reader records it. */
int ckpt_safetensors_check(const uint8_t *p, size_t n, const ckpt_source *src, const char *path,
                           const ckpt_limits *limits);

#endif
