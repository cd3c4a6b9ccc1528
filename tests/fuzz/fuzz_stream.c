/* fuzz_stream.c -- libFuzzer target for the full-information stream reader
 * (eval/paper/eval_stream.h).
 *
 * The input is the file: it is put in a memfd and read round by round until
 * the end or the first error. Each round is checked against what the reader
 * promises: K fixed by the first round, rounds strictly increasing, every
 * context value and reward finite. */
#include <math.h>
#include <stdint.h>

#include "eval_stream.h"
#include "fuzz_util.h"

static fuzz_file g_file;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  fuzz_file_init(&g_file, "fuzz_stream");
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  o3m_err e;
  eval_stream *s = NULL;
  if (eval_stream_open(&s, fuzz_file_set(&g_file, data, size), &e) != 0) {
    FUZZ_CHECK(s == NULL);
    return 0;
  }
  int d = eval_stream_dim(s);
  FUZZ_CHECK(d >= 1);
  FUZZ_CHECK(eval_stream_arms(s) == 0);
  int K = 0;
  long prev = 0;
  for (int n = 0;; n++) {
    long round;
    const double *X, *r;
    int rc = eval_stream_next(s, &round, &X, &r, &e);
    if (rc <= 0) break;
    FUZZ_CHECK(rc == 1);
    int k = eval_stream_arms(s);
    FUZZ_CHECK(k >= 1 && k <= EVAL_STREAM_MAX_ARMS);
    if (n == 0) K = k;
    FUZZ_CHECK(k == K);
    if (n > 0) FUZZ_CHECK(round > prev);
    prev = round;
    for (size_t i = 0; i < (size_t)K * d; i++) FUZZ_CHECK(isfinite(X[i]));
    for (int a = 0; a < K; a++) FUZZ_CHECK(isfinite(r[a]));
  }
  eval_stream_close(s);
  return 0;
}
