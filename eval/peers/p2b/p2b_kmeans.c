/* p2b_kmeans.c -- k-means++ and Lloyd's iterations (see p2b_kmeans.h). */
#include "p2b_kmeans.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "o3m_blas.h"
#include "o3m_splitmix.h"

/* Rows per BLAS block when assigning points to centroids. */
#define P2B_KMEANS_BLOCK 512

struct p2b_kmeans {
  int d, k;
  double *C;     /* k x d centroids */
  double *cnorm; /* k squared norms */
  double *G;     /* BLOCK x k cross products (workspace) */
};

int p2b_kmeans_k(const p2b_kmeans *km) { return km->k; }
int p2b_kmeans_d(const p2b_kmeans *km) { return km->d; }

const double *p2b_kmeans_centroid(const p2b_kmeans *km, int y) {
  return y >= 0 && y < km->k ? km->C + (size_t)y * km->d : NULL;
}

static void update_norms(p2b_kmeans *km) {
  for (int c = 0; c < km->k; c++) {
    const double *cr = km->C + (size_t)c * km->d;
    km->cnorm[c] = o3m_dot(km->d, cr, cr);
  }
}

/* Assigns the m rows of X (a block) to their nearest centroids: label[i] and
 * dist[i] (squared distance, clamped at 0 against cancellation). */
static void assign_block(p2b_kmeans *km, const double *X, int m, int *label, double *dist) {
  int d = km->d, k = km->k;
  /* G = X C^T, m x k */
  o3m_gemm_nt(m, k, d, 1.0, X, km->C, 0.0, km->G);
  for (int i = 0; i < m; i++) {
    const double *g = km->G + (size_t)i * k;
    double xn = o3m_dot(d, X + (size_t)i * d, X + (size_t)i * d);
    int best = 0;
    double bd = DBL_MAX;
    for (int c = 0; c < k; c++) {
      double v = km->cnorm[c] - 2.0 * g[c];
      if (v < bd) bd = v, best = c;
    }
    label[i] = best;
    if (dist) dist[i] = fmax(0.0, bd + xn);
  }
}

int p2b_kmeans_encode(const p2b_kmeans *km, const double *x) {
  int best = 0;
  double bd = DBL_MAX;
  for (int c = 0; c < km->k; c++) {
    /* ||c||^2 - 2 x.c orders the centroids as the distance does. */
    double v = km->cnorm[c] - 2.0 * o3m_dot(km->d, x, km->C + (size_t)c * km->d);
    if (v < bd) bd = v, best = c;
  }
  return best;
}

double p2b_kmeans_inertia(const p2b_kmeans *km, const double *X, long n) {
  double s = 0;
  for (long i = 0; i < n; i++) {
    const double *x = X + (size_t)i * km->d;
    const double *c = km->C + (size_t)p2b_kmeans_encode(km, x) * km->d;
    for (int j = 0; j < km->d; j++) s += (x[j] - c[j]) * (x[j] - c[j]);
  }
  return n ? s / (double)n : 0.0;
}

void p2b_kmeans_destroy(p2b_kmeans *km) {
  if (!km) return;
  free(km->G);
  free(km->cnorm);
  free(km->C);
  free(km);
}

int p2b_kmeans_train(p2b_kmeans **out, const double *X, long n, int d, int k, int iters,
                     uint64_t seed, o3m_err *e) {
  if (d < 1 || k < 1 || iters < 1)
    return o3m_err_set(e, O3M_EINVAL, "k-means needs d >= 1, k >= 1, iters >= 1 (got %d, %d, %d)",
                       d, k, iters);
  if (n < k)
    return o3m_err_set(e, O3M_EINVAL, "k-means needs at least k = %d points, got %ld", k, n);
  for (long i = 0; i < n * d; i++)
    if (!isfinite(X[i]))
      return o3m_err_set(e, O3M_ENONFINITE, "k-means point %ld has a non-finite value", i / d);
  int rc = O3M_ENOMEM;
  p2b_kmeans *km = calloc(1, sizeof *km);
  if (!km) goto fail;
  km->d = d;
  km->k = k;
  km->C = malloc((size_t)k * d * sizeof *km->C);
  km->cnorm = malloc((size_t)k * sizeof *km->cnorm);
  km->G = malloc((size_t)P2B_KMEANS_BLOCK * k * sizeof *km->G);
  int *label = malloc((size_t)n * sizeof *label);
  double *dist = malloc((size_t)n * sizeof *dist);
  long *count = malloc((size_t)k * sizeof *count);
  if (!km->C || !km->cnorm || !km->G || !label || !dist || !count) goto fail_work;

  /* k-means++: the first centroid uniform, each next one a point drawn with
   * probability proportional to its squared distance to the chosen ones. */
  uint64_t s = seed;
  long first = (long)(o3m_splitmix64_unif(&s) * (double)n);
  memcpy(km->C, X + (size_t)first * d, (size_t)d * sizeof *km->C);
  for (long i = 0; i < n; i++) dist[i] = DBL_MAX;
  for (int c = 1; c < k; c++) {
    const double *prev = km->C + (size_t)(c - 1) * d;
    double total = 0;
    for (long i = 0; i < n; i++) {
      double q = 0;
      for (int j = 0; j < d; j++) {
        double t = X[(size_t)i * d + j] - prev[j];
        q += t * t;
      }
      if (q < dist[i]) dist[i] = q;
      total += dist[i];
    }
    long pick = n - 1;
    if (total > 0) {
      double r = o3m_splitmix64_unif(&s) * total, acc = 0;
      for (long i = 0; i < n; i++)
        if ((acc += dist[i]) > r) {
          pick = i;
          break;
        }
    } else {
      pick = (long)(o3m_splitmix64_unif(&s) * (double)n); /* every point is already a centroid */
    }
    memcpy(km->C + (size_t)c * d, X + (size_t)pick * d, (size_t)d * sizeof *km->C);
  }
  update_norms(km);

  for (long i = 0; i < n; i++) label[i] = -1;
  for (int it = 0; it < iters; it++) {
    long changed = 0;
    for (long i0 = 0; i0 < n; i0 += P2B_KMEANS_BLOCK) {
      int m = (int)(n - i0 < P2B_KMEANS_BLOCK ? n - i0 : P2B_KMEANS_BLOCK);
      int lab[P2B_KMEANS_BLOCK];
      assign_block(km, X + (size_t)i0 * d, m, lab, dist + i0);
      for (int i = 0; i < m; i++)
        if (lab[i] != label[i0 + i]) changed++, label[i0 + i] = lab[i];
    }
    if (!changed) break;
    memset(km->C, 0, (size_t)k * d * sizeof *km->C);
    memset(count, 0, (size_t)k * sizeof *count);
    for (long i = 0; i < n; i++) {
      o3m_axpy(d, 1.0, X + (size_t)i * d, km->C + (size_t)label[i] * d);
      count[label[i]]++;
    }
    for (int c = 0; c < k; c++) {
      if (count[c]) {
        o3m_scal(d, 1.0 / (double)count[c], km->C + (size_t)c * d);
        continue;
      }
      /* An empty cluster takes the point farthest from its own centroid. */
      long far = 0;
      for (long i = 1; i < n; i++)
        if (dist[i] > dist[far]) far = i;
      memcpy(km->C + (size_t)c * d, X + (size_t)far * d, (size_t)d * sizeof *km->C);
      dist[far] = 0;
    }
    update_norms(km);
  }
  free(count);
  free(dist);
  free(label);
  *out = km;
  return O3M_OK;

fail_work:
  free(count);
  free(dist);
  free(label);
  p2b_kmeans_destroy(km);
  km = NULL;
fail:
  return o3m_err_set(e, rc, "k-means: out of memory for %ld points, k = %d", n, k);
}
