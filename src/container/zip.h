/* zip.h - a read-only ZIP container reader for torch.save archives.
 *
 * Reads the directory exactly as torch's reader does: miniz 3.0.2
 * (torch 2.x) and 2.1.0 (torch 1.x), mz_zip_reader_init with flags 0, as
 * PyTorchStreamReader calls it. That is:
 *   - the end record is the "PK\5\6" closest to the end of the input that
 *     leaves room for its 22 bytes, searched in 4 KiB steps back to about
 *     64 KiB (its comment is not checked);
 *   - a ZIP64 locator right before it is followed to the offset it
 *     declares; only a "PK\6\6" record there turns on ZIP64, else the
 *     classic end record is used as it is;
 *   - the central-directory offset is absolute (no shift for bytes before
 *     the archive);
 *   - the per-entry checks of mz_zip_reader_read_central_dir;
 *   - member lookup (mz_zip_reader_locate_file, flags 0): ASCII
 *     case-insensitive binary search over miniz's heap sort of the names,
 *     so "a/DATA.PKL" answers "a/data.pkl", and which of two names equal
 *     but for case is found is miniz's choice, reproduced here.
 * Where a second common reader (Python's zipfile: np.load of .npz,
 * picklescan) would read another directory from the same bytes (a ZIP64
 * record elsewhere than right before its locator, a directory that does
 * not end where the end records begin), open fails: two readings.
 * ckpt is stricter than miniz in a few places (a NUL in a name, a local
 * header that is not valid for every entry, members that overlap); it
 * refuses, never reads differently. Sizes, CRC and method come from the
 * central directory; the data offset from the local header's name and
 * extra lengths (FORMATS.md §2.3). */
#ifndef CKPT_ZIP_H
#define CKPT_ZIP_H

#include "base/alloc.h"
#include "base/source.h"
#include "ckpt.h"

typedef struct ckpt_zip_entry { /* 64 bytes: 100k members take 6.4 MB */
    const char *name;           /* central-directory name, NUL-terminated */
    uint64_t local_offset;      /* absolute offset of the local header */
    uint64_t data_offset;       /* absolute offset of the member's data */
    uint64_t csize;             /* compressed size (central directory) */
    uint64_t usize;             /* uncompressed size (central directory) */
    uint32_t crc32;             /* CRC-32 from the central directory */
    uint16_t method;            /* 0 stored, 8 deflated, other: unsupported */
    uint16_t flags;             /* general-purpose bit flags (central) */
    uint16_t name_len;          /* the directory's 16-bit name length */
    uint8_t is_dir;             /* miniz's directory test (name ends in '/',
                                   or DOS directory attribute): torch reads
                                   no bytes for it */
    uint8_t local_name_differs; /* the local header's name bytes differ from
                                   the central name (a scanner bypass, §5.5) */
    uint8_t crc_seen;           /* crc_read holds the CRC-32 of the member's
                                   uncompressed bytes, read from the input
                                   since open (ckpt_zip_crc_seen) */
    uint32_t crc_read;
} ckpt_zip_entry;

/* Whose reading of the directory: torch's (miniz's, refused where
 * Python's zipfile would read another), miniz's alone, or zipfile's
 * (offsets shifted by the bytes before the archive; the ZIP64 record
 * right before its locator; none of miniz's per-entry checks). */
typedef enum ckpt_zip_reading { CKPT_ZIP_TORCH, CKPT_ZIP_MINIZ, CKPT_ZIP_ZIPFILE } ckpt_zip_reading;

typedef struct ckpt_zip {
    ckpt_zip_entry *entries; /* in central-directory order; every
                                [data_offset, data_offset + csize) lies
                                inside buf */
    size_t count;
    /* lookup when every name is distinct, ignoring ASCII case: a hash
     * table of entry index + 1 (0: empty) in mask + 1 slots; NULL: by_name */
    uint32_t *slots;
    size_t mask;
    size_t *by_name;    /* else indices in miniz's sorted order (names
                                lowered), for lookup */
    int has_duplicates; /* two entries share a name, ignoring ASCII
                                case (which one a lookup finds is miniz's
                                choice; Python's zipfile takes another) */
    ckpt_zip_reading reading;
    int readings_differ; /* miniz and zipfile read other directories */
    uint64_t shift;      /* zipfile's reading: bytes before the archive
                                added to every offset it declares */
    uint64_t cd_offset;  /* where the central directory starts (shift
                                added): the offset of errors about it as a
                                whole */
    const uint8_t *buf;
    size_t len;
    const ckpt_source *src; /* buf's bytes are read through it (pread
                               where buf maps a file); NULL: memory */
    const char *file;       /* for error messages */
} ckpt_zip;

/* Parses the directory of buf[0..len) (borrowed; must outlive z) in
 * O(entries log entries), without touching member data, as described
 * above. Bytes of buf are read through src (base/source.h; may be NULL
 * for plain memory): where buf maps a file, never through the mapping,
 * so that a file that shrinks is CKPT_E_TRUNCATED, not SIGBUS; the end
 * records with one pread, the directory and the local headers through a
 * window each (1 MiB preads one after the other, not the whole directory
 * in memory).
 * All memory from arena `a`; `file` names the input in errors.
 * Limits: lim->max_zip_entries (and the count must fit the directory's
 * size), checked before allocating. On failure *z is zeroed.
 * Errors, each naming file, member (when known) and absolute offset:
 * CKPT_E_FORMAT (no end record, bad signature, directory outside the
 * buffer, an entry miniz rejects, NUL in a name, malformed ZIP64 extra,
 * two readings, overlapping members), CKPT_E_TRUNCATED (a local header or
 * member data past the end; no end record in a buffer that starts with a
 * local header "PK\3\4": a file cut short), CKPT_E_UNSUPPORTED
 * (multi-disk, the masked-directory flag 0x2000), CKPT_E_LIMIT,
 * CKPT_E_NOMEM. */
int ckpt_zip_open(ckpt_zip *z, ckpt_arena *a, const uint8_t *buf, size_t len,
                  const ckpt_source *src, const char *file, const ckpt_limits *lim);

/* ckpt_zip_open with the reading `how`; CKPT_ZIP_TORCH is
 * ckpt_zip_open. The scanner reads both others to see what either reader
 * would load. */
int ckpt_zip_open_reading(ckpt_zip *z, ckpt_arena *a, const uint8_t *buf, size_t len,
                          const ckpt_source *src, const char *file, const ckpt_limits *lim,
                          ckpt_zip_reading how);

/* ckpt_zip_open_reading in two steps, for a reader that has work to do
 * on one member while the others arrive from a cold file (torch.c runs
 * the pickle before the other local headers are read):
 * ckpt_zip_open_directory reads the end records and the central
 * directory (every field of each entry but local_name_differs and
 * data_offset, which its local header gives) and builds the lookup
 * (ckpt_zip_find works); ckpt_zip_open_members then reads every local
 * header and checks the overlaps. Together they report what
 * ckpt_zip_open_reading reports, the same first error (an error in the
 * directory comes after one in a local header of an entry before it).
 * On failure *z is zeroed. */
int ckpt_zip_open_directory(ckpt_zip *z, ckpt_arena *a, const uint8_t *buf, size_t len,
                            const ckpt_source *src, const char *file, const ckpt_limits *lim,
                            ckpt_zip_reading how);
int ckpt_zip_open_members(ckpt_zip *z, ckpt_arena *a);

/* Between the two steps: fills e (a copy of an entry of z) from its local
 * header, as ckpt_zip_open_members will fill the entry. Its errors, or
 * 0. */
int ckpt_zip_read_local(const ckpt_zip *z, ckpt_zip_entry *e);

/* The read-ahead for reading z's local headers or small members one
 * after another: when members lie closer than 16 KiB apart on average, 1
 * MiB (one pread serves many, and a cold file costs few large reads, not
 * one per member), else 0. */
size_t ckpt_zip_dense_ahead(const ckpt_zip *z);

/* The entry mz_zip_reader_locate_file(name, NULL, 0) finds: ASCII
 * case-insensitive, miniz's choice among names equal but for case. NULL
 * if absent. */
const ckpt_zip_entry *ckpt_zip_find(const ckpt_zip *z, const char *name);

/* The hash a name is filed under in the lookup table (ASCII case folded,
 * as lookups compare); for tests that build names to collide. */
uint64_t ckpt_zip_name_hash(const char *s, size_t n);

/* Entry i when its name is exactly `dir` followed by `key` (dlen and
 * klen bytes) and no two names in z are equal ignoring ASCII case: then
 * it is the entry ckpt_zip_find finds for that name, found without a
 * lookup (torch.save lays out the storages "archive/data/<key>" in the
 * order data.pkl first names them: each at the index after the one
 * before). NULL otherwise, i past the last entry too: look the name up. */
const ckpt_zip_entry *ckpt_zip_named_at(const ckpt_zip *z, size_t i, const char *dir, size_t dlen,
                                        const char *key, size_t klen);

/* The inflate budget of one input of `len` bytes, shared by every reader
 * of it (open, scan, verify): lim->max_inflate_bytes, and at most
 * lim->max_inflate_ratio times the input's size. */
uint64_t ckpt_zip_budget(const ckpt_limits *lim, size_t len);

/* What ckpt_zip_read checks before reading anything: 0 when e can be
 * read with `budget` bytes of inflate budget left, else its error (the
 * codes below but CKPT_E_NOMEM and invalid deflate data). Readers that
 * inflate a member only when its bytes are wanted check it at open. */
int ckpt_zip_check(const ckpt_zip *z, const ckpt_zip_entry *e, uint64_t budget);

/* *data receives the member's e->usize uncompressed bytes: stored members
 * are their address in buf (zero-copy; csize must equal usize; where buf
 * maps a file, read them with ckpt_source_read, or use ckpt_zip_load);
 * deflated
 * members are inflated (libdeflate) into the arena, refused when usize
 * exceeds *budget (zip bombs; see ckpt_zip_budget) or 1032 x csize (more
 * than deflate can produce); *budget is decreased by usize. On failure
 * *data is NULL. Errors (member and data offset named):
 * CKPT_E_UNSUPPORTED (flag bits 0x1, 0x20, 0x40, which miniz refuses; a
 * method other than 0 or 8), CKPT_E_LIMIT, CKPT_E_FORMAT (invalid deflate
 * data, inflated size differs from usize, stored sizes differ, a
 * directory entry with data: torch reads none), CKPT_E_NOMEM. */
int ckpt_zip_read(const ckpt_zip *z, const ckpt_zip_entry *e, ckpt_arena *a, uint64_t *budget,
                  const uint8_t **data);

/* ckpt_zip_read for members parsed at open (data.pkl, byteorder,
 * metadata): bytes the caller may read. A stored member is charged to
 * *budget like an inflated one (CKPT_E_LIMIT beyond it), and copied into
 * the arena with pread when it is a file's (CKPT_E_TRUNCATED / CKPT_E_IO
 * when the file shrank). */
int ckpt_zip_load(const ckpt_zip *z, const ckpt_zip_entry *e, ckpt_arena *a, uint64_t *budget,
                  const uint8_t **data);

/* Records the CRC-32 of e's n uncompressed bytes `data`, read from the
 * input since open (a stored member's bytes the local header's window
 * held; data.pkl's copy), in e->crc_read: verify compares it instead of
 * reading them again. */
void ckpt_zip_crc_seen(ckpt_zip_entry *e, const uint8_t *data, size_t n);

/* CRC-32 (libdeflate) of the member's usize uncompressed bytes `data`
 * (from ckpt_zip_read: a stored member of a file is read with pread, in
 * 1 MiB windows) against the central directory. 0, CKPT_E_TRUNCATED /
 * CKPT_E_IO (the file shrank), or CKPT_E_CHECKSUM naming the member and
 * data offset, with both CRCs in the message. torch.load ignores CRCs (§2.3): callers report, not refuse. */
int ckpt_zip_check_crc(const ckpt_zip *z, const ckpt_zip_entry *e, const uint8_t *data);

/* Whether the central directory records a CRC-32 for e. A zero field is
 * "none": torch.save writes 0 for every record under
 * torch.utils.serialization.config.save.compute_crc32 = False and for
 * the storage records of a torch.serialization.skip_data() save (miniz's
 * MZ_ZIP_FLAG_DO_NOT_COMPUTE_CRC32; torch.load checks no CRC), so such a
 * member's bytes have no checksum, and are not corrupt for that. (Data
 * whose CRC-32 is 0 loses nothing: there is nothing to compare.) */
static inline int ckpt_zip_crc_recorded(const ckpt_zip_entry *e) { return e->crc32 != 0; }

#endif
