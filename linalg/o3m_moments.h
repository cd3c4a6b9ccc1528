/* o3m_moments.h -- the mean and covariance of a set of rows, and the two
 * square roots of that covariance a party builds from its own table.
 *
 * Sigma = (1/n) sum_r (x_r - mu)(x_r - mu)^T, the population covariance,
 * is accumulated from centred rows (so a large mean does not cancel the
 * spread) by BLAS-3 rank-k updates, and factored once as
 * Sigma = V diag(lambda) V^T by LAPACK's dsyevd, which handles singular
 * and merely positive semi-definite tables; eigenvalues that rounding made
 * slightly negative are clamped to 0. From that factorization:
 *
 *   - the square root Sigma^{1/2} = V diag(sqrt(lambda)) V^T: mu + Sigma^{1/2} z
 *     with z standard normal has the table's mean and covariance, which is
 *     how party/o3m_features draws the dummy row of an unknown id;
 *   - the whitening map W = V diag(w) V^T, the symmetric inverse square root
 *     (ZCA), with w_i = 1/sqrt(lambda_i) for eigenvalues above
 *     O3M_MOMENTS_RTOL * lambda_max and w_i = 1 for the others (directions
 *     the table does not vary along, where 1/sqrt would be infinite or pure
 *     rounding noise), so W is always invertible. W Sigma W is the identity
 *     on the table's varying directions: the optional whitening defence,
 *     used by party/o3m_features and by o3m-eval (one
 *     implementation).
 *
 * Both maps are symmetric and do not depend on the sign or the choice of
 * the eigenvectors LAPACK returns (a repeated eigenvalue leaves them free),
 * only on Sigma, so the same table gives the same maps up to rounding.
 *
 * Everything here runs once per table at start-up: the functions allocate
 * their scratch space and are not for a hot path. They keep no state and
 * may run in any number of threads at once. */
#ifndef O3M_MOMENTS_H
#define O3M_MOMENTS_H

/* Eigenvalues at or below this fraction of the largest one count as zero:
 * the whitening map leaves their directions unscaled. 1e-10 is far above
 * the rounding error of the eigenvalues (about d * 1e-16 of the largest)
 * and far below any spread a real column has next to another. */
#define O3M_MOMENTS_RTOL 1e-10

/* The mean (d entries) and the eigen-decomposition of the population
 * covariance of the n rows of X (n >= 1 rows of d >= 1 columns, row r at
 * X + r * ldx, ldx >= d: a party's columns may be a block of a wider
 * array). V (d x d, row-major) gets the orthonormal eigenvectors in its
 * columns and lambda (d) the eigenvalues, ascending, each >= 0.
 * O3M_ENONFINITE when the covariance overflows (values beyond about 1e154):
 * mean is then set, V and lambda are not. O3M_EINVAL for bad sizes,
 * O3M_ENOMEM. */
int o3m_moments_eig(int n, int d, const double *X, int ldx, double *mean, double *V,
                    double *lambda);

/* out (d x d, row-major, symmetric, both triangles written) = V diag(h) V^T
 * with h_i = sqrt(lambda_i) (inverse = 0: Sigma^{1/2}), or with
 * h_i = 1 / sqrt(lambda_i) above the tolerance and 1 below it (inverse = 1:
 * the whitening map W). V and lambda as o3m_moments_eig left them. */
int o3m_moments_root(int d, const double *V, const double *lambda, int inverse, double *out);

/* The whitening map W (d x d, as o3m_moments_root with inverse = 1) of the
 * n rows of X (as o3m_moments_eig). W x keeps a linear model linear:
 * theta^T x = (W^{-1} theta)^T (W x). Errors as o3m_moments_eig; W is then
 * untouched. */
int o3m_moments_whitener(int n, int d, const double *X, int ldx, double *W);

#endif
