/* test_catalog.c -- the disjoint model's items catalog (ap_catalog.h).
 *
 * Each test writes a small catalog file into a fresh temporary directory and
 * loads it: lookups of every id and of ids the file does not list, the line
 * ends it accepts, and each refusal with the file and line its message must
 * name. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ap_catalog.h"

static char dir[64];
static char path[128];

static void setup(void) {
  snprintf(dir, sizeof dir, "/tmp/o3m_catalog_XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/items.txt", dir);
}

static void teardown(void) {
  unlink(path);
  rmdir(dir);
}

TestSuite(catalog, .init = setup, .fini = teardown);

/* Writes n bytes of text as the catalog file. */
static void write_catalog(const char *text, size_t n) {
  FILE *f = fopen(path, "wb");
  cr_assert_not_null(f);
  cr_assert_eq(fwrite(text, 1, n, f), n);
  cr_assert_eq(fclose(f), 0);
}

/* Loads text and expects the refusal code with want in the message. */
static void expect_refusal(const char *text, size_t n, int max_arms, int code, const char *want) {
  write_catalog(text, n);
  ap_catalog *c = (ap_catalog *)1;
  o3m_err e;
  o3m_err_clear(&e);
  int rc = ap_catalog_load(&c, path, max_arms, &e);
  cr_assert_eq(rc, code, "got %s, expected %s: %s", o3m_errname(rc), o3m_errname(code), e.msg);
  cr_assert_null(c);
  cr_assert(strstr(e.msg, want) != NULL, "message '%s' lacks '%s'", e.msg, want);
  cr_assert(strstr(e.msg, path) != NULL, "message '%s' lacks the path", e.msg);
}

Test(catalog, finds_every_line_as_its_arm) {
  const char text[] = "apple\nbanana\r\ncherry";
  write_catalog(text, sizeof text - 1);
  ap_catalog *c;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert_eq(ap_catalog_load(&c, path, 10, &e), 0, "%s", e.msg);
  cr_assert_eq(ap_catalog_size(c), 3);
  cr_assert_eq(ap_catalog_find(c, "apple"), 0);
  cr_assert_eq(ap_catalog_find(c, "banana"), 1);
  cr_assert_eq(ap_catalog_find(c, "cherry"), 2);
  cr_assert_str_eq(ap_catalog_id(c, 1), "banana");
  cr_assert_eq(ap_catalog_find(c, "durian"), -1);
  cr_assert_eq(ap_catalog_find(c, "banana\r"), -1);
  cr_assert_eq(ap_catalog_find(c, ""), -1);
  ap_catalog_destroy(c);
}

Test(catalog, many_items_all_found) {
  enum { N = 5000 };
  static char text[N * 8];
  size_t len = 0;
  for (int i = 0; i < N; i++) len += (size_t)snprintf(text + len, sizeof text - len, "i%d\n", i);
  write_catalog(text, len);
  ap_catalog *c;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert_eq(ap_catalog_load(&c, path, N, &e), 0, "%s", e.msg);
  cr_assert_eq(ap_catalog_size(c), N);
  char id[16];
  for (int i = 0; i < N; i++) {
    snprintf(id, sizeof id, "i%d", i);
    cr_assert_eq(ap_catalog_find(c, id), i, "%s", id);
  }
  snprintf(id, sizeof id, "i%d", N);
  cr_assert_eq(ap_catalog_find(c, id), -1);
  ap_catalog_destroy(c);
}

Test(catalog, duplicate_names_both_lines) {
  const char text[] = "a\nb\nc\nb\n";
  expect_refusal(text, sizeof text - 1, 10, O3M_EPARSE, ":4: duplicate item id (first on line 2)");
}

Test(catalog, empty_line_names_its_line) {
  const char text[] = "a\n\nc\n";
  expect_refusal(text, sizeof text - 1, 10, O3M_EPARSE, ":2: empty item id");
}

Test(catalog, nul_in_an_id_names_its_line) {
  const char text[] = "a\nb\0x\n";
  expect_refusal(text, sizeof text - 1, 10, O3M_EPARSE, ":2: item id longer than");
}

Test(catalog, overlong_id_names_its_line) {
  char text[O3M_MAX_ID + 8];
  text[0] = 'a';
  text[1] = '\n';
  memset(text + 2, 'x', O3M_MAX_ID + 1);
  text[O3M_MAX_ID + 3] = '\n';
  expect_refusal(text, O3M_MAX_ID + 4, 10, O3M_EPARSE, ":2: item id longer than");
}

Test(catalog, longest_id_is_accepted) {
  char text[O3M_MAX_ID + 1];
  memset(text, 'x', O3M_MAX_ID);
  text[O3M_MAX_ID] = '\n';
  write_catalog(text, sizeof text);
  ap_catalog *c;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert_eq(ap_catalog_load(&c, path, 1, &e), 0, "%s", e.msg);
  cr_assert_eq(ap_catalog_size(c), 1);
  ap_catalog_destroy(c);
}

Test(catalog, empty_file_and_too_many_items) {
  expect_refusal("", 0, 10, O3M_EPARSE, "the items catalog is empty");
  const char text[] = "a\nb\nc\n";
  expect_refusal(text, sizeof text - 1, 2, O3M_EPARSE, "3 items, at most 2 arms");
}

Test(catalog, missing_file) {
  ap_catalog *c = (ap_catalog *)1;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert_eq(ap_catalog_load(&c, path, 10, &e), O3M_EIO, "%s", e.msg);
  cr_assert_null(c);
  cr_assert(strstr(e.msg, "cannot open the items catalog") != NULL, "%s", e.msg);
}
