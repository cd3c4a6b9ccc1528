/* test_audit.c -- `o3m-eval audit` (eval_audit.h): the attacks find what
 * the mathematics says they must, and no more.
 *
 * Tables are written into a fresh temporary directory: independent normal
 * columns of distinct standard deviations 1..d_j (PCA recovers each one from
 * the per-party parts), standard normal columns (identity covariance: PCA
 * only finds a random rotation of them) and the bank-like demo table. The
 * dummy-row test states the dummy rows' requirement (the attack on dummy rows
 * does no better than on real traffic); the whitening test, that the
 * defence takes PCA's advantage away. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "eval_audit.h"
#include "eval_audit_factored.h"
#include "eval_cmds.h"
#include "eval_tables.h"
#include "o3m_rng.h"

/* How much better than real traffic the dummy attack may do (mean |corr|). */
#define DUMMY_MARGIN 0.05

static char dir[64];

static void make_dir(void) {
  snprintf(dir, sizeof dir, "/tmp/o3m_audit_XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
}

static void remove_dir(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", dir);
}

/* Writes N x dj normal columns to DIR/name as a table of kind: with
 * distinct, column c has standard deviation c + 1 and mean 10 c; otherwise
 * all are standard normal (identity covariance). */
static void write_normal_kind(const char *name, o3m_features_kind kind, int N, int dj,
                              int distinct, uint64_t seed, char *path, size_t n) {
  snprintf(path, n, "%s/%s", dir, name);
  double *v = malloc(sizeof *v * (size_t)N * dj);
  cr_assert_not_null(v);
  o3m_rng *r = NULL;
  cr_assert_eq(o3m_rng_create_seeded_insecure(&r, seed), O3M_OK);
  o3m_rng_gaussian(r, v, (long)N * dj);
  o3m_rng_destroy(r);
  for (int i = 0; i < N; i++)
    for (int c = 0; c < dj; c++) v[(size_t)i * dj + c] = distinct ? 10.0 * c + (c + 1) * v[(size_t)i * dj + c] : v[(size_t)i * dj + c];
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert_eq(eval_tables_write_matrix(path, kind, kind == O3M_FEATURES_USERS ? "u" : "i", N,
                                        dj, NULL, v, &e),
               O3M_OK, "%s", o3m_err_message(&e));
  free(v);
}

static void write_normal(const char *name, int N, int dj, int distinct, uint64_t seed,
                         char *path, size_t n) {
  write_normal_kind(name, O3M_FEATURES_USERS, N, dj, distinct, seed, path, n);
}

/* whiten: 0 no, 1 whitened and scored on the raw x, 2 scored on W x;
 * items: the audited party's item table or NULL. */
static eval_audit_input *build_ui(const char *dims, int party, const char *users,
                                  const char *items, int bank, int whiten) {
  eval_audit_source s;
  memset(&s, 0, sizeof s);
  cr_assert_eq(o3m_partition_parse(&s.part, dims, NULL), O3M_OK);
  s.party = party;
  s.user_table = users;
  s.item_table = items;
  s.bank = bank;
  s.work_dir = dir;
  s.seed = 3;
  s.whiten = whiten > 0;
  s.score_whitened = whiten == 2;
  eval_audit_input *in = NULL;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert_eq(eval_audit_input_build(&in, &s, &e), O3M_OK, "%s", o3m_err_message(&e));
  return in;
}

static eval_audit_input *build_w(const char *dims, int party, const char *users, int bank,
                                 int whiten) {
  return build_ui(dims, party, users, NULL, bank, whiten);
}

static eval_audit_input *build(const char *dims, int party, const char *users, int bank) {
  return build_w(dims, party, users, bank, 0);
}

static eval_audit *run(const eval_audit_input *in, int modes) {
  eval_audit_config c;
  eval_audit_config_default(&c);
  c.modes = modes;
  c.seed = 5;
  eval_audit *a = NULL;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert_eq(eval_audit_run(&a, in, &c, &e), O3M_OK, "%s", o3m_err_message(&e));
  return a;
}

/* The point of series s at x (n or N); fails the test if there is none. */
static eval_audit_point at(const eval_audit *a, eval_audit_mode m, eval_audit_series s, int x) {
  eval_audit_point p;
  for (int i = 0; i < eval_audit_n_points(a, m, s); i++) {
    cr_assert_eq(eval_audit_point_get(a, m, s, i, &p), O3M_OK);
    if (p.x == x) return p;
  }
  cr_assert_fail("%s/%s has no point at %d", eval_audit_mode_name(m), eval_audit_series_name(s),
                 x);
  return p;
}

static const int PER_PARTY = 1 << EVAL_AUDIT_PER_PARTY;
static const int SECAGG = 1 << EVAL_AUDIT_SECAGG;

Test(audit, known_plaintext_per_party_exact_at_dj_rows_not_at_one, .init = make_dir,
     .fini = remove_dir) {
  char path[256];
  write_normal("t.csv", 500, 6, 1, 11, path, sizeof path);
  eval_audit_input *in = build("4,6,6", 1, path, 0);
  eval_audit *a = run(in, PER_PARTY);
  eval_audit_point full = at(a, EVAL_AUDIT_PER_PARTY, EVAL_AUDIT_KP, 6);
  for (int c = 0; c < 6; c++)
    cr_assert_gt(full.corr[c], 0.999, "column %d: |corr| %.4f with n = d_j", c, full.corr[c]);
  eval_audit_point one = at(a, EVAL_AUDIT_PER_PARTY, EVAL_AUDIT_KP, 1);
  cr_assert_lt(one.mean, 0.7, "n = 1 recovers too much: mean |corr| %.3f", one.mean);
  cr_assert_lt(one.min, 0.5, "n = 1: every column recovered (min %.3f)", one.min);
  /* The parts give the norms and inner products exactly. */
  eval_audit_exposure x;
  cr_assert_eq(eval_audit_exposure_get(a, EVAL_AUDIT_PER_PARTY, &x), O3M_OK);
  cr_assert(x.exact);
  cr_assert_lt(x.norm, 1e-12);
  cr_assert_lt(x.gram, 1e-12);
  eval_audit_destroy(a);
  eval_audit_input_destroy(in);
}

Test(audit, pca_per_party_recovers_distinct_variances_not_identity, .init = make_dir,
     .fini = remove_dir) {
  char p1[256], p2[256];
  write_normal("distinct.csv", 1000, 6, 1, 21, p1, sizeof p1);
  write_normal("identity.csv", 1000, 6, 0, 22, p2, sizeof p2);
  eval_audit_input *in1 = build("4,6,6", 1, p1, 0);
  eval_audit *a1 = run(in1, PER_PARTY);
  eval_audit_point d = at(a1, EVAL_AUDIT_PER_PARTY, EVAL_AUDIT_PCA, 1000);
  for (int c = 0; c < 6; c++)
    cr_assert_gt(d.corr[c], 0.95, "distinct variances, column %d: |corr| %.3f", c, d.corr[c]);
  eval_audit_input *in2 = build("4,6,6", 1, p2, 0);
  eval_audit *a2 = run(in2, PER_PARTY);
  eval_audit_point id = at(a2, EVAL_AUDIT_PER_PARTY, EVAL_AUDIT_PCA, 1000);
  cr_assert_lt(id.mean, 0.8, "identity covariance: PCA mean |corr| %.3f", id.mean);
  cr_assert_lt(id.min, 0.95, "identity covariance: PCA min |corr| %.3f", id.min);
  eval_audit_destroy(a1);
  eval_audit_destroy(a2);
  eval_audit_input_destroy(in1);
  eval_audit_input_destroy(in2);
}

Test(audit, secure_known_plaintext_needs_all_pp_dimensions, .init = make_dir,
     .fini = remove_dir) {
  char path[256];
  /* Columns on the others' scale (standard normal like the synthetic
   * others): a table that dwarfs the others' columns is nearly alone in
   * the sum, and then d_j rows nearly suffice. */
  write_normal("t.csv", 500, 6, 0, 31, path, sizeof path);
  /* D = d - d_0 = 18: the others' 12 columns are unknown to the attacker. */
  eval_audit_input *in = build("4,6,6,6", 2, path, 0);
  eval_audit *a = run(in, SECAGG);
  eval_audit_point own = at(a, EVAL_AUDIT_SECAGG, EVAL_AUDIT_KP, 6);
  cr_assert_lt(own.mean, 0.8, "secagg, n = d_j = 6: mean |corr| %.3f", own.mean);
  cr_assert_lt(own.min, 0.7, "secagg, n = d_j = 6: min |corr| %.3f", own.min);
  /* ... but s is an invertible image of all PPs' columns: n = D suffices. */
  eval_audit_point all = at(a, EVAL_AUDIT_SECAGG, EVAL_AUDIT_KP, 18);
  cr_assert_gt(all.min, 0.999, "secagg, n = D = 18: min |corr| %.4f", all.min);
  eval_audit_point full = at(a, EVAL_AUDIT_SECAGG, EVAL_AUDIT_KP_FULL, 18);
  cr_assert_gt(full.min, 0.999, "secagg, n = D full rows: min |corr| %.4f", full.min);
  /* Per-party modes were not asked for. */
  cr_assert_eq(eval_audit_n_points(a, EVAL_AUDIT_PER_PARTY, EVAL_AUDIT_KP), 0);
  eval_audit_destroy(a);
  eval_audit_input_destroy(in);
}

Test(audit, other_party_table_is_used_and_large_scales_hide_norms, .init = make_dir,
     .fini = remove_dir) {
  char mine[256], theirs[256];
  write_normal("mine.csv", 800, 6, 1, 41, mine, sizeof mine);
  /* The other PP's own table: columns in the thousands. */
  snprintf(theirs, sizeof theirs, "%s/theirs.csv", dir);
  double *v = malloc(sizeof *v * 800 * 6);
  cr_assert_not_null(v);
  o3m_rng *r = NULL;
  cr_assert_eq(o3m_rng_create_seeded_insecure(&r, 42), O3M_OK);
  o3m_rng_gaussian(r, v, 800 * 6);
  o3m_rng_destroy(r);
  for (int i = 0; i < 800 * 6; i++) v[i] *= 1000.0;
  cr_assert_eq(eval_tables_write_matrix(theirs, O3M_FEATURES_USERS, "t", 800, 6, NULL, v, NULL),
               O3M_OK);
  free(v);
  eval_audit_source s;
  memset(&s, 0, sizeof s);
  cr_assert_eq(o3m_partition_parse(&s.part, "4,6,6", NULL), O3M_OK);
  s.party = 1;
  s.user_table = mine;
  s.work_dir = dir;
  s.seed = 3;
  const char *others[3] = {NULL, NULL, theirs};
  eval_audit_input *in[2] = {NULL, NULL};
  for (int t = 0; t < 2; t++) {
    s.other_tables = t ? others : NULL;
    cr_assert_eq(eval_audit_input_build(&in[t], &s, NULL), O3M_OK);
  }
  eval_audit_exposure x[2];
  for (int t = 0; t < 2; t++) {
    eval_audit *a = run(in[t], SECAGG);
    cr_assert_eq(eval_audit_exposure_get(a, EVAL_AUDIT_SECAGG, &x[t]), O3M_OK);
    eval_audit_destroy(a);
    eval_audit_input_destroy(in[t]);
  }
  /* Beside standard normal others the sum's norms follow yours; beside
   * columns in the thousands they do not. */
  cr_assert_gt(x[0].norm, 0.9, "synthetic others: corr of norms %.3f", x[0].norm);
  cr_assert_lt(fabs(x[1].norm), 0.2, "large-scale others: corr of norms %.3f", x[1].norm);
}

/* The whitening defence: on independent columns of
 * distinct spreads PCA of the per-party parts finds every column (the test
 * above); once the party whitens, the parts are isotropic in its subspace
 * and PCA finds only a random rotation, while the truth stays the raw
 * columns. Known plaintext is not hindered (W is invertible). */
Test(audit, whitening_defeats_pca_per_party, .init = make_dir, .fini = remove_dir) {
  char path[256];
  write_normal("distinct.csv", 1000, 6, 1, 21, path, sizeof path);
  eval_audit_input *in[2] = {build_w("4,6,6", 1, path, 0, 0), build_w("4,6,6", 1, path, 0, 1)};
  eval_audit *a[2] = {run(in[0], PER_PARTY), run(in[1], PER_PARTY)};
  /* 500 of the 1000 users: on all of them the whitened parts' sample
   * covariance is the identity to rounding, and the eigenvectors of that
   * degenerate matrix are set by rounding noise (docs/evaluation/audit.md). */
  eval_audit_point raw = at(a[0], EVAL_AUDIT_PER_PARTY, EVAL_AUDIT_PCA, 500);
  eval_audit_point wh = at(a[1], EVAL_AUDIT_PER_PARTY, EVAL_AUDIT_PCA, 500);
  fprintf(stderr, "PCA per party, 6 independent normal columns of sd 1..6, 500 users: mean "
          "|corr| %.3f unwhitened, %.3f whitened\n", raw.mean, wh.mean);
  cr_assert_gt(raw.mean, 0.95, "unwhitened: PCA mean |corr| %.3f", raw.mean);
  /* A random rotation of 6 columns, matched greedily, gives mean |corr|
   * 0.69 on average, above 0.83 in 1% of draws: whitened must look like
   * that, far from the 0.95 and more of the unwhitened columns. */
  cr_assert_lt(wh.mean, 0.85, "whitened: PCA mean |corr| %.3f, unwhitened %.3f", wh.mean,
               raw.mean);
  cr_assert_lt(wh.min, 0.9, "whitened: every column still found (min |corr| %.3f)", wh.min);
  /* The dummies are whitened too: they teach no more than the parts. */
  eval_audit_point dum = at(a[1], EVAL_AUDIT_PER_PARTY, EVAL_AUDIT_DUMMY_PCA, 1000);
  cr_assert_lt(dum.mean, 0.85, "whitened dummies: PCA mean |corr| %.3f", dum.mean);
  eval_audit_point kp = at(a[1], EVAL_AUDIT_PER_PARTY, EVAL_AUDIT_KP, 6);
  cr_assert_gt(kp.min, 0.999, "whitened, n = d_j known rows: min |corr| %.4f", kp.min);
  /* The parts keep ||W x||, not ||x||: no longer exact for the raw norms. */
  eval_audit_exposure x;
  cr_assert_eq(eval_audit_exposure_get(a[1], EVAL_AUDIT_PER_PARTY, &x), O3M_OK);
  cr_assert(!x.exact);
  cr_assert_lt(x.norm, 0.99, "whitened: corr of norms %.3f", x.norm);
  /* Scored on W x, the parts give its norms exactly. */
  eval_audit_input *inw = build_w("4,6,6", 1, path, 0, 2);
  eval_audit *aw = run(inw, PER_PARTY);
  cr_assert_eq(eval_audit_exposure_get(aw, EVAL_AUDIT_PER_PARTY, &x), O3M_OK);
  cr_assert(x.exact);
  cr_assert_lt(x.norm, 1e-12);
  eval_audit_destroy(aw);
  eval_audit_input_destroy(inw);
  /* Through the command line as well, with the shared --plot-format: the
   * plots in the formats asked for, and only those. */
  char out[128], plot[192];
  snprintf(out, sizeof out, "%s/cli", dir);
  char *argv[] = {"audit", "--user-table", path, "--dims", "4,6,6", "--party", "1",
                  "--modes", "per-party", "--whiten", "--plot-format", "svg,pdf", "--out",
                  out, NULL};
  cr_assert_eq(eval_audit_main(14, argv), 0);
  if (system("command -v gnuplot >/dev/null 2>&1") == 0) {
    static const char *want[] = {"per_party_vs_n.svg", "per_party_vs_n.pdf",
                                 "per_party_vs_N.svg", "per_party_vs_N.pdf"};
    for (int i = 0; i < 4; i++) {
      snprintf(plot, sizeof plot, "%s/audit_%s", out, want[i]);
      cr_assert_eq(access(plot, F_OK), 0, "%s missing", plot);
    }
    snprintf(plot, sizeof plot, "%s/audit_per_party_vs_n.png", out);
    cr_assert_neq(access(plot, F_OK), 0, "%s written, PNG was not asked for", plot);
  }
  char *bad[] = {"audit", "--plot-format", "png,gif", NULL};
  cr_assert_eq(eval_audit_main(3, bad), 2, "an unknown plot format is a usage error");
  for (int t = 0; t < 2; t++) {
    eval_audit_destroy(a[t]);
    eval_audit_input_destroy(in[t]);
  }
}

/* Dummy rows drawn as mu + Sigma^{1/2} z from the table's
 * full covariance teach PCA no more than real traffic. (Per-column dummies,
 * N(mean_c, sd_c^2) each, handed the bank's columns over: this test was an
 * expected failure until they were replaced.) */
Test(audit, dummy_rows_teach_no_more_than_real_traffic, .init = make_dir, .fini = remove_dir) {
  eval_audit_input *in = build("10,20,20", 1, NULL, 1);
  eval_audit *a = run(in, PER_PARTY);
  eval_audit_point real = at(a, EVAL_AUDIT_PER_PARTY, EVAL_AUDIT_PCA, 1000);
  eval_audit_point dummy = at(a, EVAL_AUDIT_PER_PARTY, EVAL_AUDIT_DUMMY_PCA, 1000);
  int holds = dummy.mean <= real.mean + DUMMY_MARGIN;
  fprintf(stderr,
          "dummy-row attack on the bank table, per-party mode, PCA of 1000 rows: dummies "
          "mean |corr| %.3f (min %.3f), real traffic %.3f (min %.3f)\n",
          dummy.mean, dummy.min, real.mean, real.min);
  eval_audit_destroy(a);
  eval_audit_input_destroy(in);
  cr_assert(holds, "PCA on dummy rows: mean |corr| %.3f, real traffic %.3f (margin %.2f)",
            dummy.mean, real.mean, DUMMY_MARGIN);
}

Test(audit, refusals, .init = make_dir, .fini = remove_dir) {
  /* A data set that is absent is named. */
  eval_audit_source s;
  memset(&s, 0, sizeof s);
  cr_assert_eq(o3m_partition_parse(&s.part, "5,5", NULL), O3M_OK);
  s.party = 1;
  s.dataset = "news";
  s.data_dir = "/nonexistent/o3m-data";
  s.work_dir = dir;
  eval_audit_input *in = NULL;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert_eq(eval_audit_input_build(&in, &s, &e), O3M_ENOTFOUND);
  cr_assert_null(in);
  cr_assert_not_null(strstr(o3m_err_message(&e), "/nonexistent/o3m-data/news10k/dataset.txt"),
                     "%s", o3m_err_message(&e));
  /* The AP is not audited; the table must have dims[party] columns. */
  s.dataset = NULL;
  s.bank = 1;
  s.party = 0;
  cr_assert_eq(eval_audit_input_build(&in, &s, &e), O3M_EINVAL);
  s.party = 1;
  cr_assert_eq(eval_audit_input_build(&in, &s, &e), O3M_EDIM, "%s", o3m_err_message(&e));
  /* Scoring on W x without whitening means nothing. */
  s.score_whitened = 1;
  cr_assert_eq(eval_audit_input_build(&in, &s, &e), O3M_EINVAL);
  cr_assert_not_null(strstr(o3m_err_message(&e), "--whiten"), "%s", o3m_err_message(&e));
}

/* Factored batches: party 1 holds 6 user and 6 item columns,
 * party 2 three user columns (synthetic, no item table), so under secure
 * aggregation U(u) mixes 9 PP user columns and I(i) is party 1's item half
 * alone. Whole rows are an image of all 15 PP columns: known plaintext is
 * exact at n = D = 15 rows, not at 9. Factored, each half is attacked from
 * its own vectors: exact at n = 9 (the user side's 9 columns; the item side
 * needs 6), and exact with every row known; not with one row. The item
 * half's norms and Gram are exact (it is one party's part alone), which
 * the differenced view (the sums without the split's offset) does not
 * give. */
static eval_audit_input *build_factored(void) {
  char users[256], items[256];
  write_normal_kind("fu.csv", O3M_FEATURES_USERS, 300, 6, 0, 41, users, sizeof users);
  write_normal_kind("fi.csv", O3M_FEATURES_ITEMS, 300, 6, 0, 42, items, sizeof items);
  return build_ui("4,12,3", 1, users, items, 0, 0);
}

/* The whole rows' audit of in (modes, known_max 0: the grid) into *a, and
 * the factored one. */
static eval_audit_factored *run_factored(const eval_audit_input *in, int modes, int known_max,
                                         eval_audit **a) {
  eval_audit_config c;
  eval_audit_config_default(&c);
  c.modes = modes;
  c.seed = 5;
  c.known_max = known_max;
  eval_audit_factored *f = NULL;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert_eq(eval_audit_run(a, in, &c, &e), O3M_OK, "%s", o3m_err_message(&e));
  cr_assert_eq(eval_audit_factored_run(&f, in, *a, &c, &e), O3M_OK, "%s", o3m_err_message(&e));
  return f;
}

Test(audit, factored_known_plaintext_exact_at_each_halfs_columns, .init = make_dir,
     .fini = remove_dir) {
  eval_audit_input *in = build_factored();
  eval_audit *a = NULL;
  eval_audit_factored *f = run_factored(in, SECAGG, 300 /* every row */, &a);
  cr_assert_eq(eval_audit_factored_columns(f, 0, 0), 6);
  cr_assert_eq(eval_audit_factored_columns(f, 1, 0), 6);
  cr_assert_eq(eval_audit_factored_columns(f, 0, 1), 9);
  cr_assert_eq(eval_audit_factored_columns(f, 1, 1), 6);
  const eval_audit *fa = eval_audit_factored_result(f, 0);
  const eval_audit *da = eval_audit_factored_result(f, 1);
  /* The same points as the whole rows. */
  cr_assert_eq(eval_audit_n_points(fa, EVAL_AUDIT_SECAGG, EVAL_AUDIT_KP),
               eval_audit_n_points(a, EVAL_AUDIT_SECAGG, EVAL_AUDIT_KP));
  eval_audit_point w9 = at(a, EVAL_AUDIT_SECAGG, EVAL_AUDIT_KP, 9);
  eval_audit_point f9 = at(fa, EVAL_AUDIT_SECAGG, EVAL_AUDIT_KP, 9);
  eval_audit_point f1 = at(fa, EVAL_AUDIT_SECAGG, EVAL_AUDIT_KP, 1);
  eval_audit_point fall = at(fa, EVAL_AUDIT_SECAGG, EVAL_AUDIT_KP, 300);
  eval_audit_point wall = at(a, EVAL_AUDIT_SECAGG, EVAL_AUDIT_KP, 300);
  fprintf(stderr, "factored audit, secagg, known plaintext: n = 9 whole %.3f (min %.3f), "
                  "factored %.3f (min %.3f); n = 1 factored %.3f; n = 300 factored min %.4f\n",
          w9.mean, w9.min, f9.mean, f9.min, f1.mean, fall.min);
  cr_assert_gt(fall.min, 0.999, "factored, every row known: min |corr| %.4f", fall.min);
  cr_assert_gt(wall.min, 0.999, "whole rows, every row known: min |corr| %.4f", wall.min);
  cr_assert_gt(f9.min, 0.999, "factored, n = 9 = the user side's columns: min |corr| %.4f",
               f9.min);
  cr_assert_lt(w9.min, 0.9, "whole rows, n = 9 < D = 15: min |corr| %.4f", w9.min);
  cr_assert_lt(f1.mean, 0.7, "factored, n = 1: mean |corr| %.3f", f1.mean);
  cr_assert_lt(f1.min, 0.5, "factored, n = 1: min |corr| %.3f", f1.min);
  /* Every column of the merged result comes from its half: the item
   * columns (6..11) too. */
  for (int col = 6; col < 12; col++) cr_assert_gt(f9.corr[col], 0.999, "item column %d", col);
  /* The differenced view needs one row more (the offset as an intercept),
   * and is exact with every row. */
  eval_audit_point dall = at(da, EVAL_AUDIT_SECAGG, EVAL_AUDIT_KP, 300);
  cr_assert_gt(dall.min, 0.999, "differenced, every row known: min |corr| %.4f", dall.min);
  /* Norms and Gram: the item half is party 1's part alone. */
  eval_audit_exposure wx, fx, dx;
  cr_assert_eq(eval_audit_exposure_get(a, EVAL_AUDIT_SECAGG, &wx), O3M_OK);
  cr_assert_eq(eval_audit_factored_exposure(f, 0, EVAL_AUDIT_SECAGG, 1, &fx), O3M_OK);
  cr_assert_eq(eval_audit_factored_exposure(f, 1, EVAL_AUDIT_SECAGG, 1, &dx), O3M_OK);
  fprintf(stderr, "factored audit, secagg, Gram: whole %.4f, item half differenced %.4f, "
                  "factored %.6f\n", wx.gram, dx.gram, fx.gram);
  cr_assert_gt(fx.gram, 0.999999, "factored item half Gram corr %.6f", fx.gram);
  cr_assert_gt(fx.norm, 0.999999, "factored item half norm corr %.6f", fx.norm);
  cr_assert_lt(wx.gram, 0.99, "whole rows Gram corr %.4f", wx.gram);
  cr_assert_lt(dx.gram, 0.99, "differenced item half Gram corr %.4f", dx.gram);
  /* A mode that did not run has no exposure to give. */
  cr_assert_eq(eval_audit_factored_exposure(f, 0, EVAL_AUDIT_PER_PARTY, 1, &fx), O3M_EINVAL);
  eval_audit_factored_destroy(f);
  eval_audit_destroy(a);
  eval_audit_input_destroy(in);
}

/* Where no party has item columns the factored figures are the whole rows'
 * (U(u) is the whole sum): the split changes nothing it cannot. */
Test(audit, factored_without_item_columns_equals_whole_rows, .init = make_dir,
     .fini = remove_dir) {
  char path[256];
  write_normal("t.csv", 300, 6, 1, 51, path, sizeof path);
  eval_audit_input *in = build("4,6,6", 1, path, 0);
  eval_audit *a = NULL;
  eval_audit_factored *f = run_factored(in, (1 << EVAL_AUDIT_N_MODES) - 1, 0, &a);
  const eval_audit *fa = eval_audit_factored_result(f, 0);
  for (int m = 0; m < EVAL_AUDIT_N_MODES; m++)
    for (int s = 0; s < EVAL_AUDIT_N_SERIES; s++) {
      int np = eval_audit_n_points(a, m, s);
      cr_assert_eq(eval_audit_n_points(fa, m, s), np);
      for (int i = 0; i < np; i++) {
        eval_audit_point pw, pf;
        eval_audit_point_get(a, m, s, i, &pw);
        eval_audit_point_get(fa, m, s, i, &pf);
        cr_assert_eq(pw.x, pf.x);
        cr_assert_float_eq(pw.mean, pf.mean, 1e-9, "%s/%s at %d: whole %.4f, factored %.4f",
                           eval_audit_mode_name(m), eval_audit_series_name(s), pw.x, pw.mean,
                           pf.mean);
      }
    }
  eval_audit_factored_destroy(f);
  eval_audit_destroy(a);
  eval_audit_input_destroy(in);
}

/* The command: --factored prints the side-by-side tables and writes the
 * factored and differenced CSVs. */
Test(audit, factored_command_writes_its_tables, .init = make_dir, .fini = remove_dir) {
  char users[256], items[256], out[256], csv[320];
  write_normal_kind("cu.csv", O3M_FEATURES_USERS, 100, 3, 0, 61, users, sizeof users);
  write_normal_kind("ci.csv", O3M_FEATURES_ITEMS, 100, 2, 0, 62, items, sizeof items);
  snprintf(out, sizeof out, "%s/out", dir);
  char *argv[] = {"audit", "--dims", "2,5,3", "--party", "1", "--user-table", users,
                  "--item-table", items, "--modes", "secagg", "--no-plots", "--factored",
                  "--out", out, NULL};
  cr_assert_eq(eval_audit_main(15, argv), 0);
  const char *names[] = {"audit_factored_secagg_kp.csv", "audit_differenced_secagg_pca.csv",
                         "audit_secagg_kp.csv"};
  for (int i = 0; i < 3; i++) {
    snprintf(csv, sizeof csv, "%s/%s", out, names[i]);
    cr_assert_eq(access(csv, R_OK), 0, "%s missing", csv);
  }
}
