/* ap_fallback.h -- the active participant's local model: the fallback that
 * decides a round when the federation cannot (a department's outage).
 *
 * Beside the federated model, which sees the masked sums Q x of every
 * party's features, the AP keeps a model of the same algorithm and kind on
 * its own columns x^0 alone ([policy] local_lambda and local_alpha, the
 * federated lambda and alpha by default). x^0 is known for every decision,
 * federated or not, so this model learns from every reward (the pending
 * table keeps the chosen candidate's x^0 beside its masked context,
 * ap_pending_keep_local). When a batch's fan-out cannot complete (a passive
 * party unreachable, past the deadline, on another mask or refusing, or its
 * circuit breaker open, ap_peers.h), its rounds are decided here instead:
 * answered OK with Recommendation.degraded set and the missing parties
 * named. A degraded decision's reward updates this model only: the
 * federated model never learns from a context it did not see.
 *
 * Counting: every degraded round is counted once per missing party, in
 * o3m_ap_degraded_rounds_total{party,reason} (reason: the O3M code name of
 * that party's failure, or "BREAKER" while its breaker is open), and in
 * total in the round statistics.
 *
 * Durability: with a state_dir the local model is saved in the same
 * checkpoint as the federated one, and its rewards go through the same
 * journal (ap_checkpoint.h): a degraded decision's reward as a local
 * record that a replay applies to this model alone, a federated one's as
 * a local part paired with the federated record, applied to both. So
 * after a crash it holds every acknowledged reward once. Replicas carry
 * the degraded flag and x^0 in their decision records and reward stream
 * (ap_replica.h) for the same end.
 *
 * Allocation: everything at create. Threads: under the RPC layer's lock,
 * like the policy it sits beside. */
#ifndef AP_FALLBACK_H
#define AP_FALLBACK_H

#include <stdint.h>

#include "o3m_error.h"
#include "o3m_metrics.h"
#include "o3m_policy.h"

typedef struct ap_fallback ap_fallback;

/* pc: the local model's policy (d = this party's d0, its own lambda and
 * alpha). m (may be NULL) counts the degraded rounds and must outlive the
 * fallback. Errors: the policy's (naming the field), O3M_ENOMEM. */
int ap_fallback_create(ap_fallback **out, const o3m_policy_config *pc, o3m_metrics *m,
                       o3m_err *e);

/* Chooses among K candidates on their own parts X0 (K x d0) with the local
 * model (o3m_policy_choose). */
int ap_fallback_choose(ap_fallback *fb, int K, const double *X0, const int *arms, int *chosen,
                       double *score);

/* Learns one reward on the decision's own part x0. A reward the local
 * model cannot take (o3m_policy_update_check) is skipped and counted, not
 * an error of the Reward call: the federated model may still have taken
 * it. Returns 1 if applied, 0 if skipped. */
int ap_fallback_update(ap_fallback *fb, int arm, const double *x0, double reward);

/* Counts one degraded round with party missing, for reason (an O3M code
 * name, or "BREAKER"). */
void ap_fallback_note(ap_fallback *fb, const char *party, const char *reason);

typedef struct ap_fallback_stats {
  uint64_t updates; /* rewards the local model learned */
  uint64_t skipped; /* rewards it could not take */
} ap_fallback_stats;

void ap_fallback_stats_get(const ap_fallback *fb, ap_fallback_stats *st);

/* The local model (for checks in tests and diagnostics). */
const o3m_policy *ap_fallback_policy(const ap_fallback *fb);

/* The same, writable: for the checkpoint module alone, which saves,
 * loads and resets it (every update goes through ap_fallback_update). */
o3m_policy *ap_fallback_model(ap_fallback *fb);

/* NULL is accepted. */
void ap_fallback_destroy(ap_fallback *fb);

#endif
