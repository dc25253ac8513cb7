/* safetensors.h - what the safetensors reader shares with the sharded
 * index reader (open/sharded.c). The reader itself, ckpt_safetensors_read,
 * is declared with the other format readers in model/file.h. */
#ifndef CKPT_SAFETENSORS_H
#define CKPT_SAFETENSORS_H

#include <jansson.h>
#include <stdint.h>

/* Records a jansson parse failure of `what` in `file` as CKPT_E_FORMAT and
 * returns it. jansson reports the byte position just past the offending
 * token, relative to the parsed buffer; `base` makes it absolute. */
int ckpt_json_fail(const json_error_t *err, const char *file, uint64_t base,
                   const char *what);

#endif
