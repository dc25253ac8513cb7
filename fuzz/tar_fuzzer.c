/* tar_fuzzer.c - the tar member lister (Python tarfile's rules) on
 * arbitrary bytes. Traps when a listed member's data lies outside the
 * input or a lookup of its name finds nothing. */
#include <stdint.h>
#include <string.h>

#include "container/tar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ckpt_arena a = {0};
    ckpt_tar t;
    (void)ckpt_tar_sniff(data, size);
    if (ckpt_tar_read(&t, &a, data, size, NULL, 4096) == 0 && t.answer == CKPT_TAR_YES &&
        !t.listing_fails) {
        for (size_t i = 0; i < t.count; i++) {
            const ckpt_tar_member *m = &t.members[i];
            if (m->data > size || (m->type != '5' && m->type != '6' && m->size > size - m->data))
                __builtin_trap();
            if (!ckpt_tar_find(&t, m->name)) __builtin_trap();
        }
    }
    ckpt_arena_free(&a);
    return 0;
}
