/* tensor.c - tensor accessors: shape, zero-copy data, gathered reads and
 * SHA-256 of the logical contents. */
#include <openssl/evp.h>
#include <string.h>

#include "model/dtype.h"
#include "base/error.h"
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

void ckpt_tensor_gather(const ckpt_tensor *t, uint64_t start, uint64_t count, uint8_t *dst) {
    unsigned esz = ckpt_dtype_size(t->dtype);
    /* complex elements swap per component */
    unsigned swap = t->storage->big_endian ? esz : 1;
    if (t->dtype == CKPT_DT_C32 || t->dtype == CKPT_DT_C64 || t->dtype == CKPT_DT_C128)
        swap = t->storage->big_endian ? esz / 2 : 1;
    uint64_t idx[CKPT_MAX_NDIM];
    uint64_t rem = start, pos = t->storage_offset;
    for (uint32_t i = t->ndim; i-- > 0;) {
        idx[i] = rem % t->shape[i];
        rem /= t->shape[i];
        pos += idx[i] * t->stride[i];
    }
    const uint8_t *src = t->storage->data;
    for (uint64_t n = 0; n < count; n++) {
        const uint8_t *e = src + pos * esz;
        if (swap > 1) {
            for (unsigned c = 0; c < esz; c += swap)
                for (unsigned b = 0; b < swap; b++) dst[c + b] = e[c + swap - 1 - b];
        } else {
            memcpy(dst, e, esz);
        }
        dst += esz;
        /* advance the multi-index */
        for (uint32_t i = t->ndim; i-- > 0;) {
            if (++idx[i] < t->shape[i]) {
                pos += t->stride[i];
                break;
            }
            pos -= (t->shape[i] - 1) * t->stride[i];
            idx[i] = 0;
        }
    }
}

int ckpt_tensor_read(const ckpt_tensor *t, void *dst, size_t cap) {
    if (cap < t->nbytes)
        return ckpt_err(CKPT_E_INVALID_ARG, "", ckpt_tensor_name(t), CKPT_NO_OFFSET,
                        "buffer of %zu bytes, tensor needs %llu", cap,
                        (unsigned long long)t->nbytes);
    const void *p;
    size_t n;
    if (ckpt_tensor_is_contiguous(t)) {
        if (ckpt_tensor_data(t, &p, &n)) return CKPT_E_LIMIT;
        if (n) memcpy(dst, p, n);
        return 0;
    }
    if (ckpt_dtype_size(t->dtype) == 0)
        return ckpt_err(CKPT_E_UNSUPPORTED, "", ckpt_tensor_name(t), CKPT_NO_OFFSET,
                        "non-contiguous view of a sub-byte dtype");
    ckpt_tensor_gather(t, 0, t->numel, dst);
    return 0;
}

#define SHA_CHUNK (1u << 20)

int ckpt_tensor_sha256(const ckpt_tensor *t, unsigned char out[32]) {
    int contiguous = ckpt_tensor_is_contiguous(t);
    unsigned esz = ckpt_dtype_size(t->dtype);
    if (!contiguous && esz == 0)
        return ckpt_err(CKPT_E_UNSUPPORTED, "", ckpt_tensor_name(t), CKPT_NO_OFFSET,
                        "non-contiguous view of a sub-byte dtype");
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    uint8_t *buf = NULL;
    int ok = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
    if (ok && contiguous) {
        const void *p = NULL;
        size_t size = 0;
        ok = ckpt_tensor_data(t, &p, &size) == 0;
        for (size_t done = 0; ok && done < size; done += SHA_CHUNK) {
            size_t n = size - done < SHA_CHUNK ? size - done : SHA_CHUNK;
            ok = EVP_DigestUpdate(ctx, (const uint8_t *)p + done, n);
        }
    } else if (ok) {
        buf = ckpt_malloc(SHA_CHUNK);
        ok = buf != NULL;
        uint64_t per = SHA_CHUNK / esz;
        for (uint64_t e = 0; ok && e < t->numel; e += per) {
            uint64_t n = t->numel - e < per ? t->numel - e : per;
            ckpt_tensor_gather(t, e, n, buf);
            ok = EVP_DigestUpdate(ctx, buf, (size_t)(n * esz));
        }
    }
    unsigned int len = 0;
    ok = ok && EVP_DigestFinal_ex(ctx, out, &len) && len == 32;
    ckpt_free(buf);
    EVP_MD_CTX_free(ctx);
    if (!ok)
        return ckpt_err(CKPT_E_NOMEM, "", ckpt_tensor_name(t), CKPT_NO_OFFSET,
                        "SHA-256 failed (out of memory)");
    return 0;
}
