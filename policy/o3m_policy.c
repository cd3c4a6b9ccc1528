/* o3m_policy.c -- LinUCB and linear Thompson sampling over ridge statistics.
 *
 * State per model (one model when shared, one per arm when disjoint):
 *   Lambda  lambda I + sum x x^T, exact (upper triangle), used to refactorize;
 *           the newest observations are held as rows and added in blocks
 *           (see "Lambda in blocks" below);
 *   u       sum r x;
 *   theta   Lambda^{-1} u;
 *   and either Ainv = Lambda^{-1} (updated by Sherman-Morrison) or the
 *   Cholesky factor U with Lambda = U^T U (updated by a rank-one cholupdate).
 *
 * Which of Ainv or U a model keeps depends on what its scoring needs:
 *   shared LinUCB   Ainv: all K widths from one dtrmm with its upper
 *                   triangle (see half_quadratic_forms).
 *   shared LinTS    U: mu = theta + v U^{-1} z with z ~ N(0, I_d), one
 *                   triangular solve, then scores X mu.
 *   disjoint both   Ainv per arm. For LinTS, candidate k's score depends only
 *                   on its own arm's mu_a, and the arms' draws are
 *                   independent, so x^T mu_a ~ N(x^T theta_a, v^2 x^T Ainv_a x)
 *                   is drawn directly as a scalar: the same joint
 *                   distribution of scores as drawing each mu_a, at O(1)
 *                   random numbers per candidate instead of O(d).
 *
 * Lambda in blocks: Lambda is read only to refactorize and by the health
 * check, never to choose, so an update does not add x x^T to it at once.
 * It holds x as a row of a small per-model block and adds a full block of
 * LAMBDA_BLOCK rows with one dsyrk, which costs a third to a fifth of as
 * many dsyr calls (o3m_blas.h). The block is flushed whenever Lambda is
 * needed whole: before every refactorization, and in a scratch copy for the
 * deep health check. The held rows are part of the state image, so the
 * flushes happen at the same updates after a restart and recovery stays bit
 * for bit exact.
 *
 * Paired triangles (disjoint models): scoring reads the inverse of every
 * arm among the candidates, and at d = 100 ten arms' upper triangles
 * already fill most of a 512 KiB L2 cache when each sits in its own d x d
 * array (the untouched lower halves share cache lines and prefetches with
 * them). The arms' inverses are therefore kept in pairs: arm 2q in the
 * upper triangle of the array of model 2q, arm 2q + 1 in the lower
 * triangle of rows 1..d, which starts d doubles later and ends in the first
 * row of model 2q + 1's array (o3m_uplo in o3m_blas.h). Every element of
 * the pair's memory is then used. Measured at d = 100, ten arms: ten
 * dsymv calls took 13.3 instead of 15.4 us. The state image holds the
 * factor arrays as they are in memory, so its layout is this one too.
 * fac_of() is the one place that knows it.
 *
 * The chosen candidate's w (disjoint models): choosing computes w_k =
 * Ainv_a x_k for every candidate, and the update that usually follows
 * (o3m-eval, replay, a reward arriving before the next decision) needs w =
 * Ainv_a x again for the chosen one. choose keeps a copy of the chosen
 * candidate's x, arm and w; update uses that w instead of a second dsymv
 * when its arm and x (compared bit for bit) are the kept ones and nothing
 * has changed the state in between (any update, import, reset or
 * refactorization forgets it). Both products are the same dsymv call on the
 * same Ainv and x, so the update is bit for bit the one it would be
 * otherwise; recovery, which replays updates without choosing, stays exact.
 * test_policy pins this, including x at other addresses than the
 * candidate's row.
 *
 * Why masking changes nothing: with x~ = Q x and Q orthogonal, Lambda~ =
 * Q Lambda Q^T, Ainv~ = Q Ainv Q^T, theta~ = Q theta, so x~^T theta~ =
 * x^T theta and x~^T Ainv~ x~ = x^T Ainv x exactly, and in floating point up
 * to rounding. LinUCB decisions are therefore identical, given the tie rule
 * in o3m_policy.h. For shared LinTS the factor of Q Lambda Q^T is not Q U, so
 * the same z gives a different mu~; the sampled score vector has the same
 * distribution N(X theta, v^2 X Lambda^{-1} X^T) either way, so decisions
 * are equal in distribution, not draw by draw. Disjoint LinTS draws scalars
 * from the per-candidate mean and variance, which are invariant, so with the
 * same seed its decisions are equal draw by draw as well. */
#include "o3m_policy.h"
#include "o3m_alloc.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "o3m_assert.h"
#include "o3m_blas.h"
#include "o3m_limits.h"
#include "o3m_policy_impl.h"
#include "o3m_rank1.h"
#include "o3m_rng.h"

void o3m_policy_config_default(o3m_policy_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->algo = O3M_ALGO_LINUCB;
  cfg->model = O3M_MODEL_SHARED;
  cfg->max_candidates = O3M_DEFAULT_MAX_CANDIDATES;
  cfg->lambda = O3M_DEFAULT_LAMBDA;
  cfg->alpha = O3M_DEFAULT_ALPHA;
  cfg->v = O3M_DEFAULT_V;
  cfg->seed = O3M_DEFAULT_SEED;
  cfg->refactor_every = O3M_DEFAULT_REFACTOR_EVERY;
}

int o3m_algo_parse(const char *s, o3m_algo *out) {
  if (s && !strcmp(s, "linucb")) *out = O3M_ALGO_LINUCB;
  else if (s && !strcmp(s, "lints")) *out = O3M_ALGO_LINTS;
  else return O3M_EINVAL;
  return O3M_OK;
}

int o3m_model_parse(const char *s, o3m_model_kind *out) {
  if (s && !strcmp(s, "shared")) *out = O3M_MODEL_SHARED;
  else if (s && !strcmp(s, "disjoint")) *out = O3M_MODEL_DISJOINT;
  else return O3M_EINVAL;
  return O3M_OK;
}

const char *o3m_algo_name(o3m_algo a) { return a == O3M_ALGO_LINTS ? "lints" : "linucb"; }
const char *o3m_model_name(o3m_model_kind m) {
  return m == O3M_MODEL_DISJOINT ? "disjoint" : "shared";
}

static int validate(const o3m_policy_config *c, o3m_err *e) {
  if (c->algo != O3M_ALGO_LINUCB && c->algo != O3M_ALGO_LINTS)
    return o3m_err_set(e, O3M_EINVAL, "policy: algo must be linucb or lints");
  if (c->model != O3M_MODEL_SHARED && c->model != O3M_MODEL_DISJOINT)
    return o3m_err_set(e, O3M_EINVAL, "policy: model must be shared or disjoint");
  if (c->d < 1 || c->d > O3M_MAX_DIM)
    return o3m_err_set(e, O3M_EINVAL, "policy: d = %d, expected 1..%d", c->d, O3M_MAX_DIM);
  if (c->model == O3M_MODEL_DISJOINT && (c->n_arms < 1 || c->n_arms > O3M_MAX_ARMS))
    return o3m_err_set(e, O3M_EINVAL, "policy: n_arms = %d, expected 1..%d for disjoint",
                       c->n_arms, O3M_MAX_ARMS);
  if (c->max_candidates < 1 || c->max_candidates > O3M_MAX_CANDIDATES)
    return o3m_err_set(e, O3M_EINVAL, "policy: max_candidates = %d, expected 1..%d",
                       c->max_candidates, O3M_MAX_CANDIDATES);
  if (!(c->lambda > 0) || !isfinite(c->lambda))
    return o3m_err_set(e, O3M_EINVAL, "policy: lambda = %g, expected a finite value > 0",
                       c->lambda);
  if (!(c->alpha >= 0) || !isfinite(c->alpha))
    return o3m_err_set(e, O3M_EINVAL, "policy: alpha = %g, expected a finite value >= 0",
                       c->alpha);
  if (!(c->v >= 0) || !isfinite(c->v))
    return o3m_err_set(e, O3M_EINVAL, "policy: v = %g, expected a finite value >= 0", c->v);
  if (c->refactor_every < 1)
    return o3m_err_set(e, O3M_EINVAL, "policy: refactor_every = %d, expected >= 1",
                       c->refactor_every);
  return O3M_OK;
}

/* Adds model m's held rows to Lambda (one dsyrk) and empties the block. The
 * emptied rows are zeroed, so equal states have equal images. */
static void lambda_flush(o3m_policy *p, int m) {
  int n = p->n_held[m];
  if (n == 0) return;
  double *R = held_rows(p, m);
  o3m_syrk_t(p->d, n, 1.0, R, model_mat(p->lambda_m, p, m));
  memset(R, 0, sizeof(double) * (size_t)n * p->d);
  p->n_held[m] = 0;
}

/* See o3m_policy_impl.h. */
int o3m_policy__refactor(o3m_policy *p, int m) {
  int d = p->d;
  lambda_flush(p, m);
  p->since_refactor[m] = 0;
  double *L = model_mat(p->lambda_m, p, m);
  if (p->use_chol) return o3m_chol_factor(d, L, model_mat(p->fac, p, m));
  if (p->cfg.model == O3M_MODEL_SHARED) return o3m_spd_inverse(d, L, model_mat(p->fac, p, m));
  /* Disjoint: the whole inverse in scratch, then its triangle into the
   * pair (the other triangle belongs to the arm's partner). */
  int rc = o3m_spd_inverse(d, L, p->scratch);
  if (rc) return rc;
  fac_view f = fac_of(p, m);
  for (int i = 0; i < d; i++) {
    /* row i of the triangle: columns i..d-1 (upper) or 0..i (lower) */
    size_t lo = f.t == O3M_UPPER ? (size_t)i : 0;
    size_t n = f.t == O3M_UPPER ? (size_t)(d - i) : (size_t)i + 1;
    memcpy(f.a + (size_t)i * d + lo, p->scratch + (size_t)i * d + lo, sizeof(double) * n);
  }
  return O3M_OK;
}

/* See o3m_policy_impl.h. */
void o3m_policy__update_theta(o3m_policy *p, int m) {
  int d = p->d;
  double *th = p->theta + (size_t)m * d;
  const double *u = p->u + (size_t)m * d;
  fac_view f = fac_of(p, m);
  if (p->use_chol) {
    /* theta = U^{-1} U^{-T} u */
    o3m_copy(d, u, th);
    o3m_trsv_upper_t(d, f.a, th);
    o3m_trsv_upper(d, f.a, th);
  } else {
    /* theta = Ainv u */
    o3m_symv_tri(f.t, d, 1.0, f.a, u, 0.0, th);
  }
}

/* Sets every model to its prior, Lambda = lambda I (on zeroed statistics),
 * and its inverse or factor to match. lambda > 0 is checked at create, so
 * lambda I is positive definite and the refactorization cannot fail. */
static void set_prior(o3m_policy *p) {
  size_t d = (size_t)p->d;
  for (int m = 0; m < p->n_models; m++) {
    double *L = model_mat(p->lambda_m, p, m);
    for (size_t i = 0; i < d; i++) L[i * d + i] = p->cfg.lambda;
    int rc = o3m_policy__refactor(p, m);
    O3M_ASSERT(rc == O3M_OK);
  }
}

int o3m_policy_create(o3m_policy **out, const o3m_policy_config *cfg, o3m_err *e) {
  *out = NULL;
  int rc = validate(cfg, e);
  if (rc) return rc;
  o3m_policy *p = o3m_calloc(1, sizeof *p);
  if (!p) return o3m_err_set(e, O3M_ENOMEM, "policy: out of memory");
  p->cfg = *cfg;
  p->d = cfg->d;
  p->n_models = cfg->model == O3M_MODEL_SHARED ? 1 : cfg->n_arms;
  p->use_chol = cfg->model == O3M_MODEL_SHARED && cfg->algo == O3M_ALGO_LINTS;
  size_t d = (size_t)p->d, n = (size_t)p->n_models, kmax = (size_t)cfg->max_candidates;
  size_t zlen = d > kmax ? d : kmax;
  /* One call of o3m_policy_choose_batch scores up to batch_rows rows. */
  p->batch_rows = (int)(O3M_POLICY_BATCH_BYTES / (sizeof(double) * d));
  if (p->batch_rows < 1) p->batch_rows = 1;
  size_t rows = kmax > (size_t)p->batch_rows ? kmax : (size_t)p->batch_rows;
  p->lambda_m = o3m_calloc(n * d * d, sizeof(double));
  p->held = o3m_calloc(n * LAMBDA_BLOCK * d, sizeof(double));
  p->n_held = o3m_calloc(n, sizeof(int));
  p->fac = o3m_calloc(n * d * d, sizeof(double));
  if (cfg->model == O3M_MODEL_DISJOINT) p->scratch = o3m_malloc(d * d * sizeof(double));
  p->u = o3m_calloc(n * d, sizeof(double));
  p->theta = o3m_calloc(n * d, sizeof(double));
  p->since_refactor = o3m_calloc(n, sizeof(int));
  p->W = o3m_malloc(rows * d * sizeof(double));
  p->mean = o3m_malloc(rows * sizeof(double));
  p->var = o3m_malloc(rows * sizeof(double));
  p->score = o3m_malloc(rows * sizeof(double));
  if (p->use_chol) p->Z = o3m_malloc((size_t)O3M_POLICY_BATCH_ROUNDS * d * sizeof(double));
  p->z = o3m_malloc(zlen * sizeof(double));
  p->work = o3m_malloc(d * sizeof(double));
  p->kept_x = o3m_malloc(d * sizeof(double));
  p->kept_w = o3m_malloc(d * sizeof(double));
  p->kept_arm = -1;
  if (!p->lambda_m || !p->held || !p->n_held || !p->fac ||
      (cfg->model == O3M_MODEL_DISJOINT && !p->scratch) || !p->u || !p->theta ||
      !p->since_refactor || !p->W || !p->mean || !p->var || !p->score || !p->z || !p->work ||
      !p->kept_x || !p->kept_w || (p->use_chol && !p->Z)) {
    o3m_policy_destroy(p);
    return o3m_err_set(e, O3M_ENOMEM, "policy: out of memory for d = %zu, %zu models", d, n);
  }
  rc = o3m_rng_create_seeded_insecure(&p->rng, cfg->seed);
  if (rc) {
    o3m_policy_destroy(p);
    return o3m_err_set(e, rc, "policy: cannot create sampler");
  }
  set_prior(p);
  *out = p;
  return O3M_OK;
}

void o3m_policy_destroy(o3m_policy *p) {
  if (!p) return;
  o3m_rng_destroy(p->rng);
  o3m_free(p->lambda_m);
  o3m_free(p->held);
  o3m_free(p->n_held);
  o3m_free(p->fac);
  o3m_free(p->scratch);
  o3m_free(p->u);
  o3m_free(p->theta);
  o3m_free(p->since_refactor);
  o3m_free(p->W);
  o3m_free(p->mean);
  o3m_free(p->var);
  o3m_free(p->score);
  o3m_free(p->z);
  o3m_free(p->work);
  o3m_free(p->kept_x);
  o3m_free(p->kept_w);
  o3m_free(p->Z);
  o3m_free(p);
}

const o3m_policy_config *o3m_policy_config_of(const o3m_policy *p) { return &p->cfg; }
uint64_t o3m_policy_updates(const o3m_policy *p) { return p->updates; }
int o3m_policy_n_models(const o3m_policy *p) { return p->n_models; }

/* The contexts check of every choose: a NaN or an infinity anywhere makes
 * the sum of magnitudes non-finite, so one vectorized dasum (in chunks that
 * fit its int count) replaces n isfinite tests. The sum also overflows for
 * finite values near DBL_MAX; such contexts are refused as well (their
 * widths would overflow anyway). */
static int contexts_finite(const double *a, size_t n) {
  const size_t chunk = (size_t)1 << 30;
  double s = 0;
  for (size_t i = 0; i < n; i += chunk) s += o3m_asum((int)(n - i < chunk ? n - i : chunk), a + i);
  return isfinite(s);
}

static int check_inputs(const o3m_policy *p, int K, const double *X, const int *arms) {
  if (K < 1 || K > p->cfg.max_candidates) return O3M_EINVAL;
  if (p->cfg.model == O3M_MODEL_DISJOINT)
    for (int k = 0; k < K; k++) {
      int a = arms ? arms[k] : k;
      if (a < 0 || a >= p->n_models) return O3M_EINVAL;
    }
  if (!contexts_finite(X, (size_t)K * p->d)) return O3M_ENONFINITE;
  return O3M_OK;
}

/* W_k . x_k = x_k^T S x_k / 2 for every row k of W (K x d, holding X on
 * entry, overwritten), S symmetric (upper triangle used). With T the upper
 * triangle of S (diagonal included) and D its diagonal, x^T S x =
 * 2 x^T (T - D / 2) x, so one dtrmm with the upper triangle of S whose
 * diagonal is halved, W = X (T - D / 2), gives all K forms. The diagonal is halved in place for the call and put
 * back from a saved copy (save_diag, d doubles), so S is unchanged bit for
 * bit afterwards. The dtrmm does K d^2 / 2 multiply-adds where W = X S
 * (dsymm) does K d^2, and measured 0.5 to 0.8 of its time from K = 10 to
 * 1000 at d = 50 to 500. The rounding error is of the same order as the
 * dsymm's: both sum the same terms of x^T S x. */
static void half_quadratic_forms(int K, int d, double *S, double *W, double *save_diag) {
  for (int i = 0; i < d; i++) {
    save_diag[i] = S[(size_t)i * d + i];
    S[(size_t)i * d + i] = 0.5 * save_diag[i];
  }
  o3m_trmm_right_upper(K, d, S, W);
  for (int i = 0; i < d; i++) S[(size_t)i * d + i] = save_diag[i];
}

/* mean[k] = x_k^T theta, var[k] = x_k^T Lambda^{-1} x_k for all candidates. */
static void compute_stats(o3m_policy *p, int K, const double *X, const int *arms, double *mean,
                          double *var) {
  int d = p->d;
  if (p->cfg.model == O3M_MODEL_SHARED) {
    /* mean = X theta */
    o3m_gemv(K, d, 1.0, X, p->theta, 0.0, mean);
    if (p->use_chol) {
      /* W = X U^{-1}; var_k = ||W_k||^2 */
      memcpy(p->W, X, sizeof(double) * (size_t)K * d);
      o3m_trsm_right_upper(K, d, p->fac, p->W);
      for (int k = 0; k < K; k++) {
        const double *w = p->W + (size_t)k * d;
        var[k] = o3m_dot(d, w, w);
      }
    } else {
      /* var_k = x_k^T Ainv x_k = 2 W_k . x_k */
      memcpy(p->W, X, sizeof(double) * (size_t)K * d);
      half_quadratic_forms(K, d, p->fac, p->W, p->work);
      for (int k = 0; k < K; k++)
        var[k] = 2.0 * o3m_dot(d, p->W + (size_t)k * d, X + (size_t)k * d);
    }
    return;
  }
  for (int k = 0; k < K; k++) {
    int a = arms ? arms[k] : k;
    const double *x = X + (size_t)k * d;
    double *w = p->W + (size_t)k * d;
    /* w = Ainv_a x (kept in W for the update); var = x . w; mean = x . theta_a */
    fac_view f = fac_of(p, a);
    o3m_symv_tri(f.t, d, 1.0, f.a, x, 0.0, w);
    var[k] = o3m_dot(d, x, w);
    mean[k] = o3m_dot(d, x, p->theta + (size_t)a * d);
  }
}

int o3m_policy_stats(o3m_policy *p, int K, const double *X, const int *arms, double *mean,
                    double *var) {
  int rc = check_inputs(p, K, X, arms);
  if (rc) return rc;
  compute_stats(p, K, X, arms, p->mean, p->var);
  if (mean) memcpy(mean, p->mean, sizeof(double) * K);
  if (var) memcpy(var, p->var, sizeof(double) * K);
  return O3M_OK;
}

/* The lowest index whose score is within the tie tolerance of the maximum. */
static int argmax_ties_low(const double *s, int K) {
  double best = s[0];
  for (int k = 1; k < K; k++)
    if (s[k] > best) best = s[k];
  double tol = O3M_POLICY_TIE_RTOL * (fabs(best) > 1.0 ? fabs(best) : 1.0);
  for (int k = 0; k < K; k++)
    if (s[k] >= best - tol) return k;
  return 0;
}

/* The candidate chosen on scores s[0..K): O3M_ENONFINITE if a score is not
 * finite (a damaged model, or contexts so large that they overflow), else
 * the lowest index among the ties of the best in *c. */
static int pick(const double *s, int K, int *c) {
  for (int k = 0; k < K; k++)
    if (!isfinite(s[k])) return O3M_ENONFINITE;
  *c = argmax_ties_low(s, K);
  return O3M_OK;
}

/* o3m_policy_choose on inputs check_inputs accepted. */
static int choose_checked(o3m_policy *p, int K, const double *X, const int *arms, int *chosen,
                          double *score) {
  int rc, d = p->d;
  double *s = p->score;
  /* The sampler is saved before any draw so that a choice that fails after
   * drawing (non-finite scores from a damaged model) leaves it unchanged,
   * as the header promises. */
  o3m_rng_state saved;
  int drew = p->cfg.algo == O3M_ALGO_LINTS;
  if (drew) o3m_rng_state_get(p->rng, &saved);
  if (p->cfg.algo == O3M_ALGO_LINUCB) {
    compute_stats(p, K, X, arms, p->mean, p->var);
    for (int k = 0; k < K; k++)
      s[k] = p->mean[k] + p->cfg.alpha * sqrt(p->var[k] > 0 ? p->var[k] : 0);
  } else if (p->cfg.model == O3M_MODEL_SHARED) {
    /* mu = theta + v U^{-1} z, z ~ N(0, I); scores = X mu */
    rc = o3m_rng_gaussian(p->rng, p->z, d);
    if (rc) goto restore;
    o3m_trsv_upper(d, p->fac, p->z);
    o3m_scal(d, p->cfg.v, p->z);
    o3m_axpy(d, 1.0, p->theta, p->z);
    o3m_gemv(K, d, 1.0, X, p->z, 0.0, s);
  } else {
    /* score_k = mean_k + v sqrt(var_k) z_k, z_k ~ N(0, 1) */
    compute_stats(p, K, X, arms, p->mean, p->var);
    rc = o3m_rng_gaussian(p->rng, p->z, K);
    if (rc) goto restore;
    for (int k = 0; k < K; k++)
      s[k] = p->mean[k] + p->cfg.v * sqrt(p->var[k] > 0 ? p->var[k] : 0) * p->z[k];
  }
  int c;
  if ((rc = pick(s, K, &c)) < 0) goto restore;
  if (p->cfg.model == O3M_MODEL_DISJOINT) {
    /* Keep the chosen candidate's w = Ainv_a x for its update. */
    p->kept_arm = arms ? arms[c] : c;
    memcpy(p->kept_x, X + (size_t)c * d, sizeof(double) * d);
    memcpy(p->kept_w, p->W + (size_t)c * d, sizeof(double) * d);
  }
  *chosen = c;
  if (score) *score = s[c];
  return O3M_OK;
restore:
  if (drew) o3m_rng_state_set(p->rng, &saved);
  return rc;
}

int o3m_policy_choose(o3m_policy *p, int K, const double *X, const int *arms, int *chosen,
                     double *score) {
  int rc = check_inputs(p, K, X, arms);
  return rc ? rc : choose_checked(p, K, X, arms, chosen, score);
}

/* ---------------------------------------------------------------- batches */

/* Settles round q from its scores s: its rc, and its choice when 0. */
static int settle(o3m_policy_round *q, const double *s) {
  q->rc = pick(s, q->K, &q->chosen);
  if (q->rc == O3M_OK) q->score = s[q->chosen];
  return q->rc;
}

/* Scores the m >= 2 valid rounds rounds[p->bidx[0..m)] of the shared
 * model, at most p->batch_rows candidates in all, with one call per
 * quantity instead of one per round, and settles them. Returns how many of the m it settled:
 * all of them, except when LinTS round c fails after its draws (non-finite
 * scores, or a sampler failure): then c + 1, with the sampler put back to
 * where it was before round c drew, as o3m_policy_choose leaves it, so that
 * the caller chooses the rounds after it again from there (the per-round
 * calls would have drawn them from there). Only workspaces and, for LinTS,
 * the sampler change. */
static int batch_score_shared(o3m_policy *p, o3m_policy_round *rounds, int m) {
  const int d = p->d;
  int rows = 0;
  for (int c = 0; c < m; c++) {
    p->boff[c] = rows;
    rows += rounds[p->bidx[c]].K;
  }
  if (p->cfg.algo == O3M_ALGO_LINUCB) {
    /* The batch's candidates stacked in W: mean = X theta with one dgemv,
     * all the widths x^T Ainv x with one dtrmm (half_quadratic_forms). */
    for (int c = 0; c < m; c++) {
      const o3m_policy_round *q = &rounds[p->bidx[c]];
      memcpy(p->W + (size_t)p->boff[c] * d, q->X, sizeof(double) * (size_t)q->K * d);
    }
    o3m_gemv(rows, d, 1.0, p->W, p->theta, 0.0, p->mean);
    half_quadratic_forms(rows, d, p->fac, p->W, p->work);
    for (int c = 0; c < m; c++) {
      o3m_policy_round *q = &rounds[p->bidx[c]];
      const size_t o = (size_t)p->boff[c];
      for (int k = 0; k < q->K; k++) {
        double v = 2.0 * o3m_dot(d, p->W + (o + k) * d, q->X + (size_t)k * d);
        p->score[o + k] = p->mean[o + k] + p->cfg.alpha * sqrt(v > 0 ? v : 0);
      }
      settle(q, p->score + o);
    }
    return m;
  }
  /* LinTS: each round's z ~ N(0, I) drawn in round order, as its own
   * choose would, into row c of Z; then mu_c = theta + v U^{-1} z_c for
   * all rounds with one dtrsm, and each round's scores X_c mu_c. */
  int drawn = m, failed = -1;
  for (int c = 0; c < m; c++) {
    o3m_rng_state_get(p->rng, &p->bstate[c]);
    int rc = o3m_rng_gaussian(p->rng, p->Z + (size_t)c * d, d);
    if (rc < 0) {
      o3m_rng_state_set(p->rng, &p->bstate[c]);
      rounds[p->bidx[c]].rc = rc;
      drawn = failed = c;
      break;
    }
  }
  if (drawn > 0) o3m_trsm_right_upper_t(drawn, d, p->fac, p->Z);
  for (int c = 0; c < drawn; c++) {
    double *mu = p->Z + (size_t)c * d;
    o3m_scal(d, p->cfg.v, mu);
    o3m_axpy(d, 1.0, p->theta, mu);
    o3m_policy_round *q = &rounds[p->bidx[c]];
    double *s = p->score + p->boff[c];
    o3m_gemv(q->K, d, 1.0, q->X, mu, 0.0, s);
    if (settle(q, s) < 0) {
      o3m_rng_state_set(p->rng, &p->bstate[c]);
      return c + 1;
    }
  }
  return failed < 0 ? m : failed + 1;
}

int o3m_policy_choose_batch(o3m_policy *p, int n, o3m_policy_round *rounds) {
  if (n < 0 || (n > 0 && !rounds)) return O3M_EINVAL;
  if (p->cfg.model == O3M_MODEL_DISJOINT || n == 1) {
    for (int i = 0; i < n; i++) {
      o3m_policy_round *q = &rounds[i];
      q->rc = o3m_policy_choose(p, q->K, q->X, q->arms, &q->chosen, &q->score);
    }
    return O3M_OK;
  }
  /* A call reads its rounds' contexts more than once (the input check,
   * then the scores; LinUCB also stacks them in W, which the dtrmm reads
   * and writes and the widths read again), so its rows are kept within
   * O3M_POLICY_BATCH_BYTES, where they stay in a core's cache. Measured in
   * o3m-bench-core (g) at d = 100: 32 rounds of K = 500 in one call (12.8
   * MB) took 1.3 to 2 times as long as the 32 rounds one by one. A round
   * above the cap goes alone, as before. */
  const int cap = p->batch_rows;
  int i = 0;
  while (i < n) {
    /* The next scoring call's rounds: the valid ones from i on (a refused
     * round settles here and draws nothing, as choose refuses it before
     * drawing) while they fit in cap rows; the first one always goes in
     * (the workspace holds max_candidates >= its K rows). */
    int m = 0, rows = 0, t = i;
    for (; t < n && m < O3M_POLICY_BATCH_ROUNDS; t++) {
      o3m_policy_round *q = &rounds[t];
      if (m > 0 && q->K > cap - rows) break; /* checked in the next call, where it is read */
      if ((q->rc = check_inputs(p, q->K, q->X, q->arms)) < 0) continue;
      p->bidx[m++] = t;
      rows += q->K;
    }
    if (m == 1) {
      o3m_policy_round *q = &rounds[p->bidx[0]];
      q->rc = choose_checked(p, q->K, q->X, q->arms, &q->chosen, &q->score);
    } else if (m > 1) {
      int settled = batch_score_shared(p, rounds, m);
      if (settled < m) t = p->bidx[settled - 1] + 1;
    }
    i = t;
  }
  return O3M_OK;
}

int o3m_policy_update_check(o3m_policy *p, int arm, const double *x, double reward,
                           const char **what) {
  const char *dummy;
  if (!what) what = &dummy;
  *what = "";
  int m = 0;
  if (p->cfg.model == O3M_MODEL_DISJOINT) {
    if (arm < 0 || arm >= p->n_models) return *what = "arm out of range", O3M_EINVAL;
    m = arm;
  }
  int d = p->d;
  if (!isfinite(reward)) return *what = "the reward is not finite", O3M_ENONFINITE;
  double xx = o3m_dot(d, x, x);
  if (!isfinite(xx)) return *what = "x . x overflows", O3M_ENONFINITE;
  /* An x x^T whose entries exceed lambda / eps swamps the ridge lambda I in
   * rounding: along x, Lambda is then singular in floating point, and the
   * exact refactorization (periodic, or after a rank-one update that lost
   * definiteness) fails, which the health check reports as damage. No
   * bounded context comes near (||x||^2 = 1e8 for the default max_norm,
   * against lambda 2^52 for lambda = 1). */
  if (xx * DBL_EPSILON > p->cfg.lambda)
    return *what = "x x^T would swamp the ridge lambda I", O3M_ENONFINITE;
  /* Lambda, the exact statistics, must stay finite: its diagonal (stored
   * part, held rows and x x^T) bounds every entry of a sum of outer
   * products. */
  const double *L = model_mat(p->lambda_m, p, m), *R = held_rows(p, m);
  for (int i = 0; i < d; i++) {
    double v = L[(size_t)i * d + i] + x[i] * x[i];
    for (int k = 0; k < p->n_held[m]; k++) v += R[(size_t)k * d + i] * R[(size_t)k * d + i];
    if (!isfinite(v)) return *what = "Lambda would overflow", O3M_ENONFINITE;
  }
  const double *u = p->u + (size_t)m * d, *th = p->theta + (size_t)m * d;
  for (int i = 0; i < d; i++)
    if (!isfinite(u[i] + reward * x[i])) return *what = "u would overflow", O3M_ENONFINITE;
  /* w = Lambda^{-1} x from the current factor, the Sherman-Morrison
   * denominator c = 1 + x^T w (>= 1 for a positive definite Lambda), the
   * rank-one term w w^T / c and the new theta = theta + w (r - x^T theta) / c. */
  fac_view f = fac_of(p, m);
  if (p->use_chol) {
    o3m_copy(d, x, p->work);
    o3m_trsv_upper_t(d, f.a, p->work);
    o3m_trsv_upper(d, f.a, p->work);
  } else {
    o3m_symv_tri(f.t, d, 1.0, f.a, x, 0.0, p->work);
  }
  const double *w = p->work;
  double c = 1.0 + o3m_dot(d, x, w);
  if (!(c > 0) || !isfinite(c))
    return *what = "the Sherman-Morrison denominator is not finite and positive", O3M_ENONFINITE;
  double step = (reward - o3m_dot(d, x, th)) / c, sc = sqrt(c);
  for (int i = 0; i < d; i++) {
    double wi = w[i] / sc;
    if (!isfinite(wi * wi)) return *what = "the rank-one update would overflow", O3M_ENONFINITE;
    if (!isfinite(th[i] + w[i] * step)) return *what = "theta would overflow", O3M_ENONFINITE;
  }
  /* The update that follows reuses w (the kept-w path of "The chosen
   * candidate's w"): the same call on the same state, so the same bits. */
  if (!p->use_chol) {
    p->kept_arm = m;
    memcpy(p->kept_x, x, sizeof(double) * d);
    memcpy(p->kept_w, w, sizeof(double) * d);
  }
  return O3M_OK;
}

int o3m_policy_update(o3m_policy *p, int arm, const double *x, double reward) {
  int m = 0;
  if (p->cfg.model == O3M_MODEL_DISJOINT) {
    if (arm < 0 || arm >= p->n_models) return O3M_EINVAL;
    m = arm;
  }
  int d = p->d;
  /* x . x is finite exactly when x is finite and x x^T cannot overflow
   * Lambda's diagonal: one check that keeps the statistics finite. */
  if (!isfinite(reward) || !isfinite(o3m_dot(d, x, x))) return O3M_ENONFINITE;
  /* Lambda += x x^T (held, added with the block); u += r x */
  memcpy(held_rows(p, m) + (size_t)p->n_held[m] * d, x, sizeof(double) * d);
  if (++p->n_held[m] == LAMBDA_BLOCK) lambda_flush(p, m);
  o3m_axpy(d, reward, x, p->u + (size_t)m * d);
  /* The kept w is valid for this update only; after it the state moved. */
  int kept = p->kept_arm == m && !memcmp(x, p->kept_x, sizeof(double) * d);
  p->kept_arm = -1;
  int rc, incremental = 0;
  const double *w = p->work;
  if (++p->since_refactor[m] >= p->cfg.refactor_every) {
    rc = o3m_policy__refactor(p, m);
  } else {
    fac_view f = fac_of(p, m);
    if (p->use_chol) {
      rc = o3m_chol_update(d, f.a, x, p->work);
    } else {
      /* w = Ainv x, computed by choose or here */
      if (kept) w = p->kept_w;
      else o3m_symv_tri(f.t, d, 1.0, f.a, x, 0.0, p->work);
      rc = o3m_sherman_morrison_w(f.t, d, f.a, x, w);
    }
    incremental = rc == O3M_OK && !p->use_chol;
    /* Lost definiteness in the rank-one path: the exact statistics already
     * hold this observation, so refactorizing from them loses nothing. */
    if (rc == O3M_ENOTPD) rc = o3m_policy__refactor(p, m);
  }
  if (rc) return rc;
  if (incremental) {
    /* With w = Ainv_old x and c = 1 + x^T w,
     *   theta' = Ainv' (u + r x) = theta + w (r - x^T theta) / c,
     * an O(d) step instead of a d x d product; the periodic refactorization
     * recomputes theta exactly from Lambda and u. */
    double *th = p->theta + (size_t)m * d;
    double c = 1.0 + o3m_dot(d, x, w);
    o3m_axpy(d, (reward - o3m_dot(d, x, th)) / c, w, th);
  } else {
    o3m_policy__update_theta(p, m);
  }
  p->updates++;
  return O3M_OK;
}

double o3m_policy_theta_norm(const o3m_policy *p, int arm) {
  int m = p->cfg.model == O3M_MODEL_DISJOINT ? arm : 0;
  if (m < 0 || m >= p->n_models) return NAN;
  return o3m_nrm2(p->d, p->theta + (size_t)m * p->d);
}

int o3m_policy_theta(const o3m_policy *p, int arm, double *theta) {
  int m = p->cfg.model == O3M_MODEL_DISJOINT ? arm : 0;
  if (m < 0 || m >= p->n_models) return O3M_EINVAL;
  memcpy(theta, p->theta + (size_t)m * p->d, sizeof(double) * p->d);
  return O3M_OK;
}

int o3m_policy_reset(o3m_policy *p) {
  size_t d = (size_t)p->d, n = (size_t)p->n_models;
  memset(p->lambda_m, 0, sizeof(double) * n * d * d);
  memset(p->held, 0, sizeof(double) * n * LAMBDA_BLOCK * d);
  memset(p->n_held, 0, sizeof(int) * n);
  memset(p->fac, 0, sizeof(double) * n * d * d);
  memset(p->u, 0, sizeof(double) * n * d);
  memset(p->theta, 0, sizeof(double) * n * d);
  set_prior(p);
  p->updates = 0;
  p->kept_arm = -1;
  o3m_rng *fresh;
  int rc = o3m_rng_create_seeded_insecure(&fresh, p->cfg.seed);
  if (rc) return rc;
  o3m_rng_state st;
  o3m_rng_state_get(fresh, &st);
  o3m_rng_state_set(p->rng, &st);
  o3m_rng_destroy(fresh);
  return O3M_OK;
}
