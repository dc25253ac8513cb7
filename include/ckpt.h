/*
 * ckpt.h - the public API of libckpt (umbrella: one header per concept
 * under ckpt/).
 *
 * libckpt opens machine-learning checkpoints without executing anything in
 * them, shows what is inside and proves the bytes are intact.
 *
 * Formats (see shared/docs/FORMATS.md for the byte-level facts):
 *   - safetensors (mmap, zero-copy, every validation rule of the reference
 *     reader huggingface/safetensors tensor.rs), and sharded sets opened
 *     through their "*.safetensors.index.json";
 *   - PyTorch zip archives written by torch.save (torch >= 1.6);
 *   - the legacy stacked-pickle format (torch < 1.6);
 *   - raw pickle files.
 * Pickles are read by a restricted machine: globals on an allowlist of data
 * builders (OrderedDict, torch tensor/storage rebuilders, numpy scalars and
 * arrays...) are interpreted; every other global becomes an opaque object
 * named "module.qualname" that is never called.
 *
 * Conventions (libgit2/zstd style):
 *   - Fallible calls return 0 or a negative CKPT_E_* code; details of the
 *     last failure on this thread are in ckpt_error_last().
 *   - Out-params come first; "T **out" belongs to the caller and is freed by
 *     the matching *_free/close function (NULL-safe). On failure *out is NULL.
 *   - Getters return borrowed pointers that live as long as their ckpt_file.
 *   - The library never prints, exits or aborts because of input.
 *   - Sizes are bytes unless stated; shapes and strides are in elements,
 *     row-major (C order), at most CKPT_MAX_NDIM dimensions.
 * Thread-safety: a ckpt_file may be read from several threads at once; the
 * error record is per thread; ckpt_set_allocator must be called before any
 * other call.
 */
#ifndef CKPT_H
#define CKPT_H

#include "ckpt/common.h"
#include "ckpt/file.h"
#include "ckpt/scan.h"
#include "ckpt/store.h"
#include "ckpt/training.h"
#include "ckpt/keys.h"
#include "ckpt/write.h"
#include "ckpt/report.h"

#endif /* CKPT_H */
