/*
 * bl_hannun: Hannun, Knott and van der Maaten's privacy-preserving
 * epsilon-greedy contextual bandit (their Algorithm 1) on the MPC layer
 * bl_mpc.h, and the plaintext learner it is checked and timed against.
 *
 * Every arm a keeps a linear model in shares: Winv_a = W_a^-1 (D x D,
 * starting at I) and b_a (D, starting at 0). One iteration:
 *   choose:  the parties share their feature columns of the context; with
 *            one batched matrix triple every arm computes [w_a, u_a] =
 *            Winv_a [b_a, x_a]; the scores s_a = w_a . x_a and q_a = x_a . u_a
 *            (for the update); the dealer's Bernoulli(eps) bit y and
 *            uniforms v_a give s~_a = s_a + y (v_a - s_a); the argmax (their
 *            Algorithm 2 twice: all-pairs [s~_i >= s~_j] on binary shares,
 *            products of the rows, random tie-break by the dealer's shared
 *            permutation) gives a one-hot [o]; [o] is opened to party 0,
 *            which pulls the arm. The one-hot stays in shares for the update
 *            (their p0 re-shares o, the same values one round later).
 *   update:  the last party shares the reward r; every arm (the parties may
 *            not learn which one was pulled) applies Sherman-Morrison
 *            Winv_a -= o_a (u_a u_a^T) / (1 + q_a), the reciprocal by
 *            Newton-Raphson from x0 = 3 e^{-(x - 0.5)} + 0.003, and
 *            b_a += o_a r x_a.
 * The exponential of the initial value is the limit approximation
 * e^y ~ (1 + y / 2^n)^(2^n) (n squarings, CrypTen's method; the paper does
 * not say which it used). Privacy of the chosen arm: epsilon-greedy is
 * log(|A| / eps)-differentially private (their Theorem 1).
 *
 * The plaintext learner (bl_hplain) runs the same algorithm in float64 and
 * updates only the pulled arm. Given the dealer's samples of an iteration
 * (bl_hannun_last_samples), it makes the choice the private learner should.
 */
#ifndef BL_HANNUN_H
#define BL_HANNUN_H

#include <stdint.h>

#include "bl_mpc.h"
#include "o3m_error.h"

typedef struct bl_hannun_opts {
  int arms;       /* |A| >= 2 */
  int dim;        /* D, the context's length */
  int parties;    /* |P| >= 2; party 0 pulls, party |P|-1 gets the reward */
  const int *dims; /* |P| column widths summing to D; NULL: as even as possible */
  int per_arm;    /* 0: one context x (D) for all arms; 1: a context per arm (|A| x D) */
  double epsilon; /* exploration, in [0, 1] */
  int frac_bits;  /* fixed point (theirs: 20) */
  int exp_iters;  /* squarings of the exponential (8) */
  int nr_iters;   /* Newton-Raphson iterations (theirs: 7) */
  const uint64_t *seed; /* NULL: OS CSPRNG; else reproducible, NOT secure */
} bl_hannun_opts;

/* Their settings: 20 fractional bits, 7 Newton-Raphson iterations, 8
 * squarings for the exponential, eps = 0.1, shared context. */
void bl_hannun_opts_default(bl_hannun_opts *o);

typedef struct bl_hannun bl_hannun;

int bl_hannun_create(bl_hannun **out, const bl_hannun_opts *o, o3m_err *e);
void bl_hannun_destroy(bl_hannun *h);

/* One choice for context X (D values, or |A| x D with per_arm). *arm is
 * what party 0 learns. O3M_ERANGE when a feature exceeds the fixed-point
 * input range (nothing shared then). */
int bl_hannun_choose(bl_hannun *h, const double *X, int *arm, o3m_err *e);

/* The update after the last choice with reward r (shared by the last
 * party). O3M_ESTATE without a choice before it. */
int bl_hannun_update(bl_hannun *h, double r, o3m_err *e);

/* The context's counters (bytes, rounds, dealer seconds). */
bl_mpc *bl_hannun_mpc(bl_hannun *h);

/* The dealer's samples of the last choice, reconstructed for verification
 * (bl_mpc_peek): the explore bit, the |A| uniforms and the permutation
 * (values 1..|A|). */
void bl_hannun_last_samples(const bl_hannun *h, int *explore, double *v, int *gamma);

/* The private reciprocal of n shared values in [1, 10) (the paper's range),
 * as used by the update: exp_iters squarings and nr_iters iterations. */
int bl_hannun_reciprocal(bl_mpc *m, uint64_t *z, const uint64_t *x, long n, int exp_iters,
                         int nr_iters, o3m_err *e);

/* The private argmax of the n shared values x as a one-hot integer share z,
 * ties broken by the dealer's shared permutation of 1..n (returned in gamma
 * shares when gamma is not NULL; n words per party). n >= 1. */
int bl_hannun_argmax(bl_mpc *m, uint64_t *z, const uint64_t *x, int n, uint64_t *gamma,
                     o3m_err *e);

/* ---- the plaintext learner ---- */
typedef struct bl_hplain bl_hplain;

int bl_hplain_create(bl_hplain **out, int arms, int dim, int per_arm, o3m_err *e);
void bl_hplain_destroy(bl_hplain *p);

/* The choice for X given the samples (explore bit, uniforms v, permutation
 * gamma: among tied maxima the largest gamma wins, as in the private
 * argmax). gamma NULL: the lowest index wins. */
int bl_hplain_choose(bl_hplain *p, const double *X, int explore, const double *v,
                     const int *gamma);

/* Sherman-Morrison on the pulled arm only. */
void bl_hplain_update(bl_hplain *p, int arm, double r);

#endif
