/* test_store.c - generations and LATEST (src/store.c): commit, latest,
 * list, prune, gc, and failures in the middle of a commit. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "container/atomic.h"
#include "ckpt.h"
#define SCRATCH_NAME "store"
#include "harness.h"
#include "scratch.h"
#include "jobs/store.h"

/* Sources from the repository itself (ckpt verifies each before a commit). */
#define TRAIN_ST CKPT_SRC "/examples/train.safetensors"
#define TRAIN_PT CKPT_SRC "/examples/train.pt"
#define LEGACY CKPT_SRC "/fuzz/corpora/scan/torch_benign_legacy.pt"
#define SHARDED CKPT_CORPUS "/safetensors/fluxml/sharded/model.safetensors.index.json"

static int same_bytes(const char *a, const char *b) {
    size_t na = 0, nb = 0;
    unsigned char *pa = harness_read_file(a, &na), *pb = harness_read_file(b, &nb);
    int ok = pa && pb && na == nb && memcmp(pa, pb, na) == 0;
    free(pa);
    free(pb);
    return ok;
}

/* LATEST's content, or "" when absent. */
static const char *pointer(void) {
    static char buf[512];
    size_t n = 0;
    unsigned char *b = harness_read_file(in_dir("LATEST"), &n);
    buf[0] = '\0';
    if (b && n < sizeof buf) {
        memcpy(buf, b, n);
        buf[n] = '\0';
    }
    free(b);
    return buf;
}

/* Entries of dir (other than ., .. and the writers' lock file) and how
 * many look temporary. */
static int entries(int *temps) {
    DIR *dp = opendir(dir);
    struct dirent *e;
    int n = 0;
    *temps = 0;
    while (dp && (e = readdir(dp)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 ||
            strcmp(e->d_name, ".ckpt-store.lock") == 0)
            continue;
        n++;
        if (strstr(e->d_name, ".tmp-")) ++*temps;
    }
    if (dp) closedir(dp);
    return n;
}

static int commit(const char *src, uint64_t step, uint32_t keep) {
    ckpt_store_options o = CKPT_STORE_OPTIONS_INIT;
    o.keep = keep;
    return ckpt_store_commit(NULL, 0, dir, "run", step, src, &o);
}

static const char *latest(void) {
    static char buf[512];
    int rc = ckpt_store_latest(buf, sizeof buf, dir, NULL);
    return rc == 0 ? buf : "(none)";
}

/* Flips one byte inside the first tensor's storage: a CRC-32 mismatch for
 * a torch zip file. */
static void corrupt_tensor_byte(const char *path) {
    ckpt_file *f = NULL;
    if (ckpt_open(&f, path, NULL) != 0) {
        CHECK(0);
        return;
    }
    uint64_t off = ckpt_tensor_file_offset(ckpt_file_tensor(f, 0));
    ckpt_close(f);
    int fd = open(path, O_RDWR);
    unsigned char c = 0;
    CHECK(pread(fd, &c, 1, (off_t)off) == 1);
    c ^= 0x5a;
    CHECK(pwrite(fd, &c, 1, (off_t)off) == 1);
    close(fd);
}

TEST(commit_copies_and_moves_latest) {
    fresh_dir();
    char path[512];
    CHECK_EQ_INT(ckpt_store_commit(path, sizeof path, dir, "run", 1, TRAIN_ST, NULL), 0);
    CHECK_EQ_STR(path, in_dir("run-1.safetensors"));
    CHECK(same_bytes(path, TRAIN_ST));
    CHECK_EQ_STR(pointer(), "run-1.safetensors\n");
    CHECK_EQ_INT(ckpt_store_commit(path, sizeof path, dir, "run", 2, TRAIN_PT, NULL), 0);
    CHECK_EQ_STR(path, in_dir("run-2.pt"));
    CHECK(same_bytes(path, TRAIN_PT));
    CHECK_EQ_STR(pointer(), "run-2.pt\n");
    CHECK_EQ_INT(ckpt_store_commit(path, sizeof path, dir, "run", 3, LEGACY, NULL), 0);
    CHECK_EQ_STR(path, in_dir("run-3.pt")); /* legacy torch files stay .pt */
    CHECK(same_bytes(path, LEGACY));
    CHECK_EQ_STR(latest(), in_dir("run-3.pt"));
    struct stat st;
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0200)); /* not the source's r--r--r-- */
    int temps;
    CHECK_EQ_INT(entries(&temps), 4);
    CHECK_EQ_INT(temps, 0);
    /* a buffer too small for the path is refused before anything happens */
    char tiny[8];
    CHECK_EQ_INT(ckpt_store_commit(tiny, sizeof tiny, dir, "run", 4, TRAIN_PT, NULL),
                 CKPT_E_INVALID_ARG);
    CHECK(!exists("run-4.pt"));
    remove_dir();
}

/* A store directory stands for the generation LATEST names, alone: open
 * reads it, doctor examines it and lists every generation, the training
 * analysis refuses the directory (regression: doctor combined the
 * weights of the newest generation with an older one's optimizer). */
TEST(store_directory_is_latest_generation) {
    fresh_dir();
    CHECK_EQ_INT(ckpt_is_store_dir(dir), 0);
    CHECK_EQ_INT(commit(TRAIN_PT, 1, 3), 0);
    CHECK_EQ_INT(commit(TRAIN_ST, 2, 3), 0);
    CHECK_EQ_INT(ckpt_is_store_dir(dir), 1);
    CHECK_EQ_INT(ckpt_is_store_dir(in_dir("run-1.pt")), 0);
    ckpt_file *f = NULL;
    CHECK_EQ_INT(ckpt_open(&f, dir, NULL), 0);
    CHECK(f && ckpt_file_format(f) == CKPT_FORMAT_SAFETENSORS);
    ckpt_close(f);
    /* the file open reads, found without opening it: the generation, and
     * a file for itself */
    char *target = NULL;
    CHECK_EQ_INT(ckpt_open_target(&target, dir), 0);
    if (target) CHECK_EQ_STR(target, in_dir("run-2.safetensors"));
    ckpt_string_free(target);
    CHECK_EQ_INT(ckpt_open_target(&target, in_dir("run-1.pt")), 0);
    if (target) CHECK_EQ_STR(target, in_dir("run-1.pt"));
    ckpt_string_free(target);
    CHECK_EQ_INT(ckpt_open_target(NULL, dir), CKPT_E_INVALID_ARG);
    ckpt_training *t = NULL;
    CHECK_EQ_INT(ckpt_training_analyze_dir(&t, dir, NULL), CKPT_E_MISMATCH);
    CHECK(t == NULL);
    ckpt_doctor_report *r = NULL;
    CHECK_EQ_INT(ckpt_doctor(&r, dir, NULL), 0);
    if (r) {
        CHECK_EQ_STR(ckpt_doctor_path(r), in_dir("run-2.safetensors"));
        CHECK(ckpt_doctor_directory(r) == NULL);
        CHECK_EQ_INT(ckpt_training_resume(ckpt_doctor_training(r)), CKPT_RESUME_WEIGHTS_ONLY);
        const ckpt_store_listing *l = ckpt_doctor_store(r);
        CHECK_EQ_INT((int)ckpt_store_list_count(l), 2);
        CHECK_EQ_INT(ckpt_store_list_generation(l, 1)->latest, 1);
        ckpt_doctor_report_free(r);
    }
    /* LATEST naming a file that is not there, or no file name */
    FILE *fp = fopen(in_dir("LATEST"), "w");
    fputs("run-9.pt\n", fp);
    fclose(fp);
    CHECK_EQ_INT(ckpt_open(&f, dir, NULL), CKPT_E_MISMATCH);
    CHECK_EQ_INT(ckpt_open_target(&target, dir), CKPT_E_MISMATCH);
    CHECK(target == NULL);
    CHECK_EQ_INT(ckpt_doctor(&r, dir, NULL), CKPT_E_MISMATCH);
    fp = fopen(in_dir("LATEST"), "w");
    fputs("../run-1.pt\n", fp);
    fclose(fp);
    CHECK_EQ_INT(ckpt_open(&f, dir, NULL), CKPT_E_MISMATCH);
    remove_dir();
}

static void record_bytes(void *ctx, uint64_t done, uint64_t total) {
    uint64_t *log = ctx; /* calls, last done, total, 1 while monotonic */
    if (log[0] == 0) log[3] = done == 0;
    if (log[0] && (done < log[1] || total != log[2])) log[3] = 0;
    log[0]++;
    log[1] = done;
    log[2] = total;
}

/* commit reports the bytes of the source it copies, 0 to its size. */
TEST(commit_progress) {
    fresh_dir();
    struct stat st;
    CHECK(stat(TRAIN_PT, &st) == 0);
    uint64_t log[4] = {0};
    ckpt_store_options o = CKPT_STORE_OPTIONS_INIT;
    o.progress = record_bytes;
    o.progress_ctx = log;
    CHECK_EQ_INT(ckpt_store_commit(NULL, 0, dir, "run", 1, TRAIN_PT, &o), 0);
    CHECK(log[0] >= 2 && log[3] == 1);
    CHECK_EQ_INT(log[1], (uint64_t)st.st_size);
    CHECK_EQ_INT(log[2], (uint64_t)st.st_size);
    remove_dir();
}

TEST(steps_sort_numerically) {
    fresh_dir();
    CHECK_EQ_INT(commit(TRAIN_PT, 9, 10), 0);
    CHECK_EQ_INT(commit(TRAIN_PT, 10, 10), 0);
    CHECK_EQ_INT(commit(TRAIN_PT, 2, 10), 0);
    /* an older step does not take LATEST from a newer verified one */
    CHECK_EQ_STR(pointer(), "run-10.pt\n");
    CHECK_EQ_STR(latest(), in_dir("run-10.pt"));
    ckpt_store_listing *l = NULL;
    CHECK_EQ_INT(ckpt_store_list(&l, dir, NULL), 0);
    CHECK_EQ_INT(ckpt_store_list_count(l), 3);
    static const uint64_t want[] = {2, 9, 10};
    for (size_t i = 0; i < 3 && i < ckpt_store_list_count(l); i++) {
        const ckpt_store_generation *g = ckpt_store_list_generation(l, i);
        CHECK_EQ_INT(g->step, want[i]);
        CHECK_EQ_STR(g->name, "run");
        CHECK_EQ_INT(g->ok, 1);
        CHECK_EQ_INT(g->code, 0);
        CHECK_EQ_STR(g->reason, "");
        CHECK_EQ_INT(g->latest, i == 2);
        CHECK_EQ_INT(g->bytes, 12561); /* examples/train.pt's size */
    }
    const char *pfile = NULL;
    CHECK_EQ_INT(ckpt_store_list_pointer(l, &pfile), CKPT_STORE_POINTER_OK);
    CHECK_EQ_STR(pfile, "run-10.pt");
    CHECK(ckpt_store_list_generation(l, 3) == NULL);
    ckpt_store_listing_free(l);
    remove_dir();
}

TEST(commit_prunes_beyond_keep) {
    fresh_dir();
    for (uint64_t s = 1; s <= 5; s++) CHECK_EQ_INT(commit(TRAIN_PT, s, 3), 0);
    CHECK(!exists("run-1.pt") && !exists("run-2.pt"));
    CHECK(exists("run-3.pt") && exists("run-4.pt") && exists("run-5.pt"));
    CHECK_EQ_STR(pointer(), "run-5.pt\n");
    /* the generation just written is never pruned, even an old step */
    CHECK_EQ_INT(commit(TRAIN_PT, 1, 3), 0);
    CHECK(exists("run-1.pt") && exists("run-5.pt"));
    CHECK_EQ_STR(pointer(), "run-5.pt\n");
    size_t removed = 99;
    ckpt_store_options o = CKPT_STORE_OPTIONS_INIT;
    o.keep = 2;
    CHECK_EQ_INT(ckpt_store_prune(&removed, dir, &o), 0);
    CHECK_EQ_INT(removed, 2);
    CHECK(!exists("run-1.pt") && !exists("run-3.pt"));
    CHECK(exists("run-4.pt") && exists("run-5.pt"));
    remove_dir();
}

TEST(latest_skips_corrupt_and_list_reports) {
    fresh_dir();
    for (uint64_t s = 1; s <= 3; s++) CHECK_EQ_INT(commit(TRAIN_PT, s, 10), 0);
    corrupt_tensor_byte(in_dir("run-3.pt"));
    CHECK_EQ_STR(pointer(), "run-3.pt\n");
    CHECK_EQ_STR(latest(), in_dir("run-2.pt"));
    ckpt_store_listing *l = NULL;
    CHECK_EQ_INT(ckpt_store_list(&l, dir, NULL), 0);
    CHECK_EQ_INT(ckpt_store_list_count(l), 3);
    const ckpt_store_generation *g = ckpt_store_list_generation(l, 2);
    CHECK(g && g->step == 3 && !g->ok && g->latest);
    CHECK(g && g->code == CKPT_E_CHECKSUM && strstr(g->reason, "CRC") != NULL);
    CHECK(g && g->member[0] != '\0' && g->offset != UINT64_MAX);
    g = ckpt_store_list_generation(l, 1);
    CHECK(g && g->ok);
    CHECK_EQ_INT(ckpt_store_list_pointer(l, NULL), CKPT_STORE_POINTER_CORRUPT);
    ckpt_store_listing_free(l);

    /* the next commit moves LATEST past the corrupt one */
    CHECK_EQ_INT(commit(TRAIN_PT, 4, 10), 0);
    CHECK_EQ_STR(pointer(), "run-4.pt\n");
    /* LATEST naming a missing file, or garbage, is ignored */
    unlink(in_dir("run-4.pt"));
    CHECK_EQ_STR(latest(), in_dir("run-2.pt"));
    CHECK_EQ_INT(ckpt_store_list(&l, dir, NULL), 0);
    CHECK_EQ_INT(ckpt_store_list_pointer(l, NULL), CKPT_STORE_POINTER_MISSING);
    ckpt_store_listing_free(l);
    FILE *fp = fopen(in_dir("LATEST"), "w");
    fputs("../../etc/passwd\n", fp);
    fclose(fp);
    CHECK_EQ_STR(latest(), in_dir("run-2.pt"));
    CHECK_EQ_INT(ckpt_store_list(&l, dir, NULL), 0);
    const char *pfile = "?";
    CHECK_EQ_INT(ckpt_store_list_pointer(l, &pfile), CKPT_STORE_POINTER_INVALID);
    CHECK_EQ_STR(pfile, "");
    ckpt_store_listing_free(l);
    unlink(in_dir("LATEST"));
    CHECK_EQ_STR(latest(), in_dir("run-2.pt"));
    CHECK_EQ_INT(ckpt_store_list(&l, dir, NULL), 0);
    CHECK_EQ_INT(ckpt_store_list_pointer(l, NULL), CKPT_STORE_POINTER_ABSENT);
    ckpt_store_listing_free(l);
    /* LATEST naming an older verified generation (a crash between the
     * rename of the newer one and LATEST's) does not hide the newer one */
    fp = fopen(in_dir("LATEST"), "w");
    fputs("run-1.pt\n", fp);
    fclose(fp);
    CHECK_EQ_STR(latest(), in_dir("run-2.pt"));
    /* an unreadable newer generation is an error, not a reason to answer
     * with an older one (root reads anything: use a directory instead) */
    if (geteuid() != 0) {
        chmod(in_dir("run-2.pt"), 0);
        char buf[512];
        CHECK_EQ_INT(ckpt_store_latest(buf, sizeof buf, dir, NULL), CKPT_E_IO);
        chmod(in_dir("run-2.pt"), 0644);
    }
    remove_dir();
}

/* ckpt_store_list_newest: what resuming skips and why, without verifying
 * what it does not need (ckpt.Store.resume: a store whose generations all
 * fail is an error, not a fresh start; a fallback names what it skipped). */
static size_t newest(ckpt_store_listing **l) {
    *l = NULL;
    CHECK_EQ_INT(ckpt_store_list_newest(l, dir, NULL), 0);
    return ckpt_store_list_count(*l);
}

TEST(list_newest_lists_what_resume_skips) {
    fresh_dir();
    ckpt_store_listing *l = NULL;
    CHECK_EQ_INT(newest(&l), 0); /* never committed to */
    CHECK_EQ_INT(ckpt_store_list_pointer(l, NULL), CKPT_STORE_POINTER_ABSENT);
    ckpt_store_listing_free(l);
    for (uint64_t s = 1; s <= 3; s++) CHECK_EQ_INT(commit(TRAIN_PT, s, 10), 0);
    corrupt_tensor_byte(in_dir("run-1.pt")); /* older than the answer: not judged */
    CHECK_EQ_INT(newest(&l), 1);
    const ckpt_store_generation *g = ckpt_store_list_generation(l, 0);
    CHECK(g && g->step == 3 && g->ok && g->latest);
    CHECK(ckpt_store_list_generation(l, 1) == NULL);
    CHECK_EQ_INT(ckpt_store_list_pointer(l, NULL), CKPT_STORE_POINTER_OK);
    ckpt_store_listing_free(l);
    corrupt_tensor_byte(in_dir("run-3.pt"));
    CHECK_EQ_INT(newest(&l), 2); /* the one to resume from, then what it skips */
    g = ckpt_store_list_generation(l, 0);
    CHECK(g && g->step == 2 && g->ok && !g->latest);
    g = ckpt_store_list_generation(l, 1);
    CHECK(g && g->step == 3 && !g->ok && g->latest && g->code == CKPT_E_CHECKSUM);
    CHECK(g && strstr(g->reason, "CRC") != NULL && g->offset != UINT64_MAX);
    CHECK_EQ_INT(ckpt_store_list_pointer(l, NULL), CKPT_STORE_POINTER_CORRUPT);
    ckpt_store_listing_free(l);
    /* LATEST naming an older generation than the listed ones is judged all
     * the same: corrupt run-1 */
    FILE *fp = fopen(in_dir("LATEST"), "w");
    fputs("run-1.pt\n", fp);
    fclose(fp);
    CHECK_EQ_INT(newest(&l), 2);
    CHECK_EQ_INT(ckpt_store_list_pointer(l, NULL), CKPT_STORE_POINTER_CORRUPT);
    ckpt_store_listing_free(l);
    /* none verifies: every generation listed, each with its reason */
    corrupt_tensor_byte(in_dir("run-2.pt"));
    CHECK_EQ_INT(newest(&l), 3);
    for (size_t i = 0; i < 3; i++) {
        g = ckpt_store_list_generation(l, i);
        CHECK(g && g->step == i + 1 && !g->ok && g->reason[0] != '\0');
    }
    ckpt_store_listing_free(l);
    char buf[512];
    CHECK_EQ_INT(ckpt_store_latest(buf, sizeof buf, dir, NULL), CKPT_E_NOTFOUND);
    CHECK_EQ_INT(ckpt_store_list_newest(NULL, dir, NULL), CKPT_E_INVALID_ARG);
    CHECK_EQ_INT(ckpt_store_list_newest(&l, "/tmp/ckpt-test-store-missing-dir", NULL), CKPT_E_IO);
    CHECK(l == NULL);
    remove_dir();
}

/* keep counts only generations that verify: corrupt ones are left in
 * place, reported, and never push a good one out. */
TEST(prune_counts_only_verified) {
    fresh_dir();
    for (uint64_t s = 1; s <= 4; s++) CHECK_EQ_INT(commit(TRAIN_PT, s, 10), 0);
    corrupt_tensor_byte(in_dir("run-4.pt"));
    corrupt_tensor_byte(in_dir("run-3.pt"));
    FILE *fp = fopen(in_dir("LATEST"), "w");
    fputs("run-1.pt\n", fp);
    fclose(fp);
    ckpt_store_options o = CKPT_STORE_OPTIONS_INIT;
    o.keep = 1;
    size_t removed = 9;
    CHECK_EQ_INT(ckpt_store_prune(&removed, dir, &o), 0);
    CHECK_EQ_INT(removed, 0); /* run-1 is LATEST's, run-2 the one kept */
    CHECK(exists("run-1.pt") && exists("run-2.pt"));
    CHECK(exists("run-3.pt") && exists("run-4.pt")); /* corrupt: left */
    o.keep = 0;                                      /* still the newest verified one */
    unlink(in_dir("LATEST"));
    ckpt_store_listing *l = NULL;
    CHECK_EQ_INT(ckpt_store_prune_list(&l, &removed, dir, &o), 0);
    CHECK_EQ_INT(removed, 1);
    CHECK(!exists("run-1.pt") && exists("run-2.pt") && exists("run-3.pt") && exists("run-4.pt"));
    CHECK_EQ_INT(ckpt_store_list_count(l), 3);
    static const int ok[] = {1, 0, 0};
    for (size_t i = 0; i < 3 && i < ckpt_store_list_count(l); i++) {
        const ckpt_store_generation *g = ckpt_store_list_generation(l, i);
        CHECK_EQ_INT(g->step, i + 2);
        CHECK_EQ_INT(g->ok, ok[i]);
        CHECK_EQ_INT(g->code, ok[i] ? 0 : CKPT_E_CHECKSUM);
        CHECK(ok[i] || strstr(g->reason, "CRC-32") != NULL);
    }
    CHECK_EQ_INT(ckpt_store_list_pointer(l, NULL), CKPT_STORE_POINTER_ABSENT);
    ckpt_store_listing_free(l);
    CHECK_EQ_STR(latest(), in_dir("run-2.pt"));
    /* fewer verified generations than keep: nothing is removed */
    o.keep = 2;
    CHECK_EQ_INT(ckpt_store_prune(&removed, dir, &o), 0);
    CHECK_EQ_INT(removed, 0);
    CHECK(exists("run-2.pt"));
    CHECK_EQ_INT(ckpt_store_prune_list(NULL, &removed, dir, &o), CKPT_E_INVALID_ARG);
    remove_dir();
}

/* The user's case: a corrupt generation with a high step (run-10) must
 * not make a commit prune the good ones it outranks. */
TEST(commit_prune_skips_corrupt) {
    fresh_dir();
    for (uint64_t s = 1; s <= 3; s++) CHECK_EQ_INT(commit(TRAIN_PT, s, 10), 0);
    CHECK_EQ_INT(commit(TRAIN_PT, 10, 10), 0);
    corrupt_tensor_byte(in_dir("run-10.pt"));
    CHECK_EQ_INT(commit(TRAIN_PT, 4, 2), 0);
    CHECK(exists("run-10.pt"));                      /* corrupt: left */
    CHECK(exists("run-4.pt") && exists("run-3.pt")); /* the 2 newest good */
    CHECK(!exists("run-1.pt") && !exists("run-2.pt"));
    CHECK_EQ_STR(pointer(), "run-4.pt\n");
    /* once keep newer generations verify, it ages out like any other */
    CHECK_EQ_INT(commit(TRAIN_PT, 11, 2), 0);
    CHECK_EQ_INT(commit(TRAIN_PT, 12, 2), 0);
    CHECK(!exists("run-10.pt") && !exists("run-4.pt") && !exists("run-3.pt"));
    CHECK(exists("run-11.pt") && exists("run-12.pt"));
    remove_dir();
}

/* A corrupt source is refused as such, before anything is written. */
TEST(commit_corrupt_source) {
    fresh_dir();
    char src[512];
    snprintf(src, sizeof src, "%s/../%s-src.pt", dir, strrchr(dir, '/') + 1);
    size_t n = 0;
    unsigned char *b = harness_read_file(TRAIN_PT, &n);
    FILE *fp = fopen(src, "wb");
    CHECK(b && fp && fwrite(b, 1, n, fp) == n);
    if (fp) fclose(fp);
    free(b);
    corrupt_tensor_byte(src);
    CHECK_EQ_INT(ckpt_store_commit(NULL, 0, dir, "run", 4, src, NULL), CKPT_E_CHECKSUM);
    const ckpt_error *e = ckpt_error_last();
    char want[600];
    snprintf(want, sizeof want, "%s is corrupt: CRC-32", src);
    CHECK(strncmp(e->message, want, strlen(want)) == 0);
    CHECK(strstr(e->message, "; nothing committed") != NULL);
    CHECK(strstr(e->message, "after writing") == NULL);
    CHECK_EQ_STR(e->file, src);
    CHECK(e->member[0] != '\0' && e->offset != UINT64_MAX);
    int temps;
    CHECK_EQ_INT(entries(&temps), 0);
    unlink(src);
    remove_dir();
}

/* A DIR that does not exist is created, parents too (mkdir -p). */
TEST(commit_creates_dir) {
    fresh_dir();
    char sub[512], path[600];
    snprintf(sub, sizeof sub, "%s/a/b", dir);
    CHECK_EQ_INT(ckpt_store_commit(path, sizeof path, sub, "run", 1, TRAIN_PT, NULL), 0);
    snprintf(sub, sizeof sub, "%s/a/b/run-1.pt", dir);
    CHECK_EQ_STR(path, sub);
    CHECK(same_bytes(path, TRAIN_PT));
    struct stat st;
    mode_t mask = umask(0);
    umask(mask);
    CHECK(stat(in_dir("a/b"), &st) == 0 && S_ISDIR(st.st_mode));
    CHECK_EQ_INT(st.st_mode & 0777, 0755 & ~mask);
    unlink(path);
    unlink(in_dir("a/b/LATEST"));
    rmdir(in_dir("a/b"));
    rmdir(in_dir("a"));
    /* a file in the way is an I/O error, not a directory */
    FILE *fp = fopen(in_dir("file"), "w");
    if (fp) fclose(fp);
    snprintf(sub, sizeof sub, "%s/file/x", dir);
    CHECK_EQ_INT(ckpt_store_commit(NULL, 0, sub, "run", 1, TRAIN_PT, NULL), CKPT_E_IO);
    remove_dir();
}

TEST(commit_refuses_committed_step) {
    fresh_dir();
    CHECK_EQ_INT(commit(TRAIN_PT, 5, 3), 0);
    CHECK_EQ_INT(commit(LEGACY, 5, 3), CKPT_E_INVALID_ARG);
    CHECK(strstr(ckpt_error_last()->message, "already committed") != NULL);
    CHECK(same_bytes(in_dir("run-5.pt"), TRAIN_PT));
    /* another format of the same step counts as the same step */
    CHECK_EQ_INT(commit(TRAIN_ST, 5, 3), CKPT_E_INVALID_ARG);
    CHECK(!exists("run-5.safetensors"));
    /* a corrupt generation of that step is replaced */
    corrupt_tensor_byte(in_dir("run-5.pt"));
    CHECK_EQ_INT(commit(LEGACY, 5, 3), 0);
    CHECK(same_bytes(in_dir("run-5.pt"), LEGACY));
    remove_dir();
}

/* A sharded set is not one file to commit: a caller's mistake (the CLI's
 * exit 2), whose message says what to commit instead. */
TEST(commit_sharded_refused) {
    fresh_dir();
    CHECK_EQ_INT(ckpt_store_commit(NULL, 0, dir, "run", 1, SHARDED, NULL), CKPT_E_INVALID_ARG);
    CHECK(strstr(ckpt_error_last()->message,
                 "commit a single checkpoint file or a DCP directory") != NULL);
    int temps;
    CHECK_EQ_INT(entries(&temps), 0);
    remove_dir();
}

TEST(commit_bad_arguments) {
    fresh_dir();
    static const char *const bad[] = {"", "a/b", ".hidden", "tab\there"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_EQ_INT(ckpt_store_commit(NULL, 0, dir, bad[i], 1, TRAIN_PT, NULL),
                     CKPT_E_INVALID_ARG);
    CHECK_EQ_INT(ckpt_store_commit(NULL, 0, dir, NULL, 1, TRAIN_PT, NULL), CKPT_E_INVALID_ARG);
    CHECK_EQ_INT(ckpt_store_commit(NULL, 0, dir, "run", 1, "/nonexistent/src.pt", NULL), CKPT_E_IO);
    char broken[512];
    snprintf(broken, sizeof broken, "%s/../%s-broken.pt", dir, strrchr(dir, '/') + 1);
    FILE *fp = fopen(broken, "wb");
    CHECK(fp && fwrite("abc", 1, 3, fp) == 3);
    if (fp) fclose(fp);
    CHECK_EQ_INT(ckpt_store_commit(NULL, 0, dir, "run", 1, broken, NULL),
                 CKPT_E_TRUNCATED); /* 3 bytes of text */
    CHECK(strstr(ckpt_error_last()->message, "-broken.pt is corrupt: ") != NULL);
    unlink(broken);
    int temps;
    CHECK_EQ_INT(entries(&temps), 0);
    char buf[64];
    CHECK_EQ_INT(ckpt_store_latest(buf, sizeof buf, dir, NULL), CKPT_E_NOTFOUND);
    CHECK_EQ_INT(ckpt_store_latest(buf, sizeof buf, "/tmp/ckpt-test-store-missing-dir", NULL),
                 CKPT_E_IO);
    ckpt_store_listing *l = (ckpt_store_listing *)buf;
    CHECK_EQ_INT(ckpt_store_list(&l, "/tmp/ckpt-test-store-missing-dir", NULL), CKPT_E_IO);
    CHECK(l == NULL);
    remove_dir();
}

/* A writer callback (the path an in-memory serialiser takes). */
typedef struct bytes_writer {
    const unsigned char *p;
    size_t n;
    int fail_with;
} bytes_writer;

static int write_bytes(void *ctx, ckpt_atomic *a) {
    bytes_writer *w = ctx;
    if (w->fail_with) return w->fail_with;
    return ckpt_atomic_write(a, w->p, w->n);
}

TEST(commit_with_writer) {
    fresh_dir();
    size_t n = 0;
    unsigned char *pt = harness_read_file(TRAIN_PT, &n);
    bytes_writer w = {pt, n, 0};
    char path[512];
    CHECK_EQ_INT(
        ckpt_store_commit_with(path, sizeof path, dir, "w", 1, ".pt", write_bytes, &w, NULL), 0);
    CHECK(same_bytes(path, TRAIN_PT));
    CHECK_EQ_STR(pointer(), "w-1.pt\n");

    /* bytes that do not verify: removed again, LATEST untouched */
    w.n = n / 2;
    CHECK(ckpt_store_commit_with(path, sizeof path, dir, "w", 2, ".pt", write_bytes, &w, NULL) < 0);
    CHECK(strstr(ckpt_error_last()->message, "failed verification") != NULL);
    CHECK_EQ_STR(ckpt_error_last()->file, in_dir("w-2.pt"));
    CHECK(!exists("w-2.pt"));
    CHECK_EQ_STR(pointer(), "w-1.pt\n");

    /* a flipped byte in a tensor: CRC mismatch, same outcome */
    unsigned char *bad = malloc(n);
    memcpy(bad, pt, n);
    bad[n / 2] ^= 0xff;
    bytes_writer wb = {bad, n, 0};
    int rc = ckpt_store_commit_with(NULL, 0, dir, "w", 3, ".pt", write_bytes, &wb, NULL);
    CHECK(rc == CKPT_E_CHECKSUM || rc == CKPT_E_FORMAT);
    CHECK(!exists("w-3.pt"));

    /* replacing a committed step with bytes that do not verify: refused
     * before the rename, so the step keeps its generation (before, the
     * new file was renamed over it, failed verification and was removed:
     * step 1 was gone) */
    ckpt_store_options ro = CKPT_STORE_OPTIONS_INIT;
    ro.replace = 1;
    w.n = n / 2;
    CHECK(ckpt_store_commit_with(NULL, 0, dir, "w", 1, ".pt", write_bytes, &w, &ro) < 0);
    CHECK(strstr(ckpt_error_last()->message, "nothing committed") != NULL);
    CHECK(same_bytes(in_dir("w-1.pt"), TRAIN_PT));
    CHECK_EQ_STR(pointer(), "w-1.pt\n");
    w.n = n;

    /* the writer's own error comes back as is */
    w.fail_with = CKPT_E_UNSUPPORTED;
    CHECK_EQ_INT(ckpt_store_commit_with(NULL, 0, dir, "w", 4, ".pt", write_bytes, &w, NULL),
                 CKPT_E_UNSUPPORTED);
    CHECK(!exists("w-4.pt"));
    CHECK_EQ_INT(ckpt_store_commit_with(NULL, 0, dir, "w", 4, ".bin", write_bytes, &w, NULL),
                 CKPT_E_INVALID_ARG);
    int temps;
    CHECK_EQ_INT(entries(&temps), 2);
    CHECK_EQ_INT(temps, 0);
    free(bad);
    free(pt);
    remove_dir();
}

/* Failures injected into the atomic commit of the generation and of
 * LATEST: nothing half-done is left behind. */
TEST(commit_faults) {
    fresh_dir();
    CHECK_EQ_INT(commit(TRAIN_PT, 1, 3), 0);
    ckpt_atomic_fail_nth("write", 1, ENOSPC);
    CHECK_EQ_INT(commit(TRAIN_PT, 2, 3), CKPT_E_IO);
    CHECK(strstr(ckpt_error_last()->message, "No space left") != NULL);
    ckpt_atomic_fail_nth("fsync", 1, EIO);
    CHECK_EQ_INT(commit(TRAIN_PT, 2, 3), CKPT_E_IO);
    ckpt_atomic_fail_nth("rename", 1, EXDEV);
    CHECK_EQ_INT(commit(TRAIN_PT, 2, 3), CKPT_E_IO);
    CHECK(!exists("run-2.pt"));
    CHECK_EQ_STR(pointer(), "run-1.pt\n");
    /* LATEST's own rename fails: the generation is in place and verified,
     * so it is committed; the error says so, LATEST still names the
     * previous one, and latest() finds the new one anyway */
    ckpt_atomic_fail_nth("rename", 2, EIO);
    char path[512];
    CHECK_EQ_INT(ckpt_store_commit(path, sizeof path, dir, "run", 2, TRAIN_PT, NULL), CKPT_E_IO);
    CHECK(strstr(ckpt_error_last()->message, "run-2.pt was committed, but moving LATEST failed"));
    CHECK_EQ_STR(path, in_dir("run-2.pt"));
    CHECK_EQ_STR(pointer(), "run-1.pt\n");
    CHECK_EQ_STR(latest(), in_dir("run-2.pt"));
    CHECK_EQ_INT(commit(TRAIN_PT, 3, 3), 0);
    CHECK_EQ_STR(pointer(), "run-3.pt\n");
    int temps;
    CHECK_EQ_INT(entries(&temps), 4);
    CHECK_EQ_INT(temps, 0);
    ckpt_atomic_fail_nth("write", 0, 0);
    ckpt_atomic_fail_nth("fsync", 0, 0);
    ckpt_atomic_fail_nth("rename", 0, 0);
    remove_dir();
}

static void touch_temp(const char *name, time_t age) {
    FILE *fp = fopen(in_dir(name), "w");
    fputs("partial", fp);
    fclose(fp);
    if (age) {
        struct timespec t[2];
        clock_gettime(CLOCK_REALTIME, &t[0]);
        t[0].tv_sec -= age;
        t[1] = t[0];
        utimensat(AT_FDCWD, in_dir(name), t, 0);
    }
}

TEST(gc_removes_stale_temporaries) {
    fresh_dir();
    CHECK_EQ_INT(commit(TRAIN_PT, 1, 3), 0);
    pid_t child = fork();
    if (child == 0) _exit(0);
    waitpid(child, NULL, 0); /* a pid that is gone */
    char dead[128], mine[128], mine_old[128], live_dir[128];
    snprintf(dead, sizeof dead, ".run-2.pt.tmp-%ld-0123456789abcdef", (long)child);
    snprintf(mine, sizeof mine, ".run-3.pt.tmp-%ld-fedcba9876543210", (long)getpid());
    snprintf(mine_old, sizeof mine_old, ".LATEST.tmp-%ld-00000000000000ff", (long)getpid());
    snprintf(live_dir, sizeof live_dir, ".d.tmp-%ld-0000000000000000", (long)child);
    touch_temp(dead, 0);
    touch_temp(mine, 0);
    touch_temp(mine_old, 2 * 3600);
    touch_temp(".x.tmp-12-0123", 0);                /* not our pattern */
    touch_temp(".x.tmp-12-0123456789ABCDEF", 7200); /* uppercase: not ours */
    touch_temp("run.tmp-1-0123456789abcdef", 7200); /* not hidden */
    CHECK_EQ_INT(mkdir(in_dir(live_dir), 0755), 0); /* a live coordinator's staging */
    /* a coordinator holds the store lock while its staging directory lives */
    int held = open(in_dir(".ckpt-store.lock"), O_RDWR | O_CREAT, 0644);
    CHECK_EQ_INT(flock(held, LOCK_EX), 0);
    size_t removed = 0;
    CHECK_EQ_INT(ckpt_store_gc(&removed, dir, NULL), 0);
    CHECK_EQ_INT(removed, 2);
    CHECK(!exists(dead) && !exists(mine_old));
    CHECK(exists(mine) && exists(".x.tmp-12-0123") && exists(".x.tmp-12-0123456789ABCDEF"));
    CHECK(exists("run.tmp-1-0123456789abcdef") && exists(live_dir));
    CHECK(exists("run-1.pt") && exists("LATEST"));
    ckpt_store_options o = CKPT_STORE_OPTIONS_INIT;
    o.stale_minutes = 0; /* every temporary file counts as stale */
    CHECK_EQ_INT(ckpt_store_gc(&removed, dir, &o), 0);
    CHECK_EQ_INT(removed, 1);
    CHECK(!exists(mine) && exists(live_dir));
    close(held); /* the coordinator died: its staging directory is dead */
    CHECK_EQ_INT(mkdir(in_dir(".run-4.dcp.tmp-1-0123456789abcdef"), 0755), 0);
    touch_temp(".run-4.dcp.tmp-1-0123456789abcdef/__0_0.distcp", 0);
    CHECK_EQ_INT(ckpt_store_gc(&removed, dir, NULL), 0);
    CHECK_EQ_INT(removed, 2);
    CHECK(!exists(live_dir) && !exists(".run-4.dcp.tmp-1-0123456789abcdef"));
    CHECK(exists("run-1.pt") && exists("LATEST"));
    CHECK_EQ_INT(ckpt_store_gc(&removed, "/tmp/ckpt-test-store-missing-dir", NULL), CKPT_E_IO);
    remove_dir();
}

/* on_event: the names a call removed, what LATEST names after a commit,
 * the generation holding a refused step; "kind:file " each, in order. */
static void record_event(void *ctx, ckpt_store_event what, const char *file) {
    size_t n = strlen(ctx);
    snprintf((char *)ctx + n, 512 - n, "%d:%s ", (int)what, file);
}

static int commit_heard(char *heard, const char *src, uint64_t step, uint32_t keep) {
    ckpt_store_options o = CKPT_STORE_OPTIONS_INIT;
    o.keep = keep;
    o.on_event = record_event;
    o.event_ctx = heard;
    heard[0] = '\0';
    return ckpt_store_commit(NULL, 0, dir, "run", step, src, &o);
}

TEST(events_say_what_happened) {
    char heard[512];
    fresh_dir();
    CHECK_EQ_INT(commit_heard(heard, TRAIN_PT, 10, 2), 0);
    CHECK_EQ_STR(heard, "2:run-10.pt ");
    CHECK_EQ_INT(commit_heard(heard, TRAIN_PT, 20, 2), 0);
    CHECK_EQ_STR(heard, "2:run-20.pt ");
    /* keep 1: the new one and the one LATEST named before stay */
    CHECK_EQ_INT(commit_heard(heard, TRAIN_ST, 30, 1), 0);
    CHECK_EQ_STR(heard, "2:run-30.safetensors 0:run-10.pt ");
    /* a lower step is committed beside LATEST, which stays */
    CHECK_EQ_INT(commit_heard(heard, TRAIN_PT, 25, 3), 0);
    CHECK_EQ_STR(heard, "2:run-30.safetensors ");
    /* refused: the step is there; a bad name says nothing */
    CHECK_EQ_INT(commit_heard(heard, TRAIN_PT, 25, 3), CKPT_E_INVALID_ARG);
    CHECK_EQ_STR(heard, "3:run-25.pt ");
    ckpt_store_options o = CKPT_STORE_OPTIONS_INIT;
    o.on_event = record_event;
    o.event_ctx = heard;
    heard[0] = '\0';
    CHECK_EQ_INT(ckpt_store_commit(NULL, 0, dir, "a/b", 40, TRAIN_PT, &o), CKPT_E_INVALID_ARG);
    CHECK_EQ_STR(heard, "");
    /* prune and gc */
    o.keep = 1;
    CHECK_EQ_INT(ckpt_store_prune(NULL, dir, &o), 0);
    CHECK_EQ_STR(heard, "0:run-20.pt 0:run-25.pt ");
    touch_temp(".run-9.pt.tmp-1-0123456789abcdef", 7200);
    heard[0] = '\0';
    CHECK_EQ_INT(ckpt_store_gc(NULL, dir, &o), 0);
    CHECK_EQ_STR(heard, "1:.run-9.pt.tmp-1-0123456789abcdef ");
    remove_dir();
}

/* A commit removes the temporary files and directories writers killed
 * earlier left (gc's rule, under the store lock), not a live writer's
 * file: kill -9 in a loop
 * no longer fills the store with .run-N.pt.tmp-PID-HEX files, each of a
 * different target (before, only ckpt store gc removed them). */
TEST(commit_removes_killed_writers_temps) {
    fresh_dir();
    CHECK_EQ_INT(commit(TRAIN_PT, 1, 3), 0);
    pid_t child = fork();
    if (child == 0) _exit(0);
    waitpid(child, NULL, 0); /* a pid that is gone */
    char dead[128], dead_latest[128], mine[128], dead_dir[128];
    snprintf(dead, sizeof dead, ".run-2.pt.tmp-%ld-0123456789abcdef", (long)child);
    snprintf(dead_latest, sizeof dead_latest, ".LATEST.tmp-%ld-0123456789abcdef", (long)child);
    snprintf(mine, sizeof mine, ".run-3.pt.tmp-%ld-fedcba9876543210", (long)getpid());
    snprintf(dead_dir, sizeof dead_dir, ".run-5.dcp.tmp-%ld-0123456789abcdef", (long)child);
    touch_temp(dead, 0);
    touch_temp(dead_latest, 0);
    touch_temp(mine, 0);
    CHECK_EQ_INT(mkdir(in_dir(dead_dir), 0755), 0);
    char heard[512] = "";
    CHECK_EQ_INT(commit_heard(heard, TRAIN_PT, 4, 3), 0);
    CHECK(!exists(dead) && !exists(dead_latest) && !exists(dead_dir));
    CHECK(exists(mine) && exists("run-1.pt") && exists("run-4.pt"));
    /* LATEST's went with LATEST's own commit (ckpt_atomic_commit), the
     * generation's with the sweep, which tells */
    CHECK(strstr(heard, dead) != NULL);
    remove_dir();
}

static void put_dcp(const char *name) { CHECK_EQ_INT(copy_dcp(in_dir(name)), 0); }

/* Multi-rank generations are DCP directories "NAME-STEP.dcp": listed,
 * verified, named by LATEST and pruned beside files, by the same rules. */
TEST(dcp_directory_generations) {
    fresh_dir();
    CHECK_EQ_INT(commit(TRAIN_ST, 1, 3), 0);
    put_dcp("run-2.dcp");
    put_dcp("run-7.pt");                        /* a directory with a file's name: no generation */
    FILE *fp = fopen(in_dir("run-8.dcp"), "w"); /* a file with a directory's */
    fputs("x", fp);
    fclose(fp);
    fp = fopen(in_dir("LATEST"), "w");
    fputs("run-2.dcp\n", fp);
    fclose(fp);
    ckpt_store_listing *l = NULL;
    CHECK_EQ_INT(ckpt_store_list(&l, dir, NULL), 0);
    CHECK_EQ_INT(ckpt_store_list_count(l), 2);
    const ckpt_store_generation *g = ckpt_store_list_generation(l, 1);
    CHECK_EQ_STR(g->file, "run-2.dcp");
    CHECK_EQ_STR(g->name, "run");
    CHECK_EQ_INT(g->step, 2);
    CHECK_EQ_INT(g->bytes, 939 + 2838); /* .metadata and the one .distcp */
    CHECK_EQ_INT(g->ok, 1);
    CHECK_EQ_INT(g->latest, 1);
    const char *named = NULL;
    CHECK_EQ_INT(ckpt_store_list_pointer(l, &named), CKPT_STORE_POINTER_OK);
    CHECK_EQ_STR(named, "run-2.dcp");
    ckpt_store_listing_free(l);
    CHECK_EQ_STR(latest(), in_dir("run-2.dcp"));

    /* a corrupt directory generation is skipped and reported */
    put_dcp("run-3.dcp");
    CHECK_EQ_INT(truncate(in_dir("run-3.dcp/__0_0.distcp"), 100), 0);
    CHECK_EQ_STR(latest(), in_dir("run-2.dcp"));
    CHECK_EQ_INT(ckpt_store_list(&l, dir, NULL), 0);
    CHECK_EQ_INT(ckpt_store_list_count(l), 3);
    CHECK_EQ_INT(ckpt_store_list_generation(l, 2)->ok, 0);
    /* the data file, and the fqn whose slice runs past its end */
    CHECK_EQ_STR(ckpt_store_list_generation(l, 2)->member, "__0_0.distcp/w");
    CHECK_EQ_INT(ckpt_store_list_generation(l, 2)->code, CKPT_E_TRUNCATED);
    ckpt_store_listing_free(l);

    /* pruning: directories go like files, renamed away first, nothing left
     * behind; the corrupt one newer than the kept ones stays */
    put_dcp("run-4.dcp");
    fp = fopen(in_dir("LATEST"), "w");
    fputs("run-4.dcp\n", fp);
    fclose(fp);
    ckpt_store_options o = CKPT_STORE_OPTIONS_INIT;
    o.keep = 1;
    size_t removed = 0;
    CHECK_EQ_INT(ckpt_store_prune(&removed, dir, &o), 0);
    CHECK_EQ_INT(removed, 3); /* run-1.safetensors, run-2.dcp, run-3.dcp */
    int temps = 0;
    CHECK_EQ_INT(entries(&temps), 4); /* run-4.dcp, LATEST, run-7.pt/, run-8.dcp */
    CHECK_EQ_INT(temps, 0);
    CHECK(exists("run-4.dcp/.metadata") && !exists("run-2.dcp") && !exists("run-3.dcp"));
    CHECK_EQ_STR(latest(), in_dir("run-4.dcp"));

    /* a file commit after a directory generation moves LATEST to it and
     * prunes the directory */
    CHECK_EQ_INT(commit(TRAIN_PT, 5, 1), 0);
    CHECK_EQ_STR(pointer(), "run-5.pt\n");
    CHECK(exists("run-4.dcp")); /* LATEST named it before: kept for its readers */
    CHECK_EQ_INT(ckpt_store_prune(&removed, dir, &o), 0);
    CHECK_EQ_INT(removed, 1);
    CHECK(!exists("run-4.dcp"));
    CHECK_EQ_INT(entries(&temps), 4);
    CHECK_EQ_INT(temps, 0);
    remove_dir();
}

/* Stages step `step` of "run", fills it with the fixture (corrupted when
 * `corrupt`) and commits it; path receives the generation's path. */
static int commit_dcp(char *path, size_t cap, uint64_t step, uint32_t keep, int replace,
                      int corrupt) {
    ckpt_store_options o = CKPT_STORE_OPTIONS_INIT;
    o.keep = keep;
    o.replace = replace;
    ckpt_store_stage *st = NULL;
    int rc = ckpt_store_stage_dir(&st, dir, "run", step, &o);
    if (rc) return rc;
    char data[600];
    snprintf(data, sizeof data, "%s/__0_0.distcp", ckpt_store_stage_path(st));
    CHECK_EQ_INT(copy_dcp(ckpt_store_stage_path(st)), 0);
    if (corrupt) CHECK_EQ_INT(truncate(data, 100), 0);
    rc = ckpt_store_commit_dir(path, cap, st, &o);
    ckpt_store_stage_free(st);
    return rc;
}

/* The commit of a multi-rank generation: staged under a temporary name
 * (under the store lock), verified, renamed into place, LATEST moved,
 * pruned by the rules of a file commit. */
TEST(commit_dir) {
    char path[512];
    fresh_dir();
    CHECK_EQ_INT(commit(TRAIN_PT, 1, 3), 0);
    CHECK_EQ_INT(commit_dcp(path, sizeof path, 2, 1, 0, 0), 0);
    CHECK_EQ_STR(path, in_dir("run-2.dcp"));
    CHECK_EQ_STR(pointer(), "run-2.dcp\n");
    /* keep 1: LATEST's predecessor survives this commit (a reader may be
     * opening it), as after a file commit; the next one removes it */
    CHECK(exists("run-1.pt") && exists("run-2.dcp/.metadata"));
    CHECK_EQ_INT(commit_dcp(path, sizeof path, 3, 1, 0, 0), 0);
    CHECK_EQ_STR(pointer(), "run-3.dcp\n");
    CHECK(!exists("run-1.pt") && exists("run-2.dcp") && exists("run-3.dcp"));
    int temps = 0;
    CHECK_EQ_INT(entries(&temps), 3); /* run-2.dcp, run-3.dcp, LATEST */
    CHECK_EQ_INT(temps, 0);

    /* a committed step is refused at staging, nothing created */
    CHECK_EQ_INT(commit_dcp(path, sizeof path, 3, 3, 0, 0), CKPT_E_INVALID_ARG);
    CHECK(strstr(ckpt_error_last()->message, "already committed as run-3.dcp") != NULL);
    CHECK_EQ_INT(entries(&temps), 3);
    CHECK_EQ_INT(temps, 0);
    /* a staged directory that does not verify never gets the name */
    CHECK_EQ_INT(commit_dcp(path, sizeof path, 4, 3, 0, 1), CKPT_E_TRUNCATED);
    CHECK(strstr(ckpt_error_last()->message, "nothing committed") != NULL);
    CHECK_EQ_STR(path, "");
    CHECK(!exists("run-4.dcp"));
    CHECK_EQ_STR(pointer(), "run-3.dcp\n");
    CHECK_EQ_INT(entries(&temps), 3);
    CHECK_EQ_INT(temps, 0);
    /* replace: the step's directory is swapped for the new one */
    CHECK_EQ_INT(truncate(in_dir("run-3.dcp/__0_0.distcp"), 10), 0);
    CHECK_EQ_INT(commit_dcp(path, sizeof path, 3, 3, 1, 0), 0);
    CHECK_EQ_STR(latest(), in_dir("run-3.dcp"));
    CHECK_EQ_INT(entries(&temps), 3);
    CHECK_EQ_INT(temps, 0);
    /* a path buffer too small is refused before the rename */
    CHECK_EQ_INT(commit_dcp(path, 8, 5, 3, 0, 0), CKPT_E_INVALID_ARG);
    CHECK(!exists("run-5.dcp"));
    /* a file commit after directories: LATEST moves, pruning as ever */
    CHECK_EQ_INT(commit(TRAIN_PT, 6, 1), 0);
    CHECK_EQ_STR(pointer(), "run-6.pt\n");
    CHECK(exists("run-3.dcp") && !exists("run-2.dcp"));

    /* staging holds the store lock: gc leaves the staging directory alone
     * until the stage is freed; a stage freed uncommitted leaves nothing */
    ckpt_store_stage *st = NULL;
    CHECK_EQ_INT(ckpt_store_stage_dir(&st, dir, "run", 7, NULL), 0);
    CHECK(strncmp(ckpt_store_stage_path(st), in_dir(".run-7.dcp.tmp-"),
                  strlen(in_dir(".run-7.dcp.tmp-"))) == 0);
    CHECK_EQ_INT(copy_dcp(ckpt_store_stage_path(st)), 0);
    if (fork() == 0) _exit(ckpt_store_gc(NULL, dir, NULL) == 0 ? 0 : 1);
    int wst = 0;
    wait(&wst);
    CHECK(WIFEXITED(wst) && WEXITSTATUS(wst) == 0);
    CHECK_EQ_INT(access(ckpt_store_stage_path(st), F_OK), 0);
    ckpt_store_stage_free(st);
    CHECK_EQ_INT(entries(&temps), 3); /* run-3.dcp, run-6.pt, LATEST */
    CHECK_EQ_INT(temps, 0);
    CHECK_EQ_INT(ckpt_store_commit_dir(NULL, 0, NULL, NULL), CKPT_E_INVALID_ARG);
    ckpt_store_stage_free(NULL);
    remove_dir();
}

/* ckpt_store_commit of a DCP directory (a dcp.save output): its files are
 * copied into a staging directory, verified and renamed into place as
 * NAME-STEP.dcp, LATEST moved. It was "cannot read SRC: Is a directory". */
TEST(commit_dcp_source) {
    char path[512];
    fresh_dir();
    uint64_t log[4] = {0};
    ckpt_store_options o = CKPT_STORE_OPTIONS_INIT;
    o.progress = record_bytes;
    o.progress_ctx = log;
    CHECK_EQ_INT(ckpt_store_commit(path, sizeof path, dir, "run", 2, TINY_DCP, &o), 0);
    CHECK_EQ_STR(path, in_dir("run-2.dcp"));
    CHECK_EQ_STR(pointer(), "run-2.dcp\n");
    CHECK(same_bytes(TINY_DCP "/.metadata", in_dir("run-2.dcp/.metadata")));
    CHECK(same_bytes(TINY_DCP "/__0_0.distcp", in_dir("run-2.dcp/__0_0.distcp")));
    CHECK_EQ_INT(log[1], 939 + 2838); /* every byte of both files, 0 to the total */
    CHECK_EQ_INT(log[2], 939 + 2838);
    CHECK_EQ_INT(log[3], 1);
    CHECK_EQ_STR(latest(), in_dir("run-2.dcp"));
    int temps = 0;
    CHECK_EQ_INT(entries(&temps), 2); /* run-2.dcp, LATEST */
    CHECK_EQ_INT(temps, 0);
    /* the step is refused again, as a file's */
    CHECK_EQ_INT(ckpt_store_commit(NULL, 0, dir, "run", 2, TINY_DCP, NULL), CKPT_E_INVALID_ARG);
    /* a corrupt source directory: nothing written, no staging left */
    char bad[600];
    snprintf(bad, sizeof bad, "%s/src.dcp", dir);
    CHECK_EQ_INT(copy_dcp(bad), 0);
    snprintf(bad, sizeof bad, "%s/src.dcp/__0_0.distcp", dir);
    CHECK_EQ_INT(truncate(bad, 100), 0);
    snprintf(bad, sizeof bad, "%s/src.dcp", dir);
    CHECK_EQ_INT(ckpt_store_commit(NULL, 0, dir, "run", 3, bad, NULL), CKPT_E_TRUNCATED);
    CHECK(strstr(ckpt_error_last()->message, "is corrupt") != NULL);
    CHECK(!exists("run-3.dcp"));
    CHECK_EQ_INT(entries(&temps), 3); /* run-2.dcp, LATEST, src.dcp */
    CHECK_EQ_INT(temps, 0);
    remove_dir();
}

/* An allocator that fails its nth call. */
static long alloc_left;
static void *failing_malloc(void *u, size_t n) {
    (void)u;
    return --alloc_left == 0 ? NULL : malloc(n);
}
static void *failing_realloc(void *u, void *p, size_t n) {
    (void)u;
    return --alloc_left == 0 ? NULL : realloc(p, n);
}
static void plain_free(void *u, void *p) {
    (void)u;
    free(p);
}

/* Every allocation of commit, list and latest fails in turn: each call
 * returns CKPT_E_NOMEM (or succeeds), leaves no temporary file and no
 * half-committed generation (ASan builds also check for leaks). */
TEST(allocation_failures) {
    fresh_dir();
    CHECK_EQ_INT(commit(TRAIN_PT, 1, 3), 0);
    ckpt_allocator failing = {failing_malloc, failing_realloc, plain_free, NULL};
    int done = 0;
    uint64_t step = 2;
    for (long n = 1; n < 5000 && !done; n++) {
        alloc_left = n;
        ckpt_set_allocator(&failing);
        int rc = commit(TRAIN_PT, step, 3);
        ckpt_set_allocator(NULL);
        if (rc != 0 && rc != CKPT_E_NOMEM) {
            fprintf(stderr, "allocation %ld: commit returned %d: %s\n", n, rc,
                    ckpt_error_last()->message);
            CHECK(0);
            break;
        }
        int temps;
        entries(&temps);
        CHECK_EQ_INT(temps, 0);
        /* a generation in place is committed (it verifies), even when the
         * failure came later, in LATEST or pruning */
        char name[64], want[600];
        snprintf(name, sizeof name, "run-%llu.pt", (unsigned long long)step);
        if (exists(name)) step++;
        CHECK(rc != 0 || exists(name));
        done = rc == 0 && alloc_left > 0; /* past the last allocation */
        snprintf(name, sizeof name, "run-%llu.pt", (unsigned long long)(step - 1));
        snprintf(want, sizeof want, "%s", in_dir(name));
        CHECK_EQ_STR(latest(), want);
    }
    CHECK(done);
    /* the commit of a directory generation, staging included */
    done = 0;
    for (long n = 1; n < 5000 && !done; n++) {
        char path[600], name[64];
        alloc_left = n;
        ckpt_set_allocator(&failing);
        int rc = commit_dcp(path, sizeof path, step, 3, 0, 0);
        ckpt_set_allocator(NULL);
        CHECK(rc == 0 || rc == CKPT_E_NOMEM);
        int temps;
        entries(&temps);
        CHECK_EQ_INT(temps, 0);
        snprintf(name, sizeof name, "run-%llu.dcp", (unsigned long long)step);
        CHECK(rc != 0 || exists(name));
        if (exists(name)) {
            CHECK_EQ_STR(latest(), in_dir(name));
            step++;
        }
        done = rc == 0 && alloc_left > 0;
    }
    CHECK(done);
    for (int which = 0; which < 4; which++) {
        done = 0;
        for (long n = 1; n < 5000 && !done; n++) {
            alloc_left = n;
            ckpt_set_allocator(&failing);
            ckpt_store_listing *l = NULL;
            char buf[512];
            size_t removed;
            int rc = which == 0   ? ckpt_store_list(&l, dir, NULL)
                     : which == 1 ? ckpt_store_latest(buf, sizeof buf, dir, NULL)
                     : which == 2 ? ckpt_store_list_newest(&l, dir, NULL)
                                  : ckpt_store_prune_list(&l, &removed, dir, NULL);
            ckpt_store_listing_free(l);
            ckpt_set_allocator(NULL);
            CHECK(rc == 0 || rc == CKPT_E_NOMEM || (which == 1 && rc == CKPT_E_NOTFOUND));
            if (rc == 0) done = alloc_left > 0;
        }
        CHECK(done);
    }
    remove_dir();
}

TEST(pointer_names) {
    CHECK_EQ_STR(ckpt_store_pointer_name(CKPT_STORE_POINTER_OK), "ok");
    CHECK_EQ_STR(ckpt_store_pointer_name(CKPT_STORE_POINTER_ABSENT), "absent");
    CHECK_EQ_STR(ckpt_store_pointer_name(CKPT_STORE_POINTER_MISSING), "missing");
    CHECK_EQ_STR(ckpt_store_pointer_name(CKPT_STORE_POINTER_CORRUPT), "corrupt");
    CHECK_EQ_STR(ckpt_store_pointer_name(CKPT_STORE_POINTER_INVALID), "invalid");
}

int main(void) {
    RUN(commit_copies_and_moves_latest);
    RUN(commit_progress);
    RUN(steps_sort_numerically);
    RUN(commit_prunes_beyond_keep);
    RUN(latest_skips_corrupt_and_list_reports);
    RUN(list_newest_lists_what_resume_skips);
    RUN(prune_counts_only_verified);
    RUN(commit_prune_skips_corrupt);
    RUN(commit_corrupt_source);
    RUN(commit_creates_dir);
    RUN(commit_refuses_committed_step);
    RUN(commit_bad_arguments);
    RUN_CORPUS(commit_sharded_refused);
    RUN(commit_with_writer);
    RUN(commit_faults);
    RUN(gc_removes_stale_temporaries);
    RUN(events_say_what_happened);
    RUN(commit_removes_killed_writers_temps);
    RUN(dcp_directory_generations);
    RUN(commit_dir);
    RUN(commit_dcp_source);
    RUN(allocation_failures);
    RUN(pointer_names);
    RUN(store_directory_is_latest_generation);
    return harness_end();
}
