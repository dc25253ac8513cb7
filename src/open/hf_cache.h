/* hf_cache.h - a Hugging Face cache repository: huggingface_hub's
 * models--ORG--NAME folder (HF_HUB_CACHE), holding blobs/ (every file's
 * bytes), snapshots/REVISION/ (one model folder per revision, its files
 * links into blobs/) and refs/ (refs/main: the revision from_pretrained
 * resolves "main" to). The repository stands for the snapshot refs/main
 * names, as from_pretrained(repo_id) offline reads it. */
#ifndef CKPT_OPEN_HF_CACHE_H
#define CKPT_OPEN_HF_CACHE_H

#include "base/alloc.h"

/* 1 if `dir` is a directory holding the subdirectories snapshots/ and
 * blobs/, else 0. */
int ckpt_hf_cache_is_repo(const char *dir);

/* The snapshot folder refs/main names, "dir/snapshots/REV" in *snapshot
 * and REV in *rev (arena copies). CKPT_E_IO when refs/main is missing,
 * holds no revision name, or names a snapshot that is not there: the
 * message lists the snapshots there (the first few in name order) and
 * says to name one. CKPT_E_NOMEM. */
int ckpt_hf_cache_snapshot(ckpt_arena *a, const char *dir, const char **snapshot, const char **rev);

#endif
