/* decimal.h - small indices written as decimal text. */
#ifndef CKPT_DECIMAL_H
#define CKPT_DECIMAL_H

#include <stddef.h>

/* 1 with *out set when s[0..len) is the canonical decimal text of a
 * number below `limit` (str(n) in Python: digits only, no sign, no
 * leading zero but "0" itself), else 0. torch names its storages so:
 * "0", "1", ... (torch.save's persistent ids, "archive/data/<key>"). */
int ckpt_decimal_index(const char *s, size_t len, size_t limit, size_t *out);

#endif
