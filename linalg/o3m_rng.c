/* o3m_rng.c -- getrandom(2)-backed and seeded xoshiro256** sources.
 *
 * The OS source reads the kernel CSPRNG in 4 KiB chunks and turns 53-bit
 * slices into uniforms; the seeded source is xoshiro256** (Blackman and
 * Vigna) with its state expanded from the seed by splitmix64. Both feed the
 * same Marsaglia polar transform for Gaussians. */
#include "o3m_rng.h"
#include "o3m_alloc.h"
#include "o3m_splitmix.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "o3m_error.h"

#define OS_BUF_WORDS 512

struct o3m_rng {
  o3m_rng_kind kind;
  uint64_t s[4];                /* xoshiro256** state (seeded kind) */
  uint64_t buf[OS_BUF_WORDS];   /* getrandom output (OS kind) */
  int buf_pos;                  /* next unread word of buf */
  int have_spare;               /* polar method's cached second value */
  double spare;
};

static int os_fill(void *p, size_t n) {
  unsigned char *c = p;
  while (n > 0) {
    ssize_t got = getrandom(c, n, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      return O3M_ERANDOM;
    }
    c += got;
    n -= (size_t)got;
  }
  return O3M_OK;
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static inline uint64_t xoshiro_next(uint64_t s[4]) {
  uint64_t result = rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

static inline int next_u64(o3m_rng *r, uint64_t *out) {
  if (r->kind == O3M_RNG_SEEDED) {
    *out = xoshiro_next(r->s);
    return O3M_OK;
  }
  if (r->buf_pos == OS_BUF_WORDS) {
    int rc = os_fill(r->buf, sizeof r->buf);
    if (rc) return rc;
    r->buf_pos = 0;
  }
  *out = r->buf[r->buf_pos++];
  return O3M_OK;
}

int o3m_rng_create_os(o3m_rng **out) {
  *out = NULL;
  o3m_rng *r = o3m_calloc(1, sizeof *r);
  if (!r) return O3M_ENOMEM;
  r->kind = O3M_RNG_OS;
  int rc = os_fill(r->buf, sizeof r->buf);
  if (rc) {
    o3m_free(r);
    return rc;
  }
  *out = r;
  return O3M_OK;
}

int o3m_rng_create_seeded_insecure(o3m_rng **out, uint64_t seed) {
  *out = NULL;
  o3m_rng *r = o3m_calloc(1, sizeof *r);
  if (!r) return O3M_ENOMEM;
  r->kind = O3M_RNG_SEEDED;
  uint64_t x = seed;
  for (int i = 0; i < 4; i++) r->s[i] = o3m_splitmix64(&x);
  *out = r;
  return O3M_OK;
}

void o3m_rng_destroy(o3m_rng *r) {
  if (!r) return;
  explicit_bzero(r, sizeof *r);
  o3m_free(r);
}

o3m_rng_kind o3m_rng_kind_of(const o3m_rng *r) { return r->kind; }

int o3m_rng_u64(o3m_rng *r, uint64_t *out) { return next_u64(r, out); }

int o3m_rng_os_seed(uint64_t *out) { return os_fill(out, sizeof *out); }

int o3m_rng_state_get(const o3m_rng *r, o3m_rng_state *out) {
  if (r->kind != O3M_RNG_SEEDED) return O3M_EINVAL;
  memcpy(out->s, r->s, sizeof out->s);
  out->have_spare = (uint64_t)(r->have_spare != 0);
  out->spare = r->have_spare ? r->spare : 0.0;
  return O3M_OK;
}

int o3m_rng_state_set(o3m_rng *r, const o3m_rng_state *in) {
  if (r->kind != O3M_RNG_SEEDED || in->have_spare > 1) return O3M_EINVAL;
  if ((in->s[0] | in->s[1] | in->s[2] | in->s[3]) == 0) return O3M_EINVAL;
  memcpy(r->s, in->s, sizeof r->s);
  r->have_spare = (int)in->have_spare;
  r->spare = in->have_spare ? in->spare : 0.0;
  return O3M_OK;
}

/* A uniform in the open interval (-1, 1) from the top 53 bits. */
static inline double uniform_pm1(uint64_t u) {
  return ((double)(u >> 11) + 0.5) * (2.0 / 9007199254740992.0) - 1.0;
}

int o3m_rng_gaussian(o3m_rng *r, double *out, long n) {
  long i = 0;
  if (n > 0 && r->have_spare) {
    out[i++] = r->spare;
    r->have_spare = 0;
  }
  while (i < n) {
    double a, b, s;
    do {
      uint64_t ua, ub;
      int rc = next_u64(r, &ua);
      if (!rc) rc = next_u64(r, &ub);
      if (rc) return rc;
      a = uniform_pm1(ua);
      b = uniform_pm1(ub);
      s = a * a + b * b;
    } while (s >= 1.0 || s == 0.0);
    double f = sqrt(-2.0 * log(s) / s);
    out[i++] = a * f;
    if (i < n) {
      out[i++] = b * f;
    } else {
      r->spare = b * f;
      r->have_spare = 1;
    }
  }
  return O3M_OK;
}
