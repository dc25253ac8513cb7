/* test_dcp.c - a DCP global tensor's bytes assembled from its chunks
 * (model/tensor.c ckpt_storage_read on a chunked storage): every byte
 * range of a 4x6 int16 tensor tiled by chunks split along both dimensions,
 * one of them a transposed (non-contiguous) view, against the row-major
 * bytes; and the public chunk listing. Then the directory layouts
 * (open/dcp.h): rank metadata names and which files select a layout. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "base/alloc.h"
#include "model/tensor.h"
#include "model/value.h"
#include "open/dcp.h"

#define ROWS 4
#define COLS 6

/* element (r, c) of the global tensor */
static int16_t want_at(unsigned r, unsigned c) { return (int16_t)(r * 100 + c); }

/* A chunk of rows [r0, r0+nr) and columns [c0, c0+nc) in memory; with
 * transposed, stored column-major and viewed through strides. */
static const ckpt_tensor *chunk(ckpt_arena *a, unsigned r0, unsigned nr, unsigned c0, unsigned nc,
                                int transposed) {
    ckpt_storage *st = ckpt_arena_alloc(a, sizeof *st);
    int16_t *data = ckpt_arena_alloc(a, nr * nc * sizeof *data);
    for (unsigned r = 0; r < nr; r++)
        for (unsigned c = 0; c < nc; c++)
            data[transposed ? c * nr + r : r * nc + c] = want_at(r0 + r, c0 + c);
    st->dtype = CKPT_DT_I16;
    st->nbytes = nr * nc * sizeof *data;
    st->data = (const uint8_t *)data;
    st->member = "";
    uint64_t shape[2] = {nr, nc};
    uint64_t stride[2] = {transposed ? 1 : nc, transposed ? nr : 1};
    ckpt_value *v = NULL;
    CHECK_EQ_INT(ckpt_tensor_new(&v, a, st, CKPT_DT_I16, 2, shape, stride, 0, "t", "", 0), 0);
    return v ? v->u.tensor : NULL;
}

TEST(assembled_bytes) {
    ckpt_arena a = {0};
    static const uint64_t shape[2] = {ROWS, COLS};
    static const uint64_t off[4][2] = {{0, 0}, {0, 4}, {3, 0}, {3, 4}};
    ckpt_chunk k[4] = {
        {chunk(&a, 0, 3, 0, 4, 0), off[0], "__0_0.distcp", 0, 10, 0},
        {chunk(&a, 0, 3, 4, 2, 1), off[1], "__1_0.distcp", 0, 10, 1},
        {chunk(&a, 3, 1, 0, 4, 0), off[2], "__2_0.distcp", 0, 10, 2},
        {chunk(&a, 3, 1, 4, 2, 0), off[3], "x.distcp", 0, 10, -1},
    };
    ckpt_chunks cs = {2, shape, k, 4};
    ckpt_storage st = {.dtype = CKPT_DT_I16, .nbytes = ROWS * COLS * 2, .key = "w", .chunks = &cs};
    int16_t want[ROWS * COLS];
    for (unsigned i = 0; i < ROWS * COLS; i++) want[i] = want_at(i / COLS, i % COLS);
    const uint8_t *wb = (const uint8_t *)want;
    /* every range, odd byte offsets and lengths included (pieces of an
     * element at either end) */
    for (size_t lo = 0; lo <= sizeof want; lo++)
        for (size_t hi = lo; hi <= sizeof want; hi++) {
            uint8_t got[sizeof want];
            CHECK_EQ_INT(ckpt_storage_read(&st, lo, got, hi - lo), 0);
            CHECK(memcmp(got, wb + lo, hi - lo) == 0);
        }
    /* a tensor over it: the public readers and the chunk listing */
    ckpt_value *v = NULL;
    uint64_t stride[2] = {COLS, 1};
    CHECK_EQ_INT(ckpt_tensor_new(&v, &a, &st, CKPT_DT_I16, 2, shape, stride, 0, "t", "w", 0), 0);
    int16_t got[ROWS * COLS];
    CHECK_EQ_INT(ckpt_tensor_read(v->u.tensor, got, sizeof got), 0);
    CHECK(memcmp(got, want, sizeof want) == 0);
    const void *p;
    size_t n;
    CHECK_EQ_INT(ckpt_tensor_data(v->u.tensor, &p, &n), CKPT_E_UNSUPPORTED);
    CHECK_EQ_INT((int)ckpt_tensor_chunk_count(v->u.tensor), 4);
    ckpt_chunk_info ci;
    CHECK_EQ_INT(ckpt_tensor_chunk(&ci, v->u.tensor, 1), 0);
    CHECK_EQ_STR(ci.file, "__1_0.distcp");
    CHECK_EQ_INT(ci.rank, 1);
    CHECK_EQ_INT((int)ci.offsets[1], 4);
    CHECK_EQ_INT((int)ci.sizes[0], 3);
    CHECK_EQ_INT((int)ci.sizes[1], 2);
    CHECK_EQ_INT(ckpt_tensor_chunk(&ci, v->u.tensor, 4), CKPT_E_INVALID_ARG);
    /* a gap: the last chunk gone, its elements lie in no chunk */
    cs.n = 3;
    CHECK_EQ_INT(ckpt_storage_read(&st, 0, got, sizeof got), CKPT_E_FORMAT);
    ckpt_arena_free(&a);
}

TEST(rank_metadata_names) {
    /* FileSystemWriter's f"__{rank}.metadata" and nothing else */
    CHECK_EQ_INT(ckpt_dcp_rank_metadata("__0.metadata"), 0);
    CHECK_EQ_INT(ckpt_dcp_rank_metadata("__12.metadata"), 12);
    CHECK_EQ_INT(ckpt_dcp_rank_metadata("__01.metadata"), -1);
    CHECK_EQ_INT(ckpt_dcp_rank_metadata("__.metadata"), -1);
    CHECK_EQ_INT(ckpt_dcp_rank_metadata("__-1.metadata"), -1);
    CHECK_EQ_INT(ckpt_dcp_rank_metadata("__1.metadata.tmp"), -1);
    CHECK_EQ_INT(ckpt_dcp_rank_metadata("__1_0.distcp"), -1);
    CHECK_EQ_INT(ckpt_dcp_rank_metadata(".metadata"), -1);
    CHECK_EQ_INT(ckpt_dcp_rank_metadata("__99999999999.metadata"), -1);
}

static void put(const char *dir, const char *name, const void *data, size_t n) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *fp = fopen(path, "wb");
    if (fp) {
        fwrite(data, 1, n, fp);
        fclose(fp);
    }
}

static void rm(const char *dir, const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    remove(path);
}

TEST(layouts) {
    char dir[] = "/tmp/ckpt-dcp-layout-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    CHECK_EQ_INT(ckpt_dcp_dir_layout(dir), CKPT_DCP_NOT);
    /* a safetensors file without DCP_SHARDING_INFO is no DCP file */
    static const char plain[] = "\x0e\0\0\0\0\0\0\0{\"__metadata__\":{}}";
    put(dir, "a.safetensors", plain, sizeof plain - 1);
    CHECK_EQ_INT(ckpt_dcp_dir_layout(dir), CKPT_DCP_NOT);
    static const char hf[] = "\x2a\0\0\0\0\0\0\0{\"__metadata__\":{\"DCP_SHARDING_INFO\":\"{}\"}}";
    put(dir, "shard-00001-model-00001-of-00001.safetensors", hf, sizeof hf - 1);
    CHECK_EQ_INT(ckpt_dcp_dir_layout(dir), CKPT_DCP_HF);
    CHECK_EQ_INT(ckpt_is_dcp_dir(dir), 1);
    put(dir, "model.safetensors", plain, sizeof plain - 1); /* transformers' model folder */
    CHECK_EQ_INT(ckpt_dcp_dir_layout(dir), CKPT_DCP_NOT);
    rm(dir, "model.safetensors");
    /* an index makes it a sharded set (rank 0's, or consolidated) */
    put(dir, "model.safetensors.index.json", "{}", 2);
    CHECK_EQ_INT(ckpt_dcp_dir_layout(dir), CKPT_DCP_NOT);
    put(dir, "__0_0.distcp", "", 0);
    CHECK_EQ_INT(ckpt_dcp_dir_layout(dir), CKPT_DCP_NO_METADATA);
    put(dir, "__1.metadata", "", 0);
    CHECK_EQ_INT(ckpt_dcp_dir_layout(dir), CKPT_DCP_RANKS);
    put(dir, ".metadata", "", 0); /* DCP reads it first */
    CHECK_EQ_INT(ckpt_dcp_dir_layout(dir), CKPT_DCP_METADATA);
    static const char *const names[] = {"a.safetensors",
                                        "shard-00001-model-00001-of-00001.safetensors",
                                        "model.safetensors.index.json",
                                        "__0_0.distcp",
                                        "__1.metadata",
                                        ".metadata"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) rm(dir, names[i]);
    CHECK_EQ_INT(rmdir(dir), 0);
}

int main(void) {
    RUN(assembled_bytes);
    RUN(rank_metadata_names);
    RUN(layouts);
    return harness_end();
}
