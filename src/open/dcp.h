/* dcp.h - a torch.distributed.checkpoint directory opened as one
 * checkpoint (ckpt.h "DCP directories", FORMATS.md §4): `.metadata`
 * (format/dcp_meta.h) says which slice of which data file holds each chunk
 * and bytes item; each slice is opened as a checkpoint of its own (a
 * torch.save zip, or the rank's safetensors file) and each global tensor
 * is assembled from its chunks (model/value.h ckpt_chunks). */
#ifndef CKPT_OPEN_DCP_H
#define CKPT_OPEN_DCP_H

#include "model/file.h"

/* How a directory holds a DCP checkpoint, as torch 2.13's loaders find
 * it (state_dict_loader._load_state_dict, FileSystemReader.read_metadata,
 * HuggingFaceStorageReader.read_metadata):
 *   METADATA     `.metadata` (a collective save). DCP reads it and nothing
 *                else, even where rank files lie next to it.
 *   RANKS        no `.metadata` but `__R.metadata` files: a save with
 *                use_collectives=False, where every rank wrote its own. The
 *                loader on rank R falls back to `__R.metadata`; dcp.load
 *                without a process group and dcp_to_torch_save read
 *                `__0.metadata`. ckpt opens all of them as one checkpoint
 *                (open/dcp.c: their union, which every rank's view is part
 *                of).
 *   NO_METADATA  "*.distcp" data files and no metadata of either kind.
 *   HF           no DCP metadata, no model.safetensors.index.json and no
 *                model.safetensors (transformers' names), but
 *                "*.safetensors" files whose header holds DCP_SHARDING_INFO
 *                (HuggingFaceStorageWriter with save_distributed=True and no
 *                consolidation): HuggingFaceStorageReader lists every
 *                "*.safetensors" file and places each tensor at its
 *                saved_offsets. With an index (the rank-0 and the
 *                consolidated layouts) the directory is a sharded set. */
typedef enum ckpt_dcp_layout {
    CKPT_DCP_NOT = 0,
    CKPT_DCP_METADATA,
    CKPT_DCP_RANKS,
    CKPT_DCP_NO_METADATA,
    CKPT_DCP_HF
} ckpt_dcp_layout;

ckpt_dcp_layout ckpt_dcp_dir_layout(const char *dir);

/* 1 if directory `dir` is a DCP checkpoint (a layout other than NOT). */
int ckpt_dcp_is_dir(const char *dir);

/* 1 for a file name HuggingFaceStorageReader reads ("*.safetensors",
 * _hf_utils.SUFFIX). */
int ckpt_dcp_hf_name(const char *name);

/* R for a rank's metadata file name "__R.metadata" (FileSystemWriter's
 * f"__{rank}.metadata": decimal, no leading zero), else -1. */
int ckpt_dcp_rank_metadata(const char *name);

/* The one rule for what a slice of a data file is, which the reader and
 * the scan both follow: how a loader reads the slice at offset `off` of a
 * data file whose first bytes are head0[0..n0) and whose slice starts
 * with at[0..nat) (up to CKPT_HEAD_BYTES each). A tensor chunk inside the
 * data of the safetensors file the whole data file is (ckpt.dcp.Writer:
 * the slice is one tensor's raw data, never unpickled, whatever its bytes
 * look like) is CKPT_FORMAT_SAFETENSORS with *base 0. Otherwise *base is
 * off and the slice is what its own first bytes are (ckpt_detect_format):
 * a torch.save zip (DCP's torch_save format; a bytes item of any
 * layout), a safetensors file running to the file's end (DCP's
 * safetensors format, after the rank's bytes items), or anything else,
 * which no reader accepts. */
ckpt_format ckpt_dcp_slice_format(const uint8_t *head0, size_t n0, const uint8_t *at, size_t nat,
                                  uint64_t off, int is_bytes, uint64_t *base);

/* Reads f as the DCP checkpoint of directory `dir`: f's mapping is its
 * `.metadata` (METADATA, or any file content-detected as DCP metadata), or
 * f is one of the rank files `__R.metadata` (RANKS: every rank file of
 * the directory is read and merged), or f's path is `dir` itself (HF).
 * Opens the data files named (f's shards) and their slices (f's parts),
 * checks the chunks of every tensor against their slices and that they
 * tile it, and builds f->root. Returns 0 or a CKPT_E_* code with the
 * error recorded (see ckpt_open). */
int ckpt_dcp_read(ckpt_file *f, const char *dir);

/* Files of f's directory that f's loader does not read: "*.distcp"
 * files no metadata names (left by an earlier save, or a rank's output the
 * coordinator never recorded), and metadata DCP ignores (`__R.metadata`
 * next to a `.metadata`, which wins) or that shadows f's (a `.metadata`
 * next to the rank files f was read from): CKPT_E_MISMATCH naming the
 * first, else 0; CKPT_E_IO when the directory cannot be listed. An
 * empty "*.distcp" file is not reported: FileSystemWriter leaves one for
 * each writer thread or rank that had nothing to write. */
int ckpt_dcp_check_unnamed(const ckpt_file *f);

/* A sharded safetensors set (an index) whose shards carry
 * DCP_SHARDING_INFO, as HuggingFaceStorageWriter writes with rank 0's
 * state dict or by consolidation, is read by HuggingFaceStorageReader
 * without its index: CKPT_E_MISMATCH when that reading differs from the
 * index's, naming a "*.safetensors" file of the directory the index does
 * not list or a tensor whose saved_offsets are not all 0; else 0 (also
 * for any other file). */
int ckpt_dcp_check_hf_set(const ckpt_file *f);

#endif
