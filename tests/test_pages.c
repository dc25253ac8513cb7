/* test_pages.c - memory handed to the library is read in large requests
 * where a reader walks it page by page (base/pages.h): a scan of a cold
 * mapping, mapped MADV_RANDOM as Python's ckpt.load(mmap=True) maps it,
 * whose zip end-record search walks back over the last 64 KiB. */
#include <fcntl.h>
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

int main(void) {
    RUN(end_record_search_reads_once);
    return harness_end();
}
