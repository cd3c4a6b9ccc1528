/* test_error.c -- the error table: every code has a distinct name and
 * message, and o3m_err carries detail. */
#include <criterion/criterion.h>
#include <string.h>

#include "o3m_error.h"

Test(error, every_code_has_a_distinct_name_and_message) {
  int codes[] = {
#define X(n, m) O3M_E##n,
      O3M_ERRNO_MAP(X)
#undef X
  };
  size_t n = sizeof codes / sizeof codes[0];
  for (size_t i = 0; i < n; i++) {
    cr_assert_lt(codes[i], 0);
    cr_assert_str_neq(o3m_strerror(codes[i]), "unknown error");
    cr_assert_str_neq(o3m_errname(codes[i]), "UNKNOWN");
    for (size_t j = 0; j < i; j++) {
      cr_assert_neq(codes[i], codes[j]);
      cr_assert_str_neq(o3m_errname(codes[i]), o3m_errname(codes[j]));
    }
  }
  cr_assert_str_eq(o3m_errname(O3M_ENOMEM), "NOMEM");
  cr_assert_str_eq(o3m_strerror(12345), "unknown error");
}

Test(error, err_set_returns_code_and_keeps_detail) {
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert_str_eq(o3m_err_message(&e), "success");
  int rc = o3m_err_set(&e, O3M_EPARSE, "line %d: bad", 12);
  cr_assert_eq(rc, O3M_EPARSE);
  cr_assert_eq(e.code, O3M_EPARSE);
  cr_assert_str_eq(o3m_err_message(&e), "line 12: bad");
  cr_assert_eq(o3m_err_set(NULL, O3M_EIO, "ignored"), O3M_EIO);
}

Test(error, err_set_at_names_the_file_and_line) {
  o3m_err e;
  cr_assert_eq(o3m_err_set_at(&e, O3M_EPARSE, "users.csv", 7, "field %d: '%s'", 2, "x"),
               O3M_EPARSE);
  cr_assert_str_eq(o3m_err_message(&e), "users.csv:7: field 2: 'x'");
  cr_assert_eq(o3m_err_set_at(&e, O3M_EIO, "users.csv", 0, "cannot open"), O3M_EIO);
  cr_assert_eq(e.code, O3M_EIO);
  cr_assert_str_eq(o3m_err_message(&e), "users.csv: cannot open");
  cr_assert_eq(o3m_err_set_at(NULL, O3M_EIO, "f", 1, "ignored"), O3M_EIO);
}
