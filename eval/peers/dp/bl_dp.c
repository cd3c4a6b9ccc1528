/*
 * bl_dp: the Gaussian mechanism on each passive party's block (bl_dp.h).
 * Normals come two at a time by Box-Muller from 64-bit uniforms; the
 * CSPRNG's uniforms are drawn in batches of BL_DP_POOL words to keep
 * RAND_bytes' per-call overhead off the per-entry path.
 */
#include "bl_dp.h"

#include <math.h>
#include <openssl/rand.h>
#include <stdlib.h>
#include <string.h>

#include "o3m_blas.h"
#include "o3m_clock.h"
#include "o3m_splitmix.h"

#define BL_DP_POOL 512

struct bl_dp {
  bl_dp_config c;
  bl_dp_accountant acct;
  uint64_t sm;               /* splitmix state when seeded */
  uint64_t pool[BL_DP_POOL]; /* CSPRNG words not yet used */
  int npool;
  int have_spare;
  double spare;
  double *work; /* K x d released contexts of bl_dp_round */
  size_t nwork;
};

void bl_dp_config_default(bl_dp_config *c) {
  memset(c, 0, sizeof *c);
  c->epsilon = 1.0;
  c->delta = 1e-5;
  c->T = 1;
  c->clip = 1.0;
}

int bl_dp_create(bl_dp **out, const bl_dp_config *c, o3m_err *e) {
  *out = NULL;
  double sigma;
  /* bl_dp_sigma_for checks epsilon, delta and T. */
  int rc = bl_dp_sigma_for(c->epsilon, c->delta, c->T, 1.0, &sigma, e);
  if (rc) return rc;
  if (!(c->clip > 0) || !isfinite(c->clip))
    return o3m_err_set(e, O3M_EINVAL, "dp: clip must be positive and finite, got %g", c->clip);
  bl_dp *h = calloc(1, sizeof *h);
  if (!h) return o3m_err_set(e, O3M_ENOMEM, "dp: out of memory");
  h->c = *c;
  h->sm = c->seed;
  bl_dp_accountant_init(&h->acct);
  *out = h;
  return 0;
}

void bl_dp_destroy(bl_dp *h) {
  if (!h) return;
  free(h->work);
  free(h);
}

const bl_dp_accountant *bl_dp_account(const bl_dp *h) { return &h->acct; }

double bl_dp_sensitivity(double clip, int K) { return 2.0 * clip * sqrt((double)K); }

double bl_dp_sigma(const bl_dp *h, int K) {
  double s = NAN;
  bl_dp_sigma_for(h->c.epsilon, h->c.delta, h->c.T, bl_dp_sensitivity(h->c.clip, K), &s, NULL);
  return s;
}

static int next_word(bl_dp *h, uint64_t *w, o3m_err *e) {
  if (h->c.have_seed) {
    *w = o3m_splitmix64(&h->sm);
    return 0;
  }
  if (h->npool == 0) {
    if (RAND_bytes((unsigned char *)h->pool, (int)sizeof h->pool) != 1)
      return o3m_err_set(e, O3M_ERANDOM, "dp: RAND_bytes failed");
    h->npool = BL_DP_POOL;
  }
  *w = h->pool[--h->npool];
  return 0;
}

/* One standard normal (Box-Muller of two of the generator's words, the
 * second normal kept for the next call). */
static int gauss(bl_dp *h, double *z, o3m_err *e) {
  if (h->have_spare) {
    h->have_spare = 0;
    *z = h->spare;
    return 0;
  }
  uint64_t a = 0, b = 0; /* set on success; initialized for gcc -O3, which cannot see it */
  int rc = next_word(h, &a, e);
  if (!rc) rc = next_word(h, &b, e);
  if (rc) return rc;
  o3m_box_muller(a, b, z, &h->spare);
  h->have_spare = 1;
  return 0;
}

int bl_dp_perturb(bl_dp *h, int K, int N, const int *dims, int first, double *X, o3m_err *e) {
  if (K < 1 || N < 1 || first < 0 || first > N)
    return o3m_err_set(e, O3M_EINVAL, "dp: bad shape (K=%d N=%d first=%d)", K, N, first);
  int d = 0, off = 0;
  for (int j = 0; j < N; j++) {
    if (dims[j] < 1) return o3m_err_set(e, O3M_EINVAL, "dp: party %d has width %d", j, dims[j]);
    d += dims[j];
    if (j < first) off += dims[j];
  }
  if (first == N) return 0; /* nobody releases anything */
  double sigma = bl_dp_sigma(h, K);
  for (int k = 0; k < K; k++) {
    double *row = X + (size_t)k * d;
    for (int j = first, c0 = off; j < N; c0 += dims[j], j++) {
      double *b = row + c0;
      double nrm = o3m_nrm2(dims[j], b);
      /* x^j <- x^j min(1, clip / ||x^j||) */
      if (nrm > h->c.clip) o3m_scal(dims[j], h->c.clip / nrm, b);
    }
    for (int i = off; i < d; i++) {
      double z;
      int rc = gauss(h, &z, e);
      if (rc) return rc;
      row[i] += sigma * z;
    }
  }
  return bl_dp_accountant_add(&h->acct, bl_dp_sensitivity(h->c.clip, K), sigma, e);
}

int bl_dp_round(bl_dp *h, const bl_round *r, double *lin, double *quad, bl_cost *c, o3m_err *e) {
  int rc = bl_round_check(r, e);
  if (rc) return rc;
  size_t n = (size_t)r->K * (size_t)r->d;
  if (n > h->nwork) {
    double *w = realloc(h->work, n * sizeof *w);
    if (!w) return o3m_err_set(e, O3M_ENOMEM, "dp: out of memory for %zu values", n);
    h->work = w;
    h->nwork = n;
  }
  double t0 = o3m_clock_s();
  memcpy(h->work, r->X, (size_t)r->K * (size_t)r->d * sizeof *h->work);
  rc = bl_dp_perturb(h, r->K, r->N, r->dims, 1, h->work, e);
  if (rc) return rc;
  bl_round rel = *r;
  rel.X = h->work;
  rel.plain = NULL;
  rc = bl_round_plain(&rel, lin, quad, e);
  if (rc) return rc;
  c->seconds = o3m_clock_s() - t0;
  c->offline_seconds = 0;
  c->bytes = (uint64_t)r->K * (uint64_t)(r->d - r->dims[0]) * sizeof(double);
  c->rounds = r->N > 1 ? 1 : 0;
  /* The error against the plaintext, outside the timed part. */
  return bl_round_score(r, lin, quad, c, e);
}
