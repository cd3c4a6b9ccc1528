/* o3m_assert.h -- invariants checked in every build.
 *
 * O3M_ASSERT(cond) writes "file:line: invariant failed: cond" to stderr and
 * aborts when cond is false. Unlike assert() it is not compiled out under
 * NDEBUG, and that is why it exists: CMake's Release and RelWithDebInfo
 * define NDEBUG, and those are the builds that users, CI and the test suite
 * run, so an assert() would be checked nowhere that matters.
 *
 * Use it only for a condition that is cheap (a comparison, a return code
 * that is already there) and that no input, peer or disk can make false: a
 * violated one is a bug in O3M, after which going on would write out of
 * bounds or into the model. Bad input, I/O errors and peers that misbehave
 * get an O3M error code (o3m_error.h), never an assertion.
 *
 * The message goes to stderr, not through o3m_log (which could be what is
 * broken), and abort() follows. Daemons write no core file
 * (o3m_daemon_protect_memory), so this line is the whole report. */
#ifndef O3M_ASSERT_H
#define O3M_ASSERT_H

#include <stdio.h>
#include <stdlib.h>

#define O3M_ASSERT(cond)                                                                           \
  ((cond) ? (void)0 : o3m_assert_fail(#cond, __FILE__, __LINE__))

static inline _Noreturn void o3m_assert_fail(const char *cond, const char *file, int line) {
  fprintf(stderr, "%s:%d: invariant failed: %s\n", file, line, cond);
  fflush(stderr);
  abort();
}

#endif
