/* test_zip.c - the ZIP container reader on real torch archives, picklescan's
 * zip tricks and archives built here byte by byte. */
#include <libdeflate.h>
#include <stdlib.h>

#include "base/error.h"
#include "harness.h"
#include "container/zip.h"

/* ------------------------------------------------------------ builder */

/* Writes a zip the way torch does (stored members, CD, optional ZIP64
 * end records), with knobs to break it. Offsets are relative to the
 * builder's start, so prepending bytes gives a polyglot. */
typedef struct member {
    const char *name;
    uint64_t local, csize, usize;
    uint32_t crc;
    uint16_t method, flags;
} member;

typedef struct zbuild {
    uint8_t buf[1 << 16];
    size_t len;
    member m[8];
    size_t n;
} zbuild;

static zbuild b; /* too big for the stack */

static void put(zbuild *w, const void *p, size_t n) {
    if (w->len + n > sizeof w->buf) abort(); /* a test bug, not input */
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
static void put64(zbuild *w, uint64_t v) {
    put32(w, v & 0xFFFFFFFFu);
    put32(w, v >> 32);
}
static void poke32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Adds a member; method 8 deflates `data` with libdeflate. Returns its
 * data offset (relative to the builder's start). */
static size_t add(zbuild *w, const char *name, const void *data, size_t n, uint16_t method,
                  uint16_t flags) {
    static uint8_t packed[1 << 16];
    const void *body = data;
    size_t csize = n;
    if (method == 8) {
        struct libdeflate_compressor *c = libdeflate_alloc_compressor(9);
        csize = libdeflate_deflate_compress(c, data, n, packed, sizeof packed);
        libdeflate_free_compressor(c);
        if (csize == 0) abort();
        body = packed;
    }
    if (w->n == sizeof w->m / sizeof w->m[0]) abort(); /* a test bug */
    member *m = &w->m[w->n++];
    *m = (member){name, w->len, csize, n, libdeflate_crc32(0, data, n), method, flags};
    put32(w, 0x04034b50);
    put16(w, 20);
    put16(w, flags);
    put16(w, method);
    put32(w, 0); /* time, date */
    put32(w, 0); /* crc, sizes: zero, as in torch's headers */
    put32(w, 0);
    put32(w, 0);
    put16(w, strlen(name));
    put16(w, 3); /* a 3-byte extra: the data offset must skip it */
    put(w, name, strlen(name));
    put(w, "ZZZ", 3);
    size_t at = w->len;
    put(w, body, csize);
    return at;
}

/* Writes the directory and end records. zip64 (non-zero): a ZIP64 end
 * record and locator, with the classic record saturated so only ZIP64
 * values work; zip64 is also a mask of the entry fields saturated and moved
 * to a ZIP64 extra field: 1 usize, 2 csize, 4 local offset. */
#define Z64_ALL 7
static void finish(zbuild *w, int zip64) {
    size_t xlen = 4; /* the extra field's header, then one u64 per field */
    for (int k = 0; k < 3; k++)
        if (zip64 >> k & 1) xlen += 8;
    size_t cd = w->len;
    for (size_t i = 0; i < w->n; i++) {
        member *m = &w->m[i];
        uint64_t sat = 0xFFFFFFFFu;
        put32(w, 0x02014b50);
        put16(w, 0x031e);
        put16(w, 20);
        put16(w, m->flags);
        put16(w, m->method);
        put32(w, 0);
        put32(w, m->crc);
        put32(w, zip64 & 2 ? sat : m->csize);
        put32(w, zip64 & 1 ? sat : m->usize);
        put16(w, strlen(m->name));
        put16(w, zip64 ? xlen : 0);
        put16(w, 0); /* comment */
        put16(w, 0); /* disk */
        put16(w, 0); /* internal attributes */
        put32(w, 0); /* external attributes */
        put32(w, zip64 & 4 ? sat : m->local);
        put(w, m->name, strlen(m->name));
        if (zip64) {
            put16(w, 1);
            put16(w, xlen - 4);
            if (zip64 & 1) put64(w, m->usize);
            if (zip64 & 2) put64(w, m->csize);
            if (zip64 & 4) put64(w, m->local);
        }
    }
    size_t cd_size = w->len - cd;
    if (zip64) {
        size_t z64 = w->len;
        put32(w, 0x06064b50);
        put64(w, 44);
        put16(w, 0x031e);
        put16(w, 45);
        put32(w, 0);
        put32(w, 0);
        put64(w, w->n);
        put64(w, w->n);
        put64(w, cd_size);
        put64(w, cd);
        put32(w, 0x07064b50);
        put32(w, 0);
        put64(w, z64);
        put32(w, 1);
    }
    put32(w, 0x06054b50);
    put32(w, 0);
    put16(w, zip64 ? 0xFFFF : w->n);
    put16(w, zip64 ? 0xFFFF : w->n);
    put32(w, zip64 ? 0xFFFFFFFFu : cd_size);
    put32(w, zip64 ? 0xFFFFFFFFu : cd);
    put16(w, 0);
}

static size_t eocd_of(const zbuild *w) { return w->len - 22; }

static const ckpt_limits limits = CKPT_LIMITS_INIT;

/* Opens buf and returns the code; z and arena are the caller's. */
static int open_buf(ckpt_zip *z, ckpt_arena *a, const uint8_t *buf, size_t len) {
    return ckpt_zip_open(z, a, buf, len, NULL, "test.zip", &limits);
}

/* Opens buf expecting success with `count` members; reports otherwise so
 * the caller can skip the checks that index entries. */
static int opened(ckpt_zip *z, ckpt_arena *a, const uint8_t *buf, size_t len, size_t count) {
    int rc = open_buf(z, a, buf, len);
    CHECK_EQ_INT(rc, 0);
    if (rc) fprintf(stderr, "  %s\n", ckpt_error_last()->message);
    CHECK_EQ_INT(z->count, count);
    return rc == 0 && z->count == count;
}

static unsigned char *corpus(const char *rel, size_t *len) {
    char path[512];
    snprintf(path, sizeof path, "%s%s", CKPT_CORPUS, rel);
    unsigned char *buf = harness_read_file(path, len);
    if (!buf) fprintf(stderr, "cannot read %s\n", path);
    return buf;
}

/* ------------------------------------------------------------ corpus */

TEST(torch_checkpoint) {
    size_t len;
    unsigned char *buf = corpus("/torch/burn/checkpoint.pt", &len);
    CHECK(buf != NULL);
    if (!buf) return;
    ckpt_arena a = {0};
    ckpt_zip z;
    if (!opened(&z, &a, buf, len, 11)) goto done;
    CHECK_EQ_INT(z.has_duplicates, 0);
    CHECK(z.slots != NULL && z.by_name == NULL); /* distinct: looked up by hash */
    CHECK_EQ_STR(z.entries[0].name, "checkpoint/data.pkl");
    CHECK_EQ_INT(z.entries[0].data_offset, 64);
    CHECK_EQ_INT(z.entries[0].usize, 570);
    CHECK_EQ_INT(z.entries[0].flags, 0x0808);
    const ckpt_zip_entry *d0 = ckpt_zip_find(&z, "checkpoint/data/0");
    CHECK(d0 != NULL);
    if (d0) {
        CHECK_EQ_INT(d0->local_offset, 1046);
        CHECK_EQ_INT(d0->data_offset, 1152);
        CHECK_EQ_INT(d0->csize, 200);
        CHECK_EQ_INT(d0->crc32, 0x17681519);
    }
    char name[32];
    for (int i = 0; i < 5; i++) {
        snprintf(name, sizeof name, "checkpoint/data/%d", i);
        const ckpt_zip_entry *e = ckpt_zip_find(&z, name);
        CHECK(e != NULL);
        if (e) CHECK_EQ_STR(e->name, name);
    }
    CHECK(ckpt_zip_find(&z, "checkpoint/data/5") == NULL);
    CHECK(ckpt_zip_find(&z, "checkpoint/data") == NULL);
    CHECK(ckpt_zip_find(&z, "") == NULL);
    uint64_t budget = 1000;
    for (size_t i = 0; i < z.count; i++) {
        const ckpt_zip_entry *e = &z.entries[i];
        CHECK_EQ_INT(e->data_offset % 64, 0);
        CHECK_EQ_INT(e->method, 0);
        CHECK_EQ_INT(e->local_name_differs, 0);
        CHECK(ckpt_zip_find(&z, e->name) == e);
        const uint8_t *data = NULL;
        CHECK_EQ_INT(ckpt_zip_read(&z, e, &a, &budget, &data), 0);
        CHECK(data == buf + e->data_offset); /* stored: zero-copy */
        CHECK_EQ_INT(ckpt_zip_check_crc(&z, e, data), 0);
    }
    CHECK_EQ_INT(budget, 1000); /* stored members cost no budget */
    const ckpt_zip_entry *v = ckpt_zip_find(&z, "checkpoint/byteorder");
    CHECK(v != NULL);
    if (v) CHECK(memcmp(buf + v->data_offset, "little", 6) == 0);
done:
    ckpt_arena_free(&a);
    free(buf);
}

/* Every prefix of a real archive either fails with a recorded error or
 * yields members that lie inside the prefix. Each prefix is its own
 * allocation so ASan sees any read past it. */
TEST(torch_truncated_everywhere) {
    size_t len;
    unsigned char *buf = corpus("/torch/burn/checkpoint.pt", &len);
    CHECK(buf != NULL);
    if (!buf) return;
    size_t opened = 0;
    for (size_t n = 0; n < len; n++) {
        uint8_t *cut = malloc(n ? n : 1);
        memcpy(cut, buf, n);
        ckpt_arena a = {0};
        ckpt_zip z;
        int rc = open_buf(&z, &a, cut, n);
        if (rc == 0) {
            opened++;
            for (size_t i = 0; i < z.count; i++)
                CHECK(z.entries[i].data_offset + z.entries[i].csize <= n);
        } else {
            CHECK(rc < 0);
            CHECK_EQ_INT(ckpt_error_last()->code, rc);
            CHECK_EQ_INT(z.count, 0);
        }
        ckpt_arena_free(&a);
        free(cut);
    }
    CHECK_EQ_INT(opened, 0); /* the end records are the last bytes */
    free(buf);
}

/* Every byte of the directory and end records set to 0x00, 0xFF or its
 * value + 1: open fails with a recorded error or every member it reports
 * lies inside the buffer. */
TEST(torch_directory_corrupted_everywhere) {
    size_t len;
    unsigned char *buf = corpus("/torch/burn/checkpoint.pt", &len);
    CHECK(buf != NULL);
    if (!buf) return;
    const size_t cd_start = 2424; /* checkpoint.pt's directory */
    size_t opened = 0, failed = 0;
    for (size_t i = cd_start; i < len; i++) {
        const uint8_t orig = buf[i];
        const uint8_t vals[3] = {0x00, 0xFF, (uint8_t)(orig + 1)};
        for (int k = 0; k < 3; k++) {
            buf[i] = vals[k];
            ckpt_arena a = {0};
            ckpt_zip z;
            int rc = open_buf(&z, &a, buf, len);
            if (rc == 0) {
                opened++;
                for (size_t j = 0; j < z.count; j++)
                    CHECK(z.entries[j].data_offset + z.entries[j].csize <= len);
            } else {
                failed++;
                CHECK_EQ_INT(ckpt_error_last()->code, rc);
            }
            ckpt_arena_free(&a);
        }
        buf[i] = orig;
    }
    CHECK(opened > 0); /* e.g. CRC or attribute bytes do not matter */
    CHECK(failed > 0);
    free(buf);
}

TEST(local_name_differs) {
    size_t len;
    unsigned char *buf = corpus("/scan/picklescan/malicious1_central_directory.zip", &len);
    CHECK(buf != NULL);
    if (!buf) return;
    ckpt_arena a = {0};
    ckpt_zip z;
    if (!opened(&z, &a, buf, len, 1)) goto done;
    CHECK_EQ_STR(z.entries[0].name, "data.pkl"); /* the central name */
    CHECK_EQ_INT(z.entries[0].local_name_differs, 1);
    CHECK_EQ_INT(z.entries[0].data_offset, 38);
done:
    ckpt_arena_free(&a);
    free(buf);
}

/* A local name that is a prefix of the central one still differs; the
 * data offset follows the local lengths. */
TEST(local_name_prefix) {
    memset(&b, 0, sizeof b);
    size_t off = add(&b, "x/abc", "payload", 7, 0, 0);
    add(&b, "x/d", "d", 1, 0, 0);
    finish(&b, 0);
    b.buf[26] = 3; /* first local header: name "x/a", then "bc" + extra */
    ckpt_arena a = {0};
    ckpt_zip z;
    if (!opened(&z, &a, b.buf, b.len, 2)) goto done;
    CHECK_EQ_INT(z.entries[0].local_name_differs, 1);
    CHECK_EQ_STR(z.entries[0].name, "x/abc");
    CHECK_EQ_INT(z.entries[0].data_offset, off - 2);
    CHECK_EQ_INT(z.entries[1].local_name_differs, 0);
done:
    ckpt_arena_free(&a);
}

TEST(encrypted_flag) {
    size_t len;
    unsigned char *buf = corpus("/scan/picklescan/malicious1_0x1.zip", &len);
    CHECK(buf != NULL);
    if (!buf) return;
    ckpt_arena a = {0};
    ckpt_zip z;
    if (!opened(&z, &a, buf, len, 1)) goto done;
    CHECK_EQ_INT(z.entries[0].flags & 1, 1);
    CHECK_EQ_INT(z.entries[0].local_name_differs, 0);
    const uint8_t *data = (const uint8_t *)"x";
    uint64_t budget = 100;
    CHECK_EQ_INT(ckpt_zip_read(&z, &z.entries[0], &a, &budget, &data), CKPT_E_UNSUPPORTED);
    CHECK(data == NULL);
    CHECK_EQ_INT(ckpt_error_last()->code, CKPT_E_UNSUPPORTED);
    CHECK_EQ_STR(ckpt_error_last()->member, "model/config.pkl");
    CHECK_EQ_STR(ckpt_error_last()->file, "test.zip");
    CHECK_EQ_INT(ckpt_error_last()->offset, 46);
    CHECK(strstr(ckpt_error_last()->message, "encrypted") != NULL);
done:
    ckpt_arena_free(&a);
    free(buf);
}

/* miniz refuses to extract a member flagged as patch data (0x20): open
 * succeeds, the read says why (scan still scans the stored bytes). */
TEST(patch_flag_readable) {
    size_t len;
    unsigned char *buf = corpus("/scan/picklescan/malicious1_0x20.zip", &len);
    CHECK(buf != NULL);
    if (!buf) return;
    ckpt_arena a = {0};
    ckpt_zip z;
    if (!opened(&z, &a, buf, len, 1)) goto done;
    CHECK_EQ_INT(z.entries[0].flags, 0x20);
    const uint8_t *data = NULL;
    uint64_t budget = 0;
    CHECK_EQ_INT(ckpt_zip_read(&z, &z.entries[0], &a, &budget, &data), CKPT_E_UNSUPPORTED);
    CHECK(data == NULL);
    CHECK_EQ_INT(buf[z.entries[0].data_offset], 0x80); /* a pickle */
done:
    ckpt_arena_free(&a);
    free(buf);
}

TEST(password_protected) {
    size_t len;
    unsigned char *buf = corpus("/scan/picklescan/benign_password_protected.zip", &len);
    CHECK(buf != NULL);
    if (!buf) return;
    ckpt_arena a = {0};
    ckpt_zip z;
    if (!opened(&z, &a, buf, len, 1)) goto done;
    const ckpt_zip_entry *e = ckpt_zip_find(&z, "test.txt");
    CHECK(e != NULL);
    if (e) {
        CHECK_EQ_INT(e->flags & 1, 1);
        CHECK_EQ_INT(e->csize, 27); /* 12-byte ZipCrypto header + 15 */
        CHECK_EQ_INT(e->usize, 15);
        const uint8_t *data;
        uint64_t budget = 100;
        CHECK_EQ_INT(ckpt_zip_read(&z, e, &a, &budget, &data), CKPT_E_UNSUPPORTED);
        CHECK_EQ_STR(ckpt_error_last()->member, "test.txt");
    }
done:
    ckpt_arena_free(&a);
    free(buf);
}

/* ------------------------------------------------------------ built */

TEST(built_stored_and_deflated) {
    static uint8_t text[4000];
    for (size_t i = 0; i < sizeof text; i++) text[i] = (uint8_t)((size_t) "ckpt"[i % 4] + i / 997);
    memset(&b, 0, sizeof b);
    size_t off_a = add(&b, "arch/data.pkl", "\x80\x02}q\x00.", 6, 0, 0);
    size_t off_b = add(&b, "arch/data/0", text, sizeof text, 8, 0);
    size_t off_e = add(&b, "arch/empty", "", 0, 8, 0);
    finish(&b, 0);
    ckpt_arena a = {0};
    ckpt_zip z;
    if (!opened(&z, &a, b.buf, b.len, 3)) goto done;
    CHECK_EQ_INT(z.entries[0].data_offset, off_a);
    CHECK_EQ_INT(z.entries[1].data_offset, off_b);
    CHECK_EQ_INT(z.entries[2].data_offset, off_e);
    CHECK_EQ_INT(z.entries[1].method, 8);
    CHECK(z.entries[1].csize < sizeof text);
    uint64_t budget = 10000;
    const uint8_t *data = NULL;
    CHECK_EQ_INT(ckpt_zip_read(&z, &z.entries[0], &a, &budget, &data), 0);
    CHECK(data == b.buf + off_a);
    CHECK_EQ_INT(ckpt_zip_check_crc(&z, &z.entries[0], data), 0);
    CHECK_EQ_INT(ckpt_zip_read(&z, &z.entries[1], &a, &budget, &data), 0);
    CHECK(data != NULL && data != b.buf + off_b);
    if (data) {
        CHECK(memcmp(data, text, sizeof text) == 0);
        CHECK_EQ_INT(ckpt_zip_check_crc(&z, &z.entries[1], data), 0);
    }
    CHECK_EQ_INT(budget, 10000 - sizeof text);
    CHECK_EQ_INT(ckpt_zip_read(&z, &z.entries[2], &a, &budget, &data), 0);
    CHECK(data != NULL);
    CHECK_EQ_INT(budget, 10000 - sizeof text);
done:
    ckpt_arena_free(&a);
}

TEST(built_zip64) {
    memset(&b, 0, sizeof b);
    add(&b, "archive/data.pkl", "\x80\x02K\x07.", 5, 0, 0);
    size_t off = add(&b, "archive/data/0", "0123456789abcdef", 16, 0, 0);
    finish(&b, Z64_ALL);
    ckpt_arena a = {0};
    ckpt_zip z;
    if (!opened(&z, &a, b.buf, b.len, 2)) goto done;
    const ckpt_zip_entry *e = ckpt_zip_find(&z, "archive/data/0");
    CHECK(e != NULL);
    if (e) {
        CHECK_EQ_INT(e->csize, 16); /* from the ZIP64 extra */
        CHECK_EQ_INT(e->usize, 16);
        CHECK_EQ_INT(e->local_offset, b.m[1].local);
        CHECK_EQ_INT(e->data_offset, off);
        uint64_t budget = 0;
        const uint8_t *data;
        CHECK_EQ_INT(ckpt_zip_read(&z, e, &a, &budget, &data), 0);
        CHECK_EQ_INT(ckpt_zip_check_crc(&z, e, data), 0);
    }
done:
    ckpt_arena_free(&a);
}

/* Junk before the archive (a polyglot): offsets shift by its length. */
/* Bytes before an archive whose offsets count from its own start: miniz
 * (torch) takes the directory offset as absolute and reads other bytes,
 * Python's zipfile shifts every offset by the prefix. Two readings. */
static void check_prefixed(int zip64) {
    memset(&b, 0, sizeof b);
    add(&b, "p/data.pkl", "hello", 5, 0, 0);
    add(&b, "p/data/0", "deflated deflated deflated", 26, 8, 0);
    finish(&b, zip64);
    size_t junk = 333;
    uint8_t *buf = malloc(junk + b.len);
    memset(buf, 'J', junk);
    memcpy(buf + junk, b.buf, b.len);
    ckpt_arena a = {0};
    ckpt_zip z;
    CHECK_EQ_INT(open_buf(&z, &a, buf, junk + b.len), CKPT_E_FORMAT);
    CHECK(strstr(ckpt_error_last()->message, "two readings") != NULL);
    /* ZIP64: the locator's relative offset misses the record */
    CHECK_EQ_INT(ckpt_error_last()->offset, junk + b.len - 22 - (zip64 ? 20 : 0));
    CHECK(z.count == 0 && z.entries == NULL);
    ckpt_arena_free(&a);
    free(buf);
}

TEST(prefix_two_readings) { check_prefixed(0); }
TEST(prefix_two_readings_zip64) { check_prefixed(Z64_ALL); }

TEST(data_past_end) {
    memset(&b, 0, sizeof b);
    add(&b, "m/big", "0123456789", 10, 0, 0);
    size_t off = b.len;                   /* the central entry */
    b.m[0].csize = b.m[0].usize = 100000; /* the directory lies */
    finish(&b, 0);
    ckpt_arena a = {0};
    ckpt_zip z;
    CHECK_EQ_INT(open_buf(&z, &a, b.buf, b.len), CKPT_E_TRUNCATED);
    CHECK_EQ_INT(ckpt_error_last()->code, CKPT_E_TRUNCATED);
    CHECK_EQ_STR(ckpt_error_last()->member, "m/big");
    CHECK_EQ_INT(ckpt_error_last()->offset, off);
    CHECK(z.entries == NULL && z.count == 0);
    ckpt_arena_free(&a);
}

TEST(absurd_counts) {
    memset(&b, 0, sizeof b);
    add(&b, "a", "1", 1, 0, 0);
    add(&b, "b", "2", 1, 0, 0);
    finish(&b, 0);
    ckpt_arena a = {0};
    ckpt_zip z;
    /* 65535 entries cannot fit in a directory of two. */
    size_t e = eocd_of(&b);
    b.buf[e + 8] = b.buf[e + 9] = b.buf[e + 10] = b.buf[e + 11] = 0xFF;
    uint64_t used = a.total;
    CHECK_EQ_INT(open_buf(&z, &a, b.buf, b.len), CKPT_E_FORMAT);
    CHECK_EQ_INT(ckpt_error_last()->offset, e);
    CHECK(strstr(ckpt_error_last()->message, "cannot hold 65535") != NULL);
    CHECK_EQ_INT(a.total, used); /* refused before allocating */
    /* Counts that disagree in an archive whose disk numbers say one disk:
     * a damaged count, not a multi-disk archive (miniz refuses both). */
    b.buf[e + 8] = 1;
    b.buf[e + 9] = 0;
    CHECK_EQ_INT(open_buf(&z, &a, b.buf, b.len), CKPT_E_FORMAT);
    CHECK_EQ_INT(ckpt_error_last()->offset, e);
    CHECK(strstr(ckpt_error_last()->message, "1 entries on this disk and 65535 in all") != NULL);
    /* One disk number damaged while the other says one disk: corruption,
     * naming the field and the value expected. */
    b.buf[e + 8] = b.buf[e + 9] = 0xFF;
    b.buf[e + 4] = 7;
    CHECK_EQ_INT(open_buf(&z, &a, b.buf, b.len), CKPT_E_FORMAT);
    CHECK_EQ_INT(ckpt_error_last()->offset, e);
    CHECK(strstr(ckpt_error_last()->message, "number of this disk is 7, expected 0") != NULL);
    b.buf[e + 4] = 0;
    b.buf[e + 6] = 3;
    CHECK_EQ_INT(open_buf(&z, &a, b.buf, b.len), CKPT_E_FORMAT);
    CHECK(strstr(ckpt_error_last()->message, "disk of the central directory is 3, expected 0") !=
          NULL);
    /* Disk numbers that agree on another disk: a real multi-disk archive. */
    b.buf[e + 4] = 3;
    CHECK_EQ_INT(open_buf(&z, &a, b.buf, b.len), CKPT_E_UNSUPPORTED);
    CHECK(strstr(ckpt_error_last()->message, "multi-disk archives are not supported") != NULL);
    b.buf[e + 4] = b.buf[e + 6] = 0;
    /* A real count above the configured limit. */
    b.buf[e + 8] = b.buf[e + 10] = 2;
    b.buf[e + 9] = b.buf[e + 11] = 0;
    ckpt_limits lim = limits;
    lim.max_zip_entries = 1;
    CHECK_EQ_INT(ckpt_zip_open(&z, &a, b.buf, b.len, NULL, "x", &lim), CKPT_E_LIMIT);
    CHECK(strstr(ckpt_error_last()->message, "max_zip_entries = 1") != NULL);
    lim.max_zip_entries = 2;
    CHECK_EQ_INT(ckpt_zip_open(&z, &a, b.buf, b.len, NULL, "x", &lim), 0);
    CHECK_EQ_INT(z.count, 2);
    /* the default: as many as the directory holds */
    lim.max_zip_entries = 0;
    CHECK_EQ_INT(ckpt_zip_open(&z, &a, b.buf, b.len, NULL, "x", &lim), 0);
    CHECK_EQ_INT(z.count, 2);
    ckpt_arena_free(&a);
}

TEST(cd_offset_past_end) {
    memset(&b, 0, sizeof b);
    add(&b, "a", "1", 1, 0, 0);
    finish(&b, 0);
    ckpt_arena a = {0};
    ckpt_zip z;
    size_t e = eocd_of(&b);
    poke32(b.buf + e + 16, 0x7FFFFF00u);
    CHECK_EQ_INT(open_buf(&z, &a, b.buf, b.len), CKPT_E_FORMAT);
    CHECK_EQ_INT(ckpt_error_last()->offset, e);
    CHECK(strstr(ckpt_error_last()->message, "central directory") != NULL);
    /* A directory size larger than everything before the end record. */
    poke32(b.buf + e + 16, 0);
    poke32(b.buf + e + 12, 0xFFFFFF00u);
    CHECK_EQ_INT(open_buf(&z, &a, b.buf, b.len), CKPT_E_FORMAT);
    ckpt_arena_free(&a);
}

TEST(no_end_record) {
    ckpt_arena a = {0};
    ckpt_zip z;
    static const uint8_t junk[100] = "PK\3\4 not really a zip";
    /* starts like an archive: most likely cut short */
    CHECK_EQ_INT(open_buf(&z, &a, junk, sizeof junk), CKPT_E_TRUNCATED);
    CHECK_EQ_STR(ckpt_error_last()->message,
                 "zip archive is truncated or incomplete: expected an "
                 "end-of-central-directory record (PK\\5\\6) in its last 100 "
                 "bytes (searched back to this offset), found none; the file was "
                 "probably cut short while being written or copied");
    CHECK_EQ_INT(ckpt_error_last()->offset, 0); /* the whole input was searched */
    CHECK_EQ_INT(open_buf(&z, &a, junk + 1, sizeof junk - 1), CKPT_E_FORMAT);
    CHECK_EQ_STR(ckpt_error_last()->message,
                 "expected an end-of-central-directory record (PK\\5\\6) in the "
                 "last 99 bytes (searched back to this offset), found none");
    CHECK_EQ_INT(ckpt_error_last()->offset, 0);
    CHECK_EQ_INT(open_buf(&z, &a, junk, 0), CKPT_E_FORMAT);
    CHECK_EQ_STR(ckpt_error_last()->message,
                 "expected a zip archive, which ends with a 22-byte "
                 "end-of-central-directory record (PK\\5\\6): the input is 0 bytes");
    CHECK_EQ_INT(ckpt_error_last()->offset, 0);
    CHECK_EQ_INT(open_buf(&z, &a, junk, 21), CKPT_E_TRUNCATED); /* PK\3\4, too short */
    CHECK(strstr(ckpt_error_last()->message, "in its last 21 bytes") != NULL);
    CHECK_EQ_INT(ckpt_error_last()->offset, 0);
    /* A longer input: miniz's search stops after the 4 KiB window (3 bytes
     * of overlap) that reaches 65535 + 22 bytes from the end: 4096 + 16 *
     * 4093 = 69584 bytes searched, back to offset 70000 - 69584. */
    static uint8_t big[70000];
    memcpy(big, junk, sizeof junk);
    CHECK_EQ_INT(open_buf(&z, &a, big, sizeof big), CKPT_E_TRUNCATED);
    CHECK(strstr(ckpt_error_last()->message, "in its last 69584 bytes") != NULL);
    CHECK_EQ_INT(ckpt_error_last()->offset, 416);
    CHECK_EQ_INT(open_buf(&z, &a, big + 1, sizeof big - 1), CKPT_E_FORMAT);
    CHECK(strstr(ckpt_error_last()->message, "in the last 69584 bytes") != NULL);
    CHECK_EQ_INT(ckpt_error_last()->offset, 415);
    /* The empty archive: just an end record. */
    memset(&b, 0, sizeof b);
    finish(&b, 0);
    CHECK_EQ_INT(b.len, 22);
    if (!opened(&z, &a, b.buf, b.len, 0)) goto done;
    CHECK(ckpt_zip_find(&z, "a") == NULL);
done:
    ckpt_arena_free(&a);
}

/* miniz looks for the end record in 4 KiB windows (3 bytes of overlap)
 * from the end, and stops after the window that reaches 65557 bytes back:
 * 4096 + 16 * 4093 = 69584 bytes, whatever the comment length says. */
TEST(eocd_comment) {
    memset(&b, 0, sizeof b);
    add(&b, "k", "kk", 2, 0, 0);
    finish(&b, 0);
    size_t len = b.len + 69563;
    uint8_t *buf = malloc(len);
    memcpy(buf, b.buf, b.len);
    memset(buf + b.len, 'c', len - b.len);
    buf[b.len - 2] = buf[b.len - 1] = 0xFF; /* comment length 65535 */
    ckpt_arena a = {0};
    ckpt_zip z;
    if (opened(&z, &a, buf, len - 1, 1)) CHECK_EQ_INT(z.entries[0].data_offset, 30 + 1 + 3);
    /* no end record in the last 69584 bytes of what starts as an archive */
    CHECK_EQ_INT(open_buf(&z, &a, buf, len), CKPT_E_TRUNCATED);
    CHECK(strstr(ckpt_error_last()->message, "in its last 69584 bytes") != NULL);
    ckpt_arena_free(&a);
    free(buf);
}

TEST(bad_crc) {
    memset(&b, 0, sizeof b);
    add(&b, "c/data/0", "some tensor bytes", 17, 0, 0);
    size_t off = add(&b, "c/data/1", "other tensor bytes", 18, 0, 0);
    finish(&b, 0);
    b.buf[off + 3] ^= 0x40; /* two bytes changed */
    b.buf[off + 9] ^= 0x01;
    ckpt_arena a = {0};
    ckpt_zip z;
    if (!opened(&z, &a, b.buf, b.len, 2)) goto done; /* open reads no data */
    const ckpt_zip_entry *e = ckpt_zip_find(&z, "c/data/1");
    CHECK(e != NULL);
    if (e) {
        uint64_t budget = 0;
        const uint8_t *data;
        CHECK_EQ_INT(ckpt_zip_read(&z, e, &a, &budget, &data), 0);
        CHECK_EQ_INT(ckpt_zip_check_crc(&z, e, data), CKPT_E_CHECKSUM);
        CHECK_EQ_INT(ckpt_error_last()->code, CKPT_E_CHECKSUM);
        CHECK_EQ_STR(ckpt_error_last()->member, "c/data/1");
        CHECK_EQ_INT(ckpt_error_last()->offset, off);
        char want[16];
        snprintf(want, sizeof want, "0x%08x", (unsigned)e->crc32);
        CHECK(strstr(ckpt_error_last()->message, want) != NULL);
        uint32_t actual = libdeflate_crc32(0, data, 18);
        snprintf(want, sizeof want, "0x%08x", (unsigned)actual);
        CHECK(actual != e->crc32);
        CHECK(strstr(ckpt_error_last()->message, want) != NULL);
    }
    const uint8_t *first = b.buf + z.entries[0].data_offset;
    CHECK_EQ_INT(ckpt_zip_check_crc(&z, &z.entries[0], first), 0);
done:
    ckpt_arena_free(&a);
}

TEST(deflate_bomb) {
    static uint8_t zeros[1 << 20];
    memset(&b, 0, sizeof b);
    add(&b, "bomb/data/0", zeros, sizeof zeros, 8, 0);
    finish(&b, 0);
    ckpt_arena a = {0};
    ckpt_zip z;
    if (!opened(&z, &a, b.buf, b.len, 1)) goto done;
    CHECK(z.entries[0].csize < 2000);
    uint64_t budget = 100000;
    const uint8_t *data = NULL;
    CHECK_EQ_INT(ckpt_zip_read(&z, &z.entries[0], &a, &budget, &data), CKPT_E_LIMIT);
    CHECK(data == NULL);
    CHECK_EQ_INT(budget, 100000);
    CHECK_EQ_STR(ckpt_error_last()->member, "bomb/data/0");
    CHECK_EQ_INT(ckpt_error_last()->offset, z.entries[0].data_offset);
    budget = 3 << 20;
    CHECK_EQ_INT(ckpt_zip_read(&z, &z.entries[0], &a, &budget, &data), 0);
    CHECK_EQ_INT(budget, 2 << 20);
    CHECK(data != NULL && data[0] == 0 && data[(1 << 20) - 1] == 0);
    /* A declared size deflate cannot reach from so few bytes. */
    ckpt_zip_entry forged = z.entries[0];
    forged.usize = forged.csize * 1032 + 1;
    budget = UINT64_MAX;
    uint64_t used = a.total;
    CHECK_EQ_INT(ckpt_zip_read(&z, &forged, &a, &budget, &data), CKPT_E_FORMAT);
    CHECK(strstr(ckpt_error_last()->message, "1032") != NULL);
    CHECK_EQ_INT(a.total, used); /* refused before allocating */
    /* A declared size smaller than the stream: no overflow, an error. */
    forged.usize = 1000;
    CHECK_EQ_INT(ckpt_zip_read(&z, &forged, &a, &budget, &data), CKPT_E_FORMAT);
    forged.usize = (1 << 20) + 1;
    CHECK_EQ_INT(ckpt_zip_read(&z, &forged, &a, &budget, &data), CKPT_E_FORMAT);
    CHECK(strstr(ckpt_error_last()->message, "1048576") != NULL);
done:
    ckpt_arena_free(&a);
}

TEST(corrupt_deflate_and_methods) {
    memset(&b, 0, sizeof b);
    size_t off = add(&b, "d", "abcabcabcabcabcabc", 18, 8, 0);
    add(&b, "bz", "xx", 2, 12, 0);
    add(&b, "s", "stored", 6, 0, 0);
    finish(&b, 0);
    b.buf[off] = 0xFF; /* BTYPE 11: reserved */
    ckpt_arena a = {0};
    ckpt_zip z;
    if (!opened(&z, &a, b.buf, b.len, 3)) goto done;
    uint64_t budget = 1000;
    const uint8_t *data;
    CHECK_EQ_INT(ckpt_zip_read(&z, &z.entries[0], &a, &budget, &data), CKPT_E_FORMAT);
    CHECK(strstr(ckpt_error_last()->message, "invalid deflate data: expected a raw deflate "
                                             "stream of") != NULL);
    CHECK(strstr(ckpt_error_last()->message, "that inflates to 18") != NULL);
    CHECK_EQ_INT(ckpt_error_last()->offset, off);
    CHECK_EQ_STR(ckpt_error_last()->member, "d");
    CHECK_EQ_INT(ckpt_zip_read(&z, &z.entries[1], &a, &budget, &data), CKPT_E_UNSUPPORTED);
    CHECK(strstr(ckpt_error_last()->message, "method 12") != NULL);
    CHECK_EQ_STR(ckpt_error_last()->member, "bz");
    ckpt_zip_entry lying = z.entries[2];
    lying.usize = 5; /* stored: sizes must agree */
    CHECK_EQ_INT(ckpt_zip_read(&z, &lying, &a, &budget, &data), CKPT_E_FORMAT);
done:
    ckpt_arena_free(&a);
}

TEST(duplicates_and_nul) {
    memset(&b, 0, sizeof b);
    add(&b, "x/b", "first", 5, 0, 0);
    add(&b, "x/a", "a", 1, 0, 0);
    add(&b, "x/b", "second", 6, 0, 0);
    finish(&b, 0);
    ckpt_arena a = {0};
    ckpt_zip z;
    if (!opened(&z, &a, b.buf, b.len, 3)) goto done;
    CHECK_EQ_INT(z.has_duplicates, 1);
    /* miniz's heap sort leaves [x/a, x/b (2nd), x/b (1st)] and its
     * binary search probes the middle first: the second "x/b" wins */
    CHECK(ckpt_zip_find(&z, "x/b") == &z.entries[2]);
    CHECK(ckpt_zip_find(&z, "x/a") == &z.entries[1]);
    CHECK(ckpt_zip_find(&z, "X/A") == &z.entries[1]);
    CHECK_EQ_INT(z.by_name[0], 1);
    CHECK_EQ_INT(z.by_name[1], 2);
    CHECK_EQ_INT(z.by_name[2], 0);
    /* A NUL inside a central name. */
    memset(&b, 0, sizeof b);
    add(&b, "x/ab", "1", 1, 0, 0);
    finish(&b, 0);
    size_t cd = b.len - 22 - 46 - 4;
    CHECK(memcmp(b.buf + cd + 46, "x/ab", 4) == 0);
    b.buf[cd + 46 + 2] = 0;
    CHECK_EQ_INT(open_buf(&z, &a, b.buf, b.len), CKPT_E_FORMAT);
    CHECK(strstr(ckpt_error_last()->message, "NUL byte in the 4-byte name of the central entry") !=
          NULL);
    CHECK(strstr(ckpt_error_last()->message, "expected a member name without NUL bytes") != NULL);
    CHECK_EQ_INT(ckpt_error_last()->offset, cd + 46 + 2);
done:
    ckpt_arena_free(&a);
}

TEST(bad_signatures) {
    memset(&b, 0, sizeof b);
    add(&b, "one", "1", 1, 0, 0);
    add(&b, "two", "2", 1, 0, 0);
    finish(&b, 0);
    ckpt_arena a = {0};
    ckpt_zip z;
    size_t second = b.m[1].local;
    b.buf[second] = 'X';
    CHECK_EQ_INT(open_buf(&z, &a, b.buf, b.len), CKPT_E_FORMAT);
    CHECK_EQ_STR(ckpt_error_last()->member, "two");
    CHECK_EQ_INT(ckpt_error_last()->offset, second);
    b.buf[second] = 'P';
    CHECK_EQ_INT(open_buf(&z, &a, b.buf, b.len), 0);
    size_t cd = b.len - 22 - 2 * (46 + 3);
    b.buf[cd] = 'X';
    CHECK_EQ_INT(open_buf(&z, &a, b.buf, b.len), CKPT_E_FORMAT);
    CHECK_EQ_INT(ckpt_error_last()->offset, cd);
    CHECK(strstr(ckpt_error_last()->message, "PK\\1\\2") != NULL);
    b.buf[cd] = 'P';
    /* A local header offset beyond the input. */
    poke32(b.buf + cd + 42, 0x40000000u);
    CHECK_EQ_INT(open_buf(&z, &a, b.buf, b.len), CKPT_E_TRUNCATED);
    CHECK_EQ_STR(ckpt_error_last()->member, "one");
    ckpt_arena_free(&a);
}

/* The directory is read before the local headers (ckpt_zip_open_directory,
 * then ckpt_zip_open_members), but the first error is the one a reader
 * that reads each entry's local header right after its central entry
 * meets: a bad local header before a bad central entry comes first. */
TEST(first_error_in_entry_order) {
    memset(&b, 0, sizeof b);
    add(&b, "one", "1", 1, 0, 0);
    add(&b, "two", "2", 1, 0, 0);
    add(&b, "three", "3", 1, 0, 0);
    finish(&b, 0);
    ckpt_arena a = {0};
    ckpt_zip z;
    size_t second = b.m[1].local, third_cd = b.len - 22 - (46 + 5);
    b.buf[second] = 'X';
    b.buf[third_cd] = 'X';
    CHECK_EQ_INT(open_buf(&z, &a, b.buf, b.len), CKPT_E_FORMAT);
    CHECK_EQ_STR(ckpt_error_last()->member, "two");
    CHECK_EQ_INT(ckpt_error_last()->offset, second);
    CHECK_EQ_INT(
        ckpt_zip_open_directory(&z, &a, b.buf, b.len, NULL, "test.zip", &limits, CKPT_ZIP_TORCH),
        CKPT_E_FORMAT);
    CHECK_EQ_INT(ckpt_error_last()->offset, second);
    CHECK(z.entries == NULL);
    /* the local header intact: the central entry's error, as it was met */
    b.buf[second] = 'P';
    CHECK_EQ_INT(open_buf(&z, &a, b.buf, b.len), CKPT_E_FORMAT);
    CHECK_EQ_INT(ckpt_error_last()->offset, third_cd);
    CHECK(strstr(ckpt_error_last()->message, "PK\\1\\2") != NULL);
    /* the directory intact: it opens in one step, a local header's error
     * comes with the members */
    b.buf[third_cd] = 'P';
    b.buf[second] = 'X';
    CHECK_EQ_INT(
        ckpt_zip_open_directory(&z, &a, b.buf, b.len, NULL, "test.zip", &limits, CKPT_ZIP_TORCH),
        0);
    CHECK(ckpt_zip_find(&z, "TWO") == &z.entries[1]);
    ckpt_zip_entry e = z.entries[0];
    CHECK_EQ_INT(ckpt_zip_read_local(&z, &e), 0);
    CHECK_EQ_INT(e.data_offset, b.m[0].local + 30 + 3 + 3);
    CHECK_EQ_INT(ckpt_zip_open_members(&z, &a), CKPT_E_FORMAT);
    CHECK_EQ_INT(ckpt_error_last()->offset, second);
    CHECK(z.entries == NULL);
    b.buf[second] = 'P';
    CHECK_EQ_INT(open_buf(&z, &a, b.buf, b.len), 0);
    CHECK_EQ_INT(z.entries[2].data_offset, b.m[2].local + 30 + 5 + 3);
    ckpt_arena_free(&a);
}

/* A torch archive's pickle runs before its members' local headers are
 * read (torch.c), but its error is reported after theirs and after the
 * checks of the records that torch.load reads before data.pkl. */
TEST(torch_pickle_error_comes_last) {
    static const char bad_pickle[] = "\x80\x02}q\x00"; /* a dict, no STOP */
    memset(&b, 0, sizeof b);
    add(&b, "a/data.pkl", bad_pickle, sizeof bad_pickle - 1, 0, 0);
    add(&b, "a/byteorder", "little", 6, 0, 0);
    add(&b, "a/version", "3\n", 2, 0, 0);
    finish(&b, 0);
    size_t version = b.m[2].local, byteorder = b.m[1].local + 30 + 11 + 3;
    ckpt_file *f = NULL;
    b.buf[version] = 'X';
    CHECK_EQ_INT(ckpt_open_memory(&f, b.buf, b.len, "bad.pt", NULL), CKPT_E_FORMAT);
    CHECK_EQ_STR(ckpt_error_last()->member, "a/version");
    CHECK_EQ_INT(ckpt_error_last()->offset, version);
    b.buf[version] = 'P';
    b.buf[byteorder] = 'b'; /* "bittle" */
    CHECK_EQ_INT(ckpt_open_memory(&f, b.buf, b.len, "bad.pt", NULL), CKPT_E_FORMAT);
    CHECK_EQ_STR(ckpt_error_last()->member, "a/byteorder");
    CHECK(strstr(ckpt_error_last()->message, "byteorder") != NULL);
    b.buf[byteorder] = 'l';
    CHECK_EQ_INT(ckpt_open_memory(&f, b.buf, b.len, "bad.pt", NULL), CKPT_E_TRUNCATED);
    CHECK_EQ_STR(ckpt_error_last()->member, "a/data.pkl");
    CHECK(f == NULL);
}

/* Only the saturated fields are in the ZIP64 extra, in the order usize,
 * csize, local offset; the others keep their 32-bit values. */
TEST(zip64_extra_partial) {
    static const int masks[] = {1, 2, 4, 3, 5, 6};
    for (size_t k = 0; k < sizeof masks / sizeof masks[0]; k++) {
        memset(&b, 0, sizeof b);
        add(&b, "q/data.pkl", "pickle", 6, 0, 0);
        size_t off = add(&b, "q/data/0", "zipzipzipzipzipzip", 18, 8, 0);
        finish(&b, masks[k]);
        ckpt_arena a = {0};
        ckpt_zip z;
        /* mask 4, the extra carrying only the local offset: torch 2.x's
         * miniz checks the offset the extra gives (1.13's checked the
         * saturated one against the input size and refused) */
        if (!opened(&z, &a, b.buf, b.len, 2)) goto next;
        CHECK_EQ_INT(z.entries[1].usize, 18);
        CHECK_EQ_INT(z.entries[1].csize, b.m[1].csize);
        CHECK_EQ_INT(z.entries[1].local_offset, b.m[1].local);
        CHECK_EQ_INT(z.entries[1].data_offset, off);
        const uint8_t *data = NULL;
        uint64_t budget = 18;
        CHECK_EQ_INT(ckpt_zip_read(&z, &z.entries[1], &a, &budget, &data), 0);
        CHECK(data != NULL && memcmp(data, "zipzipzipzipzipzip", 18) == 0);
    next:
        ckpt_arena_free(&a);
    }
}

TEST(zip64_extra_malformed) {
    memset(&b, 0, sizeof b);
    add(&b, "z", "zz", 2, 0, 0);
    finish(&b, Z64_ALL);
    ckpt_arena a = {0};
    ckpt_zip z;
    CHECK_EQ_INT(open_buf(&z, &a, b.buf, b.len), 0);
    /* The extra field declares more bytes than the entry's extra holds. */
    size_t cd = b.m[0].local + 30 + 1 + 3 + 2;
    CHECK_EQ_INT(b.buf[cd], 'P');
    size_t x = cd + 46 + 1;
    b.buf[x + 2] = 25;
    CHECK_EQ_INT(open_buf(&z, &a, b.buf, b.len), CKPT_E_FORMAT);
    CHECK_EQ_INT(ckpt_error_last()->offset, x);
    /* Too short for three saturated fields. */
    b.buf[x + 2] = 16;
    CHECK_EQ_INT(open_buf(&z, &a, b.buf, b.len), CKPT_E_FORMAT);
    CHECK(strstr(ckpt_error_last()->message, "ZIP64") != NULL);
    /* A locator pointing nowhere, with no record before it: both readers
     * fall back to the classic end record, whose saturated offsets lie
     * past the end. */
    b.buf[x + 2] = 24;
    size_t z64 = b.len - 22 - 20 - 56;
    b.buf[z64] = 'X';
    CHECK_EQ_INT(open_buf(&z, &a, b.buf, b.len), CKPT_E_FORMAT);
    CHECK_EQ_INT(ckpt_error_last()->offset, b.len - 22);
    CHECK(strstr(ckpt_error_last()->message, "runs past the end") != NULL);
    ckpt_arena_free(&a);
}

/* ------------------------------------------------------------ miniz rules */

/* Lookup is ASCII case-insensitive (mz_zip_reader_locate_file, flags 0),
 * and names equal but for case are duplicates. */
TEST(lookup_ignores_case) {
    memset(&b, 0, sizeof b);
    add(&b, "arc/DATA.PKL", "P", 1, 0, 0);
    add(&b, "arc/version", "3\n", 2, 0, 0);
    finish(&b, Z64_ALL);
    ckpt_arena a = {0};
    ckpt_zip z;
    if (!opened(&z, &a, b.buf, b.len, 2)) goto done;
    CHECK_EQ_INT(z.has_duplicates, 0);
    CHECK(ckpt_zip_find(&z, "arc/data.pkl") == &z.entries[0]);
    CHECK(ckpt_zip_find(&z, "ARC/Version") == &z.entries[1]);
    CHECK(ckpt_zip_find(&z, "arc/data.pk") == NULL);
    CHECK(ckpt_zip_find(&z, "arc/data.pkl2") == NULL);
    memset(&b, 0, sizeof b);
    add(&b, "arc/data.pkl", "1", 1, 0, 0);
    add(&b, "arc/Data.pkl", "2", 1, 0, 0);
    finish(&b, 0);
    if (!opened(&z, &a, b.buf, b.len, 2)) goto done;
    CHECK_EQ_INT(z.has_duplicates, 1);
done:
    ckpt_arena_free(&a);
}

static void le(uint8_t *p, uint64_t v, int n) {
    for (int i = 0; i < n; i++) p[i] = (uint8_t)(v >> 8 * i);
}

/* A stored archive of n members named names[i], each holding the one
 * byte i % 256: *len bytes, malloc'd. */
typedef char member_name[48];
static uint8_t *stored_members(const member_name *names, size_t n, size_t *len) {
    uint8_t *z = calloc(n * (78 + 2 * sizeof *names) + 22, 1), *p = z;
    if (!z) return NULL;
    for (size_t i = 0; i < n; i++) {
        size_t k = strlen(names[i]);
        uint8_t byte = (uint8_t)i;
        le(p, 0x04034b50, 4);
        le(p + 26, k, 2);
        memcpy(p + 30, names[i], k);
        p[30 + k] = byte;
        p += 31 + k;
    }
    size_t cd = (size_t)(p - z), local = 0;
    for (size_t i = 0; i < n; i++) {
        size_t k = strlen(names[i]);
        uint8_t byte = (uint8_t)i;
        le(p, 0x02014b50, 4);
        le(p + 16, libdeflate_crc32(0, &byte, 1), 4);
        le(p + 20, 1, 4);
        le(p + 24, 1, 4);
        le(p + 28, k, 2);
        le(p + 42, local, 4);
        memcpy(p + 46, names[i], k);
        local += 31 + k;
        p += 46 + k;
    }
    le(p, 0x06054b50, 4);
    le(p + 8, n, 2);
    le(p + 10, n, 2);
    le(p + 12, (uint64_t)(p - z) - cd, 4);
    le(p + 16, cd, 4);
    *len = (size_t)(p - z) + 22;
    return z;
}

/* n members "archive/data/<i>", as torch.save names its storages. */
static uint8_t *many_members(size_t n, size_t *len) {
    member_name *names = malloc(n * sizeof *names);
    if (!names) return NULL;
    for (size_t i = 0; i < n; i++) snprintf(names[i], sizeof *names, "archive/data/%zu", i);
    uint8_t *z = stored_members(names, n, len);
    free(names);
    return z;
}

/* The first n names prefix<i> (i = 0, 1, ...) whose hashes end in 8 zero
 * bits: all filed under slot 0 of a table of up to 256 slots. */
static void colliding_names(member_name *out, size_t n, const char *prefix) {
    for (size_t i = 0, found = 0; found < n; i++) {
        snprintf(out[found], sizeof *out, "%s%zu", prefix, i);
        found += (ckpt_zip_name_hash(out[found], strlen(out[found])) & 0xFF) == 0;
    }
}

/* Distinct names are looked up in a hash table (no sort): 60,000 names
 * that differ only in their last digits spread over it (a hash that left
 * them in long chains gave it up for the sort), and each is found
 * ignoring case, names absent or cut short not. */
TEST(lookup_many_names) {
    size_t len, n = 60000;
    uint8_t *buf = many_members(n, &len);
    CHECK(buf != NULL);
    if (!buf) return;
    ckpt_arena a = {0};
    ckpt_zip z;
    if (!opened(&z, &a, buf, len, n)) goto done;
    CHECK_EQ_INT(z.has_duplicates, 0);
    CHECK(z.slots != NULL && z.by_name == NULL);
    size_t wrong = 0;
    char name[40];
    for (size_t i = 0; i < n; i += 7) {
        snprintf(name, sizeof name, i % 2 ? "ARCHIVE/Data/%zu" : "archive/data/%zu", i);
        wrong += ckpt_zip_find(&z, name) != &z.entries[i];
    }
    CHECK_EQ_INT(wrong, 0);
    CHECK(ckpt_zip_find(&z, "archive/data/60000") == NULL);
    CHECK(ckpt_zip_find(&z, "archive/data/") == NULL);
    CHECK(ckpt_zip_find(&z, "archive/data/1234 ") == NULL);
done:
    ckpt_arena_free(&a);
    free(buf);
}

/* Names made to collide: a chain of 64 slots still fits the table, a
 * 65th name past it gives the table up for miniz's sorted order (binary
 * search), which finds every name as miniz does, ignoring case. */
TEST(lookup_hash_chain_fallback) {
    enum { N = 65 };
    member_name names[N];
    colliding_names(names, N, "arc/c");
    for (size_t n = N - 1; n <= N; n++) {
        size_t len;
        uint8_t *buf = stored_members(names, n, &len);
        CHECK(buf != NULL);
        if (!buf) return;
        ckpt_arena a = {0};
        ckpt_zip z;
        if (!opened(&z, &a, buf, len, n)) goto done;
        CHECK_EQ_INT(z.has_duplicates, 0);
        CHECK_EQ_INT(z.slots == NULL, n == N); /* the table, up to 64 probes */
        CHECK_EQ_INT(z.by_name != NULL, n == N);
        size_t wrong = 0;
        uint64_t budget = ckpt_zip_budget(&limits, len);
        for (size_t i = 0; i < n; i++) {
            char upper[sizeof *names];
            for (size_t k = 0; k < sizeof upper; k++)
                upper[k] =
                    names[i][k] >= 'a' && names[i][k] <= 'z' ? names[i][k] - 32 : names[i][k];
            const ckpt_zip_entry *e = ckpt_zip_find(&z, names[i]);
            const uint8_t *data = NULL;
            wrong += e != &z.entries[i] || ckpt_zip_find(&z, upper) != e ||
                     ckpt_zip_read(&z, e, &a, &budget, &data) != 0 || data[0] != (uint8_t)i;
        }
        CHECK_EQ_INT(wrong, 0);
        /* in miniz's order: sorted, ASCII case ignored */
        for (size_t i = 1; z.by_name && i < n; i++)
            wrong += strcmp(z.entries[z.by_name[i - 1]].name, z.entries[z.by_name[i]].name) >= 0;
        CHECK_EQ_INT(wrong, 0);
        CHECK(ckpt_zip_find(&z, "arc/c") == NULL);
        CHECK(ckpt_zip_find(&z, "arc/c0x") == NULL);
    done:
        ckpt_arena_free(&a);
        free(buf);
    }
}

/* `test_zip --colliding N PREFIX`: N member names PREFIX<i> filed under
 * one slot, one a line (tests/zipdiff builds an archive of them). */
static void print_colliding(size_t n, const char *prefix) {
    member_name *names = malloc(n * sizeof *names);
    if (!names) abort();
    colliding_names(names, n, prefix);
    for (size_t i = 0; i < n; i++) puts(names[i]);
    free(names);
}

/* ckpt_zip_named_at answers entry i only when it is what ckpt_zip_find
 * finds for dir + key: its name exactly, every name distinct ignoring
 * case; else NULL (the caller looks the name up). */
TEST(named_at) {
    memset(&b, 0, sizeof b);
    add(&b, "arc/data.pkl", "P", 1, 0, 0);
    add(&b, "ARC/Data/1", "a", 1, 0, 0);
    add(&b, "arc/data/0", "b", 1, 0, 0);
    add(&b, "arc/data/02", "c", 1, 0, 0);
    finish(&b, 0);
    ckpt_arena a = {0};
    ckpt_zip z;
    if (!opened(&z, &a, b.buf, b.len, 4)) goto done;
    const char *dir = "arc/data/";
    CHECK(ckpt_zip_named_at(&z, 2, dir, 9, "0", 1) == &z.entries[2]);
    CHECK(ckpt_zip_named_at(&z, 2, dir, 9, "0", 1) == ckpt_zip_find(&z, "arc/data/0"));
    CHECK(ckpt_zip_named_at(&z, 3, dir, 9, "02", 2) == &z.entries[3]);
    /* another entry there, another case, a prefix, past the end */
    CHECK(ckpt_zip_named_at(&z, 3, dir, 9, "0", 1) == NULL);
    CHECK(ckpt_zip_named_at(&z, 1, dir, 9, "1", 1) == NULL);
    CHECK(ckpt_zip_find(&z, "arc/data/1") == &z.entries[1]);
    CHECK(ckpt_zip_named_at(&z, 4, dir, 9, "0", 1) == NULL);
    /* names equal but for case: a lookup is miniz's choice, not ours */
    memset(&b, 0, sizeof b);
    add(&b, "arc/DATA/0", "1", 1, 0, 0);
    add(&b, "arc/data/0", "2", 1, 0, 0);
    finish(&b, 0);
    if (!opened(&z, &a, b.buf, b.len, 2)) goto done;
    CHECK(ckpt_zip_named_at(&z, 1, dir, 9, "0", 1) == NULL);
done:
    ckpt_arena_free(&a);
}

/* Appends a ZIP64 locator declaring `declared` (and, when `record`, a
 * ZIP64 end record before it) ahead of a classic end record. */
static void finish_locator(zbuild *w, uint64_t declared, int record, int comment_record) {
    size_t cd = w->len;
    for (size_t i = 0; i < w->n; i++) {
        member *m = &w->m[i];
        put32(w, 0x02014b50);
        put16(w, 0x031e);
        put16(w, 20);
        put16(w, 0);
        put16(w, 0);
        put32(w, 0);
        put32(w, m->crc);
        put32(w, m->csize);
        put32(w, m->usize);
        put16(w, strlen(m->name));
        put32(w, 0); /* extra, comment lengths */
        put32(w, 0); /* disk, internal attributes */
        put32(w, 0);
        put32(w, m->local);
        put(w, m->name, strlen(m->name));
    }
    size_t cd_size = w->len - cd;
    if (record) {
        put32(w, 0x06064b50);
        put64(w, 44);
        put32(w, 0x002d031e);
        put32(w, 0);
        put32(w, 0);
        put64(w, w->n);
        put64(w, w->n);
        put64(w, cd_size);
        put64(w, cd);
    }
    put32(w, 0x07064b50);
    put32(w, 0);
    put64(w, declared);
    put32(w, 1);
    put32(w, 0x06054b50);
    put32(w, 0);
    put16(w, w->n);
    put16(w, w->n);
    put32(w, cd_size);
    put32(w, cd);
    put16(w, comment_record ? 56 : 0);
    if (comment_record) { /* a ZIP64 end record inside the comment */
        put32(w, 0x06064b50);
        put64(w, 44);
        put32(w, 0x002d031e);
        put32(w, 0);
        put32(w, 0);
        put64(w, w->n);
        put64(w, w->n);
        put64(w, cd_size);
        put64(w, cd);
    }
}

TEST(zip64_locator_readings) {
    ckpt_arena a = {0};
    ckpt_zip z;
    /* A record in the end record's comment, which miniz follows the
     * locator to; zipfile finds none before the locator. */
    memset(&b, 0, sizeof b);
    add(&b, "c/data.pkl", "x", 1, 0, 0);
    size_t cd = b.len;
    finish_locator(&b, 0, 0, 1);
    size_t record = b.len - 56, loc = cd + 46 + 10;
    poke32(b.buf + loc + 8, (uint32_t)record);
    CHECK_EQ_INT(open_buf(&z, &a, b.buf, b.len), CKPT_E_FORMAT);
    CHECK(strstr(ckpt_error_last()->message, "two readings") != NULL);
    CHECK_EQ_INT(ckpt_error_last()->offset, loc);
    /* A locator that points at no record, with a record before it. */
    memset(&b, 0, sizeof b);
    add(&b, "c/data.pkl", "x", 1, 0, 0);
    finish_locator(&b, 0, 1, 0);
    CHECK_EQ_INT(open_buf(&z, &a, b.buf, b.len), CKPT_E_FORMAT);
    CHECK(strstr(ckpt_error_last()->message, "no ZIP64 end record") != NULL);
    /* Pointing at the record before it: one reading. */
    poke32(b.buf + b.len - 22 - 20 + 8, (uint32_t)(b.len - 22 - 20 - 56));
    if (opened(&z, &a, b.buf, b.len, 1)) CHECK(ckpt_zip_find(&z, "c/data.pkl") != NULL);
    /* No record anywhere: both use the classic record, but the locator's
     * 20 bytes sit between the directory and it, which zipfile reads as a
     * prefix to shift by. */
    memset(&b, 0, sizeof b);
    add(&b, "c/data.pkl", "x", 1, 0, 0);
    finish_locator(&b, 0, 0, 0);
    CHECK_EQ_INT(open_buf(&z, &a, b.buf, b.len), CKPT_E_FORMAT);
    CHECK(strstr(ckpt_error_last()->message, "shifts every offset") != NULL);
    /* A locator declaring an offset where no 56-byte record fits. */
    poke32(b.buf + b.len - 22 - 20 + 8, (uint32_t)(b.len - 55));
    CHECK_EQ_INT(open_buf(&z, &a, b.buf, b.len), CKPT_E_FORMAT);
    CHECK_EQ_INT(ckpt_error_last()->offset, b.len - 22 - 20);
    ckpt_arena_free(&a);
}

/* The end record is the signature closest to the end, whatever the
 * comment holds; a record too close to the end to fit is skipped. */
TEST(eocd_search) {
    memset(&b, 0, sizeof b);
    add(&b, "e/data.pkl", "x", 1, 0, 0);
    finish(&b, 0);
    put(&b, "PK\5\6", 4);     /* 4 bytes: no room for a record */
    b.buf[b.len - 4 - 2] = 4; /* the real record's comment covers them */
    ckpt_arena a = {0};
    ckpt_zip z;
    if (opened(&z, &a, b.buf, b.len, 1)) CHECK_EQ_STR(z.entries[0].name, "e/data.pkl");
    ckpt_arena_free(&a);
}

/* Entries that share bytes: one compressed stream read several times. */
TEST(overlapping_members) {
    memset(&b, 0, sizeof b);
    add(&b, "o/a", "0123456789", 10, 0, 0);
    add(&b, "o/b", "0123456789", 10, 0, 0);
    b.m[1].local = b.m[0].local;
    finish(&b, 0);
    ckpt_arena a = {0};
    ckpt_zip z;
    CHECK_EQ_INT(open_buf(&z, &a, b.buf, b.len), CKPT_E_FORMAT);
    CHECK(strstr(ckpt_error_last()->message, "overlaps") != NULL);
    CHECK_EQ_INT(ckpt_error_last()->offset, 0);
    ckpt_arena_free(&a);
}

/* A directory that lists members out of their layout order (c, a, b):
 * the overlap check sorts them by offset, stably. Laid out apart, they
 * open; with b's local header at a's, b (after a among equal offsets)
 * overlaps a. */
TEST(members_out_of_layout_order) {
    for (int shared = 0; shared < 2; shared++) {
        memset(&b, 0, sizeof b);
        add(&b, "o/a", "0123456789", 10, 0, 0);
        add(&b, "o/b", "abcdefghij", 10, 0, 0);
        add(&b, "o/c", "ABCDEFGHIJ", 10, 0, 0);
        if (shared) b.m[1].local = b.m[0].local;
        member c = b.m[2];
        b.m[2] = b.m[1];
        b.m[1] = b.m[0];
        b.m[0] = c;
        finish(&b, 0);
        ckpt_arena a = {0};
        ckpt_zip z;
        if (!shared) {
            if (opened(&z, &a, b.buf, b.len, 3)) {
                CHECK_EQ_STR(z.entries[0].name, "o/c");
                CHECK_EQ_INT(memcmp(b.buf + z.entries[0].data_offset, "ABCDEFGHIJ", 10), 0);
                CHECK_EQ_INT(memcmp(b.buf + z.entries[2].data_offset, "abcdefghij", 10), 0);
            }
        } else {
            CHECK_EQ_INT(open_buf(&z, &a, b.buf, b.len), CKPT_E_FORMAT);
            CHECK(strstr(ckpt_error_last()->message, "overlaps member o/a") != NULL);
            CHECK_EQ_STR(ckpt_error_last()->member, "o/b");
            CHECK_EQ_INT(ckpt_error_last()->offset, 0);
        }
        ckpt_arena_free(&a);
    }
}

/* The per-entry checks of mz_zip_reader_read_central_dir. */
TEST(miniz_entry_rules) {
    ckpt_arena a = {0};
    ckpt_zip z;
    memset(&b, 0, sizeof b);
    add(&b, "m/data.pkl", "0123456789", 10, 0, 0);
    finish(&b, 0);
    size_t cd = b.len - 22 - 46 - 10;
    CHECK(memcmp(b.buf + cd, "PK\1\2", 4) == 0);
    /* stored, sizes differ: refused, unless the 16 bits after the method
     * (the time) are set, as miniz reads the method as 32 bits */
    poke32(b.buf + cd + 24, 9);
    CHECK_EQ_INT(open_buf(&z, &a, b.buf, b.len), CKPT_E_FORMAT);
    CHECK_EQ_STR(ckpt_error_last()->member, "m/data.pkl");
    CHECK_EQ_INT(ckpt_error_last()->offset, cd);
    b.buf[cd + 12] = 1;
    if (opened(&z, &a, b.buf, b.len, 1)) {
        const uint8_t *data;
        uint64_t budget = 100;
        CHECK_EQ_INT(ckpt_zip_read(&z, &z.entries[0], &a, &budget, &data), CKPT_E_FORMAT);
    }
    poke32(b.buf + cd + 24, 10);
    b.buf[cd + 12] = 0;
    /* disk 0xFFFF, then disk 2, in an archive of one disk: damaged */
    b.buf[cd + 34] = b.buf[cd + 35] = 0xFF;
    CHECK_EQ_INT(open_buf(&z, &a, b.buf, b.len), CKPT_E_FORMAT);
    CHECK(strstr(ckpt_error_last()->message, "disk number is 65535, expected 0") != NULL);
    b.buf[cd + 34] = 2;
    b.buf[cd + 35] = 0;
    CHECK_EQ_INT(open_buf(&z, &a, b.buf, b.len), CKPT_E_FORMAT);
    CHECK_EQ_STR(ckpt_error_last()->member, "m/data.pkl");
    b.buf[cd + 34] = 1; /* miniz lets disk 1 through */
    CHECK_EQ_INT(open_buf(&z, &a, b.buf, b.len), 0);
    b.buf[cd + 34] = 0;
    /* masked local headers */
    b.buf[cd + 9] = 0x20;
    CHECK_EQ_INT(open_buf(&z, &a, b.buf, b.len), CKPT_E_UNSUPPORTED);
    b.buf[cd + 9] = 0;
    /* a directory (DOS attribute) with data: torch reads none */
    b.buf[cd + 38] = 0x10;
    if (opened(&z, &a, b.buf, b.len, 1)) {
        const uint8_t *data;
        uint64_t budget = 100;
        CHECK_EQ_INT(z.entries[0].is_dir, 1);
        CHECK_EQ_INT(ckpt_zip_read(&z, &z.entries[0], &a, &budget, &data), CKPT_E_FORMAT);
        CHECK(strstr(ckpt_error_last()->message, "directory") != NULL);
    }
    b.buf[cd + 38] = 0;
    /* patched data (0x20): miniz will not extract it */
    b.buf[cd + 8] = 0x20;
    if (opened(&z, &a, b.buf, b.len, 1)) {
        const uint8_t *data;
        uint64_t budget = 100;
        CHECK_EQ_INT(ckpt_zip_read(&z, &z.entries[0], &a, &budget, &data), CKPT_E_UNSUPPORTED);
    }
    ckpt_arena_free(&a);
}

/* One budget per input: the absolute limit, and a ratio of its size. */
TEST(inflate_budget) {
    ckpt_limits lim = limits;
    CHECK_EQ_INT(ckpt_zip_budget(&lim, 1000), 100000);
    lim.max_inflate_bytes = 5000;
    CHECK_EQ_INT(ckpt_zip_budget(&lim, 1000), 5000);
    lim.max_inflate_ratio = UINT64_MAX;
    CHECK_EQ_INT(ckpt_zip_budget(&lim, 1000), 5000);
    lim.max_inflate_ratio = 0;
    CHECK_EQ_INT(ckpt_zip_budget(&lim, 1000), 0);
}

/* Failing allocation N, for N = 0, 1, ...: open and inflate report
 * CKPT_E_NOMEM (never crash) until enough allocations succeed. */
static long allocs_left;
static void *failing_malloc(void *u, size_t n) {
    (void)u;
    return allocs_left-- > 0 ? malloc(n) : NULL;
}
static void *failing_realloc(void *u, void *p, size_t n) {
    (void)u;
    return allocs_left-- > 0 ? realloc(p, n) : NULL;
}
static void plain_free(void *u, void *p) {
    (void)u;
    free(p);
}

TEST(allocation_failures) {
    static uint8_t text[100000];
    memset(&b, 0, sizeof b);
    add(&b, "f/data/0", text, sizeof text, 8, 0);
    finish(&b, 0);
    const ckpt_allocator failing = {failing_malloc, failing_realloc, plain_free, NULL};
    ckpt_set_allocator(&failing);
    long n;
    int rc = -1;
    for (n = 0; n < 10 && rc != 0; n++) {
        allocs_left = n;
        ckpt_arena a = {0};
        ckpt_zip z;
        rc = open_buf(&z, &a, b.buf, b.len);
        if (rc == 0) {
            uint64_t budget = sizeof text;
            const uint8_t *data;
            rc = ckpt_zip_read(&z, &z.entries[0], &a, &budget, &data);
        }
        if (rc) CHECK_EQ_INT(rc, CKPT_E_NOMEM);
        /* the directory's offset (open), or the member's data (inflate) */
        if (rc) CHECK(ckpt_error_last()->offset != CKPT_NO_OFFSET);
        ckpt_arena_free(&a);
    }
    ckpt_set_allocator(NULL);
    CHECK_EQ_INT(rc, 0);
    CHECK(n >= 3); /* at least the directory's and the inflated bytes'
                      allocations failed once each */
}

/* ------------------------------------------------------------ view */

/* `test_zip --view FILE...`: one JSON line per file with ckpt's reading
 * of its directory as torch sees it, for the differential test against
 * torch._C.PyTorchFileReader (tests/zipdiff): {"ok":1,"names":[...],
 * "reads":[hex or null, ...]} where reads[i] is what a lookup of names[i]
 * reads, or {"ok":0,"code":N,"offset":N,"message":"..."}. */
static void json_str(const char *s, size_t n) {
    putchar('"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20 || c >= 0x7f)
            printf("\\u%04x", c);
        else
            putchar(c);
    }
    putchar('"');
}

static void view(const char *path) {
    size_t len;
    unsigned char *buf = harness_read_file(path, &len);
    ckpt_arena a = {0};
    ckpt_zip z;
    int rc = buf ? open_buf(&z, &a, buf, len) : CKPT_E_IO;
    if (rc) {
        const ckpt_error *e = ckpt_error_last();
        printf("{\"ok\":0,\"code\":%d,\"offset\":%lld,\"message\":", rc,
               e->offset == CKPT_NO_OFFSET ? -1LL : (long long)e->offset);
        json_str(e->message ? e->message : "", e->message ? strlen(e->message) : 0);
        printf("}\n");
    } else {
        printf("{\"ok\":1,\"duplicates\":%d,\"names\":[", z.has_duplicates);
        for (size_t i = 0; i < z.count; i++) {
            if (i) putchar(',');
            json_str(z.entries[i].name, z.entries[i].name_len);
        }
        printf("],\"reads\":[");
        for (size_t i = 0; i < z.count; i++) {
            const ckpt_zip_entry *e = ckpt_zip_find(&z, z.entries[i].name);
            const uint8_t *data = NULL;
            uint64_t budget = ckpt_zip_budget(&limits, len);
            if (i) putchar(',');
            if (!e || ckpt_zip_read(&z, e, &a, &budget, &data)) {
                printf("null");
                continue;
            }
            putchar('"');
            for (uint64_t k = 0; k < e->usize; k++) printf("%02x", data[k]);
            putchar('"');
        }
        printf("]}\n");
    }
    ckpt_arena_free(&a);
    free(buf);
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--view") == 0) {
        for (int i = 2; i < argc; i++) view(argv[i]);
        return 0;
    }
    if (argc == 4 && strcmp(argv[1], "--colliding") == 0) {
        print_colliding(strtoul(argv[2], NULL, 10), argv[3]);
        return 0;
    }
    RUN_CORPUS(torch_checkpoint);
    RUN_CORPUS(torch_truncated_everywhere);
    RUN_CORPUS(torch_directory_corrupted_everywhere);
    RUN_CORPUS(local_name_differs);
    RUN(lookup_ignores_case);
    RUN(named_at);
    RUN(lookup_many_names);
    RUN(lookup_hash_chain_fallback);
    RUN(zip64_locator_readings);
    RUN(eocd_search);
    RUN(overlapping_members);
    RUN(members_out_of_layout_order);
    RUN(miniz_entry_rules);
    RUN(inflate_budget);
    RUN(local_name_prefix);
    RUN_CORPUS(encrypted_flag);
    RUN_CORPUS(patch_flag_readable);
    RUN_CORPUS(password_protected);
    RUN(built_stored_and_deflated);
    RUN(built_zip64);
    RUN(prefix_two_readings);
    RUN(prefix_two_readings_zip64);
    RUN(data_past_end);
    RUN(absurd_counts);
    RUN(cd_offset_past_end);
    RUN(no_end_record);
    RUN(eocd_comment);
    RUN(bad_crc);
    RUN(deflate_bomb);
    RUN(corrupt_deflate_and_methods);
    RUN(duplicates_and_nul);
    RUN(bad_signatures);
    RUN(first_error_in_entry_order);
    RUN(torch_pickle_error_comes_last);
    RUN(zip64_extra_partial);
    RUN(zip64_extra_malformed);
    RUN(allocation_failures);
    return harness_end();
}
