/* utf8.c - the one UTF-8 validator (see utf8.h). */
#include "base/utf8.h"

#include <stdint.h>
#include <string.h>

int ckpt_utf8_check(const void *data, size_t n, int surrogates) {
    const uint8_t *s = data;
    /* ASCII first, eight bytes at a time: most names and keys are ASCII */
    uint64_t any = 0, w;
    size_t i = 0;
    for (; n - i >= 8; i += 8) {
        memcpy(&w, s + i, 8);
        any |= w;
    }
    if (i < n && n >= 8) { /* the last bytes: the word ending there */
        memcpy(&w, s + n - 8, 8);
        any |= w;
    } else {
        for (; i < n; i++) any |= s[i];
    }
    if (!(any & 0x8080808080808080u)) return 1;
    int seen = 0;
    i = 0;
    while (i < n) {
        uint8_t c = s[i];
        size_t len;
        uint8_t lo = 0x80, hi = 0xBF; /* range of the second byte */
        if (c < 0x80) {
            i++;
            continue;
        } else if (c >= 0xC2 && c <= 0xDF) {
            len = 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            len = 3;
            if (c == 0xE0) lo = 0xA0;
            if (c == 0xED && !surrogates) hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            if (c == 0xF0) lo = 0x90;
            if (c == 0xF4) hi = 0x8F;
        } else {
            return 0;
        }
        if (n - i < len || s[i + 1] < lo || s[i + 1] > hi) return 0;
        for (size_t k = 2; k < len; k++)
            if (s[i + k] < 0x80 || s[i + k] > 0xBF) return 0;
        if (c == 0xED && s[i + 1] >= 0xA0) seen = 1; /* only with surrogates */
        i += len;
    }
    return seen ? 2 : 1;
}
