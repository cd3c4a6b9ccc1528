/* eval_reader_news.c -- the news10k log (Li et al.'s classic replay test bed).
 *
 * Each line is one logged round of a uniformly random policy over 10 arms:
 * "arm reward f(1,1) .. f(1,10) f(2,1) .. f(10,10)", integers separated by
 * spaces (the shipped file also has a trailing space and CRLF line ends,
 * both accepted). arm is 1..10 and becomes 0..9; reward is 0 or 1; the 10
 * features of arm a are its context, used as they are (raw counts, no
 * scaling: the data set is conventionally used that way, and LinUCB is
 * scale-aware only through alpha and lambda). K = 10, d = 10.
 *
 * A line that is blank is skipped and counted; anything else malformed (a
 * field count other than 102, a non-integer, an arm outside 1..10, a reward
 * other than 0/1) is an error naming the line. The contexts differ per row
 * and per arm, so this reader has no additive split. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval_reader_impl.h"

#define NEWS_K 10
#define NEWS_D 10
#define NEWS_FIELDS (2 + NEWS_K * NEWS_D)

typedef struct news_reader {
  eval_reader base;
  char *fields[NEWS_FIELDS + 1];
} news_reader;

static int news_parse(eval_reader *r, char *line, eval_event *ev, o3m_err *e) {
  news_reader *nr = (news_reader *)r;
  eval_lines *L = &r->lines;
  int n = eval__split_ws(line, nr->fields, NEWS_FIELDS + 1);
  if (n == 0) return 0; /* skipped */
  if (n != NEWS_FIELDS)
    return o3m_err_set(e, O3M_EPARSE, "%s:%lld: expected %d fields (arm, reward, %d x %d "
                       "features), got %d", L->path, L->line, NEWS_FIELDS, NEWS_K, NEWS_D, n);
  long long v[NEWS_FIELDS];
  for (int i = 0; i < NEWS_FIELDS; i++)
    if (eval__parse_ll(nr->fields[i], &v[i]))
      return o3m_err_set(e, O3M_EPARSE, "%s:%lld: field %d ('%.40s') is not an integer",
                         L->path, L->line, i + 1, nr->fields[i]);
  if (v[0] < 1 || v[0] > NEWS_K)
    return o3m_err_set(e, O3M_ERANGE, "%s:%lld: arm %lld out of range 1..%d", L->path,
                       L->line, v[0], NEWS_K);
  if (v[1] != 0 && v[1] != 1)
    return o3m_err_set(e, O3M_ERANGE, "%s:%lld: reward %lld is not 0 or 1", L->path, L->line,
                       v[1]);
  for (int i = 0; i < NEWS_K * NEWS_D; i++) r->X[i] = (double)v[2 + i];
  ev->arm = (int)v[0] - 1;
  ev->reward = (double)v[1];
  ev->X = r->X;
  ev->w = NULL;
  return 1;
}

static void news_destroy(eval_reader *r) { free(r); }

static const eval_reader_ops news_ops = {news_parse, news_destroy};

int eval_reader_open_news(eval_reader **out, const char *path, o3m_err *e) {
  *out = NULL;
  news_reader *nr = calloc(1, sizeof *nr);
  if (!nr) return o3m_err_set(e, O3M_ENOMEM, "%s: out of memory", path);
  eval_reader *r = &nr->base;
  r->ops = &news_ops;
  r->K = NEWS_K;
  r->d = NEWS_D;
  r->skip_reason = "blank line";
  snprintf(r->desc, sizeof r->desc, "news10k: %d arms, %d raw integer features per arm",
           NEWS_K, NEWS_D);
  int rc = eval_lines_open(&r->lines, path, e);
  if (rc) {
    free(nr);
    return rc;
  }
  r->X = malloc(sizeof(double) * NEWS_K * NEWS_D);
  if (!r->X) {
    eval_reader_destroy(r);
    return o3m_err_set(e, O3M_ENOMEM, "%s: out of memory", path);
  }
  *out = r;
  return O3M_OK;
}
