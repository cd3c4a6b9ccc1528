/* test_features.c -- feature tables of a participant
 * (party/o3m_features.h).
 *
 * The small fixtures tests/data/users.csv (3 users x 3 columns) and
 * tests/data/items.csv (2 items x 2 columns) check exact values, the
 * counters and the dummy rows of unknown ids: the same id always gets the
 * same row, different ids different rows, the rows depend on the secret key,
 * and over many ids their columns have the table's mean and standard
 * deviation, and their covariance is the table's full covariance, so PCA of
 * dummies finds the table's eigenvectors rather than the coordinate axes.
 * A whitened table's rows, dummies and rotated parts have
 * identity covariance, the map is linear and finite on a singular table,
 * and it must precede the norm bound, which then holds for whitened rows. Malformed tables are written to a
 * temporary directory, one per error class, and each must fail with a
 * message naming file and line, without quoting the feature field. A
 * 10,000-row synthetic table is checked row by row against an independent
 * reading of its text, and several threads fill at once to check the
 * atomic counters. */
#include <criterion/criterion.h>
#include <ftw.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "eval_tables.h"
#include "o3m_blas.h"
#include "o3m_features.h"
#include "o3m_hash_keyed.h"
#include "o3m_splitmix.h"

#define USERS O3M_SOURCE_DIR "/tests/data/users.csv"
#define ITEMS O3M_SOURCE_DIR "/tests/data/items.csv"

static char tmpdir[] = "/tmp/o3m_test_features_XXXXXX";

static void setup(void) { cr_assert_not_null(mkdtemp(tmpdir)); }

static int rm_entry(const char *p, const struct stat *sb, int flag,
                    struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  return remove(p);
}

static void teardown(void) { nftw(tmpdir, rm_entry, 8, FTW_DEPTH | FTW_PHYS); }

TestSuite(features, .init = setup, .fini = teardown);

/* Writes text to tmpdir/name and returns the path (static buffer per call
 * slot: two slots so a user and an item table can coexist). */
static const char *write_tmp(const char *name, const char *text) {
  static char paths[2][512];
  static int slot;
  char *p = paths[slot++ % 2];
  snprintf(p, 512, "%s/%s", tmpdir, name);
  FILE *f = fopen(p, "wb");
  cr_assert_not_null(f);
  fwrite(text, 1, strlen(text), f);
  fclose(f);
  return p;
}

/* Turns on f's dummy rows under a key made from seed, as a PP does with
 * the key it keeps beside its block. */
static void dummy_key(o3m_features *f, int seed) {
  unsigned char key[O3M_FEATURES_KEY_BYTES];
  for (int i = 0; i < O3M_FEATURES_KEY_BYTES; i++) key[i] = (unsigned char)(31 * seed + 3 * i);
  o3m_features_set_dummy_key(f, key);
}

static void load_ok(o3m_features **f, const char *u, const char *i, int dims) {
  o3m_err e;
  int rc = o3m_features_load(f, u, i, dims, &e);
  cr_assert_eq(rc, O3M_OK, "%s", o3m_err_message(&e));
}

Test(features, known_user_and_items_equal_the_csv_values) {
  o3m_features *f;
  load_ok(&f, USERS, ITEMS, 5);
  cr_assert_eq(o3m_features_dims(f), 5);
  cr_assert_eq(o3m_features_user_cols(f), 3);
  cr_assert_eq(o3m_features_item_cols(f), 2);
  cr_assert_eq(o3m_features_n_users(f), 3);
  cr_assert_eq(o3m_features_n_items(f), 2);

  const char *items[] = {"i1", "i0", "i1"};
  double X[3 * 5];
  int uu = -1, ui = -1;
  cr_assert_eq(o3m_features_fill(f, "u1", 3, items, X, &uu, &ui), O3M_OK);
  const double want[3][5] = {{0.5, 4, 1e-3, 20.5, -0.25},
                             {0.5, 4, 1e-3, 10, 0.5},
                             {0.5, 4, 1e-3, 20.5, -0.25}};
  for (int k = 0; k < 3; k++)
    for (int j = 0; j < 5; j++)
      cr_assert_eq(X[k * 5 + j], want[k][j], "X[%d][%d] = %.17g, want %.17g",
                   k, j, X[k * 5 + j], want[k][j]);
  cr_assert_eq(uu, 0);
  cr_assert_eq(ui, 0);

  o3m_features_stats st;
  o3m_features_stats_get(f, &st);
  cr_assert_eq(st.lookups, 1);
  cr_assert_eq(st.item_lookups, 3);
  cr_assert_eq(st.unknown_users, 0);
  cr_assert_eq(st.unknown_items, 0);
  o3m_features_destroy(f);
}

/* Equal rows, bit for bit. */
static int rows_equal(const double *a, const double *b, int n) {
  return memcmp(a, b, sizeof(double) * (size_t)n) == 0;
}

Test(features, unknown_ids_get_dummies_and_are_counted) {
  o3m_features *f;
  load_ok(&f, USERS, ITEMS, 5);
  dummy_key(f, 1);
  const char *items[] = {"i0", "nope", "i1", ""};
  double X[4 * 5];
  int uu = -1, ui = -1;
  cr_assert_eq(o3m_features_fill(f, "stranger", 4, items, X, &uu, &ui), O3M_OK);
  cr_assert_eq(uu, 1);
  cr_assert_eq(ui, 2);
  /* Known items keep their exact values; every row has the same user part. */
  cr_assert_eq(X[0 * 5 + 3], 10.0);
  cr_assert_eq(X[0 * 5 + 4], 0.5);
  cr_assert_eq(X[2 * 5 + 3], 20.5);
  cr_assert_eq(X[2 * 5 + 4], -0.25);
  for (int k = 1; k < 4; k++)
    cr_assert(rows_equal(X, X + k * 5, 3), "row %d has another user part", k);
  /* The dummies are finite and are not the column means (the old, constant
   * dummy) nor zeros. */
  const double umean[3] = {(1.5 + 0.5 + -1.0) / 3, (-2.25 + 4.0 + 0.125) / 3,
                           (0.0 + 1e-3 + 7.0) / 3};
  for (int j = 0; j < 5; j++)
    for (int k = 0; k < 4; k++) cr_assert(isfinite(X[k * 5 + j]));
  for (int j = 0; j < 3; j++) {
    cr_assert_neq(X[j], umean[j], "user column %d is the mean", j);
    cr_assert_neq(X[j], 0.0);
  }
  /* Two unknown items get different dummies. */
  cr_assert(!rows_equal(X + 1 * 5 + 3, X + 3 * 5 + 3, 2), "'nope' and '' share a dummy");

  /* A known user after an unknown one: its exact row; counters accumulate. */
  cr_assert_eq(o3m_features_fill(f, "u0", 1, items, X, &uu, &ui), O3M_OK);
  cr_assert_eq(uu, 0);
  cr_assert_eq(X[0], 1.5);
  cr_assert_eq(X[1], -2.25);
  cr_assert_eq(X[2], 0.0);
  /* An id longer than any stored id is simply unknown. */
  char longid[300];
  memset(longid, 'u', sizeof longid - 1);
  longid[sizeof longid - 1] = '\0';
  cr_assert_eq(o3m_features_fill(f, longid, 1, items, X, NULL, NULL), O3M_OK);

  o3m_features_stats st;
  o3m_features_stats_get(f, &st);
  cr_assert_eq(st.lookups, 3);
  cr_assert_eq(st.item_lookups, 6);
  cr_assert_eq(st.unknown_users, 2);
  cr_assert_eq(st.unknown_items, 2);
  o3m_features_destroy(f);
}

/* Without a dummy-row key (the AP's own tables, o3m-eval) an unknown id
 * gets the column means: deterministic, and no secret is needed. */
Test(features, without_a_key_unknown_ids_get_the_column_means) {
  o3m_features *f;
  load_ok(&f, USERS, ITEMS, 5);
  const char *items[] = {"i0", "nope"};
  double X[2 * 5];
  int uu = -1, ui = -1;
  cr_assert_eq(o3m_features_fill(f, "stranger", 2, items, X, &uu, &ui), O3M_OK);
  cr_assert_eq(uu, 1);
  cr_assert_eq(ui, 1);
  const double umean[3] = {(1.5 + 0.5 + -1.0) / 3, (-2.25 + 4.0 + 0.125) / 3,
                           (0.0 + 1e-3 + 7.0) / 3};
  const double imean[2] = {(10.0 + 20.5) / 2, (0.5 + -0.25) / 2};
  for (int j = 0; j < 3; j++)
    cr_assert_eq(X[j], umean[j], "user column %d: %.17g, mean %.17g", j, X[j], umean[j]);
  cr_assert_eq(X[5 + 3], imean[0], "item column 0: %.17g, mean %.17g", X[5 + 3], imean[0]);
  cr_assert_eq(X[5 + 4], imean[1], "item column 1: %.17g, mean %.17g", X[5 + 4], imean[1]);
  cr_assert_eq(X[3], 10.0);
  o3m_features_destroy(f);
}

/* The privacy fix: the AP sees each party's masked vector on its own, so
 * one dummy shared by all unknown users, or a fresh one per request, would
 * tell it whom the party does not know. */
Test(features, regression_unknown_user_dummy_is_stable_per_id_and_distinct_across_ids) {
  o3m_features *f;
  load_ok(&f, USERS, ITEMS, 5);
  dummy_key(f, 1);
  const char *items[] = {"i0", "ghost-item"};
  double a[2 * 5], b[2 * 5], c[2 * 5];
  cr_assert_eq(o3m_features_fill(f, "stranger-1", 2, items, a, NULL, NULL), O3M_OK);
  cr_assert_eq(o3m_features_fill(f, "u1", 2, items, c, NULL, NULL), O3M_OK);
  cr_assert_eq(o3m_features_fill(f, "stranger-1", 2, items, b, NULL, NULL), O3M_OK);
  cr_assert(rows_equal(a, b, 10), "the same unknown user got two different rows");
  cr_assert_eq(o3m_features_fill(f, "stranger-2", 2, items, b, NULL, NULL), O3M_OK);
  for (int j = 0; j < 3; j++)
    cr_assert_neq(a[j], b[j], "column %d: two unknown users share a value", j);
  /* The unknown item's dummy does not depend on the user asked with. */
  cr_assert(rows_equal(a + 5 + 3, b + 5 + 3, 2));
  cr_assert(rows_equal(a + 5 + 3, c + 5 + 3, 2));
  /* A user and an item with the same id get unrelated rows: the two tables
   * have separate keys. Compare the first column's standard-normal draw. */
  o3m_features *g;
  load_ok(&g, USERS, ITEMS, 5);
  dummy_key(g, 2); /* another party's key */
  cr_assert_eq(o3m_features_fill(g, "stranger-1", 2, items, b, NULL, NULL), O3M_OK);
  cr_assert(!rows_equal(a, b, 3), "two handles drew the same key");

  /* With one key set on both handles the dummies agree (what an in-process
   * evaluation needs to reproduce a daemon), and another key changes them. */
  unsigned char key[O3M_FEATURES_KEY_BYTES];
  for (int i = 0; i < O3M_FEATURES_KEY_BYTES; i++) key[i] = (unsigned char)(7 * i + 1);
  o3m_features_set_dummy_key(f, key);
  o3m_features_set_dummy_key(g, key);
  cr_assert_eq(o3m_features_fill(f, "stranger-1", 2, items, a, NULL, NULL), O3M_OK);
  cr_assert_eq(o3m_features_fill(g, "stranger-1", 2, items, b, NULL, NULL), O3M_OK);
  cr_assert(rows_equal(a, b, 10), "same key, same id, different rows");
  key[0] ^= 1;
  o3m_features_set_dummy_key(g, key);
  cr_assert_eq(o3m_features_fill(g, "stranger-1", 2, items, b, NULL, NULL), O3M_OK);
  cr_assert(!rows_equal(a, b, 3), "the user dummy ignores the key");
  cr_assert(rows_equal(a + 5 + 3, b + 5 + 3, 2), "the item key changed with a user-key byte");
  key[0] ^= 1;
  key[16] ^= 1;
  o3m_features_set_dummy_key(g, key);
  cr_assert_eq(o3m_features_fill(g, "stranger-1", 2, items, b, NULL, NULL), O3M_OK);
  cr_assert(rows_equal(a, b, 3), "the user key changed with an item-key byte");
  cr_assert(!rows_equal(a + 5 + 3, b + 5 + 3, 2), "the item dummy ignores the key");
  o3m_features_destroy(g);
  o3m_features_destroy(f);
}

/* The dummy row of an id is the one its definition gives
 * (o3m_features.h, "Dummy rows"): the table's mean plus its covariance
 * root times standard normals from the splitmix64 stream seeded with
 * SipHash-2-4 of the id, under key bytes 0..15 for users and 16..31 for
 * items, the hash's 8 bytes read little-endian. With one column the root is
 * the standard deviation s, so (dummy - mean) / z is s for every id; a seed
 * made any other way (another key half, another byte order, another hash)
 * gives unrelated z and breaks the ratio. Checked against the reference
 * SipHash of libsodium, so it pins the rows the hand-written SipHash gave
 * before and libsodium's keyed hash gives now: the same. */
Test(features, dummy_rows_are_seeded_by_siphash_of_the_id) {
  const char *u = write_tmp("u1.csv", "user_id,x\nu1,1\nu2,2\nu3,4\nu4,9\n");
  const char *i = write_tmp("i1.csv", "item_id,y\ni1,-1\ni2,3\ni3,5\n");
  o3m_features *f;
  load_ok(&f, u, i, 2);
  unsigned char key[O3M_FEATURES_KEY_BYTES];
  for (int b = 0; b < O3M_FEATURES_KEY_BYTES; b++) key[b] = (unsigned char)(11 * b + 5);
  o3m_features_set_dummy_key(f, key);
  o3m_hash_key uk, ik;
  memcpy(uk.k, key, sizeof uk.k);
  memcpy(ik.k, key + 16, sizeof ik.k);
  const double umean = 4.0, imean = 7.0 / 3;
  /* Ids of 0 to 23 bytes: SipHash's last-block padding and full blocks. */
  const char *ids[] = {"", "a", "stranger", "stranger-1", "a-longer-unknown-id-0123"};
  double ru = NAN, ri = NAN;
  for (size_t n = 0; n < sizeof ids / sizeof *ids; n++) {
    double x[2], X[2], z[2];
    cr_assert_eq(o3m_features_fill_user(f, ids[n], x), O3M_OK);
    cr_assert_eq(o3m_features_fill_items(f, 1, &ids[n], X), O3M_OK);
    uint64_t s = o3m_hash_keyed(&uk, ids[n], strlen(ids[n]));
    o3m_splitmix64_gauss2(&s, &z[0], &z[1]);
    double r = (x[0] - umean) / z[0];
    s = o3m_hash_keyed(&ik, ids[n], strlen(ids[n]));
    o3m_splitmix64_gauss2(&s, &z[0], &z[1]);
    double q = (X[1] - imean) / z[0];
    if (n == 0) {
      ru = r;
      ri = q;
      cr_assert_gt(ru, 0.5, "user sd %g", ru);
      cr_assert_gt(ri, 0.5, "item sd %g", ri);
    }
    cr_assert_lt(fabs(r - ru), 1e-12 * ru, "user '%s': %.17g vs %.17g", ids[n], r, ru);
    cr_assert_lt(fabs(q - ri), 1e-12 * ri, "item '%s': %.17g vs %.17g", ids[n], q, ri);
  }
  o3m_features_destroy(f);
}

/* Over many unknown ids each dummy column has the table's mean and
 * (population) standard deviation, and distinct ids give distinct rows. */
Test(features, dummy_columns_follow_the_table_mean_and_sd, .timeout = 60) {
  enum { ROWS = 400, IDS = 20000 };
  char path[600];
  snprintf(path, sizeof path, "%s/moments.csv", tmpdir);
  FILE *fp = fopen(path, "w");
  cr_assert_not_null(fp);
  fprintf(fp, "user_id,a,b,c\n");
  /* Column a: 0..399 (mean 199.5); b: a constant-ish small spread around
   * -1000; c: two values far apart. Only mean and sd matter. */
  for (int r = 0; r < ROWS; r++)
    fprintf(fp, "u%d,%d,%.17g,%d\n", r, r, -1000.0 + 0.001 * (r % 7), r % 2 ? 50 : -30);
  fclose(fp);
  double mean[3] = {0}, sd[3] = {0};
  for (int r = 0; r < ROWS; r++) {
    double v[3] = {r, -1000.0 + 0.001 * (r % 7), r % 2 ? 50 : -30};
    for (int c = 0; c < 3; c++) mean[c] += v[c] / ROWS;
  }
  for (int r = 0; r < ROWS; r++) {
    double v[3] = {r, -1000.0 + 0.001 * (r % 7), r % 2 ? 50 : -30};
    for (int c = 0; c < 3; c++) sd[c] += (v[c] - mean[c]) * (v[c] - mean[c]) / ROWS;
  }
  for (int c = 0; c < 3; c++) sd[c] = sqrt(sd[c]);

  o3m_features *f;
  load_ok(&f, path, NULL, 3);
  dummy_key(f, 1);
  double s1[3] = {0}, s2[3] = {0}, X[3], first[3];
  char id[32];
  int same_as_first = 0;
  for (int i = 0; i < IDS; i++) {
    snprintf(id, sizeof id, "nobody-%d", i);
    int uu = -1;
    cr_assert_eq(o3m_features_fill(f, id, 1, NULL, X, &uu, NULL), O3M_OK);
    cr_assert_eq(uu, 1);
    if (i == 0) memcpy(first, X, sizeof X);
    else same_as_first += rows_equal(first, X, 3);
    for (int c = 0; c < 3; c++) {
      s1[c] += X[c];
      s2[c] += X[c] * X[c];
    }
  }
  cr_assert_eq(same_as_first, 0, "distinct ids gave the same dummy");
  for (int c = 0; c < 3; c++) {
    double m = s1[c] / IDS;
    double v = s2[c] / IDS - m * m;
    double s = sqrt(v > 0 ? v : 0);
    /* Sample mean within 4 standard errors; sample sd within 3 %. */
    cr_assert_lt(fabs(m - mean[c]), 4 * sd[c] / sqrt(IDS) + 1e-9 * fabs(mean[c]),
                 "column %d: mean %.6g, table %.6g", c, m, mean[c]);
    cr_assert_lt(fabs(s - sd[c]), 0.03 * sd[c] + 1e-6,
                 "column %d: sd %.6g, table %.6g", c, s, sd[c]);
  }
  /* A known user still gets its exact row. */
  cr_assert_eq(o3m_features_fill(f, "u123", 1, NULL, X, NULL, NULL), O3M_OK);
  cr_assert_eq(X[0], 123.0);
  cr_assert_eq(X[1], -1000.0 + 0.001 * (123 % 7));
  cr_assert_eq(X[2], 50.0);
  o3m_features_destroy(f);
}

/* ------------------------------------------------ dummies that teach nothing */

/* The AP sees the masked part Q^j x^j of every dummy, so
 * the covariance of dummy parts is Q^j C Q^jT with C the dummies' own
 * covariance, and PCA of that traffic gives the eigenvectors Q^j v of C.
 * Dummies drawn column by column have a diagonal C: its eigenvectors are
 * the coordinate axes, so PCA hands the AP the columns of Q^j. Dummies must
 * instead have the table's full mean and covariance, whose eigenvectors
 * the AP also gets from real traffic. */

#define PCA_COLS 4
#define PCA_ROWS 4000
#define PCA_IDS 20000

/* The real table: mu + A g with g standard normal, A a fixed mixing of very
 * different scales (age-, income- in thousands, score- and flag-like columns, standard
 * deviations from 0.4 to 45), so that
 * the covariance is far from diagonal. Writes it and returns its rows. */
static const char *write_correlated(double *vals) {
  static const double mu[PCA_COLS] = {40, 50, 700, 0.5};
  static const double A[PCA_COLS][PCA_COLS] = {{8, 6, 1, 0},
                                               {15, 12, 3, 0.5},
                                               {30, 20, -25, 5},
                                               {0.1, 0.2, 0.05, 0.3}};
  static char path[600];
  snprintf(path, sizeof path, "%s/correlated.csv", tmpdir);
  FILE *fp = fopen(path, "w");
  cr_assert_not_null(fp);
  fprintf(fp, "user_id,age,income,score,flag\n");
  uint64_t s = 12345;
  for (int r = 0; r < PCA_ROWS; r++) {
    double g[PCA_COLS];
    o3m_splitmix64_gauss2(&s, &g[0], &g[1]);
    o3m_splitmix64_gauss2(&s, &g[2], &g[3]);
    fprintf(fp, "u%d", r);
    for (int c = 0; c < PCA_COLS; c++) {
      double v = mu[c];
      for (int k = 0; k < PCA_COLS; k++) v += A[c][k] * g[k];
      fprintf(fp, ",%.17g", v);
      /* What the file holds, as the loader reads it back. */
      char buf[40];
      snprintf(buf, sizeof buf, "%.17g", v);
      vals[(size_t)r * PCA_COLS + c] = strtod(buf, NULL);
    }
    fprintf(fp, "\n");
  }
  fclose(fp);
  return path;
}

/* Population mean and covariance (full, row-major) of n rows, two passes. */
static void moments(int n, const double *X, double *mean, double *cov) {
  memset(mean, 0, sizeof(double) * PCA_COLS);
  memset(cov, 0, sizeof(double) * PCA_COLS * PCA_COLS);
  for (int r = 0; r < n; r++)
    for (int c = 0; c < PCA_COLS; c++) mean[c] += X[(size_t)r * PCA_COLS + c] / n;
  for (int r = 0; r < n; r++)
    for (int a = 0; a < PCA_COLS; a++)
      for (int b = 0; b < PCA_COLS; b++)
        cov[a * PCA_COLS + b] += (X[(size_t)r * PCA_COLS + a] - mean[a]) *
                                 (X[(size_t)r * PCA_COLS + b] - mean[b]) / n;
}

Test(features, dummy_pca_sees_the_tables_eigenvectors_not_the_axes, .timeout = 60) {
  double *real = malloc(sizeof(double) * PCA_ROWS * PCA_COLS);
  double *dum = malloc(sizeof(double) * PCA_IDS * PCA_COLS);
  cr_assert(real && dum);
  const char *path = write_correlated(real);
  o3m_features *f;
  load_ok(&f, path, NULL, PCA_COLS);
  dummy_key(f, 5);
  char id[32];
  for (int i = 0; i < PCA_IDS; i++) {
    snprintf(id, sizeof id, "nobody-%d", i);
    int uu = -1;
    cr_assert_eq(o3m_features_fill(f, id, 1, NULL, dum + (size_t)i * PCA_COLS, &uu, NULL), 0);
    cr_assert_eq(uu, 1);
  }
  /* Stable per id, under one key, and different across ids. */
  double again[PCA_COLS];
  cr_assert_eq(o3m_features_fill(f, "nobody-7", 1, NULL, again, NULL, NULL), 0);
  cr_assert(rows_equal(again, dum + 7 * PCA_COLS, PCA_COLS));
  for (int c = 0; c < PCA_COLS; c++) cr_assert_neq(dum[c], dum[PCA_COLS + c]);

  double rm[PCA_COLS], rc[PCA_COLS * PCA_COLS], dm[PCA_COLS], dc[PCA_COLS * PCA_COLS];
  moments(PCA_ROWS, real, rm, rc);
  moments(PCA_IDS, dum, dm, dc);

  /* PCA of both: the eigenvectors of the two top eigenvalues (the last
   * columns, eigenvalues ascending) must agree, and the table's are far
   * from any axis, so dummies that only have the columns' variances fail. */
  double rv[PCA_COLS * PCA_COLS], dv[PCA_COLS * PCA_COLS], rw[PCA_COLS], dw[PCA_COLS];
  memcpy(rv, rc, sizeof rv);
  memcpy(dv, dc, sizeof dv);
  cr_assert_eq(o3m_syevd(PCA_COLS, rv, rw), 0);
  cr_assert_eq(o3m_syevd(PCA_COLS, dv, dw), 0);
  for (int k = PCA_COLS - 2; k < PCA_COLS; k++) {
    double dot = 0, axis = 0;
    for (int c = 0; c < PCA_COLS; c++) {
      dot += rv[c * PCA_COLS + k] * dv[c * PCA_COLS + k];
      axis = fmax(axis, fabs(rv[c * PCA_COLS + k]));
    }
    cr_assert_lt(axis, 0.95, "the table's eigenvector %d is almost an axis (%.4f)", k, axis);
    cr_assert_gt(fabs(dot), 0.99,
                 "eigenvector %d of the dummies' covariance is not the table's: "
                 "|cos| = %.4f",
                 k, fabs(dot));
    cr_assert_lt(fabs(dw[k] - rw[k]), 0.05 * rw[k], "eigenvalue %d: %.6g vs %.6g", k, dw[k],
                 rw[k]);
  }
  /* Mean and every covariance entry within sampling error of the table's
   * (a Gaussian's sample covariance has variance (S_aa S_bb + S_ab^2) / n). */
  for (int a = 0; a < PCA_COLS; a++) {
    double se = sqrt(rc[a * PCA_COLS + a] / PCA_IDS);
    cr_assert_lt(fabs(dm[a] - rm[a]), 5 * se + 1e-12 * fabs(rm[a]), "mean %d: %.9g vs %.9g",
                 a, dm[a], rm[a]);
    for (int b = 0; b < PCA_COLS; b++) {
      double s = rc[a * PCA_COLS + b];
      double sd = sqrt((rc[a * PCA_COLS + a] * rc[b * PCA_COLS + b] + s * s) / PCA_IDS);
      cr_assert_lt(fabs(dc[a * PCA_COLS + b] - s), 6 * sd, "cov[%d][%d]: %.9g vs %.9g", a, b,
                   dc[a * PCA_COLS + b], s);
    }
  }
  o3m_features_destroy(f);
  free(real);
  free(dum);
}

/* ------------------------------------------------------------ whitening */

/* A whitened party's rows, and so its dummies and its
 * parts Q^j x^j, have identity covariance: PCA of its traffic sees an
 * isotropic cloud. The map is linear (no centering) and the norm bound
 * applies to the whitened rows. */
Test(features, whitened_rows_and_dummies_have_identity_covariance, .timeout = 60) {
  double *real = malloc(sizeof(double) * PCA_ROWS * PCA_COLS);
  double *w = malloc(sizeof(double) * PCA_ROWS * PCA_COLS);
  double *dum = malloc(sizeof(double) * PCA_IDS * PCA_COLS);
  cr_assert(real && w && dum);
  const char *path = write_correlated(real);
  o3m_features *f;
  load_ok(&f, path, NULL, PCA_COLS);
  o3m_err e;
  cr_assert_eq(o3m_features_whiten(f, &e), 0, "%s", o3m_err_message(&e));
  cr_assert_eq(o3m_features_whiten(f, &e), O3M_ESTATE, "a second whitening was accepted");
  char id[32];
  for (int r = 0; r < PCA_ROWS; r++) {
    snprintf(id, sizeof id, "u%d", r);
    cr_assert_eq(o3m_features_fill(f, id, 1, NULL, w + (size_t)r * PCA_COLS, NULL, NULL), 0);
  }
  dummy_key(f, 3);
  for (int i = 0; i < PCA_IDS; i++) {
    snprintf(id, sizeof id, "nobody-%d", i);
    cr_assert_eq(o3m_features_fill(f, id, 1, NULL, dum + (size_t)i * PCA_COLS, NULL, NULL), 0);
  }
  double m[PCA_COLS], c[PCA_COLS * PCA_COLS], dm[PCA_COLS], dc[PCA_COLS * PCA_COLS];
  moments(PCA_ROWS, w, m, c);
  moments(PCA_IDS, dum, dm, dc);
  for (int a = 0; a < PCA_COLS; a++) {
    /* The whitened table: identity up to rounding. */
    for (int b = 0; b < PCA_COLS; b++)
      cr_assert_lt(fabs(c[a * PCA_COLS + b] - (a == b)), 1e-8, "whitened cov[%d][%d] = %.12g", a,
                   b, c[a * PCA_COLS + b]);
    /* The dummies: identity within sampling error (sd of an entry about
     * 1/sqrt(n), or sqrt(2/n) on the diagonal), around the whitened mean. */
    cr_assert_lt(fabs(dm[a] - m[a]), 5 / sqrt(PCA_IDS), "dummy mean %d", a);
    for (int b = 0; b < PCA_COLS; b++)
      cr_assert_lt(fabs(dc[a * PCA_COLS + b] - (a == b)), 6 * sqrt(2.0 / PCA_IDS),
                   "dummy cov[%d][%d] = %.6g", a, b, dc[a * PCA_COLS + b]);
  }
  /* Parts Q x of the whitened rows under a rotation (a Householder
   * reflection mixing all columns) have identity covariance too: no
   * direction of the part space stands out. */
  double v[PCA_COLS] = {1, -2, 0.5, 3}, vv = 0;
  for (int a = 0; a < PCA_COLS; a++) vv += v[a] * v[a];
  for (int r = 0; r < PCA_ROWS; r++) {
    double *x = w + (size_t)r * PCA_COLS, dot = 0;
    for (int a = 0; a < PCA_COLS; a++) dot += v[a] * x[a];
    for (int a = 0; a < PCA_COLS; a++) x[a] -= 2 * dot / vv * v[a];
  }
  moments(PCA_ROWS, w, m, c);
  for (int a = 0; a < PCA_COLS; a++)
    for (int b = 0; b < PCA_COLS; b++)
      cr_assert_lt(fabs(c[a * PCA_COLS + b] - (a == b)), 1e-8, "part cov[%d][%d]", a, b);
  o3m_features_destroy(f);
  free(real);
  free(w);
  free(dum);
}

/* x -> W x is linear: no centering, so a row that is the sum of two others
 * stays their sum. A singular table (a constant column, a column that
 * copies another) still gives a finite, invertible map: its covariance
 * after whitening has eigenvalues 1 on the varying directions and 0 on the
 * others. The bound then holds for the whitened rows, and whitening after
 * the bound is refused. */
Test(features, whitening_is_linear_handles_singular_tables_and_precedes_the_bound) {
  /* Column c is 2 a (a singular covariance); row u2 is u0 + u1. */
  const char *u = write_tmp("sing.csv",
                            "user_id,a,b,c,d\n"
                            "u0,1,5,2,7\n"
                            "u1,3,5,6,-1\n"
                            "u2,4,10,8,6\n"
                            "u3,-2,5,-4,0.5\n"
                            "u4,0.5,4,1,2\n");
  o3m_features *f;
  load_ok(&f, u, NULL, 4);
  o3m_err e;
  cr_assert_eq(o3m_features_whiten(f, &e), 0, "%s", o3m_err_message(&e));
  double X[5 * 4];
  for (int r = 0; r < 5; r++) {
    char id[8];
    snprintf(id, sizeof id, "u%d", r);
    cr_assert_eq(o3m_features_fill(f, id, 1, NULL, X + 4 * r, NULL, NULL), 0);
    for (int c = 0; c < 4; c++) cr_assert(isfinite(X[4 * r + c]));
  }
  for (int c = 0; c < 4; c++)
    cr_assert_lt(fabs(X[2 * 4 + c] - X[c] - X[4 + c]), 1e-9 * (1 + fabs(X[2 * 4 + c])),
                 "column %d: W (u0 + u1) = %.12g, W u0 + W u1 = %.12g", c, X[2 * 4 + c],
                 X[c] + X[4 + c]);
  double m[4] = {0}, cv[16] = {0};
  for (int r = 0; r < 5; r++)
    for (int c = 0; c < 4; c++) m[c] += X[4 * r + c] / 5;
  for (int r = 0; r < 5; r++)
    for (int a = 0; a < 4; a++)
      for (int b = 0; b < 4; b++) cv[4 * a + b] += (X[4 * r + a] - m[a]) * (X[4 * r + b] - m[b]) / 5;
  double lam[4];
  cr_assert_eq(o3m_syevd(4, cv, lam), 0);
  for (int k = 0; k < 4; k++)
    cr_assert(fabs(lam[k]) < 1e-8 || fabs(lam[k] - 1) < 1e-8, "eigenvalue %d = %.12g", k, lam[k]);
  cr_assert_eq(o3m_features_check_norm(f, 1e4, &e), 0, "%s", o3m_err_message(&e));
  o3m_features_destroy(f);
  load_ok(&f, u, NULL, 4);
  cr_assert_eq(o3m_features_check_norm(f, 1e4, &e), 0, "%s", o3m_err_message(&e));
  cr_assert_eq(o3m_features_whiten(f, &e), O3M_ESTATE);
  cr_assert(strstr(e.msg, "before o3m_features_check_norm"), "%s", e.msg);
  o3m_features_destroy(f);

  /* A column that barely varies around a large value: its raw rows fit a
   * bound of 2000, its whitened rows (values about mean / spread) do not. */
  const char *t = write_tmp("flat.csv",
                            "user_id,a\nu0,1000.001\nu1,999.999\nu2,1000.002\nu3,999.998\n");
  load_ok(&f, t, NULL, 1);
  cr_assert_eq(o3m_features_check_norm(f, 2000, &e), 0);
  o3m_features_destroy(f);
  load_ok(&f, t, NULL, 1);
  cr_assert_eq(o3m_features_whiten(f, &e), 0, "%s", o3m_err_message(&e));
  cr_assert_eq(o3m_features_check_norm(f, 2000, &e), O3M_ERANGE);
  o3m_features_destroy(f);
}

Test(features, single_table_and_argument_checks) {
  o3m_features *f;
  load_ok(&f, USERS, NULL, 3);
  double X[2 * 3];
  int uu, ui = -1;
  /* No item table: item ids are not needed. */
  cr_assert_eq(o3m_features_fill(f, "u2", 2, NULL, X, &uu, &ui), O3M_OK);
  cr_assert_eq(X[3], -1.0);
  cr_assert_eq(X[5], 7.0);
  cr_assert_eq(ui, 0);
  cr_assert_eq(o3m_features_fill(f, NULL, 2, NULL, X, &uu, &ui), O3M_EINVAL);
  cr_assert_eq(o3m_features_fill(f, "u2", 0, NULL, X, &uu, &ui), O3M_EINVAL);
  cr_assert_eq(o3m_features_fill(f, "u2", 1, NULL, NULL, &uu, &ui), O3M_EINVAL);
  o3m_features_stats st;
  o3m_features_stats_get(f, &st);
  cr_assert_eq(st.lookups, 1, "failed calls must not count");
  o3m_features_destroy(f);

  load_ok(&f, NULL, ITEMS, 2);
  const char *items[] = {"i1", NULL};
  cr_assert_eq(o3m_features_fill(f, NULL, 1, items, X, &uu, &ui), O3M_OK);
  cr_assert_eq(uu, 0, "no user table: the user is never unknown");
  cr_assert_eq(X[0], 20.5);
  X[0] = 99;
  cr_assert_eq(o3m_features_fill(f, NULL, 2, items, X, &uu, &ui), O3M_EINVAL);
  cr_assert_eq(X[0], 99.0, "X untouched on EINVAL");
  cr_assert_eq(o3m_features_fill(f, NULL, 1, NULL, X, &uu, &ui), O3M_EINVAL);
  o3m_features_destroy(f);

  o3m_err e;
  f = (o3m_features *)0x1;
  cr_assert_eq(o3m_features_load(&f, NULL, NULL, 3, &e), O3M_EINVAL);
  cr_assert_null(f);
  cr_assert_eq(o3m_features_load(&f, USERS, NULL, 0, &e), O3M_EINVAL);
  cr_assert_eq(o3m_features_load(&f, "/nonexistent.csv", NULL, 3, &e), O3M_EIO);
  cr_assert(strstr(e.msg, "/nonexistent.csv"), "%s", e.msg);
}

Test(features, dims_mismatch_is_rejected) {
  o3m_features *f = (o3m_features *)0x1;
  o3m_err e;
  cr_assert_eq(o3m_features_load(&f, USERS, ITEMS, 6, &e), O3M_EDIM);
  cr_assert_null(f);
  cr_assert(strstr(e.msg, "= 5") && strstr(e.msg, "dims are 6"), "%s", e.msg);
  cr_assert_eq(o3m_features_load(&f, USERS, NULL, 5, &e), O3M_EDIM);
  cr_assert_eq(o3m_features_load(&f, USERS, ITEMS, 4, &e), O3M_EDIM);
}

/* Loads text as a user table expecting O3M_EPARSE with "name:line:" and the
 * needle in the message, and without the forbidden text (a raw field). */
static void expect_bad(const char *text, int line, const char *needle,
                       const char *forbidden) {
  const char *path = write_tmp("bad.csv", text);
  o3m_features *f = (o3m_features *)0x1;
  o3m_err e;
  int rc = o3m_features_load(&f, path, NULL, 2, &e);
  cr_assert_eq(rc, O3M_EPARSE, "rc %s (%s) for:\n%s", o3m_errname(rc),
               o3m_err_message(&e), text);
  cr_assert_null(f);
  char where[600];
  snprintf(where, sizeof where, "bad.csv:%d: ", line);
  cr_assert(strstr(e.msg, where), "message '%s' lacks '%s'", e.msg, where);
  if (needle) cr_assert(strstr(e.msg, needle), "message '%s' lacks '%s'", e.msg, needle);
  if (forbidden)
    cr_assert_null(strstr(e.msg, forbidden), "message '%s' quotes raw '%s'",
                   e.msg, forbidden);
}

Test(features, malformed_tables_name_the_line) {
  const char *H = "user_id,a,b\n";
  char t[512];
#define ROWS(s) (snprintf(t, sizeof t, "%s%s", H, s), t)
  expect_bad(ROWS("u0,1,2\nu1,3\n"), 3, "expected 3 fields, got 2", NULL);
  expect_bad(ROWS("u0,1,2\nu1,3,4,5\n"), 3, "expected 3 fields, got 4", NULL);
  expect_bad(ROWS("u0,1,\n"), 2, "column 'b'", NULL);
  expect_bad(ROWS("u0,,2\n"), 2, "empty", NULL);
  expect_bad(ROWS(",1,2\n"), 2, "id", NULL);
  expect_bad(ROWS("u0,1,2\nu1,3.25x,4\n"), 3, "not a decimal number", "3.25x");
  expect_bad(ROWS("u0,abc,2\n"), 2, "column 'a'", "abc");
  expect_bad(ROWS("u0,\" 1\",2\n"), 2, "column 'a'", NULL);
  expect_bad(ROWS("u0,1,\"\"\n"), 2, "field 3 (column 'b') is empty", NULL);
  expect_bad(ROWS("u0,0x1p3,2\n"), 2, "column 'a'", NULL);
  expect_bad(ROWS("u0,1,nan\n"), 2, "not finite", "nan");
  expect_bad(ROWS("u0,1,-inf\n"), 2, "not finite", NULL);
  expect_bad(ROWS("u0,1,Infinity\n"), 2, "not finite", NULL);
  expect_bad(ROWS("u0,1,1e999\n"), 2, "not finite", "1e999");
  expect_bad(ROWS("u0,1,2\nu1,3,4\nu0,5,6\n"), 4,
             "duplicate id 'u0' (first at data row 1)", NULL);
  expect_bad(ROWS("u0,1,2\n\"u0\",3,4\n"), 3, "duplicate id 'u0'", NULL);
  expect_bad(ROWS("u0,1,2\nu1,\"3,4\n"), 3, "unterminated quoted field", NULL);
  expect_bad(H, 2, "no data rows", NULL);
  expect_bad("", 1, "missing header", NULL);
  expect_bad("item_id,a,b\ni0,1,2\n", 1, "'user_id'", NULL);
  expect_bad("user_id\nu0\n", 1, "no feature columns", NULL);
  expect_bad("user_id,a,\nu0,1,2\n", 1, "empty", NULL);
  expect_bad("user_id,a,a\nu0,1,2\n", 1, "'a' repeated", NULL);
  char longid[200];
  memset(longid, 'x', 129);
  longid[129] = '\0';
  char row[300];
  snprintf(row, sizeof row, "%s,1,2\n", longid);
  expect_bad(ROWS(row), 2, "129 bytes", NULL);
#undef ROWS

  /* A NUL byte in a row. */
  const char nul[] = "user_id,a,b\nu0,1,2\nu1,3\0,4\n";
  char path[600];
  snprintf(path, sizeof path, "%s/nul.csv", tmpdir);
  FILE *fp = fopen(path, "wb");
  fwrite(nul, 1, sizeof nul - 1, fp);
  fclose(fp);
  o3m_features *f;
  o3m_err e;
  cr_assert_eq(o3m_features_load(&f, path, NULL, 2, &e), O3M_EPARSE);
  cr_assert(strstr(e.msg, "nul.csv:3: NUL"), "%s", e.msg);

  /* CSV syntax errors name the line and the column of the offending byte
   * (after a byte order mark, which counts). */
  const char *q1 = write_tmp("quote.csv", "user_id,a,b\nu0,1,2\nu1,3\"x,4\n");
  cr_assert_eq(o3m_features_load(&f, q1, NULL, 2, &e), O3M_EPARSE);
  cr_assert(strstr(e.msg, "quote.csv:3:5: malformed CSV quoting"), "%s", e.msg);
  const char *q2 = write_tmp("quote2.csv", "\xEF\xBB\xBFuser_id,\"a\"b,c\nu0,1,2\n");
  cr_assert_eq(o3m_features_load(&f, q2, NULL, 2, &e), O3M_EPARSE);
  cr_assert(strstr(e.msg, "quote2.csv:1:15: malformed CSV quoting"), "%s", e.msg);

  /* An error in the item table names the item file. */
  const char *items = write_tmp("items.csv", "item_id,p\ni0,1\ni1,oops\n");
  cr_assert_eq(o3m_features_load(&f, USERS, items, 4, &e), O3M_EPARSE);
  cr_assert(strstr(e.msg, "items.csv:3: "), "%s", e.msg);
  cr_assert(!strstr(e.msg, "oops"), "%s", e.msg);
}

Test(features, lenient_where_documented) {
  /* CRLF, no final newline, exponents, signs, ids with inner spaces, a
   * quoted id (the quotes are CSV syntax, not part of the id). */
  const char *p = write_tmp("ok.csv",
                            "user_id,a,b\r\nu 0,+1e2,-.5\r\n\"q\",3,4");
  o3m_features *f;
  load_ok(&f, p, NULL, 2);
  double X[2];
  int uu;
  cr_assert_eq(o3m_features_fill(f, "u 0", 1, NULL, X, &uu, NULL), O3M_OK);
  cr_assert_eq(uu, 0);
  cr_assert_eq(X[0], 100.0);
  cr_assert_eq(X[1], -0.5);
  cr_assert_eq(o3m_features_fill(f, "q", 1, NULL, X, &uu, NULL), O3M_OK);
  cr_assert_eq(uu, 0);
  cr_assert_eq(X[1], 4.0);
  o3m_features_destroy(f);
}

/* What pandas (to_csv with quoting=csv.QUOTE_ALL or QUOTE_NONNUMERIC) and
 * spreadsheets export: a UTF-8 byte order mark, CRLF, quoted names, ids and
 * numbers, spaces after commas, blank lines, a comma and doubled quotes
 * inside a quoted id. Regression test (such files were once
 * refused). */
Test(features, pandas_and_spreadsheet_exports_are_accepted) {
  const char *p = write_tmp("pandas.csv",
                            "\xEF\xBB\xBF\"user_id\",\"a\",\"b\"\r\n"
                            "\"u,0\", 1.5, \"2\"\r\n"
                            "u1 ,  -3 ,\t4e1\r\n"
                            "\r\n"
                            "\"u \"\"2\"\"\",5,6\r\n"
                            "\n");
  o3m_features *f;
  load_ok(&f, p, NULL, 2);
  cr_assert_eq(o3m_features_n_users(f), 3);
  /* Ids and names as read (what o3m-eval audit lists), quotes removed. */
  cr_assert_str_eq(o3m_features_row_id(f, O3M_FEATURES_USERS, 0), "u,0");
  cr_assert_str_eq(o3m_features_row_id(f, O3M_FEATURES_USERS, 2), "u \"2\"");
  cr_assert_null(o3m_features_row_id(f, O3M_FEATURES_USERS, 3));
  cr_assert_null(o3m_features_row_id(f, O3M_FEATURES_ITEMS, 0));
  cr_assert_str_eq(o3m_features_column(f, O3M_FEATURES_USERS, 0), "a");
  cr_assert_str_eq(o3m_features_column(f, O3M_FEATURES_USERS, 1), "b");
  cr_assert_null(o3m_features_column(f, O3M_FEATURES_USERS, 2));
  double X[2];
  int uu;
  cr_assert_eq(o3m_features_fill(f, "u,0", 1, NULL, X, &uu, NULL), O3M_OK);
  cr_assert_eq(uu, 0, "the quoted id 'u,0' is not found");
  cr_assert_eq(X[0], 1.5);
  cr_assert_eq(X[1], 2.0);
  cr_assert_eq(o3m_features_fill(f, "u1", 1, NULL, X, &uu, NULL), O3M_OK);
  cr_assert_eq(uu, 0, "'u1 ' is not trimmed");
  cr_assert_eq(X[0], -3.0);
  cr_assert_eq(X[1], 40.0);
  cr_assert_eq(o3m_features_fill(f, "u \"2\"", 1, NULL, X, &uu, NULL), O3M_OK);
  cr_assert_eq(uu, 0);
  cr_assert_eq(X[1], 6.0);
  o3m_features_destroy(f);

  /* An error in such a file still names the line the row begins on (5:
   * after the BOM, the blank line 4 counts) and the column by name. */
  const char *bad = write_tmp("pandas_bad.csv",
                              "\xEF\xBB\xBF\"user_id\",\"a\",\"b\"\r\n"
                              "\"u0\", 1.5, \"2\"\r\n"
                              "\"u1\", 1.5, \"2\"\r\n"
                              "\r\n"
                              "\"u2\", \"x1\", 2\r\n");
  o3m_err e;
  cr_assert_eq(o3m_features_load(&f, bad, NULL, 2, &e), O3M_EPARSE);
  cr_assert(strstr(e.msg, "pandas_bad.csv:5: field 2 (column 'a') is not a decimal number"), "%s",
            e.msg);
  /* A quoted field spanning lines is reported at the line its row begins. */
  const char *span = write_tmp("span.csv", "user_id,a,b\n\"u\n0\",1,zz\n");
  cr_assert_eq(o3m_features_load(&f, span, NULL, 2, &e), O3M_EPARSE);
  cr_assert(strstr(e.msg, "span.csv:2: field 3 (column 'b')"), "%s", e.msg);
}

/* Reads row r of a synthetic table back from its text with strtod. */
static void read_rows(const char *path, int n_rows, int n_cols, double *vals) {
  FILE *fp = fopen(path, "r");
  cr_assert_not_null(fp);
  char *line = NULL;
  size_t cap = 0;
  cr_assert_gt(getline(&line, &cap, fp), 0);
  for (int r = 0; r < n_rows; r++) {
    cr_assert_gt(getline(&line, &cap, fp), 0);
    char want_id[32];
    snprintf(want_id, sizeof want_id, "u%d,", r);
    cr_assert(strncmp(line, want_id, strlen(want_id)) == 0, "row %d: %s", r, line);
    char *p = strchr(line, ',');
    for (int c = 0; c < n_cols; c++) {
      vals[(size_t)r * n_cols + c] = strtod(p + 1, &p);
    }
  }
  cr_assert_eq(getline(&line, &cap, fp), -1);
  free(line);
  fclose(fp);
}

Test(features, ten_thousand_rows_load_and_look_up, .timeout = 60) {
  enum { N = 10000, C = 8 };
  char path[600];
  snprintf(path, sizeof path, "%s/big.csv", tmpdir);
  o3m_err e;
  cr_assert_eq(eval_tables_write_synthetic(path, O3M_FEATURES_USERS, "u", N, C, 7, &e),
               O3M_OK, "%s", e.msg);
  double *vals = malloc(sizeof(double) * N * C);
  read_rows(path, N, C, vals);

  o3m_features *f;
  load_ok(&f, path, NULL, C);
  dummy_key(f, 1);
  cr_assert_eq(o3m_features_n_users(f), N);
  double X[C], mean[C] = {0};
  char id[32];
  for (int r = 0; r < N; r++) {
    snprintf(id, sizeof id, "u%d", r);
    int uu = -1;
    cr_assert_eq(o3m_features_fill(f, id, 1, NULL, X, &uu, NULL), O3M_OK);
    cr_assert_eq(uu, 0, "row %d unknown", r);
    for (int c = 0; c < C; c++) {
      cr_assert(X[c] == vals[(size_t)r * C + c], "row %d col %d: %.17g != %.17g",
                r, c, X[c], vals[(size_t)r * C + c]);
      mean[c] += vals[(size_t)r * C + c];
    }
  }
  int uu = -1;
  cr_assert_eq(o3m_features_fill(f, "u10000", 1, NULL, X, &uu, NULL), O3M_OK);
  cr_assert_eq(uu, 1);
  for (int c = 0; c < C; c++) {
    cr_assert(isfinite(X[c]));
    cr_assert_neq(X[c], mean[c] / N, "col %d: the dummy is the column mean", c);
  }

  /* Standard normal draws: sample moments over 80,000 values. */
  double s1 = 0, s2 = 0;
  for (int i = 0; i < N * C; i++) {
    s1 += vals[i];
    s2 += vals[i] * vals[i];
  }
  s1 /= N * C;
  s2 = s2 / (N * C) - s1 * s1;
  cr_assert_lt(fabs(s1), 0.02, "mean %g", s1);
  cr_assert_lt(fabs(s2 - 1.0), 0.03, "variance %g", s2);
  o3m_features_stats st;
  o3m_features_stats_get(f, &st);
  cr_assert_eq(st.lookups, N + 1);
  cr_assert_eq(st.unknown_users, 1);
  free(vals);
  o3m_features_destroy(f);
}

Test(features, synthetic_is_deterministic_and_checks_arguments) {
  char a[600], b[600], c[600];
  snprintf(a, sizeof a, "%s/a.csv", tmpdir);
  snprintf(b, sizeof b, "%s/b.csv", tmpdir);
  snprintf(c, sizeof c, "%s/c.csv", tmpdir);
  o3m_err e;
  cr_assert_eq(eval_tables_write_synthetic(a, O3M_FEATURES_ITEMS, "item", 50, 3, 9, &e), 0);
  cr_assert_eq(eval_tables_write_synthetic(b, O3M_FEATURES_ITEMS, "item", 50, 3, 9, &e), 0);
  cr_assert_eq(eval_tables_write_synthetic(c, O3M_FEATURES_ITEMS, "item", 50, 3, 10, &e), 0);
  char ta[8192], tb[8192], tc[8192];
  FILE *fa = fopen(a, "r"), *fb = fopen(b, "r"), *fc = fopen(c, "r");
  size_t na = fread(ta, 1, sizeof ta, fa), nb = fread(tb, 1, sizeof tb, fb),
         nc = fread(tc, 1, sizeof tc, fc);
  fclose(fa);
  fclose(fb);
  fclose(fc);
  cr_assert_eq(na, nb);
  cr_assert(memcmp(ta, tb, na) == 0, "same seed, different files");
  cr_assert(na != nc || memcmp(ta, tc, na) != 0, "different seeds, same file");
  cr_assert(strncmp(ta, "item_id,x0,x1,x2\nitem0,", 23) == 0, "%.40s", ta);

  /* An item table loads as one. */
  o3m_features *f;
  load_ok(&f, NULL, a, 3);
  cr_assert_eq(o3m_features_n_items(f), 50);
  o3m_features_destroy(f);

  cr_assert_eq(eval_tables_write_synthetic(a, O3M_FEATURES_USERS, "u,", 5, 3, 1, &e),
               O3M_EINVAL);
  cr_assert_eq(eval_tables_write_synthetic(a, O3M_FEATURES_USERS, "u", 0, 3, 1, &e),
               O3M_EINVAL);
  cr_assert_eq(eval_tables_write_synthetic(a, O3M_FEATURES_USERS, "u", 5, 0, 1, &e),
               O3M_EINVAL);
  cr_assert_eq(eval_tables_write_synthetic("/nonexistent/x.csv", O3M_FEATURES_USERS,
                                           "u", 5, 3, 1, &e),
               O3M_EIO);
}

/* Several threads fill at once; the atomic counters must add up exactly. */
typedef struct worker {
  o3m_features *f;
  int id;
  int bad;
} worker;

static void *work(void *arg) {
  worker *w = arg;
  const char *items[] = {"i0", "zz", "i1"};
  double X[3 * 5];
  for (int it = 0; it < 20000; it++) {
    const char *user = (it % 4 == 0) ? "ghost" : (it % 2 ? "u1" : "u2");
    int uu, ui;
    if (o3m_features_fill(w->f, user, 3, items, X, &uu, &ui) != O3M_OK) w->bad++;
    if (X[3] != 10.0 || X[13] != 20.5) w->bad++;
  }
  return NULL;
}

Test(features, concurrent_fills_count_exactly, .timeout = 60) {
  o3m_features *f;
  load_ok(&f, USERS, ITEMS, 5);
  enum { T = 4 };
  pthread_t th[T];
  worker w[T];
  for (int i = 0; i < T; i++) {
    w[i] = (worker){f, i, 0};
    cr_assert_eq(pthread_create(&th[i], NULL, work, &w[i]), 0);
  }
  for (int i = 0; i < T; i++) {
    pthread_join(th[i], NULL);
    cr_assert_eq(w[i].bad, 0);
  }
  o3m_features_stats st;
  o3m_features_stats_get(f, &st);
  cr_assert_eq(st.lookups, (uint64_t)T * 20000);
  cr_assert_eq(st.item_lookups, (uint64_t)T * 20000 * 3);
  cr_assert_eq(st.unknown_users, (uint64_t)T * 5000);
  cr_assert_eq(st.unknown_items, (uint64_t)T * 20000);
  o3m_features_destroy(f);
}

/* The party's norm bound: the worst block pairs the largest user
 * row with the largest item row; above the bound the load is refused with
 * the file and line of the larger row, never a value; and dummy rows stay
 * inside the bound, however tight. */
Test(features, norm_bound_names_file_and_line_and_holds_for_dummies) {
  /* Users: u2 (line 4) has norm 5; items: i1 (line 3) has norm 2. The
   * worst block has norm sqrt(29) = 5.385. */
  const char *u = write_tmp("bu.csv", "user_id,a,b\nu0,1,0\nu1,0,1\nu2,3,4\nu3,-1,1\n");
  const char *i = write_tmp("bi.csv", "item_id,c\ni0,0.5\ni1,-2\n");
  o3m_features *f;
  load_ok(&f, u, i, 3);
  dummy_key(f, 1);
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert_eq(o3m_features_check_norm(f, 5.3, &e), O3M_ERANGE);
  cr_assert(strstr(e.msg, "bu.csv:4:"), "%s", e.msg);
  cr_assert(strstr(e.msg, "'u2'"), "%s", e.msg);
  cr_assert(strstr(e.msg, "bi.csv (line 3)"), "%s", e.msg);
  cr_assert(strstr(e.msg, "max_norm = 5.3"), "%s", e.msg);
  cr_assert_null(strstr(e.msg, "5.385"), "%s", e.msg);
  cr_assert_eq(o3m_features_check_norm(f, 0, &e), O3M_EINVAL);
  /* Just above the worst block: accepted, and every dummy block (unknown
   * user, unknown item, or both) stays inside. */
  const double bound = 5.3852;
  cr_assert_eq(o3m_features_check_norm(f, bound, &e), O3M_OK, "%s", o3m_err_message(&e));
  double X[2 * 3];
  char uid[32], iid[32];
  for (int k = 0; k < 2000; k++) {
    snprintf(uid, sizeof uid, "stranger-%d", k);
    snprintf(iid, sizeof iid, "thing-%d", k);
    const char *items[2] = {iid, "i1"};
    cr_assert_eq(o3m_features_fill(f, k % 2 ? uid : "u2", 2, items, X, NULL, NULL), O3M_OK);
    for (int r = 0; r < 2; r++) {
      double s = X[3 * r] * X[3 * r] + X[3 * r + 1] * X[3 * r + 1] + X[3 * r + 2] * X[3 * r + 2];
      cr_assert_leq(sqrt(s), bound, "id %d row %d: norm %.6g", k, r, sqrt(s));
    }
  }
  o3m_features_destroy(f);
  /* One table alone: the message names its row. */
  load_ok(&f, u, NULL, 2);
  cr_assert_eq(o3m_features_check_norm(f, 4.9, &e), O3M_ERANGE);
  cr_assert(strstr(e.msg, "bu.csv:4: the row of 'u2' has an l2 norm above max_norm = 4.9"),
            "%s", e.msg);
  o3m_features_destroy(f);
}

/* A dummy drawn above its table's share of the bound was once
 * redrawn from the id's stream (up to 32 times, then the means), so an
 * unknown id's lookup took a time that depended on the id. Now every dummy
 * is one draw, and one above the bound is scaled radially onto it: the
 * tight-bound dummy is the loose-bound dummy times a factor below 1, with
 * its norm at the bound, and a dummy inside the bound is unchanged bit for
 * bit. */
Test(features, regression_dummy_above_the_bound_is_scaled_not_redrawn) {
  const char *u = write_tmp("su.csv", "user_id,a,b\nu0,1,0\nu1,0,1\nu2,3,4\nu3,-1,1\n");
  o3m_features *loose, *tight;
  load_ok(&loose, u, NULL, 2);
  load_ok(&tight, u, NULL, 2);
  dummy_key(loose, 4);
  dummy_key(tight, 4);
  o3m_err e;
  /* The largest row has norm 5: with one table its dummies get the share
   * 25 + (B^2 - 25) / 2 = 25.0005 of B^2 = 25.001. */
  cr_assert_eq(o3m_features_check_norm(tight, sqrt(25.001), &e), O3M_OK, "%s",
               o3m_err_message(&e));
  const double share = 25.0005;
  int scaled = 0, kept = 0;
  char id[32];
  for (int k = 0; k < 400; k++) {
    snprintf(id, sizeof id, "stranger-%d", k);
    double a[2], b[2];
    cr_assert_eq(o3m_features_fill(loose, id, 1, NULL, a, NULL, NULL), O3M_OK);
    cr_assert_eq(o3m_features_fill(tight, id, 1, NULL, b, NULL, NULL), O3M_OK);
    double na = a[0] * a[0] + a[1] * a[1], nb = b[0] * b[0] + b[1] * b[1];
    cr_assert_leq(nb, share, "%s: squared norm %.17g above the share", id, nb);
    if (na <= share) {
      kept++;
      cr_assert(a[0] == b[0] && a[1] == b[1], "%s: a dummy inside the bound changed", id);
    } else {
      scaled++;
      double c = sqrt(nb / na);
      cr_assert_lt(c, 1.0, "%s", id);
      cr_assert_gt(nb, share * (1 - 1e-8), "%s: scaled to %.17g, not onto the bound", id, nb);
      for (int i = 0; i < 2; i++)
        cr_assert_lt(fabs(b[i] - c * a[i]), 1e-12 * (1 + fabs(a[i])),
                     "%s col %d: %.17g is not %.17g x %.17g (a redraw?)", id, i, b[i], c, a[i]);
    }
  }
  cr_assert_gt(scaled, 10, "only %d of 400 dummies were above the bound", scaled);
  cr_assert_gt(kept, 10, "only %d of 400 dummies were inside the bound", kept);
  o3m_features_destroy(loose);
  o3m_features_destroy(tight);
}

/* The epochs the active participant keys its item cache on:
 * nonzero, equal for equal content (a reload of the same files keeps
 * them), different when one value, one id or one column name changes, each
 * table's on its own, and changed by whitening, whose values are those a
 * party masks. */
Test(features, epochs_follow_the_content_of_each_table) {
  /* write_tmp's paths are reused: keep copies. */
  char u[512], i[512];
  snprintf(u, sizeof u, "%s", write_tmp("eu.csv", "user_id,a,b\nu0,1,2\nu1,3,4\n"));
  snprintf(i, sizeof i, "%s", write_tmp("ei.csv", "item_id,c\ni0,5\ni1,6\n"));
  o3m_features *f, *g;
  load_ok(&f, u, i, 3);
  load_ok(&g, u, i, 3);
  uint64_t fu = o3m_features_epoch(f, O3M_FEATURES_USERS);
  uint64_t fi = o3m_features_epoch(f, O3M_FEATURES_ITEMS);
  cr_assert_neq(fu, 0);
  cr_assert_neq(fi, 0);
  cr_assert_neq(fu, fi);
  cr_assert_eq(o3m_features_epoch(g, O3M_FEATURES_USERS), fu, "same files, same epoch");
  cr_assert_eq(o3m_features_epoch(g, O3M_FEATURES_ITEMS), fi);
  o3m_features_destroy(g);

  const char *variants[] = {"item_id,c\ni0,5\ni1,6.5\n", "item_id,c\ni0,5\ni2,6\n",
                            "item_id,z\ni0,5\ni1,6\n", "item_id,c\ni0,5\ni1,6\ni2,7\n"};
  for (int v = 0; v < 4; v++) {
    const char *i2 = write_tmp("ei2.csv", variants[v]);
    load_ok(&g, u, i2, 3);
    cr_assert_neq(o3m_features_epoch(g, O3M_FEATURES_ITEMS), fi, "variant %d", v);
    cr_assert_eq(o3m_features_epoch(g, O3M_FEATURES_USERS), fu, "variant %d", v);
    o3m_features_destroy(g);
  }
  /* A party with only user columns still names a nonzero item epoch. */
  load_ok(&g, u, NULL, 2);
  cr_assert_neq(o3m_features_epoch(g, O3M_FEATURES_ITEMS), 0);
  cr_assert_eq(o3m_features_epoch(g, O3M_FEATURES_USERS), fu);
  o3m_features_destroy(g);

  o3m_err e;
  cr_assert_eq(o3m_features_whiten(f, &e), O3M_OK, "%s", o3m_err_message(&e));
  cr_assert_neq(o3m_features_epoch(f, O3M_FEATURES_ITEMS), fi, "whitened values, new epoch");
  cr_assert_neq(o3m_features_epoch(f, O3M_FEATURES_USERS), fu);
  o3m_features_destroy(f);
}

/* The epoch as o3m-passive sent it up to this change: the unkeyed
 * BLAKE2b-64 of a table that is present, computed here from the table's
 * content alone, as anyone who guesses the table can. */
static uint64_t unkeyed_epoch(o3m_features_kind kind, int n_rows, int n_cols,
                              const char *const *cols, const char *const *ids,
                              const double *vals) {
  crypto_generichash_state h;
  unsigned char out[8];
  uint32_t hdr[3] = {(uint32_t)kind, (uint32_t)n_rows, (uint32_t)n_cols};
  crypto_generichash_init(&h, NULL, 0, sizeof out);
  crypto_generichash_update(&h, (const unsigned char *)"o3m-features-epoch-v1", 21);
  crypto_generichash_update(&h, (const unsigned char *)hdr, sizeof hdr);
  for (int c = 0; c < n_cols; c++)
    crypto_generichash_update(&h, (const unsigned char *)cols[c], strlen(cols[c]) + 1);
  for (int r = 0; r < n_rows; r++)
    crypto_generichash_update(&h, (const unsigned char *)ids[r], strlen(ids[r]) + 1);
  crypto_generichash_update(&h, (const unsigned char *)vals,
                            sizeof *vals * (size_t)n_rows * (size_t)n_cols);
  crypto_generichash_final(&h, out, sizeof out);
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)out[i] << (8 * i);
  return v ? v : 1;
}

/* The epochs a passive party sends once its key is set (the PP sets it
 * before it answers any batch, and on the tables of every reload): keyed,
 * so that the AP cannot confirm a guess of a low-entropy table by hashing
 * it; still equal for the same content and key (a restart with the key in
 * state_dir keeps them), different for a changed table, and different for
 * two parties with the same table and their own keys. The dummy rows stay
 * those of the key. */
Test(features, epochs_are_keyed_with_the_party_key) {
  char u[512], i[512];
  snprintf(u, sizeof u, "%s", write_tmp("ku.csv", "user_id,a\nu0,0\nu1,1\n"));
  snprintf(i, sizeof i, "%s", write_tmp("ki.csv", "item_id,c,d\ni0,1,0\ni1,0,1\n"));
  unsigned char ka[O3M_FEATURES_KEY_BYTES], kb[O3M_FEATURES_KEY_BYTES];
  for (int b = 0; b < O3M_FEATURES_KEY_BYTES; b++) ka[b] = (unsigned char)(b + 1), kb[b] = (unsigned char)(200 - b);
  o3m_features *f, *g, *h;
  load_ok(&f, u, i, 3);
  load_ok(&g, u, i, 3);
  load_ok(&h, u, i, 3);
  /* A guess of both whole tables, hashed as the old epochs were. */
  const char *ucols[] = {"a"}, *uids[] = {"u0", "u1"}, *icols[] = {"c", "d"},
             *iids[] = {"i0", "i1"};
  const double uvals[] = {0, 1}, ivals[] = {1, 0, 0, 1};
  const uint64_t gu = unkeyed_epoch(O3M_FEATURES_USERS, 2, 1, ucols, uids, uvals);
  const uint64_t gi = unkeyed_epoch(O3M_FEATURES_ITEMS, 2, 2, icols, iids, ivals);
  cr_assert_eq(o3m_features_epoch(f, O3M_FEATURES_ITEMS), gi,
               "without a key the epoch is the unkeyed hash (the guess is computed right)");
  double dummy_before[3], dummy_after[3];
  o3m_features_set_dummy_key(f, ka);
  cr_assert_eq(o3m_features_fill(f, "nobody", 1, (const char *const[]){"none"}, dummy_before,
                                 NULL, NULL), O3M_OK);
  o3m_features_set_dummy_key(g, ka);
  o3m_features_set_dummy_key(h, kb);
  const uint64_t fu = o3m_features_epoch(f, O3M_FEATURES_USERS);
  const uint64_t fi = o3m_features_epoch(f, O3M_FEATURES_ITEMS);
  cr_assert_neq(fu, gu, "the user epoch a party sends is the unkeyed hash of its table: the AP "
                        "can confirm a guess of the whole table");
  cr_assert_neq(fi, gi, "the item epoch a party sends is the unkeyed hash of its table: the AP "
                        "can confirm a guess of the whole table");
  cr_assert_neq(fu, 0);
  cr_assert_neq(fi, 0);
  cr_assert_eq(o3m_features_epoch(g, O3M_FEATURES_USERS), fu, "same table and key, same epoch");
  cr_assert_eq(o3m_features_epoch(g, O3M_FEATURES_ITEMS), fi);
  cr_assert_neq(o3m_features_epoch(h, O3M_FEATURES_USERS), fu,
                "two parties with the same table and their own keys have the same epoch");
  cr_assert_neq(o3m_features_epoch(h, O3M_FEATURES_ITEMS), fi);
  /* The dummy rows are the key's, as before epochs were keyed. */
  cr_assert_eq(o3m_features_fill(g, "nobody", 1, (const char *const[]){"none"}, dummy_after,
                                 NULL, NULL), O3M_OK);
  cr_assert_arr_eq(dummy_before, dummy_after, sizeof dummy_before);
  o3m_features_destroy(g);
  o3m_features_destroy(h);

  /* A changed item table under the same key: a new item epoch, the same
   * user epoch. */
  const char *i2 = write_tmp("ki2.csv", "item_id,c,d\ni0,1,0\ni1,1,1\n");
  load_ok(&g, u, i2, 3);
  o3m_features_set_dummy_key(g, ka);
  cr_assert_neq(o3m_features_epoch(g, O3M_FEATURES_ITEMS), fi, "a changed table kept its epoch");
  cr_assert_eq(o3m_features_epoch(g, O3M_FEATURES_USERS), fu);
  o3m_features_destroy(g);

  /* Whitening after the key keeps the epochs keyed, and they follow the
   * whitened values. */
  o3m_err e;
  cr_assert_eq(o3m_features_whiten(f, &e), O3M_OK, "%s", o3m_err_message(&e));
  load_ok(&g, u, i, 3);
  cr_assert_eq(o3m_features_whiten(g, &e), O3M_OK, "%s", o3m_err_message(&e));
  const uint64_t wi_unkeyed = o3m_features_epoch(g, O3M_FEATURES_ITEMS);
  o3m_features_set_dummy_key(g, ka);
  cr_assert_neq(o3m_features_epoch(f, O3M_FEATURES_ITEMS), fi, "whitened values, new epoch");
  cr_assert_neq(o3m_features_epoch(f, O3M_FEATURES_ITEMS), wi_unkeyed,
                "whitening after the key left the epoch unkeyed");
  cr_assert_eq(o3m_features_epoch(f, O3M_FEATURES_ITEMS), o3m_features_epoch(g, O3M_FEATURES_ITEMS),
               "key then whitening, or whitening then key: the same epoch");
  o3m_features_destroy(g);
  o3m_features_destroy(f);
}
