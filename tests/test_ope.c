/* test_ope.c -- the off-policy estimators (eval/paper/eval_ope.c).
 *
 * The estimators are checked on a four-row log whose every value is worked
 * out by hand in the comments, then a whole run (a frozen greedy learner on
 * a small Open Bandit log written here) is checked against values worked out
 * the same way, including the reward model's predictions, and the run's
 * error paths name the problem. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "eval_ope.h"

#define Z 1.959963984540054
#define EPS 1e-12

static void expect(const eval_ope_estimate *x, double value, double se, long long rows,
                   const char *name) {
  cr_expect(fabs(x->value - value) < EPS, "%s value %.17g, expected %.17g", name, x->value,
            value);
  cr_expect(fabs(x->se - se) < EPS, "%s se %.17g, expected %.17g", name, x->se, se);
  cr_expect(fabs(x->lo - (value - Z * se)) < EPS && fabs(x->hi - (value + Z * se)) < EPS,
            "%s interval [%.17g, %.17g]", name, x->lo, x->hi);
  cr_expect_eq(x->rows, rows, "%s rows %lld, expected %lld", name, x->rows, rows);
}

/* The four rows (pi(a|x), p, r, qhat(x, a), qhat(x, pi(x))):
 *   1: 1, 0.5,  1, 0.4, 0.4    w = 2
 *   2: 0, 0.25, 1, 0.2, 0.6    w = 0
 *   3: 1, 0.25, 0, 0.1, 0.1    w = 4
 *   4: 0, 0.5,  0, 0.3, 0.5    w = 0 */
static void add_hand_rows(eval_ope_acc *a) {
  cr_assert_eq(eval_ope_acc_add(a, 1, 0.5, 1, 0.4, 0.4), 0);
  cr_assert_eq(eval_ope_acc_add(a, 0, 0.25, 1, 0.2, 0.6), 0);
  cr_assert_eq(eval_ope_acc_add(a, 1, 0.25, 0, 0.1, 0.1), 0);
  cr_assert_eq(eval_ope_acc_add(a, 0, 0.5, 0, 0.3, 0.5), 0);
}

Test(ope, hand_computed_log) {
  eval_ope_acc a;
  eval_ope_acc_init(&a);
  add_hand_rows(&a);
  eval_ope_estimate est[EVAL_OPE_N], logged;
  eval_ope_finish(&a, Z, est, &logged);
  /* replay: rows 1 and 3 matched, rewards 1, 0: mean 1/2, sample variance
   * 1/2, se = sqrt(1/2 / 2) = 1/2. */
  expect(&est[EVAL_OPE_REPLAY], 0.5, 0.5, 2, "replay");
  /* IPW: terms w r = 2, 0, 0, 0: mean 1/2; variance (1.5^2 + 3 0.5^2) / 3
   * = 1, se = sqrt(1 / 4) = 1/2. */
  expect(&est[EVAL_OPE_IPW], 0.5, 0.5, 4, "ipw");
  /* SNIPW: 2 / (2 + 4) = 1/3; wbar = 3/2; terms w (r - 1/3) / wbar = 8/9,
   * 0, -8/9, 0; se^2 = (128/81) / (4 * 3) = 32/243. */
  expect(&est[EVAL_OPE_SNIPW], 1.0 / 3, sqrt(32.0 / 243), 4, "snipw");
  /* DM: qpi = 0.4, 0.6, 0.1, 0.5: mean 0.4, squared deviations sum 0.14,
   * se = sqrt(0.14 / 3 / 4). */
  expect(&est[EVAL_OPE_DM], 0.4, sqrt(0.14 / 12), 4, "dm");
  /* DR: 0.4 + 2 (1 - 0.4) = 1.6, 0.6, 0.1 + 4 (0 - 0.1) = -0.3, 0.5: mean
   * 0.6, squared deviations 1 + 0 + 0.81 + 0.01 = 1.82. */
  expect(&est[EVAL_OPE_DR], 0.6, sqrt(1.82 / 12), 4, "dr");
  /* The logging policy: rewards 1, 1, 0, 0: mean 1/2, variance 1/3. */
  expect(&logged, 0.5, sqrt(1.0 / 12), 4, "logged");
}

Test(ope, undefined_estimates_are_nan) {
  eval_ope_acc a;
  eval_ope_acc_init(&a);
  eval_ope_estimate est[EVAL_OPE_N];
  eval_ope_finish(&a, Z, est, NULL);
  for (int k = 0; k < EVAL_OPE_N; k++)
    cr_expect(isnan(est[k].value), "%s of no rows is %g", eval_ope_name(k), est[k].value);
  /* One row the policy does not match: replay and SNIPW stay undefined,
   * IPW is 0 without an interval. */
  cr_assert_eq(eval_ope_acc_add(&a, 0, 0.5, 1, 0.2, 0.3), 0);
  eval_ope_finish(&a, Z, est, NULL);
  cr_expect(isnan(est[EVAL_OPE_REPLAY].value));
  cr_expect(isnan(est[EVAL_OPE_SNIPW].value));
  cr_expect_eq(est[EVAL_OPE_IPW].value, 0.0);
  cr_expect(isnan(est[EVAL_OPE_IPW].se));
  cr_expect(fabs(est[EVAL_OPE_DR].value - 0.3) < EPS);
}

Test(ope, bad_rows_are_refused_and_change_nothing) {
  eval_ope_acc a, before;
  eval_ope_acc_init(&a);
  add_hand_rows(&a);
  before = a;
  cr_expect_eq(eval_ope_acc_add(&a, 1, 0, 1, 0, 0), O3M_ERANGE, "propensity 0");
  cr_expect_eq(eval_ope_acc_add(&a, 1, 1.5, 1, 0, 0), O3M_ERANGE, "propensity above 1");
  cr_expect_eq(eval_ope_acc_add(&a, 1, NAN, 1, 0, 0), O3M_ERANGE, "propensity NaN");
  cr_expect_eq(eval_ope_acc_add(&a, 2, 0.5, 1, 0, 0), O3M_ERANGE, "pi above 1");
  cr_expect_eq(eval_ope_acc_add(&a, 1, 0.5, INFINITY, 0, 0), O3M_ERANGE, "reward inf");
  cr_expect_eq(eval_ope_acc_add(&a, 1, 0.5, 1, NAN, 0), O3M_ERANGE, "qhat NaN");
  cr_expect_eq(memcmp(&a, &before, sizeof a), 0, "a refused row changed the sums");
}

/* ---- a whole run ---- */

static char items_path[64], log_path[64];

static void write_file(char path[64], const char *text) {
  strcpy(path, "/tmp/o3m_test_ope_XXXXXX");
  int fd = mkstemp(path);
  cr_assert(fd >= 0);
  size_t n = strlen(text);
  cr_assert_eq(write(fd, text, n), (ssize_t)n);
  close(fd);
}

#define LOG_HEADER ",timestamp,item_id,position,click,propensity_score,user_feature_0\n"

/* Two items: item 0 has feature_0 0 and category a, item 1 feature_0 1 and
 * category b. One user column with one bucket, so every context is
 * [1 ; item part]: x0 = (1, 0, 1, 0), |x0|^2 = 2, x1 = (1, 1, 0, 1),
 * |x1|^2 = 3. Training (4 + 4 rows): item 1 always clicked, item 0 never.
 * The evaluated rows are the hand log's rows 1..4 with the frozen greedy
 * policy choosing item 1 everywhere. */
static void write_fixture(const char *eval_rows) {
  write_file(items_path, ",item_id,item_feature_0,item_feature_1\n0,0,0.0,a\n1,1,1.0,b\n");
  char text[2048];
  size_t off = (size_t)snprintf(text, sizeof text, LOG_HEADER);
  for (int i = 0; i < 4; i++)
    off += (size_t)snprintf(text + off, sizeof text - off, "%d,t,1,1,1,0.5,u\n%d,t,0,1,0,0.5,u\n",
                            2 * i, 2 * i + 1);
  snprintf(text + off, sizeof text - off, "%s", eval_rows);
  write_file(log_path, text);
}

static const char *hand_rows = "8,t,1,1,1,0.5,u\n9,t,0,1,1,0.25,u\n"
                               "10,t,1,1,0,0.25,u\n11,t,0,1,0,0.5,u\n";

static int run(const char *state_in, const char *state_out, eval_ope_result *res, o3m_err *e) {
  eval_obd_options o;
  eval_obd_options_default(&o);
  o.user_buckets = 1;
  eval_reader *rd;
  int rc = eval_reader_open_obd(&rd, log_path, items_path, &o, e);
  cr_assert_eq(rc, 0, "%s", e->msg);
  eval_ope_config cfg;
  eval_ope_config_default(&cfg);
  cfg.policy.alpha = 0; /* greedy */
  cfg.train = 8;
  cfg.state_in = state_in;
  cfg.state_out = state_out;
  rc = eval_ope_run(rd, &cfg, res, e);
  eval_reader_destroy(rd);
  return rc;
}

static void cleanup(void) {
  unlink(items_path);
  unlink(log_path);
}

Test(ope_run, frozen_greedy_policy_on_a_small_obd_log) {
  write_fixture(hand_rows);
  eval_ope_result res;
  o3m_err e;
  char state[64];
  write_file(state, "");
  cr_assert_eq(run(NULL, state, &res, &e), 0, "%s", e.msg);
  cr_expect_eq(res.train_events, 8);
  cr_expect_eq(res.eval_events, 4);
  cr_expect_eq(res.matched, 2, "the greedy policy should choose item 1 on every row");
  cr_expect_eq(res.matched_nonzero, 1);
  cr_expect_eq(res.first_line, 10);
  cr_expect_eq(res.last_line, 13);
  /* The propensities and rewards are those of the hand log: */
  expect(&res.est[EVAL_OPE_REPLAY], 0.5, 0.5, 2, "replay");
  expect(&res.est[EVAL_OPE_IPW], 0.5, 0.5, 4, "ipw");
  expect(&res.est[EVAL_OPE_SNIPW], 1.0 / 3, sqrt(32.0 / 243), 4, "snipw");
  /* The reward model: arm 1 saw x1 four times with reward 1, so qhat(x1, 1)
   * = x1^T (I + 4 x1 x1^T)^{-1} 4 x1 = 4 |x1|^2 / (1 + 4 |x1|^2) = 12/13;
   * arm 0 saw only zeros: qhat = 0. DM = 12/13 on every row, se 0. DR terms:
   * 12/13 + 2 (1 - 12/13) = 14/13, 12/13, 12/13 + 4 (0 - 12/13) = -36/13,
   * 12/13: mean 1/26, deviations (27, 23, -73, 23)/26. */
  expect(&res.est[EVAL_OPE_DM], 12.0 / 13, 0.0, 4, "dm");
  double ss = (27.0 * 27 + 23 * 23 + 73 * 73 + 23 * 23) / (26.0 * 26);
  expect(&res.est[EVAL_OPE_DR], 1.0 / 26, sqrt(ss / 3 / 4), 4, "dr");

  /* The saved frozen policy, read back, gives the same estimates without
   * training the policy (the reward model still fits the prefix). */
  eval_ope_result again;
  cr_assert_eq(run(state, NULL, &again, &e), 0, "%s", e.msg);
  for (int k = 0; k < EVAL_OPE_N; k++)
    cr_expect_eq(again.est[k].value, res.est[k].value, "%s differs after --state-in",
                 eval_ope_name(k));
  unlink(state);
  cleanup();
}

Test(ope_run, errors_name_the_problem) {
  eval_ope_result res;
  o3m_err e;
  /* A log no longer than the training prefix. */
  write_fixture("");
  cr_expect_eq(run(NULL, NULL, &res, &e), O3M_EINVAL);
  cr_expect(strstr(e.msg, "fewer than the training prefix (8)"), "%s", e.msg);
  cleanup();
  /* A propensity of 0 on line 11 (the reader refuses it, naming the line). */
  write_fixture("8,t,1,1,1,0.5,u\n9,t,0,1,1,0,u\n");
  cr_expect_eq(run(NULL, NULL, &res, &e), O3M_ERANGE);
  cr_expect(strstr(e.msg, ":11: propensity_score '0'"), "%s", e.msg);
  cleanup();
  /* A saved state of another shape. */
  write_fixture(hand_rows);
  char state[64];
  write_file(state, "not a policy state");
  cr_expect_neq(run(state, NULL, &res, &e), 0);
  cr_expect(strstr(e.msg, state), "%s", e.msg);
  unlink(state);
  cleanup();
}

Test(ope_run, a_log_without_propensities_is_refused) {
  write_file(items_path, ",item_id,item_feature_0\n0,0,0.0\n1,1,1.0\n");
  write_file(log_path, ",item_id,position,click\n0,1,1,1\n1,0,1,0\n");
  eval_obd_options o;
  eval_obd_options_default(&o);
  eval_reader *rd;
  o3m_err e;
  cr_assert_eq(eval_reader_open_obd(&rd, log_path, items_path, &o, &e), 0, "%s", e.msg);
  eval_ope_config cfg;
  eval_ope_config_default(&cfg);
  cfg.train = 1;
  eval_ope_result res;
  cr_expect_eq(eval_ope_run(rd, &cfg, &res, &e), O3M_EINVAL);
  cr_expect(strstr(e.msg, "line 3 carries no propensity score"), "%s", e.msg);
  eval_reader_destroy(rd);
  cleanup();
}

/* The first `o3m-eval ope` run of docs/evaluation/ope.md on the shipped
 * Open Bandit sample (../shared/data from the project root, or $O3M_DATA_DIR): the counts and
 * the dm and dr values it prints. Skipped when the data is not there (a
 * fresh clone alone does not have it). */
Test(ope_run, readme_figures_on_the_shipped_obd_sample) {
  char log[4096], items[4096];
  const char *dir = getenv("O3M_DATA_DIR");
  snprintf(log, sizeof log, "%s/obd-random-men/men.csv",
           dir ? dir : O3M_SOURCE_DIR "/../shared/data");
  snprintf(items, sizeof items, "%s/obd-random-men/item_context.csv",
           dir ? dir : O3M_SOURCE_DIR "/../shared/data");
  if (access(log, R_OK) || access(items, R_OK))
    cr_skip_test("%s not found: set O3M_DATA_DIR to the shared data directory", log);
  eval_reader *rd;
  o3m_err e;
  cr_assert_eq(eval_reader_open_obd(&rd, log, items, NULL, &e), 0, "%s", e.msg);
  eval_ope_config cfg;
  eval_ope_config_default(&cfg);
  eval_ope_result res;
  int rc = eval_ope_run(rd, &cfg, &res, &e);
  eval_reader_destroy(rd);
  cr_assert_eq(rc, 0, "%s", e.msg);
  cr_expect_eq(res.train_events, 1000);
  cr_expect_eq(res.eval_events, 2284);
  cr_expect_eq(res.matched, 72);
  cr_expect_eq(res.matched_nonzero, 0);
  cr_expect(fabs(res.est[EVAL_OPE_DM].value - 0.054730) < 5e-7, "dm %.7f",
            res.est[EVAL_OPE_DM].value);
  cr_expect(fabs(res.est[EVAL_OPE_DR].value - 0.013685) < 5e-7, "dr %.7f",
            res.est[EVAL_OPE_DR].value);
  cr_expect(fabs(res.logged.value - 6.0 / 2284) < EPS, "logged %.7f", res.logged.value);
  for (int k = 0; k < EVAL_OPE_N; k++)
    cr_expect(isfinite(res.est[k].lo) && isfinite(res.est[k].hi), "%s has no interval",
              eval_ope_name(k));
}

/* --uniform-logging: a news10k-format log (tests/data/eval/replay_tiny.txt,
 * K = 10, no propensities) evaluated with p = 1/10. With a constant
 * propensity SNIPW is replay exactly, and IPW is K (matched clicks) / n;
 * without the option the first evaluated row is refused, naming its line. */
Test(ope_run, uniform_logging_on_a_log_without_propensities) {
  eval_ope_config cfg;
  eval_ope_config_default(&cfg);
  cfg.train = 1;
  eval_ope_result res;
  eval_reader *rd;
  o3m_err e;
  const char *path = O3M_SOURCE_DIR "/tests/data/eval/replay_tiny.txt";
  cr_assert_eq(eval_reader_open_news(&rd, path, &e), 0, "%s", e.msg);
  cr_expect_eq(eval_ope_run(rd, &cfg, &res, &e), O3M_EINVAL);
  cr_expect(strstr(e.msg, "line 2 carries no propensity score"), "%s", e.msg);
  eval_reader_destroy(rd);

  cfg.uniform_logging = 1;
  cr_assert_eq(eval_reader_open_news(&rd, path, &e), 0, "%s", e.msg);
  cr_assert_eq(eval_ope_run(rd, &cfg, &res, &e), 0, "%s", e.msg);
  eval_reader_destroy(rd);
  cr_expect_eq(res.eval_events, 5);
  cr_assert_gt(res.matched, 0, "the test needs a matched row");
  cr_expect(fabs(res.est[EVAL_OPE_SNIPW].value - res.est[EVAL_OPE_REPLAY].value) < EPS,
            "snipw %g, replay %g", res.est[EVAL_OPE_SNIPW].value,
            res.est[EVAL_OPE_REPLAY].value);
  cr_expect(fabs(res.est[EVAL_OPE_IPW].value - 10.0 * res.matched_nonzero / 5) < EPS,
            "ipw %g with %lld matched clicks", res.est[EVAL_OPE_IPW].value,
            res.matched_nonzero);
}
