/* ckpt/write.h - writers: safetensors and torch .pt, ckpt_convert, the tree builder.
 * Part of the public API of libckpt; include <ckpt.h>. */
#ifndef CKPT_INCLUDE_WRITE_H
#define CKPT_INCLUDE_WRITE_H

#include "ckpt/file.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Metadata recorded besides the tensors (architecture config, dtype
 * intent, parallel layout, library versions...). nmeta pairs of UTF-8
 * strings, borrowed for the call; keys non-empty, unique, not starting
 * with "ckpt." (reserved) but "ckpt.meta_json" (a JSON array of the keys
 * whose values are JSON text), "ckpt.optimizers" (a JSON object: tree
 * path of an optimizer state dict -> "module.qualname" of its class) and
 * what it records about the saving environment, JSON text each:
 * "ckpt.versions" ({"torch", "python", "ckpt", "numpy"?}), "ckpt.model"
 * ({tree path: {"class": "module.qualname", "source"?: file}}),
 * "ckpt.dtype" ({"default", "autocast"?, "parameters"?: {dtype: count}}),
 * "ckpt.device"; Python's ckpt.save writes them, convert and rename keep
 * them, doctor shows them under their metadata topic. */
typedef struct ckpt_write_options {
    unsigned version; /* CKPT_WRITE_OPTIONS_VERSION */
    const char *const *meta_keys;
    const char *const *meta_values;
    size_t nmeta;
    int backup; /* 1: keep the file being replaced as "OUT.bak", itself
                   replaced atomically (both names always hold a complete
                   file) */
    /* version 2: called once with done = 0, then after each tensor's bytes
     * are written: done of total tensors (the records of a safetensors
     * file, the storages of a torch zip); NULL for none */
    ckpt_progress_fn progress;
    void *progress_ctx;
} ckpt_write_options;
#define CKPT_WRITE_OPTIONS_VERSION 2
#define CKPT_WRITE_OPTIONS_INIT                                                                    \
    {                                                                                              \
        .version = CKPT_WRITE_OPTIONS_VERSION, .meta_keys = NULL, .meta_values = NULL, .nmeta = 0, \
        .backup = 0, .progress = NULL, .progress_ctx = NULL                                        \
    }
CKPT_API int ckpt_write_options_init(ckpt_write_options *opts, unsigned version);

typedef struct ckpt_convert_options {
    unsigned version;          /* CKPT_CONVERT_OPTIONS_VERSION */
    ckpt_open_options open;    /* limits for reading the input */
    ckpt_format format;        /* CKPT_FORMAT_SAFETENSORS,
                                  CKPT_FORMAT_TORCH_ZIP or CKPT_FORMAT_DCP
                                  (a directory); 0: from the output name
                                  (".safetensors"; ".pt", ".pth", ".bin",
                                  ".ckpt"; ".dcp") */
    const char *const *select; /* nselect name prefixes; non-empty: keep
                                  only tensors and values whose flattened
                                  name is a prefix P or starts with P
                                  followed by "." (P ending in "." matches
                                  any continuation); paths keep their
                                  names, lists and tuples keep only
                                  selected items (renumbered). One
                                  prefix naming a container exactly
                                  (a training checkpoint's "model")
                                  writes that container itself, its
                                  items under their own names as
                                  sd["model"] holds them */
    size_t nselect;
    const char *config_json;  /* a JSON object (e.g. the architecture
                                  config), stored compact as metadata
                                  "config"; NULL for none */
    ckpt_write_options write; /* metadata added (wins over the input's);
                                  write.progress reports the tensors written */
    /* version 2: nexclude globs (fnmatch without flags: '*' crosses '.');
     * a tensor or value, or a dict, list or tuple, whose flattened name
     * matches one is left out whole (after select); containers emptied
     * by it disappear, as with select */
    const char *const *exclude;
    size_t nexclude;
    /* version 3: > 0 writes a sharded set, shards of at most this many
     * bytes of storages (see ckpt_convert) */
    uint64_t max_shard_size;
} ckpt_convert_options;
#define CKPT_CONVERT_OPTIONS_VERSION 3
#define CKPT_CONVERT_OPTIONS_INIT                                                                  \
    {                                                                                              \
        .version = CKPT_CONVERT_OPTIONS_VERSION, .open = CKPT_OPEN_OPTIONS_INIT,                   \
        .format = (ckpt_format)0, .select = NULL, .nselect = 0, .config_json = NULL,               \
        .write = CKPT_WRITE_OPTIONS_INIT, .exclude = NULL, .nexclude = 0, .max_shard_size = 0      \
    }
CKPT_API int ckpt_convert_options_init(ckpt_convert_options *opts, unsigned version);

typedef struct ckpt_convert_report {
    ckpt_format format; /* written format */
    uint64_t tensors;   /* tensors (safetensors) or storages (torch) written */
    uint64_t bytes;     /* size of the output file */
    uint64_t keys;      /* tensor names written (keys, as rename counts them:
                           a tied tensor stored once has one per name) */
    uint64_t shards;    /* shard files of a sharded set (then tensors, bytes
                           and keys are summed over them); 0: one file */
    uint64_t retired;   /* files of OUT's previous layout that the output
                           does not replace by name (an index and its
                           shards, a one-file name that would shadow a new
                           index; in a folder OUT, weights of another
                           layout): removed, or renamed to NAME.bak with
                           backup (since 0.2) */
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
 * CKPT_E_NOTFOUND also when exclude leaves nothing;
 * CKPT_E_IO (input unreadable, output not writable); the ckpt_open codes
 * for a malformed input; CKPT_E_NOMEM. The output is verified before it
 * replaces `out`: every byte is read back while it is written and must be
 * the bytes the writer produced, from which it computed the file's CRC-32s
 * and XXH3-64 digests (else CKPT_E_CHECKSUM with the offset), and the file
 * is then opened with opts->open's limits: a file ckpt's own reader would
 * reject (e.g. a shape whose row-major strides overflow in safetensors) is
 * never written; that failure carries the reader's code and message,
 * prefixed "the converted file does not read back". The input is
 * verified as it is read: a torch archive's member whose bytes do not
 * match the CRC-32 its central directory records is CKPT_E_CHECKSUM naming
 * the member, and nothing is written (checked in the same pass when a
 * tensor is its storage's bytes, else the member is read whole once more).
 * Memory: tensor bytes are read from the input with pread in
 * bounded windows (a file that shrinks meanwhile: CKPT_E_TRUNCATED); only
 * a storage rebuilt from views that no stored tensor covers whole is
 * allocated, up to limits.max_inflate_bytes.
 *
 * opts->max_shard_size > 0: a sharded set as Hugging Face writes one
 * (huggingface_hub's split_torch_state_dict_into_shards): the tensors, in
 * order, fill a shard until the next one would pass the size (a storage
 * larger than the size gets a shard of its own; tensors sharing a storage
 * go with its first; sizes are storage bytes, each counted once). `out`
 * names the set: "DIR/model.safetensors" gives DIR/model-00001-of-0000N
 * .safetensors... and DIR/model.safetensors.index.json; torch output is
 * always ".bin" shards (".pt", ".pth", ".ckpt" become ".bin":
 * "pytorch_model-00001-of-0000N.bin", "pytorch_model.bin.index.json", the
 * names transformers reads); an existing directory gets transformers'
 * default names ("model.safetensors", "pytorch_model.bin"; safetensors
 * unless opts->format says otherwise). Each shard is
 * written atomically and verified, the index ({"metadata": {"total_size",
 * the merged metadata}, "weight_map"}) last (total_size: this set's tensor
 * bytes, an integer; a sharded input's own total_size is not carried, into
 * a set or a file); a set that fits one shard is
 * one file, `out` (in a directory: the default name), without an index, as
 * transformers saves it. The tree must be tensors only (a state dict: --select it out
 * of a training checkpoint), named by their flattened names; anything
 * else is CKPT_E_UNSUPPORTED naming the first value. Once the new set is
 * written and verified, the layout it replaces goes (removed, or renamed
 * NAME.bak with opts->write.backup): the one file under the set's name
 * (it would shadow the index), and the shards the set's previous index
 * named that the new set does not; the previous index too when the new set
 * is one file, also when that file is written without max_shard_size
 * (`out` a directory or NAME.safetensors / NAME.bin). Files no index named
 * stay, except in a folder `out` (a name ending in '/', or an existing
 * directory) that is not the directory `in` is or is in: there every
 * weights file of another layout (the names a model folder is opened by,
 * and the shards of such an index, by name) is retired too, so that the
 * folder holds one set of weights (since 0.2). A previous index that
 * cannot be read (over limits.max_index_bytes, malformed) names nothing.
 *
 * `in` a model folder (a directory that is not a DCP checkpoint) and
 * `out` a folder (a name ending in '/', or an existing directory other
 * than `in`), not DCP: the folder's other files are written into `out`
 * too, so that from_pretrained(out) finds what from_pretrained(in) found
 * (config.json, generation_config.json, the tokenizer's files): the
 * regular files directly in `in` except hidden ones, the weights files
 * and indexes a model folder is opened by, shard files, and files whose
 * first bytes ckpt_detect_format reads as a zip, safetensors, torch
 * legacy, DCP metadata or a pickle opening with PROTO (optimizer.pt,
 * training_args.bin), and trainer_state.json (training state too). They
 * are listed before anything is written: a
 * symbolic link leading out of `in` is CKPT_E_INVALID_ARG naming it (never
 * followed; one inside `in` is copied as its file, and so is a Hugging
 * Face cache snapshot's link to its repository's blobs); after the weights,
 * each is written as the weights are (atomically, read back,
 * opts->write.backup), CKPT_E_IO when one changes while read.
 *
 * CKPT_FORMAT_DCP: a torch.distributed.checkpoint directory as torch
 * 2.13's dcp.save writes it on one rank (DefaultSavePlanner,
 * FileSystemWriter; FORMATS.md §4): the tree (its root must be a dict) is
 * flattened as DCP does, nested dicts by str(key) and lists that hold
 * tensors or dicts by index, into tensor items and torch.save'd bytes
 * items (other values, numpy arrays, tuples), named
 * ".".join(map(str, path)); `out`/.metadata and `out`/__0_0.distcp are
 * written in a temporary directory beside `out`, every file fsync'd,
 * opened with ckpt's DCP reader, verified and compared with the plan,
 * then the directory is renamed onto `out` and its parent fsync'd. `out`
 * must not exist or be an empty directory (CKPT_E_INVALID_ARG); file
 * metadata is not written (opts->write metadata, config and
 * max_shard_size: CKPT_E_INVALID_ARG); dict keys other than str, int,
 * bool and None, and a root that is no dict: CKPT_E_UNSUPPORTED; two
 * values with one flattened name: CKPT_E_INVALID_ARG. report: tensors =
 * tensor items, keys = items, bytes = both files. A failure leaves no
 * directory at `out` (a crash may leave the temporary one). */
CKPT_API int ckpt_convert(ckpt_convert_report *report, const char *in, const char *out,
                          const ckpt_convert_options *opts);

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
CKPT_API int ckpt_tree_str(ckpt_value **out, ckpt_tree *t, const char *s, size_t len);
CKPT_API int ckpt_tree_bytes(ckpt_value **out, ckpt_tree *t, const void *p, size_t len);
/* Empty containers, filled with ckpt_tree_append (list, tuple, set:
 * items in the order given; a set's must be hashable as Python hashes
 * them, leaves or tuples of them, else CKPT_E_INVALID_ARG) and
 * ckpt_tree_set (dict; keys are leaves or tuples, kept in insertion
 * order). A set is written as torch.save pickles one (builtins.set, or
 * builtins.frozenset after ckpt_tree_set_class). */
CKPT_API int ckpt_tree_list(ckpt_value **out, ckpt_tree *t);
CKPT_API int ckpt_tree_tuple(ckpt_value **out, ckpt_tree *t);
CKPT_API int ckpt_tree_empty_set(ckpt_value **out, ckpt_tree *t);
CKPT_API int ckpt_tree_dict(ckpt_value **out, ckpt_tree *t);
CKPT_API int ckpt_tree_append(ckpt_tree *t, ckpt_value *seq, ckpt_value *item);
CKPT_API int ckpt_tree_set(ckpt_tree *t, ckpt_value *dict, ckpt_value *key, ckpt_value *val);
/* A tensor over caller memory: `size` bytes at `data` (borrowed), the
 * contiguous row-major little-endian elements of `shape` (ndim <=
 * CKPT_MAX_NDIM); size must be numel x bits / 8 exactly. Returns 0,
 * CKPT_E_INVALID_ARG (unknown dtype, size mismatch, ndim too large),
 * CKPT_E_NOMEM. */
CKPT_API int ckpt_tree_tensor(ckpt_value **out, ckpt_tree *t, ckpt_dtype dtype, unsigned ndim,
                              const uint64_t *shape, const void *data, size_t size);
/* A tensor of this tree over the same storage and view as the tensor `of`
 * (of this tree), but another object: a Parameter and the state dict's
 * plain tensor of it (model.state_dict() detaches), which torch.save
 * writes as two objects over one storage record. Returns 0,
 * CKPT_E_INVALID_ARG (`of` is not a tensor), CKPT_E_NOMEM. */
CKPT_API int ckpt_tree_tensor_alias(ckpt_value **out, ckpt_tree *t, const ckpt_value *of);
/* A tensor of this tree over the storage of the tensor `of` (of this
 * tree) with a view of its own: `ndim` dimensions of `shape` and `stride`
 * (elements) from element `storage_offset` of that storage, in its dtype.
 * A view saved beside its base (x[1:], x.t()) is one storage for
 * torch.save, and so for every writer. Returns 0, CKPT_E_INVALID_ARG (`of`
 * is not a tensor, ndim too large, the view reaches past the storage),
 * CKPT_E_NOMEM. */
CKPT_API int ckpt_tree_tensor_view(ckpt_value **out, ckpt_tree *t, const ckpt_value *of,
                                   unsigned ndim, const uint64_t *shape, const uint64_t *stride,
                                   uint64_t storage_offset);
/* Makes `v` (of this tree) what numpy gives back, as torch.save pickles
 * numpy values: a TENSOR a numpy.ndarray (dtype its own), a BOOL, INT or
 * FLOAT a numpy scalar of `dtype` (ckpt_value_numpy_dtype; CKPT_DT_BOOL
 * for a BOOL, an integer dtype the value fits for an INT, F16, F32 or F64
 * for a FLOAT); CKPT_DT_UNKNOWN makes it the plain value again. Returns 0
 * or CKPT_E_INVALID_ARG (NULL arguments, another kind, a dtype numpy has
 * not or the value does not fit, a tensor of another dtype). */
CKPT_API int ckpt_tree_set_numpy(ckpt_tree *t, ckpt_value *v, ckpt_dtype dtype);
/* What torch's Module.state_dict() returns, so that a saved state dict
 * loads back as one (load_state_dict reads its per-module versions):
 * ckpt_tree_set_dict_class makes `dict` (of this tree) a `cls`,
 * "collections.OrderedDict" or "collections.Counter", or a plain dict
 * again with NULL; ckpt_tree_set_dict_state sets the attributes of such a
 * dict, `state` a dict of this tree (e.g. {"_metadata": OrderedDict(
 * {"": {"version": 1}, ...})}), or NULL for none; the state's values are
 * written like the items, but may not hold tensors (CKPT_E_UNSUPPORTED at
 * the write). ckpt_tree_set_parameter marks `tensor` as an nn.Parameter
 * with that requires_grad (torch.save's _rebuild_parameter);
 * ckpt_tree_set_requires_grad sets requires_grad alone (a plain tensor
 * torch.load gives back requiring grad, as torch.save writes a tensor
 * that requires grad; a parameter's own flag). Each returns
 * 0 or CKPT_E_INVALID_ARG (NULL arguments, a value of the wrong kind, an
 * unknown class, a state on a plain dict or a plain class for a dict with
 * a state). */
CKPT_API int ckpt_tree_set_dict_class(ckpt_tree *t, ckpt_value *dict, const char *cls);
CKPT_API int ckpt_tree_set_dict_state(ckpt_tree *t, ckpt_value *dict, ckpt_value *state);
CKPT_API int ckpt_tree_set_parameter(ckpt_tree *t, ckpt_value *tensor, int requires_grad);
CKPT_API int ckpt_tree_set_requires_grad(ckpt_tree *t, ckpt_value *tensor, int requires_grad);
/* Makes `v` (of this tree) the class torch.load gives back for it
 * (ckpt_value_class): "torch.device" a STR ("cuda:1"), "torch.Size" a
 * TUPLE of ints (set once its items are appended), "builtins.bytearray"
 * BYTES, "builtins.frozenset" a SET; NULL the plain kind again. Returns 0
 * or CKPT_E_INVALID_ARG (NULL arguments, an unknown class, a value of
 * another kind, a torch.Size item that is not an int). */
CKPT_API int ckpt_tree_set_class(ckpt_tree *t, ckpt_value *v, const char *cls);

/* Writes the tree under `root` (built with ckpt_tree_*, or the root of an
 * opened file) to `path` as `format` (CKPT_FORMAT_SAFETENSORS or
 * CKPT_FORMAT_TORCH_ZIP), atomically. opts may be NULL. Returns 0,
 * CKPT_E_INVALID_ARG, CKPT_E_UNSUPPORTED (see above), CKPT_E_IO,
 * CKPT_E_LIMIT (a safetensors header over 100 MB), CKPT_E_NOMEM. */
CKPT_API int ckpt_tree_write(const ckpt_value *root, const char *path, ckpt_format format,
                             const ckpt_write_options *opts);

/* Atomic replacement of one file by a writer outside the library (the
 * Python package's torch.distributed.checkpoint writer): libckpt's one
 * rule for every file it writes. A uniquely named temporary file next to
 * `target` (".<basename>.tmp-<pid>-<16 hex>", under an exclusive flock
 * while written), every byte read back and compared before the rename,
 * fsync, rename over the target, fsync of the directory, then the
 * temporary files of the same target that killed writers left are
 * removed. A write past the file size limit (RLIMIT_FSIZE) fails with
 * CKPT_E_IO instead of raising SIGXFSZ. Any failure removes the temporary
 * file and leaves the target untouched; errors are sticky (a later write
 * does nothing, commit reports the first). A target that is a symbolic
 * link is replaced by a regular file; the file it pointed to is left as
 * it was.
 *
 * begin: 0, CKPT_E_INVALID_ARG (NULL, empty path or one ending in '/'),
 * CKPT_E_IO, CKPT_E_NOMEM; nothing exists on disk on failure and *out is
 * NULL. write appends n bytes (0 or the sticky code). commit renames the
 * finished file over the target and frees f: 0, CKPT_E_IO,
 * CKPT_E_CHECKSUM (the file does not read back as written); abort removes
 * the temporary file and frees f (NULL-safe). */
typedef struct ckpt_atomic_file ckpt_atomic_file;
CKPT_API int ckpt_atomic_file_begin(ckpt_atomic_file **out, const char *target);
CKPT_API int ckpt_atomic_file_write(ckpt_atomic_file *f, const void *p, size_t n);
CKPT_API int ckpt_atomic_file_commit(ckpt_atomic_file *f);
CKPT_API void ckpt_atomic_file_abort(ckpt_atomic_file *f);

#ifdef __cplusplus
}
#endif
#endif /* CKPT_INCLUDE_WRITE_H */
