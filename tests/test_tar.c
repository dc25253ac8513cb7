/* test_tar.c - tar member lists as Python's tarfile reads them
 * (src/container/tar.h); each expectation was checked against
 * tarfile.open(mode="r:") of CPython 3.11. */
#include <stdio.h>
#include <stdlib.h>

#include "container/tar.h"
#include "harness.h"

static uint8_t buf[8192];

/* Rewrites the checksum of the header at `at`. */
static void fix_sum(size_t at) {
    uint8_t *h = buf + at;
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (size_t i = 0; i < 512; i++) sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum);
}

/* A V7 header (no "ustar") for `name` with `size` bytes of 'x' data. */
static size_t member(size_t at, const char *name, size_t size, char type) {
    uint8_t *h = buf + at;
    memset(h, 0, 512);
    memcpy(h, name, strlen(name));
    snprintf((char *)h + 100, 8, "%07o", 0644);
    snprintf((char *)h + 124, 12, "%011zo", size);
    h[156] = (uint8_t)type;
    fix_sum(at);
    memset(h + 512, 'x', size);
    return at + 512 + (size + 511) / 512 * 512;
}

TEST(v7_headers) {
    memset(buf, 0, sizeof buf);
    size_t n = member(0, "storages", 3, '0');
    n = member(n, "pickle", 600, '\0');
    n = member(n, "pickle", 1, '0'); /* the last of a name counts */
    n = member(n, "dir/", 0, '\0');  /* V7 directory */
    n += 1024;                       /* the end: two NUL blocks */
    CHECK_EQ_INT(ckpt_tar_sniff(buf, n), CKPT_TAR_YES);
    ckpt_arena a = {0};
    ckpt_tar t;
    CHECK_EQ_INT(ckpt_tar_read(&t, &a, buf, n, NULL, 100), 0);
    CHECK_EQ_INT(t.answer, CKPT_TAR_YES);
    CHECK_EQ_INT(t.count, 4);
    const ckpt_tar_member *m = ckpt_tar_find(&t, "pickle");
    CHECK(m && m->size == 1 && m->header == 1024 + 512 + 1024);
    m = ckpt_tar_find(&t, "dir");
    CHECK(m && m->type == '5');
    CHECK(ckpt_tar_find(&t, "storages") && ckpt_tar_find(&t, "tensors") == NULL);
    /* a bad checksum in the first block: no tar at all */
    buf[0] ^= 1;
    CHECK_EQ_INT(ckpt_tar_sniff(buf, n), CKPT_TAR_NO);
    CHECK_EQ_INT(ckpt_tar_read(&t, &a, buf, n, NULL, 100), 0);
    CHECK_EQ_INT(t.answer, CKPT_TAR_NO);
    buf[0] ^= 1;
    /* a signed-sum checksum is accepted too; a size past the end fails
     * the listing (ReadError: torch falls back to the pickle reader) */
    snprintf((char *)buf + 1024 + 124, 12, "%011o", 070000);
    fix_sum(1024);
    CHECK_EQ_INT(ckpt_tar_read(&t, &a, buf, n, NULL, 100), 0);
    CHECK_EQ_INT(t.listing_fails, 1);
    CHECK_EQ_INT(t.at, 1024);
    ckpt_arena_free(&a);
}

TEST(unsure_forms) {
    ckpt_arena a = {0};
    ckpt_tar t;
    memset(buf, 0, sizeof buf);
    size_t n = member(0, "x", 1, 'x'); /* a PAX header */
    CHECK_EQ_INT(ckpt_tar_read(&t, &a, buf, n + 1024, NULL, 100), 0);
    CHECK_EQ_INT(t.answer, CKPT_TAR_UNSURE);
    member(0, "x", 1, '2'); /* a symbolic link */
    CHECK_EQ_INT(ckpt_tar_read(&t, &a, buf, n + 1024, NULL, 100), 0);
    CHECK_EQ_INT(t.answer, CKPT_TAR_UNSURE);
    member(0, "x", 1, '0');
    memcpy(buf + 124, "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xfb", 12); /* size -5 */
    fix_sum(0);
    CHECK_EQ_INT(ckpt_tar_sniff(buf, n), CKPT_TAR_UNSURE);
    memcpy(buf + 124, "\x80\xff\0\0\0\0\0\0\0\0\0\0", 12); /* beyond 64 bits */
    fix_sum(0);
    CHECK_EQ_INT(ckpt_tar_sniff(buf, n), CKPT_TAR_UNSURE);
    memcpy(buf + 100, "0644 x\0\0", 8); /* not a number: not a header, even */
    fix_sum(0);                         /* with an unsure field after it */
    CHECK_EQ_INT(ckpt_tar_sniff(buf, n), CKPT_TAR_NO);
    CHECK_EQ_INT(ckpt_tar_sniff(buf, 511), CKPT_TAR_NO);
    ckpt_arena_free(&a);
}

/* Number fields in every form int(s, 8) takes, and base-256 checksums:
 * tarfile's verdict on each (CPython 3.11 TarInfo.frombuf). */
TEST(number_forms) {
    static const struct {
        const char *mode;
        ckpt_tar_answer want;
    } forms[] = {
        {"0_644", CKPT_TAR_YES}, {"0o_644", CKPT_TAR_YES}, {"+0o644", CKPT_TAR_YES},
        {"-0O17", CKPT_TAR_YES}, {" 644 ", CKPT_TAR_YES},  {"", CKPT_TAR_YES},
        {"1__0", CKPT_TAR_NO},   {"_644", CKPT_TAR_NO},    {"644_", CKPT_TAR_NO},
        {"- 644", CKPT_TAR_NO},  {"0o", CKPT_TAR_NO},      {"+", CKPT_TAR_NO},
        {"0o__7", CKPT_TAR_NO},  {"08", CKPT_TAR_NO},
    };
    memset(buf, 0, sizeof buf);
    size_t n = member(0, "x", 1, '0');
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        memset(buf + 100, 0, 8);
        memcpy(buf + 100, forms[i].mode, strlen(forms[i].mode));
        fix_sum(0);
        CHECK_EQ_INT(ckpt_tar_sniff(buf, n), forms[i].want);
    }
    /* a signed byte sum below zero, written base-256 after 0xFF */
    member(0, "x", 1, '0');
    memset(buf + 100, 0, 48); /* mode .. mtime: empty, read as 0 */
    memset(buf + 1, 0xff, 99);
    memset(buf + 157, 0xff, 172);
    memset(buf + 345, 0xff, 167);
    int64_t ss = 256; /* the field itself counts as 8 spaces */
    for (size_t i = 0; i < 512; i++) ss += i >= 148 && i < 156 ? 0 : (int8_t)buf[i];
    CHECK(ss < 0);
    uint64_t v = (uint64_t)ss + ((uint64_t)1 << 56);
    buf[148] = 0xff;
    for (size_t i = 0; i < 7; i++) buf[149 + i] = (uint8_t)(v >> (48 - 8 * i));
    CHECK_EQ_INT(ckpt_tar_sniff(buf, n), CKPT_TAR_YES);
    /* a pickle of a big int: 0xFF bytes where the checksum goes read as
     * -1, which matches neither sum: no tar (it was "unsure") */
    memset(buf, 0xff, 512);
    memcpy(buf, "\x80\x02}q\x00X\x01\x00\x00\x00nq\x01\x8b\xf5\x01\x00\x00", 18);
    CHECK_EQ_INT(ckpt_tar_sniff(buf, 512), CKPT_TAR_NO);
}

int main(void) {
    RUN(v7_headers);
    RUN(unsure_forms);
    RUN(number_forms);
    return harness_end();
}
