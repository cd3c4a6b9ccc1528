/* eval_tables.c -- synthetic feature tables (see eval_tables.h).
 *
 * Values come in pairs from Box-Muller over a splitmix64 stream started at
 * the seed (o3m_splitmix.h); the second of a pair is kept for the next
 * value, so the file depends on the seed alone. All writers share one row
 * loop (write_table) and one argument check. */
#include "eval_tables.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "o3m_splitmix.h"

/* The checks every writer shares; 0 or an O3M_EINVAL with a message. */
static int check_args(const char *fn, const char *path, o3m_features_kind kind,
                      const char *id_prefix, int n_rows, int n_cols, o3m_err *e) {
  if (!path || !id_prefix) return o3m_err_set(e, O3M_EINVAL, "%s: NULL argument", fn);
  if (kind != O3M_FEATURES_USERS && kind != O3M_FEATURES_ITEMS)
    return o3m_err_set(e, O3M_EINVAL, "%s: bad kind %d", fn, (int)kind);
  if (n_rows < 1 || n_rows > O3M_FEATURES_MAX_ROWS || n_cols < 1 ||
      n_cols > O3M_FEATURES_MAX_COLS)
    return o3m_err_set(e, O3M_EINVAL, "%s: %d rows x %d columns out of range", fn, n_rows,
                       n_cols);
  /* The longest id is the prefix plus up to 10 digits. */
  if (strpbrk(id_prefix, ",\r\n") || strlen(id_prefix) + 10 > O3M_MAX_ID)
    return o3m_err_set(e, O3M_EINVAL,
                       "%s: id prefix must be at most %d bytes without comma or line break", fn,
                       O3M_MAX_ID - 10);
  return O3M_OK;
}

/* Writes the table whose row r, column c is value(ctx, r, c); names NULL
 * means x0, x1, ... The file is removed again on a write error. */
static int write_table(const char *path, o3m_features_kind kind, const char *id_prefix,
                       int n_rows, int n_cols, const char *const *names,
                       double (*value)(void *ctx, int r, int c), void *ctx, o3m_err *e) {
  FILE *f = fopen(path, "w");
  if (!f)
    return o3m_err_set(e, O3M_EIO, "%s: cannot create: %s", path, strerror(errno));
  fputs(kind == O3M_FEATURES_USERS ? "user_id" : "item_id", f);
  for (int c = 0; c < n_cols; c++) {
    if (names)
      fprintf(f, ",%s", names[c]);
    else
      fprintf(f, ",x%d", c);
  }
  fputc('\n', f);
  for (int r = 0; r < n_rows; r++) {
    fprintf(f, "%s%d", id_prefix, r);
    for (int c = 0; c < n_cols; c++) fprintf(f, ",%.17g", value(ctx, r, c));
    fputc('\n', f);
  }
  int bad = ferror(f);
  if (fclose(f) != 0) bad = 1;
  if (bad) {
    remove(path);
    return o3m_err_set(e, O3M_EIO, "%s: write error", path);
  }
  return O3M_OK;
}

/* The standard normal stream of write_synthetic, drawn in file order. */
typedef struct normal_stream {
  uint64_t s;
  double spare;
  int have_spare;
} normal_stream;

static double next_normal(void *ctx, int r, int c) {
  (void)r;
  (void)c;
  normal_stream *n = ctx;
  double v;
  if (n->have_spare) {
    v = n->spare;
    n->have_spare = 0;
  } else {
    o3m_splitmix64_gauss2(&n->s, &v, &n->spare);
    n->have_spare = 1;
  }
  return v;
}

int eval_tables_write_synthetic(const char *path, o3m_features_kind kind,
                                const char *id_prefix, int n_rows, int n_cols,
                                uint64_t seed, o3m_err *e) {
  int rc = check_args("eval_tables_write_synthetic", path, kind, id_prefix, n_rows, n_cols, e);
  if (rc) return rc;
  normal_stream n = {seed, 0.0, 0};
  return write_table(path, kind, id_prefix, n_rows, n_cols, NULL, next_normal, &n, e);
}

typedef struct matrix_src {
  const double *vals;
  int n_cols;
} matrix_src;

static double matrix_value(void *ctx, int r, int c) {
  const matrix_src *m = ctx;
  return m->vals[(size_t)r * (size_t)m->n_cols + (size_t)c];
}

int eval_tables_write_matrix(const char *path, o3m_features_kind kind, const char *id_prefix,
                             int n_rows, int n_cols, const char *const *names,
                             const double *vals, o3m_err *e) {
  int rc = check_args("eval_tables_write_matrix", path, kind, id_prefix, n_rows, n_cols, e);
  if (rc) return rc;
  if (!vals) return o3m_err_set(e, O3M_EINVAL, "eval_tables_write_matrix: NULL values");
  for (size_t i = 0; i < (size_t)n_rows * (size_t)n_cols; i++)
    if (!isfinite(vals[i]))
      return o3m_err_set(e, O3M_ENONFINITE, "eval_tables_write_matrix: value %zu is not finite",
                         i);
  matrix_src m = {vals, n_cols};
  return write_table(path, kind, id_prefix, n_rows, n_cols, names, matrix_value, &m, e);
}

/* ---- the bank-like table ---- */

const char *const eval_tables_bank_columns[EVAL_TABLES_BANK_COLS] = {
    "age",           "income",         "credit_score",  "balance",        "savings",
    "debt",          "loan_amount",    "monthly_spend", "n_accounts",     "n_cards",
    "tenure_years",  "n_transactions", "avg_txn",       "overdrafts",     "late_payments",
    "mortgage",      "dependents",     "utilization",   "online_logins",  "branch_visits"};

static double clampd(double v, double lo, double hi) { return v < lo ? lo : v > hi ? hi : v; }

/* One customer from three latent factors (age, wealth, risk) and
 * idiosyncratic noise; the figures are plausible, not calibrated. */
static void bank_row(uint64_t *s, double *x) {
  double z[8], spare;
  for (int i = 0; i < 8; i += 2) o3m_splitmix64_gauss2(s, &z[i], &z[i + 1]);
  double za = z[0], zw = z[1], zr = z[2];
  double e[20];
  for (int i = 0; i < 20; i += 2) o3m_splitmix64_gauss2(s, &e[i], i + 1 < 20 ? &e[i + 1] : &spare);
  double age = clampd(45 + 13 * za, 18, 90);
  double income = exp(10.6 + 0.35 * zw + 0.1 * za + 0.25 * e[0]);
  double spend = income / 12 * 0.6 * exp(0.2 * e[7]);
  double ntx = fmax(1, round(40 + 12 * e[11] + 0.2 * (45 - age)));
  x[0] = round(age);
  x[1] = round(income);
  x[2] = round(clampd(680 + 60 * (-0.7 * zr + 0.3 * zw) + 30 * e[2], 300, 850));
  x[3] = round(income * 0.2 * exp(0.5 * e[3]));
  x[4] = round(exp(8 + 0.8 * zw + 0.3 * za + 0.7 * e[4]));
  x[5] = round(exp(9 + 0.6 * zr + 0.5 * e[5]));
  x[6] = round(fmax(0, 20000 + 15000 * (0.5 * zw + 0.3 * zr) + 8000 * e[6]));
  x[7] = round(spend);
  x[8] = fmax(1, round(2 + zw + 0.7 * e[8]));
  x[9] = fmax(0, round(2 + 0.8 * zr + 0.7 * e[9]));
  x[10] = round(clampd((age - 18) * 0.3 + 4 * e[10], 0, age - 18));
  x[11] = ntx;
  x[12] = round(100 * spend / ntx) / 100;
  x[13] = fmax(0, round(0.3 + zr + 0.5 * e[13]));
  x[14] = fmax(0, round(0.2 + 1.2 * zr + 0.5 * e[14]));
  x[15] = zw + 0.3 * za + e[15] > 0.5 ? round(fmax(0, 150000 + 80000 * e[16])) : 0;
  x[16] = clampd(round(1 + 0.03 * (age - 40) + e[17]), 0, 6);
  x[17] = round(1000 / (1 + exp(-(0.8 * zr + 0.5 * e[18])))) / 1000;
  x[18] = fmax(0, round(20 - 0.2 * (age - 45) + 5 * e[19]));
  x[19] = fmax(0, round(1 + 0.05 * (age - 45) + e[12]));
}

int eval_tables_write_bank(const char *path, const char *id_prefix, int n_rows, uint64_t seed,
                           o3m_err *e) {
  int rc = check_args("eval_tables_write_bank", path, O3M_FEATURES_USERS, id_prefix, n_rows,
                      EVAL_TABLES_BANK_COLS, e);
  if (rc) return rc;
  double *vals = malloc(sizeof *vals * (size_t)n_rows * EVAL_TABLES_BANK_COLS);
  if (!vals) return o3m_err_set(e, O3M_ENOMEM, "out of memory");
  uint64_t s = seed;
  for (int r = 0; r < n_rows; r++) bank_row(&s, vals + (size_t)r * EVAL_TABLES_BANK_COLS);
  rc = eval_tables_write_matrix(path, O3M_FEATURES_USERS, id_prefix, n_rows,
                                EVAL_TABLES_BANK_COLS, eval_tables_bank_columns, vals, e);
  free(vals);
  return rc;
}
