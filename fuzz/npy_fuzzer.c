/* npy_fuzzer.c - the .npy header reader (numpy's rules) on arbitrary
 * bytes. Traps when an object array's data offset lies outside the input
 * or a verdict comes without its reason. */
#include <stdint.h>
#include <string.h>

#include "format/npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ckpt_arena a = {0};
    ckpt_npy_header h;
    int r = ckpt_npy_read_header(&h, &a, data, size, 1u << 20, 64);
    if (r == 1) {
        if ((h.kind == CKPT_NPY_OBJECT || h.kind == CKPT_NPY_PLAIN) && h.data_offset > size)
            __builtin_trap();
        if ((h.kind == CKPT_NPY_REFUSED || h.kind == CKPT_NPY_UNSURE) && !h.why) __builtin_trap();
    }
    ckpt_arena_free(&a);
    return 0;
}
