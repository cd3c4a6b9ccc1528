/* test_epochwatch.c -- the active participant's watch on the passive
 * parties' item epochs (active_participant/ap_epochwatch.h): the honest
 * reloads an operator makes never trip it, a party that names a new epoch
 * in every reply trips it after max changes within a minute, and one that
 * goes back to an epoch it left trips it at once; a minute later the record
 * is clean. */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>

#include "ap_epochwatch.h"

static ap_epochwatch *make(int parties, int max) {
  ap_epochwatch *w;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert(eq(int, ap_epochwatch_create(&w, parties, max, &e), 0), "%s", o3m_err_message(&e));
  return w;
}

/* One new table a minute for an hour, and twelve in one minute (the
 * default's bound), with the same epoch named in between as often as
 * rounds come: never flapping. */
/* A note of a request sent at t, the requests sent in time order. */
static int note(ap_epochwatch *w, int j, uint64_t epoch, int64_t t) {
  return ap_epochwatch_note(w, j, epoch, (uint64_t)t, t);
}

Test(epochwatch, honest_reloads_never_trip_it) {
  ap_epochwatch *w = make(2, 12);
  int64_t t = 1000;
  uint64_t epoch = 100;
  for (int m = 0; m < 60; m++, t += 60000) {
    epoch++;
    for (int k = 0; k < 50; k++)
      cr_assert(eq(int, note(w, 0, epoch, t + k), AP_EPOCH_OK));
  }
  for (int k = 0; k < 12; k++) {
    epoch++;
    cr_assert(eq(int, note(w, 1, epoch, t + 4000 * k), AP_EPOCH_OK),
              "change %d of 12 within a minute", k + 1);
  }
  ap_epochwatch_destroy(w);
}

/* A new epoch in every reply: the changes up to max pass, the next one
 * within the minute is too fast, and so is every one after it. The other
 * party is not affected. */
Test(epochwatch, a_new_epoch_every_reply_is_too_fast_after_max) {
  ap_epochwatch *w = make(2, 5);
  cr_assert(eq(int, note(w, 0, 1, 0), AP_EPOCH_OK));
  for (int k = 1; k <= 5; k++)
    cr_assert(eq(int, note(w, 0, 1 + (uint64_t)k, k), AP_EPOCH_OK));
  cr_assert(eq(int, ap_epochwatch_changes(w, 0, 6), 5));
  for (int k = 6; k <= 20; k++)
    cr_assert(eq(int, note(w, 0, 1 + (uint64_t)k, k), AP_EPOCH_TOO_FAST));
  cr_assert(eq(int, note(w, 1, 7, 20), AP_EPOCH_OK));
  /* A minute after the last change the record is clean. */
  cr_assert(eq(int, ap_epochwatch_changes(w, 0, 20 + AP_EPOCHWATCH_WINDOW_MS), 0));
  cr_assert(eq(int, note(w, 0, 99, 20 + AP_EPOCHWATCH_WINDOW_MS), AP_EPOCH_OK));
  ap_epochwatch_destroy(w);
}

/* A, B, A within the minute goes back at once, whatever max is; after a
 * minute on B, going back to A is an operator's new reload like any. */
Test(epochwatch, going_back_within_a_minute_trips_it) {
  ap_epochwatch *w = make(1, 600);
  cr_assert(eq(int, note(w, 0, 0xA, 0), AP_EPOCH_OK));
  cr_assert(eq(int, note(w, 0, 0xB, 10), AP_EPOCH_OK));
  cr_assert(eq(int, note(w, 0, 0xA, 20), AP_EPOCH_WENT_BACK));
  ap_epochwatch_destroy(w);
  w = make(1, 600);
  cr_assert(eq(int, note(w, 0, 0xA, 0), AP_EPOCH_OK));
  cr_assert(eq(int, note(w, 0, 0xB, 10), AP_EPOCH_OK));
  cr_assert(eq(int, note(w, 0, 0xA, 10 + AP_EPOCHWATCH_WINDOW_MS), AP_EPOCH_OK));
  ap_epochwatch_destroy(w);
}

/* max = 0 watches nothing; a bound outside 0..O3M_MAX_EPOCH_CHANGES is
 * refused. */
Test(epochwatch, zero_is_off_and_bounds_are_checked) {
  ap_epochwatch *w = make(1, 0);
  for (int k = 0; k < 100; k++)
    cr_assert(eq(int, note(w, 0, (uint64_t)(k % 2), k), AP_EPOCH_OK));
  ap_epochwatch_destroy(w);
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert(eq(int, ap_epochwatch_create(&w, 1, 601, &e), O3M_EINVAL));
  cr_assert_null(w);
}

/* Batches in flight finish in any order: a reply to a batch sent before a
 * party's reload, noted after one sent after it, names the epoch the party
 * left. That is no going back: a reload under pipelined batches must not
 * hold an honest party out. A real return to the old epoch, in a later
 * batch, still is. */
Test(epochwatch, an_older_batchs_reply_naming_the_left_epoch_is_no_going_back) {
  ap_epochwatch *w;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert(eq(int, ap_epochwatch_create(&w, 1, 12, &e), 0), "%s", o3m_err_message(&e));
  cr_assert(eq(int, ap_epochwatch_note(w, 0, 0xA, 1, 0), AP_EPOCH_OK));
  /* Batch 3, sent after the reload, finishes before batch 2. */
  cr_assert(eq(int, ap_epochwatch_note(w, 0, 0xB, 3, 10), AP_EPOCH_OK));
  cr_assert(eq(int, ap_epochwatch_note(w, 0, 0xA, 2, 11), AP_EPOCH_OK),
            "the reply of batch 2, sent before the reload, counted as going back");
  cr_assert(eq(int, ap_epochwatch_note(w, 0, 0xB, 4, 12), AP_EPOCH_OK));
  cr_assert(eq(int, ap_epochwatch_note(w, 0, 0xA, 5, 13), AP_EPOCH_WENT_BACK));
  ap_epochwatch_destroy(w);
}
