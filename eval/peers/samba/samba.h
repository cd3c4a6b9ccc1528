/* samba.h -- Samba: secure federated multi-armed bandits (Ciucanu,
 * Lafourcade, Marcadet and Soare, JAIR 2022), plain and secure, for the five
 * algorithms of its Figure 4 (epsilon-greedy fixed and decreasing, UCB,
 * Thompson sampling, Softmax, Pursuit).
 *
 * Setting: K data owners DO_i each hold one Bernoulli arm (mean mu_i) and
 * its statistics s_i (sum of rewards) and n_i (pulls); a data customer DC
 * spends a budget of N pulls and alone learns the cumulative reward; the
 * server is split into a Controller, which relays, and Comp, which selects.
 * Every arm is pulled once, then for t = K+1..N (the core, Samba's steps
 * 2-5, once per iteration; Pursuit needs two iterations per step):
 *   DO_i    computes its score v_i from (s_i, n_i, t) and sends
 *           Enc(alpha_t v_i), alpha_t a mask all DOs derive from a seed the
 *           Controller gave them, Enc AES-256-GCM under a key shared by the
 *           DOs and Comp (samba_aead.h); a DO's nonce is random, so it does
 *           not name the sender;
 *   Ctrl    permutes the K ciphertexts with a fresh sigma_t and forwards;
 *   Comp    decrypts, selects a position (argmax, or probability matching
 *           over the masked values), returns K encrypted pulling bits;
 *   Ctrl    un-permutes and hands DO_i its bit; the DO whose bit is 1 pulls.
 * At the end each DO sends E(s_i), Paillier under the DC's key (2048 bits,
 * eval/peers/paillier/bl_paillier.h); the Controller multiplies them (adds the
 * plaintexts) and the DC decrypts sum_i s_i.
 *
 * Plain means the standard, non-federated algorithm with the same random
 * streams: the rewards (one stream per arm), the Thompson samples (one per
 * arm), the explore coins, the order the selection scans (sigma_t, which
 * breaks argmax ties uniformly and orders the probability-matching walk)
 * and the selection's uniform draw. The secure run must return exactly the
 * plain cumulative reward and the same sequence of pulls (the paper's
 * Theorem 2); samba_run_both checks it on every run.
 *
 * Exactness: the mask alpha_t is a power of two, 2^e with e uniform in
 * 0..40 (scaling up, so even a subnormal Pursuit probability stays exact),
 * so alpha_t v is exact in binary64 and order and proportions are
 * preserved bit for bit (the paper's real-valued alpha can flip a decision
 * by one rounding, rarely). Its cost: Comp sees each score up to a common
 * power-of-two factor, i.e. the scores' mantissas, where the paper's mask
 * shows their ratios only; both reveal the ranking and the proportions,
 * which Samba's Comp needs. */
#ifndef SAMBA_H
#define SAMBA_H

#include <stdint.h>

#include "bl_paillier.h"
#include "o3m_error.h"

typedef enum {
  SAMBA_EPS_FIXED = 0, /* epsilon-greedy, fixed epsilon */
  SAMBA_EPS_DECAY,     /* epsilon-greedy, epsilon_t = min(1, eps_c / t) */
  SAMBA_UCB,           /* UCB1: mu_i + sqrt(2 ln t / n_i) */
  SAMBA_TS,            /* Thompson sampling, Beta(s_i + 1, n_i - s_i + 1) */
  SAMBA_SOFTMAX,       /* Boltzmann, e^(mu_i / tau) */
  SAMBA_PURSUIT,       /* pursuit, learning rate beta (two iterations) */
  SAMBA_N_ALGOS
} samba_algo;

const char *samba_algo_name(samba_algo a);
/* "eps-fixed", "eps-decay", "ucb", "ts", "softmax", "pursuit"; O3M_EINVAL. */
int samba_algo_parse(const char *s, samba_algo *out);

typedef struct samba_config {
  samba_algo algo;
  int K;            /* arms = data owners, 2..SAMBA_MAX_K */
  long N;           /* budget, >= K */
  const double *mu; /* K means in [0, 1] */
  double eps;       /* fixed epsilon (default 0.1) */
  double eps_c;     /* decreasing: epsilon_t = min(1, eps_c / t); 0 means 5 K */
  double tau;       /* Softmax temperature (default 0.1) */
  double beta;      /* Pursuit learning rate (default 0.1) */
  uint64_t seed;    /* every stream derives from it */
} samba_config;

#define SAMBA_MAX_K 4096

typedef struct samba_result {
  long long reward;     /* cumulative reward (secure: as the DC decrypted it) */
  uint64_t pulls_hash;  /* FNV-1a of the sequence of pulled arms */
  long long iterations; /* runs of the core (steps 2-5) */
  double seconds;       /* whole run, wall clock */
  /* Secure runs only: */
  long long aes_ops;      /* AES-GCM seals + opens */
  long long paillier_ops; /* encryptions + homomorphic additions + decryptions */
  double sec_do, sec_ctrl, sec_comp, sec_dc; /* time per role (sum over DOs) */
  double sec_paillier;    /* the cumulative-reward step (Paillier), all roles */
} samba_result;

/* Defaults: eps 0.1, eps_c 0 (5 K), tau 0.1, beta 0.1, seed 1; algo, K, N
 * and mu must be set. */
void samba_config_default(samba_config *c);

/* The plain algorithm. O3M_EINVAL naming the field for a bad config. */
int samba_run_plain(const samba_config *c, samba_result *r, o3m_err *e);

/* The secure protocol; dc is the DC's Paillier key with its secret (the DOs
 * and the Controller get its public part only). */
int samba_run_secure(const samba_config *c, const bl_paillier *dc, samba_result *r, o3m_err *e);

/* Both, then the check: O3M_ESTATE, naming both rewards, if the secure
 * cumulative reward or pull sequence differs from the plain one. */
int samba_run_both(const samba_config *c, const bl_paillier *dc, samba_result *plain,
                   samba_result *secure, o3m_err *e);

#endif
