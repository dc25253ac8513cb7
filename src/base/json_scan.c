/* json_scan.c - the JSON scanner (json_scan.h). */
#include "base/json_scan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/utf8.h"
#include "ckpt.h"

int ckpt_json_syntax(const ckpt_json_scan *p, const char *expected) {
    return ckpt_err(CKPT_E_FORMAT, p->file, "", p->base + (uint64_t)p->i,
                    "%s is not valid JSON (expected one UTF-8 JSON object, unique keys, only "
                    "whitespace around it): expected %s",
                    p->what, expected);
}

int ckpt_json_nomem(const ckpt_json_scan *p) {
    return ckpt_err(CKPT_E_NOMEM, p->file, "", p->base + (uint64_t)p->i, "out of memory");
}

static void ws(ckpt_json_scan *p) {
    while (p->i < p->n) {
        unsigned char c = p->s[p->i];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->i++;
    }
}

int ckpt_json_peek(ckpt_json_scan *p) {
    ws(p);
    return p->i < p->n ? p->s[p->i] : -1;
}

int ckpt_json_expect(ckpt_json_scan *p, int c, const char *what) {
    if (ckpt_json_peek(p) != c) return ckpt_json_syntax(p, what);
    p->i++;
    return 0;
}

int ckpt_json_empty(ckpt_json_scan *p, int close) {
    if (ckpt_json_peek(p) != close) return 0;
    p->i++;
    p->depth--;
    return 1;
}

static int hex4(ckpt_json_scan *p, unsigned *out) {
    unsigned v = 0;
    for (int k = 0; k < 4; k++, p->i++) {
        int c = p->i < p->n ? p->s[p->i] : -1, d;
        if (c >= '0' && c <= '9')
            d = c - '0';
        else if (c >= 'a' && c <= 'f')
            d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            d = c - 'A' + 10;
        else
            return ckpt_json_syntax(p, "4 hex digits after \\u");
        v = v << 4 | (unsigned)d;
    }
    *out = v;
    return 0;
}

static size_t put_utf8(char *o, unsigned cp) {
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | cp >> 6);
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12);
        o[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18);
    o[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    o[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* One escape after the backslash at p->i - 1; the decoded bytes go to
 * `o` (room for 4) when o is not NULL. Returns bytes written, or -1 with
 * the error recorded. A surrogate must come as a high-low pair (serde_json
 * refuses a lone one); \u0000 is refused because names are C strings. */
static int escape(ckpt_json_scan *p, char *o) {
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    if (p->i >= p->n) return ckpt_json_syntax(p, "an escape after \\"), -1;
    unsigned char c = p->s[p->i++];
    if (c != 'u') {
        const char *hit = c ? strchr(from, c) : NULL;
        if (!hit) {
            p->i--;
            return ckpt_json_syntax(p, "one of \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u"), -1;
        }
        if (o) o[0] = to[hit - from];
        return 1;
    }
    unsigned cp = 0, lo = 0;
    if (hex4(p, &cp)) return -1;
    if (cp >= 0xDC00 && cp <= 0xDFFF)
        return ckpt_json_syntax(p, "a high surrogate before a low surrogate"), -1;
    if (cp >= 0xD800 && cp <= 0xDBFF) {
        if (p->i + 2 > p->n || p->s[p->i] != '\\' || p->s[p->i + 1] != 'u')
            return ckpt_json_syntax(p, "a low surrogate \\uDC00-\\uDFFF after a high one"), -1;
        p->i += 2;
        if (hex4(p, &lo)) return -1;
        if (lo < 0xDC00 || lo > 0xDFFF)
            return ckpt_json_syntax(p, "a low surrogate \\uDC00-\\uDFFF after a high one"), -1;
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    }
    if (cp == 0) return ckpt_json_syntax(p, "no \\u0000 (names and metadata are C strings)"), -1;
    return o ? (int)put_utf8(o, cp) : 4;
}

/* Moves p->i over string bytes that need no decoding (up to a quote, a
 * backslash, a control byte or the end) and checks their UTF-8 (a run
 * never splits a character: every byte of one is 0x80 or above).
 * 0, or -1 with the error recorded. */
static int plain_run(ckpt_json_scan *p) {
    /* locals: a byte read may alias p->i, which would be stored and
     * reloaded for every byte */
    const unsigned char *s = p->s;
    size_t run = p->i, i = run, n = p->n;
    unsigned high = 0;
    while (i < n) {
        unsigned char c = s[i];
        if (c == '"' || c == '\\' || c < 0x20) break;
        high |= c;
        i++;
    }
    p->i = i;
    high &= 0x80;
    if (p->i >= p->n) return ckpt_json_syntax(p, "a closing quote"), -1;
    if (high && !ckpt_utf8_check(p->s + run, p->i - run, 0)) {
        p->i = run;
        return ckpt_json_syntax(p, "UTF-8 text in the string"), -1;
    }
    return 0;
}

/* A string at p->i (the opening quote). Returns its decoded text: a
 * pointer into the header when it has no escapes (*len bytes, not
 * NUL-terminated), else into `scratch` (cap bytes; longer text is
 * truncated but still checked, and *len is the full length). With
 * `keep`, the text is copied to the arena NUL-terminated and that copy
 * returned. NULL on error (recorded). */
const char *ckpt_json_string(ckpt_json_scan *p, char *scratch, size_t cap, int keep, size_t *len) {
    if (ckpt_json_peek(p) != '"') return ckpt_json_syntax(p, "a string"), NULL;
    size_t start = ++p->i;
    if (plain_run(p)) return NULL;
    if (p->s[p->i] == '"') { /* no escapes: the common case */
        *len = p->i - start;
        p->i++;
        const char *text = (const char *)p->s + start;
        if (!keep) return text;
        char *copy = ckpt_arena_strndup(p->arena, text, *len);
        return copy ? copy : (ckpt_json_nomem(p), NULL);
    }
    /* escapes: a kept copy takes the string's raw length, which its text
     * never exceeds (an escape decodes to fewer bytes), found by a skim to
     * the closing quote: not the rest of the input's (many escaped keys
     * would otherwise each reserve the rest of a big header), and decoded
     * once (a 4 MB digest record is one escaped string) */
    if (keep) {
        size_t end = p->i;
        while (end < p->n && p->s[end] != '"') end += p->s[end] == '\\' ? 2 : 1;
        size_t raw = (end < p->n ? end : p->n) - start;
        char *copy = ckpt_arena_alloc_raw(p->arena, raw + 1);
        if (!copy) return ckpt_json_nomem(p), NULL;
        p->i = start - 1;
        if (!ckpt_json_string(p, copy, raw, 0, len)) return NULL;
        copy[*len] = '\0';
        return copy;
    }
    char *out = scratch;
    size_t o = p->i - start;
    if (o && cap) memcpy(out, p->s + start, o < cap ? o : cap); /* out may be NULL */
    char tmp[4];
    for (;;) {
        size_t run = p->i;
        if (plain_run(p)) return NULL;
        size_t m = p->i - run; /* a run at once: a digest record is 4 MB of them */
        if (o < cap) memcpy(out + o, p->s + run, m < cap - o ? m : cap - o);
        o += m;
        unsigned char c = p->s[p->i];
        if (c == '"') break;
        if (c < 0x20) return ckpt_json_syntax(p, "no control character in a string"), NULL;
        p->i++;
        int w = escape(p, tmp);
        if (w < 0) return NULL;
        for (int k = 0; k < w; k++, o++)
            if (o < cap) out[o] = tmp[k];
    }
    p->i++;
    *len = o;
    return cap ? out : (const char *)p->s + start; /* only checked */
}

/* A number at p->i. Returns 0 with *out set for an integer in [0, 2^64);
 * 1 for any other valid JSON number (negative, -0, fraction, exponent, or
 * too large: serde_json reads those as i64 or f64, which usize refuses);
 * -1 with the error recorded when it is not a number. */
/* serde_json's f64 of a number that is no u64 or i64 (Deserializer::
 * f64_from_parts): the significand, as many leading digits as fit in a
 * u64, times 10^exp, one multiplication by 1e0..1e308 (or divisions by
 * 1e308 first for smaller exponents). An infinite result is serde's
 * NumberOutOfRange: the safetensors header buffers every value
 * (#[serde(flatten)]), so an unknown field's 1e400 fails the file. */
static int f64_in_range(uint64_t sig, int64_t exp) {
    if (sig == 0 || exp <= 0) return 1;
    if (exp > 308) return 0;
    char pow[8];
    snprintf(pow, sizeof pow, "1e%d", (int)exp);
    return !isinf((double)sig * strtod(pow, NULL));
}

/* serde's overflow!(a * 10 + d, UINT64_MAX) */
static int u64_full(uint64_t a, unsigned d) {
    return a >= UINT64_MAX / 10 && (a > UINT64_MAX / 10 || d > UINT64_MAX % 10);
}

int ckpt_json_number(ckpt_json_scan *p, uint64_t *out) {
    int c = ckpt_json_peek(p), other = 0;
    size_t at = p->i;
    if (c == '-') other = 1, p->i++;
    if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9')
        return ckpt_json_syntax(p, "a number"), -1;
    uint64_t v = 0;
    int64_t exp = 0; /* serde: the digits past the significand's u64 */
    if (p->s[p->i] == '0') {
        p->i++;
        if (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9')
            return ckpt_json_syntax(p, "no leading zero in a number"), -1;
    } else {
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
            unsigned d = (unsigned)(p->s[p->i++] - '0');
            if (other == 2 || u64_full(v, d))
                other = 2, exp++;
            else
                v = v * 10 + d;
        }
    }
    if (p->i < p->n && p->s[p->i] == '.') {
        int full = 0;
        other = 1;
        p->i++;
        if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9')
            return ckpt_json_syntax(p, "a digit after the decimal point"), -1;
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
            unsigned d = (unsigned)(p->s[p->i++] - '0');
            if (full || u64_full(v, d))
                full = 1;
            else
                v = v * 10 + d, exp--;
        }
    }
    if (p->i < p->n && (p->s[p->i] == 'e' || p->s[p->i] == 'E')) {
        int neg = 0;
        int32_t e = 0;
        other = 1;
        p->i++;
        if (p->i < p->n && (p->s[p->i] == '+' || p->s[p->i] == '-')) neg = p->s[p->i++] == '-';
        if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9')
            return ckpt_json_syntax(p, "a digit in the exponent"), -1;
        int huge = 0; /* over i32: serde's parse_exponent_overflow */
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
            int d = p->s[p->i++] - '0';
            if (huge || e > (INT32_MAX - d) / 10)
                huge = 1;
            else
                e = e * 10 + d;
        }
        if (huge)
            exp = neg || v == 0 ? 0 : INT32_MAX, v = neg ? 0 : v;
        else
            exp += neg ? -(int64_t)e : e;
    }
    if (other && !f64_in_range(v, exp)) {
        p->i = at;
        return ckpt_json_syntax(p, "a number within f64's range (serde_json: number out of "
                                   "range)"),
               -1;
    }
    *out = v;
    return other != 0;
}

int ckpt_json_literal(ckpt_json_scan *p, const char *word) {
    size_t len = strlen(word);
    if (p->n - p->i < len || memcmp(p->s + p->i, word, len) != 0) return ckpt_json_syntax(p, word);
    p->i += len;
    return 0;
}

int ckpt_json_open(ckpt_json_scan *p) {
    if (++p->depth > p->max_depth)
        return ckpt_err(CKPT_E_FORMAT, p->file, "", p->base + (uint64_t)p->i,
                        "%s nests arrays and objects more than %u deep (the reference "
                        "reader's recursion limit)",
                        p->what, p->max_depth);
    p->i++;
    return 0;
}

/* After an element of a container closed by `close`: 1 when closed, 0
 * when a comma announces the next element, -1 on error. */
int ckpt_json_next(ckpt_json_scan *p, int close) {
    int c = ckpt_json_peek(p);
    if (c == close) {
        p->i++;
        p->depth--;
        return 1;
    }
    if (c == ',') {
        p->i++;
        return 0;
    }
    return ckpt_json_syntax(p, close == '}' ? "',' or '}'" : "',' or ']'"), -1;
}

/* Skips any value (serde's IgnoredAny: an unknown field of TensorInfo). */
int ckpt_json_skip(ckpt_json_scan *p) {
    uint64_t u;
    size_t len;
    int c = ckpt_json_peek(p), rc;
    switch (c) {
    case '"': return ckpt_json_string(p, NULL, 0, 0, &len) ? 0 : -1;
    case 't': return ckpt_json_literal(p, "true");
    case 'f': return ckpt_json_literal(p, "false");
    case 'n': return ckpt_json_literal(p, "null");
    case '[':
        if (ckpt_json_open(p)) return -1;
        if (ckpt_json_peek(p) == ']') {
            p->i++;
            p->depth--;
            return 0;
        }
        do {
            if (ckpt_json_skip(p)) return -1;
        } while ((rc = ckpt_json_next(p, ']')) == 0);
        return rc < 0 ? -1 : 0;
    case '{':
        if (ckpt_json_open(p)) return -1;
        if (ckpt_json_peek(p) == '}') {
            p->i++;
            p->depth--;
            return 0;
        }
        do {
            if (!ckpt_json_string(p, NULL, 0, 0, &len) || ckpt_json_expect(p, ':', "':'") ||
                ckpt_json_skip(p))
                return -1;
        } while ((rc = ckpt_json_next(p, '}')) == 0);
        return rc < 0 ? -1 : 0;
    default: return ckpt_json_number(p, &u) < 0 ? -1 : 0;
    }
}
