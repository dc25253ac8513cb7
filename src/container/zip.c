/* zip.c - read-only ZIP container reader (zip.h; FORMATS.md §2.3).
 *
 * Only the central directory is trusted for sizes, CRC, method and flags:
 * torch writes local headers with bit 3 set and zero sizes. The local
 * header is read for one thing, the data offset, because torch hides its
 * alignment padding in the local extra field only. */
#include "container/zip.h"

#include <inttypes.h>
#include <libdeflate.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

#define SIG_LOCAL 0x04034b50u     /* PK\3\4 */
#define SIG_CENTRAL 0x02014b50u   /* PK\1\2 */
#define SIG_EOCD 0x06054b50u      /* PK\5\6 */
#define SIG_EOCD64 0x06064b50u    /* PK\6\6 */
#define SIG_LOCATOR64 0x07064b50u /* PK\6\7 */

#define LOCAL_SIZE 30u
#define CENTRAL_SIZE 46u
#define EOCD_SIZE 22u
#define EOCD64_SIZE 56u
#define LOCATOR64_SIZE 20u
#define MAX_COMMENT 65535u
#define SATURATED 0xFFFFFFFFu /* a 32-bit field whose value is in ZIP64 extra */
#define ZIP64_EXTRA_ID 0x0001u
#define FLAG_ENCRYPTED 0x0001u

/* Deflate spends at least 2 bits (a length code and a distance code) on a
 * match of at most 258 bytes, so no valid stream inflates to more than
 * 1032 times its size. Lets us bound an allocation by the input length. */
#define MAX_DEFLATE_RATIO 1032u

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

static uint64_t rd64(const uint8_t *p) {
    return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32;
}

/* Where the directory is, as the end records declare it. */
typedef struct dir_info {
    uint64_t count;     /* entries */
    uint64_t cd_size;   /* bytes */
    uint64_t cd_offset; /* relative to the archive start */
    uint64_t cd_end;    /* absolute position of the record after the
                           directory (ZIP64 end record, else the EOCD) */
} dir_info;

/* The EOCD is followed only by its comment (at most 65535 bytes), so the
 * signature closest to the end is taken, as miniz (torch) and Python's
 * zipfile do; a comment that itself contains the signature is not read. */
static int find_eocd(const uint8_t *buf, size_t len, size_t *pos) {
    if (len < EOCD_SIZE) return -1;
    size_t start = len - EOCD_SIZE;
    size_t stop = start > MAX_COMMENT ? start - MAX_COMMENT : 0;
    for (size_t i = start;; i--) {
        if (rd32(buf + i) == SIG_EOCD) {
            *pos = i;
            return 0;
        }
        if (i == stop) return -1;
    }
}

static int read_end_records(const ckpt_zip *z, dir_info *d) {
    size_t eocd;
    uint64_t searched = z->len < EOCD_SIZE + MAX_COMMENT ? z->len : EOCD_SIZE + MAX_COMMENT;
    if (find_eocd(z->buf, z->len, &eocd) != 0) {
        /* A file that starts as an archive but has no end record is one
         * whose writer or copy stopped early: writers put the record last. */
        if (z->len >= 4 && rd32(z->buf) == SIG_LOCAL)
            return ckpt_err(CKPT_E_TRUNCATED, z->file, NULL, CKPT_NO_OFFSET,
                            "zip archive is truncated or incomplete: no "
                            "end-of-central-directory record (PK\\5\\6) in its "
                            "last %" PRIu64 " bytes; the file was probably cut "
                            "short while being written or copied", searched);
        return ckpt_err(CKPT_E_FORMAT, z->file, NULL, CKPT_NO_OFFSET,
                        "expected an end-of-central-directory record "
                        "(PK\\5\\6) in the last %" PRIu64 " bytes", searched);
    }
    const uint8_t *e = z->buf + eocd;
    if (rd16(e + 8) != rd16(e + 10))
        return ckpt_err(CKPT_E_UNSUPPORTED, z->file, NULL, eocd,
                        "end record counts %u entries on this disk of %u: "
                        "multi-disk archives are not supported",
                        rd16(e + 8), rd16(e + 10));
    d->count = rd16(e + 10);
    d->cd_size = rd32(e + 12);
    d->cd_offset = rd32(e + 16);
    d->cd_end = eocd;

    if (eocd < LOCATOR64_SIZE || rd32(e - LOCATOR64_SIZE) != SIG_LOCATOR64)
        return 0;
    size_t loc = eocd - LOCATOR64_SIZE;
    uint64_t declared = rd64(z->buf + loc + 8);
    uint64_t at;
    /* The locator's offset is relative to the archive start; behind a
     * foreign prefix it misses, and the record is found where every writer
     * puts it: right before the locator. */
    if (loc >= EOCD64_SIZE && declared <= loc - EOCD64_SIZE &&
        rd32(z->buf + declared) == SIG_EOCD64)
        at = declared;
    else if (loc >= EOCD64_SIZE &&
             rd32(z->buf + loc - EOCD64_SIZE) == SIG_EOCD64)
        at = loc - EOCD64_SIZE;
    else
        return ckpt_err(CKPT_E_FORMAT, z->file, NULL, loc,
                        "ZIP64 locator points to offset %" PRIu64
                        ", where a ZIP64 end record (PK\\6\\6) was expected",
                        declared);
    const uint8_t *r = z->buf + at;
    if (rd64(r + 24) != rd64(r + 32))
        return ckpt_err(CKPT_E_UNSUPPORTED, z->file, NULL, at,
                        "ZIP64 end record counts %" PRIu64
                        " entries on this disk of %" PRIu64
                        ": multi-disk archives are not supported",
                        rd64(r + 24), rd64(r + 32));
    d->count = rd64(r + 32);
    d->cd_size = rd64(r + 40);
    d->cd_offset = rd64(r + 48);
    d->cd_end = at;
    return 0;
}

/* Replaces the saturated (0xFFFFFFFF) sizes and local offset by the u64
 * values of the ZIP64 extra field, which holds only the saturated ones, in
 * the order usize, csize, local offset (APPNOTE 4.5.3). Without that field
 * a saturated value is taken literally. */
static int read_zip64_extra(const ckpt_zip *z, ckpt_zip_entry *e,
                            uint64_t *local, const uint8_t *x, size_t xlen,
                            uint64_t xoff) {
    size_t i = 0;
    while (xlen - i >= 4) {
        uint16_t id = rd16(x + i);
        size_t n = rd16(x + i + 2);
        if (n > xlen - i - 4)
            return ckpt_err(CKPT_E_FORMAT, z->file, e->name, xoff + i,
                            "extra field 0x%04x of %zu bytes runs past the "
                            "entry's %zu bytes of extra data",
                            id, n, xlen);
        if (id == ZIP64_EXTRA_ID) {
            uint64_t *fields[3] = {&e->usize, &e->csize, local};
            const uint8_t *f = x + i + 4;
            size_t left = n;
            for (size_t k = 0; k < 3; k++) {
                if (*fields[k] != SATURATED) continue;
                if (left < 8)
                    return ckpt_err(CKPT_E_FORMAT, z->file, e->name, xoff + i,
                                    "ZIP64 extra field of %zu bytes is too "
                                    "short for the saturated sizes/offset",
                                    n);
                *fields[k] = rd64(f);
                f += 8;
                left -= 8;
            }
            return 0;
        }
        i += 4 + n;
    }
    return 0;
}

/* Reads the local header of e (declared at archive-relative `local`; the
 * central entry is at `cen`) to find the data offset, and checks that the
 * data lies inside the buffer. */
static int read_local(const ckpt_zip *z, ckpt_zip_entry *e, uint64_t local,
                      uint64_t cen) {
    uint64_t room = z->len - z->archive_offset; /* archive start to end */
    if (local > room)
        return ckpt_err(CKPT_E_TRUNCATED, z->file, e->name, cen,
                        "local header offset %" PRIu64
                        " is past the end of the input (%zu bytes)",
                        local, z->len);
    uint64_t lh = z->archive_offset + local;
    if (z->len - lh < LOCAL_SIZE)
        return ckpt_err(CKPT_E_TRUNCATED, z->file, e->name, lh,
                        "expected a 30-byte local header, input ends after "
                        "%" PRIu64 " bytes",
                        z->len - lh);
    const uint8_t *h = z->buf + lh;
    if (rd32(h) != SIG_LOCAL)
        return ckpt_err(CKPT_E_FORMAT, z->file, e->name, lh,
                        "expected a local header (PK\\3\\4)");
    uint64_t nlen = rd16(h + 26), xlen = rd16(h + 28);
    if (z->len - lh - LOCAL_SIZE < nlen)
        return ckpt_err(CKPT_E_TRUNCATED, z->file, e->name, lh,
                        "local header's name (%" PRIu64
                        " bytes) runs past the end of the input",
                        nlen);
    e->local_name_differs =
        nlen != e->name_len || memcmp(h + LOCAL_SIZE, e->name, nlen) != 0;
    e->local_offset = lh;
    /* No overflow: lh + 30 + nlen <= len, and xlen < 2^16. */
    e->data_offset = lh + LOCAL_SIZE + nlen + xlen;
    if (e->data_offset > z->len || e->csize > z->len - e->data_offset)
        return ckpt_err(CKPT_E_TRUNCATED, z->file, e->name, e->data_offset,
                        "member data (%" PRIu64 " bytes at offset %" PRIu64
                        ") runs past the end of the input (%zu bytes)",
                        e->csize, e->data_offset, z->len);
    return 0;
}

/* Parses the central entry at *pos (the directory ends at `end`) into e
 * and advances *pos past it. */
static int read_central(const ckpt_zip *z, ckpt_arena *a, uint64_t *pos,
                        uint64_t end, ckpt_zip_entry *e) {
    uint64_t at = *pos;
    if (end - at < CENTRAL_SIZE)
        return ckpt_err(CKPT_E_FORMAT, z->file, NULL, at,
                        "expected a 46-byte central directory entry, the "
                        "directory ends at offset %" PRIu64,
                        end);
    const uint8_t *h = z->buf + at;
    if (rd32(h) != SIG_CENTRAL)
        return ckpt_err(CKPT_E_FORMAT, z->file, NULL, at,
                        "expected a central directory entry (PK\\1\\2)");
    size_t nlen = rd16(h + 28), xlen = rd16(h + 30), clen = rd16(h + 32);
    if (end - at - CENTRAL_SIZE < (uint64_t)nlen + xlen + clen)
        return ckpt_err(CKPT_E_FORMAT, z->file, NULL, at,
                        "central entry's name, extra and comment (%zu bytes) "
                        "run past the directory's end at offset %" PRIu64,
                        nlen + xlen + clen, end);
    const char *name = (const char *)h + CENTRAL_SIZE;
    if (memchr(name, 0, nlen))
        return ckpt_err(CKPT_E_FORMAT, z->file, NULL, at + CENTRAL_SIZE,
                        "member name contains a NUL byte");
    e->name = ckpt_arena_strndup(a, name, nlen);
    if (!e->name)
        return ckpt_err(CKPT_E_NOMEM, z->file, NULL, at,
                        "out of memory for a member name");
    e->name_len = nlen;
    e->flags = rd16(h + 8);
    e->method = rd16(h + 10);
    e->crc32 = rd32(h + 16);
    e->csize = rd32(h + 20);
    e->usize = rd32(h + 24);
    uint64_t local = rd32(h + 42);
    if (e->usize == SATURATED || e->csize == SATURATED || local == SATURATED) {
        int rc = read_zip64_extra(z, e, &local, h + CENTRAL_SIZE + nlen, xlen,
                                  at + CENTRAL_SIZE + nlen);
        if (rc) return rc;
    }
    *pos = at + CENTRAL_SIZE + nlen + xlen + clen;
    return read_local(z, e, local, at);
}

static int compare_names(const char *a, size_t alen, const char *b,
                         size_t blen) {
    int c = memcmp(a, b, alen < blen ? alen : blen);
    if (c) return c;
    return (alen > blen) - (alen < blen);
}

/* Orders entry pointers by name; equal names keep directory order so that
 * ckpt_zip_find returns the first of them. */
static int compare_entries(const void *pa, const void *pb) {
    const ckpt_zip_entry *x = *(const ckpt_zip_entry *const *)pa;
    const ckpt_zip_entry *y = *(const ckpt_zip_entry *const *)pb;
    int c = compare_names(x->name, x->name_len, y->name, y->name_len);
    if (c) return c;
    return (x > y) - (x < y);
}

static int build_index(ckpt_zip *z, ckpt_arena *a) {
    /* qsort has no context argument, so sort pointers, then turn them into
     * indices. */
    ckpt_zip_entry **order = ckpt_arena_array(a, z->count, sizeof *order);
    z->by_name = ckpt_arena_array(a, z->count, sizeof *z->by_name);
    if (!order || !z->by_name)
        return ckpt_err(CKPT_E_NOMEM, z->file, NULL, CKPT_NO_OFFSET,
                        "out of memory for the index of %zu members",
                        z->count);
    for (size_t i = 0; i < z->count; i++) order[i] = &z->entries[i];
    qsort(order, z->count, sizeof *order, compare_entries);
    for (size_t i = 0; i < z->count; i++) {
        z->by_name[i] = (size_t)(order[i] - z->entries);
        if (i > 0 && compare_names(order[i - 1]->name, order[i - 1]->name_len,
                                   order[i]->name, order[i]->name_len) == 0)
            z->has_duplicates = 1;
    }
    return 0;
}

static int open_dir(ckpt_zip *z, ckpt_arena *a, const ckpt_limits *lim) {
    dir_info d = {0, 0, 0, 0};
    int rc = read_end_records(z, &d);
    if (rc) return rc;
    if (d.cd_size > d.cd_end || d.cd_offset > d.cd_end - d.cd_size)
        return ckpt_err(CKPT_E_FORMAT, z->file, NULL, d.cd_end,
                        "central directory (%" PRIu64
                        " bytes at offset %" PRIu64
                        ") must end before its end record at offset %" PRIu64,
                        d.cd_size, d.cd_offset, d.cd_end);
    uint64_t cd_start = d.cd_end - d.cd_size;
    /* Bytes before the archive (a polyglot prefix) shift every offset the
     * directory declares. */
    z->archive_offset = cd_start - d.cd_offset;
    if (d.count > lim->max_zip_entries)
        return ckpt_err(CKPT_E_LIMIT, z->file, NULL, d.cd_end,
                        "%" PRIu64 " entries exceed max_zip_entries (%" PRIu64
                        ")",
                        d.count, lim->max_zip_entries);
    if (d.count > d.cd_size / CENTRAL_SIZE)
        return ckpt_err(CKPT_E_FORMAT, z->file, NULL, d.cd_end,
                        "a central directory of %" PRIu64
                        " bytes cannot hold %" PRIu64
                        " entries of at least 46 bytes",
                        d.cd_size, d.count);
    /* count <= cd_size / 46 <= len, so it fits size_t. */
    z->count = (size_t)d.count;
    z->entries = ckpt_arena_array(a, z->count, sizeof *z->entries);
    if (!z->entries)
        return ckpt_err(CKPT_E_NOMEM, z->file, NULL, cd_start,
                        "out of memory for %zu members", z->count);
    uint64_t pos = cd_start;
    for (size_t i = 0; i < z->count; i++) {
        rc = read_central(z, a, &pos, d.cd_end, &z->entries[i]);
        if (rc) return rc;
    }
    return build_index(z, a);
}

int ckpt_zip_open(ckpt_zip *z, ckpt_arena *a, const uint8_t *buf, size_t len,
                  const char *file, const ckpt_limits *lim) {
    memset(z, 0, sizeof *z);
    z->buf = buf;
    z->len = len;
    z->file = file;
    int rc = open_dir(z, a, lim);
    if (rc) memset(z, 0, sizeof *z);
    return rc;
}

const ckpt_zip_entry *ckpt_zip_find(const ckpt_zip *z, const char *name) {
    size_t n = strlen(name), lo = 0, hi = z->count;
    while (lo < hi) { /* first index whose name is >= name */
        size_t mid = lo + (hi - lo) / 2;
        const ckpt_zip_entry *e = &z->entries[z->by_name[mid]];
        if (compare_names(e->name, e->name_len, name, n) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == z->count) return NULL;
    const ckpt_zip_entry *e = &z->entries[z->by_name[lo]];
    return compare_names(e->name, e->name_len, name, n) == 0 ? e : NULL;
}

static int inflate_member(const ckpt_zip *z, const ckpt_zip_entry *e,
                          ckpt_arena *a, uint64_t *budget,
                          const uint8_t **data) {
    if (e->usize > *budget)
        return ckpt_err(CKPT_E_LIMIT, z->file, e->name, e->data_offset,
                        "deflated member inflates to %" PRIu64
                        " bytes, more than the %" PRIu64
                        " left of max_inflate_bytes",
                        e->usize, *budget);
    uint64_t most;
    if (ckpt_mul_overflow(e->csize, MAX_DEFLATE_RATIO, &most) ||
        e->usize > most)
        return ckpt_err(CKPT_E_FORMAT, z->file, e->name, e->data_offset,
                        "deflated member declares %" PRIu64
                        " bytes from %" PRIu64
                        " compressed bytes, more than deflate can produce "
                        "(1032:1)",
                        e->usize, e->csize);
    size_t n = (size_t)e->usize;
    if (n != e->usize)
        return ckpt_err(CKPT_E_LIMIT, z->file, e->name, e->data_offset,
                        "member of %" PRIu64 " bytes exceeds the address space",
                        e->usize);
    *budget -= e->usize;
    uint8_t *out = ckpt_arena_alloc(a, n);
    if (!out)
        return ckpt_err(CKPT_E_NOMEM, z->file, e->name, e->data_offset,
                        "out of memory for %zu inflated bytes", n);
    struct libdeflate_decompressor *dec = libdeflate_alloc_decompressor();
    if (!dec)
        return ckpt_err(CKPT_E_NOMEM, z->file, e->name, e->data_offset,
                        "out of memory for a deflate decompressor");
    size_t got = 0;
    /* csize <= len was checked by open, so the cast is exact. */
    enum libdeflate_result r = libdeflate_deflate_decompress(
        dec, z->buf + e->data_offset, (size_t)e->csize, out, n, &got);
    libdeflate_free_decompressor(dec);
    if (r == LIBDEFLATE_INSUFFICIENT_SPACE)
        return ckpt_err(CKPT_E_FORMAT, z->file, e->name, e->data_offset,
                        "deflated member inflates to more than the %zu bytes "
                        "the central directory declares",
                        n);
    if (r != LIBDEFLATE_SUCCESS)
        return ckpt_err(CKPT_E_FORMAT, z->file, e->name, e->data_offset,
                        "invalid deflate data");
    if (got != n)
        return ckpt_err(CKPT_E_FORMAT, z->file, e->name, e->data_offset,
                        "deflated member inflates to %zu bytes, the central "
                        "directory declares %zu",
                        got, n);
    *data = out;
    return 0;
}

int ckpt_zip_read(const ckpt_zip *z, const ckpt_zip_entry *e, ckpt_arena *a,
                  uint64_t *budget, const uint8_t **data) {
    *data = NULL;
    if (e->flags & FLAG_ENCRYPTED)
        return ckpt_err(CKPT_E_UNSUPPORTED, z->file, e->name, e->data_offset,
                        "encrypted member (flag bit 0x1) cannot be read");
    if (e->method == 8) return inflate_member(z, e, a, budget, data);
    if (e->method != 0)
        return ckpt_err(CKPT_E_UNSUPPORTED, z->file, e->name, e->data_offset,
                        "compression method %u is not supported (expected 0 "
                        "stored or 8 deflate)",
                        e->method);
    if (e->csize != e->usize)
        return ckpt_err(CKPT_E_FORMAT, z->file, e->name, e->data_offset,
                        "stored member has compressed size %" PRIu64
                        " but uncompressed size %" PRIu64
                        "; they must be equal",
                        e->csize, e->usize);
    *data = z->buf + e->data_offset;
    return 0;
}

int ckpt_zip_check_crc(const ckpt_zip *z, const ckpt_zip_entry *e,
                       const uint8_t *data) {
    uint32_t crc = libdeflate_crc32(0, data, (size_t)e->usize);
    if (crc != e->crc32)
        return ckpt_err(CKPT_E_CHECKSUM, z->file, e->name, e->data_offset,
                        "CRC-32 of the data is 0x%08" PRIx32
                        ", the central directory says 0x%08" PRIx32,
                        crc, e->crc32);
    return 0;
}
