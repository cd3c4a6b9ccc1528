/* eval_regret.c -- see eval_regret.h.
 *
 * One run loops over seeds; per seed it creates the stream, the mask and one
 * policy per (configuration, variant) plus the same-history learner, then
 * plays T rounds. Per round the stream is drawn once, masked once, and the
 * first-c-columns copies for the partial variants are made once per variant,
 * so every learner sees the same numbers. Results are stored per seed at the
 * kept steps, and means, bands and summaries are computed by the writers.
 *
 * The writers: CSVs (one per configuration), the summary table, and a
 * generated gnuplot script run by eval_plot_run inside the output directory. */
#include "eval_regret.h"
#include "o3m_bytes.h"
#include "bl_dp.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "eval_cmds.h"
#include "eval_masker.h"
#include "eval_plot.h"
#include "eval_stats.h"
#include "eval_synth.h"
#include "eval_whiten.h"
#include "o3m_blas.h"
#include "o3m_cli.h"
#include "o3m_clock.h"

#define MAX_CFG 4
#define MAX_VAR EVAL_REGRET_MAX_VARIANTS

struct eval_regret {
  eval_regret_config c;
  int n_cfg;
  o3m_algo algo[MAX_CFG];
  o3m_model_kind model[MAX_CFG];
  int n_var;
  int cols[MAX_VAR];
  int n_steps;
  long *step_t;   /* n_steps: the kept steps (1-based round counts) */
  double *reg;    /* [cfg][var][seed][step] cumulative regret */
  double *thd;    /* [cfg][seed][step] ||theta_fed|| - ||theta_central|| */
  double *thsame; /* [cfg][seed][step] same for the same-history learner */
  long agree[MAX_CFG];
  double max_mean_diff[MAX_CFG];
  double max_width_diff[MAX_CFG];
  double seconds;
};

void eval_regret_config_default(eval_regret_config *c) {
  memset(c, 0, sizeof *c);
  c->d = 100;
  c->K = 10;
  c->T = 5000;
  c->n_seeds = 5;
  c->first_seed = 1;
  c->noise_var = 0.05;
  c->alpha = O3M_DEFAULT_ALPHA;
  c->v = O3M_DEFAULT_V;
  c->lambda = O3M_DEFAULT_LAMBDA;
  c->refactor_every = O3M_DEFAULT_REFACTOR_EVERY;
  o3m_partition_parse(&c->part, "20,20,20,20,20", NULL);
  c->n_ratios = 2;
  c->ratios[0] = 0.2;
  c->ratios[1] = 0.8;
  c->algos = EVAL_REGRET_LINUCB | EVAL_REGRET_LINTS;
  c->models = EVAL_REGRET_SHARED;
  c->every = 10;
  c->dp_delta = 1e-5;
  c->dp_clip = 1.0;
}

int eval_regret_dp_variant(const eval_regret_config *c, int i) {
  return EVAL_REGRET_RATIO0 + c->n_ratios + i;
}

int eval_regret_outage_variant(const eval_regret_config *c) {
  return c->outage_b > 0 ? 3 + c->n_ratios + c->n_dp : -1;
}

int eval_regret_ratio_cols(double r, int d) {
  int c = (int)ceil(r * d - 1e-9);
  if (c < 1) c = 1;
  if (c > d) c = d;
  return c;
}

const eval_regret_config *eval_regret_config_of(const eval_regret *r) { return &r->c; }
double eval_regret_seconds(const eval_regret *r) { return r->seconds; }
int eval_regret_n_steps(const eval_regret *r) { return r->n_steps; }

void eval_regret_destroy(eval_regret *r) {
  if (!r) return;
  free(r->step_t);
  free(r->reg);
  free(r->thd);
  free(r->thsame);
  free(r);
}

static int validate(const eval_regret_config *c, o3m_err *e) {
  if (c->d < 1 || c->d > O3M_MAX_DIM)
    return o3m_err_set(e, O3M_EINVAL, "--d: %d, expected 1..%d", c->d, O3M_MAX_DIM);
  if (c->K < 1 || c->K > O3M_EVAL_MAX_K)
    return o3m_err_set(e, O3M_EINVAL, "--K: %d, expected 1..%d", c->K, O3M_EVAL_MAX_K);
  if (c->T < 1) return o3m_err_set(e, O3M_EINVAL, "--T: %ld, expected >= 1", c->T);
  if (c->n_seeds < 1 || c->n_seeds > 10000)
    return o3m_err_set(e, O3M_EINVAL, "--seeds: %d, expected 1..10000", c->n_seeds);
  if (c->part.m < 1 || c->part.d != c->d)
    return o3m_err_set(e, O3M_EINVAL, "--parties: dims sum to %d but d = %d", c->part.d, c->d);
  if (c->n_ratios < 0 || c->n_ratios > EVAL_REGRET_MAX_RATIOS)
    return o3m_err_set(e, O3M_EINVAL, "--partial-ratios: at most %d ratios",
                       EVAL_REGRET_MAX_RATIOS);
  for (int i = 0; i < c->n_ratios; i++)
    if (!(c->ratios[i] > 0 && c->ratios[i] <= 1))
      return o3m_err_set(e, O3M_EINVAL, "--partial-ratios: %g is not in (0, 1]", c->ratios[i]);
  if (!(c->algos & 3) || (c->algos & ~3))
    return o3m_err_set(e, O3M_EINVAL, "--algo: no algorithm selected");
  if (!(c->models & 3) || (c->models & ~3))
    return o3m_err_set(e, O3M_EINVAL, "--model: no model selected");
  if (c->every < 1) return o3m_err_set(e, O3M_EINVAL, "--every: %d, expected >= 1", c->every);
  if (c->T / c->every > 10000000)
    return o3m_err_set(e, O3M_EINVAL, "--every: T / every = %ld kept steps, at most 10000000",
                       c->T / c->every);
  unsigned char on[O3M_MAX_PARTIES];
  if (c->whiten && eval_whiten_parse(c->whiten, &c->part, on, e)) return O3M_EINVAL;
  if (c->n_dp < 0 || c->n_dp > EVAL_REGRET_MAX_DP)
    return o3m_err_set(e, O3M_EINVAL, "--dp-eps: at most %d epsilons", EVAL_REGRET_MAX_DP);
  for (int i = 0; i < c->n_dp; i++)
    if (!(c->dp_eps[i] > 0) || !isfinite(c->dp_eps[i]))
      return o3m_err_set(e, O3M_EINVAL, "--dp-eps: %g is not a positive number", c->dp_eps[i]);
  if ((c->outage_a || c->outage_b) &&
      !(c->outage_a >= 1 && c->outage_a < c->outage_b && c->outage_b <= c->T + 1))
    return o3m_err_set(e, O3M_EINVAL, "--outage: [%ld, %ld) is not a window of rounds in "
                       "1..T + 1 = %ld", c->outage_a, c->outage_b, c->T + 1);
  if (c->n_dp && !(c->dp_delta > 0 && c->dp_delta < 1))
    return o3m_err_set(e, O3M_EINVAL, "--dp-delta: %g is not in (0, 1)", c->dp_delta);
  if (c->n_dp && (!(c->dp_clip > 0) || !isfinite(c->dp_clip)))
    return o3m_err_set(e, O3M_EINVAL, "--dp-clip: %g is not a positive number", c->dp_clip);
  if (!(c->noise_var >= 0) || !isfinite(c->noise_var))
    return o3m_err_set(e, O3M_EINVAL, "--noise-var: %g, expected a finite value >= 0",
                       c->noise_var);
  return O3M_OK;
}

static int cfg_index(const eval_regret *r, o3m_algo a, o3m_model_kind m) {
  for (int i = 0; i < r->n_cfg; i++)
    if (r->algo[i] == a && r->model[i] == m) return i;
  return -1;
}

static double *reg_at(const eval_regret *r, int cfg, int var, int seed) {
  return r->reg + (((size_t)cfg * r->n_var + var) * r->c.n_seeds + seed) * r->n_steps;
}

static double *th_at(double *base, const eval_regret *r, int cfg, int seed) {
  return base + ((size_t)cfg * r->c.n_seeds + seed) * r->n_steps;
}

/* ||theta||, or for a disjoint model the norm of all arms' thetas stacked. */
static double theta_norm(const o3m_policy *p, int n_arms) {
  if (o3m_policy_config_of(p)->model == O3M_MODEL_SHARED) return o3m_policy_theta_norm(p, 0);
  double s = 0;
  for (int a = 0; a < n_arms; a++) {
    double n = o3m_policy_theta_norm(p, a);
    s += n * n;
  }
  return sqrt(s);
}

/* Per-seed state: created at the start of each seed, destroyed after it. */
typedef struct seed_state {
  eval_synth *synth;
  eval_masker *masker;
  eval_whiten *whiten; /* NULL: no party whitens */
  o3m_policy *pol[MAX_CFG][MAX_VAR];
  o3m_policy *same[MAX_CFG];
  o3m_policy *fallback[MAX_CFG]; /* the outage variant's local learner */
  bl_dp *dp[EVAL_REGRET_MAX_DP]; /* one mechanism per DP variant */
} seed_state;

static void seed_state_free(seed_state *s, int n_cfg, int n_var) {
  for (int i = 0; i < n_cfg; i++) {
    for (int v = 0; v < n_var; v++) o3m_policy_destroy(s->pol[i][v]);
    o3m_policy_destroy(s->same[i]);
    o3m_policy_destroy(s->fallback[i]);
  }
  for (int i = 0; i < EVAL_REGRET_MAX_DP; i++) bl_dp_destroy(s->dp[i]);
  eval_masker_destroy(s->masker);
  eval_whiten_destroy(s->whiten);
  eval_synth_destroy(s->synth);
  memset(s, 0, sizeof *s);
}

/* The whitening maps of the chosen parties, from EVAL_REGRET_WHITEN_ROWS
 * contexts of a stream independent of the seed's (the parties' "tables"). */
static int whiten_init(seed_state *s, const eval_regret_config *c, uint64_t seed, o3m_err *e) {
  unsigned char on[O3M_MAX_PARTIES];
  if (!c->whiten || eval_whiten_parse(c->whiten, &c->part, on, e)) return O3M_OK;
  long rounds = (EVAL_REGRET_WHITEN_ROWS + c->K - 1) / c->K, n = rounds * c->K;
  eval_synth_config sc = {.d = c->d, .K = c->K, .noise_var = c->noise_var,
                          .seed = seed ^ 0x57484954454e0000ull};
  eval_synth *cal = NULL;
  double *X = malloc(sizeof *X * (size_t)n * (size_t)c->d);
  int rc = X ? eval_synth_create(&cal, &sc) : O3M_ENOMEM;
  for (long t = 0; t < rounds && !rc; t++)
    rc = eval_synth_round(cal, X + (size_t)t * (size_t)c->K * (size_t)c->d, NULL, NULL);
  if (rc)
    o3m_err_set(e, rc, "--whiten: cannot draw the calibration contexts: %s", o3m_strerror(rc));
  else
    rc = eval_whiten_create(&s->whiten, &c->part, on, n, X, e);
  eval_synth_destroy(cal);
  free(X);
  return rc;
}

static int seed_state_init(seed_state *s, const eval_regret *r, uint64_t seed, o3m_err *e) {
  const eval_regret_config *c = &r->c;
  memset(s, 0, sizeof *s);
  eval_synth_config sc = {.d = c->d, .K = c->K, .noise_var = c->noise_var, .seed = seed};
  int rc = eval_synth_create(&s->synth, &sc);
  if (rc) return o3m_err_set(e, rc, "cannot create the synthetic stream: %s", o3m_strerror(rc));
  if ((rc = whiten_init(s, c, seed, e))) return rc;
  /* The mask's seed differs from the stream's but is fixed by it. */
  uint64_t mask_seed = seed * 0x9E3779B97F4A7C15ull + 0x6d61736bull;
  rc = eval_masker_create(&s->masker, &c->part, c->K, 1, mask_seed,
                          (eval_aggregation)c->aggregation, e);
  if (rc) return rc;
  /* The DP variants' noise: seeded from the stream's seed, one stream each. */
  for (int i = 0; i < c->n_dp && !rc; i++) {
    bl_dp_config dc;
    bl_dp_config_default(&dc);
    dc.epsilon = c->dp_eps[i];
    dc.delta = c->dp_delta;
    dc.T = c->T;
    dc.clip = c->dp_clip;
    dc.have_seed = 1;
    dc.seed = seed * 0xD1B54A32D192ED03ull + 0x6470ull + (uint64_t)i;
    rc = bl_dp_create(&s->dp[i], &dc, e);
  }
  if (rc) return rc;
  for (int i = 0; i < r->n_cfg; i++) {
    o3m_policy_config pc;
    o3m_policy_config_default(&pc);
    pc.algo = r->algo[i];
    pc.model = r->model[i];
    pc.n_arms = c->K;
    pc.max_candidates = c->K;
    pc.lambda = c->lambda;
    pc.alpha = c->alpha;
    pc.v = c->v;
    pc.seed = seed;
    pc.refactor_every = c->refactor_every;
    for (int v = 0; v <= r->n_var && !rc; v++) {
      pc.d = v < r->n_var ? r->cols[v] : c->d;
      rc = o3m_policy_create(v < r->n_var ? &s->pol[i][v] : &s->same[i], &pc, e);
    }
    if (!rc && eval_regret_outage_variant(c) >= 0) {
      pc.d = c->part.dims[0];
      rc = o3m_policy_create(&s->fallback[i], &pc, e);
    }
    if (rc) return rc;
  }
  return O3M_OK;
}

/* Copies the first cols columns of the K x d matrix X into Y (K x cols). */
static void first_columns(int K, int d, int cols, const double *X, double *Y) {
  for (int k = 0; k < K; k++)
    memcpy(Y + (size_t)k * cols, X + (size_t)k * d, sizeof(double) * cols);
}

/* One round of the outage variant for configuration i (see
 * eval_regret.h): in the window the local learner decides on X0 (the first
 * party's columns) and learns alone; outside it the federated learner
 * decides on Xm and both learn. The chosen arm is returned in *arm. */
static int outage_round(seed_state *st, int i, int v, int K, int d, int d0, int missing,
                        const double *Xm, const double *X0, const double *rew, int *arm) {
  o3m_policy *loc = st->fallback[i], *fed = st->pol[i][v];
  int rc = o3m_policy_choose(missing ? loc : fed, K, missing ? X0 : Xm, NULL, arm, NULL);
  if (!rc && !missing) rc = o3m_policy_update(fed, *arm, Xm + (size_t)*arm * d, rew[*arm]);
  if (!rc) rc = o3m_policy_update(loc, *arm, X0 + (size_t)*arm * d0, rew[*arm]);
  return rc;
}

/* Plays one seed's T rounds; s is the seed's index. */
static int run_seed(eval_regret *r, int s, seed_state *st, double *X, double *Xp, double *exp_r,
                    double *rew, double *mc, double *vc, double *ms, double *vs, o3m_err *e) {
  const eval_regret_config *c = &r->c;
  int K = c->K, d = c->d;
  double cum[MAX_CFG][MAX_VAR];
  int central_arm[MAX_CFG] = {0};
  memset(cum, 0, sizeof cum);
  int step = 0;
  for (long t = 1; t <= c->T; t++) {
    int rc = eval_synth_round(st->synth, X, exp_r, rew);
    if (rc) return o3m_err_set(e, rc, "round %ld: stream failed: %s", t, o3m_strerror(rc));
    eval_whiten_apply(st->whiten, K, X); /* the raw expected rewards are kept */
    double best = exp_r[0];
    for (int a = 1; a < K; a++)
      if (exp_r[a] > best) best = exp_r[a];
    const double *Xm = eval_masker_apply(st->masker, K, X);
    if (!Xm)
      return o3m_err_set(e, O3M_ERANGE, "round %ld: a party's masked part is too large for "
                         "the fixed point of secure aggregation", t);
    for (int v = 0; v < r->n_var; v++) {
      const double *V = X;
      int dpi = v - eval_regret_dp_variant(c, 0);
      if (v == EVAL_REGRET_FEDERATED) {
        V = Xm;
      } else if (dpi >= 0 && dpi < c->n_dp) {
        /* The passive parties' releases, shared by every configuration. */
        memcpy(Xp, X, sizeof(double) * (size_t)K * d);
        rc = bl_dp_perturb(st->dp[dpi], K, c->part.m, c->part.dims, 1, Xp, e);
        if (rc) return rc;
        V = Xp;
      } else if (v == eval_regret_outage_variant(c)) {
        const int d0 = c->part.dims[0];
        const int missing = t >= c->outage_a && t < c->outage_b;
        first_columns(K, d, d0, X, Xp);
        for (int i = 0; i < r->n_cfg && !rc; i++) {
          int arm;
          rc = outage_round(st, i, v, K, d, d0, missing, Xm, Xp, rew, &arm);
          cum[i][v] += best - exp_r[arm];
        }
        if (rc)
          return o3m_err_set(e, rc, "round %ld, the outage variant: policy failed: %s", t,
                             o3m_strerror(rc));
        continue;
      } else if (v >= EVAL_REGRET_LOCAL) {
        first_columns(K, d, r->cols[v], X, Xp);
        V = Xp;
      }
      int dv = r->cols[v];
      for (int i = 0; i < r->n_cfg; i++) {
        o3m_policy *p = st->pol[i][v];
        int arm;
        rc = o3m_policy_choose(p, K, V, NULL, &arm, NULL);
        if (!rc && v == EVAL_REGRET_CENTRAL) {
          /* The same-history federated learner: compare before updating. */
          rc = o3m_policy_stats(p, K, V, NULL, mc, vc);
          if (!rc) rc = o3m_policy_stats(st->same[i], K, Xm, NULL, ms, vs);
          if (!rc) {
            double dm = fabs(mc[arm] - ms[arm]);
            double dw = fabs(sqrt(fmax(vc[arm], 0)) - sqrt(fmax(vs[arm], 0)));
            if (dm > r->max_mean_diff[i]) r->max_mean_diff[i] = dm;
            if (dw > r->max_width_diff[i]) r->max_width_diff[i] = dw;
            rc = o3m_policy_update(st->same[i], arm, Xm + (size_t)arm * d, rew[arm]);
          }
          central_arm[i] = arm; /* the central variant runs first */
        }
        if (!rc && v == EVAL_REGRET_FEDERATED && arm == central_arm[i])
          r->agree[i]++;
        if (!rc) rc = o3m_policy_update(p, arm, V + (size_t)arm * dv, rew[arm]);
        if (rc)
          return o3m_err_set(e, rc, "round %ld, %s %s, variant %d: policy failed: %s", t,
                             o3m_algo_name(r->algo[i]), o3m_model_name(r->model[i]), v,
                             o3m_strerror(rc));
        cum[i][v] += best - exp_r[arm];
      }
    }
    if (t % c->every == 0 || t == c->T) {
      for (int i = 0; i < r->n_cfg; i++) {
        for (int v = 0; v < r->n_var; v++) reg_at(r, i, v, s)[step] = cum[i][v];
        double nc = theta_norm(st->pol[i][EVAL_REGRET_CENTRAL], K);
        th_at(r->thd, r, i, s)[step] = theta_norm(st->pol[i][EVAL_REGRET_FEDERATED], K) - nc;
        th_at(r->thsame, r, i, s)[step] = theta_norm(st->same[i], K) - nc;
      }
      step++;
    }
  }
  return O3M_OK;
}

int eval_regret_run(eval_regret **out, const eval_regret_config *c, o3m_err *e) {
  *out = NULL;
  int rc = validate(c, e);
  if (rc) return rc;
  double t0 = o3m_clock_s();
  eval_regret *r = calloc(1, sizeof *r);
  if (!r) return o3m_err_set(e, O3M_ENOMEM, "out of memory");
  r->c = *c;
  for (int a = 1; a <= 2; a++)
    for (int m = 1; m <= 2; m++)
      if ((c->algos & a) && (c->models & m)) {
        r->algo[r->n_cfg] = a == 1 ? O3M_ALGO_LINUCB : O3M_ALGO_LINTS;
        r->model[r->n_cfg] = m == 1 ? O3M_MODEL_SHARED : O3M_MODEL_DISJOINT;
        r->n_cfg++;
      }
  r->n_var = 3 + c->n_ratios + c->n_dp + (eval_regret_outage_variant(c) >= 0);
  r->cols[EVAL_REGRET_CENTRAL] = c->d;
  r->cols[EVAL_REGRET_FEDERATED] = c->d;
  r->cols[EVAL_REGRET_LOCAL] = c->part.dims[0];
  for (int i = 0; i < c->n_ratios; i++)
    r->cols[EVAL_REGRET_RATIO0 + i] = eval_regret_ratio_cols(c->ratios[i], c->d);
  for (int i = 0; i < c->n_dp; i++) r->cols[eval_regret_dp_variant(c, i)] = c->d;
  if (eval_regret_outage_variant(c) >= 0) r->cols[eval_regret_outage_variant(c)] = c->d;
  r->n_steps = (int)(c->T / c->every + (c->T % c->every != 0));
  size_t ns = (size_t)r->n_steps, nseed = (size_t)c->n_seeds;
  r->step_t = malloc(ns * sizeof(long));
  r->reg = malloc((size_t)r->n_cfg * r->n_var * nseed * ns * sizeof(double));
  r->thd = malloc((size_t)r->n_cfg * nseed * ns * sizeof(double));
  r->thsame = malloc((size_t)r->n_cfg * nseed * ns * sizeof(double));
  size_t kd = (size_t)c->K * c->d;
  double *X = malloc(kd * sizeof(double)), *Xp = malloc(kd * sizeof(double));
  double *vec = malloc((size_t)c->K * 6 * sizeof(double));
  if (!r->step_t || !r->reg || !r->thd || !r->thsame || !X || !Xp || !vec) {
    rc = o3m_err_set(e, O3M_ENOMEM, "out of memory for %d steps x %d seeds", r->n_steps,
                     c->n_seeds);
    goto fail;
  }
  for (int k = 0; k < r->n_steps; k++) r->step_t[k] = (long)(k + 1) * c->every;
  r->step_t[r->n_steps - 1] = c->T;
  for (int s = 0; s < c->n_seeds && !rc; s++) {
    seed_state st;
    rc = seed_state_init(&st, r, c->first_seed + (uint64_t)s, e);
    if (!rc) {
      double *v = vec;
      int K = c->K;
      rc = run_seed(r, s, &st, X, Xp, v, v + K, v + 2 * K, v + 3 * K, v + 4 * K, v + 5 * K, e);
    }
    seed_state_free(&st, r->n_cfg, r->n_var);
  }
  if (rc) goto fail;
  free(X);
  free(Xp);
  free(vec);
  r->seconds = o3m_clock_s() - t0;
  *out = r;
  return O3M_OK;
fail:
  free(X);
  free(Xp);
  free(vec);
  eval_regret_destroy(r);
  return rc;
}

int eval_regret_summary_of(const eval_regret *r, o3m_algo a, o3m_model_kind m,
                           eval_regret_summary *out) {
  int i = cfg_index(r, a, m);
  if (i < 0) return O3M_ENOTFOUND;
  memset(out, 0, sizeof *out);
  out->n_variants = r->n_var;
  int last = r->n_steps - 1;
  for (int v = 0; v < r->n_var; v++) {
    out->cols[v] = r->cols[v];
    eval_stats_mean_sd(reg_at(r, i, v, 0) + last, r->c.n_seeds, (size_t)r->n_steps,
                       &out->final_mean[v], &out->final_std[v]);
  }
  out->agreement = (double)r->agree[i] / ((double)r->c.T * r->c.n_seeds);
  out->max_mean_diff = r->max_mean_diff[i];
  out->max_width_diff = r->max_width_diff[i];
  for (size_t k = 0; k < (size_t)r->c.n_seeds * r->n_steps; k++) {
    double x = fabs(th_at(r->thd, r, i, 0)[k]), y = fabs(th_at(r->thsame, r, i, 0)[k]);
    if (x > out->max_theta_diff) out->max_theta_diff = x;
    if (y > out->max_theta_diff_same) out->max_theta_diff_same = y;
  }
  return O3M_OK;
}

double eval_regret_final(const eval_regret *r, o3m_algo a, o3m_model_kind m, int variant, int s) {
  int i = cfg_index(r, a, m);
  if (i < 0 || variant < 0 || variant >= r->n_var || s < 0 || s >= r->c.n_seeds) return NAN;
  return reg_at(r, i, variant, s)[r->n_steps - 1];
}

/* The variant's name as used in CSV headers and the table. */
static void variant_name(const eval_regret *r, int v, char *buf, size_t n) {
  if (v == EVAL_REGRET_CENTRAL) snprintf(buf, n, "central");
  else if (v == EVAL_REGRET_FEDERATED) snprintf(buf, n, "federated");
  else if (v == EVAL_REGRET_LOCAL) snprintf(buf, n, "local");
  else if (v == eval_regret_outage_variant(&r->c)) snprintf(buf, n, "outage");
  else if (v >= eval_regret_dp_variant(&r->c, 0))
    snprintf(buf, n, "dp%g", r->c.dp_eps[v - eval_regret_dp_variant(&r->c, 0)]);
  else snprintf(buf, n, "ratio%g", r->c.ratios[v - EVAL_REGRET_RATIO0]);
}

int eval_regret_mkdir_p(const char *dir, o3m_err *e) { return o3m_mkdir_p(dir, 0777, 0, e); }

int eval_regret_write_csv(const eval_regret *r, const char *dir, o3m_err *e) {
  int rc = eval_regret_mkdir_p(dir, e);
  if (rc) return rc;
  int n = r->c.n_seeds;
  size_t stride = (size_t)r->n_steps;
  /* The 95% band's t quantile, once: the band is mean +- t sd / sqrt(n). */
  double tq = n > 1 ? eval_stats_t_quantile(0.975, n - 1) : 0.0;
  for (int i = 0; i < r->n_cfg; i++) {
    char path[4096], name[64];
    snprintf(path, sizeof path, "%s/regret_%s_%s.csv", dir, o3m_algo_name(r->algo[i]),
             o3m_model_name(r->model[i]));
    FILE *f = fopen(path, "w");
    if (!f) return o3m_err_set(e, O3M_EIO, "cannot write %s: %s", path, strerror(errno));
    fprintf(f, "t");
    for (int v = 0; v < r->n_var; v++) {
      variant_name(r, v, name, sizeof name);
      fprintf(f, ",%s_mean,%s_lo,%s_hi", name, name, name);
    }
    fprintf(f, ",theta_norm_diff_mean,theta_norm_diff_maxabs,"
               "theta_norm_diff_same_history_maxabs\n");
    for (int k = 0; k < r->n_steps; k++) {
      fprintf(f, "%ld", r->step_t[k]);
      for (int v = 0; v < r->n_var; v++) {
        double m, sd;
        eval_stats_mean_sd(reg_at(r, i, v, 0) + k, n, stride, &m, &sd);
        double h = tq * sd / sqrt((double)n);
        fprintf(f, ",%.6f,%.6f,%.6f", m, m - h, m + h);
      }
      double m, sd, mx = 0, mxs = 0;
      eval_stats_mean_sd(th_at(r->thd, r, i, 0) + k, n, stride, &m, &sd);
      for (int s = 0; s < n; s++) {
        mx = fmax(mx, fabs(th_at(r->thd, r, i, s)[k]));
        mxs = fmax(mxs, fabs(th_at(r->thsame, r, i, s)[k]));
      }
      fprintf(f, ",%.6e,%.6e,%.6e\n", m, mx, mxs);
    }
    int bad = ferror(f);
    if (fclose(f) != 0 || bad)
      return o3m_err_set(e, O3M_EIO, "cannot write %s: %s", path, strerror(errno));
  }
  return O3M_OK;
}

void eval_regret_print_summary(const eval_regret *r, FILE *f) {
  const eval_regret_config *c = &r->c;
  fprintf(f,
          "regret: d=%d K=%d T=%ld, seeds %llu..%llu, %d parties (", c->d, c->K, c->T,
          (unsigned long long)c->first_seed,
          (unsigned long long)(c->first_seed + (uint64_t)c->n_seeds - 1), c->part.m);
  for (int j = 0; j < c->part.m; j++) fprintf(f, "%s%d", j ? "," : "", c->part.dims[j]);
  fprintf(f, "), beta=%g v=%g lambda=%g noise var=%g\n\n", c->alpha, c->v, c->lambda,
          c->noise_var);
  fprintf(f, "%-7s %-9s %-10s %5s  %22s  %10s\n", "algo", "model", "variant", "cols",
          "final regret mean+-std", "/central");
  for (int i = 0; i < r->n_cfg; i++) {
    eval_regret_summary sm;
    eval_regret_summary_of(r, r->algo[i], r->model[i], &sm);
    for (int v = 0; v < r->n_var; v++) {
      char name[64];
      variant_name(r, v, name, sizeof name);
      if (v == EVAL_REGRET_LOCAL) snprintf(name, sizeof name, "local(AP)");
      fprintf(f, "%-7s %-9s %-10s %5d  %11.3f +- %8.3f  %10.2f\n", o3m_algo_name(r->algo[i]),
              o3m_model_name(r->model[i]), name, sm.cols[v], sm.final_mean[v], sm.final_std[v],
              sm.final_mean[v] / sm.final_mean[EVAL_REGRET_CENTRAL]);
    }
  }
  fprintf(f, "\nfederated (%s aggregation) vs central (same stream, same sampler seed):\n",
          eval_aggregation_name((eval_aggregation)r->c.aggregation));
  fprintf(f, "%-7s %-9s %9s  %13s %13s  %14s %14s\n", "algo", "model", "agree %",
          "max|d mean|", "max|d width|", "max|d||th|||", "same-hist d||th||");
  int shared_ts = 0;
  for (int i = 0; i < r->n_cfg; i++) {
    eval_regret_summary sm;
    eval_regret_summary_of(r, r->algo[i], r->model[i], &sm);
    if (r->algo[i] == O3M_ALGO_LINTS && r->model[i] == O3M_MODEL_SHARED) shared_ts = 1;
    fprintf(f, "%-7s %-9s %9.2f  %13.3e %13.3e  %14.3e %14.3e\n", o3m_algo_name(r->algo[i]),
            o3m_model_name(r->model[i]), 100.0 * sm.agreement, sm.max_mean_diff,
            sm.max_width_diff, sm.max_theta_diff, sm.max_theta_diff_same);
  }
  fprintf(f,
          "note: d mean / d width compare x^T theta and sqrt(x^T Lambda^-1 x) at the central's\n"
          "  chosen arm with a masked learner fed the central's history (for LinUCB and\n"
          "  disjoint LinTS that is the federated learner itself).\n");
  if (shared_ts)
    fprintf(f,
            "note: shared LinTS draws mu = theta + v U^-1 z; the Cholesky factor of Q Lambda Q^T\n"
            "  is not Q U, so the same z gives a different sample and decisions differ draw by\n"
            "  draw: only the distribution of the scores is equal (Theorem A.1). Its histories\n"
            "  then drift apart, so agreement and the federated ||theta|| difference measure two\n"
            "  equally good learners; the same-history columns show the posterior is the same.\n");
  if (c->n_ratios > 0 || c->part.m > 0)
    fprintf(f, "note: local(AP) is the first party's %d columns; ratio r keeps the first\n"
               "  ceil(r d) columns.\n",
            c->part.dims[0]);
  fprintf(f, "note: masks come from a seeded generator (evaluation only, not secure).\n");
  for (int i = 0; i < c->n_dp; i++) {
    double sigma = NAN;
    bl_dp_sigma_for(c->dp_eps[i], c->dp_delta, c->T, bl_dp_sensitivity(c->dp_clip, c->K),
                    &sigma, NULL);
    fprintf(f, "%s dp%g: each passive party's rows clipped to %g, N(0, %.4g^2) per entry per\n"
               "  round: (%g, %g)-DP per party over the T = %ld rounds (zCDP composition)\n",
            i ? "     " : "note:", c->dp_eps[i], c->dp_clip, sigma, c->dp_eps[i], c->dp_delta,
            c->T);
  }
}

/* ---- plots ---- */

/* 1-based CSV column of a variant's mean (lo and hi follow). */
static int col_mean(int v) { return 2 + 3 * v; }

/* The key entry that explains the shaded bands: the 95% t band over the
 * seeds, or a note that one seed has none. */
static void gp_band_key(FILE *g, const eval_regret *r) {
  int n = r->c.n_seeds;
  if (n > 1)
    fprintf(g, "  keyentry with filledcurves fc rgb '#888888' fs transparent solid 0.2 "
               "title '95%% band: mean ± t_{0.975,%d} sd/√%d (t = %.3f)', \\\n",
            n - 1, n, eval_stats_t_quantile(0.975, n - 1));
  else
    fprintf(g, "  keyentry with lines lc rgb '#ffffff' title '1 seed: no band', \\\n");
}

static void gp_regret(FILE *g, const eval_regret *r, const char *csv, const char *stem,
                      const char *title, const int *vars, int nv) {
  static const char *colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                 "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
  eval_plot_output(g, stem);
  fprintf(g, "set title \"%s\"\nset xlabel 'round t'\n"
             "set ylabel 'cumulative regret R(t)'\nunset logscale y\nset format y '%%g'\n"
             "plot \\\n",
          title);
  gp_band_key(g, r);
  for (int j = 0; j < nv; j++) {
    int v = vars[j], cm = col_mean(v);
    char name[64];
    variant_name(r, v, name, sizeof name);
    if (v == EVAL_REGRET_LOCAL) snprintf(name, sizeof name, "partial local (AP, %d cols)",
                                         r->cols[v]);
    else if (v == eval_regret_outage_variant(&r->c))
      snprintf(name, sizeof name, "federated, a party missing in rounds [%ld, %ld)",
               r->c.outage_a, r->c.outage_b);
    else if (v >= eval_regret_dp_variant(&r->c, 0))
      snprintf(name, sizeof name, "DP eps %g over T (noised passive parties)",
               r->c.dp_eps[v - eval_regret_dp_variant(&r->c, 0)]);
    else if (v >= EVAL_REGRET_RATIO0)
      snprintf(name, sizeof name, "partial ratio %g (%d cols)",
               r->c.ratios[v - EVAL_REGRET_RATIO0], r->cols[v]);
    else if (v == EVAL_REGRET_CENTRAL)
      snprintf(name, sizeof name, "central (full, %d cols)", r->cols[v]);
    else
      snprintf(name, sizeof name, "federated (O3M, %d parties)", r->c.part.m);
    const char *col = colors[v % 10];
    fprintf(g,
            "  '%s' using 1:%d:%d with filledcurves fc rgb '%s' fs transparent solid 0.2 "
            "notitle, \\\n"
            "  '%s' using 1:%d with lines lw %s lc rgb '%s' %s title '%s'%s\n",
            csv, cm + 1, cm + 2, col, csv, cm, v == EVAL_REGRET_FEDERATED ? "2" : "2.5", col,
            v == EVAL_REGRET_FEDERATED ? "dt 2" : "dt 1", name, j + 1 < nv ? ", \\" : "");
  }
}

/* The ||theta|| difference. For shared LinTS (Figure 4d) the two series are
 * 12 orders of magnitude apart (the independently drawing learner ~1e-2, the
 * same-history learner ~1e-15), so they get two panels, the second on a log
 * scale of |.| (when it has a positive value to show; exact zeros are left
 * out). Elsewhere both are rounding noise and share one linear panel. */
static void gp_theta(FILE *g, const eval_regret *r, const char *csv, const char *stem,
                     const char *title, int is_shared_ts, int same_positive) {
  int base = col_mean(r->n_var); /* theta_norm_diff_mean */
  eval_plot_output(g, stem);
  fprintf(g, "set xlabel 'round t'\nunset logscale y\nset format y '%%.1e'\n");
  if (!is_shared_ts) {
    fprintf(g,
            "set title \"%s\"\nset ylabel '‖θ_{fed}‖ − ‖θ_{central}‖'\n"
            "plot '%s' using 1:%d with lines lw 2 lc rgb '#d62728' title 'mean over seeds', "
            "\\\n  '%s' using 1:%d with lines lw 1.5 dt 2 lc rgb '#1f77b4' title 'max |.| over "
            "seeds'\n",
            title, csv, base, csv, base + 1);
    return;
  }
  fprintf(g,
          "set multiplot layout 2,1 title \"%s\"\n"
          "set title 'federated learner with its own draws (own history)'\n"
          "set ylabel '‖θ_{fed}‖ − ‖θ_{central}‖'\n"
          "plot '%s' using 1:%d with lines lw 2 lc rgb '#d62728' title 'mean over seeds'\n"
          "set title 'masked learner fed the central history (rounding only)'\n"
          "set ylabel '|‖θ_{same}‖ − ‖θ_{central}‖|'\n",
          title, csv, base);
  if (same_positive)
    fprintf(g, "set logscale y\nset format y '10^{%%L}'\n"
               "plot '%s' using 1:($%d > 0 ? $%d : 1/0) with lines lw 2 lc rgb '#1f77b4' "
               "title 'max |.| over seeds (log scale; zeros omitted)'\n"
               "unset logscale y\n",
            csv, base + 2, base + 2);
  else
    fprintf(g, "plot '%s' using 1:%d with lines lw 2 lc rgb '#1f77b4' title 'max |.| over "
               "seeds (exactly 0)'\n",
            csv, base + 2);
  fprintf(g, "unset multiplot\n");
}

int eval_regret_plot(const eval_regret *r, const char *dir, int formats, FILE *f, o3m_err *e) {
  int rc = eval_regret_mkdir_p(dir, e);
  if (rc) return rc;
  char path[4096];
  snprintf(path, sizeof path, "%s/regret_plots.gp", dir);
  FILE *g = fopen(path, "w");
  if (!g) return o3m_err_set(e, O3M_EIO, "cannot write %s: %s", path, strerror(errno));
  eval_plot_preamble(g, "regret", "regret_plots.gp");
  char list[2048] = "";
  for (int m = 1; m <= 2; m++) {
    o3m_model_kind model = m == 1 ? O3M_MODEL_SHARED : O3M_MODEL_DISJOINT;
    const char *mn = o3m_model_name(model);
    for (int a = 0; a < 2; a++) {
      o3m_algo algo = a == 0 ? O3M_ALGO_LINUCB : O3M_ALGO_LINTS;
      int i = cfg_index(r, algo, model);
      if (i < 0) continue;
      const char *an = a == 0 ? "LinUCB" : "LinTS";
      /* The paper's names VFUCB and VFTS are those of the shared model; the
       * disjoint figures name the federated learner plainly. Figure numbers
       * are in the file names only. */
      char csv[128], stem[128], title[256];
      snprintf(csv, sizeof csv, "regret_%s_%s.csv", o3m_algo_name(algo), mn);
      int v1[3] = {EVAL_REGRET_CENTRAL, EVAL_REGRET_FEDERATED, EVAL_REGRET_LOCAL};
      snprintf(stem, sizeof stem, "fig4%c_%s", a == 0 ? 'a' : 'c', mn);
      if (model == O3M_MODEL_SHARED)
        snprintf(title, sizeof title, "%s vs %s vs partial local (shared model, %d seeds)", an,
                 a == 0 ? "VFUCB" : "VFTS", r->c.n_seeds);
      else
        snprintf(title, sizeof title, "%s, disjoint model: central vs federated vs partial "
                 "local (%d seeds)", an, r->c.n_seeds);
      gp_regret(g, r, csv, stem, title, v1, 3);
      eval_plot_append_names(list, sizeof list, stem, formats);
      snprintf(stem, sizeof stem, "fig4%c_%s", a == 0 ? 'b' : 'd', mn);
      if (model == O3M_MODEL_SHARED)
        snprintf(title, sizeof title, "‖θ‖ difference: %s minus %s (shared model)",
                 a == 0 ? "VFUCB" : "VFTS", an);
      else
        snprintf(title, sizeof title, "%s, disjoint model: ‖θ‖ difference, federated minus "
                 "central", an);
      double same_max = 0;
      for (size_t k = 0; k < (size_t)r->c.n_seeds * r->n_steps; k++)
        same_max = fmax(same_max, fabs(th_at(r->thsame, r, i, 0)[k]));
      gp_theta(g, r, csv, stem, title, algo == O3M_ALGO_LINTS && model == O3M_MODEL_SHARED,
               same_max > 0);
      eval_plot_append_names(list, sizeof list, stem, formats);
      if (r->c.n_ratios > 0) {
        int v6[1 + EVAL_REGRET_MAX_RATIOS], n6 = 0;
        for (int k = 0; k < r->c.n_ratios; k++) v6[n6++] = EVAL_REGRET_RATIO0 + k;
        v6[n6++] = EVAL_REGRET_CENTRAL;
        snprintf(stem, sizeof stem, "fig6%c_%s", a == 0 ? 'a' : 'b', mn);
        snprintf(title, sizeof title, "%s, %s model: partial ratios vs full features (%d "
                 "seeds)", an, mn, r->c.n_seeds);
        gp_regret(g, r, csv, stem, title, v6, n6);
        eval_plot_append_names(list, sizeof list, stem, formats);
      }
      if (eval_regret_outage_variant(&r->c) >= 0) {
        /* An outage's price: between always federated and the AP alone. */
        int vo[3] = {EVAL_REGRET_FEDERATED, eval_regret_outage_variant(&r->c),
                     EVAL_REGRET_LOCAL};
        snprintf(stem, sizeof stem, "outage_%s_%s", o3m_algo_name(algo), mn);
        snprintf(title, sizeof title, "%s, %s model: a passive party missing in rounds [%ld, "
                 "%ld) (%d seeds)", an, mn, r->c.outage_a, r->c.outage_b, r->c.n_seeds);
        gp_regret(g, r, csv, stem, title, vo, 3);
        eval_plot_append_names(list, sizeof list, stem, formats);
      }
      if (r->c.n_dp > 0) {
        /* DP's price: its variants beside central, federated and local. */
        int vd[3 + EVAL_REGRET_MAX_DP], nd = 0;
        vd[nd++] = EVAL_REGRET_CENTRAL;
        vd[nd++] = EVAL_REGRET_FEDERATED;
        vd[nd++] = EVAL_REGRET_LOCAL;
        for (int i = 0; i < r->c.n_dp; i++) vd[nd++] = eval_regret_dp_variant(&r->c, i);
        snprintf(stem, sizeof stem, "figdp_%s_%s", o3m_algo_name(algo), mn);
        snprintf(title, sizeof title, "%s: DP (Gaussian, zCDP over T, delta %g) vs O3M (%s "
                 "model)", an, r->c.dp_delta, mn);
        gp_regret(g, r, csv, stem, title, vd, nd);
        eval_plot_append_names(list, sizeof list, stem, formats);
      }
    }
  }
  fprintf(g, "unset output\n");
  int bad = ferror(g);
  if (fclose(g) != 0 || bad)
    return o3m_err_set(e, O3M_EIO, "cannot write %s: %s", path, strerror(errno));
  if ((rc = eval_plot_render(dir, "regret_plots.gp", formats, e))) return rc;
  if (f) fprintf(f, "plots in %s:%s\n", dir, list);
  return O3M_OK;
}

/* ---- the subcommand ---- */

/* The options' messages' prefix. */
#define REGRET "o3m-eval regret"

/* "a,b,c" of numbers in (0, 1]. */
static int parse_ratios(const char *s, eval_regret_config *c) {
  c->n_ratios = 0;
  if (!*s || !strcmp(s, "none")) return 1;
  /* Room for one ratio too many tells a bad entry (any K up to MAX + 1)
   * from a list that is too long (MAX + 1 good entries, or a bad one after
   * them), as the two messages need. */
  double v[EVAL_REGRET_MAX_RATIOS + 1];
  int n = o3m_cli_parse_double_list(s, DBL_TRUE_MIN, 1, v, EVAL_REGRET_MAX_RATIOS + 1);
  if (n < 1 && -n <= EVAL_REGRET_MAX_RATIOS + 1) {
    fprintf(stderr, "o3m-eval regret: --partial-ratios: '%s': entry %d is not in (0, 1]\n", s,
            -n);
    return 0;
  }
  if (n < 1 || n > EVAL_REGRET_MAX_RATIOS) {
    fprintf(stderr, "o3m-eval regret: --partial-ratios: at most %d ratios\n",
            EVAL_REGRET_MAX_RATIOS);
    return 0;
  }
  memcpy(c->ratios, v, (size_t)n * sizeof *v);
  c->n_ratios = n;
  return 1;
}

/* "a,b" of positive epsilons, or none. */
static int parse_dp_eps(const char *s, eval_regret_config *c) {
  c->n_dp = 0;
  if (!strcmp(s, "none")) return 1;
  int n = o3m_cli_parse_double_list(s, DBL_TRUE_MIN, DBL_MAX, c->dp_eps, EVAL_REGRET_MAX_DP);
  if (n < 1) {
    fprintf(stderr, "o3m-eval regret: --dp-eps: '%s': entry %d is not a positive number "
                    "(at most %d)\n", s, -n, EVAL_REGRET_MAX_DP);
    return 0;
  }
  c->n_dp = n;
  return 1;
}

static int parse_set(const char *opt, const char *s, const char *a, const char *b, int *out) {
  if (!strcmp(s, a)) *out = 1;
  else if (!strcmp(s, b)) *out = 2;
  else if (!strcmp(s, "both")) *out = 3;
  else {
    fprintf(stderr, "o3m-eval regret: --%s: '%s' is not %s, %s or both\n", opt, s, a, b);
    return 0;
  }
  return 1;
}

enum {
  REG_D, REG_K, REG_T, REG_SEEDS, REG_FIRST_SEED, REG_PARTIES, REG_RATIOS, REG_ALGO, REG_MODEL,
  REG_ALPHA, REG_BETA, REG_V, REG_LAMBDA, REG_NOISE, REG_EVERY, REG_REFACTOR, REG_OUT_DIR,
  REG_NO_PLOTS, REG_WHITEN, REG_AGGREGATION, REG_PLOT_FORMAT, REG_DP_EPS, REG_DP_DELTA, REG_DP_CLIP,
  REG_OUTAGE, REG_N
};
static const o3m_cli_option regret_options[] = {
    [REG_D] = {"d", "N", "context dimension (100)"},
    [REG_K] = {"K", "N", "arms per round (10)"},
    [REG_T] = {"T", "N", "rounds (5000)"},
    [REG_SEEDS] = {"seeds", "N", "repeats, seeds FIRST..FIRST+N-1 (5)"},
    [REG_FIRST_SEED] = {"first-seed", "S", "the first seed (1)"},
    [REG_PARTIES] = {"parties", "D1,D2,...",
                     "column split, first party = AP (20,20,20,20,20; other --d: min(5, d) parts)"},
    [REG_RATIOS] = {"partial-ratios", "R,..", "shares of columns for Figure 6, or none (0.2,0.8)"},
    [REG_ALGO] = {"algo", "linucb|lints|both", "the policies run (both)"},
    [REG_MODEL] = {"model", "shared|disjoint|both", "the models run (shared)"},
    [REG_ALPHA] = {"alpha", "B", "LinUCB beta (0.5)"},
    [REG_BETA] = {"beta", "B", "the same as --alpha"},
    [REG_V] = {"v", "V", "LinTS scale (0.01)"},
    [REG_LAMBDA] = {"lambda", "L", "ridge (1)"},
    [REG_NOISE] = {"noise-var", "S2", "reward noise variance (0.05)"},
    [REG_EVERY] = {"every", "N", "keep every N-th step in the CSVs, and the last (10)"},
    [REG_REFACTOR] = {"refactor-every", "N", "policy refactorization period (1000)"},
    [REG_OUT_DIR] = {"out-dir", "DIR", "where the CSVs and plots go (eval-out/regret)"},
    [REG_NO_PLOTS] = {"no-plots", NULL, "CSVs and summary only"},
    [REG_WHITEN] = {"whiten", "all|none|J,..",
                    "parties (0 = AP) that whiten their columns before masking; learners see "
                    "whitened contexts (none)"},
    [REG_AGGREGATION] = {"aggregation", "secure|per-party",
                         "how the federated variant sums the passive parties' parts (secure, "
                         "as the daemons)"},
    [REG_PLOT_FORMAT] = {"plot-format", "png,pdf,svg",
                         "plot formats, any of png, pdf and svg (png)"},
    [REG_DP_EPS] = {"dp-eps", "E,..|none",
                    "DP variants: epsilon per party over all T rounds, at most 4 (none)"},
    [REG_DP_DELTA] = {"dp-delta", "D", "DP variants' delta (1e-5)"},
    [REG_DP_CLIP] = {"dp-clip", "C", "DP variants' L2 bound of a row of a party's block (1)"},
    [REG_OUTAGE] = {"outage", "A,B",
                    "an outage variant: a passive party missing in rounds [A, B), decided by "
                    "the AP's local model (none)"},
    [REG_N] = {NULL, NULL, NULL},
};
static const o3m_cli_spec regret_cli = {
    "o3m-eval regret", "[options]",
    "The paper's synthetic experiment (Figures 4 and 6): central, federated (O3M,\n"
    "masked in-process), partial local (first party only) and partial ratios on the\n"
    "same stream per seed, and with --dp-eps DP variants (Gaussian noise on every\n"
    "passive party's columns, accounted over T). Writes CSVs and plots (PNG; PDF/SVG\n"
    "with --plot-format) to --out-dir, a summary to stdout. Bands are 95%: mean +-\n"
    "t_{0.975,n-1} sd/sqrt(n) over the n seeds (Student t, 2.776 at 5 seeds).",
    regret_options, NULL};

int eval_regret_main(int argc, char **argv) {
  eval_regret_config c;
  eval_regret_config_default(&c);
  const char *parties = NULL, *out_dir = "eval-out/regret";
  int plots = 1, formats = EVAL_PLOT_PNG;
  long long lv;
  o3m_cli cl;
  o3m_cli_begin(&cl, &regret_cli, argc, argv);
  const char *arg;
  for (int ch; (ch = o3m_cli_next(&cl, &arg)) != O3M_CLI_END;) {
    switch (ch) {
    case O3M_CLI_STOP: return cl.exit_code;
    case REG_D:
      if (o3m_cli_opt_long(REGRET, "d", arg, 1, O3M_MAX_DIM, &lv)) return 2;
      c.d = (int)lv;
      break;
    case REG_K:
      if (o3m_cli_opt_long(REGRET, "K", arg, 1, O3M_EVAL_MAX_K, &lv)) return 2;
      c.K = (int)lv;
      break;
    case REG_T:
      if (o3m_cli_opt_long(REGRET, "T", arg, 1, 1000000000, &lv)) return 2;
      c.T = (long)lv;
      break;
    case REG_SEEDS:
      if (o3m_cli_opt_long(REGRET, "seeds", arg, 1, 10000, &lv)) return 2;
      c.n_seeds = (int)lv;
      break;
    case REG_FIRST_SEED:
      if (o3m_cli_opt_long(REGRET, "first-seed", arg, 0, __LONG_MAX__, &lv)) return 2;
      c.first_seed = (uint64_t)lv;
      break;
    case REG_PARTIES: parties = arg; break;
    case REG_RATIOS: if (!parse_ratios(arg, &c)) return 2; break;
    case REG_ALGO: if (!parse_set("algo", arg, "linucb", "lints", &c.algos)) return 2; break;
    case REG_MODEL: if (!parse_set("model", arg, "shared", "disjoint", &c.models)) return 2; break;
    case REG_ALPHA:
    case REG_BETA: if (o3m_cli_opt_double(REGRET, "alpha", arg, 0, 1e6, &c.alpha)) return 2; break;
    case REG_V: if (o3m_cli_opt_double(REGRET, "v", arg, 0, 1e6, &c.v)) return 2; break;
    case REG_LAMBDA:
      if (o3m_cli_opt_double(REGRET, "lambda", arg, 1e-12, 1e12, &c.lambda)) return 2;
      break;
    case REG_NOISE:
      if (o3m_cli_opt_double(REGRET, "noise-var", arg, 0, 1e6, &c.noise_var)) return 2;
      break;
    case REG_EVERY:
      if (o3m_cli_opt_long(REGRET, "every", arg, 1, 1000000000, &lv)) return 2;
      c.every = (int)lv;
      break;
    case REG_REFACTOR:
      if (o3m_cli_opt_long(REGRET, "refactor-every", arg, 1, 1000000000, &lv)) return 2;
      c.refactor_every = (int)lv;
      break;
    case REG_OUT_DIR: out_dir = arg; break;
    case REG_NO_PLOTS: plots = 0; break;
    case REG_WHITEN: c.whiten = arg; break;
    case REG_PLOT_FORMAT: {
      o3m_err pe;
      if (eval_plot_formats_parse(arg, &formats, &pe)) {
        fprintf(stderr, "o3m-eval regret: %s\n", o3m_err_message(&pe));
        return 2;
      }
      break;
    }
    case REG_DP_EPS: if (!parse_dp_eps(arg, &c)) return 2; break;
    case REG_DP_DELTA:
      if (o3m_cli_opt_double(REGRET, "dp-delta", arg, 1e-300, 0.5, &c.dp_delta)) return 2;
      break;
    case REG_DP_CLIP:
      if (o3m_cli_opt_double(REGRET, "dp-clip", arg, 1e-9, 1e9, &c.dp_clip)) return 2;
      break;
    case REG_OUTAGE: {
      char *end;
      errno = 0;
      c.outage_a = strtol(arg, &end, 10);
      int ok = end != arg && *end == ',' && !errno;
      if (ok) {
        const char *b = end + 1;
        c.outage_b = strtol(b, &end, 10);
        ok = end != b && !*end && !errno;
      }
      if (!ok || c.outage_a < 1 || c.outage_b <= c.outage_a) {
        fprintf(stderr, "o3m-eval regret: --outage: '%s' is not A,B with 1 <= A < B\n", arg);
        return 2;
      }
      break;
    }
    case REG_AGGREGATION: {
      eval_aggregation ag;
      if (eval_aggregation_parse(arg, &ag)) {
        fprintf(stderr, "o3m-eval regret: --aggregation: expected secure or per-party, got "
                "'%s'\n", arg);
        return 2;
      }
      c.aggregation = (int)ag;
      break;
    }
    }
  }
  if (o3m_cli_operands(&cl) != argc)
    return o3m_cli_usage_error(&regret_cli, "unexpected argument '%s'",
                               argv[o3m_cli_operands(&cl)]);
  o3m_err err;
  o3m_err_clear(&err);
  if (parties) {
    if (o3m_partition_parse(&c.part, parties, &err)) {
      fprintf(stderr, "o3m-eval regret: --parties: %s\n", o3m_err_message(&err));
      return 2;
    }
  } else if (c.d != 100) {
    o3m_partition_even(&c.part, c.d, c.d < 5 ? c.d : 5, NULL);
  }
  double t_start = o3m_clock_s();
  eval_regret *r = NULL;
  int rc = eval_regret_run(&r, &c, &err);
  if (rc) {
    fprintf(stderr, "o3m-eval regret: %s\n", o3m_err_message(&err));
    return rc == O3M_EINVAL ? 2 : 1;
  }
  int status = 0;
  eval_regret_print_summary(r, stdout);
  if (c.whiten)
    printf("whitened parties: %s (each map from %d contexts of an independent stream; "
           "learners see whitened contexts, regret is on the raw ones)\n",
           c.whiten, EVAL_REGRET_WHITEN_ROWS);
  if (eval_regret_write_csv(r, out_dir, &err)) {
    fprintf(stderr, "o3m-eval regret: %s\n", o3m_err_message(&err));
    status = 1;
  } else {
    printf("CSVs in %s: regret_<algo>_<model>.csv, %d rows each (every %d steps and the "
           "last)\n",
           out_dir, eval_regret_n_steps(r), c.every);
    if (plots && eval_regret_plot(r, out_dir, formats, stdout, &err)) {
      fprintf(stderr, "o3m-eval regret: %s\n", o3m_err_message(&err));
      if (err.code != O3M_ENOTFOUND) status = 1;
    }
  }
  printf("runtime: %.2f s for the experiment, %.2f s in all (single-threaded BLAS)\n",
         eval_regret_seconds(r), o3m_clock_s() - t_start);
  eval_regret_destroy(r);
  if (fflush(stdout) != 0) status = 1;
  return status;
}
