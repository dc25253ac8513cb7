/* pages.h - how the pages of a mapped input are read in.
 *
 * open.c maps every input MADV_RANDOM: readers look at headers scattered
 * over the file, and readahead around each would pull in tensor data that
 * is read with pread anyway (base/source.h). But some layouts are read
 * front to back: a safetensors header, a zip's central directory, and the
 * local headers of a zip whose members are small and dense (a state dict
 * of 100k tensors touches nearly every page). Page by page, a cold file
 * then costs one synchronous 4 KiB read per fault; these ranges are read
 * ahead in large requests instead. */
#ifndef CKPT_PAGES_H
#define CKPT_PAGES_H

#include <stddef.h>

/* [p, p+n) will be read front to back soon: MADV_SEQUENTIAL and
 * MADV_WILLNEED on its pages. A hint: harmless on memory that is not a
 * file mapping, never an error. */
void ckpt_pages_will_scan(const void *p, size_t n);

#endif
