/* dtype.h - dtype tables shared by the readers. */
#ifndef CKPT_DTYPE_H
#define CKPT_DTYPE_H

#include "ckpt.h"

/* Bytes per element for whole-byte dtypes; 0 for sub-byte (F4, F6_*). */
unsigned ckpt_dtype_size(ckpt_dtype dt);
/* 1 for the floating-point dtypes (torch's is_floating_point: F16, BF16,
 * F32, F64, the F8, F6 and F4 kinds), else 0. */
int ckpt_dtype_is_float(ckpt_dtype dt);
/* torch storage class name ("FloatStorage", "BFloat16Storage", ...;
 * "UntypedStorage"/"ByteStorage" give U8) to dtype; UNKNOWN if none. */
ckpt_dtype ckpt_dtype_from_storage_class(const char *name);
/* torch dtype attribute name ("float32", "bfloat16", "float8_e4m3fn",
 * "uint16", "complex32", ...) to dtype; UNKNOWN if none. */
ckpt_dtype ckpt_dtype_from_torch_name(const char *name);
/* The canonical torch dtype attribute name of dt (str(torch.<dtype>)
 * without "torch."), or NULL when torch has none. Static string. */
const char *ckpt_dtype_torch_name(ckpt_dtype dt);
/* numpy type code as in a dtype reduce ("f8", "i4", "u1", "b1", "f2",
 * "c8", "c16", "u2", ...) to dtype; UNKNOWN if none. */
ckpt_dtype ckpt_dtype_from_numpy(const char *code);
/* The numpy type code of dt as numpy pickles it ("b1", "u4", "f8"...), or
 * NULL when numpy has no such dtype. Static string. */
const char *ckpt_dtype_numpy_code(ckpt_dtype dt);

#endif
