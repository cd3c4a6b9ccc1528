/* o3m_hash_keyed.h -- the keyed hash of ids that someone else chooses.
 *
 * SipHash-2-4 (libsodium's crypto_shorthash), a pseudo-random function of
 * its 16-byte key: without the key no one can tell its values from random
 * ones, nor search offline for ids that share a value. Used where an id
 * comes from outside the process: the AP's item cache (it keeps the parts
 * of any item id a client names, unknown ones included) and the duplicate
 * check of a request's ids, each under a random key of its own, where the
 * unkeyed table hash (common/o3m_hash.h) would let anyone pick ids that
 * pile into one bucket, for example a popular real item's, and make every
 * lookup there walk a long chain; and a passive party's dummy rows
 * (party/o3m_features.h), seeded by the hash of the id under the party's
 * dummy-row key, so that the AP cannot tell them from draws of the table's
 * distribution nor compute them. */
#ifndef O3M_HASH_KEYED_H
#define O3M_HASH_KEYED_H

#include <sodium.h>
#include <stddef.h>
#include <stdint.h>

/* The key of one keyed hash. A table's is drawn at random when the table is
 * made (o3m_hash_key_new); a dummy-row key is the party's own. It never
 * leaves the process and is wiped when its owner is destroyed
 * (o3m_hash_key_wipe). */
typedef struct o3m_hash_key {
  unsigned char k[crypto_shorthash_KEYBYTES];
} o3m_hash_key;

/* Draws a fresh key from libsodium's generator; -1 if libsodium cannot
 * start. */
static inline int o3m_hash_key_new(o3m_hash_key *key) {
  if (sodium_init() < 0) return -1;
  randombytes_buf(key->k, sizeof key->k);
  return 0;
}

static inline void o3m_hash_key_wipe(o3m_hash_key *key) { sodium_memzero(key->k, sizeof key->k); }

/* SipHash-2-4 of buf under key as a 64-bit number, its 8 bytes read
 * little-endian (as the SipHash paper defines the output), so that a key
 * gives the same values, and a party the same dummy rows, on every host. */
static inline uint64_t o3m_hash_keyed(const o3m_hash_key *key, const void *buf, size_t n) {
  unsigned char out[crypto_shorthash_BYTES];
  crypto_shorthash(out, buf, n, key->k);
  uint64_t h = 0;
  for (int i = 0; i < 8; i++) h |= (uint64_t)out[i] << (8 * i);
  sodium_memzero(out, sizeof out);
  return h;
}

#endif
