/* index_json.c - a sharded index read with Python's json rules
 * (index_json.h). Follows CPython's Lib/json/decoder.py and
 * Modules/_json.c: whitespace is " \t\n\r", numbers match
 * -?(0|[1-9]\d*)(\.\d+)?([eE][-+]?\d+)? or NaN, Infinity, -Infinity,
 * strings are strict (no raw character below 0x20), objects keep the last
 * value of a repeated key. */
#include "format/index_json.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/utf8.h"

typedef struct pair {
    char *key;
    size_t klen;
    size_t seq;             /* order of appearance */
    ckpt_index_shard value; /* name NULL: not a string */
} pair;

typedef struct reader {
    const uint8_t *p;
    size_t n, i;
    ckpt_arena *a;
    const char *file;
    uint32_t max_depth;
    pair *pairs; /* of the weight_map object being read */
    size_t npairs, cap;
    size_t meta_at, meta_end; /* the last top-level "metadata" value */
} reader;

static int bad(const reader *r, size_t at, const char *what) {
    return ckpt_err(CKPT_E_FORMAT, r->file, NULL, at, "not JSON as Python's json reads it: %s",
                    what);
}

static int nomem(const reader *r) {
    return ckpt_err(CKPT_E_NOMEM, r->file, NULL, r->i, "out of memory reading the index");
}

static void skip_ws(reader *r) {
    while (r->i < r->n &&
           (r->p[r->i] == ' ' || r->p[r->i] == '\t' || r->p[r->i] == '\n' || r->p[r->i] == '\r'))
        r->i++;
}

static int literal(reader *r, const char *word) {
    size_t k = strlen(word);
    if (r->n - r->i < k || memcmp(r->p + r->i, word, k) != 0) return 0;
    r->i += k;
    return 1;
}

static int hex4(const uint8_t *p, uint32_t *out) {
    uint32_t v = 0;
    for (int k = 0; k < 4; k++) {
        uint8_t c = p[k];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0) return -1;
        v = v << 4 | (uint32_t)d;
    }
    *out = v;
    return 0;
}

static size_t put_utf8(char *o, uint32_t cp) {
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xc0 | cp >> 6);
        o[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) { /* lone surrogates too, as Python's str holds them */
        o[0] = (char)(0xe0 | cp >> 12);
        o[1] = (char)(0x80 | (cp >> 6 & 0x3f));
        o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | cp >> 18);
    o[1] = (char)(0x80 | (cp >> 12 & 0x3f));
    o[2] = (char)(0x80 | (cp >> 6 & 0x3f));
    o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* A string at r->i (its opening quote), decoded into the arena when out
 * is not NULL. The decoded form is never longer than the raw one. */
static int string(reader *r, char **out, size_t *len, int *surrogate) {
    size_t start = r->i++, end = r->i;
    while (end < r->n && r->p[end] != '"') {
        if (r->p[end] < 0x20) return bad(r, end, "invalid control character in a string");
        end += r->p[end] == '\\' ? 2 : 1;
    }
    if (end >= r->n) return bad(r, start, "unterminated string");
    if (!ckpt_utf8_check(r->p + start + 1, end - start - 1, 0))
        return bad(r, start, "a string that is not UTF-8 (the file is decoded as UTF-8)");
    char *o = out ? ckpt_arena_alloc(r->a, end - start) : NULL;
    if (out && !o) return nomem(r);
    size_t k = 0;
    int surr = 0;
    while (r->i < end) {
        uint8_t c = r->p[r->i];
        if (c != '\\') {
            if (o) o[k] = (char)c;
            k++;
            r->i++;
            continue;
        }
        uint8_t e = r->p[r->i + 1];
        const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
        const char *hit = e ? strchr(from, e) : NULL;
        if (hit) {
            if (o) o[k] = to[hit - from];
            k++;
            r->i += 2;
            continue;
        }
        uint32_t cp, lo;
        if (e != 'u') return bad(r, r->i, "invalid \\escape in a string");
        if (end - r->i < 6 || hex4(r->p + r->i + 2, &cp))
            return bad(r, r->i + 1, "invalid \\uXXXX escape in a string");
        r->i += 6;
        if (cp >= 0xd800 && cp <= 0xdbff && end - r->i >= 6 && r->p[r->i] == '\\' &&
            r->p[r->i + 1] == 'u' && hex4(r->p + r->i + 2, &lo) == 0 && lo >= 0xdc00 &&
            lo <= 0xdfff) {
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            r->i += 6;
        } else if (cp >= 0xd800 && cp <= 0xdfff) {
            surr = 1;
        }
        char tmp[4];
        size_t m = put_utf8(o ? o + k : tmp, cp);
        k += m;
    }
    r->i = end + 1;
    if (o) o[k] = '\0';
    if (out) *out = o;
    if (len) *len = k;
    if (surrogate) *surrogate = surr;
    return 0;
}

static int digits(reader *r) {
    size_t s = r->i;
    while (r->i < r->n && r->p[r->i] >= '0' && r->p[r->i] <= '9') r->i++;
    return r->i > s;
}

static int number(reader *r) {
    size_t start = r->i;
    if (r->p[r->i] == '-') {
        r->i++;
        if (literal(r, "Infinity")) return 0;
    }
    size_t from = r->i;
    if (r->i < r->n && r->p[r->i] == '0')
        r->i++; /* "01" ends at "0": the "1" is then unexpected */
    else if (!digits(r))
        return bad(r, start, "expecting a value");
    size_t mark = r->i, int_digits = r->i - from;
    if (r->i < r->n && r->p[r->i] == '.') {
        r->i++;
        if (!digits(r)) r->i = mark; /* "1." is "1" followed by "." */
    }
    size_t frac = r->i;
    if (r->i < r->n && (r->p[r->i] == 'e' || r->p[r->i] == 'E')) {
        r->i++;
        if (r->i < r->n && (r->p[r->i] == '+' || r->p[r->i] == '-')) r->i++;
        if (!digits(r)) r->i = frac;
    }
    /* an int (no fraction, no exponent) goes through int(): more than
     * sys.int_info.default_max_str_digits digits is a ValueError */
    if (r->i == mark && int_digits > 4300)
        return bad(r, start, "an integer of more than 4300 digits (int() refuses it)");
    return 0;
}

static int value(reader *r, uint32_t depth);

enum { PLAIN, TOP, WEIGHT_MAP };

static int add_pair(reader *r, uint32_t depth, char *key, size_t klen, size_t vstart) {
    if (ckpt_arena_grow(r->a, (void **)&r->pairs, &r->cap, r->npairs + 1, sizeof *r->pairs))
        return nomem(r);
    pair *p = &r->pairs[r->npairs];
    *p = (pair){key, klen, r->npairs, {NULL, 0, key, klen, 0, vstart, 0}};
    r->npairs++;
    if (vstart >= r->n || r->p[vstart] != '"') return value(r, depth);
    char *name = NULL;
    int rc = string(r, &name, &p->value.len, &p->value.surrogate);
    p->value.name = name;
    return rc;
}

/* An object at r->i. TOP: remembers the last "weight_map"; WEIGHT_MAP:
 * collects its pairs. */
static int object(reader *r, uint32_t depth, int role, int *has_weight_map) {
    r->i++;
    skip_ws(r);
    if (r->i < r->n && r->p[r->i] == '}') {
        r->i++;
        return 0;
    }
    for (;;) {
        if (r->i >= r->n || r->p[r->i] != '"')
            return bad(r, r->i, "expecting a property name enclosed in double quotes");
        char *key = NULL;
        size_t klen = 0;
        int rc = string(r, role == PLAIN ? NULL : &key, &klen, NULL);
        if (rc) return rc;
        skip_ws(r);
        if (r->i >= r->n || r->p[r->i] != ':') return bad(r, r->i, "expecting ':' delimiter");
        r->i++;
        skip_ws(r);
        if (role == WEIGHT_MAP) {
            rc = add_pair(r, depth + 1, key, klen, r->i);
        } else if (role == TOP && klen == 10 && memcmp(key, "weight_map", 10) == 0) {
            /* the last "weight_map" wins, as in a Python dict */
            r->npairs = 0;
            *has_weight_map = r->i < r->n && r->p[r->i] == '{';
            rc = *has_weight_map ? object(r, depth + 1, WEIGHT_MAP, NULL) : value(r, depth + 1);
        } else if (role == TOP && klen == 8 && memcmp(key, "metadata", 8) == 0) {
            r->meta_at = r->i;
            rc = value(r, depth + 1);
            r->meta_end = r->i;
        } else {
            rc = value(r, depth + 1);
        }
        if (rc) return rc;
        skip_ws(r);
        if (r->i < r->n && r->p[r->i] == '}') {
            r->i++;
            return 0;
        }
        if (r->i >= r->n || r->p[r->i] != ',') return bad(r, r->i, "expecting ',' delimiter");
        r->i++;
        skip_ws(r);
    }
}

static int array(reader *r, uint32_t depth) {
    r->i++;
    skip_ws(r);
    if (r->i < r->n && r->p[r->i] == ']') {
        r->i++;
        return 0;
    }
    for (;;) {
        int rc = value(r, depth + 1);
        if (rc) return rc;
        skip_ws(r);
        if (r->i < r->n && r->p[r->i] == ']') {
            r->i++;
            return 0;
        }
        if (r->i >= r->n || r->p[r->i] != ',') return bad(r, r->i, "expecting ',' delimiter");
        r->i++;
        skip_ws(r);
    }
}

static int value(reader *r, uint32_t depth) {
    if (depth > r->max_depth)
        return ckpt_err(CKPT_E_LIMIT, r->file, NULL, r->i, "JSON nested deeper than max_depth (%u)",
                        r->max_depth);
    if (r->i >= r->n) return bad(r, r->i, "expecting a value");
    switch (r->p[r->i]) {
    case '"': return string(r, NULL, NULL, NULL);
    case '{': return object(r, depth, PLAIN, NULL);
    case '[': return array(r, depth);
    default: break;
    }
    if (literal(r, "null") || literal(r, "true") || literal(r, "false") || literal(r, "NaN") ||
        literal(r, "Infinity"))
        return 0;
    if (r->p[r->i] == '-' || (r->p[r->i] >= '0' && r->p[r->i] <= '9')) return number(r);
    return bad(r, r->i, "expecting a value");
}

/* By key, then by appearance. */
static int by_key(const void *pa, const void *pb) {
    const pair *x = pa, *y = pb;
    size_t n = x->klen < y->klen ? x->klen : y->klen;
    int c = memcmp(x->key, y->key, n);
    if (c) return c;
    if (x->klen != y->klen) return x->klen < y->klen ? -1 : 1;
    return (x->seq > y->seq) - (x->seq < y->seq);
}

static int by_order(const void *pa, const void *pb) {
    const ckpt_index_shard *x = pa, *y = pb;
    return (x->order > y->order) - (x->order < y->order);
}

int ckpt_index_read(ckpt_index *ix, ckpt_arena *a, const uint8_t *doc, size_t n, const char *file,
                    uint32_t max_depth) {
    memset(ix, 0, sizeof *ix);
    reader r = {doc, n, 0, a, file, max_depth, NULL, 0, 0, 0, 0};
    skip_ws(&r);
    if (r.i >= n || doc[r.i] != '{')
        return bad(&r, r.i,
                   n - r.i >= 3 && memcmp(doc + r.i, "\xef\xbb\xbf", 3) == 0
                       ? "a UTF-8 byte-order mark (json.loads refuses it)"
                       : "the document is not a JSON object");
    int has = 0;
    int rc = object(&r, 1, TOP, &has);
    if (rc) return rc;
    skip_ws(&r);
    if (r.i != n) return bad(&r, r.i, "extra data after the JSON value");
    ix->has_weight_map = has;
    ix->metadata_at = r.meta_at;
    ix->metadata_len = r.meta_end - r.meta_at;
    if (!has) return 0;
    if (r.npairs > 1) qsort(r.pairs, r.npairs, sizeof *r.pairs, by_key);
    ix->shards = ckpt_arena_array(a, r.npairs + 1, sizeof *ix->shards);
    if (!ix->shards) return nomem(&r);
    size_t first = 0; /* the key's first pair: its place in the dict */
    for (size_t i = 0; i < r.npairs; i++) {
        pair *p = &r.pairs[i];
        if (i == 0 || p->klen != p[-1].klen || memcmp(p->key, p[-1].key, p->klen) != 0)
            first = p->seq;
        if (i + 1 < r.npairs && p->klen == p[1].klen && memcmp(p->key, p[1].key, p->klen) == 0)
            continue; /* a later value replaces this one */
        p->value.order = first;
        if (!p->value.name) {
            if (!ix->non_strings++) {
                ix->first_non_string = p->value.offset;
                ix->non_string_key = p->key;
            }
            continue;
        }
        ix->shards[ix->nshards++] = p->value;
    }
    if (ix->nshards > 1) qsort(ix->shards, ix->nshards, sizeof *ix->shards, by_order);
    return 0;
}
