/* policy_env.h -- test-only: the paper's synthetic bandit rounds and their
 * masked form, for test_policy without linking eval/.
 *
 * Each round draws K l2-normalized Gaussian contexts; theta*, drawn once, is
 * l2-normalized too; the reward of candidate a is x_a^T theta* plus Gaussian
 * noise of the given variance (the paper's section 5.1). The mask Q is drawn
 * from its own seeded generator and cut into the partition's column blocks;
 * masking a round sums every party's Q^j x^j with o3m_block_apply, the
 * routine the passive participants run. The streams are those of
 * eval_synth and eval_masker with the same seeds, so the test's numbers did
 * not move when it stopped linking them. */
#ifndef POLICY_ENV_H
#define POLICY_ENV_H

#include <stdint.h>

typedef struct policy_env policy_env;

/* d-dimensional rounds of K candidates; partition is a list of dims such as
 * "20,20,20,20,20" summing to d. Returns 0 or a negative O3M code. */
int policy_env_create(policy_env **out, int d, int K, double noise_var, uint64_t seed,
                      const char *partition, uint64_t mask_seed);
void policy_env_destroy(policy_env *env);

/* Draws the next round: X (K x d), expected[a] = x_a^T theta*, reward[a] =
 * expected[a] + noise. Returns 0 or a negative O3M code. */
int policy_env_round(policy_env *env, double *X, double *expected, double *reward);

/* Q x for each of the K rows of X: a K x d matrix owned by env, valid until
 * the next call. */
const double *policy_env_mask(policy_env *env, const double *X);

#endif
