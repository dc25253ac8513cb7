/* xxh_avx2.c - XXH3-64, AVX2 path (xxh_simd.h); compiled with -mavx2. */
#define CKPT_XXH_WIDTH avx2
#include "base/xxh_simd.h"
