/* write.h - the write side: a ckpt_value tree written as safetensors or as
 * a torch.save zip archive, always through the atomic commit (atomic.h).
 *
 * What each format holds (FORMATS.md §1.5, §2.2-2.6; the ckpt.* metadata
 * keys are ckpt's own and documented in include/ckpt.h, "write"):
 *   - safetensors: every tensor contiguous, ordered by dtype then name,
 *     header padded with spaces to a multiple of 8; tensors reachable under
 *     several names (tied weights) are written once, the other names listed
 *     in "ckpt.aliases"; the non-tensor values and the nesting go into
 *     "ckpt.structure"; per-tensor XXH3-64 digests into "ckpt.xxh3".
 *   - torch zip: a protocol-2 data.pkl using only opcodes and globals on
 *     torch's weights_only allowlist, 64-byte aligned stored records,
 *     `byteorder`, `version`, storages shared as in the tree, and an extra
 *     record "<archive>/extra/ckpt_meta.json" (the metadata and the
 *     digests; torch ignores it).
 * Values the formats cannot hold (opaque objects, storages of quantized
 * tensors, cycles) fail with CKPT_E_UNSUPPORTED naming where they are. */
#ifndef CKPT_WRITE_H
#define CKPT_WRITE_H

#include "container/atomic.h"
#include "ckpt.h"
#include "model/tensor.h"
#include "model/value.h"
#include "base/buf.h"
#include "base/hex.h"
#include "base/ptrmap.h"

/* Metadata keys ckpt writes and reads itself; users may not set them. */
#define CKPT_META_STRUCTURE "ckpt.structure"
#define CKPT_META_ALIASES "ckpt.aliases"
#define CKPT_META_XXH3 "ckpt.xxh3"
#define CKPT_META_PREFIX "ckpt."
/* ckpt.* keys a caller writes (Python's ckpt.save): the metadata keys whose
 * values are JSON text (a JSON array of names), and the optimizer class of
 * each optimizer state dict ({"tree.path": "module.qualname"}). Kept as
 * they are by convert and rename. */
#define CKPT_META_JSON "ckpt.meta_json"
#define CKPT_META_OPTIMIZERS "ckpt.optimizers"
/* What Python's ckpt.save records about where a checkpoint was saved
 * (JSON text each), which the file does not carry otherwise: the torch,
 * Python and ckpt versions; the model class and its source file; the dtype
 * intent (default dtype, autocast, parameter dtypes); the device. */
#define CKPT_META_SAVED_VERSIONS "ckpt.versions"
#define CKPT_META_SAVED_MODEL "ckpt.model"
#define CKPT_META_SAVED_DTYPE "ckpt.dtype"
#define CKPT_META_SAVED_DEVICE "ckpt.device"
/* Whether a metadata key is the writer's own (ckpt.* but the ones above):
 * never taken from a caller, dropped when a file is rewritten. */
int ckpt_wr_meta_reserved(const char *key);
/* The ckpt.* keys ckpt.save records about the saving environment (the
 * CKPT_META_SAVED_* above): the metadata topic each belongs to
 * (ckpt_meta_topic), or -1 for any other key. */
int ckpt_wr_meta_saved_topic(const char *key);
/* The record of a torch archive holding metadata and digests. */
#define CKPT_TORCH_META_RECORD "extra/ckpt_meta.json"

/* Writes `root` in `format` (CKPT_FORMAT_SAFETENSORS or
 * CKPT_FORMAT_TORCH_ZIP) into the open atomic file `a` (its target names
 * the torch archive folder); neither commits nor aborts `a`. opts may be
 * NULL. Tensor bytes are read through model/tensor.h (pread from the
 * files they lie in, bounded windows), so memory stays bounded whatever
 * the size. stats (may be NULL) receives the tensors and bytes written.
 * Returns 0 or a CKPT_E_* code with the error recorded. This is what
 * ckpt_store_commit_with and `ckpt rename` call. */
typedef struct ckpt_write_stats {
    uint64_t tensors; /* tensor records (safetensors) or storages (torch) */
    uint64_t keys;    /* tensor names (tied tensors: one per name) */
    uint64_t bytes;   /* file size */
} ckpt_write_stats;
int ckpt_write_value_to(ckpt_atomic *a, const ckpt_value *root, ckpt_format format,
                        const ckpt_write_options *opts, ckpt_write_stats *stats);

/* The format a path's extension names: .safetensors; .pt .pth .bin .ckpt
 * (a torch zip); .dcp (a DCP directory, also with trailing slashes);
 * 0 for any other name. Case-insensitive. */
ckpt_format ckpt_wr_format_for_path(const char *path);
/* begin + ckpt_write_value_to + commit (no backup); on failure the target
 * is untouched. */
int ckpt_write_value(const ckpt_value *root, const char *path, ckpt_format format,
                     const ckpt_write_options *opts, ckpt_write_stats *stats);

/* Format writers (write_safetensors.c, write_torch.c): same contract as
 * ckpt_write_value_to after the options were validated. */
int ckpt_write_safetensors(ckpt_atomic *a, const ckpt_value *root, const ckpt_write_options *opts,
                           ckpt_write_stats *stats);
int ckpt_write_torch(ckpt_atomic *a, const ckpt_value *root, const ckpt_write_options *opts,
                     ckpt_write_stats *stats);
/* ckpt_write_torch appending one archive at the end of `a`, whatever it
 * holds already: the zip's offsets are relative to where it starts (as
 * torch.save writes into a stream; DCP data files concatenate such
 * archives), its folder is `archive` (NULL: from the target's name), and
 * with `clone` a tensor whose storage is larger than its bytes is written
 * as a contiguous copy of them (what DCP does before torch.save). stats
 * bytes: the archive's size. */
int ckpt_write_torch_at(ckpt_atomic *a, const ckpt_value *root, const char *archive, int clone,
                        const ckpt_write_options *opts, ckpt_write_stats *stats);

/* ------------------------------------------------------------ shared */

/* Where a tensor's bytes really are: legacy view storages are resolved to
 * their root storage, the offset (elements) adjusted. */
const ckpt_storage *ckpt_wr_root_storage(const ckpt_tensor *t, uint64_t *offset);

/* Source verification (model/tensor.h): what the input records for
 * root's bytes is checked once per write, `seen` holding the roots done.
 * whole: crc and xxh are the CRC-32 and XXH3-64 of root's bytes just
 * written, all of them in order; else root is read whole now. 0, or
 * CKPT_E_CHECKSUM naming the input. */
int ckpt_wr_verify_source(ckpt_ptrmap *seen, const ckpt_storage *root, int whole, uint32_t crc,
                          uint64_t xxh);
/* 1 when what the input records for root's bytes is still to be checked
 * in this write. */
int ckpt_wr_source_unverified(const ckpt_ptrmap *seen, const ckpt_storage *root);

/* One tensor reached by the flattened name `name` (file.c's rules: dict
 * keys as text, list/tuple/set indices in decimal, joined with "."). */
typedef struct wr_named {
    const char *name;        /* ckpt_malloc'd */
    const ckpt_value *value; /* the TENSOR node */
    uint64_t seq;            /* discovery order */
} wr_named;

/* Walks the tree like ckpt_file_flatten and checks that every value can be
 * written: *out receives the tensors by path (in walk order, every path of
 * a shared node), *n their count. A dict's BUILD state (dict.state) is
 * checked too, but may hold no tensor (they would have no name).
 * Opaque objects, global references that
 * are not torch dtypes, internal kinds and cycles fail with
 * CKPT_E_UNSUPPORTED naming the path (opaque objects: up to 8 of them,
 * with a hint to leave them out with --select); depth and visits are
 * bounded like ckpt_file_flatten. Free with ckpt_wr_named_free. */
int ckpt_wr_collect(wr_named **out, size_t *n, const ckpt_value *root);
void ckpt_wr_named_free(wr_named *v, size_t n);
/* Sorts by name, keeping only the last discovered among equal names (what
 * ckpt_file_flatten does); returns the new count (freed names dropped). */
size_t ckpt_wr_named_unique(wr_named *v, size_t n);

/* Which of the n tensors (distinct names) a safetensors file of them
 * holds under their own name: written[i] receives 1, or 0 for a name the
 * writer lists in "ckpt.aliases" (the same view of the same storage as a
 * name before it in byte order). 0 or CKPT_E_NOMEM. */
int ckpt_wr_safetensors_written(const wr_named *t, size_t n, unsigned char *written);
int ckpt_wr_check_options(const ckpt_write_options *opts);
/* Tells opts->progress (when opts and it are set) that done of total
 * tensors are written. */
void ckpt_wr_progress(const ckpt_write_options *opts, uint64_t done, uint64_t total);

/* The canonical torch dtype attribute name ("float32" also for a
 * reference to torch.float) of a GLOBAL_ dtype reference, or NULL if the
 * reference is not a torch dtype. */
const char *ckpt_wr_dtype_ref(const ckpt_value *v);

#endif
