/* test_dp.c -- the DP baseline (eval/peers/dp/bl_dp.h) and its zCDP
 * accountant (bl_dp_accountant.h).
 *
 * Known values, worked out independently from the formulas of Bun and
 * Steinke (2016) with delta = 1e-5 (ln(1/delta) = 11.512925...):
 *   rho 0.5  -> epsilon 0.5 + 2 sqrt(0.5 * 11.5129) = 5.298526;
 *   rho 0.01 -> epsilon 0.688614;
 *   epsilon 1 -> rho (sqrt(12.5129) - sqrt(11.5129))^2 = 0.0208199;
 *   epsilon 10, T 1000, sensitivity 2 -> sigma 2 / sqrt(2 * 1.550355 / 1000)
 *   = 35.91694;
 *   the classic single-release sigma at epsilon 0.5, sensitivity 2:
 *   2 sqrt(2 ln(1.25e5)) / 0.5 = 19.37922.
 * Then: T releases at the calibrated sigma spend exactly the target; the
 * mechanism clips, adds noise of the calibrated size, leaves the active
 * party's block alone, and its round error against plaintext grows as
 * epsilon shrinks. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "bl_dp.h"

#define TOL 1e-5

Test(dp_accountant, known_values) {
  cr_assert_float_eq(bl_dp_zcdp_epsilon(0.5, 1e-5), 5.298526, TOL);
  cr_assert_float_eq(bl_dp_zcdp_epsilon(0.01, 1e-5), 0.688614, TOL);
  double rho = 0;
  cr_assert_eq(bl_dp_zcdp_rho_for(1.0, 1e-5, &rho, NULL), 0);
  cr_assert_float_eq(rho, 0.0208199, 1e-7);
  double s = 0;
  cr_assert_eq(bl_dp_sigma_for(10.0, 1e-5, 1000, 2.0, &s, NULL), 0);
  cr_assert_float_eq(s, 35.91694, 1e-4, "sigma %g", s);
  cr_assert_float_eq(bl_dp_classic_sigma(0.5, 1e-5, 2.0), 19.37922, 1e-4);
  cr_assert(isnan(bl_dp_classic_sigma(2.0, 1e-5, 2.0)));
  cr_assert_float_eq(bl_dp_gauss_rho(2.0, 4.0), 0.125, 1e-15);
}

Test(dp_accountant, composition_spends_the_target) {
  double sigma;
  cr_assert_eq(bl_dp_sigma_for(3.0, 1e-6, 500, 1.5, &sigma, NULL), 0);
  bl_dp_accountant a;
  bl_dp_accountant_init(&a);
  cr_assert_eq(bl_dp_accountant_epsilon(&a, 1e-6), 0.0);
  for (int t = 0; t < 500; t++) cr_assert_eq(bl_dp_accountant_add(&a, 1.5, sigma, NULL), 0);
  cr_assert_eq(a.steps, 500);
  cr_assert_float_eq(bl_dp_accountant_epsilon(&a, 1e-6), 3.0, 1e-9);
  /* One more release overspends. */
  cr_assert_eq(bl_dp_accountant_add(&a, 1.5, sigma, NULL), 0);
  cr_assert(bl_dp_accountant_epsilon(&a, 1e-6) > 3.0);
}

Test(dp_accountant, refusals) {
  double x = 7;
  o3m_err e;
  cr_assert_eq(bl_dp_zcdp_rho_for(0, 1e-5, &x, &e), O3M_EINVAL);
  cr_assert_eq(bl_dp_zcdp_rho_for(1, 1, &x, &e), O3M_EINVAL);
  cr_assert_eq(bl_dp_sigma_for(1, 1e-5, 0, 1, &x, &e), O3M_EINVAL);
  cr_assert_eq(bl_dp_sigma_for(1, 1e-5, 10, 0, &x, &e), O3M_EINVAL);
  cr_assert_eq(x, 7);
  bl_dp_accountant a;
  bl_dp_accountant_init(&a);
  cr_assert_eq(bl_dp_accountant_add(&a, 1, 0, &e), O3M_EINVAL);
  cr_assert_eq(a.steps, 0);
}

static bl_dp *make(double eps, long T, double clip, uint64_t seed) {
  bl_dp_config c;
  bl_dp_config_default(&c);
  c.epsilon = eps;
  c.T = T;
  c.clip = clip;
  c.have_seed = seed != 0;
  c.seed = seed;
  bl_dp *h = NULL;
  o3m_err e;
  cr_assert_eq(bl_dp_create(&h, &c, &e), 0, "%s", e.msg);
  return h;
}

Test(dp, noise_size_and_active_block_untouched) {
  /* K 50 rows of d 40 (4 parties of 10): the noise on parties 1..3 has the
   * calibrated standard deviation, party 0's columns are unchanged. */
  enum { K = 50, N = 4, D = 40 };
  int dims[N] = {10, 10, 10, 10};
  static double X[K * D];
  for (int i = 0; i < K * D; i++) X[i] = 0;
  bl_dp *h = make(2.0, 10, 1.0, 0); /* CSPRNG noise */
  double sigma = bl_dp_sigma(h, K), s2 = 0;
  double want;
  cr_assert_eq(bl_dp_sigma_for(2.0, 1e-5, 10, 2.0 * sqrt(K), &want, NULL), 0);
  cr_assert_float_eq(sigma, want, 1e-12);
  cr_assert_eq(bl_dp_perturb(h, K, N, dims, 1, X, NULL), 0);
  for (int k = 0; k < K; k++)
    for (int i = 0; i < D; i++) {
      if (i < 10) cr_assert_eq(X[k * D + i], 0.0, "active block changed at %d,%d", k, i);
      else s2 += X[k * D + i] * X[k * D + i];
    }
  double sd = sqrt(s2 / (K * 30));
  cr_assert(fabs(sd / sigma - 1) < 0.08, "sample sd %g vs sigma %g", sd, sigma);
  cr_assert_eq(bl_dp_account(h)->steps, 1);
  bl_dp_destroy(h);
}

Test(dp, clipping) {
  /* Almost no noise (a huge budget): a passive block of norm 5 comes back
   * with norm clip = 1, a block of norm 0.5 unchanged. */
  int dims[2] = {2, 2};
  double X[8] = {3, 4, 3, 4, 1, 1, 0.3, 0.4};
  bl_dp *h = make(1e9, 1, 1.0, 42);
  cr_assert_eq(bl_dp_perturb(h, 2, 2, dims, 1, X, NULL), 0);
  cr_assert_float_eq(X[0], 3.0, 1e-15);
  cr_assert_float_eq(X[2], 0.6, 1e-3);
  cr_assert_float_eq(X[3], 0.8, 1e-3);
  cr_assert_float_eq(X[6], 0.3, 1e-3);
  cr_assert_float_eq(X[7], 0.4, 1e-3);
  int bad[2] = {2, 0};
  cr_assert_eq(bl_dp_perturb(h, 2, 2, bad, 1, X, NULL), O3M_EINVAL);
  bl_dp_destroy(h);
}

/* A round of d 12 split 4+4+4, K 6, with rows of norm below clip. */
static void round_error(double eps, double *err, bl_cost *cost) {
  enum { K = 6, D = 12 };
  static int dims[3] = {4, 4, 4};
  double X[K * D], theta[D], A[D * D], lin[K], quad[K];
  for (int i = 0; i < K * D; i++) X[i] = 0.1 * sin(1.0 + i);
  for (int i = 0; i < D; i++) theta[i] = cos(0.5 * i);
  for (int i = 0; i < D; i++)
    for (int j = 0; j < D; j++) A[i * D + j] = (i == j ? 1.0 : 0.0) + 0.05 / (1 + abs(i - j));
  bl_round r = {.d = D, .K = K, .N = 3, .dims = dims, .X = X, .theta = theta, .Ainv = A};
  bl_dp *h = make(eps, 100, 1.0, 7);
  o3m_err e;
  cr_assert_eq(bl_dp_round(h, &r, lin, quad, cost, &e), 0, "%s", e.msg);
  *err = cost->max_abs_err;
  bl_dp_destroy(h);
}

Test(dp, round_against_plaintext) {
  double tight, loose, mid;
  bl_cost c;
  round_error(1e9, &tight, &c);
  cr_assert(tight < 1e-2, "huge budget: error %g", tight);
  cr_assert_eq(c.bytes, 6u * 8u * 8u);
  cr_assert_eq(c.rounds, 1);
  round_error(100.0, &mid, &c);
  round_error(1.0, &loose, &c);
  cr_assert(loose > mid && mid > tight, "errors %g %g %g", tight, mid, loose);
  cr_assert(loose > 1.0, "epsilon 1 over 100 rounds should swamp the signal: %g", loose);
}

/* A caller's r->plain (bl_round.h) replaces the per-call reference: the
 * same seeded round scores the same against the computed reference, and
 * against a zero reference its error is the largest |lin| or |quad|. */
Test(dp, round_scores_against_given_plain) {
  enum { K = 3, D = 6 };
  static int dims[2] = {3, 3};
  double X[K * D], theta[D], A[D * D] = {0}, lin[K], quad[K], ref[2 * K], zero[2 * K] = {0};
  for (int i = 0; i < K * D; i++) X[i] = 0.2 * cos(2.0 + i);
  for (int i = 0; i < D; i++) theta[i] = sin(0.3 * i), A[i * D + i] = 1.0 + 0.1 * i;
  bl_round r = {.d = D, .K = K, .N = 2, .dims = dims, .X = X, .theta = theta, .Ainv = A};
  o3m_err e;
  cr_assert_eq(bl_round_plain(&r, ref, ref + K, &e), 0, "%s", e.msg);
  bl_cost c0, c1, c2;
  bl_dp *h = make(10.0, 10, 1.0, 7);
  cr_assert_eq(bl_dp_round(h, &r, lin, quad, &c0, &e), 0, "%s", e.msg);
  bl_dp_destroy(h);
  r.plain = ref;
  h = make(10.0, 10, 1.0, 7);
  cr_assert_eq(bl_dp_round(h, &r, lin, quad, &c1, &e), 0, "%s", e.msg);
  bl_dp_destroy(h);
  cr_assert_eq(c1.max_abs_err, c0.max_abs_err, "%g vs %g", c1.max_abs_err, c0.max_abs_err);
  r.plain = zero;
  h = make(10.0, 10, 1.0, 7);
  cr_assert_eq(bl_dp_round(h, &r, lin, quad, &c2, &e), 0, "%s", e.msg);
  bl_dp_destroy(h);
  double m = 0;
  for (int k = 0; k < K; k++) m = fmax(m, fmax(fabs(lin[k]), fabs(quad[k])));
  cr_assert_eq(c2.max_abs_err, m, "%g vs %g", c2.max_abs_err, m);
}

Test(dp, refusals) {
  bl_dp_config c;
  bl_dp_config_default(&c);
  c.clip = 0;
  bl_dp *h = (bl_dp *)1;
  o3m_err e;
  cr_assert_eq(bl_dp_create(&h, &c, &e), O3M_EINVAL);
  cr_assert_null(h);
  bl_dp_config_default(&c);
  c.delta = 0;
  cr_assert_eq(bl_dp_create(&h, &c, &e), O3M_EINVAL);
}
