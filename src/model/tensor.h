/* tensor.h - internal tensor helpers shared by readers and writers. */
#ifndef CKPT_TENSOR_H
#define CKPT_TENSOR_H

#include "model/value.h"

/* Copies `count` logical elements of t, from linear (row-major) index
 * `start`, into dst as little-endian bytes: views are followed through
 * their strides, big-endian storages swapped (complex types per
 * component). Whole-byte dtypes only; start + count <= numel, and dst
 * holds count x element size bytes. Bounded chunks of any view can be
 * streamed this way. */
void ckpt_tensor_gather(const ckpt_tensor *t, uint64_t start, uint64_t count,
                        uint8_t *dst);

#endif
