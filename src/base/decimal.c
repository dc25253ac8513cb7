/* decimal.c - small indices written as decimal text (see decimal.h). */
#include "base/decimal.h"

#include <stdint.h>

int ckpt_decimal_index(const char *s, size_t len, size_t limit, size_t *out) {
    /* 20 digits hold any uint64_t; more are past every limit */
    if (len == 0 || len > 20 || (len > 1 && s[0] == '0')) return 0;
    const unsigned char *p = (const unsigned char *)s;
    /* 19 digits cannot overflow: one bound per digit, not two (torch's
     * storage keys are parsed twice each, 100k of them for 100k tensors) */
    const unsigned char *head = p + (len < 20 ? len : 19);
    uint64_t v = 0;
    do {
        unsigned d = (unsigned)*p - '0';
        if (d > 9) return 0;
        v = v * 10 + d;
    } while (++p < head);
    if (len == 20) { /* the 20th digit */
        unsigned d = (unsigned)*p - '0';
        if (d > 9 || __builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, d, &v))
            return 0;
    }
    if (v >= limit) return 0;
    *out = (size_t)v;
    return 1;
}
