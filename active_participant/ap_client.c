/* ap_client.c -- see ap_client.h.
 *
 * Each call builds its request on the stack, pointing at the caller's
 * arrays (protobuf-c packs without writing through them), makes one unary
 * call and copies what the caller needs out of the reply, which lives in the
 * RPC client's arena until the next call. */
#include "ap_client.h"
#include "o3m_alloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "health.pb-c.h"
#include "o3m_cert.h"
#include "o3m_cli.h"
#include "o3m.pb-c.h"
#include "o3m_rpc.h"
#include "o3m_wire.h"

/* Most addresses in one target list (AP replicas). */
#define MAX_TARGETS 8

struct ap_client {
  o3m_rpc_client *rpcs[MAX_TARGETS];
  int n;
  int cur; /* the address calls go to first */
};

/* One call with failover: tried on the current address, and when that one
 * is UNAVAILABLE or misses the deadline, on each next address in turn
 * (which then becomes the current one). A Reward retried this way is safe:
 * a replica that already has it answers ALREADY_EXISTS (ap_replica.h). */
static int call_any(ap_client *c, const char *path, const ProtobufCMessage *req,
                    const ProtobufCMessageDescriptor *desc, ProtobufCMessage **m, o3m_err *e) {
  int rc = O3M_EUNAVAILABLE;
  for (int i = 0; i < c->n; i++) {
    rc = o3m_rpc_client_call(c->rpcs[c->cur], path, req, desc, m, e);
    if (rc != O3M_EUNAVAILABLE && rc != O3M_EDEADLINE) return rc;
    if (c->n > 1) c->cur = (c->cur + 1) % c->n;
  }
  return rc;
}

void ap_client_options_default(ap_client_options *o) {
  memset(o, 0, sizeof *o);
  o->deadline_ms = 5000;
}

int ap_client_options_from_config(ap_client_options *o, const o3m_config *cfg, const char *as,
                                  o3m_err *e) {
  const o3m_party *ap = o3m_config_active(cfg);
  o->target = ap->address;
  o->server_name = ap->name;
  o->ca_file = o3m_config_ca(cfg);
  if (as) {
    /* A client first: only clients may call Recommend, Reward and Stats;
     * a party's certificate still gets Info and the health check. */
    const o3m_client *cl = o3m_config_client(cfg, as);
    const o3m_party *me = cl ? NULL : o3m_config_party(cfg, as);
    const char *cert = cl ? cl->cert : me ? me->cert : NULL;
    const char *key = cl ? cl->key : me ? me->key : NULL;
    if (!cl && !me)
      return o3m_err_set(e, O3M_EINVAL, "no client or party '%s' in %s", as,
                         o3m_config_name(cfg));
    if (!cert || !key)
      return o3m_err_set(e, O3M_EINVAL, "%s '%s' has no cert and key in %s",
                         cl ? "client" : "party", as, o3m_config_name(cfg));
    o->cert_file = cert;
    o->key_file = key;
  }
  return 0;
}

void ap_client_options_set_target(ap_client_options *o, const o3m_config *cfg,
                                  const char *target) {
  o->target = target;
  for (int i = 0; cfg && i < o3m_config_n_parties(cfg); i++) {
    const o3m_party *p = o3m_config_party_at(cfg, i);
    if (strcmp(p->address, target) == 0) {
      o->server_name = p->name;
      return;
    }
  }
}

int ap_client_conn_check(const ap_client_conn *a, o3m_err *e) {
  if (!a) return o3m_err_set(e, O3M_EINVAL, "connection is NULL");
  if (a->as && !a->config) return o3m_err_set(e, O3M_EINVAL, "%s needs --config", "--as");
  if (a->as && (a->cert || a->key))
    return o3m_err_set(e, O3M_EINVAL, "%s and --cert/--key are exclusive", "--as");
  if (!a->cert != !a->key)
    return o3m_err_set(e, O3M_EINVAL, "%s and --key go together", "--cert");
  if (!a->insecure && !a->as && !a->cert)
    return o3m_err_set(e, O3M_EINVAL, "%s",
                       "give --as NAME (with --config) or --cert and --key, or --insecure");
  if (!a->config && !a->target)
    return o3m_err_set(e, O3M_EINVAL, "%s", "give --config or --target");
  /* Every party's certificate chains to the federation CA, and trial ones
   * also name localhost and 127.0.0.1: checked against the target's host,
   * any party's certificate would pass for the active party's. So the
   * name is the config's active party or given. */
  if (!a->insecure && !a->config && !(a->server_name && *a->server_name))
    return o3m_err_set(e, O3M_EINVAL, "%s",
                       "give --server-name NAME (the active party's name, which its "
                       "certificate carries) or --config, or --insecure");
  if (a->deadline_ms < 0 || a->deadline_ms > 86400000)
    return o3m_err_set(e, O3M_EINVAL, "--deadline-ms %d is not in 1..86400000", a->deadline_ms);
  return 0;
}

int ap_client_open(ap_client **out, o3m_config **cfg_out, const ap_client_conn *a, o3m_err *e) {
  if (!out || !cfg_out) return o3m_err_set(e, O3M_EINVAL, "out is NULL");
  *out = NULL;
  *cfg_out = NULL;
  int rc = ap_client_conn_check(a, e);
  if (rc < 0) return rc;
  o3m_config *cfg = NULL;
  ap_client_options o;
  ap_client_options_default(&o);
  if (a->config) {
    rc = o3m_config_load(&cfg, a->config, e);
    if (rc < 0) return rc;
    rc = ap_client_options_from_config(&o, cfg, a->as, e);
    if (rc < 0) goto fail;
  }
  if (a->target) ap_client_options_set_target(&o, cfg, a->target);
  if (a->server_name) o.server_name = a->server_name;
  if (a->cert) o.cert_file = a->cert, o.key_file = a->key;
  if (a->ca) o.ca_file = a->ca;
  if (a->deadline_ms) o.deadline_ms = a->deadline_ms;
  o.wait_for_ready = a->wait_for_ready;
  if (a->insecure) {
    o.insecure = 1;
    o.ca_file = o.cert_file = o.key_file = o.server_name = NULL;
  }
  /* The client's own certificate, checked as the daemons check theirs (its
   * CN against the party name only with as), so that a wrong key, an
   * expired certificate or one of another CA is named here instead of
   * showing as a failed handshake. */
  if (!o.insecure && o.ca_file && o.cert_file && o.key_file) {
    rc = o3m_cert_check_party(o.ca_file, o.cert_file, o.key_file, a->as, e);
    if (rc < 0) goto fail;
    /* A party's certificate must also carry the party name among its SANs,
     * as its own daemon requires. A [client NAME] certificate need not:
     * servers identify a client by its CN (proto/o3m_access.h) and never
     * look at its SANs, so requiring one would refuse a working file. */
    if (a->as && !o3m_config_client(cfg, a->as) &&
        (rc = o3m_cert_check_san(o.cert_file, a->as, e)) < 0) {
      if (a->fix && a->fix_n) o3m_cert_san_fix(a->fix, a->fix_n, o.key_file, a->as);
      goto fail;
    }
  }
  rc = ap_client_create(out, &o, e);
  if (rc < 0) goto fail;
  *cfg_out = cfg;
  return 0;
fail:
  o3m_config_destroy(cfg);
  return rc;
}

int ap_client_create(ap_client **out, const ap_client_options *o, o3m_err *e) {
  if (!out) return o3m_err_set(e, O3M_EINVAL, "out is NULL");
  *out = NULL;
  if (!o) return o3m_err_set(e, O3M_EINVAL, "options are NULL");
  if (!o->target || !*o->target) return o3m_err_set(e, O3M_EINVAL, "no target");
  /* See ap_client_conn_check: without a name the target's host would be
   * checked, which any trial certificate of the federation carries. */
  if (!o->insecure && !(o->server_name && *o->server_name))
    return o3m_err_set(e, O3M_EINVAL, "no server_name: with TLS the client must name the party "
                       "whose certificate it expects (the active party's name)");
  char list[1024];
  if (strlen(o->target) >= sizeof list)
    return o3m_err_set(e, O3M_EINVAL, "target list is longer than %zu bytes", sizeof list - 1);
  snprintf(list, sizeof list, "%s", o->target);
  o3m_rpc_client_config cc;
  o3m_rpc_client_config_default(&cc);
  o3m_rpc_client_secure(&cc, o->insecure,
                        (o3m_rpc_tls){o->ca_file, o->cert_file, o->key_file, o->server_name});
  if (o->deadline_ms > 0) cc.deadline_ms = o->deadline_ms;
  cc.wait_for_ready = o->wait_for_ready;
  ap_client *c = o3m_calloc(1, sizeof *c);
  if (!c) return o3m_err_set(e, O3M_ENOMEM, "out of memory");
  char *targets[MAX_TARGETS];
  int n = o3m_cli_split_list(list, targets, MAX_TARGETS);
  if (n < 0) {
    o3m_free(c);
    return o3m_err_set(e, O3M_EINVAL, "target '%s': address %d is empty or one too many (at "
                       "most %d addresses, comma-separated)", o->target, -n, MAX_TARGETS);
  }
  for (int i = 0; i < n; i++) {
    cc.target = targets[i];
    int rc = o3m_rpc_client_create(&c->rpcs[c->n], &cc, e);
    if (rc < 0) {
      ap_client_destroy(c);
      return rc;
    }
    c->n++;
  }
  *out = c;
  return 0;
}

void ap_client_destroy(ap_client *c) {
  if (!c) return;
  for (int i = 0; i < c->n; i++) o3m_rpc_client_destroy(c->rpcs[i]);
  o3m_free(c);
}

int ap_client_recommend(ap_client *c, const char *user, int K, const char *const *items,
                        const uint32_t *arms, const double *own_features, size_t n_own,
                        ap_recommendation *out, o3m_err *e) {
  if (!c || !out || K < 0 || (K > 0 && !items) || (n_own > 0 && !own_features))
    return o3m_err_set(e, O3M_EINVAL, "recommend: bad arguments");
  O3m__V1__RecommendRequest req = O3M__V1__RECOMMEND_REQUEST__INIT;
  /* protobuf-c packs without writing through these pointers. */
  if (user) req.user = (char *)user;
  req.n_items = (size_t)K;
  req.items = (char **)items;
  if (arms) {
    req.n_arms = (size_t)K;
    req.arms = (uint32_t *)arms;
  }
  req.n_own_features = n_own;
  req.own_features = (double *)own_features;
  ProtobufCMessage *m;
  int rc = call_any(c, O3M_PATH_ACTIVE_RECOMMEND, &req.base,
                               &o3m__v1__recommendation__descriptor, &m, e);
  if (rc < 0) return rc;
  const O3m__V1__Recommendation *r = (const O3m__V1__Recommendation *)m;
  if (r->candidate >= (uint32_t)K)
    return o3m_err_set(e, O3M_ERANGE, "recommend: candidate %u of %d", r->candidate, K);
  out->decision = r->decision;
  out->candidate = (int)r->candidate;
  out->item = r->item;
  out->score = r->score;
  out->mask_id = r->mask_id;
  out->updates = r->updates;
  out->degraded = r->degraded;
  out->n_missing = r->n_missing;
  out->missing = r->missing;
  return 0;
}

int ap_client_reward(ap_client *c, uint64_t decision, double reward, uint64_t *updates,
                     o3m_err *e) {
  if (!c) return o3m_err_set(e, O3M_EINVAL, "reward: client is NULL");
  O3m__V1__RewardRequest req = O3M__V1__REWARD_REQUEST__INIT;
  req.decision = decision;
  req.reward = reward;
  ProtobufCMessage *m;
  int rc = call_any(c, O3M_PATH_ACTIVE_REWARD, &req.base,
                               &o3m__v1__reward_reply__descriptor, &m, e);
  if (rc < 0) return rc;
  if (updates) *updates = ((const O3m__V1__RewardReply *)m)->updates;
  return 0;
}

int ap_client_stats(ap_client *c, ap_stats *out, o3m_err *e) {
  if (!c || !out) return o3m_err_set(e, O3M_EINVAL, "stats: bad arguments");
  O3m__V1__StatsRequest req = O3M__V1__STATS_REQUEST__INIT;
  ProtobufCMessage *m;
  int rc = call_any(c, O3M_PATH_ACTIVE_STATS, &req.base,
                               &o3m__v1__active_stats__descriptor, &m, e);
  if (rc < 0) return rc;
  const O3m__V1__ActiveStats *s = (const O3m__V1__ActiveStats *)m;
  out->rounds = s->rounds;
  out->updates = s->updates;
  out->pending = s->pending;
  out->expired = s->expired;
  out->theta_norm = s->theta_norm;
  out->degraded_rounds = s->degraded_rounds;
  out->local_updates = s->local_updates;
  out->cache_hits = s->item_cache_hits;
  out->cache_misses = s->item_cache_misses;
  out->cache_size = s->item_cache_size;
  out->cache_capacity = s->item_cache_capacity;
  out->cache_resets = s->item_cache_resets;
  out->cache_evictions = s->item_cache_evictions;
  out->cache_stale_retries = s->item_cache_stale_retries;
  out->unknown_user_rounds = s->unknown_user_rounds;
  out->unknown_item_rounds = s->unknown_item_rounds;
  out->sliced_rounds = s->sliced_rounds;
  out->slice_restarts = s->slice_restarts;
  out->uncached_ids = s->uncached_ids;
  out->over_budget_waits = s->over_budget_waits;
  snprintf(out->algo, sizeof out->algo, "%s", s->algo ? s->algo : "");
  snprintf(out->model, sizeof out->model, "%s", s->model ? s->model : "");
  out->reloads = s->reloads;
  out->reloads_refused = s->reloads_refused;
  out->last_reload_ms = s->last_reload_ms;
  out->per_client = s->per_client;
  snprintf(out->client, sizeof out->client, "%s", s->client ? s->client : "");
  out->rewards = s->rewards;
  out->fanouts = s->fanouts;
  return 0;
}

int ap_client_reload(ap_client *c, int passive, ap_reload_info *out, o3m_err *e) {
  if (!c || !out) return o3m_err_set(e, O3M_EINVAL, "reload: bad arguments");
  O3m__V1__ReloadRequest req = O3M__V1__RELOAD_REQUEST__INIT;
  ProtobufCMessage *m;
  int rc = call_any(c, passive ? O3M_PATH_PASSIVE_RELOAD : O3M_PATH_ACTIVE_RELOAD, &req.base,
                    &o3m__v1__reload_reply__descriptor, &m, e);
  if (rc < 0) return rc;
  const O3m__V1__ReloadReply *r = (const O3m__V1__ReloadReply *)m;
  out->reloads = r->reloads;
  out->refused = r->refused;
  out->last_reload_ms = r->last_reload_ms;
  out->users = r->users;
  out->items = r->items;
  return 0;
}

/* Info over any of the three services' paths. */
static int info_at(ap_client *c, const char *path, ap_info *out, o3m_err *e) {
  O3m__V1__InfoRequest req = O3M__V1__INFO_REQUEST__INIT;
  ProtobufCMessage *m;
  int rc = call_any(c, path, &req.base, &o3m__v1__node_info__descriptor, &m, e);
  if (rc < 0) return rc;
  const O3m__V1__NodeInfo *n = (const O3m__V1__NodeInfo *)m;
  out->role = (int)n->role;
  out->protocol = n->protocol;
  out->party = n->party;
  out->dim = n->dim;
  out->n_parties = (uint32_t)n->n_dims;
  out->mask_id = n->mask_id;
  snprintf(out->name, sizeof out->name, "%s", n->name ? n->name : "");
  out->fingerprint[0] = '\0';
  if (n->fingerprint.len == O3M_FINGERPRINT_BYTES && n->fingerprint.data)
    o3m_fingerprint_hex(n->fingerprint.data, out->fingerprint);
  return 0;
}

int ap_client_info(ap_client *c, ap_info *out, o3m_err *e) {
  if (!c || !out) return o3m_err_set(e, O3M_EINVAL, "info: bad arguments");
  return info_at(c, O3M_PATH_ACTIVE_INFO, out, e);
}

/* grpc.health.v1.Health/Check, which every o3m_rpc server answers by
 * itself; any O3M daemon can so be probed. */
int ap_client_health(ap_client *c, const char *service, int *serving, char *status,
                     size_t status_len, o3m_err *e) {
  if (!c || !serving) return o3m_err_set(e, O3M_EINVAL, "health: bad arguments");
  *serving = 0;
  Grpc__Health__V1__HealthCheckRequest req = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
  /* protobuf-c packs without writing through the pointer. */
  if (service) req.service = (char *)service;
  ProtobufCMessage *m;
  int rc = call_any(c, O3M_RPC_HEALTH_CHECK_PATH, &req.base,
                               &grpc__health__v1__health_check_response__descriptor, &m, e);
  if (rc < 0) return rc;
  Grpc__Health__V1__HealthCheckResponse__ServingStatus st =
      ((const Grpc__Health__V1__HealthCheckResponse *)m)->status;
  *serving = st == GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
  if (status && status_len) {
    const char *name = "UNKNOWN";
    if (st == GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING) name = "SERVING";
    else if (st == GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING)
      name = "NOT_SERVING";
    else if (st == GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVICE_UNKNOWN)
      name = "SERVICE_UNKNOWN";
    snprintf(status, status_len, "%s", name);
  }
  return 0;
}
