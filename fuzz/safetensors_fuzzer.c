/* safetensors_fuzzer.c - the whole open path on arbitrary bytes: format
 * detection, the safetensors header reader, flattening, and on success a
 * SHA-256 of every tensor (which reads every byte the header claims). */
#include <stdint.h>
#include <string.h>

#include "ckpt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ckpt_file *f = NULL;
    if (ckpt_open_memory(&f, data, size, "fuzz", NULL) != 0) return 0;
    unsigned char md[32];
    for (size_t i = 0; i < ckpt_file_tensor_count(f); i++) {
        const ckpt_tensor *t = ckpt_file_tensor(f, i);
        (void)strlen(ckpt_tensor_name(t));
        ckpt_tensor_sha256(t, md);
    }
    for (size_t i = 0; i < ckpt_file_metadata_count(f); i++)
        (void)(strlen(ckpt_file_metadata_key(f, i)) + strlen(ckpt_file_metadata_value(f, i)));
    ckpt_close(f);
    return 0;
}
