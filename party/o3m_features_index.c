/* o3m_features_index.c -- the id index of a feature table
 * (o3m_features_internal.h).
 *
 * The index is open addressing with linear probing over slots of {tag, row+1}
 * (row+1 == 0 marks an empty slot; tag is the upper half of the 64-bit hash,
 * compared before the id string). The capacity is a power of two at least
 * twice the number of rows. The hash is 64-bit FNV-1a followed by the
 * splitmix64 finalizer, which spreads the low bits used as the slot index.
 * The ids are the participant's own, so an outsider cannot choose colliding
 * keys for the table; lookups of foreign ids only probe. */
#include <stdlib.h>
#include <string.h>

#include "o3m_alloc.h"
#include "o3m_features_internal.h"
#include "o3m_hash.h"

/* ------------------------------------------------------------------ index */

static uint64_t id_hash(const char *s, size_t n) { return o3m_hash_bytes(s, n, 0); }

/* The row of id, or -1. Ids longer than O3M_MAX_ID are never
 * stored, so they are not found without hashing all of them. If decoy is
 * not NULL it receives a row that the id's hash picks (0 for an id too
 * long or an empty table): fill reads it for an unknown id, so that a known
 * and an unknown id both read one row at a place the id determines, not a
 * random row against the same cached one. */
long table_find(const ft_table *t, const char *id, size_t *decoy) {
  size_t n = strnlen(id, O3M_MAX_ID + 1);
  if (decoy) *decoy = 0;
  if (n > O3M_MAX_ID || !t->slots) return -1;
  uint64_t h = id_hash(id, n);
  /* A multiply-shift instead of h % n_rows: no division, whose time may
   * depend on its operands; n_rows < 2^32. */
  if (decoy) *decoy = (size_t)(((h & 0xffffffffu) * (uint64_t)t->n_rows) >> 32);
  uint32_t tag = (uint32_t)(h >> 32);
  for (size_t i = (size_t)h & t->mask;; i = (i + 1) & t->mask) {
    ft_slot s = t->slots[i];
    if (!s.row1) return -1;
    if (s.tag == tag && strcmp(row_id(t, (int)(s.row1 - 1)), id) == 0)
      return (long)s.row1 - 1;
  }
}

/* Places row (whose id is already in the pool) into slots without a
 * duplicate check; the caller guarantees room. */
void slot_put(ft_slot *slots, size_t mask, const char *id, int row) {
  uint64_t h = id_hash(id, strlen(id));
  size_t i = (size_t)h & mask;
  while (slots[i].row1) i = (i + 1) & mask;
  slots[i].tag = (uint32_t)(h >> 32);
  slots[i].row1 = (uint32_t)row + 1;
}

/* Makes room for one more row in the index (capacity >= 2 (n + 1)). */
int index_reserve(ft_table *t) {
  size_t cap = t->slots ? t->mask + 1 : 0;
  size_t need = 2 * ((size_t)t->n_rows + 1);
  if (cap >= need) return O3M_OK;
  size_t ncap = cap ? 2 * cap : 64;
  while (ncap < need) ncap *= 2;
  ft_slot *ns = o3m_calloc(ncap, sizeof *ns);
  if (!ns) return O3M_ENOMEM;
  for (int r = 0; r < t->n_rows; r++) slot_put(ns, ncap - 1, row_id(t, r), r);
  o3m_free(t->slots);
  t->slots = ns;
  t->mask = ncap - 1;
  return O3M_OK;
}
