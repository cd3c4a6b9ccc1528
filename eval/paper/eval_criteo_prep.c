/* eval_criteo_prep.c -- see eval_criteo_prep.h for the preprocessing and the
 * choices made.
 *
 * The row parser is the hot path of Criteo replay (millions of rows): it
 * walks the line once, parses plain integers and hex digits by hand, and
 * falls back to strtod only for integer fields written as decimals (the CSV
 * sample writes "260.0"). It allocates nothing.
 *
 * Stats file format (text, one item per line, '#' lines are comments):
 *   o3m-criteo-stats 1
 *   rows N
 *   clicks N
 *   transform raw|log
 *   bucket hex-mod-3
 *   int_min v1 .. v13
 *   int_max v1 .. v13
 *   count_min a b c
 *   count_max a b c
 *   arms K
 *   arm INDEX LABEL n0 n1 n2 ROWS CLICKS      (K lines, INDEX = 0..K-1)
 * LABEL is redundant (it is the pairing of n0 n1 n2) and is checked on read. */
#include "eval_criteo_prep.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "o3m_limits.h"

int eval_criteo_transform_parse(const char *s, eval_criteo_transform *out) {
  if (s && !strcmp(s, "raw")) *out = EVAL_CRITEO_INT_RAW;
  else if (s && !strcmp(s, "log")) *out = EVAL_CRITEO_INT_LOG;
  else return O3M_EINVAL;
  return O3M_OK;
}

const char *eval_criteo_transform_name(eval_criteo_transform t) {
  return t == EVAL_CRITEO_INT_LOG ? "log" : "raw";
}

/* HEXV[c] = the digit value of hex character c, 0x80 for any other byte.
 * A table instead of branches: the characters of hashed values are random,
 * so digit-or-letter branches mispredict about every third character. A
 * parser sums HEXV over a field and ORs it into a flag; a flag with 0x80 set
 * means "not hex" (and the sum is then unused). */
static const unsigned char HEXV[256] = {
    0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
    0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
    0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
    0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
    0x80, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
    0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
    0x80, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
    0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
    0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
    0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
    0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
    0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
    0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
    0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
    0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
    0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
};

/* FNV-1a-32 of n bytes mod 3: the bucket of a value that is not 1..8 hex digits. */
static int fnv_bucket(const char *s, size_t n) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; i++) {
    h ^= (unsigned char)s[i];
    h *= 16777619u;
  }
  return (int)(h % EVAL_CRITEO_NBUCKET);
}

/* Since 16 = 1 (mod 3), a hex number is congruent mod 3 to the sum of its
 * digits: value mod 3 = digit sum mod 3, with no need to assemble the value. */
int eval_criteo_bucket(const char *s, size_t n) {
  if (n == 0) return -1;
  unsigned sum = 0, flag = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char h = HEXV[(unsigned char)s[i]];
    sum += h;
    flag |= h;
  }
  if ((flag & 0x80) || n > 8) return fnv_bucket(s, n);
  return (int)(sum % EVAL_CRITEO_NBUCKET);
}

uint64_t eval_criteo_cantor(uint64_t x, uint64_t y) { return (x + y) * (x + y + 1) / 2 + y; }

uint64_t eval_criteo_item_label(const int c[EVAL_CRITEO_NBUCKET]) {
  return eval_criteo_cantor(eval_criteo_cantor((uint64_t)c[0], (uint64_t)c[1]), (uint64_t)c[2]);
}

static inline double transform(eval_criteo_transform tr, double x) {
  if (tr == EVAL_CRITEO_INT_RAW) return x;
  return x >= 0 ? log1p(x) : -log1p(-x);
}

/* Parses the integer field [s, e): a plain integer by hand, anything else
 * through strtod. Returns 0 and *out, or -1 (also for a magnitude beyond
 * O3M_MAX_INPUT_ABS, the limit of every o3m-eval input; subnormals pass). */
static int parse_num(const char *s, const char *e, double *out) {
  const char *p = s;
  int neg = 0;
  if (p < e && (*p == '-' || *p == '+')) neg = *p++ == '-';
  if (p < e && e - p <= 15) {
    int64_t v = 0;
    const char *q = p;
    while (q < e && *q >= '0' && *q <= '9') v = v * 10 + (*q++ - '0');
    if (q == e) {
      *out = (double)(neg ? -v : v);
      return 0;
    }
  }
  char buf[64];
  size_t n = (size_t)(e - s);
  if (n == 0 || n >= sizeof buf) return -1;
  memcpy(buf, s, n);
  buf[n] = '\0';
  char *end;
  errno = 0;
  double v = strtod(buf, &end);
  if (end != buf + n || !isfinite(v) || fabs(v) > O3M_MAX_INPUT_ABS) return -1;
  *out = v;
  return 0;
}

int eval_criteo_parse(const char *line, char sep, eval_criteo_transform tr,
                      eval_criteo_row *row, int *bad_field, const char **why) {
  const char *p = line;
  int cnt[EVAL_CRITEO_NBUCKET] = {0, 0, 0};
  for (int f = 0; f < EVAL_CRITEO_FIELDS; f++) {
    const char *s = p;
    if (f > EVAL_CRITEO_NINT) {
      /* Categorical: scan, summing hex digits and flagging non-hex bytes. */
      unsigned sum = 0, flag = 0;
      unsigned char c;
      while ((c = (unsigned char)*p) != (unsigned char)sep && c) {
        unsigned char h = HEXV[c];
        sum += h;
        flag |= h;
        p++;
      }
      size_t n = (size_t)(p - s);
      if (n) cnt[((flag & 0x80) || n > 8) ? fnv_bucket(s, n) : (int)(sum % EVAL_CRITEO_NBUCKET)]++;
    } else {
      while (*p && *p != sep) p++;
      if (f == 0) {
        double v;
        if (p == s || parse_num(s, p, &v) || (v != 0 && v != 1)) {
          *bad_field = 1;
          *why = "label is not 0 or 1";
          return O3M_EPARSE;
        }
        row->label = (int)v;
      } else {
        int i = f - 1;
        if (p == s) {
          row->imissing[i] = 1;
          row->ival[i] = 0;
        } else {
          double v;
          if (parse_num(s, p, &v)) {
            *bad_field = f + 1;
            *why = "integer column is not a finite number of magnitude at most 1e150";
            return O3M_EPARSE;
          }
          row->imissing[i] = 0;
          row->ival[i] = transform(tr, v);
        }
      }
    }
    if (f < EVAL_CRITEO_FIELDS - 1) {
      if (*p != sep) {
        *bad_field = 0;
        *why = "fewer than 40 fields";
        return O3M_EPARSE;
      }
      p++;
    } else if (*p) {
      *bad_field = 0;
      *why = "more than 40 fields";
      return O3M_EPARSE;
    }
  }
  memcpy(row->count, cnt, sizeof cnt);
  return O3M_OK;
}

/* ---- statistics ---- */

struct eval_criteo_accum {
  eval_criteo_transform tr;
  long long rows, clicks;
  double imin[EVAL_CRITEO_NINT], imax[EVAL_CRITEO_NINT];
  int cmin[EVAL_CRITEO_NBUCKET], cmax[EVAL_CRITEO_NBUCKET];
  long long freq[EVAL_CRITEO_NTRIPLES];
  long long freq_clicks[EVAL_CRITEO_NTRIPLES];
};

int eval_criteo_accum_create(eval_criteo_accum **out, eval_criteo_transform tr) {
  eval_criteo_accum *a = calloc(1, sizeof *a);
  *out = a;
  if (!a) return O3M_ENOMEM;
  a->tr = tr;
  for (int i = 0; i < EVAL_CRITEO_NINT; i++) {
    a->imin[i] = INFINITY;
    a->imax[i] = -INFINITY;
  }
  for (int k = 0; k < EVAL_CRITEO_NBUCKET; k++) {
    a->cmin[k] = EVAL_CRITEO_NCAT + 1;
    a->cmax[k] = -1;
  }
  return O3M_OK;
}

void eval_criteo_accum_destroy(eval_criteo_accum *a) { free(a); }

void eval_criteo_accum_add(eval_criteo_accum *a, const eval_criteo_row *row) {
  a->rows++;
  a->clicks += row->label;
  for (int i = 0; i < EVAL_CRITEO_NINT; i++) {
    if (row->imissing[i]) continue;
    if (row->ival[i] < a->imin[i]) a->imin[i] = row->ival[i];
    if (row->ival[i] > a->imax[i]) a->imax[i] = row->ival[i];
  }
  for (int k = 0; k < EVAL_CRITEO_NBUCKET; k++) {
    if (row->count[k] < a->cmin[k]) a->cmin[k] = row->count[k];
    if (row->count[k] > a->cmax[k]) a->cmax[k] = row->count[k];
  }
  int t = eval_criteo_triple_index(row->count);
  a->freq[t]++;
  a->freq_clicks[t] += row->label;
}

static void triple_of(int t, int c[EVAL_CRITEO_NBUCKET]) {
  const int n = EVAL_CRITEO_NCAT + 1;
  c[2] = t % n;
  c[1] = (t / n) % n;
  c[0] = t / (n * n);
}

int eval_criteo_accum_finish(const eval_criteo_accum *a, int n_arms, eval_criteo_stats *st,
                             o3m_err *e) {
  if (n_arms < 1 || n_arms > EVAL_CRITEO_MAX_ARMS)
    return o3m_err_set(e, O3M_EINVAL, "criteo: %d arms requested, expected 1..%d", n_arms,
                       EVAL_CRITEO_MAX_ARMS);
  if (a->rows == 0)
    return o3m_err_set(e, O3M_EINVAL, "criteo: no rows to compute statistics from");
  memset(st, 0, sizeof *st);
  st->rows = a->rows;
  st->clicks = a->clicks;
  st->transform = a->tr;
  for (int i = 0; i < EVAL_CRITEO_NINT; i++) {
    int seen = a->imin[i] <= a->imax[i];
    st->imin[i] = seen ? a->imin[i] : 0;
    st->imax[i] = seen ? a->imax[i] : 0;
  }
  for (int k = 0; k < EVAL_CRITEO_NBUCKET; k++) {
    st->cmin[k] = a->cmin[k];
    st->cmax[k] = a->cmax[k];
  }
  /* Top n_arms triples by frequency, ties to the smaller label: repeated
   * selection, n_arms passes over 19,683 counters (fast enough at <= 1000). */
  static const int n_trip = EVAL_CRITEO_NTRIPLES;
  unsigned char *taken = calloc(n_trip, 1);
  if (!taken) return o3m_err_set(e, O3M_ENOMEM, "criteo: out of memory");
  int k = 0;
  for (; k < n_arms; k++) {
    int best = -1;
    uint64_t best_label = 0;
    for (int t = 0; t < n_trip; t++) {
      if (taken[t] || a->freq[t] == 0) continue;
      int c[EVAL_CRITEO_NBUCKET];
      triple_of(t, c);
      uint64_t lab = eval_criteo_item_label(c);
      if (best < 0 || a->freq[t] > a->freq[best] ||
          (a->freq[t] == a->freq[best] && lab < best_label)) {
        best = t;
        best_label = lab;
      }
    }
    if (best < 0) break;
    taken[best] = 1;
    triple_of(best, st->arm_count[k]);
    st->arm_rows[k] = a->freq[best];
    st->arm_clicks[k] = a->freq_clicks[best];
  }
  free(taken);
  st->n_arms = k;
  return O3M_OK;
}

/* ---- stats file ---- */

int eval_criteo_stats_write(const eval_criteo_stats *st, const char *path, o3m_err *e) {
  FILE *f = fopen(path, "w");
  if (!f) return o3m_err_set(e, O3M_EIO, "%s: cannot create: %s", path, strerror(errno));
  fprintf(f, "o3m-criteo-stats 1\n");
  fprintf(f, "# Criteo preprocessing statistics (see eval/eval_criteo_prep.h).\n");
  fprintf(f, "rows %lld\nclicks %lld\ntransform %s\nbucket hex-mod-3\n", st->rows, st->clicks,
          eval_criteo_transform_name(st->transform));
  fprintf(f, "int_min");
  for (int i = 0; i < EVAL_CRITEO_NINT; i++) fprintf(f, " %.17g", st->imin[i]);
  fprintf(f, "\nint_max");
  for (int i = 0; i < EVAL_CRITEO_NINT; i++) fprintf(f, " %.17g", st->imax[i]);
  fprintf(f, "\ncount_min %.17g %.17g %.17g\ncount_max %.17g %.17g %.17g\n", st->cmin[0],
          st->cmin[1], st->cmin[2], st->cmax[0], st->cmax[1], st->cmax[2]);
  fprintf(f, "arms %d\n", st->n_arms);
  for (int a = 0; a < st->n_arms; a++)
    fprintf(f, "arm %d %llu %d %d %d %lld %lld\n", a,
            (unsigned long long)eval_criteo_item_label(st->arm_count[a]), st->arm_count[a][0],
            st->arm_count[a][1], st->arm_count[a][2], st->arm_rows[a], st->arm_clicks[a]);
  int bad = ferror(f);
  if (fclose(f) || bad)
    return o3m_err_set(e, O3M_EIO, "%s: write failed: %s", path, strerror(errno));
  return O3M_OK;
}

/* Reads n doubles after the key on a line; 0 or -1. */
static int read_doubles(const char *s, double *out, int n) {
  for (int i = 0; i < n; i++) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || !isfinite(v)) return -1;
    out[i] = v;
    s = end;
  }
  while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r') s++;
  return *s ? -1 : 0;
}

int eval_criteo_stats_read(eval_criteo_stats *st, const char *path, o3m_err *e) {
  FILE *f = fopen(path, "r");
  if (!f) return o3m_err_set(e, O3M_EIO, "%s: cannot open: %s", path, strerror(errno));
  memset(st, 0, sizeof *st);
  char line[512];
  int ln = 0, rc = O3M_OK, seen = 0, arms_read = 0;
  enum { S_MAGIC = 1, S_ROWS = 2, S_CLICKS = 4, S_TR = 8, S_BUCKET = 16, S_IMIN = 32,
         S_IMAX = 64, S_CMIN = 128, S_CMAX = 256, S_ARMS = 512 };
  st->n_arms = -1;
  while (fgets(line, sizeof line, f)) {
    ln++;
    size_t len = strlen(line);
    if (len == sizeof line - 1 && line[len - 1] != '\n') {
      rc = o3m_err_set(e, O3M_EPARSE, "%s:%d: line too long", path, ln);
      break;
    }
    if (line[0] == '#' || line[0] == '\n') continue;
    char key[32];
    int off = 0;
    if (sscanf(line, "%31s%n", key, &off) != 1) continue;
    const char *rest = line + off;
    int ok = 1;
    if (!(seen & S_MAGIC)) {
      ok = !strcmp(key, "o3m-criteo-stats") && atoi(rest) == 1;
      if (!ok) {
        rc = o3m_err_set(e, O3M_EPARSE, "%s:%d: not an o3m Criteo stats file (version 1)",
                         path, ln);
        break;
      }
      seen |= S_MAGIC;
    } else if (!strcmp(key, "rows")) {
      ok = sscanf(rest, "%lld", &st->rows) == 1 && st->rows > 0;
      seen |= S_ROWS;
    } else if (!strcmp(key, "clicks")) {
      ok = sscanf(rest, "%lld", &st->clicks) == 1 && st->clicks >= 0;
      seen |= S_CLICKS;
    } else if (!strcmp(key, "transform")) {
      char v[16];
      ok = sscanf(rest, "%15s", v) == 1 && !eval_criteo_transform_parse(v, &st->transform);
      seen |= S_TR;
    } else if (!strcmp(key, "bucket")) {
      char v[32];
      ok = sscanf(rest, "%31s", v) == 1 && !strcmp(v, "hex-mod-3");
      seen |= S_BUCKET;
    } else if (!strcmp(key, "int_min")) {
      ok = !read_doubles(rest, st->imin, EVAL_CRITEO_NINT);
      seen |= S_IMIN;
    } else if (!strcmp(key, "int_max")) {
      ok = !read_doubles(rest, st->imax, EVAL_CRITEO_NINT);
      seen |= S_IMAX;
    } else if (!strcmp(key, "count_min")) {
      ok = !read_doubles(rest, st->cmin, EVAL_CRITEO_NBUCKET);
      seen |= S_CMIN;
    } else if (!strcmp(key, "count_max")) {
      ok = !read_doubles(rest, st->cmax, EVAL_CRITEO_NBUCKET);
      seen |= S_CMAX;
    } else if (!strcmp(key, "arms")) {
      ok = sscanf(rest, "%d", &st->n_arms) == 1 && st->n_arms >= 1 &&
           st->n_arms <= EVAL_CRITEO_MAX_ARMS;
      seen |= S_ARMS;
    } else if (!strcmp(key, "arm")) {
      int idx, c[3], extra = 0;
      unsigned long long lab;
      long long rows, clicks;
      ok = (seen & S_ARMS) && sscanf(rest, "%d %llu %d %d %d %lld %lld %n", &idx, &lab, &c[0],
                                     &c[1], &c[2], &rows, &clicks, &extra) == 7 &&
           rest[extra] == '\0' && idx == arms_read && idx < st->n_arms;
      for (int k = 0; ok && k < 3; k++) ok = c[k] >= 0 && c[k] <= EVAL_CRITEO_NCAT;
      ok = ok && c[0] + c[1] + c[2] <= EVAL_CRITEO_NCAT && eval_criteo_item_label(c) == lab &&
           rows >= 0 && clicks >= 0 && clicks <= rows;
      if (ok) {
        memcpy(st->arm_count[idx], c, sizeof c);
        st->arm_rows[idx] = rows;
        st->arm_clicks[idx] = clicks;
        arms_read++;
      }
    } else {
      rc = o3m_err_set(e, O3M_EPARSE, "%s:%d: unknown key '%s'", path, ln, key);
      break;
    }
    if (!ok) {
      rc = o3m_err_set(e, O3M_EPARSE, "%s:%d: malformed '%s' line", path, ln, key);
      break;
    }
  }
  if (!rc && ferror(f)) rc = o3m_err_set(e, O3M_EIO, "%s: read failed", path);
  fclose(f);
  if (rc) return rc;
  if (seen != (S_MAGIC | S_ROWS | S_CLICKS | S_TR | S_BUCKET | S_IMIN | S_IMAX | S_CMIN |
               S_CMAX | S_ARMS))
    return o3m_err_set(e, O3M_EPARSE, "%s: incomplete (a key is missing)", path);
  if (arms_read != st->n_arms)
    return o3m_err_set(e, O3M_EPARSE, "%s: %d arm lines for 'arms %d'", path, arms_read,
                       st->n_arms);
  /* Two arms with the same triple would be one label twice. */
  for (int a = 0; a < st->n_arms; a++)
    for (int b = 0; b < a; b++)
      if (!memcmp(st->arm_count[a], st->arm_count[b], sizeof st->arm_count[a]))
        return o3m_err_set(e, O3M_EPARSE, "%s: arms %d and %d have the same label", path, b, a);
  return O3M_OK;
}

/* ---- features ---- */

static inline double scale(double x, double lo, double hi) {
  if (!(hi > lo)) return 0.0;
  double s = (x - lo) / (hi - lo);
  return s < 0 ? 0 : s > 1 ? 1 : s;
}

void eval_criteo_user(const eval_criteo_stats *st, const eval_criteo_row *row,
                      double u[EVAL_CRITEO_NINT]) {
  for (int i = 0; i < EVAL_CRITEO_NINT; i++)
    u[i] = row->imissing[i] ? 0.0 : scale(row->ival[i], st->imin[i], st->imax[i]);
}

void eval_criteo_item(const eval_criteo_stats *st, const int count[EVAL_CRITEO_NBUCKET],
                      double v[EVAL_CRITEO_NBUCKET]) {
  for (int k = 0; k < EVAL_CRITEO_NBUCKET; k++)
    v[k] = scale((double)count[k], st->cmin[k], st->cmax[k]);
}

void eval_criteo_outer_sum(const double u[EVAL_CRITEO_NINT], const double v[EVAL_CRITEO_NBUCKET],
                           double x[EVAL_CRITEO_DIM]) {
  for (int i = 0; i < EVAL_CRITEO_NINT; i++)
    for (int k = 0; k < EVAL_CRITEO_NBUCKET; k++) x[i * EVAL_CRITEO_NBUCKET + k] = u[i] + v[k];
}
