/* eval_synth.c -- see eval_synth.h. Seeded, so every variant of an
 * experiment sees the same stream of contexts and rewards. */
#include "eval_synth.h"

#include <math.h>
#include <stdlib.h>

#include "o3m_blas.h"
#include "o3m_error.h"
#include "o3m_rng.h"

struct eval_synth {
  eval_synth_config c;
  o3m_rng *rng;
  double *theta;
  double *noise;
};

static int draw_unit(o3m_rng *r, int d, double *x) {
  int rc = o3m_rng_gaussian(r, x, d);
  if (rc) return rc;
  double n = o3m_nrm2(d, x);
  o3m_scal(d, 1.0 / n, x);
  return O3M_OK;
}

int eval_synth_create(eval_synth **out, const eval_synth_config *c) {
  *out = NULL;
  if (c->d < 1 || c->K < 1 || !(c->noise_var >= 0)) return O3M_EINVAL;
  eval_synth *s = calloc(1, sizeof *s);
  if (!s) return O3M_ENOMEM;
  s->c = *c;
  s->theta = malloc(sizeof(double) * c->d);
  s->noise = malloc(sizeof(double) * c->K);
  int rc = (!s->theta || !s->noise) ? O3M_ENOMEM
                                    : o3m_rng_create_seeded_insecure(&s->rng, c->seed);
  if (!rc) rc = draw_unit(s->rng, c->d, s->theta);
  if (rc) {
    eval_synth_destroy(s);
    return rc;
  }
  *out = s;
  return O3M_OK;
}

void eval_synth_destroy(eval_synth *s) {
  if (!s) return;
  o3m_rng_destroy(s->rng);
  free(s->theta);
  free(s->noise);
  free(s);
}

const double *eval_synth_theta_star(const eval_synth *s) { return s->theta; }

int eval_synth_round(eval_synth *s, double *X, double *expected, double *reward) {
  int d = s->c.d, K = s->c.K;
  for (int a = 0; a < K; a++) {
    int rc = draw_unit(s->rng, d, X + (size_t)a * d);
    if (rc) return rc;
  }
  int rc = o3m_rng_gaussian(s->rng, s->noise, K);
  if (rc) return rc;
  double sd = sqrt(s->c.noise_var);
  for (int a = 0; a < K; a++) {
    double mu = o3m_dot(d, X + (size_t)a * d, s->theta);
    if (expected) expected[a] = mu;
    if (reward) reward[a] = mu + sd * s->noise[a];
  }
  return O3M_OK;
}
