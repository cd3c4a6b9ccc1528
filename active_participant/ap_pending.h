/* ap_pending.h -- decisions waiting for their reward.
 *
 * When the active participant recommends, it keeps the chosen masked context
 * until the reward for that decision arrives; only then can the policy learn.
 * The table is bounded (capacity) and entries expire (expiry_ms).
 *
 * Decision ids are unpredictable: each is a fresh 64-bit value from the
 * OS CSPRNG (getrandom(2), through a buffered o3m_rng), redrawn if it is 0
 * or the id of a decision the table still holds. So an id says nothing
 * about any other (a caller who sees one decision cannot name the next or
 * the previous one, and a reward for a guessed id hits nothing but with
 * probability capacity / 2^64), ids of one run never repeat while the table
 * remembers them, and ids of different runs collide only by that same
 * chance.
 *
 * Layout. The decisions live in capacity slots, taken in order until all
 * were used; then opening a decision reuses the oldest slot of an owner
 * (see "Shares"), and if the decision in it was still waiting it is evicted
 * (counted) - the oldest decision is the one least likely to still get a
 * reward. Beside the slots an
 * index maps id -> slot: open addressing with linear probing over a
 * power-of-two array of at least 2 x capacity entries (so it is at most half
 * full), keyed by a mixed hash of the id. A slot's id stays in the index for
 * as long as the slot holds that decision - waiting, rewarded or expired, so
 * that a late or repeated reward is told apart from an unknown id - and is
 * deleted (by backward shifting, without tombstones) exactly when the ring
 * reuses the slot. Lookups of ids never issued stop at the first empty
 * entry; with the index at most half full that is about two probes.
 *
 * Shares. Every decision has an owner, a small integer (the AP gives each
 * [client NAME] of the config its index), and each owner a share: entries
 * of the table it may keep whatever the others do. The slots of each owner
 * are linked in their age order, and the owners that hold more than their
 * share in an over list. Once every slot has been used, a new decision of
 * owner o takes o's own oldest slot if o holds its share or more, and else
 * the oldest slot of an owner above its share; so a client that floods the
 * table evicts its own oldest decisions, never those of a client within
 * its share, while a table with room left is still used by whoever needs
 * it (shares bound what can be taken from an owner, not what an owner may
 * use). The shares sum to at most the capacity, so an owner below its
 * share always finds an owner above it. With one owner whose share is the
 * capacity (ap_pending_create) this is the plain ring: the oldest decision
 * of the table goes first. Every step is O(1).
 *
 * Everything is allocated in ap_pending_create(); nothing per call. Not
 * thread-safe: the AP's handlers run one at a time (under the RPC layer's
 * lock, whatever the number of serving threads). */
#ifndef AP_PENDING_H
#define AP_PENDING_H

#include <stdint.h>

#include "o3m_error.h"
#include "o3m_limits.h"

typedef struct ap_pending ap_pending;

typedef struct ap_pending_stats {
  uint64_t opened;
  uint64_t closed;   /* rewarded */
  uint64_t expired;  /* found expired when a reward came, or at open */
  uint64_t evicted;  /* overwritten while still waiting */
  uint32_t waiting;  /* open, not yet rewarded, not known to be expired */
} ap_pending_stats;

/* A source of decision ids: writes a uniformly random 64-bit value to *id
 * and returns 0, or returns a negative O3M code. */
typedef int (*ap_pending_id_fn)(void *arg, uint64_t *id);

/* How often ap_pending_open draws again before it gives up (O3M_ERANDOM)
 * when the source keeps giving 0 or ids the table holds: with a CSPRNG a
 * single redraw already has probability capacity / 2^64. */
#define AP_PENDING_MAX_DRAWS 64

/* capacity in 1..2^30 entries of dimension d >= 1; expiry_ms >= 1. ids NULL
 * draws decision ids from the OS CSPRNG (the production setting); tests and
 * fuzzers pass their own source (called with ids_arg), for example to force
 * repeated ids. Errors: O3M_EINVAL, O3M_ENOMEM, O3M_ERANDOM (the OS source
 * cannot be opened); *out is then NULL. */
int ap_pending_create(ap_pending **out, int capacity, int d, int64_t expiry_ms,
                      ap_pending_id_fn ids, void *ids_arg);
void ap_pending_destroy(ap_pending *t);

/* Most owners of one table. */
#define AP_PENDING_MAX_OWNERS O3M_MAX_PENDING_OWNERS

/* The same with n_owners owners (1..AP_PENDING_MAX_OWNERS), each with
 * share entries (see "Shares"; 0..capacity / n_owners, O3M_EINVAL
 * otherwise). ap_pending_create is this with one owner whose share is the
 * whole capacity. */
int ap_pending_create_shared(ap_pending **out, int capacity, int d, int64_t expiry_ms,
                             int n_owners, int share, ap_pending_id_fn ids, void *ids_arg);

/* Opens a decision: stores arm, mask_id and the d-vector x (copied), stamped
 * now_ms, in the next slot of the ring (evicting what it held), and returns
 * its new id in *id. O3M_ERANDOM if the id source fails, or gives 0 or an
 * id the table holds AP_PENDING_MAX_DRAWS times in a row; then nothing
 * changed. */
int ap_pending_open(ap_pending *t, int arm, uint64_t mask_id, const double *x, int64_t now_ms,
                    uint64_t *id);

/* The same for owner (0..n_owners-1; O3M_EINVAL otherwise, nothing
 * changed): the slot taken is chosen by the owners' shares ("Shares").
 * ap_pending_open opens for owner 0. */
int ap_pending_open_as(ap_pending *t, int owner, int arm, uint64_t mask_id, const double *x,
                       int64_t now_ms, uint64_t *id);

/* The local part beside each decision (the fallback model's, see
 * ap_fallback.h): allocates a capacity x d0 side table, once, at start-up
 * (O3M_EINVAL for d0 < 1 or a second call, O3M_ENOMEM). Without it the two
 * calls below do nothing and find nothing. */
int ap_pending_keep_local(ap_pending *t, int d0);

/* Stores decision id's local part x0 (d0 values, copied) and whether it was
 * decided by the local model alone (degraded: its x is not a federated
 * context, and its reward must not reach the federated model). An id the
 * table does not hold is ignored. Call it right after the open. */
void ap_pending_set_local(ap_pending *t, uint64_t id, const double *x0, int degraded);

/* Decision id's local part (pointing into the table, valid until the next
 * open) and its degraded flag: O3M_ENOTFOUND if the table does not hold id
 * or keeps no local parts. An open clears the flag. */
int ap_pending_local(const ap_pending *t, uint64_t id, const double **x0, int *degraded);

/* The owner of decision id while the table holds it (waiting, rewarded or
 * expired), or -1 when it does not (ap_pending_peek: O3M_ENOTFOUND). */
int ap_pending_owner(const ap_pending *t, uint64_t id);

/* Looks up decision id for a reward at now_ms without changing anything:
 * O3M_ENOTFOUND if the id was never issued by this table (0 included) or
 * its slot was reused, O3M_EEXISTS if it was already rewarded, O3M_EEXPIRED
 * if older than the expiry. On success *arm, *mask_id and *x (pointing into
 * the table, valid until the next open) describe it. */
int ap_pending_peek(const ap_pending *t, uint64_t id, int64_t now_ms, int *arm,
                    uint64_t *mask_id, const double **x);

/* Marks a decision that ap_pending_peek accepted as rewarded (it stays in
 * the table, answering O3M_EEXISTS, until its slot is reused). Anything else
 * (an unknown id, one not waiting) is left alone. */
void ap_pending_close(ap_pending *t, uint64_t id);

/* Marks an expired decision found by peek as gone, so it is counted once
 * (it stays in the table, answering O3M_EEXPIRED, until its slot is
 * reused). */
void ap_pending_expire(ap_pending *t, uint64_t id);

void ap_pending_stats_get(const ap_pending *t, int64_t now_ms, ap_pending_stats *st);

/* The number of owners, and the counts of one owner's decisions alone (all
 * zero for an owner out of range). */
int ap_pending_owners(const ap_pending *t);
void ap_pending_owner_stats(const ap_pending *t, int owner, ap_pending_stats *st);

#endif
