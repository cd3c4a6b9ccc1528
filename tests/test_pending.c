/* test_pending.c -- the AP's table of decisions waiting for a reward. */
#include <criterion/criterion.h>

#include "ap_pending.h"

Test(pending, open_peek_close_and_reject_twice) {
  ap_pending *t;
  cr_assert_eq(ap_pending_create(&t, 4, 2, 1000, 1000), O3M_OK);
  double x[2] = {1.5, -2};
  uint64_t id;
  ap_pending_open(t, 3, 77, x, 0, &id);
  cr_assert_eq(id, 1000);
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
  cr_assert_eq(ap_pending_peek(t, 999, 10, &arm, &mask, &got), O3M_ENOTFOUND);
  cr_assert_eq(ap_pending_peek(t, 1001, 10, &arm, &mask, &got), O3M_ENOTFOUND);
  cr_assert_eq(ap_pending_peek(t, 0, 10, &arm, &mask, &got), O3M_ENOTFOUND);
  ap_pending_stats st;
  ap_pending_stats_get(t, 10, &st);
  cr_assert_eq(st.opened, 1);
  cr_assert_eq(st.closed, 1);
  cr_assert_eq(st.waiting, 0);
  ap_pending_destroy(t);
}

Test(pending, expiry_and_eviction_are_counted) {
  ap_pending *t;
  cr_assert_eq(ap_pending_create(&t, 2, 1, 100, 5), O3M_OK);
  double x = 1;
  uint64_t a, b, c;
  ap_pending_open(t, 0, 1, &x, 0, &a);
  ap_pending_open(t, 1, 1, &x, 50, &b);
  int arm;
  uint64_t mask;
  const double *got;
  cr_assert_eq(ap_pending_peek(t, a, 101, &arm, &mask, &got), O3M_EEXPIRED);
  ap_pending_expire(t, a);
  cr_assert_eq(ap_pending_peek(t, b, 101, &arm, &mask, &got), O3M_OK);
  ap_pending_open(t, 0, 1, &x, 120, &c); /* reuses a's slot: already expired */
  ap_pending_open(t, 0, 1, &x, 121, &c); /* reuses b's slot: b still waiting */
  cr_assert_eq(ap_pending_peek(t, b, 121, &arm, &mask, &got), O3M_ENOTFOUND);
  ap_pending_stats st;
  ap_pending_stats_get(t, 121, &st);
  cr_assert_eq(st.expired, 1);
  cr_assert_eq(st.evicted, 1);
  cr_assert_eq(st.waiting, 2);
  ap_pending_destroy(t);
}
