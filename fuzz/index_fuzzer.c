/* index_fuzzer.c - the sharded-index JSON reader (Python's json rules) on
 * arbitrary bytes: read, then touch every shard name it returns. Traps
 * when a name's length disagrees with its bytes. */
#include <stdint.h>
#include <string.h>

#include "format/index_json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ckpt_arena a = {0};
    ckpt_index ix;
    if (ckpt_index_read(&ix, &a, data, size, "fuzz", 200) == 0) {
        for (size_t i = 0; i < ix.nshards; i++) {
            const ckpt_index_shard *s = &ix.shards[i];
            if (s->name[s->len] != '\0' || s->offset >= size) __builtin_trap();
        }
    }
    ckpt_arena_free(&a);
    return 0;
}
