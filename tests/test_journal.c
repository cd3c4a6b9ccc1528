/* test_journal.c -- the AP's write-ahead log of rewards: bit-exact round
 * trips; a torn last record cut; every other loss of acknowledged records
 * refused (a damaged last record, a file cut at a record boundary, a lost
 * newest segment, every segment after a checkpoint lost, middle corruption,
 * gaps) or salvaged; a crash at each step of a rotation; a version-1
 * journal refused; rotation and pruning; allocation-free appends; and a
 * small benchmark of appends + fdatasync per second on this machine's disk. */
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
#define SLOTS 256 /* record slots of the tests' segments */
#define SEG_BYTES (HDR + SLOTS * (off_t)L)

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

/* The options of this suite's journal: dir, D, SEG_BYTES. */
static void suite_options(ap_journal_options *o) {
  ap_journal_options_default(o);
  o->dir = dir;
  o->d = D;
  o->segment_bytes = (size_t)SEG_BYTES;
}

static ap_journal *open_j(uint64_t after, int salvage, collected *c, ap_journal_info *info,
                          int expect) {
  ap_journal_options o;
  suite_options(&o);
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

/* Overwrites n bytes at off with byte v. */
static void fill_bytes(const char *p, off_t off, size_t n, unsigned char v) {
  unsigned char b[4096];
  cr_assert_leq(n, sizeof b);
  memset(b, v, n);
  int fd = open(p, O_RDWR);
  cr_assert_geq(fd, 0);
  cr_assert_eq(pwrite(fd, b, n, off), (ssize_t)n);
  close(fd);
}

/* 1 if the n bytes at off are all zero. */
static int zero_at(const char *p, off_t off, size_t n) {
  unsigned char b[4096];
  cr_assert_leq(n, sizeof b);
  int fd = open(p, O_RDONLY);
  cr_assert_geq(fd, 0);
  cr_assert_eq(pread(fd, b, n, off), (ssize_t)n);
  close(fd);
  for (size_t k = 0; k < n; k++)
    if (b[k]) return 0;
  return 1;
}

/* Opens expecting O3M_ECORRUPT and checks that the message names the file
 * and the seq, and that nothing changed on disk (size of file p). */
static void assert_refused(uint64_t after, const char *file, uint64_t seq, const char *p) {
  off_t size = exists(p) ? file_size(p) : -1;
  ap_journal_options o;
  ap_journal_options_default(&o);
  o.dir = dir;
  o.d = D;
  o.after = after;
  o.segment_bytes = (size_t)SEG_BYTES;
  o3m_err e;
  o3m_err_clear(&e);
  ap_journal *j = NULL;
  cr_assert_eq(ap_journal_open(&j, &o, NULL, &e), O3M_ECORRUPT, "%s", e.msg);
  cr_assert_null(j);
  char s[32];
  snprintf(s, sizeof s, "seq %llu)", (unsigned long long)seq);
  if (file) cr_assert_not_null(strstr(e.msg, file), "%s", e.msg);
  cr_assert_not_null(strstr(e.msg, s), "%s", e.msg);
  cr_assert_not_null(strstr(e.msg, "refusing to start"), "%s", e.msg);
  cr_assert_eq(exists(p) ? file_size(p) : -1, size);
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
  cr_assert_eq(file_size(p), SEG_BYTES); /* created at its full length */
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
  /* A checkpoint at seq 10 with no journal at all: the rotation that came
   * before the checkpoint made segment 11, so it was lost. Salvage goes on
   * at 11. */
  drop_dir();
  make_dir();
  assert_refused(10, "no journal segment", 11, dir);
  j = open_j(10, 1, &c, &info, O3M_OK);
  cr_assert_eq(info.salvaged, 1);
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

/* Runs open_j with the log (stderr) written to log (n bytes, NUL-ended). */
static ap_journal *open_j_logged(collected *c, ap_journal_info *info, char *log, size_t n) {
  char tmpl[] = "/tmp/o3m-jlog-XXXXXX";
  int fd = mkstemp(tmpl);
  cr_assert_geq(fd, 0);
  unlink(tmpl);
  int saved = dup(STDERR_FILENO);
  cr_assert_geq(saved, 0);
  cr_assert_geq(dup2(fd, STDERR_FILENO), 0);
  ap_journal *j = open_j(0, 0, c, info, O3M_OK);
  dup2(saved, STDERR_FILENO);
  close(saved);
  ssize_t got = pread(fd, log, n - 1, 0);
  close(fd);
  log[got > 0 ? got : 0] = '\0';
  return j;
}

/* A synced (acknowledged) last record whose end marker
 * a disk zeroed is cut like a crash's torn write, since nothing in the file
 * tells them apart; the warning says what is known, and no longer that it
 * was never acknowledged. */
Test(journal, regression_the_torn_cut_does_not_claim_the_record_was_unacknowledged) {
  collected c;
  ap_journal_info info;
  ap_journal *j = open_j(0, 0, &c, &info, O3M_OK);
  fill(j, 1, 12, 1); /* each synced: what an acknowledgement follows */
  ap_journal_close(j);
  char p[512];
  seg_path(p, sizeof p, 1);
  fill_bytes(p, HDR + 12 * (off_t)L - 4, 4, 0); /* record 12's end marker */
  char log[4096];
  j = open_j_logged(&c, &info, log, sizeof log);
  cr_assert_eq(c.n, 11);
  cr_assert_eq(info.tail_bytes_cut, L);
  cr_assert_not_null(strstr(log, "zeroed a torn record"), "%s", log);
  cr_assert_not_null(strstr(log, "the last record is incomplete"), "%s", log);
  cr_assert_not_null(strstr(log, "it may have been acknowledged if the disk lost a write"), "%s",
                     log);
  cr_assert_null(strstr(log, "so it was never acknowledged"), "%s", log);
  ap_journal_close(j);
}

/* opt.expect_segments: a directory that held a journal before and has no
 * segment now is O3M_ENOTFOUND, with salvage too, and no segment is made;
 * with a segment it opens as usual. */
Test(journal, expect_segments_refuses_a_journal_that_is_gone) {
  ap_journal_options o;
  suite_options(&o);
  o.expect_segments = 1;
  char p[512];
  seg_path(p, sizeof p, 1);
  for (int salvage = 0; salvage <= 1; salvage++) {
    o.salvage = salvage;
    ap_journal *j = NULL;
    o3m_err e;
    o3m_err_clear(&e);
    cr_assert_eq(ap_journal_open(&j, &o, NULL, &e), O3M_ENOTFOUND, "%s", e.msg);
    cr_assert_null(j);
    cr_assert_not_null(strstr(e.msg, "no journal segment"), "%s", e.msg);
    cr_assert(!exists(p));
  }
  collected c;
  ap_journal *j = open_j(0, 0, &c, NULL, O3M_OK);
  fill(j, 1, 3, 0);
  ap_journal_close(j);
  o.salvage = 0;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert_eq(ap_journal_open(&j, &o, NULL, &e), O3M_OK, "%s", e.msg);
  ap_journal_close(j);
}

Test(journal, torn_last_record_is_cut_and_good_prefix_replays) {
  collected c;
  ap_journal_info info;
  ap_journal *j = open_j(0, 0, &c, &info, O3M_OK);
  fill(j, 1, 20, 0);
  ap_journal_close(j);
  char p[512];
  seg_path(p, sizeof p, 1);

  /* 1. The write of record 20 stopped half-way (a process crash): its end
   * marker was never written. */
  fill_bytes(p, HDR + 19 * (off_t)L + (off_t)L / 2, L - L / 2, 0);
  j = open_j(0, 0, &c, &info, O3M_OK);
  cr_assert_eq(c.n, 19);
  cr_assert_eq(c.bad, 0);
  cr_assert_eq(info.tail_bytes_cut, L);
  cr_assert_eq(info.last_seq, 19);
  cr_assert_eq(file_size(p), SEG_BYTES);
  cr_assert(zero_at(p, HDR + 19 * (off_t)L, L));
  fill(j, 20, 25, 0); /* the lost record 20 is written again */
  ap_journal_close(j);

  /* 2. Only the second half of record 25 reached the disk (a system crash
   * lost its first page): its start marker is zero. */
  fill_bytes(p, HDR + 24 * (off_t)L, 8, 0);
  j = open_j(0, 0, &c, &info, O3M_OK);
  cr_assert_eq(c.n, 24);
  cr_assert_eq(info.tail_bytes_cut, L);
  fill(j, 25, 25, 0);
  ap_journal_close(j);

  /* 3. A torn record that is not the last non-zero slot is damage. */
  fill_bytes(p, HDR + 25 * (off_t)L + 3, 20, 0x5a);   /* slot 26: torn-looking */
  fill_bytes(p, HDR + 24 * (off_t)L + L - 4, 4, 0);   /* record 25 torn */
  assert_refused(0, "ap-journal-0000000000000001.wal", 25, p);
}

/* The three attacks, one by one, on a journal of acknowledged
 * records: each is refused exactly like middle damage, and salvage keeps
 * what is valid. */
Test(journal, flipped_byte_in_the_last_record_is_refused) {
  collected c;
  ap_journal_info info;
  ap_journal *j = open_j(0, 0, &c, &info, O3M_OK);
  fill(j, 1, 25, 1);
  ap_journal_close(j);
  char p[512];
  seg_path(p, sizeof p, 1);
  flip_byte(p, HDR + 24 * (off_t)L + 60); /* x[0] of record 25, the last */
  assert_refused(0, "ap-journal-0000000000000001.wal", 25, p);
  /* The CRC itself, and the end marker: damage too, not a torn write. */
  flip_byte(p, HDR + 24 * (off_t)L + 60);
  flip_byte(p, HDR + 25 * (off_t)L - 8);
  assert_refused(0, "ap-journal-0000000000000001.wal", 25, p);
  flip_byte(p, HDR + 25 * (off_t)L - 8);
  flip_byte(p, HDR + 25 * (off_t)L - 1);
  assert_refused(0, "ap-journal-0000000000000001.wal", 25, p);

  j = open_j(0, 1, &c, &info, O3M_OK);
  cr_assert_eq(c.n, 24);
  cr_assert_eq(c.bad, 0);
  cr_assert_eq(info.salvaged, 1);
  cr_assert_eq(info.salvage_seq, 25);
  cr_assert_eq(info.dropped_bytes, L);
  cr_assert_eq(file_size(p), SEG_BYTES);
  char dropped[600];
  snprintf(dropped, sizeof dropped, "%s.dropped", p);
  cr_assert_eq(file_size(dropped), (off_t)L);
  fill(j, 25, 26, 0);
  ap_journal_close(j);
  j = open_j(0, 0, &c, &info, O3M_OK);
  cr_assert_eq(c.n, 26);
  cr_assert_eq(c.bad, 0);
  ap_journal_close(j);
}

Test(journal, truncated_at_a_record_boundary_is_refused) {
  collected c;
  ap_journal_info info;
  ap_journal *j = open_j(0, 0, &c, &info, O3M_OK);
  fill(j, 1, 30, 1);
  ap_journal_close(j);
  char p[512];
  seg_path(p, sizeof p, 1);
  /* Cut after record 27: records 28..30 are gone. */
  cr_assert_eq(truncate(p, HDR + 27 * (off_t)L), 0);
  assert_refused(0, "cut short", 28, p);
  /* Cut at the end of the records (nothing lost but the unwritten slots):
   * the file is still not what it was made, so refused as well. */
  drop_dir();
  make_dir();
  seg_path(p, sizeof p, 1);
  j = open_j(0, 0, &c, &info, O3M_OK);
  fill(j, 1, 30, 1);
  ap_journal_close(j);
  cr_assert_eq(truncate(p, HDR + 32 * (off_t)L), 0);
  assert_refused(0, "cut short", 31, p);
  /* Cut at the first record. */
  cr_assert_eq(truncate(p, HDR), 0);
  assert_refused(0, "cut short", 1, p);

  /* Salvage keeps the records the file still holds and gives it back its
   * length. */
  drop_dir();
  make_dir();
  seg_path(p, sizeof p, 1);
  j = open_j(0, 0, &c, &info, O3M_OK);
  fill(j, 1, 30, 1);
  ap_journal_close(j);
  cr_assert_eq(truncate(p, HDR + 27 * (off_t)L + 11), 0); /* and a piece of record 28 */
  j = open_j(0, 1, &c, &info, O3M_OK);
  cr_assert_eq(c.n, 27);
  cr_assert_eq(c.bad, 0);
  cr_assert_eq(info.salvaged, 1);
  cr_assert_eq(info.salvage_seq, 28);
  /* The piece up to its last non-zero byte (trailing zeros say nothing). */
  cr_assert(info.dropped_bytes > 0 && info.dropped_bytes <= 11, "%llu",
            (unsigned long long)info.dropped_bytes);
  cr_assert_eq(file_size(p), SEG_BYTES);
  fill(j, 28, 29, 0);
  ap_journal_close(j);
  j = open_j(0, 0, &c, &info, O3M_OK);
  cr_assert_eq(c.n, 29);
  cr_assert_eq(c.bad, 0);
  ap_journal_close(j);
}

/* Three segments 1..10, 11..20, 21..25, as three checkpoints would leave. */
static void three_segments(char *p1, char *p11, char *p21, size_t n) {
  collected c;
  ap_journal *j = open_j(0, 0, &c, NULL, O3M_OK);
  fill(j, 1, 10, 0);
  cr_assert_eq(ap_journal_rotate(j, NULL), O3M_OK);
  fill(j, 11, 20, 0);
  cr_assert_eq(ap_journal_rotate(j, NULL), O3M_OK);
  fill(j, 21, 25, 0);
  cr_assert_eq(ap_journal_segments(j), 3);
  ap_journal_close(j);
  seg_path(p1, n, 1);
  seg_path(p11, n, 11);
  seg_path(p21, n, 21);
}

Test(journal, newest_segment_deleted_is_refused) {
  char p1[512], p11[512], p21[512];
  three_segments(p1, p11, p21, sizeof p1);
  cr_assert_eq(unlink(p21), 0);
  assert_refused(0, "ap-journal-0000000000000015.wal is missing", 21, p11);
  /* From a checkpoint inside the lost range, or at its start. */
  assert_refused(15, "is missing", 21, p11);
  assert_refused(20, "is missing", 21, p11);
  /* Two newest segments deleted. */
  char away[600];
  snprintf(away, sizeof away, "%s.away", p11);
  cr_assert_eq(rename(p11, away), 0);
  assert_refused(0, "ap-journal-000000000000000b.wal is missing", 11, p1);
  cr_assert_eq(rename(away, p11), 0);

  /* Salvage keeps 1..20 and sets the close record aside. */
  collected c;
  ap_journal_info info;
  ap_journal *j = open_j(0, 1, &c, &info, O3M_OK);
  cr_assert_eq(c.n, 20);
  cr_assert_eq(c.bad, 0);
  cr_assert_eq(info.salvaged, 1);
  cr_assert_eq(info.salvage_seq, 21);
  cr_assert_eq(info.last_seq, 20);
  cr_assert_eq(info.segments, 2);
  fill(j, 21, 22, 0);
  ap_journal_close(j);
  j = open_j(0, 0, &c, &info, O3M_OK);
  cr_assert_eq(c.n, 22);
  cr_assert_eq(c.bad, 0);
  ap_journal_close(j);
}

Test(journal, every_segment_after_a_checkpoint_deleted_is_refused) {
  char p1[512], p11[512], p21[512];
  three_segments(p1, p11, p21, sizeof p1);
  /* A checkpoint at 20 (rotation made segment 21 before it was written):
   * segment 21 deleted. */
  cr_assert_eq(unlink(p21), 0);
  assert_refused(20, "is missing", 21, p11);
  /* Checkpoint at 10, segments 11 and 21 deleted. */
  cr_assert_eq(unlink(p11), 0);
  assert_refused(10, "is missing", 11, p1);
  /* Checkpoint at 20, and the journal holds less than that. */
  assert_refused(20, "ends before seq 20", 21, p1);
  /* Every segment deleted. */
  cr_assert_eq(unlink(p1), 0);
  assert_refused(20, "no journal segment", 21, dir);
  collected c;
  ap_journal_info info;
  ap_journal *j = open_j(20, 1, &c, &info, O3M_OK);
  cr_assert_eq(info.salvaged, 1);
  cr_assert_eq(info.last_seq, 20);
  fill(j, 21, 21, 0);
  ap_journal_close(j);
  j = open_j(20, 0, &c, &info, O3M_OK);
  cr_assert_eq(c.n, 1);
  ap_journal_close(j);
}

/* A rotation is: sync, create segment S (tmp, rename), close the old one.
 * A crash before the rename leaves a .tmp; between the rename and the close
 * an unclosed segment followed by an empty one. Both recover cleanly, and
 * the interrupted close is written, so that losing segment S afterwards is
 * still found. */
Test(journal, crash_at_each_step_of_a_rotation_recovers) {
  collected c;
  ap_journal_info info;
  ap_journal *j = open_j(0, 0, &c, &info, O3M_OK);
  fill(j, 1, 10, 0);
  cr_assert_eq(ap_journal_rotate(j, NULL), O3M_OK);
  ap_journal_close(j);
  char p1[512], p11[512], tmp[600];
  seg_path(p1, sizeof p1, 1);
  seg_path(p11, sizeof p11, 11);
  off_t close_at = HDR + 10 * (off_t)L;
  cr_assert(!zero_at(p1, close_at, L));

  /* After step 3: complete. */
  j = open_j(0, 0, &c, &info, O3M_OK);
  cr_assert_eq(c.n, 10);
  cr_assert_eq(info.rotation_completed, 0);
  cr_assert_eq(info.segments, 2);
  ap_journal_close(j);

  /* Between steps 2 and 3: segment 11 exists, segment 1 is not closed. */
  fill_bytes(p1, close_at, L, 0);
  j = open_j(0, 0, &c, &info, O3M_OK);
  cr_assert_eq(c.n, 10);
  cr_assert_eq(info.rotation_completed, 1);
  cr_assert_eq(info.last_seq, 10);
  cr_assert(!zero_at(p1, close_at, L));
  ap_journal_close(j);
  /* The same from a checkpoint at 10 (the replay starts in segment 11). */
  fill_bytes(p1, close_at, L, 0);
  j = open_j(10, 0, &c, &info, O3M_OK);
  cr_assert_eq(c.n, 0);
  ap_journal_close(j);
  j = open_j(0, 0, &c, &info, O3M_OK); /* still repaired by a full replay */
  cr_assert_eq(info.rotation_completed, 1);
  ap_journal_close(j);
  cr_assert_eq(unlink(p11), 0);
  assert_refused(0, "is missing", 11, p1);

  /* Before the rename: a .tmp of segment 11 and segment 1 unclosed. */
  fill_bytes(p1, close_at, L, 0);
  snprintf(tmp, sizeof tmp, "%s.tmp", p11);
  int fd = open(tmp, O_WRONLY | O_CREAT, 0600);
  cr_assert_geq(fd, 0);
  cr_assert_eq(write(fd, "O3MJSEG", 7), 7);
  close(fd);
  j = open_j(0, 0, &c, &info, O3M_OK);
  cr_assert_eq(c.n, 10);
  cr_assert_eq(info.segments, 1);
  cr_assert(!exists(tmp));
  fill(j, 11, 12, 0);
  ap_journal_close(j);
  j = open_j(0, 0, &c, &info, O3M_OK);
  cr_assert_eq(c.n, 12);
  cr_assert_eq(c.bad, 0);
  ap_journal_close(j);

  /* An unclosed segment anywhere but just before the last is damage. */
  drop_dir();
  make_dir();
  char p1b[512], p11b[512], p21b[512];
  three_segments(p1b, p11b, p21b, sizeof p1b);
  fill_bytes(p1b, close_at, L, 0);
  assert_refused(0, "never closed", 11, p1b);
}

Test(journal, version_1_journal_is_refused_naming_the_release) {
  collected c;
  ap_journal *j = open_j(0, 0, &c, NULL, O3M_OK);
  fill(j, 1, 3, 0);
  ap_journal_close(j);
  /* The header a version-1 release wrote: version 1, no slot count, a
   * valid CRC. */
  char p[512];
  seg_path(p, sizeof p, 1);
  unsigned char h[HDR];
  int fd = open(p, O_RDWR);
  cr_assert_geq(fd, 0);
  cr_assert_eq(pread(fd, h, HDR, 0), HDR);
  o3m_put_le32(h + 8, 1);
  memset(h + 32, 0, 28);
  o3m_put_le32(h + 60, o3m_crc32c(0, h, 60));
  cr_assert_eq(pwrite(fd, h, HDR, 0), HDR);
  close(fd);
  for (int salvage = 0; salvage < 2; salvage++) {
    ap_journal_options o;
    ap_journal_options_default(&o);
    o.dir = dir;
    o.d = D;
    o.salvage = salvage;
    o3m_err e;
    o3m_err_clear(&e);
    cr_assert_eq(ap_journal_open(&j, &o, NULL, &e), O3M_EDIM, "%s", e.msg);
    cr_assert_not_null(strstr(e.msg, "format version 1, this build reads versions 2..3"), "%s",
                       e.msg);
    cr_assert_not_null(strstr(e.msg, "an earlier release of o3m"), "%s", e.msg);
    cr_assert_eq(file_size(p), SEG_BYTES);
  }
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
  cr_assert_eq(file_size(p), size);
  cr_assert(zero_at(p, HDR + 14 * (off_t)L, L));
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
  ap_journal *j;
  char p1[512], p11[512], p21[512];
  three_segments(p1, p11, p21, sizeof p1);

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
  three_segments(p1, p11, p21, sizeof p1);
  cr_assert_eq(unlink(p1), 0);
  j = open_j(0, 0, &c, &info, O3M_ECORRUPT);
  j = open_j(0, 1, &c, &info, O3M_OK);
  cr_assert_eq(c.n, 0);
  cr_assert_eq(info.salvaged, 1);
  cr_assert_eq(info.last_seq, 0);
  cr_assert_eq(info.dropped_bytes, 2 * SEG_BYTES);
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

  /* Automatic rotation when a segment fills: 4 slots hold 3 records and
   * the close record, so 20 records take 7 segments, each at its full
   * length. */
  drop_dir();
  make_dir();
  ap_journal_options o;
  ap_journal_options_default(&o);
  o.dir = dir;
  o.d = D;
  o.segment_bytes = HDR + 4 * L;
  cr_assert_eq(ap_journal_open(&j, &o, NULL, NULL), O3M_OK);
  fill(j, 1, 20, 2);
  cr_assert_eq(ap_journal_segments(j), 7);
  ap_journal_close(j);
  for (uint64_t first = 1; first <= 19; first += 3) {
    seg_path(p, sizeof p, first);
    cr_assert_eq(file_size(p), HDR + 4 * (off_t)L, "segment %llu", (unsigned long long)first);
  }
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
   * complete); the third was cut by the limit: a torn last record. */
  j = open_j(0, 0, &c, &info, O3M_OK);
  cr_assert_eq(c.n, 12);
  cr_assert_eq(c.bad, 0);
  cr_assert_eq(info.tail_bytes_cut, L);
  ap_journal_close(j);
}

/* Fault injection: no file descriptor left (EMFILE, as during a flood of
 * connections) when a segment must be started. A rotation fails with the
 * journal still working; an append into a full segment is refused with
 * O3M_EUNAVAILABLE and nothing appended; once descriptors are back both
 * work and every record replays (this used to fail the
 * journal, and so stop the active party, for good). */
Test(journal, no_descriptor_for_a_new_segment_is_transient) {
  ap_journal_options o;
  ap_journal_options_default(&o);
  o.dir = dir;
  o.d = D;
  o.segment_bytes = HDR + 4 * L; /* 3 records and the close record */
  ap_journal *j;
  cr_assert_eq(ap_journal_open(&j, &o, NULL, NULL), O3M_OK);
  fill(j, 1, 2, 0);
  struct rlimit old, lim;
  cr_assert_eq(getrlimit(RLIMIT_NOFILE, &old), 0);
  lim = old;
  lim.rlim_cur = 3; /* stdin, stdout, stderr: every further open fails */
  cr_assert_eq(setrlimit(RLIMIT_NOFILE, &lim), 0);
  o3m_err e;
  o3m_err_clear(&e);
  int rot = ap_journal_rotate(j, &e);
  double x[D];
  ap_journal_record r;
  rec_of(3, x, &r);
  int a3 = ap_journal_append(j, &r, NULL); /* the third slot: room yet */
  int s3 = ap_journal_sync(j, NULL);
  rec_of(4, x, &r);
  int a4 = ap_journal_append(j, &r, NULL); /* full, and no new segment */
  int failed = ap_journal_failed(j);
  uint64_t last = ap_journal_last_seq(j);
  cr_assert_eq(setrlimit(RLIMIT_NOFILE, &old), 0);
  cr_assert_eq(rot, O3M_EIO, "rotate without descriptors: %s", o3m_errname(rot));
  cr_assert(strstr(e.msg, "Too many open files"), "%s", e.msg);
  cr_assert_eq(a3, O3M_OK);
  cr_assert_eq(s3, O3M_OK);
  cr_assert_eq(a4, O3M_EUNAVAILABLE, "append into a full segment: %s", o3m_errname(a4));
  cr_assert_eq(failed, O3M_OK, "the journal failed for good");
  cr_assert_eq(last, 3);
  fill(j, 4, 8, 1);
  cr_assert_eq(ap_journal_rotate(j, NULL), O3M_OK);
  ap_journal_close(j);
  collected c;
  ap_journal_info info;
  j = open_j(0, 0, &c, &info, O3M_OK);
  cr_assert_eq(c.n, 8);
  cr_assert_eq(c.bad, 0);
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
