/* ap_clock.h -- the active participant's clock: monotonic milliseconds and
 * a sleep that a stop request cuts short.
 *
 * One home for the AP's modules (service, peers, round) until a clock shared
 * by every daemon lands (issue 10 lists the copies in pmg, passive and eval);
 * then this header goes. Both functions hold no state and may be called
 * from any thread. */
#ifndef AP_CLOCK_H
#define AP_CLOCK_H

#include <signal.h>
#include <stdint.h>
#include <time.h>

/* Milliseconds of CLOCK_MONOTONIC: only differences mean anything. */
static inline int64_t ap_clock_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Sleeps ms milliseconds in steps of at most 50 ms; returns 1 as soon as
 * *stop is set (stop may be NULL: never), else 0 after the whole time. */
static inline int ap_clock_sleep_unless_stopped(int64_t ms, volatile sig_atomic_t *stop) {
  while (ms > 0) {
    if (stop && *stop) return 1;
    int64_t step = ms < 50 ? ms : 50;
    struct timespec ts = {0, (long)step * 1000000L};
    nanosleep(&ts, NULL);
    ms -= step;
  }
  return stop && *stop;
}

#endif
