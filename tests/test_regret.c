/* test_regret.c -- the synthetic regret experiment (eval_regret.h).
 *
 * Small runs (d 10, K 5, T 300, 2 seeds, five parties of 2 columns) check
 * what the experiment exists to show: the federated LinUCB learner makes the
 * central learner's decisions in every round and so has exactly its regret
 * and its ||theta||; disjoint LinTS agrees draw by draw; shared LinTS samples
 * from the same posterior; the active participant alone (2 of 10 columns) is
 * clearly worse on every seed; every variant sees the same stream; the CSV
 * has the documented header and rows; bad configurations are refused; with
 * whitening parties, federated still equals central on the whitened contexts. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_dir.h"
#include "eval_masker.h"
#include "eval_plot.h"
#include "eval_regret.h"

static eval_regret_config small_config(void) {
  eval_regret_config c;
  eval_regret_config_default(&c);
  c.d = 10;
  c.K = 5;
  c.T = 300;
  c.n_seeds = 2;
  cr_assert_eq(o3m_partition_parse(&c.part, "2,2,2,2,2", NULL), O3M_OK);
  c.algos = EVAL_REGRET_LINUCB;
  c.models = EVAL_REGRET_SHARED;
  return c;
}

static eval_regret *run(const eval_regret_config *c) {
  eval_regret *r = NULL;
  o3m_err e;
  o3m_err_clear(&e);
  int rc = eval_regret_run(&r, c, &e);
  cr_assert_eq(rc, O3M_OK, "eval_regret_run: %s", o3m_err_message(&e));
  cr_assert_not_null(r);
  return r;
}

Test(regret, linucb_federated_equals_central) {
  eval_regret_config c = small_config();
  eval_regret *r = run(&c);
  eval_regret_summary s;
  cr_assert_eq(eval_regret_summary_of(r, O3M_ALGO_LINUCB, O3M_MODEL_SHARED, &s), O3M_OK);
  cr_assert_eq(s.agreement, 1.0, "agreement %.6f, expected 1", s.agreement);
  for (int k = 0; k < c.n_seeds; k++) {
    double fc = eval_regret_final(r, O3M_ALGO_LINUCB, O3M_MODEL_SHARED, EVAL_REGRET_CENTRAL, k);
    double ff = eval_regret_final(r, O3M_ALGO_LINUCB, O3M_MODEL_SHARED, EVAL_REGRET_FEDERATED, k);
    cr_assert(fc > 0, "seed %d: central regret %g", k, fc);
    cr_assert_eq(ff, fc, "seed %d: federated regret %.17g, central %.17g", k, ff, fc);
  }
  cr_assert_eq(s.final_mean[EVAL_REGRET_FEDERATED], s.final_mean[EVAL_REGRET_CENTRAL]);
  cr_assert_lt(s.max_theta_diff, 1e-9, "| ||theta_fed|| - ||theta_c|| | up to %g",
               s.max_theta_diff);
  cr_assert_lt(s.max_mean_diff, 1e-9, "estimated reward differs by %g", s.max_mean_diff);
  cr_assert_lt(s.max_width_diff, 1e-9, "width differs by %g", s.max_width_diff);
  eval_regret_destroy(r);
}

/* With parties whitening their columns, federated LinUCB
 * still decides as the central learner on the whitened contexts in every
 * round; the whitening does change what is learned (another regret), and a
 * bad party list is refused. */
Test(regret, whitened_federated_equals_whitened_central) {
  eval_regret_config c = small_config();
  eval_regret *plain = run(&c);
  c.whiten = "0,2,4";
  eval_regret *r = run(&c);
  eval_regret_summary s;
  cr_assert_eq(eval_regret_summary_of(r, O3M_ALGO_LINUCB, O3M_MODEL_SHARED, &s), O3M_OK);
  cr_assert_eq(s.agreement, 1.0, "agreement %.6f, expected 1", s.agreement);
  int changed = 0;
  for (int k = 0; k < c.n_seeds; k++) {
    double fc = eval_regret_final(r, O3M_ALGO_LINUCB, O3M_MODEL_SHARED, EVAL_REGRET_CENTRAL, k);
    double ff = eval_regret_final(r, O3M_ALGO_LINUCB, O3M_MODEL_SHARED, EVAL_REGRET_FEDERATED, k);
    cr_assert_eq(ff, fc, "seed %d: federated regret %.17g, central %.17g", k, ff, fc);
    changed += fc != eval_regret_final(plain, O3M_ALGO_LINUCB, O3M_MODEL_SHARED,
                                       EVAL_REGRET_CENTRAL, k);
  }
  cr_assert_gt(changed, 0, "whitening changed no seed's regret: was it applied?");
  eval_regret_destroy(r);
  eval_regret_destroy(plain);
  eval_regret *bad = NULL;
  o3m_err e;
  c.whiten = "5";
  cr_assert_eq(eval_regret_run(&bad, &c, &e), O3M_EINVAL);
  cr_assert(strstr(e.msg, "--whiten"), "%s", e.msg);
  c.whiten = "1,x";
  cr_assert_eq(eval_regret_run(&bad, &c, &e), O3M_EINVAL);
}

/* The default above is secure aggregation (fixed point and real pairwise
 * masks, as the daemons); the paper's per-party sums agree as well. */
Test(regret, linucb_federated_equals_central_with_per_party_parts) {
  eval_regret_config c = small_config();
  c.aggregation = EVAL_AGG_PER_PARTY;
  eval_regret *r = run(&c);
  eval_regret_summary s;
  cr_assert_eq(eval_regret_summary_of(r, O3M_ALGO_LINUCB, O3M_MODEL_SHARED, &s), O3M_OK);
  cr_assert_eq(s.agreement, 1.0, "agreement %.6f, expected 1", s.agreement);
  cr_assert_lt(s.max_theta_diff, 1e-9, "theta norm differs by %g", s.max_theta_diff);
  eval_regret_destroy(r);
}

Test(regret, partial_local_worse_than_central_on_every_seed) {
  eval_regret_config c = small_config();
  c.n_seeds = 4; /* more than the 2 of the brief: the margin is large on each */
  c.algos = EVAL_REGRET_LINUCB | EVAL_REGRET_LINTS;
  eval_regret *r = run(&c);
  for (int a = 0; a < 2; a++) {
    o3m_algo algo = a ? O3M_ALGO_LINTS : O3M_ALGO_LINUCB;
    for (int k = 0; k < c.n_seeds; k++) {
      double fc = eval_regret_final(r, algo, O3M_MODEL_SHARED, EVAL_REGRET_CENTRAL, k);
      double fl = eval_regret_final(r, algo, O3M_MODEL_SHARED, EVAL_REGRET_LOCAL, k);
      /* Over seeds 1..39 the ratio is at least 4.7; 2 leaves room. */
      cr_assert_gt(fl, 2 * fc, "%s seed %d: local regret %g, central %g", o3m_algo_name(algo),
                   k + 1, fl, fc);
    }
  }
  eval_regret_destroy(r);
}

/* The outage variant: a passive party missing in a window of
 * rounds costs regret between always federated and the AP alone; missing
 * over the whole run it is the AP alone, decision for decision; a window
 * outside the run's rounds changes nothing. */
Test(regret, outage_between_federated_and_local) {
  eval_regret_config c = small_config();
  c.n_ratios = 0;
  c.T = 600;
  c.n_seeds = 3;
  c.outage_a = 201;
  c.outage_b = 401;
  eval_regret *r = run(&c);
  int v = eval_regret_outage_variant(&c);
  cr_assert_eq(v, 3);
  for (int k = 0; k < c.n_seeds; k++) {
    double ff = eval_regret_final(r, O3M_ALGO_LINUCB, O3M_MODEL_SHARED, EVAL_REGRET_FEDERATED, k);
    double fo = eval_regret_final(r, O3M_ALGO_LINUCB, O3M_MODEL_SHARED, v, k);
    double fl = eval_regret_final(r, O3M_ALGO_LINUCB, O3M_MODEL_SHARED, EVAL_REGRET_LOCAL, k);
    cr_assert(ff < fo && fo < fl, "seed %d: federated %g, outage %g, local %g", k + 1, ff, fo,
              fl);
  }
  eval_regret_destroy(r);
  c.outage_a = 1;
  c.outage_b = c.T + 1;
  r = run(&c);
  for (int k = 0; k < c.n_seeds; k++)
    cr_assert_eq(eval_regret_final(r, O3M_ALGO_LINUCB, O3M_MODEL_SHARED, v, k),
                 eval_regret_final(r, O3M_ALGO_LINUCB, O3M_MODEL_SHARED, EVAL_REGRET_LOCAL, k));
  eval_regret_destroy(r);
  c.outage_a = c.T + 2;
  c.outage_b = c.T + 3;
  eval_regret *bad = NULL;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert_eq(eval_regret_run(&bad, &c, &e), O3M_EINVAL);
  cr_assert(strstr(o3m_err_message(&e), "--outage"), "%s", o3m_err_message(&e));
  cr_assert_null(bad);
}

Test(regret, dp_costs_regret_that_o3m_does_not) {
  /* Small epsilon (1 over the T rounds): the passive parties' columns drown
   * in noise and DP's regret is far above federated's, which equals central's
   * on every seed; a huge epsilon comes back close to central. */
  eval_regret_config c = small_config();
  c.n_ratios = 0;
  c.n_dp = 2;
  c.dp_eps[0] = 1.0;
  c.dp_eps[1] = 1e9;
  eval_regret *r = run(&c);
  int v_small = eval_regret_dp_variant(&c, 0), v_huge = eval_regret_dp_variant(&c, 1);
  cr_assert_eq(v_small, EVAL_REGRET_RATIO0);
  eval_regret_summary s;
  cr_assert_eq(eval_regret_summary_of(r, O3M_ALGO_LINUCB, O3M_MODEL_SHARED, &s), O3M_OK);
  cr_assert_eq(s.n_variants, 5);
  cr_assert_eq(s.cols[v_small], c.d);
  for (int k = 0; k < c.n_seeds; k++) {
    double fc = eval_regret_final(r, O3M_ALGO_LINUCB, O3M_MODEL_SHARED, EVAL_REGRET_CENTRAL, k);
    double ff = eval_regret_final(r, O3M_ALGO_LINUCB, O3M_MODEL_SHARED, EVAL_REGRET_FEDERATED, k);
    double fd = eval_regret_final(r, O3M_ALGO_LINUCB, O3M_MODEL_SHARED, v_small, k);
    double fh = eval_regret_final(r, O3M_ALGO_LINUCB, O3M_MODEL_SHARED, v_huge, k);
    cr_assert_float_eq(ff, fc, 1e-9, "seed %d: federated %g, central %g", k + 1, ff, fc);
    cr_assert_gt(fd, 2 * ff, "seed %d: DP eps 1 regret %g, O3M %g", k + 1, fd, ff);
    cr_assert_lt(fh, 1.5 * fc, "seed %d: DP eps 1e9 regret %g, central %g", k + 1, fh, fc);
  }
  eval_regret_destroy(r);
  /* A non-positive epsilon is refused. */
  c.dp_eps[0] = 0;
  eval_regret *bad = NULL;
  o3m_err e;
  cr_assert_eq(eval_regret_run(&bad, &c, &e), O3M_EINVAL);
  cr_assert_null(bad);
}

Test(regret, every_variant_sees_the_same_stream) {
  /* local = party 1's 2 columns and ratio 0.2 = ceil(2) columns are the same
   * learner on the same data: their regrets must be identical, seed by seed. */
  eval_regret_config c = small_config();
  c.n_ratios = 1;
  c.ratios[0] = 0.2;
  eval_regret *r = run(&c);
  eval_regret_summary s;
  cr_assert_eq(eval_regret_summary_of(r, O3M_ALGO_LINUCB, O3M_MODEL_SHARED, &s), O3M_OK);
  cr_assert_eq(s.cols[EVAL_REGRET_LOCAL], 2);
  cr_assert_eq(s.cols[EVAL_REGRET_RATIO0], 2);
  for (int k = 0; k < c.n_seeds; k++) {
    double fl = eval_regret_final(r, O3M_ALGO_LINUCB, O3M_MODEL_SHARED, EVAL_REGRET_LOCAL, k);
    double fr = eval_regret_final(r, O3M_ALGO_LINUCB, O3M_MODEL_SHARED, EVAL_REGRET_RATIO0, k);
    cr_assert_eq(fl, fr, "seed %d: local %.17g, ratio 0.2 %.17g", k, fl, fr);
  }
  /* A different seed is a different stream. */
  double f0 = eval_regret_final(r, O3M_ALGO_LINUCB, O3M_MODEL_SHARED, EVAL_REGRET_CENTRAL, 0);
  double f1 = eval_regret_final(r, O3M_ALGO_LINUCB, O3M_MODEL_SHARED, EVAL_REGRET_CENTRAL, 1);
  cr_assert_neq(f0, f1, "seeds 1 and 2 gave the same regret %.17g", f0);
  eval_regret_destroy(r);
}

Test(regret, disjoint_lints_agrees_draw_by_draw) {
  eval_regret_config c = small_config();
  c.algos = EVAL_REGRET_LINTS;
  c.models = EVAL_REGRET_DISJOINT;
  eval_regret *r = run(&c);
  eval_regret_summary s;
  cr_assert_eq(eval_regret_summary_of(r, O3M_ALGO_LINTS, O3M_MODEL_DISJOINT, &s), O3M_OK);
  cr_assert_eq(s.agreement, 1.0, "agreement %.6f, expected 1", s.agreement);
  cr_assert_eq(s.final_mean[EVAL_REGRET_FEDERATED], s.final_mean[EVAL_REGRET_CENTRAL]);
  cr_assert_lt(s.max_theta_diff, 1e-9, "theta norm differs by %g", s.max_theta_diff);
  cr_assert_eq(eval_regret_summary_of(r, O3M_ALGO_LINUCB, O3M_MODEL_SHARED, &s), O3M_ENOTFOUND);
  eval_regret_destroy(r);
}

Test(regret, shared_lints_same_posterior) {
  /* Draws differ, so decisions may differ; the learner with the central's
   * history must have the central's mean, width and ||theta||. */
  eval_regret_config c = small_config();
  c.algos = EVAL_REGRET_LINTS;
  eval_regret *r = run(&c);
  eval_regret_summary s;
  cr_assert_eq(eval_regret_summary_of(r, O3M_ALGO_LINTS, O3M_MODEL_SHARED, &s), O3M_OK);
  cr_assert_lt(s.max_mean_diff, 1e-9, "estimated reward differs by %g", s.max_mean_diff);
  cr_assert_lt(s.max_width_diff, 1e-9, "width differs by %g", s.max_width_diff);
  cr_assert_lt(s.max_theta_diff_same, 1e-9, "theta norm differs by %g", s.max_theta_diff_same);
  cr_assert(s.agreement > 0 && s.agreement <= 1, "agreement %g", s.agreement);
  eval_regret_destroy(r);
}

/* Reads a whole small file into a NUL-terminated buffer. */
static char *slurp(const char *path) {
  FILE *f = fopen(path, "r");
  cr_assert_not_null(f, "cannot open %s", path);
  char *buf = malloc(1 << 20);
  cr_assert_not_null(buf);
  size_t n = fread(buf, 1, (1 << 20) - 1, f);
  buf[n] = 0;
  fclose(f);
  return buf;
}

static char tmpdir[] = "/tmp/test_regret_XXXXXX";

Test(regret, csv_header_and_rows) {
  eval_regret_config c = small_config();
  c.every = 7; /* 300 = 42 * 7 + 6: 42 kept steps and the last */
  eval_regret *r = run(&c);
  cr_assert_eq(eval_regret_n_steps(r), 43);
  cr_assert_not_null(mkdtemp(tmpdir));
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert_eq(eval_regret_write_csv(r, tmpdir, &e), O3M_OK, "%s", o3m_err_message(&e));
  char path[512];
  snprintf(path, sizeof path, "%s/regret_linucb_shared.csv", tmpdir);
  char *buf = slurp(path);
  const char *hdr =
      "t,central_mean,central_lo,central_hi,federated_mean,federated_lo,federated_hi,"
      "local_mean,local_lo,local_hi,ratio0.2_mean,ratio0.2_lo,ratio0.2_hi,ratio0.8_mean,"
      "ratio0.8_lo,ratio0.8_hi,theta_norm_diff_mean,theta_norm_diff_maxabs,"
      "theta_norm_diff_same_history_maxabs\n";
  cr_assert_eq(strncmp(buf, hdr, strlen(hdr)), 0, "header:\n%.400s\nexpected:\n%s", buf, hdr);
  int lines = 0;
  const char *last = buf;
  for (char *p = buf; *p; p++)
    if (*p == '\n') {
      lines++;
      if (p[1]) last = p + 1;
    }
  cr_assert_eq(lines, 1 + 43, "%d lines", lines);
  cr_assert_eq(strncmp(buf + strlen(hdr), "7,", 2), 0, "first row: %.40s", buf + strlen(hdr));
  cr_assert_eq(strncmp(last, "300,", 4), 0, "last row: %.40s", last);
  /* Every row has 19 fields, and the band brackets the mean. */
  double t, m, lo, hi;
  cr_assert_eq(sscanf(last, "%lf,%lf,%lf,%lf", &t, &m, &lo, &hi), 4);
  cr_assert(lo <= m && m <= hi, "band %g <= %g <= %g", lo, m, hi);
  /* The band is the t band: with 2 seeds mean +- t_{0.975,1} sd / sqrt(2),
   * t = 12.706 (a 1.96 band would be 6.5 times narrower). */
  double r0 = eval_regret_final(r, O3M_ALGO_LINUCB, O3M_MODEL_SHARED, EVAL_REGRET_CENTRAL, 0);
  double r1 = eval_regret_final(r, O3M_ALGO_LINUCB, O3M_MODEL_SHARED, EVAL_REGRET_CENTRAL, 1);
  double sd = fabs(r0 - r1) / sqrt(2.0), half = 12.7062047361747 * sd / sqrt(2.0);
  cr_assert_gt(sd, 0.1, "the two seeds' regrets differ");
  cr_assert_float_eq(m, (r0 + r1) / 2, 1e-5);
  cr_assert_float_eq(hi - m, half, 2e-5, "half-width %.6f, expected %.6f", hi - m, half);
  cr_assert_float_eq(m - lo, half, 2e-5, "half-width %.6f, expected %.6f", m - lo, half);
  int commas = 0;
  for (const char *p = last; *p && *p != '\n'; p++) commas += *p == ',';
  cr_assert_eq(commas, 18);
  free(buf);
  eval_regret_destroy(r);
  test_dir_remove(tmpdir);
}

Test(regret, plots_written_when_gnuplot_exists) {
  if (system("command -v gnuplot >/dev/null 2>&1") != 0) cr_skip_test("gnuplot not installed");
  eval_regret_config c = small_config();
  c.algos = EVAL_REGRET_LINUCB | EVAL_REGRET_LINTS;
  eval_regret *r = run(&c);
  char dir[] = "/tmp/test_regret_plot_XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert_eq(eval_regret_write_csv(r, dir, &e), O3M_OK, "%s", o3m_err_message(&e));
  cr_assert_eq(eval_regret_plot(r, dir, EVAL_PLOT_PNG | EVAL_PLOT_PDF | EVAL_PLOT_SVG, NULL,
                                &e), O3M_OK, "%s", o3m_err_message(&e));
  static const char *stems[] = {"fig4a_shared", "fig4b_shared", "fig4c_shared",
                                "fig4d_shared", "fig6a_shared", "fig6b_shared"};
  static const char *exts[] = {"png", "pdf", "svg"};
  for (size_t i = 0; i < sizeof stems / sizeof stems[0]; i++)
    for (size_t x = 0; x < 3; x++) {
      char p[512];
      struct stat st;
      snprintf(p, sizeof p, "%s/%s.%s", dir, stems[i], exts[x]);
      cr_assert_eq(stat(p, &st), 0, "%s missing", p);
      cr_assert_gt(st.st_size, 1000, "%s is only %lld bytes", p, (long long)st.st_size);
    }
  /* Titles carry no figure numbers; the key names the t band; the
   * same-history series of Figure 4d has its own log-scale panel. */
  char gp[512];
  snprintf(gp, sizeof gp, "%s/regret_plots.gp", dir);
  char *script = slurp(gp);
  cr_assert_null(strstr(script, "Fig."), "a title names a figure number");
  cr_assert_not_null(strstr(script, "t_{0.975,1}"), "the key does not name the t band");
  cr_assert_not_null(strstr(script, "set multiplot layout 2,1"));
  cr_assert_not_null(strstr(script, "set logscale y"));
  free(script);
  eval_regret_destroy(r);
  test_dir_remove(dir);
}

Test(regret, rejects_bad_configurations) {
  eval_regret *r = (eval_regret *)1;
  o3m_err e;
  eval_regret_config c = small_config();
  cr_assert_eq(o3m_partition_parse(&c.part, "2,2,2,2", NULL), O3M_OK);
  o3m_err_clear(&e);
  cr_assert_eq(eval_regret_run(&r, &c, &e), O3M_EINVAL);
  cr_assert_null(r);
  cr_assert_not_null(strstr(e.msg, "--parties"), "message: %s", e.msg);
  c = small_config();
  c.n_ratios = 1;
  c.ratios[0] = 0;
  o3m_err_clear(&e);
  cr_assert_eq(eval_regret_run(&r, &c, &e), O3M_EINVAL);
  cr_assert_not_null(strstr(e.msg, "--partial-ratios"), "message: %s", e.msg);
  c = small_config();
  c.algos = 0;
  cr_assert_eq(eval_regret_run(&r, &c, NULL), O3M_EINVAL);
}

Test(regret, ratio_columns) {
  cr_assert_eq(eval_regret_ratio_cols(0.2, 100), 20);
  cr_assert_eq(eval_regret_ratio_cols(0.7, 100), 70); /* 0.7 * 100 = 70.00000000000001 */
  cr_assert_eq(eval_regret_ratio_cols(0.8, 100), 80);
  cr_assert_eq(eval_regret_ratio_cols(0.25, 10), 3);
  cr_assert_eq(eval_regret_ratio_cols(0.01, 10), 1);
  cr_assert_eq(eval_regret_ratio_cols(1.0, 10), 10);
}
