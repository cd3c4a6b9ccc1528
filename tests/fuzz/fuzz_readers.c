/* fuzz_readers.c -- libFuzzer targets for the readers of logged data in
 * eval/ (eval_reader.h) and the Criteo statistics file.
 *
 * One source, one target per format: CMake compiles this file once per
 * format with FUZZ_READER_ENTRY naming the function below that
 * LLVMFuzzerTestOneInput calls. Inputs:
 *   fuzz_reader_news     the whole input is a news10k log.
 *   fuzz_reader_obd      byte 0 picks the options (position = b % 4, user
 *                        buckets = 1 + (b / 4) % 32); then the item table,
 *                        a NUL byte, and the log.
 *   fuzz_reader_criteo   byte 0 picks the form (bit 0: CSV, else TSV) and the
 *                        transform (bit 1: log); the rest is the file. The
 *                        statistics come from eval_criteo_scan over its first
 *                        3 rows (as `--stats-rows` would give), so later rows
 *                        fall outside the min-max range; then the statistics
 *                        are written and read back and the file is replayed.
 *   fuzz_criteo_stats    the whole input is a statistics file; one that reads
 *                        is written again and must read back identical.
 * Every event is checked against eval_reader.h: arm in 0..K-1, finite
 * reward and contexts, X = w + C row by row for additively split readers,
 * line numbers increasing, bytes read never beyond the size. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "eval_criteo_prep.h"
#include "eval_reader.h"
#include "fuzz_util.h"

static fuzz_file g_a, g_b, g_stats;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  fuzz_file_init(&g_a, "fuzz_reader_a");
  fuzz_file_init(&g_b, "fuzz_reader_b");
  fuzz_file_init(&g_stats, "fuzz_reader_stats");
  return 0;
}

/* Reads r to its end or first error, checking every event; then destroys
 * it. size is the size of the log file. */
static void drain(eval_reader *r, size_t size) {
  int K = eval_reader_arms(r), d = eval_reader_dim(r);
  FUZZ_CHECK(K >= 1 && d >= 1);
  FUZZ_CHECK(eval_reader_describe(r) != NULL && eval_reader_skip_reason(r) != NULL);
  FUZZ_CHECK(eval_reader_size(r) == (long long)size);
  const double *C = eval_reader_item_part(r);
  long long prev_line = 0;
  o3m_err e;
  for (;;) {
    eval_event ev;
    int rc = eval_reader_next(r, &ev, &e);
    if (rc < 0) {
      /* After an error the reader may only be destroyed. */
      FUZZ_CHECK(strlen(o3m_err_message(&e)) > 0);
      break;
    }
    if (rc == 0) {
      FUZZ_CHECK(eval_reader_next(r, &ev, &e) == 0);
      break;
    }
    FUZZ_CHECK(rc == 1);
    FUZZ_CHECK(ev.arm >= 0 && ev.arm < K);
    FUZZ_CHECK(isfinite(ev.reward));
    FUZZ_CHECK(ev.line > prev_line);
    prev_line = ev.line;
    FUZZ_CHECK((ev.w != NULL) == (C != NULL));
    for (size_t i = 0; i < (size_t)K * d; i++) FUZZ_CHECK(isfinite(ev.X[i]));
    if (C)
      for (int a = 0; a < K; a++)
        for (int j = 0; j < d; j++)
          FUZZ_CHECK(ev.X[(size_t)a * d + j] == ev.w[j] + C[(size_t)a * d + j]);
    FUZZ_CHECK(eval_reader_bytes_read(r) <= (long long)size);
  }
  (void)eval_reader_skipped(r);
  eval_reader_destroy(r);
}

void fuzz_reader_news(const uint8_t *data, size_t size) {
  eval_reader *r = NULL;
  o3m_err e;
  if (eval_reader_open_news(&r, fuzz_file_set(&g_a, data, size), &e) != 0) {
    FUZZ_CHECK(r == NULL);
    return;
  }
  drain(r, size);
}

void fuzz_reader_obd(const uint8_t *data, size_t size) {
  if (size < 1) return;
  eval_obd_options opt;
  eval_obd_options_default(&opt);
  opt.position = data[0] % 4;
  opt.user_buckets = 1 + (data[0] / 4) % 32;
  data++, size--;
  size_t cut = fuzz_split_at_nul(data, size);
  if (cut == size) return;
  const char *items = fuzz_file_set(&g_b, data, cut);
  size_t log_size = size - cut - 1;
  const char *log = fuzz_file_set(&g_a, data + cut + 1, log_size);
  eval_reader *r = NULL;
  o3m_err e;
  if (eval_reader_open_obd(&r, log, items, &opt, &e) != 0) {
    FUZZ_CHECK(r == NULL);
    return;
  }
  drain(r, log_size);
}

/* Compares the parts of two statistics that the file carries. */
static int stats_equal(const eval_criteo_stats *a, const eval_criteo_stats *b) {
  if (a->rows != b->rows || a->clicks != b->clicks || a->transform != b->transform ||
      a->n_arms != b->n_arms)
    return 0;
  if (memcmp(a->imin, b->imin, sizeof a->imin) || memcmp(a->imax, b->imax, sizeof a->imax) ||
      memcmp(a->cmin, b->cmin, sizeof a->cmin) || memcmp(a->cmax, b->cmax, sizeof a->cmax))
    return 0;
  for (int k = 0; k < a->n_arms; k++)
    if (memcmp(a->arm_count[k], b->arm_count[k], sizeof a->arm_count[k]) ||
        a->arm_rows[k] != b->arm_rows[k] || a->arm_clicks[k] != b->arm_clicks[k])
      return 0;
  return 1;
}

/* The statistics are large (arm tables of EVAL_CRITEO_MAX_ARMS rows), so
 * they live here rather than on the stack. */
static eval_criteo_stats g_st, g_st2;

void fuzz_reader_criteo(const uint8_t *data, size_t size) {
  if (size < 1) return;
  int csv = data[0] & 1;
  eval_criteo_transform tr = (data[0] & 2) ? EVAL_CRITEO_INT_LOG : EVAL_CRITEO_INT_RAW;
  data++, size--;
  const char *path = fuzz_file_set(&g_a, data, size);
  o3m_err e;
  memset(&g_st, 0, sizeof g_st);
  if (eval_criteo_scan(path, csv, 3, tr, EVAL_CRITEO_DEFAULT_ARMS, &g_st, &e) != 0) return;
  FUZZ_CHECK(g_st.n_arms >= 1 && g_st.n_arms <= EVAL_CRITEO_DEFAULT_ARMS);
  FUZZ_CHECK(g_st.rows >= 1 && g_st.rows <= 3 && g_st.clicks <= g_st.rows);
  FUZZ_CHECK(eval_criteo_stats_write(&g_st, g_stats.path, &e) == 0);
  memset(&g_st2, 0, sizeof g_st2);
  FUZZ_CHECK(eval_criteo_stats_read(&g_st2, g_stats.path, &e) == 0);
  FUZZ_CHECK(stats_equal(&g_st, &g_st2));
  eval_reader *r = NULL;
  if (eval_reader_open_criteo(&r, path, csv, &g_st2, &e) != 0) {
    FUZZ_CHECK(r == NULL);
    return;
  }
  FUZZ_CHECK(eval_reader_arms(r) == g_st.n_arms && eval_reader_dim(r) == EVAL_CRITEO_DIM);
  drain(r, size);
}

void fuzz_criteo_stats(const uint8_t *data, size_t size) {
  o3m_err e;
  memset(&g_st, 0, sizeof g_st);
  if (eval_criteo_stats_read(&g_st, fuzz_file_set(&g_a, data, size), &e) != 0) return;
  FUZZ_CHECK(g_st.n_arms >= 1 && g_st.n_arms <= EVAL_CRITEO_MAX_ARMS);
  FUZZ_CHECK(eval_criteo_stats_write(&g_st, g_stats.path, &e) == 0);
  memset(&g_st2, 0, sizeof g_st2);
  FUZZ_CHECK(eval_criteo_stats_read(&g_st2, g_stats.path, &e) == 0);
  FUZZ_CHECK(stats_equal(&g_st, &g_st2));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  FUZZ_READER_ENTRY(data, size);
  return 0;
}
