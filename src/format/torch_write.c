/* write_torch.c - a ckpt_value tree as a torch.save zip archive that
 * torch.load reads back, also with weights_only=True (FORMATS.md §2.2-2.6).
 *
 * data.pkl is pickle protocol 2 made only of opcodes the weights_only
 * unpickler accepts (PROTO, STOP, GLOBAL, REDUCE, MARK, TUPLE*, EMPTY_*,
 * APPEND(S), SETITEM(S), BININT*, LONG1, BINFLOAT, BINUNICODE, NONE,
 * NEWTRUE, NEWFALSE, BINPERSID, BINPUT/LONG_BINPUT, BINGET/LONG_BINGET,
 * BUILD) and only globals on its allowlist: torch._utils.
 * _rebuild_tensor_v2, _v3 and _rebuild_parameter, collections.OrderedDict
 * (state dicts, the empty backward hooks) and Counter, storage classes
 * (torch.FloatStorage..., torch.storage.UntypedStorage), torch dtypes, and for
 * bytes and sets _codecs.encode and builtins.set. Tensors are written the
 * way torch.save writes them: `_rebuild_tensor_v2(storage, offset, size,
 * stride, requires_grad, OrderedDict())`, and `_rebuild_tensor_v3(...,
 * dtype)` on an UntypedStorage for the dtypes torch stores untyped (uint16,
 * uint32, uint64, complex32, float8_*); parameters as
 * `_rebuild_parameter(tensor, requires_grad, OrderedDict())`; a state
 * dict as `OrderedDict()` + SETITEMS + BUILD {'_metadata': ...}, as
 * torch.save writes Module.state_dict(). A node reached twice is pickled once
 * and fetched from the memo (tied weights stay one object); tensors sharing
 * a storage share its record, views keep their offset and strides.
 * Values read from numpy objects are written as numpy pickles them
 * (numpy.core.multiarray._reconstruct + BUILD for an array, its bytes in
 * the pickle; numpy.core.multiarray.scalar for a scalar; numpy.dtype),
 * so torch.load gives numpy back (weights_only refuses numpy globals
 * unless allowed with torch.serialization.safe_globals); frozensets as
 * builtins.frozenset; a torch.device, torch.Size or bytearray as a call
 * of its class (torch 1.13's weights_only refuses the device and the
 * bytearray, as it does the files torch.save writes).
 *
 * The archive: every record stored (not compressed) under "<name>/", name
 * being the target's file name without extension as torch does, data
 * 64-byte aligned through a "FB" padding extra field; records data.pkl,
 * byteorder ("little"), data/<key> (keys "0", "1"... in order of first
 * use), extra/ckpt_meta.json (ckpt's metadata and per-tensor XXH3-64
 * digests; torch ignores it), version ("3\n"); ZIP64 end records as torch
 * writes them. Sizes and CRCs are in the local headers (no data
 * descriptors): the CRC is patched in once the record is streamed. */
#include <inttypes.h>
#include <libdeflate.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/dtype.h"
#include "base/error.h"
#include "base/utf8.h"
#include "base/xxh.h"
#include "format/pickle_write.h"
#include "format/write.h"
#include "model/walk.h"

#define ALIGNMENT 64
#define ZIP64_LIMIT 0xFFFFFFFFu
/* pickle.py batches APPENDS/SETITEMS by this many items */
#define BATCH 1000

/* ------------------------------------------------------------ dtypes */

/* The legacy storage class of a dtype written with _rebuild_tensor_v2. */
static const char *storage_class(ckpt_dtype dt) {
    switch (dt) {
    case CKPT_DT_F64: return "DoubleStorage";
    case CKPT_DT_F32: return "FloatStorage";
    case CKPT_DT_F16: return "HalfStorage";
    case CKPT_DT_I64: return "LongStorage";
    case CKPT_DT_I32: return "IntStorage";
    case CKPT_DT_I16: return "ShortStorage";
    case CKPT_DT_I8: return "CharStorage";
    case CKPT_DT_U8: return "ByteStorage";
    case CKPT_DT_BOOL: return "BoolStorage";
    case CKPT_DT_BF16: return "BFloat16Storage";
    case CKPT_DT_C128: return "ComplexDoubleStorage";
    case CKPT_DT_C64: return "ComplexFloatStorage";
    default: return NULL;
    }
}

/* The torch dtype of a dtype torch.save stores untyped (_new_dtypes: the
 * uint, float8, float4, complex32 and bits dtypes); NULL for those with a
 * storage class and for quantized ones (torch writes those through
 * _rebuild_qtensor, which ckpt does not write). */
static const char *untyped_dtype(ckpt_dtype dt) {
    switch (dt) {
    case CKPT_DT_QI8:
    case CKPT_DT_QU8:
    case CKPT_DT_QI32:
    case CKPT_DT_QU4X2:
    case CKPT_DT_QU2X4: return NULL;
    case CKPT_DT_F4: return ckpt_dtype_torch_name(CKPT_DT_F4_X2); /* pairs: f4_pairs */
    default: return storage_class(dt) ? NULL : ckpt_dtype_torch_name(dt);
    }
}

/* An F4 view (safetensors' 4-bit elements) as torch holds it:
 * float4_e2m1fn_x2, one element a byte of two F4 values, the last
 * dimension halved (safetensors' torch loader). Needs an even, unit-stride
 * last dimension, even strides and an even offset; else an error. */
static int f4_pairs(const ckpt_tensor *t, const char *name, uint64_t *off, uint64_t *shape,
                    uint64_t *stride) {
    uint32_t n = t->ndim;
    int ok = n > 0 && t->shape[n - 1] % 2 == 0 && *off % 2 == 0 &&
             (t->shape[n - 1] == 0 || stride[n - 1] == 1);
    for (uint32_t i = 0; ok && i + 1 < n; i++) ok = stride[i] % 2 == 0;
    if (!ok)
        return ckpt_err(CKPT_E_UNSUPPORTED, "", "", CKPT_NO_OFFSET,
                        "tensor \"%s\": an F4 view is written as torch.float4_e2m1fn_x2 "
                        "(two F4 values a byte), which needs an even, contiguous last "
                        "dimension",
                        name);
    for (uint32_t i = 0; i < n; i++) {
        shape[i] = i + 1 == n ? t->shape[i] / 2 : t->shape[i];
        stride[i] = i + 1 == n ? 1 : stride[i] / 2;
    }
    *off /= 2;
    return 0;
}

/* ------------------------------------------------------------ state */

typedef struct storage_rec {
    const ckpt_storage *root;
    ckpt_dtype dtype;        /* of the tensors viewing it */
    uint64_t xxh;            /* XXH3-64 of the bytes written */
    const ckpt_tensor *copy; /* clone mode: the tensor whose contents this
                                record holds (a contiguous copy), or NULL */
} storage_rec;

typedef struct zip_rec {
    char *name;
    uint64_t local; /* local header offset */
    uint64_t size;
    uint32_t crc;
} zip_rec;

typedef struct pt_writer {
    ckpt_pkw pk;
    ckpt_ptrmap memo_of;    /* node -> memo index */
    ckpt_ptrmap storage_of; /* root storage -> index + 1 */
    storage_rec *storages;
    size_t nstorages, capstorages;
    zip_rec *recs;
    size_t nrecs, caprecs;
    char *prefix; /* "<archive>/" */
    ckpt_atomic *a;
    uint64_t base;        /* where the archive starts in a: its offsets are relative */
    int clone;            /* tensors not covering their storage are written as copies */
    ckpt_ptrmap verified; /* input storages checked against their sums */
} pt_writer;

/* ------------------------------------------------------------ numpy */

/* IEEE half bits of a double that came from a half (numpy float16
 * scalars): exact for every such value, NaN payloads kept. */
static uint16_t half_bits(double d) {
    uint64_t b;
    memcpy(&b, &d, sizeof b);
    uint16_t sign = (uint16_t)((b >> 48) & 0x8000);
    int e = (int)((b >> 52) & 0x7FF);
    uint64_t mant = b & (((uint64_t)1 << 52) - 1);
    if (e == 0x7FF) return (uint16_t)(sign | 0x7C00 | (mant ? (mant >> 42) | 0x200 : 0));
    if (e == 0) return sign; /* zero: double subnormals are below half's range */
    int he = e - 1023 + 15;
    if (he >= 0x1F) return (uint16_t)(sign | 0x7C00);
    if (he <= 0) { /* a half subnormal */
        int shift = 43 - he;
        return (uint16_t)(sign | (shift < 64 ? (mant | (uint64_t)1 << 52) >> shift : 0));
    }
    return (uint16_t)(sign | (uint16_t)(he << 10) | (uint16_t)(mant >> 42));
}

/* numpy.dtype(code, False, True) with the BUILD state numpy gives it:
 * (3, byteorder, None, None, None, -1, -1, 0), byteorder '|' for one-byte
 * types, '<' otherwise (ckpt reads elements as little-endian). */
static int put_np_dtype(pt_writer *w, ckpt_dtype dt) {
    const char *code = ckpt_dtype_numpy_code(dt);
    if (!code)
        return ckpt_err(CKPT_E_UNSUPPORTED, "", "", CKPT_NO_OFFSET, "numpy has no dtype %s",
                        ckpt_dtype_name(dt));
    ckpt_pkw_global(&w->pk, "numpy", "dtype");
    ckpt_pkw_str(&w->pk, code, strlen(code));
    ckpt_pkw_op(&w->pk, 0x89);
    ckpt_pkw_op(&w->pk, 0x88);
    ckpt_pkw_op(&w->pk, 0x87);
    ckpt_pkw_op(&w->pk, 'R');
    ckpt_pkw_op(&w->pk, '(');
    ckpt_pkw_int(&w->pk, 3);
    ckpt_pkw_str(&w->pk, ckpt_dtype_size(dt) == 1 ? "|" : "<", 1);
    ckpt_pkw_op(&w->pk, 'N');
    ckpt_pkw_op(&w->pk, 'N');
    ckpt_pkw_op(&w->pk, 'N');
    ckpt_pkw_int(&w->pk, -1);
    ckpt_pkw_int(&w->pk, -1);
    ckpt_pkw_int(&w->pk, 0);
    ckpt_pkw_op(&w->pk, 't');
    ckpt_pkw_op(&w->pk, 'b');
    return 0;
}

/* A numpy scalar: numpy.core.multiarray.scalar(dtype, element bytes). */
static int put_np_scalar(pt_writer *w, const ckpt_value *v) {
    ckpt_dtype dt = (ckpt_dtype)v->np_dtype;
    unsigned size = ckpt_dtype_size(dt);
    uint64_t u = 0;
    if (v->kind == CKPT_KIND_BOOL) {
        u = v->u.b != 0;
    } else if (v->kind == CKPT_KIND_INT) { /* numpy ints fit 64 bits */
        u = v->u.i.decimal ? strtoull(v->u.i.decimal, NULL, 10) : (uint64_t)v->u.i.v;
    } else if (dt == CKPT_DT_F16) {
        u = half_bits(v->u.f);
    } else if (dt == CKPT_DT_F32) {
        float f = (float)v->u.f;
        uint32_t x;
        memcpy(&x, &f, sizeof x);
        u = x;
    } else {
        memcpy(&u, &v->u.f, sizeof u);
    }
    uint8_t le[8];
    for (unsigned i = 0; i < 8; i++) le[i] = (uint8_t)(u >> (8 * i));
    ckpt_pkw_global(&w->pk, "numpy.core.multiarray", "scalar");
    int rc = put_np_dtype(w, dt);
    if (!rc) rc = ckpt_pkw_bytes(&w->pk, le, size > 8 ? 8 : size);
    if (rc) return rc;
    ckpt_pkw_op(&w->pk, 0x86);
    ckpt_pkw_op(&w->pk, 'R');
    return 0;
}

/* A numpy array as ndarray.__reduce__ gives it: _reconstruct(ndarray,
 * (0,), b'b') then BUILD (1, shape, dtype, is_fortran, raw bytes), the
 * bytes in C order, or in Fortran order for a Fortran-strided array (read
 * through the reversed view, whose row-major order that is). */
static int put_np_array(pt_writer *w, const ckpt_tensor *t) {
    ckpt_tensor rev = *t;
    uint64_t shape[CKPT_MAX_NDIM], stride[CKPT_MAX_NDIM], step = 1;
    int fortran = t->ndim > 1 && !ckpt_tensor_is_contiguous(t);
    for (uint32_t i = 0; fortran && i < t->ndim; i++) {
        fortran = t->stride[i] == step;
        step *= t->shape[i];
        shape[i] = t->shape[t->ndim - 1 - i];
        stride[i] = t->stride[t->ndim - 1 - i];
    }
    if (fortran) {
        rev.shape = shape;
        rev.stride = stride;
    }
    ckpt_pkw_global(&w->pk, "numpy.core.multiarray", "_reconstruct");
    ckpt_pkw_global(&w->pk, "numpy", "ndarray");
    ckpt_pkw_int(&w->pk, 0);
    ckpt_pkw_op(&w->pk, 0x85);
    int rc = ckpt_pkw_bytes(&w->pk, (const uint8_t *)"b", 1);
    if (rc) return rc;
    ckpt_pkw_op(&w->pk, 0x87);
    ckpt_pkw_op(&w->pk, 'R');
    ckpt_pkw_op(&w->pk, '(');
    ckpt_pkw_int(&w->pk, 1);
    ckpt_pkw_dims(&w->pk, t->shape, t->ndim);
    if ((rc = put_np_dtype(w, t->dtype))) return rc;
    ckpt_pkw_op(&w->pk, fortran ? 0x88 : 0x89);
    uint8_t *raw = ckpt_malloc(t->nbytes ? (size_t)t->nbytes : 1);
    if (!raw) return ckpt_err_nomem();
    rc = ckpt_tensor_read(&rev, raw, (size_t)t->nbytes);
    if (!rc) rc = ckpt_pkw_bytes(&w->pk, raw, (size_t)t->nbytes);
    ckpt_free(raw);
    if (rc) return rc;
    ckpt_pkw_op(&w->pk, 't');
    ckpt_pkw_op(&w->pk, 'b');
    return 0;
}

/* What torch can save, checked by flattened name before anything is
 * pickled: a dtype it has, and one dtype per storage whose size is a
 * whole number of its elements (torch.save refuses "multiple tensors
 * ... that view the same data as different types"). */
static int check_tensors(const wr_named *tensors, size_t n) {
    ckpt_ptrmap dtype_of = {0};
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        const ckpt_tensor *t = tensors[i].value->u.tensor;
        const char *name = tensors[i].name;
        uint64_t off, have;
        const ckpt_storage *root = ckpt_wr_root_storage(t, &off);
        if (t->is_numpy) continue; /* its bytes go into the pickle */
        if (!storage_class(t->dtype) && !untyped_dtype(t->dtype))
            rc = ckpt_err(CKPT_E_UNSUPPORTED, "", "", CKPT_NO_OFFSET,
                          "tensor \"%s\": dtype %s cannot be written to a torch "
                          "archive",
                          name, ckpt_dtype_name(t->dtype));
        else if (ckpt_ptrmap_get(&dtype_of, root, &have) && have != (uint64_t)t->dtype)
            rc = ckpt_err(CKPT_E_UNSUPPORTED, "", "", CKPT_NO_OFFSET,
                          "tensor \"%s\": its storage is also viewed as %s, and "
                          "torch cannot save one storage as two dtypes (%s)",
                          name, ckpt_dtype_name((ckpt_dtype)have), ckpt_dtype_name(t->dtype));
        else if (!untyped_dtype(t->dtype) && root->nbytes % ckpt_dtype_size(t->dtype))
            rc = ckpt_err(CKPT_E_UNSUPPORTED, "", "", CKPT_NO_OFFSET,
                          "tensor \"%s\": its storage of %" PRIu64 " bytes is not a "
                          "whole number of %s elements",
                          name, root->nbytes, ckpt_dtype_name(t->dtype));
        else
            rc = ckpt_ptrmap_put(&dtype_of, root, (uint64_t)t->dtype);
    }
    ckpt_ptrmap_free(&dtype_of);
    return rc;
}

/* The storage record of a root storage, keyed "0", "1"... in order of
 * first use, as torch.save numbers them. */
static int storage_for(pt_writer *w, const ckpt_tensor *t, const ckpt_storage *root,
                       size_t *index) {
    uint64_t idx;
    if (ckpt_ptrmap_get(&w->storage_of, root, &idx)) {
        *index = (size_t)idx - 1;
        return 0;
    }
    if (w->nstorages == w->capstorages) {
        size_t cap = w->capstorages ? w->capstorages * 2 : 16;
        storage_rec *n = ckpt_realloc(w->storages, cap * sizeof *n);
        if (!n) return ckpt_err_nomem();
        w->storages = n;
        w->capstorages = cap;
    }
    w->storages[w->nstorages] = (storage_rec){root, t->dtype, 0, NULL};
    *index = w->nstorages++;
    return ckpt_ptrmap_put(&w->storage_of, root, *index + 1);
}

/* torch._utils._rebuild_tensor_v2/_v3(storage, offset, size, stride,
 * requires_grad, OrderedDict()[, dtype]); check_tensors vouched for the
 * dtype and the storage. */
/* Clone mode: t gets a storage record of its own holding its contents
 * contiguously (offset 0, row-major strides in *stride), keyed by t. */
static int copy_for(pt_writer *w, const ckpt_tensor *t, uint64_t *stride, size_t *index) {
    uint64_t step = 1;
    for (uint32_t d = t->ndim; d-- > 0;) {
        stride[d] = step;
        step *= t->shape[d];
    }
    int rc = storage_for(w, t, (const ckpt_storage *)(const void *)t, index);
    if (rc == 0) w->storages[*index].copy = t;
    return rc;
}

static int put_tensor(pt_writer *w, const ckpt_tensor *t, int requires_grad) {
    const char *cls = storage_class(t->dtype), *dt = untyped_dtype(t->dtype);
    uint64_t off, copy_stride[CKPT_MAX_NDIM];
    const ckpt_storage *root = ckpt_wr_root_storage(t, &off);
    const uint64_t *stride = t->stride;
    uint64_t nbytes = root->nbytes;
    size_t si = 0;
    int rc;
    if (w->clone && root->nbytes != t->nbytes) { /* DCP's rule (_SerialCpuLoader) */
        rc = copy_for(w, t, copy_stride, &si);
        off = 0;
        stride = copy_stride;
        nbytes = t->nbytes;
    } else {
        rc = storage_for(w, t, root, &si);
    }
    if (rc) return rc;
    uint64_t f4_shape[CKPT_MAX_NDIM], f4_stride[CKPT_MAX_NDIM];
    const uint64_t *shape = t->shape;
    if (t->dtype == CKPT_DT_F4) {
        memcpy(f4_stride, stride, t->ndim * sizeof *stride);
        if ((rc = f4_pairs(t, ckpt_tensor_name(t), &off, f4_shape, f4_stride))) return rc;
        shape = f4_shape;
        stride = f4_stride;
    }
    char key[24];
    snprintf(key, sizeof key, "%zu", si);
    ckpt_pkw_global(&w->pk, "torch._utils", dt ? "_rebuild_tensor_v3" : "_rebuild_tensor_v2");
    ckpt_pkw_op(&w->pk, '(');
    /* persistent id ('storage', type, key, location, numel) */
    ckpt_pkw_op(&w->pk, '(');
    ckpt_pkw_str(&w->pk, "storage", 7);
    /* torch.storage.UntypedStorage is the name torch.save writes and the
     * one weights_only allows (torch.UntypedStorage is refused) */
    ckpt_pkw_global(&w->pk, dt ? "torch.storage" : "torch", dt ? "UntypedStorage" : cls);
    ckpt_pkw_str(&w->pk, key, strlen(key));
    ckpt_pkw_str(&w->pk, "cpu", 3);
    ckpt_pkw_int(&w->pk, (int64_t)(dt ? nbytes : nbytes / ckpt_dtype_size(t->dtype)));
    ckpt_pkw_op(&w->pk, 't');
    ckpt_pkw_op(&w->pk, 'Q');
    ckpt_pkw_int(&w->pk, (int64_t)off);
    ckpt_pkw_dims(&w->pk, shape, t->ndim);
    ckpt_pkw_dims(&w->pk, stride, t->ndim);
    ckpt_pkw_op(&w->pk, requires_grad ? 0x88 : 0x89);
    ckpt_pkw_global(&w->pk, "collections", "OrderedDict");
    ckpt_pkw_op(&w->pk, ')');
    ckpt_pkw_op(&w->pk, 'R');
    if (dt) ckpt_pkw_global(&w->pk, "torch", dt);
    ckpt_pkw_op(&w->pk, 't');
    ckpt_pkw_op(&w->pk, 'R');
    return 0;
}

/* An nn.Parameter as Parameter.__reduce_ex__ gives it:
 * torch._utils._rebuild_parameter(data, requires_grad, OrderedDict()),
 * data being the tensor without requires_grad (what .data is). */
static int put_parameter(pt_writer *w, const ckpt_tensor *t) {
    ckpt_pkw_global(&w->pk, "torch._utils", "_rebuild_parameter");
    int rc = put_tensor(w, t, 0);
    if (rc) return rc;
    ckpt_pkw_op(&w->pk, t->requires_grad ? 0x88 : 0x89);
    ckpt_pkw_global(&w->pk, "collections", "OrderedDict");
    ckpt_pkw_op(&w->pk, ')');
    ckpt_pkw_op(&w->pk, 'R');
    ckpt_pkw_op(&w->pk, 0x87); /* TUPLE3 */
    ckpt_pkw_op(&w->pk, 'R');
    return 0;
}

/* The pickle of the tree, as pickle.py's save() writes it, one node at a
 * time (the walker's visit; the tree was checked by wr_collect: no opaque
 * values, no cycles). Items go in batches: MARK ... APPENDS / SETITEMS
 * for a batch of several, APPEND / SETITEM for one. A dict is EMPTY_DICT,
 * or for an OrderedDict (or Counter) `collections.<class>` REDUCE () as
 * OrderedDict.__reduce__ gives it (a Counter, whose own __reduce__ passes
 * a dict copy, is built the same way: Counter() then its items); then the
 * memo, the items and, when it has attributes, the state and BUILD:
 * torch.save's `{'_metadata': OrderedDict(...)}` BUILD of a state dict,
 * which weights_only loading allows. A set is builtins.set([items]); a
 * tuple its items then TUPLE1/2/3, or MARK items TUPLE (a torch.Size:
 * torch.Size, the tuple, TUPLE1 REDUCE). */

/* The global below the one argument on the stack, called: TUPLE1
 * REDUCE (torch.device(text), torch.Size(tuple), bytearray(bytes), as
 * their __reduce__ gives them). */
static void put_call1(pt_writer *w) {
    ckpt_pkw_op(&w->pk, 0x85);
    ckpt_pkw_op(&w->pk, 'R');
}

/* Item i of n opens a batch of several (MARK) / closes a batch. */
static int batch_opens(size_t i, size_t n) { return i % BATCH == 0 && n - i > 1; }
static int batch_closes(size_t i, size_t n, int *several) {
    size_t start = i - i % BATCH;
    *several = n - start > 1;
    return i + 1 == n || i % BATCH == BATCH - 1;
}

#define SAVED_OPEN 1u /* user: the node's own closing ops are due */

static int save_enter(ckpt_walk *ww, ckpt_walk_frame *node) {
    pt_writer *w = ww->ctx;
    const ckpt_walk_frame *up = ckpt_walk_up(ww, 1);
    const ckpt_value *v = node->value, *parent = up ? up->value : NULL;
    uint64_t m;
    int rc;
    if (w->pk.out.failed) return ckpt_err_nomem();
    if (node->role == CKPT_WALK_STATE && !ckpt_dict_class_name(parent->dict_class))
        return CKPT_WALK_SKIP; /* a plain dict's attributes are not saved */
    if ((node->role == CKPT_WALK_KEY ||
         (node->role == CKPT_WALK_ITEM && parent->kind != CKPT_KIND_TUPLE)) &&
        batch_opens(node->index,
                    parent->kind == CKPT_KIND_DICT ? parent->u.dict.n : parent->u.seq.n))
        ckpt_pkw_op(&w->pk, '(');
    if (v->np_dtype &&
        (v->kind == CKPT_KIND_BOOL || v->kind == CKPT_KIND_INT || v->kind == CKPT_KIND_FLOAT)) {
        rc = put_np_scalar(w, v);
        return rc ? rc : CKPT_WALK_PRUNE;
    }
    switch (v->kind) {
    case CKPT_KIND_NONE: ckpt_pkw_op(&w->pk, 'N'); return CKPT_WALK_PRUNE;
    case CKPT_KIND_BOOL: ckpt_pkw_op(&w->pk, v->u.b ? 0x88 : 0x89); return CKPT_WALK_PRUNE;
    case CKPT_KIND_INT:
        if (v->u.i.decimal) {
            rc = ckpt_pkw_bigint(&w->pk, v->u.i.decimal);
            return rc ? rc : CKPT_WALK_PRUNE;
        }
        ckpt_pkw_int(&w->pk, v->u.i.v);
        return CKPT_WALK_PRUNE;
    case CKPT_KIND_FLOAT: ckpt_pkw_float(&w->pk, v->u.f); return CKPT_WALK_PRUNE;
    case CKPT_KIND_STR:
        if (v->alt) ckpt_pkw_global(&w->pk, "torch", "device");
        rc = ckpt_pkw_str(&w->pk, v->u.s.p, v->u.s.len);
        if (v->alt) put_call1(w);
        return rc ? rc : CKPT_WALK_PRUNE;
    case CKPT_KIND_GLOBAL_:
        ckpt_pkw_global(&w->pk, "torch", ckpt_wr_dtype_ref(v));
        return CKPT_WALK_PRUNE;
    default: break;
    }
    if (ckpt_ptrmap_get(&w->memo_of, v, &m)) {
        ckpt_pkw_memo_get(&w->pk, m);
        return CKPT_WALK_PRUNE;
    }
    switch (v->kind) {
    case CKPT_KIND_BYTES: /* memoized as pickle does: a bytearray reached twice is one */
        if (v->alt) ckpt_pkw_global(&w->pk, "__builtin__", "bytearray");
        rc = ckpt_pkw_bytes(&w->pk, (const uint8_t *)v->u.s.p, v->u.s.len);
        if (v->alt) put_call1(w);
        if (rc || (rc = ckpt_ptrmap_put(&w->memo_of, v, w->pk.memo))) return rc;
        ckpt_pkw_memo_put(&w->pk);
        return CKPT_WALK_PRUNE;
    case CKPT_KIND_TENSOR:
        rc = v->u.tensor->is_numpy       ? put_np_array(w, v->u.tensor)
             : v->u.tensor->is_parameter ? put_parameter(w, v->u.tensor)
                                         : put_tensor(w, v->u.tensor, v->u.tensor->requires_grad);
        if (rc || (rc = ckpt_ptrmap_put(&w->memo_of, v, w->pk.memo))) return rc;
        ckpt_pkw_memo_put(&w->pk);
        return CKPT_WALK_PRUNE;
    case CKPT_KIND_DICT: {
        const char *cls = ckpt_dict_class_name(v->dict_class);
        if (cls) {
            ckpt_pkw_global(&w->pk, "collections", strchr(cls, '.') + 1);
            ckpt_pkw_op(&w->pk, ')');
            ckpt_pkw_op(&w->pk, 'R');
        } else {
            ckpt_pkw_op(&w->pk, '}');
        }
        break;
    }
    case CKPT_KIND_LIST: ckpt_pkw_op(&w->pk, ']'); break;
    case CKPT_KIND_SET:
        ckpt_pkw_global(&w->pk, "__builtin__", v->alt ? "frozenset" : "set");
        ckpt_pkw_op(&w->pk, ']');
        node->user = SAVED_OPEN;
        return CKPT_WALK_DESCEND;
    case CKPT_KIND_TUPLE:
        if (v->alt) ckpt_pkw_global(&w->pk, "torch", "Size");
        if (v->u.seq.n == 0) {
            ckpt_pkw_op(&w->pk, ')');
            if (v->alt) put_call1(w);
            return CKPT_WALK_PRUNE;
        }
        if (v->u.seq.n > 3) ckpt_pkw_op(&w->pk, '(');
        node->user = SAVED_OPEN;
        return CKPT_WALK_DESCEND;
    default:
        return ckpt_err(CKPT_E_UNSUPPORTED, "", "", CKPT_NO_OFFSET,
                        "cannot pickle a value of kind %d", v->kind);
    }
    /* a list or dict is memoized before its items, which may refer to it */
    if ((rc = ckpt_ptrmap_put(&w->memo_of, v, w->pk.memo))) return rc;
    ckpt_pkw_memo_put(&w->pk);
    return CKPT_WALK_DESCEND;
}

static int save_leave(ckpt_walk *ww, ckpt_walk_frame *node) {
    pt_writer *w = ww->ctx;
    const ckpt_walk_frame *up = ckpt_walk_up(ww, 1);
    const ckpt_value *v = node->value, *parent = up ? up->value : NULL;
    int rc, several;
    if (node->user & SAVED_OPEN) { /* a set or tuple, complete: memoized now */
        if (v->kind == CKPT_KIND_SET) {
            ckpt_pkw_op(&w->pk, 0x85);
            ckpt_pkw_op(&w->pk, 'R');
        } else {
            size_t n = v->u.seq.n;
            ckpt_pkw_op(&w->pk, n == 1 ? 0x85 : n == 2 ? 0x86 : n == 3 ? 0x87 : 't');
            if (v->alt) put_call1(w);
        }
        if ((rc = ckpt_ptrmap_put(&w->memo_of, v, w->pk.memo))) return rc;
        ckpt_pkw_memo_put(&w->pk);
    }
    if (node->role == CKPT_WALK_STATE) {
        ckpt_pkw_op(&w->pk, 'b');
    } else if (node->role == CKPT_WALK_VALUE &&
               batch_closes(node->index, parent->u.dict.n, &several)) {
        ckpt_pkw_op(&w->pk, several ? 'u' : 's');
    } else if (node->role == CKPT_WALK_ITEM && parent->kind != CKPT_KIND_TUPLE &&
               batch_closes(node->index, parent->u.seq.n, &several)) {
        ckpt_pkw_op(&w->pk, several ? 'e' : 'a');
    }
    return 0;
}

static int save(pt_writer *w, const ckpt_value *root) {
    ckpt_walk ww;
    ckpt_walk_init(&ww, NULL, "", "");
    ww.follow = CKPT_WALK_KEYS | CKPT_WALK_DICT_STATE;
    ww.enter = save_enter;
    ww.leave = save_leave;
    ww.ctx = w;
    return ckpt_walk_run(&ww, root);
}

/* ------------------------------------------------------------ zip */

static void u32le(ckpt_buf *b, uint32_t v) {
    uint8_t le[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    ckpt_buf_put(b, le, 4);
}

static void u16le(ckpt_buf *b, uint16_t v) {
    uint8_t le[2] = {(uint8_t)v, (uint8_t)(v >> 8)};
    ckpt_buf_put(b, le, 2);
}

static void u64le(ckpt_buf *b, uint64_t v) {
    for (int i = 0; i < 8; i++) ckpt_buf_byte(b, (uint8_t)(v >> (8 * i)));
}

/* DOS date 1980-01-01, time 00:00: fixed so that output is reproducible. */
#define DOS_DATE 0x0021
#define DOS_TIME 0

static int add_rec(pt_writer *w, const char *rel, uint64_t size, zip_rec **out) {
    if (w->nrecs == w->caprecs) {
        size_t cap = w->caprecs ? w->caprecs * 2 : 16;
        zip_rec *n = ckpt_realloc(w->recs, cap * sizeof *n);
        if (!n) return ckpt_err_nomem();
        w->recs = n;
        w->caprecs = cap;
    }
    size_t len = strlen(w->prefix) + strlen(rel) + 1;
    char *name = ckpt_malloc(len);
    if (!name) return ckpt_err_nomem();
    snprintf(name, len, "%s%s", w->prefix, rel);
    zip_rec *r = &w->recs[w->nrecs++];
    *r = (zip_rec){name, w->a->written - w->base, size, 0};
    *out = r;
    return 0;
}

/* Local header with the size, a zero CRC (patched later) and the FB
 * padding extra field that puts the data at a multiple of ALIGNMENT. */
static int begin_record(pt_writer *w, const char *rel, uint64_t size, zip_rec **out) {
    int rc = add_rec(w, rel, size, out);
    if (rc) return rc;
    zip_rec *r = *out;
    size_t nlen = strlen(r->name);
    int z64 = size >= ZIP64_LIMIT;
    ckpt_buf h = {0};
    u32le(&h, 0x04034b50);
    u16le(&h, z64 ? 45 : 20);
    u16le(&h, 0x0800); /* UTF-8 names */
    u16le(&h, 0);      /* stored */
    u16le(&h, DOS_TIME);
    u16le(&h, DOS_DATE);
    u32le(&h, 0);
    u32le(&h, z64 ? ZIP64_LIMIT : (uint32_t)size);
    u32le(&h, z64 ? ZIP64_LIMIT : (uint32_t)size);
    uint64_t start = r->local + 30 + nlen + (z64 ? 20 : 0) + 4;
    uint16_t pad = (uint16_t)((ALIGNMENT - start % ALIGNMENT) % ALIGNMENT);
    u16le(&h, (uint16_t)nlen);
    u16le(&h, (uint16_t)((z64 ? 20 : 0) + 4 + pad));
    ckpt_buf_put(&h, r->name, nlen);
    if (z64) {
        u16le(&h, 0x0001);
        u16le(&h, 16);
        u64le(&h, size);
        u64le(&h, size);
    }
    u16le(&h, 0x4246); /* "FB" */
    u16le(&h, pad);
    for (uint16_t i = 0; i < pad; i++) ckpt_buf_byte(&h, 'Z');
    rc = h.failed ? ckpt_err_nomem() : ckpt_atomic_write(w->a, h.p, h.len);
    ckpt_buf_free(&h);
    return rc;
}

static int end_record(pt_writer *w, const zip_rec *r) {
    uint8_t le[4] = {(uint8_t)r->crc, (uint8_t)(r->crc >> 8), (uint8_t)(r->crc >> 16),
                     (uint8_t)(r->crc >> 24)};
    return ckpt_atomic_pwrite(w->a, le, 4, w->base + r->local + 14);
}

static int small_record(pt_writer *w, const char *rel, const void *p, size_t n) {
    zip_rec *r = NULL;
    int rc = begin_record(w, rel, n, &r);
    if (rc) return rc;
    r->crc = (uint32_t)libdeflate_crc32(0, p, n);
    if ((rc = ckpt_atomic_write(w->a, p, n))) return rc;
    return end_record(w, r);
}

typedef struct crc_sink {
    ckpt_atomic *out;
    uint32_t crc;
    XXH3_state_t *xxh;
} crc_sink;

static int crc_write(void *ctx, const void *p, size_t n) {
    crc_sink *s = ctx;
    s->crc = (uint32_t)libdeflate_crc32(s->crc, p, n);
    ckpt_xxh3_update(s->xxh, p, n);
    return ckpt_atomic_write(s->out, p, n);
}

/* data/<key> holding a clone-mode copy: the tensor's logical contents. */
static int copy_record(pt_writer *w, size_t index) {
    storage_rec *s = &w->storages[index];
    char rel[32];
    snprintf(rel, sizeof rel, "data/%zu", index);
    zip_rec *r = NULL;
    int rc = begin_record(w, rel, s->copy->nbytes, &r);
    if (rc) return rc;
    XXH3_state_t xxh;
    memset(&xxh, 0, sizeof xxh);
    XXH3_64bits_reset(&xxh);
    crc_sink sink = {w->a, 0, &xxh};
    if ((rc = ckpt_tensor_stream_at(s->copy, w->a->written, crc_write, &sink))) return rc;
    uint64_t off; /* s->root is the copy's key, not a storage */
    if ((rc = ckpt_wr_verify_source(&w->verified, ckpt_wr_root_storage(s->copy, &off), 0, 0, 0)))
        return rc;
    r->crc = sink.crc;
    s->xxh = XXH3_64bits_digest(&xxh);
    return end_record(w, r);
}

/* data/<key>: the whole storage as little-endian bytes. Big-endian
 * storages are swapped per element of the dtype their tensors use. */
static int storage_record(pt_writer *w, size_t index) {
    storage_rec *s = &w->storages[index];
    const ckpt_storage *st = s->root;
    if (s->copy) return copy_record(w, index);
    unsigned esz = ckpt_dtype_size(s->dtype);
    int swap = st->big_endian && esz > 1;
    uint64_t shape, stride;
    ckpt_tensor whole;
    ckpt_storage_whole(&whole, st, swap ? s->dtype : CKPT_DT_U8, &shape, &stride);
    char rel[32];
    snprintf(rel, sizeof rel, "data/%zu", index);
    zip_rec *r = NULL;
    int rc = begin_record(w, rel, st->nbytes, &r);
    if (rc) return rc;
    XXH3_state_t xxh;
    memset(&xxh, 0, sizeof xxh);
    ckpt_xxh3_reset(&xxh);
    crc_sink sink = {w->a, 0, &xxh};
    if ((rc = ckpt_tensor_stream_at(&whole, w->a->written, crc_write, &sink))) return rc;
    /* the record holds the member's bytes unless they were swapped */
    s->xxh = ckpt_xxh3_digest(&xxh);
    if ((rc = ckpt_wr_verify_source(&w->verified, st, !swap, sink.crc, s->xxh))) return rc;
    r->crc = sink.crc;
    return end_record(w, r);
}

static int central_directory(pt_writer *w) {
    ckpt_buf b = {0};
    uint64_t cd_start = w->a->written - w->base;
    for (size_t i = 0; i < w->nrecs; i++) {
        const zip_rec *r = &w->recs[i];
        int zs = r->size >= ZIP64_LIMIT, zo = r->local >= ZIP64_LIMIT;
        uint16_t xlen = (uint16_t)((zs || zo) ? 4 + (zs ? 16 : 0) + (zo ? 8 : 0) : 0);
        size_t nlen = strlen(r->name);
        u32le(&b, 0x02014b50);
        u16le(&b, 0x031e); /* made by: unix, 3.0 (what torch writes) */
        u16le(&b, xlen ? 45 : 20);
        u16le(&b, 0x0800);
        u16le(&b, 0);
        u16le(&b, DOS_TIME);
        u16le(&b, DOS_DATE);
        u32le(&b, r->crc);
        u32le(&b, zs ? ZIP64_LIMIT : (uint32_t)r->size);
        u32le(&b, zs ? ZIP64_LIMIT : (uint32_t)r->size);
        u16le(&b, (uint16_t)nlen);
        u16le(&b, xlen);
        u16le(&b, 0); /* comment */
        u16le(&b, 0); /* disk */
        u16le(&b, 0); /* internal attributes */
        u32le(&b, 0); /* external attributes */
        u32le(&b, zo ? ZIP64_LIMIT : (uint32_t)r->local);
        ckpt_buf_put(&b, r->name, nlen);
        if (xlen) {
            u16le(&b, 0x0001);
            u16le(&b, (uint16_t)(xlen - 4));
            if (zs) {
                u64le(&b, r->size);
                u64le(&b, r->size);
            }
            if (zo) u64le(&b, r->local);
        }
    }
    uint64_t cd_size = b.len, eocd64 = cd_start + cd_size;
    uint64_t n = w->nrecs;
    /* ZIP64 end record and locator: torch writes them for every archive */
    u32le(&b, 0x06064b50);
    u64le(&b, 44);
    u16le(&b, 0x031e);
    u16le(&b, 45);
    u32le(&b, 0);
    u32le(&b, 0);
    u64le(&b, n);
    u64le(&b, n);
    u64le(&b, cd_size);
    u64le(&b, cd_start);
    u32le(&b, 0x07064b50);
    u32le(&b, 0);
    u64le(&b, eocd64);
    u32le(&b, 1);
    u32le(&b, 0x06054b50);
    u16le(&b, 0);
    u16le(&b, 0);
    u16le(&b, (uint16_t)(n < 0xFFFF ? n : 0xFFFF));
    u16le(&b, (uint16_t)(n < 0xFFFF ? n : 0xFFFF));
    u32le(&b, cd_size < ZIP64_LIMIT ? (uint32_t)cd_size : ZIP64_LIMIT);
    u32le(&b, cd_start < ZIP64_LIMIT ? (uint32_t)cd_start : ZIP64_LIMIT);
    u16le(&b, 0);
    int rc = b.failed ? ckpt_err_nomem() : ckpt_atomic_write(w->a, b.p, b.len);
    ckpt_buf_free(&b);
    return rc;
}

/* ------------------------------------------------------------ metadata */

/* The archive folder: the target's file name without its extension
 * (PyTorchStreamWriter's rule), or "archive" when that is empty or not
 * UTF-8. */
static int archive_prefix(pt_writer *w, const char *target, const char *archive) {
    const char *base = strrchr(target, '/');
    base = base ? base + 1 : target;
    const char *dot = strrchr(base, '.');
    size_t n = dot ? (size_t)(dot - base) : strlen(base);
    if (archive) {
        base = archive;
        n = strlen(archive);
    }
    if (n == 0 || n > 200 || !ckpt_utf8_check(base, n, 0)) {
        base = "archive";
        n = 7;
    }
    w->prefix = ckpt_malloc(n + 2);
    if (!w->prefix) return ckpt_err_nomem();
    memcpy(w->prefix, base, n);
    memcpy(w->prefix + n, "/", 2);
    return 0;
}

/* 1 when t's logical bytes are exactly the storage bytes written, so the
 * storage's digest is the tensor's. */
static int whole_storage(const ckpt_tensor *t) {
    uint64_t off;
    const ckpt_storage *root = ckpt_wr_root_storage(t, &off);
    return off == 0 && t->nbytes == root->nbytes && ckpt_tensor_is_contiguous(t);
}

/* {"key":"value",...,"ckpt.xxh3":"{\"name\":\"hex\",...}"} */
static int meta_json(pt_writer *w, ckpt_buf *b, const wr_named *tensors, size_t n,
                     const ckpt_write_options *o) {
    ckpt_buf inner = {0};
    for (size_t i = 0; i < n; i++) {
        const ckpt_tensor *t = tensors[i].value->u.tensor;
        uint64_t h, idx, off;
        if ((whole_storage(t) &&
             ckpt_ptrmap_get(&w->storage_of, ckpt_wr_root_storage(t, &off), &idx)) ||
            ckpt_ptrmap_get(&w->storage_of, t, &idx)) { /* a clone-mode copy */
            h = w->storages[idx - 1].xxh;
        } else {
            int rc = ckpt_tensor_xxh3(t, &h);
            if (rc) {
                ckpt_buf_free(&inner);
                return rc;
            }
        }
        char hex[17];
        ckpt_hex64(hex, h);
        ckpt_buf_byte(&inner, i ? ',' : '{');
        ckpt_buf_json_str(&inner, tensors[i].name, strlen(tensors[i].name));
        ckpt_buf_printf(&inner, ":\"%s\"", hex);
    }
    ckpt_buf_str(&inner, n ? "}" : "{}");
    ckpt_buf_byte(b, '{');
    for (size_t i = 0; o && i < o->nmeta; i++) {
        ckpt_buf_json_str(b, o->meta_keys[i], strlen(o->meta_keys[i]));
        ckpt_buf_byte(b, ':');
        ckpt_buf_json_str(b, o->meta_values[i], strlen(o->meta_values[i]));
        ckpt_buf_byte(b, ',');
    }
    ckpt_buf_json_str(b, CKPT_META_XXH3, strlen(CKPT_META_XXH3));
    ckpt_buf_byte(b, ':');
    if (!inner.failed) ckpt_buf_json_str(b, (const char *)inner.p, inner.len);
    ckpt_buf_byte(b, '}');
    int failed = inner.failed || b->failed;
    ckpt_buf_free(&inner);
    return failed ? ckpt_err_nomem() : 0;
}

/* ------------------------------------------------------------ entry */

static int write_archive(pt_writer *w, const ckpt_value *root, const wr_named *tensors,
                         size_t ntensors, const ckpt_write_options *opts) {
    ckpt_pkw_proto(&w->pk);
    int rc = save(w, root);
    if (rc) return rc;
    ckpt_pkw_op(&w->pk, '.');
    if (w->pk.out.failed) return ckpt_err_nomem();
    if ((rc = small_record(w, "data.pkl", w->pk.out.p, w->pk.out.len))) return rc;
    if ((rc = small_record(w, "byteorder", "little", 6))) return rc;
    ckpt_wr_progress(opts, 0, w->nstorages);
    for (size_t i = 0; i < w->nstorages; i++) {
        if ((rc = storage_record(w, i))) return rc;
        ckpt_wr_progress(opts, i + 1, w->nstorages);
    }
    ckpt_buf meta = {0};
    rc = meta_json(w, &meta, tensors, ntensors, opts);
    if (!rc) rc = small_record(w, CKPT_TORCH_META_RECORD, meta.p, meta.len);
    ckpt_buf_free(&meta);
    if (!rc) rc = small_record(w, "version", "3\n", 2);
    if (!rc) rc = central_directory(w);
    return rc;
}

int ckpt_write_torch(ckpt_atomic *a, const ckpt_value *root, const ckpt_write_options *opts,
                     ckpt_write_stats *stats) {
    return ckpt_write_torch_at(a, root, NULL, 0, opts, stats);
}

int ckpt_write_torch_at(ckpt_atomic *a, const ckpt_value *root, const char *archive, int clone,
                        const ckpt_write_options *opts, ckpt_write_stats *stats) {
    pt_writer w = {0};
    w.a = a;
    w.base = a->written;
    w.clone = clone;
    wr_named *tensors = NULL;
    size_t ntensors = 0;
    int rc = ckpt_wr_collect(&tensors, &ntensors, root);
    if (!rc) rc = check_tensors(tensors, ntensors);
    if (!rc) {
        /* digests are per flattened name, as ckpt_open lists tensors */
        ntensors = ckpt_wr_named_unique(tensors, ntensors);
        rc = archive_prefix(&w, a->target, archive);
    }
    if (!rc) rc = write_archive(&w, root, tensors, ntensors, opts);
    if (!rc) {
        stats->tensors = w.nstorages;
        stats->keys = ntensors;
        stats->bytes = a->written - w.base;
    }
    ckpt_wr_named_free(tensors, ntensors);
    ckpt_pkw_free(&w.pk);
    ckpt_ptrmap_free(&w.memo_of);
    ckpt_ptrmap_free(&w.storage_of);
    ckpt_ptrmap_free(&w.verified);
    ckpt_free(w.storages);
    for (size_t i = 0; i < w.nrecs; i++) ckpt_free(w.recs[i].name);
    ckpt_free(w.recs);
    ckpt_free(w.prefix);
    return rc;
}
