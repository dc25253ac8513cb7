/* tensor.h - reading a tensor's logical contents: the one path every job
 * (verify, hashes, diff, convert, ckpt_tensor_read, Python's load) reads
 * tensor bytes through. Bytes in a file are copied with pread into private
 * buffers (source.h), never read through the mapping, so a file that
 * shrinks while it is read is an error, not SIGBUS. */
#ifndef CKPT_TENSOR_H
#define CKPT_TENSOR_H

#include "model/value.h"

/* Copies n bytes of st from byte `off` (off + n <= st->nbytes) into dst,
 * through st->source. 0, or CKPT_E_TRUNCATED / CKPT_E_IO (source.h). */
int ckpt_storage_read(const ckpt_storage *st, uint64_t off, void *dst, size_t n);

/* Makes st->data valid: inflates a deflated member on first use (charged
 * to its file's inflate budget; CKPT_E_LIMIT once that is spent). Every
 * reader of st->data calls it first; ckpt_storage_read and the tensor
 * readers do. Not thread-safe for one file (a file is used by one thread
 * at a time). 0 or the inflation's error. */
int ckpt_storage_resolve(const ckpt_storage *st);

/* Reads t's logical contents (contiguous row-major little-endian, what
 * ckpt_tensor_read produces) front to back in pieces:
 *
 *     ckpt_tensor_reader r;
 *     int rc = ckpt_tensor_reader_init(&r, t);
 *     size_t got;
 *     while (rc == 0 && (rc = ckpt_tensor_reader_next(&r, buf, cap, &got)) == 0 && got)
 *         use(buf, got);
 *     ckpt_tensor_reader_free(&r);
 *
 * A contiguous tensor is read straight into dst (one pread per call). A
 * strided view or big-endian storage is gathered element by element from
 * a private copy of the storage bytes it spans when those are at most 64
 * MiB (read once), else from one pread per contiguous run of elements.
 * Memory stays bounded by that span, whatever the tensor size. */
typedef struct ckpt_tensor_reader {
    const ckpt_tensor *t;
    uint64_t done; /* logical bytes (contiguous) or elements handed out */
    int contiguous;
    uint8_t *span; /* gathered views: storage bytes [span_lo, ...) */
    uint64_t span_lo;
    int runs; /* gathered views too large to copy: pread per run */
} ckpt_tensor_reader;

/* 0, or CKPT_E_UNSUPPORTED (a non-contiguous view of a sub-byte dtype). */
int ckpt_tensor_reader_init(ckpt_tensor_reader *r, const ckpt_tensor *t);
/* Up to cap bytes into dst (whole elements for gathered views; cap must
 * hold one); *got 0 at the end. 0, CKPT_E_TRUNCATED, CKPT_E_IO,
 * CKPT_E_NOMEM, CKPT_E_INVALID_ARG (cap below one element). */
int ckpt_tensor_reader_next(ckpt_tensor_reader *r, void *dst, size_t cap, size_t *got);
/* NULL-safe on a zeroed reader. */
void ckpt_tensor_reader_free(ckpt_tensor_reader *r);

/* Streams t's logical contents to sink in bounded pieces (memory that is
 * not a file is handed to the sink directly). Returns 0, the sink's code,
 * or an error of the reader. */
typedef int (*ckpt_tensor_sink)(void *ctx, const void *p, size_t n);
int ckpt_tensor_stream(const ckpt_tensor *t, ckpt_tensor_sink sink, void *ctx);
/* Same, for a sink that writes the bytes at offset `at` of a file: the
 * pieces of a contiguous tensor end where that file's offset is a multiple
 * of the piece size, so that every write but the first and last covers a
 * whole aligned window of the file (container/atomic.h's grid; pieces
 * that straddle it cost a 64 MiB convert 15% more CPU time). */
int ckpt_tensor_stream_at(const ckpt_tensor *t, uint64_t at, ckpt_tensor_sink sink, void *ctx);

/* A 1-D tensor t over the whole of st: elements of dt, whose size divides
 * st->nbytes (U8 for its bytes as they lie); shape and stride are the
 * caller's words, which t points at. */
void ckpt_storage_whole(ckpt_tensor *t, const ckpt_storage *st, ckpt_dtype dt, uint64_t *shape,
                        uint64_t *stride);

/* Source verification for writers. crc, xxh: the CRC-32 and XXH3-64 of
 * st's bytes, all of them in order as the input holds them (a
 * little-endian storage read whole); 0 when they are the ones recorded
 * (or none is), else CKPT_E_CHECKSUM naming the file, the member and its
 * offset. */
int ckpt_storage_check(const ckpt_storage *st, uint32_t crc, uint64_t xxh);
/* Reads st's bytes whole (pread, bounded windows) and checks them so: for
 * a storage a writer does not read whole in order. 0 when nothing is
 * recorded, else ckpt_storage_check's answer or the read's error. */
int ckpt_storage_verify(const ckpt_storage *st);

/* XXH3-64 of t's logical contents (the "ckpt.xxh3" digest). */
int ckpt_tensor_xxh3(const ckpt_tensor *t, uint64_t *out);

#endif
