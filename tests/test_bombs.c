/* test_bombs.c - compressed bombs and wide DAGs (issue 12, items 5 and 6).
 *
 * Each input is built here, under 1 MiB, and each check is memory: every
 * allocation of the library goes through an accounting allocator hook
 * that fails past 512 MiB live and records the peak. Every run is in a
 * forked child under an alarm, a bound on termination sized far above
 * what the linear code needs, never a timing assertion. */
#include <errno.h>
#include <libdeflate.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ckpt.h"
#include "acct.h"
#include "child.h"
#include "harness.h"

#define BUDGET ((size_t)512 << 20) /* acct_budget's default */

/* ------------------------------------------------------------ zip builder */

typedef struct member {
    const char *name;
    size_t local, csize;
    uint64_t usize;
    uint32_t crc;
    uint16_t method;
} member;

typedef struct zbuild {
    uint8_t *buf;
    size_t len, cap;
    member m[8];
    size_t n;
} zbuild;

static void put(zbuild *w, const void *p, size_t n) {
    if (w->len + n > w->cap) abort(); /* a test bug, not input */
    memcpy(w->buf + w->len, p, n);
    w->len += n;
}
static void put16(zbuild *w, uint64_t v) {
    uint8_t x[2] = {(uint8_t)v, (uint8_t)(v >> 8)};
    put(w, x, 2);
}
static void put32(zbuild *w, uint64_t v) {
    put16(w, v & 0xFFFF);
    put16(w, v >> 16 & 0xFFFF);
}

/* A member whose data is `body` (csize bytes) as given: deflated or not
 * (method), declaring usize and crc. */
static void add_raw(zbuild *w, const char *name, const void *body, size_t csize, uint64_t usize,
                    uint32_t crc, uint16_t method) {
    if (w->n == sizeof w->m / sizeof w->m[0]) abort();
    w->m[w->n++] = (member){name, w->len, csize, usize, crc, method};
    put32(w, 0x04034b50);
    put16(w, 20);
    put16(w, 0);
    put16(w, method);
    put32(w, 0);
    put32(w, crc);
    put32(w, csize);
    put32(w, usize);
    put16(w, strlen(name));
    put16(w, 0);
    put(w, name, strlen(name));
    put(w, body, csize);
}

/* Deflates data[0..n) (libdeflate, level 6) as member `name`. */
static void add_deflated(zbuild *w, const char *name, const void *data, size_t n) {
    struct libdeflate_compressor *c = libdeflate_alloc_compressor(6);
    size_t bound = libdeflate_deflate_compress_bound(c, n);
    uint8_t *packed = malloc(bound);
    if (!c || !packed) abort();
    size_t csize = libdeflate_deflate_compress(c, data, n, packed, bound);
    libdeflate_free_compressor(c);
    if (!csize) abort();
    add_raw(w, name, packed, csize, n, libdeflate_crc32(0, data, n), 8);
    free(packed);
}

static void finish(zbuild *w) {
    size_t cd = w->len;
    for (size_t i = 0; i < w->n; i++) {
        const member *m = &w->m[i];
        put32(w, 0x02014b50);
        put16(w, 0x031e);
        put16(w, 20);
        put16(w, 0);
        put16(w, m->method);
        put32(w, 0);
        put32(w, m->crc);
        put32(w, m->csize);
        put32(w, m->usize);
        put16(w, strlen(m->name));
        put32(w, 0); /* extra, comment lengths */
        put32(w, 0); /* disk, internal attributes */
        put32(w, 0); /* external attributes */
        put32(w, m->local);
        put(w, m->name, strlen(m->name));
    }
    size_t cd_size = w->len - cd;
    put32(w, 0x06054b50);
    put32(w, 0);
    put16(w, w->n);
    put16(w, w->n);
    put32(w, cd_size);
    put32(w, cd);
    put16(w, 0);
}

static zbuild new_zip(size_t cap) {
    zbuild w = {0};
    w.buf = malloc(cap);
    w.cap = cap;
    if (!w.buf) abort();
    return w;
}

/* A torch archive "b/" of data.pkl = PROTO 2, `op` (two bytes: push and
 * POP) n times, then an empty dict; padded with a stored member of random
 * bytes so that the file is just under 1 MiB. */
static zbuild pickle_bomb(const char *op, size_t n) {
    size_t len = 2 + 2 * n + 2;
    uint8_t *pkl = malloc(len);
    if (!pkl) abort();
    pkl[0] = 0x80, pkl[1] = 2;
    for (size_t i = 0; i < n; i++) memcpy(pkl + 2 + 2 * i, op, 2);
    memcpy(pkl + len - 2, "}.", 2);
    zbuild w = new_zip((size_t)1 << 20);
    add_deflated(&w, "b/data.pkl", pkl, len);
    add_deflated(&w, "b/version", "3\n", 2);
    free(pkl);
    size_t pad = w.cap - w.len - 4096;
    uint8_t *noise = malloc(pad);
    if (!noise) abort();
    uint32_t x = 12345;
    for (size_t i = 0; i < pad; i++) noise[i] = (uint8_t)((x = x * 1103515245u + 12345u) >> 24);
    add_raw(&w, "b/pad", noise, pad, pad, libdeflate_crc32(0, noise, pad), 0);
    free(noise);
    finish(&w);
    return w;
}

/* ------------------------------------------------------------ pickle bombs */

/* Opens and scans the archive under the accounting hook. 0: refused by a
 * limit (open) and not called safe (scan), under BUDGET. */
static int child_pickle_bomb(const void *arg) {
    const zbuild *w = arg;
    ckpt_set_allocator(&acct_allocator);
    ckpt_file *f = NULL;
    int rc = ckpt_open_memory(&f, w->buf, w->len, "bomb.pt", NULL);
    ckpt_close(f);
    size_t open_peak = acct_peak;
    ckpt_scan_report *r = NULL;
    int src = ckpt_scan_memory(&r, w->buf, w->len, "bomb.pt", NULL);
    ckpt_verdict v = r ? ckpt_scan_verdict(r) : CKPT_VERDICT_UNSCANNABLE;
    ckpt_scan_report_free(r);
    ckpt_set_allocator(NULL);
    fprintf(stderr, "  open %d, peak %zu MiB; scan verdict %d, peak %zu MiB\n", rc, open_peak >> 20,
            (int)v, acct_peak >> 20);
    if (rc != CKPT_E_LIMIT) return 1;
    if (src && src != CKPT_E_LIMIT) return 2;
    return acct_peak < BUDGET / 4 ? 0 : 3;
}

/* ATTACK: deflated data.pkl of NONE, POP (and EMPTY_LIST, POP): 90 MB of
 * pickle in a 1 MiB file, inside the file's inflate budget (100 x its
 * size), allocated a value per opcode: 2.2 GB and exit 0. CORRECT: the
 * values count against the same budget; CKPT_E_LIMIT under 128 MiB. None
 * is now one value per run, so EMPTY_TUPLE, POP (a value each) stands in
 * for it. */
TEST(deflated_none_pop) {
    zbuild w = pickle_bomb(")0", 45000000);
    CHECK(w.len < (size_t)1 << 20);
    CHECK_EQ_INT(run_child(child_pickle_bomb, &w, 60), 0);
    free(w.buf);
}

TEST(deflated_empty_list_pop) {
    zbuild w = pickle_bomb("]0", 45000000);
    CHECK_EQ_INT(run_child(child_pickle_bomb, &w, 60), 0);
    free(w.buf);
}

/* A legitimate pickle of the same shape at a size the budget allows. */
TEST(deflated_pickle_within_budget) {
    zbuild w = pickle_bomb(")0", 100000);
    ckpt_file *f = NULL;
    CHECK_EQ_INT(ckpt_open_memory(&f, w.buf, w.len, "small.pt", NULL), 0);
    ckpt_close(f);
    /* the budget is a limit, raised like any other: 3 M values (about
     * 150 MB) exceed a 1 MiB file's 100 MB, and fit 1000 times its size */
    zbuild big = pickle_bomb(")0", 3000000);
    CHECK_EQ_INT(ckpt_open_memory(&f, big.buf, big.len, "default.pt", NULL), CKPT_E_LIMIT);
    CHECK(strstr(ckpt_error_last()->message, "max_inflate_ratio") != NULL);
    ckpt_open_options o = CKPT_OPEN_OPTIONS_INIT;
    o.limits.max_inflate_ratio = 1000;
    CHECK_EQ_INT(ckpt_open_memory(&f, big.buf, big.len, "raised.pt", &o), 0);
    ckpt_close(f);
    free(w.buf);
    free(big.buf);
}

/* ------------------------------------------------------------ storages */

/* data.pkl of {"w": a float tensor of `numel` elements in storage "0"}. */
static size_t tensor_pickle(uint8_t *out, uint32_t numel) {
    static const char head[] = "\x80\x02}X\x01\x00\x00\x00w"
                               "ctorch._utils\n_rebuild_tensor_v2\n"
                               "((X\x07\x00\x00\x00storagectorch\nFloatStorage\n"
                               "X\x01\x00\x00\x00"
                               "0X\x03\x00\x00\x00"
                               "cpuJ";
    size_t n = sizeof head - 1;
    memcpy(out, head, n);
    uint8_t le[4] = {(uint8_t)numel, (uint8_t)(numel >> 8), (uint8_t)(numel >> 16),
                     (uint8_t)(numel >> 24)};
    memcpy(out + n, le, 4), n += 4;
    memcpy(out + n, "tQJ\x00\x00\x00\x00J", 8), n += 8;
    memcpy(out + n, le, 4), n += 4;
    static const char tail[] = "\x85J\x01\x00\x00\x00\x85\x89"
                               "ccollections\nOrderedDict\n)RtRs.";
    memcpy(out + n, tail, sizeof tail - 1);
    return n + sizeof tail - 1;
}

/* ATTACK: a deflated storage declaring 1 GiB in a file of a few KiB was
 * inflated at open. CORRECT: refused by the file's inflate budget before
 * anything is allocated for it; raising the budget, the declared size is
 * still checked against what deflate can produce from the bytes. */
static int child_storage_bomb(const void *arg) {
    (void)arg;
    static uint8_t zeros[1 << 20];
    uint8_t pkl[512];
    zbuild w = new_zip((size_t)1 << 20);
    add_deflated(&w, "c/data.pkl", pkl, tensor_pickle(pkl, 1u << 28));
    add_deflated(&w, "c/version", "3\n", 2);
    /* a real stream of 1 MiB of zeros, declared as 1 GiB */
    zbuild s = new_zip((size_t)1 << 20);
    add_deflated(&s, "x", zeros, sizeof zeros);
    add_raw(&w, "c/data/0", s.buf + 30 + 1, s.m[0].csize, (uint64_t)1 << 30, 0, 8);
    free(s.buf);
    finish(&w);
    ckpt_set_allocator(&acct_allocator);
    ckpt_file *f = NULL;
    int rc = ckpt_open_memory(&f, w.buf, w.len, "storage.pt", NULL);
    ckpt_close(f);
    ckpt_open_options o = CKPT_OPEN_OPTIONS_INIT;
    o.limits.max_inflate_ratio = UINT64_MAX;
    o.limits.max_inflate_bytes = UINT64_MAX;
    int raised = ckpt_open_memory(&f, w.buf, w.len, "storage.pt", &o);
    ckpt_close(f);
    ckpt_set_allocator(NULL);
    free(w.buf);
    if (rc != CKPT_E_LIMIT) return 1;
    if (raised != CKPT_E_FORMAT) return 2;
    return acct_peak < ((size_t)16 << 20) ? 0 : 3;
}

TEST(deflated_storage_declares_1gib) { CHECK_EQ_INT(run_child(child_storage_bomb, NULL, 60), 0); }

/* ATTACK: four directory entries pointing at one compressed stream: torch's
 * reader (miniz) accepts them and inflates the stream four times.
 * CORRECT: overlapping members are refused (CKPT_E_FORMAT naming the
 * member and offset), by open and scan alike; nothing is inflated. */
TEST(four_entries_one_stream) {
    static uint8_t zeros[1 << 20];
    uint8_t pkl[512];
    zbuild w = new_zip((size_t)1 << 20);
    add_deflated(&w, "d/data.pkl", pkl, tensor_pickle(pkl, 1u << 18));
    add_deflated(&w, "d/version", "3\n", 2);
    add_deflated(&w, "d/data/0", zeros, sizeof zeros);
    const char *names[] = {"d/data/1", "d/data/2", "d/data/3"};
    for (int i = 0; i < 3; i++) {
        w.m[w.n] = w.m[1];
        w.m[w.n++].name = names[i];
    }
    finish(&w);
    ckpt_set_allocator(&acct_allocator);
    ckpt_file *f = NULL;
    CHECK_EQ_INT(ckpt_open_memory(&f, w.buf, w.len, "overlap.pt", NULL), CKPT_E_FORMAT);
    CHECK(strstr(ckpt_error_last()->message, "overlaps") != NULL);
    CHECK_EQ_INT(ckpt_error_last()->offset, w.m[1].local);
    ckpt_scan_report *r = NULL;
    ckpt_scan_memory(&r, w.buf, w.len, "overlap.pt", NULL);
    CHECK(r && ckpt_scan_verdict(r) != CKPT_VERDICT_SAFE);
    ckpt_scan_report_free(r);
    ckpt_set_allocator(NULL);
    CHECK(acct_peak < ((size_t)4 << 20)); /* the 1 MiB stream was never inflated */
    free(w.buf);
}

/* A deflated storage is checked at open but inflated only when its bytes
 * are read: open costs no more than the pickle, whatever the storage. */
static int child_lazy_storage(const void *arg) {
    (void)arg;
    static uint8_t ones[1 << 22], noise[1 << 16];
    for (size_t i = 0; i < sizeof ones / 4; i++) memcpy(ones + 4 * i, &(float){1.0f}, 4);
    uint8_t pkl[512];
    zbuild w = new_zip((size_t)1 << 20);
    add_deflated(&w, "e/data.pkl", pkl, tensor_pickle(pkl, 1u << 20));
    add_deflated(&w, "e/version", "3\n", 2);
    add_deflated(&w, "e/data/0", ones, sizeof ones);
    /* padding, so that the 4 MiB fit the file's budget (100 x its size) */
    add_raw(&w, "e/pad", noise, sizeof noise, sizeof noise,
            libdeflate_crc32(0, noise, sizeof noise), 0);
    finish(&w);
    ckpt_set_allocator(&acct_allocator);
    ckpt_file *f = NULL;
    int rc = ckpt_open_memory(&f, w.buf, w.len, "lazy.pt", NULL);
    size_t open_peak = acct_peak;
    float *got = malloc(sizeof ones);
    if (rc == 0) rc = ckpt_tensor_read(ckpt_file_tensor(f, 0), got, sizeof ones) ? 10 : 0;
    size_t read_peak = acct_peak;
    /* a deflated storage record is verify's finding: torch.load(mmap=True)
     * would map its compressed bytes (ckpt_file_check_mmap) */
    if (rc == 0) rc = ckpt_verify(NULL, f) == CKPT_E_MISMATCH ? 0 : 11;
    ckpt_close(f);
    ckpt_set_allocator(NULL);
    fprintf(stderr, "  open peak %zu KiB, after the read %zu KiB\n", open_peak >> 10,
            read_peak >> 10);
    int same = got && memcmp(got, ones, sizeof ones) == 0;
    free(got);
    free(w.buf);
    if (rc) return rc > 0 ? rc : 1;
    if (!same) return 2;
    if (open_peak >= sizeof ones) return 3; /* inflated at open */
    return read_peak >= sizeof ones ? 0 : 4;
}

TEST(deflated_storage_inflated_when_read) {
    CHECK_EQ_INT(run_child(child_lazy_storage, NULL, 60), 0);
}

/* A ckpt_file may be read from several threads at once (ckpt.h): the
 * storage inflated on first read is built once, under base/once.h's lock,
 * and every thread reads the same bytes. Before the lock, two first reads
 * inflated into the file's arena at the same time. */
enum { READERS = 8 };
static pthread_barrier_t all_ready; /* the first reads start together */
typedef struct reader {
    const ckpt_tensor *t;
    float *got;
    size_t n;
    int rc;
} reader;

static void *read_tensor(void *arg) {
    reader *r = arg;
    pthread_barrier_wait(&all_ready);
    r->rc = ckpt_tensor_read(r->t, r->got, r->n);
    return NULL;
}

static int child_threads_share_lazy_storage(const void *arg) {
    (void)arg;
    static uint8_t ones[1 << 23], noise[1 << 17];
    for (size_t i = 0; i < sizeof ones / 4; i++) memcpy(ones + 4 * i, &(float){1.0f}, 4);
    for (size_t i = 0; i < sizeof noise; i++) noise[i] = (uint8_t)(i * 2654435761u >> 13);
    uint8_t pkl[512];
    zbuild w = new_zip((size_t)1 << 20);
    add_deflated(&w, "t/data.pkl", pkl, tensor_pickle(pkl, 1u << 21));
    add_deflated(&w, "t/version", "3\n", 2);
    add_deflated(&w, "t/data/0", ones, sizeof ones);
    add_raw(&w, "t/pad", noise, sizeof noise, sizeof noise,
            libdeflate_crc32(0, noise, sizeof noise), 0);
    finish(&w);
    ckpt_file *f = NULL;
    int rc = ckpt_open_memory(&f, w.buf, w.len, "threads.pt", NULL) ? 10 : 0;
    reader r[READERS] = {{0}};
    pthread_t tid[READERS];
    int running = 0;
    if (rc == 0 && pthread_barrier_init(&all_ready, NULL, READERS)) rc = 11;
    for (int i = 0; rc == 0 && i < READERS; i++) {
        r[i] = (reader){ckpt_file_tensor(f, 0), malloc(sizeof ones), sizeof ones, -1};
        if (!r[i].got || pthread_create(&tid[i], NULL, read_tensor, &r[i]) != 0)
            rc = 11;
        else
            running++;
    }
    for (int i = 0; i < running; i++) {
        pthread_join(tid[i], NULL);
        if (rc == 0 && r[i].rc != 0) rc = 12;
        if (rc == 0 && memcmp(r[i].got, ones, sizeof ones) != 0) rc = 13;
    }
    if (running == READERS) pthread_barrier_destroy(&all_ready);
    for (int i = 0; i < READERS; i++) free(r[i].got);
    ckpt_close(f);
    free(w.buf);
    return rc;
}

TEST(threads_share_lazy_storage) {
    CHECK_EQ_INT(run_child(child_threads_share_lazy_storage, NULL, 60), 0);
}

/* ------------------------------------------------------------ wide DAGs */

/* PROTO 2; L0 = [None] * k (memo 0); L1 = [L0] * m (memo 1, BINGET 0 each);
 * STOP on [L1] * m2: a tree of k * m * m2 leaves from 2 (m + m2) + k bytes. */
static size_t shared_lists(uint8_t *b, size_t k, size_t m, size_t m2) {
    size_t n = 0;
    memcpy(b + n, "\x80\x02]q\x00(", 6), n += 6;
    memset(b + n, 'N', k), n += k;
    memcpy(b + n, "e]q\x01(", 5), n += 5;
    for (size_t i = 0; i < m; i++) memcpy(b + n, "h\x00", 2), n += 2;
    memcpy(b + n, "e](", 3), n += 3;
    for (size_t i = 0; i < m2; i++) memcpy(b + n, "h\x01", 2), n += 2;
    memcpy(b + n, "e.", 2), n += 2;
    return n;
}

/* ATTACK: a 300 KB pickle of shared lists (5 * 10^9 leaves once expanded
 * into a tree) built 10 M value entries (948 MB) before max_tensors
 * stopped it. CORRECT: the expansion is counted before anything is
 * allocated for it and refused within the input's budget. */
static int child_wide_dag(const void *arg) {
    (void)arg;
    uint8_t *b = malloc(400000);
    if (!b) return 10;
    size_t n = shared_lists(b, 1000, 100000, 50000);
    ckpt_set_allocator(&acct_allocator);
    ckpt_file *f = NULL;
    int rc = ckpt_open_memory(&f, b, n, "dag.pkl", NULL);
    ckpt_close(f);
    ckpt_set_allocator(NULL);
    fprintf(stderr, "  %zu bytes: open %d, peak %zu MiB\n", n, rc, acct_peak >> 20);
    free(b);
    if (rc != CKPT_E_LIMIT) return 1;
    return acct_peak < ((size_t)64 << 20) ? 0 : 2;
}

TEST(wide_dag) { CHECK_EQ_INT(run_child(child_wide_dag, NULL, 60), 0); }

/* Sharing a list a few times is ordinary: it flattens, once per path. */
TEST(shared_lists_flatten) {
    uint8_t b[256];
    size_t n = shared_lists(b, 3, 4, 5);
    ckpt_file *f = NULL;
    CHECK_EQ_INT(ckpt_open_memory(&f, b, n, "shared.pkl", NULL), 0);
    CHECK_EQ_INT(ckpt_file_value_count(f), 3 * 4 * 5);
    CHECK_EQ_STR(ckpt_file_value_name(f, 0), "0.0.0");
    ckpt_close(f);
}

int main(void) {
    RUN(deflated_none_pop);
    RUN(deflated_empty_list_pop);
    RUN(deflated_pickle_within_budget);
    RUN(deflated_storage_declares_1gib);
    RUN(four_entries_one_stream);
    RUN(deflated_storage_inflated_when_read);
    RUN(threads_share_lazy_storage);
    RUN(wide_dag);
    RUN(shared_lists_flatten);
    return harness_end();
}
