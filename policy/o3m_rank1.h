/* o3m_rank1.h -- rank-one updates of the ridge statistics and their exact
 * refactorization.
 *
 * A bandit round adds x x^T to Lambda. Recomputing Lambda^{-1} costs O(d^3);
 * these updates cost O(d^2):
 *
 *   - Sherman-Morrison on the inverse:
 *       Ainv <- Ainv - (Ainv x)(Ainv x)^T / (1 + x^T Ainv x)
 *   - rank-one update of the Cholesky factor: U^T U + x x^T = U'^T U'
 *     (the classic "cholupdate" by plane rotations), which keeps the factor
 *     that Thompson sampling needs.
 *
 * Both drift slowly in floating point; callers refactorize exactly from
 * Lambda (kept alongside) every so many updates with o3m_spd_inverse() or
 * o3m_chol_factor(). All matrices are d x d row-major; symmetric ones carry
 * their values in the upper triangle and factors are upper: A = U^T U (see
 * o3m_blas.h). */
#ifndef O3M_RANK1_H
#define O3M_RANK1_H

#include "o3m_blas.h"

/* Ainv <- Ainv - (Ainv x)(Ainv x)^T / (1 + x^T Ainv x), upper triangle read
 * and written. work must hold d doubles. Returns O3M_ENOTPD if 1 + x^T Ainv x is not
 * positive and finite (Ainv has lost definiteness); Ainv is then unchanged. */
int o3m_sherman_morrison(int d, double *Ainv, const double *x, double *work);

/* The same update when w = Ainv x is already known (the caller computed it
 * with o3m_symv_tri on this Ainv and x, so the result is bit for bit that
 * of o3m_sherman_morrison): Ainv <- Ainv - w w^T / (1 + x^T w), with Ainv
 * in triangle t (o3m_blas.h). Saves the O(d^2) product. Same errors; Ainv
 * is unchanged on error. */
int o3m_sherman_morrison_w(o3m_uplo t, int d, double *Ainv, const double *x, const double *w);

/* U (upper triangular) <- the factor of U^T U + x x^T. work must hold d
 * doubles. Returns O3M_ENOTPD if a diagonal entry stops being positive and
 * finite; U is then partly updated and the caller must refactorize. The
 * strictly lower triangle of U is not touched. */
int o3m_chol_update(int d, double *U, const double *x, double *work);

/* U = chol(A) with A = U^T U, A symmetric (upper triangle read), U upper
 * with a zeroed strictly lower part. O3M_ENOTPD if A is not positive
 * definite; U is then unspecified. */
int o3m_chol_factor(int d, const double *A, double *U);

/* Ainv = A^{-1} for symmetric positive definite A (upper triangle read),
 * by Cholesky; Ainv is written in full (both triangles). O3M_ENOTPD if A is
 * not positive definite. */
int o3m_spd_inverse(int d, const double *A, double *Ainv);

#endif
