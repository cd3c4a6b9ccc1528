/* eval_audit.c -- see eval_audit.h: the attacks, run over modes and series.
 *
 * The audit's other concerns have a file each: building the input
 * (eval_audit_input.c), the linear algebra of the attacks (least squares,
 * PCA, FastICA, matching: eval_audit_pca.c), the writers (tables, CSVs,
 * gnuplot: eval_audit_write.c) and the command line (eval_audit_cli.c).
 * The masking goes through o3m_block_apply, the routine the passive
 * participant runs. */
#include "eval_audit_impl.h"
#include "eval_audit_pca.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "o3m_blas.h"
#include "o3m_rng.h"

void eval_audit_config_default(eval_audit_config *c) {
  c->seed = 1;
  c->dummies = 0;
  c->ica_max_iter = 200;
  c->known_max = 0;
  c->modes = (1 << EVAL_AUDIT_N_MODES) - 1;
  memset(c->kp_points, 0, sizeof c->kp_points);
  memset(c->n_kp_points, 0, sizeof c->n_kp_points);
}

const char *eval_audit_mode_name(eval_audit_mode m) {
  static const char *n[] = {"per-party", "secagg", "secagg+own"};
  return (unsigned)m < EVAL_AUDIT_N_MODES ? n[m] : "?";
}

const char *eval_audit_series_name(eval_audit_series s) {
  static const char *n[] = {"kp", "kp-full", "pca", "ica", "dummy-pca", "dummy-ica"};
  return (unsigned)s < EVAL_AUDIT_N_SERIES ? n[s] : "?";
}

void eval_audit_destroy(eval_audit *a) {
  if (!a) return;
  for (int m = 0; m < EVAL_AUDIT_N_MODES; m++)
    for (int s = 0; s < EVAL_AUDIT_N_SERIES; s++) {
      free(a->s[m][s].x);
      free(a->s[m][s].corr);
    }
  free(a);
}

int eval_audit_dj(const eval_audit *a) { return a->dj; }

int eval_audit_n_points(const eval_audit *a, eval_audit_mode m, eval_audit_series s) {
  if ((unsigned)m >= EVAL_AUDIT_N_MODES || (unsigned)s >= EVAL_AUDIT_N_SERIES) return 0;
  return a->s[m][s].n;
}

static void summarize(const double *corr, int dj, double *mean, double *mn, double *mx) {
  double sum = 0, lo = INFINITY, hi = -INFINITY;
  int n = 0;
  for (int c = 0; c < dj; c++) {
    if (isnan(corr[c])) continue;
    sum += corr[c];
    lo = corr[c] < lo ? corr[c] : lo;
    hi = corr[c] > hi ? corr[c] : hi;
    n++;
  }
  *mean = n ? sum / n : NAN;
  *mn = n ? lo : NAN;
  *mx = n ? hi : NAN;
}

int eval_audit_point_get(const eval_audit *a, eval_audit_mode m, eval_audit_series s, int i,
                         eval_audit_point *out) {
  if (i < 0 || i >= eval_audit_n_points(a, m, s)) return O3M_EINVAL;
  const series *S = &a->s[m][s];
  out->x = S->x[i];
  out->corr = S->corr + (size_t)i * a->dj;
  summarize(out->corr, a->dj, &out->mean, &out->min, &out->max);
  return O3M_OK;
}

int eval_audit_exposure_get(const eval_audit *a, eval_audit_mode m, eval_audit_exposure *out) {
  if ((unsigned)m >= EVAL_AUDIT_N_MODES || !(a->ran & (1 << m))) return O3M_EINVAL;
  *out = a->ex[m];
  return O3M_OK;
}

static int series_alloc(series *S, int n, int dj) {
  S->n = 0;
  S->x = malloc(sizeof *S->x * (size_t)(n > 0 ? n : 1));
  S->corr = malloc(sizeof *S->corr * (size_t)(n > 0 ? n : 1) * dj);
  return S->x && S->corr ? O3M_OK : O3M_ENOMEM;
}

/* The grid of known-row counts: every n up to dj, then about ten steps to
 * top, with need (the count an exact solve takes) always included. */
static int kp_grid(int dj, int need, int top, int *x) {
  int n = 0, step = top > dj ? (top - dj + 9) / 10 : 1;
  for (int v = 1; v <= top; v = v < dj ? v + 1 : v + step) {
    if (n && x[n - 1] < need && v > need && need <= top) x[n++] = need;
    x[n++] = v;
  }
  if (x[n - 1] != top) x[n++] = top;
  return n;
}

/* The grid of observed users: 10, 20, 50, 100, 200, 500, ... below top,
 * then top. */
static int n_grid(int top, int *x) {
  static const int base[3] = {1, 2, 5};
  int n = 0;
  for (long dec = 10; dec < top; dec *= 10)
    for (int b = 0; b < 3; b++)
      if (dec * base[b] < top) x[n++] = (int)(dec * base[b]);
  x[n++] = top;
  return n;
}

/* What the attacker observes for n rows X (n x d) in mode m: out is n x p.
 * Work: Xj (n x max dims). Bc is the secagg+own basis (d x D). */
static void observe(const eval_audit_input *in, o3m_block *const *blocks, eval_audit_mode m,
                    int n, const double *X, const double *Bc, double *Xj, double *S,
                    double *out) {
  const o3m_partition *p = &in->part;
  const int d = p->d;
  int first = 1;
  for (int k = 1; k < p->m; k++) {
    if (m == EVAL_AUDIT_PER_PARTY && k != in->party) continue;
    int dk = p->dims[k];
    for (int i = 0; i < n; i++)
      memcpy(Xj + (size_t)i * dk, X + (size_t)i * d + p->offset[k], sizeof *Xj * dk);
    o3m_block_apply(blocks[k], n, Xj, first ? 0.0 : 1.0, S);
    first = 0;
  }
  if (m == EVAL_AUDIT_SECAGG_OWN)
    o3m_gemm(n, d - p->dims[0], d, 1.0, S, Bc, 0.0, out);
  else
    memcpy(out, S, sizeof *out * (size_t)n * d);
}

static double pearson(int n, const double *x, const double *y) {
  double mx = 0, my = 0, sxx = 0, syy = 0, sxy = 0;
  for (int i = 0; i < n; i++) {
    mx += x[i];
    my += y[i];
  }
  mx /= n;
  my /= n;
  for (int i = 0; i < n; i++) {
    sxx += (x[i] - mx) * (x[i] - mx);
    syy += (y[i] - my) * (y[i] - my);
    sxy += (x[i] - mx) * (y[i] - my);
  }
  /* A spread at rounding level (every norm sqrt(2) in a one-hot table)
   * is no spread: there is nothing to correlate. */
  double ax = 0, ay = 0;
  for (int i = 0; i < n; i++) {
    ax += x[i] * x[i];
    ay += y[i] * y[i];
  }
  return sxx > 1e-20 * ax && syy > 1e-20 * ay ? sxy / sqrt(sxx * syy) : NAN;
}

/* Norms and Gram exposure of the observations O (N x p) against T. */
static int exposure(eval_audit *a, eval_audit_mode m, const eval_audit_input *in, int p,
                    const double *O, o3m_rng *rng) {
  const int N = in->N, dj = in->dj;
  double *u = malloc(sizeof *u * 2 * (size_t)(N > GRAM_PAIRS ? N : GRAM_PAIRS));
  if (!u) return O3M_ENOMEM;
  double *v = u + (N > GRAM_PAIRS ? N : GRAM_PAIRS);
  eval_audit_exposure *x = &a->ex[m];
  /* A whitening party's part is Q^j W x: exact for W x, not for raw x. */
  x->exact = m == EVAL_AUDIT_PER_PARTY && in->sends_truth && !in->ref;
  double worst = 0;
  for (int i = 0; i < N; i++) {
    u[i] = o3m_nrm2(dj, in->T + (size_t)i * dj);
    v[i] = o3m_nrm2(p, O + (size_t)i * p);
    if (u[i] > 0 && fabs(u[i] - v[i]) / u[i] > worst) worst = fabs(u[i] - v[i]) / u[i];
  }
  x->norm = x->exact ? worst : pearson(N, u, v);
  worst = 0;
  for (int t = 0; t < GRAM_PAIRS; t++) {
    uint64_t r1, r2;
    o3m_rng_u64(rng, &r1);
    o3m_rng_u64(rng, &r2);
    int i = (int)(r1 % (uint64_t)N), k = (int)(r2 % (uint64_t)N);
    const double *ti = in->T + (size_t)i * dj, *tk = in->T + (size_t)k * dj;
    u[t] = o3m_dot(dj, ti, tk);
    v[t] = o3m_dot(p, O + (size_t)i * p, O + (size_t)k * p);
    double sc = o3m_nrm2(dj, ti) * o3m_nrm2(dj, tk);
    if (sc > 0 && fabs(u[t] - v[t]) / sc > worst) worst = fabs(u[t] - v[t]) / sc;
  }
  x->gram = x->exact ? worst : pearson(GRAM_PAIRS, u, v);
  free(u);
  return O3M_OK;
}

/* Shared state of one mode's attacks. */
typedef struct mode_ctx {
  const eval_audit_input *in;
  eval_audit *a;
  eval_audit_mode m;
  int p;            /* observation width */
  const double *O;  /* N x p: real users' observations */
  const double *Od; /* Nd x p: dummy ids' observations */
  const double *Tn; /* N x dj standardized truth */
  const unsigned char *cflag;
  const int *perm;  /* N: a random order of the users */
  o3m_rng *rng;
  double *R;        /* N x max(p, D) scratch */
} mode_ctx;

/* Known plaintext, the audited party's columns of the first n users of
 * perm known: regress them on the observations and apply to everyone. A
 * view shifted by an unknown offset (in->ref, eval_audit_impl.h) gets an
 * intercept: the attacker fits the offset too. */
static int attack_kp(mode_ctx *x, int n, double *corr) {
  const eval_audit_input *in = x->in;
  const int N = in->N, dj = in->dj, p = x->p, q = p + (in->ref != NULL), rows = n > q ? n : q;
  double *A = malloc(sizeof *A * (size_t)n * q), *B = calloc((size_t)rows * dj, sizeof *B);
  int rc = O3M_ENOMEM;
  if (!A || !B) goto out;
  for (int r = 0; r < n; r++) {
    int i = x->perm[r];
    memcpy(A + (size_t)r * q, x->O + (size_t)i * p, sizeof *A * p);
    if (q > p) A[(size_t)r * q + p] = 1;
    memcpy(B + (size_t)r * dj, in->T + (size_t)i * dj, sizeof *B * dj);
  }
  if ((rc = eval_audit_lstsq(n, q, dj, A, B))) goto out;
  o3m_gemm(N, dj, p, 1.0, x->O, B, 0.0, x->R);
  for (int i = 0; q > p && i < N; i++) o3m_axpy(dj, 1.0, B + (size_t)p * dj, x->R + (size_t)i * dj);
  rc = eval_audit_score(N, dj, x->Tn, x->cflag, x->R, dj, 0, corr);
out:
  free(A);
  free(B);
  return rc;
}

/* Known plaintext, n full rows of every PP known: estimate the map
 * x^PP -> observation (p x D) by least squares, invert it for everyone. */
static int attack_kp_full(mode_ctx *x, int n, double *corr) {
  const eval_audit_input *in = x->in;
  const int N = in->N, dj = in->dj, d0 = in->part.dims[0], d = in->part.d, D = d - d0;
  /* A view shifted by an unknown offset (in->ref) fits it as an intercept
   * (row D of the solution) and takes it off before the inversion. */
  const int p = x->p, Dc = D + (in->ref != NULL), r1 = n > Dc ? n : Dc, r2 = p > D ? p : D;
  double *A = malloc(sizeof *A * (size_t)n * Dc), *B = calloc((size_t)r1 * p, sizeof *B);
  double *A2 = malloc(sizeof *A2 * (size_t)p * D), *B2 = calloc((size_t)r2 * N, sizeof *B2);
  int rc = O3M_ENOMEM;
  if (!A || !B || !A2 || !B2) goto out;
  for (int r = 0; r < n; r++) {
    int i = x->perm[r];
    memcpy(A + (size_t)r * Dc, in->X + (size_t)i * d + d0, sizeof *A * D);
    if (Dc > D) A[(size_t)r * Dc + D] = 1;
    memcpy(B + (size_t)r * p, x->O + (size_t)i * p, sizeof *B * p);
  }
  if ((rc = eval_audit_lstsq(n, Dc, p, A, B))) goto out; /* B[0..D) = M^T, M = p x D */
  for (int r = 0; r < p; r++)
    for (int c = 0; c < D; c++) A2[(size_t)r * D + c] = B[(size_t)c * p + r];
  for (int i = 0; i < N; i++)
    for (int r = 0; r < p; r++)
      B2[(size_t)r * N + i] = x->O[(size_t)i * p + r] - (Dc > D ? B[(size_t)D * p + r] : 0);
  if ((rc = eval_audit_lstsq(p, D, N, A2, B2))) goto out; /* B2[0..D) = x^PP hat, D x N */
  const int off = in->part.offset[in->party] - d0;
  for (int i = 0; i < N; i++)
    for (int c = 0; c < dj; c++) x->R[(size_t)i * dj + c] = B2[(size_t)(off + c) * N + i];
  rc = eval_audit_score(N, dj, x->Tn, x->cflag, x->R, dj, 0, corr);
out:
  free(A);
  free(B);
  free(A2);
  free(B2);
  return rc;
}

/* PCA (ica = 0) or FastICA (ica = 1) fitted on Nt rows of Tr (n x p),
 * applied to the real users' observations. */
static int attack_stats(mode_ctx *x, const double *Tr, int Nt, int ica, double *corr) {
  const eval_audit_input *in = x->in;
  const int N = in->N, dj = in->dj;
  const int want = x->m == EVAL_AUDIT_PER_PARTY ? dj : in->part.d - in->part.dims[0];
  eval_audit_basis b;
  int rc = eval_audit_pca_fit(&b, Nt, x->p, Tr, want);
  if (rc) return rc;
  const int k = b.k;
  double *Z = NULL, *W = NULL, *P = NULL;
  if (k == 0) {
    rc = eval_audit_score(N, dj, x->Tn, x->cflag, x->R, 0, 1, corr);
    goto out;
  }
  if (!ica) {
    if (!(rc = eval_audit_project(&b, N, x->O, x->R)))
      rc = eval_audit_score(N, dj, x->Tn, x->cflag, x->R, k, 1, corr);
    goto out;
  }
  /* Whitened training data, unmixing, then the same map on everyone. */
  Z = malloc(sizeof *Z * (size_t)Nt * k);
  W = malloc(sizeof *W * (size_t)k * k);
  P = malloc(sizeof *P * (size_t)N * k);
  rc = O3M_ENOMEM;
  if (!Z || !W || !P) goto out;
  if ((rc = eval_audit_project(&b, Nt, Tr, Z))) goto out;
  for (int i = 0; i < Nt; i++)
    for (int q = 0; q < k; q++) Z[(size_t)i * k + q] /= sqrt(b.lam[q]);
  if ((rc = eval_audit_fastica(Nt, k, Z, x->a->c.ica_max_iter, x->rng, W))) goto out;
  if ((rc = eval_audit_project(&b, N, x->O, P))) goto out;
  for (int i = 0; i < N; i++)
    for (int q = 0; q < k; q++) P[(size_t)i * k + q] /= sqrt(b.lam[q]);
  o3m_gemm_nt(N, k, k, 1.0, P, W, 0.0, x->R);
  rc = eval_audit_score(N, dj, x->Tn, x->cflag, x->R, k, 1, corr);
out:
  free(Z);
  free(W);
  free(P);
  eval_audit_basis_free(&b);
  return rc;
}

/* The rows the parties give for Nd ids nobody holds: every PP's dummy. */
static int dummy_rows(const eval_audit_input *in, int Nd, double *Xd, o3m_err *e) {
  const o3m_partition *p = &in->part;
  for (int i = 0; i < Nd; i++) {
    char uid[64], iid[64];
    snprintf(uid, sizeof uid, "o3m-audit-unknown-user-%d", i);
    snprintf(iid, sizeof iid, "o3m-audit-unknown-item-%d", i);
    const char *items[1] = {iid};
    for (int k = 1; k < p->m; k++) {
      int uu = 0, ui = 0;
      int rc = o3m_features_fill(in->pp[k].f, uid, 1, items,
                                 Xd + (size_t)i * p->d + p->offset[k], &uu, &ui);
      if (rc) return o3m_err_set(e, rc, "dummy row %d of party %d: %s", i, k, o3m_strerror(rc));
      if ((in->pp[k].users.n && !uu) || (in->pp[k].items.n && ui != 1))
        return o3m_err_set(e, O3M_EEXISTS, "party %d holds the id '%s' or '%s' the audit uses "
                           "as unknown", k, uid, iid);
    }
  }
  return O3M_OK;
}

static int run_mode(eval_audit *a, const eval_audit_input *in, eval_audit_mode m,
                    o3m_block *const *blocks, const double *Bc, const double *Xd, int *grid,
                    mode_ctx *x, o3m_err *e) {
  const o3m_partition *p = &in->part;
  const int N = in->N, Nd = a->Nd, d = p->d, dj = in->dj, D = d - p->dims[0];
  int maxdk = 0;
  for (int k = 0; k < p->m; k++) maxdk = p->dims[k] > maxdk ? p->dims[k] : maxdk;
  const int nmax = N > Nd ? N : Nd;
  x->m = m;
  x->p = m == EVAL_AUDIT_SECAGG_OWN ? D : d;
  double *O = malloc(sizeof *O * (size_t)N * x->p), *Od = malloc(sizeof *Od * (size_t)Nd * x->p);
  double *Xj = malloc(sizeof *Xj * (size_t)nmax * maxdk), *S = malloc(sizeof *S * (size_t)nmax * d);
  int rc = O3M_ENOMEM;
  if (!O || !Od || !Xj || !S) goto out;
  observe(in, blocks, m, N, in->X, Bc, Xj, S, O);
  observe(in, blocks, m, Nd, Xd, Bc, Xj, S, Od);
  x->O = O;
  x->Od = Od;
  if ((rc = exposure(a, m, in, x->p, O, x->rng))) goto out;

  /* Known plaintext. */
  /* n up to twice the rows an exact solve needs (d_j, or D in the secure
   * modes): random rows of sparse or discrete tables are often dependent,
   * so that d_j of them need not span the party's columns. */
  int need = m == EVAL_AUDIT_PER_PARTY ? dj : D;
  int top = a->c.known_max ? a->c.known_max : 2 * need;
  if (top > N) top = N;
  int ng = kp_grid(dj < top ? dj : top, need, top, grid);
  /* Given points (the factored mode's, to line up with the whole rows'). */
  if (a->c.kp_points[m] && a->c.n_kp_points[m] > 0) {
    ng = 0;
    for (int g = 0; g < a->c.n_kp_points[m] && ng < N; g++)
      if (a->c.kp_points[m][g] >= 1 && a->c.kp_points[m][g] <= N)
        grid[ng++] = a->c.kp_points[m][g];
  }
  for (int s = EVAL_AUDIT_KP; s <= EVAL_AUDIT_KP_FULL; s++) {
    if (s == EVAL_AUDIT_KP_FULL && m == EVAL_AUDIT_PER_PARTY) continue;
    series *S2 = &a->s[m][s];
    if ((rc = series_alloc(S2, ng, dj))) goto out;
    for (int g = 0; g < ng; g++) {
      double *corr = S2->corr + (size_t)g * dj;
      rc = s == EVAL_AUDIT_KP ? attack_kp(x, grid[g], corr) : attack_kp_full(x, grid[g], corr);
      if (rc) goto out;
      S2->x[S2->n++] = grid[g];
    }
  }
  /* PCA / ICA on real traffic (users in perm order) and on dummies. */
  double *Tr = malloc(sizeof *Tr * (size_t)N * x->p);
  if (!Tr) {
    rc = O3M_ENOMEM;
    goto out;
  }
  for (int r = 0; r < N; r++)
    memcpy(Tr + (size_t)r * x->p, O + (size_t)x->perm[r] * x->p, sizeof *Tr * x->p);
  for (int s = EVAL_AUDIT_PCA; !rc && s <= EVAL_AUDIT_DUMMY_ICA; s++) {
    int dummy = s >= EVAL_AUDIT_DUMMY_PCA, ica = s == EVAL_AUDIT_ICA || s == EVAL_AUDIT_DUMMY_ICA;
    int n2 = n_grid(dummy ? Nd : N, grid);
    series *S2 = &a->s[m][s];
    if ((rc = series_alloc(S2, n2, dj))) break;
    for (int g = 0; !rc && g < n2; g++) {
      rc = attack_stats(x, dummy ? Od : Tr, grid[g], ica, S2->corr + (size_t)g * dj);
      if (!rc) S2->x[S2->n++] = grid[g];
    }
  }
  free(Tr);
out:
  if (rc && e && !e->code)
    o3m_err_set(e, rc, "audit, mode %s: %s", eval_audit_mode_name(m), o3m_strerror(rc));
  free(O);
  free(Od);
  free(Xj);
  free(S);
  return rc;
}

int eval_audit_run(eval_audit **out, const eval_audit_input *in, const eval_audit_config *c,
                   o3m_err *e) {
  o3m_err local;
  if (!e) e = &local;
  *out = NULL;
  if (!in || !c || c->dummies < 0 || c->ica_max_iter < 1 || c->known_max < 0 ||
      !(c->modes & 7))
    return o3m_err_set(e, O3M_EINVAL, "eval_audit_run: bad configuration");
  const o3m_partition *p = &in->part;
  const int N = in->N, d = p->d, dj = in->dj, d0 = p->dims[0], D = d - d0;
  eval_audit *a = calloc(1, sizeof *a);
  if (!a) return o3m_err_set(e, O3M_ENOMEM, "out of memory");
  a->c = *c;
  a->tag = "audit";
  a->dj = dj;
  a->d = d;
  a->d0 = d0;
  a->D = D;
  a->N = N;
  a->Nd = c->dummies ? c->dummies : N;
  if (a->Nd < 2) a->Nd = 2;
  o3m_rng *rng = NULL;
  o3m_mask *mask = NULL;
  o3m_block **blocks = calloc((size_t)p->m, sizeof *blocks);
  double *Xd = calloc((size_t)a->Nd * d, sizeof *Xd), *Tn = malloc(sizeof *Tn * (size_t)N * dj);
  double *U = malloc(sizeof *U * (size_t)d * d), *Bc = malloc(sizeof *Bc * (size_t)d * D);
  double *R = malloc(sizeof *R * (size_t)N * (d > dj ? d : dj));
  int *perm = malloc(sizeof *perm * N), *grid = malloc(sizeof *grid * (size_t)(N + a->Nd + d + 64));
  unsigned char *cflag = malloc((size_t)dj);
  int rc = O3M_ENOMEM;
  o3m_err_clear(e);
  if (!blocks || !Xd || !Tn || !U || !Bc || !R || !perm || !grid || !cflag) goto out;
  if ((rc = o3m_rng_create_seeded_insecure(&rng, c->seed))) goto out;
  if ((rc = o3m_mask_generate(&mask, d, rng))) goto out;
  for (int k = 0; !rc && k < p->m; k++)
    rc = o3m_block_from_mask(&blocks[k], mask, p->offset[k], p->dims[k]);
  if (rc) goto out;
  /* The AP's knowledge in secagg+own: an orthonormal basis of the
   * complement of span Q^0 (the last D left singular vectors of Q^0). */
  {
    double *Q0 = malloc(sizeof *Q0 * (size_t)d * d0), *sv = malloc(sizeof *sv * d0);
    double *sup = malloc(sizeof *sup * d0);
    if (!Q0 || !sv || !sup) {
      free(Q0);
      free(sv);
      free(sup);
      rc = O3M_ENOMEM;
      goto out;
    }
    memcpy(Q0, o3m_block_data(blocks[0]), sizeof *Q0 * (size_t)d * d0);
    lapack_int info = LAPACKE_dgesvd(LAPACK_ROW_MAJOR, 'A', 'N', d, d0, Q0, d0, sv, U, d, NULL,
                                     1, sup);
    free(Q0);
    free(sv);
    free(sup);
    if (info != 0) {
      rc = O3M_ENOTPD;
      goto out;
    }
    for (int r = 0; r < d; r++)
      memcpy(Bc + (size_t)r * D, U + (size_t)r * d + d0, sizeof *Bc * D);
  }
  memcpy(Tn, in->T, sizeof *Tn * (size_t)N * dj);
  eval_audit_standardize(N, dj, Tn, cflag);
  for (int i = 0; i < N; i++) perm[i] = i;
  for (int i = N - 1; i > 0; i--) {
    uint64_t r;
    o3m_rng_u64(rng, &r);
    int k = (int)(r % (uint64_t)(i + 1)), t = perm[i];
    perm[i] = perm[k];
    perm[k] = t;
  }
  if ((rc = dummy_rows(in, a->Nd, Xd, e))) goto out;
  if (in->half != AUDIT_WHOLE) eval_audit__keep_half(in, a->Nd, Xd);
  mode_ctx x = {.in = in, .a = a, .Tn = Tn, .cflag = cflag, .perm = perm, .rng = rng, .R = R};
  for (int m = 0; m < EVAL_AUDIT_N_MODES && !rc; m++) {
    if (!(c->modes & (1 << m))) continue;
    rc = run_mode(a, in, (eval_audit_mode)m, blocks, Bc, Xd, grid, &x, e);
    if (!rc) a->ran |= 1 << m;
  }
out:
  if (rc && !e->code) o3m_err_set(e, rc, "audit: %s", o3m_strerror(rc));
  if (blocks)
    for (int k = 0; k < p->m; k++) o3m_block_destroy(blocks[k]);
  free(blocks);
  o3m_mask_destroy(mask);
  o3m_rng_destroy(rng);
  free(Xd);
  free(Tn);
  free(U);
  free(Bc);
  free(R);
  free(perm);
  free(grid);
  free(cflag);
  if (rc) {
    eval_audit_destroy(a);
    return rc;
  }
  *out = a;
  return O3M_OK;
}
