/* pmg_service.h -- the privacy mask generator's service (o3m-pmg).
 *
 * At creation the service draws the d x d orthogonal mask Q (o3m_mask) and
 * cuts it into the column blocks Q^j of the column parties: the active party
 * and the passive parties in config order, party j = o3m_party.slot. Then it
 * serves the MaskGenerator methods of o3m.proto through the method table
 * below:
 *
 * Every method is answered only to the column parties (the active and the
 * passive parties): pmg_service_access is the policy (o3m_access.h) that the
 * RPC layer applies before a request is read; anyone else gets PERM.
 *
 *   Info          role, protocol, the public partition and the mask id.
 *   GetBlock      Q^j, only to the caller whose certificate common name is
 *                 the configured name of party j (PERM otherwise), only for
 *                 the configured dims (DIM otherwise), and only sealed to
 *                 the X25519 public key of the request (o3m_seal.h; INVAL
 *                 without one). The plaintext exists only in Q, the blocks
 *                 and one scratch buffer that o3m_seal_block wipes at once;
 *                 the reply carries ciphertext. A block is served once per
 *                 party: after party j has confirmed, its GetBlock is
 *                 refused with STATE and a WARN naming the party, unless
 *                 keep_mask; a repeat before the confirmation (a reply
 *                 lost on the way) is served again.
 *   ConfirmBlock  party j says it installed the block. When every column
 *                 party has confirmed, the service forgets Q: it wipes Q and
 *                 destroys the blocks (wiping them), so that nobody (the
 *                 PMG's operator included) can later hand the mask to the
 *                 active party. GetBlock then answers STATE ("mask
 *                 forgotten; restart the federation"). keep_mask disables
 *                 forgetting and the once-per-party rule (for a party that
 *                 may restart and fetch again, at the price of keeping Q in
 *                 memory; note that a restarted passive party draws new
 *                 dummy rows under the old mask, see o3m_features.h).
 *
 * With insecure (plaintext transport) there is no caller identity, so every
 * caller may fetch any block by its index; main() warns about it.
 *
 * Life cycle, the same as every daemon's service (ap_service.h):
 * pmg_service_create draws the mask and binds the server, pmg_service_run
 * serves on the calling thread until pmg_service_shutdown (async-signal
 * safe), pmg_service_destroy frees. The server reads no request above a
 * few kilobytes and closes idle connections.
 *
 * Handlers run one at a time on the server thread (o3m_rpc.h), so the state
 * below needs no lock. The PMG never sees a feature, a user, an item or a
 * reward; it logs who fetched and confirmed which block and the mask id, and
 * never a block's values. */
#ifndef PMG_SERVICE_H
#define PMG_SERVICE_H

#include <stdint.h>

#include "o3m_access.h"
#include "o3m_config.h"
#include "o3m_error.h"
#include "o3m_metrics.h"
#include "o3m_rpc.h"

typedef struct pmg_service pmg_service;

typedef struct pmg_options {
  int insecure;          /* plaintext: no identity checks, serve by index */
  int keep_mask;         /* never forget Q */
  int seeded;            /* draw Q from a seeded generator (tests only) */
  uint64_t seed;         /* its seed, with seeded = 1 */
  /* The registry the service counts into (the daemon's --metrics-listen),
   * or NULL; it must outlive the service. Series: every RPC by method and
   * code with its latency (o3m_rpc_calls_total, o3m_rpc_duration_seconds:
   * GetBlock and ConfirmBlock among them), the parties, how many confirmed
   * their block, whether Q is forgotten, and the mask id. */
  o3m_metrics *metrics;
} pmg_options;

/* Counters, for the stop log line and for tests. */
typedef struct pmg_stats {
  uint64_t blocks_served;  /* GetBlock calls answered with a block */
  uint64_t refused;        /* GetBlock and ConfirmBlock calls refused */
  int confirmed;           /* column parties that have confirmed */
  int parties;             /* column parties M */
  int forgotten;           /* 1 once Q is forgotten */
} pmg_stats;

/* Builds the partition from cfg's column parties and draws the mask: from
 * the OS CSPRNG (getrandom) unless opt->seeded, then from
 * o3m_rng_create_seeded_insecure(opt->seed), which a test can replay with
 * o3m_mask_generate to recompute Q. Then binds the server on the pmg
 * party's listen address (mutual TLS with its cert and key and the federation CA
 * unless opt->insecure) and logs the "serving" line; calls queue from then
 * until pmg_service_run. cfg must outlive the service (party names are
 * borrowed from it). On success *out owns Q, its blocks and the server; on
 * failure *out is NULL and nothing is left allocated or listening. Errors:
 * O3M_EINVAL, O3M_ENOMEM, O3M_ERANDOM, and for the server "CONFIG: [party
 * NAME]: listen ADDRESS: CAUSE" (O3M_EIO) or a TLS file's problem
 * (O3M_ETLS); e says which. */
int pmg_service_create(pmg_service **out, const o3m_config *cfg, const pmg_options *opt,
                       o3m_err *e);

/* The TCP port the server is bound to. */
int pmg_service_port(const pmg_service *s);

/* Serves on the calling thread until pmg_service_shutdown, then logs a
 * line with the counters and returns 0. */
int pmg_service_run(pmg_service *s);

/* Asks pmg_service_run to return. Async-signal-safe; any thread. */
void pmg_service_shutdown(pmg_service *s);

/* Stops and frees the server, wipes Q and the blocks and frees everything
 * (the seal scratch buffer is wiped after every use already). Not while
 * pmg_service_run executes on another thread. NULL is accepted. */
void pmg_service_destroy(pmg_service *s);

/* The method table (Info, GetBlock, ConfirmBlock) to pass to
 * o3m_rpc_server_create with the service as ctx; *n receives its length. The
 * table is static. */
const o3m_rpc_method *pmg_service_methods(int *n);

/* The access policy of that table (o3m_access_create); *n receives its
 * length. The table is static. */
const o3m_access_rule *pmg_service_access(int *n);

uint64_t pmg_service_mask_id(const pmg_service *s);
int pmg_service_dim(const pmg_service *s);
void pmg_service_stats(const pmg_service *s, pmg_stats *out);

#endif
