/* test_cli.c -- the shared command-line helpers (common/o3m_cli.h): the one
 * list splitter of address and name lists. */
#include <criterion/criterion.h>
#include <string.h>

#include "o3m_cli.h"

/* Splits text (copied) with room for max entries; returns the result. */
static int split(const char *text, char **out, int max, char *buf, size_t len) {
  snprintf(buf, len, "%s", text);
  return o3m_cli_split_list(buf, out, max);
}

Test(cli, split_list_trims_and_counts) {
  char buf[128], *v[4];
  cr_assert_eq(split("127.0.0.1:7000", v, 4, buf, sizeof buf), 1);
  cr_assert_str_eq(v[0], "127.0.0.1:7000");
  cr_assert_eq(split(" a:1 ,\tb:2,c:3 ", v, 4, buf, sizeof buf), 3);
  cr_assert_str_eq(v[0], "a:1");
  cr_assert_str_eq(v[1], "b:2");
  cr_assert_str_eq(v[2], "c:3");
  cr_assert_eq(split("a,b,c,d", v, 4, buf, sizeof buf), 4);
  cr_assert_str_eq(v[3], "d");
}

/* An empty entry or one too many is refused, naming its position (-K). */
Test(cli, split_list_refuses_empty_and_surplus_entries) {
  char buf[128], *v[4];
  cr_assert_eq(split("", v, 4, buf, sizeof buf), -1);
  cr_assert_eq(split(" ", v, 4, buf, sizeof buf), -1);
  cr_assert_eq(split("a,,b", v, 4, buf, sizeof buf), -2);
  cr_assert_eq(split("a,b,", v, 4, buf, sizeof buf), -3);
  cr_assert_eq(split("a, ,b", v, 4, buf, sizeof buf), -2);
  cr_assert_eq(split("a,b,c,d,e", v, 4, buf, sizeof buf), -5);
  cr_assert_eq(split("a,b", v, 1, buf, sizeof buf), -2);
}
