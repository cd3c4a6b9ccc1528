/* ap_epochwatch.h -- the active participant's watch on the item epochs the
 * passive parties name.
 *
 * Why. Every MaskBatch reply names the party's item epoch, which changes
 * exactly when its item table changes (o3m_features_epoch), and the item
 * cache is keyed by it (ap_itemcache.h): a new epoch drops every cached
 * item part and has the next batches ask for every item again. A party
 * that names a new epoch in every reply (a bug, or a member that wants to
 * see every candidate list again, which the cache otherwise hides from it)
 * thus made the AP drop its cache in every batch, ask twice per batch and
 * resend each round's whole candidate list to that party: the other
 * clients' rounds slowed tenfold and no round said why. An epoch that
 * returns to one the party left (A, B, A) is the other signature: the
 * party is asked again for item parts under an epoch it has already
 * answered them for.
 *
 * The rule, per passive party, over the last minute (AP_EPOCHWATCH_WINDOW_MS):
 *  - more than max changes of its epoch (the config's
 *    epoch_changes_max_per_minute) is AP_EPOCH_TOO_FAST;
 *  - a change back to an epoch it left within the minute is
 *    AP_EPOCH_WENT_BACK.
 * An honest reload of a table with new content gives a new epoch, once:
 * it never trips either rule unless an operator reloads more than max new
 * tables in a minute, or puts back within a minute the table they had just
 * replaced. The round adds a third, within one batch: a batch asked again
 * because its cached parts were stale ("Identical decisions" in
 * ap_round.h) whose second replies name yet another epoch is flapping too,
 * since no table reload is that fast.
 *
 * What a flapping party costs it (ap_round.c, ap_peers_hold): it is held
 * out for one window, as if its circuit breaker were open, and its rounds
 * go to the fallback, degraded with the reason EPOCH_FLAPPING (or fail
 * with fallback = none). It recovers like any missing party once the hold
 * is over: the breaker's probe finds it answering and the next batches ask
 * it again; by then the changes it made are older than the window, so it
 * starts with a clean record, and trips again at once if it goes on.
 *
 * Allocation: at create, max entries per party. Threads: none of its own;
 * the round uses it under the RPC layer's lock. */
#ifndef AP_EPOCHWATCH_H
#define AP_EPOCHWATCH_H

#include <stdint.h>

#include "o3m_error.h"

/* The window of the rule above. */
#define AP_EPOCHWATCH_WINDOW_MS 60000

enum { AP_EPOCH_OK = 0, AP_EPOCH_TOO_FAST = 1, AP_EPOCH_WENT_BACK = 2 };

typedef struct ap_epochwatch ap_epochwatch;

/* A watch on n_parties (>= 0) parties allowing max (0..O3M_MAX_EPOCH_CHANGES;
 * 0: nothing is watched, every note is AP_EPOCH_OK) changes per window.
 * O3M_EINVAL, O3M_ENOMEM. */
int ap_epochwatch_create(ap_epochwatch **out, int n_parties, int max, o3m_err *e);

/* Notes that party j (0..n_parties-1) named epoch at now_ms (a monotonic
 * clock, non-decreasing) in its reply to the request of sequence number seq
 * (the round's batch number: the order requests were sent in):
 * AP_EPOCH_OK, AP_EPOCH_TOO_FAST or AP_EPOCH_WENT_BACK (see above). The
 * first note of a party is OK, and so is a note of a request older than
 * the party's last noted one, which is not taken (pipelined batches finish
 * in any order: the older one's reply may name the epoch the party has
 * since left). A change that trips a rule is still taken as the party's
 * epoch. */
int ap_epochwatch_note(ap_epochwatch *w, int j, uint64_t epoch, uint64_t seq, int64_t now_ms);

/* Changes of party j's epoch within the window ending at now_ms. */
int ap_epochwatch_changes(ap_epochwatch *w, int j, int64_t now_ms);

/* "changed its item epoch more than N times in a minute" or "went back to
 * an item epoch it had left", for a log line or an error message. */
const char *ap_epochwatch_why(int verdict);

/* NULL is accepted. */
void ap_epochwatch_destroy(ap_epochwatch *w);

#endif
