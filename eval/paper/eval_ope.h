/* eval_ope.h -- off-policy estimators of a frozen policy's value on a
 * logged bandit data set, beside replay: IPW, self-normalized IPW, the
 * direct method and doubly robust (the definitions of Open Bandit Pipeline,
 * st-tech/zr-obp, obp/ope/estimators.py), each with a confidence interval.
 *
 * The log gives, per row i, the context x_i, the logged arm a_i, its
 * reward r_i and the logging policy's propensity p_i = pi_b(a_i | x_i).
 * The evaluated policy pi is frozen (it learns nothing while evaluated). With
 * w_i = pi(a_i | x_i) / p_i, qhat a reward model, qlog_i = qhat(x_i, a_i)
 * and qpi_i = sum_a pi(a | x_i) qhat(x_i, a), over n rows:
 *
 *   replay  V = mean of r_i over the rows where pi chose a_i (Li et al.)
 *   IPW     V = (1/n) sum w_i r_i
 *   SNIPW   V = sum w_i r_i / sum w_i
 *   DM      V = (1/n) sum qpi_i
 *   DR      V = (1/n) sum [qpi_i + w_i (r_i - qlog_i)]
 *
 * Confidence intervals are normal approximations V +- z se (z = 1.96 for
 * 95%), se being the sample standard deviation (n - 1 denominator) of the
 * estimator's per-row terms over sqrt(n): the terms are w_i r_i (IPW),
 * qpi_i (DM), qpi_i + w_i (r_i - qlog_i) (DR), the matched rewards
 * (replay, over the m matched rows), and for SNIPW, a ratio, the
 * delta-method terms w_i (r_i - V) / wbar (wbar = mean w_i), whose mean is
 * 0, so se^2 = sum w_i^2 (r_i - V)^2 / (wbar^2 n (n - 1)). obp's own
 * intervals are bootstrap intervals; the normal ones are closed form,
 * streamable and exactly checkable by hand (tests/test_ope.c), and are
 * close to the bootstrap when n w_i r_i has many non-zero terms; with few
 * clicks they are optimistic, so the count of rows that contribute is
 * printed beside them.
 *
 * Policies. The evaluated policy is deterministic here (LinUCB, greedy =
 * LinUCB with alpha 0): pi(a | x) is 1 for its choice, 0 otherwise, so w_i
 * = [choice_i = a_i] / p_i. For LinTS, whose action distribution is known
 * only by sampling, each row uses ONE sample of the frozen posterior: the
 * estimators stay unbiased (the expectation over the sample gives
 * pi(a_i | x_i)), with more variance than the exact probabilities would
 * give. The accumulator below takes the general pi(a_i | x_i) and qpi_i, so
 * a caller with exact probabilities can pass them.
 *
 * The accumulator holds running sums only (O(1) memory whatever n) and is
 * plain data: init, add rows, finish. */
#ifndef EVAL_OPE_H
#define EVAL_OPE_H

#include <stdio.h>

#include "eval_reader.h"
#include "o3m_error.h"
#include "o3m_policy.h"

typedef enum {
  EVAL_OPE_REPLAY = 0,
  EVAL_OPE_IPW = 1,
  EVAL_OPE_SNIPW = 2,
  EVAL_OPE_DM = 3,
  EVAL_OPE_DR = 4,
  EVAL_OPE_N = 5
} eval_ope_kind;

/* "replay", "ipw", "snipw", "dm", "dr". */
const char *eval_ope_name(eval_ope_kind k);

/* Weighted sums of one estimator's per-row terms t, shifted by the first
 * term (so that constant terms give a variance of exactly 0): w = sum of
 * weights, s = sum weight (t - shift), s2 = sum weight (t - shift)^2. */
typedef struct eval_ope_moments {
  double shift, w, s, s2;
} eval_ope_moments;

/* Running sums over the evaluated rows (callers do not touch the fields). */
typedef struct eval_ope_acc {
  long long n, m;          /* rows; rows with pi(a_i | x_i) > 0 */
  long long k;             /* rows with pi(a_i | x_i) > 0 and r_i != 0 */
  double sw, sw2;          /* sum w, sum w^2 (SNIPW) */
  double swr, sw2r, sw2r2; /* sum w r, sum w^2 r, sum w^2 r^2 (SNIPW) */
  eval_ope_moments replay; /* r, weighted by pi(a_i | x_i) */
  eval_ope_moments ipw;    /* w r */
  eval_ope_moments dm;     /* qpi */
  eval_ope_moments dr;     /* qpi + w (r - qlog) */
  eval_ope_moments logged; /* r (the logging policy's own value) */
} eval_ope_acc;

void eval_ope_acc_init(eval_ope_acc *a);

/* Adds one row: pi_logged = pi(a_i | x_i) in [0, 1], pscore = p_i in
 * (0, 1], the reward, qlog = qhat(x_i, a_i), qpi = sum_a pi(a | x_i)
 * qhat(x_i, a). O3M_ERANGE (the accumulator unchanged) for a pscore outside
 * (0, 1], a pi_logged outside [0, 1] or a non-finite argument. */
int eval_ope_acc_add(eval_ope_acc *a, double pi_logged, double pscore, double reward,
                     double qlog, double qpi);

/* One estimate: the value, its standard error, the interval value +- z se
 * and the number of rows it rests on (n, or m for replay). value is NaN
 * when it is undefined (no rows; SNIPW or replay without a matched row);
 * se, lo and hi are NaN with fewer than two such rows. */
typedef struct eval_ope_estimate {
  double value, se, lo, hi;
  long long rows;
} eval_ope_estimate;

/* The five estimates (indexed by eval_ope_kind) with interval half-width z
 * se, and the logging policy's on-policy value (mean r, same interval) in
 * *logged if not NULL. */
void eval_ope_finish(const eval_ope_acc *a, double z, eval_ope_estimate out[EVAL_OPE_N],
                     eval_ope_estimate *logged);

/* ---- a frozen learner on a log ---- */

typedef struct eval_ope_config {
  o3m_policy_config policy; /* the evaluated learner (d, n_arms set by the run) */
  long long train;          /* training prefix in events (>= 1) */
  long long limit;          /* events evaluated after it; 0 = to the end */
  double reward_lambda;     /* ridge of the per-arm reward model, > 0 */
  double z;                 /* interval quantile (1.959963984540054: 95%) */
  const char *state_in;     /* a saved policy (eval_ope_state_write): the
                               policy is not trained on the prefix */
  const char *state_out;    /* where to save the frozen policy, or NULL */
  int uniform_logging;      /* the log comes from a uniformly random policy:
                               p = 1/K on rows without a propensity score
                               (news10k); 0: such rows are an error */
} eval_ope_config;

void eval_ope_config_default(eval_ope_config *c);

typedef struct eval_ope_result {
  long long train_events, eval_events, matched;
  long long matched_nonzero; /* matched events with a non-zero reward: the
                                only ones IPW and SNIPW see */
  long long first_line, last_line; /* of the evaluated events */
  eval_ope_estimate est[EVAL_OPE_N];
  eval_ope_estimate logged;
  double seconds;
} eval_ope_result;

/* Runs the whole evaluation on the reader's events, which must carry
 * propensity scores (format obd) unless cfg->uniform_logging: the first
 * cfg->train events train both the policy (o3m_policy_update with the
 * logged arm's context and reward, on every row: a ridge fit of the logged
 * data; not with cfg->state_in) and the reward model (a disjoint
 * o3m_policy, alpha 0: per-arm ridge regression, qhat(x, a) = x^T theta_a,
 * unclipped); the policy is then frozen and every following event (up to
 * cfg->limit) is added to the estimators. The reader's events must give X
 * (eval_reader_fill_matrix is switched on). Errors name the line
 * (a missing propensity score, a policy failure) or the problem (a log
 * shorter than the training prefix plus one event). */
int eval_ope_run(eval_reader *rd, const eval_ope_config *cfg, eval_ope_result *res,
                 o3m_err *e);

/* Writes res as a table (estimator, value, se, interval, rows), with a
 * warning when fewer than 10 matched events have a non-zero reward (the
 * normal intervals of replay, IPW and SNIPW then mean little: with none
 * they are [0, 0]). */
void eval_ope_print(FILE *f, const eval_ope_result *res);

/* Saves p's state image to path / replaces p's state with the image at path
 * (o3m_policy_state_export / import; p's config must match the image's,
 * errors name the file and the field). */
int eval_ope_state_write(const o3m_policy *p, const char *path, o3m_err *e);
int eval_ope_state_read(o3m_policy *p, const char *path, o3m_err *e);

#endif
