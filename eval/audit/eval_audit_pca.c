/* eval_audit_pca.c -- see eval_audit_pca.h. Dense math goes through
 * linalg/o3m_blas.h and LAPACKE (dgelsd, dsyevd). */
#include "eval_audit_pca.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "o3m_blas.h"

/* Eigenvalues below this fraction of the largest count as zero. */
#define RANK_TOL 1e-13
/* Relative singular value cut of the least-squares solves. */
#define LSTSQ_RCOND 1e-12

/* Minimum-norm least squares A X = B (dgelsd): A is m x n (destroyed), B is
 * max(m, n) x nrhs with the right-hand sides in its first m rows; on return
 * its first n rows hold X. */
int eval_audit_lstsq(int m, int n, int nrhs, double *A, double *B) {
  int mn = m < n ? m : n;
  double *s = malloc(sizeof *s * (size_t)(mn > 0 ? mn : 1));
  if (!s) return O3M_ENOMEM;
  lapack_int rank;
  lapack_int info = LAPACKE_dgelsd(LAPACK_ROW_MAJOR, m, n, nrhs, A, n, B, nrhs, s,
                                   LSTSQ_RCOND, &rank);
  free(s);
  return info == 0 ? O3M_OK : info < 0 ? O3M_EINVAL : O3M_ENOTPD;
}

/* Eigenpairs of the symmetric p x p matrix C (full storage, overwritten by
 * the eigenvectors as columns), ascending into w (dsyevd). */
static int sym_eig(int p, double *C, double *w) {
  lapack_int info = LAPACKE_dsyevd(LAPACK_ROW_MAJOR, 'V', 'U', p, C, p, w);
  return info == 0 ? O3M_OK : info < 0 ? O3M_EINVAL : O3M_ENOTPD;
}

/* Centers the n x c matrix A's columns in place and scales each to unit
 * norm; a constant column becomes zero and gets flag 1. */
void eval_audit_standardize(int n, int c, double *A, unsigned char *flag) {
  for (int q = 0; q < c; q++) {
    double mu = 0, ss = 0;
    for (int i = 0; i < n; i++) mu += A[(size_t)i * c + q];
    mu /= n;
    for (int i = 0; i < n; i++) {
      double v = A[(size_t)i * c + q] -= mu;
      ss += v * v;
    }
    double sc = ss > 0 && sqrt(ss) > 1e-12 * (fabs(mu) + 1) * sqrt((double)n) ? 1 / sqrt(ss) : 0;
    for (int i = 0; i < n; i++) A[(size_t)i * c + q] *= sc;
    if (flag) flag[q] = sc == 0;
  }
}

void eval_audit_basis_free(eval_audit_basis *b) {
  free(b->mean);
  free(b->V);
  free(b->lam);
  memset(b, 0, sizeof *b);
}

int eval_audit_pca_fit(eval_audit_basis *b, int n, int p, const double *Tr, int want) {
  memset(b, 0, sizeof *b);
  b->p = p;
  double *C = calloc((size_t)p * p, sizeof *C), *w = malloc(sizeof *w * p);
  double *Z = malloc(sizeof *Z * (size_t)n * p);
  b->mean = calloc((size_t)p, sizeof *b->mean);
  b->V = malloc(sizeof *b->V * (size_t)p * p);
  b->lam = malloc(sizeof *b->lam * p);
  int rc = O3M_ENOMEM;
  if (!C || !w || !Z || !b->mean || !b->V || !b->lam) goto out;
  for (int i = 0; i < n; i++) o3m_axpy(p, 1.0 / n, Tr + (size_t)i * p, b->mean);
  for (int i = 0; i < n; i++)
    for (int q = 0; q < p; q++) Z[(size_t)i * p + q] = Tr[(size_t)i * p + q] - b->mean[q];
  o3m_syrk_t(p, n, 1.0 / n, Z, C);
  o3m_symmetrize_from_upper(p, C);
  if ((rc = sym_eig(p, C, w))) goto out;
  double top = w[p - 1] > 0 ? w[p - 1] : 0;
  int k = 0;
  while (k < want && k < n - 1 && k < p && w[p - 1 - k] > RANK_TOL * top && top > 0) k++;
  for (int q = 0; q < k; q++) {
    b->lam[q] = w[p - 1 - q];
    for (int r = 0; r < p; r++) b->V[(size_t)r * k + q] = C[(size_t)r * p + (p - 1 - q)];
  }
  b->k = k;
  rc = O3M_OK;
out:
  free(C);
  free(w);
  free(Z);
  if (rc) eval_audit_basis_free(b);
  return rc;
}

/* Out (n x k) = (A - mean) V: the components of n observations. */
int eval_audit_project(const eval_audit_basis *b, int n, const double *A, double *Out) {
  double *Z = malloc(sizeof *Z * (size_t)n * b->p);
  if (!Z) return O3M_ENOMEM;
  for (int i = 0; i < n; i++)
    for (int q = 0; q < b->p; q++) Z[(size_t)i * b->p + q] = A[(size_t)i * b->p + q] - b->mean[q];
  o3m_gemm(n, b->k, b->p, 1.0, Z, b->V, 0.0, Out);
  free(Z);
  return O3M_OK;
}

/* W (k x k) <- (W W^T)^{-1/2} W, FastICA's symmetric decorrelation. */
static int sym_decorrelate(int k, double *W, double *M, double *E, double *w, double *tmp) {
  o3m_gemm_nt(k, k, k, 1.0, W, W, 0.0, M);
  memcpy(E, M, sizeof *E * (size_t)k * k);
  int rc = sym_eig(k, E, w);
  if (rc) return rc;
  /* M = E diag(w^-1/2) E^T */
  for (int r = 0; r < k; r++)
    for (int q = 0; q < k; q++)
      tmp[(size_t)r * k + q] = E[(size_t)r * k + q] / sqrt(w[q] > 1e-300 ? w[q] : 1e-300);
  o3m_gemm_nt(k, k, k, 1.0, tmp, E, 0.0, M);
  o3m_gemm(k, k, k, 1.0, M, W, 0.0, tmp);
  memcpy(W, tmp, sizeof *W * (size_t)k * k);
  return O3M_OK;
}

/* FastICA (Hyvarinen 1999), symmetric, g = tanh, on whitened Z (n x k):
 * the unmixing W (k x k, rows = directions), started from a random
 * orthogonal matrix of rng. */
int eval_audit_fastica(int n, int k, const double *Z, int max_iter, o3m_rng *rng, double *W) {
  size_t kk = (size_t)k * k;
  double *Y = malloc(sizeof *Y * (size_t)n * k), *Wn = malloc(sizeof *Wn * kk);
  double *M = malloc(sizeof *M * kk), *E = malloc(sizeof *E * kk), *tmp = malloc(sizeof *tmp * kk);
  double *w = malloc(sizeof *w * k), *gp = malloc(sizeof *gp * k);
  int rc = O3M_ENOMEM;
  if (!Y || !Wn || !M || !E || !tmp || !w || !gp) goto out;
  if ((rc = o3m_rng_gaussian(rng, W, (long)kk))) goto out;
  if ((rc = sym_decorrelate(k, W, M, E, w, tmp))) goto out;
  for (int it = 0; it < max_iter; it++) {
    o3m_gemm_nt(n, k, k, 1.0, Z, W, 0.0, Y); /* Y = Z W^T */
    memset(gp, 0, sizeof *gp * k);
    for (int i = 0; i < n; i++)
      for (int q = 0; q < k; q++) {
        double g = tanh(Y[(size_t)i * k + q]);
        Y[(size_t)i * k + q] = g;
        gp[q] += 1 - g * g;
      }
    o3m_gemm_tn(k, k, n, 1.0 / n, Y, Z, 0.0, Wn); /* E[g(y) z^T] */
    for (int q = 0; q < k; q++) o3m_axpy(k, -gp[q] / n, W + (size_t)q * k, Wn + (size_t)q * k);
    if ((rc = sym_decorrelate(k, Wn, M, E, w, tmp))) goto out;
    double lim = 0;
    for (int q = 0; q < k; q++) {
      double c = fabs(fabs(o3m_dot(k, Wn + (size_t)q * k, W + (size_t)q * k)) - 1);
      if (c > lim) lim = c;
    }
    memcpy(W, Wn, sizeof *W * kk);
    if (lim < 1e-7) break;
  }
  rc = O3M_OK;
out:
  free(Y);
  free(Wn);
  free(M);
  free(E);
  free(tmp);
  free(w);
  free(gp);
  return rc;
}

/* Scores recovered components against the truth: Tn is the standardized
 * truth (N x dj, constant columns flagged), R the components (N x k,
 * standardized here). With match, every column gets a distinct component
 * (greedy on |corr|, largest first); without, component c is column c.
 * corr[c] = |corr| (NaN for a constant column, 0 for one left without a
 * component). */
int eval_audit_score(int N, int dj, const double *Tn, const unsigned char *cflag, double *R,
                     int k, int match, double *corr) {
  eval_audit_standardize(N, k, R, NULL);
  double *C = malloc(sizeof *C * (size_t)dj * (k > 0 ? k : 1));
  unsigned char *used_c = calloc((size_t)dj, 1), *used_q = calloc((size_t)(k > 0 ? k : 1), 1);
  if (!C || !used_c || !used_q) {
    free(C);
    free(used_c);
    free(used_q);
    return O3M_ENOMEM;
  }
  if (k > 0) o3m_gemm_tn(dj, k, N, 1.0, Tn, R, 0.0, C);
  for (int c = 0; c < dj; c++) corr[c] = cflag[c] ? NAN : 0.0;
  if (!match) {
    for (int c = 0; c < dj && c < k; c++)
      if (!cflag[c]) corr[c] = fabs(C[(size_t)c * k + c]);
  } else {
    for (;;) {
      int bc = -1, bq = -1;
      double best = -1;
      for (int c = 0; c < dj; c++) {
        if (used_c[c] || cflag[c]) continue;
        for (int q = 0; q < k; q++)
          if (!used_q[q] && fabs(C[(size_t)c * k + q]) > best) {
            best = fabs(C[(size_t)c * k + q]);
            bc = c;
            bq = q;
          }
      }
      if (bc < 0) break;
      used_c[bc] = used_q[bq] = 1;
      corr[bc] = best > 1 ? 1 : best;
    }
  }
  free(C);
  free(used_c);
  free(used_q);
  return O3M_OK;
}
