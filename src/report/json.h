/* json.h - the streaming JSON writer of the reports (doctor, training
 * summary) into a ckpt_buf: commas and colons placed by the writer,
 * compact output, the exact byte layout `ckpt doctor --json` has always
 * had.
 *
 * Strings: '"' and '\\' escaped, control characters (< 0x20 and 0x7f) as
 * \b \f \n \r \t or \u00XX, well-formed UTF-8 as is. Names and strings in
 * checkpoints are untrusted and may not be UTF-8: each byte outside a
 * well-formed sequence becomes \u00XX with XX its value (read as
 * Latin-1), which keeps every byte recoverable. */
#ifndef CKPT_REPORT_JSON_H
#define CKPT_REPORT_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt.h"
#include "base/buf.h"

/* Nesting bound, far above what the reports write. */
#define CKPT_JW_MAX_DEPTH 32

typedef struct ckpt_jw {
    ckpt_buf *out;
    int depth;
    unsigned char need_comma[CKPT_JW_MAX_DEPTH + 1];
    int after_key; /* the next value follows a key: no comma */
} ckpt_jw;

void ckpt_jw_init(ckpt_jw *j, ckpt_buf *out);
void ckpt_jw_object_begin(ckpt_jw *j);
void ckpt_jw_object_end(ckpt_jw *j);
void ckpt_jw_array_begin(ckpt_jw *j);
void ckpt_jw_array_end(ckpt_jw *j);
/* A key inside an object; the next call writes its value. */
void ckpt_jw_key(ckpt_jw *j, const char *key);
/* s NULL writes null. */
void ckpt_jw_string(ckpt_jw *j, const char *s);
void ckpt_jw_string_len(ckpt_jw *j, const char *s, size_t len);
void ckpt_jw_uint(ckpt_jw *j, uint64_t v);
/* Decimal text (any size) as a JSON number; text that is not a plain
 * decimal integer as a string; NULL as null. */
void ckpt_jw_int_text(ckpt_jw *j, const char *decimal);
/* Shortest round-trip form, integral values with ".0"; NaN and the
 * infinities as the strings "nan", "inf", "-inf". */
void ckpt_jw_double(ckpt_jw *j, double v);
void ckpt_jw_bool(ckpt_jw *j, int v);
void ckpt_jw_null(ckpt_jw *j);
/* A leaf of the object tree: ints exact, floats as ckpt_jw_double, str,
 * bool, null for none, bytes as lowercase hex, an opaque object as its
 * "module.qualname"; null for anything else. */
void ckpt_jw_leaf(ckpt_jw *j, const ckpt_value *v);

#endif
