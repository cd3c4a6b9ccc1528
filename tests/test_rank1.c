/* test_rank1.c -- Sherman-Morrison and Cholesky rank-one updates against
 * direct factorization after many updates. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "o3m_blas.h"
#include "o3m_rank1.h"
#include "o3m_rng.h"

/* ||A - B||_F / ||B||_F over the upper triangles. */
static double rel_err_upper(const double *A, const double *B, int d) {
  double num = 0, den = 0;
  for (int i = 0; i < d; i++)
    for (int j = i; j < d; j++) {
      double a = A[i * d + j], b = B[i * d + j];
      num += (a - b) * (a - b);
      den += b * b;
    }
  return sqrt(num / den);
}

static void unit_gaussian(o3m_rng *r, int d, double *x) {
  o3m_rng_gaussian(r, x, d);
  o3m_scal(d, 1.0 / o3m_nrm2(d, x), x);
}

Test(rank1, sherman_morrison_and_cholupdate_after_100000_updates) {
  const int d = 30, n = 100000;
  o3m_rng *rng;
  o3m_rng_create_seeded_insecure(&rng, 1);
  double *Lam = calloc(d * d, sizeof(double)), *Ainv = calloc(d * d, sizeof(double));
  double *U = calloc(d * d, sizeof(double)), *direct = calloc(d * d, sizeof(double));
  double x[30], work[30];
  for (int i = 0; i < d; i++) Lam[i * d + i] = Ainv[i * d + i] = U[i * d + i] = 1.0;
  for (int t = 0; t < n; t++) {
    unit_gaussian(rng, d, x);
    o3m_syr(d, 1.0, x, Lam);
    cr_assert_eq(o3m_sherman_morrison(d, Ainv, x, work), O3M_OK);
    cr_assert_eq(o3m_chol_update(d, U, x, work), O3M_OK);
  }
  cr_assert_eq(o3m_spd_inverse(d, Lam, direct), O3M_OK);
  double e1 = rel_err_upper(Ainv, direct, d);
  cr_assert_leq(e1, 1e-9, "Sherman-Morrison relative error %g", e1);
  cr_assert_eq(o3m_chol_factor(d, Lam, direct), O3M_OK);
  double e2 = rel_err_upper(U, direct, d);
  cr_assert_leq(e2, 1e-9, "Cholesky update relative error %g", e2);
  free(Lam);
  free(Ainv);
  free(U);
  free(direct);
  o3m_rng_destroy(rng);
}

Test(rank1, sherman_morrison_rejects_indefinite_inverse_unchanged) {
  double Ainv[4] = {-1, 0, 0, -1}, before[4], x[2] = {1, 0}, work[2];
  memcpy(before, Ainv, sizeof before);
  cr_assert_eq(o3m_sherman_morrison(2, Ainv, x, work), O3M_ENOTPD);
  cr_assert_eq(memcmp(Ainv, before, sizeof before), 0);
}

Test(rank1, cholupdate_detects_a_broken_factor) {
  double U[4] = {0, 0, 0, 1}, x[2] = {1, 1}, work[2];
  cr_assert_eq(o3m_chol_update(2, U, x, work), O3M_ENOTPD);
}

Test(rank1, factorizations_report_not_positive_definite) {
  double A[4] = {1, 2, 2, 1}, out[4];
  cr_assert_eq(o3m_chol_factor(2, A, out), O3M_ENOTPD);
  cr_assert_eq(o3m_spd_inverse(2, A, out), O3M_ENOTPD);
}

Test(rank1, spd_inverse_is_exact_on_a_small_case) {
  double A[4] = {4, 2, 2, 3}, inv[4];
  cr_assert_eq(o3m_spd_inverse(2, A, inv), O3M_OK);
  /* inverse of [[4,2],[2,3]] is [[3,-2],[-2,4]] / 8 */
  cr_assert_float_eq(inv[0], 0.375, 1e-15);
  cr_assert_float_eq(inv[1], -0.25, 1e-15);
  cr_assert_float_eq(inv[2], -0.25, 1e-15);
  cr_assert_float_eq(inv[3], 0.5, 1e-15);
}
