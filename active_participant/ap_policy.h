/* ap_policy.h -- LinUCB and linear Thompson sampling, shared and disjoint.
 *
 * The policy library of the active participant. The AP daemon and o3m-eval
 * both link it. It never knows whether the contexts it sees are raw (x) or
 * masked (Q x): because Q is orthogonal every quantity it computes is the same
 * either way, which is the whole point of O3M.
 *
 * Two models:
 *   shared    one theta over per-arm contexts (the paper's VFUCB / VFTS):
 *             Lambda = lambda I + sum x x^T, u = sum r x, theta = Lambda^{-1} u.
 *   disjoint  one Lambda_a, u_a per arm (Li et al. 2010), arms 0..n_arms-1.
 *
 * Two algorithms:
 *   linucb    score = x^T theta + alpha sqrt(x^T Lambda^{-1} x)
 *   lints     score = x^T mu, mu ~ N(theta, v^2 Lambda^{-1})
 *
 * Ties: scores within AP_POLICY_TIE_RTOL * max(1, |best|) of the best are
 * ties and go to the lowest candidate index. The tolerance is far above the
 * rounding difference between computing on x and on Q x (about 1e-14 here)
 * and far below any real gap, so masked and central runs break ties alike; it
 * also makes the exact ties of the first rounds (every l2-normalized context
 * has the same width when Lambda = lambda I) deterministic.
 *
 * Costs per round (K candidates, dimension d): shared LinUCB scores all K
 * with one dsymm (2 K d^2) and updates by Sherman-Morrison (O(d^2)); shared
 * LinTS keeps a Cholesky factor updated in O(d^2) and samples mu with one
 * triangular solve, O(K d + d^2); disjoint models cost O(K d^2). Every
 * refactor_every updates (per arm for disjoint) the inverse or factor is
 * recomputed exactly from Lambda to bound drift.
 *
 * Everything is allocated in ap_policy_create(); choose and update allocate
 * nothing. A policy is not thread-safe: callers serialize access. */
#ifndef AP_POLICY_H
#define AP_POLICY_H

#include <stdint.h>

#include "o3m_error.h"

#define AP_POLICY_TIE_RTOL 1e-10

typedef enum { AP_ALGO_LINUCB = 1, AP_ALGO_LINTS = 2 } ap_algo;
typedef enum { AP_MODEL_SHARED = 1, AP_MODEL_DISJOINT = 2 } ap_model_kind;

typedef struct ap_policy_config {
  ap_algo algo;
  ap_model_kind model;
  int d;              /* context dimension */
  int n_arms;         /* disjoint: number of arms; shared: ignored */
  int max_candidates; /* largest K passed to choose */
  double lambda;      /* ridge, > 0 (paper: 1) */
  double alpha;       /* LinUCB width multiplier beta/alpha, >= 0 */
  double v;           /* LinTS scale, >= 0 */
  uint64_t seed;      /* LinTS sampler seed */
  int refactor_every; /* exact refactorization period in updates, >= 1 */
} ap_policy_config;

typedef struct ap_policy ap_policy;

/* Fills cfg with the defaults: linucb, shared, lambda 1, alpha 0.5, v 0.01,
 * seed 1, refactor_every 1000, max_candidates 1000. d and n_arms are 0 and
 * must be set. */
void ap_policy_config_default(ap_policy_config *cfg);

/* Parses "linucb"/"lints" and "shared"/"disjoint". O3M_EINVAL otherwise. */
int ap_algo_parse(const char *s, ap_algo *out);
int ap_model_parse(const char *s, ap_model_kind *out);
const char *ap_algo_name(ap_algo a);
const char *ap_model_name(ap_model_kind m);

/* Validates cfg (errors name the field) and allocates all state. */
int ap_policy_create(ap_policy **out, const ap_policy_config *cfg, o3m_err *e);
void ap_policy_destroy(ap_policy *p);
const ap_policy_config *ap_policy_config_of(const ap_policy *p);

/* Chooses among K candidates. X is K x d row-major (row k is the context of
 * candidate k). arms[k] is candidate k's arm index for the disjoint model
 * (0 <= arms[k] < n_arms); NULL means arms[k] = k. Ignored for shared.
 * On success *chosen is the candidate index and, if score is not NULL,
 * *score its score. Errors: O3M_EINVAL for K out of 1..max_candidates or a
 * bad arm index, O3M_ENONFINITE for a non-finite context; the policy state
 * (including the sampler) is unchanged on error. */
int ap_policy_choose(ap_policy *p, int K, const double *X, const int *arms, int *chosen,
                     double *score);

/* Per-candidate quantities without sampling, for tests and diagnostics:
 * mean[k] = x_k^T theta and var[k] = x_k^T Lambda^{-1} x_k (the squared LinUCB
 * width before alpha; for LinTS the sampled score's variance is v^2 var[k]).
 * Either output may be NULL. */
int ap_policy_stats(ap_policy *p, int K, const double *X, const int *arms, double *mean,
                    double *var);

/* Adds the observation (x, reward) for the given arm (ignored for shared).
 * O3M_EINVAL for a bad arm, O3M_ENONFINITE for non-finite input; the state
 * is unchanged on error. If the rank-one update finds that definiteness was
 * lost, the update is redone by exact refactorization from Lambda, so no
 * observation is ever dropped. */
int ap_policy_update(ap_policy *p, int arm, const double *x, double reward);

/* ||theta|| (shared: the one theta; disjoint: theta of the given arm). */
double ap_policy_theta_norm(const ap_policy *p, int arm);

/* Copies theta (d doubles) of the model (shared) or arm (disjoint). */
int ap_policy_theta(const ap_policy *p, int arm, double *theta);

/* Number of updates applied so far (all arms). */
uint64_t ap_policy_updates(const ap_policy *p);

#endif
