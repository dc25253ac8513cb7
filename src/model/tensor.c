/* tensor.c - tensor accessors: shape, zero-copy data, and the reader
 * every job reads logical contents through (tensor.h). */
#include <inttypes.h>
#include <libdeflate.h>
#include <openssl/evp.h>
#include <string.h>

#include "model/dtype.h"
#include "base/error.h"
#include "base/hex.h"
#include "base/once.h"
#include "base/xxh.h"
#include "base/source.h"
#include "model/tensor.h"
#include "model/value.h"

static const uint64_t no_dims[1] = {0};

const char *ckpt_tensor_name(const ckpt_tensor *t) { return t->name ? t->name : ""; }
ckpt_dtype ckpt_tensor_dtype(const ckpt_tensor *t) { return t->dtype; }
unsigned ckpt_tensor_ndim(const ckpt_tensor *t) { return t->ndim; }
const uint64_t *ckpt_tensor_shape(const ckpt_tensor *t) { return t->ndim ? t->shape : no_dims; }
const uint64_t *ckpt_tensor_stride(const ckpt_tensor *t) { return t->ndim ? t->stride : no_dims; }
uint64_t ckpt_tensor_storage_offset(const ckpt_tensor *t) { return t->storage_offset; }
uint64_t ckpt_tensor_numel(const ckpt_tensor *t) { return t->numel; }
uint64_t ckpt_tensor_nbytes(const ckpt_tensor *t) { return t->nbytes; }
uint64_t ckpt_tensor_storage_id(const ckpt_tensor *t) { return t->storage->id; }
uint64_t ckpt_tensor_storage_nbytes(const ckpt_tensor *t) { return t->storage->nbytes; }
const char *ckpt_tensor_member(const ckpt_tensor *t) {
    return t->storage->member ? t->storage->member : "";
}
const char *ckpt_tensor_device(const ckpt_tensor *t) {
    return t->storage->device ? t->storage->device : "cpu";
}
uint64_t ckpt_tensor_file_offset(const ckpt_tensor *t) {
    const ckpt_storage *st = t->storage;
    if (st->file_offset == CKPT_NO_OFFSET) return CKPT_NO_OFFSET;
    /* an empty view may carry any offset (torch accepts it): no byte of it
     * exists, so it is placed at its storage */
    if (t->numel == 0) return st->file_offset;
    return st->file_offset + t->storage_offset * ckpt_dtype_bits(t->dtype) / 8;
}

size_t ckpt_tensor_chunk_count(const ckpt_tensor *t) {
    return t->storage->chunks ? t->storage->chunks->n : 0;
}

int ckpt_tensor_chunk(ckpt_chunk_info *out, const ckpt_tensor *t, size_t i) {
    if (i >= ckpt_tensor_chunk_count(t))
        return ckpt_err(CKPT_E_INVALID_ARG, "", ckpt_tensor_name(t), CKPT_NO_OFFSET,
                        "chunk %zu of %zu", i, ckpt_tensor_chunk_count(t));
    const ckpt_chunk *k = &t->storage->chunks->items[i];
    *out = (ckpt_chunk_info){k->file, k->offset, k->length, k->rank, k->offsets, k->t->shape};
    return 0;
}

/* Row-major layout with no gaps (dimensions of size 1 may have any stride). */
static int row_major(const ckpt_tensor *t) {
    uint64_t expect = 1;
    for (uint32_t i = t->ndim; i-- > 0;) {
        if (t->shape[i] != 1 && t->stride[i] != expect) return 0;
        expect *= t->shape[i];
    }
    return 1;
}

int ckpt_tensor_is_contiguous(const ckpt_tensor *t) {
    unsigned bits = ckpt_dtype_bits(t->dtype);
    if (t->numel == 0) return 1;
    if (!row_major(t)) return 0;
    if (t->storage->big_endian && bits > 8) return 0;
    return (t->storage_offset * bits) % 8 == 0;
}

int ckpt_tensor_data(const ckpt_tensor *t, const void **data, size_t *size) {
    if (t->storage->chunks)
        return ckpt_err(CKPT_E_UNSUPPORTED, "", ckpt_tensor_name(t), CKPT_NO_OFFSET,
                        "tensor \"%s\" is assembled from DCP chunks: use ckpt_tensor_read",
                        ckpt_tensor_name(t));
    int rc = ckpt_storage_resolve(t->storage);
    if (rc) return rc;
    if (!ckpt_tensor_is_contiguous(t))
        return ckpt_err(CKPT_E_UNSUPPORTED, "", ckpt_tensor_name(t), CKPT_NO_OFFSET,
                        "tensor is a non-contiguous view or big-endian: use ckpt_tensor_read");
    if (t->nbytes > SIZE_MAX)
        return ckpt_err(CKPT_E_LIMIT, "", ckpt_tensor_name(t), CKPT_NO_OFFSET,
                        "tensor larger than the address space");
    *data = t->numel == 0 ? t->storage->data
                          : t->storage->data + t->storage_offset * ckpt_dtype_bits(t->dtype) / 8;
    *size = (size_t)t->nbytes;
    return 0;
}

/* ------------------------------------------------------------ reading */

static int chunks_read(const ckpt_storage *st, uint64_t off, uint8_t *dst, size_t n);

int ckpt_storage_resolve(const ckpt_storage *st) {
    /* resolving is not a change the caller sees: data was always "these
     * bytes", only where they live was pending */
    ckpt_storage *lazy = (ckpt_storage *)(uintptr_t)st;
    if (!CKPT_ONCE_LOAD(&lazy->inflate)) return 0;
    ckpt_once_lock(); /* another thread may be reading this file */
    int rc = lazy->inflate ? lazy->inflate(lazy) : 0;
    if (rc == 0) CKPT_ONCE_STORE(&lazy->inflate, NULL);
    ckpt_once_unlock();
    return rc;
}

int ckpt_storage_read(const ckpt_storage *st, uint64_t off, void *dst, size_t n) {
    if (st->chunks) return chunks_read(st, off, dst, n);
    int rc = ckpt_storage_resolve(st);
    return rc ? rc : ckpt_source_read(st->source, st->data + off, dst, n, st->member);
}

/* Element positions of a view: a multi-index and the storage element it
 * addresses, advanced in row-major order. */
typedef struct cursor {
    uint64_t idx[CKPT_MAX_NDIM];
    uint64_t pos;
} cursor;

static void cursor_seek(cursor *c, const ckpt_tensor *t, uint64_t start) {
    uint64_t rem = start;
    c->pos = t->storage_offset;
    for (uint32_t i = t->ndim; i-- > 0;) {
        c->idx[i] = rem % t->shape[i];
        rem /= t->shape[i];
        c->pos += c->idx[i] * t->stride[i];
    }
}

static void cursor_next(cursor *c, const ckpt_tensor *t) {
    for (uint32_t i = t->ndim; i-- > 0;) {
        if (++c->idx[i] < t->shape[i]) {
            c->pos += t->stride[i];
            return;
        }
        c->pos -= (t->shape[i] - 1) * t->stride[i];
        c->idx[i] = 0;
    }
}

/* Bytes swapped within each component of big-endian storages (complex
 * elements swap per component); 1 when nothing is swapped. */
static unsigned swap_width(const ckpt_tensor *t) {
    unsigned esz = ckpt_dtype_size(t->dtype);
    if (!t->storage->big_endian) return 1;
    if (t->dtype == CKPT_DT_C32 || t->dtype == CKPT_DT_C64 || t->dtype == CKPT_DT_C128)
        return esz / 2;
    return esz;
}

static void put_element(uint8_t *dst, const uint8_t *e, unsigned esz, unsigned swap) {
    if (swap > 1) {
        for (unsigned c = 0; c < esz; c += swap)
            for (unsigned b = 0; b < swap; b++) dst[c + b] = e[c + swap - 1 - b];
    } else {
        memcpy(dst, e, esz);
    }
}

/* Elements [start, start+count) from `bytes`, which holds the storage's
 * bytes from byte `lo` on. */
static void gather(const ckpt_tensor *t, const uint8_t *bytes, uint64_t lo, uint64_t start,
                   uint64_t count, uint8_t *dst) {
    unsigned esz = ckpt_dtype_size(t->dtype), swap = swap_width(t);
    cursor c;
    cursor_seek(&c, t, start);
    for (uint64_t n = 0; n < count; n++, dst += esz) {
        put_element(dst, bytes + (c.pos * esz - lo), esz, swap);
        cursor_next(&c, t);
    }
}

/* Same, with one pread per run of elements adjacent in the storage: for
 * views whose span is too large to copy. */
static int gather_runs(const ckpt_tensor *t, uint64_t start, uint64_t count, uint8_t *dst) {
    unsigned esz = ckpt_dtype_size(t->dtype), swap = swap_width(t);
    uint32_t last = t->ndim ? t->ndim - 1 : 0;
    int inner = t->ndim && (t->stride[last] == 1 || t->shape[last] == 1);
    cursor c;
    cursor_seek(&c, t, start);
    while (count) {
        uint64_t run = inner ? t->shape[last] - c.idx[last] : 1;
        if (run > count) run = count;
        int rc = ckpt_storage_read(t->storage, c.pos * esz, dst, (size_t)(run * esz));
        if (rc) return rc;
        if (swap > 1)
            for (uint64_t i = 0; i < run; i++) {
                uint8_t e[16];
                memcpy(e, dst + i * esz, esz);
                put_element(dst + i * esz, e, esz, swap);
            }
        dst += run * esz;
        count -= run;
        if (inner) {
            c.idx[last] += run - 1;
            c.pos += (run - 1) * t->stride[last];
        }
        cursor_next(&c, t);
    }
    return 0;
}

/* ------------------------------------------------------------ chunks */

/* Elements [start, start+count) of t in row-major order. */
static int tensor_elems(const ckpt_tensor *t, uint64_t start, uint64_t count, uint8_t *dst) {
    unsigned esz = ckpt_dtype_size(t->dtype);
    if (ckpt_tensor_is_contiguous(t))
        return ckpt_storage_read(t->storage, (t->storage_offset + start) * esz, dst,
                                 (size_t)(count * esz));
    return gather_runs(t, start, count, dst);
}

static int chunk_holds(const ckpt_chunks *c, const ckpt_chunk *k, const uint64_t *idx) {
    for (uint32_t d = 0; d < c->ndim; d++)
        if (idx[d] < k->offsets[d] || idx[d] - k->offsets[d] >= k->t->shape[d]) return 0;
    return 1;
}

/* Elements [e, e+count) of a chunked storage: each step copies the longest
 * run that is contiguous both in the global row-major order and in one
 * chunk (whole rows of a chunk that spans the inner dimensions at once),
 * so a tensor sharded along dimension 0 is read one chunk per step. */
static int chunk_elems(const ckpt_storage *st, uint64_t e, uint64_t count, uint8_t *dst) {
    const ckpt_chunks *c = st->chunks;
    uint32_t nd = c->ndim;
    unsigned esz = ckpt_dtype_size(st->dtype);
    size_t hint = 0;
    uint64_t idx[CKPT_MAX_NDIM];
    while (count) {
        uint64_t rem = e;
        for (uint32_t d = nd; d-- > 0;) {
            idx[d] = rem % c->shape[d];
            rem /= c->shape[d];
        }
        const ckpt_chunk *k = NULL;
        for (size_t i = 0; i < c->n && !k; i++) {
            size_t j = (hint + i) % c->n;
            if (chunk_holds(c, &c->items[j], idx)) {
                k = &c->items[j];
                hint = j;
            }
        }
        if (!k)
            return ckpt_err(CKPT_E_FORMAT, "", st->key, CKPT_NO_OFFSET,
                            "element %llu of \"%s\" lies in no chunk", (unsigned long long)e,
                            st->key ? st->key : "");
        const uint64_t *size = k->t->shape;
        uint64_t run = 1;
        if (nd) {
            uint32_t d = nd - 1;
            uint64_t mul = 1;
            run = k->offsets[d] + size[d] - idx[d];
            while (d > 0 && idx[d] == 0 && size[d] == c->shape[d]) {
                mul *= c->shape[d];
                d--;
                run = (k->offsets[d] + size[d] - idx[d]) * mul;
            }
        }
        if (run > count) run = count;
        uint64_t local = 0;
        for (uint32_t d = 0; d < nd; d++) local = local * size[d] + (idx[d] - k->offsets[d]);
        int rc = tensor_elems(k->t, local, run, dst);
        if (rc) return rc;
        dst += run * esz;
        e += run;
        count -= run;
    }
    return 0;
}

/* Bytes [off, off+n) of a chunked storage; a piece of an element at
 * either end goes through one element of scratch. */
static int chunks_read(const ckpt_storage *st, uint64_t off, uint8_t *dst, size_t n) {
    unsigned esz = ckpt_dtype_size(st->dtype);
    uint8_t tmp[16];
    if (esz == 0 || esz > sizeof tmp)
        return ckpt_err(CKPT_E_UNSUPPORTED, "", st->key, CKPT_NO_OFFSET,
                        "chunked tensor of dtype %s", ckpt_dtype_name(st->dtype));
    int rc = 0;
    uint64_t head = off % esz;
    if (head && n) {
        size_t k = esz - head < n ? (size_t)(esz - head) : n;
        if ((rc = chunk_elems(st, off / esz, 1, tmp))) return rc;
        memcpy(dst, tmp + head, k);
        dst += k;
        off += k;
        n -= k;
    }
    uint64_t whole = n / esz;
    if (whole && (rc = chunk_elems(st, off / esz, whole, dst))) return rc;
    dst += whole * esz;
    off += whole * esz;
    n -= (size_t)(whole * esz);
    if (n) {
        if ((rc = chunk_elems(st, off / esz, 1, tmp))) return rc;
        memcpy(dst, tmp, n);
    }
    return 0;
}

/* Gathered views: the storage bytes the view spans are copied once when
 * they fit this. */
#define SPAN_MAX ((uint64_t)64 << 20)

int ckpt_tensor_reader_init(ckpt_tensor_reader *r, const ckpt_tensor *t) {
    memset(r, 0, sizeof *r);
    r->t = t;
    r->contiguous = ckpt_tensor_is_contiguous(t);
    int rc = ckpt_storage_resolve(t->storage);
    if (rc) return rc;
    if (!r->contiguous && ckpt_dtype_size(t->dtype) == 0)
        return ckpt_err(CKPT_E_UNSUPPORTED, "", ckpt_tensor_name(t), CKPT_NO_OFFSET,
                        "tensor \"%s\": non-contiguous view of a sub-byte dtype (%s)",
                        ckpt_tensor_name(t), ckpt_dtype_name(t->dtype));
    return 0;
}

void ckpt_tensor_reader_free(ckpt_tensor_reader *r) {
    ckpt_free(r->span);
    r->span = NULL;
}

/* First use of a gathered view: copy its span, or fall back to runs. */
static int load_span(ckpt_tensor_reader *r) {
    const ckpt_tensor *t = r->t;
    const ckpt_storage *st = t->storage;
    unsigned esz = ckpt_dtype_size(t->dtype);
    uint64_t last = t->storage_offset;
    for (uint32_t i = 0; i < t->ndim; i++) last += (t->shape[i] - 1) * t->stride[i];
    uint64_t lo = t->storage_offset * esz, hi = (last + 1) * esz;
    if (hi - lo > SPAN_MAX) {
        r->runs = 1;
        return 0;
    }
    r->span = ckpt_malloc((size_t)(hi - lo));
    if (!r->span) return ckpt_err_nomem();
    r->span_lo = lo;
    return ckpt_storage_read(st, lo, r->span, (size_t)(hi - lo));
}

int ckpt_tensor_reader_next(ckpt_tensor_reader *r, void *dst, size_t cap, size_t *got) {
    const ckpt_tensor *t = r->t;
    *got = 0;
    if (r->contiguous) {
        uint64_t left = t->nbytes - r->done;
        size_t n = left < cap ? (size_t)left : cap;
        if (n == 0) return 0;
        uint64_t first = t->numel ? t->storage_offset * ckpt_dtype_bits(t->dtype) / 8 : 0;
        int rc = ckpt_storage_read(t->storage, first + r->done, dst, n);
        if (rc) return rc;
        r->done += n;
        *got = n;
        return 0;
    }
    unsigned esz = ckpt_dtype_size(t->dtype);
    uint64_t left = t->numel - r->done, n = cap / esz;
    if (left == 0) return 0;
    if (n == 0)
        return ckpt_err(CKPT_E_INVALID_ARG, "", ckpt_tensor_name(t), CKPT_NO_OFFSET,
                        "buffer of %zu bytes holds no element of %u bytes", cap, esz);
    if (n > left) n = left;
    const ckpt_storage *st = t->storage;
    int in_memory = !ckpt_source_is_file(st->source, st->data, st->nbytes);
    if (!in_memory && !r->span && !r->runs) {
        int rc = load_span(r);
        if (rc) return rc;
    }
    if (in_memory) {
        gather(t, st->data, 0, r->done, n, dst);
    } else if (r->span) {
        gather(t, r->span, r->span_lo, r->done, n, dst);
    } else {
        int rc = gather_runs(t, r->done, n, dst);
        if (rc) return rc;
    }
    r->done += n;
    *got = (size_t)(n * esz);
    return 0;
}

int ckpt_tensor_read(const ckpt_tensor *t, void *dst, size_t cap) {
    if (cap < t->nbytes)
        return ckpt_err(CKPT_E_INVALID_ARG, "", ckpt_tensor_name(t), CKPT_NO_OFFSET,
                        "buffer of %zu bytes, tensor needs %llu", cap,
                        (unsigned long long)t->nbytes);
    ckpt_tensor_reader r;
    int rc = ckpt_tensor_reader_init(&r, t);
    size_t got = 0;
    /* nbytes <= cap: one call reads it all (one pread when contiguous) */
    if (rc == 0) rc = ckpt_tensor_reader_next(&r, dst, (size_t)t->nbytes, &got);
    ckpt_tensor_reader_free(&r);
    return rc;
}

/* Pieces handed to sinks: large enough for few syscalls, small enough to
 * stay in the CPU's L2 cache between the read and the sink (which hashes
 * them, writes them and compares them with what the file reads back:
 * container/atomic.h's window). */
#define STREAM_CHUNK ((size_t)256 << 10)

int ckpt_tensor_stream(const ckpt_tensor *t, ckpt_tensor_sink sink, void *ctx) {
    return ckpt_tensor_stream_at(t, 0, sink, ctx);
}

/* The piece that starts `done` bytes into the stream: up to the next
 * multiple of STREAM_CHUNK past `at`, at most left bytes. */
static size_t piece(uint64_t at, uint64_t done, uint64_t left) {
    size_t k = STREAM_CHUNK - (size_t)((at + done) % STREAM_CHUNK);
    return left < k ? (size_t)left : k;
}

int ckpt_tensor_stream_at(const ckpt_tensor *t, uint64_t at, ckpt_tensor_sink sink, void *ctx) {
    if (t->nbytes == 0) return 0;
    const ckpt_storage *st = t->storage;
    int resolved = ckpt_storage_resolve(st);
    if (resolved) return resolved;
    if (!st->chunks && ckpt_tensor_is_contiguous(t) &&
        !ckpt_source_is_file(st->source, st->data, st->nbytes)) {
        const void *p;
        size_t size;
        int rc = ckpt_tensor_data(t, &p, &size); /* memory, not a mapping */
        for (size_t done = 0, k; rc == 0 && done < size; done += k) {
            k = piece(at, done, size - done);
            rc = sink(ctx, (const uint8_t *)p + done, k);
        }
        return rc;
    }
    ckpt_tensor_reader r;
    int rc = ckpt_tensor_reader_init(&r, t);
    if (rc) return rc;
    /* no bigger than the tensor: a million small tensors must not map and
     * unmap a million chunks (whole elements fit: nbytes >= one element) */
    size_t chunk = t->nbytes < STREAM_CHUNK ? (size_t)t->nbytes : STREAM_CHUNK;
    uint8_t *buf = ckpt_malloc(chunk);
    if (!buf) rc = ckpt_err_nomem();
    if (rc == 0 && r.contiguous && !st->chunks)
        ckpt_source_will_read(
            st->source, st->data + t->storage_offset * ckpt_dtype_bits(t->dtype) / 8, t->nbytes);
    size_t got;
    /* contiguous bytes in pieces that end on the sink's grid; gathered
     * views in whole elements */
    while (rc == 0 &&
           (rc = ckpt_tensor_reader_next(
                &r, buf, r.contiguous ? piece(at, r.done, t->nbytes - r.done) : chunk, &got)) ==
               0 &&
           got)
        rc = sink(ctx, buf, got);
    ckpt_free(buf);
    ckpt_tensor_reader_free(&r);
    return rc;
}

int ckpt_storage_check(const ckpt_storage *st, uint32_t crc, uint64_t xxh) {
    const char *member = st->member ? st->member : "";
    const char *path = st->source ? st->source->path : "";
    if (st->has_crc32 && crc != st->crc32)
        return ckpt_err(CKPT_E_CHECKSUM, path, member, st->file_offset,
                        "CRC-32 of the data of %s is 0x%08" PRIx32
                        ", the central directory says 0x%08" PRIx32
                        ": the input is corrupt, nothing was written",
                        member, crc, st->crc32);
    if (st->has_xxh3 && xxh != st->xxh3) {
        char got[17], want[17];
        const char *key = st->key ? st->key : "";
        ckpt_hex64(got, xxh);
        ckpt_hex64(want, st->xxh3);
        return ckpt_err(CKPT_E_CHECKSUM, path, member, st->file_offset,
                        "XXH3-64 of the contents of %s%s%s is %s, the file records %s "
                        "(\"ckpt.xxh3\"): the input is corrupt, nothing was written",
                        member[0] ? "" : "tensor \"", member[0] ? member : key,
                        member[0] ? "" : "\"", got, want);
    }
    return 0;
}

typedef struct sums {
    uint32_t crc;
    XXH3_state_t xxh;
} sums;

static int sums_sink(void *ctx, const void *p, size_t n) {
    sums *s = ctx;
    s->crc = (uint32_t)libdeflate_crc32(s->crc, p, n);
    ckpt_xxh3_update(&s->xxh, p, n);
    return 0;
}

void ckpt_storage_whole(ckpt_tensor *t, const ckpt_storage *st, ckpt_dtype dt, uint64_t *shape,
                        uint64_t *stride) {
    *shape = st->nbytes / ckpt_dtype_size(dt);
    *stride = 1;
    *t = (ckpt_tensor){.name = "",
                       .dtype = dt,
                       .ndim = 1,
                       .shape = shape,
                       .stride = stride,
                       .numel = *shape,
                       .nbytes = st->nbytes,
                       .storage = (ckpt_storage *)st};
}

int ckpt_storage_verify(const ckpt_storage *st) {
    if (!st->has_crc32 && !st->has_xxh3) return 0;
    uint64_t shape, stride;
    ckpt_tensor whole;
    ckpt_storage_whole(&whole, st, CKPT_DT_U8, &shape, &stride);
    sums s;
    memset(&s, 0, sizeof s);
    ckpt_xxh3_reset(&s.xxh);
    int rc = ckpt_tensor_stream(&whole, sums_sink, &s);
    return rc ? rc : ckpt_storage_check(st, s.crc, ckpt_xxh3_digest(&s.xxh));
}

static int xxh_sink(void *ctx, const void *p, size_t n) {
    ckpt_xxh3_update(ctx, p, n);
    return 0;
}

int ckpt_tensor_xxh3(const ckpt_tensor *t, uint64_t *out) {
    XXH3_state_t st;
    memset(&st, 0, sizeof st);
    ckpt_xxh3_reset(&st);
    int rc = ckpt_tensor_stream(t, xxh_sink, &st);
    if (rc) return rc;
    *out = ckpt_xxh3_digest(&st);
    return 0;
}

static int sha_sink(void *ctx, const void *p, size_t n) {
    return EVP_DigestUpdate(ctx, p, n) ? 0 : ckpt_err_nomem();
}

int ckpt_tensor_sha256(const ckpt_tensor *t, unsigned char out[32]) {
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (!ctx || !EVP_DigestInit_ex(ctx, EVP_sha256(), NULL)) {
        EVP_MD_CTX_free(ctx);
        return ckpt_err(CKPT_E_NOMEM, "", ckpt_tensor_name(t), CKPT_NO_OFFSET,
                        "SHA-256 failed (out of memory)");
    }
    int rc = ckpt_tensor_stream(t, sha_sink, ctx);
    unsigned int len = 0;
    if (rc == 0 && !(EVP_DigestFinal_ex(ctx, out, &len) && len == 32))
        rc = ckpt_err(CKPT_E_NOMEM, "", ckpt_tensor_name(t), CKPT_NO_OFFSET,
                      "SHA-256 failed (out of memory)");
    EVP_MD_CTX_free(ctx);
    return rc;
}
