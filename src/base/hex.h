/* hex.h - lowercase hexadecimal, the one encoder. */
#ifndef CKPT_HEX_H
#define CKPT_HEX_H

#include <stdint.h>

extern const char ckpt_hex_digits[17]; /* "0123456789abcdef" */

/* The 16 lowercase hex digits of h, most significant first (as xxhsum
 * prints a digest), NUL-terminated. */
void ckpt_hex64(char out[17], uint64_t h);

#endif
