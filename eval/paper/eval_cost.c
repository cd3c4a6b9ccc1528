/* eval_cost.c -- `o3m-eval cost`: what federation costs, measured.
 *
 * Two experiments, both timed with CLOCK_MONOTONIC in this process, single-
 * threaded BLAS:
 *
 * Figure 5 (the paper's cost figure). For every d of the sweep and every K,
 * T rounds of the shared (default) LinUCB and LinTS are played twice on the
 * same contexts: central (choose + update on x) and federated (the M parties'
 * masking of their column blocks with o3m_block_apply through eval_masker,
 * the active participant's summation, then choose + update on Q x). The
 * contexts come from the paper's synthetic stream, drawn before the clock
 * starts into a pool of --pool rounds that is cycled (drawing 1000 x 200
 * Gaussians per round would otherwise cost more than some of the pipelines
 * being timed; the timed code does not depend on the values). Mask
 * generation is a one-off and is not in these timings; C.3 times it. The
 * masking alone is timed as a third pipeline so that the table shows where the
 * extra time goes. Communication is COUNTED, not measured: per round each of
 * the M-1 passive parties sends K masked d-vectors of float64, so
 * T K (M-1) d 8 bytes (the active participant's own block never leaves it;
 * framing, the PMG's one-off blocks and the candidate-list request are not
 * included).
 *
 * Appendix C.3. One "statistic computation" at the small (d 100, K 20, N 5)
 * and large (d 500, K 10, N 500, so d_j = 1) settings. The paper compares
 * O3M with homomorphic encryption, MPC and differential privacy as ways for
 * the parties to produce, jointly, the per-round quantities the bandit needs
 * from features split across them; the part O3M replaces is therefore the
 * masking of the K candidates' contexts by all N parties and their summation
 * into Q x (what the AP then feeds to an ordinary LinUCB). That is the
 * primary number. Because the paper's own figures (0.006 s, 7.28 s) are far
 * above what a masked matrix product costs, they probably include more (a
 * Python prototype's per-party overhead, or the draw of Q), so three more
 * timings are printed beside it: the same plus the AP's statistics
 * x~^T theta~ and x~^T Lambda~^-1 x~ for the K arms, a full round (masking,
 * choose, update), and the one-off mask generation (Q by Gram-Schmidt, cut
 * into N blocks). The first three are timed together, repetition by
 * repetition, so that a part cannot exceed the whole through load that fell
 * on one of them only (eval_cost.h). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "o3m_policy.h"
#include "eval_cmds.h"
#include "eval_cost.h"
#include "eval_masker.h"
#include "eval_plot.h"
#include "eval_regret.h"
#include "eval_synth.h"
#include "o3m_blas.h"
#include "o3m_cli.h"
#include "o3m_clock.h"
#include "o3m_mask.h"

#define COST_MAX_LIST 16

typedef struct cost_opts {
  long T;
  int nK, Ks[COST_MAX_LIST];
  int nd, ds[COST_MAX_LIST];
  int M;
  int algos;           /* bit 1 linucb, bit 2 lints */
  o3m_model_kind model; /* Figure 5 model */
  int pool;            /* rounds of contexts cycled in Figure 5 */
  double min_time;     /* seconds per C.3 measurement */
  int fig5, c3;
  const char *out_dir;
  int plots;   /* 0: --no-plots */
  int formats; /* eval_plot.h set */
} cost_opts;

/* One Figure 5 measurement, kept for the plot. */
typedef struct fig5_row {
  int algo; /* 1 linucb, 2 lints */
  int K, d;
  double ratio; /* federated / central seconds */
} fig5_row;

static int make_policy(o3m_policy **p, o3m_algo a, o3m_model_kind m, int d, int K, o3m_err *e) {
  o3m_policy_config pc;
  o3m_policy_config_default(&pc);
  pc.algo = a;
  pc.model = m;
  pc.d = d;
  pc.n_arms = K;
  pc.max_candidates = K;
  return o3m_policy_create(p, &pc, e);
}

/* Plays rounds [t0, t1) over the pool, masked when mk is not NULL, and adds
 * the elapsed seconds to *sec; arms[t] records the decisions. With p NULL it
 * only masks (the masking-alone timing). */
static int play(o3m_policy *p, eval_masker *mk, long t0, long t1, int K, int d, int P,
                const double *pool, const double *rew, int *arms, double *sec, o3m_err *e) {
  double start = o3m_clock_s();
  volatile double sink = 0;
  for (long t = t0; t < t1; t++) {
    const double *X = pool + (size_t)(t % P) * K * d;
    const double *V = mk ? eval_masker_apply(mk, K, X) : X;
    if (!p) {
      sink += V[0];
      continue;
    }
    int arm;
    int rc = o3m_policy_choose(p, K, V, NULL, &arm, NULL);
    if (!rc) rc = o3m_policy_update(p, arm, V + (size_t)arm * d, rew[(size_t)(t % P) * K + arm]);
    if (rc) return o3m_err_set(e, rc, "round %ld: policy failed: %s", t, o3m_strerror(rc));
    arms[t] = arm;
  }
  (void)sink;
  *sec += o3m_clock_s() - start;
  return O3M_OK;
}

/* Rounds per slice when the pipelines take turns (see run_fig5). */
#define COST_SLICE 50

static int run_fig5(const cost_opts *o, FILE *csv, fig5_row *rows, int *n_rows, o3m_err *e) {
  printf("Figure 5: relative computation cost federated/central, measured in-process\n"
         "  T=%ld, M=%d parties (near-equal column blocks), %s model, single-threaded BLAS.\n"
         "  central   = choose + update on x;  federated = M parties mask their blocks\n"
         "  (o3m_block_apply) + AP sums + choose + update on Q x;  mask = masking+sum alone.\n"
         "  Contexts: paper's synthetic stream, %d pre-drawn rounds cycled (drawing excluded).\n"
         "  The three pipelines take turns every %d rounds (fair under background load).\n"
         "  comm = T*K*(M-1)*d*8 bytes: COUNTED from what the M-1 passive parties would send\n"
         "  (float64), not measured on a wire.\n\n",
         o->T, o->M, o3m_model_name(o->model), o->pool, COST_SLICE);
  printf("%-7s %5s %4s %11s %11s %9s %9s %7s %14s %9s\n", "algo", "K", "d", "central s",
         "federated s", "mask s", "fed/cen", "agree%", "comm bytes", "comm GB");
  if (csv)
    fprintf(csv, "algo,model,T,M,K,d,central_s,federated_s,mask_s,ratio,agree,comm_bytes\n");
  int rc = O3M_OK;
  int *arms_c = malloc(sizeof(int) * (size_t)o->T), *arms_f = malloc(sizeof(int) * (size_t)o->T);
  if (!arms_c || !arms_f) {
    rc = o3m_err_set(e, O3M_ENOMEM, "out of memory for T = %ld", o->T);
    goto done;
  }
  for (int id = 0; id < o->nd && !rc; id++) {
    for (int iK = 0; iK < o->nK && !rc; iK++) {
      int d = o->ds[id], K = o->Ks[iK], P = o->pool;
      if (P > o->T) P = (int)o->T;
      o3m_partition part;
      eval_synth *syn = NULL;
      eval_masker *mk = NULL;
      double *pool = malloc(sizeof(double) * (size_t)P * K * d);
      double *rew = malloc(sizeof(double) * (size_t)P * K);
      if (!pool || !rew) rc = o3m_err_set(e, O3M_ENOMEM, "out of memory for the context pool");
      if (!rc) rc = o3m_partition_even(&part, d, o->M, e);
      eval_synth_config sc = {.d = d, .K = K, .noise_var = 0.05, .seed = 1};
      if (!rc && (rc = eval_synth_create(&syn, &sc)) != 0)
        o3m_err_set(e, rc, "synthetic stream: %s", o3m_strerror(rc));
      for (int t = 0; !rc && t < P; t++)
        rc = eval_synth_round(syn, pool + (size_t)t * K * d, NULL, rew + (size_t)t * K);
      if (!rc) rc = eval_masker_create(&mk, &part, K, 1, 7, EVAL_AGG_PER_PARTY, e);
      for (int a = 1; a <= 2 && !rc; a++) {
        if (!(o->algos & a)) continue;
        o3m_algo algo = a == 1 ? O3M_ALGO_LINUCB : O3M_ALGO_LINTS;
        o3m_policy *pc = NULL, *pf = NULL;
        double sc_s = 0, sf_s = 0, mask_s = 0;
        rc = make_policy(&pc, algo, o->model, d, K, e);
        if (!rc) rc = make_policy(&pf, algo, o->model, d, K, e);
        /* The three pipelines take turns in slices of COST_SLICE rounds, in
         * rotating order, so that load from other processes on the machine
         * falls on all of them alike instead of on whichever ran last. */
        for (long t0 = 0, n = 0; !rc && t0 < o->T; t0 += COST_SLICE, n++) {
          long t1 = t0 + COST_SLICE < o->T ? t0 + COST_SLICE : o->T;
          for (int k = 0; k < 3 && !rc; k++) {
            switch ((k + n) % 3) {
            case 0: rc = play(pc, NULL, t0, t1, K, d, P, pool, rew, arms_c, &sc_s, e); break;
            case 1: rc = play(pf, mk, t0, t1, K, d, P, pool, rew, arms_f, &sf_s, e); break;
            default: rc = play(NULL, mk, t0, t1, K, d, P, pool, rew, NULL, &mask_s, e); break;
            }
          }
        }
        o3m_policy_destroy(pc);
        o3m_policy_destroy(pf);
        if (rc) break;
        long agree = 0;
        for (long t = 0; t < o->T; t++) agree += arms_c[t] == arms_f[t];
        double bytes = (double)o->T * K * (o->M - 1) * d * 8.0;
        printf("%-7s %5d %4d %11.3f %11.3f %9.3f %9.2f %7.1f %14.0f %9.3f\n", o3m_algo_name(algo),
               K, d, sc_s, sf_s, mask_s, sf_s / sc_s, 100.0 * agree / o->T, bytes, bytes / 1e9);
        fflush(stdout);
        rows[*n_rows] = (fig5_row){a, K, d, sf_s / sc_s};
        ++*n_rows;
        if (csv)
          fprintf(csv, "%s,%s,%ld,%d,%d,%d,%.6f,%.6f,%.6f,%.4f,%.4f,%.0f\n", o3m_algo_name(algo),
                  o3m_model_name(o->model), o->T, o->M, K, d, sc_s, sf_s, mask_s, sf_s / sc_s,
                  (double)agree / o->T, bytes);
      }
      eval_masker_destroy(mk);
      eval_synth_destroy(syn);
      free(pool);
      free(rew);
    }
  }
  if (!rc)
    printf("note: shared LinTS here is O(K d + d^2) per round (rank-one Cholesky update, one\n"
           "  triangular solve), while masking is O(K d^2), so its ratio is large; the paper\n"
           "  re-inverts Lambda (O(d^3)) every round, which hides the masking. Shared LinTS\n"
           "  agreement is below 100%% by design: equal in distribution, not draw by draw.\n");
done:
  free(arms_c);
  free(arms_f);
  return rc;
}

/* Repetitions per C.3 row: at least C3_MIN_REPS, then until --min-time has
 * passed, at most C3_MAX_REPS. */
#define C3_MIN_REPS 31
#define C3_MAX_REPS 200000

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double eval_cost_median(double *x, long n) {
  qsort(x, (size_t)n, sizeof x[0], cmp_double);
  return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

int eval_cost_c3_summarize(long n, const double *a, const double *b, const double *c,
                           double *scratch, eval_cost_c3_times *out) {
  if (n < 1) return O3M_EINVAL;
  long inv = 0;
  for (long j = 0; j < n; j++) {
    scratch[j] = a[j];
    inv += c[j] < b[j];
  }
  out->mask_sum = eval_cost_median(scratch, n);
  for (long j = 0; j < n; j++) scratch[j] = a[j] + b[j];
  out->mask_stats = eval_cost_median(scratch, n);
  for (long j = 0; j < n; j++) scratch[j] = a[j] + c[j];
  out->round = eval_cost_median(scratch, n);
  out->inverted = (double)inv / (double)n;
  out->reps = n;
  return O3M_OK;
}

/* Times C.3's three pipelines together (eval_cost.h): per repetition the
 * masking and summation of X, then the AP's statistics on the result, then
 * choose + update on the same result, each between two clock reads. */
static int time_c3(eval_masker *mk, o3m_policy *p, int K, int d, const double *X,
                   const double *rew, double min_time, eval_cost_c3_times *out, o3m_err *e) {
  double *mean = malloc(sizeof(double) * K), *var = malloc(sizeof(double) * K);
  double *t = malloc(sizeof(double) * 4 * C3_MAX_REPS);
  int rc = mean && var && t ? O3M_OK : o3m_err_set(e, O3M_ENOMEM, "C.3: out of memory");
  double *ta = t, *tb = t ? t + C3_MAX_REPS : NULL, *tc = t ? t + 2 * C3_MAX_REPS : NULL;
  volatile double sink = 0;
  long n = 0;
  double start = o3m_clock_s();
  while (!rc && n < C3_MAX_REPS && (n < C3_MIN_REPS || o3m_clock_s() - start < min_time)) {
    double t0 = o3m_clock_s();
    const double *V = eval_masker_apply(mk, K, X);
    double t1 = o3m_clock_s();
    rc = o3m_policy_stats(p, K, V, NULL, mean, var);
    double t2 = o3m_clock_s();
    int arm = 0;
    if (!rc) rc = o3m_policy_choose(p, K, V, NULL, &arm, NULL);
    if (!rc) rc = o3m_policy_update(p, arm, V + (size_t)arm * d, rew[arm]);
    double t3 = o3m_clock_s();
    if (rc) {
      o3m_err_set(e, rc, "C.3: policy failed: %s", o3m_strerror(rc));
      break;
    }
    sink += mean[0];
    ta[n] = t1 - t0;
    tb[n] = t2 - t1;
    tc[n] = t3 - t2;
    n++;
  }
  (void)sink;
  if (!rc) rc = eval_cost_c3_summarize(n, ta, tb, tc, t + 3 * C3_MAX_REPS, out);
  free(mean);
  free(var);
  free(t);
  return rc;
}

static int run_c3(const cost_opts *o, FILE *csv, o3m_err *e) {
  static const struct {
    const char *name;
    int d, K, N;
    double o3m, he, mpc, dp; /* paper, seconds; negative: not reported */
  } set[] = {{"small", 100, 20, 5, 0.006, 1190, 2.282, 0.005},
             {"large", 500, 10, 500, 7.28, -1, 103, 6.48}};
  printf("\nAppendix C.3: one \"statistic computation\", measured (medians of paired repetitions)\n"
         "  Interpretation: the cross-party work one round needs, which HE/MPC/DP would do\n"
         "  under encryption or noise: every party j masks the K candidates' block x^j with\n"
         "  Q^j and the AP sums the N parts into Q x  (column 'mask+sum', the O3M part).\n"
         "  Also shown: + the AP's K statistics x~'theta~ and x~'Lambda~^-1 x~ (shared\n"
         "  LinUCB), a full round (mask+sum, choose, update), and the one-off draw of Q\n"
         "  (d x d, Gram-Schmidt twice) cut into N blocks (mean of >= 3 draws).\n"
         "  Each repetition times mask+sum, then the statistics, then choose + update on the\n"
         "  same masked candidates: mask+sum = median(mask), +stats = median(mask + stats),\n"
         "  round = median(mask + choose + update); so a part exceeds the whole only if it\n"
         "  does within single repetitions ('inv %%' of them: noise).\n\n");
  printf("%-6s %4s %3s %4s %12s %12s %12s %12s %7s %5s | paper: %7s\n", "set",
         "d", "K", "N", "mask+sum s", "+stats s", "round s", "mask gen s", "reps", "inv %",
         "O3M");
  if (csv)
    fprintf(csv, "setting,d,K,N,mask_sum_s,mask_stats_s,round_s,mask_gen_s,paper_o3m_s,"
                 "paper_he_s,paper_mpc_s,paper_dp_s,comm_bytes_per_round,reps,inverted_fraction\n");
  for (size_t i = 0; i < sizeof set / sizeof set[0]; i++) {
    int d = set[i].d, K = set[i].K, N = set[i].N, rc;
    o3m_partition part;
    eval_synth *syn = NULL;
    eval_masker *mk = NULL;
    o3m_policy *p = NULL;
    double *X = malloc(sizeof(double) * (size_t)K * d), *rew = malloc(sizeof(double) * K);
    eval_synth_config sc = {.d = d, .K = K, .noise_var = 0.05, .seed = 1};
    rc = (!X || !rew) ? o3m_err_set(e, O3M_ENOMEM, "out of memory")
                      : o3m_partition_even(&part, d, N, e);
    if (!rc && (rc = eval_synth_create(&syn, &sc)) != 0)
      o3m_err_set(e, rc, "synthetic stream: %s", o3m_strerror(rc));
    if (!rc) rc = eval_synth_round(syn, X, NULL, rew);
    /* Mask generation: a few draws, each creating and discarding a masker. */
    double gen = 0;
    int ngen = 0;
    double t0 = o3m_clock_s();
    while (!rc && (ngen < 3 || o3m_clock_s() - t0 < o->min_time)) {
      eval_masker_destroy(mk);
      mk = NULL;
      rc = eval_masker_create(&mk, &part, K, 1, (uint64_t)ngen + 11, EVAL_AGG_PER_PARTY, e);
      ngen++;
    }
    gen = (o3m_clock_s() - t0) / (ngen ? ngen : 1);
    if (!rc) rc = make_policy(&p, O3M_ALGO_LINUCB, O3M_MODEL_SHARED, d, K, e);
    /* A few updates so that the statistics are not those of lambda I. */
    for (int t = 0; !rc && t < 20; t++) {
      const double *V = eval_masker_apply(mk, K, X);
      rc = o3m_policy_update(p, t % K, V + (size_t)(t % K) * d, rew[t % K]);
    }
    eval_cost_c3_times tm = {0};
    if (!rc) rc = time_c3(mk, p, K, d, X, rew, o->min_time, &tm, e);
    double s_mask = tm.mask_sum, s_stats = tm.mask_stats, s_round = tm.round;
    if (rc && !e->code) o3m_err_set(e, rc, "C.3 %s: %s", set[i].name, o3m_strerror(rc));
    if (!rc) {
      printf("%-6s %4d %3d %4d %12.3e %12.3e %12.3e %12.3e %7ld %5.1f | paper: %7g\n",
             set[i].name, d, K, N, s_mask, s_stats, s_round, gen, tm.reps, 100.0 * tm.inverted,
             set[i].o3m);
      if (csv) {
        /* A figure the paper does not report is an empty field. */
        char hecsv[32] = "";
        if (set[i].he >= 0) snprintf(hecsv, sizeof hecsv, "%g", set[i].he);
        fprintf(csv, "%s,%d,%d,%d,%.6e,%.6e,%.6e,%.6e,%g,%s,%g,%g,%.0f,%ld,%.4f\n", set[i].name,
                d, K, N, s_mask, s_stats, s_round, gen, set[i].o3m, hecsv, set[i].mpc,
                set[i].dp, (double)K * (N - 1) * d * 8.0, tm.reps, tm.inverted);
      }
    }
    o3m_policy_destroy(p);
    eval_masker_destroy(mk);
    eval_synth_destroy(syn);
    free(X);
    free(rew);
    if (rc) return rc;
  }
  printf("  communication per round (counted): K*(N-1)*d*8 bytes = %.0f (small), %.0f (large)\n",
         20.0 * 4 * 100 * 8, 10.0 * 499 * 500 * 8);
  printf("note: the paper's O3M times are 10^2..10^4 x ours; its text does not say what its\n"
         "  timing includes (language, per-party process or network overhead, the draw of Q).\n"
         "  HE, MPC and DP are measured beside O3M, on the same round statistic, by\n"
         "  `o3m-eval baselines` (the paper's HE/MPC/DP figures are quoted there, marked as\n"
         "  the paper's; this table's CSV keeps them in its paper_* columns).\n");
  return O3M_OK;
}

/* Figure 5 as a plot: the federated / central time ratio against d, one
 * line per K, one panel per algorithm. The numbers go into the script as
 * gnuplot datablocks (so the rows of cost_fig5.csv need no filtering), the
 * script is DIR/cost_plots.gp and the plot fig5_cost.<format>; the file
 * names are printed on stdout. O3M_ENOTFOUND when gnuplot is missing. */
static int plot_fig5(const cost_opts *o, const fig5_row *rows, int n, o3m_err *e) {
  char path[4096];
  snprintf(path, sizeof path, "%s/cost_plots.gp", o->out_dir);
  FILE *g = fopen(path, "w");
  if (!g) return o3m_err_set(e, O3M_EIO, "cannot write %s: %s", path, strerror(errno));
  eval_plot_preamble(g, "cost", "cost_plots.gp");
  for (int a = 1; a <= 2; a++)
    for (int k = 0; k < o->nK; k++) {
      fprintf(g, "$%s_K%d << EOD\n", a == 1 ? "linucb" : "lints", o->Ks[k]);
      for (int i = 0; i < n; i++)
        if (rows[i].algo == a && rows[i].K == o->Ks[k])
          fprintf(g, "%d,%.6f\n", rows[i].d, rows[i].ratio);
      fprintf(g, "EOD\n");
    }
  int both = (o->algos & 3) == 3;
  eval_plot_output(g, "fig5_cost");
  fprintf(g, "set xlabel 'context dimension d'\nset ylabel 'time federated / central'\n"
             "set key top left box opaque\nset yrange [0:*]\nset xtics (");
  for (int i = 0; i < o->nd; i++) fprintf(g, "%s%d", i ? ", " : "", o->ds[i]);
  fprintf(g, ")\n");
  if (both)
    fprintf(g, "set multiplot layout 1,2 title \"Relative computation cost, federated / central "
               "(M = %d parties, T = %ld, %s model)\"\n",
            o->M, o->T, o3m_model_name(o->model));
  static const char *colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                 "#8c564b", "#e377c2", "#7f7f7f"};
  for (int a = 1; a <= 2; a++) {
    if (!(o->algos & a)) continue;
    const char *an = a == 1 ? "LinUCB" : "LinTS", *key = a == 1 ? "linucb" : "lints";
    if (both) fprintf(g, "set title '%s'\n", an);
    else
      fprintf(g, "set title \"%s: relative computation cost, federated / central (M = %d "
                 "parties, T = %ld, %s model)\"\n",
              an, o->M, o->T, o3m_model_name(o->model));
    fprintf(g, "plot 1 with lines lc rgb '#888888' dt 3 title 'equal cost', \\\n");
    for (int k = 0; k < o->nK; k++)
      fprintf(g, "  $%s_K%d using 1:2 with linespoints lw 2 pt 7 lc rgb '%s' title 'K = %d'%s\n",
              key, o->Ks[k], colors[k % 8], o->Ks[k], k + 1 < o->nK ? ", \\" : "");
  }
  if (both) fprintf(g, "unset multiplot\n");
  fprintf(g, "unset output\n");
  int bad = ferror(g);
  if (fclose(g) != 0 || bad)
    return o3m_err_set(e, O3M_EIO, "cannot write %s: %s", path, strerror(errno));
  int rc = eval_plot_render(o->out_dir, "cost_plots.gp", o->formats, e);
  if (rc) return rc;
  char list[256] = "";
  eval_plot_append_names(list, sizeof list, "fig5_cost", o->formats);
  printf("plots in %s:%s\n", o->out_dir, list);
  return O3M_OK;
}

/* "a,b,c" of integers in lo..hi into out (at most COST_MAX_LIST): 1, or 0 after
 * the message naming the option and the entry. */
static int parse_list(const char *opt, const char *s, int lo, int hi, int *out, int *n) {
  return (*n = o3m_cli_parse_int_list("o3m-eval cost", opt, s, lo, hi, out, COST_MAX_LIST)) > 0;
}

enum {
  COST_T, COST_K, COST_D, COST_M, COST_ALGO, COST_MODEL, COST_POOL, COST_MIN_TIME, COST_ONLY,
  COST_OUT_DIR, COST_NO_PLOTS, COST_PLOT_FORMAT, COST_N
};
static const o3m_cli_option cost_options[] = {
    [COST_T] = {"T", "N", "rounds per Figure 5 run (5000)"},
    [COST_K] = {"K", "LIST", "arms per round (100,500,1000)"},
    [COST_D] = {"d", "LIST", "dimension sweep (50,100,200)"},
    [COST_M] = {"M", "N", "parties (5)"},
    [COST_ALGO] = {"algo", "linucb|lints|both", "the policies measured (both)"},
    [COST_MODEL] = {"model", "shared|disjoint", "Figure 5 model (shared)"},
    [COST_POOL] = {"pool", "N", "pre-drawn context rounds cycled in Figure 5 (16)"},
    [COST_MIN_TIME] = {"min-time", "S", "seconds of paired repetitions per C.3 row (0.5)"},
    [COST_ONLY] = {"only", "fig5|c3", "run one part"},
    [COST_OUT_DIR] = {"out-dir", "DIR",
                      "also write cost_fig5.csv, cost_c3.csv and the Figure 5 plot there "
                      "(eval-out/cost)"},
    [COST_NO_PLOTS] = {"no-plots", NULL, "CSVs only, no Figure 5 plot"},
    [COST_PLOT_FORMAT] = {"plot-format", "png,pdf,svg",
                          "Figure 5 plot formats, any of png, pdf and svg (png)"},
    [COST_N] = {NULL, NULL, NULL},
};
static const o3m_cli_spec cost_cli = {
    "o3m-eval cost", "[options]",
    "Measures federated vs central computation (paper Figure 5) and one statistic\n"
    "computation (appendix C.3); counts communication. Figure 5 is also plotted\n"
    "(fig5_cost.png: time federated / central against d, one line per K).",
    cost_options, NULL};

int eval_cost_main(int argc, char **argv) {
  cost_opts o = {.T = 5000, .nK = 3, .Ks = {100, 500, 1000}, .nd = 3, .ds = {50, 100, 200},
                 .M = 5, .algos = 3, .model = O3M_MODEL_SHARED, .pool = 16, .min_time = 0.5,
                 .fig5 = 1, .c3 = 1, .out_dir = "eval-out/cost", .plots = 1,
                 .formats = EVAL_PLOT_PNG};
  o3m_cli cl;
  o3m_cli_begin(&cl, &cost_cli, argc, argv);
  const char *arg;
  for (int ch; (ch = o3m_cli_next(&cl, &arg)) != O3M_CLI_END;) {
    char *end;
    switch (ch) {
    case O3M_CLI_STOP: return cl.exit_code;
    case COST_T:
      errno = 0;
      o.T = strtol(arg, &end, 10);
      if (end == arg || *end || errno || o.T < 1 || o.T > 100000000) {
        fprintf(stderr, "o3m-eval cost: --T: '%s' is not an integer in 1..100000000\n", arg);
        return 2;
      }
      break;
    case COST_K: if (!parse_list("K", arg, 1, O3M_EVAL_MAX_K, o.Ks, &o.nK)) return 2; break;
    case COST_D: if (!parse_list("d", arg, 1, O3M_MAX_DIM, o.ds, &o.nd)) return 2; break;
    case COST_M: {
      int n, v[COST_MAX_LIST];
      if (!parse_list("M", arg, 1, O3M_MAX_PARTIES, v, &n) || n != 1) return 2;
      o.M = v[0];
      break;
    }
    case COST_POOL: {
      int n, v[COST_MAX_LIST];
      if (!parse_list("pool", arg, 1, 100000, v, &n) || n != 1) return 2;
      o.pool = v[0];
      break;
    }
    case COST_ALGO:
      if (!strcmp(arg, "linucb")) o.algos = 1;
      else if (!strcmp(arg, "lints")) o.algos = 2;
      else if (!strcmp(arg, "both")) o.algos = 3;
      else {
        fprintf(stderr, "o3m-eval cost: --algo: '%s' is not linucb, lints or both\n", arg);
        return 2;
      }
      break;
    case COST_MODEL:
      if (o3m_model_parse(arg, &o.model)) {
        fprintf(stderr, "o3m-eval cost: --model: '%s' is not shared or disjoint\n", arg);
        return 2;
      }
      break;
    case COST_MIN_TIME:
      errno = 0;
      o.min_time = strtod(arg, &end);
      if (end == arg || *end || errno || !(o.min_time >= 0 && o.min_time <= 3600)) {
        fprintf(stderr, "o3m-eval cost: --min-time: '%s' is not a number in [0, 3600]\n",
                arg);
        return 2;
      }
      break;
    case COST_ONLY:
      if (!strcmp(arg, "fig5")) o.c3 = 0;
      else if (!strcmp(arg, "c3")) o.fig5 = 0;
      else {
        fprintf(stderr, "o3m-eval cost: --only: '%s' is not fig5 or c3\n", arg);
        return 2;
      }
      break;
    case COST_OUT_DIR: o.out_dir = arg; break;
    case COST_NO_PLOTS: o.plots = 0; break;
    case COST_PLOT_FORMAT: {
      o3m_err pe;
      if (eval_plot_formats_parse(arg, &o.formats, &pe)) {
        fprintf(stderr, "o3m-eval cost: %s\n", o3m_err_message(&pe));
        return 2;
      }
      break;
    }
    }
  }
  if (o3m_cli_operands(&cl) != argc)
    return o3m_cli_usage_error(&cost_cli, "unexpected argument '%s'", argv[o3m_cli_operands(&cl)]);
  for (int i = 0; o.fig5 && i < o.nd; i++)
    if (o.ds[i] < o.M) {
      fprintf(stderr, "o3m-eval cost: --d %d is smaller than --M %d\n", o.ds[i], o.M);
      return 2;
    }
  o3m_err err;
  o3m_err_clear(&err);
  FILE *f5 = NULL, *fc = NULL;
  char path[4096];
  if (eval_regret_mkdir_p(o.out_dir, &err)) {
    fprintf(stderr, "o3m-eval cost: %s\n", o3m_err_message(&err));
    return 1;
  }
  int rc = O3M_OK, n_rows = 0;
  /* Every Figure 5 measurement, for the plot: at most 2 algorithms x K x d. */
  fig5_row *rows = malloc(sizeof *rows * 2 * COST_MAX_LIST * COST_MAX_LIST);
  if (!rows) rc = o3m_err_set(&err, O3M_ENOMEM, "out of memory");
  double t0 = o3m_clock_s();
  if (!rc && o.fig5) {
    snprintf(path, sizeof path, "%s/cost_fig5.csv", o.out_dir);
    if (!(f5 = fopen(path, "w"))) rc = o3m_err_set(&err, O3M_EIO, "cannot write %s", path);
    if (!rc) rc = run_fig5(&o, f5, rows, &n_rows, &err);
    if (!rc && f5 && fflush(f5) != 0) rc = o3m_err_set(&err, O3M_EIO, "cannot write %s", path);
    if (!rc && o.plots) {
      o3m_err pe;
      o3m_err_clear(&pe);
      int prc = plot_fig5(&o, rows, n_rows, &pe);
      if (prc) fprintf(stderr, "o3m-eval cost: %s\n", o3m_err_message(&pe));
      if (prc && prc != O3M_ENOTFOUND) rc = o3m_err_set(&err, prc, "%s", o3m_err_message(&pe));
    }
  }
  if (!rc && o.c3) {
    snprintf(path, sizeof path, "%s/cost_c3.csv", o.out_dir);
    if (!(fc = fopen(path, "w"))) rc = o3m_err_set(&err, O3M_EIO, "cannot write %s", path);
    if (!rc) rc = run_c3(&o, fc, &err);
  }
  if (f5 && fclose(f5) != 0 && !rc) rc = o3m_err_set(&err, O3M_EIO, "cannot write cost_fig5.csv");
  if (fc && fclose(fc) != 0 && !rc) rc = o3m_err_set(&err, O3M_EIO, "cannot write cost_c3.csv");
  free(rows);
  if (rc) {
    fprintf(stderr, "o3m-eval cost: %s\n", o3m_err_message(&err));
    return 1;
  }
  printf("CSVs in %s; total runtime %.1f s\n", o.out_dir, o3m_clock_s() - t0);
  return fflush(stdout) ? 1 : 0;
}
