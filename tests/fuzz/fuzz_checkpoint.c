/* fuzz_checkpoint.c -- libFuzzer target for the AP's recovery
 * (ap_checkpoint_open, active_participant/ap_checkpoint.h): the checkpoint
 * files and journal segments found in the state directory are the input.
 *
 * Input: byte 0 holds options: bit 0 salvage, bit 1 "fix the CRCs" (the
 * harness recomputes the header and image CRCs of each checkpoint and
 * repairs each journal segment as fuzz_segment.h says before writing, so
 * that mutations reach the policy image reader and the journal checks
 * behind them). The rest is cut
 * at each "O3MCKPT\0" and "O3MJSEG\0" magic into checkpoint files (named
 * ap-ckpt-<seq at bytes 16..23>.ckpt) and journal segments (named after
 * their first seq). The policy is LinUCB, shared, d = 2; the installed mask
 * id is FUZZ_MASK_ID. Recovery runs in a private directory on tmpfs.
 *
 * Properties:
 *   - a failed recovery leaves no handle and the policy fresh (documented);
 *   - after a successful one, a reward can be journaled and a checkpoint
 *     written; when that checkpoint is written, a second recovery succeeds,
 *     replays nothing, and restores the state bit for bit. */
#include <stdint.h>
#include <string.h>

#include "ap_checkpoint.h"
#include "o3m_bytes.h"
#include "fuzz_util.h"
#include "fuzz_segment.h"
#include "o3m_log.h"

#define D 2
#define FUZZ_MASK_ID 0x1234ULL
#define CK_MAGIC "O3MCKPT"
#define SEG_MAGIC "O3MJSEG"
#define MAGIC_LEN 8 /* with its NUL */

static const char *g_dir;
static o3m_policy *g_pol;
static size_t g_size;
static uint8_t *g_fresh, *g_img, *g_img2;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  g_dir = fuzz_dir_init("fuzz-checkpoint");
  /* A level above ERROR: every input is hostile, and recovery's warnings
   * about it would only slow the run down. */
  o3m_log_init("fuzz_checkpoint", (o3m_log_level)(O3M_LOG_ERROR + 1));
  o3m_policy_config cfg;
  o3m_policy_config_default(&cfg);
  cfg.d = D;
  cfg.n_arms = 1;
  cfg.max_candidates = 4;
  o3m_err e;
  if (o3m_policy_create(&g_pol, &cfg, &e) != 0) fuzz_die("o3m_policy_create");
  g_size = o3m_policy_state_size(g_pol);
  g_fresh = malloc(g_size);
  g_img = malloc(g_size);
  g_img2 = malloc(g_size);
  if (!g_fresh || !g_img || !g_img2) fuzz_die("malloc");
  if (o3m_policy_state_export(g_pol, g_fresh, g_size) != 0) fuzz_die("export");
  return 0;
}

static void write_checkpoint(uint8_t *f, size_t n, int fix) {
  if (fix && n >= 64) {
    fuzz_put_le32(f + 60, o3m_crc32c(0, f, 60));
    uint64_t N = fuzz_le64(f + 32);
    if (N <= n && n - N == 80) fuzz_put_le32(f + 64 + N, o3m_crc32c(0, f + 64, N));
  }
  uint64_t seq = n >= 24 ? fuzz_le64(f + 16) : 0;
  char name[64];
  snprintf(name, sizeof name, "ap-ckpt-%016llx.ckpt", (unsigned long long)seq);
  fuzz_dir_write(name, f, n);
}

static void write_piece(uint8_t *p, size_t n, int fix) {
  if (n >= MAGIC_LEN && !memcmp(p, SEG_MAGIC, MAGIC_LEN)) fuzz_segment_write(p, n, D, fix);
  else write_checkpoint(p, n, fix);
}

static int recover(ap_checkpoint **c, int salvage, ap_recovery_info *info, o3m_err *e) {
  ap_checkpoint_options opt;
  ap_checkpoint_options_default(&opt);
  opt.state_dir = g_dir;
  opt.mask_id = FUZZ_MASK_ID;
  opt.salvage = salvage;
  opt.group_records = 4;
  opt.segment_bytes = AP_JOURNAL_SEGMENT_HEADER + 8 * AP_JOURNAL_RECORD_BYTES(D);
  opt.every_records = 0;
  opt.every_ms = 0;
  return ap_checkpoint_open(c, g_pol, &opt, info, e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  int salvage = data[0] & 1, fix = (data[0] >> 1) & 1;
  fuzz_dir_clear();

  uint8_t *buf = malloc(size);
  if (!buf) fuzz_die("malloc");
  size_t n = size - 1;
  memcpy(buf, data + 1, n);
  size_t start = 0;
  for (size_t k = 1; k + MAGIC_LEN <= n; k++) {
    if (!memcmp(buf + k, CK_MAGIC, MAGIC_LEN) || !memcmp(buf + k, SEG_MAGIC, MAGIC_LEN)) {
      write_piece(buf + start, k - start, fix);
      start = k;
    }
  }
  if (n > 0) write_piece(buf + start, n - start, fix);
  free(buf);

  ap_checkpoint *c = NULL;
  ap_recovery_info info;
  o3m_err e;
  int rc = recover(&c, salvage, &info, &e);
  if (rc != 0) {
    FUZZ_CHECK(rc < 0 && c == NULL);
    FUZZ_CHECK(o3m_policy_state_export(g_pol, g_img, g_size) == 0);
    FUZZ_CHECK(memcmp(g_img, g_fresh, g_size) == 0);
    return 0;
  }
  FUZZ_CHECK(info.last_seq >= info.checkpoint_seq);
  FUZZ_CHECK(info.refactors <= info.replayed);

  double x[D] = {0.5, -0.25};
  rc = ap_checkpoint_apply_reward(c, 42, 0, x, NULL, 1.0);
  FUZZ_CHECK(rc != O3M_EIO);
  FUZZ_CHECK(ap_checkpoint_sync(c, &e) == 0);
  int wrote = ap_checkpoint_write(c, &e) == 0;
  FUZZ_CHECK(o3m_policy_state_export(g_pol, g_img, g_size) == 0);
  ap_checkpoint_close(c);
  if (!wrote) return 0;

  c = NULL;
  rc = recover(&c, 0, &info, &e);
  if (rc != 0) fprintf(stderr, "second recovery: %s\n", o3m_err_message(&e));
  FUZZ_CHECK(rc == 0);
  FUZZ_CHECK(info.replayed == 0);
  FUZZ_CHECK(o3m_policy_state_export(g_pol, g_img2, g_size) == 0);
  FUZZ_CHECK(memcmp(g_img, g_img2, g_size) == 0);
  ap_checkpoint_close(c);
  return 0;
}
