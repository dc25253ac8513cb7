/* model_dir.h - the weights files of a model directory (Hugging Face
 * save_pretrained's layout, a Trainer checkpoint folder), in
 * transformers' from_pretrained order: ckpt_open of such a directory
 * opens the first present; the training analysis of a directory takes
 * several of them for copies of one save (open.c). */
#ifndef CKPT_OPEN_MODEL_DIR_H
#define CKPT_OPEN_MODEL_DIR_H

#include "base/alloc.h"
#include "ckpt.h"

/* If `name` (a file name inside the directory) is one of those files, its
 * rank in that order (1: model.safetensors), else 0. */
int ckpt_model_dir_weights_name(const char *name);
/* transformers' and diffusers' _add_variant: save_pretrained(variant="fp16")
 * and from_pretrained(variant="fp16") name each of those files with the
 * variant before its last extension ("model.fp16.safetensors",
 * "model.safetensors.index.fp16.json", "pytorch_model.fp16.bin"; the
 * shards "model.fp16-00001-of-00002.safetensors"). If `name` is one, not a
 * shard, the plain name's rank and the variant in variant[cap]; else 0. */
int ckpt_model_dir_variant(const char *name, char *variant, size_t cap);
/* The order in which a folder's weights are taken: the plain name's rank,
 * then a variant's (after every plain name), else 0. */
int ckpt_model_dir_rank(const char *name);
/* The path of the first of them present in `dir` (an arena copy), else
 * when there is none those of a variant, the only one there (several:
 * CKPT_E_IO naming two), else
 * of a PEFT adapter's weights (adapter_model.safetensors, .bin): the file
 * ckpt_open of the directory opens. 0, CKPT_E_IO when there is none (a
 * Trainer output directory: the message names its latest checkpoint-N
 * folder), CKPT_E_MISMATCH when there is none but shard files are there
 * (ckpt_model_dir_orphan_shards), CKPT_E_NOMEM. */
int ckpt_model_dir_weights(ckpt_arena *a, const char *dir, const char **out);
/* The loaders read a weights file by its name, not its bytes:
 * from_pretrained, diffusers and PEFT (and torch.load >= 2.13 of a path)
 * read "*.safetensors" with safetensors and a ".bin" file with torch.load,
 * which reads only torch.save files (zip or legacy: a plain pickle is
 * "Invalid magic number"). NULL when a file of that name and format `fmt`
 * is one its loader reads (or the name is none of those), else what the
 * loader expects ("safetensors", "torch.save"). One rule for a model
 * folder's weights and a sharded set's shards. */
const char *ckpt_model_dir_format_misfit(const char *name, ckpt_format fmt);
/* The same for a file at `path` whose base name is a model folder's
 * weights file (ckpt_model_dir_weights_name, or a PEFT adapter's) or ends
 * in ".safetensors" (torch.load >= 2.13 reads such a path with
 * safetensors too); NULL for any other name: ckpt_open reads those by
 * content, as torch.load does. */
const char *ckpt_model_dir_name_misfit(const char *path, ckpt_format fmt);
/* Whether transformers' from_pretrained reads the weights at `path` (by
 * its base name) with the __metadata__ check below: model.safetensors, or
 * the set model.safetensors.index.json lists (each shard), or a variant
 * of either (model.fp16.safetensors), in a model
 * folder, a Trainer checkpoint folder or a pipeline's transformers
 * component alike. Not diffusers' diffusion_pytorch_model.* nor a PEFT
 * adapter's adapter_model.*: their loaders read safetensors without it. */
int ckpt_model_dir_metadata_checked(const char *path);
/* transformers refuses a safetensors file whose __metadata__ is present
 * (even empty) but whose "format" is not "pt", "tf", "flax" or "mlx"
 * (OSError "does not contain the valid metadata"); one without
 * __metadata__ loads. 0 when `f` (one safetensors file: the file or a
 * shard) passes; else CKPT_E_MISMATCH, the error naming f's path, the
 * value found and the fix (`ckpt convert F F --meta format=pt`, F as
 * ckpt_shell_quote writes it), and *found the "format" value, NULL when
 * the key is missing; CKPT_E_NOMEM when the fix cannot be written. */
int ckpt_model_dir_metadata_refused(const ckpt_file *f, const char **found);
/* If `name` is a shard name as Hugging Face writes it,
 * "NAME-00003-of-00005.EXT" (transformers' shard_checkpoint,
 * huggingface_hub's split), 1 and the name of the index that lists it,
 * "NAME.EXT.index.json" ("model.safetensors.index.fp16.json" for a
 * variant's shard, "model.fp16-00003-of-00005.safetensors"), in
 * index[cap]; else 0. */
int ckpt_model_dir_shard_index(char *index, size_t cap, const char *name);
/* A directory holding shard files (names as above; hidden files aside):
 * CKPT_E_MISMATCH naming the first (strcmp order) and the index it
 * lacks, for a caller that found no index for them; else 0 (also when
 * `dir` cannot be listed). */
int ckpt_model_dir_orphan_shards(const char *dir);
/* transformers' Trainer output directory: its checkpoints are folders
 * checkpoint-N (get_last_checkpoint: ^checkpoint-(\d+)$, the highest N
 * the latest). The latest's path (an arena copy), or NULL. */
const char *ckpt_model_dir_trainer_latest(ckpt_arena *a, const char *dir);
/* What a command says of such a directory (printf format: %s, the latest). */
#define CKPT_TRAINER_DIR                                                                           \
    "a Trainer output directory, whose checkpoints are its checkpoint-N folders: name one (the "   \
    "latest: %s)"

#endif
