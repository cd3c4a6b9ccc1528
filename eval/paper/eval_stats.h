/* eval_stats.h -- small-sample statistics shared by the o3m-eval writers:
 * Student's t quantile for confidence bands over a few seeds, and mean and
 * sample standard deviation.
 *
 * With n = 5 seeds a 95% band is mean +- t_{0.975,4} sd / sqrt(n), and
 * t_{0.975,4} = 2.776, not the normal 1.96 (which would claim 95% for what is
 * an 88% band). The quantile is computed, not tabulated: the t distribution's
 * CDF has a closed form for an integer number of degrees of freedom
 * (Abramowitz and Stegun 26.7.3 and 26.7.4, a finite trigonometric series),
 * which is inverted by bisection to full double precision. Pure functions:
 * no state, nothing allocated. */
#ifndef EVAL_STATS_H
#define EVAL_STATS_H

#include <stddef.h>

/* P(T <= t) for Student's t with df >= 1 degrees of freedom; NAN for
 * df < 1 or a NaN t. Exact up to rounding (a series of about df / 2 terms). */
double eval_stats_t_cdf(double t, int df);

/* The quantile q with P(T <= q) = p, for p in [0.5, 1) and df >= 1 (the
 * upper quantiles a two-sided band uses; for p < 0.5 use -quantile(1 - p)).
 * NAN outside that range. eval_stats_t_quantile(0.975, 4) = 2.7764451. */
double eval_stats_t_quantile(double p, int df);

/* The half-width of the two-sided 95% band of a mean of n values with sample
 * standard deviation sd: t_{0.975,n-1} sd / sqrt(n). 0 for n < 2 (one seed
 * has no spread to show). */
double eval_stats_band95(double sd, int n);

/* Mean and sample standard deviation (n - 1 in the denominator; 0 for
 * n = 1) of n >= 1 values spaced stride apart. */
void eval_stats_mean_sd(const double *x, int n, size_t stride, double *mean, double *sd);

#endif
