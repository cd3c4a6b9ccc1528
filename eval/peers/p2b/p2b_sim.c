/* p2b_sim.c -- the P2B experiment (see p2b_sim.h).
 *
 * Every random choice comes from splitmix64 streams derived from the seed:
 * one for the environment's W, one for the encoder, one per agent (its
 * contexts and rewards), one for participation and one for the shuffler. A
 * test agent's stream is the same in the three settings, and each
 * interaction consumes the same number of draws whatever arm is played, so
 * the three settings see the same contexts and the same reward coins. */
#include "p2b_sim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "o3m_policy.h"
#include "o3m_splitmix.h"
#include "p2b_kmeans.h"
#include "p2b_privacy.h"
#include "p2b_shuffler.h"

/* The grid of normalized contexts has precision q = 1: tenths. */
#define P2B_GRID 10

void p2b_config_default(p2b_config *c) {
  memset(c, 0, sizeof *c);
  c->users = 1000;
  c->t = 10;
  c->k = 1024;
  c->kmeans_iters = 20;
  c->kmeans_points = 20000;
  c->l = 10;
  c->p = 0.5;
  c->neg_share = 0.05;
  c->train_frac = 0.7;
  c->alpha = 1.0;
  c->seed = 1;
}

typedef struct sim {
  const p2b_env *env;
  const p2b_config *cfg;
  int d, A;
  double *W;      /* A x d, synthetic mode */
  double *F;      /* A, softmax of the current context */
  double *x;      /* d, the current raw context */
  double *cand;   /* A x d candidate rows */
  double *log_x;  /* t x d, a participant's raw contexts */
  int *log_a;     /* t */
  double *log_r;  /* t */
  p2b_kmeans *km;
  o3m_policy *pol;
  size_t state_len;
  unsigned char *st_fresh, *st_server, *st_central;
} sim;

int p2b_normalize_q1(int d, double *x) {
  if (d < 1 || d > P2B_MAX_D) return O3M_EINVAL;
  double sum = 0;
  for (int j = 0; j < d; j++) sum += x[j] > 0 ? x[j] : 0;
  if (!(sum > 0 && isfinite(sum))) {
    for (int j = 0; j < d; j++) x[j] = 1.0 / d;
    sum = 1.0;
  }
  /* Tenths: floor each share, then hand the missing tenths to the largest
   * remainders (ties to the smaller index). */
  int tenth[P2B_MAX_D], left = P2B_GRID;
  double rem[P2B_MAX_D];
  for (int j = 0; j < d; j++) {
    double v = (x[j] > 0 ? x[j] : 0) / sum * P2B_GRID;
    tenth[j] = (int)floor(v);
    rem[j] = v - tenth[j];
    left -= tenth[j];
  }
  for (; left > 0; left--) {
    int best = 0;
    for (int j = 1; j < d; j++)
      if (rem[j] > rem[best]) best = j;
    tenth[best]++;
    rem[best] = -1;
  }
  for (int j = 0; j < d; j++) x[j] = tenth[j] / (double)P2B_GRID;
  return O3M_OK;
}

/* A uniform point of the grid: stars and bars, 10 stars and d - 1 bars in
 * a uniformly shuffled row (every arrangement equally likely). Consumes
 * exactly 8 + d draws. */
static void grid_point(uint64_t *s, int d, double *x) {
  int n = P2B_GRID + d - 1;
  unsigned char row[P2B_GRID + 64];
  for (int i = 0; i < n; i++) row[i] = i < P2B_GRID; /* 1 star, 0 bar */
  for (int i = n - 1; i > 0; i--) {
    int j = (int)(o3m_splitmix64(s) % (uint64_t)(i + 1));
    unsigned char t = row[i];
    row[i] = row[j];
    row[j] = t;
  }
  int part = 0, stars = 0;
  for (int i = 0; i < n; i++) {
    if (row[i]) {
      stars++;
    } else {
      x[part++] = stars / (double)P2B_GRID;
      stars = 0;
    }
  }
  x[part] = stars / (double)P2B_GRID;
}

/* d uniform values scaled to sum 1 (the artifact's contexts); d draws. */
static void uniform_point(uint64_t *s, int d, double *x) {
  double sum = 0;
  for (int j = 0; j < d; j++) sum += (x[j] = o3m_splitmix64_unif(s));
  if (!(sum > 0)) sum = 1.0; /* d draws of exactly 0: an all-zero context */
  for (int j = 0; j < d; j++) x[j] /= sum;
}

/* A synthetic context of the environment's kind. */
static void env_point(const p2b_env *env, uint64_t *s, double *x) {
  if (env->ctx == P2B_CTX_GRID)
    grid_point(s, env->d, x);
  else
    uniform_point(s, env->d, x);
}

/* Draws the next interaction's context into s->x; returns the label (data
 * set) or -1 (synthetic, F filled: W x, then its softmax if the map is). */
static int draw_context(sim *s, uint64_t *st) {
  const p2b_env *env = s->env;
  if (env->label) {
    long i = (long)(o3m_splitmix64_unif(st) * (double)env->n_pool);
    memcpy(s->x, env->X + (size_t)i * s->d, (size_t)s->d * sizeof *s->x);
    return env->label[i];
  }
  env_point(env, st, s->x);
  double mx = -INFINITY, sum = 0;
  for (int a = 0; a < s->A; a++) {
    double z = 0;
    for (int j = 0; j < s->d; j++) z += s->W[(size_t)a * s->d + j] * s->x[j];
    s->F[a] = z;
    if (z > mx) mx = z;
  }
  if (env->map == P2B_MAP_LINEAR) return -1;
  for (int a = 0; a < s->A; a++) sum += (s->F[a] = exp(s->F[a] - mx));
  for (int a = 0; a < s->A; a++) s->F[a] /= sum;
  return -1;
}

/* The reward of arm a for the current interaction; consumes 3 draws. */
static double draw_reward(sim *s, uint64_t *st, int label, int a) {
  double g1, g2;
  o3m_splitmix64_gauss2(st, &g1, &g2);
  double u = o3m_splitmix64_unif(st);
  if (label >= 0) return a == label ? 1.0 : 0.0;
  double m = s->env->beta * (s->F[a] + s->env->sigma * g1);
  return u < m ? 1.0 : 0.0;
}

/* One agent's t interactions with policy pol, first set to model state init
 * (NULL: pol goes on from where it is); on_codes makes the agent act on the
 * centroid of the context's code. Logs the raw contexts, arms and rewards
 * when log is set. Adds the rewards to *total. */
static int run_agent(sim *s, o3m_policy *pol, const unsigned char *init, int on_codes,
                     uint64_t stream, int log, double *total, o3m_err *e) {
  int rc = init ? o3m_policy_state_import(pol, init, s->state_len, e) : O3M_OK;
  if (rc) return rc;
  uint64_t st = stream;
  for (int i = 0; i < s->cfg->t; i++) {
    int label = draw_context(s, &st);
    const double *ctx = s->x;
    if (on_codes) ctx = p2b_kmeans_centroid(s->km, p2b_kmeans_encode(s->km, s->x));
    for (int a = 0; a < s->A; a++) memcpy(s->cand + (size_t)a * s->d, ctx, (size_t)s->d * sizeof *ctx);
    int a;
    if ((rc = o3m_policy_choose(pol, s->A, s->cand, NULL, &a, NULL)))
      return o3m_err_set(e, rc, "p2b: an agent could not choose: %s", o3m_strerror(rc));
    double r = draw_reward(s, &st, label, a);
    if ((rc = o3m_policy_update(pol, a, ctx, r)))
      return o3m_err_set(e, rc, "p2b: an agent could not learn: %s", o3m_strerror(rc));
    *total += r;
    if (log) {
      memcpy(s->log_x + (size_t)i * s->d, s->x, (size_t)s->d * sizeof *s->x);
      s->log_a[i] = a;
      s->log_r[i] = r;
    }
  }
  return O3M_OK;
}

static int check_cfg(const p2b_env *env, const p2b_config *c, o3m_err *e) {
  if (env->d < 1 || env->d > 54 || env->n_arms < 2)
    return o3m_err_set(e, O3M_EINVAL, "p2b: need 1 <= d <= 54 and at least 2 arms (got d %d, %d arms)",
                       env->d, env->n_arms);
  if (env->label && env->n_pool < 1) return o3m_err_set(e, O3M_EINVAL, "p2b: the data set is empty");
  if (c->users < 2 || c->t < 1)
    return o3m_err_set(e, O3M_EINVAL, "p2b: need users >= 2 and t >= 1 (got %d, %d)", c->users, c->t);
  if (c->k < 1 || c->kmeans_iters < 1 || c->l < 1)
    return o3m_err_set(e, O3M_EINVAL, "p2b: need k, kmeans iterations and l >= 1");
  if (!(c->neg_share >= 0 && c->neg_share <= 1))
    return o3m_err_set(e, O3M_EINVAL, "p2b: neg_share %g is not in [0, 1]", c->neg_share);
  if (!(c->train_frac > 0 && c->train_frac < 1))
    return o3m_err_set(e, O3M_EINVAL, "p2b: train fraction %g is not in (0, 1)", c->train_frac);
  if (c->warm_shared != 0 && c->warm_shared != 1)
    return o3m_err_set(e, O3M_EINVAL, "p2b: warm_shared %d is not 0 or 1", c->warm_shared);
  if (!env->label && (env->map != P2B_MAP_LINEAR && env->map != P2B_MAP_SOFTMAX))
    return o3m_err_set(e, O3M_EINVAL, "p2b: unknown synthetic preference map %d", (int)env->map);
  if (!env->label && (env->ctx != P2B_CTX_UNIFORM && env->ctx != P2B_CTX_GRID))
    return o3m_err_set(e, O3M_EINVAL, "p2b: unknown synthetic context kind %d", (int)env->ctx);
  if (!env->label && !(env->beta >= 0 && env->beta <= 1 && env->sigma >= 0 && isfinite(env->sigma)))
    return o3m_err_set(e, O3M_EINVAL, "p2b: need 0 <= beta <= 1 and a finite sigma >= 0 (got %g, %g)",
                       env->beta, env->sigma);
  if (!(c->alpha >= 0 && isfinite(c->alpha)))
    return o3m_err_set(e, O3M_EINVAL, "p2b: alpha %g is not finite and >= 0", c->alpha);
  int ntrain = (int)(c->train_frac * c->users);
  if (ntrain < 1 || ntrain >= c->users)
    return o3m_err_set(e, O3M_EINVAL, "p2b: %d users leave no participant or no test agent",
                       c->users);
  return O3M_OK;
}

static void sim_free(sim *s) {
  free(s->st_central);
  free(s->st_server);
  free(s->st_fresh);
  o3m_policy_destroy(s->pol);
  p2b_kmeans_destroy(s->km);
  free(s->log_r);
  free(s->log_a);
  free(s->log_x);
  free(s->cand);
  free(s->x);
  free(s->F);
  free(s->W);
}

int p2b_sim_run(const p2b_env *env, const p2b_config *cfg, p2b_result *res, o3m_err *e) {
  double eps;
  int rc = check_cfg(env, cfg, e);
  if (rc) return rc;
  if ((rc = p2b_epsilon(cfg->p, 0.0, &eps, e))) return rc;
  sim s = {.env = env, .cfg = cfg, .d = env->d, .A = env->n_arms};
  int d = s.d, A = s.A, t = cfg->t;
  s.W = malloc((size_t)A * d * sizeof *s.W);
  s.F = malloc((size_t)A * sizeof *s.F);
  s.x = malloc((size_t)d * sizeof *s.x);
  s.cand = malloc((size_t)A * d * sizeof *s.cand);
  s.log_x = malloc((size_t)t * d * sizeof *s.log_x);
  s.log_a = malloc((size_t)t * sizeof *s.log_a);
  s.log_r = malloc((size_t)t * sizeof *s.log_r);
  p2b_shuffler *sh = NULL;
  o3m_policy *server = NULL, *central = NULL;
  double *pts = NULL;
  if (!s.W || !s.F || !s.x || !s.cand || !s.log_x || !s.log_a || !s.log_r) {
    rc = o3m_err_set(e, O3M_ENOMEM, "p2b: out of memory");
    goto out;
  }
  /* W: Glorot-uniform, limit sqrt(6 / (fan_in + fan_out)); b = 0. */
  uint64_t ws = o3m_splitmix64_stream(cfg->seed, 1, 0);
  double lim = sqrt(6.0 / (d + A));
  for (long i = 0; i < (long)A * d; i++) s.W[i] = (2.0 * o3m_splitmix64_unif(&ws) - 1.0) * lim;

  /* The encoder, trained on the pool or on fresh grid points. */
  if (env->label) {
    if (cfg->k > env->n_pool) {
      rc = o3m_err_set(e, O3M_EINVAL, "p2b: k = %d codes but the data set has only %ld rows",
                       cfg->k, env->n_pool);
      goto out;
    }
    rc = p2b_kmeans_train(&s.km, env->X, env->n_pool, d, cfg->k, cfg->kmeans_iters,
                          o3m_splitmix64_stream(cfg->seed, 2, 0), e);
  } else {
    long n = cfg->kmeans_points;
    if (n < cfg->k) {
      rc = o3m_err_set(e, O3M_EINVAL, "p2b: k = %d codes need at least as many training points (%ld)",
                       cfg->k, n);
      goto out;
    }
    pts = malloc((size_t)n * d * sizeof *pts);
    if (!pts) {
      rc = o3m_err_set(e, O3M_ENOMEM, "p2b: out of memory for %ld encoder points", n);
      goto out;
    }
    uint64_t ps = o3m_splitmix64_stream(cfg->seed, 3, 0);
    /* On the grid whatever the contexts are, as P2B's encoder (section
     * 3.2) and its artifact (k-means over every grid point) are built:
     * uniform contexts crowd the middle of the simplex, so their codes are
     * unevenly used and more of them pass the threshold. */
    for (long i = 0; i < n; i++) grid_point(&ps, d, pts + (size_t)i * d);
    rc = p2b_kmeans_train(&s.km, pts, n, d, cfg->k, cfg->kmeans_iters,
                          o3m_splitmix64_stream(cfg->seed, 2, 0), e);
  }
  if (rc) goto out;

  o3m_policy_config pc;
  o3m_policy_config_default(&pc);
  pc.algo = O3M_ALGO_LINUCB;
  pc.model = O3M_MODEL_DISJOINT;
  pc.d = d;
  pc.n_arms = A;
  pc.max_candidates = A;
  pc.alpha = cfg->alpha;
  if ((rc = o3m_policy_create(&s.pol, &pc, e)) || (rc = o3m_policy_create(&server, &pc, e)) ||
      (rc = o3m_policy_create(&central, &pc, e)))
    goto out;
  s.state_len = o3m_policy_state_size(s.pol);
  s.st_fresh = malloc(s.state_len);
  s.st_server = malloc(s.state_len);
  s.st_central = malloc(s.state_len);
  int ntrain = (int)(cfg->train_frac * cfg->users);
  if (!s.st_fresh || !s.st_server || !s.st_central) {
    rc = o3m_err_set(e, O3M_ENOMEM, "p2b: out of memory for model images");
    goto out;
  }
  if ((rc = o3m_policy_state_export(s.pol, s.st_fresh, s.state_len))) goto out;
  if ((rc = p2b_shuffler_create(&sh, cfg->k, cfg->l, ntrain,
                                o3m_splitmix64_stream(cfg->seed, 4, 0), e)))
    goto out;

  /* Participants: cold agents. One that elects to participate (probability
   * p) shares one tuple: with probability neg_share one of its reward-0
   * tuples, otherwise one of its rewarded tuples (a reward-0 one if it has
   * none), as P2B's artifact does. The private server receives it encoded
   * through the shuffler; the non-private central agent receives the same
   * tuple raw. */
  p2b_result r = {.epsilon = eps, .participants = ntrain};
  uint64_t part = o3m_splitmix64_stream(cfg->seed, 5, 0);
  for (int u = 0; u < ntrain; u++) {
    double ignored = 0;
    if ((rc = run_agent(&s, s.pol, s.st_fresh, 0, o3m_splitmix64_stream(cfg->seed, 6, (uint64_t)u),
                        1, &ignored, e)))
      goto out;
    double u1 = o3m_splitmix64_unif(&part), u2 = o3m_splitmix64_unif(&part);
    double u3 = o3m_splitmix64_unif(&part);
    if (u1 >= cfg->p) continue;
    int n1 = 0;
    for (int i = 0; i < t; i++) n1 += s.log_r[i] != 0.0;
    int want_pos = !(u2 < cfg->neg_share) && n1 > 0;
    if (!want_pos && u2 < cfg->neg_share && n1 == t) continue; /* no reward-0 tuple to share */
    int pick = (int)(u3 * (want_pos ? n1 : t - n1)), j = -1;
    for (int i = 0; i < t && pick >= 0; i++)
      if ((s.log_r[i] != 0.0) == want_pos && pick-- == 0) j = i;
    const double *xj = s.log_x + (size_t)j * d;
    if ((rc = o3m_policy_update(central, s.log_a[j], xj, s.log_r[j]))) goto fail_rc;
    r.central_updates++;
    p2b_tuple tu = {p2b_kmeans_encode(s.km, xj), s.log_a[j], s.log_r[j]};
    if ((rc = p2b_shuffler_add(sh, &tu, e))) goto out;
    r.shared++;
  }
  const p2b_tuple *rel;
  p2b_shuffler_release(sh, &rel, &r.released, &r.dropped);
  for (long i = 0; i < r.released; i++)
    if ((rc = o3m_policy_update(server, rel[i].action, p2b_kmeans_centroid(s.km, rel[i].code),
                                rel[i].reward)))
      goto fail_rc;
  if ((rc = o3m_policy_state_export(server, s.st_server, s.state_len)) ||
      (rc = o3m_policy_state_export(central, s.st_central, s.state_len)))
    goto fail_rc;

  /* Test agents: the same stream in the three settings. Shared warm
   * agents are the server and central models themselves, learning on. */
  double cold = 0, priv = 0, cent = 0;
  int sh_w = cfg->warm_shared;
  for (int u = ntrain; u < cfg->users; u++) {
    uint64_t st = o3m_splitmix64_stream(cfg->seed, 6, (uint64_t)u);
    if ((rc = run_agent(&s, s.pol, s.st_fresh, 0, st, 0, &cold, e)) ||
        (rc = run_agent(&s, sh_w ? server : s.pol, sh_w ? NULL : s.st_server, 1, st, 0, &priv, e)) ||
        (rc = run_agent(&s, sh_w ? central : s.pol, sh_w ? NULL : s.st_central, 0, st, 0, &cent, e)))
      goto out;
  }
  r.test_interactions = (long)(cfg->users - ntrain) * t;
  r.cold = cold / (double)r.test_interactions;
  r.warm_private = priv / (double)r.test_interactions;
  r.warm_central = cent / (double)r.test_interactions;
  *res = r;
  rc = O3M_OK;
  goto out;
fail_rc:
  o3m_err_set(e, rc, "p2b: the server or central model failed: %s", o3m_strerror(rc));
out:
  p2b_shuffler_destroy(sh);
  o3m_policy_destroy(central);
  o3m_policy_destroy(server);
  free(pts);
  sim_free(&s);
  return rc;
}
