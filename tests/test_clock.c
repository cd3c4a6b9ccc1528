/* test_clock.c -- the doubling backoff every retry loop shares: its pauses
 * double from the first to the cap, a reset starts them over, a budget cuts
 * the last pause and then reports itself spent, and an unbounded one never
 * is. */
#include <criterion/criterion.h>

#include "o3m_clock.h"

Test(backoff, pauses_double_up_to_the_cap_and_a_reset_starts_over) {
  o3m_backoff b;
  o3m_backoff_start(&b, 100, 2000, O3M_BACKOFF_UNBOUNDED);
  const int64_t want[] = {100, 200, 400, 800, 1600, 2000, 2000};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    int64_t p = o3m_backoff_next(&b);
    cr_assert_eq(p, want[i], "pause %zu: got %lld, want %lld", i, (long long)p, (long long)want[i]);
  }
  cr_assert_eq(o3m_backoff_left(&b), INT64_MAX);
  o3m_backoff_reset(&b);
  cr_assert_eq(o3m_backoff_next(&b), 100);
  cr_assert_eq(o3m_backoff_next(&b), 200);
}

Test(backoff, a_budget_cuts_the_pause_and_is_then_spent) {
  o3m_backoff b;
  o3m_backoff_start(&b, 50, 500, 60);
  int64_t left = o3m_backoff_left(&b);
  cr_assert(left > 0 && left <= 60, "left %lld", (long long)left);
  cr_assert_eq(o3m_backoff_next(&b), 50);
  /* The second pause (100) is cut to what is left of the 60 ms. */
  int64_t p = o3m_backoff_next(&b);
  cr_assert(p <= 60 && p < 100, "second pause %lld", (long long)p);
  cr_assert_eq(o3m_backoff_sleep(&b, NULL), 0);
  cr_assert_leq(o3m_backoff_left(&b), 0);
  /* A budget of 0 is spent from the start. */
  o3m_backoff_start(&b, 50, 500, 0);
  cr_assert_leq(o3m_backoff_left(&b), 0);
}

Test(backoff, a_stop_flag_ends_the_sleep) {
  o3m_backoff b;
  o3m_backoff_start(&b, 10000, 10000, O3M_BACKOFF_UNBOUNDED);
  volatile sig_atomic_t stop = 1;
  int64_t t0 = o3m_clock_ms();
  cr_assert_eq(o3m_backoff_sleep(&b, &stop), 1);
  cr_assert_lt(o3m_clock_ms() - t0, 1000);
}
