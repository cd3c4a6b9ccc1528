/* o3m_features_dummy.c -- the dummy rows of the ids a table does not hold
 * (o3m_features_internal.h).
 *
 * Unknown ids. Without a dummy-row key an id a table does not hold gets
 * the column means. With the key a PP sets (o3m_features_set_dummy_key) it
 * gets mu + Sigma^{1/2} z, the table's mean plus the symmetric square root
 * of its covariance (both computed at load, linalg/o3m_moments.h) times a
 * vector z of standard normals from a splitmix64 stream seeded with
 * SipHash-2-4(key, id) (libsodium's crypto_shorthash through
 * crypto/o3m_hash_keyed.h); bytes 0..15 of the key key the user table, 16..31
 * the item table, so a user and an item with the same id get unrelated
 * rows. SipHash is a pseudo-random function: without the key the dummies
 * of different ids look like independent draws from N(mu, Sigma), and the
 * same id always gets the same row, so neither repeated requests nor a
 * comparison across ids tells the active participant which ids are
 * unknown. Why the full covariance, and the limits that remain, are in
 * o3m_features.h ("Dummy rows"). */
#include <math.h>
#include <string.h>

#include "o3m_blas.h"
#include "o3m_features_internal.h"
#include "o3m_splitmix.h"

/* -------------------------------------------------------------- dummy rows */

/* Splits 32 key bytes into the two keyed-hash keys. */
static void set_key(o3m_features *f, const unsigned char key[O3M_FEATURES_KEY_BYTES]) {
  memcpy(f->dummy_key[0].k, key, sizeof f->dummy_key[0].k);
  memcpy(f->dummy_key[1].k, key + sizeof f->dummy_key[0].k, sizeof f->dummy_key[1].k);
}

/* A dummy drawn above its table's bound is scaled onto the bound times
 * this factor, which keeps it inside after the rounding of the scaling
 * and of the norm (a relative error of at most about n 2^-53, n the
 * number of columns). */
#define DUMMY_SHRINK (1.0 - 1e-9)

/* a when pick is 1, b when pick is 0, bit for bit and without a branch:
 * the lookup must not take a different path for a known id, or its time
 * would tell which ids the table holds. */
static inline double select_double(uint64_t pick, double a, double b) {
  uint64_t ua, ub, m = (uint64_t)0 - pick;
  memcpy(&ua, &a, sizeof ua);
  memcpy(&ub, &b, sizeof ub);
  uint64_t r = (ua & m) | (ub & ~m);
  double out;
  memcpy(&out, &r, sizeof out);
  return out;
}

/* Writes the dummy row of id into out[0..t->n_cols):
 * mu + Sigma^{1/2} z = mu + sum_k z_k (row k of the symmetric root), z drawn
 * from the stream that SipHash(key, id) seeds (o3m_hash_keyed), so nothing
 * but out is written. Ids are compared as byte strings everywhere, so the
 * hash covers exactly the bytes up to the NUL.
 *
 * A dummy must stay inside the party's norm bound (o3m_features_check_norm
 * sets t->dummy_max_sq, at least the table's largest real row). The work
 * is the same for every id, so that its time tells nothing about which
 * ids are known: one draw, then a scaling by c = 1 for a draw inside the bound and
 * c = DUMMY_SHRINK sqrt(dummy_max_sq / ||draw||^2) for one above it,
 * chosen without a branch. Multiplying by 1 is exact, so a draw inside the
 * bound is the dummy bit for bit; one above it is pulled radially onto the
 * bound. (Before, a draw above the bound was redrawn up to 32 times and
 * then replaced by the means: a loop whose length depended on the id.)
 * The dummies thus come from N(mu, Sigma) with the mass beyond the bound
 * moved onto it; with a bound far above the real rows (the default) that
 * practically never happens. A draw whose squared norm overflows gets
 * c = 0, the zero row. */
static void dummy_row(const ft_table *t, const o3m_hash_key *key, const char *id, double *out) {
  uint64_t s = o3m_hash_keyed(key, id, strlen(id));
  const int n = t->n_cols;
  double z[2];
  memcpy(out, t->means, sizeof *out * (size_t)n);
  for (int k = 0; k < n; k++) {
    if (k % 2 == 0) o3m_splitmix64_gauss2(&s, &z[0], &z[1]);
    o3m_axpy(n, z[k % 2], t->root + (size_t)k * (size_t)n, out);
  }
  double sq = sum_sq(out, n);
  double shrink = DUMMY_SHRINK * sqrt(t->dummy_max_sq / sq);
  /* sq = 0 gives shrink = inf, unused since 0 is inside; sq = inf inside
   * an infinite bound gives NaN, unused likewise. */
  uint64_t inside = sq <= t->dummy_max_sq;
  o3m_scal(n, select_double(inside, 1.0, shrink), out);
}

/* The row of id in t (table `which`: 0 users, 1 items) into out: its real
 * row when t holds it (r >= 0), else its dummy once a dummy-row key is set,
 * else the column means (whose norm is at most the mean of the row norms
 * and so inside any bound the table passed). The dummy is computed for
 * every id, known or not, and a row of the table is read for every id too
 * (for an unknown id the decoy row table_find picked, then discarded); the
 * two are selected without a branch, so the work does not depend on
 * whether t holds id (a timing channel otherwise). A present table has at least one
 * row. */
void pick_row(const o3m_features *f, const ft_table *t, int which, const char *id, long r,
                     size_t decoy, double *out) {
  if (f->has_key)
    dummy_row(t, &f->dummy_key[which], id, out);
  else
    memcpy(out, t->means, sizeof *out * (size_t)t->n_cols);
  uint64_t known = r >= 0;
  size_t m = (size_t)((uint64_t)0 - known);
  size_t row = ((size_t)r & m) | (decoy & ~m);
  const double *real = t->vals + row * (size_t)t->n_cols;
  for (int i = 0; i < t->n_cols; i++) out[i] = select_double(known, real[i], out[i]);
}

void o3m_features_set_dummy_key(o3m_features *f, const unsigned char key[O3M_FEATURES_KEY_BYTES]) {
  set_key(f, key);
  f->has_key = 1;
  features_epochs(f); /* keyed from now on (o3m_features_epoch) */
}
