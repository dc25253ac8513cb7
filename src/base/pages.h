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

/* The size of a transparent huge page (x86-64, arm64 with 4 KiB pages). */
#define CKPT_HUGE_PAGE ((size_t)2 << 20)

/* Memory of the library's own, [p, p+n) from malloc, that will be filled
 * front to back: MADV_HUGEPAGE on the huge pages it holds, so that where
 * transparent huge pages are `madvise` one fault maps 2 MiB, not 4 KiB
 * (the kernel clears every page it maps: only pages the range fills are
 * advised). The huge pages that p and p + n lie in are included when
 * the range leaves no more than a small page of them: malloc's mapping
 * of a large block, a head before p and a few bytes after, and Linux
 * places a mapping of whole huge pages on a huge page (glibc: a request
 * of 2^k - 24 bytes or less maps 2^k). A hint, never an error; a no-op
 * on less than one huge page. */
void ckpt_pages_huge(void *p, size_t n);

#endif
