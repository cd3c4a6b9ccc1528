/* test_pending.c -- the AP's table of decisions waiting for a reward.
 *
 * The production id source (getrandom) is tested for what a caller sees:
 * nonzero, distinct, unrelated ids. Scripted sources force the rare cases:
 * 0 and ids the table holds (redrawn), a source that fails or never stops
 * repeating (O3M_ERANDOM, nothing changed), and - with ids from a tiny
 * range - constant collisions in the index, checked operation by operation
 * against a plain model of the ring. */
#include <criterion/criterion.h>

#include <string.h>

#include "ap_pending.h"

/* A scripted id source: the values of seq in turn, then fail. */
typedef struct script {
  const uint64_t *seq;
  int n, pos;
} script;

static int scripted(void *arg, uint64_t *id) {
  script *s = arg;
  if (s->pos >= s->n) return O3M_ERANDOM;
  *id = s->seq[s->pos++];
  return O3M_OK;
}

Test(pending, open_peek_close_and_reject_twice) {
  ap_pending *t;
  cr_assert_eq(ap_pending_create(&t, 4, 2, 1000, NULL, NULL), O3M_OK);
  double x[2] = {1.5, -2};
  uint64_t id;
  cr_assert_eq(ap_pending_open(t, 3, 77, x, 0, &id), O3M_OK);
  cr_assert_neq(id, 0);
  int arm;
  uint64_t mask;
  const double *got;
  cr_assert_eq(ap_pending_peek(t, id, 10, &arm, &mask, &got), O3M_OK);
  cr_assert_eq(arm, 3);
  cr_assert_eq(mask, 77);
  cr_assert_eq(got[0], 1.5);
  cr_assert_eq(got[1], -2.0);
  ap_pending_close(t, id);
  cr_assert_eq(ap_pending_peek(t, id, 10, &arm, &mask, &got), O3M_EEXISTS);
  /* Ids never issued: the neighbours of the one issued, 0, and others. */
  cr_assert_eq(ap_pending_peek(t, id - 1, 10, &arm, &mask, &got), O3M_ENOTFOUND);
  cr_assert_eq(ap_pending_peek(t, id + 1, 10, &arm, &mask, &got), O3M_ENOTFOUND);
  cr_assert_eq(ap_pending_peek(t, 0, 10, &arm, &mask, &got), O3M_ENOTFOUND);
  cr_assert_eq(ap_pending_peek(t, ~id, 10, &arm, &mask, &got), O3M_ENOTFOUND);
  /* Closing or expiring an unknown id changes nothing. */
  ap_pending_close(t, id + 1);
  ap_pending_expire(t, id + 1);
  ap_pending_stats st;
  ap_pending_stats_get(t, 10, &st);
  cr_assert_eq(st.opened, 1);
  cr_assert_eq(st.closed, 1);
  cr_assert_eq(st.expired, 0);
  cr_assert_eq(st.waiting, 0);
  ap_pending_destroy(t);
}

Test(pending, expiry_and_eviction_are_counted) {
  ap_pending *t;
  cr_assert_eq(ap_pending_create(&t, 2, 1, 100, NULL, NULL), O3M_OK);
  double x = 1;
  uint64_t a, b, c, d;
  cr_assert_eq(ap_pending_open(t, 0, 1, &x, 0, &a), O3M_OK);
  cr_assert_eq(ap_pending_open(t, 1, 1, &x, 50, &b), O3M_OK);
  int arm;
  uint64_t mask;
  const double *got;
  cr_assert_eq(ap_pending_peek(t, a, 101, &arm, &mask, &got), O3M_EEXPIRED);
  ap_pending_expire(t, a);
  cr_assert_eq(ap_pending_peek(t, a, 101, &arm, &mask, &got), O3M_EEXPIRED);
  cr_assert_eq(ap_pending_peek(t, b, 101, &arm, &mask, &got), O3M_OK);
  cr_assert_eq(ap_pending_open(t, 0, 1, &x, 120, &c), O3M_OK); /* reuses a's slot: expired */
  cr_assert_eq(ap_pending_peek(t, a, 121, &arm, &mask, &got), O3M_ENOTFOUND);
  cr_assert_eq(ap_pending_open(t, 0, 1, &x, 121, &d), O3M_OK); /* reuses b's slot: waiting */
  cr_assert_eq(ap_pending_peek(t, b, 121, &arm, &mask, &got), O3M_ENOTFOUND);
  cr_assert_eq(ap_pending_peek(t, c, 121, &arm, &mask, &got), O3M_OK);
  cr_assert_eq(ap_pending_peek(t, d, 121, &arm, &mask, &got), O3M_OK);
  ap_pending_stats st;
  ap_pending_stats_get(t, 121, &st);
  cr_assert_eq(st.expired, 1);
  cr_assert_eq(st.evicted, 1);
  cr_assert_eq(st.waiting, 2);
  ap_pending_destroy(t);
}

/* Decision ids were once consecutive numbers from a random base, so one
 * id named every other. From the OS source they must be nonzero, distinct,
 * never a neighbour of the previous one, and spread over the whole 64-bit
 * range (each bit set in about half of them). */
Test(pending, os_ids_are_distinct_and_unrelated) {
  enum { N = 4000 };
  ap_pending *t;
  cr_assert_eq(ap_pending_create(&t, N, 1, 1000, NULL, NULL), O3M_OK);
  static uint64_t ids[N];
  double x = 0;
  int bit_count[64] = {0};
  for (int i = 0; i < N; i++) {
    cr_assert_eq(ap_pending_open(t, 0, 1, &x, 0, &ids[i]), O3M_OK);
    cr_assert_neq(ids[i], 0);
    for (int b = 0; b < 64; b++) bit_count[b] += (int)(ids[i] >> b & 1);
    if (i > 0) {
      uint64_t diff = ids[i] - ids[i - 1];
      cr_assert(diff > 1000 && diff < UINT64_MAX - 1000, "ids %llu then %llu",
                (unsigned long long)ids[i - 1], (unsigned long long)ids[i]);
    }
    for (int j = 0; j < i; j++) cr_assert_neq(ids[i], ids[j]);
  }
  /* A bit that is the same in every id would be predictable; 4000 fair
   * coins land within 1600..2400 except with probability ~1e-36. */
  for (int b = 0; b < 64; b++)
    cr_assert(bit_count[b] > 1600 && bit_count[b] < 2400, "bit %d set in %d of %d ids", b,
              bit_count[b], N);
  int arm;
  uint64_t mask;
  const double *got;
  for (int i = 0; i < N; i++) cr_assert_eq(ap_pending_peek(t, ids[i], 0, &arm, &mask, &got), 0);
  ap_pending_destroy(t);
}

/* 0 and ids the table still holds (waiting or rewarded) are drawn again. */
Test(pending, zero_and_held_ids_are_redrawn) {
  static const uint64_t seq[] = {0, 7, 7, 0, 9, 7, 9, 11, 13};
  script sc = {seq, (int)(sizeof seq / sizeof seq[0]), 0};
  ap_pending *t;
  cr_assert_eq(ap_pending_create(&t, 3, 1, 1000, scripted, &sc), O3M_OK);
  double x = 0;
  uint64_t a, b, c;
  cr_assert_eq(ap_pending_open(t, 0, 1, &x, 0, &a), O3M_OK);
  cr_assert_eq(a, 7); /* 0 skipped */
  ap_pending_close(t, a);
  cr_assert_eq(ap_pending_open(t, 0, 1, &x, 0, &b), O3M_OK);
  cr_assert_eq(b, 9); /* 7 (rewarded, still held) and 0 skipped */
  cr_assert_eq(ap_pending_open(t, 0, 1, &x, 0, &c), O3M_OK);
  cr_assert_eq(c, 11); /* 7 and 9 skipped */
  cr_assert_eq(sc.pos, 8);
  /* The ring reuses 7's slot for 13: 7 is forgotten, may be issued again. */
  uint64_t d;
  cr_assert_eq(ap_pending_open(t, 0, 1, &x, 0, &d), O3M_OK);
  cr_assert_eq(d, 13);
  int arm;
  uint64_t mask;
  const double *got;
  cr_assert_eq(ap_pending_peek(t, 7, 0, &arm, &mask, &got), O3M_ENOTFOUND);
  cr_assert_eq(ap_pending_peek(t, 9, 0, &arm, &mask, &got), O3M_OK);
  ap_pending_destroy(t);
}

/* A failing source, or one that repeats a held id forever, fails the open
 * with O3M_ERANDOM and changes nothing. */
Test(pending, a_failing_or_stuck_source_changes_nothing) {
  static uint64_t seq[1 + AP_PENDING_MAX_DRAWS + 1];
  seq[0] = 5;
  for (int i = 1; i <= AP_PENDING_MAX_DRAWS; i++) seq[i] = (i & 1) ? 5 : 0;
  seq[AP_PENDING_MAX_DRAWS + 1] = 6;
  script sc = {seq, (int)(sizeof seq / sizeof seq[0]), 0};
  ap_pending *t;
  cr_assert_eq(ap_pending_create(&t, 1, 1, 1000, scripted, &sc), O3M_OK);
  double x = 0;
  uint64_t a = 0, b = 0;
  cr_assert_eq(ap_pending_open(t, 0, 1, &x, 0, &a), O3M_OK);
  cr_assert_eq(ap_pending_open(t, 0, 1, &x, 0, &b), O3M_ERANDOM);
  cr_assert_eq(b, 0);
  int arm;
  uint64_t mask;
  const double *got;
  /* a was not evicted by the failed open. */
  cr_assert_eq(ap_pending_peek(t, a, 0, &arm, &mask, &got), O3M_OK);
  ap_pending_stats st;
  ap_pending_stats_get(t, 0, &st);
  cr_assert_eq(st.opened, 1);
  cr_assert_eq(st.evicted, 0);
  cr_assert_eq(ap_pending_open(t, 0, 1, &x, 0, &b), O3M_OK);
  cr_assert_eq(b, 6);
  cr_assert_eq(ap_pending_open(t, 0, 1, &x, 0, &b), O3M_ERANDOM); /* source exhausted */
  cr_assert_eq(ap_pending_peek(t, 6, 0, &arm, &mask, &got), O3M_OK);
  ap_pending_destroy(t);
}

/* A source drawing from 0..40 into a ring of 5 (an index of 16 entries):
 * ids collide in the index all the time, slots are reused (deletions in the
 * middle of probe runs) and most lookups are of ids not held. Every answer
 * is compared with a plain model of the ring. */
typedef struct small_source {
  uint64_t state;
} small_source;

static uint64_t xorshift(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

static int small_ids(void *arg, uint64_t *id) {
  small_source *s = arg;
  *id = xorshift(&s->state) % 41;
  return O3M_OK;
}

enum { M_EMPTY, M_WAITING, M_REWARDED, M_EXPIRED };

Test(pending, collisions_eviction_and_unknown_ids_match_a_model) {
  enum { C = 5, STEPS = 20000, EXPIRY = 50 };
  small_source src = {0x9e3779b97f4a7c15ull};
  ap_pending *t;
  cr_assert_eq(ap_pending_create(&t, C, 1, EXPIRY, small_ids, &src), O3M_OK);
  struct {
    uint64_t id;
    int state, arm;
    int64_t opened;
  } ring[C] = {{0}};
  int next = 0;
  uint64_t ops = 0x2545f4914f6cdd1dull;
  for (int step = 0; step < STEPS; step++) {
    int64_t now = step;
    uint64_t r = xorshift(&ops);
    uint64_t probe = (r >> 8) % 43; /* 0..42: held ids, others, 0 */
    switch (r % 4) {
    case 0: { /* open */
      double x = (double)step;
      uint64_t id;
      cr_assert_eq(ap_pending_open(t, step % 7, 1, &x, now, &id), O3M_OK);
      cr_assert(id >= 1 && id <= 40);
      for (int i = 0; i < C; i++)
        cr_assert(!(ring[i].state != M_EMPTY && ring[i].id == id),
                  "step %d: id %llu issued while slot %d holds it", step,
                  (unsigned long long)id, i);
      ring[next].id = id;
      ring[next].state = M_WAITING;
      ring[next].arm = step % 7;
      ring[next].opened = now;
      next = (next + 1) % C;
      break;
    }
    case 1: /* close, as the service does after a successful peek */
    case 2: { /* expire */
      int arm;
      uint64_t mask;
      const double *x;
      int rc = ap_pending_peek(t, probe, now, &arm, &mask, &x);
      if (rc == O3M_OK && r % 4 == 1) ap_pending_close(t, probe);
      if (rc == O3M_EEXPIRED && r % 4 == 2) ap_pending_expire(t, probe);
      for (int i = 0; i < C; i++)
        if (ring[i].state != M_EMPTY && ring[i].id == probe) {
          if (rc == O3M_OK && r % 4 == 1) ring[i].state = M_REWARDED;
          if (rc == O3M_EEXPIRED && r % 4 == 2 && ring[i].state == M_WAITING)
            ring[i].state = M_EXPIRED;
        }
      break;
    }
    default:
      break;
    }
    /* Every id 0..42 answers as the model says. */
    for (uint64_t id = 0; id <= 42; id++) {
      int want = O3M_ENOTFOUND, want_arm = -1;
      for (int i = 0; i < C; i++) {
        if (ring[i].state == M_EMPTY || ring[i].id != id || id == 0) continue;
        if (ring[i].state == M_REWARDED) want = O3M_EEXISTS;
        else if (ring[i].state == M_EXPIRED || now - ring[i].opened > EXPIRY)
          want = O3M_EEXPIRED;
        else
          want = O3M_OK, want_arm = ring[i].arm;
      }
      int arm = -1;
      uint64_t mask;
      const double *x;
      int rc = ap_pending_peek(t, id, now, &arm, &mask, &x);
      cr_assert_eq(rc, want, "step %d, id %llu: got %s, model says %s", step,
                   (unsigned long long)id, o3m_errname(rc), o3m_errname(want));
      if (rc == O3M_OK) cr_assert_eq(arm, want_arm);
    }
  }
  ap_pending_destroy(t);
}

Test(pending, bad_arguments) {
  ap_pending *t = (ap_pending *)1;
  cr_assert_eq(ap_pending_create(&t, 0, 1, 1, NULL, NULL), O3M_EINVAL);
  cr_assert_null(t);
  cr_assert_eq(ap_pending_create(&t, 1, 0, 1, NULL, NULL), O3M_EINVAL);
  cr_assert_eq(ap_pending_create(&t, 1, 1, 0, NULL, NULL), O3M_EINVAL);
}

/* ------------------------------------------------------------ shares */

static int peek_ok(const ap_pending *t, uint64_t id) {
  int arm;
  uint64_t mask;
  const double *x;
  return ap_pending_peek(t, id, 0, &arm, &mask, &x);
}

/* One client evicting the others' decisions, in miniature: one owner opens
 * ten times the table while the other keeps three decisions open; the flood evicts only its
 * own oldest decisions. */
Test(pending, a_flooding_owner_evicts_only_its_own_decisions) {
  ap_pending *t;
  cr_assert_eq(ap_pending_create_shared(&t, 10, 1, 1000, 2, 5, NULL, NULL), O3M_OK);
  double x = 1;
  uint64_t honest[3], id;
  for (int i = 0; i < 3; i++) cr_assert_eq(ap_pending_open_as(t, 1, 0, 1, &x, 0, &honest[i]), 0);
  for (int i = 0; i < 100; i++) cr_assert_eq(ap_pending_open_as(t, 0, 0, 1, &x, 0, &id), 0);
  for (int i = 0; i < 3; i++) {
    cr_assert_eq(peek_ok(t, honest[i]), O3M_OK, "decision %d of owner 1 was evicted", i);
    cr_assert_eq(ap_pending_owner(t, honest[i]), 1);
  }
  cr_assert_eq(ap_pending_owner(t, id), 0);
  ap_pending_stats s0, s1, all;
  ap_pending_owner_stats(t, 0, &s0);
  ap_pending_owner_stats(t, 1, &s1);
  ap_pending_stats_get(t, 0, &all);
  cr_assert_eq(s1.evicted, 0);
  cr_assert_eq(s1.waiting, 3);
  cr_assert_eq(s0.evicted, 100 - 7, "owner 0 keeps the 7 slots owner 1 does not use");
  cr_assert_eq(s0.waiting, 7);
  cr_assert_eq(all.evicted, s0.evicted);
  cr_assert_eq(all.waiting, 10);
  ap_pending_destroy(t);
}

/* Shares bound what can be taken from an owner, not what it may use: an
 * owner may fill a table nobody else uses, and another owner then takes
 * back its share from that owner's oldest decisions, and beyond its share
 * only its own. */
Test(pending, shares_are_taken_back_from_an_owner_above_its_share) {
  ap_pending *t;
  cr_assert_eq(ap_pending_create_shared(&t, 6, 1, 1000, 2, 3, NULL, NULL), O3M_OK);
  double x = 1;
  uint64_t a[6], b[5];
  for (int i = 0; i < 6; i++) cr_assert_eq(ap_pending_open_as(t, 0, 0, 1, &x, 0, &a[i]), 0);
  for (int i = 0; i < 3; i++) {
    cr_assert_eq(ap_pending_open_as(t, 1, 0, 1, &x, 0, &b[i]), 0);
    cr_assert_eq(peek_ok(t, a[i]), O3M_ENOTFOUND, "owner 0's oldest goes first");
    cr_assert_eq(peek_ok(t, a[i + 1]), O3M_OK);
  }
  /* Owner 1 at its share: its own oldest goes. */
  cr_assert_eq(ap_pending_open_as(t, 1, 0, 1, &x, 0, &b[3]), 0);
  cr_assert_eq(peek_ok(t, b[0]), O3M_ENOTFOUND);
  for (int i = 3; i < 6; i++) cr_assert_eq(peek_ok(t, a[i]), O3M_OK);
  /* A rewarded decision holds its slot until its owner's turn comes. */
  ap_pending_close(t, b[1]);
  cr_assert_eq(ap_pending_open_as(t, 1, 0, 1, &x, 0, &b[4]), 0);
  cr_assert_eq(peek_ok(t, b[1]), O3M_ENOTFOUND);
  cr_assert_eq(peek_ok(t, b[2]), O3M_OK);
  ap_pending_stats s1;
  ap_pending_owner_stats(t, 1, &s1);
  cr_assert_eq(s1.evicted, 1);
  cr_assert_eq(s1.closed, 1);
  ap_pending_destroy(t);
}

/* Random opens of 4 owners with shares of 2 in a table of 9: a decision
 * is only ever evicted from the opener itself or from an owner above its
 * share, and exactly one goes per open of a full table. */
Test(pending, no_owner_within_its_share_loses_a_decision_to_another) {
  enum { C = 9, OWNERS = 4, SHARE = 2, STEPS = 5000 };
  ap_pending *t;
  cr_assert_eq(ap_pending_create_shared(&t, C, 1, 1000000, OWNERS, SHARE, NULL, NULL), O3M_OK);
  uint64_t held[C];
  int owner[C], n = 0;
  int count[OWNERS] = {0};
  uint64_t rs = 0x853c49e6748fea9bull;
  double x = 0;
  for (int step = 0; step < STEPS; step++) {
    /* Owner 0 opens most, so it is mostly above its share. */
    int o = (int)(xorshift(&rs) % 7);
    if (o >= OWNERS) o = 0;
    int before[OWNERS];
    memcpy(before, count, sizeof before);
    uint64_t id;
    cr_assert_eq(ap_pending_open_as(t, o, 0, 1, &x, step, &id), 0);
    int gone = 0;
    for (int i = 0; i < n; i++) {
      if (peek_ok(t, held[i]) == O3M_OK) continue;
      int v = owner[i];
      cr_assert(v == o || before[v] > SHARE, "step %d: owner %d (holding %d, share %d) lost a "
                "decision to owner %d", step, v, before[v], SHARE, o);
      count[v]--;
      held[i] = held[n - 1];
      owner[i] = owner[n - 1];
      n--;
      gone++;
      i--;
    }
    cr_assert_eq(gone, step < C ? 0 : 1, "step %d", step);
    held[n] = id;
    owner[n++] = o;
    count[o]++;
  }
  ap_pending_destroy(t);
}

Test(pending, bad_shares) {
  ap_pending *t = (ap_pending *)1;
  cr_assert_eq(ap_pending_create_shared(&t, 10, 1, 1, 0, 0, NULL, NULL), O3M_EINVAL);
  cr_assert_null(t);
  cr_assert_eq(ap_pending_create_shared(&t, 10, 1, 1, 3, 4, NULL, NULL), O3M_EINVAL);
  cr_assert_eq(ap_pending_create_shared(&t, 10, 1, 1, 2, -1, NULL, NULL), O3M_EINVAL);
  cr_assert_eq(ap_pending_create_shared(&t, 10, 1, 1, 2, 5, NULL, NULL), O3M_OK);
  double x = 0;
  uint64_t id;
  cr_assert_eq(ap_pending_open_as(t, 2, 0, 1, &x, 0, &id), O3M_EINVAL);
  cr_assert_eq(ap_pending_open_as(t, -1, 0, 1, &x, 0, &id), O3M_EINVAL);
  ap_pending_stats st;
  ap_pending_stats_get(t, 0, &st);
  cr_assert_eq(st.opened, 0);
  cr_assert_eq(ap_pending_owner(t, 12345), -1);
  ap_pending_destroy(t);
}
