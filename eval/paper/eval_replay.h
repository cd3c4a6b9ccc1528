/* eval_replay.h -- Li et al.'s replay estimator over logged data, with the
 * federated, central and partial-local learners side by side.
 *
 * Replay (Li, Chu, Langford, Wang, WSDM 2011): stream the logged events; a
 * learner is asked to choose among the K arms given the event's contexts; if
 * it picks the arm the logging policy played, the event "matches": the
 * learner earns the logged reward and is updated with (its chosen context,
 * reward); otherwise the event is ignored for that learner. With a uniformly
 * random logging policy the CTR over matched events is an unbiased estimate
 * of the learner's online CTR.
 *
 * Variants, all fed the same events in one pass:
 *   central    one policy on the full context x (K x d).
 *   federated  the context's columns split across M parties (part); every
 *              party's block masked with its block Q^j of ONE mask Q drawn
 *              from a seeded generator, summed (eval_masker: the routine the
 *              passive participants run), and one policy on Q x. Decisions
 *              must equal central's (Theorem 4.1); the agreement is counted.
 *   partial    the active participant alone: its own columns only (the
 *              first party's d_1 columns).
 *   random     a uniformly random choice, n_random independent seeds; the
 *              baseline of relative CTR = CTR / CTR_random.
 *   dp eps     (n_dp of them, none by default) the full context, but every
 *              party other than the first releases its columns through the
 *              Gaussian mechanism of eval/peers/dp/bl_dp.h on every event:
 *              rows clipped to dp_clip, sigma calibrated so that dp_T events
 *              together are (eps, dp_delta)-DP per party (zCDP). The learner
 *              chooses and updates on the released contexts. Seeded noise
 *              (reproducible, not private). Runs on the calling thread.
 *
 * With cfg->whiten the chosen parties whiten their columns (eval_whiten.h):
 * every learner, central included, sees the whitened contexts, so the
 * federated decisions must equal the central ones on those.
 *
 * For readers with an additive split (x_a = w + c_a, eval_reader.h) the
 * federated variant masks the c_a once at start and w once per event, then
 * adds: Q x_a = Q w + Q c_a (masking is linear). Same routine, same result up
 * to rounding, K times less masking work per event.
 *
 * With threads = 2 the central and partial learners run on a second thread
 * over batches of events while the calling thread parses and runs the
 * federated learner and the random baselines; results are identical to
 * threads = 1. */
#ifndef EVAL_REPLAY_H
#define EVAL_REPLAY_H

#include <stdint.h>
#include <stdio.h>

#include "o3m_policy.h"
#include "eval_reader.h"
#include "eval_whiten.h"
#include "o3m_error.h"
#include "o3m_mask.h"

#define EVAL_REPLAY_MAX_RANDOM 32
#define EVAL_REPLAY_MAX_DP 4

enum {
  EVAL_REPLAY_CENTRAL = 1,
  EVAL_REPLAY_FEDERATED = 2,
  EVAL_REPLAY_PARTIAL = 4,
  EVAL_REPLAY_ALL = 7
};

typedef struct eval_replay_config {
  /* algo, model, lambda, alpha, v, seed, refactor_every; d, n_arms and
   * max_candidates are set per variant by the replay. */
  o3m_policy_config policy;
  o3m_partition part;  /* split of the reader's d columns (part.d == d) */
  uint64_t mask_seed;  /* seeds the one mask (reproducible: evaluation only) */
  int aggregation;     /* eval_aggregation of the federated learner (default secure) */
  uint64_t random_seed; /* random policy s uses random_seed + s */
  int n_random;        /* 1..EVAL_REPLAY_MAX_RANDOM; the paper uses 5 */
  int variants;        /* EVAL_REPLAY_* bits; random always runs */
  long long limit;     /* stop after this many events; <= 0: all */
  int progress;        /* 1: a progress line on stderr */
  int threads;         /* 1 or 2 */
  /* Borrowed, NULL: no party whitens. The chosen parties' columns of every
   * context are whitened before any learner sees them (eval_whiten.h);
   * rewards are the logged ones. Used by the calling thread only. */
  eval_whiten *whiten;
  int n_dp;                          /* DP variants, 0..EVAL_REPLAY_MAX_DP */
  double dp_eps[EVAL_REPLAY_MAX_DP]; /* each > 0, the budget over dp_T events */
  double dp_delta;                   /* (1e-5) */
  double dp_clip;                    /* L2 bound of a row of a party's block (1) */
  long long dp_T;                    /* events the budget covers (>= 1 with n_dp) */
  uint64_t dp_seed;                  /* seeds the DP noise (reproducible: evaluation only) */
} eval_replay_config;

/* Most context rows (events x arms) `o3m-eval replay --whiten` reads, from
 * the start of the file, to estimate the whitening maps. */
#define EVAL_REPLAY_WHITEN_ROWS 100000

/* Defaults: policy defaults, no partition (must be set), mask_seed 7,
 * random_seed 1000, n_random 5, all variants, no limit, no progress, 1
 * thread, no DP variant (delta 1e-5, clip 1, dp_seed 11 once some are asked
 * for; dp_T must be set). */
void eval_replay_config_default(eval_replay_config *c);

typedef struct eval_replay_tally {
  uint64_t matched; /* events whose logged arm the learner chose */
  double clicks;    /* sum of their rewards */
} eval_replay_tally;

/* Most points of the CTR-over-rows curve. The pass keeps a point every
 * `stride` rows at batch ends, stride starting at 256; when the curve is
 * full every other point is dropped and the stride doubles, so a run of any
 * length keeps between half and all of EVAL_REPLAY_CURVE_MAX evenly spaced
 * points, plus the last row. */
#define EVAL_REPLAY_CURVE_MAX 256

/* The tallies after the first `events` rows; random is summed over the
 * random seeds (its CTR is the pooled one); dp[i] is the DP variant i's
 * (the first n_dp of them are set). */
typedef struct eval_replay_point {
  uint64_t events;
  eval_replay_tally central, federated, partial, random;
  eval_replay_tally dp[EVAL_REPLAY_MAX_DP];
} eval_replay_point;

typedef struct eval_replay_result {
  uint64_t events;  /* events read (after the reader's skips) */
  uint64_t skipped; /* rows the reader skipped */
  uint64_t agree;   /* events where federated chose what central chose */
  int variants;
  int K, d, partial_d;
  eval_replay_tally central, federated, partial;
  int n_random;
  eval_replay_tally random[EVAL_REPLAY_MAX_RANDOM];
  int n_dp;
  double dp_eps[EVAL_REPLAY_MAX_DP], dp_sigma[EVAL_REPLAY_MAX_DP]; /* sigma per entry */
  eval_replay_tally dp[EVAL_REPLAY_MAX_DP];
  double seconds;   /* wall time of the pass */
  /* CPU time (user + system) of the calling thread and of the second thread
   * (0 with threads = 1); on an idle machine the wall time approaches the
   * larger of the two. */
  double cpu_main, cpu_worker;
  int n_curve; /* points in curve, the last at `events` rows */
  eval_replay_point curve[EVAL_REPLAY_CURVE_MAX];
} eval_replay_result;

/* Runs the replay over every event of rd (or cfg->limit of them). res is
 * filled even when an error stops the pass part way (with what was done).
 * Errors: the reader's (naming the line), policy failures, bad config. */
int eval_replay_run(eval_reader *rd, const eval_replay_config *cfg, eval_replay_result *res,
                    o3m_err *e);

/* The whitening maps of the parties spec names (eval_whiten_parse), from
 * the contexts of rd's first events (rd is read, so pass a second reader of
 * the same file): at most EVAL_REPLAY_WHITEN_ROWS rows, and no event beyond
 * limit (> 0). *out stays NULL when spec names no party; free it with
 * eval_whiten_destroy after the replay. Errors: O3M_EINVAL for a bad spec,
 * the reader's, O3M_ENOMEM. */
int eval_replay_whiten_calibrate(eval_reader *rd, const o3m_partition *part, const char *spec,
                                 long long limit, eval_whiten **out, o3m_err *e);

/* clicks / matched; NaN when nothing matched. */
double eval_replay_ctr(const eval_replay_tally *t);

/* Relative CTR of t against the random runs of res: rel = CTR / mean over
 * seeds of CTR_random; and over the seeds s the spread of CTR / CTR_random_s:
 * mean, sample std, min, max. NaN where undefined (no match, zero random
 * CTR). */
typedef struct eval_replay_rel {
  double rel, mean, std, min, max;
} eval_replay_rel;
void eval_replay_relative(const eval_replay_result *res, const eval_replay_tally *t,
                          eval_replay_rel *out);

/* The random baseline's row: matched rows and clicks averaged over the
 * seeds, *ctr the mean of the seeds' CTRs, and in out the spread of each
 * seed's CTR / *ctr (out->rel is 1, or NaN when *ctr is not positive). */
void eval_replay_random_summary(const eval_replay_result *res, double *matched, double *clicks,
                                double *ctr, eval_replay_rel *out);

/* The summary table (one line per variant, agreement, throughput). */
void eval_replay_print(FILE *f, const eval_replay_result *res);

#endif
