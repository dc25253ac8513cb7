/* structure_fuzzer.c - what ckpt reads back of its own writers' metadata,
 * on arbitrary bytes: a safetensors file's "ckpt.structure" decoded into
 * the original tree (tags, refs, views scattered into rebuilt storages),
 * "ckpt.aliases" restored at open, a torch archive's
 * extra/ckpt_meta.json; then the writers' walk over the result and the
 * XXH3-64 digest of every tensor in it (every byte a view reaches), and
 * the digest check of ckpt_verify. */
#include <stdint.h>
#include <string.h>

#include "model/file.h"
#include "format/structure.h"
#include "format/write.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ckpt_file *f = NULL;
    if (ckpt_open_memory(&f, data, size, "fuzz", NULL) != 0) return 0;
    (void)ckpt_verify(NULL, f);
    ckpt_arena a = {0};
    const ckpt_value *root;
    if (ckpt_structure_decode(&root, f, &a) == 0 && root) {
        wr_named *named;
        size_t n;
        if (ckpt_wr_collect(&named, &n, root) == 0) {
            uint64_t h;
            for (size_t i = 0; i < n; i++) (void)ckpt_tensor_xxh3(named[i].value->u.tensor, &h);
            ckpt_wr_named_free(named, n);
        }
    }
    ckpt_arena_free(&a);
    ckpt_close(f);
    return 0;
}
