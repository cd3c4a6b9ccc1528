/* eval_whiten.c -- per-party whitening for offline runs (see eval_whiten.h). */
#include "eval_whiten.h"

#include <stdlib.h>
#include <string.h>

#include "o3m_blas.h"
#include "o3m_moments.h"

struct eval_whiten {
  o3m_partition part;
  double *W[O3M_MAX_PARTIES]; /* d_j x d_j, NULL for a party that does not whiten */
  double *x;                  /* scratch, max d_j */
};

int eval_whiten_parse(const char *spec, const o3m_partition *part,
                      unsigned char on[O3M_MAX_PARTIES], o3m_err *e) {
  memset(on, 0, O3M_MAX_PARTIES);
  if (strcmp(spec, "none") == 0) return O3M_OK;
  if (strcmp(spec, "all") == 0) {
    memset(on, 1, (size_t)part->m);
    return O3M_OK;
  }
  const char *p = spec;
  for (;;) {
    char *end;
    long j = strtol(p, &end, 10);
    if (end == p || j < 0 || j >= part->m || (*end && *end != ','))
      return o3m_err_set(e, O3M_EINVAL,
                         "--whiten: expected all, none or party indices 0..%d separated "
                         "by commas, got '%.40s'",
                         part->m - 1, spec);
    on[j] = 1;
    if (!*end) return O3M_OK;
    p = end + 1;
  }
}

void eval_whiten_destroy(eval_whiten *w) {
  if (!w) return;
  for (int j = 0; j < w->part.m; j++) free(w->W[j]);
  free(w->x);
  free(w);
}

int eval_whiten_create(eval_whiten **out, const o3m_partition *part,
                       const unsigned char on[O3M_MAX_PARTIES], long n, const double *X,
                       o3m_err *e) {
  *out = NULL;
  int any = 0, maxd = 0;
  for (int j = 0; j < part->m; j++) {
    any |= on[j];
    if (part->dims[j] > maxd) maxd = part->dims[j];
  }
  if (!any) return O3M_OK;
  if (n < 2 || n > 0x7fffffffL)
    return o3m_err_set(e, O3M_EINVAL, "--whiten: %ld calibration rows, need 2..2^31-1", n);
  eval_whiten *w = calloc(1, sizeof *w);
  if (!w) return o3m_err_set(e, O3M_ENOMEM, "--whiten: out of memory");
  w->part = *part;
  w->x = malloc(sizeof *w->x * (size_t)maxd);
  int rc = w->x ? O3M_OK : O3M_ENOMEM;
  for (int j = 0; j < part->m && !rc; j++) {
    if (!on[j]) continue;
    int dj = part->dims[j];
    w->W[j] = malloc(sizeof *w->W[j] * (size_t)dj * (size_t)dj);
    rc = w->W[j] ? o3m_moments_whitener((int)n, dj, X + part->offset[j], part->d, w->W[j])
                 : O3M_ENOMEM;
  }
  if (rc) {
    eval_whiten_destroy(w);
    return o3m_err_set(e, rc, "--whiten: cannot compute the whitening maps: %s",
                       o3m_strerror(rc));
  }
  *out = w;
  return O3M_OK;
}

void eval_whiten_apply(eval_whiten *w, long n, double *X) {
  if (!w) return;
  const int d = w->part.d;
  for (long r = 0; r < n; r++)
    for (int j = 0; j < w->part.m; j++) {
      if (!w->W[j]) continue;
      int dj = w->part.dims[j];
      double *xj = X + (size_t)r * (size_t)d + w->part.offset[j];
      o3m_symv(dj, 1.0, w->W[j], xj, 0.0, w->x);
      memcpy(xj, w->x, sizeof *xj * (size_t)dj);
    }
}
