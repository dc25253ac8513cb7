/* atomic.h - atomic, durable replacement of one file (the libgit2
 * git_filebuf model): a uniquely named temporary file in the target's
 * directory (".<basename>.tmp-<pid>-<16 hex>", O_CREAT|O_EXCL, mode 0644
 * less the umask), full write, fsync, rename over the target, fsync of the
 * directory. Errors are sticky: after the first failed write every later
 * call is a no-op and commit reports the first error. Any failure removes
 * the temporary file and leaves the target untouched.
 *
 *     ckpt_atomic a;
 *     int rc = ckpt_atomic_begin(&a, path);
 *     if (rc == 0) rc = write_everything(&a);   // ckpt_atomic_write...
 *     if (rc == 0) rc = ckpt_atomic_commit(&a, backup);
 *     else ckpt_atomic_abort(&a);
 *
 * While it is written, the temporary file carries an exclusive flock
 * (released by the kernel when the writer dies, in whatever PID namespace):
 * ckpt_store_gc removes a temporary file only when it can take that lock.
 *
 * Every byte is read back from the temporary file and compared with what
 * was written before commit renames it (CKPT_E_CHECKSUM, naming the first
 * differing offset, otherwise): small writes are collected and compared a
 * window at a time, large ones and patches right after the write, while
 * their pages are still in the page cache. This proves the file holds
 * exactly the bytes its writer produced (the writers compute their CRC-32s
 * and digests from those same bytes): a lost or misplaced write, a patch
 * that clobbers data, or another process writing into the temporary file
 * before the comparison is caught. It reads the page cache, not the
 * device: the medium's durability is fsync's promise. Windows that are
 * compared and already on disk are dropped from the page cache
 * (posix_fadvise DONTNEED), so a file larger than free memory neither evicts the input it
 * is converted from nor is itself read back from disk.
 *
 * Error messages name the operation ("open", "write", "fsync", "close",
 * "rename", "link (backup)"...), the target and errno's text; the error
 * record's file is the target. */
#ifndef CKPT_ATOMIC_H
#define CKPT_ATOMIC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>

typedef struct ckpt_atomic {
    int fd;           /* the temporary file, -1 when closed */
    char *target;     /* ckpt_malloc'd copy of the target path */
    char *tmp;        /* ckpt_malloc'd temporary path, NULL once gone */
    int error;        /* first CKPT_E_* code, sticky (0 = none) */
    uint64_t written; /* size of the temporary file so far, bytes */
    uint64_t flushed; /* bytes handed to writeback so far (see write) */
    uint64_t dropped; /* bytes handed to posix_fadvise(DONTNEED) so far */
    uint64_t checked; /* [0, checked) read back and found as written */
    uint8_t *pending; /* CKPT_ATOMIC_PENDING bytes: what [checked, written)
                         should hold, then as much scratch for reading */
    int renamed;      /* commit renamed the file into place (then a failure
                         is the directory's fsync: the target is new) */
    uint64_t limit;   /* RLIMIT_FSIZE's soft limit at begin, bytes
                         (UINT64_MAX: none); see ckpt_atomic_write */
    int lock;         /* after finish: a duplicate of the closed file's
                         descriptor holding the writer's flock until the
                         rename (-1: none) */
    int in_a_row;     /* set by the caller before commit: the rename is one
                         of a row, after which the caller fsyncs the
                         directory once (ckpt_atomic_sync_dir) and calls
                         ckpt_atomic_reap_temps for each target; commit
                         does neither */
} ckpt_atomic;

/* Creates the temporary file next to `target`. Returns 0, CKPT_E_IO (e.g.
 * the directory does not exist or is not writable), CKPT_E_NOMEM, or
 * CKPT_E_INVALID_ARG (empty path or one ending in '/'), with the error
 * recorded; on failure nothing exists on disk and `a` needs no abort (abort
 * is harmless). */
int ckpt_atomic_begin(ckpt_atomic *a, const char *target);
#define CKPT_ATOMIC_PENDING ((size_t)1 << 20)
/* Writes of this size or more are written and read back a window at a
 * time, straight from the caller's bytes: a window fits the CPU's L2
 * cache, so the comparison finds both copies there (a 4 MiB window cost
 * a third more CPU time on a 64 MiB convert, bench/bench_convert.py). */
#define CKPT_ATOMIC_WINDOW ((size_t)256 << 10)
/* Appends n bytes at the end of the temporary file (retrying short writes
 * and EINTR). A write that would end past the file size limit
 * (RLIMIT_FSIZE, `ulimit -f`, as it was at begin) fails with EFBIG before
 * it reaches the kernel, which would otherwise send SIGXFSZ and kill the
 * process (its default action). Returns 0 or the sticky code; on the first failure the
 * temporary file is closed and removed at once (a full disk gets its space
 * back) and a->error is set. Every 32 MiB it asks the kernel to start
 * writing the bytes so far to disk (sync_file_range, a hint; real errors
 * surface at commit's fsync): the disk works while the writer produces
 * the next bytes and the final fsync finds little left, which about
 * halves a durable 1 GiB write (bench/bench_convert.py); windows two
 * behind are dropped from the page cache where already on disk. */
int ckpt_atomic_write(ckpt_atomic *a, const void *p, size_t n);
/* Appends the bytes of the file open as fd, read to its end through buf
 * (cap bytes), as ckpt_atomic_write: `path` names the file in a read
 * error (CKPT_E_IO at the offset reached). After each piece, `copied`
 * (when not NULL) is called with its length. *n: the bytes copied.
 * 0 or the first failure. */
int ckpt_atomic_write_fd(ckpt_atomic *a, int fd, const char *path, unsigned char *buf, size_t cap,
                         uint64_t *n, void (*copied)(void *ctx, uint64_t len), void *ctx);
/* Writes n bytes at an absolute offset of the temporary file (pwrite; used
 * to patch a header after streaming the data). Writing past the end
 * extends the file (a gap reads as zeros) and later appends follow the new
 * end: a->written is always the file's size; the patch (and a gap, as
 * zeros) is read back at once. 0 or the sticky code. */
int ckpt_atomic_pwrite(ckpt_atomic *a, const void *p, size_t n, uint64_t off);
/* Ends the writing without renaming: every byte read back, fsync, close
 * (the writer's flock stays held, on one descriptor, until commit or
 * abort). For files committed together (a sharded set whose names
 * replace files of the set it replaces): each one is finished, then all
 * are renamed in a row, so a failure while writing any of them replaces
 * none. 0, or the sticky code (the temporary file removed, as for a
 * failed write); a second call does nothing. */
int ckpt_atomic_finish(ckpt_atomic *a);
/* What a backup keeps of a replaced target: target + CKPT_ATOMIC_BACKUP
 * (ckpt_atomic_commit's backup, convert's retired sharded-set files). */
#define CKPT_ATOMIC_BACKUP ".bak"
/* 1 when name (a file name or path) ends in CKPT_ATOMIC_BACKUP after a
 * non-empty stem: a backup, never a file a loader opens (transformers,
 * diffusers and the Trainer open exact names). */
int ckpt_atomic_is_backup(const char *name);
/* finish (if not done yet), optional backup (backup != 0: the old target, if any,
 * becomes target.bak through a hard link renamed over target.bak, so the
 * .bak is itself replaced atomically), rename over the target, fsync of the
 * directory; then the temporary files of the same target (and of its
 * .bak) that writers killed earlier left behind are removed
 * (ckpt_atomic_reap_at), so a crash's leftovers go with the next write
 * of that file. On failure before the rename the temporary file is removed
 * and the target is untouched (target.bak may already hold a copy of it).
 * A failing directory fsync comes after the rename: the target is then the
 * new file, and CKPT_E_IO says the rename may not survive a crash.
 * With a sticky error from an earlier call, commit only cleans up and
 * returns it; the error record is the one that failure left. Frees a's
 * strings either way. 0, CKPT_E_IO with errno in the message, or
 * CKPT_E_CHECKSUM when the file does not read back as written. */
int ckpt_atomic_commit(ckpt_atomic *a, int backup);

/* fsync of the directory `dir` (through the same fault-injection hooks:
 * "open", then "fsync"), so that entries created, renamed or removed in it
 * survive a crash. 0, or CKPT_E_IO recorded with the step that failed. */
int ckpt_atomic_sync_dir(const char *dir);

/* ckpt_malloc'd temporary name ".<basename>.tmp-<pid>-<16 hex>" for
 * `path`, in its directory (the name gc recognises); NULL when out of
 * memory. The store renames a doomed generation directory to one. */
char *ckpt_atomic_temp_name(const char *path);
/* 1 when `name` is a temporary name ".X.tmp-PID-HEX16" (ckpt_atomic_temp_name's),
 * with *pid set; else 0. */
int ckpt_atomic_parse_temp(const char *name, long *pid);
/* The one rule for removing a temporary file a writer left (killed, or
 * its machine crashed): the regular file `name` of dirfd (st: its lstat)
 * is removed when no live writer holds its flock (atomic writers hold it
 * from creation to rename). Where the filesystem has no flock, only when
 * its PID is not a process on this machine or it was not modified for
 * stale_s seconds (before `now`). The lock is held while unlinking, so no
 * writer claims the file meanwhile (begin gives up a file unlinked before
 * its lock). 1 removed, 0 kept (live, or not a temporary file), or
 * -errno when the unlink failed. ckpt_store_gc, and every commit for the
 * temporary files of its own target. With dirs, a directory (a
 * ckpt_atomic_dir's, locked the same way) is removed too, with the
 * regular files in it (it is flat); ckpt_store_gc passes 0 (its staging
 * directories carry no lock of their own: the store lock tells). */
int ckpt_atomic_reap_at(int dirfd, const char *name, const struct stat *st, time_t now,
                        uint64_t stale_s, int dirs);
/* The temporary files and directories of `target` (and of its .bak) that
 * writers killed earlier left in its directory removed (ckpt_atomic_reap_at), and the
 * directory fsync'd if any was. Best effort, nothing reported: what commit
 * does after its rename. */
void ckpt_atomic_reap_temps(const char *target);
/* Temporary files of dead writers older than this are removed by commit
 * also where the filesystem has no flock (ckpt_store_gc's default). */
#define CKPT_ATOMIC_STALE_S ((uint64_t)60 * 60)

/* Removes the temporary file and frees a's strings. Safe after commit, after
 * a failed begin, and on a zero-initialised struct. */
void ckpt_atomic_abort(ckpt_atomic *a);

/* unlinkat(dirfd, name, 0) through the fault-injection hooks ("remove"):
 * how the store removes generations and temporary files. */
int ckpt_atomic_remove_at(int dirfd, const char *name);

/* rename(from, to) through the fault-injection hooks ("rename"): how the
 * store moves a generation directory into place and away. 0 or -1 with
 * errno. */
int ckpt_atomic_rename(const char *from, const char *to);
/* Atomically swaps the entries a and b (renameat2 RENAME_EXCHANGE), through
 * the hooks ("rename"): a directory generation replaced in one step. 0 or
 * -1 with errno (EINVAL or ENOSYS where the filesystem cannot). */
int ckpt_atomic_exchange(const char *a, const char *b);
/* mkdir(path, 0755) through the hooks (counted as an "open": it creates
 * an entry). 0 or -1 with errno. */
int ckpt_atomic_mkdir(const char *path);
/* open and fsync of the regular file `path` (not following a link)
 * through the hooks ("open", "fsync"): the files of a directory the store
 * commits. 0, or CKPT_E_IO recorded with the step that failed. */
int ckpt_atomic_sync_file(const char *path);

/* A new directory of files, made atomically (what a DCP checkpoint is):
 * a temporary directory beside the target (ckpt_atomic_temp_name's name,
 * mode 0755 less the umask) that the caller fills, each file through
 * ckpt_atomic (written, fsync'd, renamed, the directory fsync'd), then
 * commit: fsync of the directory, rename onto the target, fsync of the
 * parent. The target must not exist, or be an empty directory (rename
 * replaces an empty one); a directory cannot be swapped for a full one.
 *
 *     ckpt_atomic_dir d;
 *     int rc = ckpt_atomic_dir_begin(&d, path);
 *     if (rc == 0) rc = fill(d.tmp);             // files under d.tmp
 *     if (rc == 0) rc = ckpt_atomic_dir_commit(&d);
 *     else ckpt_atomic_dir_abort(&d);
 *
 * Any failure before the rename leaves no directory behind (abort, or a
 * failed commit, removes the files in the temporary directory and it).
 * The temporary directory carries its writer's flock until the rename: a
 * commit removes the temporary directories of the same target that
 * writers killed earlier left (ckpt_atomic_reap_at's rule). */
typedef struct ckpt_atomic_dir {
    char *target; /* ckpt_malloc'd, without trailing slashes */
    char *tmp;    /* ckpt_malloc'd temporary directory, NULL once gone */
    int lock;     /* while tmp is set: tmp opened, holding the writer's
                     flock (-1: none), as a file's writer holds one */
} ckpt_atomic_dir;
/* 0; CKPT_E_INVALID_ARG (empty path, or the target exists and is not an
 * empty directory); CKPT_E_IO (mkdir failed: "open" for fault injection);
 * CKPT_E_NOMEM. On failure nothing exists on disk. */
int ckpt_atomic_dir_begin(ckpt_atomic_dir *d, const char *target);
/* fsync of the directory, rename, fsync of the parent ("open", "fsync",
 * "rename" for fault injection). Before the rename a failure removes the
 * temporary directory; a failing fsync of the parent comes after it:
 * CKPT_E_IO says the rename may not survive a crash. Frees d's strings. */
int ckpt_atomic_dir_commit(ckpt_atomic_dir *d);
/* Removes the files of the temporary directory and it; frees d's strings.
 * Safe after a failed begin, after commit, and on a zeroed struct. */
void ckpt_atomic_dir_abort(ckpt_atomic_dir *d);

/* Fault injection for tests: make the nth (1-based) call of `op` from now
 * on fail with errno `err` (EIO, ENOSPC, ...), once; n == 0 disarms; a
 * negative err kills the process with signal -err right there instead
 * (crash tests: SIGKILL at a fixed point). Operations, counted per system
 * call: "open" (temporary file, then the directory at commit), "write"
 * (each pwrite), "fsync" (the file, then the directory), "rename" (the
 * backup's, then the target's), "remove" (ckpt_atomic_remove_at).
 * Process-wide state, not thread-safe; tests only. */
void ckpt_atomic_fail_nth(const char *op, uint64_t n, int err);

#endif
