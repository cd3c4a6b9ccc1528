/*
 * bl_paillier: the Paillier cryptosystem over GMP, for the HE baseline
 * (bl_he.h) and the papers' reproductions (Samba) that need additively
 * homomorphic encryption.
 *
 * A key is n = p q with p, q primes of bits/2 bits each (2048-bit n by
 * default; smaller moduli exist only for tests), generator g = n + 1.
 * Encryption of m in Z_n is c = (1 + m n) r^n mod n^2 for a random r in
 * Z_n^*; decryption uses the Chinese remainder theorem over p^2 and q^2
 * (Paillier 1999, section 7). Adding plaintexts multiplies ciphertexts;
 * multiplying a plaintext by a scalar s raises the ciphertext to s (a
 * negative s through the inverse of the ciphertext, so the exponent stays
 * short). Plaintexts are signed: m and m + n are the same plaintext, and
 * decryption returns the representative in (-n/2, n/2].
 *
 * Randomness (the primes and every r) comes from OpenSSL's RAND_bytes, a
 * CSPRNG. The primes are the next primes after uniform random numbers with
 * their two top bits set (so n has exactly `bits` bits), checked with 40
 * Miller-Rabin rounds on top of GMP's BPSW test.
 *
 * Handles are opaque. A bl_paillier holds a public key and, if it was made
 * by keygen or from primes, the secret key; bl_paillier_free() overwrites
 * the secret numbers' limbs with OPENSSL_cleanse before freeing them. Not
 * hidden: GMP's own temporaries (intermediate results that GMP reallocates
 * and frees inside mpz_powm) are released without wiping, because GMP's
 * allocator is process-wide and this module does not replace it.
 *
 * Thread safety: a key may be used from several threads at once for
 * encryption, homomorphic operations and decryption (nothing in it is
 * modified after construction); a ciphertext must not be written by two
 * threads at once.
 */
#ifndef BL_PAILLIER_H
#define BL_PAILLIER_H

#include <gmp.h>
#include <stddef.h>
#include <stdint.h>

#include "o3m_error.h"

/* The modulus size the baselines use, as O3M's paper states. */
#define BL_PAILLIER_BITS 2048
/* The smallest modulus keygen accepts (tests only: nothing this small is
 * secure). */
#define BL_PAILLIER_MIN_BITS 64

typedef struct bl_paillier bl_paillier; /* a public key, with or without its secret key */
typedef struct bl_pct bl_pct;           /* one ciphertext, an element of Z_{n^2}^* */

/* --- keys --- */

/* Generates a key with an n of exactly `bits` bits (even, at least
 * BL_PAILLIER_MIN_BITS). On success *out owns the new key (free with
 * bl_paillier_free); on failure *out is NULL. O3M_ERANDOM if RAND_bytes
 * fails. A 2048-bit key takes about a second. */
int bl_paillier_keygen(int bits, bl_paillier **out, o3m_err *e);

/* A key from given primes p != q (both must pass the primality test, and
 * gcd(pq, (p-1)(q-1)) must be 1): known-answer tests use tiny ones. The
 * numbers are copied. */
int bl_paillier_from_primes(mpz_srcptr p, mpz_srcptr q, bl_paillier **out, o3m_err *e);

/* A copy of k's public key only (what the encrypting parties hold). */
int bl_paillier_public(const bl_paillier *k, bl_paillier **out, o3m_err *e);

/* Wipes the secret key and frees k. NULL is accepted. */
void bl_paillier_free(bl_paillier *k);

/* The number of bits of n, and whether k can decrypt. */
int bl_paillier_bits(const bl_paillier *k);
int bl_paillier_has_secret(const bl_paillier *k);
/* Sets n_out to n. */
void bl_paillier_modulus(const bl_paillier *k, mpz_ptr n_out);

/* Bytes of one serialized ciphertext (fixed length: the byte length of n^2)
 * and of one serialized plaintext or public key (the byte length of n): what
 * the baselines count per value sent. */
size_t bl_paillier_ct_size(const bl_paillier *k);
size_t bl_paillier_pt_size(const bl_paillier *k);

/* --- ciphertexts --- */

/* A new ciphertext for key k, holding 1 (an encryption of 0 with r = 1: not
 * hiding; assign before sending). *out is NULL on failure. */
int bl_pct_new(const bl_paillier *k, bl_pct **out, o3m_err *e);
void bl_pct_free(bl_pct *c);
/* dst = src. */
void bl_pct_copy(bl_pct *dst, const bl_pct *src);
/* Sets v to the ciphertext's value in [0, n^2) (known-answer tests). */
void bl_pct_value(const bl_pct *c, mpz_ptr v);

/* Writes c as exactly bl_paillier_ct_size(k) big-endian bytes to buf. */
void bl_pct_serialize(const bl_paillier *k, const bl_pct *c, uint8_t *buf);
/* Reads a ciphertext written by bl_pct_serialize; O3M_EINVAL if len is not
 * bl_paillier_ct_size(k), O3M_ECORRUPT if the value is not in Z_{n^2}^*
 * (zero, at least n^2, or sharing a factor with n). c is unchanged on
 * failure. */
int bl_pct_parse(const bl_paillier *k, const uint8_t *buf, size_t len, bl_pct *c, o3m_err *e);

/* --- encryption and decryption --- */

/* Sets rn = r^n mod n^2 for a fresh random r in Z_n^*: the only expensive
 * part of encryption, independent of the message, so a party can precompute
 * it offline. */
int bl_paillier_noise(const bl_paillier *k, mpz_ptr rn, o3m_err *e);

/* c = Enc(m) with fresh randomness. m is signed; O3M_ERANGE if |m| >= n/2
 * (c unchanged). */
int bl_paillier_encrypt(const bl_paillier *k, mpz_srcptr m, bl_pct *c, o3m_err *e);
int bl_paillier_encrypt_i64(const bl_paillier *k, int64_t m, bl_pct *c, o3m_err *e);
/* c = (1 + m n) rn mod n^2 with rn from bl_paillier_noise (use each rn once). */
int bl_paillier_encrypt_noise(const bl_paillier *k, mpz_srcptr m, mpz_srcptr rn, bl_pct *c,
                              o3m_err *e);
/* c = (1 + m n) r^n mod n^2 with the caller's r (known-answer tests only:
 * a reused or guessable r breaks the encryption). O3M_EINVAL if r is not in
 * Z_n^*. */
int bl_paillier_encrypt_r(const bl_paillier *k, mpz_srcptr m, mpz_srcptr r, bl_pct *c,
                          o3m_err *e);

/* m = Dec(c) in (-n/2, n/2]. O3M_ESTATE if k has no secret key. */
int bl_paillier_decrypt(const bl_paillier *k, const bl_pct *c, mpz_ptr m, o3m_err *e);
/* The same into an int64_t; O3M_ERANGE if the plaintext does not fit. */
int bl_paillier_decrypt_i64(const bl_paillier *k, const bl_pct *c, int64_t *m, o3m_err *e);

/* --- homomorphic operations (out may alias the inputs) --- */

/* Enc(a + b) = a b mod n^2. */
void bl_paillier_add(const bl_paillier *k, bl_pct *out, const bl_pct *a, const bl_pct *b);
/* Enc(a + m) for a plaintext m (signed): a (1 + m n) mod n^2, no
 * exponentiation. */
void bl_paillier_add_plain(const bl_paillier *k, bl_pct *out, const bl_pct *a, mpz_srcptr m);
/* Enc(s a) = a^s mod n^2 for a signed scalar s (a^(-s) of the inverse when s
 * is negative). O3M_ECORRUPT if a is not invertible mod n^2 (out unchanged). */
int bl_paillier_mul(const bl_paillier *k, bl_pct *out, const bl_pct *a, mpz_srcptr s,
                    o3m_err *e);
int bl_paillier_mul_i64(const bl_paillier *k, bl_pct *out, const bl_pct *a, int64_t s,
                        o3m_err *e);

/* x = a uniform random integer in [0, 2^bits) from RAND_bytes (masks of
 * the protocols built on this module). O3M_ERANDOM if RAND_bytes fails. */
int bl_paillier_random_bits(mpz_ptr x, int bits, o3m_err *e);

/* --- signed fixed point --- */

/* out = round(v 2^frac_bits). O3M_ENONFINITE for NaN or infinities,
 * O3M_EINVAL for frac_bits outside [0, 512]. */
int bl_paillier_encode(double v, int frac_bits, mpz_ptr out, o3m_err *e);
/* The same into an int64_t; O3M_ERANGE if |v| 2^frac_bits >= 2^62. */
int bl_paillier_encode_i64(double v, int frac_bits, int64_t *out, o3m_err *e);
/* m 2^-frac_bits as a double (rounded; m may exceed 64 bits). */
double bl_paillier_decode(mpz_srcptr m, int frac_bits);

#endif
