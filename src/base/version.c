/* version.c - the library's version at run time, default limits and the
 * *_options_init functions of every option struct. */
#include "base/error.h"

unsigned ckpt_version_number(void) { return CKPT_VERSION_NUMBER; }

const char *ckpt_version_string(void) { return CKPT_VERSION_STRING; }

void ckpt_limits_init(ckpt_limits *l) {
    if (l) *l = (ckpt_limits)CKPT_LIMITS_INIT;
}

int ckpt_open_options_init(ckpt_open_options *opts, unsigned version) {
    if (!opts || version != CKPT_OPEN_OPTIONS_VERSION)
        return ckpt_err_options_version(__func__, version, CKPT_OPEN_OPTIONS_VERSION);
    *opts = (ckpt_open_options)CKPT_OPEN_OPTIONS_INIT;
    return 0;
}

int ckpt_scan_options_init(ckpt_scan_options *opts, unsigned version) {
    if (!opts || version != CKPT_SCAN_OPTIONS_VERSION)
        return ckpt_err_options_version(__func__, version, CKPT_SCAN_OPTIONS_VERSION);
    *opts = (ckpt_scan_options)CKPT_SCAN_OPTIONS_INIT;
    return 0;
}

int ckpt_store_options_init(ckpt_store_options *opts, unsigned version) {
    if (!opts || version != CKPT_STORE_OPTIONS_VERSION)
        return ckpt_err_options_version(__func__, version, CKPT_STORE_OPTIONS_VERSION);
    *opts = (ckpt_store_options)CKPT_STORE_OPTIONS_INIT;
    return 0;
}

int ckpt_match_options_init(ckpt_match_options *opts, unsigned version) {
    if (!opts || version != CKPT_MATCH_OPTIONS_VERSION)
        return ckpt_err_options_version(__func__, version, CKPT_MATCH_OPTIONS_VERSION);
    *opts = (ckpt_match_options)CKPT_MATCH_OPTIONS_INIT;
    return 0;
}

int ckpt_diff_options_init(ckpt_diff_options *opts, unsigned version) {
    if (!opts || version != CKPT_DIFF_OPTIONS_VERSION)
        return ckpt_err_options_version(__func__, version, CKPT_DIFF_OPTIONS_VERSION);
    *opts = (ckpt_diff_options)CKPT_DIFF_OPTIONS_INIT;
    return 0;
}

int ckpt_write_options_init(ckpt_write_options *opts, unsigned version) {
    if (!opts || version != CKPT_WRITE_OPTIONS_VERSION)
        return ckpt_err_options_version(__func__, version, CKPT_WRITE_OPTIONS_VERSION);
    *opts = (ckpt_write_options)CKPT_WRITE_OPTIONS_INIT;
    return 0;
}

int ckpt_convert_options_init(ckpt_convert_options *opts, unsigned version) {
    if (!opts || version != CKPT_CONVERT_OPTIONS_VERSION)
        return ckpt_err_options_version(__func__, version, CKPT_CONVERT_OPTIONS_VERSION);
    *opts = (ckpt_convert_options)CKPT_CONVERT_OPTIONS_INIT;
    return 0;
}
