/* source.c - pread-based copies of tensor bytes (source.h). */
#include "model/source.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "ckpt.h"

/* One pread at most this long: Linux caps a single read near 2 GiB. */
#define MAX_PREAD ((size_t)1 << 30)
#define WILLNEED_MAX ((uint64_t)32 << 20)

int ckpt_source_is_file(const ckpt_source *src, const void *p, uint64_t n) {
    const uint8_t *b = p;
    if (!src || src->fd < 0 || !src->map || b < src->map) return 0;
    uint64_t off = (uint64_t)(b - src->map);
    return off <= src->size && n <= src->size - off;
}

void (*ckpt_source_read_hook)(const ckpt_source *src, uint64_t off);

int ckpt_source_read(const ckpt_source *src, const void *p, void *dst, size_t n,
                     const char *member) {
    if (n == 0) return 0;
    if (!ckpt_source_is_file(src, p, n)) {
        memcpy(dst, p, n);
        return 0;
    }
    uint64_t off = (uint64_t)((const uint8_t *)p - src->map);
    uint8_t *d = dst;
    for (size_t done = 0; done < n;) {
        size_t want = n - done < MAX_PREAD ? n - done : MAX_PREAD;
        if (ckpt_source_read_hook) ckpt_source_read_hook(src, off + done);
        ssize_t k = pread(src->fd, d + done, want, (off_t)(off + done));
        if (k < 0 && errno == EINTR) continue;
        if (k < 0)
            return ckpt_err(CKPT_E_IO, src->path, member, off + done,
                            "cannot read %zu bytes at offset %" PRIu64 ": %s", want, off + done,
                            strerror(errno));
        if (k == 0)
            return ckpt_err(CKPT_E_TRUNCATED, src->path, member, off + done,
                            "the file ends at offset %" PRIu64 ", inside %zu bytes of "
                            "tensor data at offset %" PRIu64 " (it was %" PRIu64
                            " bytes when opened: it shrank while being read)",
                            off + done, n, off, src->size);
        done += (size_t)k;
    }
    return 0;
}

void ckpt_source_will_read(const ckpt_source *src, const void *p, uint64_t n) {
    if (!ckpt_source_is_file(src, p, n) || n == 0) return;
    off_t off = (off_t)((const uint8_t *)p - src->map);
    (void)posix_fadvise(src->fd, off, (off_t)n, POSIX_FADV_SEQUENTIAL);
    /* only the start: WILLNEED over gigabytes would queue it all at once */
    (void)posix_fadvise(src->fd, off, (off_t)(n < WILLNEED_MAX ? n : WILLNEED_MAX),
                        POSIX_FADV_WILLNEED);
}
