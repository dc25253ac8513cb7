/* pages.h - how the pages of a mapped input are read in.
 *
 * open.c maps every input MADV_RANDOM: readers look at headers scattered
 * over the file, and readahead around each would pull in tensor data that
 * is read with pread anyway (base/source.h). But a safetensors header,
 * still parsed through the mapping, is read front to back: page by page,
 * a cold file would cost one synchronous 4 KiB read per fault; it is read
 * ahead in large requests instead. (A zip's directory and local headers
 * are read with pread in large windows, container/zip.c.) */
#ifndef CKPT_PAGES_H
#define CKPT_PAGES_H

#include <stddef.h>

/* [p, p+n) will be read front to back soon: MADV_SEQUENTIAL and
 * MADV_WILLNEED on its pages. A hint: harmless on memory that is not a
 * file mapping, never an error. */
void ckpt_pages_will_scan(const void *p, size_t n);

#endif
