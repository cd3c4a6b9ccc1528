/* o3m.c -- the installed C API (include/o3m/o3m.h) over the internal
 * modules.
 *
 * Each public handle wraps one internal object: o3m_engine an o3m_policy
 * (policy/o3m_policy.h), o3m_ap_client an ap_client opened by
 * ap_client_open (active_participant/ap_client.h), the function o3m-cli
 * opens its client with, so the library and the command line accept and
 * refuse the same connections. The facade adds only what a stable API
 * needs: the "key=value" option lists (parsed here, once, by opt_each),
 * an o3m_err on every call that can fail, and public structs copied from
 * the internal ones. Everything allocated here is freed by the matching
 * destroy or close; a failing create or open leaves nothing allocated.
 *
 * The shared library exports only the names of o3m.h and o3m_error.h
 * (lib/o3m.map); the static one carries the internal modules' names too,
 * which callers must not use. */
#include "o3m/o3m.h"
#include "o3m_alloc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ap_client.h"
#include "o3m_cli.h"
#include "o3m_config.h"
#include "o3m_limits.h"
#include "o3m_policy.h"
#include "o3m_version.h"

struct o3m_engine {
  o3m_policy *p;
};

struct o3m_ap_client {
  ap_client *c;
  o3m_config *cfg; /* the loaded config the client's strings point into, or NULL */
  /* The last recommendation's degraded answer (o3m_ap_client_degraded). */
  int degraded;
  char missing[256];
  /* The last Stats answer's view (o3m_ap_client_stats_per_client). */
  int per_client;
  char client[O3M_CONFIG_MAX_NAME + 1];
};

const char *o3m_version(void) { return O3M_VERSION; }

int o3m_protocol_version(void) { return O3M_VERSION_PROTOCOL; }

/* ---- option lists -------------------------------------------------------- */

/* Longest key accepted; keys are short words. */
#define OPT_KEY_MAX 32

typedef int (*opt_fn)(void *ctx, const char *key, const char *value, o3m_err *e);

/* Calls fn for every "key=value" of the NULL-terminated list opts (NULL is
 * an empty list). A string without '=' is the key with the value "1", so
 * "insecure" reads as "insecure=1". Stops at the first error, which names
 * the option. */
static int opt_each(const char *const *opts, opt_fn fn, void *ctx, o3m_err *e) {
  for (size_t i = 0; opts && opts[i]; i++) {
    const char *s = opts[i], *eq = strchr(s, '=');
    size_t n = eq ? (size_t)(eq - s) : strlen(s);
    if (n == 0 || n > OPT_KEY_MAX)
      return o3m_err_set(e, O3M_EINVAL, "option %zu '%s' is not key=value", i, s);
    char key[OPT_KEY_MAX + 1];
    memcpy(key, s, n);
    key[n] = '\0';
    int rc = fn(ctx, key, eq ? eq + 1 : "1", e);
    if (rc < 0) return rc;
  }
  return 0;
}

static int opt_long(const char *key, const char *v, long long lo, long long hi, long long *out,
                    o3m_err *e) {
  if (o3m_cli_parse_long(v, lo, hi, out) < 0)
    return o3m_err_set(e, O3M_EINVAL, "option %s: '%s' is not an integer in %lld..%lld", key,
                       v, lo, hi);
  return 0;
}

static int opt_double(const char *key, const char *v, double *out, o3m_err *e) {
  char *end;
  *out = strtod(v, &end);
  if (!*v || *end || !isfinite(*out))
    return o3m_err_set(e, O3M_EINVAL, "option %s: '%s' is not a finite number", key, v);
  return 0;
}

static int opt_bool(const char *key, const char *v, int *out, o3m_err *e) {
  if (!strcmp(v, "1") || !strcmp(v, "true")) *out = 1;
  else if (!strcmp(v, "0") || !strcmp(v, "false")) *out = 0;
  else return o3m_err_set(e, O3M_EINVAL, "option %s: '%s' is not 1, 0, true or false", key, v);
  return 0;
}

/* ---- the engine ---------------------------------------------------------- */

static int engine_opt(void *ctx, const char *key, const char *v, o3m_err *e) {
  o3m_policy_config *c = ctx;
  long long n;
  unsigned long long u;
  int rc = 0;
  if (!strcmp(key, "algo")) {
    if (o3m_algo_parse(v, &c->algo) < 0)
      rc = o3m_err_set(e, O3M_EINVAL, "option algo: '%s' is not linucb or lints", v);
  } else if (!strcmp(key, "model")) {
    if (o3m_model_parse(v, &c->model) < 0)
      rc = o3m_err_set(e, O3M_EINVAL, "option model: '%s' is not shared or disjoint", v);
  } else if (!strcmp(key, "d")) {
    if ((rc = opt_long(key, v, 1, 1 << 30, &n, e)) == 0) c->d = (int)n;
  } else if (!strcmp(key, "n_arms")) {
    if ((rc = opt_long(key, v, 1, 1 << 30, &n, e)) == 0) c->n_arms = (int)n;
  } else if (!strcmp(key, "max_candidates")) {
    if ((rc = opt_long(key, v, 1, 1 << 30, &n, e)) == 0) c->max_candidates = (int)n;
  } else if (!strcmp(key, "refactor_every")) {
    if ((rc = opt_long(key, v, 1, 2147483647, &n, e)) == 0) c->refactor_every = (int)n;
  } else if (!strcmp(key, "lambda")) {
    rc = opt_double(key, v, &c->lambda, e);
  } else if (!strcmp(key, "alpha")) {
    rc = opt_double(key, v, &c->alpha, e);
  } else if (!strcmp(key, "v")) {
    rc = opt_double(key, v, &c->v, e);
  } else if (!strcmp(key, "seed")) {
    if (o3m_cli_parse_u64(v, &u) < 0)
      rc = o3m_err_set(e, O3M_EINVAL, "option seed: '%s' is not in 0..2^64-1", v);
    else
      c->seed = u;
  } else {
    rc = o3m_err_set(e, O3M_EINVAL,
                     "unknown engine option '%s' (algo, model, d, n_arms, max_candidates, "
                     "lambda, alpha, v, seed, refactor_every)", key);
  }
  return rc;
}

int o3m_engine_create(o3m_engine **out, const char *const *options, o3m_err *e) {
  if (!out) return o3m_err_set(e, O3M_EINVAL, "out is NULL");
  *out = NULL;
  o3m_policy_config cfg;
  o3m_policy_config_default(&cfg);
  int rc = opt_each(options, engine_opt, &cfg, e);
  if (rc < 0) return rc;
  if (cfg.d == 0) return o3m_err_set(e, O3M_EINVAL, "%s", "option d (the dimension) is required");
  if (cfg.model == O3M_MODEL_DISJOINT && cfg.n_arms == 0)
    return o3m_err_set(e, O3M_EINVAL, "%s", "model=disjoint needs option n_arms");
  o3m_engine *g = o3m_calloc(1, sizeof *g);
  if (!g) return o3m_err_set(e, O3M_ENOMEM, "%s", "no memory for the engine");
  rc = o3m_policy_create(&g->p, &cfg, e);
  if (rc < 0) {
    o3m_free(g);
    return rc;
  }
  *out = g;
  return 0;
}

void o3m_engine_destroy(o3m_engine *g) {
  if (!g) return;
  o3m_policy_destroy(g->p);
  o3m_free(g);
}

int o3m_engine_dim(const o3m_engine *g) { return o3m_policy_config_of(g->p)->d; }

int o3m_engine_n_models(const o3m_engine *g) { return o3m_policy_n_models(g->p); }

int o3m_engine_max_candidates(const o3m_engine *g) {
  return o3m_policy_config_of(g->p)->max_candidates;
}

uint64_t o3m_engine_updates(const o3m_engine *g) { return o3m_policy_updates(g->p); }

/* The internal engine returns bare codes where the facade promises a
 * message: this names what was refused, looking only after the failure. */
static int engine_fail(const o3m_engine *g, int rc, const char *call, int K, o3m_err *e) {
  const o3m_policy_config *c = o3m_policy_config_of(g->p);
  if (rc == O3M_EINVAL && (K < 1 || K > c->max_candidates))
    return o3m_err_set(e, rc, "%s: K = %d candidates, expected 1..%d", call, K,
                       c->max_candidates);
  if (rc == O3M_EINVAL)
    return o3m_err_set(e, rc, "%s: an arm is not in 0..%d", call, o3m_policy_n_models(g->p) - 1);
  if (rc == O3M_ENONFINITE)
    return o3m_err_set(e, rc, "%s: a context value is not finite (or overflows)", call);
  return o3m_err_set(e, rc, "%s: %s", call, o3m_strerror(rc));
}

int o3m_engine_choose(o3m_engine *g, int K, const double *X, const int *arms, int *chosen,
                      double *score, o3m_err *e) {
  if (!g || !X || !chosen) return o3m_err_set(e, O3M_EINVAL, "%s", "choose: NULL argument");
  int rc = o3m_policy_choose(g->p, K, X, arms, chosen, score);
  return rc < 0 ? engine_fail(g, rc, "choose", K, e) : 0;
}

int o3m_engine_scores(o3m_engine *g, int K, const double *X, const int *arms, double *mean,
                      double *var, o3m_err *e) {
  if (!g || !X) return o3m_err_set(e, O3M_EINVAL, "%s", "scores: NULL argument");
  int rc = o3m_policy_stats(g->p, K, X, arms, mean, var);
  return rc < 0 ? engine_fail(g, rc, "scores", K, e) : 0;
}

int o3m_engine_update(o3m_engine *g, int arm, const double *x, double reward, o3m_err *e) {
  if (!g || !x) return o3m_err_set(e, O3M_EINVAL, "%s", "update: NULL argument");
  const char *what = NULL;
  int rc = o3m_policy_update_check(g->p, arm, x, reward, &what);
  if (rc == O3M_EINVAL)
    return o3m_err_set(e, rc, "update: arm %d is not in 0..%d", arm,
                       o3m_policy_n_models(g->p) - 1);
  if (rc < 0) return o3m_err_set(e, rc, "update refused: %s", what ? what : o3m_strerror(rc));
  rc = o3m_policy_update(g->p, arm, x, reward);
  return rc < 0 ? engine_fail(g, rc, "update", 1, e) : 0;
}

int o3m_engine_theta(const o3m_engine *g, int arm, double *theta, o3m_err *e) {
  if (!g || !theta) return o3m_err_set(e, O3M_EINVAL, "%s", "theta: NULL argument");
  int rc = o3m_policy_theta(g->p, arm, theta);
  return rc < 0 ? o3m_err_set(e, rc, "theta: arm %d is not in 0..%d", arm,
                              o3m_policy_n_models(g->p) - 1)
                : 0;
}

size_t o3m_engine_state_size(const o3m_engine *g) { return o3m_policy_state_size(g->p); }

int o3m_engine_state_export(const o3m_engine *g, void *buf, size_t len, o3m_err *e) {
  if (!g || !buf) return o3m_err_set(e, O3M_EINVAL, "%s", "state export: NULL argument");
  int rc = o3m_policy_state_export(g->p, buf, len);
  return rc < 0 ? o3m_err_set(e, rc, "state export: the buffer holds %zu bytes, the state %zu",
                              len, o3m_policy_state_size(g->p))
                : 0;
}

int o3m_engine_state_import(o3m_engine *g, const void *buf, size_t len, o3m_err *e) {
  if (!g || !buf) return o3m_err_set(e, O3M_EINVAL, "%s", "state import: NULL argument");
  return o3m_policy_state_import(g->p, buf, len, e);
}

/* ---- the client ---------------------------------------------------------- */

static int client_opt(void *ctx, const char *key, const char *v, o3m_err *e) {
  ap_client_conn *a = ctx;
  const char **slot = !strcmp(key, "config")        ? &a->config
                      : !strcmp(key, "as")          ? &a->as
                      : !strcmp(key, "cert")        ? &a->cert
                      : !strcmp(key, "key")         ? &a->key
                      : !strcmp(key, "ca")          ? &a->ca
                      : !strcmp(key, "target")      ? &a->target
                      : !strcmp(key, "server-name") ? &a->server_name
                                                    : NULL;
  if (slot) {
    *slot = v;
    return 0;
  }
  long long n;
  int rc;
  if (!strcmp(key, "deadline-ms")) {
    if ((rc = opt_long(key, v, 1, 86400000, &n, e)) == 0) a->deadline_ms = (int)n;
    return rc;
  }
  if (!strcmp(key, "insecure")) return opt_bool(key, v, &a->insecure, e);
  if (!strcmp(key, "wait-for-ready")) return opt_bool(key, v, &a->wait_for_ready, e);
  return o3m_err_set(e, O3M_EINVAL,
                     "unknown client option '%s' (config, as, cert, key, ca, target, "
                     "server-name, deadline-ms, wait-for-ready, insecure)", key);
}

int o3m_ap_client_open(o3m_ap_client **out, const char *const *options, o3m_err *e) {
  if (!out) return o3m_err_set(e, O3M_EINVAL, "out is NULL");
  *out = NULL;
  /* The values point into the caller's strings, which need to live only
   * through this call: ap_client_open copies what the client keeps, and
   * the config it loads owns the rest. */
  ap_client_conn conn;
  memset(&conn, 0, sizeof conn);
  int rc = opt_each(options, client_opt, &conn, e);
  if (rc < 0) return rc;
  o3m_ap_client *c = o3m_calloc(1, sizeof *c);
  if (!c) return o3m_err_set(e, O3M_ENOMEM, "%s", "no memory for the client");
  rc = ap_client_open(&c->c, &c->cfg, &conn, e);
  if (rc < 0) {
    o3m_free(c);
    return rc;
  }
  *out = c;
  return 0;
}

void o3m_ap_client_close(o3m_ap_client *c) {
  if (!c) return;
  ap_client_destroy(c->c);
  o3m_config_destroy(c->cfg);
  o3m_free(c);
}

_Static_assert(O3M_API_MAX_ID == O3M_MAX_ID, "o3m.h's id limit is the federation's");
_Static_assert(O3M_API_MAX_ARMS == O3M_MAX_ARMS, "o3m.h's arm limit is the federation's");

/* What the caller gave, checked before anything is sent: an id the
 * federation refuses anyway, or an arm that no model has (a -1 of a signed
 * caller arrives as 4294967295), is named here rather than cut or wrapped
 * on the way. */
static int recommend_args(const char *user, int K, const char *const *items,
                          const uint32_t *arms, o3m_err *e) {
  if (strnlen(user, O3M_MAX_ID + 1) > O3M_MAX_ID)
    return o3m_err_set(e, O3M_EINVAL, "recommend: user is longer than %d bytes", O3M_MAX_ID);
  for (int k = 0; k < K; k++) {
    if (!items[k]) return o3m_err_set(e, O3M_EINVAL, "recommend: items[%d] is NULL", k);
    if (strnlen(items[k], O3M_MAX_ID + 1) > O3M_MAX_ID)
      return o3m_err_set(e, O3M_EINVAL, "recommend: items[%d] is longer than %d bytes", k,
                         O3M_MAX_ID);
    if (arms && arms[k] >= O3M_MAX_ARMS)
      return o3m_err_set(e, O3M_EINVAL, "recommend: arms[%d] = %u is not in 0..%d", k, arms[k],
                         O3M_MAX_ARMS - 1);
  }
  return 0;
}

int o3m_ap_client_recommend(o3m_ap_client *c, const char *user, int K, const char *const *items,
                            const uint32_t *arms, const double *own_features, size_t n_own,
                            o3m_recommendation *out, o3m_err *e) {
  if (!c || !user || !items || !out)
    return o3m_err_set(e, O3M_EINVAL, "%s", "recommend: NULL argument");
  int arc = recommend_args(user, K, items, arms, e);
  if (arc < 0) return arc;
  ap_recommendation r;
  int rc = ap_client_recommend(c->c, user, K, items, arms, own_features, n_own, &r, e);
  if (rc < 0) return rc;
  out->decision = r.decision;
  out->candidate = r.candidate;
  out->score = r.score;
  out->mask_id = r.mask_id;
  c->degraded = r.degraded;
  c->missing[0] = '\0';
  size_t off = 0;
  for (size_t j = 0; j < r.n_missing && off < sizeof c->missing; j++) {
    int w = snprintf(c->missing + off, sizeof c->missing - off, "%s%s", j ? "," : "",
                     r.missing[j]);
    if (w < 0) break;
    off += (size_t)w;
  }
  return 0;
}

int o3m_ap_client_degraded(const o3m_ap_client *c, char *missing, size_t len) {
  if (!c) return 0;
  if (missing && len) snprintf(missing, len, "%s", c->degraded ? c->missing : "");
  return c->degraded;
}

int o3m_ap_client_reward(o3m_ap_client *c, uint64_t decision, double reward, uint64_t *updates,
                         o3m_err *e) {
  if (!c) return o3m_err_set(e, O3M_EINVAL, "%s", "reward: NULL client");
  return ap_client_reward(c->c, decision, reward, updates, e);
}

int o3m_ap_client_stats(o3m_ap_client *c, o3m_stats *out, o3m_err *e) {
  if (!c || !out) return o3m_err_set(e, O3M_EINVAL, "%s", "stats: NULL argument");
  ap_stats s;
  int rc = ap_client_stats(c->c, &s, e);
  if (rc < 0) return rc;
  memset(out, 0, sizeof *out);
  out->rounds = s.rounds;
  out->updates = s.updates;
  out->pending = s.pending;
  out->expired = s.expired;
  out->theta_norm = s.theta_norm;
  _Static_assert(sizeof out->algo == sizeof s.algo && sizeof out->model == sizeof s.model,
                 "o3m_stats names are as long as ap_stats'");
  memcpy(out->algo, s.algo, sizeof out->algo);
  memcpy(out->model, s.model, sizeof out->model);
  c->per_client = s.per_client;
  snprintf(c->client, sizeof c->client, "%s", s.per_client ? s.client : "");
  return 0;
}

int o3m_ap_client_stats_per_client(const o3m_ap_client *c, char *client, size_t len) {
  if (!c) return 0;
  if (client && len) snprintf(client, len, "%s", c->per_client ? c->client : "");
  return c->per_client;
}

int o3m_ap_client_health(o3m_ap_client *c, int *serving, o3m_err *e) {
  if (!c || !serving) return o3m_err_set(e, O3M_EINVAL, "%s", "health: NULL argument");
  return ap_client_health(c->c, "", serving, NULL, 0, e);
}
