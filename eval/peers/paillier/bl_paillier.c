/*
 * bl_paillier: Paillier over GMP (bl_paillier.h). The key keeps n, n^2 and
 * n/2 for every party; the secret part keeps p, q, their squares and the
 * CRT constants h_p = L_p(g^(p-1) mod p^2)^-1 mod p (likewise for q) and
 * q^-1 mod p, so that decryption is two half-size exponentiations and one
 * recombination.
 */
#include "bl_paillier.h"

#include <math.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <stdlib.h>

/* mpz_set_si and mpz_get_si take a long: int64_t passes through unchanged. */
_Static_assert(sizeof(long) == sizeof(int64_t), "long must be 64 bits");

struct bl_paillier {
  int bits;
  mpz_t n, n2, half; /* n, n^2, floor(n/2) */
  int has_secret;
  mpz_t p, q, p2, q2, hp, hq, qinv_p; /* secret; valid only if has_secret */
};

struct bl_pct {
  mpz_t c;
};

/* Overwrites x's limbs with zeros before clearing it, so that a secret does
 * not outlive its key in freed memory. */
static void wipe_clear(mpz_ptr x) {
  size_t nl = mpz_size(x);
  if (nl > 0) {
    mp_limb_t *l = mpz_limbs_modify(x, (mp_size_t)nl);
    OPENSSL_cleanse(l, nl * sizeof(mp_limb_t));
    mpz_limbs_finish(x, 0);
  }
  mpz_clear(x);
}

int bl_paillier_random_bits(mpz_ptr x, int bits, o3m_err *e) {
  if (bits < 1 || bits > (1 << 20))
    return o3m_err_set(e, O3M_EINVAL, "paillier: random bits must be in [1, 2^20], got %d", bits);
  size_t nb = ((size_t)bits + 7) / 8;
  unsigned char *buf = malloc(nb);
  if (!buf) return o3m_err_set(e, O3M_ENOMEM, "paillier: out of memory for %zu random bytes", nb);
  if (RAND_bytes(buf, (int)nb) != 1) {
    free(buf);
    return o3m_err_set(e, O3M_ERANDOM, "paillier: RAND_bytes failed");
  }
  mpz_import(x, nb, 1, 1, 1, 0, buf);
  OPENSSL_cleanse(buf, nb);
  free(buf);
  mpz_fdiv_r_2exp(x, x, (mp_bitcnt_t)bits);
  return 0;
}

/* r = a uniform element of Z_n^* (64 extra random bits make the reduction's
 * bias negligible). */
static int rand_unit(const bl_paillier *k, mpz_ptr r, o3m_err *e) {
  mpz_t g;
  mpz_init(g);
  int rc = 0;
  for (;;) {
    if ((rc = bl_paillier_random_bits(r, k->bits + 64, e))) break;
    mpz_mod(r, r, k->n);
    if (mpz_sgn(r) == 0) continue;
    mpz_gcd(g, r, k->n);
    if (mpz_cmp_ui(g, 1) == 0) break;
  }
  mpz_clear(g);
  return rc;
}

/* L(u) = (u - 1) / d, exact by construction. */
static void ell(mpz_ptr out, mpz_srcptr u, mpz_srcptr d) {
  mpz_sub_ui(out, u, 1);
  mpz_divexact(out, out, d);
}

static bl_paillier *alloc_key(void) {
  bl_paillier *k = calloc(1, sizeof *k);
  if (!k) return NULL;
  mpz_inits(k->n, k->n2, k->half, NULL);
  return k;
}

/* Fills the secret part from p, q and the public part from their product.
 * Checks what from_primes promises. */
static int set_from_primes(bl_paillier *k, mpz_srcptr p, mpz_srcptr q, o3m_err *e) {
  if (mpz_cmp_ui(p, 2) <= 0 || mpz_cmp_ui(q, 2) <= 0 || mpz_cmp(p, q) == 0)
    return o3m_err_set(e, O3M_EINVAL, "paillier: primes must be distinct odd primes");
  if (!mpz_probab_prime_p(p, 40) || !mpz_probab_prime_p(q, 40))
    return o3m_err_set(e, O3M_EINVAL, "paillier: p or q is not prime");
  mpz_t phi, t;
  mpz_inits(phi, t, NULL);
  mpz_mul(k->n, p, q);
  mpz_sub_ui(phi, p, 1);
  mpz_sub_ui(t, q, 1);
  mpz_mul(phi, phi, t);
  mpz_gcd(t, phi, k->n);
  int ok = mpz_cmp_ui(t, 1) == 0;
  mpz_clears(phi, t, NULL);
  if (!ok) return o3m_err_set(e, O3M_EINVAL, "paillier: gcd(pq, (p-1)(q-1)) is not 1");
  mpz_mul(k->n2, k->n, k->n);
  mpz_fdiv_q_2exp(k->half, k->n, 1);
  k->bits = (int)mpz_sizeinbase(k->n, 2);

  mpz_inits(k->p, k->q, k->p2, k->q2, k->hp, k->hq, k->qinv_p, NULL);
  k->has_secret = 1;
  mpz_set(k->p, p);
  mpz_set(k->q, q);
  mpz_mul(k->p2, p, p);
  mpz_mul(k->q2, q, q);
  /* h_p = L_p(g^(p-1) mod p^2)^-1 mod p with g = n + 1; likewise h_q. */
  mpz_t g, u, pm1;
  mpz_inits(g, u, pm1, NULL);
  mpz_add_ui(g, k->n, 1);
  mpz_sub_ui(pm1, p, 1);
  mpz_powm(u, g, pm1, k->p2);
  ell(u, u, p);
  int inv = mpz_invert(k->hp, u, p);
  mpz_sub_ui(pm1, q, 1);
  mpz_powm(u, g, pm1, k->q2);
  ell(u, u, q);
  inv = inv && mpz_invert(k->hq, u, q);
  inv = inv && mpz_invert(k->qinv_p, q, p);
  mpz_clears(g, u, pm1, NULL);
  if (!inv)
    return o3m_err_set(e, O3M_EINVAL, "paillier: CRT constants do not exist for these primes");
  return 0;
}

int bl_paillier_from_primes(mpz_srcptr p, mpz_srcptr q, bl_paillier **out, o3m_err *e) {
  *out = NULL;
  bl_paillier *k = alloc_key();
  if (!k) return o3m_err_set(e, O3M_ENOMEM, "paillier: out of memory for a key");
  int rc = set_from_primes(k, p, q, e);
  if (rc) {
    bl_paillier_free(k);
    return rc;
  }
  *out = k;
  return 0;
}

/* p = a random prime of exactly `bits` bits with its two top bits set. */
static int rand_prime(mpz_ptr p, int bits, o3m_err *e) {
  for (;;) {
    int rc = bl_paillier_random_bits(p, bits, e);
    if (rc) return rc;
    mpz_setbit(p, (mp_bitcnt_t)bits - 1);
    mpz_setbit(p, (mp_bitcnt_t)bits - 2);
    mpz_nextprime(p, p);
    /* nextprime may carry past `bits` bits from the very top: draw again. */
    if ((int)mpz_sizeinbase(p, 2) == bits && mpz_probab_prime_p(p, 40)) return 0;
  }
}

int bl_paillier_keygen(int bits, bl_paillier **out, o3m_err *e) {
  *out = NULL;
  if (bits < BL_PAILLIER_MIN_BITS || bits % 2 != 0 || bits > 16384)
    return o3m_err_set(e, O3M_EINVAL,
                       "paillier: modulus bits must be even and in [%d, 16384], got %d",
                       BL_PAILLIER_MIN_BITS, bits);
  mpz_t p, q;
  mpz_inits(p, q, NULL);
  int rc = 0;
  for (;;) {
    if ((rc = rand_prime(p, bits / 2, e)) || (rc = rand_prime(q, bits / 2, e))) break;
    if (mpz_cmp(p, q) == 0) continue;
    bl_paillier *k = alloc_key();
    if (!k) {
      rc = o3m_err_set(e, O3M_ENOMEM, "paillier: out of memory for a key");
      break;
    }
    /* Two top bits set on both primes make n exactly `bits` bits long. */
    rc = set_from_primes(k, p, q, e);
    if (rc) {
      bl_paillier_free(k);
      break;
    }
    *out = k;
    break;
  }
  wipe_clear(p);
  wipe_clear(q);
  return rc;
}

int bl_paillier_public(const bl_paillier *k, bl_paillier **out, o3m_err *e) {
  *out = NULL;
  bl_paillier *c = alloc_key();
  if (!c) return o3m_err_set(e, O3M_ENOMEM, "paillier: out of memory for a key");
  c->bits = k->bits;
  mpz_set(c->n, k->n);
  mpz_set(c->n2, k->n2);
  mpz_set(c->half, k->half);
  *out = c;
  return 0;
}

void bl_paillier_free(bl_paillier *k) {
  if (!k) return;
  if (k->has_secret) {
    wipe_clear(k->p);
    wipe_clear(k->q);
    wipe_clear(k->p2);
    wipe_clear(k->q2);
    wipe_clear(k->hp);
    wipe_clear(k->hq);
    wipe_clear(k->qinv_p);
  }
  mpz_clears(k->n, k->n2, k->half, NULL);
  OPENSSL_cleanse(k, sizeof *k);
  free(k);
}

int bl_paillier_bits(const bl_paillier *k) { return k->bits; }
int bl_paillier_has_secret(const bl_paillier *k) { return k->has_secret; }
void bl_paillier_modulus(const bl_paillier *k, mpz_ptr n_out) { mpz_set(n_out, k->n); }

size_t bl_paillier_ct_size(const bl_paillier *k) { return (mpz_sizeinbase(k->n2, 2) + 7) / 8; }
size_t bl_paillier_pt_size(const bl_paillier *k) { return ((size_t)k->bits + 7) / 8; }

int bl_pct_new(const bl_paillier *k, bl_pct **out, o3m_err *e) {
  *out = NULL;
  bl_pct *c = malloc(sizeof *c);
  if (!c) return o3m_err_set(e, O3M_ENOMEM, "paillier: out of memory for a ciphertext");
  mpz_init2(c->c, (mp_bitcnt_t)(2 * k->bits + 64));
  mpz_set_ui(c->c, 1);
  *out = c;
  return 0;
}

void bl_pct_free(bl_pct *c) {
  if (!c) return;
  mpz_clear(c->c);
  free(c);
}

void bl_pct_copy(bl_pct *dst, const bl_pct *src) { mpz_set(dst->c, src->c); }
void bl_pct_value(const bl_pct *c, mpz_ptr v) { mpz_set(v, c->c); }

void bl_pct_serialize(const bl_paillier *k, const bl_pct *c, uint8_t *buf) {
  size_t len = bl_paillier_ct_size(k), used = (mpz_sizeinbase(c->c, 2) + 7) / 8;
  if (mpz_sgn(c->c) == 0) used = 0;
  for (size_t i = 0; i < len - used; i++) buf[i] = 0;
  size_t w = 0;
  if (used) mpz_export(buf + (len - used), &w, 1, 1, 1, 0, c->c);
}

int bl_pct_parse(const bl_paillier *k, const uint8_t *buf, size_t len, bl_pct *c, o3m_err *e) {
  if (len != bl_paillier_ct_size(k))
    return o3m_err_set(e, O3M_EINVAL, "paillier: a ciphertext is %zu bytes, got %zu",
                       bl_paillier_ct_size(k), len);
  mpz_t v, g;
  mpz_inits(v, g, NULL);
  mpz_import(v, len, 1, 1, 1, 0, buf);
  mpz_gcd(g, v, k->n);
  int ok = mpz_sgn(v) > 0 && mpz_cmp(v, k->n2) < 0 && mpz_cmp_ui(g, 1) == 0;
  if (ok) mpz_set(c->c, v);
  mpz_clears(v, g, NULL);
  if (!ok) return o3m_err_set(e, O3M_ECORRUPT, "paillier: ciphertext is not a unit mod n^2");
  return 0;
}

int bl_paillier_noise(const bl_paillier *k, mpz_ptr rn, o3m_err *e) {
  int rc = rand_unit(k, rn, e);
  if (rc) return rc;
  mpz_powm(rn, rn, k->n, k->n2);
  return 0;
}

/* Checks |m| < n/2 so that decryption returns m itself. */
static int check_plain(const bl_paillier *k, mpz_srcptr m, o3m_err *e) {
  if (mpz_cmpabs(m, k->half) >= 0)
    return o3m_err_set(e, O3M_ERANGE, "paillier: plaintext of %zu bits does not fit a %d-bit key",
                       mpz_sizeinbase(m, 2), k->bits);
  return 0;
}

int bl_paillier_encrypt_noise(const bl_paillier *k, mpz_srcptr m, mpz_srcptr rn, bl_pct *c,
                              o3m_err *e) {
  int rc = check_plain(k, m, e);
  if (rc) return rc;
  /* g^m = (1 + n)^m = 1 + m n mod n^2. */
  mpz_t t;
  mpz_init(t);
  mpz_mul(t, m, k->n);
  mpz_add_ui(t, t, 1);
  mpz_mul(t, t, rn);
  mpz_mod(c->c, t, k->n2);
  mpz_clear(t);
  return 0;
}

int bl_paillier_encrypt(const bl_paillier *k, mpz_srcptr m, bl_pct *c, o3m_err *e) {
  int rc = check_plain(k, m, e);
  if (rc) return rc;
  mpz_t rn;
  mpz_init(rn);
  rc = bl_paillier_noise(k, rn, e);
  if (!rc) rc = bl_paillier_encrypt_noise(k, m, rn, c, e);
  mpz_clear(rn);
  return rc;
}

int bl_paillier_encrypt_i64(const bl_paillier *k, int64_t m, bl_pct *c, o3m_err *e) {
  mpz_t t;
  mpz_init_set_si(t, (long)m);
  int rc = bl_paillier_encrypt(k, t, c, e);
  mpz_clear(t);
  return rc;
}

int bl_paillier_encrypt_r(const bl_paillier *k, mpz_srcptr m, mpz_srcptr r, bl_pct *c,
                          o3m_err *e) {
  mpz_t g, rn;
  mpz_inits(g, rn, NULL);
  mpz_gcd(g, r, k->n);
  int rc = 0;
  if (mpz_sgn(r) <= 0 || mpz_cmp(r, k->n) >= 0 || mpz_cmp_ui(g, 1) != 0)
    rc = o3m_err_set(e, O3M_EINVAL, "paillier: r must be in Z_n^*");
  if (!rc) {
    mpz_powm(rn, r, k->n, k->n2);
    rc = bl_paillier_encrypt_noise(k, m, rn, c, e);
  }
  mpz_clears(g, rn, NULL);
  return rc;
}

int bl_paillier_decrypt(const bl_paillier *k, const bl_pct *c, mpz_ptr m, o3m_err *e) {
  if (!k->has_secret)
    return o3m_err_set(e, O3M_ESTATE, "paillier: decryption needs the secret key");
  mpz_t mp, mq, ex;
  mpz_inits(mp, mq, ex, NULL);
  /* m_p = L_p(c^(p-1) mod p^2) h_p mod p, likewise m_q. */
  mpz_sub_ui(ex, k->p, 1);
  mpz_powm_sec(mp, c->c, ex, k->p2);
  ell(mp, mp, k->p);
  mpz_mul(mp, mp, k->hp);
  mpz_mod(mp, mp, k->p);
  mpz_sub_ui(ex, k->q, 1);
  mpz_powm_sec(mq, c->c, ex, k->q2);
  ell(mq, mq, k->q);
  mpz_mul(mq, mq, k->hq);
  mpz_mod(mq, mq, k->q);
  /* m = m_q + q ((m_p - m_q) q^-1 mod p), in [0, n). */
  mpz_sub(mp, mp, mq);
  mpz_mul(mp, mp, k->qinv_p);
  mpz_mod(mp, mp, k->p);
  mpz_mul(mp, mp, k->q);
  mpz_add(m, mp, mq);
  if (mpz_cmp(m, k->half) > 0) mpz_sub(m, m, k->n);
  wipe_clear(mp);
  wipe_clear(mq);
  wipe_clear(ex);
  return 0;
}

int bl_paillier_decrypt_i64(const bl_paillier *k, const bl_pct *c, int64_t *m, o3m_err *e) {
  mpz_t t;
  mpz_init(t);
  int rc = bl_paillier_decrypt(k, c, t, e);
  if (!rc && !mpz_fits_slong_p(t))
    rc = o3m_err_set(e, O3M_ERANGE, "paillier: plaintext of %zu bits does not fit int64",
                     mpz_sizeinbase(t, 2));
  if (!rc) *m = (int64_t)mpz_get_si(t);
  mpz_clear(t);
  return rc;
}

void bl_paillier_add(const bl_paillier *k, bl_pct *out, const bl_pct *a, const bl_pct *b) {
  mpz_mul(out->c, a->c, b->c);
  mpz_mod(out->c, out->c, k->n2);
}

void bl_paillier_add_plain(const bl_paillier *k, bl_pct *out, const bl_pct *a, mpz_srcptr m) {
  mpz_t t;
  mpz_init(t);
  mpz_mod(t, m, k->n); /* the plaintext's representative in [0, n) */
  mpz_mul(t, t, k->n);
  mpz_add_ui(t, t, 1);
  mpz_mul(out->c, a->c, t);
  mpz_mod(out->c, out->c, k->n2);
  mpz_clear(t);
}

int bl_paillier_mul(const bl_paillier *k, bl_pct *out, const bl_pct *a, mpz_srcptr s,
                    o3m_err *e) {
  mpz_t b, t;
  mpz_inits(b, t, NULL);
  int rc = 0;
  /* A scalar beyond n/2 in magnitude is first reduced to its signed
   * representative: the plaintext only sees s mod n. */
  mpz_set(t, s);
  if (mpz_cmpabs(t, k->half) > 0) {
    mpz_mod(t, t, k->n);
    if (mpz_cmp(t, k->half) > 0) mpz_sub(t, t, k->n);
  }
  if (mpz_sgn(t) < 0) {
    if (!mpz_invert(b, a->c, k->n2))
      rc = o3m_err_set(e, O3M_ECORRUPT, "paillier: ciphertext is not invertible mod n^2");
    mpz_neg(t, t);
  } else {
    mpz_set(b, a->c);
  }
  if (!rc) mpz_powm(out->c, b, t, k->n2);
  mpz_clears(b, t, NULL);
  return rc;
}

int bl_paillier_mul_i64(const bl_paillier *k, bl_pct *out, const bl_pct *a, int64_t s,
                        o3m_err *e) {
  mpz_t t;
  mpz_init_set_si(t, (long)s);
  int rc = bl_paillier_mul(k, out, a, t, e);
  mpz_clear(t);
  return rc;
}

int bl_paillier_encode(double v, int frac_bits, mpz_ptr out, o3m_err *e) {
  if (!isfinite(v)) return o3m_err_set(e, O3M_ENONFINITE, "paillier: cannot encode %g", v);
  if (frac_bits < 0 || frac_bits > 512)
    return o3m_err_set(e, O3M_EINVAL, "paillier: fractional bits must be in [0, 512], got %d",
                       frac_bits);
  /* v = f 2^x with f in [0.5, 1): take 53 bits of f exactly, then shift. */
  int x;
  double f = frexp(v, &x);
  mpz_set_d(out, ldexp(f, 53));
  long sh = (long)x - 53 + frac_bits;
  if (sh >= 0) {
    mpz_mul_2exp(out, out, (mp_bitcnt_t)sh);
  } else {
    /* round half away from zero: add half of the dropped unit, truncate */
    int neg = mpz_sgn(out) < 0;
    mpz_abs(out, out);
    if (-sh <= 60) {
      mpz_add_ui(out, out, 1UL << (-sh - 1));
      mpz_fdiv_q_2exp(out, out, (mp_bitcnt_t)-sh);
    } else {
      mpz_set_ui(out, 0);
    }
    if (neg) mpz_neg(out, out);
  }
  return 0;
}

int bl_paillier_encode_i64(double v, int frac_bits, int64_t *out, o3m_err *e) {
  mpz_t t;
  mpz_init(t);
  int rc = bl_paillier_encode(v, frac_bits, t, e);
  if (!rc && mpz_sizeinbase(t, 2) > 62)
    rc = o3m_err_set(e, O3M_ERANGE, "paillier: %g at %d fractional bits exceeds 2^62", v,
                     frac_bits);
  if (!rc) *out = (int64_t)mpz_get_si(t);
  mpz_clear(t);
  return rc;
}

double bl_paillier_decode(mpz_srcptr m, int frac_bits) {
  long ex;
  double f = mpz_get_d_2exp(&ex, m); /* m = f 2^ex, |f| in [0.5, 1), truncated */
  return ldexp(f, (int)(ex - frac_bits));
}
