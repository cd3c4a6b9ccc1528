/* eval_synth.h -- the paper's synthetic bandit environment (section 5.1).
 *
 * Each round draws K contexts x_a ~ N(0, sigma_x^2 I), each l2-normalized;
 * theta* ~ N(0, sigma_theta^2 I), l2-normalized, is drawn once; the reward of
 * arm a is r = x_a^T theta* + eps with eps ~ N(0, sigma_eps^2). The paper's
 * constants are variances of 0.05 for all three (the normalization makes the
 * first two irrelevant). Regret uses the expected rewards x_a^T theta*. */
#ifndef EVAL_SYNTH_H
#define EVAL_SYNTH_H

#include <stdint.h>

typedef struct eval_synth eval_synth;

typedef struct eval_synth_config {
  int d;
  int K;
  double noise_var; /* paper: 0.05 */
  uint64_t seed;
} eval_synth_config;

int eval_synth_create(eval_synth **out, const eval_synth_config *c);
void eval_synth_destroy(eval_synth *s);

/* Draws the next round: X (K x d), expected[a] = x_a^T theta*, reward[a] =
 * expected[a] + noise. Any of expected/reward may be NULL (the draws are
 * made either way, so the stream does not depend on what is asked). */
int eval_synth_round(eval_synth *s, double *X, double *expected, double *reward);

/* theta*, d doubles owned by s. */
const double *eval_synth_theta_star(const eval_synth *s);

#endif
