/* folder_files.h - the other files of a model folder (config.json, the
 * tokenizer's, generation_config.json...) that convert writes beside the
 * weights it converts, so that from_pretrained(OUT) loads OUT as it
 * loaded IN. */
#ifndef CKPT_JOBS_FOLDER_FILES_H
#define CKPT_JOBS_FOLDER_FILES_H

#include <stddef.h>

#include "base/alloc.h"

typedef struct ckpt_folder_file {
    const char *name; /* in the folder, and in the output folder */
    const char *from; /* dir/name (a symbolic link is followed: it leads
                         to a file inside dir) */
} ckpt_folder_file;

typedef struct ckpt_folder_files {
    ckpt_folder_file *files; /* in strcmp order of name */
    size_t n;
} ckpt_folder_files;

/* Lists the regular files directly in `dir` that are not weights: not
 * hidden (".name": ckpt's temporary files among them), not a weights
 * file or index a model folder is opened by, plain or a variant's
 * (ckpt_model_dir_rank), not a shard (ckpt_model_dir_shard_index), not
 * trainer_state.json (the Trainer's training state, JSON), and not a
 * checkpoint by its first bytes (ckpt_detect_format: a zip such as optimizer.pt or
 * training_args.bin, safetensors, torch's legacy format, DCP's .metadata,
 * a pickle opening with PROTO). Subfolders are not listed. A symbolic link
 * counts as the file it leads to when that is inside `dir`, or when `dir`
 * is a Hugging Face cache snapshot (REPO/snapshots/REV) and the link leads
 * to one of its repository's blobs (REPO/blobs/NAME, how huggingface_hub
 * stores every file); any other link out of `dir` is refused,
 * CKPT_E_INVALID_ARG naming it. Other errors: CKPT_E_IO (dir unreadable),
 * CKPT_E_NOMEM. Arena copies in *out. */
int ckpt_folder_files_list(ckpt_folder_files *out, ckpt_arena *a, const char *dir);

/* Writes each listed file into `out_dir` under its name, atomically and
 * verified (ckpt_atomic: every byte read back before the rename), backup
 * as ckpt_atomic_commit's; a file that changes size while read is
 * CKPT_E_IO and is not written. 0, or the first failure (files written
 * before it stay). */
int ckpt_folder_files_copy(const ckpt_folder_files *f, const char *out_dir, int backup,
                           ckpt_arena *a);

#endif
