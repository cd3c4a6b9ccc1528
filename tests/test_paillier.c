/* test_paillier.c -- the Paillier module (eval/peers/paillier/bl_paillier.h).
 *
 * Known answers on a tiny key, p = 17, q = 19 (n = 323, n^2 = 104329,
 * g = n + 1), each ciphertext worked out by hand from c = (1 + m n) r^n mod
 * n^2 and checked digit for digit:
 *   23^323 mod 104329 = 4755, 29^323 mod 104329 = 16722;
 *   Enc(42; r = 23) = (1 + 42 * 323) * 4755 = 13567 * 4755 mod n^2 = 35763;
 *   Enc(-5; r = 29) = (1 + 318 * 323) * 16722 = 102715 * 16722 mod n^2 = 31903;
 *   their sum: 35763 * 31903 mod n^2 = 5045, decrypting to 37;
 *   3 * Enc(42): 35763^3 mod n^2 = 82053, decrypting to 126;
 *   -2 * Enc(42): (35763^-1)^2 mod n^2 = 21163, decrypting to -84;
 *   Enc(42) + 100: 35763 * (1 + 100 * 323) mod n^2 = 49975, decrypting to 142;
 *   4 * Enc(42): 35763^4 mod n^2 = 103985, decrypting to 168 = -155 mod 323
 *   (past n/2 = 161, so the signed representative is negative).
 * Then a 2048-bit key: exact size, round trips of signed values, the
 * homomorphic properties on random values, serialization, fixed point, and
 * the refusals (too-large plaintext, decryption without the secret key,
 * corrupt ciphertext, bad key sizes and primes). */
#include <criterion/criterion.h>
#include <math.h>
#include <openssl/rand.h>
#include <stdlib.h>

#include "bl_paillier.h"

static bl_paillier *tiny(void) {
  mpz_t p, q;
  mpz_init_set_ui(p, 17);
  mpz_init_set_ui(q, 19);
  bl_paillier *k = NULL;
  o3m_err e;
  int rc = bl_paillier_from_primes(p, q, &k, &e);
  cr_assert_eq(rc, 0, "from_primes: %s", e.msg);
  mpz_clears(p, q, NULL);
  return k;
}

static void enc_r(const bl_paillier *k, long m, unsigned long r, bl_pct *c) {
  mpz_t mm, rr;
  mpz_init_set_si(mm, m);
  mpz_init_set_ui(rr, r);
  o3m_err e;
  cr_assert_eq(bl_paillier_encrypt_r(k, mm, rr, c, &e), 0, "%s", e.msg);
  mpz_clears(mm, rr, NULL);
}

static unsigned long value(const bl_pct *c) {
  mpz_t v;
  mpz_init(v);
  bl_pct_value(c, v);
  unsigned long x = mpz_get_ui(v);
  mpz_clear(v);
  return x;
}

static long dec(const bl_paillier *k, const bl_pct *c) {
  int64_t m = 0;
  o3m_err e;
  cr_assert_eq(bl_paillier_decrypt_i64(k, c, &m, &e), 0, "%s", e.msg);
  return (long)m;
}

Test(paillier, tiny_key_known_answers) {
  bl_paillier *k = tiny();
  cr_assert_eq(bl_paillier_bits(k), 9); /* 323 < 512 */
  cr_assert_eq(bl_paillier_ct_size(k), 3);
  bl_pct *a, *b, *s;
  cr_assert_eq(bl_pct_new(k, &a, NULL), 0);
  cr_assert_eq(bl_pct_new(k, &b, NULL), 0);
  cr_assert_eq(bl_pct_new(k, &s, NULL), 0);
  enc_r(k, 42, 23, a);
  cr_assert_eq(value(a), 35763, "Enc(42;23) = %lu", value(a));
  enc_r(k, -5, 29, b);
  cr_assert_eq(value(b), 31903, "Enc(-5;29) = %lu", value(b));
  cr_assert_eq(dec(k, a), 42);
  cr_assert_eq(dec(k, b), -5);

  bl_paillier_add(k, s, a, b);
  cr_assert_eq(value(s), 5045, "sum = %lu", value(s));
  cr_assert_eq(dec(k, s), 37);

  cr_assert_eq(bl_paillier_mul_i64(k, s, a, 3, NULL), 0);
  cr_assert_eq(value(s), 82053, "3 Enc(42) = %lu", value(s));
  cr_assert_eq(dec(k, s), 126);

  cr_assert_eq(bl_paillier_mul_i64(k, s, a, -2, NULL), 0);
  cr_assert_eq(value(s), 21163, "-2 Enc(42) = %lu", value(s));
  cr_assert_eq(dec(k, s), -84);
  /* The modular encoding of -2, n - 2 = 321, is the same scalar: it is
   * reduced to its signed representative and gives the same product. */
  cr_assert_eq(bl_paillier_mul_i64(k, s, a, 321, NULL), 0);
  cr_assert_eq(value(s), 21163, "321 Enc(42) = %lu", value(s));
  cr_assert_eq(dec(k, s), -84);

  mpz_t h;
  mpz_init_set_ui(h, 100);
  bl_paillier_add_plain(k, s, a, h);
  cr_assert_eq(value(s), 49975, "Enc(42) + 100 = %lu", value(s));
  cr_assert_eq(dec(k, s), 142);

  cr_assert_eq(bl_paillier_mul_i64(k, s, a, 4, NULL), 0);
  cr_assert_eq(value(s), 103985, "4 Enc(42) = %lu", value(s));
  cr_assert_eq(dec(k, s), -155);

  /* Out of the signed range (|m| >= n/2 = 161): refused, c unchanged. */
  o3m_err e;
  mpz_set_ui(h, 161);
  bl_pct_copy(s, a);
  cr_assert_eq(bl_paillier_encrypt(k, h, s, &e), O3M_ERANGE);
  cr_assert_eq(value(s), 35763);
  /* r outside Z_n^* (a multiple of 17) is refused. */
  mpz_t m, r;
  mpz_init_set_ui(m, 1);
  mpz_init_set_ui(r, 34);
  cr_assert_eq(bl_paillier_encrypt_r(k, m, r, s, &e), O3M_EINVAL);
  mpz_clears(h, m, r, NULL);
  bl_pct_free(a);
  bl_pct_free(b);
  bl_pct_free(s);
  bl_paillier_free(k);
}

Test(paillier, bad_primes_and_sizes) {
  mpz_t p, q;
  mpz_init_set_ui(p, 17);
  mpz_init_set_ui(q, 21);
  bl_paillier *k = (bl_paillier *)1;
  o3m_err e;
  cr_assert_eq(bl_paillier_from_primes(p, q, &k, &e), O3M_EINVAL);
  cr_assert_null(k);
  mpz_set_ui(q, 17);
  cr_assert_eq(bl_paillier_from_primes(p, q, &k, &e), O3M_EINVAL);
  /* p = 3, q = 7: (p-1)(q-1) = 12 shares 3 with n = 21. */
  mpz_set_ui(p, 3);
  mpz_set_ui(q, 7);
  cr_assert_eq(bl_paillier_from_primes(p, q, &k, &e), O3M_EINVAL);
  mpz_clears(p, q, NULL);
  cr_assert_eq(bl_paillier_keygen(63, &k, &e), O3M_EINVAL);
  cr_assert_eq(bl_paillier_keygen(32, &k, &e), O3M_EINVAL);
}

static bl_paillier *big;
static void setup_big(void) {
  o3m_err e;
  int rc = bl_paillier_keygen(BL_PAILLIER_BITS, &big, &e);
  cr_assert_eq(rc, 0, "keygen: %s", e.msg);
}
static void teardown_big(void) { bl_paillier_free(big); }

static void rand_signed(mpz_ptr x, int bits) {
  unsigned char buf[64];
  cr_assert(bits <= 8 * (int)sizeof buf - 1);
  cr_assert_eq(RAND_bytes(buf, sizeof buf), 1);
  mpz_import(x, sizeof buf, 1, 1, 1, 0, buf);
  mpz_fdiv_r_2exp(x, x, (mp_bitcnt_t)bits);
  if (buf[0] & 1) mpz_neg(x, x);
}

Test(paillier, key_2048_round_trips_and_homomorphism, .init = setup_big, .fini = teardown_big,
     .timeout = 300) {
  cr_assert_eq(bl_paillier_bits(big), 2048);
  cr_assert_eq(bl_paillier_ct_size(big), 512);
  cr_assert_eq(bl_paillier_pt_size(big), 256);
  mpz_t a, b, s, m, got;
  mpz_inits(a, b, s, m, got, NULL);
  bl_pct *ca, *cb, *cs;
  cr_assert_eq(bl_pct_new(big, &ca, NULL), 0);
  cr_assert_eq(bl_pct_new(big, &cb, NULL), 0);
  cr_assert_eq(bl_pct_new(big, &cs, NULL), 0);
  o3m_err e;
  for (int t = 0; t < 6; t++) {
    rand_signed(a, 400);
    rand_signed(b, 400);
    rand_signed(s, 100);
    cr_assert_eq(bl_paillier_encrypt(big, a, ca, &e), 0, "%s", e.msg);
    cr_assert_eq(bl_paillier_encrypt(big, b, cb, &e), 0, "%s", e.msg);
    cr_assert_eq(bl_paillier_decrypt(big, ca, got, &e), 0, "%s", e.msg);
    cr_assert(mpz_cmp(got, a) == 0, "round trip %d", t);
    bl_paillier_add(big, cs, ca, cb);
    cr_assert_eq(bl_paillier_decrypt(big, cs, got, &e), 0);
    mpz_add(m, a, b);
    cr_assert(mpz_cmp(got, m) == 0, "sum %d", t);
    cr_assert_eq(bl_paillier_mul(big, cs, ca, s, &e), 0);
    cr_assert_eq(bl_paillier_decrypt(big, cs, got, &e), 0);
    mpz_mul(m, a, s);
    cr_assert(mpz_cmp(got, m) == 0, "scalar product %d (sign of s %d)", t, mpz_sgn(s));
    bl_paillier_add_plain(big, cs, ca, b);
    cr_assert_eq(bl_paillier_decrypt(big, cs, got, &e), 0);
    mpz_add(m, a, b);
    cr_assert(mpz_cmp(got, m) == 0, "plain sum %d", t);
  }
  /* Fresh randomness: two encryptions of the same value differ. */
  cr_assert_eq(bl_paillier_encrypt(big, a, ca, &e), 0);
  cr_assert_eq(bl_paillier_encrypt(big, a, cb, &e), 0);
  mpz_t va, vb;
  mpz_inits(va, vb, NULL);
  bl_pct_value(ca, va);
  bl_pct_value(cb, vb);
  cr_assert(mpz_cmp(va, vb) != 0);
  /* Serialization round trip, and a corrupt buffer is refused. */
  uint8_t buf[512];
  bl_pct_serialize(big, ca, buf);
  cr_assert_eq(bl_pct_parse(big, buf, sizeof buf, cs, &e), 0, "%s", e.msg);
  bl_pct_value(cs, vb);
  cr_assert(mpz_cmp(va, vb) == 0);
  cr_assert_eq(bl_pct_parse(big, buf, 511, cs, &e), O3M_EINVAL);
  for (size_t i = 0; i < sizeof buf; i++) buf[i] = 0xff; /* >= n^2 */
  cr_assert_eq(bl_pct_parse(big, buf, sizeof buf, cs, &e), O3M_ECORRUPT);
  /* A public copy encrypts but cannot decrypt. */
  bl_paillier *pub;
  cr_assert_eq(bl_paillier_public(big, &pub, &e), 0);
  cr_assert_eq(bl_paillier_has_secret(pub), 0);
  cr_assert_eq(bl_paillier_encrypt_i64(pub, -123456789, ca, &e), 0);
  cr_assert_eq(bl_paillier_decrypt(pub, ca, got, &e), O3M_ESTATE);
  int64_t v = 0;
  cr_assert_eq(bl_paillier_decrypt_i64(big, ca, &v, &e), 0);
  cr_assert_eq(v, -123456789);
  /* Precomputed noise encrypts the same way. */
  cr_assert_eq(bl_paillier_noise(pub, m, &e), 0);
  mpz_set_si(a, -77);
  cr_assert_eq(bl_paillier_encrypt_noise(pub, a, m, ca, &e), 0);
  cr_assert_eq(bl_paillier_decrypt_i64(big, ca, &v, &e), 0);
  cr_assert_eq(v, -77);
  /* A plaintext beyond int64 is reported, not truncated. */
  mpz_ui_pow_ui(a, 2, 70);
  cr_assert_eq(bl_paillier_encrypt(pub, a, ca, &e), 0);
  cr_assert_eq(bl_paillier_decrypt_i64(big, ca, &v, &e), O3M_ERANGE);
  bl_paillier_free(pub);
  mpz_clears(a, b, s, m, got, va, vb, NULL);
  bl_pct_free(ca);
  bl_pct_free(cb);
  bl_pct_free(cs);
}

Test(paillier, fixed_point) {
  mpz_t m;
  mpz_init(m);
  cr_assert_eq(bl_paillier_encode(1.5, 4, m, NULL), 0);
  cr_assert_eq(mpz_get_si(m), 24);
  cr_assert_eq(bl_paillier_encode(-0.3, 10, m, NULL), 0);
  cr_assert_eq(mpz_get_si(m), -307, "got %ld", mpz_get_si(m)); /* -307.2 */
  cr_assert_eq(bl_paillier_encode(1e30, 100, m, NULL), 0);
  cr_assert_float_eq(bl_paillier_decode(m, 100), 1e30, 1e15);
  cr_assert_eq(bl_paillier_encode(3.0e-9, 0, m, NULL), 0);
  cr_assert_eq(mpz_sgn(m), 0);
  double xs[] = {0.0, 1.0, -1.0, 0.123456789, -98765.4321, 1e-6};
  for (size_t i = 0; i < sizeof xs / sizeof xs[0]; i++) {
    cr_assert_eq(bl_paillier_encode(xs[i], 40, m, NULL), 0);
    double back = bl_paillier_decode(m, 40);
    cr_assert(fabs(back - xs[i]) <= ldexp(1.0, -41), "%g -> %g", xs[i], back);
  }
  int64_t v;
  cr_assert_eq(bl_paillier_encode_i64(-2.5, 8, &v, NULL), 0);
  cr_assert_eq(v, -640);
  cr_assert_eq(bl_paillier_encode_i64(1e10, 40, &v, NULL), O3M_ERANGE);
  cr_assert_eq(bl_paillier_encode(NAN, 8, m, NULL), O3M_ENONFINITE);
  cr_assert_eq(bl_paillier_encode(1.0, -1, m, NULL), O3M_EINVAL);
  mpz_clear(m);
}
