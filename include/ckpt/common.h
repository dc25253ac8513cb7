/* ckpt/common.h - errors, the allocator hook, limits against hostile input, dtypes.
 * Part of the public API of libckpt; include <ckpt.h>. */
#ifndef CKPT_INCLUDE_COMMON_H
#define CKPT_INCLUDE_COMMON_H

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

/* The version this header describes (the build reads it from here: this is
 * its one place). ckpt_version_number() gives the library's at run time. */
#define CKPT_VERSION_MAJOR 0
#define CKPT_VERSION_MINOR 2
#define CKPT_VERSION_PATCH 0
#define CKPT_VERSION_NUMBER                                                                        \
    (CKPT_VERSION_MAJOR * 10000 + CKPT_VERSION_MINOR * 100 + CKPT_VERSION_PATCH)
#define CKPT_VERSION_STRING "0.2.0"

/* CKPT_VERSION_NUMBER and CKPT_VERSION_STRING of the library running. */
CKPT_API unsigned ckpt_version_number(void);
CKPT_API const char *ckpt_version_string(void);

/* Pinned error codes (never renumbered). */
enum {
    CKPT_OK = 0,
    CKPT_E_IO = -1,           /* open/read/mmap/write failed (errno in message) */
    CKPT_E_NOMEM = -2,        /* an allocation failed */
    CKPT_E_TRUNCATED = -3,    /* input ends before a structure it declares */
    CKPT_E_FORMAT = -4,       /* malformed input */
    CKPT_E_LIMIT = -5,        /* a configured limit (ckpt_limits) was exceeded */
    CKPT_E_UNSUPPORTED = -6,  /* recognised but unsupported (TorchScript, tar...) */
    CKPT_E_UNSAFE = -7,       /* content would execute code (scanner verdicts) */
    CKPT_E_CHECKSUM = -8,     /* CRC-32 or digest mismatch */
    CKPT_E_MISMATCH = -9,     /* two things that must agree do not */
    CKPT_E_INVALID_ARG = -10, /* caller error */
    CKPT_E_NOTFOUND = -11     /* no such tensor/member/key */
};

/* Details of the last failure on the calling thread. All strings are
 * borrowed and valid until the next failing call on this thread.
 * file: path or name given to open ("" if none); member: zip member,
 * shard file or pickle name ("" if none); offset: absolute byte offset in
 * `file` where the problem was found, or UINT64_MAX when unknown;
 * os_errno: for CKPT_E_IO where a system call on `file` failed (open,
 * read, stat, map, the atomic write's temporary file), its errno (ENOENT,
 * EACCES, EISDIR...), else 0 (since 0.2). */
typedef struct ckpt_error {
    int code;
    const char *message;
    const char *file;
    const char *member;
    uint64_t offset;
    int os_errno;
} ckpt_error;

CKPT_API const ckpt_error *ckpt_error_last(void);
/* "CKPT_E_FORMAT" etc.; "unknown" for other values. Static string. */
CKPT_API const char *ckpt_error_name(int code);

/* s as one POSIX shell word, for a command printed to be pasted (doctor's
 * fixes): s itself when it is non-empty and only [A-Za-z0-9_./-], else
 * in single quotes, each ' written '\''. Writes at most cap bytes with
 * the terminating NUL (cut short but terminated when cap is short;
 * nothing when cap is 0) and returns the word's whole length without the
 * NUL, as snprintf does (since 0.2). */
CKPT_API size_t ckpt_shell_quote(char *buf, size_t cap, const char *s);

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
    uint64_t max_zip_entries;   /* central-directory entries (and files of
                                   a training directory); 0 (default): as
                                   many as the file's size holds (46 bytes
                                   each), which bounds the work */
    uint64_t max_inflate_bytes; /* total decompressed bytes (zip bombs) */
    uint64_t max_index_bytes;   /* sharded index JSON file */
    uint64_t max_inflate_ratio; /* decompressed bytes per input byte: with
                                   max_inflate_bytes, the one inflate budget
                                   of a file (open, scan and verify) */
} ckpt_limits;

#define CKPT_MAX_NDIM 64
#define CKPT_LIMITS_INIT                                                                           \
    {                                                                                              \
        .max_header_bytes = 100000000u, .max_tensors = 10000000u, .max_name_bytes = 65536u,        \
        .max_ndim = CKPT_MAX_NDIM, .max_depth = 1000u, .max_pickle_stack = 10000000u,              \
        .max_pickle_memo = 10000000u, .max_pickle_ops = 1000000000u, .max_zip_entries = 0u,        \
        .max_inflate_bytes = (uint64_t)1 << 32, .max_index_bytes = 100000000u,                     \
        .max_inflate_ratio = 100u                                                                  \
    }
/* Fills *l with the defaults (CKPT_LIMITS_INIT, for callers without
 * designated initializers). */
CKPT_API void ckpt_limits_init(ckpt_limits *l);

/* Progress of long work (convert, commit): called with done increasing
 * from 0 to total, units named where a callback is accepted; ctx is the
 * caller's. For a terminal's progress line, not for control: it cannot
 * stop the work. */
typedef void (*ckpt_progress_fn)(void *ctx, uint64_t done, uint64_t total);

/* Option structs: the first field is `version`, set by the struct's _INIT
 * macro or its *_options_init(opts, version) function (libgit2's
 * convention). A call given options whose version it does not know fails
 * with CKPT_E_INVALID_ARG; passing NULL options means the defaults. The
 * _INIT macros use designated initializers (C99, C++20); C++ before 20
 * uses the functions. */

/* ---------------------------------------------------------------- dtypes */

/* Element types, named as safetensors writes them (ckpt_dtype_name).
 * Types torch has and safetensors lacks use names in the same style:
 * C32 (complex32), C128 (complex128), QI8, QU8, QI32, QU4X2, QU2X4
 * (quantized storages), F4_X2 (torch.float4_e2m1fn_x2: one element is a
 * byte of two F4 values; safetensors writes it as F4 with the last
 * dimension doubled), BITS8, BITS16, BITS1X8, BITS2X4, BITS4X2 (torch's
 * untyped bits dtypes). */
typedef enum ckpt_dtype {
    CKPT_DT_UNKNOWN = 0,
    CKPT_DT_BOOL = 1,
    CKPT_DT_U8 = 2,
    CKPT_DT_I8 = 3,
    CKPT_DT_I16 = 4,
    CKPT_DT_U16 = 5,
    CKPT_DT_I32 = 6,
    CKPT_DT_U32 = 7,
    CKPT_DT_I64 = 8,
    CKPT_DT_U64 = 9,
    CKPT_DT_F16 = 10,
    CKPT_DT_BF16 = 11,
    CKPT_DT_F32 = 12,
    CKPT_DT_F64 = 13,
    CKPT_DT_C32 = 14,
    CKPT_DT_C64 = 15,
    CKPT_DT_C128 = 16,
    CKPT_DT_F8_E5M2 = 17,
    CKPT_DT_F8_E4M3 = 18,
    CKPT_DT_F8_E8M0 = 19,
    CKPT_DT_F8_E4M3FNUZ = 20,
    CKPT_DT_F8_E5M2FNUZ = 21,
    CKPT_DT_F4 = 22,
    CKPT_DT_F6_E2M3 = 23,
    CKPT_DT_F6_E3M2 = 24,
    CKPT_DT_QI8 = 25,
    CKPT_DT_QU8 = 26,
    CKPT_DT_QI32 = 27,
    CKPT_DT_QU4X2 = 28,
    CKPT_DT_QU2X4 = 29,
    CKPT_DT_F4_X2 = 30,
    CKPT_DT_BITS8 = 31,
    CKPT_DT_BITS16 = 32,
    CKPT_DT_BITS1X8 = 33,
    CKPT_DT_BITS2X4 = 34,
    CKPT_DT_BITS4X2 = 35,
    CKPT_DT_COUNT = 36
} ckpt_dtype;

/* "F32", "BF16", ...; "UNKNOWN" for out-of-range values. Static string. */
CKPT_API const char *ckpt_dtype_name(ckpt_dtype dt);
/* Parses a name of ckpt_dtype_name; CKPT_DT_UNKNOWN if none matches. */
CKPT_API ckpt_dtype ckpt_dtype_from_name(const char *name);
/* Bits per element: 1 (never), 4 (F4), 6 (F6_*), 8, 16, 32, 64 or 128. */
CKPT_API unsigned ckpt_dtype_bits(ckpt_dtype dt);

#ifdef __cplusplus
}
#endif
#endif /* CKPT_INCLUDE_COMMON_H */
