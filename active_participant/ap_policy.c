/* ap_policy.c -- LinUCB and linear Thompson sampling over ridge statistics.
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
 * in ap_policy.h. For shared LinTS the factor of Q Lambda Q^T is not Q U, so
 * the same z gives a different mu~; the sampled score vector has the same
 * distribution N(X theta, v^2 X Lambda^{-1} X^T) either way, so decisions
 * are equal in distribution, not draw by draw. Disjoint LinTS draws scalars
 * from the per-candidate mean and variance, which are invariant, so with the
 * same seed its decisions are equal draw by draw as well. */
#include "ap_policy.h"
#include "o3m_bytes.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "o3m_assert.h"
#include "o3m_blas.h"
#include "o3m_rank1.h"
#include "o3m_rng.h"

/* Observations held per model before they are added to Lambda with one
 * dsyrk. 16 gets most of the gain (the per-observation cost at 32 or 64 is
 * within 15% of it at d = 100 to 500) for 16 d doubles per model. */
#define LAMBDA_BLOCK 16

struct ap_policy {
  ap_policy_config cfg;
  int d;
  int n_models;
  int use_chol; /* 1: models keep U; 0: models keep Ainv */
  double *lambda_m; /* n_models x d x d, without the held rows */
  double *held;     /* n_models x LAMBDA_BLOCK x d: rows not yet in Lambda */
  int *n_held;      /* per model, 0..LAMBDA_BLOCK-1 between calls */
  double *fac;      /* n_models x d x d: Ainv or U (disjoint: paired, above) */
  double *scratch;  /* d x d, disjoint only: a whole inverse before it is paired */
  double *u;        /* n_models x d */
  double *theta;    /* n_models x d */
  int *since_refactor; /* per model */
  uint64_t updates;
  o3m_rng *rng;
  /* workspace, sized at create */
  double *W;     /* max_candidates x d */
  double *mean;  /* max_candidates */
  double *var;   /* max_candidates */
  double *score; /* max_candidates */
  double *z;     /* max(d, max_candidates) */
  double *work;  /* d */
  /* the chosen candidate's x and w = Ainv_a x (disjoint; see above) */
  double *kept_x, *kept_w;
  int kept_arm; /* -1: nothing kept */
};

void ap_policy_config_default(ap_policy_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->algo = AP_ALGO_LINUCB;
  cfg->model = AP_MODEL_SHARED;
  cfg->max_candidates = 1000;
  cfg->lambda = 1.0;
  cfg->alpha = 0.5;
  cfg->v = 0.01;
  cfg->seed = 1;
  cfg->refactor_every = 1000;
}

int ap_algo_parse(const char *s, ap_algo *out) {
  if (s && !strcmp(s, "linucb")) *out = AP_ALGO_LINUCB;
  else if (s && !strcmp(s, "lints")) *out = AP_ALGO_LINTS;
  else return O3M_EINVAL;
  return O3M_OK;
}

int ap_model_parse(const char *s, ap_model_kind *out) {
  if (s && !strcmp(s, "shared")) *out = AP_MODEL_SHARED;
  else if (s && !strcmp(s, "disjoint")) *out = AP_MODEL_DISJOINT;
  else return O3M_EINVAL;
  return O3M_OK;
}

const char *ap_algo_name(ap_algo a) { return a == AP_ALGO_LINTS ? "lints" : "linucb"; }
const char *ap_model_name(ap_model_kind m) {
  return m == AP_MODEL_DISJOINT ? "disjoint" : "shared";
}

static int validate(const ap_policy_config *c, o3m_err *e) {
  if (c->algo != AP_ALGO_LINUCB && c->algo != AP_ALGO_LINTS)
    return o3m_err_set(e, O3M_EINVAL, "policy: algo must be linucb or lints");
  if (c->model != AP_MODEL_SHARED && c->model != AP_MODEL_DISJOINT)
    return o3m_err_set(e, O3M_EINVAL, "policy: model must be shared or disjoint");
  if (c->d < 1 || c->d > 4096)
    return o3m_err_set(e, O3M_EINVAL, "policy: d = %d, expected 1..4096", c->d);
  if (c->model == AP_MODEL_DISJOINT && (c->n_arms < 1 || c->n_arms > 1000000))
    return o3m_err_set(e, O3M_EINVAL, "policy: n_arms = %d, expected 1..1000000 for disjoint",
                       c->n_arms);
  if (c->max_candidates < 1 || c->max_candidates > 1000000)
    return o3m_err_set(e, O3M_EINVAL, "policy: max_candidates = %d, expected 1..1000000",
                       c->max_candidates);
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

static double *model_mat(double *base, const ap_policy *p, int m) {
  return base + (size_t)m * p->d * p->d;
}

static double *held_rows(const ap_policy *p, int m) {
  return p->held + (size_t)m * LAMBDA_BLOCK * p->d;
}

/* Adds model m's held rows to Lambda (one dsyrk) and empties the block. The
 * emptied rows are zeroed, so equal states have equal images. */
static void lambda_flush(ap_policy *p, int m) {
  int n = p->n_held[m];
  if (n == 0) return;
  double *R = held_rows(p, m);
  o3m_syrk_t(p->d, n, 1.0, R, model_mat(p->lambda_m, p, m));
  memset(R, 0, sizeof(double) * (size_t)n * p->d);
  p->n_held[m] = 0;
}

/* out = Lambda_m v for the whole Lambda (stored part plus held rows),
 * without flushing: Lambda v + R^T (R v). */
static void lambda_apply(const ap_policy *p, int m, const double *v, double *out) {
  int d = p->d, n = p->n_held[m];
  o3m_symv(d, 1.0, model_mat(p->lambda_m, p, m), v, 0.0, out);
  if (n > 0) {
    double t[LAMBDA_BLOCK];
    const double *R = held_rows(p, m);
    o3m_gemv(n, d, 1.0, R, v, 0.0, t);
    o3m_gemv_t(n, d, 1.0, R, t, 1.0, out);
  }
}

/* Where model m's factor is: its d x d array and the triangle holding the
 * values (for U always the upper one; see "Paired triangles" above). */
typedef struct fac_view {
  double *a;
  o3m_uplo t;
} fac_view;

static fac_view fac_of(const ap_policy *p, int m) {
  fac_view f = {model_mat(p->fac, p, m), O3M_UPPER};
  if (p->cfg.model == AP_MODEL_DISJOINT && (m & 1)) {
    f.a = model_mat(p->fac, p, m - 1) + p->d;
    f.t = O3M_LOWER;
  }
  return f;
}

/* Recomputes Ainv or U of model m exactly from its Lambda, and theta. */
static int refactor(ap_policy *p, int m) {
  int d = p->d;
  lambda_flush(p, m);
  p->since_refactor[m] = 0;
  double *L = model_mat(p->lambda_m, p, m);
  if (p->use_chol) return o3m_chol_factor(d, L, model_mat(p->fac, p, m));
  if (p->cfg.model == AP_MODEL_SHARED) return o3m_spd_inverse(d, L, model_mat(p->fac, p, m));
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

/* theta_m = Lambda_m^{-1} u_m from the model's current Ainv or U. */
static void update_theta(ap_policy *p, int m) {
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

int ap_policy_create(ap_policy **out, const ap_policy_config *cfg, o3m_err *e) {
  *out = NULL;
  int rc = validate(cfg, e);
  if (rc) return rc;
  ap_policy *p = calloc(1, sizeof *p);
  if (!p) return o3m_err_set(e, O3M_ENOMEM, "policy: out of memory");
  p->cfg = *cfg;
  p->d = cfg->d;
  p->n_models = cfg->model == AP_MODEL_SHARED ? 1 : cfg->n_arms;
  p->use_chol = cfg->model == AP_MODEL_SHARED && cfg->algo == AP_ALGO_LINTS;
  size_t d = (size_t)p->d, n = (size_t)p->n_models, kmax = (size_t)cfg->max_candidates;
  size_t zlen = d > kmax ? d : kmax;
  p->lambda_m = calloc(n * d * d, sizeof(double));
  p->held = calloc(n * LAMBDA_BLOCK * d, sizeof(double));
  p->n_held = calloc(n, sizeof(int));
  p->fac = calloc(n * d * d, sizeof(double));
  if (cfg->model == AP_MODEL_DISJOINT) p->scratch = malloc(d * d * sizeof(double));
  p->u = calloc(n * d, sizeof(double));
  p->theta = calloc(n * d, sizeof(double));
  p->since_refactor = calloc(n, sizeof(int));
  p->W = malloc(kmax * d * sizeof(double));
  p->mean = malloc(kmax * sizeof(double));
  p->var = malloc(kmax * sizeof(double));
  p->score = malloc(kmax * sizeof(double));
  p->z = malloc(zlen * sizeof(double));
  p->work = malloc(d * sizeof(double));
  p->kept_x = malloc(d * sizeof(double));
  p->kept_w = malloc(d * sizeof(double));
  p->kept_arm = -1;
  if (!p->lambda_m || !p->held || !p->n_held || !p->fac ||
      (cfg->model == AP_MODEL_DISJOINT && !p->scratch) || !p->u || !p->theta ||
      !p->since_refactor || !p->W || !p->mean || !p->var || !p->score || !p->z || !p->work ||
      !p->kept_x || !p->kept_w) {
    ap_policy_destroy(p);
    return o3m_err_set(e, O3M_ENOMEM, "policy: out of memory for d = %zu, %zu models", d, n);
  }
  rc = o3m_rng_create_seeded_insecure(&p->rng, cfg->seed);
  if (rc) {
    ap_policy_destroy(p);
    return o3m_err_set(e, rc, "policy: cannot create sampler");
  }
  for (size_t m = 0; m < n; m++) {
    double *L = model_mat(p->lambda_m, p, (int)m);
    for (size_t i = 0; i < d; i++) L[i * d + i] = cfg->lambda;
    /* lambda I with lambda > 0 (checked above) is positive definite. */
    rc = refactor(p, (int)m);
    O3M_ASSERT(rc == O3M_OK);
  }
  *out = p;
  return O3M_OK;
}

void ap_policy_destroy(ap_policy *p) {
  if (!p) return;
  o3m_rng_destroy(p->rng);
  free(p->lambda_m);
  free(p->held);
  free(p->n_held);
  free(p->fac);
  free(p->scratch);
  free(p->u);
  free(p->theta);
  free(p->since_refactor);
  free(p->W);
  free(p->mean);
  free(p->var);
  free(p->score);
  free(p->z);
  free(p->work);
  free(p->kept_x);
  free(p->kept_w);
  free(p);
}

const ap_policy_config *ap_policy_config_of(const ap_policy *p) { return &p->cfg; }
uint64_t ap_policy_updates(const ap_policy *p) { return p->updates; }

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

static int check_inputs(const ap_policy *p, int K, const double *X, const int *arms) {
  if (K < 1 || K > p->cfg.max_candidates) return O3M_EINVAL;
  if (p->cfg.model == AP_MODEL_DISJOINT)
    for (int k = 0; k < K; k++) {
      int a = arms ? arms[k] : k;
      if (a < 0 || a >= p->n_models) return O3M_EINVAL;
    }
  if (!contexts_finite(X, (size_t)K * p->d)) return O3M_ENONFINITE;
  return O3M_OK;
}

/* W_k . x_k = x_k^T S x_k / 2 for every row k of X (K x d), S symmetric
 * (upper triangle used), in W. With T the upper triangle of S (diagonal
 * included) and D its diagonal, x^T S x = 2 x^T (T - D / 2) x, so one dtrmm
 * with the upper triangle of S whose diagonal is halved, W = X (T - D / 2),
 * gives all K forms. The diagonal is halved in place for the call and put
 * back from a saved copy (save_diag, d doubles), so S is unchanged bit for
 * bit afterwards. The dtrmm does K d^2 / 2 multiply-adds where W = X S
 * (dsymm) does K d^2, and measured 0.5 to 0.8 of its time from K = 10 to
 * 1000 at d = 50 to 500. The rounding error is of the same order as the
 * dsymm's: both sum the same terms of x^T S x. */
static void half_quadratic_forms(int K, int d, double *S, const double *X, double *W,
                                 double *save_diag) {
  memcpy(W, X, sizeof(double) * (size_t)K * d);
  for (int i = 0; i < d; i++) {
    save_diag[i] = S[(size_t)i * d + i];
    S[(size_t)i * d + i] = 0.5 * save_diag[i];
  }
  o3m_trmm_right_upper(K, d, S, W);
  for (int i = 0; i < d; i++) S[(size_t)i * d + i] = save_diag[i];
}

/* mean[k] = x_k^T theta, var[k] = x_k^T Lambda^{-1} x_k for all candidates. */
static void compute_stats(ap_policy *p, int K, const double *X, const int *arms, double *mean,
                          double *var) {
  int d = p->d;
  if (p->cfg.model == AP_MODEL_SHARED) {
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
      half_quadratic_forms(K, d, p->fac, X, p->W, p->work);
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

int ap_policy_stats(ap_policy *p, int K, const double *X, const int *arms, double *mean,
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
  double tol = AP_POLICY_TIE_RTOL * (fabs(best) > 1.0 ? fabs(best) : 1.0);
  for (int k = 0; k < K; k++)
    if (s[k] >= best - tol) return k;
  return 0;
}

int ap_policy_choose(ap_policy *p, int K, const double *X, const int *arms, int *chosen,
                     double *score) {
  int rc = check_inputs(p, K, X, arms);
  if (rc) return rc;
  int d = p->d;
  double *s = p->score;
  /* The sampler is saved before any draw so that a choice that fails after
   * drawing (non-finite scores from a damaged model) leaves it unchanged,
   * as the header promises. */
  o3m_rng_state saved;
  int drew = p->cfg.algo == AP_ALGO_LINTS;
  if (drew) o3m_rng_state_get(p->rng, &saved);
  if (p->cfg.algo == AP_ALGO_LINUCB) {
    compute_stats(p, K, X, arms, p->mean, p->var);
    for (int k = 0; k < K; k++)
      s[k] = p->mean[k] + p->cfg.alpha * sqrt(p->var[k] > 0 ? p->var[k] : 0);
  } else if (p->cfg.model == AP_MODEL_SHARED) {
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
  for (int k = 0; k < K; k++)
    if (!isfinite(s[k])) {
      rc = O3M_ENONFINITE;
      goto restore;
    }
  int c = argmax_ties_low(s, K);
  if (p->cfg.model == AP_MODEL_DISJOINT) {
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

int ap_policy_update_check(ap_policy *p, int arm, const double *x, double reward,
                           const char **what) {
  const char *dummy;
  if (!what) what = &dummy;
  *what = "";
  int m = 0;
  if (p->cfg.model == AP_MODEL_DISJOINT) {
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

int ap_policy_update(ap_policy *p, int arm, const double *x, double reward) {
  int m = 0;
  if (p->cfg.model == AP_MODEL_DISJOINT) {
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
    rc = refactor(p, m);
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
    if (rc == O3M_ENOTPD) rc = refactor(p, m);
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
    update_theta(p, m);
  }
  p->updates++;
  return O3M_OK;
}

double ap_policy_theta_norm(const ap_policy *p, int arm) {
  int m = p->cfg.model == AP_MODEL_DISJOINT ? arm : 0;
  if (m < 0 || m >= p->n_models) return NAN;
  return o3m_nrm2(p->d, p->theta + (size_t)m * p->d);
}

int ap_policy_theta(const ap_policy *p, int arm, double *theta) {
  int m = p->cfg.model == AP_MODEL_DISJOINT ? arm : 0;
  if (m < 0 || m >= p->n_models) return O3M_EINVAL;
  memcpy(theta, p->theta + (size_t)m * p->d, sizeof(double) * p->d);
  return O3M_OK;
}

/* ======================================================= state export/import
 *
 * The image layout is documented in ap_policy.h. Scalars are encoded
 * little-endian byte by byte; the arrays are handed over as they lie in
 * memory on little-endian hosts and byte-swapped through a small buffer on
 * big-endian ones. */

#define STATE_MAGIC "O3MPOLST"
#define STATE_VERSION 2u
#define STATE_HDR 120u

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define STATE_BIG_ENDIAN 1
#else
#define STATE_BIG_ENDIAN 0
#endif


/* Bytes of the two counter blocks (since_refactor, n_held: 4 bytes per
 * model each, so always a multiple of 8). */
static size_t counters_bytes(const ap_policy *p) { return (size_t)p->n_models * 8; }

size_t ap_policy_state_size(const ap_policy *p) {
  size_t n = (size_t)p->n_models, d = (size_t)p->d;
  return STATE_HDR + counters_bytes(p) +
         sizeof(double) * (2 * n * d * d + 2 * n * d + n * LAMBDA_BLOCK * d);
}

int ap_policy_n_models(const ap_policy *p) { return p->n_models; }

static void encode_header(const ap_policy *p, unsigned char *h) {
  memset(h, 0, STATE_HDR);
  memcpy(h, STATE_MAGIC, 8);
  o3m_put_le32(h + 8, STATE_VERSION);
  o3m_put_le32(h + 12, STATE_HDR);
  o3m_put_le32(h + 16, (uint32_t)p->cfg.algo);
  o3m_put_le32(h + 20, (uint32_t)p->cfg.model);
  o3m_put_le32(h + 24, (uint32_t)p->d);
  o3m_put_le32(h + 28, (uint32_t)p->n_models);
  o3m_put_le32(h + 32, (uint32_t)p->use_chol);
  o3m_put_le32(h + 36, (uint32_t)p->cfg.refactor_every);
  o3m_put_le64(h + 40, o3m_double_bits(p->cfg.lambda));
  o3m_put_le64(h + 48, p->updates);
  o3m_rng_state st;
  /* The policy's sampler is always a seeded one, whose state can be read. */
  int rc = o3m_rng_state_get(p->rng, &st);
  O3M_ASSERT(rc == O3M_OK);
  for (int i = 0; i < 4; i++) o3m_put_le64(h + 56 + 8 * i, st.s[i]);
  o3m_put_le64(h + 88, st.have_spare);
  o3m_put_le64(h + 96, o3m_double_bits(st.spare));
  o3m_put_le64(h + 104, (uint64_t)ap_policy_state_size(p));
  o3m_put_le32(h + 112, LAMBDA_BLOCK);
}

/* Checks a header against this policy. On success fills the sampler state
 * and the update counter to install; nothing is changed here. */
static int check_header(const ap_policy *p, const unsigned char *h, o3m_rng_state *st,
                        uint64_t *updates, o3m_err *e) {
  if (memcmp(h, STATE_MAGIC, 8))
    return o3m_err_set(e, O3M_ECORRUPT, "policy state: bad magic");
  /* Another format version is another release's state, not damage: the
   * caller must refuse it rather than set it aside as corrupt. */
  if (o3m_get_le32(h + 8) != STATE_VERSION)
    return o3m_err_set(e, O3M_EDIM,
                       "policy state: format version %u, this build reads version %u (state "
                       "written by another release of o3m)",
                       (unsigned)o3m_get_le32(h + 8), STATE_VERSION);
  if (o3m_get_le32(h + 12) != STATE_HDR)
    return o3m_err_set(e, O3M_ECORRUPT, "policy state: header length %u, expected %u",
                       (unsigned)o3m_get_le32(h + 12), STATE_HDR);
  uint32_t algo = o3m_get_le32(h + 16), model = o3m_get_le32(h + 20);
  uint32_t d = o3m_get_le32(h + 24), n = o3m_get_le32(h + 28), chol = o3m_get_le32(h + 32);
  if (algo != (uint32_t)p->cfg.algo || model != (uint32_t)p->cfg.model)
    return o3m_err_set(e, O3M_EDIM, "policy state: saved by a %s %s policy, this one is %s %s",
                       model == AP_MODEL_DISJOINT ? "disjoint" : "shared",
                       algo == AP_ALGO_LINTS ? "lints" : "linucb",
                       ap_model_name(p->cfg.model), ap_algo_name(p->cfg.algo));
  if (d != (uint32_t)p->d)
    return o3m_err_set(e, O3M_EDIM, "policy state: d = %u, this policy has d = %d",
                       (unsigned)d, p->d);
  if (n != (uint32_t)p->n_models)
    return o3m_err_set(e, O3M_EDIM, "policy state: %u models (arms), this policy has %d",
                       (unsigned)n, p->n_models);
  if (chol != (uint32_t)p->use_chol)
    return o3m_err_set(e, O3M_ECORRUPT, "policy state: factor kind %u does not fit the algo",
                       (unsigned)chol);
  if (o3m_get_le64(h + 40) != o3m_double_bits(p->cfg.lambda))
    return o3m_err_set(e, O3M_EDIM, "policy state: lambda = %.17g, this policy has %.17g",
                       o3m_bits_double(o3m_get_le64(h + 40)), p->cfg.lambda);
  if (o3m_get_le32(h + 112) != LAMBDA_BLOCK)
    return o3m_err_set(e, O3M_EDIM, "policy state: Lambda blocks of %u rows, this build uses %d",
                       (unsigned)o3m_get_le32(h + 112), LAMBDA_BLOCK);
  if (o3m_get_le32(h + 116) != 0)
    return o3m_err_set(e, O3M_ECORRUPT, "policy state: reserved header field is %u, not 0",
                       (unsigned)o3m_get_le32(h + 116));
  if (o3m_get_le64(h + 104) != (uint64_t)ap_policy_state_size(p))
    return o3m_err_set(e, O3M_ECORRUPT, "policy state: length field %llu, expected %zu",
                       (unsigned long long)o3m_get_le64(h + 104), ap_policy_state_size(p));
  for (int i = 0; i < 4; i++) st->s[i] = o3m_get_le64(h + 56 + 8 * i);
  st->have_spare = o3m_get_le64(h + 88);
  st->spare = o3m_bits_double(o3m_get_le64(h + 96));
  if (st->have_spare > 1 || (st->s[0] | st->s[1] | st->s[2] | st->s[3]) == 0 ||
      (st->have_spare == 1 && !isfinite(st->spare)))
    return o3m_err_set(e, O3M_ECORRUPT, "policy state: invalid sampler state");
  *updates = o3m_get_le64(h + 48);
  return O3M_OK;
}

/* Hands n doubles to sink in little-endian order. */
static int sink_doubles(ap_policy_sink sink, void *ctx, const double *a, size_t n) {
#if STATE_BIG_ENDIAN
  unsigned char buf[4096];
  size_t per = sizeof buf / 8;
  for (size_t i = 0; i < n; i += per) {
    size_t m = n - i < per ? n - i : per;
    for (size_t k = 0; k < m; k++) o3m_put_le64(buf + 8 * k, o3m_double_bits(a[i + k]));
    int rc = sink(ctx, buf, 8 * m);
    if (rc) return rc;
  }
  return O3M_OK;
#else
  return n ? sink(ctx, a, n * sizeof(double)) : O3M_OK;
#endif
}

/* Reads n little-endian doubles from src straight into a. */
static int source_doubles(ap_policy_source src, void *ctx, double *a, size_t n) {
  int rc = n ? src(ctx, a, n * sizeof(double)) : O3M_OK;
#if STATE_BIG_ENDIAN
  if (!rc)
    for (size_t i = 0; i < n; i++) {
      uint64_t v;
      memcpy(&v, a + i, 8);
      v = __builtin_bswap64(v);
      memcpy(a + i, &v, 8);
    }
#endif
  return rc;
}

/* Hands n int32 counters to sink in little-endian order, in chunks of a
 * stack buffer. */
static int sink_counters(ap_policy_sink sink, void *ctx, const int *a, size_t n) {
  unsigned char c[4096];
  size_t per = sizeof c / 4;
  for (size_t i = 0; i < n; i += per) {
    size_t m = n - i < per ? n - i : per;
    for (size_t k = 0; k < m; k++) o3m_put_le32(c + 4 * k, (uint32_t)a[i + k]);
    int rc = sink(ctx, c, 4 * m);
    if (rc) return rc;
  }
  return O3M_OK;
}

/* Whether a saved counter is valid: since_refactor >= 0 (which = 0), n_held
 * in 0..LAMBDA_BLOCK-1 (which = 1). Returns the phrase naming the problem,
 * or NULL. */
static const char *counter_problem(int which, int32_t v) {
  if (v < 0) return which ? "negative held-row count" : "negative counter";
  if (which && v >= LAMBDA_BLOCK) return "held-row count not below the block size";
  return NULL;
}

/* Reads n counters of the given kind from src into a. */
static int source_counters(ap_policy_source src, void *ctx, int which, int *a, size_t n,
                           o3m_err *e) {
  unsigned char c[4096];
  size_t per = sizeof c / 4;
  for (size_t i = 0; i < n; i += per) {
    size_t m = n - i < per ? n - i : per;
    int rc = src(ctx, c, 4 * m);
    if (rc) return o3m_err_set(e, rc, "policy state: short read");
    for (size_t k = 0; k < m; k++) {
      int32_t v = (int32_t)o3m_get_le32(c + 4 * k);
      const char *bad = counter_problem(which, v);
      if (bad) return o3m_err_set(e, O3M_ECORRUPT, "policy state: model %zu: %s", i + k, bad);
      a[i + k] = v;
    }
  }
  return O3M_OK;
}

int ap_policy_state_save(const ap_policy *p, ap_policy_sink sink, void *ctx) {
  unsigned char h[STATE_HDR];
  encode_header(p, h);
  int rc = sink(ctx, h, STATE_HDR);
  if (rc) return rc;
  size_t n = (size_t)p->n_models;
  if ((rc = sink_counters(sink, ctx, p->since_refactor, n))) return rc;
  if ((rc = sink_counters(sink, ctx, p->n_held, n))) return rc;
  size_t dd = n * p->d * p->d, dv = n * p->d;
  if ((rc = sink_doubles(sink, ctx, p->lambda_m, dd))) return rc;
  if ((rc = sink_doubles(sink, ctx, p->fac, dd))) return rc;
  if ((rc = sink_doubles(sink, ctx, p->u, dv))) return rc;
  if ((rc = sink_doubles(sink, ctx, p->theta, dv))) return rc;
  return sink_doubles(sink, ctx, p->held, dv * LAMBDA_BLOCK);
}

int ap_policy_state_load(ap_policy *p, ap_policy_source src, void *ctx, o3m_err *e) {
  unsigned char h[STATE_HDR];
  int rc = src(ctx, h, STATE_HDR);
  if (rc) return o3m_err_set(e, rc, "policy state: cannot read the header");
  o3m_rng_state st;
  uint64_t updates;
  if ((rc = check_header(p, h, &st, &updates, e))) return rc;
  /* From here on the state is being overwritten. */
  p->kept_arm = -1;
  size_t n = (size_t)p->n_models;
  if ((rc = source_counters(src, ctx, 0, p->since_refactor, n, e)) ||
      (rc = source_counters(src, ctx, 1, p->n_held, n, e)))
    return rc;
  size_t dd = n * p->d * p->d, dv = n * p->d;
  if ((rc = source_doubles(src, ctx, p->lambda_m, dd)) ||
      (rc = source_doubles(src, ctx, p->fac, dd)) || (rc = source_doubles(src, ctx, p->u, dv)) ||
      (rc = source_doubles(src, ctx, p->theta, dv)) ||
      (rc = source_doubles(src, ctx, p->held, dv * LAMBDA_BLOCK)))
    return o3m_err_set(e, rc, "policy state: short read");
  o3m_rng_state_set(p->rng, &st); /* validated by check_header */
  p->updates = updates;
  return O3M_OK;
}

/* A sink and a source over one memory buffer. */
typedef struct mem_cursor {
  unsigned char *w;
  const unsigned char *r;
  size_t left;
} mem_cursor;

static int mem_sink(void *ctx, const void *buf, size_t len) {
  mem_cursor *m = ctx;
  if (len > m->left) return O3M_EINVAL;
  memcpy(m->w, buf, len);
  m->w += len;
  m->left -= len;
  return O3M_OK;
}

static int mem_source(void *ctx, void *buf, size_t len) {
  mem_cursor *m = ctx;
  if (len > m->left) return O3M_ECORRUPT;
  memcpy(buf, m->r, len);
  m->r += len;
  m->left -= len;
  return O3M_OK;
}

int ap_policy_state_export(const ap_policy *p, void *buf, size_t len) {
  if (len < ap_policy_state_size(p)) return O3M_EINVAL;
  mem_cursor m = {.w = buf, .left = len};
  return ap_policy_state_save(p, mem_sink, &m);
}

int ap_policy_state_import(ap_policy *p, const void *buf, size_t len, o3m_err *e) {
  const unsigned char *b = buf;
  if (len < STATE_HDR)
    return o3m_err_set(e, O3M_ECORRUPT, "policy state: %zu bytes, shorter than the header",
                       len);
  o3m_rng_state st;
  uint64_t updates;
  int rc = check_header(p, b, &st, &updates, e);
  if (rc) return rc;
  if (len != ap_policy_state_size(p))
    return o3m_err_set(e, O3M_ECORRUPT, "policy state: %zu bytes, expected %zu", len,
                       ap_policy_state_size(p));
  /* Check the counters before anything is written, so a failed import
   * leaves the state as it was. */
  size_t n = (size_t)p->n_models;
  for (size_t i = 0; i < 2 * n; i++) {
    const char *bad = counter_problem(i >= n, (int32_t)o3m_get_le32(b + STATE_HDR + 4 * i));
    if (bad) return o3m_err_set(e, O3M_ECORRUPT, "policy state: model %zu: %s", i % n, bad);
  }
  mem_cursor m = {.r = b, .left = len};
  return ap_policy_state_load(p, mem_source, &m, e);
}

int ap_policy_reset(ap_policy *p) {
  size_t d = (size_t)p->d, n = (size_t)p->n_models;
  memset(p->lambda_m, 0, sizeof(double) * n * d * d);
  memset(p->held, 0, sizeof(double) * n * LAMBDA_BLOCK * d);
  memset(p->n_held, 0, sizeof(int) * n);
  memset(p->fac, 0, sizeof(double) * n * d * d);
  memset(p->u, 0, sizeof(double) * n * d);
  memset(p->theta, 0, sizeof(double) * n * d);
  for (size_t m = 0; m < n; m++) {
    double *L = model_mat(p->lambda_m, p, (int)m);
    for (size_t i = 0; i < d; i++) L[i * d + i] = p->cfg.lambda;
    int rc = refactor(p, (int)m); /* lambda I: positive definite */
    O3M_ASSERT(rc == O3M_OK);
  }
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

/* ========================================================== numerical health */

static int all_finite(const double *a, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!isfinite(a[i])) return 0;
  return 1;
}

static int upper_finite(int d, const double *A) {
  for (int i = 0; i < d; i++)
    if (!all_finite(A + (size_t)i * d + i, (size_t)(d - i))) return 0;
  return 1;
}

static int tri_finite(o3m_uplo t, int d, const double *A) {
  if (t == O3M_UPPER) return upper_finite(d, A);
  for (int i = 0; i < d; i++)
    if (!all_finite(A + (size_t)i * d, (size_t)i + 1)) return 0;
  return 1;
}

/* The worse of two findings: ECORRUPT > ENONFINITE > ENOTPD > OK. */
static int worse(int a, int b) {
  static const int order[] = {O3M_OK, O3M_ENOTPD, O3M_ENONFINITE, O3M_ECORRUPT};
  int ia = 0, ib = 0;
  for (int i = 0; i < 4; i++) {
    if (order[i] == a) ia = i;
    if (order[i] == b) ib = i;
  }
  return ia >= ib ? a : b;
}

/* Whether model m's exact statistics are sound: Lambda (stored part and
 * held rows) and u finite, and every diagonal entry of the stored Lambda at
 * least lambda (both hold by construction: sums of nonnegative terms; the
 * held rows only add to the diagonal). Returns the phrase naming the first
 * problem, or NULL. */
static const char *stats_problem(const ap_policy *p, int m) {
  int d = p->d;
  const double *L = model_mat(p->lambda_m, p, m);
  if (!upper_finite(d, L) || !all_finite(held_rows(p, m), (size_t)p->n_held[m] * d) ||
      !all_finite(p->u + (size_t)m * d, (size_t)d))
    return "Lambda or u is not finite";
  for (int i = 0; i < d; i++)
    if (!(L[(size_t)i * d + i] >= p->cfg.lambda))
      return "a diagonal entry of Lambda is below lambda";
  return NULL;
}

/* Checks model m (see ap_policy_health_check). scratch, when not NULL,
 * holds d x d doubles for the deep check. Writes the relative residuals'
 * maximum into *resid and a phrase into *what. */
static int check_model(ap_policy *p, int m, double *scratch, double *resid, const char **what) {
  int d = p->d;
  const double *L = model_mat(p->lambda_m, p, m);
  fac_view f = fac_of(p, m);
  const double *F = f.a; /* U for the Cholesky checks below: always upper */
  const double *u = p->u + (size_t)m * d, *th = p->theta + (size_t)m * d;
  *resid = 0;
  const char *bad = stats_problem(p, m);
  if (bad) {
    *what = bad;
    return O3M_ECORRUPT;
  }
  if (scratch) {
    /* The whole Lambda, held rows included, in the scratch copy only: the
     * check must not move the state's flushes. */
    memcpy(scratch, L, sizeof(double) * (size_t)d * d);
    if (p->n_held[m] > 0) o3m_syrk_t(d, p->n_held[m], 1.0, held_rows(p, m), scratch);
    if (o3m_potrf_upper(d, scratch)) {
      *what = "Lambda is not positive definite";
      return O3M_ECORRUPT;
    }
  }
  if (!tri_finite(f.t, d, F) || !all_finite(th, (size_t)d)) {
    *what = p->use_chol ? "U or theta is not finite" : "Ainv or theta is not finite";
    return O3M_ENONFINITE;
  }
  for (int i = 0; i < d; i++)
    if (!(F[(size_t)i * d + i] > 0)) {
      *what = p->use_chol ? "a diagonal entry of U is not positive"
                          : "a diagonal entry of Ainv is not positive";
      return O3M_ENOTPD;
    }
  /* A fixed probe vector with entries of both signs and different sizes. */
  double *pr = p->W, *w = p->z, *lp = p->work;
  for (int i = 0; i < d; i++) pr[i] = (i % 2 ? -1.0 : 1.0) * (1.0 + (double)(i % 5) / 8.0);
  double rel;
  if (p->use_chol) {
    /* ||U^T (U p) - Lambda p|| / ||Lambda p||, U read as upper triangular */
    lambda_apply(p, m, pr, lp);
    for (int i = 0; i < d; i++) {
      const double *ui = F + (size_t)i * d;
      double s = 0;
      for (int j = i; j < d; j++) s += ui[j] * pr[j];
      w[i] = s;
    }
    double num = 0;
    for (int j = 0; j < d; j++) {
      double s = 0;
      for (int i = 0; i <= j; i++) s += F[(size_t)i * d + j] * w[i];
      num += (s - lp[j]) * (s - lp[j]);
    }
    rel = sqrt(num) / o3m_nrm2(d, lp);
  } else {
    /* ||Lambda (Ainv p) - p|| / ||p|| */
    o3m_symv_tri(f.t, d, 1.0, F, pr, 0.0, w);
    lambda_apply(p, m, w, lp);
    o3m_axpy(d, -1.0, pr, lp);
    rel = o3m_nrm2(d, lp) / o3m_nrm2(d, pr);
  }
  *resid = rel;
  if (!(rel <= AP_POLICY_HEALTH_RTOL)) {
    *what = p->use_chol ? "U^T U disagrees with Lambda" : "Ainv is not the inverse of Lambda";
    return isfinite(rel) ? O3M_ENOTPD : O3M_ENONFINITE;
  }
  /* ||Lambda theta - u|| / max(||u||, ||Lambda theta||) */
  lambda_apply(p, m, th, lp);
  double scale = fmax(o3m_nrm2(d, u), o3m_nrm2(d, lp));
  o3m_axpy(d, -1.0, u, lp);
  rel = scale > 0 ? o3m_nrm2(d, lp) / scale : 0.0;
  if (rel > *resid) *resid = rel;
  if (!(rel <= AP_POLICY_HEALTH_RTOL)) {
    *what = "theta is not Lambda^{-1} u";
    return isfinite(rel) ? O3M_ENOTPD : O3M_ENONFINITE;
  }
  return O3M_OK;
}

int ap_policy_health_check(ap_policy *p, int flags, ap_policy_health *h) {
  ap_policy_health tmp;
  if (!h) h = &tmp;
  h->model = -1;
  h->n_bad = 0;
  h->code = O3M_OK;
  h->what = "";
  h->max_residual = 0;
  double *scratch = NULL;
  if (flags & AP_POLICY_HEALTH_DEEP) {
    scratch = malloc(sizeof(double) * (size_t)p->d * p->d);
    if (!scratch) return O3M_ENOMEM;
  }
  for (int m = 0; m < p->n_models; m++) {
    double resid;
    const char *what = "";
    int rc = check_model(p, m, scratch, &resid, &what);
    if (resid > h->max_residual || !isfinite(resid)) h->max_residual = resid;
    if (rc) {
      if (h->model < 0) {
        h->model = m;
        h->what = what;
      }
      h->n_bad++;
      h->code = worse(h->code, rc);
    }
  }
  free(scratch);
  return h->code;
}

int ap_policy_refactor(ap_policy *p, int model) {
  int lo = 0, hi = p->n_models;
  if (model != -1) {
    if (model < 0 || model >= p->n_models) return O3M_EINVAL;
    lo = model;
    hi = model + 1;
  }
  /* The same soundness conditions on Lambda and u as the health check:
   * refactorizing from damaged statistics would make the damage look
   * healthy. */
  for (int m = lo; m < hi; m++)
    if (stats_problem(p, m)) return O3M_ECORRUPT;
  p->kept_arm = -1;
  int rc = O3M_OK;
  for (int m = lo; m < hi; m++) {
    int r = refactor(p, m);
    if (r) {
      rc = r;
      continue;
    }
    update_theta(p, m);
  }
  return rc;
}
