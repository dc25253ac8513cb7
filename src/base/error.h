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
int ckpt_err(int code, const char *file, const char *member, uint64_t offset,
             const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;

/* Clears the record (code 0). */
void ckpt_err_clear(void);

#endif
