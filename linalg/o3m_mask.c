/* o3m_mask.c -- drawing the orthogonal mask and cutting it into blocks.
 *
 * A d x d matrix with i.i.d. N(0,1) entries is orthonormalized row by row by
 * modified Gram-Schmidt, each row passed twice ("twice is enough": one pass
 * leaves a loss of orthogonality proportional to the condition number, the
 * second brings it to rounding level). Rows are contiguous in row-major
 * storage, so working on rows keeps the level-1 BLAS calls unit-stride; for a
 * square matrix orthonormal rows imply orthonormal columns (Q Q^T = I implies
 * Q^T Q = I). The Gaussian start makes Q Haar-distributed up to the signs the
 * procedure fixes, which is all O3M needs: a Q the AP cannot guess. */
#include "o3m_mask.h"
#include "o3m_alloc.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "o3m_blas.h"
#include "o3m_bytes.h"

struct o3m_mask {
  int d;
  uint64_t id;
  double *q; /* d x d row-major */
};

struct o3m_block {
  int d, dj;
  uint64_t mask_id;
  double *q; /* d x dj row-major: the columns col0..col0+dj-1 of Q */
};

/* ---- partitions ---- */

int o3m_partition_from_dims(o3m_partition *p, int m, const int *dims, o3m_err *e) {
  if (m < 1 || m > O3M_MAX_PARTIES)
    return o3m_err_set(e, O3M_EINVAL, "partition: %d parties, expected 1..%d", m,
                       O3M_MAX_PARTIES);
  long d = 0;
  for (int j = 0; j < m; j++) {
    if (dims[j] < 1)
      return o3m_err_set(e, O3M_EINVAL, "partition: party %d has dimension %d, expected >= 1",
                         j + 1, dims[j]);
    p->dims[j] = dims[j];
    p->offset[j] = (int)d;
    d += dims[j];
    if (d > O3M_MAX_DIM)
      return o3m_err_set(e, O3M_EINVAL, "partition: total dimension exceeds %d", O3M_MAX_DIM);
  }
  p->m = m;
  p->d = (int)d;
  return O3M_OK;
}

int o3m_partition_even(o3m_partition *p, int d, int m, o3m_err *e) {
  if (m < 1 || m > d || m > O3M_MAX_PARTIES)
    return o3m_err_set(e, O3M_EINVAL, "partition: cannot split d = %d columns among %d parties",
                       d, m);
  int dims[O3M_MAX_PARTIES];
  for (int j = 0; j < m; j++) dims[j] = d / m + (j < d % m);
  return o3m_partition_from_dims(p, m, dims, e);
}

int o3m_partition_parse(o3m_partition *p, const char *text, o3m_err *e) {
  int dims[O3M_MAX_PARTIES];
  int m = 0;
  const char *s = text;
  if (!s || !*s) return o3m_err_set(e, O3M_EINVAL, "partition: empty list of dims");
  for (;;) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || errno || v < 1 || v > O3M_MAX_DIM || (*end && *end != ','))
      return o3m_err_set(e, O3M_EINVAL,
                         "partition '%s': entry %d is not a positive integer up to %d", text,
                         m + 1, O3M_MAX_DIM);
    if (m == O3M_MAX_PARTIES)
      return o3m_err_set(e, O3M_EINVAL, "partition '%s': more than %d parties", text,
                         O3M_MAX_PARTIES);
    dims[m++] = (int)v;
    if (!*end) break;
    s = end + 1;
  }
  return o3m_partition_from_dims(p, m, dims, e);
}

/* ---- masks ---- */

int o3m_mgs_orthonormalize(double *A, int d) {
  for (int i = 0; i < d; i++) {
    double *ai = A + (size_t)i * d;
    double norm0 = o3m_nrm2(d, ai);
    if (!(norm0 > 0) || !isfinite(norm0)) return O3M_ENOTPD;
    for (int pass = 0; pass < 2; pass++) {
      for (int j = 0; j < i; j++) {
        const double *aj = A + (size_t)j * d;
        /* a_i -= (a_j . a_i) a_j, with a_i already reduced against a_0..a_{j-1} */
        o3m_axpy(d, -o3m_dot(d, aj, ai), aj, ai);
      }
    }
    double norm = o3m_nrm2(d, ai);
    if (!(norm > 1e-10 * norm0)) return O3M_ENOTPD;
    o3m_scal(d, 1.0 / norm, ai);
  }
  return O3M_OK;
}

int o3m_mask_is_signed_permutation(const double *Q, int d, double tol) {
  for (int i = 0; i < d; i++) {
    int big = 0;
    for (int j = 0; j < d; j++) {
      double a = fabs(Q[(size_t)i * d + j]);
      if (fabs(a - 1.0) <= tol)
        big++;
      else if (a > tol)
        return 0;
    }
    if (big != 1) return 0;
  }
  return 1;
}

static int mask_alloc(o3m_mask **out, int d) {
  *out = NULL;
  if (d < 1 || d > O3M_MAX_DIM) return O3M_EINVAL;
  o3m_mask *m = o3m_calloc(1, sizeof *m);
  if (!m) return O3M_ENOMEM;
  m->q = o3m_malloc(sizeof(double) * (size_t)d * d);
  if (!m->q) {
    o3m_free(m);
    return O3M_ENOMEM;
  }
  m->d = d;
  *out = m;
  return O3M_OK;
}

int o3m_mask_generate(o3m_mask **out, int d, o3m_rng *rng) {
  o3m_mask *m;
  int rc = mask_alloc(&m, d);
  if (rc) {
    *out = NULL;
    return rc;
  }
  /* A Gaussian matrix is singular or orthonormalizes to a signed permutation
   * with probability zero; the loop is there so that "never the identity" is
   * a guarantee rather than a likelihood. d == 1 cannot avoid it. */
  for (int attempt = 0; attempt < 64; attempt++) {
    rc = o3m_rng_gaussian(rng, m->q, (long)d * d);
    if (rc) break;
    rc = o3m_mgs_orthonormalize(m->q, d);
    if (rc == O3M_ENOTPD) continue;
    if (rc) break;
    if (d > 1 && o3m_mask_is_signed_permutation(m->q, d, 1e-6)) {
      rc = O3M_ENOTPD;
      continue;
    }
    do {
      rc = o3m_rng_u64(rng, &m->id);
    } while (!rc && m->id == 0);
    break;
  }
  if (rc) {
    o3m_mask_destroy(m);
    *out = NULL;
    return rc == O3M_ENOTPD ? O3M_ERANDOM : rc;
  }
  *out = m;
  return O3M_OK;
}

int o3m_mask_from_matrix(o3m_mask **out, int d, const double *Q, uint64_t id) {
  int rc = mask_alloc(out, d);
  if (rc) return rc;
  memcpy((*out)->q, Q, sizeof(double) * (size_t)d * d);
  (*out)->id = id;
  return O3M_OK;
}

void o3m_mask_destroy(o3m_mask *m) {
  if (!m) return;
  o3m_mask_forget(m);
  o3m_free(m->q);
  o3m_free(m);
}

void o3m_mask_forget(o3m_mask *m) {
  if (m && m->q) explicit_bzero(m->q, sizeof(double) * (size_t)m->d * m->d);
}

int o3m_mask_dim(const o3m_mask *m) { return m->d; }
uint64_t o3m_mask_id(const o3m_mask *m) { return m->id; }
const double *o3m_mask_matrix(const o3m_mask *m) { return m->q; }

/* ---- blocks ---- */

static int block_alloc(o3m_block **out, int d, int dj, uint64_t mask_id) {
  *out = NULL;
  if (d < 1 || d > O3M_MAX_DIM || dj < 1 || dj > d) return O3M_EINVAL;
  o3m_block *b = o3m_calloc(1, sizeof *b);
  if (!b) return O3M_ENOMEM;
  b->q = o3m_malloc(sizeof(double) * (size_t)d * dj);
  if (!b->q) {
    o3m_free(b);
    return O3M_ENOMEM;
  }
  b->d = d;
  b->dj = dj;
  b->mask_id = mask_id;
  *out = b;
  return O3M_OK;
}

int o3m_block_from_mask(o3m_block **out, const o3m_mask *m, int col0, int dj) {
  if (col0 < 0 || dj < 1 || col0 + dj > m->d) {
    *out = NULL;
    return O3M_EINVAL;
  }
  int rc = block_alloc(out, m->d, dj, m->id);
  if (rc) return rc;
  for (int i = 0; i < m->d; i++)
    memcpy((*out)->q + (size_t)i * dj, m->q + (size_t)i * m->d + col0, sizeof(double) * dj);
  return O3M_OK;
}

int o3m_block_create(o3m_block **out, int d, int dj, const double *data, uint64_t mask_id) {
  int rc = block_alloc(out, d, dj, mask_id);
  if (rc) return rc;
  for (size_t i = 0; i < (size_t)d * dj; i++) {
    if (!isfinite(data[i])) {
      o3m_block_destroy(*out);
      *out = NULL;
      return O3M_ENONFINITE;
    }
    (*out)->q[i] = data[i];
  }
  return O3M_OK;
}

void o3m_block_destroy(o3m_block *b) {
  if (!b) return;
  explicit_bzero(b->q, sizeof(double) * (size_t)b->d * b->dj);
  o3m_free(b->q);
  o3m_free(b);
}

size_t o3m_block_le_bytes(int d, int dj) { return 8 * (size_t)d * (size_t)dj; }

void o3m_block_write_le(const o3m_block *b, unsigned char *out) {
  size_t n = (size_t)b->d * b->dj;
  for (size_t i = 0; i < n; i++) o3m_put_le64(out + 8 * i, o3m_double_bits(b->q[i]));
}

int o3m_block_read_le(o3m_block **out, int d, int dj, uint64_t mask_id, o3m_block_fill_fn fill,
                      void *ctx) {
  int rc = block_alloc(out, d, dj, mask_id);
  if (rc) return rc;
  o3m_block *b = *out;
  size_t n = (size_t)d * dj;
  unsigned char *bytes = (unsigned char *)b->q;
  rc = fill(ctx, bytes, 8 * n);
  /* In place: value i is read from bytes 8i..8i+7 before it is stored over
   * them, and no other value's bytes are touched. */
  for (size_t i = 0; rc == O3M_OK && i < n; i++) {
    b->q[i] = o3m_bits_double(o3m_get_le64(bytes + 8 * i));
    if (!isfinite(b->q[i])) rc = O3M_ENONFINITE;
  }
  if (rc != O3M_OK) {
    o3m_block_destroy(b);
    *out = NULL;
    return rc < 0 ? rc : O3M_EINVAL;
  }
  return O3M_OK;
}

int o3m_block_rows(const o3m_block *b) { return b->d; }
int o3m_block_cols(const o3m_block *b) { return b->dj; }
uint64_t o3m_block_mask_id(const o3m_block *b) { return b->mask_id; }
const double *o3m_block_data(const o3m_block *b) { return b->q; }

void o3m_block_apply(const o3m_block *b, int K, const double *Xj, double beta, double *Y) {
  /* Y (K x d) = Xj (K x dj) * Qj^T (dj x d) + beta Y */
  o3m_gemm_nt(K, b->d, b->dj, 1.0, Xj, b->q, beta, Y);
}
