/* test_scan.c - ckpt_scan: the corpus verdicts of expected.jsonl, every
 * benign corpus file safe, and one hand-built pickle per bypass family
 * (FORMATS.md §5.5): memo and string-opcode STACK_GLOBAL operands, INST,
 * OBJ, NEWOBJ(_EX), EXT, BUILD poisoning, dotted and dunder names,
 * Python 2 names, invalid memo, stacked streams, junk after STOP, nested
 * pickles in literals, zip tricks, truncations and allocation failures. */
#include <libdeflate.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt.h"
#include "harness.h"

#define S(lit) (const uint8_t *)(lit), sizeof(lit) - 1

/* ------------------------------------------------------------ helpers */

static ckpt_scan_report *scan_opts(const uint8_t *p, size_t n, const ckpt_scan_options *o) {
    ckpt_scan_report *r = NULL;
    int rc = ckpt_scan_memory(&r, p, n, "test", o);
    CHECK_EQ_INT(rc, 0);
    return r;
}

static ckpt_scan_report *scan(const uint8_t *p, size_t n) { return scan_opts(p, n, NULL); }

static const char *verdict(const uint8_t *p, size_t n) {
    ckpt_scan_report *r = scan(p, n);
    const char *v = ckpt_verdict_name(ckpt_scan_verdict(r));
    ckpt_scan_report_free(r);
    return v;
}

/* The first finding of this kind (and global, unless NULL), or NULL. */
static const ckpt_finding *find(const ckpt_scan_report *r, const char *kind, const char *global) {
    for (size_t i = 0; i < ckpt_scan_finding_count(r); i++) {
        const ckpt_finding *f = ckpt_scan_finding(r, i);
        if (strcmp(f->kind, kind) == 0 &&
            (!global || (f->global && strcmp(f->global, global) == 0)))
            return f;
    }
    return NULL;
}

/* Unsafe, with a dangerous "global" finding naming g. */
static void expect_dangerous(const uint8_t *p, size_t n, const char *g) {
    ckpt_scan_report *r = scan(p, n);
    CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "unsafe");
    const ckpt_finding *f = find(r, "global", g);
    CHECK(f != NULL);
    if (f) CHECK_EQ_INT(f->severity, CKPT_SEVERITY_DANGEROUS);
    if (!f) fprintf(stderr, "  no dangerous global %s\n", g);
    ckpt_scan_report_free(r);
}

static void put16(uint8_t *p, unsigned v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static void put32(uint8_t *p, uint32_t v) {
    put16(p, v & 0xffff);
    put16(p + 2, v >> 16);
}

/* A stored (or deflated) zip member for build_zip. */
typedef struct zmember {
    const char *name;
    const char *local_name; /* NULL: same as name */
    const uint8_t *data;
    size_t len;
    uint16_t flags;
    int deflate;
    int bad_crc;
} zmember;

/* Writes prefix + a zip of the members into out (offsets relative to the
 * archive start, as a zip appended to a file has them); returns its size. */
static size_t build_zip(uint8_t *out, const uint8_t *prefix, size_t plen, const zmember *m,
                        size_t n) {
    size_t pos = plen, local[8], csize[8];
    uint8_t *packed[8];
    if (plen) memcpy(out, prefix, plen);
    for (size_t i = 0; i < n; i++) {
        const char *ln = m[i].local_name ? m[i].local_name : m[i].name;
        packed[i] = NULL;
        csize[i] = m[i].len;
        if (m[i].deflate) {
            struct libdeflate_compressor *c = libdeflate_alloc_compressor(6);
            packed[i] = malloc(m[i].len + 64);
            csize[i] =
                libdeflate_deflate_compress(c, m[i].data, m[i].len, packed[i], m[i].len + 64);
            libdeflate_free_compressor(c);
        }
        uint32_t crc = libdeflate_crc32(0, m[i].data, m[i].len) ^ (m[i].bad_crc ? 1u : 0u);
        local[i] = pos - plen;
        uint8_t *h = out + pos;
        memset(h, 0, 30);
        put32(h, 0x04034b50);
        put16(h + 6, m[i].flags);
        put16(h + 8, m[i].deflate ? 8 : 0);
        put32(h + 14, crc);
        put32(h + 18, (uint32_t)csize[i]);
        put32(h + 22, (uint32_t)m[i].len);
        put16(h + 26, (unsigned)strlen(ln));
        memcpy(h + 30, ln, strlen(ln));
        pos += 30 + strlen(ln);
        memcpy(out + pos, packed[i] ? packed[i] : m[i].data, csize[i]);
        pos += csize[i];
    }
    size_t cd = pos;
    for (size_t i = 0; i < n; i++) {
        uint8_t *h = out + pos;
        memset(h, 0, 46);
        put32(h, 0x02014b50);
        put16(h + 8, m[i].flags);
        put16(h + 10, m[i].deflate ? 8 : 0);
        put32(h + 16, libdeflate_crc32(0, m[i].data, m[i].len) ^ (m[i].bad_crc ? 1u : 0u));
        put32(h + 20, (uint32_t)csize[i]);
        put32(h + 24, (uint32_t)m[i].len);
        put16(h + 28, (unsigned)strlen(m[i].name));
        put32(h + 42, (uint32_t)local[i]);
        memcpy(h + 46, m[i].name, strlen(m[i].name));
        pos += 46 + strlen(m[i].name);
        free(packed[i]);
    }
    uint8_t *e = out + pos;
    memset(e, 0, 22);
    put32(e, 0x06054b50);
    put16(e + 8, (unsigned)n);
    put16(e + 10, (unsigned)n);
    put32(e + 12, (uint32_t)(pos - cd));
    put32(e + 16, (uint32_t)(cd - plen));
    return pos + 22;
}

/* A malicious protocol 2 pickle: os.system('ls'). */
static const char EVIL[] = "\x80\x02"
                           "cos\nsystem\n"
                           "X\x02\x00\x00\x00ls"
                           "\x85R.";
#define EVIL_LEN (sizeof EVIL - 1)
/* A benign protocol 2 pickle: OrderedDict(). */
static const char BENIGN[] = "\x80\x02"
                             "ccollections\nOrderedDict\n)R.";
#define BENIGN_LEN (sizeof BENIGN - 1)

/* ------------------------------------------------------------ corpus */

/* The value of "key": "..." in a JSON line (no escapes in corpus names). */
static int json_str(const char *line, const char *key, char *out, size_t cap) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\": \"", key);
    const char *p = strstr(line, pat);
    if (!p) return -1;
    p += strlen(pat);
    const char *q = strchr(p, '"');
    if (!q || (size_t)(q - p) >= cap) return -1;
    memcpy(out, p, (size_t)(q - p));
    out[q - p] = '\0';
    return 0;
}

static size_t corpus_files, corpus_safe;

TEST(corpus_verdicts) {
    FILE *fp = fopen(CKPT_CORPUS "/expected.jsonl", "r");
    CHECK(fp != NULL);
    if (!fp) return;
    static char line[1 << 20];
    while (fgets(line, sizeof line, fp)) {
        char file[512], want[64], path[1024];
        CHECK(json_str(line, "file", file, sizeof file) == 0);
        CHECK(json_str(line, "verdict", want, sizeof want) == 0);
        snprintf(path, sizeof path, "%s/%s", CKPT_CORPUS, file);
        ckpt_scan_report *r = NULL;
        CHECK_EQ_INT(ckpt_scan(&r, path, NULL), 0);
        const char *got = ckpt_verdict_name(ckpt_scan_verdict(r));
        if (strcmp(got, want) != 0) {
            fprintf(stderr, "  %s: want %s, got %s\n", file, want, got);
            CHECK(0);
        }
        /* benign files outside scan/ carry no finding above info */
        if (strncmp(file, "scan/", 5) != 0 && strcmp(want, "safe") == 0) {
            for (size_t i = 0; i < ckpt_scan_finding_count(r); i++)
                CHECK_EQ_INT(ckpt_scan_finding(r, i)->severity, CKPT_SEVERITY_INFO);
            corpus_safe++;
        }
        corpus_files++;
        ckpt_scan_report_free(r);
    }
    fclose(fp);
    CHECK(corpus_files >= 211);
    CHECK_EQ_INT(corpus_safe, 164); /* all but torch/burn/broken.pt */
}

TEST(corpus_details) {
    ckpt_scan_report *r = NULL;
    /* globals: distinct, sorted */
    CHECK_EQ_INT(ckpt_scan(&r, CKPT_CORPUS "/scan/picklescan/new_pytorch_model.bin", NULL), 0);
    CHECK_EQ_INT(ckpt_scan_global_count(r), 3);
    CHECK_EQ_STR(ckpt_scan_global(r, 0), "collections.OrderedDict");
    CHECK_EQ_STR(ckpt_scan_global(r, 1), "torch.FloatStorage");
    CHECK_EQ_STR(ckpt_scan_global(r, 2), "torch._utils._rebuild_tensor_v2");
    CHECK(ckpt_scan_global(r, 3) == NULL);
    CHECK_EQ_INT(ckpt_scan_finding_count(r), 0);
    ckpt_scan_report_free(r);

    /* legacy: five pickles scanned, the storage blobs after them are not
     * taken for trailing bytes */
    CHECK_EQ_INT(ckpt_scan(&r, CKPT_CORPUS "/scan/picklescan/pytorch_model.bin", NULL), 0);
    CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "safe");
    CHECK(find(r, "trailing-bytes", NULL) == NULL);
    CHECK_EQ_INT(ckpt_scan_finding_count(r), 0);
    ckpt_scan_report_free(r);

    /* the magic-number bypass: payload in a later pickle */
    CHECK_EQ_INT(ckpt_scan(&r, CKPT_CORPUS "/scan/picklescan/pytorch_magic_bypass.pt", NULL), 0);
    const ckpt_finding *f = find(r, "global", "posix.system");
    CHECK(f != NULL);
    if (f) CHECK_EQ_INT(f->offset, 78);
    CHECK(find(r, "global", "builtins.eval") != NULL);
    ckpt_scan_report_free(r);

    /* a broken stream: the exec before the break still counts */
    CHECK_EQ_INT(ckpt_scan(&r, CKPT_CORPUS "/scan/picklescan/broken_model.pkl", NULL), 0);
    CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "unsafe");
    CHECK(find(r, "global", "builtins.exec") != NULL);
    f = find(r, "parse-error", NULL);
    CHECK(f != NULL);
    if (f) CHECK_EQ_INT(f->offset, 16); /* X whose length runs past the end */
    ckpt_scan_report_free(r);

    /* zip flag bits and name mismatches are reported, content scanned */
    CHECK_EQ_INT(ckpt_scan(&r, CKPT_CORPUS "/scan/picklescan/malicious1_0x1.zip", NULL), 0);
    CHECK(find(r, "zip-flags", NULL) != NULL);
    CHECK(find(r, "global", "builtins.eval") != NULL);
    ckpt_scan_report_free(r);
    CHECK_EQ_INT(
        ckpt_scan(&r, CKPT_CORPUS "/scan/picklescan/malicious1_central_directory.zip", NULL), 0);
    CHECK(find(r, "name-mismatch", NULL) != NULL);
    ckpt_scan_report_free(r);
    CHECK_EQ_INT(ckpt_scan(&r, CKPT_CORPUS "/scan/picklescan/benign_password_protected.zip", NULL),
                 0);
    CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "unscannable");
    CHECK(find(r, "encrypted", NULL) != NULL);
    ckpt_scan_report_free(r);
}

/* Where the opcode at `at` ends: INST carries two text lines, the call
 * opcodes otherwise are one byte. */
static size_t call_end(const unsigned char *p, size_t n, size_t at) {
    if (p[at] != 'i') return at + 1;
    size_t lines = 0, i = at + 1;
    for (; i < n && lines < 2; i++) lines += p[i] == '\n';
    return i;
}

/* Truncations of unsafe corpus pickles: no cut that holds a whole
 * dangerous GLOBAL is ever safe, and a cut after the first dangerous call
 * is unsafe, except inside a FRAME: the C unpickler reads a whole frame
 * before running any of it, so a cut frame runs nothing (unscannable). */
TEST(corpus_truncations) {
    static const char *const files[] = {"malicious0.pkl",    "malicious10.pkl",
                                        "malicious11.pkl",   "malicious13a.pkl",
                                        "malicious14.pkl",   "malicious15a.pkl",
                                        "malicious2_v0.pkl", "malicious1_v4.pkl",
                                        "broken_model.pkl",  "sys_module_override_sploit.pkl"};
    for (size_t k = 0; k < sizeof files / sizeof files[0]; k++) {
        char path[512];
        size_t n = 0;
        snprintf(path, sizeof path, "%s/scan/picklescan/%s", CKPT_CORPUS, files[k]);
        unsigned char *buf = harness_read_file(path, &n);
        CHECK(buf != NULL);
        if (!buf) continue;
        ckpt_scan_report *r = scan(buf, n);
        uint64_t global = UINT64_MAX, call = UINT64_MAX;
        for (size_t i = 0; i < ckpt_scan_finding_count(r); i++) {
            const ckpt_finding *f = ckpt_scan_finding(r, i);
            if (f->severity != CKPT_SEVERITY_DANGEROUS) continue;
            if (!strcmp(f->kind, "global") && global == UINT64_MAX) global = f->offset;
            if (!strcmp(f->kind, "call") && call == UINT64_MAX) call = f->offset;
        }
        ckpt_scan_report_free(r);
        /* broken_model.pkl never reaches its REDUCE: no call */
        CHECK(global < n && (call == UINT64_MAX || (call >= global && call < n)));
        size_t unsafe_from = call < n ? call_end(buf, n, (size_t)call) : SIZE_MAX;
        int framed = n > 2 && buf[2] == 0x95;
        for (size_t cut = 0; cut <= n; cut++) {
            r = scan(buf, cut);
            ckpt_verdict v = ckpt_scan_verdict(r);
            if (cut >= unsafe_from && !framed && v != CKPT_VERDICT_UNSAFE) {
                fprintf(stderr, "  %s cut at %zu: %s\n", files[k], cut, ckpt_verdict_name(v));
                CHECK(0);
            }
            if (cut > global) CHECK(v != CKPT_VERDICT_SAFE);
            ckpt_scan_report_free(r);
        }
        free(buf);
    }
}

/* ------------------------------------------------------------ families */

/* torch >= 2.6's weights_only verdict: the first global off torch's
 * allowlist or opcode outside its protocol 2 set, at its offset; in a zip
 * only ARCHIVE/data.pkl counts; no safety finding, the verdict stays. */
static void expect_wo(const uint8_t *p, size_t n, const char *global, const char *opcode,
                      uint64_t offset, const char *member) {
    ckpt_scan_report *r = scan(p, n);
    ckpt_weights_only w;
    int refused = ckpt_scan_weights_only(r, &w);
    CHECK_EQ_INT(refused, global || opcode);
    CHECK_EQ_INT(w.refused, refused);
    if (global) CHECK_EQ_STR(w.global, global);
    if (opcode) CHECK_EQ_STR(w.opcode, opcode);
    CHECK(!global || !w.opcode);
    CHECK(refused || w.message == NULL);
    CHECK(w.offset == (refused ? offset : UINT64_MAX));
    CHECK_EQ_STR(w.member, refused ? member : "");
    if (refused) CHECK(strstr(w.message, "torch.load(weights_only=True) of torch >= 2.6 refuses"));
    ckpt_scan_report_free(r);
}

TEST(weights_only_verdict) {
    /* a numpy scalar after a dict and a str: safe, refused at its GLOBAL */
    static const uint8_t np[] = "\x80\x02}q\x00X\x03\x00\x00\x00"
                                "acc"
                                "cnumpy.core.multiarray\nscalar\nq\x01N\x85R.";
    CHECK_EQ_STR(verdict(S(np)), "safe");
    expect_wo(S(np), "numpy.core.multiarray.scalar", NULL, 13, "");
    /* OrderedDict, torch.Size, torch.device, set: allowed */
    expect_wo(S("\x80\x02"
                "ccollections\nOrderedDict\n)R"
                "ctorch\nSize\nK\x02\x85\x85R"
                "ctorch\ndevice\nX\x03\x00\x00\x00"
                "cpu\x85R"
                "cbuiltins\nset\n]\x85R\x87."),
              NULL, NULL, 0, NULL);
    /* dtype names as str(dtype) spells them, not aliases */
    expect_wo(S("\x80\x02"
                "ctorch\nbfloat16\n."),
              NULL, NULL, 0, NULL);
    expect_wo(S("\x80\x02"
                "ctorch\nfloat\n."),
              "torch.float", NULL, 2, "");
    /* builtins.dict is ckpt's builder, not torch's */
    expect_wo(S("\x80\x02"
                "cbuiltins\ndict\n)R."),
              "builtins.dict", NULL, 2, "");
    /* protocol 4: FRAME first */
    expect_wo(S("\x80\x04\x95\x03\x00\x00\x00\x00\x00\x00\x00}\x94."), NULL, "FRAME", 2, "");
    /* a protocol 0 pickle: text opcodes */
    expect_wo(S("(dp0\n."), NULL, "DICT", 1, "");
    /* a dotted qualname is looked up whole: torch.nn.parameter.Parameter */
    expect_wo(S("\x80\x02"
                "ctorch\nnn.parameter.Parameter\n."),
              NULL, NULL, 0, NULL);
    /* the numpy global in data.pkl of an archive, at its file offset; the
     * same bytes in another member are not what torch.load reads */
    uint8_t z[1024];
    zmember m = {.name = "archive/data.pkl", .data = np, .len = sizeof np - 1};
    size_t n = build_zip(z, NULL, 0, &m, 1);
    expect_wo(z, n, "numpy.core.multiarray.scalar", NULL, 30 + strlen(m.name) + 13,
              "archive/data.pkl");
    m.name = "archive/extra.pkl";
    n = build_zip(z, NULL, 0, &m, 1);
    expect_wo(z, n, NULL, NULL, 0, NULL);
    /* the advice: allowlist a data class; never a global that runs code
     * (it said "add_safe_globals([posix.system])") */
    ckpt_weights_only w;
    ckpt_scan_report *r = scan(S(np));
    CHECK_EQ_INT(ckpt_scan_weights_only(r, &w), 1);
    CHECK(strstr(w.message, "add_safe_globals([numpy.core.multiarray.scalar])") != NULL);
    ckpt_scan_report_free(r);
    r = scan(S("\x80\x02"
               "cposix\nsystem\nX\x02\x00\x00\x00id\x85R."));
    CHECK_EQ_INT(ckpt_scan_weights_only(r, &w), 1);
    CHECK_EQ_STR(w.global, "posix.system");
    CHECK(strstr(w.message, "add_safe_globals") == NULL);
    CHECK(strstr(w.message, "(it runs code: do not allowlist it or load with "
                            "weights_only=False)") != NULL);
    ckpt_scan_report_free(r);
}

/* What torch's weights_only unpickler checks on the value an opcode acts
 * on, before acting: an empty APPENDS or SETITEMS (a no-op to CPython) on
 * the wrong type, BUILD on a plain dict or an int, an OrderedDict's BUILD
 * from (state, slotstate), a persistent id that is not ("storage", ...),
 * SHORT_BINSTRING that is not UTF-8, REDUCE of a non-global; and what each
 * allows. The verdict stays safe: CPython loads them. */
TEST(weights_only_operands) {
    expect_wo(S("\x80\x02K\x01(e."), NULL, "APPENDS", 5, "");
    expect_wo(S("\x80\x02](K\x01e."), NULL, NULL, 0, NULL);
    expect_wo(S("\x80\x02](u."), NULL, "SETITEMS", 4, "");
    expect_wo(S("\x80\x02}(K\x01K\x02u."), NULL, NULL, 0, NULL);
    /* a scan builds no OrderedDict or Counter: known by the call's name */
    expect_wo(S("\x80\x02"
                "ccollections\nCounter\n)R(e."),
              NULL, "APPENDS", 26, "");
    expect_wo(S("\x80\x02"
                "ccollections\nCounter\n)R(K\x01K\x02u."),
              NULL, NULL, 0, NULL);
    expect_wo(S("\x80\x02}Nb."), NULL, "BUILD", 4, "");
    expect_wo(S("\x80\x02K\x01Nb."), NULL, "BUILD", 5, "");
    expect_wo(S("\x80\x02\x8fNb."), NULL, NULL, 0, NULL); /* set: allowed */
    expect_wo(S("\x80\x02"
                "ccollections\nOrderedDict\n)R}b."),
              NULL, NULL, 0, NULL);
    expect_wo(S("\x80\x02"
                "ccollections\nOrderedDict\n)RN}\x86"
                "b."),
              NULL, "BUILD", 32, "");
    expect_wo(S("\x80\x02X\x03\x00\x00\x00"
                "abcQ."),
              NULL, "BINPERSID", 10, "");
    expect_wo(S("\x80\x02U\x01\xff"
                "."),
              NULL, "SHORT_BINSTRING", 2, "");
    expect_wo(S("\x80\x02U\x01a."), NULL, NULL, 0, NULL);
    ckpt_scan_report *r = scan(S("\x80\x02K\x01(e."));
    ckpt_weights_only w;
    CHECK(ckpt_scan_weights_only(r, &w));
    CHECK(strstr(w.message, "opcode APPENDS at byte 5 (APPENDS extends only a list"));
    CHECK_EQ_STR(verdict(S("\x80\x02K\x01(e.")), "safe");
    ckpt_scan_report_free(r);
}

TEST(stack_global_from_memo) {
    /* MEMOIZE */
    expect_dangerous(S("\x80\x04\x8c\x02os\x94\x8c\x06system\x94h\x00h\x01\x93"
                       "\x8c\x02ls\x85R."),
                     "os.system");
    /* PUT and MEMOIZE mixed: memo[0] by PUT, memo[1] by MEMOIZE */
    expect_dangerous(S("\x80\x04Vos\np0\n0\x8c\x06system\x94\x30g0\nh\x01\x93"
                       "\x8c\x02ls\x85R."),
                     "os.system");
    /* decoys pushed and popped around, like the "zero-day memo" file */
    expect_dangerous(S("\x80\x04\x8c\x05torch\x94\x8c\x0bLongStorage\x94"
                       "\x8c\x02os\x94\x8c\x06system\x94"
                       "0000h\x02h\x03\x93"
                       "\x8c\x02ls\x85R."),
                     "os.system");
}

TEST(stack_global_operands_from_every_string_opcode) {
    static const struct {
        const char *os, *system;
        size_t los, lsystem;
    } ops[] = {
        {"S'os'\n", "S'system'\n", 6, 10},                         /* STRING */
        {"T\x02\x00\x00\x00os", "T\x06\x00\x00\x00system", 7, 11}, /* BINSTRING */
        {"U\x02os", "U\x06system", 4, 8},                          /* SHORT_BINSTRING */
        {"Vos\n", "Vsystem\n", 4, 8},                              /* UNICODE */
        {"X\x02\x00\x00\x00os", "X\x06\x00\x00\x00system", 7, 11}, /* BINUNICODE */
        {"\x8c\x02os", "\x8c\x06system", 4, 8},                    /* SHORT_BINUNICODE */
        {"\x8d\x02\x00\x00\x00\x00\x00\x00\x00os", "\x8d\x06\x00\x00\x00\x00\x00\x00\x00system", 11,
         15}, /* BINUNICODE8 */
    };
    static const char *const protos[] = {"", "\x80\x02", "\x80\x04", "\x80\x05"};
    for (size_t p = 0; p < 4; p++) {
        for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
            uint8_t buf[128];
            size_t n = 0, pl = strlen(protos[p]);
            memcpy(buf + n, protos[p], pl), n += pl;
            memcpy(buf + n, ops[i].os, ops[i].los), n += ops[i].los;
            memcpy(buf + n, ops[i].system, ops[i].lsystem), n += ops[i].lsystem;
            memcpy(buf + n, "\x93X\x02\x00\x00\x00ls\x85R.", 11), n += 11;
            expect_dangerous(buf, n, "os.system");
        }
    }
    /* BINBYTES operands: not str, so unknowable (symbolic) and dangerous */
    ckpt_scan_report *r = scan(S("\x80\x04"
                                 "B\x02\x00\x00\x00os"
                                 "C\x06system"
                                 "\x93)R."));
    CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "unsafe");
    const ckpt_finding *f = find(r, "global", NULL);
    CHECK(f && f->severity == CKPT_SEVERITY_DANGEROUS && f->global[0] == '?');
    ckpt_scan_report_free(r);
}

TEST(inst_obj_newobj_ext) {
    expect_dangerous(S("(S'ls'\nios\nsystem\n."), "os.system");  /* INST */
    expect_dangerous(S("(cos\nsystem\nS'ls'\no."), "os.system"); /* OBJ */
    expect_dangerous(S("\x80\x02"
                       "csubprocess\nPopen\n(S'ls'\ntp0\n\x81."),
                     "subprocess.Popen"); /* NEWOBJ */
    expect_dangerous(S("\x80\x04\x8c\nsubprocess\x8c\x05Popen\x93)}\x92."),
                     "subprocess.Popen"); /* NEWOBJ_EX */
    /* EXT1: the name lives in the unpickler's registry, unknowable here */
    ckpt_scan_report *r = scan(S("\x80\x02\x82\x01X\x02\x00\x00\x00ls\x85R."));
    CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "unsafe");
    const ckpt_finding *f = find(r, "global", NULL);
    CHECK(f && f->severity == CKPT_SEVERITY_DANGEROUS);
    ckpt_scan_report_free(r);
    /* a call hidden by POP still counts (fickling GHSA-mxhj-88fx-4pcv) */
    r = scan(S("\x80\x02"
               "cos\nsystem\nX\x02\x00\x00\x00ls\x85R0N."));
    const ckpt_finding *c = find(r, "call", "os.system");
    CHECK(c != NULL);
    if (c) CHECK_EQ_INT(c->offset, 21);
    ckpt_scan_report_free(r);
}

TEST(build_poisoning_and_names) {
    /* BUILD on the allowlisted OrderedDict class itself */
    ckpt_scan_report *r = scan(S("\x80\x02"
                                 "ccollections\nOrderedDict\n}S'x'\nNsb"
                                 "0N."));
    CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "unsafe");
    const ckpt_finding *f = find(r, "allowlist-poisoning", "collections.OrderedDict");
    CHECK(f && f->severity == CKPT_SEVERITY_DANGEROUS);
    if (f) CHECK_EQ_INT(f->offset, 35);
    ckpt_scan_report_free(r);
    /* BUILD on a module reference (torch._utils) */
    r = scan(S("\x80\x02"
               "ctorch\n_utils\n}S'_rebuild_tensor'\nS'eval'\nsb0N."));
    CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "unsafe");
    f = find(r, "allowlist-poisoning", "torch._utils");
    CHECK(f && f->severity == CKPT_SEVERITY_DANGEROUS);
    ckpt_scan_report_free(r);
    /* dotted qualname: judged on the full path, never by its first part */
    expect_dangerous(S("\x80\x02"
                       "ctorch._utils\n_rebuild_tensor_v2.__globals__\n."),
                     "torch._utils._rebuild_tensor_v2.__globals__");
    expect_dangerous(S("\x80\x04\x8c\x0ctorch._utils\x8c\x1e_rebuild_tensor_v2.__globals__"
                       "\x93."),
                     "torch._utils._rebuild_tensor_v2.__globals__");
    expect_dangerous(S("\x80\x02"
                       "ctorch\njit.load\n."),
                     "torch.jit.load");
    /* Python 2 names are mapped (protocol < 3) */
    expect_dangerous(S("c__builtin__\neval\n(S'1'\ntR."), "builtins.eval");
    expect_dangerous(S("\x80\x04\x8c\x0b__builtin__\x8c\x04"
                       "eval\x93."),
                     "__builtin__.eval");
    expect_dangerous(S("c__builtins__\nexec\n."), "__builtins__.exec");
    /* a module with "__" is suspicious at least */
    r = scan(S("\x80\x02"
               "c__main__\nModel\n)R."));
    CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "unsafe");
    f = find(r, "global", "__main__.Model");
    CHECK(f && f->severity == CKPT_SEVERITY_SUSPICIOUS);
    ckpt_scan_report_free(r);
    /* a submodule of a dangerous family (picklescan's asyncio fix) */
    expect_dangerous(S("casyncio.unix_events\n_UnixSubprocessTransport._start\n."),
                     "asyncio.unix_events._UnixSubprocessTransport._start");
}

/* Every BUILD on a global itself is poisoning, whatever the global; a
 * BUILD on an instance of an allowlisted class is not. */
TEST(build_on_any_reference) {
    /* builtins.int, not allowlisted, through STACK_GLOBAL from the memo */
    ckpt_scan_report *r = scan(S("\x80\x04\x8c\x08"
                                 "builtins\x94\x8c\x03"
                                 "int\x94"
                                 "h\x00h\x01\x93}\x8c\x01x\x94Nsb0N."));
    CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "unsafe");
    const ckpt_finding *f = find(r, "allowlist-poisoning", "builtins.int");
    CHECK(f && f->severity == CKPT_SEVERITY_DANGEROUS);
    if (f) CHECK_EQ_INT(f->offset, 31);
    CHECK(find(r, "build", NULL) == NULL);
    ckpt_scan_report_free(r);
    /* a symbolic reference (STACK_GLOBAL on an int module) */
    r = scan(S("\x80\x04K\x01\x8c\x01x\x93}b0N."));
    f = find(r, "allowlist-poisoning", "?.x");
    CHECK(f && f->severity == CKPT_SEVERITY_DANGEROUS);
    if (f) CHECK_EQ_INT(f->offset, 9);
    ckpt_scan_report_free(r);
    /* OrderedDict() then BUILD: state of an instance, safe */
    r = scan(S("\x80\x02"
               "ccollections\nOrderedDict\n)R}b."));
    CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "safe");
    CHECK_EQ_INT(ckpt_scan_finding_count(r), 0);
    ckpt_scan_report_free(r);
}

TEST(invalid_memo_and_type_confusion) {
    /* a GET of a memo key never stored: never safe, never a crash */
    CHECK_EQ_STR(verdict(S("\x80\x02h\x05.")), "unscannable");
    CHECK_EQ_STR(verdict(S("\x80\x04\x8c\x02os\x94h\x07\x93.")), "unscannable");
    CHECK_EQ_STR(verdict(S("\x80\x04\x8c\x02os\x94j\xff\xff\xff\xff\x93.")), "unscannable");
    /* after the dangerous global, the bad GET keeps it unsafe */
    CHECK_EQ_STR(verdict(S("cos\nsystem\nh\x09R.")), "unsafe");
    /* an int where a module name should be */
    ckpt_scan_report *r = scan(S("\x80\x04K\x01\x94\x8c\x06system\x94h\x00h\x01\x93"
                                 "\x8c\x02ls\x85R."));
    CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "unsafe");
    const ckpt_finding *f = find(r, "global", "?.system");
    CHECK(f && f->severity == CKPT_SEVERITY_DANGEROUS);
    ckpt_scan_report_free(r);
    /* a broken stream with only allowlisted globals */
    r = scan(S("\x80\x02"
               "ccollections\nOrderedDict\n)R\x00."));
    CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "unscannable");
    f = find(r, "parse-error", NULL);
    CHECK(f && f->offset == 29);
    ckpt_scan_report_free(r);
}

TEST(streams_and_trailing_bytes) {
    uint8_t buf[256];
    /* two streams, the second malicious */
    memcpy(buf, BENIGN, BENIGN_LEN);
    memcpy(buf + BENIGN_LEN, EVIL, EVIL_LEN);
    ckpt_scan_report *r = scan(buf, BENIGN_LEN + EVIL_LEN);
    CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "unsafe");
    const ckpt_finding *f = find(r, "global", "os.system");
    CHECK(f && f->offset == BENIGN_LEN + 2);
    f = find(r, "trailing-bytes", NULL);
    CHECK(f && f->offset == BENIGN_LEN && f->severity == CKPT_SEVERITY_INFO);
    ckpt_scan_report_free(r);
    /* junk after STOP: reported, nothing to run */
    memcpy(buf + BENIGN_LEN, "\x00\x01junk\n", 7);
    r = scan(buf, BENIGN_LEN + 7);
    CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "safe");
    CHECK(find(r, "trailing-bytes", NULL) != NULL);
    ckpt_scan_report_free(r);
    /* junk that looks like a pickle start but does not parse */
    memcpy(buf + BENIGN_LEN, "(hello", 6);
    CHECK_EQ_STR(verdict(buf, BENIGN_LEN + 6), "safe");
}

/* torch's legacy magic 0x1950a86a20f9469cfc6c as LONG1, and the protocol
 * version 1001 */
#define MAGIC "\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19."
#define VERSION "\x80\x02M\xe9\x03."

/* Streams some loader unpickles are never dropped when they break
 * (issue 11, class 2); guessed-at ones are. */
TEST(loaded_streams_never_dropped) {
    uint8_t buf[512];
    /* a file without PROTO breaking on operand syntax before any global:
     * torch.load reads a non-zip file as a pickle */
    ckpt_scan_report *r = scan(S("I08\n(S'ls'\nios\nsystem\n."));
    CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "unscannable");
    const ckpt_finding *f = find(r, "parse-error", NULL);
    CHECK(f && f->offset == 0);
    ckpt_scan_report_free(r);
    /* ... but bytes every unpickler stops at are no pickle */
    CHECK_EQ_STR(verdict(S("N\x1a")), "not-a-checkpoint");
    CHECK_EQ_STR(verdict(S("NN")), "not-a-checkpoint");
    /* a legacy file whose sys_info stream breaks: torch unpickles it */
    size_t n = 0;
    memcpy(buf, MAGIC VERSION "hello", sizeof MAGIC VERSION "hello" - 1);
    n = sizeof MAGIC VERSION "hello" - 1;
    r = scan(buf, n);
    CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "unscannable");
    f = find(r, "parse-error", NULL);
    CHECK(f && f->offset == sizeof MAGIC VERSION - 1);
    ckpt_scan_report_free(r);
    /* the magic as LONG text in hex is the magic: five streams, then blobs */
    CHECK_EQ_STR(verdict(S("L0x1950a86a20f9469cfc6cL\n." VERSION "}."
                           "N."
                           "}."
                           "cos\nsystem\n.")),
                 "safe");
    CHECK_EQ_STR(verdict(S("L0x1950a86a20f9469cfc6cL\n." VERSION "}."
                           "cos\nsystem\n.")),
                 "unsafe");
    /* a legacy stream whose STOP is inside a FRAME with bytes after it */
    r = scan(S(MAGIC "\x80\x04\x95\x05\x00\x00\x00\x00\x00\x00\x00M\xe9\x03.N"
                     "}."
                     "N."
                     "}."));
    CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "unscannable");
    CHECK(find(r, "parse-error", NULL) != NULL);
    ckpt_scan_report_free(r);
    /* a big int is data */
    memset(buf, 0x11, sizeof buf);
    memcpy(buf, "\x80\x02\x8b\x2c\x01\x00\x00", 7); /* LONG4 of 300 bytes */
    buf[7 + 300] = '.';
    r = scan(buf, 7 + 301);
    CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "safe");
    CHECK_EQ_INT(ckpt_scan_finding_count(r), 0);
    ckpt_scan_report_free(r);
}

/* A pickle whose one BINBYTES / str literal is `inner`. */
static size_t wrap_literal(uint8_t *out, uint8_t op, const uint8_t *inner, size_t n) {
    size_t k = 0;
    out[k++] = 0x80;
    out[k++] = 3;
    out[k++] = op;
    put32(out + k, (uint32_t)n);
    k += 4;
    memcpy(out + k, inner, n);
    k += n;
    out[k++] = '.';
    return k;
}

/* A pickle calling _pickle.loads on its one literal `inner`: the literal
 * starts at LOADS_AT + 5, the REDUCE is at LOADS_AT + 5 + n + 1. */
#define LOADS_AT (2 + 15)
static size_t wrap_call(uint8_t *out, uint8_t op, const uint8_t *inner, size_t n) {
    size_t k = wrap_literal(out, op, inner, n) - 1; /* without STOP */
    memmove(out + LOADS_AT, out + 2, k - 2);
    memcpy(out + 2, "c_pickle\nloads\n", 15);
    k += 15;
    memcpy(out + k, "\x85R.", 3);
    return k + 3;
}

static size_t base64(char *out, const uint8_t *p, size_t n) {
    static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t k = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) |
                     (i + 2 < n ? p[i + 2] : 0);
        out[k++] = a[v >> 18 & 63];
        out[k++] = a[v >> 12 & 63];
        out[k++] = i + 1 < n ? a[v >> 6 & 63] : '=';
        out[k++] = i + 2 < n ? a[v & 63] : '=';
    }
    return k;
}

/* Strings are data: only what an unpickling call receives is scanned as
 * a nested pickle (issue 11, class 7). */
TEST(nested_pickles) {
    uint8_t outer[1024], mid[512];
    char text[1024];
    /* a raw bytes literal alone is data, even when it holds a pickle */
    size_t n = wrap_literal(outer, 'B', (const uint8_t *)EVIL, EVIL_LEN);
    ckpt_scan_report *r = scan(outer, n);
    CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "safe");
    CHECK_EQ_INT(ckpt_scan_finding_count(r), 0);
    ckpt_scan_report_free(r);
    /* given to _pickle.loads: scanned, with exact offsets inside it */
    n = wrap_call(outer, 'B', (const uint8_t *)EVIL, EVIL_LEN);
    r = scan(outer, n);
    CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "unsafe");
    CHECK(find(r, "global", "_pickle.loads") != NULL);
    const ckpt_finding *f = find(r, "global", "os.system");
    CHECK(f && f->offset == LOADS_AT + 5 + 2 && strstr(f->message, "unpickling call") != NULL);
    ckpt_scan_report_free(r);
    /* base64 text: found at the call */
    size_t t = base64(text, (const uint8_t *)EVIL, EVIL_LEN);
    n = wrap_call(outer, 'X', (const uint8_t *)text, t);
    r = scan(outer, n);
    f = find(r, "global", "os.system");
    CHECK(f && f->offset == LOADS_AT + 5 + t + 1);
    ckpt_scan_report_free(r);
    n = wrap_literal(outer, 'X', (const uint8_t *)text, t);
    CHECK_EQ_STR(verdict(outer, n), "safe");
    /* hex text */
    for (size_t i = 0; i < EVIL_LEN; i++)
        snprintf(text + 2 * i, 3, "%02x", (unsigned)(uint8_t)EVIL[i]);
    n = wrap_call(outer, 'X', (const uint8_t *)text, 2 * EVIL_LEN);
    r = scan(outer, n);
    CHECK(find(r, "global", "os.system") != NULL);
    ckpt_scan_report_free(r);
    n = wrap_literal(outer, 'X', (const uint8_t *)text, 2 * EVIL_LEN);
    CHECK_EQ_STR(verdict(outer, n), "safe");
    /* latin-1 text of the bytes, as protocol 2 writes bytes */
    t = 0;
    for (size_t i = 0; i < EVIL_LEN; i++) {
        uint8_t c = (uint8_t)EVIL[i];
        if (c < 0x80)
            text[t++] = (char)c;
        else
            text[t++] = (char)(0xc0 | c >> 6), text[t++] = (char)(0x80 | (c & 0x3f));
    }
    n = wrap_call(outer, 'X', (const uint8_t *)text, t);
    r = scan(outer, n);
    CHECK(find(r, "global", "os.system") != NULL);
    ckpt_scan_report_free(r);
    /* two levels: base64 of a pickle that unpickles the malicious bytes */
    size_t m = wrap_call(mid, 'B', (const uint8_t *)EVIL, EVIL_LEN);
    t = base64(text, mid, m);
    n = wrap_call(outer, 'X', (const uint8_t *)text, t);
    r = scan(outer, n);
    CHECK(find(r, "global", "os.system") != NULL);
    ckpt_scan_report_free(r);
    ckpt_scan_options o = CKPT_SCAN_OPTIONS_INIT;
    o.max_nesting = 1; /* the inner one is past the limit: reported */
    r = scan_opts(outer, n, &o);
    CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "unsafe");
    CHECK(find(r, "nested-pickle", NULL) != NULL);
    CHECK(find(r, "global", "os.system") == NULL);
    ckpt_scan_report_free(r);
    /* ordinary text that merely starts like a pickle: nothing, even when
     * it would run as one ('(' MARK, 'N' NONE, 'o' OBJ calling None) */
    static const char *const texts[] = {"I like it.", "(Note: see the README).",
                                        "gASVAAAAAAAAAAB9lC4=", "80049500000000"};
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
        n = wrap_literal(outer, 'X', (const uint8_t *)texts[i], strlen(texts[i]));
        r = scan(outer, n);
        CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "safe");
        CHECK_EQ_INT(ckpt_scan_finding_count(r), 0);
        ckpt_scan_report_free(r);
    }
}

TEST(zip_tricks) {
    static uint8_t z[4096];
    zmember evil = {"archive/data.txt", NULL, (const uint8_t *)EVIL, EVIL_LEN, 0, 0, 0};
    /* a pickle under a name that is not .pkl */
    size_t n = build_zip(z, NULL, 0, &evil, 1);
    ckpt_scan_report *r = scan(z, n);
    CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "unsafe");
    const ckpt_finding *f = find(r, "global", "os.system");
    CHECK(f && !strcmp(f->member, "archive/data.txt") && f->offset == 30 + 16 + 2);
    ckpt_scan_report_free(r);
    /* storage bytes that start like a pickle and name a global, but do not
     * parse: no loader unpickles them, nothing is raised (issue 11) */
    static const uint8_t storage[] = "\x80\x02"
                                     "cos\nsystem\n"
                                     "\x01\x02\x03\xff\xfe";
    zmember blob = {"archive/data/0", NULL, storage, sizeof storage - 1, 0, 0, 0};
    n = build_zip(z, NULL, 0, &blob, 1);
    r = scan(z, n);
    CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "not-a-checkpoint");
    CHECK(find(r, "not-a-pickle", NULL) != NULL && find(r, "global", NULL) == NULL);
    ckpt_scan_report_free(r);
    /* ... while under a .pkl name they are a pickle that breaks */
    blob.name = "archive/data.pkl";
    n = build_zip(z, NULL, 0, &blob, 1);
    CHECK_EQ_STR(verdict(z, n), "unsafe");
    /* a polyglot prefix: found by the end record */
    n = build_zip(z, (const uint8_t *)"GIF89a-prefix", 13, &evil, 1);
    r = scan(z, n);
    CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "unsafe");
    CHECK(find(r, "polyglot", NULL) != NULL);
    f = find(r, "global", "os.system");
    CHECK(f && f->offset == 13 + 30 + 16 + 2);
    ckpt_scan_report_free(r);
    /* the prefix is a pickle too: torch.load would run it */
    n = build_zip(z, (const uint8_t *)BENIGN, BENIGN_LEN, &evil, 1);
    CHECK_EQ_STR(verdict(z, n), "unsafe");
    /* CRC mismatch, encryption bit, local/central name mismatch */
    zmember odd = evil;
    odd.bad_crc = 1;
    odd.flags = 0x41;
    odd.local_name = "archive/other.bin";
    n = build_zip(z, NULL, 0, &odd, 1);
    r = scan(z, n);
    CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "unsafe");
    CHECK(find(r, "crc-mismatch", NULL) && find(r, "zip-flags", NULL) &&
          find(r, "name-mismatch", NULL));
    ckpt_scan_report_free(r);
    /* an encrypted member that is no pickle: cannot be examined */
    zmember enc = {"archive/data.pkl", NULL, (const uint8_t *)"\x13\x99garbled", 9, 1, 0, 0};
    n = build_zip(z, NULL, 0, &enc, 1);
    CHECK_EQ_STR(verdict(z, n), "unscannable");
    /* deflated members are inflated; over the budget it is a bomb */
    zmember def = evil;
    def.deflate = 1;
    n = build_zip(z, NULL, 0, &def, 1);
    CHECK_EQ_STR(verdict(z, n), "unsafe");
    ckpt_scan_options o = CKPT_SCAN_OPTIONS_INIT;
    o.limits.max_inflate_bytes = 8;
    r = scan_opts(z, n, &o);
    CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "unscannable");
    CHECK(find(r, "unreadable-member", NULL) != NULL);
    ckpt_scan_report_free(r);
    /* a TorchScript archive: unsafe even with clean pickles */
    zmember ts[2] = {{"m/data.pkl", NULL, (const uint8_t *)BENIGN, BENIGN_LEN, 0, 0, 0},
                     {"m/constants.pkl", NULL, (const uint8_t *)"\x80\x02).", 4, 0, 0, 0}};
    n = build_zip(z, NULL, 0, ts, 2);
    r = scan(z, n);
    CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "unsafe");
    f = find(r, "torchscript", NULL);
    CHECK(f && f->severity == CKPT_SEVERITY_DANGEROUS && !strcmp(f->member, "m/constants.pkl"));
    ckpt_scan_report_free(r);
    /* a benign archive with a storage that starts like a pickle */
    zmember ok[2] = {
        {"m/data.pkl", NULL, (const uint8_t *)BENIGN, BENIGN_LEN, 0, 0, 0},
        {"m/data/0", NULL, (const uint8_t *)"\x80\x02\xff\xfe\x00\x00\x80?", 8, 0, 0, 0}};
    n = build_zip(z, NULL, 0, ok, 2);
    r = scan(z, n);
    CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "safe");
    CHECK(find(r, "not-a-pickle", NULL) != NULL);
    ckpt_scan_report_free(r);
}

TEST(truncated_malicious_never_safe) {
    /* cut anywhere after the GLOBAL (11 bytes): unsafe; before: never safe */
    static const char evil0[] = "cos\nsystem\n(S'touch /tmp/pwned'\ntR.";
    for (size_t cut = 0; cut < sizeof evil0; cut++) {
        ckpt_scan_report *r = scan((const uint8_t *)evil0, cut);
        ckpt_verdict v = ckpt_scan_verdict(r);
        CHECK(v != CKPT_VERDICT_SAFE);
        if (cut >= 11) CHECK_EQ_INT(v, CKPT_VERDICT_UNSAFE);
        ckpt_scan_report_free(r);
    }
    for (size_t cut = 13; cut <= EVIL_LEN; cut++)
        CHECK_EQ_STR(verdict((const uint8_t *)EVIL, cut), "unsafe");
}

/* Data-only classes (issue 11, class 8): verdict "review", named, safe
 * once allowed; never hiding a dangerous call elsewhere. */
TEST(review_data_classes) {
    static const char hp[] = "\x80\x02}(X\x02\x00\x00\x00hpcargparse\nNamespace\n)\x81}"
                             "X\x02\x00\x00\x00lrG?\xb9\x99\x99\x99\x99\x99\x9asb"
                             "X\x04\x00\x00\x00pathcpathlib\nPosixPath\nX\x01\x00\x00\x00"
                             "a\x85Ru.";
    ckpt_scan_report *r = scan(S(hp));
    CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "review");
    const ckpt_finding *f = find(r, "review", "argparse.Namespace");
    CHECK(f && f->severity == CKPT_SEVERITY_INFO && strstr(f->message, "data-only"));
    CHECK(find(r, "review", "pathlib.PosixPath") != NULL);
    CHECK(find(r, "build", NULL) == NULL && find(r, "call", NULL) == NULL);
    ckpt_scan_report_free(r);
    const char *allow[] = {"argparse.Namespace", "pathlib.PosixPath"};
    ckpt_scan_options o = CKPT_SCAN_OPTIONS_INIT;
    o.allow = allow;
    o.nallow = 2;
    r = scan_opts(S(hp), &o);
    CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "safe");
    ckpt_scan_report_free(r);
    o.nallow = 1; /* one left to review */
    CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r = scan_opts(S(hp), &o))), "review");
    ckpt_scan_report_free(r);
    /* an allowed data class next to os.system: unsafe */
    uint8_t buf[256];
    memcpy(buf, hp, sizeof hp - 2); /* without STOP */
    size_t n = sizeof hp - 2;
    static const char call[] = "0"
                               "cos\nsystem\n(S'ls'\ntR.";
    memcpy(buf + n, call, sizeof call - 1), n += sizeof call - 1;
    o.nallow = 2;
    r = scan_opts(buf, n, &o);
    CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "unsafe");
    CHECK(find(r, "call", "os.system") != NULL);
    ckpt_scan_report_free(r);
    /* pathlib beyond its path classes stays dangerous (file access) */
    CHECK_EQ_STR(verdict(S("\x80\x02"
                           "cpathlib\nPath.read_text\n.")),
                 "unsafe");
    CHECK_EQ_STR(verdict(S("\x80\x02"
                           "ctypes\nCodeType\n.")),
                 "unsafe");
    /* BUILD on the class itself is still allowlist poisoning */
    CHECK_EQ_STR(verdict(S("\x80\x02"
                           "cargparse\nNamespace\n}b.")),
                 "unsafe");
}

TEST(allowlist_policy) {
    static const char ns[] = "\x80\x02"
                             "capp\nConfig\n)\x81}X\x01\x00\x00\x00"
                             "aK\x01sb.";
    ckpt_scan_report *r = scan(S(ns));
    CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "unsafe");
    const ckpt_finding *f = find(r, "global", "app.Config");
    CHECK(f && f->severity == CKPT_SEVERITY_SUSPICIOUS);
    ckpt_scan_report_free(r);
    const char *allow[] = {"app.Config", "os.system"};
    ckpt_scan_options o = CKPT_SCAN_OPTIONS_INIT;
    o.allow = allow;
    o.nallow = 2;
    r = scan_opts(S(ns), &o);
    CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "safe");
    f = find(r, "allowed", "app.Config");
    CHECK(f && f->severity == CKPT_SEVERITY_INFO &&
          !strcmp(f->message, "allowed by policy: app.Config"));
    /* the refused entry is said to be ignored, and is no global of the file */
    f = find(r, "allow-ignored", "os.system");
    CHECK(f && f->severity == CKPT_SEVERITY_INFO &&
          !strcmp(f->message, "--allow os.system ignored: a known dangerous family "
                              "(process control, the interpreter, imports) cannot be "
                              "allowlisted"));
    CHECK_EQ_INT(ckpt_scan_finding_count(r), 2);
    CHECK_EQ_INT(ckpt_scan_global_count(r), 1);
    ckpt_scan_report_free(r);
    /* builtins.eval, given twice: one finding, in the words of the CLI */
    const char *evals[] = {"builtins.eval", "builtins.eval", "app.Config"};
    o.allow = evals;
    o.nallow = 3;
    r = scan_opts(S(ns), &o);
    CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "safe");
    f = find(r, "allow-ignored", NULL);
    CHECK(f && !strcmp(f->message, "--allow builtins.eval ignored: a known "
                                   "code-execution family cannot be allowlisted"));
    CHECK_EQ_INT(ckpt_scan_finding_count(r), 2);
    ckpt_scan_report_free(r);
    o.allow = allow;
    o.nallow = 2;
    /* a known code-execution family cannot be allowed */
    r = scan_opts((const uint8_t *)EVIL, EVIL_LEN, &o);
    CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "unsafe");
    ckpt_scan_report_free(r);
    /* exact names only */
    allow[0] = "app";
    r = scan_opts(S(ns), &o);
    CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "unsafe");
    ckpt_scan_report_free(r);
    o.allow = NULL;
    ckpt_scan_report *none = NULL;
    CHECK_EQ_INT(ckpt_scan_memory(&none, S(ns), "x", &o), CKPT_E_INVALID_ARG);
    CHECK(none == NULL);
}

/* Each dangerous family is named for what it reaches; articles agree. */
TEST(family_wording) {
    static const struct {
        const uint8_t *pickle;
        size_t len;
        const char *global, *why;
    } t[] = {
        {S("\x80\x02"
           "cbuiltins\neval\n."),
         "builtins.eval", ": a known code-execution family"},
        {S("\x80\x02"
           "csys\nexit\n."),
         "sys.exit", ": a known dangerous family (process control, the interpreter, imports)"},
        {S("\x80\x02"
           "crequests.api\nget\n."),
         "requests.api.get", ": a known dangerous family (network access)"},
        {S("\x80\x02"
           "chttp.client\nHTTPSConnection\n."),
         "http.client.HTTPSConnection", ": a known dangerous family (network access)"},
        {S("\x80\x02"
           "cshutil\nrmtree\n."),
         "shutil.rmtree", ": a known dangerous family (file access)"},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        ckpt_scan_report *r = scan(t[i].pickle, t[i].len);
        const ckpt_finding *f = find(r, "global", t[i].global);
        CHECK(f && f->severity == CKPT_SEVERITY_DANGEROUS);
        if (f) CHECK(strstr(f->message, t[i].why) != NULL);
        if (f && !strstr(f->message, t[i].why)) fprintf(stderr, "  %s\n", f->message);
        ckpt_scan_report_free(r);
    }
    /* BUILD on an instance: "an app.Config object" */
    ckpt_scan_report *r = scan(S("\x80\x02"
                                 "capp\nConfig\n)\x81}X\x01\x00\x00\x00"
                                 "aK\x01sb."));
    const ckpt_finding *f = find(r, "build", "app.Config");
    CHECK(f && strncmp(f->message, "BUILD sets the state of an app.Config object", 44) == 0);
    ckpt_scan_report_free(r);
    r = scan(S("\x80\x02"
               "cfoo\nBar\n)\x81}b."));
    f = find(r, "build", "foo.Bar");
    CHECK(f && strncmp(f->message, "BUILD sets the state of a foo.Bar object", 40) == 0);
    ckpt_scan_report_free(r);
}

/* Writes len bytes to dir/name. */
static void put_file(const char *dir, const char *name, const void *p, size_t len) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *fp = fopen(path, "wb");
    CHECK(fp && fwrite(p, 1, len, fp) == len);
    if (fp) fclose(fp);
}

static ckpt_scan_report *scan_path(const char *dir, const char *name) {
    char path[512];
    ckpt_scan_report *r = NULL;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    CHECK_EQ_INT(ckpt_scan(&r, path, NULL), 0);
    return r;
}

/* A sharded index is as safe as the shards its weight_map lists. */
TEST(sharded_index_corpus) {
    ckpt_scan_report *r = NULL;
    CHECK_EQ_INT(ckpt_scan(&r,
                           CKPT_CORPUS "/safetensors/fluxml/sharded/"
                                       "model.safetensors.index.json",
                           NULL),
                 0);
    CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "safe");
    const ckpt_finding *f = find(r, "sharded-index", NULL);
    CHECK(f && strstr(f->message, "its 6 shard files were scanned") != NULL);
    CHECK_EQ_INT(ckpt_scan_finding_count(r), 1);
    ckpt_scan_report_free(r);
}

TEST(sharded_index) {
    ckpt_scan_report *r = NULL;
    const ckpt_finding *f;
    char dir[] = "/tmp/ckpt-test-scan-XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(0);
        return;
    }
    static const char st[] = "\x36\0\0\0\0\0\0\0"
                             "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}"
                             "\0\0\x80?";
    put_file(dir, "a.safetensors", st, sizeof st - 1);
    put_file(dir, "b.bin", EVIL, EVIL_LEN);
    static const char good[] = "{\"weight_map\": {\"w\": \"a.safetensors\", "
                               "\"v\": \"a.safetensors\"}}";
    put_file(dir, "good.index.json", good, sizeof good - 1);
    r = scan_path(dir, "good.index.json");
    CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "safe");
    ckpt_scan_report_free(r);
    /* a pytorch_model.bin.index.json: torch.load runs each shard */
    static const char evil[] = "{\"weight_map\": {\"w\": \"a.safetensors\", "
                               "\"v\": \"b.bin\"}}";
    put_file(dir, "evil.index.json", evil, sizeof evil - 1);
    r = scan_path(dir, "evil.index.json");
    CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "unsafe");
    f = find(r, "global", "os.system");
    CHECK(f && !strcmp(f->member, "b.bin") && f->offset == 2);
    /* the shards it reached, each once */
    CHECK_EQ_INT(ckpt_scan_shard_count(r), 2);
    CHECK_EQ_STR(ckpt_scan_shard(r, 0), "a.safetensors");
    CHECK_EQ_STR(ckpt_scan_shard(r, 1), "b.bin");
    CHECK(ckpt_scan_shard(r, 2) == NULL);
    ckpt_scan_report_free(r);
    /* a safetensors shard whose header length starts like a pickle
     * (0x0280: PROTO 2) is scanned as the file it is, alone or as a
     * shard: no "not-a-pickle" finding (the shard got one) */
    {
        static const char head[] = "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],"
                                   "\"data_offsets\":[0,4]}}";
        unsigned char pst[8 + 0x280 + 4];
        memset(pst, ' ', sizeof pst);
        memcpy(pst, "\x80\x02\0\0\0\0\0\0", 8);
        memcpy(pst + 8, head, sizeof head - 1);
        memcpy(pst + 8 + 0x280, "\0\0\x80?", 4);
        put_file(dir, "p.safetensors", pst, sizeof pst);
        static const char pix[] = "{\"weight_map\": {\"w\": \"p.safetensors\"}}";
        put_file(dir, "p.index.json", pix, sizeof pix - 1);
        static const char *const names[] = {"p.safetensors", "p.index.json"};
        for (size_t i = 0; i < 2; i++) {
            r = scan_path(dir, names[i]);
            CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "safe");
            CHECK(find(r, "not-a-pickle", NULL) == NULL);
            CHECK_EQ_INT(ckpt_scan_finding_count(r), i); /* the index: "sharded-index" */
            ckpt_scan_report_free(r);
        }
    }
    r = scan_path(dir, "b.bin"); /* no index: no shards */
    CHECK_EQ_INT(ckpt_scan_shard_count(r), 0);
    ckpt_scan_report_free(r);
    /* a shard that does not exist holds no code: the index stays safe,
     * the shard named (a stale index, such as the .bak convert --backup
     * keeps; it was unscannable); one beside it is still scanned */
    static const char stale[] = "{\"weight_map\": {\"w\": \"gone.safetensors\", "
                                "\"v\": \"b.bin\", \"u\": \"a.safetensors\"}}";
    put_file(dir, "stale.index.json", stale, sizeof stale - 1);
    r = scan_path(dir, "stale.index.json");
    CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "unsafe");
    f = find(r, "shard-missing", NULL);
    CHECK(f && !strcmp(f->member, "gone.safetensors"));
    CHECK(find(r, "shard-unreadable", NULL) == NULL);
    ckpt_scan_report_free(r);
    static const char gone[] = "{\"weight_map\": {\"w\": \"gone.safetensors\", "
                               "\"u\": \"a.safetensors\"}}";
    put_file(dir, "stale.index.json", gone, sizeof gone - 1);
    r = scan_path(dir, "stale.index.json");
    CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "safe");
    CHECK(find(r, "shard-missing", NULL) != NULL);
    CHECK_EQ_INT(ckpt_scan_shard_count(r), 1);
    ckpt_scan_report_free(r);
    /* a shard that cannot be read (a directory), outside the directory,
     * not a checkpoint */
    char sub[600];
    snprintf(sub, sizeof sub, "%s/sub.safetensors", dir);
    CHECK(mkdir(sub, 0700) == 0);
    static const char *const bad[] = {
        "{\"weight_map\": {\"w\": \"sub.safetensors\"}}",
        "{\"weight_map\": {\"w\": \"../x.safetensors\"}}",
        "{\"weight_map\": {\"w\": \"/etc/passwd\"}}",
        "{\"weight_map\": {\"w\": 7}}",
        "{\"weight_map\": {\"w\": \"good.index.json\"}}",
        "{\"weight_map\": {\"w\": \"empty.bin\"}}",
    };
    static const char *const kind[] = {"shard-unreadable", "shard-name",  "shard-name",
                                       "shard-name",       "index-error", "shard-not-a-checkpoint"};
    put_file(dir, "empty.bin", "", 0);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        put_file(dir, "bad.index.json", bad[i], strlen(bad[i]));
        r = scan_path(dir, "bad.index.json");
        CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "unscannable");
        if (!find(r, kind[i], NULL)) fprintf(stderr, "  no %s for %s\n", kind[i], bad[i]);
        CHECK(find(r, kind[i], NULL) != NULL);
        ckpt_scan_report_free(r);
    }
    /* from memory the shards cannot be reached: the buffer alone holds
     * no checkpoint content, and the report says the shards were not
     * scanned */
    r = scan((const uint8_t *)good, sizeof good - 1);
    CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "not-a-checkpoint");
    f = find(r, "sharded-index", NULL);
    CHECK(f && strstr(f->message, "which are not scanned") != NULL);
    ckpt_scan_report_free(r);
    /* JSON that is no index, and text that is no JSON */
    r = scan(S("{\"a\": 1}"));
    CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "not-a-checkpoint");
    CHECK(find(r, "not-an-index", NULL) != NULL);
    ckpt_scan_report_free(r);
    CHECK_EQ_STR(verdict(S("{ not json")), "not-a-checkpoint");
    static const char *const files[] = {"a.safetensors",   "b.bin",          "good.index.json",
                                        "evil.index.json", "bad.index.json", "empty.bin",
                                        "p.safetensors",   "p.index.json",   "stale.index.json"};
    char path[512];
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        unlink(path);
    }
    rmdir(sub);
    rmdir(dir);
}

/* numpy scalars and arrays are built, not called: safe. */
TEST(numpy_is_safe) {
    /* pickle.dumps({'s': np.float64(1.5), 'a': np.arange(3, dtype=np.int32)},
     * protocol=2) with numpy 1.24 */
    static const char np[] =
        "\200\002}q\000(X\001\000\000\000sq\001cnumpy.core.multiarray\nscalar\nq\002c"
        "numpy\ndtype\nq\003X\002\000\000\000f8q\004\211\210\207q\005Rq\006(K\003X"
        "\001\000\000\000<q\007NNNJ\377\377\377\377J\377\377\377\377K\000tq\010bc_cod"
        "ecs\nencode\nq\011X\011\000\000\000\000\000\000\000\000\000\303\270\077q\nX"
        "\006\000\000\000latin1q\013\206q\014Rq\015\206q\016Rq\017X\001\000\000\000aq"
        "\020cnumpy.core.multiarray\n_reconstruct\nq\021cnumpy\nndarray\nq\022K\000"
        "\205q\023h\011X\001\000\000\000bq\024h\013\206q\025Rq\026\207q\027Rq\030(K"
        "\001K\003\205q\031h\003X\002\000\000\000i4q\032\211\210\207q\033Rq\034(K\003"
        "h\007NNNJ\377\377\377\377J\377\377\377\377K\000tq\035b\211h\011X\014\000\000"
        "\000\000\000\000\000\001\000\000\000\002\000\000\000q\036h\013\206q\037Rq tq"
        "!bu.";
    ckpt_scan_report *r = scan(S(np));
    CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "safe");
    CHECK_EQ_INT(ckpt_scan_finding_count(r), 0);
    CHECK_EQ_INT(ckpt_scan_global_count(r), 5);
    CHECK_EQ_STR(ckpt_scan_global(r, 0), "_codecs.encode");
    ckpt_scan_report_free(r);
}

TEST(other_formats) {
    CHECK_EQ_STR(verdict(S("")), "not-a-checkpoint");
    CHECK_EQ_STR(verdict(S("\x89PNG\r\n\x1a\n\0\0\0\rIHDR")), "not-a-checkpoint");
    CHECK_EQ_STR(verdict(S("{\"weight_map\": {}}")), "not-a-checkpoint");
    CHECK_EQ_STR(verdict(S("7z\xbc\xaf\x27\x1c\0\4")), "unscannable");
    CHECK_EQ_STR(verdict(S("\x1f\x8b\x08\0\0\0\0\0")), "unscannable");
    /* joblib.load decompresses these and unpickles the result: a zlib
     * (compress=3: 78 5E) or LZMA-alone pickle of os.system was
     * not-a-checkpoint, exit 0 in a folder */
    CHECK_EQ_STR(verdict(S("\x78\x5e\x6b\x60\x99\x5a\xc4\x00")), "unscannable");
    CHECK_EQ_STR(verdict(S("\x78\x9c\x6b\x60\x99\x5a\xc4\x00")), "unscannable");
    CHECK_EQ_STR(verdict(S("\x5d\x00\x00\x80\x00\xff\xff\xff")), "unscannable");
    CHECK_EQ_STR(verdict(S("\x04\x22\x4d\x18\x64\x40\xa7\x00")), "unscannable");
    CHECK_EQ_STR(verdict(S("ZF0x1a               \x78\x9c")), "unscannable");
    CHECK_EQ_STR(verdict(S("ZFrench text")), "not-a-checkpoint");
    CHECK_EQ_STR(verdict(S("x^2 + y^2")), "unscannable"); /* a zlib header: said */
    CHECK_EQ_STR(verdict(S("x = 1\n")), "not-a-checkpoint");
    /* safetensors: safe when the header validates */
    static const char st[] = "\x36\0\0\0\0\0\0\0"
                             "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}"
                             "\0\0\x80?";
    CHECK_EQ_STR(verdict(S(st)), "safe");
    /* a safetensors header 376 bytes long starts 78 01 00..., one of 93
     * 5D 00 00...: no zlib or LZMA stream joblib reads (stored block
     * lengths 0 and 0; a range coder's first byte not 0), safe; they were
     * unscannable. A stored block whose lengths agree stays one. */
    static const unsigned hlens[] = {0x178, 0x9c78, 0xda78, 0x5d};
    for (size_t i = 0; i < sizeof hlens / sizeof *hlens; i++) {
        static uint8_t b[8 + 0xda78 + 1];
        static const char h[] = "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}";
        memset(b, ' ', sizeof b);
        for (int k = 0; k < 8; k++) b[k] = (uint8_t)((uint64_t)hlens[i] >> (8 * k));
        memcpy(b + 8, h, sizeof h - 1);
        b[8 + hlens[i]] = 7;
        CHECK_EQ_STR(verdict(b, 8 + hlens[i] + 1), "safe");
    }
    CHECK_EQ_STR(verdict(S("\x78\x01\x01\x02\x00\xfd\xff\x80\x02")), "unscannable");
    CHECK_EQ_STR(verdict(S("\x78\x01\x06\x00\x00\x00\x00")), "not-a-checkpoint");
    CHECK_EQ_STR(verdict(S("\x5d\x00\x00\x80\x00\xff\xff\xff\xff\xff\xff\xff\xff\x00")),
                 "unscannable");
    char bad[sizeof st];
    memcpy(bad, st, sizeof st);
    memcpy(bad + 8 + 50, "8]", 2); /* data_offsets [0,8] past the end */
    ckpt_scan_report *r = scan((const uint8_t *)bad, sizeof st - 1);
    CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "unscannable");
    CHECK(find(r, "safetensors-error", NULL) != NULL);
    ckpt_scan_report_free(r);
    /* numpy .npy: numbers are safe, object arrays hold a pickle */
    static const char npy[] =
        "\x93NUMPY\x01\x00\x39\x00{'descr': '|O', 'fortran_order': False, 'shape': (1,), }\n";
    uint8_t buf[256];
    memcpy(buf, npy, sizeof npy - 1);
    memcpy(buf + sizeof npy - 1, EVIL, EVIL_LEN);
    CHECK_EQ_STR(verdict(buf, sizeof npy - 1 + EVIL_LEN), "unsafe");
    memcpy(buf + 21, "f4", 2);
    CHECK_EQ_STR(verdict(buf, sizeof npy - 1 + EVIL_LEN), "safe");
    /* without fortran_order np.load raises before reading the data */
    memcpy(buf + 21, "|O", 2);
    memcpy(buf + 26, "'fortran_ordeR'", 15);
    r = scan(buf, sizeof npy - 1 + EVIL_LEN);
    CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "safe");
    const ckpt_finding *nf = find(r, "npy-refused", NULL);
    CHECK(nf && nf->offset == 26);
    ckpt_scan_report_free(r);
    /* path errors */
    CHECK_EQ_INT(ckpt_scan(&r, CKPT_CORPUS "/no/such/file.pt", NULL), CKPT_E_IO);
    CHECK(r == NULL);
    CHECK_EQ_INT(ckpt_scan(&r, CKPT_CORPUS, NULL), CKPT_E_IO);
    CHECK_EQ_INT(ckpt_scan(NULL, CKPT_CORPUS, NULL), CKPT_E_INVALID_ARG);
    CHECK_EQ_INT(ckpt_scan_verdict(NULL), CKPT_VERDICT_UNSCANNABLE);
    CHECK_EQ_STR(ckpt_verdict_name(CKPT_VERDICT_NOT_A_CHECKPOINT), "not-a-checkpoint");
    CHECK_EQ_STR(ckpt_severity_name(CKPT_SEVERITY_SUSPICIOUS), "suspicious");
}

/* A zip inside the archive (model.pt zipped for download): its members
 * are scanned, stored or deflated, named "OUTER:INNER"; past 4 levels the
 * file is unscannable. A hostile inner zip was NOT-A-CHECKPOINT. */
TEST(nested_zips) {
    static uint8_t a[4096], b[4096];
    zmember m = {.name = "m.pkl", .data = (const uint8_t *)EVIL, .len = EVIL_LEN};
    size_t n = build_zip(a, NULL, 0, &m, 1);
    for (int deflate = 0; deflate < 2; deflate++) {
        zmember o = {.name = "inner.zip", .data = a, .len = n, .deflate = deflate};
        size_t on = build_zip(b, NULL, 0, &o, 1);
        ckpt_scan_report *r = scan(b, on);
        CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "unsafe");
        const ckpt_finding *f = find(r, "global", "os.system");
        CHECK(f && strcmp(f->member, "inner.zip:m.pkl") == 0);
        /* stored or deflated: the offset inside inner.zip as extracted
         * (30 + "m.pkl", then the pickle's global), where `unzip -p
         * OUTER inner.zip` has the bytes; deflated, it was the inner
         * zip's data in the file (39), the same for every finding */
        CHECK(f && f->offset == 30 + 5 + 2);
        ckpt_scan_report_free(r);
    }
    m.data = (const uint8_t *)BENIGN;
    m.len = BENIGN_LEN;
    n = build_zip(a, NULL, 0, &m, 1);
    zmember o = {.name = "inner.zip", .data = a, .len = n};
    CHECK_EQ_STR(verdict(b, build_zip(b, NULL, 0, &o, 1)), "safe");
    /* tensor bytes that start like a zip but read as none: data */
    zmember t[2] = {{.name = "a/data.pkl", .data = (const uint8_t *)BENIGN, .len = BENIGN_LEN},
                    {.name = "a/data/0", .data = (const uint8_t *)"PK\3\4\0\0\0\0", .len = 8}};
    CHECK_EQ_STR(verdict(b, build_zip(b, NULL, 0, t, 2)), "safe");
    /* five levels: the innermost is not read */
    for (int level = 0; level < 5; level++) {
        zmember w = {.name = "z.zip", .data = a, .len = n};
        n = build_zip(b, NULL, 0, &w, 1);
        memcpy(a, b, n);
    }
    ckpt_scan_report *r = scan(a, n);
    CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "unscannable");
    CHECK(find(r, "nested-zip", NULL) != NULL);
    ckpt_scan_report_free(r);
}

/* A V7 tar header at tar[at] for `name` holding data[0..n); returns the
 * offset after its data blocks. */
static size_t tar_member(uint8_t *tar, size_t at, const char *name, const void *data, size_t n) {
    uint8_t *h = tar + at;
    memset(h, 0, 512);
    memcpy(h, name, strlen(name));
    snprintf((char *)h + 100, 8, "%07o", 0644);
    snprintf((char *)h + 124, 12, "%011zo", n);
    h[156] = '0';
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (size_t i = 0; i < 512; i++) sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum);
    memset(h + 512, 0, (n + 511) / 512 * 512);
    memcpy(h + 512, data, n);
    return at + 512 + (n + 511) / 512 * 512;
}

/* A tar's members besides storages/tensors/pickle: a pickle among them
 * (model.pkl, as joblib or pickle.load reads it once extracted) was SAFE
 * ('tar-stops' at "storages"), where zip members are scanned and
 * modelaudit flags it. */
TEST(tar_members) {
    static uint8_t tar[8192];
    memset(tar, 0, sizeof tar);
    size_t n = tar_member(tar, 0, "model.pkl", EVIL, EVIL_LEN);
    n += 1024;
    expect_dangerous(tar, n, "os.system");
    /* found by content under any name, after a benign member */
    n = tar_member(tar, 0, "sys_info", BENIGN, BENIGN_LEN);
    n = tar_member(tar, n, "blob", EVIL, EVIL_LEN);
    n += 1024;
    expect_dangerous(tar, n, "os.system");
    /* text and benign pickles: safe */
    n = tar_member(tar, 0, "sys_info", BENIGN, BENIGN_LEN);
    n = tar_member(tar, n, "README", "weights\n", 8);
    n += 1024;
    ckpt_scan_report *r = scan(tar, n);
    CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "safe");
    CHECK(find(r, "tar-stops", NULL) != NULL);
    ckpt_scan_report_free(r);
    /* a zip holding that tar with model.pkl (stored or deflated):
     * extracted, torch.load or pickle.load runs it; it was
     * NOT-A-CHECKPOINT. A tar of a benign pickle in a zip is safe. */
    static uint8_t z[16384];
    n = tar_member(tar, 0, "model.pkl", EVIL, EVIL_LEN) + 1024;
    for (int deflate = 0; deflate < 2; deflate++) {
        zmember m = {.name = "model.tar", .data = tar, .len = n, .deflate = deflate};
        r = scan(z, build_zip(z, NULL, 0, &m, 1));
        CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "unsafe");
        const ckpt_finding *f = find(r, "global", "os.system");
        /* stored or deflated: the offset inside the tar as extracted
         * (its header, then the pickle's global), where the bytes are */
        CHECK(f && strcmp(f->member, "model.tar:model.pkl") == 0 && f->offset == 512u + 2);
        ckpt_scan_report_free(r);
    }
    n = tar_member(tar, 0, "model.pkl", BENIGN, BENIGN_LEN) + 1024;
    zmember m = {.name = "model.tar", .data = tar, .len = n};
    CHECK_EQ_STR(verdict(z, build_zip(z, NULL, 0, &m, 1)), "safe");
}

/* Repeats are counted in one finding; past 10000 distinct findings the
 * rest are summed up in a last one; very long names are dangerous. */
TEST(finding_bounds) {
    static uint8_t buf[400000];
    size_t n = 0;
    buf[n++] = 0x80, buf[n++] = 2;
    for (int i = 0; i < 3; i++) n += (size_t)sprintf((char *)buf + n, "capp\nConfig\n0");
    for (int i = 0; i < 10005; i++) n += (size_t)sprintf((char *)buf + n, "cmod\nf%d\n0", i);
    buf[n++] = 'N', buf[n++] = '.';
    ckpt_scan_report *r = scan(buf, n);
    CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "unsafe");
    CHECK_EQ_INT(ckpt_scan_finding_count(r), 10001);
    CHECK_EQ_INT(ckpt_scan_global_count(r), 10006);
    const ckpt_finding *f = find(r, "global", "app.Config");
    CHECK(f && f->offset == 2 && strstr(f->message, "(seen 3 times)"));
    f = ckpt_scan_finding(r, 10000);
    CHECK(f && !strcmp(f->kind, "truncated") && strstr(f->message, "6 more"));
    ckpt_scan_report_free(r);

    n = 0;
    memcpy(buf, "cmod\n", 5), n = 5;
    memset(buf + n, 'a', 300), n += 300;
    memcpy(buf + n, "\n.", 2), n += 2;
    r = scan(buf, n);
    f = find(r, "global", NULL);
    CHECK(f && f->severity == CKPT_SEVERITY_DANGEROUS &&
          strlen(f->global) == 3 + 1 + 253 + 3); /* cut at 256, then "..." */
    ckpt_scan_report_free(r);

    /* an --allow of a name of exactly 256 bytes never covers a longer name
     * that starts with it (a dotted walk out of the allowed object) */
    char name[300];
    memset(name, 'a', sizeof name);
    memcpy(name, "mod.", 4);
    name[256] = '\0';
    const char *allow[] = {name};
    ckpt_scan_options o = CKPT_SCAN_OPTIONS_INIT;
    o.allow = allow;
    o.nallow = 1;
    n = 0;
    memcpy(buf + n, "\x80\x04\x8c\x03mod\x8c\xfc", 9), n += 9;
    memcpy(buf + n, name + 4, 252), n += 252;
    memcpy(buf + n, "\x93\x8c\x03modX\x08\x01\x00\x00", 11), n += 11; /* 252 + 12 */
    memcpy(buf + n, name + 4, 252), n += 252;
    memcpy(buf + n, ".__globals__\x93.", 14), n += 14;
    r = scan_opts(buf, n, &o);
    CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "unsafe");
    CHECK(find(r, "allowed", name) != NULL);
    f = find(r, "global", NULL);
    CHECK(f && f->severity == CKPT_SEVERITY_DANGEROUS && strstr(f->global, "...") != NULL);
    ckpt_scan_report_free(r);
}

/* ------------------------------------------------------------ allocation */

static long fail_after, allocs, live;

static void *t_malloc(void *u, size_t n) {
    (void)u;
    if (fail_after >= 0 && allocs++ >= fail_after) return NULL;
    void *p = malloc(n);
    if (p) live++;
    return p;
}
static void *t_realloc(void *u, void *p, size_t n) {
    (void)u;
    if (fail_after >= 0 && allocs++ >= fail_after) return NULL;
    void *q = realloc(p, n);
    if (q && !p) live++;
    return q;
}
static void t_free(void *u, void *p) {
    (void)u;
    if (p) live--;
    free(p);
}

/* Every allocation failing in turn: CKPT_E_NOMEM, no report, no leak. */
TEST(allocation_failures) {
    ckpt_allocator a = {t_malloc, t_realloc, t_free, NULL};
    uint8_t outer[512];
    size_t n = wrap_call(outer, 'B', (const uint8_t *)EVIL, EVIL_LEN);
    ckpt_set_allocator(&a);
    int done = 0;
    for (fail_after = 0; !done && fail_after < 10000; fail_after++) {
        ckpt_scan_report *r = NULL;
        allocs = 0;
        live = 0;
        int rc = ckpt_scan_memory(&r, outer, n, "t", NULL);
        if (rc == 0) {
            done = 1;
            CHECK_EQ_INT(ckpt_scan_verdict(r), CKPT_VERDICT_UNSAFE);
        } else {
            CHECK_EQ_INT(rc, CKPT_E_NOMEM);
            CHECK(r == NULL);
        }
        ckpt_scan_report_free(r);
        CHECK_EQ_INT(live, 0);
    }
    ckpt_set_allocator(NULL);
    CHECK(done);
}

/* Deciding safety never inflates what no loader unpickles, and what it
 * inflates fits one budget per file: max_inflate_bytes and at most
 * max_inflate_ratio times the file's size. */
TEST(bounded_inflation) {
    static uint8_t z[1 << 16];
    size_t big = (size_t)3 << 20;
    uint8_t *zeros = calloc(big, 1);
    zeros[0] = 0x80; /* starts like a pickle */
    zeros[1] = 0x02;
    zmember blob = {"archive/data/0", NULL, zeros, big, 0, 1, 0};
    size_t n = build_zip(z, NULL, 0, &blob, 1);
    CHECK(n < 8192);
    ckpt_scan_report *r = scan(z, n);
    CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "unscannable");
    const ckpt_finding *f = find(r, "not-inflated", NULL);
    CHECK(f && !strcmp(f->member, "archive/data/0") && f->offset == 30 + 14);
    ckpt_scan_report_free(r);
    /* named like a pickle: inflated, but the budget is 100 x the file */
    zmember pkl = {"archive/DATA.PKL", NULL, zeros, big, 0, 1, 0};
    n = build_zip(z, NULL, 0, &pkl, 1);
    r = scan(z, n);
    CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "unscannable");
    f = find(r, "unreadable-member", NULL);
    CHECK(f && strstr(f->message, "max_inflate_ratio") != NULL);
    ckpt_scan_report_free(r);
    ckpt_scan_options o = CKPT_SCAN_OPTIONS_INIT;
    o.limits.max_inflate_ratio = 1000000;
    r = scan_opts(z, n, &o);
    /* inflated and parsed: zeros after PROTO are no pickle (MARK is '(') */
    CHECK(find(r, "unreadable-member", NULL) == NULL);
    CHECK(find(r, "parse-error", NULL) != NULL);
    ckpt_scan_report_free(r);
    free(zeros);
}

/* What torch's zip reader and Python's zipfile read differently. */
TEST(zip_readings) {
    static uint8_t z[4096];
    /* torch finds archive/data.pkl under any case; a protocol 0 stream
     * with bytes after its STOP is not pickle-shaped, so only the name
     * says it is one */
    static const char p0[] = "cos\nsystem\n(S'x'\ntR.\n\x00";
    zmember upper = {"archive/DATA.PKL", NULL, (const uint8_t *)p0, sizeof p0 - 1, 0, 0, 0};
    size_t n = build_zip(z, NULL, 0, &upper, 1);
    ckpt_scan_report *r = scan(z, n);
    CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "unsafe");
    CHECK(find(r, "call", "os.system") != NULL);
    ckpt_scan_report_free(r);
    /* names equal but for case: readers load different members */
    zmember dups[2] = {{"a/data.pkl", NULL, (const uint8_t *)BENIGN, BENIGN_LEN, 0, 0, 0},
                       {"a/Data.pkl", NULL, (const uint8_t *)BENIGN, BENIGN_LEN, 0, 0, 0}};
    n = build_zip(z, NULL, 0, dups, 2);
    r = scan(z, n);
    CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "unscannable");
    CHECK(find(r, "duplicate-name", NULL) != NULL);
    ckpt_scan_report_free(r);
    /* a clean archive behind a prefix: zipfile reads it, torch does not */
    zmember ok = {"a/data.pkl", NULL, (const uint8_t *)BENIGN, BENIGN_LEN, 0, 0, 0};
    n = build_zip(z, (const uint8_t *)"GIF89a-prefix", 13, &ok, 1);
    r = scan(z, n);
    CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(r)), "unscannable");
    CHECK(find(r, "polyglot", NULL) != NULL);
    ckpt_scan_report_free(r);
}

/* The directory walk `ckpt scan DIR` and doctor share: a folder's own
 * files in strcmp order before its subfolders', names relative to the
 * directory given (base: where the last component starts), hidden
 * entries skipped, a subfolder that cannot be opened listed with its
 * error; the directory itself missing is an error, NULL arguments too. */
TEST(dir_list) {
    char d[] = "/tmp/ckpt-test-dirlist-XXXXXX", p[256];
    ckpt_scan_dir *w = NULL;
    CHECK(mkdtemp(d) != NULL);
    const char *made[] = {"b", "a", "B", ".h", "sub/x"};
    snprintf(p, sizeof p, "%s/sub", d);
    CHECK_EQ_INT(mkdir(p, 0755), 0);
    for (size_t i = 0; i < sizeof made / sizeof *made; i++) {
        snprintf(p, sizeof p, "%s/%s", d, made[i]);
        FILE *f = fopen(p, "wb");
        CHECK(f != NULL);
        if (f) fclose(f);
    }
    CHECK_EQ_INT(ckpt_scan_dir_list(&w, d, NULL), 0);
    CHECK_EQ_INT((int)ckpt_scan_dir_count(w), 4);
    const char *want[] = {"B", "a", "b", "sub/x"};
    for (size_t i = 0; i < 4 && i < ckpt_scan_dir_count(w); i++) {
        const ckpt_dir_entry *e = ckpt_scan_dir_entry(w, i);
        CHECK(strcmp(e->name, want[i]) == 0 && e->error.code == 0);
        CHECK_EQ_INT((int)e->base, i == 3 ? 4 : 0);
        snprintf(p, sizeof p, "%s/%s", d, want[i]);
        CHECK(strcmp(e->path, p) == 0);
    }
    CHECK(ckpt_scan_dir_entry(w, 4) == NULL);
    ckpt_scan_dir_free(w);
    CHECK_EQ_INT(ckpt_scan_dir_list(&w, d, "sub"), 0);
    CHECK_EQ_INT((int)ckpt_scan_dir_count(w), 1);
    ckpt_scan_dir_free(w);
    CHECK_EQ_INT(ckpt_scan_dir_list(&w, d, "gone"), 0); /* a subfolder unread: listed */
    CHECK_EQ_INT((int)ckpt_scan_dir_count(w), 1);
    const ckpt_dir_entry *e = ckpt_scan_dir_entry(w, 0);
    CHECK(e && e->error.code == CKPT_E_IO && strstr(e->error.message, "cannot open directory"));
    ckpt_scan_dir_free(w);
    snprintf(p, sizeof p, "%s/gone", d);
    CHECK_EQ_INT(ckpt_scan_dir_list(&w, p, NULL), CKPT_E_IO);
    CHECK(w == NULL);
    CHECK_EQ_INT(ckpt_scan_dir_list(NULL, d, NULL), CKPT_E_INVALID_ARG);
    for (size_t i = 0; i < sizeof made / sizeof *made; i++) {
        snprintf(p, sizeof p, "%s/%s", d, made[i]);
        unlink(p);
    }
    snprintf(p, sizeof p, "%s/sub", d);
    rmdir(p);
    rmdir(d);
}

/* The scan of a directory's entries, as `ckpt scan DIR` makes it: an
 * index's shard has no report of its own (the index's findings name it),
 * another file its own; an entry the walk left unread has none, with the
 * walk's error; a second scan of the list and NULL are refused. */
TEST(dir_scan) {
    char d[] = "/tmp/ckpt-test-dirscan-XXXXXX", p[256];
    ckpt_scan_dir *w = NULL;
    const ckpt_error *why = NULL;
    CHECK(mkdtemp(d) != NULL);
    static const char st[] = "\x36\0\0\0\0\0\0\0"
                             "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}"
                             "\0\0\x80?";
    static const char index[] = "{\"weight_map\": {\"w\": \"a.safetensors\"}}";
    put_file(d, "a.safetensors", st, sizeof st - 1);
    put_file(d, "b.bin", EVIL, EVIL_LEN);
    put_file(d, "m.index.json", index, sizeof index - 1);
    CHECK_EQ_INT(ckpt_scan_dir_list(&w, d, NULL), 0);
    CHECK_EQ_INT((int)ckpt_scan_dir_count(w), 3);
    CHECK(ckpt_scan_dir_report(w, 0, &why) == NULL && why == NULL); /* not scanned yet */
    CHECK_EQ_INT(ckpt_scan_dir_scan(w, NULL), 0);
    CHECK(ckpt_scan_dir_report(w, 0, &why) == NULL && why == NULL); /* a.safetensors: the index's */
    const ckpt_scan_report *b = ckpt_scan_dir_report(w, 1, &why);
    CHECK(b && why == NULL);
    if (b) CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(b)), "unsafe");
    const ckpt_scan_report *m = ckpt_scan_dir_report(w, 2, NULL);
    CHECK(m && ckpt_scan_shard_count(m) == 1);
    if (m) CHECK_EQ_STR(ckpt_verdict_name(ckpt_scan_verdict(m)), "safe");
    CHECK(ckpt_scan_dir_report(w, 3, &why) == NULL && why == NULL);
    CHECK_EQ_INT(ckpt_scan_dir_scan(w, NULL), CKPT_E_INVALID_ARG); /* scanned already */
    ckpt_scan_dir_free(w);
    CHECK_EQ_INT(ckpt_scan_dir_list(&w, d, "gone"), 0); /* a subfolder unread */
    CHECK_EQ_INT(ckpt_scan_dir_scan(w, NULL), 0);
    CHECK(ckpt_scan_dir_report(w, 0, &why) == NULL && why && why->code == CKPT_E_IO);
    ckpt_scan_dir_free(w);
    CHECK_EQ_INT(ckpt_scan_dir_scan(NULL, NULL), CKPT_E_INVALID_ARG);
    const char *made[] = {"a.safetensors", "b.bin", "m.index.json"};
    for (size_t i = 0; i < sizeof made / sizeof *made; i++) {
        snprintf(p, sizeof p, "%s/%s", d, made[i]);
        unlink(p);
    }
    rmdir(d);
}

int main(void) {
    RUN_CORPUS(corpus_verdicts);
    RUN_CORPUS(corpus_details);
    RUN_CORPUS(corpus_truncations);
    RUN(weights_only_verdict);
    RUN(weights_only_operands);
    RUN(stack_global_from_memo);
    RUN(stack_global_operands_from_every_string_opcode);
    RUN(inst_obj_newobj_ext);
    RUN(build_poisoning_and_names);
    RUN(build_on_any_reference);
    RUN(invalid_memo_and_type_confusion);
    RUN(streams_and_trailing_bytes);
    RUN(review_data_classes);
    RUN(loaded_streams_never_dropped);
    RUN(nested_pickles);
    RUN(zip_tricks);
    RUN(bounded_inflation);
    RUN(zip_readings);
    RUN(truncated_malicious_never_safe);
    RUN(allowlist_policy);
    RUN(numpy_is_safe);
    RUN(other_formats);
    RUN(tar_members);
    RUN(nested_zips);
    RUN(family_wording);
    RUN(sharded_index);
    RUN_CORPUS(sharded_index_corpus);
    RUN(finding_bounds);
    RUN(allocation_failures);
    RUN(dir_list);
    RUN(dir_scan);
    return harness_end();
}
