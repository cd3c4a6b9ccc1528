/* test_readers.c -- the replay log readers (eval_reader_*.c).
 *
 * Every reader parses a tiny fixture in tests/data/eval/ to values worked out
 * by hand (see tests/data/eval/README.md for what each fixture holds), and
 * malformed input gives an error that names the file and line, or a counted
 * skip where the format allows one. Malformed files are written to temporary
 * files by the tests themselves. */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "eval_cmds.h"
#include "eval_criteo_prep.h"
#include "eval_reader.h"
#include "o3m_limits.h"

#define FIX(name) O3M_SOURCE_DIR "/tests/data/eval/" name

/* Writes text to a fresh temporary file whose name is left in path. */
static void write_tmp(char path[64], const char *text) {
  strcpy(path, "/tmp/o3m_test_readers_XXXXXX");
  int fd = mkstemp(path);
  cr_assert(fd >= 0);
  size_t n = strlen(text);
  cr_assert_eq(write(fd, text, n), (ssize_t)n);
  close(fd);
}

/* Reads every event of r; returns the count, or the negative error. */
static int drain(eval_reader *r, o3m_err *e) {
  eval_event ev;
  int n = 0, rc;
  while ((rc = eval_reader_next(r, &ev, e)) == 1) n++;
  return rc < 0 ? rc : n;
}

/* A news line: arm, reward, then 100 features all equal to v. */
static void news_line(char *buf, size_t cap, const char *arm, const char *reward, const char *v,
                      int nfeat) {
  size_t off = (size_t)snprintf(buf, cap, "%s %s", arm, reward);
  for (int i = 0; i < nfeat; i++) off += (size_t)snprintf(buf + off, cap - off, " %s", v);
  snprintf(buf + off, cap - off, "\n");
}

/* ---- news10k ---- */

Test(news, fixture_values) {
  eval_reader *r;
  o3m_err e;
  cr_assert_eq(eval_reader_open_news(&r, FIX("news_small.txt"), &e), 0, "%s", e.msg);
  cr_assert_eq(eval_reader_arms(r), 10);
  cr_assert_eq(eval_reader_dim(r), 10);
  cr_assert_null(eval_reader_item_part(r));
  eval_event ev;
  cr_assert_eq(eval_reader_next(r, &ev, &e), 1, "%s", e.msg);
  /* Line 1: "3 1 0 1 2 ... 99": arm 3 -> index 2, X[a][j] = 10 a + j. */
  cr_assert_eq(ev.arm, 2);
  cr_assert_eq(ev.reward, 1.0);
  cr_assert_eq(ev.line, 1);
  cr_assert_null(ev.w);
  cr_assert_eq(ev.X[0], 0.0);
  cr_assert_eq(ev.X[1 * 10 + 2], 12.0);
  cr_assert_eq(ev.X[9 * 10 + 9], 99.0);
  /* Line 2 is blank (skipped), line 3: arm 10, reward 0, arm 10 all 7s. */
  cr_assert_eq(eval_reader_next(r, &ev, &e), 1, "%s", e.msg);
  cr_assert_eq(ev.arm, 9);
  cr_assert_eq(ev.reward, 0.0);
  cr_assert_eq(ev.line, 3);
  cr_assert_eq(ev.X[8 * 10 + 9], 0.0);
  cr_assert_eq(ev.X[9 * 10 + 0], 7.0);
  cr_assert_eq(ev.X[9 * 10 + 9], 7.0);
  cr_assert_eq(eval_reader_next(r, &ev, &e), 0);
  cr_assert_eq(eval_reader_next(r, &ev, &e), 0, "end stays end");
  cr_assert_eq(eval_reader_skipped(r), 1);
  eval_reader_destroy(r);
}

/* One malformed line (line 2, after a good one) must fail naming line 2. */
static void news_expect_error(const char *bad_line, int code, const char *needle) {
  char good[1024], text[4096], path[64];
  news_line(good, sizeof good, "1", "0", "0", 100);
  snprintf(text, sizeof text, "%s%s", good, bad_line);
  write_tmp(path, text);
  eval_reader *r;
  o3m_err e;
  cr_assert_eq(eval_reader_open_news(&r, path, &e), 0);
  eval_event ev;
  cr_assert_eq(eval_reader_next(r, &ev, &e), 1);
  int rc = eval_reader_next(r, &ev, &e);
  cr_assert_eq(rc, code, "rc %d, message: %s", rc, e.msg);
  cr_assert(strstr(e.msg, ":2:") != NULL, "no line number in '%s'", e.msg);
  cr_assert(strstr(e.msg, path) != NULL, "no file name in '%s'", e.msg);
  cr_assert(strstr(e.msg, needle) != NULL, "'%s' not in '%s'", needle, e.msg);
  /* After an error the reader refuses to go on instead of resynchronizing. */
  cr_assert_lt(eval_reader_next(r, &ev, &e), 0);
  eval_reader_destroy(r);
  unlink(path);
}

Test(news, wrong_field_count) {
  char bad[1024];
  news_line(bad, sizeof bad, "1", "0", "0", 99);
  news_expect_error(bad, O3M_EPARSE, "expected 102 fields");
}

Test(news, not_a_number) {
  char bad[1024];
  news_line(bad, sizeof bad, "1", "0", "x", 100);
  news_expect_error(bad, O3M_EPARSE, "not an integer");
  news_line(bad, sizeof bad, "1", "0", "1.5", 100);
  news_expect_error(bad, O3M_EPARSE, "not an integer");
}

Test(news, arm_out_of_range) {
  char bad[1024];
  news_line(bad, sizeof bad, "11", "0", "0", 100);
  news_expect_error(bad, O3M_ERANGE, "arm 11 out of range");
  news_line(bad, sizeof bad, "0", "0", "0", 100);
  news_expect_error(bad, O3M_ERANGE, "arm 0 out of range");
}

Test(news, reward_not_binary) {
  char bad[1024];
  news_line(bad, sizeof bad, "2", "2", "0", 100);
  news_expect_error(bad, O3M_ERANGE, "reward 2");
}

Test(news, missing_file_names_it) {
  eval_reader *r;
  o3m_err e;
  cr_assert_eq(eval_reader_open_news(&r, "/nonexistent/news.txt", &e), O3M_EIO);
  cr_assert(strstr(e.msg, "/nonexistent/news.txt") != NULL, "%s", e.msg);
  cr_assert_null(r);
}

Test(news, line_longer_than_buffer_is_an_error) {
  char path[64];
  strcpy(path, "/tmp/o3m_test_readers_XXXXXX");
  int fd = mkstemp(path);
  cr_assert(fd >= 0);
  size_t n = EVAL_READER_BUFSZ + 100;
  char *big = malloc(n);
  memset(big, '1', n);
  cr_assert_eq(write(fd, big, n), (ssize_t)n);
  close(fd);
  free(big);
  eval_reader *r;
  o3m_err e;
  cr_assert_eq(eval_reader_open_news(&r, path, &e), 0);
  cr_assert_eq(drain(r, &e), O3M_EPARSE);
  cr_assert(strstr(e.msg, ":1: line longer than") != NULL, "%s", e.msg);
  eval_reader_destroy(r);
  unlink(path);
}

Test(news, last_line_without_newline) {
  char good[1024], path[64];
  news_line(good, sizeof good, "4", "1", "2", 100);
  good[strlen(good) - 1] = '\0';
  write_tmp(path, good);
  eval_reader *r;
  o3m_err e;
  cr_assert_eq(eval_reader_open_news(&r, path, &e), 0);
  eval_event ev;
  cr_assert_eq(eval_reader_next(r, &ev, &e), 1, "%s", e.msg);
  cr_assert_eq(ev.arm, 3);
  cr_assert_eq(ev.X[99], 2.0);
  cr_assert_eq(eval_reader_next(r, &ev, &e), 0);
  eval_reader_destroy(r);
  unlink(path);
}

/* ---- Open Bandit Dataset ---- */

static eval_reader *open_obd(int position, int buckets) {
  eval_obd_options o;
  eval_obd_options_default(&o);
  o.position = position;
  o.user_buckets = buckets;
  eval_reader *r;
  o3m_err e;
  cr_assert_eq(eval_reader_open_obd(&r, FIX("obd_log.csv"), FIX("obd_items.csv"), &o, &e), 0,
               "%s", e.msg);
  return r;
}

Test(obd, fixture_values) {
  eval_reader *r = open_obd(1, 4);
  /* 3 items; d = 4 user columns x 4 buckets + (1 numeric + 2 + 2 + 2 one-hot). */
  cr_assert_eq(eval_reader_arms(r), 3);
  cr_assert_eq(eval_reader_dim(r), 16 + 7);
  const int d = 23;
  const double *C = eval_reader_item_part(r);
  cr_assert_not_null(C);
  /* Items: numeric -1, 1, 0 -> 0, 1, 0.5; cat1 aa bb aa; cat2 xx xx yy;
   * cat3 pp qq pp (codes in order of first appearance). */
  const double item[3][7] = {{0, 1, 0, 1, 0, 1, 0}, {1, 0, 1, 1, 0, 0, 1},
                             {0.5, 1, 0, 0, 1, 1, 0}};
  for (int a = 0; a < 3; a++) {
    for (int j = 0; j < 16; j++) cr_assert_eq(C[a * d + j], 0.0);
    for (int j = 0; j < 7; j++)
      cr_assert_eq(C[a * d + 16 + j], item[a][j], "item %d feature %d: %g", a, j,
                   C[a * d + 16 + j]);
  }
  /* Position 1 rows are lines 2 and 4 (lines 3 and 5 are positions 2, 3). */
  eval_event ev;
  o3m_err e;
  cr_assert_eq(eval_reader_next(r, &ev, &e), 1, "%s", e.msg);
  cr_assert_eq(ev.line, 2);
  cr_assert_eq(ev.arm, 2);
  cr_assert_eq(ev.reward, 1.0);
  /* User slots: each column's values in order of first appearance among the
   * rows used (position 1), so every value of this first row takes slot 0. */
  const int slot_a[4] = {0, 0, 0, 0};
  for (int c = 0; c < 4; c++)
    for (int b = 0; b < 4; b++)
      cr_assert_eq(ev.w[c * 4 + b], b == slot_a[c] ? 1.0 : 0.0, "column %d bucket %d", c, b);
  for (int j = 16; j < d; j++) cr_assert_eq(ev.w[j], 0.0);
  /* X = 1 w^T + C. */
  for (int a = 0; a < 3; a++)
    for (int j = 0; j < d; j++) cr_assert_eq(ev.X[a * d + j], ev.w[j] + C[a * d + j]);
  cr_assert_eq(eval_reader_next(r, &ev, &e), 1, "%s", e.msg);
  cr_assert_eq(ev.line, 4);
  cr_assert_eq(ev.arm, 1);
  cr_assert_eq(ev.reward, 0.0);
  /* u0b and u2b are new (slot 1), u1a and u3a seen (slot 0). A 4-way hash
   * put u0a and u0b in one bucket; here they stay apart. */
  const int slot_b[4] = {1, 0, 1, 0};
  for (int c = 0; c < 4; c++)
    for (int b = 0; b < 4; b++)
      cr_assert_eq(ev.w[c * 4 + b], b == slot_b[c] ? 1.0 : 0.0, "column %d bucket %d", c, b);
  cr_assert_eq(eval_reader_next(r, &ev, &e), 0);
  cr_assert_eq(eval_reader_skipped(r), 2, "the rows at positions 2 and 3");
  eval_reader_destroy(r);
}

Test(obd, all_positions) {
  eval_reader *r = open_obd(0, 16);
  o3m_err e;
  cr_assert_eq(drain(r, &e), 4);
  cr_assert_eq(eval_reader_skipped(r), 0);
  eval_reader_destroy(r);
}

/* A column with more distinct values than slots is refused, naming the
 * column, the line and the option, instead of merging two values. */
Test(obd, more_values_than_slots) {
  eval_reader *r = open_obd(0, 1);
  eval_event ev;
  o3m_err e;
  cr_assert_eq(eval_reader_next(r, &ev, &e), 1, "%s", e.msg);
  cr_assert_eq(eval_reader_next(r, &ev, &e), 1, "%s", e.msg);
  cr_assert_eq(eval_reader_next(r, &ev, &e), O3M_ERANGE);
  cr_expect(strstr(e.msg, "obd_log.csv:4: user_feature_0 has more than 1 distinct values "
                          "('u0b' is value 2); raise --obd-user-buckets"), "%s", e.msg);
  eval_reader_destroy(r);
}

/* Splits a CSV line in place at commas into at most n fields; returns the
 * count. */
static int split_csv(char *line, char **f, int n) {
  int k = 0;
  for (char *p = line; k < n;) {
    f[k++] = p;
    char *c = strchr(p, ',');
    if (!c) break;
    *c = '\0';
    p = c + 1;
  }
  return k;
}

#define OBD_B 16
#define OBD_MAX_VAL 128

/* Reads one campaign's log (position 0: every row) through the reader and,
 * beside it, as plain CSV, and checks for every user_feature column that two
 * distinct raw values never share a one-hot slot and one value always takes
 * the same slot; then that two items whose raw features differ get different
 * item parts. Returns the number of rows checked. */
static long check_campaign(const char *log, const char *items) {
  eval_obd_options o;
  eval_obd_options_default(&o);
  o.position = 0;
  o.user_buckets = OBD_B;
  eval_reader *r;
  o3m_err e;
  cr_assert_eq(eval_reader_open_obd(&r, log, items, &o, &e), 0, "%s", e.msg);
  FILE *f = fopen(log, "r");
  cr_assert_not_null(f);
  static char line[1 << 16];
  char *fld[256];
  cr_assert_not_null(fgets(line, sizeof line, f));
  line[strcspn(line, "\r\n")] = '\0';
  int nf = split_csv(line, fld, 256), ucol[16], nu = 0;
  for (int i = 0; i < nf && nu < 16; i++)
    if (!strncmp(fld[i], "user_feature_", 13)) ucol[nu++] = i;
  cr_assert_gt(nu, 0, "%s has no user_feature column", log);
  static char seen[16][OBD_B][OBD_MAX_VAL];
  memset(seen, 0, sizeof seen);
  long rows = 0;
  eval_event ev;
  int rc;
  while ((rc = eval_reader_next(r, &ev, &e)) == 1) {
    cr_assert_not_null(fgets(line, sizeof line, f), "%s ends before the reader", log);
    line[strcspn(line, "\r\n")] = '\0';
    cr_assert_eq(split_csv(line, fld, 256), nf);
    for (int j = 0; j < nu; j++) {
      const char *v = fld[ucol[j]];
      int slot = -1, set = 0;
      for (int b = 0; b < OBD_B; b++)
        if (ev.w[j * OBD_B + b] != 0.0) slot = b, set++;
      cr_assert_eq(set, *v ? 1 : 0, "%s:%lld: column %d sets %d slots", log, ev.line, j, set);
      if (!*v) continue;
      cr_assert_lt(strlen(v), OBD_MAX_VAL);
      for (int b = 0; b < OBD_B; b++)
        if (b != slot)
          cr_assert(strcmp(seen[j][b], v), "%s:%lld: column %d value %s in slot %d and %d", log,
                    ev.line, j, v, b, slot);
      if (!seen[j][slot][0]) strcpy(seen[j][slot], v);
      cr_assert_str_eq(seen[j][slot], v, "%s:%lld: column %d: values %s and %s share slot %d",
                       log, ev.line, j, seen[j][slot], v, slot);
    }
    rows++;
  }
  cr_assert_eq(rc, 0, "%s", e.msg);
  fclose(f);
  /* Items: distinct raw rows (without the item_id and index columns) must get
   * distinct item parts. */
  f = fopen(items, "r");
  cr_assert_not_null(f);
  static char raw[O3M_EVAL_MAX_K][1024];
  int K = eval_reader_arms(r), d = eval_reader_dim(r), n = 0;
  const double *C = eval_reader_item_part(r);
  cr_assert_not_null(fgets(line, sizeof line, f));
  while (n < K && fgets(line, sizeof line, f)) {
    line[strcspn(line, "\r\n")] = '\0';
    char *p = strchr(line, ',');
    p = p ? strchr(p + 1, ',') : NULL; /* past the index and item_id */
    cr_assert_not_null(p);
    snprintf(raw[n++], sizeof raw[0], "%s", p + 1);
  }
  fclose(f);
  cr_assert_eq(n, K);
  for (int a = 0; a < K; a++)
    for (int b = a + 1; b < K; b++)
      if (strcmp(raw[a], raw[b]))
        cr_assert(memcmp(C + (size_t)a * d, C + (size_t)b * d, sizeof(double) * d),
                  "%s: items %d and %d differ in the table but not in their encoding", items, a,
                  b);
  eval_reader_destroy(r);
  return rows;
}

/* Every Open Bandit campaign in the shared data directory (../shared/data
 * from the project root, or $O3M_DATA_DIR; a folder obd-* holding
 * item_context.csv and one log CSV) is encoded without collisions: the
 * distinct raw values of each user and item column map to distinct
 * encodings. Skipped, saying so, when no campaign is there. */
Test(obd, shared_campaigns_encode_distinct_values_apart) {
  const char *dir = getenv("O3M_DATA_DIR");
  if (!dir) dir = O3M_SOURCE_DIR "/../shared/data";
  DIR *top = opendir(dir);
  if (!top) cr_skip_test("%s not found: set O3M_DATA_DIR to the shared data directory", dir);
  int campaigns = 0;
  struct dirent *c;
  while ((c = readdir(top))) {
    if (strncmp(c->d_name, "obd-", 4)) continue;
    char sub[4096], items[4096 + 32], log[4096 + 256];
    snprintf(sub, sizeof sub, "%s/%s", dir, c->d_name);
    snprintf(items, sizeof items, "%s/item_context.csv", sub);
    DIR *dd = opendir(sub);
    if (!dd || access(items, R_OK)) {
      if (dd) closedir(dd);
      continue;
    }
    struct dirent *f;
    while ((f = readdir(dd))) {
      size_t l = strlen(f->d_name);
      if (l < 5 || strcmp(f->d_name + l - 4, ".csv") || !strcmp(f->d_name, "item_context.csv"))
        continue;
      snprintf(log, sizeof log, "%s/%s", sub, f->d_name);
      long rows = check_campaign(log, items);
      cr_log_info("%s: %ld rows, no two values share a slot", log, rows);
      campaigns++;
    }
    closedir(dd);
  }
  closedir(top);
  if (!campaigns) cr_skip_test("no obd-*/ campaign with item_context.csv in %s", dir);
}

static void obd_expect_error(const char *log_text, const char *items_path, const char *needle,
                             int at_open) {
  char path[64];
  write_tmp(path, log_text);
  eval_reader *r = NULL;
  o3m_err e;
  int rc = eval_reader_open_obd(&r, path, items_path, NULL, &e);
  if (!at_open) {
    cr_assert_eq(rc, 0, "%s", e.msg);
    rc = drain(r, &e);
  }
  cr_assert_lt(rc, 0);
  cr_assert(strstr(e.msg, needle) != NULL, "'%s' not in '%s'", needle, e.msg);
  eval_reader_destroy(r);
  unlink(path);
}

#define OBD_HDR ",timestamp,item_id,position,click,propensity_score,user_feature_0," \
                "user_feature_1,user_feature_2,user_feature_3\n"

Test(obd, malformed_lines) {
  obd_expect_error(OBD_HDR "0,t,1,1,0,0.3,a,b,c,d\n1,t,1,1,0,0.3,a,b,c\n", FIX("obd_items.csv"),
                   ":3: expected 10 fields", 0);
  obd_expect_error(OBD_HDR "0,t,7,1,0,0.3,a,b,c,d\n", FIX("obd_items.csv"),
                   ":2: item_id 7 out of range 0..2", 0);
  obd_expect_error(OBD_HDR "0,t,x,1,0,0.3,a,b,c,d\n", FIX("obd_items.csv"),
                   ":2: item_id 'x' is not an integer", 0);
  obd_expect_error(OBD_HDR "0,t,1,1,3,0.3,a,b,c,d\n", FIX("obd_items.csv"),
                   ":2: click 3 is not 0 or 1", 0);
  obd_expect_error(OBD_HDR "0,t,1,\"1\",0,0.3,a,b,c,d\n", FIX("obd_items.csv"),
                   ":2: quoted CSV fields", 0);
  obd_expect_error(",timestamp,item,position,click\n", FIX("obd_items.csv"),
                   ":1: header lacks item_id", 1);
}

Test(obd, malformed_item_table) {
  char items[64];
  write_tmp(items, ",item_id,item_feature_0,item_feature_1\n0,0,1.0,a\n1,2,1.0,b\n");
  obd_expect_error(OBD_HDR, items, ":3: item_id '2', expected 1", 1);
  unlink(items);
  write_tmp(items, ",item_id,item_feature_0,item_feature_1\n0,0,abc,a\n");
  obd_expect_error(OBD_HDR, items, ":2: item_feature_0 'abc' is not a finite number", 1);
  unlink(items);
}

/* ---- Criteo ---- */

/* The fixture's statistics with 2 arms (see README.md there). */
static void small_stats(eval_criteo_stats *st, int csv) {
  o3m_err e;
  cr_assert_eq(eval_criteo_scan(csv ? FIX("criteo_small.csv") : FIX("criteo_small.tsv"), csv, 0,
                                EVAL_CRITEO_INT_RAW, 2, st, &e),
               0, "%s", e.msg);
}

static void check_criteo_fixture(int csv) {
  static eval_criteo_stats st;
  small_stats(&st, csv);
  eval_reader *r;
  o3m_err e;
  cr_assert_eq(eval_reader_open_criteo(&r, csv ? FIX("criteo_small.csv") : FIX("criteo_small.tsv"),
                                       csv, &st, &e),
               0, "%s", e.msg);
  cr_assert_eq(eval_reader_arms(r), 2);
  cr_assert_eq(eval_reader_dim(r), 39);
  /* Arm 0 = counts (10,8,8) -> v = (1, 3/4, 1); arm 1 = (9,9,8) -> (4/5, 1, 1)
   * (count columns scale over 5..10, 5..9, 5..8). */
  const double v[2][3] = {{1, 0.75, 1}, {0.8, 1, 1}};
  /* Rows used: 1, 2, 3, 5 (row 4's counts (5,5,5) are not an arm). Their
   * I1 scaled over 0..20 (missing -> 0) and I2 over -1..4; I3 is constant. */
  const int line[4] = {1, 2, 3, 5}, arm[4] = {0, 0, 1, 1};
  const double rew[4] = {1, 0, 1, 1}, u1[4] = {0, 0.5, 0, 1}, u2[4] = {0, 0.8, 0.4, 0.4};
  eval_event ev;
  for (int t = 0; t < 4; t++) {
    cr_assert_eq(eval_reader_next(r, &ev, &e), 1, "%s", e.msg);
    cr_assert_eq(ev.line, line[t] + csv);
    cr_assert_eq(ev.arm, arm[t]);
    cr_assert_eq(ev.reward, rew[t]);
    for (int a = 0; a < 2; a++)
      for (int i = 0; i < 13; i++)
        for (int k = 0; k < 3; k++) {
          double u = i == 0 ? u1[t] : i == 1 ? u2[t] : 0.0;
          cr_assert_float_eq(ev.X[a * 39 + i * 3 + k], u + v[a][k], 1e-15,
                             "row %d arm %d (%d,%d): %g", t, a, i, k, ev.X[a * 39 + i * 3 + k]);
          cr_assert_float_eq(ev.w[i * 3 + k], u, 1e-15);
        }
  }
  cr_assert_eq(eval_reader_next(r, &ev, &e), 0);
  cr_assert_eq(eval_reader_skipped(r), 1);
  eval_reader_destroy(r);
}

Test(criteo, tsv_fixture_values) { check_criteo_fixture(0); }
Test(criteo, csv_fixture_values) { check_criteo_fixture(1); }

static void criteo_expect_error(const char *text, int csv, const char *needle) {
  static eval_criteo_stats st;
  small_stats(&st, 0);
  char path[64];
  write_tmp(path, text);
  eval_reader *r = NULL;
  o3m_err e;
  int rc = eval_reader_open_criteo(&r, path, csv, &st, &e);
  if (!rc) rc = drain(r, &e);
  cr_assert_lt(rc, 0);
  cr_assert(strstr(e.msg, needle) != NULL, "'%s' not in '%s'", needle, e.msg);
  eval_reader_destroy(r);
  /* The statistics pass reports the same error. */
  rc = eval_criteo_scan(path, csv, 0, EVAL_CRITEO_INT_RAW, 2, &st, &e);
  cr_assert_lt(rc, 0);
  cr_assert(strstr(e.msg, needle) != NULL, "scan: '%s' not in '%s'", needle, e.msg);
  unlink(path);
}

#define T9 "\t\t\t\t\t\t\t\t\t"
#define T25 T9 T9 "\t\t\t\t\t\t\t"

Test(criteo, malformed_lines) {
  /* 40 fields: label, 13 ints (12 tabs after the first), 26 categoricals. */
  const char *good = "0\t1" "\t\t\t\t\t\t\t\t\t\t\t\t" "\tabc" T25 "\n";
  char buf[512];
  snprintf(buf, sizeof buf, "%s0\t1\t2\n", good);
  criteo_expect_error(buf, 0, ":2: fewer than 40 fields");
  snprintf(buf, sizeof buf, "%s%.*s\tx\n", good, (int)strlen(good) - 1, good);
  criteo_expect_error(buf, 0, ":2: more than 40 fields");
  snprintf(buf, sizeof buf, "%s2%s", good, good + 1);
  criteo_expect_error(buf, 0, ":2: field 1: label is not 0 or 1");
  snprintf(buf, sizeof buf, "%s0\tx1%s", good, good + 3);
  criteo_expect_error(buf, 0, ":2: field 2: integer column is not a finite number");
  criteo_expect_error("label,I1\n0,1\n", 1, ":1: expected a header of 40 names");
}

Test(criteo, gen_criteo_output_parses) {
  char path[64];
  strcpy(path, "/tmp/o3m_test_readers_XXXXXX");
  int fd = mkstemp(path);
  cr_assert(fd >= 0);
  close(fd);
  char *argv[] = {"gen-criteo", "--rows", "2000", "--seed", "3", "--out", path, NULL};
  cr_assert_eq(eval_gen_criteo_main(7, argv), 0);
  static eval_criteo_stats st;
  o3m_err e;
  cr_assert_eq(eval_criteo_scan(path, 0, 0, EVAL_CRITEO_INT_RAW, 40, &st, &e), 0, "%s", e.msg);
  cr_assert_eq(st.rows, 2000);
  cr_assert_eq(st.n_arms, 40);
  /* The model's CTR is about 0.25. */
  cr_assert_gt(st.clicks, 200);
  cr_assert_lt(st.clicks, 900);
  eval_reader *r;
  cr_assert_eq(eval_reader_open_criteo(&r, path, 0, &st, &e), 0, "%s", e.msg);
  int n = drain(r, &e);
  cr_assert_gt(n, 0, "%s", e.msg);
  cr_assert_eq((uint64_t)n + eval_reader_skipped(r), 2000);
  eval_reader_destroy(r);
  unlink(path);
}
