/* ap_round.h -- the active participant's rounds: a Recommend from its
 * validation to its decision.
 *
 * A round is one Recommend call. ap_round_submit validates the request
 * completely before anything is touched (an invalid one is answered at
 * once, and changes nothing) and queues it, deferring the call (o3m_rpc.h).
 * ap_round_flush, the server's idle hook, answers everything queued: up to
 * O3M_WIRE_MAX_BATCH rounds and o3m_wire_mask_batch_rows candidates form a
 * batch, sent as one MaskBatch to every passive participant at once
 * (ap_peers.h); while they work the AP masks its own parts (see "Own
 * parts"); the replies are checked and summed, and each candidate's
 * context made in one pass into Y; then, round by round in
 * the batch's order (arrival order within each client, see "Fairness"),
 * the policy chooses on Y, the chosen row is kept in the
 * pending table under a new decision id (ap_pending.h) and the call is
 * answered. The whole story, with the failures and the bounds, is in
 * ap_service.h ("A round", "Bounded inputs").
 *
 * Why batches. A round costs the AP one server call and one client call per
 * passive participant, and almost all of that is gRPC, TLS and the kernel,
 * not arithmetic; and while a fan-out is in flight the single serving
 * thread waits. At low load a batch is the one request that arrived; under
 * load the rounds that queue while a batch is in flight make the next
 * batch, so the fan-out cost is shared by all of them.
 *
 * Pipelined batches. With several serving threads up to `inflight` batches
 * are in flight at once (ap_service gives max(1, threads - 1), at most
 * AP_ROUND_MAX_INFLIGHT), each in a slot with its own buffers and its own
 * clients of the passive parties (an RPC client has one call in flight).
 * ap_round_flush, under the RPC layer's lock, moves one batch of
 * waiting rounds into a free slot and builds its MaskBatch; then, without
 * the lock (o3m_rpc_server_unlocked), the fan-out, the own blocks, the
 * reply checks, the secure-aggregation sum, its decoding and the norm
 * checks, which touch only the slot and read-only state (the block, the
 * own tables); then, under the lock again, the batch is decided, round by
 * round, and its slot freed. A batch is decided when its own fan-out is
 * over, also before an older batch still in flight: a small batch is not
 * held behind a large one (a client's batch of the largest
 * rounds used to hold every other client's decisions for its whole
 * fan-out). Batches in flight at once were formed from calls in flight at
 * once, whose order was never fixed. The replies run the idle hook again, which sends what
 * waits (with the calls that came meanwhile in the turns). Meanwhile the
 * other threads answer Rewards, queue new Recommends and send them in the
 * other slots. With one thread there is one slot and the order of events
 * is the one of a single serving thread; it too sends one batch per run of
 * the hook and takes the calls that came meanwhile before the next, so a
 * round that arrives while another client's rounds are queued waits for at
 * most the batch in flight and one turn ("Fairness"), not for every round
 * queued before it. With inflight = 1 and more threads
 * (two threads give that) there is one slot too, but the other threads
 * still take Rewards and queue Recommends while its batch is in flight.
 *
 * What a decision sees. Just before a batch is decided, the before_decide
 * hook runs (ap_service: the group commit of the rewards applied since the
 * last one, including those that other threads applied while the batch was
 * in flight), so a decision never sees a reward that is not durable; if
 * that commit fails (the service stops), the batch fails instead. Each
 * Recommendation carries updates, the model's reward count its decision
 * saw. Decisions are made in the order the batches finish, each batch's
 * rounds in the order it took them ("Fairness"), against the model as of
 * the rewards applied before that point, so they do not depend on the
 * number of threads for calls made one after the other (one batch in
 * flight at a time, decided in the calls' order); with calls in flight at
 * once which batch a call joins, and the point at which a reward lands
 * between two decisions, depend on timing, as they always did with
 * concurrent callers.
 *
 * Fairness. Rounds are kept per client (the owner ap_round_submit is given:
 * the index of the caller's [client NAME] in the config), so that one
 * client's valid but large or many requests cannot fail or delay the
 * others' rounds:
 *  - a cap on each client's rounds in flight (waiting or in a batch),
 *    client_inflight_max: the call over it is refused at once with
 *    O3M_EFULL (RESOURCE_EXHAUSTED) naming the client and the cap, and
 *    nothing changes;
 *  - a cost budget per batch, batch_cost_max, for each of a round's two
 *    costs summed over the batch's rounds ("Cost model" below: what the AP
 *    does for it, and what the passive parties compute and send for it): a
 *    round that does not fit waits for the next batch, where its client's
 *    turn comes first, and a round that costs more than the whole budget
 *    goes alone, or in slices (below). So a batch is not slowed past the
 *    deadline by rounds of the largest allowed size;
 *  - slices: while other clients are active (a round of theirs in flight,
 *    or one asked within the last AP_ROUND_ACTIVE_MS), a round with a cost
 *    above slice_cost_max is gathered in slices of at most that much of
 *    each cost (at least one candidate), one slice per batch, in the
 *    batches that carry the others'
 *    rounds; it is decided in the batch of its last slice, on all its
 *    candidates at once, as if it had been gathered whole (see "Slices").
 *    A batch cannot be interrupted once it is sent, so with one serving
 *    thread a small round that arrives during another client's round of
 *    the largest size waits for one slice of it, not for the whole round.
 *    One round is sliced at a time; meanwhile another client's round
 *    larger than a slice goes whole if it fits the batch's budget beside
 *    the others' rounds, and waits if not; such waiting rounds take the
 *    slicing in the clients' turns, so that one client's stream of large
 *    rounds cannot keep it. A client alone keeps whole rounds (no slice
 *    costs it a fan-out more);
 *  - a budget of uncached item ids per client (client_uncached_rate a
 *    second, up to client_uncached_burst; "Cost model"): a round whose
 *    uncached ids its client's budget no longer covers is passed over in
 *    the turns (over_budget_waits) while any round within its client's
 *    budget can go, and goes in a batch that none of those wants, when no
 *    other batch is in flight (so that the parties never compute its new
 *    items beside another client's batch), or after it was passed over in
 *    AP_ROUND_BUDGET_PASSES of the scheduler's turns, in slices. It is never refused for
 *    it: an honest client that warms a large catalogue is slower, not
 *    failed;
 *  - turns: the clients with waiting rounds form a ring, and a batch is
 *    filled by taking each client's oldest waiting round in turn (one per
 *    client per turn, for as long as they fit), the next batch going on
 *    where this one stopped. A client that had no round waiting joins the
 *    ring last in the current turn, or first when the client whose turn
 *    is next already had a round in the last batch formed (a client that
 *    always has rounds waiting is otherwise always next, and a returning
 *    client would wait for two of its batches). One client's queue cannot
 *    starve another's: a client's round waits for at most one round of
 *    every other client;
 *  - with several clients in the config and several batches in flight
 *    (inflight > 1), one client's rounds are in at most inflight - 1 of
 *    them: a batch slot is kept for the others, so that a client whose
 *    large rounds would fill every slot cannot make another client's next
 *    round wait for one of them to finish.
 * Within a client rounds keep their arrival order in the turns. The turns
 * are a function of the calls and of when they were queued: calls made one
 * after the other give the same decisions whatever the number of threads.
 *
 * Cost model. What a round, or a slice of it, makes each side do, in values
 * of d, kept apart: the AP's cost is K x d (a context made and scored per
 * candidate, the same whether its item parts were cached or not); the
 * passive parties' cost is (1 + u) x n_pp x d, one user row and one item
 * part per item not in the item cache (u of them), computed and sent by
 * each of the n_pp passive parties. A round whose items are all cached
 * costs the passive parties one user row, and one of K new items about
 * n_pp times its K x d: the batch budget and the slices bound both costs,
 * so a round of new items is sliced finer and shares a batch with fewer
 * others. The count is taken from the cache when the batch is formed,
 * without counting a lookup (ap_itemcache_has_hashed); items that another
 * batch in flight puts meanwhile are counted as uncached, never the
 * reverse but for an eviction. Each client's u is also charged to its
 * budget of uncached ids, a token bucket refilled at client_uncached_rate
 * ids a second up to client_uncached_burst, which may owe up to a burst
 * (a round larger than the burst needs a full bucket; a round served over
 * the budget is charged too, so a flooding client stays over it). A
 * fresh-id flood therefore takes from another client no more than a
 * cached one: its rounds go in slices bounded by what they make the
 * parties compute, and once over its budget only in batches that no
 * other client's round wants, while no other batch is in flight, or,
 * passed over in AP_ROUND_BUDGET_PASSES turns, in slices beside them (so
 * that its calls are not deferred until their deadline). The choice of
 * waiting over refusing:
 * a refusal (RESOURCE_EXHAUSTED) would fail an honest client whose items
 * are new for a while (a catalogue being warmed, a reload of every
 * party's items, which empties the cache); a lower share only makes it
 * slower while others ask, and costs nobody anything while it is alone.
 * The AP counts the ids it asked the parties for (uncached_ids) and the
 * rounds passed over for the budget (over_budget_waits), federation-wide,
 * and each client's charged ids in its metrics.
 *
 * Slices. A sliced round stays at the head of its client's queue until it
 * is decided, and one slice of it is in flight at a time. Its user part
 * (the passive parties' U(u) and the own Q^0 [u^0, 0]) is taken from its
 * first slice's replies and reused by the later ones, its contexts are
 * gathered into a buffer of max_candidates rows, and the item epochs of
 * every slice must be those of the first (the cache key, "Identical
 * decisions" below): when a party reloaded its items or the AP its own
 * tables in between, the round is gathered again from its first slice.
 * Each context row is the same sum, in the same order, as when the round
 * is gathered whole, and the policy scores all its rows in one call: the
 * decision is the one the round would have had whole. A batch whose
 * fan-out fails ends its sliced round as it ends its other rounds (failed,
 * or decided by the local model on the request's own parts).
 *
 * Own parts. With own tables the AP splits its own part as the passive
 * parties split theirs: Q^0 x^0 = Q^0 [u^0, 0] + Q^0 [0, i^0]. Per round it
 * masks its user part once; the item part of an item is masked once per
 * mask and own item table and kept in the item cache beside the passive
 * parties' I(i), with whether the own item table holds the item (the
 * entry's last value). The cache's key holds the own item epoch after the
 * passive parties' epochs, and a batch formed after an own reload drops
 * every entry first, so no context adds an own item part of other tables.
 * A request that brings its own features has its whole block masked as
 * before. So a candidate whose item is cached costs the AP no lookup and no
 * masking, only one pass that adds its four parts straight into the
 * scoring matrix.
 *
 * Identical decisions: the passive parties answer factored batches
 * (protocol 6: a user part per round, an item part per item the AP has not
 * cached), the parts are added in party order, and every candidate's
 * context is U(u) + I(i) plus its own parts, whether they were cached or
 * just computed. The split sum rounds differently from a sum of whole
 * rows (the parts are added in another order), so a context differs from
 * the unfactored Q x in the last bits; the decisions are the central run's
 * (test_active at K = 20, both models, both aggregation modes), and equal
 * whatever the batching and the number of threads (test_recovery). The
 * policy sees the rounds one after the other in the batch's order: it
 * chooses for all of them with one o3m_policy_choose_batch (one scoring
 * call for the shared model), which is exactly that, since no reward is
 * applied between the rounds of one batch. A Reward that arrives while
 * rounds are queued is applied at
 * once (ap_service_handlers.c), before those rounds are chosen, as it would be if
 * they had arrived after it.
 *
 * Secure aggregation (aggregation = secure, the default): the AP adds the
 * passive parties' words in the ring and decodes their sum once, so it
 * never holds one party's part; the sums are still deterministic, so the
 * bit-for-bit argument above holds in both modes. A reply of the other
 * mode's form fails the batch.
 *
 * Flapping epochs: each batch's replies name every party's item epoch,
 * the cache's key. When the first replies name others than the cached
 * parts were summed under, the batch is asked again for the items it had
 * from the cache only (the others came with the epochs just named), so a
 * party is asked for an item at most once per epoch it names; when the
 * second replies name yet another epoch, or the party's epochs break the
 * watch's rules (ap_epochwatch.h: more than epoch_changes_max_per_minute
 * changes within a minute, or back to one it left), the party is flapping:
 * it is held out for a minute in every slot's peers (ap_peers_hold), and
 * the batch and the next ones are missing it, with the reason
 * EPOCH_FLAPPING (see "Failures"). Nothing of a flapping batch is cached.
 *
 * Failures: if a passive participant fails (or misses the deadline, or its
 * circuit breaker is open, ap_peers.h, or it is held out as flapping),
 * then with a fallback (ap_fallback.h) every round of the batch is decided
 * by the local model on its own parts and answered OK, degraded, naming
 * the missing parties (under secure
 * aggregation a missing party's masks cannot cancel, and with per-party
 * parts the context would lack its columns: the whole batch goes
 * degraded); the federated model is not touched. Without one every round
 * of the batch fails with its code and a message naming the party, and
 * nothing changes: no pending entry, no policy call, no round counted. A
 * failure of the policy, of the own tables or of the decision id fails only
 * its own round. Failed rounds are logged at most once a second.
 *
 * Unknown ids. A passive party answers an id its tables lack with the id's
 * dummy row and never says so (party/o3m_features.h "Dummy rows"), so the
 * AP can tell an unknown id only by its own tables: a valid round whose
 * user is not in the AP's user table counts in unknown_user_rounds, one
 * with an item not in its item table in unknown_item_rounds (both 0 when
 * the AP has no tables, its features then coming in the requests). With
 * [policy] unknown_items = refuse (which needs an item table on the AP) a
 * round with such an item is refused with O3M_ENOTFOUND naming it, and
 * nothing is queued, asked or changed; with serve (the default) it is
 * decided as before, with the PPs' dummies for what they lack. Under serve
 * the items are not looked up at submit: a round is counted, just before
 * it is answered, from the lookups that masked its new items' own parts
 * and the flags cached with the others (a round of a batch whose fan-out
 * failed is not counted); only refuse looks its items up at submit.
 *
 * The round owns the AP's own feature tables (its one lookup of them is
 * here: loaded at create, read by the batch) and every buffer a round needs,
 * sized at create for max_candidates candidates and the largest batch, per
 * slot: nothing is allocated per request. It borrows the policy, the pending
 * table, the catalog, the block and the peers, which must outlive it.
 *
 * Threads: everything on the AP's serving threads, under the RPC layer's
 * lock (create and destroy included), except the fan-out part of each
 * batch above, which runs without it on the thread that sent the batch.
 * ap_round_flush is re-entrant: another thread may call it while one is in
 * a fan-out. */
#ifndef AP_ROUND_H
#define AP_ROUND_H

#include <stdint.h>

#include "ap_catalog.h"
#include "ap_fallback.h"
#include "ap_peers.h"
#include "ap_pending.h"
#include "o3m_policy.h"
#include "o3m.pb-c.h"
#include "o3m_error.h"
#include "o3m_mask.h"
#include "o3m_rpc.h"

/* Recommend's own server slots, which is also how many rounds can wait for
 * the next fan-out: every waiting round holds a slot. Twice the load test's
 * 32 clients, so that a full batch can be answered while as many new calls
 * queue, and twice the default client_inflight_max, so that one client at
 * its cap leaves as many for the others. The server must be given exactly
 * this many (method_slots). */
#define AP_ROUND_SLOTS O3M_MAX_CLIENT_INFLIGHT

/* Most batches in flight at once (see "Pipelined batches"; o3m_limits.h
 * says why). */
#define AP_ROUND_MAX_INFLIGHT O3M_MAX_INFLIGHT_BATCHES

/* A client that asked a round within this many ms, or has one in flight,
 * is active: while one is, another client's large rounds are sliced
 * ("Fairness"). A second spans a closed-loop client's gap between its
 * answers and its next calls many times over. */
#define AP_ROUND_ACTIVE_MS 1000

/* How many of the scheduler's turns (batch_form: one per completion of a
 * batch and per run of the idle hook, whether or not it sends a batch) a
 * round may be passed over in for its client's budget of uncached ids
 * before it goes all the same, in slices bounded by what it
 * makes the parties compute ("Cost model"). Without a bound, a client over
 * its budget beside a steady stream of other rounds waited until its
 * deadline, and its calls, deferred for seconds, kept a request arena of
 * the RPC server each from being reset (o3m_rpc.h, "Memory") until a
 * small call of another client found no room (FULL). Counted in turns, not
 * time: a paused party makes few. */
#define AP_ROUND_BUDGET_PASSES 16

typedef struct ap_round ap_round;

typedef struct ap_round_config {
  const char *party;        /* this party's name, for messages (copied) */
  const char *config_name;  /* the config file's name, for messages (copied) */
  int d, d0;                /* the context's and this party's dimensions */
  int k_max;                /* [policy] max_candidates */
  double max_norm;          /* this party's bound on x^0 (o3m_config.h) */
  double sum_norm;          /* sqrt(sum_j max_norm_j^2), the bound of a sum */
  o3m_model_kind model;      /* disjoint: every candidate needs an arm */
  int n_arms;               /* disjoint: the number of arms; else 0 */
  const ap_catalog *catalog; /* disjoint: ids -> arms when a request has none */
  o3m_policy *policy;        /* chooses */
  ap_pending *pending;      /* keeps each decision until its reward */
  /* Optional ([federation] fallback = local): the local model that decides
   * a batch whose fan-out missed a party (see "Failures"). The pending
   * table must keep local parts (ap_pending_keep_local). */
  ap_fallback *fallback;
  /* The own feature tables (either may be NULL; both NULL: the features
   * come in the requests). */
  const char *user_table, *item_table;
  uint64_t table_bytes_max;  /* the party's table_bytes_max (0: the default) */
  /* [policy] unknown_items = refuse: a round with an item that the own
   * item table does not hold is refused with O3M_ENOTFOUND ("Unknown
   * ids"). */
  int refuse_unknown_items;
  /* Set when some party of the federation (this one or a passive one) has
   * a user table: a Recommend must then name a non-empty user, which that
   * party's MaskBatch check requires too (o3m_wire_query_ids_check). */
  int user_required;
  /* Secure aggregation (o3m_secagg.h): with secure set, each MaskBatch
   * carries a fresh nonce, the passive parties answer masked words, which
   * are summed in Z/2^64, decoded at agg_scale (o3m_secagg_scale of the PPs'
   * bounds) and checked against pp_sum_norm = sqrt(sum over the n_pp PPs of
   * max_norm_j^2) plus the decoding slack. 0: per-party parts. */
  int secure;
  int agg_scale;
  int n_pp;
  double pp_sum_norm;
  /* Optional (AP replicas, ap_replica.h): called with every decision after
   * it is opened in the pending table and before the Recommend is
   * answered, to store its record where every replica finds it, with the
   * chosen candidate's own part x0 (NULL without the local model) and
   * whether the local model decided it (degraded; x is then zeros). A
   * failure fails the round with its code and closes the decision again. */
  int (*record)(void *ctx, uint64_t decision, int owner, int arm, uint64_t mask_id,
                const double *x, const double *x0, int degraded, o3m_err *e);
  void *record_ctx;
  /* Optional: runs under the lock just before a batch is decided (see "What
   * a decision sees"). A negative code (e naming why) fails every round of
   * the batch with it instead: the model may hold what must not be seen. */
  int (*before_decide)(void *ctx, o3m_err *e);
  void *before_decide_ctx;
  /* Batches in flight at once, 1..AP_ROUND_MAX_INFLIGHT. */
  int inflight;
  /* Optional: the registry of the own tables' reload counters
   * (o3m_tables.h); NULL: none. */
  o3m_metrics *metrics;
  /* Fairness (see above): the number of clients (owners 0..n_owners-1),
   * each client's cap on rounds in flight (1..AP_ROUND_SLOTS) and the cost
   * budget of a batch in K x d (>= 1). */
  int n_owners;
  int client_inflight_max;
  int64_t batch_cost_max;
  /* The most K x d one round costing more adds to a batch while other
   * clients are active ("Slices", >= 1). */
  int64_t slice_cost_max;
  /* Each client's budget of uncached item ids ("Cost model"): per second
   * and the burst; 0: no budget. */
  int64_t client_uncached_rate, client_uncached_burst;
  /* Entries of the cache of summed item parts ([policy] item_cache,
   * ap_itemcache.h; 0: none). */
  int item_cache;
  /* [federation] epoch_changes_max_per_minute (ap_epochwatch.h; 0: the
   * epochs are not watched). */
  int epoch_changes_max;
} ap_round_config;

/* Loads the own tables (checked against max_norm like a passive party's)
 * and allocates the queue and the batch buffers. Errors: a table file and
 * line or a row above the bound (the message names [party] in the config
 * and the way out), O3M_EINVAL if max_candidates does not fit a batch,
 * O3M_ENOMEM. On failure *out is NULL and nothing is left allocated. */
int ap_round_create(ap_round **out, const ap_round_config *cfg, o3m_err *e);

/* Gives the round what start-up got after create: the AP's block (borrowed)
 * with its mask id, the server whose lock the fan-outs give up, and one
 * set of peers per batch in flight (cfg->inflight of them, all borrowed,
 * each used by one slot only). Must be called before the first
 * ap_round_submit. */
void ap_round_connect(ap_round *r, const o3m_block *block, uint64_t mask_id,
                      o3m_rpc_server *server, ap_peers *const *peers);

/* A Recommend handler's work for client owner (0..n_owners-1; client is its
 * name, for messages, or NULL for a caller without identity): refuses the
 * call when the client has client_inflight_max rounds in flight already
 * (O3M_EFULL naming the client and the cap), validates req and queues the
 * round. Returns O3M_RPC_DEFERRED (call and req must stay valid until the
 * round is answered, which ap_round_flush does), or a negative code with e
 * naming the field (O3M_EINVAL) when the request is refused; then nothing
 * is queued and the failure is counted. */
int ap_round_submit(ap_round *r, o3m_rpc_call *call, const O3m__V1__RecommendRequest *req,
                    int owner, const char *client, o3m_err *e);

/* Sends one batch of the waiting rounds if a slot is free, whatever the
 * number of threads, and decides it once its fan-out is over (see
 * "Pipelined batches"). A
 * round still waiting when it returns goes in a later batch: the replies
 * of the batches answered here are completions, after which the server
 * runs its idle hook, and so this, again; by then the calls that arrived
 * meanwhile have joined the clients' turns ("Fairness"). Called by the
 * server's idle hook. */
void ap_round_flush(ap_round *r);

typedef struct ap_round_stats {
  uint64_t rounds;        /* decisions issued */
  uint64_t failed_rounds; /* Recommend calls refused or failed */
  uint64_t peer_failures; /* rounds failed because of a passive participant */
  uint64_t fanouts;       /* batches sent to the passive participants */
  uint64_t over_share;    /* Recommend calls refused: the client's cap was reached */
  uint64_t reloads;       /* own table reloads swapped in */
  uint64_t reloads_refused; /* own table reloads refused, the old tables kept */
  int64_t last_reload_ms; /* Unix time of the last swap, ms (0: none) */
  uint64_t degraded;      /* decisions of the local model (included in rounds) */
  /* The item cache (ap_itemcache.h): lookups that found a part and that
   * asked the parties, entries held and at most, resets (an epoch or the
   * mask changed), and batches asked again because a reply named other
   * epochs than their cached parts were summed under. */
  uint64_t cache_hits, cache_misses, cache_size, cache_capacity, cache_resets;
  uint64_t cache_evictions, stale_retries;
  /* Valid Recommend calls whose user, or one of whose items, is not in the
   * AP's own user or item table ("Unknown ids"); 0 without own tables. */
  uint64_t unknown_user_rounds, unknown_item_rounds;
  /* Rounds decided after being gathered in slices, and slices gathered
   * again from a round's first because an epoch changed ("Slices"). */
  uint64_t sliced_rounds, slice_restarts;
  /* Times a passive party was held out because its item epochs flapped
   * ("Flapping epochs"). */
  uint64_t epoch_flapping;
  /* Item ids the AP asked the passive parties for (not cached: each costs
   * every party an item part), and the times a round was passed over in
   * the turns because its client was over its budget of them ("Cost
   * model"). Federation-wide. */
  uint64_t uncached_ids, over_budget_waits;
} ap_round_stats;

/* One client's own counters, the part of ap_round_stats its calls alone
 * move: what the AP's Stats shows a client (ap_service.h; SECURITY.md,
 * "Stats by who asks"), where the totals above would tell it about the
 * other clients' calls. Counted where the totals are, in a table of
 * n_owners entries made at create: nothing is allocated per request. */
typedef struct ap_round_client_stats {
  uint64_t rounds;        /* its decisions issued */
  uint64_t degraded;      /* its decisions of the local model */
  uint64_t unknown_user_rounds, unknown_item_rounds; /* its rounds with an unknown id */
} ap_round_client_stats;

/* The counters of client owner (0..n_owners-1; all zero out of range). */
void ap_round_client_stats_get(const ap_round *r, int owner, ap_round_client_stats *st);

/* Asks for a reload of the own tables (o3m_tables.h: parsed and checked
 * as at a start on the tables' loader thread, never on a serving thread)
 * and returns at once: 0 started, 1 coalesced with one under way (coalesce
 * set: SIGHUP), O3M_ESTATE when this party has no tables (its features
 * come in the requests) or, with coalesce 0 (the Reload RPC), while
 * another reload is under way. */
int ap_round_reload_start(ap_round *r, int coalesce, o3m_err *e);

/* From the idle hook, never blocking: swaps a finished load in between
 * batches (1; *users and *items, may be NULL, get the new row counts), or
 * counts its refusal (the load's code, e its file:line or bound message,
 * the old tables kept), or 0 when nothing finished. Each batch reads the
 * version that was current when it was sent, so a round never mixes two;
 * a finished load waits while the version the previous one replaced is
 * still read by a batch in flight, and a replaced one is freed once no
 * batch reads it. */
int ap_round_reload_poll(ap_round *r, int *users, int *items, o3m_err *e);

void ap_round_stats_get(const ap_round *r, ap_round_stats *st);

/* The uncached item ids charged to owner's budget so far ("Cost model";
 * owner 0..n_owners-1). */
uint64_t ap_round_owner_uncached(const ap_round *r, int owner);

/* Frees the own tables and the buffers. NULL is accepted. */
void ap_round_destroy(ap_round *r);

#endif
