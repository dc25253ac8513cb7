/* test_shrink.c - a file that shrinks while the library reads it is an
 * error, never SIGBUS (issue 12, item 2).
 *
 * Every path that reads tensor bytes (verify, SHA-256 and XXH3 digests,
 * ckpt_tensor_read, diff, convert) is run over a file that the source
 * hook (base/source.h) truncates to half its size just before the first
 * pread: the reads past the new end must fail with CKPT_E_TRUNCATED naming
 * the file and an offset past the new end. Deterministic: no second
 * process, no timing. Any SIGBUS ends this binary and fails the test. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt.h"
#include "harness.h"
#include "base/source.h"

#define NT 3
#define ELEMS ((size_t)3 << 20) /* 12 MiB of float32 per tensor */

static char dir[64];
static const char *shrink_path; /* truncated to half at the next read */
static uint64_t shrunk_to;

static void shrink_hook(const ckpt_source *src, uint64_t off, size_t n) {
    (void)src, (void)off, (void)n;
    if (!shrink_path) return;
    struct stat st;
    if (stat(shrink_path, &st) == 0) {
        shrunk_to = (uint64_t)st.st_size / 2;
        if (truncate(shrink_path, (off_t)shrunk_to) != 0) perror("truncate");
    }
    shrink_path = NULL;
}

/* Writes the three-tensor file in `format` at path. */
static int make_file(const char *path, ckpt_format format) {
    static float *data[NT];
    ckpt_tree *t = NULL;
    ckpt_value *root, *key, *val;
    int rc = ckpt_tree_new(&t);
    if (rc == 0) rc = ckpt_tree_dict(&root, t);
    for (int i = 0; rc == 0 && i < NT; i++) {
        if (!data[i]) {
            data[i] = malloc(ELEMS * sizeof(float));
            for (size_t k = 0; k < ELEMS; k++) data[i][k] = (float)(k % 977) * (float)(i + 1);
        }
        char name[16];
        snprintf(name, sizeof name, "w%d", i);
        uint64_t shape[2] = {ELEMS / 1024, 1024};
        rc = ckpt_tree_str(&key, t, name, strlen(name));
        if (rc == 0)
            rc = ckpt_tree_tensor(&val, t, CKPT_DT_F32, 2, shape, data[i], ELEMS * sizeof(float));
        if (rc == 0) rc = ckpt_tree_set(t, root, key, val);
    }
    if (rc == 0) rc = ckpt_tree_write(root, path, format, NULL);
    ckpt_tree_free(t);
    return rc;
}

/* Checks the error recorded by a read that met the truncation. */
static void check_shrunk_error(int rc, const char *path) {
    CHECK_EQ_INT(rc, CKPT_E_TRUNCATED);
    const ckpt_error *e = ckpt_error_last();
    CHECK(strstr(e->file, path) != NULL);
    CHECK(e->offset != UINT64_MAX && e->offset >= shrunk_to);
    CHECK(strstr(e->message, "shrank") != NULL);
}

static void file_path(char *out, size_t cap, const char *name) {
    snprintf(out, cap, "%s/%s", dir, name);
}

static void run_verify(ckpt_format format, const char *name) {
    char path[128];
    file_path(path, sizeof path, name);
    CHECK_EQ_INT(make_file(path, format), 0);
    ckpt_file *f = NULL;
    CHECK_EQ_INT(ckpt_open(&f, path, NULL), 0);
    if (!f) return;
    shrink_path = path;
    check_shrunk_error(ckpt_verify(NULL, f), path);
    ckpt_close(f);
}

TEST(verify_safetensors_shrinking) { run_verify(CKPT_FORMAT_SAFETENSORS, "v.safetensors"); }
TEST(verify_torch_zip_shrinking) { run_verify(CKPT_FORMAT_TORCH_ZIP, "v.pt"); }

/* The last tensor lies in the second half: every read of it fails. */
TEST(tensor_reads_shrinking) {
    char path[128];
    file_path(path, sizeof path, "t.safetensors");
    for (int op = 0; op < 2; op++) {
        CHECK_EQ_INT(make_file(path, CKPT_FORMAT_SAFETENSORS), 0);
        ckpt_file *f = NULL;
        CHECK_EQ_INT(ckpt_open(&f, path, NULL), 0);
        if (!f) return;
        const ckpt_tensor *t = ckpt_file_find_tensor(f, "w2");
        CHECK(t != NULL);
        shrink_path = path;
        if (op == 0) {
            unsigned char sha[32];
            check_shrunk_error(ckpt_tensor_sha256(t, sha), path);
        } else {
            void *buf = malloc(ckpt_tensor_nbytes(t));
            check_shrunk_error(ckpt_tensor_read(t, buf, ckpt_tensor_nbytes(t)), path);
            free(buf);
        }
        ckpt_close(f);
    }
}

TEST(convert_shrinking) {
    char in[128], out[128];
    file_path(in, sizeof in, "c.pt");
    file_path(out, sizeof out, "c.safetensors");
    CHECK_EQ_INT(make_file(in, CKPT_FORMAT_TORCH_ZIP), 0);
    shrink_path = in;
    check_shrunk_error(ckpt_convert(NULL, in, out, NULL), in);
    CHECK(access(out, F_OK) != 0); /* nothing written */
}

TEST(diff_shrinking) {
    char a[128], b[128];
    file_path(a, sizeof a, "a.safetensors");
    file_path(b, sizeof b, "b.pt");
    CHECK_EQ_INT(make_file(a, CKPT_FORMAT_SAFETENSORS), 0);
    CHECK_EQ_INT(make_file(b, CKPT_FORMAT_TORCH_ZIP), 0);
    ckpt_file *fa = NULL, *fb = NULL;
    ckpt_manifest *ma = NULL, *mb = NULL;
    CHECK_EQ_INT(ckpt_open(&fa, a, NULL), 0);
    CHECK_EQ_INT(ckpt_open(&fb, b, NULL), 0);
    if (!fa || !fb) return;
    CHECK_EQ_INT(ckpt_manifest_from_file(&ma, fa), 0);
    CHECK_EQ_INT(ckpt_manifest_from_file(&mb, fb), 0);
    ckpt_diff_result *r = NULL;
    /* intact: equal */
    CHECK_EQ_INT(ckpt_diff(&r, ma, mb, NULL), 0);
    CHECK(r && ckpt_diff_identical(r));
    ckpt_diff_result_free(r);
    r = NULL;
    shrink_path = b;
    check_shrunk_error(ckpt_diff(&r, ma, mb, NULL), b);
    CHECK(r == NULL);
    ckpt_manifest_free(ma);
    ckpt_manifest_free(mb);
    ckpt_close(fa);
    ckpt_close(fb);
}

/* The library never installs a handler: SIGBUS's is the one the process
 * started with (the default, or a sanitizer's). */
static struct sigaction sigbus_at_start;

TEST(no_signal_handler) {
    struct sigaction sa;
    CHECK_EQ_INT(sigaction(SIGBUS, NULL, &sa), 0);
    CHECK(sa.sa_handler == sigbus_at_start.sa_handler);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/ckpt-shrink-XXXXXX");
    if (!mkdtemp(dir) || sigaction(SIGBUS, NULL, &sigbus_at_start) != 0) return 1;
    ckpt_source_read_hook = shrink_hook;
    RUN(verify_safetensors_shrinking);
    RUN(verify_torch_zip_shrinking);
    RUN(tensor_reads_shrinking);
    RUN(convert_shrinking);
    RUN(diff_shrinking);
    RUN(no_signal_handler);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) return 1;
    return harness_end();
}
