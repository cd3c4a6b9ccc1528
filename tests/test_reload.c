/* test_reload.c -- a reload of a passive party's tables whose path is
 * hostile or slow, end to end (party/o3m_tables.h, "Files" and "Threads").
 *
 * Every test starts fed_proc.h's federation (o3m-pmg, o3m-active, two
 * o3m-passive, one serving thread each) and a client thread that asks the
 * AP for rounds in a loop and counts the answers, the degraded ones (the
 * AP's local model answered because a passive party did not) and the
 * failed calls. Then pp2's item table is replaced by something that is no
 * table a party should read (a FIFO with no writer, a symlink to
 * /dev/zero, a 6 GB sparse file) or by a valid table of 300k rows, and pp2
 * is told to reload, by its Reload RPC and by SIGHUP. What must hold:
 *  - the bad paths are refused with a message that says what the path is
 *    or names table_bytes_max, and pp2's resident memory stays small;
 *  - while the reload runs and after it, no round is degraded: the
 *    serving thread never parses (the large table) and never waits on a
 *    file (the FIFO);
 *  - SIGTERM ends pp2 with exit 0 afterwards.
 * The waits are on conditions with deadlines: the client's answer count,
 * pp2's reload counters in its Stats. Set O3M_KEEP_TEST_DIR=1 to keep the
 * work directory. */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ap_client.h"
#include "eval_tables.h"
#include "fed_proc.h"
#include "o3m.pb-c.h"
#include "o3m_rpc.h"
#include "o3m_wire.h"

/* Wide enough that a loaded machine does not degrade rounds by itself;
 * the old code's parse of the large table on the serving thread took
 * longer than this on the same machine. */
#define DEADLINE_MS 1000
#define LARGE_ROWS 300000

static fed_net fed;

/* ------------------------------------------------------------ the client loop */

typedef struct loop {
  pthread_t th;
  ap_client *c;
  atomic_int stop;
  atomic_ullong answered, degraded, failed;
  char first_error[256]; /* written once, before failed first moves */
} loop;

static loop lp;

static void *loop_main(void *arg) {
  loop *l = arg;
  static const char *const items[] = {"i0", "i1", "i2", "i3", "i4", "i5"};
  unsigned n = 0;
  while (!atomic_load(&l->stop)) {
    char user[16];
    snprintf(user, sizeof user, "u%u", n++ % FED_USERS);
    ap_recommendation rec;
    o3m_err e;
    o3m_err_clear(&e);
    int rc = ap_client_recommend(l->c, user, 6, items, NULL, NULL, 0, &rec, &e);
    if (rc < 0) {
      if (atomic_load(&l->failed) == 0)
        snprintf(l->first_error, sizeof l->first_error, "%s: %s", o3m_errname(rc),
                 o3m_err_message(&e));
      atomic_fetch_add(&l->failed, 1);
      fed_sleep_ms(10); /* a pause, not an order: the next call is a retry */
      continue;
    }
    atomic_fetch_add(&l->answered, 1);
    if (rec.degraded) atomic_fetch_add(&l->degraded, 1);
  }
  return NULL;
}

static void loop_start(void) {
  ap_client_options o;
  ap_client_options_default(&o);
  char target[64];
  snprintf(target, sizeof target, "127.0.0.1:%d", fed.port[FED_AP]);
  o.target = target;
  o.server_name = "ap";
  o.ca_file = fed_path("certs/ca.pem");
  o.cert_file = fed_path("certs/" FED_CLIENT ".pem");
  o.key_file = fed_path("certs/" FED_CLIENT ".key");
  o.deadline_ms = 10000;
  o.wait_for_ready = 1;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert(eq(int, ap_client_create(&lp.c, &o, &e), 0), "%s", o3m_err_message(&e));
  atomic_store(&lp.stop, 0);
  atomic_store(&lp.answered, 0);
  atomic_store(&lp.degraded, 0);
  atomic_store(&lp.failed, 0);
  lp.first_error[0] = '\0';
  cr_assert(eq(int, pthread_create(&lp.th, NULL, loop_main, &lp), 0));
}

static void loop_stop(void) {
  if (!lp.c) return;
  atomic_store(&lp.stop, 1);
  pthread_join(lp.th, NULL);
  ap_client_destroy(lp.c);
  lp.c = NULL;
}

/* Waits until the loop has answered `more` rounds beyond what it had
 * answered at the call (deadline 60 s). */
static void loop_wait_answers(unsigned long long more) {
  unsigned long long want = atomic_load(&lp.answered) + more;
  double end = fed_now_s() + 60;
  while (atomic_load(&lp.answered) < want && fed_now_s() < end) fed_sleep_ms(20);
  cr_assert(ge(u64, (uint64_t)atomic_load(&lp.answered), (uint64_t)want),
            "the client got %llu answers in 60 s, wanted %llu (failed %llu, first: %s)",
            (unsigned long long)atomic_load(&lp.answered), want,
            (unsigned long long)atomic_load(&lp.failed), lp.first_error);
}

/* ------------------------------------------------------------ the federation */

static void up(void) {
  fed_setup s = {.table_seed = 100, .pp1_users = FED_USERS, .deadline_ms = DEADLINE_MS,
                 .policy = "algo = linucb\nmodel = shared\nalpha = 1.0\nlambda = 1\n",
                 .pending_capacity = 100000};
  fed_net_prepare(&fed, &s);
  static const char *const pmg_args[] = {"--keep-mask", NULL};
  fed_net_start(&fed, FED_PMG, pmg_args);
  fed_wait_ready(&fed.proc[FED_PMG], 20000);
  static const char *const ap_args[] = {"--pmg-timeout-s", "20", NULL};
  fed_net_start(&fed, FED_PP1, NULL);
  fed_net_start(&fed, FED_PP2, NULL);
  fed_net_start(&fed, FED_AP, ap_args);
  for (int p = FED_PP1; p <= FED_PP2; p++) fed_wait_ready(&fed.proc[p], 20000);
  fed_wait_ready(&fed.proc[FED_AP], 20000);
  loop_start();
  /* The federation answers before anything is changed. */
  loop_wait_answers(20);
}

static void down(void) {
  loop_stop();
  for (int p = FED_N_PARTIES - 1; p >= 0; p--) fed_stop(&fed.proc[p], SIGTERM, 5000);
  fed_cleanup();
}

TestSuite(reload, .init = up, .fini = down, .timeout = 240);

/* pp2's own operator: its certificate, the only one that may call Reload
 * and Stats on it. */
static o3m_rpc_client *pp2_operator(int deadline_ms) {
  char target[64];
  snprintf(target, sizeof target, "127.0.0.1:%d", fed.port[FED_PP2]);
  return fed_client(target, "certs", "certs", "pp2", "pp2", deadline_ms);
}

static int pp2_reload(o3m_rpc_client *c, O3m__V1__ReloadReply *out, o3m_err *e) {
  O3m__V1__ReloadRequest req = O3M__V1__RELOAD_REQUEST__INIT;
  ProtobufCMessage *m;
  o3m_err_clear(e);
  int rc = o3m_rpc_client_call(c, O3M_PATH_PASSIVE_RELOAD, &req.base,
                               &o3m__v1__reload_reply__descriptor, &m, e);
  if (rc == 0 && out) *out = *(const O3m__V1__ReloadReply *)m;
  return rc;
}

static void pp2_stats(o3m_rpc_client *c, O3m__V1__PassiveStats *out) {
  O3m__V1__StatsRequest req = O3M__V1__STATS_REQUEST__INIT;
  ProtobufCMessage *m;
  o3m_err e;
  o3m_err_clear(&e);
  int rc = o3m_rpc_client_call(c, O3M_PATH_PASSIVE_STATS, &req.base,
                               &o3m__v1__passive_stats__descriptor, &m, &e);
  cr_assert(eq(int, rc, 0), "pp2 Stats: %s: %s", o3m_errname(rc), o3m_err_message(&e));
  *out = *(const O3m__V1__PassiveStats *)m;
}

/* Waits (30 s) until pp2's Stats count `refused` refused reloads. */
static void pp2_wait_refused(o3m_rpc_client *c, uint64_t refused) {
  O3m__V1__PassiveStats st = O3M__V1__PASSIVE_STATS__INIT;
  double end = fed_now_s() + 30;
  for (;;) {
    pp2_stats(c, &st);
    if (st.reloads_refused >= refused || fed_now_s() >= end) break;
    fed_sleep_ms(50);
  }
  cr_assert(st.reloads_refused >= refused,"after 30 s pp2 counts %llu refused reloads, want %llu; its log:\n%s",
                 (unsigned long long)st.reloads_refused, (unsigned long long)refused,
                 fed_log_tail(&fed.proc[FED_PP2]));
}

/* pp2's resident memory in kB (VmRSS), -1 when it cannot be read. */
static long pp2_rss_kb(void) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", (int)fed.proc[FED_PP2].pid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  long kb = -1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "VmRSS: %ld kB", &kb) == 1) break;
  fclose(f);
  return kb;
}

/* Replaces pp2's item table by what make puts at the path. */
static const char *item_path(void) { return fed_path("pp2_items.csv"); }

/* The common test: the path made bad, a Reload RPC refused with a message
 * holding `want` (and the path), a SIGHUP refused too, rounds answered
 * meanwhile and after, none degraded, pp2 small, SIGTERM honoured. */
static void refused_reload(const char *what, const char *want, int code) {
  o3m_rpc_client *op = pp2_operator(15000);
  O3m__V1__ReloadReply rr;
  o3m_err e;
  int rc = pp2_reload(op, &rr, &e);
  cr_assert(eq(int, rc, code), "%s: the Reload answered %s (%s), want %s", what,
            o3m_errname(rc), o3m_err_message(&e), o3m_errname(code));
  cr_assert_not_null(strstr(o3m_err_message(&e), want), "%s: %s", what, o3m_err_message(&e));
  cr_assert_not_null(strstr(o3m_err_message(&e), "pp2_items.csv"), "%s: %s", what,
                     o3m_err_message(&e));
  /* SIGHUP takes the same path and is refused the same way. */
  cr_assert(eq(int, kill(fed.proc[FED_PP2].pid, SIGHUP), 0));
  pp2_wait_refused(op, 2);
  /* Rounds go on, none degraded: pp2 answered every one in time. */
  loop_wait_answers(50);
  unsigned long long degraded = atomic_load(&lp.degraded), failed = atomic_load(&lp.failed);
  cr_assert(degraded == 0, "%s: %llu of %llu rounds degraded while pp2 reloaded", what,
            degraded, (unsigned long long)atomic_load(&lp.answered));
  cr_assert(failed == 0, "%s: %llu calls failed, first: %s", what, failed, lp.first_error);
  long kb = pp2_rss_kb();
  cr_assert(kb > 0 && kb < 512 * 1024, "%s: pp2's VmRSS is %ld kB", what, kb);
  o3m_rpc_client_destroy(op);
  loop_stop();
  int st = fed_stop(&fed.proc[FED_PP2], SIGTERM, 10000);
  cr_assert(eq(int, st, 0), "%s: pp2 did not end with 0 on SIGTERM (%d); its log:\n%s", what, st,
            fed_log_tail(&fed.proc[FED_PP2]));
}

Test(reload, a_table_path_that_became_a_fifo_is_refused_and_serving_goes_on) {
  cr_assert(eq(int, unlink(item_path()), 0));
  cr_assert(eq(int, mkfifo(item_path(), 0600), 0), "mkfifo: %s", strerror(errno));
  refused_reload("a FIFO", "is a FIFO (named pipe), not a regular file", O3M_EINVAL);
}

Test(reload, a_symlink_to_dev_zero_is_refused_and_memory_stays_bounded) {
  cr_assert(eq(int, unlink(item_path()), 0));
  cr_assert(eq(int, symlink("/dev/zero", item_path()), 0), "symlink: %s", strerror(errno));
  refused_reload("/dev/zero", "is a character device, not a regular file", O3M_EINVAL);
}

Test(reload, a_6_gb_sparse_file_is_refused_by_table_bytes_max_before_it_is_read) {
  /* Sparse: instant, and no disk used. */
  FILE *f = fopen(item_path(), "w");
  cr_assert_not_null(f);
  cr_assert(eq(int, ftruncate(fileno(f), 6LL << 30), 0), "truncate: %s", strerror(errno));
  fclose(f);
  refused_reload("a 6 GB file", "table_bytes_max", O3M_ERANGE);
}

/* A valid table of 300k rows (the first items as the rounds ask them) is
 * parsed off the serving thread: the Reload's answer comes once it is
 * swapped in, and not one round is degraded meanwhile. */
Test(reload, a_large_table_is_swapped_in_without_a_degraded_round) {
  o3m_err e;
  o3m_err_clear(&e);
  char tmp[512];
  snprintf(tmp, sizeof tmp, "%s.new", item_path());
  cr_assert(eq(int, eval_tables_write_synthetic(tmp, O3M_FEATURES_ITEMS, "i", LARGE_ROWS, 2,
                                                4242, &e), 0),
            "%s", o3m_err_message(&e));
  cr_assert(eq(int, rename(tmp, item_path()), 0));
  unsigned long long before = atomic_load(&lp.answered);
  o3m_rpc_client *op = pp2_operator(120000);
  O3m__V1__ReloadReply rr;
  int rc = pp2_reload(op, &rr, &e);
  unsigned long long during = atomic_load(&lp.answered) - before;
  cr_assert(eq(int, rc, 0), "the Reload answered %s: %s", o3m_errname(rc), o3m_err_message(&e));
  cr_assert(gt(u64, (uint64_t)during, 0), "no answer while pp2 parsed");
  cr_assert(eq(u32, rr.items, LARGE_ROWS));
  cr_assert(eq(u64, rr.reloads, 1));
  /* Answers came while pp2 parsed, and rounds after the swap read the new
   * table. */
  loop_wait_answers(50);
  unsigned long long degraded = atomic_load(&lp.degraded), failed = atomic_load(&lp.failed);
  cr_assert(degraded == 0, "%llu of %llu answers degraded during the reload of %d rows",
            degraded, (unsigned long long)atomic_load(&lp.answered), LARGE_ROWS);
  cr_assert(failed == 0, "%llu calls failed, first: %s", failed, lp.first_error);
  o3m_rpc_client_destroy(op);
  loop_stop();
  cr_assert(eq(int, fed_stop(&fed.proc[FED_PP2], SIGTERM, 10000), 0), "%s",
            fed_log_tail(&fed.proc[FED_PP2]));
}
