/* json.c - the reports' JSON writer (see json.h). */
#include "report/json.h"

#include "base/utf8.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ckpt_jw_init(ckpt_jw *j, ckpt_buf *out) {
    memset(j, 0, sizeof *j);
    j->out = out;
}

/* Separator before any value or key. */
static void before_value(ckpt_jw *j) {
    if (j->after_key) {
        j->after_key = 0;
        return;
    }
    if (j->need_comma[j->depth]) ckpt_buf_byte(j->out, ',');
    j->need_comma[j->depth] = 1;
}

static void open_scope(ckpt_jw *j, char c) {
    before_value(j);
    ckpt_buf_byte(j->out, (uint8_t)c);
    if (j->depth < CKPT_JW_MAX_DEPTH) j->depth++;
    j->need_comma[j->depth] = 0;
}

static void close_scope(ckpt_jw *j, char c) {
    ckpt_buf_byte(j->out, (uint8_t)c);
    if (j->depth > 0) j->depth--;
}

void ckpt_jw_object_begin(ckpt_jw *j) { open_scope(j, '{'); }
void ckpt_jw_object_end(ckpt_jw *j) { close_scope(j, '}'); }
void ckpt_jw_array_begin(ckpt_jw *j) { open_scope(j, '['); }
void ckpt_jw_array_end(ckpt_jw *j) { close_scope(j, ']'); }

/* Length (1-4) of the well-formed UTF-8 sequence at p (n bytes left), or
 * 0 when the bytes there are not one. */
static size_t utf8_len(const uint8_t *p, size_t n) {
    size_t len;
    if (p[0] < 0x80) return 1;
    if (p[0] < 0xc2 || p[0] > 0xf4) return 0; /* continuation, overlong lead */
    len = p[0] >= 0xf0 ? 4 : p[0] >= 0xe0 ? 3 : 2;
    return len <= n && ckpt_utf8_check(p, len, 0) == 1 ? len : 0;
}

static void put_escaped(ckpt_buf *b, const char *s, size_t len) {
    const uint8_t *p = (const uint8_t *)s;
    size_t i = 0;
    ckpt_buf_byte(b, '"');
    while (i < len) {
        uint8_t c = p[i];
        const char *esc = c == '"'    ? "\\\""
                          : c == '\\' ? "\\\\"
                          : c == '\b' ? "\\b"
                          : c == '\f' ? "\\f"
                          : c == '\n' ? "\\n"
                          : c == '\r' ? "\\r"
                          : c == '\t' ? "\\t"
                                      : NULL;
        size_t n = esc ? 1 : utf8_len(p + i, len - i);
        if (esc) {
            ckpt_buf_str(b, esc);
        } else if (c < 0x20 || c == 0x7f || n == 0) {
            ckpt_buf_printf(b, "\\u%04x", (unsigned)c);
            n = 1;
        } else {
            ckpt_buf_put(b, p + i, n);
        }
        i += n;
    }
    ckpt_buf_byte(b, '"');
}

void ckpt_jw_key(ckpt_jw *j, const char *key) {
    before_value(j);
    put_escaped(j->out, key, strlen(key));
    ckpt_buf_byte(j->out, ':');
    j->after_key = 1;
}

void ckpt_jw_string_len(ckpt_jw *j, const char *s, size_t len) {
    before_value(j);
    put_escaped(j->out, s, len);
}

void ckpt_jw_string(ckpt_jw *j, const char *s) {
    if (s == NULL)
        ckpt_jw_null(j);
    else
        ckpt_jw_string_len(j, s, strlen(s));
}

void ckpt_jw_uint(ckpt_jw *j, uint64_t v) {
    before_value(j);
    ckpt_buf_printf(j->out, "%llu", (unsigned long long)v);
}

/* JSON's integer grammar: -?(0|[1-9][0-9]*). */
static int is_json_integer(const char *s) {
    if (*s == '-') s++;
    if (*s == '0') return s[1] == '\0';
    if (*s < '1' || *s > '9') return 0;
    while (*s >= '0' && *s <= '9') s++;
    return *s == '\0';
}

void ckpt_jw_int_text(ckpt_jw *j, const char *decimal) {
    if (decimal == NULL || !is_json_integer(decimal)) {
        ckpt_jw_string(j, decimal);
        return;
    }
    before_value(j);
    ckpt_buf_str(j->out, decimal);
}

void ckpt_jw_double(ckpt_jw *j, double v) {
    static const int precisions[] = {15, 16, 17};
    char buf[40];
    if (isnan(v)) {
        ckpt_jw_string(j, "nan");
        return;
    }
    if (isinf(v)) {
        ckpt_jw_string(j, v > 0 ? "inf" : "-inf");
        return;
    }
    /* the shortest of these that strtod reads back to the same bits; %.17g
     * always does */
    for (size_t i = 0; i < sizeof precisions / sizeof *precisions; i++) {
        snprintf(buf, sizeof buf, "%.*g", precisions[i], v);
        double back = strtod(buf, NULL);
        if (memcmp(&back, &v, sizeof v) == 0) break;
    }
    if (strpbrk(buf, ".e") == NULL) strcat(buf, ".0");
    before_value(j);
    ckpt_buf_str(j->out, buf);
}

void ckpt_jw_bool(ckpt_jw *j, int v) {
    before_value(j);
    ckpt_buf_str(j->out, v ? "true" : "false");
}

void ckpt_jw_null(ckpt_jw *j) {
    before_value(j);
    ckpt_buf_str(j->out, "null");
}

void ckpt_jw_leaf(ckpt_jw *j, const ckpt_value *v) {
    const char *s;
    size_t len = 0;
    switch (ckpt_value_kind(v)) {
    case CKPT_KIND_INT: ckpt_jw_int_text(j, ckpt_value_int_decimal(v)); break;
    case CKPT_KIND_FLOAT: {
        double d = 0;
        ckpt_value_float(v, &d);
        ckpt_jw_double(j, d);
        break;
    }
    case CKPT_KIND_STR:
        s = ckpt_value_str(v, &len);
        ckpt_jw_string_len(j, s, len);
        break;
    case CKPT_KIND_BOOL: {
        int b = 0;
        ckpt_value_bool(v, &b);
        ckpt_jw_bool(j, b);
        break;
    }
    case CKPT_KIND_BYTES:
        s = ckpt_value_str(v, &len);
        before_value(j);
        ckpt_buf_byte(j->out, '"');
        for (size_t i = 0; i < len; i++) ckpt_buf_printf(j->out, "%02x", (unsigned)(uint8_t)s[i]);
        ckpt_buf_byte(j->out, '"');
        break;
    case CKPT_KIND_OBJECT: ckpt_jw_string(j, ckpt_value_object_name(v)); break;
    default: ckpt_jw_null(j); break; /* none, and containers or tensors */
    }
}
