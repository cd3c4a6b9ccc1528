/*
 * bl_dp: the differential-privacy baseline. Every passive party (parties 1
 * .. N-1 of a bl_round; party 0 is the active participant that holds the
 * model and its own columns) releases its columns of the K candidate
 * contexts through the Gaussian mechanism, and the active participant
 * computes the round statistic (bl_round.h) in plaintext on what it
 * received. That is "noise on each party's contribution": nothing is
 * encrypted, and the result is not exact.
 *
 * The protected unit is one party's block of one round: its K rows of d_j
 * columns, each row first clipped to L2 norm `clip`. Replacing the block
 * moves it by at most 2 clip sqrt(K) in L2 (the sensitivity), and sigma is
 * calibrated so that T such releases together are (epsilon, delta)-DP by
 * zCDP composition (bl_dp_accountant.h): epsilon and delta are the budget
 * of the WHOLE run of T rounds, per party. The account keeps counting past
 * T rounds (bl_dp_account shows what was spent), it does not refuse.
 *
 * Noise comes from OpenSSL's RAND_bytes through Box-Muller, or, with
 * have_seed, from a seeded splitmix64 stream (reproducible, for tests and
 * evaluation runs; not private). Not hidden: floating-point Gaussian
 * sampling leaks through the low bits (Mironov 2012); no snapping is done.
 */
#ifndef BL_DP_H
#define BL_DP_H

#include <stdint.h>

#include "bl_dp_accountant.h"
#include "bl_round.h"

typedef struct bl_dp_config {
  double epsilon;  /* total over T rounds, per party (> 0) */
  double delta;    /* in (0, 1) */
  long T;          /* rounds the budget covers (>= 1) */
  double clip;     /* L2 bound on one row of a party's block (> 0) */
  int have_seed;   /* nonzero: seeded, reproducible noise (not private) */
  uint64_t seed;
} bl_dp_config;

/* epsilon 1, delta 1e-5, T 1, clip 1, CSPRNG noise. */
void bl_dp_config_default(bl_dp_config *c);

typedef struct bl_dp bl_dp;

/* Validates c (errors name the field) and makes a mechanism with an empty
 * account. *out is NULL on failure. */
int bl_dp_create(bl_dp **out, const bl_dp_config *c, o3m_err *e);
void bl_dp_destroy(bl_dp *h);

/* The per-round sigma for releases of K rows (it grows with sqrt(K)). */
double bl_dp_sigma(const bl_dp *h, int K);

/* The L2 sensitivity of one party's release of K rows clipped to norm clip,
 * under replacement of its data: 2 clip sqrt(K). bl_dp_sigma is
 * bl_dp_sigma_for at this sensitivity. */
double bl_dp_sensitivity(double clip, int K);

/* Releases, in place, the columns of parties first .. N-1 of the K x d
 * matrix X (row-major; dims the N block widths): every row of those blocks
 * clipped to norm clip, then N(0, sigma^2) added to every entry. Accounts one
 * release. O3M_EINVAL for bad shapes (X unchanged), O3M_ERANDOM if
 * RAND_bytes fails (X partly noised: discard it). */
int bl_dp_perturb(bl_dp *h, int K, int N, const int *dims, int first, double *X, o3m_err *e);

/* One round under the mechanism: the passive parties' releases, then lin
 * and quad on the released contexts. c gets the online time, the bytes (the
 * passive parties' float64 releases) and 1 round; max_abs_err is against
 * the plaintext reference (r->plain when set, else computed per call). */
int bl_dp_round(bl_dp *h, const bl_round *r, double *lin, double *quad, bl_cost *c, o3m_err *e);

/* What one party has spent so far. */
const bl_dp_accountant *bl_dp_account(const bl_dp *h);

#endif
