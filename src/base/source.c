/* source.c - pread-based copies of a file's bytes (source.h). */
#include "base/source.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/error.h"
#include "ckpt.h"

/* One pread at most this long: Linux caps a single read near 2 GiB. */
#define MAX_PREAD ((size_t)1 << 30)
#define WILLNEED_MAX ((uint64_t)32 << 20)

int ckpt_open_regular(const char *path, struct stat *st, const char **why) {
    struct stat own;
    if (!st) st = &own;
    *why = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        *why = strerror(errno);
        return -1;
    }
    int err = 0;
    if (fstat(fd, st) != 0)
        *why = strerror(err = errno);
    else if (S_ISDIR(st->st_mode))
        *why = "is a directory", err = EISDIR;
    else if (!S_ISREG(st->st_mode))
        *why = "not a regular file", err = EINVAL;
    if (!*why) return fd;
    close(fd);
    errno = err;
    return -1;
}

int ckpt_source_is_file(const ckpt_source *src, const void *p, uint64_t n) {
    const uint8_t *b = p;
    if (!src || src->fd < 0 || !src->map || b < src->map) return 0;
    uint64_t off = (uint64_t)(b - src->map);
    return off <= src->size && n <= src->size - off;
}

void (*ckpt_source_read_hook)(const ckpt_source *src, uint64_t off, size_t n);

/* Reads [off, off + want) into dst with pread, retrying EINTR and short
 * reads; the file may end after `need` bytes (read-ahead). *got: bytes
 * read. CKPT_E_TRUNCATED when it ends before `need`. */
static int pread_at(const ckpt_source *src, uint64_t off, uint8_t *dst, size_t want, size_t need,
                    const char *member, size_t *got) {
    size_t done = 0;
    *got = 0; /* also on an I/O error: pread_peek reads it */
    while (done < want) {
        size_t ask = want - done < MAX_PREAD ? want - done : MAX_PREAD;
        if (ckpt_source_read_hook) ckpt_source_read_hook(src, off + done, ask);
        ssize_t k = pread(src->fd, dst + done, ask, (off_t)(off + done));
        if (k < 0 && errno == EINTR) continue;
        if (k < 0)
            return ckpt_err_os(errno, src->path, member, off + done,
                               "cannot read %zu bytes at offset %" PRIu64 ": %s", ask, off + done,
                               strerror(errno));
        if (k == 0) break;
        done += (size_t)k;
    }
    *got = done;
    if (done < need)
        return ckpt_err(CKPT_E_TRUNCATED, src->path, member, off + done,
                        "the file ends at offset %" PRIu64 ", inside %zu bytes at offset %" PRIu64
                        " (it was %" PRIu64 " bytes when opened: it shrank while being read)",
                        off + done, need, off, src->size);
    return 0;
}

/* pread_at for a view with peek set: the bytes from the page cache when
 * it holds them (preadv2 with RWF_NOWAIT starts no read), else read and
 * their pages dropped again. */
static int pread_peek(const ckpt_source *src, uint64_t off, uint8_t *dst, size_t want, size_t need,
                      const char *member, size_t *got) {
#ifdef RWF_NOWAIT
    if (ckpt_source_read_hook) ckpt_source_read_hook(src, off, want);
    struct iovec io = {dst, want};
    ssize_t k = preadv2(src->fd, &io, 1, (off_t)off, RWF_NOWAIT);
    if (k >= 0 && (size_t)k >= need) {
        *got = (size_t)k;
        return 0;
    }
    int cold = k > 0 || errno == EAGAIN; /* else RWF_NOWAIT is not supported here */
    int rc = pread_at(src, off, dst, want, need, member, got);
    /* the first page was not cached (EAGAIN) or only the first k bytes
     * were: from there on, whole pages (DONTNEED keeps a page the range
     * covers in part) */
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t lo = (off + (k > 0 ? (uint64_t)k : 0)) & ~(page - 1);
    uint64_t hi = (off + *got + page - 1) & ~(page - 1);
    if (rc == 0 && cold && hi > lo)
        (void)posix_fadvise(src->fd, (off_t)lo, (off_t)(hi - lo), POSIX_FADV_DONTNEED);
    return rc;
#else
    return pread_at(src, off, dst, want, need, member, got);
#endif
}

int ckpt_source_read(const ckpt_source *src, const void *p, void *dst, size_t n,
                     const char *member) {
    if (n == 0) return 0;
    if (!ckpt_source_is_file(src, p, n)) {
        memcpy(dst, p, n);
        return 0;
    }
    size_t got;
    return pread_at(src, (uint64_t)((const uint8_t *)p - src->map), dst, n, n, member, &got);
}

int ckpt_source_view_read(const ckpt_source *src, ckpt_view *v, const void *p, size_t n,
                          size_t ahead, const char *member, const uint8_t **out) {
    *out = p;
    if (n == 0 || !ckpt_source_is_file(src, p, n)) return 0;
    uint64_t off = (uint64_t)((const uint8_t *)p - src->map);
    if (v->len && off >= v->off && off - v->off <= v->len && n <= v->len - (off - v->off)) {
        *out = v->buf + (off - v->off);
        return 0;
    }
    /* n <= size - off (ckpt_source_is_file) */
    size_t want = src->size - off - n < ahead ? (size_t)(src->size - off) : n + ahead;
    if (v->peek) {
        /* to the end of the last page: a second look near the first
         * (the scan's sniffs of a member's first bytes) is served here,
         * not read again after its pages were dropped */
        uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE), end = off + want;
        end = (end + page - 1) / page * page;
        if (end > src->size) end = src->size;
        want = (size_t)(end - off);
    }
    if (want > v->cap) { /* read again whole below: nothing to keep */
        ckpt_free(v->buf);
        v->cap = v->len = 0;
        if (!(v->buf = ckpt_malloc(want)))
            return ckpt_err(CKPT_E_NOMEM, src->path, member, off,
                            "out of memory for %zu bytes at offset %" PRIu64, want, off);
        v->cap = want;
    }
    v->len = 0;
    size_t got;
    int rc = v->peek ? pread_peek(src, off, v->buf, want, n, member, &got)
                     : pread_at(src, off, v->buf, want, n, member, &got);
    if (rc) return rc;
    v->off = off;
    v->len = got;
    *out = v->buf;
    return 0;
}

void ckpt_view_free(ckpt_view *v) {
    ckpt_free(v->buf);
    *v = (ckpt_view){0};
}

void ckpt_source_will_read(const ckpt_source *src, const void *p, uint64_t n) {
    if (!ckpt_source_is_file(src, p, n) || n == 0) return;
    off_t off = (off_t)((const uint8_t *)p - src->map);
    (void)posix_fadvise(src->fd, off, (off_t)n, POSIX_FADV_SEQUENTIAL);
    /* only the start: WILLNEED over gigabytes would queue it all at once */
    (void)posix_fadvise(src->fd, off, (off_t)(n < WILLNEED_MAX ? n : WILLNEED_MAX),
                        POSIX_FADV_WILLNEED);
}

/* Linux reads at most max(read_ahead_kb, max_sectors_kb) of one WILLNEED
 * (force_page_cache_ra), 16 MiB on the project's VM, 256 KiB where both
 * are small: asked for in pieces no larger, all of it is read. */
#define WILLNEED_PIECE ((uint64_t)256 << 10)

void ckpt_source_will_need(const ckpt_source *src, const void *p, uint64_t n) {
    if (!ckpt_source_is_file(src, p, n)) return;
    uint64_t off = (uint64_t)((const uint8_t *)p - src->map);
    if (n > WILLNEED_MAX) n = WILLNEED_MAX;
    for (uint64_t done = 0; done < n; done += WILLNEED_PIECE) {
        uint64_t k = n - done < WILLNEED_PIECE ? n - done : WILLNEED_PIECE;
        (void)posix_fadvise(src->fd, (off_t)(off + done), (off_t)k, POSIX_FADV_WILLNEED);
    }
}

void ckpt_source_will_stream(const ckpt_source *src) {
    if (!src || src->fd < 0) return;
    (void)posix_fadvise(src->fd, 0, (off_t)src->size, POSIX_FADV_SEQUENTIAL);
    uint64_t n = src->size / 16 < WILLNEED_MAX ? src->size / 16 : WILLNEED_MAX; /* source.h */
    if (n) (void)posix_fadvise(src->fd, 0, (off_t)n, POSIX_FADV_WILLNEED);
}

int ckpt_source_window(const ckpt_source *src, ckpt_view *v, const void *p, size_t n, size_t first,
                       const char *member, ckpt_window_fn fn, void *ctx) {
    if (!ckpt_source_is_file(src, p, n)) return fn(ctx, p, n, 1);
    if (!first) first = CKPT_SOURCE_WINDOW;
    size_t want = n < first ? n : first;
    for (;;) {
        const uint8_t *at;
        int rc = ckpt_source_view(src, v, p, want, 0, member, &at);
        if (rc) return rc;
        rc = fn(ctx, at, want, want == n);
        if (rc != CKPT_E_TRUNCATED || want == n) return rc;
        if (n <= CKPT_SOURCE_WINDOW_ALL || n - want < 3 * want)
            want = n;
        else
            want = 4 * want < CKPT_SOURCE_WINDOW_ALL ? CKPT_SOURCE_WINDOW_ALL : 4 * want;
    }
}

int ckpt_source_check_size(const ckpt_source *src) {
    struct stat st;
    if (!src || src->fd < 0) return 0;
    if (fstat(src->fd, &st) != 0)
        return ckpt_err_os(errno, src->path, NULL, CKPT_NO_OFFSET, "cannot stat: %s",
                           strerror(errno));
    if ((uint64_t)st.st_size >= src->size) return 0;
    return ckpt_err(CKPT_E_TRUNCATED, src->path, NULL, (uint64_t)st.st_size,
                    "the file ends at offset %llu (it was %llu bytes when opened: it shrank "
                    "while being read)",
                    (unsigned long long)st.st_size, (unsigned long long)src->size);
}

int ckpt_read_whole(const char *path, uint64_t max, char **out, size_t *len) {
    struct stat st;
    const char *why;
    int fd = ckpt_open_regular(path, &st, &why);
    size_t got = 0;
    char *buf;

    *out = NULL;
    if (fd < 0) return ckpt_err(CKPT_E_IO, path, NULL, CKPT_NO_OFFSET, "cannot read: %s", why);
    if ((uint64_t)st.st_size > max) {
        close(fd);
        return ckpt_err(CKPT_E_LIMIT, path, NULL, CKPT_NO_OFFSET,
                        "JSON file of %lld bytes exceeds the limit of %llu", (long long)st.st_size,
                        (unsigned long long)max);
    }
    buf = ckpt_malloc((size_t)st.st_size + 1);
    if (buf == NULL) {
        close(fd);
        return ckpt_err(CKPT_E_NOMEM, path, NULL, CKPT_NO_OFFSET, "out of memory");
    }
    while (got < (size_t)st.st_size) {
        ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);

        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    buf[got] = '\0';
    *out = buf;
    *len = got;
    return 0;
}
