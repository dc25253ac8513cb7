/* atomic.c - atomic, durable replacement of one file (see atomic.h).
 *
 * The temporary file is ".<basename>.tmp-<pid>-<16 hex digits>" in the
 * target's directory: the same file system (so rename is atomic), hidden,
 * and recognisable by `ckpt store gc` (src/store.c), which removes those
 * whose writer is gone. Every system call that can fail goes through a
 * wrapper that the fault-injection hook can make fail. */
#include "container/atomic.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckpt.h"

#include "base/alloc.h"
#include "base/error.h"
#include "base/hex.h"

/* Longest part of the target's basename kept in a temporary name, so that
 * "." + base + ".tmp-" + pid + "-" + 16 hex stays under NAME_MAX (255). */
#define TMP_BASE_MAX 200
/* Largest single write(2): Linux transfers at most 0x7ffff000 bytes. */
#define MAX_IO ((size_t)1 << 30)

/* ------------------------------------------------------------ faults */

enum { OP_OPEN, OP_WRITE, OP_READ, OP_FSYNC, OP_RENAME, OP_REMOVE, OP_COUNT };
static const char *const op_names[OP_COUNT] = {"open",  "write",  "read",
                                               "fsync", "rename", "remove"};

/* Per operation: calls left before the injected failure (0 = disarmed). */
static struct {
    uint64_t countdown;
    int err;
} faults[OP_COUNT];

void ckpt_atomic_fail_nth(const char *op, uint64_t n, int err) {
    for (int i = 0; i < OP_COUNT; i++) {
        if (op && strcmp(op, op_names[i]) == 0) {
            faults[i].countdown = n;
            faults[i].err = err;
        }
    }
}

/* 1 (with errno set) when this call of `op` is the one to fail; a
 * negative err: the process is killed there (crash tests). */
static int injected(int op) {
    if (faults[op].countdown == 0 || --faults[op].countdown != 0) return 0;
    if (faults[op].err < 0) raise(-faults[op].err);
    errno = faults[op].err;
    return 1;
}

static int sys_open(const char *path, int flags, mode_t mode) {
    return injected(OP_OPEN) ? -1 : open(path, flags, mode);
}

static ssize_t sys_pwrite(int fd, const void *p, size_t n, uint64_t off) {
    return injected(OP_WRITE) ? -1 : pwrite(fd, p, n, (off_t)off);
}

static ssize_t sys_pread(int fd, void *p, size_t n, uint64_t off) {
    return injected(OP_READ) ? -1 : pread(fd, p, n, (off_t)off);
}

static int sys_fsync(int fd) {
    int rc;
    if (injected(OP_FSYNC)) return -1;
    do rc = fsync(fd);
    while (rc != 0 && errno == EINTR);
    return rc;
}

static int sys_rename(const char *from, const char *to) {
    return injected(OP_RENAME) ? -1 : rename(from, to);
}

int ckpt_atomic_remove_at(int dirfd, const char *name) {
    return injected(OP_REMOVE) ? -1 : unlinkat(dirfd, name, 0);
}

int ckpt_atomic_rename(const char *from, const char *to) { return sys_rename(from, to); }

int ckpt_atomic_exchange(const char *a, const char *b) {
    return injected(OP_RENAME) ? -1 : renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE);
}

int ckpt_atomic_mkdir(const char *path) { return injected(OP_OPEN) ? -1 : mkdir(path, 0755); }

/* ------------------------------------------------------------ names */

static char *dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = ckpt_malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

/* 16 random hex digits; getrandom, or clock and a counter where it is
 * unavailable (uniqueness still comes from O_EXCL and the pid). */
static void random_hex(char out[17]) {
    static unsigned counter;
    uint64_t r;
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        r = ((uint64_t)ts.tv_sec * 1000000007u) ^ (uint64_t)ts.tv_nsec ^
            ((uint64_t)++counter << 40);
    }
    ckpt_hex64(out, r);
}

char *ckpt_atomic_temp_name(const char *path) {
    const char *slash = strrchr(path, '/');
    size_t dirlen = slash ? (size_t)(slash - path) + 1 : 0;
    const char *base = path + dirlen;
    size_t baselen = strlen(base);
    char hex[17];
    if (baselen > TMP_BASE_MAX) baselen = TMP_BASE_MAX;
    random_hex(hex);
    /* "." + ".tmp-" + pid (<= 10) + "-" + 16 hex + NUL */
    size_t cap = dirlen + baselen + 40;
    char *t = ckpt_malloc(cap);
    if (t)
        snprintf(t, cap, "%.*s.%.*s.tmp-%ld-%s", (int)dirlen, path, (int)baselen, base,
                 (long)getpid(), hex);
    return t;
}

int ckpt_atomic_parse_temp(const char *file, long *pid) {
    const char *t = NULL;
    for (const char *p = strstr(file, ".tmp-"); p; p = strstr(p + 1, ".tmp-")) t = p;
    if (file[0] != '.' || !t || t < file + 2) return 0;
    const char *p = t + 5;
    long v = 0;
    int digits = 0;
    for (; isdigit((unsigned char)*p); p++, digits++) {
        if (digits == 9) return 0; /* pids stay below 2^22 on Linux */
        v = v * 10 + (*p - '0');
    }
    if (digits == 0 || v == 0 || *p++ != '-') return 0;
    for (int i = 0; i < 16; i++, p++)
        if (!isdigit((unsigned char)*p) && !(*p >= 'a' && *p <= 'f')) return 0;
    if (*p != '\0') return 0;
    *pid = v;
    return 1;
}

/* Removes the files in the directory fd (flat), then `name` from the
 * directory `at`; 0 or an errno. */
static int remove_flat(int fd, int at, const char *name) {
    int dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
    if (!d) {
        if (dup_fd >= 0) close(dup_fd);
        return errno;
    }
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            (void)ckpt_atomic_remove_at(dirfd(d), e->d_name);
    closedir(d);
    return unlinkat(at, name, AT_REMOVEDIR) == 0 || errno == ENOENT ? 0 : errno;
}

int ckpt_atomic_reap_at(int dirfd, const char *name, const struct stat *st, time_t now,
                        uint64_t stale_s, int dirs) {
    long pid;
    int dir = S_ISDIR(st->st_mode);
    if (!(S_ISREG(st->st_mode) || (dirs && dir)) || !ckpt_atomic_parse_temp(name, &pid)) return 0;
    int fd = openat(dirfd, name,
                    O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | (dir ? O_DIRECTORY : 0));
    if (fd < 0) return 0;
    int locked = flock(fd, LOCK_EX | LOCK_NB) != 0;
    int no_flock =
        locked && (errno == ENOLCK || errno == EOPNOTSUPP || errno == EINVAL || errno == ENOSYS);
    int dead = kill((pid_t)pid, 0) != 0 && errno == ESRCH;
    /* a file's mtime can be a second ahead of time(): the kernel stamps
     * files from a finer clock than time()'s (multigrain timestamps, Linux
     * 6.13): an age below 0 is 0, which any stale_s of 0 covers */
    int old = stale_s == 0 || (now > st->st_mtime && (uint64_t)(now - st->st_mtime) >= stale_s);
    /* unlocked and (dead or old): the PID check only covers the moment
     * between a temporary file's creation and its writer's lock */
    if ((locked && !no_flock) || (!dead && !old)) {
        close(fd);
        return 0;
    }
    int err = dir ? remove_flat(fd, dirfd, name)
              : ckpt_atomic_remove_at(dirfd, name) != 0 && errno != ENOENT ? errno
                                                                           : 0;
    close(fd);
    return err ? -err : 1;
}

/* The directory of `path` ("." when it has no slash) into buf. No
 * allocation: it runs after the rename, where failing would be a lie. */
static int dir_of(const char *path, char *buf, size_t cap) {
    const char *slash = strrchr(path, '/');
    size_t n = !slash ? 1 : slash == path ? 1 : (size_t)(slash - path);
    if (n >= cap) return -1;
    memcpy(buf, slash ? path : ".", n);
    buf[n] = '\0';
    return 0;
}

/* ------------------------------------------------------------ state */

/* Closes and removes the temporary file (if any) and forgets its name. */
static void discard_temp(ckpt_atomic *a) {
    if (!a->tmp) return;
    if (a->fd >= 0) close(a->fd);
    a->fd = -1;
    if (a->lock >= 0) close(a->lock);
    a->lock = -1;
    unlink(a->tmp);
    ckpt_free(a->tmp);
    a->tmp = NULL;
}

static void release(ckpt_atomic *a) {
    discard_temp(a);
    ckpt_free(a->pending);
    a->pending = NULL;
    ckpt_free(a->target);
    a->target = NULL;
}

/* Records the first failure (`op` on the target, with errno), removes the
 * temporary file at once so a full disk gets its space back, and makes the
 * error sticky. */
static int fail(ckpt_atomic *a, const char *op, int err, uint64_t offset) {
    const char *target = a->target ? a->target : "";
    ckpt_err_os(err, target, NULL, offset, "%s failed for %s: %s (temporary file %s)", op, target,
                strerror(err), a->tmp ? a->tmp : "none");
    discard_temp(a);
    a->error = CKPT_E_IO;
    return CKPT_E_IO;
}

/* ------------------------------------------------------------ API */

/* Marks the temporary file as having a live writer: an exclusive flock
 * held until the descriptor closes, which the kernel drops when the
 * process dies (also in another PID namespace). ckpt_store_gc removes only
 * temporary files whose lock it can take. Returns 0 when gc unlinked the
 * file between its creation and the lock (it must not be used), else 1;
 * where flock is unsupported the file is used unlocked. */
static int claim(int fd) {
    struct stat st;
    while (flock(fd, LOCK_EX) != 0)
        if (errno != EINTR) return 1;
    return fstat(fd, &st) != 0 || st.st_nlink > 0;
}

/* The file size limit, RLIMIT_FSIZE (UINT64_MAX: none). The kernel
 * answers a write past it with SIGXFSZ, whose default action kills the
 * process (core dump): put() refuses such a write with EFBIG instead, so
 * that a `ulimit -f` or a quota-like limit is an error, never a death. */
static uint64_t fsize_limit(void) {
    struct rlimit r;
    if (getrlimit(RLIMIT_FSIZE, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return UINT64_MAX;
    return (uint64_t)r.rlim_cur;
}

int ckpt_atomic_begin(ckpt_atomic *a, const char *target) {
    *a = (ckpt_atomic){.fd = -1, .limit = fsize_limit(), .lock = -1};
    size_t len = target ? strlen(target) : 0;
    if (len == 0 || target[len - 1] == '/') {
        a->error = CKPT_E_INVALID_ARG;
        return ckpt_err(CKPT_E_INVALID_ARG, target ? target : "", NULL, CKPT_NO_OFFSET,
                        "target path must name a file");
    }
    a->target = dup_str(target);
    a->pending = ckpt_malloc(CKPT_ATOMIC_PENDING + CKPT_ATOMIC_WINDOW);
    if (!a->target || !a->pending) {
        release(a);
        a->error = CKPT_E_NOMEM;
        return ckpt_err(CKPT_E_NOMEM, target, NULL, CKPT_NO_OFFSET,
                        "out of memory starting a write");
    }
    /* A clash needs the same pid and 64 random bits: retry a few times. */
    for (int tries = 0; tries < 8; tries++) {
        a->tmp = ckpt_atomic_temp_name(target);
        if (!a->tmp) {
            release(a);
            a->error = CKPT_E_NOMEM;
            return ckpt_err(CKPT_E_NOMEM, target, NULL, CKPT_NO_OFFSET,
                            "out of memory starting a write");
        }
        a->fd = sys_open(a->tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (a->fd >= 0) {
            int live = claim(a->fd);
            if (live) return 0;
            /* gc removed it between the open and the lock: a new name */
            close(a->fd);
            a->fd = -1;
            ckpt_free(a->tmp);
            a->tmp = NULL;
            continue;
        }
        int err = errno;
        if (err != EEXIST || tries == 7) {
            /* not fail(): the name may belong to another writer */
            ckpt_err_os(err, target, NULL, CKPT_NO_OFFSET,
                        "open failed for %s: cannot create temporary file %s: %s", target, a->tmp,
                        strerror(err));
            break;
        }
        ckpt_free(a->tmp);
        a->tmp = NULL;
    }
    ckpt_free(a->tmp);
    a->tmp = NULL;
    release(a);
    a->error = CKPT_E_IO;
    return CKPT_E_IO;
}

static int put(ckpt_atomic *a, const void *p, size_t n, uint64_t off) {
    const unsigned char *b = p;
    uint64_t end;
    if (a->error) return a->error;
    if (!a->tmp) {
        a->error = CKPT_E_INVALID_ARG;
        return ckpt_err(CKPT_E_INVALID_ARG, a->target, NULL, CKPT_NO_OFFSET,
                        "write without a successful ckpt_atomic_begin");
    }
    if (ckpt_add_overflow(off, n, &end) || end > (uint64_t)INT64_MAX)
        return fail(a, "write", EFBIG, off);
    if (end > a->limit)
        return fail(a, "write (past RLIMIT_FSIZE, ulimit -f)", EFBIG,
                    a->limit > off ? a->limit : off);
    while (n > 0) {
        ssize_t w = sys_pwrite(a->fd, b, n < MAX_IO ? n : MAX_IO, off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return fail(a, "write", w < 0 ? errno : ENOSPC, off);
        b += w;
        n -= (size_t)w;
        off += (uint64_t)w;
    }
    if (end > a->written) a->written = end;
    return 0;
}

/* ------------------------------------------------------------ read-back */

/* The file does not hold at `off` what was written there. */
static int mismatch(ckpt_atomic *a, uint64_t off) {
    const char *target = a->target ? a->target : "";
    ckpt_err(CKPT_E_CHECKSUM, target, NULL, off,
             "the temporary file %s does not read back as written: byte %" PRIu64
             " differs (or is missing); nothing was committed",
             a->tmp ? a->tmp : "none", off);
    discard_temp(a);
    a->error = CKPT_E_CHECKSUM;
    return CKPT_E_CHECKSUM;
}

/* Compares the file's [off, off+n) with want (NULL: zeros, a gap). */
static int read_back(ckpt_atomic *a, const uint8_t *want, uint64_t n, uint64_t off) {
    uint8_t *got = a->pending + CKPT_ATOMIC_PENDING;
    while (n > 0) {
        size_t len = n < CKPT_ATOMIC_WINDOW ? (size_t)n : CKPT_ATOMIC_WINDOW;
        ssize_t r = sys_pread(a->fd, got, len, off);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return fail(a, "read back", errno, off);
        if (r == 0) return mismatch(a, off);
        size_t k = (size_t)r, i = 0;
        if (want ? memcmp(got, want, k) != 0 : got[0] != 0 || memcmp(got, got + 1, k - 1) != 0) {
            while (i < k && got[i] == (want ? want[i] : 0)) i++;
            return mismatch(a, off + i);
        }
        if (want) want += k;
        n -= k;
        off += k;
    }
    return 0;
}

/* Compares the collected writes, [checked, written), with the file. */
static int drain(ckpt_atomic *a) {
    if (a->error) return a->error;
    int rc = read_back(a, a->pending, a->written - a->checked, a->checked);
    if (rc == 0) a->checked = a->written;
    return rc;
}

/* ------------------------------------------------------------ writes */

#define WRITEBACK ((uint64_t)32 << 20)

/* Windows compared, and two windows behind the writeback just started,
 * dropped from the page cache (from the first window: keeping files
 * smaller than a quarter of free memory cached saved 5% of a 1 GiB
 * convert's CPU time, but cost 25% at 4 GiB, where the writer's new
 * pages were fresh memory instead of the ones just dropped). Not waited
 * for: pages still dirty or under writeback stay (DONTNEED skips them;
 * the next call tries them again, then the kernel reclaims them as
 * usual), so the writer never stalls on the disk here. */
static void drop_behind(ckpt_atomic *a) {
    uint64_t end = a->flushed > 2 * WRITEBACK ? a->flushed - 2 * WRITEBACK : 0;
    if (end > a->checked) end = a->checked;
    if (end <= a->dropped) return;
    /* the previous window again: what was still in flight then */
    uint64_t from = a->dropped > 2 * WRITEBACK ? a->dropped - 2 * WRITEBACK : 0;
    (void)posix_fadvise(a->fd, (off_t)from, (off_t)(end - from), POSIX_FADV_DONTNEED);
    a->dropped = end;
}

/* Writes below this size are collected (copied into a->pending) and
 * compared a window at a time; larger ones are compared straight from the
 * caller's bytes. A tensor's first and last pieces end and start on the
 * window grid, so are up to a window each: copying them cost 7% of a 64
 * MiB convert's instructions, where reading back on their own costs a
 * pread each (the ones before them are drained first). */
#define COLLECT_BELOW ((size_t)16 << 10)

int ckpt_atomic_write(ckpt_atomic *a, const void *p, size_t n) {
    uint64_t off = a->written;
    int rc;
    if (!a->error && a->tmp && n < COLLECT_BELOW && n <= CKPT_ATOMIC_PENDING - (off - a->checked)) {
        /* small: collected, compared a window at a time */
        rc = put(a, p, n, off);
        if (rc == 0 && n) memcpy(a->pending + (off - a->checked), p, n);
    } else {
        /* large: a window written, then compared with the caller's bytes
         * while both are still in the CPU's cache (tensor.h's
         * ckpt_tensor_stream_at hands over pieces on the same grid) */
        const uint8_t *b = p;
        size_t done = 0;
        rc = a->tmp ? drain(a) : 0;
        do {
            /* windows end on the file's grid of CKPT_ATOMIC_WINDOW */
            size_t k = CKPT_ATOMIC_WINDOW - (size_t)((off + done) % CKPT_ATOMIC_WINDOW);
            if (k > n - done) k = n - done;
            if (rc == 0) rc = put(a, b + done, k, off + done);
            if (rc == 0) rc = read_back(a, b + done, k, off + done);
            if (rc == 0) a->checked = a->written;
            done += k;
        } while (rc == 0 && done < n);
    }
#ifdef SYNC_FILE_RANGE_WRITE
    if (rc == 0 && a->written - a->flushed >= WRITEBACK) {
        (void)sync_file_range(a->fd, (off_t)a->flushed, (off_t)(a->written - a->flushed),
                              SYNC_FILE_RANGE_WRITE);
        a->flushed = a->written;
        drop_behind(a);
    }
#endif
    return rc;
}

int ckpt_atomic_write_fd(ckpt_atomic *a, int fd, const char *path, unsigned char *buf, size_t cap,
                         uint64_t *n, void (*copied)(void *ctx, uint64_t len), void *ctx) {
    int rc = 0;
    *n = 0;
    while (rc == 0) {
        ssize_t k = read(fd, buf, cap);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0)
            return ckpt_err(CKPT_E_IO, path, NULL, *n, "cannot read %s: %s", path, strerror(errno));
        if (k == 0) break;
        rc = ckpt_atomic_write(a, buf, (size_t)k);
        *n += (uint64_t)k;
        if (rc == 0 && copied) copied(ctx, (uint64_t)k);
    }
    return rc;
}

int ckpt_atomic_pwrite(ckpt_atomic *a, const void *p, size_t n, uint64_t off) {
    /* what is collected first, so only the patch (and a gap) is new */
    int rc = a->tmp ? drain(a) : 0;
    uint64_t end = a->written;
    if (rc == 0) rc = put(a, p, n, off);
    if (rc == 0 && off > end) rc = read_back(a, NULL, off - end, end);
    if (rc == 0) rc = read_back(a, p, n, off);
    if (rc == 0) a->checked = a->written;
    return rc;
}

int ckpt_atomic_is_backup(const char *name) {
    size_t n = strlen(name), k = sizeof CKPT_ATOMIC_BACKUP - 1;
    const char *slash = strrchr(name, '/');
    size_t stem = n - (size_t)(slash ? slash + 1 - name : 0);
    return stem > k && strcmp(name + n - k, CKPT_ATOMIC_BACKUP) == 0;
}

/* Keeps the current target as target.bak: a hard link at a temporary name
 * renamed over the .bak, so both names hold a complete file at every
 * moment. Nothing to do when the target does not exist yet. */
static int backup_target(ckpt_atomic *a) {
    struct stat st;
    if (lstat(a->target, &st) != 0)
        return errno == ENOENT ? 0 : fail(a, "stat", errno, CKPT_NO_OFFSET);
    size_t len = strlen(a->target);
    char *bak = ckpt_malloc(len + sizeof CKPT_ATOMIC_BACKUP);
    char *tmp = NULL;
    int rc = 0;
    if (bak) {
        memcpy(bak, a->target, len);
        memcpy(bak + len, CKPT_ATOMIC_BACKUP, sizeof CKPT_ATOMIC_BACKUP);
        tmp = ckpt_atomic_temp_name(bak);
    }
    if (!tmp) {
        rc = fail(a, "backup", ENOMEM, CKPT_NO_OFFSET);
    } else if (link(a->target, tmp) != 0) {
        rc = fail(a, "link (backup)", errno, CKPT_NO_OFFSET);
    } else if (sys_rename(tmp, bak) != 0) {
        int err = errno;
        unlink(tmp);
        rc = fail(a, "rename (backup)", err, CKPT_NO_OFFSET);
    }
    ckpt_free(tmp);
    ckpt_free(bak);
    return rc;
}

/* fsync of a file or directory through the fault-injection hooks; 0 or
 * the errno, *op naming the step that failed. File systems that cannot
 * sync a directory answer EINVAL: nothing to do there. */
static int fsync_errno(const char *path, int directory, const char **op) {
    *op = directory ? "open of directory" : "open";
    int fd = sys_open(path, O_RDONLY | O_CLOEXEC | (directory ? O_DIRECTORY : O_NOFOLLOW), 0);
    if (fd < 0) return errno;
    *op = directory ? "fsync of directory" : "fsync";
    int err = sys_fsync(fd) == 0 || (directory && errno == EINVAL) ? 0 : errno;
    close(fd);
    return err;
}

static int fsync_dir_errno(const char *dir, const char **op) { return fsync_errno(dir, 1, op); }

int ckpt_atomic_sync_file(const char *path) {
    const char *op;
    int err = fsync_errno(path, 0, &op);
    return err ? ckpt_err(CKPT_E_IO, path, NULL, CKPT_NO_OFFSET, "%s of %s failed: %s", op, path,
                          strerror(err))
               : 0;
}

int ckpt_atomic_sync_dir(const char *dir) {
    const char *op;
    int err = fsync_dir_errno(dir, &op);
    return err ? ckpt_err(CKPT_E_IO, dir, NULL, CKPT_NO_OFFSET, "%s %s failed: %s", op, dir,
                          strerror(err))
               : 0;
}

/* fsync of the target's directory, which makes the rename durable. */
static int sync_dir(const ckpt_atomic *a) {
    char dir[PATH_MAX];
    int err = ENAMETOOLONG;
    const char *op = "fsync of directory";
    if (dir_of(a->target, dir, sizeof dir) == 0)
        err = fsync_dir_errno(dir, &op);
    else
        dir[0] = '\0';
    if (err)
        ckpt_err(CKPT_E_IO, a->target, NULL, CKPT_NO_OFFSET,
                 "%s %s failed for %s: %s; the file was renamed into place "
                 "but the rename may not survive a crash",
                 op, dir, a->target, strerror(err));
    return err ? CKPT_E_IO : 0;
}

/* 1 when `name` starts with "." + the first TMP_BASE_MAX bytes of base +
 * suffix + ".tmp-": a temporary name ckpt_atomic_temp_name gives base+suffix. */
static int temp_of(const char *name, const char *base, const char *suffix) {
    char stem[TMP_BASE_MAX + 8];
    int n = snprintf(stem, sizeof stem, "%s%s", base, suffix);
    size_t len = n < 0 ? 0 : (size_t)n < TMP_BASE_MAX ? (size_t)n : TMP_BASE_MAX;
    return name[0] == '.' && strncmp(name + 1, stem, len) == 0 &&
           strncmp(name + 1 + len, ".tmp-", 5) == 0;
}

void ckpt_atomic_reap_temps(const char *target) {
    char dir[PATH_MAX];
    if (!target || dir_of(target, dir, sizeof dir) != 0) return;
    const char *slash = strrchr(target, '/');
    const char *base = slash ? slash + 1 : target;
    if (strlen(base) > TMP_BASE_MAX) return; /* a prefix other names may share */
    DIR *d = opendir(dir);
    if (!d) return;
    time_t now = time(NULL);
    size_t removed = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        struct stat st;
        if ((temp_of(e->d_name, base, "") || temp_of(e->d_name, base, CKPT_ATOMIC_BACKUP)) &&
            fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
            ckpt_atomic_reap_at(dirfd(d), e->d_name, &st, now, CKPT_ATOMIC_STALE_S, 1) == 1)
            removed++;
    }
    closedir(d);
    if (removed) {
        const char *op;
        (void)fsync_dir_errno(dir, &op);
    }
}

int ckpt_atomic_finish(ckpt_atomic *a) {
    if (a->error) return a->error;
    if (!a->tmp)
        return ckpt_err(CKPT_E_INVALID_ARG, a->target ? a->target : "", NULL, CKPT_NO_OFFSET,
                        "finish without a successful ckpt_atomic_begin");
    if (a->fd < 0) return 0; /* finished already */
    if (drain(a) != 0) return a->error;
    if (sys_fsync(a->fd) != 0) return fail(a, "fsync", errno, CKPT_NO_OFFSET);
    /* a duplicate keeps the writer's lock (claim) until the rename, past
     * the close whose error must be checked */
    int fd = a->fd;
    a->fd = -1;
    a->lock = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (close(fd) != 0) return fail(a, "close", errno, CKPT_NO_OFFSET);
    ckpt_free(a->pending);
    a->pending = NULL;
    return 0;
}

int ckpt_atomic_commit(ckpt_atomic *a, int backup) {
    int rc = a->error;
    if (!rc && !a->tmp)
        rc = ckpt_err(CKPT_E_INVALID_ARG, a->target, NULL, CKPT_NO_OFFSET,
                      "commit without a successful ckpt_atomic_begin");
    if (rc) {
        /* the first failure's record stands; just clean up */
        release(a);
        return rc;
    }
    rc = ckpt_atomic_finish(a);
    if (!rc && backup) rc = backup_target(a);
    if (!rc && sys_rename(a->tmp, a->target) != 0) rc = fail(a, "rename", errno, CKPT_NO_OFFSET);
    if (!rc) {
        /* the temporary name is gone: the target is the new file now */
        if (a->lock >= 0) close(a->lock);
        a->lock = -1;
        ckpt_free(a->tmp);
        a->tmp = NULL;
        a->renamed = 1;
        if (!a->in_a_row) rc = sync_dir(a);
        if (rc == 0 && !a->in_a_row) ckpt_atomic_reap_temps(a->target);
    }
    release(a);
    if (rc) a->error = rc;
    return rc;
}

void ckpt_atomic_abort(ckpt_atomic *a) { release(a); }

/* ------------------------------------------------------------ directories */

/* 1 when path is an empty directory. */
static int empty_dir(const char *path) {
    DIR *dir = opendir(path);
    if (!dir) return 0;
    int empty = 1;
    for (struct dirent *e; empty && (e = readdir(dir));)
        empty = !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..");
    closedir(dir);
    return empty;
}

int ckpt_atomic_dir_begin(ckpt_atomic_dir *d, const char *target) {
    *d = (ckpt_atomic_dir){.lock = -1};
    size_t len = target ? strlen(target) : 0;
    while (len > 1 && target[len - 1] == '/') len--;
    if (len == 0 || (len == 1 && target[0] == '/'))
        return ckpt_err(CKPT_E_INVALID_ARG, target ? target : "", NULL, CKPT_NO_OFFSET,
                        "target path must name a directory to create");
    d->target = ckpt_malloc(len + 1);
    if (!d->target) return ckpt_err_nomem();
    memcpy(d->target, target, len);
    d->target[len] = '\0';
    struct stat st;
    if (lstat(d->target, &st) == 0 && (!S_ISDIR(st.st_mode) || !empty_dir(d->target))) {
        ckpt_err(CKPT_E_INVALID_ARG, d->target, NULL, CKPT_NO_OFFSET,
                 "%s exists%s: a directory is written only where there is none (or an "
                 "empty one)",
                 d->target, S_ISDIR(st.st_mode) ? " and is not empty" : " and is not a directory");
        ckpt_atomic_dir_abort(d);
        return CKPT_E_INVALID_ARG;
    }
    for (int tries = 0; tries < 8; tries++) {
        d->tmp = ckpt_atomic_temp_name(d->target);
        if (!d->tmp) {
            ckpt_atomic_dir_abort(d);
            return ckpt_err_nomem();
        }
        if (ckpt_atomic_mkdir(d->tmp) == 0) {
            /* the writer's lock, as claim() takes a file's; a directory
             * reaped between the mkdir and the lock is made again */
            d->lock = open(d->tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
            if (d->lock < 0 || claim(d->lock)) return 0;
            close(d->lock);
            d->lock = -1;
            ckpt_free(d->tmp);
            d->tmp = NULL;
            continue;
        }
        int err = errno;
        if (err != EEXIST || tries == 7) {
            ckpt_err(CKPT_E_IO, d->target, NULL, CKPT_NO_OFFSET,
                     "mkdir failed for %s: cannot create temporary directory %s: %s", d->target,
                     d->tmp, strerror(err));
            ckpt_free(d->tmp);
            d->tmp = NULL;
            ckpt_atomic_dir_abort(d);
            return CKPT_E_IO;
        }
        ckpt_free(d->tmp);
        d->tmp = NULL;
    }
    return CKPT_E_IO; /* not reached */
}

void ckpt_atomic_dir_abort(ckpt_atomic_dir *d) {
    if (d->tmp) {
        if (d->lock >= 0) close(d->lock);
        DIR *dir = opendir(d->tmp);
        if (dir) {
            for (struct dirent *e; (e = readdir(dir));)
                if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
                    (void)unlinkat(dirfd(dir), e->d_name, 0);
            closedir(dir);
        }
        (void)rmdir(d->tmp);
        ckpt_free(d->tmp);
    }
    ckpt_free(d->target);
    *d = (ckpt_atomic_dir){0};
}

int ckpt_atomic_dir_commit(ckpt_atomic_dir *d) {
    if (!d->tmp)
        return ckpt_err(CKPT_E_INVALID_ARG, d->target ? d->target : "", NULL, CKPT_NO_OFFSET,
                        "commit without a successful ckpt_atomic_dir_begin");
    int rc = ckpt_atomic_sync_dir(d->tmp);
    if (rc == 0 && sys_rename(d->tmp, d->target) != 0)
        rc = ckpt_err(CKPT_E_IO, d->target, NULL, CKPT_NO_OFFSET,
                      "rename failed for %s: %s (temporary directory %s)", d->target,
                      strerror(errno), d->tmp);
    if (rc) {
        ckpt_atomic_dir_abort(d);
        return rc;
    }
    ckpt_free(d->tmp);
    d->tmp = NULL;
    if (d->lock >= 0) close(d->lock);
    d->lock = -1;
    char parent[PATH_MAX];
    const char *op = "fsync of directory";
    int err =
        dir_of(d->target, parent, sizeof parent) == 0 ? fsync_dir_errno(parent, &op) : ENAMETOOLONG;
    if (err)
        rc = ckpt_err(CKPT_E_IO, d->target, NULL, CKPT_NO_OFFSET,
                      "%s failed for %s: %s; the directory was renamed into place but the "
                      "rename may not survive a crash",
                      op, d->target, strerror(err));
    else
        ckpt_atomic_reap_temps(d->target);
    ckpt_atomic_dir_abort(d);
    return rc;
}

/* ------------------------------------------------------------ public handle */

/* ckpt_atomic_file (ckpt/write.h): one ckpt_atomic behind a handle, for
 * writers outside the library. */
struct ckpt_atomic_file {
    ckpt_atomic a;
};

int ckpt_atomic_file_begin(ckpt_atomic_file **out, const char *target) {
    if (!out || !target)
        return ckpt_err(CKPT_E_INVALID_ARG, target ? target : "", NULL, CKPT_NO_OFFSET,
                        "ckpt_atomic_file_begin needs an out pointer and a target");
    *out = NULL;
    ckpt_atomic_file *f = ckpt_malloc(sizeof *f);
    if (!f) return ckpt_err(CKPT_E_NOMEM, target, NULL, CKPT_NO_OFFSET, "out of memory");
    int rc = ckpt_atomic_begin(&f->a, target);
    if (rc) {
        ckpt_free(f);
        return rc;
    }
    *out = f;
    return 0;
}

int ckpt_atomic_file_write(ckpt_atomic_file *f, const void *p, size_t n) {
    if (!f || (!p && n))
        return ckpt_err(CKPT_E_INVALID_ARG, "", NULL, CKPT_NO_OFFSET,
                        "ckpt_atomic_file_write needs a file and bytes");
    return ckpt_atomic_write(&f->a, p, n);
}

int ckpt_atomic_file_commit(ckpt_atomic_file *f) {
    if (!f)
        return ckpt_err(CKPT_E_INVALID_ARG, "", NULL, CKPT_NO_OFFSET,
                        "ckpt_atomic_file_commit needs a file");
    int rc = ckpt_atomic_commit(&f->a, 0);
    ckpt_free(f);
    return rc;
}

void ckpt_atomic_file_abort(ckpt_atomic_file *f) {
    if (!f) return;
    ckpt_atomic_abort(&f->a);
    ckpt_free(f);
}
