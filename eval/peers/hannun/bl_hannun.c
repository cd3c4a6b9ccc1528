/*
 * bl_hannun: Hannun et al.'s private epsilon-greedy learner on bl_mpc, and
 * its plaintext twin (see bl_hannun.h for the algorithm and its rounds).
 *
 * Shared vectors follow bl_mpc's party-major layout; the learner allocates
 * all of its own buffers at creation (the MPC layer allocates its scratch per
 * call). Copies between layouts are local: every party rearranges its own
 * shares.
 */
#include "bl_hannun.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "o3m_blas.h"

struct bl_hannun {
  int A, D, N, per_arm, F, exp_iters, nr_iters;
  double eps;
  int *dims;
  bl_mpc *m;
  int have_choice;
  /* Shares (party-major), sizes in elements per party. */
  uint64_t *Winv;  /* A D D */
  uint64_t *b;     /* A D */
  uint64_t *X;     /* A D: this iteration's contexts */
  uint64_t *x1;    /* D: the shared context before replication */
  uint64_t *Y;     /* A D 2: [b_a | x_a] */
  uint64_t *WU;    /* A D 2: [w_a | u_a] */
  uint64_t *P;     /* 2 A D: [w ; u], then the products */
  uint64_t *Q;     /* 2 A D: [x ; x] */
  uint64_t *S;     /* 2 A: [s ; q] */
  uint64_t *u;     /* A D */
  uint64_t *q;     /* A */
  uint64_t *y1;    /* 1: the explore bit */
  uint64_t *yrep;  /* A */
  uint64_t *v;     /* A */
  uint64_t *st;    /* A: scores, then s~ */
  uint64_t *z;     /* A: one-hot choice */
  uint64_t *gamma; /* A */
  uint64_t *rec;   /* A */
  uint64_t *g;     /* A */
  uint64_t *r1;    /* 1 */
  uint64_t *rrep;  /* A */
  uint64_t *big;   /* A D D: outer products, then g-scaled */
  uint64_t *grep;  /* A D D */
  uint64_t *ad;    /* A D */
  uint64_t *ad2;   /* A D */
  uint64_t *open;  /* A (plain) */
};

void bl_hannun_opts_default(bl_hannun_opts *o) {
  memset(o, 0, sizeof *o);
  o->arms = 10;
  o->dim = 20;
  o->parties = 2;
  o->epsilon = 0.1;
  o->frac_bits = 20;
  o->exp_iters = 8;
  o->nr_iters = 7;
}

static uint64_t *sh(const bl_hannun *h, uint64_t *x, long n, int p) {
  (void)h;
  return x + (size_t)p * (size_t)n;
}

void bl_hannun_destroy(bl_hannun *h) {
  if (!h) return;
  uint64_t **bufs[] = {&h->Winv, &h->b, &h->X, &h->x1, &h->Y, &h->WU, &h->P, &h->Q,
                       &h->S, &h->u, &h->q, &h->y1, &h->yrep, &h->v, &h->st, &h->z,
                       &h->gamma, &h->rec, &h->g, &h->r1, &h->rrep, &h->big, &h->grep,
                       &h->ad, &h->ad2, &h->open};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(*bufs[i]);
  free(h->dims);
  bl_mpc_destroy(h->m);
  free(h);
}

int bl_hannun_create(bl_hannun **out, const bl_hannun_opts *o, o3m_err *e) {
  *out = NULL;
  if (o->arms < 2 || o->arms > 4096)
    return o3m_err_set(e, O3M_EINVAL, "hannun: arms must be 2..4096, got %d", o->arms);
  if (o->dim < 1 || o->dim > 4096)
    return o3m_err_set(e, O3M_EINVAL, "hannun: dimension must be 1..4096, got %d", o->dim);
  if (o->parties < 2 || o->parties > o->dim)
    return o3m_err_set(e, O3M_EINVAL,
                       "hannun: parties must be 2..D (every party holds a column), got %d for "
                       "D = %d",
                       o->parties, o->dim);
  if (!(o->epsilon >= 0.0 && o->epsilon <= 1.0))
    return o3m_err_set(e, O3M_EINVAL, "hannun: epsilon %g is not in [0, 1]", o->epsilon);
  if (o->exp_iters < 1 || o->exp_iters > o->frac_bits || o->nr_iters < 1 || o->nr_iters > 50)
    return o3m_err_set(e, O3M_EINVAL,
                       "hannun: need 1..F exponential squarings and 1..50 Newton iterations "
                       "(got %d, %d)",
                       o->exp_iters, o->nr_iters);
  bl_hannun *h = calloc(1, sizeof *h);
  if (!h) return o3m_err_set(e, O3M_ENOMEM, "hannun: out of memory");
  h->A = o->arms;
  h->D = o->dim;
  h->N = o->parties;
  h->per_arm = o->per_arm;
  h->F = o->frac_bits;
  h->eps = o->epsilon;
  h->exp_iters = o->exp_iters;
  h->nr_iters = o->nr_iters;
  int rc = bl_mpc_create(&h->m, o->parties, o->frac_bits, o->seed, e);
  if (rc) {
    free(h);
    return rc;
  }
  h->dims = malloc(sizeof *h->dims * (size_t)h->N);
  if (!h->dims) goto nomem;
  long sum = 0;
  for (int p = 0; p < h->N; p++) {
    h->dims[p] = o->dims ? o->dims[p] : h->D / h->N + (p < h->D % h->N);
    sum += h->dims[p];
  }
  if (sum != h->D) {
    bl_hannun_destroy(h);
    return o3m_err_set(e, O3M_EDIM, "hannun: party widths sum to %ld, not D = %d", sum, o->dim);
  }
  const long A = h->A, D = h->D;
  struct {
    uint64_t **p;
    long n;
  } bufs[] = {{&h->Winv, A * D * D}, {&h->b, A * D},  {&h->X, A * D},      {&h->x1, D},
              {&h->Y, 2 * A * D},    {&h->WU, 2 * A * D}, {&h->P, 2 * A * D}, {&h->Q, 2 * A * D},
              {&h->S, 2 * A},        {&h->u, A * D},  {&h->q, A},          {&h->y1, 1},
              {&h->yrep, A},         {&h->v, A},      {&h->st, A},         {&h->z, A},
              {&h->gamma, A},        {&h->rec, A},    {&h->g, A},          {&h->r1, 1},
              {&h->rrep, A},         {&h->big, A * D * D}, {&h->grep, A * D * D},
              {&h->ad, A * D},       {&h->ad2, A * D}};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
    if (!(*bufs[i].p = bl_mpc_alloc(h->m, bufs[i].n))) goto nomem;
  h->open = malloc(sizeof *h->open * (size_t)A);
  if (!h->open) goto nomem;
  /* Party 0 initializes W_a^-1 = I and b_a = 0 and shares them (their
   * set-up, before the first iteration: not counted). */
  double *init = calloc((size_t)(A * D * D), sizeof *init);
  if (!init) goto nomem;
  for (long a = 0; a < A; a++)
    for (long i = 0; i < D; i++) init[a * D * D + i * D + i] = 1.0;
  rc = bl_mpc_share(h->m, BL_MPC_STATE, init, A * D * D, h->Winv, e);
  memset(init, 0, sizeof *init * (size_t)(A * D));
  if (!rc) rc = bl_mpc_share(h->m, BL_MPC_STATE, init, A * D, h->b, e);
  free(init);
  if (rc) {
    bl_hannun_destroy(h);
    return rc;
  }
  bl_mpc_reset_counters(h->m);
  *out = h;
  return 0;
nomem:
  bl_hannun_destroy(h);
  return o3m_err_set(e, O3M_ENOMEM, "hannun: out of memory for %d arms of dimension %d",
                     o->arms, o->dim);
}

bl_mpc *bl_hannun_mpc(bl_hannun *h) { return h->m; }

/* Algorithm 2: y[i] = prod_j [x_i >= x_j], a 0/1 integer share, n >= 1. */
static int all_max(bl_mpc *m, uint64_t *y, const uint64_t *x, int n, o3m_err *e) {
  const int N = bl_mpc_parties(m);
  if (n == 1) {
    memset(y, 0, sizeof *y * (size_t)N);
    y[0] = 1;
    return 0;
  }
  const long w0 = n - 1, np = (long)n * w0;
  uint64_t *L = bl_mpc_alloc(m, np), *l = bl_mpc_alloc(m, np), *r = bl_mpc_alloc(m, np);
  int rc = 0;
  if (!L || !l || !r) {
    rc = o3m_err_set(e, O3M_ENOMEM, "hannun: out of memory for the argmax of %d values", n);
    goto out;
  }
  /* Row i holds x_i - x_j for the n - 1 other j. */
  for (int p = 0; p < N; p++) {
    const uint64_t *xp = x + (size_t)p * n;
    uint64_t *Lp = L + (size_t)p * np;
    for (int i = 0; i < n; i++)
      for (int j = 0, c = 0; j < n; j++)
        if (j != i) Lp[(long)i * w0 + c++] = xp[i] - xp[j];
  }
  rc = bl_mpc_ge0(m, L, L, np, e);
  /* Multiply each row's bits together: halve the width per round. */
  for (long w = w0; w > 1 && !rc;) {
    long hh = w / 2, nn = (long)n * hh;
    for (int p = 0; p < N; p++) {
      const uint64_t *Lp = L + (size_t)p * np;
      for (int i = 0; i < n; i++)
        for (long c = 0; c < hh; c++) {
          l[(size_t)p * nn + (size_t)i * hh + c] = Lp[(long)i * w0 + c];
          r[(size_t)p * nn + (size_t)i * hh + c] = Lp[(long)i * w0 + hh + c];
        }
    }
    rc = bl_mpc_mul(m, l, l, r, nn, 0, e);
    for (int p = 0; p < N && !rc; p++) {
      uint64_t *Lp = L + (size_t)p * np;
      for (int i = 0; i < n; i++) {
        for (long c = 0; c < hh; c++) Lp[(long)i * w0 + c] = l[(size_t)p * nn + (size_t)i * hh + c];
        if (w & 1) Lp[(long)i * w0 + hh] = Lp[(long)i * w0 + w - 1];
      }
    }
    w = hh + (w & 1);
  }
  for (int p = 0; p < N && !rc; p++)
    for (int i = 0; i < n; i++) y[(size_t)p * n + i] = L[(size_t)p * np + (size_t)i * w0];
out:
  free(L);
  free(l);
  free(r);
  return rc;
}

int bl_hannun_argmax(bl_mpc *m, uint64_t *z, const uint64_t *x, int n, uint64_t *gamma,
                     o3m_err *e) {
  uint64_t *y = bl_mpc_alloc(m, n), *g = gamma ? gamma : bl_mpc_alloc(m, n);
  int rc = 0;
  if (!y || !g) rc = o3m_err_set(e, O3M_ENOMEM, "hannun: out of memory for the argmax");
  /* 1. ones at every maximum; 2. times the shared permutation; 3. the
   * unique maximum of that. */
  if (!rc) rc = all_max(m, y, x, n, e);
  if (!rc) rc = bl_mpc_rand_perm(m, n, g, e);
  if (!rc) rc = bl_mpc_mul(m, y, y, g, n, 0, e);
  if (!rc) rc = all_max(m, z, y, n, e);
  free(y);
  if (g != gamma) free(g);
  return rc;
}

int bl_hannun_reciprocal(bl_mpc *m, uint64_t *z, const uint64_t *x, long n, int exp_iters,
                         int nr_iters, o3m_err *e) {
  const int F = bl_mpc_frac_bits(m), N = bl_mpc_parties(m);
  uint64_t *a = bl_mpc_alloc(m, n), *t = bl_mpc_alloc(m, n);
  int rc = 0;
  if (!a || !t) {
    rc = o3m_err_set(e, O3M_ENOMEM, "hannun: out of memory for %ld reciprocals", n);
    goto out;
  }
  /* e^{-(x - 0.5)} ~ (1 + (0.5 - x) / 2^k)^(2^k). */
  memcpy(a, x, sizeof *a * (size_t)N * (size_t)n);
  bl_mpc_mul_int(m, a, n, -((int64_t)1 << (F - exp_iters)));
  rc = bl_mpc_trunc(m, a, a, n, e);
  if (rc) goto out;
  bl_mpc_add_public(m, a, n, NULL, bl_mpc_encode(m, 1.0 + 0.5 / ldexp(1.0, exp_iters)));
  for (int i = 0; i < exp_iters && !rc; i++) rc = bl_mpc_mul(m, a, a, a, n, 1, e);
  if (rc) goto out;
  /* x0 = 3 e^{-(x - 0.5)} + 0.003, then r <- 2 r - x r^2. */
  bl_mpc_mul_int(m, a, n, 3);
  bl_mpc_add_public(m, a, n, NULL, bl_mpc_encode(m, 0.003));
  for (int i = 0; i < nr_iters && !rc; i++) {
    rc = bl_mpc_mul(m, t, a, a, n, 1, e);
    if (!rc) rc = bl_mpc_mul(m, t, t, x, n, 1, e);
    if (!rc) {
      bl_mpc_mul_int(m, a, n, 2);
      bl_mpc_sub(m, a, a, t, n);
    }
  }
  if (!rc) memcpy(z, a, sizeof *z * (size_t)N * (size_t)n);
out:
  free(a);
  free(t);
  return rc;
}

int bl_hannun_choose(bl_hannun *h, const double *X, int *arm, o3m_err *e) {
  bl_mpc *m = h->m;
  const int N = h->N, A = h->A, D = h->D;
  const long AD = (long)A * D;
  int rc;
  /* A choice that fails half-way leaves nothing to update. */
  h->have_choice = 0;
  /* The parties share their columns of the context(s): one round. */
  if (h->per_arm) {
    rc = bl_mpc_share_cols(m, h->dims, X, A, D, h->X, e);
  } else {
    rc = bl_mpc_share_cols(m, h->dims, X, 1, D, h->x1, e);
    for (int p = 0; p < N && !rc; p++)
      for (int a = 0; a < A; a++)
        memcpy(sh(h, h->X, AD, p) + (size_t)a * D, sh(h, h->x1, D, p), sizeof *h->X * (size_t)D);
  }
  if (rc) return rc;
  /* [w_a | u_a] = Winv_a [b_a | x_a] for every arm at once. */
  for (int p = 0; p < N; p++) {
    uint64_t *Y = sh(h, h->Y, 2 * AD, p), *b = sh(h, h->b, AD, p), *x = sh(h, h->X, AD, p);
    for (long i = 0; i < AD; i++) {
      Y[2 * i] = b[i];
      Y[2 * i + 1] = x[i];
    }
  }
  rc = bl_mpc_matmul(m, A, h->WU, h->Winv, h->Y, D, D, 2, 1, e);
  if (rc) return rc;
  /* s_a = w_a . x_a and q_a = u_a . x_a: one elementwise product, row sums
   * and one truncation. */
  for (int p = 0; p < N; p++) {
    uint64_t *W = sh(h, h->WU, 2 * AD, p), *P = sh(h, h->P, 2 * AD, p);
    uint64_t *Q = sh(h, h->Q, 2 * AD, p), *x = sh(h, h->X, AD, p), *u = sh(h, h->u, AD, p);
    for (long i = 0; i < AD; i++) {
      P[i] = W[2 * i];
      P[AD + i] = u[i] = W[2 * i + 1];
      Q[i] = Q[AD + i] = x[i];
    }
  }
  rc = bl_mpc_mul(m, h->P, h->P, h->Q, 2 * AD, 0, e);
  if (rc) return rc;
  for (int p = 0; p < N; p++) {
    uint64_t *P = sh(h, h->P, 2 * AD, p), *S = sh(h, h->S, 2L * A, p);
    for (int k = 0; k < 2 * A; k++) {
      uint64_t s = 0;
      for (int j = 0; j < D; j++) s += P[(long)k * D + j];
      S[k] = s;
    }
  }
  rc = bl_mpc_trunc(m, h->S, h->S, 2L * A, e);
  if (rc) return rc;
  for (int p = 0; p < N; p++) {
    memcpy(sh(h, h->st, A, p), sh(h, h->S, 2L * A, p), sizeof *h->st * (size_t)A);
    memcpy(sh(h, h->q, A, p), sh(h, h->S, 2L * A, p) + A, sizeof *h->q * (size_t)A);
  }
  /* s~ = s + y (v - s) with the dealer's private samples. */
  rc = bl_mpc_rand_bernoulli(m, h->eps, 1, h->y1, e);
  if (!rc) rc = bl_mpc_rand_uniform(m, A, h->v, e);
  if (rc) return rc;
  for (int p = 0; p < N; p++)
    for (int a = 0; a < A; a++) sh(h, h->yrep, A, p)[a] = sh(h, h->y1, 1, p)[0];
  bl_mpc_sub(m, h->rec, h->v, h->st, A);
  rc = bl_mpc_mul(m, h->rec, h->rec, h->yrep, A, 0, e);
  if (rc) return rc;
  bl_mpc_add(m, h->st, h->st, h->rec, A);
  /* The one-hot argmax, opened to party 0 only. */
  rc = bl_hannun_argmax(m, h->z, h->st, A, h->gamma, e);
  if (!rc) rc = bl_mpc_open_to(m, 0, h->z, A, h->open, e);
  if (rc) return rc;
  int found = -1, ones = 0;
  for (int a = 0; a < A; a++) {
    if (h->open[a] == 1) {
      found = a;
      ones++;
    } else if (h->open[a] != 0) {
      ones = -1;
      break;
    }
  }
  if (ones != 1)
    return o3m_err_set(e, O3M_ECORRUPT, "hannun: the opened choice is not one-hot");
  *arm = found;
  h->have_choice = 1;
  return 0;
}

int bl_hannun_update(bl_hannun *h, double r, o3m_err *e) {
  if (!h->have_choice)
    return o3m_err_set(e, O3M_ESTATE, "hannun: update without a choice before it");
  bl_mpc *m = h->m;
  const int N = h->N, A = h->A, D = h->D;
  const long AD = (long)A * D, ADD = AD * D;
  /* The last party, which observes the reward, shares it. */
  int rc = bl_mpc_share(m, N - 1, &r, 1, h->r1, e);
  if (rc) return rc;
  h->have_choice = 0;
  for (int p = 0; p < N; p++)
    for (int a = 0; a < A; a++) sh(h, h->rrep, A, p)[a] = sh(h, h->r1, 1, p)[0];
  /* g_a = o_a / (1 + q_a). */
  bl_mpc_add_public(m, h->q, A, NULL, bl_mpc_encode(m, 1.0));
  rc = bl_hannun_reciprocal(m, h->rec, h->q, A, h->exp_iters, h->nr_iters, e);
  if (!rc) rc = bl_mpc_mul(m, h->g, h->z, h->rec, A, 0, e);
  /* Winv_a -= g_a u_a u_a^T for every arm. */
  if (!rc) rc = bl_mpc_matmul(m, A, h->big, h->u, h->u, D, 1, D, 1, e);
  if (rc) return rc;
  for (int p = 0; p < N; p++)
    for (int a = 0; a < A; a++) {
      uint64_t ga = sh(h, h->g, A, p)[a], *gr = sh(h, h->grep, ADD, p) + (size_t)a * D * D;
      for (long i = 0; i < (long)D * D; i++) gr[i] = ga;
    }
  rc = bl_mpc_mul(m, h->big, h->big, h->grep, ADD, 1, e);
  if (rc) return rc;
  bl_mpc_sub(m, h->Winv, h->Winv, h->big, ADD);
  /* b_a += (o_a r) x_a. */
  rc = bl_mpc_mul(m, h->rrep, h->rrep, h->z, A, 0, e);
  if (rc) return rc;
  for (int p = 0; p < N; p++)
    for (int a = 0; a < A; a++) {
      uint64_t c = sh(h, h->rrep, A, p)[a], *o = sh(h, h->ad, AD, p) + (size_t)a * D;
      for (int j = 0; j < D; j++) o[j] = c;
    }
  rc = bl_mpc_mul(m, h->ad, h->ad, h->X, AD, 1, e);
  if (rc) return rc;
  bl_mpc_add(m, h->b, h->b, h->ad, AD);
  return 0;
}

void bl_hannun_last_samples(const bl_hannun *h, int *explore, double *v, int *gamma) {
  /* h->open (A words, party 0's view of the choice) is free once the
   * choice is made; it holds the peeks. */
  uint64_t y, *t = h->open;
  bl_mpc_peek(h->m, h->y1, 1, &y);
  *explore = (int)y;
  bl_mpc_peek(h->m, h->v, h->A, t);
  for (int a = 0; a < h->A; a++) v[a] = bl_mpc_decode(h->m, t[a]);
  bl_mpc_peek(h->m, h->gamma, h->A, t);
  for (int a = 0; a < h->A; a++) gamma[a] = (int)t[a];
}

/* ---- the plaintext learner ---- */
struct bl_hplain {
  int A, D, per_arm;
  double *Winv, *b, *x, *u, *s;
};

int bl_hplain_create(bl_hplain **out, int arms, int dim, int per_arm, o3m_err *e) {
  *out = NULL;
  if (arms < 1 || dim < 1)
    return o3m_err_set(e, O3M_EINVAL, "hplain: arms %d and dimension %d must be positive", arms,
                       dim);
  bl_hplain *p = calloc(1, sizeof *p);
  if (!p) return o3m_err_set(e, O3M_ENOMEM, "hplain: out of memory");
  p->A = arms;
  p->D = dim;
  p->per_arm = per_arm;
  p->Winv = calloc((size_t)arms * dim * dim, sizeof *p->Winv);
  p->b = calloc((size_t)arms * dim, sizeof *p->b);
  p->x = calloc((size_t)arms * dim, sizeof *p->x);
  p->u = calloc((size_t)dim, sizeof *p->u);
  p->s = calloc((size_t)arms, sizeof *p->s);
  if (!p->Winv || !p->b || !p->x || !p->u || !p->s) {
    bl_hplain_destroy(p);
    return o3m_err_set(e, O3M_ENOMEM, "hplain: out of memory for %d arms of dimension %d", arms,
                       dim);
  }
  for (long a = 0; a < arms; a++)
    for (long i = 0; i < dim; i++) p->Winv[a * dim * dim + i * dim + i] = 1.0;
  *out = p;
  return 0;
}

void bl_hplain_destroy(bl_hplain *p) {
  if (!p) return;
  free(p->Winv);
  free(p->b);
  free(p->x);
  free(p->u);
  free(p->s);
  free(p);
}

int bl_hplain_choose(bl_hplain *p, const double *X, int explore, const double *v,
                     const int *gamma) {
  const int A = p->A, D = p->D;
  memcpy(p->x, X, sizeof *p->x * (size_t)(p->per_arm ? A * D : D));
  int best = 0;
  for (int a = 0; a < A; a++) {
    const double *x = p->per_arm ? p->x + (size_t)a * D : p->x;
    if (explore) {
      p->s[a] = v[a];
    } else {
      o3m_symv(D, 1.0, p->Winv + (size_t)a * D * D, p->b + (size_t)a * D, 0.0, p->u);
      p->s[a] = o3m_dot(D, p->u, x);
    }
    if (p->s[a] > p->s[best] || (p->s[a] == p->s[best] && gamma && gamma[a] > gamma[best]))
      best = a;
  }
  return best;
}

void bl_hplain_update(bl_hplain *p, int arm, double r) {
  const int D = p->D;
  const double *x = p->per_arm ? p->x + (size_t)arm * D : p->x;
  double *W = p->Winv + (size_t)arm * D * D;
  /* Winv -= (Winv x)(Winv x)^T / (1 + x^T Winv x); b += r x. */
  o3m_symv(D, 1.0, W, x, 0.0, p->u);
  double den = 1.0 + o3m_dot(D, x, p->u);
  o3m_syr(D, -1.0 / den, p->u, W);
  o3m_axpy(D, r, x, p->b + (size_t)arm * D);
}
