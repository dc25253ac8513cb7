/* test_write.c - the write path: safetensors and torch writers, the
 * structure they leave for a lossless round trip, torch state dicts
 * (OrderedDict, its _metadata, nn.Parameter) through both formats, convert
 * and rename, the public tree builder,
 * ckpt_convert's selection, the readers' additions (aliases, the torch
 * metadata record), verify's digests, and failure handling (atomic faults,
 * every allocation failing in turn, hostile structure metadata). PyTorch
 * itself checks the outputs in tests/write/test_roundtrip.py. */
#include <errno.h>
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "base/error.h"
#include "model/file.h"
#include "model/tensor.h"
#include "fail_alloc.h"
#include "harness.h"
#include "format/structure.h"
#include "format/write.h"
#include "container/zip.h"

static char tmpdir[64] = "/tmp/ckpt-test-write-XXXXXX";

static const char *tpath(const char *name) {
    static char ring[8][256];
    static unsigned slot;
    char *p = ring[slot++ % 8];
    snprintf(p, 256, "%s/%s", tmpdir, name);
    return p;
}

/* ------------------------------------------------------------ builders */

static ckpt_tree *tree;
static ckpt_arena scratch; /* values the public builder cannot make */

static ckpt_value *S(const char *s) {
    ckpt_value *v;
    return ckpt_tree_str(&v, tree, s, strlen(s)) ? NULL : v;
}
static ckpt_value *I(int64_t x) {
    ckpt_value *v;
    return ckpt_tree_int(&v, tree, x) ? NULL : v;
}
static ckpt_value *F(double x) {
    ckpt_value *v;
    return ckpt_tree_float(&v, tree, x) ? NULL : v;
}
static ckpt_value *B(int x) {
    ckpt_value *v;
    return ckpt_tree_bool(&v, tree, x) ? NULL : v;
}
static ckpt_value *N(void) {
    ckpt_value *v;
    return ckpt_tree_none(&v, tree) ? NULL : v;
}
static ckpt_value *D(void) {
    ckpt_value *v;
    return ckpt_tree_dict(&v, tree) ? NULL : v;
}
static ckpt_value *L(void) {
    ckpt_value *v;
    return ckpt_tree_list(&v, tree) ? NULL : v;
}
static ckpt_value *TU(void) {
    ckpt_value *v;
    return ckpt_tree_tuple(&v, tree) ? NULL : v;
}
static ckpt_value *T(ckpt_dtype dt, unsigned ndim, const uint64_t *shape, const void *data,
                     size_t n) {
    ckpt_value *v;
    return ckpt_tree_tensor(&v, tree, dt, ndim, shape, data, n) ? NULL : v;
}
static void set(ckpt_value *d, const char *k, ckpt_value *v) {
    CHECK_EQ_INT(ckpt_tree_set(tree, d, S(k), v), 0);
}
static void add(ckpt_value *seq, ckpt_value *v) { CHECK_EQ_INT(ckpt_tree_append(tree, seq, v), 0); }

static void fresh_tree(void) {
    ckpt_tree_free(tree);
    ckpt_arena_free(&scratch);
    CHECK_EQ_INT(ckpt_tree_new(&tree), 0);
}

/* ------------------------------------------------------------ comparing */

/* Nodes already matched: a node met again must map to the same node. */
typedef struct pairs {
    const ckpt_value *a[256], *b[256];
    size_t n;
} pairs;

static int same(pairs *p, const ckpt_value *a, const ckpt_value *b, int depth);

static int same_tensor(const ckpt_tensor *x, const ckpt_tensor *y) {
    if (x->dtype != y->dtype || x->ndim != y->ndim || x->requires_grad != y->requires_grad ||
        x->is_parameter != y->is_parameter || x->is_numpy != y->is_numpy)
        return 0;
    for (uint32_t i = 0; i < x->ndim; i++)
        if (x->shape[i] != y->shape[i]) return 0;
    size_t n = (size_t)x->nbytes;
    unsigned char *bx = malloc(n + 1), *by = malloc(n + 1);
    int ok = bx && by && ckpt_tensor_read(x, bx, n) == 0 && ckpt_tensor_read(y, by, n) == 0 &&
             memcmp(bx, by, n) == 0;
    free(bx);
    free(by);
    return ok;
}

static int same(pairs *p, const ckpt_value *a, const ckpt_value *b, int depth) {
    if (depth > 50 || a->kind != b->kind || a->np_dtype != b->np_dtype) return 0;
    switch (a->kind) {
    case CKPT_KIND_NONE: return 1;
    case CKPT_KIND_BOOL: return a->u.b == b->u.b;
    case CKPT_KIND_INT: return strcmp(ckpt_value_int_decimal(a), ckpt_value_int_decimal(b)) == 0;
    case CKPT_KIND_FLOAT: return memcmp(&a->u.f, &b->u.f, sizeof a->u.f) == 0;
    case CKPT_KIND_STR:
    case CKPT_KIND_BYTES:
        return a->u.s.len == b->u.s.len && memcmp(a->u.s.p, b->u.s.p, a->u.s.len) == 0;
    case CKPT_KIND_GLOBAL_: return strcmp(a->u.global.qualname, b->u.global.qualname) == 0;
    default: break;
    }
    for (size_t i = 0; i < p->n; i++)
        if (p->a[i] == a) return p->b[i] == b;
    if (p->n < 256) {
        p->a[p->n] = a;
        p->b[p->n++] = b;
    }
    if (a->kind == CKPT_KIND_TENSOR) return same_tensor(a->u.tensor, b->u.tensor);
    if (a->kind == CKPT_KIND_DICT) {
        if (a->u.dict.n != b->u.dict.n || a->dict_class != b->dict_class ||
            !a->u.dict.state != !b->u.dict.state ||
            (a->u.dict.state && !same(p, a->u.dict.state, b->u.dict.state, depth + 1)))
            return 0;
        for (size_t i = 0; i < a->u.dict.n; i++)
            if (!same(p, a->u.dict.keys[i], b->u.dict.keys[i], depth + 1) ||
                !same(p, a->u.dict.vals[i], b->u.dict.vals[i], depth + 1))
                return 0;
        return 1;
    }
    if (a->u.seq.n != b->u.seq.n) return 0;
    for (size_t i = 0; i < a->u.seq.n; i++)
        if (!same(p, a->u.seq.items[i], b->u.seq.items[i], depth + 1)) return 0;
    return 1;
}

static int same_tree(const ckpt_value *a, const ckpt_value *b) {
    pairs p = {.n = 0};
    return same(&p, a, b, 0);
}

/* The tree written to `name` in `fmt`, read back (structure decoded). */
static int read_back(const ckpt_value *root, const char *name, ckpt_format fmt) {
    CHECK_EQ_INT(ckpt_tree_write(root, tpath(name), fmt, NULL), 0);
    ckpt_file *f;
    if (ckpt_open(&f, tpath(name), NULL) != 0) return 0;
    ckpt_arena a = {0};
    const ckpt_value *back;
    int ok = ckpt_structure_decode(&back, f, &a) == 0 && same_tree(root, back);
    ckpt_verify_report rep;
    ok = ok && ckpt_verify(&rep, f) == 0;
    ckpt_arena_free(&a);
    ckpt_close(f);
    return ok;
}

static unsigned char *slurp(const char *path, size_t *n) { return harness_read_file(path, n); }

static const char *meta(const ckpt_file *f, const char *key) {
    for (size_t i = 0; i < ckpt_file_metadata_count(f); i++)
        if (strcmp(ckpt_file_metadata_key(f, i), key) == 0) return ckpt_file_metadata_value(f, i);
    return NULL;
}

/* ------------------------------------------------------------ layout */

static const int64_t I64_7[1] = {7};
static const float F32_12[2] = {1.0f, 2.0f};
static const uint64_t SH1[1] = {1}, SH2[1] = {2};

static void hex(char out[17], const void *p, size_t n) { ckpt_hex64(out, XXH3_64bits(p, n)); }

/* ckpt_xxh3_64 is the digest the writer embeds (what ckpt.dcp.Reader
 * checks chunks with); the empty input's is XXH3-64's published vector. */
/* ckpt_tensor_stream_at hands a writer pieces that end on the output
 * file's grid of CKPT_ATOMIC_WINDOW: the first up to the grid, then whole
 * windows, then the rest, in order. */
typedef struct pieces {
    size_t n, sizes[8];
    uint64_t total;
    const uint8_t *data;
    int bad;
} pieces;

static int piece_sink(void *ctx, const void *p, size_t n) {
    pieces *s = ctx;
    if (s->n < 8) s->sizes[s->n] = n;
    s->n++;
    if (memcmp(p, s->data + s->total, n) != 0) s->bad = 1;
    s->total += n;
    return 0;
}

TEST(stream_pieces_on_the_file_grid) {
    size_t w = CKPT_ATOMIC_WINDOW, n = 3 * w + 5;
    uint8_t *data = malloc(n);
    for (size_t i = 0; i < n; i++) data[i] = (uint8_t)(i * 31 + (i >> 12));
    uint64_t shape = n, stride = 1;
    ckpt_storage st = {.dtype = CKPT_DT_U8, .nbytes = n, .data = data, .key = "", .member = ""};
    ckpt_tensor t = {.name = "t",
                     .dtype = CKPT_DT_U8,
                     .ndim = 1,
                     .shape = &shape,
                     .stride = &stride,
                     .numel = n,
                     .nbytes = n,
                     .storage = &st};
    pieces s = {.data = data};
    CHECK_EQ_INT(ckpt_tensor_stream_at(&t, 1000, piece_sink, &s), 0);
    CHECK_EQ_INT((int)s.n, 4);
    CHECK_EQ_INT((long long)s.sizes[0], (long long)(w - 1000));
    CHECK_EQ_INT((long long)s.sizes[1], (long long)w);
    CHECK_EQ_INT((long long)s.sizes[2], (long long)w);
    CHECK_EQ_INT((long long)s.sizes[3], 1005);
    CHECK(!s.bad && s.total == n);
    /* on the grid already: whole windows from the start */
    s = (pieces){.data = data};
    CHECK_EQ_INT(ckpt_tensor_stream_at(&t, 7 * w, piece_sink, &s), 0);
    CHECK_EQ_INT((int)s.n, 4);
    CHECK_EQ_INT((long long)s.sizes[0], (long long)w);
    CHECK_EQ_INT((long long)s.sizes[3], 5);
    CHECK(!s.bad && s.total == n);
    free(data);
}

TEST(xxh3_matches_embedded_digest) {
    CHECK(ckpt_xxh3_64(NULL, 0) == UINT64_C(0x2D06800538D394C2));
    char got[17], want[17];
    ckpt_hex64(got, ckpt_xxh3_64(F32_12, 8));
    hex(want, F32_12, 8);
    CHECK(strcmp(got, want) == 0);
}

/* The exact bytes of the reference writer's layout: dtype order, padding,
 * offsets, serde's compact JSON. */
TEST(safetensors_exact_header) {
    fresh_tree();
    ckpt_value *root = D();
    set(root, "a", T(CKPT_DT_I64, 1, SH1, I64_7, 8));
    set(root, "b", T(CKPT_DT_F32, 1, SH2, F32_12, 8));
    const char *k[] = {"arch"}, *v[] = {"toy"};
    ckpt_write_options o = {
        .version = CKPT_WRITE_OPTIONS_VERSION, .meta_keys = k, .meta_values = v, .nmeta = 1};
    CHECK_EQ_INT(ckpt_tree_write(root, tpath("exact.safetensors"), CKPT_FORMAT_SAFETENSORS, &o), 0);
    char ha[17], hb[17], want[512];
    hex(ha, I64_7, 8);
    hex(hb, F32_12, 8);
    snprintf(want, sizeof want,
             "{\"__metadata__\":{\"format\":\"pt\",\"arch\":\"toy\",\"ckpt.xxh3\":"
             "\"{\\\"a\\\":\\\"%s\\\",\\\"b\\\":\\\"%s\\\"}\"},"
             "\"a\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]},"
             "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
             ha, hb);
    size_t n, wl = strlen(want), padded = (wl + 7) / 8 * 8;
    unsigned char *b = slurp(tpath("exact.safetensors"), &n);
    CHECK(b != NULL);
    if (!b) return;
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | b[i];
    CHECK_EQ_INT(hl, padded);
    CHECK_EQ_INT(n, 8 + padded + 16);
    CHECK(memcmp(b + 8, want, wl) == 0);
    for (size_t i = wl; i < padded; i++) CHECK(b[8 + i] == ' ');
    CHECK(memcmp(b + 8 + padded, I64_7, 8) == 0 && memcmp(b + 16 + padded, F32_12, 8) == 0);
    free(b);

    /* another insertion order is not the reader's tree: a structure */
    fresh_tree();
    root = D();
    set(root, "b", T(CKPT_DT_F32, 1, SH2, F32_12, 8));
    set(root, "a", T(CKPT_DT_I64, 1, SH1, I64_7, 8));
    CHECK_EQ_INT(ckpt_tree_write(root, tpath("order.safetensors"), CKPT_FORMAT_SAFETENSORS, NULL),
                 0);
    ckpt_file *f;
    CHECK_EQ_INT(ckpt_open(&f, tpath("order.safetensors"), NULL), 0);
    if (!f) return;
    CHECK_EQ_STR(meta(f, "ckpt.structure"),
                 "{\"version\":1,\"root\":{\"dict\":[[\"b\",{\"tensor\":\"b\"}],"
                 "[\"a\",{\"tensor\":\"a\"}]]}}");
    CHECK(ckpt_tensor_file_offset(ckpt_file_find_tensor(f, "a")) == ckpt_file_size(f) - 16);
    ckpt_close(f);
}

/* data.pkl byte for byte: protocol 2, only weights_only opcodes. */
TEST(pickle_exact_bytes) {
    fresh_tree();
    ckpt_value *root = D(), *list = L();
    ckpt_value *by;
    CHECK_EQ_INT(ckpt_tree_bytes(&by, tree, "\xff", 1), 0);
    set(root, "a", I(1));
    add(list, B(1));
    add(list, N());
    add(list, I(-70000));
    add(list, I((int64_t)1 << 40));
    add(list, F(0.5));
    add(list, S("x"));
    add(list, by);
    set(root, "b", list);
    CHECK_EQ_INT(ckpt_tree_write(root, tpath("exact.pt"), CKPT_FORMAT_TORCH_ZIP, NULL), 0);
    /* (strings split where a hex escape would swallow the next letter) */
    static const unsigned char want[] =
        "\x80\x02}q\x00(X\x01\x00\x00\x00"
        "aK\x01X\x01\x00\x00\x00"
        "b]q\x01(\x88N"
        "J\x90\xee\xfe\xff\x8a\x06\x00\x00\x00\x00\x00\x01G\x3f\xe0\x00\x00\x00\x00\x00\x00"
        "X\x01\x00\x00\x00"
        "x"
        "c_codecs\nencode\nq\x02X\x02\x00\x00\x00\xc3\xbf"
        "X\x06\x00\x00\x00"
        "latin1\x86Rq\x03"
        "eu."; /* bytes memoized after REDUCE, as pickle.py does */
    size_t n;
    unsigned char *b = slurp(tpath("exact.pt"), &n);
    CHECK(b != NULL);
    if (!b) return;
    ckpt_zip z;
    ckpt_arena a = {0};
    ckpt_limits lim = CKPT_LIMITS_INIT;
    CHECK_EQ_INT(ckpt_zip_open(&z, &a, b, n, NULL, "exact.pt", &lim), 0);
    const char *names[] = {"exact/data.pkl", "exact/byteorder", "exact/extra/ckpt_meta.json",
                           "exact/version"};
    CHECK_EQ_INT(z.count, 4);
    for (size_t i = 0; i < z.count && i < 4; i++) {
        CHECK_EQ_STR(z.entries[i].name, names[i]);
        CHECK_EQ_INT(z.entries[i].data_offset % 64, 0);
        CHECK_EQ_INT(z.entries[i].method, 0);
        CHECK_EQ_INT(ckpt_zip_check_crc(&z, &z.entries[i], b + z.entries[i].data_offset), 0);
    }
    const ckpt_zip_entry *e = ckpt_zip_find(&z, "exact/data.pkl");
    CHECK(e && e->usize == sizeof want - 1 &&
          memcmp(b + e->data_offset, want, sizeof want - 1) == 0);
    e = ckpt_zip_find(&z, "exact/version");
    CHECK(e && e->usize == 2 && memcmp(b + e->data_offset, "3\n", 2) == 0);
    ckpt_arena_free(&a);
    free(b);
}

/* A torch state dict: an OrderedDict with its _metadata attribute (what
 * Module.state_dict() returns) and a parameter, built with the public
 * tree builder. */
static ckpt_value *state_dict(void) {
    ckpt_value *root = D(), *st = D(), *md = D(), *v1 = D(), *v2 = D();
    ckpt_value *w = T(CKPT_DT_F32, 1, SH2, F32_12, 8);
    CHECK_EQ_INT(ckpt_tree_set_parameter(tree, w, 1), 0);
    set(root, "w", w);
    set(root, "b", T(CKPT_DT_I64, 1, SH1, I64_7, 8));
    set(v1, "version", I(1));
    set(v2, "version", I(2));
    set(md, "", v1);
    set(md, "bn", v2);
    set(st, "_metadata", md);
    CHECK_EQ_INT(ckpt_tree_set_dict_class(tree, md, "collections.OrderedDict"), 0);
    CHECK_EQ_INT(ckpt_tree_set_dict_class(tree, root, "collections.OrderedDict"), 0);
    CHECK_EQ_INT(ckpt_tree_set_dict_state(tree, root, st), 0);
    return root;
}

/* The record `rel` of torch archive `path` ("<stem>/rel"), malloc'd. */
static unsigned char *pt_record(const char *path, const char *name, size_t *len) {
    size_t n;
    unsigned char *b = slurp(path, &n), *out = NULL;
    if (!b) return NULL;
    ckpt_zip z;
    ckpt_arena a = {0};
    ckpt_limits lim = CKPT_LIMITS_INIT;
    const ckpt_zip_entry *e = NULL;
    if (ckpt_zip_open(&z, &a, b, n, NULL, path, &lim) == 0) e = ckpt_zip_find(&z, name);
    if (e && (out = malloc(e->usize + 1))) {
        memcpy(out, b + e->data_offset, e->usize);
        *len = e->usize;
    }
    ckpt_arena_free(&a);
    free(b);
    return out;
}

/* data.pkl of a state dict byte for byte: torch.save's form,
 * OrderedDict() + SETITEMS + BUILD {'_metadata': OrderedDict(...)}, and
 * _rebuild_parameter(_rebuild_tensor_v2(..., False, hooks), True,
 * OrderedDict()) for the parameter; then what the reader makes of it. */
TEST(state_dict_pickle_bytes) {
    fresh_tree();
    CHECK_EQ_INT(ckpt_tree_write(state_dict(), tpath("sd.pt"), CKPT_FORMAT_TORCH_ZIP, NULL), 0);
    static const unsigned char want[] = "\x80\x02"
                                        "ccollections\nOrderedDict\nq\x00)Rq\x01("
                                        "X\x01\x00\x00\x00"
                                        "w"
                                        "ctorch._utils\n_rebuild_parameter\nq\x02"
                                        "ctorch._utils\n_rebuild_tensor_v2\nq\x03"
                                        "((X\x07\x00\x00\x00"
                                        "storage"
                                        "ctorch\nFloatStorage\nq\x04"
                                        "X\x01\x00\x00\x00"
                                        "0"
                                        "X\x03\x00\x00\x00"
                                        "cpuK\x02tQ"
                                        "K\x00K\x02\x85K\x01\x85\x89h\x00)RtR"
                                        "\x88h\x00)R\x87Rq\x05"
                                        "X\x01\x00\x00\x00"
                                        "b"
                                        "h\x03((X\x07\x00\x00\x00"
                                        "storage"
                                        "ctorch\nLongStorage\nq\x06"
                                        "X\x01\x00\x00\x00"
                                        "1"
                                        "X\x03\x00\x00\x00"
                                        "cpuK\x01tQ"
                                        "K\x00K\x01\x85K\x01\x85\x89h\x00)RtRq\x07"
                                        "u"
                                        "}q\x08X\x09\x00\x00\x00"
                                        "_metadata"
                                        "h\x00)Rq\x09("
                                        "X\x00\x00\x00\x00}q\x0aX\x07\x00\x00\x00"
                                        "versionK\x01s"
                                        "X\x02\x00\x00\x00"
                                        "bn}q\x0bX\x07\x00\x00\x00"
                                        "versionK\x02s"
                                        "usb.";
    size_t n = 0;
    unsigned char *pkl = pt_record(tpath("sd.pt"), "sd/data.pkl", &n);
    CHECK(pkl && n == sizeof want - 1 && memcmp(pkl, want, sizeof want - 1) == 0);
    if (pkl && (n != sizeof want - 1 || memcmp(pkl, want, n) != 0))
        for (size_t i = 0; i < n && i < sizeof want - 1; i++)
            if (pkl[i] != want[i]) {
                fprintf(stderr, "data.pkl differs at byte %zu\n", i);
                break;
            }
    free(pkl);

    /* read back: the class, the attributes and the parameter are there */
    ckpt_file *f;
    CHECK_EQ_INT(ckpt_open(&f, tpath("sd.pt"), NULL), 0);
    if (!f) return;
    const ckpt_value *root = ckpt_file_root(f);
    CHECK_EQ_STR(ckpt_value_dict_class(root), "collections.OrderedDict");
    const ckpt_value *st = ckpt_value_dict_state(root);
    CHECK(st && ckpt_value_len(st) == 1 && ckpt_value_dict_class(st) == NULL);
    const ckpt_value *md = st ? ckpt_value_item(st, 0) : NULL;
    CHECK(md && strcmp(ckpt_value_str(ckpt_value_key(st, 0), NULL), "_metadata") == 0);
    CHECK(md && ckpt_value_dict_class(md) && ckpt_value_len(md) == 2);
    if (md && ckpt_value_len(md) == 2) {
        CHECK_EQ_STR(ckpt_value_str(ckpt_value_key(md, 1), NULL), "bn");
        int64_t version = 0;
        CHECK_EQ_INT(ckpt_value_int(ckpt_value_item(ckpt_value_item(md, 1), 0), &version), 0);
        CHECK_EQ_INT(version, 2);
    }
    const ckpt_tensor *w = ckpt_file_find_tensor(f, "w"), *b = ckpt_file_find_tensor(f, "b");
    CHECK(w && ckpt_tensor_is_parameter(w) && w->requires_grad);
    CHECK(b && !ckpt_tensor_is_parameter(b) && !b->requires_grad);
    /* attributes are not tensors of the file */
    CHECK_EQ_INT(ckpt_file_tensor_count(f), 2);
    CHECK(ckpt_value_dict_class(ckpt_value_item(root, 0)) == NULL &&
          ckpt_value_dict_state(ckpt_value_item(root, 0)) == NULL);
    ckpt_close(f);
}

/* The structure records class, state and parameter flag (version 2); a
 * tree with parameters only stays version 1; both formats give the same
 * tree back. */
TEST(state_dict_roundtrip) {
    fresh_tree();
    ckpt_value *root = state_dict();
    CHECK(read_back(root, "sd.safetensors", CKPT_FORMAT_SAFETENSORS));
    CHECK(read_back(root, "sd2.pt", CKPT_FORMAT_TORCH_ZIP));
    ckpt_file *f;
    CHECK_EQ_INT(ckpt_open(&f, tpath("sd.safetensors"), NULL), 0);
    if (f) {
        CHECK_EQ_STR(meta(f, "ckpt.structure"),
                     "{\"version\":2,\"root\":{\"dict\":[[\"w\",{\"tensor\":\"w\","
                     "\"requires_grad\":true,\"parameter\":true}],[\"b\",{\"tensor\":\"b\"}]],"
                     "\"class\":\"collections.OrderedDict\",\"state\":{\"dict\":[[\"_metadata\","
                     "{\"dict\":[[\"\",{\"dict\":[[\"version\",1]]}],[\"bn\",{\"dict\":"
                     "[[\"version\",2]]}]],\"class\":\"collections.OrderedDict\"}]]}}}");
        ckpt_close(f);
    }
    /* safetensors -> torch keeps them (the reader's tree of the .pt) */
    CHECK_EQ_INT(ckpt_convert(NULL, tpath("sd.safetensors"), tpath("sd3.pt"), NULL), 0);
    CHECK_EQ_INT(ckpt_open(&f, tpath("sd3.pt"), NULL), 0);
    if (f) {
        CHECK(same_tree(root, ckpt_file_root(f)));
        ckpt_close(f);
    }
    /* a Counter, a plain dict of parameters (no dict attribute: version 1) */
    fresh_tree();
    root = D();
    ckpt_value *c = D(), *p = T(CKPT_DT_F32, 1, SH2, F32_12, 8);
    set(c, "a", I(2));
    CHECK_EQ_INT(ckpt_tree_set_dict_class(tree, c, "collections.Counter"), 0);
    CHECK_EQ_INT(ckpt_tree_set_parameter(tree, p, 0), 0);
    set(root, "p", p);
    CHECK(read_back(root, "p.safetensors", CKPT_FORMAT_SAFETENSORS));
    CHECK_EQ_INT(ckpt_open(&f, tpath("p.safetensors"), NULL), 0);
    if (f) {
        CHECK_EQ_STR(meta(f, "ckpt.structure"),
                     "{\"version\":1,\"root\":{\"dict\":[[\"p\",{\"tensor\":\"p\","
                     "\"parameter\":true}]]}}");
        ckpt_close(f);
    }
    set(root, "c", c);
    CHECK(read_back(root, "c.safetensors", CKPT_FORMAT_SAFETENSORS));
    CHECK(read_back(root, "c.pt", CKPT_FORMAT_TORCH_ZIP));
    size_t n = 0;
    unsigned char *pkl = pt_record(tpath("c.pt"), "c/data.pkl", &n);
    int counter = 0;
    for (size_t i = 0; pkl && i + 21 <= n; i++)
        counter |= memcmp(pkl + i, "ccollections\nCounter\n", 21) == 0;
    CHECK(counter);
    free(pkl);

    /* a plain tensor that requires grad stays one (torch.save's
     * _rebuild_tensor_v2 requires_grad), in both formats */
    fresh_tree();
    root = D();
    ckpt_value *g = T(CKPT_DT_F32, 1, SH2, F32_12, 8);
    CHECK_EQ_INT(ckpt_tree_set_requires_grad(tree, g, 1), 0);
    CHECK_EQ_INT(ckpt_tree_set_requires_grad(tree, D(), 1), CKPT_E_INVALID_ARG);
    set(root, "g", g);
    CHECK(read_back(root, "g.safetensors", CKPT_FORMAT_SAFETENSORS));
    CHECK(read_back(root, "g.pt", CKPT_FORMAT_TORCH_ZIP));
    /* a Parameter beside the plain tensor over its storage: one record */
    ckpt_value *pa = NULL;
    CHECK_EQ_INT(ckpt_tree_tensor_alias(&pa, tree, g), 0);
    CHECK_EQ_INT(ckpt_tree_tensor_alias(&pa, tree, D()), CKPT_E_INVALID_ARG);
    CHECK_EQ_INT(ckpt_tree_tensor_alias(&pa, tree, g), 0);
    CHECK_EQ_INT(ckpt_tree_set_parameter(tree, pa, 0), 0);
    set(root, "pa", pa);
    CHECK(read_back(root, "g.safetensors", CKPT_FORMAT_SAFETENSORS));
    CHECK(read_back(root, "g.pt", CKPT_FORMAT_TORCH_ZIP));
    CHECK_EQ_INT(ckpt_open(&f, tpath("g.pt"), NULL), 0);
    if (f) {
        const ckpt_tensor *gt = ckpt_file_find_tensor(f, "g"), *pt = ckpt_file_find_tensor(f, "pa");
        CHECK(gt && ckpt_tensor_requires_grad(gt) && !ckpt_tensor_is_parameter(gt));
        CHECK(pt && !ckpt_tensor_requires_grad(pt) && ckpt_tensor_is_parameter(pt));
        CHECK(gt && pt && gt != pt && gt->storage == pt->storage);
        ckpt_close(f);
    }

    /* a view beside its base: one storage, each its own view, in both
     * formats; a view past the storage is refused */
    fresh_tree();
    root = D();
    static const float F32_6[6] = {0, 1, 2, 3, 4, 5};
    static const uint64_t SH6[1] = {6}, SH23[2] = {2, 3}, ST_T[2] = {1, 3}, SH32[2] = {3, 2};
    static const uint64_t ST1[1] = {2}, SH_2[1] = {2};
    ckpt_value *base = T(CKPT_DT_F32, 1, SH6, F32_6, 24), *vt = NULL, *vs = NULL;
    CHECK_EQ_INT(ckpt_tree_tensor_view(&vt, tree, base, 2, SH32, ST_T, 0),
                 0); /* base.view(2,3).t() */
    CHECK_EQ_INT(ckpt_tree_tensor_view(&vs, tree, base, 1, SH_2, ST1, 1), 0); /* base[1::2][:2] */
    CHECK_EQ_INT(ckpt_tree_tensor_view(&pa, tree, base, 2, SH23, ST_T, 1), CKPT_E_INVALID_ARG);
    CHECK(strstr(ckpt_error_last()->message, "reaches past its storage"));
    CHECK_EQ_INT(ckpt_tree_tensor_view(&pa, tree, D(), 1, SH_2, ST1, 0), CKPT_E_INVALID_ARG);
    set(root, "base", base);
    set(root, "t", vt);
    set(root, "s", vs);
    CHECK(read_back(root, "v.safetensors", CKPT_FORMAT_SAFETENSORS));
    CHECK(read_back(root, "v.pt", CKPT_FORMAT_TORCH_ZIP));
    CHECK_EQ_INT(ckpt_open(&f, tpath("v.pt"), NULL), 0);
    if (f) {
        const ckpt_tensor *bt = ckpt_file_find_tensor(f, "base"),
                          *tt = ckpt_file_find_tensor(f, "t"), *st_ = ckpt_file_find_tensor(f, "s");
        CHECK(bt && tt && st_ && bt->storage == tt->storage && bt->storage == st_->storage);
        CHECK(st_ && st_->storage_offset == 1 && st_->stride[0] == 2);
        CHECK(tt && tt->stride[0] == 1 && tt->stride[1] == 3);
        ckpt_close(f);
    }

    /* numpy values, as torch.save pickles them: an ndarray, scalars */
    fresh_tree();
    root = D();
    ckpt_value *arr = T(CKPT_DT_F32, 1, SH2, F32_12, 8), *f32 = F(1.5), *u8 = I(200), *nb = B(1);
    CHECK_EQ_INT(ckpt_tree_set_numpy(tree, arr, CKPT_DT_F32), 0);
    CHECK_EQ_INT(ckpt_tree_set_numpy(tree, arr, CKPT_DT_I32), CKPT_E_INVALID_ARG);
    CHECK_EQ_INT(ckpt_tree_set_numpy(tree, f32, CKPT_DT_F32), 0);
    CHECK_EQ_INT(ckpt_tree_set_numpy(tree, u8, CKPT_DT_I8), CKPT_E_INVALID_ARG); /* 200 */
    CHECK(strstr(ckpt_error_last()->message, "a numpy scalar of I8 is not built from a int"));
    CHECK_EQ_INT(ckpt_tree_set_numpy(tree, u8, CKPT_DT_U8), 0);
    CHECK_EQ_INT(ckpt_tree_set_numpy(tree, nb, CKPT_DT_F32), CKPT_E_INVALID_ARG);
    CHECK_EQ_INT(ckpt_tree_set_numpy(tree, nb, CKPT_DT_BF16), CKPT_E_INVALID_ARG);
    CHECK(strstr(ckpt_error_last()->message, "numpy has no dtype BF16"));
    CHECK_EQ_INT(ckpt_tree_set_numpy(tree, nb, CKPT_DT_BOOL), 0);
    CHECK_EQ_INT(ckpt_tree_set_numpy(tree, S("a"), CKPT_DT_BOOL), CKPT_E_INVALID_ARG);
    set(root, "a", arr);
    set(root, "f", f32);
    set(root, "u", u8);
    set(root, "b", nb);
    CHECK(read_back(root, "np.safetensors", CKPT_FORMAT_SAFETENSORS));
    CHECK(read_back(root, "np.pt", CKPT_FORMAT_TORCH_ZIP));
    CHECK_EQ_INT(ckpt_value_numpy_dtype(f32), CKPT_DT_F32);
    CHECK_EQ_INT(ckpt_tree_set_numpy(tree, f32, CKPT_DT_UNKNOWN), 0);
    CHECK_EQ_INT(ckpt_value_numpy_dtype(f32), CKPT_DT_UNKNOWN);

    /* tensors cannot live in attributes; cycles through them are refused */
    fresh_tree();
    root = D();
    ckpt_value *st = D();
    set(st, "t", T(CKPT_DT_F32, 1, SH2, F32_12, 8));
    CHECK_EQ_INT(ckpt_tree_set_dict_class(tree, root, "collections.OrderedDict"), 0);
    CHECK_EQ_INT(ckpt_tree_set_dict_state(tree, root, st), 0);
    CHECK_EQ_INT(ckpt_tree_write(root, tpath("ts.pt"), CKPT_FORMAT_TORCH_ZIP, NULL),
                 CKPT_E_UNSUPPORTED);
    CHECK(strstr(ckpt_error_last()->message, "attributes"));
    st = D();
    set(st, "self", root);
    CHECK_EQ_INT(ckpt_tree_set_dict_state(tree, root, st), 0);
    CHECK_EQ_INT(ckpt_tree_write(root, tpath("ts.safetensors"), CKPT_FORMAT_SAFETENSORS, NULL),
                 CKPT_E_UNSUPPORTED);
    CHECK(strstr(ckpt_error_last()->message, "cyclic"));

    /* builder arguments */
    ckpt_value *l = L(), *d = D();
    CHECK_EQ_INT(ckpt_tree_set_dict_class(tree, l, "collections.OrderedDict"), CKPT_E_INVALID_ARG);
    CHECK_EQ_INT(ckpt_tree_set_dict_class(tree, d, "collections.defaultdict"), CKPT_E_INVALID_ARG);
    CHECK_EQ_INT(ckpt_tree_set_dict_state(tree, d, D()), CKPT_E_INVALID_ARG); /* plain */
    CHECK_EQ_INT(ckpt_tree_set_dict_class(tree, d, "collections.OrderedDict"), 0);
    CHECK_EQ_INT(ckpt_tree_set_dict_state(tree, d, L()), CKPT_E_INVALID_ARG);
    CHECK_EQ_INT(ckpt_tree_set_dict_state(tree, d, D()), 0);
    CHECK_EQ_INT(ckpt_tree_set_dict_class(tree, d, NULL), CKPT_E_INVALID_ARG); /* has a state */
    CHECK_EQ_INT(ckpt_tree_set_dict_state(tree, d, NULL), 0);
    CHECK_EQ_INT(ckpt_tree_set_dict_class(tree, d, NULL), 0);
    CHECK(ckpt_value_dict_class(d) == NULL);
    CHECK_EQ_INT(ckpt_tree_set_parameter(tree, d, 1), CKPT_E_INVALID_ARG);
    CHECK_EQ_INT(ckpt_tree_set_parameter(NULL, d, 1), CKPT_E_INVALID_ARG);
    /* the class torch.load gives back: of the right kind, a Size of ints */
    ckpt_value *dev = S("cuda:1"), *size = TU();
    CHECK_EQ_INT(ckpt_tree_set_class(tree, dev, "torch.device"), 0);
    CHECK(!strcmp(ckpt_value_class(dev), "torch.device"));
    CHECK_EQ_INT(ckpt_tree_set_class(tree, dev, "torch.Size"), CKPT_E_INVALID_ARG);
    CHECK(strstr(ckpt_error_last()->message, "a torch.Size is built from a tuple, not a str"));
    CHECK_EQ_INT(ckpt_tree_set_class(tree, dev, "builtins.complex"), CKPT_E_INVALID_ARG);
    CHECK_EQ_INT(ckpt_tree_set_class(tree, dev, NULL), 0);
    CHECK(ckpt_value_class(dev) == NULL);
    CHECK_EQ_INT(ckpt_tree_append(tree, size, I(2)), 0);
    CHECK_EQ_INT(ckpt_tree_set_class(tree, size, "torch.Size"), 0);
    CHECK_EQ_INT(ckpt_tree_append(tree, size, S("a")), 0);
    CHECK_EQ_INT(ckpt_tree_set_class(tree, size, "torch.Size"), CKPT_E_INVALID_ARG);
    CHECK(strstr(ckpt_error_last()->message, "item 1 is a str"));
    CHECK_EQ_INT(ckpt_tree_set_class(NULL, size, NULL), CKPT_E_INVALID_ARG);
    /* a set holds what Python can hash: leaves, tuples of them, frozensets */
    ckpt_value *set_ = NULL, *frozen = NULL, *pair = TU(), *holds_list = TU();
    CHECK_EQ_INT(ckpt_tree_empty_set(&set_, tree), 0);
    CHECK_EQ_INT(ckpt_tree_empty_set(&frozen, tree), 0);
    CHECK(set_ && frozen && ckpt_value_kind(set_) == CKPT_KIND_SET);
    add(pair, I(1));
    add(pair, S("a"));
    add(holds_list, L());
    add(frozen, I(3));
    CHECK_EQ_INT(ckpt_tree_set_class(tree, frozen, "builtins.frozenset"), 0);
    add(set_, pair);
    add(set_, frozen);
    CHECK_EQ_INT(ckpt_tree_append(tree, set_, L()), CKPT_E_INVALID_ARG);
    CHECK(strstr(ckpt_error_last()->message, "expected a hashable set item, got a list"));
    CHECK_EQ_INT(ckpt_tree_append(tree, set_, holds_list), CKPT_E_INVALID_ARG);
    CHECK(strstr(ckpt_error_last()->message, "got a list inside a tuple"));
    CHECK_EQ_INT(ckpt_value_len(set_), 2);
    CHECK_EQ_INT(ckpt_tree_empty_set(NULL, tree), CKPT_E_INVALID_ARG);
}

/* Real torch.save files (the corpus): a BatchNorm state dict keeps its
 * OrderedDict and _metadata, nn.Parameter its flag, through both formats
 * and a --select. */
TEST(state_dict_corpus) {
    const char *bn = CKPT_CORPUS "/torch/burn/batch_norm2d.pt",
               *param = CKPT_CORPUS "/torch/burn/parameter.pt";
    ckpt_file *f, *g;
    CHECK_EQ_INT(ckpt_open(&f, bn, NULL), 0);
    if (!f) return;
    const ckpt_value *root = ckpt_file_root(f), *st = ckpt_value_dict_state(root);
    CHECK_EQ_STR(ckpt_value_dict_class(root), "collections.OrderedDict");
    CHECK(st && ckpt_value_len(st) == 1);
    const ckpt_value *md = st ? ckpt_value_item(st, 0) : NULL;
    /* OrderedDict([('', {'version': 1}), ('norm1', {'version': 2})]) */
    CHECK(md && ckpt_value_len(md) == 2 &&
          strcmp(ckpt_value_str(ckpt_value_key(md, 1), NULL), "norm1") == 0);
    CHECK_EQ_INT(ckpt_file_tensor_count(f), 5);
    const char *outs[] = {"bn.safetensors", "bn.pt"};
    for (int i = 0; i < 2; i++) {
        char out[256], back[256];
        snprintf(out, sizeof out, "%s", tpath(outs[i]));
        snprintf(back, sizeof back, "%s", tpath(i ? "bn_back2.pt" : "bn_back.pt"));
        CHECK_EQ_INT(ckpt_convert(NULL, bn, out, NULL), 0);
        CHECK_EQ_INT(ckpt_convert(NULL, out, back, NULL), 0);
        CHECK_EQ_INT(ckpt_open(&g, back, NULL), 0);
        if (g) {
            CHECK(same_tree(root, ckpt_file_root(g)));
            ckpt_close(g);
        }
    }
    /* a selection keeps the state dict's class and attributes */
    ckpt_convert_options o = CKPT_CONVERT_OPTIONS_INIT;
    const char *sel[] = {"norm1.weight"};
    o.select = sel;
    o.nselect = 1;
    CHECK_EQ_INT(ckpt_convert(NULL, bn, tpath("bn_sel.pt"), &o), 0);
    CHECK_EQ_INT(ckpt_open(&g, tpath("bn_sel.pt"), NULL), 0);
    if (g) {
        const ckpt_value *r = ckpt_file_root(g);
        CHECK(ckpt_value_len(r) == 1 && ckpt_value_dict_class(r) != NULL);
        CHECK(same_tree(st, ckpt_value_dict_state(r)));
        ckpt_close(g);
    }
    ckpt_close(f);

    CHECK_EQ_INT(ckpt_open(&f, param, NULL), 0);
    if (!f) return;
    const ckpt_tensor *t = ckpt_file_find_tensor(f, "param");
    CHECK(t && ckpt_tensor_is_parameter(t) && t->requires_grad);
    CHECK_EQ_INT(ckpt_convert(NULL, param, tpath("param.safetensors"), NULL), 0);
    CHECK_EQ_INT(ckpt_convert(NULL, tpath("param.safetensors"), tpath("param_back.pt"), NULL), 0);
    CHECK_EQ_INT(ckpt_open(&g, tpath("param_back.pt"), NULL), 0);
    if (g) {
        CHECK(same_tree(ckpt_file_root(f), ckpt_file_root(g)));
        ckpt_close(g);
    }
    ckpt_close(f);
}

/* rename carries _metadata along: module paths follow their tensors, as
 * torch's consume_prefix_in_state_dict_if_present does ("module" becomes
 * "" and replaces the wrapper's entry), modules without tensors follow
 * their parent. */
static void ddp_state_dict(const char *path) {
    fresh_tree();
    ckpt_value *root = D(), *st = D(), *md = D(), *bn = D();
    set(root, "module.bn.w", T(CKPT_DT_F32, 1, SH2, F32_12, 8));
    set(root, "module.fc.b", T(CKPT_DT_I64, 1, SH1, I64_7, 8));
    set(bn, "version", I(2));
    set(md, "", I(0));
    set(md, "module", I(1));
    set(md, "module.bn", bn);
    set(md, "module.relu", I(3));
    set(md, "module.fc", I(4));
    set(st, "_metadata", md);
    set(st, "other", S("kept"));
    CHECK_EQ_INT(ckpt_tree_set_dict_class(tree, root, "collections.OrderedDict"), 0);
    CHECK_EQ_INT(ckpt_tree_set_dict_state(tree, root, st), 0);
    CHECK_EQ_INT(ckpt_tree_write(root, path, CKPT_FORMAT_TORCH_ZIP, NULL), 0);
}

TEST(rename_metadata) {
    ddp_state_dict(tpath("ddp.pt"));
    ckpt_rename_rule strip = {CKPT_RENAME_STRIP_PREFIX, "module.", NULL, NULL};
    CHECK_EQ_INT(ckpt_rename(NULL, tpath("ddp.pt"), tpath("plain.pt"), &strip, 1, NULL), 0);
    ckpt_file *f;
    CHECK_EQ_INT(ckpt_open(&f, tpath("plain.pt"), NULL), 0);
    if (!f) return;
    const ckpt_value *r = ckpt_file_root(f), *s2 = ckpt_value_dict_state(r);
    CHECK(ckpt_file_find_tensor(f, "bn.w") && ckpt_file_find_tensor(f, "fc.b"));
    CHECK(ckpt_value_dict_class(r) != NULL && s2 && ckpt_value_len(s2) == 2);
    const ckpt_value *m2 = s2 ? ckpt_value_item(s2, 0) : NULL;
    static const char *keys[] = {"", "bn", "relu", "fc"};
    static const int64_t vals[] = {1, -1, 3, 4}; /* -1: the {"version": 2} dict */
    CHECK(m2 && ckpt_value_len(m2) == 4);
    for (size_t i = 0; m2 && i < 4 && i < ckpt_value_len(m2); i++) {
        CHECK_EQ_STR(ckpt_value_str(ckpt_value_key(m2, i), NULL), keys[i]);
        int64_t v = -1;
        if (vals[i] >= 0)
            CHECK_EQ_INT(ckpt_value_int(ckpt_value_item(m2, i), &v), 0);
        else
            CHECK_EQ_INT(ckpt_value_kind(ckpt_value_item(m2, i)), CKPT_KIND_DICT);
        CHECK_EQ_INT(v, vals[i]);
    }
    CHECK(s2 && strcmp(ckpt_value_str(ckpt_value_item(s2, 1), NULL), "kept") == 0);
    ckpt_close(f);
    /* and back: every module under "module." (the root's "" included) */
    ckpt_rename_rule add = {CKPT_RENAME_ADD_PREFIX, "module", NULL, NULL};
    CHECK_EQ_INT(ckpt_rename(NULL, tpath("plain.pt"), tpath("wrapped.pt"), &add, 1, NULL), 0);
    CHECK_EQ_INT(ckpt_open(&f, tpath("wrapped.pt"), NULL), 0);
    if (!f) return;
    s2 = ckpt_value_dict_state(ckpt_file_root(f));
    m2 = s2 ? ckpt_value_item(s2, 0) : NULL;
    static const char *wrapped[] = {"module", "module.bn", "module.relu", "module.fc"};
    CHECK(m2 && ckpt_value_len(m2) == 4);
    for (size_t i = 0; m2 && i < 4 && i < ckpt_value_len(m2); i++)
        CHECK_EQ_STR(ckpt_value_str(ckpt_value_key(m2, i), NULL), wrapped[i]);
    ckpt_close(f);
}

/* OUT named for another format than IN's is refused before anything is
 * written: `ckpt rename model.pt model.safetensors` used to write a torch
 * zip under a .safetensors name, which safetensors' loader rejects. */
TEST(rename_out_format) {
    ddp_state_dict(tpath("ddp2.pt"));
    ckpt_rename_rule strip = {CKPT_RENAME_STRIP_PREFIX, "module.", NULL, NULL};
    static const char *const wrong[] = {"plain2.safetensors", "plain2.SafeTensors", "plain2.dcp"};
    for (size_t i = 0; i < 3; i++) {
        CHECK_EQ_INT(ckpt_rename(NULL, tpath("ddp2.pt"), tpath(wrong[i]), &strip, 1, NULL),
                     CKPT_E_INVALID_ARG);
        CHECK(strstr(ckpt_error_last()->message, "rename writes IN's format, torch-zip") != NULL);
        CHECK_EQ_STR(ckpt_error_last()->file, tpath(wrong[i]));
        CHECK(access(tpath(wrong[i]), F_OK) != 0);
    }
    /* names without a format's extension, or with IN's, are written */
    CHECK_EQ_INT(ckpt_rename(NULL, tpath("ddp2.pt"), tpath("plain2.ckpt"), &strip, 1, NULL), 0);
    CHECK_EQ_INT(ckpt_rename(NULL, tpath("ddp2.pt"), tpath("plain2.out"), &strip, 1, NULL), 0);
}

/* ------------------------------------------------------------ round trips */

static const double F64_6[6] = {0.0, -0.0, 1.5, INFINITY, -INFINITY, 3e-310};
static const uint64_t SH23[2] = {2, 3};

/* Every kind of value through both formats and back, equal in ckpt's
 * model (identity of shared nodes included). */
TEST(roundtrip_values) {
    fresh_tree();
    ckpt_value *root = D(), *opt = D(), *state = D(), *s0 = D(), *groups = L(), *g = D();
    ckpt_value *betas = TU(), *w = T(CKPT_DT_F64, 2, SH23, F64_6, 48), *by, *nul;
    CHECK_EQ_INT(ckpt_tree_bytes(&by, tree, "\0\x01\xfe", 3), 0);
    CHECK_EQ_INT(ckpt_tree_str(&nul, tree, "nul\0in \"q\" \xc3\xa9", 14), 0);
    set(root, "w", w);
    set(root, "tied", w);
    CHECK_EQ_INT(ckpt_tree_set(tree, state, I(0), s0), 0);
    set(s0, "step", I(-3));
    set(s0, "buf", T(CKPT_DT_F32, 1, SH2, F32_12, 8));
    add(betas, F(0.9));
    add(betas, F(NAN));
    set(g, "betas", betas);
    set(g, "lr", F(1e-3));
    set(g, "flags", B(0));
    set(g, "none", N());
    set(g, "text", nul);
    set(g, "raw", by);
    add(groups, g);
    add(groups, g); /* one node twice */
    set(opt, "state", state);
    set(opt, "param_groups", groups);
    set(root, "optimizer", opt);
    /* what the builder cannot make: big ints, sets, dtype refs */
    static const uint8_t big[10] = {0, 0, 0, 0, 0, 0, 0, 0, 0x40, 0x80}; /* negative */
    ckpt_value *set_v = ckpt_value_new(&scratch, CKPT_KIND_SET);
    CHECK_EQ_INT(ckpt_value_append(&scratch, set_v, I(2)), 0);
    set(root, "big", ckpt_value_new_int_le(&scratch, big, sizeof big));
    set(root, "set", set_v);
    set(root, "dtype", ckpt_value_new_global(&scratch, "torch", "bfloat16"));
    CHECK(read_back(root, "values.safetensors", CKPT_FORMAT_SAFETENSORS));
    CHECK(read_back(root, "values.pt", CKPT_FORMAT_TORCH_ZIP));

    /* the safetensors reader lists the tied tensor under both names */
    ckpt_file *f;
    CHECK_EQ_INT(ckpt_open(&f, tpath("values.safetensors"), NULL), 0);
    if (!f) return;
    const ckpt_tensor *a = ckpt_file_find_tensor(f, "tied"), *b = ckpt_file_find_tensor(f, "w");
    CHECK(a && b && ckpt_tensor_storage_id(a) == ckpt_tensor_storage_id(b));
    CHECK_EQ_STR(meta(f, "ckpt.aliases"), "{\"w\":\"tied\"}");
    CHECK_EQ_INT(ckpt_file_tensor_count(f), 3);
    ckpt_close(f);
}

/* Views of one storage: sharing kept through safetensors (rebuilt storage,
 * or the stored tensor that covers it whole) and through torch. */
TEST(roundtrip_views) {
    fresh_tree();
    static float base[12];
    for (int i = 0; i < 12; i++) base[i] = (float)i * 0.5f;
    ckpt_storage *st = ckpt_arena_alloc(&scratch, sizeof *st);
    *st = (ckpt_storage){.dtype = CKPT_DT_F32,
                         .nbytes = 48,
                         .data = (const uint8_t *)base,
                         .key = "",
                         .member = "",
                         .file_offset = CKPT_NO_OFFSET};
    uint64_t s34[2] = {3, 4}, st34[2] = {4, 1}, s2[1] = {2}, st2[1] = {5}, s43[2] = {4, 3},
             st43[2] = {1, 4};
    ckpt_value *col, *pair, *full, *t;
    CHECK_EQ_INT(ckpt_tensor_new(&col, &scratch, st, CKPT_DT_F32, 1, s2, st2, 1, "", "", 0), 0);
    CHECK_EQ_INT(ckpt_tensor_new(&pair, &scratch, st, CKPT_DT_F32, 1, s2, st2, 3, "", "", 0), 0);
    ckpt_value *root = D();
    set(root, "col", col);
    set(root, "pair", pair);
    CHECK(read_back(root, "views.safetensors", CKPT_FORMAT_SAFETENSORS));
    CHECK(read_back(root, "views.pt", CKPT_FORMAT_TORCH_ZIP));
    ckpt_file *f;
    CHECK_EQ_INT(ckpt_open(&f, tpath("views.safetensors"), NULL), 0);
    if (f) {
        ckpt_arena a = {0};
        const ckpt_value *back;
        CHECK_EQ_INT(ckpt_structure_decode(&back, f, &a), 0);
        const ckpt_tensor *x = back->u.dict.vals[0]->u.tensor, *y = back->u.dict.vals[1]->u.tensor;
        CHECK(x->storage == y->storage && x->storage->nbytes == 48);
        CHECK(x->storage_offset == 1 && y->storage_offset == 3 && x->stride[0] == 5);
        ckpt_arena_free(&a);
        ckpt_close(f);
    }
    /* with a tensor covering the storage: no copy, its bytes are the storage */
    CHECK_EQ_INT(ckpt_tensor_new(&full, &scratch, st, CKPT_DT_F32, 2, s34, st34, 0, "", "", 0), 0);
    CHECK_EQ_INT(ckpt_tensor_new(&t, &scratch, st, CKPT_DT_F32, 2, s43, st43, 0, "", "", 0), 0);
    set(root, "full", full);
    set(root, "t", t);
    CHECK(read_back(root, "views2.safetensors", CKPT_FORMAT_SAFETENSORS));
    CHECK_EQ_INT(ckpt_open(&f, tpath("views2.safetensors"), NULL), 0);
    if (f) {
        ckpt_arena a = {0};
        const ckpt_value *back;
        CHECK_EQ_INT(ckpt_structure_decode(&back, f, &a), 0);
        const ckpt_tensor *x = back->u.dict.vals[0]->u.tensor;
        CHECK(x->storage->data == ckpt_file_find_tensor(f, "full")->storage->data);
        ckpt_arena_free(&a);
        ckpt_close(f);
    }
}

/* complex128 is stored as F64 [..., 2] and comes back as C128; big-endian
 * storages are written little-endian. */
TEST(roundtrip_dtypes) {
    fresh_tree();
    static const double c[4] = {1.0, -2.0, 0.25, 1e300};
    uint64_t s2[1] = {2};
    ckpt_value *root = D();
    set(root, "z", T(CKPT_DT_C128, 1, s2, c, 32));
    static const uint8_t be[4] = {0x01, 0x02, 0x03, 0x04}; /* I16 0x0102, 0x0304 */
    ckpt_storage *st = ckpt_arena_alloc(&scratch, sizeof *st);
    *st = (ckpt_storage){.dtype = CKPT_DT_I16,
                         .nbytes = 4,
                         .data = be,
                         .key = "",
                         .member = "",
                         .file_offset = CKPT_NO_OFFSET,
                         .big_endian = 1};
    uint64_t one[1] = {1};
    ckpt_value *bev;
    CHECK_EQ_INT(ckpt_tensor_new(&bev, &scratch, st, CKPT_DT_I16, 1, s2, one, 0, "", "", 0), 0);
    set(root, "be", bev);
    CHECK(read_back(root, "dtypes.safetensors", CKPT_FORMAT_SAFETENSORS));
    CHECK(read_back(root, "dtypes.pt", CKPT_FORMAT_TORCH_ZIP));
    ckpt_file *f;
    CHECK_EQ_INT(ckpt_open(&f, tpath("dtypes.safetensors"), NULL), 0);
    if (!f) return;
    const ckpt_tensor *z = ckpt_file_find_tensor(f, "z"), *b = ckpt_file_find_tensor(f, "be");
    CHECK(z && ckpt_tensor_dtype(z) == CKPT_DT_F64 && ckpt_tensor_ndim(z) == 2 &&
          ckpt_tensor_shape(z)[1] == 2);
    const void *p;
    size_t n;
    CHECK(b && ckpt_tensor_data(b, &p, &n) == 0 && n == 4 && memcmp(p, "\x02\x01\x04\x03", 4) == 0);
    ckpt_close(f);
}

/* ------------------------------------------------------------ refusals */

TEST(refusals) {
    fresh_tree();
    ckpt_value *root = D();
    /* an opaque object is named with its path */
    set(root, "args", ckpt_value_new_object(&scratch, "argparse.Namespace"));
    set(root, "w", T(CKPT_DT_F32, 1, SH2, F32_12, 8));
    for (int fmt = 0; fmt < 2; fmt++) {
        int rc = ckpt_tree_write(root, tpath("opaque.out"),
                                 fmt ? CKPT_FORMAT_TORCH_ZIP : CKPT_FORMAT_SAFETENSORS, NULL);
        CHECK_EQ_INT(rc, CKPT_E_UNSUPPORTED);
        CHECK(strstr(ckpt_error_last()->message, "argparse.Namespace at \"args\""));
    }
    CHECK(access(tpath("opaque.out"), F_OK) != 0);

    /* a cycle */
    fresh_tree();
    ckpt_value *l = L();
    add(l, l);
    CHECK_EQ_INT(ckpt_tree_write(l, tpath("cycle.pt"), CKPT_FORMAT_TORCH_ZIP, NULL),
                 CKPT_E_UNSUPPORTED);
    CHECK(strstr(ckpt_error_last()->message, "cyclic"));

    /* __metadata__ and colliding names in safetensors; fine in torch */
    fresh_tree();
    root = D();
    set(root, "__metadata__", T(CKPT_DT_F32, 1, SH2, F32_12, 8));
    CHECK_EQ_INT(ckpt_tree_write(root, tpath("r.safetensors"), CKPT_FORMAT_SAFETENSORS, NULL),
                 CKPT_E_UNSUPPORTED);
    CHECK(strstr(ckpt_error_last()->message, "__metadata__"));
    CHECK_EQ_INT(ckpt_tree_write(root, tpath("r.pt"), CKPT_FORMAT_TORCH_ZIP, NULL), 0);
    fresh_tree();
    root = D();
    ckpt_value *a = D();
    set(root, "a.b", T(CKPT_DT_F32, 1, SH2, F32_12, 8));
    set(a, "b", T(CKPT_DT_I64, 1, SH1, I64_7, 8));
    set(root, "a", a);
    CHECK_EQ_INT(ckpt_tree_write(root, tpath("c.safetensors"), CKPT_FORMAT_SAFETENSORS, NULL),
                 CKPT_E_UNSUPPORTED);
    CHECK(strstr(ckpt_error_last()->message, "\"a.b\""));
    CHECK_EQ_INT(ckpt_tree_write(root, tpath("c.pt"), CKPT_FORMAT_TORCH_ZIP, NULL), 0);

    /* dtypes a format lacks */
    fresh_tree();
    root = D();
    set(root, "q", T(CKPT_DT_QI8, 1, SH2, "ab", 2));
    CHECK_EQ_INT(ckpt_tree_write(root, tpath("q.safetensors"), CKPT_FORMAT_SAFETENSORS, NULL),
                 CKPT_E_UNSUPPORTED);
    CHECK_EQ_INT(ckpt_tree_write(root, tpath("q.pt"), CKPT_FORMAT_TORCH_ZIP, NULL),
                 CKPT_E_UNSUPPORTED);
    CHECK(strstr(ckpt_error_last()->message, "QI8"));

    /* options and builder arguments */
    const char *k[] = {"ckpt.xxh3"}, *v[] = {"x"}, *k2[] = {"a", "a"}, *v2[] = {"1", "2"};
    ckpt_write_options o = {.version = CKPT_WRITE_OPTIONS_VERSION,
                            .meta_keys = k,
                            .meta_values = v,
                            .nmeta = 1},
                       o2 = {.version = CKPT_WRITE_OPTIONS_VERSION,
                             .meta_keys = k2,
                             .meta_values = v2,
                             .nmeta = 2};
    CHECK_EQ_INT(ckpt_tree_write(root, tpath("o.pt"), CKPT_FORMAT_TORCH_ZIP, &o),
                 CKPT_E_INVALID_ARG);
    CHECK_EQ_INT(ckpt_tree_write(root, tpath("o.pt"), CKPT_FORMAT_TORCH_ZIP, &o2),
                 CKPT_E_INVALID_ARG);
    CHECK_EQ_INT(ckpt_tree_write(root, tpath("o.pt"), CKPT_FORMAT_PICKLE, NULL),
                 CKPT_E_INVALID_ARG);
    ckpt_value *x;
    CHECK_EQ_INT(ckpt_tree_str(&x, tree, "\xc3", 1), CKPT_E_INVALID_ARG);
    CHECK(x == NULL);
    CHECK_EQ_INT(ckpt_tree_tensor(&x, tree, CKPT_DT_F32, 1, SH2, F32_12, 7), CKPT_E_INVALID_ARG);
    CHECK_EQ_INT(ckpt_tree_set(tree, L(), S("k"), N()), CKPT_E_INVALID_ARG);
    CHECK_EQ_INT(ckpt_tree_set(tree, D(), L(), N()), CKPT_E_INVALID_ARG);
}

/* ------------------------------------------------------------ convert */

static void sample_checkpoint(const char *path) {
    fresh_tree();
    ckpt_value *root = D(), *model = D(), *xs = L();
    set(model, "w", T(CKPT_DT_F32, 1, SH2, F32_12, 8));
    set(root, "model", model);
    set(root, "model_ema", D());
    add(xs, I(10));
    add(xs, I(11));
    add(xs, I(12));
    set(root, "xs", xs);
    set(root, "args", ckpt_value_new_object(&scratch, "argparse.Namespace"));
    CHECK_EQ_INT(ckpt_write_value(root, path, CKPT_FORMAT_TORCH_ZIP, NULL, NULL),
                 CKPT_E_UNSUPPORTED); /* opaque: a writer cannot make it */
    root->u.dict.n--;                 /* drop "args" */
    CHECK_EQ_INT(ckpt_tree_write(root, path, CKPT_FORMAT_TORCH_ZIP, NULL), 0);
}

TEST(convert_select_and_metadata) {
    const char *src = tpath("sel.pt");
    sample_checkpoint(src);
    ckpt_convert_options o = CKPT_CONVERT_OPTIONS_INIT;
    const char *sel[] = {"model", "xs.1"};
    const char *k[] = {"tp", "config"}, *v[] = {"2", "overridden"};
    o.select = sel;
    o.nselect = 2;
    o.config_json = "{ \"hidden\" : 8 }";
    o.write = (ckpt_write_options){
        .version = CKPT_WRITE_OPTIONS_VERSION, .meta_keys = k, .meta_values = v, .nmeta = 2};
    ckpt_convert_report r;
    CHECK_EQ_INT(ckpt_convert(&r, src, tpath("sel.safetensors"), &o), 0);
    CHECK_EQ_INT(r.format, CKPT_FORMAT_SAFETENSORS);
    CHECK_EQ_INT(r.tensors, 1);
    CHECK_EQ_INT(r.keys, 1);
    ckpt_file *f;
    CHECK_EQ_INT(ckpt_open(&f, tpath("sel.safetensors"), NULL), 0);
    if (f) {
        ckpt_arena a = {0};
        const ckpt_value *back;
        CHECK_EQ_INT(ckpt_structure_decode(&back, f, &a), 0);
        /* model kept whole, model_ema not ("model" is not a string prefix),
         * xs keeps item 1, renumbered */
        CHECK(back->u.dict.n == 2 && strcmp(back->u.dict.keys[0]->u.s.p, "model") == 0);
        const ckpt_value *xs = back->u.dict.vals[1];
        CHECK(xs->kind == CKPT_KIND_LIST && xs->u.seq.n == 1 && xs->u.seq.items[0]->u.i.v == 11);
        CHECK_EQ_STR(meta(f, "tp"), "2");
        CHECK_EQ_STR(meta(f, "config"), "overridden"); /* --meta wins */
        CHECK_EQ_STR(meta(f, "format"), "pt");
        ckpt_arena_free(&a);
        ckpt_close(f);
    }
    /* metadata carried from the input; config compacted */
    o.nselect = 0;
    o.write.nmeta = 1;
    CHECK_EQ_INT(ckpt_convert(NULL, tpath("sel.safetensors"), tpath("sel2.pt"), &o), 0);
    CHECK_EQ_INT(ckpt_open(&f, tpath("sel2.pt"), NULL), 0);
    if (f) {
        CHECK_EQ_STR(meta(f, "config"), "{\"hidden\":8}");
        CHECK_EQ_STR(meta(f, "tp"), "2");
        CHECK(meta(f, "ckpt.xxh3") != NULL && meta(f, "ckpt.structure") == NULL);
        ckpt_close(f);
    }
    const char *none[] = {"mode"};
    o.select = none;
    o.nselect = 1;
    CHECK_EQ_INT(ckpt_convert(NULL, src, tpath("none.pt"), &o), CKPT_E_NOTFOUND);
    o.nselect = 0;
    o.config_json = "[1]";
    CHECK_EQ_INT(ckpt_convert(NULL, src, tpath("cfg.pt"), &o), CKPT_E_INVALID_ARG);
    CHECK_EQ_INT(ckpt_convert(NULL, src, tpath("noext"), NULL), CKPT_E_INVALID_ARG);
}

/* What a progress callback saw: calls, the first and last counts, and
 * whether done only ever grew (by at most one) toward one total. */
typedef struct progress_log {
    int calls, monotonic;
    uint64_t first, last, total;
} progress_log;

static void record_progress(void *ctx, uint64_t done, uint64_t total) {
    progress_log *p = ctx;
    if (p->calls == 0) {
        p->first = done;
        p->total = total;
        p->monotonic = 1;
    } else if (done < p->last || done > p->last + 1 || total != p->total || done > total) {
        p->monotonic = 0;
    }
    p->last = done;
    p->calls++;
}

/* exclude leaves out what its globs name (whole subtrees too, after
 * select); the writer reports each tensor it writes, 0 to total. */
TEST(convert_exclude_and_progress) {
    const char *src = tpath("excl.pt");
    fresh_tree();
    ckpt_value *root = D(), *layers = D(), *l0 = D(), *l1 = D(), *opt = D();
    set(l0, "w", T(CKPT_DT_F32, 1, SH2, F32_12, 8));
    set(l0, "b", T(CKPT_DT_F32, 1, SH2, F32_12, 8));
    set(l1, "w", T(CKPT_DT_F32, 1, SH2, F32_12, 8));
    set(l1, "b", T(CKPT_DT_F32, 1, SH2, F32_12, 8));
    set(layers, "0", l0);
    set(layers, "1", l1);
    set(root, "layers", layers);
    set(opt, "state", T(CKPT_DT_F32, 1, SH2, F32_12, 8));
    set(root, "optimizer", opt);
    set(root, "step", I(3));
    CHECK_EQ_INT(ckpt_tree_write(root, src, CKPT_FORMAT_TORCH_ZIP, NULL), 0);

    const char *ex[] = {"*.b", "optimizer*"};
    for (int fmt = 0; fmt < 2; fmt++) {
        const char *out = tpath(fmt ? "excl_out.pt" : "excl_out.safetensors");
        progress_log log = {0};
        ckpt_convert_options o = CKPT_CONVERT_OPTIONS_INIT;
        o.exclude = ex;
        o.nexclude = 2;
        o.write.progress = record_progress;
        o.write.progress_ctx = &log;
        ckpt_convert_report r;
        CHECK_EQ_INT(ckpt_convert(&r, src, out, &o), 0);
        CHECK_EQ_INT(r.keys, 2);
        CHECK_EQ_INT(r.tensors, 2);
        CHECK_EQ_INT(log.calls, 3);
        CHECK(log.monotonic && log.first == 0 && log.last == 2 && log.total == 2);
        ckpt_file *f;
        CHECK_EQ_INT(ckpt_open(&f, out, NULL), 0);
        if (f) {
            CHECK_EQ_INT(ckpt_file_tensor_count(f), 2);
            CHECK(ckpt_file_find_tensor(f, "layers.0.w") && ckpt_file_find_tensor(f, "layers.1.w"));
            CHECK(!ckpt_file_find_tensor(f, "optimizer.state"));
            ckpt_close(f);
        }
    }
    /* with select: what is selected, less what is excluded */
    ckpt_convert_options o = CKPT_CONVERT_OPTIONS_INIT;
    const char *sel[] = {"layers"}, *ex1[] = {"layers.1*"}, *all[] = {"*"};
    o.select = sel;
    o.nselect = 1;
    o.exclude = ex1;
    o.nexclude = 1;
    ckpt_convert_report r;
    CHECK_EQ_INT(ckpt_convert(&r, src, tpath("excl_sel.pt"), &o), 0);
    CHECK_EQ_INT(r.keys, 2);
    o.nselect = 0;
    o.exclude = all;
    CHECK_EQ_INT(ckpt_convert(NULL, src, tpath("excl_all.pt"), &o), CKPT_E_NOTFOUND);
    CHECK(strstr(ckpt_error_last()->message, "leave nothing") != NULL);
    o.exclude = NULL;
    CHECK_EQ_INT(ckpt_convert(NULL, src, tpath("excl_null.pt"), &o), CKPT_E_INVALID_ARG);
}

/* ------------------------------------------------------------ verify */

static void flip(const char *path, uint64_t at) {
    FILE *fp = fopen(path, "r+b");
    CHECK(fp != NULL);
    if (!fp) return;
    fseek(fp, (long)at, SEEK_SET);
    int c = fgetc(fp);
    fseek(fp, (long)at, SEEK_SET);
    fputc(c ^ 0x20, fp);
    fclose(fp);
}

TEST(verify_digests) {
    fresh_tree();
    ckpt_value *root = D();
    set(root, "a", T(CKPT_DT_I64, 1, SH1, I64_7, 8));
    set(root, "b", T(CKPT_DT_F32, 1, SH2, F32_12, 8));
    const char *names[] = {"d.safetensors", "d.pt"};
    for (int i = 0; i < 2; i++) {
        const char *p = tpath(names[i]);
        CHECK_EQ_INT(
            ckpt_tree_write(root, p, i ? CKPT_FORMAT_TORCH_ZIP : CKPT_FORMAT_SAFETENSORS, NULL), 0);
        ckpt_file *f;
        CHECK_EQ_INT(ckpt_open(&f, p, NULL), 0);
        if (!f) continue;
        CHECK_EQ_INT(ckpt_verify(NULL, f), 0);
        uint64_t at = ckpt_tensor_file_offset(ckpt_file_find_tensor(f, "b")) + 1;
        ckpt_close(f);
        flip(p, at);
        CHECK_EQ_INT(ckpt_open(&f, p, NULL), 0);
        if (!f) continue;
        CHECK_EQ_INT(ckpt_verify(NULL, f), CKPT_E_CHECKSUM);
        CHECK(strstr(ckpt_error_last()->message, "tensor \"b\": XXH3-64"));
        ckpt_close(f);
    }
}

/* ------------------------------------------------------------ hostile */

/* A safetensors file with one F32[2] tensor "t" and the given ckpt.*
 * metadata (JSON text, escaped here). */
static void hostile(const char *path, const char *key, const char *json) {
    ckpt_buf h = {0};
    ckpt_buf_str(&h, "{\"__metadata__\":{");
    ckpt_buf_json_str(&h, key, strlen(key));
    ckpt_buf_byte(&h, ':');
    ckpt_buf_json_str(&h, json, strlen(json));
    ckpt_buf_str(&h, "},\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}");
    FILE *fp = fopen(path, "wb");
    uint64_t n = h.len;
    for (int i = 0; i < 8; i++) fputc((int)(n >> (8 * i)) & 0xff, fp);
    fwrite(h.p, 1, h.len, fp);
    fwrite(F32_12, 1, 8, fp);
    fclose(fp);
    ckpt_buf_free(&h);
}

static int decode_rc(const char *json, uint32_t max_depth) {
    hostile(tpath("h.safetensors"), "ckpt.structure", json);
    ckpt_open_options oo = CKPT_OPEN_OPTIONS_INIT;
    oo.limits.max_depth = max_depth;
    ckpt_file *f;
    int rc = ckpt_open(&f, tpath("h.safetensors"), &oo);
    if (rc) return 1000 + rc;
    ckpt_arena a = {0};
    const ckpt_value *root;
    rc = ckpt_structure_decode(&root, f, &a);
    if (rc == 0) rc = ckpt_write_value(root, tpath("h.pt"), CKPT_FORMAT_TORCH_ZIP, NULL, NULL);
    ckpt_arena_free(&a);
    ckpt_close(f);
    return rc;
}

TEST(hostile_structure) {
    static const struct {
        const char *json;
        int rc;
    } cases[] = {
        {"{", CKPT_E_FORMAT},
        {"{\"version\":4,\"root\":null}", CKPT_E_FORMAT},
        {"{\"version\":2,\"root\":null}", 0},
        /* dict classes and attributes: version 2, a known class, a dict state */
        {"{\"version\":1,\"root\":{\"dict\":[],\"class\":\"collections.OrderedDict\"}}",
         CKPT_E_FORMAT},
        {"{\"version\":2,\"root\":{\"dict\":[],\"class\":\"builtins.dict\"}}", CKPT_E_FORMAT},
        {"{\"version\":2,\"root\":{\"dict\":[],\"class\":1}}", CKPT_E_FORMAT},
        {"{\"version\":2,\"root\":{\"dict\":[],\"state\":{\"dict\":[]}}}", CKPT_E_FORMAT},
        {"{\"version\":2,\"root\":{\"dict\":[],\"class\":\"collections.Counter\","
         "\"state\":[]}}",
         CKPT_E_FORMAT},
        {"{\"version\":2,\"root\":{\"dict\":[],\"class\":\"collections.Counter\","
         "\"state\":{\"list\":[]}}}",
         CKPT_E_FORMAT},
        {"{\"version\":2,\"root\":{\"dict\":[],\"class\":\"collections.Counter\","
         "\"extra\":1}}",
         CKPT_E_FORMAT},
        {"{\"version\":1,\"root\":{\"tensor\":\"t\",\"parameter\":1}}", CKPT_E_FORMAT},
        /* a state holding its own dict is a cycle: refused by the decoder */
        {"{\"version\":2,\"root\":{\"dict\":[],\"class\":\"collections.OrderedDict\","
         "\"state\":{\"dict\":[[\"me\",{\"ref\":0}]]}}}",
         CKPT_E_FORMAT},
        /* decodes, but a state holding a tensor cannot be written */
        {"{\"version\":2,\"root\":{\"dict\":[],\"class\":\"collections.OrderedDict\","
         "\"state\":{\"dict\":[[\"t\",{\"tensor\":\"t\"}]]}}}",
         CKPT_E_UNSUPPORTED},
        {"{\"version\":2,\"root\":{\"dict\":[[\"t\",{\"tensor\":\"t\",\"parameter\":true}]],"
         "\"class\":\"collections.OrderedDict\",\"state\":{\"dict\":[[\"_metadata\","
         "{\"dict\":[[\"\",1]],\"class\":\"collections.OrderedDict\"}]]}}}",
         0},
        {"{\"version\":1,\"root\":{\"bogus\":1}}", CKPT_E_FORMAT},
        {"{\"version\":1,\"root\":{\"ref\":0}}", CKPT_E_FORMAT},
        {"{\"version\":1,\"root\":[1]}", CKPT_E_FORMAT},
        {"{\"version\":1,\"root\":{\"tensor\":\"missing\"}}", CKPT_E_FORMAT},
        {"{\"version\":1,\"root\":{\"tensor\":\"t\",\"storage\":0,\"offset\":0,\"stride\":[1]}}",
         CKPT_E_FORMAT},
        {"{\"version\":1,\"root\":{\"tensor\":\"t\",\"storage\":0,\"offset\":0,\"stride\":[1]},"
         "\"storages\":[{\"nbytes\":1000000000000}]}",
         CKPT_E_LIMIT},
        {"{\"version\":1,\"root\":{\"tensor\":\"t\",\"storage\":0,\"offset\":1,\"stride\":[1]},"
         "\"storages\":[{\"nbytes\":8}]}",
         CKPT_E_FORMAT},
        {"{\"version\":1,\"root\":{\"tensor\":\"t\",\"storage\":0,\"offset\":0,\"stride\":[1]},"
         "\"storages\":[{\"nbytes\":8,\"data\":\"nope\"}]}",
         CKPT_E_FORMAT},
        {"{\"version\":1,\"root\":{\"tensor\":\"t\",\"dtype\":\"C128\"}}", CKPT_E_FORMAT},
        {"{\"version\":1,\"root\":{\"bytes\":\"abc\"}}", CKPT_E_FORMAT},
        {"{\"version\":1,\"root\":{\"int\":\"12a\"}}", CKPT_E_FORMAT},
        {"{\"version\":1,\"root\":{\"float\":\"zz\"}}", CKPT_E_FORMAT},
        {"{\"version\":1,\"root\":{\"dtype\":\"nope\"}}", CKPT_E_FORMAT},
        {"{\"version\":1,\"root\":{\"dict\":[[1]]}}", CKPT_E_FORMAT},
        {"{\"version\":1,\"root\":{\"list\":[{\"list\":[{\"list\":[{\"list\":[{\"list\":"
         "[]}]}]}]}]}}",
         CKPT_E_LIMIT},
        /* a list holding itself: a cycle, refused by the decoder (walkers
         * of the tree recursed until the stack overflowed) */
        {"{\"version\":1,\"root\":{\"list\":[{\"ref\":0}]}}", CKPT_E_FORMAT},
        {"{\"version\":1,\"root\":{\"list\":[{\"list\":[{\"ref\":0}]}]}}", CKPT_E_FORMAT},
        /* a ref to a finished container is a shared node, not a cycle */
        {"{\"version\":1,\"root\":{\"list\":[{\"list\":[]},{\"ref\":1}]}}", 0},
        /* a bytearray is numbered from version 3 (shared, it is one
         * object); version 2 files, which did not number it, read as before */
        {"{\"version\":3,\"root\":{\"list\":[{\"bytearray\":\"00\"},{\"ref\":1}]}}", 0},
        {"{\"version\":2,\"root\":{\"list\":[{\"bytearray\":\"00\"},{\"ref\":1}]}}", CKPT_E_FORMAT},
        {"{\"version\":2,\"root\":{\"list\":[{\"bytearray\":\"00\"},{\"list\":[]},"
         "{\"ref\":1}]}}",
         0},
        /* two views scattered into a rebuilt storage: fine */
        {"{\"version\":1,\"root\":{\"list\":[{\"tensor\":\"t\",\"storage\":0,\"offset\":2,"
         "\"stride\":[1]},{\"tensor\":\"t\",\"storage\":0,\"offset\":0,\"stride\":[2]}]},"
         "\"storages\":[{\"nbytes\":16}]}",
         0},
        {"{\"version\":1,\"root\":{\"int\":\"-123456789012345678901234567890\"}}", 0},
        /* what torch.device, torch.Size and Python's hash refuse: the
         * writer would write a pickle torch.load refuses */
        {"{\"version\":2,\"root\":{\"device\":\"foo\"}}", CKPT_E_FORMAT},
        {"{\"version\":2,\"root\":{\"device\":\"cuda:0:1\"}}", CKPT_E_FORMAT},
        {"{\"version\":2,\"root\":{\"device\":\"cuda:1\"}}", 0},
        {"{\"version\":2,\"root\":{\"size\":[{\"int\":\"18446744073709551616\"}]}}", CKPT_E_FORMAT},
        {"{\"version\":2,\"root\":{\"set\":[{\"list\":[]}]}}", CKPT_E_FORMAT},
        {"{\"version\":2,\"root\":{\"frozenset\":[{\"dict\":[]}]}}", CKPT_E_FORMAT},
        {"{\"version\":2,\"root\":{\"dict\":[[{\"bytearray\":\"00\"},1]]}}", CKPT_E_FORMAT},
        {"{\"version\":2,\"root\":{\"set\":[{\"tuple\":[1,{\"frozenset\":[]}]}]}}", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int rc = decode_rc(cases[i].json, 3);
        if (rc != cases[i].rc) fprintf(stderr, "case %zu: %s\n", i, cases[i].json);
        CHECK_EQ_INT(rc, cases[i].rc);
    }
    /* the decoder itself refuses them (not only the writer's read-back) */
    static const char *const refused[] = {"{\"version\":2,\"root\":{\"device\":\"foo\"}}",
                                          "unknown device type 'foo'",
                                          "{\"version\":2,\"root\":{\"set\":[{\"list\":[]}]}}",
                                          "expected a hashable set item, got a list"};
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i += 2) {
        hostile(tpath("h.safetensors"), "ckpt.structure", refused[i]);
        ckpt_file *hf;
        CHECK_EQ_INT(ckpt_open(&hf, tpath("h.safetensors"), NULL), 0);
        ckpt_arena ha = {0};
        const ckpt_value *hroot;
        CHECK_EQ_INT(ckpt_structure_decode(&hroot, hf, &ha), CKPT_E_FORMAT);
        CHECK(strstr(ckpt_error_last()->message, refused[i + 1]) != NULL);
        ckpt_arena_free(&ha);
        ckpt_close(hf);
    }
    /* aliases are checked when the file is opened */
    hostile(tpath("a.safetensors"), "ckpt.aliases", "{\"x\":\"missing\"}");
    ckpt_file *f;
    CHECK_EQ_INT(ckpt_open(&f, tpath("a.safetensors"), NULL), CKPT_E_FORMAT);
    hostile(tpath("a.safetensors"), "ckpt.aliases", "{\"t\":\"t\"}");
    CHECK_EQ_INT(ckpt_open(&f, tpath("a.safetensors"), NULL), CKPT_E_FORMAT);
    hostile(tpath("a.safetensors"), "ckpt.aliases", "{\"u\":\"t\"}");
    CHECK_EQ_INT(ckpt_open(&f, tpath("a.safetensors"), NULL), 0);
    if (f) {
        CHECK_EQ_INT(ckpt_file_tensor_count(f), 2);
        ckpt_close(f);
    }
    /* digests naming a tensor the file lacks */
    hostile(tpath("x.safetensors"), "ckpt.xxh3", "{\"gone\":\"0000000000000000\"}");
    CHECK_EQ_INT(ckpt_open(&f, tpath("x.safetensors"), NULL), 0);
    if (f) {
        CHECK_EQ_INT(ckpt_verify(NULL, f), CKPT_E_MISMATCH);
        ckpt_close(f);
    }
}

/* ------------------------------------------------------------ failures */

static int count_temporaries(void) {
    DIR *d = opendir(tmpdir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strstr(e->d_name, ".tmp-")) n++;
    if (d) closedir(d);
    return n;
}

/* Every write, fsync, rename and open failing in turn: the write fails
 * with CKPT_E_IO, the old file stays, no temporary is left. */
TEST(atomic_faults) {
    fresh_tree();
    ckpt_value *root = D();
    set(root, "a", T(CKPT_DT_I64, 1, SH1, I64_7, 8));
    static const char *ops[] = {"write", "fsync", "rename", "open"};
    for (int fmt = 0; fmt < 2; fmt++) {
        const char *p = tpath(fmt ? "fault.pt" : "fault.safetensors");
        for (size_t o = 0; o < 4; o++) {
            for (uint64_t n = 1; n < 100; n++) {
                FILE *fp = fopen(p, "wb");
                fputs("old", fp);
                fclose(fp);
                ckpt_atomic_fail_nth(ops[o], n, EIO);
                int rc = ckpt_tree_write(
                    root, p, fmt ? CKPT_FORMAT_TORCH_ZIP : CKPT_FORMAT_SAFETENSORS, NULL);
                ckpt_atomic_fail_nth(ops[o], 0, 0);
                CHECK_EQ_INT(count_temporaries(), 0);
                if (rc == 0) break; /* past the last call of this operation */
                CHECK_EQ_INT(rc, CKPT_E_IO);
                size_t len = 0;
                unsigned char *b = slurp(p, &len);
                /* a failed directory fsync comes after the rename */
                /* the directory's open and fsync come after the rename */
                int after = n == 2 && (strcmp(ops[o], "fsync") == 0 || strcmp(ops[o], "open") == 0);
                CHECK(b && ((len == 3 && memcmp(b, "old", 3) == 0) || after));
                free(b);
            }
        }
    }
}

/* A sharded set saved again as as many shards (the same names), with a
 * failure part way: none of the old set's files is replaced, so its index
 * still names the old set whole. Before, the shards written before the
 * failure replaced theirs and the old index named a mix of both sets. */
TEST(sharded_resave_fails_midway) {
    static const char *ops[] = {"write", "fsync", "rename"};
    static const char *shards[] = {"m-00001-of-00004.safetensors", "m-00002-of-00004.safetensors",
                                   "m-00003-of-00004.safetensors", "m-00004-of-00004.safetensors",
                                   "m.safetensors.index.json"};
    float va[64], vb[64];
    static const uint64_t sh[1] = {64};
    for (int i = 0; i < 64; i++) va[i] = (float)i, vb[i] = (float)-i;
    for (int v = 0; v < 2; v++) {
        fresh_tree();
        ckpt_value *root = D();
        char k[8];
        for (int i = 0; i < 4; i++) {
            snprintf(k, sizeof k, "w%d", i);
            set(root, k, T(CKPT_DT_F32, 1, sh, v ? vb : va, sizeof va));
        }
        CHECK_EQ_INT(ckpt_tree_write(root, tpath(v ? "b.safetensors" : "a.safetensors"),
                                     CKPT_FORMAT_SAFETENSORS, NULL),
                     0);
    }
    ckpt_convert_options o = CKPT_CONVERT_OPTIONS_INIT;
    o.max_shard_size = 256;
    char out[256], src_a[256], src_b[256], path[5][256];
    snprintf(out, sizeof out, "%s", tpath("m.safetensors"));
    snprintf(src_a, sizeof src_a, "%s", tpath("a.safetensors"));
    snprintf(src_b, sizeof src_b, "%s", tpath("b.safetensors"));
    for (int i = 0; i < 5; i++) snprintf(path[i], sizeof path[i], "%s", tpath(shards[i]));
    unsigned char *before[5];
    size_t len[5];
    for (size_t op = 0; op < 3; op++) {
        for (uint64_t n = 1; n < 40; n++) {
            CHECK_EQ_INT(ckpt_convert(NULL, src_a, out, &o), 0);
            for (int i = 0; i < 5; i++) before[i] = slurp(path[i], &len[i]);
            ckpt_atomic_fail_nth(ops[op], n, EIO);
            int rc = ckpt_convert(NULL, src_b, out, &o);
            ckpt_atomic_fail_nth(ops[op], 0, 0);
            CHECK_EQ_INT(count_temporaries(), 0);
            int changed = 0;
            for (int i = 0; i < 5; i++) {
                size_t m = 0;
                unsigned char *now = slurp(path[i], &m);
                changed +=
                    i < 4 && !(now && before[i] && m == len[i] && memcmp(now, before[i], m) == 0);
                free(now);
                free(before[i]);
            }
            if (rc == 0) {
                CHECK_EQ_INT(changed, 4);
                break; /* past the last call of this operation */
            }
            CHECK_EQ_INT(rc, CKPT_E_IO);
            /* the old set whole (every write and fsync before the renames);
             * once they began, no index, or the new set whole */
            CHECK(changed == 0 || changed == 4 || access(path[4], F_OK) != 0);
            if (strcmp(ops[op], "write") == 0) CHECK_EQ_INT(changed, 0);
        }
    }
}

static int fail_at; /* the allocation that fails (fail_alloc.h) */

/* Every allocation failing in turn, through convert (open, structure
 * decode, both writers): CKPT_E_NOMEM or success, never a crash or leak. */
TEST(allocation_failures) {
    char src[256];
    snprintf(src, sizeof src, "%s", tpath("alloc.safetensors"));
    fresh_tree();
    ckpt_value *root = D(), *l = L();
    ckpt_value *w = T(CKPT_DT_F32, 1, SH2, F32_12, 8);
    set(root, "w", w);
    set(root, "tied", w);
    add(l, I(3));
    add(l, S("x"));
    set(root, "l", l);
    /* a state dict's class, attributes and a parameter (decoded, written) */
    ckpt_value *st = D(), *md = D();
    set(md, "", I(1));
    set(st, "_metadata", md);
    CHECK_EQ_INT(ckpt_tree_set_dict_class(tree, root, "collections.OrderedDict"), 0);
    CHECK_EQ_INT(ckpt_tree_set_dict_state(tree, root, st), 0);
    CHECK_EQ_INT(ckpt_tree_set_parameter(tree, w, 1), 0);
    CHECK_EQ_INT(ckpt_tree_write(root, src, CKPT_FORMAT_SAFETENSORS, NULL), 0);
    int nomem = 0, ok = 0;
    for (int fmt = 0; fmt < 2; fmt++) {
        for (fail_at = 1; fail_at < 2000; fail_at++) {
            fail_alloc_arm(fail_at);
            int rc = ckpt_convert(NULL, src, tpath(fmt ? "alloc.pt" : "alloc2.safetensors"), NULL);
            ckpt_set_allocator(NULL);
            if (rc == CKPT_E_NOMEM)
                nomem++;
            else if (rc == 0)
                ok++;
            else {
                CHECK_EQ_INT(rc, CKPT_E_NOMEM);
                fprintf(stderr, "allocation %llu: %s\n", (unsigned long long)fail_at,
                        ckpt_error_last()->message);
            }
            if (rc == 0 && fail_alloc_calls < fail_at) break;
        }
    }
    CHECK(nomem > 20);
    CHECK_EQ_INT(ok, 2);
    /* rename, _metadata carried along */
    snprintf(src, sizeof src, "%s", tpath("alloc_ddp.pt"));
    ddp_state_dict(src);
    ckpt_rename_rule strip = {CKPT_RENAME_STRIP_PREFIX, "module.", NULL, NULL};
    for (fail_at = 1, ok = 0; fail_at < 2000; fail_at++) {
        fail_alloc_arm(fail_at);
        int rc = ckpt_rename(NULL, src, tpath("alloc_plain.pt"), &strip, 1, NULL);
        ckpt_set_allocator(NULL);
        if (rc == 0)
            ok++;
        else
            CHECK_EQ_INT(rc, CKPT_E_NOMEM);
        if (rc == 0 && fail_alloc_calls < fail_at) break;
    }
    CHECK_EQ_INT(ok, 1);
    CHECK_EQ_INT(count_temporaries(), 0);
}

/* A safetensors file in memory: tensors a = [1.0f] and b = [2.0f], and
 * metadata "ckpt.xxh3" = digests (JSON text, escaped here into the
 * header). Returns ckpt_verify's code; the message is ckpt_error_last. */
static int verify_with_digests(const char *digests) {
    char esc[512], header[1024];
    size_t o = 0;
    for (const char *c = digests; *c && o + 2 < sizeof esc; c++) {
        if (*c == '"' || *c == '\\') esc[o++] = '\\';
        esc[o++] = *c;
    }
    esc[o] = '\0';
    int h = snprintf(header, sizeof header,
                     "{\"__metadata__\":{\"ckpt.xxh3\":\"%s\"},\"a\":{\"dtype\":\"F32\",\"shape\":"
                     "[1],\"data_offsets\":[0,4]},\"b\":{\"dtype\":\"F32\",\"shape\":[1],"
                     "\"data_offsets\":[4,8]}}",
                     esc);
    unsigned char file[1100];
    for (int i = 0; i < 8; i++) file[i] = (unsigned char)((uint64_t)h >> (8 * i));
    memcpy(file + 8, header, (size_t)h);
    float v[2] = {1.0f, 2.0f};
    memcpy(file + 8 + h, v, sizeof v);
    ckpt_file *f = NULL;
    int rc = ckpt_open_memory(&f, file, 8 + (size_t)h + sizeof v, "d.safetensors", NULL);
    if (rc == 0) rc = ckpt_verify(NULL, f);
    ckpt_close(f);
    return rc;
}

/* verify's reading of "ckpt.xxh3": every rule, each with its message. */
TEST(verify_digest_text) {
    float one = 1.0f, two = 2.0f;
    char a[17], b[17], text[256];
    snprintf(a, sizeof a, "%016llx", (unsigned long long)XXH3_64bits(&one, 4));
    snprintf(b, sizeof b, "%016llx", (unsigned long long)XXH3_64bits(&two, 4));
    snprintf(text, sizeof text, "{\"a\":\"%s\",\"b\":\"%s\"}", a, b);
    CHECK_EQ_INT(verify_with_digests(text), 0);
    snprintf(text, sizeof text, "{\"\\u0061\": \"%s\" }", a); /* escaped name, b not listed */
    CHECK_EQ_INT(verify_with_digests(text), 0);
    snprintf(text, sizeof text, "{\"a\":\"%s\",\"b\":\"%s\"}", a, a);
    CHECK_EQ_INT(verify_with_digests(text), CKPT_E_CHECKSUM);
    CHECK(strstr(ckpt_error_last()->message, "tensor \"b\": XXH3-64") != NULL);
    CHECK(strstr(ckpt_error_last()->message, a) != NULL);
    CHECK_EQ_INT(verify_with_digests("{\"a\":\"0123\"}"), CKPT_E_FORMAT);
    CHECK(strstr(ckpt_error_last()->message, "tensor \"a\": digest in \"ckpt.xxh3\" is not 16 "
                                             "hex digits") != NULL);
    CHECK_EQ_INT(verify_with_digests("{\"a\":1}"), CKPT_E_FORMAT);
    CHECK(strstr(ckpt_error_last()->message, "is not 16 hex digits") != NULL);
    snprintf(text, sizeof text, "{\"a\":\"%s\",\"c\":\"%s\"}", a, a);
    CHECK_EQ_INT(verify_with_digests(text), CKPT_E_MISMATCH);
    CHECK(strstr(ckpt_error_last()->message, "tensor \"c\", which the file does not hold") != NULL);
    snprintf(text, sizeof text, "{\"a\":\"%s\",\"a\":\"%s\"}", a, a);
    const char *const bad[] = {text, "[1]", "{\"a\":", "{} x", ""}; /* text: a repeated name */
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECK_EQ_INT(verify_with_digests(bad[i]), CKPT_E_FORMAT);
        CHECK(strstr(ckpt_error_last()->message,
                     "metadata \"ckpt.xxh3\" is not a JSON object of digests") != NULL);
    }
}

int main(void) {
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(xxh3_matches_embedded_digest);
    RUN(safetensors_exact_header);
    RUN(verify_digest_text);
    RUN(pickle_exact_bytes);
    RUN(state_dict_pickle_bytes);
    RUN(state_dict_roundtrip);
    RUN_CORPUS(state_dict_corpus);
    RUN(rename_metadata);
    RUN(rename_out_format);
    RUN(roundtrip_values);
    RUN(roundtrip_views);
    RUN(roundtrip_dtypes);
    RUN(refusals);
    RUN(convert_select_and_metadata);
    RUN(convert_exclude_and_progress);
    RUN(verify_digests);
    RUN(hostile_structure);
    RUN(atomic_faults);
    RUN(sharded_resave_fails_midway);
    RUN(allocation_failures);
    RUN(stream_pieces_on_the_file_grid);
    ckpt_tree_free(tree);
    ckpt_arena_free(&scratch);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return harness_end();
}
