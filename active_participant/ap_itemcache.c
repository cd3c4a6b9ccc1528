/* ap_itemcache.c -- bounded LRU cache of summed item parts (ap_itemcache.h).
 *
 * Entries live in arrays of capacity slots: values (d doubles each), ids
 * (O3M_MAX_ID + 1 bytes each), a chain link for the hash buckets and the
 * two links of the LRU list. Buckets are at least twice the capacity, so
 * chains are short; an evicted entry is unlinked from its chain (a walk of
 * that chain) and reused. Clients choose the ids, so the buckets come from
 * a keyed hash under a key of this cache's own (o3m_hash_keyed.h): nobody can
 * pick ids that pile up in one chain. */
#include "ap_itemcache.h"
#include "o3m_alloc.h"

#include <stdlib.h>
#include <string.h>

#include "o3m_hash_keyed.h"
#include "o3m_limits.h"

#define ID_SLOT (O3M_MAX_ID + 1)

struct ap_itemcache {
  int cap, d, size;
  double *vals;     /* cap x d */
  char *ids;        /* cap x ID_SLOT */
  int *chain;       /* next entry in the same bucket, -1 */
  int *prev, *next; /* LRU list: head most recent, tail least; -1 ends */
  int *bucket;      /* n_buckets heads, -1 */
  size_t n_buckets; /* power of two */
  int head, tail;
  uint64_t mask_id;
  int n_epochs;
  uint64_t epochs[AP_ITEMCACHE_MAX_PARTIES];
  o3m_hash_key key; /* the buckets' hash key, random per cache */
  ap_itemcache_stats st;
};

int ap_itemcache_create(ap_itemcache **out, int capacity, int d, o3m_err *e) {
  *out = NULL;
  if (capacity < 0 || d < 1)
    return o3m_err_set(e, O3M_EINVAL, "item cache: capacity %d, d %d", capacity, d);
  ap_itemcache *c = o3m_calloc(1, sizeof *c);
  if (!c) return o3m_err_set(e, O3M_ENOMEM, "item cache: out of memory");
  c->cap = capacity;
  c->d = d;
  c->head = c->tail = -1;
  if (o3m_hash_key_new(&c->key) < 0) {
    o3m_free(c);
    return o3m_err_set(e, O3M_ERANDOM, "item cache: libsodium failed to initialize");
  }
  c->n_buckets = 16;
  while (c->n_buckets < 2 * (size_t)capacity) c->n_buckets <<= 1;
  size_t n = capacity > 0 ? (size_t)capacity : 1;
  c->vals = o3m_calloc(n * (size_t)d, sizeof *c->vals);
  c->ids = o3m_calloc(n, ID_SLOT);
  c->chain = o3m_malloc(n * sizeof *c->chain);
  c->prev = o3m_malloc(n * sizeof *c->prev);
  c->next = o3m_malloc(n * sizeof *c->next);
  c->bucket = o3m_malloc(c->n_buckets * sizeof *c->bucket);
  if (!c->vals || !c->ids || !c->chain || !c->prev || !c->next || !c->bucket) {
    ap_itemcache_destroy(c);
    return o3m_err_set(e, O3M_ENOMEM, "item cache of %d entries x d = %d: out of memory",
                       capacity, d);
  }
  for (size_t b = 0; b < c->n_buckets; b++) c->bucket[b] = -1;
  c->st.capacity = (uint64_t)capacity;
  *out = c;
  return 0;
}

void ap_itemcache_destroy(ap_itemcache *c) {
  if (!c) return;
  o3m_free(c->vals);
  o3m_free(c->ids);
  o3m_free(c->chain);
  o3m_free(c->prev);
  o3m_free(c->next);
  o3m_free(c->bucket);
  o3m_hash_key_wipe(&c->key);
  o3m_free(c);
}

void ap_itemcache_reset(ap_itemcache *c, uint64_t mask_id, int n, const uint64_t *epochs) {
  if (n < 0) n = 0;
  if (n > AP_ITEMCACHE_MAX_PARTIES) n = AP_ITEMCACHE_MAX_PARTIES;
  if (c->size > 0) c->st.resets++;
  for (size_t b = 0; b < c->n_buckets; b++) c->bucket[b] = -1;
  c->size = 0;
  c->head = c->tail = -1;
  c->mask_id = mask_id;
  c->n_epochs = n;
  if (n > 0) memcpy(c->epochs, epochs, sizeof *epochs * (size_t)n);
  c->st.size = 0;
}

int ap_itemcache_matches(const ap_itemcache *c, uint64_t mask_id, int n, const uint64_t *epochs) {
  return c->n_epochs > 0 && c->mask_id == mask_id && c->n_epochs == n &&
         memcmp(c->epochs, epochs, sizeof *epochs * (size_t)n) == 0;
}

int ap_itemcache_key(const ap_itemcache *c, uint64_t *mask_id, uint64_t *epochs) {
  *mask_id = c->mask_id;
  if (c->n_epochs > 0) memcpy(epochs, c->epochs, sizeof *epochs * (size_t)c->n_epochs);
  return c->n_epochs;
}

uint64_t ap_itemcache_hash(const ap_itemcache *c, const char *id) {
  return o3m_hash_keyed(&c->key, id, strlen(id));
}

static size_t bucket_of(const ap_itemcache *c, const char *id, size_t len) {
  return (size_t)o3m_hash_keyed(&c->key, id, len) & (c->n_buckets - 1);
}

/* The entry of id, whose hash is h, or -1; *b gets its bucket. Counts the
 * longest chain walked (ap_itemcache_stats.longest_chain). */
static int find_hashed(ap_itemcache *c, const char *id, uint64_t h, size_t *b) {
  *b = (size_t)h & (c->n_buckets - 1);
  uint64_t walked = 0;
  int i = c->bucket[*b];
  for (; i >= 0; i = c->chain[i]) {
    walked++;
    if (strcmp(c->ids + (size_t)i * ID_SLOT, id) == 0) break;
  }
  if (walked > c->st.longest_chain) c->st.longest_chain = walked;
  return i;
}

static int find(ap_itemcache *c, const char *id, size_t len, size_t *b) {
  return find_hashed(c, id, o3m_hash_keyed(&c->key, id, len), b);
}

static void lru_unlink(ap_itemcache *c, int i) {
  if (c->prev[i] >= 0) c->next[c->prev[i]] = c->next[i];
  else c->head = c->next[i];
  if (c->next[i] >= 0) c->prev[c->next[i]] = c->prev[i];
  else c->tail = c->prev[i];
}

static void lru_push_front(ap_itemcache *c, int i) {
  c->prev[i] = -1;
  c->next[i] = c->head;
  if (c->head >= 0) c->prev[c->head] = i;
  c->head = i;
  if (c->tail < 0) c->tail = i;
}

const double *ap_itemcache_ref_hashed(ap_itemcache *c, const char *id, uint64_t h) {
  size_t b;
  int i = c->size > 0 ? find_hashed(c, id, h, &b) : -1;
  if (i < 0) {
    c->st.misses++;
    return NULL;
  }
  if (c->head != i) {
    lru_unlink(c, i);
    lru_push_front(c, i);
  }
  c->st.hits++;
  return c->vals + (size_t)i * (size_t)c->d;
}

const double *ap_itemcache_ref(ap_itemcache *c, const char *id) {
  size_t len = strlen(id);
  if (len > O3M_MAX_ID) {
    c->st.misses++;
    return NULL;
  }
  return ap_itemcache_ref_hashed(c, id, o3m_hash_keyed(&c->key, id, len));
}

int ap_itemcache_get(ap_itemcache *c, const char *id, double *out) {
  const double *v = ap_itemcache_ref(c, id);
  if (v) memcpy(out, v, sizeof *out * (size_t)c->d);
  return v != NULL;
}

/* Unlinks entry i from its bucket's chain. */
static void chain_unlink(ap_itemcache *c, int i) {
  const char *id = c->ids + (size_t)i * ID_SLOT;
  int *p = &c->bucket[bucket_of(c, id, strlen(id))];
  while (*p != i) p = &c->chain[*p];
  *p = c->chain[i];
}

void ap_itemcache_put(ap_itemcache *c, const char *id, const double *v) {
  size_t len = strlen(id), b;
  if (c->cap == 0 || len > O3M_MAX_ID) return;
  int i = find(c, id, len, &b);
  if (i >= 0) {
    lru_unlink(c, i);
  } else {
    if (c->size < c->cap) {
      i = c->size++;
    } else {
      i = c->tail; /* the least recently used */
      lru_unlink(c, i);
      chain_unlink(c, i);
      c->st.evictions++;
    }
    memcpy(c->ids + (size_t)i * ID_SLOT, id, len + 1);
    c->chain[i] = c->bucket[b];
    c->bucket[b] = i;
  }
  memcpy(c->vals + (size_t)i * (size_t)c->d, v, sizeof *v * (size_t)c->d);
  lru_push_front(c, i);
  c->st.size = (uint64_t)c->size;
}

void ap_itemcache_stats_get(const ap_itemcache *c, ap_itemcache_stats *st) { *st = c->st; }

int ap_itemcache_has_hashed(ap_itemcache *c, const char *id, uint64_t h) {
  size_t b;
  return c->size > 0 && find_hashed(c, id, h, &b) >= 0;
}
