/* source.h - the one way the library reads an opened file's bytes.
 *
 * An opened file is mapped so that ckpt_tensor_data can lend zero-copy
 * pointers, but a mapping kills the process with SIGBUS when the file
 * shrinks under it: torch.save to the path being read, another process
 * truncating it. So the library itself never reads through the mapping:
 * tensor bytes (verify, hashes, diff, convert, ckpt_tensor_read, Python's
 * default load) and structure alike (zip directory and local headers,
 * pickles, legacy storage counts, index JSON, DCP metadata, the head that
 * detection reads) are copied with pread(2) from the file descriptor kept
 * open beside the mapping, into private buffers: a file that shrank is
 * then an error naming file, member and offset. Bytes that do not come
 * from a file (ckpt_open_memory, inflated zip members, trees built in
 * memory) are copied with memcpy, or lent as they are (ckpt_source_view).
 * Only the public zero-copy calls hand out mapped memory (ckpt/file.h).
 *
 * A source is addressed by pointers into its mapping, the addresses the
 * readers stored in each storage's `data`: the file offset of p is
 * p - map. The library installs no signal handler. */
#ifndef CKPT_SOURCE_H
#define CKPT_SOURCE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

typedef struct ckpt_source {
    int fd;             /* read-only descriptor of the mapped file, or -1 */
    const uint8_t *map; /* its mapping: map[i] is the byte at offset i */
    uint64_t size;      /* bytes mapped (the size at open) */
    const char *path;   /* for error messages */
} ckpt_source;

/* Copies the n bytes at p into dst. When src is non-NULL, has a descriptor
 * and [p, p+n) lies in its mapping, they are read with pread (retrying
 * EINTR and short reads; 1 GiB per call at most); otherwise p is ordinary
 * memory and is copied. Returns 0, CKPT_E_TRUNCATED when the file ends
 * before the range does (it shrank after it was opened), or CKPT_E_IO;
 * errors name src->path, `member` and the absolute offset. */
int ckpt_source_read(const ckpt_source *src, const void *p, void *dst, size_t n,
                     const char *member);

/* A private window on a file, for readers that look at many small
 * records (local headers, storage counts): one pread serves the records
 * that follow it. Zero-initialise; ckpt_view_free releases it. */
typedef struct ckpt_view {
    uint8_t *buf; /* owned, cap bytes (ckpt_malloc) */
    size_t cap;
    uint64_t off; /* file offset of buf[0] */
    size_t len;   /* bytes read there */
    int peek;     /* set by readers that look at a few bytes inside
                     data that is read later as a stream (a zip's local
                     headers between large members, the scan's sniff of
                     a storage's first and last bytes): pages of the
                     file that were not cached before a read are dropped
                     from the cache after it (POSIX_FADV_DONTNEED), so
                     the stream's read-ahead later runs through them in
                     one piece. A cached page between a stream's pages
                     restarts the kernel's read-ahead small, in order-0
                     pages: a cold 64 MiB .pt of 16 members read 1.4x
                     slower, with 1.5x the CPU, than with none (and
                     ckpt_source_will_stream). */
} ckpt_view;

/* *out points at the n bytes at p (as ckpt_source_read addresses them),
 * valid until the next call on v. Bytes that are memory are lent as they
 * are; bytes of the file are served from v when it holds them, else read
 * into v with one pread of n bytes plus up to `ahead` more (clipped to
 * the size at open; a file that shrank may give fewer of those; v->peek:
 * see above). Errors as ckpt_source_read, CKPT_E_NOMEM. */
int ckpt_source_view_read(const ckpt_source *src, ckpt_view *v, const void *p, size_t n,
                          size_t ahead, const char *member, const uint8_t **out);
static inline int ckpt_source_view(const ckpt_source *src, ckpt_view *v, const void *p, size_t n,
                                   size_t ahead, const char *member, const uint8_t **out) {
    /* inline: bytes v holds already (a zip's local headers, 100k of them
     * served by one window; the storages a verify reads) */
    if (n && v->len && src && (const uint8_t *)p >= src->map) {
        uint64_t off = (uint64_t)((const uint8_t *)p - src->map);
        if (off >= v->off && off - v->off <= v->len && n <= v->len - (off - v->off)) {
            *out = v->buf + (off - v->off);
            return 0;
        }
    }
    return ckpt_source_view_read(src, v, p, n, ahead, member, out);
}

/* Whether the n bytes at h lie in v's window (h from ckpt_source_view
 * on v): a record's header viewed, the rest of it is served without
 * another call when they do (a zip's 100k directory entries). */
static inline int ckpt_view_holds(const ckpt_view *v, const uint8_t *h, size_t n) {
    return v->len && h >= v->buf && (size_t)(h - v->buf) <= v->len &&
           n <= v->len - (size_t)(h - v->buf);
}

void ckpt_view_free(ckpt_view *v);

/* The first window of ckpt_source_window, and the size up to which a
 * stream that outgrows it is read whole at the next try. */
#define CKPT_SOURCE_WINDOW ((size_t)4 << 20)
#define CKPT_SOURCE_WINDOW_ALL ((size_t)64 << 20)

/* A reader of a stream whose end is only known once it is parsed (a
 * pickle): called with the first len bytes of the stream at `at`; last: len
 * is all of them. Returns CKPT_E_TRUNCATED, when not last, to be called
 * again over more bytes (undoing what it did with these), else its
 * answer. */
typedef int (*ckpt_window_fn)(void *ctx, const uint8_t *at, size_t len, int last);

/* Runs fn over the n bytes at p (addressed as ckpt_source_read addresses
 * them) read into v with pread, in a window that grows until fn is done
 * with it (fn answers other than CKPT_E_TRUNCATED, or was given all n):
 * `first` bytes first (0: CKPT_SOURCE_WINDOW; a caller that expects the
 * stream to fill n gives n); then all n when they are at most
 * CKPT_SOURCE_WINDOW_ALL or less than four windows, else four times more
 * (CKPT_SOURCE_WINDOW_ALL at least). So a stream up to 64 MiB costs at
 * most one extra run over 4 MiB, a longer one at most about twice its
 * work, and a short stream at the head of a large file (a legacy .pt's
 * pickles before its storages) reads no more than the windows it needs.
 * Bytes that are memory are lent whole (one call, last = 1). fn's answer,
 * or the read's error (ckpt_source_view). */
int ckpt_source_window(const ckpt_source *src, ckpt_view *v, const void *p, size_t n, size_t first,
                       const char *member, ckpt_window_fn fn, void *ctx);

/* 0 when src's file is as long as when it was opened (or src reads no
 * file), else CKPT_E_TRUNCATED naming src->path and the offset where it
 * ends now: for readers that answer from what they read, and must not
 * answer from a file that shrank while they read it (CKPT_E_IO when it
 * cannot be checked). */
int ckpt_source_check_size(const ckpt_source *src);

/* Fault injection for tests: when set, called before every pread with the
 * source and the range about to be read (tests truncate the file there,
 * or right after it, deterministically, between two windows of a job or
 * two reads of an open). NULL in production. */
extern void (*ckpt_source_read_hook)(const ckpt_source *src, uint64_t off, size_t n);

/* Hints that [p, p+n) of src will be read once, front to back, soon:
 * POSIX_FADV_SEQUENTIAL (a larger readahead window) and WILLNEED for
 * its first 32 MiB. A no-op
 * without a descriptor or outside the mapping. */
void ckpt_source_will_read(const ckpt_source *src, const void *p, uint64_t n);

/* Hints that all of [p, p+n) of src will be read soon, not front to
 * back: WILLNEED over all of it (32 MiB at most), so that the kernel
 * reads it while the caller works on what came first (a zip's directory,
 * then its local headers; a cold 100k-member .pt of 30 MB: the local
 * headers past 16 MiB were read one window at a time after the pickle
 * ran). A no-op without a descriptor or outside the mapping. */
void ckpt_source_will_need(const ckpt_source *src, const void *p, uint64_t n);

/* Hints that src's file is read front to back from its start on
 * (POSIX_FADV_SEQUENTIAL: the kernel's read-ahead window doubled), and
 * asks for its first sixteenth at once, 32 MiB at most (WILLNEED). Less
 * than ckpt_source_will_read asks for: WILLNEED fills the page cache in
 * order-0 pages, read-ahead in large folios (a cold 64 MiB .pt: 32 MiB
 * asked for cost 1.8x the CPU of none). None at all was worse at 1 GiB
 * on the project's VM (2.5x torch.load's time, 3x the CPU, not
 * understood; the first 32 MiB asked for: on par). Measured in
 * bench_python's cases, one process, interleaved. A no-op without a
 * descriptor. */
void ckpt_source_will_stream(const ckpt_source *src);

/* 1 when reading [p, p+n) goes to the file (pread), 0 when it is memory. */
int ckpt_source_is_file(const ckpt_source *src, const void *p, uint64_t n);

/* Opens path read-only the one way the library opens a file it reads:
 * without waiting (O_NONBLOCK: opening a FIFO does not wait for a writer)
 * and only a regular file (a FIFO or a device would block a read or never
 * end, a directory has no bytes). Returns the descriptor, with its fstat
 * in *st when st is non-NULL, or -1 with errno set (EISDIR, EINVAL for
 * anything else that is no regular file) and *why saying why. A directory that an attacker filled
 * (a FIFO named LATEST, *.safetensors, a Trainer file) cannot hang a
 * reader. */
int ckpt_open_regular(const char *path, struct stat *st, const char **why);

/* The whole of the regular file `path` (a JSON file: an index, a Trainer
 * state, a pipeline's model_index.json), read once, if it is at most max
 * bytes: *out a ckpt_malloc'd copy NUL-terminated, *len its length.
 * CKPT_E_IO (not a regular file, cannot open), CKPT_E_LIMIT, CKPT_E_NOMEM. */
int ckpt_read_whole(const char *path, uint64_t max, char **out, size_t *len);

#endif
