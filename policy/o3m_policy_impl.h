/* o3m_policy_impl.h -- what the policy's own files share; not installed.
 *
 * The policy library is one module in three files, one per concept: the
 * engine (o3m_policy.c: create, choose, update, reset; it also explains the
 * state below), its saved-state format (o3m_policy_state.c) and its health
 * check with the refactorization that repairs what the check finds
 * (o3m_policy_health.c). This header holds the state they all read and the
 * few helpers more than one of them calls. Only files in policy/ include it;
 * everyone else uses o3m_policy.h. */
#ifndef O3M_POLICY_IMPL_H
#define O3M_POLICY_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "o3m_blas.h"
#include "o3m_policy.h"
#include "o3m_rng.h"

/* Observations held per model before they are added to Lambda with one
 * dsyrk. 16 gets most of the gain (the per-observation cost at 32 or 64 is
 * within 15% of it at d = 100 to 500) for 16 d doubles per model. */
#define LAMBDA_BLOCK 16

struct o3m_policy {
  o3m_policy_config cfg;
  int d;
  int n_models;
  int use_chol; /* 1: models keep U; 0: models keep Ainv */
  double *lambda_m; /* n_models x d x d, without the held rows */
  double *held;     /* n_models x LAMBDA_BLOCK x d: rows not yet in Lambda */
  int *n_held;      /* per model, 0..LAMBDA_BLOCK-1 between calls */
  double *fac;      /* n_models x d x d: Ainv or U (disjoint: paired) */
  double *scratch;  /* d x d, disjoint only: a whole inverse before it is paired */
  double *u;        /* n_models x d */
  double *theta;    /* n_models x d */
  int *since_refactor; /* per model */
  uint64_t updates;
  o3m_rng *rng;
  /* workspace, sized at create; rows = max(max_candidates, batch_rows) */
  int batch_rows; /* O3M_POLICY_BATCH_BYTES of rows of d doubles (>= 1) */
  double *W;     /* rows x d */
  double *mean;  /* rows */
  double *var;   /* rows */
  double *score; /* rows */
  double *z;     /* max(d, max_candidates) */
  double *work;  /* d */
  /* o3m_policy_choose_batch: the rounds of one scoring call, each one's
   * first row in W, its draws (shared LinTS: one row of Z each) and the
   * sampler state before them. */
  double *Z;     /* O3M_POLICY_BATCH_ROUNDS x d, shared LinTS only */
  int bidx[O3M_POLICY_BATCH_ROUNDS];
  int boff[O3M_POLICY_BATCH_ROUNDS];
  o3m_rng_state bstate[O3M_POLICY_BATCH_ROUNDS];
  /* the chosen candidate's x and w = Ainv_a x (see o3m_policy.c) */
  double *kept_x, *kept_w;
  int kept_arm; /* -1: nothing kept */
};

static inline double *model_mat(double *base, const o3m_policy *p, int m) {
  return base + (size_t)m * p->d * p->d;
}

static inline double *held_rows(const o3m_policy *p, int m) {
  return p->held + (size_t)m * LAMBDA_BLOCK * p->d;
}

/* Where model m's factor is: its d x d array and the triangle holding the
 * values (for U always the upper one; see "Paired triangles" in o3m_policy.c). */
typedef struct fac_view {
  double *a;
  o3m_uplo t;
} fac_view;

static inline fac_view fac_of(const o3m_policy *p, int m) {
  fac_view f = {model_mat(p->fac, p, m), O3M_UPPER};
  if (p->cfg.model == O3M_MODEL_DISJOINT && (m & 1)) {
    f.a = model_mat(p->fac, p, m - 1) + p->d;
    f.t = O3M_LOWER;
  }
  return f;
}

/* Recomputes Ainv or U of model m exactly from its Lambda (flushing the
 * held rows first) and restarts its since-refactor counter; theta is not
 * touched (o3m_policy__update_theta). O3M_ENOTPD if Lambda is not positive
 * definite: the factor is then unspecified. Defined in o3m_policy.c. */
int o3m_policy__refactor(o3m_policy *p, int m);

/* theta_m = Lambda_m^{-1} u_m from the model's current Ainv or U. */
void o3m_policy__update_theta(o3m_policy *p, int m);

#endif
