/* eval_reader_impl.h -- what the reader back ends share (not for callers).
 *
 * A back end embeds `eval_reader` as its first member, fills the base fields
 * at open and supplies two functions in an eval_reader_ops table; the public
 * functions in eval_reader.c dispatch through it.
 *
 * eval_lines is the one line reader: a fixed buffer of EVAL_READER_BUFSZ
 * bytes refilled with read(2). A line is returned in place, NUL-terminated,
 * without its "\n" or "\r\n", so a parser can cut it into fields by writing
 * NULs and never copies it. A line longer than the buffer is an error naming
 * it; memory never grows. */
#ifndef EVAL_READER_IMPL_H
#define EVAL_READER_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "eval_reader.h"

typedef struct eval_lines {
  int fd;
  int own_fd;
  char path[256]; /* for messages; truncated if longer */
  char *buf;      /* EVAL_READER_BUFSZ bytes */
  size_t beg, end;
  int eof;
  long long line;     /* number of the last line returned */
  long long consumed; /* bytes of the lines returned so far */
  long long size;     /* file size, -1 if unknown */
} eval_lines;

/* Opens path ("-" = standard input). On failure nothing is left open. */
int eval_lines_open(eval_lines *L, const char *path, o3m_err *e);

/* Returns 1 with *line (NUL-terminated, writable) and *len, 0 at the end,
 * or a negative code (read error, line too long). */
int eval_lines_next(eval_lines *L, char **line, size_t *len, o3m_err *e);

void eval_lines_close(eval_lines *L);

/* parse turns one non-empty line (NUL-terminated, writable) into *ev:
 * 1 for an event, 0 for a line the back end skips (eval_reader_next counts
 * it in skipped and reads on), or a negative code with e naming the line.
 * The one line loop, with the empty lines' skipping and ev->line, is
 * eval_reader_next's. */
typedef struct eval_reader_ops {
  int (*parse)(eval_reader *r, char *line, eval_event *ev, o3m_err *e);
  void (*destroy)(eval_reader *r); /* frees the back end's own fields and r */
} eval_reader_ops;

struct eval_reader {
  const eval_reader_ops *ops;
  eval_lines lines;
  int K, d;
  uint64_t skipped;
  const char *skip_reason;
  double *X;       /* K x d, allocated by the back end */
  double *w;       /* d or NULL */
  double *C;       /* K x d or NULL */
  char desc[160];
  int no_matrix;   /* split readers: do not fill X (eval_reader_fill_matrix) */
  int failed;      /* set after an error: next() then keeps failing */
  int done;
};

/* Splits s in place at every sep into at most max fields (pointers into s);
 * returns the number of fields present, which may exceed max (the excess is
 * counted, not stored). */
int eval__split(char *s, char sep, char **fields, int max);

/* Splits s in place at runs of spaces and tabs, ignoring leading and
 * trailing ones; same return as eval__split. */
int eval__split_ws(char *s, char **fields, int max);

/* Strict parses: the whole string must be the number. 0 or O3M_EPARSE
 * (O3M_ENONFINITE for a double that overflows or is inf/nan, O3M_ERANGE
 * for one beyond O3M_MAX_INPUT_ABS; subnormals are accepted). */
int eval__parse_ll(const char *s, long long *out);
int eval__parse_double(const char *s, double *out);

#endif
