/* fuzz_journal.c -- libFuzzer target for the AP's write-ahead log reader
 * (ap_journal_open, active_participant/ap_journal.h): what it finds on disk
 * after a crash or a damaged disk is the input.
 *
 * Input: byte 0 holds options: bit 0 salvage, bits 1-2 `after` (0..3), bit 3
 * "fix" (the harness recomputes the CRC32C of every segment header and every
 * complete-looking record and gives each file the length its header
 * declares, fuzz_segment.h, so that mutations of the other fields reach the
 * checks behind them; without it, mutations exercise torn, cut and corrupt
 * files). The rest is cut into segment files at each "O3MJSEG\0" magic;
 * each is named after the first seq in its header (ap-journal-<16 hex>.wal;
 * seq 1 when the header is short). Records have d = 2; new segments have 8
 * slots. The journal is opened in a private directory on tmpfs.
 *
 * Properties:
 *   - replayed records come in seq order after `after`, with a valid type;
 *   - on success last_seq = after + replayed (records are consecutive);
 *   - the journal open repaired is clean: after appending one record and
 *     closing, reopening without salvage succeeds, replays the same records
 *     plus the new one, and cuts nothing. */
#include <stdint.h>
#include <string.h>

#include "ap_journal.h"
#include "o3m_bytes.h"
#include "fuzz_util.h"
#include "fuzz_segment.h"
#include "o3m_log.h"

#define D 2
#define MAGIC "O3MJSEG"
#define MAGIC_LEN 8 /* with its NUL */

static const char *g_dir;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  g_dir = fuzz_dir_init("fuzz-journal");
  /* A level above ERROR: every input is hostile, and the journal's warnings
   * about it (torn tails, salvage) would only slow the run down. */
  o3m_log_init("fuzz_journal", (o3m_log_level)(O3M_LOG_ERROR + 1));
  return 0;
}

typedef struct replay_state {
  uint64_t next; /* seq expected next */
  uint64_t count;
} replay_state;

static int on_record(void *ctx, const ap_journal_record *r) {
  replay_state *st = ctx;
  FUZZ_CHECK(r->seq == st->next);
  FUZZ_CHECK(r->type == AP_JOURNAL_REWARD || r->type == AP_JOURNAL_REFACTOR);
  FUZZ_CHECK(r->x != NULL);
  volatile double s = r->x[0] + r->x[D - 1];
  (void)s;
  st->next++;
  st->count++;
  return 0;
}

static int open_journal(ap_journal **j, uint64_t after, int salvage, replay_state *st,
                        ap_journal_info *info, o3m_err *e) {
  ap_journal_options opt;
  ap_journal_options_default(&opt);
  opt.dir = g_dir;
  opt.d = D;
  opt.after = after;
  opt.salvage = salvage;
  opt.buffer_records = 4;
  opt.segment_bytes = AP_JOURNAL_SEGMENT_HEADER + 8 * AP_JOURNAL_RECORD_BYTES(D);
  opt.replay = on_record;
  opt.replay_ctx = st;
  st->next = after + 1;
  st->count = 0;
  return ap_journal_open(j, &opt, info, e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  int salvage = data[0] & 1, fix = (data[0] >> 3) & 1;
  uint64_t after = (data[0] >> 1) & 3;
  fuzz_dir_clear();

  /* Cut at every magic after the first byte; write each piece. */
  uint8_t *buf = malloc(size);
  if (!buf) fuzz_die("malloc");
  size_t n = size - 1;
  memcpy(buf, data + 1, n);
  size_t start = 0;
  for (size_t k = 1; k + MAGIC_LEN <= n; k++) {
    if (!memcmp(buf + k, MAGIC, MAGIC_LEN)) {
      fuzz_segment_write(buf + start, k - start, D, fix);
      start = k;
    }
  }
  if (n > 0) fuzz_segment_write(buf + start, n - start, D, fix);
  free(buf);

  ap_journal *j = NULL;
  ap_journal_info info;
  replay_state st;
  o3m_err e;
  int rc = open_journal(&j, after, salvage, &st, &info, &e);
  if (rc != 0) {
    FUZZ_CHECK(rc < 0 && j == NULL);
    return 0;
  }
  FUZZ_CHECK(info.replayed == st.count);
  FUZZ_CHECK(info.last_seq == after + st.count);
  FUZZ_CHECK(ap_journal_last_seq(j) == info.last_seq);
  uint64_t replayed = st.count;

  double x[D] = {0.25, -1};
  ap_journal_record r = {.type = AP_JOURNAL_REWARD, .decision = 7, .mask_id = 9, .arm = 0,
                         .reward = 1, .x = x};
  uint64_t seq = 0;
  FUZZ_CHECK(ap_journal_append(j, &r, &seq) == 0);
  FUZZ_CHECK(seq == info.last_seq + 1);
  FUZZ_CHECK(ap_journal_sync(j, &e) == 0);
  ap_journal_close(j);

  j = NULL;
  rc = open_journal(&j, after, 0, &st, &info, &e);
  if (rc != 0) fprintf(stderr, "reopen: %s\n", o3m_err_message(&e));
  FUZZ_CHECK(rc == 0);
  FUZZ_CHECK(st.count == replayed + 1);
  FUZZ_CHECK(info.tail_bytes_cut == 0 && info.salvaged == 0);
  ap_journal_close(j);
  return 0;
}
