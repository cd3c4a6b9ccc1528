/* eval_cost.h -- the parts of `o3m-eval cost` (eval_cost.c) that tests call
 * directly: how appendix C.3's table is computed from its timings.
 *
 * C.3 times three nested pipelines: mask+sum (every party masks its block,
 * the AP sums), +stats (the same, then the AP's K statistics) and a round
 * (the same mask+sum, then choose and update; choose computes those
 * statistics and more). Timed one after the other, each for its own half
 * second, background load that differed between the three periods could
 * make a part cost more than the whole (a `--T 500` run printed +stats
 * 1.48 ms above a round's 1.19 ms). So every repetition now times the three
 * together, back to back on the same masked candidates: mask a_j, the
 * statistics b_j, choose + update c_j; and the table reports
 *   mask+sum = median(a_j), +stats = median(a_j + b_j), round = median(a_j + c_j).
 * The mask time is shared and the medians are of paired sums, so whenever
 * the part is below the whole in each repetition (c_j >= b_j, which holds
 * but for noise within one repetition, since choose does b_j's work) the
 * medians keep that order: an order statistic is monotone in its inputs.
 * Pure functions; nothing is allocated. */
#ifndef EVAL_COST_H
#define EVAL_COST_H

#include "o3m_error.h"

/* One C.3 row's timings, seconds per repetition. */
typedef struct eval_cost_c3_times {
  double mask_sum;   /* median of a_j */
  double mask_stats; /* median of a_j + b_j */
  double round;      /* median of a_j + c_j */
  double inverted;   /* fraction of repetitions with c_j < b_j (noise) */
  long reps;
} eval_cost_c3_times;

/* Summarizes n >= 1 repetitions as described above. a, b and c are the
 * repetitions' mask, statistics and choose+update seconds; scratch holds n
 * doubles (overwritten). O3M_EINVAL for n < 1. */
int eval_cost_c3_summarize(long n, const double *a, const double *b, const double *c,
                           double *scratch, eval_cost_c3_times *out);

/* The median of n >= 1 values, sorting x in place (the mean of the two
 * middle values for even n). */
double eval_cost_median(double *x, long n);

#endif
