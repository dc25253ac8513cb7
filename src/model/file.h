/* file.h - the opened checkpoint, shared by the readers that fill it. */
#ifndef CKPT_FILE_H
#define CKPT_FILE_H

#include "base/alloc.h"
#include "ckpt.h"
#include "model/flatten.h"
#include "base/source.h"
#include "model/value.h"

/* The zip directory (container/zip.h); only torch zip readers fill it. */
typedef struct ckpt_zip ckpt_zip;

struct ckpt_file {
    ckpt_arena arena; /* owns everything below */
    const char *path; /* as given to open ("" for unnamed memory) */
    ckpt_format format;
    ckpt_open_options opts;

    const uint8_t *map; /* the whole input */
    size_t map_size;
    int mapped; /* 1: munmap(map) on close */
    /* where tensor bytes are read from (pread on the file's descriptor,
     * closed with the file; fd -1 for memory) */
    ckpt_source source;

    /* the tree; NULL until first asked for while tree_lazy is set: a
     * safetensors reader fills tensors and storages itself, and builds
     * the tree only when ckpt_file_root wants it (most jobs do not, and a
     * tree of a million tensors costs as much as the tensors) */
    ckpt_value *root;
    int tree_lazy;

    /* Filled by ckpt_file_flatten once the reader is done. */
    ckpt_tensor *tensors; /* copies, one per flattened name, sorted */
    size_t ntensors;
    ckpt_named_value *values; /* sorted by name */
    size_t nvalues;
    /* pairs of leaves that different keys name alike (ckpt_flat): both
     * listed; verify fails on the first, naming both paths */
    size_t ncollisions;
    const char *collision_name, *collision_paths[2];

    /* Every distinct storage, in id order (verify reads them all; read
     * them with ckpt_file_storage_at). NULL when storage i is tensors[i]'s
     * (safetensors: one storage per tensor, ids in name order), which
     * spares a pointer per tensor. */
    ckpt_storage **storages;
    size_t nstorages;

    /* safetensors __metadata__ / sharded index metadata. */
    int has_metadata;
    const char **meta_keys, **meta_vals;
    size_t nmeta;

    /* torch zip: the container, for CRC checks, and the inflate budget
     * left (container/zip.h) for the deflated storages inflated on first
     * read (ckpt_storage_resolve). */
    ckpt_zip *zip;
    uint64_t inflate_left;
    /* torch zip: data.pkl's events, for a scan of this file (jobs/scan.c;
     * format/pickle_log.h); NULL when none were logged */
    struct pk_log *pickle_log;

    /* legacy: where storage blobs start and end (verify re-checks counts). */
    uint64_t legacy_blobs_begin, legacy_blobs_end;

    /* the variant a model folder's weights are read under
     * (ckpt_file_variant), NULL for none */
    const char *variant;
    /* the Hugging Face cache repository's revision read through its
     * refs/main (ckpt_file_snapshot), NULL for none */
    const char *snapshot;

    /* sharded safetensors: the shard files (owned). */
    ckpt_file **shards;
    size_t nshards;

    /* DCP directory (open/dcp.h): the directory, and the checkpoints read
     * from slices of its data files (chunks, bytes items; owned). The data
     * files themselves are the shards. */
    const char *dcp_dir;
    ckpt_file **parts;
    size_t nparts;
    /* a part: map and descriptor belong to the data file it is a slice of */
    int borrowed;

    /* ckpt_file_logical_root's tree, decoded on first use (in arena), and
     * the storages it rebuilt (views of one storage in a ckpt-written
     * safetensors file), ids nstorages + i; entries may be NULL. */
    const ckpt_value *logical;
    int logical_done;
    ckpt_storage **logical_storages;
    size_t nlogical_storages;
};

/* f's tree (ckpt_file_root), built on first use for a safetensors file:
 * 0, or CKPT_E_NOMEM with *out NULL. */
int ckpt_file_tree(const ckpt_value **out, const ckpt_file *f);

/* Storage i < f->nstorages. */
ckpt_storage *ckpt_file_storage_at(const ckpt_file *f, size_t i);

/* Flattens f->root into f->tensors/f->values (sorted by name; for equal
 * names the later occurrence wins), gives every storage a dense id and
 * fills f->storages. Enforces limits.max_tensors, max_name_bytes and
 * max_depth. Called by ckpt_open after the format reader succeeded; a
 * no-op for a reader that filled them itself (tree_lazy). */
int ckpt_file_flatten(ckpt_file *f);

/* Flattens root (f's tree or one decoded from it) into arena `a` within
 * f's bounds: its limits, and visits and bytes of names in proportion to
 * its size (ckpt_flatten; the bytes within the file's inflate budget).
 * Errors name f's path and `member`. */
int ckpt_file_flatten_value(const ckpt_file *f, ckpt_arena *a, const ckpt_value *root,
                            const char *member, ckpt_flat *out);

/* Format readers: fill f->format, f->root (and metadata, zip, storages'
 * data) from f->map/f->map_size, whose bytes they read with pread
 * through f->source (base/source.h), never through the mapping: storages'
 * data are addresses in it. Return 0 or a CKPT_E_* code with the error
 * recorded. */
int ckpt_safetensors_read(ckpt_file *f);
/* Builds f->root of a safetensors file from its tensors (in file order)
 * and clears tree_lazy. 0 or CKPT_E_NOMEM. */
int ckpt_safetensors_tree(ckpt_file *f);
int ckpt_torch_read_zip(ckpt_file *f);
/* Any pickle stream: the legacy stacked-pickle format when the first pickle
 * is torch's magic number, else a plain pickle (CKPT_FORMAT_PICKLE). */
int ckpt_torch_read_legacy(ckpt_file *f);

/* Maps path read-only (private), refusing anything but a regular file: a
 * FIFO is opened non-blocking so it never waits for a writer. *map is NULL
 * for an empty file. 0, or CKPT_E_IO / CKPT_E_LIMIT naming the path. */
int ckpt_map_file(const char *path, const uint8_t **map, size_t *size);
/* Undoes ckpt_map_file; NULL-safe. */
void ckpt_unmap_file(const uint8_t *map, size_t size);

/* Bytes the format of an input is detected from (format/detect.h): a
 * tar header, a safetensors header's start, a pickle's first opcodes. */
#define CKPT_HEAD_BYTES 4096u

/* Copies the first bytes of f's input from offset off (<= its size), at
 * most CKPT_HEAD_BYTES, into head with pread (never through the mapping:
 * the file may shrink); *n: how many. 0, or CKPT_E_TRUNCATED / CKPT_E_IO. */
int ckpt_file_head(const ckpt_file *f, uint64_t off, uint8_t head[CKPT_HEAD_BYTES], size_t *n);

/* Opens a file (used for shards). Same contract as ckpt_open. */
int ckpt_file_open_path(ckpt_file **out, const char *path, const ckpt_open_options *opts);

/* Maps `path` (descriptor kept for pread) without reading any format: a
 * DCP data file, whose slices are opened with ckpt_file_open_part. */
int ckpt_file_open_raw(ckpt_file **out, const char *path, const ckpt_open_options *opts);

/* Opens bytes [off, off+len) of `holder` (off + len <= its size) as a
 * checkpoint of its own, detected by content: a torch.save zip or a
 * safetensors file inside a DCP data file. It borrows the holder's
 * mapping and descriptor (tensor bytes are read with pread where they lie
 * in the holder's file) and must be closed before it. `name` names it in
 * errors, whose offsets are relative to `off`. */
int ckpt_file_open_part(ckpt_file **out, const ckpt_file *holder, uint64_t off, uint64_t len,
                        const char *name);

#endif
