/* rng.c - the seeded latent noise: Philox4x32-10 and Box-Muller.
 *
 * The exact mapping (stable: pure 32-bit integer math, then IEEE double):
 *
 *   key     = (k0, k1) = (seed & 0xffffffff, seed >> 32)
 *   pair j  = element index / 2  (elements 2j and 2j+1 share one counter)
 *   counter = (j & 0xffffffff, j >> 32, 0, 0)
 *   (r0, r1, r2, r3) = Philox4x32-10(counter, key)     (Salmon et al. 2011,
 *             Random123 constants and round function; r2, r3 unused)
 *   u1 = (r0 + 0.5) / 2^32,  u2 = (r1 + 0.5) / 2^32    (doubles in (0, 1))
 *   rad = sqrt(-2 ln u1),  th = 2 pi u2
 *   element 2j   = (float)(rad * cos(th))
 *   element 2j+1 = (float)(rad * sin(th))
 *
 * Element i depends only on (seed, i), so rng_normal(seed, k, out, n) is the
 * tail of rng_normal(seed, 0, ...) and any rank or device can draw its own
 * slice. |z| is at most sqrt(2 ln 2^33), about 6.77.
 */
#include "rng.h"

#include <math.h>
#include <time.h>
#include <unistd.h>

#define PHILOX_M0 0xD2511F53u /* round multipliers */
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u /* key schedule (golden ratio, sqrt(3) - 1) */
#define PHILOX_W1 0xBB67AE85u
#define PHILOX_ROUNDS 10
#define TWO_POW_M32 (1.0 / 4294967296.0)
#define TWO_PI 6.283185307179586476925286766559

static void philox4x32_10(const uint32_t ctr_in[4], const uint32_t key_in[2], uint32_t out[4]) {
    uint32_t c0 = ctr_in[0], c1 = ctr_in[1], c2 = ctr_in[2], c3 = ctr_in[3];
    uint32_t k0 = key_in[0], k1 = key_in[1];
    for (int r = 0; r < PHILOX_ROUNDS; r++) {
        if (r > 0) {
            k0 += PHILOX_W0;
            k1 += PHILOX_W1;
        }
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0, p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

/* The two normals of pair j. */
static void normal_pair(uint64_t seed, uint64_t j, float z[2]) {
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    const uint32_t ctr[4] = {(uint32_t)j, (uint32_t)(j >> 32), 0, 0};
    uint32_t r[4];
    philox4x32_10(ctr, key, r);
    double u1 = ((double)r[0] + 0.5) * TWO_POW_M32;
    double u2 = ((double)r[1] + 0.5) * TWO_POW_M32;
    double rad = sqrt(-2.0 * log(u1)), th = TWO_PI * u2;
    z[0] = (float)(rad * cos(th));
    z[1] = (float)(rad * sin(th));
}

void rng_normal(uint64_t seed, uint64_t offset, float *out, int64_t n) {
    if (n <= 0) return;
    int64_t k = 0;
    uint64_t e = offset;
    float z[2];
    if (e & 1) { /* starts on the second element of a pair */
        normal_pair(seed, e >> 1, z);
        out[k++] = z[1];
        e++;
    }
    for (; k + 1 < n; k += 2, e += 2) {
        normal_pair(seed, e >> 1, z);
        out[k] = z[0];
        out[k + 1] = z[1];
    }
    if (k < n) {
        normal_pair(seed, e >> 1, z);
        out[k] = z[0];
    }
}

/* splitmix64 finaliser: spreads the clock and pid bits over the seed. */
static uint64_t mix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

uint64_t rng_random_seed(void) {
    struct timespec rt = {0}, mt = {0};
    clock_gettime(CLOCK_REALTIME, &rt);
    clock_gettime(CLOCK_MONOTONIC, &mt);
    uint64_t x = (uint64_t)rt.tv_sec * 1000000000ull + (uint64_t)rt.tv_nsec;
    x = mix64(x ^ ((uint64_t)getpid() << 32));
    x = mix64(x ^ ((uint64_t)mt.tv_sec * 1000000000ull + (uint64_t)mt.tv_nsec));
    return x;
}
