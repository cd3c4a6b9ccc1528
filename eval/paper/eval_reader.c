/* eval_reader.c -- the reader interface's dispatch, the shared line reader
 * and the small parsing helpers every back end uses (see eval_reader.h and
 * eval_reader_impl.h).
 *
 * The line reader keeps the bytes [beg, end) of its buffer unread. When no
 * newline is left in them it moves them to the front and reads more; if the
 * buffer is full and still holds no newline the line is too long. One byte is
 * always kept free so that a last line without a newline can be terminated in
 * place. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "eval_reader_impl.h"
#include "o3m_limits.h"

int eval_format_parse(const char *s, eval_format *out) {
  if (!s) return O3M_EINVAL;
  if (!strcmp(s, "news")) *out = EVAL_FORMAT_NEWS;
  else if (!strcmp(s, "obd")) *out = EVAL_FORMAT_OBD;
  else if (!strcmp(s, "criteo-tsv")) *out = EVAL_FORMAT_CRITEO_TSV;
  else if (!strcmp(s, "criteo-csv")) *out = EVAL_FORMAT_CRITEO_CSV;
  else return O3M_EINVAL;
  return O3M_OK;
}

const char *eval_format_name(eval_format f) {
  switch (f) {
    case EVAL_FORMAT_NEWS: return "news";
    case EVAL_FORMAT_OBD: return "obd";
    case EVAL_FORMAT_CRITEO_TSV: return "criteo-tsv";
    case EVAL_FORMAT_CRITEO_CSV: return "criteo-csv";
  }
  return "?";
}

/* ---- line reader ---- */

int eval_lines_open(eval_lines *L, const char *path, o3m_err *e) {
  memset(L, 0, sizeof *L);
  L->fd = -1;
  L->size = -1;
  snprintf(L->path, sizeof L->path, "%s", path);
  L->buf = malloc(EVAL_READER_BUFSZ);
  if (!L->buf) return o3m_err_set(e, O3M_ENOMEM, "%s: out of memory", path);
  if (!strcmp(path, "-")) {
    L->fd = STDIN_FILENO;
  } else {
    L->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (L->fd < 0) {
      int rc = o3m_err_set(e, O3M_EIO, "%s: cannot open: %s", path, strerror(errno));
      free(L->buf);
      L->buf = NULL;
      return rc;
    }
    L->own_fd = 1;
  }
  /* One fstat: a directory is refused, a regular file gives its size; a
   * failed fstat, a pipe or a device leaves the size unknown. */
  struct stat st;
  if (fstat(L->fd, &st) != 0) return O3M_OK;
  if (S_ISDIR(st.st_mode)) {
    int rc = o3m_err_set(e, O3M_EIO, "%s: is a directory, expected a file", path);
    eval_lines_close(L);
    return rc;
  }
  if (S_ISREG(st.st_mode)) {
    L->size = (long long)st.st_size;
    (void)posix_fadvise(L->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  }
  return O3M_OK;
}

void eval_lines_close(eval_lines *L) {
  if (L->own_fd && L->fd >= 0) close(L->fd);
  L->fd = -1;
  L->own_fd = 0;
  free(L->buf);
  L->buf = NULL;
}

int eval_lines_next(eval_lines *L, char **line, size_t *len, o3m_err *e) {
  for (;;) {
    char *b = L->buf + L->beg;
    size_t avail = L->end - L->beg;
    char *nl = avail ? memchr(b, '\n', avail) : NULL;
    if (nl || (L->eof && avail)) {
      size_t n = nl ? (size_t)(nl - b) : avail;
      L->beg += nl ? n + 1 : n;
      L->consumed += nl ? (long long)n + 1 : (long long)n;
      L->line++;
      if (n && b[n - 1] == '\r') n--;
      b[n] = '\0'; /* the newline's byte, or the spare byte after the data */
      *line = b;
      *len = n;
      return 1;
    }
    if (L->eof) return 0;
    if (L->beg) {
      memmove(L->buf, L->buf + L->beg, avail);
      L->beg = 0;
      L->end = avail;
    }
    if (L->end >= EVAL_READER_BUFSZ - 1)
      return o3m_err_set(e, O3M_EPARSE, "%s:%lld: line longer than %u bytes", L->path,
                         L->line + 1, EVAL_READER_BUFSZ - 2);
    ssize_t got;
    do got = read(L->fd, L->buf + L->end, EVAL_READER_BUFSZ - 1 - L->end);
    while (got < 0 && errno == EINTR);
    if (got < 0)
      return o3m_err_set(e, O3M_EIO, "%s: read failed after line %lld: %s", L->path, L->line,
                         strerror(errno));
    if (got == 0) L->eof = 1;
    L->end += (size_t)got;
  }
}

/* ---- dispatch ---- */

int eval_reader_next(eval_reader *r, eval_event *ev, o3m_err *e) {
  if (r->failed) return o3m_err_set(e, O3M_ESTATE, "%s: reader already failed", r->lines.path);
  if (r->done) return 0;
  int rc;
  for (;;) {
    char *line;
    size_t len;
    rc = eval_lines_next(&r->lines, &line, &len, e);
    if (rc <= 0) break;
    ev->pscore = NAN; /* set by the back ends whose format logs it */
    rc = len ? r->ops->parse(r, line, ev, e) : 0;
    if (rc) break;
    r->skipped++;
  }
  if (rc == 1) ev->line = r->lines.line;
  if (rc < 0) r->failed = 1;
  if (rc == 0) r->done = 1;
  return rc;
}

int eval_reader_arms(const eval_reader *r) { return r->K; }
int eval_reader_dim(const eval_reader *r) { return r->d; }
uint64_t eval_reader_skipped(const eval_reader *r) { return r->skipped; }
const char *eval_reader_skip_reason(const eval_reader *r) {
  return r->skip_reason ? r->skip_reason : "";
}
long long eval_reader_bytes_read(const eval_reader *r) { return r->lines.consumed; }
long long eval_reader_size(const eval_reader *r) { return r->lines.size; }
const double *eval_reader_item_part(const eval_reader *r) { return r->C; }
const char *eval_reader_describe(const eval_reader *r) { return r->desc; }
void eval_reader_fill_matrix(eval_reader *r, int on) { r->no_matrix = r->C && !on; }

void eval_reader_destroy(eval_reader *r) {
  if (!r) return;
  eval_lines_close(&r->lines);
  free(r->X);
  free(r->w);
  free(r->C);
  r->ops->destroy(r);
}

/* ---- helpers ---- */

int eval__split(char *s, char sep, char **fields, int max) {
  int n = 0;
  for (;;) {
    if (n < max) fields[n] = s;
    n++;
    char *p = strchr(s, sep);
    if (!p) return n;
    *p = '\0';
    s = p + 1;
  }
}

int eval__split_ws(char *s, char **fields, int max) {
  int n = 0;
  for (;;) {
    while (*s == ' ' || *s == '\t') s++;
    if (!*s) return n;
    if (n < max) fields[n] = s;
    n++;
    while (*s && *s != ' ' && *s != '\t') s++;
    if (!*s) return n;
    *s++ = '\0';
  }
}

int eval__parse_ll(const char *s, long long *out) {
  const char *p = s;
  int neg = 0;
  if (*p == '-' || *p == '+') neg = *p++ == '-';
  if (*p < '0' || *p > '9') return O3M_EPARSE;
  unsigned long long v = 0;
  for (; *p >= '0' && *p <= '9'; p++) {
    if (v > (unsigned long long)INT64_MAX / 10) return O3M_EPARSE;
    v = v * 10 + (unsigned)(*p - '0');
  }
  if (*p || v > (unsigned long long)INT64_MAX) return O3M_EPARSE;
  *out = neg ? -(long long)v : (long long)v;
  return O3M_OK;
}

int eval__parse_double(const char *s, double *out) {
  if (!*s || *s == ' ' || *s == '\t') return O3M_EPARSE;
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || *end) return O3M_EPARSE;
  if (!isfinite(v)) return O3M_ENONFINITE; /* underflow to 0 or a subnormal is fine */
  if (fabs(v) > O3M_MAX_INPUT_ABS) return O3M_ERANGE;
  *out = v;
  return O3M_OK;
}

