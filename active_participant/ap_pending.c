/* ap_pending.c -- see ap_pending.h. */
#include "ap_pending.h"

#include <stdlib.h>
#include <string.h>

enum { SLOT_EMPTY = 0, SLOT_WAITING, SLOT_REWARDED, SLOT_EXPIRED };

typedef struct slot {
  uint64_t id;
  uint64_t mask_id;
  int64_t opened_ms;
  int arm;
  int state;
} slot;

struct ap_pending {
  int capacity, d;
  int64_t expiry_ms;
  uint64_t base, next;
  slot *slots;
  double *x; /* capacity x d */
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

int ap_pending_create(ap_pending **out, int capacity, int d, int64_t expiry_ms, uint64_t base) {
  *out = NULL;
  if (capacity < 1 || d < 1 || expiry_ms < 1) return O3M_EINVAL;
  ap_pending *t = calloc(1, sizeof *t);
  if (!t) return O3M_ENOMEM;
  t->slots = calloc((size_t)capacity, sizeof *t->slots);
  t->x = malloc(sizeof(double) * (size_t)capacity * d);
  if (!t->slots || !t->x) {
    ap_pending_destroy(t);
    return O3M_ENOMEM;
  }
  /* Touch every page now: the ring fills up over the first `capacity`
   * decisions, and memory the process will need anyway should be resident
   * (and fail) at start, not grow under load. */
  prefault(t->slots, sizeof *t->slots * (size_t)capacity);
  prefault(t->x, sizeof(double) * (size_t)capacity * d);
  t->capacity = capacity;
  t->d = d;
  t->expiry_ms = expiry_ms;
  t->base = t->next = base ? base : 1;
  *out = t;
  return O3M_OK;
}

void ap_pending_destroy(ap_pending *t) {
  if (!t) return;
  free(t->slots);
  free(t->x);
  free(t);
}

static size_t slot_of(const ap_pending *t, uint64_t id) {
  return (size_t)((id - t->base) % (uint64_t)t->capacity);
}

void ap_pending_open(ap_pending *t, int arm, uint64_t mask_id, const double *x, int64_t now_ms,
                     uint64_t *id) {
  if (t->next == 0) t->next++; /* 0 is never an id, even after wrap-around */
  uint64_t n = t->next++;
  size_t i = slot_of(t, n);
  slot *s = &t->slots[i];
  if (s->state == SLOT_WAITING) {
    if (now_ms - s->opened_ms > t->expiry_ms)
      t->st.expired++;
    else
      t->st.evicted++;
    t->st.waiting--;
  }
  s->id = n;
  s->mask_id = mask_id;
  s->opened_ms = now_ms;
  s->arm = arm;
  s->state = SLOT_WAITING;
  memcpy(t->x + i * t->d, x, sizeof(double) * t->d);
  t->st.opened++;
  t->st.waiting++;
  *id = n;
}

int ap_pending_peek(const ap_pending *t, uint64_t id, int64_t now_ms, int *arm,
                    uint64_t *mask_id, const double **x) {
  if (id == 0 || id - t->base >= t->next - t->base) return O3M_ENOTFOUND;
  size_t i = slot_of(t, id);
  const slot *s = &t->slots[i];
  if (s->id != id || s->state == SLOT_EMPTY) return O3M_ENOTFOUND;
  if (s->state == SLOT_REWARDED) return O3M_EEXISTS;
  if (s->state == SLOT_EXPIRED || now_ms - s->opened_ms > t->expiry_ms) return O3M_EEXPIRED;
  *arm = s->arm;
  *mask_id = s->mask_id;
  *x = t->x + i * t->d;
  return O3M_OK;
}

void ap_pending_close(ap_pending *t, uint64_t id) {
  slot *s = &t->slots[slot_of(t, id)];
  if (s->id != id || s->state != SLOT_WAITING) return;
  s->state = SLOT_REWARDED;
  t->st.closed++;
  t->st.waiting--;
}

void ap_pending_expire(ap_pending *t, uint64_t id) {
  slot *s = &t->slots[slot_of(t, id)];
  if (s->id != id || s->state != SLOT_WAITING) return;
  s->state = SLOT_EXPIRED;
  t->st.expired++;
  t->st.waiting--;
}

void ap_pending_stats_get(const ap_pending *t, int64_t now_ms, ap_pending_stats *st) {
  (void)now_ms;
  *st = t->st;
}
