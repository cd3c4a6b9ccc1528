/*
 * test_mpc: the MPC baseline's layer (eval/peers/mpc/bl_mpc.h) against
 * plaintext: sharing and opening, Beaver products, matrix products, the
 * truncation's error bound, comparisons, the dealer's samples, and one
 * LinUCB round's statistic, with the byte and round counts the header
 * documents.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "bl_mpc.h"
#include "o3m_splitmix.h"

static double urand(uint64_t *s, double lo, double hi) {
  return lo + (hi - lo) * o3m_splitmix64_unif(s);
}

static bl_mpc *mk(int N, int F, uint64_t seed) {
  bl_mpc *m = NULL;
  o3m_err e;
  cr_assert_eq(bl_mpc_create(&m, N, F, &seed, &e), 0, "%s", e.msg);
  return m;
}

Test(mpc, share_open_roundtrip_and_counts) {
  const int Ns[] = {2, 3, 5};
  for (int t = 0; t < 3; t++) {
    int N = Ns[t];
    bl_mpc *m = mk(N, 16, 7);
    enum { n = 50 };
    double v[n];
    uint64_t s = 1, out[n];
    for (int i = 0; i < n; i++) v[i] = urand(&s, -1000, 1000);
    uint64_t *x = bl_mpc_alloc(m, n);
    cr_assert_eq(bl_mpc_share(m, N - 1, v, n, x, NULL), 0);
    /* No single share equals the encoding (they are uniform). */
    int same = 0;
    for (int i = 0; i < n; i++) same += x[i] == bl_mpc_encode(m, v[i]);
    cr_expect_lt(same, 2);
    cr_assert_eq(bl_mpc_open(m, x, n, out, NULL), 0);
    for (int i = 0; i < n; i++) {
      cr_expect_eq(out[i], bl_mpc_encode(m, v[i]));
      cr_expect_leq(fabs(bl_mpc_decode(m, out[i]) - v[i]), ldexp(1.0, -17), "%g vs %g",
                    bl_mpc_decode(m, out[i]), v[i]);
    }
    uint64_t want = 8u * (uint64_t)(N - 1) * n + 8u * (uint64_t)N * (N - 1) * n;
    cr_expect_eq(bl_mpc_bytes(m), want, "N=%d bytes %lu, want %lu", N,
                 (unsigned long)bl_mpc_bytes(m), (unsigned long)want);
    cr_expect_eq(bl_mpc_rounds(m), 2);
    free(x);
    bl_mpc_destroy(m);
  }
}

Test(mpc, share_refuses_out_of_range_and_changes_nothing) {
  bl_mpc *m = mk(2, 16, 1);
  double v[2] = {1.0, 1e9};
  uint64_t *x = bl_mpc_alloc(m, 2);
  o3m_err e;
  cr_expect_eq(bl_mpc_share(m, 0, v, 2, x, &e), O3M_ERANGE);
  cr_expect(strstr(e.msg, "input 1") != NULL, "%s", e.msg);
  cr_expect_eq(bl_mpc_bytes(m), 0);
  cr_expect_eq(bl_mpc_rounds(m), 0);
  v[1] = NAN;
  cr_expect_eq(bl_mpc_share(m, 0, v, 2, x, &e), O3M_ERANGE);
  cr_expect_eq(bl_mpc_share(m, 2, v, 1, x, &e), O3M_EINVAL);
  free(x);
  bl_mpc_destroy(m);
}

/* Truncation: for any x with |x| < 2^62, the result is floor(x / 2^F) or
 * one more, for every party count, including negative x and x near 2^61. */
Test(mpc, truncation_error_at_most_one_unit) {
  const int Ns[] = {2, 3, 7};
  for (int t = 0; t < 3; t++) {
    bl_mpc *m = mk(Ns[t], 16, 3 + (uint64_t)t);
    enum { n = 4000 };
    int64_t v[n];
    uint64_t s = 11, out[n];
    for (int i = 0; i < n; i++) {
      int64_t mag = (int64_t)(o3m_splitmix64(&s) >> (2 + i % 60));
      v[i] = (i & 1) ? -mag : mag;
    }
    v[0] = 0;
    v[1] = -1;
    v[2] = ((int64_t)1 << 62) - 1;
    v[3] = -((int64_t)1 << 62) + 1;
    uint64_t *x = bl_mpc_alloc(m, n);
    cr_assert_eq(bl_mpc_share_int(m, 0, v, n, x, NULL), 0);
    bl_mpc_reset_counters(m);
    cr_assert_eq(bl_mpc_trunc(m, x, x, n, NULL), 0);
    cr_expect_eq(bl_mpc_rounds(m), 1);
    cr_expect_eq(bl_mpc_bytes(m), 8u * (uint64_t)Ns[t] * (Ns[t] - 1) * n);
    cr_assert_eq(bl_mpc_open(m, x, n, out, NULL), 0);
    for (int i = 0; i < n; i++) {
      int64_t fl = v[i] >> 16; /* arithmetic shift: floor */
      int64_t d = (int64_t)out[i] - fl;
      cr_expect(d == 0 || d == 1, "N=%d x=%lld: got %lld, floor %lld", Ns[t], (long long)v[i],
                (long long)(int64_t)out[i], (long long)fl);
    }
    free(x);
    bl_mpc_destroy(m);
  }
}

Test(mpc, beaver_multiplication_against_plaintext) {
  for (int N = 2; N <= 4; N++) {
    bl_mpc *m = mk(N, 16, 5);
    enum { n = 500 };
    double a[n], b[n];
    uint64_t s = 99, out[n];
    for (int i = 0; i < n; i++) {
      a[i] = urand(&s, -100, 100);
      b[i] = urand(&s, -100, 100);
    }
    uint64_t *x = bl_mpc_alloc(m, n), *y = bl_mpc_alloc(m, n), *z = bl_mpc_alloc(m, n);
    cr_assert_eq(bl_mpc_share(m, 0, a, n, x, NULL), 0);
    cr_assert_eq(bl_mpc_share(m, N - 1, b, n, y, NULL), 0);
    bl_mpc_reset_counters(m);
    cr_assert_eq(bl_mpc_mul(m, z, x, y, n, 1, NULL), 0);
    cr_expect_eq(bl_mpc_rounds(m), 2, "multiplication is 2 rounds (open, truncate)");
    cr_expect_eq(bl_mpc_bytes(m), 8u * (uint64_t)N * (N - 1) * 3 * n);
    cr_expect_gt(bl_mpc_offline_seconds(m), 0.0);
    cr_assert_eq(bl_mpc_open(m, z, n, out, NULL), 0);
    for (int i = 0; i < n; i++) {
      /* Encoding error of each factor (half a unit) times the other, plus
       * the truncation's unit. */
      double tol = (fabs(a[i]) + fabs(b[i]) + 2.0) * ldexp(1.0, -16);
      cr_expect_leq(fabs(bl_mpc_decode(m, out[i]) - a[i] * b[i]), tol, "%g*%g: %g", a[i], b[i],
                    bl_mpc_decode(m, out[i]));
    }
    /* An integer factor (a bit) needs no truncation and no second round. */
    int64_t bits[n];
    for (int i = 0; i < n; i++) bits[i] = i % 3 == 0;
    cr_assert_eq(bl_mpc_share_int(m, 0, bits, n, y, NULL), 0);
    bl_mpc_reset_counters(m);
    cr_assert_eq(bl_mpc_mul(m, z, x, y, n, 0, NULL), 0);
    cr_expect_eq(bl_mpc_rounds(m), 1);
    cr_assert_eq(bl_mpc_open(m, z, n, out, NULL), 0);
    for (int i = 0; i < n; i++)
      cr_expect_eq(out[i], bits[i] ? bl_mpc_encode(m, a[i]) : 0u);
    free(x);
    free(y);
    free(z);
    bl_mpc_destroy(m);
  }
}

Test(mpc, matrix_product_against_plaintext) {
  const int N = 3, nb = 2, r = 4, k = 7, c = 5;
  bl_mpc *m = mk(N, 16, 8);
  double X[2 * 4 * 7], Y[2 * 7 * 5];
  uint64_t s = 5, out[2 * 4 * 5];
  for (int i = 0; i < nb * r * k; i++) X[i] = urand(&s, -3, 3);
  for (int i = 0; i < nb * k * c; i++) Y[i] = urand(&s, -3, 3);
  uint64_t *sx = bl_mpc_alloc(m, nb * r * k), *sy = bl_mpc_alloc(m, nb * k * c);
  uint64_t *sz = bl_mpc_alloc(m, nb * r * c);
  cr_assert_eq(bl_mpc_share(m, 1, X, nb * r * k, sx, NULL), 0);
  cr_assert_eq(bl_mpc_share(m, BL_MPC_STATE, Y, nb * k * c, sy, NULL), 0);
  bl_mpc_reset_counters(m);
  cr_assert_eq(bl_mpc_matmul(m, nb, sz, sx, sy, r, k, c, 1, NULL), 0);
  cr_expect_eq(bl_mpc_rounds(m), 2);
  cr_expect_eq(bl_mpc_bytes(m), 8u * N * (N - 1) * (uint64_t)(nb * (r * k + k * c + r * c)));
  cr_assert_eq(bl_mpc_open(m, sz, nb * r * c, out, NULL), 0);
  for (int b = 0; b < nb; b++)
    for (int i = 0; i < r; i++)
      for (int j = 0; j < c; j++) {
        double want = 0;
        for (int l = 0; l < k; l++) want += X[b * r * k + i * k + l] * Y[b * k * c + l * c + j];
        double got = bl_mpc_decode(m, out[b * r * c + i * c + j]);
        cr_expect_leq(fabs(got - want), 1e-3, "batch %d (%d,%d): %g vs %g", b, i, j, got, want);
      }
  free(sx);
  free(sy);
  free(sz);
  bl_mpc_destroy(m);
}

Test(mpc, comparison_on_binary_shares) {
  const int Ns[] = {2, 3, 5};
  for (int t = 0; t < 3; t++) {
    int N = Ns[t];
    bl_mpc *m = mk(N, 16, 21);
    enum { n = 300 };
    double v[n];
    uint64_t s = 4, out[n];
    for (int i = 0; i < n; i++) v[i] = urand(&s, -5000, 5000);
    v[0] = 0.0;
    v[1] = -ldexp(1.0, -16);
    v[2] = ldexp(1.0, -16);
    uint64_t *x = bl_mpc_alloc(m, n);
    cr_assert_eq(bl_mpc_share(m, 0, v, n, x, NULL), 0);
    bl_mpc_reset_counters(m);
    cr_assert_eq(bl_mpc_ge0(m, x, x, n, NULL), 0);
    /* A2B + ceil(log2 N) adder levels of 7 rounds + B2A. */
    int levels = (int)ceil(log2((double)N));
    cr_expect_eq(bl_mpc_rounds(m), 2 + 7 * levels, "N=%d: %d rounds", N, bl_mpc_rounds(m));
    cr_assert_eq(bl_mpc_open(m, x, n, out, NULL), 0);
    for (int i = 0; i < n; i++)
      cr_expect_eq(out[i], (uint64_t)(v[i] >= 0.0), "N=%d [%g >= 0] = %lu", N, v[i],
                   (unsigned long)out[i]);
    free(x);
    bl_mpc_destroy(m);
  }
}

Test(mpc, dealer_samples) {
  bl_mpc *m = mk(3, 16, 2);
  enum { n = 4000 };
  uint64_t *x = bl_mpc_alloc(m, n), out[n];
  cr_assert_eq(bl_mpc_rand_perm(m, 10, x, NULL), 0);
  cr_assert_eq(bl_mpc_open(m, x, 10, out, NULL), 0);
  int seen[11] = {0};
  for (int i = 0; i < 10; i++) {
    cr_assert(out[i] >= 1 && out[i] <= 10);
    seen[out[i]]++;
  }
  for (int i = 1; i <= 10; i++) cr_expect_eq(seen[i], 1, "value %d appears %d times", i, seen[i]);
  cr_assert_eq(bl_mpc_rand_bernoulli(m, 0.25, n, x, NULL), 0);
  cr_assert_eq(bl_mpc_open(m, x, n, out, NULL), 0);
  int ones = 0;
  for (int i = 0; i < n; i++) {
    cr_assert(out[i] <= 1);
    ones += (int)out[i];
  }
  cr_expect(ones > 850 && ones < 1150, "%d ones of %d at p = 0.25", ones, n);
  cr_assert_eq(bl_mpc_rand_uniform(m, n, x, NULL), 0);
  cr_assert_eq(bl_mpc_open(m, x, n, out, NULL), 0);
  double mean = 0;
  for (int i = 0; i < n; i++) {
    double u = bl_mpc_decode(m, out[i]);
    cr_assert(u >= 0.0 && u < 1.0, "%g", u);
    mean += u / n;
  }
  cr_expect(fabs(mean - 0.5) < 0.03, "mean %g", mean);
  cr_expect_eq(bl_mpc_rand_bernoulli(m, 1.5, 1, x, NULL), O3M_EINVAL);
  free(x);
  bl_mpc_destroy(m);
}

/* A random round: X in [-1, 1], theta in [-1, 1], Ainv = (I + B B^T / d)^-1
 * approximated by a diagonally dominant symmetric matrix. */
static void random_round(int d, int K, int N, int *dims, double *X, double *theta, double *Ainv,
                         uint64_t seed) {
  uint64_t s = seed;
  for (int i = 0; i < K * d; i++) X[i] = urand(&s, -1, 1);
  for (int i = 0; i < d; i++) theta[i] = urand(&s, -1, 1);
  for (int i = 0; i < d; i++)
    for (int j = 0; j <= i; j++) {
      double v = i == j ? urand(&s, 0.5, 1.0) : urand(&s, -0.5, 0.5) / d;
      Ainv[i * d + j] = Ainv[j * d + i] = v;
    }
  for (int p = 0; p < N; p++) dims[p] = d / N + (p < d % N);
}

Test(mpc, round_statistic_within_tolerance_and_counted) {
  const struct { int d, K, N; } cases[] = {{20, 5, 2}, {30, 7, 3}, {100, 20, 5}};
  for (int t = 0; t < 3; t++) {
    int d = cases[t].d, K = cases[t].K, N = cases[t].N;
    int dims[8];
    double *X = malloc(sizeof *X * K * d), *th = malloc(sizeof *th * d);
    double *A = malloc(sizeof *A * d * d), lin[32], quad[32], pl[32], pq[32];
    random_round(d, K, N, dims, X, th, A, 100 + t);
    bl_round r = {d, K, N, dims, X, th, A, NULL};
    bl_cost c = {0};
    o3m_err e;
    cr_assert_eq(bl_mpc_round(&r, lin, quad, &c, &e), 0, "%s", e.msg);
    cr_assert_eq(bl_round_plain(&r, pl, pq, &e), 0, "%s", e.msg);
    /* Stated tolerance: 1e-3 absolute (F = 16: each product is within a
     * few units of 2^-16, summed over d terms). */
    for (int k = 0; k < K; k++) {
      cr_expect_leq(fabs(lin[k] - pl[k]), 1e-3, "lin[%d] %g vs %g", k, lin[k], pl[k]);
      cr_expect_leq(fabs(quad[k] - pq[k]), 1e-3, "quad[%d] %g vs %g", k, quad[k], pq[k]);
    }
    cr_expect_leq(c.max_abs_err, 1e-3);
    cr_expect_gt(c.max_abs_err, 0.0, "fixed point is not exact");
    cr_expect_eq(c.rounds, 6);
    cr_expect_eq(c.bytes, bl_mpc_round_bytes(d, K, N), "d=%d K=%d N=%d: %lu bytes, formula %lu",
                 d, K, N, (unsigned long)c.bytes, (unsigned long)bl_mpc_round_bytes(d, K, N));
    cr_expect_gt(c.seconds, 0.0);
    cr_expect_gt(c.offline_seconds, 0.0);
    free(X);
    free(th);
    free(A);
  }
}

Test(mpc, round_refuses_bad_shapes_and_ranges) {
  int dims[2] = {2, 2};
  double X[4] = {0}, th[4] = {0}, A[16] = {0}, lin[1], quad[1];
  bl_round r = {5, 1, 2, dims, X, th, A, NULL};
  bl_cost c = {0};
  o3m_err e;
  cr_expect_eq(bl_mpc_round(&r, lin, quad, &c, &e), O3M_EINVAL);
  cr_expect(strstr(e.msg, "sum to 4") != NULL, "%s", e.msg);
  r.d = 4;
  X[1] = 1e12;
  cr_expect_eq(bl_mpc_round(&r, lin, quad, &c, &e), O3M_ERANGE);
  cr_expect_eq(c.bytes, 0u, "a refused round reports no cost");
}

Test(mpc, byte_formula_matches_hand_count) {
  /* d = 1, K = 1, N = 2: share 1 word, matmul opens 1 + 2, truncates 2,
   * product opens 2, truncates 1 (each to both parties: x 2), opens 2 to
   * party 0: 1 + 2 (3 + 2 + 2 + 1) + 2 = 19 words. */
  cr_expect_eq(bl_mpc_round_bytes(1, 1, 2), 19u * 8u);
}
