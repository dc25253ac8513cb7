/* value.h - the checkpoint model: a tree of values whose tensors reference
 * storages. Everything lives in the owning file's arena. */
#ifndef CKPT_VALUE_H
#define CKPT_VALUE_H

#include "base/alloc.h"
#include "ckpt.h"

/* Internal kinds, never visible through the public API: the pickle machine
 * uses them on its stack. */
enum {
    CKPT_KIND_GLOBAL_ = 100, /* a reference to module.name, not yet called */
    CKPT_KIND_STORAGE_,      /* a storage returned by persistent_load */
    CKPT_KIND_MARK_          /* pickle MARK on the stack */
};

/* A run of bytes holding tensor elements. */
/* A DCP global tensor is stored as chunks, each a tensor of its own (read
 * from a slice of a data file) covering a box of the global shape; the
 * chunks tile the tensor (open/dcp.c checks). */
typedef struct ckpt_chunk {
    const ckpt_tensor *t;    /* the chunk's elements; shape = sizes */
    const uint64_t *offsets; /* where the box starts, ndim elements */
    const char *file;        /* data file, relative to the directory */
    uint64_t offset, length; /* the slice of it holding the chunk */
    int rank;                /* from the file name "__RANK_N.distcp", or -1 */
} ckpt_chunk;

typedef struct ckpt_chunks {
    uint32_t ndim;
    const uint64_t *shape; /* the global shape */
    const ckpt_chunk *items;
    size_t n;
} ckpt_chunks;

typedef struct ckpt_storage {
    ckpt_dtype dtype;    /* element type the storage was declared with */
    int big_endian;      /* elements stored big-endian: swap on read */
    uint64_t nbytes;     /* declared size in bytes */
    const uint8_t *data; /* the bytes once resolved (mmap or arena); NULL before */
    /* the file data points into (source.h), set when the file is flattened;
     * NULL: data is ordinary memory. Read the bytes through
     * ckpt_storage_read, never through data, unless lending them out
     * zero-copy (ckpt_tensor_data). */
    const struct ckpt_source *source;
    const char *key;      /* torch key ("0" for data/0, legacy root key) */
    const char *member;   /* zip member / file holding the bytes ("" if none) */
    uint64_t file_offset; /* absolute offset of data[0] in the file, or
                              CKPT_NO_OFFSET (inflated, or from a pickle) */
    const char *device;   /* where torch saved it: the persistent id's
                              location ("cpu", "cuda:0", "mps"...); NULL
                              for bytes with no device (safetensors, numpy) */
    uint64_t id;          /* dense per-file identity (set when flattened) */
    /* legacy views of a root storage: bytes are root bytes from
     * base_elem_offset; resolved by the legacy reader. */
    struct ckpt_storage *base;
    uint64_t base_elem_offset;
    /* a DCP global tensor: the storage's bytes are the tensor's, row-major,
     * assembled from these chunks by ckpt_storage_read (data is NULL) */
    const ckpt_chunks *chunks;
    /* bytes not resolved yet: a deflated zip member is inflated only when
     * its bytes are read (ckpt_storage_resolve calls inflate, which sets
     * data, then clears inflate, under base/once.h's lock; the torch zip reader's, with its context) */
    int (*inflate)(struct ckpt_storage *st);
    void *inflate_ctx;
    /* what the input records for the storage's bytes: the CRC-32 of its
     * torch zip member (stored or deflated), the XXH3-64 digest of a
     * ckpt-written file's tensor that is the storage's bytes ("ckpt.xxh3",
     * recorded by convert: ckpt_verify_expect_digests); has_* 0: none.
     * Writers check them as they read the storage (model/tensor.h): a
     * corrupt input is refused, not converted. */
    uint32_t crc32;
    uint8_t has_crc32, has_xxh3;
    uint64_t xxh3;
} ckpt_storage;

struct ckpt_tensor {
    const char *name; /* flattened name ("" until flattened) */
    ckpt_dtype dtype;
    /* bytes beside dtype, so that a tensor is 64 bytes: a file of a
     * million tensors holds a million of these */
    uint8_t ndim; /* <= CKPT_MAX_NDIM */
    uint8_t requires_grad;
    /* built as torch.nn.Parameter (_rebuild_parameter,
     * _rebuild_parameter_with_state, NEWOBJ Parameter): writers rebuild it
     * as one, requires_grad being the parameter's */
    uint8_t is_parameter;
    /* built as a numpy.ndarray (ndarray.__setstate__): loaders and writers
     * give back a numpy array, not a torch tensor */
    uint8_t is_numpy;
    uint64_t *shape;         /* ndim elements (arena) */
    uint64_t *stride;        /* ndim elements, in elements */
    uint64_t storage_offset; /* in elements */
    uint64_t numel;
    uint64_t nbytes; /* numel * bits / 8 */
    ckpt_storage *storage;
};

/* The mapping class a DICT was built as (ckpt_value.dict_class). */
enum {
    CKPT_DICT_PLAIN = 0, /* dict, or a dict-kind value of the JSON formats */
    CKPT_DICT_ORDERED,   /* collections.OrderedDict (torch state dicts) */
    CKPT_DICT_COUNTER,   /* collections.Counter */
    /* the state dict of a module object of a whole-model pickle or a
     * TorchScript archive (builders.h): an OrderedDict to every writer */
    CKPT_DICT_MODULE
};
/* "collections.OrderedDict", "collections.Counter", or NULL (plain). */
const char *ckpt_dict_class_name(int cls);
/* Name of a value kind for messages, internal kinds included ("global",
 * "storage", "mark"). Static string. */
const char *ckpt_value_kind_name(int kind);

struct ckpt_value {
    uint8_t kind; /* ckpt_kind or CKPT_KIND_*_ above */
    /* DICT: CKPT_DICT_*; here rather than in u.dict, whose growth would
     * make every value bigger. STR: CKPT_STR_SURROGATE when the pickle's
     * text held a lone surrogate, here U+FFFD (pickle.h) */
    uint8_t dict_class;
    /* built as the other class of its kind, which torch.load gives back
     * and writers rebuild: SET a frozenset, TUPLE a torch.Size, STR a
     * torch.device (its text "cuda:1"), BYTES a bytearray; DICT: bit 0,
     * it holds a bool or float key (set with |=: the bits above are the
     * kinds of number key ckpt_value_dict_set saw, ckpt_value_dict_twin's) */
    uint8_t alt;
    /* BOOL, INT, FLOAT built from a numpy scalar
     * (numpy.core.multiarray.scalar): its ckpt_dtype, so that loaders and
     * writers give back a numpy scalar of that dtype; 0 otherwise */
    uint8_t np_dtype;
    /* Where the pickle machine built it (pickle.h): 1 + the offset, in its
     * pickle stream, of the opcode that pushed it first; 0 when it comes
     * from no pickle or lies 4 GiB or more into one; CKPT_PK_SHARED for a
     * value the machine hands to several opcodes (none of them is where it
     * was built). In the padding after the bytes above, so a value stays
     * 48 bytes. Read it through ckpt_value_at. */
    uint32_t pk_at;
    union {
        int b;
        struct {
            int64_t v;           /* valid when decimal == NULL */
            const char *decimal; /* exact decimal text of a big int (|v| >= 2^63) */
        } i;
        double f;
        struct {
            char *p;
            size_t len;
        } s; /* STR, BYTES (NUL-terminated) */
        struct {
            ckpt_value **items;
            size_t n, cap;
        } seq; /* LIST, TUPLE, SET */
        struct {
            ckpt_value **keys, **vals;
            size_t n, cap;
            /* what BUILD set as attributes (an OrderedDict state dict's
             * {'_metadata': OrderedDict(...)}), or NULL; only kept for an
             * OrderedDict or Counter, the classes with attributes */
            ckpt_value *state;
        } dict;
        ckpt_tensor *tensor;
        struct {
            const char *name;  /* "module.qualname" */
            ckpt_value *args;  /* TUPLE or NULL */
            ckpt_value *state; /* BUILD state or NULL */
            ckpt_value *items; /* LIST or DICT filled by APPEND(S)/SETITEM(S), or NULL */
        } obj;
        struct {
            const char *module, *name, *qualname;
            /* what the pickle machine's allowlist answered for it
             * (pickle_builders.h ckpt_builders_allow), kept so that each
             * call of it costs no lookup; 0 (not allowed) elsewhere */
            int allow;
        } global; /* qualname = "module.name" */
        ckpt_storage *storage;
        /* the pickle machine's record of a TUPLE or STORAGE_ value it made
         * (pickle.c, "reuse"), in union bytes those kinds leave unused:
         * solo, the machine holds the only reference to it (a stack slot,
         * or one tuple's item). 0 for any value the machine did not make;
         * read by nothing else. */
        struct {
            void *unused_[3];
            uint8_t solo;
        } pk;
    } u;
};

#define CKPT_PK_SHARED UINT32_MAX
#define CKPT_STR_SURROGATE 1

/* A file of a million tensors holds millions of values: pk_at took padding,
 * and nothing may grow them past 48 bytes (64-bit pointers). */
_Static_assert(sizeof(void *) != 8 || sizeof(ckpt_value) == 48, "ckpt_value outgrew 48 bytes");

/* The absolute offset of the opcode that built v (pk_at) in a pickle whose
 * first byte is at `base` (pk_options.base_offset), or CKPT_NO_OFFSET
 * (UINT64_MAX) when v is NULL or that is not known (a shared value
 * included): for the byte offset of an error about a value, whose callers
 * then blame the container that holds it. */
static inline uint64_t ckpt_value_at(const ckpt_value *v, uint64_t base) {
    return v && v->pk_at && v->pk_at != CKPT_PK_SHARED ? base + v->pk_at - 1 : UINT64_MAX;
}

/* Constructors: NULL on allocation failure. Strings are copied. */
static inline ckpt_value *ckpt_value_new(ckpt_arena *a, int kind) {
    ckpt_value *v = ckpt_arena_alloc(a, sizeof *v);
    if (v) v->kind = (uint8_t)kind;
    return v;
}
ckpt_value *ckpt_value_new_int(ckpt_arena *a, int64_t v);
/* Two's-complement little-endian integer of n bytes (pickle LONG1/LONG4).
 * n == 0 is zero. Returns NULL on allocation failure. The decimal text is
 * computed here, in time quadratic in n, so callers bound n by
 * CKPT_BIGINT_MAX_BYTES (2048-bit integers: far beyond any counter or RNG
 * word a checkpoint holds, and cheap enough that a file full of them cannot
 * stall the reader). */
ckpt_value *ckpt_value_new_int_le(ckpt_arena *a, const uint8_t *le, size_t n);
#define CKPT_BIGINT_MAX_BYTES 256
ckpt_value *ckpt_value_new_float(ckpt_arena *a, double v);
ckpt_value *ckpt_value_new_bool(ckpt_arena *a, int v);
ckpt_value *ckpt_value_new_str(ckpt_arena *a, int kind, const void *p, size_t len);
ckpt_value *ckpt_value_new_object(ckpt_arena *a, const char *name);
/* A CKPT_KIND_GLOBAL_ reference; fills module, name and "module.name". */
ckpt_value *ckpt_value_new_global(ckpt_arena *a, const char *module, const char *name);

/* An empty container of v's kind (LIST, TUPLE, SET, DICT) that is
 * otherwise what v is: a dict keeps its class and BUILD state (shared, not
 * copied), so a filtered or rebuilt copy of a state dict is still an
 * OrderedDict with its _metadata. NULL on allocation failure. */
ckpt_value *ckpt_value_new_like(ckpt_arena *a, const ckpt_value *v);

/* Appends to LIST/TUPLE/SET (or an OBJECT's items list). 0 or CKPT_E_NOMEM. */
int ckpt_value_append(ckpt_arena *a, ckpt_value *seq, ckpt_value *item);
/* Whether Python can hash v, as a dict key or set item (`as`: "key",
 * "set item") must be: 0 yes; CKPT_E_FORMAT no, msg saying so and naming
 * the culprit (a list, dict, set, bytearray, numpy ndarray or slice,
 * which Python 3.11 does not hash, or one inside a tuple, which hashes
 * its items; a frozenset's items were checked when it was built);
 * CKPT_E_LIMIT when tuples nest deeper than 1000 or the walk visits more
 * than 65536 values (tuples shared through the memo would otherwise cost
 * exponential time, as they do in Python). Other opaque objects, torch
 * tensors and storages pass: their class decides, and ckpt calls nothing. */
int ckpt_value_hashable(const ckpt_value *v, const char *as, char *msg, size_t cap);
/* The rule for a dict key's text, the one name a flattened path takes
 * from it: a str or bytes key holding a NUL byte, or a str that held a
 * lone surrogate (CKPT_STR_SURROGATE), is refused (CKPT_E_UNSUPPORTED,
 * the key shown escaped in msg): Python keeps either whole, while ckpt's
 * names end at a NUL and its str is UTF-8, so two such keys could show
 * as one. 0 for any other key. */
int ckpt_value_key_check(const ckpt_value *k, char *msg, size_t cap);

/* Whether Python's == finds two dict keys equal, so one dict holds them
 * as one key: x is y; numbers of equal value (1, True, 1.0; never NaN);
 * None; str (not a torch.device against a str) or bytes of equal text;
 * big ints of equal digits; tuples of equal items. Anything else only
 * when it is the same value (objects hash by identity), and, told
 * apart, 0 when *budget (the keys compared, decremented) runs out:
 * keys never found equal are listed both, never one hidden. */
int ckpt_value_key_equal(const ckpt_value *x, const ckpt_value *y, size_t *budget);

/* The index of a key of DICT d that Python's == finds equal to the
 * number k (a bool, int or float) while its name differs: 1 and True,
 * 1 and 1.0, 0.0 and -0.0 are one key to a dict, which keeps the first
 * key and the last value. Looked for only when k or an earlier key is a
 * bool or a float (d->alt); *work counts the keys compared. SIZE_MAX
 * when there is none. */
size_t ckpt_value_dict_twin(const ckpt_value *d, const ckpt_value *k, uint64_t *work);

/* Appends key/value to a DICT (or an OBJECT's items dict). Keys are not
 * compared here (that would make big state dicts quadratic): a repeated
 * key is resolved by ckpt_file_flatten, where the later entry wins as in
 * Python. 0 or CKPT_E_NOMEM. */
int ckpt_value_dict_set(ckpt_arena *a, ckpt_value *dict, ckpt_value *key, ckpt_value *val);

/* The text a dict key contributes to a flattened name: str and bytes as
 * written, ints in decimal, True/False/None, floats as %.17g (into tmp,
 * cap bytes), other kinds by their kind name. *len receives its length;
 * the result is borrowed (from k, tmp or static storage). */
const char *ckpt_value_key_text(const ckpt_value *k, char *tmp, size_t cap, size_t *len);

/* Builds a tensor value; shape/stride are copied. Computes numel/nbytes with
 * overflow checks and bounds-checks the view against storage->nbytes:
 * the highest element touched, (offset + sum((shape-1)*stride) + 1) *
 * element size, must not exceed the storage. Returns 0 and *out, or
 * CKPT_E_FORMAT / CKPT_E_LIMIT / CKPT_E_NOMEM with the error recorded
 * against file/member/offset. */
int ckpt_tensor_new(ckpt_value **out, ckpt_arena *a, ckpt_storage *st, ckpt_dtype dtype,
                    uint32_t ndim, const uint64_t *shape, const uint64_t *stride,
                    uint64_t storage_offset, const char *file, const char *member, uint64_t offset);

#endif
