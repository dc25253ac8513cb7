/* json.c - a small streaming JSON writer for the CLI's --json output.
 *
 * Strings: `"` and `\` are escaped, control characters (< 0x20 and 0x7f)
 * become \b \f \n \r \t or \u00XX, well-formed UTF-8 passes through. Names
 * and strings in checkpoints are untrusted and may not be UTF-8: each byte
 * that is not part of a well-formed sequence is written as \u00XX with XX
 * its value (read as Latin-1). Unlike U+FFFD this keeps every byte value
 * recoverable; the price is that such a byte and the real character U+00XX
 * look alike in the output. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

void cli_json_init(cli_json_writer *j, FILE *out) {
    j->out = out;
    j->depth = 0;
    memset(j->need_comma, 0, sizeof j->need_comma);
    j->after_key = 0;
    j->n = 0;
}

static void flush(cli_json_writer *j) {
    if (j->n) fwrite(j->buf, 1, j->n, j->out);
    j->n = 0;
}

/* The end of every call that writes (cli.h): buf reaches out at depth 1
 * or 0. */
static void done(cli_json_writer *j) {
    if (j->depth <= 1) flush(j);
}

static void put(cli_json_writer *j, const void *s, size_t len) {
    if (len > sizeof j->buf - j->n) {
        flush(j);
        if (len >= sizeof j->buf) {
            fwrite(s, 1, len, j->out);
            return;
        }
    }
    memcpy(j->buf + j->n, s, len);
    j->n += len;
}

static void put_char(cli_json_writer *j, char c) {
    if (j->n == sizeof j->buf) flush(j);
    j->buf[j->n++] = c;
}

static void put_str(cli_json_writer *j, const char *s) { put(j, s, strlen(s)); }

/* Separator before any value or key. */
static void before_value(cli_json_writer *j) {
    if (j->after_key) {
        j->after_key = 0;
        return;
    }
    if (j->need_comma[j->depth]) put_char(j, ',');
    j->need_comma[j->depth] = 1;
}

static void open_scope(cli_json_writer *j, char c) {
    before_value(j);
    put_char(j, c);
    if (j->depth < CLI_JSON_MAX_DEPTH) j->depth++;
    j->need_comma[j->depth] = 0;
    done(j);
}

static void close_scope(cli_json_writer *j, char c) {
    put_char(j, c);
    if (j->depth > 0) j->depth--;
    done(j);
}

void cli_json_object_begin(cli_json_writer *j) { open_scope(j, '{'); }
void cli_json_object_end(cli_json_writer *j) { close_scope(j, '}'); }
void cli_json_array_begin(cli_json_writer *j) { open_scope(j, '['); }
void cli_json_array_end(cli_json_writer *j) { close_scope(j, ']'); }

/* The JSON escape of byte c, or NULL when it needs none (or \u). */
static const char *short_escape(unsigned char c) {
    switch (c) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    case '\b': return "\\b";
    case '\f': return "\\f";
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
    default: return NULL;
    }
}

/* Runs of bytes that need no escape go out in one put each: a listing
 * of a million names is not a call per character. */
static void put_escaped(cli_json_writer *out, const char *s, size_t len) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0, run = 0;

    put_char(out, '"');
    while (i < len) {
        unsigned char c = p[i];
        if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') { /* printable ASCII: as it is */
            i++;
            continue;
        }
        const char *esc = short_escape(c);
        size_t n = esc ? 0 : cli_utf8_len(p + i, len - i);
        if (!esc && c >= 0x20 && c != 0x7f && n) {
            i += n;
            continue;
        }
        put(out, p + run, i - run);
        if (esc) {
            put_str(out, esc);
        } else {
            char u[7];
            snprintf(u, sizeof u, "\\u%04x", (unsigned)c);
            put(out, u, 6);
        }
        run = ++i;
    }
    put(out, p + run, i - run);
    put_char(out, '"');
}

void cli_json_key(cli_json_writer *j, const char *key) {
    before_value(j);
    put_escaped(j, key, strlen(key));
    put_char(j, ':');
    j->after_key = 1;
    done(j);
}

void cli_json_string_len(cli_json_writer *j, const char *s, size_t len) {
    before_value(j);
    put_escaped(j, s, len);
    done(j);
}

void cli_json_string(cli_json_writer *j, const char *s) {
    if (s == NULL)
        cli_json_null(j);
    else
        cli_json_string_len(j, s, strlen(s));
}

void cli_json_uint(cli_json_writer *j, uint64_t v) {
    char buf[CLI_U64_CAP];
    const char *d = cli_u64(buf, v);

    before_value(j);
    put(j, d, (size_t)(buf + CLI_U64_CAP - 1 - d));
    done(j);
}

/* JSON's integer grammar: -?(0|[1-9][0-9]*). */
static int is_json_integer(const char *s) {
    if (*s == '-') s++;
    if (*s == '0') return s[1] == '\0';
    if (*s < '1' || *s > '9') return 0;
    while (*s >= '0' && *s <= '9') s++;
    return *s == '\0';
}

void cli_json_int_text(cli_json_writer *j, const char *decimal) {
    if (decimal == NULL) {
        cli_json_null(j);
        return;
    }
    if (!is_json_integer(decimal)) {
        cli_json_string(j, decimal);
        return;
    }
    before_value(j);
    put_str(j, decimal);
    done(j);
}

const char *cli_fmt_double(char buf[40], double v) {
    static const int precisions[] = {15, 16, 17};
    size_t i;

    for (i = 0; i < sizeof precisions / sizeof precisions[0]; i++) {
        double back;

        snprintf(buf, 40, "%.*g", precisions[i], v);
        back = strtod(buf, NULL);
        if (memcmp(&back, &v, sizeof v) == 0) break;
    }
    /* %.17g always round-trips; the loop just prefers shorter forms. */
    if (strpbrk(buf, ".e") == NULL) strcat(buf, ".0");
    return buf;
}

void cli_json_double(cli_json_writer *j, double v) {
    char buf[40];

    if (isnan(v)) {
        cli_json_string(j, "nan");
    } else if (isinf(v)) {
        cli_json_string(j, v > 0 ? "inf" : "-inf");
    } else {
        before_value(j);
        put_str(j, cli_fmt_double(buf, v));
        done(j);
    }
}

void cli_json_bool(cli_json_writer *j, int v) {
    before_value(j);
    put_str(j, v ? "true" : "false");
    done(j);
}

void cli_json_null(cli_json_writer *j) {
    before_value(j);
    put_str(j, "null");
    done(j);
}

void cli_json_error(cli_json_writer *j, const cli_error *e, const char *path) {
    cli_json_object_begin(j);
    cli_json_key(j, "code");
    cli_json_string(j, ckpt_error_name(e->code));
    cli_json_key(j, "message");
    cli_json_string(j, e->message);
    cli_json_key(j, "file");
    cli_json_string(j, e->file[0] ? e->file : path);
    cli_json_key(j, "member");
    if (e->member[0])
        cli_json_string(j, e->member);
    else
        cli_json_null(j);
    cli_json_key(j, "offset");
    if (e->offset != UINT64_MAX)
        cli_json_uint(j, e->offset);
    else
        cli_json_null(j);
    cli_json_object_end(j);
}

void cli_json_hex(cli_json_writer *j, const unsigned char *p, size_t len) {
    static const char digits[] = "0123456789abcdef";

    before_value(j);
    put_char(j, '"');
    for (size_t i = 0; i < len; i++) {
        put_char(j, digits[p[i] >> 4]);
        put_char(j, digits[p[i] & 15]);
    }
    put_char(j, '"');
    done(j);
}

void cli_json_leaf(cli_json_writer *j, const ckpt_value *v) {
    ckpt_kind kind = ckpt_value_kind(v);
    const char *s;
    size_t len = 0;
    double d = 0;
    int b = 0;

    switch (kind) {
    case CKPT_KIND_INT: cli_json_int_text(j, ckpt_value_int_decimal(v)); break;
    case CKPT_KIND_FLOAT:
        ckpt_value_float(v, &d);
        cli_json_double(j, d);
        break;
    case CKPT_KIND_STR:
        s = ckpt_value_str(v, &len);
        cli_json_string_len(j, s, len);
        break;
    case CKPT_KIND_BOOL:
        ckpt_value_bool(v, &b);
        cli_json_bool(j, b);
        break;
    case CKPT_KIND_BYTES:
        s = ckpt_value_str(v, &len);
        cli_json_hex(j, (const unsigned char *)s, len);
        break;
    case CKPT_KIND_OBJECT: cli_json_string(j, ckpt_value_object_name(v)); break;
    default: /* NONE, and containers or tensors, which are not leaves */ cli_json_null(j); break;
    }
}

void cli_json_dims(cli_json_writer *j, unsigned ndim, const uint64_t *dims) {
    cli_json_array_begin(j);
    for (unsigned d = 0; d < ndim; d++) cli_json_uint(j, dims[d]);
    cli_json_array_end(j);
}
