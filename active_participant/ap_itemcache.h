/* ap_itemcache.h -- the active participant's cache of summed item parts.
 *
 * Why a cache. A passive party's vector for (user u, item i) is its
 * user columns then its item columns, so the sum over the passive parties
 * of their masked parts splits: S(u, i) = U(u) + I(i). The item half I(i)
 * is the same for every user under one mask and one version of every
 * party's item table, and item tables change rarely. So the AP keeps I(i)
 * here and asks the parties, in a factored MaskBatch, only for the items it
 * does not hold: the bytes per decision no longer grow with the number of
 * candidates.
 *
 * Key. An entry is valid for one mask and one item epoch per passive party
 * (o3m_features_epoch, named in every reply). The cache holds one such key
 * at a time: ap_itemcache_reset drops every entry and sets a new key,
 * which the round does when the mask changes or when a reply names another
 * epoch than the cached entries were summed under. So no context ever adds
 * item parts of two epochs of one party.
 *
 * Bounds. At most capacity entries (the config's item_cache), each d
 * doubles (the round's entry width: 2d + 1 when it keeps the AP's own item
 * part and its known flag beside I(i), ap_round.h "Own parts") and one id of at most O3M_MAX_ID bytes, allocated at create
 * (calloc: pages are touched as entries fill); a put into a full cache
 * evicts the least recently used entry. Capacity 0 holds nothing: every
 * item is asked for every time (still factored).
 *
 * Threads: none of its own; the round uses it under the RPC layer's lock
 * only (get while a batch is formed, put and reset when it is decided), and
 * with several batches in flight a batch copies the parts it uses, so an
 * eviction while it is in flight changes nothing it sums; with one, no put
 * or reset can happen before its sums are made, and it reads the entries
 * in place (ap_itemcache_ref). */
#ifndef AP_ITEMCACHE_H
#define AP_ITEMCACHE_H

#include <stdint.h>

#include "o3m_error.h"
#include "o3m_limits.h"

/* Most passive parties whose epochs make a key. */
#define AP_ITEMCACHE_MAX_PARTIES O3M_MAX_CACHED_PARTIES

typedef struct ap_itemcache ap_itemcache;

typedef struct ap_itemcache_stats {
  uint64_t hits, misses, evictions, resets;
  uint64_t size, capacity;
  /* The most entries one lookup compared (its bucket's chain) since the
   * cache was made: a few at most, whatever ids the clients choose. */
  uint64_t longest_chain;
} ap_itemcache_stats;

/* A cache of capacity (>= 0) entries of d (>= 1) values. O3M_EINVAL,
 * O3M_ENOMEM. The key is empty: nothing matches until the first reset. */
int ap_itemcache_create(ap_itemcache **out, int capacity, int d, o3m_err *e);
void ap_itemcache_destroy(ap_itemcache *c);

/* Drops every entry and makes (mask_id, epochs[0..n-1]) the key of the
 * entries put from now on. n <= AP_ITEMCACHE_MAX_PARTIES. Counted in
 * resets when there were entries. */
void ap_itemcache_reset(ap_itemcache *c, uint64_t mask_id, int n, const uint64_t *epochs);

/* 1 when (mask_id, epochs) is the current key, else 0. */
int ap_itemcache_matches(const ap_itemcache *c, uint64_t mask_id, int n, const uint64_t *epochs);

/* The key's epochs (n entries into out) and mask id; n is what reset set
 * (0 before the first). */
int ap_itemcache_key(const ap_itemcache *c, uint64_t *mask_id, uint64_t *epochs);

/* Copies id's d values into out and makes it the most recently used: 1;
 * or 0 when absent (out untouched). Counts a hit or a miss. */
int ap_itemcache_get(ap_itemcache *c, const char *id, double *out);

/* ap_itemcache_get without the copy: id's d values in the cache, or NULL
 * when absent. The pointer is valid until the next put or reset: for a
 * caller that knows none happens while it reads (the round with one batch
 * in flight). */
const double *ap_itemcache_ref(ap_itemcache *c, const char *id);

/* The cache's keyed hash of id (o3m_hash.h, under this cache's random
 * key), and ap_itemcache_ref given it: a caller that hashes the same ids
 * for tables of its own (the round's duplicate sets) hashes each id once.
 * id must be at most O3M_MAX_ID bytes. */
uint64_t ap_itemcache_hash(const ap_itemcache *c, const char *id);
const double *ap_itemcache_ref_hashed(ap_itemcache *c, const char *id, uint64_t h);

/* Stores id's d values (replacing its entry if present), evicting the
 * least recently used entry when full; does nothing with capacity 0 or an
 * id longer than O3M_MAX_ID. */
void ap_itemcache_put(ap_itemcache *c, const char *id, const double *v);

/* 1 when id (hashed h, ap_itemcache_hash) has an entry, else 0, without
 * counting a hit or a miss or making it the most recently used: the
 * round's cost model asks before a batch is formed ("Cost model" in
 * ap_round.h), and only the batch's own lookups count. */
int ap_itemcache_has_hashed(ap_itemcache *c, const char *id, uint64_t h);

void ap_itemcache_stats_get(const ap_itemcache *c, ap_itemcache_stats *st);

#endif
