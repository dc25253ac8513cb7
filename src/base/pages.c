/* pages.c - read-in hints for mapped inputs (pages.h). */
#include "base/pages.h"

#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

void ckpt_pages_will_need(const void *p, size_t n) {
    if (!p || n == 0) return;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = (uintptr_t)p & ~(page - 1), hi = (uintptr_t)p + n;
    (void)madvise((void *)lo, hi - lo, MADV_WILLNEED);
}

#define POPULATE_MIN ((size_t)64 << 10)

void ckpt_pages_populate(void *p, size_t n) {
#ifdef MADV_POPULATE_WRITE
    if (!p || n < POPULATE_MIN) return;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = ((uintptr_t)p + page - 1) & ~(page - 1), hi = ((uintptr_t)p + n) & ~(page - 1);
    if (hi > lo) (void)madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE);
#else
    (void)p;
    (void)n;
#endif
}
