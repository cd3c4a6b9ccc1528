/* o3m_moments.c -- mean, covariance and its square roots (see o3m_moments.h).
 *
 * The covariance is accumulated over blocks of CHUNK centred rows with one
 * dsyrk per block, so the scratch space is CHUNK x d whatever n is. */
#include "o3m_moments.h"
#include "o3m_alloc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "o3m_blas.h"

/* Rows centred and added to the covariance per BLAS-3 call. */
#define CHUNK 256

int o3m_moments_eig(int n, int d, const double *X, int ldx, double *mean, double *V,
                    double *lambda) {
  if (n < 1 || d < 1 || ldx < d || !X || !mean || !V || !lambda) return O3M_EINVAL;
  double *buf = o3m_malloc(sizeof *buf * (size_t)CHUNK * (size_t)d);
  double *S = o3m_calloc((size_t)d * (size_t)d, sizeof *S);
  if (!buf || !S) {
    o3m_free(buf);
    o3m_free(S);
    return O3M_ENOMEM;
  }
  memset(mean, 0, sizeof *mean * (size_t)d);
  for (int r = 0; r < n; r++) o3m_axpy(d, 1.0, X + (size_t)r * (size_t)ldx, mean);
  for (int c = 0; c < d; c++) mean[c] /= n;
  /* S = sum_r (x_r - mu)(x_r - mu)^T, upper triangle, block by block. */
  for (int r0 = 0; r0 < n; r0 += CHUNK) {
    int k = n - r0 < CHUNK ? n - r0 : CHUNK;
    for (int i = 0; i < k; i++) {
      double *row = buf + (size_t)i * (size_t)d;
      o3m_copy(d, X + (size_t)(r0 + i) * (size_t)ldx, row);
      o3m_axpy(d, -1.0, mean, row);
    }
    o3m_syrk_t(d, k, 1.0 / n, buf, S);
  }
  o3m_free(buf);
  int rc = O3M_OK;
  for (int i = 0; i < d && !rc; i++)
    for (int j = i; j < d; j++)
      if (!isfinite(S[(size_t)i * d + j])) {
        rc = O3M_ENONFINITE;
        break;
      }
  if (!rc) rc = o3m_syevd(d, S, lambda);
  if (!rc) {
    for (int i = 0; i < d; i++)
      if (!(lambda[i] > 0)) lambda[i] = 0;
    memcpy(V, S, sizeof *V * (size_t)d * (size_t)d);
  }
  o3m_free(S);
  return rc;
}

int o3m_moments_root(int d, const double *V, const double *lambda, int inverse, double *out) {
  if (d < 1 || !V || !lambda || !out) return O3M_EINVAL;
  double *B = o3m_malloc(sizeof *B * (size_t)d * (size_t)d);
  if (!B) return O3M_ENOMEM;
  double top = lambda[d - 1]; /* ascending: the largest */
  /* B = V diag(h): column k of V scaled by h_k. */
  for (int k = 0; k < d; k++) {
    double h;
    if (!inverse)
      h = sqrt(lambda[k]);
    else
      h = lambda[k] > O3M_MOMENTS_RTOL * top ? 1.0 / sqrt(lambda[k]) : 1.0;
    for (int i = 0; i < d; i++) B[(size_t)i * d + k] = V[(size_t)i * d + k] * h;
  }
  /* out = B V^T, symmetric up to rounding; made exactly symmetric so that
   * rows and columns agree bit for bit. */
  o3m_gemm_nt(d, d, d, 1.0, B, V, 0.0, out);
  for (int i = 0; i < d; i++)
    for (int j = i + 1; j < d; j++) {
      double m = 0.5 * (out[(size_t)i * d + j] + out[(size_t)j * d + i]);
      out[(size_t)i * d + j] = out[(size_t)j * d + i] = m;
    }
  o3m_free(B);
  return O3M_OK;
}

int o3m_moments_whitener(int n, int d, const double *X, int ldx, double *W) {
  if (n < 1 || d < 1 || !W) return O3M_EINVAL;
  double *mean = o3m_malloc(sizeof *mean * (size_t)d);
  double *lambda = o3m_malloc(sizeof *lambda * (size_t)d);
  double *V = o3m_malloc(sizeof *V * (size_t)d * (size_t)d);
  int rc = mean && lambda && V ? O3M_OK : O3M_ENOMEM;
  if (!rc) rc = o3m_moments_eig(n, d, X, ldx, mean, V, lambda);
  if (!rc) rc = o3m_moments_root(d, V, lambda, 1, W);
  o3m_free(mean);
  o3m_free(lambda);
  o3m_free(V);
  return rc;
}
