/* test_input_edges.c -- the input edges of the offline readers, one test per
 * case, each checked in `simulate`'s stream reader (eval_stream) and in the
 * replay readers (eval_reader_*): every case is either accepted by both or
 * refused by both with an error naming the file and line (and the value).
 *
 *   subnormal values          accepted (strtod's underflow is not an error)
 *   1e200                     refused at parse: beyond O3M_MAX_INPUT_ABS
 *   100,001..131,072 arms     refused: more than 100,000 arms
 *   a directory               refused at open: "is a directory"
 *   one trailing blank line   accepted (skipped)
 *   a header-only file        refused by the commands: no rounds / events
 *   rewards of 1e308          refused at parse, so no sum prints inf */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "eval_cmds.h"
#include "eval_reader.h"
#include "eval_stream.h"

static char tmp_paths[8][64];
static int n_tmp;

/* Writes text to a fresh temporary file, removed by cleanup(). */
static const char *write_tmp(const char *text) {
  cr_assert(n_tmp < 8);
  char *path = tmp_paths[n_tmp++];
  strcpy(path, "/tmp/o3m_test_edges_XXXXXX");
  int fd = mkstemp(path);
  cr_assert(fd >= 0);
  size_t n = strlen(text);
  cr_assert_eq(write(fd, text, n), (ssize_t)n);
  close(fd);
  return path;
}

static void cleanup(void) {
  for (int i = 0; i < n_tmp; i++) unlink(tmp_paths[i]);
  n_tmp = 0;
}

TestSuite(edges, .fini = cleanup);

/* Reads every round of a stream file; returns the count or the error. */
static int stream_rounds(const char *text, o3m_err *e) {
  eval_stream *s;
  int rc = eval_stream_open(&s, write_tmp(text), e);
  if (rc) return rc;
  long rnd;
  const double *X, *r;
  int n = 0;
  while ((rc = eval_stream_next(s, &rnd, &X, &r, e)) == 1) n++;
  eval_stream_close(s);
  return rc < 0 ? rc : n;
}

#define OBD_ITEMS_HEAD ",item_id,item_feature_0\n"
#define OBD_LOG ",item_id,position,click,propensity_score,user_feature_0\n0,0,1,1,0.5,u\n"

/* Opens an OBD reader on the item table text and reads every event. */
static int obd_events(const char *items, const char *log, o3m_err *e) {
  const char *ip = write_tmp(items), *lp = write_tmp(log);
  eval_reader *r;
  int rc = eval_reader_open_obd(&r, lp, ip, NULL, e);
  if (rc) return rc;
  eval_event ev;
  int n = 0;
  while ((rc = eval_reader_next(r, &ev, e)) == 1) n++;
  eval_reader_destroy(r);
  return rc < 0 ? rc : n;
}

Test(edges, subnormal_values_are_accepted) {
  o3m_err e;
  eval_stream *s;
  cr_assert_eq(eval_stream_open(&s, write_tmp("round,arm,reward,x1\n0,0,4.9e-324,2.2e-310\n"),
                                &e), 0, "%s", e.msg);
  long rnd;
  const double *X, *r;
  cr_assert_eq(eval_stream_next(s, &rnd, &X, &r, &e), 1, "a subnormal refused: %s", e.msg);
  cr_expect_eq(r[0], 4.9e-324);
  cr_expect_eq(X[0], 2.2e-310);
  eval_stream_close(s);
  /* The OBD item table's numeric feature, through the replay readers'
   * parser. */
  cr_expect_eq(obd_events(OBD_ITEMS_HEAD "0,0,4.9e-324\n", OBD_LOG, &e), 1, "%s", e.msg);
}

Test(edges, huge_values_name_the_line_and_value) {
  o3m_err e;
  cr_expect_eq(stream_rounds("round,arm,reward,x1\n0,0,1,1\n1,0,1,1e200\n", &e), O3M_ERANGE);
  cr_expect(strstr(e.msg, ":3: field 4 value 1e+200 exceeds the magnitude limit 1e+150"), "%s",
            e.msg);
  /* simulate stops there with 1 (it used to say "round 0: policy failed"). */
  char *argv[] = {"simulate", (char *)write_tmp("round,arm,reward,x1\n0,0,1,1e200\n"), NULL};
  cr_expect_eq(eval_simulate_main(2, argv), 1);
  cr_expect_eq(obd_events(OBD_ITEMS_HEAD "0,0,1e200\n", OBD_LOG, &e), O3M_ERANGE);
  cr_expect(strstr(e.msg, ":2: item_feature_0 '1e200' is not a finite number of magnitude at "
                          "most 1e+150"), "%s", e.msg);
}

/* A stream of one round of K arms (d = 1). */
static char *round_of(int K) {
  size_t cap = 32 + (size_t)K * 24, off = 0;
  char *t = malloc(cap);
  cr_assert_not_null(t);
  off += (size_t)snprintf(t, cap, "round,arm,reward,x1\n");
  for (int a = 0; a < K; a++) off += (size_t)snprintf(t + off, cap - off, "0,%d,0,1\n", a);
  return t;
}

Test(edges, more_than_100000_arms_are_refused) {
  o3m_err e;
  char *ok = round_of(EVAL_STREAM_MAX_ARMS), *over = round_of(EVAL_STREAM_MAX_ARMS + 1);
  cr_expect_eq(stream_rounds(ok, &e), 1, "100,000 arms refused: %s", e.msg);
  /* 100,001 used to pass: the capacity had doubled to 131,072. */
  cr_expect_eq(stream_rounds(over, &e), O3M_ERANGE);
  cr_expect(strstr(e.msg, ":100002: more than 100000 arms in one round"), "%s", e.msg);
  free(ok);
  free(over);
}

Test(edges, a_directory_is_not_an_empty_file) {
  o3m_err e;
  eval_stream *s;
  cr_expect_eq(eval_stream_open(&s, "/tmp", &e), O3M_EIO);
  cr_expect(strstr(e.msg, "/tmp: is a directory"), "%s", e.msg);
  eval_reader *r;
  cr_expect_eq(eval_reader_open_news(&r, "/tmp", &e), O3M_EIO);
  cr_expect(strstr(e.msg, "/tmp: is a directory"), "%s", e.msg);
  cr_expect_eq(eval_reader_open_obd(&r, "/tmp", "/tmp", NULL, &e), O3M_EIO);
  cr_expect(strstr(e.msg, "/tmp: is a directory"), "%s", e.msg);
}

Test(edges, one_trailing_blank_line_is_accepted) {
  o3m_err e;
  cr_expect_eq(stream_rounds("round,arm,reward,x1\n0,0,1,1\n0,1,0,2\n1,0,1,1\n1,1,0,2\n\n", &e),
               2, "%s", e.msg);
  cr_expect_eq(stream_rounds("round,arm,reward,x1\n0,0,1,1\r\n\r\n", &e), 1, "%s", e.msg);
  cr_expect_eq(obd_events(OBD_ITEMS_HEAD "0,0,1\n\n", OBD_LOG "\n", &e), 1, "%s", e.msg);
}

Test(edges, a_header_only_file_is_an_error) {
  char *argv[] = {"simulate", (char *)write_tmp("round,arm,reward,x1\n"), NULL};
  cr_expect_eq(eval_simulate_main(2, argv), 1, "simulate on a header-only file must fail");
  const char *items = write_tmp(OBD_ITEMS_HEAD "0,0,1\n");
  char *rargv[] = {"replay", "--format", "obd", "--input",
                   (char *)write_tmp(",item_id,position,click\n"), "--item-context",
                   (char *)items, NULL};
  cr_expect_eq(eval_replay_main(7, rargv), 1, "replay on a header-only log must fail");
  /* The item table with a header only is refused when opened. */
  o3m_err e;
  cr_expect_eq(obd_events(OBD_ITEMS_HEAD, OBD_LOG, &e), O3M_EPARSE);
  cr_expect(strstr(e.msg, ": no items"), "%s", e.msg);
}

Test(edges, rewards_of_1e308_are_refused) {
  o3m_err e;
  cr_expect_eq(stream_rounds("round,arm,reward,x1\n0,0,1e308,1\n1,0,1e308,1\n", &e), O3M_ERANGE);
  cr_expect(strstr(e.msg, ":2: field 3 value 1e+308 exceeds the magnitude limit"), "%s", e.msg);
  char *argv[] = {"simulate", (char *)write_tmp("round,arm,reward,x1\n0,0,1e308,1\n"), NULL};
  cr_expect_eq(eval_simulate_main(2, argv), 1);
}
