/* test_pages.c - how a cold input's pages are read in. Memory handed to
 * the library is read in large requests where a reader walks it page by
 * page (base/pages.h): a scan of a cold mapping, mapped MADV_RANDOM as
 * Python's ckpt.load(mmap=True) maps it, whose zip end-record search
 * walks back over the last 64 KiB. A file opened by path leaves no page
 * cached inside tensor data it only peeked at (a zip's local headers far
 * apart, the scan's sniff of a storage): its read-ahead later streams
 * through (base/source.h, ckpt_view.peek). */
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "ckpt.h"
#include "harness.h"

#define SCRATCH_NAME "pages"
#include "scratch.h"

static long major_faults(void) {
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_majflt : -1;
}

/* Pages of the mapping m (n pages) that are cached. */
static size_t cached(const uint8_t *m, size_t n, size_t page) {
    unsigned char res[256];
    size_t k = 0;
    if (n > sizeof res || mincore((void *)(uintptr_t)m, n * page, res) != 0) return n + 1;
    for (size_t i = 0; i < n; i++) k += res[i] & 1;
    return k;
}

/* 1 when page `i` of the file mapped at m is cached. */
static int page_cached(const uint8_t *m, size_t i, size_t page) {
    unsigned char res = 0;
    return mincore((void *)(uintptr_t)(m + i * page), page, &res) == 0 && (res & 1);
}

/* A torch zip of 4 float32 tensors of 4 MiB: members far apart, so
 * open peeks at each local header alone. */
static int write_sparse_zip(const char *path) {
    size_t elems = (size_t)1 << 20;
    float *v = malloc(elems * sizeof *v);
    ckpt_tree *t = NULL;
    ckpt_value *root, *key, *val;
    int rc = v ? ckpt_tree_new(&t) : CKPT_E_NOMEM;
    if (rc == 0) rc = ckpt_tree_dict(&root, t);
    for (int i = 0; rc == 0 && i < 4; i++) {
        for (size_t k = 0; k < elems; k++) v[k] = (float)(k % 101) + (float)i;
        char name[16];
        snprintf(name, sizeof name, "w%d", i);
        uint64_t shape[1] = {elems};
        rc = ckpt_tree_str(&key, t, name, strlen(name));
        if (rc == 0) rc = ckpt_tree_tensor(&val, t, CKPT_DT_F32, 1, shape, v, elems * sizeof *v);
        if (rc == 0) rc = ckpt_tree_set(t, root, key, val);
    }
    if (rc == 0) rc = ckpt_tree_write(root, path, CKPT_FORMAT_TORCH_ZIP, NULL);
    ckpt_tree_free(t);
    free(v);
    return rc;
}

/* Pages around where the tensors after the first start (their local
 * headers, their first bytes) that are cached after opening and scanning
 * `path`, mapped at m; *total: how many were looked at. */
static size_t cached_at_members(const char *path, const uint8_t *m, size_t page, size_t *total) {
    ckpt_file *f = NULL;
    ckpt_scan_report *r = NULL;
    size_t k = 0;
    *total = 0;
    CHECK_EQ_INT(ckpt_open(&f, path, NULL), 0);
    CHECK_EQ_INT(ckpt_scan(&r, path, NULL), 0);
    CHECK(r && ckpt_scan_verdict(r) == CKPT_VERDICT_SAFE);
    for (size_t i = 0; f && i < ckpt_file_tensor_count(f); i++) {
        uint64_t off = ckpt_tensor_file_offset(ckpt_file_tensor(f, i));
        if (off < ((uint64_t)1 << 22)) continue; /* the first: the head is read anyway */
        k += (size_t)page_cached(m, (size_t)((off - 1) / page), page) +
             (size_t)page_cached(m, (size_t)(off / page), page);
        *total += 2;
    }
    ckpt_scan_report_free(r);
    ckpt_close(f);
    return k;
}

TEST(peeks_leave_no_pages_inside_data) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    fresh_dir();
    char path[512];
    snprintf(path, sizeof path, "%s/sparse.pt", dir);
    CHECK_EQ_INT(write_sparse_zip(path), 0);
    int fd = open(path, O_RDONLY);
    struct stat st;
    const uint8_t *m = MAP_FAILED;
    if (fd < 0 || fstat(fd, &st) != 0 || fsync(fd) != 0 ||
        (m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0)) == MAP_FAILED) {
        CHECK(0);
        goto out;
    }
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    if (page_cached(m, (size_t)st.st_size / 2 / page, page)) {
        printf("peeks_leave_no_pages_inside_data: page cache not controllable here, skipped\n");
        goto out;
    }
    /* cold: the 3 later members' headers and first bytes were read, and
     * their pages dropped again. The kernel's own read-ahead of a peek can
     * still be in flight when its pages are dropped (a loaded machine:
     * 1 run in 50 left 2 pages), so the least of three cold tries counts:
     * a reader that keeps its peeks' pages leaves them every time. */
    size_t total, k = cached_at_members(path, m, page, &total);
    for (int tries = 1; k != 0 && tries < 3; tries++) {
        (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        size_t again = cached_at_members(path, m, page, &total);
        if (again < k) k = again;
    }
    CHECK_EQ_INT((int)total, 6);
    CHECK_EQ_INT((int)k, 0);
    /* warm: what was cached stays cached */
    uint8_t *buf = malloc((size_t)st.st_size);
    CHECK(buf && pread(fd, buf, (size_t)st.st_size, 0) == (ssize_t)st.st_size);
    free(buf);
    k = cached_at_members(path, m, page, &total);
    CHECK_EQ_INT((int)k, 6);
out:
    if (m != MAP_FAILED) munmap((void *)(uintptr_t)m, (size_t)st.st_size);
    if (fd >= 0) close(fd);
    remove_dir();
}

TEST(end_record_search_reads_once) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE), n = 64;
    fresh_dir();
    char path[512];
    snprintf(path, sizeof path, "%s/f.bin", dir);
    /* no end record anywhere: the search walks back its whole 64 KiB */
    uint8_t *bytes = calloc(n, page);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    const uint8_t *m = MAP_FAILED;
    if (fd < 0 || !bytes || write(fd, bytes, n * page) != (ssize_t)(n * page) || fsync(fd) != 0 ||
        (m = mmap(NULL, n * page, PROT_READ, MAP_PRIVATE, fd, 0)) == MAP_FAILED) {
        CHECK(0);
        goto out;
    }
    (void)madvise((void *)(uintptr_t)m, n * page, MADV_RANDOM);
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    if (cached(m, n, page) != 0) {
        /* a file system whose pages cannot be dropped (tmpfs): no cold file */
        printf("end_record_search_reads_once: page cache not controllable here, skipped\n");
    } else {
        long before = major_faults();
        ckpt_scan_report *r = NULL;
        CHECK_EQ_INT(ckpt_scan_memory(&r, m, n * page, "f.bin", NULL), 0);
        long faults = major_faults() - before;
        /* the head, and the tail asked for at once; one fault per page
         * walked back (17) without the hint */
        CHECK(faults >= 1);
        CHECK(faults <= 3);
        if (faults > 3) fprintf(stderr, "major faults: %ld\n", faults);
        ckpt_scan_report_free(r);
    }
out:
    if (m != MAP_FAILED) munmap((void *)(uintptr_t)m, n * page);
    if (fd >= 0) close(fd);
    free(bytes);
    remove_dir();
}

/* A safetensors header of ~140 KiB (2000 tensors), opened from a cold
 * mapping in MADV_RANDOM: the header is asked for at once, not read a
 * page per fault while it is copied (~35 reads). */
TEST(safetensors_header_reads_once) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    fresh_dir();
    char path[512];
    snprintf(path, sizeof path, "%s/many.safetensors", dir);
    ckpt_tree *t = NULL;
    ckpt_value *root, *key, *val;
    float v[4] = {1, 2, 3, 4};
    uint64_t shape[1] = {4};
    int rc = ckpt_tree_new(&t);
    if (rc == 0) rc = ckpt_tree_dict(&root, t);
    for (int i = 0; rc == 0 && i < 2000; i++) {
        char name[48];
        snprintf(name, sizeof name, "model.layers.%d.mlp.weight", i);
        rc = ckpt_tree_str(&key, t, name, strlen(name));
        if (rc == 0) rc = ckpt_tree_tensor(&val, t, CKPT_DT_F32, 1, shape, v, sizeof v);
        if (rc == 0) rc = ckpt_tree_set(t, root, key, val);
    }
    if (rc == 0) rc = ckpt_tree_write(root, path, CKPT_FORMAT_SAFETENSORS, NULL);
    ckpt_tree_free(t);
    CHECK_EQ_INT(rc, 0);
    int fd = open(path, O_RDONLY);
    struct stat st;
    const uint8_t *m = MAP_FAILED;
    if (fd < 0 || fstat(fd, &st) != 0 || fsync(fd) != 0 ||
        (m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0)) == MAP_FAILED) {
        CHECK(0);
        goto out;
    }
    CHECK(st.st_size > (off_t)(32 * page));
    (void)madvise((void *)(uintptr_t)m, (size_t)st.st_size, MADV_RANDOM);
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    if (page_cached(m, 8, page)) {
        printf("safetensors_header_reads_once: page cache not controllable here, skipped\n");
        goto out;
    }
    long before = major_faults();
    ckpt_file *f = NULL;
    CHECK_EQ_INT(ckpt_open_memory(&f, m, (size_t)st.st_size, "many.safetensors", NULL), 0);
    long faults = major_faults() - before;
    CHECK(f && ckpt_file_tensor_count(f) == 2000);
    ckpt_close(f);
    /* the length's page, then the rest of the header at once */
    CHECK(faults >= 1);
    CHECK(faults <= 3);
    if (faults > 3) fprintf(stderr, "major faults: %ld\n", faults);
out:
    if (m != MAP_FAILED) munmap((void *)(uintptr_t)m, (size_t)st.st_size);
    if (fd >= 0) close(fd);
    remove_dir();
}

/* ckpt_file_read_storages fills a fresh buffer in pieces of 256 KiB, each
 * piece's pages made present first (base/pages.h): a storage of 8 MiB + 4
 * bytes read into a buffer at an odd address (the pieces start and end
 * inside pages) holds every byte, and nothing around it is written; the
 * file cut inside a later piece is CKPT_E_TRUNCATED at the cut. */
TEST(storages_fill_fresh_buffers) {
    fresh_dir();
    char path[512];
    snprintf(path, sizeof path, "%s/big.safetensors", dir);
    size_t elems = ((size_t)1 << 21) + 1, nbytes = elems * sizeof(float);
    float *v = malloc(nbytes);
    ckpt_tree *t = NULL;
    ckpt_value *root, *key, *val;
    int rc = v ? ckpt_tree_new(&t) : CKPT_E_NOMEM;
    for (size_t k = 0; v && k < elems; k++) v[k] = (float)(k % 251);
    uint64_t shape[1] = {elems};
    if (rc == 0) rc = ckpt_tree_dict(&root, t);
    if (rc == 0) rc = ckpt_tree_str(&key, t, "w", 1);
    if (rc == 0) rc = ckpt_tree_tensor(&val, t, CKPT_DT_F32, 1, shape, v, nbytes);
    if (rc == 0) rc = ckpt_tree_set(t, root, key, val);
    if (rc == 0) rc = ckpt_tree_write(root, path, CKPT_FORMAT_SAFETENSORS, NULL);
    ckpt_tree_free(t);
    CHECK_EQ_INT(rc, 0);
    size_t cap = nbytes + ((size_t)4 << 20);
    uint8_t *buf = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ckpt_file *f = NULL;
    CHECK(buf != MAP_FAILED);
    CHECK_EQ_INT(ckpt_open(&f, path, NULL), 0);
    if (buf == MAP_FAILED || !f) goto out;
    uint8_t *dst = buf + 4100;
    uint64_t id = ckpt_tensor_storage_id(ckpt_file_tensor(f, 0));
    void *dsts[1] = {dst};
    CHECK_EQ_INT((int)ckpt_tensor_storage_nbytes(ckpt_file_tensor(f, 0)), (int)nbytes);
    CHECK_EQ_INT(ckpt_file_read_storages(f, 1, &id, dsts), 0);
    CHECK(v && memcmp(dst, v, nbytes) == 0);
    CHECK_EQ_INT(dst[-1], 0); /* nothing written outside the storage */
    CHECK_EQ_INT(dst[nbytes], 0);
    /* the file cut inside a later piece: an error at the cut, not a
     * short buffer */
    uint64_t cut = ckpt_tensor_file_offset(ckpt_file_tensor(f, 0)) + ((uint64_t)6 << 20);
    CHECK_EQ_INT(truncate(path, (off_t)cut), 0);
    CHECK_EQ_INT(ckpt_file_read_storages(f, 1, &id, dsts), CKPT_E_TRUNCATED);
    CHECK(ckpt_error_last()->offset == cut);
out:
    ckpt_close(f);
    if (buf != MAP_FAILED) munmap(buf, cap);
    free(v);
    remove_dir();
}

int main(void) {
    RUN(end_record_search_reads_once);
    RUN(peeks_leave_no_pages_inside_data);
    RUN(safetensors_header_reads_once);
    RUN(storages_fill_fresh_buffers);
    return harness_end();
}
