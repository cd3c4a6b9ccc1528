/*
 * bl_dp_accountant: zCDP accounting of Gaussian releases
 * (bl_dp_accountant.h).
 */
#include "bl_dp_accountant.h"

#include <math.h>

static int check_eps_delta(double eps, double delta, o3m_err *e) {
  if (!(eps > 0) || !isfinite(eps))
    return o3m_err_set(e, O3M_EINVAL, "dp: epsilon must be positive and finite, got %g", eps);
  if (!(delta > 0 && delta < 1))
    return o3m_err_set(e, O3M_EINVAL, "dp: delta must be in (0, 1), got %g", delta);
  return 0;
}

double bl_dp_gauss_rho(double sens, double sigma) { return sens * sens / (2.0 * sigma * sigma); }

double bl_dp_zcdp_epsilon(double rho, double delta) {
  return rho + 2.0 * sqrt(rho * log(1.0 / delta));
}

int bl_dp_zcdp_rho_for(double eps, double delta, double *rho, o3m_err *e) {
  int rc = check_eps_delta(eps, delta, e);
  if (rc) return rc;
  /* eps = rho + 2 sqrt(rho L) is a quadratic in sqrt(rho):
   * sqrt(rho) = sqrt(L + eps) - sqrt(L). */
  double L = log(1.0 / delta);
  double s = sqrt(L + eps) - sqrt(L);
  *rho = s * s;
  return 0;
}

int bl_dp_sigma_for(double eps, double delta, long T, double sens, double *sigma, o3m_err *e) {
  if (T < 1) return o3m_err_set(e, O3M_EINVAL, "dp: T must be at least 1, got %ld", T);
  if (!(sens > 0) || !isfinite(sens))
    return o3m_err_set(e, O3M_EINVAL, "dp: sensitivity must be positive, got %g", sens);
  double rho;
  int rc = bl_dp_zcdp_rho_for(eps, delta, &rho, e);
  if (rc) return rc;
  *sigma = sens / sqrt(2.0 * rho / (double)T);
  return 0;
}

double bl_dp_classic_sigma(double eps, double delta, double sens) {
  if (!(eps > 0 && eps < 1) || !(delta > 0 && delta < 1) || !(sens > 0)) return NAN;
  return sens * sqrt(2.0 * log(1.25 / delta)) / eps;
}

void bl_dp_accountant_init(bl_dp_accountant *a) {
  a->rho = 0;
  a->steps = 0;
}

int bl_dp_accountant_add(bl_dp_accountant *a, double sens, double sigma, o3m_err *e) {
  if (!(sens >= 0) || !isfinite(sens))
    return o3m_err_set(e, O3M_EINVAL, "dp: sensitivity must be non-negative, got %g", sens);
  if (!(sigma > 0) || !isfinite(sigma))
    return o3m_err_set(e, O3M_EINVAL, "dp: sigma must be positive, got %g", sigma);
  a->rho += bl_dp_gauss_rho(sens, sigma);
  a->steps++;
  return 0;
}

double bl_dp_accountant_epsilon(const bl_dp_accountant *a, double delta) {
  return a->steps ? bl_dp_zcdp_epsilon(a->rho, delta) : 0.0;
}
