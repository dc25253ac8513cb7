/* xxh_avx512.c - XXH3-64, AVX-512 path (xxh_simd.h); compiled with -mavx512f. */
#define CKPT_XXH_WIDTH avx512
#include "base/xxh_simd.h"
