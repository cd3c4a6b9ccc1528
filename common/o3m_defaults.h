/* o3m_defaults.h: the one home of the project's default values.
 *
 * A default is written here once and used by every place that fills it in:
 * the policy's o3m_policy_config_default, the config loader for a key that
 * is not set, the RPC layer for a limit that is not configured, and
 * o3m-eval's experiments (regret, federate), so that a simulation runs the
 * policy the daemons run and the three cannot drift apart. Bounds are in
 * o3m_limits.h; the keys themselves are described in o3m_config.h.
 *
 * Plain constants: no functions, no state, safe from any thread. */
#ifndef O3M_DEFAULTS_H
#define O3M_DEFAULTS_H

#include "o3m_limits.h"

/* ---- The policy ([policy] and o3m_policy_config_default) ---- */

/* LinUCB's exploration weight beta (alpha) and the ridge lambda: the paper's
 * settings, with which the demo and the benchmarks learn within a few
 * thousand rounds. */
#define O3M_DEFAULT_ALPHA 0.5
#define O3M_DEFAULT_LAMBDA 1.0
/* LinTS's sampling scale v, the paper's setting. */
#define O3M_DEFAULT_V 0.01
/* LinTS's sampler seed: fixed, so that runs repeat unless a seed is set. */
#define O3M_DEFAULT_SEED 1
/* Rank-one updates between two full refactorizations of the model, which
 * bound the rounding drift of the updated inverse and factor. */
#define O3M_DEFAULT_REFACTOR_EVERY 1000
/* Candidates of one round the policy and the active party are sized for:
 * the paper's example K = 1000. */
#define O3M_DEFAULT_MAX_CANDIDATES 1000

/* ---- The active party's tables ([policy]) ---- */

/* Open decisions kept for their rewards, and how long each waits: an hour
 * for a slow reward. */
#define O3M_DEFAULT_PENDING_CAPACITY 100000
#define O3M_DEFAULT_PENDING_EXPIRY_S 3600
/* Rounds one client may have in flight, and the cost budget of one batch
 * in K x d: they fit the load benchmark (32 calls of K = 20 at d = 100 in
 * flight from one client, 2000 each: a batch of all of them costs 64000)
 * and leave Recommend's O3M_MAX_CLIENT_INFLIGHT server slots to two
 * clients at their caps (o3m_config.h, "Per-client shares"). */
#define O3M_DEFAULT_CLIENT_INFLIGHT 32
#define O3M_DEFAULT_BATCH_COST 65536
/* The most K x d a round costing more adds to one batch while other
 * clients are active: such a round is gathered in slices over several
 * batches (active_participant/ap_round.h, "Fairness"), so that a round of
 * the largest allowed size holds another client's round for about a tenth
 * of its cost. 16384 is 163 candidates at d = 100, about as much work as
 * the 8 rounds of K = 20 a client of the attack benchmark has in flight. */
#define O3M_DEFAULT_SLICE_COST 16384
/* Each client's budget of uncached item ids (ids the passive parties must
 * compute a part for, active_participant/ap_round.h "Cost model"): a rate
 * per second and a burst. A client over it is served after the clients
 * within theirs, never refused. 1000 ids a second is about 3% of one core
 * of the federation's work on the attack benchmark's machine (a fresh
 * K = 1000 round costs 34 ms more than a cached one), and the burst of
 * 10000 warms a tenth of the default item cache at once; a catalogue
 * larger than that still warms, at a lower priority while others ask. */
#define O3M_DEFAULT_CLIENT_UNCACHED_RATE 1000
#define O3M_DEFAULT_CLIENT_UNCACHED_BURST 10000
/* Item parts cached by the active party (d doubles each). */
#define O3M_DEFAULT_ITEM_CACHE 100000
/* Range of a reward: a click or a conversion. */
#define O3M_DEFAULT_REWARD_MIN 0.0
#define O3M_DEFAULT_REWARD_MAX 1.0

/* ---- The federation ([federation] and [party]) ---- */

/* The active party's deadline for one round's passive parts. */
#define O3M_DEFAULT_DEADLINE_MS 200
/* max_norm of a party that does not set it (o3m_config.h, "Bounded
 * contexts", says why 1e4). */
#define O3M_DEFAULT_MAX_NORM 1e4
/* table_bytes_max of a party that does not set it: 4 GiB per table file,
 * room for millions of rows, and still a bound on what one file can make
 * the party read and hold (docs/configuration.md). */
#define O3M_DEFAULT_TABLE_BYTES_MAX (4ull << 30)
/* Copies of the replicated stream and bucket with replication = nats. */
#define O3M_DEFAULT_NATS_REPLICAS 3
/* How often a replica reads its stream's state and configuration
 * (nats_check_ms): one stream info request, well under a millisecond on a
 * healthy cluster; a limit that can erase records is then logged within
 * 5 s of being set. */
#define O3M_DEFAULT_NATS_CHECK_MS 5000

/* ---- The RPC layer ([federation] rpc_* and o3m_rpc_server_config) ---- */

/* Largest message accepted or sent, unless configured otherwise: 64 MiB,
 * room for K = 2048 candidates of d = O3M_MAX_DIM = 4096 as float64. gRPC's
 * own default (4 MiB) would reject d = K = 1000, the paper's example. */
#define O3M_DEFAULT_MAX_MESSAGE (64 << 20)
/* Streams one connection may have open at once: an o3m_rpc_client has one
 * call in flight, a daemon's own channel to a peer a few; 64 leaves room
 * for any gRPC client that multiplexes its calls over one connection. */
#define O3M_DEFAULT_STREAMS 64
/* How long a call that was let in may take to deliver its whole request. */
#define O3M_DEFAULT_RECEIVE_TIMEOUT_MS 10000
/* Connections per identity: every o3m_rpc_client has a connection of its
 * own, and o3m-bench-load at concurrency 32 opens 33 (one per thread and
 * its stats client), a front end as many as its pool of clients. */
#define O3M_DEFAULT_CONNECTIONS_PER_IDENTITY 64

/* [federation] epoch_changes_max_per_minute: how many times a passive
 * party's item epoch may change within a minute before the active party
 * takes it as flapping (ap_epochwatch.h). An honest epoch changes only
 * when an operator reloads a table with new content, which takes a human
 * or a pipeline minutes; 12 is one new table every 5 s for a whole minute,
 * while a party that names a new epoch in every reply does so hundreds of
 * times a minute. */
#define O3M_DEFAULT_EPOCH_CHANGES 12

/* Every default is a value the loader accepts. */
_Static_assert(O3M_DEFAULT_MAX_CANDIDATES <= O3M_MAX_CANDIDATES, "max_candidates");
_Static_assert(O3M_DEFAULT_PENDING_CAPACITY <= O3M_MAX_PENDING_CAPACITY, "pending_capacity");
_Static_assert(O3M_DEFAULT_ITEM_CACHE <= O3M_MAX_ITEM_CACHE, "item_cache");
_Static_assert(2 * O3M_DEFAULT_CLIENT_INFLIGHT <= O3M_MAX_CLIENT_INFLIGHT, "client_inflight_max");
_Static_assert(O3M_DEFAULT_PENDING_EXPIRY_S <= O3M_MAX_PENDING_EXPIRY_S, "pending_expiry_s");
_Static_assert(O3M_DEFAULT_DEADLINE_MS <= O3M_MAX_ROUND_DEADLINE_MS, "deadline_ms");
_Static_assert(O3M_DEFAULT_TABLE_BYTES_MAX <= O3M_MAX_TABLE_BYTES, "table_bytes_max");
_Static_assert(O3M_DEFAULT_EPOCH_CHANGES <= O3M_MAX_EPOCH_CHANGES, "epoch_changes_max_per_minute");
_Static_assert(O3M_DEFAULT_NATS_REPLICAS <= O3M_MAX_NATS_REPLICAS, "nats_replicas");
_Static_assert(O3M_DEFAULT_NATS_CHECK_MS >= O3M_MIN_NATS_CHECK_MS &&
               O3M_DEFAULT_NATS_CHECK_MS <= O3M_MAX_NATS_CHECK_MS, "nats_check_ms");
_Static_assert(O3M_DEFAULT_MAX_MESSAGE <= O3M_MAX_MESSAGE, "max_message");
_Static_assert(O3M_MAX_WIRE_BATCH_BYTES <= O3M_DEFAULT_MAX_MESSAGE, "a batch's reply fits a message");
_Static_assert(O3M_DEFAULT_STREAMS <= O3M_MAX_STREAMS, "rpc_streams_per_connection");
_Static_assert(O3M_DEFAULT_RECEIVE_TIMEOUT_MS <= O3M_MAX_DEADLINE_MS, "rpc_receive_timeout_ms");
_Static_assert(O3M_DEFAULT_CONNECTIONS_PER_IDENTITY <= O3M_MAX_CONNECTIONS_PER_IDENTITY,
               "rpc_connections_per_identity");

#endif
