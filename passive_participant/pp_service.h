/* pp_service.h -- the passive participant's service (o3m-passive).
 *
 * A passive participant j holds feature tables (o3m_features) and, once the
 * federation starts, its column block Q^j of the mask. For every round the
 * active participant (AP) sends the user id and the K candidate item ids;
 * the service looks up X^j (K x d_j: user columns then item columns, a
 * deterministic per-id dummy row for an id it does not hold), masks it into
 * Y = X^j (Q^j)^T (K x d) and answers. It never receives the chosen
 * candidate, a score or a reward: the Passive service has no field for them.
 *
 * Life cycle, the same as every daemon's service (ap_service.h):
 * pp_service_create loads the tables, allocates every buffer for
 * max_candidates (the [policy] value of the config) and for the largest
 * MaskBatch (o3m_wire_mask_batch_rows of it), binds the server and installs
 * the block (o3m_party_block_obtain: stored, or from the mask generator
 * (PMG) with retries, then confirmed); pp_service_run serves the methods
 * below until pp_service_shutdown (async-signal-safe); pp_service_destroy
 * frees. Nothing is allocated per request beyond what the RPC layer does.
 *
 * Methods (pp_service_methods), each answered only to the callers that
 * pp_service_access names (o3m_access.h; the RPC layer refuses anyone else
 * with PERM before the request is read):
 *   Info   role, protocol, the partition, this party's index and mask id;
 *          to the active party and to this party's own certificate.
 *   Mask   only to the caller whose certificate CN is the configured active
 *          party's name. MASK for a mask id other than the
 *          installed one, RANGE for K outside 1..max_candidates, INVALID
 *          ARGUMENT for an empty user or item id where this party has the
 *          table to look it up.
 *   MaskBatch  several rounds in one call (what the AP sends), each answered
 *          by the same code as Mask, bit for bit the same values, rows of
 *          all queries one after the other. Same caller rule and errors;
 *          RANGE for more than O3M_WIRE_MAX_BATCH queries or more rows than
 *          o3m_wire_mask_batch_rows(max_candidates, d). One refused query
 *          refuses the batch. Counted as one request per query.
 *   Stats  the counters (PassiveStats), only to this party's own
 *          certificate (its operator, through o3m-cli), never to the AP:
 *          the unknown-user counter read around one Mask call would tell the
 *          AP whether this party knows that user, which the dummy rows hide.
 *   Reload the tables again from the files the config names (o3m_tables.h:
 *          parsed and checked as at a start on the tables' loader thread,
 *          swapped between two calls; a bad file, or a path that is no
 *          regular file or holds more than table_bytes_max, is refused
 *          with its message and the old tables keep serving), answered
 *          once swapped or refused; refused (O3M_ESTATE) while another
 *          reload runs. The same as SIGHUP (pp_options.reload), which is
 *          coalesced instead. Only to this party's own certificate, like
 *          Stats.
 * Secure aggregation ([federation] aggregation = secure, the default; the
 * party's own config decides, never a request): at create the service also
 * derives the pair keys with every other passive party from its agg_secret
 * file and their agg_public keys (o3m_secagg.h; a missing or readable-by-
 * others key file fails the start naming the config), and logs a WARN when
 * it is the only passive party. Mask is then refused with STATE; MaskBatch
 * needs a 32-byte nonce (INVALID ARGUMENT otherwise: no downgrade to
 * per-party parts) and the AP's scale (STATE when it differs: the configs
 * differ), checks each row of its part against its own max_norm (INVALID
 * ARGUMENT) and answers only the masked words (MaskBatchReply.masked, never
 * values), from a third buffer sized at create like Y.
 * With insecure (plaintext) there are no identities and no access checks.
 * Nothing a request carries names a decision of the active party: a PP
 * sees users and candidate items, never a decision id, a choice or a
 * reward.
 *
 * Handlers run one at a time on the server thread (o3m_rpc.h); the service
 * state needs no lock. Logs carry ids of rounds, counts and codes, never a
 * feature value, a masked vector, a block value or a user or item id. */
#ifndef PP_SERVICE_H
#define PP_SERVICE_H

#include <signal.h>
#include <stdint.h>

#include "o3m_access.h"
#include "o3m_config.h"
#include "o3m_error.h"
#include "o3m_metrics.h"
#include "o3m_rpc.h"
#include "o3m_wire.h"

/* Path of the Stats method (o3m.proto, service Passive), until o3m_wire.h
 * defines it with the other paths. */
#ifndef O3M_PATH_PASSIVE_STATS
#define O3M_PATH_PASSIVE_STATS "/o3m.v1.Passive/Stats"
#endif

/* Default of pp_options.pmg_timeout_s. */
#define PP_DEFAULT_PMG_TIMEOUT_S 60

typedef struct pp_service pp_service;

typedef struct pp_options {
  int insecure;       /* plaintext to the PMG and for callers; no access checks */
  int pmg_timeout_s;  /* give up fetching the block after this long, >= 1 */
  /* A nonzero *stop (set by a signal handler) ends the block fetch of
   * pp_service_create with O3M_ESTATE, so that a daemon can be stopped
   * during start-up. May be NULL. */
  const volatile sig_atomic_t *stop;
  /* The registry the service counts into (the daemon's --metrics-listen),
   * or NULL; it must outlive the service. Series: every RPC by method and
   * code with its latency (o3m_rpc_calls_total, o3m_rpc_duration_seconds;
   * Mask and MaskBatch among them) and the mask id (o3m_mask_info). */
  o3m_metrics *metrics;
  /* Serving threads (the daemon's --threads), 1..O3M_CONFIG_MAX_THREADS;
   * 0: the party's threads key, else 1 (proto/o3m_rpc.h, "Threads": the
   * Mask handlers still run one at a time). */
  int threads;
  /* Address to listen on instead of the party's listen address (the
   * daemon's --listen: a second instance of the party, see o3m_config.h
   * "instances"); NULL: the party's listen key, else its address. */
  const char *listen;
  /* Tests only (the daemon's --test-reply-delay-ms): each MaskBatch is
   * answered this many milliseconds late, 0..PP_MAX_TEST_DELAY_MS, the wait
   * made without the server's lock (o3m_rpc_server_unlocked), so that with
   * several threads several batches wait at once; 0: none. */
  int test_reply_delay_ms;
  /* A nonzero *reload (the daemon's SIGHUP flag, o3m_daemon_reload_flag)
   * makes the server's idle hook, within about 100 ms, ask for a reload of
   * the tables as Reload does (coalesced with one under way) and clear it.
   * May be NULL. */
  volatile sig_atomic_t *reload;
} pp_options;

/* The largest --test-reply-delay-ms: below the AP's usual deadline. */
#define PP_MAX_TEST_DELAY_MS 2000

typedef struct pp_service_stats {
  uint64_t requests;       /* Mask calls received */
  uint64_t lookups;        /* Mask calls answered */
  uint64_t unknown_users;  /* answered calls whose user had no row */
  uint64_t unknown_items;  /* candidate items without a row */
  uint64_t item_lookups;   /* candidate items looked up */
  uint64_t errors;         /* Mask calls refused */
  uint64_t reloads;        /* table reloads swapped in */
  uint64_t reloads_refused; /* table reloads refused, the old tables kept */
  int64_t last_reload_ms;  /* Unix time of the last swap, ms (0: none) */
} pp_service_stats;

/* Loads the tables of the passive party called party in cfg (its
 * user_table, item_table and dims), allocates the request buffers for
 * max_candidates, binds the server on the party's listen address (mutual TLS with
 * its cert and key and the federation CA unless opt->insecure; a request
 * beyond the largest MaskBatch of the config is refused unread), installs
 * the block by o3m_party_block_obtain (opt->stop ends its wait) and logs
 * the "serving" line. Calls queue from then until pp_service_run. cfg must
 * outlive the service. On failure *out is NULL, nothing is leaked or left
 * listening and e names the party, file and line. Errors: O3M_EINVAL (no
 * such party, or not a passive one), those of o3m_features_load, O3M_ERANGE
 * for tables whose rows could form a part x^j above the party's max_norm
 * (o3m_features_check_norm: the message names file and line), O3M_ENOMEM,
 * for the server "CONFIG: [party NAME]: listen ADDRESS: CAUSE" (O3M_EIO) or
 * a TLS file's problem (O3M_ETLS), those of o3m_party_block_obtain and
 * O3M_ERANDOM (no dummy-row key); with secure aggregation those of
 * o3m_secagg_scale and o3m_secagg_create (O3M_EPERM for a key file others
 * may read), or O3M_EINVAL without agg_secret when there are other passive
 * parties. */
int pp_service_create(pp_service **out, const o3m_config *cfg, const char *party,
                      const pp_options *opt, o3m_err *e);

/* The TCP port the server is bound to. */
int pp_service_port(const pp_service *s);

/* Serves on the calling thread until pp_service_shutdown, then logs a line
 * with the counters and returns 0. */
int pp_service_run(pp_service *s);

/* Asks pp_service_run to return. Async-signal-safe; any thread. */
void pp_service_shutdown(pp_service *s);

/* Stops and frees the server, frees everything (the block is wiped). Not
 * while pp_service_run executes on another thread. NULL is accepted. */
void pp_service_destroy(pp_service *s);

/* The method table (Info, Mask, MaskBatch, Stats, Reload) to pass to o3m_rpc_server_create
 * with the service as ctx; *n receives its length. The table is static. */
const o3m_rpc_method *pp_service_methods(int *n);

/* The access policy of that table (o3m_access_create); *n receives its
 * length. The table is static. */
const o3m_access_rule *pp_service_access(int *n);

uint64_t pp_service_mask_id(const pp_service *s); /* 0 before the block */
int pp_service_party(const pp_service *s);        /* this party's index j */
int pp_service_dim(const pp_service *s);          /* d */
int pp_service_party_dim(const pp_service *s);    /* d_j */
int pp_service_max_candidates(const pp_service *s);
/* The tables now served (owned by the service; a reload replaces them). */
const struct o3m_features *pp_service_features(const pp_service *s);

/* The counters; call it on the thread that runs the server, or after run()
 * returned. */
void pp_service_stats_get(const pp_service *s, pp_service_stats *out);

#endif
