/* error.c - the per-thread last-error record. */
#include "base/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

typedef ckpt_err_kept error_slot; /* one layout: keep and restore copy it */

static _Thread_local error_slot last = {{0, "", "", "", UINT64_MAX, 0}, "", "", ""};

static void copy_str(char *dst, size_t cap, const char *src) {
    if (!src) src = "";
    size_t n = strlen(src);
    if (n >= cap) n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

static int record(int code, int os_errno, const char *file, const char *member, uint64_t offset,
                  const char *fmt, va_list ap) {
    vsnprintf(last.message, sizeof last.message, fmt, ap);
    copy_str(last.file, sizeof last.file, file);
    copy_str(last.member, sizeof last.member, member);
    last.pub.code = code;
    last.pub.message = last.message;
    last.pub.file = last.file;
    last.pub.member = last.member;
    last.pub.offset = offset;
    last.pub.os_errno = os_errno;
    return code;
}

int ckpt_err(int code, const char *file, const char *member, uint64_t offset, const char *fmt,
             ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = record(code, 0, file, member, offset, fmt, ap);
    va_end(ap);
    return rc;
}

int ckpt_err_os(int os_errno, const char *file, const char *member, uint64_t offset,
                const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = record(CKPT_E_IO, os_errno, file, member, offset, fmt, ap);
    va_end(ap);
    return rc;
}

int ckpt_err_nomem(void) {
    return ckpt_err(CKPT_E_NOMEM, NULL, NULL, CKPT_NO_OFFSET, "out of memory");
}

int ckpt_err_options_version(const char *func, unsigned got, unsigned want) {
    return ckpt_err(CKPT_E_INVALID_ARG, NULL, NULL, CKPT_NO_OFFSET,
                    "%s: options version %u, this library knows version %u "
                    "(initialise options with their _INIT macro or _init function)",
                    func, got, want);
}

void ckpt_err_clear(void) {
    last.message[0] = last.file[0] = last.member[0] = '\0';
    last.pub = (ckpt_error){0, last.message, last.file, last.member, UINT64_MAX, 0};
}

void ckpt_err_keep(ckpt_err_kept *k) { *k = last; }

int ckpt_err_restore(const ckpt_err_kept *k) {
    last = *k;
    /* the strings are the slot's own, not the copy's */
    last.pub.message = last.message;
    last.pub.file = last.file;
    last.pub.member = last.member;
    return last.pub.code;
}

const ckpt_error *ckpt_error_last(void) {
    if (!last.pub.message) ckpt_err_clear();
    return &last.pub;
}

const char *ckpt_error_name(int code) {
    switch (code) {
    case CKPT_OK: return "CKPT_OK";
    case CKPT_E_IO: return "CKPT_E_IO";
    case CKPT_E_NOMEM: return "CKPT_E_NOMEM";
    case CKPT_E_TRUNCATED: return "CKPT_E_TRUNCATED";
    case CKPT_E_FORMAT: return "CKPT_E_FORMAT";
    case CKPT_E_LIMIT: return "CKPT_E_LIMIT";
    case CKPT_E_UNSUPPORTED: return "CKPT_E_UNSUPPORTED";
    case CKPT_E_UNSAFE: return "CKPT_E_UNSAFE";
    case CKPT_E_CHECKSUM: return "CKPT_E_CHECKSUM";
    case CKPT_E_MISMATCH: return "CKPT_E_MISMATCH";
    case CKPT_E_INVALID_ARG: return "CKPT_E_INVALID_ARG";
    case CKPT_E_NOTFOUND: return "CKPT_E_NOTFOUND";
    default: return "unknown";
    }
}
