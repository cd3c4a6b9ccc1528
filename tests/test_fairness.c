/* test_fairness.c -- what one authorized client can do to another (issue
 * 22, attacks 3 and 4), end to end with the real daemons.
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
 *    client's call is still taken.
 * The flood's effect on another client's latency needs the benchmark's
 * sizes (d = 100, K = 1000): tests/fairness_e2e.sh. */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "ap_client.h"
#include "fed_proc.h"
#include "o3m.pb-c.h"
#include "o3m_rng.h"
#include "o3m_rpc.h"
#include "o3m_wire.h"

#define DEADLINE_MS 3000

static fed_net fed;
static ap_client *honest, *other;

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
  ap_client *c;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert(eq(int, ap_client_create(&c, &o, &e), 0), "%s", o3m_err_message(&e));
  return c;
}

/* The federation with both clients, the pending table of pending_capacity
 * entries, more [policy] lines and the AP's extra arguments. */
static void fair_up(int pending_capacity, const char *policy_extra, const char *const *ap_args) {
  char policy[256];
  snprintf(policy, sizeof policy, "algo = linucb\nmodel = shared\n%s", policy_extra);
  fed_setup s = {.table_seed = 300, .pp1_users = FED_USERS, .deadline_ms = DEADLINE_MS,
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
}

static void fair_up_small_table(void) { fair_up(40, "", NULL); }

static void fair_up_capped(void) {
  /* Three threads: two batches in flight while a third thread takes calls. */
  static const char *const ap_args[] = {"--threads", "3", NULL};
  fair_up(1000, "client_inflight_max = 2\n", ap_args);
}

static void fair_down(void) {
  ap_client_destroy(honest);
  ap_client_destroy(other);
  honest = other = NULL;
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

/* Starts a Recommend on raw client c (answered later with finish). */
static void start_recommend(o3m_rpc_client *c, o3m_rng *r) {
  static fed_round q; /* the request is packed at start */
  fed_draw_round(r, FED_USERS, &q);
  O3m__V1__RecommendRequest req = O3M__V1__RECOMMEND_REQUEST__INIT;
  req.user = q.user;
  req.n_items = (size_t)q.K;
  req.items = (char **)q.items;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert(eq(int, o3m_rpc_client_start(c, O3M_PATH_ACTIVE_RECOMMEND, &req.base,
                                         &o3m__v1__recommendation__descriptor, &e), 0),
            "%s", o3m_err_message(&e));
}

static int finish(o3m_rpc_client *c, o3m_err *e) {
  ProtobufCMessage *m;
  o3m_err_clear(e);
  return o3m_rpc_client_finish(c, &m, e);
}

/* client_inflight_max = 2: with pp2 frozen, two Recommends of one client
 * are in flight; its third is refused at once, naming the client and the
 * cap, while the other client's is taken and answered once pp2 is back. */
Test(fairness, over_its_inflight_cap_a_client_is_refused_at_once_and_others_are_not,
     .init = fair_up_capped, .fini = fair_down) {
  char target[64];
  snprintf(target, sizeof target, "127.0.0.1:%d", fed.port[FED_AP]);
  o3m_rpc_client *c[4];
  for (int i = 0; i < 3; i++) c[i] = fed_client(target, "certs", "certs", FED_CLIENT, "ap", 10000);
  c[3] = fed_client(target, "certs", "certs", FED_CLIENT2, "ap", 10000);
  o3m_rng *r;
  cr_assert(eq(int, o3m_rng_create_seeded_insecure(&r, 7), 0));
  /* Connected before pp2 stops, so that the calls only queue at the AP. */
  for (int i = 0; i < 4; i++) {
    o3m_err e;
    start_recommend(c[i], r);
    cr_assert(eq(int, finish(c[i], &e), 0), "%s", o3m_err_message(&e));
  }
  cr_assert(eq(int, kill(fed.proc[FED_PP2].pid, SIGSTOP), 0));
  start_recommend(c[0], r);
  start_recommend(c[1], r);
  fed_sleep_ms(300);
  double t0 = fed_now_s();
  start_recommend(c[2], r);
  o3m_err e;
  int rc = finish(c[2], &e);
  double dt = fed_now_s() - t0;
  cr_assert(eq(int, rc, O3M_EFULL), "third call in flight: %s (%s)", o3m_errname(rc),
            o3m_err_message(&e));
  cr_assert(strstr(o3m_err_message(&e), "client 'client'") != NULL &&
                strstr(o3m_err_message(&e), "client_inflight_max = 2") != NULL,
            "%s", o3m_err_message(&e));
  cr_assert_lt(dt, 1.0, "the refusal took %.2f s: it waited for the frozen party", dt);
  start_recommend(c[3], r);
  fed_sleep_ms(200);
  cr_assert(eq(int, kill(fed.proc[FED_PP2].pid, SIGCONT), 0));
  cr_assert(eq(int, finish(c[0], &e), 0), "%s", o3m_err_message(&e));
  cr_assert(eq(int, finish(c[1], &e), 0), "%s", o3m_err_message(&e));
  cr_assert(eq(int, finish(c[3], &e), 0), "the other client's call: %s", o3m_err_message(&e));
  for (int i = 0; i < 4; i++) o3m_rpc_client_destroy(c[i]);
  o3m_rng_destroy(r);
}
