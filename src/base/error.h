/* error.h - the per-thread last-error record (see ckpt_error_last). */
#ifndef CKPT_ERROR_H
#define CKPT_ERROR_H

#include "ckpt.h"

/* Offset value meaning "no byte offset applies". */
#define CKPT_NO_OFFSET UINT64_MAX

/* Records a failure for ckpt_error_last() and returns `code`, so readers
 * can write `return ckpt_err(CKPT_E_FORMAT, file, member, off, "...")`.
 * file/member may be NULL (stored as ""). The message is printf-formatted
 * and truncated to 511 bytes. */
int ckpt_err(int code, const char *file, const char *member, uint64_t offset, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;

/* ckpt_err(CKPT_E_IO, ...) for a failed system call, recording its errno
 * (ckpt_error.os_errno) so that callers can tell a missing file from a
 * refused one without reading the message. */
int ckpt_err_os(int os_errno, const char *file, const char *member, uint64_t offset,
                const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;

/* ckpt_err(CKPT_E_NOMEM, ...) with the one message every allocation
 * failure gets. */
int ckpt_err_nomem(void);

/* Returns ckpt_err_nomem() from the calling function when p is NULL. */
#define CKPT_CHECK_ALLOC(p)                                                                        \
    do {                                                                                           \
        if (!(p)) return ckpt_err_nomem();                                                         \
    } while (0)

/* Fails the calling function with CKPT_E_INVALID_ARG when an options
 * struct (may be NULL: the defaults) carries a version other than V. */
int ckpt_err_options_version(const char *func, unsigned got, unsigned want);
#define CKPT_CHECK_OPTIONS(opts, V)                                                                \
    do {                                                                                           \
        if ((opts) && (opts)->version != (V))                                                      \
            return ckpt_err_options_version(__func__, (opts)->version, (V));                       \
    } while (0)

/* Clears the record (code 0). */
void ckpt_err_clear(void);

/* A copy of the record, for work done ahead of its turn: the error it
 * met is reported only after the work that comes before it in the
 * reported order found none (zip.c's local headers, torch.c's pickle
 * run before them). */
typedef struct ckpt_err_kept {
    ckpt_error pub;
    char message[512];
    char file[1024];
    char member[512];
} ckpt_err_kept;

/* Copies the record into *k. */
void ckpt_err_keep(ckpt_err_kept *k);

/* Makes *k the record again; returns its code. */
int ckpt_err_restore(const ckpt_err_kept *k);

#endif
