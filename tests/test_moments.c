/* test_moments.c -- mean, covariance and its square roots
 * (linalg/o3m_moments.h).
 *
 * On small tables with known answers: the mean and the population
 * covariance of rows read from a block of a wider array; the square root
 * squares back to the covariance; the whitening map gives W Sigma W = I on
 * a full-rank table and a projector (eigenvalues 0 and 1) on a singular
 * one, where it stays finite and invertible (identity on the null
 * directions); both maps are symmetric; overflowing values and bad sizes
 * are refused. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "o3m_blas.h"
#include "o3m_moments.h"

#define N 6
#define D 3
#define LD 5 /* the table is columns 1..3 of a 5-column array */

/* Rows of a full-rank 3-column table, placed at columns 1..3 of X. */
static void table(double X[N * LD]) {
  static const double rows[N][D] = {{1, 2, 0.5},  {3, -1, 2},   {0, 4, 1},
                                    {2, 2, -3},   {-1, 0.5, 0}, {5, 1, 1.5}};
  for (int r = 0; r < N; r++) {
    X[r * LD] = 1e6; /* neighbours that must not be read */
    X[r * LD + 4] = -1e6;
    for (int c = 0; c < D; c++) X[r * LD + 1 + c] = rows[r][c];
  }
}

/* Population covariance (full) of the rows, computed plainly. */
static void plain_cov(const double *X, double *mean, double *S) {
  memset(mean, 0, sizeof(double) * D);
  memset(S, 0, sizeof(double) * D * D);
  for (int r = 0; r < N; r++)
    for (int c = 0; c < D; c++) mean[c] += X[r * LD + 1 + c] / N;
  for (int r = 0; r < N; r++)
    for (int a = 0; a < D; a++)
      for (int b = 0; b < D; b++)
        S[a * D + b] += (X[r * LD + 1 + a] - mean[a]) * (X[r * LD + 1 + b] - mean[b]) / N;
}

/* C = A B for D x D matrices. */
static void mul(const double *A, const double *B, double *C) {
  for (int i = 0; i < D; i++)
    for (int j = 0; j < D; j++) {
      double s = 0;
      for (int k = 0; k < D; k++) s += A[i * D + k] * B[k * D + j];
      C[i * D + j] = s;
    }
}

Test(moments, mean_covariance_and_both_roots_of_a_full_rank_table) {
  double X[N * LD], mean[D], V[D * D], lam[D], pm[D], S[D * D];
  table(X);
  plain_cov(X, pm, S);
  cr_assert_eq(o3m_moments_eig(N, D, X + 1, LD, mean, V, lam), 0);
  for (int c = 0; c < D; c++) cr_assert_float_eq(mean[c], pm[c], 1e-14, "mean %d", c);
  cr_assert(lam[0] > 0 && lam[0] <= lam[1] && lam[1] <= lam[2], "eigenvalues not ascending");
  double R[D * D], W[D * D], RR[D * D], T[D * D], WSW[D * D];
  cr_assert_eq(o3m_moments_root(D, V, lam, 0, R), 0);
  cr_assert_eq(o3m_moments_root(D, V, lam, 1, W), 0);
  mul(R, R, RR);
  mul(W, S, T);
  mul(T, W, WSW);
  for (int i = 0; i < D; i++)
    for (int j = 0; j < D; j++) {
      cr_assert_float_eq(RR[i * D + j], S[i * D + j], 1e-12, "root^2 [%d][%d]", i, j);
      cr_assert_float_eq(WSW[i * D + j], i == j, 1e-12, "W S W [%d][%d]", i, j);
      cr_assert_eq(R[i * D + j], R[j * D + i], "root not symmetric");
      cr_assert_eq(W[i * D + j], W[j * D + i], "W not symmetric");
    }
  /* The convenience call gives the same map. */
  double W2[D * D];
  cr_assert_eq(o3m_moments_whitener(N, D, X + 1, LD, W2), 0);
  for (int i = 0; i < D * D; i++) cr_assert_float_eq(W2[i], W[i], 1e-15);
}

Test(moments, singular_table_gives_a_finite_invertible_whitener) {
  /* Column 2 = 2 * column 0 + 1: rank 2 after centring; a constant table
   * has no spread at all. */
  double X[N * LD];
  table(X);
  for (int r = 0; r < N; r++) X[r * LD + 3] = 2 * X[r * LD + 1] + 1;
  double mean[D], S[D * D], W[D * D], T[D * D], WSW[D * D], lam[D];
  plain_cov(X, mean, S);
  cr_assert_eq(o3m_moments_whitener(N, D, X + 1, LD, W), 0);
  for (int i = 0; i < D * D; i++) cr_assert(isfinite(W[i]));
  mul(W, S, T);
  mul(T, W, WSW);
  cr_assert_eq(o3m_syevd(D, WSW, lam), 0);
  cr_assert_float_eq(lam[0], 0, 1e-9, "null direction: %.3g", lam[0]);
  cr_assert_float_eq(lam[1], 1, 1e-9);
  cr_assert_float_eq(lam[2], 1, 1e-9);
  /* Invertible: W has no zero eigenvalue (the null direction gets 1). */
  memcpy(T, W, sizeof T);
  cr_assert_eq(o3m_syevd(D, T, lam), 0);
  cr_assert_gt(fabs(lam[0]), 1e-6, "W is singular: %.3g", lam[0]);

  for (int r = 0; r < N; r++)
    for (int c = 0; c < D; c++) X[r * LD + 1 + c] = 7;
  cr_assert_eq(o3m_moments_whitener(N, D, X + 1, LD, W), 0);
  for (int i = 0; i < D; i++)
    for (int j = 0; j < D; j++) cr_assert_float_eq(W[i * D + j], i == j, 1e-15, "constant: W = I");
}

Test(moments, overflow_and_bad_sizes_are_refused) {
  double X[N * LD], mean[D], V[D * D], lam[D], W[D * D];
  table(X);
  X[1] = 1e200; /* its square overflows */
  cr_assert_eq(o3m_moments_eig(N, D, X + 1, LD, mean, V, lam), O3M_ENONFINITE);
  cr_assert(isfinite(mean[1]), "the mean is still set");
  cr_assert_eq(o3m_moments_whitener(N, D, X + 1, LD, W), O3M_ENONFINITE);
  cr_assert_eq(o3m_moments_eig(0, D, X, LD, mean, V, lam), O3M_EINVAL);
  cr_assert_eq(o3m_moments_eig(N, D, X, D - 1, mean, V, lam), O3M_EINVAL);
  cr_assert_eq(o3m_moments_root(0, V, lam, 0, W), O3M_EINVAL);
}
