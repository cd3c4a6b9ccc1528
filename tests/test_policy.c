/* test_policy.c -- the bandit policies, and the lossless property: a policy
 * fed masked contexts Q x makes the decisions of a policy fed x.
 *
 * The setup is the paper's synthetic one (d = 100, K = 10, T = 5000,
 * partition [20,20,20,20,20], beta = 0.5). Rounds and masking come from
 * policy_env (tests/), which masks with the block code the passive
 * participants run; the test links the policy library and linalg only. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "o3m_policy.h"
#include "o3m_rng.h"
#include "policy_env.h"

#define ND 100
#define NK 10
#define NT 5000

typedef struct pair {
  o3m_policy *central, *masked;
  policy_env *env;
  double X[NK * ND], expected[NK], reward[NK];
} pair;

static void pair_init(pair *p, o3m_algo algo, o3m_model_kind model, uint64_t seed) {
  o3m_policy_config c;
  o3m_policy_config_default(&c);
  c.algo = algo;
  c.model = model;
  c.d = ND;
  c.n_arms = NK;
  c.max_candidates = NK;
  c.alpha = 0.5;
  c.v = 0.01;
  c.seed = seed;
  o3m_err e;
  cr_assert_eq(o3m_policy_create(&p->central, &c, &e), O3M_OK, "%s", e.msg);
  cr_assert_eq(o3m_policy_create(&p->masked, &c, &e), O3M_OK, "%s", e.msg);
  cr_assert_eq(policy_env_create(&p->env, ND, NK, 0.05, seed, "20,20,20,20,20", seed + 100),
               O3M_OK);
}

static void pair_free(pair *p) {
  o3m_policy_destroy(p->central);
  o3m_policy_destroy(p->masked);
  policy_env_destroy(p->env);
}

/* max |a - b| / max(1, |b|) over n entries */
static double maxrel(const double *a, const double *b, int n) {
  double w = 0;
  for (int i = 0; i < n; i++) {
    double s = fabs(b[i]) > 1 ? fabs(b[i]) : 1;
    double r = fabs(a[i] - b[i]) / s;
    if (r > w) w = r;
  }
  return w;
}

static void lossless_linucb(o3m_model_kind model) {
  pair p;
  pair_init(&p, O3M_ALGO_LINUCB, model, 1);
  double mc[NK], vc[NK], mm[NK], vm[NK];
  for (int t = 0; t < NT; t++) {
    cr_assert_eq(policy_env_round(p.env, p.X, p.expected, p.reward), O3M_OK);
    const double *Xm = policy_env_mask(p.env, p.X);
    cr_assert_eq(o3m_policy_stats(p.central, NK, p.X, NULL, mc, vc), O3M_OK);
    cr_assert_eq(o3m_policy_stats(p.masked, NK, Xm, NULL, mm, vm), O3M_OK);
    double em = maxrel(mm, mc, NK), ev = maxrel(vm, vc, NK);
    cr_assert_leq(em, 1e-9, "round %d: estimated reward differs by %g", t, em);
    cr_assert_leq(ev, 1e-9, "round %d: width^2 differs by %g", t, ev);
    int ac, am;
    cr_assert_eq(o3m_policy_choose(p.central, NK, p.X, NULL, &ac, NULL), O3M_OK);
    cr_assert_eq(o3m_policy_choose(p.masked, NK, Xm, NULL, &am, NULL), O3M_OK);
    cr_assert_eq(am, ac, "round %d: masked chose %d, central %d", t, am, ac);
    cr_assert_eq(o3m_policy_update(p.central, ac, p.X + ac * ND, p.reward[ac]), O3M_OK);
    cr_assert_eq(o3m_policy_update(p.masked, am, Xm + am * ND, p.reward[am]), O3M_OK);
  }
  /* the paper's Figure 4b: ||theta|| is the same */
  for (int a = 0; a < (model == O3M_MODEL_SHARED ? 1 : NK); a++)
    cr_assert_float_eq(o3m_policy_theta_norm(p.masked, a), o3m_policy_theta_norm(p.central, a),
                       1e-9);
  pair_free(&p);
}

Test(lossless, linucb_shared_same_arm_every_round, .timeout = 300) {
  lossless_linucb(O3M_MODEL_SHARED);
}

Test(lossless, linucb_disjoint_same_arm_every_round, .timeout = 300) {
  lossless_linucb(O3M_MODEL_DISJOINT);
}

/* LinTS: on a fixed history (the central run's choices, fed to both), the
 * per-arm mean x^NT theta and variance v^2 x^NT Lambda^{-1} x of the sampled
 * score agree at every round, so the sampling distributions are the same. */
static void lossless_lints(o3m_model_kind model) {
  pair p;
  pair_init(&p, O3M_ALGO_LINTS, model, 2);
  double mc[NK], vc[NK], mm[NK], vm[NK];
  for (int t = 0; t < NT; t++) {
    policy_env_round(p.env, p.X, p.expected, p.reward);
    const double *Xm = policy_env_mask(p.env, p.X);
    cr_assert_eq(o3m_policy_stats(p.central, NK, p.X, NULL, mc, vc), O3M_OK);
    cr_assert_eq(o3m_policy_stats(p.masked, NK, Xm, NULL, mm, vm), O3M_OK);
    for (int k = 0; k < NK; k++) {
      vc[k] *= 0.01 * 0.01;
      vm[k] *= 0.01 * 0.01;
    }
    double em = maxrel(mm, mc, NK), ev = maxrel(vm, vc, NK);
    cr_assert_leq(em, 1e-9, "round %d: sampled-score mean differs by %g", t, em);
    cr_assert_leq(ev, 1e-9, "round %d: sampled-score variance differs by %g", t, ev);
    int ac;
    cr_assert_eq(o3m_policy_choose(p.central, NK, p.X, NULL, &ac, NULL), O3M_OK);
    o3m_policy_update(p.central, ac, p.X + ac * ND, p.reward[ac]);
    o3m_policy_update(p.masked, ac, Xm + ac * ND, p.reward[ac]);
  }
  pair_free(&p);
}

Test(lossless, lints_shared_same_score_distribution_every_round, .timeout = 300) {
  lossless_lints(O3M_MODEL_SHARED);
}

Test(lossless, lints_disjoint_same_score_distribution_every_round, .timeout = 300) {
  lossless_lints(O3M_MODEL_DISJOINT);
}

/* Disjoint LinTS draws each candidate's score as a scalar from invariant
 * quantities, so with the same seed it agrees draw by draw. */
Test(lossless, lints_disjoint_same_seed_same_decisions, .timeout = 300) {
  pair p;
  pair_init(&p, O3M_ALGO_LINTS, O3M_MODEL_DISJOINT, 3);
  for (int t = 0; t < 2000; t++) {
    policy_env_round(p.env, p.X, p.expected, p.reward);
    const double *Xm = policy_env_mask(p.env, p.X);
    int ac, am;
    o3m_policy_choose(p.central, NK, p.X, NULL, &ac, NULL);
    o3m_policy_choose(p.masked, NK, Xm, NULL, &am, NULL);
    cr_assert_eq(am, ac, "round %d", t);
    o3m_policy_update(p.central, ac, p.X + ac * ND, p.reward[ac]);
    o3m_policy_update(p.masked, am, Xm + am * ND, p.reward[am]);
  }
  pair_free(&p);
}

/* The sampler draws from N(x^NT theta, v^2 x^NT Lambda^{-1} x): check the
 * empirical mean and variance of many draws at a fixed state, for both
 * models, central and masked. */
static void sampler_matches_distribution(o3m_model_kind model) {
  pair p;
  pair_init(&p, O3M_ALGO_LINTS, model, 4);
  o3m_policy_config c = *o3m_policy_config_of(p.central);
  o3m_policy *probe_c, *probe_m;
  c.v = 1.0; /* a large scale makes the variance easy to measure */
  cr_assert_eq(o3m_policy_create(&probe_c, &c, NULL), O3M_OK);
  cr_assert_eq(o3m_policy_create(&probe_m, &c, NULL), O3M_OK);
  for (int t = 0; t < 200; t++) {
    policy_env_round(p.env, p.X, p.expected, p.reward);
    const double *Xm = policy_env_mask(p.env, p.X);
    int a = t % NK;
    o3m_policy_update(probe_c, a, p.X + a * ND, p.reward[a]);
    o3m_policy_update(probe_m, a, Xm + a * ND, p.reward[a]);
  }
  /* One candidate, so the chosen score is the sampled score itself. */
  policy_env_round(p.env, p.X, p.expected, p.reward);
  const double *Xm = policy_env_mask(p.env, p.X);
  int arm = 3;
  o3m_policy *pols[2] = {probe_c, probe_m};
  const double *xs[2] = {p.X + arm * ND, Xm + arm * ND};
  double mean, var;
  cr_assert_eq(o3m_policy_stats(probe_c, 1, xs[0], &arm, &mean, &var), O3M_OK);
  for (int w = 0; w < 2; w++) {
    const int n = 40000;
    double s1 = 0, s2 = 0;
    for (int i = 0; i < n; i++) {
      int ch;
      double s;
      cr_assert_eq(o3m_policy_choose(pols[w], 1, xs[w], &arm, &ch, &s), O3M_OK);
      s1 += s;
      s2 += s * s;
    }
    double m = s1 / n, v = s2 / n - m * m;
    double se = sqrt(var / n);
    cr_assert_leq(fabs(m - mean), 5 * se, "%s: mean %g vs %g", w ? "masked" : "central", m,
                  mean);
    cr_assert_leq(fabs(v / var - 1), 0.05, "%s: variance %g vs %g", w ? "masked" : "central", v,
                  var);
  }
  o3m_policy_destroy(probe_c);
  o3m_policy_destroy(probe_m);
  pair_free(&p);
}

Test(lints, shared_sampler_has_the_right_distribution) {
  sampler_matches_distribution(O3M_MODEL_SHARED);
}

Test(lints, disjoint_sampler_has_the_right_distribution) {
  sampler_matches_distribution(O3M_MODEL_DISJOINT);
}

/* A policy with the defaults but for the given fields. */
static o3m_policy *make_policy(o3m_algo algo, o3m_model_kind model, int d, int n_arms,
                              int max_candidates, int refactor_every) {
  o3m_policy_config c;
  o3m_policy_config_default(&c);
  c.algo = algo;
  c.model = model;
  c.d = d;
  c.n_arms = n_arms;
  c.max_candidates = max_candidates;
  c.refactor_every = refactor_every;
  o3m_policy *p;
  o3m_err e;
  cr_assert_eq(o3m_policy_create(&p, &c, &e), O3M_OK, "%s", e.msg);
  return p;
}

static o3m_policy *small_policy(o3m_algo algo, o3m_model_kind model, int refactor_every) {
  return make_policy(algo, model, 3, 3, 4, refactor_every);
}

Test(policy, exact_ties_go_to_the_lowest_index) {
  o3m_policy *p = small_policy(O3M_ALGO_LINUCB, O3M_MODEL_SHARED, 1000);
  double X[12] = {0, 1, 0, 1, 0, 0, 0, 0, 1, 1, 0, 0};
  int ch;
  cr_assert_eq(o3m_policy_choose(p, 4, X, NULL, &ch, NULL), O3M_OK);
  cr_assert_eq(ch, 0, "all widths equal at the start: lowest index wins");
  o3m_policy_update(p, 0, X + 3, 1.0); /* reward on x = e1 */
  cr_assert_eq(o3m_policy_choose(p, 4, X, NULL, &ch, NULL), O3M_OK);
  cr_assert_eq(ch, 1, "candidates 1 and 3 are the same context; 1 wins");
  o3m_policy_destroy(p);
}

Test(policy, linucb_prefers_the_rewarded_direction) {
  o3m_policy *p = small_policy(O3M_ALGO_LINUCB, O3M_MODEL_SHARED, 1000);
  double e[9] = {1, 0, 0, 0, 1, 0, 0, 0, 1};
  for (int i = 0; i < 50; i++)
    for (int a = 0; a < 3; a++) o3m_policy_update(p, 0, e + 3 * a, a == 2 ? 1.0 : 0.0);
  int ch;
  o3m_policy_choose(p, 3, e, NULL, &ch, NULL);
  cr_assert_eq(ch, 2);
  o3m_policy_destroy(p);
}

Test(policy, rejected_input_leaves_state_unchanged) {
  o3m_algo algos[2] = {O3M_ALGO_LINUCB, O3M_ALGO_LINTS};
  for (int g = 0; g < 2; g++) {
    o3m_policy *p = small_policy(algos[g], O3M_MODEL_DISJOINT, 1000);
    o3m_policy *twin = small_policy(algos[g], O3M_MODEL_DISJOINT, 1000);
    double X[9] = {1, 2, 3, 0.5, 0, 1, -1, 1, 0}, bad[9];
    int arms[3] = {0, 1, 2}, badarms[3] = {0, 3, 1}, ch;
    memcpy(bad, X, sizeof X);
    bad[4] = NAN;
    cr_assert_eq(o3m_policy_choose(p, 3, bad, arms, &ch, NULL), O3M_ENONFINITE);
    cr_assert_eq(o3m_policy_choose(p, 0, X, arms, &ch, NULL), O3M_EINVAL);
    cr_assert_eq(o3m_policy_choose(p, 5, X, arms, &ch, NULL), O3M_EINVAL);
    cr_assert_eq(o3m_policy_choose(p, 3, X, badarms, &ch, NULL), O3M_EINVAL);
    cr_assert_eq(o3m_policy_update(p, 1, bad + 3, 1.0), O3M_ENONFINITE);
    cr_assert_eq(o3m_policy_update(p, 1, X, NAN), O3M_ENONFINITE);
    cr_assert_eq(o3m_policy_update(p, 7, X, 1.0), O3M_EINVAL);
    cr_assert_eq(o3m_policy_updates(p), 0);
    /* the rejected calls consumed no random draws and changed no statistic */
    for (int t = 0; t < 20; t++) {
      int a, b;
      double sa, sb;
      cr_assert_eq(o3m_policy_choose(p, 3, X, arms, &a, &sa), O3M_OK);
      cr_assert_eq(o3m_policy_choose(twin, 3, X, arms, &b, &sb), O3M_OK);
      cr_assert_eq(a, b);
      cr_assert_eq(sa, sb, "round %d: %.17g vs %.17g", t, sa, sb);
      o3m_policy_update(p, a, X + 3 * a, 1.0);
      o3m_policy_update(twin, b, X + 3 * b, 1.0);
    }
    o3m_policy_destroy(p);
    o3m_policy_destroy(twin);
  }
}

/* choose and update find a NaN or infinity wherever it is (the checks are
 * one dasum or ddot, o3m_policy.c), and update refuses a finite x whose
 * x x^T would overflow Lambda. Nothing refused changes the state. */
Test(policy, non_finite_input_is_found_at_every_position) {
  enum { D = 13, K = 4 };
  o3m_policy *p = make_policy(O3M_ALGO_LINUCB, O3M_MODEL_SHARED, D, 1, K, 1000);
  double X[K * D], bad[3] = {NAN, INFINITY, -INFINITY};
  int ch;
  for (int pos = 0; pos < K * D; pos++)
    for (int b = 0; b < 3; b++) {
      for (int i = 0; i < K * D; i++) X[i] = 0.1 * (i % 5) - 0.2;
      X[pos] = bad[b];
      cr_assert_eq(o3m_policy_choose(p, K, X, NULL, &ch, NULL), O3M_ENONFINITE, "pos %d", pos);
      if (pos < D)
        cr_assert_eq(o3m_policy_update(p, 0, X, 1.0), O3M_ENONFINITE, "pos %d", pos);
    }
  for (int i = 0; i < D; i++) X[i] = (i % 2 ? -1 : 1) * 1e160;
  cr_assert_eq(o3m_policy_update(p, 0, X, 1.0), O3M_ENONFINITE, "x x^T overflows");
  cr_assert_eq(o3m_policy_updates(p), 0);
  for (int i = 0; i < D; i++) X[i] = (i % 2 ? -1 : 1) * 1e150;
  cr_assert_eq(o3m_policy_update(p, 0, X, 1.0), O3M_OK, "large, but x x^T is finite");
  o3m_policy_destroy(p);
}

Test(policy, refactorization_period_does_not_change_the_model) {
  o3m_algo algos[2] = {O3M_ALGO_LINUCB, O3M_ALGO_LINTS};
  for (int g = 0; g < 2; g++) {
    o3m_policy *every = small_policy(algos[g], O3M_MODEL_SHARED, 1);
    o3m_policy *rarely = small_policy(algos[g], O3M_MODEL_SHARED, 100000);
    double x[3];
    for (int t = 0; t < 3000; t++) {
      x[0] = sin(t);
      x[1] = cos(3.0 * t);
      x[2] = 0.5 * sin(7.0 * t);
      o3m_policy_update(every, 0, x, x[0] > 0);
      o3m_policy_update(rarely, 0, x, x[0] > 0);
    }
    double a[3], b[3], m1, m2, v1, v2;
    o3m_policy_theta(every, 0, a);
    o3m_policy_theta(rarely, 0, b);
    for (int i = 0; i < 3; i++) cr_assert_float_eq(a[i], b[i], 1e-9);
    o3m_policy_stats(every, 1, x, NULL, &m1, &v1);
    o3m_policy_stats(rarely, 1, x, NULL, &m2, &v2);
    cr_assert_float_eq(v1, v2, 1e-12);
    o3m_policy_destroy(every);
    o3m_policy_destroy(rarely);
  }
}

/* Observations reach Lambda in blocks (o3m_policy.c). Whatever the phase of
 * the block, Lambda must be the exact sum: the refactorized theta solves
 * (lambda I + sum x x^T) theta = sum r x, checked against a direct solve;
 * and the held rows travel with the state image, so a policy restored in
 * the middle of a block continues bit for bit like the original. */
Test(policy, lambda_blocks_hold_the_exact_sums) {
  int counts[5] = {1, 15, 16, 17, 40};
  for (int c = 0; c < 5; c++) {
    o3m_policy *p = small_policy(O3M_ALGO_LINUCB, O3M_MODEL_SHARED, 100000);
    double A[9] = {1, 0, 0, 0, 1, 0, 0, 0, 1}, b[3] = {0, 0, 0}, x[3];
    for (int t = 0; t < counts[c]; t++) {
      x[0] = sin(t + 1.0);
      x[1] = cos(2.0 * t);
      x[2] = 0.3 + 0.1 * t;
      double r = 0.5 * x[0] - x[2];
      cr_assert_eq(o3m_policy_update(p, 0, x, r), O3M_OK);
      for (int i = 0; i < 3; i++) {
        b[i] += r * x[i];
        for (int j = 0; j < 3; j++) A[3 * i + j] += x[i] * x[j];
      }
    }
    /* Direct solve by Cramer's rule (3 x 3). */
    double det = A[0] * (A[4] * A[8] - A[5] * A[7]) - A[1] * (A[3] * A[8] - A[5] * A[6]) +
                 A[2] * (A[3] * A[7] - A[4] * A[6]);
    double want[3];
    for (int k = 0; k < 3; k++) {
      double M[9];
      memcpy(M, A, sizeof M);
      for (int i = 0; i < 3; i++) M[3 * i + k] = b[i];
      want[k] = (M[0] * (M[4] * M[8] - M[5] * M[7]) - M[1] * (M[3] * M[8] - M[5] * M[6]) +
                 M[2] * (M[3] * M[7] - M[4] * M[6])) / det;
    }
    /* Restore a twin from the image, mid-block, then run both on. */
    o3m_policy *twin = small_policy(O3M_ALGO_LINUCB, O3M_MODEL_SHARED, 100000);
    size_t len = o3m_policy_state_size(p);
    unsigned char *img = malloc(len), *img2 = malloc(len);
    cr_assert_eq(o3m_policy_state_export(p, img, len), O3M_OK);
    cr_assert_eq(o3m_policy_state_import(twin, img, len, NULL), O3M_OK);
    cr_assert_eq(o3m_policy_refactor(p, -1), O3M_OK);
    double th[3];
    o3m_policy_theta(p, 0, th);
    for (int i = 0; i < 3; i++)
      cr_assert_float_eq(th[i], want[i], 1e-12 * (1 + fabs(want[i])),
                         "%d updates: theta[%d] = %.17g, direct solve %.17g", counts[c], i,
                         th[i], want[i]);
    cr_assert_eq(o3m_policy_refactor(twin, -1), O3M_OK);
    for (int t = 0; t < 23; t++) {
      x[0] = cos(t * 0.7);
      x[1] = 1.0;
      x[2] = sin(t * 1.3);
      cr_assert_eq(o3m_policy_update(p, 0, x, x[1]), O3M_OK);
      cr_assert_eq(o3m_policy_update(twin, 0, x, x[1]), O3M_OK);
    }
    cr_assert_eq(o3m_policy_state_export(p, img, len), O3M_OK);
    cr_assert_eq(o3m_policy_state_export(twin, img2, len), O3M_OK);
    cr_assert_eq(memcmp(img, img2, len), 0, "%d updates: restored twin diverged", counts[c]);
    free(img);
    free(img2);
    o3m_policy_destroy(p);
    o3m_policy_destroy(twin);
  }
}

/* Disjoint models keep the chosen candidate's w = Ainv_a x from choose and
 * reuse it in the update (o3m_policy.c). The update must be bit for bit the
 * one a policy that never chose makes, or recovery (which replays updates
 * without choosing) would drift from the live model. The observation's x
 * sits at an odd offset in another buffer than the candidates, and updates
 * with another x, or the same x for another arm, must not reuse w. */
static void kept_w_case(o3m_algo algo) {
  enum { D = 37, A = 4 };
  o3m_policy *chooser = make_policy(algo, O3M_MODEL_DISJOINT, D, A, A, 50);
  o3m_policy *plain = make_policy(algo, O3M_MODEL_DISJOINT, D, A, A, 50);
  size_t len = o3m_policy_state_size(chooser);
  unsigned char *ia = malloc(len), *ib = malloc(len);
  double X[A * D], X2[A * D], buf[D + 3], *x = buf + 1 + 0 * 2;
  int arms[A] = {0, 1, 2, 3};
  for (int t = 0; t < 300; t++) {
    for (int i = 0; i < A * D; i++) {
      X[i] = sin(0.37 * i + 1.3 * t);
      X2[i] = cos(0.11 * i - 0.7 * t);
    }
    /* Both draw the same number of Gaussians (LinTS); chooser keeps a
     * choice from X, plain one from X2. */
    int ch, ch2;
    cr_assert_eq(o3m_policy_choose(chooser, A, X2, arms, &ch2, NULL), O3M_OK);
    cr_assert_eq(o3m_policy_choose(chooser, A, X, arms, &ch, NULL), O3M_OK);
    cr_assert_eq(o3m_policy_choose(plain, A, X, arms, &ch2, NULL), O3M_OK);
    cr_assert_eq(o3m_policy_choose(plain, A, X2, arms, &ch2, NULL), O3M_OK);
    int arm = ch, kind = t % 5;
    x = buf + (t % 3);
    memcpy(x, X + (size_t)ch * D, sizeof(double) * D);
    if (kind == 3) x[t % D] += 0.25;  /* another x: no reuse */
    if (kind == 4) arm = (ch + 1) % A; /* the same x for another arm: no reuse */
    double r = 0.1 * (t % 7) - 0.3;
    cr_assert_eq(o3m_policy_update(chooser, arm, x, r), O3M_OK);
    cr_assert_eq(o3m_policy_update(plain, arm, x, r), O3M_OK);
    cr_assert_eq(o3m_policy_state_export(chooser, ia, len), O3M_OK);
    cr_assert_eq(o3m_policy_state_export(plain, ib, len), O3M_OK);
    cr_assert_eq(memcmp(ia, ib, len), 0, "%s, round %d (kind %d): states differ",
                 o3m_algo_name(algo), t, kind);
  }
  free(ia);
  free(ib);
  o3m_policy_destroy(chooser);
  o3m_policy_destroy(plain);
}

Test(policy, disjoint_update_after_choose_is_bit_exact) {
  kept_w_case(O3M_ALGO_LINUCB);
  kept_w_case(O3M_ALGO_LINTS);
}

/* A disjoint model keeps its arms' inverses two to an array (o3m_policy.c,
 * "Paired triangles"). Each arm must still behave as a model of its own:
 * here every arm of 3- and 4-arm disjoint LinUCB policies is compared with
 * a one-model (shared) policy fed only that arm's observations, with
 * refactorizations along the way; widths and means agree to rounding. */
Test(policy, paired_arms_behave_as_separate_models) {
  enum { D = 9 };
  for (int na = 3; na <= 4; na++) {
    o3m_policy *dis = make_policy(O3M_ALGO_LINUCB, O3M_MODEL_DISJOINT, D, na, na, 37), *one[4];
    for (int a = 0; a < na; a++) one[a] = make_policy(O3M_ALGO_LINUCB, O3M_MODEL_SHARED, D, 1, 1, 37);
    double X[4 * D];
    int arms[4] = {0, 1, 2, 3};
    for (int t = 0; t < 400; t++) {
      for (int i = 0; i < na * D; i++) X[i] = sin(0.9 * i + 0.31 * t) + 0.2 * cos(t);
      double mean[4], var[4];
      cr_assert_eq(o3m_policy_stats(dis, na, X, arms, mean, var), O3M_OK);
      for (int a = 0; a < na; a++) {
        double m1, v1;
        cr_assert_eq(o3m_policy_stats(one[a], 1, X + a * D, NULL, &m1, &v1), O3M_OK);
        cr_assert_float_eq(var[a], v1, 1e-12 * v1, "%d arms, round %d, arm %d: var %.17g vs %.17g",
                           na, t, a, var[a], v1);
        cr_assert_float_eq(mean[a], m1, 1e-12 * (1 + fabs(m1)), "round %d, arm %d: mean", t, a);
      }
      int arm = (t * 7) % na;
      double r = X[arm * D] - 0.5 * X[arm * D + 3];
      cr_assert_eq(o3m_policy_update(dis, arm, X + arm * D, r), O3M_OK);
      cr_assert_eq(o3m_policy_update(one[arm], 0, X + arm * D, r), O3M_OK);
    }
    cr_assert_eq(o3m_policy_health_check(dis, O3M_POLICY_HEALTH_DEEP, NULL), O3M_OK);
    o3m_policy_destroy(dis);
    for (int a = 0; a < na; a++) o3m_policy_destroy(one[a]);
  }
}

Test(policy, config_errors_name_the_field) {
  o3m_policy_config c;
  o3m_policy_config_default(&c);
  c.d = 5;
  c.lambda = 0;
  o3m_policy *p;
  o3m_err e;
  cr_assert_eq(o3m_policy_create(&p, &c, &e), O3M_EINVAL);
  cr_assert(strstr(e.msg, "lambda") != NULL, "%s", e.msg);
  c.lambda = 1;
  c.model = O3M_MODEL_DISJOINT;
  c.n_arms = 0;
  cr_assert_eq(o3m_policy_create(&p, &c, &e), O3M_EINVAL);
  cr_assert(strstr(e.msg, "n_arms") != NULL, "%s", e.msg);
  o3m_algo al;
  cr_assert_eq(o3m_algo_parse("ucb", &al), O3M_EINVAL);
}

/* Regression (found by fuzz_policy_state): a LinTS choice that failed with
 * non-finite scores after drawing had already advanced the sampler, although
 * a failed call must leave the policy unchanged. Contexts of 1e300 pass the
 * input check (their sum of magnitudes is finite) but make every sampled
 * score overflow; afterwards the policy must draw exactly what a twin that
 * never saw the failed call draws. */
Test(policy, regression_failed_lints_choice_leaves_sampler_unchanged) {
  o3m_model_kind models[2] = {O3M_MODEL_SHARED, O3M_MODEL_DISJOINT};
  for (int m = 0; m < 2; m++) {
    o3m_policy_config c;
    o3m_policy_config_default(&c);
    c.algo = O3M_ALGO_LINTS;
    c.model = models[m];
    c.d = 3;
    c.n_arms = 2;
    c.max_candidates = 2;
    c.v = 1e10;
    o3m_policy *p, *twin;
    cr_assert_eq(o3m_policy_create(&p, &c, NULL), O3M_OK);
    cr_assert_eq(o3m_policy_create(&twin, &c, NULL), O3M_OK);
    double huge[6] = {1e300, 1e300, 1e300, 1e300, 1e300, 1e300};
    double X[6] = {1, 0, 0, 0, 1, 0};
    int ch, a, b;
    double sa, sb;
    cr_assert_eq(o3m_policy_choose(p, 2, huge, NULL, &ch, NULL), O3M_ENONFINITE);
    cr_assert_eq(o3m_policy_choose(p, 2, X, NULL, &a, &sa), O3M_OK);
    cr_assert_eq(o3m_policy_choose(twin, 2, X, NULL, &b, &sb), O3M_OK);
    cr_assert_eq(a, b);
    cr_assert_eq(sa, sb, "%s: %.17g vs %.17g: the failed call moved the sampler",
                 o3m_model_name(models[m]), sa, sb);
    o3m_policy_destroy(p);
    o3m_policy_destroy(twin);
  }
}

/* ---------------------------------------------------------------- batches */

/* o3m_policy_choose_batch against the per-round calls it stands for: two
 * twins with one config, one choosing each batch with one call, the other
 * round by round in order; both learn the same rewards between batches.
 * Every round must get the same rc, index and score (to 1e-12 relative),
 * and after every batch the twins' state images (sampler included) must be
 * equal byte for byte, so that a batch path drawing in another order,
 * scoring a round against another round's draws or keeping the draws of a
 * failed round fails here. The batches mix K from 1 to max_candidates,
 * refused rounds (K = 0, a NaN, a bad arm) that must draw nothing, and
 * more rows and rounds than one scoring call takes (O3M_POLICY_BATCH_BYTES
 * is 163 rows at d = 200; O3M_POLICY_BATCH_ROUNDS), so they are scored in
 * several calls. With
 * huge set, some rounds have contexts of 1e300: they pass the input check
 * and their sampled scores overflow (v = 1e10), so LinTS must give their
 * draws back to the rounds after them. */
enum { BD = 200, BK = 25, BMAX = 80, BN = 14 };

typedef struct batch_twins {
  o3m_policy *batch, *round;
  o3m_rng *data;
  double X[BMAX * BK * BD];
  int arms[BMAX * BK];
  o3m_policy_round r[BMAX];
  unsigned char *img_a, *img_b;
  size_t img_len;
} batch_twins;

static void twins_init(batch_twins *t, o3m_algo algo, o3m_model_kind model, double v) {
  o3m_policy_config c;
  o3m_policy_config_default(&c);
  c.algo = algo;
  c.model = model;
  c.d = BD;
  c.n_arms = 7;
  c.max_candidates = BK;
  c.v = v;
  c.seed = 42;
  c.refactor_every = 50;
  o3m_err e;
  cr_assert_eq(o3m_policy_create(&t->batch, &c, &e), O3M_OK, "%s", e.msg);
  cr_assert_eq(o3m_policy_create(&t->round, &c, &e), O3M_OK, "%s", e.msg);
  cr_assert_eq(o3m_rng_create_seeded_insecure(&t->data, 7), O3M_OK);
  t->img_len = o3m_policy_state_size(t->batch);
  t->img_a = malloc(t->img_len);
  t->img_b = malloc(t->img_len);
  cr_assert(t->img_a && t->img_b);
}

static void twins_free(batch_twins *t) {
  o3m_policy_destroy(t->batch);
  o3m_policy_destroy(t->round);
  o3m_rng_destroy(t->data);
  free(t->img_a);
  free(t->img_b);
}

/* Fills n rounds of batch number b: K cycling over 1..BK, every 7th round
 * refused for one of three reasons, and with huge every 5th round's
 * contexts 1e300. */
static void twins_rounds(batch_twins *t, int b, int n, int huge) {
  size_t off = 0;
  for (int i = 0; i < n; i++) {
    int K = 1 + (i * 11 + b * 5) % BK;
    double *X = t->X + off * BD;
    int *arms = t->arms + off;
    cr_assert_eq(o3m_rng_gaussian(t->data, X, (long)K * BD), O3M_OK);
    for (int k = 0; k < K; k++) arms[k] = (i + k + b) % 7;
    t->r[i] = (o3m_policy_round){.K = K, .X = X, .arms = arms, .chosen = -1, .rc = 99};
    if (i % 7 == 3) {
      int why = (i / 7 + b) % 3;
      if (why == 0) t->r[i].K = 0;
      else if (why == 1) X[(size_t)(K - 1) * BD] = NAN;
      else arms[0] = 7;
    } else if (huge && i % 5 == 1) {
      for (int k = 0; k < K * BD; k++) X[k] = 1e300 / BD;
    }
    off += (size_t)K;
  }
}

static void twins_run(o3m_algo algo, o3m_model_kind model, double v, int huge) {
  batch_twins *t = calloc(1, sizeof *t);
  cr_assert(t);
  twins_init(t, algo, model, v);
  const char *an = o3m_algo_name(algo), *mn = o3m_model_name(model);
  const int lens[BN] = {2, 3, 1, 8, 5, 80, 4, 2, 70, 0, 6, 65, 3, 9};
  int failed = 0, chose = 0, overflowed = 0;
  for (int b = 0; b < BN; b++) {
    int n = lens[b];
    twins_rounds(t, b, n, huge);
    cr_assert_eq(o3m_policy_choose_batch(t->batch, n, t->r), O3M_OK);
    for (int i = 0; i < n; i++) {
      const o3m_policy_round *q = &t->r[i];
      int ch = -1;
      double sc = 0;
      int rc = o3m_policy_choose(t->round, q->K, q->X, q->arms, &ch, &sc);
      cr_assert_eq(q->rc, rc, "%s %s batch %d round %d: rc %d, per round %d", an, mn, b, i,
                   q->rc, rc);
      if (rc) {
        failed++;
        /* a huge round's scores overflowed after its draws */
        if (huge && i % 5 == 1 && i % 7 != 3) overflowed++;
        continue;
      }
      chose++;
      cr_assert_eq(q->chosen, ch, "%s %s batch %d round %d: chose %d, per round %d", an, mn, b,
                   i, q->chosen, ch);
      double rel = fabs(q->score - sc) / fmax(1.0, fabs(sc));
      cr_assert_leq(rel, 1e-12, "%s %s batch %d round %d: score %.17g, per round %.17g", an,
                    mn, b, i, q->score, sc);
    }
    cr_assert_eq(o3m_policy_state_export(t->batch, t->img_a, t->img_len), O3M_OK);
    cr_assert_eq(o3m_policy_state_export(t->round, t->img_b, t->img_len), O3M_OK);
    cr_assert(memcmp(t->img_a, t->img_b, t->img_len) == 0,
              "%s %s after batch %d: the state images differ (sampler or model)", an, mn, b);
    /* Both learn the same rewards: each chosen context, rewarded with its
     * first coordinate's sign, so theta and the factor move between
     * batches. */
    for (int i = 0; i < n; i++) {
      const o3m_policy_round *q = &t->r[i];
      if (q->rc) continue;
      const double *x = q->X + (size_t)q->chosen * BD;
      if (fabs(x[0]) > 1e100) continue; /* a huge round's: no update takes it */
      int arm = q->arms[q->chosen];
      double rw = x[0] > 0 ? 1.0 : 0.0;
      cr_assert_eq(o3m_policy_update(t->batch, arm, x, rw), O3M_OK);
      cr_assert_eq(o3m_policy_update(t->round, arm, x, rw), O3M_OK);
    }
  }
  cr_assert_gt(chose, 100);
  cr_assert_gt(failed, 10);
  if (huge) cr_assert_gt(overflowed, 5, "%s %s: no round failed after drawing", an, mn);
  twins_free(t);
  free(t);
}

Test(batch, linucb_shared_equals_per_round_calls) {
  twins_run(O3M_ALGO_LINUCB, O3M_MODEL_SHARED, 0.01, 0);
}

Test(batch, lints_shared_equals_per_round_calls_and_sampler) {
  twins_run(O3M_ALGO_LINTS, O3M_MODEL_SHARED, 0.01, 0);
}

Test(batch, lints_shared_failed_round_gives_its_draws_back) {
  twins_run(O3M_ALGO_LINTS, O3M_MODEL_SHARED, 1e10, 1);
}

Test(batch, linucb_shared_huge_contexts_fail_alone) {
  twins_run(O3M_ALGO_LINUCB, O3M_MODEL_SHARED, 0.01, 1);
}

Test(batch, disjoint_models_equal_per_round_calls) {
  twins_run(O3M_ALGO_LINUCB, O3M_MODEL_DISJOINT, 0.01, 0);
  twins_run(O3M_ALGO_LINTS, O3M_MODEL_DISJOINT, 0.01, 0);
}

Test(batch, bad_arguments_are_refused) {
  o3m_policy *p = small_policy(O3M_ALGO_LINTS, O3M_MODEL_SHARED, 1000);
  o3m_policy_round r;
  cr_assert_eq(o3m_policy_choose_batch(p, -1, &r), O3M_EINVAL);
  cr_assert_eq(o3m_policy_choose_batch(p, 2, NULL), O3M_EINVAL);
  cr_assert_eq(o3m_policy_choose_batch(p, 0, NULL), O3M_OK);
  o3m_policy_destroy(p);
}
