/* store.h - committing a generation whose bytes a caller writes itself.
 *
 * ckpt_store_commit copies a checkpoint file; writers that serialise an
 * in-memory tree (a future ckpt.Store.commit(obj, step)) hand their writer
 * to ckpt_store_commit_with instead and get the same guarantees: atomic
 * write, full re-read and verification, LATEST moved, then pruning. */
#ifndef CKPT_STORE_H
#define CKPT_STORE_H

#include "container/atomic.h"
#include "ckpt.h"

/* Writes the whole generation through `a` (ckpt_atomic_write/pwrite) and
 * returns 0 or a CKPT_E_* code with the error recorded. It must not commit
 * or abort `a`: the store does. */
typedef int (*ckpt_store_write_fn)(void *ctx, ckpt_atomic *a);

/* ckpt_store_commit with the bytes produced by write(ctx, a) instead of a
 * copied file. ext: ".safetensors" or ".pt", the format write produces.
 * Everything else (arguments, order of steps, return codes; a writer's own
 * code is returned as is) as ckpt_store_commit. */
int ckpt_store_commit_with(char *path, size_t cap, const char *dir, const char *name, uint64_t step,
                           const char *ext, ckpt_store_write_fn write, void *ctx,
                           const ckpt_store_options *opts);

#endif
