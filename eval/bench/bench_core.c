/* bench_core.c -- o3m-bench-core: the numerical core's benchmark.
 *
 * One run measures, side by side, what the bandit engine must deliver:
 *
 *   (a) the active participant's per-round time on masked contexts against a
 *       central learner's on raw ones (shared LinUCB, the paper's VFUCB, as
 *       the main table; shared LinTS for reference), d in {50,100,200,500} x
 *       K in {10,100,1000}, M = 5 parties of equal width;
 *   (b) our round (Sherman-Morrison, o3m_policy) against the paper's round,
 *       which recomputes Lambda^{-1} from Lambda by a general LU inverse;
 *   (c) decisions per second (choose + update) at d = 100, K = 10, one thread;
 *   (d) the share of the machine's measured dgemm rate that the shared-LinUCB
 *       scoring step reaches at K = 1000;
 *   (e) secure aggregation against per-party parts;
 *   (f) a passive participant's feature lookup of a user it holds against
 *       one it does not (the two must take the same time, or the time
 *       tells which ids a party holds);
 *   (g) the AP's scoring of a batch of rounds with one call
 *       (o3m_policy_choose_batch) against one o3m_policy_choose per round,
 *       shared LinUCB and LinTS, d = 100, K = 20, 100, 500.
 *
 * Machines are noisy, so every comparison interleaves its variants: short
 * batches of rounds alternate between the variants in A B B A order, each
 * batch is timed with CLOCK_MONOTONIC, and the tables report medians over the
 * batches (ratios are medians of the ratios of adjacent batches, which
 * cancels slow drifts in how fast the machine is running). The variants
 * being compared always run the same rounds in the same order, so their
 * decisions can be compared too: LinUCB on Q x must pick what LinUCB on x
 * picks.
 *
 * What is timed is the active participant's work only. The masking itself,
 * Y_j = X^j (Q^j)^T for each party j, is the passive participants' work, done
 * on their own machines in parallel; it is precomputed here for a pool of
 * rounds before any clock starts. A masked round is: sum the M received
 * K x d parts into Q X, choose, update. Nothing is allocated inside a timed
 * loop by this file (the LAPACKE row-major wrappers used by the paper's round
 * in (b) allocate internally, as numpy does; see README.md).
 *
 * OpenBLAS is made single-threaded before anything runs. The exit status is 0
 * whether targets are met or not: this is a measurement, not a test; it is 1
 * only when the benchmark itself cannot run (out of memory, a policy error)
 * and 2 for a usage error. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "o3m_policy.h"
#include "eval_synth.h"
#include "eval_tables.h"
#include "o3m_blas.h"
#include "o3m_cli.h"
#include "o3m_clock.h"
#include "o3m_error.h"
#include "o3m_features.h"
#include "o3m_mask.h"
#include "o3m_rng.h"
#include "o3m_secagg.h"
#include "o3m_wire.h"

#include <openssl/evp.h>
#include <sodium.h>

/* ---- settings ---- */

#define N_PARTIES 5
#define ALPHA 0.5          /* paper's beta for UCB */
#define TS_V 0.01          /* paper's v for TS */
#define NOISE_VAR 0.05     /* paper's reward noise variance */
#define POOL_MB_DEFAULT 16 /* (a): rounds whose inputs stay in the last-level cache */
#define POOL_MAX 64
#define SPLIT_ROUNDS 2000 /* (c): rounds timed call by call */

#define TARGET_MASKED_RATIO 1.10
#define TARGET_SPEEDUP 20.0
#define TARGET_DPS 50000.0

static const int A_DIMS[] = {50, 100, 200, 500};
static const int A_KS[] = {10, 100, 1000};
static const int B_DIMS[] = {50, 100, 200};
static const int D_DIMS[] = {100, 200, 500};
#define NELEM(a) ((int)(sizeof(a) / sizeof((a)[0])))

typedef struct bench_opts {
  int quick;
  char sections[8]; /* subset of "abcdefg" */
  int pairs;        /* A-B pairs per cell, (a) and (b) */
  double cell_s;    /* time budget of one cell of (a) or (b) */
  int warm_updates; /* warm-up updates before timing, (a) (b) (d) */
  int warm_rounds;  /* warm-up choose+update rounds, (c) */
  int reps_c;       /* rounds of batches, (c) */
  double batch_c_s; /* one batch, (c) */
  int reps_d;       /* repetitions, (d) */
  double pool_mb;   /* pool size cap, (a) */
  double batch_d_s; /* one scoring batch, (d) */
} bench_opts;

/* What the final targets block needs. NAN means "not measured". */
typedef struct bench_summary {
  double worst_ratio;
  int worst_d, worst_K, cells_pass, cells;
  double speedup_d100;
  int same_b;
  double dps_disj_ucb, dps_disj_ts;
  double e_pp_ratio, e_ap_ratio;
  double f_ratio, f_item_ratio;
} bench_summary;

/* ---- small utilities ---- */

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The q-quantile (0..1) of v[0..n), by linear interpolation; sorts v. */
static double quantile(double *v, int n, double q) {
  if (n < 1) return NAN;
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  double pos = q * (n - 1);
  int i = (int)pos;
  if (i >= n - 1) return v[n - 1];
  return v[i] + (pos - i) * (v[i + 1] - v[i]);
}

static double median(double *v, int n) { return quantile(v, n, 0.5); }

/* Prints what failed and exits 1: the benchmark cannot continue. */
static void die(int rc, const char *what) {
  fprintf(stderr, "o3m-bench-core: %s: %s\n", what, o3m_strerror(rc));
  exit(1);
}

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) die(O3M_ENOMEM, "allocating buffers");
  return p;
}

static o3m_policy *make_policy(o3m_algo algo, o3m_model_kind model, int d, int kmax, uint64_t seed) {
  o3m_policy_config cfg;
  o3m_policy_config_default(&cfg);
  cfg.algo = algo;
  cfg.model = model;
  cfg.d = d;
  cfg.n_arms = kmax;
  cfg.max_candidates = kmax;
  cfg.alpha = ALPHA;
  cfg.v = TS_V;
  cfg.seed = seed;
  o3m_policy *p;
  o3m_err e;
  o3m_err_clear(&e);
  int rc = o3m_policy_create(&p, &cfg, &e);
  if (rc) {
    fprintf(stderr, "o3m-bench-core: %s\n", o3m_err_message(&e));
    exit(1);
  }
  return p;
}

static eval_synth *make_synth(int d, int K, uint64_t seed) {
  eval_synth_config c = {.d = d, .K = K, .noise_var = NOISE_VAR, .seed = seed};
  eval_synth *s;
  int rc = eval_synth_create(&s, &c);
  if (rc) die(rc, "creating the synthetic environment");
  return s;
}

/* One round on one policy: choose among the K rows of X, then feed back the
 * chosen row with its reward. Returns the chosen index; exits on error. */
static inline int policy_round(o3m_policy *p, int K, int d, const double *X, const double *rew) {
  int c;
  int rc = o3m_policy_choose(p, K, X, NULL, &c, NULL);
  if (!rc) rc = o3m_policy_update(p, c, X + (size_t)c * d, rew[c]);
  if (rc) die(rc, "policy round");
  return c;
}

/* ---- the parties: one mask, cut into M equal column blocks ---- */

typedef struct parties {
  int d, M;
  o3m_partition part;
  o3m_block *blocks[N_PARTIES];
  double *Xj; /* kmax x max d_j, scratch for cutting a party's columns */
} parties;

static void parties_init(parties *ps, int d, int kmax, uint64_t seed) {
  int dims[N_PARTIES];
  ps->d = d;
  ps->M = N_PARTIES;
  for (int j = 0; j < N_PARTIES; j++) dims[j] = d / N_PARTIES + (j < d % N_PARTIES);
  o3m_err e;
  int rc = o3m_partition_from_dims(&ps->part, N_PARTIES, dims, &e);
  if (rc) die(rc, "partition");
  o3m_rng *rng;
  o3m_mask *mask;
  rc = o3m_rng_create_seeded_insecure(&rng, seed); /* evaluation only */
  if (!rc) rc = o3m_mask_generate(&mask, d, rng);
  if (rc) die(rc, "drawing the mask");
  for (int j = 0; j < N_PARTIES; j++) {
    rc = o3m_block_from_mask(&ps->blocks[j], mask, ps->part.offset[j], ps->part.dims[j]);
    if (rc) die(rc, "cutting the mask");
  }
  o3m_mask_destroy(mask);
  o3m_rng_destroy(rng);
  ps->Xj = xmalloc(sizeof(double) * (size_t)kmax * dims[0]);
}

static void parties_free(parties *ps) {
  for (int j = 0; j < ps->M; j++) o3m_block_destroy(ps->blocks[j]);
  free(ps->Xj);
}

/* The passive participants' work for one round: Y_j = X^j (Q^j)^T for every
 * party j, where X^j is party j's columns of the K x d contexts X. Y holds
 * the M parts one after another, K x d each. Not timed. */
static void parties_mask(parties *ps, int K, const double *X, double *Y) {
  int d = ps->d;
  for (int j = 0; j < ps->M; j++) {
    int dj = ps->part.dims[j], off = ps->part.offset[j];
    for (int k = 0; k < K; k++)
      memcpy(ps->Xj + (size_t)k * dj, X + (size_t)k * d + off, sizeof(double) * dj);
    o3m_block_apply(ps->blocks[j], K, ps->Xj, 0.0, Y + (size_t)j * K * d);
  }
}

/* The active participant's combination of the M received parts (each n
 * doubles, stored one after another in Y): acc = sum_j Y_j, M - 1 vector
 * additions. The step is memory-bound, so what matters is the traffic: one
 * pass reads up to five parts at once, so for M <= 5 every part is read
 * once and acc written once. On the reference
 * machine (AMD EPYC, 2 cores) this was 1.2 to 2.4 times faster than M - 1
 * separate daxpy passes and up to 3 times faster than a chunked two-operand
 * loop. The loops are written four elements at a time over restrict
 * pointers (SUM_BY_4) so that gcc vectorizes them at -O2; the plain loops
 * were not, and took 1.2 to 1.5 times as long. acc may not alias Y. The
 * sum is the same, bit for bit, as adding the parts in order. Parties
 * beyond five are added by daxpy. */
#define SUM_BY_4(EXPR)                                       \
  do {                                                       \
    size_t i_ = 0;                                           \
    for (; i_ + 4 <= n; i_ += 4)                             \
      for (int u_ = 0; u_ < 4; u_++) {                       \
        size_t i = i_ + u_;                                  \
        acc[i] = EXPR;                                       \
      }                                                      \
    for (size_t i = i_; i < n; i++) acc[i] = EXPR;           \
  } while (0)

/* acc = the sum of the g <= 5 parts p[0..g) in one pass. */
static void sum_pass(int g, size_t n, const double *const *p, double *restrict acc) {
  const double *restrict a = p[0], *restrict b = p[1], *restrict c = p[2], *restrict d = p[3],
                         *restrict e = p[4];
  switch (g) {
    case 1:
      memcpy(acc, a, sizeof(double) * n);
      break;
    case 2:
      SUM_BY_4(a[i] + b[i]);
      break;
    case 3:
      SUM_BY_4(a[i] + b[i] + c[i]);
      break;
    case 4:
      SUM_BY_4(a[i] + b[i] + c[i] + d[i]);
      break;
    default:
      SUM_BY_4(a[i] + b[i] + c[i] + d[i] + e[i]);
      break;
  }
}

static void sum_parts(int M, size_t n, const double *Y, double *acc) {
  const double *p[5];
  int g = M < 5 ? M : 5;
  for (int j = 0; j < 5; j++) p[j] = Y + (size_t)(j < g ? j : 0) * n;
  sum_pass(g, n, p, acc);
  /* Parts beyond five (not used by this benchmark, M = 5) one at a time. */
  for (int j = 5; j < M; j++) o3m_axpy((int)n, 1.0, Y + (size_t)j * n, acc);
}

/* ---- a pool of rounds, drawn and masked before the clock starts ---- */

typedef struct pool {
  int P, K, d, M;
  double *X;   /* P x (K x d): raw contexts, what a central learner sees */
  double *Y;   /* P x M x (K x d): the parties' masked parts */
  double *rew; /* P x K */
} pool;

/* Draws P rounds of K contexts from s (l2-normalized Gaussians) and, if ps
 * is not NULL, masks each round for the M parties. P is chosen so that the
 * pool stays within max_mb megabytes, between 2 and pmax rounds: the rounds
 * are replayed cyclically, so the pool's size decides whether a round's
 * inputs come from cache (as freshly received and unpacked messages would)
 * or from memory. */
static void pool_init(pool *pl, eval_synth *s, parties *ps, int K, int d, int pmax, double max_mb) {
  size_t per = (size_t)K * d * sizeof(double) * (1 + (ps ? ps->M : 0));
  int P = (int)(max_mb * 1024 * 1024 / (double)per);
  if (P > pmax) P = pmax;
  if (P < 2) P = 2;
  pl->P = P;
  pl->K = K;
  pl->d = d;
  pl->M = ps ? ps->M : 0;
  size_t kd = (size_t)K * d;
  pl->X = xmalloc(sizeof(double) * P * kd);
  pl->Y = ps ? xmalloc(sizeof(double) * P * pl->M * kd) : NULL;
  pl->rew = xmalloc(sizeof(double) * P * K);
  for (int p = 0; p < P; p++) {
    int rc = eval_synth_round(s, pl->X + p * kd, NULL, pl->rew + (size_t)p * K);
    if (rc) die(rc, "drawing contexts");
    if (ps) parties_mask(ps, K, pl->X + p * kd, pl->Y + (size_t)p * pl->M * kd);
  }
}

static void pool_free(pool *pl) {
  free(pl->X);
  free(pl->Y);
  free(pl->rew);
}

/* Warm-up: n single-context updates, the same observations given to the
 * central policy on x and to the masked one on Q x (masked may be NULL), so
 * that both states are non-trivial and equivalent. Costs O(n d^2). */
static void warm_updates(o3m_policy *central, o3m_policy *masked, parties *ps, int d, int n,
                         uint64_t seed) {
  eval_synth *s = make_synth(d, 1, seed);
  double *x = xmalloc(sizeof(double) * d), *y = xmalloc(sizeof(double) * d * N_PARTIES);
  double *qx = xmalloc(sizeof(double) * d);
  for (int t = 0; t < n; t++) {
    double r;
    int rc = eval_synth_round(s, x, NULL, &r);
    if (!rc) rc = o3m_policy_update(central, 0, x, r);
    if (!rc && masked) {
      parties_mask(ps, 1, x, y);
      sum_parts(ps->M, (size_t)d, y, qx);
      rc = o3m_policy_update(masked, 0, qx, r);
    }
    if (rc) die(rc, "warm-up");
  }
  free(x);
  free(y);
  free(qx);
  eval_synth_destroy(s);
}

/* ---- (a) central vs masked ---- */

/* One variant of a timed comparison, walking through the pool: round plays
 * pool round p on the variant's model and returns the arm chosen. (a) runs
 * a policy on raw contexts (central_round) or on the summed masked parts
 * (masked_round); (b) the paper's round (paper_pool_round) or ours. */
typedef struct runner runner;
struct runner {
  int (*round)(runner *r, int p);
  o3m_policy *pol;
  struct paper_ucb *ps; /* paper_pool_round's model */
  const pool *pl;
  int next;    /* next pool round */
  double *acc; /* K x d: Q X for masked_round */
  int *dec;    /* decisions of the timed rounds */
  int ndec;
};

/* Runs B rounds of the runner r and returns the seconds per round. */
static double run_batch(runner *r, int B, int record) {
  double t0 = o3m_clock_s();
  for (int b = 0; b < B; b++) {
    int p = r->next;
    r->next = p + 1 == r->pl->P ? 0 : p + 1;
    int c = r->round(r, p);
    if (record) r->dec[r->ndec++] = c;
  }
  return (o3m_clock_s() - t0) / B;
}

static int central_round(runner *r, int p) {
  const pool *pl = r->pl;
  size_t kd = (size_t)pl->K * pl->d;
  return policy_round(r->pol, pl->K, pl->d, pl->X + p * kd, pl->rew + (size_t)p * pl->K);
}

static int masked_round(runner *r, int p) {
  const pool *pl = r->pl;
  size_t kd = (size_t)pl->K * pl->d;
  sum_parts(pl->M, kd, pl->Y + (size_t)p * pl->M * kd, r->acc);
  return policy_round(r->pol, pl->K, pl->d, r->acc, pl->rew + (size_t)p * pl->K);
}

/* A timed variant as the comparison below sees it: batch runs B rounds of
 * the variant v (a runner, or section (e)'s state) and returns the seconds
 * per round, recording the decisions when record is set. */
typedef double (*batch_fn)(void *v, int B, int record);

static double runner_batch(void *v, int B, int record) { return run_batch(v, B, record); }

/* Batch length: enough rounds that one batch of the slower variant takes
 * about target seconds, judged from three untimed rounds of each variant
 * (run on both, so that both stay on the same rounds). */
static int calibrate_pair(batch_fn batch, void *va, void *vb, double target) {
  double ta = 0, tb = 0;
  for (int i = 0; i < 3; i++) {
    ta = batch(va, 1, 0);
    tb = batch(vb, 1, 0);
  }
  double t = ta > tb ? ta : tb;
  int B = (int)(target / (t > 1e-9 ? t : 1e-9));
  if (B < 1) B = 1;
  if (B > 1000000) B = 1000000;
  return B;
}

/* Interleaves two variants for np A-B pairs (order alternating A B, B A, ...)
 * of B rounds each; ta, tb receive the seconds per round of every batch and
 * ratio their per-pair ratio b / a. */
static void run_pairs(batch_fn batch, void *va, void *vb, int np, int B, double *ta, double *tb,
                      double *ratio) {
  for (int i = 0; i < np; i++) {
    if (i % 2 == 0) {
      ta[i] = batch(va, B, 1);
      tb[i] = batch(vb, B, 1);
    } else {
      tb[i] = batch(vb, B, 1);
      ta[i] = batch(va, B, 1);
    }
    ratio[i] = tb[i] / ta[i];
  }
}

/* What one compared cell gives: the batch length, the medians of a's and
 * b's seconds per round, and the median b / a ratio with its quartiles. */
typedef struct pair_stats {
  int B;
  double ta, tb, r, q1, q3;
} pair_stats;

/* Times runner a against runner b: a batch length from calibrate_pair
 * (o->cell_s over the cell), then o->pairs interleaved pairs. a->dec and
 * b->dec are allocated for the decisions of the timed rounds; the caller
 * frees them. */
static pair_stats compare_runners(const bench_opts *o, runner *a, runner *b) {
  pair_stats st;
  int np = o->pairs;
  double *ta = xmalloc(sizeof(double) * np), *tb = xmalloc(sizeof(double) * np);
  double *ra = xmalloc(sizeof(double) * np);
  st.B = calibrate_pair(runner_batch, a, b, o->cell_s / (2.0 * np));
  a->dec = xmalloc(sizeof(int) * (size_t)st.B * np);
  b->dec = xmalloc(sizeof(int) * (size_t)st.B * np);
  run_pairs(runner_batch, a, b, np, st.B, ta, tb, ra);
  st.ta = median(ta, np);
  st.tb = median(tb, np);
  st.r = median(ra, np);
  st.q1 = quantile(ra, np, 0.25);
  st.q3 = quantile(ra, np, 0.75);
  free(ta);
  free(tb);
  free(ra);
  return st;
}

static int count_mismatch(const int *a, const int *b, int n) {
  int m = 0;
  for (int i = 0; i < n; i++) m += a[i] != b[i];
  return m;
}

/* The "same decisions" column: "yes (n rounds)" or "NO: mis of n differ". */
static void same_label(char *buf, size_t size, int mis, int n) {
  if (mis)
    snprintf(buf, size, "NO: %d of %d differ", mis, n);
  else
    snprintf(buf, size, "yes (%d rounds)", n);
}

static void section_a(const bench_opts *o, bench_summary *sum) {
  printf("\n(a) Per-round time on the active participant: central vs masked\n");
  printf(
      "    M = %d parties of equal width; central round = choose + update on x;\n"
      "    masked round = sum of the M received K x d parts + choose + update on Q x.\n"
      "    The parties' masking (their own machines) is precomputed, not timed.\n"
      "    Rounds replay from a pool of at most %g MB (inputs warm in cache, as\n"
      "    freshly received messages are; --pool-mb 64+ for inputs from memory).\n"
      "    batch = rounds per timed batch. Times are medians over %d interleaved\n"
      "    batches per variant; ratio is the median of masked/central over adjacent\n"
      "    batch pairs [quartiles].\n",
      N_PARTIES, o->pool_mb, o->pairs);
  sum->worst_ratio = 0;
  sum->cells_pass = sum->cells = 0;
  for (int ai = 0; ai < 2; ai++) {
    o3m_algo algo = ai == 0 ? O3M_ALGO_LINUCB : O3M_ALGO_LINTS;
    printf("\n  shared %s%s\n", ai == 0 ? "LinUCB (VFUCB)" : "LinTS (VFTS)",
           ai == 0 ? ", target masked/central <= 1.10" : ", for reference");
    printf("  %5s %5s %7s %12s %12s %10s %8s %15s  %s\n", "d", "K", "batch", "central us",
           "masked us", "diff us", "ratio", "[q1 .. q3]", ai == 0 ? "same decisions" : "");
    for (int di = 0; di < NELEM(A_DIMS); di++) {
      int d = A_DIMS[di];
      parties ps;
      parties_init(&ps, d, 1000, 0x5eed0000u + d);
      o3m_policy *pc = make_policy(algo, O3M_MODEL_SHARED, d, 1000, 7);
      o3m_policy *pm = make_policy(algo, O3M_MODEL_SHARED, d, 1000, 7);
      warm_updates(pc, pm, &ps, d, o->warm_updates, 1000 + d);
      for (int ki = 0; ki < NELEM(A_KS); ki++) {
        int K = A_KS[ki];
        eval_synth *s = make_synth(d, K, 2000 + 10 * d + K);
        pool pl;
        pool_init(&pl, s, &ps, K, d, POOL_MAX, o->pool_mb);
        runner rc = {.round = central_round, .pol = pc, .pl = &pl};
        runner rm = {.round = masked_round, .pol = pm, .pl = &pl};
        rm.acc = xmalloc(sizeof(double) * K * d);
        pair_stats st = compare_runners(o, &rc, &rm);
        double tc = st.ta, tm = st.tb, r = st.r;
        char same[48] = "";
        if (algo == O3M_ALGO_LINUCB) {
          same_label(same, sizeof same, count_mismatch(rc.dec, rm.dec, rc.ndec), rc.ndec);
          sum->cells++;
          sum->cells_pass += r <= TARGET_MASKED_RATIO;
          if (r > sum->worst_ratio) {
            sum->worst_ratio = r;
            sum->worst_d = d;
            sum->worst_K = K;
          }
        }
        printf("  %5d %5d %7d %12.2f %12.2f %10.2f %8.3f   [%.3f .. %.3f]  %s\n", d, K, st.B,
               tc * 1e6, tm * 1e6, (tm - tc) * 1e6, r, st.q1, st.q3, same);
        fflush(stdout);
        free(rc.dec);
        free(rm.dec);
        free(rm.acc);
        pool_free(&pl);
        eval_synth_destroy(s);
      }
      o3m_policy_destroy(pc);
      o3m_policy_destroy(pm);
      parties_free(&ps);
    }
  }
}

/* ---- (b) the paper's round: Lambda^{-1} recomputed every round ---- */

/* The paper's VFUCB round as the paper states it (Lambda^{-1} recomputed
 * every round), done the way a numpy implementation would: keep Lambda and
 * u, and every round invert Lambda from scratch (general LU: getrf + getri),
 * set theta = Lambda^{-1} u, score all K arms with X Lambda^{-1} (a gemm, the
 * inverse being a general matrix to numpy), pick the best, and add x x^T and
 * r x. Same tie rule as o3m_policy, so the decisions can be compared. */
typedef struct paper_ucb {
  int d;
  double *lam;          /* d x d, upper triangle: Lambda */
  double *inv;          /* d x d: Lambda (full) then Lambda^{-1} */
  int *ipiv;            /* d */
  double *u, *theta;    /* d */
  double *W;            /* K x d */
  double *mean, *score; /* K */
} paper_ucb;

static void paper_init(paper_ucb *s, int d, int K) {
  s->d = d;
  s->lam = xmalloc(sizeof(double) * d * d);
  s->inv = xmalloc(sizeof(double) * d * d);
  s->ipiv = xmalloc(sizeof(int) * d);
  s->u = xmalloc(sizeof(double) * d);
  s->theta = xmalloc(sizeof(double) * d);
  s->W = xmalloc(sizeof(double) * K * d);
  s->mean = xmalloc(sizeof(double) * K);
  s->score = xmalloc(sizeof(double) * K);
  memset(s->lam, 0, sizeof(double) * d * d);
  memset(s->u, 0, sizeof(double) * d);
  for (int i = 0; i < d; i++) s->lam[(size_t)i * d + i] = 1.0; /* lambda = 1 */
}

static void paper_free(paper_ucb *s) {
  free(s->lam);
  free(s->inv);
  free(s->ipiv);
  free(s->u);
  free(s->theta);
  free(s->W);
  free(s->mean);
  free(s->score);
}

/* Lambda += x x^T; u += r x */
static void paper_update(paper_ucb *s, const double *x, double r) {
  o3m_syr(s->d, 1.0, x, s->lam);
  o3m_axpy(s->d, r, x, s->u);
}

static int paper_round(paper_ucb *s, int K, const double *X, const double *rew) {
  int d = s->d;
  /* inv = Lambda^{-1} by LU, from a full copy of Lambda */
  memcpy(s->inv, s->lam, sizeof(double) * d * d);
  o3m_symmetrize_from_upper(d, s->inv);
  int rc = o3m_getrf(d, s->inv, s->ipiv);
  if (!rc) rc = o3m_getri(d, s->inv, s->ipiv);
  if (rc) die(rc, "paper round: LU inverse");
  /* theta = inv u; mean = X theta; W = X inv; var_k = W_k . x_k */
  o3m_gemv(d, d, 1.0, s->inv, s->u, 0.0, s->theta);
  o3m_gemv(K, d, 1.0, X, s->theta, 0.0, s->mean);
  o3m_gemm(K, d, d, 1.0, X, s->inv, 0.0, s->W);
  double best = -INFINITY;
  for (int k = 0; k < K; k++) {
    double v = o3m_dot(d, s->W + (size_t)k * d, X + (size_t)k * d);
    s->score[k] = s->mean[k] + ALPHA * sqrt(v > 0 ? v : 0);
    if (s->score[k] > best) best = s->score[k];
  }
  double tol = O3M_POLICY_TIE_RTOL * (fabs(best) > 1.0 ? fabs(best) : 1.0);
  int c = 0;
  while (c < K - 1 && s->score[c] < best - tol) c++;
  paper_update(s, X + (size_t)c * d, rew[c]);
  return c;
}

static int paper_pool_round(runner *r, int p) {
  const pool *pl = r->pl;
  size_t kd = (size_t)pl->K * pl->d;
  return paper_round(r->ps, pl->K, pl->X + p * kd, pl->rew + (size_t)p * pl->K);
}

static void section_b(const bench_opts *o, bench_summary *sum) {
  printf("\n(b) Shared LinUCB round: the paper's way vs ours, K = 10\n");
  printf(
      "    paper = Lambda^{-1} recomputed every round by a general LU inverse (o3m_getrf +\n"
      "    o3m_getri, 2 d^3 flops; numpy.linalg.inv's gesv against I is ~8/3 d^3), theta =\n"
      "    Lambda^{-1} u, scores via X Lambda^{-1} (dgemm);\n"
      "    ours  = o3m_policy_choose + o3m_policy_update (Sherman-Morrison, one dtrmm).\n"
      "    batch = rounds per timed batch. Medians over %d interleaved batches;\n"
      "    speedup = median of paper/ours over adjacent batch pairs [quartiles].\n",
      o->pairs);
  printf("  %5s %5s %7s %12s %12s %9s %15s  %s\n", "d", "K", "batch", "paper us", "ours us",
         "speedup", "[q1 .. q3]", "same decisions");
  sum->speedup_d100 = NAN;
  sum->same_b = 1;
  const int K = 10;
  for (int di = 0; di < NELEM(B_DIMS); di++) {
    int d = B_DIMS[di];
    paper_ucb ps;
    paper_init(&ps, d, K);
    o3m_policy *pol = make_policy(O3M_ALGO_LINUCB, O3M_MODEL_SHARED, d, K, 7);
    /* The same warm-up observations for both. */
    warm_updates(pol, NULL, NULL, d, o->warm_updates, 3000 + d);
    {
      eval_synth *s = make_synth(d, 1, 3000 + d);
      double *x = xmalloc(sizeof(double) * d), r;
      for (int t = 0; t < o->warm_updates; t++) {
        int rc = eval_synth_round(s, x, NULL, &r);
        if (rc) die(rc, "warm-up");
        paper_update(&ps, x, r);
      }
      free(x);
      eval_synth_destroy(s);
    }
    eval_synth *s = make_synth(d, K, 4000 + d);
    pool pl;
    pool_init(&pl, s, NULL, K, d, POOL_MAX, 16);
    runner rp = {.round = paper_pool_round, .ps = &ps, .pl = &pl};
    runner ro = {.round = central_round, .pol = pol, .pl = &pl};
    /* ratio = paper / ours */
    pair_stats st = compare_runners(o, &ro, &rp);
    double to = st.ta, tp = st.tb, r = st.r;
    int mis = count_mismatch(rp.dec, ro.dec, ro.ndec);
    if (mis) sum->same_b = 0;
    char same[48];
    same_label(same, sizeof same, mis, ro.ndec);
    printf("  %5d %5d %7d %12.2f %12.2f %8.1fx   [%.1f .. %.1f]  %s\n", d, K, st.B, tp * 1e6,
           to * 1e6, r, st.q1, st.q3, same);
    fflush(stdout);
    if (d == 100) sum->speedup_d100 = r;
    free(rp.dec);
    free(ro.dec);
    pool_free(&pl);
    eval_synth_destroy(s);
    o3m_policy_destroy(pol);
    paper_free(&ps);
  }
}

/* ---- (c) decisions per second ---- */

static void section_c(const bench_opts *o, bench_summary *sum) {
  const int d = 100, K = 10, NV = 4;
  static const struct {
    o3m_algo algo;
    o3m_model_kind model;
    const char *name;
  } var[4] = {{O3M_ALGO_LINUCB, O3M_MODEL_DISJOINT, "disjoint LinUCB"},
              {O3M_ALGO_LINTS, O3M_MODEL_DISJOINT, "disjoint LinTS"},
              {O3M_ALGO_LINUCB, O3M_MODEL_SHARED, "shared LinUCB"},
              {O3M_ALGO_LINTS, O3M_MODEL_SHARED, "shared LinTS"}};
  printf(
      "\n(c) Decisions per second, d = %d, K = %d, one thread (one decision = choose +\n"
      "    update). Contexts: l2-normalized Gaussians (eval_synth), rewards x^T theta* +\n"
      "    noise; each policy warmed up with %d rounds first. Disjoint: %d arms, candidate\n"
      "    k is arm k. The four variants' batches are interleaved; medians over %d\n"
      "    batches each [quartiles]. The choose/update split comes from a separate\n"
      "    batch of %d rounds per policy with the clock read around every call\n"
      "    (medians per call).\n",
      d, K, o->warm_rounds, K, o->reps_c, SPLIT_ROUNDS);
  eval_synth *s = make_synth(d, K, 5000);
  pool pl;
  pool_init(&pl, s, NULL, K, d, 1024, 16);
  o3m_policy *pol[4];
  int next[4], B[4];
  for (int v = 0; v < NV; v++) {
    pol[v] = make_policy(var[v].algo, var[v].model, d, K, 11 + v);
    next[v] = 0;
    for (int t = 0; t < o->warm_rounds; t++) {
      int p = next[v];
      next[v] = (p + 1) % pl.P;
      policy_round(pol[v], K, d, pl.X + (size_t)p * K * d, pl.rew + (size_t)p * K);
    }
    /* calibrate */
    double t0 = o3m_clock_s();
    for (int t = 0; t < 200; t++) {
      int p = next[v];
      next[v] = (p + 1) % pl.P;
      policy_round(pol[v], K, d, pl.X + (size_t)p * K * d, pl.rew + (size_t)p * K);
    }
    double per = (o3m_clock_s() - t0) / 200;
    B[v] = (int)(o->batch_c_s / (per > 1e-9 ? per : 1e-9));
    if (B[v] < 10) B[v] = 10;
  }
  double *rate = xmalloc(sizeof(double) * NV * o->reps_c);
  for (int rep = 0; rep < o->reps_c; rep++)
    for (int i = 0; i < NV; i++) {
      int v = (i + rep) % NV; /* rotate the order */
      double t0 = o3m_clock_s();
      for (int b = 0; b < B[v]; b++) {
        int p = next[v];
        next[v] = p + 1 == pl.P ? 0 : p + 1;
        policy_round(pol[v], K, d, pl.X + (size_t)p * K * d, pl.rew + (size_t)p * K);
      }
      rate[v * o->reps_c + rep] = B[v] / (o3m_clock_s() - t0);
    }
  /* The split: per-call times, after the rate batches so they are not
   * perturbed by the extra clock reads. */
  double *tch = xmalloc(sizeof(double) * SPLIT_ROUNDS * NV);
  double *tup = xmalloc(sizeof(double) * SPLIT_ROUNDS * NV);
  for (int v = 0; v < NV; v++)
    for (int t = 0; t < SPLIT_ROUNDS; t++) {
      int p = next[v], c;
      next[v] = p + 1 == pl.P ? 0 : p + 1;
      const double *X = pl.X + (size_t)p * K * d;
      double t0 = o3m_clock_s();
      int rc = o3m_policy_choose(pol[v], K, X, NULL, &c, NULL);
      double t1 = o3m_clock_s();
      if (!rc) rc = o3m_policy_update(pol[v], c, X + (size_t)c * d, pl.rew[(size_t)p * K + c]);
      double t2 = o3m_clock_s();
      if (rc) die(rc, "policy round");
      tch[v * SPLIT_ROUNDS + t] = t1 - t0;
      tup[v * SPLIT_ROUNDS + t] = t2 - t1;
    }
  printf("  %-16s %8s %14s %10s %21s %10s %10s\n", "policy", "batch", "decisions/s", "us/dec",
         "[q1 .. q3] dec/s", "choose us", "update us");
  for (int v = 0; v < NV; v++) {
    double *r = rate + v * o->reps_c;
    double m = median(r, o->reps_c);
    double q1 = quantile(r, o->reps_c, 0.25), q3 = quantile(r, o->reps_c, 0.75);
    double mc = median(tch + v * SPLIT_ROUNDS, SPLIT_ROUNDS);
    double mu = median(tup + v * SPLIT_ROUNDS, SPLIT_ROUNDS);
    printf("  %-16s %8d %14.0f %10.2f   [%6.0f .. %6.0f] %10.2f %10.2f\n", var[v].name, B[v], m,
           1e6 / m, q1, q3, mc * 1e6, mu * 1e6);
    if (v == 0) sum->dps_disj_ucb = m;
    if (v == 1) sum->dps_disj_ts = m;
    o3m_policy_destroy(pol[v]);
  }
  fflush(stdout);
  free(rate);
  free(tch);
  free(tup);
  pool_free(&pl);
  eval_synth_destroy(s);
}

/* ---- (d) scoring against the dgemm rate ---- */

static void fill_gauss(o3m_rng *r, double *a, long n) {
  int rc = o3m_rng_gaussian(r, a, n);
  if (rc) die(rc, "random fill");
}

/* Section (d)'s four timed calls on one shape: 0 the policy's scoring
 * (o3m_policy_stats), 1 a raw dtrmm with the copy it needs, 2 a raw dsymm,
 * 3 a raw dgemm against a full matrix. */
static void d_call(int k, o3m_policy *pol, int K, int d, const double *X, const double *S,
                   double *W, double *mean, double *var, int *rc) {
  if (k == 0) *rc = o3m_policy_stats(pol, K, X, NULL, mean, var);
  if (k == 1) {
    memcpy(W, X, sizeof(double) * (size_t)K * d);
    o3m_trmm_right_upper(K, d, S, W);
  }
  if (k == 2) o3m_symm_right(K, d, 1.0, S, X, 0.0, W);
  if (k == 3) o3m_gemm(K, d, d, 1.0, X, S, 0.0, W);
}

/* The flops each of d_call's calls performs. */
static double d_flops(int k, int K, int d) {
  double kd = (double)K * d;
  if (k == 0) return kd * (d + 1) + 4.0 * kd;
  if (k == 1) return kd * (d + 1);
  return 2.0 * kd * d;
}

static void section_d(const bench_opts *o) {
  const int n = 1000, K = 1000, ND = NELEM(D_DIMS);
  printf("\n(d) Scoring vs the machine's dgemm rate, one thread\n");
  printf(
      "    peak = o3m_gemm at n = %d (2 n^3 flops per call). scoring = o3m_policy_stats,\n"
      "    shared LinUCB, K = %d, counted as the flops it performs: dtrmm with the upper\n"
      "    triangle of Ainv (K d (d + 1)), K dots and the means X theta (4 K d). For\n"
      "    diagnosis, the same shape as one raw dtrmm (with its copy), as\n"
      "    the dsymm W = X Ainv it replaced (2 K d^2: same result, twice the flops) and\n"
      "    as one o3m_gemm against a full d x d matrix (2 K d^2). Interleaved; medians\n"
      "    over %d reps.\n",
      n, K, o->reps_d);
  o3m_rng *rng;
  int rc = o3m_rng_create_seeded_insecure(&rng, 99);
  if (rc) die(rc, "rng");
  double *A = xmalloc(sizeof(double) * n * n), *Bm = xmalloc(sizeof(double) * n * n);
  double *C = xmalloc(sizeof(double) * n * n);
  fill_gauss(rng, A, (long)n * n);
  fill_gauss(rng, Bm, (long)n * n);
  memset(C, 0, sizeof(double) * n * n);
  o3m_policy *pol[3];
  double *X[3], *S[3], *W = xmalloc(sizeof(double) * K * 500);
  double *mean = xmalloc(sizeof(double) * K), *var = xmalloc(sizeof(double) * K);
  int B[3][4];
  for (int i = 0; i < ND; i++) {
    int d = D_DIMS[i];
    pol[i] = make_policy(O3M_ALGO_LINUCB, O3M_MODEL_SHARED, d, K, 7);
    warm_updates(pol[i], NULL, NULL, d, o->warm_updates < 500 ? o->warm_updates : 500, 6000 + d);
    eval_synth *s = make_synth(d, K, 7000 + d);
    X[i] = xmalloc(sizeof(double) * K * d);
    rc = eval_synth_round(s, X[i], NULL, NULL);
    if (rc) die(rc, "contexts");
    eval_synth_destroy(s);
    /* A full symmetric positive definite d x d matrix for the raw calls. */
    S[i] = xmalloc(sizeof(double) * d * d);
    fill_gauss(rng, W, (long)d * d);
    o3m_gemm_nt(d, d, d, 1.0 / d, W, W, 0.0, S[i]);
    for (int j = 0; j < d; j++) S[i][(size_t)j * d + j] += 1.0;
  }
  o3m_gemm(n, n, n, 1.0, A, Bm, 0.0, C); /* warm */
  /* Batch lengths from one timed call of each kind. */
  for (int i = 0; i < ND; i++) {
    int d = D_DIMS[i];
    for (int k = 0; k < 4; k++) {
      double t0 = o3m_clock_s();
      d_call(k, pol[i], K, d, X[i], S[i], W, mean, var, &rc);
      double t = o3m_clock_s() - t0;
      if (rc) die(rc, "o3m_policy_stats");
      B[i][k] = (int)(o->batch_d_s / (t > 1e-9 ? t : 1e-9));
      if (B[i][k] < 1) B[i][k] = 1;
    }
  }
  int R = o->reps_d;
  double *gpk = xmalloc(sizeof(double) * R);
  double *g = xmalloc(sizeof(double) * ND * 4 * R);
  for (int rep = 0; rep < R; rep++) {
    double t0 = o3m_clock_s();
    o3m_gemm(n, n, n, 1.0, A, Bm, 0.0, C);
    gpk[rep] = 2.0 * n * n * (double)n / (o3m_clock_s() - t0) * 1e-9;
    for (int i = 0; i < ND; i++) {
      int d = D_DIMS[i];
      for (int k = 0; k < 4; k++) {
        t0 = o3m_clock_s();
        for (int b = 0; b < B[i][k]; b++) d_call(k, pol[i], K, d, X[i], S[i], W, mean, var, &rc);
        double t = (o3m_clock_s() - t0) / B[i][k];
        if (rc) die(rc, "o3m_policy_stats");
        g[(i * 4 + k) * R + rep] = d_flops(k, K, d) / t * 1e-9;
      }
    }
  }
  double peak = median(gpk, R), best = gpk[R - 1]; /* sorted by median() */
  printf("  dgemm n = %d: %.2f GFLOP/s (median), %.2f best\n", n, peak, best);
  printf("  %5s %5s %11s %8s %8s   %-17s %-17s %-17s\n", "d", "K", "scoring us", "GFLOP/s",
         "of peak", "raw dtrmm", "dsymm (replaced)", "gemm same shape");
  for (int i = 0; i < ND; i++) {
    int d = D_DIMS[i];
    double gk[4];
    for (int k = 0; k < 4; k++) gk[k] = median(g + (i * 4 + k) * R, R);
    printf("  %5d %5d %11.1f %8.2f %7.1f%%", d, K, d_flops(0, K, d) / gk[0] * 1e-3, gk[0],
           100.0 * gk[0] / peak);
    for (int k = 1; k < 4; k++)
      printf("   %6.1f us %4.1f GF", d_flops(k, K, d) / gk[k] * 1e-3, gk[k]);
    printf("\n");
  }
  fflush(stdout);
  for (int i = 0; i < ND; i++) {
    o3m_policy_destroy(pol[i]);
    free(X[i]);
    free(S[i]);
  }
  free(gpk);
  free(g);
  free(A);
  free(Bm);
  free(C);
  free(W);
  free(mean);
  free(var);
  o3m_rng_destroy(rng);
}

/* ---- (e) secure aggregation vs per-party parts ---- */

/* The issue-11 budget at d = 100, K = 20, M = 5 (the AP and 4 passive
 * parties): a passive participant's work per MaskBatch of one round and
 * the AP's round, each with per-party parts (today's protocol) and with
 * secure aggregation (crypto/o3m_secagg.h), interleaved as in (a).
 *
 * PP, per-party: cut its columns, Y = X^j (Q^j)^T, fill and pack the
 * MaskBatchReply (what the RPC layer then sends). PP, secure: the same
 * plus its row-norm check, the transcript of the request (user and K item
 * ids), the fixed-point encoding and 3 pair streams, packed as masked
 * words. The feature lookup and the network are the same in both modes and
 * are not included, so the ratio is an upper bound of the real one.
 * AP, per-party: check each of the 4 received parts' rows against its
 * bound, sum them with the own part, check the sum, choose + update.
 * AP, secure: add the 4 parts' words, decode, check the PP sum, add the own
 * part, check the sum, choose + update. Messages are unpacked by gRPC in
 * both modes (not timed). */
#define E_PP 4
#define E_POOL 64
typedef struct e_state {
  int d, K, secure, next;
  parties ps;
  o3m_secagg *sa[E_PP];
  const double *X;       /* E_POOL x K x d contexts */
  const double *rew;     /* E_POOL x K */
  double *Yparts;        /* E_POOL x (M x K x d): every party's part, doubles */
  uint64_t *W;           /* E_POOL x (E_PP x K x d): the PPs' masked words */
  double *Y, *Ypp;       /* K x d scratch */
  uint64_t *Wq, *acc;    /* K x d scratch */
  uint8_t *packed;       /* a packed reply */
  char ids[24][16];
  char *items[24];
  o3m_policy *pol;
  int *dec, ndec;
} e_state;

/* PP party 1's MaskBatch of one round of the pool. */
static double e_pp_batch(void *v, int B, int record) {
  (void)record;
  e_state *st = v;
  const int K = st->K, d = st->d, dj = st->ps.part.dims[1], off = st->ps.part.offset[1];
  static const unsigned char nonce[32] = {7};
  uint32_t rows[1] = {(uint32_t)K};
  int Kq[1] = {K};
  double t0 = o3m_clock_s();
  for (int b = 0; b < B; b++) {
    int p = st->next;
    st->next = (p + 1) % E_POOL;
    const double *X = st->X + (size_t)p * K * d;
    for (int k = 0; k < K; k++)
      memcpy(st->ps.Xj + (size_t)k * dj, X + (size_t)k * d + off, sizeof(double) * dj);
    o3m_block_apply(st->ps.blocks[1], K, st->ps.Xj, 0.0, st->Y);
    O3m__V1__MaskBatchReply rep = O3M__V1__MASK_BATCH_REPLY__INIT;
    if (st->secure) {
      if (o3m_wire_check_row_norms("part", K, d, st->Y, O3M_CONFIG_DEFAULT_MAX_NORM, 1, Kq,
                                   NULL) < 0)
        die(O3M_ERANGE, "PP norm check");
      o3m_secagg_begin(st->sa[0], 1, nonce, d, 1);
      o3m_secagg_query(st->sa[0], "user-17", K, (const char *const *)st->items);
      if (o3m_secagg_mask(st->sa[0], (size_t)K * d, st->Y, st->Wq, NULL) < 0)
        die(O3M_ERANGE, "PP encode");
      o3m_wire_mask_batch_fill_masked(&rep, 1, 1, 1, rows, d, st->Wq);
    } else {
      o3m_wire_mask_batch_fill(&rep, 1, 1, 1, rows, d, st->Y);
    }
    protobuf_c_message_pack(&rep.base, st->packed);
  }
  return (o3m_clock_s() - t0) / B;
}

/* The AP's round on pool round p (see above). */
static double e_ap_batch(void *v, int B, int record) {
  e_state *st = v;
  const int K = st->K, d = st->d, M = N_PARTIES;
  const size_t kd = (size_t)K * d;
  int Kq[1] = {K};
  double pp_bound = sqrt(E_PP) * O3M_CONFIG_DEFAULT_MAX_NORM;
  double sum_bound = sqrt(M) * O3M_CONFIG_DEFAULT_MAX_NORM;
  double t0 = o3m_clock_s();
  for (int b = 0; b < B; b++) {
    int p = st->next;
    st->next = (p + 1) % E_POOL;
    const double *Yp = st->Yparts + (size_t)p * M * kd;
    if (st->secure) {
      const uint64_t *W = st->W + (size_t)p * E_PP * kd;
      memset(st->acc, 0, sizeof *st->acc * kd);
      for (int j = 0; j < E_PP; j++) o3m_secagg_add_part(kd, (const int64_t *)(W + j * kd), st->acc);
      o3m_secagg_decode(o3m_secagg_scale_of(st->sa[0]), kd, st->acc, st->Ypp);
      if (o3m_wire_check_row_norms("pp sum", K, d, st->Ypp, pp_bound, 1, Kq, NULL) < 0)
        die(O3M_ERANGE, "AP PP-sum check");
      memcpy(st->Y, Yp, sizeof(double) * kd); /* the own part */
      o3m_axpy((int)kd, 1.0, st->Ypp, st->Y);
    } else {
      for (int j = 1; j < M; j++)
        if (o3m_wire_check_row_norms("part", K, d, Yp + j * kd, O3M_CONFIG_DEFAULT_MAX_NORM, 1,
                                     Kq, NULL) < 0)
          die(O3M_ERANGE, "AP part check");
      memcpy(st->Y, Yp, sizeof(double) * kd);
      for (int j = 1; j < M; j++) o3m_axpy((int)kd, 1.0, Yp + j * kd, st->Y);
    }
    if (o3m_wire_check_row_norms("sum", K, d, st->Y, sum_bound, 1, Kq, NULL) < 0)
      die(O3M_ERANGE, "AP sum check");
    int c = policy_round(st->pol, K, d, st->Y, st->rew + (size_t)p * K);
    if (record) st->dec[st->ndec++] = c;
  }
  return (o3m_clock_s() - t0) / B;
}

static void e_init(e_state *st, int secure, const double *X, const double *rew, double *Yparts,
                   uint64_t *W, int nrec) {
  const int d = 100, K = 20;
  memset(st, 0, sizeof *st);
  st->d = d;
  st->K = K;
  st->secure = secure;
  st->X = X;
  st->rew = rew;
  st->Yparts = Yparts;
  st->W = W;
  parties_init(&st->ps, d, K, 99); /* the same mask in both states */
  unsigned char pk[E_PP][32], sk[E_PP][32];
  for (int j = 0; j < E_PP; j++) crypto_box_keypair(pk[j], sk[j]);
  double norms[E_PP];
  for (int j = 0; j < E_PP; j++) norms[j] = O3M_CONFIG_DEFAULT_MAX_NORM;
  int scale;
  if (o3m_secagg_scale(E_PP, norms, &scale, NULL) < 0) die(O3M_ERANGE, "scale");
  for (int j = 0; j < E_PP; j++)
    if (o3m_secagg_create_from_key(&st->sa[j], E_PP, (const unsigned char(*)[32])pk, j, sk[j],
                                   scale, NULL) < 0)
      die(O3M_EINVAL, "secagg");
  sodium_memzero(sk, sizeof sk);
  st->Y = xmalloc(sizeof(double) * K * d);
  st->Ypp = xmalloc(sizeof(double) * K * d);
  st->Wq = xmalloc(sizeof(uint64_t) * K * d);
  st->acc = xmalloc(sizeof(uint64_t) * K * d);
  st->packed = xmalloc((size_t)o3m_wire_mask_batch_reply_max_bytes(K, d));
  for (int k = 0; k < K; k++) {
    snprintf(st->ids[k], sizeof st->ids[k], "item-%d", 1000 + k);
    st->items[k] = st->ids[k];
  }
  st->pol = make_policy(O3M_ALGO_LINUCB, O3M_MODEL_SHARED, d, K, 3);
  st->dec = xmalloc(sizeof(int) * (size_t)nrec);
}

static void e_free(e_state *st) {
  for (int j = 0; j < E_PP; j++) o3m_secagg_destroy(st->sa[j]);
  parties_free(&st->ps);
  o3m_policy_destroy(st->pol);
  free(st->Y);
  free(st->Ypp);
  free(st->Wq);
  free(st->acc);
  free(st->packed);
  free(st->dec);
}

static void e_report(const char *what, const double *ta, const double *tb, double *ratio, int np,
                     int B) {
  double a[256], b[256];
  memcpy(a, ta, sizeof(double) * np);
  memcpy(b, tb, sizeof(double) * np);
  printf("    %-34s %10.2f us %10.2f us %8.3f   (%d pairs x %d)\n", what, 1e6 * median(a, np),
         1e6 * median(b, np), median(ratio, np), np, B);
}

/* The PP's masks are almost all stream generation: bytes of keystream per
 * round for its 3 peers, from OpenSSL's EVP AES-256-CTR (AES-NI, what
 * o3m_secagg uses) and, for comparison, libsodium's ChaCha20-IETF, both
 * rekeyed per stream as the module does. Interleaved, medians. */
static void e_streams(const bench_opts *o, size_t bytes) {
  unsigned char *zero = calloc(1, bytes), *out = xmalloc(bytes);
  unsigned char key[32] = {1}, n12[12] = {0}, iv[16] = {0};
  EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
  if (!zero || !ctx) die(O3M_ENOMEM, "streams");
  int np = o->quick ? 6 : 40, reps = 200, len;
  double tc[256], ta[256], r[256];
  for (int i = 0; i < np; i++) {
    double t0 = o3m_clock_s();
    for (int k = 0; k < reps; k++) {
      key[0] = (unsigned char)k;
      crypto_stream_chacha20_ietf_xor_ic(out, zero, bytes, n12, 0, key);
    }
    double t1 = o3m_clock_s();
    for (int k = 0; k < reps; k++) {
      key[0] = (unsigned char)k;
      if (EVP_EncryptInit_ex(ctx, EVP_aes_256_ctr(), NULL, key, iv) != 1 ||
          EVP_EncryptUpdate(ctx, out, &len, zero, (int)bytes) != 1)
        die(O3M_EINVAL, "AES-256-CTR");
    }
    double t2 = o3m_clock_s();
    tc[i] = (t1 - t0) / reps;
    ta[i] = (t2 - t1) / reps;
    r[i] = ta[i] / tc[i];
  }
  printf("    keystream of one round (%zu bytes): ChaCha20 (libsodium) %.2f us = %.2f GB/s,\n"
         "    AES-256-CTR (OpenSSL EVP, AES-NI) %.2f us = %.2f GB/s; AES/ChaCha20 %.3f\n",
         bytes, 1e6 * median(tc, np), bytes / median(tc, np) / 1e9, 1e6 * median(ta, np),
         bytes / median(ta, np) / 1e9, median(r, np));
  EVP_CIPHER_CTX_free(ctx);
  free(zero);
  free(out);
}

static void section_e(const bench_opts *o, bench_summary *sum) {
  const int d = 100, K = 20, M = N_PARTIES;
  const size_t kd = (size_t)K * d;
  printf("\n(e) Secure aggregation vs per-party parts, d = %d, K = %d, M = %d (AP + %d PPs),\n"
         "    one round per MaskBatch. PP: its work per MaskBatch up to the packed reply\n"
         "    (the feature lookup and the network, equal in both modes, excluded). AP: the\n"
         "    combination of the parts with its checks, then choose + update (shared\n"
         "    LinUCB). Medians over interleaved batches; ratio = median secure/per-party.\n",
         d, K, M, E_PP);
  if (sodium_init() < 0) die(O3M_ERANDOM, "libsodium");
  eval_synth *s = make_synth(d, K, 4242);
  double *X = xmalloc(sizeof(double) * E_POOL * kd), *rew = xmalloc(sizeof(double) * E_POOL * K);
  double *Yparts = xmalloc(sizeof(double) * E_POOL * M * kd);
  uint64_t *W = xmalloc(sizeof(uint64_t) * E_POOL * E_PP * kd);
  for (int p = 0; p < E_POOL; p++)
    if (eval_synth_round(s, X + p * kd, NULL, rew + (size_t)p * K)) die(O3M_EINVAL, "synth");
  eval_synth_destroy(s);
  int np = o->quick ? 6 : 40;
  e_state per, sec;
  e_init(&per, 0, X, rew, Yparts, W, 1 << 22);
  e_init(&sec, 1, X, rew, Yparts, W, 1 << 22);
  /* The parts and the PPs' words of every pool round, untimed. */
  for (int p = 0; p < E_POOL; p++) {
    parties_mask(&per.ps, K, X + p * kd, Yparts + (size_t)p * M * kd);
    unsigned char nonce[32] = {(unsigned char)p};
    for (int j = 0; j < E_PP; j++) {
      o3m_secagg_begin(sec.sa[j], 1, nonce, d, 1);
      o3m_secagg_query(sec.sa[j], "user-17", K, (const char *const *)sec.items);
      if (o3m_secagg_mask(sec.sa[j], kd, Yparts + (size_t)p * M * kd + (size_t)(j + 1) * kd,
                          W + (size_t)p * E_PP * kd + (size_t)j * kd, NULL) < 0)
        die(O3M_ERANGE, "encode");
    }
  }
  double ta[256], tb[256], ratio[256];
  printf("    %-34s %13s %13s %8s\n", "", "per-party", "secure", "ratio");
  int B = calibrate_pair(e_pp_batch, &per, &sec, o->quick ? 0.005 : 0.03);
  run_pairs(e_pp_batch, &per, &sec, np, B, ta, tb, ratio);
  e_report("PP time per MaskBatch", ta, tb, ratio, np, B);
  sum->e_pp_ratio = median(ratio, np);
  /* The AP: warm both policies alike, then interleave. */
  for (int t = 0; t < o->warm_updates / 10; t++) {
    e_ap_batch(&per, 1, 0);
    e_ap_batch(&sec, 1, 0);
  }
  per.ndec = sec.ndec = 0;
  B = calibrate_pair(e_ap_batch, &per, &sec, o->quick ? 0.005 : 0.03);
  per.ndec = sec.ndec = 0;
  run_pairs(e_ap_batch, &per, &sec, np, B, ta, tb, ratio);
  e_report("AP round", ta, tb, ratio, np, B);
  sum->e_ap_ratio = median(ratio, np);
  e_streams(o, (size_t)(E_PP - 1) * kd * 8);
  int n = per.ndec < sec.ndec ? per.ndec : sec.ndec;
  printf("    decisions: secure vs per-party differ in %d of %d rounds\n",
         count_mismatch(per.dec, sec.dec, n), n);
  e_free(&per);
  e_free(&sec);
  free(X);
  free(rew);
  free(Yparts);
  free(W);
}

/* ---- (f) feature lookup: known vs unknown user (same time, no timing channel) ---- */

#define F_USERS 1000 /* rows of the user table */
#define F_COLS 100   /* its columns: the audit's 100 user columns at a PP */
#define F_K 20       /* candidates per query */

/* Times one o3m_features_fill of user id and the F_K candidates items (NULL
 * without an item table), in nanoseconds; the benchmark dies if the lookup
 * fails. */
static double f_time(o3m_features *f, const char *id, const char *const *items, double *X) {
  uint64_t t0 = o3m_clock_ns();
  if (o3m_features_fill(f, id, F_K, items, X, NULL, NULL) < 0) die(O3M_EINVAL, "fill");
  return (double)(o3m_clock_ns() - t0);
}

/* Prints one variant's per-query times: median, the 10th and 90th
 * percentiles and the interquartile range. */
static void f_report(const char *what, double *t, int n) {
  printf("    %-22s %9.0f %9.0f %9.0f %9.0f\n", what, median(t, n), quantile(t, n, 0.10),
         quantile(t, n, 0.90), quantile(t, n, 0.75) - quantile(t, n, 0.25));
}

/* Loads a synthetic table of F_USERS rows x F_COLS columns of kind (ids
 * prefix0, prefix1, ...) as a party's only table, with a dummy-row key and
 * the daemon's default norm bound (far above the rows, o3m_config.h). */
static o3m_features *f_table(o3m_features_kind kind, const char *prefix) {
  char path[] = "/tmp/o3m-bench-f-XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) die(O3M_EIO, "mkstemp");
  close(fd);
  o3m_err e;
  o3m_features *f = NULL;
  int rc = eval_tables_write_synthetic(path, kind, prefix, F_USERS, F_COLS, 77, &e);
  if (!rc)
    rc = kind == O3M_FEATURES_USERS ? o3m_features_load(&f, path, NULL, F_COLS, &e)
                                    : o3m_features_load(&f, NULL, path, F_COLS, &e);
  unlink(path);
  if (rc) die(rc, o3m_err_message(&e));
  unsigned char key[O3M_FEATURES_KEY_BYTES] = {1, 2, 3};
  o3m_features_set_dummy_key(f, key);
  if ((rc = o3m_features_check_norm(f, 1e3, &e)) < 0) die(rc, o3m_err_message(&e));
  return f;
}

/* One table of section (f): n known queries against n unknown ones, in
 * A B B A order, each timed on its own; returns the ratio of the medians.
 * With the user table a query is one user (a fresh unknown id each time);
 * with the item table it is F_K items, all known or all unknown. */
static double f_case(o3m_features *f, int items, int n) {
  double *X = xmalloc(sizeof(double) * F_K * F_COLS);
  double *tk = xmalloc(sizeof(double) * n), *tu = xmalloc(sizeof(double) * n);
  char known[F_K][32], unknown[F_K][32];
  const char *kp[F_K], *up[F_K];
  for (int k = 0; k < F_K; k++) kp[k] = known[k], up[k] = unknown[k];
  for (int i = -200; i < n; i++) { /* 200 untimed queries warm the caches */
    int m = items ? F_K : 1;
    for (int k = 0; k < m; k++) {
      /* Known ids stride through every row of the table. */
      long q = (long)(i + 200) * m + k;
      snprintf(known[k], sizeof known[k], "%c%d", items ? 'i' : 'u', (int)(q * 7919L % F_USERS));
      snprintf(unknown[k], sizeof unknown[k], "stranger-%d-%d", i, k);
    }
    const char *ku = items ? "nobody" : known[0], *uu = items ? "nobody" : unknown[0];
    const char *const *ki = items ? kp : NULL, *const *ui = items ? up : NULL;
    double a, b;
    if (i % 2 == 0) {
      a = f_time(f, ku, ki, X);
      b = f_time(f, uu, ui, X);
    } else {
      b = f_time(f, uu, ui, X);
      a = f_time(f, ku, ki, X);
    }
    if (i >= 0) tk[i] = a, tu[i] = b;
  }
  printf("    %-22s %9s %9s %9s %9s\n", items ? "item table" : "user table", "median", "p10",
         "p90", "IQR");
  f_report(items ? "K known items" : "known user", tk, n);
  f_report(items ? "K unknown items" : "unknown user", tu, n);
  double r = median(tu, n) / median(tk, n);
  printf("    median unknown / known: %.3f\n", r);
  free(X);
  free(tk);
  free(tu);
  return r;
}

/* A passive participant's feature lookup of ids it holds against ids it
 * does not (whose rows are then dummies, under a dummy-row key and a norm
 * bound as the daemon sets them), query by query, with fresh unknown ids,
 * as an active participant probing users would send them: first a user
 * table, then an item table. Every query is timed on its own: the spread
 * is what an observer of single queries works against. The rest of the
 * PP's work per query (Y = X^j (Q^j)^T, the reply) does not depend on the
 * ids and is left out, so the ratio is an upper bound of what the daemon
 * shows. */
static void section_f(const bench_opts *o, bench_summary *sum) {
  const int n = o->quick ? 2000 : 40000;
  printf("\n(f) Feature lookup, known vs unknown ids (must match): a table of %d rows x %d\n"
         "    columns, K = %d, dummy-row key and norm bound set; %d queries each, timed one\n"
         "    by one, interleaved; nanoseconds per o3m_features_fill.\n",
         F_USERS, F_COLS, F_K, n);
  o3m_features *f = f_table(O3M_FEATURES_USERS, "u");
  sum->f_ratio = f_case(f, 0, n);
  o3m_features_destroy(f);
  f = f_table(O3M_FEATURES_ITEMS, "i");
  sum->f_item_ratio = f_case(f, 1, o->quick ? 500 : 4000);
  o3m_features_destroy(f);
}

/* ---- (g) one scoring call per batch vs one per round ---- */

/* The AP decides a batch's rounds against one model state (no reward lands
 * between them), so the shared model can score all of their candidates
 * with one BLAS call (o3m_policy_choose_batch). Both variants choose for
 * the same G_ROUNDS rounds of K candidates at d = 100 on twin policies
 * warmed alike: one o3m_policy_choose per round, or one batch call. No
 * update, so the state stays put and the decisions must agree (LinTS too:
 * the twins draw the same numbers, in the same order, call for call). */
#define G_ROUNDS 32
static const int G_KS[] = {20, 100, 500};

typedef struct g_state {
  o3m_policy *pol;
  int K, d, batch;
  const double *X; /* G_ROUNDS x K x d */
  o3m_policy_round r[G_ROUNDS];
  int *dec, ndec;
} g_state;

/* B batches of G_ROUNDS rounds of one variant; seconds per batch (the
 * unit calibrate_pair sizes B in). */
static double g_batch(void *v, int B, int record) {
  g_state *g = v;
  double t0 = o3m_clock_s();
  for (int b = 0; b < B; b++) {
    if (g->batch) {
      int rc = o3m_policy_choose_batch(g->pol, G_ROUNDS, g->r);
      for (int i = 0; !rc && i < G_ROUNDS; i++) rc = g->r[i].rc;
      if (rc) die(rc, "o3m_policy_choose_batch");
    } else {
      for (int i = 0; i < G_ROUNDS; i++) {
        o3m_policy_round *q = &g->r[i];
        int rc = o3m_policy_choose(g->pol, q->K, q->X, NULL, &q->chosen, &q->score);
        if (rc) die(rc, "o3m_policy_choose");
      }
    }
    if (record)
      for (int i = 0; i < G_ROUNDS; i++) g->dec[g->ndec++] = g->r[i].chosen;
  }
  return (o3m_clock_s() - t0) / B;
}

static void section_g(const bench_opts *o) {
  const int d = 100, NK = NELEM(G_KS);
  printf("\n(g) The AP's scoring of a batch of %d rounds: one o3m_policy_choose per round vs\n"
         "    one o3m_policy_choose_batch, d = %d, shared model, no update in\n"
         "    between (as within one AP batch). Twin policies warmed with %d updates;\n"
         "    interleaved, medians over %d pairs of batches; us per round.\n",
         G_ROUNDS, d, o->warm_updates, o->pairs);
  printf("  %-7s %5s %14s %14s %9s   %s\n", "algo", "K", "per round us", "batch us", "speedup",
         "same decisions");
  for (int a = 0; a < 2; a++) {
    o3m_algo algo = a == 0 ? O3M_ALGO_LINUCB : O3M_ALGO_LINTS;
    for (int ki = 0; ki < NK; ki++) {
      int K = G_KS[ki];
      g_state g[2];
      double *X = xmalloc(sizeof(double) * G_ROUNDS * (size_t)K * d);
      eval_synth *s = make_synth(d, K, 8000 + K);
      for (int i = 0; i < G_ROUNDS; i++) {
        int rc = eval_synth_round(s, X + (size_t)i * K * d, NULL, NULL);
        if (rc) die(rc, "contexts");
      }
      eval_synth_destroy(s);
      for (int v = 0; v < 2; v++) {
        g[v].pol = make_policy(algo, O3M_MODEL_SHARED, d, K, 1);
        warm_updates(g[v].pol, NULL, NULL, d, o->warm_updates, 8100 + K);
        g[v].K = K;
        g[v].d = d;
        g[v].batch = v;
        g[v].X = X;
        g[v].ndec = 0;
        for (int i = 0; i < G_ROUNDS; i++)
          g[v].r[i] = (o3m_policy_round){.K = K, .X = X + (size_t)i * K * d};
      }
      int np = o->pairs;
      double *ta = xmalloc(sizeof(double) * np), *tb = xmalloc(sizeof(double) * np);
      double *ra = xmalloc(sizeof(double) * np);
      int B = calibrate_pair(g_batch, &g[0], &g[1], o->cell_s / (2.0 * np));
      for (int v = 0; v < 2; v++) g[v].dec = xmalloc(sizeof(int) * (size_t)B * np * G_ROUNDS);
      run_pairs(g_batch, &g[0], &g[1], np, B, ta, tb, ra);
      /* ra is batch / per round; the speedup is its inverse. */
      double t0 = median(ta, np) / G_ROUNDS, t1 = median(tb, np) / G_ROUNDS, r = median(ra, np);
      char same[64];
      same_label(same, sizeof same, count_mismatch(g[0].dec, g[1].dec, g[0].ndec), g[0].ndec);
      printf("  %-7s %5d %14.2f %14.2f %8.2fx   %s\n", o3m_algo_name(algo), K, t0 * 1e6,
             t1 * 1e6, 1.0 / r, same);
      fflush(stdout);
      for (int v = 0; v < 2; v++) {
        o3m_policy_destroy(g[v].pol);
        free(g[v].dec);
      }
      free(ta);
      free(tb);
      free(ra);
      free(X);
    }
  }
}

/* ---- driver ---- */

/* A number macro as a string, for the help text. */
#define STR_(x) #x
#define STR(x) STR_(x)

enum { OPT_QUICK, OPT_SECTIONS, OPT_POOL_MB };
static const o3m_cli_option options[] = {
    [OPT_QUICK] = {"quick", NULL, "few repeats: a smoke run of a few seconds"},
    [OPT_SECTIONS] = {"sections", "LIST", "run only these sections (default abcdefg)"},
    [OPT_POOL_MB] = {"pool-mb", "N", "(a): cap in MB of the replayed pool of rounds, 1..4096 "
                                     "(default " STR(POOL_MB_DEFAULT) "; 64+: from memory)"},
    {NULL, NULL, NULL},
};
static const o3m_cli_spec spec = {
    "o3m-bench-core", "[--quick] [--sections abcdefg] [--pool-mb N]",
    "Benchmarks the bandit engine (see eval/bench/README.md).", options,
    "sections:\n"
    "  a  per-round time, central vs masked (M = " STR(N_PARTIES) "), shared LinUCB and LinTS\n"
    "  b  the paper's full-inverse round vs ours (Sherman-Morrison)\n"
    "  c  decisions per second at d = 100, K = 10, one thread\n"
    "  d  scoring GFLOP/s as a fraction of the dgemm rate\n"
    "  e  secure aggregation vs per-party parts (PP per MaskBatch, AP round)\n"
    "  f  PP feature lookup time, known vs unknown user (should be 1.0)\n"
    "  g  scoring a batch of rounds with one call vs one call per round\n"
    "exit 0 whether targets are met or not.\n"};

static const char *pass(int ok) { return ok ? "PASS" : "MISS"; }

/* The 1-minute load average from /proc/loadavg, or -1 if unreadable: other
 * processes on the machine inflate every absolute figure, so the report says
 * how busy the machine was. */
static double load_average(void) {
  FILE *f = fopen("/proc/loadavg", "r");
  double l = -1;
  if (f) {
    if (fscanf(f, "%lf", &l) != 1) l = -1;
    fclose(f);
  }
  return l;
}

int main(int argc, char **argv) {
  bench_opts o = {.quick = 0, .sections = "abcdefg"};
  double pool_mb = POOL_MB_DEFAULT;
  o3m_cli cl;
  o3m_cli_begin(&cl, &spec, argc, argv);
  const char *v;
  for (int i; (i = o3m_cli_next(&cl, &v)) != O3M_CLI_END;) {
    if (i == O3M_CLI_STOP) return cl.exit_code;
    if (i == OPT_QUICK) {
      o.quick = 1;
    } else if (i == OPT_SECTIONS) {
      if (!*v || strlen(v) > 7 || strspn(v, "abcdefg") != strlen(v))
        return o3m_cli_usage_error(&spec, "--sections: '%s' is not a subset of abcdefg", v);
      snprintf(o.sections, sizeof o.sections, "%s", v);
    } else if (i == OPT_POOL_MB) {
      char *end;
      pool_mb = strtod(v, &end);
      if (*end || !(pool_mb >= 1 && pool_mb <= 4096))
        return o3m_cli_usage_error(&spec, "--pool-mb: '%s' is not a number in 1..4096", v);
    }
  }
  if (o3m_cli_operands(&cl) < argc)
    return o3m_cli_usage_error(&spec, "unexpected argument '%s'", argv[o3m_cli_operands(&cl)]);
  if (o.quick) {
    o.pairs = 5;
    o.cell_s = 0.08;
    o.warm_updates = 200;
    o.warm_rounds = 2000;
    o.reps_c = 5;
    o.batch_c_s = 0.01;
    o.reps_d = 3;
    o.batch_d_s = 0.01;
  } else {
    o.pairs = 31;
    o.cell_s = 2.5;
    o.warm_updates = 2000;
    o.warm_rounds = 2000;
    o.reps_c = 41;
    o.batch_c_s = 0.04;
    o.reps_d = 11;
    o.batch_d_s = 0.05;
  }
  o.pool_mb = pool_mb;
  o3m_blas_single_thread();

  printf(
      "o3m-bench-core%s: OpenBLAS single-threaded; clock CLOCK_MONOTONIC; "
      "load average %.2f\n",
      o.quick ? " --quick" : "", load_average());
  bench_summary sum = {
      .worst_ratio = NAN, .speedup_d100 = NAN, .dps_disj_ucb = NAN, .dps_disj_ts = NAN,
      .f_ratio = NAN, .f_item_ratio = NAN};
  double t0 = o3m_clock_s();
  if (strchr(o.sections, 'a')) section_a(&o, &sum);
  if (strchr(o.sections, 'b')) section_b(&o, &sum);
  if (strchr(o.sections, 'c')) section_c(&o, &sum);
  if (strchr(o.sections, 'd')) section_d(&o);
  if (strchr(o.sections, 'e')) section_e(&o, &sum);
  if (strchr(o.sections, 'f')) section_f(&o, &sum);
  if (strchr(o.sections, 'g')) section_g(&o);

  printf("\ntargets\n");
  if (strchr(o.sections, 'a'))
    printf("  %-52s %10.3f  %s  (worst cell d=%d K=%d; %d of %d cells <= 1.10)\n",
           "masked/central per round, shared LinUCB <= 1.10", sum.worst_ratio,
           pass(sum.worst_ratio <= TARGET_MASKED_RATIO), sum.worst_d, sum.worst_K, sum.cells_pass,
           sum.cells);
  if (strchr(o.sections, 'b'))
    printf("  %-52s %9.1fx  %s%s\n", "ours vs full-inverse round, d=100 K=10 >= 20x",
           sum.speedup_d100, pass(sum.speedup_d100 >= TARGET_SPEEDUP),
           sum.same_b ? "" : "  (decisions differed)");
  if (strchr(o.sections, 'c')) {
    printf("  %-52s %10.0f  %s\n", "disjoint LinUCB decisions/s, d=100 K=10 >= 50000",
           sum.dps_disj_ucb, pass(sum.dps_disj_ucb >= TARGET_DPS));
    printf("  %-52s %10.0f  %s\n", "disjoint LinTS decisions/s, d=100 K=10 >= 50000",
           sum.dps_disj_ts, pass(sum.dps_disj_ts >= TARGET_DPS));
  }
  if (strchr(o.sections, 'e')) {
    printf("  %-52s %10.3f  %s\n", "secure/per-party PP time per MaskBatch <= 1.5",
           sum.e_pp_ratio, pass(sum.e_pp_ratio <= 1.5));
    printf("  %-52s %10.3f  %s\n", "secure/per-party AP round <= 1.2", sum.e_ap_ratio,
           pass(sum.e_ap_ratio <= 1.2));
  }
  if (strchr(o.sections, 'f')) {
    printf("  %-52s %10.3f  %s\n", "unknown/known user lookup time, median <= 1.05",
           sum.f_ratio, pass(sum.f_ratio <= 1.05));
    printf("  %-52s %10.3f  %s\n", "unknown/known items lookup time, median <= 1.05",
           sum.f_item_ratio, pass(sum.f_item_ratio <= 1.05));
  }
  printf("  (total run time %.1f s; load average at the end %.2f)\n", o3m_clock_s() - t0, load_average());
  return 0;
}
