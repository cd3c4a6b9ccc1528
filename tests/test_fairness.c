/* test_fairness.c -- what one authorized client can do to another (fail
 * its rounds, evict its decisions), end to end with the real daemons.
 *
 * The AP tests' federation (fed_proc.h) with a second client, FED_CLIENT2
 * ("other"), that has its own certificate and [client NAME] section. Each
 * test fails on the code before per-client shares and ownership:
 *  - a flood of one client's Recommends evicted every other client's open
 *    decisions from the one shared ring of the pending table (NOT_FOUND
 *    when they were rewarded); now each client has its share;
 *  - any client could reward any decision id it learned, and the owner's
 *    own reward then got ALREADY_EXISTS; now PERMISSION_DENIED, the
 *    decision stays open for its owner;
 *  - a client could hold every Recommend slot of the AP; now a cap per
 *    client (client_inflight_max: the key did not exist, so the old AP does
 *    not start with it) refuses the call over it at once, while another
 *    client's call is still taken;
 *  - with one serving thread the AP sent every queued round before it took
 *    a new call, so a client's round that arrived while another client's
 *    rounds were queued waited for all of them (the first cause of one
 *    client's flood failing others' rounds); now one batch per run of the
 *    idle hook, and the round waits for the batch in flight and at most
 *    one turn of the other client;
 *  - a round larger than the batch budget went whole, alone in its batch,
 *    and a round of another client that arrived meanwhile waited for all of
 *    it; now, while other clients are active, it is gathered in slices of
 *    slice_cost_max, and the other client's round is answered after one
 *    slice; two clients whose rounds can only be sliced take turns at it.
 * The flood's effect on another client's latency needs the benchmark's
 * sizes (d = 100, K = 1000): tests/fairness_e2e.sh. */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "ap_client.h"
#include "fed_proc.h"
#include "o3m.pb-c.h"
#include "o3m_clock.h"
#include "o3m_rng.h"
#include "o3m_rpc.h"
#include "o3m_wire.h"

#define DEADLINE_MS 3000
/* The federation's deadline in the tests that freeze pp2 (SIGSTOP) and
 * wait for conditions meanwhile: long, so that on a loaded machine a round
 * held by the frozen party is still answered by it once it runs again,
 * rather than decided without it. */
#define FROZEN_DEADLINE_MS 20000
/* How long a test waits for a condition (fed_wait_until). */
#define WAIT_MS 20000

static fed_net fed;
static ap_client *honest, *other;
/* pp1's Stats, as pp1 (pp1_requests makes it at its first call). */
static o3m_rpc_client *pp1_stats;
static uint64_t pp1_requests(void);

static ap_client *client_as(const char *name) {
  ap_client_options o;
  ap_client_options_default(&o);
  char target[64], cert[64], key[64];
  snprintf(target, sizeof target, "127.0.0.1:%d", fed.port[FED_AP]);
  snprintf(cert, sizeof cert, "certs/%s.pem", name);
  snprintf(key, sizeof key, "certs/%s.key", name);
  o.target = target;
  o.server_name = "ap";
  o.ca_file = fed_path("certs/ca.pem");
  o.cert_file = fed_path(cert);
  o.key_file = fed_path(key);
  o.deadline_ms = 10000;
  /* The AP is ready when a test starts: a first connect that fails on a
   * loaded machine must make the call wait for the reconnect, not fail it
   * and every call after it until gRPC's reconnect backoff ends. */
  o.wait_for_ready = 1;
  ap_client *c;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert(eq(int, ap_client_create(&c, &o, &e), 0), "%s", o3m_err_message(&e));
  return c;
}

/* The federation with both clients, the pending table of pending_capacity
 * entries, more [policy] lines, the AP's extra arguments and the
 * federation's deadline. */
static void fair_up(int pending_capacity, const char *policy_extra, const char *const *ap_args,
                    int deadline_ms) {
  char policy[256];
  snprintf(policy, sizeof policy, "algo = linucb\nmodel = shared\n%s", policy_extra);
  fed_setup s = {.table_seed = 300, .pp1_users = FED_USERS, .deadline_ms = deadline_ms,
                 .policy = policy, .pending_capacity = pending_capacity, .second_client = 1};
  fed_net_prepare(&fed, &s);
  fed_net_start(&fed, FED_PMG, NULL);
  fed_wait_ready(&fed.proc[FED_PMG], 20000);
  fed_net_start(&fed, FED_PP1, NULL);
  fed_net_start(&fed, FED_PP2, NULL);
  fed_net_start(&fed, FED_AP, ap_args);
  for (int p = FED_PP1; p <= FED_PP2; p++) fed_wait_ready(&fed.proc[p], 20000);
  fed_wait_ready(&fed.proc[FED_AP], 20000);
  honest = client_as(FED_CLIENT);
  other = client_as(FED_CLIENT2);
  /* pp1's Stats client connects now, so that a test's later reads, made
   * between steps it orders, are one call each. */
  (void)pp1_requests();
}

static void fair_up_small_table(void) { fair_up(40, "", NULL, DEADLINE_MS); }

static void fair_up_capped(void) {
  /* Four threads: three batches in flight (the client's two rounds and the
   * other client's, each maybe alone in its batch) while a fourth thread
   * takes calls. */
  static const char *const ap_args[] = {"--threads", "4", NULL};
  fair_up(1000, "client_inflight_max = 2\n", ap_args, FROZEN_DEADLINE_MS);
}

static void fair_down(void) {
  ap_client_destroy(honest);
  ap_client_destroy(other);
  honest = other = NULL;
  o3m_rpc_client_destroy(pp1_stats);
  pp1_stats = NULL;
  for (int p = FED_N_PARTIES - 1; p >= 0; p--) fed_stop(&fed.proc[p], SIGTERM, 5000);
  fed_cleanup();
}

static uint64_t recommend(ap_client *c, o3m_rng *r) {
  fed_round q;
  fed_draw_round(r, FED_USERS, &q);
  ap_recommendation rec;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert(eq(int, ap_client_recommend(c, q.user, q.K, q.items, NULL, NULL, 0, &rec, &e), 0),
            "%s", o3m_err_message(&e));
  return rec.decision;
}

static uint64_t updates_now(void) {
  ap_stats st;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert(eq(int, ap_client_stats(honest, &st, &e), 0), "%s", o3m_err_message(&e));
  return st.updates;
}

TestSuite(fairness, .timeout = 60);

/* Attack 4 in small: a table of 40 entries (20 per client), five open
 * decisions of one client, then 100 Recommends of the other. */
Test(fairness, a_flood_does_not_evict_another_clients_open_decisions,
     .init = fair_up_small_table, .fini = fair_down) {
  o3m_rng *r;
  cr_assert(eq(int, o3m_rng_create_seeded_insecure(&r, 5), 0));
  uint64_t mine[5], flood[100];
  for (int i = 0; i < 5; i++) mine[i] = recommend(honest, r);
  for (int i = 0; i < 100; i++) flood[i] = recommend(other, r);
  o3m_err e;
  for (int i = 0; i < 5; i++) {
    o3m_err_clear(&e);
    cr_assert(eq(int, ap_client_reward(honest, mine[i], 1.0, NULL, &e), 0),
              "decision %d of the honest client after the flood: %s", i, o3m_err_message(&e));
  }
  /* The flood evicted its own oldest decisions. */
  o3m_err_clear(&e);
  cr_assert(eq(int, ap_client_reward(other, flood[0], 1.0, NULL, &e), O3M_ENOTFOUND), "%s",
            o3m_err_message(&e));
  o3m_err_clear(&e);
  cr_assert(eq(int, ap_client_reward(other, flood[99], 1.0, NULL, &e), 0), "%s",
            o3m_err_message(&e));
  o3m_rng_destroy(r);
}

/* A decision belongs to the client that asked for it. */
Test(fairness, a_reward_from_another_client_is_permission_denied_and_the_owners_succeeds,
     .init = fair_up_small_table, .fini = fair_down) {
  o3m_rng *r;
  cr_assert(eq(int, o3m_rng_create_seeded_insecure(&r, 6), 0));
  uint64_t d = recommend(honest, r);
  uint64_t before = updates_now();
  o3m_err e;
  o3m_err_clear(&e);
  int rc = ap_client_reward(other, d, 1.0, NULL, &e);
  cr_assert(eq(int, rc, O3M_EPERM), "another client's reward: %s (%s)", o3m_errname(rc),
            o3m_err_message(&e));
  cr_assert(strstr(o3m_err_message(&e), "belongs to another client") != NULL, "%s",
            o3m_err_message(&e));
  cr_assert(eq(u64, updates_now(), before), "the refused reward changed the model");
  o3m_err_clear(&e);
  cr_assert(eq(int, ap_client_reward(honest, d, 0.5, NULL, &e), 0),
            "the owner's reward after another client's: %s", o3m_err_message(&e));
  cr_assert(eq(u64, updates_now(), before + 1));
  /* Rewarded or not, the decision stays another client's. */
  o3m_err_clear(&e);
  cr_assert(eq(int, ap_client_reward(other, d, 1.0, NULL, &e), O3M_EPERM), "%s",
            o3m_err_message(&e));
  o3m_rng_destroy(r);
}

/* Starts a Recommend of user and items[0..K-1] on raw client c (answered
 * later with finish; the request is packed at start). */
static void start_items(o3m_rpc_client *c, const char *user, int K, const char *const *items) {
  O3m__V1__RecommendRequest req = O3M__V1__RECOMMEND_REQUEST__INIT;
  req.user = (char *)user;
  req.n_items = (size_t)K;
  req.items = (char **)items;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert(eq(int, o3m_rpc_client_start(c, O3M_PATH_ACTIVE_RECOMMEND, &req.base,
                                         &o3m__v1__recommendation__descriptor, &e), 0),
            "%s", o3m_err_message(&e));
}

/* Starts a Recommend of a round drawn from r on raw client c. */
static void start_recommend(o3m_rpc_client *c, o3m_rng *r) {
  static fed_round q;
  fed_draw_round(r, FED_USERS, &q);
  start_items(c, q.user, q.K, q.items);
}

/* A raw client of the AP as client name (FED_CLIENT or FED_CLIENT2),
 * waiting for the connection as client_as's do. */
static o3m_rpc_client *raw_as(const char *name) {
  char target[64];
  snprintf(target, sizeof target, "127.0.0.1:%d", fed.port[FED_AP]);
  return fed_client_ready(target, "certs", "certs", name, "ap", 10000);
}

/* ---- the conditions the tests wait on instead of sleeping ----
 * pp1 counts every query of a MaskBatch (PassiveStats.requests), one per
 * round or slice the AP has sent, as soon as it arrives: with pp2 frozen
 * it shows which rounds the AP has fanned out. A round whose user the AP's
 * own table lacks is counted in ActiveStats.unknown_user_rounds the moment
 * the AP takes the call, before it is queued: it shows a round that waits
 * at the AP for a free batch slot. Stats is answered while a batch is in
 * flight only with a second serving thread, so the tests that wait on it
 * run at least two. */

/* A user that no party's table has (each answers with its dummy row). */
#define LATE_USER "late-user"

/* pp1's PassiveStats.requests, read with its own certificate. */
static uint64_t pp1_requests(void) {
  if (!pp1_stats) {
    char target[64];
    snprintf(target, sizeof target, "127.0.0.1:%d", fed.port[FED_PP1]);
    pp1_stats = fed_client_ready(target, "certs", "certs", "pp1", "pp1", 5000);
  }
  o3m_rpc_client *c = pp1_stats;
  O3m__V1__StatsRequest req = O3M__V1__STATS_REQUEST__INIT;
  ProtobufCMessage *m;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert(eq(int, o3m_rpc_client_call(c, O3M_PATH_PASSIVE_STATS, &req.base,
                                        &o3m__v1__passive_stats__descriptor, &m, &e), 0),
            "pp1's Stats: %s", o3m_err_message(&e));
  return ((const O3m__V1__PassiveStats *)m)->requests;
}

static int pp1_asked_cond(void *arg) { return pp1_requests() >= *(const uint64_t *)arg; }

/* Waits until pp1 has been asked for at least n queries since it started. */
static void wait_pp1_asked(uint64_t n, const char *what) {
  fed_wait_until(pp1_asked_cond, &n, WAIT_MS, what);
}

typedef struct unknown_users_at_least {
  o3m_rpc_client *stats; /* a client of the identity whose rounds count */
  uint64_t n;
} unknown_users_at_least;

static int unknown_users_cond(void *arg) {
  const unknown_users_at_least *u = arg;
  return fed_active_stats(u->stats)->unknown_user_rounds >= u->n;
}

/* Waits until the Stats that client stats reads show one round of an
 * unknown user more than before (a value read earlier with it). */
static void wait_ap_took(o3m_rpc_client *stats, uint64_t before, const char *what) {
  unknown_users_at_least u = {stats, before + 1};
  fed_wait_until(unknown_users_cond, &u, WAIT_MS, what);
}

/* The items of the slice tests' rounds: a round of K takes the first K. */
static const char *const items8[] = {"i0", "i1", "i2", "i3", "i4", "i5", "i6", "i7"};

static int finish(o3m_rpc_client *c, o3m_err *e) {
  ProtobufCMessage *m;
  o3m_err_clear(e);
  return o3m_rpc_client_finish(c, &m, e);
}

/* Finishes a Recommend on raw client c: 0 when it was answered by every
 * party (not degraded), 1 when decided without some (degraded), or the
 * error. */
static int finish_federated(o3m_rpc_client *c, o3m_err *e) {
  ProtobufCMessage *m;
  o3m_err_clear(e);
  int rc = o3m_rpc_client_finish(c, &m, e);
  if (rc < 0) return rc;
  return ((const O3m__V1__Recommendation *)m)->degraded ? 1 : 0;
}

/* A Recommend of user and the first K of items8 on raw client c, answered. */
static void answered(o3m_rpc_client *c, const char *user, int K) {
  o3m_err e;
  start_items(c, user, K, items8);
  cr_assert(eq(int, finish(c, &e), 0), "%s", o3m_err_message(&e));
}

/* client_inflight_max = 2: with pp2 frozen, two Recommends of one client
 * are in flight; its third is refused at once, naming the client and the
 * cap, while the other client's is taken and answered once pp2 is back.
 * "At once" is an order, not a time: the refusal comes back while the two
 * rounds still wait for the frozen party, which then answers them (a
 * refusal that waited for them would find them decided without pp2, or
 * miss the client's deadline first). */
Test(fairness, over_its_inflight_cap_a_client_is_refused_at_once_and_others_are_not,
     .init = fair_up_capped, .fini = fair_down) {
  o3m_rpc_client *c[4];
  for (int i = 0; i < 3; i++) c[i] = raw_as(FED_CLIENT);
  c[3] = raw_as(FED_CLIENT2);
  o3m_rng *r;
  cr_assert(eq(int, o3m_rng_create_seeded_insecure(&r, 7), 0));
  /* Connected before pp2 stops, so that the calls only queue at the AP. */
  for (int i = 0; i < 4; i++) {
    o3m_err e;
    start_recommend(c[i], r);
    cr_assert(eq(int, finish(c[i], &e), 0), "%s", o3m_err_message(&e));
  }
  uint64_t asked = pp1_requests();
  cr_assert(eq(int, kill(fed.proc[FED_PP2].pid, SIGSTOP), 0));
  start_recommend(c[0], r);
  start_recommend(c[1], r);
  wait_pp1_asked(asked + 2, "the AP to send the client's two rounds (pp1's requests)");
  start_recommend(c[2], r);
  o3m_err e;
  int rc = finish(c[2], &e);
  cr_assert(eq(int, rc, O3M_EFULL), "third call in flight: %s (%s)", o3m_errname(rc),
            o3m_err_message(&e));
  cr_assert(strstr(o3m_err_message(&e), "client 'client'") != NULL &&
                strstr(o3m_err_message(&e), "client_inflight_max = 2") != NULL,
            "%s", o3m_err_message(&e));
  start_recommend(c[3], r);
  wait_pp1_asked(asked + 3, "the AP to send the other client's round (pp1's requests)");
  cr_assert(eq(int, kill(fed.proc[FED_PP2].pid, SIGCONT), 0));
  for (int i = 0; i < 2; i++) {
    rc = finish_federated(c[i], &e);
    cr_assert(eq(int, rc, 0), "the client's round %d: %s: the refusal of its third came after "
              "the frozen party's deadline, not at once (%s)", i,
              rc == 1 ? "decided without pp2" : o3m_errname(rc), o3m_err_message(&e));
  }
  rc = finish_federated(c[3], &e);
  cr_assert(eq(int, rc, 0), "the other client's call: %s (%s)",
            rc == 1 ? "decided without pp2" : o3m_errname(rc), o3m_err_message(&e));
  for (int i = 0; i < 4; i++) o3m_rpc_client_destroy(c[i]);
  o3m_rng_destroy(r);
}

/* One serving thread, and every round alone in its batch (batch_cost_max =
 * 1), so that the order of the batches is the order of the answers. */
static void fair_up_one_thread(void) {
  static const char *const ap_args[] = {"--threads", "1", NULL};
  fair_up(1000, "batch_cost_max = 1\n", ap_args, DEADLINE_MS);
}

/* The flood: FLOOD_CALLS calls of the other client always in flight, each
 * on its own thread and connection, made again as soon as answered. */
#define FLOOD_CALLS 16
#define HONEST_ROUNDS 40

typedef struct flood_thread {
  pthread_t th;
  ap_client *c;
  o3m_rng *r;
} flood_thread;

/* What a test's calls got: answered, failed in transport (the AP was not
 * reached or did not answer within the deadline: UNAVAILABLE, DEADLINE,
 * a call that did not complete) or refused by the AP (any other code: the
 * AP answered with an error); and the first error of each kind, so that a
 * failure names its cause. */
typedef struct call_tally {
  atomic_uint_least64_t answered, transport, refused;
  pthread_mutex_t mu;
  char first_transport[256], first_refused[256];
} call_tally;

static int transport_failure(int rc) {
  return rc == O3M_EUNAVAILABLE || rc == O3M_EDEADLINE || rc == O3M_ERPC;
}

static void tally_init(call_tally *t) {
  atomic_store(&t->answered, 0);
  atomic_store(&t->transport, 0);
  atomic_store(&t->refused, 0);
  pthread_mutex_init(&t->mu, NULL);
  t->first_transport[0] = t->first_refused[0] = '\0';
}

/* Counts one call's outcome: rc and, when it failed, e. */
static void tally_note(call_tally *t, int rc, const o3m_err *e) {
  if (rc == 0) {
    atomic_fetch_add(&t->answered, 1);
    return;
  }
  int transport = transport_failure(rc);
  atomic_fetch_add(transport ? &t->transport : &t->refused, 1);
  char *first = transport ? t->first_transport : t->first_refused;
  pthread_mutex_lock(&t->mu);
  if (!first[0])
    snprintf(first, sizeof t->first_transport, "%s: %s", o3m_errname(rc), o3m_err_message(e));
  pthread_mutex_unlock(&t->mu);
}

/* Fails the test if any call of t failed, naming the first error of each
 * kind; once the threads that count into t are joined. who names the
 * calls ("the flood's", "the honest client's"). */
static void tally_assert_none_failed(call_tally *t, const char *who) {
  uint64_t tr = atomic_load(&t->transport), rf = atomic_load(&t->refused);
  uint64_t all = tr + rf + atomic_load(&t->answered);
  cr_assert(tr == 0 && rf == 0,
            "%s calls failed: %llu of %llu in transport (first: %s), %llu refused by the AP "
            "(first: %s)", who, (unsigned long long)tr, (unsigned long long)all,
            tr ? t->first_transport : "-", (unsigned long long)rf, rf ? t->first_refused : "-");
}

static atomic_int flood_stop;
static call_tally flood;

/* One flood call after the other; after a failure it backs off (10 ms,
 * doubling to 500 ms), so that a channel that cannot reach the AP is not
 * spun on. */
static void *flood_run(void *arg) {
  flood_thread *f = arg;
  o3m_backoff b;
  o3m_backoff_start(&b, 10, 500, O3M_BACKOFF_UNBOUNDED);
  while (!atomic_load(&flood_stop)) {
    fed_round q;
    fed_draw_round(f->r, FED_USERS, &q);
    ap_recommendation rec;
    o3m_err e;
    o3m_err_clear(&e);
    int rc = ap_client_recommend(f->c, q.user, q.K, q.items, NULL, NULL, 0, &rec, &e);
    tally_note(&flood, rc, &e);
    if (rc == 0)
      o3m_backoff_reset(&b);
    else
      fed_sleep_ms((int)o3m_backoff_next(&b));
  }
  return NULL;
}

/* The flood is steady (every call of it answered four times), or a call
 * of it failed (the test then says why). */
static int flood_steady_cond(void *arg) {
  (void)arg;
  return atomic_load(&flood.answered) >= 4 * FLOOD_CALLS || atomic_load(&flood.transport) > 0 ||
         atomic_load(&flood.refused) > 0;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

/* Attack 3's cause a in small: with one AP thread and 16 of the other
 * client's Recommends always in flight, each of the honest client's rounds
 * is answered after at most the flood's batch in flight when it arrived
 * and one flood round of the turns, not after every flood round queued
 * before it. Counted, not timed: the flood rounds answered while each
 * honest round was in flight, whose median must be at most 3 (the old
 * AP's single thread sent everything queued first: about 14 here). */
Test(fairness, one_thread_answers_a_round_behind_at_most_one_turn_of_a_flood,
     .init = fair_up_one_thread, .fini = fair_down) {
  flood_thread f[FLOOD_CALLS];
  atomic_store(&flood_stop, 0);
  tally_init(&flood);
  for (int i = 0; i < FLOOD_CALLS; i++) {
    f[i].c = client_as(FED_CLIENT2);
    cr_assert(eq(int, o3m_rng_create_seeded_insecure(&f[i].r, 100 + (uint64_t)i), 0));
  }
  for (int i = 0; i < FLOOD_CALLS; i++)
    cr_assert(eq(int, pthread_create(&f[i].th, NULL, flood_run, &f[i]), 0));
  /* Until the flood is steady: every call of it has been answered four
   * times. A flood call that failed stops the wait, and the test says why. */
  fed_wait_until(flood_steady_cond, NULL, WAIT_MS, "every flood call to be answered 4 times");
  o3m_rng *r;
  cr_assert(eq(int, o3m_rng_create_seeded_insecure(&r, 8), 0));
  uint64_t behind[HONEST_ROUNDS];
  call_tally mine;
  tally_init(&mine);
  for (int i = 0; i < HONEST_ROUNDS; i++) {
    fed_round q;
    fed_draw_round(r, FED_USERS, &q);
    ap_recommendation rec;
    o3m_err e;
    o3m_err_clear(&e);
    uint64_t a0 = atomic_load(&flood.answered);
    int rc = ap_client_recommend(honest, q.user, q.K, q.items, NULL, NULL, 0, &rec, &e);
    behind[i] = atomic_load(&flood.answered) - a0;
    tally_note(&mine, rc, &e);
  }
  atomic_store(&flood_stop, 1);
  for (int i = 0; i < FLOOD_CALLS; i++) {
    pthread_join(f[i].th, NULL);
    ap_client_destroy(f[i].c);
    o3m_rng_destroy(f[i].r);
  }
  o3m_rng_destroy(r);
  tally_assert_none_failed(&flood, "the flood's");
  tally_assert_none_failed(&mine, "the honest client's");
  qsort(behind, HONEST_ROUNDS, sizeof *behind, cmp_u64);
  cr_log_info("flood rounds answered during an honest round: median %llu, max %llu",
              (unsigned long long)behind[HONEST_ROUNDS / 2],
              (unsigned long long)behind[HONEST_ROUNDS - 1]);
  cr_assert_leq(behind[HONEST_ROUNDS / 2], 3,
                "an honest round waited for a median of %llu flood rounds (max %llu): the AP "
                "sent the flood's queued rounds before it",
                (unsigned long long)behind[HONEST_ROUNDS / 2],
                (unsigned long long)behind[HONEST_ROUNDS - 1]);
}

/* One batch in flight at a time and slices of one candidate
 * (slice_cost_max = 8 at d = 8). Two serving threads give one batch slot,
 * as one thread does, and the second thread takes calls while a batch is
 * in flight, so the test can see a round taken (wait_ap_took) before the
 * batch ends: with one thread nothing shows a call that waits for it. */
static void fair_up_sliced(void) {
  static const char *const ap_args[] = {"--threads", "2", NULL};
  fair_up(1000, "slice_cost_max = 8\n", ap_args, FROZEN_DEADLINE_MS);
}

/* Finishes the call of raw client c on its own thread and notes when. */
typedef struct finisher {
  pthread_t th;
  o3m_rpc_client *c;
  int rc;
  double at;
  o3m_err e;
} finisher;

static void *finish_run(void *arg) {
  finisher *f = arg;
  f->rc = finish(f->c, &f->e);
  f->at = fed_now_s();
  return NULL;
}

/* Attack 3's cause b in small: the other client's round of the largest
 * size (K = 8) is in flight, held by a frozen passive party, when a round
 * of the honest client (active a moment before) arrives. Its slice of one
 * candidate is in flight, not the whole round: the honest round goes in
 * the next batch with the second slice and is answered while the large
 * round still has six slices to gather, which is then decided whole. Before
 * slices the large round's batch held all of it, and it was answered
 * first. Ordered, not timed: the large round is answered six fan-outs
 * after the honest one. Each step waits for the AP to have taken the last
 * call: pp1 asked for the first slice, then the honest round (of a user
 * the AP does not know) counted. */
Test(fairness, a_round_arriving_behind_a_large_one_waits_for_a_slice_of_it,
     .init = fair_up_sliced, .fini = fair_down) {
  /* sc reads Stats as the AP's operator: fan-outs, slices and unknown
   * users are federation-wide. */
  o3m_rpc_client *mine = raw_as(FED_CLIENT), *big = raw_as(FED_CLIENT2), *sc = raw_as("ap");
  /* Connected and active: one round each, the honest client's last, so
   * that it is still active when the large round arrives. */
  answered(big, "u1", 2);
  answered(mine, "u2", 2);
  const O3m__V1__ActiveStats *st = fed_active_stats(sc);
  uint64_t fan0 = st->fanouts, sliced0 = st->sliced_rounds, unknown0 = st->unknown_user_rounds;
  uint64_t asked = pp1_requests();

  cr_assert(eq(int, kill(fed.proc[FED_PP2].pid, SIGSTOP), 0));
  /* The large round: every item; then the honest round: two of them. */
  start_items(big, "u1", 8, items8);
  wait_pp1_asked(asked + 1, "the AP to send the large round's first slice (pp1's requests)");
  start_items(mine, LATE_USER, 2, items8);
  wait_ap_took(sc, unknown0, "the AP to take the honest round (unknown_user_rounds)");
  finisher f[2] = {{.c = big}, {.c = mine}};
  for (int i = 0; i < 2; i++) cr_assert(eq(int, pthread_create(&f[i].th, NULL, finish_run, &f[i]), 0));
  cr_assert(eq(int, kill(fed.proc[FED_PP2].pid, SIGCONT), 0));
  for (int i = 0; i < 2; i++) pthread_join(f[i].th, NULL);
  cr_assert(eq(int, f[0].rc, 0), "the large round: %s", o3m_err_message(&f[0].e));
  cr_assert(eq(int, f[1].rc, 0), "the honest round: %s", o3m_err_message(&f[1].e));
  cr_assert_lt(f[1].at, f[0].at, "the honest round was answered %.1f ms after the large one: it "
               "waited for all of it", 1e3 * (f[1].at - f[0].at));
  st = fed_active_stats(sc);
  cr_assert(eq(u64, st->sliced_rounds - sliced0, 1));
  /* The large round's 8 slices, the honest round in the second. */
  cr_assert(eq(u64, st->fanouts - fan0, 8), "%llu fan-outs",
            (unsigned long long)(st->fanouts - fan0));
  o3m_rpc_client_destroy(sc);
  o3m_rpc_client_destroy(mine);
  o3m_rpc_client_destroy(big);
}

/* Slices of one candidate, and batches too small for a whole round of
 * K = 8 (batch_cost_max = 32 is K = 4 at d = 8): a round of that size can
 * only be sliced, one at a time. */
static void fair_up_sliced_only(void) {
  /* Two threads, one batch slot: as fair_up_sliced. */
  static const char *const ap_args[] = {"--threads", "2", NULL};
  fair_up(1000, "slice_cost_max = 8\nbatch_cost_max = 32\n", ap_args, FROZEN_DEADLINE_MS);
}

/* Two clients that both send rounds that can only be sliced: while the
 * other client's first round is sliced, this client's round waits for the
 * slicing, and it is sliced next, before the other client's second round,
 * which was queued after it: the slicing passes from client to client,
 * one client cannot keep it. Ordered, not timed; each round is sent once
 * the AP has taken the one before (pp1 asked for the first slice, then
 * each later round, of a user the AP does not know, counted). */
Test(fairness, two_clients_of_large_rounds_take_turns_at_being_sliced,
     .init = fair_up_sliced_only, .fini = fair_down) {
  o3m_rpc_client *a1 = raw_as(FED_CLIENT2), *a2 = raw_as(FED_CLIENT2), *b1 = raw_as(FED_CLIENT);
  /* Stats as each client: the unknown users of each one's rounds. */
  o3m_rpc_client *sa = raw_as(FED_CLIENT2), *sb = raw_as(FED_CLIENT);
  /* Connected and active: a small round each. */
  answered(a1, "u1", 2);
  answered(a2, "u1", 2);
  answered(b1, "u2", 2);
  uint64_t asked = pp1_requests();
  uint64_t unknown_b = fed_active_stats(sb)->unknown_user_rounds;

  cr_assert(eq(int, kill(fed.proc[FED_PP2].pid, SIGSTOP), 0));
  start_items(a1, "u1", 8, items8);
  wait_pp1_asked(asked + 1, "the AP to send the first large round's first slice (pp1's requests)");
  start_items(b1, LATE_USER, 8, items8);
  wait_ap_took(sb, unknown_b, "the AP to take this client's large round (unknown_user_rounds)");
  uint64_t unknown_a = fed_active_stats(sa)->unknown_user_rounds;
  start_items(a2, LATE_USER, 8, items8);
  wait_ap_took(sa, unknown_a,
               "the AP to take the other client's second large round (unknown_user_rounds)");
  finisher f[3] = {{.c = a1}, {.c = b1}, {.c = a2}};
  for (int i = 0; i < 3; i++)
    cr_assert(eq(int, pthread_create(&f[i].th, NULL, finish_run, &f[i]), 0));
  cr_assert(eq(int, kill(fed.proc[FED_PP2].pid, SIGCONT), 0));
  for (int i = 0; i < 3; i++) pthread_join(f[i].th, NULL);
  for (int i = 0; i < 3; i++)
    cr_assert(eq(int, f[i].rc, 0), "round %d: %s", i, o3m_err_message(&f[i].e));
  cr_assert_lt(f[0].at, f[1].at, "the first large round was not answered first");
  cr_assert_lt(f[1].at, f[2].at, "the other client's second large round was sliced before "
               "this client's round, which waited for it (%.1f ms after)",
               1e3 * (f[1].at - f[2].at));
  o3m_rpc_client_destroy(sa);
  o3m_rpc_client_destroy(sb);
  o3m_rpc_client_destroy(a1);
  o3m_rpc_client_destroy(a2);
  o3m_rpc_client_destroy(b1);
}
