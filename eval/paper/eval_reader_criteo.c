/* eval_reader_criteo.c -- Criteo rows (Kaggle TSV or CSV with header) as
 * replay events, and the streaming statistics pass.
 *
 * Each line goes through eval_criteo_parse (eval_criteo_prep.c, where every
 * preprocessing choice is documented). The row's count triple is looked up
 * in a table of 27^3 entries that maps it to its arm (or -1); rows whose
 * label is not an arm are skipped and counted. For an arm row the reader
 * scales the 13 user features u, writes w[i * 3 + k] = u_i and
 * X[a][i * 3 + k] = u_i + v_{a,k} for every arm a; C (the v part, the same on
 * every row) is built once at open. Nothing is allocated per row. Blank
 * lines are skipped and counted like non-arm rows; any other malformed line
 * is an error naming it.
 *
 * The CSV form must start with a header of 40 names whose first is "label"
 * (the sample's is label,I1..I13,C1..C26); the TSV form has no header. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval_criteo_prep.h"
#include "eval_reader_impl.h"

typedef struct criteo_reader {
  eval_reader base;
  int csv;
  char sep;
  eval_criteo_stats st;
  int arm_of[EVAL_CRITEO_NTRIPLES]; /* triple index -> arm, or -1 */
} criteo_reader;

/* Reads and checks the CSV header line. */
static int check_header(eval_lines *L, o3m_err *e) {
  char *line;
  size_t len;
  int rc = eval_lines_next(L, &line, &len, e);
  if (rc == 0) return o3m_err_set(e, O3M_EPARSE, "%s: empty file, expected a header", L->path);
  if (rc < 0) return rc;
  int n = 1;
  for (const char *p = line; *p; p++) n += *p == ',';
  if (n != EVAL_CRITEO_FIELDS || strncmp(line, "label,", 6))
    return o3m_err_set(e, O3M_EPARSE, "%s:1: expected a header of %d names starting with "
                       "'label' (label,I1..I13,C1..C26), got %d fields", L->path,
                       EVAL_CRITEO_FIELDS, n);
  return O3M_OK;
}

static int parse_error(const eval_lines *L, int field, const char *why, o3m_err *e) {
  if (field > 0)
    return o3m_err_set(e, O3M_EPARSE, "%s:%lld: field %d: %s", L->path, L->line, field, why);
  return o3m_err_set(e, O3M_EPARSE, "%s:%lld: %s", L->path, L->line, why);
}

static int criteo_parse(eval_reader *r, char *line, eval_event *ev, o3m_err *e) {
  criteo_reader *c = (criteo_reader *)r;
  eval_lines *L = &r->lines;
  const int K = r->K, d = r->d;
  eval_criteo_row row;
  int field;
  const char *why;
  if (eval_criteo_parse(line, c->sep, c->st.transform, &row, &field, &why))
    return parse_error(L, field, why, e);
  int arm = c->arm_of[eval_criteo_triple_index(row.count)];
  if (arm < 0) return 0; /* skipped */
  double u[EVAL_CRITEO_NINT], *w = r->w;
  eval_criteo_user(&c->st, &row, u);
  for (int i = 0; i < EVAL_CRITEO_NINT; i++)
    for (int k = 0; k < EVAL_CRITEO_NBUCKET; k++) w[i * EVAL_CRITEO_NBUCKET + k] = u[i];
  if (!r->no_matrix)
    for (int a = 0; a < K; a++) {
      double *x = r->X + (size_t)a * d;
      const double *ca = r->C + (size_t)a * d;
      for (int j = 0; j < d; j++) x[j] = w[j] + ca[j];
    }
  ev->arm = arm;
  ev->reward = (double)row.label;
  ev->X = r->no_matrix ? NULL : r->X;
  ev->w = w;
  return 1;
}

static void criteo_destroy(eval_reader *r) { free(r); }

static const eval_reader_ops criteo_ops = {criteo_parse, criteo_destroy};

int eval_reader_open_criteo(eval_reader **out, const char *path, int csv,
                            const eval_criteo_stats *st, o3m_err *e) {
  *out = NULL;
  if (st->n_arms < 1 || st->n_arms > EVAL_CRITEO_MAX_ARMS)
    return o3m_err_set(e, O3M_EINVAL, "criteo: statistics hold %d arms", st->n_arms);
  criteo_reader *c = calloc(1, sizeof *c);
  if (!c) return o3m_err_set(e, O3M_ENOMEM, "%s: out of memory", path);
  eval_reader *r = &c->base;
  r->ops = &criteo_ops;
  r->K = st->n_arms;
  r->d = EVAL_CRITEO_DIM;
  r->skip_reason = "item label not among the arms, or blank line";
  c->csv = csv;
  c->sep = csv ? ',' : '\t';
  c->st = *st;
  int rc = eval_lines_open(&r->lines, path, e);
  if (rc) {
    free(c);
    return rc;
  }
  for (int t = 0; t < EVAL_CRITEO_NTRIPLES; t++) c->arm_of[t] = -1;
  size_t Kd = (size_t)r->K * r->d;
  r->X = malloc(sizeof(double) * Kd);
  r->C = malloc(sizeof(double) * Kd);
  r->w = malloc(sizeof(double) * r->d);
  if (!r->X || !r->C || !r->w) {
    eval_reader_destroy(r);
    return o3m_err_set(e, O3M_ENOMEM, "%s: out of memory", path);
  }
  /* C[a][i * 3 + k] = v_{a,k}: the outer sum with u = 0. */
  static const double zero[EVAL_CRITEO_NINT];
  for (int a = 0; a < r->K; a++) {
    int t = eval_criteo_triple_index(st->arm_count[a]);
    if (c->arm_of[t] >= 0) {
      eval_reader_destroy(r);
      return o3m_err_set(e, O3M_EINVAL, "criteo: arms %d and %d have the same label",
                         c->arm_of[t], a);
    }
    c->arm_of[t] = a;
    double v[EVAL_CRITEO_NBUCKET];
    eval_criteo_item(st, st->arm_count[a], v);
    eval_criteo_outer_sum(zero, v, r->C + (size_t)a * r->d);
  }
  if (csv && (rc = check_header(&r->lines, e))) {
    eval_reader_destroy(r);
    return rc;
  }
  snprintf(r->desc, sizeof r->desc,
           "criteo (%s): %d arms (top item labels), context = outer sum of %d user x %d item "
           "features (d = %d), integer transform %s", csv ? "csv" : "tsv", r->K,
           EVAL_CRITEO_NINT, EVAL_CRITEO_NBUCKET, r->d,
           eval_criteo_transform_name(st->transform));
  *out = r;
  return O3M_OK;
}

int eval_criteo_scan(const char *path, int csv, long long max_rows, eval_criteo_transform tr,
                     int n_arms, eval_criteo_stats *st, o3m_err *e) {
  eval_lines L;
  eval_criteo_accum *acc = NULL;
  int rc = eval_lines_open(&L, path, e);
  if (rc) return rc;
  if (eval_criteo_accum_create(&acc, tr)) {
    rc = o3m_err_set(e, O3M_ENOMEM, "criteo: out of memory");
    goto out;
  }
  if (csv && (rc = check_header(&L, e))) goto out;
  const char sep = csv ? ',' : '\t';
  long long n = 0;
  char *line;
  size_t len;
  while ((max_rows <= 0 || n < max_rows) && (rc = eval_lines_next(&L, &line, &len, e)) == 1) {
    if (len == 0) continue;
    eval_criteo_row row;
    int field;
    const char *why;
    if (eval_criteo_parse(line, sep, tr, &row, &field, &why)) {
      rc = parse_error(&L, field, why, e);
      goto out;
    }
    eval_criteo_accum_add(acc, &row);
    n++;
  }
  if (rc < 0) goto out;
  rc = eval_criteo_accum_finish(acc, n_arms, st, e);
  if (rc && n == 0) rc = o3m_err_set(e, rc, "%s: no data rows", path);
out:
  eval_criteo_accum_destroy(acc);
  eval_lines_close(&L);
  return rc;
}
