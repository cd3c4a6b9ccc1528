/* p2b_privacy.c -- P2B's epsilon and delta scale (see p2b_privacy.h). */
#include "p2b_privacy.h"

#include <math.h>

int p2b_epsilon(double p, double eps_bar, double *eps, o3m_err *e) {
  if (!(p > 0.0 && p < 1.0))
    return o3m_err_set(e, O3M_EINVAL, "participation probability p = %g is not in (0, 1)", p);
  if (!(isfinite(eps_bar) && eps_bar >= 0.0))
    return o3m_err_set(e, O3M_EINVAL, "crowd-blending eps_bar = %g is not finite and >= 0",
                       eps_bar);
  /* The paper's equation (2). */
  *eps = log(p * ((2.0 - p) / (1.0 - p)) * exp(eps_bar) + (1.0 - p));
  return O3M_OK;
}

int p2b_delta_exponent(int l, double p, double *scale, o3m_err *e) {
  if (l < 1) return o3m_err_set(e, O3M_EINVAL, "crowd-blending threshold l = %d is below 1", l);
  if (!(p >= 0.0 && p < 1.0))
    return o3m_err_set(e, O3M_EINVAL, "participation probability p = %g is not in [0, 1)", p);
  *scale = (double)l * (1.0 - p) * (1.0 - p);
  return O3M_OK;
}
