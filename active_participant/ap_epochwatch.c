/* ap_epochwatch.c -- the watch on the passive parties' item epochs (see
 * ap_epochwatch.h).
 *
 * Per party a ring of its last max changes, oldest first: the epoch it left
 * and when. A change prunes the entries older than the window, then looks
 * for the new epoch among those left (went back), then counts. */
#include "ap_epochwatch.h"
#include "o3m_alloc.h"

#include "o3m_limits.h"

typedef struct change {
  uint64_t left; /* the epoch the party left */
  int64_t at_ms;
} change;

typedef struct watch {
  int have;       /* an epoch was named */
  uint64_t epoch; /* the last one */
  uint64_t seq;   /* the sequence number it was named under */
  int head, n;    /* the ring of changes: oldest at head, n of them */
} watch;

struct ap_epochwatch {
  int n_parties, max;
  watch *w;     /* n_parties */
  change *ring; /* n_parties x max */
};

int ap_epochwatch_create(ap_epochwatch **out, int n_parties, int max, o3m_err *e) {
  *out = NULL;
  if (n_parties < 0 || max < 0 || max > O3M_MAX_EPOCH_CHANGES)
    return o3m_err_set(e, O3M_EINVAL, "epoch watch: %d parties, epoch_changes_max_per_minute %d "
                       "(0..%d)", n_parties, max, O3M_MAX_EPOCH_CHANGES);
  ap_epochwatch *w = o3m_calloc(1, sizeof *w);
  if (!w) return o3m_err_set(e, O3M_ENOMEM, "epoch watch: out of memory");
  w->n_parties = n_parties;
  w->max = max;
  size_t np = n_parties > 0 ? (size_t)n_parties : 1, nr = max > 0 ? (size_t)max : 1;
  w->w = o3m_calloc(np, sizeof *w->w);
  w->ring = o3m_calloc(np * nr, sizeof *w->ring);
  if (!w->w || !w->ring) {
    ap_epochwatch_destroy(w);
    return o3m_err_set(e, O3M_ENOMEM, "epoch watch of %d parties: out of memory", n_parties);
  }
  *out = w;
  return 0;
}

/* Drops party j's changes older than the window ending at now_ms. */
static void prune(ap_epochwatch *w, int j, int64_t now_ms) {
  watch *p = &w->w[j];
  const change *r = w->ring + (size_t)j * (size_t)w->max;
  while (p->n > 0 && now_ms - r[p->head].at_ms >= AP_EPOCHWATCH_WINDOW_MS) {
    p->head = (p->head + 1) % w->max;
    p->n--;
  }
}

int ap_epochwatch_note(ap_epochwatch *w, int j, uint64_t epoch, uint64_t seq, int64_t now_ms) {
  if (j < 0 || j >= w->n_parties) return AP_EPOCH_OK;
  watch *p = &w->w[j];
  /* A reply to a request sent before the one noted last says nothing new:
   * it may name the epoch the party has since left, which is no going
   * back (batches in flight finish in any order). */
  if (p->have && seq < p->seq) return AP_EPOCH_OK;
  p->seq = seq;
  if (!p->have || p->epoch == epoch || w->max == 0) {
    p->have = 1;
    p->epoch = epoch;
    return AP_EPOCH_OK;
  }
  prune(w, j, now_ms);
  change *r = w->ring + (size_t)j * (size_t)w->max;
  int verdict = AP_EPOCH_OK;
  for (int k = 0; k < p->n && verdict == AP_EPOCH_OK; k++)
    if (r[(p->head + k) % w->max].left == epoch) verdict = AP_EPOCH_WENT_BACK;
  if (p->n == w->max) {
    /* The ring is full of changes within the window: this one is more
     * than max. The oldest gives way, so the ring keeps the last max. */
    if (verdict == AP_EPOCH_OK) verdict = AP_EPOCH_TOO_FAST;
    p->head = (p->head + 1) % w->max;
    p->n--;
  }
  r[(p->head + p->n) % w->max] = (change){p->epoch, now_ms};
  p->n++;
  p->epoch = epoch;
  return verdict;
}

int ap_epochwatch_changes(ap_epochwatch *w, int j, int64_t now_ms) {
  if (j < 0 || j >= w->n_parties || w->max == 0) return 0;
  prune(w, j, now_ms);
  return w->w[j].n;
}

const char *ap_epochwatch_why(int verdict) {
  switch (verdict) {
  case AP_EPOCH_TOO_FAST:
    return "changed its item epoch more often than epoch_changes_max_per_minute allows";
  case AP_EPOCH_WENT_BACK:
    return "went back to an item epoch it had left within the minute";
  default:
    return "named another item epoch in the second replies of one batch";
  }
}

void ap_epochwatch_destroy(ap_epochwatch *w) {
  if (!w) return;
  o3m_free(w->w);
  o3m_free(w->ring);
  o3m_free(w);
}
