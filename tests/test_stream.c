/* test_stream.c -- the full-information stream file reader. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "eval_stream.h"

static char path[64];

static const char *write_tmp(const char *text) {
  strcpy(path, "/tmp/o3m_stream_XXXXXX");
  int fd = mkstemp(path);
  cr_assert_geq(fd, 0);
  cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  close(fd);
  return path;
}

/* Reads the whole file; returns the final code (0 at clean EOF) and fills
 * e. *rounds counts complete rounds. */
static int read_all(const char *text, int *rounds, o3m_err *e) {
  eval_stream *s;
  o3m_err_clear(e);
  int rc = eval_stream_open(&s, write_tmp(text), e);
  *rounds = 0;
  if (rc) {
    unlink(path);
    return rc;
  }
  long r;
  const double *X, *w;
  while ((rc = eval_stream_next(s, &r, &X, &w, e)) == 1) (*rounds)++;
  eval_stream_close(s);
  unlink(path);
  return rc;
}

Test(stream, reads_rounds_and_values) {
  const char *text = "round,arm,reward,x1,x2\n"
                     "0,0,1.5,1,2\n0,1,0,3,4\n"
                     "1,0,0,5,6\n1,1,1,7,8e-1\n";
  eval_stream *s;
  cr_assert_eq(eval_stream_open(&s, write_tmp(text), NULL), O3M_OK);
  cr_assert_eq(eval_stream_dim(s), 2);
  long r;
  const double *X, *w;
  cr_assert_eq(eval_stream_next(s, &r, &X, &w, NULL), 1);
  cr_assert_eq(eval_stream_arms(s), 2);
  cr_assert_eq(r, 0);
  cr_assert_eq(w[0], 1.5);
  cr_assert_eq(X[3], 4.0);
  cr_assert_eq(eval_stream_next(s, &r, &X, &w, NULL), 1);
  cr_assert_eq(r, 1);
  cr_assert_eq(X[0], 5.0);
  cr_assert_eq(X[3], 0.8);
  cr_assert_eq(w[1], 1.0);
  cr_assert_eq(eval_stream_next(s, &r, &X, &w, NULL), 0);
  eval_stream_close(s);
  unlink(path);
}

static void expect_error(const char *text, int code, const char *needle) {
  int rounds;
  o3m_err e;
  int rc = read_all(text, &rounds, &e);
  cr_assert_eq(rc, code, "expected %s, got %s (%s)", o3m_errname(code), o3m_errname(rc), e.msg);
  cr_assert(strstr(e.msg, needle) != NULL, "message '%s' lacks '%s'", e.msg, needle);
}

Test(stream, errors_name_the_line) {
  const char *h = "round,arm,reward,x1,x2\n";
  char buf[512];
  snprintf(buf, sizeof buf, "%s0,0,1,1\n", h);
  expect_error(buf, O3M_EPARSE, ":2: 4 fields, expected 5");
  snprintf(buf, sizeof buf, "%s0,0,1,1,2,3\n", h);
  expect_error(buf, O3M_EPARSE, ":2: more than 5 fields");
  snprintf(buf, sizeof buf, "%s0,0,1,1,2\n0,1,1,nan,2\n", h);
  expect_error(buf, O3M_ENONFINITE, ":3: field 4 is not finite");
  snprintf(buf, sizeof buf, "%s0,0,1,1,2\n0,1,1,abc,2\n", h);
  expect_error(buf, O3M_EPARSE, ":3: field 4 is not a number");
  snprintf(buf, sizeof buf, "%s0,0,1,1,2\n0,2,1,1,2\n", h);
  expect_error(buf, O3M_EPARSE, ":3: arm 2, expected 1");
  snprintf(buf, sizeof buf, "%s0,0,1,1,2\n0,1,1,1,2\n1,0,1,1,2\n", h);
  expect_error(buf, O3M_EPARSE, "round 1 has 1 arms, expected K = 2");
  snprintf(buf, sizeof buf, "%s0,0,1,1,2\n0,1,1,1,2\n1,0,1,1,2\n1,1,1,1,2\n1,2,1,1,2\n", h);
  expect_error(buf, O3M_EPARSE, ":6: round 1 has more than K = 2 arms");
  snprintf(buf, sizeof buf, "%s5,0,1,1,2\n5,1,1,1,2\n5,0,1,1,2\n5,1,1,1,2\n", h);
  expect_error(buf, O3M_EPARSE, "round 5 does not follow round 5");
  snprintf(buf, sizeof buf, "%s0,0,1,1,2\n1,1,1,1,2\n", h);
  expect_error(buf, O3M_EPARSE, ":3: round 1 inside round 0");
  expect_error("round,arm,reward,x1,x3\n", O3M_EPARSE, ":1: header column 5 should be 'x2'");
  expect_error("", O3M_EPARSE, ":1: empty file");
}

Test(stream, write_then_read_is_bit_exact) {
  /* Extremes that are accepted: the magnitude limit (O3M_MAX_INPUT_ABS,
   * 1e150) and a subnormal. */
  double X[6] = {0.1, 1.0 / 3.0, -2.5e-300, 1e150, 3.14159265358979, -4.9e-324};
  double r[3] = {0.7, -1.0 / 7.0, 0};
  strcpy(path, "/tmp/o3m_stream_XXXXXX");
  int fd = mkstemp(path);
  FILE *f = fdopen(fd, "w");
  eval_stream_write_header(f, 2);
  eval_stream_write_round(f, 0, 3, 2, X, r);
  eval_stream_write_round(f, 1, 3, 2, X, r);
  fclose(f);
  eval_stream *s;
  cr_assert_eq(eval_stream_open(&s, path, NULL), O3M_OK);
  long rr;
  const double *Xr, *wr;
  for (int round = 0; round < 2; round++) {
    cr_assert_eq(eval_stream_next(s, &rr, &Xr, &wr, NULL), 1);
    cr_assert_eq(memcmp(Xr, X, sizeof X), 0);
    cr_assert_eq(memcmp(wr, r, sizeof r), 0);
  }
  eval_stream_close(s);
  unlink(path);
}
