/* atomic.h - atomic, durable replacement of one file (the libgit2
 * git_filebuf model): a uniquely named temporary file in the target's
 * directory (O_CREAT|O_EXCL, mode 0644), full write, fsync, rename over the
 * target, fsync of the directory. Errors are sticky: after the first failed
 * write every later call is a no-op and commit reports the first error. Any
 * failure removes the temporary file and leaves the target untouched. */
#ifndef CKPT_ATOMIC_H
#define CKPT_ATOMIC_H

#include <stddef.h>
#include <stdint.h>

typedef struct ckpt_atomic {
    int fd;             /* -1 when closed */
    char *target;       /* ckpt_malloc'd copy of the target path */
    char *tmp;          /* ckpt_malloc'd temporary path */
    int error;          /* first CKPT_E_* code, sticky (0 = none) */
    uint64_t written;   /* bytes written so far */
} ckpt_atomic;

/* Creates the temporary file next to `target`. 0 or CKPT_E_IO/NOMEM with
 * the error recorded; on failure nothing exists on disk. */
int ckpt_atomic_begin(ckpt_atomic *a, const char *target);
/* Appends n bytes (retrying short writes and EINTR). 0 or the sticky code. */
int ckpt_atomic_write(ckpt_atomic *a, const void *p, size_t n);
/* Writes n bytes at an absolute offset of the temporary file (pwrite; used
 * to patch a header after streaming the data). 0 or the sticky code. */
int ckpt_atomic_pwrite(ckpt_atomic *a, const void *p, size_t n, uint64_t off);
/* fsync, optional backup (the old target becomes target.bak, itself
 * replaced atomically), rename over the target, fsync of the directory.
 * On failure the temporary file is removed and the target is untouched.
 * Frees a's strings either way. 0 or CKPT_E_IO with errno in the message. */
int ckpt_atomic_commit(ckpt_atomic *a, int backup);
/* Removes the temporary file and frees a's strings. Safe after commit. */
void ckpt_atomic_abort(ckpt_atomic *a);

/* Fault injection for tests: make the nth (1-based) call of `op` from now
 * on fail with errno `err` (EIO, ENOSPC, ...); n == 0 disarms. Operations:
 * "write", "fsync", "rename", "open". Not thread-safe; tests only. */
void ckpt_atomic_fail_nth(const char *op, uint64_t n, int err);

#endif
