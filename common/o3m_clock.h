/* o3m_clock.h -- the monotonic clock in milliseconds, a sleep that a
 * stop flag ends early, and the doubling backoff of every retry loop.
 *
 * Every wait with backoff (a party's block fetch, the AP's start-up wait for
 * the passive parties and its circuit breaker's probe), every time limit and
 * every timed run (checkpoint periods, the access log's rate limit,
 * o3m-eval and the benchmarks) measures time on CLOCK_MONOTONIC, which wall-clock changes do not
 * move, and sleeps in steps of at most O3M_CLOCK_STOP_POLL_MS so that a
 * signal handler's stop flag ends the wait within one step. The functions
 * are thread-safe (a backoff is its one caller's) and cannot fail (CLOCK_MONOTONIC always exists on Linux;
 * nanosleep cut short by a signal just shortens one step). */
#ifndef O3M_CLOCK_H
#define O3M_CLOCK_H

#include <signal.h>
#include <stdint.h>
#include <time.h>

/* How often a sleep looks at its stop flag. */
#define O3M_CLOCK_STOP_POLL_MS 50

/* Milliseconds on the monotonic clock (an arbitrary origin). */
static inline int64_t o3m_clock_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Unix time in milliseconds (CLOCK_REALTIME): only to compare with times
 * other hosts wrote, such as the reward stream's record times. */
static inline int64_t o3m_clock_wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Nanoseconds on the same clock: for ages kept in an atomic word (an age
 * must not jump when the wall clock is set). */
static inline uint64_t o3m_clock_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Seconds on the same clock, to the nanosecond: for timing runs. */
static inline double o3m_clock_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Sleeps ms milliseconds (nothing for ms <= 0) unless *stop is or becomes
 * nonzero; stop may be NULL. Returns 1 if it stopped early, else 0. */
static inline int o3m_clock_sleep_unless_stopped(int64_t ms, const volatile sig_atomic_t *stop) {
  while (ms > 0) {
    if (stop && *stop) return 1;
    int64_t step = ms < O3M_CLOCK_STOP_POLL_MS ? ms : O3M_CLOCK_STOP_POLL_MS;
    struct timespec ts = {0, (long)step * 1000000L};
    nanosleep(&ts, NULL);
    ms -= step;
  }
  return stop && *stop;
}

/* A doubling backoff: pauses of first_ms, 2 first_ms, 4 first_ms, ... up to
 * max_ms, each cut to what is left of an optional budget. The retry loops
 * (the party block fetch, the AP's start-up wait for the passive parties and
 * its breaker's probe) all back off through it, so that they cannot drift
 * apart in how they do. */
typedef struct o3m_backoff {
  int64_t first_ms, max_ms;
  int64_t next_ms; /* the next pause, before the budget cuts it */
  int64_t end_ms;  /* the budget's end on o3m_clock_ms, or INT64_MAX for none */
} o3m_backoff;

/* A budget_ms for retries that only a stop or a success ends. */
#define O3M_BACKOFF_UNBOUNDED (-1)

/* Starts b: the next pause is first_ms (>= 1, at most max_ms), and the
 * budget ends budget_ms from now (0: already spent), or never with
 * O3M_BACKOFF_UNBOUNDED (any negative budget_ms). */
static inline void o3m_backoff_start(o3m_backoff *b, int64_t first_ms, int64_t max_ms,
                                     int64_t budget_ms) {
  b->first_ms = b->next_ms = first_ms;
  b->max_ms = max_ms;
  b->end_ms = budget_ms >= 0 ? o3m_clock_ms() + budget_ms : INT64_MAX;
}

/* The next pause back to first_ms (after a success); the budget stays. */
static inline void o3m_backoff_reset(o3m_backoff *b) { b->next_ms = b->first_ms; }

/* What is left of the budget in ms: <= 0 once it is spent, INT64_MAX
 * without one. */
static inline int64_t o3m_backoff_left(const o3m_backoff *b) {
  return b->end_ms == INT64_MAX ? INT64_MAX : b->end_ms - o3m_clock_ms();
}

/* The pause to take now (the next one, cut to what is left of the budget),
 * and the one after it doubled up to max_ms. */
static inline int64_t o3m_backoff_next(o3m_backoff *b) {
  int64_t left = o3m_backoff_left(b);
  int64_t pause = b->next_ms < left ? b->next_ms : left;
  b->next_ms = b->next_ms * 2 < b->max_ms ? b->next_ms * 2 : b->max_ms;
  return pause;
}

/* Sleeps the pause o3m_backoff_next gives unless *stop is or becomes
 * nonzero (stop may be NULL): 1 if it stopped early, else 0. */
static inline int o3m_backoff_sleep(o3m_backoff *b, const volatile sig_atomic_t *stop) {
  return o3m_clock_sleep_unless_stopped(o3m_backoff_next(b), stop);
}

#endif
