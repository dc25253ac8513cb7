/* utf8.h - the one UTF-8 validator. */
#ifndef CKPT_UTF8_H
#define CKPT_UTF8_H

#include <stddef.h>

/* Validates UTF-8 as Python's decoder does (RFC 3629: no overlong forms,
 * nothing above U+10FFFF), with "surrogatepass" when `surrogates` is set:
 * an encoded surrogate (ED A0..BF xx) is then valid, else invalid.
 * Returns 0 when invalid, 1 when valid, 2 when valid and holding encoded
 * surrogates (only with `surrogates`). */
int ckpt_utf8_check(const void *s, size_t n, int surrogates);

#endif
