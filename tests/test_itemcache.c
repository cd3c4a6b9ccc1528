/* test_itemcache.c -- the AP's bounded LRU cache of summed item parts
 * (active_participant/ap_itemcache.h). */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <stdio.h>
#include <string.h>

#include "ap_itemcache.h"
#include "o3m_hash.h"
#include "o3m_limits.h"

#define D 3

static void vec(double *v, double x) {
  for (int c = 0; c < D; c++) v[c] = x + c;
}

Test(itemcache, least_recently_used_is_evicted_at_the_bound) {
  ap_itemcache *c;
  o3m_err e;
  cr_assert(eq(int, ap_itemcache_create(&c, 3, D, &e), 0));
  uint64_t ep[2] = {11, 22};
  ap_itemcache_reset(c, 7, 2, ep);
  double v[D], out[D];
  const char *ids[] = {"a", "b", "c", "d"};
  for (int i = 0; i < 3; i++) {
    vec(v, i);
    ap_itemcache_put(c, ids[i], v);
  }
  /* "a" becomes the most recent, so "b" is the one "d" evicts. */
  cr_assert(eq(int, ap_itemcache_get(c, "a", out), 1));
  cr_assert(eq(dbl, out[2], 2.0));
  vec(v, 3);
  ap_itemcache_put(c, "d", v);
  cr_assert(eq(int, ap_itemcache_get(c, "b", out), 0));
  cr_assert(eq(int, ap_itemcache_get(c, "a", out), 1));
  cr_assert(eq(int, ap_itemcache_get(c, "c", out), 1));
  cr_assert(eq(int, ap_itemcache_get(c, "d", out), 1));
  cr_assert(eq(dbl, out[0], 3.0));
  /* A put of a held id replaces its values, without an eviction. */
  vec(v, 9);
  ap_itemcache_put(c, "c", v);
  cr_assert(eq(int, ap_itemcache_get(c, "c", out), 1));
  cr_assert(eq(dbl, out[0], 9.0));
  ap_itemcache_stats st;
  ap_itemcache_stats_get(c, &st);
  cr_assert(eq(u64, st.size, 3));
  cr_assert(eq(u64, st.capacity, 3));
  cr_assert(eq(u64, st.evictions, 1));
  cr_assert(eq(u64, st.hits, 5));
  cr_assert(eq(u64, st.misses, 1));
  ap_itemcache_destroy(c);
}

Test(itemcache, a_new_key_drops_every_entry) {
  ap_itemcache *c;
  o3m_err e;
  cr_assert(eq(int, ap_itemcache_create(&c, 100, D, &e), 0));
  uint64_t ep[2] = {11, 22}, ep2[2] = {11, 23}, mask;
  double v[D], out[D];
  cr_assert(eq(int, ap_itemcache_matches(c, 7, 2, ep), 0), "no key before the first reset");
  ap_itemcache_reset(c, 7, 2, ep);
  cr_assert(eq(int, ap_itemcache_matches(c, 7, 2, ep), 1));
  cr_assert(eq(int, ap_itemcache_matches(c, 7, 2, ep2), 0), "one party's epoch differs");
  cr_assert(eq(int, ap_itemcache_matches(c, 8, 2, ep), 0), "another mask");
  cr_assert(eq(int, ap_itemcache_matches(c, 7, 1, ep), 0), "another number of parties");
  vec(v, 1);
  for (int i = 0; i < 50; i++) {
    char id[16];
    snprintf(id, sizeof id, "i%d", i);
    ap_itemcache_put(c, id, v);
  }
  ap_itemcache_reset(c, 7, 2, ep2);
  cr_assert(eq(int, ap_itemcache_get(c, "i3", out), 0));
  uint64_t got[2];
  cr_assert(eq(int, ap_itemcache_key(c, &mask, got), 2));
  cr_assert(eq(u64, mask, 7));
  cr_assert(eq(u64, got[1], 23));
  ap_itemcache_stats st;
  ap_itemcache_stats_get(c, &st);
  cr_assert(eq(u64, st.size, 0));
  cr_assert(eq(u64, st.resets, 1));
  /* A mask change with the same epochs (a re-key: a new AP process, whose
   * ap_round_connect keys the cache with the new mask) drops every entry
   * too: nothing summed under the old mask is found again. */
  ap_itemcache_put(c, "i3", v);
  cr_assert(eq(int, ap_itemcache_matches(c, 8, 2, ep2), 0), "another mask, the same epochs");
  ap_itemcache_reset(c, 8, 2, ep2);
  cr_assert(eq(int, ap_itemcache_get(c, "i3", out), 0));
  ap_itemcache_stats_get(c, &st);
  cr_assert(eq(u64, st.size, 0));
  cr_assert(eq(u64, st.resets, 2));
  ap_itemcache_destroy(c);
}

/* Many puts through a small cache: the chains and the LRU list stay
 * consistent (every held id is found, the bound holds), and capacity 0
 * holds nothing. */
Test(itemcache, churn_keeps_the_bound_and_capacity_zero_holds_nothing) {
  ap_itemcache *c;
  o3m_err e;
  cr_assert(eq(int, ap_itemcache_create(&c, 17, D, &e), 0));
  uint64_t ep = 1;
  ap_itemcache_reset(c, 1, 1, &ep);
  double v[D], out[D];
  for (int i = 0; i < 5000; i++) {
    char id[16];
    snprintf(id, sizeof id, "x%d", (i * 7919) % 101);
    vec(v, (i * 7919) % 101);
    ap_itemcache_put(c, id, v);
    cr_assert(eq(int, ap_itemcache_get(c, id, out), 1));
    cr_assert(eq(dbl, out[0], (double)((i * 7919) % 101)));
  }
  ap_itemcache_stats st;
  ap_itemcache_stats_get(c, &st);
  cr_assert(eq(u64, st.size, 17));
  char longid[O3M_MAX_ID + 2];
  memset(longid, 'z', sizeof longid - 1);
  longid[sizeof longid - 1] = '\0';
  ap_itemcache_put(c, longid, v);
  cr_assert(eq(int, ap_itemcache_get(c, longid, out), 0), "an id beyond O3M_MAX_ID is not held");
  ap_itemcache_destroy(c);
  cr_assert(eq(int, ap_itemcache_create(&c, 0, D, &e), 0));
  ap_itemcache_reset(c, 1, 1, &ep);
  ap_itemcache_put(c, "a", v);
  cr_assert(eq(int, ap_itemcache_get(c, "a", out), 0));
  ap_itemcache_destroy(c);
  cr_assert(eq(int, ap_itemcache_create(&c, -1, D, &e), O3M_EINVAL));
}


/* Hash flooding: a client names the items, and every item it names (an
 * unknown one too) is cached. Ids that all fall into the bucket of a real
 * item under the unkeyed table hash (o3m_hash_bytes, which anyone can
 * compute) are found here by search, as an attacker would find them
 * offline, and put into the cache. Its buckets come from a keyed hash with
 * a key of its own, so they spread, and a lookup of the real item compares
 * a few entries, not all of them. With the buckets of the unkeyed hash
 * every one of these ids would share the real item's chain. */
Test(itemcache, ids_chosen_to_collide_do_not_share_one_chain) {
  enum { CAP = 256, N = 200 };
  size_t n_buckets = 16; /* as ap_itemcache_create sizes them */
  while (n_buckets < 2 * (size_t)CAP) n_buckets <<= 1;
  const char *target = "i1";
  uint64_t want = o3m_hash_bytes(target, strlen(target), 0) & (n_buckets - 1);
  static char ids[N][24];
  int n = 0;
  for (unsigned u = 0; n < N; u++) {
    char id[24];
    snprintf(id, sizeof id, "x%u", u);
    if ((o3m_hash_bytes(id, strlen(id), 0) & (n_buckets - 1)) == want) memcpy(ids[n++], id, sizeof id);
  }
  ap_itemcache *c;
  o3m_err e;
  cr_assert(eq(int, ap_itemcache_create(&c, CAP, D, &e), 0));
  uint64_t ep[1] = {1};
  ap_itemcache_reset(c, 7, 1, ep);
  double v[D], out[D];
  vec(v, 1);
  ap_itemcache_put(c, target, v);
  for (int i = 0; i < N; i++) ap_itemcache_put(c, ids[i], v);
  for (int i = 0; i < N; i++) cr_assert(eq(int, ap_itemcache_get(c, ids[i], out), 1));
  cr_assert(eq(int, ap_itemcache_get(c, target, out), 1));
  ap_itemcache_stats st;
  ap_itemcache_stats_get(c, &st);
  cr_assert(le(u64, st.longest_chain, 12),
            "a lookup compared %llu entries: the chosen ids share one chain",
            (unsigned long long)st.longest_chain);
  ap_itemcache_destroy(c);
}

/* ap_itemcache_ref reads an entry in place: the values a get would copy,
 * counted and made most recent like a get, NULL for an absent id. */
Test(itemcache, ref_reads_the_entry_in_place_and_counts_like_get) {
  ap_itemcache *c;
  o3m_err e;
  cr_assert(eq(int, ap_itemcache_create(&c, 2, D, &e), 0));
  uint64_t ep[1] = {5};
  ap_itemcache_reset(c, 7, 1, ep);
  double v[D];
  vec(v, 1);
  ap_itemcache_put(c, "a", v);
  vec(v, 2);
  ap_itemcache_put(c, "b", v);
  cr_assert(ap_itemcache_ref(c, "z") == NULL);
  const double *a = ap_itemcache_ref(c, "a");
  cr_assert(a != NULL);
  cr_assert(eq(dbl, a[0], 1.0));
  cr_assert(eq(dbl, a[D - 1], 1.0 + D - 1));
  /* "a" is now the most recent: a third id evicts "b". */
  vec(v, 3);
  ap_itemcache_put(c, "c", v);
  cr_assert(ap_itemcache_ref(c, "b") == NULL);
  cr_assert(ap_itemcache_ref(c, "a") != NULL);
  ap_itemcache_stats st;
  ap_itemcache_stats_get(c, &st);
  cr_assert(eq(u64, st.hits, 2));
  cr_assert(eq(u64, st.misses, 2));
  ap_itemcache_destroy(c);
}
