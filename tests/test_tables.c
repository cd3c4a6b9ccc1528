/* test_tables.c -- a party's tables loaded and reloaded (party/o3m_tables.h),
 * in process, without a server (o3m_tables_reload with server NULL).
 *
 * A bad file is refused with the start's file:line message, the current
 * tables are untouched and keep answering, and the refusal is counted; a
 * good file is swapped in whole (a changed row and a new row answer at
 * once), the old version is handed back to the caller, the lookup counters
 * continue, and the dummy rows of unknown ids come from the new tables'
 * moments under the same key. A path that is no regular file, or a file
 * longer than table_bytes_max, is refused naming what it is or the key; a
 * second reload asked while one runs is coalesced or refused. */
#include <criterion/criterion.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "o3m_tables.h"

static char tmpdir[] = "/tmp/o3m_test_tables_XXXXXX";
static char users[600], items[600];

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  cr_assert_not_null(f);
  fwrite(text, 1, strlen(text), f);
  fclose(f);
}

static void setup(void) {
  cr_assert_not_null(mkdtemp(tmpdir));
  snprintf(users, sizeof users, "%s/users.csv", tmpdir);
  snprintf(items, sizeof items, "%s/items.csv", tmpdir);
  write_file(users, "user_id,a,b\nu0,1,2\nu1,3,-1\nu2,0.5,0.5\n");
  write_file(items, "item_id,p\ni0,10\ni1,-2\n");
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(p);
}

static void teardown(void) { nftw(tmpdir, rm_entry, 8, FTW_DEPTH | FTW_PHYS); }

TestSuite(tables, .init = setup, .fini = teardown);

static o3m_tables *make(double max_norm) {
  o3m_tables_config c = {"fed.conf", "bank", users, items, 3, 0, max_norm, 0, NULL};
  o3m_tables *t;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert_eq(o3m_tables_create(&t, &c, &e), 0, "%s", o3m_err_message(&e));
  unsigned char key[O3M_FEATURES_KEY_BYTES];
  for (int i = 0; i < O3M_FEATURES_KEY_BYTES; i++) key[i] = (unsigned char)(7 * i + 1);
  o3m_tables_set_key(t, key);
  return t;
}

/* The row [user columns, item columns] of (user, i0) in x (3 values). */
static void row(o3m_features *f, const char *user, double *x) {
  const char *it[] = {"i0"};
  cr_assert_eq(o3m_features_fill(f, user, 1, it, x, NULL, NULL), 0);
}

Test(tables, a_bad_file_is_refused_and_the_old_tables_keep_answering) {
  o3m_tables *t = make(1e4);
  o3m_features *cur, *old;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert_eq(o3m_tables_load(t, &cur, &e), 0, "%s", o3m_err_message(&e));
  double x[3];
  row(cur, "u1", x);
  cr_assert(x[0] == 3 && x[1] == -1 && x[2] == 10);

  static const char *const bad[] = {
      "user_id,a,b\nu0,1,2\nu1,3\n",          /* ragged, line 3 */
      "user_id,a\nu0,1\n",                     /* dims 2 instead of 3 */
      "user_id,a,b\nu0,1,2\nu0,3,4\n",         /* a repeated id, line 3 */
      "user_id,a,b\nu0,1,2\nu1,1e300,0\n",     /* above the bound, line 3 */
  };
  static const int code[] = {O3M_EPARSE, O3M_EDIM, O3M_EPARSE, O3M_ERANGE};
  o3m_features *before = cur;
  for (int i = 0; i < 4; i++) {
    write_file(users, bad[i]);
    int rc = o3m_tables_reload(t, NULL, &cur, &old, &e);
    cr_assert_eq(rc, code[i], "file %d: %s: %s", i, o3m_errname(rc), o3m_err_message(&e));
    cr_assert(strstr(e.msg, "refused, old tables kept"), "%s", e.msg);
    if (i != 1) cr_assert(strstr(e.msg, "users.csv:3"), "file %d: %s", i, e.msg);
    cr_assert_eq(cur, before, "a refused reload replaced the tables");
    cr_assert_null(old);
    row(cur, "u1", x);
    cr_assert(x[0] == 3 && x[1] == -1 && x[2] == 10, "the old rows changed");
  }
  o3m_tables_stats st;
  o3m_tables_stats_get(t, cur, &st);
  cr_assert_eq(st.swaps, 0);
  cr_assert_eq(st.refused, 4);
  cr_assert_eq(st.last_reload_ms, 0);
  o3m_features_destroy(cur);
  o3m_tables_destroy(t);
}

Test(tables, a_good_file_is_swapped_in_whole_and_the_counters_continue) {
  o3m_tables *t = make(1e4);
  o3m_features *cur, *old;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert_eq(o3m_tables_load(t, &cur, &e), 0, "%s", o3m_err_message(&e));
  double x[3], dummy_before[3], dummy_again[3];
  row(cur, "u1", x);
  row(cur, "nobody", dummy_before);
  o3m_features *first = cur;

  write_file(users, "user_id,a,b\nu0,1,2\nu1,-6,4\nu2,0.5,0.5\nu9,7,8\n");
  cr_assert_eq(o3m_tables_reload(t, NULL, &cur, &old, &e), 0, "%s", o3m_err_message(&e));
  cr_assert_eq(old, first, "the replaced version is handed back");
  cr_assert_neq(cur, first);
  /* The version handed back still answers as before until the caller frees it. */
  row(old, "u1", x);
  cr_assert(x[0] == 3 && x[1] == -1);
  o3m_features_destroy(old);
  row(cur, "u1", x);
  cr_assert(x[0] == -6 && x[1] == 4 && x[2] == 10, "the changed row");
  row(cur, "u9", x);
  cr_assert(x[0] == 7 && x[1] == 8, "the new row");
  /* An unknown id's dummy comes from the new moments, under the same key:
   * another table gives another dummy, the same table the same one. */
  double dummy_new[3];
  row(cur, "nobody", dummy_new);
  cr_assert(dummy_new[0] != dummy_before[0] || dummy_new[1] != dummy_before[1],
            "the dummy ignores the new moments");
  write_file(users, "user_id,a,b\nu0,1,2\nu1,3,-1\nu2,0.5,0.5\n");
  cr_assert_eq(o3m_tables_reload(t, NULL, &cur, &old, &e), 0, "%s", o3m_err_message(&e));
  o3m_features_destroy(old);
  row(cur, "nobody", dummy_again);
  cr_assert(memcmp(dummy_again, dummy_before, sizeof dummy_again) == 0,
            "the same table under the same key gave another dummy");

  o3m_tables_stats st;
  o3m_tables_stats_get(t, cur, &st);
  cr_assert_eq(st.swaps, 2);
  cr_assert_eq(st.refused, 0);
  cr_assert_gt(st.last_reload_ms, 0);
  /* The six fills made on each version while it was current, over three
   * versions (the one on the replaced version after its swap is not
   * counted: a daemon makes none). */
  cr_assert_eq(st.lookups.lookups, 6, "%llu", (unsigned long long)st.lookups.lookups);
  o3m_features_destroy(cur);
  o3m_tables_destroy(t);
}

/* A file that reports no size (st_size 0, like every /proc file) is
 * counted while it is read: past table_bytes_max it is refused naming the
 * key, before it can take the party's memory. A start's load says the
 * same. */
Test(tables, a_file_longer_than_table_bytes_max_is_refused_while_it_is_read) {
  o3m_tables_config c = {"fed.conf", "bank", "/proc/self/smaps", NULL, 3, 0, 1e4, 64, NULL};
  o3m_tables *t;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert_eq(o3m_tables_create(&t, &c, &e), 0, "%s", o3m_err_message(&e));
  o3m_features *cur = NULL;
  int rc = o3m_tables_load(t, &cur, &e);
  cr_assert_eq(rc, O3M_ERANGE, "%s: %s", o3m_errname(rc), o3m_err_message(&e));
  cr_assert(strstr(o3m_err_message(&e), "table_bytes_max of [party bank] in fed.conf = 64"),
            "%s", o3m_err_message(&e));
  cr_assert(strstr(o3m_err_message(&e), "/proc/self/smaps"), "%s", o3m_err_message(&e));
  cr_assert_null(cur);
  o3m_tables_destroy(t);
}

/* A second reload asked while one runs: from SIGHUP (coalesce) it is kept
 * as exactly one more, which starts when the first is taken; from the RPC
 * (no coalesce) it is refused. Nothing is swapped before a poll. */
Test(tables, a_second_reload_is_coalesced_into_one_more_or_refused) {
  o3m_tables *t = make(1e4);
  o3m_features *cur, *old;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert_eq(o3m_tables_load(t, &cur, &e), 0, "%s", o3m_err_message(&e));
  o3m_features *first = cur;
  cr_assert_eq(o3m_tables_reload_start(t, 1, &e), 0, "%s", o3m_err_message(&e));
  cr_assert_eq(o3m_tables_reload_start(t, 1, &e), 1);
  cr_assert_eq(o3m_tables_reload_start(t, 1, &e), 1);
  cr_assert_eq(o3m_tables_reload_start(t, 0, &e), O3M_ESTATE);
  cr_assert(strstr(o3m_err_message(&e), "already under way"), "%s", o3m_err_message(&e));
  cr_assert_eq(cur, first, "swapped before a poll");
  /* Two swaps in all, however many signals came meanwhile. */
  int swaps = 0;
  for (int i = 0; i < 2000 && (swaps < 2 || o3m_tables_reload_busy(t)); i++) {
    int rc = o3m_tables_reload_poll(t, &cur, &old, &e);
    cr_assert_geq(rc, 0, "%s", o3m_err_message(&e));
    if (rc == 1) {
      o3m_features_destroy(old);
      swaps++;
    }
    struct timespec ts = {0, 5000000};
    nanosleep(&ts, NULL);
  }
  cr_assert_eq(swaps, 2);
  cr_assert_eq(o3m_tables_reload_busy(t), 0);
  o3m_features_destroy(cur);
  o3m_tables_destroy(t);
}

/* A table path that names no regular file is refused at once, naming what
 * it is: a FIFO with no writer does not block the load. */
Test(tables, a_fifo_or_a_directory_is_refused_naming_what_it_is) {
  char fifo[700];
  snprintf(fifo, sizeof fifo, "%s/fifo.csv", tmpdir);
  cr_assert_eq(mkfifo(fifo, 0600), 0);
  const char *paths[] = {fifo, tmpdir, "/dev/zero"};
  const char *kinds[] = {"a FIFO (named pipe)", "a directory", "a character device"};
  for (int i = 0; i < 3; i++) {
    o3m_tables_config c = {"fed.conf", "bank", users, paths[i], 3, 0, 1e4, 0, NULL};
    o3m_tables *t;
    o3m_err e;
    o3m_err_clear(&e);
    cr_assert_eq(o3m_tables_create(&t, &c, &e), 0, "%s", o3m_err_message(&e));
    o3m_features *cur = NULL;
    cr_assert_eq(o3m_tables_load(t, &cur, &e), O3M_EINVAL, "%s", o3m_err_message(&e));
    cr_assert(strstr(o3m_err_message(&e), kinds[i]), "%s", o3m_err_message(&e));
    cr_assert(strstr(o3m_err_message(&e), "not a regular file"), "%s", o3m_err_message(&e));
    o3m_tables_destroy(t);
  }
}

/* Loads path as bank's user table and expects O3M_EPARSE with text in the
 * message. */
static void load_refused_as_parse(const char *path, const char *text) {
  o3m_tables_config c = {"fed.conf", "bank", path, NULL, 3, 0, 1e4, 0, NULL};
  o3m_tables *t;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert_eq(o3m_tables_create(&t, &c, &e), 0, "%s", o3m_err_message(&e));
  o3m_features *cur = NULL;
  int rc = o3m_tables_load(t, &cur, &e);
  cr_assert_eq(rc, O3M_EPARSE, "%s: %s", o3m_errname(rc), o3m_err_message(&e));
  cr_assert(strstr(o3m_err_message(&e), text), "%s", o3m_err_message(&e));
  o3m_features_destroy(cur);
  o3m_tables_destroy(t);
}

/* A file under table_bytes_max without a line end (a sparse file of
 * zeros) is refused once a line passes O3M_MAX_TABLE_LINE, so that one
 * line cannot hold the whole file in memory. */
Test(tables, a_file_without_line_ends_is_refused_at_the_line_limit) {
  char sparse[700];
  snprintf(sparse, sizeof sparse, "%s/zeros.csv", tmpdir);
  FILE *f = fopen(sparse, "w");
  cr_assert_not_null(f);
  cr_assert_eq(ftruncate(fileno(f), 256LL << 20), 0);
  fclose(f);
  load_refused_as_parse(sparse, "zeros.csv: a line longer than 1048576 bytes");
}

/* A quoted field over many short lines is one field to libcsv, which keeps
 * it whole: the line limit holds for the lines of one row together, so a
 * file of short lines cannot make one row as large as table_bytes_max
 * either. Here 3 MiB of 100-byte lines inside one quoted id. */
Test(tables, a_quoted_field_over_many_lines_is_refused_at_the_line_limit) {
  char path[700];
  snprintf(path, sizeof path, "%s/quoted.csv", tmpdir);
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f);
  fputs("user_id,a,b,c\n\"u", f);
  char line[101];
  memset(line, 'x', 99);
  line[99] = '\n';
  line[100] = '\0';
  for (int i = 0; i < (3 << 20) / 100; i++) fputs(line, f);
  fputs("\",1,2,3\n", f);
  fclose(f);
  load_refused_as_parse(path, "quoted.csv:2: a row longer than 1048576 bytes");
}
