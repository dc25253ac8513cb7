/* dcp.h - a torch.distributed.checkpoint directory opened as one
 * checkpoint (ckpt.h "DCP directories", FORMATS.md §4): `.metadata`
 * (format/dcp_meta.h) says which slice of which data file holds each chunk
 * and bytes item; each slice is opened as a checkpoint of its own (a
 * torch.save zip, or the rank's safetensors file) and each global tensor
 * is assembled from its chunks (model/value.h ckpt_chunks). */
#ifndef CKPT_OPEN_DCP_H
#define CKPT_OPEN_DCP_H

#include "model/file.h"

/* 1 if directory `dir` is a DCP checkpoint: it holds `.metadata` or a
 * "*.distcp" file. */
int ckpt_dcp_is_dir(const char *dir);

/* Reads f, whose mapping is the `.metadata` of directory `dir`: parses
 * it, opens the data files it names (f's shards) and their slices (f's
 * parts), checks the chunks of every tensor against their slices and
 * that they tile it, and builds f->root. Returns 0 or a CKPT_E_* code
 * with the error recorded (see ckpt_open). */
int ckpt_dcp_read(ckpt_file *f, const char *dir);

/* The "*.distcp" files in f's directory that `.metadata` does not name
 * (left by an earlier save, or a rank's output the coordinator never
 * recorded): CKPT_E_MISMATCH naming the first, else 0; CKPT_E_IO when
 * the directory cannot be listed. */
int ckpt_dcp_check_unnamed(const ckpt_file *f);

#endif
