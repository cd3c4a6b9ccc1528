/* crash_child.h -- the reward stream shared by the crash test
 * (test_checkpoint.c) and its child process (crash_child.c).
 *
 * Reward number id (1, 2, 3, ...) is a pure function of id, so the parent
 * can rebuild exactly what the child applied from the count alone: the
 * "clean in-process replay" that the recovered model is compared with. The
 * policy configuration is fixed here for the same reason; refactor_every is
 * small so that periodic refactorizations happen during replays too. */
#ifndef CRASH_CHILD_H
#define CRASH_CHILD_H

#include <stdint.h>
#include <string.h>

#include "o3m_policy.h"

#define CRASH_MASK_ID 0x0123c0ffee4567ULL

static inline uint64_t crash_mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/* Reward `id`: a context in (-1, 1)^d, an arm and a 0/1 reward. */
static inline void crash_reward(uint64_t id, int d, int n_arms, int *arm, double *x,
                                double *reward) {
  uint64_t s = crash_mix(id);
  for (int i = 0; i < d; i++)
    x[i] = (double)(crash_mix(s + (uint64_t)i) >> 11) * (2.0 / 9007199254740992.0) - 1.0;
  *arm = (int)(crash_mix(s ^ 0xa5a5a5a5ULL) % (uint64_t)n_arms);
  *reward = (crash_mix(s ^ 0x5a5a5a5aULL) >> 11) % 10 < 3 ? 1.0 : 0.0;
}

/* kind 0: disjoint lints (Ainv per arm); kind 1: shared lints (Cholesky
 * factor); kind 2: shared linucb. */
static inline void crash_config(o3m_policy_config *c, int kind) {
  o3m_policy_config_default(c);
  c->algo = kind == 2 ? O3M_ALGO_LINUCB : O3M_ALGO_LINTS;
  c->model = kind == 0 ? O3M_MODEL_DISJOINT : O3M_MODEL_SHARED;
  c->d = 24;
  c->n_arms = 40;
  c->max_candidates = 8;
  c->refactor_every = 37;
  c->seed = 7;
}

#endif
