/* dcp_write.h - a ckpt_value tree written as a torch.distributed.checkpoint
 * (DCP) directory the way torch 2.13's dcp.save writes it on one rank with
 * the default DefaultSavePlanner and FileSystemWriter (FORMATS.md §4), so
 * that FileSystemReader, dcp.load and dcp_to_torch_save read it.
 *
 * The plan (default_planner.py, _nested_dict.flatten_state_dict,
 * _traverse.traverse_state_dict): the root must be a dict; dicts are
 * walked with str(key) path elements, lists with int indices when they
 * hold a tensor, a dict or such a list (otherwise a list, like a tuple or
 * any other value, is one item); empty dicts vanish. Each item is named
 * ".".join(map(str, path)) (a name reached twice is refused, as DCP
 * does). A torch tensor is a tensor item (one chunk at offset 0, the whole
 * tensor); anything else, numpy arrays included, a bytes item: the
 * torch.save of the value.
 *
 * The files: `__0_0.distcp` holds the bytes items, then the tensor items,
 * in plan order, each a complete torch.save zip (archive folder "archive",
 * offsets relative to the slice, as torch.save writes into a stream); a
 * tensor is detached (a plain tensor, no requires_grad) and, when its
 * storage is larger than its bytes, written as a contiguous copy
 * (filesystem.py _SerialCpuLoader clones it). Tensors sharing a storage
 * are written once each, as DCP does. `.metadata` is the pickle of
 * Metadata(state_dict_metadata, planner_data = {fqn: path},
 * storage_data = {MetadataIndex: _StorageInfo}, storage_meta =
 * StorageMeta(checkpoint_id=PosixPath(dir), save_id=<uuid4>),
 * version="1.0.0"), written by pickle_write.h at protocol 2. */
#ifndef CKPT_DCP_WRITE_H
#define CKPT_DCP_WRITE_H

#include "base/alloc.h"
#include "format/write.h"

typedef struct ckpt_dcp_witem {
    const char *fqn;         /* ".".join(map(str, path)) */
    const ckpt_value **path; /* STR (str(dict key)) and INT (list index) values */
    size_t npath;            /* >= 1 */
    const ckpt_value *value; /* the item's value */
    int is_tensor;           /* a tensor item (else bytes) */
    uint64_t offset, length; /* where ckpt_write_dcp put it in __0_0.distcp */
} ckpt_dcp_witem;

typedef struct ckpt_dcp_plan {
    ckpt_dcp_witem *items; /* in plan (traversal) order */
    size_t n, cap;
    ckpt_arena arena; /* everything the plan allocates */
} ckpt_dcp_plan;

/* The data file name FileSystemWriter gives rank 0's first file. */
#define CKPT_DCP_DATA_FILE "__0_0.distcp"

/* Makes the plan of `root` (*p zeroed first). 0, or CKPT_E_UNSUPPORTED
 * (the root is not a dict, a dict key DCP would name by a str() ckpt does
 * not reproduce, a name containing a NUL byte), CKPT_E_INVALID_ARG (a
 * duplicated flattened name, which DCP refuses too), CKPT_E_LIMIT
 * (nesting deeper than 1000), CKPT_E_NOMEM. Free with ckpt_dcp_plan_free
 * either way. */
int ckpt_dcp_plan_make(ckpt_dcp_plan *p, const ckpt_value *root);
void ckpt_dcp_plan_free(ckpt_dcp_plan *p);

/* Writes the plan's files into the existing directory `dir` (each through
 * ckpt_atomic: temporary, fsync, rename, fsync of dir), recording each
 * item's offset and length. checkpoint_id: the path StorageMeta records
 * (where the directory will be). stats: tensors = tensor items, keys =
 * items, bytes = both files' sizes. Values a torch archive cannot hold are
 * refused by the torch writer (CKPT_E_UNSUPPORTED naming them). */
int ckpt_write_dcp(const char *dir, const char *checkpoint_id, ckpt_dcp_plan *p,
                   const ckpt_write_options *opts, ckpt_write_stats *stats);

#endif
