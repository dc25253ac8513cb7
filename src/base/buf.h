/* buf.h - the one growable byte buffer, with JSON string escaping. */
#ifndef CKPT_BUF_H
#define CKPT_BUF_H

#include <stddef.h>
#include <stdint.h>

/* A growable byte buffer (ckpt_malloc); on allocation failure `failed` is
 * set and later appends are no-ops, so callers check once at the end. */
typedef struct ckpt_buf {
    uint8_t *p;
    size_t len, cap;
    int failed;
} ckpt_buf;
void ckpt_buf_put(ckpt_buf *b, const void *p, size_t n);
void ckpt_buf_byte(ckpt_buf *b, uint8_t c);
void ckpt_buf_str(ckpt_buf *b, const char *s);
void ckpt_buf_printf(ckpt_buf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* A JSON string literal escaped like serde_json and Python's json with
 * ensure_ascii=False: '"', '\\', \b \f \n \r \t, other controls \u00xx
 * (lowercase), everything else as is (s must be valid UTF-8). */
void ckpt_buf_json_str(ckpt_buf *b, const char *s, size_t n);
/* The same without the quotes. */
void ckpt_buf_json_chars(ckpt_buf *b, const char *s, size_t n);
void ckpt_buf_free(ckpt_buf *b);

#endif
