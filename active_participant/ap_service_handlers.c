/* ap_service_handlers.c -- the Active service's handlers (Info, Recommend,
 * Reward, Stats, Reload) with their method and access tables (see
 * ap_service_impl.h). Recommend hands its call to the rounds (ap_round.h);
 * Reward finds the decision and makes the reward durable through
 * ap_service_durable.c, or through the stream on a replica
 * (ap_service_replica.c). */
#include "ap_service_impl.h"

/* ---------------------------------------------------------------- Info */

static int h_info(void *ctx, o3m_rpc_call *call, const ProtobufCMessage *req_,
                  ProtobufCMessage *rep_, o3m_err *e) {
  (void)call, (void)req_, (void)e;
  ap_service *s = ctx;
  o3m_wire_info_fill((O3m__V1__NodeInfo *)rep_, O3M__V1__ROLE__ROLE_ACTIVE, s->slot, &s->part,
                     s->dims_buf, s->mask_id, s->name, s->fingerprint);
  return 0;
}

/* ---------------------------------------------------------------- Recommend */

/* The owner number of a caller identity (NULL: none): the index of its
 * [client NAME] in the config. The access table lets only clients call
 * Recommend and Reward, so an identity that is no client, and a caller
 * without one (plaintext, --insecure trials, where no caller can be told
 * from another), count as client 0. */
static int owner_of(const ap_service *s, const char *identity) {
  if (identity)
    for (int i = 0; i < s->n_clients; i++)
      if (strcmp(s->clients[i], identity) == 0) return i;
  return 0;
}

/* The name decisions of owner number o are recorded under in a decision
 * record (ap_replica.h): its client's name ("" in a config without clients). */
const char *ap_service__owner_name(const ap_service *s, int o) {
  return s->n_clients > 0 ? s->clients[o] : "";
}

/* A round is the business of ap_round.h: the handler validates and queues
 * (the call is deferred), and the server's idle hook answers every queued
 * round in batches. The round belongs to the calling client, which gets
 * its share of the AP (ap_round.h, "Fairness"). */
static int h_recommend(void *ctx, o3m_rpc_call *call, const ProtobufCMessage *req_,
                       ProtobufCMessage *rep_, o3m_err *e) {
  (void)rep_;
  ap_service *s = ctx;
  const char *who = o3m_rpc_call_identity(call);
  return ap_round_submit(s->round, call, (const O3m__V1__RecommendRequest *)req_,
                         owner_of(s, who), who, e);
}

/* ---------------------------------------------------------------- Reward */

/* A decision belongs to the client that asked for it: a Reward from
 * another identity is refused (O3M_EPERM) before anything changes, so the
 * decision stays open for its owner. */
static int owner_refused(uint64_t decision, const char *caller, o3m_err *e) {
  return o3m_err_set(e, O3M_EPERM, "decision %llu belongs to another client: only the client "
                     "that asked for a decision may reward it (caller '%s'); nothing changed",
                     (unsigned long long)decision, caller ? caller : "(no identity)");
}

/* Finds the decision a reward from caller (its identity, or NULL) names,
 * checks that caller owns it (owner_refused otherwise) and that it was
 * made under the current mask: on success *arm, *mask_id and *x describe it (*x points into
 * the pending table, or into s->xbuf when a replica got it from another:
 * valid until the next lookup), and with the local model *x0 its own part
 * (NULL when unknown) and *degraded whether the local model alone decided
 * it. A decision this process does not hold is
 * asked of the other replicas when s is a replica (another live replica
 * made it; a restart loses a replica's open decisions); otherwise it is
 * unknown. Every refusal sets e
 * with the decision's id; an expired decision is dropped from the table. */
int ap_service__reward_lookup(ap_service *s, const char *caller, uint64_t decision, int64_t now,
                              int *arm, uint64_t *mask_id, const double **x, const double **x0,
                              int *degraded, o3m_err *e) {
  unsigned long long id = (unsigned long long)decision;
  /* The owner first: another client learns nothing else about the
   * decision, and an expired one is not dropped on its word. */
  const int me = owner_of(s, caller);
  int owner = ap_pending_owner(s->pending, decision);
  if (owner >= 0 && owner != me) return owner_refused(decision, caller, e);
  int rc = ap_pending_peek(s->pending, decision, now, arm, mask_id, x);
  *x0 = NULL;
  *degraded = 0;
  switch (rc) {
  case 0:
    if (s->fallback && ap_pending_local(s->pending, decision, x0, degraded) < 0) *x0 = NULL;
    break;
  case O3M_ENOTFOUND: {
    if (!s->rep)
      return o3m_err_set(e, rc, "decision %llu is unknown (never issued, evicted from the "
                         "pending table, or issued before a restart of the active party)", id);
    char rec_owner[O3M_CONFIG_MAX_NAME + 1];
    int has_owner, has_local;
    o3m_err le;
    o3m_err_clear(&le);
    rc = ap_replica_get_decision(s->rep, decision, rec_owner, &has_owner, arm, mask_id, s->xbuf,
                                 s->x0buf, &has_local, degraded, &le);
    if (rc == O3M_ENOTFOUND)
      return o3m_err_set(e, rc, "decision %llu is unknown to every live replica (never "
                         "issued, older than the pending lifetime of %d s, or made by a "
                         "replica that died: its open decisions are lost): %s", id, s->expiry_s,
                         o3m_err_message(&le));
    if (rc < 0) return o3m_err_set(e, rc, "%s", o3m_err_message(&le));
    if (rc < 0) return rc;
    /* A record written before owners were recorded (has_owner 0) has
     * none to check; such records are gone after one pending lifetime. */
    if (has_owner && strcmp(rec_owner, ap_service__owner_name(s, me)) != 0)
      return owner_refused(decision, caller, e);
    *x = s->xbuf;
    if (has_local && s->fallback) *x0 = s->x0buf;
    break;
  }
  case O3M_EEXISTS: return o3m_err_set(e, rc, "decision %llu was already rewarded", id);
  case O3M_EEXPIRED:
    ap_pending_expire(s->pending, decision);
    return o3m_err_set(e, rc, "decision %llu expired (older than %d s)", id, s->expiry_s);
  default: return o3m_err_set(e, rc, "decision %llu: pending table lookup failed", id);
  }
  if (*mask_id != s->mask_id)
    return o3m_err_set(e, O3M_EMASK, "decision %llu was made under mask %016llx, the current "
                       "mask is %016llx", id, (unsigned long long)*mask_id,
                       (unsigned long long)s->mask_id);
  return 0;
}

static int h_reward(void *ctx, o3m_rpc_call *call, const ProtobufCMessage *req_,
                    ProtobufCMessage *rep_, o3m_err *e) {
  ap_service *s = ctx;
  const O3m__V1__RewardRequest *req = (const O3m__V1__RewardRequest *)req_;
  O3m__V1__RewardReply *rep = (O3m__V1__RewardReply *)rep_;

  if (s->stopped)
    return o3m_err_set(e, O3M_EUNAVAILABLE, "the active party is stopping after %s; rewards "
                       "are not accepted", ap_service__stop_cause_text(s->stopped));
  int rc = ap_service__reward_check(s, req->reward, e);
  if (rc < 0) return rc;
  if (s->rep) return ap_service__replica_reward(s, call, req, e);
  int64_t t = o3m_clock_ms();
  int arm;
  uint64_t mask_id;
  const double *x, *x0;
  int degraded;
  rc = ap_service__reward_lookup(s, o3m_rpc_call_identity(call), req->decision, t, &arm,
                                 &mask_id, &x, &x0, &degraded, e);
  if (rc < 0) return rc;
  /* The local model learns every reward; a degraded decision's reaches it
   * alone (ap_fallback.h): the federated model never learns from a context
   * it did not see. Both kinds are journaled and acknowledged alike. */
  /* A full group is committed first; with REWARD_SLOTS request slots of
   * Reward that happens only when calls of another path filled slots. */
  if (s->n_group == REWARD_SLOTS) ap_service__reward_commit(s);
  if (s->stopped)
    return o3m_err_set(e, O3M_EUNAVAILABLE, "the active party is stopping after %s; rewards "
                       "are not accepted", ap_service__stop_cause_text(s->stopped));
  if (x0 && degraded)
    rc = ap_service__local_append(s, req->decision, arm, x0, req->reward, e);
  else
    rc = ap_service__reward_append(s, req->decision, arm, x, x0, req->reward, e);
  if (rc < 0) return rc;
  if (s->ckpt && !s->commit_each) {
    /* Group commit: the decision is closed now, so that a second reward
     * for it in the same group is ALREADY_EXISTS, and the call waits for
     * ap_service__reward_commit() (if that fails the service stops and accepts no
     * reward again). */
    ap_pending_close(s->pending, req->decision);
    s->group[s->n_group++] = (struct reward_wait){call, req->decision,
                                                  o3m_policy_updates(s->policy)};
    return O3M_RPC_DEFERRED;
  }
  if (s->ckpt) {
    /* --commit each: one fdatasync for this reward alone, as before group
     * commit (kept for the side-by-side benchmark). */
    o3m_err se;
    o3m_err_clear(&se);
    rc = ap_service__journal_sync(s, &se);
    if (rc < 0) return ap_service__durability_fail(s, req->decision, &se, e);
    s->commits++;
    s->committed++;
  }
  ap_pending_close(s->pending, req->decision);
  rep->updates = o3m_policy_updates(s->policy);
  if (s->ckpt) ap_service__checkpoint_if_due(s);
  return 0;
}

/* ---------------------------------------------------------------- Stats */

/* Whether a Stats caller gets the whole view: the operator identities (the
 * AP's own certificate, a name of metrics_clients) do, and so does any
 * caller under --insecure, where no identity is checked (the access hook
 * is not even asked). A [client NAME] gets its own view. */
static int stats_operator(const ap_service *s, const char *identity) {
  return !identity || (o3m_access_classes(s->access, identity) & O3M_ACCESS_OPERATOR) != 0;
}

/* Stats by who asks (SECURITY.md): the federation-wide counters, the item
 * cache's among them, move with every client's calls, so a client reading
 * them learns whether another client asked for an id (a cache hit, an
 * unknown item) and how much it asks. A client is answered its own rounds,
 * decisions, rewards and unknown ids (o3m.proto, ActiveStats.per_client)
 * and the shared model's counts, which every Recommendation and
 * RewardReply already carries; the operator is answered everything. */
static int h_stats(void *ctx, o3m_rpc_call *call, const ProtobufCMessage *req_,
                   ProtobufCMessage *rep_, o3m_err *e) {
  (void)req_, (void)e;
  ap_service *s = ctx;
  O3m__V1__ActiveStats *rep = (O3m__V1__ActiveStats *)rep_;
  const char *who = o3m_rpc_call_identity(call);
  rep->updates = o3m_policy_updates(s->policy);
  rep->theta_norm = s->model == O3M_MODEL_SHARED ? o3m_policy_theta_norm(s->policy, 0) : 0.0;
  /* protobuf-c packs but never writes through these pointers. */
  rep->algo = (char *)o3m_algo_name(s->algo);
  rep->model = (char *)o3m_model_name(s->model);
  /* The local model's own count: restored from the checkpoint and the
   * journal like the federated one's, so it survives a restart. */
  if (s->fallback) rep->local_updates = o3m_policy_updates(ap_fallback_policy(s->fallback));
  ap_pending_stats st;
  if (!stats_operator(s, who)) {
    const int me = owner_of(s, who);
    ap_round_client_stats cst;
    ap_round_client_stats_get(s->round, me, &cst);
    ap_pending_owner_stats(s->pending, me, &st);
    rep->per_client = 1;
    rep->client = (char *)ap_service__owner_name(s, me);
    rep->rounds = cst.rounds;
    rep->degraded_rounds = cst.degraded;
    rep->unknown_user_rounds = cst.unknown_user_rounds;
    rep->unknown_item_rounds = cst.unknown_item_rounds;
    rep->pending = st.waiting;
    rep->expired = st.expired + st.evicted;
    rep->rewards = st.closed;
    return 0;
  }
  ap_pending_stats_get(s->pending, o3m_clock_ms(), &st);
  ap_round_stats rst;
  ap_round_stats_get(s->round, &rst);
  rep->rounds = rst.rounds;
  rep->pending = st.waiting;
  rep->expired = st.expired + st.evicted;
  rep->rewards = st.closed;
  rep->fanouts = rst.fanouts;
  rep->reloads = rst.reloads;
  rep->reloads_refused = rst.reloads_refused;
  rep->last_reload_ms = rst.last_reload_ms;
  rep->degraded_rounds = rst.degraded;
  rep->item_cache_hits = rst.cache_hits;
  rep->item_cache_misses = rst.cache_misses;
  rep->item_cache_size = rst.cache_size;
  rep->item_cache_capacity = rst.cache_capacity;
  rep->item_cache_resets = rst.cache_resets;
  rep->item_cache_evictions = rst.cache_evictions;
  rep->item_cache_stale_retries = rst.stale_retries;
  rep->unknown_user_rounds = rst.unknown_user_rounds;
  rep->unknown_item_rounds = rst.unknown_item_rounds;
  rep->sliced_rounds = rst.sliced_rounds;
  rep->slice_restarts = rst.slice_restarts;
  rep->uncached_ids = rst.uncached_ids;
  rep->over_budget_waits = rst.over_budget_waits;
  return 0;
}

/* ---------------------------------------------------------------- Reload */

/* The operator's Reload: refused while another reload is under way, else
 * answered once its load is swapped in or refused (deferred until then;
 * ap_service__reload_take answers it from the idle hook). */
static int h_reload(void *ctx, o3m_rpc_call *call, const ProtobufCMessage *req_,
                    ProtobufCMessage *rep_, o3m_err *e) {
  (void)req_, (void)rep_;
  ap_service *s = ctx;
  if (s->reload_call)
    return o3m_err_set(e, O3M_ESTATE, "a reload of the feature tables is already under way");
  int rc = ap_round_reload_start(s->round, 0, e);
  if (rc < 0) return rc;
  s->reload_call = call;
  return O3M_RPC_DEFERRED;
}

void ap_service__reload_take(ap_service *s) {
  int users = 0, items = 0;
  o3m_err e;
  o3m_err_clear(&e);
  int rc = ap_round_reload_poll(s->round, &users, &items, &e);
  if (rc == 0) return;
  o3m_rpc_call *call = s->reload_call;
  if (!call) return;
  /* After a shutdown failed the deferred call, its slot is no longer
   * deferred and reply/fail refuse it (no other call of the method is
   * deferred meanwhile: h_reload refuses while reload_call is set). */
  s->reload_call = NULL;
  if (rc < 0) {
    (void)o3m_rpc_call_fail(call, rc, &e);
    return;
  }
  ap_round_stats rst;
  ap_round_stats_get(s->round, &rst);
  O3m__V1__ReloadReply rep = O3M__V1__RELOAD_REPLY__INIT;
  rep.reloads = rst.reloads;
  rep.refused = rst.reloads_refused;
  rep.last_reload_ms = rst.last_reload_ms;
  rep.users = (uint32_t)users;
  rep.items = (uint32_t)items;
  (void)o3m_rpc_call_reply(call, &rep.base, NULL);
}

const o3m_rpc_method ap_methods[] = {
    {O3M_PATH_ACTIVE_INFO, &o3m__v1__info_request__descriptor, &o3m__v1__node_info__descriptor,
     h_info},
    {O3M_PATH_ACTIVE_RECOMMEND, &o3m__v1__recommend_request__descriptor,
     &o3m__v1__recommendation__descriptor, h_recommend},
    {O3M_PATH_ACTIVE_REWARD, &o3m__v1__reward_request__descriptor,
     &o3m__v1__reward_reply__descriptor, h_reward},
    {O3M_PATH_ACTIVE_STATS, &o3m__v1__stats_request__descriptor,
     &o3m__v1__active_stats__descriptor, h_stats},
    {O3M_PATH_ACTIVE_RELOAD, &o3m__v1__reload_request__descriptor,
     &o3m__v1__reload_reply__descriptor, h_reload},
};

/* Recommend and Reward only for the clients the config names: a party (or
 * any other certificate of the federation CA) must not see the chosen
 * items and scores, learn whether a reward arrived or write rewards into
 * users' decisions. Stats for the clients (each its own view) and the
 * operator identities (the whole view, h_stats). Info is public to the
 * federation. Reload of the own tables is the active party's operator's
 * act, with its own certificate (as a passive party's); a client only
 * reads and decides. */
const o3m_access_rule ap_access[] = {
    {O3M_PATH_ACTIVE_INFO, O3M_ACCESS_PARTY | O3M_ACCESS_CLIENT},
    {O3M_PATH_ACTIVE_RECOMMEND, O3M_ACCESS_CLIENT},
    {O3M_PATH_ACTIVE_REWARD, O3M_ACCESS_CLIENT},
    {O3M_PATH_ACTIVE_STATS, O3M_ACCESS_CLIENT | O3M_ACCESS_OPERATOR},
    {O3M_PATH_ACTIVE_RELOAD, O3M_ACCESS_SELF},
};

