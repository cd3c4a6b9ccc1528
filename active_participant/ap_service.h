/* ap_service.h -- the active participant's service (the o3m-active daemon).
 *
 * The active participant (AP) is party 0 of the federation. It owns the
 * bandit policy, a column block of its own features and the decisions that
 * wait for a reward. One ap_service holds all of that plus the gRPC server of
 * the Active service (Info, Recommend, Reward, Stats) and one RPC client per
 * passive participant (PP).
 *
 * Start-up (ap_service_create). The federation config gives the policy, the
 * partition and every party. The service loads its own feature tables if the
 * config names any, builds the disjoint model's catalog (item id -> arm), then
 * fetches its block Q^0 from the mask generator: GetBlock with its party
 * index, retried with a backoff of 100 ms doubling to 2 s while the
 * generator is unreachable, up to pmg_timeout_s; the block is imported and
 * ConfirmBlock tells the generator it is installed. Then it creates one
 * client per PP (which fail fast, so a missing PP is an error of the round
 * and not a wait) and waits, within the same timeout, until every PP has
 * answered Info with the right role, index and partition (a PP still
 * unreachable then is logged and the service starts anyway; any other bad
 * answer fails the start). It creates the pending table and every buffer a
 * round needs for up to max_candidates candidates, and binds the server.
 * Nothing is allocated per request by this module afterwards.
 *
 * A round (Recommend). The request is validated completely before anything
 * is touched. Then the same MaskRequest goes to every PP at once; while they
 * work the AP masks its own candidates, Y = X^0 (Q^0)^T; each PP's reply is
 * checked (its party, our mask id, K x d finite values) and added into Y, so
 * that row k of Y is Q x_k. If any PP fails or misses the deadline the round
 * fails with that PP's code (UNAVAILABLE, DEADLINE, MASK, ...) and a message
 * naming it, and nothing changes: no pending entry, no policy call (so the
 * Thompson sampler does not advance), no round counted. (A PP that stays
 * UNAVAILABLE for a second gets a new channel, at most once a second, so
 * it is used again soon after it comes back.) Otherwise the policy
 * chooses on Y, the chosen row is kept in the pending table under a new
 * decision id, and the reply names the decision, the candidate, the item and
 * its score.
 *
 * A reward (Reward) is checked (finite, inside [reward_min, reward_max]),
 * matched to its decision (NOT_FOUND, ALREADY_EXISTS, EXPIRED) and its mask,
 * and only then given to the policy; the decision is closed only if the
 * update succeeded.
 *
 * Threads. The RPC layer runs handlers one at a time on the thread that
 * calls ap_service_run(), so the handlers share the policy and the tables
 * without locks. ap_service_shutdown() may be called from any thread or a
 * signal handler.
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
  /* Address to listen on instead of the party's configured address (NULL:
   * the configured one). Tests use "127.0.0.1:0". */
  const char *listen;
  /* If set, ap_service_create gives up (O3M_ESTATE) as soon as *stop becomes
   * nonzero while it waits for the mask generator, so a daemon can be
   * stopped during start-up. May be NULL. */
  volatile sig_atomic_t *stop;
} ap_service_options;

/* Defaults: party NULL (must be set), TLS, pmg_timeout_s 60, listen NULL,
 * stop NULL. */
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

/* Writes the bound port and a newline to path atomically (a temporary file
 * in the same directory, then rename), so that a reader never sees a
 * partial file. O3M_EIO on failure. */
int ap_service_write_ready_file(const ap_service *s, const char *path, o3m_err *e);

/* Serves on the calling thread until ap_service_shutdown(), then returns 0
 * (O3M_ESTATE if it already ran). Logs a line with the counters at stop. */
int ap_service_run(ap_service *s);

/* Asks ap_service_run() to return (it notices within 100 ms, lets calls in
 * flight finish for up to a second). Async-signal-safe; any thread. */
void ap_service_shutdown(ap_service *s);

/* Frees everything. Not while ap_service_run() executes on another thread:
 * shut down, join, then destroy. NULL is accepted. */
void ap_service_destroy(ap_service *s);

#endif
