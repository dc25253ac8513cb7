/* store_dir.h - the one rule that says a directory is a ckpt store
 * (jobs/store.c writes them): it holds the pointer file LATEST. Its
 * generations are separate checkpoints, never one checkpoint's parts:
 * readers of a directory (ckpt_open, the training analysis, doctor) ask
 * here first, and a store stands for the generation LATEST names. */
#ifndef CKPT_OPEN_STORE_DIR_H
#define CKPT_OPEN_STORE_DIR_H

#include "base/alloc.h"
#include "ckpt.h"

/* The pointer file's name inside a store directory. */
#define CKPT_STORE_POINTER_FILE "LATEST"
/* LATEST holds one file name: anything longer is not one. */
#define CKPT_STORE_POINTER_MAX 4096

/* ckpt_is_store_dir (ckpt/store.h), defined here: 1 if `path` is a
 * directory holding an entry named CKPT_STORE_POINTER_FILE, else 0. */

/* What LATEST of directory `dir` holds. */
typedef enum ckpt_store_dir_pointer {
    CKPT_STORE_DIR_POINTER_OK = 0,     /* *name: one file name */
    CKPT_STORE_DIR_POINTER_ABSENT = 1, /* no LATEST */
    CKPT_STORE_DIR_POINTER_INVALID = 2 /* unreadable, empty, too long, a NUL or '/' */
} ckpt_store_dir_pointer;

/* Reads LATEST (one trailing newline dropped) into *name, an arena copy
 * ("" unless OK). Returns 0 or CKPT_E_NOMEM. */
int ckpt_store_dir_pointer_read(ckpt_arena *a, const char *dir, ckpt_store_dir_pointer *st,
                                const char **name);

/* "dir/FILE" for the generation LATEST names (an arena copy), whatever
 * its state (the caller opens and verifies it). CKPT_E_MISMATCH when
 * LATEST holds no file name or names a file that is not there; errors
 * name dir/LATEST. */
int ckpt_store_dir_latest(ckpt_arena *a, const char *dir, const char **path);

#endif
