/* test_pipeline.c -- the active party's pipelined rounds, end to end
 * (ap_round.h, "Pipelined batches"; o3m_rpc.h, "Threads").
 *
 * A federation on loopback with mutual TLS (fed_proc.h): o3m-pmg, two
 * o3m-passive on 3 threads whose every MaskBatch is answered DELAY_MS late
 * (--test-reply-delay-ms, a wait made without their server's lock), and
 * o3m-active on 3 threads with a state_dir (group commit). Recommend A is
 * sent, then Recommend B while A waits for the passive parties, then a
 * Reward of an earlier decision. With batches in flight concurrently:
 * the Reward is acknowledged before A's reply can arrive (the AP's other
 * threads are not stalled by A's fan-out), B's reply arrives before twice
 * the delay after A was sent (two batches in flight, not one after the
 * other), and A's Recommendation.updates counts the reward (a decision sees
 * the rewards acknowledged before it was made). With the AP on one thread,
 * or with the fan-out under the RPC layer's lock as before, each of the
 * first two checks fails. A second test stops the AP (SIGTERM) while
 * clients keep batches in flight: it exits 0, every call gets an answer or
 * an error, none is answered twice (which the RPC layer would trip over).
 * A third makes the AP's journal fail (a file size limit) at the group
 * commit of a Reward taken while a Recommend's batch is in flight: that
 * Recommend must not be decided on the model that holds the reward no disk
 * has.
 *
 * Set O3M_KEEP_TEST_DIR=1 to keep the work directory (configs, logs). */
#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#include "ap_journal.h"
#include "fed_proc.h"
#include "o3m.pb-c.h"
#include "o3m_wire.h"

/* The passive parties' reply delay: long against the loopback round trip
 * and the fdatasync of one reward on a loaded machine, short against the
 * federation deadline. */
#define DELAY_MS 800
#define DEADLINE_MS 5000

static fed_net fed;

static void fed_up(void) {
  fed_setup s = {.table_seed = 500, .pp1_users = FED_USERS, .deadline_ms = DEADLINE_MS,
                 .policy = "algo = linucb\nmodel = shared\nalpha = 1\nlambda = 1\n",
                 .pending_capacity = 1000, .state_dirs = 1};
  fed_net_prepare(&fed, &s);
  char delay[16];
  snprintf(delay, sizeof delay, "%d", DELAY_MS);
  const char *const pp_args[] = {"--pmg-timeout-s", "20", "--threads", "3",
                                 "--test-reply-delay-ms", delay, NULL};
  const char *const ap_args[] = {"--pmg-timeout-s", "20", "--threads", "3", NULL};
  fed_net_start(&fed, FED_PMG, NULL);
  fed_net_start(&fed, FED_PP1, pp_args);
  fed_net_start(&fed, FED_PP2, pp_args);
  fed_net_start(&fed, FED_AP, ap_args);
  for (int p = 0; p < FED_N_PARTIES; p++) fed_wait_ready(&fed.proc[p], 30000);
}

static void fed_down(void) { fed_cleanup(); }

/* A client of the AP with the certificate of the federation's client. */
static o3m_rpc_client *ap_client_new(void) {
  char target[64];
  snprintf(target, sizeof target, "127.0.0.1:%d", fed.port[FED_AP]);
  return fed_client(target, "certs", "certs", FED_CLIENT, "ap", DEADLINE_MS + 5000);
}

static const char *const items[] = {"i0", "i1", "i2", "i3"};

/* One Recommend on its own thread (a gRPC client only sends and receives
 * while a thread waits for its call), from its start time on. */
typedef struct rec_call {
  o3m_rpc_client *c;
  const char *user;
  double t0;          /* the test's reference time */
  double t_sent, t_answered; /* seconds after t0 */
  int done;                  /* set (atomically) once answered */
  int rc;
  uint64_t decision, updates;
  o3m_err e;
} rec_call;

static void *rec_run(void *arg) {
  rec_call *rc = arg;
  O3m__V1__RecommendRequest req = O3M__V1__RECOMMEND_REQUEST__INIT;
  req.user = (char *)rc->user;
  req.n_items = 4;
  req.items = (char **)items;
  ProtobufCMessage *m;
  o3m_err_clear(&rc->e);
  rc->t_sent = fed_now_s() - rc->t0;
  rc->rc = o3m_rpc_client_call(rc->c, O3M_PATH_ACTIVE_RECOMMEND, &req.base,
                               &o3m__v1__recommendation__descriptor, &m, &rc->e);
  rc->t_answered = fed_now_s() - rc->t0;
  if (rc->rc == 0) {
    rc->decision = ((const O3m__V1__Recommendation *)m)->decision;
    rc->updates = ((const O3m__V1__Recommendation *)m)->updates;
  }
  __atomic_store_n(&rc->done, 1, __ATOMIC_RELEASE);
  return NULL;
}

/* A client of pp1's Stats, with pp1's certificate. */
static o3m_rpc_client *pp1_client(void) {
  char target[64];
  snprintf(target, sizeof target, "127.0.0.1:%d", fed.port[FED_PP1]);
  return fed_client(target, "certs", "certs", fed_party_name[FED_PP1],
                    fed_party_name[FED_PP1], 5000);
}

/* pp1's queries received (*received) and of those, how many are in its
 * reply delay now (received, neither answered nor refused yet). */
static int pp1_in_delay(o3m_rpc_client *c, uint64_t *received) {
  O3m__V1__StatsRequest req = O3M__V1__STATS_REQUEST__INIT;
  ProtobufCMessage *m;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert_eq(o3m_rpc_client_call(c, O3M_PATH_PASSIVE_STATS, &req.base,
                                   &o3m__v1__passive_stats__descriptor, &m, &e), 0,
               "pp1 Stats: %s", o3m_err_message(&e));
  const O3m__V1__PassiveStats *st = (const O3m__V1__PassiveStats *)m;
  if (received) *received = st->requests;
  return (int)(st->requests - st->lookups - st->errors);
}

/* Waits up to 30 s until pp1 has received more than since queries. */
static void pp1_wait_received(o3m_rpc_client *c, uint64_t since, const char *what) {
  uint64_t n = 0;
  for (double t0 = fed_now_s();; fed_sleep_ms(5)) {
    pp1_in_delay(c, &n);
    if (n > since) return;
    cr_assert_lt(fed_now_s() - t0, 30.0, "%s did not reach pp1 in 30 s", what);
  }
}

static int reward(o3m_rpc_client *c, uint64_t decision, double r, uint64_t *updates,
                  o3m_err *e) {
  O3m__V1__RewardRequest req = O3M__V1__REWARD_REQUEST__INIT;
  req.decision = decision;
  req.reward = r;
  ProtobufCMessage *m;
  int rc = o3m_rpc_client_call(c, O3M_PATH_ACTIVE_REWARD, &req.base,
                               &o3m__v1__reward_reply__descriptor, &m, e);
  if (rc == 0 && updates) *updates = ((const O3m__V1__RewardReply *)m)->updates;
  return rc;
}

Test(pipeline, rewards_and_recommends_flow_while_a_batch_waits, .init = fed_up,
     .fini = fed_down, .timeout = 120) {
  o3m_rpc_client *cr = ap_client_new();
  /* An earlier decision, for the reward. */
  rec_call d0 = {.c = cr, .user = "u1", .t0 = fed_now_s()};
  rec_run(&d0);
  cr_assert_eq(d0.rc, 0, "%s", o3m_err_message(&d0.e));

  o3m_rpc_client *pp1 = pp1_client();
  uint64_t seen;
  pp1_in_delay(pp1, &seen);
  double t0 = fed_now_s();
  rec_call a = {.c = ap_client_new(), .user = "u2", .t0 = t0};
  rec_call b = {.c = ap_client_new(), .user = "u3", .t0 = t0};
  pthread_t ta, tb;
  cr_assert_eq(pthread_create(&ta, NULL, rec_run, &a), 0);
  /* B once A's batch waits at pp1; then B's batch must join it there
   * before A is answered (two batches in flight, not one after the
   * other). */
  pp1_wait_received(pp1, seen, "A's batch");
  cr_assert_eq(pthread_create(&tb, NULL, rec_run, &b), 0);
  int most = 0;
  while (!__atomic_load_n(&a.done, __ATOMIC_ACQUIRE) && most < 2) {
    int now = pp1_in_delay(pp1, NULL);
    most = now > most ? now : most;
    if (most < 2) fed_sleep_ms(5);
  }
  o3m_rpc_client_destroy(pp1);
  cr_assert_geq(most, 2, "B was sent to the passive parties only after A was answered "
                "(pp1 never held both batches)");
  uint64_t updates = 0;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert_eq(reward(cr, d0.decision, 0.5, &updates, &e), 0, "%s", o3m_err_message(&e));
  double t_reward = fed_now_s() - t0;
  int a_done_at_reward = __atomic_load_n(&a.done, __ATOMIC_ACQUIRE);
  cr_assert_eq(updates, 1);
  pthread_join(ta, NULL);
  pthread_join(tb, NULL);
  cr_assert_eq(a.rc, 0, "%s", o3m_err_message(&a.e));
  cr_assert_eq(b.rc, 0, "%s", o3m_err_message(&b.e));
  fprintf(stderr, "pipeline: reward acknowledged after %.0f ms, A answered after %.0f ms, "
          "B (sent after %.0f ms) after %.0f ms; delay %d ms\n", t_reward * 1e3,
          a.t_answered * 1e3, b.t_sent * 1e3, b.t_answered * 1e3, DELAY_MS);

  /* A cannot be answered before the passive parties' delay is over. */
  cr_assert_geq(a.t_answered * 1e3, DELAY_MS, "A answered before the passive parties' delay");
  cr_assert_lt(t_reward, a.t_answered, "the Reward waited for A's fan-out (%.0f ms, A after "
               "%.0f ms)", t_reward * 1e3, a.t_answered * 1e3);
  cr_assert(!a_done_at_reward, "the Reward waited for A's fan-out (%.0f ms)", t_reward * 1e3);
  cr_assert_eq(a.updates, 1, "A's decision saw %llu rewards, expected the one acknowledged "
               "before it was made", (unsigned long long)a.updates);
  cr_assert_eq(b.updates, 1);
  o3m_rpc_client_destroy(a.c);
  o3m_rpc_client_destroy(b.c);
  o3m_rpc_client_destroy(cr);
}

/* Shutdown with batches in flight: clients keep Recommends and Rewards
 * going while the AP gets SIGTERM. */
#define LOAD_CLIENTS 6
static volatile int load_stop;

static void *load_client(void *arg) {
  int *answered = arg;
  o3m_rpc_client *c = ap_client_new();
  char user[16];
  for (int i = 0; !load_stop; i++) {
    snprintf(user, sizeof user, "u%d", i % FED_USERS);
    O3m__V1__RecommendRequest req = O3M__V1__RECOMMEND_REQUEST__INIT;
    req.user = user;
    req.n_items = 4;
    req.items = (char **)items;
    ProtobufCMessage *m;
    o3m_err e;
    o3m_err_clear(&e);
    if (o3m_rpc_client_call(c, O3M_PATH_ACTIVE_RECOMMEND, &req.base,
                            &o3m__v1__recommendation__descriptor, &m, &e) != 0) {
      fed_sleep_ms(20);
      continue;
    }
    __atomic_add_fetch(answered, 1, __ATOMIC_RELAXED);
    uint64_t d = ((const O3m__V1__Recommendation *)m)->decision;
    reward(c, d, 0.25, NULL, &e);
  }
  o3m_rpc_client_destroy(c);
  return NULL;
}

Test(pipeline, shutdown_with_batches_in_flight, .init = fed_up, .fini = fed_down,
     .timeout = 120) {
  pthread_t th[LOAD_CLIENTS];
  int answered[LOAD_CLIENTS] = {0};
  load_stop = 0;
  /* Made before the threads: fed_client's paths are static buffers. */
  o3m_rpc_client *pp1 = pp1_client();
  for (int i = 0; i < LOAD_CLIENTS; i++)
    cr_assert_eq(pthread_create(&th[i], NULL, load_client, &answered[i]), 0);
  /* More than LOAD_CLIENTS decisions, and a batch in pp1's delay: batches
   * are in flight when the AP gets SIGTERM. */
  for (double t0 = fed_now_s();; fed_sleep_ms(5)) {
    int sum = 0;
    for (int i = 0; i < LOAD_CLIENTS; i++) sum += __atomic_load_n(&answered[i], __ATOMIC_RELAXED);
    if (sum > LOAD_CLIENTS && pp1_in_delay(pp1, NULL) > 0) break;
    cr_assert_lt(fed_now_s() - t0, 60.0, "%d decisions in 60 s, or no batch in flight", sum);
  }
  o3m_rpc_client_destroy(pp1);
  int rc = fed_stop(&fed.proc[FED_AP], SIGTERM, 30000);
  load_stop = 1;
  for (int i = 0; i < LOAD_CLIENTS; i++) pthread_join(th[i], NULL);
  cr_assert_eq(rc, 0, "the AP did not stop cleanly: %s", fed_log(&fed.proc[FED_AP]));
  int total = 0;
  for (int i = 0; i < LOAD_CLIENTS; i++) total += answered[i];
  cr_assert_gt(total, LOAD_CLIENTS, "too few decisions before the stop: %d", total);
}

/* A reward that the group commit could not make durable is in the model
 * (h_reward applied it), the AP is stopping, and a batch that was in flight
 * meanwhile comes back: it must fail, not be decided on that model (its
 * Recommendation.updates would count a reward that was never acknowledged
 * and is lost at the restart). The AP restarts after a clean stop (a fresh
 * journal segment) with a file size limit that lets the segment hold
 * FSIZE_RECORDS records; then rounds of a Recommend in flight and a Reward
 * of the previous decision sent meanwhile, until a Reward fails. */
#define FSIZE_RECORDS 3

Test(pipeline, a_batch_in_flight_when_the_journal_fails_is_not_decided, .init = fed_up,
     .fini = fed_down, .timeout = 120) {
  cr_assert_eq(fed_stop(&fed.proc[FED_AP], SIGTERM, 10000), 0, "%s", fed_log(&fed.proc[FED_AP]));
  struct rlimit old, lim;
  cr_assert_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
  lim = old;
  lim.rlim_cur = AP_JOURNAL_SEGMENT_HEADER + FSIZE_RECORDS * AP_JOURNAL_RECORD_BYTES(FED_D);
  signal(SIGXFSZ, SIG_IGN);
  cr_assert_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
  const char *const ap_args[] = {"--pmg-timeout-s", "20", "--threads", "3", NULL};
  fed_net_start(&fed, FED_AP, ap_args);
  cr_assert_eq(setrlimit(RLIMIT_FSIZE, &old), 0);
  fed_wait_ready(&fed.proc[FED_AP], 30000);

  o3m_rpc_client *cr = ap_client_new();
  rec_call prev = {.c = cr, .user = "u1", .t0 = fed_now_s()};
  rec_run(&prev);
  cr_assert_eq(prev.rc, 0, "%s", o3m_err_message(&prev.e));
  uint64_t acked = 0;
  int failed = 0;
  for (int t = 0; t < FSIZE_RECORDS + 3 && !failed; t++) {
    o3m_rpc_client *pp1 = pp1_client();
    uint64_t seen;
    pp1_in_delay(pp1, &seen);
    rec_call q = {.c = ap_client_new(), .user = "u2", .t0 = fed_now_s()};
    pthread_t tq;
    cr_assert_eq(pthread_create(&tq, NULL, rec_run, &q), 0);
    pp1_wait_received(pp1, seen, "q's batch");
    o3m_rpc_client_destroy(pp1);
    uint64_t updates = 0;
    o3m_err e;
    o3m_err_clear(&e);
    int rc = reward(cr, prev.decision, 0.5, &updates, &e);
    double t_reward = fed_now_s() - q.t0;
    pthread_join(tq, NULL);
    if (rc == 0) {
      acked++;
      cr_assert_eq(updates, acked);
    } else {
      cr_assert_eq(rc, O3M_EUNAVAILABLE, "%s: %s", o3m_errname(rc), o3m_err_message(&e));
      failed = 1;
    }
    /* The Reward was handled while q's batch was in flight. */
    cr_assert_lt(t_reward, q.t_answered, "the Reward was not handled during q's fan-out");
    if (q.rc == 0)
      cr_assert_eq(q.updates, acked, "round %d: the decision saw %llu rewards, %llu are "
                   "acknowledged (the Reward %s)", t, (unsigned long long)q.updates,
                   (unsigned long long)acked, failed ? "failed" : "succeeded");
    else
      cr_assert(failed, "round %d: Recommend failed: %s", t, o3m_err_message(&q.e));
    o3m_rpc_client_destroy(q.c);
    if (q.rc == 0) prev = q;
  }
  cr_assert(failed, "no Reward failed under the file size limit");
  cr_assert_eq(fed_wait_exit(&fed.proc[FED_AP], 10000), 1, "%s", fed_log(&fed.proc[FED_AP]));
  o3m_rpc_client_destroy(cr);
}
