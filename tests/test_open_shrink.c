/* test_open_shrink.c - a file that shrinks while ckpt_open reads its
 * structure, or while ckpt_scan reads it, is an error, never SIGBUS
 * (test_shrink.c covers the reads of tensor bytes once a file is open).
 *
 * Each layout (a torch zip of many small members, one of a few large
 * ones, a legacy stacked-pickle .pt, a raw pickle longer than the first
 * pickle window, a sharded pytorch_model.bin index, a DCP .metadata; for
 * the scan also an object .npy and a DCP directory with its data) is
 * opened and verified (or scanned) once intact, counting the preads;
 * then again once
 * for every N up to that count, with the source hook (base/source.h)
 * truncating the file being read right before its Nth pread:
 *   - odd N: to the offset about to be read. That read must fail, and the
 *     call with it: CKPT_E_TRUNCATED naming that file and that offset;
 *   - even N: right after the range about to be read. That read succeeds;
 *     whatever is read later past the new end must fail the call with
 *     CKPT_E_TRUNCATED naming the file and an offset at or past the end
 *     (or nothing is, and the call succeeds; a scan then with the intact
 *     verdict).
 * A read through the mapping past the new end (structure parsed from it
 * between two preads) would raise SIGBUS instead and end this binary,
 * failing the test. Deterministic: no second process, no timing. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SCRATCH_NAME "openshrink"
#include "base/source.h"
#include "ckpt.h"
#include "harness.h"
#include "scratch.h"

/* ------------------------------------------------------------ the hook */

static long cut_at, reads; /* cut before read number cut_at (0: never) */
static char cut_path[512];
static uint64_t cut_size; /* the file's size after the cut */
static int cut_done;

static void cut_hook(const ckpt_source *src, uint64_t off, size_t n) {
    if (++reads != cut_at) return;
    snprintf(cut_path, sizeof cut_path, "%s", src->path);
    cut_size = cut_at % 2 ? off : off + n;
    if (truncate(src->path, (off_t)cut_size) != 0) perror("truncate");
    cut_done = 1;
}

/* ------------------------------------------------------------ layouts */

/* A layout: files (name, bytes) written fresh before every run, and the
 * path that is opened. */
#define MAX_FILES 4
typedef struct layout {
    const char *name;
    const char *open; /* relative to dir */
    const char *scan; /* what ckpt_scan is given, when not `open` */
    int nfiles;
    const char *file[MAX_FILES];
    unsigned char *data[MAX_FILES];
    size_t len[MAX_FILES];
} layout;

static int write_bytes(const char *name, const void *p, size_t n) {
    const char *path = in_dir(name);
    FILE *fp = fopen(path, "wb");
    if (!fp) return -1;
    int bad = fwrite(p, 1, n, fp) != n;
    return fclose(fp) != 0 || bad ? -1 : 0;
}

/* Adds file `name`, already on disk, to l (its pristine bytes). */
static int keep(layout *l, const char *name) {
    const char *path = in_dir(name);
    l->file[l->nfiles] = name;
    l->data[l->nfiles] = harness_read_file(path, &l->len[l->nfiles]);
    return l->data[l->nfiles++] ? 0 : -1;
}

static int restore(const layout *l) {
    for (int i = 0; i < l->nfiles; i++)
        if (write_bytes(l->file[i], l->data[i], l->len[i])) return -1;
    return 0;
}

/* A torch zip of tensors "<prefix><i>", i in [first, first + n), each
 * `elems` float32 values. */
static int write_zip(const char *name, const char *prefix, int first, int n, size_t elems) {
    const char *path = in_dir(name);
    float *v = malloc(elems * sizeof *v);
    ckpt_tree *t = NULL;
    ckpt_value *root, *key, *val;
    int rc = v ? ckpt_tree_new(&t) : CKPT_E_NOMEM;
    if (rc == 0) rc = ckpt_tree_dict(&root, t);
    for (int i = first; rc == 0 && i < first + n; i++) {
        for (size_t k = 0; k < elems; k++) v[k] = (float)(k % 101) + (float)i;
        char key_name[32];
        snprintf(key_name, sizeof key_name, "%s%d", prefix, i);
        uint64_t shape[1] = {elems};
        rc = ckpt_tree_str(&key, t, key_name, strlen(key_name));
        if (rc == 0) rc = ckpt_tree_tensor(&val, t, CKPT_DT_F32, 1, shape, v, elems * sizeof *v);
        if (rc == 0) rc = ckpt_tree_set(t, root, key, val);
    }
    if (rc == 0) rc = ckpt_tree_write(root, path, CKPT_FORMAT_TORCH_ZIP, NULL);
    ckpt_tree_free(t);
    free(v);
    return rc;
}

/* Pickle bytes, appended. */
typedef struct out {
    unsigned char *p;
    size_t n, cap;
} out;

static void put(out *o, const void *p, size_t n) {
    if (o->n + n > o->cap) {
        o->cap = (o->n + n) * 2;
        o->p = realloc(o->p, o->cap);
        if (!o->p) abort();
    }
    memcpy(o->p + o->n, p, n);
    o->n += n;
}

static void put_str(out *o, const char *s) { put(o, s, strlen(s)); }

static void put_u32(out *o, uint32_t v) {
    unsigned char b[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                          (unsigned char)(v >> 24)};
    put(o, b, 4);
}

static void put_unicode(out *o, const char *s) { /* BINUNICODE */
    put_str(o, "X");
    put_u32(o, (uint32_t)strlen(s));
    put_str(o, s);
}

/* torch.save(..., _use_new_zipfile_serialization=False) of a dict of n
 * float32 tensors "w<i>" of `elems` values (FORMATS.md §3): magic,
 * protocol, sys_info, the main pickle with one persistent id per
 * storage, the storage keys, then each storage's count and bytes. */
static int write_legacy(const char *name, int n, uint32_t elems) {
    out o = {0};
    put(&o, "\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.", 15);
    put(&o, "\x80\x02M\xe9\x03.", 6);
    put(&o, "\x80\x02}.", 4);
    put(&o, "\x80\x02}(", 4);
    char key[32];
    for (int i = 0; i < n; i++) {
        snprintf(key, sizeof key, "w%d", i);
        put_unicode(&o, key);
        put_str(&o, "ctorch._utils\n_rebuild_tensor_v2\n((");
        put_unicode(&o, "storage");
        put_str(&o, "ctorch\nFloatStorage\n");
        snprintf(key, sizeof key, "%d", i);
        put_unicode(&o, key);
        put_unicode(&o, "cpu");
        put_str(&o, "J");
        put_u32(&o, elems);
        put(&o, "NtQK\x00J", 6);
        put_u32(&o, elems);
        put_str(&o, "\x85K\x01\x85\x89"
                    "ccollections\nOrderedDict\n)RtR");
    }
    put_str(&o, "u.");
    put(&o, "\x80\x02](", 4);
    for (int i = 0; i < n; i++) {
        snprintf(key, sizeof key, "%d", i);
        put_unicode(&o, key);
    }
    put_str(&o, "e.");
    for (int i = 0; i < n; i++) {
        unsigned char count[8] = {(unsigned char)elems, (unsigned char)(elems >> 8),
                                  (unsigned char)(elems >> 16), (unsigned char)(elems >> 24)};
        put(&o, count, 8);
        for (uint32_t k = 0; k < elems; k++) {
            float x = (float)(k % 97) + (float)i;
            put(&o, &x, 4);
        }
    }
    int rc = write_bytes(name, o.p, o.n);
    free(o.p);
    return rc;
}

/* A plain pickle {"blob": <bytes>, "n": 7} whose bytes outgrow the
 * reader's first window (4 MiB): it is read again in a larger one. */
static int write_raw_pickle(const char *name, size_t blob) {
    out o = {0};
    put(&o, "\x80\x03}(", 4);
    put_unicode(&o, "blob");
    put_str(&o, "B");
    put_u32(&o, (uint32_t)blob);
    for (size_t i = 0; i < blob; i++) {
        unsigned char c = (unsigned char)(i * 7);
        put(&o, &c, 1);
    }
    put_unicode(&o, "n");
    put_str(&o, "K\x07u.");
    int rc = write_bytes(name, o.p, o.n);
    free(o.p);
    return rc;
}

static int make_layout(layout *l, int which) {
    memset(l, 0, sizeof *l);
    switch (which) {
    case 0:
        l->name = "torch zip, dense members";
        l->open = "dense.pt";
        return write_zip("dense.pt", "w", 0, 300, 16) || keep(l, "dense.pt");
    case 1:
        l->name = "torch zip, large members";
        l->open = "sparse.pt";
        return write_zip("sparse.pt", "w", 0, 3, (size_t)1 << 18) || keep(l, "sparse.pt");
    case 2:
        l->name = "legacy stacked pickles";
        l->open = "legacy.pt";
        return write_legacy("legacy.pt", 40, 16384) || keep(l, "legacy.pt");
    case 3:
        l->name = "raw pickle";
        l->open = "raw.pkl";
        return write_raw_pickle("raw.pkl", (size_t)6 << 20) || keep(l, "raw.pkl");
    case 4: {
        l->name = "sharded index";
        l->open = "pytorch_model.bin.index.json";
        static const char index[] =
            "{\"metadata\": {}, \"weight_map\": {\"a0\": \"a.bin\", \"a1\": \"a.bin\", "
            "\"b2\": \"b.bin\", \"b3\": \"b.bin\"}}";
        return write_zip("a.bin", "a", 0, 2, 64) || write_zip("b.bin", "b", 2, 2, 64) ||
               write_bytes(l->open, index, sizeof index - 1) || keep(l, l->open) ||
               keep(l, "a.bin") || keep(l, "b.bin");
    }
    case 6: {
        /* np.save of an object array: the pickle after the header is
         * scanned (np.load(allow_pickle=True) runs it) */
        l->name = "object npy";
        l->open = "obj.npy";
        static const char hdr[] = "{'descr': '|O', 'fortran_order': False, 'shape': (2,), }";
        out o = {0};
        put(&o, "\x93NUMPY\x01\x00", 8);
        unsigned char len[2] = {118, 0};
        put(&o, len, 2);
        put_str(&o, hdr);
        for (size_t i = sizeof hdr - 1; i < 117; i++) put_str(&o, " ");
        put_str(&o, "\n");
        put(&o, "\x80\x02](", 4);
        put_unicode(&o, "a");
        put_unicode(&o, "b");
        put_str(&o, "e.");
        int rc = write_bytes(l->open, o.p, o.n) || keep(l, l->open);
        free(o.p);
        return rc;
    }
    case 7: {
        /* ckpt convert's DCP directory: .metadata and a data file */
        l->name = "DCP directory";
        l->open = "dcpw/.metadata";
        l->scan = "dcpw";
        ckpt_convert_options o = CKPT_CONVERT_OPTIONS_INIT;
        o.format = CKPT_FORMAT_DCP;
        int rc = write_zip("dcpsrc.pt", "w", 0, 20, 64) ||
                 ckpt_convert(NULL, in_dir("dcpsrc.pt"), in_dir("dcpw"), &o);
        DIR *d = rc ? NULL : opendir(in_dir("dcpw"));
        static char names[MAX_FILES][300];
        for (struct dirent *e; d && (e = readdir(d));) {
            if (e->d_name[0] == '.' && strcmp(e->d_name, ".metadata")) continue;
            if (l->nfiles == MAX_FILES) rc = -1;
            if (rc) break;
            snprintf(names[l->nfiles], sizeof names[0], "dcpw/%s", e->d_name);
            rc = keep(l, names[l->nfiles]);
        }
        if (d) closedir(d);
        return rc || l->nfiles < 2;
    }
    default: {
        l->name = "DCP metadata";
        l->open = "dcp/.metadata";
        const char *path = in_dir("dcp");
        size_t n;
        unsigned char *meta =
            harness_read_file(CKPT_SRC "/fuzz/corpora/dcp_meta/single.metadata", &n);
        int rc =
            !meta || (mkdir(path, 0700) != 0) || write_bytes(l->open, meta, n) || keep(l, l->open);
        free(meta);
        return rc;
    }
    }
}

/* ------------------------------------------------------------ runs */

/* 1: runs scan l's file instead of opening it */
static int scan_mode;
static ckpt_verdict verdict;      /* of the last scan that succeeded */
static ckpt_verdict want_verdict; /* of the intact file */

/* Opens and verifies l's file (or scans it); the first error. */
static int run_once(const layout *l) {
    if (scan_mode) {
        ckpt_scan_report *r = NULL;
        int rc = ckpt_scan(&r, in_dir(l->scan ? l->scan : l->open), NULL);
        CHECK((rc == 0) == (r != NULL));
        verdict = ckpt_scan_verdict(r);
        ckpt_scan_report_free(r);
        return rc;
    }
    const char *path = in_dir(l->open);
    ckpt_file *f = NULL;
    int rc = ckpt_open(&f, path, NULL);
    if (rc == 0) {
        rc = ckpt_verify(NULL, f);
        ckpt_close(f);
    } else {
        CHECK(f == NULL);
    }
    return rc;
}

/* Runs with the Nth read cut, for every N when there are few reads, else
 * the first 150 and 150 more spread over the rest. */
static void cut_every_read(const layout *l, int intact, ckpt_verdict intact_verdict) {
    long total = reads, cuts = 0, failed = 0;
    for (long n = 1; n <= total; n += n < 150 || total <= 300 ? 1 : (total - 150) / 150 + 1) {
        int restored = restore(l) == 0;
        CHECK(restored);
        if (!restored) return;
        reads = 0;
        cut_done = 0;
        cut_at = n;
        int rc = run_once(l);
        cut_at = 0;
        cuts++;
        const ckpt_error *e = ckpt_error_last();
        if (!cut_done) continue; /* the run took another path: fewer reads */
        int ok = n % 2 ? rc == CKPT_E_TRUNCATED && e->offset == cut_size
                       : rc == intact || (rc == CKPT_E_TRUNCATED && e->offset >= cut_size);
        if (rc == CKPT_E_TRUNCATED)
            ok = ok && !strcmp(e->file, cut_path) && strstr(e->message, "shrank");
        if (rc == 0 && scan_mode) ok = ok && verdict == intact_verdict;
        if (!ok && failed++ < 3)
            fprintf(stderr, "  %s: cut %s to %llu at read %ld: rc %d (intact %d), %s at %llu: %s\n",
                    l->name, cut_path, (unsigned long long)cut_size, n, rc, intact, e->file,
                    (unsigned long long)e->offset, e->message);
    }
    CHECK_EQ_INT((int)failed, 0);
    CHECK(cuts > 0);
}

static void run_layout(int which, int intact_rc) {
    layout l;
    int built = make_layout(&l, which) == 0;
    CHECK(built);
    if (!built) return;
    reads = 0;
    int rc = run_once(&l);
    CHECK_EQ_INT(rc, intact_rc);
    if (scan_mode) CHECK_EQ_INT((int)verdict, (int)want_verdict);
    /* every layout reads its structure with pread: detection at least */
    CHECK(reads >= 2);
    cut_every_read(&l, rc, verdict);
    for (int i = 0; i < l.nfiles; i++) free(l.data[i]);
}

/* ckpt_scan of layout `which`: its intact verdict, then every cut. */
static void scan_layout(int which, ckpt_verdict want) {
    scan_mode = 1;
    want_verdict = want;
    run_layout(which, 0);
    scan_mode = 0;
}

TEST(zip_dense_shrinking) { run_layout(0, 0); }
TEST(zip_sparse_shrinking) { run_layout(1, 0); }
TEST(legacy_shrinking) { run_layout(2, 0); }
TEST(raw_pickle_shrinking) { run_layout(3, 0); }
TEST(sharded_shrinking) { run_layout(4, 0); }
/* its data files are absent: the intact open fails after the metadata */
TEST(dcp_metadata_shrinking) { run_layout(5, CKPT_E_MISMATCH); }

/* The same layouts scanned (ckpt_scan, which doctor runs): the verdict
 * of the intact file, or CKPT_E_TRUNCATED naming the file that shrank and
 * where it ends now, never SIGBUS. The scan reads far less than open:
 * members it does not scan are only sniffed (first and last bytes). */
TEST(scan_zip_dense_shrinking) { scan_layout(0, CKPT_VERDICT_SAFE); }
TEST(scan_zip_sparse_shrinking) { scan_layout(1, CKPT_VERDICT_SAFE); }
TEST(scan_legacy_shrinking) { scan_layout(2, CKPT_VERDICT_SAFE); }
TEST(scan_raw_pickle_shrinking) { scan_layout(3, CKPT_VERDICT_SAFE); }
TEST(scan_sharded_shrinking) { scan_layout(4, CKPT_VERDICT_SAFE); }
TEST(scan_npy_shrinking) { scan_layout(6, CKPT_VERDICT_SAFE); }
TEST(scan_dcp_dir_shrinking) { scan_layout(7, CKPT_VERDICT_SAFE); }

/* A scan from a path reads a legacy file's pickles through a pread
 * window that grows while a pickle runs past it; what the run cut short
 * reported is undone: the findings are those of the scan from memory,
 * repeat counts included (os.system twice, around 5 MiB of bytes that
 * outgrow the first window; the run cut short saw the first one). */
TEST(scan_window_regrowth_reports_once) {
    out o = {0};
    put(&o, "\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.", 15);
    put(&o, "\x80\x02M\xe9\x03.", 6);
    put(&o, "\x80\x02}.", 4);
    put_str(&o, "\x80\x02(cos\nsystem\n");
    size_t blob = (size_t)5 << 20;
    put_str(&o, "B");
    put_u32(&o, (uint32_t)blob);
    for (size_t i = 0; i < blob; i++) put(&o, "x", 1);
    put_str(&o, "cos\nsystem\nt.");
    put(&o, "\x80\x02].", 4);
    CHECK_EQ_INT(write_bytes("window.pt", o.p, o.n), 0);
    ckpt_scan_report *file = NULL, *mem = NULL;
    CHECK_EQ_INT(ckpt_scan(&file, in_dir("window.pt"), NULL), 0);
    CHECK_EQ_INT(ckpt_scan_memory(&mem, o.p, o.n, in_dir("window.pt"), NULL), 0);
    CHECK_EQ_INT((int)ckpt_scan_verdict(file), (int)CKPT_VERDICT_UNSAFE);
    CHECK_EQ_INT((int)ckpt_scan_finding_count(file), (int)ckpt_scan_finding_count(mem));
    int seen_twice = 0;
    for (size_t i = 0; i < ckpt_scan_finding_count(file) && i < ckpt_scan_finding_count(mem); i++) {
        const ckpt_finding *a = ckpt_scan_finding(file, i), *b = ckpt_scan_finding(mem, i);
        CHECK(!strcmp(a->message, b->message) && a->offset == b->offset &&
              !strcmp(a->kind, b->kind));
        seen_twice += strstr(a->message, "os.system") && strstr(a->message, "seen 2 times");
    }
    CHECK_EQ_INT(seen_twice, 1);
    ckpt_scan_report_free(file);
    ckpt_scan_report_free(mem);
    free(o.p);
}

/* The records open copies with pread (data.pkl) are charged to the
 * file's budget, the same from a path and from memory: a data.pkl larger
 * than max_inflate_bytes is CKPT_E_LIMIT naming it, never a bigger copy. */
TEST(records_within_budget) {
    const char *path = in_dir("budget.pt");
    CHECK_EQ_INT(write_zip("budget.pt", "w", 0, 300, 4), 0);
    size_t n;
    unsigned char *bytes = harness_read_file(path, &n);
    CHECK(bytes != NULL);
    if (!bytes) return;
    ckpt_open_options o = CKPT_OPEN_OPTIONS_INIT;
    o.limits.max_inflate_bytes = 1000; /* data.pkl of 300 tensors is more */
    for (int from_memory = 0; from_memory < 2; from_memory++) {
        ckpt_file *f = NULL;
        int rc =
            from_memory ? ckpt_open_memory(&f, bytes, n, "budget.pt", &o) : ckpt_open(&f, path, &o);
        CHECK_EQ_INT(rc, CKPT_E_LIMIT);
        CHECK(f == NULL);
        CHECK(strstr(ckpt_error_last()->member, "data.pkl") != NULL);
        CHECK(strstr(ckpt_error_last()->message, "budget") != NULL);
    }
    o.limits.max_inflate_bytes = (uint64_t)1 << 32;
    ckpt_file *f = NULL;
    CHECK_EQ_INT(ckpt_open(&f, path, &o), 0);
    CHECK(f && ckpt_file_tensor_count(f) == 300);
    ckpt_close(f);
    free(bytes);
}

/* verify takes the CRC-32 of small stored members and data.pkl from the
 * bytes open read (ckpt_zip_crc_seen) and reads none of them again: a
 * file cut after open is still TRUNCATED, at its new size, not OK. */
TEST(verify_after_shrink_since_open) {
    size_t n;
    unsigned char *bytes = harness_read_file(CKPT_SRC "/examples/train.pt", &n); /* torch.save's */
    CHECK(bytes != NULL);
    if (!bytes) return;
    CHECK_EQ_INT(write_bytes("cut_after_open.pt", bytes, n), 0);
    free(bytes);
    const char *path = in_dir("cut_after_open.pt");
    struct stat st;
    CHECK_EQ_INT(stat(path, &st), 0);
    ckpt_file *f = NULL;
    CHECK_EQ_INT(ckpt_open(&f, path, NULL), 0);
    uint64_t half = (uint64_t)st.st_size / 2;
    CHECK_EQ_INT(truncate(path, (off_t)half), 0);
    CHECK_EQ_INT(ckpt_verify(NULL, f), CKPT_E_TRUNCATED);
    CHECK(ckpt_error_last()->offset == half);
    ckpt_close(f);
}

int main(void) {
    fresh_dir();
    ckpt_source_read_hook = cut_hook;
    RUN(zip_dense_shrinking);
    RUN(zip_sparse_shrinking);
    RUN(legacy_shrinking);
    RUN(raw_pickle_shrinking);
    RUN(sharded_shrinking);
    RUN(dcp_metadata_shrinking);
    RUN(scan_zip_dense_shrinking);
    RUN(scan_zip_sparse_shrinking);
    RUN(scan_legacy_shrinking);
    RUN(scan_raw_pickle_shrinking);
    RUN(scan_sharded_shrinking);
    RUN(scan_npy_shrinking);
    RUN(scan_dcp_dir_shrinking);
    RUN(scan_window_regrowth_reports_once);
    RUN(records_within_budget);
    RUN(verify_after_shrink_since_open);
    remove_dir();
    return harness_end();
}
