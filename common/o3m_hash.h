/* o3m_hash.h -- the one string hash of O3M's in-memory tables.
 *
 * 64-bit FNV-1a over the bytes, started from the FNV offset basis XORed with
 * a salt, then the splitmix64 finalizer, so that every bit of the result
 * (the low ones that index a power-of-two table included) depends on every
 * input byte. Not keyed and not meant to resist chosen inputs, so it serves
 * the tables whose keys the operator or the process itself chooses: the
 * feature tables' id index, the catalog, decision ids (which the AP makes),
 * and the two hashes that must be the same in every process (a replica's
 * tag, the OBD reader's buckets). Where someone else chooses the ids (a
 * client's item ids, the ids a passive party's dummy rows are drawn for)
 * the keyed hash of crypto/o3m_hash_keyed.h serves instead. */
#ifndef O3M_HASH_H
#define O3M_HASH_H

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

#endif
