/* zip_fuzzer.c - the ZIP directory reader on arbitrary bytes: open, look
 * every member up by name, read it (inflating under a budget) and check its
 * CRC. Traps when a reported member lies outside the input or a lookup of
 * its name finds nothing equal to it ignoring case. */
#include <stdint.h>
#include <string.h>
#include <strings.h>

#include "container/zip.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ckpt_limits lim = CKPT_LIMITS_INIT;
    lim.max_zip_entries = 4096;
    ckpt_arena a = {0};
    ckpt_zip z;
    if (ckpt_zip_open(&z, &a, data, size, NULL, "fuzz", &lim) == 0) {
        uint64_t budget = (uint64_t)1 << 24; /* keeps bombs cheap */
        for (size_t i = 0; i < z.count; i++) {
            const ckpt_zip_entry *e = &z.entries[i];
            if (e->data_offset > size || e->csize > size - e->data_offset) __builtin_trap();
            const ckpt_zip_entry *f = ckpt_zip_find(&z, e->name);
            /* lookup ignores ASCII case, as torch's miniz does */
            if (!f || strcasecmp(f->name, e->name) != 0) __builtin_trap();
            const uint8_t *bytes;
            if (ckpt_zip_read(&z, e, &a, &budget, &bytes) == 0)
                (void)ckpt_zip_check_crc(&z, e, bytes);
        }
    }
    ckpt_arena_free(&a);
    return 0;
}
