/* eval_masker.h -- the federation's arithmetic, in one process.
 *
 * For offline runs (simulate, regret, replay, cost) the passive participants
 * and the active participant's summation are played in-process: one mask Q
 * is drawn, cut into the parties' column blocks, and each round every party's
 * columns of the K contexts are masked with o3m_block_apply (the routine the
 * passive participant daemon runs) and summed into Q x, as the AP does. */
#ifndef EVAL_MASKER_H
#define EVAL_MASKER_H

#include <stdint.h>

#include "o3m_error.h"
#include "o3m_mask.h"

typedef struct eval_masker eval_masker;

/* Draws the mask for partition part, for rounds of up to K candidates. With
 * have_seed the mask comes from a seeded generator (reproducible, tests and
 * evaluation only); otherwise from the OS CSPRNG. */
int eval_masker_create(eval_masker **out, const o3m_partition *part, int K, int have_seed,
                       uint64_t seed, o3m_err *e);
void eval_masker_destroy(eval_masker *m);

/* Returns sum_j Q^j x^j for each of the K rows of X (K x d): a K x d matrix
 * owned by the masker, valid until the next call. */
const double *eval_masker_apply(eval_masker *m, int K, const double *X);

#endif
