/* o3m_features_csv.c -- reading one CSV feature table
 * (o3m_features_internal.h).
 *
 * A table is opened only when it is a regular file, and read through a
 * stream that counts its bytes against the party's table_bytes_max
 * (table_open). It is read line by line with getline(3) and cut into fields by
 * libcsv (quoting, trimming; see table_load): the header fixes the number of
 * columns, each row is checked completely before it is appended, and its id
 * goes into the hash index at once, so a duplicate id is reported at the line
 * where it happens. Values, ids and the index grow by doubling while
 * loading and never change afterwards. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csv.h>

#include "o3m_alloc.h"
#include "o3m_features_internal.h"

/* ------------------------------------------------------------------ loading */

typedef struct loader {
  const char *name; /* file name for messages, shortened */
  char namebuf[NAME_SHOW_MAX + 1];
  o3m_err *e;
} loader;

static void loader_init(loader *L, const char *path, o3m_err *e) {
  size_t n = strlen(path);
  if (n <= NAME_SHOW_MAX) {
    L->name = path;
  } else {
    memcpy(L->namebuf, "...", 3);
    memcpy(L->namebuf + 3, path + n - (NAME_SHOW_MAX - 3), NAME_SHOW_MAX - 2);
    L->name = L->namebuf;
  }
  L->e = e;
}

/* Sets e to code with "name:line: message" ("name: message" for line 0)
 * and returns code. */
#define lerr(L, code, line, ...) o3m_err_set_at((L)->e, (code), (L)->name, (line), __VA_ARGS__)

/* One row's fields as libcsv hands them over: their bytes back to back,
 * each NUL-terminated, in buf; field i starts at buf + off[i]. Grown by
 * doubling, reused for every row. */
typedef struct csv_fields {
  char *buf;
  size_t len, cap;
  size_t *off;
  int n, cap_n;
} csv_fields;

/* What the libcsv callbacks share while one table is read. */
typedef struct table_reader {
  loader *L;
  ft_table *t;
  o3m_features_kind kind;
  csv_fields fields;
  char **names;   /* the column names (t->cols once the header is read) */
  int have_header;
  long line;      /* the physical line being fed */
  long row_line;  /* the line where the row in progress began */
  int in_row;     /* a row has begun and not ended */
  size_t row_bytes; /* bytes of the lines of the row in progress */
  int rc;         /* the first error; the callbacks do nothing after one */
} table_reader;

/* Makes the byte buffer *buf (capacity *cap) hold at least need bytes,
 * doubling from `first` bytes (the contents are kept). O3M_ENOMEM when it
 * cannot; *buf and *cap are then unchanged (still owned by the caller). */
static int grow_bytes(char **buf, size_t *cap, size_t need, size_t first) {
  if (need <= *cap) return O3M_OK;
  size_t nc = *cap ? 2 * *cap : first;
  while (nc < need) {
    if (nc > SIZE_MAX / 2) return O3M_ENOMEM;
    nc *= 2;
  }
  char *nb = o3m_realloc(*buf, nc);
  if (!nb) return O3M_ENOMEM;
  *buf = nb;
  *cap = nc;
  return O3M_OK;
}

/* libcsv's field callback: appends the field (len bytes at s) to the row.
 * A NUL byte inside a field is an error (ids are C strings). */
static void on_field(void *s, size_t len, void *data) {
  table_reader *R = data;
  if (R->rc) return;
  csv_fields *F = &R->fields;
  if (memchr(s, '\0', len)) {
    R->rc = lerr(R->L, O3M_EPARSE, R->row_line, "NUL byte in field %d", F->n + 1);
    return;
  }
  if (F->n == F->cap_n) {
    int nc = F->cap_n ? 2 * F->cap_n : 16;
    size_t *no = o3m_realloc(F->off, sizeof *no * (size_t)nc);
    if (!no) {
      R->rc = lerr(R->L, O3M_ENOMEM, 0, "out of memory");
      return;
    }
    F->off = no;
    F->cap_n = nc;
  }
  if (grow_bytes(&F->buf, &F->cap, F->len + len + 1, 1024)) {
    R->rc = lerr(R->L, O3M_ENOMEM, 0, "out of memory");
    return;
  }
  F->off[F->n++] = F->len;
  memcpy(F->buf + F->len, s, len);
  F->len += len;
  F->buf[F->len++] = '\0';
}

static const char *field(const table_reader *R, int i) {
  return R->fields.buf + R->fields.off[i];
}

/* Checks the header's fields (the id column and the names) and keeps the
 * names in R->names. */
static int parse_header(table_reader *R) {
  loader *L = R->L;
  const char *want = R->kind == O3M_FEATURES_USERS ? "user_id" : "item_id";
  int nf = R->fields.n;
  if (strcmp(field(R, 0), want) != 0)
    return lerr(L, O3M_EPARSE, 1, "first header field must be '%s', got '%.40s'", want,
                field(R, 0));
  if (nf < 2) return lerr(L, O3M_EPARSE, 1, "header has no feature columns");
  if (nf - 1 > O3M_FEATURES_MAX_COLS)
    return lerr(L, O3M_EPARSE, 1, "%d feature columns, at most %d allowed", nf - 1,
                O3M_FEATURES_MAX_COLS);
  /* The names are kept with the table (o3m_features_column); table_free
   * releases them, also after a failure. */
  ft_table *t = R->t;
  t->header = o3m_malloc(R->fields.len);
  R->names = t->cols = o3m_malloc((size_t)(nf - 1) * sizeof *t->cols);
  if (!t->header || !t->cols) return lerr(L, O3M_ENOMEM, 0, "out of memory");
  memcpy(t->header, R->fields.buf, R->fields.len);
  for (int c = 0; c < nf - 1; c++) {
    const char *p = t->header + R->fields.off[c + 1];
    if (!*p) return lerr(L, O3M_EPARSE, 1, "header field %d (a column name) is empty", c + 2);
    for (int j = 0; j < c; j++)
      if (strcmp(R->names[j], p) == 0)
        return lerr(L, O3M_EPARSE, 1, "column name '%.40s' repeated", p);
    R->names[c] = (char *)p;
  }
  R->t->n_cols = nf - 1;
  return O3M_OK;
}

/* Grows the row arrays and the id pool so that one more row of idlen bytes
 * fits. */
static int table_reserve(ft_table *t, size_t idlen) {
  if ((size_t)t->n_rows == t->cap_rows) {
    size_t cap = t->cap_rows ? 2 * t->cap_rows : 256;
    if (cap > SIZE_MAX / sizeof(double) / (size_t)t->n_cols) return O3M_ENOMEM;
    double *nv = o3m_realloc(t->vals, cap * (size_t)t->n_cols * sizeof *nv);
    if (!nv) return O3M_ENOMEM;
    t->vals = nv;
    size_t *no = o3m_realloc(t->id_off, cap * sizeof *no);
    if (!no) return O3M_ENOMEM;
    t->id_off = no;
    t->cap_rows = cap;
  }
  if (grow_bytes(&t->ids, &t->ids_cap, t->ids_len + idlen + 1, 4096)) return O3M_ENOMEM;
  return index_reserve(t);
}

/* Parses the fields of one data row (begun at line) into row t->n_rows and
 * indexes it. */
static int parse_row(table_reader *R, long line) {
  loader *L = R->L;
  ft_table *t = R->t;
  char *const *names = R->names;
  if (R->fields.n != t->n_cols + 1)
    return lerr(L, O3M_EPARSE, line, "expected %d fields, got %d", t->n_cols + 1,
                R->fields.n);
  if (t->n_rows >= O3M_FEATURES_MAX_ROWS)
    return lerr(L, O3M_EPARSE, line, "more than %d rows", O3M_FEATURES_MAX_ROWS);
  const char *s = field(R, 0);
  size_t idlen = strlen(s);
  if (idlen == 0) return lerr(L, O3M_EPARSE, line, "field 1 (the id) is empty");
  if (idlen > O3M_MAX_ID)
    return lerr(L, O3M_EPARSE, line, "id of %zu bytes, at most %d allowed", idlen, O3M_MAX_ID);
  long dup = table_find(t, s, NULL);
  if (dup >= 0)
    return lerr(L, O3M_EPARSE, line, "duplicate id '%.40s' (first at data row %ld)", s,
                dup + 1);
  if (table_reserve(t, idlen)) return lerr(L, O3M_ENOMEM, 0, "out of memory");
  double *row = t->vals + (size_t)t->n_rows * (size_t)t->n_cols;
  for (int c = 0; c < t->n_cols; c++) {
    const char *p = field(R, c + 1);
    if (!*p)
      return lerr(L, O3M_EPARSE, line, "field %d (column '%.40s') is empty", c + 2, names[c]);
    char *end;
    /* Unquoted fields come trimmed of spaces and tabs; a quoted one with
     * spaces inside the quotes, or a hex form, is not a decimal number. */
    int ok = !(*p == ' ' || *p == '\t') && !strpbrk(p, "xX");
    double v = ok ? strtod(p, &end) : 0.0;
    if (!ok || end == p || *end)
      return lerr(L, O3M_EPARSE, line, "field %d (column '%.40s') is not a decimal number",
                  c + 2, names[c]);
    if (!isfinite(v))
      return lerr(L, O3M_EPARSE, line,
                  "field %d (column '%.40s') is not finite (NaN, Inf or out of range)", c + 2,
                  names[c]);
    row[c] = v;
  }
  /* The largest row norm, for the bound (o3m_features_check_norm) and the
   * dummy rows. A square that overflows makes it infinite, which no bound
   * accepts. */
  note_max_row(t, t->n_rows);
  memcpy(t->ids + t->ids_len, s, idlen + 1);
  t->id_off[t->n_rows] = t->ids_len;
  t->ids_len += idlen + 1;
  slot_put(t->slots, t->mask, s, t->n_rows);
  t->n_rows++;
  return O3M_OK;
}

/* libcsv's row callback: the header first, then the data rows. */
static void on_row(int c, void *data) {
  (void)c;
  table_reader *R = data;
  R->in_row = 0;
  R->row_bytes = 0;
  if (R->rc) return;
  if (!R->have_header) {
    R->rc = parse_header(R);
    R->have_header = 1;
  } else {
    R->rc = parse_row(R, R->row_line);
  }
  R->fields.n = 0;
  R->fields.len = 0;
}

/* Only LF ends a row (CRLF's CR is removed before the parser sees it), so
 * a stray CR inside a field is data, as it was before libcsv. */
static int is_term(unsigned char c) { return c == '\n'; }

/* ------------------------------------------------------------------ the file */

/* What a stream of a table file reads through (fopencookie): the
 * descriptor, the bytes read so far against the cap, and the stop flag. */
typedef struct capped_file {
  int fd;
  uint64_t read, max;
  const atomic_int *stop;
  uint64_t run; /* bytes since the last line end */
  int over;    /* the file held more than max bytes */
  int long_line; /* a line ran longer than O3M_MAX_TABLE_LINE */
  int stopped; /* *stop was seen */
} capped_file;

static ssize_t capped_read(void *cookie, char *buf, size_t size) {
  capped_file *c = cookie;
  if (c->stop && atomic_load(c->stop)) {
    c->stopped = 1;
    errno = ECANCELED;
    return -1;
  }
  /* One byte more than the cap may be asked for, so that a file of exactly
   * max bytes passes and one of max + 1 is seen. */
  uint64_t room = c->max - c->read + 1;
  if (size > room) size = (size_t)room;
  ssize_t n;
  do n = read(c->fd, buf, size);
  while (n < 0 && errno == EINTR);
  if (n > 0) {
    c->read += (uint64_t)n;
    if (c->read > c->max) {
      c->over = 1;
      errno = EFBIG;
      return -1;
    }
    const char *nl = memrchr(buf, '\n', (size_t)n);
    c->run = nl ? (uint64_t)(buf + n - nl - 1) : c->run + (uint64_t)n;
    if (c->run > O3M_MAX_TABLE_LINE) {
      c->long_line = 1;
      errno = EFBIG;
      return -1;
    }
  }
  return n;
}

static int capped_close(void *cookie) {
  capped_file *c = cookie;
  return close(c->fd);
}

/* What st_mode is, for the message that refuses it. */
static const char *file_kind(mode_t m) {
  if (S_ISFIFO(m)) return "a FIFO (named pipe)";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISDIR(m)) return "a directory";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

/* Opens path as a table file under rd's checks (o3m_features_read): the
 * descriptor is opened without waiting (O_NONBLOCK: a FIFO with no writer
 * would block open), checked to be a regular file (fstat of the
 * descriptor, so that the path cannot be swapped between the check and the
 * read), put back to blocking, checked against the cap by its size, and
 * wrapped in a stream that counts every byte read against the cap. */
static int table_open(loader *L, const char *path, const o3m_features_read *rd, capped_file *c,
                      FILE **out) {
  *out = NULL;
  const uint64_t max = rd && rd->max_bytes ? rd->max_bytes : O3M_DEFAULT_TABLE_BYTES_MAX;
  const char *key = rd && rd->limit_key ? rd->limit_key : "table_bytes_max";
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return lerr(L, O3M_EIO, 0, "cannot open: %s", strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int err = errno;
    close(fd);
    return lerr(L, O3M_EIO, 0, "cannot stat: %s", strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return lerr(L, O3M_EINVAL, 0, "is %s, not a regular file", file_kind(st.st_mode));
  }
  if ((uint64_t)st.st_size > max) {
    close(fd);
    return lerr(L, O3M_ERANGE, 0, "%llu bytes, more than %s = %llu (raise it if the table is "
                "meant to be this large)", (unsigned long long)st.st_size, key,
                (unsigned long long)max);
  }
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
    int err = errno;
    close(fd);
    return lerr(L, O3M_EIO, 0, "cannot make the descriptor blocking: %s", strerror(err));
  }
  *c = (capped_file){.fd = fd, .max = max, .stop = rd ? rd->stop : NULL};
  static const cookie_io_functions_t io = {capped_read, NULL, NULL, capped_close};
  FILE *f = fopencookie(c, "r", io);
  if (!f) {
    close(fd);
    return lerr(L, O3M_ENOMEM, 0, "out of memory");
  }
  *out = f;
  return O3M_OK;
}

/* Loads one table into t (zeroed by the caller). On failure t holds partial
 * allocations that table_free releases.
 *
 * The file is read line by line (getline) and each line is handed to libcsv
 * with its line end normalized to LF, so that the line a row begins on is
 * known for messages, and a libcsv syntax error is located by line and
 * column: csv_parse stops at the byte it cannot take. libcsv runs in strict
 * mode (a quote inside an unquoted field, text after a closing quote and an
 * unterminated quote at the end are errors) with its default trimming of
 * spaces and tabs around unquoted fields. A UTF-8 byte order mark at the
 * start of the file is skipped. Blank lines are skipped by libcsv. */
int table_load(ft_table *t, const char *path, o3m_features_kind kind,
               const o3m_features_read *rd, o3m_err *e) {
  loader L;
  loader_init(&L, path, e);
  snprintf(t->name, sizeof t->name, "%s", L.name);
  t->dummy_max_sq = INFINITY;
  capped_file cap;
  FILE *f;
  int orc = table_open(&L, path, rd, &cap, &f);
  if (orc) return orc;
  struct csv_parser csv;
  if (csv_init(&csv, CSV_STRICT | CSV_STRICT_FINI) != 0) {
    fclose(f);
    return lerr(&L, O3M_ENOMEM, 0, "out of memory");
  }
  csv_set_term_func(&csv, is_term);
  /* libcsv's field buffer grows through the project's allocator too. */
  csv_set_realloc_func(&csv, o3m_realloc);
  csv_set_free_func(&csv, o3m_free);
  table_reader R;
  memset(&R, 0, sizeof R);
  R.L = &L;
  R.t = t;
  R.kind = kind;
  t->present = 1;
  char *buf = NULL;
  size_t bufcap = 0;
  ssize_t n;
  errno = 0;
  while (!R.rc && (n = getline(&buf, &bufcap, f)) >= 0) {
    R.line++;
    char *p = buf;
    size_t len = (size_t)n, skip = 0;
    if (R.line == 1 && len >= 3 && memcmp(p, "\xEF\xBB\xBF", 3) == 0) {
      p += 3;
      len -= 3;
      skip = 3;
    }
    if (len >= 2 && p[len - 2] == '\r' && p[len - 1] == '\n') {
      p[len - 2] = '\n';
      len--;
    }
    if (!R.in_row) {
      /* A row begins on the first line that is not blank. */
      size_t i = 0;
      while (i < len && (p[i] == ' ' || p[i] == '\t' || p[i] == '\n' || p[i] == '\r')) i++;
      if (i < len) {
        R.in_row = 1;
        R.row_line = R.line;
      }
    }
    /* A quoted field may span lines, and libcsv keeps it whole in its own
     * buffer: the line limit holds for a row's lines together, so that no
     * row can hold the file in memory either. */
    if (R.in_row) R.row_bytes += len;
    if (R.row_bytes > O3M_MAX_TABLE_LINE) {
      R.rc = lerr(&L, O3M_EPARSE, R.row_line, "a row longer than %d bytes (a quoted field "
                  "over many lines?): not a feature table", O3M_MAX_TABLE_LINE);
      break;
    }
    size_t done = csv_parse(&csv, p, len, on_field, on_row, &R);
    /* libcsv stops short when it cannot grow its field buffer, too: that
     * is no quoting error. */
    if (!R.rc && done < len && csv_error(&csv) == CSV_ENOMEM)
      R.rc = lerr(&L, O3M_ENOMEM, R.line, "out of memory");
    if (!R.rc && done < len)
      R.rc = o3m_err_set(e, O3M_EPARSE, "%s:%ld:%zu: malformed CSV quoting (a quote inside "
                         "an unquoted field, or text after a closing quote)", L.name, R.line,
                         done + skip + 1);
  }
  /* The cap and the stop override whatever the cut-off last line made the
   * parser say. */
  if (cap.over) {
    const char *key = rd && rd->limit_key ? rd->limit_key : "table_bytes_max";
    R.rc = lerr(&L, O3M_ERANGE, R.line, "more than %s = %llu bytes read (the file grew while "
                "it was read, or reports no size; raise it if the table is meant to be this "
                "large)", key, (unsigned long long)cap.max);
  } else if (cap.long_line) {
    R.rc = lerr(&L, O3M_EPARSE, 0, "a line longer than %d bytes: not a feature table",
                O3M_MAX_TABLE_LINE);
  } else if (cap.stopped) {
    R.rc = lerr(&L, O3M_ESTATE, R.line, "reading stopped: the daemon is shutting down");
  }
  if (!R.rc && ferror(f)) R.rc = lerr(&L, O3M_EIO, R.line, "read error");
  /* getline's -1 without end of file or a read error: it could not grow
   * buf. The rows after would be lost, not the file ended. */
  if (!R.rc && !feof(f)) R.rc = lerr(&L, O3M_ENOMEM, R.line + 1, "out of memory");
  if (!R.rc && csv_fini(&csv, on_field, on_row, &R) != 0 && !R.rc)
    R.rc = lerr(&L, O3M_EPARSE, R.row_line, "unterminated quoted field (the row begins here)");
  if (!R.rc && !R.have_header) R.rc = lerr(&L, O3M_EPARSE, 1, "missing header (empty file)");
  if (!R.rc && t->n_rows == 0)
    R.rc = lerr(&L, O3M_EPARSE, R.line + 1, "no data rows after the header");
  /* The mean and covariance the dummy rows for ids the table does not
   * hold are drawn from. */
  if (!R.rc && table_moments(t)) R.rc = lerr(&L, O3M_ENOMEM, 0, "out of memory");
  csv_free(&csv);
  o3m_free(R.fields.buf);
  o3m_free(R.fields.off);
  o3m_free(buf);
  fclose(f);
  return R.rc;
}
