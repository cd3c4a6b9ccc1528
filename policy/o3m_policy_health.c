/* o3m_policy_health.c -- the policy's numerical health check and the
 * refactorization that repairs what it finds (contracts in o3m_policy.h).
 *
 * The check reads every model's exact statistics (Lambda, u), its factor and
 * theta, and compares them on a fixed probe vector in O(d^2) per model; it
 * writes only workspaces. The refactorization recomputes factor and theta
 * from Lambda and u after the same soundness test of the statistics, so
 * damaged statistics are never made to look healthy. */
#include "o3m_policy.h"
#include "o3m_alloc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "o3m_blas.h"
#include "o3m_policy_impl.h"

/* out = Lambda_m v for the whole Lambda (stored part plus held rows),
 * without flushing: Lambda v + R^T (R v). */
static void lambda_apply(const o3m_policy *p, int m, const double *v, double *out) {
  int d = p->d, n = p->n_held[m];
  o3m_symv(d, 1.0, model_mat(p->lambda_m, p, m), v, 0.0, out);
  if (n > 0) {
    double t[LAMBDA_BLOCK];
    const double *R = held_rows(p, m);
    o3m_gemv(n, d, 1.0, R, v, 0.0, t);
    o3m_gemv_t(n, d, 1.0, R, t, 1.0, out);
  }
}

static int all_finite(const double *a, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!isfinite(a[i])) return 0;
  return 1;
}

static int upper_finite(int d, const double *A) {
  for (int i = 0; i < d; i++)
    if (!all_finite(A + (size_t)i * d + i, (size_t)(d - i))) return 0;
  return 1;
}

static int tri_finite(o3m_uplo t, int d, const double *A) {
  if (t == O3M_UPPER) return upper_finite(d, A);
  for (int i = 0; i < d; i++)
    if (!all_finite(A + (size_t)i * d, (size_t)i + 1)) return 0;
  return 1;
}

/* The worse of two findings: ECORRUPT > ENONFINITE > ENOTPD > OK. */
static int worse(int a, int b) {
  static const int order[] = {O3M_OK, O3M_ENOTPD, O3M_ENONFINITE, O3M_ECORRUPT};
  int ia = 0, ib = 0;
  for (int i = 0; i < 4; i++) {
    if (order[i] == a) ia = i;
    if (order[i] == b) ib = i;
  }
  return ia >= ib ? a : b;
}

/* Whether model m's exact statistics are sound: Lambda (stored part and
 * held rows) and u finite, and every diagonal entry of the stored Lambda at
 * least lambda (both hold by construction: sums of nonnegative terms; the
 * held rows only add to the diagonal). Returns the phrase naming the first
 * problem, or NULL. */
static const char *stats_problem(const o3m_policy *p, int m) {
  int d = p->d;
  const double *L = model_mat(p->lambda_m, p, m);
  if (!upper_finite(d, L) || !all_finite(held_rows(p, m), (size_t)p->n_held[m] * d) ||
      !all_finite(p->u + (size_t)m * d, (size_t)d))
    return "Lambda or u is not finite";
  for (int i = 0; i < d; i++)
    if (!(L[(size_t)i * d + i] >= p->cfg.lambda))
      return "a diagonal entry of Lambda is below lambda";
  return NULL;
}

/* Checks model m (see o3m_policy_health_check). scratch, when not NULL,
 * holds d x d doubles for the deep check. Writes the relative residuals'
 * maximum into *resid and a phrase into *what. */
static int check_model(o3m_policy *p, int m, double *scratch, double *resid, const char **what) {
  int d = p->d;
  const double *L = model_mat(p->lambda_m, p, m);
  fac_view f = fac_of(p, m);
  const double *F = f.a; /* U for the Cholesky checks below: always upper */
  const double *u = p->u + (size_t)m * d, *th = p->theta + (size_t)m * d;
  *resid = 0;
  const char *bad = stats_problem(p, m);
  if (bad) {
    *what = bad;
    return O3M_ECORRUPT;
  }
  if (scratch) {
    /* The whole Lambda, held rows included, in the scratch copy only: the
     * check must not move the state's flushes. */
    memcpy(scratch, L, sizeof(double) * (size_t)d * d);
    if (p->n_held[m] > 0) o3m_syrk_t(d, p->n_held[m], 1.0, held_rows(p, m), scratch);
    if (o3m_potrf_upper(d, scratch)) {
      *what = "Lambda is not positive definite";
      return O3M_ECORRUPT;
    }
  }
  if (!tri_finite(f.t, d, F) || !all_finite(th, (size_t)d)) {
    *what = p->use_chol ? "U or theta is not finite" : "Ainv or theta is not finite";
    return O3M_ENONFINITE;
  }
  for (int i = 0; i < d; i++)
    if (!(F[(size_t)i * d + i] > 0)) {
      *what = p->use_chol ? "a diagonal entry of U is not positive"
                          : "a diagonal entry of Ainv is not positive";
      return O3M_ENOTPD;
    }
  /* A fixed probe vector with entries of both signs and different sizes. */
  double *pr = p->W, *w = p->z, *lp = p->work;
  for (int i = 0; i < d; i++) pr[i] = (i % 2 ? -1.0 : 1.0) * (1.0 + (double)(i % 5) / 8.0);
  double rel;
  if (p->use_chol) {
    /* ||U^T (U p) - Lambda p|| / ||Lambda p||, U read as upper triangular */
    lambda_apply(p, m, pr, lp);
    for (int i = 0; i < d; i++) {
      const double *ui = F + (size_t)i * d;
      double s = 0;
      for (int j = i; j < d; j++) s += ui[j] * pr[j];
      w[i] = s;
    }
    double num = 0;
    for (int j = 0; j < d; j++) {
      double s = 0;
      for (int i = 0; i <= j; i++) s += F[(size_t)i * d + j] * w[i];
      num += (s - lp[j]) * (s - lp[j]);
    }
    rel = sqrt(num) / o3m_nrm2(d, lp);
  } else {
    /* ||Lambda (Ainv p) - p|| / ||p|| */
    o3m_symv_tri(f.t, d, 1.0, F, pr, 0.0, w);
    lambda_apply(p, m, w, lp);
    o3m_axpy(d, -1.0, pr, lp);
    rel = o3m_nrm2(d, lp) / o3m_nrm2(d, pr);
  }
  *resid = rel;
  if (!(rel <= O3M_POLICY_HEALTH_RTOL)) {
    *what = p->use_chol ? "U^T U disagrees with Lambda" : "Ainv is not the inverse of Lambda";
    return isfinite(rel) ? O3M_ENOTPD : O3M_ENONFINITE;
  }
  /* ||Lambda theta - u|| / max(||u||, ||Lambda theta||) */
  lambda_apply(p, m, th, lp);
  double scale = fmax(o3m_nrm2(d, u), o3m_nrm2(d, lp));
  o3m_axpy(d, -1.0, u, lp);
  rel = scale > 0 ? o3m_nrm2(d, lp) / scale : 0.0;
  if (rel > *resid) *resid = rel;
  if (!(rel <= O3M_POLICY_HEALTH_RTOL)) {
    *what = "theta is not Lambda^{-1} u";
    return isfinite(rel) ? O3M_ENOTPD : O3M_ENONFINITE;
  }
  return O3M_OK;
}

int o3m_policy_health_check(o3m_policy *p, int flags, o3m_policy_health *h) {
  o3m_policy_health tmp;
  if (!h) h = &tmp;
  h->model = -1;
  h->n_bad = 0;
  h->code = O3M_OK;
  h->what = "";
  h->max_residual = 0;
  double *scratch = NULL;
  if (flags & O3M_POLICY_HEALTH_DEEP) {
    scratch = o3m_malloc(sizeof(double) * (size_t)p->d * p->d);
    if (!scratch) return O3M_ENOMEM;
  }
  for (int m = 0; m < p->n_models; m++) {
    double resid;
    const char *what = "";
    int rc = check_model(p, m, scratch, &resid, &what);
    if (resid > h->max_residual || !isfinite(resid)) h->max_residual = resid;
    if (rc) {
      if (h->model < 0) {
        h->model = m;
        h->what = what;
      }
      h->n_bad++;
      h->code = worse(h->code, rc);
    }
  }
  o3m_free(scratch);
  return h->code;
}

int o3m_policy_refactor(o3m_policy *p, int model) {
  int lo = 0, hi = p->n_models;
  if (model != -1) {
    if (model < 0 || model >= p->n_models) return O3M_EINVAL;
    lo = model;
    hi = model + 1;
  }
  /* The same soundness conditions on Lambda and u as the health check:
   * refactorizing from damaged statistics would make the damage look
   * healthy. */
  for (int m = lo; m < hi; m++)
    if (stats_problem(p, m)) return O3M_ECORRUPT;
  p->kept_arm = -1;
  int rc = O3M_OK;
  for (int m = lo; m < hi; m++) {
    int r = o3m_policy__refactor(p, m);
    if (r) {
      rc = r;
      continue;
    }
    o3m_policy__update_theta(p, m);
  }
  return rc;
}
