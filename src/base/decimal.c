/* decimal.c - small indices written as decimal text (see decimal.h). */
#include "base/decimal.h"

int ckpt_decimal_index(const char *s, size_t len, size_t limit, size_t *out) {
    if (limit == 0 || len == 0 || (len > 1 && s[0] == '0')) return 0;
    size_t v = 0, most = (limit - 1) / 10; /* v stays below limit: v * 10 + d <= limit - 1 */
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9' || v > most) return 0;
        size_t d = (size_t)(s[i] - '0');
        v *= 10;
        if (d > limit - 1 - v) return 0;
        v += d;
    }
    *out = v;
    return 1;
}
