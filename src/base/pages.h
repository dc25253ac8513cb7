/* pages.h - how the pages of a mapped input are read in, and how the
 * pages of a caller's fresh buffer are made present.
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

/* Buffers a loader fills (ckpt_file_read_storages: fresh memory the
 * caller allocated per storage, torch.empty in Python's ckpt.load) fault
 * on their first write, one 4 KiB page at a time, each page zeroed by the
 * kernel first: a warm 64 MiB load took 16k faults, more CPU than the copy
 * from the page cache on the project's VM.
 *
 * ckpt_pages_populate: the whole pages inside [p, p+n) (n >= 64 KiB, else
 * nothing) are made present and writable with one call
 * (MADV_POPULATE_WRITE, Linux 5.14) instead of a trap per page; meant for
 * pieces of a few 100 KiB just before they are written, so the zeroed pages
 * are still in cache for the copy, and for the arena's blocks (base/alloc.c:
 * a many-tensor parse fills every block it takes). Present pages are left as they are. A
 * hint: errors (older kernels, memory that is not writable) are ignored,
 * the buffer's contents are unchanged.
 *
 * No buffer is advised MADV_HUGEPAGE: measured, on the
 * project's VM a 2 MiB page taken from free memory the guest had handed
 * back to the host cost ~5 ms to fault in, a 1 GiB ckpt.load in a fresh
 * process 2.4 s of CPU against 0.5 s with 4 KiB pages (faster only while
 * freed memory was reused, as in a loop of loads). */
void ckpt_pages_populate(void *p, size_t n);

#endif
