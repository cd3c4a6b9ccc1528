/*
 * bl_he: one round's statistic under Paillier with one masking round
 * (bl_he.h). The roles run in this process, one after the other; what
 * crosses between them is counted in bytes as it would be serialized
 * (every ciphertext bl_paillier_ct_size bytes, every plaintext
 * bl_paillier_pt_size bytes). Every Paillier call is timed and counted by
 * kind for bl_he_stats.
 */
#include "bl_he.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bl_paillier.h"
#include "o3m_blas.h"
#include "o3m_clock.h"

struct bl_he {
  bl_he_config c;
  bl_paillier *sk; /* the key holder's key */
  bl_paillier *pk; /* the public copy parties and evaluator use */
  double keygen_s;
  bl_he_stats st;    /* the last round */
  bl_he_stats total; /* every round whose operations all succeeded */
};

void bl_he_config_default(bl_he_config *c) {
  c->bits = BL_PAILLIER_BITS;
  c->frac_bits = 24;
  c->stat_bits = 40;
}

int bl_he_create(bl_he **out, const bl_he_config *c, o3m_err *e) {
  *out = NULL;
  if (c->frac_bits < 4 || c->frac_bits > 48)
    return o3m_err_set(e, O3M_EINVAL, "he: frac_bits must be in [4, 48], got %d", c->frac_bits);
  if (c->stat_bits < 20 || c->stat_bits > 128)
    return o3m_err_set(e, O3M_EINVAL, "he: stat_bits must be in [20, 128], got %d", c->stat_bits);
  /* The largest plaintext is t (see bl_he_round): it must stay below n/2. */
  int tbits = 2 * (2 * c->frac_bits + 64 + c->stat_bits) + 2 * c->frac_bits + 64 + 40 +
              c->stat_bits;
  if (c->bits < tbits + 24)
    return o3m_err_set(e, O3M_EINVAL, "he: a %d-bit key is too small for %d-bit masks",
                       c->bits, tbits);
  bl_he *h = calloc(1, sizeof *h);
  if (!h) return o3m_err_set(e, O3M_ENOMEM, "he: out of memory");
  h->c = *c;
  double t0 = o3m_clock_s();
  int rc = bl_paillier_keygen(c->bits, &h->sk, e);
  if (!rc) rc = bl_paillier_public(h->sk, &h->pk, e);
  h->keygen_s = o3m_clock_s() - t0;
  if (rc) {
    bl_he_destroy(h);
    return rc;
  }
  *out = h;
  return 0;
}

void bl_he_destroy(bl_he *h) {
  if (!h) return;
  bl_paillier_free(h->pk);
  bl_paillier_free(h->sk);
  free(h);
}

double bl_he_keygen_seconds(const bl_he *h) { return h->keygen_s; }
void bl_he_stats_get(const bl_he *h, bl_he_stats *s) { *s = h->st; }
void bl_he_stats_total(const bl_he *h, bl_he_stats *s) { *s = h->total; }

/* a += b, kind by kind. */
static void stats_add(bl_he_stats *a, const bl_he_stats *b) {
  a->n_noise += b->n_noise, a->s_noise += b->s_noise;
  a->n_enc += b->n_enc, a->s_enc += b->s_enc;
  a->n_dec += b->n_dec, a->s_dec += b->s_dec;
  a->n_add += b->n_add, a->s_add += b->s_add;
  a->n_mul += b->n_mul, a->s_mul += b->s_mul;
  a->n_mmul += b->n_mmul, a->s_mmul += b->s_mmul;
}

/* Everything one round allocates, released together by work_free. */
typedef struct work {
  int n_ct;
  bl_pct **ct;     /* K x d: Enc(x_kc) for passive columns (NULL for the AP's) */
  bl_pct **send;   /* K x (d + 2): Enc(w_i), Enc(v), Enc(lin + s) per candidate */
  bl_pct *acc, *tmp, *zero, *one; /* one = 1 = Enc(0) with r = 1, never changed */
  mpz_t *noise;    /* precomputed r^n, one per ciphertext created */
  int n_noise, next_noise;
  mpz_t *xe;       /* K x d encoded contexts (the parties' own plaintexts) */
  mpz_t *Ue;       /* d x d encoded Cholesky factor, upper part */
  mpz_t *te;       /* d encoded theta */
  mpz_t *r;        /* d masks of the current candidate */
  mpz_t s, t, m, q;
  mpz_t *outq, *outl; /* K decrypted q' and lin + s */
  double *U;
} work;

static mpz_t *mpz_array(size_t n) {
  mpz_t *a = malloc(n * sizeof *a);
  if (a)
    for (size_t i = 0; i < n; i++) mpz_init(a[i]);
  return a;
}

static void mpz_array_free(mpz_t *a, size_t n) {
  if (!a) return;
  for (size_t i = 0; i < n; i++) mpz_clear(a[i]);
  free(a);
}

static void work_free(work *w, const bl_round *r) {
  size_t K = (size_t)r->K, d = (size_t)r->d;
  if (w->ct)
    for (size_t i = 0; i < K * d; i++) bl_pct_free(w->ct[i]);
  if (w->send)
    for (size_t i = 0; i < K * (d + 2); i++) bl_pct_free(w->send[i]);
  free(w->ct);
  free(w->send);
  bl_pct_free(w->acc);
  bl_pct_free(w->tmp);
  bl_pct_free(w->zero);
  bl_pct_free(w->one);
  mpz_array_free(w->noise, (size_t)w->n_noise);
  mpz_array_free(w->xe, K * d);
  mpz_array_free(w->Ue, d * d);
  mpz_array_free(w->te, d);
  mpz_array_free(w->r, d);
  mpz_array_free(w->outq, K);
  mpz_array_free(w->outl, K);
  mpz_clears(w->s, w->t, w->m, w->q, NULL);
  free(w->U);
}

static int work_alloc(work *w, const bl_he *h, const bl_round *r, o3m_err *e) {
  size_t K = (size_t)r->K, d = (size_t)r->d;
  memset(w, 0, sizeof *w);
  mpz_inits(w->s, w->t, w->m, w->q, NULL);
  size_t passive = (size_t)(r->d - r->dims[0]);
  w->n_noise = (int)(K * passive + K * (d + 2));
  w->ct = calloc(K * d, sizeof *w->ct);
  w->send = calloc(K * (d + 2), sizeof *w->send);
  w->noise = mpz_array((size_t)w->n_noise);
  w->xe = mpz_array(K * d);
  w->Ue = mpz_array(d * d);
  w->te = mpz_array(d);
  w->r = mpz_array(d);
  w->outq = mpz_array(K);
  w->outl = mpz_array(K);
  w->U = malloc(d * d * sizeof *w->U);
  if (!w->ct || !w->send || !w->noise || !w->xe || !w->Ue || !w->te || !w->r || !w->outq ||
      !w->outl || !w->U)
    return o3m_err_set(e, O3M_ENOMEM, "he: out of memory for d=%zu K=%zu", d, K);
  int rc = bl_pct_new(h->pk, &w->acc, e);
  if (!rc) rc = bl_pct_new(h->pk, &w->tmp, e);
  if (!rc) rc = bl_pct_new(h->pk, &w->zero, e);
  if (!rc) rc = bl_pct_new(h->pk, &w->one, e);
  for (size_t k = 0; !rc && k < K; k++)
    for (size_t c = (size_t)r->dims[0]; !rc && c < d; c++)
      rc = bl_pct_new(h->pk, &w->ct[k * d + c], e);
  for (size_t i = 0; !rc && i < K * (d + 2); i++) rc = bl_pct_new(h->pk, &w->send[i], e);
  return rc;
}

/* The timed wrappers: each adds its seconds and one to its kind's count. */
#define TIMED(h, kind, call)                   \
  do {                                         \
    double t__ = o3m_clock_s();                \
    call;                                      \
    (h)->st.s_##kind += o3m_clock_s() - t__;   \
    (h)->st.n_##kind++;                        \
  } while (0)

static int encode(double v, int f, mpz_ptr out, const char *what, o3m_err *e) {
  int rc = bl_paillier_encode(v, f, out, e);
  if (rc) o3m_err_set(e, rc, "he: %s is %g, which cannot be encoded", what, v);
  return rc;
}

/* c <- c re-randomized with the next precomputed noise. */
static int rerandomize(bl_he *h, work *w, bl_pct *c, o3m_err *e) {
  int rc;
  mpz_set_ui(w->m, 0);
  TIMED(h, enc, rc = bl_paillier_encrypt_noise(h->pk, w->m, w->noise[w->next_noise++], w->zero, e));
  if (!rc) TIMED(h, add, bl_paillier_add(h->pk, c, c, w->zero));
  return rc;
}

/* c <- c + Enc(m): an add of a plaintext, no exponentiation. */
static void add_plain(bl_he *h, bl_pct *c, mpz_srcptr m) {
  TIMED(h, add, bl_paillier_add_plain(h->pk, c, c, m));
}

/* acc <- acc + s Enc(x). */
static int add_scaled(bl_he *h, work *w, const bl_pct *x, mpz_srcptr s, o3m_err *e) {
  int rc;
  if (mpz_sgn(s) == 0) return 0;
  TIMED(h, mul, rc = bl_paillier_mul(h->pk, w->tmp, x, s, e));
  if (!rc) TIMED(h, add, bl_paillier_add(h->pk, w->acc, w->acc, w->tmp));
  return rc;
}

static int he_round(bl_he *h, work *w, const bl_round *r, double *lin, double *quad, bl_cost *c,
                    o3m_err *e) {
  const int K = r->K, d = r->d, d0 = r->dims[0], f = h->c.frac_bits;
  const int mbits = 2 * f + 64 + h->c.stat_bits;
  /* t hides v = r.u with |r.u| < d 2^mbits 2^(2f + 64). */
  const int tbits = mbits + 2 * f + 64 + 40 + h->c.stat_bits;
  int rc = 0;

  /* Offline: the noise of every ciphertext the round creates. */
  double t0 = o3m_clock_s();
  for (int i = 0; !rc && i < w->n_noise; i++)
    TIMED(h, noise, rc = bl_paillier_noise(h->pk, w->noise[i], e));
  c->offline_seconds = o3m_clock_s() - t0;
  if (rc) return rc;

  t0 = o3m_clock_s();
  /* 1. Every party encodes its columns; the passive ones encrypt them. */
  for (int k = 0; !rc && k < K; k++)
    for (int col = 0; !rc && col < d; col++) {
      rc = encode(r->X[(size_t)k * d + col], f, w->xe[(size_t)k * d + col], "a context value", e);
      if (!rc && col >= d0)
        TIMED(h, enc, rc = bl_paillier_encrypt_noise(h->pk, w->xe[(size_t)k * d + col],
                                                     w->noise[w->next_noise++],
                                                     w->ct[(size_t)k * d + col], e));
    }
  if (rc) return rc;

  /* 2. The evaluator: Ainv = U^T U, then per candidate the masked values. */
  for (int i = 0; i < d; i++)
    for (int j = 0; j < d; j++) w->U[(size_t)i * d + j] = j >= i ? r->Ainv[(size_t)i * d + j] : 0.0;
  if ((rc = o3m_potrf_upper(d, w->U)) != 0)
    return o3m_err_set(e, rc, "he: Ainv is not positive definite");
  for (int i = 0; !rc && i < d; i++) {
    rc = encode(r->theta[i], f, w->te[i], "a theta value", e);
    for (int j = i; !rc && j < d; j++)
      rc = encode(w->U[(size_t)i * d + j], f, w->Ue[(size_t)i * d + j], "a Cholesky value", e);
  }
  for (int k = 0; !rc && k < K; k++) {
    const mpz_t *x = (const mpz_t *)w->xe + (size_t)k * d;
    bl_pct **ct = w->ct + (size_t)k * d, **snd = w->send + (size_t)k * (d + 2);
    /* v = sum_i r_i u_i + t accumulates in snd[d]. */
    bl_pct_copy(snd[d], w->one);
    for (int i = 0; !rc && i < d; i++) {
      /* Enc(u_i) = sum_{c >= i, passive} U_ic Enc(x_c) + sum_{c >= i, own} U_ic x_c */
      mpz_set_ui(w->q, 0);
      bl_pct_copy(w->acc, w->one);
      for (int col = i; !rc && col < d; col++) {
        if (col < d0) mpz_addmul(w->q, w->Ue[(size_t)i * d + col], x[col]);
        else rc = add_scaled(h, w, ct[col], w->Ue[(size_t)i * d + col], e);
      }
      if (rc) break;
      add_plain(h, w->acc, w->q);
      /* v += r_i Enc(u_i), then w_i = u_i + r_i. */
      rc = bl_paillier_random_bits(w->r[i], mbits, e);
      if (!rc) TIMED(h, mmul, rc = bl_paillier_mul(h->pk, w->tmp, w->acc, w->r[i], e));
      if (!rc) TIMED(h, add, bl_paillier_add(h->pk, snd[d], snd[d], w->tmp));
      if (!rc) {
        bl_pct_copy(snd[i], w->acc);
        add_plain(h, snd[i], w->r[i]);
        rc = rerandomize(h, w, snd[i], e);
      }
    }
    if (!rc) rc = bl_paillier_random_bits(w->t, tbits, e);
    if (!rc) {
      add_plain(h, snd[d], w->t);
      rc = rerandomize(h, w, snd[d], e);
    }
    /* Enc(lin + s) = sum_c theta_c Enc(x_c) + own part + s */
    mpz_set_ui(w->q, 0);
    bl_pct_copy(w->acc, w->one);
    for (int col = 0; !rc && col < d; col++) {
      if (col < d0) mpz_addmul(w->q, w->te[col], x[col]);
      else rc = add_scaled(h, w, ct[col], w->te[col], e);
    }
    if (!rc) rc = bl_paillier_random_bits(w->s, mbits, e);
    if (!rc) {
      mpz_add(w->q, w->q, w->s);
      add_plain(h, w->acc, w->q);
      bl_pct_copy(snd[d + 1], w->acc);
      rc = rerandomize(h, w, snd[d + 1], e);
    }
    if (rc) break;

    /* 3. The key holder: q' = ||w||^2 - 2 v and lin + s. */
    mpz_set_ui(w->outq[k], 0);
    for (int i = 0; !rc && i < d; i++) {
      TIMED(h, dec, rc = bl_paillier_decrypt(h->sk, snd[i], w->m, e));
      if (!rc) mpz_addmul(w->outq[k], w->m, w->m);
    }
    if (!rc) TIMED(h, dec, rc = bl_paillier_decrypt(h->sk, snd[d], w->m, e));
    if (!rc) mpz_submul_ui(w->outq[k], w->m, 2);
    if (!rc) TIMED(h, dec, rc = bl_paillier_decrypt(h->sk, snd[d + 1], w->outl[k], e));
    if (rc) break;

    /* The evaluator unmasks: quad = q' + 2 t - ||r||^2, lin = (lin + s) - s. */
    mpz_addmul_ui(w->outq[k], w->t, 2);
    for (int i = 0; i < d; i++) mpz_submul(w->outq[k], w->r[i], w->r[i]);
    mpz_sub(w->outl[k], w->outl[k], w->s);
    quad[k] = bl_paillier_decode(w->outq[k], 4 * f);
    lin[k] = bl_paillier_decode(w->outl[k], 2 * f);
  }
  c->seconds = o3m_clock_s() - t0;
  return rc;
}

uint64_t bl_he_bytes(const bl_he *h, const bl_round *r) {
  uint64_t K = (uint64_t)r->K, d = (uint64_t)r->d, passive = (uint64_t)(r->d - r->dims[0]);
  uint64_t cts = bl_paillier_ct_size(h->pk), pts = bl_paillier_pt_size(h->pk);
  return K * passive * cts + K * (d + 2) * cts + 2 * K * pts;
}

void bl_he_count(const bl_round *r, bl_he_stats *s) {
  long K = r->K, d = r->d, d0 = r->dims[0], p = d - d0;
  long M = d0 * p + p * (p + 1) / 2;
  memset(s, 0, sizeof *s);
  s->n_noise = s->n_enc = K * (p + d + 2);
  s->n_mul = K * (M + p);
  s->n_mmul = K * d;
  s->n_add = K * (M + 4 * d + p + 4);
  s->n_dec = K * (d + 2);
}

/* count times the mean seconds of one operation of a kind (0 if unmeasured) */
static double predict(long count, long n, double s) {
  return n > 0 ? (double)count * s / (double)n : 0.0;
}

void bl_he_estimate(const bl_he_stats *c, const bl_he_stats *per, double *online, double *offline) {
  *offline = predict(c->n_noise, per->n_noise, per->s_noise);
  *online = predict(c->n_enc, per->n_enc, per->s_enc) + predict(c->n_dec, per->n_dec, per->s_dec) +
            predict(c->n_add, per->n_add, per->s_add) + predict(c->n_mul, per->n_mul, per->s_mul) +
            predict(c->n_mmul, per->n_mmul, per->s_mmul);
}

int bl_he_round(bl_he *h, const bl_round *r, double *lin, double *quad, bl_cost *c, o3m_err *e) {
  int rc = bl_round_check(r, e);
  if (rc) return rc;
  memset(&h->st, 0, sizeof h->st);
  work w;
  rc = work_alloc(&w, h, r, e);
  if (!rc) rc = he_round(h, &w, r, lin, quad, c, e);
  work_free(&w, r);
  if (rc) return rc;
  stats_add(&h->total, &h->st);
  c->bytes = bl_he_bytes(h, r);
  c->rounds = (r->N > 1 ? 1 : 0) + 2;
  return bl_round_score(r, lin, quad, c, e);
}
