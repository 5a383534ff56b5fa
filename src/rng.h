/* rng.h - the seeded noise: the same numbers on every backend and platform.
 *
 * Philox4x32-10 (Salmon et al. 2011) counter-based generator keyed by the
 * 64-bit seed; element i of the latent tensor uses counter (i/2, 0, 0, 0)...
 * see rng.c for the exact mapping: two uniform 32-bit words -> two doubles in
 * (0, 1) -> Box-Muller -> two normals, rounded to float. Pure integer math plus
 * libm log/sqrt/cos/sin in double: identical on every IEEE-754 platform. */
#ifndef COSMOS3_RNG_H
#define COSMOS3_RNG_H

#include "common.h"

/* Fill out[n] with N(0,1) floats for `seed`, starting at element `offset`. */
void rng_normal(uint64_t seed, uint64_t offset, float *out, int64_t n);
/* A 64-bit seed from the clock and pid (for --seed random). */
uint64_t rng_random_seed(void);

#endif
