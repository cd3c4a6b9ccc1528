/* eval_audit.c -- see eval_audit.h.
 *
 * Layout: building the input (tables, data sets, dummy keys), the linear
 * algebra of the attacks (least squares, PCA, FastICA, matching), the run
 * over modes and series, and the writers (tables, CSVs, gnuplot). Dense
 * math goes through linalg/o3m_blas.h and LAPACKE (dgelsd, dsyevd,
 * dgesvd); the masking through o3m_block_apply, the routine the passive
 * participant runs. */
#include "eval_audit_impl.h"
#include "eval_audit_factored.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "eval_cmds.h"
#include "eval_plot.h"
#include "eval_reader.h"
#include "eval_regret.h"
#include "eval_tables.h"
#include "o3m_blas.h"
#include "o3m_cli.h"
#include "o3m_clock.h"
#include "o3m_rng.h"

/* Pairs of users sampled for the Gram exposure. */
#define GRAM_PAIRS 4000
/* Default number of rows taken from the bank demo and from a data set. */
#define DEFAULT_ROWS 1000
/* Eigenvalues below this fraction of the largest count as zero. */
#define RANK_TOL 1e-13
/* Relative singular value cut of the least-squares solves. */
#define LSTSQ_RCOND 1e-12

/* ------------------------------------------------------------------ input */

static void id_list_free(id_list *l) {
  for (int i = 0; i < l->n; i++) free(l->ids[i]);
  free(l->ids);
  memset(l, 0, sizeof *l);
}

/* The ids of table `which` of f in file order (at most cap, 0: all), as
 * o3m_features read them (so quoted or trimmed ids are the ids the lookups
 * know). */
static int id_list_read(id_list *l, const o3m_features *f, o3m_features_kind which, int cap,
                        o3m_err *e) {
  memset(l, 0, sizeof *l);
  int n = which == O3M_FEATURES_USERS ? o3m_features_n_users(f) : o3m_features_n_items(f);
  if (cap > 0 && n > cap) n = cap;
  if (n == 0) return O3M_OK;
  if (!(l->ids = calloc((size_t)n, sizeof *l->ids)))
    return o3m_err_set(e, O3M_ENOMEM, "out of memory");
  for (; l->n < n; l->n++)
    if (!(l->ids[l->n] = strdup(o3m_features_row_id(f, which, l->n)))) {
      id_list_free(l);
      return o3m_err_set(e, O3M_ENOMEM, "out of memory");
    }
  return O3M_OK;
}

void eval_audit_input_destroy(eval_audit_input *in) {
  if (!in) return;
  /* A half input (eval_audit_factored.c) borrows the tables and names. */
  if (in->pp && !in->borrowed)
    for (int k = 0; k < in->part.m; k++) {
      o3m_features_destroy(in->pp[k].f);
      id_list_free(&in->pp[k].users);
      id_list_free(&in->pp[k].items);
    }
  if (in->names && !in->borrowed)
    for (int c = 0; c < in->dj; c++) free(in->names[c]);
  if (!in->borrowed) free(in->pp);
  free(in->names);
  free(in->item_col);
  free(in->ref);
  free(in->X);
  free(in->T);
  free(in);
}

int eval_audit_input_users(const eval_audit_input *in) { return in->N; }
const char *eval_audit_input_column(const eval_audit_input *in, int c) { return in->names[c]; }

/* Loads a party's tables and their ids (cap rows of each at most). */
static int pp_load(pp_tables *t, const char *users, const char *items, int dims, int cap,
                   o3m_err *e) {
  int rc = o3m_features_load(&t->f, users, items, dims, e);
  if (!rc && users) rc = id_list_read(&t->users, t->f, O3M_FEATURES_USERS, cap, e);
  /* With an item table alone the items are the audited rows: cap them. */
  if (!rc && items) rc = id_list_read(&t->items, t->f, O3M_FEATURES_ITEMS, users ? 0 : cap, e);
  return rc;
}

/* Row r of party k's part: user r with item r mod n_items (as documented). */
static int pp_fill(const pp_tables *t, int r, double *out) {
  const char *uid = t->users.n ? t->users.ids[r % t->users.n] : NULL;
  const char *iid = t->items.n ? t->items.ids[r % t->items.n] : NULL;
  return o3m_features_fill(t->f, uid, 1, &iid, out, NULL, NULL);
}

/* Reads up to rows events of a data set into *X (rows x d): the context
 * of the logged arm of each event. */
static int read_dataset(const eval_audit_source *s, int rows, double **X, int *n,
                        unsigned char *item_col, o3m_err *e) {
  char log[4096], items[4096];
  const char *dir = s->data_dir ? s->data_dir : "../shared/data";
  eval_reader *rd = NULL;
  int rc;
  if (!strcmp(s->dataset, "news")) {
    snprintf(log, sizeof log, "%s/news10k/dataset.txt", dir);
    if (access(log, R_OK) != 0)
      return o3m_err_set(e, O3M_ENOTFOUND,
                         "news data set not found: %s (see the README of the shared data "
                         "directory; --data-dir sets it)",
                         log);
    rc = eval_reader_open_news(&rd, log, e);
  } else if (!strcmp(s->dataset, "obd")) {
    snprintf(log, sizeof log, "%s/obd-random-men/men.csv", dir);
    snprintf(items, sizeof items, "%s/obd-random-men/item_context.csv", dir);
    if (access(log, R_OK) != 0 || access(items, R_OK) != 0)
      return o3m_err_set(e, O3M_ENOTFOUND,
                         "OBD data set not found: %s and %s (see the README of the shared "
                         "data directory; --data-dir sets it)",
                         log, items);
    eval_obd_options o;
    eval_obd_options_default(&o);
    rc = eval_reader_open_obd(&rd, log, items, &o, e);
  } else {
    return o3m_err_set(e, O3M_EINVAL, "--dataset: '%s' is not news or obd", s->dataset);
  }
  if (rc) return rc;
  int d = eval_reader_dim(rd);
  if (d != s->part.d) {
    eval_reader_destroy(rd);
    return o3m_err_set(e, O3M_EDIM, "--dims sum to %d, but the %s contexts have d = %d",
                       s->part.d, s->dataset, d);
  }
  /* The columns of the arm part (OBD's item features) are item columns;
   * a data set without a split (news) has user columns only. */
  const double *C = eval_reader_item_part(rd);
  for (int a = 0; C && a < eval_reader_arms(rd); a++)
    for (int c = 0; c < d; c++)
      if (C[(size_t)a * d + c] != 0) item_col[c] = 1;
  double *buf = malloc(sizeof *buf * (size_t)rows * (size_t)d);
  if (!buf) {
    eval_reader_destroy(rd);
    return o3m_err_set(e, O3M_ENOMEM, "out of memory");
  }
  int got = 0;
  eval_event ev;
  while (got < rows && (rc = eval_reader_next(rd, &ev, e)) == 1) {
    memcpy(buf + (size_t)got * d, ev.X + (size_t)ev.arm * d, sizeof *buf * (size_t)d);
    got++;
  }
  eval_reader_destroy(rd);
  if (rc < 0 || got < 2) {
    free(buf);
    return rc < 0 ? rc : o3m_err_set(e, O3M_EPARSE, "%s: fewer than 2 events", log);
  }
  *X = buf;
  *n = got;
  return O3M_OK;
}

/* Writes party k's columns of X (N x d) as a user table and loads it. */
static int pp_from_matrix(pp_tables *t, const eval_audit_source *s, int k, const double *X,
                          int N, o3m_err *e) {
  const o3m_partition *p = &s->part;
  int dk = p->dims[k], rc;
  char path[4096], prefix[32];
  double *cols = malloc(sizeof *cols * (size_t)N * (size_t)dk);
  char **names = calloc((size_t)dk, sizeof *names);
  char *nbuf = malloc((size_t)dk * 16);
  if (!cols || !names || !nbuf) {
    rc = o3m_err_set(e, O3M_ENOMEM, "out of memory");
    goto out;
  }
  for (int c = 0; c < dk; c++) {
    names[c] = nbuf + (size_t)c * 16;
    snprintf(names[c], 16, "c%d", p->offset[k] + c);
  }
  for (int r = 0; r < N; r++)
    memcpy(cols + (size_t)r * dk, X + (size_t)r * p->d + p->offset[k], sizeof *cols * dk);
  snprintf(path, sizeof path, "%s/party%d_users.csv", s->work_dir, k);
  snprintf(prefix, sizeof prefix, "p%du", k);
  rc = eval_tables_write_matrix(path, O3M_FEATURES_USERS, prefix, N, dk,
                                (const char *const *)names, cols, e);
  if (!rc) rc = pp_load(t, path, NULL, dk, 0, e);
out:
  free(cols);
  free(names);
  free(nbuf);
  return rc;
}

/* The audited party's column names from its tables (user columns, then
 * item columns), as o3m_features read the headers. */
static int read_names(eval_audit_input *in, const o3m_features *f, o3m_err *e) {
  int c = 0;
  const o3m_features_kind kinds[2] = {O3M_FEATURES_USERS, O3M_FEATURES_ITEMS};
  for (int t = 0; t < 2; t++) {
    const char *name;
    for (int k = 0; c < in->dj && (name = o3m_features_column(f, kinds[t], k)); k++)
      if (!(in->names[c++] = strdup(name))) return o3m_err_set(e, O3M_ENOMEM, "out of memory");
  }
  return O3M_OK;
}

static int build(eval_audit_input *in, const eval_audit_source *s, o3m_err *e) {
  const o3m_partition *p = &s->part;
  const int j = s->party, d = p->d, m = p->m;
  int rc, N = 0;
  double *data = NULL; /* the data set's rows, if any */
  char upath[4096];
  const char *users = s->user_table, *items = s->item_table;
  int cap = s->rows > 0 ? s->rows : 0;
  in->dj = p->dims[j];
  if (!(in->pp = calloc((size_t)m, sizeof *in->pp)) ||
      !(in->names = calloc((size_t)in->dj, sizeof *in->names)) ||
      !(in->item_col = calloc((size_t)d, 1)))
    return o3m_err_set(e, O3M_ENOMEM, "out of memory");
  if ((rc = eval_regret_mkdir_p(s->work_dir, e))) return rc;

  /* The audited party's tables. */
  if (s->dataset) {
    if ((rc = read_dataset(s, cap ? cap : DEFAULT_ROWS, &data, &N, in->item_col, e))) return rc;
    rc = pp_from_matrix(&in->pp[j], s, j, data, N, e);
    for (int c = 0; !rc && c < in->dj; c++) {
      char nm[16];
      snprintf(nm, sizeof nm, "c%d", p->offset[j] + c);
      if (!(in->names[c] = strdup(nm))) rc = o3m_err_set(e, O3M_ENOMEM, "out of memory");
    }
  } else {
    if (s->bank) {
      if (p->dims[j] != EVAL_TABLES_BANK_COLS)
        return o3m_err_set(e, O3M_EDIM, "--bank: the bank table has %d columns, dims[%d] = %d",
                           EVAL_TABLES_BANK_COLS, j, p->dims[j]);
      snprintf(upath, sizeof upath, "%s/bank_users.csv", s->work_dir);
      if ((rc = eval_tables_write_bank(upath, "cust", cap ? cap : DEFAULT_ROWS, s->seed, e)))
        return rc;
      users = upath;
    }
    rc = pp_load(&in->pp[j], users, items, in->dj, cap, e);
    if (!rc) rc = read_names(in, in->pp[j].f, e);
    N = in->pp[j].users.n ? in->pp[j].users.n : in->pp[j].items.n;
  }
  if (rc) goto out;
  if (N < 2) {
    rc = o3m_err_set(e, O3M_EINVAL, "the audited table has %d row; the audit needs 2 or more",
                     N);
    goto out;
  }
  in->N = N;
  if (!(in->X = calloc((size_t)N * d, sizeof *in->X)) ||
      !(in->T = malloc(sizeof *in->T * (size_t)N * in->dj))) {
    rc = o3m_err_set(e, O3M_ENOMEM, "out of memory");
    goto out;
  }

  /* The other parties: their own table if given, their slice of the data
   * set, or standard normal columns; the AP's columns are kept in X only
   * (it sends no dummies). */
  o3m_rng *rng = NULL;
  if ((rc = o3m_rng_create_seeded_insecure(&rng, s->seed ^ 0x0a0d17ull))) goto out;
  for (int k = 0; !rc && k < m; k++) {
    if (k == j) continue;
    int dk = p->dims[k];
    const char *given = s->other_tables ? s->other_tables[k] : NULL;
    if (given) {
      /* The party's own user table: row r is its row r (matched by
       * position with the audited rows). */
      if (!(rc = pp_load(&in->pp[k], given, NULL, dk, N, e)) && in->pp[k].users.n < N)
        rc = o3m_err_set(e, O3M_EINVAL, "--table %d=%s: %d rows, fewer than the %d audited rows "
                         "(rows are matched by position)", k, given, in->pp[k].users.n, N);
      for (int r = 0; !rc && k == 0 && r < N; r++)
        if (pp_fill(&in->pp[0], r, in->X + (size_t)r * d))
          rc = o3m_err_set(e, O3M_EINVAL, "cannot fill row %d of party 0", r);
    } else if (data && k == 0) {
      for (int r = 0; r < N; r++)
        memcpy(in->X + (size_t)r * d, data + (size_t)r * d, sizeof *in->X * dk);
    } else if (k == 0) {
      double *z = malloc(sizeof *z * dk);
      if (!z) rc = o3m_err_set(e, O3M_ENOMEM, "out of memory");
      for (int r = 0; !rc && r < N; r++) {
        o3m_rng_gaussian(rng, z, dk);
        memcpy(in->X + (size_t)r * d, z, sizeof *z * dk);
      }
      free(z);
    } else if (data) {
      rc = pp_from_matrix(&in->pp[k], s, k, data, N, e);
    } else {
      char path[4096], prefix[32];
      snprintf(path, sizeof path, "%s/party%d_users.csv", s->work_dir, k);
      snprintf(prefix, sizeof prefix, "p%du", k);
      rc = eval_tables_write_synthetic(path, O3M_FEATURES_USERS, prefix, N, dk,
                                       s->seed * 1000003ull + (uint64_t)k, e);
      if (!rc) rc = pp_load(&in->pp[k], path, NULL, dk, 0, e);
    }
  }
  /* Every PP gets a dummy-row key, so that ids it does not hold get its
   * dummies: whatever construction party/o3m_features implements. */
  for (int k = 1; !rc && k < m; k++) {
    unsigned char key[O3M_FEATURES_KEY_BYTES];
    for (int b = 0; b < O3M_FEATURES_KEY_BYTES; b += 8) {
      uint64_t w;
      o3m_rng_u64(rng, &w);
      memcpy(key + b, &w, 8);
    }
    o3m_features_set_dummy_key(in->pp[k].f, key);
  }
  o3m_rng_destroy(rng);
  if (rc) goto out;

  /* The truth: the audited party's raw columns. */
  for (int r = 0; !rc && r < N; r++)
    if (pp_fill(&in->pp[j], r, in->T + (size_t)r * in->dj))
      rc = o3m_err_set(e, O3M_EINVAL, "cannot fill row %d of the audited table", r);

  /* The whitening defence, the audited department's
   * own choice: its handle sends W x instead of x from here on (and its
   * dummies come from the whitened moments), while T above stays the raw
   * values the attacks are scored against. The other PPs' handles are
   * left as they are: whether they whiten is their choice, not the
   * auditing department's. */
  if (!rc && s->whiten) rc = o3m_features_whiten(in->pp[j].f, e);
  /* With score_whitened the attacks are scored on W x instead. */
  for (int r = 0; !rc && s->score_whitened && r < N; r++)
    if (pp_fill(&in->pp[j], r, in->T + (size_t)r * in->dj))
      rc = o3m_err_set(e, O3M_EINVAL, "cannot fill row %d of the audited table", r);
  in->whitened = s->whiten;
  in->sends_truth = !s->whiten || s->score_whitened;

  /* The rows every PP sends (and the dummy rows come from the same
   * handles in eval_audit_run). */
  for (int k = 1; !rc && k < m; k++)
    for (int r = 0; !rc && r < N; r++)
      if (pp_fill(&in->pp[k], r, in->X + (size_t)r * d + p->offset[k]))
        rc = o3m_err_set(e, O3M_EINVAL, "cannot fill row %d of party %d", r, k);
  /* A party's columns after its user table's are its item table's. */
  for (int k = 0; !rc && k < m; k++) {
    if (!in->pp[k].f) continue;
    int nu = 0;
    while (nu < p->dims[k] && o3m_features_column(in->pp[k].f, O3M_FEATURES_USERS, nu)) nu++;
    memset(in->item_col + p->offset[k] + nu, 1, (size_t)(p->dims[k] - nu));
  }
out:
  free(data);
  return rc;
}

int eval_audit_input_build(eval_audit_input **out, const eval_audit_source *s, o3m_err *e) {
  *out = NULL;
  if (!s || s->part.m < 2)
    return o3m_err_set(e, O3M_EINVAL, "--dims: the audit needs the AP and at least one PP");
  if (s->party < 1 || s->party >= s->part.m)
    return o3m_err_set(e, O3M_EINVAL, "--party: %d, expected 1..%d (party 0 is the AP)",
                       s->party, s->part.m - 1);
  int sources = (s->user_table || s->item_table) + !!s->bank + !!s->dataset;
  if (sources != 1)
    return o3m_err_set(e, O3M_EINVAL,
                       "give exactly one of --user-table/--item-table, --bank, --dataset");
  if (!s->work_dir) return o3m_err_set(e, O3M_EINVAL, "no work directory");
  if (s->rows < 0) return o3m_err_set(e, O3M_EINVAL, "--users: %d is negative", s->rows);
  if (s->score_whitened && !s->whiten)
    return o3m_err_set(e, O3M_EINVAL, "--score-whitened needs --whiten");
  eval_audit_input *in = calloc(1, sizeof *in);
  if (!in) return o3m_err_set(e, O3M_ENOMEM, "out of memory");
  in->part = s->part;
  in->party = s->party;
  int rc = build(in, s, e);
  if (rc) {
    eval_audit_input_destroy(in);
    return rc;
  }
  *out = in;
  return O3M_OK;
}

/* ------------------------------------------------------------------ algebra */

/* Minimum-norm least squares A X = B (dgelsd): A is m x n (destroyed), B is
 * max(m, n) x nrhs with the right-hand sides in its first m rows; on return
 * its first n rows hold X. */
static int lstsq(int m, int n, int nrhs, double *A, double *B) {
  int mn = m < n ? m : n;
  double *s = malloc(sizeof *s * (size_t)(mn > 0 ? mn : 1));
  if (!s) return O3M_ENOMEM;
  lapack_int rank;
  lapack_int info = LAPACKE_dgelsd(LAPACK_ROW_MAJOR, m, n, nrhs, A, n, B, nrhs, s,
                                   LSTSQ_RCOND, &rank);
  free(s);
  return info == 0 ? O3M_OK : info < 0 ? O3M_EINVAL : O3M_ENOTPD;
}

/* Eigenpairs of the symmetric p x p matrix C (full storage, overwritten by
 * the eigenvectors as columns), ascending into w (dsyevd). */
static int sym_eig(int p, double *C, double *w) {
  lapack_int info = LAPACKE_dsyevd(LAPACK_ROW_MAJOR, 'V', 'U', p, C, p, w);
  return info == 0 ? O3M_OK : info < 0 ? O3M_EINVAL : O3M_ENOTPD;
}

/* Centers the n x c matrix A's columns in place and scales each to unit
 * norm; a constant column becomes zero and gets flag 1. */
static void standardize(int n, int c, double *A, unsigned char *flag) {
  for (int q = 0; q < c; q++) {
    double mu = 0, ss = 0;
    for (int i = 0; i < n; i++) mu += A[(size_t)i * c + q];
    mu /= n;
    for (int i = 0; i < n; i++) {
      double v = A[(size_t)i * c + q] -= mu;
      ss += v * v;
    }
    double sc = ss > 0 && sqrt(ss) > 1e-12 * (fabs(mu) + 1) * sqrt((double)n) ? 1 / sqrt(ss) : 0;
    for (int i = 0; i < n; i++) A[(size_t)i * c + q] *= sc;
    if (flag) flag[q] = sc == 0;
  }
}

/* The basis an attacker learns from training observations Tr (n x p): the
 * mean, the top k eigenvectors V (p x k, as columns; k at most want, the
 * numerical rank and n - 1) and their eigenvalues, largest first. */
typedef struct basis {
  int p, k;
  double *mean; /* p */
  double *V;    /* p x k */
  double *lam;  /* k */
} basis;

static void basis_free(basis *b) {
  free(b->mean);
  free(b->V);
  free(b->lam);
  memset(b, 0, sizeof *b);
}

static int pca_fit(basis *b, int n, int p, const double *Tr, int want) {
  memset(b, 0, sizeof *b);
  b->p = p;
  double *C = calloc((size_t)p * p, sizeof *C), *w = malloc(sizeof *w * p);
  double *Z = malloc(sizeof *Z * (size_t)n * p);
  b->mean = calloc((size_t)p, sizeof *b->mean);
  b->V = malloc(sizeof *b->V * (size_t)p * p);
  b->lam = malloc(sizeof *b->lam * p);
  int rc = O3M_ENOMEM;
  if (!C || !w || !Z || !b->mean || !b->V || !b->lam) goto out;
  for (int i = 0; i < n; i++) o3m_axpy(p, 1.0 / n, Tr + (size_t)i * p, b->mean);
  for (int i = 0; i < n; i++)
    for (int q = 0; q < p; q++) Z[(size_t)i * p + q] = Tr[(size_t)i * p + q] - b->mean[q];
  o3m_syrk_t(p, n, 1.0 / n, Z, C);
  o3m_symmetrize_from_upper(p, C);
  if ((rc = sym_eig(p, C, w))) goto out;
  double top = w[p - 1] > 0 ? w[p - 1] : 0;
  int k = 0;
  while (k < want && k < n - 1 && k < p && w[p - 1 - k] > RANK_TOL * top && top > 0) k++;
  for (int q = 0; q < k; q++) {
    b->lam[q] = w[p - 1 - q];
    for (int r = 0; r < p; r++) b->V[(size_t)r * k + q] = C[(size_t)r * p + (p - 1 - q)];
  }
  b->k = k;
  rc = O3M_OK;
out:
  free(C);
  free(w);
  free(Z);
  if (rc) basis_free(b);
  return rc;
}

/* Out (n x k) = (A - mean) V: the components of n observations. */
static int project(const basis *b, int n, const double *A, double *Out) {
  double *Z = malloc(sizeof *Z * (size_t)n * b->p);
  if (!Z) return O3M_ENOMEM;
  for (int i = 0; i < n; i++)
    for (int q = 0; q < b->p; q++) Z[(size_t)i * b->p + q] = A[(size_t)i * b->p + q] - b->mean[q];
  o3m_gemm(n, b->k, b->p, 1.0, Z, b->V, 0.0, Out);
  free(Z);
  return O3M_OK;
}

/* W (k x k) <- (W W^T)^{-1/2} W, FastICA's symmetric decorrelation. */
static int sym_decorrelate(int k, double *W, double *M, double *E, double *w, double *tmp) {
  o3m_gemm_nt(k, k, k, 1.0, W, W, 0.0, M);
  memcpy(E, M, sizeof *E * (size_t)k * k);
  int rc = sym_eig(k, E, w);
  if (rc) return rc;
  /* M = E diag(w^-1/2) E^T */
  for (int r = 0; r < k; r++)
    for (int q = 0; q < k; q++)
      tmp[(size_t)r * k + q] = E[(size_t)r * k + q] / sqrt(w[q] > 1e-300 ? w[q] : 1e-300);
  o3m_gemm_nt(k, k, k, 1.0, tmp, E, 0.0, M);
  o3m_gemm(k, k, k, 1.0, M, W, 0.0, tmp);
  memcpy(W, tmp, sizeof *W * (size_t)k * k);
  return O3M_OK;
}

/* FastICA (Hyvarinen 1999), symmetric, g = tanh, on whitened Z (n x k):
 * the unmixing W (k x k, rows = directions), started from a random
 * orthogonal matrix of rng. */
static int fastica(int n, int k, const double *Z, int max_iter, o3m_rng *rng, double *W) {
  size_t kk = (size_t)k * k;
  double *Y = malloc(sizeof *Y * (size_t)n * k), *Wn = malloc(sizeof *Wn * kk);
  double *M = malloc(sizeof *M * kk), *E = malloc(sizeof *E * kk), *tmp = malloc(sizeof *tmp * kk);
  double *w = malloc(sizeof *w * k), *gp = malloc(sizeof *gp * k);
  int rc = O3M_ENOMEM;
  if (!Y || !Wn || !M || !E || !tmp || !w || !gp) goto out;
  if ((rc = o3m_rng_gaussian(rng, W, (long)kk))) goto out;
  if ((rc = sym_decorrelate(k, W, M, E, w, tmp))) goto out;
  for (int it = 0; it < max_iter; it++) {
    o3m_gemm_nt(n, k, k, 1.0, Z, W, 0.0, Y); /* Y = Z W^T */
    memset(gp, 0, sizeof *gp * k);
    for (int i = 0; i < n; i++)
      for (int q = 0; q < k; q++) {
        double g = tanh(Y[(size_t)i * k + q]);
        Y[(size_t)i * k + q] = g;
        gp[q] += 1 - g * g;
      }
    o3m_gemm_tn(k, k, n, 1.0 / n, Y, Z, 0.0, Wn); /* E[g(y) z^T] */
    for (int q = 0; q < k; q++) o3m_axpy(k, -gp[q] / n, W + (size_t)q * k, Wn + (size_t)q * k);
    if ((rc = sym_decorrelate(k, Wn, M, E, w, tmp))) goto out;
    double lim = 0;
    for (int q = 0; q < k; q++) {
      double c = fabs(fabs(o3m_dot(k, Wn + (size_t)q * k, W + (size_t)q * k)) - 1);
      if (c > lim) lim = c;
    }
    memcpy(W, Wn, sizeof *W * kk);
    if (lim < 1e-7) break;
  }
  rc = O3M_OK;
out:
  free(Y);
  free(Wn);
  free(M);
  free(E);
  free(tmp);
  free(w);
  free(gp);
  return rc;
}

/* Scores recovered components against the truth: Tn is the standardized
 * truth (N x dj, constant columns flagged), R the components (N x k,
 * standardized here). With match, every column gets a distinct component
 * (greedy on |corr|, largest first); without, component c is column c.
 * corr[c] = |corr| (NaN for a constant column, 0 for one left without a
 * component). */
static int score(int N, int dj, const double *Tn, const unsigned char *cflag, double *R, int k,
                 int match, double *corr) {
  standardize(N, k, R, NULL);
  double *C = malloc(sizeof *C * (size_t)dj * (k > 0 ? k : 1));
  unsigned char *used_c = calloc((size_t)dj, 1), *used_q = calloc((size_t)(k > 0 ? k : 1), 1);
  if (!C || !used_c || !used_q) {
    free(C);
    free(used_c);
    free(used_q);
    return O3M_ENOMEM;
  }
  if (k > 0) o3m_gemm_tn(dj, k, N, 1.0, Tn, R, 0.0, C);
  for (int c = 0; c < dj; c++) corr[c] = cflag[c] ? NAN : 0.0;
  if (!match) {
    for (int c = 0; c < dj && c < k; c++)
      if (!cflag[c]) corr[c] = fabs(C[(size_t)c * k + c]);
  } else {
    for (;;) {
      int bc = -1, bq = -1;
      double best = -1;
      for (int c = 0; c < dj; c++) {
        if (used_c[c] || cflag[c]) continue;
        for (int q = 0; q < k; q++)
          if (!used_q[q] && fabs(C[(size_t)c * k + q]) > best) {
            best = fabs(C[(size_t)c * k + q]);
            bc = c;
            bq = q;
          }
      }
      if (bc < 0) break;
      used_c[bc] = used_q[bq] = 1;
      corr[bc] = best > 1 ? 1 : best;
    }
  }
  free(C);
  free(used_c);
  free(used_q);
  return O3M_OK;
}

/* ------------------------------------------------------------------ run */

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
  if ((rc = lstsq(n, q, dj, A, B))) goto out;
  o3m_gemm(N, dj, p, 1.0, x->O, B, 0.0, x->R);
  for (int i = 0; q > p && i < N; i++) o3m_axpy(dj, 1.0, B + (size_t)p * dj, x->R + (size_t)i * dj);
  rc = score(N, dj, x->Tn, x->cflag, x->R, dj, 0, corr);
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
  if ((rc = lstsq(n, Dc, p, A, B))) goto out; /* B[0..D) = M^T, M = p x D */
  for (int r = 0; r < p; r++)
    for (int c = 0; c < D; c++) A2[(size_t)r * D + c] = B[(size_t)c * p + r];
  for (int i = 0; i < N; i++)
    for (int r = 0; r < p; r++)
      B2[(size_t)r * N + i] = x->O[(size_t)i * p + r] - (Dc > D ? B[(size_t)D * p + r] : 0);
  if ((rc = lstsq(p, D, N, A2, B2))) goto out; /* B2[0..D) = x^PP hat, D x N */
  const int off = in->part.offset[in->party] - d0;
  for (int i = 0; i < N; i++)
    for (int c = 0; c < dj; c++) x->R[(size_t)i * dj + c] = B2[(size_t)(off + c) * N + i];
  rc = score(N, dj, x->Tn, x->cflag, x->R, dj, 0, corr);
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
  basis b;
  int rc = pca_fit(&b, Nt, x->p, Tr, want);
  if (rc) return rc;
  const int k = b.k;
  double *Z = NULL, *W = NULL, *P = NULL;
  if (k == 0) {
    rc = score(N, dj, x->Tn, x->cflag, x->R, 0, 1, corr);
    goto out;
  }
  if (!ica) {
    if (!(rc = project(&b, N, x->O, x->R))) rc = score(N, dj, x->Tn, x->cflag, x->R, k, 1, corr);
    goto out;
  }
  /* Whitened training data, unmixing, then the same map on everyone. */
  Z = malloc(sizeof *Z * (size_t)Nt * k);
  W = malloc(sizeof *W * (size_t)k * k);
  P = malloc(sizeof *P * (size_t)N * k);
  rc = O3M_ENOMEM;
  if (!Z || !W || !P) goto out;
  if ((rc = project(&b, Nt, Tr, Z))) goto out;
  for (int i = 0; i < Nt; i++)
    for (int q = 0; q < k; q++) Z[(size_t)i * k + q] /= sqrt(b.lam[q]);
  if ((rc = fastica(Nt, k, Z, x->a->c.ica_max_iter, x->rng, W))) goto out;
  if ((rc = project(&b, N, x->O, P))) goto out;
  for (int i = 0; i < N; i++)
    for (int q = 0; q < k; q++) P[(size_t)i * k + q] /= sqrt(b.lam[q]);
  o3m_gemm_nt(N, k, k, 1.0, P, W, 0.0, x->R);
  rc = score(N, dj, x->Tn, x->cflag, x->R, k, 1, corr);
out:
  free(Z);
  free(W);
  free(P);
  basis_free(&b);
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
  standardize(N, dj, Tn, cflag);
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

/* ------------------------------------------------------------------ writers */

static const char *series_x(eval_audit_series s) { return s <= EVAL_AUDIT_KP_FULL ? "n" : "N"; }

static const char *mode_what(eval_audit_mode m) {
  switch (m) {
    case EVAL_AUDIT_PER_PARTY: return "the AP sees the audited party's part Q^j x^j alone";
    case EVAL_AUDIT_SECAGG: return "the AP sees only s = sum over PPs of Q^k x^k";
    default: return "s, plus the AP's own block Q^0 and own columns x^0";
  }
}

/* "0.570 (0.00-1.00)" of point i of a series, or blanks. */
static void cell(const eval_audit *a, int m, int s, int i, char *buf, size_t n) {
  eval_audit_point pt;
  if (eval_audit_point_get(a, m, s, i, &pt))
    snprintf(buf, n, "%s", "");
  else
    snprintf(buf, n, "%.3f (%.2f-%.2f)", pt.mean, pt.min, pt.max);
}

void eval_audit_print(const eval_audit *a, const eval_audit_input *in, FILE *f) {
  const int dj = a->dj;
  char c1[40], c2[40], c3[40], c4[40];
  fprintf(f, "audit of party %d: %d columns, %d users, %d dummy ids; d = %d, AP d_0 = %d, "
             "all PPs d - d_0 = %d\n"
             "figures: |corr| between true and recovered values, mean (min-max) over your "
             "columns\n",
          in->party, dj, a->N, a->Nd, a->d, a->d0, a->D);
  if (in->whitened)
    fprintf(f, "you whiten (o3m_features_whiten): the AP sees W x; scored against your %s\n",
            in->sends_truth ? "whitened values W x" : "raw values x");
  for (int m = 0; m < EVAL_AUDIT_N_MODES; m++) {
    if (!(a->ran & (1 << m))) continue;
    const eval_audit_exposure *x = &a->ex[m];
    const char *obs = m == EVAL_AUDIT_PER_PARTY ? "y" : "s";
    fprintf(f, "\n== mode %s: %s\n", eval_audit_mode_name(m), mode_what(m));
    if (x->exact)
      fprintf(f, "norms ||x^j||: EXACT (largest relative error %.1e); Gram x^j_i.x^j_k: EXACT "
                 "(%.1e)\n",
              x->norm, x->gram);
    else
      fprintf(f, "norms: corr(||%s_i||, ||x^j_i||) = %.3f%s; Gram: corr(%s_i.%s_k, "
                 "x^j_i.x^j_k) = %.3f (%d random pairs)\n",
              obs, x->norm, isnan(x->norm) ? " (your norms are all equal: nothing to learn)" : "",
              obs, obs, x->gram, GRAM_PAIRS);
    int full = eval_audit_n_points(a, m, EVAL_AUDIT_KP_FULL) > 0;
    fprintf(f, "known plaintext:\n%6s  %-22s%s\n", "n", "your columns known",
            full ? "  n full rows of every PP known" : "");
    for (int i = 0; i < eval_audit_n_points(a, m, EVAL_AUDIT_KP); i++) {
      eval_audit_point pt;
      eval_audit_point_get(a, m, EVAL_AUDIT_KP, i, &pt);
      cell(a, m, EVAL_AUDIT_KP, i, c1, sizeof c1);
      cell(a, m, EVAL_AUDIT_KP_FULL, i, c2, sizeof c2);
      fprintf(f, "%6d  %-22s  %s\n", pt.x, c1, c2);
    }
    fprintf(f, "statistics of traffic (PCA, FastICA), real users vs dummy rows of unknown ids:\n"
               "%6s  %-22s  %-22s  %-22s  %-22s\n",
            "N", "pca real", "pca dummies", "ica real", "ica dummies");
    int n1 = eval_audit_n_points(a, m, EVAL_AUDIT_PCA);
    int n2 = eval_audit_n_points(a, m, EVAL_AUDIT_DUMMY_PCA);
    for (int i = 0, k = 0; i < n1 || k < n2;) {
      eval_audit_point p1, p2;
      int x1 = i < n1 && !eval_audit_point_get(a, m, EVAL_AUDIT_PCA, i, &p1) ? p1.x : -1;
      int x2 = k < n2 && !eval_audit_point_get(a, m, EVAL_AUDIT_DUMMY_PCA, k, &p2) ? p2.x : -1;
      int xv = x1 < 0 ? x2 : x2 < 0 ? x1 : x1 < x2 ? x1 : x2;
      int ir = x1 == xv ? i++ : -1, kd = x2 == xv ? k++ : -1;
      cell(a, m, EVAL_AUDIT_PCA, ir, c1, sizeof c1);
      cell(a, m, EVAL_AUDIT_DUMMY_PCA, kd, c2, sizeof c2);
      cell(a, m, EVAL_AUDIT_ICA, ir, c3, sizeof c3);
      cell(a, m, EVAL_AUDIT_DUMMY_ICA, kd, c4, sizeof c4);
      fprintf(f, "%6d  %-22s  %-22s  %-22s  %-22s\n", xv, c1, c2, c3, c4);
    }
    fprintf(f, "per column, at each attack's largest setting:\n%-16s", "column");
    for (int s = 0; s < EVAL_AUDIT_N_SERIES; s++) {
      int np = eval_audit_n_points(a, m, s);
      if (!np) continue;
      char h[40];
      eval_audit_point pt;
      eval_audit_point_get(a, m, s, np - 1, &pt);
      snprintf(h, sizeof h, "%s %s=%d", eval_audit_series_name(s), series_x(s), pt.x);
      fprintf(f, " %17s", h);
    }
    fputc('\n', f);
    for (int c = 0; c < dj; c++) {
      fprintf(f, "%-16.16s", eval_audit_input_column(in, c));
      for (int s = 0; s < EVAL_AUDIT_N_SERIES; s++) {
        int np = eval_audit_n_points(a, m, s);
        if (!np) continue;
        eval_audit_point pt;
        eval_audit_point_get(a, m, s, np - 1, &pt);
        if (isnan(pt.corr[c]))
          fprintf(f, " %17s", "constant");
        else
          fprintf(f, " %17.3f", pt.corr[c]);
      }
      fputc('\n', f);
    }
  }
  fprintf(f, "\nnotes: |corr| 1 = the column is recovered up to scale and offset; the other "
             "parties' columns are\n  standard normal unless a data set gives them; masks come "
             "from a seeded generator (evaluation only).\n");
}

static void csv_file_name(char *buf, size_t n, const char *tag, eval_audit_mode m,
                          eval_audit_series s, const char *ext) {
  const char *mn = m == EVAL_AUDIT_PER_PARTY ? "per_party" : m == EVAL_AUDIT_SECAGG ? "secagg"
                                                                                     : "secagg_own";
  char sn[16];
  snprintf(sn, sizeof sn, "%s", eval_audit_series_name(s));
  for (char *q = sn; *q; q++)
    if (*q == '-') *q = '_';
  snprintf(buf, n, "%s_%s_%s.%s", tag, mn, sn, ext);
}

int eval_audit_write_csv(const eval_audit *a, const eval_audit_input *in, const char *dir,
                         o3m_err *e) {
  int rc = eval_regret_mkdir_p(dir, e);
  if (rc) return rc;
  for (int m = 0; m < EVAL_AUDIT_N_MODES; m++)
    for (int s = 0; s < EVAL_AUDIT_N_SERIES; s++) {
      int np = eval_audit_n_points(a, m, s);
      if (!np) continue;
      char name[64], path[4096];
      csv_file_name(name, sizeof name, a->tag, m, s, "csv");
      snprintf(path, sizeof path, "%s/%s", dir, name);
      FILE *f = fopen(path, "w");
      if (!f) return o3m_err_set(e, O3M_EIO, "cannot write %s: %s", path, strerror(errno));
      fprintf(f, "%s,mean,min,max", series_x(s));
      for (int c = 0; c < a->dj; c++) fprintf(f, ",%s", eval_audit_input_column(in, c));
      fputc('\n', f);
      for (int i = 0; i < np; i++) {
        eval_audit_point pt;
        eval_audit_point_get(a, m, s, i, &pt);
        fprintf(f, "%d,%.6f,%.6f,%.6f", pt.x, pt.mean, pt.min, pt.max);
        for (int c = 0; c < a->dj; c++) fprintf(f, ",%.6f", pt.corr[c]);
        fputc('\n', f);
      }
      int bad = ferror(f);
      if (fclose(f) != 0 || bad)
        return o3m_err_set(e, O3M_EIO, "cannot write %s: %s", path, strerror(errno));
    }
  return O3M_OK;
}

int eval_audit_plot(const eval_audit *a, const char *dir, int formats, FILE *f, o3m_err *e) {
  static const char *colors[EVAL_AUDIT_N_SERIES] = {"#1f77b4", "#9467bd", "#2ca02c",
                                                    "#ff7f0e", "#d62728", "#8c564b"};
  int rc = eval_regret_mkdir_p(dir, e);
  if (rc) return rc;
  char path[4096], list[1024] = "";
  snprintf(path, sizeof path, "%s/audit_plots.gp", dir);
  FILE *g = fopen(path, "w");
  if (!g) return o3m_err_set(e, O3M_EIO, "cannot write %s: %s", path, strerror(errno));
  eval_plot_preamble(g, "audit", "audit_plots.gp");
  fprintf(g, "set key bottom right box opaque\nset yrange [0:1.02]\n"
             "set ylabel 'mean over your columns of |corr| true vs recovered'\n");
  for (int m = 0; m < EVAL_AUDIT_N_MODES; m++) {
    if (!(a->ran & (1 << m))) continue;
    for (int byN = 0; byN < 2; byN++) {
      char stem[64];
      const char *mn = m == EVAL_AUDIT_PER_PARTY ? "per_party" : m == EVAL_AUDIT_SECAGG
                                                                     ? "secagg"
                                                                     : "secagg_own";
      snprintf(stem, sizeof stem, "audit_%s_vs_%s", mn, byN ? "N" : "n");
      eval_plot_output(g, stem);
      fprintf(g, "set title 'o3m-eval audit, mode %s: recovery vs %s'\n", eval_audit_mode_name(m),
              byN ? "users (or dummies) observed N" : "known rows n");
      fprintf(g, "set xlabel '%s'\n%s\nplot \\\n", byN ? "N" : "n",
              byN ? "set logscale x" : "unset logscale x");
      int first = 1;
      for (int s = byN ? EVAL_AUDIT_PCA : EVAL_AUDIT_KP;
           s <= (byN ? EVAL_AUDIT_DUMMY_ICA : EVAL_AUDIT_KP_FULL); s++) {
        if (!eval_audit_n_points(a, m, s)) continue;
        char csv[64];
        csv_file_name(csv, sizeof csv, a->tag, m, s, "csv");
        fprintf(g, "%s  '%s' using 1:2 with linespoints lw 2 lc rgb '%s' %s title '%s'",
                first ? "" : ", \\\n", csv, colors[s],
                s >= EVAL_AUDIT_DUMMY_PCA || s == EVAL_AUDIT_KP_FULL ? "dt 2" : "dt 1",
                eval_audit_series_name(s));
        first = 0;
      }
      fputc('\n', g);
      eval_plot_append_names(list, sizeof list, stem, formats);
    }
  }
  fprintf(g, "unset output\n");
  int bad = ferror(g);
  if (fclose(g) != 0 || bad)
    return o3m_err_set(e, O3M_EIO, "cannot write %s: %s", path, strerror(errno));
  if ((rc = eval_plot_render(dir, "audit_plots.gp", formats, e))) return rc;
  if (f) fprintf(f, "plots in %s:%s\n", dir, list);
  return O3M_OK;
}

/* ------------------------------------------------------------------ command */

enum {
  O_DIMS, O_PARTY, O_UT, O_IT, O_BANK, O_DS, O_DD, O_TABLE, O_USERS, O_DUMMIES, O_KNOWN, O_MODES,
  O_ICA, O_SEED, O_OUT, O_NOPLOT, O_PLOT_FORMAT, O_WHITEN, O_SCOREW, O_FACTORED, O_COUNT
};
static const o3m_cli_option audit_options[] = {
    [O_DIMS] = {"dims", "D0,D1,...", "every party's number of columns, the AP first (required)"},
    [O_PARTY] = {"party", "J", "the audited party, 1..M-1 (required)"},
    [O_UT] = {"user-table", "CSV", "your user table (o3m_features format)"},
    [O_IT] = {"item-table", "CSV", "your item table (row i of the audit: user i, item i mod n)"},
    [O_BANK] = {"bank", NULL, "audit the bank-like demo table (20 columns; written to --out)"},
    [O_DS] = {"dataset", "news|obd", "split the shared data set's contexts into the parties"},
    [O_DD] = {"data-dir", "DIR", "the shared data directory (../shared/data)"},
    [O_TABLE] = {"table", "K=CSV", "party K's own user table (repeatable; row r = your row r)"},
    [O_USERS] = {"users", "N", "audit at most N users (all; 1000 for --bank and --dataset)"},
    [O_DUMMIES] = {"dummies", "N", "unknown ids the attacker asks about (as many as users)"},
    [O_KNOWN] = {"known-max", "N", "largest known-row count n (2 d_j; 2 (d - d_0) when secure)"},
    [O_MODES] = {"modes", "LIST", "any of per-party,secagg,secagg+own (all)"},
    [O_ICA] = {"ica-iter", "N", "FastICA iterations at most (200)"},
    [O_SEED] = {"seed", "S", "the mask, the known rows, the other parties' columns (1)"},
    [O_OUT] = {"out", "DIR", "CSVs, plots and written tables (eval-out/audit)"},
    [O_NOPLOT] = {"no-plots", NULL, "tables and CSVs only"},
    [O_PLOT_FORMAT] = {"plot-format", "png,pdf,svg",
                       "plot formats, any of png, pdf and svg (png)"},
    [O_WHITEN] = {"whiten", NULL,
                  "you whiten your columns (config key whiten): the attacks see W x, and are "
                  "scored on your raw x"},
    [O_SCOREW] = {"score-whitened", NULL, "with --whiten: score them on your whitened values W x"},
    [O_FACTORED] = {"factored", NULL,
                    "also under factored batches (protocol 6: U(u) and I(i) seen apart), side "
                    "by side"},
    [O_COUNT] = {NULL, NULL, NULL},
};
static const o3m_cli_spec audit_cli = {
    "o3m-eval audit",
    "--dims D0,D1,... --party J (--user-table CSV [--item-table CSV] | --item-table CSV\n"
    "       | --bank | --dataset news|obd) [options]",
    "What the active participant (AP, party 0) could learn about party J's columns,\n"
    "simulated in-process under each protocol mode (per-party parts; secure\n"
    "aggregation; secure aggregation plus the AP's own block and columns): known\n"
    "plaintext, PCA and FastICA on honest traffic, the same on dummy rows, and the\n"
    "norms/Gram exposure. Per column |corr| true vs recovered; tables on stdout,\n"
    "CSVs and plots (PNG, or --plot-format) in --out.",
    audit_options,
    "Other parties' columns: --table, else their slice of --dataset, else standard normal.\n"};

static int parse_modes(const char *s, int *out) {
  char buf[256];
  snprintf(buf, sizeof buf, "%s", s);
  *out = 0;
  char *save = NULL;
  for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    int m = 0;
    while (m < EVAL_AUDIT_N_MODES && strcmp(t, eval_audit_mode_name(m))) m++;
    if (m == EVAL_AUDIT_N_MODES) return -1;
    *out |= 1 << m;
  }
  return *out ? 0 : -1;
}

static int parse_int(const char *s, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (end == s || *end || errno || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

int eval_audit_main(int argc, char **argv) {
  eval_audit_source src;
  memset(&src, 0, sizeof src);
  src.party = -1;
  src.data_dir = "../shared/data";
  eval_audit_config cfg;
  eval_audit_config_default(&cfg);
  const char *dims = NULL, *out_dir = "eval-out/audit";
  enum { MAX_TABLES = 64 };
  const char *tables[MAX_TABLES];
  int n_tables = 0;
  int plots = 1, formats = EVAL_PLOT_PNG, factored = 0;
  long v = 0;
  o3m_err err;
  o3m_err_clear(&err);
  o3m_cli cl;
  o3m_cli_begin(&cl, &audit_cli, argc, argv);
  const char *optarg_;
  for (int ch; (ch = o3m_cli_next(&cl, &optarg_)) != O3M_CLI_END;) {
    int bad = 0;
    switch (ch) {
      case O3M_CLI_STOP: return cl.exit_code;
      case O_DIMS: dims = optarg_; break;
      case O_PARTY: bad = parse_int(optarg_, 1, O3M_MAX_PARTIES - 1, &v); src.party = (int)v; break;
      case O_UT: src.user_table = optarg_; break;
      case O_IT: src.item_table = optarg_; break;
      case O_BANK: src.bank = 1; break;
      case O_DS: src.dataset = optarg_; bad = strcmp(optarg_, "news") && strcmp(optarg_, "obd"); break;
      case O_DD: src.data_dir = optarg_; break;
      case O_USERS: bad = parse_int(optarg_, 2, O3M_FEATURES_MAX_ROWS, &v); src.rows = (int)v; break;
      case O_DUMMIES: bad = parse_int(optarg_, 2, 10000000, &v); cfg.dummies = (int)v; break;
      case O_MODES: bad = parse_modes(optarg_, &cfg.modes); break;
      case O_ICA: bad = parse_int(optarg_, 1, 100000, &v); cfg.ica_max_iter = (int)v; break;
      case O_KNOWN: bad = parse_int(optarg_, 1, 1000000, &v); cfg.known_max = (int)v; break;
      case O_TABLE:
        bad = n_tables == MAX_TABLES || !strchr(optarg_, '=');
        if (!bad) tables[n_tables++] = optarg_;
        break;
      case O_SEED:
        bad = parse_int(optarg_, 0, __LONG_MAX__, &v);
        cfg.seed = src.seed = (uint64_t)v;
        break;
      case O_OUT: out_dir = optarg_; break;
      case O_NOPLOT: plots = 0; break;
      case O_PLOT_FORMAT:
        if (eval_plot_formats_parse(optarg_, &formats, &err)) {
          fprintf(stderr, "o3m-eval audit: %s\n", o3m_err_message(&err));
          return 2;
        }
        break;
      case O_WHITEN: src.whiten = 1; break;
      case O_SCOREW: src.score_whitened = 1; break;
      case O_FACTORED: factored = 1; break;
    }
    if (bad) {
      fprintf(stderr, "o3m-eval audit: bad value '%s' for --%s\n", optarg_,
              audit_options[ch].name);
      return 2;
    }
  }
  if (o3m_cli_operands(&cl) < argc)
    return o3m_cli_usage_error(&audit_cli, "unexpected argument '%s'",
                               argv[o3m_cli_operands(&cl)]);
  if (!dims || src.party < 0)
    return o3m_cli_usage_error(&audit_cli, "--dims and --party are required");
  if (o3m_partition_parse(&src.part, dims, &err)) {
    fprintf(stderr, "o3m-eval audit: --dims: %s\n", o3m_err_message(&err));
    return 2;
  }
  /* --table K=PATH: party K's own user table instead of synthetic columns. */
  const char **others = NULL;
  if (n_tables) {
    others = calloc((size_t)src.part.m, sizeof *others);
    if (!others) {
      fprintf(stderr, "o3m-eval audit: out of memory\n");
      return 1;
    }
    for (int t = 0; t < n_tables; t++) {
      const char *eq = strchr(tables[t], '=');
      char num[16];
      size_t len = (size_t)(eq - tables[t]);
      snprintf(num, sizeof num, "%.*s", (int)(len < sizeof num ? len : sizeof num - 1),
               tables[t]);
      if (len >= sizeof num || parse_int(num, 0, src.part.m - 1, &v) || v == src.party ||
          !eq[1]) {
        fprintf(stderr, "o3m-eval audit: --table '%s': expected K=PATH with K another "
                        "party (0..%d, not %d)\n", tables[t], src.part.m - 1, src.party);
        free(others);
        return 2;
      }
      others[v] = eq + 1;
    }
    src.other_tables = others;
  }
  if (!src.seed) src.seed = cfg.seed;
  src.work_dir = out_dir;
  double t0 = o3m_clock_s();
  eval_audit_input *in = NULL;
  int rc = eval_audit_input_build(&in, &src, &err);
  free(others);
  if (rc) {
    fprintf(stderr, "o3m-eval audit: %s\n", o3m_err_message(&err));
    return rc == O3M_EINVAL || rc == O3M_EDIM ? 2 : 1;
  }
  eval_audit *a = NULL;
  rc = eval_audit_run(&a, in, &cfg, &err);
  if (rc) {
    fprintf(stderr, "o3m-eval audit: %s\n", o3m_err_message(&err));
    eval_audit_input_destroy(in);
    return 1;
  }
  eval_audit_factored *fa = NULL;
  if (factored && eval_audit_factored_run(&fa, in, a, &cfg, &err)) {
    fprintf(stderr, "o3m-eval audit: %s\n", o3m_err_message(&err));
    eval_audit_destroy(a);
    eval_audit_input_destroy(in);
    return 1;
  }
  double secs = o3m_clock_s() - t0;
  int status = 0;
  eval_audit_print(a, in, stdout);
  if (fa) eval_audit_factored_print(fa, a, stdout);
  if (fa && eval_audit_factored_write_csv(fa, in, out_dir, &err)) {
    fprintf(stderr, "o3m-eval audit: %s\n", o3m_err_message(&err));
    status = 1;
  }
  if (eval_audit_write_csv(a, in, out_dir, &err)) {
    fprintf(stderr, "o3m-eval audit: %s\n", o3m_err_message(&err));
    status = 1;
  } else {
    printf("CSVs in %s: audit_<mode>_<attack>.csv%s\n", out_dir,
           fa ? ", audit_factored_... and audit_differenced_..." : "");
    if (plots && eval_audit_plot(a, out_dir, formats, stdout, &err)) {
      fprintf(stderr, "o3m-eval audit: %s\n", o3m_err_message(&err));
      if (err.code != O3M_ENOTFOUND) status = 1;
    }
  }
  printf("runtime: %.2f s (single-threaded BLAS)\n", secs);
  eval_audit_factored_destroy(fa);
  eval_audit_destroy(a);
  eval_audit_input_destroy(in);
  if (fflush(stdout) != 0) status = 1;
  return status;
}
