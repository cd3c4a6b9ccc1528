/* test_journal.c -- the AP's write-ahead log of rewards: bit-exact round
 * trips, torn tails cut, middle corruption refused (or salvaged), gaps,
 * rotation and pruning, allocation-free appends, and a small benchmark of
 * appends + fdatasync per second on this machine's disk. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <ftw.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ap_journal.h"
#include "o3m_bytes.h"

#define D 5
#define L AP_JOURNAL_RECORD_BYTES(D)
#define HDR AP_JOURNAL_SEGMENT_HEADER

static char dir[256];

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(p);
}

static void make_dir(void) {
  snprintf(dir, sizeof dir, "/tmp/o3m-journal-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
}

static void drop_dir(void) { nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS); }

TestSuite(journal, .init = make_dir, .fini = drop_dir);

/* Record i of the test stream: awkward bit patterns included (negative zero,
 * subnormals, huge values, NaN payload-free values are excluded because the
 * policy would reject them, but the journal must not care). */
static void rec_of(uint64_t i, double *x, ap_journal_record *r) {
  for (int k = 0; k < D; k++) x[k] = (double)(i * 7 + k) / 3.0 - 11.0;
  x[0] = i % 3 == 0 ? -0.0 : x[0];
  x[1] = i % 5 == 0 ? 4.9e-324 : x[1];
  x[2] = i % 7 == 0 ? 1.7976931348623157e308 : x[2];
  memset(r, 0, sizeof *r);
  r->type = AP_JOURNAL_REWARD;
  r->decision = 1000 + i;
  r->mask_id = 0xabcdef0123456789ULL;
  r->arm = (int)(i % 4) - 1;
  r->reward = (double)i / 10.0;
  r->x = x;
}

typedef struct collected {
  uint64_t n, first_seq, next_seq;
  int bad;
} collected;

/* Checks every replayed record against rec_of, bit for bit, in order. */
static int check_cb(void *ctx, const ap_journal_record *r) {
  collected *c = ctx;
  if (c->n == 0) c->first_seq = c->next_seq = r->seq;
  double x[D];
  ap_journal_record w;
  rec_of(r->seq, x, &w);
  if (r->seq != c->next_seq || r->type != w.type || r->decision != w.decision ||
      r->mask_id != w.mask_id || r->arm != w.arm ||
      memcmp(&r->reward, &w.reward, sizeof(double)) || memcmp(r->x, x, sizeof x))
    c->bad++;
  c->n++;
  c->next_seq++;
  return 0;
}

static ap_journal *open_j(uint64_t after, int salvage, collected *c, ap_journal_info *info,
                          int expect) {
  ap_journal_options o;
  ap_journal_options_default(&o);
  o.dir = dir;
  o.d = D;
  o.after = after;
  o.salvage = salvage;
  o.replay = check_cb;
  o.replay_ctx = c;
  memset(c, 0, sizeof *c);
  ap_journal *j = NULL;
  o3m_err e;
  o3m_err_clear(&e);
  int rc = ap_journal_open(&j, &o, info, &e);
  cr_assert_eq(rc, expect, "open: %s (%s)", o3m_errname(rc), e.msg);
  return j;
}

/* Appends records 1..n (seq i gets rec_of(i)) and syncs every `every`. */
static void fill(ap_journal *j, uint64_t from, uint64_t to, int every) {
  for (uint64_t i = from; i <= to; i++) {
    double x[D];
    ap_journal_record r;
    rec_of(i, x, &r);
    uint64_t seq;
    cr_assert_eq(ap_journal_append(j, &r, &seq), O3M_OK);
    cr_assert_eq(seq, i);
    if (every && i % (uint64_t)every == 0) cr_assert_eq(ap_journal_sync(j, NULL), O3M_OK);
  }
  cr_assert_eq(ap_journal_sync(j, NULL), O3M_OK);
}

static void seg_path(char *out, size_t n, uint64_t first) {
  snprintf(out, n, "%s/ap-journal-%016llx.wal", dir, (unsigned long long)first);
}

static off_t file_size(const char *p) {
  struct stat st;
  cr_assert_eq(stat(p, &st), 0, "stat %s", p);
  return st.st_size;
}

static int exists(const char *p) {
  struct stat st;
  return stat(p, &st) == 0;
}

static void flip_byte(const char *p, off_t off) {
  int fd = open(p, O_RDWR);
  cr_assert_geq(fd, 0);
  unsigned char b;
  cr_assert_eq(pread(fd, &b, 1, off), 1);
  b ^= 0x10;
  cr_assert_eq(pwrite(fd, &b, 1, off), 1);
  close(fd);
}

Test(journal, crc32c_known_vectors) {
  cr_assert_eq(o3m_crc32c(0, "123456789", 9), 0xE3069283u);
  cr_assert_eq(o3m_crc32c(0, "", 0), 0u);
  /* 32 zero bytes and 32 0xFF bytes (RFC 3720, B.4). */
  unsigned char z[32] = {0}, f[32];
  memset(f, 0xff, sizeof f);
  cr_assert_eq(o3m_crc32c(0, z, 32), 0x8A9136AAu);
  cr_assert_eq(o3m_crc32c(0, f, 32), 0x62A8AB43u);
  /* Incremental equals one-shot at every split point. */
  char s[100];
  for (int i = 0; i < 100; i++) s[i] = (char)(i * 31 + 7);
  uint32_t whole = o3m_crc32c(0, s, 100);
  for (int k = 0; k <= 100; k++) cr_assert_eq(o3m_crc32c(o3m_crc32c(0, s, k), s + k, 100 - k), whole);
}

Test(journal, round_trip_is_bit_exact_and_continues) {
  collected c;
  ap_journal_info info;
  ap_journal *j = open_j(0, 0, &c, &info, O3M_OK);
  cr_assert_eq(info.last_seq, 0);
  cr_assert_eq(c.n, 0);
  fill(j, 1, 100, 7);
  cr_assert_eq(ap_journal_last_seq(j), 100);
  cr_assert_eq(ap_journal_synced_seq(j), 100);
  ap_journal_close(j);

  j = open_j(0, 0, &c, &info, O3M_OK);
  cr_assert_eq(c.n, 100);
  cr_assert_eq(c.bad, 0);
  cr_assert_eq(c.first_seq, 1);
  cr_assert_eq(info.last_seq, 100);
  cr_assert_eq(info.tail_bytes_cut, 0);
  fill(j, 101, 130, 0);
  ap_journal_close(j);

  /* Only records after `after` are replayed. */
  j = open_j(40, 0, &c, &info, O3M_OK);
  cr_assert_eq(c.n, 90);
  cr_assert_eq(c.first_seq, 41);
  cr_assert_eq(c.bad, 0);
  cr_assert_eq(info.last_seq, 130);
  ap_journal_close(j);
  char p[512];
  seg_path(p, sizeof p, 1);
  cr_assert_eq(file_size(p), HDR + 130 * (off_t)L);
}

Test(journal, refactor_records_round_trip) {
  collected c;
  ap_journal *j = open_j(0, 0, &c, NULL, O3M_OK);
  ap_journal_record r = {.type = AP_JOURNAL_REFACTOR, .mask_id = 9, .arm = -1};
  cr_assert_eq(ap_journal_append(j, &r, NULL), O3M_OK);
  ap_journal_record bad = {.type = AP_JOURNAL_REWARD, .x = NULL};
  cr_assert_eq(ap_journal_append(j, &bad, NULL), O3M_EINVAL);
  bad.type = 7;
  cr_assert_eq(ap_journal_append(j, &bad, NULL), O3M_EINVAL);
  ap_journal_close(j); /* close syncs */
  ap_journal_options o;
  ap_journal_options_default(&o);
  o.dir = dir;
  o.d = D;
  ap_journal_info info;
  cr_assert_eq(ap_journal_open(&j, &o, &info, NULL), O3M_OK);
  cr_assert_eq(info.replayed, 1);
  cr_assert_eq(info.last_seq, 1);
  ap_journal_close(j);
}

Test(journal, empty_or_missing_journal_is_a_fresh_start) {
  collected c;
  ap_journal_info info;
  ap_journal *j = open_j(0, 0, &c, &info, O3M_OK);
  cr_assert_eq(info.last_seq, 0);
  ap_journal_close(j);
  /* A checkpoint at seq 10 with no journal at all: appends go on at 11. */
  drop_dir();
  make_dir();
  j = open_j(10, 0, &c, &info, O3M_OK);
  cr_assert_eq(info.last_seq, 10);
  cr_assert_eq(c.n, 0);
  fill(j, 11, 12, 0);
  ap_journal_close(j);
  j = open_j(10, 0, &c, &info, O3M_OK);
  cr_assert_eq(c.n, 2);
  cr_assert_eq(c.bad, 0);
  ap_journal_close(j);
  /* A missing directory is an error (the checkpoint module creates it). */
  ap_journal_options o;
  ap_journal_options_default(&o);
  o.dir = "/nonexistent/o3m-journal";
  o.d = D;
  cr_assert_eq(ap_journal_open(&j, &o, NULL, NULL), O3M_EIO);
  cr_assert_null(j);
}

Test(journal, torn_tail_is_cut_and_good_prefix_replays) {
  collected c;
  ap_journal_info info;
  ap_journal *j = open_j(0, 0, &c, &info, O3M_OK);
  fill(j, 1, 20, 0);
  ap_journal_close(j);
  char p[512];
  seg_path(p, sizeof p, 1);

  /* 1. Cut in the middle of the last record. */
  cr_assert_eq(truncate(p, HDR + 19 * (off_t)L + (off_t)L / 2), 0);
  j = open_j(0, 0, &c, &info, O3M_OK);
  cr_assert_eq(c.n, 19);
  cr_assert_eq(c.bad, 0);
  cr_assert_eq(info.tail_bytes_cut, L / 2);
  cr_assert_eq(info.last_seq, 19);
  cr_assert_eq(file_size(p), HDR + 19 * (off_t)L);
  fill(j, 20, 25, 0); /* the lost record 20 is written again */
  ap_journal_close(j);

  /* 2. Garbage appended: a short piece, then a whole record's worth. */
  for (int round = 0; round < 2; round++) {
    size_t n = round ? L : 37;
    unsigned char g[L];
    for (size_t k = 0; k < n; k++) g[k] = (unsigned char)(k * 13 + 5);
    if (round) memcpy(g, "O3MJ", 4); /* looks like a record, bad CRC */
    int fd = open(p, O_WRONLY | O_APPEND);
    cr_assert_eq(write(fd, g, n), (ssize_t)n);
    close(fd);
    j = open_j(0, 0, &c, &info, O3M_OK);
    cr_assert_eq(c.n, 25);
    cr_assert_eq(c.bad, 0);
    cr_assert_eq(info.tail_bytes_cut, n);
    cr_assert_eq(file_size(p), HDR + 25 * (off_t)L);
    ap_journal_close(j);
  }

  /* 3. A flipped byte in the LAST record is a tail too: nothing follows. */
  flip_byte(p, HDR + 24 * (off_t)L + 60);
  j = open_j(0, 0, &c, &info, O3M_OK);
  cr_assert_eq(c.n, 24);
  cr_assert_eq(info.tail_bytes_cut, L);
  ap_journal_close(j);
}

Test(journal, middle_corruption_refuses_or_salvages) {
  collected c;
  ap_journal_info info;
  ap_journal *j = open_j(0, 0, &c, &info, O3M_OK);
  fill(j, 1, 30, 1);
  ap_journal_close(j);
  char p[512];
  seg_path(p, sizeof p, 1);
  off_t size = file_size(p);
  flip_byte(p, HDR + 14 * (off_t)L + 56 + 8); /* x[1] of record 15 */

  /* Without salvage: an error naming the place, and nothing changed. */
  ap_journal_options o;
  ap_journal_options_default(&o);
  o.dir = dir;
  o.d = D;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert_eq(ap_journal_open(&j, &o, NULL, &e), O3M_ECORRUPT);
  cr_assert_null(j);
  cr_assert_not_null(strstr(e.msg, "ap-journal-0000000000000001.wal"), "%s", e.msg);
  cr_assert_not_null(strstr(e.msg, "seq 15"), "%s", e.msg);
  cr_assert_eq(file_size(p), size);

  /* With salvage: records 1..14 replay, the rest is set aside. */
  j = open_j(0, 1, &c, &info, O3M_OK);
  cr_assert_eq(c.n, 14);
  cr_assert_eq(c.bad, 0);
  cr_assert_eq(info.salvaged, 1);
  cr_assert_eq(info.salvage_seq, 15);
  cr_assert_eq(info.dropped_bytes, 16 * L);
  cr_assert_eq(info.last_seq, 14);
  cr_assert_eq(file_size(p), HDR + 14 * (off_t)L);
  char dropped[600];
  snprintf(dropped, sizeof dropped, "%s.dropped", p);
  cr_assert_eq(file_size(dropped), 16 * (off_t)L);
  fill(j, 15, 16, 0);
  ap_journal_close(j);
  j = open_j(0, 0, &c, &info, O3M_OK);
  cr_assert_eq(c.n, 16);
  cr_assert_eq(c.bad, 0);
  ap_journal_close(j);
}

Test(journal, corruption_in_an_older_segment_and_gaps_are_refused) {
  collected c;
  ap_journal_info info;
  ap_journal *j = open_j(0, 0, &c, &info, O3M_OK);
  fill(j, 1, 10, 0);
  cr_assert_eq(ap_journal_rotate(j, NULL), O3M_OK);
  fill(j, 11, 20, 0);
  cr_assert_eq(ap_journal_rotate(j, NULL), O3M_OK);
  fill(j, 21, 25, 0);
  cr_assert_eq(ap_journal_segments(j), 3);
  ap_journal_close(j);
  char p1[512], p11[512], p21[512];
  seg_path(p1, sizeof p1, 1);
  seg_path(p11, sizeof p11, 11);
  seg_path(p21, sizeof p21, 21);

  /* The last record of a non-last segment: valid data follows. */
  flip_byte(p11, HDR + 9 * (off_t)L + 20);
  j = open_j(0, 0, &c, &info, O3M_ECORRUPT);
  /* But a replay that starts after it never reads it. */
  j = open_j(20, 0, &c, &info, O3M_OK);
  cr_assert_eq(c.n, 5);
  ap_journal_close(j);
  flip_byte(p11, HDR + 9 * (off_t)L + 20); /* repair */

  /* A missing middle segment is a gap. */
  char tmp[600];
  snprintf(tmp, sizeof tmp, "%s.away", p11);
  cr_assert_eq(rename(p11, tmp), 0);
  j = open_j(0, 0, &c, &info, O3M_ECORRUPT);
  /* Starting beyond the gap is fine. */
  j = open_j(20, 0, &c, &info, O3M_OK);
  ap_journal_close(j);
  /* Salvage stops at the gap: 1..10 survive, 21.. is set aside. */
  j = open_j(0, 1, &c, &info, O3M_OK);
  cr_assert_eq(c.n, 10);
  cr_assert_eq(info.salvaged, 1);
  cr_assert_eq(info.salvage_seq, 11);
  cr_assert_eq(info.last_seq, 10);
  cr_assert(!exists(p21));
  ap_journal_close(j);

  /* A journal that starts after the record the replay needs first: records
   * 1..10 are missing (a checkpoint older than the journal). */
  drop_dir();
  make_dir();
  j = open_j(10, 0, &c, &info, O3M_OK);
  fill(j, 11, 15, 0);
  ap_journal_close(j);
  j = open_j(0, 0, &c, &info, O3M_ECORRUPT);
  j = open_j(0, 1, &c, &info, O3M_OK);
  cr_assert_eq(c.n, 0);
  cr_assert_eq(info.salvaged, 1);
  cr_assert_eq(info.last_seq, 0);
  cr_assert_eq(info.dropped_bytes, HDR + 5 * L);
  ap_journal_close(j);
}

Test(journal, segment_written_with_another_d_is_refused) {
  collected c;
  ap_journal *j = open_j(0, 0, &c, NULL, O3M_OK);
  fill(j, 1, 3, 0);
  ap_journal_close(j);
  ap_journal_options o;
  ap_journal_options_default(&o);
  o.dir = dir;
  o.d = D + 1;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert_eq(ap_journal_open(&j, &o, NULL, &e), O3M_EDIM);
  cr_assert_not_null(strstr(e.msg, "d = 5"), "%s", e.msg);
}

Test(journal, rotation_and_pruning_bound_the_log) {
  collected c;
  ap_journal_info info;
  ap_journal *j = open_j(0, 0, &c, &info, O3M_OK);
  for (uint64_t k = 0; k < 10; k++) {
    fill(j, 10 * k + 1, 10 * k + 10, 0);
    cr_assert_eq(ap_journal_rotate(j, NULL), O3M_OK);
    /* Rotating an empty segment does nothing. */
    cr_assert_eq(ap_journal_rotate(j, NULL), O3M_OK);
  }
  cr_assert_eq(ap_journal_segments(j), 11);
  /* Records <= 35 are covered: segments 1, 11, 21 go; 31 (31..40) stays. */
  cr_assert_eq(ap_journal_prune(j, 35, NULL), O3M_OK);
  cr_assert_eq(ap_journal_segments(j), 8);
  char p[512];
  seg_path(p, sizeof p, 21);
  cr_assert(!exists(p));
  seg_path(p, sizeof p, 31);
  cr_assert(exists(p));
  /* Pruning everything keeps the current segment. */
  cr_assert_eq(ap_journal_prune(j, 1000, NULL), O3M_OK);
  cr_assert_eq(ap_journal_segments(j), 1);
  ap_journal_close(j);
  j = open_j(100, 0, &c, &info, O3M_OK);
  cr_assert_eq(info.last_seq, 100);
  ap_journal_close(j);

  /* Automatic rotation by size at sync. */
  drop_dir();
  make_dir();
  ap_journal_options o;
  ap_journal_options_default(&o);
  o.dir = dir;
  o.d = D;
  o.segment_bytes = HDR + 4 * L;
  cr_assert_eq(ap_journal_open(&j, &o, NULL, NULL), O3M_OK);
  fill(j, 1, 20, 2);
  cr_assert_eq(ap_journal_segments(j), 6);
  ap_journal_close(j);
  j = open_j(0, 0, &c, &info, O3M_OK);
  cr_assert_eq(c.n, 20);
  cr_assert_eq(c.bad, 0);
  ap_journal_close(j);
}

/* Fault injection: a file size limit makes a write fail half-way (as a full
 * disk would). The journal must fail for good, and recovery must keep
 * exactly the synced records and cut the partial write. */
Test(journal, write_failure_fails_the_journal_and_recovery_cuts_it) {
  collected c;
  ap_journal_info info;
  ap_journal *j = open_j(0, 0, &c, &info, O3M_OK);
  fill(j, 1, 10, 0);
  signal(SIGXFSZ, SIG_IGN);
  struct rlimit old, lim;
  cr_assert_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
  lim = old;
  lim.rlim_cur = HDR + 12 * L + L / 3; /* room for 2 1/3 more records */
  cr_assert_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
  for (uint64_t i = 11; i <= 15; i++) {
    double x[D];
    ap_journal_record r;
    rec_of(i, x, &r);
    cr_assert_eq(ap_journal_append(j, &r, NULL), O3M_OK);
  }
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert_eq(ap_journal_sync(j, &e), O3M_EIO);
  cr_assert_eq(ap_journal_failed(j), O3M_EIO);
  cr_assert_eq(ap_journal_synced_seq(j), 10);
  double x[D];
  ap_journal_record r;
  rec_of(16, x, &r);
  cr_assert_eq(ap_journal_append(j, &r, NULL), O3M_EIO);
  cr_assert_eq(ap_journal_sync(j, NULL), O3M_EIO);
  ap_journal_close(j);
  cr_assert_eq(setrlimit(RLIMIT_FSIZE, &old), 0);
  /* Records 11 and 12 reached the file whole (never acknowledged, but
   * complete); the third was cut by the limit: a torn tail. */
  j = open_j(0, 0, &c, &info, O3M_OK);
  cr_assert_eq(c.n, 12);
  cr_assert_eq(c.bad, 0);
  cr_assert_eq(info.tail_bytes_cut, L / 3);
  ap_journal_close(j);
}

Test(journal, appends_and_syncs_do_not_allocate) {
  collected c;
  ap_journal *j = open_j(0, 0, &c, NULL, O3M_OK);
  double x[D];
  ap_journal_record r;
  rec_of(1, x, &r);
  struct mallinfo2 before = mallinfo2();
  for (int i = 0; i < 2000; i++) {
    ap_journal_append(j, &r, NULL);
    if (i % 100 == 99) ap_journal_sync(j, NULL);
  }
  struct mallinfo2 after = mallinfo2();
  cr_assert_eq(after.uordblks, before.uordblks);
  cr_assert_eq(ap_journal_last_seq(j), 2000);
  ap_journal_close(j);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Not an assertion on speed (disks differ), a measurement printed to the
 * test log: rewards per second for a few group-commit sizes, d = 64. */
Test(journal, benchmark_appends_and_syncs_per_second) {
  enum { BD = 64 };
  ap_journal_options o;
  ap_journal_options_default(&o);
  o.dir = dir;
  o.d = BD;
  o.buffer_records = 256;
  ap_journal *j;
  cr_assert_eq(ap_journal_open(&j, &o, NULL, NULL), O3M_OK);
  double x[BD];
  for (int k = 0; k < BD; k++) x[k] = k * 0.01;
  ap_journal_record r = {.type = AP_JOURNAL_REWARD, .mask_id = 1, .reward = 1, .x = x};
  static const int batches[] = {1, 8, 64, 256};
  for (size_t b = 0; b < sizeof batches / sizeof *batches; b++) {
    int batch = batches[b], n = 0;
    double t0 = now_s(), t;
    do {
      for (int k = 0; k < batch; k++, n++) {
        r.decision = (uint64_t)n + 1;
        cr_assert_eq(ap_journal_append(j, &r, NULL), O3M_OK);
      }
      cr_assert_eq(ap_journal_sync(j, NULL), O3M_OK);
      t = now_s() - t0;
    } while (t < 0.4);
    fprintf(stderr, "journal benchmark (d = %d): group commit of %3d: %8.0f rewards/s, "
            "%7.0f fdatasync/s\n", BD, batch, n / t, n / t / batch);
  }
  ap_journal_close(j);
}
