/* policy_env.c -- see policy_env.h. Everything is allocated at create. */
#include "policy_env.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "o3m_blas.h"
#include "o3m_error.h"
#include "o3m_mask.h"
#include "o3m_rng.h"

struct policy_env {
  int d, K;
  double sd;
  o3m_rng *rng;
  double *theta, *noise;
  o3m_partition part;
  o3m_block *blocks[O3M_MAX_PARTIES];
  double *Xj, *Xm; /* K x d each: one party's columns, the masked round */
};

/* x ~ N(0, I_d), then x / ||x||. */
static int draw_unit(o3m_rng *r, int d, double *x) {
  int rc = o3m_rng_gaussian(r, x, d);
  if (!rc) o3m_scal(d, 1.0 / o3m_nrm2(d, x), x);
  return rc;
}

void policy_env_destroy(policy_env *env) {
  if (!env) return;
  for (int j = 0; j < env->part.m; j++) o3m_block_destroy(env->blocks[j]);
  o3m_rng_destroy(env->rng);
  free(env->theta);
  free(env->noise);
  free(env->Xj);
  free(env->Xm);
  free(env);
}

int policy_env_create(policy_env **out, int d, int K, double noise_var, uint64_t seed,
                      const char *partition, uint64_t mask_seed) {
  *out = NULL;
  policy_env *env = calloc(1, sizeof *env);
  if (!env) return O3M_ENOMEM;
  env->d = d;
  env->K = K;
  env->sd = sqrt(noise_var);
  int rc = o3m_partition_parse(&env->part, partition, NULL);
  if (!rc && env->part.d != d) rc = O3M_EINVAL;
  if (rc) env->part.m = 0; /* no blocks to destroy */
  env->theta = malloc(sizeof(double) * d);
  env->noise = malloc(sizeof(double) * K);
  env->Xj = malloc(sizeof(double) * K * d);
  env->Xm = malloc(sizeof(double) * K * d);
  if (!rc && (!env->theta || !env->noise || !env->Xj || !env->Xm)) rc = O3M_ENOMEM;
  if (!rc) rc = o3m_rng_create_seeded_insecure(&env->rng, seed);
  if (!rc) rc = draw_unit(env->rng, d, env->theta);
  o3m_rng *mrng = NULL;
  o3m_mask *mask = NULL;
  if (!rc) rc = o3m_rng_create_seeded_insecure(&mrng, mask_seed);
  if (!rc) rc = o3m_mask_generate(&mask, d, mrng);
  for (int j = 0; !rc && j < env->part.m; j++)
    rc = o3m_block_from_mask(&env->blocks[j], mask, env->part.offset[j], env->part.dims[j]);
  o3m_mask_destroy(mask);
  o3m_rng_destroy(mrng);
  if (rc) {
    policy_env_destroy(env);
    return rc;
  }
  *out = env;
  return O3M_OK;
}

int policy_env_round(policy_env *env, double *X, double *expected, double *reward) {
  int d = env->d, K = env->K, rc = O3M_OK;
  for (int a = 0; !rc && a < K; a++) rc = draw_unit(env->rng, d, X + (size_t)a * d);
  if (!rc) rc = o3m_rng_gaussian(env->rng, env->noise, K);
  for (int a = 0; !rc && a < K; a++) {
    double mu = o3m_dot(d, X + (size_t)a * d, env->theta);
    if (expected) expected[a] = mu;
    if (reward) reward[a] = mu + env->sd * env->noise[a];
  }
  return rc;
}

const double *policy_env_mask(policy_env *env, const double *X) {
  int d = env->d, K = env->K;
  for (int j = 0; j < env->part.m; j++) {
    int dj = env->part.dims[j], off = env->part.offset[j];
    for (int k = 0; k < K; k++)
      memcpy(env->Xj + (size_t)k * dj, X + (size_t)k * d + off, sizeof(double) * dj);
    o3m_block_apply(env->blocks[j], K, env->Xj, j == 0 ? 0.0 : 1.0, env->Xm);
  }
  return env->Xm;
}
