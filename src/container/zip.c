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
#include "base/pages.h"
#include "base/sort.h"

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
#define FLAG_UNREADABLE 0x0061u /* encrypted, patched, strong encryption */
#define FLAG_MASKED_DIR 0x2000u
#define DOS_DIR_ATTR 0x10u

/* Deflate spends at least 2 bits (a length code and a distance code) on a
 * match of at most 258 bytes, so no valid stream inflates to more than
 * 1032 times its size. Lets us bound an allocation by the input length. */
#define MAX_DEFLATE_RATIO 1032u

/* The end of the input that holds every place miniz looks for the end
 * record (find_eocd): read with one pread. */
#define TAIL (MAX_COMMENT + EOCD_SIZE + 4096u)

/* Members closer than this on average: their local headers are read in
 * windows of DENSE_AHEAD bytes (one pread serves many), else each in a
 * window of SPARSE_AHEAD (a page, what a fault on the mapping read); the
 * scan reads small members so too (ckpt_zip_dense_ahead). */
#define DENSE ((uint64_t)16 << 10)
#define DENSE_AHEAD ((size_t)1 << 20)
#define SPARSE_AHEAD ((size_t)4096)

/* Members this far apart on average or more: their local headers are
 * peeked (base/source.h, ckpt_view.peek), so that the data is streamed
 * later without the pages they cached. Closer, the scan's look at the
 * same headers, after open, would read each of them cold again. */
#define PEEK ((uint64_t)1 << 20)

/* Copies the n bytes at offset off of the input into dst: pread when the
 * input is a file (z->src), never through its mapping. */
static int zcopy(const ckpt_zip *z, uint64_t off, void *dst, size_t n) {
    return ckpt_source_read(z->src, z->buf + off, dst, n, NULL);
}

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32; }

/* Where the directory is, as the end records declare it. */
typedef struct dir_info {
    uint64_t count;     /* entries */
    uint64_t cd_size;   /* bytes */
    uint64_t cd_offset; /* absolute */
    uint64_t eocd;      /* position of the classic end record */
    uint32_t this_disk; /* number of this disk (miniz checks entries) */
} dir_info;

/* miniz's mz_zip_reader_locate_header_sig: 4 KiB windows from the end,
 * overlapping by 3 bytes, each searched backwards for the signature
 * closest to the end that leaves room for the record; the search stops
 * after the window that reaches 65535 + 22 bytes from the end. */
static int find_eocd(const uint8_t *buf, size_t len, size_t *pos, size_t *searched) {
    const size_t window = 4096;
    *searched = 0;
    if (len < EOCD_SIZE) return -1;
    size_t cur = len > window ? len - window : 0;
    for (;;) {
        size_t n = len - cur < window ? len - cur : window;
        *searched = len - cur;
        for (size_t i = n >= 4 ? n - 4 + 1 : 0; i-- > 0;)
            if (rd32(buf + cur + i) == SIG_EOCD && len - (cur + i) >= EOCD_SIZE) {
                *pos = cur + i;
                return 0;
            }
        if (cur == 0 || len - cur >= MAX_COMMENT + EOCD_SIZE) return -1;
        cur = cur > window - 3 ? cur - (window - 3) : 0;
    }
}

/* The ZIP64 end record each reader uses, or none (SIZE_MAX): miniz
 * follows the locator's declared offset, Python's zipfile reads right
 * before the locator; each takes the record only if its signature is
 * there. *differ: the two answers differ. */
static int find_zip64(const ckpt_zip *z, size_t eocd, uint8_t locator[LOCATOR64_SIZE],
                      size_t *miniz, size_t *zipfile) {
    *miniz = *zipfile = SIZE_MAX;
    if (eocd < LOCATOR64_SIZE + EOCD64_SIZE) return 0;
    size_t loc = eocd - LOCATOR64_SIZE;
    uint8_t sig[4];
    int rc = zcopy(z, loc, locator, LOCATOR64_SIZE);
    if (rc || rd32(locator) != SIG_LOCATOR64) return rc;
    uint64_t declared = rd64(locator + 8);
    size_t before = loc - EOCD64_SIZE;
    if ((rc = zcopy(z, before, sig, 4))) return rc;
    if (rd32(sig) == SIG_EOCD64) *zipfile = before;
    if (declared > z->len - EOCD64_SIZE) {
        if (z->reading == CKPT_ZIP_ZIPFILE) return 0;
        return ckpt_err(CKPT_E_FORMAT, z->file, NULL, loc,
                        "ZIP64 locator points to offset %" PRIu64
                        ", past the last place a 56-byte ZIP64 end record fits",
                        declared);
    }
    if ((rc = zcopy(z, declared, sig, 4))) return rc;
    if (rd32(sig) == SIG_EOCD64) *miniz = (size_t)declared;
    return 0;
}

static int multi_disk(const ckpt_zip *z, uint64_t at, const char *what) {
    return ckpt_err(CKPT_E_UNSUPPORTED, z->file, NULL, at,
                    "%s: multi-disk archives are not supported", what);
}

/* The end records' disk fields as miniz checks them (both disk numbers 0,
 * or both 1, and as many entries on this disk as in all): miniz refuses
 * anything else as a multi-disk archive. Only a consistent one is taken
 * for a multi-disk archive (unsupported); a single disk field at odds with
 * the others that say one disk is a damaged field (CKPT_E_FORMAT, naming
 * it and the value expected). */
static int disk_fields(const ckpt_zip *z, const char *rec, uint64_t at, uint64_t this_disk,
                       uint64_t cd_disk, uint64_t on_disk, uint64_t count) {
    int one = (this_disk == 0 && cd_disk == 0) || (this_disk == 1 && cd_disk == 1);
    if (one && on_disk == count) return 0;
    if (one)
        return ckpt_err(CKPT_E_FORMAT, z->file, NULL, at,
                        "%s counts %" PRIu64 " entries on this disk and %" PRIu64
                        " in all, which must be equal in an archive of one disk (its disk "
                        "numbers are %" PRIu64 "): a damaged count",
                        rec, on_disk, count, this_disk);
    if ((this_disk == 0) != (cd_disk == 0))
        return ckpt_err(CKPT_E_FORMAT, z->file, NULL, at,
                        "%s's %s is %" PRIu64 ", expected 0: its %s is 0 and it counts "
                        "%s, so a damaged field of a one-disk archive",
                        rec, this_disk ? "number of this disk" : "disk of the central directory",
                        this_disk ? this_disk : cd_disk,
                        this_disk ? "disk of the central directory" : "number of this disk",
                        on_disk == count ? "every entry on this disk" : "entries apart");
    return multi_disk(z, at,
                      on_disk == count ? "end records name another disk"
                                       : "end records count entries on this disk apart "
                                         "from the total");
}

static int read_end_records(ckpt_zip *z, dir_info *d) {
    size_t eocd = 0, searched = 0, tail = z->len < TAIL ? z->len : TAIL;
    ckpt_view v = {0};
    const uint8_t *t;
    uint8_t e[EOCD_SIZE] = {0}, head[4]; /* e: set when found (gcc cannot tell) */
    /* the tail holds every window find_eocd searches: it finds there
     * what it finds in the whole input. Read with one pread from a file;
     * memory (a mapping, ckpt_open_memory) is asked for at once, or a cold
     * file without an end record near its end (safetensors) costs one read
     * per page the search walks back over (base/pages.h) */
    if (!ckpt_source_is_file(z->src, z->buf + (z->len - tail), tail))
        ckpt_pages_will_need(z->buf + (z->len - tail), tail);
    int rc = ckpt_source_view(z->src, &v, z->buf + (z->len - tail), tail, 0, NULL, &t);
    int found = rc == 0 && find_eocd(t, tail, &eocd, &searched) == 0;
    if (found) {
        memcpy(e, t + eocd, EOCD_SIZE);
        eocd += z->len - tail;
    }
    ckpt_view_free(&v);
    if (rc) return rc;
    if (!found) {
        /* The error's offset is where the search ended: the lowest offset
         * searched (0 for an input shorter than the record). A file that
         * starts as an archive but has no end record is one whose writer or
         * copy stopped early: writers put the record last. */
        if (z->len < EOCD_SIZE) searched = z->len;
        if (z->len >= 4 && (rc = zcopy(z, 0, head, 4))) return rc;
        if (z->len >= 4 && rd32(head) == SIG_LOCAL)
            return ckpt_err(CKPT_E_TRUNCATED, z->file, NULL, z->len - searched,
                            "zip archive is truncated or incomplete: expected an "
                            "end-of-central-directory record (PK\\5\\6) in its "
                            "last %zu bytes (searched back to this offset), found "
                            "none; the file was probably cut short while being "
                            "written or copied",
                            searched);
        if (z->len < EOCD_SIZE)
            return ckpt_err(CKPT_E_FORMAT, z->file, NULL, 0,
                            "expected a zip archive, which ends with a 22-byte "
                            "end-of-central-directory record (PK\\5\\6): the input "
                            "is %zu bytes",
                            z->len);
        return ckpt_err(CKPT_E_FORMAT, z->file, NULL, z->len - searched,
                        "expected an end-of-central-directory record "
                        "(PK\\5\\6) in the last %zu bytes (searched back to this "
                        "offset), found none",
                        searched);
    }
    uint64_t on_disk = rd16(e + 8), this_disk = rd16(e + 4), cd_disk = rd16(e + 6);
    d->count = rd16(e + 10);
    d->cd_size = rd32(e + 12);
    d->cd_offset = rd32(e + 16);
    d->eocd = eocd;
    uint64_t cd_end = eocd; /* where zipfile expects the directory to end */
    size_t miniz, zipfile;
    uint8_t loc[LOCATOR64_SIZE], r[EOCD64_SIZE];
    const char *rec = "end record"; /* the one whose counts are read */
    uint64_t rec_at = eocd;
    if ((rc = find_zip64(z, eocd, loc, &miniz, &zipfile))) return rc;
    size_t at = z->reading == CKPT_ZIP_ZIPFILE ? zipfile : miniz;
    if (miniz != zipfile) {
        z->readings_differ = 1;
        if (z->reading == CKPT_ZIP_TORCH)
            return ckpt_err(CKPT_E_FORMAT, z->file, NULL, eocd - LOCATOR64_SIZE,
                            "two readings: the ZIP64 locator points to offset %" PRIu64
                            " (%s, which torch's miniz follows), while Python's "
                            "zipfile reads the record right before the locator at "
                            "offset %zu (%s)",
                            rd64(loc + 8), miniz == SIZE_MAX ? "no ZIP64 end record" : "a record",
                            eocd - LOCATOR64_SIZE - EOCD64_SIZE,
                            zipfile == SIZE_MAX ? "no record" : "a record");
    }
    if (at != SIZE_MAX) {
        if ((rc = zcopy(z, at, r, EOCD64_SIZE))) return rc;
        if (rd64(r + 4) < EOCD64_SIZE - 12)
            return ckpt_err(CKPT_E_FORMAT, z->file, NULL, at,
                            "ZIP64 end record declares %" PRIu64
                            " bytes, fewer than its 44 fixed ones",
                            rd64(r + 4));
        if (rd32(loc + 16) != 1 && rd32(loc + 4) == 0 && rd32(r + 16) == 0 && rd32(r + 20) == 0)
            return ckpt_err(CKPT_E_FORMAT, z->file, NULL, eocd - LOCATOR64_SIZE,
                            "ZIP64 locator's total number of disks is %" PRIu32
                            ", expected 1: its disk fields and the ZIP64 end record's are 0, "
                            "so a damaged field of a one-disk archive",
                            rd32(loc + 16));
        if (rd32(loc + 16) != 1)
            return multi_disk(z, eocd - LOCATOR64_SIZE, "ZIP64 locator counts other than 1 disk");
        if (rd64(r + 32) > UINT32_MAX || rd64(r + 24) > UINT32_MAX || rd64(r + 40) > UINT32_MAX)
            return ckpt_err(CKPT_E_LIMIT, z->file, NULL, at,
                            "ZIP64 end record declares %" PRIu64 " entries in %" PRIu64
                            " bytes; torch's reader takes at most 2^32 - 1 of each",
                            rd64(r + 32), rd64(r + 40));
        d->count = rd64(r + 32);
        on_disk = rd64(r + 24);
        d->cd_size = rd64(r + 40);
        this_disk = rd32(r + 16);
        cd_disk = rd32(r + 20);
        d->cd_offset = rd64(r + 48);
        cd_end = eocd - LOCATOR64_SIZE - EOCD64_SIZE;
        rec = "ZIP64 end record";
        rec_at = at;
    }
    if ((rc = disk_fields(z, rec, rec_at, this_disk, cd_disk, on_disk, d->count))) return rc;
    d->this_disk = (uint32_t)this_disk;
    /* zipfile shifts every offset by the bytes between the directory's
     * declared end and the end records (a prefix); miniz does not. */
    uint64_t end;
    int past = ckpt_add_overflow(d->cd_offset, d->cd_size, &end) || end > z->len;
    if (past && z->reading != CKPT_ZIP_ZIPFILE) /* miniz's own refusal first */
        return ckpt_err(CKPT_E_FORMAT, z->file, NULL, eocd,
                        "central directory (%" PRIu64 " bytes at offset %" PRIu64
                        ") runs past the end of the input (%zu bytes)",
                        d->cd_size, d->cd_offset, z->len);
    if (past || end != cd_end) {
        z->readings_differ = 1;
        if (z->reading == CKPT_ZIP_TORCH)
            return ckpt_err(CKPT_E_FORMAT, z->file, NULL, eocd,
                            "two readings: the central directory is declared at offset %" PRIu64
                            " (%" PRIu64 " bytes), which torch's miniz reads, but it does "
                            "not end where the end records begin (offset %" PRIu64
                            "); Python's zipfile shifts every offset to close that gap",
                            d->cd_offset, d->cd_size, cd_end);
        if (z->reading == CKPT_ZIP_ZIPFILE) {
            if (d->cd_size > cd_end || d->cd_offset > cd_end - d->cd_size)
                return ckpt_err(CKPT_E_FORMAT, z->file, NULL, eocd,
                                "central directory (%" PRIu64 " bytes at offset %" PRIu64
                                ") must end before its end records at offset %" PRIu64,
                                d->cd_size, d->cd_offset, cd_end);
            z->shift = cd_end - d->cd_size - d->cd_offset;
            d->cd_offset += z->shift;
        }
    }
    if (ckpt_add_overflow(d->cd_offset, d->cd_size, &end) || end > z->len)
        return ckpt_err(CKPT_E_FORMAT, z->file, NULL, eocd,
                        "central directory (%" PRIu64 " bytes at offset %" PRIu64
                        ") runs past the end of the input (%zu bytes)",
                        d->cd_size, d->cd_offset, z->len);
    return 0;
}

/* Replaces the saturated (0xFFFFFFFF) sizes and local offset by the u64
 * values of the ZIP64 extra field, which holds only the saturated ones, in
 * the order usize, csize, local offset (APPNOTE 4.5.3). Without that field
 * a saturated value is taken literally. */
static int read_zip64_extra(const ckpt_zip *z, ckpt_zip_entry *e, uint64_t *local, const uint8_t *x,
                            size_t xlen, uint64_t xoff) {
    size_t i = 0;
    while (i < xlen) {
        if (xlen - i < 4)
            return ckpt_err(CKPT_E_FORMAT, z->file, e->name, xoff + i,
                            "%zu stray bytes end the entry's extra data, "
                            "where a 4-byte extra field header was expected",
                            xlen - i);
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

/* How open reads the directory: in windows of CD_WINDOW bytes, one
 * after the other (one window in memory, not the whole directory: 6 MiB
 * for 100k members, all of it pages to clear); then the local headers
 * through a window of their own (read_locals). */
#define CD_WINDOW ((size_t)1 << 20)

/* Reads the local header of e (at e->local_offset, which read_central
 * checked leaves room for one) through view v (read ahead `ahead`) to
 * find the data offset, and checks that the data lies inside the buffer.
 * miniz reads it only when the member is extracted; ckpt requires every
 * entry's to be valid. */
static int read_local(const ckpt_zip *z, ckpt_view *v, size_t ahead, ckpt_zip_entry *e) {
    uint64_t local = e->local_offset;
    const uint8_t *h;
    int rc = ckpt_source_view(z->src, v, z->buf + local, LOCAL_SIZE, ahead, e->name, &h);
    if (rc) return rc;
    if (rd32(h) != SIG_LOCAL)
        return ckpt_err(CKPT_E_FORMAT, z->file, e->name, local,
                        "expected a local header (PK\\3\\4)");
    uint64_t nlen = rd16(h + 26), xlen = rd16(h + 28);
    if (z->len - local - LOCAL_SIZE < nlen)
        return ckpt_err(CKPT_E_TRUNCATED, z->file, e->name, local,
                        "local header's name (%" PRIu64 " bytes) runs past the end of the input",
                        nlen);
    if (!ckpt_view_holds(v, h, LOCAL_SIZE + (size_t)nlen) &&
        (rc = ckpt_source_view(z->src, v, z->buf + local, LOCAL_SIZE + (size_t)nlen, ahead, e->name,
                               &h)))
        return rc;
    e->local_name_differs = nlen != e->name_len || memcmp(h + LOCAL_SIZE, e->name, nlen) != 0;
    /* No overflow: local + 30 + nlen <= len, and xlen < 2^16. */
    e->data_offset = local + LOCAL_SIZE + nlen + xlen;
    if (e->data_offset > z->len || e->csize > z->len - e->data_offset)
        return ckpt_err(CKPT_E_TRUNCATED, z->file, e->name, e->data_offset,
                        "member data (%" PRIu64 " bytes at offset %" PRIu64
                        ") runs past the end of the input (%zu bytes)",
                        e->csize, e->data_offset, z->len);
    /* a stored member whose bytes came with its header's read: their
     * CRC-32 now, so that verify does not read them again */
    const uint8_t *data = h + LOCAL_SIZE + nlen + xlen;
    if (e->method == 0 && e->csize == e->usize && e->csize < (uint64_t)SIZE_MAX &&
        ckpt_view_holds(v, data, (size_t)e->csize))
        ckpt_zip_crc_seen(e, data, (size_t)e->csize);
    return 0;
}

void ckpt_zip_crc_seen(ckpt_zip_entry *e, const uint8_t *data, size_t n) {
    e->crc_read = (uint32_t)libdeflate_crc32(0, data, n);
    e->crc_seen = 1;
}

/* The checks mz_zip_reader_read_central_dir makes of each entry, on its
 * raw 32-bit fields (before any ZIP64 extra replaces them), but for the
 * local header offset: z64_local, the one the extra gave. */
static int miniz_entry_checks(const ckpt_zip *z, const uint8_t *h, uint64_t at, uint32_t this_disk,
                              const char *name, uint64_t z64_local) {
    uint64_t csize = rd32(h + 20), usize = rd32(h + 24), local = rd32(h + 42);
    /* miniz reads the method as 32 bits: method and time together */
    if (csize != SATURATED && usize != SATURATED &&
        ((rd32(h + 10) == 0 && usize != csize) || (usize && !csize)))
        return ckpt_err(CKPT_E_FORMAT, z->file, name, at,
                        "central entry declares %" PRIu64 " bytes from %" PRIu64
                        " compressed ones, which torch's reader rejects",
                        usize, csize);
    uint32_t disk = rd16(h + 34);
    if ((disk == 0xFFFF || (disk != this_disk && disk != 1)) && this_disk == 0)
        return ckpt_err(CKPT_E_FORMAT, z->file, name, at,
                        "central entry's disk number is %u, expected 0: the end record "
                        "describes one disk, so a damaged field",
                        disk);
    if (disk == 0xFFFF || (disk != this_disk && disk != 1))
        return ckpt_err(CKPT_E_UNSUPPORTED, z->file, name, at,
                        "central entry starts on disk %u: multi-disk archives "
                        "are not supported",
                        disk);
    /* a saturated offset is checked once its ZIP64 extra replaced it
     * (torch 2.x's miniz; 1.13's checked 0xFFFFFFFF itself and refused) */
    if (local == SATURATED) local = z64_local;
    if (csize != SATURATED && local + LOCAL_SIZE + csize > z->len)
        return ckpt_err(CKPT_E_TRUNCATED, z->file, name, at,
                        "central entry's %" PRIu64 " bytes at local header offset %" PRIu64
                        " run past the end of the input (%zu bytes)",
                        csize, local, z->len);
    if (rd16(h + 8) & FLAG_MASKED_DIR)
        return ckpt_err(CKPT_E_UNSUPPORTED, z->file, name, at,
                        "central entry has flag 0x2000 (masked local headers), "
                        "which torch's reader refuses");
    return 0;
}

/* Parses the central entry at *pos (the directory ends at `end`; read
 * through view cd) into e, all but the fields of its local header
 * (read_local), and advances *pos past it. */
static int read_central(const ckpt_zip *z, ckpt_arena *a, ckpt_view *cd, uint64_t *pos,
                        uint64_t end, uint32_t this_disk, ckpt_zip_entry *e) {
    uint64_t at = *pos;
    if (end - at < CENTRAL_SIZE)
        return ckpt_err(CKPT_E_FORMAT, z->file, NULL, at,
                        "expected a 46-byte central directory entry, the "
                        "directory ends at offset %" PRIu64,
                        end);
    const uint8_t *h;
    int rc = ckpt_source_view(z->src, cd, z->buf + at, CENTRAL_SIZE, CD_WINDOW, NULL, &h);
    if (rc) return rc;
    if (rd32(h) != SIG_CENTRAL)
        return ckpt_err(CKPT_E_FORMAT, z->file, NULL, at,
                        "expected a central directory entry (PK\\1\\2)");
    size_t nlen = rd16(h + 28), xlen = rd16(h + 30), clen = rd16(h + 32);
    if (end - at - CENTRAL_SIZE < (uint64_t)nlen + xlen + clen)
        return ckpt_err(CKPT_E_FORMAT, z->file, NULL, at,
                        "central entry's name, extra and comment (%zu bytes) "
                        "run past the directory's end at offset %" PRIu64,
                        nlen + xlen + clen, end);
    if (!ckpt_view_holds(cd, h, CENTRAL_SIZE + nlen + xlen + clen) &&
        (rc = ckpt_source_view(z->src, cd, z->buf + at, CENTRAL_SIZE + nlen + xlen + clen,
                               CD_WINDOW, NULL, &h)))
        return rc;
    const char *name = (const char *)h + CENTRAL_SIZE;
    const char *nul = memchr(name, 0, nlen);
    if (nul)
        return ckpt_err(CKPT_E_FORMAT, z->file, NULL, at + CENTRAL_SIZE + (uint64_t)(nul - name),
                        "NUL byte in the %zu-byte name of the central entry at offset %" PRIu64
                        ": expected a member name without NUL bytes",
                        nlen, at);
    e->name = ckpt_arena_strndup(a, name, nlen);
    if (!e->name)
        return ckpt_err(CKPT_E_NOMEM, z->file, NULL, at, "out of memory for a member name");
    e->name_len = (uint16_t)nlen; /* rd16 */
    e->flags = rd16(h + 8);
    e->method = rd16(h + 10);
    e->crc32 = rd32(h + 16);
    e->crc_seen = 0; /* until read_local sees the bytes */
    e->csize = rd32(h + 20);
    e->usize = rd32(h + 24);
    e->is_dir = (nlen && name[nlen - 1] == '/') || (rd32(h + 38) & DOS_DIR_ATTR);
    uint64_t local = rd32(h + 42);
    if (e->usize == SATURATED || e->csize == SATURATED || local == SATURATED) {
        rc =
            read_zip64_extra(z, e, &local, h + CENTRAL_SIZE + nlen, xlen, at + CENTRAL_SIZE + nlen);
        if (rc) return rc;
    }
    rc = z->reading == CKPT_ZIP_ZIPFILE ? 0
                                        : miniz_entry_checks(z, h, at, this_disk, e->name, local);
    if (rc) return rc;
    *pos = at + CENTRAL_SIZE + nlen + xlen + clen;
    if (ckpt_add_overflow(local, z->shift, &local))
        return ckpt_err(CKPT_E_FORMAT, z->file, e->name, at,
                        "local header offset %" PRIu64 " plus the %" PRIu64
                        " bytes before the archive overflows: expected an offset inside "
                        "the input (%zu bytes)",
                        local, z->shift, z->len);
    if (local > z->len || z->len - local < LOCAL_SIZE)
        return ckpt_err(CKPT_E_TRUNCATED, z->file, e->name, at,
                        "local header offset %" PRIu64
                        " leaves no room for a 30-byte header in the input (%zu bytes)",
                        local, z->len);
    e->local_offset = local;
    return 0;
}

static int lower(char c) { return c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : (uint8_t)c; }

/* miniz's name order: bytes with ASCII letters lowered; a name that is a
 * prefix of the other comes first. <0, 0, >0. */
static int compare_names(const char *a, size_t alen, const char *b, size_t blen) {
    size_t n = alen < blen ? alen : blen, i = 0;
    /* names share long prefixes ("archive/data/"): equal words first, the
     * last one overlapping the one before, then the bytes from the first
     * that differs (all of them, ignoring case, decide) */
    uint64_t x = 0, y = 0;
    for (; i + 8 <= n; i += 8) {
        memcpy(&x, a + i, 8);
        memcpy(&y, b + i, 8);
        if (x != y) break;
    }
    if (i < n && n >= 8 && i + 8 > n) {
        memcpy(&x, a + n - 8, 8);
        memcpy(&y, b + n - 8, 8);
        if (x == y) i = n;
    }
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    /* x, y: the first unequal word, at i or at n - 8 (whose bytes below i
     * are equal): its lowest differing byte is the first */
    if (i < n && n >= 8) {
        size_t at = i + 8 <= n ? i : n - 8;
        i = at + (size_t)__builtin_ctzll(x ^ y) / 8;
    }
#endif
    for (; i < n; i++) {
        if (a[i] == b[i]) continue;
        int ca = lower(a[i]), cb = lower(b[i]);
        if (ca != cb) return ca - cb;
    }
    return (alen > blen) - (alen < blen);
}

static int name_less(const ckpt_zip *z, size_t i, size_t j) {
    const ckpt_zip_entry *x = &z->entries[i], *y = &z->entries[j];
    return compare_names(x->name, x->name_len, y->name, y->name_len) < 0;
}

/* Moves by_name[root] down the max-heap of the first `size` slots. */
static void sift_down(ckpt_zip *z, size_t root, size_t size) {
    size_t *v = z->by_name;
    for (;;) {
        size_t child = 2 * root + 1;
        if (child >= size) return;
        if (child + 1 < size && name_less(z, v[child], v[child + 1])) child++;
        if (!name_less(z, v[root], v[child])) return;
        size_t t = v[root];
        v[root] = v[child];
        v[child] = t;
        root = child;
    }
}

typedef struct named_entry {
    const char *name;
    size_t len, index;
} named_entry;

static int by_name_then_index(const void *pa, const void *pb) {
    const named_entry *x = pa, *y = pb;
    int c = compare_names(x->name, x->len, y->name, y->len);
    return c ? c : (x->index > y->index) - (x->index < y->index);
}

/* Sorts by name with a merge sort (ckpt_sort: a directory in name order
 * costs one pass, torch's "data/0".."data/N-1" a few runs, one per digit
 * count), many times faster than the heap sort on a million members. Names that are all distinct have one
 * sorted order, the heap sort's too; 0 when they are, 1 when two names
 * are equal but for case (the heap sort must decide their order),
 * CKPT_E_NOMEM. */
static int sort_distinct(ckpt_zip *z) {
    named_entry *v = ckpt_malloc(z->count * sizeof *v);
    if (!v)
        return ckpt_err(CKPT_E_NOMEM, z->file, NULL, z->cd_offset,
                        "out of memory for the index of %zu members", z->count);
    for (size_t i = 0; i < z->count; i++)
        v[i] = (named_entry){z->entries[i].name, z->entries[i].name_len, i};
    if (ckpt_sort(v, z->count, sizeof *v, by_name_then_index)) {
        ckpt_free(v);
        return ckpt_err(CKPT_E_NOMEM, z->file, NULL, z->cd_offset,
                        "out of memory for the index of %zu members", z->count);
    }
    int equal = 0;
    for (size_t i = 1; i < z->count && !equal; i++)
        equal = compare_names(v[i - 1].name, v[i - 1].len, v[i].name, v[i].len) == 0;
    for (size_t i = 0; i < z->count && !equal; i++) z->by_name[i] = v[i].index;
    ckpt_free(v);
    return equal;
}

/* The 8 bytes of w with ASCII letters lowered (miniz's case folding), all
 * at once: a byte below 0x80 whose low 7 bits lie in 'A'..'Z' gains 0x20. */
static uint64_t fold8(uint64_t w) {
    const uint64_t ones = 0x0101010101010101u, high = ones * 0x80;
    uint64_t low7 = w & ~high;
    uint64_t from_a = low7 + ones * (0x80 - 'A'), past_z = low7 + ones * (0x7F - 'Z');
    return w | (((from_a ^ past_z) & ~w & high) >> 2);
}

/* A hash of the name with ASCII case folded: names compare_names finds
 * equal hash alike. */
uint64_t ckpt_zip_name_hash(const char *s, size_t n) {
    const uint64_t k = 0xff51afd7ed558ccdu;
    uint64_t h = (n + 1) * 0x9E3779B97F4A7C15u, w;
    size_t i = 0;
    for (; n - i >= 8; i += 8) {
        memcpy(&w, s + i, 8);
        h = (h ^ fold8(w)) * k;
        h ^= h >> 29;
    }
    if (i < n) { /* the last 8 bytes, overlapping the word before: one
                    load, not a copy of n - i bytes (a call to memcpy) */
        w = 0;
        if (n >= 8)
            memcpy(&w, s + n - 8, 8);
        else
            memcpy(&w, s, n);
        h = (h ^ fold8(w)) * k;
    }
    h ^= h >> 33; /* murmur3's finish: every bit reaches the low ones */
    h *= 0xc4ceb9fe1a85ec53u;
    return h ^ h >> 33;
}

/* A name is at most this many slots past where it hashes to; beyond, the
 * table is given up for the sort (names made to collide cost at most
 * PROBES^2 / 2 comparisons, not n^2). */
#define PROBES 64u

/* The hash table of z->slots, in one pass over the names, when all of
 * them are distinct ignoring case: then a lookup has one answer, miniz's
 * too, found without the sort. 0 when built; 1 when two names are equal
 * but for case, a chain is too long or the table does not fit (the
 * sort decides); CKPT_E_NOMEM never (the sort reports it). */
static int build_table(ckpt_zip *z, ckpt_arena *a) {
    if (z->count > UINT32_MAX / 4) return 1;
    size_t size = 16;
    while (size < 2 * z->count) size *= 2;
    uint32_t *t = ckpt_arena_array(a, size, sizeof *t);
    if (!t) return 1;
    for (size_t i = 0; i < z->count; i++) {
        const ckpt_zip_entry *e = &z->entries[i];
        size_t at = (size_t)ckpt_zip_name_hash(e->name, e->name_len) & (size - 1), k = 0;
        for (; t[at] && k < PROBES; k++, at = (at + 1) & (size - 1)) {
            const ckpt_zip_entry *o = &z->entries[t[at] - 1];
            if (o->name_len == e->name_len &&
                compare_names(o->name, o->name_len, e->name, e->name_len) == 0)
                return 1;
        }
        if (k == PROBES) return 1;
        t[at] = (uint32_t)(i + 1);
    }
    z->slots = t;
    z->mask = size - 1;
    return 0;
}

/* The order miniz sorts its directory in (an in-place heap sort, so names
 * equal but for case end up in the order it leaves them, which decides
 * what a lookup finds); a hash table instead when the names are distinct
 * (build_table): 100k members in 9M instructions, not 60M to sort. */
static int build_index(ckpt_zip *z, ckpt_arena *a) {
    if (z->count == 0 || build_table(z, a) == 0) return 0;
    z->by_name = ckpt_arena_array(a, z->count, sizeof *z->by_name);
    if (!z->by_name)
        return ckpt_err(CKPT_E_NOMEM, z->file, NULL, z->cd_offset,
                        "out of memory for the index of %zu members", z->count);
    if (z->count == 1) z->by_name[0] = 0;
    int rc = z->count > 1 ? sort_distinct(z) : 0;
    if (rc < 0) return rc;
    if (rc) {
        for (size_t i = 0; i < z->count; i++) z->by_name[i] = i;
        for (size_t start = (z->count - 2) / 2 + 1; start-- > 0;) sift_down(z, start, z->count);
        for (size_t end = z->count - 1; end > 0; end--) {
            size_t t = z->by_name[end];
            z->by_name[end] = z->by_name[0];
            z->by_name[0] = t;
            sift_down(z, 0, end);
        }
    }
    for (size_t i = 1; i < z->count; i++) {
        const ckpt_zip_entry *x = &z->entries[z->by_name[i - 1]], *y = &z->entries[z->by_name[i]];
        if (compare_names(x->name, x->name_len, y->name, y->name_len) == 0) z->has_duplicates = 1;
    }
    return 0;
}

static int by_local_offset(const void *pa, const void *pb) {
    const ckpt_zip_entry *x = *(const ckpt_zip_entry *const *)pa;
    const ckpt_zip_entry *y = *(const ckpt_zip_entry *const *)pb;
    return (x->local_offset > y->local_offset) - (x->local_offset < y->local_offset);
}

/* Two entries whose local header and data ranges overlap share bytes: a
 * zip bomb's trick (one stream inflated many times) or a second reading. */
static int check_overlaps(const ckpt_zip *z, ckpt_arena *a) {
    if (z->count < 2) return 0;
    /* writers lay members out in directory order: then the entries are
     * the order a stable sort by local offset leaves, checked in place */
    size_t in_order = 1;
    while (in_order < z->count &&
           z->entries[in_order - 1].local_offset <= z->entries[in_order].local_offset)
        in_order++;
    const ckpt_zip_entry **order = NULL;
    if (in_order < z->count) {
        order = ckpt_arena_alloc_raw(a, z->count * sizeof *order); /* filled */
        if (!order)
            return ckpt_err(CKPT_E_NOMEM, z->file, NULL, z->cd_offset,
                            "out of memory for the layout of %zu members", z->count);
        for (size_t i = 0; i < z->count; i++) order[i] = &z->entries[i];
        if (ckpt_sort(order, z->count, sizeof *order, by_local_offset))
            return ckpt_err(CKPT_E_NOMEM, z->file, NULL, z->cd_offset,
                            "out of memory for the layout of %zu members", z->count);
    }
    for (size_t i = 1; i < z->count; i++) {
        const ckpt_zip_entry *p = order ? order[i - 1] : &z->entries[i - 1],
                             *e = order ? order[i] : &z->entries[i];
        if (e->local_offset < p->data_offset + p->csize)
            return ckpt_err(CKPT_E_FORMAT, z->file, e->name, e->local_offset,
                            "member overlaps member %s (its local header and data "
                            "span offsets %" PRIu64 "..%" PRIu64 "): several entries share bytes",
                            p->name, p->local_offset, p->data_offset + p->csize);
    }
    return 0;
}

/* The local headers of the first n entries, in directory order, read
 * in large windows when members lie closer than DENSE bytes apart on
 * average (a cold file then costs few large reads, not one per header),
 * peeked when far apart (PEEK). */
static int read_locals(ckpt_zip *z, size_t n) {
    size_t dense = ckpt_zip_dense_ahead(z);
    ckpt_view v = {.peek = z->count && z->cd_offset / z->count >= PEEK};
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = read_local(z, &v, dense ? dense : SPARSE_AHEAD, &z->entries[i]);
    ckpt_view_free(&v);
    return rc;
}

static int read_members(ckpt_zip *z, ckpt_arena *a) {
    int rc = read_locals(z, z->count);
    return rc ? rc : check_overlaps(z, a);
}

/* The error just recorded at the directory's entry k (k = count: after
 * all of them, by the index), reported in the order of a reader that
 * reads each entry's local header right after its central one (and the
 * overlaps after all of them): after an error in a local header of the
 * k entries before it. */
static int after_locals(ckpt_zip *z, ckpt_arena *a, size_t k) {
    ckpt_err_kept kept;
    ckpt_err_keep(&kept);
    int first = k == z->count ? read_members(z, a) : read_locals(z, k);
    return first ? first : ckpt_err_restore(&kept);
}

static int open_directory(ckpt_zip *z, ckpt_arena *a, const ckpt_limits *lim) {
    dir_info d = {0, 0, 0, 0, 0};
    int rc = read_end_records(z, &d);
    if (rc) return rc;
    z->cd_offset = d.cd_offset;
    /* every entry takes 46 bytes of a directory inside the file, so the
     * file's size bounds the count (and the work per entry): a count the
     * directory holds is no bomb. max_zip_entries, when set, is the
     * caller's own cap below that. */
    if (d.count > d.cd_size / CENTRAL_SIZE)
        return ckpt_err(CKPT_E_FORMAT, z->file, NULL, d.eocd,
                        "a central directory of %" PRIu64 " bytes cannot hold %" PRIu64
                        " entries of at least 46 bytes",
                        d.cd_size, d.count);
    if (lim->max_zip_entries && d.count > lim->max_zip_entries)
        return ckpt_err(CKPT_E_LIMIT, z->file, NULL, d.eocd,
                        "%" PRIu64 " entries exceed the limit max_zip_entries = %" PRIu64
                        " (0: as many as the file's size holds)",
                        d.count, lim->max_zip_entries);
    /* count <= cd_size / 46 <= len, so it fits size_t. */
    z->count = (size_t)d.count;
    /* read_central and read_local set every field: not zeroed first (6.4
     * MB of stores for 100k members) */
    z->entries = z->count <= SIZE_MAX / sizeof *z->entries
                     ? ckpt_arena_alloc_raw(a, z->count * sizeof *z->entries)
                     : NULL;
    if (!z->entries && z->count)
        return ckpt_err(CKPT_E_NOMEM, z->file, NULL, d.cd_offset, "out of memory for %zu members",
                        z->count);
    /* the directory is read in windows (read_end_records: it lies inside
     * the input, so the file's size bounds it); when the local headers
     * are dense, the whole file is asked for at once (up to 32 MiB), the
     * directory first: it is read first, and the read-ahead of the
     * members before it would queue ahead of it (a cold 100k-member .pt
     * waited 13 ms for its first window) */
    if (ckpt_zip_dense_ahead(z)) {
        ckpt_source_will_read(z->src, z->buf + d.cd_offset, d.cd_size);
        ckpt_source_will_need(z->src, z->buf, d.cd_offset);
    }
    ckpt_view cd = {0};
    uint64_t pos = d.cd_offset, end = d.cd_offset + d.cd_size;
    size_t i = 0;
    for (; rc == 0 && i < z->count; i++)
        rc = read_central(z, a, &cd, &pos, end, d.this_disk, &z->entries[i]);
    ckpt_view_free(&cd);
    if (rc) return after_locals(z, a, i - 1);
    if (build_index(z, a)) return after_locals(z, a, z->count);
    return 0;
}

int ckpt_zip_open_directory(ckpt_zip *z, ckpt_arena *a, const uint8_t *buf, size_t len,
                            const ckpt_source *src, const char *file, const ckpt_limits *lim,
                            ckpt_zip_reading how) {
    memset(z, 0, sizeof *z);
    z->buf = buf;
    z->len = len;
    z->src = src;
    z->file = file;
    z->reading = how;
    int rc = open_directory(z, a, lim);
    if (rc) memset(z, 0, sizeof *z);
    return rc;
}

int ckpt_zip_open_members(ckpt_zip *z, ckpt_arena *a) {
    int rc = read_members(z, a);
    if (rc) memset(z, 0, sizeof *z);
    return rc;
}

int ckpt_zip_read_local(const ckpt_zip *z, ckpt_zip_entry *e) {
    ckpt_view v = {0};
    int rc = read_local(z, &v, SPARSE_AHEAD, e);
    ckpt_view_free(&v);
    return rc;
}

size_t ckpt_zip_dense_ahead(const ckpt_zip *z) {
    return z->count && z->cd_offset / z->count < DENSE ? DENSE_AHEAD : 0;
}

int ckpt_zip_open_reading(ckpt_zip *z, ckpt_arena *a, const uint8_t *buf, size_t len,
                          const ckpt_source *src, const char *file, const ckpt_limits *lim,
                          ckpt_zip_reading how) {
    int rc = ckpt_zip_open_directory(z, a, buf, len, src, file, lim, how);
    return rc ? rc : ckpt_zip_open_members(z, a);
}

int ckpt_zip_open(ckpt_zip *z, ckpt_arena *a, const uint8_t *buf, size_t len,
                  const ckpt_source *src, const char *file, const ckpt_limits *lim) {
    return ckpt_zip_open_reading(z, a, buf, len, src, file, lim, CKPT_ZIP_TORCH);
}

const ckpt_zip_entry *ckpt_zip_find(const ckpt_zip *z, const char *name) {
    size_t n = strlen(name), lo = 0, hi = z->count;
    if (z->slots) { /* names distinct: the one equal ignoring case */
        size_t at = (size_t)ckpt_zip_name_hash(name, n) & z->mask;
        for (unsigned k = 0; k < PROBES && z->slots[at]; k++, at = (at + 1) & z->mask) {
            const ckpt_zip_entry *e = &z->entries[z->slots[at] - 1];
            if (e->name_len == n && compare_names(e->name, n, name, n) == 0) return e;
        }
        return NULL;
    }
    while (lo < hi) { /* miniz's probe order: the middle of [lo, hi) */
        size_t mid = lo + (hi - 1 - lo) / 2;
        const ckpt_zip_entry *e = &z->entries[z->by_name[mid]];
        int c = compare_names(e->name, e->name_len, name, n);
        if (c == 0) return e;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

const ckpt_zip_entry *ckpt_zip_named_at(const ckpt_zip *z, size_t i, const char *dir, size_t dlen,
                                        const char *key, size_t klen) {
    if (!z->slots || i >= z->count) return NULL; /* slots: names distinct */
    const ckpt_zip_entry *e = &z->entries[i];
    return e->name_len == dlen + klen && memcmp(e->name, dir, dlen) == 0 &&
                   memcmp(e->name + dlen, key, klen) == 0
               ? e
               : NULL;
}

uint64_t ckpt_zip_budget(const ckpt_limits *lim, size_t len) {
    uint64_t by_ratio;
    if (ckpt_mul_overflow(lim->max_inflate_ratio, (uint64_t)len, &by_ratio)) by_ratio = UINT64_MAX;
    return by_ratio < lim->max_inflate_bytes ? by_ratio : lim->max_inflate_bytes;
}

static int inflate_member(const ckpt_zip *z, const ckpt_zip_entry *e, ckpt_arena *a,
                          uint64_t *budget, const uint8_t **data) {
    size_t n = (size_t)e->usize; /* ckpt_zip_check: it fits */
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
    /* csize <= len was checked by open, so the cast is exact; the
     * compressed bytes are read with pread when they are a file's */
    ckpt_view v = {0};
    const uint8_t *in;
    int rc =
        ckpt_source_view(z->src, &v, z->buf + e->data_offset, (size_t)e->csize, 0, e->name, &in);
    enum libdeflate_result r =
        rc ? LIBDEFLATE_SUCCESS
           : libdeflate_deflate_decompress(dec, in, (size_t)e->csize, out, n, &got);
    libdeflate_free_decompressor(dec);
    ckpt_view_free(&v);
    if (rc) return rc;
    if (r == LIBDEFLATE_INSUFFICIENT_SPACE)
        return ckpt_err(CKPT_E_FORMAT, z->file, e->name, e->data_offset,
                        "deflated member inflates to more than the %zu bytes "
                        "the central directory declares",
                        n);
    if (r != LIBDEFLATE_SUCCESS)
        return ckpt_err(CKPT_E_FORMAT, z->file, e->name, e->data_offset,
                        "invalid deflate data: expected a raw deflate stream of %" PRIu64
                        " bytes that inflates to %zu",
                        e->csize, n);
    if (got != n)
        return ckpt_err(CKPT_E_FORMAT, z->file, e->name, e->data_offset,
                        "deflated member inflates to %zu bytes, the central "
                        "directory declares %zu",
                        got, n);
    *data = out;
    return 0;
}

int ckpt_zip_check(const ckpt_zip *z, const ckpt_zip_entry *e, uint64_t budget) {
    if (e->flags & FLAG_UNREADABLE)
        return ckpt_err(CKPT_E_UNSUPPORTED, z->file, e->name, e->data_offset,
                        "member flags 0x%04x mark it encrypted or patched "
                        "(bits 0x1, 0x20, 0x40): torch's reader refuses it",
                        e->flags);
    if (e->is_dir && e->csize)
        return ckpt_err(CKPT_E_FORMAT, z->file, e->name, e->data_offset,
                        "directory entry holds %" PRIu64 " bytes, but torch's "
                        "reader returns none for a directory: two readings",
                        e->csize);
    if (e->method == 0) {
        if (e->csize != e->usize)
            return ckpt_err(CKPT_E_FORMAT, z->file, e->name, e->data_offset,
                            "stored member has compressed size %" PRIu64
                            " but uncompressed size %" PRIu64 "; they must be equal",
                            e->csize, e->usize);
        return 0;
    }
    if (e->method != 8)
        return ckpt_err(CKPT_E_UNSUPPORTED, z->file, e->name, e->data_offset,
                        "compression method %u is not supported (expected 0 "
                        "stored or 8 deflate)",
                        e->method);
    if (e->usize > budget)
        return ckpt_err(CKPT_E_LIMIT, z->file, e->name, e->data_offset,
                        "deflated member inflates to %" PRIu64 " bytes, more than the %" PRIu64
                        " left of this file's inflate budget (max_inflate_bytes, "
                        "at most max_inflate_ratio times the file's size)",
                        e->usize, budget);
    uint64_t most;
    if (ckpt_mul_overflow(e->csize, MAX_DEFLATE_RATIO, &most) || e->usize > most)
        return ckpt_err(CKPT_E_FORMAT, z->file, e->name, e->data_offset,
                        "deflated member declares %" PRIu64 " bytes from %" PRIu64
                        " compressed bytes, more than deflate can produce "
                        "(1032:1)",
                        e->usize, e->csize);
    if ((size_t)e->usize != e->usize)
        return ckpt_err(CKPT_E_LIMIT, z->file, e->name, e->data_offset,
                        "member of %" PRIu64 " bytes exceeds the address space", e->usize);
    return 0;
}

int ckpt_zip_read(const ckpt_zip *z, const ckpt_zip_entry *e, ckpt_arena *a, uint64_t *budget,
                  const uint8_t **data) {
    *data = NULL;
    int rc = ckpt_zip_check(z, e, *budget);
    if (rc) return rc;
    if (e->method == 8) return inflate_member(z, e, a, budget, data);
    *data = z->buf + e->data_offset;
    return 0;
}

int ckpt_zip_load(const ckpt_zip *z, const ckpt_zip_entry *e, ckpt_arena *a, uint64_t *budget,
                  const uint8_t **data) {
    int rc = ckpt_zip_read(z, e, a, budget, data);
    if (rc || e->method == 8) return rc;
    /* stored: charged like an inflated member, copied when it is a file's */
    const uint8_t *at = *data;
    *data = NULL;
    if (e->usize > *budget)
        return ckpt_err(CKPT_E_LIMIT, z->file, e->name, e->data_offset,
                        "member of %" PRIu64 " bytes is more than the %" PRIu64
                        " left of this file's budget (max_inflate_bytes, at most "
                        "max_inflate_ratio times the file's size)",
                        e->usize, *budget);
    if (ckpt_source_is_file(z->src, at, e->usize)) {
        uint8_t *copy = ckpt_arena_alloc_raw(a, (size_t)e->usize ? (size_t)e->usize : 1);
        if (!copy)
            return ckpt_err(CKPT_E_NOMEM, z->file, e->name, e->data_offset,
                            "out of memory for %" PRIu64 " bytes", e->usize);
        if ((rc = ckpt_source_read(z->src, at, copy, (size_t)e->usize, e->name))) return rc;
        at = copy;
    }
    *budget -= e->usize;
    *data = at;
    return 0;
}

/* Buffers of the pread that a CRC of a file's bytes goes through. */
#define CRC_WINDOW ((size_t)1 << 20)

int ckpt_zip_check_crc(const ckpt_zip *z, const ckpt_zip_entry *e, const uint8_t *data) {
    uint32_t crc = 0;
    ckpt_view v = {0};
    int rc = 0;
    for (uint64_t done = 0; rc == 0 && done < e->usize;) {
        size_t k = e->usize - done < CRC_WINDOW ? (size_t)(e->usize - done) : CRC_WINDOW;
        const uint8_t *p;
        rc = ckpt_source_view(z->src, &v, data + done, k, 0, e->name, &p);
        if (rc == 0) crc = libdeflate_crc32(crc, p, k);
        done += k;
    }
    ckpt_view_free(&v);
    if (rc) return rc;
    if (crc != e->crc32)
        return ckpt_err(CKPT_E_CHECKSUM, z->file, e->name, e->data_offset,
                        "CRC-32 of the data is 0x%08" PRIx32
                        ", the central directory says 0x%08" PRIx32,
                        crc, e->crc32);
    return 0;
}
