/* ap_service.h -- the active participant's service (the o3m-active daemon).
 *
 * The active participant (AP) is party 0 of the federation. It owns the
 * bandit policy, a column block of its own features and the decisions that
 * wait for a reward. One ap_service holds all of that plus the gRPC server of
 * the Active service (Info, Recommend, Reward, Stats, Reload) and one RPC client per
 * passive participant (PP).
 *
 * Files. This header tells the whole story. The service is five files that
 * share ap_service_impl.h: ap_service.c (the AP's block, install_block at
 * one spot, the recovery of the state, create and the lifecycle),
 * ap_service_handlers.c (the handlers with their method and access tables),
 * ap_service_durable.c (rewards through the journal and their group
 * commit, checkpoints, the idle hook, the stop after a disk error or a
 * damaged model), ap_service_replica.c (a replica's side: records applied
 * from the stream, the applied-decision ring, a replica's Reward) and
 * ap_service_metrics.c. The modules it owns: ap_pending, ap_journal and
 * ap_checkpoint (see "Durable state"); ap_catalog.[ch]: the disjoint
 * model's items catalog. ap_peers.[ch]: the clients of the PPs, the rebuild
 * of a channel that stays unavailable and the start-up wait for their Info.
 * ap_round.[ch]: a Recommend's validation, the queue, the batched fan-out
 * and gather, the decision, and the AP's own feature tables.
 * ap_replica.[ch]: the reward stream and decision records on NATS
 * JetStream, used only by replicas (see "Replicas" below).
 *
 * Start-up (ap_service_create). The federation config gives the policy, the
 * partition and every party. The service loads its own feature tables if the
 * config names any, builds the disjoint model's catalog (item id -> arm), then
 * obtains its block Q^0 as every column party does (o3m_party_block.h): the
 * stored one, else fetched from the mask generator (its Info checked, the
 * block sealed to a key pair drawn for the fetch), retried with a backoff
 * of 100 ms doubling to 2 s while the generator is unreachable, up to
 * pmg_timeout_s; then ConfirmBlock tells the generator it is installed,
 * retried on its own in the same way (a block is served once per party, so
 * the block is never fetched again after a confirmation that may have
 * arrived). Then it creates one client per PP (ap_peers.h; they fail fast,
 * so a missing PP is an error of the round and not a wait) and waits,
 * within the same timeout, until every PP has answered Info with the right
 * role, index and partition (a PP still unreachable then is logged and the
 * service starts anyway; any other bad answer fails the start). Before the
 * block it creates the pending table and every buffer a
 * round needs for up to max_candidates candidates (and a batch of rounds
 * needs, see below; ap_round.h), and at the end it binds the server.
 * Nothing is allocated per request afterwards.
 *
 * Durable state. With a state_dir in the party's config section the block
 * and the model survive restarts. The block is kept in state_dir
 * (o3m_block_store.h): a start first loads it from there and does not ask
 * the mask generator at all (which has forgotten Q once every party
 * confirmed); only without a stored block is it fetched, and then stored
 * before it is confirmed. A corrupt stored block refuses the start. Then
 * the model is recovered (ap_checkpoint_open: the newest checkpoint plus
 * the reward journal after it); a saved model learned under another mask
 * (O3M_EMASK), with another [policy] (O3M_EDIM), a journal damaged in the
 * middle (O3M_ECORRUPT) or a model gone while the block stayed (a block
 * stored by an earlier run but neither a checkpoint nor a journal:
 * O3M_ENOTFOUND) refuses the start with a message naming the way out
 * (--discard-state, --salvage). Without a state_dir the block comes
 * from the mask generator every time and the model lives in memory only (a
 * WARNING at start says so).
 *
 * Who may call. Recommend, Reward and Stats are answered only to the
 * clients the config names ([client NAME], by the common name of their
 * certificate); Info to every party and client; Reload only to the active
 * party's own certificate (its operator's act). The RPC layer refuses
 * everyone else with PERMISSION_DENIED before a request is read (the table
 * ap_access in ap_service_handlers.c; o3m_access.h), so a refused call changes
 * nothing. With insecure there are no identities and everyone may call.
 *
 * A round (Recommend; ap_round.h). The request is validated completely before anything
 * is touched (an invalid one is answered at once). Valid rounds are batched:
 * the call is deferred (o3m_rpc.h) and queued, and when the server has taken
 * every call that is ready its idle hook sends all queued rounds (up to
 * O3M_WIRE_MAX_BATCH and o3m_wire_mask_batch_rows candidates per batch) as
 * one MaskBatch to every PP at once; at low load a batch is the one round
 * that arrived, under load it is the rounds that queued while the previous
 * batch was in flight. While the PPs work the AP masks its own candidates,
 * Y = X^0 (Q^0)^T; each PP's reply is checked (its party, our mask id, the
 * rows of every round, d columns, finite values) and added into Y, so that
 * row k of a round's Y is Q x_k (with protocol 6 from a user part and a
 * cached or new item part, ap_round.h "Identical decisions"). If any PP fails or misses the deadline every round of the batch
 * fails with that PP's code (UNAVAILABLE, DEADLINE, MASK, ...) and a message
 * naming it, and nothing changes: no pending entry, no policy call (so the
 * Thompson sampler does not advance), no round counted. (A PP that stays
 * UNAVAILABLE for a second gets a new channel, at most once a second, so it
 * is used again soon after it comes back.) Otherwise, round by round in
 * arrival order, the policy chooses on Y, the chosen row is kept in the
 * pending table under a new, random decision id (ap_pending.h), and the
 * reply names the decision, the candidate, the item and its score (a round
 * whose id cannot be drawn fails with RANDOM). Rewards are not batched with
 * the rounds: a Reward that arrives while rounds are queued is applied (and
 * committed, see below) before they are chosen, as if they had arrived
 * after it. ActiveStats.fanouts counts the batches.
 *
 * A reward (Reward) is checked (finite, inside [reward_min, reward_max]),
 * matched to its decision (NOT_FOUND, ALREADY_EXISTS, EXPIRED) and its mask,
 * and only then given to the policy; the decision is closed only if the
 * update succeeded. An update that would leave the model non-finite
 * (o3m_policy_update_check) is refused before it is journaled:
 * INVALID_ARGUMENT (O3M_ENONFINITE), nothing changed, the decision stays
 * open. With bounded contexts (below) that cannot happen in practice; the
 * check is the second line of defence. With a state_dir the reward is
 * group-committed: the handler appends it to the journal's buffer, applies
 * it to the model (ap_checkpoint_apply_reward), closes the decision (so a
 * second reward for it is ALREADY_EXISTS) and defers the call; the server's
 * idle hook then runs reward_commit(), the one place where appended rewards
 * become durable and are acknowledged: one fdatasync (ap_checkpoint_sync)
 * for every reward whose handler ran since the previous commit - that is,
 * every Reward that arrived while the previous fdatasync ran - after which
 * each gets its reply, in arrival order. So a reward is acknowledged only
 * once it is durable, and one fdatasync covers a whole group (up to
 * REWARD_SLOTS, the Reward calls that may wait at once). The commit runs
 * before the queued Recommends are decided, so no decision ever sees a
 * reward that is not durable. With --commit each (ap_service_options
 * .commit_each) every reward is synced on its own in its handler, as before
 * group commit; it is kept for the side-by-side benchmark. If the journal
 * fails (a disk error) no reward of the group is acknowledged (UNAVAILABLE,
 * "not acknowledged"; each may or may not be in the model after the
 * restart, and the journal holds a prefix of the group), every later
 * reward gets UNAVAILABLE too, and the service shuts itself down: a
 * restart recovers from disk. When a checkpoint is due, the idle hook
 * (after the commit) starts it: the serving thread rotates the journal and
 * copies the model into a snapshot, and the checkpoint file is written by
 * a thread of its own (ap_checkpoint_start; collected by a later idle
 * hook, so on a service that gets no call the "checkpoint written" log
 * line and the journal's pruning wait for the next call, while the file is
 * already complete; one checkpoint is in flight at a time, and rewards that
 * become due meanwhile wait for the next). A failed checkpoint is logged and retried later; the journal still
 * holds everything. Decisions waiting for a reward are not journaled: after
 * a restart a reward for an older decision gets NOT_FOUND.
 *
 * Bounded inputs (o3m_config.h, "Bounded contexts"). Values enter the
 * model only inside the configured norms: the own tables are checked at
 * start like a passive party's (o3m_features_check_norm); a Recommend whose
 * own_features rows exceed this party's max_norm is refused at once
 * (INVALID_ARGUMENT naming the party and the candidate); a masked part whose
 * rows exceed its party's max_norm (up to O3M_WIRE_NORM_RTOL), or a summed
 * context above sqrt(sum_j max_norm_j^2), fails every round of its batch
 * with INVALID_ARGUMENT naming the party (or the sum) and the round and
 * candidate, never a value. Nothing is opened or journaled then.
 *
 * Oversized requests are refused at the door: the server reads no request
 * larger than the largest valid Recommend of the config
 * (o3m_wire_recommend_max_bytes: RESOURCE_EXHAUSTED from gRPC), and a user
 * or item id longer than O3M_MAX_ID bytes is INVALID_ARGUMENT naming
 * the field; both before any passive party is contacted. Client connections
 * idle for O3M_RPC_DAEMON_IDLE_CLOSE_MS are closed, which frees what gRPC
 * keeps of a connection's largest (possibly refused) message.
 *
 * States. Three fields of struct ap_service hold the status: ran
 * (ap_service_run was called), stopped (the stop_cause: why the service
 * stopped itself, STOP_NONE until then) and ckpt (durability: non-NULL
 * exactly when the party has a state_dir). ckpt is fixed at create, so a
 * service lives its whole life with durability on or off; the rest moves
 * like this (SQLite's pager.c draws its states the same way):
 *
 *                     ap_service_create
 *                            |
 *                            v
 *                      +-----------+  failure: O3M error, nothing left
 *                      | STARTING  |--------------------------------> (none)
 *                      +-----------+
 *                            | returns 0
 *                            v
 *                      +-----------+
 *                      |  CREATED  |
 *                      +-----------+
 *                            | ap_service_run
 *                            v
 *                      +-----------+  journal write/sync fails (STOP_DISK),
 *                      |  SERVING  |  or a checkpoint finds the model
 *                      +-----------+  damaged (STOP_DAMAGED); durable only
 *                            |    \------------------------------+
 *   ap_service_shutdown      |                                   v
 *   (any thread, a signal)   |                            +-------------+
 *                            |                            |  STOPPING   |
 *                            |                            |  (cause)    |
 *                            |                            +-------------+
 *                            v                                   |
 *                      +-----------+  drained: run returns       |
 *                      | SHUT DOWN | <---------------------------+
 *                      +-----------+    O3M_EIO / O3M_ECORRUPT / O3M_ENOTFOUND
 *                            | ap_service_destroy (from CREATED too)
 *                            v
 *                          (none)
 *
 * STARTING (inside ap_service_create; the caller has no handle yet): the
 *   block is loaded or fetched, the model recovered, the peers awaited.
 *   *opt->stop ends it with O3M_ESTATE; any failure frees everything.
 * CREATED: ran == 0, stopped == STOP_NONE. The server is bound and calls
 *   queue in gRPC; none is answered, nothing changes.
 * SERVING: ran == 1, stopped == STOP_NONE, ap_service_run executing (on
 *   its serving threads); every handler and the idle hook run one at a time.
 *   Rewards are acknowledged only once durable (with ckpt).
 * STOPPING: ran == 1, stopped != STOP_NONE, which implies ckpt != NULL
 *   for STOP_DISK and STOP_DAMAGED (they come from the journal or a
 *   checkpoint; asserted); STOP_STREAM is a replica's whose reward stream
 *   lost records it applied or holds one it cannot read (ap_replica.h). The
 *   server has been asked to stop; calls in flight finish for up to a
 *   second. Every Reward gets UNAVAILABLE naming the cause and reaches
 *   neither the journal nor the model; no checkpoint is written, the final
 *   one included. The first cause stays: stopped never changes again.
 * SHUT DOWN: ap_service_run has returned: 0 after ap_service_shutdown
 *   (with ckpt, after a final checkpoint), O3M_EIO for STOP_DISK,
 *   O3M_ECORRUPT for STOP_DAMAGED, O3M_ENOTFOUND for STOP_STREAM (the
 *   final checkpoint can set a cause too, and then its code is returned).
 *   ran stays 1, so another run returns O3M_ESTATE. Only ap_service_destroy
 *   (and the getters) remain.
 *
 * Threads. The service serves on opt->threads threads (the daemon's
 * --threads, else the party's threads key, else 1). All of them poll the
 * server's completion queue, so gRPC's work for the sockets - reading,
 * TLS, HTTP/2 framing of the calls and of their replies - spreads over the
 * cores; but handlers and the idle hook run one at a time, under the RPC
 * layer's lock (o3m_rpc.h, "Threads"), so they share the policy and the
 * tables without locks of their own, and the checkpoint writer thread
 * touches only its snapshot. The one exception is a batch's fan-out to the
 * passive parties, which runs without the lock (ap_round.h, "Pipelined
 * batches"): with N threads up to max(1, N - 1) batches (at most
 * AP_ROUND_MAX_INFLIGHT) are in flight at once, each with its own clients,
 * while the other threads answer Rewards and queue new Recommends. With 1
 * thread that is exactly the serving of earlier releases.
 *
 * What a decision sees. Rewards are applied by one writer at a time, and
 * the rounds of a batch are decided, under the lock, right after a reward
 * commit (ap_round's before_decide hook: the rewards that other threads
 * applied while the batch was in flight become durable and are
 * acknowledged first), so a decision sees the model as of every reward
 * whose Reward call was handled before the batch was decided, all of them
 * durable (RewardReply.updates numbers them; Recommendation.updates is the
 * count the decision saw), and no other: never a reward that is not
 * durable, never half of one (if the commit fails, the service stops and
 * the batch fails with O3M_EUNAVAILABLE instead). The decisions made for a given order of calls are therefore
 * the same for any number of threads; only the order in which concurrent
 * calls are taken off the queue can differ between runs, as it could with
 * one thread. ap_service_shutdown() may be called from any thread or a
 * signal handler.
 *
 * Replicas ([federation] replication = nats, the daemon's --replica NAME;
 * ap_replica.h). Several o3m-active processes serve one active party, each
 * with its own model, and the reward journal is replaced by a JetStream
 * stream that every replica applies in order (so all hold the same model,
 * bit for bit, after the same stream position). A Recommend is decided as
 * above, and the decision's masked context is also written to the decision
 * bucket (ap_round's record hook) before the reply. A Reward is checked as
 * above, its decision found in the local pending table or else in the
 * bucket, refused as ALREADY_EXISTS when this replica has applied it
 * already, then published to the stream with the decision id as its
 * message id (JetStream refuses a second one: ALREADY_EXISTS) and deferred;
 * the idle hook applies the records that arrived (a decision applied
 * before within the pending lifetime is skipped on every replica alike)
 * and answers each deferred Reward once its own record is applied here,
 * with the outcome of that application. With replicas the idle hook also
 * runs when no call arrives (every 100 ms), so an idle replica keeps up.
 * Start-up: the block must be the same for all replicas (the first
 * replica fetches and stores it in state_dir; the others load it from
 * there, or from a copy of that file); the newest snapshot in
 * state_dir/replica-NAME (the checkpoint format, whose seq is the stream
 * position; ap_checkpoint.h, external_log) is loaded, the stream after it
 * applied up to its current end, and only then does the server listen.
 * Snapshots are written like checkpoints (--checkpoint-every/-ms) and at
 * a clean stop. Not replicated: the Thompson sampler's draws (each
 * replica draws its own, so with LinTS the replicas' samplers differ while
 * Lambda and u stay identical) and the pending table (the replica that
 * made a decision serves its record to the others by lookup, ap_replica.h).
 *
 * Logging: a line at start and at stop with counters, and brief lines for
 * failed rounds (party, code; rate-limited); never a feature, a masked vector,
 * a block or a reward. */
#ifndef AP_SERVICE_H
#define AP_SERVICE_H

#include <signal.h>
#include <stdint.h>

#include "o3m_config.h"
#include "o3m_error.h"
#include "o3m_metrics.h"

typedef struct ap_service ap_service;

typedef struct ap_service_options {
  /* The [party NAME] of the active party in the config (required). */
  const char *party;
  /* 1: plaintext everywhere (the daemon's --insecure). Otherwise every
   * channel is TLS with the party's cert and key and the federation CA, and
   * the server requires client certificates signed by that CA. */
  int insecure;
  /* How long to keep trying the mask generator at start, and then the
   * passive parties, in seconds (>= 1) each. */
  int pmg_timeout_s;
  /* Address to listen on instead of the party's configured one (NULL: its
   * listen key, else its address). Tests use "127.0.0.1:0". */
  const char *listen;
  /* If set, ap_service_create gives up (O3M_ESTATE) as soon as *stop becomes
   * nonzero while it waits for the mask generator, so a daemon can be
   * stopped during start-up. May be NULL. */
  volatile sig_atomic_t *stop;
  /* Durability (used only when the party has a state_dir; see "Durable
   * state" above). salvage: the daemon's --salvage (recover the journal up
   * to damage or a lost segment instead of refusing to start; what follows
   * is set aside). discard_state: --discard-state (move the saved model
   * aside, ap_checkpoint_discard, and start with a fresh one; the stored
   * block is kept). checkpoint_records / checkpoint_ms: write a checkpoint
   * after this many rewards or this long (0: the defaults of
   * ap_checkpoint.h, 10000 records or 60 s). */
  int salvage;
  int discard_state;
  uint64_t checkpoint_records;
  int64_t checkpoint_ms;
  /* The registry the service counts into (the daemon's --metrics-listen),
   * or NULL for none; it must outlive the service. Series: every RPC by
   * method and code with its latency (o3m_rpc_calls_total,
   * o3m_rpc_duration_seconds: Recommend and Reward among them), decisions
   * and fan-out rounds, failed Recommends, calls to each passive party by
   * code, pending decisions, evicted and expired ones, rewards applied,
   * the journal's fdatasync latency and the checkpoint age (with a
   * state_dir), and the mask id as a label of o3m_mask_info. */
  o3m_metrics *metrics;
  /* With a state_dir: 0 (the default) group-commits rewards (see "A
   * reward" above: one fdatasync for every reward that arrived while the
   * previous one ran); 1 (the daemon's --commit each) syncs each reward on
   * its own, as before group commit, for side-by-side benchmarks. */
  int commit_each;
  /* Serving threads (the daemon's --threads), 1..O3M_CONFIG_MAX_THREADS;
   * 0: the party's threads key, else 1. See "Threads" above. */
  int threads;
  /* AP replicas (the daemon's --replica NAME): required exactly when the
   * config has [federation] replication = nats; see "Replicas" above. */
  const char *replica;
  /* A nonzero *reload (the daemon's SIGHUP flag, o3m_daemon_reload_flag)
   * makes the idle hook, within about 100 ms, ask for a reload of the own
   * tables as Reload does (ap_round_reload_start, coalesced with one under
   * way) and clear it. May be NULL. */
  volatile sig_atomic_t *reload;
} ap_service_options;

/* Defaults: party NULL (must be set), TLS, pmg_timeout_s 60, listen NULL,
 * stop NULL, no salvage or discard, default checkpoint intervals. */
void ap_service_options_default(ap_service_options *opt);

/* Builds the whole service as described above; calls queue from the moment
 * this returns until ap_service_run() serves them. cfg is only read during
 * the call (everything needed is copied). Errors name what failed: the
 * party, a table or catalog file and line, the mask generator (its code:
 * O3M_EUNAVAILABLE or O3M_EDEADLINE after the timeout, O3M_EPERM, O3M_EDIM),
 * a TLS file, the listen address. On failure *out is NULL and nothing is
 * left allocated or listening. */
int ap_service_create(ap_service **out, const o3m_config *cfg, const ap_service_options *opt,
                      o3m_err *e);

/* The TCP port the server is bound to. */
int ap_service_port(const ap_service *s);

/* The mask id of the installed block (nonzero). */
uint64_t ap_service_mask_id(const ap_service *s);

/* Serves on the calling thread until ap_service_shutdown(), then writes a
 * final checkpoint (with a state_dir) and returns 0; O3M_EIO if the service
 * stopped itself because the journal failed (a disk error), O3M_ECORRUPT if
 * it stopped itself because a checkpoint found the model in memory damaged
 * (the daemon then exits nonzero and says which), O3M_ENOTFOUND if a
 * replica stopped itself because its reward stream lost records it had
 * applied or holds one it cannot read, O3M_ESTATE if it already
 * ran. Logs a line with the counters at stop. */
int ap_service_run(ap_service *s);

/* Asks ap_service_run() to return (it notices within 100 ms, lets calls in
 * flight finish for up to a second). Async-signal-safe; any thread. */
void ap_service_shutdown(ap_service *s);

/* Frees everything. Not while ap_service_run() executes on another thread:
 * shut down, join, then destroy. NULL is accepted. */
void ap_service_destroy(ap_service *s);

#endif
