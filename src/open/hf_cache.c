/* hf_cache.c - a Hugging Face cache repository and the snapshot its
 * refs/main names (hf_cache.h). */
#include "open/hf_cache.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/source.h"

/* A revision name is a commit hash (40 hex digits) or a branch's; refs/main
 * holds one, written without a newline. */
#define REV_MAX 255
/* Snapshots named in a message. */
#define LISTED 3

static int is_subdir(const char *dir, const char *name) {
    char p[4096];
    struct stat st;
    int n = snprintf(p, sizeof p, "%s/%s", dir, name);
    return n > 0 && (size_t)n < sizeof p && stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

int ckpt_hf_cache_is_repo(const char *dir) {
    return dir && is_subdir(dir, "snapshots") && is_subdir(dir, "blobs");
}

/* refs/main's revision into rev[REV_MAX + 1]; "" when missing or not a
 * revision name, with *why saying which (NULL: missing). */
static void read_main(const char *dir, char *rev, const char **why) {
    char path[4096];
    ssize_t r = 0;
    size_t len = 0;
    *rev = '\0';
    *why = NULL;
    int n = snprintf(path, sizeof path, "%s/refs/main", dir);
    int fd = n > 0 && (size_t)n < sizeof path ? ckpt_open_regular(path, NULL, why) : -1;
    if (fd < 0) {
        if (errno == ENOENT) *why = NULL;
        return;
    }
    while (len <= REV_MAX && (r = read(fd, rev + len, REV_MAX + 1 - len)) != 0) {
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) break;
        len += (size_t)r;
    }
    if (r < 0) *why = strerror(errno);
    close(fd);
    while (len > 0 && (rev[len - 1] == '\n' || rev[len - 1] == ' ' || rev[len - 1] == '\r')) len--;
    if (r >= 0 && (len == 0 || len > REV_MAX || memchr(rev, '\0', len) || memchr(rev, '/', len) ||
                   (rev[0] == '.' && (len == 1 || (len == 2 && rev[1] == '.')))))
        *why = len > REV_MAX ? "longer than a revision name" : "not a revision name";
    if (*why) {
        *rev = '\0';
        return;
    }
    rev[len] = '\0';
}

static int by_name(const void *x, const void *y) {
    return strcmp(*(const char *const *)x, *(const char *const *)y);
}

/* "A, B, C and N more" of the snapshots in dir/snapshots, or "none". */
static const char *list_snapshots(ckpt_arena *a, const char *dir) {
    const char *path = ckpt_arena_printf(a, "%s/snapshots", dir), **names = NULL;
    size_t n = 0, cap = 0;
    DIR *d = path ? opendir(path) : NULL;
    if (!d) return path ? "none" : NULL;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        const char *name = ckpt_arena_strdup(a, e->d_name);
        if (!name || ckpt_arena_grow(a, (void **)&names, &cap, n + 1, sizeof *names)) {
            closedir(d);
            return NULL;
        }
        names[n++] = name;
    }
    closedir(d);
    if (n == 0) return "none";
    qsort(names, n, sizeof *names, by_name);
    const char *s = names[0];
    for (size_t i = 1; s && i < n && i < LISTED; i++)
        s = ckpt_arena_printf(a, "%s, %s", s, names[i]);
    if (s && n > LISTED) s = ckpt_arena_printf(a, "%s and %zu more", s, n - LISTED);
    return s;
}

int ckpt_hf_cache_snapshot(ckpt_arena *a, const char *dir, const char **snapshot,
                           const char **rev) {
    char main_rev[REV_MAX + 1];
    const char *why;
    read_main(dir, main_rev, &why);
    *snapshot = *rev = NULL;
    const char *sub = ckpt_arena_printf(a, "snapshots/%s", main_rev);
    if (!sub) return ckpt_err_nomem();
    if (*main_rev && is_subdir(dir, sub)) {
        *rev = ckpt_arena_strdup(a, main_rev);
        *snapshot = ckpt_arena_printf(a, "%s/snapshots/%s", dir, main_rev);
        return *rev && *snapshot ? 0 : ckpt_err_nomem();
    }
    const char *listed = list_snapshots(a, dir);
    if (!listed) return ckpt_err_nomem();
    return ckpt_err(CKPT_E_IO, dir, NULL, CKPT_NO_OFFSET,
                    "cannot read: a Hugging Face cache repository (blobs/, snapshots/REVISION/) "
                    "%s%s%s; its snapshots: %s: name one, DIR/snapshots/REVISION",
                    *main_rev ? "whose refs/main names snapshot \""
                    : why     ? "whose refs/main is unusable: "
                              : "without refs/main",
                    *main_rev ? main_rev
                    : why     ? why
                              : "",
                    *main_rev ? "\", which is not there" : "", listed);
}
