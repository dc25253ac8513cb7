/* scan_fuzzer.c - ckpt_scan_memory on arbitrary bytes: never crashes or
 * leaks, every report is well formed, and a malicious file never turns
 * safe by truncation or mutation: input starting with the protocol 0
 * "cos\nsystem\n" GLOBAL must not be judged safe. */
#include <stdint.h>
#include <string.h>

#include "ckpt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ckpt_scan_options o = CKPT_SCAN_OPTIONS_INIT;
    o.limits.max_inflate_bytes = (uint64_t)1 << 24; /* keeps bombs cheap */
    o.limits.max_pickle_ops = (uint64_t)1 << 22;
    ckpt_scan_report *r = NULL;
    if (ckpt_scan_memory(&r, data, size, "fuzz", &o) != 0) {
        if (r) __builtin_trap();
        return 0;
    }
    ckpt_verdict v = ckpt_scan_verdict(r);
    if (v > CKPT_VERDICT_REVIEW) __builtin_trap();
    int flagged = 0;
    for (size_t i = 0; i < ckpt_scan_finding_count(r); i++) {
        const ckpt_finding *f = ckpt_scan_finding(r, i);
        if (!f->kind || !f->member || !f->message) __builtin_trap();
        if (f->offset != UINT64_MAX && f->offset > size) __builtin_trap();
        flagged |= f->severity != CKPT_SEVERITY_INFO;
    }
    /* unsafe exactly when something above info was found */
    if (flagged != (v == CKPT_VERDICT_UNSAFE)) __builtin_trap();
    for (size_t i = 1; i < ckpt_scan_global_count(r); i++)
        if (strcmp(ckpt_scan_global(r, i - 1), ckpt_scan_global(r, i)) >= 0) __builtin_trap();
    if (size >= 11 && memcmp(data, "cos\nsystem\n", 11) == 0 && v == CKPT_VERDICT_SAFE)
        __builtin_trap();
    ckpt_scan_report_free(r);
    return 0;
}
