/* test_dcp_meta.c - errors about the values of a DCP `.metadata`
 * (format/dcp_meta.h) name the byte offset of the opcode that built the
 * value at fault. Each case is a hand-made Metadata pickle (protocol 2,
 * the opcodes torch's pickler writes for these dataclasses: GLOBAL,
 * EMPTY_TUPLE, NEWOBJ, a __dict__ by SETITEM, BUILD) with one value
 * broken; the test records where it emits that value's opcode and wants
 * that number as the error's offset. Then the data-file errors of a
 * directory (open/dcp.c): a missing data file and a slice beyond its
 * file name the storage_data entry's byte in .metadata. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "base/alloc.h"
#include "base/error.h"
#include "format/dcp_meta.h"

#define META "torch.distributed.checkpoint.metadata"

/* ------------------------------------------------------------ a pickle writer */

typedef struct pk {
    uint8_t b[4096];
    size_t n;
} pk;

/* Each emitter returns the offset of the opcode that builds its value. */
static size_t op(pk *p, uint8_t code) {
    size_t at = p->n;
    p->b[p->n++] = code;
    return at;
}

static size_t str(pk *p, const char *s) { /* SHORT_BINUNICODE */
    size_t at = op(p, 0x8c), n = strlen(s);
    p->b[p->n++] = (uint8_t)n;
    memcpy(p->b + p->n, s, n);
    p->n += n;
    return at;
}

/* BININT1 or BININT2. The values an error is about are above 256: the
 * machine may share smaller ints among opcodes (CPython does), which then
 * have no offset of their own. */
static size_t integer(pk *p, unsigned v) {
    size_t at = op(p, v < 256 ? 'K' : 'M');
    p->b[p->n++] = (uint8_t)(v & 0xff);
    if (v >= 256) p->b[p->n++] = (uint8_t)(v >> 8);
    return at;
}

static size_t global(pk *p, const char *module, const char *name) {
    size_t at = op(p, 'c');
    p->n += (size_t)sprintf((char *)p->b + p->n, "%s\n%s\n", module, name);
    return at;
}

/* cls.__new__(cls): the object BUILD then fills */
static size_t new_object(pk *p, const char *module, const char *name) {
    global(p, module, name);
    op(p, ')');         /* EMPTY_TUPLE */
    return op(p, 0x81); /* NEWOBJ */
}

/* torch.Size((d0, ...)); dims_at[i] receives where dimension i is */
static size_t torch_size(pk *p, size_t n, const unsigned *dims, size_t *dims_at) {
    global(p, "torch", "Size");
    op(p, '(');
    for (size_t i = 0; i < n; i++) {
        size_t at = integer(p, dims[i]);
        if (dims_at) dims_at[i] = at;
    }
    op(p, 't');        /* TUPLE */
    op(p, 0x85);       /* TUPLE1: the argument tuple */
    return op(p, 'R'); /* REDUCE */
}

static void key(pk *p, const char *k) { str(p, k); }
static void setitem(pk *p) { op(p, 's'); }
static void build(pk *p) { op(p, 'b'); }

/* ------------------------------------------------------------ a Metadata */

/* What a case breaks; 0 everywhere is a valid one-tensor Metadata. */
typedef struct knobs {
    int props_n;          /* TensorProperties' state tuple length (5) */
    const char *layout;   /* "torch.strided" */
    unsigned mem_format;  /* _MEM_FORMAT_ENCODING value (1) */
    int mem_not_enum;     /* the memory format is a str */
    int storage_meta_int; /* storage_meta = 300 */
    int chunk_2d;         /* chunk offsets (0, 0) for a 1-d tensor */
    unsigned chunk_size;  /* the chunk's size (4, the tensor's) */
    int no_entry;         /* storage_data keyed by another fqn */
    int path_int;         /* relative_path = 300 */
    int no_length;        /* the _StorageInfo has no length */
    int item_int;         /* state_dict_metadata["w"] = 300 */
    int chunks_tuple;     /* chunks = () */
    int transform;        /* transform_descriptors = ["zlib"] */
    int planner_bad;      /* planner_data["w"] = () */
    const char *planner;  /* planner_data["w"] = ("w"?, this) */
    int persid;           /* a BINPERSID in storage_meta */
    int root_int;         /* the pickle is 300 */
} knobs;

/* Where the values a case may break were emitted. */
typedef struct marks {
    size_t props_tuple, layout_name, mem_int, mem_str, storage_meta, chunk_offsets, chunk_size,
        chunk, path, item, chunks, transform, planner_path, persid, root, info;
} marks;

static void metadata(pk *p, const knobs *k, marks *m) {
    static const unsigned four[] = {4}, zero[] = {0, 0};
    p->n = 0;
    op(p, 0x80); /* PROTO 2 */
    p->b[p->n++] = 2;
    if (k->root_int) {
        m->root = integer(p, 300);
        op(p, '.');
        return;
    }
    m->root = new_object(p, META, "Metadata");
    op(p, '}'); /* EMPTY_DICT: its __dict__ */

    key(p, "state_dict_metadata");
    op(p, '}');
    key(p, "w");
    if (k->item_int) {
        m->item = integer(p, 300);
    } else {
        m->item = new_object(p, META, "TensorStorageMetadata");
        op(p, '}');
        key(p, "properties");
        new_object(p, META, "TensorProperties");
        op(p, '(');
        global(p, "torch", "float32");
        global(p, "torch.serialization", "_get_layout");
        m->layout_name = str(p, k->layout ? k->layout : "torch.strided");
        op(p, 0x85);
        op(p, 'R');
        op(p, 0x89); /* NEWFALSE: requires_grad */
        if (k->mem_not_enum) {
            m->mem_str = str(p, "channels_last");
        } else {
            global(p, META, "_MEM_FORMAT_ENCODING");
            m->mem_int = integer(p, k->mem_format ? k->mem_format : 1);
            op(p, 0x85);
            op(p, 'R');
        }
        if (k->props_n != 4) op(p, 0x89); /* pin_memory */
        m->props_tuple = op(p, 't');
        build(p);
        setitem(p);
        key(p, "size");
        torch_size(p, 1, four, NULL);
        setitem(p);
        key(p, "chunks");
        if (k->chunks_tuple) {
            m->chunks = op(p, ')');
        } else {
            m->chunks = op(p, ']'); /* EMPTY_LIST */
            m->chunk = new_object(p, META, "ChunkStorageMetadata");
            op(p, '}');
            key(p, "offsets");
            m->chunk_offsets = torch_size(p, k->chunk_2d ? 2 : 1, zero, NULL);
            setitem(p);
            key(p, "sizes");
            unsigned size[] = {k->chunk_size ? k->chunk_size : 4};
            torch_size(p, 1, size, &m->chunk_size);
            setitem(p);
            build(p);
            op(p, 'a'); /* APPEND */
        }
        setitem(p);
        build(p);
    }
    setitem(p);
    setitem(p);

    key(p, "storage_data");
    op(p, '}');
    new_object(p, META, "MetadataIndex");
    op(p, '}');
    key(p, "fqn");
    str(p, k->no_entry ? "v" : "w");
    setitem(p);
    key(p, "offset");
    torch_size(p, 1, zero, NULL);
    setitem(p);
    build(p);
    m->info = new_object(p, "torch.distributed.checkpoint.filesystem", "_StorageInfo");
    op(p, '}');
    key(p, "relative_path");
    m->path = k->path_int ? integer(p, 300) : str(p, "__0_0.distcp");
    setitem(p);
    key(p, "offset");
    integer(p, 0);
    setitem(p);
    if (!k->no_length) {
        key(p, "length");
        integer(p, 16);
        setitem(p);
    }
    if (k->transform) {
        key(p, "transform_descriptors");
        m->transform = op(p, ']');
        str(p, "zlib");
        op(p, 'a');
        setitem(p);
    }
    build(p);
    setitem(p);
    setitem(p);

    key(p, "storage_meta");
    if (k->storage_meta_int) {
        m->storage_meta = integer(p, 300);
    } else if (k->persid) {
        str(p, "pid");
        m->persid = op(p, 'Q'); /* BINPERSID */
    } else {
        op(p, 'N');
    }
    setitem(p);
    if (k->planner_bad || k->planner) {
        key(p, "planner_data");
        op(p, '}');
        key(p, "w");
        if (k->planner_bad) {
            m->planner_path = op(p, ')');
        } else if (*k->planner) {
            str(p, "w");
            str(p, k->planner);
            m->planner_path = op(p, 0x86); /* TUPLE2 */
        } else {
            str(p, "w");
            m->planner_path = op(p, 0x85); /* TUPLE1 */
        }
        setitem(p);
        setitem(p);
    }
    build(p);
    op(p, '.');
}

/* Parses the Metadata of k: the return code, and the error's offset. */
static int parse(const knobs *k, marks *m, uint64_t *offset, char *msg, size_t cap) {
    pk p;
    ckpt_arena a = {0};
    ckpt_dcp_meta out;
    *m = (marks){0};
    metadata(&p, k, m);
    int rc = ckpt_dcp_meta_parse(&out, &a, p.b, p.n, "d/.metadata", NULL);
    const ckpt_error *e = ckpt_error_last();
    *offset = rc ? e->offset : CKPT_NO_OFFSET;
    snprintf(msg, cap, "%s", rc ? e->message : "");
    if (rc) CHECK_EQ_STR(e->file, "d/.metadata");
    if (rc == 0 && out.nitems == 1) *offset = out.items[0].chunks[0].meta_at;
    ckpt_arena_free(&a);
    return rc;
}

/* The error of case k is `code` at the offset `want` picks from its
 * marks, and its message holds `needle`. */
#define EXPECT(k, code, field, needle)                                                             \
    do {                                                                                           \
        marks m_;                                                                                  \
        uint64_t off_;                                                                             \
        char msg_[512];                                                                            \
        CHECK_EQ_INT(parse(&(k), &m_, &off_, msg_, sizeof msg_), code);                            \
        CHECK_EQ_INT(off_, m_.field);                                                              \
        CHECK(m_.field > 0);                                                                       \
        if (!strstr(msg_, needle)) {                                                               \
            fprintf(stderr, "%s:%d: \"%s\" not in \"%s\"\n", __FILE__, __LINE__, needle, msg_);    \
            harness_cur_failed = 1;                                                                \
        }                                                                                          \
    } while (0)

TEST(valid_metadata_places_its_chunk) {
    /* the baseline every case breaks: it parses, and its chunk knows where
     * its storage_data entry (the _StorageInfo's NEWOBJ) is */
    knobs k = {0};
    marks m;
    uint64_t at;
    char msg[512];
    CHECK_EQ_INT(parse(&k, &m, &at, msg, sizeof msg), 0);
    CHECK_EQ_INT(at, m.info);
    CHECK_EQ_INT(at, 667); /* pinned: this pickle's layout, byte for byte */
}

TEST(tensor_properties) {
    knobs k = {.props_n = 4};
    EXPECT(k, CKPT_E_FORMAT, props_tuple, "expected TensorProperties' state to hold the 5 values");
    k = (knobs){.layout = "torch.weird"};
    EXPECT(k, CKPT_E_FORMAT, layout_name, "got torch.weird");
    k = (knobs){.mem_format = 300};
    EXPECT(k, CKPT_E_FORMAT, mem_int, "got _MEM_FORMAT_ENCODING of 300");
    k = (knobs){.mem_not_enum = 1};
    EXPECT(k, CKPT_E_FORMAT, mem_str, "(0, 1 or 2) as TensorProperties' memory format, got str");
}

TEST(chunks) {
    knobs k = {.chunk_2d = 1};
    EXPECT(k, CKPT_E_FORMAT, chunk_offsets, "expected 1 offsets and sizes in chunk 0");
    k = (knobs){.chunk_size = 300};
    EXPECT(k, CKPT_E_FORMAT, chunk_size,
           "expected chunk 0 inside [0, 4) along dimension 0, got offset 0 and size 300");
    k = (knobs){.chunks_tuple = 1};
    EXPECT(k, CKPT_E_FORMAT, chunks, "expected a list as chunks, got tuple");
    k = (knobs){.no_entry = 1};
    EXPECT(k, CKPT_E_FORMAT, chunk, "expected a storage_data entry for chunk 0");
}

TEST(fields) {
    knobs k = {.storage_meta_int = 1};
    EXPECT(k, CKPT_E_FORMAT, storage_meta, "as storage_meta");
    k = (knobs){.path_int = 1};
    EXPECT(k, CKPT_E_FORMAT, path, "expected a str relative_path, got int");
    k = (knobs){.no_length = 1}; /* a missing field: blamed on its object */
    EXPECT(k, CKPT_E_FORMAT, info, "expected a non-negative int length, got nothing");
    k = (knobs){.item_int = 1};
    EXPECT(k, CKPT_E_FORMAT, item,
           "expected a TensorStorageMetadata or a BytesStorageMetadata, got int");
    k = (knobs){.transform = 1};
    EXPECT(k, CKPT_E_UNSUPPORTED, transform, "transform_descriptors (zlib");
    k = (knobs){.planner_bad = 1};
    EXPECT(k, CKPT_E_FORMAT, planner_path, "expected a non-empty tuple of str and int keys");
    /* DCP names the item by its path joined with '.': a path that is not
     * the fqn fails dcp_to_torch_save ("Missing key in checkpoint
     * state_dict: w.x"), and ckpt put the tensor under w.x (said OK) */
    k = (knobs){.planner = "x"};
    EXPECT(k, CKPT_E_FORMAT, planner_path, "joined by '.' are not the fqn");
    k = (knobs){.planner = ""}; /* ("w",): the fqn */
    marks m;
    uint64_t at;
    char msg[512];
    CHECK_EQ_INT(parse(&k, &m, &at, msg, sizeof msg), 0);
    k = (knobs){.persid = 1};
    EXPECT(k, CKPT_E_FORMAT, persid, "no persistent_load (pickle.load raises");
    k = (knobs){.root_int = 1};
    EXPECT(k, CKPT_E_FORMAT, root, "Metadata as the pickled object, got int");
}

/* ------------------------------------------------------------ data files */

static void put(const char *dir, const char *name, const void *data, size_t n) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *fp = fopen(path, "wb");
    if (fp) {
        CHECK_EQ_INT(fwrite(data, 1, n, fp), n);
        fclose(fp);
    }
}

static void rm(const char *dir, const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    remove(path);
}

/* Opening the directory fails with code, against file `file` (relative to
 * dir) and member "w", and the message holds `needle`. */
static void open_fails(const char *dir, int code, const char *file, const char *needle) {
    ckpt_file *f = NULL;
    char want[512];
    snprintf(want, sizeof want, "%s/%s", dir, file);
    CHECK_EQ_INT(ckpt_open(&f, dir, NULL), code);
    const ckpt_error *e = ckpt_error_last();
    CHECK_EQ_STR(e->file, want);
    CHECK_EQ_STR(e->member, "w");
    if (!strstr(e->message, needle)) {
        fprintf(stderr, "\"%s\" not in \"%s\"\n", needle, e->message);
        harness_cur_failed = 1;
    }
    ckpt_close(f);
}

TEST(data_file_errors_name_the_storage_data_entry) {
    char dir[] = "/tmp/ckpt-dcp-meta-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    pk p;
    marks m = {0};
    knobs k = {0};
    metadata(&p, &k, &m);
    put(dir, ".metadata", p.b, p.n);
    char needle[128];
    snprintf(needle, sizeof needle, "(the storage_data entry at byte %zu of .metadata)", m.info);
    /* no __0_0.distcp */
    open_fails(dir, CKPT_E_MISMATCH, "__0_0.distcp", needle);
    /* a data file shorter than the slice [0, 16): blamed at its end */
    put(dir, "__0_0.distcp", "PK\3\4", 4);
    open_fails(dir, CKPT_E_TRUNCATED, "__0_0.distcp", needle);
    CHECK_EQ_INT(ckpt_error_last()->offset, 4);
    /* a slice that is no torch.save (a zip without its directory): the
     * zip reader's error, naming the fqn and the entry too */
    static const char broken[16] = "PK\3\4";
    put(dir, "__0_0.distcp", broken, sizeof broken);
    open_fails(dir, CKPT_E_TRUNCATED, "__0_0.distcp@0", needle);
    CHECK(strstr(ckpt_error_last()->message, "(while reading \"w\" (the storage_data entry"));
    /* a relative_path that leaves the directory: an error of .metadata, at
     * the _StorageInfo's byte */
    rm(dir, "__0_0.distcp");
    size_t at = m.path + 2; /* the str's first byte: "__0_0.distcp" -> "../_0.distcp" */
    memcpy(p.b + at, "../", 3);
    put(dir, ".metadata", p.b, p.n);
    open_fails(dir, CKPT_E_FORMAT, ".metadata", "got \"../_0.distcp\"");
    CHECK_EQ_INT(ckpt_error_last()->offset, m.info);
    rm(dir, ".metadata");
    CHECK_EQ_INT(rmdir(dir), 0);
}

int main(void) {
    RUN(valid_metadata_places_its_chunk);
    RUN(tensor_properties);
    RUN(chunks);
    RUN(fields);
    RUN(data_file_errors_name_the_storage_data_entry);
    return harness_end();
}
