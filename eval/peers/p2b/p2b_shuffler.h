/* p2b_shuffler.h -- P2B's trusted shuffler (section 3.3 of the paper).
 *
 * Agents that elect to participate send one tuple (code, action, reward).
 * The shuffler (i) anonymizes: a tuple carries no sender, by construction of
 * this type; (ii) shuffles: a batch is released in a uniformly random order
 * (Fisher-Yates from the shuffler's seeded stream); (iii) thresholds: a tuple
 * whose code occurs fewer than l times in the batch is dropped, which is
 * what makes the release (l, 0)-crowd-blending. In the paper the shuffler
 * runs in an enclave; here it is an in-process object, so it models the
 * output, not the trust.
 *
 * Lifecycle: create with a capacity, add tuples, release the batch (which
 * empties it), repeat. Nothing is allocated after create. */
#ifndef P2B_SHUFFLER_H
#define P2B_SHUFFLER_H

#include <stdint.h>

#include "o3m_error.h"

typedef struct p2b_tuple {
  int code;      /* the encoded context, 0..k-1 */
  int action;    /* the arm the agent played */
  double reward; /* what it observed */
} p2b_tuple;

typedef struct p2b_shuffler p2b_shuffler;

/* A shuffler for codes 0..k-1 holding at most capacity tuples per batch,
 * threshold l >= 1. O3M_EINVAL (named) or O3M_ENOMEM; *out untouched. */
int p2b_shuffler_create(p2b_shuffler **out, int k, int l, long capacity, uint64_t seed,
                        o3m_err *e);
void p2b_shuffler_destroy(p2b_shuffler *s);

/* Queues one tuple. O3M_EINVAL for a code out of range or a non-finite
 * reward, O3M_EFULL when the batch is full; nothing is queued then. */
int p2b_shuffler_add(p2b_shuffler *s, const p2b_tuple *t, o3m_err *e);

/* Releases the batch: shuffles it, drops the tuples whose code occurs fewer
 * than l times, and returns in *out (owned by the shuffler, valid until the
 * next add) the *n_out survivors; *n_dropped counts the rest (may be NULL).
 * The batch is empty afterwards. */
void p2b_shuffler_release(p2b_shuffler *s, const p2b_tuple **out, long *n_out, long *n_dropped);

#endif
