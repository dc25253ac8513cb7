/* scratch.h - the scratch directory of the store tests: made fresh per
 * test (SCRATCH_NAME names it), paths in it, and its removal. */
#ifndef CKPT_TESTS_SCRATCH_H
#define CKPT_TESTS_SCRATCH_H

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[256];

static void fresh_dir(void) {
    snprintf(dir, sizeof dir, "/tmp/ckpt-test-" SCRATCH_NAME "-XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        exit(2);
    }
}

/* Removes path: a file, or a directory and its files (one level down, as
 * deep as the tests make them). */
static void remove_path(const char *path, int depth) {
    if (unlink(path) == 0 || errno != EISDIR) return;
    DIR *dp = opendir(path);
    struct dirent *e;
    char p[1024];
    while (depth > 0 && dp && (e = readdir(dp)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(p, sizeof p, "%s/%s", path, e->d_name);
        remove_path(p, depth - 1);
    }
    if (dp) closedir(dp);
    rmdir(path);
}

static void remove_dir(void) { remove_path(dir, 2); }

static const char *in_dir(const char *name) {
    static char p[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
    return p[k];
}

static inline int exists(const char *name) { return access(in_dir(name), F_OK) == 0; }

/* Copies the DCP fixture (a torch FileSystemWriter directory) into the
 * directory `path`, created unless it exists. 0, or -1. */
#define TINY_DCP CKPT_SRC "/tests/dcp/fixtures/tiny.dcp"
static inline int copy_dcp(const char *path) {
    static const char *const files[] = {".metadata", "__0_0.distcp"};
    if (mkdir(path, 0755) != 0 && errno != EEXIST) return -1;
    int rc = 0;
    for (size_t i = 0; i < 2; i++) {
        char from[512], to[512], buf[4096];
        snprintf(from, sizeof from, "%s/%s", TINY_DCP, files[i]);
        snprintf(to, sizeof to, "%s/%s", path, files[i]);
        FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
        size_t n;
        while (in && out && (n = fread(buf, 1, sizeof buf, in)) > 0)
            if (fwrite(buf, 1, n, out) != n) rc = -1;
        if (!in || !out || ferror(in)) rc = -1;
        if (in) fclose(in);
        if (out && fclose(out) != 0) rc = -1;
    }
    return rc;
}

#endif
