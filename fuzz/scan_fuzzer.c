/* scan_fuzzer.c - ckpt_scan_memory on arbitrary bytes: never crashes or
 * leaks, every report is well formed, and a malicious file never turns
 * safe by truncation or mutation: input starting with the protocol 0
 * "cos\nsystem\n" GLOBAL must not be judged safe. And the scan of the same
 * bytes once open (ckpt_scan_file, which walks the zip directory open
 * read) gives the very report of ckpt_scan_memory, which reads it again. */
#include <stdint.h>
#include <string.h>

#include "ckpt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int same_str(const char *a, const char *b) {
    return a == b || (a && b && strcmp(a, b) == 0);
}

static int same_report(const ckpt_scan_report *a, const ckpt_scan_report *b) {
    size_t n = ckpt_scan_finding_count(a), g = ckpt_scan_global_count(a);
    if (ckpt_scan_verdict(a) != ckpt_scan_verdict(b) || n != ckpt_scan_finding_count(b) ||
        g != ckpt_scan_global_count(b))
        return 0;
    for (size_t i = 0; i < n; i++) {
        const ckpt_finding *x = ckpt_scan_finding(a, i), *y = ckpt_scan_finding(b, i);
        if (x->severity != y->severity || x->offset != y->offset || !same_str(x->kind, y->kind) ||
            !same_str(x->global, y->global) || !same_str(x->member, y->member) ||
            !same_str(x->message, y->message))
            return 0;
    }
    for (size_t i = 0; i < g; i++)
        if (!same_str(ckpt_scan_global(a, i), ckpt_scan_global(b, i))) return 0;
    ckpt_weights_only u, v;
    return ckpt_scan_weights_only(a, &u) == ckpt_scan_weights_only(b, &v) &&
           same_str(u.global, v.global) && same_str(u.opcode, v.opcode) &&
           same_str(u.member, v.member) && same_str(u.message, v.message) && u.offset == v.offset;
}

/* The scan of the bytes opened, where they open, against r. */
static void check_opened(const uint8_t *data, size_t size, const ckpt_scan_options *o,
                         const ckpt_scan_report *r) {
    ckpt_open_options oo = CKPT_OPEN_OPTIONS_INIT;
    oo.limits = o->limits;
    ckpt_file *f = NULL;
    if (ckpt_open_memory(&f, data, size, "fuzz", &oo) != 0) return;
    ckpt_scan_report *s = NULL;
    if (ckpt_file_format(f) != CKPT_FORMAT_DCP) {
        if (ckpt_scan_file(&s, f, o) != 0 || !same_report(r, s)) __builtin_trap();
        ckpt_scan_report_free(s);
    }
    ckpt_close(f);
}

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
        /* inside a nested archive ("OUTER:INNER"): within OUTER as
         * inflated, at most what inflation may produce */
        if (f->offset != UINT64_MAX &&
            f->offset > (strchr(f->member, ':') ? o.limits.max_inflate_bytes : size))
            __builtin_trap();
        flagged |= f->severity != CKPT_SEVERITY_INFO;
    }
    /* unsafe exactly when something above info was found */
    if (flagged != (v == CKPT_VERDICT_UNSAFE)) __builtin_trap();
    for (size_t i = 1; i < ckpt_scan_global_count(r); i++)
        if (strcmp(ckpt_scan_global(r, i - 1), ckpt_scan_global(r, i)) >= 0) __builtin_trap();
    if (size >= 11 && memcmp(data, "cos\nsystem\n", 11) == 0 && v == CKPT_VERDICT_SAFE)
        __builtin_trap();
    check_opened(data, size, &o, r);
    ckpt_scan_report_free(r);
    return 0;
}
