/* ckpt/file.h - opening a checkpoint: ckpt_file, tensors, values, verify.
 * Part of the public API of libckpt; include <ckpt.h>. */
#ifndef CKPT_INCLUDE_FILE_H
#define CKPT_INCLUDE_FILE_H

#include "ckpt/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ckpt_file ckpt_file;
typedef struct ckpt_tensor ckpt_tensor;
typedef struct ckpt_value ckpt_value;

typedef enum ckpt_format {
    CKPT_FORMAT_UNKNOWN = 0, /* ckpt_detect_format: no format ckpt reads */
    CKPT_FORMAT_SAFETENSORS = 1,
    CKPT_FORMAT_SAFETENSORS_SHARDED = 2,
    CKPT_FORMAT_TORCH_ZIP = 3,
    CKPT_FORMAT_TORCH_LEGACY = 4,
    CKPT_FORMAT_PICKLE = 5,
    /* a "*.bin.index.json" set of torch.save shards (Hugging Face
     * pytorch_model.bin.index.json); ckpt_detect_format gives
     * CKPT_FORMAT_SAFETENSORS_SHARDED for any index, the name decides */
    CKPT_FORMAT_TORCH_SHARDED = 6,
    /* a torch.distributed.checkpoint directory: `.metadata` (a pickle of
     * torch.distributed.checkpoint.metadata.Metadata) and data files
     * "__RANK_N.distcp"; ckpt_detect_format gives it for the head of a
     * `.metadata` pickle */
    CKPT_FORMAT_DCP = 7
} ckpt_format;

/* "safetensors", "safetensors-sharded", "torch-zip", "torch-legacy",
 * "pickle", "torch-sharded", "dcp" (the JSON names of `ckpt inspect`). Static
 * string. */
CKPT_API const char *ckpt_format_name(ckpt_format f);

/* The format a file's first bytes show, by the rule ckpt_open (and
 * ckpt_scan, and doctor) decides with: by content, never by file name.
 * head: the first n bytes of the file (borrowed, not kept; NULL only with
 * n == 0). Looked at, in this order:
 *   "PK\3\4" at 0                    CKPT_FORMAT_TORCH_ZIP
 *   PROTO 2..5, an optional FRAME, then the str
 *   "torch.distributed.checkpoint.metadata" (SHORT_BINUNICODE or
 *   BINUNICODE): the head of DCP's `.metadata`
 *                                     CKPT_FORMAT_DCP
 *   "PYTORCH1" at 0, "ustar" at 257   CKPT_FORMAT_UNKNOWN (formats ckpt
 *                                     does not read: ckpt_open says which)
 *   JSON whitespace then '{', no NUL in the first 8 bytes
 *                                     CKPT_FORMAT_SAFETENSORS_SHARDED
 *   8 bytes (the header length), JSON whitespace, '{'
 *                                     CKPT_FORMAT_SAFETENSORS
 *   torch.save's legacy magic-number pickle (12 bytes)
 *                                     CKPT_FORMAT_TORCH_LEGACY
 *   PROTO 0..5, or an opcode a protocol 0/1 pickle starts with
 *                                     CKPT_FORMAT_PICKLE
 * and CKPT_FORMAT_UNKNOWN for anything else, including n == 0. 262 bytes
 * are enough for every rule; with fewer a tar archive is not recognised
 * (and may read as an index or a pickle), and whitespace that runs past n
 * hides an index or a safetensors header. The answer is what a reader
 * would try, not a promise that the file parses. Never fails; reads at
 * most n bytes; thread-safe. */
CKPT_API ckpt_format ckpt_detect_format(const void *head, size_t n);

typedef struct ckpt_open_options {
    unsigned version; /* CKPT_OPEN_OPTIONS_VERSION */
    ckpt_limits limits;
} ckpt_open_options;
#define CKPT_OPEN_OPTIONS_VERSION 1
#define CKPT_OPEN_OPTIONS_INIT                                                                     \
    { .version = CKPT_OPEN_OPTIONS_VERSION, .limits = CKPT_LIMITS_INIT }
CKPT_API int ckpt_open_options_init(ckpt_open_options *opts, unsigned version);

/* Opens a checkpoint, detecting the format from its content (never from
 * the file name): "PK\3\4" zip, legacy magic pickle, pickle, safetensors
 * header, DCP (a directory holding `.metadata` or "*.distcp" files, or its
 * `.metadata`: see "DCP directories" below), or a sharded index: "*.safetensors.index.json" with safetensors
 * shards, "*.bin.index.json" (pytorch_model.bin.index.json) with torch.save
 * shards, CKPT_FORMAT_TORCH_SHARDED (the shards are opened relative to the
 * index's directory; names with "..", a root or a drive are refused; a
 * missing shard is CKPT_E_MISMATCH with the shard's path). A directory
 * opens as the model weights it holds, in transformers' order:
 * model.safetensors, model.safetensors.index.json, pytorch_model.bin,
 * pytorch_model.bin.index.json, then diffusers' diffusion_pytorch_model.*;
 * without any, those of the one variant there (model.fp16.safetensors:
 * ckpt_file_variant; several variants are CKPT_E_IO naming two), then a
 * PEFT adapter's; a Hugging Face cache repository (blobs/, snapshots/)
 * opens as the snapshot its refs/main names (ckpt_file_snapshot;
 * CKPT_E_IO listing its snapshots without one) (CKPT_E_IO when none is there, but
 * CKPT_E_MISMATCH naming the first and the index when shard files
 * "NAME-00001-of-0000N.EXT" are there without their index;
 * ckpt_file_path then names that file). Such a weights file, through its
 * folder or by path, must be in the format its name is read as
 * (from_pretrained, torch.load >= 2.13: "*.safetensors" safetensors,
 * ".bin" a torch.save file), else CKPT_E_FORMAT naming both.
 *
 * The file is mapped read-only (for ckpt_tensor_data alone), and its
 * descriptor kept open. Open reads the structure (zip end records,
 * directory and local headers, data.pkl and the other records it parses,
 * legacy and plain pickles, storage counts, a sharded index, DCP
 * .metadata) with pread(2) into private buffers, never through the
 * mapping: a file truncated while it is opened makes ckpt_open fail with
 * CKPT_E_TRUNCATED naming the file and offset, not SIGBUS (a safetensors
 * header still goes through the mapping). Tensor bytes are never copied
 * at open: a deflated zip member is
 * checked at open and inflated when its bytes are first read (within the
 * file's inflate budget: limits.max_inflate_bytes, at most
 * limits.max_inflate_ratio times the file's size, shared with data.pkl
 * and the pickle's values; CKPT_E_LIMIT past it). Open validates all
 * structure (headers, pickle, zip directory, every view against its
 * storage) but reads no tensor bytes: use ckpt_verify for that.
 *
 * Every function that reads tensor bytes for the caller (ckpt_verify,
 * ckpt_tensor_read, ckpt_tensor_sha256, ckpt_file_read_storages,
 * ckpt_diff, ckpt_convert) copies them with pread(2) into private memory,
 * never through the mapping: a file truncated or replaced in place while
 * it is open makes them fail with CKPT_E_TRUNCATED (or CKPT_E_IO) naming
 * the file, member and offset; the process never gets SIGBUS from them
 * and libckpt installs no signal handler. Only ckpt_tensor_data (and the
 * data word of ckpt_file_value_table's tensor records, the same address)
 * lends out the mapping itself (see there); ckpt_open_memory and
 * ckpt_scan_memory read the caller's memory as it is, and ckpt_scan
 * still parses a mapping of the file (scan.h).
 * A TorchScript archive is read for its weights (data.pkl; code/ is never
 * read).
 *
 * opts may be NULL (defaults). Returns 0, or CKPT_E_IO, CKPT_E_NOMEM,
 * CKPT_E_TRUNCATED, CKPT_E_FORMAT, CKPT_E_LIMIT, CKPT_E_MISMATCH (a
 * sharded set that does not match its index),
 * CKPT_E_UNSUPPORTED (pre-0.4 tar file, PYTORCH1 preview format). */
CKPT_API int ckpt_open(ckpt_file **out, const char *path, const ckpt_open_options *opts);
/* The path ckpt_open(path) reads, without opening it: a model folder's
 * weights file (the order above), a ckpt store's LATEST generation's
 * (model folder resolved), path itself for a file or a DCP directory. For
 * a scan before an open that may fail: ckpt_scan of the target finds what
 * ckpt_scan of that file would (an unsafe shard of a set). 0 and *out (free
 * with ckpt_string_free), or ckpt_open's error for a folder without
 * weights; CKPT_E_INVALID_ARG for a NULL argument. */
CKPT_API int ckpt_open_target(char **out, const char *path);

/* DCP directories (torch.distributed.checkpoint, FORMATS.md §4):
 * `.metadata` is read with the restricted pickle machine, and a global
 * other than DCP's metadata classes, torch.Size, torch dtypes, _get_layout
 * and pathlib paths is CKPT_E_UNSAFE (pickle.load, which FileSystemReader
 * runs, would call it). Each item of state_dict_metadata becomes one entry
 * of a flat root dict keyed by its fqn: a tensor item the global tensor
 * (global shape and dtype; contiguous, its bytes assembled from its chunks
 * by every reading function; ckpt_tensor_data is CKPT_E_UNSUPPORTED; see
 * ckpt_tensor_chunk), a bytes item the object its torch.save zip holds.
 * Each chunk is a slice of a data file holding a torch.save zip (the
 * default format) or the safetensors file a rank wrote
 * (SerializationFormat.SAFETENSORS, DCP_SHARDING_INFO; the safetensors
 * file starts at the slice's offset and the tensor is found by fqn); it
 * must be one tensor of the item's dtype and the chunk's sizes. Open
 * checks that the chunks tile each tensor (no gap, no overlap:
 * CKPT_E_FORMAT), that every file named exists (CKPT_E_MISMATCH naming
 * it; a directory without .metadata is CKPT_E_MISMATCH too) and that
 * every slice lies in its file (CKPT_E_TRUNCATED naming the file).
 * Parts' errors name "DIR/FILE@OFFSET" with offsets relative to that
 * slice. ckpt_verify also refuses "*.distcp" files that .metadata does
 * not name.
 * A save with use_collectives=False leaves "__R.metadata" per rank and no
 * `.metadata`: opening the directory (or any rank file) reads all of them
 * and merges them in rank order, the union of what each rank's loader
 * reads (a box saved by several ranks, such as a replicated tensor, is
 * taken from the lowest rank); a missing rank file is CKPT_E_MISMATCH, and
 * ranks that disagree on an item (kind, dtype, size, planner_data path,
 * the sizes of a box) are CKPT_E_FORMAT naming both files. Where a
 * `.metadata` exists it is read, as DCP does, and ckpt_verify refuses the
 * rank files next to it. transform_descriptors (stream extensions such as
 * ZStandard) are CKPT_E_UNSUPPORTED naming the descriptor.
 * HuggingFaceStorageWriter's sharded layout (save_distributed=True, no
 * index: "*.safetensors" files with DCP_SHARDING_INFO) opens as DCP too,
 * as HuggingFaceStorageReader reads it: every "*.safetensors" file, each
 * tensor a chunk at its saved_offsets, a tensor's size its chunks' largest
 * extent; a box saved twice is CKPT_E_FORMAT. Its layouts with a
 * model.safetensors.index.json (rank 0's state dict, consolidation
 * output) are sharded sets. */

/* 1 if `path` is a directory that ckpt_open (and ckpt_scan) read as one
 * DCP checkpoint: it holds `.metadata`, a "__R.metadata" or a "*.distcp"
 * file, or HuggingFaceStorageWriter's sharded safetensors files (see
 * above); else 0. */
CKPT_API int ckpt_is_dcp_dir(const char *path);

/* A diffusers pipeline directory (DiffusionPipeline.save_pretrained):
 * model_index.json names its components ("unet": ["diffusers",
 * "UNet2DConditionModel"]; [null, null] for one left out), each saved in
 * the folder of its name. ckpt_open of the directory opens none of them
 * (it names them); `ckpt verify` and `doctor` check each model component:
 * a folder that ModelMixin or PreTrainedModel.save_pretrained wrote
 * (config.json beside diffusion_pytorch_model.* or model.*, which
 * ckpt_open of the folder opens), a listed folder that is missing, or
 * one holding such weights without config.json (ckpt_pipeline_check);
 * a tokenizer's, scheduler's or feature extractor's folder holds no
 * weights. Components in name order (strcmp), as `ckpt scan DIR` walks
 * them. Returns 0; CKPT_E_NOTFOUND when `dir` holds no model_index.json;
 * CKPT_E_FORMAT when it is no JSON object or names a component outside
 * the directory ("../x", "a/b"); CKPT_E_IO, CKPT_E_LIMIT (larger than
 * limits.max_index_bytes' default), CKPT_E_NOMEM. Strings are borrowed
 * from the list; free it with ckpt_pipeline_free. */
typedef struct ckpt_pipeline ckpt_pipeline;

CKPT_API int ckpt_pipeline_open(ckpt_pipeline **out, const char *dir);
CKPT_API size_t ckpt_pipeline_count(const ckpt_pipeline *p);
/* Component i's name ("unet") and path (dir "/" name); NULL past the end. */
CKPT_API const char *ckpt_pipeline_component(const ckpt_pipeline *p, size_t i);
CKPT_API const char *ckpt_pipeline_path(const ckpt_pipeline *p, size_t i);
/* 0 when component i's folder is a model's (or missing: ckpt_open of it
 * says so); CKPT_E_MISMATCH, ckpt_error_last() naming the folder, the
 * component and its weights file, when it holds weights (what ckpt_open
 * of the folder opens) but no config.json: diffusers cannot load it, so
 * `ckpt verify` and `doctor` report it as a finding. Such a folder is
 * listed, not left out with the tokenizer's. CKPT_E_INVALID_ARG past the
 * end. */
CKPT_API int ckpt_pipeline_check(const ckpt_pipeline *p, size_t i);
CKPT_API void ckpt_pipeline_free(ckpt_pipeline *p);

/* Same from memory. `data` is borrowed and must outlive the ckpt_file.
 * `name` is used in error messages (may be NULL). Sharded indexes cannot be
 * opened from memory (CKPT_E_UNSUPPORTED). */
CKPT_API int ckpt_open_memory(ckpt_file **out, const void *data, size_t size, const char *name,
                              const ckpt_open_options *opts);

/* Releases everything the file owns; all borrowed pointers die. NULL-safe. */
CKPT_API void ckpt_close(ckpt_file *f);

CKPT_API ckpt_format ckpt_file_format(const ckpt_file *f);
/* The path or name the file was opened with. Borrowed. */
CKPT_API const char *ckpt_file_path(const ckpt_file *f);
/* When ckpt_open read a model folder's weights under a variant's name
 * (save_pretrained(variant="fp16") writes model.fp16.safetensors,
 * model.safetensors.index.fp16.json and its shards, pytorch_model.fp16.bin,
 * diffusion_pytorch_model.fp16.safetensors...) and the folder holds none
 * under the plain names: the variant ("fp16"), which from_pretrained(DIR,
 * variant="fp16") must be told; else NULL. Borrowed. */
CKPT_API const char *ckpt_file_variant(const ckpt_file *f);
/* When ckpt_open read a Hugging Face cache repository (huggingface_hub's
 * models--ORG--NAME: blobs/, snapshots/REVISION/, refs/main): the revision
 * refs/main names, whose snapshot folder was read as a model folder;
 * else NULL. Borrowed. */
CKPT_API const char *ckpt_file_snapshot(const ckpt_file *f);
/* Total bytes of the input (all shards for a sharded set). */
CKPT_API uint64_t ckpt_file_size(const ckpt_file *f);

/* The root of the object tree: a dict of tensors for safetensors (built
 * on the first call: NULL if that runs out of memory), the unpickled
 * object for pickle-based formats. Borrowed. */
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
 * weights) appears once per name. Two leaves that different keys name
 * alike ({'a.b': x, 'a': {'b': y}}, {'0': x, 0: y}, {'w': x, b'w': y})
 * are both listed, next to each other, and ckpt_verify fails naming both
 * paths; a key one dict repeats keeps its last value, as Python does. A
 * dict key holding a NUL byte or a lone surrogate is refused at open.
 * Index < ckpt_file_tensor_count. */
CKPT_API size_t ckpt_file_tensor_count(const ckpt_file *f);
CKPT_API const ckpt_tensor *ckpt_file_tensor(const ckpt_file *f, size_t i);
/* Binary search by exact name (one of two that collide); NULL if absent. */
CKPT_API const ckpt_tensor *ckpt_file_find_tensor(const ckpt_file *f, const char *name);

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
/* The device torch saved the tensor's storage on: the location of its
 * persistent id ("cpu", "cuda:0", "mps"...), which torch.load restores
 * unless given map_location; "cpu" for formats without devices
 * (safetensors, numpy arrays). Borrowed. */
CKPT_API const char *ckpt_tensor_device(const ckpt_tensor *t);

/* Loading every storage of a file in one call (what Python's ckpt.load
 * does): a caller collects the storages its tensors use (ids from
 * ckpt_tensor_storage_id, sizes from ckpt_tensor_storage_nbytes),
 * allocates one buffer per storage, builds every tensor as a view of its
 * storage's buffer (storage offset, shape and stride as the tensor
 * states; element size ckpt_dtype_bits / 8), then fills all the buffers
 * with one ckpt_file_read_storages. Tensors that shared a storage in the
 * file then share memory, and nothing depends on the file any more.
 *
 * ckpt_file_storage_count: storages of f (ids are 0 .. count-1). The
 * tensors of ckpt_file_logical_root may also use the storages it rebuilt
 * (views of one storage in a safetensors file ckpt wrote), ids from count
 * up, which both functions below accept once it has been called.
 * ckpt_file_storage_is_raw: 1 when storage `id`'s bytes are the elements
 * as little-endian bytes, the layout a view can use directly; 0 for
 * big-endian storages (legacy files from big-endian machines: read such
 * tensors with ckpt_tensor_read, which swaps) and out-of-range ids.
 *
 * ckpt_file_read_storages copies storage ids[i], all its
 * ckpt_tensor_storage_nbytes bytes, into dst[i], for i < n: the storages
 * are read in file order (shard by shard) with large sequential preads and
 * readahead hints, straight into the caller's buffers (no intermediate
 * copy); storages held in memory (inflated zip members) are copied.
 * Returns 0; CKPT_E_INVALID_ARG (NULL arrays with n > 0, an id out of
 * range, a NULL dst for a non-empty storage); CKPT_E_TRUNCATED / CKPT_E_IO
 * when the file shrank or cannot be read (file, member and offset named;
 * the buffers are then partly filled); CKPT_E_NOMEM. Reentrant for one f
 * at a time. */
CKPT_API size_t ckpt_file_storage_count(const ckpt_file *f);
CKPT_API int ckpt_file_storage_is_raw(const ckpt_file *f, uint64_t id);
CKPT_API int ckpt_file_read_storages(const ckpt_file *f, size_t n, const uint64_t *ids,
                                     void *const *dst);

/* The same for tensors of f (e.g. straight into a model's parameters):
 * ckpt_tensor_read of tensors[i] into dst[i], which holds its
 * ckpt_tensor_nbytes, for i < n, in file order with readahead hints.
 * Returns 0 or ckpt_tensor_read's codes for the first failure (the
 * buffers are then partly filled); CKPT_E_INVALID_ARG for NULL arrays or
 * a NULL tensor or dst. */
CKPT_API int ckpt_file_read_tensors(const ckpt_file *f, size_t n, const ckpt_tensor *const *tensors,
                                    void *const *dst);

/* ---------------------------------------------------------------- table */

/* The tree ckpt_file_logical_root gives, as one table of 64-bit words:
 * what a binding needs to rebuild it with one call per file instead of
 * several per node (Python's ckpt.load: a 100k-tensor state dict is one
 * call, not a million). Every distinct node appears once (a node reached
 * by several paths, or by a cycle, is referred to by its index), children
 * before their parents except where a container contains itself: the root
 * is node nnodes - 1.
 *
 * Node i is the CKPT_TABLE_NODE_WORDS words at words[i * NODE_WORDS]:
 * [kind, a, b, c, d], by ckpt_kind (unused words are 0):
 *   NONE                -
 *   BOOL                a: 0 or 1
 *   INT                 a: the value, b: -1; or when it does not fit in
 *                       int64, b, c: text offset and length of its decimal
 *   FLOAT               a: the double's bits
 *                       (BOOL, INT, FLOAT) d: ckpt_value_numpy_dtype
 *   STR, BYTES          a, b: text offset and length (STR: UTF-8); c: 1
 *                       for a torch.device / bytearray (ckpt_value_class)
 *   LIST, TUPLE, SET    a, b: refs offset and count of its items; c: 1 for
 *                       a torch.Size / frozenset (ckpt_value_class)
 *   DICT                a, b: refs offset and count of its entries (2 x b
 *                       refs: key, value, key, value...); c: its class
 *                       (0 plain, 1 collections.OrderedDict, 2
 *                       collections.Counter: ckpt_value_dict_class); d: its
 *                       BUILD state's node or -1 (ckpt_value_dict_state)
 *   TENSOR              a: its tensor record
 *   OBJECT              a, b: text offset and length of its name; c, d:
 *                       the nodes of its arguments and state, or -1
 * Refs are node indices: refs[k] is words[refs_at + k].
 *
 * Tensor record j is the CKPT_TABLE_TENSOR_WORDS words at
 * words[tensors_at + j * TENSOR_WORDS], as the ckpt_tensor_* accessors
 * give them: [dtype, ndim, dims, storage id, storage offset, numel,
 * nbytes, storage nbytes, flags, data, device text offset, device length,
 * file offset (-1 for CKPT_NO_OFFSET), member text offset, member length,
 * the ckpt_tensor pointer]. Its shape is words[dims_at + dims ...] (ndim
 * words), its stride the ndim words after. data: the address
 * ckpt_tensor_data gives (into the mapping: see its hazard), 0 when it
 * gives none. flags: CKPT_TABLE_* below. The pointer is borrowed from f
 * (for ckpt_tensor_read, ckpt_file_read_tensors).
 *
 * Strings are bytes of `text` (not NUL-terminated). */
enum {
    CKPT_TABLE_NODE_WORDS = 5,
    CKPT_TABLE_TENSOR_WORDS = 16,
    /* flags of a tensor record */
    CKPT_TABLE_RAW = 1,        /* ckpt_file_storage_is_raw: its storage is
                                  read whole by ckpt_file_read_storages */
    CKPT_TABLE_CONTIGUOUS = 2, /* ckpt_tensor_is_contiguous */
    CKPT_TABLE_PARAMETER = 4,  /* ckpt_tensor_is_parameter */
    /* RAW, and the tensor is its whole storage: storage offset 0, nbytes
     * equal to the storage's, the strides torch gives a new tensor of
     * that shape (stride[i] = stride[i+1] * max(shape[i+1], 1)); a tensor
     * allocated with the shape can be the storage's buffer */
    CKPT_TABLE_WHOLE = 8,
    CKPT_TABLE_REQUIRES_GRAD = 16, /* ckpt_tensor_requires_grad */
    CKPT_TABLE_NUMPY = 32          /* ckpt_tensor_is_numpy */
};

typedef struct ckpt_value_table {
    unsigned version; /* CKPT_VALUE_TABLE_VERSION: the layout above */
    const int64_t *words;
    size_t nwords;
    size_t nnodes, ntensors;
    size_t tensors_at, refs_at, dims_at; /* sections of words */
    const char *text;
    size_t ntext;
} ckpt_value_table;
#define CKPT_VALUE_TABLE_VERSION 1

/* *out receives the table of f's logical tree (ckpt_file_logical_root),
 * owned by the caller (ckpt_value_table_free); it borrows nothing but the
 * tensor pointers and data addresses, which live as long as f. The walk is
 * bounded like every traversal (limits.max_depth, a visit budget from
 * limits.max_tensors). Returns 0, ckpt_file_logical_root's codes,
 * CKPT_E_LIMIT, CKPT_E_NOMEM. Not concurrently with other calls on f
 * before the first ckpt_file_logical_root. */
CKPT_API int ckpt_file_value_table(ckpt_value_table **out, const ckpt_file *f);
CKPT_API void ckpt_value_table_free(ckpt_value_table *t);

/* Borrowed pointer to the tensor's bytes when ckpt_tensor_is_contiguous:
 * *data receives the first byte, *size ckpt_tensor_nbytes. Zero-copy: the
 * pointer is into the file mapping and lives as long as f.
 * HAZARD: the file must not shrink or change while the pointer is used.
 * Reading a page of the mapping past a truncated end raises SIGBUS (the
 * default action kills the process), and a file rewritten in place shows
 * its new bytes; `torch.save(obj, same_path)` does both. Use
 * ckpt_tensor_read or ckpt_file_read_storages (private copies, errors
 * instead of signals) unless the file is known to stay as it is.
 * Returns 0, or CKPT_E_UNSUPPORTED for a view that is not contiguous or a
 * big-endian storage (use ckpt_tensor_read). */
CKPT_API int ckpt_tensor_data(const ckpt_tensor *t, const void **data, size_t *size);

/* Copies the logical contents as contiguous row-major little-endian bytes
 * (views gathered through their strides, big-endian storages swapped) into
 * dst, which must hold ckpt_tensor_nbytes bytes: one pread for a
 * contiguous tensor; a strided view reads the storage bytes it spans once
 * (at most 64 MiB of scratch, else one pread per run of adjacent
 * elements). Returns 0, CKPT_E_INVALID_ARG if cap is too small,
 * CKPT_E_UNSUPPORTED for sub-byte dtypes with non-contiguous views,
 * CKPT_E_TRUNCATED / CKPT_E_IO when the file shrank or cannot be read. */
CKPT_API int ckpt_tensor_read(const ckpt_tensor *t, void *dst, size_t cap);

/* SHA-256 of the logical contents (as ckpt_tensor_read would produce),
 * read in bounded windows. out: 32 bytes. Errors as ckpt_tensor_read. */
CKPT_API int ckpt_tensor_sha256(const ckpt_tensor *t, unsigned char out[32]);

/* DCP chunks: for a tensor of a DCP directory, the chunks it is assembled
 * from, in row-major order of their offsets (0 for tensors of other
 * formats). `file` is
 * the data file's name relative to the directory (borrowed), `offset` and
 * `length` the slice holding the chunk (for the safetensors format, the
 * safetensors file's start and the chunk's bytes), `rank` the rank from a
 * "__RANK_N.distcp" name or -1, `offsets`/`sizes` the box it covers in the
 * global tensor (ckpt_tensor_ndim elements each, borrowed). Returns 0 or
 * CKPT_E_INVALID_ARG (i out of range). */
typedef struct ckpt_chunk_info {
    const char *file;
    uint64_t offset, length;
    int rank;
    const uint64_t *offsets, *sizes;
} ckpt_chunk_info;
CKPT_API size_t ckpt_tensor_chunk_count(const ckpt_tensor *t);
CKPT_API int ckpt_tensor_chunk(ckpt_chunk_info *out, const ckpt_tensor *t, size_t i);

/* ---------------------------------------------------------------- values */

typedef enum ckpt_kind {
    CKPT_KIND_NONE = 0,
    CKPT_KIND_BOOL = 1,
    CKPT_KIND_INT = 2,
    CKPT_KIND_FLOAT = 3,
    CKPT_KIND_STR = 4,
    CKPT_KIND_BYTES = 5,
    CKPT_KIND_LIST = 6,
    CKPT_KIND_TUPLE = 7,
    CKPT_KIND_DICT = 8,
    CKPT_KIND_SET = 9,
    CKPT_KIND_TENSOR = 10,
    CKPT_KIND_OBJECT = 11
} ckpt_kind;

CKPT_API ckpt_kind ckpt_value_kind(const ckpt_value *v);
/* "none", "bool", "int", "float", "str", "bytes", "list", "tuple", "dict",
 * "set", "tensor", "object". Static string. */
CKPT_API const char *ckpt_kind_name(ckpt_kind k);

/* Scalar getters: *out receives the value; each returns 0, or
 * CKPT_E_INVALID_ARG (not recorded: a kind test, not a failure) when v is
 * not of that kind, leaving *out unchanged. bool: 0 or 1. int: also
 * CKPT_E_LIMIT when it does not fit in int64 (use ckpt_value_int_decimal). */
CKPT_API int ckpt_value_bool(const ckpt_value *v, int *out);
CKPT_API int ckpt_value_int(const ckpt_value *v, int64_t *out);
/* Exact decimal text of any int, however large. Borrowed. NULL if not int. */
CKPT_API const char *ckpt_value_int_decimal(const ckpt_value *v);
CKPT_API int ckpt_value_float(const ckpt_value *v, double *out);
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
/* 1 if the tensor was saved with requires_grad=True (a parameter: its
 * own requires_grad), else 0. */
CKPT_API int ckpt_tensor_requires_grad(const ckpt_tensor *t);
/* 1 if the tensor was saved as a numpy.ndarray (numpy's own pickle, e.g.
 * the uint32 state of np.random.get_state()), else 0: torch.load gives
 * back a numpy array there, and so do ckpt.load and the writers. */
CKPT_API int ckpt_tensor_is_numpy(const ckpt_tensor *t);
/* 1 for a SET built as a frozenset (FROZENSET, builtins.frozenset), else 0. */
CKPT_API int ckpt_value_is_frozenset(const ckpt_value *v);
/* The class a value was built as when torch.load gives back another than
 * its kind's: "builtins.frozenset" (SET), "torch.Size" (TUPLE of ints),
 * "torch.device" (STR: its text, "cpu" or "cuda:1"), "builtins.bytearray"
 * (BYTES); NULL for a plain str, bytes, tuple or set and other kinds.
 * Static string. */
CKPT_API const char *ckpt_value_class(const ckpt_value *v);
/* BOOL, INT or FLOAT built from a numpy scalar (np.float32(1.5),
 * np.uint32(7)): its dtype (CKPT_DT_F32, CKPT_DT_U32...), the value being
 * exact in the kind's getter; CKPT_DT_UNKNOWN for a Python value. */
CKPT_API ckpt_dtype ckpt_value_numpy_dtype(const ckpt_value *v);

/* ---------------------------------------------------------------- verify */

typedef struct ckpt_verify_report {
    int ok;           /* 1 when every check passed */
    uint64_t tensors; /* tensors read */
    uint64_t bytes;   /* tensor/storage bytes read */
    uint64_t members; /* zip members whose CRC-32 was checked */
    uint64_t shards;  /* a sharded set's shard files, each checked as the
                         file it is, after open matched them with the
                         index's weight_map one for one; 0 otherwise */
} ckpt_verify_report;

/* Full integrity check of an opened file: every byte of every storage is
 * read; every zip member's CRC-32 is compared with the central directory
 * (a 0 there is none recorded: torch.save with compute_crc32=False, and
 * skip_data()'s storage records; such a file's checksums are "none");
 * legacy storage element counts are checked against the pickle and the file
 * size; a torch zip's storage records must be stored, not compressed
 * (ckpt_file_check_mmap). Returns 0 when intact; CKPT_E_CHECKSUM (CRC mismatch) or another
 * code with ckpt_error_last() naming member and offset of the first
 * problem. report may be NULL. */
CKPT_API int ckpt_verify(ckpt_verify_report *report, ckpt_file *f);
/* Whether torch.load(f, mmap=True) reads the tensors torch.load(f) does:
 * 0, or CKPT_E_MISMATCH naming the first compressed storage record of a
 * torch zip (or of one of a set's shards) and its data offset: mmap=True
 * maps its compressed bytes as the tensor, plain torch.load inflates it.
 * CKPT_E_INVALID_ARG for a NULL f. Reads no tensor bytes. */
CKPT_API int ckpt_file_check_mmap(const ckpt_file *f);
/* After ckpt_verify(f) failed with error e (ckpt_error_last()): the
 * tensors whose bytes lie where e blames (the zip member e->member of file
 * e->file, f or one of its shards or DCP slices; else the storage holding
 * byte e->offset), each passed to fn by name (a DCP directory's: the
 * fqn). Returns how many; 0 when e blames no tensor's bytes. fn may be
 * NULL (count only). */
CKPT_API size_t ckpt_verify_damaged(const ckpt_file *f, const ckpt_error *e,
                                    void (*fn)(const char *name, void *ctx), void *ctx);

/* What ckpt_verify can vouch for beyond structure and sizes. */
typedef enum ckpt_checksums {
    CKPT_CHECKSUMS_NONE = 0,   /* safetensors without ckpt's digests, legacy
                                  torch, raw pickle: structure only */
    CKPT_CHECKSUMS_CRC32 = 1,  /* torch zip (and sets of them): every member's CRC-32
                                  (none when a member records none) */
    CKPT_CHECKSUMS_DIGESTS = 2 /* written by ckpt: a per-tensor XXH3-64
                                  digest (metadata "ckpt.xxh3") */
} ckpt_checksums;
CKPT_API ckpt_checksums ckpt_file_checksums(const ckpt_file *f);
/* "none", "crc32" or "digests": the name `ckpt verify --json` and
 * Python's VerifyReport.checksums give c. */
CKPT_API const char *ckpt_checksums_name(ckpt_checksums c);

/* XXH3-64 (seed 0) of size bytes: the digest "ckpt.xxh3" holds for a
 * tensor's logical contents, for callers that read a tensor's bytes
 * themselves (Python's ckpt.dcp.Reader) and check them as they read.
 * data may be NULL when size is 0. */
CKPT_API uint64_t ckpt_xxh3_64(const void *data, size_t size);

#ifdef __cplusplus
}
#endif
#endif /* CKPT_INCLUDE_FILE_H */
