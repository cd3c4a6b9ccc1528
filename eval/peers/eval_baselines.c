/* eval_baselines.c -- `o3m-eval baselines`: O3M beside MPC, HE and DP on
 * the same round statistic.
 *
 * For every setting (the paper's small d 100, K 20, N 5 and large d 500,
 * K 10, N 500 of appendix C.3, then a sweep over d, K and N) one bl_round
 * is built: K candidate contexts from the paper's synthetic stream, a LinUCB
 * model (Lambda = I + sum x x^T over 20 earlier contexts, theta = Lambda^-1
 * b), and the columns split into N near-equal consecutive blocks, party 0
 * being the active participant. Every mechanism computes lin = X theta and
 * quad = diag(X Ainv X^T) from it in this process, single-threaded BLAS,
 * and is checked against the plaintext values:
 *
 *   o3m-pp / o3m-sec  O3M's round: the parties mask their blocks
 *                     (eval_masker, the routine of the passive daemon) and
 *                     the AP sums them, per party as float64 or through
 *                     secure aggregation (crypto/o3m_secagg), then computes
 *                     the statistic on Q x with the masked model Q theta,
 *                     Q Ainv Q^T. Mask generation and the model's change of
 *                     basis are the offline part.
 *   mpc               bl_mpc_round (eval/peers/mpc/bl_mpc.h).
 *   he                bl_he_round (bl_he.h), Paillier with a 2048-bit n.
 *   dp                bl_dp_round (bl_dp.h), Gaussian mechanism, zCDP.
 *
 * Fast mechanisms are timed as the median of batch means over --min-time
 * seconds; HE and MPC are run once. HE runs only --he-max-K candidates of
 * each setting and its times are multiplied by K / K' (all of its work is
 * per candidate; the "how" column says so), and a setting whose HE run is
 * predicted above --he-budget seconds is not run at all: its time is
 * extrapolated from the per-operation times measured in this process and
 * the exact operation counts (bl_he_count), and its error is not measured.
 * MPC settings with N above --mpc-max-N are not run (the in-process
 * simulation holds every party's shares of Ainv: N d^2 words), nor O3M with
 * secure aggregation above --sec-max-N (its pairwise key set-up grows as
 * N^2); their rows say so. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bl_dp.h"
#include "bl_he.h"
#include "bl_mpc.h"
#include "bl_round.h"
#include "eval_cmds.h"
#include "eval_masker.h"
#include "eval_plot.h"
#include "eval_regret.h"
#include "eval_synth.h"
#include "o3m_blas.h"
#include "o3m_cli.h"
#include "o3m_clock.h"

#define BLE_MAX_LIST 16

/* Mechanisms, in table order. */
enum { M_O3M_PP, M_O3M_SEC, M_MPC, M_HE, M_DP, M_COUNT };
static const char *mech_name[M_COUNT] = {"o3m-pp", "o3m-sec", "mpc", "he", "dp"};

typedef struct ble_opts {
  int small, large, sweep;
  int nd, ds[BLE_MAX_LIST], nK, Ks[BLE_MAX_LIST], nN, Ns[BLE_MAX_LIST];
  int mech; /* bit per mechanism */
  int he_max_K;
  double he_budget;
  int mpc_max_N;
  int sec_max_N;
  double dp_eps, dp_delta, dp_clip;
  long dp_T;
  double min_time;
  const char *out_dir;
  int plots;
  int formats; /* eval_plot.h set */
  uint64_t seed;
} ble_opts;

/* One setting: its shape and the paper's seconds (negative: none). */
typedef struct ble_setting {
  char name[24];
  int d, K, N;
  double paper[M_COUNT];
  int sweep_d; /* a row of the time-vs-d plot */
} ble_setting;

/* One mechanism's result on one setting. */
typedef struct ble_row {
  int done;        /* 0: not run (see how) */
  bl_cost c;
  char how[96];
} ble_row;

/* The inputs of one setting, all owned here. */
typedef struct ble_input {
  bl_round r;
  double *X, *theta, *Ainv, *lin, *quad;
  double *pl; /* the plaintext reference, 2K: lin then quad (r.plain) */
  o3m_partition part;
} ble_input;

static void input_free(ble_input *in) {
  free(in->X);
  free(in->theta);
  free(in->Ainv);
  free(in->pl);
  free(in->lin);
  free(in->quad);
}

/* Builds the round of setting s (see the file comment). */
static int input_make(ble_input *in, const ble_setting *s, uint64_t seed, o3m_err *e) {
  const int d = s->d, K = s->K, N = s->N, H = 20;
  memset(in, 0, sizeof *in);
  int rc = o3m_partition_even(&in->part, d, N, e);
  if (rc) return rc;
  in->X = malloc(sizeof(double) * (size_t)K * d);
  in->theta = calloc((size_t)d, sizeof(double));
  in->Ainv = calloc((size_t)d * d, sizeof(double));
  in->pl = malloc(sizeof(double) * 2 * K);
  in->lin = malloc(sizeof(double) * K);
  in->quad = malloc(sizeof(double) * K);
  double *hist = malloc(sizeof(double) * (size_t)H * d), *rew = malloc(sizeof(double) * H);
  eval_synth *syn = NULL;
  if (!in->X || !in->theta || !in->Ainv || !in->pl || !in->lin || !in->quad || !hist ||
      !rew)
    rc = o3m_err_set(e, O3M_ENOMEM, "%s: out of memory", s->name);
  /* The history: one context per round (a stream of K = 1) and its reward. */
  eval_synth_config hc = {.d = d, .K = 1, .noise_var = 0.05, .seed = seed};
  if (!rc && (rc = eval_synth_create(&syn, &hc)) != 0)
    o3m_err_set(e, rc, "synthetic stream: %s", o3m_strerror(rc));
  for (int t = 0; !rc && t < H; t++)
    rc = eval_synth_round(syn, hist + (size_t)t * d, NULL, rew + t);
  eval_synth_destroy(syn);
  syn = NULL;
  eval_synth_config sc = {.d = d, .K = K, .noise_var = 0.05, .seed = seed + 1};
  if (!rc && (rc = eval_synth_create(&syn, &sc)) != 0)
    o3m_err_set(e, rc, "synthetic stream: %s", o3m_strerror(rc));
  if (!rc) rc = eval_synth_round(syn, in->X, NULL, NULL);
  eval_synth_destroy(syn);
  if (!rc) {
    /* Lambda = I + sum_t x_t x_t^T (upper triangle), b = sum_t r_t x_t */
    double *b = malloc(sizeof(double) * (size_t)d);
    if (!b) rc = o3m_err_set(e, O3M_ENOMEM, "out of memory");
    for (int i = 0; !rc && i < d; i++) {
      in->Ainv[(size_t)i * d + i] = 1.0;
      b[i] = 0;
    }
    for (int t = 0; !rc && t < H; t++) {
      o3m_syr(d, 1.0, hist + (size_t)t * d, in->Ainv);
      o3m_axpy(d, rew[t], hist + (size_t)t * d, b);
    }
    /* Ainv = Lambda^-1 by Cholesky, then theta = Ainv b */
    if (!rc && (rc = o3m_potrf_upper(d, in->Ainv)) == 0) rc = o3m_potri_upper(d, in->Ainv);
    if (rc && !e->code) o3m_err_set(e, rc, "%s: Lambda is not positive definite", s->name);
    if (!rc) {
      o3m_symmetrize_from_upper(d, in->Ainv);
      o3m_gemv(d, d, 1.0, in->Ainv, b, 0.0, in->theta);
    }
    free(b);
  }
  free(hist);
  free(rew);
  if (rc) {
    input_free(in);
    return rc;
  }
  in->r = (bl_round){.d = d, .K = K, .N = N, .dims = in->part.dims, .X = in->X,
                     .theta = in->theta, .Ainv = in->Ainv};
  /* Computed once here; every mechanism scores itself against r.plain. */
  rc = bl_round_plain(&in->r, in->pl, in->pl + K, e);
  if (rc) {
    input_free(in);
    return rc;
  }
  in->r.plain = in->pl;
  return 0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

#define BLE_BATCHES 5

/* O3M's online round on masker mk with the masked model (tt, At): lin =
 * V tt, quad_k = v_k^T At v_k with V = sum_j Q^j x^j. */
static int o3m_once(eval_masker *mk, ble_input *in, const double *tt, const double *At,
                    double *tmp) {
  const int K = in->r.K, d = in->r.d;
  const double *V = eval_masker_apply(mk, K, in->X);
  if (!V) return O3M_ERANGE;
  o3m_gemv(K, d, 1.0, V, tt, 0.0, in->lin);
  /* tmp = V At (K x d), quad_k = tmp_k . v_k */
  o3m_gemm(K, d, d, 1.0, V, At, 0.0, tmp);
  for (int k = 0; k < K; k++) in->quad[k] = o3m_dot(d, tmp + (size_t)k * d, V + (size_t)k * d);
  return 0;
}

static int run_o3m(const ble_opts *o, ble_input *in, eval_aggregation agg, ble_row *row,
                   o3m_err *e) {
  const int K = in->r.K, d = in->r.d, Kcap = K > d ? K : d;
  if (agg == EVAL_AGG_SECURE && in->r.N > o->sec_max_N) {
    snprintf(row->how, sizeof row->how,
             "not measured: N = %d > --sec-max-N %d (O(N^2) pairwise key set-up)", in->r.N,
             o->sec_max_N);
    return 0;
  }
  eval_masker *mk = NULL;
  double *Qt = calloc((size_t)d * d, sizeof(double)), *tt = malloc(sizeof(double) * d);
  double *At = malloc(sizeof(double) * (size_t)d * d), *W = malloc(sizeof(double) * (size_t)d * d);
  double *tmp = malloc(sizeof(double) * (size_t)Kcap * d);
  int rc = (!Qt || !tt || !At || !W || !tmp) ? o3m_err_set(e, O3M_ENOMEM, "o3m: out of memory") : 0;
  /* Offline: draw Q, read it back through the masker (row i of the output
   * for the unit row e_i is Q e_i, so the output is Q^T), and move the model
   * into the masked basis: tt = Q theta, At = Q Ainv Q^T. */
  double t0 = o3m_clock_s();
  if (!rc) rc = eval_masker_create(&mk, &in->part, Kcap, 1, o->seed + 7, agg, e);
  if (!rc) {
    for (int i = 0; i < d; i++) Qt[(size_t)i * d + i] = 1.0;
    const double *Qm = eval_masker_apply(mk, d, Qt);
    if (!Qm) rc = o3m_err_set(e, O3M_ERANGE, "o3m: the unit rows do not fit the aggregation");
    if (!rc) {
      memcpy(Qt, Qm, sizeof(double) * (size_t)d * d);
      o3m_gemv_t(d, d, 1.0, Qt, in->theta, 0.0, tt);   /* tt = (Q^T)^T theta */
      o3m_gemm(d, d, d, 1.0, in->Ainv, Qt, 0.0, W);     /* W = Ainv Q^T */
      o3m_gemm_tn(d, d, d, 1.0, Qt, W, 0.0, At);        /* At = Q W */
    }
  }
  row->c.offline_seconds = o3m_clock_s() - t0;
  /* Online: the median of BLE_BATCHES batch means, or one call when one
   * call alone takes longer than min_time. */
  double batch[BLE_BATCHES];
  int nb = BLE_BATCHES;
  for (int b = 0; !rc && b < nb; b++) {
    long n = 0;
    double s0 = o3m_clock_s(), el = 0;
    while (!rc && (n < 1 || el < o->min_time / BLE_BATCHES)) {
      rc = o3m_once(mk, in, tt, At, tmp);
      n++;
      el = o3m_clock_s() - s0;
    }
    batch[b] = el / (double)n;
    if (b == 0 && el > o->min_time) nb = 1;
  }
  if (rc && !e->code) o3m_err_set(e, rc, "o3m: a masked part does not fit the aggregation");
  if (!rc) {
    qsort(batch, (size_t)nb, sizeof batch[0], cmp_double);
    row->c.seconds = batch[nb / 2];
    row->c.bytes = (uint64_t)K * (uint64_t)(in->r.N - 1) * (uint64_t)d * 8u;
    row->c.rounds = in->r.N > 1 ? 1 : 0;
    bl_round_error(&in->r, in->lin, in->quad, in->pl, in->pl + K, &row->c);
    row->done = 1;
    if (nb > 1) snprintf(row->how, sizeof row->how, "measured, median of %d batches", nb);
    else snprintf(row->how, sizeof row->how, "measured, one run");
  }
  eval_masker_destroy(mk);
  free(Qt);
  free(tt);
  free(At);
  free(W);
  free(tmp);
  return rc;
}

static int run_mpc(const ble_opts *o, ble_input *in, ble_row *row, o3m_err *e) {
  if (in->r.N < 2) {
    snprintf(row->how, sizeof row->how, "not measured: MPC needs N >= 2");
    return 0;
  }
  if (in->r.N > o->mpc_max_N) {
    snprintf(row->how, sizeof row->how, "not measured: N = %d > --mpc-max-N %d (memory)", in->r.N,
             o->mpc_max_N);
    return 0;
  }
  int rc = bl_mpc_round(&in->r, in->lin, in->quad, &row->c, e);
  if (!rc) {
    row->done = 1;
    snprintf(row->how, sizeof row->how, "measured, one run");
  }
  return rc;
}

/* A calibration round (d 8, K 1, N 2) so that the first prediction has
 * per-operation times to go on. */
static int he_calibrate(bl_he *h, o3m_err *e) {
  ble_setting s = {.name = "he-calibration", .d = 8, .K = 1, .N = 2};
  ble_input in;
  int rc = input_make(&in, &s, 99, e);
  if (rc) return rc;
  bl_cost c;
  rc = bl_he_round(h, &in.r, in.lin, in.quad, &c, e);
  input_free(&in);
  return rc;
}

/* HE on setting in with the one key pair *he of this process, created
 * and calibrated on first use; the extrapolations use the per-operation
 * totals of every HE run so far (bl_he_stats_total). */
static int run_he(const ble_opts *o, bl_he **he, ble_input *in, ble_row *row, o3m_err *e) {
  int rc = 0;
  if (!*he) {
    bl_he_config hc;
    bl_he_config_default(&hc);
    rc = bl_he_create(he, &hc, e);
    if (!rc) rc = he_calibrate(*he, e);
    if (rc) return rc;
  }
  bl_he_stats acc;
  bl_he_stats_total(*he, &acc);
  const int K = in->r.K, Kp = K < o->he_max_K ? K : o->he_max_K;
  bl_round sub = in->r;
  sub.K = Kp;
  /* in->pl holds the quad values at offset K, not Kp: let HE compute the
   * reference of the shorter round itself. */
  if (Kp < K) sub.plain = NULL;
  bl_he_stats cnt;
  double on, off;
  bl_he_count(&sub, &cnt);
  bl_he_estimate(&cnt, &acc, &on, &off);
  if (on + off > o->he_budget) {
    bl_he_count(&in->r, &cnt);
    bl_he_estimate(&cnt, &acc, &on, &off);
    row->c.seconds = on;
    row->c.offline_seconds = off;
    row->c.bytes = bl_he_bytes(*he, &in->r);
    row->c.rounds = (in->r.N > 1 ? 1 : 0) + 2;
    row->c.max_abs_err = NAN;
    row->done = 1;
    snprintf(row->how, sizeof row->how,
             "EXTRAPOLATED: op counts x per-op times (one K'=%d run > %.0f s)", Kp, o->he_budget);
    return 0;
  }
  rc = bl_he_round(*he, &sub, in->lin, in->quad, &row->c, e);
  if (rc) return rc;
  /* Scale the times by K / K' (every HE operation is per candidate); the
   * bytes are counted for the full K. The error is that of the K' run. */
  row->c.seconds *= (double)K / Kp;
  row->c.offline_seconds *= (double)K / Kp;
  row->c.bytes = bl_he_bytes(*he, &in->r);
  row->done = 1;
  if (Kp < K)
    snprintf(row->how, sizeof row->how, "measured on K'=%d of %d candidates, times x %d/%d", Kp, K,
             K, Kp);
  else
    snprintf(row->how, sizeof row->how, "measured, one run");
  return 0;
}

static int run_dp(const ble_opts *o, ble_input *in, ble_row *row, o3m_err *e) {
  bl_dp_config dc;
  bl_dp_config_default(&dc);
  dc.epsilon = o->dp_eps;
  dc.delta = o->dp_delta;
  dc.T = o->dp_T;
  dc.clip = o->dp_clip;
  dc.have_seed = 1;
  dc.seed = o->seed + 3;
  bl_dp *h = NULL;
  int rc = bl_dp_create(&h, &dc, e);
  if (rc) return rc;
  /* The first call gives the error; the time is the median of the calls'
   * own online seconds over min_time. */
  rc = bl_dp_round(h, &in->r, in->lin, in->quad, &row->c, e);
  double err = row->c.max_abs_err;
  double *t = malloc(sizeof(double) * 4096);
  int n = 0;
  double t0 = o3m_clock_s();
  while (!rc && t && n < 4096 && (n < 3 || o3m_clock_s() - t0 < o->min_time)) {
    rc = bl_dp_round(h, &in->r, in->lin, in->quad, &row->c, e);
    t[n++] = row->c.seconds;
  }
  if (!t) rc = o3m_err_set(e, O3M_ENOMEM, "dp: out of memory");
  if (!rc) {
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    row->c.seconds = t[n / 2];
    row->c.max_abs_err = err;
    row->done = 1;
    snprintf(row->how, sizeof row->how, "measured; sigma %.3g per entry (eps %g over T=%ld)",
             bl_dp_sigma(h, in->r.K), o->dp_eps, o->dp_T);
  }
  free(t);
  bl_dp_destroy(h);
  return rc;
}

static void print_header(void) {
  printf("%-10s %4s %3s %4s  %-8s %12s %12s %10s %14s %3s %9s  %s\n", "setting", "d", "K", "N",
         "mech", "online s", "offline s", "max|err|", "bytes", "rnd", "paper s", "how");
}

static void print_row(const ble_setting *s, int m, const ble_row *row, FILE *csv) {
  char paper[16] = "-", err[16] = "-";
  if (s->paper[m] >= 0) snprintf(paper, sizeof paper, "%g", s->paper[m]);
  if (!row->done) {
    printf("%-10s %4d %3d %4d  %-8s %12s %12s %10s %14s %3s %9s  %s\n", s->name, s->d, s->K, s->N,
           mech_name[m], "-", "-", "-", "-", "-", paper, row->how);
  } else {
    if (!isnan(row->c.max_abs_err)) snprintf(err, sizeof err, "%.2e", row->c.max_abs_err);
    printf("%-10s %4d %3d %4d  %-8s %12.4e %12.4e %10s %14llu %3d %9s  %s\n", s->name, s->d, s->K,
           s->N, mech_name[m], row->c.seconds, row->c.offline_seconds, err,
           (unsigned long long)row->c.bytes, row->c.rounds, paper, row->how);
  }
  if (csv) {
    fprintf(csv, "%s,%d,%d,%d,%s,", s->name, s->d, s->K, s->N, mech_name[m]);
    if (row->done)
      fprintf(csv, "%.6e,%.6e,%s,%llu,%d,", row->c.seconds, row->c.offline_seconds,
              isnan(row->c.max_abs_err) ? "" : err, (unsigned long long)row->c.bytes,
              row->c.rounds);
    else
      fprintf(csv, ",,,,,");
    fprintf(csv, "%s,\"%s\"\n", s->paper[m] >= 0 ? paper : "", row->how);
  }
}

/* The HE per-operation means on stdout and, one row per kind, in
 * baselines_he_ops.csv (operation, count, mean seconds) when csv is set. */
static void print_he_ops(const bl_he_stats *a, FILE *csv) {
  double us = 1e6;
#define PER(k) (a->n_##k ? a->s_##k / (double)a->n_##k : 0.0)
  printf("  HE per operation (2048-bit n, means over every HE run above): noise r^n %.0f us, "
         "encrypt %.1f us,\n  decrypt %.0f us, add %.1f us, scalar x model value %.0f us, "
         "scalar x mask %.0f us\n",
         us * PER(noise), us * PER(enc), us * PER(dec), us * PER(add), us * PER(mul),
         us * PER(mmul));
  if (csv) {
    fprintf(csv, "operation,count,mean_s\n");
    fprintf(csv, "noise_r^n,%ld,%.6e\nencrypt,%ld,%.6e\ndecrypt,%ld,%.6e\n", a->n_noise,
            PER(noise), a->n_enc, PER(enc), a->n_dec, PER(dec));
    fprintf(csv, "add,%ld,%.6e\nscalar_model,%ld,%.6e\nscalar_mask,%ld,%.6e\n", a->n_add,
            PER(add), a->n_mul, PER(mul), a->n_mmul, PER(mmul));
  }
#undef PER
}

/* The time-vs-d plot: one line per mechanism from baselines_sweep_d.csv,
 * the script DIR/baselines_plot.gp (eval_plot_preamble) rendered in
 * o->formats as baselines_time_vs_d.<format>. O3M_ENOTFOUND when gnuplot is
 * missing, O3M_EIO when the script cannot be written or gnuplot fails. */
static int write_plot(const ble_opts *o, o3m_err *e) {
  char path[4096];
  snprintf(path, sizeof path, "%s/baselines_plot.gp", o->out_dir);
  FILE *f = fopen(path, "w");
  if (!f) return o3m_err_set(e, O3M_EIO, "cannot write %s: %s", path, strerror(errno));
  eval_plot_preamble(f, "baselines", "baselines_plot.gp");
  eval_plot_output(f, "baselines_time_vs_d");
  fprintf(f,
          "set key bottom right box opaque\nset logscale y\nset format y '10^{%%L}'\n"
          "set xlabel 'd (K = 10 candidates, N = 5 parties)'\n"
          "set ylabel 'online seconds per round (log)'\n"
          "set title 'One LinUCB round statistic: O3M vs MPC, HE (Paillier 2048) and DP'\n"
          "plot ");
  for (int m = 0; m < M_COUNT; m++)
    fprintf(f, "%s'baselines_sweep_d.csv' using 1:%d with linespoints lw 2 title '%s'",
            m ? ", \\\n     " : "", m + 2, mech_name[m]);
  fprintf(f, "\nunset output\n");
  int bad = ferror(f);
  if (fclose(f) != 0 || bad)
    return o3m_err_set(e, O3M_EIO, "cannot write %s: %s", path, strerror(errno));
  return eval_plot_render(o->out_dir, "baselines_plot.gp", o->formats, e);
}

/* A setting; paper NULL when the paper has no figure for it. */
static ble_setting setting(const char *name, int d, int K, int N, const double *paper,
                           int sweep_d) {
  ble_setting s = {.d = d, .K = K, .N = N, .sweep_d = sweep_d};
  snprintf(s.name, sizeof s.name, "%s", name);
  for (int m = 0; m < M_COUNT; m++) s.paper[m] = paper ? paper[m] : -1;
  return s;
}

static int run_all(const ble_opts *o, o3m_err *e) {
  ble_setting set[3 * BLE_MAX_LIST + 2];
  int ns = 0;
  static const double small_paper[M_COUNT] = {0.006, -1, 2.282, 1190, 0.005};
  static const double large_paper[M_COUNT] = {7.28, -1, 103, -1, 6.48};
  if (o->small) set[ns++] = setting("small", 100, 20, 5, small_paper, 0);
  if (o->large) set[ns++] = setting("large", 500, 10, 500, large_paper, 0);
  for (int i = 0; o->sweep && i < o->nd; i++)
    set[ns++] = setting("sweep-d", o->ds[i], 10, 5, NULL, 1);
  for (int i = 0; o->sweep && i < o->nK; i++)
    set[ns++] = setting("sweep-K", 50, o->Ks[i], 5, NULL, 0);
  for (int i = 0; o->sweep && i < o->nN; i++)
    set[ns++] = setting("sweep-N", 50, 10, o->Ns[i], NULL, 0);

  char path[4096];
  snprintf(path, sizeof path, "%s/baselines.csv", o->out_dir);
  FILE *csv = fopen(path, "w");
  snprintf(path, sizeof path, "%s/baselines_sweep_d.csv", o->out_dir);
  FILE *sd = fopen(path, "w");
  if (!csv || !sd) {
    if (csv) fclose(csv);
    if (sd) fclose(sd);
    return o3m_err_set(e, O3M_EIO, "cannot write the CSVs in %s", o->out_dir);
  }
  fprintf(csv, "setting,d,K,N,mechanism,online_s,offline_s,max_abs_err,bytes,rounds,paper_s,how\n");
  fprintf(sd, "d");
  for (int m = 0; m < M_COUNT; m++) fprintf(sd, ",%s_s", mech_name[m]);
  fprintf(sd, "\n");

  printf("One LinUCB round's statistic (lin = x'theta, quad = x'Ainv x for K candidates, d\n"
         "columns split among N parties, party 0 the active one) under each mechanism, in one\n"
         "process, single-threaded. online/offline in seconds per round; max|err| against the\n"
         "plaintext float64 values; bytes and rounds counted exactly (framing not included).\n"
         "paper s: the paper's appendix C.3 figure for that mechanism (O3M, MPC, HE, DP).\n"
         "DP: eps %g, delta %g per party over T = %ld rounds (zCDP), rows clipped to %g.\n\n",
         o->dp_eps, o->dp_delta, o->dp_T, o->dp_clip);
  print_header();
  bl_he *he = NULL; /* one key pair for every HE run */
  int rc = 0;
  for (int i = 0; !rc && i < ns; i++) {
    ble_input in;
    if ((rc = input_make(&in, &set[i], o->seed + (uint64_t)i * 10, e)) != 0) break;
    ble_row rows[M_COUNT];
    memset(rows, 0, sizeof rows);
    for (int m = 0; !rc && m < M_COUNT; m++) {
      if (!(o->mech & (1 << m))) {
        snprintf(rows[m].how, sizeof rows[m].how, "not run (--mechanisms)");
        continue;
      }
      switch (m) {
      case M_O3M_PP: rc = run_o3m(o, &in, EVAL_AGG_PER_PARTY, &rows[m], e); break;
      case M_O3M_SEC: rc = run_o3m(o, &in, EVAL_AGG_SECURE, &rows[m], e); break;
      case M_MPC: rc = run_mpc(o, &in, &rows[m], e); break;
      case M_HE: rc = run_he(o, &he, &in, &rows[m], e); break;
      default: rc = run_dp(o, &in, &rows[m], e); break;
      }
      if (rc) break;
      print_row(&set[i], m, &rows[m], csv);
      fflush(stdout);
    }
    if (!rc && set[i].sweep_d) {
      fprintf(sd, "%d", set[i].d);
      for (int m = 0; m < M_COUNT; m++) {
        if (rows[m].done) fprintf(sd, ",%.6e", rows[m].c.seconds);
        else fprintf(sd, ",");
      }
      fprintf(sd, "\n");
    }
    input_free(&in);
  }
  if (!rc && he) {
    snprintf(path, sizeof path, "%s/baselines_he_ops.csv", o->out_dir);
    FILE *ho = fopen(path, "w");
    bl_he_stats acc;
    bl_he_stats_total(he, &acc);
    print_he_ops(&acc, ho);
    if (!ho || fclose(ho) != 0) rc = o3m_err_set(e, O3M_EIO, "cannot write %s", path);
  }
  bl_he_destroy(he);
  if (fclose(csv) != 0 && !rc) rc = o3m_err_set(e, O3M_EIO, "cannot write baselines.csv");
  if (fclose(sd) != 0 && !rc) rc = o3m_err_set(e, O3M_EIO, "cannot write baselines_sweep_d.csv");
  if (rc) return rc;
  printf("\nnotes: o3m-pp and o3m-sec send K (N-1) d float64 or 64-bit words (the AP's block\n"
         "  stays with it); their offline time is the draw of Q and the model's change of basis.\n"
         "  HE: Paillier 2048-bit, 3 messages (parties -> evaluator -> key holder -> evaluator);\n"
         "  offline = the encryption noise r^n; key generation and key distribution excluded.\n"
         "  MPC: bl_mpc_round, 16 fractional bits, trusted dealer (offline = the dealer).\n"
         "  DP's error is the price of its privacy: it is not a rounding error.\n"
         "  The paper's figures are quoted for comparison; every other number is measured\n"
         "  here, except rows marked EXTRAPOLATED or not measured.\n");
  if (o->plots && o->sweep && o->nd > 1) {
    o3m_err pe;
    o3m_err_clear(&pe);
    if (write_plot(o, &pe)) {
      printf("plot: %s\n", o3m_err_message(&pe));
    } else {
      char list[256] = "";
      eval_plot_append_names(list, sizeof list, "baselines_time_vs_d", o->formats);
      printf("plot in %s:%s\n", o->out_dir, list);
    }
  }
  return 0;
}

/* The options' messages' prefix. */
#define BASELINES "o3m-eval baselines"

/* "a,b,c" of integers in lo..hi into out (at most BLE_MAX_LIST): 1, or 0 after
 * the message naming the option and the entry. */
static int parse_list(const char *opt, const char *s, int lo, int hi, int *out, int *n) {
  return (*n = o3m_cli_parse_int_list("o3m-eval baselines", opt, s, lo, hi, out, BLE_MAX_LIST)) > 0;
}

enum {
  BO_SETTINGS, BO_D, BO_K, BO_N, BO_MECH, BO_HE_MAX_K, BO_HE_BUDGET, BO_MPC_MAX_N, BO_SEC_MAX_N,
  BO_DP_EPS,
  BO_DP_DELTA, BO_DP_T, BO_DP_CLIP, BO_MIN_TIME, BO_SEED, BO_OUT_DIR, BO_NO_PLOTS,
  BO_PLOT_FORMAT, BO_COUNT
};
static const o3m_cli_option ble_options[] = {
    [BO_SETTINGS] = {"settings", "LIST", "of small, large, sweep (small,large,sweep)"},
    [BO_D] = {"d", "LIST", "d sweep at K 10, N 5 (25,50,100,200)"},
    [BO_K] = {"K", "LIST", "K sweep at d 50, N 5 (5,20,40)"},
    [BO_N] = {"N", "LIST", "N sweep at d 50, K 10 (2,10,50)"},
    [BO_MECH] = {"mechanisms", "LIST", "of o3m-pp, o3m-sec, mpc, he, dp (all)"},
    [BO_HE_MAX_K] = {"he-max-K", "N", "HE runs this many candidates, times scaled to K (1)"},
    [BO_HE_BUDGET] = {"he-budget", "S",
                      "HE runs predicted above S seconds are extrapolated instead (30)"},
    [BO_MPC_MAX_N] = {"mpc-max-N", "N", "MPC is not run above N parties (100)"},
    [BO_SEC_MAX_N] = {"sec-max-N", "N", "O3M with secure aggregation is not run above N (100)"},
    [BO_DP_EPS] = {"dp-eps", "E", "DP epsilon over --dp-T rounds, per party (1)"},
    [BO_DP_DELTA] = {"dp-delta", "D", "DP delta (1e-5)"},
    [BO_DP_T] = {"dp-T", "T", "rounds the DP budget covers (1000)"},
    [BO_DP_CLIP] = {"dp-clip", "C", "L2 bound of a row of a party's block (1)"},
    [BO_MIN_TIME] = {"min-time", "S", "seconds per repeated timing of O3M and DP (0.2)"},
    [BO_SEED] = {"seed", "N", "seed of contexts, model, masks and DP noise (1; NOT secure)"},
    [BO_OUT_DIR] = {"out-dir", "DIR", "baselines.csv, baselines_sweep_d.csv, "
                                      "baselines_he_ops.csv, the plot (eval-out/baselines)"},
    [BO_NO_PLOTS] = {"no-plots", NULL, "do not run gnuplot"},
    [BO_PLOT_FORMAT] = {"plot-format", "png,pdf,svg",
                        "time-vs-d plot formats, any of png, pdf and svg (png)"},
    [BO_COUNT] = {NULL, NULL, NULL},
};
static const o3m_cli_spec ble_cli = {
    "o3m-eval baselines", "[options]",
    "Measures one LinUCB round's statistic under O3M (per-party and secure aggregation),\n"
    "MPC, HE (Paillier) and DP on the same inputs: time, error vs plaintext, bytes, rounds,\n"
    "beside the paper's appendix C.3 figures.",
    ble_options,
    "HE at the large setting (d 500, N 500) is extrapolated from measured per-operation\n"
    "times, and MPC and secure aggregation there are not run by default (--mpc-max-N,\n"
    "--sec-max-N): the table says so on those rows.\n"};

static int list_bits(const char *s, int *out) {
  *out = 0;
  char buf[256];
  if (strlen(s) >= sizeof buf) return 0;
  strcpy(buf, s);
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    int m = 0;
    while (m < M_COUNT && strcmp(tok, mech_name[m])) m++;
    if (m == M_COUNT) {
      if (!strcmp(tok, "o3m")) *out |= (1 << M_O3M_PP) | (1 << M_O3M_SEC);
      else return 0;
    } else {
      *out |= 1 << m;
    }
  }
  return *out != 0;
}

int eval_baselines_main(int argc, char **argv) {
  ble_opts o = {.small = 1, .large = 1, .sweep = 1, .nd = 4, .ds = {25, 50, 100, 200},
                .nK = 3, .Ks = {5, 20, 40}, .nN = 3, .Ns = {2, 10, 50},
                .mech = (1 << M_COUNT) - 1, .he_max_K = 1, .he_budget = 30, .mpc_max_N = 100,
                .sec_max_N = 100,
                .dp_eps = 1, .dp_delta = 1e-5, .dp_T = 1000, .dp_clip = 1, .min_time = 0.2,
                .out_dir = "eval-out/baselines", .plots = 1,
                .formats = EVAL_PLOT_PNG, .seed = 1};
  o3m_cli cl;
  o3m_cli_begin(&cl, &ble_cli, argc, argv);
  const char *arg;
  long long ll;
  unsigned long long u;
  for (int ch; (ch = o3m_cli_next(&cl, &arg)) != O3M_CLI_END;) {
    switch (ch) {
    case O3M_CLI_STOP: return cl.exit_code;
    case BO_SETTINGS: {
      o.small = o.large = o.sweep = 0;
      char buf[128];
      if (strlen(arg) >= sizeof buf) return o3m_cli_usage_error(&ble_cli, "--settings: too long");
      strcpy(buf, arg);
      for (char *sv = NULL, *t = strtok_r(buf, ",", &sv); t; t = strtok_r(NULL, ",", &sv)) {
        if (!strcmp(t, "small")) o.small = 1;
        else if (!strcmp(t, "large")) o.large = 1;
        else if (!strcmp(t, "sweep")) o.sweep = 1;
        else
          return o3m_cli_usage_error(&ble_cli, "--settings: '%s' is not small, large or sweep",
                                     t);
      }
      break;
    }
    case BO_D: if (!parse_list("d", arg, 2, 2000, o.ds, &o.nd)) return 2; break;
    case BO_K: if (!parse_list("K", arg, 1, 10000, o.Ks, &o.nK)) return 2; break;
    case BO_N: if (!parse_list("N", arg, 1, 50, o.Ns, &o.nN)) return 2; break;
    case BO_MECH:
      if (!list_bits(arg, &o.mech))
        return o3m_cli_usage_error(&ble_cli, "--mechanisms: '%s' is not a list of o3m-pp, "
                                             "o3m-sec, o3m, mpc, he, dp", arg);
      break;
    case BO_HE_MAX_K:
      if (o3m_cli_parse_long(arg, 1, 10000, &ll))
        return o3m_cli_usage_error(&ble_cli, "--he-max-K: '%s' is not an integer in 1..10000", arg);
      o.he_max_K = (int)ll;
      break;
    case BO_HE_BUDGET:
      if (o3m_cli_opt_double(BASELINES, "he-budget", arg, 0, 1e6, &o.he_budget)) return 2;
      break;
    case BO_MPC_MAX_N:
      if (o3m_cli_parse_long(arg, 1, O3M_MAX_PARTIES, &ll))
        return o3m_cli_usage_error(&ble_cli, "--mpc-max-N: '%s' is not an integer in 1..%d", arg,
                                   O3M_MAX_PARTIES);
      o.mpc_max_N = (int)ll;
      break;
    case BO_SEC_MAX_N:
      if (o3m_cli_parse_long(arg, 1, O3M_MAX_PARTIES, &ll))
        return o3m_cli_usage_error(&ble_cli, "--sec-max-N: '%s' is not an integer in 1..%d", arg,
                                   O3M_MAX_PARTIES);
      o.sec_max_N = (int)ll;
      break;
    case BO_DP_EPS:
      if (o3m_cli_opt_double(BASELINES, "dp-eps", arg, 1e-6, 1e9, &o.dp_eps)) return 2;
      break;
    case BO_DP_DELTA:
      if (o3m_cli_opt_double(BASELINES, "dp-delta", arg, 1e-300, 0.5, &o.dp_delta)) return 2;
      break;
    case BO_DP_T:
      if (o3m_cli_parse_long(arg, 1, 1000000000, &ll))
        return o3m_cli_usage_error(&ble_cli, "--dp-T: '%s' is not an integer in 1..1e9", arg);
      o.dp_T = (long)ll;
      break;
    case BO_DP_CLIP:
      if (o3m_cli_opt_double(BASELINES, "dp-clip", arg, 1e-9, 1e9, &o.dp_clip)) return 2;
      break;
    case BO_MIN_TIME:
      if (o3m_cli_opt_double(BASELINES, "min-time", arg, 0, 600, &o.min_time)) return 2;
      break;
    case BO_SEED:
      if (o3m_cli_parse_u64(arg, &u))
        return o3m_cli_usage_error(&ble_cli, "--seed: '%s' is not an unsigned integer", arg);
      o.seed = u;
      break;
    case BO_OUT_DIR: o.out_dir = arg; break;
    case BO_NO_PLOTS: o.plots = 0; break;
    case BO_PLOT_FORMAT: {
      o3m_err pe;
      if (eval_plot_formats_parse(arg, &o.formats, &pe)) {
        fprintf(stderr, "o3m-eval baselines: %s\n", o3m_err_message(&pe));
        return 2;
      }
      break;
    }
    }
  }
  if (o3m_cli_operands(&cl) != argc)
    return o3m_cli_usage_error(&ble_cli, "unexpected argument '%s'", argv[o3m_cli_operands(&cl)]);
  for (int i = 0; o.sweep && i < o.nd; i++)
    if (o.ds[i] < 5)
      return o3m_cli_usage_error(&ble_cli, "--d %d is smaller than the sweep's N = 5", o.ds[i]);
  for (int i = 0; o.sweep && i < o.nN; i++)
    if (o.Ns[i] > 50)
      return o3m_cli_usage_error(&ble_cli, "--N %d exceeds the sweep's d = 50", o.Ns[i]);
  if (!o.small && !o.large && !o.sweep)
    return o3m_cli_usage_error(&ble_cli, "--settings names nothing to run");
  o3m_err err;
  o3m_err_clear(&err);
  if (eval_regret_mkdir_p(o.out_dir, &err))
    return o3m_cli_fail("o3m-eval baselines", "%s", o3m_err_message(&err));
  double t0 = o3m_clock_s();
  int rc = run_all(&o, &err);
  if (rc) return o3m_cli_fail("o3m-eval baselines", "%s", o3m_err_message(&err));
  printf("CSVs in %s; total runtime %.1f s\n", o.out_dir, o3m_clock_s() - t0);
  return fflush(stdout) ? 1 : 0;
}
