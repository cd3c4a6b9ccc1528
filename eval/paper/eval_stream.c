/* eval_stream.c -- see eval_stream.h.
 *
 * Rows are parsed one at a time into the next slot of the round buffer. A row
 * with arm 0 closes the round in progress; since it already sits in the
 * buffer, the reader remembers it as the first row of the next round
 * ("carry") and moves it to slot 0 on the next call. */
#include "eval_stream.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "o3m_limits.h"

struct eval_stream {
  FILE *f;
  int own_file;
  const char *path;
  int d;
  int K;      /* 0 until the first round is complete */
  int cap;    /* rows the buffers hold */
  double *X;  /* cap x d */
  double *r;  /* cap */
  char *line;
  size_t line_cap;
  long lineno;
  long last_round;
  int have_last;
  int carry;  /* a parsed row waiting in slot `carry_slot` */
  int carry_slot;
  long carry_round;
  int eof;
};

/* Parses one field: a finite decimal number followed by ',' or end of line.
 * Underflow is not an error (a subnormal value, or one rounding to 0, is
 * taken as strtod gives it, as the replay readers do); a value beyond
 * O3M_MAX_INPUT_ABS is O3M_ERANGE, with *out set for the message. */
static int parse_field(char **p, double *out) {
  char *end;
  double v = strtod(*p, &end);
  if (end == *p) return O3M_EPARSE;
  if (*end != ',' && *end != '\0' && *end != '\n' && *end != '\r') return O3M_EPARSE;
  if (!isfinite(v)) return O3M_ENONFINITE;
  *out = v;
  if (fabs(v) > O3M_MAX_INPUT_ABS) return O3M_ERANGE;
  *p = (*end == ',') ? end + 1 : end;
  return O3M_OK;
}

/* Makes room for need rows. The limit is checked before the capacity, which
 * grows by doubling and may exceed need (it once let 100,001..131,072 arms
 * through), and the capacity never grows past the limit. */
static int grow(eval_stream *s, int need, o3m_err *e) {
  if (need > EVAL_STREAM_MAX_ARMS)
    return o3m_err_set(e, O3M_ERANGE, "%s:%ld: more than %d arms in one round", s->path,
                       s->lineno, EVAL_STREAM_MAX_ARMS);
  if (need <= s->cap) return O3M_OK;
  int cap = s->cap ? s->cap * 2 : 16;
  if (cap < need) cap = need;
  if (cap > EVAL_STREAM_MAX_ARMS) cap = EVAL_STREAM_MAX_ARMS;
  double *X = realloc(s->X, sizeof(double) * (size_t)cap * s->d);
  if (!X) return o3m_err_set(e, O3M_ENOMEM, "%s: out of memory", s->path);
  s->X = X;
  double *r = realloc(s->r, sizeof(double) * cap);
  if (!r) return o3m_err_set(e, O3M_ENOMEM, "%s: out of memory", s->path);
  s->r = r;
  s->cap = cap;
  return O3M_OK;
}

int eval_stream_open(eval_stream **out, const char *path, o3m_err *e) {
  *out = NULL;
  eval_stream *s = calloc(1, sizeof *s);
  if (!s) return o3m_err_set(e, O3M_ENOMEM, "out of memory");
  s->path = path;
  if (!strcmp(path, "-")) {
    s->f = stdin;
  } else {
    s->f = fopen(path, "r");
    s->own_file = 1;
  }
  if (!s->f) {
    int rc = o3m_err_set(e, O3M_EIO, "%s: cannot open: %s", path, strerror(errno));
    free(s);
    return rc;
  }
  struct stat st;
  if (fstat(fileno(s->f), &st) == 0 && S_ISDIR(st.st_mode)) {
    int rc = o3m_err_set(e, O3M_EIO, "%s: is a directory, expected a stream file", path);
    eval_stream_close(s);
    return rc;
  }
  errno = 0;
  ssize_t n = getline(&s->line, &s->line_cap, s->f);
  s->lineno = 1;
  int rc = O3M_OK;
  if (n < 0 && ferror(s->f)) {
    rc = o3m_err_set(e, O3M_EIO, "%s: cannot read: %s", path, strerror(errno));
  } else if (n <= 0) {
    rc = o3m_err_set(e, O3M_EPARSE, "%s:1: empty file, expected header round,arm,reward,x1..xd",
                     path);
  } else if (strncmp(s->line, "round,arm,reward,", 17) != 0) {
    rc = o3m_err_set(e, O3M_EPARSE, "%s:1: header must start with 'round,arm,reward,'", path);
  } else {
    /* d = number of x columns; they must be named x1..xd in order */
    char *p = s->line + 17;
    int d = 0;
    while (*p && *p != '\n' && *p != '\r') {
      char want[32];
      int wl = snprintf(want, sizeof want, "x%d", d + 1);
      if (strncmp(p, want, wl) != 0 || (p[wl] != ',' && p[wl] != '\n' && p[wl] != '\r' &&
                                        p[wl] != '\0')) {
        rc = o3m_err_set(e, O3M_EPARSE, "%s:1: header column %d should be '%s'", path, d + 4,
                         want);
        break;
      }
      d++;
      p += wl;
      if (*p == ',') p++;
    }
    if (!rc && (d < 1 || d > 4096))
      rc = o3m_err_set(e, O3M_EPARSE, "%s:1: %d context columns, expected 1..4096", path, d);
    s->d = d;
  }
  if (!rc) rc = grow(s, 16, e);
  if (rc) {
    eval_stream_close(s);
    return rc;
  }
  *out = s;
  return O3M_OK;
}

void eval_stream_close(eval_stream *s) {
  if (!s) return;
  if (s->own_file && s->f) fclose(s->f);
  free(s->line);
  free(s->X);
  free(s->r);
  free(s);
}

int eval_stream_dim(const eval_stream *s) { return s->d; }
int eval_stream_arms(const eval_stream *s) { return s->K; }

/* Reads and parses one data line into slot `slot`. Returns 1, 0 at EOF, or
 * an error. */
static int read_row(eval_stream *s, int slot, long *round, long *arm, o3m_err *e) {
  ssize_t n;
  /* Blank lines (a trailing one, as editors leave) are skipped, as the
   * replay readers skip them. */
  do {
    errno = 0;
    n = getline(&s->line, &s->line_cap, s->f);
    if (n < 0) {
      if (ferror(s->f))
        return o3m_err_set(e, O3M_EIO, "%s: read failed after line %ld: %s", s->path, s->lineno,
                           strerror(errno));
      return 0;
    }
    s->lineno++;
  } while (s->line[0] == '\n' || (s->line[0] == '\r' && s->line[1] == '\n'));
  char *p = s->line;
  double v;
  int rc = grow(s, slot + 1, e);
  if (rc) return rc;
  double *x = s->X + (size_t)slot * s->d;
  char *end;
  errno = 0;
  *round = strtol(p, &end, 10);
  if (end == p || *end != ',' || errno)
    return o3m_err_set(e, O3M_EPARSE, "%s:%ld: field 1 (round) is not an integer", s->path,
                       s->lineno);
  p = end + 1;
  *arm = strtol(p, &end, 10);
  if (end == p || *end != ',' || errno)
    return o3m_err_set(e, O3M_EPARSE, "%s:%ld: field 2 (arm) is not an integer", s->path,
                       s->lineno);
  p = end + 1;
  for (int i = 0; i < s->d + 1; i++) {
    if (*p == '\0' || *p == '\n' || *p == '\r')
      return o3m_err_set(e, O3M_EPARSE, "%s:%ld: %d fields, expected %d", s->path, s->lineno,
                         i + 2, s->d + 3);
    rc = parse_field(&p, &v);
    if (rc == O3M_ERANGE)
      return o3m_err_set(e, rc, "%s:%ld: field %d value %g exceeds the magnitude limit %g",
                         s->path, s->lineno, i + 3, v, O3M_MAX_INPUT_ABS);
    if (rc == O3M_ENONFINITE)
      return o3m_err_set(e, rc, "%s:%ld: field %d is not finite", s->path, s->lineno, i + 3);
    if (rc)
      return o3m_err_set(e, rc, "%s:%ld: field %d is not a number", s->path, s->lineno, i + 3);
    if (i == 0)
      s->r[slot] = v;
    else
      x[i - 1] = v;
  }
  if (*p != '\0' && *p != '\n' && *p != '\r')
    return o3m_err_set(e, O3M_EPARSE, "%s:%ld: more than %d fields", s->path, s->lineno,
                       s->d + 3);
  return 1;
}

int eval_stream_next(eval_stream *s, long *round, const double **X, const double **rewards,
                     o3m_err *e) {
  int k = 0;
  long cur = 0;
  if (s->carry) {
    if (s->carry_slot != 0) {
      memcpy(s->X, s->X + (size_t)s->carry_slot * s->d, sizeof(double) * s->d);
      s->r[0] = s->r[s->carry_slot];
    }
    cur = s->carry_round;
    s->carry = 0;
    k = 1;
  } else if (s->eof) {
    return 0;
  }
  for (;;) {
    long rnd = 0, arm = 0;
    int rc = read_row(s, k, &rnd, &arm, e);
    if (rc < 0) return rc;
    if (rc == 0) {
      s->eof = 1;
      break;
    }
    if (arm == 0 && k > 0) {
      s->carry = 1;
      s->carry_slot = k;
      s->carry_round = rnd;
      break;
    }
    if (arm != k)
      return o3m_err_set(e, O3M_EPARSE, "%s:%ld: arm %ld, expected %d (arms 0..K-1 in order)",
                         s->path, s->lineno, arm, k);
    if (k == 0) {
      if (s->have_last && rnd <= s->last_round)
        return o3m_err_set(e, O3M_EPARSE, "%s:%ld: round %ld does not follow round %ld",
                           s->path, s->lineno, rnd, s->last_round);
      cur = rnd;
    } else if (rnd != cur) {
      return o3m_err_set(e, O3M_EPARSE, "%s:%ld: round %ld inside round %ld", s->path,
                         s->lineno, rnd, cur);
    }
    k++;
    if (s->K && k > s->K)
      return o3m_err_set(e, O3M_EPARSE, "%s:%ld: round %ld has more than K = %d arms", s->path,
                         s->lineno, cur, s->K);
  }
  if (k == 0) return 0;
  if (s->K == 0) {
    s->K = k;
  } else if (k != s->K) {
    return o3m_err_set(e, O3M_EPARSE, "%s:%ld: round %ld has %d arms, expected K = %d",
                       s->path, s->lineno - (s->carry ? 1 : 0), cur, k, s->K);
  }
  if (s->carry && s->carry_round <= cur)
    return o3m_err_set(e, O3M_EPARSE, "%s:%ld: round %ld does not follow round %ld", s->path,
                       s->lineno, s->carry_round, cur);
  s->last_round = cur;
  s->have_last = 1;
  *round = cur;
  *X = s->X;
  *rewards = s->r;
  return 1;
}

void eval_stream_write_header(FILE *f, int d) {
  fputs("round,arm,reward", f);
  for (int i = 1; i <= d; i++) fprintf(f, ",x%d", i);
  fputc('\n', f);
}

void eval_stream_write_round(FILE *f, long round, int K, int d, const double *X,
                             const double *rewards) {
  for (int a = 0; a < K; a++) {
    fprintf(f, "%ld,%d,%.17g", round, a, rewards[a]);
    const double *x = X + (size_t)a * d;
    for (int i = 0; i < d; i++) fprintf(f, ",%.17g", x[i]);
    fputc('\n', f);
  }
}
