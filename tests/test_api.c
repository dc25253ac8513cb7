/* test_api.c - the public API's conventions: run-time version, versioned
 * option structs (_INIT, *_options_init, unknown versions refused), the
 * layout of ckpt_file_value_table. Uses only <ckpt.h>. */
#include <ckpt.h>
#include <errno.h>

#include "harness.h"

TEST(version_matches_header) {
    CHECK_EQ_INT(ckpt_version_number(), CKPT_VERSION_NUMBER);
    CHECK_EQ_STR(ckpt_version_string(), CKPT_VERSION_STRING);
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", CKPT_VERSION_MAJOR, CKPT_VERSION_MINOR,
             CKPT_VERSION_PATCH);
    CHECK_EQ_STR(ckpt_version_string(), want);
}

TEST(options_init_equals_macro) {
    ckpt_open_options a = CKPT_OPEN_OPTIONS_INIT, b;
    memset(&b, 0xab, sizeof b);
    CHECK_EQ_INT(ckpt_open_options_init(&b, CKPT_OPEN_OPTIONS_VERSION), 0);
    CHECK(memcmp(&a.limits, &b.limits, sizeof a.limits) == 0);
    CHECK_EQ_INT(b.version, 1);
    CHECK_EQ_INT(b.limits.max_header_bytes, 100000000u);
    CHECK_EQ_INT(b.limits.max_ndim, CKPT_MAX_NDIM);

    ckpt_scan_options s;
    CHECK_EQ_INT(ckpt_scan_options_init(&s, CKPT_SCAN_OPTIONS_VERSION), 0);
    CHECK_EQ_INT(s.max_nesting, 3);
    CHECK(s.allow == NULL && s.nallow == 0);
    ckpt_store_options st;
    CHECK_EQ_INT(ckpt_store_options_init(&st, CKPT_STORE_OPTIONS_VERSION), 0);
    CHECK_EQ_INT(st.keep, 3);
    CHECK_EQ_INT(st.stale_minutes, 60);
    CHECK_EQ_INT(st.open.version, CKPT_OPEN_OPTIONS_VERSION);
    ckpt_convert_options c;
    CHECK_EQ_INT(ckpt_convert_options_init(&c, CKPT_CONVERT_OPTIONS_VERSION), 0);
    CHECK_EQ_INT(c.open.version, CKPT_OPEN_OPTIONS_VERSION);
    CHECK_EQ_INT(c.write.version, CKPT_WRITE_OPTIONS_VERSION);
    ckpt_match_options m;
    CHECK_EQ_INT(ckpt_match_options_init(&m, CKPT_MATCH_OPTIONS_VERSION), 0);
    CHECK_EQ_INT(m.normalize, 0);
    ckpt_diff_options d;
    CHECK_EQ_INT(ckpt_diff_options_init(&d, CKPT_DIFF_OPTIONS_VERSION), 0);
    CHECK(d.rtol == 0.0 && d.atol == 0.0);
    ckpt_limits l;
    ckpt_limits_init(&l);
    CHECK(memcmp(&l, &a.limits, sizeof l) == 0);
}

TEST(unknown_versions_refused) {
    ckpt_open_options o;
    CHECK_EQ_INT(ckpt_open_options_init(&o, 2), CKPT_E_INVALID_ARG);
    CHECK_EQ_INT(ckpt_open_options_init(NULL, 1), CKPT_E_INVALID_ARG);
    o = (ckpt_open_options)CKPT_OPEN_OPTIONS_INIT;
    o.version = 0; /* a zeroed struct that never went through _INIT */
    ckpt_file *f = (ckpt_file *)&o;
    CHECK_EQ_INT(ckpt_open(&f, "/nonexistent", &o), CKPT_E_INVALID_ARG);
    CHECK(f == NULL);
    CHECK(strstr(ckpt_error_last()->message, "options version 0") != NULL);
    CHECK_EQ_INT(ckpt_open_memory(&f, "x", 1, "m", &o), CKPT_E_INVALID_ARG);

    ckpt_scan_options s = CKPT_SCAN_OPTIONS_INIT;
    s.version = 7;
    ckpt_scan_report *r = NULL;
    CHECK_EQ_INT(ckpt_scan_memory(&r, "x", 1, "m", &s), CKPT_E_INVALID_ARG);
    CHECK(r == NULL);

    ckpt_store_options st = CKPT_STORE_OPTIONS_INIT;
    st.version = 0;
    ckpt_store_listing *l = (ckpt_store_listing *)&st;
    CHECK_EQ_INT(ckpt_store_list(&l, "/nonexistent", &st), CKPT_E_INVALID_ARG);
    CHECK(l == NULL);

    ckpt_convert_options c = CKPT_CONVERT_OPTIONS_INIT;
    c.version = CKPT_CONVERT_OPTIONS_VERSION + 1;
    CHECK_EQ_INT(ckpt_convert(NULL, "/nonexistent", "/tmp/x.safetensors", &c), CKPT_E_INVALID_ARG);
}

/* A failed system call leaves its errno in the record (Python raises
 * FileNotFoundError from it); other failures leave 0. */
TEST(error_os_errno) {
    ckpt_file *f = NULL;
    CHECK_EQ_INT(ckpt_open(&f, "/nonexistent-ckpt-dir/x.safetensors", NULL), CKPT_E_IO);
    CHECK_EQ_INT(ckpt_error_last()->os_errno, ENOENT);
    CHECK_EQ_INT(ckpt_open(&f, "/dev/null/x.pt", NULL), CKPT_E_IO);
    CHECK_EQ_INT(ckpt_error_last()->os_errno, ENOTDIR);
    static const unsigned char junk[16] = "not a checkpoint";
    CHECK_EQ_INT(ckpt_open_memory(&f, junk, sizeof junk, "junk", NULL), CKPT_E_FORMAT);
    CHECK_EQ_INT(ckpt_error_last()->os_errno, 0);
    CHECK(f == NULL);
}

/* A path in a printed command: one POSIX shell word, snprintf's contract. */
TEST(shell_quote) {
    char b[64];
    CHECK_EQ_INT((int)ckpt_shell_quote(b, sizeof b, "run_1/model-2.0.pt"), 18);
    CHECK_EQ_STR(b, "run_1/model-2.0.pt");
    CHECK_EQ_INT((int)ckpt_shell_quote(b, sizeof b, ""), 2);
    CHECK_EQ_STR(b, "''");
    CHECK_EQ_INT((int)ckpt_shell_quote(b, sizeof b, "it's $HOME"), 15);
    CHECK_EQ_STR(b, "'it'\\''s $HOME'");
    CHECK_EQ_INT((int)ckpt_shell_quote(b, 4, "a b"), 5);
    CHECK_EQ_STR(b, "'a ");
    CHECK_EQ_INT((int)ckpt_shell_quote(NULL, 0, "a\nb"), 5);
}

TEST(enums_pinned) {
    /* values other languages hard-code (python/ckpt/_lib.py) */
    CHECK_EQ_INT(CKPT_DT_F32, 12);
    CHECK_EQ_INT(CKPT_DT_BF16, 11);
    CHECK_EQ_INT(CKPT_KIND_OBJECT, 11);
    CHECK_EQ_INT(CKPT_FORMAT_TORCH_ZIP, 3);
    CHECK_EQ_INT(CKPT_VERDICT_NOT_A_CHECKPOINT, 3);
    CHECK_EQ_STR(ckpt_dtype_name(CKPT_DT_F8_E4M3), "F8_E4M3");
}

/* Node i's word k, tensor record j's word k. */
#define NODE(t, i, k) ((t)->words[(size_t)(i)*CKPT_TABLE_NODE_WORDS + (k)])
#define TREC(t, j, k) ((t)->words[(t)->tensors_at + (size_t)(j)*CKPT_TABLE_TENSOR_WORDS + (k)])

static int text_is(const ckpt_value_table *t, int64_t off, int64_t n, const char *s) {
    return (size_t)n == strlen(s) && memcmp(t->text + off, s, (size_t)n) == 0;
}

TEST(value_table_tensors) {
    /* {"w": F32[2], "v": F32[2]}: every field as the accessors give it */
    static const char hdr[] = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                              "\"v\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}";
    unsigned char buf[8 + sizeof hdr - 1 + 16] = {0};
    uint64_t n = sizeof hdr - 1;
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)(n >> (8 * i));
    memcpy(buf + 8, hdr, (size_t)n);
    ckpt_file *f = NULL;
    CHECK_EQ_INT(ckpt_open_memory(&f, buf, sizeof buf, "m.safetensors", NULL), 0);
    if (!f) return;
    ckpt_value_table *t = NULL;
    CHECK_EQ_INT(ckpt_file_value_table(&t, f), 0);
    if (!t) goto out;
    CHECK_EQ_INT(t->version, CKPT_VALUE_TABLE_VERSION);
    CHECK_EQ_INT(t->nnodes, 5); /* two keys, two tensors, the dict (last) */
    CHECK_EQ_INT(t->ntensors, 2);
    size_t root = t->nnodes - 1;
    CHECK_EQ_INT(NODE(t, root, 0), CKPT_KIND_DICT);
    CHECK_EQ_INT(NODE(t, root, 2), 2);
    CHECK_EQ_INT(NODE(t, root, 3), 0); /* a plain dict */
    CHECK_EQ_INT(NODE(t, root, 4), -1);
    const ckpt_value *r;
    CHECK_EQ_INT(ckpt_file_logical_root(&r, f), 0);
    for (size_t e = 0; e < 2; e++) {
        int64_t key = t->words[t->refs_at + (size_t)NODE(t, root, 1) + 2 * e];
        int64_t val = t->words[t->refs_at + (size_t)NODE(t, root, 1) + 2 * e + 1];
        size_t len;
        const char *want = ckpt_value_str(ckpt_value_key(r, e), &len);
        CHECK_EQ_INT(NODE(t, key, 0), CKPT_KIND_STR);
        CHECK(text_is(t, NODE(t, key, 1), NODE(t, key, 2), want));
        CHECK_EQ_INT(NODE(t, val, 0), CKPT_KIND_TENSOR);
        int64_t j = NODE(t, val, 1);
        const ckpt_tensor *ten = ckpt_value_tensor(ckpt_value_item(r, e));
        CHECK(TREC(t, j, 15) == (int64_t)(uintptr_t)ten);
        CHECK_EQ_INT(TREC(t, j, 0), CKPT_DT_F32);
        CHECK_EQ_INT(TREC(t, j, 1), 1);
        CHECK_EQ_INT(t->words[t->dims_at + (size_t)TREC(t, j, 2)], 2);     /* shape */
        CHECK_EQ_INT(t->words[t->dims_at + (size_t)TREC(t, j, 2) + 1], 1); /* stride */
        CHECK_EQ_INT(TREC(t, j, 3), ckpt_tensor_storage_id(ten));
        CHECK_EQ_INT(TREC(t, j, 4), 0);
        CHECK_EQ_INT(TREC(t, j, 5), 2);
        CHECK_EQ_INT(TREC(t, j, 6), 8);
        CHECK_EQ_INT(TREC(t, j, 7), 8);
        CHECK_EQ_INT(TREC(t, j, 8), CKPT_TABLE_RAW | CKPT_TABLE_CONTIGUOUS | CKPT_TABLE_WHOLE);
        const void *data;
        CHECK_EQ_INT(ckpt_tensor_data(ten, &data, &len), 0);
        CHECK(TREC(t, j, 9) == (int64_t)(uintptr_t)data);
        CHECK(text_is(t, TREC(t, j, 10), TREC(t, j, 11), "cpu"));
        CHECK_EQ_INT(TREC(t, j, 12), (int64_t)ckpt_tensor_file_offset(ten));
    }
    ckpt_value_table_free(t);
out:
    ckpt_close(f);
}

TEST(value_table_sharing) {
    /* l = [1]; {"a": l, "b": l, "big": 2**70, "f": 0.5} (open refuses cycles) */
    static const char pk[] =
        "\x80\x02\x7d\x71\x00\x28\x58\x01\x00\x00\x00\x61\x71\x01\x5d\x71\x02\x4b\x01\x61"
        "\x58\x01\x00\x00\x00\x62\x71\x03\x68\x02\x58\x03\x00\x00\x00\x62\x69\x67\x71\x04"
        "\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x40\x58\x01\x00\x00\x00\x66\x71\x05\x47"
        "\x3f\xe0\x00\x00\x00\x00\x00\x00\x75\x2e";
    ckpt_file *f = NULL;
    CHECK_EQ_INT(ckpt_open_memory(&f, pk, sizeof pk - 1, "shared.pkl", NULL), 0);
    if (!f) return;
    ckpt_value_table *t = NULL;
    CHECK_EQ_INT(ckpt_file_value_table(&t, f), 0);
    if (!t) goto out;
    /* the dict, 4 keys, the list, its 1, the big int, the float: each once */
    CHECK_EQ_INT(t->nnodes, 9);
    size_t root = t->nnodes - 1;
    const int64_t *e = t->words + t->refs_at + (size_t)NODE(t, root, 1);
    CHECK_EQ_INT(NODE(t, root, 2), 4);
    CHECK_EQ_INT(e[1], e[3]); /* "a" and "b": one node */
    int64_t l = e[1];
    CHECK_EQ_INT(NODE(t, l, 0), CKPT_KIND_LIST);
    CHECK_EQ_INT(NODE(t, l, 2), 1);
    CHECK(t->words[t->refs_at + (size_t)NODE(t, l, 1)] < l); /* children first */
    CHECK_EQ_INT(NODE(t, e[5], 0), CKPT_KIND_INT);
    CHECK(NODE(t, e[5], 2) >= 0); /* past int64: its decimal */
    CHECK(text_is(t, NODE(t, e[5], 2), NODE(t, e[5], 3), "1180591620717411303424"));
    double x;
    memcpy(&x, &NODE(t, e[7], 1), sizeof x);
    CHECK(x == 0.5);
    ckpt_value_table_free(t);
out:
    ckpt_close(f);
    ckpt_value_table_free(NULL);
}

int main(void) {
    RUN(version_matches_header);
    RUN(options_init_equals_macro);
    RUN(unknown_versions_refused);
    RUN(error_os_errno);
    RUN(shell_quote);
    RUN(enums_pinned);
    RUN(value_table_tensors);
    RUN(value_table_sharing);
    return harness_end();
}
