/* natural.c - ckpt_natural_order: the key order of human listings. */
#include <stdint.h>
#include <string.h>

#include "base/error.h"
#include "base/sort.h"
#include "keys/keys.h"

/* Natural order as bytes: each name becomes a key whose memcmp order is
 * the natural order, so that the sort compares flat bytes (a million
 * tensors: one key each, not a token walk per comparison). A run of ASCII
 * digits is '0' (which compares with any other byte as each digit does),
 * its count of significant digits (leading zeros dropped, one kept: one
 * byte below 255, else 255 and eight bytes big-endian), then those
 * digits: more significant digits sort later, equal counts by digits.
 * Every other byte is itself. key NULL: only the key's length (at most
 * 3x the name's bytes). */
static size_t natural_key(const char *s, unsigned char *key) {
    size_t k = 0;
    while (*s) {
        size_t n = 0, z = 0;
        while (s[n] >= '0' && s[n] <= '9') n++;
        if (n == 0) {
            if (key) key[k] = (unsigned char)*s;
            k++, s++;
            continue;
        }
        while (z + 1 < n && s[z] == '0') z++;
        size_t sig = n - z, head = sig < 255 ? 2 : 10;
        if (key) {
            key[k] = '0';
            if (sig < 255) {
                key[k + 1] = (unsigned char)sig;
            } else {
                key[k + 1] = 255;
                for (size_t b = 0; b < 8; b++)
                    key[k + 2 + b] = (unsigned char)((uint64_t)sig >> (56 - 8 * b));
            }
            memcpy(key + k + head, s + z, sig);
        }
        k += head + sig;
        s += n;
    }
    return k;
}

typedef struct natural_item {
    const unsigned char *key;
    const char *name;
    size_t len, index;
} natural_item;

static int cmp_natural(const void *x, const void *y) {
    const natural_item *a = x, *b = y;
    int c = memcmp(a->key, b->key, a->len < b->len ? a->len : b->len);
    if (c) return c < 0 ? -1 : 1;
    if (a->len != b->len) return a->len < b->len ? -1 : 1;
    if ((c = strcmp(a->name, b->name)) != 0) return c < 0 ? -1 : 1;
    return (a->index > b->index) - (a->index < b->index);
}

int ckpt_natural_order(size_t *order, const char *const *names, size_t n) {
    if (n && (!order || !names))
        return ckpt_err(CKPT_E_INVALID_ARG, "", "", CKPT_NO_OFFSET, "order or names is NULL");
    for (size_t i = 0; i < n; i++)
        if (!names[i])
            return ckpt_err(CKPT_E_INVALID_ARG, "", "", CKPT_NO_OFFSET, "names[%zu] is NULL", i);
    if (n == 0) return 0;
    natural_item *items = n <= SIZE_MAX / sizeof *items ? ckpt_malloc(n * sizeof *items) : NULL;
    unsigned char *keys = NULL;
    size_t total = 0;
    for (size_t i = 0; items && i < n; i++) {
        items[i].len = natural_key(names[i], NULL);
        items[i].name = names[i];
        items[i].index = i;
        total += items[i].len; /* at most 3x the names' bytes */
    }
    if (items) keys = ckpt_malloc(total ? total : 1);
    int rc = keys ? 0 : CKPT_E_NOMEM;
    if (rc == 0) {
        total = 0;
        for (size_t i = 0; i < n; i++) {
            items[i].key = keys + total;
            total += natural_key(names[i], keys + total);
        }
        /* a natural merge: keys in file order are mostly sorted already */
        rc = ckpt_sort(items, n, sizeof *items, cmp_natural);
    }
    if (rc == 0)
        for (size_t i = 0; i < n; i++) order[i] = items[i].index;
    ckpt_free(keys);
    ckpt_free(items);
    if (rc)
        return ckpt_err(CKPT_E_NOMEM, "", "", CKPT_NO_OFFSET, "out of memory sorting %zu names", n);
    return 0;
}
