/* ap_service.c -- the active participant's service (see ap_service.h): its
 * set-up and lifecycle.
 *
 * The AP's block (party/o3m_party_block.h, at one spot, "the AP's block"
 * below), the recovery of the durable state, the policy, the replicas'
 * start and the create that builds them all, then run, shutdown and
 * destroy. The handlers, the durability, the replicas' glue and the
 * metrics are in the files ap_service_impl.h lists. The parts with state
 * of their own are modules: the items catalog (ap_catalog.h), the clients
 * of the passive participants (ap_peers.h) and the rounds (ap_round.h:
 * validation, queue, fan-out and decision). The service owns them and
 * creates them all at create, so nothing is allocated per request. */
#include "ap_service_impl.h"
#include "o3m_alloc.h"

void ap_service_options_default(ap_service_options *opt) {
  memset(opt, 0, sizeof *opt);
  opt->pmg_timeout_s = 60;
}

int ap_service_port(const ap_service *s) { return o3m_rpc_server_port(s->server); }

uint64_t ap_service_mask_id(const ap_service *s) { return s->mask_id; }

/* ================================================================ the AP's block */

/* The block, by the behaviour both column parties share
 * (party/o3m_party_block.h): the one stored in state_dir if there is one,
 * else fetched from the mask generator (its Info checked, sealed to a key
 * pair drawn for the fetch), stored and confirmed, a failed confirmation
 * retried on its own. The AP keeps no secret beside it. */
static int install_block(ap_service *s, const o3m_config *cfg, const o3m_party *me,
                         const ap_service_options *opt, o3m_err *e) {
  o3m_party_block_options o = {cfg, me, &s->part, opt->insecure, opt->pmg_timeout_s, opt->stop};
  /* A block stored by an earlier run means that run learned a model here
   * too, which open_state must then find rather than start a fresh model
   * silently. */
  if (me->state_dir) {
    char path[4096];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", me->state_dir, O3M_BLOCK_STORE_FILE);
    s->had_block = stat(path, &st) == 0;
  }
  int rc = o3m_party_block_obtain(&o, &s->block, NULL, 0, e);
  if (rc == 0) s->mask_id = o3m_block_mask_id(s->block);
  return rc;
}

/* ================================================================ start-up */

/* Recovers the model from state_dir and opens the reward journal (see
 * ap_service.h); without a state_dir only warns. Errors that need the
 * operator's decision name the flag that makes it. */
static int open_state(ap_service *s, const ap_service_options *opt, o3m_err *e) {
  if (s->replica) {
    /* Replicas: the stream is the log; state_dir/replica-NAME keeps this
     * replica's snapshots (the checkpoint format, at a stream position). */
    if (!s->state_dir) {
      o3m_log_info("replica '%s' has no state_dir: it replays the whole reward stream at "
                   "start", s->replica);
      return 0;
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/replica-%s", s->state_dir, s->replica);
    int rc;
    if (opt->discard_state && (rc = ap_checkpoint_discard(dir, e)) < 0) return rc;
    ap_checkpoint_options co;
    ap_checkpoint_options_default(&co);
    co.state_dir = dir;
    co.mask_id = s->mask_id;
    co.external_log = 1;
    co.local = s->fallback;
    if (opt->checkpoint_records) co.every_records = opt->checkpoint_records;
    if (opt->checkpoint_ms) co.every_ms = opt->checkpoint_ms;
    ap_recovery_info ri;
    rc = ap_checkpoint_open(&s->ckpt, s->policy, &co, &ri, e);
    if (rc < 0) return rc;
    s->applied_seq = ri.checkpoint_seq;
    return 0;
  }
  if (!s->state_dir) {
    o3m_log_warn("WARNING: party '%s' has no state_dir: the model lives in memory only and "
                 "rewards are NOT durable (a restart loses every acknowledged reward, and the "
                 "block must then come from a mask generator that still holds Q)", s->name);
    return 0;
  }
  int rc;
  if (opt->discard_state && (rc = ap_checkpoint_discard(s->state_dir, e)) < 0) return rc;
  ap_checkpoint_options co;
  ap_checkpoint_options_default(&co);
  co.state_dir = s->state_dir;
  co.mask_id = s->mask_id;
  co.salvage = opt->salvage;
  co.had_state = s->had_block && !opt->discard_state;
  co.local = s->fallback;
  if (opt->checkpoint_records) co.every_records = opt->checkpoint_records;
  if (opt->checkpoint_ms) co.every_ms = opt->checkpoint_ms;
  ap_recovery_info ri;
  o3m_err ce;
  o3m_err_clear(&ce);
  rc = ap_checkpoint_open(&s->ckpt, s->policy, &co, &ri, &ce);
  if (rc < 0) {
    const char *way = rc == O3M_EMASK
                          ? "the saved model was learned under another mask; --discard-state "
                            "moves it aside and starts a fresh model"
                      : rc == O3M_EDIM
                          ? "the [policy] does not match the saved model (or the model was "
                            "saved by another release); restore the old [policy] or release, "
                            "or --discard-state"
                      : rc == O3M_ENOTFOUND
                          ? "the saved model is missing (its checkpoints and journal were "
                            "deleted or lost); restore ap-ckpt-* and ap-journal-* from a "
                            "backup, or --discard-state starts a fresh model under the "
                            "stored block"
                      : rc == O3M_ECORRUPT
                          ? "the reward journal is damaged or incomplete; --salvage keeps the "
                            "rewards before the damage (the rest is set aside), or "
                            "--discard-state"
                          : NULL;
    o3m_log_error("recovery from %s failed: %s", s->state_dir, o3m_err_message(&ce));
    if (!way) return o3m_err_set(e, rc, "%s", o3m_err_message(&ce));
    o3m_log_error("%s", way);
    return o3m_err_set(e, rc, "%s (%s)", way, o3m_err_message(&ce));
  }
  if (ri.salvaged)
    o3m_log_warn("SALVAGED: journal records from seq %llu on were set aside as *.dropped; "
                 "those rewards are not in the model", (unsigned long long)ri.salvage_seq);
  o3m_log_info("rewards are durable in %s: %llu updates recovered (checkpoint seq %llu, %llu "
               "journal records replayed)", s->state_dir,
               (unsigned long long)o3m_policy_updates(s->policy),
               (unsigned long long)ri.checkpoint_seq, (unsigned long long)ri.replayed);
  return 0;
}

/* How the passive parties' parts arrive (o3m_config.h, "Secure
 * aggregation"): secure needs at least one passive party, then the scale
 * every party derives alike from the PPs' bounds (a config that leaves too
 * few bits is refused, naming the bound) and their joint bound. One PP
 * hides among nobody: said in a WARN. */
typedef struct agg_params {
  int secure, scale, n_pp;
  double pp_sum_norm;
} agg_params;

static int secure_aggregation_params(const o3m_config *cfg, agg_params *a, o3m_err *e) {
  memset(a, 0, sizeof *a);
  a->n_pp = o3m_config_n_passive(cfg);
  if (!o3m_config_secure_aggregation(cfg) || a->n_pp < 1) return 0;
  double norms[O3M_CONFIG_MAX_PARTIES], sq = 0;
  for (int i = 0; i < a->n_pp; i++) {
    norms[i] = o3m_config_passive(cfg, i)->max_norm;
    sq += norms[i] * norms[i];
  }
  o3m_err ae;
  o3m_err_clear(&ae);
  int rc = o3m_secagg_scale(a->n_pp, norms, &a->scale, &ae);
  if (rc < 0) return o3m_err_set(e, rc, "%s: %s", o3m_config_name(cfg), o3m_err_message(&ae));
  a->secure = 1;
  a->pp_sum_norm = sqrt(sq);
  if (a->n_pp == 1)
    o3m_log_warn("one passive party: its part cannot hide among others; the AP learns it "
                 "exactly (aggregation = secure in %s)", o3m_config_name(cfg));
  o3m_log_info("secure aggregation of %d passive parties: only their sum is received, fixed "
               "point 2^-%d, worst-case decoding error %.3g per component", a->n_pp, a->scale,
               o3m_secagg_max_error(a->n_pp, a->scale));
  return 0;
}

/* The federated policy and, with fallback set, the local model beside it
 * (counting its degraded rounds in metrics, which may be NULL). */
static int build_policy(ap_service *s, const o3m_config *cfg, int fallback, o3m_metrics *metrics,
                        o3m_err *e) {
  const o3m_config_policy_section *pp = o3m_config_policy(cfg);
  o3m_policy_config pc;
  o3m_policy_config_default(&pc);
  if (o3m_algo_parse(pp->algo, &pc.algo) < 0 || o3m_model_parse(pp->model, &pc.model) < 0)
    return o3m_err_set(e, O3M_EINVAL, "[policy]: unknown algo '%s' or model '%s'", pp->algo,
                       pp->model);
  s->algo = pc.algo;
  s->model = pc.model;
  if (pc.model == O3M_MODEL_DISJOINT) {
    if (!pp->items) return o3m_err_set(e, O3M_EINVAL, "[policy]: model disjoint needs items");
    int rc = ap_catalog_load(&s->cat, pp->items, O3M_MAX_ARMS, e);
    if (rc < 0) return rc;
    s->n_arms = ap_catalog_size(s->cat);
  }
  pc.d = s->d;
  pc.n_arms = s->n_arms;
  pc.max_candidates = pp->max_candidates;
  pc.lambda = pp->lambda;
  pc.alpha = pp->alpha;
  pc.v = pp->v;
  pc.seed = pp->seed;
  pc.refactor_every = pp->refactor_every;
  int rc = o3m_policy_create(&s->policy, &pc, e);
  if (rc < 0 || !fallback) return rc;
  /* The local model: the same algorithm and kind on the own columns, with
   * its own lambda and alpha (ap_fallback.h). */
  pc.d = s->d0;
  pc.lambda = pp->local_lambda;
  pc.alpha = pp->local_alpha;
  return ap_fallback_create(&s->fallback, &pc, metrics, e);
}

/* Connects a replica to the stream from the position after its snapshot
 * and applies everything the stream holds now, so that it serves the
 * model every other replica serves (as of the stream's last record). */
static int replica_start(ap_service *s, const o3m_config *cfg, const o3m_party *me,
                         const ap_service_options *opt, o3m_err *e) {
  const o3m_config_replication *repl = o3m_config_replication_of(cfg);
  /* The replicas authenticate to NATS with the party's own TLS files. */
  ap_replica_config rc_;
  o3m_err ce;
  o3m_err_clear(&ce);
  if (ap_replica_config_of(&rc_, cfg, me->cert, me->key, &ce) < 0)
    return o3m_err_set(e, O3M_EINVAL, "%s (party '%s' presents its cert and key to NATS)",
                       o3m_err_message(&ce), me->name);
  int tls = rc_.tls;
  rc_.d = s->d;
  /* With the local model, decision and stream records carry x^0 and the
   * degraded flag (ap_replica.h). */
  rc_.d0 = s->fallback ? s->d0 : 0;
  rc_.start_seq = s->applied_seq + 1;
  rc_.name = s->replica;
  rc_.connect_timeout_ms = opt->pmg_timeout_s * 1000;
  rc_.ttl_ms = (int64_t)s->expiry_s * 1000;
  rc_.open_max = o3m_config_policy(cfg)->pending_capacity;
  s->rep_check_ms = repl->check_ms;
  int rc = ap_replica_create(&s->rep, &rc_, e);
  if (rc == O3M_ECORRUPT)
    /* Never started over: that would serve a model other replicas do not
     * have and hide the loss. The stream must be restored (a JetStream
     * backup), or every replica deliberately restarted from nothing. */
    o3m_log_error("replica '%s' refuses to start: %s; restore the stream's records, or "
                  "start every replica afresh (--discard-state) over a new stream",
                  s->replica, o3m_err_message(e));
  else if (rc == O3M_ENOTFOUND || rc == O3M_EPERM)
    o3m_log_error("replica '%s' refuses to start: %s", s->replica, o3m_err_message(e));
  if (rc < 0) return rc;
  uint64_t last;
  if ((rc = ap_replica_last_seq(s->rep, &last, e)) < 0) return rc;
  uint64_t from = s->applied_seq;
  int64_t until = o3m_clock_ms() + (int64_t)opt->pmg_timeout_s * 1000;
  while (s->applied_seq < last) {
    if (o3m_clock_ms() > until || (opt->stop && *opt->stop))
      return o3m_err_set(e, O3M_EDEADLINE, "replica '%s': caught up to stream seq %llu of "
                         "%llu only", s->replica, (unsigned long long)s->applied_seq,
                         (unsigned long long)last);
    rc = ap_service__replica_drain(s, 200, 0);
    if (rc < 0) return o3m_err_set(e, rc, "replica '%s': the reward stream failed at seq %llu",
                                   s->replica, (unsigned long long)s->applied_seq);
  }
  o3m_log_info("replica '%s': caught up from stream seq %llu to %llu (%llu updates, %llu "
               "records skipped, %llu of them out of bounds); stream %s x%d, bucket %s, %s",
               s->replica, (unsigned long long)from, (unsigned long long)s->applied_seq,
               (unsigned long long)o3m_policy_updates(s->policy),
               (unsigned long long)s->skipped, (unsigned long long)s->refused, repl->stream,
               repl->replicas, repl->bucket, tls ? "mutual TLS" : "PLAIN TEXT (nats_tls = off)");
  return 0;
}

/* Batches in flight for a number of serving threads (ap_round.h). */
static int inflight_of(int threads) {
  int n = threads - 1;
  if (n < 1) n = 1;
  return n > AP_ROUND_MAX_INFLIGHT ? AP_ROUND_MAX_INFLIGHT : n;
}

/* ap_round's before_decide: the rewards applied since the last group
 * commit (by any thread, while the batch was in flight) become durable and
 * are acknowledged before the batch is decided, so that no decision sees a
 * reward that is not durable ("What a decision sees" in ap_service.h).
 * Replicas apply only rewards the stream already holds. */
static int before_decide(void *ctx, o3m_err *e) {
  ap_service *s = ctx;
  if (!s->rep && s->ckpt) ap_service__reward_commit(s);
  /* A failed commit (or an earlier failure) stopped the service: the model
   * then holds rewards that are not durable (or is damaged), and a batch
   * that comes back from its fan-out meanwhile is not decided on it. */
  if (s->stopped)
    return o3m_err_set(e, O3M_EUNAVAILABLE, "the active party is stopping after %s; no "
                       "decision is made", ap_service__stop_cause_text(s->stopped));
  return 0;
}

/* Frees whatever create got to; every field is NULL/0 or owned. */
static void service_free(ap_service *s) {
  if (!s) return;
  o3m_rpc_server_destroy(s->server);
  ap_replica_destroy(s->rep);
  o3m_rng_destroy(s->ids);
  o3m_free(s->replica);
  o3m_free(s->xbuf);
  o3m_free(s->x0buf);
  o3m_free(s->applied);
  o3m_access_destroy(s->access); /* after the server that calls it */
  ap_checkpoint_close(s->ckpt); /* syncs; before the policy it borrows */
  o3m_free(s->state_dir);
  ap_round_destroy(s->round); /* before what it borrows */
  ap_fallback_destroy(s->fallback);
  for (int b = 0; b < s->n_peers; b++) ap_peers_destroy(s->peers[b]);
  ap_pending_destroy(s->pending);
  o3m_free(s->clients);
  o3m_block_destroy(s->block);
  o3m_policy_destroy(s->policy);
  ap_catalog_destroy(s->cat);
  o3m_free(s->dims_buf);
  o3m_free(s);
}

int ap_service_create(ap_service **out, const o3m_config *cfg, const ap_service_options *opt,
                      o3m_err *e) {
  if (!out) return o3m_err_set(e, O3M_EINVAL, "out is NULL");
  *out = NULL;
  if (!cfg || !opt || !opt->party)
    return o3m_err_set(e, O3M_EINVAL, "config and party name are required");
  if (opt->pmg_timeout_s < 1)
    return o3m_err_set(e, O3M_EINVAL, "pmg timeout must be >= 1 s, got %d", opt->pmg_timeout_s);
  if (opt->threads < 0 || opt->threads > O3M_CONFIG_MAX_THREADS)
    return o3m_err_set(e, O3M_EINVAL, "threads must be in 1..%d, got %d", O3M_CONFIG_MAX_THREADS,
                       opt->threads);
  const o3m_party *me = o3m_config_party(cfg, opt->party);
  if (!me) return o3m_err_set(e, O3M_EINVAL, "no party '%s' in %s", opt->party,
                              o3m_config_name(cfg));
  if (me->role != O3M_ROLE_ACTIVE)
    return o3m_err_set(e, O3M_EINVAL, "party '%s' has role %s, expected active", me->name,
                       o3m_role_name(me->role));
  if (!opt->insecure && (!o3m_config_ca(cfg) || !me->cert || !me->key))
    return o3m_err_set(e, O3M_EINVAL, "party '%s': TLS needs ca, cert and key in %s (or run with "
                       "--insecure)", me->name, o3m_config_name(cfg));

  ap_service *s = o3m_calloc(1, sizeof *s);
  if (!s) return o3m_err_set(e, O3M_ENOMEM, "out of memory");
  snprintf(s->name, sizeof s->name, "%s", me->name);
  s->reload = opt->reload;
  s->commit_each = opt->commit_each;
  s->d = o3m_config_d(cfg);
  s->d0 = me->dims;
  s->slot = me->slot;
  const o3m_config_policy_section *pp = o3m_config_policy(cfg);
  s->k_max = pp->max_candidates;
  s->reward_min = pp->reward_min;
  s->reward_max = pp->reward_max;
  s->expiry_s = pp->pending_expiry_s;
  const o3m_config_replication *repl = o3m_config_replication_of(cfg);
  int replicated = strcmp(repl->mode, "nats") == 0;
  if (replicated != (opt->replica != NULL)) {
    o3m_free(s);
    return o3m_err_set(e, O3M_EINVAL, replicated ? "%s has replication = nats: name this "
                       "replica (--replica NAME)" : "--replica needs replication = nats in "
                       "[federation] of %s", o3m_config_name(cfg));
  }

  /* The public partition, in column order; the active party is slot 0. */
  int m = o3m_config_n_column_parties(cfg);
  int dims[O3M_MAX_PARTIES];
  if (m > O3M_MAX_PARTIES) {
    service_free(s);
    return o3m_err_set(e, O3M_EINVAL, "%d column parties, at most %d", m, O3M_MAX_PARTIES);
  }
  /* Serving threads: the option, else the party's threads key. */
  const int threads = opt->threads ? opt->threads : me->threads;
  double sum_sq = 0;
  int user_required = 0;
  for (int j = 0; j < m; j++) {
    const o3m_party *cp = o3m_config_column_party(cfg, j);
    dims[j] = cp->dims;
    sum_sq += cp->max_norm * cp->max_norm;
    user_required |= cp->user_table != NULL;
  }
  int rc = o3m_partition_from_dims(&s->part, m, dims, e);
  if (rc == 0) rc = o3m_fingerprint_compute(cfg, s->fingerprint, e);
  if (rc < 0) goto fail;
  agg_params agg;
  rc = secure_aggregation_params(cfg, &agg, e);
  if (rc < 0) goto fail;

  /* The local fallback model (ap_fallback.h), when there is a passive
   * party to miss. With replicas too: their decision records and reward
   * stream carry x^0 and the degraded flag (ap_replica.h). */
  const int fallback = o3m_config_fallback_local(cfg) && o3m_config_n_passive(cfg) > 0;
  rc = build_policy(s, cfg, fallback, opt->metrics, e);
  if (rc < 0) goto fail;

  s->dims_buf = o3m_malloc(sizeof *s->dims_buf * (size_t)m);
  if (!s->dims_buf) {
    rc = o3m_err_set(e, O3M_ENOMEM, "out of memory");
    goto fail;
  }

  /* The clients, whose index is their owner number (owner_of). */
  s->n_clients = o3m_config_n_clients(cfg);
  s->clients = o3m_calloc((size_t)(s->n_clients > 0 ? s->n_clients : 1), sizeof *s->clients);
  if (!s->clients) {
    rc = o3m_err_set(e, O3M_ENOMEM, "out of memory");
    goto fail;
  }
  for (int i = 0; i < s->n_clients; i++)
    snprintf(s->clients[i], sizeof s->clients[i], "%s", o3m_config_client_at(cfg, i)->name);
  const int n_owners = s->n_clients > 0 ? s->n_clients : 1;

  /* Decision ids come from the OS CSPRNG (ap_pending.h); a replica's
   * carry its tag in their low bits, so that any replica can ask the one
   * that holds a decision, and only it (ap_replica.h, "Decision records").
   * Each client has its share of the table ([policy]
   * pending_client_share). */
  if (replicated) {
    s->id_tag = ap_replica_tag(opt->replica);
    if ((rc = o3m_rng_create_os(&s->ids)) < 0) {
      rc = o3m_err_set(e, rc, "the decision ids' random source: %s", o3m_strerror(rc));
      goto fail;
    }
  }
  rc = ap_pending_create_shared(&s->pending, pp->pending_capacity, s->d,
                                (int64_t)pp->pending_expiry_s * 1000, n_owners,
                                pp->pending_client_share, s->ids ? ap_service__tagged_id : NULL,
                                s);
  if (rc < 0) {
    rc = o3m_err_set(e, rc, "pending table of %d entries: %s", pp->pending_capacity,
                     o3m_strerror(rc));
    goto fail;
  }
  if (s->fallback && (rc = ap_pending_keep_local(s->pending, s->d0)) < 0) {
    rc = o3m_err_set(e, rc, "the pending table's local parts (%d x %d): %s",
                     pp->pending_capacity, s->d0, o3m_strerror(rc));
    goto fail;
  }

  /* The rounds: the own tables and every buffer a round needs. */
  ap_round_config rcfg = {
      .party = s->name,
      .config_name = o3m_config_name(cfg),
      .d = s->d,
      .d0 = s->d0,
      .k_max = s->k_max,
      /* The bounds of "Bounded contexts" (o3m_config.h): this party's own
       * max_norm, and sqrt(sum_j max_norm_j^2), the bound of a summed
       * context. */
      .max_norm = me->max_norm,
      .sum_norm = sqrt(sum_sq),
      .model = s->model,
      .n_arms = s->n_arms,
      .catalog = s->cat,
      .policy = s->policy,
      .pending = s->pending,
      .fallback = s->fallback,
      .user_table = me->user_table,
      .item_table = me->item_table,
      .table_bytes_max = me->table_bytes_max,
      .refuse_unknown_items = strcmp(o3m_config_policy(cfg)->unknown_items, "refuse") == 0,
      .user_required = user_required,
      .secure = agg.secure,
      .agg_scale = agg.scale,
      .n_pp = agg.n_pp,
      .pp_sum_norm = agg.pp_sum_norm,
      /* max(1, threads - 1) batches in flight: one thread is left to take
       * calls in while the others wait for the passive parties. */
      .inflight = inflight_of(threads),
      .n_owners = n_owners,
      .client_inflight_max = pp->client_inflight_max,
      .batch_cost_max = pp->batch_cost_max,
      .slice_cost_max = pp->slice_cost_max,
      .client_uncached_rate = pp->client_uncached_rate,
      .client_uncached_burst = pp->client_uncached_burst,
      .item_cache = pp->item_cache,
      .epoch_changes_max = o3m_config_epoch_changes_max(cfg),
      .before_decide = before_decide,
      .before_decide_ctx = s,
      .metrics = opt->metrics,
  };
  if (replicated) {
    rcfg.record = ap_service__replica_record;
    rcfg.record_ctx = s;
    size_t cap = 1024;
    while (cap < 2 * (size_t)pp->pending_capacity && cap < ((size_t)1 << 22)) cap *= 2;
    s->sum_norm = rcfg.sum_norm;
    s->replica = o3m_strdup(opt->replica);
    s->xbuf = o3m_malloc(sizeof *s->xbuf * (size_t)s->d);
    s->x0buf = o3m_malloc(sizeof *s->x0buf * (size_t)s->d0);
    s->applied = o3m_calloc(cap, sizeof *s->applied);
    s->applied_mask = cap - 1;
    if (!s->replica || !s->xbuf || !s->x0buf || !s->applied) {
      rc = o3m_err_set(e, O3M_ENOMEM, "out of memory");
      goto fail;
    }
  }
  rc = ap_round_create(&s->round, &rcfg, e);
  if (rc < 0) goto fail;

  if (me->state_dir && !(s->state_dir = o3m_strdup(me->state_dir))) {
    rc = o3m_err_set(e, O3M_ENOMEM, "out of memory");
    goto fail;
  }
  rc = install_block(s, cfg, me, opt, e);
  if (rc < 0) goto fail;

  rc = open_state(s, opt, e);
  if (rc < 0) goto fail;
  if (replicated && (rc = replica_start(s, cfg, me, opt, e)) < 0) goto fail;

  /* One set of clients per batch in flight, each opened by the start-up
   * wait. The later ones find the parties up and answer at once; a party
   * the first set gave up on costs them at most LATER_PEERS_WAIT_MS each. */
  for (; s->n_peers < rcfg.inflight; s->n_peers++) {
    rc = ap_peers_create(&s->peers[s->n_peers], cfg, me, opt->insecure, s->fingerprint, e);
    if (rc < 0) goto fail;
    if (opt->metrics) ap_peers_set_metrics(s->peers[s->n_peers], opt->metrics);
    int64_t budget = s->n_peers == 0 ? (int64_t)opt->pmg_timeout_s * 1000 : LATER_PEERS_WAIT_MS;
    rc = ap_peers_wait_ready(s->peers[s->n_peers], &s->part, budget, opt->stop, e);
    if (rc < 0) {
      s->n_peers++;
      goto fail;
    }
  }
  if (opt->metrics) {
    rc = ap_service__metrics_register(s, opt->metrics, e);
    if (rc < 0) goto fail;
  }

  o3m_rpc_server_config sc;
  o3m_rpc_server_config_default(&sc);
  sc.listen = opt->listen;
  sc.insecure = opt->insecure;
  sc.slots_per_method = SERVER_SLOTS;
  sc.threads = threads;
  /* Requests are refused by size before they are read whole: the largest
   * valid Recommend (o3m_wire_recommend_max_bytes) is the limit, so an
   * over-long id or too many values costs the AP at most that much, and no
   * passive party hears of it. The arena holds a whole batch of deferred
   * Recommends (every slot at the largest size, unpacked). */
  sc.max_message_bytes = o3m_wire_recommend_max_bytes(s->k_max, s->d0);
  sc.arena_max_bytes = (size_t)AP_ROUND_SLOTS * 3 * (size_t)sc.max_message_bytes + (1u << 20);
  /* Recommend calls are deferred and answered in batches by the idle hook. */
  /* Rewards wait for their group commit likewise (deferred). */
  static const o3m_rpc_method_slots deferred_slots[] = {
      {O3M_PATH_ACTIVE_RECOMMEND, AP_ROUND_SLOTS}, {O3M_PATH_ACTIVE_REWARD, REWARD_SLOTS}};
  sc.method_slots = deferred_slots;
  sc.n_method_slots = 2;
  sc.idle = ap_service__service_idle;
  sc.metrics = opt->metrics;
  /* Replicas apply the stream, SIGHUP's reload is taken and a finished
   * reload of the own tables swapped in, also when no call arrives. */
  sc.idle_on_timeout = replicated || opt->reload != NULL || me->user_table || me->item_table;
  /* Callers need a certificate from the federation CA, and the access
   * policy decides what each may call: front ends and operators are
   * [client NAME]s of the config with certificates of their own. */
  rc = o3m_access_serve(&s->server, &s->access, &sc, cfg, me, ap_access,
                        (int)(sizeof ap_access / sizeof ap_access[0]), ap_methods,
                        (int)(sizeof ap_methods / sizeof ap_methods[0]), s, e);
  if (rc < 0) goto fail;
  /* With the local fallback, the circuit breakers (ap_peers.h): a missing
   * party is not waited for until it answers again. */
  for (int b = 0; s->fallback && b < s->n_peers; b++)
    if ((rc = ap_peers_breaker_start(s->peers[b], &s->part, s->mask_id, e)) < 0) goto fail;
  ap_round_connect(s->round, s->block, s->mask_id, s->server, s->peers);

  o3m_log_info("active party '%s' listening on %s (port %d): d = %d, %d parties, %s/%s, "
               "max %d candidates, mask %016llx, %d serving threads, %d batches in flight",
               s->name, sc.listen, ap_service_port(s), s->d, m, o3m_algo_name(s->algo),
               o3m_model_name(s->model), s->k_max, (unsigned long long)s->mask_id, sc.threads,
               rcfg.inflight);
  *out = s;
  return 0;

fail:
  service_free(s);
  return rc;
}

int ap_service_run(ap_service *s) {
  if (s->ran) return O3M_ESTATE;
  s->ran = 1;
  int rc = o3m_rpc_server_run(s->server);
  /* A periodic checkpoint still being written is finished first. */
  if (s->ckpt) ap_service__checkpoint_collect(s, 1);
  if (s->ckpt && !s->stopped) ap_service__checkpoint_now(s, "final");
  if (s->ckpt)
    o3m_log_info("state: %llu rewards acknowledged in %llu commits (%s), %llu checkpoints "
                 "written, %llu failed, journal at seq %llu%s%s",
                 (unsigned long long)s->committed, (unsigned long long)s->commits,
                 s->rep ? "JetStream acknowledgements" : s->commit_each ? "one fdatasync each"
                                                                    : "group commit",
                 (unsigned long long)s->checkpoints, (unsigned long long)s->ckpt_failures,
                 (unsigned long long)(s->rep ? s->applied_seq
                                             : ap_journal_synced_seq(ap_checkpoint_journal(s->ckpt))),
                 s->stopped ? ", STOPPED AFTER " : "",
                 s->stopped ? ap_service__stop_cause_text(s->stopped) : "");
  if (rc == 0 && s->stopped)
    rc = s->stopped == STOP_DISK ? O3M_EIO : s->stopped == STOP_STREAM ? O3M_ENOTFOUND
                                                                       : O3M_ECORRUPT;
  ap_pending_stats st;
  ap_pending_stats_get(s->pending, o3m_clock_ms(), &st);
  o3m_rpc_server_stats rs;
  o3m_rpc_server_stats_get(s->server, &rs);
  ap_round_stats rst;
  ap_round_stats_get(s->round, &rst);
  o3m_log_info("stopped: rounds=%llu failed_rounds=%llu peer_failures=%llu degraded=%llu "
               "updates=%llu pending=%u expired=%llu evicted=%llu calls_ok=%llu "
               "calls_failed=%llu calls_denied=%llu",
               (unsigned long long)rst.rounds, (unsigned long long)rst.failed_rounds,
               (unsigned long long)rst.peer_failures, (unsigned long long)rst.degraded,
               (unsigned long long)o3m_policy_updates(s->policy), st.waiting,
               (unsigned long long)st.expired, (unsigned long long)st.evicted,
               (unsigned long long)rs.ok, (unsigned long long)rs.failed,
               (unsigned long long)rs.denied);
  return rc;
}

void ap_service_shutdown(ap_service *s) {
  if (s) o3m_rpc_server_shutdown(s->server);
}

void ap_service_destroy(ap_service *s) { service_free(s); }
