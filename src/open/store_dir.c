/* store_dir.c - is a directory a ckpt store, and which generation does
 * its LATEST name (store_dir.h). */
#include "open/store_dir.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/source.h"

int ckpt_is_store_dir(const char *path) {
    char p[4096];
    struct stat st;
    int n;
    if (path == NULL || stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) return 0;
    n = snprintf(p, sizeof p, "%s/%s", path, CKPT_STORE_POINTER_FILE);
    return n > 0 && (size_t)n < sizeof p && lstat(p, &st) == 0;
}

int ckpt_store_dir_pointer_read(ckpt_arena *a, const char *dir, ckpt_store_dir_pointer *st,
                                const char **name) {
    char buf[CKPT_STORE_POINTER_MAX + 1];
    size_t len = 0;
    ssize_t r = 0;
    const char *path = ckpt_arena_printf(a, "%s/%s", dir, CKPT_STORE_POINTER_FILE);
    int fd;
    *name = "";
    *st = CKPT_STORE_DIR_POINTER_INVALID;
    if (path == NULL) return ckpt_err(CKPT_E_NOMEM, dir, NULL, CKPT_NO_OFFSET, "out of memory");
    const char *why;
    fd = ckpt_open_regular(path, NULL, &why);
    if (fd < 0) {
        if (errno == ENOENT) *st = CKPT_STORE_DIR_POINTER_ABSENT;
        return 0;
    }
    while (len < sizeof buf && (r = read(fd, buf + len, sizeof buf - len)) != 0) {
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) break;
        len += (size_t)r;
    }
    close(fd);
    if (r < 0 || len == 0 || len == sizeof buf) return 0;
    if (buf[len - 1] == '\n') len--; /* tolerate a LATEST written without one */
    buf[len] = '\0';
    if (len == 0 || memchr(buf, '\0', len) || strchr(buf, '/') || !strcmp(buf, ".") ||
        !strcmp(buf, ".."))
        return 0;
    if ((*name = ckpt_arena_strdup(a, buf)) == NULL) {
        *name = "";
        return ckpt_err(CKPT_E_NOMEM, dir, NULL, CKPT_NO_OFFSET, "out of memory");
    }
    *st = CKPT_STORE_DIR_POINTER_OK;
    return 0;
}

int ckpt_store_dir_latest(ckpt_arena *a, const char *dir, const char **path) {
    ckpt_store_dir_pointer st;
    const char *name, *p;
    struct stat sb;
    int rc = ckpt_store_dir_pointer_read(a, dir, &st, &name);
    *path = NULL;
    if (rc) return rc;
    p = ckpt_arena_printf(a, "%s/%s", dir, CKPT_STORE_POINTER_FILE);
    if (p == NULL) return ckpt_err(CKPT_E_NOMEM, dir, NULL, CKPT_NO_OFFSET, "out of memory");
    if (st != CKPT_STORE_DIR_POINTER_OK)
        return ckpt_err(CKPT_E_MISMATCH, p, NULL, CKPT_NO_OFFSET,
                        "a ckpt store whose LATEST names no generation file (expected one file "
                        "name and a newline)");
    *path = ckpt_arena_printf(a, "%s/%s", dir, name);
    if (*path == NULL) return ckpt_err(CKPT_E_NOMEM, dir, NULL, CKPT_NO_OFFSET, "out of memory");
    if (stat(*path, &sb) != 0)
        return ckpt_err(CKPT_E_MISMATCH, p, NULL, CKPT_NO_OFFSET,
                        "a ckpt store whose LATEST names \"%s\", which is not there", name);
    return 0;
}
