/* sharded.h - sharded sets ("*.safetensors.index.json", FORMATS.md §1.7,
 * and Hugging Face "pytorch_model.bin.index.json" sets of torch.save shards):
 * the one rule for the shard names an index lists, shared by the reader
 * and the scanner, and the reader, the only code that re-enters ckpt_open.
 */
#ifndef CKPT_SHARDED_H
#define CKPT_SHARDED_H

#include <stddef.h>
#include <stdint.h>

#include "model/file.h"

/* The shard file name `name` (len bytes, from a weight_map) as a loader
 * joins it to the index's directory (HF transformers: os.path.join), in
 * canonical form: empty and "." segments dropped, so "x", "./x" and ".//x"
 * are one shard, spelled "x". A name that could reach a file outside the
 * directory is refused, as are names no loader could open:
 * empty or holding a NUL byte, absolute, with a backslash, drive or colon,
 * with a ".." segment (not resolved: "a/../x" is x only when a is a real
 * directory, which the name alone cannot tell), naming the directory
 * itself or a directory ("x/"), or (with `ext`, e.g. ".safetensors" or
 * ".bin") not ending in ext.
 * Returns NULL with the canonical name in out (len + 1 bytes), or why the
 * name is refused (a static phrase: "an absolute path"). */
const char *ckpt_shard_name(char *out, const char *name, size_t len, const char *ext);

/* Whether the shard at `path` (dir/NAME, NAME canonical) is a file outside
 * directory `dir` reached through a symbolic link: 1 with the file's real
 * path in target (cap bytes), else 0. Loaders follow links (a Hugging
 * Face cache links every shard to a blob two levels up), so the reader
 * follows them too; the scanner reports them. */
int ckpt_shard_outside(const char *dir, const char *path, char *target, size_t cap);

/* Reads the index `json` (len bytes, within max_index_bytes: the caller
 * checks that before reading it) of f, whose directory is `dir` ("."
 * if none): opens each shard once (names that ckpt_shard_name makes equal,
 * or that reach one file through links, are one shard) and matches its
 * tensors against the weight_map. An index named "*.bin.index.json"
 * (transformers' WEIGHTS_INDEX_NAME) lists torch.save shards "*.bin", each
 * a state dict: f becomes CKPT_FORMAT_TORCH_SHARDED; any other index lists
 * safetensors shards: CKPT_FORMAT_SAFETENSORS_SHARDED. f owns its shards.
 * Returns 0 or a CKPT_E_* code with the error recorded (a shard's own
 * errors name the shard's path; a missing shard is CKPT_E_MISMATCH). */
int ckpt_sharded_read(ckpt_file *f, const uint8_t *json, size_t len, const char *dir);

/* The format of the set an index at `path` describes, by its name as
 * above: CKPT_FORMAT_TORCH_SHARDED for "*.bin.index.json", else
 * CKPT_FORMAT_SAFETENSORS_SHARDED. */
ckpt_format ckpt_sharded_format(const char *path);

#endif
