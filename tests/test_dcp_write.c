/* test_dcp_write.c - convert to a DCP directory (format/dcp_write.c,
 * ckpt_atomic_dir) under every injected failure and crash: the output
 * directory is there complete, or not at all (no partial directory, no
 * temporary one after a failure), and a good run reads back. */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "container/atomic.h"
#include "ckpt.h"
#include "fail_alloc.h"
#include "harness.h"

static char dir[256];
static char in[300], out[300];

/* A safetensors file {"a": F32 [2] = 1.5, -2; "b": I64 [1] = 7}. */
static void make_input(void) {
    snprintf(dir, sizeof dir, "/tmp/ckpt-test-dcp-write-XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        exit(2);
    }
    snprintf(in, sizeof in, "%s/in.safetensors", dir);
    snprintf(out, sizeof out, "%s/out.dcp", dir);
    const char hdr[] = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                       "\"b\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[8,16]}}";
    size_t n = sizeof hdr - 1, padded = (n + 7) / 8 * 8;
    uint8_t len[8] = {0};
    for (int i = 0; i < 8; i++) len[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    float a[2] = {1.5f, -2.0f};
    int64_t b = 7;
    FILE *fp = fopen(in, "wb");
    fwrite(len, 1, 8, fp);
    fwrite(hdr, 1, n, fp);
    for (size_t i = n; i < padded; i++) fputc(' ', fp);
    fwrite(a, sizeof a, 1, fp);
    fwrite(&b, sizeof b, 1, fp);
    fclose(fp);
}

static void remove_tree(const char *d) {
    DIR *dp = opendir(d);
    struct dirent *e;
    char p[600];
    while (dp && (e = readdir(dp)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", d, e->d_name);
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
            remove_tree(p);
        else
            unlink(p);
    }
    if (dp) closedir(dp);
    rmdir(d);
}

/* Entries of dir other than the input (temporary directories included). */
static int others(void) {
    DIR *dp = opendir(dir);
    struct dirent *e;
    int n = 0;
    while (dp && (e = readdir(dp)) != NULL)
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
             strcmp(e->d_name, "in.safetensors");
    if (dp) closedir(dp);
    return n;
}

/* Removes every entry of dir but the input. */
static void clean(void) {
    DIR *dp = opendir(dir);
    struct dirent *e;
    char p[600];
    while (dp && (e = readdir(dp)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") ||
            !strcmp(e->d_name, "in.safetensors"))
            continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        remove_tree(p);
    }
    if (dp) closedir(dp);
}

static void disarm(void) {
    static const char *const ops[] = {"open", "write", "fsync", "rename", "remove"};
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++) ckpt_atomic_fail_nth(ops[i], 0, 0);
}

static int convert(void) {
    ckpt_convert_options o = CKPT_CONVERT_OPTIONS_INIT;
    o.format = CKPT_FORMAT_DCP;
    return ckpt_convert(NULL, in, out, &o);
}

/* out is a complete DCP directory with the input's tensors. */
static int complete(void) {
    ckpt_file *f;
    if (ckpt_open(&f, out, NULL)) return 0;
    const ckpt_tensor *a = ckpt_file_find_tensor(f, "a"), *b = ckpt_file_find_tensor(f, "b");
    float av[2] = {0};
    int64_t bv = 0;
    int ok = ckpt_file_format(f) == CKPT_FORMAT_DCP && a && b &&
             ckpt_tensor_read(a, av, sizeof av) == 0 && ckpt_tensor_read(b, &bv, sizeof bv) == 0 &&
             av[0] == 1.5f && av[1] == -2.0f && bv == 7 && ckpt_verify(NULL, f) == 0;
    ckpt_close(f);
    return ok;
}

static int exists(const char *p) {
    struct stat st;
    return lstat(p, &st) == 0;
}

TEST(writes_and_reads_back) {
    make_input();
    ckpt_convert_report r;
    ckpt_convert_options o = CKPT_CONVERT_OPTIONS_INIT;
    /* the format from the name: *.dcp */
    CHECK_EQ_INT(ckpt_convert(&r, in, out, &o), 0);
    CHECK_EQ_INT(r.format, CKPT_FORMAT_DCP);
    CHECK_EQ_INT(r.tensors, 2);
    CHECK_EQ_INT(r.keys, 2);
    CHECK(complete());
    CHECK_EQ_INT(others(), 1);
    remove_tree(dir);
}

/* The written directory with its .metadata renamed __0.metadata, as
 * dcp.save(use_collectives=False) leaves it: read back the same. Each
 * chunk kept the name of the rank file that placed it, in the rank file's
 * own memory, freed after its parse: reading a tensor read freed memory
 * (AddressSanitizer: heap-use-after-free in placed()). */
TEST(reads_rank_metadata_files) {
    make_input();
    CHECK_EQ_INT(convert(), 0);
    char from[400], to[400];
    snprintf(from, sizeof from, "%s/.metadata", out);
    snprintf(to, sizeof to, "%s/__0.metadata", out);
    CHECK_EQ_INT(rename(from, to), 0);
    CHECK(complete());
    remove_tree(dir);
}

/* Each step of each operation fails in turn (EIO): the convert fails with
 * no output and no temporary directory, until the step count passes the
 * last call (then it succeeds). A failing fsync of the parent comes after
 * the rename: the directory is then complete and the error says so. */
static void each_failure(const char *op) {
    make_input();
    int failures = 0;
    for (uint64_t nth = 1; nth < 64; nth++) {
        ckpt_atomic_fail_nth(op, nth, EIO);
        int rc = convert();
        disarm();
        if (rc == 0) {
            CHECK(complete());
            break;
        }
        failures++;
        CHECK_EQ_INT(rc, CKPT_E_IO);
        if (exists(out)) { /* the parent's fsync, after the rename */
            CHECK(strstr(ckpt_error_last()->message, "may not survive a crash") != NULL);
            CHECK(complete());
            CHECK_EQ_INT(others(), 1);
        } else {
            CHECK_EQ_INT(others(), 0);
        }
        clean();
    }
    CHECK(failures >= 3); /* two files and the directory at least */
    remove_tree(dir);
}

TEST(open_failures) { each_failure("open"); }
TEST(write_failures) { each_failure("write"); }
TEST(fsync_failures) { each_failure("fsync"); }
TEST(rename_failures) { each_failure("rename"); }

/* SIGKILL at each step of each operation: afterwards the output is
 * complete or absent (a temporary directory may remain for gc). */
TEST(crash_at_each_step) {
    static const char *const ops[] = {"open", "write", "fsync", "rename"};
    make_input();
    for (size_t k = 0; k < sizeof ops / sizeof *ops; k++) {
        int crashes = 0;
        for (uint64_t nth = 1; nth < 64; nth++) {
            fflush(NULL);
            pid_t pid = fork();
            if (pid == 0) {
                ckpt_atomic_fail_nth(ops[k], nth, -SIGKILL);
                _exit(convert() == 0 ? 0 : 3);
            }
            int status = 0;
            waitpid(pid, &status, 0);
            int killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
            CHECK(killed || (WIFEXITED(status) && WEXITSTATUS(status) == 0));
            CHECK(!exists(out) || complete());
            clean();
            if (!killed) break;
            crashes++;
        }
        CHECK(crashes >= 3);
    }
    remove_tree(dir);
}

/* Each allocation fails in turn: CKPT_E_NOMEM and nothing on disk, until
 * the count passes the last one (then the directory is complete). */
TEST(allocation_failures) {
    make_input();
    int rc = CKPT_E_NOMEM, failed = 0, stray = 0;
    for (int nth = 1; rc != 0 && nth < 20000; nth++) {
        fail_alloc_arm(nth);
        rc = convert();
        fail_alloc_disarm();
        failed += rc == CKPT_E_NOMEM;
        stray += rc != 0 && (rc != CKPT_E_NOMEM || others() != 0);
        clean();
    }
    CHECK_EQ_INT(rc, 0);
    CHECK(failed >= 10);
    CHECK_EQ_INT(stray, 0);
    remove_tree(dir);
}

TEST(existing_target_untouched) {
    make_input();
    CHECK_EQ_INT(mkdir(out, 0755), 0);
    char keep[600];
    snprintf(keep, sizeof keep, "%s/keep", out);
    FILE *fp = fopen(keep, "w");
    fputs("x", fp);
    fclose(fp);
    CHECK_EQ_INT(convert(), CKPT_E_INVALID_ARG);
    CHECK(strstr(ckpt_error_last()->message, "not empty") != NULL);
    CHECK(exists(keep));
    CHECK_EQ_INT(others(), 1);
    clean();
    /* an empty directory is replaced */
    CHECK_EQ_INT(mkdir(out, 0755), 0);
    CHECK_EQ_INT(convert(), 0);
    CHECK(complete());
    remove_tree(dir);
}

int main(void) {
    RUN(writes_and_reads_back);
    RUN(reads_rank_metadata_files);
    RUN(open_failures);
    RUN(write_failures);
    RUN(fsync_failures);
    RUN(rename_failures);
    RUN(crash_at_each_step);
    RUN(allocation_failures);
    RUN(existing_target_untouched);
    return harness_end();
}
