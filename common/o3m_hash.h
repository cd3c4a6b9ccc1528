/* o3m_hash.h -- the one string hash of O3M's in-memory tables.
 *
 * 64-bit FNV-1a over the bytes, started from the FNV offset basis XORed with
 * a salt, then the splitmix64 finalizer, so that every bit of the result
 * (the low ones that index a power-of-two table included) depends on every
 * input byte. Not keyed and not meant to resist chosen inputs, so it serves
 * the tables whose keys the operator or the process itself chooses: the
 * feature tables' id index, the catalog, decision ids (which the AP makes),
 * and the two hashes that must be the same in every process (a replica's
 * tag, the OBD reader's buckets). Where an attacker-chosen id must not be
 * predictable (the passive party's dummy rows) o3m_features uses keyed
 * SipHash instead.
 *
 * A table whose keys a client chooses takes the keyed hash below instead:
 * the AP's item cache (it keeps the parts of any item id a client names,
 * unknown ones included) and the duplicate check of a request's ids. With
 * the unkeyed hash, anyone can search offline for ids that fall into one
 * bucket (for example the bucket of a popular real item) and make every
 * lookup there walk a long chain. */
#ifndef O3M_HASH_H
#define O3M_HASH_H

#include <sodium.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline uint64_t o3m_hash_bytes(const void *buf, size_t n, uint64_t salt) {
  const unsigned char *s = buf;
  uint64_t h = 0xcbf29ce484222325ull ^ salt;
  for (size_t i = 0; i < n; i++) {
    h ^= s[i];
    h *= 0x100000001b3ull;
  }
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return h;
}

/* The key of one table's keyed hash: drawn at random when the table is
 * made, never leaves the process, wiped when the table is destroyed. */
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

/* SipHash-2-4 of buf under key (libsodium's crypto_shorthash), as a
 * 64-bit number. */
static inline uint64_t o3m_hash_keyed(const o3m_hash_key *key, const void *buf, size_t n) {
  unsigned char out[crypto_shorthash_BYTES];
  uint64_t h;
  crypto_shorthash(out, buf, n, key->k);
  memcpy(&h, out, sizeof h);
  return h;
}

#endif
