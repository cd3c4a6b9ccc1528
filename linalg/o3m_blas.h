/* o3m_blas.h -- the one shim between O3M and CBLAS/LAPACKE.
 *
 * Every dense operation in the project goes through these wrappers; no other
 * file includes cblas.h or lapacke.h. Conventions fixed here, once:
 *
 *   - Matrices are row-major, dense, with leading dimension equal to the
 *     number of columns unless a wrapper takes an explicit ld.
 *   - Symmetric matrices are stored in full d x d arrays, but only the UPPER
 *     triangle is meaningful: every symmetric wrapper reads and writes the
 *     upper triangle only, so after rank-one updates the lower part is stale.
 *     Code that needs the full matrix calls o3m_symmetrize_from_upper().
 *     The exceptions take an o3m_uplo and use the triangle it names.
 *   - Cholesky factors are UPPER triangular: A = U^T U. In row-major storage
 *     this is the same memory as a column-major lower factor L = U^T, and it
 *     makes the rank-one update's inner loops unit-stride.
 *   - Integer arguments are int. Debian's OpenBLAS is built with 32-bit
 *     blasint, so d up to 46,340 (d*d < 2^31) is representable.
 *
 * Above each wrapper is the math it performs. The LAPACK wrappers return the
 * LAPACK info value translated to O3M codes: a non-positive-definite matrix is
 * O3M_ENOTPD, a recoverable condition the callers handle. */
#ifndef O3M_BLAS_H
#define O3M_BLAS_H

#include <cblas.h>
#include <lapacke.h>

#include "o3m_error.h"

/* Makes OpenBLAS single-threaded for the calling process. The bandit works on
 * small matrices where threading costs more than it saves, and daemons already
 * run one request per thread. */
static inline void o3m_blas_single_thread(void) { openblas_set_num_threads(1); }

/* Lets OpenBLAS use n threads (n >= 1) for the calling process, for a
 * command whose operator asks for more (o3m-eval --threads). */
static inline void o3m_blas_threads(int n) { openblas_set_num_threads(n); }

/* x . y */
static inline double o3m_dot(int n, const double *x, const double *y) {
  return cblas_ddot(n, x, 1, y, 1);
}

/* sum_i |x_i|. Non-finite when some x_i is (NaN and infinities propagate
 * through a sum of magnitudes), or when the finite sum overflows. */
static inline double o3m_asum(int n, const double *x) { return cblas_dasum(n, x, 1); }

/* ||x||_2 */
static inline double o3m_nrm2(int n, const double *x) { return cblas_dnrm2(n, x, 1); }

/* y += a x */
static inline void o3m_axpy(int n, double a, const double *x, double *y) {
  cblas_daxpy(n, a, x, 1, y, 1);
}

/* x *= a */
static inline void o3m_scal(int n, double a, double *x) { cblas_dscal(n, a, x, 1); }

/* y = x */
static inline void o3m_copy(int n, const double *x, double *y) { cblas_dcopy(n, x, 1, y, 1); }

/* y = alpha A x + beta y, A is m x n */
static inline void o3m_gemv(int m, int n, double alpha, const double *A, const double *x,
                            double beta, double *y) {
  cblas_dgemv(CblasRowMajor, CblasNoTrans, m, n, alpha, A, n, x, 1, beta, y, 1);
}

/* y = alpha A^T x + beta y, A is m x n (so y has n entries) */
static inline void o3m_gemv_t(int m, int n, double alpha, const double *A, const double *x,
                              double beta, double *y) {
  cblas_dgemv(CblasRowMajor, CblasTrans, m, n, alpha, A, n, x, 1, beta, y, 1);
}

/* Which triangle of a row-major d x d array holds a symmetric matrix. The
 * lower one lets two symmetric matrices share a (d + 1) x d array: the
 * first in the upper triangle of rows 0..d-1, the second in the lower
 * triangle of rows 1..d (an array that starts d doubles later). Every
 * element is then used, so a set of matrices occupies half the cache
 * lines (o3m_policy.c keeps the disjoint arms' inverses so). */
typedef enum { O3M_UPPER = 0, O3M_LOWER = 1 } o3m_uplo;

/* y = alpha A x + beta y, A symmetric d x d, triangle t read */
static inline void o3m_symv_tri(o3m_uplo t, int d, double alpha, const double *A,
                                const double *x, double beta, double *y) {
  cblas_dsymv(CblasRowMajor, t == O3M_LOWER ? CblasLower : CblasUpper, d, alpha, A, d, x, 1,
              beta, y, 1);
}

/* A += alpha x x^T, A symmetric d x d, triangle t written */
static inline void o3m_syr_tri(o3m_uplo t, int d, double alpha, const double *x, double *A) {
  cblas_dsyr(CblasRowMajor, t == O3M_LOWER ? CblasLower : CblasUpper, d, alpha, x, 1, A, d);
}

/* y = alpha A x + beta y, A symmetric d x d (upper triangle read) */
static inline void o3m_symv(int d, double alpha, const double *A, const double *x, double beta,
                            double *y) {
  o3m_symv_tri(O3M_UPPER, d, alpha, A, x, beta, y);
}

/* A += alpha x x^T, A symmetric d x d (upper triangle written) */
static inline void o3m_syr(int d, double alpha, const double *x, double *A) {
  o3m_syr_tri(O3M_UPPER, d, alpha, x, A);
}

/* C += alpha A^T A, C symmetric d x d (upper triangle written), A is k x d:
 * the k rank-one updates alpha a_i a_i^T of A's rows as one BLAS-3 call.
 * For k >= 8 this costs a third to a fifth of k o3m_syr calls. */
static inline void o3m_syrk_t(int d, int k, double alpha, const double *A, double *C) {
  cblas_dsyrk(CblasRowMajor, CblasUpper, CblasTrans, d, k, alpha, A, d, 1.0, C, d);
}

/* C = alpha A B + beta C; A is m x k, B is k x n, C is m x n */
static inline void o3m_gemm(int m, int n, int k, double alpha, const double *A, const double *B,
                            double beta, double *C) {
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, alpha, A, k, B, n, beta, C, n);
}

/* C = alpha A B^T + beta C; A is m x k, B is n x k, C is m x n */
static inline void o3m_gemm_nt(int m, int n, int k, double alpha, const double *A, const double *B,
                               double beta, double *C) {
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, alpha, A, k, B, k, beta, C, n);
}

/* C = alpha A^T B + beta C; A is k x m, B is k x n, C is m x n */
static inline void o3m_gemm_tn(int m, int n, int k, double alpha, const double *A, const double *B,
                               double beta, double *C) {
  cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, m, n, k, alpha, A, m, B, n, beta, C, n);
}

/* C = alpha B S + beta C; S symmetric d x d (upper read), B and C are m x d */
static inline void o3m_symm_right(int m, int d, double alpha, const double *S, const double *B,
                                  double beta, double *C) {
  cblas_dsymm(CblasRowMajor, CblasRight, CblasUpper, m, d, alpha, S, d, B, d, beta, C, d);
}

/* x = U^{-T} x, U upper triangular d x d. With A = U^T U this gives
 * ||x||^2 = x_in^T A^{-1} x_in. */
static inline void o3m_trsv_upper_t(int d, const double *U, double *x) {
  cblas_dtrsv(CblasRowMajor, CblasUpper, CblasTrans, CblasNonUnit, d, U, d, x, 1);
}

/* x = U^{-1} x, U upper triangular d x d. With A = U^T U and z ~ N(0, I),
 * U^{-1} z ~ N(0, A^{-1}). */
static inline void o3m_trsv_upper(int d, const double *U, double *x) {
  cblas_dtrsv(CblasRowMajor, CblasUpper, CblasNoTrans, CblasNonUnit, d, U, d, x, 1);
}

/* B = B U^{-1}, U upper triangular d x d, B is m x d. Row k of the result is
 * (U^{-T} b_k)^T, so its squared norm is b_k^T (U^T U)^{-1} b_k. */
static inline void o3m_trsm_right_upper(int m, int d, const double *U, double *B) {
  cblas_dtrsm(CblasRowMajor, CblasRight, CblasUpper, CblasNoTrans, CblasNonUnit, m, d, 1.0, U, d,
              B, d);
}

/* B = B U^{-T}, U upper triangular d x d, B is m x d. Row k of the result is
 * (U^{-1} b_k)^T: m triangular solves o3m_trsv_upper at once (with z_k ~
 * N(0, I) in the rows, m draws of N(0, (U^T U)^{-1})). */
static inline void o3m_trsm_right_upper_t(int m, int d, const double *U, double *B) {
  cblas_dtrsm(CblasRowMajor, CblasRight, CblasUpper, CblasTrans, CblasNonUnit, m, d, 1.0, U, d,
              B, d);
}

/* B = B T, T upper triangular d x d (only its upper triangle and diagonal
 * are read), B is m x d. With T the upper triangle of a symmetric S, row k
 * of the result dotted with b_k is (b_k^T S b_k + sum_i S_ii b_ki^2) / 2:
 * all m quadratic forms for half the flops of o3m_symm_right. */
static inline void o3m_trmm_right_upper(int m, int d, const double *T, double *B) {
  cblas_dtrmm(CblasRowMajor, CblasRight, CblasUpper, CblasNoTrans, CblasNonUnit, m, d, 1.0, T, d,
              B, d);
}

/* A = U^T U in place: the upper triangle of A becomes U (the strictly lower
 * part is left as it was). O3M_ENOTPD when A is not positive definite. */
static inline int o3m_potrf_upper(int d, double *A) {
  lapack_int info = LAPACKE_dpotrf(LAPACK_ROW_MAJOR, 'U', d, A, d);
  if (info > 0) return O3M_ENOTPD;
  return info < 0 ? O3M_EINVAL : O3M_OK;
}

/* A^{-1} from its Cholesky factor U held in the upper triangle of A; writes
 * the upper triangle of the inverse. */
static inline int o3m_potri_upper(int d, double *A) {
  lapack_int info = LAPACKE_dpotri(LAPACK_ROW_MAJOR, 'U', d, A, d);
  if (info > 0) return O3M_ENOTPD;
  return info < 0 ? O3M_EINVAL : O3M_OK;
}

/* A = P L U in place (general LU with partial pivoting); ipiv has d entries. */
static inline int o3m_getrf(int d, double *A, int *ipiv) {
  lapack_int info = LAPACKE_dgetrf(LAPACK_ROW_MAJOR, d, d, A, d, ipiv);
  if (info > 0) return O3M_ENOTPD;
  return info < 0 ? O3M_EINVAL : O3M_OK;
}

/* A^{-1} from the LU factors of o3m_getrf. */
static inline int o3m_getri(int d, double *A, const int *ipiv) {
  lapack_int info = LAPACKE_dgetri(LAPACK_ROW_MAJOR, d, A, d, ipiv);
  if (info > 0) return O3M_ENOTPD;
  return info < 0 ? O3M_EINVAL : O3M_OK;
}

/* A = V diag(w) V^T for a symmetric d x d A (upper triangle read), by
 * LAPACK's divide and conquer (dsyevd): on return the columns of A are the
 * orthonormal eigenvectors (A[i * d + k] is component i of the k-th) and w
 * holds the eigenvalues in ascending order. O3M_ENONFINITE when it does not
 * converge, which in practice only non-finite entries cause. */
static inline int o3m_syevd(int d, double *A, double *w) {
  lapack_int info = LAPACKE_dsyevd(LAPACK_ROW_MAJOR, 'V', 'U', d, A, d, w);
  if (info > 0) return O3M_ENONFINITE;
  return info < 0 ? O3M_EINVAL : O3M_OK;
}

/* Copies the lower triangle of a row-major d x d matrix onto its upper one. */
static inline void o3m_symmetrize_from_lower(int d, double *A) {
  for (int i = 0; i < d; i++)
    for (int j = i + 1; j < d; j++) A[(size_t)i * d + j] = A[(size_t)j * d + i];
}

/* Copies the upper triangle of a row-major d x d matrix onto its lower one. */
static inline void o3m_symmetrize_from_upper(int d, double *A) {
  for (int i = 0; i < d; i++)
    for (int j = i + 1; j < d; j++) A[(size_t)j * d + i] = A[(size_t)i * d + j];
}

#endif
