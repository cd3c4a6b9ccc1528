/* p2b_sim.h -- P2B's experiment: cold local agents, warm agents from the
 * shuffled (private) data, and agents warmed by a non-private central model.
 *
 * An environment hands out interactions: a context x (d values) and, for
 * each arm, a reward. Two kinds, as in the paper's section 5:
 *   - data set: a pool of n rows, each a context and the logged label arm;
 *     the reward of arm a is 1 if a is the label (the Criteo task of P2B 5.3
 *     and O3M D.3: the category match on clicked rows, accuracy = the mean
 *     reward). An agent draws its t rows uniformly from the pool.
 *   - synthetic (P2B 5.1): x a random context summing to 1 and arm a pays
 *     1 with probability clamp(beta (F_a(x) + sigma z), 0, 1), z ~ N(0, 1),
 *     W fixed (Glorot-uniform W, zero b, TensorFlow's default initializer).
 *     Two choices the paper's text and its artifact disagree on are fields
 *     of the environment (see docs/evaluation/p2b.md for the figures):
 *       map: F = softmax(W x + b), the paper's equation 4, or F = W x + b,
 *         the artifact's linear Dense layer that produced its figures (a
 *         negative F then pays nothing, so arms differ by far more);
 *       ctx: x uniform on the grid of tenths summing to 1 (the encoder's
 *         grid, section 3.2), or d uniform values scaled to sum 1 (the
 *         artifact's make_hists).
 *     The paper writes beta F_a + z with variance 0.01; its artifact scales
 *     noise of sd 0.01 with beta, as sigma does here.
 *
 * The run: users agents, the first train_frac of them participants, the
 * rest tested. Every agent is a disjoint LinUCB (alpha, ridge 1) over the
 * arms that interacts t times. A participant, after its t interactions,
 * elects with probability p to share one of them: with probability
 * neg_share (the artifact's 5%) a reward-0 one, otherwise a rewarded one (a
 * reward-0 one if it has none), drawn uniformly (P2B's artifact,
 * ExperimentWithSampling). The shared context is encoded with the k-means
 * encoder (k codes, trained on contexts from the environment) and the tuple
 * goes through the shuffler (threshold l); the server trains a LinUCB on the
 * released tuples, each code standing for its centroid. The non-private
 * central agent is trained on the same shared tuples with their raw
 * contexts and no threshold (the paper's "warm and non-private").
 * Test agents then interact t times each, with the same draws in all three
 * settings: cold (fresh model, raw contexts), warm private (the server's
 * model, contexts replaced by their code's centroid, as P2B's private agents
 * act on codes) and warm non-private (the central model, raw contexts). With
 * warm_shared 0 every test agent starts from a copy of the server's model
 * and keeps what it learns to itself (the paper's text: a new agent starts
 * from the server's model and adapts it to its own user); with warm_shared 1 the warm
 * settings are each one agent that goes on learning from one test user to
 * the next (the artifact passes the same LinUCB object to every late user),
 * so the late users' own interactions warm it too. Cold agents are fresh
 * for every user in both. The result is each setting's mean reward over the
 * test interactions. */
#ifndef P2B_SIM_H
#define P2B_SIM_H

#include <stdint.h>

#include "o3m_error.h"

/* The synthetic preference map and context generator (see above). */
typedef enum { P2B_MAP_LINEAR, P2B_MAP_SOFTMAX } p2b_map;
typedef enum { P2B_CTX_UNIFORM, P2B_CTX_GRID } p2b_ctx;

typedef struct p2b_env {
  int d, n_arms;
  /* Data set mode (label != NULL): n_pool rows, X is n_pool x d. */
  long n_pool;
  const double *X;
  const int *label;
  /* Synthetic mode (label == NULL): scale beta and noise sd sigma; W and b
   * are drawn from seed by p2b_sim_run; map and ctx as above. */
  double beta, sigma;
  p2b_map map;
  p2b_ctx ctx;
} p2b_env;

typedef struct p2b_config {
  int users;        /* agents, >= 2 */
  int t;            /* interactions per agent, >= 1 */
  int k;            /* k-means codes */
  int kmeans_iters; /* Lloyd iterations */
  long kmeans_points; /* synthetic mode: contexts the encoder is trained on */
  int l;            /* shuffler threshold */
  double p;         /* participation probability, in (0, 1) */
  double neg_share; /* probability a reward-0 tuple is kept */
  double train_frac;
  double alpha;     /* LinUCB width */
  int warm_shared;  /* 1: each warm setting is one agent learning across test users */
  uint64_t seed;
} p2b_config;

typedef struct p2b_result {
  double cold, warm_private, warm_central; /* mean test reward */
  long test_interactions;
  long participants, shared, released, dropped; /* tuples through the shuffler */
  long central_updates;
  double epsilon;
} p2b_result;

/* P2B's context preparation (the artifact's normalize-and-bound): x is
 * scaled to sum 1 (a zero or non-finite x becomes uniform 1/d) and rounded
 * to q = 1 decimal by largest remainders, so it still sums to 1 and lies on
 * the grid the encoder is built for. d must be in 1..P2B_MAX_D, else
 * O3M_EINVAL and x is unchanged. */
#define P2B_MAX_D 64
int p2b_normalize_q1(int d, double *x);

/* The paper's settings: users 1000, t 10, k 1024, 20 iterations on 20000
 * points, l 10, p 0.5, neg_share 0.05, train_frac 0.7, alpha 1, seed 1,
 * warm_shared 0. */
void p2b_config_default(p2b_config *c);

/* Runs the experiment. Errors (O3M_EINVAL naming the field, O3M_ENOMEM, a
 * k larger than the points to train on) leave *res untouched. */
int p2b_sim_run(const p2b_env *env, const p2b_config *cfg, p2b_result *res, o3m_err *e);

#endif
