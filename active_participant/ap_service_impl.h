/* ap_service_impl.h -- what the active participant's service files share;
 * not installed.
 *
 * The service (ap_service.h) is one module in five files, one per concern:
 * set-up and lifecycle (ap_service.c: the AP's block, open_state, create,
 * run, shutdown, destroy), the handlers with their method and access tables
 * (ap_service_handlers.c), reward durability (ap_service_durable.c: the
 * journal's group commit, checkpoints, the idle hook and the stop after a
 * disk error or a damaged model), the AP replicas' glue with their
 * applied-decision ring (ap_service_replica.c) and the metrics
 * (ap_service_metrics.c). This header holds the service's structure and the
 * functions more than one of them calls. Only the service's own files
 * include it; everyone else uses ap_service.h. */
#ifndef AP_SERVICE_IMPL_H
#define AP_SERVICE_IMPL_H

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

/* Why the service stopped itself. Each cause has its own words in every
 * message that reports the stop (the reward refusals, the last state line,
 * the daemon's exit line), so that an operator looks at the right thing. */
typedef enum stop_cause {
  STOP_NONE = 0,
  STOP_DISK,   /* a journal write or sync failed */
  STOP_DAMAGED, /* the model in memory failed its health check at a checkpoint */
  STOP_STREAM   /* a replica's reward stream lost records or cannot be read */
} stop_cause;

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

  o3m_access *access; /* who may call what: ap_access (ap_service_handlers.c) */
  volatile sig_atomic_t *reload; /* ap_service_options.reload, or NULL */
  o3m_rpc_call *reload_call;     /* the Reload call waiting for its load, or NULL */
  o3m_rpc_server *server;
  int ran;

  /* Durability (NULL/0 without a state_dir; see ap_service.h). */
  char *state_dir;
  int had_block; /* state_dir held the block before this start: it had a model */
  ap_checkpoint *ckpt;
  /* Why the service stopped itself (refusing rewards meanwhile), or
   * STOP_NONE; see ap_service__stop_cause_text and "States" in ap_service.h. */
  stop_cause stopped;
  int64_t ckpt_retry_ms;    /* no periodic checkpoint before this (after a failure) */
  uint64_t checkpoints;     /* written since start */
  uint64_t ckpt_failures;

  /* Metrics (see ap_service_options.metrics); every pointer may be NULL,
   * which the o3m_metric_* updates accept. */
  o3m_metric *m_cache_hits, *m_cache_misses, *m_cache_entries; /* the item cache */
  o3m_metric *m_unknown_users, *m_unknown_items; /* ap_round.h "Unknown ids" */
  o3m_metric *m_sliced;         /* ap_round.h "Slices" */
  o3m_metric *m_uncached, *m_over_budget; /* ap_round.h "Cost model" */
  o3m_metric *m_decisions, *m_rounds, *m_failed, *m_pending, *m_evicted, *m_expired,
      *m_rewards, *m_fsync, *m_ckpt_age, *m_checkpoints;
  /* Per client (the first METRIC_CLIENTS of the config): its decisions
   * evicted from the pending table. */
  o3m_metric *m_client_evicted[METRIC_CLIENTS];
  /* Per client: the uncached item ids charged to its budget. */
  o3m_metric *m_client_uncached[METRIC_CLIENTS];
  /* Group commit (with ckpt and commit_each 0): the Reward calls whose
   * rewards are appended and applied but not yet synced, in arrival order,
   * each with its RewardReply.updates. ap_service__reward_commit() syncs them with one
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
  int64_t rep_checked_ms; /* the last ap_service__replica_check_if_due, o3m_clock_ms */
  int rep_check_ms;       /* how often it asks: [federation] nats_check_ms */
  int rep_limits;         /* the stream's settings that drop records, at the last check */
  int64_t rep_limits_said_ms; /* when the last ERROR about them was logged */
  o3m_metric *m_rep_limits; /* o3m_ap_replica_stream_limits */
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

/* ap_service_handlers.c */
/* The methods and who may call them (the sizes are checked against the
 * definitions). */
extern const o3m_rpc_method ap_methods[5];
extern const o3m_access_rule ap_access[5];
const char *ap_service__owner_name(const ap_service *s, int o);
int ap_service__reward_lookup(ap_service *s, const char *caller, uint64_t decision, int64_t now,
                              int *arm, uint64_t *mask_id, const double **x, const double **x0,
                              int *degraded, o3m_err *e);

/* ap_service_durable.c */
const char *ap_service__stop_cause_text(stop_cause c);
int ap_service__durability_fail(ap_service *s, uint64_t decision, const o3m_err *why, o3m_err *e);
int ap_service__reward_refused(uint64_t decision, int rc, const char *what, o3m_err *e);
int ap_service__reward_append(ap_service *s, uint64_t decision, int arm, const double *x,
                              const double *x0, double reward, o3m_err *e);
int ap_service__local_append(ap_service *s, uint64_t decision, int arm, const double *x0,
                             double reward, o3m_err *e);
int ap_service__journal_sync(ap_service *s, o3m_err *e);
void ap_service__reward_commit(ap_service *s);
void ap_service__service_idle(void *ctx);
/* From the idle hook: swaps a finished reload of the own tables in, or
 * counts its refusal, and answers the Reload call that waits for it
 * (ap_service_handlers.c). */
void ap_service__reload_take(ap_service *s);
void ap_service__checkpoint_now(ap_service *s, const char *why);
void ap_service__checkpoint_collect(ap_service *s, int wait);
/* A periodic checkpoint when one is due, after the rewards are durable (a
 * due checkpoint delays only the calls that wait behind it). */
void ap_service__checkpoint_if_due(ap_service *s);

/* ap_service_replica.c */
/* Apply what the stream brought, check it for lost records, answer the
 * Rewards it settles. */
int ap_service__replica_drain(ap_service *s, int64_t wait_ms, int max);
void ap_service__replica_check_if_due(ap_service *s);
void ap_service__replica_answer(ap_service *s);
int ap_service__tagged_id(void *ctx, uint64_t *id);
int ap_service__replica_record(void *ctx, uint64_t decision, int owner, int arm, uint64_t mask_id,
                               const double *x, const double *x0, int degraded, o3m_err *e);
int ap_service__reward_check(const ap_service *s, double reward, o3m_err *e);
int ap_service__replica_reward(ap_service *s, o3m_rpc_call *call,
                               const O3m__V1__RewardRequest *req, o3m_err *e);

/* ap_service_metrics.c */
void ap_service__metrics_publish(ap_service *s);
int ap_service__metrics_register(ap_service *s, o3m_metrics *m, o3m_err *e);

#endif
