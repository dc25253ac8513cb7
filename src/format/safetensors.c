/* safetensors.c - the safetensors reader (FORMATS.md §1); sharded sets
 * (§1.7) are open/sharded.c's.
 *
 * A file is: u64 LE header length N, N bytes of JSON, then the byte buffer
 * that data_offsets are relative to. Open validates exactly what the
 * reference reader (safetensors tensor.rs, Metadata::validate) validates,
 * plus duplicate keys, and never touches tensor bytes: the cost is
 * O(header). Storages point straight into the mapping (zero-copy). */
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "model/dtype.h"
#include "base/error.h"
#include "model/file.h"
#include "format/safetensors.h"
#include "base/strmap.h"
#include "base/utf8.h"

/* One tensor entry of the header, as parsed. */
typedef struct st_entry {
    const char *name; /* arena, NUL-terminated */
    ckpt_dtype dtype;
    uint32_t ndim;
    size_t shape; /* index of shape[0] in the parser's dims pool */
    uint64_t begin, end;
    size_t index; /* position in the header: keeps the sort stable */
} st_entry;
/* The dtypes of FORMATS.md §1.3. ckpt_dtype_from_name also knows names
 * that only torch has (C32, C128, quantized); safetensors has no such
 * dtype, so a header naming one is as invalid as an unknown string. */
static int is_safetensors_dtype(ckpt_dtype dt) {
    switch (dt) {
    case CKPT_DT_BOOL:
    case CKPT_DT_U8:
    case CKPT_DT_I8:
    case CKPT_DT_I16:
    case CKPT_DT_U16:
    case CKPT_DT_I32:
    case CKPT_DT_U32:
    case CKPT_DT_I64:
    case CKPT_DT_U64:
    case CKPT_DT_F16:
    case CKPT_DT_BF16:
    case CKPT_DT_F32:
    case CKPT_DT_F64:
    case CKPT_DT_C64:
    case CKPT_DT_F8_E5M2:
    case CKPT_DT_F8_E4M3:
    case CKPT_DT_F8_E8M0:
    case CKPT_DT_F8_E4M3FNUZ:
    case CKPT_DT_F8_E5M2FNUZ:
    case CKPT_DT_F4:
    case CKPT_DT_F6_E2M3:
    case CKPT_DT_F6_E3M2: return 1;
    default: return 0;
    }
}

int ckpt_json_fail(const json_error_t *err, const char *file, uint64_t base, const char *what) {
    uint64_t off = base + (uint64_t)(err->position > 0 ? err->position : 0);
    if (json_error_code(err) == json_error_numeric_overflow)
        return ckpt_err(CKPT_E_FORMAT, file, "", off,
                        "%s: integer does not fit in 64 bits (expected a "
                        "non-negative integer below 2^63): %s",
                        what, err->text);
    return ckpt_err(CKPT_E_FORMAT, file, "", off,
                    "%s is not valid JSON (expected one UTF-8 JSON object, "
                    "unique keys, only whitespace around it): %s",
                    what, err->text);
}

/* Absolute offset of byte `rel` of the byte buffer, or CKPT_NO_OFFSET if
 * that does not fit in 64 bits (rel comes from the file). */
static uint64_t data_offset(uint64_t n, uint64_t rel) {
    uint64_t off;
    if (ckpt_add_overflow(8 + n, rel, &off)) return CKPT_NO_OFFSET;
    return off;
}

/* ------------------------------------------------------------ header JSON */

/* The header parser: one pass over the bytes with serde_json's grammar
 * (what the reference reader deserializes HashMetadata with), building
 * st_entry records directly. No tree: names and metadata strings go to the
 * file's arena once, shapes to one growing pool, entries to one growing
 * array; duplicate names are found with the one strmap. Errors name the
 * byte they stop at. */
typedef struct hp {
    ckpt_file *f;
    const unsigned char *s; /* the header, N bytes at file offset 8 */
    size_t n, i;
    unsigned depth; /* open arrays/objects */
    st_entry *es;   /* tensors so far */
    size_t count, es_cap;
    uint64_t *dims; /* every shape, concatenated */
    size_t ndims, dims_cap;
    ckpt_strmap names; /* tensor names -> index, for duplicates */
    int seen_metadata;
} hp;

/* serde_json's recursion limit: 128 nested arrays/objects fail. */
#define HEADER_MAX_DEPTH 127

static int syntax(const hp *p, const char *expected) {
    return ckpt_err(CKPT_E_FORMAT, p->f->path, "", 8 + (uint64_t)p->i,
                    "safetensors header is not valid JSON (expected one UTF-8 "
                    "JSON object, unique keys, only whitespace around it): "
                    "expected %s",
                    expected);
}

static int nomem(const hp *p) {
    return ckpt_err(CKPT_E_NOMEM, p->f->path, "", 8 + (uint64_t)p->i, "out of memory");
}

static void ws(hp *p) {
    while (p->i < p->n) {
        unsigned char c = p->s[p->i];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->i++;
    }
}

/* Next non-whitespace byte, or -1 at the end. */
static int peek(hp *p) {
    ws(p);
    return p->i < p->n ? p->s[p->i] : -1;
}

static int expect(hp *p, int c, const char *what) {
    if (peek(p) != c) return syntax(p, what);
    p->i++;
    return 0;
}

static int hex4(hp *p, unsigned *out) {
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
            return syntax(p, "4 hex digits after \\u");
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
static int escape(hp *p, char *o) {
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    if (p->i >= p->n) return syntax(p, "an escape after \\"), -1;
    unsigned char c = p->s[p->i++];
    if (c != 'u') {
        const char *hit = c ? strchr(from, c) : NULL;
        if (!hit) {
            p->i--;
            return syntax(p, "one of \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u"), -1;
        }
        if (o) o[0] = to[hit - from];
        return 1;
    }
    unsigned cp, lo;
    if (hex4(p, &cp)) return -1;
    if (cp >= 0xDC00 && cp <= 0xDFFF)
        return syntax(p, "a high surrogate before a low surrogate"), -1;
    if (cp >= 0xD800 && cp <= 0xDBFF) {
        if (p->i + 2 > p->n || p->s[p->i] != '\\' || p->s[p->i + 1] != 'u')
            return syntax(p, "a low surrogate \\uDC00-\\uDFFF after a high one"), -1;
        p->i += 2;
        if (hex4(p, &lo)) return -1;
        if (lo < 0xDC00 || lo > 0xDFFF)
            return syntax(p, "a low surrogate \\uDC00-\\uDFFF after a high one"), -1;
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    }
    if (cp == 0) return syntax(p, "no \\u0000 (names and metadata are C strings)"), -1;
    return o ? (int)put_utf8(o, cp) : 4;
}

/* A string at p->i (the opening quote). Returns its decoded text: a
 * pointer into the header when it has no escapes (*len bytes, not
 * NUL-terminated), else into `scratch` (cap bytes; longer text is
 * truncated but still checked, and *len is the full length). With
 * `keep`, the text is copied to the arena NUL-terminated and that copy
 * returned. NULL on error (recorded). */
static const char *string(hp *p, char *scratch, size_t cap, int keep, size_t *len) {
    if (peek(p) != '"') return syntax(p, "a string"), NULL;
    size_t start = ++p->i;
    int high = 0;
    while (p->i < p->n) {
        unsigned char c = p->s[p->i];
        if (c == '"' || c == '\\' || c < 0x20) break;
        high |= c & 0x80;
        p->i++;
    }
    if (p->i >= p->n) return syntax(p, "a closing quote"), NULL;
    if (high && !ckpt_utf8_check(p->s + start, p->i - start, 0)) {
        p->i = start;
        return syntax(p, "UTF-8 text in the string"), NULL;
    }
    if (p->s[p->i] == '"') { /* no escapes: the common case */
        *len = p->i - start;
        p->i++;
        const char *text = (const char *)p->s + start;
        if (!keep) return text;
        char *copy = ckpt_arena_strndup(&p->f->arena, text, *len);
        return copy ? copy : (nomem(p), NULL);
    }
    /* escapes: decoded text is never longer than the rest of the header */
    char *out = scratch;
    if (keep) {
        out = ckpt_arena_alloc_raw(&p->f->arena, p->n - start + 1);
        if (!out) return nomem(p), NULL;
        cap = p->n - start;
    }
    size_t o = p->i - start;
    if (o && cap) memcpy(out, p->s + start, o < cap ? o : cap); /* out may be NULL */
    char tmp[4];
    for (;;) {
        size_t run = p->i;
        while (p->i < p->n) {
            unsigned char c = p->s[p->i];
            if (c == '"' || c == '\\' || c < 0x20) break;
            high |= c & 0x80;
            p->i++;
        }
        if (p->i >= p->n) return syntax(p, "a closing quote"), NULL;
        if (high && !ckpt_utf8_check(p->s + run, p->i - run, 0)) {
            p->i = run;
            return syntax(p, "UTF-8 text in the string"), NULL;
        }
        for (size_t k = run; k < p->i; k++, o++)
            if (o < cap) out[o] = (char)p->s[k];
        unsigned char c = p->s[p->i];
        if (c == '"') break;
        if (c < 0x20) return syntax(p, "no control character in a string"), NULL;
        p->i++;
        int w = escape(p, tmp);
        if (w < 0) return NULL;
        for (int k = 0; k < w; k++, o++)
            if (o < cap) out[o] = tmp[k];
    }
    p->i++;
    *len = o;
    if (keep) out[o] = '\0';
    return cap ? out : (const char *)p->s + start; /* only checked */
}

/* A number at p->i. Returns 0 with *out set for an integer in [0, 2^64);
 * 1 for any other valid JSON number (negative, -0, fraction, exponent, or
 * too large: serde_json reads those as i64 or f64, which usize refuses);
 * -1 with the error recorded when it is not a number. */
static int number(hp *p, uint64_t *out) {
    int c = peek(p), other = 0;
    if (c == '-') other = 1, p->i++;
    if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9') return syntax(p, "a number"), -1;
    uint64_t v = 0;
    if (p->s[p->i] == '0') {
        p->i++;
        if (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9')
            return syntax(p, "no leading zero in a number"), -1;
    } else {
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
            unsigned d = (unsigned)(p->s[p->i++] - '0');
            if (v > (UINT64_MAX - d) / 10)
                other = 1;
            else
                v = v * 10 + d;
        }
    }
    if (p->i < p->n && p->s[p->i] == '.') {
        other = 1;
        p->i++;
        if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9')
            return syntax(p, "a digit after the decimal point"), -1;
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    }
    if (p->i < p->n && (p->s[p->i] == 'e' || p->s[p->i] == 'E')) {
        other = 1;
        p->i++;
        if (p->i < p->n && (p->s[p->i] == '+' || p->s[p->i] == '-')) p->i++;
        if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9')
            return syntax(p, "a digit in the exponent"), -1;
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    }
    *out = v;
    return other;
}

static int literal(hp *p, const char *word) {
    size_t len = strlen(word);
    if (p->n - p->i < len || memcmp(p->s + p->i, word, len) != 0) return syntax(p, word);
    p->i += len;
    return 0;
}

static int open_nested(hp *p) {
    if (++p->depth > HEADER_MAX_DEPTH)
        return ckpt_err(CKPT_E_FORMAT, p->f->path, "", 8 + (uint64_t)p->i,
                        "safetensors header nests arrays and objects more than "
                        "%d deep (the reference reader's recursion limit)",
                        HEADER_MAX_DEPTH);
    p->i++;
    return 0;
}

/* After an element of a container closed by `close`: 1 when closed, 0
 * when a comma announces the next element, -1 on error. */
static int next(hp *p, int close) {
    int c = peek(p);
    if (c == close) {
        p->i++;
        p->depth--;
        return 1;
    }
    if (c == ',') {
        p->i++;
        return 0;
    }
    return syntax(p, close == '}' ? "',' or '}'" : "',' or ']'"), -1;
}

/* Skips any value (serde's IgnoredAny: an unknown field of TensorInfo). */
static int skip_value(hp *p) {
    uint64_t u;
    size_t len;
    int c = peek(p), rc;
    switch (c) {
    case '"': return string(p, NULL, 0, 0, &len) ? 0 : -1;
    case 't': return literal(p, "true");
    case 'f': return literal(p, "false");
    case 'n': return literal(p, "null");
    case '[':
        if (open_nested(p)) return -1;
        if (peek(p) == ']') {
            p->i++;
            p->depth--;
            return 0;
        }
        do {
            if (skip_value(p)) return -1;
        } while ((rc = next(p, ']')) == 0);
        return rc < 0 ? -1 : 0;
    case '{':
        if (open_nested(p)) return -1;
        if (peek(p) == '}') {
            p->i++;
            p->depth--;
            return 0;
        }
        do {
            if (!string(p, NULL, 0, 0, &len) || expect(p, ':', "':'") || skip_value(p)) return -1;
        } while ((rc = next(p, '}')) == 0);
        return rc < 0 ? -1 : 0;
    default: return number(p, &u) < 0 ? -1 : 0;
    }
}

/* "__metadata__": null (serde Option: absent) or an object of strings. */
static int read_metadata(hp *p) {
    ckpt_file *f = p->f;
    size_t len;
    if (peek(p) == 'n') return literal(p, "null");
    if (peek(p) != '{') {
        int rc = skip_value(p);
        return rc ? rc
                  : ckpt_err(CKPT_E_FORMAT, f->path, "", 8,
                             "\"__metadata__\" must be an object of string "
                             "values (the key is reserved for metadata, not a "
                             "tensor name)");
    }
    if (open_nested(p)) return -1;
    size_t cap = 0;
    if (peek(p) == '}')
        p->i++, p->depth--;
    else
        for (;;) {
            const char *key = string(p, NULL, 0, 1, &len);
            if (!key || expect(p, ':', "':'")) return -1;
            if (peek(p) != '"') {
                int rc = skip_value(p);
                return rc ? rc
                          : ckpt_err(CKPT_E_FORMAT, f->path, "", 8,
                                     "\"__metadata__\" value of \"%s\" must be a "
                                     "string (the key \"__metadata__\" is reserved "
                                     "for metadata, not a tensor name)",
                                     key);
            }
            const char *val = string(p, NULL, 0, 1, &len);
            if (!val) return -1;
            size_t vcap = cap;
            if (ckpt_arena_grow(&f->arena, (void **)&f->meta_keys, &cap, f->nmeta + 1,
                                sizeof(char *)) ||
                ckpt_arena_grow(&f->arena, (void **)&f->meta_vals, &vcap, f->nmeta + 1,
                                sizeof(char *)))
                return nomem(p);
            /* HashMap<String, String>: a repeated key keeps the last value */
            size_t k = 0;
            while (k < f->nmeta && strcmp(f->meta_keys[k], key) != 0) k++;
            f->meta_keys[k] = (char *)key;
            f->meta_vals[k] = (char *)val;
            if (k == f->nmeta) f->nmeta++;
            int rc = next(p, '}');
            if (rc) {
                if (rc < 0) return -1;
                break;
            }
        }
    f->has_metadata = 1;
    return 0;
}

/* A non-negative integer element of shape or data_offsets; `bad` is the
 * schema error for any other value. */
static int uint_elem(hp *p, uint64_t *out, const char *name, const char *bad, size_t i) {
    int c = peek(p);
    int rc = (c == '-' || (c >= '0' && c <= '9')) ? number(p, out) : 2;
    if (rc < 0) return -1;
    if (rc == 2 && skip_value(p)) return -1;
    if (rc) return ckpt_err(CKPT_E_FORMAT, p->f->path, "", 8, bad, name, i);
    return 0;
}

static int read_shape(hp *p, st_entry *e) {
    static const char bad[] = "tensor \"%s\": shape[%zu] is not a non-negative "
                              "integer";
    if (peek(p) != '[') {
        if (skip_value(p)) return -1;
        return ckpt_err(CKPT_E_FORMAT, p->f->path, "", 8,
                        "tensor \"%s\": expected \"shape\" to be an array of "
                        "non-negative integers",
                        e->name);
    }
    if (open_nested(p)) return -1;
    uint32_t max_ndim =
        p->f->opts.limits.max_ndim < CKPT_MAX_NDIM ? p->f->opts.limits.max_ndim : CKPT_MAX_NDIM;
    e->shape = p->ndims;
    size_t ndim = 0;
    int rc = 0;
    if (peek(p) == ']')
        p->i++, p->depth--;
    else
        while (rc == 0) {
            if (ndim == max_ndim)
                return ckpt_err(CKPT_E_LIMIT, p->f->path, "", 8,
                                "tensor \"%s\" has more than %u dimensions, limit "
                                "max_ndim is %u",
                                e->name, max_ndim, max_ndim);
            if (p->ndims == p->dims_cap) {
                size_t cap = p->dims_cap ? 2 * p->dims_cap : 1024;
                uint64_t *d = ckpt_realloc(p->dims, cap * sizeof *d);
                if (!d) return nomem(p);
                p->dims = d, p->dims_cap = cap;
            }
            if (uint_elem(p, &p->dims[p->ndims], e->name, bad, ndim)) return -1;
            p->ndims++, ndim++;
            if ((rc = next(p, ']')) < 0) return -1;
        }
    e->ndim = (uint32_t)ndim;
    return 0;
}

static int read_offsets(hp *p, st_entry *e) {
    static const char bad[] = "tensor \"%s\": expected \"data_offsets\" to be "
                              "[begin, end], two non-negative integers%.0zu";
    uint64_t *slot[2] = {&e->begin, &e->end};
    size_t k = 0;
    int rc = 0;
    if (peek(p) != '[') {
        if (skip_value(p)) return -1;
        return ckpt_err(CKPT_E_FORMAT, p->f->path, "", 8, bad, e->name, k);
    }
    if (open_nested(p)) return -1;
    if (peek(p) == ']') return ckpt_err(CKPT_E_FORMAT, p->f->path, "", 8, bad, e->name, k);
    while (rc == 0) {
        uint64_t v;
        if (uint_elem(p, &v, e->name, bad, k)) return -1;
        if (k == 2) return ckpt_err(CKPT_E_FORMAT, p->f->path, "", 8, bad, e->name, k);
        *slot[k++] = v;
        if ((rc = next(p, ']')) < 0) return -1;
    }
    if (k != 2) return ckpt_err(CKPT_E_FORMAT, p->f->path, "", 8, bad, e->name, k);
    return 0;
}

/* One tensor entry (TensorInfo): dtype, shape and data_offsets, each
 * exactly once; unknown fields are skipped, as serde does. */
static int read_entry(hp *p, st_entry *e) {
    const char *path = p->f->path;
    if (peek(p) != '{') {
        if (skip_value(p)) return -1;
        return ckpt_err(CKPT_E_FORMAT, path, "", 8,
                        "tensor \"%s\": expected an object with dtype, shape "
                        "and data_offsets",
                        e->name);
    }
    if (open_nested(p)) return -1;
    static const char *const fields[3] = {"dtype", "shape", "data_offsets"};
    int seen[3] = {0, 0, 0}, rc = 0;
    if (peek(p) == '}')
        p->i++, p->depth--;
    else
        while (rc == 0) {
            char key[16], dt[16];
            size_t len;
            const char *k = string(p, key, sizeof key, 0, &len);
            if (!k || expect(p, ':', "':'")) return -1;
            int field = 3;
            for (int j = 0; j < 3; j++)
                if (len == strlen(fields[j]) && memcmp(k, fields[j], len) == 0) field = j;
            if (field < 3 && seen[field])
                return ckpt_err(CKPT_E_FORMAT, path, "", 8 + (uint64_t)p->i,
                                "tensor \"%s\": duplicate field \"%s\"", e->name, fields[field]);
            if (field < 3) seen[field] = 1;
            if (field == 0) {
                if (peek(p) != '"') {
                    if (skip_value(p)) return -1;
                    return ckpt_err(CKPT_E_FORMAT, path, "", 8,
                                    "tensor \"%s\": expected \"dtype\" to be a "
                                    "string",
                                    e->name);
                }
                const char *d = string(p, dt, sizeof dt, 0, &len);
                if (!d) return -1;
                size_t m = len < sizeof dt ? len : sizeof dt - 1;
                memmove(dt, d, m);
                dt[m] = '\0';
                e->dtype = len < sizeof dt ? ckpt_dtype_from_name(dt) : CKPT_DT_UNKNOWN;
                if (!is_safetensors_dtype(e->dtype))
                    return ckpt_err(CKPT_E_FORMAT, path, "", 8,
                                    "tensor \"%s\": unknown dtype \"%.*s\" "
                                    "(expected a safetensors dtype such as F32, "
                                    "BF16, I64, F8_E4M3)",
                                    e->name, (int)m, dt);
            } else if (field == 1) {
                if (read_shape(p, e)) return -1;
            } else if (field == 2) {
                if (read_offsets(p, e)) return -1;
            } else if (skip_value(p)) {
                return -1;
            }
            if ((rc = next(p, '}')) < 0) return -1;
        }
    for (int j = 0; j < 3; j++)
        if (!seen[j])
            return ckpt_err(CKPT_E_FORMAT, path, "", 8,
                            j == 0   ? "tensor \"%s\": expected \"dtype\" to be a string"
                            : j == 1 ? "tensor \"%s\": expected \"shape\" to be an "
                                       "array of non-negative integers"
                                     : "tensor \"%s\": expected \"data_offsets\" to "
                                       "be [begin, end], two non-negative integers",
                            e->name);
    return 0;
}

/* The whole header: one object of tensor entries and "__metadata__". */
static int parse_header(hp *p) {
    ckpt_file *f = p->f;
    if (peek(p) != '{') return syntax(p, "'{' (the header is one JSON object)");
    if (open_nested(p)) return -1;
    int rc = 0;
    if (peek(p) == '}')
        p->i++, p->depth--;
    else
        while (rc == 0) {
            size_t key_at = p->i, len;
            const char *name = string(p, NULL, 0, 1, &len);
            if (!name || expect(p, ':', "':'")) return -1;
            if (strcmp(name, "__metadata__") == 0 && len == 12) {
                if (p->seen_metadata) {
                    p->i = key_at;
                    return syntax(p, "unique keys (duplicate \"__metadata__\")");
                }
                p->seen_metadata = 1;
                if (read_metadata(p)) return -1;
            } else {
                if (p->count == f->opts.limits.max_tensors)
                    return ckpt_err(CKPT_E_LIMIT, f->path, "", 8 + (uint64_t)key_at,
                                    "header declares more than %" PRIu64 " tensors, "
                                    "limit max_tensors is %" PRIu64,
                                    f->opts.limits.max_tensors, f->opts.limits.max_tensors);
                ckpt_strmap_slot *slot;
                int put = ckpt_strmap_put(&p->names, name, len, p->count, &slot);
                if (put == CKPT_E_NOMEM) return nomem(p);
                if (put == 0) {
                    p->i = key_at;
                    return ckpt_err(CKPT_E_FORMAT, f->path, "", 8 + (uint64_t)key_at,
                                    "safetensors header is not valid JSON (expected "
                                    "one UTF-8 JSON object, unique keys, only "
                                    "whitespace around it): duplicate key \"%s\"",
                                    name);
                }
                if (p->count == p->es_cap) {
                    size_t cap = p->es_cap ? 2 * p->es_cap : 256;
                    st_entry *es = ckpt_realloc(p->es, cap * sizeof *es);
                    if (!es) return nomem(p);
                    p->es = es, p->es_cap = cap;
                }
                st_entry *e = &p->es[p->count];
                memset(e, 0, sizeof *e);
                e->name = name;
                e->index = p->count;
                if (read_entry(p, e)) return -1;
                p->count++;
            }
            if ((rc = next(p, '}')) < 0) return -1;
        }
    if (peek(p) != -1) return syntax(p, "only whitespace after the header object");
    return 0;
}

static int by_offsets(const void *a, const void *b) {
    const st_entry *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* Row-major strides the way torch computes them (a zero dimension counts
 * as 1), so views compare equal across formats. Only a zero-element tensor
 * can overflow here (otherwise every suffix product is <= numel); torch
 * refuses those shapes too ("Stride calculation overflowed"). */
static int contiguous_strides(uint32_t ndim, const uint64_t *shape, uint64_t *stride) {
    uint64_t s = 1;
    for (uint32_t d = ndim; d-- > 0;) {
        stride[d] = s;
        if (d > 0 && ckpt_mul_overflow(s, shape[d] ? shape[d] : 1, &s)) return -1;
    }
    return 0;
}

/* e's dimensions in the pool; a 0-d tensor has none, and the pool of a
 * file whose tensors are all 0-d is NULL (no pointer arithmetic on it). */
static const uint64_t *entry_shape(const uint64_t *dims, const st_entry *e) {
    return e->ndim ? dims + e->shape : NULL;
}

/* Metadata::validate (FORMATS.md §1.4 step 4-5) over entries sorted by
 * data_offsets: they must tile the byte buffer from 0 with no gap, overlap
 * or alias, each exactly numel x bits / 8 bytes, and the buffer must end
 * where the file ends. */
static int validate(ckpt_file *f, uint64_t n, const st_entry *es, size_t count,
                    const uint64_t *dims) {
    const char *path = f->path;
    uint64_t data_len = (uint64_t)f->map_size - 8 - n;
    uint64_t start = 0;
    for (size_t i = 0; i < count; i++) {
        const st_entry *e = &es[i];
        uint64_t off = data_offset(n, e->begin);
        if (e->begin != start || e->end < e->begin)
            return ckpt_err(CKPT_E_FORMAT, path, "", off,
                            "tensor \"%s\": invalid data_offsets [%" PRIu64 ", %" PRIu64
                            "], expected [%" PRIu64 ", end >= "
                            "begin] (tensors must tile the data from 0 without "
                            "gaps, overlaps or shared bytes)",
                            e->name, e->begin, e->end, start);
        const uint64_t *shape = entry_shape(dims, e);
        uint64_t numel = 1, nbits;
        for (uint32_t d = 0; d < e->ndim; d++)
            if (ckpt_mul_overflow(numel, shape[d], &numel))
                return ckpt_err(CKPT_E_FORMAT, path, "", off,
                                "tensor \"%s\": shape product overflows 64 "
                                "bits at dimension %u",
                                e->name, d);
        if (ckpt_mul_overflow(numel, ckpt_dtype_bits(e->dtype), &nbits))
            return ckpt_err(CKPT_E_FORMAT, path, "", off,
                            "tensor \"%s\": %" PRIu64 " elements of %s "
                            "overflow 64 bits",
                            e->name, numel, ckpt_dtype_name(e->dtype));
        if (nbits % 8)
            return ckpt_err(CKPT_E_FORMAT, path, "", off,
                            "tensor \"%s\": misaligned, %" PRIu64 " elements "
                            "of %s are %" PRIu64 " bits, expected a whole "
                            "number of bytes",
                            e->name, numel, ckpt_dtype_name(e->dtype), nbits);
        if (e->end - e->begin != nbits / 8)
            return ckpt_err(CKPT_E_FORMAT, path, "", off,
                            "tensor \"%s\": data_offsets [%" PRIu64 ", %" PRIu64 "] span %" PRIu64
                            " bytes, expected %" PRIu64 " (%" PRIu64 " elements of %s)",
                            e->name, e->begin, e->end, e->end - e->begin, nbits / 8, numel,
                            ckpt_dtype_name(e->dtype));
        uint64_t stride[CKPT_MAX_NDIM];
        if (contiguous_strides(e->ndim, shape, stride))
            return ckpt_err(CKPT_E_FORMAT, path, "", off, "tensor \"%s\": strides overflow 64 bits",
                            e->name);
        if (e->end > data_len)
            return ckpt_err(CKPT_E_TRUNCATED, path, "", off,
                            "truncated: tensor \"%s\": data ends at byte %" PRIu64
                            " of the buffer, but the file holds only %" PRIu64
                            " bytes after the header",
                            e->name, e->end, data_len);
        start = e->end;
    }
    if (start != data_len)
        return ckpt_err(CKPT_E_FORMAT, path, "", data_offset(n, start),
                        "%" PRIu64 " bytes after the last tensor, expected the "
                        "file to end at byte %" PRIu64 " (trailing data is "
                        "refused: polyglot files)",
                        data_len - start, data_offset(n, start));
    return 0;
}

/* Builds f->root from validated entries; the name strings become the
 * keys' text as they are (arena copies already). */
static int build_root(ckpt_file *f, uint64_t n, const st_entry *es, size_t count,
                      const uint64_t *dims) {
    f->root = ckpt_value_new(&f->arena, CKPT_KIND_DICT);
    ckpt_value **keys = ckpt_arena_array(&f->arena, count ? count : 1, sizeof *keys);
    ckpt_value **vals = ckpt_arena_array(&f->arena, count ? count : 1, sizeof *vals);
    if (!f->root || !keys || !vals) return ckpt_err(CKPT_E_NOMEM, f->path, "", 8, "out of memory");
    f->root->u.dict.keys = keys;
    f->root->u.dict.vals = vals;
    f->root->u.dict.cap = count ? count : 1;
    for (size_t i = 0; i < count; i++) {
        const st_entry *e = &es[i];
        const uint64_t *shape = entry_shape(dims, e);
        uint64_t off = 8 + n + e->begin; /* <= map_size: validated */
        uint64_t stride[CKPT_MAX_NDIM];
        (void)contiguous_strides(e->ndim, shape, stride); /* validated */
        ckpt_storage *st = ckpt_arena_alloc(&f->arena, sizeof *st);
        ckpt_value *key = ckpt_value_new(&f->arena, CKPT_KIND_STR);
        if (!st || !key) return ckpt_err(CKPT_E_NOMEM, f->path, "", off, "out of memory");
        key->u.s.p = (char *)e->name;
        key->u.s.len = strlen(e->name);
        st->dtype = e->dtype;
        st->nbytes = e->end - e->begin;
        st->data = f->map + off;
        st->key = e->name;
        st->member = "";
        st->file_offset = off;
        ckpt_value *tv;
        int rc = ckpt_tensor_new(&tv, &f->arena, st, e->dtype, e->ndim, shape, stride, 0, f->path,
                                 "", off);
        if (rc) return rc;
        keys[i] = key;
        vals[i] = tv;
        f->root->u.dict.n = i + 1;
    }
    return 0;
}

/* ---------------------------------------------------------------- aliases */

/* A root entry, sorted by name for alias lookups. */
typedef struct named {
    const char *name;
    ckpt_value *value;
} named;

static int by_name(const void *a, const void *b) {
    return strcmp(((const named *)a)->name, ((const named *)b)->name);
}

/* Root dict value under `name`; NULL if none. O(log n). */
static ckpt_value *find_key(const named *sorted, size_t n, const char *name) {
    named probe = {name, NULL};
    const named *hit = bsearch(&probe, sorted, n, sizeof *sorted, by_name);
    return hit ? hit->value : NULL;
}

/* ckpt's safetensors writer stores a tensor reachable under several names
 * once and lists the other names in __metadata__ "ckpt.aliases" (JSON text
 * {"alias": "stored name", ...}; ckpt.h, "write"). Each alias becomes one
 * more root entry for the same tensor, so the file lists it under every
 * name as the original checkpoint did. A malformed entry is a format error:
 * the file would otherwise silently lose names. */
static int restore_aliases(ckpt_file *f) {
    const char *text = NULL;
    for (size_t i = 0; i < f->nmeta; i++)
        if (strcmp(f->meta_keys[i], "ckpt.aliases") == 0) text = f->meta_vals[i];
    if (!text) return 0;
    json_error_t err;
    json_t *doc = json_loads(text, JSON_REJECT_DUPLICATES, &err);
    if (!json_is_object(doc)) {
        json_decref(doc);
        return ckpt_err(CKPT_E_FORMAT, f->path, "", 8,
                        "__metadata__ \"ckpt.aliases\" must be a JSON object of "
                        "alias names to stored tensor names");
    }
    ckpt_value *root = f->root;
    size_t n = root->u.dict.n;
    named *sorted = ckpt_arena_array(&f->arena, n ? n : 1, sizeof *sorted);
    int rc = sorted ? 0 : ckpt_err(CKPT_E_NOMEM, f->path, "", 8, "out of memory");
    if (!rc) {
        for (size_t i = 0; i < n; i++)
            sorted[i] = (named){root->u.dict.keys[i]->u.s.p, root->u.dict.vals[i]};
        qsort(sorted, n, sizeof *sorted, by_name);
    }
    const char *alias;
    json_t *target;
    json_object_foreach(doc, alias, target) {
        if (rc) break;
        ckpt_value *t =
            json_is_string(target) ? find_key(sorted, n, json_string_value(target)) : NULL;
        ckpt_value *key = NULL;
        if (!t || find_key(sorted, n, alias) || strcmp(alias, "__metadata__") == 0)
            rc = ckpt_err(CKPT_E_FORMAT, f->path, "", 8,
                          "__metadata__ \"ckpt.aliases\": alias \"%s\" must be a new "
                          "name for a stored tensor",
                          alias);
        else if (!(key = ckpt_value_new_str(&f->arena, CKPT_KIND_STR, alias, strlen(alias))) ||
                 ckpt_value_dict_set(&f->arena, root, key, t))
            rc = ckpt_err(CKPT_E_NOMEM, f->path, "", 8, "out of memory");
    }
    json_decref(doc);
    return rc;
}

/* Reads f->map as a safetensors file; with `build`, f->root gets the
 * tensors, else only the rules are checked (ckpt.aliases, which needs the
 * names, builds them anyway). */
static int read_file(ckpt_file *f, int build) {
    if (f->map_size < 8)
        return ckpt_err(CKPT_E_TRUNCATED, f->path, "", 0,
                        "file is %zu bytes, expected at least 8 (the "
                        "safetensors header length)",
                        f->map_size);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | f->map[i];
    /* bound N before anything is allocated from it */
    if (n > f->opts.limits.max_header_bytes)
        return ckpt_err(CKPT_E_LIMIT, f->path, "", 0,
                        "header length %" PRIu64 " exceeds the limit "
                        "max_header_bytes = %" PRIu64,
                        n, f->opts.limits.max_header_bytes);
    if (n > f->map_size - 8)
        return ckpt_err(CKPT_E_TRUNCATED, f->path, "", 0,
                        "header length %" PRIu64 " runs past the end of the "
                        "file (%zu bytes)",
                        n, f->map_size);
    hp p = {.f = f, .s = f->map + 8, .n = (size_t)n};
    int rc = parse_header(&p) ? ckpt_error_last()->code : 0;
    if (rc == 0) {
        if (p.count > 1) qsort(p.es, p.count, sizeof *p.es, by_offsets);
        rc = validate(f, n, p.es, p.count, p.dims);
    }
    for (size_t i = 0; !build && rc == 0 && i < f->nmeta; i++)
        build = strcmp(f->meta_keys[i], "ckpt.aliases") == 0;
    if (rc == 0 && build) rc = build_root(f, n, p.es, p.count, p.dims);
    ckpt_free(p.es);
    ckpt_free(p.dims);
    ckpt_strmap_free(&p.names);
    if (rc == 0 && build) {
        f->format = CKPT_FORMAT_SAFETENSORS;
        rc = restore_aliases(f);
    }
    return rc;
}

int ckpt_safetensors_read(ckpt_file *f) { return read_file(f, 1); }

int ckpt_safetensors_check(const uint8_t *p, size_t n, const char *path,
                           const ckpt_limits *limits) {
    ckpt_file f;
    memset(&f, 0, sizeof f);
    f.path = path;
    f.map = p;
    f.map_size = n;
    f.opts.limits = *limits;
    int rc = read_file(&f, 0);
    ckpt_arena_free(&f.arena);
    return rc;
}
