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

/* The complete state of a seeded handle: the xoshiro256** words and the
 * polar method's cached second value. Saving it and setting it back later
 * continues the stream bit for bit (the AP's checkpoints use this). */
typedef struct o3m_rng_state {
  uint64_t s[4];        /* xoshiro256** state, never all zero */
  uint64_t have_spare;  /* 0 or 1 */
  double spare;         /* the cached Gaussian when have_spare is 1 */
} o3m_rng_state;

/* Copies the state of a seeded handle into *out. O3M_EINVAL for an OS
 * handle, whose state is neither reproducible nor to be copied. */
int o3m_rng_state_get(const o3m_rng *r, o3m_rng_state *out);

/* Replaces the state of a seeded handle with *in. O3M_EINVAL for an OS
 * handle, for an all-zero xoshiro state (a fixed point of the generator) or
 * for have_spare other than 0 or 1; the handle is then unchanged. */
int o3m_rng_state_set(o3m_rng *r, const o3m_rng_state *in);

#endif
