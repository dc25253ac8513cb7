/* tar.c - tar member lists as Python's tarfile reads them (tar.h). */
#include "container/tar.h"

#include <string.h>

#include "ckpt.h"

#define BLOCK 512u

typedef enum { NUM_OK, NUM_INVALID, NUM_UNSURE } num_result;

/* tarfile.nti: base-256 after a 0x80 (positive) or 0xFF (negative,
 * -(256**(len-1) - v)) byte, else the NUL-terminated ASCII text read by
 * int(s.strip() or "0", 8): an optional sign, an optional "0o" prefix,
 * octal digits with single underscores between them (one may follow the
 * prefix). Values beyond int64 are UNSURE; what int() refuses makes the
 * header invalid. */
static num_result nti(const uint8_t *f, size_t len, int64_t *out) {
    if (f[0] == 0x80 || f[0] == 0xff) {
        /* a negative number's magnitude is its complement plus one */
        uint8_t flip = f[0] == 0xff ? 0xff : 0;
        uint64_t v = 0;
        for (size_t i = 1; i < len; i++) {
            if (v >> 56) return NUM_UNSURE;
            v = v << 8 | (uint8_t)(f[i] ^ flip);
        }
        if (v >= INT64_MAX) return NUM_UNSURE;
        *out = flip ? -(int64_t)(v + 1) : (int64_t)v;
        return NUM_OK;
    }
    size_t end = 0;
    while (end < len && f[end]) end++;
    size_t i = 0, e = end;
    /* str.strip() on ASCII: \t \n \v \f \r, \x1c-\x1f and space */
    while (i < e &&
           (f[i] == ' ' || (f[i] >= 0x09 && f[i] <= 0x0d) || (f[i] >= 0x1c && f[i] <= 0x1f)))
        i++;
    while (e > i && (f[e - 1] == ' ' || (f[e - 1] >= 0x09 && f[e - 1] <= 0x0d) ||
                     (f[e - 1] >= 0x1c && f[e - 1] <= 0x1f)))
        e--;
    if (i == e) { /* s.strip() or "0" */
        *out = 0;
        return NUM_OK;
    }
    int neg = 0;
    if (f[i] == '+' || f[i] == '-') neg = f[i++] == '-';
    int after_digit = 0, underscore_ok = 0;
    if (e - i >= 2 && f[i] == '0' && (f[i + 1] == 'o' || f[i + 1] == 'O')) {
        i += 2;
        underscore_ok = 1;
    }
    uint64_t v = 0;
    size_t digits = 0;
    for (; i < e; i++) {
        uint8_t c = f[i];
        if (c == '_' && (after_digit || underscore_ok)) {
            after_digit = underscore_ok = 0;
            continue;
        }
        if (c < '0' || c > '7') return NUM_INVALID; /* ValueError */
        if (v >> 60) return NUM_UNSURE;
        v = v << 3 | (uint64_t)(c - '0');
        digits++;
        after_digit = 1;
        underscore_ok = 0;
    }
    if (!digits || !after_digit) return NUM_INVALID; /* no digit, or a trailing '_' */
    *out = neg ? -(int64_t)v : (int64_t)v;
    return NUM_OK;
}

/* frombuf's checks of one block: NO (invalid, all NUL), YES, UNSURE. */
static ckpt_tar_answer header_ok(const uint8_t *h, int64_t *size, const char **why) {
    size_t i = 0;
    while (i < BLOCK && h[i] == 0) i++;
    if (i == BLOCK) {
        *why = "an all-NUL block ends the archive";
        return CKPT_TAR_NO;
    }
    int64_t chk;
    num_result r = nti(h + 148, 8, &chk);
    if (r == NUM_INVALID) {
        *why = "the checksum field is not a number";
        return CKPT_TAR_NO;
    }
    int64_t us = 256, ss = 256;
    for (size_t k = 0; k < BLOCK; k++) {
        if (k >= 148 && k < 156) continue;
        us += h[k];
        ss += (int8_t)h[k];
    }
    /* a checksum beyond int64 (UNSURE) matches neither sum either */
    if (r != NUM_OK || (chk != us && chk != ss)) {
        *why = "the checksum does not match";
        return CKPT_TAR_NO;
    }
    static const struct {
        size_t at, len;
    } nums[] = {{100, 8}, {108, 8}, {116, 8}, {124, 12}, {136, 12}, {329, 8}, {337, 8}};
    const char *unsure = NULL; /* said only when no field makes the header invalid */
    for (size_t k = 0; k < sizeof nums / sizeof nums[0]; k++) {
        int64_t v;
        r = nti(h + nums[k].at, nums[k].len, &v);
        if (r == NUM_INVALID) {
            *why = "a number field that is not a number";
            return CKPT_TAR_NO;
        }
        if (r == NUM_UNSURE && !unsure) unsure = "a number field beyond 64 bits";
        if (r == NUM_OK && nums[k].at == 124) {
            /* tarfile would seek backwards: not followed */
            if (v < 0 && !unsure) unsure = "a negative member size";
            *size = v;
        }
    }
    if (unsure) {
        *why = unsure;
        return CKPT_TAR_UNSURE;
    }
    return CKPT_TAR_YES;
}

ckpt_tar_answer ckpt_tar_sniff(const uint8_t *p, size_t n) {
    int64_t size;
    const char *why;
    return n < BLOCK ? CKPT_TAR_NO : header_ok(p, &size, &why);
}

static int unsure(ckpt_tar *t, uint64_t at, const char *why) {
    t->answer = CKPT_TAR_UNSURE;
    t->at = at;
    t->why = why;
    return 0;
}

static size_t field_len(const uint8_t *f, size_t cap) {
    size_t k = 0;
    while (k < cap && f[k]) k++;
    return k;
}

/* One member from the header at `off`. */
static int add_member(ckpt_tar *t, ckpt_arena *a, size_t *cap, const uint8_t *h, uint64_t off,
                      int64_t size) {
    if (ckpt_arena_grow(a, (void **)&t->members, cap, t->count + 1, sizeof *t->members)) return -1;
    ckpt_tar_member *m = &t->members[t->count++];
    size_t nlen = field_len(h, 100), plen = field_len(h + 345, 155);
    uint8_t type = h[156];
    if (type == 0 && nlen && h[nlen - 1] == '/') type = '5'; /* V7 directory */
    char *name = ckpt_arena_alloc(a, plen + 1 + nlen + 1);
    if (!name) return -1;
    size_t k = 0;
    if (plen) { /* prefix + "/" + name, after the name lost its slashes */
        memcpy(name, h + 345, plen);
        name[plen] = '/';
        k = plen + 1;
    }
    size_t keep = nlen;
    if (type == '5')
        while (keep && h[keep - 1] == '/') keep--;
    memcpy(name + k, h, keep);
    name[k + keep] = '\0';
    *m = (ckpt_tar_member){name, k + keep, type, off, off + BLOCK, (uint64_t)size};
    return 0;
}

int ckpt_tar_read(ckpt_tar *t, ckpt_arena *a, const uint8_t *p, size_t n, const ckpt_source *src,
                  uint64_t max_members) {
    memset(t, 0, sizeof *t);
    size_t cap = 0;
    uint64_t off = 0;
    uint8_t h[BLOCK];
    for (;;) {
        if (n - off < BLOCK) {      /* empty or truncated header */
            if (off == 0) return 0; /* ReadError: not a tar */
            break;
        }
        int rc = ckpt_source_read(src, p + off, h, BLOCK, NULL);
        if (rc) return rc;
        int64_t size = 0;
        const char *why = NULL;
        ckpt_tar_answer ok = header_ok(h, &size, &why);
        if (ok == CKPT_TAR_UNSURE) return unsure(t, off, why);
        if (ok == CKPT_TAR_NO) {
            if (off == 0) return 0;
            break; /* the end of the listing */
        }
        t->answer = CKPT_TAR_YES;
        uint8_t type = h[156];
        if (strchr("LKSxgX", type) && type)
            return unsure(t, off, "a PAX, GNU long-name or sparse header");
        if (strchr("1234", type) && type) return unsure(t, off, "a link or device member");
        if (max_members && t->count >= max_members)
            return unsure(t, off, "more members than max_zip_entries");
        if (add_member(t, a, &cap, h, off, size)) return CKPT_E_NOMEM;
        uint64_t next = off + BLOCK;
        /* data of regular members and unknown types (not links, devices,
         * directories, FIFOs), rounded up to whole blocks */
        if (!strchr("123456", type) || !type) {
            uint64_t blocks = ((uint64_t)size + BLOCK - 1) / BLOCK;
            if (blocks > (n - next) / BLOCK + 1 || next + blocks * BLOCK > n) {
                t->listing_fails = 1;
                t->at = off;
                t->why = "a member's data runs past the end of the file";
                return 0;
            }
            next += blocks * BLOCK;
        }
        off = next;
    }
    return 0;
}

const ckpt_tar_member *ckpt_tar_find(const ckpt_tar *t, const char *name) {
    size_t len = strlen(name);
    for (size_t i = t->count; i-- > 0;)
        if (t->members[i].name_len == len && memcmp(t->members[i].name, name, len) == 0)
            return &t->members[i];
    return NULL;
}
