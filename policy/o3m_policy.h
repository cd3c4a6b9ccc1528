/* o3m_policy.h -- LinUCB and linear Thompson sampling, shared and disjoint.
 *
 * The bandit engine, a library of its own (policy/) with this one public
 * header; the AP daemon and o3m-eval are two of its users. It never knows
 * whether the contexts it sees are raw (x) or masked (Q x): because Q is
 * orthogonal every quantity it computes is the same either way, which is the
 * whole point of O3M.
 *
 * Files: o3m_policy.c (the engine: create, choose, update, reset),
 * o3m_policy_state.c (the state image below) and o3m_policy_health.c (the
 * health check and refactorization), sharing o3m_policy_impl.h, which only
 * they include.
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
 * Ties: scores within O3M_POLICY_TIE_RTOL * max(1, |best|) of the best are
 * ties and go to the lowest candidate index. The tolerance is far above the
 * rounding difference between computing on x and on Q x (about 1e-14 here)
 * and far below any real gap, so masked and central runs break ties alike; it
 * also makes the exact ties of the first rounds (every l2-normalized context
 * has the same width when Lambda = lambda I) deterministic.
 *
 * Costs per round (K candidates, dimension d): shared LinUCB scores all K
 * with one dtrmm on the upper triangle of Lambda^{-1} (K d^2 flops) and
 * updates by Sherman-Morrison (O(d^2)); o3m_policy_choose_batch scores the
 * candidates of many rounds with that one dtrmm; shared
 * LinTS keeps a Cholesky factor updated in O(d^2) and samples mu with one
 * triangular solve, O(K d + d^2); disjoint models cost O(K d^2). Every
 * refactor_every updates (per arm for disjoint) the inverse or factor is
 * recomputed exactly from Lambda to bound drift.
 *
 * Everything is allocated in o3m_policy_create(); choose and update allocate
 * nothing. A policy is not thread-safe: callers serialize access. */
#ifndef O3M_POLICY_H
#define O3M_POLICY_H

#include <stddef.h>
#include <stdint.h>

#include "o3m_defaults.h"
#include "o3m_error.h"

#define O3M_POLICY_TIE_RTOL 1e-10

typedef enum { O3M_ALGO_LINUCB = 1, O3M_ALGO_LINTS = 2 } o3m_algo;
typedef enum { O3M_MODEL_SHARED = 1, O3M_MODEL_DISJOINT = 2 } o3m_model_kind;

typedef struct o3m_policy_config {
  o3m_algo algo;
  o3m_model_kind model;
  int d;              /* context dimension */
  int n_arms;         /* disjoint: number of arms; shared: ignored */
  int max_candidates; /* largest K passed to choose */
  double lambda;      /* ridge, > 0 (paper: 1) */
  double alpha;       /* LinUCB width multiplier beta/alpha, >= 0 */
  double v;           /* LinTS scale, >= 0 */
  uint64_t seed;      /* LinTS sampler seed */
  int refactor_every; /* exact refactorization period in updates, >= 1 */
} o3m_policy_config;

typedef struct o3m_policy o3m_policy;

/* Fills cfg with the defaults: linucb, shared, and o3m_defaults.h's lambda
 * 1, alpha 0.5, v 0.01, seed 1, refactor_every 1000, max_candidates 1000.
 * d and n_arms are 0 and must be set. */
void o3m_policy_config_default(o3m_policy_config *cfg);

/* Parses "linucb"/"lints" and "shared"/"disjoint". O3M_EINVAL otherwise. */
int o3m_algo_parse(const char *s, o3m_algo *out);
int o3m_model_parse(const char *s, o3m_model_kind *out);
const char *o3m_algo_name(o3m_algo a);
const char *o3m_model_name(o3m_model_kind m);

/* Validates cfg (errors name the field) and allocates all state. */
int o3m_policy_create(o3m_policy **out, const o3m_policy_config *cfg, o3m_err *e);
void o3m_policy_destroy(o3m_policy *p);
const o3m_policy_config *o3m_policy_config_of(const o3m_policy *p);

/* Chooses among K candidates. X is K x d row-major (row k is the context of
 * candidate k). arms[k] is candidate k's arm index for the disjoint model
 * (0 <= arms[k] < n_arms); NULL means arms[k] = k. Ignored for shared.
 * On success *chosen is the candidate index and, if score is not NULL,
 * *score its score. Errors: O3M_EINVAL for K out of 1..max_candidates or a
 * bad arm index, O3M_ENONFINITE for a non-finite context (or contexts so
 * large that the sum of their magnitudes overflows); the policy state
 * (including the sampler) is unchanged on error. */
int o3m_policy_choose(o3m_policy *p, int K, const double *X, const int *arms, int *chosen,
                     double *score);

/* One round of o3m_policy_choose_batch: the arguments of one
 * o3m_policy_choose call (in) and what it would have given (out). */
typedef struct o3m_policy_round {
  int K;            /* in: candidates (0 refuses the round, as choose does) */
  const double *X;  /* in: K x d row-major, as for choose */
  const int *arms;  /* in: as for choose (disjoint model only) */
  int chosen;       /* out, when rc is 0 */
  double score;     /* out, when rc is 0 */
  int rc;           /* out: what o3m_policy_choose would have returned */
} o3m_policy_round;

/* Most rounds one scoring call of o3m_policy_choose_batch takes; a longer
 * batch is scored in several calls (same decisions). */
#define O3M_POLICY_BATCH_ROUNDS 64

/* Most bytes of candidates (rows x d doubles) one scoring call of
 * o3m_policy_choose_batch takes, so that they stay in a core's cache
 * between their passes; a round larger than that is scored alone. The
 * workspace is sized for it at create (at most this much more than
 * max_candidates needs). */
#define O3M_POLICY_BATCH_BYTES (256 * 1024)

/* Chooses for n rounds against one model state, exactly as n calls of
 * o3m_policy_choose(p, rounds[i].K, rounds[i].X, rounds[i].arms, ...) in
 * the order i = 0..n-1 with no update between them: the same chosen
 * indices, the same scores up to rounding (the batch's BLAS calls may sum
 * in another order; within 1e-12 relative), the same per-round errors, and
 * the same sampler state afterwards (LinTS draws each round's numbers in
 * round order; a refused round draws nothing, and a round that fails after
 * drawing gives its draws back, as choose does). The point is speed: the
 * shared model scores the valid rounds' candidates together, up to
 * O3M_POLICY_BATCH_BYTES of them and O3M_POLICY_BATCH_ROUNDS rounds per
 * call: LinUCB
 * with one dgemv for the means and one dtrmm for all the widths, LinTS
 * with one triangular solve (dtrsm) for every round's mu, then one dgemv
 * per round for its scores (a single dgemm of all candidates against all
 * the rounds' mu would compute n times the scores needed). The disjoint
 * model, whose candidates each read their own arm's inverse, and a batch
 * of one round are chosen round by round. Returns O3M_EINVAL for n < 0 or
 * rounds NULL with n > 0 (nothing done), else O3M_OK: each round's
 * outcome is in its rc. Allocates nothing. */
int o3m_policy_choose_batch(o3m_policy *p, int n, o3m_policy_round *rounds);

/* Per-candidate quantities without sampling, for tests and diagnostics:
 * mean[k] = x_k^T theta and var[k] = x_k^T Lambda^{-1} x_k (the squared LinUCB
 * width before alpha; for LinTS the sampled score's variance is v^2 var[k]).
 * Either output may be NULL. */
int o3m_policy_stats(o3m_policy *p, int K, const double *X, const int *arms, double *mean,
                    double *var);

/* Adds the observation (x, reward) for the given arm (ignored for shared).
 * O3M_EINVAL for a bad arm, O3M_ENONFINITE for a non-finite reward or x, or
 * an x whose x^T x overflows (it would make Lambda infinite); the state
 * is unchanged on error. If the rank-one update finds that definiteness was
 * lost, the update is redone by exact refactorization from Lambda, so no
 * observation is ever dropped. */
int o3m_policy_update(o3m_policy *p, int arm, const double *x, double reward);

/* Checks, without changing what the model has learned, that
 * o3m_policy_update(p, arm, x, reward) would leave the model finite: the
 * reward and x . x finite, x . x below lambda / DBL_EPSILON (a larger x x^T
 * swamps the ridge in rounding, Lambda is then singular in floating point
 * and its exact refactorization fails), Lambda (the health check's exact
 * statistics, see below) and u finite after it, and what the update
 * computes finite too:
 * w = Lambda^{-1} x, the Sherman-Morrison denominator 1 + x^T w (finite and
 * positive), the rank-one term w w^T / (1 + x^T w) and the new theta. So an
 * update it accepts cannot give the health check an O3M_ECORRUPT or a
 * non-finite factor or theta (only a residual above O3M_POLICY_HEALTH_RTOL,
 * which a refactorization repairs, remains possible for an extremely
 * ill-conditioned Lambda). O3M_EINVAL for a bad arm, O3M_ENONFINITE
 * otherwise; *what (may be NULL) gets a static phrase naming the quantity.
 * The AP runs it before a reward is journaled (ap_checkpoint_apply_reward),
 * so a refused reward changes neither the model nor the journal. Costs one
 * product with the factor (O(d^2)); for a LinUCB model it keeps w for the
 * update that follows, which then does not compute it again (bit for bit
 * the same update). */
int o3m_policy_update_check(o3m_policy *p, int arm, const double *x, double reward,
                           const char **what);

/* ||theta|| (shared: the one theta; disjoint: theta of the given arm). */
double o3m_policy_theta_norm(const o3m_policy *p, int arm);

/* Copies theta (d doubles) of the model (shared) or arm (disjoint). */
int o3m_policy_theta(const o3m_policy *p, int arm, double *theta);

/* Number of updates applied so far (all arms). */
uint64_t o3m_policy_updates(const o3m_policy *p);

/* ------------------------------------------------------------------------
 * State export and import, numerical health (for the AP's durability:
 * ap_checkpoint.h, ap_journal.h).
 *
 * The state image is everything that determines the policy's future
 * behaviour, bit for bit: per model Lambda (its stored part and the rows
 * still held for the next block update, see o3m_policy.c), the factor (Ainv
 * or U), u, theta and the updates-since-refactorization counter, plus the
 * update counter and the sampler state. Workspaces are not part of it. Two policies whose
 * images are equal byte for byte make the same decisions and the same
 * updates from then on. The image is little-endian on every host:
 *
 *   off  size  field
 *     0     8  magic "O3MPOLST"
 *     8     4  format version (2)
 *    12     4  header length (120)
 *    16     4  algo (1 linucb, 2 lints)
 *    20     4  model (1 shared, 2 disjoint)
 *    24     4  d
 *    28     4  n_models (1 shared, n_arms disjoint)
 *    32     4  factor kind (0 Ainv, 1 Cholesky factor U)
 *    36     4  refactor_every (informational; not checked at import)
 *    40     8  lambda (IEEE-754 binary64 bit pattern)
 *    48     8  updates
 *    56    32  sampler: xoshiro256** words s[0..3]
 *    88     8  sampler: 1 if a Gaussian is cached, else 0
 *    96     8  sampler: the cached Gaussian (binary64; 0 when none)
 *   104     8  total image length in bytes
 *   112     4  B, rows per Lambda block (16)
 *   116     4  reserved, 0
 *   120        since_refactor: n_models int32
 *              n_held: n_models int32, each 0..B-1
 *              Lambda  n_models x d x d binary64, row-major, whole arrays,
 *                      without the held rows
 *              factor  n_models x d x d binary64 (Ainv or U), as kept in
 *                      memory: the upper triangle of model m holds its
 *                      values, except for disjoint models, whose odd arm
 *                      2q+1 is held in the lower triangle of rows 1..d of
 *                      arm 2q's array (rows 1..d-1 of it, then row 0 of
 *                      arm 2q+1's own; see o3m_policy.c); other entries are
 *                      stale
 *              u       n_models x d binary64
 *              theta   n_models x d binary64
 *              held    n_models x B x d binary64: model m's first n_held[m]
 *                      rows are observations not yet added to Lambda; the
 *                      rest are zero
 *
 * Version 1 (no held rows) is refused: the project has no deployments that
 * wrote it.
 *
 * Import checks the structure (magic, version, lengths, B, counters, sampler)
 * and that algo, model, d, n_models, the factor kind and lambda equal this
 * policy's config; it does NOT check the numbers (non-finite values, a
 * broken factor): run o3m_policy_health_check() afterwards if the source is
 * not trusted. alpha, v, max_candidates, seed and refactor_every come from
 * the policy's own config. */

/* Size in bytes of this policy's state image. */
size_t o3m_policy_state_size(const o3m_policy *p);

/* Writes the image into buf (len >= o3m_policy_state_size()). O3M_EINVAL if
 * len is too small. */
int o3m_policy_state_export(const o3m_policy *p, void *buf, size_t len);

/* Replaces the state with the image in buf[0..len). On any error the state
 * is unchanged: O3M_ECORRUPT for a malformed image (bad magic, version,
 * length, a counter out of range, invalid sampler state), O3M_EDIM for an image of
 * another format version or block size B (another release), or of
 * a differently configured policy (the message names the field). */
int o3m_policy_state_import(o3m_policy *p, const void *buf, size_t len, o3m_err *e);

/* Streaming forms of export and import for large states (a disjoint model
 * with many arms): the image is handed to sink, or taken from src, in
 * pieces, so no second copy of the state is ever held. A sink or source
 * returns 0 or a negative code, which aborts the call and is returned; a
 * source must deliver exactly len bytes or fail. o3m_policy_state_save
 * allocates nothing. o3m_policy_state_load checks the header before it
 * touches anything (errors as for import, state unchanged); once the arrays
 * are being read, a failing source (or a corrupt counter found after) leaves
 * the state unspecified: reset it with o3m_policy_reset() or load again. */
typedef int (*o3m_policy_sink)(void *ctx, const void *buf, size_t len);
typedef int (*o3m_policy_source)(void *ctx, void *buf, size_t len);
int o3m_policy_state_save(const o3m_policy *p, o3m_policy_sink sink, void *ctx);
int o3m_policy_state_load(o3m_policy *p, o3m_policy_source src, void *ctx, o3m_err *e);

/* Puts the policy back into the state o3m_policy_create() produced (Lambda =
 * lambda I, u = theta = 0, counters 0, sampler reseeded from cfg.seed); the
 * image is then equal to a new policy's. O3M_ENOMEM only if the temporary
 * sampler used for reseeding cannot be allocated; the state is then reset
 * except for the sampler. */
int o3m_policy_reset(o3m_policy *p);

/* Number of models: 1 for shared, n_arms for disjoint. */
int o3m_policy_n_models(const o3m_policy *p);

/* What o3m_policy_health_check() found. */
typedef struct o3m_policy_health {
  int model;           /* first unhealthy model, -1 when all are healthy */
  int n_bad;           /* number of unhealthy models */
  int code;            /* the worst finding (see the return value) */
  const char *what;    /* the first finding, a static phrase, "" if none */
  double max_residual; /* the largest relative residual seen (below) */
} o3m_policy_health;

/* Relative residual above which a factor or theta counts as broken. Rounding
 * of a correct factor gives about cond(Lambda) * 1e-16; a false alarm only
 * costs an extra refactorization. */
#define O3M_POLICY_HEALTH_RTOL 1e-6
/* Flag for o3m_policy_health_check: also factorize every Lambda (O(d^3) per
 * model, and one d x d scratch allocation per call). */
#define O3M_POLICY_HEALTH_DEEP 1

/* Checks every model without changing the state (only workspaces are
 * written, so not on a const policy). Lambda means the whole of it, held
 * rows included. Per model, in O(d^2):
 *   - Lambda (upper triangle and held rows) and u are finite and
 *     diag(Lambda) >= lambda (both hold exactly by construction: sums of
 *     nonnegative terms);
 *   - the factor (upper triangle) and theta are finite, its diagonal is
 *     positive;
 *   - the factor agrees with Lambda on a fixed probe vector p:
 *     ||Lambda Ainv p - p|| / ||p||, or ||U^T U p - Lambda p|| / ||Lambda p||,
 *     and theta with u: ||Lambda theta - u|| / max(||u||, ||Lambda theta||),
 *     each at most O3M_POLICY_HEALTH_RTOL;
 *   - with O3M_POLICY_HEALTH_DEEP, the Cholesky factorization of Lambda
 *     succeeds.
 * Returns O3M_OK when healthy; otherwise the worst finding: O3M_ECORRUPT when
 * Lambda or u is damaged (not repairable in memory: recover from the
 * checkpoint and journal), O3M_ENONFINITE for a non-finite factor or theta,
 * O3M_ENOTPD for a factor that lost definiteness or disagrees with Lambda
 * (both repairable by o3m_policy_refactor). O3M_ENOMEM if the deep check
 * cannot allocate. h may be NULL. */
int o3m_policy_health_check(o3m_policy *p, int flags, o3m_policy_health *h);

/* Recomputes the factor and theta of one model (model = arm for disjoint, 0
 * for shared) or of all models (model = -1) exactly from Lambda and u, which
 * are exact sums of the acknowledged observations, so nothing learned is
 * lost; the model's since-refactor counter restarts at 0, as with the
 * periodic refactorization. The result depends only on Lambda and u, never
 * on the old factor. O3M_EINVAL for a bad model index; O3M_ECORRUPT (nothing
 * changed) if Lambda or u of a target model is non-finite or a diagonal
 * entry of Lambda is below lambda (the health check's conditions); O3M_ENOTPD if a
 * Lambda is not positive definite (that model's factor is then unspecified:
 * recover from disk). */
int o3m_policy_refactor(o3m_policy *p, int model);

#endif
