/* ap_pending.c -- see ap_pending.h.
 *
 * The index holds slot numbers (uint32_t, NO_SLOT when empty); the id of an
 * entry is read from the slot it names, so the index costs 4 bytes per
 * entry and an entry can never disagree with its slot. */
#include "ap_pending.h"
#include "o3m_alloc.h"

#include <stdlib.h>
#include <string.h>

#include "o3m_assert.h"
#include "o3m_rng.h"

enum { SLOT_EMPTY = 0, SLOT_WAITING, SLOT_REWARDED, SLOT_EXPIRED };

#define NO_SLOT UINT32_MAX
#define MAX_CAPACITY (1 << 30)

typedef struct slot {
  uint64_t id;
  uint64_t mask_id;
  int64_t opened_ms;
  int arm;
  int state;
  int owner;
  int degraded; /* decided by the local model (ap_pending_set_local) */
  uint32_t older, newer; /* the owner's age order, NO_SLOT at either end */
} slot;

/* One owner (a client): its slots from oldest to newest, how many it holds
 * (in any state but empty) and its share; owners that hold more than
 * their share are linked in the table's over list (prev/next are owner
 * numbers, -1 at the ends). */
typedef struct owner {
  uint32_t oldest, newest;
  int count, share;
  int over, prev, next;
  ap_pending_stats st;
} owner;

struct ap_pending {
  int capacity, d;
  int64_t expiry_ms;
  int used;        /* slots taken so far: 0..used-1 (never empty again) */
  int n_owners;
  owner *owners;   /* n_owners */
  int over_head;   /* first owner above its share, or -1 */
  slot *slots;     /* capacity */
  double *x;       /* capacity x d */
  int d0;          /* ap_pending_keep_local: the local part's dimension, or 0 */
  double *x0;      /* capacity x d0, or NULL */
  uint32_t *index; /* index_mask + 1 entries: slot numbers or NO_SLOT */
  size_t index_mask;
  ap_pending_id_fn ids;
  void *ids_arg;
  o3m_rng *os;     /* the OS source when ids was NULL */
  ap_pending_stats st;
};

/* Writes one byte per page through a volatile pointer (a plain memset of
 * zeros after malloc may be turned into calloc, which maps pages lazily).
 * The buffers are zero or overwritten before use either way. */
static void prefault(void *p, size_t n) {
  volatile unsigned char *v = p;
  for (size_t i = 0; i < n; i += 4096) v[i] = 0;
  if (n) v[n - 1] = 0;
}

static int os_ids(void *arg, uint64_t *id) { return o3m_rng_u64(arg, id); }

int ap_pending_create(ap_pending **out, int capacity, int d, int64_t expiry_ms,
                      ap_pending_id_fn ids, void *ids_arg) {
  return ap_pending_create_shared(out, capacity, d, expiry_ms, 1, capacity, ids, ids_arg);
}

int ap_pending_create_shared(ap_pending **out, int capacity, int d, int64_t expiry_ms,
                             int n_owners, int share, ap_pending_id_fn ids, void *ids_arg) {
  *out = NULL;
  if (capacity < 1 || capacity > MAX_CAPACITY || d < 1 || expiry_ms < 1 || n_owners < 1 ||
      n_owners > AP_PENDING_MAX_OWNERS || share < 0 || (int64_t)share * n_owners > capacity)
    return O3M_EINVAL;
  ap_pending *t = o3m_calloc(1, sizeof *t);
  if (!t) return O3M_ENOMEM;
  size_t n_index = 2;
  while (n_index < 2 * (size_t)capacity) n_index *= 2;
  t->slots = o3m_calloc((size_t)capacity, sizeof *t->slots);
  t->x = o3m_malloc(sizeof(double) * (size_t)capacity * d);
  t->index = o3m_malloc(n_index * sizeof *t->index);
  t->owners = o3m_calloc((size_t)n_owners, sizeof *t->owners);
  if (!t->slots || !t->x || !t->index || !t->owners) {
    ap_pending_destroy(t);
    return O3M_ENOMEM;
  }
  if (!ids) {
    int rc = o3m_rng_create_os(&t->os);
    if (rc < 0) {
      ap_pending_destroy(t);
      return rc;
    }
    ids = os_ids;
    ids_arg = t->os;
  }
  /* Touch every page now: the ring fills up over the first `capacity`
   * decisions, and memory the process will need anyway should be resident
   * (and fail) at start, not grow under load. */
  prefault(t->slots, sizeof *t->slots * (size_t)capacity);
  prefault(t->x, sizeof(double) * (size_t)capacity * d);
  memset(t->index, 0xff, n_index * sizeof *t->index); /* NO_SLOT everywhere */
  t->index_mask = n_index - 1;
  for (int o = 0; o < n_owners; o++)
    t->owners[o] = (owner){.oldest = NO_SLOT, .newest = NO_SLOT, .share = share, .prev = -1,
                           .next = -1};
  t->n_owners = n_owners;
  t->over_head = -1;
  t->capacity = capacity;
  t->d = d;
  t->expiry_ms = expiry_ms;
  t->ids = ids;
  t->ids_arg = ids_arg;
  *out = t;
  return O3M_OK;
}

void ap_pending_destroy(ap_pending *t) {
  if (!t) return;
  o3m_rng_destroy(t->os);
  o3m_free(t->slots);
  o3m_free(t->x);
  o3m_free(t->x0);
  o3m_free(t->index);
  o3m_free(t->owners);
  o3m_free(t);
}

/* The home entry of id: the splitmix64 finalizer spreads any ids (a test's
 * 1, 2, 3 as well as random ones) over the low bits. */
static size_t home_of(const ap_pending *t, uint64_t id) {
  uint64_t h = id;
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return (size_t)h & t->index_mask;
}

/* The index entry of id, or -1. id 0 is never stored. */
static long index_find(const ap_pending *t, uint64_t id) {
  if (id == 0) return -1;
  for (size_t i = home_of(t, id);; i = (i + 1) & t->index_mask) {
    uint32_t s = t->index[i];
    if (s == NO_SLOT) return -1;
    if (t->slots[s].id == id) return (long)i;
  }
}

/* Adds slot s under the id it holds (not in the index yet). The index is at
 * most half full, so an empty entry exists. */
static void index_insert(ap_pending *t, uint32_t s) {
  size_t i = home_of(t, t->slots[s].id);
  while (t->index[i] != NO_SLOT) i = (i + 1) & t->index_mask;
  t->index[i] = s;
}

/* Removes entry i by backward shifting: every later entry of the probe run
 * whose home does not lie cyclically in (i, j] moves into the hole, so
 * every remaining id is still found from its home without a gap. */
static void index_delete(ap_pending *t, size_t i) {
  size_t j = i;
  for (;;) {
    t->index[i] = NO_SLOT;
    for (;;) {
      j = (j + 1) & t->index_mask;
      if (t->index[j] == NO_SLOT) return;
      size_t k = home_of(t, t->slots[t->index[j]].id);
      int stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
      if (!stays) break;
    }
    t->index[i] = t->index[j];
    i = j;
  }
}

/* A fresh id: nonzero and not held by the table. */
static int draw_id(ap_pending *t, uint64_t *id) {
  for (int n = 0; n < AP_PENDING_MAX_DRAWS; n++) {
    uint64_t v;
    if (t->ids(t->ids_arg, &v) < 0) return O3M_ERANDOM;
    if (v != 0 && index_find(t, v) < 0) {
      *id = v;
      return O3M_OK;
    }
  }
  return O3M_ERANDOM;
}

/* Keeps owner o in the over list exactly while it holds more than its
 * share. */
static void over_update(ap_pending *t, int o) {
  owner *w = &t->owners[o];
  int over = w->count > w->share;
  if (over == w->over) return;
  w->over = over;
  if (over) {
    w->prev = -1;
    w->next = t->over_head;
    if (t->over_head >= 0) t->owners[t->over_head].prev = o;
    t->over_head = o;
  } else {
    if (w->prev >= 0) t->owners[w->prev].next = w->next;
    else t->over_head = w->next;
    if (w->next >= 0) t->owners[w->next].prev = w->prev;
    w->prev = w->next = -1;
  }
}

/* Takes slot i (the oldest of its owner) out of its owner's age order and
 * out of the index, counting a decision that still waited as evicted (or
 * expired, if it was past the expiry), for the table and for its owner. */
static void slot_release(ap_pending *t, uint32_t i, int64_t now_ms) {
  slot *s = &t->slots[i];
  owner *w = &t->owners[s->owner];
  O3M_ASSERT(s->state != SLOT_EMPTY && w->oldest == i && w->count > 0);
  if (s->state == SLOT_WAITING) {
    O3M_ASSERT(t->st.waiting > 0 && w->st.waiting > 0);
    if (now_ms - s->opened_ms > t->expiry_ms) {
      t->st.expired++;
      w->st.expired++;
    } else {
      t->st.evicted++;
      w->st.evicted++;
    }
    t->st.waiting--;
    w->st.waiting--;
  }
  w->oldest = s->newer;
  if (w->oldest == NO_SLOT) w->newest = NO_SLOT;
  else t->slots[w->oldest].older = NO_SLOT;
  w->count--;
  over_update(t, s->owner);
  index_delete(t, (size_t)index_find(t, s->id));
}

/* The slot a new decision of owner o takes (see "Shares" in ap_pending.h):
 * an unused one while there are any; then o's own oldest when o holds its
 * share or more (or no owner is above its share), else the oldest of an
 * owner above its share. With the shares summing to at most the capacity,
 * an owner below its share always finds one above it. */
static uint32_t slot_take(ap_pending *t, int o, int64_t now_ms) {
  if (t->used < t->capacity) return (uint32_t)t->used++;
  const owner *w = &t->owners[o];
  int v = w->count > 0 && (w->count >= w->share || t->over_head < 0) ? o : t->over_head;
  O3M_ASSERT(v >= 0 && t->owners[v].oldest != NO_SLOT);
  uint32_t i = t->owners[v].oldest;
  slot_release(t, i, now_ms);
  return i;
}

int ap_pending_open(ap_pending *t, int arm, uint64_t mask_id, const double *x, int64_t now_ms,
                    uint64_t *id) {
  return ap_pending_open_as(t, 0, arm, mask_id, x, now_ms, id);
}

int ap_pending_open_as(ap_pending *t, int owner_no, int arm, uint64_t mask_id, const double *x,
                       int64_t now_ms, uint64_t *id) {
  if (owner_no < 0 || owner_no >= t->n_owners) return O3M_EINVAL;
  uint64_t n;
  int rc = draw_id(t, &n);
  if (rc < 0) return rc;
  uint32_t i = slot_take(t, owner_no, now_ms);
  slot *s = &t->slots[i];
  owner *w = &t->owners[owner_no];
  s->id = n;
  s->mask_id = mask_id;
  s->opened_ms = now_ms;
  s->arm = arm;
  s->state = SLOT_WAITING;
  s->degraded = 0;
  s->owner = owner_no;
  s->older = w->newest;
  s->newer = NO_SLOT;
  if (w->newest == NO_SLOT) w->oldest = i;
  else t->slots[w->newest].newer = i;
  w->newest = i;
  w->count++;
  over_update(t, owner_no);
  memcpy(t->x + (size_t)i * t->d, x, sizeof(double) * t->d);
  index_insert(t, i);
  t->st.opened++;
  t->st.waiting++;
  w->st.opened++;
  w->st.waiting++;
  *id = n;
  return O3M_OK;
}

/* The slot holding id, or NULL. */
static slot *slot_of(const ap_pending *t, uint64_t id) {
  long i = index_find(t, id);
  return i < 0 ? NULL : &t->slots[t->index[i]];
}

int ap_pending_peek(const ap_pending *t, uint64_t id, int64_t now_ms, int *arm,
                    uint64_t *mask_id, const double **x) {
  const slot *s = slot_of(t, id);
  if (!s) return O3M_ENOTFOUND;
  if (s->state == SLOT_REWARDED) return O3M_EEXISTS;
  if (s->state == SLOT_EXPIRED || now_ms - s->opened_ms > t->expiry_ms) return O3M_EEXPIRED;
  *arm = s->arm;
  *mask_id = s->mask_id;
  *x = t->x + (size_t)(s - t->slots) * t->d;
  return O3M_OK;
}

/* Ends the wait of decision id, if it still waits: its slot takes state and
 * the counter of that outcome goes up. */
static void end_wait(ap_pending *t, uint64_t id, int state) {
  slot *s = slot_of(t, id);
  if (!s || s->state != SLOT_WAITING) return;
  O3M_ASSERT((state == SLOT_REWARDED || state == SLOT_EXPIRED) && t->st.waiting > 0);
  s->state = state;
  ap_pending_stats *own = &t->owners[s->owner].st;
  if (state == SLOT_REWARDED) {
    t->st.closed++;
    own->closed++;
  } else {
    t->st.expired++;
    own->expired++;
  }
  t->st.waiting--;
  own->waiting--;
}

void ap_pending_close(ap_pending *t, uint64_t id) { end_wait(t, id, SLOT_REWARDED); }

void ap_pending_expire(ap_pending *t, uint64_t id) { end_wait(t, id, SLOT_EXPIRED); }

int ap_pending_keep_local(ap_pending *t, int d0) {
  if (d0 < 1 || t->x0) return O3M_EINVAL;
  t->x0 = o3m_malloc(sizeof(double) * (size_t)t->capacity * (size_t)d0);
  if (!t->x0) return O3M_ENOMEM;
  prefault(t->x0, sizeof(double) * (size_t)t->capacity * (size_t)d0);
  t->d0 = d0;
  return O3M_OK;
}

void ap_pending_set_local(ap_pending *t, uint64_t id, const double *x0, int degraded) {
  slot *s = (slot *)slot_of(t, id);
  if (!s || !t->x0) return;
  memcpy(t->x0 + (size_t)(s - t->slots) * (size_t)t->d0, x0, sizeof *x0 * (size_t)t->d0);
  s->degraded = degraded;
}

int ap_pending_local(const ap_pending *t, uint64_t id, const double **x0, int *degraded) {
  const slot *s = slot_of(t, id);
  if (!s || !t->x0) return O3M_ENOTFOUND;
  *x0 = t->x0 + (size_t)(s - t->slots) * (size_t)t->d0;
  *degraded = s->degraded;
  return O3M_OK;
}

int ap_pending_owner(const ap_pending *t, uint64_t id) {
  const slot *s = slot_of(t, id);
  return s ? s->owner : -1;
}

int ap_pending_owners(const ap_pending *t) { return t->n_owners; }

void ap_pending_owner_stats(const ap_pending *t, int owner_no, ap_pending_stats *st) {
  if (owner_no < 0 || owner_no >= t->n_owners) {
    memset(st, 0, sizeof *st);
    return;
  }
  *st = t->owners[owner_no].st;
}

void ap_pending_stats_get(const ap_pending *t, int64_t now_ms, ap_pending_stats *st) {
  (void)now_ms;
  *st = t->st;
}
