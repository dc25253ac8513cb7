/* pages.h - how the pages of a mapped input are read in.
 *
 * Memory the library is handed (ckpt_open_memory, ckpt_scan_memory: often
 * a caller's mapping of the file, Python's ckpt.load(mmap=True) maps it
 * MADV_RANDOM while it is opened and scanned) is read where the readers
 * look. A search that walks page by page over such memory, a zip's
 * end-record search backwards over its last 64 KiB, would cost a cold
 * file one synchronous read per page: the pages are asked for at once
 * first (a cold 64 MiB .safetensors, whose end has no end record: 17 reads
 * of 4 KiB, one after the other, ~25 ms on the project's VM -> one read of
 * 72 KiB). Files the library opens itself are read with pread
 * (base/source.h). */
#ifndef CKPT_PAGES_H
#define CKPT_PAGES_H

#include <stddef.h>

/* [p, p+n) will be read soon: MADV_WILLNEED on its pages. A hint: harmless
 * on memory that is not a file mapping, never an error. */
void ckpt_pages_will_need(const void *p, size_t n);

#endif
