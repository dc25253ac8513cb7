/* dcp_meta.h - the `.metadata` file of a torch.distributed.checkpoint (DCP)
 * directory (FORMATS.md §4.2): a plain pickle of
 * torch.distributed.checkpoint.metadata.Metadata, which FileSystemReader
 * loads with an unrestricted pickle.load. Here it runs through the
 * restricted machine (pickle.h) and only the classes DCP pickles into it
 * may appear (ckpt_dcp_meta_allowed); any other global is CKPT_E_UNSAFE.
 *
 * What is read, and how (torch 2.13 metadata.py, filesystem.py):
 *   Metadata.__dict__: state_dict_metadata {fqn: TensorStorageMetadata |
 *     BytesStorageMetadata}, storage_data {MetadataIndex: _StorageInfo},
 *     planner_data {fqn: object path (a tuple of str and int keys)} when
 *     the planner flattened the state dict; storage_meta and version are
 *     not read.
 *   TensorStorageMetadata.__dict__: properties (TensorProperties, whose
 *     __getstate__ is the tuple (dtype, layout, requires_grad,
 *     memory_format, pin_memory)), size (torch.Size), chunks (a list of
 *     ChunkStorageMetadata {offsets, sizes}).
 *   MetadataIndex.__dict__: fqn, offset (torch.Size or None), index; equal
 *     when fqn and offset are (index is excluded from eq), so a later
 *     duplicate key replaces an earlier one, as in the dict.
 *   _StorageInfo.__dict__: relative_path, offset, length and, with stream
 *     transforms, transform_descriptors (refused: CKPT_E_UNSUPPORTED, naming
 *     the first descriptor, whenever FileSystemReader would apply them:
 *     it applies `transform_descriptors or ()`).
 */
#ifndef CKPT_FORMAT_DCP_META_H
#define CKPT_FORMAT_DCP_META_H

#include <stddef.h>
#include <stdint.h>

#include "base/alloc.h"
#include "ckpt.h"

/* One chunk of a global tensor, or the one blob of a bytes item, with
 * where its bytes are (its storage_data entry). */
typedef struct ckpt_dcp_chunk {
    uint64_t *offsets, *sizes; /* ndim each (tensor items) */
    const char *path;          /* relative_path, as pickled */
    size_t path_len;           /* its bytes: a NUL inside is no end */
    uint64_t offset, length;   /* in that file */
    /* the claim errors about that slice contradict: the metadata file
     * (ckpt_dcp_meta_parse's `file`) and the byte offset in it of the
     * _StorageInfo giving path, offset and length (CKPT_NO_OFFSET when not
     * known); meta_file NULL: no metadata file placed it (HF layouts) */
    const char *meta_file;
    uint64_t meta_at;
} ckpt_dcp_chunk;

typedef struct ckpt_dcp_item {
    const char *fqn;
    int is_bytes; /* BytesStorageMetadata: a torch.save'd object */
    ckpt_dtype dtype;
    uint32_t ndim;
    uint64_t *size; /* global shape, ndim elements */
    ckpt_dcp_chunk *chunks;
    size_t nchunks; /* 1 for a bytes item */
    /* planner_data[fqn]: the object path DefaultSavePlanner flattened
     * (str and int keys, npath >= 1), or NULL when planner_data has none */
    const ckpt_value *const *path;
    size_t npath;
    const ckpt_value *top_key; /* room for a reader's one-key path */
} ckpt_dcp_item;

typedef struct ckpt_dcp_meta {
    ckpt_dcp_item *items; /* in state_dict_metadata order */
    size_t nitems;
} ckpt_dcp_meta;

/* Parses the pickle p[0..n) of file `file`. Everything is allocated in
 * `a`. Returns 0, or CKPT_E_UNSAFE (a global that is no DCP metadata
 * class; the error names it and its offset), CKPT_E_FORMAT (not a
 * Metadata, a chunk without a storage_data entry, a field of the wrong
 * kind, a chunk outside its tensor), CKPT_E_UNSUPPORTED (transform
 * descriptors, a dtype ckpt does not know), CKPT_E_LIMIT, CKPT_E_NOMEM
 * or the machine's codes. An error about a value gives, as its offset,
 * that of the opcode that built the value ("expected ..., got ..."), or of
 * the object that lacks a missing field. */
int ckpt_dcp_meta_parse(ckpt_dcp_meta *out, ckpt_arena *a, const uint8_t *p, size_t n,
                        const char *file, const ckpt_limits *limits);

/* 1 if module.name may appear in a `.metadata` pickle: the DCP metadata
 * classes, torch.Size, torch dtypes, torch.serialization._get_layout and
 * the pathlib path classes of StorageMeta.checkpoint_id. */
int ckpt_dcp_meta_allowed(const char *module, const char *name);

#endif
