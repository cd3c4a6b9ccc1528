/*
 * test_hannun: Hannun et al.'s private learner (eval/peers/hannun/bl_hannun.h)
 * against plaintext: the reciprocal over the paper's range, the argmax with
 * random tie-breaking, and whole runs that must choose the arms the
 * plaintext learner chooses given the same dealer samples.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bl_hannun.h"
#include "o3m_splitmix.h"

static double urand(uint64_t *s, double lo, double hi) {
  return lo + (hi - lo) * o3m_splitmix64_unif(s);
}

static bl_mpc *mk(int N, int F, uint64_t seed) {
  bl_mpc *m = NULL;
  cr_assert_eq(bl_mpc_create(&m, N, F, &seed, NULL), 0);
  return m;
}

Test(hannun, reciprocal_over_the_papers_range) {
  bl_mpc *m = mk(2, 20, 1);
  enum { n = 200 };
  double v[n];
  uint64_t s = 3, out[n];
  for (int i = 0; i < n; i++) v[i] = 1.0 + 9.0 * i / n;
  uint64_t *x = bl_mpc_alloc(m, n);
  cr_assert_eq(bl_mpc_share(m, 0, v, n, x, NULL), 0);
  bl_mpc_reset_counters(m);
  cr_assert_eq(bl_hannun_reciprocal(m, x, x, n, 8, 7, NULL), 0);
  /* One truncation, 8 squarings and 7 iterations of two products. */
  cr_expect_eq(bl_mpc_rounds(m), 1 + 2 * 8 + 4 * 7, "%d rounds", bl_mpc_rounds(m));
  cr_assert_eq(bl_mpc_open(m, x, n, out, NULL), 0);
  /* Against the same approximation in float64 (tight), and against 1/x
   * (the approximation's own error: below 1e-6 on [1, 3], where Sherman-
   * Morrison denominators of unit-norm contexts lie, 2e-3 at 10). */
  double worst = 0;
  for (int i = 0; i < n; i++) {
    double a = 1.0 + (0.5 - v[i]) / 256.0;
    for (int k = 0; k < 8; k++) a *= a;
    double r = 3.0 * a + 0.003;
    for (int k = 0; k < 7; k++) r = 2.0 * r - v[i] * r * r;
    double got = bl_mpc_decode(m, out[i]);
    worst = fmax(worst, fabs(got - r));
    cr_expect_lt(fabs(got - 1.0 / v[i]), v[i] <= 3.0 ? 1e-5 : 2.5e-3, "1/%g: %g", v[i], got);
  }
  cr_expect_lt(worst, 1e-4, "worst error against the float64 iteration %g", worst);
  (void)s;
  free(x);
  bl_mpc_destroy(m);
}

Test(hannun, argmax_one_hot_and_random_ties) {
  for (int N = 2; N <= 3; N++) {
    bl_mpc *m = mk(N, 16, 9 + (uint64_t)N);
    enum { n = 7 };
    uint64_t s = 5, out[n];
    uint64_t *x = bl_mpc_alloc(m, n), *z = bl_mpc_alloc(m, n);
    /* Distinct values: the maximum. */
    for (int rep = 0; rep < 20; rep++) {
      double v[n];
      int best = 0;
      for (int i = 0; i < n; i++) {
        v[i] = urand(&s, -50, 50);
        if (v[i] > v[best]) best = i;
      }
      cr_assert_eq(bl_mpc_share(m, 0, v, n, x, NULL), 0);
      cr_assert_eq(bl_hannun_argmax(m, z, x, n, NULL, NULL), 0);
      cr_assert_eq(bl_mpc_open(m, z, n, out, NULL), 0);
      for (int i = 0; i < n; i++) cr_expect_eq(out[i], (uint64_t)(i == best), "N=%d i=%d", N, i);
    }
    /* Three tied maxima: each wins about a third of the time, never another. */
    int wins[n] = {0};
    double v[n] = {1, 3, 0, 3, -2, 3, 2};
    for (int rep = 0; rep < 150; rep++) {
      cr_assert_eq(bl_mpc_share(m, 0, v, n, x, NULL), 0);
      cr_assert_eq(bl_hannun_argmax(m, z, x, n, NULL, NULL), 0);
      cr_assert_eq(bl_mpc_open(m, z, n, out, NULL), 0);
      int ones = 0;
      for (int i = 0; i < n; i++) {
        ones += (int)out[i];
        if (out[i]) wins[i]++;
      }
      cr_assert_eq(ones, 1);
    }
    cr_expect_eq(wins[0] + wins[2] + wins[4] + wins[6], 0);
    for (int i = 1; i <= 5; i += 2)
      cr_expect(wins[i] > 25 && wins[i] < 75, "tied arm %d won %d of 150", i, wins[i]);
    free(x);
    free(z);
    bl_mpc_destroy(m);
  }
}

/* A synthetic classification bandit (their MNIST setting in miniature):
 * arm = class, reward 1 for the right class. */
static void run_against_plain(int N, int A, int D, int per_arm, int T, double eps) {
  uint64_t seed = 77;
  bl_hannun_opts o;
  bl_hannun_opts_default(&o);
  o.arms = A;
  o.dim = D;
  o.parties = N;
  o.per_arm = per_arm;
  o.epsilon = eps;
  o.seed = &seed;
  bl_hannun *h = NULL;
  bl_hplain *p = NULL;
  o3m_err e;
  cr_assert_eq(bl_hannun_create(&h, &o, &e), 0, "%s", e.msg);
  cr_assert_eq(bl_hplain_create(&p, A, D, per_arm, &e), 0, "%s", e.msg);
  double *C = malloc(sizeof *C * A * D), *X = malloc(sizeof *X * A * D), v[64];
  int gamma[64];
  uint64_t s = 1234;
  for (int i = 0; i < A * D; i++) C[i] = urand(&s, -1, 1);
  int agree = 0, reward_mpc = 0, reward_plain = 0;
  for (int t = 0; t < T; t++) {
    int label = (int)(o3m_splitmix64(&s) % (uint64_t)A);
    double nrm = 0;
    for (int j = 0; j < D; j++) {
      X[j] = C[label * D + j] + urand(&s, -0.3, 0.3);
      nrm += X[j] * X[j];
    }
    for (int j = 0; j < D; j++) X[j] /= sqrt(nrm);
    if (per_arm)
      for (int a = 1; a < A; a++)
        for (int j = 0; j < D; j++) X[a * D + j] = X[j] * (a == label ? 1.0 : 0.5);
    int arm, explore;
    cr_assert_eq(bl_hannun_choose(h, X, &arm, &e), 0, "%s", e.msg);
    bl_hannun_last_samples(h, &explore, v, gamma);
    int parm = bl_hplain_choose(p, X, explore, v, gamma);
    agree += arm == parm;
    double r = arm == label;
    reward_mpc += arm == label;
    reward_plain += parm == label;
    cr_assert_eq(bl_hannun_update(h, r, &e), 0, "%s", e.msg);
    /* The plaintext twin follows the private learner's arm so that both
     * keep the same state (it is the check of the choice, not a second
     * learner). */
    bl_hplain_update(p, arm, r);
  }
  cr_expect_eq(agree, T, "N=%d A=%d: %d of %d choices agree", N, A, agree, T);
  cr_expect_gt(reward_mpc, T / A + T / 10, "N=%d A=%d: reward %d of %d, chance %d", N, A,
               reward_mpc, T, T / A);
  (void)reward_plain;
  cr_expect_eq(bl_hannun_update(h, 1.0, &e), O3M_ESTATE);
  free(C);
  free(X);
  bl_hplain_destroy(p);
  bl_hannun_destroy(h);
}

Test(hannun, private_learner_chooses_what_plaintext_chooses) {
  run_against_plain(2, 4, 6, 0, 150, 0.1);
  run_against_plain(3, 3, 5, 1, 100, 0.2);
}

Test(hannun, refuses_bad_options) {
  bl_hannun_opts o;
  bl_hannun_opts_default(&o);
  bl_hannun *h = NULL;
  o3m_err e;
  o.epsilon = 1.5;
  cr_expect_eq(bl_hannun_create(&h, &o, &e), O3M_EINVAL);
  cr_expect(strstr(e.msg, "epsilon") != NULL, "%s", e.msg);
  bl_hannun_opts_default(&o);
  o.parties = 30;
  cr_expect_eq(bl_hannun_create(&h, &o, &e), O3M_EINVAL);
  cr_expect_null(h);
}

/* The command end to end on its cheapest section: exit 0, the Table 1 CSV
 * with the four operations and the rounds the layer documents (a
 * multiplication is 2 rounds, as in their Table 1). */
int eval_hannun_main(int argc, char **argv);

Test(hannun, command_writes_table1) {
  char dir[64];
  snprintf(dir, sizeof dir, "/tmp/o3m_hannun_XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
  char *argv[] = {"hannun", "--only", "ops", "--no-plots", "--out", dir, NULL};
  cr_assert_eq(eval_hannun_main(6, argv), 0);
  char path[128], line[256];
  snprintf(path, sizeof path, "%s/hannun_table1.csv", dir);
  FILE *f = fopen(path, "r");
  cr_assert_not_null(f, "no %s", path);
  int rows = 0, mul_rounds = -1;
  while (fgets(line, sizeof line, f)) {
    rows++;
    if (!strncmp(line, "multiplication,", 15)) mul_rounds = atoi(line + 15);
  }
  fclose(f);
  cr_expect_eq(rows, 5, "header and four operations, got %d lines", rows);
  cr_expect_eq(mul_rounds, 2);
  char *bad[] = {"hannun", "--epsilon", "2", NULL};
  cr_expect_eq(eval_hannun_main(3, bad), 2);
  remove(path);
  rmdir(dir);
}

/* The learner section reports the agreement with the plaintext learner as a
 * count over the iterations, in the table's summary line and the CSV, never
 * as a rounded percentage (9,999 of 10,000 printed as 100.0% hid a flipped
 * decision). 20 synthetic iterations, seed 1: every arm the same. */
Test(hannun, agreement_is_an_exact_count) {
  char dir[64];
  snprintf(dir, sizeof dir, "/tmp/o3m_hannun_XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
  char out[128], path[128], line[512];
  snprintf(out, sizeof out, "%s/stdout.txt", dir);
  fflush(stdout);
  int saved = dup(1);
  FILE *o = fopen(out, "w");
  cr_assert(saved >= 0 && o);
  dup2(fileno(o), 1);
  char *argv[] = {"hannun", "--only", "learner", "--T", "20", "--T-data", "30", "--no-plots",
                  "--data-dir", "/nonexistent", "--out", dir, NULL};
  int rc = eval_hannun_main(12, argv);
  fflush(stdout);
  dup2(saved, 1);
  close(saved);
  fclose(o);
  cr_assert_eq(rc, 0);
  FILE *f = fopen(out, "r");
  cr_assert_not_null(f);
  int summary = 0, percent = 0;
  while (fgets(line, sizeof line, f)) {
    if (strstr(line, "Same arm as the plaintext learner (iterations): synthetic 20/20"))
      summary = 1;
    if (strstr(line, "synthetic (classes)") && strchr(line, '%')) percent = 1;
  }
  fclose(f);
  cr_expect(summary, "no summary line with the count 20/20 in %s", out);
  cr_expect(!percent, "the table still prints the agreement as a percentage");
  snprintf(path, sizeof path, "%s/hannun_learner.csv", dir);
  f = fopen(path, "r");
  cr_assert_not_null(f, "no %s", path);
  cr_assert_not_null(fgets(line, sizeof line, f));
  cr_expect(strstr(line, ",same_arm_fraction,same_arm_iters\n") != NULL, "header: %s", line);
  cr_assert_not_null(fgets(line, sizeof line, f));
  const char *last = strrchr(line, ',');
  cr_expect(!strncmp(line, "synthetic (classes),", 20) && last && atoi(last + 1) == 20,
            "synthetic row: %s", line);
  fclose(f);
  remove(path);
  remove(out);
  snprintf(path, sizeof path, "%s/hannun_table1.csv", dir);
  remove(path);
  rmdir(dir);
}
