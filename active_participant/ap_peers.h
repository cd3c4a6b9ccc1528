/* ap_peers.h -- the active participant's clients of the passive
 * participants (PPs): one RPC client per PP, the start-up wait for their
 * Info, the fan-out calls of a round, and the rebuild of a channel that
 * stays unavailable.
 *
 * Peers are numbered 0..n-1 in the config's order of the passive parties
 * (o3m_config_passive), which is also the order in which a round adds
 * their masked parts. Each peer keeps its own copies of the strings its
 * client config points to, so its client can be rebuilt at any time.
 *
 * Clients fail fast (no wait_for_ready): a PP that is down fails the rounds
 * that need it with UNAVAILABLE instead of stalling them, and its channel is
 * rebuilt after PEER_RESET_MS of unavailability, then at most once per
 * PEER_RESET_MS (see ap_peers_finish). Why: with gRPC 1.51 a channel whose
 * first connection attempts were refused was seen to fail every call that
 * does not wait for it for about 30 s after the peer came up (gRPC's
 * minimum interval between re-resolutions of a target), while a new
 * channel connects on its first call.
 *
 * The circuit breaker (with a fallback, ap_fallback.h): after a party fails
 * a fan-out (ap_peers_trip) its breaker is open, and the AP stops waiting
 * for it: the batches go straight to the local model (ap_round.c checks
 * ap_peers_is_open before it starts a fan-out), so a degraded round costs
 * what a local decision costs, not a deadline. A probe thread asks each
 * open party for its Info on a client of its own, with a backoff (50 ms
 * doubling to 500 ms), and closes the breaker as soon as the party answers
 * with the federation's partition and fingerprint and the AP's mask; the
 * party's channel is then rebuilt before the next fan-out (see above).
 * A probe that fails as unavailable or past the deadline gets a new
 * channel too, so that each probe dials afresh: a connect attempt to a
 * host cut off the network would wait for a SYN retransmission seconds
 * after the host is back.
 *
 * Allocation: everything at ap_peers_create and ap_peers_breaker_start (and
 * a rebuilt channel, which gRPC allocates); a round allocates nothing here.
 *
 * Threads: one thread at a time (one of the AP's serving threads, under
 * the RPC layer's lock, or the creating thread during start-up), besides
 * the probe thread, which shares only the breakers' atomic flags. */
#ifndef AP_PEERS_H
#define AP_PEERS_H

#include <signal.h>
#include <stdint.h>

#include "o3m_config.h"
#include "o3m_error.h"
#include "o3m_fingerprint.h"
#include "o3m_mask.h"
#include "o3m_metrics.h"
#include "o3m_rpc.h"

typedef struct ap_peers ap_peers;

/* Creates one client per passive party of cfg, as party me (TLS unless
 * insecure), with the federation deadline. fingerprint is the federation
 * fingerprint of cfg (o3m_fingerprint_compute, done once by the caller);
 * every peer's must equal it. No call is made. cfg and fingerprint are
 * only read during the call. Errors: O3M_ENOMEM, or a client that cannot be
 * created (its code, naming the party). On failure *out is NULL and
 * nothing is left allocated. A federation without passive parties gives an
 * empty set. */
int ap_peers_create(ap_peers **out, const o3m_config *cfg, const o3m_party *me, int insecure,
                    const unsigned char fingerprint[O3M_FINGERPRINT_BYTES], o3m_err *e);

/* The start-up wait. Info goes to every peer in parallel, again and again
 * (backoff 100 ms doubling to 2 s) until each has answered or budget_ms is
 * spent. This opens the connections before the first round (a channel whose
 * first connect failed would otherwise refuse calls during gRPC's reconnect
 * backoff, so a daemon started next to its peers would fail its first
 * rounds) and checks each peer's role, party index and partition against
 * part. Only unreachable peers are retried: any other answer (a wrong
 * partition, PERM because the peer refuses our certificate, UNIMPLEMENTED
 * because another daemon listens there) fails with its code naming the
 * party. A peer still unreachable at the end is logged and 0 is returned;
 * its rounds fail until it comes. O3M_ESTATE as soon as *stop is set (stop
 * may be NULL). Allocates nothing; the peers stay usable whatever it
 * returns. */
int ap_peers_wait_ready(ap_peers *ps, const o3m_partition *part, int64_t budget_ms,
                        volatile sig_atomic_t *stop, o3m_err *e);

/* The number of peers. */
int ap_peers_count(const ap_peers *ps);

/* Peer j's party name, party index (slot) and the bound on its masked
 * parts (its max_norm, o3m_config.h). */
const char *ap_peers_name(const ap_peers *ps, int j);
int ap_peers_slot(const ap_peers *ps, int j);
double ap_peers_max_norm(const ap_peers *ps, int j);

/* Starts the same call (path, req, a reply of type reply) on every peer in
 * order, without waiting. Stops at the first peer that cannot start it
 * (no channel, or o3m_rpc_client_start fails): e then names that party and
 * its code is returned. *started is how many peers have the call in flight
 * (0..n), on success and on failure: each of them must be finished with
 * ap_peers_finish, whatever happens. req is only read during the call. */
int ap_peers_start(ap_peers *ps, const char *path, const ProtobufCMessage *req,
                   const ProtobufCMessageDescriptor *reply, int *started, o3m_err *e);

/* Finishes the call in flight on peer j (o3m_rpc_client_finish: *reply
 * belongs to the client until its next call) and notes the outcome for
 * the channel rebuild above. e (not prefixed with the party) says why on
 * failure. */
int ap_peers_finish(ap_peers *ps, int j, ProtobufCMessage **reply, o3m_err *e);

/* Counts every call to a passive party that ap_peers_start and
 * ap_peers_finish make from now on (the rounds' MaskBatch) in m's
 * o3m_ap_pp_calls_total{party,code}, code "OK" or the O3M code name (a
 * call that could not even start counts once, with its code), and
 * registers o3m_ap_pp_epoch_flapping_total{party} (ap_peers_hold). m (may
 * be NULL: no counting) must outlive ps. */
void ap_peers_set_metrics(ap_peers *ps, o3m_metrics *m);

/* Starts the circuit breaker and its probe thread (see above), after the
 * start-up wait: a party it did not reach starts with its breaker open.
 * part (borrowed, must outlive ps) and mask_id are what a probed party must
 * answer. Errors: a probe client that cannot be created, or the thread
 * (O3M_ENOMEM); ap_peers_destroy cleans up either way. */
int ap_peers_breaker_start(ap_peers *ps, const o3m_partition *part, uint64_t mask_id,
                           o3m_err *e);

/* Opens peer j's breaker (it failed a fan-out); nothing without a breaker. */
void ap_peers_trip(ap_peers *ps, int j);

/* Holds peer j out until until_ms (o3m_clock_ms) because its item epochs
 * flapped (ap_epochwatch.h): ap_peers_held says so until then, its breaker
 * (if started) opens and the probe thread does not probe it before then;
 * after it the breaker closes as after any outage, on the first probe the
 * party answers. count: count it once in o3m_ap_pp_epoch_flapping_total
 * (the round holds a party in every slot's peers, and counts it in one).
 * Only atomics are written: any serving thread may call it for any set. */
void ap_peers_hold(ap_peers *ps, int j, int64_t until_ms, int count);

/* 1 while peer j is held out (ap_peers_hold) at now_ms. */
int ap_peers_held(const ap_peers *ps, int j, int64_t now_ms);

/* 1 while peer j's breaker is open. */
int ap_peers_is_open(const ap_peers *ps, int j);

/* Stops the probe thread and frees every client. NULL is accepted. */
void ap_peers_destroy(ap_peers *ps);

#endif
