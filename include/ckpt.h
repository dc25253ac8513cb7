/*
 * ckpt.h - the whole public API of libckpt.
 *
 * libckpt opens machine-learning checkpoints without executing anything in
 * them, shows what is inside and proves the bytes are intact.
 *
 * Formats (see shared/docs/FORMATS.md for the byte-level facts):
 *   - safetensors (mmap, zero-copy, every validation rule of the reference
 *     reader huggingface/safetensors tensor.rs), and sharded sets opened
 *     through their "*.safetensors.index.json";
 *   - PyTorch zip archives written by torch.save (torch >= 1.6);
 *   - the legacy stacked-pickle format (torch < 1.6);
 *   - raw pickle files.
 * Pickles are read by a restricted machine: globals on an allowlist of data
 * builders (OrderedDict, torch tensor/storage rebuilders, numpy scalars and
 * arrays...) are interpreted; every other global becomes an opaque object
 * named "module.qualname" that is never called.
 *
 * Conventions (libgit2/zstd style):
 *   - Fallible calls return 0 or a negative CKPT_E_* code; details of the
 *     last failure on this thread are in ckpt_error_last().
 *   - Out-params come first; "T **out" belongs to the caller and is freed by
 *     the matching *_free/close function (NULL-safe). On failure *out is NULL.
 *   - Getters return borrowed pointers that live as long as their ckpt_file.
 *   - The library never prints, exits or aborts because of input.
 *   - Sizes are bytes unless stated; shapes and strides are in elements,
 *     row-major (C order), at most CKPT_MAX_NDIM dimensions.
 * Thread-safety: a ckpt_file may be read from several threads at once; the
 * error record is per thread; ckpt_set_allocator must be called before any
 * other call.
 */
#ifndef CKPT_H
#define CKPT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) && defined(CKPT_BUILDING)
#define CKPT_API __attribute__((visibility("default")))
#else
#define CKPT_API
#endif

#define CKPT_VERSION_STRING "0.1.0"

/* ---------------------------------------------------------------- errors */

/* Pinned error codes (never renumbered). */
enum {
    CKPT_OK = 0,
    CKPT_E_IO = -1,          /* open/read/mmap/write failed (errno in message) */
    CKPT_E_NOMEM = -2,       /* an allocation failed */
    CKPT_E_TRUNCATED = -3,   /* input ends before a structure it declares */
    CKPT_E_FORMAT = -4,      /* malformed input */
    CKPT_E_LIMIT = -5,       /* a configured limit (ckpt_limits) was exceeded */
    CKPT_E_UNSUPPORTED = -6, /* recognised but unsupported (TorchScript, tar...) */
    CKPT_E_UNSAFE = -7,      /* content would execute code (scanner verdicts) */
    CKPT_E_CHECKSUM = -8,    /* CRC-32 or digest mismatch */
    CKPT_E_MISMATCH = -9,    /* two things that must agree do not */
    CKPT_E_INVALID_ARG = -10,/* caller error */
    CKPT_E_NOTFOUND = -11    /* no such tensor/member/key */
};

/* Details of the last failure on the calling thread. All strings are
 * borrowed and valid until the next failing call on this thread.
 * file: path or name given to open ("" if none); member: zip member,
 * shard file or pickle name ("" if none); offset: absolute byte offset in
 * `file` where the problem was found, or UINT64_MAX when unknown. */
typedef struct ckpt_error {
    int code;
    const char *message;
    const char *file;
    const char *member;
    uint64_t offset;
} ckpt_error;

CKPT_API const ckpt_error *ckpt_error_last(void);
/* "CKPT_E_FORMAT" etc.; "unknown" for other values. Static string. */
CKPT_API const char *ckpt_error_name(int code);

/* One allocator for everything libckpt allocates. Passing NULL restores
 * malloc/realloc/free. Not thread-safe: call before any other function. */
typedef struct ckpt_allocator {
    void *(*malloc_fn)(void *user, size_t size);
    void *(*realloc_fn)(void *user, void *ptr, size_t size);
    void (*free_fn)(void *user, void *ptr);
    void *user;
} ckpt_allocator;
CKPT_API void ckpt_set_allocator(const ckpt_allocator *a);

/* ---------------------------------------------------------------- limits */

/* Bounds against hostile input. Every field may be lowered or raised per
 * call; CKPT_LIMITS_INIT gives the defaults. */
typedef struct ckpt_limits {
    uint64_t max_header_bytes;  /* safetensors JSON header; reference: 100 MB */
    uint64_t max_tensors;       /* tensors per checkpoint */
    uint64_t max_name_bytes;    /* one flattened name */
    uint32_t max_ndim;          /* dimensions per tensor (<= CKPT_MAX_NDIM) */
    uint32_t max_depth;         /* nesting depth of containers */
    uint64_t max_pickle_stack;  /* pickle stack + mark depth */
    uint64_t max_pickle_memo;   /* pickle memo entries */
    uint64_t max_pickle_ops;    /* opcodes executed per pickle */
    uint64_t max_zip_entries;   /* central-directory entries */
    uint64_t max_inflate_bytes; /* total decompressed bytes (zip bombs) */
    uint64_t max_index_bytes;   /* sharded index JSON file */
} ckpt_limits;

#define CKPT_MAX_NDIM 64
#define CKPT_LIMITS_INIT                                                     \
    {                                                                        \
        100000000u, 10000000u, 65536u, CKPT_MAX_NDIM, 1000u, 10000000u,     \
        10000000u, 1000000000u, 1000000u, (uint64_t)1 << 32, 100000000u      \
    }

/* ---------------------------------------------------------------- dtypes */

/* Element types, named as safetensors writes them (ckpt_dtype_name).
 * Types torch has and safetensors lacks use names in the same style:
 * C32 (complex32), C128 (complex128), QI8, QU8, QI32, QU4X2, QU2X4
 * (quantized storages). */
typedef enum ckpt_dtype {
    CKPT_DT_UNKNOWN = 0,
    CKPT_DT_BOOL, CKPT_DT_U8, CKPT_DT_I8, CKPT_DT_I16, CKPT_DT_U16,
    CKPT_DT_I32, CKPT_DT_U32, CKPT_DT_I64, CKPT_DT_U64,
    CKPT_DT_F16, CKPT_DT_BF16, CKPT_DT_F32, CKPT_DT_F64,
    CKPT_DT_C32, CKPT_DT_C64, CKPT_DT_C128,
    CKPT_DT_F8_E5M2, CKPT_DT_F8_E4M3, CKPT_DT_F8_E8M0,
    CKPT_DT_F8_E4M3FNUZ, CKPT_DT_F8_E5M2FNUZ,
    CKPT_DT_F4, CKPT_DT_F6_E2M3, CKPT_DT_F6_E3M2,
    CKPT_DT_QI8, CKPT_DT_QU8, CKPT_DT_QI32, CKPT_DT_QU4X2, CKPT_DT_QU2X4,
    CKPT_DT_COUNT
} ckpt_dtype;

/* "F32", "BF16", ...; "UNKNOWN" for out-of-range values. Static string. */
CKPT_API const char *ckpt_dtype_name(ckpt_dtype dt);
/* Parses a name of ckpt_dtype_name; CKPT_DT_UNKNOWN if none matches. */
CKPT_API ckpt_dtype ckpt_dtype_from_name(const char *name);
/* Bits per element: 1 (never), 4 (F4), 6 (F6_*), 8, 16, 32, 64 or 128. */
CKPT_API unsigned ckpt_dtype_bits(ckpt_dtype dt);

/* ---------------------------------------------------------------- files */

typedef struct ckpt_file ckpt_file;
typedef struct ckpt_tensor ckpt_tensor;
typedef struct ckpt_value ckpt_value;

typedef enum ckpt_format {
    CKPT_FORMAT_SAFETENSORS = 1,
    CKPT_FORMAT_SAFETENSORS_SHARDED,
    CKPT_FORMAT_TORCH_ZIP,
    CKPT_FORMAT_TORCH_LEGACY,
    CKPT_FORMAT_PICKLE
} ckpt_format;

/* "safetensors", "safetensors-sharded", "torch-zip", "torch-legacy",
 * "pickle" (the JSON names of `ckpt inspect`). Static string. */
CKPT_API const char *ckpt_format_name(ckpt_format f);

typedef struct ckpt_open_options {
    ckpt_limits limits;
} ckpt_open_options;
#define CKPT_OPEN_OPTIONS_INIT { CKPT_LIMITS_INIT }

/* Opens a checkpoint, detecting the format from its content (never from
 * the file name): "PK\3\4" zip, legacy magic pickle, pickle, safetensors
 * header, or a "*.safetensors.index.json" sharded index (the shards are
 * opened relative to the index's directory; names with "..", a root or a
 * drive are refused).
 *
 * The file is mapped read-only; tensor bytes are never copied at open
 * except for deflated zip members (inflated up to limits.max_inflate_bytes)
 * and legacy files, which are mapped too. Open validates all structure
 * (headers, pickle, zip directory, every view against its storage) but
 * reads no tensor bytes: use ckpt_verify for that.
 *
 * opts may be NULL (defaults). Returns 0, or CKPT_E_IO, CKPT_E_NOMEM,
 * CKPT_E_TRUNCATED, CKPT_E_FORMAT, CKPT_E_LIMIT, CKPT_E_UNSUPPORTED
 * (TorchScript archive, pre-0.4 tar file, PYTORCH1 preview format). */
CKPT_API int ckpt_open(ckpt_file **out, const char *path,
                       const ckpt_open_options *opts);

/* Same from memory. `data` is borrowed and must outlive the ckpt_file.
 * `name` is used in error messages (may be NULL). Sharded indexes cannot be
 * opened from memory (CKPT_E_UNSUPPORTED). */
CKPT_API int ckpt_open_memory(ckpt_file **out, const void *data, size_t size,
                              const char *name, const ckpt_open_options *opts);

/* Releases everything the file owns; all borrowed pointers die. NULL-safe. */
CKPT_API void ckpt_close(ckpt_file *f);

CKPT_API ckpt_format ckpt_file_format(const ckpt_file *f);
/* The path or name the file was opened with. Borrowed. */
CKPT_API const char *ckpt_file_path(const ckpt_file *f);
/* Total bytes of the input (all shards for a sharded set). */
CKPT_API uint64_t ckpt_file_size(const ckpt_file *f);

/* The root of the object tree: a dict of tensors for safetensors, the
 * unpickled object for pickle-based formats. Borrowed. */
CKPT_API const ckpt_value *ckpt_file_root(const ckpt_file *f);
/* The tree the file was saved from. For a safetensors file written by
 * ckpt (metadata "ckpt.structure"), the original tree: nesting, non-tensor
 * values, OrderedDict classes and attributes, parameters, dtypes
 * safetensors lacks (complex), tensors that were views of one storage
 * (rebuilt into one storage the views share: ckpt_tensor_storage_id is
 * equal, the bytes are copies); for every other file, ckpt_file_root(f).
 * *out is borrowed and lives as long as f. The first call decodes and
 * keeps the result in f: it must not run concurrently with other calls on
 * f. Returns 0, or CKPT_E_FORMAT (a malformed or cyclic structure, named
 * in the error), CKPT_E_LIMIT (a rebuilt storage past max_inflate_bytes,
 * nesting past max_depth), CKPT_E_NOMEM; a failure is returned again by
 * later calls. */
CKPT_API int ckpt_file_logical_root(const ckpt_value **out, const ckpt_file *f);

/* Tensors, flattened and sorted by name (byte order). Names join dict keys
 * (as written; int keys in decimal) and list/tuple indices with "."; a bare
 * top-level tensor is named "". A tensor reachable under two names (tied
 * weights) appears once per name. Index < ckpt_file_tensor_count. */
CKPT_API size_t ckpt_file_tensor_count(const ckpt_file *f);
CKPT_API const ckpt_tensor *ckpt_file_tensor(const ckpt_file *f, size_t i);
/* Binary search by exact name; NULL if absent. */
CKPT_API const ckpt_tensor *ckpt_file_find_tensor(const ckpt_file *f,
                                                   const char *name);

/* Non-tensor leaves, flattened and sorted by name like tensors. Leaves are
 * values of kind NONE, BOOL, INT, FLOAT, STR, BYTES or OBJECT (an opaque
 * object is a leaf; its arguments are not flattened). Empty containers
 * produce no entry. */
CKPT_API size_t ckpt_file_value_count(const ckpt_file *f);
CKPT_API const char *ckpt_file_value_name(const ckpt_file *f, size_t i);
CKPT_API const ckpt_value *ckpt_file_value(const ckpt_file *f, size_t i);

/* safetensors "__metadata__" (string to string, in file order), or for a
 * sharded set the index "metadata" with values rendered as JSON text.
 * Count is 0 when the file has none; ckpt_file_has_metadata tells absent
 * (0) from present-but-empty (1). Borrowed strings. */
CKPT_API int ckpt_file_has_metadata(const ckpt_file *f);
CKPT_API size_t ckpt_file_metadata_count(const ckpt_file *f);
CKPT_API const char *ckpt_file_metadata_key(const ckpt_file *f, size_t i);
CKPT_API const char *ckpt_file_metadata_value(const ckpt_file *f, size_t i);

/* ---------------------------------------------------------------- tensors */

/* Flattened name (see ckpt_file_tensor). Borrowed. */
CKPT_API const char *ckpt_tensor_name(const ckpt_tensor *t);
CKPT_API ckpt_dtype ckpt_tensor_dtype(const ckpt_tensor *t);
CKPT_API unsigned ckpt_tensor_ndim(const ckpt_tensor *t);
/* Arrays of ndim elements; borrowed. For ndim 0 a non-NULL dummy. */
CKPT_API const uint64_t *ckpt_tensor_shape(const ckpt_tensor *t);
CKPT_API const uint64_t *ckpt_tensor_stride(const ckpt_tensor *t);
/* Offset of element [0,...,0] in its storage, in elements. */
CKPT_API uint64_t ckpt_tensor_storage_offset(const ckpt_tensor *t);
/* Product of the shape (1 for ndim 0). */
CKPT_API uint64_t ckpt_tensor_numel(const ckpt_tensor *t);
/* Bytes of the logical contents: numel x bits / 8 (safetensors rule). */
CKPT_API uint64_t ckpt_tensor_nbytes(const ckpt_tensor *t);
/* 1 if the elements are contiguous row-major little-endian bytes in the
 * storage (so ckpt_tensor_data can hand them out), else 0. */
CKPT_API int ckpt_tensor_is_contiguous(const ckpt_tensor *t);

/* Storage identity: tensors that share bytes share an id (0-based, dense,
 * per file). ckpt_tensor_storage_nbytes is the whole storage's size. */
CKPT_API uint64_t ckpt_tensor_storage_id(const ckpt_tensor *t);
CKPT_API uint64_t ckpt_tensor_storage_nbytes(const ckpt_tensor *t);
/* Where the storage lives: zip member / safetensors file, and absolute
 * offset of its first byte in that file. Borrowed. */
CKPT_API const char *ckpt_tensor_member(const ckpt_tensor *t);
CKPT_API uint64_t ckpt_tensor_file_offset(const ckpt_tensor *t);

/* Borrowed pointer to the tensor's bytes when ckpt_tensor_is_contiguous:
 * *data receives the first byte, *size ckpt_tensor_nbytes. Zero-copy: the
 * pointer is into the file mapping and lives as long as f. Returns 0, or
 * CKPT_E_UNSUPPORTED for a view that is not contiguous or a big-endian
 * storage (use ckpt_tensor_read). */
CKPT_API int ckpt_tensor_data(const ckpt_tensor *t, const void **data,
                              size_t *size);

/* Copies the logical contents as contiguous row-major little-endian bytes
 * (views gathered through their strides, big-endian storages swapped) into
 * dst, which must hold ckpt_tensor_nbytes bytes. Returns 0,
 * CKPT_E_INVALID_ARG if cap is too small, CKPT_E_UNSUPPORTED for sub-byte
 * dtypes with non-contiguous views. */
CKPT_API int ckpt_tensor_read(const ckpt_tensor *t, void *dst, size_t cap);

/* SHA-256 of the logical contents (as ckpt_tensor_read would produce),
 * without materialising a copy for contiguous tensors. out: 32 bytes. */
CKPT_API int ckpt_tensor_sha256(const ckpt_tensor *t, unsigned char out[32]);

/* ---------------------------------------------------------------- values */

typedef enum ckpt_kind {
    CKPT_KIND_NONE = 0,
    CKPT_KIND_BOOL,
    CKPT_KIND_INT,
    CKPT_KIND_FLOAT,
    CKPT_KIND_STR,
    CKPT_KIND_BYTES,
    CKPT_KIND_LIST,
    CKPT_KIND_TUPLE,
    CKPT_KIND_DICT,
    CKPT_KIND_SET,
    CKPT_KIND_TENSOR,
    CKPT_KIND_OBJECT
} ckpt_kind;

CKPT_API ckpt_kind ckpt_value_kind(const ckpt_value *v);
/* "none", "bool", "int", "float", "str", "bytes", "list", "tuple", "dict",
 * "set", "tensor", "object". Static string. */
CKPT_API const char *ckpt_kind_name(ckpt_kind k);

CKPT_API int ckpt_value_bool(const ckpt_value *v);
/* Integer value; returns 0, or CKPT_E_LIMIT when it does not fit in int64
 * (use ckpt_value_int_decimal), CKPT_E_INVALID_ARG if not an int. */
CKPT_API int ckpt_value_int(const ckpt_value *v, int64_t *out);
/* Exact decimal text of any int, however large. Borrowed. NULL if not int. */
CKPT_API const char *ckpt_value_int_decimal(const ckpt_value *v);
CKPT_API double ckpt_value_float(const ckpt_value *v);
/* STR: UTF-8 text; BYTES: raw bytes. *len receives the byte length. Both
 * are NUL-terminated for convenience. Borrowed. */
CKPT_API const char *ckpt_value_str(const ckpt_value *v, size_t *len);
/* Items of LIST, TUPLE, SET, DICT (pairs); 0 otherwise. */
CKPT_API size_t ckpt_value_len(const ckpt_value *v);
/* Item i of LIST/TUPLE/SET, or value i of DICT. Borrowed. */
CKPT_API const ckpt_value *ckpt_value_item(const ckpt_value *v, size_t i);
/* Key i of DICT (in insertion order). Borrowed. */
CKPT_API const ckpt_value *ckpt_value_key(const ckpt_value *v, size_t i);
CKPT_API const ckpt_tensor *ckpt_value_tensor(const ckpt_value *v);
/* OBJECT: "module.qualname" of the global that would have built it. */
CKPT_API const char *ckpt_value_object_name(const ckpt_value *v);
/* OBJECT: arguments it would have been called with (a TUPLE) and the state
 * BUILD would have set, or NULL. Kept for display only. Borrowed. */
CKPT_API const ckpt_value *ckpt_value_object_args(const ckpt_value *v);
CKPT_API const ckpt_value *ckpt_value_object_state(const ckpt_value *v);

/* DICT: the mapping class it was built as, "collections.OrderedDict" (what
 * torch's Module.state_dict returns) or "collections.Counter"; NULL for a
 * plain dict, for the dicts of safetensors and JSON, and for other kinds.
 * Static string. */
CKPT_API const char *ckpt_value_dict_class(const ckpt_value *v);
/* DICT: the attributes a pickle's BUILD set on an OrderedDict or Counter,
 * a DICT, e.g. {"_metadata": OrderedDict({"": {"version": 1}, "bn":
 * {"version": 2}, ...})} for a torch state dict (the per-module versions
 * Module.load_state_dict passes to _load_from_state_dict for migrations);
 * NULL when none were set, for a plain dict and for other kinds. It is not
 * part of the flattened names (ckpt_file_tensor). Borrowed. */
CKPT_API const ckpt_value *ckpt_value_dict_state(const ckpt_value *v);
/* 1 if the tensor was saved as a torch.nn.Parameter
 * (torch._utils._rebuild_parameter, _rebuild_parameter_with_state, or
 * NEWOBJ torch.nn.parameter.Parameter), else 0. */
CKPT_API int ckpt_tensor_is_parameter(const ckpt_tensor *t);

/* ---------------------------------------------------------------- verify */

typedef struct ckpt_verify_report {
    int ok;            /* 1 when every check passed */
    uint64_t tensors;  /* tensors read */
    uint64_t bytes;    /* tensor/storage bytes read */
    uint64_t members;  /* zip members whose CRC-32 was checked */
} ckpt_verify_report;

/* Full integrity check of an opened file: every byte of every storage is
 * read; every zip member's CRC-32 is compared with the central directory;
 * legacy storage element counts are checked against the pickle and the file
 * size. Returns 0 when intact; CKPT_E_CHECKSUM (CRC mismatch) or another
 * code with ckpt_error_last() naming member and offset of the first
 * problem. report may be NULL. */
CKPT_API int ckpt_verify(ckpt_file *f, ckpt_verify_report *report);

/* ---------------------------------------------------------------- scan */

/* Whether loading a file with torch.load / pickle would run code, decided
 * without running anything: every pickle stream in the file (zip members
 * recognised by content, legacy stacked pickles, nested pickles inside
 * str/bytes literals up to max_nesting deep) runs through the restricted
 * machine, and every global it names, calls or BUILDs is checked against
 * the allowlist of data builders (torch's weights_only set plus numpy
 * scalar/array reconstruction) extended by `allow`. A sharded index (JSON
 * text with a "weight_map" object, detected as ckpt_open does) is as safe
 * as the shard files it lists: ckpt_scan scans each distinct shard in the
 * index's directory (its findings name the shard as their member; a shard
 * that is missing, unreadable, outside the directory or no checkpoint
 * makes the index unscannable); ckpt_scan_memory cannot reach the shards:
 * the buffer holds no checkpoint content itself (not-a-checkpoint, with
 * an info finding "sharded-index" saying the shards were not scanned).
 * An `allow` entry naming a known dangerous family is ignored, and an
 * info finding of kind "allow-ignored" says so. References: FORMATS.md §5
 * (picklescan, fickling, modelscan bypasses). */
typedef enum ckpt_verdict {
    CKPT_VERDICT_SAFE = 0,          /* only allowlisted globals */
    CKPT_VERDICT_UNSAFE,            /* a global off the allowlist is used */
    CKPT_VERDICT_UNSCANNABLE,       /* content could not be fully examined */
    CKPT_VERDICT_NOT_A_CHECKPOINT   /* no pickle or safetensors content */
} ckpt_verdict;

typedef enum ckpt_severity {
    CKPT_SEVERITY_INFO = 0,
    CKPT_SEVERITY_SUSPICIOUS,       /* unknown global: cannot vouch for it */
    CKPT_SEVERITY_DANGEROUS         /* a known dangerous family: code
                                       execution, process control, network
                                       or file access */
} ckpt_severity;

/* One finding. Strings are borrowed from the report. */
typedef struct ckpt_finding {
    ckpt_severity severity;
    const char *kind;    /* e.g. "global", "call", "build", "encrypted",
                            "polyglot", "trailing-bytes", "parse-error" */
    const char *global;  /* "module.qualname", or NULL */
    const char *member;  /* zip member or pickle name ("" for the file);
                            for a shard of a sharded index, the shard's
                            name, or "SHARD:MEMBER" */
    uint64_t offset;     /* absolute byte offset in the file */
    const char *message;
} ckpt_finding;

typedef struct ckpt_scan_report ckpt_scan_report;

typedef struct ckpt_scan_options {
    ckpt_limits limits;
    const char *const *allow; /* extra allowed "module.qualname" (exact) */
    size_t nallow;
    uint32_t max_nesting;     /* nested pickles in literals, levels */
} ckpt_scan_options;
#define CKPT_SCAN_OPTIONS_INIT { CKPT_LIMITS_INIT, NULL, 0, 3 }

/* Scans a file / a buffer. *out receives a report even for unsafe,
 * unscannable and non-checkpoint content (the verdict says which); the
 * return is 0 then. Errors: CKPT_E_IO (cannot read), CKPT_E_NOMEM,
 * CKPT_E_INVALID_ARG. Free with ckpt_scan_report_free (NULL-safe). */
CKPT_API int ckpt_scan(ckpt_scan_report **out, const char *path,
                       const ckpt_scan_options *opts);
CKPT_API int ckpt_scan_memory(ckpt_scan_report **out, const void *data,
                              size_t size, const char *name,
                              const ckpt_scan_options *opts);
CKPT_API void ckpt_scan_report_free(ckpt_scan_report *r);

CKPT_API ckpt_verdict ckpt_scan_verdict(const ckpt_scan_report *r);
/* "safe", "unsafe", "unscannable", "not-a-checkpoint". Static string. */
CKPT_API const char *ckpt_verdict_name(ckpt_verdict v);
/* "info", "suspicious", "dangerous". Static string. */
CKPT_API const char *ckpt_severity_name(ckpt_severity s);
/* Findings in file order. Borrowed. */
CKPT_API size_t ckpt_scan_finding_count(const ckpt_scan_report *r);
CKPT_API const ckpt_finding *ckpt_scan_finding(const ckpt_scan_report *r,
                                               size_t i);
/* Every distinct global the file names, "module.qualname", sorted. */
CKPT_API size_t ckpt_scan_global_count(const ckpt_scan_report *r);
CKPT_API const char *ckpt_scan_global(const ckpt_scan_report *r, size_t i);

/* ---- store: numbered generations of a checkpoint (src/store.c) */

/* A store is a directory of generations "NAME-STEP.safetensors" or
 * "NAME-STEP.pt" (STEP in decimal without leading zeros, sorted
 * numerically; equal steps by file name) and a file LATEST holding the file
 * name of the newest committed generation and "\n" (for readers that do
 * not link ckpt: `cat DIR/LATEST`). Every file is written through the
 * atomic commit (temporary ".FILE.tmp-PID-HEX" in DIR, fsync, rename, fsync
 * of DIR), so a crash at any moment leaves each name either absent or
 * complete. A generation is committed once it is in place and verifies.
 * Nothing is trusted unverified: latest, list and prune open and fully
 * verify (ckpt_verify) the generations they judge. One writer per
 * directory at a time (there is no lock); readers may run at any time.
 * Other files in DIR are ignored. NAME is a label, not a namespace: the
 * generations of every NAME in DIR form one sequence by step, which
 * LATEST, latest and pruning all go by (keep one run per directory). */
typedef struct ckpt_store_options {
    uint32_t keep;          /* commit and prune keep the `keep` newest
                               generations that verify (at least the newest
                               one) and LATEST's; default 3 */
    uint32_t stale_minutes; /* gc: a temporary file whose writer is still
                               running is stale once unmodified this long;
                               default 60; 0: every temporary file */
    ckpt_open_options open; /* limits for opening and verifying generations */
} ckpt_store_options;
#define CKPT_STORE_OPTIONS_INIT { 3u, 60u, CKPT_OPEN_OPTIONS_INIT }

/* Commits the checkpoint file `src` (any format ckpt_open reads but a
 * sharded set) as generation `step` of `name` in `dir` (created, with its
 * missing parents, mode 0755 less the umask, when it does not exist).
 * `src` is opened and verified first: a corrupt one is refused with
 * "SRC is corrupt: REASON; nothing committed" and nothing is written.
 * Then the bytes are copied unchanged to "dir/NAME-STEP.EXT" (EXT
 * ".safetensors" for a
 * safetensors source, ".pt" for torch zip, legacy and pickle sources)
 * through the atomic commit; the new file's pages are dropped from the page
 * cache (posix_fadvise) and it is re-read from disk, opened and verified
 * fully; only then is LATEST replaced (atomically) to name the newest
 * verified generation (normally the new one; a verified generation with a
 * higher step keeps it), and only then are generations beyond opts->keep
 * pruned as ckpt_store_prune does (the new generation is never pruned).
 * Pruning verifies up to keep - 1 older generations (the new one is known
 * good). A generation that fails verification is removed again and LATEST
 * is not touched. Once it verifies, the generation is committed even if
 * moving LATEST or pruning then fails: the call returns that failure with
 * a message saying the generation was committed, and *path is filled.
 *
 * name: 1 to 200 bytes, no '/', no control bytes, not starting with '.'.
 * A step of `name` that is already committed (a verified file
 * NAME-STEP.*) is refused; a corrupt one is replaced. path/cap: receives
 * "dir/NAME-STEP.EXT" (NUL-terminated) once the generation is committed;
 * path may be NULL (cap 0). opts may be NULL (CKPT_STORE_OPTIONS_INIT).
 * Returns 0; CKPT_E_INVALID_ARG (bad name, cap too small, step already
 * committed); CKPT_E_IO (dir or src unreadable, dir cannot be created;
 * write, fsync or rename failed; LATEST or pruning failed after the
 * commit); CKPT_E_UNSUPPORTED
 * (sharded source); the ckpt_open/ckpt_verify code when the source or the
 * written copy is malformed or corrupt; CKPT_E_NOMEM. */
CKPT_API int ckpt_store_commit(char *path, size_t cap, const char *dir,
                               const char *name, uint64_t step,
                               const char *src,
                               const ckpt_store_options *opts);

/* The generation to resume from: the newest (highest step; equal steps by
 * file name) that opens and verifies fully; corrupt ones are skipped.
 * LATEST is not consulted, so a LATEST that names a missing, corrupt or
 * older file (after a crash between a generation's rename and LATEST's)
 * changes nothing. path/cap receive "dir/FILE" (NUL-terminated). Returns
 * 0; CKPT_E_NOTFOUND when no generation verifies; CKPT_E_IO when dir, or
 * a generation newer than the answer, cannot be read (unreadable is not
 * corrupt: an older generation would be the wrong answer);
 * CKPT_E_INVALID_ARG when cap is too small; CKPT_E_NOMEM. */
CKPT_API int ckpt_store_latest(char *path, size_t cap, const char *dir,
                               const ckpt_store_options *opts);

/* What LATEST says, as judged by ckpt_store_list. */
typedef enum ckpt_store_pointer {
    CKPT_STORE_POINTER_OK = 0,  /* names a generation that verifies */
    CKPT_STORE_POINTER_ABSENT,  /* there is no LATEST file */
    CKPT_STORE_POINTER_MISSING, /* names a generation file that is not there */
    CKPT_STORE_POINTER_CORRUPT, /* names a generation that does not verify */
    CKPT_STORE_POINTER_INVALID  /* unreadable, or not "FILE\n" for a
                                   generation file name */
} ckpt_store_pointer;
/* "ok", "absent", "missing", "corrupt", "invalid". Static string. */
CKPT_API const char *ckpt_store_pointer_name(ckpt_store_pointer p);

/* One generation as ckpt_store_list found it. Strings are borrowed from the
 * listing. */
typedef struct ckpt_store_generation {
    const char *file;   /* "NAME-STEP.EXT" */
    const char *path;   /* "dir/NAME-STEP.EXT" */
    const char *name;   /* NAME */
    uint64_t step;
    uint64_t bytes;     /* file size */
    int ok;             /* 1 when it opens and verifies, else 0 (corrupt) */
    int code;           /* CKPT_E_* of the first problem; 0 when ok */
    const char *reason; /* its message; "" when ok */
    const char *member; /* zip member of the problem, or "" */
    uint64_t offset;    /* absolute byte offset of the problem, or UINT64_MAX */
    int latest;         /* 1 for the file LATEST names */
} ckpt_store_generation;

typedef struct ckpt_store_listing ckpt_store_listing;

/* Lists and fully verifies every generation of `dir`, and judges LATEST.
 * *out receives the listing (free with ckpt_store_list_free, NULL-safe),
 * also when some generations are corrupt or unreadable (ok 0, with the
 * reason). Returns 0; CKPT_E_IO when dir cannot be read; CKPT_E_NOMEM. */
CKPT_API int ckpt_store_list(ckpt_store_listing **out, const char *dir,
                             const ckpt_store_options *opts);
CKPT_API void ckpt_store_list_free(ckpt_store_listing *l);
/* Generations by ascending step (equal steps by file name), i < count;
 * NULL past the end. */
CKPT_API size_t ckpt_store_list_count(const ckpt_store_listing *l);
CKPT_API const ckpt_store_generation *
ckpt_store_list_generation(const ckpt_store_listing *l, size_t i);
/* LATEST's state; *file (may be NULL) receives the file name it holds
 * (borrowed; "" when absent or invalid). */
CKPT_API ckpt_store_pointer ckpt_store_list_pointer(const ckpt_store_listing *l,
                                                    const char **file);

/* Removes old generations. Generations are verified from the newest down
 * until opts->keep of them (at least one) verify; those older than the
 * last of these are removed, oldest first, whatever their state (unless
 * LATEST names one), then dir is fsynced. Corrupt generations never count
 * toward keep and never cause a good one to be removed: those newer than
 * the kept ones are left in place (ckpt_store_list and
 * ckpt_store_prune_list report them) until keep newer generations verify.
 * Fewer than keep verified generations: nothing is removed. If a
 * verification fails for want of I/O or memory rather than because the
 * file is corrupt, nothing is removed. *removed (may be NULL) receives the
 * number of files removed. Returns 0, CKPT_E_IO (dir unreadable, unlink
 * failed, I/O error while verifying), CKPT_E_NOMEM. */
CKPT_API int ckpt_store_prune(size_t *removed, const char *dir,
                              const ckpt_store_options *opts);

/* Removes stale temporary files left by killed writers (in any directory,
 * e.g. a `ckpt convert` output's): regular files named ".X.tmp-PID-HEX"
 * (the atomic commit's names, 16 lowercase hex digits) whose process PID
 * no longer exists on this machine, or that were not modified for
 * opts->stale_minutes (a writer that is still writing keeps its file's
 * mtime fresh; a PID reused by another process does not). Generations and
 * LATEST are never removed. *removed (may be NULL) receives the count.
 * Returns 0, CKPT_E_IO, CKPT_E_NOMEM. */
CKPT_API int ckpt_store_gc(size_t *removed, const char *dir,
                           const ckpt_store_options *opts);

/* ---- training: components of a training checkpoint, resume readiness
 * (src/training.c)
 *
 * What a training checkpoint holds, recognised by the structure of its
 * object tree (FORMATS.md §2.5), never by file name, and without reading
 * tensor bytes (only the few bytes of 0-dim counter tensors):
 *   model      a state dict: a dict whose leaves are all tensors (at any
 *              depth; "model", "state_dict", "model_state_dict" and
 *              Lightning's "state_dict" are all found this way), or the
 *              loose tensors of a container that mixes tensors and other
 *              values;
 *   optimizer  torch.optim state_dict(): "state" (per-parameter dicts keyed
 *              by parameter index) plus "param_groups" (dicts with
 *              "params"), also a "state" of per-parameter dicts holding
 *              known state keys without "param_groups"; found anywhere,
 *              e.g. in Lightning's "optimizer_states" list;
 *   scheduler  LR scheduler state_dict(): "last_epoch" plus "_step_count",
 *              "base_lrs" or "_last_lr";
 *   scaler     AMP GradScaler state_dict(): "scale" plus "_growth_tracker"
 *              or "growth_factor";
 *   rng        torch CPU (a 1-D uint8 tensor of 5056 bytes, or one under a
 *              "cpu"/"torch"/"*rng*" key) and CUDA (1-D uint8 under a
 *              "*cuda*" key) generator states, numpy's
 *              ('MT19937', uint32[624], pos, has_gauss, cached) tuple or
 *              bit-generator dict, python random's (version, 625 ints,
 *              gauss) tuple;
 *   counter    int, float or 0-dim tensor values named epoch, step,
 *              global_step, iteration... and each optimizer's "step";
 *   data       a data-loader/sampler position ("*sampler*", "*dataloader*",
 *              Lightning "loops", consumed_samples, batch_idx...);
 *   other      tensors that fit none of the above.
 *
 * Resume readiness, one verdict:
 *   full-resume      model weights plus optimizer state for every parameter
 *                    in param_groups, state shapes matching the model's
 *                    parameters (in order when the model's order is known,
 *                    i.e. a pickled state dict with as many parameters as
 *                    the optimizer; otherwise as a multiset of shapes). An
 *                    optimizer whose per-parameter state holds no tensors
 *                    (SGD without momentum) is complete;
 *   partial          optimizer state present, but some parameter has none,
 *                    a shape mismatches, param_groups is missing, or there
 *                    are no model weights to match;
 *   warm-start-only  scheduler, scaler, RNG or data-position state but no
 *                    optimizer state;
 *   weights-only     model weights with at most counters and metadata (also
 *                    the verdict for a file without any of these).
 * Missing scheduler, scaler and RNG state are warnings unless the verdict
 * is weights-only (a deployment file needs none); a missing AMP grad
 * scaler only when some tensor is F16 or BF16 (a scaler is only used with
 * mixed precision).
 *
 * Model "parameters" are the floating-point tensors of model components
 * except BatchNorm's running_mean/running_var/num_batches_tracked. The
 * optimizer-to-model ratio is the bytes of the optimizer state tensors that
 * have at least one dimension (exp_avg, exp_avg_sq, momentum_buffer...; not
 * the 0-dim "step" counters) divided by the bytes of the model parameters:
 * 2.0 for Adam with fp32 state, 1.0 for SGD with momentum.
 *
 * Metadata ("everything except named tensors") is sorted into topics a
 * resume or deployment needs: architecture config, dtype intent, parallel
 * layout, library versions (and "other"), from safetensors __metadata__ or
 * sharded-index metadata (JSON object values are looked into), tree values
 * under keys such as "config", "hyper_parameters", "*version*", "dtype",
 * "precision", "world_size", the state of opaque objects (argparse
 * Namespace, TrainingArguments), and in a directory the JSON files
 * (config.json: architectures, model_type, torch_dtype,
 * transformers_version). */
typedef struct ckpt_training ckpt_training;

typedef enum ckpt_component_kind {
    CKPT_COMPONENT_MODEL = 0,
    CKPT_COMPONENT_OPTIMIZER,
    CKPT_COMPONENT_SCHEDULER,
    CKPT_COMPONENT_SCALER,
    CKPT_COMPONENT_RNG,
    CKPT_COMPONENT_COUNTER,
    CKPT_COMPONENT_DATA,
    CKPT_COMPONENT_OTHER
} ckpt_component_kind;
/* "model", "optimizer", "scheduler", "scaler", "rng", "counter", "data",
 * "other"; "unknown" for other values. Static string. */
CKPT_API const char *ckpt_component_kind_name(ckpt_component_kind k);

/* One component. Strings and values are borrowed from the analysis (and,
 * for values, from the file they are in). */
typedef struct ckpt_component {
    ckpt_component_kind kind;
    const char *file;  /* the file it is in: ckpt_file_path() of the
                          analysed file, or its name inside the directory */
    const char *name;  /* its place in that file, joined like tensor names
                          ("optimizer_states.0"; "" is the root) */
    const char *type;  /* optimizer: "Adam/AdamW", "Adam/AdamW (amsgrad)",
                          "SGD", "SGD (momentum)", "Adagrad", "RMSprop",
                          "Adadelta", "Adamax", "NAdam", "ASGD", "Rprop",
                          "Adafactor", "unknown"; scheduler: "StepLR",
                          "LambdaLR", ... or "scheduler"; rng: "torch-cpu",
                          "torch-cuda", "numpy", "python"; counter: "int",
                          "float" or "0-dim F32 tensor" (any dtype name);
                          "" otherwise */
    const ckpt_value *value; /* the subtree (model: the state dict, or the
                                container of loose tensors); for counters
                                read from a JSON file, a value owned by the
                                analysis */
    uint64_t tensors;  /* tensors in it */
    uint64_t elements; /* their numel, summed */
    uint64_t bytes;    /* their ckpt_tensor_nbytes, summed */
    uint64_t param_bytes;    /* model: bytes of its parameters (see above) */
    uint64_t state_bytes;    /* optimizer: bytes of its state tensors with
                                at least one dimension */
    uint64_t params;         /* optimizer: parameters in param_groups (state
                                entries when param_groups is missing) */
    uint64_t params_with_state; /* optimizer: of those, with a state entry */
    const ckpt_value *param_groups; /* optimizer: the LIST of group dicts
                                       (hyperparameters; "params" lists the
                                       parameter indices), or NULL */
    double number;     /* counter: its value (a 0-dim tensor is read); NaN
                          when it is not a number */
} ckpt_component;

typedef enum ckpt_resume {
    CKPT_RESUME_FULL = 0,
    CKPT_RESUME_PARTIAL,
    CKPT_RESUME_WARM_START,
    CKPT_RESUME_WEIGHTS_ONLY
} ckpt_resume;
/* "full-resume", "partial", "warm-start-only", "weights-only"; "unknown"
 * for other values. Static string. */
CKPT_API const char *ckpt_resume_name(ckpt_resume r);

typedef enum ckpt_meta_topic {
    CKPT_META_ARCHITECTURE = 0,
    CKPT_META_DTYPE,
    CKPT_META_PARALLEL,
    CKPT_META_VERSIONS,
    CKPT_META_OTHER
} ckpt_meta_topic;
#define CKPT_META_TOPIC_COUNT 5
/* "architecture_config", "dtype_intent", "parallel_layout",
 * "library_versions", "other"; "unknown" for other values. Static. */
CKPT_API const char *ckpt_meta_topic_name(ckpt_meta_topic t);

/* One piece of metadata. Strings are borrowed from the analysis. */
typedef struct ckpt_meta_entry {
    ckpt_meta_topic topic;
    const char *file;   /* as ckpt_component.file */
    const char *source; /* "__metadata__" (safetensors header or sharded
                           index metadata), "tree" (the object tree) or
                           "json" (a JSON file of a directory) */
    const char *key;    /* the metadata key, flattened tree path or JSON
                           key (nested keys joined with ".") */
    const char *text;   /* the value as text (metadata strings as written,
                           JSON values as compact JSON), or NULL when
                           `value` is set */
    const ckpt_value *value; /* the value in the object tree, or NULL */
} ckpt_meta_entry;

/* Analyses an opened checkpoint. f is borrowed and must outlive *out.
 * Reads no tensor bytes except those of 0-dim counter tensors. Returns 0,
 * or CKPT_E_NOMEM, CKPT_E_INVALID_ARG (out or f NULL). An object tree too
 * large to walk (more than 2^24 nodes visited) is not an error: the
 * analysis stops there and says so in a warning. Free with
 * ckpt_training_free. */
CKPT_API int ckpt_training_analyze(ckpt_training **out, const ckpt_file *f);

/* Analyses a directory in the Hugging Face Trainer layout (model weights as
 * model.safetensors, pytorch_model.bin or a sharded index with its shards,
 * optimizer.pt, scheduler.pt, rng_state*.pth, scaler.pt,
 * trainer_state.json, config.json...) or any directory of checkpoint
 * files: every regular file that is not hidden is opened (ckpt_open with
 * opts, which may be NULL) and analysed as one checkpoint; JSON files are
 * read for counters (trainer_state.json global_step and epoch) and
 * metadata; shards listed by an index are analysed through the index (a
 * "*.bin.index.json" whose shards ckpt_open cannot open as a set has each
 * shard opened alone). Files that are not checkpoints are listed by
 * ckpt_training_ignored; a file that looks like one (zip, pickle or
 * safetensors start) but does not open gives a warning. The analysis owns
 * the files it opened. Returns 0; CKPT_E_IO (dir unreadable, not a
 * directory); CKPT_E_LIMIT (more than limits.max_zip_entries entries);
 * CKPT_E_NOMEM; CKPT_E_INVALID_ARG. */
CKPT_API int ckpt_training_analyze_dir(ckpt_training **out, const char *dir,
                                       const ckpt_open_options *opts);
CKPT_API void ckpt_training_free(ckpt_training *t);

/* Components in discovery order (files by name, trees in insertion
 * order). Borrowed. */
CKPT_API size_t ckpt_training_component_count(const ckpt_training *t);
CKPT_API const ckpt_component *ckpt_training_component(const ckpt_training *t,
                                                       size_t i);
/* Optimizer-to-model ratio (see above); NaN without optimizer state or
 * without model parameter bytes. */
CKPT_API double ckpt_training_optimizer_ratio(const ckpt_training *t);

/* The verdict, the sentences that justify it, and the warnings (missing
 * scheduler, scaler or RNG state; unreadable files; a partial walk).
 * Sentences are borrowed, i < count. */
CKPT_API ckpt_resume ckpt_training_resume(const ckpt_training *t);
CKPT_API size_t ckpt_training_reason_count(const ckpt_training *t);
CKPT_API const char *ckpt_training_reason(const ckpt_training *t, size_t i);
CKPT_API size_t ckpt_training_warning_count(const ckpt_training *t);
CKPT_API const char *ckpt_training_warning(const ckpt_training *t, size_t i);

/* Metadata entries in discovery order; a topic with no entry is not
 * carried. Borrowed. */
CKPT_API size_t ckpt_training_meta_count(const ckpt_training *t);
CKPT_API const ckpt_meta_entry *ckpt_training_meta(const ckpt_training *t,
                                                   size_t i);

/* The checkpoint files analysed (one for ckpt_training_analyze), in name
 * order, and their names as in ckpt_component.file. Borrowed. */
CKPT_API size_t ckpt_training_file_count(const ckpt_training *t);
CKPT_API const ckpt_file *ckpt_training_file(const ckpt_training *t,
                                             size_t i);
CKPT_API const char *ckpt_training_file_name(const ckpt_training *t,
                                             size_t i);
/* Path of the main weights file (the one holding the most model bytes;
 * without model weights, the largest file analysed), as it can be passed
 * to ckpt_open; NULL when nothing was analysed. Borrowed. */
CKPT_API const char *ckpt_training_weights_path(const ckpt_training *t);
/* Directory files that are not checkpoints (names inside the directory,
 * sorted), i < count. Borrowed. */
CKPT_API size_t ckpt_training_ignored_count(const ckpt_training *t);
CKPT_API const char *ckpt_training_ignored(const ckpt_training *t, size_t i);

/* ---- keys: manifests, match, diff, rename, key hygiene (src/manifest.c,
 *      src/keys.c, src/match.c, src/diff.c, src/rename.c, src/hygiene.c) */

/* A manifest is a set of tensor keys with their dtype and shape: the
 * tensors of a checkpoint, or what a model expects. Names are unique and
 * looked up in O(1) (hash tables seeded per process, so crafted names
 * cannot force collisions); entries keep the order they were added in.
 *
 * JSON manifests are the output of `ckpt inspect --json`, or any object
 * with the same `tensors` list:
 *   {"tensors": [{"name": str, "dtype": str, "shape": [uint, ...]}, ...],
 *    "metadata": {str: str} | null}
 * Other fields (file, format, nbytes, sha256, values) are ignored;
 * "metadata" is optional and, like a safetensors __metadata__, may record
 * tied-weight aliases ("dropped name": "kept name", the convention of
 * safetensors' save_model). dtype strings are compared as written.
 * Parsing uses jansson (a DOM): for a 1,000,000-key manifest (85 MB) the
 * parse dominates every operation below (bench/bench_match.py: about 2 s
 * of CPU in json_loadb and up to 1 s more to free the document, against
 * 0.3 s for building the manifest; jansson's decoding flags and
 * json_load_callback change nothing measurable). */
typedef struct ckpt_manifest ckpt_manifest;

/* One key of a manifest. Borrowed from the manifest. */
typedef struct ckpt_manifest_entry {
    const char *name;
    const char *dtype;         /* ckpt_dtype_name style: "F32", "BF16"... */
    unsigned ndim;
    const uint64_t *shape;     /* ndim elements (non-NULL) */
    const ckpt_tensor *tensor; /* manifests of a file: the tensor; else NULL */
} ckpt_manifest_entry;

/* An empty manifest named `name` (for messages and reports; may be NULL).
 * Returns 0 or CKPT_E_NOMEM. Free with ckpt_manifest_free. */
CKPT_API int ckpt_manifest_new(ckpt_manifest **out, const char *name);
/* Appends a key; strings and shape are copied. Returns 0,
 * CKPT_E_INVALID_ARG (NULL name/dtype, ndim > CKPT_MAX_NDIM, a name
 * already present), CKPT_E_NOMEM. */
CKPT_API int ckpt_manifest_add(ckpt_manifest *m, const char *name,
                               const char *dtype, unsigned ndim,
                               const uint64_t *shape);
/* The tensors of an opened file, in ckpt_file_tensor order (sorted), and
 * its metadata. Borrows f (names, shapes, tensors): f must outlive the
 * manifest. Returns 0 or CKPT_E_NOMEM. */
CKPT_API int ckpt_manifest_from_file(ckpt_manifest **out, const ckpt_file *f);
/* Parses a JSON manifest (see above) of len bytes. `name` is used in
 * messages. Bounds: len <= limits.max_index_bytes, entries <=
 * max_tensors, names <= max_name_bytes, ndim <= max_ndim (limits may be
 * NULL: defaults). Returns 0; CKPT_E_FORMAT (not JSON, duplicate object
 * keys, \u0000 in a string, wrong types, duplicate names, a dimension that
 * is not a non-negative 64-bit integer; the message names the entry
 * index), CKPT_E_LIMIT, CKPT_E_NOMEM. */
CKPT_API int ckpt_manifest_parse(ckpt_manifest **out, const void *json,
                                 size_t len, const char *name,
                                 const ckpt_limits *limits);
/* Reads `path` as a JSON manifest when it is a JSON object with a
 * "tensors" list, and as a checkpoint (ckpt_open, any format) otherwise;
 * the manifest then owns the opened file (ckpt_manifest_file). opts may be
 * NULL. Returns 0 or the code of ckpt_open / ckpt_manifest_parse
 * (CKPT_E_IO when the file cannot be read). */
CKPT_API int ckpt_manifest_load(ckpt_manifest **out, const char *path,
                                const ckpt_open_options *opts);
/* NULL-safe. Closes the file ckpt_manifest_load opened. */
CKPT_API void ckpt_manifest_free(ckpt_manifest *m);

/* The name given at creation (path for ckpt_manifest_load). Borrowed. */
CKPT_API const char *ckpt_manifest_name(const ckpt_manifest *m);
/* The checkpoint behind the manifest, or NULL for JSON and built ones. */
CKPT_API const ckpt_file *ckpt_manifest_file(const ckpt_manifest *m);
CKPT_API size_t ckpt_manifest_count(const ckpt_manifest *m);
/* Entry i < ckpt_manifest_count; borrowed. */
CKPT_API const ckpt_manifest_entry *ckpt_manifest_entry_at(
    const ckpt_manifest *m, size_t i);
/* Exact lookup by full name; NULL if absent. O(1). */
CKPT_API const ckpt_manifest_entry *ckpt_manifest_find(
    const ckpt_manifest *m, const char *name);

/* ckpt_match: would loading `checkpoint` into a model expecting `expect`
 * (torch load_state_dict(strict=True) semantics) load every key?
 *
 * Keys are compared exactly on full names ("fc1.weight.bad_key" is
 * unexpected, never part of "fc1.weight"). A common name is `matched` when
 * dtype and shape agree too; otherwise it is listed in shape_mismatch
 * and/or dtype_mismatch (a name may be in both) and not counted.
 *
 * Prefix inference (FORMATS.md §4.6) runs when names are left unmatched on
 * both sides. A rewrite of checkpoint keys is: optionally drop the wrapper
 * segments "_orig_mod.", "_fsdp_wrapped_module." and
 * "_checkpoint_wrapped_module." wherever they stand (never as the last
 * segment), then replace a leading run of whole segments S by P (strip S,
 * add P, or both; stacked wrappers such as "module._orig_mod." or
 * "state_dict.model." are one run). A rewrite stands for a wrapper around
 * the whole model, so:
 *   - it covers only keys starting with S (the others cannot be matched
 *     through it and stay unexpected), and must cover more than half of
 *     the checkpoint keys, except in a training checkpoint ({"model":
 *     state dict, "optimizer": ..., "epoch": ...}): a rewrite stripping a
 *     subtree S whose keys pair one to one with every expected key, all
 *     other keys and non-tensor values lying in other top-level entries,
 *     selects that subtree. Its description ends with " (other top-level
 *     entries ignored: epoch, optimizer)" (4 named at most, then ", ...",
 *     all of them in ckpt_match_ignored); applied, it leaves those
 *     entries out: their keys are not unexpected;
 *   - S and P never share their first segment: no rewrite edits the middle
 *     of a key ("encoder.module.x" stays what it is).
 * Candidates come from whole-segment suffixes shared by unmatched keys
 * (a bounded sample of anchors, one pass over the expected keys); each is
 * evaluated over every key. A rewrite counts only if it matches more
 * expected names than the keys as they are. The best matches the most
 * names; between equal counts the simpler (fewer segments stripped and
 * added, dropping wrappers counting 2) wins; equal counts and simplicity
 * are a tie: no rewrite, the candidates are listed. Two rules forming the
 * same pairs are one rewrite (the simpler description is kept). With
 * opts->normalize the rewrite is applied only if the result is complete
 * (below) and no two checkpoint keys end up with one name.
 *
 * Allowed exceptions: a missing key matching a glob of allow_missing, an
 * unexpected key whose checkpoint name (or rewritten name) matches a glob
 * of allow_unexpected (fnmatch without flags: '*' crosses '.') is listed
 * under "allowed" instead of missing/unexpected; it never disappears.
 * Shape and dtype mismatches cannot be allowed.
 *
 * complete: no missing, unexpected, shape or dtype mismatch (besides the
 * allowed), and at least one key matched when anything is expected.
 * warning: "nothing would load: 0 of N expected keys match" or "almost
 * nothing would load: M of N expected keys match" (M < N/2), even when
 * every exception is allowed; NULL otherwise.
 *
 * Tied weights: a missing key is "tied to X" when X is matched and either
 * the expected side stores both in the same tensor (same storage id,
 * storage offset, dtype and shape; file-based manifests only) or the
 * checkpoint's metadata records the missing name as an alias of X.
 * Likewise an unexpected key is tied to a matched checkpoint key sharing
 * its tensor, or aliased to it by the expected side's metadata. Tied keys
 * stay in missing/unexpected (or allowed) and are also listed in TIED.
 * tied_to is the partner's name on the key's own side.
 *
 * Names in every list are the original names of their side: expected names
 * for missing keys and mismatches, checkpoint names for unexpected keys.
 * Lists are sorted by name (byte order).
 *
 * `ckpt match --json` writes exactly: {"checkpoint": path, "expect": path,
 * "complete": bool, "matched": N, "missing_keys": [name...],
 * "unexpected_keys": [name...], "shape_mismatch": [{"name", "checkpoint":
 * [dims], "expected": [dims]}...], "dtype_mismatch": [{"name",
 * "checkpoint": dtype, "expected": dtype}...], "allowed": {"missing":
 * [name...], "unexpected": [name...]}, "tied": [{"name", "tied_to"}...],
 * "rewrite": {"description", "matches", "applied": bool} | null,
 * "candidates": [{"description", "matches"}...], "ignored_top_level":
 * [name...], "warning": str | null}; ignored_top_level lists the entries
 * the rewrite leaves out when it selects a subtree (ckpt_match_ignored),
 * else []. */
typedef struct ckpt_match_options {
    int normalize; /* apply the inferred rewrite when it completes the match */
    const char *const *allow_missing;    /* globs */
    size_t nallow_missing;
    const char *const *allow_unexpected; /* globs */
    size_t nallow_unexpected;
} ckpt_match_options;
#define CKPT_MATCH_OPTIONS_INIT { 0, NULL, 0, NULL, 0 }

typedef enum ckpt_match_list {
    CKPT_MATCH_MISSING = 0,        /* expected, not in the checkpoint */
    CKPT_MATCH_UNEXPECTED,         /* in the checkpoint, not expected */
    CKPT_MATCH_SHAPE_MISMATCH,     /* both sides, shapes differ */
    CKPT_MATCH_DTYPE_MISMATCH,     /* both sides, dtypes differ */
    CKPT_MATCH_ALLOWED_MISSING,
    CKPT_MATCH_ALLOWED_UNEXPECTED,
    CKPT_MATCH_TIED                /* missing or unexpected, tied (tied_to) */
} ckpt_match_list;

/* One listed key. Borrowed from the result. */
typedef struct ckpt_match_item {
    const char *name;
    const ckpt_manifest_entry *checkpoint; /* NULL for a missing key */
    const ckpt_manifest_entry *expected;   /* NULL for an unexpected key */
    const char *tied_to;                   /* TIED list only, else NULL */
} ckpt_match_item;

/* A rewrite of checkpoint keys. description: e.g. "strip 'module.'",
 * "strip '_orig_mod.module.'", "drop '_orig_mod.' segments, strip
 * 'module.'", "add 'model.'", "replace 'model.' with 'backbone.'", with
 * " (not applicable: 'a' and 'b' both become 'c')" when it merges keys;
 * matches: expected names it matches; applied: 1 when the lists reflect
 * it (candidates: always 0). */
typedef struct ckpt_rewrite {
    const char *description;
    uint64_t matches;
    int applied;
} ckpt_rewrite;

typedef struct ckpt_match_result ckpt_match_result;

/* Compares the manifests; opts may be NULL (CKPT_MATCH_OPTIONS_INIT). Both
 * manifests must outlive the result (items point into them). Returns 0
 * whether or not the match is complete; CKPT_E_INVALID_ARG, CKPT_E_NOMEM.
 * Cost: O(keys) hash lookups plus, when inference runs, at most 12
 * candidate rewrites (24 with wrappers) evaluated over every checkpoint
 * key. Thread-safe for distinct results. */
CKPT_API int ckpt_match(ckpt_match_result **out,
                        const ckpt_manifest *checkpoint,
                        const ckpt_manifest *expect,
                        const ckpt_match_options *opts);
CKPT_API void ckpt_match_free(ckpt_match_result *r); /* NULL-safe */

CKPT_API int ckpt_match_complete(const ckpt_match_result *r);
/* Matched keys (same name, dtype and shape). */
CKPT_API uint64_t ckpt_match_matched(const ckpt_match_result *r);
CKPT_API size_t ckpt_match_count(const ckpt_match_result *r,
                                 ckpt_match_list list);
/* Item i of a list; borrowed; NULL out of range. */
CKPT_API const ckpt_match_item *ckpt_match_item_at(
    const ckpt_match_result *r, ckpt_match_list list, size_t i);
/* The unique best rewrite, or NULL (none beats the keys as they are, or
 * two tie). Borrowed. */
CKPT_API const ckpt_rewrite *ckpt_match_rewrite(const ckpt_match_result *r);
/* Candidate rewrites, best first (matches descending, then simplicity,
 * then description): those matching more than half as many names as the
 * best, at most 8. Borrowed. */
CKPT_API size_t ckpt_match_candidate_count(const ckpt_match_result *r);
CKPT_API const ckpt_rewrite *ckpt_match_candidate(const ckpt_match_result *r,
                                                  size_t i);
/* See "warning" above; borrowed, NULL when none. */
CKPT_API const char *ckpt_match_warning(const ckpt_match_result *r);
/* The top-level entries ckpt_match_rewrite leaves out when it selects a
 * subtree (applied or not): first segments of the checkpoint keys and
 * (checkpoints, not JSON manifests) non-tensor values outside it,
 * distinct, sorted by bytes; none for other rewrites. i < count; NULL out
 * of range; borrowed. */
CKPT_API size_t ckpt_match_ignored_count(const ckpt_match_result *r);
CKPT_API const char *ckpt_match_ignored(const ckpt_match_result *r,
                                        size_t i);
/* The name ckpt_match_rewrite gives checkpoint entry i (keys it does not
 * cover keep their name, less any dropped wrapper segments), or NULL when
 * there is no rewrite. Borrowed. */
CKPT_API const char *ckpt_match_rewritten(const ckpt_match_result *r,
                                          size_t i);

/* ckpt_diff: two checkpoints (or, keys_only, two manifests) compared key by
 * key and value by value: common tensors of equal shape element by
 * element and, unless keys_only, the non-tensor leaves of the two trees
 * (ckpt_file_value: epoch, step, learning rates, flags, config).
 *
 * Trees: a safetensors file written by ckpt (with "ckpt.structure") is
 * compared as the tree it records (ckpt_convert's input: nesting, values,
 * dtypes and views), keys_only too, so a .pt and its conversion compare
 * equal, and differ where their epochs or learning rates do.
 *
 * Values: a tensor is bitwise equal when dtypes match and the logical
 * contents (ckpt_tensor_read bytes) are identical. Otherwise elements are
 * compared as values: every float width is widened to double (F16, BF16,
 * F8 E4M3/E5M2/E8M0/E4M3FNUZ/E5M2FNUZ, F32, F64; complex per component),
 * integers and BOOL as numbers (the same integer dtype exactly, beyond
 * 2^53 too); tensors of different dtypes are compared this way as well.
 * Element i differs unless |a-b| <= atol + rtol*|b|, where NaN equals NaN
 * and an infinity equals the same infinity (torch.testing.assert_close
 * with equal_nan; b is the reference). max_abs_diff = max |a-b|,
 * max_rel_diff = max |a-b|/|b| (infinite where b is 0 and a is not), both
 * over element pairs without NaN. Sub-byte and quantized dtypes (F4,
 * F6_*, Q*) are compared bitwise only (compared = 0).
 *
 * Leaves (paired by flattened name): ints exactly, however large; floats
 * by the rule above (rtol, atol; NaN equals NaN); str, bytes, bool and
 * none exactly; opaque objects by "module.qualname" (torch dtypes by
 * their canonical name: torch.float is torch.float32). Leaves of
 * different kinds differ (0 and 0.0, 1 and True).
 *
 * Key rewrites: when keys are left unpaired on both sides, the rewrite of
 * B's keys that ckpt_match(B, A) infers (unique best; FORMATS.md §4.6) is
 * reported when it pairs every key of both sides; or every key of A while
 * B's other keys keep their names in other top-level entries (B is a
 * training checkpoint holding A under 'model.', say); or every key of B
 * while A's other keys lie in top-level entries beside the one the
 * rewrite adds. opts->normalize applies it to B's tensor and value names
 * (names it does not cover are kept) before comparing; names in the
 * lists are then B's rewritten names.
 *
 * identical: no key or leaf only on one side, no shape or dtype
 * difference, no differing element in any common tensor (with rtol = atol
 * = 0: values equal, e.g. 0.0 and -0.0; bitwise_equal tells about the
 * bytes) and no differing leaf.
 *
 * `ckpt diff --json` writes {"a", "b", "identical", "keys_only",
 * "only_in_a": [name...], "only_in_b": [name...], "shape_mismatch":
 * [{"name", "a": [dims], "b": [dims]}...], "dtype_mismatch": [{"name",
 * "a", "b"}...], "equal": N | null, "tensors": [{"name", "bitwise_equal",
 * "compared", "numel", "differing", "max_abs_diff", "max_rel_diff",
 * "nan": {"a", "b"}, "inf": {"a", "b"}, "nonfinite_mismatch",
 * "positions": [index...]}...] | null, "values": {"only_in_a":
 * [name...], "only_in_b": [name...], "differing": [{"name", "a": {"type",
 * "value"}, "b": {"type", "value"}}...], "equal": N} | null, "rewrite":
 * {"description", "matches", "applied": bool, "note"} | null} (null:
 * keys only; non-finite doubles as "inf"/"nan" strings; a leaf's type is
 * its ckpt_kind_name and its value written as `ckpt inspect --json` writes
 * values; rewrite: ckpt_diff_rewrite and ckpt_diff_rewrite_note). */
typedef struct ckpt_diff_options {
    double rtol;      /* relative tolerance, >= 0 */
    double atol;      /* absolute tolerance, >= 0 */
    int keys_only;    /* 1: names, dtypes and shapes only (manifests OK) */
    int normalize;    /* 1: apply the key rewrite (above) to B's names */
} ckpt_diff_options;
#define CKPT_DIFF_OPTIONS_INIT { 0.0, 0.0, 0, 0 }

/* At most this many NaN/Inf mismatch positions are kept per tensor. */
#define CKPT_DIFF_MAX_POSITIONS 16

/* Value comparison of one common tensor. Borrowed from the result. */
typedef struct ckpt_tensor_diff {
    const char *name;
    const ckpt_manifest_entry *a, *b;
    int bitwise_equal;
    int compared;          /* 1: values compared (numeric dtypes) */
    uint64_t numel;
    uint64_t differing;    /* elements outside tolerance */
    double max_abs_diff;   /* 0 when no element pair differs */
    double max_rel_diff;
    uint64_t nan_a, nan_b, inf_a, inf_b; /* non-finite values per side
                                            (complex: per component) */
    uint64_t nonfinite_mismatch; /* elements where NaN/Inf do not agree */
    size_t npositions;     /* first positions (flat row-major element */
    uint64_t positions[CKPT_DIFF_MAX_POSITIONS]; /* indices) of those */
} ckpt_tensor_diff;

typedef enum ckpt_diff_list {
    CKPT_DIFF_ONLY_IN_A = 0,
    CKPT_DIFF_ONLY_IN_B,
    CKPT_DIFF_SHAPE_MISMATCH,
    CKPT_DIFF_DTYPE_MISMATCH
} ckpt_diff_list;

typedef struct ckpt_diff_result ckpt_diff_result;

/* Compares a and b (both must outlive the result); opts may be NULL.
 * Unless keys_only, both manifests must come from files
 * (ckpt_manifest_file), else CKPT_E_INVALID_ARG; so are negative or NaN
 * tolerances. Returns 0 whatever the differences; CKPT_E_NOMEM; a tensor
 * read error (ckpt_tensor_read codes); for a safetensors file whose
 * "ckpt.structure" is malformed, CKPT_E_FORMAT naming the problem (and
 * CKPT_E_LIMIT for a tree beyond the file's open limits). Cost: O(keys)
 * lookups, plus rewrite inference (ckpt_match's) when keys are unpaired
 * on both sides; values stream once (memcmp in 16 MiB prefetched windows
 * first, element-wise decoding only where the bytes or dtypes differ). */
CKPT_API int ckpt_diff(ckpt_diff_result **out, const ckpt_manifest *a,
                       const ckpt_manifest *b, const ckpt_diff_options *opts);
CKPT_API void ckpt_diff_free(ckpt_diff_result *r); /* NULL-safe */
CKPT_API int ckpt_diff_identical(const ckpt_diff_result *r);
/* Names in a list, sorted; the entries on both sides (NULL on the side a
 * name is missing from) via ckpt_diff_pair. Borrowed. */
CKPT_API size_t ckpt_diff_count(const ckpt_diff_result *r,
                                ckpt_diff_list list);
CKPT_API const char *ckpt_diff_name(const ckpt_diff_result *r,
                                    ckpt_diff_list list, size_t i);
CKPT_API void ckpt_diff_pair(const ckpt_diff_result *r, ckpt_diff_list list,
                             size_t i, const ckpt_manifest_entry **a,
                             const ckpt_manifest_entry **b);
/* Common tensors of equal shape that are not bitwise equal, sorted by
 * name; ckpt_diff_equal_count counts the bitwise-equal ones. Both 0
 * with keys_only. */
CKPT_API size_t ckpt_diff_tensor_count(const ckpt_diff_result *r);
CKPT_API const ckpt_tensor_diff *ckpt_diff_tensor(const ckpt_diff_result *r,
                                                  size_t i);
CKPT_API uint64_t ckpt_diff_equal_count(const ckpt_diff_result *r);

/* Non-tensor leaves only on one side, or on both with different values
 * (rules above). */
typedef enum ckpt_diff_value_list {
    CKPT_DIFF_VALUES_ONLY_IN_A = 0,
    CKPT_DIFF_VALUES_ONLY_IN_B,
    CKPT_DIFF_VALUES_DIFFERING
} ckpt_diff_value_list;

/* One listed leaf: a is NULL for a leaf only in B, b for one only in A.
 * Borrowed from the result. */
typedef struct ckpt_value_diff {
    const char *name;
    const ckpt_value *a, *b;
} ckpt_value_diff;

/* Lists sorted by name (byte order), all empty with keys_only; item i <
 * count, else NULL. Borrowed. */
CKPT_API size_t ckpt_diff_value_count(const ckpt_diff_result *r,
                                      ckpt_diff_value_list list);
CKPT_API const ckpt_value_diff *ckpt_diff_value(const ckpt_diff_result *r,
                                                ckpt_diff_value_list list,
                                                size_t i);
/* Leaves on both sides with equal values. */
CKPT_API uint64_t ckpt_diff_values_equal(const ckpt_diff_result *r);
/* The key rewrite of B (see "Key rewrites"), or NULL when none pairs the
 * keys: description as ckpt_match gives it, matches: key pairs it forms,
 * applied: 1 with normalize. Borrowed. */
CKPT_API const ckpt_rewrite *ckpt_diff_rewrite(const ckpt_diff_result *r);
/* The same for people: "B's keys are A's with 'module.' added", "B's
 * keys under 'model.' are A's; B's other top-level entries: epoch,
 * optimizer"; NULL when there is no rewrite. Borrowed. */
CKPT_API const char *ckpt_diff_rewrite_note(const ckpt_diff_result *r);

/* Renaming keys: rules applied in order to every tensor key.
 *   STRIP_PREFIX P: keys starting with P lose it (P is whole segments: a
 *     missing trailing '.' is implied); other keys are unchanged;
 *   ADD_PREFIX P: every key gains P (a bare top-level tensor "" becomes P
 *     without its dot);
 *   REPLACE OLD NEW: every occurrence of OLD made of whole segments (it
 *     starts a key or follows '.', and ends the key, or precedes '.', or
 *     ends with '.') becomes NEW, left to right: "_orig_mod." -> "" drops
 *     a wrapper wherever it stands; "layer" does not touch "layers.0";
 *   AUTO spec: the rewrite ckpt_match infers against spec, which must give
 *     a complete match (as with normalize and no allowed exception).
 * A rule that changes no key is refused (CKPT_E_NOTFOUND, naming it; for
 * AUTO: the keys already match); two keys that would end up with one name
 * are refused (CKPT_E_MISMATCH, naming both). */
typedef enum ckpt_rename_op {
    CKPT_RENAME_STRIP_PREFIX = 1,
    CKPT_RENAME_ADD_PREFIX,
    CKPT_RENAME_REPLACE,
    CKPT_RENAME_AUTO
} ckpt_rename_op;

typedef struct ckpt_rename_rule {
    ckpt_rename_op op;
    const char *arg;            /* the prefix, or OLD */
    const char *arg2;           /* NEW (REPLACE) */
    const ckpt_manifest *spec;  /* AUTO */
} ckpt_rename_rule;

/* The mapping old name -> new name for every key of a manifest. */
typedef struct ckpt_rename_plan ckpt_rename_plan;

/* Applies rules[0..nrules) to the keys of m (borrowed: m must outlive the
 * plan). Returns 0; CKPT_E_INVALID_ARG (an empty prefix or OLD, a NULL
 * spec); CKPT_E_NOTFOUND, CKPT_E_MISMATCH (see above; for AUTO also when
 * no complete rewrite exists, naming the best one); CKPT_E_NOMEM. */
CKPT_API int ckpt_rename_plan_new(ckpt_rename_plan **out,
                                  const ckpt_manifest *m,
                                  const ckpt_rename_rule *rules,
                                  size_t nrules);
CKPT_API void ckpt_rename_plan_free(ckpt_rename_plan *p); /* NULL-safe */
/* Keys in the plan (the manifest's order), and how many change. */
CKPT_API size_t ckpt_rename_plan_count(const ckpt_rename_plan *p);
CKPT_API size_t ckpt_rename_plan_changed(const ckpt_rename_plan *p);
/* Old and new name of key i; borrowed; NULL out of range. */
CKPT_API const char *ckpt_rename_plan_from(const ckpt_rename_plan *p,
                                           size_t i);
CKPT_API const char *ckpt_rename_plan_to(const ckpt_rename_plan *p, size_t i);

/* Renames the tensor keys of checkpoint `in` by the rules and writes the
 * result to `out` atomically (nothing is written when out is NULL: a dry
 * run). The output format is the input's: safetensors (a sharded set
 * becomes one file) or a torch zip (legacy and pickle inputs too); the
 * tree (for ckpt-written safetensors: the tree "ckpt.structure" records)
 * keeps its shape where it can: a tensor whose new name still starts with
 * the flattened path of one of its enclosing dicts stays in the deepest
 * such dict under the rest of its name (a flat state dict is renamed in
 * place, order kept); otherwise it moves to the root dict; dicts emptied
 * by moves disappear. Non-tensor values and metadata (less ckpt.* keys,
 * rewritten by the writer) are kept as they are. plan (may be NULL)
 * receives the mapping, which owns its names. Returns 0; the
 * ckpt_rename_plan_new codes; CKPT_E_UNSUPPORTED (a tensor would move out
 * of a list or tuple, the root is not a dict to receive a moved tensor,
 * two tensors share a flattened name, two entries of one dict would share
 * a key; the writer's cases); the ckpt_open and writer codes. */
CKPT_API int ckpt_rename(ckpt_rename_plan **plan, const char *in,
                         const char *out, const ckpt_rename_rule *rules,
                         size_t nrules, const ckpt_open_options *opts);

/* Key hygiene of an opened file (for `ckpt doctor`): the wrapper segments
 * its tensor keys carry and the rename that removes them.
 * Wrappers: "module." (DataParallel/DDP; counted where it leads a key once
 * the other wrappers are dropped, never in the middle of a key), then
 * "_orig_mod." (torch.compile), "_fsdp_wrapped_module." (FSDP),
 * "_checkpoint_wrapped_module." (activation checkpointing), each counted
 * anywhere as a whole segment that is not the last. leading: every key
 * holding it starts with it. The fix: each wrapper other than "module."
 * stripped (leading) or replaced by nothing, then "module." stripped as
 * many times as it repeats; checked with ckpt_rename_plan_new: when it
 * would give two keys one name there is no fix and ckpt_keys_collision
 * says which. */
typedef struct ckpt_key_wrapper {
    const char *segment; /* "module.", "_orig_mod.", ... (static) */
    int leading;
    uint64_t keys;       /* tensor keys holding it */
} ckpt_key_wrapper;

typedef struct ckpt_keys_report ckpt_keys_report;

/* Returns 0 (also for clean keys: no wrapper, no fix), CKPT_E_INVALID_ARG,
 * CKPT_E_NOMEM. The report owns what it holds: f may be closed first. */
CKPT_API int ckpt_keys_hygiene(ckpt_keys_report **out, const ckpt_file *f);
CKPT_API void ckpt_keys_report_free(ckpt_keys_report *r); /* NULL-safe */
CKPT_API size_t ckpt_keys_wrapper_count(const ckpt_keys_report *r);
CKPT_API const ckpt_key_wrapper *ckpt_keys_wrapper(const ckpt_keys_report *r,
                                                   size_t i);
/* The fix as rules for ckpt_rename (borrowed, static strings), and as
 * `ckpt rename IN OUT` arguments ("--strip-prefix 'module.'", shell-quoted;
 * NULL when there is nothing to fix). */
CKPT_API size_t ckpt_keys_fix_count(const ckpt_keys_report *r);
CKPT_API const ckpt_rename_rule *ckpt_keys_fix(const ckpt_keys_report *r,
                                               size_t i);
CKPT_API const char *ckpt_keys_fix_args(const ckpt_keys_report *r);
/* Why there is no fix although wrappers were found ("'module.x' and 'x'
 * would both be named 'x'"), or NULL. Borrowed. */
CKPT_API const char *ckpt_keys_collision(const ckpt_keys_report *r);

/* ---- write: safetensors and torch writers, ckpt_convert, tree builder
 * (src/write.c, write_safetensors.c, write_torch.c, write_tree.c,
 * convert.c)
 *
 * Every file is written through the atomic commit: a temporary file in the
 * target's directory, fsync, rename over the target, fsync of the
 * directory; on any failure the target is untouched.
 *
 * safetensors output is laid out as the reference writer does it
 * (FORMATS.md §1.5): tensors contiguous, sorted by dtype (descending enum
 * order) then name, offsets from 0, compact JSON header padded with spaces
 * to a multiple of 8. Its "__metadata__" holds:
 *   "format": "pt" unless the caller gives "format" (huggingface loaders
 *       refuse metadata without it); then the caller's metadata in order;
 *   "ckpt.structure" (omitted when the tree is a plain dict of distinct
 *       tensors in file order): JSON text {"version":N,"root":V[,
 *       "storages":[S...]]} describing the whole tree; N is 2 when a dict
 *       records a "class" or "state" (below), else 1, so that files
 *       without them stay readable by readers of version 1; readers read
 *       both. V is null, true,
 *       false, an integer (int64), a real (shortest round-trip text), a
 *       string, or an object with one tag: {"int":"decimal"} (beyond
 *       int64), {"float":"16 hex digits"} (IEEE bits of a NaN or an
 *       infinity), {"bytes":"hex"}, {"list":[V...]}, {"tuple":[V...]},
 *       {"set":[V...]}, {"dict":[[K,V]...][,"class":C][,"state":V]}
 *       (keys are values too, in insertion order; version 2: C is
 *       "collections.OrderedDict" or "collections.Counter" for a dict
 *       built as one (ckpt_value_dict_class), and the state, a dict, only
 *       with a class, holds its attributes (ckpt_value_dict_state: a torch
 *       state dict's {"_metadata": ...}), written after the items),
 *       {"dtype":"float32"} (a torch dtype), {"ref":N}
 *       (the N-th list, tuple, set, dict or tensor in document order,
 *       counted where it first appears: a node reached twice), and
 *       {"tensor":"NAME"[,"dtype":D][,"requires_grad":true]
 *       [,"parameter":true][,"storage":G,"offset":O,"stride":[...]]}: the
 *       tensor stored as NAME ("parameter": saved as an nn.Parameter,
 *       ckpt_tensor_is_parameter; readers of version 1 ignore it); D when the
 *       tensor's dtype is not the stored one (C128 and C32, which
 *       safetensors lacks, are stored as F64/F16 with a trailing dimension
 *       of 2); G, O (elements) and the strides place it in storage G of
 *       "storages" when several different views share one storage.
 *       S = {"nbytes":N[,"data":"NAME"]}: NAME, when present, is a stored
 *       tensor covering the whole storage.
 *   "ckpt.aliases" (when some): JSON text {"alias":"NAME",...}: a tensor
 *       reachable under several names with the same view of the same
 *       storage (tied weights) is stored once, under the first name in
 *       byte order; ckpt_open lists it under every name.
 *   "ckpt.xxh3": JSON text {"NAME":"16 hex digits",...}: XXH3-64 of each
 *       stored tensor's bytes (checked by ckpt_verify).
 * torch zip output is what torch.save writes (protocol-2 data.pkl whose
 * opcodes and globals are all on torch's weights_only allowlist, stored
 * records aligned to 64 bytes, "byteorder", "version"; an OrderedDict is
 * written as collections.OrderedDict() + SETITEMS + BUILD of its state,
 * a parameter as torch._utils._rebuild_parameter), plus a record
 * "<archive>/extra/ckpt_meta.json" that torch ignores: a JSON object of
 * strings, the caller's metadata and "ckpt.xxh3" with one digest per
 * flattened tensor name (of the logical contents); ckpt_open exposes it
 * as the file's metadata.
 *
 * Values neither format can hold (opaque objects, quantized tensors,
 * cycles) make the write fail with CKPT_E_UNSUPPORTED naming them. */

/* Metadata recorded besides the tensors (architecture config, dtype
 * intent, parallel layout, library versions...). nmeta pairs of UTF-8
 * strings, borrowed for the call; keys non-empty, unique, not starting
 * with "ckpt." (reserved). */
typedef struct ckpt_write_options {
    const char *const *meta_keys;
    const char *const *meta_values;
    size_t nmeta;
    int backup; /* 1: keep the file being replaced as "OUT.bak", itself
                   replaced atomically (both names always hold a complete
                   file) */
} ckpt_write_options;
#define CKPT_WRITE_OPTIONS_INIT { NULL, NULL, 0, 0 }

typedef struct ckpt_convert_options {
    ckpt_open_options open;    /* limits for reading the input */
    ckpt_format format;        /* CKPT_FORMAT_SAFETENSORS or
                                  CKPT_FORMAT_TORCH_ZIP; 0: from the output
                                  name (".safetensors"; ".pt", ".pth",
                                  ".bin", ".ckpt") */
    const char *const *select; /* nselect name prefixes; non-empty: keep
                                  only tensors and values whose flattened
                                  name is a prefix P or starts with P
                                  followed by "." (P ending in "." matches
                                  any continuation); paths keep their
                                  names, lists and tuples keep only
                                  selected items (renumbered) */
    size_t nselect;
    const char *config_json;   /* a JSON object (e.g. the architecture
                                  config), stored compact as metadata
                                  "config"; NULL for none */
    ckpt_write_options write;  /* metadata added (wins over the input's) */
} ckpt_convert_options;
#define CKPT_CONVERT_OPTIONS_INIT \
    { CKPT_OPEN_OPTIONS_INIT, (ckpt_format)0, NULL, 0, NULL, CKPT_WRITE_OPTIONS_INIT }

typedef struct ckpt_convert_report {
    ckpt_format format; /* written format */
    uint64_t tensors;   /* tensors (safetensors) or storages (torch) written */
    uint64_t bytes;     /* size of the output file */
} ckpt_convert_report;

/* Converts checkpoint `in` (any format ckpt_open reads) into `out`,
 * atomically. The tree written is the input's (for a safetensors file with
 * "ckpt.structure", the original tree it records: safetensors to torch
 * rebuilds the nesting, values, dtypes and shared storages), restricted by
 * opts->select. Metadata: the input's (safetensors __metadata__, index
 * metadata, or a ckpt torch archive's record) without ckpt.* keys, then
 * "config", then opts->write (later entries replace earlier ones with the
 * same key). opts and report may be NULL.
 * Returns 0; CKPT_E_INVALID_ARG (no format for the output name, bad
 * options or metadata, bad config JSON); CKPT_E_NOTFOUND (select matched
 * nothing); CKPT_E_UNSUPPORTED (opaque objects, named, unless select
 * leaves them out; a tensor named "__metadata__" or two tensors with one
 * name in safetensors output; a dtype the output format lacks);
 * CKPT_E_IO (input unreadable, output not writable); the ckpt_open codes
 * for a malformed input; CKPT_E_NOMEM. Memory: tensor bytes stream from
 * the input's mapping into the output, its pages released once written
 * (bounded buffers for views); only a storage rebuilt from views that no
 * stored tensor covers whole is allocated, up to limits.max_inflate_bytes. */
CKPT_API int ckpt_convert(const char *in, const char *out,
                          const ckpt_convert_options *opts,
                          ckpt_convert_report *report);

/* A tree builder for writers without a checkpoint file (e.g. a Python
 * binding saving a training state): values are created in a ckpt_tree,
 * which owns them, and composed with ckpt_tree_append / ckpt_tree_set. A
 * value may be inserted several times (tied weights: the same tensor under
 * two names is one object in the output). Strings and bytes are copied;
 * tensor data is borrowed and must stay valid until the tree is written.
 * Free with ckpt_tree_free (NULL-safe), which frees every value. Not
 * thread-safe per tree. */
typedef struct ckpt_tree ckpt_tree;
CKPT_API int ckpt_tree_new(ckpt_tree **out);
CKPT_API void ckpt_tree_free(ckpt_tree *t);
/* Leaves. Each returns 0, CKPT_E_NOMEM, or CKPT_E_INVALID_ARG (NULL
 * arguments, text that is not valid UTF-8); *out is NULL on failure. */
CKPT_API int ckpt_tree_none(ckpt_value **out, ckpt_tree *t);
CKPT_API int ckpt_tree_bool(ckpt_value **out, ckpt_tree *t, int v);
CKPT_API int ckpt_tree_int(ckpt_value **out, ckpt_tree *t, int64_t v);
CKPT_API int ckpt_tree_float(ckpt_value **out, ckpt_tree *t, double v);
CKPT_API int ckpt_tree_str(ckpt_value **out, ckpt_tree *t, const char *s,
                           size_t len);
CKPT_API int ckpt_tree_bytes(ckpt_value **out, ckpt_tree *t, const void *p,
                             size_t len);
/* Empty containers, filled with ckpt_tree_append (list, tuple) and
 * ckpt_tree_set (dict; keys are leaves or tuples, kept in insertion
 * order). */
CKPT_API int ckpt_tree_list(ckpt_value **out, ckpt_tree *t);
CKPT_API int ckpt_tree_tuple(ckpt_value **out, ckpt_tree *t);
CKPT_API int ckpt_tree_dict(ckpt_value **out, ckpt_tree *t);
CKPT_API int ckpt_tree_append(ckpt_tree *t, ckpt_value *seq,
                              ckpt_value *item);
CKPT_API int ckpt_tree_set(ckpt_tree *t, ckpt_value *dict, ckpt_value *key,
                           ckpt_value *val);
/* A tensor over caller memory: `size` bytes at `data` (borrowed), the
 * contiguous row-major little-endian elements of `shape` (ndim <=
 * CKPT_MAX_NDIM); size must be numel x bits / 8 exactly. Returns 0,
 * CKPT_E_INVALID_ARG (unknown dtype, size mismatch, ndim too large),
 * CKPT_E_NOMEM. */
CKPT_API int ckpt_tree_tensor(ckpt_value **out, ckpt_tree *t, ckpt_dtype dtype,
                              unsigned ndim, const uint64_t *shape,
                              const void *data, size_t size);
/* What torch's Module.state_dict() returns, so that a saved state dict
 * loads back as one (load_state_dict reads its per-module versions):
 * ckpt_tree_set_dict_class makes `dict` (of this tree) a `cls`,
 * "collections.OrderedDict" or "collections.Counter", or a plain dict
 * again with NULL; ckpt_tree_set_dict_state sets the attributes of such a
 * dict, `state` a dict of this tree (e.g. {"_metadata": OrderedDict(
 * {"": {"version": 1}, ...})}), or NULL for none; the state's values are
 * written like the items, but may not hold tensors (CKPT_E_UNSUPPORTED at
 * the write). ckpt_tree_set_parameter marks `tensor` as an nn.Parameter
 * with that requires_grad (torch.save's _rebuild_parameter). Each returns
 * 0 or CKPT_E_INVALID_ARG (NULL arguments, a value of the wrong kind, an
 * unknown class, a state on a plain dict or a plain class for a dict with
 * a state). */
CKPT_API int ckpt_tree_set_dict_class(ckpt_tree *t, ckpt_value *dict,
                                      const char *cls);
CKPT_API int ckpt_tree_set_dict_state(ckpt_tree *t, ckpt_value *dict,
                                      ckpt_value *state);
CKPT_API int ckpt_tree_set_parameter(ckpt_tree *t, ckpt_value *tensor,
                                     int requires_grad);

/* Writes the tree under `root` (built with ckpt_tree_*, or the root of an
 * opened file) to `path` as `format` (CKPT_FORMAT_SAFETENSORS or
 * CKPT_FORMAT_TORCH_ZIP), atomically. opts may be NULL. Returns 0,
 * CKPT_E_INVALID_ARG, CKPT_E_UNSUPPORTED (see above), CKPT_E_IO,
 * CKPT_E_LIMIT (a safetensors header over 100 MB), CKPT_E_NOMEM. */
CKPT_API int ckpt_tree_write(const ckpt_value *root, const char *path,
                             ckpt_format format,
                             const ckpt_write_options *opts);

/* ---- store prune report (src/store.c) */

/* ckpt_store_prune, and then *out receives the listing of what is left,
 * as ckpt_store_list would give it (every generation left was verified by
 * the pruning: the kept ones, the corrupt ones left in place, LATEST's),
 * so a caller can report the corrupt generations without verifying twice.
 * Free with ckpt_store_list_free (NULL-safe); *out is NULL on failure.
 * *removed (may be NULL) receives the number of files removed, also on
 * failure. Returns the ckpt_store_prune codes, or CKPT_E_INVALID_ARG when
 * out is NULL. */
CKPT_API int ckpt_store_prune_list(ckpt_store_listing **out, size_t *removed,
                                   const char *dir,
                                   const ckpt_store_options *opts);

#ifdef __cplusplus
}
#endif
#endif /* CKPT_H */
