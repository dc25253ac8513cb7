/* test_scan_log.c - the scan of an opened torch archive takes data.pkl's
 * events from the reader's run (format/pickle_log.h) only where they
 * stand for its own run's: the report is the one a scan of the path
 * gives (which runs the pickle itself), field by field, whether the log
 * is used or not; and the log is used for a state dict's pickle and not
 * where reader and scan mode part (a call the log cannot stand for, an
 * opcode torch's weights_only unpickler refuses), nor for a scan with
 * other limits. */
#include <libdeflate.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt.h"
#include "harness.h"
#include "model/file.h"
#include "format/pickle_log.h"

#define SCRATCH_NAME "scan-log"
#include "scratch.h"

static void put16(uint8_t *p, unsigned v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static void put32(uint8_t *p, uint32_t v) {
    put16(p, v & 0xffff);
    put16(p + 2, v >> 16);
}

/* Writes a torch archive "a/" of stored members (name, bytes) to path. */
static void write_archive(const char *path, const char *const *names, const char *const *data,
                          const size_t *lens, size_t n) {
    static uint8_t out[1 << 16];
    size_t pos = 0, local[8];
    for (size_t i = 0; i < n; i++) {
        size_t nl = strlen(names[i]);
        uint32_t crc = (uint32_t)libdeflate_crc32(0, data[i], lens[i]);
        local[i] = pos;
        memset(out + pos, 0, 30);
        put32(out + pos, 0x04034b50);
        put32(out + pos + 14, crc);
        put32(out + pos + 18, (uint32_t)lens[i]);
        put32(out + pos + 22, (uint32_t)lens[i]);
        put16(out + pos + 26, (unsigned)nl);
        memcpy(out + pos + 30, names[i], nl);
        pos += 30 + nl;
        memcpy(out + pos, data[i], lens[i]);
        pos += lens[i];
    }
    size_t cd = pos;
    for (size_t i = 0; i < n; i++) {
        size_t nl = strlen(names[i]);
        memset(out + pos, 0, 46);
        put32(out + pos, 0x02014b50);
        put32(out + pos + 16, (uint32_t)libdeflate_crc32(0, data[i], lens[i]));
        put32(out + pos + 20, (uint32_t)lens[i]);
        put32(out + pos + 24, (uint32_t)lens[i]);
        put16(out + pos + 28, (unsigned)nl);
        put32(out + pos + 42, (uint32_t)local[i]);
        memcpy(out + pos + 46, names[i], nl);
        pos += 46 + nl;
    }
    memset(out + pos, 0, 22);
    put32(out + pos, 0x06054b50);
    put16(out + pos + 8, (unsigned)n);
    put16(out + pos + 10, (unsigned)n);
    put32(out + pos + 12, (uint32_t)(pos - cd));
    put32(out + pos + 16, (uint32_t)cd);
    pos += 22;
    FILE *fp = fopen(path, "wb");
    CHECK(fp != NULL);
    if (!fp) return;
    CHECK_EQ_INT(fwrite(out, 1, pos, fp), pos);
    fclose(fp);
}

static int same_str(const char *a, const char *b) {
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

/* 1 if the two reports agree field by field. */
static int same_report(const ckpt_scan_report *a, const ckpt_scan_report *b) {
    int same = ckpt_scan_verdict(a) == ckpt_scan_verdict(b) &&
               ckpt_scan_finding_count(a) == ckpt_scan_finding_count(b) &&
               ckpt_scan_global_count(a) == ckpt_scan_global_count(b);
    for (size_t i = 0; same && i < ckpt_scan_finding_count(a); i++) {
        const ckpt_finding *x = ckpt_scan_finding(a, i), *y = ckpt_scan_finding(b, i);
        same = x->severity == y->severity && x->offset == y->offset && same_str(x->kind, y->kind) &&
               same_str(x->global, y->global) && same_str(x->member, y->member) &&
               same_str(x->message, y->message);
    }
    for (size_t i = 0; same && i < ckpt_scan_global_count(a); i++)
        same = same_str(ckpt_scan_global(a, i), ckpt_scan_global(b, i));
    ckpt_weights_only wa, wb;
    if (same && ckpt_scan_weights_only(a, &wa) == 0 && ckpt_scan_weights_only(b, &wb) == 0)
        same = wa.refused == wb.refused && wa.offset == wb.offset &&
               same_str(wa.global, wb.global) && same_str(wa.opcode, wb.opcode) &&
               same_str(wa.member, wb.member) && same_str(wa.message, wb.message);
    return same;
}

/* The archive with data.pkl = pkl (n bytes): opened, its log usable as
 * `usable` says (-1: no log), and the scan of the opened file the scan of
 * the path; *verdict: the path scan's. */
static void check_pkl(const char *pkl, size_t n, int usable, const ckpt_scan_options *so,
                      const char **verdict) {
    static const char *const names[] = {"a/data.pkl", "a/byteorder", "a/version"};
    const char *const data[] = {pkl, "little", "3\n"};
    const size_t lens[] = {n, 6, 2};
    const char *path = in_dir("a.pt");
    write_archive(path, names, data, lens, 3);
    ckpt_file *f = NULL;
    int rc = ckpt_open(&f, path, NULL);
    CHECK_EQ_INT(rc, 0);
    if (rc) {
        fprintf(stderr, "  open: %s\n", ckpt_error_last()->message);
        return;
    }
    const pk_log *log = f->pickle_log;
    CHECK_EQ_INT(log ? log->usable : -1, usable);
    ckpt_scan_report *by_path = NULL, *opened = NULL;
    CHECK_EQ_INT(ckpt_scan(&by_path, path, so), 0);
    CHECK_EQ_INT(ckpt_scan_file(&opened, f, so), 0);
    if (by_path && opened) {
        CHECK(same_report(by_path, opened));
        *verdict = ckpt_verdict_name(ckpt_scan_verdict(by_path));
    }
    ckpt_scan_report_free(by_path);
    ckpt_scan_report_free(opened);
    ckpt_close(f);
}

#define PKL(lit) lit, sizeof(lit) - 1

/* OrderedDict({'a': 1}), with its state dict's _metadata BUILD. */
TEST(state_dict_logged) {
    const char *v = "";
    check_pkl(PKL("\x80\x02"
                  "ccollections\nOrderedDict\nq\x00)Rq\x01"
                  "X\x01\x00\x00\x00"
                  "aK\x01s"
                  "}X\x09\x00\x00\x00_metadatah\x00)Rsb."),
              1, NULL, &v);
    CHECK_EQ_STR(v, "safe");
}

/* A global named, not called: the log holds its event, reported the same. */
TEST(global_reference_logged) {
    const char *v = "";
    check_pkl(PKL("\x80\x02}X\x01\x00\x00\x00"
                  "acos\nsystem\ns."),
              1, NULL, &v);
    CHECK_EQ_STR(v, "unsafe");
}

/* Bytes after data.pkl's STOP: the first stream from the log, the next
 * one run by the scan. */
TEST(trailing_stream_after_log) {
    const char *v = "";
    check_pkl(PKL("\x80\x02}.\x80\x02"
                  "cos\nsystem\nX\x02\x00\x00\x00ls\x85R."),
              1, NULL, &v);
    CHECK_EQ_STR(v, "unsafe");
}

/* A call the log cannot stand for (_rebuild_parameter gives back its
 * argument in reader mode, an object in scan mode). */
TEST(unalike_call_not_logged) {
    const char *v = "";
    check_pkl(PKL("\x80\x02"
                  "ctorch._utils\n_rebuild_parameter\nX\x01\x00\x00\x00s\x85R."),
              0, NULL, &v);
    CHECK_EQ_STR(v, "safe");
}

/* An opcode torch's weights_only unpickler refuses (protocol 4's
 * SHORT_BINUNICODE, MEMOIZE): scan mode may part from reader mode past
 * it, so no log. */
TEST(weights_only_refused_not_logged) {
    const char *v = "";
    check_pkl(PKL("\x80\x04}\x94\x8c\x01"
                  "a\x94K\x01s."),
              0, NULL, &v);
    CHECK_EQ_STR(v, "safe");
}

/* Scan limits other than open's: the scan runs the pickle itself. */
TEST(other_limits_run_again) {
    const char *v = "";
    ckpt_scan_options so = CKPT_SCAN_OPTIONS_INIT;
    so.limits.max_pickle_ops = 5;
    check_pkl(PKL("\x80\x02}(X\x01\x00\x00\x00"
                  "aK\x01X\x01\x00\x00\x00"
                  "bK\x02u."),
              1, &so, &v);
    CHECK_EQ_STR(v, "unscannable");
}

int main(void) {
    fresh_dir();
    RUN(state_dict_logged);
    RUN(global_reference_logged);
    RUN(trailing_stream_after_log);
    RUN(unalike_call_not_logged);
    RUN(weights_only_refused_not_logged);
    RUN(other_limits_run_again);
    remove_dir();
    return harness_end();
}
