/* eval_tables.c -- synthetic feature tables (see eval_tables.h).
 *
 * Values come in pairs from Box-Muller over a splitmix64 stream started at
 * the seed (o3m_splitmix.h); the second of a pair is kept for the next
 * value, so the file depends on the seed alone. */
#include "eval_tables.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "o3m_splitmix.h"

int eval_tables_write_synthetic(const char *path, o3m_features_kind kind,
                                const char *id_prefix, int n_rows, int n_cols,
                                uint64_t seed, o3m_err *e) {
  if (!path || !id_prefix)
    return o3m_err_set(e, O3M_EINVAL, "eval_tables_write_synthetic: NULL argument");
  if (kind != O3M_FEATURES_USERS && kind != O3M_FEATURES_ITEMS)
    return o3m_err_set(e, O3M_EINVAL, "eval_tables_write_synthetic: bad kind %d",
                       (int)kind);
  if (n_rows < 1 || n_rows > O3M_FEATURES_MAX_ROWS || n_cols < 1 ||
      n_cols > O3M_FEATURES_MAX_COLS)
    return o3m_err_set(e, O3M_EINVAL,
                       "eval_tables_write_synthetic: %d rows x %d columns out "
                       "of range",
                       n_rows, n_cols);
  /* The longest id is the prefix plus up to 10 digits. */
  if (strpbrk(id_prefix, ",\r\n") || strlen(id_prefix) + 10 > O3M_MAX_ID)
    return o3m_err_set(e, O3M_EINVAL,
                       "eval_tables_write_synthetic: id prefix must be at most "
                       "%d bytes without comma or line break",
                       O3M_MAX_ID - 10);
  FILE *f = fopen(path, "w");
  if (!f)
    return o3m_err_set(e, O3M_EIO, "%s: cannot create: %s", path, strerror(errno));
  uint64_t s = seed;
  double spare = 0.0;
  int have_spare = 0;
  fputs(kind == O3M_FEATURES_USERS ? "user_id" : "item_id", f);
  for (int c = 0; c < n_cols; c++) fprintf(f, ",x%d", c);
  fputc('\n', f);
  for (int r = 0; r < n_rows; r++) {
    fprintf(f, "%s%d", id_prefix, r);
    for (int c = 0; c < n_cols; c++) {
      double v;
      if (have_spare) {
        v = spare;
        have_spare = 0;
      } else {
        o3m_splitmix64_gauss2(&s, &v, &spare);
        have_spare = 1;
      }
      fprintf(f, ",%.17g", v);
    }
    fputc('\n', f);
  }
  int bad = ferror(f);
  if (fclose(f) != 0) bad = 1;
  if (bad) {
    remove(path);
    return o3m_err_set(e, O3M_EIO, "%s: write error", path);
  }
  return O3M_OK;
}
