/* p2b_shuffler.c -- anonymize, shuffle, threshold (see p2b_shuffler.h). */
#include "p2b_shuffler.h"

#include <math.h>
#include <stdlib.h>

#include "o3m_splitmix.h"

struct p2b_shuffler {
  int k, l;
  long cap, n;
  uint64_t rng;
  p2b_tuple *batch; /* cap tuples */
  long *count;      /* k code counts */
};

int p2b_shuffler_create(p2b_shuffler **out, int k, int l, long capacity, uint64_t seed,
                        o3m_err *e) {
  if (k < 1 || l < 1 || capacity < 1)
    return o3m_err_set(e, O3M_EINVAL,
                       "shuffler needs k >= 1 codes, threshold l >= 1, capacity >= 1 "
                       "(got %d, %d, %ld)",
                       k, l, capacity);
  p2b_shuffler *s = calloc(1, sizeof *s);
  if (!s) goto fail;
  s->batch = malloc((size_t)capacity * sizeof *s->batch);
  if (!s->batch) goto fail_s;
  s->count = calloc((size_t)k, sizeof *s->count);
  if (!s->count) goto fail_batch;
  s->k = k;
  s->l = l;
  s->cap = capacity;
  s->rng = seed;
  *out = s;
  return O3M_OK;
fail_batch:
  free(s->batch);
fail_s:
  free(s);
fail:
  return o3m_err_set(e, O3M_ENOMEM, "shuffler: out of memory for %ld tuples", capacity);
}

void p2b_shuffler_destroy(p2b_shuffler *s) {
  if (!s) return;
  free(s->count);
  free(s->batch);
  free(s);
}

int p2b_shuffler_add(p2b_shuffler *s, const p2b_tuple *t, o3m_err *e) {
  if (t->code < 0 || t->code >= s->k)
    return o3m_err_set(e, O3M_EINVAL, "shuffler: code %d is not in 0..%d", t->code, s->k - 1);
  if (!isfinite(t->reward))
    return o3m_err_set(e, O3M_EINVAL, "shuffler: reward is not finite");
  if (s->n == s->cap)
    return o3m_err_set(e, O3M_EFULL, "shuffler: batch holds its capacity, %ld tuples", s->cap);
  s->batch[s->n++] = *t;
  return O3M_OK;
}

void p2b_shuffler_release(p2b_shuffler *s, const p2b_tuple **out, long *n_out, long *n_dropped) {
  /* Fisher-Yates; the modulo bias of a 64-bit draw is below 2^-40 here. */
  for (long i = s->n - 1; i > 0; i--) {
    long j = (long)(o3m_splitmix64(&s->rng) % (uint64_t)(i + 1));
    p2b_tuple t = s->batch[i];
    s->batch[i] = s->batch[j];
    s->batch[j] = t;
  }
  for (long i = 0; i < s->n; i++) s->count[s->batch[i].code]++;
  long m = 0;
  for (long i = 0; i < s->n; i++)
    if (s->count[s->batch[i].code] >= s->l) s->batch[m++] = s->batch[i];
  /* The next batch counts from zero. */
  for (int c = 0; c < s->k; c++) s->count[c] = 0;
  if (n_dropped) *n_dropped = s->n - m;
  *n_out = m;
  *out = s->batch;
  s->n = 0;
}
