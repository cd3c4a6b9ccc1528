/* o3m_party_block.h -- how a column party (the AP or a PP) obtains its own
 * mask block Q^j at start, written once for both daemons.
 *
 * 1. With a state_dir, the block stored there (o3m_block_store.h) is loaded
 *    and the mask generator (PMG) is not asked: it may have forgotten Q, or
 *    be gone. A damaged or mismatched stored block refuses the start, with a
 *    log paragraph on how to recover (it cannot be fetched again).
 * 2. Otherwise the block is fetched: Info (the PMG's reply must agree with
 *    this party's config: role and partition, o3m_wire_info_check), then
 *    GetBlock sealed to a key pair drawn for the call (o3m_wire_get_block).
 *    Each attempt uses a fresh client with a deadline of
 *    O3M_PARTY_BLOCK_CALL_MS bounded by the time left; transient failures
 *    (unavailable, deadline, transport) are retried with a backoff from
 *    O3M_PARTY_BLOCK_DELAY0_MS doubling to O3M_PARTY_BLOCK_DELAY_MAX_MS,
 *    until timeout_s has passed or *stop is set.
 * 3. A fetched block is stored in state_dir (with the caller's secret, if
 *    any) BEFORE it is confirmed: after the last party's confirmation the
 *    PMG forgets Q and the stored copy is the only one.
 * 4. ConfirmBlock, retried on its own with the same backoff and budget: the
 *    PMG serves a block once per party since the last change, so after a
 *    confirmation that reached it (only its reply lost) a second GetBlock
 *    would be refused. A failed confirmation never fetches again.
 *
 * Threads: one call at a time per party; it blocks for at most timeout_s
 * plus one call deadline. Nothing is kept between calls. */
#ifndef O3M_PARTY_BLOCK_H
#define O3M_PARTY_BLOCK_H

#include <signal.h>
#include <stddef.h>

#include "o3m_config.h"
#include "o3m_error.h"
#include "o3m_mask.h"

/* Backoff of the fetch and of the confirmation: first pause and largest. */
#define O3M_PARTY_BLOCK_DELAY0_MS 100
#define O3M_PARTY_BLOCK_DELAY_MAX_MS 2000
/* Deadline of one call to the PMG (bounded by the time left). */
#define O3M_PARTY_BLOCK_CALL_MS 5000

typedef struct o3m_party_block_options {
  const o3m_config *cfg;      /* the federation (names, the PMG, TLS files) */
  const o3m_party *me;        /* this column party; its state_dir may be NULL */
  const o3m_partition *part;  /* the federation's columns */
  int insecure;               /* plaintext to the PMG (tests only) */
  int timeout_s;              /* >= 1: how long the PMG is waited for */
  const volatile sig_atomic_t *stop; /* NULL, or a flag that ends the wait */
} o3m_party_block_options;

/* Obtains this party's block as described above. secret (secret_len bytes,
 * 0..O3M_BLOCK_STORE_SECRET_MAX; NULL when 0) is a party's own secret kept
 * beside its block, the PP's dummy-row key (o3m_features.h): on entry a
 * fresh one, which a fetched block is stored with; when the block is loaded
 * from state_dir, secret is overwritten with the stored one, which must have
 * exactly secret_len bytes (else O3M_ECORRUPT).
 *
 * On success *out is the block (the caller destroys it). Errors: O3M_EINVAL
 * (arguments); those of o3m_block_store_load other than O3M_ENOTFOUND (a
 * stored block that cannot be used) and of o3m_block_store_save; the PMG's
 * answer or the last transient error when it gives up (e names the step,
 * the PMG, the time waited and the attempts); O3M_ESTATE when *stop ended
 * the wait. On failure *out is NULL; a block stored before a failed
 * confirmation stays in state_dir, so the next start loads it. */
int o3m_party_block_obtain(const o3m_party_block_options *o, o3m_block **out, void *secret,
                           size_t secret_len, o3m_err *e);

#endif
