/* ap_service.c -- the active participant's service (see ap_service.h).
 *
 * The four handlers with their method and access tables, the durability
 * glue (rewards through the journal, checkpoints, the stop after a disk
 * error or a damaged model), the AP's block (party/o3m_party_block.h, at
 * one spot, "the AP's block" below) and the lifecycle (create, run, shutdown,
 * destroy). The parts with state of their own are modules: the items
 * catalog (ap_catalog.h), the clients of the passive participants
 * (ap_peers.h) and the rounds (ap_round.h: validation, queue, fan-out and
 * decision). The service owns them and creates them all at create, so
 * nothing is allocated per request. */
#include "ap_service.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ap_catalog.h"
#include "ap_checkpoint.h"
#include "ap_fallback.h"
#include "o3m_clock.h"
#include "ap_peers.h"
#include "ap_pending.h"
#include "ap_replica.h"
#include "o3m_hash.h"
#include "o3m_policy.h"
#include "o3m_rng.h"
#include "ap_round.h"
#include "o3m.pb-c.h"
#include "o3m_access.h"
#include "o3m_assert.h"
#include "o3m_log.h"
#include "o3m_secagg.h"
#include "o3m_mask.h"
#include "o3m_block_store.h"
#include "o3m_party_block.h"
#include "o3m_rpc.h"
#include "o3m_wire.h"

/* Calls kept requested per method; with handlers running one at a time this
 * is how many calls can be queued without waiting for gRPC to hand over
 * the next one. A load test runs 32 clients at once. (Recommend has its own
 * AP_ROUND_SLOTS.) */
#define SERVER_SLOTS 32
/* Reward calls that may wait for one group commit: every one of them holds
 * a request slot of Reward while it waits (see "A reward" in ap_service.h). */
#define REWARD_SLOTS 256
/* Clients with series of their own in the metrics (the registry's tables
 * are fixed; a federation with more clients has the totals). */
#define METRIC_CLIENTS 32
/* The start-up wait of the second and later sets of passive-party clients
 * (one set per batch in flight), after the first set's full wait. */
#define LATER_PEERS_WAIT_MS 1000
/* After a failed periodic checkpoint, the next attempt waits this long. */
#define CKPT_RETRY_MS 10000
/* How often a replica asks JetStream whether its stream lost records
 * (replica_check_if_due): one stream info request, well under a
 * millisecond on a healthy cluster. */
#define REPLICA_CHECK_MS 5000

/* Why the service stopped itself. Each cause has its own words in every
 * message that reports the stop (the reward refusals, the last state line,
 * the daemon's exit line), so that an operator looks at the right thing. */
typedef enum stop_cause {
  STOP_NONE = 0,
  STOP_DISK,   /* a journal write or sync failed */
  STOP_DAMAGED, /* the model in memory failed its health check at a checkpoint */
  STOP_STREAM   /* a replica's reward stream lost records or cannot be read */
} stop_cause;

static const char *stop_cause_text(stop_cause c) {
  switch (c) {
  case STOP_DISK: return "a disk error (the reward journal failed)";
  case STOP_DAMAGED: return "damage to the model in memory (its checkpoint was refused)";
  case STOP_STREAM: return "damage to the reward stream (records lost or unreadable)";
  case STOP_NONE: break;
  }
  return "no error";
}

struct ap_service {
  char name[O3M_CONFIG_MAX_NAME + 1];
  int d, d0, k_max;
  int slot; /* own party index in column order (0 in the usual layout) */
  o3m_partition part;
  uint32_t *dims_buf; /* part.m entries, for Info replies */
  unsigned char fingerprint[O3M_FINGERPRINT_BYTES]; /* the config's, for Info replies */

  o3m_policy *policy;
  o3m_algo algo;
  o3m_model_kind model;
  int n_arms; /* disjoint only; 0 for shared */
  ap_catalog *cat; /* disjoint only (ap_catalog.h) */
  double reward_min, reward_max;
  int expiry_s;

  o3m_block *block;
  uint64_t mask_id;

  /* The passive participants' clients: one set per batch in flight
   * (ap_round.h, "Pipelined batches"). */
  ap_peers *peers[AP_ROUND_MAX_INFLIGHT];
  int n_peers;
  ap_pending *pending; /* decisions waiting for a reward */
  ap_round *round;     /* Recommend: queue, fan-out, decision */
  ap_fallback *fallback; /* the local model ([federation] fallback), or NULL */
  /* The config's clients in file order: a caller's owner number in the
   * pending table and the rounds is its index here (owner_of). */
  char (*clients)[O3M_CONFIG_MAX_NAME + 1];
  int n_clients;

  o3m_access *access; /* who may call what: ap_access below */
  volatile sig_atomic_t *reload; /* ap_service_options.reload, or NULL */
  o3m_rpc_server *server;
  int ran;

  /* Durability (NULL/0 without a state_dir; see ap_service.h). */
  char *state_dir;
  int had_block; /* state_dir held the block before this start: it had a model */
  ap_checkpoint *ckpt;
  /* Why the service stopped itself (refusing rewards meanwhile), or
   * STOP_NONE; see stop_cause_text and "States" in ap_service.h. */
  stop_cause stopped;
  int64_t ckpt_retry_ms;    /* no periodic checkpoint before this (after a failure) */
  uint64_t checkpoints;     /* written since start */
  uint64_t ckpt_failures;

  /* Metrics (see ap_service_options.metrics); every pointer may be NULL,
   * which the o3m_metric_* updates accept. */
  o3m_metric *m_cache_hits, *m_cache_misses, *m_cache_entries; /* the item cache */
  o3m_metric *m_unknown_users, *m_unknown_items; /* ap_round.h "Unknown ids" */
  o3m_metric *m_decisions, *m_rounds, *m_failed, *m_pending, *m_evicted, *m_expired,
      *m_rewards, *m_fsync, *m_ckpt_age, *m_checkpoints;
  /* Per client (the first METRIC_CLIENTS of the config): its decisions
   * evicted from the pending table. */
  o3m_metric *m_client_evicted[METRIC_CLIENTS];
  /* Group commit (with ckpt and commit_each 0): the Reward calls whose
   * rewards are appended and applied but not yet synced, in arrival order,
   * each with its RewardReply.updates. reward_commit() syncs them with one
   * fdatasync and answers them all. */
  int commit_each;
  struct reward_wait {
    o3m_rpc_call *call;
    uint64_t decision;
    uint64_t updates;
  } group[REWARD_SLOTS];
  int n_group;
  uint64_t commits;         /* group commits (fdatasyncs) that acknowledged rewards */
  uint64_t committed;       /* rewards they acknowledged */

  /* AP replicas ([federation] replication = nats; NULL otherwise): the
   * reward stream and decision records (ap_replica.h). applied_seq is the
   * stream position the model includes; the Rewards this replica published
   * wait in rwait until their record is applied here (seq <= applied_seq),
   * then get the outcome of that application. applied: the decisions
   * applied, with the stream time of their record (open addressing, a slot
   * older than expiry_s counts as free), for apply-time de-duplication. */
  ap_replica *rep;
  char *replica;
  o3m_rng *ids;    /* a replica's decision ids: random but for its tag */
  uint64_t id_tag; /* ap_replica_tag of its name */
  uint64_t applied_seq;
  int64_t rep_checked_ms; /* the last replica_check_if_due, o3m_clock_ms */
  int rep_suspect;        /* the last check saw lost records: the next confirms */
  uint64_t skipped;       /* stream records not applied (duplicates, refused) */
  uint64_t refused;       /* of those, records outside the bounds (replica_bounds) */
  double sum_norm;        /* sqrt(sum_j max_norm_j^2): the bound of a real Q x */
  double *xbuf;           /* d values: a decision record from another replica */
  double *x0buf;          /* d0 values: its local part */
  struct replica_wait {
    o3m_rpc_call *call;
    uint64_t decision, seq;
    int rc;               /* outcome of the record's application */
  } rwait[REWARD_SLOTS];
  int n_rwait;
  struct applied_slot {
    uint64_t id;
    int64_t t_ms;
  } *applied;
  size_t applied_mask;
};

/* Copies the service's own running totals into the metrics: after every
 * drain of the serving thread (the idle hook) and every reward. Reading
 * them is a few loads; the totals stay where the service keeps them. */
static void metrics_publish(ap_service *s) {
  if (!s->m_decisions) return;
  ap_pending_stats st;
  ap_pending_stats_get(s->pending, o3m_clock_ms(), &st);
  ap_round_stats rst;
  ap_round_stats_get(s->round, &rst);
  o3m_metric_set(s->m_decisions, (double)rst.rounds);
  o3m_metric_set(s->m_rounds, (double)rst.fanouts);
  o3m_metric_set(s->m_failed, (double)rst.failed_rounds);
  o3m_metric_set(s->m_pending, (double)st.waiting);
  o3m_metric_set(s->m_evicted, (double)st.evicted);
  o3m_metric_set(s->m_expired, (double)st.expired);
  o3m_metric_set(s->m_rewards, (double)st.closed);
  o3m_metric_set(s->m_checkpoints, (double)s->checkpoints);
  o3m_metric_set(s->m_cache_hits, (double)rst.cache_hits);
  o3m_metric_set(s->m_cache_misses, (double)rst.cache_misses);
  o3m_metric_set(s->m_cache_entries, (double)rst.cache_size);
  o3m_metric_set(s->m_unknown_users, (double)rst.unknown_user_rounds);
  o3m_metric_set(s->m_unknown_items, (double)rst.unknown_item_rounds);
  for (int i = 0; i < s->n_clients && i < METRIC_CLIENTS; i++) {
    ap_pending_owner_stats(s->pending, i, &st);
    o3m_metric_set(s->m_client_evicted[i], (double)st.evicted);
  }
}

/* Registers the AP's series in m (see ap_service_options.metrics). */
static int metrics_register(ap_service *s, o3m_metrics *m, o3m_err *e) {
  static const o3m_metric_spec specs[] = {
      {"o3m_ap_decisions_total", "Decisions issued (answered Recommend calls)",
       O3M_METRIC_COUNTER, NULL, 0},
      {"o3m_ap_rounds_total", "Fan-out rounds: batches of Recommends sent to the passive parties",
       O3M_METRIC_COUNTER, NULL, 0},
      {"o3m_ap_recommend_failed_total", "Recommend calls refused or failed", O3M_METRIC_COUNTER,
       NULL, 0},
      {"o3m_ap_pending_decisions", "Decisions waiting for a reward", O3M_METRIC_GAUGE, NULL, 0},
      {"o3m_ap_pending_evicted_total", "Waiting decisions overwritten in the full pending table",
       O3M_METRIC_COUNTER, NULL, 0},
      {"o3m_ap_pending_expired_total", "Decisions found expired", O3M_METRIC_COUNTER, NULL, 0},
      {"o3m_ap_rewards_total", "Rewards applied to the model", O3M_METRIC_COUNTER, NULL, 0},
      {"o3m_ap_checkpoints_total", "Checkpoints written since start", O3M_METRIC_COUNTER, NULL,
       0},
      {"o3m_ap_item_cache_hits_total", "Candidate items whose summed part the AP had cached",
       O3M_METRIC_COUNTER, NULL, 0},
      {"o3m_ap_item_cache_misses_total", "Candidate items whose part the AP asked the PPs for",
       O3M_METRIC_COUNTER, NULL, 0},
      {"o3m_ap_item_cache_entries", "Items in the AP's cache of summed item parts",
       O3M_METRIC_GAUGE, NULL, 0},
      {"o3m_ap_unknown_user_rounds_total",
       "Valid Recommend calls whose user the AP's own user table lacks (the PPs never say)",
       O3M_METRIC_COUNTER, NULL, 0},
      {"o3m_ap_unknown_item_rounds_total",
       "Valid Recommend calls with an item the AP's own item table lacks (the PPs never say)",
       O3M_METRIC_COUNTER, NULL, 0},
  };
  o3m_metric **slots[] = {&s->m_decisions,  &s->m_rounds,       &s->m_failed,
                          &s->m_pending,    &s->m_evicted,      &s->m_expired,
                          &s->m_rewards,    &s->m_checkpoints,  &s->m_cache_hits,
                          &s->m_cache_misses, &s->m_cache_entries, &s->m_unknown_users,
                          &s->m_unknown_items};
  static const o3m_metric_spec fsync = {
      "o3m_ap_journal_sync_seconds", "Journal fdatasync time (one makes a group of rewards durable)",
      O3M_METRIC_HISTOGRAM, o3m_metrics_latency_bounds, O3M_METRICS_LATENCY_N};
  static const o3m_metric_spec age = {
      "o3m_ap_checkpoint_age_seconds",
      "Seconds since this process last wrote a checkpoint (since start before the first)",
      O3M_METRIC_AGE, NULL, 0};
  int rc = 0;
  for (size_t i = 0; rc == 0 && i < sizeof specs / sizeof specs[0]; i++)
    rc = o3m_metrics_series(m, &specs[i], NULL, slots[i], e);
  if (rc == 0 && s->ckpt) rc = o3m_metrics_series(m, &fsync, NULL, &s->m_fsync, e);
  if (rc == 0 && s->ckpt) rc = o3m_metrics_series(m, &age, NULL, &s->m_ckpt_age, e);
  static const o3m_metric_spec client_evicted = {
      "o3m_ap_client_pending_evicted_total",
      "Waiting decisions of this client evicted from the pending table (by its own newer ones, "
      "or taken back by a client below its share)",
      O3M_METRIC_COUNTER, NULL, 0};
  for (int i = 0; rc == 0 && i < s->n_clients && i < METRIC_CLIENTS; i++) {
    char label[O3M_CONFIG_MAX_NAME + 16];
    snprintf(label, sizeof label, "client=\"%s\"", s->clients[i]);
    rc = o3m_metrics_series(m, &client_evicted, label, &s->m_client_evicted[i], e);
  }
  if (rc == 0) o3m_metrics_mask_id(m, s->mask_id);
  return rc;
}

void ap_service_options_default(ap_service_options *opt) {
  memset(opt, 0, sizeof *opt);
  opt->pmg_timeout_s = 60;
}

int ap_service_port(const ap_service *s) { return o3m_rpc_server_port(s->server); }

uint64_t ap_service_mask_id(const ap_service *s) { return s->mask_id; }

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
static const char *owner_name(const ap_service *s, int o) {
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

/* SERVING -> STOPPING (see "States" in ap_service.h): the first cause
 * stays, and the server is asked to stop. Both causes come from the journal
 * or a checkpoint, so only a durable service gets here. */
static void service_stop(ap_service *s, stop_cause cause) {
  O3M_ASSERT(s->ckpt != NULL && cause != STOP_NONE);
  if (!s->stopped) s->stopped = cause;
  o3m_rpc_server_shutdown(s->server);
}

/* The journal failed (ap_journal.h: after a failed write or fdatasync
 * nothing since the last good sync can be trusted). Marks the service,
 * asks the server to stop (run() returns O3M_EIO, the daemon exits 1 and a
 * restart recovers from disk) and answers this reward with UNAVAILABLE: it
 * was not acknowledged, and it may or may not be found in the model after
 * the restart. */
static int durability_fail(ap_service *s, uint64_t decision, const o3m_err *why, o3m_err *e) {
  if (!s->stopped)
    o3m_log_error("the reward journal failed: %s; no more rewards are accepted and the active "
                  "party is stopping (restart it to recover from %s)", o3m_err_message(why),
                  s->state_dir);
  service_stop(s, STOP_DISK);
  return o3m_err_set(e, O3M_EUNAVAILABLE, "decision %llu: the reward could not be written to "
                     "disk and is not acknowledged; the active party is stopping",
                     (unsigned long long)decision);
}

/* The answer to a reward the model cannot take (o3m_policy_update_check
 * refused it): nothing was changed or journaled, and the decision stays
 * open (a retry meets the same refusal until the decision expires; another
 * reward value may pass). */
static int reward_refused(uint64_t decision, int rc, const char *what, o3m_err *e) {
  return o3m_err_set(e, rc, "decision %llu: refused, the model would become non-finite or "
                     "singular (%s); nothing changed, the decision stays open",
                     (unsigned long long)decision, what);
}

/* What a journal append's failure means for the Reward call: 0, or the
 * call's error (EIO stops the service). */
static int journal_append_result(ap_service *s, uint64_t decision, int rc, o3m_err *e) {
  unsigned long long id = (unsigned long long)decision;
  if (rc == O3M_EUNAVAILABLE)
    return o3m_err_set(e, rc, "decision %llu: the reward journal cannot start a new segment "
                       "now (ap_journal.h); nothing changed, the decision stays open: retry",
                       id);
  if (rc == O3M_EIO) {
    o3m_err why;
    o3m_err_set(&why, O3M_EIO, "a journal write failed");
    return durability_fail(s, decision, &why, e);
  }
  return rc;
}

/* Appends a reward and applies it to the model: with a state_dir through
 * the journal's append buffer (ap_checkpoint_apply_reward), which is not
 * durable until reward_commit() or ap_checkpoint_sync(); without one in
 * memory only. Either way o3m_policy_update_check runs first, so a reward
 * that would poison the model is refused with nothing changed. x0 (may be
 * NULL) is the decision's own part, which the local model learns too.
 * Returns 0 when the reward is in the model (and, with a state_dir, in the
 * journal's buffer). */
static int reward_append(ap_service *s, uint64_t decision, int arm, const double *x,
                         const double *x0, double reward, o3m_err *e) {
  unsigned long long id = (unsigned long long)decision;
  const char *what;
  int rc = o3m_policy_update_check(s->policy, arm, x, reward, &what);
  if (rc < 0) return reward_refused(decision, rc, what, e);
  if (!s->ckpt) {
    rc = o3m_policy_update(s->policy, arm, x, reward);
    if (rc == 0 && x0) ap_fallback_update(s->fallback, arm, x0, reward);
    return rc < 0 ? o3m_err_set(e, rc, "decision %llu: the policy update failed", id) : 0;
  }
  /* apply_reward checks again (and so refuses to journal a bad update even
   * for another caller); with w kept by the check above that costs O(d). */
  rc = ap_checkpoint_apply_reward(s->ckpt, decision, arm, x, x0, reward);
  if (rc == O3M_EUNAVAILABLE || rc == O3M_EIO) return journal_append_result(s, decision, rc, e);
  /* Only an update that passed the check and still failed gets here: it is
   * journaled and replays as failed; it is made durable with the next sync,
   * and the decision stays open. */
  if (rc < 0) return o3m_err_set(e, rc, "decision %llu: the policy update failed", id);
  return 0;
}

/* A degraded decision's reward: the local model alone learns it, through
 * the journal like any reward when there is a state_dir
 * (ap_checkpoint_apply_local), so that it survives a crash. */
static int local_append(ap_service *s, uint64_t decision, int arm, const double *x0,
                        double reward, o3m_err *e) {
  if (!s->ckpt) {
    ap_fallback_update(s->fallback, arm, x0, reward);
    return 0;
  }
  return journal_append_result(
      s, decision, ap_checkpoint_apply_local(s->ckpt, decision, arm, x0, reward), e);
}

/* One fdatasync of the journal (ap_checkpoint_sync), timed into the
 * journal fdatasync latency histogram. */
static int journal_sync(ap_service *s, o3m_err *e) {
  double t0 = o3m_clock_s();
  int rc = ap_checkpoint_sync(s->ckpt, e);
  o3m_metric_observe(s->m_fsync, o3m_clock_s() - t0);
  return rc;
}

/* The group commit, and the one place where appended rewards become
 * durable and are acknowledged (a replicated log would take the journal's
 * place here): one fdatasync (ap_checkpoint_sync) covers every reward of
 * s->group, that is every Reward that arrived since the previous commit,
 * while it ran included; then each is answered with its RewardReply.updates,
 * in arrival order. If the sync fails, none is acknowledged: each gets
 * UNAVAILABLE and the service stops (durability_fail), so a group is
 * durable whole or, after the restart, as the prefix the disk kept. Runs
 * on the serving thread: from the idle hook before any queued Recommend is
 * decided, and from h_reward when the group is full. */
static void reward_commit(ap_service *s) {
  if (s->n_group == 0) return;
  o3m_err se;
  o3m_err_clear(&se);
  int rc = journal_sync(s, &se);
  for (int i = 0; i < s->n_group; i++) {
    struct reward_wait *w = &s->group[i];
    if (rc < 0) {
      o3m_err e;
      o3m_err_clear(&e);
      int code = durability_fail(s, w->decision, &se, &e);
      o3m_rpc_call_fail(w->call, code, &e);
      continue;
    }
    O3m__V1__RewardReply rep = O3M__V1__REWARD_REPLY__INIT;
    rep.updates = w->updates;
    o3m_rpc_call_reply(w->call, &rep.base, NULL);
  }
  if (rc == 0) {
    s->commits++;
    s->committed += (uint64_t)s->n_group;
  }
  s->n_group = 0;
}

/* A periodic checkpoint when one is due, after the rewards are durable (a
 * due checkpoint delays only the calls that wait behind it). */
static void checkpoint_if_due(ap_service *s);
/* AP replicas: apply what the stream brought, answer the Rewards it
 * settles (below, "AP replicas"). */
static int replica_drain(ap_service *s, int64_t wait_ms, int max);
static void replica_check_if_due(ap_service *s);
static void replica_answer(ap_service *s);

/* The server's idle hook: first the rewards that queued (they are durable
 * and acknowledged before anything else happens, so a decision never sees
 * a reward that is not durable), then a due checkpoint, then the queued
 * Recommends in batches (ap_round.h). */
static void service_idle(void *ctx) {
  ap_service *s = ctx;
  if (s->rep) {
    /* Replicas: the stream instead of the journal; bounded per hook so
     * that Recommends are not starved while catching up. */
    replica_drain(s, 0, 4096);
    replica_answer(s);
    if (!s->stopped) replica_check_if_due(s);
    if (s->ckpt) checkpoint_if_due(s);
  } else if (s->ckpt) {
    reward_commit(s);
    checkpoint_if_due(s);
  }
  /* SIGHUP: the flag is cleared only when a reload starts, so that a
   * signal during one (the files may have changed again) gets its own. */
  if (s->reload && *s->reload && !ap_round_reload_busy(s->round)) {
    *s->reload = 0;
    o3m_err re;
    o3m_err_clear(&re);
    /* A refused load is logged and counted by o3m_tables; only "nothing to
     * reload" (no own tables) is said here. */
    if (ap_round_reload(s->round, NULL, NULL, &re) == O3M_ESTATE)
      o3m_log_warn("SIGHUP: %s", o3m_err_message(&re));
  }
  ap_round_flush(s->round);
  metrics_publish(s);
}

/* The outcome of a checkpoint (why: "periodic" or "final"). A file error
 * leaves the older checkpoints and the journal intact: it is logged and
 * the periodic checkpoint retried after CKPT_RETRY_MS. O3M_ECORRUPT means
 * Lambda or u itself is damaged in memory (ap_checkpoint_start refuses to
 * save it): the service stops, and a restart rebuilds the model from
 * disk. */
static void checkpoint_result(ap_service *s, const char *why, int rc, const o3m_err *ce) {
  if (rc == 0) {
    s->checkpoints++;
    o3m_metric_touch(s->m_ckpt_age);
    s->ckpt_retry_ms = 0;
    o3m_log_info("%s checkpoint written: journal seq %llu", why,
                 (unsigned long long)ap_checkpoint_seq(s->ckpt));
    return;
  }
  s->ckpt_failures++;
  s->ckpt_retry_ms = o3m_clock_ms() + CKPT_RETRY_MS;
  if (rc == O3M_ECORRUPT) {
    o3m_log_error("%s checkpoint refused: %s; the model in memory is damaged: stopping (a "
                  "restart recovers it from %s)", why, o3m_err_message(ce), s->state_dir);
    service_stop(s, STOP_DAMAGED);
    return;
  }
  if (rc == O3M_EIO && !s->rep && ap_journal_failed(ap_checkpoint_journal(s->ckpt))) {
    /* The health repair's journal record (or the rotation) could not be
     * written: that is the journal failing, not only this checkpoint. */
    o3m_err why_;
    o3m_err_set(&why_, O3M_EIO, "%s", o3m_err_message(ce));
    o3m_err ignored;
    durability_fail(s, 0, &why_, &ignored);
    return;
  }
  o3m_log_warn("%s checkpoint failed (%s: %s); the journal still holds every reward, retrying "
               "in %d s", why, o3m_errname(rc), o3m_err_message(ce), CKPT_RETRY_MS / 1000);
}

/* Writes a checkpoint and waits for it (the final one). */
static void checkpoint_now(ap_service *s, const char *why) {
  o3m_err ce;
  o3m_err_clear(&ce);
  int rc = ap_checkpoint_write(s->ckpt, &ce);
  checkpoint_result(s, why, rc, &ce);
}

/* ------------------------------------------------ AP replicas (ap_replica.h) */

/* The applied set: was decision id applied from a record at most
 * expiry_s older than now_ms (a stream time)? Deterministic in the stream:
 * every replica that applied the same records answers the same. */
static struct applied_slot *applied_find(ap_service *s, uint64_t id, int64_t now_ms, int *found) {
  int64_t horizon = now_ms - (int64_t)s->expiry_s * 1000;
  struct applied_slot *free_slot = NULL;
  size_t i = (size_t)o3m_hash_bytes(&id, sizeof id, 0) & s->applied_mask;
  for (size_t n = 0; n <= s->applied_mask; n++, i = (i + 1) & s->applied_mask) {
    struct applied_slot *a = &s->applied[i];
    if (a->id == id && a->t_ms >= horizon) {
      *found = 1;
      return a;
    }
    if (!free_slot && (a->id == 0 || a->t_ms < horizon)) free_slot = a;
    if (a->id == 0) break;
  }
  *found = 0;
  return free_slot;
}

static void applied_add(ap_service *s, uint64_t id, int64_t t_ms) {
  int found;
  struct applied_slot *a = applied_find(s, id, t_ms, &found);
  if (!a) {
    o3m_log_warn("the applied-decision set is full; decision %llu is not remembered (JetStream's "
                 "duplicate window still refuses its retries)", (unsigned long long)id);
    return;
  }
  a->id = id;
  a->t_ms = t_ms;
}

/* A replica's decision id source (ap_pending_id_fn): 48 random bits and
 * the replica's tag. */
static int tagged_id(void *ctx, uint64_t *id) {
  ap_service *s = ctx;
  uint64_t v;
  int rc = o3m_rng_u64(s->ids, &v);
  if (rc < 0) return rc;
  *id = (v & ~(uint64_t)((UINT64_C(1) << AP_REPLICA_TAG_BITS) - 1)) | s->id_tag;
  return 0;
}

/* ap_round's record hook: the decision's masked context is kept where
 * every other replica can ask for it (ap_replica.h, "Decision records")
 * before the Recommend is answered, so any live replica can take its
 * reward. */
static int replica_record(void *ctx, uint64_t decision, int owner, int arm, uint64_t mask_id,
                          const double *x, const double *x0, int degraded, o3m_err *e) {
  ap_service *s = ctx;
  return ap_replica_put_decision(s->rep, decision, owner_name(s, owner), arm, mask_id, x, x0,
                                 degraded, e);
}

/* The one check of a reward's value, for a Reward call and for a record
 * of the stream: finite and within [reward_min, reward_max]. 0, or
 * O3M_EINVAL with a message that names the bounds, never the value. */
static int reward_check(const ap_service *s, double reward, o3m_err *e) {
  if (!isfinite(reward) || reward < s->reward_min || reward > s->reward_max)
    return o3m_err_set(e, O3M_EINVAL, "reward is not a finite value in [%g, %g]", s->reward_min,
                       s->reward_max);
  return 0;
}

/* The bounds every record taken from the stream or the bucket must keep,
 * whoever wrote it (defence in depth against a forged record or a
 * compromised replica): the masked context's l2 norm within sum_norm, the
 * bound a real sum Q x has (the check and slack ap_round applies to the
 * parties' sums), the arm in range (disjoint models; a shared model has
 * no arms) and the reward finite and within
 * [reward_min, reward_max] (what h_reward refuses). Returns 0, or
 * O3M_EINVAL with e naming the bound (never the value). Deterministic: a
 * function of the record and the config only. */
static int replica_bounds(ap_service *s, int arm, const double *x, double reward, o3m_err *e) {
  if (s->n_arms > 0 && (arm < 0 || arm >= s->n_arms))
    return o3m_err_set(e, O3M_EINVAL, "arm outside 0..%d", s->n_arms - 1);
  int rc = reward_check(s, reward, e);
  if (rc < 0) return rc;
  return o3m_wire_check_row_norms("masked context", 1, s->d, x, s->sum_norm, 0, NULL, e);
}

/* Applies one stream record to the model, exactly as every replica does:
 * skipped (and counted) when its decision was applied before within the
 * pending lifetime, when it was made under another mask, when it is
 * outside the bounds (replica_bounds: counted in refused and logged), or
 * when the model cannot take it (o3m_policy_update_check); the outcome
 * goes to the Reward waiting for it here, if any. */
static int replica_apply(ap_service *s, const ap_replica_record *r) {
  int found, rc;
  o3m_err be;
  o3m_err_clear(&be);
  applied_find(s, r->decision, r->time_ms, &found);
  if (found) rc = O3M_EEXISTS;
  else if (r->mask_id != s->mask_id) rc = O3M_EMASK;
  else if ((rc = replica_bounds(s, r->arm, r->x, r->reward, &be)) < 0) {
    s->refused++;
    o3m_log_warn("replica '%s': stream record %llu (decision %llu) skipped, out of bounds: %s "
                 "(%llu refused so far)", s->replica, (unsigned long long)r->seq,
                 (unsigned long long)r->decision, o3m_err_message(&be),
                 (unsigned long long)s->refused);
  } else if (r->degraded) {
    /* A degraded decision's reward: the local model alone (its x is no
     * context); a replica without the local model skips it. */
    rc = s->fallback && r->x0 ? 0 : O3M_EINVAL;
    if (rc == 0) ap_fallback_update(s->fallback, r->arm, r->x0, r->reward);
  } else if ((rc = o3m_policy_update_check(s->policy, r->arm, r->x, r->reward, NULL)) == 0) {
    rc = o3m_policy_update(s->policy, r->arm, r->x, r->reward);
    if (rc == 0 && s->fallback && r->x0) ap_fallback_update(s->fallback, r->arm, r->x0, r->reward);
  }
  if (rc == 0) applied_add(s, r->decision, r->time_ms);
  else s->skipped++;
  /* A decision made here and rewarded through another replica. */
  ap_pending_close(s->pending, r->decision);
  s->applied_seq = r->seq;
  if (s->ckpt) ap_checkpoint_set_position(s->ckpt, r->seq);
  for (int i = 0; i < s->n_rwait; i++)
    if (s->rwait[i].seq == r->seq) s->rwait[i].rc = rc;
  return rc;
}

/* The reward stream cannot be followed any more (a record that does not
 * parse, records lost, the stream re-created or gone: ap_replica.h): the
 * replica stops serving, and writes no final checkpoint, rather than go
 * on with a model no other replica will have. */
static void replica_damaged(ap_service *s, const o3m_err *why) {
  if (!s->stopped)
    o3m_log_error("replica '%s': %s; stopping (the stream must hold every record this "
                  "replica applied; see README, \"AP replicas on NATS JetStream\")", s->replica,
                  o3m_err_message(why));
  if (!s->stopped) s->stopped = STOP_STREAM;
  o3m_rpc_server_shutdown(s->server);
}

/* Every REPLICA_CHECK_MS the serving thread asks JetStream whether the
 * stream still holds what this replica applied (ap_replica_check): a
 * purge or a deletion is otherwise seen only when the next record comes,
 * or never by a replica that takes no reward. The replica stops only when
 * two checks in a row, REPLICA_CHECK_MS apart, find records lost: a purge
 * or a deletion cannot be undone, so a real loss is still there at the
 * second, while a stream's state read once during a leader election in
 * the NATS cluster (a node killed under load) need not be the stream's. */
static void replica_check_if_due(ap_service *s) {
  int64_t now = o3m_clock_ms();
  if (now - s->rep_checked_ms < REPLICA_CHECK_MS) return;
  s->rep_checked_ms = now;
  o3m_err e;
  o3m_err_clear(&e);
  int rc = ap_replica_check(s->rep, &e);
  if (rc == O3M_ECORRUPT && s->rep_suspect) {
    replica_damaged(s, &e);
  } else if (rc == O3M_ECORRUPT) {
    s->rep_suspect = 1;
    o3m_log_warn("replica '%s': %s; stopping if the next check, in %d ms, finds the same",
                 s->replica, o3m_err_message(&e), REPLICA_CHECK_MS);
  } else {
    s->rep_suspect = 0;
    if (rc < 0) o3m_log_warn("replica '%s': %s", s->replica, o3m_err_message(&e));
  }
}

/* Applies every record that has arrived (at most max, 0: no limit),
 * waiting up to wait_ms for the first. A record that does not parse stops
 * the service: skipping it would let the replicas differ. */
static int replica_drain(ap_service *s, int64_t wait_ms, int max) {
  for (int n = 0; max == 0 || n < max; n++) {
    ap_replica_record r;
    o3m_err e;
    o3m_err_clear(&e);
    int rc = ap_replica_next(s->rep, &r, n == 0 ? wait_ms : 0, &e);
    if (rc == 0) return n;
    if (rc < 0) {
      if (rc == O3M_ECORRUPT) {
        replica_damaged(s, &e);
      } else {
        o3m_log_warn("replica '%s': %s", s->replica, o3m_err_message(&e));
      }
      return rc;
    }
    replica_apply(s, &r);
  }
  return max;
}

/* Answers the Rewards whose records are applied here, with the outcome. */
static void replica_answer(ap_service *s) {
  int k = 0;
  for (int i = 0; i < s->n_rwait; i++) {
    struct replica_wait *w = &s->rwait[i];
    if (w->seq > s->applied_seq) {
      s->rwait[k++] = *w;
      continue;
    }
    if (w->rc == 0) {
      O3m__V1__RewardReply rep = O3M__V1__REWARD_REPLY__INIT;
      rep.updates = o3m_policy_updates(s->policy);
      o3m_rpc_call_reply(w->call, &rep.base, NULL);
      s->committed++;
      continue;
    }
    o3m_err e;
    o3m_err_set(&e, w->rc, "decision %llu: %s", (unsigned long long)w->decision,
                w->rc == O3M_EEXISTS ? "was already rewarded (found when applying the stream)"
                                     : "its record was refused when applied (nothing changed)");
    o3m_rpc_call_fail(w->call, w->rc, &e);
  }
  s->n_rwait = k;
}

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
static int reward_lookup(ap_service *s, const char *caller, uint64_t decision, int64_t now,
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
    if (has_owner && strcmp(rec_owner, owner_name(s, me)) != 0)
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

/* A Reward on a replica: checked like a local one, the decision found in
 * this replica's pending table or else by lookup, then appended to the
 * stream; the call waits until this replica has applied the record (so
 * its reply reports the model that includes it). See ap_replica.h. */
static int replica_reward(ap_service *s, o3m_rpc_call *call, const O3m__V1__RewardRequest *req,
                          o3m_err *e) {
  unsigned long long id = (unsigned long long)req->decision;
  int found;
  int64_t now = o3m_clock_ms();
  applied_find(s, req->decision, o3m_clock_wall_ms(), &found);
  if (found) return o3m_err_set(e, O3M_EEXISTS, "decision %llu was already rewarded", id);
  if (s->n_rwait == REWARD_SLOTS)
    return o3m_err_set(e, O3M_EFULL, "too many rewards wait for the stream; retry");
  int arm, degraded;
  uint64_t mask_id;
  const double *x, *x0;
  int rc = reward_lookup(s, o3m_rpc_call_identity(call), req->decision, now, &arm, &mask_id, &x,
                         &x0, &degraded, e);
  if (rc < 0) return rc;
  /* A degraded decision's record says so and carries x^0 (its x is zeros):
   * every replica's local model alone learns it (replica_apply). */
  degraded = degraded && x0;
  /* A decision record from another replica is checked like a stream record. */
  o3m_err be;
  o3m_err_clear(&be);
  if ((rc = replica_bounds(s, arm, x, req->reward, &be)) < 0)
    return o3m_err_set(e, O3M_ECORRUPT, "decision %llu: its record from another replica is out of "
                       "bounds (%s); nothing changed", id, o3m_err_message(&be));
  const char *what;
  if (!degraded && (rc = o3m_policy_update_check(s->policy, arm, x, req->reward, &what)) < 0)
    return reward_refused(req->decision, rc, what, e);
  uint64_t seq;
  int dup;
  o3m_err pe;
  o3m_err_clear(&pe);
  rc = ap_replica_publish(s->rep, req->decision, mask_id, arm, req->reward, x, x0, degraded, &seq,
                          &dup, &pe);
  if (rc == O3M_ECORRUPT) {
    replica_damaged(s, &pe);
    return o3m_err_set(e, O3M_EUNAVAILABLE, "decision %llu: the reward stream lost records; "
                       "this replica is stopping: retry on another", id);
  }
  if (rc < 0)
    return o3m_err_set(e, O3M_EUNAVAILABLE, "decision %llu: the reward is not acknowledged "
                       "(%s); retry, on this or another replica", id, o3m_err_message(&pe));
  if (dup) return o3m_err_set(e, O3M_EEXISTS, "decision %llu was already rewarded", id);
  s->commits++;
  s->rwait[s->n_rwait++] = (struct replica_wait){call, req->decision, seq, 0};
  /* Usually the record is back within the publish's round trip: apply it
   * now; the idle hook that follows this handler answers the call (a
   * deferred call is never completed inside its own handler). */
  replica_drain(s, 0, 0);
  return O3M_RPC_DEFERRED;
}

static int h_reward(void *ctx, o3m_rpc_call *call, const ProtobufCMessage *req_,
                    ProtobufCMessage *rep_, o3m_err *e) {
  ap_service *s = ctx;
  const O3m__V1__RewardRequest *req = (const O3m__V1__RewardRequest *)req_;
  O3m__V1__RewardReply *rep = (O3m__V1__RewardReply *)rep_;

  if (s->stopped)
    return o3m_err_set(e, O3M_EUNAVAILABLE, "the active party is stopping after %s; rewards "
                       "are not accepted", stop_cause_text(s->stopped));
  int rc = reward_check(s, req->reward, e);
  if (rc < 0) return rc;
  if (s->rep) return replica_reward(s, call, req, e);
  int64_t t = o3m_clock_ms();
  int arm;
  uint64_t mask_id;
  const double *x, *x0;
  int degraded;
  rc = reward_lookup(s, o3m_rpc_call_identity(call), req->decision, t, &arm, &mask_id, &x, &x0,
                     &degraded, e);
  if (rc < 0) return rc;
  /* The local model learns every reward; a degraded decision's reaches it
   * alone (ap_fallback.h): the federated model never learns from a context
   * it did not see. Both kinds are journaled and acknowledged alike. */
  /* A full group is committed first; with REWARD_SLOTS request slots of
   * Reward that happens only when calls of another path filled slots. */
  if (s->n_group == REWARD_SLOTS) reward_commit(s);
  if (s->stopped)
    return o3m_err_set(e, O3M_EUNAVAILABLE, "the active party is stopping after %s; rewards "
                       "are not accepted", stop_cause_text(s->stopped));
  if (x0 && degraded)
    rc = local_append(s, req->decision, arm, x0, req->reward, e);
  else
    rc = reward_append(s, req->decision, arm, x, x0, req->reward, e);
  if (rc < 0) return rc;
  if (s->ckpt && !s->commit_each) {
    /* Group commit: the decision is closed now, so that a second reward
     * for it in the same group is ALREADY_EXISTS, and the call waits for
     * reward_commit() (if that fails the service stops and accepts no
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
    rc = journal_sync(s, &se);
    if (rc < 0) return durability_fail(s, req->decision, &se, e);
    s->commits++;
    s->committed++;
  }
  ap_pending_close(s->pending, req->decision);
  rep->updates = o3m_policy_updates(s->policy);
  if (s->ckpt) checkpoint_if_due(s);
  return 0;
}

/* Collects a periodic checkpoint written off the serving thread, if one
 * finished (or, with wait, once it finishes), and reports its outcome;
 * does nothing when none was started. */
static void checkpoint_collect(ap_service *s, int wait) {
  o3m_err ce;
  o3m_err_clear(&ce);
  int done, rc = ap_checkpoint_collect(s->ckpt, wait, &done, &ce);
  if (done) checkpoint_result(s, "periodic", rc, &ce);
}

/* Periodic checkpoints are written off the serving thread
 * (ap_checkpoint_start): here a finished one is collected, and a due one
 * is started from a snapshot of the model as of the last journaled reward;
 * the serving threads only pay for the journal rotation and the copy of
 * the state. */
static void checkpoint_if_due(ap_service *s) {
  checkpoint_collect(s, 0);
  if (s->stopped || !ap_checkpoint_due(s->ckpt) || o3m_clock_ms() < s->ckpt_retry_ms) return;
  o3m_err ce;
  o3m_err_clear(&ce);
  int rc = ap_checkpoint_start(s->ckpt, &ce);
  if (rc) checkpoint_result(s, "periodic", rc, &ce);
}

/* ---------------------------------------------------------------- Stats */

static int h_stats(void *ctx, o3m_rpc_call *call, const ProtobufCMessage *req_,
                   ProtobufCMessage *rep_, o3m_err *e) {
  (void)call, (void)req_, (void)e;
  ap_service *s = ctx;
  O3m__V1__ActiveStats *rep = (O3m__V1__ActiveStats *)rep_;
  ap_pending_stats st;
  ap_pending_stats_get(s->pending, o3m_clock_ms(), &st);
  ap_round_stats rst;
  ap_round_stats_get(s->round, &rst);
  rep->rounds = rst.rounds;
  rep->updates = o3m_policy_updates(s->policy);
  rep->pending = st.waiting;
  rep->expired = st.expired + st.evicted;
  rep->theta_norm = s->model == O3M_MODEL_SHARED ? o3m_policy_theta_norm(s->policy, 0) : 0.0;
  /* protobuf-c packs but never writes through these pointers. */
  rep->algo = (char *)o3m_algo_name(s->algo);
  rep->model = (char *)o3m_model_name(s->model);
  rep->fanouts = rst.fanouts;
  rep->reloads = rst.reloads;
  rep->reloads_refused = rst.reloads_refused;
  rep->last_reload_ms = rst.last_reload_ms;
  rep->degraded_rounds = rst.degraded;
  /* The local model's own count: restored from the checkpoint and the
   * journal like the federated one's, so it survives a restart. */
  if (s->fallback) rep->local_updates = o3m_policy_updates(ap_fallback_policy(s->fallback));
  rep->item_cache_hits = rst.cache_hits;
  rep->item_cache_misses = rst.cache_misses;
  rep->item_cache_size = rst.cache_size;
  rep->item_cache_capacity = rst.cache_capacity;
  rep->item_cache_resets = rst.cache_resets;
  rep->item_cache_evictions = rst.cache_evictions;
  rep->item_cache_stale_retries = rst.stale_retries;
  rep->unknown_user_rounds = rst.unknown_user_rounds;
  rep->unknown_item_rounds = rst.unknown_item_rounds;
  return 0;
}

/* ---------------------------------------------------------------- Reload */

static int h_reload(void *ctx, o3m_rpc_call *call, const ProtobufCMessage *req_,
                    ProtobufCMessage *rep_, o3m_err *e) {
  (void)call, (void)req_;
  ap_service *s = ctx;
  int users, items;
  int rc = ap_round_reload(s->round, &users, &items, e);
  if (rc < 0) return rc;
  ap_round_stats rst;
  ap_round_stats_get(s->round, &rst);
  O3m__V1__ReloadReply *rep = (O3m__V1__ReloadReply *)rep_;
  rep->reloads = rst.reloads;
  rep->refused = rst.reloads_refused;
  rep->last_reload_ms = rst.last_reload_ms;
  rep->users = (uint32_t)users;
  rep->items = (uint32_t)items;
  return 0;
}

static const o3m_rpc_method ap_methods[] = {
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

/* Recommend, Reward and Stats only for the clients the config names: a
 * party (or any other certificate of the federation CA) must not see the
 * chosen items and scores, learn whether a reward arrived or write rewards
 * into users' decisions. Info is public to the federation. Reload of the
 * own tables is the active party's operator's act, with its own
 * certificate (as a passive party's); a client only reads and decides. */
static const o3m_access_rule ap_access[] = {
    {O3M_PATH_ACTIVE_INFO, O3M_ACCESS_PARTY | O3M_ACCESS_CLIENT},
    {O3M_PATH_ACTIVE_RECOMMEND, O3M_ACCESS_CLIENT},
    {O3M_PATH_ACTIVE_REWARD, O3M_ACCESS_CLIENT},
    {O3M_PATH_ACTIVE_STATS, O3M_ACCESS_CLIENT},
    {O3M_PATH_ACTIVE_RELOAD, O3M_ACCESS_SELF},
};

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
    rc = replica_drain(s, 200, 0);
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
  if (!s->rep && s->ckpt) reward_commit(s);
  /* A failed commit (or an earlier failure) stopped the service: the model
   * then holds rewards that are not durable (or is damaged), and a batch
   * that comes back from its fan-out meanwhile is not decided on it. */
  if (s->stopped)
    return o3m_err_set(e, O3M_EUNAVAILABLE, "the active party is stopping after %s; no "
                       "decision is made", stop_cause_text(s->stopped));
  return 0;
}

/* Frees whatever create got to; every field is NULL/0 or owned. */
static void service_free(ap_service *s) {
  if (!s) return;
  o3m_rpc_server_destroy(s->server);
  ap_replica_destroy(s->rep);
  o3m_rng_destroy(s->ids);
  free(s->replica);
  free(s->xbuf);
  free(s->x0buf);
  free(s->applied);
  o3m_access_destroy(s->access); /* after the server that calls it */
  ap_checkpoint_close(s->ckpt); /* syncs; before the policy it borrows */
  free(s->state_dir);
  ap_round_destroy(s->round); /* before what it borrows */
  ap_fallback_destroy(s->fallback);
  for (int b = 0; b < s->n_peers; b++) ap_peers_destroy(s->peers[b]);
  ap_pending_destroy(s->pending);
  free(s->clients);
  o3m_block_destroy(s->block);
  o3m_policy_destroy(s->policy);
  ap_catalog_destroy(s->cat);
  free(s->dims_buf);
  free(s);
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

  ap_service *s = calloc(1, sizeof *s);
  if (!s) return o3m_err_set(e, O3M_ENOMEM, "out of memory");
  snprintf(s->name, sizeof s->name, "%s", me->name);
  s->reload = opt->reload;
  s->commit_each = opt->commit_each;
  s->d = o3m_config_d(cfg);
  s->d0 = me->dims;
  s->slot = me->slot;
  memcpy(s->fingerprint, o3m_config_fingerprint(cfg), sizeof s->fingerprint);
  const o3m_config_policy_section *pp = o3m_config_policy(cfg);
  s->k_max = pp->max_candidates;
  s->reward_min = pp->reward_min;
  s->reward_max = pp->reward_max;
  s->expiry_s = pp->pending_expiry_s;
  const o3m_config_replication *repl = o3m_config_replication_of(cfg);
  int replicated = strcmp(repl->mode, "nats") == 0;
  if (replicated != (opt->replica != NULL)) {
    free(s);
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

  s->dims_buf = malloc(sizeof *s->dims_buf * (size_t)m);
  if (!s->dims_buf) {
    rc = o3m_err_set(e, O3M_ENOMEM, "out of memory");
    goto fail;
  }

  /* The clients, whose index is their owner number (owner_of). */
  s->n_clients = o3m_config_n_clients(cfg);
  s->clients = calloc((size_t)(s->n_clients > 0 ? s->n_clients : 1), sizeof *s->clients);
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
                                pp->pending_client_share, s->ids ? tagged_id : NULL, s);
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
      .item_cache = pp->item_cache,
      .before_decide = before_decide,
      .before_decide_ctx = s,
      .metrics = opt->metrics,
  };
  if (replicated) {
    rcfg.record = replica_record;
    rcfg.record_ctx = s;
    size_t cap = 1024;
    while (cap < 2 * (size_t)pp->pending_capacity && cap < ((size_t)1 << 22)) cap *= 2;
    s->sum_norm = rcfg.sum_norm;
    s->replica = strdup(opt->replica);
    s->xbuf = malloc(sizeof *s->xbuf * (size_t)s->d);
    s->x0buf = malloc(sizeof *s->x0buf * (size_t)s->d0);
    s->applied = calloc(cap, sizeof *s->applied);
    s->applied_mask = cap - 1;
    if (!s->replica || !s->xbuf || !s->x0buf || !s->applied) {
      rc = o3m_err_set(e, O3M_ENOMEM, "out of memory");
      goto fail;
    }
  }
  rc = ap_round_create(&s->round, &rcfg, e);
  if (rc < 0) goto fail;

  if (me->state_dir && !(s->state_dir = strdup(me->state_dir))) {
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
    rc = ap_peers_create(&s->peers[s->n_peers], cfg, me, opt->insecure, e);
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
    rc = metrics_register(s, opt->metrics, e);
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
  sc.idle = service_idle;
  sc.metrics = opt->metrics;
  /* Replicas apply the stream, and SIGHUP's reload is taken, also when no
   * call arrives. */
  sc.idle_on_timeout = replicated || opt->reload != NULL;
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
  if (s->ckpt) checkpoint_collect(s, 1);
  if (s->ckpt && !s->stopped) checkpoint_now(s, "final");
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
                 s->stopped ? stop_cause_text(s->stopped) : "");
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
