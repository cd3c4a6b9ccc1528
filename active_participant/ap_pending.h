/* ap_pending.h -- decisions waiting for their reward.
 *
 * When the active participant recommends, it keeps the chosen masked context
 * until the reward for that decision arrives; only then can the policy learn.
 * The table is bounded (capacity) and entries expire (expiry_ms). It is a
 * ring: decision ids are consecutive numbers from a random 64-bit base drawn
 * at start, so ids of one run are unique, ids of different runs do not
 * collide in practice, and the slot of id is (id - base) % capacity. Opening
 * decision n reuses the slot of decision n - capacity; if that one was still
 * waiting it is evicted (counted) - the oldest decision is the one least
 * likely to still get a reward.
 *
 * Everything is allocated in ap_pending_create(). Not thread-safe: the AP
 * serves calls on one thread. */
#ifndef AP_PENDING_H
#define AP_PENDING_H

#include <stdint.h>

#include "o3m_error.h"

typedef struct ap_pending ap_pending;

typedef struct ap_pending_stats {
  uint64_t opened;
  uint64_t closed;   /* rewarded */
  uint64_t expired;  /* found expired when a reward came, or at open */
  uint64_t evicted;  /* overwritten while still waiting */
  uint32_t waiting;  /* open, not yet rewarded, not known to be expired */
} ap_pending_stats;

/* capacity >= 1 entries of dimension d; expiry_ms >= 1. base is the first
 * decision id (draw it at random; 0 is not a valid id and is skipped). */
int ap_pending_create(ap_pending **out, int capacity, int d, int64_t expiry_ms, uint64_t base);
void ap_pending_destroy(ap_pending *t);

/* Opens a decision: stores arm, mask_id and the d-vector x (copied), stamped
 * now_ms. Returns its id in *id. Cannot fail. */
void ap_pending_open(ap_pending *t, int arm, uint64_t mask_id, const double *x, int64_t now_ms,
                     uint64_t *id);

/* Looks up decision id for a reward at now_ms without changing anything:
 * O3M_ENOTFOUND if the id was never issued by this table or its slot was
 * reused, O3M_EEXISTS if it was already rewarded, O3M_EEXPIRED if older than
 * the expiry. On success *arm, *mask_id and *x (pointing into the table,
 * valid until the next open) describe it. */
int ap_pending_peek(const ap_pending *t, uint64_t id, int64_t now_ms, int *arm,
                    uint64_t *mask_id, const double **x);

/* Marks a decision that ap_pending_peek accepted as rewarded. */
void ap_pending_close(ap_pending *t, uint64_t id);

/* Marks an expired decision found by peek as gone, so it is counted once. */
void ap_pending_expire(ap_pending *t, uint64_t id);

void ap_pending_stats_get(const ap_pending *t, int64_t now_ms, ap_pending_stats *st);

#endif
