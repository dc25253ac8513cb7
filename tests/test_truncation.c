/* test_truncation.c - truncated and bit-flipped real checkpoints.
 *
 * For every file under CKPT_CORPUS/torch and CKPT_CORPUS/safetensors:
 *   - every prefix (files > 64 KiB: every length in the first and last
 *     8 KiB plus ~2000 evenly spaced ones) is opened from an exactly sized
 *     heap copy, so that ASan sees any read past the end: ckpt_open_memory
 *     must fail, or ckpt_verify must fail; never both succeed, never crash,
 *     and a failed open leaves *out NULL;
 *   - for torch zip archives, one byte flipped at ~200 positions spread over
 *     the storage bytes: open must still succeed (open reads no tensor
 *     bytes) and ckpt_verify must return CKPT_E_CHECKSUM (CRC-32).
 * Each file runs in a forked child, so a crash is reported with the file,
 * the phase and the offset instead of ending the run. Public API only.
 * Ends with "N passed, N failed" (one check per prefix / flip). */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ckpt.h"
#include "harness.h"

#define FULL_LIMIT (64u * 1024u) /* every prefix up to this size */
#define EDGE_BYTES (8u * 1024u)  /* dense head and tail for larger files */
#define SPREAD 2000u             /* evenly spaced prefixes in between */
#define FLIPS 200u               /* flipped bytes per torch zip */
#define MAX_REPORTS 8            /* failure lines printed per file */

/* Shared with the forked child: progress and counts survive a crash. */
struct progress {
    volatile long passed, failed;
    volatile int phase; /* 0 setup, 1 prefixes, 2 flips, 3 done */
    volatile uint64_t offset;
};

static struct progress *prog;
static int reports;

static void fail_msg(const char *file, const char *fmt, uint64_t off, const char *what) {
    prog->failed++;
    if (reports++ < MAX_REPORTS)
        fprintf(stderr, "  %s: %s at %" PRIu64 ": %s\n", file, fmt, off, what);
}

/* ------------------------------------------------------------- prefixes */

static void check_prefix(const char *name, const unsigned char *data, size_t n) {
    /* An exactly sized copy: a read past the prefix is a heap overflow. */
    unsigned char *buf = malloc(n ? n : 1);
    if (!buf) {
        fail_msg(name, "prefix", n, "out of memory in the test");
        return;
    }
    memcpy(buf, data, n);
    ckpt_file *f = (ckpt_file *)(uintptr_t)1; /* must become NULL on failure */
    int rc = ckpt_open_memory(&f, buf, n, name, NULL);
    if (rc != 0) {
        if (f != NULL)
            fail_msg(name, "prefix", n, "open failed but *out is not NULL");
        else if (rc >= 0)
            fail_msg(name, "prefix", n, "open returned a positive code");
        else
            prog->passed++;
    } else {
        int vr = ckpt_verify(NULL, f);
        ckpt_close(f);
        if (vr == 0)
            fail_msg(name, "prefix", n, "open and verify both succeeded");
        else
            prog->passed++;
    }
    free(buf);
}

static void check_prefixes(const char *name, const unsigned char *data, size_t size) {
    prog->phase = 1;
    if (size <= FULL_LIMIT) {
        for (size_t n = 0; n < size; n++) {
            prog->offset = n;
            check_prefix(name, data, n);
        }
        return;
    }
    for (size_t n = 0; n < EDGE_BYTES; n++) {
        prog->offset = n;
        check_prefix(name, data, n);
    }
    for (size_t k = 0; k < SPREAD; k++) {
        size_t n = EDGE_BYTES + (size_t)((uint64_t)k * (size - 2 * EDGE_BYTES) / SPREAD);
        prog->offset = n;
        check_prefix(name, data, n);
    }
    for (size_t n = size - EDGE_BYTES; n < size; n++) {
        prog->offset = n;
        check_prefix(name, data, n);
    }
}

/* ----------------------------------------------------------------- flips */

struct region {
    uint64_t id, offset, nbytes;
};

static void check_flips(const char *name, const unsigned char *data, size_t size) {
    prog->phase = 2;
    ckpt_file *f = NULL;
    if (ckpt_open_memory(&f, data, size, name, NULL) != 0) return;
    if (ckpt_file_format(f) != CKPT_FORMAT_TORCH_ZIP || ckpt_verify(NULL, f)) {
        ckpt_close(f);
        return; /* only intact torch zip archives carry CRCs to test */
    }
    size_t count = ckpt_file_tensor_count(f);
    struct region *regs = calloc(count ? count : 1, sizeof *regs);
    size_t nregs = 0;
    uint64_t total = 0;
    for (size_t i = 0; regs && i < count; i++) {
        const ckpt_tensor *t = ckpt_file_tensor(f, i);
        uint64_t id = ckpt_tensor_storage_id(t);
        size_t j = 0;
        while (j < nregs && regs[j].id != id) j++;
        if (j < nregs) continue;
        regs[nregs].id = id;
        regs[nregs].offset = ckpt_tensor_file_offset(t);
        regs[nregs].nbytes = ckpt_tensor_storage_nbytes(t);
        if (regs[nregs].offset > size || regs[nregs].nbytes > size - regs[nregs].offset) {
            fail_msg(name, "storage", regs[nregs].offset, "storage lies outside the file");
            regs[nregs].nbytes = 0;
        }
        total += regs[nregs].nbytes;
        nregs++;
    }
    ckpt_close(f);
    if (!regs) {
        fail_msg(name, "flip", 0, "out of memory in the test");
        return;
    }
    uint64_t flips = total < FLIPS ? total : FLIPS;
    unsigned char *buf = malloc(size);
    for (uint64_t k = 0; buf && k < flips; k++) {
        uint64_t at = k * total / flips, pos = 0;
        for (size_t j = 0; j < nregs; j++) {
            if (at < regs[j].nbytes) {
                pos = regs[j].offset + at;
                break;
            }
            at -= regs[j].nbytes;
        }
        prog->offset = pos;
        memcpy(buf, data, size);
        buf[pos] ^= 0xA5;
        ckpt_file *g = NULL;
        int rc = ckpt_open_memory(&g, buf, size, name, NULL);
        if (rc != 0) {
            fail_msg(name, "flip", pos, ckpt_error_name(rc));
            continue;
        }
        int vr = ckpt_verify(NULL, g);
        ckpt_close(g);
        if (vr != CKPT_E_CHECKSUM)
            fail_msg(name, "flip", pos,
                     vr == 0 ? "verify passed on a flipped byte" : ckpt_error_name(vr));
        else
            prog->passed++;
    }
    free(buf);
    free(regs);
}

/* ------------------------------------------------------------------ files */

static void check_file_child(const char *path) {
    size_t size = 0;
    unsigned char *data = harness_read_file(path, &size);
    if (!data) {
        fail_msg(path, "read", 0, strerror(errno));
        return;
    }
    check_prefixes(path, data, size);
    check_flips(path, data, size);
    prog->phase = 3;
    free(data);
}

static void check_file(const char *path) {
    static const char *phases[] = {"setup", "prefix", "flip", "done"};
    memset((void *)prog, 0, sizeof *prog);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "fork: %s\n", strerror(errno));
        harness_failed++;
        return;
    }
    if (pid == 0) {
        reports = 0;
        check_file_child(path);
        exit(0); /* exit, not _exit: LeakSanitizer checks at exit */
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    harness_passed += (int)prog->passed;
    harness_failed += (int)prog->failed;
    int clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!clean) {
        harness_failed++;
        if (WIFSIGNALED(status))
            printf("CRASH %s: signal %d in %s check at offset %" PRIu64 "\n", path,
                   WTERMSIG(status), phases[prog->phase], prog->offset);
        else
            printf("CRASH %s: exit status %d in %s check at offset %" PRIu64
                   " (sanitizer report on stderr)\n",
                   path, WEXITSTATUS(status), phases[prog->phase], prog->offset);
    } else {
        printf("%s %s: %ld checks, %ld failed\n", prog->failed ? "FAIL" : "PASS", path,
               (long)(prog->passed + prog->failed), (long)prog->failed);
    }
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Appends every regular file under dir (recursively) to *list. */
static int collect(const char *dir, char ***list, size_t *n, size_t *cap) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        size_t len = strlen(dir) + strlen(e->d_name) + 2;
        char *p = malloc(len);
        if (!p) break;
        snprintf(p, len, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(p, &st) != 0) {
            free(p);
            continue;
        }
        if (S_ISDIR(st.st_mode)) {
            collect(p, list, n, cap);
            free(p);
        } else if (S_ISREG(st.st_mode)) {
            if (*n == *cap) {
                size_t nc = *cap ? *cap * 2 : 64;
                char **nl = realloc(*list, nc * sizeof *nl);
                if (!nl) {
                    free(p);
                    break;
                }
                *list = nl;
                *cap = nc;
            }
            (*list)[(*n)++] = p;
        } else {
            free(p);
        }
    }
    closedir(d);
    return 0;
}

TEST(every_cut_of_every_corpus_file) {
    prog = mmap(NULL, sizeof *prog, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (prog == MAP_FAILED) {
        perror("mmap");
        CHECK(0);
        return;
    }
    static const char *roots[] = {CKPT_CORPUS "/torch", CKPT_CORPUS "/safetensors"};
    for (size_t r = 0; r < sizeof roots / sizeof roots[0]; r++) {
        char **files = NULL;
        size_t n = 0, cap = 0;
        if (collect(roots[r], &files, &n, &cap) != 0 || n == 0) {
            printf("FAIL %s: corpus missing or empty (%s)\n", roots[r], strerror(errno));
            harness_failed++;
        }
        if (n) qsort(files, n, sizeof *files, cmp_str);
        for (size_t i = 0; i < n; i++) {
            check_file(files[i]);
            free(files[i]);
        }
        free(files);
    }
    munmap((void *)prog, sizeof *prog);
}

int main(void) {
    RUN_CORPUS(every_cut_of_every_corpus_file);
    return harness_end();
}
