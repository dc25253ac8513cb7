/* xxh_simd.h - one vector width of XXH3-64 (xxh.h).
 *
 * xxh_avx2.c and xxh_avx512.c include this after defining CKPT_XXH_WIDTH;
 * CMake compiles them with -mavx2 / -mavx512f, and xxhash's header-only
 * build (XXH_INLINE_ALL) then takes that vector path. Inlined, xxhash
 * renames its state type, so states cross this boundary as void *: the
 * layout is the one struct of the same xxhash.h. Only xxh.c calls these,
 * and only after cpuid said the width runs here. */
#ifndef CKPT_XXH_SIMD_H
#define CKPT_XXH_SIMD_H

#include <stddef.h>
#include <stdint.h>

#define CKPT_XXH_DECLARE(w)                                                                        \
    uint64_t ckpt_xxh3_64_##w(const void *p, size_t n);                                            \
    void ckpt_xxh3_update_##w(void *st, const void *p, size_t n);                                  \
    uint64_t ckpt_xxh3_digest_##w(const void *st);

CKPT_XXH_DECLARE(avx2)
CKPT_XXH_DECLARE(avx512)

#ifdef CKPT_XXH_WIDTH
#define XXH_INLINE_ALL
#include <xxhash.h>

#define CKPT_XXH_DEFINE(w)                                                                         \
    uint64_t ckpt_xxh3_64_##w(const void *p, size_t n) { return XXH3_64bits(p, n); }               \
    void ckpt_xxh3_update_##w(void *st, const void *p, size_t n) {                                 \
        (void)XXH3_64bits_update(st, p, n);                                                        \
    }                                                                                              \
    uint64_t ckpt_xxh3_digest_##w(const void *st) { return XXH3_64bits_digest(st); }
#define CKPT_XXH_DEFINE_(w) CKPT_XXH_DEFINE(w)
CKPT_XXH_DEFINE_(CKPT_XXH_WIDTH)
#endif

#endif
