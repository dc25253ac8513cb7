/* tar.h - the member list of a tar archive as Python's tarfile reads it
 * (tarfile.open(mode="r:"), then getmember), for torch < 0.4 checkpoints:
 * torch.load tries tarfile first on any file at offset 0 and, on a
 * TarError, reads the file as stacked pickles instead.
 *
 * tarfile's rules, followed here (CPython Lib/tarfile.py): a header is any
 * 512-byte block that is not all NUL and whose checksum field (octal
 * text, or base-256 when it starts with 0x80/0xFF) equals the unsigned or
 * the signed byte sum with the field read as spaces; "ustar" is not
 * needed (V7 headers count). The other number fields must parse too. The
 * name is the NUL-terminated name field, prefixed by "prefix/" when the
 * ustar prefix field is not empty; directories lose trailing slashes.
 * Members follow one another (data rounded up to 512 bytes) until an
 * all-NUL, invalid or short header; a member whose data runs past the end
 * makes the listing raise ReadError. Lookups take the last member of a
 * name.
 *
 * Number fields are read as tarfile.nti reads them: base-256 (negative
 * after 0xFF), or int(text, 8) with its signs, "0o" prefix and
 * underscores. What ckpt does not follow (PAX and GNU long-name headers,
 * sparse files, links and devices, numbers beyond int64, a negative size)
 * makes the answer UNSURE. */
#ifndef CKPT_TAR_H
#define CKPT_TAR_H

#include "base/alloc.h"
#include "base/source.h"

typedef enum ckpt_tar_answer {
    CKPT_TAR_NO,    /* tarfile.open raises ReadError: not a tar */
    CKPT_TAR_YES,   /* members listed (or the listing raises ReadError) */
    CKPT_TAR_UNSURE /* tarfile may read it in a way ckpt does not follow */
} ckpt_tar_answer;

typedef struct ckpt_tar_member {
    const char *name; /* NUL-terminated, in the arena */
    size_t name_len;
    uint8_t type;    /* the type byte: '0', '\0', '7' and unknown types
                         hold data; '5' is a directory */
    uint64_t header; /* offset of its header */
    uint64_t data;   /* offset of its data */
    uint64_t size;
} ckpt_tar_member;

typedef struct ckpt_tar {
    ckpt_tar_answer answer;
    ckpt_tar_member *members;
    size_t count;
    int listing_fails; /* getmember raises ReadError (data past the end):
                          torch then reads the file as a pickle */
    uint64_t at;       /* offset of the header an UNSURE answer or a
                          failing listing is about */
    const char *why;   /* static text for both */
} ckpt_tar;

/* Reads the directory of p[0..n) (borrowed), at most max_members
 * members (more is UNSURE; 0: as many as n holds, 512 bytes each). The
 * headers are read through src (base/source.h; NULL for memory): with
 * pread where p maps a file, one block each. Returns 0, CKPT_E_NOMEM, or
 * the read's error (CKPT_E_TRUNCATED when the file shrank, CKPT_E_IO). */
int ckpt_tar_read(ckpt_tar *t, ckpt_arena *a, const uint8_t *p, size_t n, const ckpt_source *src,
                  uint64_t max_members);

/* The first block alone: would tarfile.open take p for a tar? */
ckpt_tar_answer ckpt_tar_sniff(const uint8_t *p, size_t n);

/* The last member named `name` (tarfile.getmember), or NULL. */
const ckpt_tar_member *ckpt_tar_find(const ckpt_tar *t, const char *name);

#endif
