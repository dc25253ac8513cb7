/* source.h - the one way the library reads tensor bytes.
 *
 * An opened file is mapped so that readers can parse its structure (and so
 * that ckpt_tensor_data can lend zero-copy pointers), but a mapping kills
 * the process with SIGBUS when the file shrinks under it: torch.save to
 * the path being read, another process truncating it. So every path where
 * the library itself reads tensor bytes (verify, hashes, diff, convert,
 * ckpt_tensor_read, Python's default load) copies them with pread(2) from
 * the file descriptor kept open beside the mapping, into private buffers:
 * a file that shrank is then an error naming file, member and offset.
 * Bytes that do not come from a file (ckpt_open_memory, inflated zip
 * members, trees built in memory) are copied with memcpy.
 *
 * A source is addressed by pointers into its mapping, the addresses the
 * readers stored in each storage's `data`: the file offset of p is
 * p - map. The library installs no signal handler. */
#ifndef CKPT_SOURCE_H
#define CKPT_SOURCE_H

#include <stddef.h>
#include <stdint.h>

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

/* Fault injection for tests: when set, called before every pread with the
 * source and the offset about to be read (tests truncate the file there,
 * deterministically, between two windows of a job). NULL in production. */
extern void (*ckpt_source_read_hook)(const ckpt_source *src, uint64_t off);

/* Hints that [p, p+n) of src will be read once, front to back, soon:
 * POSIX_FADV_SEQUENTIAL (a larger readahead window) and WILLNEED for
 * its first 32 MiB. A no-op
 * without a descriptor or outside the mapping. */
void ckpt_source_will_read(const ckpt_source *src, const void *p, uint64_t n);

/* 1 when reading [p, p+n) goes to the file (pread), 0 when it is memory. */
int ckpt_source_is_file(const ckpt_source *src, const void *p, uint64_t n);

#endif
