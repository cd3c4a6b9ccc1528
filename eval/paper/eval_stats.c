/* eval_stats.c -- see eval_stats.h. */
#include "eval_stats.h"

#include <math.h>

/* A(t | df) = P(|T| <= t) for t >= 0, from theta = atan(t / sqrt(df)):
 *   df odd:  A = (2 / pi) (theta + sin cos [1 + 2/3 cos^2 + 2.4/(3.5) cos^4
 *            + ... up to cos^(df-3)])                     (df = 1: 2 theta / pi)
 *   df even: A = sin [1 + 1/2 cos^2 + 1.3/(2.4) cos^4 + ... up to cos^(df-2)]
 * Every term is positive, so the sum has no cancellation. */
static double t_abs_cdf(double t, int df) {
  double th = atan(t / sqrt((double)df)), s = sin(th), c = cos(th), c2 = c * c;
  double sum = 1.0, term = 1.0;
  if (df % 2) {
    if (df == 1) return 2.0 * th / M_PI;
    for (int k = 2; k <= df - 3; k += 2) {
      term *= c2 * k / (k + 1);
      sum += term;
    }
    return 2.0 / M_PI * (th + s * c * sum);
  }
  for (int k = 1; k <= df - 3; k += 2) {
    term *= c2 * k / (k + 1);
    sum += term;
  }
  return s * sum;
}

double eval_stats_t_cdf(double t, int df) {
  if (df < 1 || isnan(t)) return NAN;
  if (isinf(t)) return t > 0 ? 1.0 : 0.0;
  double a = t_abs_cdf(fabs(t), df);
  return t >= 0 ? 0.5 + 0.5 * a : 0.5 - 0.5 * a;
}

double eval_stats_t_quantile(double p, int df) {
  if (df < 1 || !(p >= 0.5 && p < 1.0)) return NAN;
  if (p == 0.5) return 0.0;
  /* Bracket, then bisect until the interval stops shrinking. */
  double lo = 0.0, hi = 2.0;
  while (eval_stats_t_cdf(hi, df) < p) {
    lo = hi;
    hi *= 2.0;
    if (hi > 1e300) return INFINITY;
  }
  for (int i = 0; i < 2000; i++) {
    double mid = 0.5 * (lo + hi);
    if (mid <= lo || mid >= hi) break;
    if (eval_stats_t_cdf(mid, df) < p) lo = mid;
    else hi = mid;
  }
  return 0.5 * (lo + hi);
}

double eval_stats_band95(double sd, int n) {
  if (n < 2) return 0.0;
  return eval_stats_t_quantile(0.975, n - 1) * sd / sqrt((double)n);
}

void eval_stats_mean_sd(const double *x, int n, size_t stride, double *mean, double *sd) {
  double m = 0;
  for (int i = 0; i < n; i++) m += x[(size_t)i * stride];
  m /= n;
  double ss = 0;
  for (int i = 0; i < n; i++) {
    double dlt = x[(size_t)i * stride] - m;
    ss += dlt * dlt;
  }
  *mean = m;
  *sd = n > 1 ? sqrt(ss / (n - 1)) : 0.0;
}
