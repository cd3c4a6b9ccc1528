/* o3m_rng.h -- random numbers for masks and for Thompson sampling.
 *
 * Two kinds of source, chosen at creation and never mixed:
 *
 *   O3M_RNG_OS      reads the operating system's CSPRNG with getrandom(2).
 *                   The privacy mask is drawn from this source in production;
 *                   nothing about it is reproducible.
 *   O3M_RNG_SEEDED  xoshiro256** seeded through splitmix64. Reproducible and
 *                   NOT cryptographically secure: for tests, evaluation and
 *                   the Thompson-sampling draws of a policy, never for a mask
 *                   that protects real data. The name of the constructor says
 *                   so: o3m_rng_create_seeded_insecure().
 *
 * Gaussians come from the Marsaglia polar method, caching the second value.
 * A handle is not thread-safe; give each thread its own. */
#ifndef O3M_RNG_H
#define O3M_RNG_H

#include <stdint.h>

typedef struct o3m_rng o3m_rng;

typedef enum { O3M_RNG_OS = 1, O3M_RNG_SEEDED = 2 } o3m_rng_kind;

/* A handle backed by getrandom(2). Returns O3M_ENOMEM, or O3M_ERANDOM when
 * the kernel source cannot be read. On failure *out is NULL. */
int o3m_rng_create_os(o3m_rng **out);

/* A reproducible handle for tests and evaluation (see above). */
int o3m_rng_create_seeded_insecure(o3m_rng **out, uint64_t seed);

void o3m_rng_destroy(o3m_rng *r);

o3m_rng_kind o3m_rng_kind_of(const o3m_rng *r);

/* Fills out[0..n) with independent standard normal draws. O3M_ERANDOM only
 * for an OS source whose read failed; out is then unspecified. */
int o3m_rng_gaussian(o3m_rng *r, double *out, long n);

/* One uniform 64-bit value. */
int o3m_rng_u64(o3m_rng *r, uint64_t *out);

/* A 64-bit seed read straight from getrandom(2), for callers that want a
 * fresh seed for a seeded handle (the AP's sampler). O3M_ERANDOM on failure. */
int o3m_rng_os_seed(uint64_t *out);

#endif
