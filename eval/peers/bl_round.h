/*
 * bl_round: the statistic one LinUCB round needs, as every privacy baseline
 * computes it.
 *
 * For K candidate contexts x_k (rows of X) whose d columns are split across
 * N parties in consecutive blocks of widths dims[0..N-1], one round of LinUCB
 * needs lin[k] = x_k^T theta and quad[k] = x_k^T Ainv x_k. O3M computes them
 * on masked contexts; the baselines in this folder (MPC, HE, DP) compute the
 * same two vectors their own way, and report what that cost in a bl_cost.
 * bl_round_plain() is the plaintext reference every mechanism is checked
 * against.
 */
#ifndef BL_ROUND_H
#define BL_ROUND_H

#include <stdint.h>

#include "o3m_error.h"

/* One round's inputs. Nothing here is owned: the caller keeps the arrays. */
typedef struct bl_round {
  int d, K, N;
  const int *dims;     /* N column-block widths, summing to d */
  const double *X;     /* K x d, row-major: row k is candidate k */
  const double *theta; /* d */
  const double *Ainv;  /* d x d, symmetric positive definite, row-major */
  /* Optional: the plaintext reference of exactly this round, 2K values,
   * lin then quad (bl_round_plain's output). A caller running several
   * mechanisms on one round computes it once and sets it here; when NULL,
   * each mechanism computes it itself to score its error. */
  const double *plain;
} bl_round;

/* What one mechanism spent on one round. */
typedef struct bl_cost {
  double seconds;         /* online phase, wall clock */
  double offline_seconds; /* set-up not tied to the inputs: keys, Beaver triples */
  uint64_t bytes;         /* every byte any party sends to any other */
  int rounds;             /* sequential communication rounds of the online phase */
  double max_abs_err;     /* max over k of |lin - plain| and |quad - plain| */
} bl_cost;

/* Checks the shapes of r: positive d, K, N, dims summing to d. */
int bl_round_check(const bl_round *r, o3m_err *e);

/* The plaintext reference: lin[K] and quad[K] from r, in float64. Returns
 * O3M_ENOMEM (lin and quad then unset) when its d-long scratch vector
 * cannot be allocated. */
int bl_round_plain(const bl_round *r, double *lin, double *quad, o3m_err *e);

/* Sets c->max_abs_err from a mechanism's lin and quad against the plaintext
 * values plain_lin and plain_quad. */
void bl_round_error(const bl_round *r, const double *lin, const double *quad,
          const double *plain_lin, const double *plain_quad, bl_cost *c);

/* Sets c->max_abs_err from a mechanism's lin and quad against r->plain, or,
 * when r->plain is NULL, against bl_round_plain computed here (allocated and
 * freed in this call). Returns O3M_ENOMEM, c unchanged, when that fails. */
int bl_round_score(const bl_round *r, const double *lin, const double *quad, bl_cost *c,
                   o3m_err *e);

#endif
