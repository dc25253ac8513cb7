/* xxh.h - XXH3-64 for the tensor digests ("ckpt.xxh3"), at the fastest
 * vector width the CPU has, in the shared and the static library alike.
 *
 * Debian's libxxhash is built for baseline x86-64 (SSE2). Its shared
 * library also exports xxhash's runtime dispatcher, but its static archive
 * does not, so a library that relied on it hashed 2-2.5x slower (or failed
 * to link) when built or linked statically. ckpt therefore compiles
 * xxhash's header-only XXH3 itself once per vector width (xxh_simd.h:
 * AVX2 and AVX-512 translation units on x86-64) and picks one by cpuid on
 * every call (a load and a branch). Same digests on every path: the
 * widths differ only in how the accumulators are updated. */
#ifndef CKPT_XXH_H
#define CKPT_XXH_H

#include <stddef.h>
#include <stdint.h>

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

/* Streaming XXH3-64 (seed 0) over a caller-owned state. */
void ckpt_xxh3_reset(XXH3_state_t *st);
void ckpt_xxh3_update(XXH3_state_t *st, const void *p, size_t n);
uint64_t ckpt_xxh3_digest(const XXH3_state_t *st);

#endif
