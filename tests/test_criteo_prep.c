/* test_criteo_prep.c -- the paper's Criteo preprocessing (eval_criteo_prep).
 *
 * Hash buckets, Cantor pairing, the row parser, the statistics (min/max, the
 * top labels and their tie rule), min-max scaling and the outer sum, all on
 * values worked out by hand; and the stats file's round trip and errors. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "eval_criteo_prep.h"

#define FIX(name) O3M_SOURCE_DIR "/tests/data/eval/" name

static int bucket(const char *s) { return eval_criteo_bucket(s, strlen(s)); }

Test(criteo_prep, bucket_of_hex_values_is_value_mod_3) {
  /* 0x05db9164 = 98275684 = 3 * 32758561 + 1. */
  cr_assert_eq(bucket("05db9164"), 1);
  /* 0xa73ee510 = 2805916944 = 3 * 935305648; the digit sum a+7+3+e+e+5+1+0 =
   * 54 = 0 (mod 3) agrees, because 16 = 1 (mod 3). */
  cr_assert_eq(bucket("a73ee510"), 0);
  cr_assert_eq(bucket("00000002"), 2);
  cr_assert_eq(bucket("ABC"), 0, "0xabc = 2748 = 3 * 916");
  cr_assert_eq(bucket("1"), 1);
  cr_assert_eq(bucket(""), -1, "missing");
  /* The digit-sum shortcut equals value mod 3 for every 32-bit value. */
  uint64_t x = 88172645463325252ull;
  for (int i = 0; i < 100000; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    uint32_t v = (uint32_t)x;
    char s[16];
    snprintf(s, sizeof s, i & 1 ? "%08x" : "%08X", v);
    cr_assert_eq(bucket(s), (int)(v % 3), "%s", s);
  }
}

Test(criteo_prep, bucket_of_other_strings_is_fnv1a32_mod_3) {
  /* FNV-1a-32("123456789") = 3146166556 = 1 (mod 3), while the number
   * 123456789 would give 0: nine digits are not a 32-bit hex value. */
  cr_assert_eq(bucket("123456789"), 1);
  /* FNV-1a-32("zz") = 1466432373 = 0 (mod 3). */
  cr_assert_eq(bucket("zz"), 0);
}

Test(criteo_prep, cantor_pairing) {
  cr_assert_eq(eval_criteo_cantor(0, 0), 0);
  cr_assert_eq(eval_criteo_cantor(1, 0), 1);
  cr_assert_eq(eval_criteo_cantor(0, 1), 2);
  cr_assert_eq(eval_criteo_cantor(2, 0), 3);
  cr_assert_eq(eval_criteo_cantor(1, 1), 4);
  cr_assert_eq(eval_criteo_cantor(0, 2), 5);
  cr_assert_eq(eval_criteo_cantor(3, 4), 32, "7*8/2 + 4");
  /* pi(pi(8,8),7): pi(8,8) = 16*17/2 + 8 = 144, pi(144,7) = 151*152/2 + 7. */
  int c1[3] = {8, 8, 7}, c2[3] = {10, 8, 8}, c3[3] = {9, 9, 8}, c4[3] = {5, 5, 5};
  cr_assert_eq(eval_criteo_item_label(c1), 11483);
  cr_assert_eq(eval_criteo_item_label(c2), 17586, "pi(10,8) = 179, pi(179,8) = 187*188/2 + 8");
  cr_assert_eq(eval_criteo_item_label(c3), 17774, "pi(9,9) = 180, pi(180,8) = 188*189/2 + 8");
  cr_assert_eq(eval_criteo_item_label(c4), 2150, "pi(5,5) = 60, pi(60,5) = 65*66/2 + 5");
  /* Injective over every possible triple. */
  static unsigned char seen[100000];
  memset(seen, 0, sizeof seen);
  for (int a = 0; a <= 26; a++)
    for (int b = 0; a + b <= 26; b++)
      for (int c = 0; a + b + c <= 26; c++) {
        int t[3] = {a, b, c};
        uint64_t l = eval_criteo_item_label(t);
        cr_assert_lt(l, sizeof seen);
        cr_assert_eq(seen[l], 0, "label %llu twice", (unsigned long long)l);
        seen[l] = 1;
      }
}

Test(criteo_prep, parse_row) {
  /* CSV form, decimals, a negative, missing ints, 3 + 2 + 1 categoricals in
   * buckets 0,0,0 (00000003, ffffffff, 0000000c) 1,1 (0000000a, 1) 2 (5). */
  const char *line = "1,0.0,-3,260.0,,,,,,,,,,7"
                     ",00000003,ffffffff,0000000c,0000000a,1,5,,,,,,,,,,,,,,,,,,,,";
  eval_criteo_row row;
  int field;
  const char *why;
  cr_assert_eq(eval_criteo_parse(line, ',', EVAL_CRITEO_INT_RAW, &row, &field, &why), 0);
  cr_assert_eq(row.label, 1);
  cr_assert_eq(row.ival[0], 0.0);
  cr_assert_eq(row.ival[1], -3.0);
  cr_assert_eq(row.ival[2], 260.0);
  cr_assert_eq(row.ival[12], 7.0);
  cr_assert_eq(row.imissing[0], 0);
  cr_assert_eq(row.imissing[3], 1);
  cr_assert_eq(row.imissing[11], 1);
  cr_assert_eq(row.count[0], 3);
  cr_assert_eq(row.count[1], 2);
  cr_assert_eq(row.count[2], 1);
  /* log transform: sign(x) log(1 + |x|). */
  cr_assert_eq(eval_criteo_parse(line, ',', EVAL_CRITEO_INT_LOG, &row, &field, &why), 0);
  cr_assert_float_eq(row.ival[1], -log(4.0), 1e-15);
  cr_assert_float_eq(row.ival[2], log(261.0), 1e-15);
  cr_assert_eq(row.ival[0], 0.0);
  /* Too few fields. */
  cr_assert_eq(eval_criteo_parse("1,2", ',', EVAL_CRITEO_INT_RAW, &row, &field, &why),
               O3M_EPARSE);
  cr_assert_eq(field, 0);
  cr_assert_str_eq(why, "fewer than 40 fields");
  /* A TSV line read as CSV: fields are checked in order, so the label
   * "1<TAB>0<TAB>..." is the first complaint. */
  cr_assert_eq(eval_criteo_parse("1\t0\t", ',', EVAL_CRITEO_INT_RAW, &row, &field, &why),
               O3M_EPARSE);
  cr_assert_eq(field, 1);
  cr_assert_str_eq(why, "label is not 0 or 1");
}

/* The fixture's five rows (tests/data/eval/README.md). */
static void fixture_rows(eval_criteo_row rows[5]) {
  FILE *f = fopen(FIX("criteo_small.tsv"), "r");
  cr_assert_not_null(f);
  char line[2048];
  for (int i = 0; i < 5; i++) {
    cr_assert_not_null(fgets(line, sizeof line, f));
    line[strcspn(line, "\n")] = '\0';
    int field;
    const char *why;
    cr_assert_eq(eval_criteo_parse(line, '\t', EVAL_CRITEO_INT_RAW, &rows[i], &field, &why), 0,
                 "row %d: %s", i + 1, why);
  }
  fclose(f);
}

Test(criteo_prep, statistics_and_top_labels) {
  eval_criteo_row rows[5];
  fixture_rows(rows);
  const int cnt[5][3] = {{10, 8, 8}, {10, 8, 8}, {9, 9, 8}, {5, 5, 5}, {9, 9, 8}};
  for (int i = 0; i < 5; i++)
    for (int k = 0; k < 3; k++) cr_assert_eq(rows[i].count[k], cnt[i][k], "row %d", i + 1);
  eval_criteo_accum *acc;
  cr_assert_eq(eval_criteo_accum_create(&acc, EVAL_CRITEO_INT_RAW), 0);
  for (int i = 0; i < 5; i++) eval_criteo_accum_add(acc, &rows[i]);
  static eval_criteo_stats st;
  o3m_err e;
  cr_assert_eq(eval_criteo_accum_finish(acc, 10, &st, &e), 0, "%s", e.msg);
  cr_assert_eq(st.rows, 5);
  cr_assert_eq(st.clicks, 3);
  /* I1: 0, 10, -, 5, 20; I2: -1, 3, 1, 4, 1; I3: 7 everywhere; I4..: never. */
  cr_assert_eq(st.imin[0], 0.0);
  cr_assert_eq(st.imax[0], 20.0);
  cr_assert_eq(st.imin[1], -1.0);
  cr_assert_eq(st.imax[1], 4.0);
  cr_assert_eq(st.imin[2], 7.0);
  cr_assert_eq(st.imax[2], 7.0);
  cr_assert_eq(st.imin[5], 0.0);
  cr_assert_eq(st.imax[5], 0.0);
  cr_assert_eq(st.cmin[0], 5.0);
  cr_assert_eq(st.cmax[0], 10.0);
  cr_assert_eq(st.cmin[1], 5.0);
  cr_assert_eq(st.cmax[1], 9.0);
  cr_assert_eq(st.cmin[2], 5.0);
  cr_assert_eq(st.cmax[2], 8.0);
  /* Three distinct labels although 10 were asked for. (10,8,8) and (9,9,8)
   * both have 2 rows: the tie goes to the smaller label, 17586 < 17774. */
  cr_assert_eq(st.n_arms, 3);
  const int arm[3][3] = {{10, 8, 8}, {9, 9, 8}, {5, 5, 5}};
  const long long arows[3] = {2, 2, 1}, aclicks[3] = {1, 2, 0};
  for (int a = 0; a < 3; a++) {
    for (int k = 0; k < 3; k++) cr_assert_eq(st.arm_count[a][k], arm[a][k], "arm %d", a);
    cr_assert_eq(st.arm_rows[a], arows[a], "arm %d", a);
    cr_assert_eq(st.arm_clicks[a], aclicks[a], "arm %d", a);
  }
  /* Fewer arms: the top two. */
  cr_assert_eq(eval_criteo_accum_finish(acc, 2, &st, &e), 0);
  cr_assert_eq(st.n_arms, 2);
  cr_assert_eq(st.arm_count[1][0], 9);
  cr_assert_eq(eval_criteo_accum_finish(acc, 0, &st, &e), O3M_EINVAL);
  eval_criteo_accum_destroy(acc);

  /* The streaming pass over a prefix of 2 rows sees only (10,8,8). */
  cr_assert_eq(eval_criteo_scan(FIX("criteo_small.tsv"), 0, 2, EVAL_CRITEO_INT_RAW, 40, &st, &e),
               0, "%s", e.msg);
  cr_assert_eq(st.rows, 2);
  cr_assert_eq(st.n_arms, 1);
  cr_assert_eq(st.imax[0], 10.0);
}

Test(criteo_prep, scaling_and_outer_sum) {
  static eval_criteo_stats st;
  memset(&st, 0, sizeof st);
  st.imin[0] = 0, st.imax[0] = 20;  /* I1 */
  st.imin[1] = -1, st.imax[1] = 4;  /* I2 */
  st.imin[2] = 7, st.imax[2] = 7;   /* constant */
  st.cmin[0] = 5, st.cmax[0] = 10;
  st.cmin[1] = 5, st.cmax[1] = 9;
  st.cmin[2] = 5, st.cmax[2] = 8;
  eval_criteo_row row;
  memset(&row, 0, sizeof row);
  for (int i = 0; i < 13; i++) row.imissing[i] = 1;
  row.imissing[0] = 0, row.ival[0] = 5;  /* (5 - 0) / 20 = 0.25 */
  row.imissing[1] = 0, row.ival[1] = 3;  /* (3 + 1) / 5 = 0.8 */
  row.imissing[2] = 0, row.ival[2] = 7;  /* constant column -> 0 */
  double u[13];
  eval_criteo_user(&st, &row, u);
  cr_assert_float_eq(u[0], 0.25, 1e-15);
  cr_assert_float_eq(u[1], 0.8, 1e-15);
  cr_assert_eq(u[2], 0.0);
  cr_assert_eq(u[3], 0.0, "missing -> 0, the column minimum");
  /* Outside the statistics' range (they may come from a prefix): clamped. */
  row.ival[0] = 50;
  row.ival[1] = -7;
  eval_criteo_user(&st, &row, u);
  cr_assert_eq(u[0], 1.0);
  cr_assert_eq(u[1], 0.0);
  int c[3] = {9, 9, 8};
  double v[3];
  eval_criteo_item(&st, c, v);
  cr_assert_float_eq(v[0], 0.8, 1e-15);
  cr_assert_float_eq(v[1], 1.0, 1e-15);
  cr_assert_float_eq(v[2], 1.0, 1e-15);
  double uu[13], x[39];
  for (int i = 0; i < 13; i++) uu[i] = i;
  const double vv[3] = {0.5, 0.25, 0.125};
  eval_criteo_outer_sum(uu, vv, x);
  cr_assert_eq(x[0], 0.5);
  cr_assert_eq(x[1], 0.25);
  cr_assert_eq(x[5], 1.125, "i = 1, k = 2");
  cr_assert_eq(x[38], 12.125, "i = 12, k = 2");
}

static void tmp_path(char path[64]) {
  strcpy(path, "/tmp/o3m_test_criteo_XXXXXX");
  int fd = mkstemp(path);
  cr_assert(fd >= 0);
  close(fd);
}

Test(criteo_prep, stats_file_round_trip) {
  static eval_criteo_stats st, back;
  o3m_err e;
  cr_assert_eq(eval_criteo_scan(FIX("criteo_small.tsv"), 0, 0, EVAL_CRITEO_INT_LOG, 40, &st, &e),
               0, "%s", e.msg);
  char path[64];
  tmp_path(path);
  cr_assert_eq(eval_criteo_stats_write(&st, path, &e), 0, "%s", e.msg);
  cr_assert_eq(eval_criteo_stats_read(&back, path, &e), 0, "%s", e.msg);
  cr_assert_eq(back.rows, st.rows);
  cr_assert_eq(back.clicks, st.clicks);
  cr_assert_eq(back.transform, EVAL_CRITEO_INT_LOG);
  cr_assert_eq(back.n_arms, 3);
  for (int i = 0; i < 13; i++) {
    cr_assert_eq(back.imin[i], st.imin[i], "exact: 17 digits");
    cr_assert_eq(back.imax[i], st.imax[i]);
  }
  for (int k = 0; k < 3; k++) cr_assert_eq(back.cmax[k], st.cmax[k]);
  cr_assert_eq(memcmp(back.arm_count, st.arm_count, sizeof st.arm_count), 0);
  cr_assert_eq(memcmp(back.arm_rows, st.arm_rows, sizeof st.arm_rows), 0);
  unlink(path);
}

static void stats_expect_error(const char *text, const char *needle) {
  char path[64];
  tmp_path(path);
  FILE *f = fopen(path, "w");
  fputs(text, f);
  fclose(f);
  static eval_criteo_stats st;
  o3m_err e;
  cr_assert_eq(eval_criteo_stats_read(&st, path, &e), O3M_EPARSE);
  cr_assert(strstr(e.msg, needle) != NULL, "'%s' not in '%s'", needle, e.msg);
  unlink(path);
}

#define STATS_HEAD                                                                          \
  "o3m-criteo-stats 1\nrows 5\nclicks 3\ntransform raw\nbucket hex-mod-3\n"                 \
  "int_min 0 -1 7 0 0 0 0 0 0 0 0 0 0\nint_max 20 4 7 0 0 0 0 0 0 0 0 0 0\n"                 \
  "count_min 5 5 5\ncount_max 10 9 8\n"

Test(criteo_prep, stats_file_errors_name_the_line) {
  stats_expect_error("hello\n", ":1: not an o3m Criteo stats file");
  stats_expect_error(STATS_HEAD "arms 1\narm 0 17586 10 8 8 2\n", ":11: malformed 'arm' line");
  stats_expect_error(STATS_HEAD "arms 1\narm 0 999 10 8 8 2 1\n", ":11: malformed 'arm' line");
  stats_expect_error(STATS_HEAD "arms 2\narm 0 17586 10 8 8 2 1\n", "1 arm lines for 'arms 2'");
  stats_expect_error(STATS_HEAD "arms 2\narm 0 17586 10 8 8 2 1\narm 1 17586 10 8 8 2 1\n",
                     "have the same label");
  stats_expect_error("o3m-criteo-stats 1\nrows 5\n", "incomplete");
  stats_expect_error(STATS_HEAD "colour blue\n", ":10: unknown key 'colour'");
  stats_expect_error("o3m-criteo-stats 1\nint_min 1 2 3\n", ":2: malformed 'int_min' line");
  /* A good one reads. */
  char path[64];
  tmp_path(path);
  FILE *f = fopen(path, "w");
  fputs(STATS_HEAD "arms 1\narm 0 17586 10 8 8 2 1\n", f);
  fclose(f);
  static eval_criteo_stats st;
  o3m_err e;
  cr_assert_eq(eval_criteo_stats_read(&st, path, &e), 0, "%s", e.msg);
  cr_assert_eq(st.n_arms, 1);
  cr_assert_eq(st.arm_count[0][0], 10);
  unlink(path);
}
