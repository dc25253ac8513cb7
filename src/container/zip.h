/* zip.h - a read-only ZIP container reader for torch.save archives.
 *
 * Reads the central directory (classic and ZIP64), located through the
 * end-of-central-directory record searched backwards from the end of the
 * buffer (so archives with a prefix of foreign bytes are found). Sizes,
 * CRC and method come from the central directory; the data offset comes
 * from the local header's name and extra lengths (FORMATS.md §2.3). Every
 * offset and length is checked against the buffer before use. */
#ifndef CKPT_ZIP_H
#define CKPT_ZIP_H

#include "base/alloc.h"
#include "ckpt.h"

typedef struct ckpt_zip_entry {
    const char *name;       /* central-directory name, NUL-terminated */
    size_t name_len;
    uint64_t local_offset;  /* absolute offset of the local header */
    uint64_t data_offset;   /* absolute offset of the member's data */
    uint64_t csize;         /* compressed size (central directory) */
    uint64_t usize;         /* uncompressed size (central directory) */
    uint32_t crc32;         /* CRC-32 from the central directory */
    uint16_t method;        /* 0 stored, 8 deflated, other: unsupported */
    uint16_t flags;         /* general-purpose bit flags (central) */
    int local_name_differs; /* the local header's name bytes differ from
                               the central name (a scanner bypass, §5.5) */
} ckpt_zip_entry;

typedef struct ckpt_zip {
    ckpt_zip_entry *entries; /* in central-directory order; every
                                [data_offset, data_offset + csize) lies
                                inside buf */
    size_t count;
    size_t *by_name;         /* indices sorted by name, for lookup */
    uint64_t archive_offset; /* bytes of foreign prefix before the archive
                                (offsets in the directory are relative to it;
                                entry offsets above are absolute): where the
                                directory really ends minus its declared size
                                and offset */
    int has_duplicates;      /* two entries share a name */
    const uint8_t *buf;
    size_t len;
    const char *file;        /* for error messages */
} ckpt_zip;

/* Parses the directory of buf[0..len) (borrowed; must outlive z) in
 * O(entries), without touching member data. The last "PK\5\6" within the
 * final 22 + 65535 bytes is the end record; a ZIP64 locator right before it
 * selects the ZIP64 end record's counts, size and offset. All memory from
 * arena `a`; `file` names the input in errors. Limits:
 * lim->max_zip_entries (and the count must fit the directory's size),
 * checked before allocating. On failure *z is zeroed.
 * Errors, each naming file, member (when known) and absolute offset:
 * CKPT_E_FORMAT (no EOCD, bad signature, directory outside the buffer, NUL
 * in a name, malformed ZIP64 extra), CKPT_E_TRUNCATED (a local header or
 * member data past the end; no EOCD in a buffer that starts with a local
 * header "PK\3\4": a file cut short), CKPT_E_UNSUPPORTED (multi-disk),
 * CKPT_E_LIMIT, CKPT_E_NOMEM. */
int ckpt_zip_open(ckpt_zip *z, ckpt_arena *a, const uint8_t *buf, size_t len,
                  const char *file, const ckpt_limits *lim);

/* Exact-name lookup (binary search, names compared as bytes). With
 * duplicate names, the first in central-directory order. NULL if absent. */
const ckpt_zip_entry *ckpt_zip_find(const ckpt_zip *z, const char *name);

/* *data receives the member's e->usize uncompressed bytes: stored members
 * are borrowed from buf (zero-copy; csize must equal usize); deflated
 * members are inflated (libdeflate) into the arena, refused when usize
 * exceeds *budget (zip bombs) or 1032 x csize (more than deflate can
 * produce); *budget is decreased by usize. On failure *data is NULL.
 * Errors (member and data offset named): CKPT_E_UNSUPPORTED (encryption
 * bit 0x1, a method other than 0 or 8), CKPT_E_LIMIT, CKPT_E_FORMAT
 * (invalid deflate data, inflated size differs from usize, stored sizes
 * differ), CKPT_E_NOMEM. */
int ckpt_zip_read(const ckpt_zip *z, const ckpt_zip_entry *e, ckpt_arena *a,
                  uint64_t *budget, const uint8_t **data);

/* CRC-32 (libdeflate) of the member's usize uncompressed bytes `data`
 * (from ckpt_zip_read) against the central directory. 0, or
 * CKPT_E_CHECKSUM naming the member and data offset, with both CRCs in
 * the message. torch.load ignores CRCs (§2.3): callers report, not refuse. */
int ckpt_zip_check_crc(const ckpt_zip *z, const ckpt_zip_entry *e,
                       const uint8_t *data);

#endif
