/* hex.c - lowercase hexadecimal (hex.h). */
#include "base/hex.h"

const char ckpt_hex_digits[17] = "0123456789abcdef";

void ckpt_hex64(char out[17], uint64_t h) {
    for (int i = 15; i >= 0; i--, h >>= 4) out[i] = ckpt_hex_digits[h & 15];
    out[16] = '\0';
}
