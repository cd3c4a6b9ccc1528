/*
 * bl_he: the homomorphic-encryption baseline. One LinUCB round's statistic
 * (bl_round.h) under Paillier (bl_paillier.h), with three roles:
 *
 *   key holder KH   holds the Paillier secret key (a third party, in O3M's
 *                   terms where the privacy mask generator stands);
 *   passive parties 1 .. N-1 encrypt their columns of the K candidates;
 *   active party 0  (the evaluator) holds the model theta, Ainv in plaintext
 *                   and its own columns.
 *
 * The protocol, three sequential messages:
 *   1. every passive party j sends Enc(x_kc) for its columns c (K d_j
 *      ciphertexts);
 *   2. the evaluator factors Ainv = U^T U (Cholesky) and computes, per
 *      candidate, Enc(lin) = sum_c theta_c Enc(x_c) and Enc(u_i) =
 *      sum_{c >= i} U_ic Enc(x_c) (its own columns enter as plaintext
 *      sums), so that quad = ||u||^2. It masks them with fresh uniform
 *      integers: w = u + r, lin + s, and v = r.u + t, re-randomizes the
 *      ciphertexts, and sends the K (d + 2) of them to KH;
 *   3. KH decrypts and returns lin + s and q' = ||w||^2 - 2 v; the evaluator
 *      takes lin = (lin + s) - s and quad = q' + 2 t - ||r||^2, since
 *      ||w||^2 = ||u||^2 + 2 r.u + ||r||^2.
 * KH sees only masked values; the evaluator sees only lin and quad (what
 * LinUCB needs) and ciphertexts. Semi-honest and non-colluding, as is usual
 * for this construction.
 *
 * Fixed point: x, theta and U at frac_bits fractional bits, so lin is at
 * 2 frac_bits and quad at 4 frac_bits, exact integers until the final
 * scaling. Masks are uniform of 2 frac_bits + 64 + stat_bits bits: they
 * hide u statistically (distance 2^-stat_bits) while |(U x)_i| < 2^64.
 *
 * Offline (bl_cost.offline_seconds): the encryption noise r^n mod n^2 of
 * every ciphertext the round will create (the parties' and the evaluator's
 * re-randomizations), which does not depend on the data. Key generation
 * and the public key's distribution are one-offs reported apart
 * (bl_he_keygen_seconds) and not in bytes. Bytes count ciphertexts
 * (bl_paillier_ct_size each) and plaintexts (bl_paillier_pt_size each)
 * exactly; framing is not counted. Single-threaded.
 */
#ifndef BL_HE_H
#define BL_HE_H

#include "bl_round.h"
#include "o3m_error.h"

typedef struct bl_he_config {
  int bits;      /* Paillier modulus (BL_PAILLIER_BITS; smaller for tests) */
  int frac_bits; /* fixed-point fractional bits (24) */
  int stat_bits; /* statistical hiding of the masks (40) */
} bl_he_config;

void bl_he_config_default(bl_he_config *c);

/* Operation counts and seconds of the last bl_he_round. noise is r^n mod
 * n^2 (offline), enc an encryption with precomputed noise, mul a scalar
 * product by a model value (frac_bits-sized scalar), mmul one by a mask r_i
 * (2 frac_bits + 64 + stat_bits bits, so several times dearer), add a
 * ciphertext product or a plaintext addition. */
typedef struct bl_he_stats {
  long n_noise, n_enc, n_dec, n_add, n_mul, n_mmul;
  double s_noise, s_enc, s_dec, s_add, s_mul, s_mmul; /* seconds spent in each, summed */
} bl_he_stats;

typedef struct bl_he bl_he;

/* Generates the key holder's key (timed). *out is NULL on failure. */
int bl_he_create(bl_he **out, const bl_he_config *c, o3m_err *e);
void bl_he_destroy(bl_he *h);
double bl_he_keygen_seconds(const bl_he *h);

/* One round (see above). lin and quad are K-vectors; c gets the online and
 * offline seconds, the bytes, the rounds (3; 2 when N is 1 and no party
 * uploads) and the error against plaintext (r->plain when set). O3M_ENOTPD if Ainv is not positive definite, O3M_ERANGE if a
 * value does not fit the fixed point. */
int bl_he_round(bl_he *h, const bl_round *r, double *lin, double *quad, bl_cost *c, o3m_err *e);

/* The bytes one round on r's shape sends: K (d - d0) ciphertexts from the
 * passive parties, K (d + 2) from the evaluator, 2 K plaintexts back. */
uint64_t bl_he_bytes(const bl_he *h, const bl_round *r);

/* The counts and times of the last round. */
void bl_he_stats_get(const bl_he *h, bl_he_stats *s);

/* The counts and times summed over every round of h that succeeded: the
 * per-operation means a caller extrapolates from (bl_he_estimate). */
void bl_he_stats_total(const bl_he *h, bl_he_stats *s);

/* The operation counts bl_he_round makes on a round of r's shape (seconds
 * zero), for rounds too slow to run: with M = d0 (d - d0) + (d - d0)(d - d0
 * + 1) / 2 (d0 the active party's width, p = d - d0), per candidate
 * noise = enc = p + d + 2, mul = M + p, mmul = d, add = M + 4 d + p + 4,
 * dec = d + 2. Exact when no encoded theta or Cholesky entry is zero (a
 * zero scalar's product is skipped). */
void bl_he_count(const bl_round *r, bl_he_stats *counts);

/* Online and offline seconds predicted for `counts` from the per-operation
 * means of a measured run `per` (each kind's seconds over its count). The
 * prediction leaves out the plaintext work (encoding, Cholesky), which is
 * small beside the exponentiations. */
void bl_he_estimate(const bl_he_stats *counts, const bl_he_stats *per, double *online,
                    double *offline);

#endif
