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
#include <sys/stat.h>
#include <unistd.h>

#include "test_dir.h"
#include "eval_cmds.h"
#include "eval_criteo_prep.h"
#include "o3m_blas.h"

/* o3m-eval's main makes BLAS single-threaded for every command;
 * these tests call the commands in process, so they do it themselves. */
static void single_blas(void) { o3m_blas_single_thread(); }
TestSuite(replay, .init = single_blas);
TestSuite(replay_cmd, .init = single_blas);
TestSuite(replay_criteo, .init = single_blas);
TestSuite(replay_files, .init = single_blas);
#include "eval_reader.h"
#include "eval_replay.h"
#include "eval_replay_out.h"

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

/* DP learners see the passive party's columns through
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

/* With every party whitening its columns (maps from the
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
                "--criteo-arms", "2", "--stats-out", stats, "--no-files", NULL};
  cr_assert_eq(eval_replay_main(10, a1), 0);
  static eval_criteo_stats st;
  o3m_err e;
  cr_assert_eq(eval_criteo_stats_read(&st, stats, &e), 0, "%s", e.msg);
  cr_assert_eq(st.n_arms, 2);
  cr_assert_eq(st.rows, 5);
  /* The TSV twin with the CSV's statistics. */
  char *a2[] = {"replay", "--format", "criteo-tsv", "--input", FIX("criteo_small.tsv"),
                "--stats-in", stats, "--partial-ratio", "0.2", "--no-files", NULL};
  cr_assert_eq(eval_replay_main(10, a2), 0);
  char *a3[] = {"replay", "--format", "criteo-tsv", "--input", FIX("criteo_small.tsv"),
                "--stats-in", stats, "--int-transform", "log", NULL};
  cr_assert_eq(eval_replay_main(9, a3), 2, "transform contradicts the stats file");
  char *a4[] = {"replay", "--format", "news", "--input", "/nonexistent", NULL};
  cr_assert_eq(eval_replay_main(5, a4), 1, "runtime failure");
  unlink(stats);
}

/* ---- result files ---- */

/* Reads a whole small file into a NUL-terminated buffer (freed by the caller). */
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

/* The line of text that starts with prefix, copied into line. */
static void line_starting(const char *text, const char *prefix, char *line, size_t n) {
  for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
    if (!strncmp(p, prefix, strlen(prefix))) {
      size_t l = strcspn(p, "\n");
      snprintf(line, n, "%.*s", (int)(l < n ? l : n - 1), p);
      return;
    }
  cr_assert_fail("no line starts with '%s' in:\n%s", prefix, text);
}

/* Runs the replay subcommand with stdout captured into *out (freed by the
 * caller) and returns its exit status. */
static int run_cmd_capture(int argc, char **argv, char **out) {
  char path[] = "/tmp/o3m_test_replay_out_XXXXXX";
  int fd = mkstemp(path);
  cr_assert(fd >= 0);
  fflush(stdout);
  int saved = dup(STDOUT_FILENO);
  dup2(fd, STDOUT_FILENO);
  int rc = eval_replay_main(argc, argv);
  fflush(stdout);
  dup2(saved, STDOUT_FILENO);
  close(saved);
  close(fd);
  *out = slurp(path);
  unlink(path);
  return rc;
}

/* The worked six-event log through the command: the CSV, the JSON and the
 * curve's last point hold the totals the stdout table prints (central and
 * federated 4 matched, 3 clicks; partial 2 and 1), the JSON names the
 * configuration and the file's SHA-256 as sha256sum computes it. */
Test(replay_files, csv_json_and_curve_match_the_stdout_totals) {
  char dir[] = "/tmp/o3m_test_replay_files_XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  char *argv[] = {"replay", "--format", "news", "--input", FIX("replay_tiny.txt"),
                  "--parties", "1,9", "--alpha", "1", "--out-dir", dir, "--run-name", "tiny",
                  "--plot-format", "png,svg", NULL};
  char *out;
  cr_assert_eq(run_cmd_capture(15, argv, &out), 0, "%s", out);
  /* stdout: "central (d=10)   4   3   0.75000 ..." */
  char line[512], path[512];
  unsigned long long m;
  double clicks, ctr;
  char rel[32];
  line_starting(out, "central (d=10)", line, sizeof line);
  cr_assert_eq(sscanf(line + strlen("central (d=10)"), "%llu %lf %lf %31s", &m, &clicks, &ctr,
                      rel), 4, "%s", line);
  cr_assert_eq(m, 4);
  cr_assert_eq(clicks, 3.0);
  snprintf(path, sizeof path, "%s/tiny.csv", dir);
  char *csv = slurp(path);
  cr_assert_eq(strncmp(csv, "variant,cols,matched,clicks,ctr,rel_ctr,rel_mean,rel_std,rel_min,"
                            "rel_max,rel_ci95_lo,rel_ci95_hi\n", 97), 0, "%s", csv);
  unsigned long long cm;
  int cols, used = 0;
  double cc, cctr;
  line_starting(csv, "central,", line, sizeof line);
  cr_assert_eq(sscanf(line, "central,%d,%llu,%lf,%lf,%n", &cols, &cm, &cc, &cctr, &used), 4,
               "%s", line);
  cr_assert_eq(cols, 10);
  cr_assert_eq(cm, m);
  cr_assert_eq(cc, clicks);
  cr_assert_float_eq(cctr, ctr, 5e-6, "CSV %.17g, stdout %.5f", cctr, ctr);
  /* Six rows give the random baseline a seed without clicks: the stdout
   * table prints n/a for relative CTR and the CSV leaves it empty. */
  cr_assert_str_eq(rel, "n/a");
  cr_assert_eq(line[used], ',', "rel_ctr should be empty: %s", line);
  line_starting(csv, "partial,1,2,1,0.5,", line, sizeof line);
  line_starting(csv, "federated,10,4,3,0.75,", line, sizeof line);
  line_starting(csv, "random_seed_1004,", line, sizeof line);
  /* The JSON: the same totals, the configuration, the checksum. */
  snprintf(path, sizeof path, "%s/tiny.json", dir);
  char *json = slurp(path);
  cr_assert_not_null(strstr(json, "\"name\": \"central\",\n      \"cols\": 10,\n"
                                  "      \"matched\": 4,\n      \"clicks\": 3,\n"
                                  "      \"ctr\": 0.75,"), "%s", json);
  cr_assert_not_null(strstr(json, "\"parties\": [1, 9]"), "%s", json);
  cr_assert_not_null(strstr(json, "\"alpha\": 1,"), "%s", json);
  cr_assert_not_null(strstr(json, "\"random_seeds\": [1000, 1001, 1002, 1003, 1004]"));
  cr_assert_not_null(strstr(json, "\"agreement\": {\"rows\": 6, \"equal_decisions\": 6}"));
  char cmd[600], sum[80] = "";
  snprintf(cmd, sizeof cmd, "sha256sum '%s'", FIX("replay_tiny.txt"));
  FILE *p = popen(cmd, "r");
  cr_assert_not_null(p);
  cr_assert_eq(fscanf(p, "%64s", sum), 1);
  pclose(p);
  char want[120];
  snprintf(want, sizeof want, "\"input_sha256\": \"%s\"", sum);
  cr_assert_not_null(strstr(json, want), "no %s in\n%s", want, json);
  /* The curve: one point (6 rows < 256), the totals. */
  snprintf(path, sizeof path, "%s/tiny_curve.csv", dir);
  char *curve = slurp(path);
  line_starting(curve, "rows,central_matched,central_clicks,central_ctr,central_rel,", line,
                sizeof line);
  line_starting(curve, "6,4,3,0.75,", line, sizeof line);
  struct stat st;
  snprintf(path, sizeof path, "%s/tiny_curve.svg", dir);
  if (system("command -v gnuplot >/dev/null 2>&1") == 0)
    cr_assert_eq(stat(path, &st), 0, "%s missing", path);
  free(out);
  free(csv);
  free(json);
  free(curve);
  test_dir_remove(dir);
}

/* The result files with --dp-eps: every DP variant has its row in the CSV,
 * its entry in the JSON and its columns in the curve, named by its epsilon,
 * and they hold the totals of its stdout row. */
Test(replay_files, dp_variants_are_in_the_files_with_the_stdout_totals) {
  char dir[] = "/tmp/o3m_test_replay_files_XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  char *argv[] = {"replay", "--format", "news", "--input", FIX("replay_tiny.txt"),
                  "--parties", "1,9", "--alpha", "1", "--dp-eps", "0.5,1e+12", "--dp-T", "6",
                  "--out-dir", dir, "--run-name", "dp", "--no-plots", NULL};
  char *out;
  cr_assert_eq(run_cmd_capture(18, argv, &out), 0, "%s", out);
  char path[512], line[512], want[256];
  snprintf(path, sizeof path, "%s/dp.csv", dir);
  char *csv = slurp(path);
  snprintf(path, sizeof path, "%s/dp.json", dir);
  char *json = slurp(path);
  snprintf(path, sizeof path, "%s/dp_curve.csv", dir);
  char *curve = slurp(path);
  static const char *eps[] = {"0.5", "1e+12"};
  unsigned long long total = 0;
  for (int i = 0; i < 2; i++) {
    /* stdout: "dp eps=0.5 (d=10)   M   C   CTR ..." */
    char row[64], name[32];
    snprintf(row, sizeof row, "dp eps=%s (d=10)", eps[i]);
    snprintf(name, sizeof name, "dp_eps_%s", eps[i]);
    line_starting(out, row, line, sizeof line);
    unsigned long long m;
    double clicks;
    cr_assert_eq(sscanf(line + strlen(row), "%llu %lf", &m, &clicks), 2, "%s", line);
    total += m;
    snprintf(want, sizeof want, "%s,10,%llu,%.17g,", name, m, clicks);
    line_starting(csv, want, line, sizeof line);
    snprintf(want, sizeof want, "\"name\": \"%s\",\n      \"cols\": 10,\n      \"matched\": %llu,\n"
             "      \"clicks\": %.17g,", name, m, clicks);
    cr_assert_not_null(strstr(json, want), "no %s in\n%s", want, json);
    snprintf(want, sizeof want, "%s_matched,%s_clicks,%s_ctr,%s_rel", name, name, name, name);
    cr_assert_not_null(strstr(curve, want), "no %s in\n%s", want, curve);
  }
  cr_assert(total > 0, "the DP learners matched no row:\n%s", out);
  cr_assert_not_null(strstr(json, "\"epsilons\": [0.5, 1000000000000], \"delta\": "),
                     "%s", json);
  /* The curve's one point (6 rows): central 4 3, federated, partial, then
   * the DP tallies of the CSV. */
  const char *last = strrchr(curve, '\n');
  while (last > curve && last[-1] != '\n') last--;
  line_starting(csv, "dp_eps_0.5,", line, sizeof line);
  unsigned long long m0;
  double c0;
  cr_assert_eq(sscanf(line, "dp_eps_0.5,10,%llu,%lf", &m0, &c0), 2, "%s", line);
  double col[32];
  int nc = 0;
  for (const char *p = last; nc < 32; p++) {
    col[nc++] = strtod(p, NULL);
    if (!(p = strchr(p, ','))) break;
  }
  /* rows, then 4 columns per variant: central 1-4, federated 5-8, partial
   * 9-12, dp_eps_0.5 13-16. */
  cr_assert(nc >= 17, "%d columns in the last curve row", nc);
  cr_assert_eq(col[0], 6);
  cr_assert_eq(col[13], (double)m0, "curve %g, CSV %llu", col[13], m0);
  cr_assert_eq(col[14], c0, "curve %g, CSV %g", col[14], c0);
  free(out);
  free(csv);
  free(json);
  free(curve);
  test_dir_remove(dir);
}

/* A log of 70,000 rows: the curve is thinned to at most
 * EVAL_REPLAY_CURVE_MAX evenly spaced points, and its last point is the
 * run's totals. */
Test(replay_files, long_curve_is_thinned_evenly_and_ends_at_the_totals) {
  char path[] = "/tmp/o3m_test_replay_long_XXXXXX";
  int fd = mkstemp(path);
  cr_assert(fd >= 0);
  FILE *f = fdopen(fd, "w");
  unsigned st = 5;
  for (int t = 0; t < 70000; t++) {
    st = st * 1103515245u + 12345u;
    int arm = (int)(st >> 16) % 10;
    fprintf(f, "%d %d", arm + 1, (int)((st >> 8) & 1));
    for (int a = 0; a < 10; a++)
      for (int j = 0; j < 10; j++) fprintf(f, " %d", (int)((st >> ((a + j) % 20)) & 3));
    fputc('\n', f);
  }
  fclose(f);
  eval_reader *r;
  o3m_err e;
  cr_assert_eq(eval_reader_open_news(&r, path, &e), 0, "%s", e.msg);
  eval_replay_config c;
  config(&c, "5,5");
  c.variants = EVAL_REPLAY_CENTRAL;
  static eval_replay_result res;
  cr_assert_eq(eval_replay_run(r, &c, &res, &e), 0, "%s", e.msg);
  eval_reader_destroy(r);
  /* The command on the same log: every number of the stdout row is the
   * CSV's, rounded as printed (this log has clicks on every random seed). */
  char dir[] = "/tmp/o3m_test_replay_files_XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  char *argv[] = {"replay", "--format", "news", "--input", path, "--parties", "5,5",
                  "--variants", "central", "--out-dir", dir, "--run-name", "long", "--no-plots",
                  NULL};
  char *out, line[512], csvp[512];
  cr_assert_eq(run_cmd_capture(14, argv, &out), 0, "%s", out);
  unlink(path);
  double o[7], c7[7];
  unsigned long long om, cm;
  line_starting(out, "central (d=10)", line, sizeof line);
  cr_assert_eq(sscanf(line + strlen("central (d=10)"), "%llu %lf %lf %lf %lf %lf %lf", &om, &o[0],
                      &o[1], &o[2], &o[3], &o[4], &o[5]), 7, "%s", line);
  snprintf(csvp, sizeof csvp, "%s/long.csv", dir);
  char *csv = slurp(csvp);
  line_starting(csv, "central,10,", line, sizeof line);
  cr_assert_eq(sscanf(line, "central,10,%llu,%lf,%lf,%lf,%lf,%lf,%lf,%lf", &cm, &c7[0], &c7[1],
                      &c7[2], &c7[6], &c7[3], &c7[4], &c7[5]), 8, "%s", line);
  cr_assert_eq(cm, om);
  cr_assert_eq(cm, res.central.matched, "the command and eval_replay_run agree");
  cr_assert_eq(c7[0], o[0], "clicks");
  static const double tol[] = {0, 5e-6, 5e-5, 5e-5, 5e-5, 5e-5};
  for (int i = 1; i < 6; i++)
    cr_assert_float_eq(c7[i], o[i], tol[i], "column %d: CSV %.17g, stdout %g", i, c7[i], o[i]);
  free(out);
  free(csv);
  test_dir_remove(dir);
  cr_assert_eq(res.events, 70000);
  cr_assert(res.n_curve > EVAL_REPLAY_CURVE_MAX / 2 && res.n_curve <= EVAL_REPLAY_CURVE_MAX,
            "%d points", res.n_curve);
  uint64_t step = res.curve[0].events;
  for (int k = 0; k + 1 < res.n_curve; k++)
    cr_assert_eq(res.curve[k].events, (uint64_t)(k + 1) * step, "point %d at %llu rows", k,
                 (unsigned long long)res.curve[k].events);
  cr_assert_eq(step, 512, "the stride doubled once (70000 / 256 > 256 points)");
  const eval_replay_point *last = &res.curve[res.n_curve - 1];
  cr_assert_eq(last->events, 70000);
  cr_assert_eq(last->central.matched, res.central.matched);
  cr_assert_eq(last->central.clicks, res.central.clicks);
  uint64_t rm = 0;
  for (int s = 0; s < res.n_random; s++) rm += res.random[s].matched;
  cr_assert_eq(last->random.matched, rm);
  /* Tallies only grow along the curve. */
  for (int k = 0; k + 1 < res.n_curve; k++)
    cr_assert(res.curve[k].central.matched <= res.curve[k + 1].central.matched);
}

Test(replay_files, sha256_of_a_missing_file_names_it) {
  char hex[65];
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert_eq(eval_replay_sha256_file("/nonexistent/log.txt", hex, &e), O3M_EIO);
  cr_assert_not_null(strstr(e.msg, "/nonexistent/log.txt"), "%s", e.msg);
  cr_assert_eq(hex[0], 0);
}
