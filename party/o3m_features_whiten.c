/* o3m_features_whiten.c -- a table's moments, which the dummy rows are
 * drawn from, and whitening (o3m_features_internal.h).
 *
 * Whitening (o3m_features_whiten) replaces every row x of a table by W x
 * in place, W the table's symmetric inverse square root of the covariance
 * (linalg/o3m_moments.h); the largest row and the moments of the dummies
 * are then computed again from the whitened rows, and W is wiped. */
#include <stdlib.h>
#include <string.h>

#include "o3m_blas.h"
#include "o3m_alloc.h"
#include "o3m_features_internal.h"
#include "o3m_moments.h"

/* ------------------------------------------------------------------ moments */

/* Sets t->means and t->root (Sigma^{1/2}) from t's rows, allocating them on
 * the first call. A table whose covariance overflows (values beyond about
 * 1e154) gets a zero root, so its dummies are its means. O3M_ENOMEM is the
 * only failure. */
int table_moments(ft_table *t) {
  const size_t n = (size_t)t->n_cols;
  if (!t->means) t->means = o3m_malloc(sizeof *t->means * n);
  if (!t->root) t->root = o3m_malloc(sizeof *t->root * n * n);
  double *V = o3m_malloc(sizeof *V * n * n), *lambda = o3m_malloc(sizeof *lambda * n);
  int rc = t->means && t->root && V && lambda ? O3M_OK : O3M_ENOMEM;
  if (!rc) rc = o3m_moments_eig(t->n_rows, t->n_cols, t->vals, t->n_cols, t->means, V, lambda);
  if (rc == O3M_ENONFINITE) {
    memset(t->root, 0, sizeof *t->root * n * n);
    rc = O3M_OK;
  } else if (!rc) {
    rc = o3m_moments_root(t->n_cols, V, lambda, 0, t->root);
  }
  o3m_free(V);
  o3m_free(lambda);
  return rc == O3M_OK ? O3M_OK : O3M_ENOMEM;
}

/* Records row r as t's largest when it is (see parse_row). */
void note_max_row(ft_table *t, int r) {
  double sq = sum_sq(t->vals + (size_t)r * (size_t)t->n_cols, t->n_cols);
  if (r == 0 || !(sq <= t->max_sq)) {
    t->max_sq = sq;
    t->max_row = r;
  }
}

/* Replaces every row x of t by W x, W its whitening map, then recomputes
 * the largest row and the dummies' moments; W is wiped. On failure the
 * rows may be partly transformed. */
static int table_whiten(ft_table *t) {
  const int n = t->n_cols;
  double *W = o3m_malloc(sizeof *W * (size_t)n * (size_t)n), *x = o3m_malloc(sizeof *x * (size_t)n);
  int rc = W && x ? o3m_moments_whitener(t->n_rows, n, t->vals, n, W) : O3M_ENOMEM;
  for (int r = 0; !rc && r < t->n_rows; r++) {
    double *row = t->vals + (size_t)r * (size_t)n;
    o3m_symv(n, 1.0, W, row, 0.0, x); /* W is symmetric: its upper triangle is enough */
    memcpy(row, x, sizeof *x * (size_t)n);
    note_max_row(t, r);
  }
  if (W) explicit_bzero(W, sizeof *W * (size_t)n * (size_t)n);
  o3m_free(W);
  o3m_free(x);
  return rc ? rc : table_moments(t);
}

int o3m_features_whiten(o3m_features *f, o3m_err *e) {
  if (!f) return o3m_err_set(e, O3M_EINVAL, "o3m_features_whiten: f is NULL");
  if (f->whitened || f->norm_checked)
    return o3m_err_set(e, O3M_ESTATE,
                       f->whitened ? "o3m_features_whiten: the tables are already whitened"
                                   : "o3m_features_whiten: must come before "
                                     "o3m_features_check_norm");
  ft_table *tables[2] = {&f->user, &f->item};
  for (int i = 0; i < 2; i++) {
    if (!tables[i]->present) continue;
    int rc = table_whiten(tables[i]);
    if (rc == O3M_ENONFINITE)
      return o3m_err_set_at(e, rc, tables[i]->name, 0,
                            "cannot whiten: the covariance of the columns overflows "
                            "(values beyond about 1e154)");
    if (rc) return o3m_err_set_at(e, rc, tables[i]->name, 0, "cannot whiten: out of memory");
  }
  /* The whitened values are what the party masks: the epochs name them. */
  features_epochs(f);
  f->whitened = 1;
  o3m_err_clear(e);
  return O3M_OK;
}
