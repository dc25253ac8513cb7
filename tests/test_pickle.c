/* test_pickle.c - the restricted pickle machine and its data builders:
 * every opcode family, malformed input, limits, events, the picklescan
 * corpus, numpy pickles written by Debian's numpy, and torch tensor
 * rebuilds through a persistent_load callback. */
#include <dirent.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

#include "format/pickle_builders.h"
#include "model/dtype.h"
#include "base/error.h"
#include "harness.h"
#include "format/pickle.h"
#include "container/zip.h"

/* ---------------------------------------------------------------- helpers */

typedef struct {
    pk_event_kind kind;
    uint8_t opcode;
    uint64_t offset;
    char module[96], name[96];
    int allowed, symbolic, on_reference;
    size_t nargs; /* PK_EV_CALL: items of args, SIZE_MAX when NULL */
} ev_copy;

static ev_copy events[1024];
static size_t nevents, nevents_total; /* kept, reported */
static ckpt_arena arena;
static ckpt_limits limits = CKPT_LIMITS_INIT;
static int scan_only; /* run() in scan mode */

static void record(void *ctx, const pk_event *e) {
    (void)ctx;
    nevents_total++;
    if (nevents == sizeof events / sizeof *events) return;
    ev_copy *c = &events[nevents++];
    c->kind = e->kind;
    c->opcode = e->opcode;
    c->offset = e->offset;
    snprintf(c->module, sizeof c->module, "%s", e->module ? e->module : "(null)");
    snprintf(c->name, sizeof c->name, "%s", e->name ? e->name : "(null)");
    c->allowed = e->allowed;
    c->symbolic = e->symbolic;
    c->on_reference = e->on_reference;
    c->nargs = e->args ? e->args->u.seq.n : SIZE_MAX;
}

/* persistent_load for the torch tests: a CKPT_KIND_STORAGE_ of 16 bytes
 * of F32 whatever the pid, as torch.c would make from ('storage', ...). */
static int storage16(void *ctx, ckpt_value *pid, uint64_t offset, ckpt_value **out) {
    (void)ctx;
    if (pid->kind != CKPT_KIND_TUPLE)
        return ckpt_err(CKPT_E_FORMAT, "t", "m", offset, "pid is not a tuple");
    ckpt_storage *st = ckpt_arena_alloc(&arena, sizeof *st);
    ckpt_value *v = ckpt_value_new(&arena, CKPT_KIND_STORAGE_);
    if (!st || !v) return CKPT_E_NOMEM;
    st->dtype = CKPT_DT_F32;
    st->nbytes = 16;
    st->member = "";
    st->key = "0";
    st->file_offset = CKPT_NO_OFFSET;
    v->u.storage = st;
    *out = v;
    return 0;
}

static int (*persistent_load)(void *, ckpt_value *, uint64_t, ckpt_value **);
static uint64_t base_offset;

/* Runs buf as a pickle with fresh events; the previous result is freed. */
static int run_used(const void *buf, size_t len, ckpt_value **out, size_t *used) {
    ckpt_arena_free(&arena);
    nevents = nevents_total = 0;
    pk_options o = {.file = "test.pkl",
                    .member = "data.pkl",
                    .base_offset = base_offset,
                    .limits = &limits,
                    .arena = &arena,
                    .persistent_load = persistent_load,
                    .on_event = record,
                    .scan_only = scan_only};
    return ckpt_pickle_run(out, used, buf, len, &o);
}

static int run(const void *buf, size_t len, ckpt_value **out) {
    size_t used;
    return run_used(buf, len, out, &used);
}

/* a pickle written as a string literal */
#define PK(lit, out) run(lit, sizeof(lit) - 1, out)

static int is_int(const ckpt_value *v, int64_t x) {
    return v && v->kind == CKPT_KIND_INT && !v->u.i.decimal && v->u.i.v == x;
}

static int is_str(const ckpt_value *v, const char *s) {
    return v && v->kind == CKPT_KIND_STR && v->u.s.len == strlen(s) &&
           memcmp(v->u.s.p, s, v->u.s.len) == 0;
}

static int is_bytes(const ckpt_value *v, const char *s, size_t n) {
    return v && v->kind == CKPT_KIND_BYTES && v->u.s.len == n && memcmp(v->u.s.p, s, n) == 0;
}

static const ckpt_value *item(const ckpt_value *v, size_t i) {
    return v &&
                   (v->kind == CKPT_KIND_LIST || v->kind == CKPT_KIND_TUPLE ||
                    v->kind == CKPT_KIND_SET) &&
                   i < v->u.seq.n
               ? v->u.seq.items[i]
               : NULL;
}

/* value of the str key k in a DICT */
static const ckpt_value *get(const ckpt_value *d, const char *k) {
    if (!d || d->kind != CKPT_KIND_DICT) return NULL;
    for (size_t i = 0; i < d->u.dict.n; i++)
        if (is_str(d->u.dict.keys[i], k)) return d->u.dict.vals[i];
    return NULL;
}

static int has_event(pk_event_kind kind, const char *module, const char *name) {
    for (size_t i = 0; i < nevents; i++)
        if (events[i].kind == kind && !strcmp(events[i].module, module) &&
            !strcmp(events[i].name, name))
            return 1;
    return 0;
}

/* The first matching event, or one whose every field fails the checks
 * (so a missing event fails a test instead of crashing it). */
static const ev_copy *find_event(pk_event_kind kind, const char *module, const char *name) {
    static const ev_copy missing = {.kind = (pk_event_kind)-1,
                                    .opcode = 0,
                                    .offset = UINT64_MAX,
                                    .module = "(missing)",
                                    .name = "(missing)",
                                    .allowed = -1,
                                    .symbolic = -1};
    for (size_t i = 0; i < nevents; i++)
        if (events[i].kind == kind && !strcmp(events[i].module, module) &&
            !strcmp(events[i].name, name))
            return &events[i];
    return &missing;
}

static size_t count_events(pk_event_kind kind) {
    size_t n = 0;
    for (size_t i = 0; i < nevents; i++) n += events[i].kind == kind;
    return n;
}

static const char *last_message(void) { return ckpt_error_last()->message; }

/* ---------------------------------------------------------------- scalars */

TEST(test_proto0_numbers) {
    ckpt_value *v;
    CHECK_EQ_INT(PK("I42\n.", &v), 0);
    CHECK(is_int(v, 42));
    CHECK_EQ_INT(PK("I-7\n.", &v), 0);
    CHECK(is_int(v, -7));
    CHECK_EQ_INT(PK("I01\n.", &v), 0); /* Python 2 True */
    CHECK(v && v->kind == CKPT_KIND_BOOL && v->u.b == 1);
    CHECK_EQ_INT(PK("I00\n.", &v), 0);
    CHECK(v && v->kind == CKPT_KIND_BOOL && v->u.b == 0);
    CHECK_EQ_INT(PK("I1\n.", &v), 0);
    CHECK(is_int(v, 1));
    CHECK_EQ_INT(PK("I9223372036854775807\n.", &v), 0);
    CHECK(is_int(v, INT64_MAX));
    CHECK_EQ_INT(PK("L123L\n.", &v), 0);
    CHECK(is_int(v, 123));
    CHECK_EQ_INT(PK("L18446744073709551617L\n.", &v), 0);
    CHECK_EQ_STR(ckpt_value_int_decimal(v), "18446744073709551617");
    CHECK_EQ_INT(PK("L-9223372036854775808L\n.", &v), 0);
    CHECK(is_int(v, INT64_MIN));
    CHECK_EQ_INT(PK("L-9223372036854775809L\n.", &v), 0);
    CHECK_EQ_STR(ckpt_value_int_decimal(v), "-9223372036854775809");
    CHECK_EQ_INT(PK("L-1606938044258990275541962092341162602522202993782792835301376L\n.", &v), 0);
    CHECK_EQ_STR(ckpt_value_int_decimal(v),
                 "-1606938044258990275541962092341162602522202993782792835301376");
    CHECK_EQ_INT(PK("F0.1\n.", &v), 0);
    CHECK(v && v->kind == CKPT_KIND_FLOAT && v->u.f == 0.1);
    CHECK_EQ_INT(PK("F-inf\n.", &v), 0);
    CHECK(v && v->kind == CKPT_KIND_FLOAT && v->u.f < -1e308);
    CHECK_EQ_INT(PK("N.", &v), 0);
    CHECK(v && v->kind == CKPT_KIND_NONE);
}

TEST(test_binary_numbers) {
    ckpt_value *v;
    CHECK_EQ_INT(PK("\x80\x02J\xff\xff\xff\xff.", &v), 0);
    CHECK(is_int(v, -1));
    CHECK_EQ_INT(PK("J\x00\x00\x00\x80.", &v), 0);
    CHECK(is_int(v, INT32_MIN));
    CHECK_EQ_INT(PK("K\xff.", &v), 0);
    CHECK(is_int(v, 255));
    CHECK_EQ_INT(PK("M\xff\xff.", &v), 0);
    CHECK(is_int(v, 65535));
    CHECK_EQ_INT(PK("\x88.", &v), 0);
    CHECK(v && v->kind == CKPT_KIND_BOOL && v->u.b == 1);
    CHECK_EQ_INT(PK("\x89.", &v), 0);
    CHECK(v && v->kind == CKPT_KIND_BOOL && v->u.b == 0);
    /* 2**64 + 1 and -(2**64) - 1 as pickle.dumps(x, 2) writes them */
    CHECK_EQ_INT(PK("\x80\x02\x8a\x09\x01\x00\x00\x00\x00\x00\x00\x00\x01.", &v), 0);
    CHECK_EQ_STR(ckpt_value_int_decimal(v), "18446744073709551617");
    CHECK_EQ_INT(PK("\x80\x02\x8a\x09\xff\xff\xff\xff\xff\xff\xff\xff\xfe.", &v), 0);
    CHECK_EQ_STR(ckpt_value_int_decimal(v), "-18446744073709551617");
    CHECK_EQ_INT(PK("\x8a\x00.", &v), 0);
    CHECK(is_int(v, 0));
    CHECK_EQ_INT(PK("\x8a\x01\xff.", &v), 0);
    CHECK(is_int(v, -1));
    CHECK_EQ_INT(PK("\x8a\x02\x00\x80.", &v), 0); /* two's complement */
    CHECK(is_int(v, -32768));
    CHECK_EQ_INT(PK("\x8a\x03\x00\x80\x00.", &v), 0);
    CHECK(is_int(v, 32768));
    CHECK_EQ_INT(PK("\x8b\x02\x00\x00\x00\x00\x01.", &v), 0);
    CHECK(is_int(v, 256));
    /* the legacy torch magic number */
    CHECK_EQ_INT(PK("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.", &v), 0);
    CHECK_EQ_STR(ckpt_value_int_decimal(v), "119547037146038801333356");
    /* BINFLOAT is big-endian */
    CHECK_EQ_INT(PK("G\x3f\xb9\x99\x99\x99\x99\x99\x9a.", &v), 0);
    CHECK(v && v->kind == CKPT_KIND_FLOAT && v->u.f == 0.1);
    CHECK_EQ_INT(PK("G\xc0\x00\x00\x00\x00\x00\x00\x00.", &v), 0);
    CHECK(v && v->u.f == -2.0);
}

/* None, the bools and the ints -5..256 are one value per run, as CPython
 * shares them (a state_dict holds a few per tensor); every other int is a
 * value of its own, and each reads what was written. */
TEST(test_shared_scalars) {
    ckpt_value *v;
    CHECK_EQ_INT(PK("(J\xfa\xff\xff\xffJ\xfb\xff\xff\xffK\x00M\x00\x01M\x01\x01"
                    "M\x00\x01M\x01\x01J\xfb\xff\xff\xffNN\x88\x88\x89\x89I01\nI256\nt.",
                    &v),
                 0);
    CHECK(v && v->kind == CKPT_KIND_TUPLE && v->u.seq.n == 16);
    if (!v || v->u.seq.n != 16) return;
    CHECK(is_int(item(v, 0), -6) && is_int(item(v, 1), -5) && is_int(item(v, 2), 0));
    CHECK(is_int(item(v, 3), 256) && is_int(item(v, 4), 257));
    CHECK(item(v, 3) == item(v, 5) && item(v, 1) == item(v, 7)); /* shared */
    CHECK(is_int(item(v, 6), 257) && item(v, 4) != item(v, 6));  /* not shared */
    CHECK(item(v, 8)->kind == CKPT_KIND_NONE && item(v, 8) == item(v, 9));
    CHECK(item(v, 10)->kind == CKPT_KIND_BOOL && item(v, 10)->u.b == 1 &&
          item(v, 10) == item(v, 11));
    CHECK(item(v, 12)->kind == CKPT_KIND_BOOL && item(v, 12)->u.b == 0 &&
          item(v, 12) == item(v, 13) && item(v, 10) != item(v, 12));
    CHECK(item(v, 14) == item(v, 10)); /* I01: True */
    CHECK(item(v, 15) == item(v, 3));  /* INT text */
}

/* ---------------------------------------------------------------- strings */

TEST(test_proto0_strings) {
    ckpt_value *v;
    /* repr escapes: \n \x41 \101 \' \\ */
    CHECK_EQ_INT(PK("S'a\\nb\\x41\\101\\'\\\\'\n.", &v), 0);
    CHECK(is_str(v, "a\nbAA'\\"));
    CHECK_EQ_INT(PK("S'\\a\\b\\f\\r\\t\\v\\0\\777'\n.", &v), 0);
    CHECK(is_str(v, "\a\b\f\r\t\v\x00\xff") == 0); /* \777 wraps to 0xff: not UTF-8 */
    CHECK(is_bytes(v, "\a\b\f\r\t\v\x00\xff", 8));
    CHECK_EQ_INT(PK("S\"it's\"\n.", &v), 0);
    CHECK(is_str(v, "it's"));
    CHECK_EQ_INT(PK("S'\\q'\n.", &v), 0); /* unknown escapes stay as written */
    CHECK(is_str(v, "\\q"));
    CHECK_EQ_INT(PK("S'\\xff'\n.", &v), 0); /* not UTF-8: a Python 2 byte string */
    CHECK(is_bytes(v, "\xff", 1));
    CHECK_EQ_INT(PK("S'\\x4'\n.", &v), CKPT_E_FORMAT);
    CHECK_EQ_INT(PK("S'abc\\'\n.", &v), CKPT_E_FORMAT); /* quote escaped: unterminated */
    CHECK_EQ_INT(PK("Sabc\n.", &v), CKPT_E_FORMAT);
    CHECK_EQ_INT(PK("S'abc\"\n.", &v), CKPT_E_FORMAT);
    CHECK(v == NULL);
    /* raw-unicode-escape as pickle.dumps('caf\u00e9\u20ac\\x\n', 0) writes it */
    CHECK_EQ_INT(PK("Vcaf\xe9\\u20ac\\u005cx\\u000a\n.", &v), 0);
    CHECK(is_str(v, "caf\xc3\xa9\xe2\x82\xac\\x\n"));
    CHECK_EQ_INT(PK("V\\\\u0041\n.", &v), 0); /* even backslashes: no escape */
    CHECK(is_str(v, "\\\\u0041"));
    CHECK_EQ_INT(PK("V\\\\\\u0041\n.", &v), 0);
    CHECK(is_str(v, "\\\\A"));
    CHECK_EQ_INT(PK("V\\U0001F600\n.", &v), 0);
    CHECK(is_str(v, "\xf0\x9f\x98\x80"));
    CHECK_EQ_INT(PK("V\\ud800\n.", &v), 0); /* lone surrogate: U+FFFD */
    CHECK(is_str(v, "\xef\xbf\xbd"));
    CHECK_EQ_INT(PK("V\\u12\n.", &v), CKPT_E_FORMAT);
    CHECK_EQ_INT(PK("V\\U00110000\n.", &v), CKPT_E_FORMAT);
}

TEST(test_binary_strings) {
    ckpt_value *v;
    CHECK_EQ_INT(PK("X\x03\x00\x00\x00"
                    "abc.",
                    &v),
                 0);
    CHECK(is_str(v, "abc"));
    CHECK_EQ_INT(nevents, 0); /* a literal is data: no event */
    CHECK_EQ_INT(PK("\x8c\x02hi.", &v), 0);
    CHECK(is_str(v, "hi"));
    CHECK_EQ_INT(PK("\x8d\x01\x00\x00\x00\x00\x00\x00\x00z.", &v), 0);
    CHECK(is_str(v, "z"));
    CHECK_EQ_INT(PK("B\x02\x00\x00\x00\x00\xff.", &v), 0);
    CHECK(is_bytes(v, "\x00\xff", 2));
    CHECK_EQ_INT(PK("C\x01\x07.", &v), 0);
    CHECK(is_bytes(v, "\x07", 1));
    CHECK_EQ_INT(PK("\x8e\x01\x00\x00\x00\x00\x00\x00\x00\x01.", &v), 0);
    CHECK(is_bytes(v, "\x01", 1));
    CHECK_EQ_INT(PK("\x96\x00\x00\x00\x00\x00\x00\x00\x00.", &v), 0);
    CHECK(is_bytes(v, "", 0));
    CHECK_EQ_INT(PK("T\x02\x00\x00\x00ok.", &v), 0);
    CHECK(is_str(v, "ok"));
    CHECK_EQ_INT(PK("U\x01\xff.", &v), 0);
    CHECK(is_bytes(v, "\xff", 1));
    CHECK_EQ_INT(PK("X\x03\x00\x00\x00\xed\xa0\x80.", &v), 0); /* surrogatepass */
    CHECK(is_str(v, "\xef\xbf\xbd"));
    CHECK_EQ_INT(PK("X\x01\x00\x00\x00\xff.", &v), CKPT_E_FORMAT);
    CHECK_EQ_INT(PK("X\x02\x00\x00\x00\xc0\x80.", &v), CKPT_E_FORMAT); /* overlong */
    CHECK_EQ_INT(PK("X\x01\x00\x00\x00\xe2.", &v), CKPT_E_FORMAT);
    CHECK_EQ_INT(PK("X\x04\x00\x00\x00\xf4\x90\x80\x80.", &v), CKPT_E_FORMAT); /* > U+10FFFF */
}

/* ---------------------------------------------------------------- containers */

/* pickle.dumps({'a': [1, (2, 3.5)], 'b': {'c': None, 'd': True}, 'e': (), 'f': [],
 *               's': {1}, 'fs': frozenset([2]), 'big': 2**70, 'neg': -5,
 *               'u': 'caf\u00e9', 'by': b'\x00\xff'}, protocol=P), P = 0..4 */
static const char nested_p0[] = "\x28\x64\x70\x30\x0a\x56\x61\x0a\x70\x31\x0a\x28\x6c\x70\x32\x0a"
                                "\x49\x31\x0a\x61\x28\x49\x32\x0a\x46\x33\x2e\x35\x0a\x74\x70\x33"
                                "\x0a\x61\x73\x56\x62\x0a\x70\x34\x0a\x28\x64\x70\x35\x0a\x56\x63"
                                "\x0a\x70\x36\x0a\x4e\x73\x56\x64\x0a\x70\x37\x0a\x49\x30\x31\x0a"
                                "\x73\x73\x56\x65\x0a\x70\x38\x0a\x28\x74\x73\x56\x66\x0a\x70\x39"
                                "\x0a\x28\x6c\x70\x31\x30\x0a\x73\x56\x73\x0a\x70\x31\x31\x0a\x63"
                                "\x5f\x5f\x62\x75\x69\x6c\x74\x69\x6e\x5f\x5f\x0a\x73\x65\x74\x0a"
                                "\x70\x31\x32\x0a\x28\x28\x6c\x70\x31\x33\x0a\x49\x31\x0a\x61\x74"
                                "\x70\x31\x34\x0a\x52\x70\x31\x35\x0a\x73\x56\x66\x73\x0a\x70\x31"
                                "\x36\x0a\x63\x5f\x5f\x62\x75\x69\x6c\x74\x69\x6e\x5f\x5f\x0a\x66"
                                "\x72\x6f\x7a\x65\x6e\x73\x65\x74\x0a\x70\x31\x37\x0a\x28\x28\x6c"
                                "\x70\x31\x38\x0a\x49\x32\x0a\x61\x74\x70\x31\x39\x0a\x52\x70\x32"
                                "\x30\x0a\x73\x56\x62\x69\x67\x0a\x70\x32\x31\x0a\x4c\x31\x31\x38"
                                "\x30\x35\x39\x31\x36\x32\x30\x37\x31\x37\x34\x31\x31\x33\x30\x33"
                                "\x34\x32\x34\x4c\x0a\x73\x56\x6e\x65\x67\x0a\x70\x32\x32\x0a\x49"
                                "\x2d\x35\x0a\x73\x56\x75\x0a\x70\x32\x33\x0a\x56\x63\x61\x66\xe9"
                                "\x0a\x70\x32\x34\x0a\x73\x56\x62\x79\x0a\x70\x32\x35\x0a\x63\x5f"
                                "\x63\x6f\x64\x65\x63\x73\x0a\x65\x6e\x63\x6f\x64\x65\x0a\x70\x32"
                                "\x36\x0a\x28\x56\x5c\x75\x30\x30\x30\x30\xff\x0a\x70\x32\x37\x0a"
                                "\x56\x6c\x61\x74\x69\x6e\x31\x0a\x70\x32\x38\x0a\x74\x70\x32\x39"
                                "\x0a\x52\x70\x33\x30\x0a\x73\x2e";
static const char nested_p1[] = "\x7d\x71\x00\x28\x58\x01\x00\x00\x00\x61\x71\x01\x5d\x71\x02\x28"
                                "\x4b\x01\x28\x4b\x02\x47\x40\x0c\x00\x00\x00\x00\x00\x00\x74\x71"
                                "\x03\x65\x58\x01\x00\x00\x00\x62\x71\x04\x7d\x71\x05\x28\x58\x01"
                                "\x00\x00\x00\x63\x71\x06\x4e\x58\x01\x00\x00\x00\x64\x71\x07\x49"
                                "\x30\x31\x0a\x75\x58\x01\x00\x00\x00\x65\x71\x08\x29\x58\x01\x00"
                                "\x00\x00\x66\x71\x09\x5d\x71\x0a\x58\x01\x00\x00\x00\x73\x71\x0b"
                                "\x63\x5f\x5f\x62\x75\x69\x6c\x74\x69\x6e\x5f\x5f\x0a\x73\x65\x74"
                                "\x0a\x71\x0c\x28\x5d\x71\x0d\x4b\x01\x61\x74\x71\x0e\x52\x71\x0f"
                                "\x58\x02\x00\x00\x00\x66\x73\x71\x10\x63\x5f\x5f\x62\x75\x69\x6c"
                                "\x74\x69\x6e\x5f\x5f\x0a\x66\x72\x6f\x7a\x65\x6e\x73\x65\x74\x0a"
                                "\x71\x11\x28\x5d\x71\x12\x4b\x02\x61\x74\x71\x13\x52\x71\x14\x58"
                                "\x03\x00\x00\x00\x62\x69\x67\x71\x15\x4c\x31\x31\x38\x30\x35\x39"
                                "\x31\x36\x32\x30\x37\x31\x37\x34\x31\x31\x33\x30\x33\x34\x32\x34"
                                "\x4c\x0a\x58\x03\x00\x00\x00\x6e\x65\x67\x71\x16\x4a\xfb\xff\xff"
                                "\xff\x58\x01\x00\x00\x00\x75\x71\x17\x58\x05\x00\x00\x00\x63\x61"
                                "\x66\xc3\xa9\x71\x18\x58\x02\x00\x00\x00\x62\x79\x71\x19\x63\x5f"
                                "\x63\x6f\x64\x65\x63\x73\x0a\x65\x6e\x63\x6f\x64\x65\x0a\x71\x1a"
                                "\x28\x58\x03\x00\x00\x00\x00\xc3\xbf\x71\x1b\x58\x06\x00\x00\x00"
                                "\x6c\x61\x74\x69\x6e\x31\x71\x1c\x74\x71\x1d\x52\x71\x1e\x75\x2e";
static const char nested_p2[] = "\x80\x02\x7d\x71\x00\x28\x58\x01\x00\x00\x00\x61\x71\x01\x5d\x71"
                                "\x02\x28\x4b\x01\x4b\x02\x47\x40\x0c\x00\x00\x00\x00\x00\x00\x86"
                                "\x71\x03\x65\x58\x01\x00\x00\x00\x62\x71\x04\x7d\x71\x05\x28\x58"
                                "\x01\x00\x00\x00\x63\x71\x06\x4e\x58\x01\x00\x00\x00\x64\x71\x07"
                                "\x88\x75\x58\x01\x00\x00\x00\x65\x71\x08\x29\x58\x01\x00\x00\x00"
                                "\x66\x71\x09\x5d\x71\x0a\x58\x01\x00\x00\x00\x73\x71\x0b\x63\x5f"
                                "\x5f\x62\x75\x69\x6c\x74\x69\x6e\x5f\x5f\x0a\x73\x65\x74\x0a\x71"
                                "\x0c\x5d\x71\x0d\x4b\x01\x61\x85\x71\x0e\x52\x71\x0f\x58\x02\x00"
                                "\x00\x00\x66\x73\x71\x10\x63\x5f\x5f\x62\x75\x69\x6c\x74\x69\x6e"
                                "\x5f\x5f\x0a\x66\x72\x6f\x7a\x65\x6e\x73\x65\x74\x0a\x71\x11\x5d"
                                "\x71\x12\x4b\x02\x61\x85\x71\x13\x52\x71\x14\x58\x03\x00\x00\x00"
                                "\x62\x69\x67\x71\x15\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x40"
                                "\x58\x03\x00\x00\x00\x6e\x65\x67\x71\x16\x4a\xfb\xff\xff\xff\x58"
                                "\x01\x00\x00\x00\x75\x71\x17\x58\x05\x00\x00\x00\x63\x61\x66\xc3"
                                "\xa9\x71\x18\x58\x02\x00\x00\x00\x62\x79\x71\x19\x63\x5f\x63\x6f"
                                "\x64\x65\x63\x73\x0a\x65\x6e\x63\x6f\x64\x65\x0a\x71\x1a\x58\x03"
                                "\x00\x00\x00\x00\xc3\xbf\x71\x1b\x58\x06\x00\x00\x00\x6c\x61\x74"
                                "\x69\x6e\x31\x71\x1c\x86\x71\x1d\x52\x71\x1e\x75\x2e";
static const char nested_p3[] = "\x80\x03\x7d\x71\x00\x28\x58\x01\x00\x00\x00\x61\x71\x01\x5d\x71"
                                "\x02\x28\x4b\x01\x4b\x02\x47\x40\x0c\x00\x00\x00\x00\x00\x00\x86"
                                "\x71\x03\x65\x58\x01\x00\x00\x00\x62\x71\x04\x7d\x71\x05\x28\x58"
                                "\x01\x00\x00\x00\x63\x71\x06\x4e\x58\x01\x00\x00\x00\x64\x71\x07"
                                "\x88\x75\x58\x01\x00\x00\x00\x65\x71\x08\x29\x58\x01\x00\x00\x00"
                                "\x66\x71\x09\x5d\x71\x0a\x58\x01\x00\x00\x00\x73\x71\x0b\x63\x62"
                                "\x75\x69\x6c\x74\x69\x6e\x73\x0a\x73\x65\x74\x0a\x71\x0c\x5d\x71"
                                "\x0d\x4b\x01\x61\x85\x71\x0e\x52\x71\x0f\x58\x02\x00\x00\x00\x66"
                                "\x73\x71\x10\x63\x62\x75\x69\x6c\x74\x69\x6e\x73\x0a\x66\x72\x6f"
                                "\x7a\x65\x6e\x73\x65\x74\x0a\x71\x11\x5d\x71\x12\x4b\x02\x61\x85"
                                "\x71\x13\x52\x71\x14\x58\x03\x00\x00\x00\x62\x69\x67\x71\x15\x8a"
                                "\x09\x00\x00\x00\x00\x00\x00\x00\x00\x40\x58\x03\x00\x00\x00\x6e"
                                "\x65\x67\x71\x16\x4a\xfb\xff\xff\xff\x58\x01\x00\x00\x00\x75\x71"
                                "\x17\x58\x05\x00\x00\x00\x63\x61\x66\xc3\xa9\x71\x18\x58\x02\x00"
                                "\x00\x00\x62\x79\x71\x19\x43\x02\x00\xff\x71\x1a\x75\x2e";
static const char nested_p4[] = "\x80\x04\x95\x7f\x00\x00\x00\x00\x00\x00\x00\x7d\x94\x28\x8c\x01"
                                "\x61\x94\x5d\x94\x28\x4b\x01\x4b\x02\x47\x40\x0c\x00\x00\x00\x00"
                                "\x00\x00\x86\x94\x65\x8c\x01\x62\x94\x7d\x94\x28\x8c\x01\x63\x94"
                                "\x4e\x8c\x01\x64\x94\x88\x75\x8c\x01\x65\x94\x29\x8c\x01\x66\x94"
                                "\x5d\x94\x8c\x01\x73\x94\x8f\x94\x28\x4b\x01\x90\x8c\x02\x66\x73"
                                "\x94\x28\x4b\x02\x91\x94\x8c\x03\x62\x69\x67\x94\x8a\x09\x00\x00"
                                "\x00\x00\x00\x00\x00\x00\x40\x8c\x03\x6e\x65\x67\x94\x4a\xfb\xff"
                                "\xff\xff\x8c\x01\x75\x94\x8c\x05\x63\x61\x66\xc3\xa9\x94\x8c\x02"
                                "\x62\x79\x94\x43\x02\x00\xff\x94\x75\x2e";

static void check_nested(const ckpt_value *d, int proto) {
    CHECK(d && d->kind == CKPT_KIND_DICT && d->u.dict.n == 10);
    const ckpt_value *a = get(d, "a"), *b = get(d, "b");
    CHECK(a && a->kind == CKPT_KIND_LIST && a->u.seq.n == 2);
    CHECK(is_int(item(a, 0), 1));
    const ckpt_value *t = item(a, 1);
    CHECK(t && t->kind == CKPT_KIND_TUPLE && t->u.seq.n == 2);
    CHECK(is_int(item(t, 0), 2));
    CHECK(item(t, 1) && item(t, 1)->kind == CKPT_KIND_FLOAT && item(t, 1)->u.f == 3.5);
    CHECK(get(b, "c") && get(b, "c")->kind == CKPT_KIND_NONE);
    CHECK(get(b, "d") && get(b, "d")->kind == CKPT_KIND_BOOL && get(b, "d")->u.b == 1);
    CHECK(get(d, "e") && get(d, "e")->kind == CKPT_KIND_TUPLE && get(d, "e")->u.seq.n == 0);
    CHECK(get(d, "f") && get(d, "f")->kind == CKPT_KIND_LIST && get(d, "f")->u.seq.n == 0);
    CHECK(get(d, "s") && get(d, "s")->kind == CKPT_KIND_SET && is_int(item(get(d, "s"), 0), 1));
    CHECK(get(d, "fs") && get(d, "fs")->kind == CKPT_KIND_SET && is_int(item(get(d, "fs"), 0), 2));
    CHECK_EQ_STR(get(d, "big") ? ckpt_value_int_decimal(get(d, "big")) : NULL,
                 "1180591620717411303424");
    CHECK(is_int(get(d, "neg"), -5));
    CHECK(is_str(get(d, "u"), "caf\xc3\xa9"));
    CHECK(is_bytes(get(d, "by"), "\x00\xff", 2));
    if (harness_cur_failed) fprintf(stderr, "  (protocol %d)\n", proto);
}

TEST(test_nested_every_protocol) {
    static const struct {
        const char *p;
        size_t n;
    } pk[] = {{nested_p0, sizeof nested_p0 - 1},
              {nested_p1, sizeof nested_p1 - 1},
              {nested_p2, sizeof nested_p2 - 1},
              {nested_p3, sizeof nested_p3 - 1},
              {nested_p4, sizeof nested_p4 - 1}};
    for (int i = 0; i < 5; i++) {
        ckpt_value *v;
        size_t used = 0;
        CHECK_EQ_INT(run_used(pk[i].p, pk[i].n, &v, &used), 0);
        CHECK_EQ_INT(used, pk[i].n);
        check_nested(v, i);
    }
}

TEST(test_shared_and_cyclic) {
    ckpt_value *v;
    /* l = [1]; {'x': l, 'y': l} at protocol 2: y is a BINGET of x */
    CHECK_EQ_INT(PK("\x80\x02}q\x00(X\x01\x00\x00\x00xq\x01]q\x02K\x01"
                    "aX\x01\x00\x00\x00yq\x03h\x02u.",
                    &v),
                 0);
    CHECK(get(v, "x") && get(v, "x") == get(v, "y"));
    /* l = []; l.append(l) */
    CHECK_EQ_INT(PK("\x80\x02]q\x00h\x00"
                    "a.",
                    &v),
                 0);
    CHECK(v && v->kind == CKPT_KIND_LIST && item(v, 0) == v);
}

TEST(test_stack_opcodes) {
    ckpt_value *v;
    CHECK_EQ_INT(PK("K\x01K\x02"
                    "0.",
                    &v),
                 0); /* POP */
    CHECK(is_int(v, 1));
    CHECK_EQ_INT(PK("K\x01(K\x02K\x03"
                    "1.",
                    &v),
                 0); /* POP_MARK */
    CHECK(is_int(v, 1));
    CHECK_EQ_INT(PK("K\x01(0.", &v), 0); /* POP of a bare MARK pops the mark */
    CHECK(is_int(v, 1));
    CHECK_EQ_INT(PK("K\x05"
                    "2\x86.",
                    &v),
                 0); /* DUP */
    CHECK(v && v->kind == CKPT_KIND_TUPLE && is_int(item(v, 0), 5) && item(v, 0) == item(v, 1));
    CHECK_EQ_INT(PK("(K\x01K\x02K\x03K\x04"
                    "d.",
                    &v),
                 0); /* DICT */
    CHECK(v && v->kind == CKPT_KIND_DICT && v->u.dict.n == 2 && is_int(v->u.dict.vals[1], 4));
    CHECK_EQ_INT(PK("(K\x01K\x02l.", &v), 0); /* LIST */
    CHECK(v && v->kind == CKPT_KIND_LIST && v->u.seq.n == 2 && is_int(item(v, 1), 2));
    CHECK_EQ_INT(PK("\x80\x04(K\x01\x91.", &v), 0); /* FROZENSET */
    CHECK(v && v->kind == CKPT_KIND_SET && is_int(item(v, 0), 1));
    CHECK_EQ_INT(PK("\x80\x04\x8f(K\x01K\x02\x90.", &v), 0); /* EMPTY_SET ADDITEMS */
    CHECK(v && v->kind == CKPT_KIND_SET && v->u.seq.n == 2);
    /* a frozenset has no add(): pickle.loads fails (AttributeError) */
    CHECK_EQ_INT(PK("\x80\x04(K\x01\x91(K\x02\x90.", &v), CKPT_E_FORMAT);
    CHECK_EQ_INT(PK("\x80\x04(K\x01\x91(\x90.", &v), 0); /* nothing to add: unchecked */
    CHECK_EQ_INT(PK("K\x01K\x02K\x03\x87.", &v), 0);     /* TUPLE3 */
    CHECK(v && v->kind == CKPT_KIND_TUPLE && v->u.seq.n == 3 && is_int(item(v, 2), 3));
    CHECK_EQ_INT(PK("](e.", &v), 0); /* APPENDS of nothing */
    CHECK(v && v->kind == CKPT_KIND_LIST && v->u.seq.n == 0);
    /* _pickle.c adds nothing without looking at the target */
    CHECK_EQ_INT(PK("K\x07(e.", &v), 0);
    CHECK(is_int(v, 7));
    CHECK_EQ_INT(PK("K\x07(u.", &v), 0);
    CHECK(is_int(v, 7));
    CHECK_EQ_INT(PK("K\x07(\x90.", &v), 0);
    CHECK(is_int(v, 7));
    CHECK_EQ_INT(PK("K\x07(K\x01"
                    "e.",
                    &v),
                 CKPT_E_FORMAT);
}

/* ---------------------------------------------------------------- memo */

/* Largest single allocation made through the hook while `counting`. */
static size_t alloc_largest;
static long alloc_budget = -1, alloc_count;

static void *test_malloc(void *u, size_t n) {
    (void)u;
    if (alloc_budget >= 0 && alloc_count++ >= alloc_budget) return NULL;
    if (n > alloc_largest) alloc_largest = n;
    return malloc(n);
}
static void *test_realloc(void *u, void *p, size_t n) {
    (void)u;
    if (alloc_budget >= 0 && alloc_count++ >= alloc_budget) return NULL;
    if (n > alloc_largest) alloc_largest = n;
    return realloc(p, n);
}
static void test_free(void *u, void *p) {
    (void)u;
    free(p);
}
static const ckpt_allocator test_allocator = {test_malloc, test_realloc, test_free, NULL};

TEST(test_memo) {
    ckpt_value *v;
    CHECK_EQ_INT(PK("K\x07p3\ng3\n\x86.", &v), 0); /* PUT/GET */
    CHECK(is_int(item(v, 1), 7));
    CHECK_EQ_INT(PK("K\x07q\x05h\x05\x86.", &v), 0); /* BINPUT/BINGET */
    CHECK(is_int(item(v, 1), 7));
    CHECK_EQ_INT(PK("K\x07r\x00\x00\x01\x00j\x00\x00\x01\x00\x86.", &v), 0);
    CHECK(is_int(item(v, 1), 7));
    CHECK_EQ_INT(PK("\x80\x04K\x07\x94K\x08\x94h\x00h\x01\x87.", &v), 0); /* MEMOIZE */
    CHECK(is_int(item(v, 1), 7) && is_int(item(v, 2), 8));
    CHECK_EQ_INT(PK("K\x01q\x00K\x02q\x00h\x00.", &v), 0); /* PUT replaces */
    CHECK(is_int(v, 2));
    CHECK_EQ_INT(PK("K\x01p9223372036854775807\ng9223372036854775807\n.", &v), 0);
    CHECK(is_int(v, 1));
    /* keys as PyLong_FromString(text, NULL, 10) reads them */
    CHECK_EQ_INT(PK("K\x01p 1_0 \ng010\n.", &v), 0);
    CHECK(is_int(v, 1));
    CHECK_EQ_INT(PK("K\x01p-0\ng+0\n.", &v), 0);
    CHECK(is_int(v, 1));
    CHECK_EQ_INT(PK("K\x01p5\x00junk\ng5\n.", &v), 0);
    CHECK(is_int(v, 1));
    CHECK_EQ_INT(PK("K\x01p0x1\n.", &v), CKPT_E_FORMAT);
    CHECK_EQ_INT(PK("K\x01p9223372036854775808\n.", &v), CKPT_E_FORMAT);
    CHECK_EQ_INT(PK("K\x01p\n.", &v), CKPT_E_FORMAT);
    CHECK_EQ_INT(PK("K\x01p0\ng-1\n.", &v), CKPT_E_FORMAT);
    CHECK_EQ_INT(PK("h\x09.", &v), CKPT_E_FORMAT);
    CHECK(strstr(last_message(), "memo key 9") != NULL);
    CHECK_EQ_INT(PK("g5\n.", &v), CKPT_E_FORMAT);
    CHECK_EQ_INT(PK("K\x01p-1\n.", &v), CKPT_E_FORMAT);
    CHECK_EQ_INT(PK("K\x01p18446744073709551616\n.", &v), CKPT_E_FORMAT);
    CHECK_EQ_INT(PK("q\x00.", &v), CKPT_E_FORMAT); /* PUT of nothing */
}

TEST(test_memo_huge_index) {
    ckpt_value *v;
    alloc_largest = 0;
    ckpt_set_allocator(&test_allocator);
    int rc = PK("K\x07r\xff\xff\xff\xffj\xff\xff\xff\xff\x86.", &v);
    ckpt_set_allocator(NULL);
    CHECK_EQ_INT(rc, 0);
    CHECK(is_int(item(v, 0), 7) && item(v, 0) == item(v, 1));
    CHECK(alloc_largest <= 65536 + 64); /* one arena block at most */
}

/* Writers' dense keys live in an array, others in a hash map; a key is in
 * one of them only, so len(memo) (MEMOIZE) stays right when the array
 * grows over a key hashed before. */
TEST(test_memo_dense_and_sparse) {
    /* PUT 1000 (hashed: the array is empty), then MEMOIZE x 1100: keys 1
     * to 999 go to the array, which grows over 1000; the MEMOIZEs from
     * then on all find len(memo) == 1000 and replace key 1000, as Python
     * does */
    size_t cap = 64 + 1100 * 4, n = 0;
    char *b = malloc(cap);
    CHECK(b != NULL);
    if (!b) return;
    memcpy(b + n,
           "\x80\x04K\x07r\xe8\x03\x00\x00"
           "0",
           10);
    n += 10;
    for (unsigned i = 1; i <= 1100; i++) {
        b[n++] = 'K';
        b[n++] = (char)(i % 251);
        b[n++] = '\x94';
        b[n++] = '0';
    }
    memcpy(b + n, "j\xe8\x03\x00\x00j\xe7\x03\x00\x00h\x01\x87.", 14);
    n += 14;
    ckpt_value *v;
    /* 1000 entries: within a limit of 1000 (the array then stops short
     * of key 1000), one too many for 999 */
    static const uint64_t memo_limits[] = {10000000, 1000};
    for (size_t i = 0; i < 2; i++) {
        limits.max_pickle_memo = memo_limits[i];
        CHECK_EQ_INT(run(b, n, &v), 0);
        CHECK(is_int(item(v, 0), 1100 % 251) && is_int(item(v, 1), 999 % 251) &&
              is_int(item(v, 2), 1));
    }
    limits.max_pickle_memo = 999;
    CHECK_EQ_INT(run(b, n, &v), CKPT_E_LIMIT);
    limits = (ckpt_limits)CKPT_LIMITS_INIT;
    free(b);
    /* keys 0, 64, 128, ... 2^23: too sparse for the array, nothing large */
    char sparse[256];
    n = 0;
    memcpy(sparse, "K\x07q\x00", 4);
    n = 4;
    for (uint32_t k = 64; k <= (1u << 23); k *= 2) {
        sparse[n++] = 'r';
        for (int i = 0; i < 4; i++) sparse[n++] = (char)(k >> (8 * i));
    }
    memcpy(sparse + n, "j\x00\x00\x80\x00.", 6);
    n += 6;
    alloc_largest = 0;
    ckpt_set_allocator(&test_allocator);
    int rc = run(sparse, n, &v);
    ckpt_set_allocator(NULL);
    CHECK_EQ_INT(rc, 0);
    CHECK(is_int(v, 7));
    CHECK(alloc_largest <= 65536 + 64);
}

/* The array is made of chunks of 4096 slots made when a key lands in
 * them: 10000 MEMOIZEd ints, then keys on each side of the chunk edges
 * read back; no allocation holds the whole array (80 KB), and a chunk that
 * cannot be made is CKPT_E_NOMEM at the PUT, never a crash. */
TEST(test_memo_chunks) {
    enum { N = 10000 };
    static const uint32_t keys[] = {0, 4095, 4096, 8191, 8192, N - 1};
    size_t cap = 16 + N * 6 + 6 * 5 + 8, n = 0;
    char *b = malloc(cap);
    CHECK(b != NULL);
    if (!b) return;
    memcpy(b, "\x80\x04(", 3);
    n = 3;
    for (uint32_t i = 0; i < N; i++) { /* BININT2 i, MEMOIZE, POP */
        b[n++] = 'M';
        b[n++] = (char)(i & 0xff);
        b[n++] = (char)(i >> 8);
        b[n++] = '\x94';
        b[n++] = '0';
    }
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
        b[n++] = 'j';
        for (int i = 0; i < 4; i++) b[n++] = (char)(keys[k] >> (8 * i));
    }
    memcpy(b + n, "t.", 2);
    n += 2;
    ckpt_value *v;
    alloc_largest = 0;
    ckpt_set_allocator(&test_allocator);
    int rc = run(b, n, &v);
    ckpt_set_allocator(NULL);
    CHECK_EQ_INT(rc, 0);
    CHECK(v && v->kind == CKPT_KIND_TUPLE && v->u.seq.n == 6);
    for (size_t k = 0; v && k < v->u.seq.n; k++) CHECK(is_int(item(v, k), keys[k]));
    CHECK(alloc_largest <= 65536 + 64);
    /* the allocation that makes the third chunk (key 8192) fails */
    int saw_nomem = 0;
    ckpt_set_allocator(&test_allocator);
    for (long budget = 0; budget < 40; budget++) {
        alloc_budget = budget;
        alloc_count = 0;
        rc = run(b, n, &v);
        CHECK(rc == 0 || rc == CKPT_E_NOMEM);
        saw_nomem |= rc == CKPT_E_NOMEM;
    }
    alloc_budget = -1;
    ckpt_set_allocator(NULL);
    CHECK(saw_nomem);
    free(b);
}

/* ---------------------------------------------------------------- frames */

TEST(test_frames) {
    ckpt_value *v;
    /* benign0_v4.pkl: a frame holding everything up to STOP */
    static const char framed[] = "\x80\x04\x95\x11\x00\x00\x00\x00\x00\x00\x00]\x94(\x8c\x01"
                                 "a"
                                 "\x94\x8c\x01"
                                 "b\x94\x8c\x01"
                                 "c\x94"
                                 "e.";
    CHECK_EQ_INT(PK(framed, &v), 0);
    CHECK(v && v->kind == CKPT_KIND_LIST && v->u.seq.n == 3 && is_str(item(v, 2), "c"));
    /* two frames back to back */
    CHECK_EQ_INT(
        PK("\x80\x04\x95\x01\x00\x00\x00\x00\x00\x00\x00N\x95\x01\x00\x00\x00\x00\x00\x00\x00.",
           &v),
        0);
    CHECK(v && v->kind == CKPT_KIND_NONE);
    /* an operand that crosses the end of its frame (cpython#154848) */
    base_offset = 500;
    CHECK_EQ_INT(PK("\x80\x04\x95\x03\x00\x00\x00\x00\x00\x00\x00\x8c\x04"
                    "abcd.",
                    &v),
                 CKPT_E_FORMAT);
    CHECK_EQ_INT(ckpt_error_last()->offset, 511);
    CHECK(strstr(last_message(), "SHORT_BINUNICODE") != NULL);
    base_offset = 0;
    /* a text operand whose newline lies past the frame */
    CHECK_EQ_INT(PK("\x80\x04\x95\x02\x00\x00\x00\x00\x00\x00\x00I1\n.", &v), CKPT_E_FORMAT);
    /* a frame opened inside another and ending within it: no change */
    CHECK_EQ_INT(
        PK("\x80\x04\x95\x0a\x00\x00\x00\x00\x00\x00\x00\x95\x01\x00\x00\x00\x00\x00\x00\x00N.",
           &v),
        0);
    CHECK(v && v->kind == CKPT_KIND_NONE);
    /* ... and one reaching past the outer frame: two readings */
    CHECK_EQ_INT(
        PK("\x80\x04\x95\x0a\x00\x00\x00\x00\x00\x00\x00\x95\x02\x00\x00\x00\x00\x00\x00\x00N.",
           &v),
        CKPT_E_FORMAT);
    /* the data of BINBYTES/BYTEARRAY8 is one run for every reader */
    CHECK_EQ_INT(PK("\x80\x04\x95\x04\x00\x00\x00\x00\x00\x00\x00"
                    "C\x05"
                    "abcde.",
                    &v),
                 0);
    CHECK(v && v->kind == CKPT_KIND_BYTES && v->u.s.len == 5);
    CHECK_EQ_INT(
        PK("\x80\x05\x95\x0b\x00\x00\x00\x00\x00\x00\x00\x96\x03\x00\x00\x00\x00\x00\x00\x00"
           "ab"
           "c.",
           &v),
        0);
    /* ... but not BINUNICODE's */
    CHECK_EQ_INT(PK("\x80\x04\x95\x07\x00\x00\x00\x00\x00\x00\x00X\x05\x00\x00\x00"
                    "abcde.",
                    &v),
                 CKPT_E_FORMAT);
    /* an operand right after the frame's last byte is after the frame */
    CHECK_EQ_INT(PK("\x80\x04\x95\x01\x00\x00\x00\x00\x00\x00\x00K\x01.", &v), 0);
    CHECK(is_int(v, 1));
    CHECK_EQ_INT(PK("\x80\x04\x95\x01\x00\x00\x00\x00\x00\x00\x00I12\n.", &v), 0);
    CHECK(is_int(v, 12));
    /* a frame longer than the input */
    CHECK_EQ_INT(PK("\x80\x04\x95\xff\x00\x00\x00\x00\x00\x00\x00N.", &v), CKPT_E_TRUNCATED);
    CHECK_EQ_INT(PK("\x80\x04\x95\xff\xff\xff\xff\xff\xff\xff\xffN.", &v), CKPT_E_TRUNCATED);
}

/* ---------------------------------------------------------------- globals */

TEST(test_stack_global) {
    ckpt_value *v;
    /* module and name from the memo, the second time through BINGET */
    CHECK_EQ_INT(PK("\x80\x04\x8c\x0b"
                    "collections\x94\x8c\x0b"
                    "OrderedDict\x94\x93)R"
                    "h\x00h\x01\x93)R\x86.",
                    &v),
                 0);
    CHECK(v && v->kind == CKPT_KIND_TUPLE && item(v, 1) && item(v, 1)->kind == CKPT_KIND_DICT);
    CHECK_EQ_INT(count_events(PK_EV_GLOBAL), 2);
    const ev_copy *e = find_event(PK_EV_GLOBAL, "collections", "OrderedDict");
    CHECK(e->allowed == 1 && e->symbolic == 0 && e->opcode == 0x93);
    /* non-str operands: a symbolic reference, reported, never allowed */
    CHECK_EQ_INT(PK("\x80\x04K\x01K\x02\x93)R.", &v), 0);
    CHECK(v && v->kind == CKPT_KIND_OBJECT && !strcmp(v->u.obj.name, "?"));
    e = find_event(PK_EV_GLOBAL, "?", "?");
    CHECK(e->symbolic == 1 && e->allowed == 0 && e->offset == 6);
    e = find_event(PK_EV_CALL, "?", "?");
    CHECK(e->symbolic == 1 && e->allowed == 0);
    CHECK_EQ_INT(PK("\x80\x04K\x01\x8c\x06system\x93.", &v), 0);
    CHECK(v && v->kind == CKPT_KIND_GLOBAL_ && !strcmp(v->u.global.name, "system"));
    CHECK(has_event(PK_EV_GLOBAL, "?", "system"));
    CHECK_EQ_INT(PK("\x80\x04\x8c\x02os\x93.", &v), CKPT_E_FORMAT); /* one operand */
}

TEST(test_name_mapping) {
    ckpt_value *v;
    CHECK_EQ_INT(PK("c__builtin__\neval\n.", &v), 0);
    CHECK(v && v->kind == CKPT_KIND_GLOBAL_ && !strcmp(v->u.global.qualname, "builtins.eval"));
    CHECK(find_event(PK_EV_GLOBAL, "builtins", "eval")->allowed == 0);
    CHECK_EQ_INT(PK("ccopy_reg\n_reconstructor\n.", &v), 0);
    CHECK_EQ_STR(v->u.global.qualname, "copyreg._reconstructor");
    CHECK_EQ_INT(PK("cexceptions\nStandardError\n.", &v), 0);
    CHECK_EQ_STR(v->u.global.qualname, "builtins.Exception");
    CHECK_EQ_INT(PK("cexceptions\nValueError\n.", &v), 0);
    CHECK_EQ_STR(v->u.global.qualname, "builtins.ValueError");
    /* only Python 2's exceptions leave "exceptions": exceptions.set is no
     * builtins.set (Python fails: no module named 'exceptions'), so the
     * set it would build is an opaque object, not allowlisted data */
    CHECK_EQ_INT(PK("cexceptions\nset\n.", &v), 0);
    CHECK_EQ_STR(v->u.global.qualname, "exceptions.set");
    CHECK(find_event(PK_EV_GLOBAL, "exceptions", "set")->allowed == 0);
    CHECK_EQ_INT(PK("cTkinter\nTk\n.", &v), 0);
    CHECK_EQ_STR(v->u.global.qualname, "tkinter.Tk");
    CHECK_EQ_INT(PK("ccommands\ngetoutput\n.", &v), 0);
    CHECK_EQ_STR(v->u.global.qualname, "subprocess.getoutput");
    CHECK_EQ_INT(PK("c__builtin__\nreduce\n.", &v), 0);
    CHECK_EQ_STR(v->u.global.qualname, "functools.reduce");
    /* Python maps only below protocol 3 */
    CHECK_EQ_INT(PK("\x80\x03"
                    "c__builtin__\neval\n.",
                    &v),
                 0);
    CHECK_EQ_STR(v->u.global.qualname, "__builtin__.eval");
    /* names Python could not import */
    CHECK_EQ_INT(PK("cos\x00x\nsystem\n.", &v), CKPT_E_FORMAT);
    CHECK_EQ_INT(PK("c\xff\nx\n.", &v), CKPT_E_FORMAT);
    CHECK_EQ_INT(PK("cos\nsystem", &v), CKPT_E_TRUNCATED);
}

TEST(test_allowlist) {
    CHECK(ckpt_builders_allowed("collections", "OrderedDict"));
    CHECK(ckpt_builders_allowed("torch._utils", "_rebuild_tensor_v2"));
    CHECK(ckpt_builders_allowed("torch", "FloatStorage"));
    CHECK(ckpt_builders_allowed("torch.cuda", "HalfStorage"));
    CHECK(ckpt_builders_allowed("torch.storage", "UntypedStorage"));
    CHECK(ckpt_builders_allowed("torch", "UntypedStorage"));
    CHECK(ckpt_builders_allowed("torch", "bfloat16"));
    CHECK(ckpt_builders_allowed("torch", "float8_e4m3fn"));
    CHECK(ckpt_builders_allowed("numpy._core.multiarray", "_reconstruct"));
    CHECK(ckpt_builders_allowed("numpy.core.multiarray", "scalar"));
    CHECK(ckpt_builders_allowed("_codecs", "encode"));
    CHECK(!ckpt_builders_allowed("os", "system"));
    CHECK(!ckpt_builders_allowed("builtins", "eval"));
    CHECK(!ckpt_builders_allowed("__builtin__", "set")); /* names are mapped first */
    CHECK(!ckpt_builders_allowed("torch", "load"));
    CHECK(!ckpt_builders_allowed("torch.serialization", "load"));
    CHECK(!ckpt_builders_allowed("torch", "FooStorage"));
    CHECK(!ckpt_builders_allowed("torch.nn", "Module"));
    CHECK(!ckpt_builders_allowed("numpy", "load"));
}

/* ---------------------------------------------------------------- malformed */

TEST(test_type_confusion) {
    ckpt_value *v;
    static const struct {
        const char *pk;
        size_t n;
        const char *op;
    } bad[] = {
#define BAD(lit, op) {lit, sizeof(lit) - 1, op}
        BAD("]K\x01K\x02s.", "SETITEM"),   /* SETITEM on a list */
        BAD("](K\x01K\x02u.", "SETITEMS"), /* SETITEMS on a list */
        BAD(")K\x01"
            "a.",
            "APPEND"), /* APPEND on a tuple */
        BAD("}(K\x01"
            "e.",
            "APPENDS"),                  /* APPENDS on a dict */
        BAD("](K\x01\x90.", "ADDITEMS"), /* ADDITEMS on a list */
        BAD("}]K\x01s.", "SETITEM"),     /* unhashable key */
        BAD("(K\x01"
            "d.",
            "DICT"),                                /* odd items */
        BAD("}(K\x01u.", "SETITEMS"),               /* odd items */
        BAD("(o.", "OBJ"),                          /* no class */
        BAD("cos\nsystem\n]R.", "REDUCE"),          /* args not a tuple */
        BAD("cfoo\nBar\n)K\x01\x92.", "NEWOBJ_EX"), /* kwargs not a dict */
        BAD("K\x01K\x02"
            "b.",
            "BUILD"), /* state on an int */
        /* state on a plain dict, which has no __dict__ (pickle.loads
         * fails); None or (None, {}) would pass */
        BAD("}}b.", "BUILD"),
        BAD("}N}X\x01\x00\x00\x00"
            "aK\x01s\x86"
            "b.",
            "BUILD"),
        /* SETITEM on an object whose items are a list (ADDITEMS) */
        BAD("\x80\x04\x8c\x01"
            "a\x8c\x01"
            "b\x93)\x81(K\x01\x90}bK\x02K\x03s.",
            "SETITEM"),
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        v = (ckpt_value *)1;
        int rc = run(bad[i].pk, bad[i].n, &v);
        CHECK_EQ_INT(rc, CKPT_E_FORMAT);
        CHECK(v == NULL);
        CHECK(strncmp(last_message(), bad[i].op, strlen(bad[i].op)) == 0);
        if (harness_cur_failed) {
            fprintf(stderr, "  case %zu: %s\n", i, last_message());
            break;
        }
    }
    CHECK_EQ_INT(PK("K\x01Nb.", &v), 0); /* a None state sets nothing, as in Python */
    CHECK(is_int(v, 1));
    /* a builtin value (no __setstate__, no __dict__) takes None or (None,
     * {}), as pickle.loads does; any other state fails there */
    static const struct {
        const char *p;
        size_t n;
        int rc;
    } builds[] = {
#define B(lit, rc) {lit, sizeof(lit) - 1, rc}
        B("]N}\x86"
          "b.",
          0),
        B(")N}\x86"
          "b.",
          0),
        B("K\x01N}\x86"
          "b.",
          0),
        B("NN}\x86"
          "b.",
          0),
        B("]NN\x86"
          "b.",
          CKPT_E_FORMAT), /* slot state is not a dictionary */
        B("]}N\x86"
          "b.",
          CKPT_E_FORMAT),
        B("]}}\x86"
          "b.",
          CKPT_E_FORMAT),         /* no __dict__ */
        B("]}b.", CKPT_E_FORMAT), /* no __dict__ */
        B("]K\x01}\x86"
          "b.",
          CKPT_E_FORMAT), /* state is not a dictionary */
        B("]N}X\x01\x00\x00\x00"
          "aK\x01s\x86"
          "b.",
          CKPT_E_FORMAT), /* no attribute to set */
#undef B
    };
    for (size_t i = 0; i < sizeof builds / sizeof *builds; i++) {
        CHECK_EQ_INT(run(builds[i].p, builds[i].n, &v), builds[i].rc);
        if (builds[i].rc) CHECK(strstr(last_message(), "takes no state") != NULL);
    }
    /* an OrderedDict (it has a __dict__) takes None, a dict or a (None or
     * dict, dict) pair; pickle.loads refuses any other state */
#define OD "ccollections\nOrderedDict\n)R"
    CHECK_EQ_INT(PK(OD "N}\x86"
                       "b.",
                    &v),
                 0);
    CHECK_EQ_INT(PK(OD "K\x01"
                       "b.",
                    &v),
                 CKPT_E_FORMAT);
    CHECK(strstr(last_message(), "a collections.OrderedDict takes None, a dict") != NULL);
    CHECK_EQ_INT(PK(OD "NN\x86"
                       "b.",
                    &v),
                 CKPT_E_FORMAT); /* slot state is not a dictionary */
    CHECK_EQ_INT(PK(OD "]"
                       "b.",
                    &v),
                 CKPT_E_FORMAT);
#undef OD
}

TEST(test_underflow_and_bad_opcodes) {
    ckpt_value *v;
    static const struct {
        const char *pk;
        size_t n;
        int rc;
    } bad[] = {
        BAD("a", CKPT_E_FORMAT),     /* APPEND on an empty stack */
        BAD("0.", CKPT_E_FORMAT),    /* POP */
        BAD(".", CKPT_E_FORMAT),     /* STOP */
        BAD("t.", CKPT_E_FORMAT),    /* no MARK */
        BAD("1.", CKPT_E_FORMAT),    /* POP_MARK without MARK */
        BAD("(.", CKPT_E_FORMAT),    /* STOP with only a mark */
        BAD("N(.", CKPT_E_FORMAT),   /* STOP does not pop below the mark */
        BAD("](Na.", CKPT_E_FORMAT), /* APPEND to a list below the mark */
        BAD("N(a.", CKPT_E_FORMAT),  /* APPEND below the mark */
        BAD("](\x85"
            "e.",
            CKPT_E_FORMAT),           /* TUPLE1 across the mark */
        BAD("]((e1.", CKPT_E_FORMAT), /* APPENDS target below the outer mark */
        BAD("\x85.", CKPT_E_FORMAT),
        BAD("\x87.", CKPT_E_FORMAT),
        BAD("\xff.", CKPT_E_FORMAT),
        BAD("\x00.", CKPT_E_FORMAT),
        BAD("\x80\x06N.", CKPT_E_FORMAT), /* protocol 6 */
        BAD("\x97.", CKPT_E_FORMAT),      /* NEXT_BUFFER: no buffers given */
        BAD("N\x98.", CKPT_E_FORMAT),     /* READONLY_BUFFER over None */
        BAD("X\x01\x00\x00\x00"
            "a\x98.",
            CKPT_E_FORMAT),                         /* ... over a str */
        BAD("T\xff\xff\xff\xff", CKPT_E_FORMAT),    /* negative BINSTRING length */
        BAD("\x8b\xff\xff\xff\xff", CKPT_E_FORMAT), /* negative LONG4 length */
        BAD("Iabc\n.", CKPT_E_FORMAT),
        BAD("I\n.", CKPT_E_FORMAT),
        BAD("I0x\n.", CKPT_E_FORMAT),
        BAD("I08\n.", CKPT_E_FORMAT),   /* strtol stops at 8, int() refuses 08 */
        BAD("I010 \n.", CKPT_E_FORMAT), /* strtol leaves the blank, int() refuses 010 */
        BAD("I07777777777777777777777\n.", CKPT_E_FORMAT), /* octal overflow */
        BAD("I1__0\n.", CKPT_E_FORMAT),
        BAD("I_1\n.", CKPT_E_FORMAT),
        BAD("I1_\n.", CKPT_E_FORMAT),
        BAD("L010\n.", CKPT_E_FORMAT),
        BAD("L12LL\n.", CKPT_E_FORMAT),
        BAD("LL\n.", CKPT_E_FORMAT),
        BAD("L0x\n.", CKPT_E_FORMAT),
        BAD("F 1.5\n.", CKPT_E_FORMAT),
        BAD("F1.5 \n.", CKPT_E_FORMAT),
        BAD("F1_0\n.", CKPT_E_FORMAT),
        BAD("F1e\n.", CKPT_E_FORMAT),
        BAD("F1e400\n.", CKPT_E_FORMAT), /* OverflowError */
        BAD("Finfinit\n.", CKPT_E_FORMAT),
        BAD("Fabc\n.", CKPT_E_FORMAT),
        BAD("F\n.", CKPT_E_FORMAT),
        BAD("P\xff\n.", CKPT_E_FORMAT),
        BAD("", CKPT_E_TRUNCATED),
        BAD("N", CKPT_E_TRUNCATED),
        BAD("X\xff\xff\xff\xff", CKPT_E_TRUNCATED),
        BAD("\x8d\xff\xff\xff\xff\xff\xff\xff\x7f", CKPT_E_TRUNCATED),
        BAD("\x8e\xff\xff\xff\xff\xff\xff\xff\xff", CKPT_E_TRUNCATED),
        BAD("\x96\x00\x00\x00\x00\x00\x00\x00\x80", CKPT_E_TRUNCATED),
        BAD("\x8a\xff\x01", CKPT_E_TRUNCATED),
        BAD("J\x01\x02", CKPT_E_TRUNCATED),
        BAD("I12", CKPT_E_TRUNCATED),
#undef BAD
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        v = (ckpt_value *)1;
        CHECK_EQ_INT(run(bad[i].pk, bad[i].n, &v), bad[i].rc);
        CHECK(v == NULL);
        if (harness_cur_failed) {
            fprintf(stderr, "  case %zu: %s\n", i, last_message());
            break;
        }
    }
    CHECK_EQ_INT(PK("\xff.", &v), CKPT_E_FORMAT);
    CHECK(strstr(last_message(), "unknown opcode 0xff") != NULL);
}

TEST(test_long_operands_bounded) {
    ckpt_value *v;
    /* LONG4 over CKPT_BIGINT_MAX_BYTES; text ints over Python's 4300 digits */
    size_t n = 5 + CKPT_BIGINT_MAX_BYTES + 1 + 1;
    unsigned char *buf = calloc(1, n);
    buf[0] = 0x8b;
    buf[1] = (unsigned char)((CKPT_BIGINT_MAX_BYTES + 1) & 0xff);
    buf[2] = (unsigned char)((CKPT_BIGINT_MAX_BYTES + 1) >> 8);
    buf[n - 1] = '.';
    CHECK_EQ_INT(run(buf, n, &v), 0); /* zeros: sign extension of 0 */
    CHECK(is_int(v, 0));
    buf[n - 2] = 0x01;
    CHECK_EQ_INT(run(buf, n, &v), CKPT_E_LIMIT);
    scan_only = 1; /* a big int is data */
    CHECK_EQ_INT(run(buf, n, &v), 0);
    CHECK(v && v->kind == CKPT_KIND_INT);
    scan_only = 0;
    free(buf);
    char text[4310];
    text[0] = 'I';
    memset(text + 1, '7', 4301);
    memcpy(text + 4302, "\n.", 2);
    CHECK_EQ_INT(run(text, 4304, &v), CKPT_E_LIMIT);
    text[4301] = '\n'; /* 4300 digits */
    text[4302] = '.';
    CHECK_EQ_INT(run(text, 4303, &v), 0);
    const char *d = v ? ckpt_value_int_decimal(v) : NULL;
    CHECK(d && strlen(d) == 4300 && d[0] == '7' && d[4299] == '7');
}

/* Text operands as _pickle.c reads them (load_int: strtol then
 * PyLong_FromString; load_long; load_float: PyOS_string_to_double), each
 * value checked against CPython 3.11. */
TEST(test_text_operands_as_cpython) {
    static const struct {
        const char *pk;
        size_t n;
        int64_t x;
    } ints[] = {
#define T(lit, x) {lit, sizeof(lit) - 1, x}
        T("I010\n.", 8),
        T("I0x10\n.", 16),
        T("I0o10\n.", 8),
        T("I0b101\n.", 5),
        T("I1_000\n.", 1000),
        T("I\x00\n.", 0),
        T("I12\x00junk\n.", 12),
        T("I -0x10\n.", -16),
        T("I 5 \n.", 5),
        T("I+7\n.", 7),
        T("I-00\n.", 0),
        T("I0_0\n.", 0),
        T("I-9223372036854775808\n.", INT64_MIN),
        T("L0x10L\n.", 16),
        T("L 5 L\n.", 5),
        T("L5\x00zzL\n.", 5),
        T("L0x_1\n.", 1),
        T("L-0b11\n.", -3),
        T("L12\n.", 12),
        T("L0_0\n.", 0),
        T("L0O17L\n.", 15),
#undef T
    };
    ckpt_value *v;
    for (size_t i = 0; i < sizeof ints / sizeof *ints; i++) {
        CHECK_EQ_INT(run(ints[i].pk, ints[i].n, &v), 0);
        CHECK(is_int(v, ints[i].x));
        if (harness_cur_failed) {
            fprintf(stderr, "  case %zu: %s\n", i, ints[i].pk);
            break;
        }
    }
    /* I00/I01 and any two-byte line strtol reads as 0 or 1 are bools */
    CHECK_EQ_INT(PK("I 1\n.", &v), 0);
    CHECK(v && v->kind == CKPT_KIND_BOOL && v->u.b == 1);
    CHECK_EQ_INT(PK("I00\n.", &v), 0);
    CHECK(v && v->kind == CKPT_KIND_BOOL && v->u.b == 0);
    /* big values: strtol overflows, int() reads them */
    CHECK_EQ_INT(PK("I99999999999999999999\n.", &v), 0);
    CHECK_EQ_STR(ckpt_value_int_decimal(v), "99999999999999999999");
    CHECK_EQ_INT(PK("L0x1950a86a20f9469cfc6cL\n.", &v), 0); /* torch's legacy magic */
    CHECK_EQ_STR(ckpt_value_int_decimal(v), "119547037146038801333356");
    CHECK_EQ_INT(PK("L-0x1_0000_0000_0000_0000\n.", &v), 0);
    CHECK_EQ_STR(ckpt_value_int_decimal(v), "-18446744073709551616");
    CHECK_EQ_INT(PK("L00_00012_3\n.", &v), CKPT_E_FORMAT);
    CHECK_EQ_INT(PK("I1_2_3_4_5_6_7_8_9_0_1_2_3_4_5_6_7_8_9_0\n.", &v), 0);
    CHECK_EQ_STR(ckpt_value_int_decimal(v), "12345678901234567890");
    /* floats */
    CHECK_EQ_INT(PK("F1.5\x00junk\n.", &v), 0);
    CHECK(v && v->kind == CKPT_KIND_FLOAT && v->u.f == 1.5);
    CHECK_EQ_INT(PK("F+.5e-3\n.", &v), 0);
    CHECK(v && v->u.f == 0.0005);
    CHECK_EQ_INT(PK("F-InFiNiTy\n.", &v), 0);
    CHECK(v && v->u.f < -1e308);
    CHECK_EQ_INT(PK("Fnan\n.", &v), 0);
    CHECK(v && v->u.f != v->u.f);
    CHECK_EQ_INT(PK("F1e-400\n.", &v), 0); /* underflow is 0 */
    CHECK(v && v->u.f == 0.0);
    CHECK_EQ_INT(PK("F2.\n.", &v), 0);
    CHECK(v && v->u.f == 2.0);
    /* READONLY_BUFFER over bytes keeps them */
    CHECK_EQ_INT(PK("C\x02"
                    "ab\x98.",
                    &v),
                 0);
    CHECK(v && v->kind == CKPT_KIND_BYTES && v->u.s.len == 2);
}

TEST(test_error_offsets) {
    ckpt_value *v;
    base_offset = 1000;
    CHECK_EQ_INT(PK("NNs.", &v), CKPT_E_FORMAT);
    const ckpt_error *e = ckpt_error_last();
    CHECK_EQ_INT(e->code, CKPT_E_FORMAT);
    CHECK_EQ_INT(e->offset, 1002);
    CHECK_EQ_STR(e->file, "test.pkl");
    CHECK_EQ_STR(e->member, "data.pkl");
    CHECK_EQ_INT(PK("NN", &v), CKPT_E_TRUNCATED);
    CHECK_EQ_INT(ckpt_error_last()->offset, 1002);
    base_offset = 0;
}

TEST(test_limits) {
    ckpt_value *v;
    limits.max_pickle_stack = 3;
    CHECK_EQ_INT(PK("NNN0.", &v), 0);
    CHECK_EQ_INT(PK("NNNN", &v), CKPT_E_LIMIT);
    CHECK_EQ_INT(PK("N((N", &v), CKPT_E_LIMIT); /* marks count too */
    CHECK_EQ_INT(PK("NN((", &v), CKPT_E_LIMIT);
    CHECK(strncmp(last_message(), "MARK", 4) == 0);
    limits = (ckpt_limits)CKPT_LIMITS_INIT;
    limits.max_pickle_memo = 2;
    CHECK_EQ_INT(PK("K\x01\x94\x94q\x00.", &v), 0);
    CHECK_EQ_INT(PK("K\x01\x94\x94\x94.", &v), CKPT_E_LIMIT);
    limits = (ckpt_limits)CKPT_LIMITS_INIT;
    limits.max_pickle_ops = 4;
    CHECK_EQ_INT(PK("NN0.", &v), 0);
    CHECK_EQ_INT(PK("NNN0.", &v), CKPT_E_LIMIT);
    /* builder copies count: set() of 3 items is 10 opcodes + 3 */
    limits.max_pickle_ops = 13;
    CHECK_EQ_INT(PK("c__builtin__\nset\n](K\x01K\x02K\x03"
                    "e\x85R.",
                    &v),
                 0);
    CHECK(v && v->kind == CKPT_KIND_SET && v->u.seq.n == 3);
    limits.max_pickle_ops = 12;
    CHECK_EQ_INT(PK("c__builtin__\nset\n](K\x01K\x02K\x03"
                    "e\x85R.",
                    &v),
                 CKPT_E_LIMIT);
    /* keys that are floats but not integral are compared with no earlier
     * key (only an equal float, of one text, is one key with them): a
     * dict of 100k such keys took 5e9 comparisons, refused at max_ops.
     * 10 opcodes, nothing more; an integral float is still compared */
    limits.max_pickle_ops = 10;
    CHECK_EQ_INT(PK("}(G?\xe0\x00\x00\x00\x00\x00\x00K\x01G?\xf8\x00\x00\x00\x00\x00\x00K\x02"
                    "G@\x04\x00\x00\x00\x00\x00\x00K\x03u.",
                    &v),
                 0);
    CHECK(v && v->kind == CKPT_KIND_DICT && v->u.dict.n == 3 && is_int(v->u.dict.vals[2], 3));
    limits.max_pickle_ops = 100;
    CHECK_EQ_INT(PK("}(\x88K\x01G?\xf0\x00\x00\x00\x00\x00\x00K\x02u.", &v), 0);
    CHECK(v && v->u.dict.n == 1 && v->u.dict.keys[0]->kind == CKPT_KIND_BOOL &&
          is_int(v->u.dict.vals[0], 2));
    limits = (ckpt_limits)CKPT_LIMITS_INIT;
    /* no limits at all: the defaults apply */
    ckpt_arena_free(&arena);
    pk_options o = {.arena = &arena};
    size_t used;
    CHECK_EQ_INT(ckpt_pickle_run(&v, &used, (const uint8_t *)"K\x05.", 3, &o), 0);
    CHECK(is_int(v, 5) && used == 3);
    o.arena = NULL;
    CHECK_EQ_INT(ckpt_pickle_run(&v, &used, (const uint8_t *)"N.", 2, &o), CKPT_E_INVALID_ARG);
}

/* ---------------------------------------------------------------- calls */

TEST(test_dangerous_call_is_opaque) {
    ckpt_value *v;
    /* malicious2_v0.pkl: posix.system('ls -la') at protocol 0 */
    CHECK_EQ_INT(PK("cposix\nsystem\np0\n(Vls -la\np1\ntp2\nRp3\n.", &v), 0);
    CHECK(v && v->kind == CKPT_KIND_OBJECT && !strcmp(v->u.obj.name, "posix.system"));
    CHECK(v && v->u.obj.args && v->u.obj.args->kind == CKPT_KIND_TUPLE &&
          is_str(item(v->u.obj.args, 0), "ls -la"));
    const ev_copy *g = find_event(PK_EV_GLOBAL, "posix", "system");
    const ev_copy *c = find_event(PK_EV_CALL, "posix", "system");
    CHECK(g->allowed == 0 && g->symbolic == 0 && g->opcode == 'c' && g->offset == 0);
    CHECK(c->allowed == 0 && c->opcode == 'R' && c->offset == 33);
    CHECK(c->nargs == 1); /* the call carries its arguments */
    /* INST and OBJ call too */
    CHECK_EQ_INT(PK("(S'x'\nios\nsystem\n.", &v), 0);
    CHECK(v && v->kind == CKPT_KIND_OBJECT && !strcmp(v->u.obj.name, "os.system") &&
          is_str(item(v->u.obj.args, 0), "x"));
    CHECK(has_event(PK_EV_GLOBAL, "os", "system") && has_event(PK_EV_CALL, "os", "system"));
    CHECK_EQ_INT(PK("(cos\nsystem\nS'x'\no.", &v), 0);
    CHECK(v && v->kind == CKPT_KIND_OBJECT && !strcmp(v->u.obj.name, "os.system") &&
          v->u.obj.args->u.seq.n == 1);
    CHECK(find_event(PK_EV_CALL, "os", "system")->opcode == 'o');
    CHECK_EQ_INT(PK("(icollections\nOrderedDict\n.", &v), 0); /* allowlisted INST */
    CHECK(v && v->kind == CKPT_KIND_DICT);
    /* calling a non-reference: opaque "?" */
    CHECK_EQ_INT(PK("K\x01)R.", &v), 0);
    CHECK(v && v->kind == CKPT_KIND_OBJECT && !strcmp(v->u.obj.name, "?"));
    CHECK(find_event(PK_EV_CALL, "?", "?")->symbolic == 1);
}

TEST(test_opaque_objects) {
    ckpt_value *v;
    CHECK_EQ_INT(PK("\x80\x02"
                    "cfoo\nBar\n)\x81K\x01"
                    "a(K\x02K\x03"
                    "e}X\x01\x00\x00\x00kK\x04sb"
                    "cfoo\nBaz\n)\x81X\x01\x00\x00\x00kK\x05s\x86.",
                    &v),
                 0);
    const ckpt_value *a = item(v, 0), *b = item(v, 1);
    CHECK(a && a->kind == CKPT_KIND_OBJECT && !strcmp(a->u.obj.name, "foo.Bar"));
    CHECK(a && a->u.obj.args && a->u.obj.args->u.seq.n == 0);
    CHECK(a && a->u.obj.items && a->u.obj.items->kind == CKPT_KIND_LIST &&
          a->u.obj.items->u.seq.n == 3 && is_int(item(a->u.obj.items, 2), 3));
    CHECK(a && is_int(get(a->u.obj.state, "k"), 4));
    CHECK(b && b->u.obj.items && is_int(get(b->u.obj.items, "k"), 5));
    const ev_copy *e = find_event(PK_EV_BUILD, "foo", "Bar");
    CHECK(e->allowed == 0 && e->opcode == 'b');
    /* NEWOBJ_EX keeps its kwargs as a last argument */
    CHECK_EQ_INT(PK("\x80\x04\x8c\x03"
                    "foo\x8c\x03"
                    "Bar\x93K\x01\x85}\x8c\x01kK\x02s\x92.",
                    &v),
                 0);
    CHECK(v && v->kind == CKPT_KIND_OBJECT && v->u.obj.args->u.seq.n == 2 &&
          is_int(item(v->u.obj.args, 0), 1) && is_int(get(item(v->u.obj.args, 1), "k"), 2));
    CHECK(find_event(PK_EV_CALL, "foo", "Bar")->opcode == 0x92);
    CHECK_EQ_INT(PK("\x80\x04\x8c\x03"
                    "foo\x8c\x03"
                    "Bar\x93K\x01\x85}\x92.",
                    &v),
                 0);
    CHECK(v && v->u.obj.args->u.seq.n == 1);
}

TEST(test_build_on_reference) {
    ckpt_value *v;
    /* BUILD applied to a module or class (allowlist poisoning) is reported,
     * even on an allowlisted reference, and changes nothing */
    CHECK_EQ_INT(PK("cos\npath\n}b.", &v), 0);
    CHECK(v && v->kind == CKPT_KIND_GLOBAL_);
    const ev_copy *e = find_event(PK_EV_BUILD, "os", "path");
    CHECK(e->allowed == 0 && e->offset == 10 && e->on_reference == 1);
    CHECK_EQ_INT(PK("ctorch._utils\n_rebuild_tensor_v2\n}b.", &v), 0);
    e = find_event(PK_EV_BUILD, "torch._utils", "_rebuild_tensor_v2");
    CHECK(e->allowed == 0 && e->on_reference == 1);
    /* a symbolic reference (STACK_GLOBAL on an int) is a reference too */
    CHECK_EQ_INT(PK("\x80\x04K\x01\x8c\x01x\x93}b.", &v), 0);
    CHECK(find_event(PK_EV_BUILD, "?", "x")->on_reference == 1);
    /* instances are not: an object, plain data */
    CHECK_EQ_INT(PK("\x80\x02"
                    "cfoo\nBar\n)R}b.",
                    &v),
                 0);
    e = find_event(PK_EV_BUILD, "foo", "Bar");
    CHECK(e->on_reference == 0 && e->allowed == 0);
    CHECK_EQ_INT(PK("\x80\x02"
                    "ccollections\nOrderedDict\n)R}b.",
                    &v),
                 0);
    e = find_event(PK_EV_BUILD, "", "");
    CHECK(e->on_reference == 0 && e->allowed == 1);
    CHECK_EQ_INT(PK("}Nb.", &v), 0);
    CHECK_EQ_INT(PK("}N}\x86"
                    "b.",
                    &v),
                 0);
    CHECK(v && v->kind == CKPT_KIND_DICT && v->u.dict.n == 0);
}

TEST(test_ext_and_persid) {
    ckpt_value *v;
    CHECK_EQ_INT(PK("\x80\x02\x82\x05)R.", &v), 0);
    const ev_copy *e = find_event(PK_EV_GLOBAL, "?", "ext:5");
    CHECK(e->symbolic == 1 && e->allowed == 0);
    CHECK(v && v->kind == CKPT_KIND_OBJECT && !strcmp(v->u.obj.name, "?"));
    CHECK_EQ_INT(PK("\x83\x01\x01.", &v), 0);
    CHECK(v && v->kind == CKPT_KIND_GLOBAL_ && !strcmp(v->u.global.name, "ext:257"));
    CHECK_EQ_INT(PK("\x84\xff\xff\xff\xff.", &v), 0);
    CHECK(v && !strcmp(v->u.global.name, "ext:-1"));
    /* without persistent_load a persistent id fails, as pickle.load
     * (a plain pickle, a legacy file's magic or storage keys, DCP
     * .metadata) raises UnpicklingError */
    CHECK_EQ_INT(PK("Pabc\n.", &v), CKPT_E_FORMAT);
    CHECK(strstr(last_message(), "no persistent_load"));
    CHECK_EQ_INT(PK("K\x05Q.", &v), CKPT_E_FORMAT);
    CHECK(count_events(PK_EV_PERSID) == 1 && events[0].kind == PK_EV_PERSID &&
          events[0].opcode == 'Q');
    /* a failing persistent_load fails the run with its own error */
    persistent_load = storage16;
    CHECK_EQ_INT(PK("K\x05Q.", &v), CKPT_E_FORMAT);
    CHECK_EQ_STR(last_message(), "pid is not a tuple");
    persistent_load = NULL;
}

/* ---------------------------------------------------------------- builders */

TEST(test_container_builders) {
    ckpt_value *v;
    /* a state dict: OrderedDict() + SETITEMS + BUILD({'_metadata': ...}) */
    CHECK_EQ_INT(PK("\x80\x02"
                    "ccollections\nOrderedDict\n)R(X\x01\x00\x00\x00"
                    "aK\x01X\x01\x00\x00\x00"
                    "bK\x02u}X\x09\x00\x00\x00_metadata}sb.",
                    &v),
                 0);
    CHECK(v && v->kind == CKPT_KIND_DICT && v->u.dict.n == 2 && is_int(get(v, "b"), 2));
    const ev_copy *e = find_event(PK_EV_BUILD, "", "");
    CHECK(e->allowed == 1);
    CHECK_EQ_INT(PK("ccollections\nOrderedDict\n]((K\x01K\x02t(K\x03K\x04te\x85R.", &v), 0);
    CHECK(v && v->kind == CKPT_KIND_DICT && v->u.dict.n == 2 && is_int(v->u.dict.keys[1], 3) &&
          is_int(v->u.dict.vals[1], 4));
    CHECK_EQ_INT(v->dict_class, CKPT_DICT_ORDERED); /* the class from the allowlist entry */
    CHECK_EQ_INT(PK("ccollections\nOrderedDict\n](K\x01"
                    "e\x85R.",
                    &v),
                 CKPT_E_FORMAT);
    CHECK_EQ_INT(PK("ccollections\nCounter\n}X\x01\x00\x00\x00"
                    "aK\x02s\x85R.",
                    &v),
                 0);
    CHECK(is_int(get(v, "a"), 2));
    CHECK_EQ_INT(v->dict_class, CKPT_DICT_COUNTER);
    CHECK_EQ_INT(PK("cbuiltins\ndict\n)R.", &v), 0);
    CHECK(v && v->kind == CKPT_KIND_DICT);
    CHECK_EQ_INT(v->dict_class, CKPT_DICT_PLAIN);
    CHECK_EQ_INT(PK("ccollections\nCounter\n]\x85R.", &v), 0); /* counting: not modelled */
    CHECK(v && v->kind == CKPT_KIND_OBJECT && !strcmp(v->u.obj.name, "collections.Counter"));
    CHECK_EQ_INT(PK("c__builtin__\nset\n](K\x01K\x02"
                    "e\x85R.",
                    &v),
                 0);
    CHECK(v && v->kind == CKPT_KIND_SET && v->u.seq.n == 2 && is_int(item(v, 1), 2));
    CHECK(!ckpt_value_class(v));
    CHECK_EQ_INT(PK("c__builtin__\nfrozenset\n)R.", &v), 0);
    CHECK(v && v->kind == CKPT_KIND_SET && v->u.seq.n == 0);
    CHECK(v && !strcmp(ckpt_value_class(v), "builtins.frozenset"));
    CHECK_EQ_INT(PK("c__builtin__\ntuple\n](K\x01"
                    "e\x85R.",
                    &v),
                 0);
    CHECK(v && v->kind == CKPT_KIND_TUPLE && is_int(item(v, 0), 1));
    CHECK(v && !ckpt_value_class(v));
    /* torch.load gives back a torch.Size and a torch.device, not a tuple
     * and a str: the value says so */
    CHECK_EQ_INT(PK("ctorch\nSize\n(K\x02K\x03t\x85R.", &v), 0);
    CHECK(v && v->kind == CKPT_KIND_TUPLE && v->u.seq.n == 2 && is_int(item(v, 1), 3));
    CHECK(v && !strcmp(ckpt_value_class(v), "torch.Size"));
    CHECK_EQ_INT(PK("ctorch\nSize\n)\x85R.", &v), 0);
    CHECK(v && v->kind == CKPT_KIND_TUPLE && v->u.seq.n == 0 &&
          !strcmp(ckpt_value_class(v), "torch.Size"));
    /* torch.Size(('a',)) raises TypeError in torch.load */
    CHECK_EQ_INT(PK("ctorch\nSize\nX\x01\x00\x00\x00"
                    "a\x85\x85R.",
                    &v),
                 CKPT_E_FORMAT);
    CHECK(strstr(ckpt_error_last()->message, "torch.Size: item 0 is a str, not an int"));
    CHECK_EQ_INT(PK("ctorch\ndevice\nX\x04\x00\x00\x00"
                    "cudaK\x00\x86R.",
                    &v),
                 0);
    CHECK(is_str(v, "cuda:0"));
    CHECK(v && !strcmp(ckpt_value_class(v), "torch.device"));
    /* the device's text is its own value: the str it was built from
     * (memoized, used again) stays a str */
    CHECK_EQ_INT(PK("(X\x03\x00\x00\x00"
                    "cpu\x94"
                    "ctorch\ndevice\nh\x00\x85Rh\x00l.",
                    &v),
                 0);
    CHECK(v && v->kind == CKPT_KIND_LIST && v->u.seq.n == 3 && is_str(item(v, 1), "cpu") &&
          !strcmp(ckpt_value_class(item(v, 1)), "torch.device") && is_str(item(v, 2), "cpu") &&
          !ckpt_value_class(item(v, 0)) && !ckpt_value_class(item(v, 2)));
    CHECK_EQ_INT(PK("c__builtin__\ncomplex\nG?\xf0\x00\x00\x00\x00\x00\x00G@"
                    "\x00\x00\x00\x00\x00\x00\x00\x86R.",
                    &v),
                 0);
    CHECK(v && v->kind == CKPT_KIND_OBJECT && !strcmp(v->u.obj.name, "builtins.complex") &&
          item(v->u.obj.args, 1)->u.f == 2.0);
    CHECK(find_event(PK_EV_CALL, "builtins", "complex")->allowed == 1);
}

/* torch.device is checked as c10::Device checks it; every case is
 * pickle.loads's (a value: the same device; else it raises). Index 128
 * and up wrap to a negative 8-bit DeviceIndex: torch 1.13 raises, 2.13
 * gives a device of index 65408 or raises from one run to the next. */
TEST(test_torch_device_rules) {
    static const struct {
        const char *pk;
        size_t n;
        const char *text, *msg;
    } cases[] = {
#define DEV(pk, text, msg) {pk, sizeof(pk) - 1, text, msg}
        DEV("\x80\x02\x63torch\ndevice\nX\x03\x00\x00\x00\x63puq\x00\x85q\x01R.", "cpu", NULL),
        DEV("\x80\x02\x63torch\ndevice\nX\x05\x00\x00\x00\x63pu:1q\x00\x85q\x01R.", "cpu:1", NULL),
        DEV("\x80\x02\x63torch\ndevice\nX\x04\x00\x00\x00\x63udaq\x00K\x00\x86q\x01R.", "cuda:0",
            NULL),
        DEV("\x80\x02\x63torch\ndevice\nX\x04\x00\x00\x00\x63udaq\x00N\x86q\x01R.", "cuda", NULL),
        DEV("\x80\x02\x63torch\ndevice\nX\x08\x00\x00\x00\x63uda:127q\x00\x85q\x01R.", "cuda:127",
            NULL),
        DEV("\x80\x02\x63torch\ndevice\nX\x08\x00\x00\x00\x63uda:255q\x00\x85q\x01R.", "cuda",
            NULL),
        DEV("\x80\x02\x63torch\ndevice\nX\x04\x00\x00\x00\x63udaq\x00M\x00\x01\x86q\x01R.",
            "cuda:0", NULL),
        DEV("\x80\x02\x63torch\ndevice\nX\x04\x00\x00\x00metaq\x00\x85q\x01R.", "meta", NULL),
        DEV("\x80\x02\x63torch\ndevice\nX\x0f\x00\x00\x00privateuseone:3q\x00\x85q\x01R.",
            "privateuseone:3", NULL),
        DEV("\x80\x02\x63torch\ndevice\nX\x03\x00\x00\x00\x66ooq\x00\x85q\x01R.", NULL,
            "unknown device type"),
        DEV("\x80\x02\x63torch\ndevice\nX\x03\x00\x00\x00\x43PUq\x00\x85q\x01R.", NULL,
            "unknown device type"),
        DEV("\x80\x02\x63torch\ndevice\nX\x00\x00\x00\x00q\x00\x85q\x01R.", NULL,
            "expected a device string"),
        DEV("\x80\x02\x63torch\ndevice\nX\x05\x00\x00\x00\x63uda:q\x00\x85q\x01R.", NULL,
            "expected a device string"),
        DEV("\x80\x02\x63torch\ndevice\nX\x04\x00\x00\x00 cpuq\x00\x85q\x01R.", NULL,
            "expected a device string"),
        DEV("\x80\x02\x63torch\ndevice\nX\x07\x00\x00\x00\x63uda:01q\x00\x85q\x01R.", NULL,
            "expected a device string"),
        DEV("\x80\x02\x63torch\ndevice\nX\x08\x00\x00\x00\x63uda:0:1q\x00\x85q\x01R.", NULL,
            "expected a device string"),
        DEV("\x80\x02\x63torch\ndevice\nX\x0f\x00\x00\x00\x63uda:2147483648q\x00\x85q\x01R.", NULL,
            "does not fit 32 bits"),
        DEV("\x80\x02\x63torch\ndevice\nX\x08\x00\x00\x00\x63uda:128q\x00\x85q\x01R.", NULL,
            "is negative as"),
        DEV("\x80\x02\x63torch\ndevice\nX\x04\x00\x00\x00\x63udaq\x00K\x80\x86q\x01R.", NULL,
            "is negative as"),
        DEV("\x80\x02\x63torch\ndevice\nX\x06\x00\x00\x00\x63uda:1q\x00K\x00\x86q\x01R.", NULL,
            "must not include an index"),
        DEV("\x80\x02\x63torch\ndevice\nX\x06\x00\x00\x00\x63uda:1q\x00N\x86q\x01R.", NULL,
            "must not include an index"),
        DEV("\x80\x02\x63torch\ndevice\nX\x04\x00\x00\x00\x63udaq\x00J\xff\xff\xff\xff\x86q\x01R.",
            NULL, "below 0"),
        DEV("\x80\x02\x63torch\ndevice\nX\x04\x00\x00\x00\x63udaq\x00\x8a\x09\x00\x00\x00\x00\x00"
            "\x00\x00\x00\x01\x86q\x01R.",
            NULL, "beyond 64 bits"),
        DEV("\x80\x02\x63torch\ndevice\nX\x04\x00\x00\x00\x63udaq\x00\x88\x86q\x01R.", NULL,
            "expected (type) or (type, index)"),
        DEV("\x80\x02\x63torch\ndevice\nX\x04\x00\x00\x00\x63udaq\x00G?"
            "\xf0\x00\x00\x00\x00\x00\x00\x86q\x01R.",
            NULL, "expected (type) or (type, index)"),
        DEV("\x80\x02\x63torch\ndevice\n)R.", NULL, "expected (type) or (type, index)"),
        DEV("\x80\x02\x63torch\ndevice\nX\x04\x00\x00\x00\x63udaq\x00K\x00K\x00\x87q\x01R.", NULL,
            "expected (type) or (type, index)"),
#undef DEV
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        ckpt_value *v = NULL;
        int rc = run(cases[i].pk, cases[i].n, &v);
        if (cases[i].text) {
            CHECK_EQ_INT(rc, 0);
            CHECK(is_str(v, cases[i].text) && !strcmp(ckpt_value_class(v), "torch.device"));
        } else {
            CHECK_EQ_INT(rc, CKPT_E_FORMAT);
            CHECK(strstr(last_message(), cases[i].msg));
        }
    }
    /* torch.Size takes a bool as 0 or 1 and refuses an int beyond 64 bits */
    ckpt_value *v;
    CHECK_EQ_INT(PK("\x80\x02\x63torch\nSize\n]q\x00(\x88\x89K\x07\x65\x85q\x01R.", &v), 0);
    CHECK(v && v->kind == CKPT_KIND_TUPLE && v->u.seq.n == 3 && is_int(item(v, 0), 1) &&
          is_int(item(v, 1), 0) && is_int(item(v, 2), 7));
    CHECK_EQ_INT(PK("\x80\x02\x63torch\nSize\n]q\x00\x8a\x09\x00\x00\x00\x00\x00\x00\x00"
                    "\x80\x00\x61\x85q\x01R.",
                    &v),
                 CKPT_E_FORMAT);
    CHECK(strstr(last_message(), "torch.Size: item 0 is an int beyond 64 bits"));
    /* BYTEARRAY8 (protocol 5) builds a bytearray: given back as one, and
     * unhashable as a dict key or set item (pickle.loads: TypeError) */
    CHECK_EQ_INT(PK("\x80\x05\x96\x02\x00\x00\x00\x00\x00\x00\x00\x61\x62.", &v), 0);
    CHECK(is_bytes(v, "ab", 2) && !strcmp(ckpt_value_class(v), "builtins.bytearray"));
    CHECK_EQ_INT(PK("\x80\x05}\x96\x01\x00\x00\x00\x00\x00\x00\x00zK\x01s.", &v), CKPT_E_FORMAT);
    CHECK(strstr(last_message(), "expected a hashable key, got a bytearray"));
    CHECK_EQ_INT(PK("\x80\x05\x8f(\x96\x01\x00\x00\x00\x00\x00\x00\x00z\x90.", &v), CKPT_E_FORMAT);
    /* READONLY_BUFFER over it: a memoryview that hashes the bytearray */
    CHECK_EQ_INT(PK("\x80\x05}\x96\x01\x00\x00\x00\x00\x00\x00\x00z\x98K\x01s.", &v),
                 CKPT_E_FORMAT);
}

/* NEWOBJ is cls.__new__(cls, *args): list, set, dict, OrderedDict,
 * Counter and bytearray ignore the arguments, a rebuild function, a
 * dtype or a qscheme is no class (UnpicklingError); the builtins refuse
 * two arguments or one that is not iterable. Each case is pickle.loads's
 * (the value's kind and size, or it raises). */
TEST(test_newobj_and_arity) {
    static const struct {
        const char *pk;
        size_t n;
        int rc, kind;
        size_t items;
    } cases[] = {
#define NEW(pk, rc, kind, items) {pk, sizeof(pk) - 1, rc, kind, items}
        NEW("\x80\x02\x63\x62uiltins\nlist\n]K\x01\x61\x85\x81.", 0, CKPT_KIND_LIST, 0), /* [] */
        NEW("\x80\x02\x63\x62uiltins\nset\n]K\x01\x61\x85\x81.", 0, CKPT_KIND_SET, 0),   /* set() */
        NEW("\x80\x02\x63__builtin__\ndict\n}K\x01K\x02s\x85\x81.", 0, CKPT_KIND_DICT, 0), /* {} */
        NEW("\x80\x02\x63\x63ollections\nOrderedDict\n]K\x01K\x02\x86\x61\x85\x81.", 0,
            CKPT_KIND_DICT, 0), /* OrderedDict() */
        NEW("\x80\x02\x63\x62uiltins\nbytearray\nC\x02\x61\x62\x85\x81.", 0, CKPT_KIND_BYTES,
            0), /* bytearray(b'') */
        NEW("\x80\x02\x63\x62uiltins\ntuple\n]K\x01\x61\x85\x81.", 0, CKPT_KIND_TUPLE,
            1), /* (1,) */
        NEW("\x80\x02\x63torch\nSize\n]K\x03\x61\x85\x81.", 0, CKPT_KIND_TUPLE,
            1), /* torch.Size([3]) */
        NEW("\x80\x02\x63torch._utils\n_rebuild_tensor_v2\n)\x81.", CKPT_E_FORMAT, 0, 0),
        NEW("\x80\x02\x63_codecs\nencode\nX\x01\x00\x00\x00\x61X\x06\x00\x00\x00latin1\x86\x81.",
            CKPT_E_FORMAT, 0, 0),
        NEW("\x80\x02\x63torch\nfloat32\n)\x81.", CKPT_E_FORMAT, 0, 0),
        NEW("\x80\x02\x63torch\nper_tensor_affine\n)\x81.", CKPT_E_FORMAT, 0, 0),
        NEW("\x80\x02\x63\x62uiltins\nset\n]K\x01\x61]K\x02\x61\x86R.", CKPT_E_FORMAT, 0, 0),
        NEW("\x80\x02\x63\x62uiltins\nlist\nN\x85R.", CKPT_E_FORMAT, 0, 0),
        NEW("\x80\x02\x63\x62uiltins\ndict\nK\x05\x85R.", CKPT_E_FORMAT, 0, 0),
        NEW("\x80\x02\x63torch\nSize\nG?\xf0\x00\x00\x00\x00\x00\x00\x85R.", CKPT_E_FORMAT, 0, 0),
        NEW("\x80\x02\x63\x63ollections\nCounter\nN\x85R.", 0, CKPT_KIND_DICT, 0), /* Counter() */
#undef NEW
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        ckpt_value *v = NULL;
        CHECK_EQ_INT(run(cases[i].pk, cases[i].n, &v), cases[i].rc);
        if (cases[i].rc) continue;
        CHECK(v && v->kind == cases[i].kind);
        size_t n = !v                           ? SIZE_MAX
                   : v->kind == CKPT_KIND_DICT  ? v->u.dict.n
                   : v->kind == CKPT_KIND_BYTES ? v->u.s.len
                                                : v->u.seq.n;
        CHECK_EQ_INT((int)n, (int)cases[i].items);
    }
    ckpt_value *v;
    CHECK_EQ_INT(PK("\x80\x02\x63torch._utils\n_rebuild_tensor_v2\n)\x81.", &v), CKPT_E_FORMAT);
    CHECK(strstr(last_message(), "NEWOBJ: torch._utils._rebuild_tensor_v2 is no class"));
}

TEST(test_bytes_builders) {
    ckpt_value *v;
    /* protocol-2 bytes: _codecs.encode('\xffa', 'latin1') */
    CHECK_EQ_INT(PK("\x80\x02"
                    "c_codecs\nencode\nX\x03\x00\x00\x00\xc3\xbf"
                    "aX\x06\x00\x00\x00latin1\x86R.",
                    &v),
                 0);
    CHECK(is_bytes(v,
                   "\xff"
                   "a",
                   2));
    CHECK_EQ_INT(
        PK("c_codecs\nencode\nX\x03\x00\x00\x00\xe2\x82\xacX\x06\x00\x00\x00latin1\x86R.", &v),
        CKPT_E_FORMAT);
    CHECK(strstr(last_message(), "U+20AC") != NULL);
    CHECK_EQ_INT(PK("c_codecs\nencode\nX\x03\x00\x00\x00\xe2\x82\xac\x85R.", &v), 0); /* utf-8 */
    CHECK(is_bytes(v, "\xe2\x82\xac", 3));
    CHECK_EQ_INT(PK("c_codecs\nencode\nX\x01\x00\x00\x00"
                    "aX\x05\x00\x00\x00rot13\x86R.",
                    &v),
                 0);
    CHECK(v && v->kind == CKPT_KIND_OBJECT && !strcmp(v->u.obj.name, "_codecs.encode"));
    CHECK_EQ_INT(PK("c_codecs\nencode\nX\x01\x00\x00\x00"
                    "aX\x06\x00\x00\x00latin1X\x06\x00\x00\x00ignore\x87R.",
                    &v),
                 0); /* other error handlers are not modelled */
    CHECK(v && v->kind == CKPT_KIND_OBJECT && v->u.obj.args->u.seq.n == 3);
    CHECK_EQ_INT(PK("c_codecs\nencode\nX\x01\x00\x00\x00"
                    "aX\x06\x00\x00\x00latin1X\x06\x00\x00\x00strict\x87R.",
                    &v),
                 0);
    CHECK(is_bytes(v, "a", 1));
    CHECK_EQ_INT(PK("c_codecs\nencode\nX\x02\x00\x00\x00\xc3\xa9X\x05\x00\x00\x00"
                    "ascii\x86R.",
                    &v),
                 CKPT_E_FORMAT);
    /* bytearray(text, 'latin-1') is a valid call too */
    CHECK_EQ_INT(PK("c__builtin__\nbytearray\np0\n(V\xff"
                    "a\np1\nVlatin-1\np2\ntp3\nRp4\n.",
                    &v),
                 0);
    CHECK(is_bytes(v,
                   "\xff"
                   "a",
                   2));
    CHECK_EQ_INT(PK("c__builtin__\nlist\n(K\x01K\x02t\x85R.", &v), 0);
    CHECK(v && v->kind == CKPT_KIND_LIST && v->u.seq.n == 2 && is_int(item(v, 1), 2));
    CHECK_EQ_INT(PK("c__builtin__\nbytes\n)R.", &v), 0);
    CHECK(is_bytes(v, "", 0));
    CHECK(v && !ckpt_value_class(v));
    /* pickle.dumps(bytearray(b'\xffa'), 2): a bytearray, as torch.load
     * gives it back */
    CHECK_EQ_INT(PK("\x80\x02"
                    "c__builtin__\nbytearray\nq\x00"
                    "c_codecs\nencode\nq\x01X\x03\x00\x00\x00"
                    "\xc3\xbf"
                    "aq\x02X\x06\x00\x00\x00latin1q\x03\x86q\x04Rq\x05\x85q\x06Rq\x07.",
                    &v),
                 0);
    CHECK(is_bytes(v,
                   "\xff"
                   "a",
                   2));
    CHECK(v && !strcmp(ckpt_value_class(v), "builtins.bytearray"));
    /* {bytearray(b'z'): 1}: TypeError in Python, a bytearray is unhashable */
    CHECK_EQ_INT(PK("\x80\x03}cbuiltins\nbytearray\nC\x01z\x85RK\x01s.", &v), CKPT_E_FORMAT);
    CHECK(strstr(last_message(), "expected a hashable key, got a bytearray"));
    /* Python hashes every dict key and set item, a tuple's items with it
     * (each case checked against pickle.loads: TypeError, unhashable) */
    static const struct {
        const char *pk, *msg;
    } unhashable[] = {
        {"\x80\x02}K\x01]K\x02"
         "a\x86K\x03s.",
         "hashable key, got a list inside a tuple"},
        {"\x80\x02}K\x01K\x02}\x86\x86K\x03s.", "hashable key, got a dict inside a tuple"},
        {"\x80\x04}\x8fK\x01s.", "hashable key, got a set"},
        {"\x80\x04\x8f(]\x90.", "ADDITEMS: expected a hashable set item, got a list"},
        {"\x80\x04(K\x01]\x86\x91.", "FROZENSET: expected a hashable set item, got a list inside"},
        {"\x80\x02"
         "c__builtin__\nset\n]]K\x01"
         "aa\x85R.",
         "builtins.set: expected a hashable item"},
        {"\x80\x02"
         "c__builtin__\ndict\n]]K\x01"
         "aK\x02\x86"
         "a\x85R.",
         "builtins.dict: expected a hashable key, got a list"},
        /* an ndarray before its BUILD, a slice (Python 3.11, the oracles') */
        {"\x80\x02}cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\nI0\n\x85"
         "C\x01\x62\x87RK\x01s.",
         "hashable key, got a numpy.ndarray"},
        {"\x80\x02}c__builtin__\nslice\nK\x01\x85RK\x01s.", "hashable key, got a builtins.slice"},
    };
    for (size_t i = 0; i < sizeof unhashable / sizeof unhashable[0]; i++) {
        CHECK_EQ_INT(run(unhashable[i].pk, strlen(unhashable[i].pk), &v), CKPT_E_FORMAT);
        CHECK(strstr(last_message(), unhashable[i].msg));
    }
    /* one key to Python, two names to ckpt: {1: 1, True: 2} is {1: 2},
     * {0.0: 1, -0.0: 2} is {0.0: 2}, dict([(1.0, 1), (1, 2)]) is {1.0: 2}
     * (the first key, the last value); NaNs stay apart (pickle.loads) */
    CHECK_EQ_INT(PK("\x80\x02}(K\x01K\x01\x88K\x02u.", &v), 0);
    CHECK(v && v->u.dict.n == 1 && is_int(v->u.dict.keys[0], 1) && is_int(v->u.dict.vals[0], 2));
    CHECK_EQ_INT(PK("\x80\x02}(G\x00\x00\x00\x00\x00\x00\x00\x00K\x01"
                    "G\x80\x00\x00\x00\x00\x00\x00\x00K\x02u.",
                    &v),
                 0);
    CHECK(v && v->u.dict.n == 1 && v->u.dict.keys[0]->u.f == 0.0 &&
          !signbit(v->u.dict.keys[0]->u.f) && is_int(v->u.dict.vals[0], 2));
    CHECK_EQ_INT(PK("\x80\x02}(K\x01K\x01G?\xf8\x00\x00\x00\x00\x00\x00K\x02\x88K\x03u.", &v), 0);
    CHECK(v && v->u.dict.n == 2 && is_int(v->u.dict.vals[0], 3)); /* {1: 3, 1.5: 2} */
    CHECK_EQ_INT(PK("\x80\x02\x63__builtin__\ndict\n]G?\xf0\x00\x00\x00\x00\x00\x00K\x01\x86"
                    "aK\x01K\x02\x86\x61\x85R.",
                    &v),
                 0);
    CHECK(v && v->u.dict.n == 1 && v->u.dict.keys[0]->kind == CKPT_KIND_FLOAT &&
          is_int(v->u.dict.vals[0], 2));
    CHECK_EQ_INT(PK("\x80\x02}(G\x7f\xf8\x00\x00\x00\x00\x00\x00K\x01"
                    "G\x7f\xf8\x00\x00\x00\x00\x00\x00K\x02u.",
                    &v),
                 0);
    CHECK(v && v->u.dict.n == 2);
    /* {np.array([7], dtype=np.int8): 1}: a built ndarray is unhashable too */
    CHECK_EQ_INT(
        PK("\x80\x02}cnumpy._core.multiarray\n_reconstruct\ncnumpy\nndarray\nK\x00\x85"
           "\x63_codecs\nencode\nq\x00X\x01\x00\x00\x00\x62X\x06\x00\x00\x00latin1q\x01\x86R"
           "\x87R(K\x01K\x01\x85\x63numpy\ndtype\nX\x02\x00\x00\x00i1\x89\x88\x87R(K\x03X\x01"
           "\x00\x00\x00|NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00tb\x89h\x00X\x01\x00\x00\x00"
           "\x07h\x01\x86RtbK\x01s.",
           &v),
        CKPT_E_FORMAT);
    CHECK(strstr(last_message(), "hashable key, got a numpy.ndarray"));
    /* hashable: a tuple of ints, of bytes, of a frozenset */
    CHECK_EQ_INT(run("\x80\x02}K\x01K\x02\x86K\x03s.", 12, &v), 0);
    CHECK_EQ_INT(run("\x80\x03}K\x01"
                     "C\x01x\x86K\x03s.",
                     13, &v),
                 0);
    CHECK_EQ_INT(run("\x80\x02}K\x01"
                     "c__builtin__\nfrozenset\n)R\x86K\x03s.",
                     35, &v),
                 0);
    /* a tuple key holding one tuple 2^40 times through the memo: a limit,
     * never a walk of 2^40 values */
    {
        static const char step[] = "0h\x00h\x00\x86q\x00"; /* t = (t, t) */
        char deep[512];
        size_t n = 0;
        memcpy(deep, "\x80\x02}K\x00\x85q\x00", 8);
        n += 8;
        for (int k = 0; k < 40; k++) {
            memcpy(deep + n, step, sizeof step - 1);
            n += sizeof step - 1;
        }
        memcpy(deep + n, "K\x01s.", 4);
        n += 4;
        CHECK_EQ_INT(run(deep, n, &v), CKPT_E_LIMIT);
        CHECK(strstr(last_message(), "65536 values"));
    }
    /* bytearray(b): the bytes b (memoized, used again) stay bytes */
    CHECK_EQ_INT(PK("\x80\x03(C\x01z\x94"
                    "cbuiltins\nbytearray\nh\x00\x85Rh\x00l.",
                    &v),
                 0);
    CHECK(v && v->kind == CKPT_KIND_LIST && v->u.seq.n == 3 && is_bytes(item(v, 1), "z", 1) &&
          !strcmp(ckpt_value_class(item(v, 1)), "builtins.bytearray") &&
          !ckpt_value_class(item(v, 0)) && !ckpt_value_class(item(v, 2)));
}

/* torch.save({True: 1, **{i: 0 for i in range(2, N)}}): a key has a twin
 * (1 and True) only among keys of another kind, so the int keys are not
 * compared with every earlier key; before, the work was quadratic and
 * refused at the opcode limit (64 per input byte: about 3.5M here, for
 * 200M comparisons). The twins still go as Python's dict puts them: a
 * later 1 sets True's value, a 3.0 the value of 3. */
TEST(test_mixed_number_keys_are_linear) {
    enum { N = 20000, BATCH = 1000 };
    size_t cap = 64 + (size_t)N * 8 + N / BATCH * 2, n = 0;
    unsigned char *buf = malloc(cap);
    ckpt_value *v = NULL;
    CHECK(buf != NULL);
    if (!buf) return;
    memcpy(buf, "\x80\x02}(\x88K\x01", 7); /* {(True: 1 */
    n = 7;
    for (uint32_t i = 2; i < N; i++) {
        if (i % BATCH == 0) buf[n++] = 'u', buf[n++] = '(';
        buf[n++] = 'J';
        for (int b = 0; b < 4; b++) buf[n++] = (unsigned char)(i >> (8 * b));
        buf[n++] = 'K', buf[n++] = 0;
    }
    /* 1: 7 and 3.0: 9, then SETITEMS, STOP */
    memcpy(buf + n, "K\x01K\x07G\x40\x08\0\0\0\0\0\0K\x09u.", 17);
    n += 17;
    CHECK_EQ_INT(run(buf, n, &v), 0);
    CHECK(v && v->kind == CKPT_KIND_DICT && v->u.dict.n == N - 1);
    CHECK(v && v->u.dict.keys[0]->kind == CKPT_KIND_BOOL && is_int(v->u.dict.vals[0], 7));
    CHECK(v && is_int(v->u.dict.keys[2], 3) && is_int(v->u.dict.vals[2], 9));
    free(buf);
}

/* Every value knows the offset of the opcode that built it (value.h
 * pk_at): the first push, so a memo GET keeps it, relative to the pickle,
 * which ckpt_value_at makes absolute. */
TEST(test_values_know_their_opcode) {
    ckpt_value *v;
    /* 0 PROTO, 2 EMPTY_LIST, 3 BINPUT 0, 5 MARK, 6 BININT2 300, 9
     * SHORT_BINUNICODE "ab", 13 BINGET 0, 15 TUPLE, 16 APPEND, 17 STOP. Ints
     * above 256 throughout: a machine may share smaller ones among opcodes
     * (as CPython does), which then have no offset (CKPT_PK_SHARED). */
    CHECK_EQ_INT(PK("\x80\x02]q\x00(M\x2c\x01\x8c\x02"
                    "abh\x00ta.",
                    &v),
                 0);
    CHECK(v && v->kind == CKPT_KIND_LIST && v->u.seq.n == 1);
    if (!v || v->kind != CKPT_KIND_LIST || v->u.seq.n != 1) return;
    const ckpt_value *t = v->u.seq.items[0];
    CHECK_EQ_INT(ckpt_value_at(v, 0), 2);
    CHECK(t->kind == CKPT_KIND_TUPLE && t->u.seq.n == 3);
    CHECK_EQ_INT(ckpt_value_at(t, 0), 15);
    CHECK_EQ_INT(ckpt_value_at(t->u.seq.items[0], 0), 6);
    CHECK_EQ_INT(ckpt_value_at(t->u.seq.items[1], 0), 9);
    CHECK(t->u.seq.items[2] == v); /* the GET at 13 pushed the list built at 2 */
    CHECK_EQ_INT(ckpt_value_at(t->u.seq.items[2], 1000), 1002);
    CHECK_EQ_INT(ckpt_value_at(NULL, 0), CKPT_NO_OFFSET);
    ckpt_value none = {.kind = CKPT_KIND_NONE}; /* from no pickle */
    CHECK_EQ_INT(ckpt_value_at(&none, 0), CKPT_NO_OFFSET);
    none.pk_at = CKPT_PK_SHARED; /* pushed by many opcodes, built by none */
    CHECK_EQ_INT(ckpt_value_at(&none, 0), CKPT_NO_OFFSET);
    /* scan mode's one int placeholder is such a value; its tuple is not */
    scan_only = 1;
    CHECK_EQ_INT(PK("\x80\x02K\x05\x85.", &v), 0);
    scan_only = 0;
    CHECK(v && v->kind == CKPT_KIND_TUPLE && v->u.seq.n == 1);
    if (!v || v->kind != CKPT_KIND_TUPLE || v->u.seq.n != 1) return;
    CHECK_EQ_INT(ckpt_value_at(v, 0), 4);
    CHECK_EQ_INT(ckpt_value_at(v->u.seq.items[0], 0), CKPT_NO_OFFSET);
}

/* ---------------------------------------------------------------- torch */

#define PID                                                                                        \
    "(X\x07\x00\x00\x00"                                                                           \
    "storagectorch\nFloatStorage\nX\x01\x00\x00\x00"                                               \
    "0X\x03\x00\x00\x00"                                                                           \
    "cpuK\x04tQ"
#define HOOKS "ccollections\nOrderedDict\n)R"
#define V2(offset, size, stride, rg)                                                               \
    "ctorch._utils\n_rebuild_tensor_v2\n(" PID offset size stride rg HOOKS "tR"
#define V2_2x2 V2("K\x00", "K\x02K\x02\x86", "K\x02K\x01\x86", "\x89")

/* A rebuild's argument error is at the argument's own opcode (absolute:
 * base_offset added), not the REDUCE that calls it. */
static void rebuild_error_at(const char *pickle, size_t len, const char *arg, size_t arg_len,
                             int code) {
    ckpt_value *v;
    const char *at = memmem(pickle, len, arg, arg_len);
    CHECK(at != NULL);
    base_offset = 4096;
    CHECK_EQ_INT(run(pickle, len, &v), code);
    base_offset = 0;
    CHECK_EQ_INT(ckpt_error_last()->offset, 4096 + (at - pickle));
}
#define REBUILD_ERROR_AT(lit, arg, code)                                                           \
    rebuild_error_at(lit, sizeof(lit) - 1, arg, sizeof(arg) - 1, code)

TEST(test_tensor_rebuild_blames_the_argument) {
    persistent_load = storage16;
    /* a negative size: the BININT of -300 (ints above 256 in magnitude, as
     * in test_values_know_their_opcode) */
    REBUILD_ERROR_AT("\x80\x02" V2("K\x00", "J\xd4\xfe\xff\xff\x85", "K\x01\x85", "\x89") ".",
                     "J\xd4\xfe\xff\xff", CKPT_E_FORMAT);
    /* a str requires_grad */
    REBUILD_ERROR_AT("\x80\x02" V2("K\x00", "K\x02K\x02\x86", "K\x02K\x01\x86", "\x8c\x01y") ".",
                     "\x8c\x01y", CKPT_E_FORMAT);
    /* a stride one shorter than the size: the stride's TUPLE1 */
    REBUILD_ERROR_AT("\x80\x02" V2("K\x00", "K\x02K\x02\x86", "K\x07\x85", "\x89") ".", "\x85\x89",
                     CKPT_E_FORMAT);
    CHECK(strstr(ckpt_error_last()->message, "expected size and stride of equal length"));
    /* a float storage offset */
    REBUILD_ERROR_AT("\x80\x02" V2("G\x3f\xf0\x00\x00\x00\x00\x00\x00", "K\x02K\x02\x86",
                                   "K\x02K\x01\x86", "\x89") ".",
                     "G\x3f\xf0", CKPT_E_FORMAT);
    persistent_load = NULL;
}

/* Reader mode reuses the memory of the argument tuples and storage
 * values a tensor rebuild consumed (pickle.c "reuse"); what a later
 * opcode can still reach is kept: the memo keys some GET reads, whatever
 * a DUP copied. Each case has a second record after the first, whose
 * tuples of the same sizes would take a wrongly released block (and
 * under ASan the read of a released one is reported). */
#define V2S(storage, size, stride)                                                                 \
    "ctorch._utils\n_rebuild_tensor_v2\n(" storage "K\x00" size stride "\x89" HOOKS "tR"
#define PID_BODY                                                                                   \
    "(X\x07\x00\x00\x00"                                                                           \
    "storagectorch\nFloatStorage\nX\x01\x00\x00\x00"                                               \
    "0X\x03\x00\x00\x00"                                                                           \
    "cpuK\x04t"

static int is_dims(const ckpt_value *v, uint64_t a, uint64_t b) {
    return v && v->kind == CKPT_KIND_TUPLE && v->u.seq.n == 2 && is_int(item(v, 0), (int64_t)a) &&
           is_int(item(v, 1), (int64_t)b);
}

TEST(test_reuse_keeps_what_is_reachable) {
    ckpt_value *v;
    persistent_load = storage16;
    /* the first record's size, PUT 5, read back after a second record */
    CHECK_EQ_INT(PK("\x80\x02(" V2S(PID_BODY "Q", "K\x02K\x02\x86q\x05", "K\x02K\x01\x86")
                        V2S(PID_BODY "Q", "K\x01K\x04\x86", "K\x04K\x01\x86") "h\x05t.",
                    &v),
                 0);
    CHECK(v && v->kind == CKPT_KIND_TUPLE && v->u.seq.n == 3);
    CHECK(is_dims(item(v, 2), 2, 2));
    CHECK(item(v, 1) && item(v, 1)->kind == CKPT_KIND_TENSOR &&
          item(v, 1)->u.tensor->shape[1] == 4);
    /* a storage value PUT 6 and fetched by the second record: one storage
     * for both tensors (a tie) */
    CHECK_EQ_INT(PK("\x80\x02(" V2S(PID_BODY "Qq\x06", "K\x02K\x02\x86", "K\x02K\x01\x86")
                        V2S("h\x06", "K\x01K\x04\x86", "K\x04K\x01\x86") "t.",
                    &v),
                 0);
    CHECK(v && v->kind == CKPT_KIND_TUPLE && v->u.seq.n == 2);
    CHECK(item(v, 0) && item(v, 1) && item(v, 0)->kind == CKPT_KIND_TENSOR &&
          item(v, 1)->kind == CKPT_KIND_TENSOR &&
          item(v, 0)->u.tensor->storage == item(v, 1)->u.tensor->storage);
    /* a persistent id PUT 7, answered, then read back whole */
    CHECK_EQ_INT(PK("\x80\x02(" V2S(PID_BODY "q\x07Q", "K\x02K\x02\x86", "K\x02K\x01\x86")
                        V2S(PID_BODY "Q", "K\x01K\x04\x86", "K\x04K\x01\x86") "h\x07t.",
                    &v),
                 0);
    const ckpt_value *pid = item(v, 2);
    CHECK(pid && pid->kind == CKPT_KIND_TUPLE && pid->u.seq.n == 5 &&
          is_str(item(pid, 0), "storage") && is_str(item(pid, 3), "cpu") &&
          is_int(item(pid, 4), 4));
    /* the whole argument tuple PUT 8 and read back: kept, items and all */
    CHECK_EQ_INT(PK("\x80\x02(ctorch._utils\n_rebuild_tensor_v2\n(" PID_BODY
                    "QK\x00K\x02K\x02\x86K\x02K\x01\x86\x89" HOOKS
                    "tq\x08R" V2S(PID_BODY "Q", "K\x01K\x04\x86", "K\x04K\x01\x86") "h\x08t.",
                    &v),
                 0);
    const ckpt_value *args = item(v, 2);
    CHECK(args && args->kind == CKPT_KIND_TUPLE && args->u.seq.n == 6 &&
          item(args, 0)->kind == CKPT_KIND_STORAGE_ && is_dims(item(args, 2), 2, 2) &&
          is_dims(item(args, 3), 2, 1));
    /* OrderedDict of pairs in a tuple: the tuple's memory is reused by
     * the records after it, the dict keeps the pair's key and value */
    CHECK_EQ_INT(PK("\x80\x02(ccollections\nOrderedDict\nX\x01\x00\x00\x00"
                    "aK\x07\x86\x85\x85R" V2S(PID_BODY "Q", "K\x01K\x04\x86", "K\x04K\x01\x86")
                        V2S(PID_BODY "Q", "K\x02K\x02\x86", "K\x02K\x01\x86") "t.",
                    &v),
                 0);
    const ckpt_value *od = item(v, 0);
    CHECK(od && od->kind == CKPT_KIND_DICT && od->dict_class == CKPT_DICT_ORDERED &&
          od->u.dict.n == 1 && is_str(od->u.dict.keys[0], "a") && is_int(od->u.dict.vals[0], 7));
    /* its argument tuple PUT 9 and read back: kept */
    CHECK_EQ_INT(
        PK("\x80\x02(ccollections\nOrderedDict\nX\x01\x00\x00\x00"
           "aK\x07\x86\x85\x85q\tR" V2S(PID_BODY "Q", "K\x01K\x04\x86", "K\x04K\x01\x86") "h\tt.",
           &v),
        0);
    const ckpt_value *oa = item(v, 2);
    CHECK(oa && oa->kind == CKPT_KIND_TUPLE && oa->u.seq.n == 1 && item(oa, 0) &&
          item(oa, 0)->kind == CKPT_KIND_TUPLE && item(oa, 0)->u.seq.n == 1 &&
          item(item(oa, 0), 0) && item(item(oa, 0), 0)->kind == CKPT_KIND_TUPLE &&
          is_int(item(item(item(oa, 0), 0), 1), 7));
    /* a size DUP'ed into the stride (1, 1): one tuple twice in the
     * arguments, released at most once (the next records' tuples would
     * share a block released twice) */
    CHECK_EQ_INT(PK("\x80\x02(" V2S(PID_BODY "Q",
                                    "K\x01K\x01\x86"
                                    "2",
                                    "") V2S(PID_BODY "Q", "K\x01K\x04\x86", "K\x04K\x01\x86")
                        V2S(PID_BODY "Q", "K\x02K\x02\x86", "K\x02K\x01\x86") "t.",
                    &v),
                 0);
    CHECK(v && v->kind == CKPT_KIND_TUPLE && v->u.seq.n == 3);
    for (size_t i = 0; v && i < 3; i++) CHECK(item(v, i) && item(v, i)->kind == CKPT_KIND_TENSOR);
    if (v && v->u.seq.n == 3 && item(v, 1)->kind == CKPT_KIND_TENSOR &&
        item(v, 2)->kind == CKPT_KIND_TENSOR) {
        CHECK(item(v, 1)->u.tensor->shape[0] == 1 && item(v, 1)->u.tensor->shape[1] == 4);
        CHECK(item(v, 2)->u.tensor->shape[0] == 2 && item(v, 2)->u.tensor->stride[0] == 2);
    }
    persistent_load = NULL;
}

/* A PUT of a key no GET reads keeps nothing but still counts in
 * len(memo), which MEMOIZE uses, and against max_pickle_memo. */
TEST(test_memo_counts_keys_it_does_not_keep) {
    ckpt_value *v;
    /* PUT 0 (never read), MEMOIZE (key 1), PUT 0 again (no new key),
     * MEMOIZE (key 2), then GET 1 and 2 */
    CHECK_EQ_INT(PK("\x80\x04K\x07q\x00K\x08\x94K\x09q\x00K\x0a\x94h\x01h\x02\x86.", &v), 0);
    CHECK(is_dims(v, 8, 10));
    /* the same with the unread key hashed (past the array) */
    CHECK_EQ_INT(PK("\x80\x04K\x07r\x00\x00\x00\x40K\x08\x94K\x09r\x00\x00\x00\x40K\x0a\x94"
                    "h\x01h\x02\x86.",
                    &v),
                 0);
    CHECK(is_dims(v, 8, 10));
    uint64_t saved = limits.max_pickle_memo;
    limits.max_pickle_memo = 2;
    CHECK_EQ_INT(PK("\x80\x02K\x01q\x00q\x01q\x02.", &v), CKPT_E_LIMIT);
    CHECK_EQ_INT(PK("\x80\x02K\x01q\x00q\x01q\x00q\x01.", &v), 0);
    limits.max_pickle_memo = saved;
    /* text GETs as parse_index reads them: blanks, underscores, a NUL
     * ending the index (the keys they read are kept) */
    CHECK_EQ_INT(PK("I5\np7\n0I6\nq\x01g 0_7\n.", &v), 0);
    CHECK(is_int(v, 5));
    CHECK_EQ_INT(PK("I5\np7\n0g7\0x\n.", &v), 0);
    CHECK(is_int(v, 5));
    CHECK_EQ_INT(PK("I5\np7\n0g-0\n.", &v), CKPT_E_FORMAT); /* key 0 was never PUT */
    CHECK_EQ_INT(PK("I5\np0\n0g-0\n.", &v), 0);
    CHECK(is_int(v, 5));
    /* GET bytes inside operands only keep more: 'h' and 'j' in a str */
    CHECK_EQ_INT(PK("\x80\x02X\x06\x00\x00\x00h\x01j\x01\x00\x00q\x01h\x01.", &v), 0);
    CHECK(v && v->kind == CKPT_KIND_STR && v->u.s.len == 6 &&
          memcmp(v->u.s.p, "h\x01j\x01\x00\x00", 6) == 0);
}

/* find_fetches looks at the input 16 bytes at a time, then byte by byte
 * for the rest: a GET, LONG_BINGET or BINGET anywhere in a block or in
 * the tail keeps the key it reads (else the GET fails: "never PUT"). */
TEST(test_fetches_found_at_every_offset) {
    static const char *const gets[] = {"h\x07", "j\x07\x00\x00\x00", "g7\n"};
    static const size_t lens[] = {2, 5, 3};
    for (size_t g = 0; g < 3; g++)
        for (size_t pad = 0; pad < 40; pad++) {
            char buf[128];
            size_t n = 0;
            memcpy(buf + n, "\x80\x02K\x05q\x07", 6);
            n += 6;
            for (size_t i = 0; i < pad; i++) buf[n++] = i % 2 ? '0' : 'N'; /* NONE, POP */
            if (pad % 2) buf[n++] = '0';
            memcpy(buf + n, gets[g], lens[g]);
            n += lens[g];
            buf[n++] = '.';
            ckpt_value *v;
            CHECK_EQ_INT(run(buf, n, &v), 0);
            CHECK(is_int(v, 5));
        }
}

/* Memory a state_dict of many tensors takes per record: the argument
 * tuples of one are reused by the next. Not under AddressSanitizer,
 * where released blocks are poisoned, never reused. */
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CKPT_TEST_ASAN 1
#endif
#endif
#ifndef CKPT_TEST_ASAN
#define CKPT_TEST_ASAN 0
#endif
TEST(test_reuse_bounds_memory_per_record) {
    enum { N = 1000 };
    static const char rec[] = "X\x01\x00\x00\x00k" V2_2x2;
    size_t n = 0, cap = 8 + N * (sizeof rec + 2);
    char *b = malloc(cap);
    CHECK(b != NULL);
    if (!b) return;
    memcpy(b, "\x80\x02}(", 4);
    n = 4;
    for (int i = 0; i < N; i++) {
        memcpy(b + n, rec, sizeof rec - 1);
        n += sizeof rec - 1;
    }
    memcpy(b + n, "u.", 2);
    n += 2;
    ckpt_value *v;
    persistent_load = storage16;
    CHECK_EQ_INT(run(b, n, &v), 0);
    persistent_load = NULL;
    CHECK(v && v->kind == CKPT_KIND_DICT && v->u.dict.n == N);
    /* 876 bytes a record; 1291 when nothing was reused (the persistent
     * id, the storage value, size, stride and argument tuples and the
     * hooks' empty one: 416) */
#if !defined(__SANITIZE_ADDRESS__) && !CKPT_TEST_ASAN
    CHECK(arena.total / N < 1100);
#endif
    free(b);
}

/* A legacy torch.save (FORMATS.md §3: magic, protocol, sys_info, the main
 * pickle, the storage keys, each storage's count and bytes) of one tensor
 * whose persistent id numel, storage type or storage key list is ITEM:
 * torch.c's error is at ITEM's opcode in the file. */
#define LEGACY(numel, type, keys)                                                                  \
    "\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19."                                    \
    "\x80\x02M\xe9\x03."                                                                           \
    "\x80\x02}."                                                                                   \
    "\x80\x02"                                                                                     \
    "ctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storage" type "X\x01\x00\x00\x00"       \
    "0X\x03\x00\x00\x00"                                                                           \
    "cpu" numel "NtQK\x00K\x04\x85K\x01\x85\x89"                                                   \
    "ccollections\nOrderedDict\n)RtR."                                                             \
    "\x80\x02](" keys "e."                                                                         \
    "\x04\x00\x00\x00\x00\x00\x00\x00"                                                             \
    "0123456789abcdef"
#define FLOAT_STORAGE "ctorch\nFloatStorage\n"
#define KEY0                                                                                       \
    "X\x01\x00\x00\x00"                                                                            \
    "0"

static void legacy_error_at(const char *file, size_t len, const char *item, size_t item_len,
                            const char *member) {
    ckpt_file *f = NULL;
    const char *at = memmem(file, len, item, item_len);
    CHECK(at != NULL);
    CHECK_EQ_INT(ckpt_open_memory(&f, file, len, "legacy.pt", NULL), CKPT_E_FORMAT);
    CHECK_EQ_INT(ckpt_error_last()->offset, at - file);
    CHECK_EQ_STR(ckpt_error_last()->member, member);
    ckpt_close(f);
}
#define LEGACY_ERROR_AT(lit, item, member)                                                         \
    legacy_error_at(lit, sizeof(lit) - 1, item, sizeof(item) - 1, member)

TEST(test_torch_persistent_id_blames_the_item) {
    ckpt_file *f = NULL;
    static const char good[] = LEGACY("K\x04", FLOAT_STORAGE, KEY0);
    CHECK_EQ_INT(ckpt_open_memory(&f, good, sizeof good - 1, "legacy.pt", NULL), 0);
    ckpt_close(f);
    LEGACY_ERROR_AT(LEGACY("J\xd4\xfe\xff\xff", FLOAT_STORAGE, KEY0), "J\xd4\xfe\xff\xff",
                    "main pickle");
    LEGACY_ERROR_AT(LEGACY("K\x04", "cbuiltins\nint\n", KEY0), "cbuiltins\nint\n", "main pickle");
    LEGACY_ERROR_AT(LEGACY("K\x04", FLOAT_STORAGE, "M\x2c\x01"), "M\x2c\x01", "storage keys");
}

static const char tensor_v2[] = "\x80\x02" V2_2x2 ".";

TEST(test_tensor_rebuild) {
    ckpt_value *v;
    persistent_load = storage16;
    CHECK_EQ_INT(PK("\x80\x02" V2_2x2 ".", &v), 0);
    CHECK(v && v->kind == CKPT_KIND_TENSOR);
    if (v && v->kind == CKPT_KIND_TENSOR) {
        const ckpt_tensor *t = v->u.tensor;
        CHECK_EQ_INT(t->dtype, CKPT_DT_F32);
        CHECK_EQ_INT(t->ndim, 2);
        CHECK(t->shape[0] == 2 && t->shape[1] == 2 && t->stride[0] == 2 && t->stride[1] == 1);
        CHECK_EQ_INT(t->storage_offset, 0);
        CHECK_EQ_INT(t->numel, 4);
        CHECK_EQ_INT(t->nbytes, 16);
        CHECK_EQ_INT(t->requires_grad, 0);
        CHECK(t->storage && t->storage->nbytes == 16);
    }
    CHECK(find_event(PK_EV_CALL, "torch._utils", "_rebuild_tensor_v2")->allowed == 1);
    CHECK(find_event(PK_EV_GLOBAL, "torch", "FloatStorage")->allowed == 1);
    CHECK_EQ_INT(count_events(PK_EV_PERSID), 1);
    /* stride (3, 1) reaches element 4: 20 bytes of a 16-byte storage */
    CHECK_EQ_INT(PK("\x80\x02" V2("K\x00", "K\x02K\x02\x86", "K\x03K\x01\x86", "\x89") ".", &v),
                 CKPT_E_FORMAT);
    CHECK(v == NULL);
    CHECK_EQ_INT(PK("\x80\x02" V2("K\x01", "K\x02K\x02\x86", "K\x02K\x01\x86", "\x89") ".", &v),
                 CKPT_E_FORMAT); /* offset 1 */
    CHECK_EQ_INT(PK("\x80\x02" V2("K\x01", "K\x03\x85", "K\x01\x85", "\x88") ".", &v), 0);
    CHECK(v && v->kind == CKPT_KIND_TENSOR && v->u.tensor->storage_offset == 1 &&
          v->u.tensor->requires_grad == 1);
    CHECK_EQ_INT(PK("\x80\x02" V2("K\x00", "K\x02K\x02\x86", "K\x01\x85", "\x89") ".", &v),
                 CKPT_E_FORMAT); /* size and stride lengths differ */
    CHECK_EQ_INT(PK("\x80\x02" V2("K\x00", "J\xff\xff\xff\xff\x85", "K\x01\x85", "\x89") ".", &v),
                 CKPT_E_FORMAT);                                           /* negative size */
    CHECK_EQ_INT(PK("\x80\x02" V2("K\x00", ")", ")", "\x89") ".", &v), 0); /* 0-dim */
    CHECK(v && v->kind == CKPT_KIND_TENSOR && v->u.tensor->ndim == 0 && v->u.tensor->numel == 1);
    limits.max_ndim = 1;
    CHECK_EQ_INT(PK("\x80\x02" V2_2x2 ".", &v), CKPT_E_LIMIT);
    limits = (ckpt_limits)CKPT_LIMITS_INIT;
    /* too few arguments */
    CHECK_EQ_INT(PK("\x80\x02"
                    "ctorch._utils\n_rebuild_tensor_v2\n(" PID "K\x00)"
                    ")tR.",
                    &v),
                 CKPT_E_FORMAT);
    CHECK(strstr(last_message(), "expected 6 to 7 arguments, got 4") != NULL);
    /* v1: (storage, offset, size, stride) */
    CHECK_EQ_INT(PK("\x80\x02"
                    "ctorch._utils\n_rebuild_tensor\n(" PID "K\x00K\x04\x85K\x01\x85tR.",
                    &v),
                 0);
    CHECK(v && v->kind == CKPT_KIND_TENSOR && v->u.tensor->numel == 4);
    /* v3: untyped storage, dtype as a torch global */
    CHECK_EQ_INT(PK("\x80\x02"
                    "ctorch._utils\n_rebuild_tensor_v3\n(" PID "K\x00K\x08\x85K\x01\x85\x89" HOOKS
                    "ctorch\nfloat16\ntR.",
                    &v),
                 0);
    CHECK(v && v->kind == CKPT_KIND_TENSOR && v->u.tensor->dtype == CKPT_DT_F16 &&
          v->u.tensor->nbytes == 16);
    CHECK_EQ_INT(PK("\x80\x02"
                    "ctorch._utils\n_rebuild_tensor_v3\n(" PID "K\x00K\x09\x85K\x01\x85\x89" HOOKS
                    "ctorch\nfloat16\ntR.",
                    &v),
                 CKPT_E_FORMAT);
    /* float4_e2m1fn_x2: one element a byte of two F4 values (torch 2.13) */
    CHECK_EQ_INT(PK("\x80\x02"
                    "ctorch._utils\n_rebuild_tensor_v3\n(" PID "K\x00K\x01\x85K\x01\x85\x89" HOOKS
                    "ctorch\nfloat4_e2m1fn_x2\ntR.",
                    &v),
                 0);
    CHECK(v && v->kind == CKPT_KIND_TENSOR && v->u.tensor->dtype == CKPT_DT_F4_X2 &&
          v->u.tensor->nbytes == 1);
    /* a dtype torch.save cannot write ("dtype torch.uint4 is not recognized") */
    CHECK_EQ_INT(PK("\x80\x02"
                    "ctorch._utils\n_rebuild_tensor_v3\n(" PID "K\x00K\x01\x85K\x01\x85\x89" HOOKS
                    "ctorch\nuint4\ntR.",
                    &v),
                 CKPT_E_UNSUPPORTED);
    /* state on a storage (a TypedStorage, which has a __dict__): an empty
     * one sets nothing, one of attributes could change its dtype */
    CHECK_EQ_INT(PK("\x80\x02" PID "}b0N.", &v), 0);
    CHECK_EQ_INT(PK("\x80\x02" PID "N}\x86"
                    "b0N.",
                    &v),
                 0);
    CHECK_EQ_INT(PK("\x80\x02" PID "K\x01"
                    "b.",
                    &v),
                 CKPT_E_FORMAT);
    CHECK(strstr(last_message(), "dict state for a storage") != NULL);
    CHECK_EQ_INT(PK("\x80\x02" PID "}X\x05\x00\x00\x00"
                    "dtypeK\x01sb.",
                    &v),
                 CKPT_E_UNSUPPORTED);
    CHECK(strstr(last_message(), "attributes of a storage") != NULL);
    persistent_load = NULL; /* a persistent id without persistent_load */
    CHECK_EQ_INT(PK("\x80\x02" V2_2x2 ".", &v), CKPT_E_FORMAT);
    CHECK(strstr(last_message(), "no persistent_load") != NULL);
}

TEST(test_parameter_and_subclass) {
    ckpt_value *v;
    persistent_load = storage16;
    CHECK_EQ_INT(PK("\x80\x02"
                    "ctorch._utils\n_rebuild_parameter\n(" V2_2x2 "\x88" HOOKS "tR.",
                    &v),
                 0);
    CHECK(v && v->kind == CKPT_KIND_TENSOR && v->u.tensor->requires_grad == 1 &&
          v->u.tensor->numel == 4);
    CHECK_EQ_INT(PK("\x80\x02"
                    "ctorch.nn.parameter\nParameter\n(" V2_2x2 "\x89t\x81.",
                    &v),
                 0);
    CHECK(v && v->kind == CKPT_KIND_TENSOR && v->u.tensor->requires_grad == 0);
    CHECK_EQ_INT(PK("\x80\x02"
                    "ctorch.nn.parameter\nParameter\n(" V2_2x2 "t\x81}b.",
                    &v),
                 0); /* BUILD ignored */
    CHECK(v && v->kind == CKPT_KIND_TENSOR && v->u.tensor->requires_grad == 1);
    /* _rebuild_from_type_v2(func, type, args, state) applies func */
    CHECK_EQ_INT(PK("\x80\x02"
                    "ctorch._tensor\n_rebuild_from_type_v2\n("
                    "ctorch._utils\n_rebuild_tensor_v2\n"
                    "ctorch\nTensor\n(" PID "K\x00K\x02K\x02\x86K\x02K\x01\x86\x89" HOOKS "t}tR.",
                    &v),
                 0);
    CHECK(v && v->kind == CKPT_KIND_TENSOR && v->u.tensor->numel == 4);
    const ev_copy *e = find_event(PK_EV_CALL, "torch._utils", "_rebuild_tensor_v2");
    CHECK(e->allowed == 1 && e->opcode == 'R');
    persistent_load = NULL;
    /* ... and never calls a func that is not allowlisted */
    CHECK_EQ_INT(
        PK("ctorch._tensor\n_rebuild_from_type_v2\n(cos\nsystem\nctorch\nTensor\n(S'id'\nt}tR.",
           &v),
        0);
    CHECK(v && v->kind == CKPT_KIND_OBJECT && !strcmp(v->u.obj.name, "os.system") &&
          is_str(item(v->u.obj.args, 0), "id"));
    e = find_event(PK_EV_CALL, "os", "system");
    CHECK(e->allowed == 0);
    CHECK_EQ_INT(PK("ctorch._tensor\n_rebuild_from_type_v2\n(K\x01"
                    "ctorch\nTensor\n)}tR.",
                    &v),
                 0);
    CHECK(v && v->kind == CKPT_KIND_OBJECT && !strcmp(v->u.obj.name, "?"));
    CHECK(find_event(PK_EV_CALL, "?", "?")->symbolic == 1);
    /* a wrapper nested in itself would recurse as deep as the pickle nests */
    CHECK_EQ_INT(
        PK("ctorch._tensor\n_rebuild_from_type_v2\n(ctorch._tensor\n_rebuild_from_type_v2\n"
           "ctorch\nTensor\n(ccollections\nOrderedDict\nctorch\nTensor\n)}t}tR.",
           &v),
        CKPT_E_FORMAT);
    CHECK(strstr(last_message(), "got itself") != NULL);
}

/* ---------------------------------------------------------------- numpy */

/* pickle.dumps({'f': np.float64(0.1), 'i': np.int64(-3), 'u': np.uint64(2**64-1),
 *               'h': np.float16(-1.5), 'b': np.bool_(True), 'g': np.float32(0.25)}, protocol=P) */
/* 602 bytes */
static const char np_scalars_p2[] =
    "\x80\x02\x7d\x71\x00\x28\x58\x01\x00\x00\x00\x66\x71\x01\x63\x6e"
    "\x75\x6d\x70\x79\x2e\x63\x6f\x72\x65\x2e\x6d\x75\x6c\x74\x69\x61"
    "\x72\x72\x61\x79\x0a\x73\x63\x61\x6c\x61\x72\x0a\x71\x02\x63\x6e"
    "\x75\x6d\x70\x79\x0a\x64\x74\x79\x70\x65\x0a\x71\x03\x58\x02\x00"
    "\x00\x00\x66\x38\x71\x04\x89\x88\x87\x71\x05\x52\x71\x06\x28\x4b"
    "\x03\x58\x01\x00\x00\x00\x3c\x71\x07\x4e\x4e\x4e\x4a\xff\xff\xff"
    "\xff\x4a\xff\xff\xff\xff\x4b\x00\x74\x71\x08\x62\x63\x5f\x63\x6f"
    "\x64\x65\x63\x73\x0a\x65\x6e\x63\x6f\x64\x65\x0a\x71\x09\x58\x0f"
    "\x00\x00\x00\xc2\x9a\xc2\x99\xc2\x99\xc2\x99\xc2\x99\xc2\x99\xc2"
    "\xb9\x3f\x71\x0a\x58\x06\x00\x00\x00\x6c\x61\x74\x69\x6e\x31\x71"
    "\x0b\x86\x71\x0c\x52\x71\x0d\x86\x71\x0e\x52\x71\x0f\x58\x01\x00"
    "\x00\x00\x69\x71\x10\x68\x02\x68\x03\x58\x02\x00\x00\x00\x69\x38"
    "\x71\x11\x89\x88\x87\x71\x12\x52\x71\x13\x28\x4b\x03\x68\x07\x4e"
    "\x4e\x4e\x4a\xff\xff\xff\xff\x4a\xff\xff\xff\xff\x4b\x00\x74\x71"
    "\x14\x62\x68\x09\x58\x10\x00\x00\x00\xc3\xbd\xc3\xbf\xc3\xbf\xc3"
    "\xbf\xc3\xbf\xc3\xbf\xc3\xbf\xc3\xbf\x71\x15\x68\x0b\x86\x71\x16"
    "\x52\x71\x17\x86\x71\x18\x52\x71\x19\x58\x01\x00\x00\x00\x75\x71"
    "\x1a\x68\x02\x68\x03\x58\x02\x00\x00\x00\x75\x38\x71\x1b\x89\x88"
    "\x87\x71\x1c\x52\x71\x1d\x28\x4b\x03\x68\x07\x4e\x4e\x4e\x4a\xff"
    "\xff\xff\xff\x4a\xff\xff\xff\xff\x4b\x00\x74\x71\x1e\x62\x68\x09"
    "\x58\x10\x00\x00\x00\xc3\xbf\xc3\xbf\xc3\xbf\xc3\xbf\xc3\xbf\xc3"
    "\xbf\xc3\xbf\xc3\xbf\x71\x1f\x68\x0b\x86\x71\x20\x52\x71\x21\x86"
    "\x71\x22\x52\x71\x23\x58\x01\x00\x00\x00\x68\x71\x24\x68\x02\x68"
    "\x03\x58\x02\x00\x00\x00\x66\x32\x71\x25\x89\x88\x87\x71\x26\x52"
    "\x71\x27\x28\x4b\x03\x68\x07\x4e\x4e\x4e\x4a\xff\xff\xff\xff\x4a"
    "\xff\xff\xff\xff\x4b\x00\x74\x71\x28\x62\x68\x09\x58\x03\x00\x00"
    "\x00\x00\xc2\xbe\x71\x29\x68\x0b\x86\x71\x2a\x52\x71\x2b\x86\x71"
    "\x2c\x52\x71\x2d\x58\x01\x00\x00\x00\x62\x71\x2e\x68\x02\x68\x03"
    "\x58\x02\x00\x00\x00\x62\x31\x71\x2f\x89\x88\x87\x71\x30\x52\x71"
    "\x31\x28\x4b\x03\x58\x01\x00\x00\x00\x7c\x71\x32\x4e\x4e\x4e\x4a"
    "\xff\xff\xff\xff\x4a\xff\xff\xff\xff\x4b\x00\x74\x71\x33\x62\x68"
    "\x09\x58\x01\x00\x00\x00\x01\x71\x34\x68\x0b\x86\x71\x35\x52\x71"
    "\x36\x86\x71\x37\x52\x71\x38\x58\x01\x00\x00\x00\x67\x71\x39\x68"
    "\x02\x68\x03\x58\x02\x00\x00\x00\x66\x34\x71\x3a\x89\x88\x87\x71"
    "\x3b\x52\x71\x3c\x28\x4b\x03\x68\x07\x4e\x4e\x4e\x4a\xff\xff\xff"
    "\xff\x4a\xff\xff\xff\xff\x4b\x00\x74\x71\x3d\x62\x68\x09\x58\x05"
    "\x00\x00\x00\x00\x00\xc2\x80\x3e\x71\x3e\x68\x0b\x86\x71\x3f\x52"
    "\x71\x40\x86\x71\x41\x52\x71\x42\x75\x2e";

/* 394 bytes */
static const char np_scalars_p4[] =
    "\x80\x04\x95\x7f\x01\x00\x00\x00\x00\x00\x00\x7d\x94\x28\x8c\x01"
    "\x66\x94\x8c\x15\x6e\x75\x6d\x70\x79\x2e\x63\x6f\x72\x65\x2e\x6d"
    "\x75\x6c\x74\x69\x61\x72\x72\x61\x79\x94\x8c\x06\x73\x63\x61\x6c"
    "\x61\x72\x94\x93\x94\x8c\x05\x6e\x75\x6d\x70\x79\x94\x8c\x05\x64"
    "\x74\x79\x70\x65\x94\x93\x94\x8c\x02\x66\x38\x94\x89\x88\x87\x94"
    "\x52\x94\x28\x4b\x03\x8c\x01\x3c\x94\x4e\x4e\x4e\x4a\xff\xff\xff"
    "\xff\x4a\xff\xff\xff\xff\x4b\x00\x74\x94\x62\x43\x08\x9a\x99\x99"
    "\x99\x99\x99\xb9\x3f\x94\x86\x94\x52\x94\x8c\x01\x69\x94\x68\x04"
    "\x68\x07\x8c\x02\x69\x38\x94\x89\x88\x87\x94\x52\x94\x28\x4b\x03"
    "\x68\x0b\x4e\x4e\x4e\x4a\xff\xff\xff\xff\x4a\xff\xff\xff\xff\x4b"
    "\x00\x74\x94\x62\x43\x08\xfd\xff\xff\xff\xff\xff\xff\xff\x94\x86"
    "\x94\x52\x94\x8c\x01\x75\x94\x68\x04\x68\x07\x8c\x02\x75\x38\x94"
    "\x89\x88\x87\x94\x52\x94\x28\x4b\x03\x68\x0b\x4e\x4e\x4e\x4a\xff"
    "\xff\xff\xff\x4a\xff\xff\xff\xff\x4b\x00\x74\x94\x62\x43\x08\xff"
    "\xff\xff\xff\xff\xff\xff\xff\x94\x86\x94\x52\x94\x8c\x01\x68\x94"
    "\x68\x04\x68\x07\x8c\x02\x66\x32\x94\x89\x88\x87\x94\x52\x94\x28"
    "\x4b\x03\x68\x0b\x4e\x4e\x4e\x4a\xff\xff\xff\xff\x4a\xff\xff\xff"
    "\xff\x4b\x00\x74\x94\x62\x43\x02\x00\xbe\x94\x86\x94\x52\x94\x8c"
    "\x01\x62\x94\x68\x04\x68\x07\x8c\x02\x62\x31\x94\x89\x88\x87\x94"
    "\x52\x94\x28\x4b\x03\x8c\x01\x7c\x94\x4e\x4e\x4e\x4a\xff\xff\xff"
    "\xff\x4a\xff\xff\xff\xff\x4b\x00\x74\x94\x62\x43\x01\x01\x94\x86"
    "\x94\x52\x94\x8c\x01\x67\x94\x68\x04\x68\x07\x8c\x02\x66\x34\x94"
    "\x89\x88\x87\x94\x52\x94\x28\x4b\x03\x68\x0b\x4e\x4e\x4e\x4a\xff"
    "\xff\xff\xff\x4a\xff\xff\xff\xff\x4b\x00\x74\x94\x62\x43\x04\x00"
    "\x00\x80\x3e\x94\x86\x94\x52\x94\x75\x2e";

/* pickle.dumps(np.array([[1, 2], [3, 4]], dtype='>i2'), protocol=2) */
/* 216 bytes */
static const char np_array_be_p2[] =
    "\x80\x02\x63\x6e\x75\x6d\x70\x79\x2e\x63\x6f\x72\x65\x2e\x6d\x75"
    "\x6c\x74\x69\x61\x72\x72\x61\x79\x0a\x5f\x72\x65\x63\x6f\x6e\x73"
    "\x74\x72\x75\x63\x74\x0a\x71\x00\x63\x6e\x75\x6d\x70\x79\x0a\x6e"
    "\x64\x61\x72\x72\x61\x79\x0a\x71\x01\x4b\x00\x85\x71\x02\x63\x5f"
    "\x63\x6f\x64\x65\x63\x73\x0a\x65\x6e\x63\x6f\x64\x65\x0a\x71\x03"
    "\x58\x01\x00\x00\x00\x62\x71\x04\x58\x06\x00\x00\x00\x6c\x61\x74"
    "\x69\x6e\x31\x71\x05\x86\x71\x06\x52\x71\x07\x87\x71\x08\x52\x71"
    "\x09\x28\x4b\x01\x4b\x02\x4b\x02\x86\x71\x0a\x63\x6e\x75\x6d\x70"
    "\x79\x0a\x64\x74\x79\x70\x65\x0a\x71\x0b\x58\x02\x00\x00\x00\x69"
    "\x32\x71\x0c\x89\x88\x87\x71\x0d\x52\x71\x0e\x28\x4b\x03\x58\x01"
    "\x00\x00\x00\x3e\x71\x0f\x4e\x4e\x4e\x4a\xff\xff\xff\xff\x4a\xff"
    "\xff\xff\xff\x4b\x00\x74\x71\x10\x62\x89\x68\x03\x58\x08\x00\x00"
    "\x00\x00\x01\x00\x02\x00\x03\x00\x04\x71\x11\x68\x05\x86\x71\x12"
    "\x52\x71\x13\x74\x71\x14\x62\x2e";

/* pickle.dumps(np.asfortranarray(np.arange(6, dtype='<f4').reshape(2, 3)), protocol=4) */
/* 173 bytes */
static const char np_array_fortran_p4[] =
    "\x80\x04\x95\xa2\x00\x00\x00\x00\x00\x00\x00\x8c\x15\x6e\x75\x6d"
    "\x70\x79\x2e\x63\x6f\x72\x65\x2e\x6d\x75\x6c\x74\x69\x61\x72\x72"
    "\x61\x79\x94\x8c\x0c\x5f\x72\x65\x63\x6f\x6e\x73\x74\x72\x75\x63"
    "\x74\x94\x93\x94\x8c\x05\x6e\x75\x6d\x70\x79\x94\x8c\x07\x6e\x64"
    "\x61\x72\x72\x61\x79\x94\x93\x94\x4b\x00\x85\x94\x43\x01\x62\x94"
    "\x87\x94\x52\x94\x28\x4b\x01\x4b\x02\x4b\x03\x86\x94\x68\x03\x8c"
    "\x05\x64\x74\x79\x70\x65\x94\x93\x94\x8c\x02\x66\x34\x94\x89\x88"
    "\x87\x94\x52\x94\x28\x4b\x03\x8c\x01\x3c\x94\x4e\x4e\x4e\x4a\xff"
    "\xff\xff\xff\x4a\xff\xff\xff\xff\x4b\x00\x74\x94\x62\x88\x43\x18"
    "\x00\x00\x00\x00\x00\x00\x40\x40\x00\x00\x80\x3f\x00\x00\x80\x40"
    "\x00\x00\x00\x40\x00\x00\xa0\x40\x94\x74\x94\x62\x2e";

/* pickle.dumps(np.array([1, 'a'], dtype=object), protocol=2) */
/* 204 bytes */
static const char np_array_obj_p2[] =
    "\x80\x02\x63\x6e\x75\x6d\x70\x79\x2e\x63\x6f\x72\x65\x2e\x6d\x75"
    "\x6c\x74\x69\x61\x72\x72\x61\x79\x0a\x5f\x72\x65\x63\x6f\x6e\x73"
    "\x74\x72\x75\x63\x74\x0a\x71\x00\x63\x6e\x75\x6d\x70\x79\x0a\x6e"
    "\x64\x61\x72\x72\x61\x79\x0a\x71\x01\x4b\x00\x85\x71\x02\x63\x5f"
    "\x63\x6f\x64\x65\x63\x73\x0a\x65\x6e\x63\x6f\x64\x65\x0a\x71\x03"
    "\x58\x01\x00\x00\x00\x62\x71\x04\x58\x06\x00\x00\x00\x6c\x61\x74"
    "\x69\x6e\x31\x71\x05\x86\x71\x06\x52\x71\x07\x87\x71\x08\x52\x71"
    "\x09\x28\x4b\x01\x4b\x02\x85\x71\x0a\x63\x6e\x75\x6d\x70\x79\x0a"
    "\x64\x74\x79\x70\x65\x0a\x71\x0b\x58\x02\x00\x00\x00\x4f\x38\x71"
    "\x0c\x89\x88\x87\x71\x0d\x52\x71\x0e\x28\x4b\x03\x58\x01\x00\x00"
    "\x00\x7c\x71\x0f\x4e\x4e\x4e\x4a\xff\xff\xff\xff\x4a\xff\xff\xff"
    "\xff\x4b\x3f\x74\x71\x10\x62\x89\x5d\x71\x11\x28\x4b\x01\x58\x01"
    "\x00\x00\x00\x61\x71\x12\x65\x74\x71\x13\x62\x2e";

static void check_np_scalars(const ckpt_value *d) {
    CHECK(d && d->kind == CKPT_KIND_DICT && d->u.dict.n == 6);
    const ckpt_value *f = get(d, "f"), *h = get(d, "h"), *g = get(d, "g"), *b = get(d, "b");
    CHECK(f && f->kind == CKPT_KIND_FLOAT && f->u.f == 0.1);
    CHECK(is_int(get(d, "i"), -3));
    CHECK_EQ_STR(get(d, "u") ? ckpt_value_int_decimal(get(d, "u")) : NULL, "18446744073709551615");
    CHECK(h && h->kind == CKPT_KIND_FLOAT && h->u.f == -1.5);
    CHECK(g && g->kind == CKPT_KIND_FLOAT && g->u.f == 0.25);
    CHECK(b && b->kind == CKPT_KIND_BOOL && b->u.b == 1);
}

TEST(test_numpy_scalars) {
    ckpt_value *v;
    CHECK_EQ_INT(PK(np_scalars_p2, &v), 0);
    check_np_scalars(v);
    CHECK(find_event(PK_EV_CALL, "numpy.core.multiarray", "scalar")->allowed == 1);
    CHECK_EQ_INT(PK(np_scalars_p4, &v), 0);
    check_np_scalars(v);
    /* big-endian f8 (state '>'), under numpy 2's module name */
    CHECK_EQ_INT(PK("\x80\x02"
                    "cnumpy._core.multiarray\nscalar\ncnumpy\ndtype\nX\x02\x00\x00\x00"
                    "f8\x89\x88\x87R"
                    "(K\x03X\x01\x00\x00\x00>NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00tb"
                    "C\x08\x3f\xb9\x99\x99\x99\x99\x99\x9a\x86R.",
                    &v),
                 0);
    CHECK(v && v->kind == CKPT_KIND_FLOAT && v->u.f == 0.1);
    CHECK_EQ_INT(PK("\x80\x02"
                    "cnumpy.core.multiarray\nscalar\ncnumpy\ndtype\nX\x02\x00\x00\x00"
                    "f8\x89\x88\x87R"
                    "C\x04\x00\x00\x00\x00\x86R.",
                    &v),
                 CKPT_E_FORMAT); /* 4 bytes for f8 */
    /* object scalars are their second argument */
    CHECK_EQ_INT(
        PK("\x80\x02"
           "cnumpy.core.multiarray\nscalar\ncnumpy\ndtype\nX\x02\x00\x00\x00O8\x89\x88\x87R"
           "K\x07\x86R.",
           &v),
        0);
    CHECK(is_int(v, 7));
    /* half: inf, -0.0 and the subnormal 2**-24 */
    CHECK_EQ_INT(PK("\x80\x02"
                    "cnumpy.core.multiarray\nscalar\ncnumpy\ndtype\nX\x02\x00\x00\x00"
                    "f2\x89\x88\x87R"
                    "C\x02\x00\x7c\x86R.",
                    &v),
                 0);
    CHECK(v && v->kind == CKPT_KIND_FLOAT && v->u.f > 1e308);
    CHECK_EQ_INT(PK("\x80\x02"
                    "cnumpy.core.multiarray\nscalar\ncnumpy\ndtype\nX\x02\x00\x00\x00"
                    "f2\x89\x88\x87R"
                    "C\x02\x00\x80\x86R.",
                    &v),
                 0);
    CHECK(v && v->kind == CKPT_KIND_FLOAT && v->u.f == 0.0 && 1.0 / v->u.f < 0);
    CHECK_EQ_INT(PK("\x80\x02"
                    "cnumpy.core.multiarray\nscalar\ncnumpy\ndtype\nX\x02\x00\x00\x00"
                    "f2\x89\x88\x87R"
                    "C\x02\x01\x00\x86R.",
                    &v),
                 0);
    CHECK(v && v->kind == CKPT_KIND_FLOAT && v->u.f == 1.0 / 16777216.0);
}

TEST(test_numpy_arrays) {
    ckpt_value *v;
    CHECK_EQ_INT(PK(np_array_be_p2, &v), 0);
    CHECK(v && v->kind == CKPT_KIND_TENSOR);
    if (v && v->kind == CKPT_KIND_TENSOR) {
        const ckpt_tensor *t = v->u.tensor;
        CHECK_EQ_INT(t->dtype, CKPT_DT_I16);
        CHECK(t->ndim == 2 && t->shape[0] == 2 && t->shape[1] == 2);
        CHECK(t->stride[0] == 2 && t->stride[1] == 1);
        CHECK(t->storage->big_endian == 1);
        CHECK(t->storage->nbytes == 8 && t->storage->file_offset == CKPT_NO_OFFSET);
        CHECK(t->storage->data &&
              memcmp(t->storage->data, "\x00\x01\x00\x02\x00\x03\x00\x04", 8) == 0);
    }
    CHECK(find_event(PK_EV_BUILD, "numpy", "ndarray")->allowed == 1);
    CHECK_EQ_INT(PK(np_array_fortran_p4, &v), 0);
    CHECK(v && v->kind == CKPT_KIND_TENSOR);
    if (v && v->kind == CKPT_KIND_TENSOR) {
        const ckpt_tensor *t = v->u.tensor;
        CHECK_EQ_INT(t->dtype, CKPT_DT_F32);
        CHECK(t->shape[0] == 2 && t->shape[1] == 3 && t->stride[0] == 1 && t->stride[1] == 2);
        CHECK_EQ_INT(t->storage->big_endian, 0);
        float x[6];
        memcpy(x, t->storage->data, sizeof x);
        /* element [i][j] is i*3 + j */
        CHECK(x[1 * t->stride[0] + 2 * t->stride[1]] == 5.0f &&
              x[0 * t->stride[0] + 1 * t->stride[1]] == 1.0f);
    }
    /* object arrays stay opaque, with their state */
    CHECK_EQ_INT(PK(np_array_obj_p2, &v), 0);
    CHECK(v && v->kind == CKPT_KIND_OBJECT && !strcmp(v->u.obj.name, "numpy.ndarray") &&
          v->u.obj.state);
    /* shape (2, 3) for 8 bytes of data */
    char bad[sizeof np_array_be_p2];
    memcpy(bad, np_array_be_p2, sizeof bad);
    char *shape = memmem(bad, sizeof bad, "K\x02K\x02\x86", 5);
    CHECK(shape != NULL);
    if (shape) {
        shape[3] = 3;
        CHECK_EQ_INT(run(bad, sizeof bad - 1, &v), CKPT_E_FORMAT);
        CHECK(strstr(last_message(), "numpy.ndarray") != NULL);
    }
}

/* ---------------------------------------------------------------- corpus */

static unsigned char *corpus(const char *name, size_t *n) {
    char path[512];
    snprintf(path, sizeof path, "%s/scan/picklescan/%s", CKPT_CORPUS, name);
    unsigned char *buf = harness_read_file(path, n);
    if (!buf) fprintf(stderr, "cannot read %s\n", path);
    return buf;
}

TEST(test_corpus_benign) {
    static const char *files[] = {"benign0_v0.pkl", "benign0_v3.pkl", "benign0_v4.pkl"};
    for (size_t i = 0; i < 3; i++) {
        size_t n, used;
        unsigned char *buf = corpus(files[i], &n);
        CHECK(buf != NULL);
        if (!buf) continue;
        ckpt_value *v;
        CHECK_EQ_INT(run_used(buf, n, &v, &used), 0);
        CHECK_EQ_INT(used, n);
        CHECK(v && v->kind == CKPT_KIND_LIST && v->u.seq.n == 3 && is_str(item(v, 0), "a") &&
              is_str(item(v, 1), "b") && is_str(item(v, 2), "c"));
        CHECK_EQ_INT(count_events(PK_EV_GLOBAL) + count_events(PK_EV_CALL), 0);
        free(buf);
    }
}

TEST(test_corpus_malicious) {
    static const struct {
        const char *file, *module, *name;
        int rc, called;
    } cases[] = {
        {"malicious0.pkl", "builtins", "eval", 0, 1},
        {"malicious1_v0.pkl", "builtins", "eval", 0, 1},
        {"malicious1_v3.pkl", "builtins", "eval", 0, 1},
        {"malicious1_v4.pkl", "builtins", "eval", 0, 1},
        {"malicious2_v0.pkl", "posix", "system", 0, 1},
        {"malicious2_v3.pkl", "posix", "system", 0, 1},
        {"malicious2_v4.pkl", "posix", "system", 0, 1},
        {"malicious3.pkl", "http.client", "HTTPSConnection", 0, 1}, /* httplib */
        {"malicious4.pickle", "requests.api", "get", 0, 1},
        {"malicious5.pickle", "aiohttp.client", "ClientSession", 0, 1},
        {"malicious7.pkl", "socket", "create_connection", 0, 1},
        {"malicious8.pkl", "subprocess", "run", 0, 1},
        {"malicious9.pkl", "sys", "exit", 0, 1},
        {"malicious10.pkl", "builtins", "exec", 0, 1}, /* INST */
        {"malicious11.pkl", "os", "system", 0, 1},     /* memo-indirected STACK_GLOBAL */
        {"malicious-invalid-bytes.pkl", "os", "system", 0, 1},
        {"malicious12.pkl", "builtins", "__import__", 0, 1},
        {"malicious13a.pkl", "pickle", "loads", 0, 1},
        {"malicious13b.pkl", "_pickle", "loads", 0, 1},
        {"malicious14.pkl", "runpy", "_run_code", 0, 1},
        {"malicious15a.pkl", "bdb", "Bdb", 0, 1},
        {"malicious15b.pkl", "bdb", "Bdb.run", 0, 1},
        {"malicious16.pkl", "pip", "main", 0, 1},
        {"malicious17.pkl", "torch._inductor.codecache", "compile_file", 0, 1},
        {"malicious18.pkl", "pydoc", "pipepager", 0, 1},
        {"malicious19.pkl", "torch.serialization", "load", 0, 0},
        {"malicious20.pkl", "venv", "create", 0, 1},
        {"broken_model.pkl", "builtins", "exec", CKPT_E_TRUNCATED, 0},
        {"sys_module_override_sploit.pkl", "torch", "_utils", 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        size_t n;
        unsigned char *buf = corpus(cases[i].file, &n);
        CHECK(buf != NULL);
        if (!buf) continue;
        ckpt_value *v;
        CHECK_EQ_INT(run(buf, n, &v), cases[i].rc);
        const ev_copy *g = find_event(PK_EV_GLOBAL, cases[i].module, cases[i].name);
        CHECK(g->allowed == 0 && g->symbolic == 0);
        if (cases[i].called) {
            const ev_copy *c = find_event(PK_EV_CALL, cases[i].module, cases[i].name);
            CHECK(c->allowed == 0);
        }
        if (harness_cur_failed) {
            fprintf(stderr, "  %s\n", cases[i].file);
            free(buf);
            break;
        }
        free(buf);
    }
    /* the allowlist poisoning sample: BUILD on torch._utils, then
     * STACK_GLOBAL on references */
    size_t n;
    unsigned char *buf = corpus("sys_module_override_sploit.pkl", &n);
    if (buf) {
        ckpt_value *v;
        CHECK_EQ_INT(run(buf, n, &v), 0);
        const ev_copy *b = find_event(PK_EV_BUILD, "torch", "_utils");
        CHECK(b->allowed == 0);
        const ev_copy *s = find_event(PK_EV_GLOBAL, "?", "?");
        CHECK(s->symbolic == 1 && s->offset == 98);
        CHECK(v && v->kind == CKPT_KIND_OBJECT && !strcmp(v->u.obj.name, "?"));
        free(buf);
    }
}

TEST(test_corpus_stacked) {
    /* malicious6.pkl: a benign pickle, then requests.api.get after STOP */
    size_t n, used;
    unsigned char *buf = corpus("malicious6.pkl", &n);
    CHECK(buf != NULL);
    if (!buf) return;
    ckpt_value *v;
    CHECK_EQ_INT(run_used(buf, n, &v, &used), 0);
    CHECK_EQ_INT(used, 28);
    CHECK(v && v->kind == CKPT_KIND_LIST && v->u.seq.n == 3);
    base_offset = used;
    CHECK_EQ_INT(run_used(buf + used, n - used, &v, &used), 0);
    base_offset = 0;
    const ev_copy *g = find_event(PK_EV_GLOBAL, "requests.api", "get");
    CHECK(g->offset == 60);
    free(buf);
    /* pytorch_magic_bypass.pt: eval builds the magic, posix.system hides
     * in a later pickle of the stack */
    buf = corpus("pytorch_magic_bypass.pt", &n);
    CHECK(buf != NULL);
    if (!buf) return;
    size_t pos = 0;
    int found = 0;
    for (int k = 0; k < 8 && pos < n; k++) {
        base_offset = pos;
        if (run_used(buf + pos, n - pos, &v, &used)) break;
        if (k == 0) CHECK(has_event(PK_EV_CALL, "builtins", "eval"));
        found |= has_event(PK_EV_CALL, "posix", "system");
        pos += used;
    }
    base_offset = 0;
    CHECK(found);
    free(buf);
}

/* ---------------------------------------------------------------- scan mode */

/* persistent_load for the comparisons: a storage as large as a view check
 * takes, so reader mode builds every tensor view. */
static int storage_any(void *ctx, ckpt_value *pid, uint64_t offset, ckpt_value **out) {
    (void)ctx;
    (void)pid;
    ckpt_storage *st = ckpt_arena_alloc(&arena, sizeof *st);
    ckpt_value *v = ckpt_value_new(&arena, CKPT_KIND_STORAGE_);
    if (!st || !v) return ckpt_err(CKPT_E_NOMEM, "t", "m", offset, "out of memory");
    *st = (ckpt_storage){.dtype = CKPT_DT_F32,
                         .nbytes = UINT64_MAX / 16,
                         .key = "",
                         .member = "",
                         .file_offset = CKPT_NO_OFFSET};
    v->u.storage = st;
    *out = v;
    return 0;
}

/* Event r of reader mode and s of scan mode are the same; but a BUILD on
 * plain data (the dict an OrderedDict builder made) is, in scan mode, a
 * BUILD on the opaque object named after that allowlisted builder. */
static int same_event(const ev_copy *r, const ev_copy *s) {
    int names = !strcmp(r->module, s->module) && !strcmp(r->name, s->name);
    if (r->kind == PK_EV_BUILD && !r->module[0] && !r->name[0])
        names = names || ckpt_builders_allowed(s->module, s->name);
    return names && r->kind == s->kind && r->opcode == s->opcode && r->offset == s->offset &&
           r->allowed == s->allowed && r->symbolic == s->symbolic &&
           r->on_reference == s->on_reference && r->nargs == s->nargs;
}

/* Runs buf[0..len) in reader mode, then in scan mode. Scan mode must
 * report the same events, literal bytes included, as far as reader mode
 * gets (it runs no builder, so it goes on where a builder failed), and
 * succeed with the same length wherever reader mode does. *used: the
 * bytes of the reader run, 0 when it failed. Returns 1 when they agree. */
static int agrees_in_scan_mode(const void *buf, size_t len, size_t *used) {
    static ev_copy reader[sizeof events / sizeof *events];
    ckpt_value *v;
    size_t used_scan = 0;
    int rc = run_used(buf, len, &v, used);
    size_t nreader = nevents, total = nevents_total;
    memcpy(reader, events, nevents * sizeof *events);
    scan_only = 1;
    int rc_scan = run_used(buf, len, &v, &used_scan);
    scan_only = 0;
    if (rc) *used = 0;
    if (rc == 0 && (rc_scan != 0 || used_scan != *used || nevents_total != total)) return 0;
    if (nevents_total < total) return 0;
    for (size_t i = 0; i < nreader; i++)
        if (!same_event(&reader[i], &events[i])) return 0;
    return 1;
}

/* Every stream of buf (legacy torch files stack five), compared. */
static void check_streams_in_scan_mode(const uint8_t *buf, size_t n, const char *what) {
    size_t pos = 0, used;
    for (int k = 0; k < 8 && pos < n; k++) {
        base_offset = pos;
        int ok = agrees_in_scan_mode(buf + pos, n - pos, &used);
        CHECK(ok);
        if (!ok) fprintf(stderr, "  %s: stream at %zu differs in scan mode\n", what, pos);
        if (!ok || !used) break;
        pos += used;
    }
    base_offset = 0;
}

/* A file's streams, and those of its *.pkl members when it is a zip. */
static void check_file_in_scan_mode(const char *path) {
    size_t n;
    unsigned char *buf = harness_read_file(path, &n);
    if (!buf) return;
    check_streams_in_scan_mode(buf, n, path);
    ckpt_arena za = {0};
    ckpt_zip z;
    ckpt_limits lim = CKPT_LIMITS_INIT;
    uint64_t budget = 1 << 26;
    if (n >= 4 && !memcmp(buf, "PK\3\4", 4) && !ckpt_zip_open(&z, &za, buf, n, NULL, path, &lim))
        for (size_t i = 0; i < z.count; i++) {
            const ckpt_zip_entry *e = &z.entries[i];
            const uint8_t *data;
            if (e->name_len < 4 || strcmp(e->name + e->name_len - 4, ".pkl") ||
                ckpt_zip_read(&z, e, &za, &budget, &data))
                continue;
            check_streams_in_scan_mode(data, (size_t)e->usize, e->name);
        }
    ckpt_arena_free(&za);
    free(buf);
}

static size_t check_dir_in_scan_mode(const char *dir) {
    DIR *d = opendir(dir);
    size_t files = 0;
    struct dirent *e;
    if (!d) return 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (!harness_cur_failed) check_file_in_scan_mode(path); /* one report */
        files++;
    }
    closedir(d);
    return files;
}

TEST(test_scan_mode_same_events) {
    static const struct {
        const char *p;
        size_t n;
    } pk[] = {
        {nested_p0, sizeof nested_p0 - 1},
        {nested_p1, sizeof nested_p1 - 1},
        {nested_p2, sizeof nested_p2 - 1},
        {nested_p3, sizeof nested_p3 - 1},
        {nested_p4, sizeof nested_p4 - 1},
        {tensor_v2, sizeof tensor_v2 - 1},
        {np_scalars_p2, sizeof np_scalars_p2 - 1},
        {np_scalars_p4, sizeof np_scalars_p4 - 1},
        {np_array_be_p2, sizeof np_array_be_p2 - 1},
        {np_array_fortran_p4, sizeof np_array_fortran_p4 - 1},
        {np_array_obj_p2, sizeof np_array_obj_p2 - 1},
    };
    persistent_load = storage_any;
    for (size_t i = 0; i < sizeof pk / sizeof *pk; i++) {
        size_t used;
        CHECK(agrees_in_scan_mode(pk[i].p, pk[i].n, &used));
        CHECK_EQ_INT(used, pk[i].n);
        if (harness_cur_failed) fprintf(stderr, "  inline pickle %zu\n", i);
    }
    /* the fuzz seeds (hostile ones included), in fuzz/corpora next to
     * this file's folder */
    char dir[1024];
    static const char *fuzz_dirs[] = {"pickle", "scan"};
    for (size_t i = 0; i < 2; i++) {
        const char *slash = strrchr(__FILE__, '/');
        int at = slash ? (int)(slash - __FILE__) : 1;
        snprintf(dir, sizeof dir, "%.*s/../fuzz/corpora/%s", at, slash ? __FILE__ : ".",
                 fuzz_dirs[i]);
        CHECK(check_dir_in_scan_mode(dir) > 0);
    }
    persistent_load = NULL;
}

/* What scan mode keeps and drops. */
/* test_scan_mode_same_events on the real pickles of the corpus. */
TEST(test_scan_mode_same_events_corpus) {
    char dir[1024];
    persistent_load = storage_any;
    snprintf(dir, sizeof dir, "%s/scan/picklescan", CKPT_CORPUS);
    CHECK(check_dir_in_scan_mode(dir) >= 30);
    static const char *torch_dirs[] = {"burn", "gopickle", "candle"};
    for (size_t i = 0; i < 3; i++) {
        snprintf(dir, sizeof dir, "%s/torch/%s", CKPT_CORPUS, torch_dirs[i]);
        CHECK(check_dir_in_scan_mode(dir) > 0);
    }
    persistent_load = NULL;
}

/* A dict key is a name: one holding a NUL byte, or a str that held a lone
 * surrogate, is refused at the opcode that sets it (Python keeps both
 * whole; ckpt's names end at a NUL and its str is UTF-8). The same text
 * as a value, and a real U+FFFD key, stay. */
TEST(test_keys_exact_or_refused) {
    ckpt_value *v;
    CHECK_EQ_INT(PK("}X\x03\x00\x00\x00"
                    "a\x00"
                    "bK\x01s.",
                    &v),
                 CKPT_E_UNSUPPORTED);
    CHECK_EQ_INT(ckpt_error_last()->offset, 11);
    CHECK(strstr(last_message(), "dict key 'a\\x00b' holds a NUL byte") != NULL);
    CHECK_EQ_INT(PK("\x80\x03}C\x03"
                    "a\x00"
                    "bK\x01s.",
                    &v),
                 CKPT_E_UNSUPPORTED); /* bytes */
    CHECK(strstr(last_message(), "dict key b'a\\x00b'") != NULL);
    CHECK_EQ_INT(PK("}X\x03\x00\x00\x00\xed\xb2\x80K\x01s.", &v), CKPT_E_UNSUPPORTED);
    CHECK(strstr(last_message(), "lone surrogate") != NULL);
    CHECK_EQ_INT(PK("}V\\udc80\nI1\ns.", &v), CKPT_E_UNSUPPORTED); /* protocol 0 */
    CHECK(strstr(last_message(), "lone surrogate") != NULL);
    CHECK_EQ_INT(PK("ccollections\nOrderedDict\n]X\x03\x00\x00\x00"
                    "a\x00"
                    "bK\x01\x86"
                    "a\x85R.",
                    &v),
                 CKPT_E_UNSUPPORTED); /* OrderedDict([(key, 1)]) */
    CHECK(strstr(last_message(), "collections.OrderedDict: dict key 'a\\x00b'") != NULL);
    CHECK_EQ_INT(PK("}X\x01\x00\x00\x00kX\x03\x00\x00\x00\xed\xb2\x80s.", &v), 0);
    CHECK(v && v->kind == CKPT_KIND_DICT && is_str(v->u.dict.vals[0], "\xef\xbf\xbd"));
    CHECK_EQ_INT(PK("}X\x01\x00\x00\x00kX\x03\x00\x00\x00"
                    "a\x00"
                    "bs.",
                    &v),
                 0);
    CHECK(v && v->kind == CKPT_KIND_DICT && v->u.dict.vals[0]->u.s.len == 3);
    CHECK_EQ_INT(PK("}X\x03\x00\x00\x00\xef\xbf\xbdK\x01s.", &v), 0);
    CHECK(v && v->kind == CKPT_KIND_DICT && is_str(v->u.dict.keys[0], "\xef\xbf\xbd"));
}

TEST(test_scan_mode_values) {
    ckpt_value *v;
    scan_only = 1;
    /* one shared placeholder per scalar kind */
    CHECK_EQ_INT(PK("\x80\x02K\x05J\x00\x00\x01\x00\x8a\x01\x07\x87.", &v), 0);
    CHECK(v && v->kind == CKPT_KIND_TUPLE && v->u.seq.n == 3 && item(v, 0)->kind == CKPT_KIND_INT &&
          item(v, 0) == item(v, 1) && item(v, 1) == item(v, 2));
    CHECK_EQ_INT(PK("\x80\x02\x88\x89NNG?\xf0\x00\x00\x00\x00\x00\x00(t.", &v), 0);
    CHECK_EQ_INT(PK("\x80\x02\x88\x89\x86.", &v), 0);
    CHECK(v && item(v, 0)->kind == CKPT_KIND_BOOL && item(v, 0) == item(v, 1));
    CHECK_EQ_INT(PK("NN\x86.", &v), 0);
    CHECK(v && item(v, 0)->kind == CKPT_KIND_NONE && item(v, 0) == item(v, 1));
    /* ints beyond int64 keep their value: the legacy torch magic number */
    CHECK_EQ_INT(PK("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.", &v), 0);
    CHECK_EQ_STR(ckpt_value_int_decimal(v), "119547037146038801333356");
    CHECK_EQ_INT(PK("L119547037146038801333356L\n.", &v), 0);
    CHECK_EQ_STR(ckpt_value_int_decimal(v), "119547037146038801333356");
    /* lists, dicts and sets stay empty; tuples keep their items */
    CHECK_EQ_INT(PK("](K\x01K\x02"
                    "e.",
                    &v),
                 0);
    CHECK(v && v->kind == CKPT_KIND_LIST && v->u.seq.n == 0);
    CHECK_EQ_INT(PK("}(K\x01K\x02u.", &v), 0);
    CHECK(v && v->kind == CKPT_KIND_DICT && v->u.dict.n == 0);
    CHECK_EQ_INT(PK("(K\x01K\x02l.", &v), 0);
    CHECK(v && v->kind == CKPT_KIND_LIST && v->u.seq.n == 0);
    /* binary str/bytes are views of the input; their events too */
    static const char names[] = "\x80\x04\x8c\x02os\x8c\x06system\x86.";
    CHECK_EQ_INT(run(names, sizeof names - 1, &v), 0);
    CHECK(is_str(item(v, 0), "os") && item(v, 0)->u.s.p == names + 4 &&
          is_str(item(v, 1), "system") && item(v, 1)->u.s.p == names + 8);

    /* a surrogate is fixed in a copy (the input is a read-only literal) */
    CHECK_EQ_INT(PK("X\x03\x00\x00\x00\xed\xa0\x80.", &v), 0);
    CHECK(is_str(v, "\xef\xbf\xbd"));
    CHECK_EQ_INT(PK("U\x02\xff\xfe.", &v), 0); /* BINSTRING, not UTF-8 */
    CHECK(is_bytes(v, "\xff\xfe", 2));
    /* the type discipline stays */
    CHECK_EQ_INT(PK("](K\x01K\x02u.", &v), CKPT_E_FORMAT); /* SETITEMS on a list */
    CHECK_EQ_INT(PK("}]K\x01s.", &v), CKPT_E_FORMAT);      /* unhashable key */
    CHECK_EQ_INT(PK("K\x01K\x02"
                    "a.",
                    &v),
                 CKPT_E_FORMAT);             /* APPEND to an int */
    CHECK_EQ_INT(PK("K\x01N\x85R.", &v), 0); /* calling an int */
    CHECK(find_event(PK_EV_CALL, "?", "?")->symbolic == 1);
    /* STACK_GLOBAL operands from the memo */
    CHECK_EQ_INT(PK("\x80\x04\x8c\x0b"
                    "collections\x94\x8c\x0b"
                    "OrderedDict\x94\x93)R"
                    "h\x00h\x01\x93)R\x86.",
                    &v),
                 0);
    CHECK_EQ_INT(count_events(PK_EV_GLOBAL), 2);
    CHECK(find_event(PK_EV_GLOBAL, "collections", "OrderedDict")->symbolic == 0);
    /* builders do not run: an allowlisted call is an opaque object */
    CHECK(v && item(v, 1)->kind == CKPT_KIND_OBJECT &&
          !strcmp(item(v, 1)->u.obj.name, "collections.OrderedDict"));
    CHECK_EQ_INT(PK("ctorch._utils\n_rebuild_tensor_v2\n(tR.", &v), 0); /* reader: FORMAT */
    CHECK(v && v->kind == CKPT_KIND_OBJECT &&
          !strcmp(v->u.obj.name, "torch._utils._rebuild_tensor_v2"));
    CHECK(find_event(PK_EV_CALL, "torch._utils", "_rebuild_tensor_v2")->allowed == 1);
    CHECK_EQ_INT(PK(np_array_be_p2, &v), 0);
    CHECK(v && v->kind == CKPT_KIND_OBJECT && !strcmp(v->u.obj.name, "numpy.ndarray"));
    /* ...but the func of _rebuild_from_type_v2 is still reported */
    CHECK_EQ_INT(PK("ctorch._tensor\n_rebuild_from_type_v2\n(cos\nsystem\nctorch\nTensor\n"
                    "(S'ls'\nt}tR.",
                    &v),
                 0);
    CHECK(find_event(PK_EV_CALL, "os", "system")->allowed == 0);
    CHECK(v && v->kind == CKPT_KIND_OBJECT && !strcmp(v->u.obj.name, "os.system"));
    /* ...and an object scalar is its argument: here a class, whose BUILD
     * is one on a reference, in both modes */
    static const char obj_scalar[] = "cnumpy.core.multiarray\nscalar\n(cnumpy\ndtype\n"
                                     "(S'O8'\nI00\nI01\ntRccollections\nOrderedDict\ntR(N}tb.";
    for (int mode = 1; mode >= 0; mode--) {
        scan_only = mode;
        CHECK_EQ_INT(PK(obj_scalar, &v), 0);
        CHECK(v && v->kind == CKPT_KIND_GLOBAL_);
        CHECK(find_event(PK_EV_BUILD, "collections", "OrderedDict")->on_reference == 1);
    }
    scan_only = 0;
    CHECK_EQ_INT(PK("ctorch._utils\n_rebuild_tensor_v2\n(tR.", &v), CKPT_E_FORMAT);
}

/* ---------------------------------------------------------------- robustness */

TEST(test_truncated_everywhere) {
    static const struct {
        const char *p;
        size_t n;
    } pk[] = {
        {nested_p0, sizeof nested_p0 - 1},
        {nested_p2, sizeof nested_p2 - 1},
        {nested_p4, sizeof nested_p4 - 1},
        {np_scalars_p2, sizeof np_scalars_p2 - 1},
        {np_array_fortran_p4, sizeof np_array_fortran_p4 - 1},
        {tensor_v2, sizeof tensor_v2 - 1},
    };
    persistent_load = storage16;
    for (size_t i = 0; i < sizeof pk / sizeof *pk; i++) {
        ckpt_value *v;
        CHECK_EQ_INT(run(pk[i].p, pk[i].n, &v), 0);
        for (size_t k = 0; k < pk[i].n; k++) {
            /* a private copy, so ASan sees any read past the prefix */
            char *copy = malloc(k ? k : 1);
            memcpy(copy, pk[i].p, k);
            v = (ckpt_value *)1;
            int rc = run(copy, k, &v);
            free(copy);
            CHECK(rc < 0 && v == NULL);
            if (harness_cur_failed) {
                fprintf(stderr, "  pickle %zu accepted at %zu bytes\n", i, k);
                break;
            }
        }
    }
    persistent_load = NULL;
}

TEST(test_allocation_failures) {
    int saw_nomem = 0, saw_ok = 0;
    ckpt_set_allocator(&test_allocator);
    for (long budget = 0; budget < 100 && !saw_ok; budget++) {
        ckpt_value *v;
        alloc_budget = budget;
        alloc_count = 0;
        int rc = PK(nested_p4, &v);
        if (rc == 0) {
            saw_ok = 1;
            check_nested(v, 4);
        } else {
            CHECK_EQ_INT(rc, CKPT_E_NOMEM);
            saw_nomem = 1;
        }
    }
    alloc_budget = -1;
    ckpt_set_allocator(NULL);
    CHECK(saw_nomem && saw_ok);
    /* scan mode too */
    saw_nomem = saw_ok = 0;
    scan_only = 1;
    ckpt_set_allocator(&test_allocator);
    for (long budget = 0; budget < 100 && !saw_ok; budget++) {
        ckpt_value *v;
        alloc_budget = budget;
        alloc_count = 0;
        int rc = PK(nested_p4, &v);
        if (rc == 0) {
            saw_ok = 1;
            CHECK(v && v->kind == CKPT_KIND_DICT);
        } else {
            CHECK_EQ_INT(rc, CKPT_E_NOMEM);
            saw_nomem = 1;
        }
    }
    alloc_budget = -1;
    ckpt_set_allocator(NULL);
    scan_only = 0;
    CHECK(saw_nomem && saw_ok);
}

int main(void) {
    RUN(test_proto0_numbers);
    RUN(test_binary_numbers);
    RUN(test_shared_scalars);
    RUN(test_proto0_strings);
    RUN(test_binary_strings);
    RUN(test_nested_every_protocol);
    RUN(test_shared_and_cyclic);
    RUN(test_stack_opcodes);
    RUN(test_memo);
    RUN(test_memo_huge_index);
    RUN(test_memo_dense_and_sparse);
    RUN(test_memo_chunks);
    RUN(test_frames);
    RUN(test_text_operands_as_cpython);
    RUN(test_stack_global);
    RUN(test_name_mapping);
    RUN(test_allowlist);
    RUN(test_type_confusion);
    RUN(test_underflow_and_bad_opcodes);
    RUN(test_long_operands_bounded);
    RUN(test_error_offsets);
    RUN(test_limits);
    RUN(test_dangerous_call_is_opaque);
    RUN(test_opaque_objects);
    RUN(test_build_on_reference);
    RUN(test_ext_and_persid);
    RUN(test_container_builders);
    RUN(test_torch_device_rules);
    RUN(test_newobj_and_arity);
    RUN(test_bytes_builders);
    RUN(test_mixed_number_keys_are_linear);
    RUN(test_values_know_their_opcode);
    RUN(test_tensor_rebuild);
    RUN(test_tensor_rebuild_blames_the_argument);
    RUN(test_reuse_keeps_what_is_reachable);
    RUN(test_memo_counts_keys_it_does_not_keep);
    RUN(test_fetches_found_at_every_offset);
    RUN(test_reuse_bounds_memory_per_record);
    RUN(test_torch_persistent_id_blames_the_item);
    RUN(test_parameter_and_subclass);
    RUN(test_numpy_scalars);
    RUN(test_numpy_arrays);
    RUN_CORPUS(test_corpus_benign);
    RUN_CORPUS(test_corpus_malicious);
    RUN_CORPUS(test_corpus_stacked);
    RUN(test_scan_mode_same_events);
    RUN_CORPUS(test_scan_mode_same_events_corpus);
    RUN(test_keys_exact_or_refused);
    RUN(test_scan_mode_values);
    RUN(test_truncated_everywhere);
    RUN(test_allocation_failures);
    ckpt_arena_free(&arena);
    return harness_end();
}
