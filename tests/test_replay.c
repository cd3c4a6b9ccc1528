/* test_replay.c -- Li et al.'s replay estimator and the replay subcommand.
 *
 * The central case is a six-event log (tests/data/eval/replay_tiny.txt,
 * news format) whose outcome is worked out by hand below. The other tests
 * check properties on generated Criteo data: federated LinUCB decides as
 * central does, one and two threads give identical numbers, the random
 * baseline matches about 1/K of the events, whitened parties still give
 * federated = central. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "eval_cmds.h"
#include "eval_criteo_prep.h"
#include "eval_reader.h"
#include "eval_replay.h"

#define FIX(name) O3M_SOURCE_DIR "/tests/data/eval/" name

static void config(eval_replay_config *c, const char *parties) {
  eval_replay_config_default(c);
  o3m_err e;
  cr_assert_eq(o3m_partition_parse(&c->part, parties, &e), 0, "%s", e.msg);
}

/* replay_tiny.txt: every event has the one-hot contexts x_a = e_a (d = K =
 * 10), so shared LinUCB with lambda = 1 has Lambda = I + diag(n), theta_a =
 * c_a / (1 + n_a) and score_a = c_a / (1 + n_a) + alpha / sqrt(1 + n_a)
 * (n_a matches and c_a clicks of arm a). With alpha = 1 (arms 0-based):
 *
 *   event  logged  reward  scores before                 central picks
 *   1      0       0       all 1 (tie -> lowest)          0  match  n0=1 c0=0
 *   2      1       1       s0 = .707, others 1            1  match  n1=1 c1=1
 *   3      1       1       s1 = .5 + .707 = 1.207         1  match  n1=2 c1=2
 *   4      0       1       s1 = .667 + .577 = 1.244       1  no match
 *   5      1       1       s1 = 1.244                     1  match  n1=3 c1=3
 *   6      2       1       s1 = .75 + .5 = 1.25           1  no match
 *
 * central: 4 matched, 3 clicks, CTR 0.75. With parties 1,9 the partial
 * learner sees column 0 only: arm 0's context is [1], every other arm's [0]
 * with score 0, so it always picks arm 0 and matches events 1 and 4: 2
 * matched, 1 click. The federated learner must equal central. */
Test(replay, tiny_log_worked_by_hand) {
  eval_reader *r;
  o3m_err e;
  cr_assert_eq(eval_reader_open_news(&r, FIX("replay_tiny.txt"), &e), 0, "%s", e.msg);
  eval_replay_config c;
  config(&c, "1,9");
  c.policy.alpha = 1.0;
  eval_replay_result res;
  cr_assert_eq(eval_replay_run(r, &c, &res, &e), 0, "%s", e.msg);
  eval_reader_destroy(r);
  cr_assert_eq(res.events, 6);
  cr_assert_eq(res.central.matched, 4);
  cr_assert_eq(res.central.clicks, 3.0);
  cr_assert_float_eq(eval_replay_ctr(&res.central), 0.75, 1e-15);
  cr_assert_eq(res.federated.matched, 4);
  cr_assert_eq(res.federated.clicks, 3.0);
  cr_assert_eq(res.agree, 6);
  cr_assert_eq(res.partial_d, 1);
  cr_assert_eq(res.partial.matched, 2);
  cr_assert_eq(res.partial.clicks, 1.0);
  cr_assert_eq(res.n_random, 5);
  for (int s = 0; s < 5; s++) cr_assert_leq(res.random[s].matched, 6);
}

Test(replay, tiny_log_two_threads_and_limit) {
  eval_reader *r;
  o3m_err e;
  cr_assert_eq(eval_reader_open_news(&r, FIX("replay_tiny.txt"), &e), 0);
  eval_replay_config c;
  config(&c, "1,9");
  c.policy.alpha = 1.0;
  c.threads = 2;
  c.limit = 3;
  eval_replay_result res;
  cr_assert_eq(eval_replay_run(r, &c, &res, &e), 0, "%s", e.msg);
  eval_reader_destroy(r);
  /* Events 1-3 only: central and federated match all three (2 clicks),
   * partial matches event 1. */
  cr_assert_eq(res.events, 3);
  cr_assert_eq(res.central.matched, 3);
  cr_assert_eq(res.central.clicks, 2.0);
  cr_assert_eq(res.federated.matched, 3);
  cr_assert_eq(res.partial.matched, 1);
  cr_assert_eq(res.agree, 3);
}

Test(replay, relative_ctr_and_spread) {
  eval_replay_result res;
  memset(&res, 0, sizeof res);
  res.n_random = 5;
  const double clicks[5] = {1, 2, 1, 2, 4};
  for (int s = 0; s < 5; s++) {
    res.random[s].matched = 10;
    res.random[s].clicks = clicks[s];
  }
  /* CTR_random = 0.1 0.2 0.1 0.2 0.4, mean 0.2; the policy's CTR is 0.4:
   * rel = 2, per seed 4 2 4 2 1 (mean 2.6, sample std sqrt(7.2 / 4)). */
  eval_replay_tally t = {10, 4};
  eval_replay_rel rel;
  eval_replay_relative(&res, &t, &rel);
  cr_assert_float_eq(rel.rel, 2.0, 1e-12);
  cr_assert_float_eq(rel.mean, 2.6, 1e-12);
  cr_assert_float_eq(rel.std, sqrt(1.8), 1e-12);
  cr_assert_float_eq(rel.min, 1.0, 1e-12);
  cr_assert_float_eq(rel.max, 4.0, 1e-12);
  /* Nothing matched: undefined, not 0. */
  eval_replay_tally none = {0, 0};
  eval_replay_relative(&res, &none, &rel);
  cr_assert(isnan(rel.rel) && isnan(rel.min));
  /* A random baseline without clicks: undefined. */
  for (int s = 0; s < 5; s++) res.random[s].clicks = 0;
  eval_replay_relative(&res, &t, &rel);
  cr_assert(isnan(rel.rel));
}

Test(replay, partition_must_cover_the_columns) {
  eval_reader *r;
  o3m_err e;
  cr_assert_eq(eval_reader_open_news(&r, FIX("replay_tiny.txt"), &e), 0);
  eval_replay_config c;
  config(&c, "5,4");
  eval_replay_result res;
  cr_assert_eq(eval_replay_run(r, &c, &res, &e), O3M_EDIM);
  cr_assert(strstr(e.msg, "covers 9 columns, the data has 10") != NULL, "%s", e.msg);
  eval_reader_destroy(r);
}

Test(replay, reader_error_stops_the_pass_naming_the_line) {
  char path[64];
  strcpy(path, "/tmp/o3m_test_replay_XXXXXX");
  int fd = mkstemp(path);
  cr_assert(fd >= 0);
  FILE *f = fdopen(fd, "w");
  FILE *in = fopen(FIX("replay_tiny.txt"), "r");
  char line[1024];
  while (fgets(line, sizeof line, in)) fputs(line, f);
  fclose(in);
  fputs("11 0 1 2 3\n", f);
  fclose(f);
  eval_reader *r;
  o3m_err e;
  cr_assert_eq(eval_reader_open_news(&r, path, &e), 0);
  eval_replay_config c;
  config(&c, "5,5");
  eval_replay_result res;
  cr_assert_eq(eval_replay_run(r, &c, &res, &e), O3M_EPARSE);
  cr_assert(strstr(e.msg, ":7: expected 102 fields") != NULL, "%s", e.msg);
  eval_reader_destroy(r);
  unlink(path);
}

/* ---- generated Criteo data ---- */

static char gen_path[64];
static eval_criteo_stats gen_stats;

static void gen_setup(void) {
  strcpy(gen_path, "/tmp/o3m_test_replay_XXXXXX");
  int fd = mkstemp(gen_path);
  cr_assert(fd >= 0);
  close(fd);
  char *argv[] = {"gen-criteo", "--rows", "40000", "--seed", "11", "--out", gen_path, NULL};
  cr_assert_eq(eval_gen_criteo_main(7, argv), 0);
  o3m_err e;
  cr_assert_eq(eval_criteo_scan(gen_path, 0, 0, EVAL_CRITEO_INT_RAW, 40, &gen_stats, &e), 0,
               "%s", e.msg);
}

static void gen_teardown(void) { unlink(gen_path); }

static void run_gen(eval_replay_config *c, eval_replay_result *res) {
  eval_reader *r;
  o3m_err e;
  cr_assert_eq(eval_reader_open_criteo(&r, gen_path, 0, &gen_stats, &e), 0, "%s", e.msg);
  cr_assert_eq(eval_replay_run(r, c, res, &e), 0, "%s", e.msg);
  cr_assert_eq(res->events + res->skipped, 40000);
  eval_reader_destroy(r);
}

Test(replay_criteo, federated_linucb_decides_as_central, .init = gen_setup,
     .fini = gen_teardown) {
  eval_replay_config c;
  config(&c, "8,13,18");
  c.policy.alpha = 0.6;
  eval_replay_result res;
  run_gen(&c, &res);
  cr_assert_gt(res.events, 5000);
  cr_assert_eq(res.agree, res.events, "%llu of %llu", (unsigned long long)res.agree,
               (unsigned long long)res.events);
  cr_assert_eq(res.federated.matched, res.central.matched);
  cr_assert_eq(res.federated.clicks, res.central.clicks);
  cr_assert_eq(res.partial_d, 8);
  /* The random baseline matches each event with probability 1/40: within
   * five binomial standard deviations of events / 40, and seeds differ. */
  double mean = res.events / 40.0, sd = sqrt(res.events * (1.0 / 40) * (39.0 / 40));
  int differ = 0;
  for (int s = 0; s < 5; s++) {
    cr_assert_gt((double)res.random[s].matched, mean - 5 * sd, "%llu",
                 (unsigned long long)res.random[s].matched);
    cr_assert_lt((double)res.random[s].matched, mean + 5 * sd);
    differ += res.random[s].matched != res.random[0].matched;
  }
  cr_assert_gt(differ, 0);
  /* The generator makes some arms click more: LinUCB must beat random. */
  eval_replay_rel rel;
  eval_replay_relative(&res, &res.central, &rel);
  cr_assert_gt(rel.rel, 1.1);
}

Test(replay_criteo, one_and_two_threads_agree, .init = gen_setup, .fini = gen_teardown) {
  eval_replay_config c;
  config(&c, "20,19");
  eval_replay_result r1, r2;
  c.threads = 1;
  run_gen(&c, &r1);
  c.threads = 2;
  run_gen(&c, &r2);
  cr_assert_eq(r1.events, r2.events);
  cr_assert_eq(r1.agree, r2.agree);
  cr_assert_eq(r1.central.matched, r2.central.matched);
  cr_assert_eq(r1.central.clicks, r2.central.clicks);
  cr_assert_eq(r1.federated.matched, r2.federated.matched);
  cr_assert_eq(r1.partial.matched, r2.partial.matched);
  cr_assert_eq(r1.partial.clicks, r2.partial.clicks);
  for (int s = 0; s < 5; s++) cr_assert_eq(r1.random[s].matched, r2.random[s].matched);
}

/* Issue 12, section 3: DP learners see the passive party's columns through
 * the Gaussian mechanism. At a tiny epsilon they lose the CTR that central
 * (and federated, equal to it) earns; at a huge one they decide almost as
 * central; they run on the calling thread, so one and two threads agree. */
Test(replay_criteo, dp_variants_cost_ctr, .init = gen_setup, .fini = gen_teardown) {
  eval_replay_config c;
  config(&c, "20,19");
  c.policy.alpha = 0.6;
  c.n_dp = 2;
  c.dp_eps[0] = 0.1;
  c.dp_eps[1] = 1e12;
  c.dp_T = 40000;
  c.dp_clip = 10;
  eval_replay_result r1, r2;
  c.threads = 1;
  run_gen(&c, &r1);
  c.threads = 2;
  run_gen(&c, &r2);
  cr_assert_eq(r1.n_dp, 2);
  for (int i = 0; i < 2; i++) {
    cr_assert_eq(r1.dp[i].matched, r2.dp[i].matched);
    cr_assert_eq(r1.dp[i].clicks, r2.dp[i].clicks);
  }
  cr_assert(r1.dp_sigma[0] > 1e3 * r1.dp_sigma[1], "sigmas %g %g", r1.dp_sigma[0],
            r1.dp_sigma[1]);
  eval_replay_rel rc, rf, r0, rh;
  eval_replay_relative(&r1, &r1.central, &rc);
  eval_replay_relative(&r1, &r1.federated, &rf);
  eval_replay_relative(&r1, &r1.dp[0], &r0);
  eval_replay_relative(&r1, &r1.dp[1], &rh);
  cr_assert_eq(rf.rel, rc.rel);
  cr_assert_lt(r0.rel, rc.rel - 0.05, "DP eps 0.1 rel CTR %g, central %g", r0.rel, rc.rel);
  cr_assert_gt(rh.rel, rc.rel - 0.05, "DP eps 1e12 rel CTR %g, central %g", rh.rel, rc.rel);
}

/* Issue 11, item 4: with every party whitening its columns (maps from the
 * first rows, the arm parts whitened once since W (w + c) = W w + W c),
 * federated LinUCB still decides as central on the whitened contexts, and
 * the whitening changes what central learns. */
Test(replay_criteo, whitened_federated_decides_as_whitened_central, .init = gen_setup,
     .fini = gen_teardown) {
  eval_replay_config c;
  config(&c, "8,13,18");
  c.policy.alpha = 0.6;
  eval_replay_result plain, res;
  run_gen(&c, &plain);
  eval_reader *r;
  o3m_err e;
  cr_assert_eq(eval_reader_open_criteo(&r, gen_path, 0, &gen_stats, &e), 0, "%s", e.msg);
  cr_assert_eq(eval_replay_whiten_calibrate(r, &c.part, "bad", 0, &c.whiten, &e), O3M_EINVAL);
  cr_assert_eq(eval_replay_whiten_calibrate(r, &c.part, "all", 0, &c.whiten, &e), 0, "%s",
               e.msg);
  eval_reader_destroy(r);
  cr_assert_not_null(c.whiten);
  run_gen(&c, &res);
  eval_whiten_destroy(c.whiten);
  cr_assert_eq(res.agree, res.events, "%llu of %llu", (unsigned long long)res.agree,
               (unsigned long long)res.events);
  cr_assert_eq(res.federated.matched, res.central.matched);
  cr_assert_eq(res.federated.clicks, res.central.clicks);
  cr_assert(res.central.matched != plain.central.matched ||
                res.central.clicks != plain.central.clicks,
            "whitening changed nothing: was it applied?");
}

Test(replay_criteo, disjoint_lints_federated_draws_as_central, .init = gen_setup,
     .fini = gen_teardown) {
  /* Disjoint LinTS draws scalar scores from invariant means and variances,
   * so with one seed the masked learner draws exactly as the central one. */
  eval_replay_config c;
  config(&c, "20,19");
  c.policy.algo = O3M_ALGO_LINTS;
  c.policy.model = O3M_MODEL_DISJOINT;
  c.policy.v = 0.1;
  c.limit = 5000;
  eval_replay_result res;
  eval_reader *r;
  o3m_err e;
  cr_assert_eq(eval_reader_open_criteo(&r, gen_path, 0, &gen_stats, &e), 0);
  cr_assert_eq(eval_replay_run(r, &c, &res, &e), 0, "%s", e.msg);
  eval_reader_destroy(r);
  cr_assert_eq(res.events, 5000);
  cr_assert_eq(res.agree, res.events);
}

/* ---- the subcommand ---- */

Test(replay_cmd, usage_errors_exit_2) {
  char *a1[] = {"replay", "--format", "news", NULL};
  cr_assert_eq(eval_replay_main(3, a1), 2, "--input missing");
  char *a2[] = {"replay", "--format", "csv", "--input", "x", NULL};
  cr_assert_eq(eval_replay_main(5, a2), 2, "bad format");
  char *a3[] = {"replay", "--format", "obd", "--input", "x", NULL};
  cr_assert_eq(eval_replay_main(5, a3), 2, "obd without --item-context");
  char *a4[] = {"replay", "--format", "news", "--input", FIX("replay_tiny.txt"), "--parties",
                "3,3", NULL};
  cr_assert_eq(eval_replay_main(7, a4), 2, "parties do not sum to d");
  char *a5[] = {"replay", "--format", "news", "--input", "x", "--parties", "5,5",
                "--partial-ratio", "0.5", NULL};
  cr_assert_eq(eval_replay_main(9, a5), 2, "both split options");
  char *a6[] = {"replay", "--bogus", NULL};
  cr_assert_eq(eval_replay_main(2, a6), 2);
}

Test(replay_cmd, runs_and_reuses_criteo_statistics) {
  char stats[64];
  strcpy(stats, "/tmp/o3m_test_replay_XXXXXX");
  int fd = mkstemp(stats);
  cr_assert(fd >= 0);
  close(fd);
  char *a1[] = {"replay", "--format", "criteo-csv", "--input", FIX("criteo_small.csv"),
                "--criteo-arms", "2", "--stats-out", stats, NULL};
  cr_assert_eq(eval_replay_main(9, a1), 0);
  static eval_criteo_stats st;
  o3m_err e;
  cr_assert_eq(eval_criteo_stats_read(&st, stats, &e), 0, "%s", e.msg);
  cr_assert_eq(st.n_arms, 2);
  cr_assert_eq(st.rows, 5);
  /* The TSV twin with the CSV's statistics. */
  char *a2[] = {"replay", "--format", "criteo-tsv", "--input", FIX("criteo_small.tsv"),
                "--stats-in", stats, "--partial-ratio", "0.2", NULL};
  cr_assert_eq(eval_replay_main(9, a2), 0);
  char *a3[] = {"replay", "--format", "criteo-tsv", "--input", FIX("criteo_small.tsv"),
                "--stats-in", stats, "--int-transform", "log", NULL};
  cr_assert_eq(eval_replay_main(9, a3), 2, "transform contradicts the stats file");
  char *a4[] = {"replay", "--format", "news", "--input", "/nonexistent", NULL};
  cr_assert_eq(eval_replay_main(5, a4), 1, "runtime failure");
  unlink(stats);
}
