/* o3m_alloc.h -- the one door through which O3M's own code allocates memory.
 *
 * o3m_malloc, o3m_calloc, o3m_realloc, o3m_strdup and o3m_strndup behave as
 * their C library namesakes, and o3m_free is free(). Memory always comes from
 * the C library's allocator, so a pointer from o3m_malloc may be given to
 * free() and one from getline(), realpath() or a library's strdup() to
 * o3m_free(): the wrappers add a decision, never a heap of their own.
 *
 * The decision is the hook (in the manner of Lua's lua_newstate(l_alloc) and
 * SQLite's SQLITE_CONFIG_MALLOC, reduced to what tests need): before each
 * allocation it is called with the size asked for and, when it answers
 * nonzero, the allocation fails as if the system were out of memory (NULL,
 * errno ENOMEM) without the C library being asked. No hook is set unless a
 * test sets one. o3m_alloc_fail_nth is the hook tests use: it makes the n-th
 * allocation from now fail, once, which is how tests/test_alloc_faults.c
 * walks every out-of-memory branch of a constructor (SQLite's
 * test/malloc_common.tcl does the same).
 *
 * Both are compiled into every build, Release included: with no hook set an
 * allocation costs one relaxed atomic load more than malloc, which is
 * nothing next to malloc itself, and one binary is what the tests check and
 * what users run. The hook is process-wide (an allocator is) and meant for
 * tests only; the daemons never set it. Setting it while other threads
 * allocate is safe, but which of their allocations the countdown hits is
 * then up to the scheduler.
 *
 * Allocations made inside third-party libraries (gRPC, protobuf-c when given
 * no allocator, OpenSSL, libcsv) do not pass through here. Where O3M unpacks
 * protobuf-c messages it passes an allocator over its arena
 * (proto/o3m_rpc.c), whose chunks come from o3m_malloc. */
#ifndef O3M_ALLOC_H
#define O3M_ALLOC_H

#include <stddef.h>

void *o3m_malloc(size_t n);
void *o3m_calloc(size_t count, size_t size);
/* Like realloc: on failure p is left as it was and still owned by the caller. */
void *o3m_realloc(void *p, size_t n);
char *o3m_strdup(const char *s);
char *o3m_strndup(const char *s, size_t n);
void o3m_free(void *p);

/* The hook: called with ud and the size of each allocation through the
 * functions above; a nonzero answer makes that allocation fail. It must not
 * allocate through o3m_alloc itself. NULL removes the hook. */
typedef int (*o3m_alloc_hook)(void *ud, size_t size);
void o3m_alloc_set_hook(o3m_alloc_hook hook, void *ud);

/* Test support. o3m_alloc_fail_nth(n) with n >= 1 sets a hook under which
 * the n-th allocation from now fails and every other one succeeds; n = 0
 * removes it (o3m_alloc_set_hook(NULL, NULL) does too). Both reset the
 * counters below. o3m_alloc_count is the number of allocations asked for
 * since, o3m_alloc_failed the number the countdown made fail (0 or 1, or
 * any number with o3m_alloc_fail_from). */
void o3m_alloc_fail_nth(long n);
/* The same, except that every allocation after the n-th fails too (SQLite's
 * persistent mode): a caller that retries a failed allocation with a
 * smaller size, as libcsv does, is then seen failing as well. */
void o3m_alloc_fail_from(long n);
long o3m_alloc_count(void);
long o3m_alloc_failed(void);

#endif
