/* npy.c - the .npy header as numpy.lib.format reads it (npy.h). Follows
 * numpy's read_magic, _check_version, _read_array_header and
 * descr_to_dtype; the literal is parsed into a small tree, then judged. */
#include "format/npy.h"

#include <string.h>

typedef enum { N_STR, N_INT, N_BOOL, N_NONE, N_TUPLE, N_LIST, N_DICT } ntype;

typedef struct node {
    ntype t;
    size_t at;     /* offset in the file */
    const char *s; /* N_STR: the text between the quotes */
    size_t len;
    struct node **items; /* tuple/list items; dict: key, value, key, ... */
    size_t n;
} node;

typedef struct parser {
    const uint8_t *p;
    size_t i, end; /* the header text is p[i..end) */
    ckpt_arena *a;
    uint32_t depth, max_depth;
    int py2; /* 1.0 and 2.0: an L after an int is dropped */
    int nomem;
    uint64_t at; /* where the literal stops being understood */
    const char *why;
} parser;

static node *unsure(parser *q, const char *why) {
    if (!q->why) {
        q->why = why;
        q->at = q->i;
    }
    return NULL;
}

static void skip(parser *q, int in_brackets) {
    /* newlines continue a line only inside brackets; numpy pads the
     * header with spaces and ends it with one newline */
    while (q->i < q->end && (q->p[q->i] == ' ' || q->p[q->i] == '\t' ||
                             (q->p[q->i] == '\n' && (in_brackets || q->i + 1 == q->end))))
        q->i++;
}

static node *new_node(parser *q, ntype t) {
    node *x = ckpt_arena_alloc(q->a, sizeof *x);
    if (!x) {
        q->nomem = 1;
        return NULL;
    }
    x->t = t;
    x->at = q->i;
    return x;
}

static int word(parser *q, const char *w) {
    size_t k = strlen(w);
    if (q->end - q->i < k || memcmp(q->p + q->i, w, k) != 0) return 0;
    uint8_t c = q->i + k < q->end ? q->p[q->i + k] : ' ';
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')
        return 0;
    q->i += k;
    return 1;
}

static node *value(parser *q);

/* Items up to `close`, with an optional trailing comma; *commas counts
 * the commas (a parenthesised single value without one is no tuple). */
static node *sequence(parser *q, ntype t, uint8_t close, int pairs, size_t *commas) {
    node *x = new_node(q, t);
    if (!x) return NULL;
    size_t cap = 0;
    *commas = 0;
    q->i++;
    for (;;) {
        skip(q, 1);
        if (q->i < q->end && q->p[q->i] == close) {
            q->i++;
            return x;
        }
        for (int k = 0; k <= pairs; k++) {
            node *v = value(q);
            if (!v) return NULL;
            if (ckpt_arena_grow(q->a, (void **)&x->items, &cap, x->n + 1, sizeof *x->items)) {
                q->nomem = 1;
                return NULL;
            }
            x->items[x->n++] = v;
            skip(q, 1);
            if (k < pairs) {
                if (q->i >= q->end || q->p[q->i] != ':') return unsure(q, "expected ':'");
                q->i++;
                skip(q, 1);
            }
        }
        if (q->i < q->end && q->p[q->i] == ',') {
            q->i++;
            ++*commas;
            continue;
        }
        if (q->i < q->end && q->p[q->i] == close) {
            q->i++;
            return x;
        }
        return unsure(q, "expected ',' or a closing bracket");
    }
}

static node *string(parser *q) {
    uint8_t quote = q->p[q->i];
    size_t start = q->i + 1, k = start;
    while (k < q->end && q->p[k] != quote && q->p[k] != '\\' && q->p[k] != '\n') k++;
    if (k >= q->end || q->p[k] != quote)
        return unsure(q, "a string with an escape or without its closing quote");
    node *x = new_node(q, N_STR);
    if (!x) return NULL;
    x->s = (const char *)q->p + start;
    x->len = k - start;
    q->i = k + 1;
    skip(q, 1);
    if (q->i < q->end && (q->p[q->i] == '\'' || q->p[q->i] == '"'))
        return unsure(q, "adjacent strings (Python concatenates them)");
    return x;
}

static node *integer(parser *q) {
    node *x = new_node(q, N_INT);
    if (!x) return NULL;
    if (q->p[q->i] == '-' || q->p[q->i] == '+') q->i++;
    size_t d = q->i;
    while (q->i < q->end && q->p[q->i] >= '0' && q->p[q->i] <= '9') q->i++;
    size_t nd = q->i - d;
    if (nd == 0) return unsure(q, "a sign without digits");
    /* Python 3 refuses "01" (but not "00"); numbers go on with . e j _ x */
    size_t zeros = 0;
    while (zeros < nd && q->p[d + zeros] == '0') zeros++;
    if (nd > 1 && zeros > 0 && zeros < nd) return unsure(q, "an integer with a leading zero");
    if (q->py2 && q->i < q->end && (q->p[q->i] == 'L' || q->p[q->i] == 'l')) q->i++;
    if (q->i < q->end && strchr(".eEjJ_xXoObBlL", q->p[q->i]))
        return unsure(q, "a number other than a decimal integer");
    return x;
}

static node *value(parser *q) {
    if (q->depth >= q->max_depth) return unsure(q, "the literal is nested too deep");
    skip(q, q->depth > 0);
    if (q->i >= q->end) return unsure(q, "the header ends where a value was expected");
    uint8_t c = q->p[q->i];
    size_t commas;
    node *x = NULL;
    q->depth++;
    if (c == '{') {
        x = sequence(q, N_DICT, '}', 1, &commas);
    } else if (c == '[') {
        x = sequence(q, N_LIST, ']', 0, &commas);
    } else if (c == '(') {
        x = sequence(q, N_TUPLE, ')', 0, &commas);
        if (x && x->n == 1 && commas == 0) x = x->items[0]; /* (v) is v */
    } else if (c == '\'' || c == '"') {
        x = string(q);
    } else if (c == '-' || c == '+' || (c >= '0' && c <= '9')) {
        x = integer(q);
    } else if (word(q, "True") || word(q, "False")) {
        x = new_node(q, N_BOOL);
    } else if (word(q, "None")) {
        x = new_node(q, N_NONE);
    } else {
        x = unsure(q, "a token outside the literals numpy writes");
    }
    q->depth--;
    return x;
}

/* ------------------------------------------------------------ dtypes */

static int is_digits(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9') return 0;
    return 1;
}

/* numpy.dtype(s).hasobject for the strings dtype.str and dtype.descr
 * produce; UNSURE for any other string. */
static ckpt_npy_kind dtype_string(const char *s, size_t n) {
    static const char *const plain[] = {
        "?",  "b",  "B",  "h",  "H",   "i",   "I",  "l",   "L",   "q",   "Q",  "p",  "P",  "e",
        "f",  "d",  "g",  "F",  "D",   "G",   "b1", "i1",  "i2",  "i4",  "i8", "u1", "u2", "u4",
        "u8", "f2", "f4", "f8", "f12", "f16", "c8", "c16", "c24", "c32", "M",  "m",  "M8", "m8"};
    if ((n == 6 && memcmp(s, "object", 6) == 0) || (n == 7 && memcmp(s, "object_", 7) == 0))
        return CKPT_NPY_OBJECT;
    if (n && strchr("<>|=", s[0])) s++, n--;
    if (n && s[0] == 'O' && is_digits(s + 1, n - 1)) return CKPT_NPY_OBJECT;
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++)
        if (strlen(plain[i]) == n && memcmp(plain[i], s, n) == 0) return CKPT_NPY_PLAIN;
    if (n && strchr("SUVa", s[0]) && is_digits(s + 1, n - 1)) return CKPT_NPY_PLAIN;
    /* datetime64/timedelta64 with a unit: M8[ns], m8[10s] */
    if (n > 4 && (s[0] == 'M' || s[0] == 'm') && s[1] == '8' && s[2] == '[' && s[n - 1] == ']') {
        size_t k = 3;
        while (k < n - 1 && s[k] >= '0' && s[k] <= '9') k++;
        if (k < n - 1) {
            for (size_t j = k; j < n - 1; j++)
                if (!((s[j] >= 'a' && s[j] <= 'z') || (s[j] >= 'A' && s[j] <= 'Z')))
                    return CKPT_NPY_UNSURE;
            return CKPT_NPY_PLAIN;
        }
    }
    return CKPT_NPY_UNSURE;
}

static ckpt_npy_kind worse(ckpt_npy_kind a, ckpt_npy_kind b) {
    if (a == CKPT_NPY_OBJECT || b == CKPT_NPY_OBJECT) return CKPT_NPY_OBJECT;
    if (a == CKPT_NPY_UNSURE || b == CKPT_NPY_UNSURE) return CKPT_NPY_UNSURE;
    return CKPT_NPY_PLAIN;
}

/* descr_to_dtype(d).hasobject: a string, a (descr, shape) tuple, or a
 * list of (name, descr[, shape]) fields. */
static ckpt_npy_kind descr_kind(const node *d, uint32_t depth, const node **where) {
    ckpt_npy_kind k = CKPT_NPY_UNSURE;
    if (depth > 64) return CKPT_NPY_UNSURE;
    if (d->t == N_STR) {
        k = dtype_string(d->s, d->len);
    } else if (d->t == N_TUPLE) {
        k = d->n >= 2 ? descr_kind(d->items[0], depth + 1, where) : CKPT_NPY_UNSURE;
    } else if (d->t == N_LIST) {
        k = CKPT_NPY_PLAIN;
        for (size_t i = 0; i < d->n && k != CKPT_NPY_OBJECT; i++) {
            const node *f = d->items[i];
            ckpt_npy_kind fk = (f->t == N_TUPLE || f->t == N_LIST) && (f->n == 2 || f->n == 3)
                                   ? descr_kind(f->items[1], depth + 1, where)
                                   : CKPT_NPY_UNSURE;
            if (fk == CKPT_NPY_UNSURE && k != CKPT_NPY_UNSURE) *where = f;
            k = worse(k, fk);
        }
        return k;
    }
    if (k == CKPT_NPY_UNSURE && !*where) *where = d;
    return k;
}

/* ------------------------------------------------------------ header */

static const node *dict_get(const node *d, const char *key) {
    const node *v = NULL; /* a repeated key: the last value wins */
    for (size_t i = 0; i + 1 < d->n; i += 2)
        if (d->items[i]->t == N_STR && d->items[i]->len == strlen(key) &&
            memcmp(d->items[i]->s, key, d->items[i]->len) == 0)
            v = d->items[i + 1];
    return v;
}

static void judge(ckpt_npy_header *h, const node *d) {
    h->at = d->at;
    if (d->t != N_DICT) {
        h->kind = CKPT_NPY_REFUSED;
        h->why = "the header is not a dict";
        return;
    }
    static const char *const keys[] = {"descr", "fortran_order", "shape"};
    for (size_t i = 0; i < d->n; i += 2) {
        int known = 0;
        for (size_t k = 0; k < 3; k++)
            known |= d->items[i]->t == N_STR && d->items[i]->len == strlen(keys[k]) &&
                     memcmp(d->items[i]->s, keys[k], d->items[i]->len) == 0;
        if (!known) {
            h->kind = CKPT_NPY_REFUSED;
            h->at = d->items[i]->at;
            h->why = "a header key other than descr, fortran_order and shape";
            return;
        }
    }
    const node *descr = dict_get(d, "descr"), *order = dict_get(d, "fortran_order"),
               *shape = dict_get(d, "shape");
    int shape_ok = shape && shape->t == N_TUPLE;
    for (size_t i = 0; shape_ok && i < shape->n; i++)
        shape_ok = shape->items[i]->t == N_INT || shape->items[i]->t == N_BOOL;
    if (!descr || !order || !shape_ok || order->t != N_BOOL) {
        h->kind = CKPT_NPY_REFUSED;
        h->why = !descr || !order || !shape ? "the header lacks a key"
                 : !shape_ok                ? "shape is not a tuple of ints"
                                            : "fortran_order is not a bool";
        return;
    }
    const node *where = NULL;
    h->kind = descr_kind(descr, 0, &where);
    if (h->kind == CKPT_NPY_UNSURE) {
        h->at = where ? where->at : descr->at;
        h->why = "a dtype description numpy may read, which ckpt does not know";
    }
}

/* The magic, version and header length of p[0..n) (p holds at least
 * min(n, 12) bytes): 0 when it is no .npy; 1 when *h is answered without
 * the header; 2 when the header is p[*start, *start + *hlen). */
static int preamble(ckpt_npy_header *h, const uint8_t *p, size_t n, uint64_t max_header,
                    size_t *start, uint64_t *hlen) {
    memset(h, 0, sizeof *h);
    if (n < 8 || memcmp(p, "\x93NUMPY", 6) != 0) return 0;
    uint8_t major = p[6], minor = p[7];
    h->at = 6;
    if (minor != 0 || major < 1 || major > 3) {
        h->kind = CKPT_NPY_REFUSED;
        h->why = "a format version other than 1.0, 2.0 and 3.0";
        return 1;
    }
    *start = major == 1 ? 10 : 12;
    if (n < *start) {
        h->kind = CKPT_NPY_REFUSED;
        h->why = "the file ends inside the header length";
        return 1;
    }
    *hlen = major == 1 ? (uint64_t)(p[8] | p[9] << 8)
                       : (uint64_t)p[8] | (uint64_t)p[9] << 8 | (uint64_t)p[10] << 16 |
                             (uint64_t)p[11] << 24;
    h->at = 8;
    if (*hlen > n - *start) {
        h->kind = CKPT_NPY_REFUSED;
        h->why = "the header runs past the end of the file";
        return 1;
    }
    if (*hlen > max_header) {
        h->kind = CKPT_NPY_UNSURE;
        h->why = "a header longer than max_header_bytes";
        return 1;
    }
    return 2;
}

size_t ckpt_npy_header_bytes(const uint8_t *p, size_t n, uint64_t max_header) {
    ckpt_npy_header h;
    size_t start = 0, least = n < 12 ? n : 12;
    uint64_t hlen = 0;
    if (preamble(&h, p, n, max_header, &start, &hlen) != 2) return least;
    return start + (size_t)hlen > least ? start + (size_t)hlen : least;
}

int ckpt_npy_read_header(ckpt_npy_header *h, ckpt_arena *a, const uint8_t *p, size_t n,
                         uint64_t max_header, uint32_t max_depth) {
    size_t start = 0;
    uint64_t hlen = 0;
    int r = preamble(h, p, n, max_header, &start, &hlen);
    if (r < 2) return r;
    uint8_t major = p[6];
    h->data_offset = start + (size_t)hlen;
    parser q = {p, start, start + (size_t)hlen, a, 0, max_depth, major < 3, 0, 0, NULL};
    /* ast.literal_eval strips leading spaces and tabs; numpy 3.0 headers
     * are UTF-8, whose bytes above 0x7f only appear inside strings */
    node *d = value(&q);
    if (q.nomem) return -1;
    skip(&q, 0);
    if (d && q.i != q.end) d = unsure(&q, "text after the header's literal");
    if (!d) {
        h->kind = CKPT_NPY_UNSURE;
        h->at = q.at;
        h->why = q.why;
        return 1;
    }
    judge(h, d);
    return 1;
}
