/* pickle_write.c - the pickle emitter (pickle_write.h): opcodes and
 * encodings as CPython's pickle.py (Pickler.save_*) writes them. */
#include "format/pickle_write.h"

#include <string.h>

#include "base/alloc.h"
#include "base/error.h"

void ckpt_pkw_op(ckpt_pkw *w, uint8_t c) { ckpt_buf_byte(&w->out, c); }

static void u32le(ckpt_buf *b, uint32_t v) {
    uint8_t le[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    ckpt_buf_put(b, le, 4);
}

void ckpt_pkw_memo_put(ckpt_pkw *w) {
    uint64_t m = w->memo++;
    if (m < 256) {
        ckpt_pkw_op(w, 'q');
        ckpt_pkw_op(w, (uint8_t)m);
    } else {
        ckpt_pkw_op(w, 'r');
        u32le(&w->out, (uint32_t)m);
    }
}

void ckpt_pkw_memo_get(ckpt_pkw *w, uint64_t m) {
    if (m < 256) {
        ckpt_pkw_op(w, 'h');
        ckpt_pkw_op(w, (uint8_t)m);
    } else {
        ckpt_pkw_op(w, 'j');
        u32le(&w->out, (uint32_t)m);
    }
}

/* GLOBAL "module\nname\n", memoized like pickle.py does. The strings are
 * static or dtype names owned by the tree, which outlives the writer. */
void ckpt_pkw_global(ckpt_pkw *w, const char *module, const char *name) {
    for (size_t i = 0; i < w->nglobals; i++)
        if (strcmp(w->globals[i].module, module) == 0 && strcmp(w->globals[i].name, name) == 0) {
            ckpt_pkw_memo_get(w, w->globals[i].memo);
            return;
        }
    ckpt_pkw_op(w, 'c');
    ckpt_buf_str(&w->out, module);
    ckpt_pkw_op(w, '\n');
    ckpt_buf_str(&w->out, name);
    ckpt_pkw_op(w, '\n');
    if (w->nglobals < sizeof w->globals / sizeof *w->globals) {
        w->globals[w->nglobals].module = module;
        w->globals[w->nglobals].name = name;
        w->globals[w->nglobals++].memo = w->memo;
        ckpt_pkw_memo_put(w);
    }
}

void ckpt_pkw_int(ckpt_pkw *w, int64_t v) {
    ckpt_buf *b = &w->out;
    if (v >= 0 && v < 256) {
        ckpt_pkw_op(w, 'K');
        ckpt_pkw_op(w, (uint8_t)v);
    } else if (v >= 0 && v < 65536) {
        ckpt_pkw_op(w, 'M');
        ckpt_pkw_op(w, (uint8_t)v);
        ckpt_pkw_op(w, (uint8_t)(v >> 8));
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
        ckpt_pkw_op(w, 'J');
        u32le(b, (uint32_t)(int32_t)v);
    } else { /* LONG1: shortest two's complement, as pickle.encode_long */
        uint8_t le[8];
        uint64_t u = (uint64_t)v;
        for (int i = 0; i < 8; i++) le[i] = (uint8_t)(u >> (8 * i));
        size_t n = 8;
        while (n > 1 && ((le[n - 1] == 0 && !(le[n - 2] & 0x80)) ||
                         (le[n - 1] == 0xFF && (le[n - 2] & 0x80))))
            n--;
        ckpt_pkw_op(w, 0x8a);
        ckpt_pkw_op(w, (uint8_t)n);
        ckpt_buf_put(b, le, n);
    }
}

/* An int of any size given as decimal text: LONG1 (LONG4 past 255 bytes,
 * which weights_only refuses; Python writes the same). */
int ckpt_pkw_bigint(ckpt_pkw *w, const char *dec) {
    int neg = dec[0] == '-';
    const char *d = dec + neg;
    size_t digits = strlen(d);
    /* 10^digits < 256^(digits/2 + 1): enough bytes, plus one for the sign */
    size_t cap = digits / 2 + 2;
    uint8_t *le = ckpt_malloc(cap);
    if (!le) return ckpt_err_nomem();
    memset(le, 0, cap);
    size_t n = 1;
    for (size_t i = 0; i < digits; i++) {
        unsigned carry = (unsigned)(d[i] - '0');
        for (size_t k = 0; k < n; k++) {
            unsigned x = le[k] * 10u + carry;
            le[k] = (uint8_t)x;
            carry = x >> 8;
        }
        if (carry) le[n++] = (uint8_t)carry;
    }
    n++; /* room for the sign */
    if (neg) {
        unsigned carry = 1;
        for (size_t k = 0; k < n; k++) {
            unsigned x = (uint8_t)~le[k] + carry;
            le[k] = (uint8_t)x;
            carry = x >> 8;
        }
    }
    while (n > 1 &&
           ((le[n - 1] == 0 && !(le[n - 2] & 0x80)) || (le[n - 1] == 0xFF && (le[n - 2] & 0x80))))
        n--;
    if (n < 256) {
        ckpt_pkw_op(w, 0x8a);
        ckpt_pkw_op(w, (uint8_t)n);
    } else {
        ckpt_pkw_op(w, 0x8b);
        u32le(&w->out, (uint32_t)n);
    }
    ckpt_buf_put(&w->out, le, n);
    ckpt_free(le);
    return 0;
}

int ckpt_pkw_str(ckpt_pkw *w, const char *s, size_t n) {
    if (n > UINT32_MAX)
        return ckpt_err(CKPT_E_UNSUPPORTED, "", "", CKPT_NO_OFFSET,
                        "a string of %zu bytes does not fit pickle protocol 2", n);
    ckpt_pkw_op(w, 'X');
    u32le(&w->out, (uint32_t)n);
    ckpt_buf_put(&w->out, s, n);
    return 0;
}

/* bytes at protocol 2, as pickle.py writes them but always through
 * _codecs.encode (empty bytes too: builtins.bytes is not on the
 * weights_only allowlist): encode(latin-1 text, 'latin1'). */
int ckpt_pkw_bytes(ckpt_pkw *w, const uint8_t *p, size_t n) {
    ckpt_pkw_global(w, "_codecs", "encode");
    ckpt_buf text = {0};
    for (size_t i = 0; i < n; i++) {
        if (p[i] < 0x80) {
            ckpt_buf_byte(&text, p[i]);
        } else {
            ckpt_buf_byte(&text, (uint8_t)(0xC0 | p[i] >> 6));
            ckpt_buf_byte(&text, (uint8_t)(0x80 | (p[i] & 0x3F)));
        }
    }
    int rc = text.failed ? ckpt_err_nomem() : ckpt_pkw_str(w, (const char *)text.p, text.len);
    ckpt_buf_free(&text);
    if (rc) return rc;
    ckpt_pkw_str(w, "latin1", 6);
    ckpt_pkw_op(w, 0x86); /* TUPLE2 */
    ckpt_pkw_op(w, 'R');
    return 0;
}

void ckpt_pkw_float(ckpt_pkw *w, double v) {
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    ckpt_pkw_op(w, 'G');
    for (int i = 7; i >= 0; i--) ckpt_pkw_op(w, (uint8_t)(bits >> (8 * i)));
}

void ckpt_pkw_dims(ckpt_pkw *w, const uint64_t *d, uint32_t n) {
    if (n == 0) {
        ckpt_pkw_op(w, ')');
        return;
    }
    if (n > 3) ckpt_pkw_op(w, '(');
    for (uint32_t i = 0; i < n; i++) ckpt_pkw_int(w, (int64_t)d[i]);
    ckpt_pkw_op(w, n == 1 ? 0x85 : n == 2 ? 0x86 : n == 3 ? 0x87 : 't');
}

void ckpt_pkw_proto(ckpt_pkw *w) {
    ckpt_pkw_op(w, 0x80);
    ckpt_pkw_op(w, 2);
}

void ckpt_pkw_newobj(ckpt_pkw *w, const char *module, const char *name) {
    ckpt_pkw_global(w, module, name);
    ckpt_pkw_op(w, ')');  /* EMPTY_TUPLE */
    ckpt_pkw_op(w, 0x81); /* NEWOBJ */
    ckpt_pkw_memo_put(w);
}

void ckpt_pkw_free(ckpt_pkw *w) { ckpt_buf_free(&w->out); }
