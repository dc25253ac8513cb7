/* test_api.c - the public API's conventions: run-time version, versioned
 * option structs (_INIT, *_options_init, unknown versions refused). Uses
 * only <ckpt.h>. */
#include <ckpt.h>

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

TEST(enums_pinned) {
    /* values other languages hard-code (python/ckpt/_lib.py) */
    CHECK_EQ_INT(CKPT_DT_F32, 12);
    CHECK_EQ_INT(CKPT_DT_BF16, 11);
    CHECK_EQ_INT(CKPT_KIND_OBJECT, 11);
    CHECK_EQ_INT(CKPT_FORMAT_TORCH_ZIP, 3);
    CHECK_EQ_INT(CKPT_VERDICT_NOT_A_CHECKPOINT, 3);
    CHECK_EQ_STR(ckpt_dtype_name(CKPT_DT_F8_E4M3), "F8_E4M3");
}

int main(void) {
    RUN(version_matches_header);
    RUN(options_init_equals_macro);
    RUN(unknown_versions_refused);
    RUN(enums_pinned);
    return harness_end();
}
