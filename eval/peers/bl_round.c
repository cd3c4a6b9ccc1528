/*
 * bl_round: the plaintext reference for one round's statistic (bl_round.h).
 */
#include "bl_round.h"

#include <math.h>
#include <stdlib.h>

#include "o3m_blas.h"

int bl_round_check(const bl_round *r, o3m_err *e) {
  if (r->d <= 0 || r->K <= 0 || r->N <= 0)
    return o3m_err_set(e, O3M_EINVAL, "round: d, K and N must be positive (d=%d K=%d N=%d)",
               r->d, r->K, r->N);
  long sum = 0;
  for (int j = 0; j < r->N; j++) {
    if (r->dims[j] <= 0)
      return o3m_err_set(e, O3M_EINVAL, "round: party %d has width %d", j, r->dims[j]);
    sum += r->dims[j];
  }
  if (sum != r->d)
    return o3m_err_set(e, O3M_EINVAL, "round: party widths sum to %ld, not d=%d", sum, r->d);
  return 0;
}

int bl_round_plain(const bl_round *r, double *lin, double *quad, o3m_err *e) {
  double *y = malloc(sizeof(double) * (size_t)r->d);
  if (!y) return o3m_err_set(e, O3M_ENOMEM, "round: out of memory for %d values", r->d);
  for (int k = 0; k < r->K; k++) {
    const double *x = r->X + (size_t)k * (size_t)r->d;
    lin[k] = o3m_dot(r->d, x, r->theta);
    o3m_gemv(r->d, r->d, 1.0, r->Ainv, x, 0.0, y);
    quad[k] = o3m_dot(r->d, x, y);
  }
  free(y);
  return 0;
}

void bl_round_error(const bl_round *r, const double *lin, const double *quad,
          const double *plain_lin, const double *plain_quad, bl_cost *c) {
  double m = 0.0;
  for (int k = 0; k < r->K; k++) {
    m = fmax(m, fabs(lin[k] - plain_lin[k]));
    m = fmax(m, fabs(quad[k] - plain_quad[k]));
  }
  c->max_abs_err = m;
}

int bl_round_score(const bl_round *r, const double *lin, const double *quad, bl_cost *c,
                   o3m_err *e) {
  if (r->plain) {
    bl_round_error(r, lin, quad, r->plain, r->plain + r->K, c);
    return 0;
  }
  double *pl = malloc(2 * (size_t)r->K * sizeof *pl);
  if (!pl) return o3m_err_set(e, O3M_ENOMEM, "round: out of memory for %d values", 2 * r->K);
  int rc = bl_round_plain(r, pl, pl + r->K, e);
  if (!rc) bl_round_error(r, lin, quad, pl, pl + r->K, c);
  free(pl);
  return rc;
}
