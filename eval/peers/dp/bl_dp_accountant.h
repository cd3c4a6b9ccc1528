/*
 * bl_dp_accountant: privacy accounting for the Gaussian mechanism, by
 * zero-concentrated differential privacy (zCDP, Bun and Steinke 2016).
 *
 * Why zCDP: the DP baseline releases a Gaussian-noised contribution every
 * round, T times. Under zCDP the Gaussian mechanism with L2 sensitivity s
 * and noise sigma is rho-zCDP with rho = s^2 / (2 sigma^2) (their
 * Proposition 1.6), rho adds up exactly over rounds (Lemma 1.7), and
 * rho-zCDP implies (rho + 2 sqrt(rho ln(1/delta)), delta)-DP for every delta
 * in (0, 1) (Proposition 1.3). Basic composition (epsilon and delta add up)
 * would need noise growing like T instead of sqrt(T); the advanced
 * composition theorem is looser than zCDP for the Gaussian mechanism.
 * The conversion used is Proposition 1.3 (simple, slightly loose: the
 * tighter conversion of Canonne, Kamath and Steinke 2020 is not used).
 *
 * The accountant is a plain value (fields readable by callers, written
 * only through the functions below).
 */
#ifndef BL_DP_ACCOUNTANT_H
#define BL_DP_ACCOUNTANT_H

#include "o3m_error.h"

typedef struct bl_dp_accountant {
  double rho;  /* total zCDP so far */
  long steps;  /* releases accounted */
} bl_dp_accountant;

/* rho of one Gaussian release: sens^2 / (2 sigma^2). */
double bl_dp_gauss_rho(double sens, double sigma);

/* The (epsilon, delta)-DP that rho-zCDP implies at delta:
 * rho + 2 sqrt(rho ln(1/delta)). */
double bl_dp_zcdp_epsilon(double rho, double delta);

/* The largest rho whose bl_dp_zcdp_epsilon at delta is eps:
 * (sqrt(ln(1/delta) + eps) - sqrt(ln(1/delta)))^2. O3M_EINVAL unless
 * eps > 0 and 0 < delta < 1 (*rho unchanged). */
int bl_dp_zcdp_rho_for(double eps, double delta, double *rho, o3m_err *e);

/* The per-round sigma of a Gaussian mechanism with L2 sensitivity sens run
 * T times so that the whole run is (eps, delta)-DP by zCDP composition:
 * sigma = sens / sqrt(2 rho / T) with rho from bl_dp_zcdp_rho_for.
 * O3M_EINVAL for eps <= 0, delta outside (0, 1), T < 1 or sens <= 0. */
int bl_dp_sigma_for(double eps, double delta, long T, double sens, double *sigma, o3m_err *e);

/* The classic calibration of one release (Dwork and Roth 2014, Theorem
 * A.1): sigma = sens sqrt(2 ln(1.25/delta)) / eps, valid for eps < 1; given
 * for comparison with the zCDP figure. NAN outside its range. */
double bl_dp_classic_sigma(double eps, double delta, double sens);

/* Starts an empty account. */
void bl_dp_accountant_init(bl_dp_accountant *a);
/* Accounts one Gaussian release with sensitivity sens and noise sigma.
 * O3M_EINVAL for sens < 0 or sigma <= 0 (a is unchanged). */
int bl_dp_accountant_add(bl_dp_accountant *a, double sens, double sigma, o3m_err *e);
/* The epsilon spent so far at delta (0 before any release). */
double bl_dp_accountant_epsilon(const bl_dp_accountant *a, double delta);

#endif
