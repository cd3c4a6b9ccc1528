/* eval_masker.c -- see eval_masker.h. The masker owns one block per party
 * and the buffers to cut the parties' columns out of a round and sum their
 * parts; nothing is allocated per round. */
#include "eval_masker.h"

#include <stdlib.h>
#include <string.h>

struct eval_masker {
  o3m_partition part;
  o3m_block **blocks;
  double *Xj; /* K x max d_j */
  double *Xm; /* K x d */
};

void eval_masker_destroy(eval_masker *m) {
  if (!m) return;
  if (m->blocks)
    for (int j = 0; j < m->part.m; j++) o3m_block_destroy(m->blocks[j]);
  free(m->blocks);
  free(m->Xj);
  free(m->Xm);
  free(m);
}

int eval_masker_create(eval_masker **out, const o3m_partition *part, int K, int have_seed,
                       uint64_t seed, o3m_err *e) {
  *out = NULL;
  eval_masker *m = calloc(1, sizeof *m);
  if (!m) return o3m_err_set(e, O3M_ENOMEM, "out of memory");
  m->part = *part;
  o3m_rng *rng = NULL;
  o3m_mask *mask = NULL;
  int rc = have_seed ? o3m_rng_create_seeded_insecure(&rng, seed) : o3m_rng_create_os(&rng);
  if (!rc) rc = o3m_mask_generate(&mask, part->d, rng);
  int maxdj = 0;
  for (int j = 0; j < part->m; j++)
    if (part->dims[j] > maxdj) maxdj = part->dims[j];
  if (!rc) {
    m->blocks = calloc(part->m, sizeof *m->blocks);
    m->Xj = malloc(sizeof(double) * (size_t)K * maxdj);
    m->Xm = malloc(sizeof(double) * (size_t)K * part->d);
    if (!m->blocks || !m->Xj || !m->Xm) rc = O3M_ENOMEM;
  }
  for (int j = 0; !rc && j < part->m; j++)
    rc = o3m_block_from_mask(&m->blocks[j], mask, part->offset[j], part->dims[j]);
  o3m_mask_destroy(mask);
  o3m_rng_destroy(rng);
  if (rc) {
    eval_masker_destroy(m);
    return o3m_err_set(e, rc, "cannot draw the mask: %s", o3m_strerror(rc));
  }
  *out = m;
  return O3M_OK;
}

/* Xm = sum_j Q^j x^j for every candidate: what the AP receives and sums. */
const double *eval_masker_apply(eval_masker *m, int K, const double *X) {
  int d = m->part.d;
  for (int j = 0; j < m->part.m; j++) {
    int dj = m->part.dims[j], off = m->part.offset[j];
    for (int k = 0; k < K; k++)
      memcpy(m->Xj + (size_t)k * dj, X + (size_t)k * d + off, sizeof(double) * dj);
    o3m_block_apply(m->blocks[j], K, m->Xj, j == 0 ? 0.0 : 1.0, m->Xm);
  }
  return m->Xm;
}

