/* test_atomic.c - the atomic commit (src/atomic.c): success path, every
 * injected failure, backups, and a really full file system (tmpfs). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "container/atomic.h"
#include "ckpt.h"
#include "child.h"
#include "harness.h"

static char dir[256];

static void fresh_dir(void) {
    snprintf(dir, sizeof dir, "/tmp/ckpt-test-atomic-XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        exit(2);
    }
}

/* Removes the files of dir (flat) and dir itself. */
static void remove_dir(const char *d) {
    DIR *dp = opendir(d);
    struct dirent *e;
    char p[512];
    while (dp && (e = readdir(dp)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(p, sizeof p, "%s/%s", d, e->d_name);
        unlink(p);
    }
    if (dp) closedir(dp);
    rmdir(d);
}

static const char *in_dir(const char *name) {
    static char p[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
    return p[k];
}

static void put_file(const char *path, const char *text) {
    FILE *fp = fopen(path, "wb");
    fputs(text, fp);
    fclose(fp);
}

/* 1 when the file holds exactly `text`. */
static int has_content(const char *path, const char *text) {
    size_t n = 0;
    unsigned char *b = harness_read_file(path, &n);
    int ok = b && n == strlen(text) && memcmp(b, text, n) == 0;
    free(b);
    return ok;
}

/* Entries of dir other than . and .., and how many look temporary. */
static int count_entries(int *temps) {
    DIR *dp = opendir(dir);
    struct dirent *e;
    int n = 0;
    *temps = 0;
    while (dp && (e = readdir(dp)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        n++;
        if (strstr(e->d_name, ".tmp-")) ++*temps;
    }
    if (dp) closedir(dp);
    return n;
}

static int temps_left(void) {
    int temps;
    count_entries(&temps);
    return temps;
}

static void disarm(void) {
    ckpt_atomic_fail_nth("open", 0, 0);
    ckpt_atomic_fail_nth("write", 0, 0);
    ckpt_atomic_fail_nth("fsync", 0, 0);
    ckpt_atomic_fail_nth("rename", 0, 0);
    ckpt_atomic_fail_nth("read", 0, 0);
}

static int message_has(const char *needle) {
    return strstr(ckpt_error_last()->message, needle) != NULL;
}

TEST(success_replaces_target) {
    fresh_dir();
    const char *t = in_dir("model.safetensors");
    put_file(t, "old contents");
    ckpt_atomic a;
    CHECK_EQ_INT(ckpt_atomic_begin(&a, t), 0);
    /* the temporary file: hidden, same directory, pid and 16 hex digits */
    char prefix[512];
    snprintf(prefix, sizeof prefix, "%s/.model.safetensors.tmp-%ld-", dir, (long)getpid());
    CHECK(a.tmp && strncmp(a.tmp, prefix, strlen(prefix)) == 0);
    CHECK(a.tmp && strlen(a.tmp) == strlen(prefix) + 16);
    CHECK(access(a.tmp, F_OK) == 0);
    CHECK_EQ_INT(ckpt_atomic_write(&a, "XXXX-body", 9), 0);
    CHECK_EQ_INT(ckpt_atomic_pwrite(&a, "head", 4, 0), 0);
    CHECK_EQ_INT(ckpt_atomic_write(&a, "-tail", 5), 0);
    CHECK_EQ_INT((long long)a.written, 14);
    CHECK(has_content(t, "old contents")); /* untouched until commit */
    CHECK_EQ_INT(ckpt_atomic_commit(&a, 0), 0);
    CHECK(has_content(t, "head-body-tail"));
    CHECK(a.tmp == NULL && a.target == NULL);
    mode_t mask = umask(0);
    umask(mask);
    struct stat st;
    CHECK_EQ_INT(stat(t, &st), 0);
    CHECK_EQ_INT(st.st_mode & 07777, 0644 & ~mask);
    int temps;
    CHECK_EQ_INT(count_entries(&temps), 1);
    CHECK_EQ_INT(temps, 0);
    ckpt_atomic_abort(&a); /* harmless after commit */
    CHECK(has_content(t, "head-body-tail"));
    remove_dir(dir);
}

TEST(large_write_and_holes) {
    fresh_dir();
    const char *t = in_dir("big.bin");
    size_t n = 3u << 20;
    unsigned char *buf = malloc(n);
    for (size_t i = 0; i < n; i++) buf[i] = (unsigned char)(i * 131u + 7u);
    ckpt_atomic a;
    CHECK_EQ_INT(ckpt_atomic_begin(&a, t), 0);
    CHECK_EQ_INT(ckpt_atomic_write(&a, buf, n), 0);
    /* past the end: a zero gap, and appends follow the new end */
    CHECK_EQ_INT(ckpt_atomic_pwrite(&a, "Z", 1, (uint64_t)n + 10), 0);
    CHECK_EQ_INT(ckpt_atomic_write(&a, "!", 1), 0);
    CHECK_EQ_INT((long long)a.written, (long long)n + 12);
    CHECK_EQ_INT(ckpt_atomic_commit(&a, 0), 0);
    size_t len = 0;
    unsigned char *got = harness_read_file(t, &len);
    CHECK(got && len == n + 12);
    if (got && len == n + 12) {
        CHECK(memcmp(got, buf, n) == 0);
        static const unsigned char zeros[10];
        CHECK(memcmp(got + n, zeros, 10) == 0);
        CHECK(got[n + 10] == 'Z' && got[n + 11] == '!');
    }
    free(got);
    free(buf);
    remove_dir(dir);
}

/* ckpt_atomic_file (ckpt/write.h): the same writer behind a public handle. */
TEST(public_handle) {
    fresh_dir();
    const char *t = in_dir("data.distcp");
    put_file(t, "old");
    ckpt_atomic_file *f = NULL;
    CHECK_EQ_INT(ckpt_atomic_file_begin(&f, t), 0);
    CHECK_EQ_INT(ckpt_atomic_file_write(f, "new ", 4), 0);
    CHECK_EQ_INT(ckpt_atomic_file_write(f, NULL, 0), 0);
    CHECK_EQ_INT(ckpt_atomic_file_write(f, "bytes", 5), 0);
    CHECK(has_content(t, "old"));
    CHECK_EQ_INT(temps_left(), 1);
    CHECK_EQ_INT(ckpt_atomic_file_commit(f), 0);
    CHECK(has_content(t, "new bytes"));
    CHECK_EQ_INT(temps_left(), 0);
    /* a failed write: sticky, the commit reports it, the target kept */
    ckpt_atomic_fail_nth("write", 1, ENOSPC);
    CHECK_EQ_INT(ckpt_atomic_file_begin(&f, t), 0);
    CHECK_EQ_INT(ckpt_atomic_file_write(f, "x", 1), CKPT_E_IO);
    CHECK_EQ_INT(ckpt_atomic_file_write(f, "y", 1), CKPT_E_IO);
    CHECK_EQ_INT(ckpt_atomic_file_commit(f), CKPT_E_IO);
    disarm();
    CHECK(has_content(t, "new bytes"));
    CHECK_EQ_INT(temps_left(), 0);
    /* abort: nothing replaced, nothing left */
    CHECK_EQ_INT(ckpt_atomic_file_begin(&f, t), 0);
    CHECK_EQ_INT(ckpt_atomic_file_write(f, "z", 1), 0);
    ckpt_atomic_file_abort(f);
    ckpt_atomic_file_abort(NULL);
    CHECK(has_content(t, "new bytes"));
    CHECK_EQ_INT(temps_left(), 0);
    /* refusals: nothing made, *out NULL */
    f = (ckpt_atomic_file *)1;
    CHECK_EQ_INT(ckpt_atomic_file_begin(&f, in_dir("no/such/dir")), CKPT_E_IO);
    CHECK(f == NULL);
    CHECK_EQ_INT(ckpt_atomic_file_begin(NULL, t), CKPT_E_INVALID_ARG);
    CHECK_EQ_INT(ckpt_atomic_file_write(NULL, "x", 1), CKPT_E_INVALID_ARG);
    CHECK_EQ_INT(ckpt_atomic_file_commit(NULL), CKPT_E_INVALID_ARG);
    remove_dir(dir);
}

/* A target that is a symbolic link (a Hugging Face cache snapshot's file,
 * pointing into blobs/ that other revisions share): the link is replaced
 * by a regular file, and the file it pointed to keeps its bytes. */
TEST(symlink_target_replaced_not_followed) {
    fresh_dir();
    const char *blob = in_dir("blob"), *link = in_dir("model.safetensors");
    put_file(blob, "shared blob");
    CHECK_EQ_INT(symlink("blob", link), 0);
    ckpt_atomic a;
    CHECK_EQ_INT(ckpt_atomic_begin(&a, link), 0);
    CHECK_EQ_INT(ckpt_atomic_write(&a, "converted", 9), 0);
    CHECK_EQ_INT(ckpt_atomic_commit(&a, 0), 0);
    struct stat st;
    CHECK_EQ_INT(lstat(link, &st), 0);
    CHECK(S_ISREG(st.st_mode));
    CHECK(has_content(link, "converted"));
    CHECK(has_content(blob, "shared blob"));
    CHECK_EQ_INT(temps_left(), 0);
    remove_dir(dir);
}

/* One injected failure: target keeps its old bytes, no temporary file is
 * left, and the message names the target, the operation and errno. */
static void check_failure(const char *op, uint64_t nth, int err, int fail_in_write) {
    fresh_dir();
    const char *t = in_dir("w.pt");
    put_file(t, "previous generation");
    ckpt_atomic a;
    ckpt_atomic_fail_nth(op, nth, err);
    CHECK_EQ_INT(ckpt_atomic_begin(&a, t), 0);
    CHECK_EQ_INT(ckpt_atomic_write(&a, "new", 3), 0);
    int rc = ckpt_atomic_write(&a, "-data", 5);
    if (fail_in_write) {
        CHECK_EQ_INT(rc, CKPT_E_IO);
        CHECK(message_has("write") && message_has(t) && message_has(strerror(err)));
        CHECK_EQ_INT(temps_left(), 0); /* removed at once */
        /* sticky: later calls fail without touching anything */
        CHECK_EQ_INT(ckpt_atomic_write(&a, "x", 1), CKPT_E_IO);
        CHECK_EQ_INT(ckpt_atomic_pwrite(&a, "x", 1, 0), CKPT_E_IO);
    } else {
        CHECK_EQ_INT(rc, 0);
    }
    CHECK_EQ_INT(ckpt_atomic_commit(&a, 0), CKPT_E_IO);
    CHECK(message_has(op) && message_has(t) && message_has(strerror(err)));
    CHECK_EQ_STR(ckpt_error_last()->file, t);
    CHECK(has_content(t, "previous generation"));
    CHECK_EQ_INT(temps_left(), 0);
    CHECK(a.tmp == NULL && a.target == NULL && a.error == CKPT_E_IO);
    ckpt_atomic_abort(&a);
    disarm();
    remove_dir(dir);
}

TEST(write_enospc) { check_failure("write", 2, ENOSPC, 1); }
TEST(write_eio_first_call) {
    fresh_dir();
    const char *t = in_dir("w.pt");
    put_file(t, "old");
    ckpt_atomic a;
    ckpt_atomic_fail_nth("write", 1, EIO);
    CHECK_EQ_INT(ckpt_atomic_begin(&a, t), 0);
    CHECK_EQ_INT(ckpt_atomic_write(&a, "new", 3), CKPT_E_IO);
    CHECK_EQ_INT(ckpt_error_last()->offset, 0);
    ckpt_atomic_abort(&a);
    CHECK(has_content(t, "old"));
    CHECK_EQ_INT(temps_left(), 0);
    disarm();
    remove_dir(dir);
}
TEST(fsync_eio) { check_failure("fsync", 1, EIO, 0); }
TEST(rename_exdev) { check_failure("rename", 1, EXDEV, 0); }
/* the collected small writes are read back at commit */
TEST(read_back_eio) { check_failure("read", 1, EIO, 0); }

/* Another writer's bytes in the temporary file before the read-back: the
 * commit refuses, names the first differing offset, removes the file and
 * leaves the target as it was. Three ways: collected small writes compared
 * at commit, a gap (which must read as zeros), and a patch (compared at
 * once, so a clobber of the collected bytes before it is caught there). */
static void clobbered(int how) {
    fresh_dir();
    const char *t = in_dir("w.pt");
    put_file(t, "previous generation");
    ckpt_atomic a;
    CHECK_EQ_INT(ckpt_atomic_begin(&a, t), 0);
    CHECK_EQ_INT(ckpt_atomic_write(&a, "0123456789", 10), 0);
    int fd = open(a.tmp, O_WRONLY);
    CHECK(fd >= 0);
    CHECK(pwrite(fd, how == 1 ? "X" : "Y", 1, how == 1 ? 14 : 6) == 1);
    close(fd);
    int rc = 0;
    if (how == 1) rc = ckpt_atomic_pwrite(&a, "ab", 2, 20); /* gap 10..20 holds an X */
    if (how == 2) rc = ckpt_atomic_pwrite(&a, "ab", 2, 2);  /* patch before the Y */
    if (rc == 0)
        rc = ckpt_atomic_commit(&a, 0);
    else
        ckpt_atomic_abort(&a);
    CHECK_EQ_INT(rc, CKPT_E_CHECKSUM);
    CHECK_EQ_INT(ckpt_error_last()->offset, how == 1 ? 14 : 6);
    CHECK(message_has("does not read back as written"));
    CHECK(has_content(t, "previous generation"));
    CHECK_EQ_INT(temps_left(), 0);
    remove_dir(dir);
}
TEST(read_back_finds_clobbered_bytes) {
    clobbered(0);
    clobbered(1);
    clobbered(2);
}

/* A write of 16 KiB or more (a tensor's first or last piece, up to a
 * window) is not copied to be compared later: the collected bytes before
 * it are compared first, then it is read back at once. A clobbered
 * collected byte is caught by that write (offset 6); a failed read of the
 * piece names its start (read 1 is the drain); a run of such pieces
 * commits intact. */
TEST(read_back_mid_size_at_once) {
    size_t n = 100 << 10;
    unsigned char *p = malloc(n);
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(i * 11 + (i >> 10));
    for (int how = 0; how < 3; how++) {
        fresh_dir();
        const char *t = in_dir("w.pt");
        put_file(t, "previous generation");
        ckpt_atomic a;
        CHECK_EQ_INT(ckpt_atomic_begin(&a, t), 0);
        CHECK_EQ_INT(ckpt_atomic_write(&a, "0123456789", 10), 0);
        if (how == 0) {
            int fd = open(a.tmp, O_WRONLY);
            CHECK(fd >= 0 && pwrite(fd, "Y", 1, 6) == 1);
            close(fd);
            CHECK_EQ_INT(ckpt_atomic_write(&a, p, n), CKPT_E_CHECKSUM);
            CHECK_EQ_INT(ckpt_error_last()->offset, 6);
        } else if (how == 1) {
            ckpt_atomic_fail_nth("read", 2, EIO);
            CHECK_EQ_INT(ckpt_atomic_write(&a, p, n), CKPT_E_IO);
            CHECK_EQ_INT(ckpt_error_last()->offset, 10);
            disarm();
        } else {
            for (size_t k = 0; k < 5; k++) CHECK_EQ_INT(ckpt_atomic_write(&a, p, n - 1000 * k), 0);
            CHECK_EQ_INT(ckpt_atomic_commit(&a, 0), 0);
            size_t len = 0;
            unsigned char *got = harness_read_file(t, &len);
            CHECK(got && len == 10 + 5 * n - 10000 && memcmp(got, "0123456789", 10) == 0);
            for (size_t at = 10, k = 0; got && k < 5; at += n - 1000 * k, k++)
                CHECK(memcmp(got + at, p, n - 1000 * k) == 0);
            free(got);
            remove_dir(dir);
            continue;
        }
        CHECK_EQ_INT(ckpt_atomic_commit(&a, 0), how == 0 ? CKPT_E_CHECKSUM : CKPT_E_IO);
        CHECK(has_content(t, "previous generation"));
        CHECK_EQ_INT(temps_left(), 0);
        remove_dir(dir);
    }
    free(p);
}

/* Large writes are compared at once and patches land where they should;
 * a file bigger than the collection window commits intact. */
TEST(read_back_large_and_patched) {
    fresh_dir();
    const char *t = in_dir("big.bin");
    size_t n = 3 * CKPT_ATOMIC_PENDING + 123;
    unsigned char *p = malloc(n);
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(i * 7 + (i >> 9));
    ckpt_atomic a;
    CHECK_EQ_INT(ckpt_atomic_begin(&a, t), 0);
    CHECK_EQ_INT(ckpt_atomic_write(&a, p, 100), 0);
    CHECK_EQ_INT(ckpt_atomic_write(&a, p + 100, n - 100), 0);
    CHECK_EQ_INT(ckpt_atomic_pwrite(&a, "patch", 5, 50), 0);
    memcpy(p + 50, "patch", 5);
    CHECK_EQ_INT(ckpt_atomic_commit(&a, 0), 0);
    size_t len = 0;
    unsigned char *got = harness_read_file(t, &len);
    CHECK(got && len == n && memcmp(got, p, n) == 0);
    free(got);
    free(p);
    remove_dir(dir);
}
/* A large write goes out a window at a time, the windows ending on the
 * file's grid of CKPT_ATOMIC_WINDOW whatever offset the write starts at:
 * an injected failure of the nth pwrite (counted from the large write)
 * names where that window starts: 1 is the piece from 100 up to the grid. */
static void window_failure(const char *op, uint64_t nth, uint64_t offset) {
    fresh_dir();
    const char *t = in_dir("w.pt");
    put_file(t, "previous generation");
    size_t n = 3 * CKPT_ATOMIC_WINDOW;
    unsigned char *p = malloc(n);
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(i * 13 + (i >> 11));
    ckpt_atomic a;
    CHECK_EQ_INT(ckpt_atomic_begin(&a, t), 0);
    CHECK_EQ_INT(ckpt_atomic_write(&a, p, 100), 0);
    ckpt_atomic_fail_nth(op, nth, EIO);
    CHECK_EQ_INT(ckpt_atomic_write(&a, p, n), CKPT_E_IO);
    CHECK_EQ_INT((long long)ckpt_error_last()->offset, (long long)offset);
    CHECK(message_has(strerror(EIO)));
    CHECK_EQ_INT(temps_left(), 0);
    CHECK_EQ_INT(ckpt_atomic_commit(&a, 0), CKPT_E_IO);
    CHECK(has_content(t, "previous generation"));
    disarm();
    free(p);
    remove_dir(dir);
}
TEST(large_write_in_aligned_windows) {
    window_failure("write", 1, 100);
    window_failure("write", 2, CKPT_ATOMIC_WINDOW);
    window_failure("write", 4, 3 * CKPT_ATOMIC_WINDOW);
    /* read 1 is the drain of the 100 collected bytes */
    window_failure("read", 3, CKPT_ATOMIC_WINDOW);
}
TEST(rename_eacces) { check_failure("rename", 1, EACCES, 0); }

TEST(open_fails) {
    fresh_dir();
    const char *t = in_dir("w.pt");
    ckpt_atomic a;
    ckpt_atomic_fail_nth("open", 1, EACCES);
    CHECK_EQ_INT(ckpt_atomic_begin(&a, t), CKPT_E_IO);
    CHECK(message_has("open") && message_has(t) && message_has(strerror(EACCES)));
    CHECK(a.tmp == NULL && a.target == NULL && a.fd == -1);
    CHECK_EQ_INT(ckpt_atomic_write(&a, "x", 1), CKPT_E_IO);
    CHECK_EQ_INT(ckpt_atomic_commit(&a, 0), CKPT_E_IO);
    int temps;
    CHECK_EQ_INT(count_entries(&temps), 0);
    disarm();
    remove_dir(dir);
}

/* The directory fsync comes after the rename: the new file is in place,
 * but the caller hears that it may not be durable. */
TEST(directory_fsync_fails_after_rename) {
    fresh_dir();
    const char *t = in_dir("w.pt");
    put_file(t, "old");
    ckpt_atomic a;
    ckpt_atomic_fail_nth("fsync", 2, EIO);
    CHECK_EQ_INT(ckpt_atomic_begin(&a, t), 0);
    CHECK_EQ_INT(ckpt_atomic_write(&a, "new", 3), 0);
    CHECK_EQ_INT(ckpt_atomic_commit(&a, 0), CKPT_E_IO);
    CHECK(message_has("fsync of directory") && message_has(t) && message_has("crash"));
    CHECK(has_content(t, "new"));
    CHECK_EQ_INT(temps_left(), 0);
    disarm();
    remove_dir(dir);
}

TEST(begin_in_missing_directory) {
    ckpt_atomic a;
    const char *t = "/tmp/ckpt-test-atomic-does-not-exist/sub/x.safetensors";
    CHECK_EQ_INT(ckpt_atomic_begin(&a, t), CKPT_E_IO);
    CHECK(message_has(t) && message_has(strerror(ENOENT)));
    ckpt_atomic_abort(&a);
    CHECK_EQ_INT(ckpt_atomic_begin(&a, ""), CKPT_E_INVALID_ARG);
    CHECK_EQ_INT(ckpt_atomic_begin(&a, "/tmp/"), CKPT_E_INVALID_ARG);
    int stdin_open = fcntl(0, F_GETFD) != -1;
    ckpt_atomic zero = {0};
    ckpt_atomic_abort(&zero); /* must not close fd 0 */
    CHECK_EQ_INT(fcntl(0, F_GETFD) != -1, stdin_open);
}

TEST(abort_removes_temp) {
    fresh_dir();
    const char *t = in_dir("w.pt");
    put_file(t, "old");
    ckpt_atomic a;
    CHECK_EQ_INT(ckpt_atomic_begin(&a, t), 0);
    CHECK_EQ_INT(ckpt_atomic_write(&a, "new", 3), 0);
    CHECK_EQ_INT(temps_left(), 1);
    ckpt_atomic_abort(&a);
    ckpt_atomic_abort(&a);
    CHECK_EQ_INT(temps_left(), 0);
    CHECK(has_content(t, "old"));
    remove_dir(dir);
}

static int commit_text(const char *t, const char *text, int backup) {
    ckpt_atomic a;
    int rc = ckpt_atomic_begin(&a, t);
    if (rc == 0) rc = ckpt_atomic_write(&a, text, strlen(text));
    if (rc == 0) return ckpt_atomic_commit(&a, backup);
    ckpt_atomic_abort(&a);
    return rc;
}

TEST(backup_keeps_previous) {
    fresh_dir();
    const char *t = in_dir("out.safetensors");
    const char *bak = in_dir("out.safetensors.bak");
    CHECK_EQ_INT(commit_text(t, "v1", 1), 0);
    CHECK(access(bak, F_OK) != 0); /* nothing to back up the first time */
    CHECK_EQ_INT(commit_text(t, "v2", 1), 0);
    CHECK(has_content(t, "v2") && has_content(bak, "v1"));
    CHECK_EQ_INT(commit_text(t, "v3", 1), 0);
    CHECK(has_content(t, "v3") && has_content(bak, "v2"));
    CHECK_EQ_INT(commit_text(t, "v4", 0), 0); /* no backup asked: .bak stays */
    CHECK(has_content(t, "v4") && has_content(bak, "v2"));
    int temps;
    CHECK_EQ_INT(count_entries(&temps), 2);
    CHECK_EQ_INT(temps, 0);
    remove_dir(dir);
}

TEST(backup_rename_fails) {
    fresh_dir();
    const char *t = in_dir("out.pt");
    const char *bak = in_dir("out.pt.bak");
    put_file(t, "current");
    put_file(bak, "older");
    ckpt_atomic_fail_nth("rename", 1, EIO); /* the backup's rename */
    CHECK_EQ_INT(commit_text(t, "next", 1), CKPT_E_IO);
    CHECK(message_has("rename (backup)") && message_has(t));
    CHECK(has_content(t, "current") && has_content(bak, "older"));
    CHECK_EQ_INT(temps_left(), 0);
    ckpt_atomic_fail_nth("rename", 2, EXDEV); /* the target's, after the backup */
    CHECK_EQ_INT(commit_text(t, "next", 1), CKPT_E_IO);
    CHECK(has_content(t, "current") && has_content(bak, "current"));
    CHECK_EQ_INT(temps_left(), 0);
    disarm();
    remove_dir(dir);
}

/* A pid that was a process a moment ago and is no more. */
static long dead_pid(void) {
    pid_t pid = fork();
    if (pid == 0) _exit(0);
    int st;
    waitpid(pid, &st, 0);
    return (long)pid;
}

/* A writer killed mid-write leaves its temporary file; the next commit of
 * the same target removes it (and a killed backup's), not the temporary
 * files of other targets or of a live writer. Before, convert's
 * leftovers stayed forever (only ckpt store gc removed any). */
TEST(commit_removes_dead_writers_temps) {
    fresh_dir();
    const char *t = in_dir("model.pt");
    char dead[3][512];
    long pid = dead_pid();
    snprintf(dead[0], sizeof dead[0], "%s/.model.pt.tmp-%ld-0123456789abcdef", dir, pid);
    snprintf(dead[1], sizeof dead[1], "%s/.model.pt.bak.tmp-%ld-0123456789abcdef", dir, pid);
    snprintf(dead[2], sizeof dead[2], "%s/.other.pt.tmp-%ld-0123456789abcdef", dir, pid);
    for (int i = 0; i < 3; i++) put_file(dead[i], "half a file");
    ckpt_atomic live;
    CHECK_EQ_INT(ckpt_atomic_begin(&live, t), 0);
    CHECK_EQ_INT(ckpt_atomic_write(&live, "live", 4), 0);
    CHECK_EQ_INT(commit_text(t, "v1", 0), 0);
    CHECK(has_content(t, "v1"));
    CHECK(access(dead[0], F_OK) != 0 && access(dead[1], F_OK) != 0);
    CHECK(access(dead[2], F_OK) == 0);
    CHECK(live.tmp && access(live.tmp, F_OK) == 0); /* its writer holds the lock */
    CHECK_EQ_INT(ckpt_atomic_commit(&live, 0), 0);
    CHECK(has_content(t, "live"));
    CHECK_EQ_INT(temps_left(), 1);
    remove_dir(dir);
}

/* An unlocked temporary file of a live PID is reaped once it is stale;
 * a stale_s of 0 reaps it at once even when its mtime is ahead of `now`
 * (the kernel stamps files from a finer clock than time(): 2 runs in 24 of
 * test_store_crash's gc under load kept 3 files stamped a second ahead). */
TEST(reap_mtime_ahead_of_now) {
    fresh_dir();
    char name[128], path[512];
    snprintf(name, sizeof name, ".model.pt.tmp-%ld-0123456789abcdef", (long)getpid());
    snprintf(path, sizeof path, "%s/%s", dir, name);
    put_file(path, "half a file");
    struct stat st;
    CHECK(stat(path, &st) == 0);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);
    CHECK(dfd >= 0);
    time_t behind = st.st_mtime - 1;
    CHECK_EQ_INT(ckpt_atomic_reap_at(dfd, name, &st, behind, 60, 0), 0);
    CHECK(access(path, F_OK) == 0);
    CHECK_EQ_INT(ckpt_atomic_reap_at(dfd, name, &st, behind, 0, 0), 1);
    CHECK(access(path, F_OK) != 0);
    close(dfd);
    remove_dir(dir);
}

/* The same for a directory (a DCP checkpoint's): a killed writer's
 * temporary directory, with its files, goes with the next commit of the
 * target; a live writer's (it holds the directory's flock) stays. Before,
 * ckpt convert OUT.dcp killed left .OUT.dcp.tmp-PID-HEX/ forever. */
TEST(dir_commit_removes_dead_writers_temps) {
    fresh_dir();
    char t[512], dead[512], inner[600];
    snprintf(t, sizeof t, "%s", in_dir("model.dcp"));
    snprintf(dead, sizeof dead, "%s/.model.dcp.tmp-%ld-0123456789abcdef", dir, dead_pid());
    CHECK_EQ_INT(mkdir(dead, 0755), 0);
    snprintf(inner, sizeof inner, "%s/__0_0.distcp", dead);
    put_file(inner, "half a shard");
    ckpt_atomic_dir live, d;
    CHECK_EQ_INT(ckpt_atomic_dir_begin(&live, t), 0);
    CHECK_EQ_INT(ckpt_atomic_dir_begin(&d, t), 0);
    snprintf(inner, sizeof inner, "%s/.metadata", d.tmp);
    put_file(inner, "meta");
    CHECK_EQ_INT(ckpt_atomic_dir_commit(&d), 0);
    CHECK(access(dead, F_OK) != 0);
    CHECK(live.tmp && access(live.tmp, F_OK) == 0);
    snprintf(inner, sizeof inner, "%s/.metadata", t);
    CHECK(has_content(inner, "meta"));
    ckpt_atomic_dir_abort(&live);
    CHECK_EQ_INT(temps_left(), 0);
    unlink(inner);
    rmdir(t);
    remove_dir(dir);
}

/* A file size limit (ulimit -f): the kernel answers a write past it with
 * SIGXFSZ, which kills the process. The write fails with EFBIG instead,
 * before it reaches the kernel; the target keeps its old bytes and no
 * temporary file is left. In a child: the limit is process-wide. Before
 * the fix the child died of SIGXFSZ. */
static int write_past_limit(const void *arg) {
    (void)arg;
    const char *t = in_dir("limited.pt");
    struct rlimit r = {64 << 10, 64 << 10};
    if (setrlimit(RLIMIT_FSIZE, &r) != 0) return 10;
    size_t n = 1u << 20;
    char *big = malloc(n);
    if (!big) return 11;
    memset(big, 'x', n);
    ckpt_atomic a;
    if (ckpt_atomic_begin(&a, t) != 0) return 12;
    if (ckpt_atomic_write(&a, "head", 4) != 0) return 13;
    if (ckpt_atomic_write(&a, big, n) != CKPT_E_IO) return 14;
    if (!message_has("RLIMIT_FSIZE") || !message_has(strerror(EFBIG))) return 15;
    if (ckpt_error_last()->offset != 64 << 10) return 16;
    if (ckpt_atomic_commit(&a, 0) != CKPT_E_IO) return 17;
    /* small writes (collected) up to the limit itself still commit */
    if (ckpt_atomic_begin(&a, in_dir("small.pt")) != 0) return 18;
    for (size_t i = 0; i < (64 << 10) / 1024; i++)
        if (ckpt_atomic_write(&a, big, 1024) != 0) return 19;
    if (ckpt_atomic_write(&a, "!", 1) != CKPT_E_IO) return 20;
    ckpt_atomic_abort(&a);
    free(big);
    return 0;
}

TEST(write_past_file_size_limit) {
    fresh_dir();
    const char *t = in_dir("limited.pt");
    put_file(t, "old model");
    CHECK_EQ_INT(run_child(write_past_limit, NULL, 60), 0);
    CHECK(has_content(t, "old model"));
    CHECK(access(in_dir("small.pt"), F_OK) != 0);
    CHECK_EQ_INT(temps_left(), 0);
    remove_dir(dir);
}

/* A real full file system: a 1 MiB tmpfs. Needs the right to mount. */
TEST(tmpfs_full) {
    char mnt[256];
    snprintf(mnt, sizeof mnt, "/tmp/ckpt-test-atomic-tmpfs-XXXXXX");
    if (!mkdtemp(mnt)) {
        CHECK(0);
        return;
    }
    if (mount("tmpfs", mnt, "tmpfs", 0, "size=1m") != 0) {
        printf("SKIP tmpfs_full: cannot mount a tmpfs (%s)\n", strerror(errno));
        rmdir(mnt);
        return;
    }
    char t[300];
    snprintf(t, sizeof t, "%s/model.pt", mnt);
    put_file(t, "old model");
    size_t n = 2u << 20;
    char *big = malloc(n);
    memset(big, 'x', n);
    ckpt_atomic a;
    CHECK_EQ_INT(ckpt_atomic_begin(&a, t), 0);
    int rc = ckpt_atomic_write(&a, big, n);
    CHECK_EQ_INT(rc, CKPT_E_IO);
    CHECK(message_has("write") && message_has(t) && message_has(strerror(ENOSPC)));
    CHECK_EQ_INT(ckpt_atomic_commit(&a, 0), CKPT_E_IO);
    CHECK(has_content(t, "old model"));
    snprintf(dir, sizeof dir, "%s", mnt);
    int temps;
    CHECK_EQ_INT(count_entries(&temps), 1);
    CHECK_EQ_INT(temps, 0);
    /* the space came back: a small file commits */
    CHECK_EQ_INT(commit_text(t, "small", 1), 0);
    CHECK(has_content(t, "small"));
    free(big);
    umount(mnt);
    rmdir(mnt);
}

int main(void) {
    RUN(success_replaces_target);
    RUN(public_handle);
    RUN(symlink_target_replaced_not_followed);
    RUN(large_write_and_holes);
    RUN(write_enospc);
    RUN(write_eio_first_call);
    RUN(fsync_eio);
    RUN(rename_exdev);
    RUN(read_back_eio);
    RUN(read_back_finds_clobbered_bytes);
    RUN(large_write_in_aligned_windows);
    RUN(read_back_mid_size_at_once);
    RUN(read_back_large_and_patched);
    RUN(rename_eacces);
    RUN(open_fails);
    RUN(directory_fsync_fails_after_rename);
    RUN(begin_in_missing_directory);
    RUN(abort_removes_temp);
    RUN(backup_keeps_previous);
    RUN(backup_rename_fails);
    RUN(commit_removes_dead_writers_temps);
    RUN(reap_mtime_ahead_of_now);
    RUN(dir_commit_removes_dead_writers_temps);
    RUN(write_past_file_size_limit);
    RUN(tmpfs_full);
    return harness_end();
}
