/* test_he.c -- the HE baseline (eval/peers/he/bl_he.h): the statistic
 * computed under Paillier with one masking round equals the plaintext one
 * up to the fixed point, bytes, rounds and operation counts are exactly
 * what the protocol sends and does, and the refusals (a non-positive-
 * definite Ainv, a key too small for the masks). A 1024-bit key keeps the
 * test fast; the arithmetic does not depend on the size. */
#include <criterion/criterion.h>
#include <math.h>

#include "bl_he.h"

enum { K = 3, D = 6 };

static double X[K * D], theta[D], A[D * D];

static void fill(void) {
  for (int i = 0; i < K * D; i++) X[i] = sin(0.7 * i + 0.3) * (i % 3 == 0 ? -1.5 : 0.8);
  for (int i = 0; i < D; i++) theta[i] = cos(1.3 * i) - 0.2;
  for (int i = 0; i < D; i++)
    for (int j = 0; j < D; j++) A[i * D + j] = (i == j ? 0.9 : 0.0) + 0.1 / (1.0 + abs(i - j));
}

static bl_he *make(void) {
  bl_he_config c;
  bl_he_config_default(&c);
  c.bits = 1024;
  bl_he *h = NULL;
  o3m_err e;
  cr_assert_eq(bl_he_create(&h, &c, &e), 0, "%s", e.msg);
  return h;
}

Test(he, round_matches_plaintext_with_exact_counts, .timeout = 120) {
  fill();
  int dims[3] = {2, 2, 2};
  bl_round r = {.d = D, .K = K, .N = 3, .dims = dims, .X = X, .theta = theta, .Ainv = A};
  bl_he *h = make();
  double lin[K], quad[K], pl[K], pq[K];
  bl_cost c;
  o3m_err e;
  cr_assert_eq(bl_he_round(h, &r, lin, quad, &c, &e), 0, "%s", e.msg);
  cr_assert_eq(bl_round_plain(&r, pl, pq, &e), 0, "%s", e.msg);
  for (int k = 0; k < K; k++) {
    cr_assert(fabs(lin[k] - pl[k]) < 1e-5, "lin[%d] %.9g vs %.9g", k, lin[k], pl[k]);
    cr_assert(fabs(quad[k] - pq[k]) < 1e-5, "quad[%d] %.9g vs %.9g", k, quad[k], pq[k]);
  }
  cr_assert(c.max_abs_err < 1e-5, "err %g", c.max_abs_err);
  /* 1024-bit n: ciphertexts 256 bytes, plaintexts 128. Passive parties send
   * K 4 ciphertexts, the evaluator K (d + 2), the key holder 2 K
   * plaintexts. */
  cr_assert_eq(c.bytes, 3u * 4u * 256u + 3u * 8u * 256u + 6u * 128u);
  cr_assert_eq(c.rounds, 3);
  bl_he_stats st;
  bl_he_stats_get(h, &st);
  cr_assert_eq(st.n_dec, K * (D + 2));
  cr_assert_eq(st.n_noise, K * 4 + K * (D + 2));
  /* Scalar products: per candidate, the passive columns c >= i of every
   * u_i (columns 2..5: 4+4+4+3+2+1 = 18) and theta's 4; d more by the masks r_i. */
  cr_assert_eq(st.n_mul, K * (18 + 4), "n_mul %ld", st.n_mul);
  cr_assert_eq(st.n_mmul, K * D, "n_mmul %ld", st.n_mmul);
  cr_assert(st.s_mul > 0 && st.s_mmul > 0 && st.s_dec > 0 && st.s_noise > 0);
  /* The count formula predicts every count the round made. */
  bl_he_stats f;
  bl_he_count(&r, &f);
  cr_assert_eq(f.n_noise, st.n_noise);
  cr_assert_eq(f.n_enc, st.n_enc, "enc %ld vs %ld", f.n_enc, st.n_enc);
  cr_assert_eq(f.n_dec, st.n_dec);
  cr_assert_eq(f.n_mul, st.n_mul);
  cr_assert_eq(f.n_mmul, st.n_mmul);
  cr_assert_eq(f.n_add, st.n_add, "add %ld vs %ld", f.n_add, st.n_add);
  /* Predicting the measured run from its own means gives its op time. */
  double on, off;
  bl_he_estimate(&f, &st, &on, &off);
  cr_assert_float_eq(off, st.s_noise, 1e-12);
  cr_assert(on > 0 && on <= c.seconds, "predicted %g, measured %g", on, c.seconds);
  cr_assert(c.offline_seconds > 0 && c.seconds > 0);
  /* The running total sums every round; the last round's stats restart. */
  bl_he_stats t;
  bl_he_stats_total(h, &t);
  cr_assert_eq(t.n_dec, st.n_dec);
  cr_assert_eq(bl_he_round(h, &r, lin, quad, &c, &e), 0, "%s", e.msg);
  bl_he_stats_get(h, &st);
  cr_assert_eq(st.n_dec, K * (D + 2), "last round n_dec %ld", st.n_dec);
  bl_he_stats_total(h, &t);
  cr_assert_eq(t.n_dec, 2 * K * (D + 2), "total n_dec %ld", t.n_dec);
  cr_assert_eq(t.n_mul, 2 * st.n_mul, "total n_mul %ld", t.n_mul);
  bl_he_destroy(h);
}

Test(he, active_party_alone_and_refusals, .timeout = 120) {
  fill();
  int one[1] = {D};
  bl_round r = {.d = D, .K = K, .N = 1, .dims = one, .X = X, .theta = theta, .Ainv = A};
  bl_he *h = make();
  double lin[K], quad[K];
  bl_cost c;
  o3m_err e;
  cr_assert_eq(bl_he_round(h, &r, lin, quad, &c, &e), 0, "%s", e.msg);
  cr_assert(c.max_abs_err < 1e-5, "err %g", c.max_abs_err);
  cr_assert_eq(c.rounds, 2);
  cr_assert_eq(c.bytes, 3u * 8u * 256u + 6u * 128u);
  /* Ainv with a negative eigenvalue. */
  A[0] = -1.0;
  cr_assert_eq(bl_he_round(h, &r, lin, quad, &c, &e), O3M_ENOTPD);
  bl_he_destroy(h);
  bl_he_config cf;
  bl_he_config_default(&cf);
  cf.bits = 256;
  cr_assert_eq(bl_he_create(&h, &cf, &e), O3M_EINVAL);
  cr_assert_null(h);
}
