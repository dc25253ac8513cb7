/* test_safetensors.c - the safetensors reader: the real corpus (checked
 * against expected.jsonl), the reference vectors and attacks of
 * FORMATS.md §1.4 built in memory, and sharded sets. */
#include <jansson.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt.h"
#include "model/file.h"
#include "open/sharded.h"
#include "acct.h"
#include "fail_alloc.h"
#include "harness.h"

/* ------------------------------------------------------------ helpers */

/* u64 LE header length + header + data, in a static buffer. */
static unsigned char st_buf[16384];

static size_t st_make(const char *header, const void *data, size_t data_len) {
    size_t n = strlen(header);
    for (int i = 0; i < 8; i++) st_buf[i] = (unsigned char)((uint64_t)n >> (8 * i));
    memcpy(st_buf + 8, header, n);
    if (data_len) memcpy(st_buf + 8 + n, data, data_len);
    return 8 + n + data_len;
}

/* Opens st_buf[0..len) expecting failure with `code`; returns the error. */
static const ckpt_error *open_fails(size_t len, const ckpt_open_options *opts, int code) {
    ckpt_file *f = (ckpt_file *)1;
    int rc = ckpt_open_memory(&f, st_buf, len, "mem.safetensors", opts);
    CHECK_EQ_INT(rc, code);
    CHECK(f == NULL);
    const ckpt_error *e = ckpt_error_last();
    CHECK_EQ_INT(e->code, code);
    CHECK(e->message && e->message[0] != '\0');
    CHECK_EQ_STR(e->file, "mem.safetensors");
    if (rc == 0) ckpt_close(f);
    return e;
}

static ckpt_file *open_ok(size_t len) {
    ckpt_file *f = NULL;
    int rc = ckpt_open_memory(&f, st_buf, len, "mem", NULL);
    CHECK_EQ_INT(rc, 0);
    if (rc) fprintf(stderr, "  error: %s\n", ckpt_error_last()->message);
    return f;
}

static int has(const char *s, const char *part) { return strstr(s, part) != NULL; }

static void sha256_hex(const void *p, size_t n, char out[65]) {
    unsigned char md[32];
    EVP_Digest(p, n, md, NULL, EVP_sha256(), NULL);
    for (int i = 0; i < 32; i++) sprintf(out + 2 * i, "%02x", md[i]);
}

/* A scratch directory for sharded sets. */
static char tmpdir[64];

static void write_file(const char *name, const void *p, size_t n) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *fp = fopen(path, "wb");
    CHECK(fp != NULL);
    if (!fp) return;
    CHECK_EQ_INT(fwrite(p, 1, n, fp), n);
    fclose(fp);
}

static void remove_file(const char *name) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    unlink(path);
}

static int open_index(ckpt_file **f, const char *index_json) {
    char path[256];
    write_file("model.safetensors.index.json", index_json, strlen(index_json));
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", tmpdir);
    return ckpt_open(f, path, NULL);
}

/* ------------------------------------------------------------ corpus */

/* Every safetensors file of expected.jsonl: names, dtypes, shapes, the
 * sha256 of the zero-copy bytes, and metadata. */
TEST(corpus_matches_expected) {
    size_t len = 0;
    unsigned char *all = harness_read_file(CKPT_CORPUS "/expected.jsonl", &len);
    CHECK(all != NULL);
    if (!all) return;
    size_t files = 0;
    for (char *line = (char *)all, *end; line < (char *)all + len; line = end + 1) {
        end = memchr(line, '\n', len - (size_t)(line - (char *)all));
        if (!end) end = (char *)all + len;
        json_t *rec = json_loadb(line, (size_t)(end - line), 0, NULL);
        if (!rec) continue;
        const char *format = json_string_value(json_object_get(rec, "format"));
        if (!format || strcmp(format, "safetensors") != 0) {
            json_decref(rec);
            continue;
        }
        char path[512];
        snprintf(path, sizeof path, "%s/%s", CKPT_CORPUS,
                 json_string_value(json_object_get(rec, "file")));
        ckpt_file *f = NULL;
        int rc = ckpt_open(&f, path, NULL);
        CHECK_EQ_INT(rc, 0);
        if (rc) {
            fprintf(stderr, "  %s: %s\n", path, ckpt_error_last()->message);
            json_decref(rec);
            continue;
        }
        files++;
        CHECK_EQ_INT(ckpt_file_format(f), CKPT_FORMAT_SAFETENSORS);
        json_t *tensors = json_object_get(rec, "tensors");
        CHECK_EQ_INT(ckpt_file_tensor_count(f), json_array_size(tensors));
        size_t i;
        json_t *et;
        json_array_foreach(tensors, i, et) {
            const char *name = json_string_value(json_object_get(et, "name"));
            const ckpt_tensor *t = ckpt_file_find_tensor(f, name);
            CHECK(t != NULL);
            if (!t) continue;
            CHECK_EQ_STR(ckpt_dtype_name(ckpt_tensor_dtype(t)),
                         json_string_value(json_object_get(et, "dtype")));
            json_t *shape = json_object_get(et, "shape");
            CHECK_EQ_INT(ckpt_tensor_ndim(t), json_array_size(shape));
            for (size_t d = 0; d < json_array_size(shape) && d < ckpt_tensor_ndim(t); d++)
                CHECK_EQ_INT(ckpt_tensor_shape(t)[d], json_integer_value(json_array_get(shape, d)));
            const void *data;
            size_t size;
            CHECK_EQ_INT(ckpt_tensor_data(t, &data, &size), 0);
            char hex[65];
            sha256_hex(data, size, hex);
            CHECK_EQ_STR(hex, json_string_value(json_object_get(et, "sha256")));
        }
        json_t *md = json_object_get(rec, "metadata");
        CHECK_EQ_INT(ckpt_file_has_metadata(f), json_is_object(md));
        CHECK_EQ_INT(ckpt_file_metadata_count(f), json_object_size(md));
        for (size_t m = 0; m < ckpt_file_metadata_count(f); m++)
            CHECK_EQ_STR(ckpt_file_metadata_value(f, m),
                         json_string_value(json_object_get(md, ckpt_file_metadata_key(f, m))));
        ckpt_close(f);
        json_decref(rec);
    }
    CHECK_EQ_INT(files, 21);
    free(all);
}

TEST(corpus_overall) {
    ckpt_file *f = NULL;
    CHECK_EQ_INT(ckpt_open(&f, CKPT_CORPUS "/safetensors/hf-samples/overall.safetensors", NULL), 0);
    if (!f) return;
    static const char *names[] = {"B", "H", "I", "b", "d", "e", "f", "h", "i"};
    static const char *dtypes[] = {"U8", "U16", "U32", "I8", "F64", "F16", "F32", "I16", "I32"};
    static const uint64_t begins[] = {0, 6, 18, 42, 48, 96, 108, 132, 144};
    CHECK_EQ_INT(ckpt_file_tensor_count(f), 9);
    /* the root dict is in data_offsets order; N = 526 */
    const ckpt_value *root = ckpt_file_root(f);
    CHECK_EQ_INT(ckpt_value_kind(root), CKPT_KIND_DICT);
    CHECK_EQ_INT(ckpt_value_len(root), 9);
    for (size_t i = 0; i < 9 && i < ckpt_value_len(root); i++) {
        CHECK_EQ_STR(ckpt_value_str(ckpt_value_key(root, i), NULL), names[i]);
        const ckpt_tensor *t = ckpt_value_tensor(ckpt_value_item(root, i));
        CHECK(t != NULL);
        if (!t) continue;
        CHECK_EQ_STR(ckpt_dtype_name(ckpt_tensor_dtype(t)), dtypes[i]);
        CHECK_EQ_INT(ckpt_tensor_ndim(t), 1);
        CHECK_EQ_INT(ckpt_tensor_shape(t)[0], 6);
        CHECK_EQ_INT(ckpt_tensor_numel(t), 6);
        CHECK_EQ_INT(ckpt_tensor_file_offset(t), 8 + 526 + begins[i]);
        CHECK_EQ_STR(ckpt_tensor_member(t), "");
    }
    CHECK_EQ_INT(ckpt_file_has_metadata(f), 1);
    CHECK_EQ_INT(ckpt_file_metadata_count(f), 1);
    CHECK_EQ_STR(ckpt_file_metadata_key(f, 0), "test");
    CHECK_EQ_STR(ckpt_file_metadata_value(f, 0), "a");
    CHECK_EQ_INT(ckpt_file_size(f), 702);
    ckpt_close(f);
}

TEST(corpus_with_metadata) {
    ckpt_file *f = NULL;
    CHECK_EQ_INT(
        ckpt_open(&f, CKPT_CORPUS "/safetensors/fluxml/non_sharded/model.with_metadata.safetensors",
                  NULL),
        0);
    if (!f) return;
    CHECK_EQ_INT(ckpt_file_tensor_count(f), 36);
    CHECK_EQ_INT(ckpt_file_metadata_count(f), 2);
    CHECK_EQ_STR(ckpt_file_metadata_key(f, 0), "test");
    CHECK_EQ_STR(ckpt_file_metadata_value(f, 0), "metadata");
    CHECK_EQ_STR(ckpt_file_metadata_key(f, 1), "version");
    CHECK_EQ_STR(ckpt_file_metadata_value(f, 1), "2.2");
    const ckpt_tensor *t = ckpt_file_find_tensor(f, "float8_e4m3fn_357");
    CHECK(t != NULL);
    if (t) {
        CHECK_EQ_INT(ckpt_tensor_dtype(t), CKPT_DT_F8_E4M3);
        CHECK_EQ_INT(ckpt_tensor_nbytes(t), 105);
        CHECK_EQ_INT(ckpt_tensor_stride(t)[0], 35);
        CHECK_EQ_INT(ckpt_tensor_stride(t)[1], 7);
        CHECK_EQ_INT(ckpt_tensor_stride(t)[2], 1);
    }
    ckpt_close(f);
}

TEST(corpus_rank0) {
    ckpt_file *f = NULL;
    CHECK_EQ_INT(ckpt_open(&f, CKPT_CORPUS "/safetensors/burn/multi_layer.safetensors", NULL), 0);
    if (!f) return;
    const ckpt_tensor *t = ckpt_file_find_tensor(f, "norm1.num_batches_tracked");
    CHECK(t != NULL);
    if (t) {
        CHECK_EQ_INT(ckpt_tensor_dtype(t), CKPT_DT_I64);
        CHECK_EQ_INT(ckpt_tensor_ndim(t), 0);
        CHECK_EQ_INT(ckpt_tensor_numel(t), 1);
        CHECK_EQ_INT(ckpt_tensor_nbytes(t), 8);
        /* the writer puts I64 first: at the start of the byte buffer */
        CHECK_EQ_INT(ckpt_tensor_file_offset(t), 8 + 648);
    }
    CHECK_EQ_INT(ckpt_file_has_metadata(f), 0);
    ckpt_close(f);
}

TEST(corpus_sharded) {
    ckpt_file *f = NULL;
    int rc =
        ckpt_open(&f, CKPT_CORPUS "/safetensors/fluxml/sharded/model.safetensors.index.json", NULL);
    CHECK_EQ_INT(rc, 0);
    if (rc) {
        fprintf(stderr, "  error: %s\n", ckpt_error_last()->message);
        return;
    }
    CHECK_EQ_INT(ckpt_file_format(f), CKPT_FORMAT_SAFETENSORS_SHARDED);
    CHECK_EQ_INT(ckpt_file_tensor_count(f), 36);
    const ckpt_tensor *t = ckpt_file_find_tensor(f, "float32_357");
    CHECK(t != NULL);
    if (t) {
        CHECK_EQ_STR(ckpt_tensor_member(t), "model-00002-of-00006.safetensors");
        CHECK_EQ_INT(ckpt_tensor_file_offset(t), 8 + 104);
        CHECK_EQ_INT(ckpt_tensor_nbytes(t), 420);
    }
    t = ckpt_file_find_tensor(f, "bfloat16_357");
    CHECK(t != NULL);
    if (t) CHECK_EQ_STR(ckpt_tensor_member(t), "model-00006-of-00006.safetensors");
    /* the index metadata, non-string values as compact JSON */
    CHECK_EQ_INT(ckpt_file_has_metadata(f), 1);
    CHECK_EQ_INT(ckpt_file_metadata_count(f), 1);
    CHECK_EQ_STR(ckpt_file_metadata_key(f, 0), "total_size");
    CHECK_EQ_STR(ckpt_file_metadata_value(f, 0), "4305");
    /* same bytes as the unsharded file */
    ckpt_file *g = NULL;
    CHECK_EQ_INT(
        ckpt_open(&g, CKPT_CORPUS "/safetensors/fluxml/non_sharded/model.safetensors", NULL), 0);
    for (size_t i = 0; g && i < ckpt_file_tensor_count(f); i++) {
        const ckpt_tensor *a = ckpt_file_tensor(f, i);
        const ckpt_tensor *b = ckpt_file_find_tensor(g, ckpt_tensor_name(a));
        CHECK(b != NULL);
        if (!b) continue;
        const void *pa, *pb;
        size_t na, nb;
        CHECK_EQ_INT(ckpt_tensor_data(a, &pa, &na), 0);
        CHECK_EQ_INT(ckpt_tensor_data(b, &pb, &nb), 0);
        CHECK(na == nb && memcmp(pa, pb, na) == 0);
    }
    ckpt_close(g);
    ckpt_close(f);
}

/* Every strict prefix of a valid file is refused. */
TEST(corpus_every_cut_fails) {
    size_t len = 0;
    unsigned char *all =
        harness_read_file(CKPT_CORPUS "/safetensors/hf-samples/overall.safetensors", &len);
    CHECK(all != NULL && len == 702);
    if (!all) return;
    size_t succeeded = 0;
    for (size_t cut = 0; cut < len; cut++) {
        unsigned char *copy = malloc(cut ? cut : 1); /* exact size for ASan */
        memcpy(copy, all, cut);
        ckpt_file *f = NULL;
        if (ckpt_open_memory(&f, copy, cut, "cut", NULL) == 0) {
            succeeded++;
            ckpt_close(f);
        } else {
            CHECK(ckpt_error_last()->message[0] != '\0');
        }
        free(copy);
    }
    CHECK_EQ_INT(succeeded, 0);
    free(all);
}

/* ------------------------------------------------------------ reference vectors */

TEST(empty_header_padded) {
    /* 08 00.. 00 "{}" + 6 spaces: 16 bytes */
    size_t len = st_make("{}      ", NULL, 0);
    CHECK_EQ_INT(len, 16);
    ckpt_file *f = open_ok(len);
    if (!f) return;
    CHECK_EQ_INT(ckpt_file_format(f), CKPT_FORMAT_SAFETENSORS);
    CHECK_EQ_INT(ckpt_file_tensor_count(f), 0);
    CHECK_EQ_INT(ckpt_file_has_metadata(f), 0);
    CHECK_EQ_INT(ckpt_value_len(ckpt_file_root(f)), 0);
    ckpt_close(f);
}

TEST(empty_with_metadata) {
    size_t len = st_make("{\"__metadata__\":{\"framework\":\"pt\"}}     ", NULL, 0);
    CHECK_EQ_INT(len, 8 + 40);
    ckpt_file *f = open_ok(len);
    if (!f) return;
    CHECK_EQ_INT(ckpt_file_tensor_count(f), 0);
    CHECK_EQ_INT(ckpt_file_has_metadata(f), 1);
    CHECK_EQ_INT(ckpt_file_metadata_count(f), 1);
    CHECK_EQ_STR(ckpt_file_metadata_key(f, 0), "framework");
    CHECK_EQ_STR(ckpt_file_metadata_value(f, 0), "pt");
    ckpt_close(f);
}

TEST(metadata_null_is_absent) {
    size_t len = st_make("{\"__metadata__\":null}", NULL, 0);
    ckpt_file *f = open_ok(len);
    if (!f) return;
    CHECK_EQ_INT(ckpt_file_has_metadata(f), 0);
    ckpt_close(f);
    len = st_make("{\"__metadata__\":{}}", NULL, 0);
    f = open_ok(len);
    if (!f) return;
    CHECK_EQ_INT(ckpt_file_has_metadata(f), 1);
    CHECK_EQ_INT(ckpt_file_metadata_count(f), 0);
    ckpt_close(f);
}

TEST(attn0_reference) {
    float data[6] = {0, 1, 2, 3, 4, 5};
    size_t len = st_make("{\"attn0\":{\"dtype\":\"F32\",\"shape\":[1,1,2,3],"
                         "\"data_offsets\":[0,24]}}       ",
                         data, sizeof data);
    CHECK_EQ_INT(len, 8 + 72 + 24);
    ckpt_file *f = open_ok(len);
    if (!f) return;
    CHECK_EQ_INT(ckpt_file_tensor_count(f), 1);
    const ckpt_tensor *t = ckpt_file_find_tensor(f, "attn0");
    CHECK(t != NULL);
    if (t) {
        CHECK_EQ_INT(ckpt_tensor_dtype(t), CKPT_DT_F32);
        CHECK_EQ_INT(ckpt_tensor_ndim(t), 4);
        CHECK_EQ_INT(ckpt_tensor_shape(t)[3], 3);
        CHECK_EQ_INT(ckpt_tensor_stride(t)[0], 6);
        CHECK_EQ_INT(ckpt_tensor_stride(t)[2], 3);
        CHECK_EQ_INT(ckpt_tensor_numel(t), 6);
        CHECK_EQ_INT(ckpt_tensor_nbytes(t), 24);
        CHECK_EQ_INT(ckpt_tensor_file_offset(t), 80);
        const void *p;
        size_t n;
        CHECK_EQ_INT(ckpt_tensor_data(t, &p, &n), 0);
        /* zero-copy: the pointer is into the caller's buffer */
        CHECK(p == st_buf + 80);
        CHECK_EQ_INT(n, 24);
    }
    ckpt_close(f);
}

TEST(whitespace_padding_accepted) {
    size_t len = st_make("\t\n{}\r ", NULL, 0);
    ckpt_file *f = open_ok(len);
    CHECK(f != NULL);
    ckpt_close(f);
    len = st_make("{}\r \t\n", NULL, 0);
    f = open_ok(len);
    CHECK(f != NULL);
    ckpt_close(f);
}

TEST(zero_size_and_rank0) {
    int32_t v = 7;
    size_t len = st_make("{\"z\":{\"dtype\":\"F32\",\"shape\":[2,0],\"data_offsets\":[0,0]},"
                         "\"z2\":{\"dtype\":\"I8\",\"shape\":[0],\"data_offsets\":[0,0]},"
                         "\"s\":{\"dtype\":\"I32\",\"shape\":[],\"data_offsets\":[0,4]}}",
                         &v, 4);
    ckpt_file *f = open_ok(len);
    if (!f) return;
    CHECK_EQ_INT(ckpt_file_tensor_count(f), 3);
    const ckpt_tensor *z = ckpt_file_find_tensor(f, "z");
    const ckpt_tensor *s = ckpt_file_find_tensor(f, "s");
    CHECK(z && s);
    if (z && s) {
        CHECK_EQ_INT(ckpt_tensor_ndim(z), 2);
        CHECK_EQ_INT(ckpt_tensor_shape(z)[1], 0);
        CHECK_EQ_INT(ckpt_tensor_numel(z), 0);
        CHECK_EQ_INT(ckpt_tensor_nbytes(z), 0);
        CHECK_EQ_INT(ckpt_tensor_ndim(s), 0);
        CHECK_EQ_INT(ckpt_tensor_numel(s), 1);
        CHECK_EQ_INT(ckpt_tensor_nbytes(s), 4);
        /* the writer's tie is broken by header order: z, z2, s */
        const ckpt_value *root = ckpt_file_root(f);
        CHECK_EQ_STR(ckpt_value_str(ckpt_value_key(root, 0), NULL), "z");
        CHECK_EQ_STR(ckpt_value_str(ckpt_value_key(root, 1), NULL), "z2");
        CHECK_EQ_STR(ckpt_value_str(ckpt_value_key(root, 2), NULL), "s");
    }
    ckpt_close(f);
}

TEST(order_by_offsets_and_extra_keys) {
    unsigned char data[6] = {1, 2, 3, 4, 5, 6};
    size_t len =
        st_make("{\"b\":{\"dtype\":\"U16\",\"shape\":[2],\"data_offsets\":[2,6],\"x\":[1]},"
                "\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}",
                data, sizeof data);
    ckpt_file *f = open_ok(len);
    if (!f) return;
    const ckpt_value *root = ckpt_file_root(f);
    CHECK_EQ_INT(ckpt_value_len(root), 2);
    CHECK_EQ_STR(ckpt_value_str(ckpt_value_key(root, 0), NULL), "a");
    CHECK_EQ_STR(ckpt_value_str(ckpt_value_key(root, 1), NULL), "b");
    const ckpt_tensor *b = ckpt_file_find_tensor(f, "b");
    CHECK(b != NULL);
    if (b) {
        const void *p;
        size_t n;
        CHECK_EQ_INT(ckpt_tensor_data(b, &p, &n), 0);
        CHECK_EQ_INT(n, 4);
        CHECK_EQ_INT(((const unsigned char *)p)[0], 3);
        CHECK_EQ_INT(ckpt_tensor_storage_nbytes(b), 4);
    }
    ckpt_close(f);
}

TEST(sub_byte_dtypes) {
    unsigned char data[6] = {0};
    /* F4 [2,3]: 24 bits = 3 bytes; F6_E2M3 [4]: 24 bits = 3 bytes */
    size_t len = st_make("{\"q\":{\"dtype\":\"F4\",\"shape\":[2,3],\"data_offsets\":[0,3]},"
                         "\"r\":{\"dtype\":\"F6_E2M3\",\"shape\":[4],\"data_offsets\":[3,6]}}",
                         data, sizeof data);
    ckpt_file *f = open_ok(len);
    if (!f) return;
    const ckpt_tensor *q = ckpt_file_find_tensor(f, "q");
    CHECK(q != NULL);
    if (q) {
        CHECK_EQ_INT(ckpt_tensor_dtype(q), CKPT_DT_F4);
        CHECK_EQ_INT(ckpt_tensor_numel(q), 6);
        CHECK_EQ_INT(ckpt_tensor_nbytes(q), 3);
    }
    ckpt_close(f);
}

TEST(all_safetensors_dtypes) {
    static const char *names[] = {
        "BOOL",    "U8",          "I8",          "I16", "U16",     "I32",    "U32",     "I64",
        "U64",     "F16",         "BF16",        "F32", "F64",     "C64",    "F8_E5M2", "F8_E4M3",
        "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "F4",  "F6_E2M3", "F6_E3M2"};
    unsigned char data[64] = {0};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        /* 8 elements: a whole number of bytes for every width */
        unsigned bits = ckpt_dtype_bits(ckpt_dtype_from_name(names[i]));
        char header[160];
        snprintf(header, sizeof header,
                 "{\"t\":{\"dtype\":\"%s\",\"shape\":[8],\"data_offsets\":[0,%u]}}", names[i],
                 bits);
        ckpt_file *f = open_ok(st_make(header, data, bits));
        if (!f) continue;
        const ckpt_tensor *t = ckpt_file_tensor(f, 0);
        CHECK_EQ_STR(ckpt_dtype_name(ckpt_tensor_dtype(t)), names[i]);
        CHECK_EQ_INT(ckpt_tensor_nbytes(t), bits);
        ckpt_close(f);
    }
}

/* ------------------------------------------------------------ attacks */

TEST(attack_header_too_large) {
    static const unsigned char attack[] =
        "\x3c\x00\x00\x00\x00\xff\xff\xff{\"test\":{\"dtype\":\"I32\",\"shape\":[2,2],"
        "\"data_offsets\":[0,16]}}";
    memcpy(st_buf, attack, sizeof attack - 1);
    fail_alloc_arm(0); /* counting only */
    const ckpt_error *e = open_fails(sizeof attack - 1, NULL, CKPT_E_LIMIT);
    fail_alloc_disarm();
    CHECK_EQ_INT(e->offset, 0);
    CHECK(has(e->message, "max_header_bytes"));
    /* only the file object and its first arena block: nothing sized by N */
    CHECK(fail_alloc_calls > 0 && fail_alloc_calls <= 2);
    CHECK(fail_alloc_bytes < 100000);
}

TEST(attack_shape_overflow) {
    /* 2^64 - 2 does not even fit a JSON int64 */
    size_t len = st_make("{\"test\":{\"dtype\":\"I32\",\"shape\":[2,18446744073709551614],"
                         "\"data_offsets\":[0,16]}}",
                         "0123456789abcdef", 16);
    const ckpt_error *e = open_fails(len, NULL, CKPT_E_FORMAT);
    CHECK(e->offset > 8 && e->offset <= len - 16);
    CHECK(has(e->message, "64 bits"));
    /* fits int64 per dimension, the product does not */
    len = st_make("{\"test\":{\"dtype\":\"I32\",\"shape\":[4294967296,4294967296],"
                  "\"data_offsets\":[0,16]}}",
                  "0123456789abcdef", 16);
    size_t n = len - 16 - 8;
    e = open_fails(len, NULL, CKPT_E_FORMAT);
    CHECK_EQ_INT(e->offset, 8 + n);
    CHECK(has(e->message, "overflows"));
    /* numel fits, numel x bits does not */
    len = st_make("{\"test\":{\"dtype\":\"F64\",\"shape\":[2305843009213693952],"
                  "\"data_offsets\":[0,16]}}",
                  "0123456789abcdef", 16);
    e = open_fails(len, NULL, CKPT_E_FORMAT);
    CHECK(has(e->message, "overflow"));
}

TEST(attack_aliased_offsets) {
    char header[1024] = "{";
    for (int i = 0; i < 10; i++)
        snprintf(header + strlen(header), sizeof header - strlen(header),
                 "%s\"t%d\":{\"dtype\":\"I32\",\"shape\":[2,2],\"data_offsets\":[0,16]}",
                 i ? "," : "", i);
    strcat(header, "}");
    size_t n = strlen(header);
    size_t len = st_make(header, "0123456789abcdef", 16);
    const ckpt_error *e = open_fails(len, NULL, CKPT_E_FORMAT);
    CHECK_EQ_INT(e->offset, 8 + n);
    CHECK(has(e->message, "data_offsets [0, 16]"));
    CHECK(has(e->message, "\"t1\""));
}

TEST(attack_polyglot_trailing) {
    unsigned char data[16 + 34];
    memcpy(data, "0123456789abcdef", 16);
    memcpy(data + 16, "extra_bogus_data_for_polyglot_file", 34);
    const char *h = "{\"test\":{\"dtype\":\"I32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}";
    size_t len = st_make(h, data, sizeof data);
    const ckpt_error *e = open_fails(len, NULL, CKPT_E_FORMAT);
    CHECK_EQ_INT(e->offset, 8 + strlen(h) + 16);
    CHECK(has(e->message, "34 bytes"));
}

TEST(file_shorter_than_8) {
    memcpy(st_buf, "\x02\x00\x00\x00{}", 6);
    const ckpt_error *e = open_fails(6, NULL, CKPT_E_TRUNCATED);
    CHECK_EQ_INT(e->offset, 0);
    /* the reader itself, whatever routes to it */
    ckpt_file f;
    memset(&f, 0, sizeof f);
    f.path = "short";
    f.map = st_buf;
    f.map_size = 7;
    ckpt_open_options defaults = CKPT_OPEN_OPTIONS_INIT;
    f.opts = defaults;
    CHECK_EQ_INT(ckpt_safetensors_read(&f), CKPT_E_TRUNCATED);
    CHECK_EQ_INT(ckpt_error_last()->offset, 0);
    CHECK(has(ckpt_error_last()->message, "at least 8"));
    ckpt_arena_free(&f.arena);
}

TEST(header_past_end) {
    size_t len =
        st_make("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", NULL, 0);
    st_buf[0] = (unsigned char)(st_buf[0] + 1); /* N one byte too long */
    const ckpt_error *e = open_fails(len, NULL, CKPT_E_TRUNCATED);
    CHECK_EQ_INT(e->offset, 0);
}

TEST(data_past_end) {
    const char *h = "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}";
    size_t len = st_make(h, "xyz", 3);
    const ckpt_error *e = open_fails(len, NULL, CKPT_E_TRUNCATED);
    CHECK_EQ_INT(e->offset, 8 + strlen(h));
    CHECK(has(e->message, "\"a\""));
}

TEST(duplicate_key) {
    const char *h = "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                    "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}";
    size_t len = st_make(h, "x", 1);
    const ckpt_error *e = open_fails(len, NULL, CKPT_E_FORMAT);
    CHECK(e->offset > 8 + 50 && e->offset <= 8 + strlen(h));
    CHECK(has(e->message, "duplicate"));
}

TEST(metadata_not_strings) {
    size_t len = st_make("{\"__metadata__\":{\"epoch\":3}}", NULL, 0);
    const ckpt_error *e = open_fails(len, NULL, CKPT_E_FORMAT);
    CHECK_EQ_INT(e->offset, 8);
    CHECK(has(e->message, "epoch"));
    len = st_make("{\"__metadata__\":[\"a\"]}", NULL, 0);
    open_fails(len, NULL, CKPT_E_FORMAT);
}

TEST(tensor_named_metadata) {
    size_t len = st_make("{\"__metadata__\":{\"dtype\":\"U8\",\"shape\":[1],"
                         "\"data_offsets\":[0,1]}}",
                         "x", 1);
    const ckpt_error *e = open_fails(len, NULL, CKPT_E_FORMAT);
    CHECK_EQ_INT(e->offset, 8);
    CHECK(has(e->message, "reserved"));
}

TEST(gap_between_tensors) {
    const char *h = "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
                    "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[4,6]}}";
    size_t len = st_make(h, "xxxxxx", 6);
    const ckpt_error *e = open_fails(len, NULL, CKPT_E_FORMAT);
    CHECK_EQ_INT(e->offset, 8 + strlen(h) + 4);
    CHECK(has(e->message, "\"b\""));
}

TEST(first_not_at_zero) {
    const char *h = "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[2,4]}}";
    size_t len = st_make(h, "xxxx", 4);
    const ckpt_error *e = open_fails(len, NULL, CKPT_E_FORMAT);
    CHECK_EQ_INT(e->offset, 8 + strlen(h) + 2);
    CHECK(has(e->message, "expected [0,"));
}

TEST(end_before_begin) {
    const char *h = "{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]},"
                    "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
                    "\"c\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[2,1]}}";
    size_t len = st_make(h, "xx", 2);
    const ckpt_error *e = open_fails(len, NULL, CKPT_E_FORMAT);
    CHECK(has(e->message, "\"c\""));
    CHECK_EQ_INT(e->offset, 8 + strlen(h) + 2);
}

TEST(wrong_byte_size) {
    const char *h = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,6]}}";
    size_t len = st_make(h, "xxxxxx", 6);
    const ckpt_error *e = open_fails(len, NULL, CKPT_E_FORMAT);
    CHECK_EQ_INT(e->offset, 8 + strlen(h));
    CHECK(has(e->message, "expected 8"));
}

TEST(misaligned_f4) {
    const char *h = "{\"a\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]}}";
    size_t len = st_make(h, "xx", 2);
    const ckpt_error *e = open_fails(len, NULL, CKPT_E_FORMAT);
    CHECK_EQ_INT(e->offset, 8 + strlen(h));
    CHECK(has(e->message, "misaligned"));
}

TEST(unknown_dtype) {
    size_t len = st_make("{\"a\":{\"dtype\":\"F128\",\"shape\":[1],\"data_offsets\":[0,16]}}",
                         "0123456789abcdef", 16);
    const ckpt_error *e = open_fails(len, NULL, CKPT_E_FORMAT);
    CHECK_EQ_INT(e->offset, 8);
    CHECK(has(e->message, "F128"));
    /* torch-only names are not safetensors dtypes */
    len = st_make("{\"a\":{\"dtype\":\"C128\",\"shape\":[1],\"data_offsets\":[0,16]}}",
                  "0123456789abcdef", 16);
    open_fails(len, NULL, CKPT_E_FORMAT);
    len = st_make("{\"a\":{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]}}", "0123", 4);
    open_fails(len, NULL, CKPT_E_FORMAT);
}

TEST(bad_entry_schema) {
    static const char *headers[] = {
        "{\"a\":[1]}",
        "{\"a\":{\"shape\":[1],\"data_offsets\":[0,1]}}",
        "{\"a\":{\"dtype\":1,\"shape\":[1],\"data_offsets\":[0,1]}}",
        "{\"a\":{\"dtype\":\"U8\",\"data_offsets\":[0,1]}}",
        "{\"a\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,1]}}",
        "{\"a\":{\"dtype\":\"U8\",\"shape\":[1.0],\"data_offsets\":[0,1]}}",
        "{\"a\":{\"dtype\":\"U8\",\"shape\":[1e0],\"data_offsets\":[0,1]}}",
        "{\"a\":{\"dtype\":\"U8\",\"shape\":1,\"data_offsets\":[0,1]}}",
        "{\"a\":{\"dtype\":\"U8\",\"shape\":[1]}}",
        "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,1]}}",
        "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1]}}",
        "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[-1,0]}}",
        "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":\"0,1\"}}",
        "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}",
        "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}}",
        "{\"a\xff\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
        "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}} x",
    };
    for (size_t i = 0; i < sizeof headers / sizeof *headers; i++) {
        size_t len = st_make(headers[i], "x", 1);
        const ckpt_error *e = open_fails(len, NULL, CKPT_E_FORMAT);
        CHECK(e->offset >= 8 && e->offset <= 8 + strlen(headers[i]));
    }
}

/* torch refuses a shape whose strides overflow even with a zero dimension
 * ("Stride calculation overflowed"); so do we, though the reference reader
 * has no strides to compute. */
TEST(zero_size_stride_overflow) {
    const char *h = "{\"a\":{\"dtype\":\"U8\",\"shape\":[0,4294967296,4294967296,2],"
                    "\"data_offsets\":[0,0]}}";
    size_t len = st_make(h, NULL, 0);
    const ckpt_error *e = open_fails(len, NULL, CKPT_E_FORMAT);
    CHECK_EQ_INT(e->offset, 8 + strlen(h));
    CHECK(has(e->message, "strides overflow"));
}

/* jansson bounds nesting, so a deep extra key cannot exhaust the stack. */
TEST(deep_nesting) {
    char h[8192];
    size_t n = 0;
    n += (size_t)sprintf(h, "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"x\":");
    for (int i = 0; i < 3000; i++) h[n++] = '[';
    for (int i = 0; i < 3000; i++) h[n++] = ']';
    strcpy(h + n, "}}");
    size_t len = st_make(h, "x", 1);
    const ckpt_error *e = open_fails(len, NULL, CKPT_E_FORMAT);
    CHECK(e->offset > 8 && e->offset < 8 + strlen(h));
}

/* The header parser follows serde_json where jansson did not (found by
 * tests/interop/test_safetensors_diff.py): an escaped string that is only
 * checked (a value that is not an entry) is still an error, offsets use
 * the whole u64 range, -0 is not an integer, nesting stops at 128 deep,
 * a TensorInfo field given twice is refused, and escapes decode. */
TEST(header_serde_rules) {
    static const char *refused[] = {
        "{\"a\":\"v\\n\"}",
        "{\"a\":{\"dtype\":\"U8\",\"shape\":[-0],\"data_offsets\":[0,0]}}",
        "{\"a\":{\"dtype\":\"U8\",\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}",
        "{\"a\\ud800\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}",
        "{\"a\\udc00\\ud800\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}",
        "{\"a\\u0000\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}",
        "{\"a\":{\"dtype\":\"U8\",\"shape\":[01],\"data_offsets\":[0,1]}}",
        "{\"__metadata__\":{},\"__metadata__\":{}}",
    };
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        size_t len = st_make(refused[i], "x", 1);
        const ckpt_error *e = open_fails(len, NULL, CKPT_E_FORMAT);
        CHECK(e->offset >= 8 && e->offset <= 8 + strlen(refused[i]));
    }
    /* 128 nested arrays in an extra field are refused, 127 accepted */
    for (int depth = 125; depth <= 126; depth++) {
        char h[1024];
        int n = sprintf(h, "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"x\":");
        for (int i = 0; i < depth; i++) h[n++] = '[';
        for (int i = 0; i < depth; i++) h[n++] = ']';
        strcpy(h + n, "}}");
        size_t len = st_make(h, "x", 1);
        ckpt_file *f = NULL;
        int rc = ckpt_open_memory(&f, st_buf, len, "mem", NULL);
        CHECK_EQ_INT(rc, depth == 125 ? 0 : CKPT_E_FORMAT);
        ckpt_close(f);
    }
    /* escapes, a surrogate pair and u64 offsets beyond 2^63 */
    size_t len = st_make("{\"\\u00e9\\ud83d\\ude00\\t\":{\"x\":\"\\\"\",\"dtype\":\"U8\","
                         "\"shape\":[1],\"data_offsets\":[0,1]}}",
                         "x", 1);
    ckpt_file *f = NULL;
    CHECK_EQ_INT(ckpt_open_memory(&f, st_buf, len, "mem", NULL), 0);
    if (f) CHECK(ckpt_file_find_tensor(f, "\xc3\xa9\xf0\x9f\x98\x80\t") != NULL);
    ckpt_close(f);
    len = st_make("{\"a\":{\"dtype\":\"U8\",\"shape\":[0],"
                  "\"data_offsets\":[18446744073709551615,18446744073709551615]}}",
                  NULL, 0);
    const ckpt_error *e = open_fails(len, NULL, CKPT_E_FORMAT);
    CHECK(has(e->message, "18446744073709551615"));
}

/* serde_json parses every number of the header as a value (the header
 * struct is #[serde(flatten)]: unknown fields are buffered, not ignored),
 * and one that is no u64/i64 becomes an f64: an infinite one is
 * "number out of range" and the safetensors reader refuses the file.
 * ckpt said OK (an extra field "x": 1 followed by 400 zeros). Each
 * accepted/refused pair straddles serde's f64 (its u64 significand times
 * one power of ten), as safetensors 0.8 decides it. */
TEST(number_range_serde) {
    static const struct {
        const char *num;
        int ok;
    } cases[] = {
        {"1e308", 1},
        {"1e309", 0},
        {"-1e309", 0},
        {"1.7976931348623157e308", 1},
        {"1.7976931348623159e308", 0},
        {"0e99999999999", 1},
        {"1e-99999999999", 1},
        {"1e99999999999", 0},
        {"0.000001e314", 1},
        {"0.000001e315", 0},
        {"18446744073709551615e288", 1}, /* a u64 significand */
        {"18446744073709551615e289", 0},
        {"184467440737095516150e289", 0}, /* past u64: digits count as 10s */
        {"18446744073709551616e288", 1},
    };
    char h[512];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        snprintf(h, sizeof h,
                 "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"x\":%s}}",
                 cases[i].num);
        size_t len = st_make(h, "x", 1);
        if (cases[i].ok) {
            ckpt_close(open_ok(len));
            continue;
        }
        const ckpt_error *e = open_fails(len, NULL, CKPT_E_FORMAT);
        CHECK(has(e->message, "out of range"));
        CHECK_EQ_INT(e->offset, 8 + (uint64_t)(strstr(h, cases[i].num) - h));
    }
    /* 400 digits */
    char *big = h + snprintf(h, sizeof h,
                             "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],"
                             "\"data_offsets\":[0,1],\"x\":1");
    memset(big, '0', 400);
    strcpy(big + 400, "}}");
    open_fails(st_make(h, "x", 1), NULL, CKPT_E_FORMAT);
}

/* A name's bytes are read eight at a time until one ends the plain run:
 * a quote, a backslash, a control byte (refused there), or checked as
 * UTF-8 when one is 0x80 or above (refused at the run's start). Each of them at every offset of a long name, with
 * the 8-byte window before, across and after it: the name read is the
 * name written, or the header is refused where the bad byte is. */
TEST(name_stop_bytes_at_every_offset) {
    static const struct {
        const char *json, *text; /* as written in the header; as read (NULL: refused) */
        int at_run;              /* refused at the run's start (bad UTF-8), else at the byte */
    } stops[] = {
        {"\\\"", "\"", 0},           {"\\\\", "\\", 0}, {"\\u00e9", "\xc3\xa9", 0},
        {"\xc3\xa9", "\xc3\xa9", 0}, {"\x01", NULL, 0}, {"\x1f", NULL, 0},
        {"\xff", NULL, 1},           {"\xc3", NULL, 1},
    };
    for (size_t k = 0; k < sizeof stops / sizeof *stops; k++)
        for (size_t at = 0; at < 24; at++) {
            char json[128], name[64], h[256];
            memset(json, 'a', at);
            memset(name, 'a', at);
            snprintf(json + at, sizeof json - at, "%sbcdefghijklmnopq", stops[k].json);
            if (stops[k].text)
                snprintf(name + at, sizeof name - at, "%sbcdefghijklmnopq", stops[k].text);
            snprintf(h, sizeof h,
                     "{\"%s\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", json);
            size_t len = st_make(h, "x", 1);
            if (!stops[k].text) {
                const ckpt_error *e = open_fails(len, NULL, CKPT_E_FORMAT);
                CHECK_EQ_INT(e->offset, 8 + 2 + (stops[k].at_run ? 0 : at));
                continue;
            }
            ckpt_file *f = open_ok(len);
            CHECK(f && ckpt_file_tensor_count(f) == 1 &&
                  strcmp(ckpt_tensor_name(ckpt_file_tensor(f, 0)), name) == 0);
            ckpt_close(f);
        }
}

TEST(nul_padded_header) {
    size_t len = st_make("{}", NULL, 0);
    st_buf[0] = 4;
    st_buf[len++] = 0;
    st_buf[len++] = 0;
    const ckpt_error *e = open_fails(len, NULL, CKPT_E_FORMAT);
    CHECK(e->offset >= 10 && e->offset <= 12);
}

TEST(limits_honoured) {
    ckpt_open_options opts = CKPT_OPEN_OPTIONS_INIT;
    opts.limits.max_header_bytes = 8;
    size_t len = st_make("{}                ", NULL, 0); /* N = 18 */
    const ckpt_error *e = open_fails(len, &opts, CKPT_E_LIMIT);
    CHECK_EQ_INT(e->offset, 0);
    opts.limits.max_header_bytes = 18; /* the limit is inclusive */
    ckpt_file *f = NULL;
    CHECK_EQ_INT(ckpt_open_memory(&f, st_buf, len, "mem", &opts), 0);
    ckpt_close(f);

    opts = (ckpt_open_options)CKPT_OPEN_OPTIONS_INIT;
    opts.limits.max_tensors = 1;
    len = st_make("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                  "\"b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
                  "xy", 2);
    e = open_fails(len, &opts, CKPT_E_LIMIT);
    CHECK(has(e->message, "max_tensors"));

    opts = (ckpt_open_options)CKPT_OPEN_OPTIONS_INIT;
    opts.limits.max_ndim = 2;
    len = st_make("{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1],\"data_offsets\":[0,1]}}", "x", 1);
    e = open_fails(len, &opts, CKPT_E_LIMIT);
    CHECK(has(e->message, "max_ndim"));

    /* names: the walk's rule (max_name_bytes counts the NUL), at the key */
    opts = (ckpt_open_options)CKPT_OPEN_OPTIONS_INIT;
    opts.limits.max_name_bytes = 3;
    len = st_make("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                  "\"abc\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
                  "xy", 2);
    e = open_fails(len, &opts, CKPT_E_LIMIT);
    CHECK(has(e->message, "flattened name of 3 bytes: expected at most 2"));
    CHECK_EQ_INT(e->offset, 8 + 53); /* "abc"'s opening quote */
    opts.limits.max_name_bytes = 4;
    CHECK_EQ_INT(ckpt_open_memory(&f, st_buf, len, "mem", &opts), 0);
    ckpt_close(f);
}

/* Failing allocation k, for every k, gives CKPT_E_NOMEM and no leak
 * (ASan builds check the leaks); past the last allocation, success. */
static void torture(const char *path, const void *buf, size_t len) {
    int rc = CKPT_E_NOMEM, fail_at;
    for (fail_at = 1; rc == CKPT_E_NOMEM && fail_at < 10000; fail_at++) {
        ckpt_file *f = NULL;
        fail_alloc_arm(fail_at);
        rc = path ? ckpt_open(&f, path, NULL) : ckpt_open_memory(&f, buf, len, "mem", NULL);
        fail_alloc_disarm();
        if (rc == CKPT_E_NOMEM) CHECK(f == NULL);
        ckpt_close(f);
    }
    CHECK_EQ_INT(rc, 0);
    CHECK(fail_at > 2);
}

TEST(allocation_failures) {
    size_t len = 0;
    unsigned char *buf = harness_read_file(CKPT_SRC "/examples/train.safetensors", &len);
    CHECK(buf != NULL);
    if (buf) torture(NULL, buf, len);
    free(buf);
}

TEST(allocation_failures_corpus) {
    size_t len = 0;
    unsigned char *buf = harness_read_file(
        CKPT_CORPUS "/safetensors/fluxml/non_sharded/model.with_metadata.safetensors", &len);
    CHECK(buf != NULL);
    if (buf) torture(NULL, buf, len);
    free(buf);
    torture(CKPT_CORPUS "/safetensors/fluxml/sharded/model.safetensors.index.json", NULL, 0);
}

/* ------------------------------------------------------------ sharded */

/* One-tensor shard "a.safetensors" holding U8 "x" (and "extra" if asked). */
static void write_shard(const char *name, int extra) {
    size_t len =
        extra ? st_make("{\"x\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                        "\"extra\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
                        "xe", 2)
              : st_make("{\"x\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", "x", 1);
    write_file(name, st_buf, len);
}

TEST(shard_names_refused) {
    static const char *bad[] = {"../x.safetensors",  "a/../../x.safetensors", "/etc/x.safetensors",
                                "C:x.safetensors",   "a\\x.safetensors",      "x.bin",
                                "x.safetensors.bin", ".safetensors",          ".."};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char index[256];
        snprintf(index, sizeof index, "{\"weight_map\":{\"x\":\"%s\"}}", bad[i]);
        if (strchr(bad[i], '\\')) /* JSON-escape the backslash */
            snprintf(index, sizeof index, "{\"weight_map\":{\"x\":\"a\\\\x.safetensors\"}}");
        ckpt_file *f = (ckpt_file *)1;
        CHECK_EQ_INT(open_index(&f, index), CKPT_E_FORMAT);
        CHECK(f == NULL);
        const ckpt_error *e = ckpt_error_last();
        CHECK_EQ_STR(e->member, bad[i]);
        CHECK(has(e->message, "shard name"));
        CHECK(e->offset == UINT64_MAX);
    }
}

/* An index is read as the loaders' json.load reads it before anything
 * else: nesting Python's json gives up on (RecursionError near 1000
 * levels; jansson goes on to 2048) is refused. ckpt said OK at 1500. */
TEST(index_nesting_python) {
    write_shard("a.safetensors", 0);
    for (int depth = 900; depth <= 1500; depth += 600) {
        char *doc = malloc(128 + 2 * (size_t)depth);
        CHECK(doc != NULL);
        if (!doc) return;
        int n = sprintf(doc, "{\"metadata\":{\"x\":");
        memset(doc + n, '[', (size_t)depth);
        memset(doc + n + depth, ']', (size_t)depth);
        strcpy(doc + n + 2 * depth, "},\"weight_map\":{\"x\":\"a.safetensors\"}}");
        ckpt_file *f = NULL;
        int rc = open_index(&f, doc);
        CHECK_EQ_INT(rc, depth == 900 ? 0 : CKPT_E_LIMIT);
        if (rc) CHECK(has(ckpt_error_last()->message, "max_depth"));
        ckpt_close(f);
        free(doc);
    }
}

/* The index is read with Python's json rules, as the loaders read it:
 * the last value of a repeated weight_map key names the shard (the first
 * one is never opened); NaN, Infinity and integers past 64 bits in the
 * metadata are values. ckpt refused each ("duplicate object key", "not
 * valid JSON") though json.load reads them. */
TEST(index_python_json_rules) {
    write_shard("a.safetensors", 0);
    ckpt_file *f = NULL;
    CHECK_EQ_INT(open_index(&f, "{\"weight_map\":{\"x\":\"missing.safetensors\","
                                "\"x\":\"a.safetensors\"}}"),
                 0);
    if (f) {
        CHECK_EQ_INT(f->nshards, 1);
        CHECK_EQ_STR(ckpt_tensor_member(ckpt_file_find_tensor(f, "x")), "a.safetensors");
    }
    ckpt_close(f);
    f = NULL;
    CHECK_EQ_INT(open_index(&f, "{\"weight_map\":{\"x\":\"a.safetensors\","
                                "\"x\":\"missing.safetensors\"}}"),
                 CKPT_E_MISMATCH);
    CHECK(has(ckpt_error_last()->file, "missing.safetensors"));
    CHECK_EQ_INT(open_index(&f, "{\"metadata\":{\"total_size\":NaN,\"n\":1e999,"
                                "\"m\":184467440737095516160,\"s\":\"v\",\"s\":\"w\"},"
                                "\"weight_map\":{\"x\":\"a.safetensors\"}}"),
                 0);
    ckpt_close(f);
    f = NULL;
    CHECK_EQ_INT(open_index(&f, "{\"metadata\":{\"s\":\"v\",\"s\":\"w\"},"
                                "\"weight_map\":{\"x\":\"a.safetensors\"}}"),
                 0);
    if (f) {
        CHECK_EQ_INT(f->nmeta, 1);
        CHECK_EQ_STR(f->meta_vals[0], "w");
    }
    ckpt_close(f);
}

/* The one shard-name rule (reader and scanner). */
TEST(shard_name_rule) {
    static const struct {
        const char *name, *canon; /* canon NULL: refused */
    } cases[] = {
        {"x.safetensors", "x.safetensors"},
        {"./x.safetensors", "x.safetensors"},
        {".//x.safetensors", "x.safetensors"},
        {"././/./x.safetensors", "x.safetensors"},
        {"a//b/./x.safetensors", "a/b/x.safetensors"},
        {"a/../x.safetensors", NULL}, /* ".." is never resolved */
        {"x.safetensors/", NULL},     /* a directory */
        {"x.safetensors/.", NULL},
        {".", NULL},
        {"./", NULL},
        {"", NULL},
        {"/x.safetensors", NULL},
        {"x.bin", NULL},
    };
    char out[64];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *why =
            ckpt_shard_name(out, cases[i].name, strlen(cases[i].name), ".safetensors");
        if (cases[i].canon) {
            CHECK(why == NULL);
            if (!why) CHECK_EQ_STR(out, cases[i].canon);
        } else {
            CHECK(why != NULL);
        }
    }
    /* without the extension rule (the scanner's shards may be .bin) */
    CHECK(ckpt_shard_name(out, "./x.bin", 7, NULL) == NULL);
    CHECK_EQ_STR(out, "x.bin");
    /* the .bin sets' rule (pytorch_model.bin.index.json) */
    CHECK(ckpt_shard_name(out, "./y.bin", 7, ".bin") == NULL);
    CHECK_EQ_STR(out, "y.bin");
    CHECK_EQ_STR(ckpt_shard_name(out, "x.safetensors", 13, ".bin"), "not a .bin file");
    CHECK_EQ_STR(ckpt_shard_name(out, ".bin", 4, ".bin"), "not a .bin file");
    CHECK_EQ_STR(ckpt_shard_name(out, "a\0b", 3, NULL), "empty or holds a NUL byte");
}

/* One shard spelled three ways and reached through a link: opened once. */
TEST(shard_spellings_open_once) {
    size_t len = st_make("{\"x\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                         "\"y\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]},"
                         "\"z\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[2,3]},"
                         "\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[3,4]}}",
                         "xyzw", 4);
    write_file("a.safetensors", st_buf, len);
    char target[256], link[256];
    snprintf(target, sizeof target, "%s/a.safetensors", tmpdir);
    snprintf(link, sizeof link, "%s/link.safetensors", tmpdir);
    unlink(link);
    CHECK_EQ_INT(symlink(target, link), 0);
    ckpt_file *f = NULL;
    CHECK_EQ_INT(open_index(&f,
                            "{\"weight_map\":{\"x\":\"a.safetensors\",\"y\":\"./a.safetensors\","
                            "\"z\":\".//a.safetensors\",\"w\":\"link.safetensors\"}}"),
                 0);
    if (f) {
        CHECK_EQ_INT(f->nshards, 1);
        CHECK_EQ_INT(ckpt_file_tensor_count(f), 4);
        CHECK_EQ_STR(ckpt_tensor_member(ckpt_file_find_tensor(f, "z")), "a.safetensors");
        CHECK_EQ_STR(ckpt_tensor_member(ckpt_file_find_tensor(f, "w")), "a.safetensors");
    }
    ckpt_close(f);
    /* a spelling of another shard is still a mismatch */
    write_shard("b.safetensors", 0);
    f = NULL;
    CHECK_EQ_INT(open_index(&f,
                            "{\"weight_map\":{\"x\":\"./b.safetensors\",\"y\":\"a.safetensors\","
                            "\"z\":\"a.safetensors\",\"w\":\"a.safetensors\"}}"),
                 CKPT_E_MISMATCH);
    CHECK(has(ckpt_error_last()->message, "maps it to \"./b.safetensors\""));
    CHECK(f == NULL);
    unlink(link);
    remove_file("b.safetensors");
    write_shard("a.safetensors", 0);
}

/* A shard linked from outside the index's directory (a Hugging Face
 * cache links every shard to a blob): the reader follows the link as
 * loaders do; the scanner follows it and says so. */
TEST(shard_link_outside) {
    write_shard("a.safetensors", 0);
    char sub[256], link[256], index[256], target[256];
    snprintf(sub, sizeof sub, "%s/snap", tmpdir);
    snprintf(link, sizeof link, "%s/snap/a.safetensors", tmpdir);
    snprintf(index, sizeof index, "%s/snap/model.safetensors.index.json", tmpdir);
    snprintf(target, sizeof target, "%s/a.safetensors", tmpdir);
    mkdir(sub, 0700);
    unlink(link);
    CHECK_EQ_INT(symlink(target, link), 0);
    FILE *fp = fopen(index, "wb");
    CHECK(fp != NULL);
    if (!fp) return;
    fputs("{\"weight_map\":{\"x\":\"a.safetensors\"}}", fp);
    fclose(fp);
    ckpt_file *f = NULL;
    CHECK_EQ_INT(ckpt_open(&f, index, NULL), 0);
    if (f) CHECK_EQ_INT(ckpt_file_tensor_count(f), 1);
    ckpt_close(f);
    ckpt_scan_report *r = NULL;
    CHECK_EQ_INT(ckpt_scan(&r, index, NULL), 0);
    int linked = 0;
    for (size_t i = 0; r && i < ckpt_scan_finding_count(r); i++) {
        const ckpt_finding *fd = ckpt_scan_finding(r, i);
        if (strcmp(fd->kind, "shard-link") == 0) {
            linked++;
            CHECK_EQ_STR(fd->member, "a.safetensors");
            CHECK(has(fd->message, "outside the index's directory"));
        }
    }
    CHECK_EQ_INT(linked, 1);
    CHECK_EQ_INT(ckpt_scan_verdict(r), CKPT_VERDICT_SAFE);
    ckpt_scan_report_free(r);
    remove(index);
    unlink(link);
    rmdir(sub);
}

TEST(sharded_small_set) {
    write_shard("a.safetensors", 0);
    size_t len =
        st_make("{\"y\":{\"dtype\":\"I16\",\"shape\":[1],\"data_offsets\":[0,2]}}", "yy", 2);
    write_file("b.safetensors", st_buf, len);
    ckpt_file *f = NULL;
    CHECK_EQ_INT(open_index(&f,
                            "{\"metadata\":{\"total_size\":3,\"format\":\"pt\",\"n\":null,"
                            "\"l\":[1,\"x\"]},"
                            "\"weight_map\":{\"y\":\"b.safetensors\",\"x\":\"a.safetensors\"}}"),
                 0);
    if (!f) return;
    CHECK_EQ_INT(ckpt_file_format(f), CKPT_FORMAT_SAFETENSORS_SHARDED);
    CHECK_EQ_INT(ckpt_file_tensor_count(f), 2);
    const ckpt_tensor *y = ckpt_file_find_tensor(f, "y");
    CHECK(y != NULL);
    if (y) {
        CHECK_EQ_STR(ckpt_tensor_member(y), "b.safetensors");
        CHECK_EQ_INT(ckpt_tensor_dtype(y), CKPT_DT_I16);
    }
    CHECK_EQ_INT(ckpt_file_metadata_count(f), 4);
    CHECK_EQ_STR(ckpt_file_metadata_value(f, 0), "3");
    CHECK_EQ_STR(ckpt_file_metadata_value(f, 1), "pt");
    CHECK_EQ_STR(ckpt_file_metadata_value(f, 2), "null");
    CHECK_EQ_STR(ckpt_file_metadata_value(f, 3), "[1,\"x\"]");
    ckpt_close(f);
    remove_file("b.safetensors");
}

TEST(sharded_mismatch) {
    write_shard("a.safetensors", 0);
    ckpt_file *f = NULL;
    /* listed, missing from its shard */
    CHECK_EQ_INT(
        open_index(&f, "{\"weight_map\":{\"x\":\"a.safetensors\",\"w\":\"a.safetensors\"}}"),
        CKPT_E_MISMATCH);
    CHECK(has(ckpt_error_last()->message, "\"w\""));
    CHECK_EQ_STR(ckpt_error_last()->member, "a.safetensors");
    CHECK(ckpt_error_last()->offset == UINT64_MAX); /* no byte to point at */
    /* in the shard, not listed */
    write_shard("a.safetensors", 1);
    CHECK_EQ_INT(open_index(&f, "{\"weight_map\":{\"x\":\"a.safetensors\"}}"), CKPT_E_MISMATCH);
    CHECK(has(ckpt_error_last()->message, "\"extra\""));
    CHECK(ckpt_error_last()->offset == UINT64_MAX);
    /* in one shard, listed under another */
    write_shard("b.safetensors", 0);
    CHECK_EQ_INT(open_index(&f,
                            "{\"weight_map\":{\"x\":\"a.safetensors\",\"extra\":\"a.safetensors\","
                            "\"y\":\"b.safetensors\"}}"),
                 CKPT_E_MISMATCH);
    CHECK(has(ckpt_error_last()->message, "maps it to"));
    CHECK(f == NULL);
    remove_file("b.safetensors");
    write_shard("a.safetensors", 0);
}

/* A tied name ckpt wrote into a shard's "ckpt.aliases" is left out of
 * weight_map (as huggingface_hub leaves out shared names, so that
 * transformers' loader sees it missing, not loaded); the set still has it,
 * in that shard. An index of an older ckpt lists it, and reads the same;
 * an alias is no licence for its target to go unlisted or elsewhere. */
TEST(sharded_alias_out_of_weight_map) {
    size_t len = st_make("{\"__metadata__\":{\"ckpt.aliases\":\"{\\\"tied\\\":\\\"x\\\"}\"},"
                         "\"x\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}    ",
                         "x", 1);
    write_file("t.safetensors", st_buf, len);
    static const char *const ok[] = {
        "{\"weight_map\":{\"x\":\"t.safetensors\"}}",
        "{\"weight_map\":{\"x\":\"t.safetensors\",\"tied\":\"t.safetensors\"}}"};
    for (size_t i = 0; i < 2; i++) {
        ckpt_file *f = NULL;
        CHECK_EQ_INT(open_index(&f, ok[i]), 0);
        if (!f) continue;
        CHECK_EQ_INT(ckpt_file_tensor_count(f), 2);
        const ckpt_tensor *tied = ckpt_file_find_tensor(f, "tied");
        CHECK(tied != NULL && ckpt_file_find_tensor(f, "x") != NULL);
        if (tied) CHECK_EQ_STR(ckpt_tensor_member(tied), "t.safetensors");
        ckpt_close(f);
    }
    ckpt_file *f = NULL;
    CHECK_EQ_INT(open_index(&f, "{\"weight_map\":{\"tied\":\"t.safetensors\"}}"), CKPT_E_MISMATCH);
    CHECK(has(ckpt_error_last()->message, "tensor \"x\" of shard \"t.safetensors\" is not listed"));
    CHECK_EQ_INT(
        open_index(&f, "{\"weight_map\":{\"x\":\"a.safetensors\",\"tied\":\"t.safetensors\"}}"),
        CKPT_E_MISMATCH);
    CHECK(has(ckpt_error_last()->message, "\"x\" is in shard \"t.safetensors\""));
    CHECK(f == NULL);
    /* a second shard declaring the same unlisted alias of its own tensor:
     * two answers for "tied" (the last shard's was loaded), refused */
    len = st_make("{\"__metadata__\":{\"ckpt.aliases\":\"{\\\"tied\\\":\\\"z\\\"}\"},"
                  "\"z\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}    ",
                  "z", 1);
    write_file("u.safetensors", st_buf, len);
    CHECK_EQ_INT(
        open_index(&f, "{\"weight_map\":{\"x\":\"t.safetensors\",\"z\":\"u.safetensors\"}}"),
        CKPT_E_MISMATCH);
    CHECK(has(ckpt_error_last()->message,
              "alias \"tied\" (not in weight_map) is declared by shard \"t.safetensors\" and "
              "by shard \"u.safetensors\""));
    CHECK(f == NULL);
    remove_file("u.safetensors");
    remove_file("t.safetensors");
}

TEST(sharded_bad_index) {
    write_shard("a.safetensors", 0);
    ckpt_file *f = NULL;
    CHECK_EQ_INT(open_index(&f, "{\"weight_map\":{\"x\":\"a.safetensors\",\"x\":1}}"),
                 CKPT_E_FORMAT);
    CHECK(has(ckpt_error_last()->message, "shard file name string"));
    CHECK_EQ_INT(ckpt_error_last()->offset, 39); /* the 1: the last value counts */
    CHECK_EQ_INT(open_index(&f, "{\"weight_map\":{\"x\":\"a.safetensors\"} x"), CKPT_E_FORMAT);
    CHECK(has(ckpt_error_last()->message, "Python's json"));
    CHECK_EQ_INT(ckpt_error_last()->offset, 36);
    CHECK_EQ_INT(open_index(&f, "{\"weights\":{}}"), CKPT_E_FORMAT);
    CHECK_EQ_INT(open_index(&f, "{\"weight_map\":{\"x\":1}}"), CKPT_E_FORMAT);
    CHECK_EQ_INT(open_index(&f, "{\"metadata\":[],\"weight_map\":{}}"), CKPT_E_FORMAT);
    /* a missing shard is the set's fault (a finding), named by its path */
    CHECK_EQ_INT(open_index(&f, "{\"weight_map\":{\"x\":\"missing.safetensors\"}}"),
                 CKPT_E_MISMATCH);
    CHECK(has(ckpt_error_last()->file, "missing.safetensors"));
    CHECK(has(ckpt_error_last()->message, "weight_map"));
    /* a shard that is itself an index naming itself: refused, no recursion */
    const char *loop = "{\"weight_map\":{\"x\":\"loop.safetensors\"}}";
    write_file("loop.safetensors", loop, strlen(loop));
    CHECK_EQ_INT(open_index(&f, loop), CKPT_E_FORMAT);
    CHECK(has(ckpt_error_last()->message, "itself"));
    remove_file("loop.safetensors");
    /* a broken shard reports the shard's own error and path */
    size_t len =
        st_make("{\"x\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", "xx", 2);
    write_file("a.safetensors", st_buf, len);
    CHECK_EQ_INT(open_index(&f, "{\"weight_map\":{\"x\":\"a.safetensors\"}}"), CKPT_E_FORMAT);
    CHECK(has(ckpt_error_last()->file, "a.safetensors"));
    CHECK(f == NULL);
    write_shard("a.safetensors", 0);
    /* empty weight_map: an empty checkpoint */
    CHECK_EQ_INT(open_index(&f, "{\"weight_map\":{}}"), 0);
    if (f) CHECK_EQ_INT(ckpt_file_tensor_count(f), 0);
    ckpt_close(f);
}

TEST(sharded_index_limit) {
    write_shard("a.safetensors", 0);
    const char *index = "{\"weight_map\":{\"x\":\"a.safetensors\"}}";
    char path[512];
    write_file("model.safetensors.index.json", index, strlen(index));
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", tmpdir);
    ckpt_open_options opts = CKPT_OPEN_OPTIONS_INIT;
    opts.limits.max_index_bytes = 10;
    ckpt_file *f = NULL;
    CHECK_EQ_INT(ckpt_open(&f, path, &opts), CKPT_E_LIMIT);
    CHECK(f == NULL);
    CHECK(has(ckpt_error_last()->message, "max_index_bytes"));
}

/* ------------------------------------------------------------ memory */

/* A header of n one-element F32 tensors named like a transformer's
 * ("model.layers.L.block.B.weight"; every 1000th name spells its dots
 * as \u002e), with `n` data bytes x 4 after it: a malloc'd file. */
static unsigned char *many_tensors(size_t n, size_t *len, size_t *header) {
    size_t cap = 64 + n * 128, o = 8;
    unsigned char *b = malloc(cap + 4 * n);
    if (!b) return NULL;
    o += (size_t)snprintf((char *)b + o, cap - o, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (size_t i = 0; i < n; i++)
        o += (size_t)snprintf((char *)b + o, cap - o,
                              i % 1000
                                  ? ",\"model.layers.%zu.block.%zu.weight\":"
                                    "{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[%zu,%zu]}"
                                  : ",\"model\\u002elayers.%zu.block.%zu.weight\":"
                                    "{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[%zu,%zu]}",
                              i / 64, i % 64, 4 * i, 4 * i + 4);
    b[o++] = '}';
    *header = o - 8;
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)*header >> (8 * i));
    memset(b + o, 0, 4 * n);
    *len = o + 4 * n;
    return b;
}

/* Opening and listing 100k tensors (what inspect and verify hold) takes
 * at most 2.5x the header in allocations: no tree until asked for, no
 * per-tensor allocation, names pooled out of the header's copy. Counted
 * with the allocator hook, not timed. */
TEST(many_tensors_allocation_budget) {
    size_t len = 0, header = 0, n = 100000;
    unsigned char *b = many_tensors(n, &len, &header);
    CHECK(b != NULL);
    if (!b) return;
    ckpt_file *f = NULL;
    acct_live = acct_peak = 0;
    acct_budget = (size_t)512 << 20;
    ckpt_set_allocator(&acct_allocator);
    int rc = ckpt_open_memory(&f, b, len, "many.safetensors", NULL);
    size_t opened = acct_peak, listed = 0;
    uint64_t bytes = 0;
    for (size_t i = 0; rc == 0 && i < ckpt_file_tensor_count(f); i++) {
        const ckpt_tensor *t = ckpt_file_tensor(f, i);
        bytes += ckpt_tensor_nbytes(t);
        listed += ckpt_tensor_ndim(t) == 1 && ckpt_tensor_shape(t)[0] == 1 &&
                  ckpt_tensor_storage_id(t) == i;
    }
    size_t before_tree = acct_live;
    const ckpt_value *root = rc == 0 ? ckpt_file_root(f) : NULL;
    size_t tree = acct_live - before_tree;
    CHECK_EQ_INT(rc, 0);
    CHECK_EQ_INT(ckpt_file_tensor_count(f), n);
    CHECK_EQ_INT(listed, n);
    CHECK_EQ_INT(bytes, 4 * n);
    CHECK(ckpt_file_find_tensor(f, "model.layers.0.block.0.weight") != NULL);   /* escaped */
    CHECK(ckpt_file_find_tensor(f, "model.layers.15.block.39.weight") != NULL); /* i = 999 */
    CHECK(opened <= header * 5 / 2);
    /* the tree, on first use: a dict in file order sharing the tensors */
    CHECK(root != NULL && ckpt_value_len(root) == n);
    if (root && ckpt_value_len(root) == n) {
        size_t klen = 0;
        CHECK_EQ_STR(ckpt_value_str(ckpt_value_key(root, 1), &klen),
                     "model.layers.0.block.1.weight");
        CHECK(ckpt_value_tensor(ckpt_value_item(root, 1)) ==
              ckpt_file_find_tensor(f, "model.layers.0.block.1.weight"));
    }
    CHECK(tree > 0 && tree <= n * 128);
    ckpt_close(f);
    CHECK_EQ_INT(acct_live, 0);
    ckpt_set_allocator(NULL);
    free(b);
}

/* A file that shrinks while its header is read: the header is copied
 * with pread, so this is CKPT_E_TRUNCATED naming the file, not SIGBUS
 * from the mapping. */
static char shrink_path[64];
static void shrink_at_header(const ckpt_source *src, uint64_t off, size_t n) {
    (void)src;
    (void)n;
    if (off == 8) CHECK_EQ_INT(truncate(shrink_path, 20), 0);
}

TEST(header_shrinks_while_read) {
    size_t len =
        st_make("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", "abcd", 4);
    snprintf(shrink_path, sizeof shrink_path, "/tmp/ckpt-shrink-%d.safetensors", (int)getpid());
    FILE *fp = fopen(shrink_path, "wb");
    CHECK(fp != NULL);
    if (!fp) return;
    CHECK_EQ_INT(fwrite(st_buf, 1, len, fp), len);
    fclose(fp);
    ckpt_file *f = NULL;
    ckpt_source_read_hook = shrink_at_header;
    int rc = ckpt_open(&f, shrink_path, NULL);
    ckpt_source_read_hook = NULL;
    CHECK_EQ_INT(rc, CKPT_E_TRUNCATED);
    CHECK(f == NULL);
    CHECK_EQ_STR(ckpt_error_last()->file, shrink_path);
    unlink(shrink_path);
}

int main(void) {
    RUN_CORPUS(corpus_matches_expected);
    RUN_CORPUS(corpus_overall);
    RUN_CORPUS(corpus_with_metadata);
    RUN_CORPUS(corpus_rank0);
    RUN_CORPUS(corpus_sharded);
    RUN_CORPUS(corpus_every_cut_fails);
    RUN(many_tensors_allocation_budget);
    RUN(header_shrinks_while_read);
    RUN(empty_header_padded);
    RUN(empty_with_metadata);
    RUN(metadata_null_is_absent);
    RUN(attn0_reference);
    RUN(whitespace_padding_accepted);
    RUN(zero_size_and_rank0);
    RUN(order_by_offsets_and_extra_keys);
    RUN(sub_byte_dtypes);
    RUN(all_safetensors_dtypes);
    RUN(attack_header_too_large);
    RUN(attack_shape_overflow);
    RUN(attack_aliased_offsets);
    RUN(attack_polyglot_trailing);
    RUN(file_shorter_than_8);
    RUN(header_past_end);
    RUN(data_past_end);
    RUN(duplicate_key);
    RUN(metadata_not_strings);
    RUN(tensor_named_metadata);
    RUN(gap_between_tensors);
    RUN(first_not_at_zero);
    RUN(end_before_begin);
    RUN(wrong_byte_size);
    RUN(misaligned_f4);
    RUN(unknown_dtype);
    RUN(bad_entry_schema);
    RUN(zero_size_stride_overflow);
    RUN(deep_nesting);
    RUN(header_serde_rules);
    RUN(number_range_serde);
    RUN(name_stop_bytes_at_every_offset);
    RUN(nul_padded_header);
    RUN(limits_honoured);
    RUN(allocation_failures);
    RUN_CORPUS(allocation_failures_corpus);

    snprintf(tmpdir, sizeof tmpdir, "/tmp/ckpt-st-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        fprintf(stderr, "mkdtemp failed\n");
        return 1;
    }
    RUN(shard_names_refused);
    RUN(index_nesting_python);
    RUN(index_python_json_rules);
    RUN(shard_name_rule);
    RUN(shard_spellings_open_once);
    RUN(shard_link_outside);
    RUN(sharded_small_set);
    RUN(sharded_mismatch);
    RUN(sharded_alias_out_of_weight_map);
    RUN(sharded_bad_index);
    RUN(sharded_index_limit);
    remove_file("a.safetensors");
    remove_file("model.safetensors.index.json");
    rmdir(tmpdir);
    return harness_end();
}
