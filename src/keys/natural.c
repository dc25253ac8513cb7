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
 * Every other byte is itself. key: room for 3x the name's bytes (the
 * most a key takes); returns the key's length. */
static size_t natural_key(const char *s, unsigned char *key) {
    size_t k = 0;
    for (;;) {
        size_t n = strcspn(s, "0123456789"), z = 0;
        memcpy(key + k, s, n);
        k += n, s += n;
        if (!*s) return k;
        n = 1;
        while (s[n] >= '0' && s[n] <= '9') n++;
        while (z + 1 < n && s[z] == '0') z++;
        size_t sig = n - z, head = sig < 255 ? 2 : 10;
        key[k] = '0';
        if (sig < 255) {
            key[k + 1] = (unsigned char)sig;
        } else {
            key[k + 1] = 255;
            for (size_t b = 0; b < 8; b++)
                key[k + 2 + b] = (unsigned char)((uint64_t)sig >> (56 - 8 * b));
        }
        memcpy(key + k + head, s + z, sig);
        k += head + sig;
        s += n;
    }
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
    size_t used = 0, cap = 0;
    /* most keys are about as long as their names: 48 bytes each first */
    if (n <= SIZE_MAX / 48 && (keys = ckpt_malloc(n * 48))) cap = n * 48;
    int rc = items ? 0 : CKPT_E_NOMEM;
    /* one pass: keys are laid out in name order, the buffer grows as a
     * key may need 3x its name's bytes (most need about 1x) */
    for (size_t i = 0; rc == 0 && i < n; i++) {
        size_t len = strlen(names[i]);
        if (len > (SIZE_MAX - used) / 3 - 1) {
            rc = CKPT_E_NOMEM;
        } else if (cap - used < 3 * len + 1) {
            size_t want = used + 3 * len + 1;
            want += want / 2 < SIZE_MAX - want ? want / 2 : 0;
            unsigned char *k = ckpt_realloc(keys, want);
            if (!k)
                rc = CKPT_E_NOMEM;
            else
                keys = k, cap = want;
        }
        if (rc) break;
        items[i].len = natural_key(names[i], keys + used);
        items[i].name = names[i];
        items[i].index = i;
        used += items[i].len;
    }
    if (rc == 0) {
        used = 0;
        for (size_t i = 0; i < n; i++) {
            items[i].key = keys + used;
            used += items[i].len;
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
