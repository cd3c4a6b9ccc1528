/* o3m_clock.h -- the monotonic clock in milliseconds and a sleep that a
 * stop flag ends early.
 *
 * Every wait with backoff (a party's block fetch), every time limit and
 * every timed run (checkpoint periods, the access log's rate limit,
 * o3m-eval and the benchmarks) measures time on CLOCK_MONOTONIC, which wall-clock changes do not
 * move, and sleeps in steps of at most O3M_CLOCK_STOP_POLL_MS so that a
 * signal handler's stop flag ends the wait within one step. Both functions
 * are thread-safe and cannot fail (CLOCK_MONOTONIC always exists on Linux;
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

#endif
