/* eval_masker.c -- see eval_masker.h. The masker owns one block per party
 * and the buffers to cut the parties' columns out of a round and sum their
 * parts; in secure mode also one o3m_secagg handle per passive party and the
 * ring buffers. Nothing is allocated per round. */
#include "eval_masker.h"

#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "o3m_blas.h"
#include "o3m_config.h"
#include "o3m_rng.h"
#include "o3m_secagg.h"

struct eval_masker {
  o3m_partition part;
  eval_aggregation agg;
  o3m_block **blocks;
  double *Xj; /* K x max d_j */
  double *Xm; /* K x d */
  /* Secure mode (with passive parties). */
  int n_pp;
  o3m_secagg **sa;  /* n_pp handles */
  double *Yj;       /* K x d: one passive party's part */
  double *Ypp;      /* K x d: the decoded sum of theirs */
  uint64_t *W;      /* K x d: one party's words */
  uint64_t *acc;    /* K x d: their sum */
  uint64_t round;   /* the nonce of the next round */
};

int eval_aggregation_parse(const char *s, eval_aggregation *out) {
  if (strcmp(s, "secure") == 0) *out = EVAL_AGG_SECURE;
  else if (strcmp(s, "per-party") == 0) *out = EVAL_AGG_PER_PARTY;
  else return O3M_EINVAL;
  return O3M_OK;
}

const char *eval_aggregation_name(eval_aggregation a) {
  return a == EVAL_AGG_SECURE ? "secure" : "per-party";
}

void eval_masker_destroy(eval_masker *m) {
  if (!m) return;
  if (m->blocks)
    for (int j = 0; j < m->part.m; j++) o3m_block_destroy(m->blocks[j]);
  if (m->sa)
    for (int j = 0; j < m->n_pp; j++) o3m_secagg_destroy(m->sa[j]);
  free(m->sa);
  free(m->blocks);
  free(m->Xj);
  free(m->Xm);
  free(m->Yj);
  free(m->Ypp);
  free(m->W);
  free(m->acc);
  free(m);
}

/* The passive parties' handles, with key pairs drawn in memory (wiped at
 * once) and the daemons' default bounds. */
static int secure_setup(eval_masker *m, int K, o3m_err *e) {
  int n = m->n_pp, d = m->part.d, rc, scale;
  if (sodium_init() < 0) return o3m_err_set(e, O3M_ERANDOM, "libsodium could not start");
  double *norms = malloc(sizeof *norms * (size_t)n);
  unsigned char(*pk)[O3M_SECAGG_KEY_BYTES] = malloc(sizeof *pk * (size_t)n);
  unsigned char(*sk)[O3M_SECAGG_KEY_BYTES] = sodium_malloc(sizeof *sk * (size_t)n);
  m->sa = calloc((size_t)n, sizeof *m->sa);
  m->Yj = malloc(sizeof(double) * (size_t)K * d);
  m->Ypp = malloc(sizeof(double) * (size_t)K * d);
  m->W = malloc(sizeof(uint64_t) * (size_t)K * d);
  m->acc = malloc(sizeof(uint64_t) * (size_t)K * d);
  if (!norms || !pk || !sk || !m->sa || !m->Yj || !m->Ypp || !m->W || !m->acc) {
    rc = o3m_err_set(e, O3M_ENOMEM, "out of memory");
    goto done;
  }
  for (int j = 0; j < n; j++) {
    norms[j] = O3M_CONFIG_DEFAULT_MAX_NORM;
    crypto_box_keypair(pk[j], sk[j]);
  }
  rc = o3m_secagg_scale(n, norms, &scale, e);
  for (int j = 0; !rc && j < n; j++)
    rc = o3m_secagg_create_from_key(&m->sa[j], n, (const unsigned char(*)[O3M_SECAGG_KEY_BYTES])pk,
                                    j, sk[j], scale, e);
done:
  if (sk) sodium_free(sk); /* wipes */
  free(pk);
  free(norms);
  return rc;
}

int eval_masker_create(eval_masker **out, const o3m_partition *part, int K, int have_seed,
                       uint64_t seed, eval_aggregation agg, o3m_err *e) {
  *out = NULL;
  eval_masker *m = calloc(1, sizeof *m);
  if (!m) return o3m_err_set(e, O3M_ENOMEM, "out of memory");
  m->part = *part;
  m->agg = agg;
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
  if (agg == EVAL_AGG_SECURE && part->m > 1) {
    m->n_pp = part->m - 1;
    rc = secure_setup(m, K, e);
    if (rc) {
      eval_masker_destroy(m);
      return rc;
    }
  }
  *out = m;
  return O3M_OK;
}

/* Xj = party j's columns of the K rows of X. */
static void cut(const eval_masker *m, int j, int K, const double *X) {
  int d = m->part.d, dj = m->part.dims[j], off = m->part.offset[j];
  for (int k = 0; k < K; k++)
    memcpy(m->Xj + (size_t)k * dj, X + (size_t)k * d + off, sizeof(double) * dj);
}

/* Secure: every passive party masks its part for the same round (the same
 * nonce and transcript), the words are summed and decoded, and the sum is
 * added to the own part, in the order o3m-active adds them. */
static const double *apply_secure(eval_masker *m, int K, const double *X) {
  const int d = m->part.d;
  const size_t nv = (size_t)K * d;
  unsigned char nonce[O3M_SECAGG_NONCE_BYTES] = {0};
  uint64_t r = m->round++;
  for (int i = 0; i < 8; i++) nonce[i] = (unsigned char)(r >> (8 * i));
  cut(m, 0, K, X);
  o3m_block_apply(m->blocks[0], K, m->Xj, 0.0, m->Xm);
  memset(m->acc, 0, sizeof *m->acc * nv);
  for (int j = 1; j <= m->n_pp; j++) {
    cut(m, j, K, X);
    o3m_block_apply(m->blocks[j], K, m->Xj, 0.0, m->Yj);
    o3m_secagg *s = m->sa[j - 1];
    o3m_secagg_begin(s, o3m_block_mask_id(m->blocks[j]), nonce, d, 1);
    o3m_secagg_query(s, NULL, 0, NULL);
    if (o3m_secagg_mask(s, nv, m->Yj, m->W, NULL) < 0) return NULL;
    o3m_secagg_add_part(nv, (const int64_t *)m->W, m->acc);
  }
  o3m_secagg_decode(o3m_secagg_scale_of(m->sa[0]), nv, m->acc, m->Ypp);
  o3m_axpy((int)nv, 1.0, m->Ypp, m->Xm);
  return m->Xm;
}

/* Xm = sum_j Q^j x^j for every candidate: what the AP receives and sums. */
const double *eval_masker_apply(eval_masker *m, int K, const double *X) {
  if (m->n_pp > 0) return apply_secure(m, K, X);
  for (int j = 0; j < m->part.m; j++) {
    cut(m, j, K, X);
    o3m_block_apply(m->blocks[j], K, m->Xj, j == 0 ? 0.0 : 1.0, m->Xm);
  }
  return m->Xm;
}
