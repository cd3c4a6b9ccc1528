/* test_p2b.c -- P2B (eval/peers/p2b): the privacy accounting against the paper's
 * figures, the shuffler's threshold and shuffle, the k-means encoder, the
 * context normalization, and the experiment's cold / warm ordering on a
 * data set where the label is a function of the context and on P2B's
 * synthetic benchmark. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "p2b_kmeans.h"
#include "p2b_privacy.h"
#include "p2b_shuffler.h"
#include "p2b_sim.h"

Test(p2b_privacy, epsilon_is_ln2_at_half_participation) {
  double eps = -1;
  cr_assert_eq(p2b_epsilon(0.5, 0.0, &eps, NULL), 0);
  /* The paper: "P2B achieves an epsilon ~ 0.693" at p = 0.5. */
  cr_assert(fabs(eps - 0.693) < 5e-4, "epsilon %.6f, paper 0.693", eps);
  cr_assert(fabs(eps - log(2.0)) < 1e-12, "epsilon %.17g, ln 2 %.17g", eps, log(2.0));
  /* Section 5.1: p from 0.5 to 0.25 takes epsilon from 0.69 to ~0.28. */
  cr_assert_eq(p2b_epsilon(0.25, 0.0, &eps, NULL), 0);
  cr_assert(fabs(eps - 0.2877) < 1e-3, "epsilon %.6f at p = 0.25, paper ~0.28", eps);
  /* A nonzero crowd-blending epsilon only adds to it. */
  double eps1;
  cr_assert_eq(p2b_epsilon(0.25, 0.1, &eps1, NULL), 0);
  cr_assert(eps1 > eps, "%.6f <= %.6f", eps1, eps);
}

Test(p2b_privacy, bad_input_is_refused_and_changes_nothing) {
  double eps = 42;
  o3m_err e;
  cr_assert_eq(p2b_epsilon(1.0, 0.0, &eps, &e), O3M_EINVAL);
  cr_assert(strstr(e.msg, "p = 1"), "%s", e.msg);
  cr_assert_eq(p2b_epsilon(0.0, 0.0, &eps, NULL), O3M_EINVAL);
  cr_assert_eq(p2b_epsilon(NAN, 0.0, &eps, NULL), O3M_EINVAL);
  cr_assert_eq(p2b_epsilon(0.5, -1.0, &eps, NULL), O3M_EINVAL);
  cr_assert_eq(eps, 42);
  double sc = 7;
  cr_assert_eq(p2b_delta_exponent(0, 0.5, &sc, NULL), O3M_EINVAL);
  cr_assert_eq(p2b_delta_exponent(10, 0.5, &sc, NULL), 0);
  cr_assert_float_eq(sc, 2.5, 1e-15);
}

Test(p2b_shuffler, drops_codes_seen_fewer_than_l_times_and_permutes_the_rest) {
  p2b_shuffler *s;
  cr_assert_eq(p2b_shuffler_create(&s, 4, 3, 16, 7, NULL), 0);
  /* Code 0 three times (kept), code 1 twice (dropped), code 2 four times. */
  int codes[] = {0, 1, 2, 0, 2, 1, 2, 0, 2};
  for (int i = 0; i < 9; i++) {
    p2b_tuple t = {codes[i], i, (double)i};
    cr_assert_eq(p2b_shuffler_add(s, &t, NULL), 0);
  }
  const p2b_tuple *out;
  long n, dropped;
  p2b_shuffler_release(s, &out, &n, &dropped);
  cr_assert_eq(n, 7);
  cr_assert_eq(dropped, 2);
  int seen[9] = {0}, in_order = 1, prev = -1;
  for (long i = 0; i < n; i++) {
    cr_assert_neq(out[i].code, 1, "a code seen twice passed threshold 3");
    cr_assert_eq(codes[out[i].action], out[i].code, "a tuple was altered");
    seen[out[i].action]++;
    if (out[i].action < prev) in_order = 0;
    prev = out[i].action;
  }
  for (int i = 0; i < 9; i++) cr_assert_eq(seen[i], codes[i] == 1 ? 0 : 1, "tuple %d", i);
  cr_assert(!in_order, "the batch came out in arrival order (seed 7 shuffles it)");
  /* The next batch starts empty, with fresh counts. */
  p2b_tuple t = {0, 0, 1.0};
  for (int i = 0; i < 2; i++) cr_assert_eq(p2b_shuffler_add(s, &t, NULL), 0);
  p2b_shuffler_release(s, &out, &n, &dropped);
  cr_assert_eq(n, 0, "two tuples of code 0 must not pass l = 3 by counts of the last batch");
  p2b_shuffler_destroy(s);
}

Test(p2b_shuffler, refuses_bad_tuples_and_a_full_batch) {
  p2b_shuffler *s;
  o3m_err e;
  cr_assert_eq(p2b_shuffler_create(&s, 2, 1, 1, 1, NULL), 0);
  p2b_tuple bad = {2, 0, 1.0};
  cr_assert_eq(p2b_shuffler_add(s, &bad, &e), O3M_EINVAL);
  cr_assert(strstr(e.msg, "code 2"), "%s", e.msg);
  p2b_tuple t = {1, 0, 1.0};
  cr_assert_eq(p2b_shuffler_add(s, &t, NULL), 0);
  cr_assert_eq(p2b_shuffler_add(s, &t, NULL), O3M_EFULL);
  const p2b_tuple *out;
  long n;
  p2b_shuffler_release(s, &out, &n, NULL);
  cr_assert_eq(n, 1, "the refused tuples were queued");
  p2b_shuffler_destroy(s);
  cr_assert_eq(p2b_shuffler_create(&s, 2, 0, 1, 1, NULL), O3M_EINVAL);
}

Test(p2b_kmeans, finds_separated_blobs) {
  enum { N = 300, D = 2 };
  double X[N * D];
  uint64_t r = 5;
  for (int i = 0; i < N; i++) {
    double cx = (i % 3) * 10.0, cy = (i % 3 == 1) ? 10.0 : 0.0;
    r = r * 6364136223846793005ull + 1442695040888963407ull;
    X[i * D] = cx + ((double)(r >> 40) / (1 << 24) - 0.5);
    X[i * D + 1] = cy + ((double)((r >> 16) & 0xffffff) / (1 << 24) - 0.5);
  }
  p2b_kmeans *km;
  cr_assert_eq(p2b_kmeans_train(&km, X, N, D, 3, 50, 9, NULL), 0);
  /* Points of one blob share a code, and different blobs get different codes. */
  int code[3];
  for (int b = 0; b < 3; b++) code[b] = p2b_kmeans_encode(km, X + b * D);
  cr_assert(code[0] != code[1] && code[1] != code[2] && code[0] != code[2]);
  for (int i = 0; i < N; i++) cr_assert_eq(p2b_kmeans_encode(km, X + i * D), code[i % 3], "point %d", i);
  const double *c1 = p2b_kmeans_centroid(km, code[1]);
  cr_assert(fabs(c1[0] - 10.0) < 0.2 && fabs(c1[1] - 10.0) < 0.2, "centroid (%g, %g)", c1[0], c1[1]);
  cr_assert(p2b_kmeans_inertia(km, X, N) < 0.2);
  cr_assert_null(p2b_kmeans_centroid(km, 3));
  p2b_kmeans_destroy(km);
  o3m_err e;
  cr_assert_eq(p2b_kmeans_train(&km, X, 2, D, 3, 5, 1, &e), O3M_EINVAL);
  cr_assert(strstr(e.msg, "k = 3"), "%s", e.msg);
  X[7] = INFINITY;
  cr_assert_eq(p2b_kmeans_train(&km, X, N, D, 3, 5, 1, NULL), O3M_ENONFINITE);
}

Test(p2b_sim, normalize_puts_contexts_on_the_tenths_grid) {
  double x[4] = {1, 1, 1, 0};
  p2b_normalize_q1(4, x);
  /* 1/3 each: 3.33 tenths, floors 3 + 3 + 3, the missing tenth to the first. */
  cr_assert_float_eq(x[0], 0.4, 1e-15);
  cr_assert_float_eq(x[1], 0.3, 1e-15);
  cr_assert_float_eq(x[2], 0.3, 1e-15);
  cr_assert_float_eq(x[3], 0.0, 1e-15);
  double z[3] = {0, 0, 0};
  cr_assert_eq(p2b_normalize_q1(3, z), 0);
  cr_assert_float_eq(z[0] + z[1] + z[2], 1.0, 1e-12);
  double big[P2B_MAX_D + 1] = {1};
  cr_assert_eq(p2b_normalize_q1(P2B_MAX_D + 1, big), O3M_EINVAL);
  cr_assert_eq(big[0], 1.0, "a refused vector was changed");
}

/* A data set whose label is the context's largest coordinate: shared data
 * must help, so warm agents (private and non-private) beat cold ones. */
Test(p2b_sim, warm_agents_beat_cold_ones_when_the_label_follows_the_context) {
  enum { D = 4, N = 400 };
  double X[N * D];
  int label[N];
  uint64_t r = 11;
  for (int i = 0; i < N; i++) {
    int best = i % D;
    for (int j = 0; j < D; j++) {
      r = r * 6364136223846793005ull + 1442695040888963407ull;
      X[i * D + j] = (j == best ? 1.0 : 0.0) + 0.3 * (double)(r >> 40) / (1 << 24);
    }
    p2b_normalize_q1(D, X + i * D);
    label[i] = best;
  }
  p2b_env env = {.d = D, .n_arms = D, .n_pool = N, .X = X, .label = label};
  p2b_config c;
  p2b_config_default(&c);
  c.users = 600;
  c.t = 5;
  c.k = 8;
  p2b_result a, b;
  cr_assert_eq(p2b_sim_run(&env, &c, &a, NULL), 0);
  cr_assert_float_eq(a.epsilon, log(2.0), 1e-12);
  cr_assert_eq(a.participants, 420);
  cr_assert(a.shared > 100 && a.shared <= 420, "%ld shared", a.shared);
  cr_assert_eq(a.released + a.dropped, a.shared);
  cr_assert(a.released > 0);
  cr_assert(a.warm_private > a.cold + 0.1, "private %.3f, cold %.3f", a.warm_private, a.cold);
  cr_assert(a.warm_central > a.cold + 0.1, "central %.3f, cold %.3f", a.warm_central, a.cold);
  /* The same seed gives the same run, bit for bit. */
  cr_assert_eq(p2b_sim_run(&env, &c, &b, NULL), 0);
  cr_assert(a.cold == b.cold && a.warm_private == b.warm_private && a.warm_central == b.warm_central);
  /* A threshold above every code's count releases nothing: warm private
   * agents are then cold agents acting on centroids. */
  c.l = 1000;
  cr_assert_eq(p2b_sim_run(&env, &c, &b, NULL), 0);
  cr_assert_eq(b.released, 0);
  cr_assert(b.warm_private < a.warm_private, "%.3f vs %.3f", b.warm_private, a.warm_private);
}

/* P2B 5.1's claim on its synthetic benchmark (Fig. 4, |A| = 10, d = 10,
 * t = 10): prior interaction data "more than doubles" the reward of the
 * learned policies, non-private ahead of private. It holds with the map the
 * artifact ran (linear); with the softmax of the paper's equation 4 every arm
 * pays about beta / |A| and sharing cannot help much, which is what the
 * first implementation measured. */
Test(p2b_sim, synthetic_warm_agents_more_than_double_cold_ones) {
  p2b_env env = {.d = 10, .n_arms = 10, .beta = 0.1, .sigma = 0.01, .map = P2B_MAP_LINEAR,
                 .ctx = P2B_CTX_UNIFORM};
  p2b_config c;
  p2b_config_default(&c);
  c.users = 6000;
  c.k = 256;
  c.kmeans_points = 5000;
  p2b_result a, b;
  o3m_err e;
  cr_assert_eq(p2b_sim_run(&env, &c, &a, &e), 0, "%s", e.msg);
  cr_assert_eq(a.test_interactions, 18000);
  cr_assert(a.released > a.shared / 2, "%ld of %ld released", a.released, a.shared);
  cr_assert(a.warm_private > 2.0 * a.cold, "private %.5f, cold %.5f", a.warm_private, a.cold);
  cr_assert(a.warm_central > 2.0 * a.cold, "central %.5f, cold %.5f", a.warm_central, a.cold);
  cr_assert(a.warm_central > a.warm_private, "central %.5f, private %.5f", a.warm_central,
            a.warm_private);
  env.map = P2B_MAP_SOFTMAX;
  cr_assert_eq(p2b_sim_run(&env, &c, &b, &e), 0, "%s", e.msg);
  cr_assert(b.cold > 0.008 && b.cold < 0.012, "softmax cold %.5f, beta / |A| = 0.01", b.cold);
  cr_assert(b.warm_private < 1.2 * b.cold && b.warm_central < 1.2 * b.cold,
            "softmax: cold %.5f, private %.5f, central %.5f", b.cold, b.warm_private,
            b.warm_central);
  /* A map or context kind outside the enums is named. */
  env.map = (p2b_map)7;
  cr_assert_eq(p2b_sim_run(&env, &c, &b, &e), O3M_EINVAL);
  cr_assert(strstr(e.msg, "preference map 7"), "%s", e.msg);
}

Test(p2b_sim, bad_config_is_named) {
  double X[4] = {1, 0, 0, 1};
  int label[2] = {0, 1};
  p2b_env env = {.d = 2, .n_arms = 2, .n_pool = 2, .X = X, .label = label};
  p2b_config c;
  p2b_config_default(&c);
  c.users = 10;
  p2b_result r = {.cold = 42};
  o3m_err e;
  cr_assert_eq(p2b_sim_run(&env, &c, &r, &e), O3M_EINVAL);
  cr_assert(strstr(e.msg, "k = 1024"), "%s", e.msg);
  c.k = 2;
  c.p = 1.0;
  cr_assert_eq(p2b_sim_run(&env, &c, &r, &e), O3M_EINVAL);
  cr_assert(strstr(e.msg, "p = 1"), "%s", e.msg);
  cr_assert_eq(r.cold, 42);
}
