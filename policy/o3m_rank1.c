/* o3m_rank1.c -- Sherman-Morrison, Cholesky rank-one update, refactorization. */
#include "o3m_rank1.h"

#include <math.h>
#include <string.h>

#include "o3m_blas.h"

int o3m_sherman_morrison(int d, double *Ainv, const double *x, double *work) {
  /* w = Ainv x */
  o3m_symv(d, 1.0, Ainv, x, 0.0, work);
  return o3m_sherman_morrison_w(O3M_UPPER, d, Ainv, x, work);
}

int o3m_sherman_morrison_w(o3m_uplo t, int d, double *Ainv, const double *x, const double *w) {
  /* denom = 1 + x^T w; Ainv -= w w^T / denom */
  double denom = 1.0 + o3m_dot(d, x, w);
  if (!(denom > 0.0) || !isfinite(denom)) return O3M_ENOTPD;
  o3m_syr_tri(t, d, -1.0 / denom, w, Ainv);
  return O3M_OK;
}

int o3m_chol_update(int d, double *U, const double *x, double *work) {
  /* Each step k applies the plane rotation that zeroes work[k] against the
   * diagonal U[k][k]; row k of U and the tail of work are rotated together.
   * Rows are contiguous, so both inner loops are unit-stride. */
  memcpy(work, x, sizeof(double) * d);
  for (int k = 0; k < d; k++) {
    double *uk = U + (size_t)k * d;
    double ukk = uk[k], xk = work[k];
    /* r = hypot(ukk, xk). The plain square root is exact to rounding
     * unless the squares overflow or underflow, which it can see in its
     * result; hypot, several times slower, is kept for those. */
    double r2 = ukk * ukk + xk * xk, r = sqrt(r2);
    if (!isnormal(r2) || !isfinite(r2)) r = hypot(ukk, xk);
    if (!(ukk > 0.0) || !(r > 0.0) || !isfinite(r)) return O3M_ENOTPD;
    /* Multiplying by 1/c replaces a division per element (the division
     * was most of the cost of an update). */
    double c = r / ukk, s = xk / ukk, inv_c = ukk / r;
    uk[k] = r;
    for (int i = k + 1; i < d; i++) {
      uk[i] = (uk[i] + s * work[i]) * inv_c;
      work[i] = c * work[i] - s * uk[i];
    }
  }
  return O3M_OK;
}

int o3m_chol_factor(int d, const double *A, double *U) {
  memcpy(U, A, sizeof(double) * (size_t)d * d);
  int rc = o3m_potrf_upper(d, U);
  if (rc) return rc;
  for (int i = 1; i < d; i++) memset(U + (size_t)i * d, 0, sizeof(double) * i);
  return O3M_OK;
}

int o3m_spd_inverse(int d, const double *A, double *Ainv) {
  memcpy(Ainv, A, sizeof(double) * (size_t)d * d);
  int rc = o3m_potrf_upper(d, Ainv);
  if (!rc) rc = o3m_potri_upper(d, Ainv);
  if (rc) return rc;
  o3m_symmetrize_from_upper(d, Ainv);
  return O3M_OK;
}
