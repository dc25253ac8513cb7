/* xxh.h - XXH3 for the tensor digests ("ckpt.xxh3"), at the fastest
 * vector width the CPU has.
 *
 * Debian's libxxhash is built for baseline x86-64 (SSE2), but its shared
 * library also exports xxhash's own runtime dispatcher (xxh_x86dispatch:
 * SSE2, AVX2 or AVX-512 chosen once by cpuid); on AVX2 machines that
 * hashes 2-2.5x faster. CMake defines CKPT_XXH_DISPATCH when the linked
 * libxxhash has it; its header then routes XXH3_64bits* to it. Same
 * digests either way (the dispatcher only picks the SIMD path). */
#ifndef CKPT_XXH_H
#define CKPT_XXH_H

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>
#ifdef CKPT_XXH_DISPATCH
#include <xxh_x86dispatch.h>
#endif

#endif
