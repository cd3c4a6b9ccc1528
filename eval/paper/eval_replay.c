/* eval_replay.c -- the replay estimator (see eval_replay.h) and the
 * `o3m-eval replay` subcommand.
 *
 * Events are read in batches of BATCH into one of two batch buffers, each
 * event stored compactly: the logged arm and reward, and either the row part
 * w (d numbers, additively split readers) or the full K x d matrix. The
 * learners rebuild their K x d candidate matrices from that. With threads =
 * 2 the central and partial learners are one "job" per batch on a second
 * thread, while the calling thread runs the federated learner and the random
 * baselines on the same batch and then reads the next one; with threads = 1
 * everything runs inline. Each learner sees the events in order and owns its
 * state, so both schedules give the same numbers.
 *
 * Costs per event for K = 40, d = 39 (Criteo): a shared-LinUCB choose is one
 * K x d x d dtrmm (o3m_policy.c), about 60 kflop; the masking of the additively split
 * context is d x d (one row), building the candidate matrices K x d adds,
 * parsing about 200 bytes. The choose calls dominate; see
 * docs/evaluation/replay.md for measured rates. */
#include "eval_replay.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "eval_cmds.h"
#include "eval_criteo_prep.h"
#include "bl_dp.h"
#include "eval_masker.h"
#include "eval_plot.h"
#include "eval_replay_out.h"
#include "o3m_blas.h"
#include "o3m_cli.h"
#include "o3m_clock.h"
#include "o3m_rng.h"

#define BATCH 256

void eval_replay_config_default(eval_replay_config *c) {
  memset(c, 0, sizeof *c);
  o3m_policy_config_default(&c->policy);
  c->mask_seed = 7;
  c->random_seed = 1000;
  c->n_random = 5;
  c->variants = EVAL_REPLAY_ALL;
  c->threads = 1;
  c->dp_delta = 1e-5;
  c->dp_clip = 1.0;
  c->dp_seed = 11;
}

double eval_replay_ctr(const eval_replay_tally *t) {
  return t->matched ? t->clicks / (double)t->matched : NAN;
}

/* The spread of the n ratios r (one per random seed) into out: mean,
 * sample std, min and max, NaN where n is too small. out->rel is the
 * caller's; so is what a non-finite ratio makes of the rest. */
static void seed_spread(const double *r, int n, eval_replay_rel *out) {
  double s1 = 0, s2 = 0, lo = INFINITY, hi = -INFINITY;
  for (int s = 0; s < n; s++) {
    s1 += r[s];
    s2 += r[s] * r[s];
    if (r[s] < lo) lo = r[s];
    if (r[s] > hi) hi = r[s];
  }
  out->mean = n ? s1 / n : NAN;
  out->std = n > 1 ? sqrt(fmax(0.0, (s2 - s1 * s1 / n) / (n - 1))) : NAN;
  out->min = n ? lo : NAN;
  out->max = n ? hi : NAN;
}

void eval_replay_relative(const eval_replay_result *res, const eval_replay_tally *t,
                          eval_replay_rel *out) {
  double ctr = eval_replay_ctr(t), mean_rand = 0, r[EVAL_REPLAY_MAX_RANDOM] = {0};
  int n = res->n_random;
  for (int s = 0; s < n; s++) {
    double cr = eval_replay_ctr(&res->random[s]);
    mean_rand += cr / n;
    r[s] = ctr / cr;
  }
  seed_spread(r, n, out);
  out->rel = ctr / mean_rand;
  if (!isfinite(out->rel)) out->rel = NAN;
  if (!isfinite(out->mean)) out->mean = out->std = out->min = out->max = NAN;
}

void eval_replay_random_summary(const eval_replay_result *res, double *matched, double *clicks,
                                double *ctr, eval_replay_rel *out) {
  int n = res->n_random;
  double m = 0, c = 0, mean_ctr = 0, r[EVAL_REPLAY_MAX_RANDOM] = {0};
  for (int s = 0; s < n; s++) {
    m += (double)res->random[s].matched / n;
    c += res->random[s].clicks / n;
    mean_ctr += eval_replay_ctr(&res->random[s]) / n;
  }
  for (int s = 0; s < n; s++) r[s] = eval_replay_ctr(&res->random[s]) / mean_ctr;
  seed_spread(r, n, out);
  *matched = m;
  *clicks = c;
  *ctr = mean_ctr;
  out->rel = isfinite(mean_ctr) && mean_ctr > 0 ? 1.0 : NAN;
  /* A non-finite ratio spoils the mean and std only; min and max keep the
   * finite extremes (a finite sum over n >= 1 seeds gives a finite mean). */
  if (!isfinite(out->mean)) out->mean = out->std = NAN;
  if (!isfinite(out->min)) out->min = NAN;
  if (!isfinite(out->max)) out->max = NAN;
}

/* ---- the learners ---- */

/* The DP learners' bit in run_learners' set (not a cfg->variants bit: they
 * run when cfg->n_dp > 0). */
#define REPLAY_DP 8

typedef struct batch {
  int n;
  int *arm;
  double *reward;
  long long *line;
  double *data; /* BATCH x (split ? d : K d) */
  int *central; /* choices, -1 when central does not run */
  int *fed;
} batch;

typedef struct learner {
  o3m_policy *pol;
  int d;
  double *Xb; /* K x d candidate matrix */
  eval_replay_tally tally;
} learner;

typedef struct replay {
  const eval_replay_config *cfg;
  int K, d, split, stride;
  const double *C; /* K x d item part (split readers; whitened with cfg->whiten) */
  double *Cw;      /* the whitened copy C points to, or NULL */
  learner central, fed, partial;
  learner dp[EVAL_REPLAY_MAX_DP];
  bl_dp *dpm[EVAL_REPLAY_MAX_DP];
  eval_masker *masker;
  double *QC; /* K x d masked item part (split readers) */
  o3m_rng *rng[EVAL_REPLAY_MAX_RANDOM];
  eval_replay_tally random[EVAL_REPLAY_MAX_RANDOM];
  batch b[2];
  /* the second thread */
  int threaded;
  pthread_t thr;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int job;   /* index of the batch to process, -1 none, -2 quit */
  int done;  /* set when the job is finished */
  int job_rc;
  o3m_err job_err;
  double worker_cpu; /* the second thread's CPU seconds, set when it quits */
} replay;

/* CPU seconds (user + system) of the calling thread. */
static double thread_cpu(void) {
  struct rusage ru;
  if (getrusage(RUSAGE_THREAD, &ru)) return 0;
  return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec +
         (double)ru.ru_stime.tv_sec + 1e-6 * (double)ru.ru_stime.tv_usec;
}

static int learner_init(learner *l, const o3m_policy_config *base, int K, int d, o3m_err *e) {
  o3m_policy_config c = *base;
  c.d = d;
  c.n_arms = K;
  c.max_candidates = K;
  l->d = d;
  l->Xb = malloc(sizeof(double) * (size_t)K * d);
  if (!l->Xb) return o3m_err_set(e, O3M_ENOMEM, "replay: out of memory");
  return o3m_policy_create(&l->pol, &c, e);
}

static void learner_free(learner *l) {
  o3m_policy_destroy(l->pol);
  free(l->Xb);
}

/* Chooses on X (K x l->d); on a match updates with the chosen row. */
static int learner_step(learner *l, int K, const double *X, int arm, double reward,
                        long long line, const char *name, int *choice, o3m_err *e) {
  int c;
  int rc = o3m_policy_choose(l->pol, K, X, NULL, &c, NULL);
  if (rc)
    return o3m_err_set(e, rc, "replay: event at line %lld: %s choose failed: %s", line, name,
                       o3m_strerror(rc));
  *choice = c;
  if (c != arm) return O3M_OK;
  l->tally.matched++;
  l->tally.clicks += reward;
  rc = o3m_policy_update(l->pol, c, X + (size_t)c * l->d, reward);
  if (rc)
    return o3m_err_set(e, rc, "replay: event at line %lld: %s update failed: %s", line, name,
                       o3m_strerror(rc));
  return O3M_OK;
}

/* y = a + b over n doubles. Unrolled by four so that -O2 vectorizes the body
 * (it does not version plain loops for aliasing); this runs K times per
 * learner per event. */
static inline void vadd(int n, const double *restrict a, const double *restrict b,
                        double *restrict y) {
  int j = 0;
  for (; j + 4 <= n; j += 4) {
    y[j] = a[j] + b[j];
    y[j + 1] = a[j + 1] + b[j + 1];
    y[j + 2] = a[j + 2] + b[j + 2];
    y[j + 3] = a[j + 3] + b[j + 3];
  }
  for (; j < n; j++) y[j] = a[j] + b[j];
}

/* Builds learner `which`'s K x d candidate matrix for event t of b and
 * returns it (a pointer into the batch for an unsplit central learner). */
static const double *candidates(replay *R, int which, const batch *b, int t) {
  const int K = R->K, d = R->d;
  const double *row = b->data + (size_t)t * R->stride;
  if (which == EVAL_REPLAY_FEDERATED) {
    if (!R->split) return eval_masker_apply(R->masker, K, row);
    /* Q x_a = Q w + Q c_a: mask the row part, add the masked item parts. */
    const double *qw = eval_masker_apply(R->masker, 1, row);
    if (!qw) return NULL;
    double *Y = R->fed.Xb;
    for (int a = 0; a < K; a++) vadd(d, qw, R->QC + (size_t)a * d, Y + (size_t)a * d);
    return Y;
  }
  if (which == EVAL_REPLAY_CENTRAL) {
    if (!R->split) return row;
    double *X = R->central.Xb;
    for (int a = 0; a < K; a++) vadd(d, row, R->C + (size_t)a * d, X + (size_t)a * d);
    return X;
  }
  /* partial: the first dp columns */
  const int dp = R->partial.d;
  double *Xp = R->partial.Xb;
  for (int a = 0; a < K; a++) {
    double *x = Xp + (size_t)a * dp;
    if (R->split) {
      vadd(dp, row, R->C + (size_t)a * d, x);
    } else {
      memcpy(x, row + (size_t)a * d, sizeof(double) * dp);
    }
  }
  return Xp;
}

/* Runs the learners in the bit set `which` over batch b, in event order.
 * Records the central and federated choices for the agreement count. */
static int run_learners(replay *R, int which, batch *b, o3m_err *e) {
  static const struct { int bit; const char *name; } order[] = {
      {EVAL_REPLAY_CENTRAL, "central"},
      {EVAL_REPLAY_FEDERATED, "federated"},
      {EVAL_REPLAY_PARTIAL, "partial"}};
  for (int i = 0; i < 3; i++) {
    int bit = order[i].bit;
    if (!(which & bit & R->cfg->variants)) continue;
    learner *l = bit == EVAL_REPLAY_CENTRAL ? &R->central
                 : bit == EVAL_REPLAY_FEDERATED ? &R->fed : &R->partial;
    int *rec = bit == EVAL_REPLAY_CENTRAL ? b->central
               : bit == EVAL_REPLAY_FEDERATED ? b->fed : NULL;
    for (int t = 0; t < b->n; t++) {
      int c = -1;
      const double *X = candidates(R, bit, b, t);
      if (!X)
        return o3m_err_set(e, O3M_ERANGE, "line %ld: a part is too large for the fixed point of "
                           "secure aggregation (use --aggregation per-party)", (long)b->line[t]);
      int rc = learner_step(l, R->K, X, b->arm[t], b->reward[t], b->line[t], order[i].name, &c,
                            e);
      if (rc) return rc;
      if (rec) rec[t] = c;
    }
  }
  /* The DP learners: the full context with the passive parties' columns
   * released through the Gaussian mechanism (built in their own buffers:
   * the central learner's may be in use on the second thread). */
  for (int i = 0; (which & REPLAY_DP) && i < R->cfg->n_dp; i++) {
    learner *l = &R->dp[i];
    const int K = R->K, d = R->d;
    for (int t = 0; t < b->n; t++) {
      const double *row = b->data + (size_t)t * R->stride;
      for (int a = 0; a < K; a++) {
        if (R->split) vadd(d, row, R->C + (size_t)a * d, l->Xb + (size_t)a * d);
        else memcpy(l->Xb + (size_t)a * d, row + (size_t)a * d, sizeof(double) * (size_t)d);
      }
      int rc = bl_dp_perturb(R->dpm[i], K, R->cfg->part.m, R->cfg->part.dims, 1, l->Xb, e);
      int c;
      if (!rc) rc = learner_step(l, K, l->Xb, b->arm[t], b->reward[t], b->line[t], "dp", &c, e);
      if (rc) return rc;
    }
  }
  return O3M_OK;
}

/* The random baselines over batch b. */
static void run_random(replay *R, const batch *b) {
  const int K = R->K;
  for (int t = 0; t < b->n; t++)
    for (int s = 0; s < R->cfg->n_random; s++) {
      uint64_t u;
      o3m_rng_u64(R->rng[s], &u);
      /* Multiply-high maps u uniformly onto 0..K-1 (bias below K / 2^64). */
      int a = (int)(((unsigned __int128)u * (unsigned)K) >> 64);
      if (a == b->arm[t]) {
        R->random[s].matched++;
        R->random[s].clicks += b->reward[t];
      }
    }
}

/* Which learners the second thread runs. Measured costs per event at K = 40,
 * d = 39 (shared LinUCB): central ~8 us, federated ~9 us (its choose plus
 * masking), partial ~3.5 us at d_1 = 20, reading and parsing ~1.2 us per used
 * event. The calling thread also reads, so it takes federated and the
 * second thread central + partial: ~10.5 vs ~11.5 us, the most even split of
 * three sequential learners. */
#define WORKER_LEARNERS (EVAL_REPLAY_CENTRAL | EVAL_REPLAY_PARTIAL)
#define MAIN_LEARNERS (EVAL_REPLAY_FEDERATED | REPLAY_DP)

static void *worker_main(void *arg) {
  replay *R = arg;
  pthread_mutex_lock(&R->mu);
  for (;;) {
    while (R->job == -1) pthread_cond_wait(&R->cv, &R->mu);
    if (R->job == -2) break;
    int j = R->job;
    pthread_mutex_unlock(&R->mu);
    int rc = R->job_rc ? R->job_rc : run_learners(R, WORKER_LEARNERS, &R->b[j], &R->job_err);
    pthread_mutex_lock(&R->mu);
    R->job_rc = rc;
    R->job = -1;
    R->done = 1;
    pthread_cond_broadcast(&R->cv);
  }
  R->worker_cpu = thread_cpu();
  pthread_mutex_unlock(&R->mu);
  return NULL;
}

static void job_post(replay *R, int j) {
  pthread_mutex_lock(&R->mu);
  R->job = j;
  R->done = 0;
  pthread_cond_broadcast(&R->cv);
  pthread_mutex_unlock(&R->mu);
}

static void job_wait(replay *R) {
  pthread_mutex_lock(&R->mu);
  while (!R->done) pthread_cond_wait(&R->cv, &R->mu);
  pthread_mutex_unlock(&R->mu);
}

static void replay_free(replay *R) {
  if (R->threaded) {
    pthread_mutex_lock(&R->mu);
    R->job = -2;
    pthread_cond_broadcast(&R->cv);
    pthread_mutex_unlock(&R->mu);
    pthread_join(R->thr, NULL);
    pthread_mutex_destroy(&R->mu);
    pthread_cond_destroy(&R->cv);
  }
  learner_free(&R->central);
  learner_free(&R->fed);
  learner_free(&R->partial);
  for (int i = 0; i < EVAL_REPLAY_MAX_DP; i++) {
    learner_free(&R->dp[i]);
    bl_dp_destroy(R->dpm[i]);
  }
  eval_masker_destroy(R->masker);
  free(R->Cw);
  free(R->QC);
  for (int s = 0; s < EVAL_REPLAY_MAX_RANDOM; s++) o3m_rng_destroy(R->rng[s]);
  for (int i = 0; i < 2; i++) {
    free(R->b[i].arm);
    free(R->b[i].reward);
    free(R->b[i].line);
    free(R->b[i].data);
    free(R->b[i].central);
    free(R->b[i].fed);
  }
}

static int replay_init(replay *R, eval_reader *rd, const eval_replay_config *cfg, o3m_err *e) {
  memset(R, 0, sizeof *R);
  R->cfg = cfg;
  R->K = eval_reader_arms(rd);
  R->d = eval_reader_dim(rd);
  R->C = eval_reader_item_part(rd);
  R->split = R->C != NULL;
  if (R->split && cfg->whiten) {
    /* W (w + c_a) = W w + W c_a: the arm parts are whitened once here. */
    size_t n = (size_t)eval_reader_arms(rd) * (size_t)eval_reader_dim(rd);
    R->Cw = malloc(sizeof *R->Cw * n);
    if (!R->Cw) return o3m_err_set(e, O3M_ENOMEM, "replay: out of memory");
    memcpy(R->Cw, R->C, sizeof *R->Cw * n);
    eval_whiten_apply(cfg->whiten, eval_reader_arms(rd), R->Cw);
    R->C = R->Cw;
  }
  /* The learners rebuild X from w and C: the reader need not. */
  if (R->split) eval_reader_fill_matrix(rd, 0);
  R->stride = R->split ? R->d : R->K * R->d;
  R->job = -1;
  const int K = R->K, d = R->d;
  if (cfg->part.m < 1 || cfg->part.d != d)
    return o3m_err_set(e, O3M_EDIM, "replay: the partition covers %d columns, the data has %d",
                       cfg->part.d, d);
  if (cfg->n_random < 1 || cfg->n_random > EVAL_REPLAY_MAX_RANDOM)
    return o3m_err_set(e, O3M_EINVAL, "replay: %d random seeds, expected 1..%d", cfg->n_random,
                       EVAL_REPLAY_MAX_RANDOM);
  if (cfg->threads < 1 || cfg->threads > 2)
    return o3m_err_set(e, O3M_EINVAL, "replay: threads = %d, expected 1 or 2", cfg->threads);
  int rc;
  if (cfg->variants & EVAL_REPLAY_CENTRAL)
    if ((rc = learner_init(&R->central, &cfg->policy, K, d, e))) return rc;
  if (cfg->variants & EVAL_REPLAY_FEDERATED) {
    if ((rc = learner_init(&R->fed, &cfg->policy, K, d, e))) return rc;
    if ((rc = eval_masker_create(&R->masker, &cfg->part, K, 1, cfg->mask_seed,
                                 (eval_aggregation)cfg->aggregation, e)))
      return rc;
    if (R->split) {
      R->QC = malloc(sizeof(double) * (size_t)K * d);
      if (!R->QC) return o3m_err_set(e, O3M_ENOMEM, "replay: out of memory");
      const double *qc = eval_masker_apply(R->masker, K, R->C);
      if (!qc) return o3m_err_set(e, O3M_ERANGE, "the item contexts are too large for secure "
                                  "aggregation (use --aggregation per-party)");
      memcpy(R->QC, qc, sizeof(double) * (size_t)K * d);
    }
  }
  if (cfg->variants & EVAL_REPLAY_PARTIAL)
    if ((rc = learner_init(&R->partial, &cfg->policy, K, cfg->part.dims[0], e))) return rc;
  R->partial.d = cfg->part.dims[0];
  if (cfg->n_dp < 0 || cfg->n_dp > EVAL_REPLAY_MAX_DP)
    return o3m_err_set(e, O3M_EINVAL, "replay: %d DP variants, at most %d", cfg->n_dp,
                       EVAL_REPLAY_MAX_DP);
  if (cfg->n_dp > 0 && cfg->dp_T < 1)
    return o3m_err_set(e, O3M_EINVAL, "replay: DP variants need the events their budget covers "
                       "(--dp-T or --limit)");
  for (int i = 0; i < cfg->n_dp; i++) {
    bl_dp_config dc;
    bl_dp_config_default(&dc);
    dc.epsilon = cfg->dp_eps[i];
    dc.delta = cfg->dp_delta;
    dc.clip = cfg->dp_clip;
    dc.T = cfg->dp_T > 1000000000000LL ? 1000000000000L : (long)cfg->dp_T;
    dc.have_seed = 1;
    dc.seed = cfg->dp_seed + (uint64_t)i;
    if ((rc = bl_dp_create(&R->dpm[i], &dc, e))) return rc;
    if ((rc = learner_init(&R->dp[i], &cfg->policy, K, d, e))) return rc;
  }
  for (int s = 0; s < cfg->n_random; s++)
    if ((rc = o3m_rng_create_seeded_insecure(&R->rng[s], cfg->random_seed + (uint64_t)s)))
      return o3m_err_set(e, rc, "replay: cannot create a random generator");
  for (int i = 0; i < 2; i++) {
    batch *b = &R->b[i];
    b->arm = malloc(sizeof(int) * BATCH);
    b->reward = malloc(sizeof(double) * BATCH);
    b->line = malloc(sizeof(long long) * BATCH);
    b->data = malloc(sizeof(double) * BATCH * (size_t)R->stride);
    b->central = malloc(sizeof(int) * BATCH);
    b->fed = malloc(sizeof(int) * BATCH);
    if (!b->arm || !b->reward || !b->line || !b->data || !b->central || !b->fed)
      return o3m_err_set(e, O3M_ENOMEM, "replay: out of memory");
  }
  if (cfg->threads == 2 && (cfg->variants & WORKER_LEARNERS)) {
    if (pthread_mutex_init(&R->mu, NULL)) return o3m_err_set(e, O3M_ENOMEM, "replay: mutex");
    if (pthread_cond_init(&R->cv, NULL)) {
      pthread_mutex_destroy(&R->mu);
      return o3m_err_set(e, O3M_ENOMEM, "replay: condition variable");
    }
    if (pthread_create(&R->thr, NULL, worker_main, R)) {
      pthread_cond_destroy(&R->cv);
      pthread_mutex_destroy(&R->mu);
      return o3m_err_set(e, O3M_ENOMEM, "replay: cannot start the second thread");
    }
    R->threaded = 1;
  }
  return O3M_OK;
}

typedef struct progress {
  int on, printed;
  double t0, last;
} progress;

static void progress_show(progress *p, eval_reader *rd, uint64_t events, long long limit,
                          int final) {
  double t = o3m_clock_s();
  if (!p->on || (!final && t - p->last < 0.5)) return;
  p->last = t;
  double el = t - p->t0;
  uint64_t rows = events + eval_reader_skipped(rd);
  double rate = el > 0 ? (double)rows / el : 0;
  long long size = eval_reader_size(rd), got = eval_reader_bytes_read(rd);
  double eta = -1;
  if (limit > 0 && el > 0 && events > 0)
    eta = (double)(limit - (long long)events) / ((double)events / el);
  else if (size > 0 && got > 0 && el > 0)
    eta = (double)(size - got) / ((double)got / el);
  char etas[32] = "";
  if (eta >= 0 && !final) snprintf(etas, sizeof etas, "  ETA %.0f s", eta);
  fprintf(stderr, "\rreplay: %llu rows (%llu used)  %.0f rows/s  %.1f s%s      ",
          (unsigned long long)rows, (unsigned long long)events, rate, el, etas);
  if (final) fputc('\n', stderr);
  fflush(stderr);
  p->printed = 1;
}

/* Reads up to BATCH events into b. Returns the count (0 at the end) or a
 * negative code. */
static int fill(replay *R, eval_reader *rd, batch *b, uint64_t *events, long long limit,
                progress *pg, o3m_err *e) {
  b->n = 0;
  while (b->n < BATCH && (limit <= 0 || (long long)*events < limit)) {
    eval_event ev;
    int rc = eval_reader_next(rd, &ev, e);
    if (rc < 0) return rc;
    if (rc == 0) break;
    int t = b->n++;
    b->arm[t] = ev.arm;
    b->reward[t] = ev.reward;
    b->line[t] = ev.line;
    double *row = b->data + (size_t)t * R->stride;
    memcpy(row, R->split ? ev.w : ev.X, sizeof(double) * R->stride);
    eval_whiten_apply(R->cfg->whiten, R->split ? 1 : R->K, row);
    (*events)++;
    if ((*events & 0x3fff) == 0) progress_show(pg, rd, *events, limit, 0);
  }
  return b->n;
}

/* Keeps every other point of res->curve (the 2nd, 4th, ...: those on a grid
 * of twice the stride). */
static void curve_thin(eval_replay_result *res) {
  int n = 0;
  for (int i = 1; i < res->n_curve; i += 2) res->curve[n++] = res->curve[i];
  res->n_curve = n;
}

/* Appends the point after `events` rows to res->curve (see
 * EVAL_REPLAY_CURVE_MAX), thinning it first when it is full. */
static void curve_add(eval_replay_result *res, const replay *R, uint64_t events) {
  if (res->n_curve == EVAL_REPLAY_CURVE_MAX) curve_thin(res);
  eval_replay_point *p = &res->curve[res->n_curve++];
  memset(p, 0, sizeof *p);
  p->events = events;
  p->central = R->central.tally;
  p->federated = R->fed.tally;
  p->partial = R->partial.tally;
  for (int i = 0; i < R->cfg->n_dp; i++) p->dp[i] = R->dp[i].tally;
  for (int s = 0; s < R->cfg->n_random; s++) {
    p->random.matched += R->random[s].matched;
    p->random.clicks += R->random[s].clicks;
  }
}

int eval_replay_run(eval_reader *rd, const eval_replay_config *cfg, eval_replay_result *res,
                    o3m_err *e) {
  memset(res, 0, sizeof *res);
  replay R;
  int rc = replay_init(&R, rd, cfg, e);
  res->variants = cfg->variants;
  res->K = R.K;
  res->d = R.d;
  res->partial_d = cfg->part.m >= 1 ? cfg->part.dims[0] : 0;
  res->n_random = cfg->n_random;
  if (rc) {
    replay_free(&R);
    return rc;
  }
  double cpu0 = thread_cpu();
  progress pg = {cfg->progress, 0, o3m_clock_s(), o3m_clock_s()};
  uint64_t events = 0, stride = BATCH, next_mark = BATCH;
  int cur = 0;
  rc = fill(&R, rd, &R.b[cur], &events, cfg->limit, &pg, e);
  while (rc > 0) {
    batch *b = &R.b[cur];
    if (R.threaded) job_post(&R, cur);
    run_random(&R, b);
    rc = run_learners(&R, R.threaded ? MAIN_LEARNERS : EVAL_REPLAY_ALL | REPLAY_DP, b, e);
    int next = 0;
    if (!rc) next = fill(&R, rd, &R.b[1 - cur], &events, cfg->limit, &pg, e);
    if (R.threaded) {
      job_wait(&R);
      if (!rc && R.job_rc) {
        rc = R.job_rc;
        if (e) *e = R.job_err;
      }
    }
    if (rc) break;
    if ((cfg->variants & EVAL_REPLAY_CENTRAL) && (cfg->variants & EVAL_REPLAY_FEDERATED))
      for (int t = 0; t < b->n; t++) res->agree += b->central[t] == b->fed[t];
    res->events += (uint64_t)b->n;
    if (res->events >= next_mark && res->n_curve == EVAL_REPLAY_CURVE_MAX) {
      curve_thin(res);
      stride *= 2;
      next_mark = res->curve[res->n_curve - 1].events + stride;
    }
    if (res->events >= next_mark) {
      curve_add(res, &R, res->events);
      next_mark = res->events + stride;
    }
    rc = next;
    cur = 1 - cur;
  }
  if (res->n_curve == 0 || res->curve[res->n_curve - 1].events != res->events)
    curve_add(res, &R, res->events);
  progress_show(&pg, rd, res->events, cfg->limit, 1);
  res->seconds = o3m_clock_s() - pg.t0;
  res->cpu_main = thread_cpu() - cpu0;
  res->skipped = eval_reader_skipped(rd);
  res->central = R.central.tally;
  res->federated = R.fed.tally;
  res->partial = R.partial.tally;
  for (int s = 0; s < cfg->n_random; s++) res->random[s] = R.random[s];
  res->n_dp = cfg->n_dp;
  for (int i = 0; i < cfg->n_dp; i++) {
    res->dp_eps[i] = cfg->dp_eps[i];
    res->dp_sigma[i] = bl_dp_sigma(R.dpm[i], R.K);
    res->dp[i] = R.dp[i].tally;
  }
  int threaded = R.threaded;
  replay_free(&R); /* joins the second thread, which records its CPU time */
  res->cpu_worker = threaded ? R.worker_cpu : 0;
  return rc < 0 ? rc : O3M_OK;
}

/* ---- report ---- */

static void fmt(char *buf, size_t n, const char *f, double v) {
  if (isnan(v)) snprintf(buf, n, "n/a");
  else snprintf(buf, n, f, v);
}

static void print_row(FILE *f, const eval_replay_result *res, const char *name,
                      const eval_replay_tally *t) {
  eval_replay_rel r;
  eval_replay_relative(res, t, &r);
  char ctr[32], rel[32], sd[32], lo[32], hi[32];
  fmt(ctr, sizeof ctr, "%.5f", eval_replay_ctr(t));
  fmt(rel, sizeof rel, "%.4f", r.rel);
  fmt(sd, sizeof sd, "%.4f", r.std);
  fmt(lo, sizeof lo, "%.4f", r.min);
  fmt(hi, sizeof hi, "%.4f", r.max);
  fprintf(f, "%-22s %10llu %10.0f %9s %9s %9s %9s %9s\n", name,
          (unsigned long long)t->matched, t->clicks, ctr, rel, sd, lo, hi);
}

void eval_replay_print(FILE *f, const eval_replay_result *res) {
  fprintf(f, "%-22s %10s %10s %9s %9s %9s %9s %9s\n", "variant", "matched", "clicks", "CTR",
          "rel.CTR", "rel.std", "rel.min", "rel.max");
  char name[64];
  if (res->variants & EVAL_REPLAY_CENTRAL) {
    snprintf(name, sizeof name, "central (d=%d)", res->d);
    print_row(f, res, name, &res->central);
  }
  if (res->variants & EVAL_REPLAY_FEDERATED) {
    snprintf(name, sizeof name, "federated (d=%d)", res->d);
    print_row(f, res, name, &res->federated);
  }
  if (res->variants & EVAL_REPLAY_PARTIAL) {
    snprintf(name, sizeof name, "partial-local (d=%d)", res->partial_d);
    print_row(f, res, name, &res->partial);
  }
  for (int i = 0; i < res->n_dp; i++) {
    snprintf(name, sizeof name, "dp eps=%g (d=%d)", res->dp_eps[i], res->d);
    print_row(f, res, name, &res->dp[i]);
  }
  /* The random baseline: mean over seeds, spread of its own CTR / mean. */
  double m, c, mean_ctr;
  eval_replay_rel rr;
  eval_replay_random_summary(res, &m, &c, &mean_ctr, &rr);
  int n = res->n_random;
  char ctr[32], sd[32], los[32], his[32], rel[32];
  fmt(ctr, sizeof ctr, "%.5f", mean_ctr);
  fmt(rel, sizeof rel, "%.4f", rr.rel);
  fmt(sd, sizeof sd, "%.4f", rr.std);
  fmt(los, sizeof los, "%.4f", rr.min);
  fmt(his, sizeof his, "%.4f", rr.max);
  snprintf(name, sizeof name, "random (mean of %d)", n);
  fprintf(f, "%-22s %10.1f %10.1f %9s %9s %9s %9s %9s\n", name, m, c, ctr, rel, sd, los, his);
  if (c < 10)
    fprintf(f, "note: the random baseline saw %.1f clicks per seed on average; with so few, "
               "relative CTR is noise (n/a: a seed without clicks)\n", c);
  if ((res->variants & EVAL_REPLAY_CENTRAL) && (res->variants & EVAL_REPLAY_FEDERATED))
    fprintf(f, "decision agreement federated vs central: %.2f%% of %llu rows (%llu differ)\n",
            res->events ? 100.0 * (double)res->agree / (double)res->events : 100.0,
            (unsigned long long)res->events, (unsigned long long)(res->events - res->agree));
  double sec = res->seconds > 0 ? res->seconds : NAN;
  fprintf(f, "rows used %llu, skipped %llu; %.2f s: %.0f input rows/s (%.0f used rows/s)\n",
          (unsigned long long)res->events, (unsigned long long)res->skipped, res->seconds,
          (double)(res->events + res->skipped) / sec, (double)res->events / sec);
  for (int i = 0; i < res->n_dp; i++)
    fprintf(f, "%s dp eps=%g: the passive parties' columns get N(0, %.4g^2) per entry per event\n"
               "  (zCDP over the budget's events, per party); O3M's decisions cost no privacy noise\n",
            i ? "     " : "note:", res->dp_eps[i], res->dp_sigma[i]);
  if (res->cpu_worker > 0)
    fprintf(f, "cpu: %.2f s reading + federated + random, %.2f s central + partial (second "
               "thread)\n", res->cpu_main, res->cpu_worker);
  else
    fprintf(f, "cpu: %.2f s\n", res->cpu_main);
}

/* ---- the subcommand ---- */

enum {
  O_FORMAT, O_INPUT, O_ITEMS, O_OBDPOS, O_OBDB, O_SIN, O_SOUT, O_SROWS, O_ARMS, O_TR, O_LIMIT,
  O_PARTIES, O_RATIO, O_MSEED, O_AGG, O_ALGO, O_MODEL, O_ALPHA, O_LAMBDA, O_V, O_SEED, O_NRAND,
  O_RSEED, O_VARIANTS, O_THREADS, O_WHITEN, O_OUT_DIR, O_RUN_NAME, O_NO_FILES, O_NO_PLOTS,
  O_PLOT_FORMAT, O_DP_EPS, O_DP_DELTA, O_DP_CLIP, O_DP_T, O_COUNT
};
static const o3m_cli_option replay_options[] = {
    [O_FORMAT] = {"format", "F", "data: news | obd | criteo-tsv | criteo-csv"},
    [O_INPUT] = {"input", "FILE", "data: the log ('-' = stdin; criteo then needs --stats-in)"},
    [O_ITEMS] = {"item-context", "FILE", "obd: item_context.csv (required for obd)"},
    [O_OBDPOS] = {"obd-position", "P", "obd: position used, 1..3, or 0 for all (default 1)"},
    [O_OBDB] = {"obd-user-buckets", "B",
                "obd: one-hot slots per user feature column, one per distinct value (default 16)"},
    [O_SIN] = {"stats-in", "FILE", "criteo: reuse preprocessing statistics"},
    [O_SOUT] = {"stats-out", "FILE", "criteo: write the statistics computed by this run"},
    [O_SROWS] = {"stats-rows", "N",
                 "criteo: compute statistics from the first N rows (default all)"},
    [O_ARMS] = {"criteo-arms", "N",
                "criteo: number of arms, the most frequent labels (default 40)"},
    [O_TR] = {"int-transform", "T", "criteo: raw (default, the paper) | log before min-max"},
    [O_LIMIT] = {"limit", "N", "data: use at most N events"},
    [O_PARTIES] = {"parties", "D1,D2,...",
                   "federation: column split (first = the active participant)"},
    [O_RATIO] = {"partial-ratio", "R",
                 "federation: split as [ceil(R d), d - ceil(R d)] (default 0.5)"},
    [O_MSEED] = {"mask-seed", "S", "federation: seed of the (evaluation-only) mask (default 7)"},
    [O_AGG] = {"aggregation", "secure|per-party",
               "federation: secure (default, as the daemons) or per-party"},
    [O_ALGO] = {"algo", "linucb|lints", "policy (default linucb)"},
    [O_MODEL] = {"model", "shared|disjoint", "policy model (default shared)"},
    [O_ALPHA] = {"alpha", "A", "LinUCB width (default 0.5; 0.6 for criteo, the paper's)"},
    [O_LAMBDA] = {"lambda", "L", "ridge (default 1)"},
    [O_V] = {"v", "V", "LinTS scale (default 0.01)"},
    [O_SEED] = {"seed", "S", "LinTS sampler seed (default 1)"},
    [O_NRAND] = {"random-seeds", "N", "random baseline runs (default 5)"},
    [O_RSEED] = {"random-seed", "S", "first seed of the random baseline (default 1000)"},
    [O_VARIANTS] = {"variants", "LIST", "any of central,federated,partial (default all three)"},
    [O_THREADS] = {"threads", "1|2", "run central+partial on a second thread (default 2)"},
    [O_WHITEN] = {"whiten", "all|none|J,..",
                  "run: parties (0 = AP) that whiten their columns, maps from the first 100000 "
                  "context rows (news, obd; default none)"},
    [O_OUT_DIR] = {"out-dir", "DIR", "output: where the result files go (eval-out/replay)"},
    [O_RUN_NAME] = {"run-name", "NAME",
                    "output: file name stem (replay_FORMAT_ALGO_MODEL); NAME.csv, NAME.json, "
                    "NAME_curve.csv and NAME_curve.png"},
    [O_NO_FILES] = {"no-files", NULL, "output: the stdout table only, no result files"},
    [O_NO_PLOTS] = {"no-plots", NULL, "output: result files without the curve plot"},
    [O_PLOT_FORMAT] = {"plot-format", "png,pdf,svg",
                       "output: curve plot formats, any of png, pdf and svg (png)"},
    [O_DP_EPS] = {"dp-eps", "E,..", "DP variants: epsilon per party over --dp-T events (none)"},
    [O_DP_DELTA] = {"dp-delta", "D", "DP variants' delta (default 1e-5)"},
    [O_DP_CLIP] = {"dp-clip", "C", "DP variants' L2 bound of a row of a party's block (default 1)"},
    [O_DP_T] = {"dp-T", "N", "events the DP budget covers (default --limit)"},
    [O_COUNT] = {NULL, NULL, NULL},
};
static const o3m_cli_spec replay_cli = {
    "o3m-eval replay", "--format news|obd|criteo-tsv|criteo-csv --input FILE [options]",
    "Li et al.'s replay estimator on logged data: central, federated (masked) and\n"
    "partial-local learners side by side, against a uniformly random policy; with\n"
    "--dp-eps also DP learners (Gaussian noise on the passive parties' columns).\n"
    "Writes the table to stdout and, per run, a CSV and a JSON of the results (with\n"
    "the configuration and the data file's SHA-256) and the CTR-over-rows curve\n"
    "(CSV and plot) to --out-dir.",
    replay_options, NULL};

/* "a,b" of positive epsilons into cfg->dp_eps. */
static int parse_dp_eps(const char *s, eval_replay_config *cfg) {
  int n = o3m_cli_parse_double_list(s, DBL_TRUE_MIN, DBL_MAX, cfg->dp_eps, EVAL_REPLAY_MAX_DP);
  cfg->n_dp = n < 1 ? 0 : n;
  return n < 1 ? -1 : 0;
}

static int parse_variants(const char *s, int *out) {
  int v = 0;
  char buf[128];
  snprintf(buf, sizeof buf, "%s", s);
  for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    if (!strcmp(t, "central")) v |= EVAL_REPLAY_CENTRAL;
    else if (!strcmp(t, "federated")) v |= EVAL_REPLAY_FEDERATED;
    else if (!strcmp(t, "partial")) v |= EVAL_REPLAY_PARTIAL;
    else return -1;
  }
  if (!v) return -1;
  *out = v;
  return 0;
}

/* The Criteo reader for the subcommand: statistics read (--stats-in) or
 * computed by a first pass (over --stats-rows rows, or all), optionally
 * written (--stats-out), then the reader. Reports each step on stdout.
 * Returns 0, a negative O3M code with e set, or CRITEO_USAGE after printing
 * a usage error. The statistics are heap-allocated (28 KB) and freed here;
 * the reader keeps its own copy. */
typedef struct criteo_args {
  const char *input;
  int csv;
  const char *stats_in, *stats_out;
  long long stats_rows;
  int arms;
  int have_tr;
  eval_criteo_transform tr;
} criteo_args;

#define CRITEO_USAGE 1

static int open_criteo(eval_reader **rd, const criteo_args *a, o3m_err *e) {
  eval_criteo_stats *st = malloc(sizeof *st);
  if (!st) return o3m_err_set(e, O3M_ENOMEM, "out of memory");
  int rc;
  double t0 = o3m_clock_s();
  if (a->stats_in) {
    rc = eval_criteo_stats_read(st, a->stats_in, e);
    if (!rc && a->have_tr && a->tr != st->transform) {
      fprintf(stderr, "replay: --int-transform %s contradicts %s (%s)\n",
              eval_criteo_transform_name(a->tr), a->stats_in,
              eval_criteo_transform_name(st->transform));
      rc = CRITEO_USAGE;
    }
    if (!rc) printf("criteo statistics: read from %s (%lld rows)\n", a->stats_in, st->rows);
  } else if (!strcmp(a->input, "-")) {
    fprintf(stderr, "replay: criteo from stdin needs --stats-in (two passes otherwise)\n");
    rc = CRITEO_USAGE;
  } else {
    rc = eval_criteo_scan(a->input, a->csv, a->stats_rows, a->tr, a->arms, st, e);
    if (!rc)
      printf("criteo statistics: first pass over %lld rows in %.2f s (%s)\n", st->rows,
             o3m_clock_s() - t0, a->stats_rows ? "a prefix, --stats-rows" : "the whole file");
  }
  if (!rc && a->stats_out) {
    rc = eval_criteo_stats_write(st, a->stats_out, e);
    if (!rc) printf("criteo statistics: written to %s\n", a->stats_out);
  }
  if (!rc) {
    long long cov = 0;
    for (int k = 0; k < st->n_arms; k++) cov += st->arm_rows[k];
    printf("criteo arms: %d labels cover %.1f%% of the statistics rows (CTR %.4f overall)\n",
           st->n_arms, 100.0 * (double)cov / (double)st->rows,
           (double)st->clicks / (double)st->rows);
    rc = eval_reader_open_criteo(rd, a->input, a->csv, st, e);
  }
  free(st);
  return rc;
}

int eval_replay_whiten_calibrate(eval_reader *rd, const o3m_partition *part, const char *spec,
                            long long limit, eval_whiten **out, o3m_err *e) {
  unsigned char on[O3M_MAX_PARTIES];
  int rc = eval_whiten_parse(spec, part, on, e);
  if (rc) return rc;
  const long K = eval_reader_arms(rd), d = eval_reader_dim(rd);
  long cap = EVAL_REPLAY_WHITEN_ROWS / K * K, n = 0;
  if (cap < K) cap = K;
  double *X = malloc(sizeof *X * (size_t)cap * (size_t)d);
  if (!X) return o3m_err_set(e, O3M_ENOMEM, "--whiten: out of memory");
  eval_event ev;
  while (n + K <= cap && (limit <= 0 || n / K < limit) && (rc = eval_reader_next(rd, &ev, e)) > 0) {
    memcpy(X + (size_t)n * (size_t)d, ev.X, sizeof *X * (size_t)(K * d));
    n += K;
  }
  if (rc >= 0) rc = eval_whiten_create(out, part, on, n, X, e);
  free(X);
  return rc;
}

int eval_replay_main(int argc, char **argv) {
  eval_replay_config cfg;
  eval_replay_config_default(&cfg);
  cfg.threads = 2;
  eval_obd_options obd;
  eval_obd_options_default(&obd);
  eval_format fmt_ = 0;
  const char *input = NULL, *items = NULL, *stats_in = NULL, *stats_out = NULL;
  const char *parties = NULL, *whiten = NULL;
  const char *out_dir = "eval-out/replay", *run_name = NULL;
  int files = 1, plots = 1, formats = EVAL_PLOT_PNG;
  long long stats_rows = 0, arms = EVAL_CRITEO_DEFAULT_ARMS, ll = 0;
  double ratio = 0.5;
  int have_ratio = 0, have_alpha = 0, have_tr = 0;
  eval_criteo_transform tr = EVAL_CRITEO_INT_RAW;
  o3m_cli cl;
  o3m_cli_begin(&cl, &replay_cli, argc, argv);
  const char *a;
  for (int c; (c = o3m_cli_next(&cl, &a)) != O3M_CLI_END;) {
    int bad = 0;
    switch (c) {
      case O3M_CLI_STOP: return cl.exit_code;
      case O_FORMAT: bad = eval_format_parse(a, &fmt_) != 0; break;
      case O_INPUT: input = a; break;
      case O_ITEMS: items = a; break;
      case O_OBDPOS: bad = o3m_cli_parse_long(a, 0, 1000, &ll); obd.position = (int)ll; break;
      case O_OBDB: bad = o3m_cli_parse_long(a, 1, 4096, &ll); obd.user_buckets = (int)ll; break;
      case O_SIN: stats_in = a; break;
      case O_SOUT: stats_out = a; break;
      case O_SROWS: bad = o3m_cli_parse_long(a, 1, LLONG_MAX, &stats_rows); break;
      case O_ARMS: bad = o3m_cli_parse_long(a, 1, EVAL_CRITEO_MAX_ARMS, &arms); break;
      case O_TR: bad = eval_criteo_transform_parse(a, &tr) != 0; have_tr = 1; break;
      case O_LIMIT: bad = o3m_cli_parse_long(a, 1, LLONG_MAX, &cfg.limit); break;
      case O_PARTIES: parties = a; break;
      case O_RATIO: bad = o3m_cli_parse_double(a, -DBL_MAX, DBL_MAX, &ratio) || !(ratio > 0 && ratio <= 1); have_ratio = 1; break;
      case O_MSEED: bad = o3m_cli_parse_long(a, LLONG_MIN, LLONG_MAX, &ll); cfg.mask_seed = (uint64_t)ll; break;
      case O_AGG: {
        eval_aggregation g;
        bad = eval_aggregation_parse(a, &g) != 0;
        if (!bad) cfg.aggregation = (int)g;
        break;
      }
      case O_ALGO: bad = o3m_algo_parse(a, &cfg.policy.algo) != 0; break;
      case O_MODEL: bad = o3m_model_parse(a, &cfg.policy.model) != 0; break;
      case O_ALPHA: bad = o3m_cli_parse_double(a, -DBL_MAX, DBL_MAX, &cfg.policy.alpha) || cfg.policy.alpha < 0; have_alpha = 1; break;
      case O_LAMBDA: bad = o3m_cli_parse_double(a, -DBL_MAX, DBL_MAX, &cfg.policy.lambda) || !(cfg.policy.lambda > 0); break;
      case O_V: bad = o3m_cli_parse_double(a, -DBL_MAX, DBL_MAX, &cfg.policy.v) || cfg.policy.v < 0; break;
      case O_SEED: bad = o3m_cli_parse_long(a, LLONG_MIN, LLONG_MAX, &ll); cfg.policy.seed = (uint64_t)ll; break;
      case O_NRAND: bad = o3m_cli_parse_long(a, 1, EVAL_REPLAY_MAX_RANDOM, &ll); cfg.n_random = (int)ll; break;
      case O_RSEED: bad = o3m_cli_parse_long(a, LLONG_MIN, LLONG_MAX, &ll); cfg.random_seed = (uint64_t)ll; break;
      case O_VARIANTS: bad = parse_variants(a, &cfg.variants) != 0; break;
      case O_THREADS: bad = o3m_cli_parse_long(a, 1, 2, &ll); cfg.threads = (int)ll; break;
      case O_WHITEN: whiten = a; break;
      case O_OUT_DIR: out_dir = a; break;
      case O_RUN_NAME: bad = !*a || strchr(a, '/') != NULL; run_name = a; break;
      case O_NO_FILES: files = 0; break;
      case O_NO_PLOTS: plots = 0; break;
      case O_PLOT_FORMAT: bad = eval_plot_formats_parse(a, &formats, NULL) != 0; break;
      case O_DP_EPS: bad = parse_dp_eps(a, &cfg) != 0; break;
      case O_DP_DELTA: bad = o3m_cli_parse_double(a, -DBL_MAX, DBL_MAX, &cfg.dp_delta) || !(cfg.dp_delta > 0 && cfg.dp_delta < 1); break;
      case O_DP_CLIP: bad = o3m_cli_parse_double(a, -DBL_MAX, DBL_MAX, &cfg.dp_clip) || !(cfg.dp_clip > 0); break;
      case O_DP_T: bad = o3m_cli_parse_long(a, 1, LLONG_MAX, &cfg.dp_T); break;
    }
    if (bad) {
      fprintf(stderr, "replay: bad value '%s' for --%s\n", a, replay_options[c].name);
      return 2;
    }
  }
  if (o3m_cli_operands(&cl) < argc)
    return o3m_cli_usage_error(&replay_cli, "unexpected argument '%s'",
                               argv[o3m_cli_operands(&cl)]);
  if (!fmt_ || !input) {
    fprintf(stderr, "replay: --format and --input are required (see --help)\n");
    return 2;
  }
  if (parties && have_ratio) {
    fprintf(stderr, "replay: give --parties or --partial-ratio, not both\n");
    return 2;
  }
  if (fmt_ == EVAL_FORMAT_OBD && !items) {
    fprintf(stderr, "replay: obd needs --item-context (item_context.csv)\n");
    return 2;
  }
  if (cfg.n_dp > 0 && cfg.dp_T < 1) cfg.dp_T = cfg.limit;
  if (cfg.n_dp > 0 && cfg.dp_T < 1) {
    fprintf(stderr, "replay: --dp-eps needs --dp-T or --limit (the events the budget covers)\n");
    return 2;
  }
  int criteo = fmt_ == EVAL_FORMAT_CRITEO_TSV || fmt_ == EVAL_FORMAT_CRITEO_CSV;
  if (criteo && !have_alpha) cfg.policy.alpha = 0.6;
  if (whiten && (criteo || strcmp(input, "-") == 0)) {
    fprintf(stderr, "replay: --whiten reads the file twice: news or obd from a file only\n");
    return 2;
  }

  o3m_err err;
  o3m_err_clear(&err);
  eval_reader *rd = NULL;
  int rc = 0;
  switch (fmt_) {
    case EVAL_FORMAT_NEWS: rc = eval_reader_open_news(&rd, input, &err); break;
    case EVAL_FORMAT_OBD: rc = eval_reader_open_obd(&rd, input, items, &obd, &err); break;
    case EVAL_FORMAT_CRITEO_TSV:
    case EVAL_FORMAT_CRITEO_CSV: {
      criteo_args ca = {input, fmt_ == EVAL_FORMAT_CRITEO_CSV, stats_in, stats_out, stats_rows,
                        (int)arms, have_tr, tr};
      rc = open_criteo(&rd, &ca, &err);
      if (rc == CRITEO_USAGE) return 2;
      break;
    }
  }
  if (rc) {
    fprintf(stderr, "replay: %s\n", o3m_err_message(&err));
    return 1;
  }
  int d = eval_reader_dim(rd);
  if (parties) {
    rc = o3m_partition_parse(&cfg.part, parties, &err);
    if (!rc && cfg.part.d != d) {
      fprintf(stderr, "replay: --parties sums to %d, the data has d = %d\n", cfg.part.d, d);
      eval_reader_destroy(rd);
      return 2;
    }
  } else {
    int d1 = (int)ceil(ratio * d - 1e-9);
    if (d1 < 1) d1 = 1;
    if (d1 > d) d1 = d;
    int dims[2] = {d1, d - d1};
    rc = o3m_partition_from_dims(&cfg.part, d1 == d ? 1 : 2, dims, &err);
  }
  if (rc) {
    fprintf(stderr, "replay: --parties: %s\n", o3m_err_message(&err));
    eval_reader_destroy(rd);
    return 2;
  }
  cfg.progress = isatty(STDERR_FILENO);
  if (whiten) {
    eval_reader *cal = NULL;
    rc = fmt_ == EVAL_FORMAT_NEWS ? eval_reader_open_news(&cal, input, &err)
                                  : eval_reader_open_obd(&cal, input, items, &obd, &err);
    if (!rc) rc = eval_replay_whiten_calibrate(cal, &cfg.part, whiten, cfg.limit, &cfg.whiten, &err);
    eval_reader_destroy(cal);
    if (rc) {
      fprintf(stderr, "replay: %s\n", o3m_err_message(&err));
      eval_reader_destroy(rd);
      return rc == O3M_EINVAL ? 2 : 1;
    }
  }

  printf("data: %s\n", eval_reader_describe(rd));
  printf("parties:");
  for (int j = 0; j < cfg.part.m; j++) printf("%s%d", j ? "," : " ", cfg.part.dims[j]);
  printf(" (M = %d; partial-local uses the first %d columns)\n", cfg.part.m, cfg.part.dims[0]);
  if (whiten) printf("whitened parties: %s (maps from the first context rows)\n", whiten);
  printf("policy: %s %s, alpha %g, lambda %g, v %g, seed %llu; random baseline: %d seeds\n",
         o3m_algo_name(cfg.policy.algo), o3m_model_name(cfg.policy.model), cfg.policy.alpha,
         cfg.policy.lambda, cfg.policy.v, (unsigned long long)cfg.policy.seed, cfg.n_random);
  fflush(stdout);

  eval_replay_result res;
  rc = eval_replay_run(rd, &cfg, &res, &err);
  eval_whiten_destroy(cfg.whiten);
  if (!rc && res.events == 0) {
    fprintf(stderr, "replay: no usable events in %s (%llu rows skipped: %s)\n", input,
            (unsigned long long)eval_reader_skipped(rd), eval_reader_skip_reason(rd));
    eval_reader_destroy(rd);
    return 1;
  }
  if (!rc && res.skipped) printf("skipped rows: %llu (%s)\n",
                                 (unsigned long long)res.skipped, eval_reader_skip_reason(rd));
  eval_reader_destroy(rd);
  if (rc) {
    fprintf(stderr, "replay: %s\n", o3m_err_message(&err));
    return 1;
  }
  eval_replay_print(stdout, &res);
  if (!files) return fflush(stdout) ? 1 : 0;

  /* The result files: what the table says, the configuration, the data's checksums. */
  eval_replay_info info;
  memset(&info, 0, sizeof info);
  info.format = eval_format_name(fmt_);
  info.input = input;
  info.item_context = items;
  info.whiten = whiten;
  char stem[256];
  if (run_name) snprintf(stem, sizeof stem, "%s", run_name);
  else snprintf(stem, sizeof stem, "replay_%s_%s_%s", info.format,
                o3m_algo_name(cfg.policy.algo), o3m_model_name(cfg.policy.model));
#define INFO_OPT(name, ...)                                                                 \
  do {                                                                                      \
    info.opt_name[info.n_opts] = name;                                                      \
    snprintf(info.opt_value[info.n_opts], sizeof info.opt_value[0], __VA_ARGS__);           \
    info.n_opts++;                                                                          \
  } while (0)
  if (fmt_ == EVAL_FORMAT_OBD) {
    INFO_OPT("obd_position", "%d", obd.position);
    INFO_OPT("obd_user_buckets", "%d", obd.user_buckets);
  }
  if (criteo) {
    INFO_OPT("criteo_arms", "%lld", arms);
    INFO_OPT("int_transform", "%s", eval_criteo_transform_name(tr));
    if (stats_in) INFO_OPT("stats_in", "%s", stats_in);
    if (stats_rows) INFO_OPT("stats_rows", "%lld", stats_rows);
  }
#undef INFO_OPT
  rc = strcmp(input, "-") ? eval_replay_sha256_file(input, info.input_sha256, &err) : 0;
  if (!rc && items) rc = eval_replay_sha256_file(items, info.item_sha256, &err);
  if (!rc) rc = eval_replay_write_results(out_dir, stem, &res, &cfg, &info, &err);
  if (rc) {
    fprintf(stderr, "replay: %s\n", o3m_err_message(&err));
    return 1;
  }
  printf("results in %s: %s.csv %s.json %s_curve.csv (%d points)\n", out_dir, stem, stem, stem,
         res.n_curve);
  if (plots && (rc = eval_replay_plot_curve(out_dir, stem, &res, &cfg, &info, formats, stdout,
                                            &err))) {
    fprintf(stderr, "replay: %s\n", o3m_err_message(&err));
    if (rc != O3M_ENOTFOUND) return 1;
  }
  return fflush(stdout) ? 1 : 0;
}