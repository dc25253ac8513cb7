/* buf.c - the growable byte buffer and JSON string escaping (buf.h). */
#include "base/buf.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/hex.h"

void ckpt_buf_put(ckpt_buf *b, const void *p, size_t n) {
    if (b->failed || n == 0) return;
    if (n > SIZE_MAX - b->len) {
        b->failed = 1;
        return;
    }
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n) {
            if (cap > SIZE_MAX / 2) {
                cap = b->len + n;
                break;
            }
            cap *= 2;
        }
        uint8_t *q = ckpt_realloc(b->p, cap);
        if (!q) {
            b->failed = 1;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
}

void ckpt_buf_byte(ckpt_buf *b, uint8_t c) { ckpt_buf_put(b, &c, 1); }
void ckpt_buf_str(ckpt_buf *b, const char *s) { ckpt_buf_put(b, s, strlen(s)); }

void ckpt_buf_printf(ckpt_buf *b, const char *fmt, ...) {
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    /* only short numeric fields are formatted this way */
    if (n < 0 || (size_t)n >= sizeof tmp)
        b->failed = 1;
    else
        ckpt_buf_put(b, tmp, (size_t)n);
}

void ckpt_buf_json_chars(ckpt_buf *b, const char *s, size_t n) {
    size_t run = 0; /* bytes copied unescaped, flushed in one put */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char u[7];
        if (c == '"')
            esc = "\\\"";
        else if (c == '\\')
            esc = "\\\\";
        else if (c == '\b')
            esc = "\\b";
        else if (c == '\f')
            esc = "\\f";
        else if (c == '\n')
            esc = "\\n";
        else if (c == '\r')
            esc = "\\r";
        else if (c == '\t')
            esc = "\\t";
        else if (c < 0x20) {
            memcpy(u, "\\u00", 4);
            u[4] = ckpt_hex_digits[c >> 4];
            u[5] = ckpt_hex_digits[c & 15];
            u[6] = '\0';
            esc = u;
        }
        if (!esc) {
            run++;
            continue;
        }
        ckpt_buf_put(b, s + i - run, run);
        run = 0;
        ckpt_buf_str(b, esc);
    }
    ckpt_buf_put(b, s + n - run, run);
}

void ckpt_buf_json_str(ckpt_buf *b, const char *s, size_t n) {
    ckpt_buf_byte(b, '"');
    ckpt_buf_json_chars(b, s, n);
    ckpt_buf_byte(b, '"');
}

void ckpt_buf_free(ckpt_buf *b) {
    ckpt_free(b->p);
    *b = (ckpt_buf){0};
}
