/* structure.h - ckpt's own "ckpt.structure" metadata, read back: the tree
 * a safetensors file written by ckpt came from. The format is in
 * FORMATS.md ("ckpt.structure"); the encoder is safetensors_write.c's. */
#ifndef CKPT_STRUCTURE_H
#define CKPT_STRUCTURE_H

#include "base/alloc.h"
#include "ckpt.h"
#include "model/value.h"

/* 1 when f is a safetensors file carrying "ckpt.structure". */
int ckpt_structure_present(const ckpt_file *f);

/* The logical tree of an opened file: the root itself, except for a
 * safetensors file carrying "ckpt.structure", whose original tree (values,
 * nesting, dtypes safetensors lacks, shared storages) is rebuilt in `a`,
 * its tensors pointing into f's mapping (or, for views of one storage that
 * no tensor covers whole, into a storage rebuilt in `a`). The result lives
 * as long as both f and a, and is acyclic. Returns 0, or CKPT_E_FORMAT
 * (malformed structure, naming the problem; a "ref" to a container from
 * inside it), CKPT_E_LIMIT, CKPT_E_NOMEM. */
int ckpt_structure_decode(const ckpt_value **out, const ckpt_file *f, ckpt_arena *a);
/* The same, also giving the storages it rebuilt ("storages" of the
 * structure, by index; an entry no tensor used is NULL), which the tree's
 * tensors know by ids f->nstorages + index. */
int ckpt_structure_decode_storages(const ckpt_value **out, ckpt_storage ***groups, size_t *ngroups,
                                   const ckpt_file *f, ckpt_arena *a);

#endif
