/* test_checkpoint.c -- the AP's durable model state: policy state export and
 * import, checkpoints plus journal replay equal to an uninterrupted run bit
 * for bit (every algo and model), fallback from a damaged newest checkpoint,
 * mask id and configuration mismatches, the numerical health check and its
 * journaled repair, bounded journal growth, and a crash test that kills a
 * real process (crash_child) with SIGKILL at random moments.
 *
 * Bit-for-bit comparisons export both policies' state images and memcmp
 * them. O3M_CRASH_ITERS sets the number of kill points per crash test
 * (default 3), O3M_CRASH_SEED the seed of their timing. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ap_checkpoint.h"
#include "ap_journal.h"
#include "crash_child.h"
#include "o3m_blas.h"
#include "o3m_bytes.h"
#include "o3m_rng.h"

#define MASK_A 0xaaaa000000000001ULL
#define MASK_B 0xbbbb000000000002ULL

static char dir[256];

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(p);
}

static void make_dir(void) {
  o3m_blas_single_thread();
  snprintf(dir, sizeof dir, "/tmp/o3m-ckpt-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
}

static void drop_dir(void) { nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS); }

TestSuite(checkpoint, .init = make_dir, .fini = drop_dir);

/* ---------------------------------------------------------------- helpers */

static void config(o3m_policy_config *c, o3m_algo algo, o3m_model_kind model) {
  o3m_policy_config_default(c);
  c->algo = algo;
  c->model = model;
  c->d = 12;
  c->n_arms = 6;
  c->max_candidates = 4;
  c->refactor_every = 23;
  c->seed = 99;
}

static o3m_policy *make_policy(const o3m_policy_config *c) {
  o3m_policy *p;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert_eq(o3m_policy_create(&p, c, &e), O3M_OK, "%s", e.msg);
  return p;
}

static unsigned char *export_state(const o3m_policy *p, size_t *len) {
  *len = o3m_policy_state_size(p);
  unsigned char *b = malloc(*len);
  cr_assert_not_null(b);
  cr_assert_eq(o3m_policy_state_export(p, b, *len), O3M_OK);
  return b;
}

/* memcmp of the two state images, naming the first differing byte. */
static void assert_same_state(const o3m_policy *a, const o3m_policy *b, const char *what) {
  size_t la, lb;
  unsigned char *x = export_state(a, &la), *y = export_state(b, &lb);
  cr_assert_eq(la, lb, "%s: image sizes %zu and %zu", what, la, lb);
  size_t k = 0;
  while (k < la && x[k] == y[k]) k++;
  cr_assert_eq(k, la, "%s: state images differ first at byte %zu of %zu", what, k, la);
  cr_assert_eq(memcmp(x, y, la), 0);
  free(x);
  free(y);
}

/* Opens dir, with the local model local (may be NULL). */
static ap_checkpoint *open_ck_local(o3m_policy *p, uint64_t mask, ap_recovery_info *info,
                                    int expect, ap_fallback *local) {
  ap_checkpoint_options o;
  ap_checkpoint_options_default(&o);
  o.state_dir = dir;
  o.mask_id = mask;
  o.every_ms = 0;
  o.local = local;
  ap_checkpoint *c = NULL;
  o3m_err e;
  o3m_err_clear(&e);
  int rc = ap_checkpoint_open(&c, p, &o, info, &e);
  cr_assert_eq(rc, expect, "open: %s, expected %s (%s)", o3m_errname(rc), o3m_errname(expect),
               e.msg);
  return c;
}

static ap_checkpoint *open_ck(o3m_policy *p, uint64_t mask, ap_recovery_info *info, int expect) {
  return open_ck_local(p, mask, info, expect, NULL);
}

/* Applies rewards from..to of the crash stream to the live policy through
 * the checkpoint module (syncing every 5) and to ref directly. */
static void feed(ap_checkpoint *c, o3m_policy *live, o3m_policy *ref, uint64_t from, uint64_t to,
                 int with_choose) {
  const o3m_policy_config *cfg = o3m_policy_config_of(live);
  double x[4 * 64];
  for (uint64_t i = from; i <= to; i++) {
    int arm;
    double r;
    if (with_choose && i % 3 == 0) {
      /* Thompson draws advance the sampler of both policies alike. */
      int arms[4], ca, cr;
      for (int k = 0; k < 4; k++) crash_reward(i * 100 + k, cfg->d, cfg->n_arms, &arms[k],
                                               x + k * cfg->d, &r);
      cr_assert_eq(o3m_policy_choose(live, 4, x, arms, &ca, NULL), O3M_OK);
      cr_assert_eq(o3m_policy_choose(ref, 4, x, arms, &cr, NULL), O3M_OK);
      cr_assert_eq(ca, cr);
    }
    crash_reward(i, cfg->d, cfg->n_arms, &arm, x, &r);
    cr_assert_eq(ap_checkpoint_apply_reward(c, i, arm, x, NULL, r), O3M_OK);
    if (ref) cr_assert_eq(o3m_policy_update(ref, arm, x, r), O3M_OK);
    if (i % 5 == 0) cr_assert_eq(ap_checkpoint_sync(c, NULL), O3M_OK);
  }
  cr_assert_eq(ap_checkpoint_sync(c, NULL), O3M_OK);
}

static void write_ck(ap_checkpoint *c) {
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert_eq(ap_checkpoint_write(c, &e), O3M_OK, "%s", e.msg);
}

static void ck_path(char *out, size_t n, uint64_t seq, const char *ext) {
  snprintf(out, n, "%s/ap-ckpt-%016llx%s", dir, (unsigned long long)seq, ext);
}

static int exists(const char *p) {
  struct stat st;
  return stat(p, &st) == 0;
}

static void flip_byte(const char *p, off_t off) {
  int fd = open(p, O_RDWR);
  cr_assert_geq(fd, 0, "%s", p);
  unsigned char b;
  cr_assert_eq(pread(fd, &b, 1, off), 1);
  b ^= 0x01;
  cr_assert_eq(pwrite(fd, &b, 1, off), 1);
  close(fd);
}

/* Counts files in dir whose names start with prefix and end with suffix. */
static int count_files(const char *prefix, const char *suffix) {
  DIR *dh = opendir(dir);
  cr_assert_not_null(dh);
  int n = 0;
  struct dirent *de;
  while ((de = readdir(dh))) {
    size_t l = strlen(de->d_name), s = strlen(suffix);
    if (!strncmp(de->d_name, prefix, strlen(prefix)) && l >= s &&
        !strcmp(de->d_name + l - s, suffix))
      n++;
  }
  closedir(dh);
  return n;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

/* ---------------------------------------------------- export and import */

Test(checkpoint, state_export_import_round_trip_and_checks) {
  o3m_policy_config c;
  config(&c, O3M_ALGO_LINTS, O3M_MODEL_DISJOINT);
  o3m_policy *a = make_policy(&c), *b = make_policy(&c), *fresh = make_policy(&c);
  double x[12], z[4 * 12];
  int arms[4] = {0, 1, 2, 3}, ch;
  for (uint64_t i = 1; i <= 50; i++) {
    int arm;
    double r;
    crash_reward(i, c.d, c.n_arms, &arm, x, &r);
    cr_assert_eq(o3m_policy_update(a, arm, x, r), O3M_OK);
  }
  for (int k = 0; k < 4; k++) memcpy(z + k * 12, x, sizeof x);
  cr_assert_eq(o3m_policy_choose(a, 3, z, arms, &ch, NULL), O3M_OK); /* a cached Gaussian */
  size_t len;
  unsigned char *img = export_state(a, &len);
  /* header, two counter blocks, Lambda and factor, u and theta, held rows */
  cr_assert_eq(len, 120 + 48 + 8 * (2 * 6 * 144 + 2 * 6 * 12 + 6 * 16 * 12));
  cr_assert_eq(o3m_policy_state_import(b, img, len, NULL), O3M_OK);
  assert_same_state(a, b, "import");
  /* The imported policy behaves identically, sampler included. */
  int ca, cb;
  double sa, sb;
  cr_assert_eq(o3m_policy_choose(a, 4, z, arms, &ca, &sa), O3M_OK);
  cr_assert_eq(o3m_policy_choose(b, 4, z, arms, &cb, &sb), O3M_OK);
  cr_assert_eq(ca, cb);
  cr_assert_eq(memcmp(&sa, &sb, sizeof sa), 0);
  assert_same_state(a, b, "after a choose");

  /* Bad images leave the state unchanged. */
  size_t lb;
  unsigned char *before = export_state(b, &lb), *bad = malloc(len);
  o3m_err e;
  memcpy(bad, img, len);
  bad[0] ^= 1;
  cr_assert_eq(o3m_policy_state_import(b, bad, len, &e), O3M_ECORRUPT);
  cr_assert_eq(o3m_policy_state_import(b, img, len - 8, &e), O3M_ECORRUPT);
  memcpy(bad, img, len);
  memset(bad + 56, 0, 32); /* an all-zero xoshiro state */
  cr_assert_eq(o3m_policy_state_import(b, bad, len, &e), O3M_ECORRUPT);
  memcpy(bad, img, len);
  bad[120 + 3] = 0x80; /* since_refactor[0] < 0 */
  cr_assert_eq(o3m_policy_state_import(b, bad, len, &e), O3M_ECORRUPT);
  memcpy(bad, img, len);
  bad[120 + 24 + 4 * 5] = 16; /* n_held[5] = 16, not below the block size */
  cr_assert_eq(o3m_policy_state_import(b, bad, len, &e), O3M_ECORRUPT);
  cr_assert(strstr(e.msg, "model 5: held-row count"), "%s", e.msg);
  memcpy(bad, img, len);
  bad[112] = 8; /* another block size: another release, not damage */
  cr_assert_eq(o3m_policy_state_import(b, bad, len, &e), O3M_EDIM);
  memcpy(bad, img, len);
  bad[8] = 1; /* format version 1 */
  cr_assert_eq(o3m_policy_state_import(b, bad, len, &e), O3M_EDIM);
  cr_assert(strstr(e.msg, "format version 1"), "%s", e.msg);
  size_t la;
  unsigned char *after = export_state(b, &la);
  cr_assert_eq(memcmp(before, after, lb), 0);

  /* Another configuration: refused with a message naming the field. */
  o3m_policy_config c2 = c;
  c2.lambda = 2;
  o3m_policy *other = make_policy(&c2);
  o3m_err_clear(&e);
  cr_assert_eq(o3m_policy_state_import(other, img, len, &e), O3M_EDIM);
  cr_assert_not_null(strstr(e.msg, "lambda"), "%s", e.msg);
  c2 = c;
  c2.n_arms = 7;
  o3m_policy *other2 = make_policy(&c2);
  cr_assert_eq(o3m_policy_state_import(other2, img, len, &e), O3M_EDIM);

  /* Reset gives a new policy's state. */
  cr_assert_eq(o3m_policy_reset(a), O3M_OK);
  assert_same_state(a, fresh, "reset");
  free(img), free(bad), free(before), free(after);
  o3m_policy_destroy(a), o3m_policy_destroy(b), o3m_policy_destroy(fresh);
  o3m_policy_destroy(other), o3m_policy_destroy(other2);
}

Test(checkpoint, rng_state_get_set_continues_the_stream) {
  o3m_rng *a, *b, *os;
  cr_assert_eq(o3m_rng_create_seeded_insecure(&a, 5), O3M_OK);
  cr_assert_eq(o3m_rng_create_seeded_insecure(&b, 6), O3M_OK);
  double g[3], h[3];
  o3m_rng_gaussian(a, g, 3); /* leaves a cached spare */
  o3m_rng_state st;
  cr_assert_eq(o3m_rng_state_get(a, &st), O3M_OK);
  cr_assert_eq(st.have_spare, 1);
  cr_assert_eq(o3m_rng_state_set(b, &st), O3M_OK);
  o3m_rng_gaussian(a, g, 3);
  o3m_rng_gaussian(b, h, 3);
  cr_assert_eq(memcmp(g, h, sizeof g), 0);
  o3m_rng_state zero = {{0, 0, 0, 0}, 0, 0};
  cr_assert_eq(o3m_rng_state_set(b, &zero), O3M_EINVAL);
  st.have_spare = 2;
  cr_assert_eq(o3m_rng_state_set(b, &st), O3M_EINVAL);
  cr_assert_eq(o3m_rng_create_os(&os), O3M_OK);
  cr_assert_eq(o3m_rng_state_get(os, &st), O3M_EINVAL);
  o3m_rng_destroy(a), o3m_rng_destroy(b), o3m_rng_destroy(os);
}

/* ----------------------------------------- recovery equals uninterrupted */

static void recovery_case(o3m_algo algo, o3m_model_kind model) {
  o3m_policy_config c;
  config(&c, algo, model);
  o3m_policy *live = make_policy(&c), *ref = make_policy(&c);
  ap_recovery_info info;
  ap_checkpoint *ck = open_ck(live, MASK_A, &info, O3M_OK);
  cr_assert_eq(info.checkpoint_seq, 0);
  feed(ck, live, ref, 1, 120, 1);
  write_ck(ck);
  feed(ck, live, ref, 121, 200, 0);
  write_ck(ck);
  feed(ck, live, ref, 201, 257, 0);
  ap_checkpoint_close(ck);
  assert_same_state(live, ref, "durable path vs plain updates");

  /* Restart: the newest checkpoint plus 57 journal records. */
  o3m_policy *rec = make_policy(&c);
  ck = open_ck(rec, MASK_A, &info, O3M_OK);
  cr_assert_eq(info.checkpoint_seq, 200);
  cr_assert_eq(info.replayed, 57);
  cr_assert_eq(info.checkpoints_rejected, 0);
  cr_assert_eq(o3m_policy_updates(rec), 257);
  assert_same_state(rec, live, "checkpoint + journal");
  ap_checkpoint_close(ck);

  /* A damaged newest checkpoint: fall back to the previous one and a
   * longer replay, still bit-exact. */
  char p200[512], p120[512], bad[600];
  ck_path(p200, sizeof p200, 200, ".ckpt");
  ck_path(p120, sizeof p120, 120, ".ckpt");
  flip_byte(p200, 64 + 120 + 1000); /* inside Lambda */
  o3m_policy *rec2 = make_policy(&c);
  ck = open_ck(rec2, MASK_A, &info, O3M_OK);
  cr_assert_eq(info.checkpoints_rejected, 1);
  cr_assert_eq(info.checkpoint_seq, 120);
  cr_assert_eq(info.replayed, 137);
  assert_same_state(rec2, live, "fallback checkpoint + longer journal");
  snprintf(bad, sizeof bad, "%s.corrupt", p200);
  cr_assert(exists(bad));
  cr_assert(!exists(p200));
  /* Going on from the recovered state and checkpointing keeps equality. */
  feed(ck, rec2, ref, 258, 300, 0);
  write_ck(ck);
  ap_checkpoint_close(ck);
  o3m_policy *rec3 = make_policy(&c);
  ck = open_ck(rec3, MASK_A, &info, O3M_OK);
  cr_assert_eq(info.checkpoint_seq, 300);
  assert_same_state(rec3, ref, "after more rewards");
  ap_checkpoint_close(ck);

  o3m_policy_destroy(live), o3m_policy_destroy(ref), o3m_policy_destroy(rec);
  o3m_policy_destroy(rec2), o3m_policy_destroy(rec3);
}

/* A checkpoint written off the caller's thread (ap_checkpoint_start) holds
 * the snapshot taken at start, not the rewards applied while it is being
 * written: they are in the journal after its position, and recovery from
 * it plus the journal is bit-exact. Nothing is due while it runs. */
Test(checkpoint, background_checkpoint_is_the_snapshot_at_start) {
  o3m_policy_config c;
  config(&c, O3M_ALGO_LINUCB, O3M_MODEL_SHARED);
  o3m_policy *live = make_policy(&c), *ref = make_policy(&c);
  ap_recovery_info info;
  ap_checkpoint *ck = open_ck(live, MASK_A, &info, O3M_OK);
  feed(ck, live, ref, 1, 100, 0);
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert_eq(ap_checkpoint_start(ck, &e), O3M_OK, "%s", e.msg);
  cr_assert_eq(ap_checkpoint_start(ck, &e), O3M_ESTATE, "a second one while one is in flight");
  cr_assert_eq(ap_checkpoint_due(ck), 0);
  /* Rewards go on while the writer writes. */
  feed(ck, live, ref, 101, 140, 0);
  int done = 0;
  cr_assert_eq(ap_checkpoint_collect(ck, 1, &done, &e), O3M_OK, "%s", e.msg);
  cr_assert_eq(done, 1);
  cr_assert_eq(ap_checkpoint_seq(ck), 100);
  cr_assert_eq(ap_checkpoint_collect(ck, 1, &done, &e), O3M_OK);
  cr_assert_eq(done, 0, "nothing left to collect");
  ap_checkpoint_close(ck);

  o3m_policy *rec = make_policy(&c);
  ck = open_ck(rec, MASK_A, &info, O3M_OK);
  cr_assert_eq(info.checkpoint_seq, 100);
  cr_assert_eq(info.replayed, 40);
  cr_assert_eq(o3m_policy_updates(rec), 140);
  assert_same_state(rec, live, "background checkpoint + journal");
  ap_checkpoint_close(ck);
  o3m_policy_destroy(live), o3m_policy_destroy(ref), o3m_policy_destroy(rec);
}

Test(checkpoint, recovery_is_bit_exact_shared_linucb) {
  recovery_case(O3M_ALGO_LINUCB, O3M_MODEL_SHARED);
}
Test(checkpoint, recovery_is_bit_exact_shared_lints) {
  recovery_case(O3M_ALGO_LINTS, O3M_MODEL_SHARED);
}
Test(checkpoint, recovery_is_bit_exact_disjoint_linucb) {
  recovery_case(O3M_ALGO_LINUCB, O3M_MODEL_DISJOINT);
}
Test(checkpoint, recovery_is_bit_exact_disjoint_lints) {
  recovery_case(O3M_ALGO_LINTS, O3M_MODEL_DISJOINT);
}

Test(checkpoint, torn_checkpoint_falls_back_and_a_pruned_journal_is_not_guessed) {
  o3m_policy_config c;
  config(&c, O3M_ALGO_LINUCB, O3M_MODEL_DISJOINT);
  o3m_policy *live = make_policy(&c), *ref = make_policy(&c);
  ap_recovery_info info;
  ap_checkpoint *ck = open_ck(live, MASK_A, &info, O3M_OK);
  feed(ck, live, ref, 1, 40, 0);
  write_ck(ck);
  feed(ck, live, ref, 41, 80, 0);
  write_ck(ck);
  feed(ck, live, ref, 81, 90, 0);
  ap_checkpoint_close(ck);
  char p80[512], p40[512];
  ck_path(p80, sizeof p80, 80, ".ckpt");
  ck_path(p40, sizeof p40, 40, ".ckpt");
  struct stat st;
  cr_assert_eq(stat(p80, &st), 0);
  cr_assert_eq(truncate(p80, st.st_size - 5), 0); /* torn */
  o3m_policy *rec = make_policy(&c);
  ck = open_ck(rec, MASK_A, &info, O3M_OK);
  cr_assert_eq(info.checkpoint_seq, 40);
  cr_assert_eq(info.replayed, 50);
  assert_same_state(rec, live, "torn newest checkpoint");
  ap_checkpoint_close(ck);
  /* Both checkpoints damaged: records 1..40 were pruned from the journal
   * after the second checkpoint, so recovery must refuse, not guess. */
  flip_byte(p40, 20);
  o3m_policy *rec2 = make_policy(&c);
  open_ck(rec2, MASK_A, &info, O3M_ECORRUPT);
  cr_assert_eq(o3m_policy_updates(rec2), 0);
  o3m_policy_destroy(live), o3m_policy_destroy(ref), o3m_policy_destroy(rec);
  o3m_policy_destroy(rec2);
}

/* Opens dir with had_state and salvage as given; returns the code, the
 * message in msg. */
static int open_had_state(o3m_policy *p, int had_state, int salvage, ap_checkpoint **ck,
                          char *msg, size_t n) {
  ap_checkpoint_options o;
  ap_checkpoint_options_default(&o);
  o.state_dir = dir;
  o.mask_id = MASK_A;
  o.every_ms = 0;
  o.had_state = had_state;
  o.salvage = salvage;
  o3m_err e;
  o3m_err_clear(&e);
  *ck = NULL;
  int rc = ap_checkpoint_open(ck, p, &o, NULL, &e);
  snprintf(msg, n, "%s", e.msg);
  return rc;
}

/* No silent fresh start: a state_dir that held the AP's block from an earlier
 * run had a model; with its checkpoints and journal gone, open refuses
 * instead of starting a fresh model with an INFO line, salvage or not, and
 * creates nothing. So does a state_dir whose only checkpoints are damaged
 * and whose journal is gone. A brand-new state_dir (had_state 0) and the
 * one a discard emptied still open fresh. */
Test(checkpoint, regression_a_state_dir_that_had_a_model_never_starts_fresh) {
  o3m_policy_config c;
  config(&c, O3M_ALGO_LINUCB, O3M_MODEL_DISJOINT);
  o3m_policy *live = make_policy(&c), *ref = make_policy(&c);
  ap_checkpoint *ck;
  char msg[O3M_ERRMSG_MAX];
  cr_assert_eq(open_had_state(live, 0, 0, &ck, msg, sizeof msg), O3M_OK, "%s", msg);
  ap_checkpoint_close(ck);
  /* The block's earlier run left a journal: that opens. */
  cr_assert_eq(open_had_state(live, 1, 0, &ck, msg, sizeof msg), O3M_OK, "%s", msg);
  feed(ck, live, ref, 1, 10, 0);
  write_ck(ck);
  feed(ck, live, ref, 11, 12, 0);
  ap_checkpoint_close(ck);
  char p10[512];
  ck_path(p10, sizeof p10, 10, ".ckpt");
  cr_assert(exists(p10));

  /* Checkpoints and journal deleted, the block kept. */
  DIR *dh = opendir(dir);
  cr_assert_not_null(dh);
  struct dirent *de;
  char path[1024];
  while ((de = readdir(dh))) {
    if (strncmp(de->d_name, "ap-ckpt-", 8) && strncmp(de->d_name, "ap-journal-", 11)) continue;
    snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
    cr_assert_eq(unlink(path), 0, "%s", path);
  }
  closedir(dh);
  o3m_policy *rec = make_policy(&c);
  for (int salvage = 0; salvage <= 1; salvage++) {
    cr_assert_eq(open_had_state(rec, 1, salvage, &ck, msg, sizeof msg), O3M_ENOTFOUND,
                 "salvage %d: %s", salvage, msg);
    cr_assert_null(ck);
    cr_assert_not_null(strstr(msg, "held this party's block from an earlier run but neither a "
                                   "valid checkpoint nor a journal segment"), "%s", msg);
    cr_assert_eq(count_files("ap-journal-", ".wal"), 0, "a refused open made a journal");
  }

  /* Only a damaged checkpoint left, no journal: the same, without the block
   * as evidence (the damaged file is set aside as before). */
  o3m_policy *again = make_policy(&c);
  ck = open_ck(again, MASK_A, NULL, O3M_OK);
  feed(ck, again, NULL, 1, 8, 0);
  write_ck(ck);
  ap_checkpoint_close(ck);
  ck_path(p10, sizeof p10, 8, ".ckpt");
  flip_byte(p10, 20);
  dh = opendir(dir);
  cr_assert_not_null(dh);
  while ((de = readdir(dh))) {
    if (strncmp(de->d_name, "ap-journal-", 11)) continue;
    snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
    cr_assert_eq(unlink(path), 0, "%s", path);
  }
  closedir(dh);
  cr_assert_eq(open_had_state(rec, 0, 0, &ck, msg, sizeof msg), O3M_ENOTFOUND, "%s", msg);
  cr_assert_not_null(strstr(msg, "held checkpoints from an earlier run"), "%s", msg);
  cr_assert_eq(count_files("ap-ckpt-", ".corrupt"), 1);

  /* After the operator's discard (had_state 0, the damaged file moved
   * aside): a fresh model. */
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert_eq(ap_checkpoint_discard(dir, &e), O3M_OK, "%s", e.msg);
  cr_assert_eq(open_had_state(rec, 0, 0, &ck, msg, sizeof msg), O3M_OK, "%s", msg);
  cr_assert_eq(o3m_policy_updates(rec), 0);
  ap_checkpoint_close(ck);
  o3m_policy_destroy(live), o3m_policy_destroy(ref), o3m_policy_destroy(rec);
  o3m_policy_destroy(again);
}

/* Every journal segment after the newest checkpoint deleted: the rotation
 * before the checkpoint made segment seq + 1, so its absence is a loss of
 * acknowledged rewards, refused; salvage recovers the checkpoint alone. The
 * same for the newest segment alone while older ones survive. */
Test(checkpoint, journal_lost_after_the_newest_checkpoint_is_refused) {
  o3m_policy_config c;
  config(&c, O3M_ALGO_LINUCB, O3M_MODEL_SHARED);
  o3m_policy *live = make_policy(&c), *ref = make_policy(&c);
  ap_recovery_info info;
  ap_checkpoint *ck = open_ck(live, MASK_A, &info, O3M_OK);
  feed(ck, live, ref, 1, 40, 0);
  write_ck(ck);
  feed(ck, live, ref, 41, 80, 0);
  write_ck(ck);
  o3m_policy *at80 = make_policy(&c);
  size_t n;
  unsigned char *img = export_state(live, &n);
  cr_assert_eq(o3m_policy_state_import(at80, img, n, NULL), O3M_OK);
  free(img);
  feed(ck, live, ref, 81, 95, 0); /* acknowledged after the checkpoint at 80 */
  ap_checkpoint_close(ck);
  char seg[512];
  snprintf(seg, sizeof seg, "%s/ap-journal-%016llx.wal", dir, 81ULL);
  cr_assert(exists(seg));
  cr_assert_eq(unlink(seg), 0);

  o3m_policy *rec = make_policy(&c);
  open_ck(rec, MASK_A, &info, O3M_ECORRUPT);
  cr_assert_eq(o3m_policy_updates(rec), 0);
  /* Salvage: the checkpoint at 80, rewards 81..95 lost, said so. */
  ap_checkpoint_options o;
  ap_checkpoint_options_default(&o);
  o.state_dir = dir;
  o.mask_id = MASK_A;
  o.every_ms = 0;
  o.salvage = 1;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert_eq(ap_checkpoint_open(&ck, rec, &o, &info, &e), O3M_OK, "%s", e.msg);
  cr_assert_eq(info.salvaged, 1);
  cr_assert_eq(info.salvage_seq, 81);
  cr_assert_eq(info.checkpoint_seq, 80);
  cr_assert_eq(info.last_seq, 80);
  assert_same_state(rec, at80, "salvaged: the checkpoint at 80");
  ap_checkpoint_close(ck);
  /* And it starts cleanly afterwards. */
  o3m_policy *rec2 = make_policy(&c);
  ck = open_ck(rec2, MASK_A, &info, O3M_OK);
  cr_assert_eq(info.salvaged, 0);
  assert_same_state(rec2, at80, "after salvage");
  ap_checkpoint_close(ck);
  o3m_policy_destroy(live), o3m_policy_destroy(ref), o3m_policy_destroy(rec);
  o3m_policy_destroy(rec2), o3m_policy_destroy(at80);
}

/* ----------------------------------------------------- mask and config */

Test(checkpoint, mask_id_mismatch_is_reported_and_discard_starts_fresh) {
  o3m_policy_config c;
  config(&c, O3M_ALGO_LINUCB, O3M_MODEL_SHARED);
  o3m_policy *p = make_policy(&c), *fresh = make_policy(&c);
  ap_recovery_info info;
  /* Journal only (no checkpoint yet). */
  ap_checkpoint *ck = open_ck(p, MASK_A, &info, O3M_OK);
  feed(ck, p, NULL, 1, 10, 0);
  ap_checkpoint_close(ck);
  open_ck(p, MASK_B, &info, O3M_EMASK);
  cr_assert_eq(info.found_mask_id, MASK_A);
  assert_same_state(p, fresh, "reset after EMASK");
  /* With a checkpoint. */
  ck = open_ck(p, MASK_A, &info, O3M_OK);
  cr_assert_eq(o3m_policy_updates(p), 10);
  write_ck(ck);
  ap_checkpoint_close(ck);
  ap_checkpoint_options o;
  ap_checkpoint_options_default(&o);
  o.state_dir = dir;
  o.mask_id = MASK_B;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert_eq(ap_checkpoint_open(&ck, p, &o, &info, &e), O3M_EMASK);
  cr_assert_null(ck);
  cr_assert_eq(info.found_mask_id, MASK_A);
  cr_assert_not_null(strstr(e.msg, "aaaa000000000001"), "%s", e.msg);
  /* Nothing was changed by the refusal. */
  ck = open_ck(p, MASK_A, &info, O3M_OK);
  cr_assert_eq(o3m_policy_updates(p), 10);
  /* Discard needs the lock. */
  cr_assert_eq(ap_checkpoint_discard(dir, NULL), O3M_ESTATE);
  ap_checkpoint_close(ck);
  /* Explicit fresh start. */
  cr_assert_eq(ap_checkpoint_discard(dir, &e), O3M_OK, "%s", e.msg);
  cr_assert_eq(count_files("ap-ckpt-", ".ckpt"), 0);
  cr_assert_eq(count_files("discarded-", ""), 1);
  ck = open_ck(p, MASK_B, &info, O3M_OK);
  cr_assert_eq(info.checkpoint_seq, 0);
  cr_assert_eq(info.replayed, 0);
  assert_same_state(p, fresh, "fresh start");
  ap_checkpoint_close(ck);
  o3m_policy_destroy(p), o3m_policy_destroy(fresh);
}

Test(checkpoint, changed_config_is_refused_and_the_state_dir_is_locked) {
  o3m_policy_config c;
  config(&c, O3M_ALGO_LINTS, O3M_MODEL_SHARED);
  o3m_policy *p = make_policy(&c);
  ap_recovery_info info;
  ap_checkpoint *ck = open_ck(p, MASK_A, &info, O3M_OK);
  feed(ck, p, NULL, 1, 10, 0);
  /* A second opener of the same state_dir (another daemon) is refused. */
  o3m_policy *q = make_policy(&c);
  open_ck(q, MASK_A, &info, O3M_ESTATE);
  write_ck(ck);
  ap_checkpoint_close(ck);
  o3m_policy_config c2 = c;
  c2.lambda = 0.5;
  o3m_policy *p2 = make_policy(&c2);
  ap_checkpoint_options o;
  ap_checkpoint_options_default(&o);
  o.state_dir = dir;
  o.mask_id = MASK_A;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert_eq(ap_checkpoint_open(&ck, p2, &o, &info, &e), O3M_EDIM);
  cr_assert_not_null(strstr(e.msg, "lambda"), "%s", e.msg);
  c2 = c;
  c2.algo = O3M_ALGO_LINUCB;
  o3m_policy *p3 = make_policy(&c2);
  cr_assert_eq(ap_checkpoint_open(&ck, p3, &o, &info, &e), O3M_EDIM);
  /* alpha and v may change; the state is kept. */
  c2 = c;
  c2.v = 0.5;
  o3m_policy *p4 = make_policy(&c2);
  ck = open_ck(p4, MASK_A, &info, O3M_OK);
  cr_assert_eq(o3m_policy_updates(p4), 10);
  cr_assert_eq(count_files("ap-ckpt-", ".corrupt"), 0);
  ap_checkpoint_close(ck);

  /* State in another format version (another release), with valid
   * checksums: refused with a message saying so, and not set aside as
   * corrupt, so the operator can still go back to the release that wrote it. */
  char path[512];
  ck_path(path, sizeof path, 10, ".ckpt");
  int fd = open(path, O_RDWR);
  cr_assert_geq(fd, 0, "%s", path);
  size_t n = o3m_policy_state_size(p);
  unsigned char *img = malloc(n), crc[4];
  cr_assert_eq(pread(fd, img, n, 64), (ssize_t)n);
  img[8] = 1; /* format version 1 */
  o3m_put_le32(crc, o3m_crc32c(0, img, n));
  cr_assert_eq(pwrite(fd, img, n, 64), (ssize_t)n);
  cr_assert_eq(pwrite(fd, crc, 4, 64 + (off_t)n), 4);
  close(fd);
  o3m_policy *p5 = make_policy(&c);
  o3m_err_clear(&e);
  cr_assert_eq(ap_checkpoint_open(&ck, p5, &o, &info, &e), O3M_EDIM);
  cr_assert_not_null(strstr(e.msg, "format version 1"), "%s", e.msg);
  cr_assert(exists(path), "the checkpoint was moved");
  cr_assert_eq(count_files("ap-ckpt-", ".corrupt"), 0);
  free(img);
  o3m_policy_destroy(p), o3m_policy_destroy(q), o3m_policy_destroy(p2);
  o3m_policy_destroy(p3), o3m_policy_destroy(p4), o3m_policy_destroy(p5);
}

Test(checkpoint, a_missing_state_dir_is_created) {
  o3m_policy_config c;
  config(&c, O3M_ALGO_LINUCB, O3M_MODEL_SHARED);
  o3m_policy *p = make_policy(&c);
  char sub[300];
  snprintf(sub, sizeof sub, "%s/state", dir);
  ap_checkpoint_options o;
  ap_checkpoint_options_default(&o);
  o.state_dir = sub;
  ap_checkpoint *ck;
  cr_assert_eq(ap_checkpoint_open(&ck, p, &o, NULL, NULL), O3M_OK);
  struct stat st;
  cr_assert_eq(stat(sub, &st), 0);
  cr_assert_eq(st.st_mode & 0777, 0700);
  ap_checkpoint_close(ck);
  o3m_policy_destroy(p);
}

/* A configured state_dir such as state/shop works on a fresh machine: every
 * missing level is created, private (0700), and a file in the way is named. */
Test(checkpoint, a_state_dir_is_created_with_its_parents) {
  o3m_policy_config c;
  config(&c, O3M_ALGO_LINUCB, O3M_MODEL_SHARED);
  o3m_policy *p = make_policy(&c);
  char top[300], sub[300];
  snprintf(top, sizeof top, "%s/deploy", dir);
  snprintf(sub, sizeof sub, "%s/deploy/state/shop", dir);
  ap_checkpoint_options o;
  ap_checkpoint_options_default(&o);
  o.state_dir = sub;
  ap_checkpoint *ck;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert_eq(ap_checkpoint_open(&ck, p, &o, NULL, &e), O3M_OK, "%s", e.msg);
  struct stat st;
  cr_assert_eq(stat(sub, &st), 0);
  cr_assert_eq(st.st_mode & 0777, 0700);
  cr_assert_eq(stat(top, &st), 0);
  cr_assert_eq(st.st_mode & 0777, 0700);
  ap_checkpoint_close(ck);

  /* A regular file where a level should be: refused, naming that level. */
  char blocker[300], under[300];
  snprintf(blocker, sizeof blocker, "%s/deploy/file", dir);
  snprintf(under, sizeof under, "%s/deploy/file/shop", dir);
  FILE *f = fopen(blocker, "w");
  cr_assert_not_null(f);
  fclose(f);
  o.state_dir = under;
  o3m_err_clear(&e);
  cr_assert_eq(ap_checkpoint_open(&ck, p, &o, NULL, &e), O3M_EIO);
  cr_assert_not_null(strstr(e.msg, "deploy/file"), "%s", e.msg);
  o3m_policy_destroy(p);
}

/* ---------------------------------------------------------- journal growth */

Test(checkpoint, journal_and_checkpoints_stay_bounded) {
  o3m_policy_config c;
  config(&c, O3M_ALGO_LINUCB, O3M_MODEL_SHARED);
  o3m_policy *p = make_policy(&c);
  ap_recovery_info info;
  ap_checkpoint *ck = open_ck(p, MASK_A, &info, O3M_OK);
  for (uint64_t k = 0; k < 15; k++) {
    feed(ck, p, NULL, 30 * k + 1, 30 * k + 30, 0);
    write_ck(ck);
    cr_assert_leq(count_files("ap-ckpt-", ".ckpt"), 2);
    cr_assert_leq(count_files("ap-journal-", ".wal"), 3);
  }
  cr_assert_eq(count_files("ap-ckpt-", ".tmp"), 0);
  ap_checkpoint_close(ck);
  o3m_policy_destroy(p);
}

/* ------------------------------------------------------ numerical health */

/* Pointer to element (i, j) of array `which` (0 Lambda, 1 factor, 2 u,
 * 3 theta, j ignored for vectors; 4 held rows, row i) of model m inside a
 * state image. For a factor, i <= j; a disjoint model's factor is paired
 * (o3m_policy.c): an odd arm's (i, j) is (j, i) of the lower triangle that
 * starts d doubles into the previous arm's array. */
static double *elem(unsigned char *img, const o3m_policy *p, int which, int m, int i, int j) {
  const o3m_policy_config *c = o3m_policy_config_of(p);
  size_t n = (size_t)o3m_policy_n_models(p), d = (size_t)c->d;
  size_t off = 120 + 8 * n; /* header, since_refactor and n_held */
  size_t mat = n * d * d, vec = n * d;
  if (which >= 1) off += 8 * mat;
  if (which >= 2) off += 8 * mat;
  if (which >= 3) off += 8 * vec;
  if (which >= 4) off += 8 * vec;
  if (which == 4) off += 8 * ((size_t)m * 16 * d + (size_t)i * d + (size_t)j);
  else if (which == 1 && c->model == O3M_MODEL_DISJOINT && (m & 1))
    off += 8 * ((size_t)(m - 1) * d * d + d + (size_t)j * d + (size_t)i);
  else if (which <= 1) off += 8 * ((size_t)m * d * d + (size_t)i * d + (size_t)j);
  else off += 8 * ((size_t)m * d + (size_t)i);
  return (double *)(img + off);
}

/* Applies `corrupt` to a copy of healthy's state in p, and checks the
 * finding and the repair. */
static void corrupt_case(o3m_policy *p, const o3m_policy *healthy, int which, int m, int i, int j,
                         double value, int multiply, int expect) {
  size_t len;
  unsigned char *img = export_state(healthy, &len);
  double *v = elem(img, p, which, m, i, j);
  *v = multiply ? *v * value : value;
  cr_assert_eq(o3m_policy_state_import(p, img, len, NULL), O3M_OK);
  o3m_policy_health h;
  int rc = o3m_policy_health_check(p, 0, &h);
  cr_assert_eq(rc, expect, "array %d (%d,%d) of model %d: %s, expected %s (%s)", which, i, j, m,
               o3m_errname(rc), o3m_errname(expect), h.what);
  cr_assert_eq(h.model, m);
  cr_assert_eq(h.n_bad, 1);
  if (expect == O3M_ECORRUPT) {
    /* Not repairable in memory; the state is left alone. */
    cr_assert_eq(o3m_policy_refactor(p, -1), O3M_ECORRUPT);
    size_t l2;
    unsigned char *img2 = export_state(p, &l2);
    cr_assert_eq(memcmp(img, img2, len), 0);
    free(img2);
  } else {
    /* Repair of the bad model from Lambda and u. */
    cr_assert_eq(o3m_policy_refactor(p, m), O3M_OK);
    cr_assert_eq(o3m_policy_health_check(p, O3M_POLICY_HEALTH_DEEP, &h), O3M_OK, "%s", h.what);
  }
  free(img);
}

static void health_case(o3m_algo algo, o3m_model_kind model) {
  o3m_policy_config c;
  config(&c, algo, model);
  c.refactor_every = 100000; /* let the rank-one updates drift */
  o3m_policy *a = make_policy(&c), *b = make_policy(&c);
  double x[12];
  for (uint64_t i = 1; i <= 3000; i++) {
    int arm;
    double r;
    crash_reward(i, c.d, c.n_arms, &arm, x, &r);
    for (int k = 0; k < c.d; k++) x[k] *= 3.0;
    cr_assert_eq(o3m_policy_update(a, arm, x, r), O3M_OK);
  }
  /* No false alarm after 3000 un-refactored updates, deep check included. */
  o3m_policy_health h;
  cr_assert_eq(o3m_policy_health_check(a, O3M_POLICY_HEALTH_DEEP, &h), O3M_OK, "%s (%g)", h.what,
               h.max_residual);
  cr_assert_lt(h.max_residual, 1e-9);
  fprintf(stderr, "health (%s %s): largest relative residual %.2e after 3000 rank-one updates "
          "(threshold %.0e)\n", o3m_model_name(model), o3m_algo_name(algo), h.max_residual,
          O3M_POLICY_HEALTH_RTOL);
  int m = model == O3M_MODEL_DISJOINT ? 3 : 0, d = c.d;
  corrupt_case(b, a, 1, m, 2, 2, NAN, 0, O3M_ENONFINITE);         /* NaN in the factor */
  corrupt_case(b, a, 1, m, 1, 4, 1.5, 1, O3M_ENOTPD);             /* a wrong entry */
  corrupt_case(b, a, 1, m, d - 1, d - 1, -1.0, 0, O3M_ENOTPD);    /* lost definiteness */
  corrupt_case(b, a, 3, m, 5, 0, 1.0, 0, O3M_ENOTPD);             /* theta off */
  corrupt_case(b, a, 3, m, 0, 0, INFINITY, 0, O3M_ENONFINITE);    /* theta infinite */
  corrupt_case(b, a, 0, m, 0, 3, NAN, 0, O3M_ECORRUPT);           /* Lambda NaN */
  corrupt_case(b, a, 0, m, 4, 4, 0.5, 0, O3M_ECORRUPT);           /* diag below lambda */
  corrupt_case(b, a, 2, m, 1, 0, NAN, 0, O3M_ECORRUPT);           /* u NaN */
  {
    /* A held row (an observation not yet added to Lambda) that is not
     * finite is damage to Lambda. The model must hold a row for this. */
    size_t l;
    unsigned char *im = export_state(a, &l);
    size_t n = (size_t)o3m_policy_n_models(a);
    cr_assert_gt(im[120 + 4 * n + 4 * (size_t)m], 0, "model %d holds no row", m);
    free(im);
    corrupt_case(b, a, 4, m, 0, 2, INFINITY, 0, O3M_ECORRUPT);
  }

  /* A repaired policy equals the healthy one after the same exact
   * refactorization, bit for bit: nothing acknowledged is lost. */
  corrupt_case(b, a, 1, m, 0, 1, 7.0, 1, O3M_ENOTPD);
  cr_assert_eq(o3m_policy_refactor(b, -1), O3M_OK);
  cr_assert_eq(o3m_policy_refactor(a, -1), O3M_OK);
  assert_same_state(a, b, "repaired vs refactorized healthy");

  /* A Lambda that is no longer positive definite but otherwise plausible
   * shows as a factor mismatch in the quick check, as damage in the deep. */
  size_t len;
  unsigned char *img = export_state(a, &len);
  *elem(img, a, 0, m, 0, 1) = 1e6;
  cr_assert_eq(o3m_policy_state_import(b, img, len, NULL), O3M_OK);
  cr_assert_eq(o3m_policy_health_check(b, 0, NULL), O3M_ENOTPD);
  cr_assert_eq(o3m_policy_health_check(b, O3M_POLICY_HEALTH_DEEP, &h), O3M_ECORRUPT);
  cr_assert_eq(o3m_policy_refactor(b, m), O3M_ENOTPD);
  free(img);
  o3m_policy_destroy(a), o3m_policy_destroy(b);
}

Test(checkpoint, health_check_and_repair_shared_linucb) {
  health_case(O3M_ALGO_LINUCB, O3M_MODEL_SHARED);
}
Test(checkpoint, health_check_and_repair_shared_lints) {
  health_case(O3M_ALGO_LINTS, O3M_MODEL_SHARED);
}
Test(checkpoint, health_check_and_repair_disjoint_lints) {
  health_case(O3M_ALGO_LINTS, O3M_MODEL_DISJOINT);
}

Test(checkpoint, repair_is_journaled_and_replays_bit_exact) {
  o3m_policy_config c;
  config(&c, O3M_ALGO_LINTS, O3M_MODEL_SHARED);
  o3m_policy *live = make_policy(&c);
  ap_recovery_info info;
  ap_checkpoint *ck = open_ck(live, MASK_A, &info, O3M_OK);
  feed(ck, live, NULL, 1, 50, 0);
  /* Memory corruption of the factor, behind the module's back. */
  size_t len;
  unsigned char *img = export_state(live, &len);
  *elem(img, live, 1, 0, 3, 7) += 0.25;
  cr_assert_eq(o3m_policy_state_import(live, img, len, NULL), O3M_OK);
  o3m_policy_health h;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert_eq(ap_checkpoint_health(ck, 0, &h, &e), O3M_OK, "%s", e.msg);
  cr_assert_eq(h.code, O3M_ENOTPD);
  cr_assert_eq(o3m_policy_health_check(live, 0, NULL), O3M_OK);
  feed(ck, live, NULL, 51, 80, 0);
  ap_checkpoint_close(ck);
  /* The replay repeats the refactorization at the same point. */
  o3m_policy *rec = make_policy(&c);
  ck = open_ck(rec, MASK_A, &info, O3M_OK);
  cr_assert_eq(info.replayed, 81);
  cr_assert_eq(info.refactors, 1);
  assert_same_state(rec, live, "journaled repair");
  /* A damaged Lambda is never checkpointed. */
  img = realloc(img, len);
  cr_assert_eq(o3m_policy_state_export(rec, img, len), O3M_OK);
  *elem(img, rec, 0, 0, 2, 2) = NAN;
  cr_assert_eq(o3m_policy_state_import(rec, img, len, NULL), O3M_OK);
  cr_assert_eq(ap_checkpoint_write(ck, &e), O3M_ECORRUPT);
  cr_assert_eq(count_files("ap-ckpt-", ".ckpt"), 0);
  ap_checkpoint_close(ck);
  free(img);
  o3m_policy_destroy(live), o3m_policy_destroy(rec);
}

/* A health repair that meets a full journal segment and no descriptor for
 * a new one (EMFILE during a connection flood) is refused
 * as transient: O3M_EUNAVAILABLE with a message that says so (it used to
 * say the journal had failed, while the journal goes on), nothing
 * journaled or repaired; once descriptors are back the repair is made. */
Test(checkpoint, repair_without_a_descriptor_for_a_new_segment_is_transient) {
  o3m_policy_config c;
  config(&c, O3M_ALGO_LINTS, O3M_MODEL_SHARED);
  o3m_policy *live = make_policy(&c);
  ap_checkpoint_options o;
  ap_checkpoint_options_default(&o);
  o.state_dir = dir;
  o.mask_id = MASK_A;
  o.every_ms = 0;
  o.segment_bytes = 64 * AP_JOURNAL_RECORD_BYTES(c.d);
  ap_checkpoint *ck = NULL;
  ap_recovery_info info;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert_eq(ap_checkpoint_open(&ck, live, &o, &info, &e), O3M_OK, "%s", e.msg);
  struct rlimit old, lim;
  cr_assert_eq(getrlimit(RLIMIT_NOFILE, &old), 0);
  lim = old;
  lim.rlim_cur = 3; /* every further open fails */
  cr_assert_eq(setrlimit(RLIMIT_NOFILE, &lim), 0);
  /* Rewards until the segment is full and none fits. */
  double x[64];
  int arm, rc = O3M_OK;
  double r;
  uint64_t i = 1;
  for (; i < 1000 && rc == O3M_OK; i++) {
    crash_reward(i, c.d, c.n_arms, &arm, x, &r);
    rc = ap_checkpoint_apply_reward(ck, i, arm, x, NULL, r);
  }
  size_t len;
  unsigned char *img = export_state(live, &len);
  *elem(img, live, 1, 0, 3, 7) += 0.25;
  int imp = o3m_policy_state_import(live, img, len, NULL);
  o3m_policy_health h;
  o3m_err_clear(&e);
  int hrc = ap_checkpoint_health(ck, 0, &h, &e);
  int still_bad = o3m_policy_health_check(live, 0, NULL);
  cr_assert_eq(setrlimit(RLIMIT_NOFILE, &old), 0);
  cr_assert_eq(rc, O3M_EUNAVAILABLE, "a reward into a full segment: %s", o3m_errname(rc));
  cr_assert_eq(imp, O3M_OK);
  cr_assert_eq(hrc, O3M_EUNAVAILABLE, "repair into a full segment: %s (%s)", o3m_errname(hrc),
               e.msg);
  cr_assert_null(strstr(e.msg, "has failed"), "%s", e.msg);
  cr_assert_not_null(strstr(e.msg, "cannot start a new segment now"), "%s", e.msg);
  cr_assert_eq(still_bad, O3M_ENOTPD, "the model was changed: %s", o3m_errname(still_bad));
  cr_assert_eq(ap_journal_failed(ap_checkpoint_journal(ck)), O3M_OK);
  o3m_err_clear(&e);
  cr_assert_eq(ap_checkpoint_health(ck, 0, &h, &e), O3M_OK, "%s", e.msg);
  cr_assert_eq(o3m_policy_health_check(live, 0, NULL), O3M_OK);
  ap_checkpoint_close(ck);
  free(img);
  o3m_policy_destroy(live);
}

/* Not an assertion on speed: the cost of a checkpoint and of a restart for a
 * 4 MiB state (disjoint, 64 arms, d = 64), printed to the test log. */
Test(checkpoint, benchmark_checkpoint_write_and_recovery) {
  o3m_policy_config c;
  config(&c, O3M_ALGO_LINUCB, O3M_MODEL_DISJOINT);
  c.d = 64;
  c.n_arms = 64;
  o3m_policy *p = make_policy(&c), *q = make_policy(&c);
  ap_recovery_info info;
  ap_checkpoint *ck = open_ck(p, MASK_A, &info, O3M_OK);
  feed(ck, p, NULL, 1, 2000, 0);
  double t0 = now_ms();
  write_ck(ck);
  double t1 = now_ms();
  feed(ck, p, NULL, 2001, 3000, 0);
  ap_checkpoint_close(ck);
  double t2 = now_ms();
  ck = open_ck(q, MASK_A, &info, O3M_OK);
  double t3 = now_ms();
  cr_assert_eq(info.replayed, 1000);
  assert_same_state(p, q, "benchmark state");
  fprintf(stderr, "checkpoint of %.1f MiB: written in %.1f ms; restart (load + replay of 1000 "
          "records) in %.1f ms\n", o3m_policy_state_size(p) / 1048576.0, t1 - t0, t3 - t2);
  ap_checkpoint_close(ck);
  o3m_policy_destroy(p), o3m_policy_destroy(q);
}

/* ------------------------------------------------------------ crash test */

static int env_int(const char *name, int dflt) {
  const char *v = getenv(name);
  return v && *v ? atoi(v) : dflt;
}

/* Starts crash_child with its stdout on a pipe; returns the read end. */
static pid_t spawn_child(int kind, int ckpt_every, int max_batch, unsigned seed, int *rfd) {
  int fds[2];
  cr_assert_eq(pipe(fds), 0);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    close(fds[1]);
    char k[16], ce[16], mb[16], sd[16];
    snprintf(k, sizeof k, "%d", kind);
    snprintf(ce, sizeof ce, "%d", ckpt_every);
    snprintf(mb, sizeof mb, "%d", max_batch);
    snprintf(sd, sizeof sd, "%u", seed);
    execl(O3M_BIN_DIR "/crash_child", "crash_child", dir, k, ce, mb, sd, (char *)NULL);
    _exit(127);
  }
  close(fds[1]);
  *rfd = fds[0];
  return pid;
}

/* Reads what is available (waiting up to wait_ms) and parses complete
 * lines: each must be the next id. Returns -1 at end of file. */
static int read_acks(int fd, int wait_ms, char *line, size_t *fill, uint64_t *last,
                     uint64_t *count) {
  struct pollfd pfd = {fd, POLLIN, 0};
  int pr = poll(&pfd, 1, wait_ms);
  if (pr <= 0) return 0;
  char buf[4096];
  ssize_t n = read(fd, buf, sizeof buf);
  if (n == 0) return -1;
  if (n < 0) return errno == EINTR ? 0 : -1;
  for (ssize_t k = 0; k < n; k++) {
    if (buf[k] != '\n') {
      cr_assert_lt(*fill, 63);
      line[(*fill)++] = buf[k];
      continue;
    }
    line[*fill] = 0;
    *fill = 0;
    uint64_t id = strtoull(line, NULL, 10);
    cr_assert_eq(id, *last + 1, "acknowledged id %llu after %llu", (unsigned long long)id,
                 (unsigned long long)*last);
    *last = id;
    (*count)++;
  }
  return 1;
}

static void crash_run(int kind, int default_iters) {
  int iters = env_int("O3M_CRASH_ITERS", default_iters);
  unsigned seed = (unsigned)env_int("O3M_CRASH_SEED", (int)(time(NULL) ^ getpid()));
  srand(seed);
  const int ckpt_every = 60, max_batch = 16;
  o3m_policy_config cfg;
  crash_config(&cfg, kind);
  uint64_t recovered = 0, total_acks = 0;
  int early_kills = 0, mid_ckpt = 0, mid_cleanup = 0, unacked = 0;
  double t_start = now_ms();
  for (int it = 0; it < iters; it++) {
    int rfd;
    pid_t pid = spawn_child(kind, ckpt_every, max_batch, (unsigned)rand(), &rfd);
    /* The child starts with the recovered state, so its first new reward
     * is recovered + 1. One kill in four comes early, possibly during the
     * child's own recovery; the others 1..250 ms after the first ack. */
    uint64_t last = recovered, count = 0;
    char line[64];
    size_t fill = 0;
    int early = rand() % 4 == 0;
    double t0 = now_ms(), deadline = early ? t0 + rand() % 15 : 0;
    int eof = 0;
    while (!eof) {
      double now = now_ms();
      if (deadline > 0 && now >= deadline) break;
      if (!early && count > 0 && deadline == 0) deadline = now + 1 + rand() % 250;
      cr_assert_lt(now - t0, 20000, "the child acknowledged nothing for 20 s");
      if (read_acks(rfd, 5, line, &fill, &last, &count) < 0) eof = 1;
    }
    cr_assert(!eof, "crash_child exited on its own (see its stderr)");
    kill(pid, SIGKILL);
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "child status %d", status);
    while (read_acks(rfd, 1000, line, &fill, &last, &count) >= 0) {
    }
    close(rfd);
    early_kills += early;
    total_acks += count;

    /* Where the kill landed, as far as the files tell. */
    mid_ckpt += count_files("ap-ckpt-", ".tmp") > 0;
    mid_cleanup += count_files("ap-ckpt-", ".ckpt") > 2;

    /* Recover in-process, as the restarted daemon would. */
    o3m_policy *p = make_policy(&cfg);
    ap_recovery_info info;
    ap_checkpoint *ck = open_ck(p, CRASH_MASK_ID, &info, O3M_OK);
    uint64_t n = o3m_policy_updates(p);
    cr_assert_eq(info.checkpoints_rejected, 0, "a kill produced a damaged checkpoint");
    cr_assert_eq(info.salvaged, 0);
    cr_assert_eq(info.update_errors, 0);
    /* Every acknowledged reward is there; at most the one batch that was
     * durable but not yet acknowledged is there in addition. */
    cr_assert_geq(n, last, "iteration %d: %llu rewards recovered, %llu acknowledged", it,
                  (unsigned long long)n, (unsigned long long)last);
    cr_assert_leq(n, last + max_batch);
    unacked += n > last;
    /* Exactly once each: equal to a clean replay of rewards 1..n. */
    o3m_policy *ref = make_policy(&cfg);
    double x[64];
    for (uint64_t i = 1; i <= n; i++) {
      int arm;
      double r;
      crash_reward(i, cfg.d, cfg.n_arms, &arm, x, &r);
      cr_assert_eq(o3m_policy_update(ref, arm, x, r), O3M_OK);
    }
    assert_same_state(p, ref, "recovered vs clean replay");
    ap_checkpoint_close(ck);
    o3m_policy_destroy(p);
    o3m_policy_destroy(ref);
    recovered = n;
  }
  cr_assert_eq(count_files("ap-ckpt-", ".corrupt"), 0);
  cr_assert_eq(count_files("ap-journal-", ".dropped"), 0);
  /* Two, or three when the last kill came between a checkpoint's rename and
   * the removal of the oldest (the next checkpoint removes it). */
  cr_assert_leq(count_files("ap-ckpt-", ".ckpt"), 3);
  fprintf(stderr, "crash test (kind %d, seed %u): %d SIGKILLs (%d early, %d while writing a "
          "checkpoint, %d before its cleanup, %d with a durable unacknowledged batch), %llu "
          "rewards acknowledged, %llu in the final model, all bit-exact, %.1f s\n", kind, seed,
          iters, early_kills, mid_ckpt, mid_cleanup, unacked, (unsigned long long)total_acks,
          (unsigned long long)recovered, (now_ms() - t_start) / 1e3);
}

Test(checkpoint, crash_sigkill_disjoint_lints, .timeout = 280) { crash_run(0, 3); }
Test(checkpoint, crash_sigkill_shared_lints, .timeout = 280) { crash_run(1, 3); }

/* A reward that would poison the model is refused BEFORE the
 * journal: nothing is written, the model is unchanged, checkpoints keep
 * working, and a restart replays nothing poisoned. Rewards with x = 1e153
 * (x . x is finite) are applied while the model can take them, and the
 * first one it cannot take is refused; x = 1e200 (x . x overflows) is
 * refused at once. For every algorithm and model. */
static void refused_before_the_journal(o3m_algo algo, o3m_model_kind model) {
  o3m_policy_config cfg;
  config(&cfg, algo, model);
  o3m_policy *p = make_policy(&cfg);
  ap_checkpoint *c = open_ck(p, 7, NULL, O3M_OK);
  feed(c, p, NULL, 1, 20, 0);
  double x[12];
  for (int i = 0; i < 12; i++) x[i] = 1e153;
  int accepted = 0, rc = O3M_OK;
  while (accepted < 100 && (rc = ap_checkpoint_apply_reward(c, 100 + accepted, 1, x, NULL, 1.0)) == 0)
    accepted++;
  cr_assert_eq(rc, O3M_ENONFINITE, "%d rewards of 1e153 accepted, then %s", accepted,
               o3m_errname(rc));
  cr_assert_eq(ap_checkpoint_sync(c, NULL), O3M_OK);
  uint64_t seq = ap_journal_last_seq(ap_checkpoint_journal(c));
  size_t len;
  unsigned char *before = export_state(p, &len);
  const char *what = NULL;
  cr_assert_eq(o3m_policy_update_check(p, 1, x, 1.0, &what), O3M_ENONFINITE);
  cr_assert(what && what[0]);
  for (int i = 0; i < 12; i++) x[i] = 1e200;
  cr_assert_eq(ap_checkpoint_apply_reward(c, 300, 2, x, NULL, 0.0), O3M_ENONFINITE);
  cr_assert_eq(ap_checkpoint_sync(c, NULL), O3M_OK);
  cr_assert_eq(ap_journal_last_seq(ap_checkpoint_journal(c)), seq, "a refused reward was "
               "journaled");
  unsigned char *after = export_state(p, &len);
  cr_assert_eq(memcmp(before, after, len), 0, "a refused reward changed the model");
  /* What was accepted left the model finite: at worst a factor to repair. */
  rc = o3m_policy_health_check(p, 0, NULL);
  cr_assert(rc == O3M_OK || rc == O3M_ENOTPD, "health: %s", o3m_errname(rc));
  write_ck(c);
  ap_checkpoint_close(c);
  /* The restart replays the accepted rewards only: the same state. */
  o3m_policy *q = make_policy(&cfg);
  ap_recovery_info info;
  c = open_ck(q, 7, &info, O3M_OK);
  assert_same_state(p, q, "after the restart");
  cr_assert_eq(info.update_errors, 0);
  ap_checkpoint_close(c);
  o3m_policy_destroy(q);
  o3m_policy_destroy(p);
  free(before);
  free(after);
}

Test(checkpoint, poisoning_reward_refused_before_journal_shared_linucb) {
  refused_before_the_journal(O3M_ALGO_LINUCB, O3M_MODEL_SHARED);
}
Test(checkpoint, poisoning_reward_refused_before_journal_shared_lints) {
  refused_before_the_journal(O3M_ALGO_LINTS, O3M_MODEL_SHARED);
}
Test(checkpoint, poisoning_reward_refused_before_journal_disjoint) {
  refused_before_the_journal(O3M_ALGO_LINUCB, O3M_MODEL_DISJOINT);
}

/* ------------------------------------------------- the local fallback model */

#define LOCAL_D 4 /* the local model sees the first LOCAL_D of the d columns */

static ap_fallback *make_local(void) {
  o3m_policy_config lc;
  config(&lc, O3M_ALGO_LINUCB, O3M_MODEL_SHARED);
  lc.d = LOCAL_D;
  lc.lambda = 2.0;
  ap_fallback *fb;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert_eq(ap_fallback_create(&fb, &lc, NULL, &e), O3M_OK, "%s", e.msg);
  return fb;
}

static ap_checkpoint *open_local(o3m_policy *p, ap_fallback *fb, ap_recovery_info *info) {
  return open_ck_local(p, MASK_A, info, O3M_OK, fb);
}

/* Rewards from..to: every fourth a degraded decision's (the local model
 * alone), the others federated (both); mirrored on ref and ref_local. */
static void feed_local(ap_checkpoint *c, o3m_policy *ref, o3m_policy *ref_local, uint64_t from,
                       uint64_t to) {
  const o3m_policy_config *cfg = o3m_policy_config_of(ref);
  double x[64];
  for (uint64_t i = from; i <= to; i++) {
    int arm;
    double r;
    crash_reward(i, cfg->d, cfg->n_arms, &arm, x, &r);
    if (i % 4 == 0) {
      cr_assert_eq(ap_checkpoint_apply_local(c, i, arm, x, r), O3M_OK);
    } else {
      cr_assert_eq(ap_checkpoint_apply_reward(c, i, arm, x, x, r), O3M_OK);
      cr_assert_eq(o3m_policy_update(ref, arm, x, r), O3M_OK);
    }
    cr_assert_eq(o3m_policy_update(ref_local, arm, x, r), O3M_OK);
  }
  cr_assert_eq(ap_checkpoint_sync(c, NULL), O3M_OK);
}

/* The policies of a local model test: the live federated policy and
 * local model, and their in-process references. */
typedef struct local_run {
  o3m_policy_config pc;
  o3m_policy *p, *ref, *ref_local;
  ap_fallback *fb;
} local_run;

static void local_run_init(local_run *r) {
  config(&r->pc, O3M_ALGO_LINUCB, O3M_MODEL_SHARED);
  r->p = make_policy(&r->pc);
  r->ref = make_policy(&r->pc);
  r->fb = make_local();
  r->ref_local = make_policy(o3m_policy_config_of(ap_fallback_policy(r->fb)));
}

static void local_run_free(local_run *r) {
  ap_fallback_destroy(r->fb);
  o3m_policy_destroy(r->p);
  o3m_policy_destroy(r->ref);
  o3m_policy_destroy(r->ref_local);
}

/* Opens the state_dir again on fresh policies (a restart): the
 * recovered local model (the caller destroys it and *p2) and info. */
static ap_fallback *reopen_local(const local_run *r, o3m_policy **p2, ap_recovery_info *ri) {
  *p2 = make_policy(&r->pc);
  ap_fallback *fb2 = make_local();
  ap_checkpoint_close(open_local(*p2, fb2, ri));
  return fb2;
}

/* The local model is restored bit for bit from a checkpoint and the
 * journal after it: degraded rewards reach it alone, federated ones both
 * models, each once. */
Test(checkpoint, local_model_recovers_bit_exact_from_checkpoint_and_journal) {
  local_run r;
  local_run_init(&r);
  ap_checkpoint *c = open_local(r.p, r.fb, NULL);
  feed_local(c, r.ref, r.ref_local, 1, 40);
  write_ck(c);
  feed_local(c, r.ref, r.ref_local, 41, 60);
  ap_checkpoint_close(c); /* no final checkpoint: 20 rewards in the journal alone */

  o3m_policy *p2;
  ap_recovery_info ri;
  ap_fallback *fb2 = reopen_local(&r, &p2, &ri);
  assert_same_state(p2, r.ref, "federated");
  assert_same_state(ap_fallback_policy(fb2), r.ref_local, "local");
  cr_assert_eq(o3m_policy_updates(ap_fallback_policy(fb2)), 60);
  cr_assert_eq(o3m_policy_updates(p2), 45);
  cr_assert_eq(ri.local_replayed, 20);
  cr_assert_eq(ri.local_dropped, 0);
  ap_fallback_destroy(fb2);
  o3m_policy_destroy(p2);
  local_run_free(&r);
}

/* A local part whose federated record never reached the journal (a crash
 * between the two appends) is dropped at replay, as the live path never
 * applied it. */
Test(checkpoint, local_part_without_its_federated_record_is_dropped) {
  local_run r;
  local_run_init(&r);
  ap_checkpoint *c = open_local(r.p, r.fb, NULL);
  feed_local(c, r.ref, r.ref_local, 1, 10);
  double x[12] = {1, 2, 3, 4, 0, 0, 0, 0, 0, 0, 0, 0};
  ap_journal_record jr = {.type = AP_JOURNAL_LOCAL_PAIRED, .decision = 999, .mask_id = MASK_A,
                          .arm = 0, .reward = 1.0, .x = x};
  cr_assert_eq(ap_journal_append(ap_checkpoint_journal(c), &jr, NULL), O3M_OK);
  cr_assert_eq(ap_checkpoint_sync(c, NULL), O3M_OK);
  ap_checkpoint_close(c);

  o3m_policy *p2;
  ap_recovery_info ri;
  ap_fallback *fb2 = reopen_local(&r, &p2, &ri);
  assert_same_state(ap_fallback_policy(fb2), r.ref_local, "local");
  cr_assert_eq(ri.local_dropped, 1);
  ap_fallback_destroy(fb2);
  o3m_policy_destroy(p2);
  local_run_free(&r);
}

/* A version-1 checkpoint (the release before: no local image) is read:
 * the federated model is restored, the local model starts fresh and then
 * learns the journal after the checkpoint. */
Test(checkpoint, version_1_checkpoint_is_read_and_the_local_model_starts_fresh) {
  local_run r;
  local_run_init(&r);
  ap_recovery_info ri;
  ap_checkpoint *c = open_ck(r.p, MASK_A, &ri, O3M_OK);
  feed(c, r.p, r.ref, 1, 20, 0);
  write_ck(c);
  uint64_t seq = ap_checkpoint_seq(c);
  ap_checkpoint_close(c);
  /* Turn it into the earlier release's file: version 1, its header CRC. */
  char path[512];
  ck_path(path, sizeof path, seq, ".ckpt");
  int fd = open(path, O_RDWR);
  cr_assert_geq(fd, 0);
  unsigned char h[64];
  cr_assert_eq(pread(fd, h, 64, 0), 64);
  cr_assert_eq(o3m_get_le32(h + 8), 2, "this release writes version 2");
  cr_assert_eq(o3m_get_le32(h + 56), 0, "no local image without a local model");
  o3m_put_le32(h + 8, 1);
  o3m_put_le32(h + 60, o3m_crc32c(0, h, 60));
  cr_assert_eq(pwrite(fd, h, 64, 0), 64);
  close(fd);

  o3m_policy *p2 = make_policy(&r.pc);
  c = open_local(p2, r.fb, &ri);
  assert_same_state(p2, r.ref, "federated");
  cr_assert_eq(o3m_policy_updates(ap_fallback_policy(r.fb)), 0);
  feed_local(c, r.ref, r.ref_local, 21, 28);
  ap_checkpoint_close(c);
  o3m_policy *p3;
  ap_fallback *fb2 = reopen_local(&r, &p3, &ri);
  assert_same_state(ap_fallback_policy(fb2), r.ref_local, "local");
  ap_fallback_destroy(fb2);
  o3m_policy_destroy(p2);
  o3m_policy_destroy(p3);
  local_run_free(&r);
}
