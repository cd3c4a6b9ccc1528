/* eval_masker.h -- the federation's arithmetic, in one process.
 *
 * For offline runs (simulate, regret, replay, cost) the passive participants
 * and the active participant's summation are played in-process: one mask Q
 * is drawn, cut into the parties' column blocks, and each round every party's
 * columns of the K contexts are masked with o3m_block_apply (the routine the
 * passive participant daemon runs) and summed into Q x, as the AP does.
 *
 * Two aggregation modes, as the daemons' [federation] aggregation:
 *  - EVAL_AGG_PER_PARTY: the parts are added as doubles (the paper's
 *    protocol);
 *  - EVAL_AGG_SECURE (the daemons' default): every passive party's part is
 *    encoded in fixed point and masked with real pairwise masks
 *    (crypto/o3m_secagg.h, keys drawn in memory, a fresh nonce per round),
 *    their words are summed in Z/2^64 and decoded once, then added to the
 *    active party's part: the arithmetic of o3m-active with o3m-passive
 *    daemons whose max_norm is the default (O3M_CONFIG_DEFAULT_MAX_NORM),
 *    so that offline runs see exactly the sums the daemons would. */
#ifndef EVAL_MASKER_H
#define EVAL_MASKER_H

#include <stdint.h>

#include "o3m_error.h"
#include "o3m_mask.h"

typedef enum eval_aggregation { EVAL_AGG_SECURE = 0, EVAL_AGG_PER_PARTY = 1 } eval_aggregation;

/* "secure" or "per-party" into *out: 0, or O3M_EINVAL. */
int eval_aggregation_parse(const char *s, eval_aggregation *out);
const char *eval_aggregation_name(eval_aggregation a);

typedef struct eval_masker eval_masker;

/* Draws the mask for partition part, for rounds of up to K candidates, with
 * aggregation agg. With have_seed the mask comes from a seeded generator
 * (reproducible, tests and evaluation only); otherwise from the OS CSPRNG.
 * The secure mode's keys come from the OS whatever the seed: the masks
 * cancel exactly, so the sums do not depend on them. */
int eval_masker_create(eval_masker **out, const o3m_partition *part, int K, int have_seed,
                       uint64_t seed, eval_aggregation agg, o3m_err *e);
void eval_masker_destroy(eval_masker *m);

/* Returns sum_j Q^j x^j for each of the K rows of X (K x d): a K x d matrix
 * owned by the masker, valid until the next call. NULL only in secure mode
 * for a part too large to encode (a value of 2 B or more, B the sum of the
 * passive parties' bounds: far above what a daemon accepts). */
const double *eval_masker_apply(eval_masker *m, int K, const double *X);

#endif
