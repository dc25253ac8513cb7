/* test_index_json.c - sharded-index JSON read with Python's json rules
 * (src/format/index_json.h). Each case and offset here was checked
 * against CPython 3.11's json.loads (an offset is where json reports the
 * error; for text that is not UTF-8, the string holding it). */
#include <stdio.h>
#include <stdlib.h>

#include "base/error.h"
#include "format/index_json.h"
#include "harness.h"

static ckpt_arena arena;
static ckpt_index ix;

static int rd(const char *doc) {
    ckpt_arena_free(&arena);
    return ckpt_index_read(&ix, &arena, (const uint8_t *)doc, strlen(doc), "i.json", 1000);
}

/* The shard names, sorted by key, joined by '|'. */
static const char *shards(void) {
    static char out[512];
    size_t k = 0;
    out[0] = '\0';
    for (size_t i = 0; i < ix.nshards && k + ix.shards[i].len + 2 < sizeof out; i++) {
        if (i) out[k++] = '|';
        memcpy(out + k, ix.shards[i].name, ix.shards[i].len);
        k += ix.shards[i].len;
    }
    out[k] = '\0';
    return out;
}

TEST(python_extensions) {
    /* NaN, Infinity, -Infinity and huge numbers are values to Python */
    CHECK_EQ_INT(rd("{\"metadata\":{\"total_size\":NaN,\"x\":-Infinity,\"y\":Infinity,"
                    "\"z\":123456789012345678901234567890e999},"
                    "\"weight_map\":{\"a\":\"s1.bin\"}}"),
                 0);
    CHECK_EQ_INT(ix.has_weight_map, 1);
    CHECK_EQ_STR(shards(), "s1.bin");
    /* duplicate keys: the last value wins, at every level */
    CHECK_EQ_INT(rd("{\"weight_map\":{\"a\":\"evil.bin\"},"
                    "\"weight_map\":{\"a\":\"x.bin\",\"b\":\"y.bin\",\"a\":\"z.bin\"}}"),
                 0);
    CHECK_EQ_STR(shards(), "z.bin|y.bin");
    /* each with its key, in the dict's order (a key keeps its first place) */
    CHECK_EQ_INT(rd("{\"weight_map\":{\"b\":\"x.bin\",\"a\":\"y.bin\",\"b\":\"z.bin\"}}"), 0);
    CHECK_EQ_STR(shards(), "z.bin|y.bin");
    CHECK_EQ_STR(ix.shards[0].key, "b");
    CHECK_EQ_STR(ix.shards[1].key, "a");
    /* the last top-level "metadata" value, as text */
    CHECK_EQ_INT(rd("{\"metadata\":1,\"weight_map\":{},\"metadata\": {\"n\":NaN} }"), 0);
    CHECK_EQ_INT(ix.metadata_at, 42);
    CHECK_EQ_INT(ix.metadata_len, 9);
    CHECK_EQ_INT(rd("{\"weight_map\":{\"a\":\"x.bin\"},\"weight_map\":[]}"), 0);
    CHECK_EQ_INT(ix.has_weight_map, 0);
    /* escapes decode, keys compare decoded */
    CHECK_EQ_INT(rd("{\"weight_m\\u0061p\":{\"\\u0061\":\"1\",\"a\":\"s\\/2\\u00e9.bin\"}}"), 0);
    CHECK_EQ_STR(shards(), "s/2\xc3\xa9.bin");
    /* a surrogate pair, and a lone surrogate (allowed, marked) */
    CHECK_EQ_INT(rd("{\"weight_map\":{\"a\":\"\\ud83d\\ude00\",\"b\":\"\\udc80x\"}}"), 0);
    CHECK_EQ_INT(ix.nshards, 2);
    CHECK_EQ_INT(ix.shards[0].surrogate, 0);
    CHECK_EQ_STR(ix.shards[0].name, "\xf0\x9f\x98\x80");
    CHECK_EQ_INT(ix.shards[1].surrogate, 1);
    /* "\u0000" is a character of the name */
    CHECK_EQ_INT(rd("{\"weight_map\":{\"a\":\"x\\u0000y\"}}"), 0);
    CHECK_EQ_INT(ix.shards[0].len, 3);
    /* non-string values are counted, with the first one's offset */
    CHECK_EQ_INT(rd("{\"weight_map\":{\"a\":1,\"b\":\"ok\",\"c\":[\"x\"]}}"), 0);
    CHECK_EQ_INT(ix.non_strings, 2);
    CHECK_EQ_INT(ix.first_non_string, 19);
    CHECK_EQ_STR(shards(), "ok");
    ckpt_arena_free(&arena);
}

TEST(python_refusals) {
    static const struct {
        const char *doc;
        uint64_t offset;
    } bad[] = {
        {"{\"weight_map\":{\"a\":\"x\",}}", 23}, /* trailing comma */
        {"{'weight_map':{}}", 1},                /* single quotes */
        {"{\"a\":01}", 6},                       /* leading zero */
        {"{\"a\":1.}", 6},                       /* no fraction digits */
        {"{\"a\":-}", 5},
        {"{\"a\":\"x\ty\"}", 7},  /* raw control character */
        {"{\"a\":\"\\x41\"}", 6}, /* unknown escape */
        {"{\"a\":\"\\u12g4\"}", 7},
        {"{\"a\":nan}", 5}, /* only NaN */
        {"{\"a\":1} x", 8}, /* extra data */
        {"{\"a\":1 /* c */}", 7},
        {"\xef\xbb\xbf{\"a\":1}", 0}, /* byte-order mark */
        {"[\"weight_map\"]", 0},
        {"{\"a\":\"\xff\"}", 5},         /* not UTF-8 */
        {"{\"a\":\"\xed\xa0\x80\"}", 5}, /* UTF-8 of a surrogate */
        {"{\"a\":\"x", 5},
        {"{\"a\" 1}", 5},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = rd(bad[i].doc);
        CHECK_EQ_INT(rc, CKPT_E_FORMAT);
        if (rc == CKPT_E_FORMAT) {
            CHECK_EQ_INT(ckpt_error_last()->offset, bad[i].offset);
            CHECK_EQ_STR(ckpt_error_last()->file, "i.json");
        }
    }
    ckpt_arena_free(&arena);
}

/* json.loads builds an int with int(), which refuses more than 4300
 * digits (ValueError); a float of any length is read. The index opened
 * when such a number was in its metadata, which no loader reads. */
TEST(int_digit_limit) {
    static char doc[4400];
    for (int digits = 4300; digits <= 4301; digits++) {
        int k = sprintf(doc, "{\"weight_map\":{},\"n\":-");
        memset(doc + k, '7', (size_t)digits);
        strcpy(doc + k + digits, "}");
        int rc = rd(doc);
        CHECK_EQ_INT(rc, digits == 4300 ? 0 : CKPT_E_FORMAT);
        if (rc) CHECK_EQ_INT(ckpt_error_last()->offset, 21); /* the number */
        strcpy(doc + k + digits, ".5}");
        CHECK_EQ_INT(rd(doc), 0);
        strcpy(doc + k + digits, "e5}");
        CHECK_EQ_INT(rd(doc), 0);
    }
    ckpt_arena_free(&arena);
}

TEST(depth_limit) {
    static char deep[4100];
    size_t k = 0;
    memcpy(deep, "{\"a\":", 5);
    k = 5;
    for (int i = 0; i < 2000; i++) deep[k++] = '[';
    for (int i = 0; i < 2000; i++) deep[k++] = ']';
    deep[k++] = '}';
    deep[k] = '\0';
    CHECK_EQ_INT(rd(deep), CKPT_E_LIMIT);
    CHECK_EQ_INT(ckpt_index_read(&ix, &arena, (const uint8_t *)deep, k, "i.json", 5000), 0);
    ckpt_arena_free(&arena);
}

int main(void) {
    RUN(python_extensions);
    RUN(python_refusals);
    RUN(int_digit_limit);
    RUN(depth_limit);
    return harness_end();
}
