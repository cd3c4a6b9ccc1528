/* o3m_alloc.c -- allocation through one door with a hook that can say no
 * (o3m_alloc.h). The hook and its argument are two atomics: the argument is
 * stored before the hook and read after it, so a thread that sees a hook
 * sees its argument. The countdown is a third atomic, decremented by every
 * allocation while its hook is set; the allocation that takes it from 1 to 0
 * is the one that fails (and, in the persistent mode, every one after). */
#include "o3m_alloc.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static _Atomic(o3m_alloc_hook) g_hook;
static _Atomic(void *) g_hook_ud;
static atomic_long g_countdown;
static atomic_long g_count;
static atomic_long g_failed;

/* 1 when the allocation of n bytes must fail (errno is then ENOMEM). */
static int refused(size_t n) {
  o3m_alloc_hook h = atomic_load_explicit(&g_hook, memory_order_acquire);
  if (!h) return 0;
  if (!h(atomic_load_explicit(&g_hook_ud, memory_order_relaxed), n)) return 0;
  errno = ENOMEM;
  return 1;
}

void *o3m_malloc(size_t n) { return refused(n) ? NULL : malloc(n); }

void *o3m_calloc(size_t count, size_t size) {
  /* The hook sees the product; an overflowing one is calloc's to refuse. */
  size_t n = size && count > (size_t)-1 / size ? (size_t)-1 : count * size;
  return refused(n) ? NULL : calloc(count, size);
}

void *o3m_realloc(void *p, size_t n) { return refused(n) ? NULL : realloc(p, n); }

char *o3m_strdup(const char *s) { return refused(strlen(s) + 1) ? NULL : strdup(s); }

char *o3m_strndup(const char *s, size_t n) {
  return refused(strnlen(s, n) + 1) ? NULL : strndup(s, n);
}

void o3m_free(void *p) { free(p); }

void o3m_alloc_set_hook(o3m_alloc_hook hook, void *ud) {
  atomic_store_explicit(&g_hook, NULL, memory_order_release);
  atomic_store(&g_count, 0);
  atomic_store(&g_failed, 0);
  atomic_store_explicit(&g_hook_ud, ud, memory_order_relaxed);
  atomic_store_explicit(&g_hook, hook, memory_order_release);
}

/* The countdown's hook: counts every allocation, fails the one that takes
 * the countdown from 1 to 0. */
static int countdown_hook(void *ud, size_t size) {
  const int persistent = ud != NULL;
  (void)size;
  atomic_fetch_add(&g_count, 1);
  long left = atomic_fetch_sub(&g_countdown, 1);
  if (persistent ? left > 1 : left != 1) return 0;
  atomic_fetch_add(&g_failed, 1);
  return 1;
}

/* The hook's argument says which mode: NULL one-shot, non-NULL persistent. */
static void countdown(long n, void *persistent) {
  o3m_alloc_set_hook(NULL, NULL);
  if (n <= 0) return;
  atomic_store(&g_countdown, n);
  o3m_alloc_set_hook(countdown_hook, persistent);
}

void o3m_alloc_fail_nth(long n) { countdown(n, NULL); }

void o3m_alloc_fail_from(long n) { countdown(n, &g_countdown); }

long o3m_alloc_count(void) { return atomic_load(&g_count); }

long o3m_alloc_failed(void) { return atomic_load(&g_failed); }
