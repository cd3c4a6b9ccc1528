/* eval_audit_input.c -- the audit's input (eval_audit.h): a party's
 * tables, a data set split into the parties, or the bank demo, with every
 * party's rows, the audited columns (the truth) and the dummy keys. */
#include "eval_audit_impl.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "eval_reader.h"
#include "eval_regret.h"
#include "eval_tables.h"
#include "o3m_rng.h"

/* Default number of rows taken from the bank demo and from a data set. */
#define DEFAULT_ROWS 1000

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
