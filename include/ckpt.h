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
 * scalar/array reconstruction) extended by `allow`. References:
 * FORMATS.md §5 (picklescan, fickling, modelscan bypasses). */
typedef enum ckpt_verdict {
    CKPT_VERDICT_SAFE = 0,          /* only allowlisted globals */
    CKPT_VERDICT_UNSAFE,            /* a global off the allowlist is used */
    CKPT_VERDICT_UNSCANNABLE,       /* content could not be fully examined */
    CKPT_VERDICT_NOT_A_CHECKPOINT   /* no pickle or safetensors content */
} ckpt_verdict;

typedef enum ckpt_severity {
    CKPT_SEVERITY_INFO = 0,
    CKPT_SEVERITY_SUSPICIOUS,       /* unknown global: cannot vouch for it */
    CKPT_SEVERITY_DANGEROUS         /* known code-execution family */
} ckpt_severity;

/* One finding. Strings are borrowed from the report. */
typedef struct ckpt_finding {
    ckpt_severity severity;
    const char *kind;    /* e.g. "global", "call", "build", "encrypted",
                            "polyglot", "trailing-bytes", "parse-error" */
    const char *global;  /* "module.qualname", or NULL */
    const char *member;  /* zip member or pickle name ("" for the file) */
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

#ifdef __cplusplus
}
#endif
#endif /* CKPT_H */
