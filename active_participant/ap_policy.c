/* ap_policy.c -- LinUCB and linear Thompson sampling over ridge statistics.
 *
 * State per model (one model when shared, one per arm when disjoint):
 *   Lambda  lambda I + sum x x^T, exact (upper triangle), used to refactorize;
 *   u       sum r x;
 *   theta   Lambda^{-1} u;
 *   and either Ainv = Lambda^{-1} (updated by Sherman-Morrison) or the
 *   Cholesky factor U with Lambda = U^T U (updated by a rank-one cholupdate).
 *
 * Which of Ainv or U a model keeps depends on what its scoring needs:
 *   shared LinUCB   Ainv: all K widths from one dsymm, W = X Ainv.
 *   shared LinTS    U: mu = theta + v U^{-1} z with z ~ N(0, I_d), one
 *                   triangular solve, then scores X mu.
 *   disjoint both   Ainv per arm. For LinTS, candidate k's score depends only
 *                   on its own arm's mu_a, and the arms' draws are
 *                   independent, so x^T mu_a ~ N(x^T theta_a, v^2 x^T Ainv_a x)
 *                   is drawn directly as a scalar: the same joint
 *                   distribution of scores as drawing each mu_a, at O(1)
 *                   random numbers per candidate instead of O(d).
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

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "o3m_blas.h"
#include "o3m_rank1.h"
#include "o3m_rng.h"

struct ap_policy {
  ap_policy_config cfg;
  int d;
  int n_models;
  int use_chol; /* 1: models keep U; 0: models keep Ainv */
  double *lambda_m; /* n_models x d x d */
  double *fac;      /* n_models x d x d: Ainv or U */
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

/* Recomputes Ainv or U of model m exactly from its Lambda, and theta. */
static int refactor(ap_policy *p, int m) {
  int d = p->d;
  double *L = model_mat(p->lambda_m, p, m), *F = model_mat(p->fac, p, m);
  int rc = p->use_chol ? o3m_chol_factor(d, L, F) : o3m_spd_inverse(d, L, F);
  p->since_refactor[m] = 0;
  return rc;
}

/* theta_m = Lambda_m^{-1} u_m from the model's current Ainv or U. */
static void update_theta(ap_policy *p, int m) {
  int d = p->d;
  double *F = model_mat(p->fac, p, m), *th = p->theta + (size_t)m * d;
  const double *u = p->u + (size_t)m * d;
  if (p->use_chol) {
    /* theta = U^{-1} U^{-T} u */
    o3m_copy(d, u, th);
    o3m_trsv_upper_t(d, F, th);
    o3m_trsv_upper(d, F, th);
  } else {
    /* theta = Ainv u */
    o3m_symv(d, 1.0, F, u, 0.0, th);
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
  p->fac = calloc(n * d * d, sizeof(double));
  p->u = calloc(n * d, sizeof(double));
  p->theta = calloc(n * d, sizeof(double));
  p->since_refactor = calloc(n, sizeof(int));
  p->W = malloc(kmax * d * sizeof(double));
  p->mean = malloc(kmax * sizeof(double));
  p->var = malloc(kmax * sizeof(double));
  p->score = malloc(kmax * sizeof(double));
  p->z = malloc(zlen * sizeof(double));
  p->work = malloc(d * sizeof(double));
  if (!p->lambda_m || !p->fac || !p->u || !p->theta || !p->since_refactor || !p->W ||
      !p->mean || !p->var || !p->score || !p->z || !p->work) {
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
    refactor(p, (int)m); /* lambda I is positive definite: cannot fail */
  }
  *out = p;
  return O3M_OK;
}

void ap_policy_destroy(ap_policy *p) {
  if (!p) return;
  o3m_rng_destroy(p->rng);
  free(p->lambda_m);
  free(p->fac);
  free(p->u);
  free(p->theta);
  free(p->since_refactor);
  free(p->W);
  free(p->mean);
  free(p->var);
  free(p->score);
  free(p->z);
  free(p->work);
  free(p);
}

const ap_policy_config *ap_policy_config_of(const ap_policy *p) { return &p->cfg; }
uint64_t ap_policy_updates(const ap_policy *p) { return p->updates; }

static int check_inputs(const ap_policy *p, int K, const double *X, const int *arms) {
  if (K < 1 || K > p->cfg.max_candidates) return O3M_EINVAL;
  if (p->cfg.model == AP_MODEL_DISJOINT)
    for (int k = 0; k < K; k++) {
      int a = arms ? arms[k] : k;
      if (a < 0 || a >= p->n_models) return O3M_EINVAL;
    }
  for (size_t i = 0; i < (size_t)K * p->d; i++)
    if (!isfinite(X[i])) return O3M_ENONFINITE;
  return O3M_OK;
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
      /* W = X Ainv; var_k = W_k . x_k */
      o3m_symm_right(K, d, 1.0, p->fac, X, 0.0, p->W);
      for (int k = 0; k < K; k++)
        var[k] = o3m_dot(d, p->W + (size_t)k * d, X + (size_t)k * d);
    }
    return;
  }
  for (int k = 0; k < K; k++) {
    int a = arms ? arms[k] : k;
    const double *x = X + (size_t)k * d;
    /* w = Ainv_a x; var = x . w; mean = x . theta_a */
    o3m_symv(d, 1.0, model_mat(p->fac, p, a), x, 0.0, p->work);
    var[k] = o3m_dot(d, x, p->work);
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
  if (p->cfg.algo == AP_ALGO_LINUCB) {
    compute_stats(p, K, X, arms, p->mean, p->var);
    for (int k = 0; k < K; k++)
      s[k] = p->mean[k] + p->cfg.alpha * sqrt(p->var[k] > 0 ? p->var[k] : 0);
  } else if (p->cfg.model == AP_MODEL_SHARED) {
    /* mu = theta + v U^{-1} z, z ~ N(0, I); scores = X mu */
    rc = o3m_rng_gaussian(p->rng, p->z, d);
    if (rc) return rc;
    o3m_trsv_upper(d, p->fac, p->z);
    o3m_scal(d, p->cfg.v, p->z);
    o3m_axpy(d, 1.0, p->theta, p->z);
    o3m_gemv(K, d, 1.0, X, p->z, 0.0, s);
  } else {
    /* score_k = mean_k + v sqrt(var_k) z_k, z_k ~ N(0, 1) */
    compute_stats(p, K, X, arms, p->mean, p->var);
    rc = o3m_rng_gaussian(p->rng, p->z, K);
    if (rc) return rc;
    for (int k = 0; k < K; k++)
      s[k] = p->mean[k] + p->cfg.v * sqrt(p->var[k] > 0 ? p->var[k] : 0) * p->z[k];
  }
  for (int k = 0; k < K; k++)
    if (!isfinite(s[k])) return O3M_ENONFINITE;
  int c = argmax_ties_low(s, K);
  *chosen = c;
  if (score) *score = s[c];
  return O3M_OK;
}

int ap_policy_update(ap_policy *p, int arm, const double *x, double reward) {
  int m = 0;
  if (p->cfg.model == AP_MODEL_DISJOINT) {
    if (arm < 0 || arm >= p->n_models) return O3M_EINVAL;
    m = arm;
  }
  int d = p->d;
  if (!isfinite(reward)) return O3M_ENONFINITE;
  for (int i = 0; i < d; i++)
    if (!isfinite(x[i])) return O3M_ENONFINITE;
  /* Lambda += x x^T; u += r x */
  o3m_syr(d, 1.0, x, model_mat(p->lambda_m, p, m));
  o3m_axpy(d, reward, x, p->u + (size_t)m * d);
  int rc;
  if (++p->since_refactor[m] >= p->cfg.refactor_every) {
    rc = refactor(p, m);
  } else {
    double *F = model_mat(p->fac, p, m);
    rc = p->use_chol ? o3m_chol_update(d, F, x, p->work)
                     : o3m_sherman_morrison(d, F, x, p->work);
    /* Lost definiteness in the rank-one path: the exact statistics already
     * hold this observation, so refactorizing from them loses nothing. */
    if (rc == O3M_ENOTPD) rc = refactor(p, m);
  }
  if (rc) return rc;
  update_theta(p, m);
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
