/* dcp_meta_fuzzer.c - DCP `.metadata` (format/dcp_meta.h) on arbitrary
 * bytes: the restricted pickle machine with DCP's allowlist, then the
 * chunk table. Traps when a parsed chunk lies outside its tensor, a
 * tensor has more dimensions than the limit, a bytes item is not one
 * blob, or an offset (of an error, of a chunk's storage_data entry) is
 * beyond the input. */
#include <stdint.h>
#include <string.h>

#include "base/error.h"
#include "format/dcp_meta.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ckpt_arena a = {0};
    ckpt_dcp_meta m;
    ckpt_limits lim = CKPT_LIMITS_INIT;
    lim.max_pickle_ops = 1u << 20;
    if (ckpt_dcp_meta_parse(&m, &a, data, size, "fuzz", &lim) != 0) {
        uint64_t off = ckpt_error_last()->offset;
        if (off != CKPT_NO_OFFSET && off > size) __builtin_trap();
    } else {
        for (size_t i = 0; i < m.nitems; i++) {
            const ckpt_dcp_item *it = &m.items[i];
            if (!it->fqn || it->ndim > lim.max_ndim) __builtin_trap();
            if (it->is_bytes && it->nchunks != 1) __builtin_trap();
            for (size_t c = 0; c < it->nchunks; c++) {
                const ckpt_dcp_chunk *ch = &it->chunks[c];
                if (!ch->path || ch->meta_at >= size) __builtin_trap();
                for (uint32_t d = 0; !it->is_bytes && d < it->ndim; d++)
                    if (ch->offsets[d] + ch->sizes[d] > it->size[d]) __builtin_trap();
            }
        }
    }
    ckpt_arena_free(&a);
    return 0;
}
