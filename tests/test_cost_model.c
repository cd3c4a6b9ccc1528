/* test_cost_model.c -- what a round costs the passive parties, and each
 * client's budget of uncached item ids (active_participant/ap_round.h
 * "Cost model"), end to end with the real daemons.
 *
 * The AP tests' federation (fed_proc.h: d = 8, two passive parties) with a
 * second client, FED_CLIENT2 ("other"). Each test fails on the code before
 * the cost model, which counted K x d for every round whether its item
 * parts were cached or had to be computed by every passive party:
 *  - a round of new items beside another active client was one batch
 *    like a cached one of the same K; now its cost to the passive parties
 *    (a user row and an item part per new item, each by both parties)
 *    slices it, and the same round once cached goes whole;
 *  - a client over its budget of uncached ids had its round of new items
 *    in the same batch as another client's round; now that round waits
 *    for a batch of its own, and is still answered.
 * Counted in fan-outs, not timed. The flood's effect on another client's
 * latency needs the benchmark's sizes: eval/bench/attack-fairness.sh
 * (FLOODS=fresh). */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "fed_proc.h"
#include "o3m.pb-c.h"
#include "o3m_rpc.h"
#include "o3m_wire.h"

#define DEADLINE_MS 3000

static fed_net fed;

/* The federation with both clients, more [policy] lines and the AP's
 * serving threads. */
static void cost_up(const char *policy_extra, const char *threads) {
  char policy[256];
  snprintf(policy, sizeof policy, "algo = linucb\nmodel = shared\n%s", policy_extra);
  fed_setup s = {.table_seed = 310, .pp1_users = FED_USERS, .deadline_ms = DEADLINE_MS,
                 .policy = policy, .pending_capacity = 1000, .second_client = 1};
  const char *const ap_args[] = {"--threads", threads, NULL};
  fed_net_prepare(&fed, &s);
  fed_net_start(&fed, FED_PMG, NULL);
  fed_wait_ready(&fed.proc[FED_PMG], 20000);
  fed_net_start(&fed, FED_PP1, NULL);
  fed_net_start(&fed, FED_PP2, NULL);
  fed_net_start(&fed, FED_AP, ap_args);
  for (int p = FED_PP1; p <= FED_PP2; p++) fed_wait_ready(&fed.proc[p], 20000);
  fed_wait_ready(&fed.proc[FED_AP], 20000);
}

/* Slices of at most 40 of each cost: a round of 4 items costs the AP
 * 4 x 8 = 32, which a slice holds; new, it costs the two passive parties
 * (1 + 4) x 2 x 8 = 80, cached 16. One serving thread. */
static void cost_up_sliced(void) { cost_up("slice_cost_max = 40\n", "1"); }

/* A budget of 4 uncached ids, refilled at one a second. Two threads, one
 * batch in flight: a Stats call is answered while the batch waits. */
static void cost_up_budget(void) {
  cost_up("client_uncached_rate = 1\nclient_uncached_burst = 4\n", "2");
}

static void cost_down(void) {
  for (int p = FED_N_PARTIES - 1; p >= 0; p--) fed_stop(&fed.proc[p], SIGTERM, 5000);
  fed_cleanup();
}

static o3m_rpc_client *raw_as(const char *name) {
  char target[64];
  snprintf(target, sizeof target, "127.0.0.1:%d", fed.port[FED_AP]);
  return fed_client(target, "certs", "certs", name, "ap", 10000);
}

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

static int finish(o3m_rpc_client *c, o3m_err *e) {
  ProtobufCMessage *m;
  o3m_err_clear(e);
  return o3m_rpc_client_finish(c, &m, e);
}

static void answered(o3m_rpc_client *c, const char *user, int K, const char *const *items) {
  o3m_err e;
  start_items(c, user, K, items);
  cr_assert(eq(int, finish(c, &e), 0), "%s", o3m_err_message(&e));
}

static const char *const known[] = {"i0", "i1"};

TestSuite(cost_model, .timeout = 120);

/* While the other client is active (it was answered a moment before), a
 * round of 4 new items costs the passive parties 80, above the slice's 40:
 * it is gathered in slices of one item (16 for the user row and 16 for
 * the item fit 40, a second item does not), four fan-outs. The same round
 * again finds its items cached: it costs them one user row, 16, and its
 * 32 x d fits a slice, so it goes whole in one fan-out. Before the cost
 * model both went whole: K x d = 32 fits the slice either way. */
Test(cost_model, a_round_of_new_items_is_sliced_by_what_the_parties_compute,
     .init = cost_up_sliced, .fini = cost_down) {
  static const char *const fresh[] = {"n0", "n1", "n2", "n3"};
  o3m_rpc_client *mine = raw_as(FED_CLIENT), *big = raw_as(FED_CLIENT2), *sc = raw_as("ap");
  answered(big, "u1", 2, known);
  const O3m__V1__ActiveStats *st = fed_active_stats(sc);
  uint64_t fan0 = st->fanouts, sliced0 = st->sliced_rounds, unc0 = st->uncached_ids;

  /* The other client active (AP_ROUND_ACTIVE_MS), then the new items. */
  answered(mine, "u2", 2, known);
  answered(big, "u1", 4, fresh);
  st = fed_active_stats(sc);
  cr_assert(eq(u64, st->fanouts - fan0, 1 + 4),
            "a round of 4 new items beside an active client went in %llu fan-out(s): its cost "
            "to the passive parties did not slice it",
            (unsigned long long)(st->fanouts - fan0 - 1));
  cr_assert(eq(u64, st->sliced_rounds - sliced0, 1));
  cr_assert(eq(u64, st->uncached_ids - unc0, 4), "%llu uncached ids counted",
            (unsigned long long)(st->uncached_ids - unc0));

  /* The same round, its items cached now: whole. */
  fan0 = st->fanouts;
  sliced0 = st->sliced_rounds;
  unc0 = st->uncached_ids;
  answered(mine, "u2", 2, known);
  answered(big, "u1", 4, fresh);
  st = fed_active_stats(sc);
  cr_assert(eq(u64, st->fanouts - fan0, 2), "the cached round went in %llu fan-outs",
            (unsigned long long)(st->fanouts - fan0 - 1));
  cr_assert(eq(u64, st->sliced_rounds - sliced0, 0));
  cr_assert(eq(u64, st->uncached_ids - unc0, 0));
  o3m_rpc_client_destroy(sc);
  o3m_rpc_client_destroy(mine);
  o3m_rpc_client_destroy(big);
}

/* Finishes the call of raw client c on its own thread. */
typedef struct finisher {
  pthread_t th;
  o3m_rpc_client *c;
  int rc;
  o3m_err e;
} finisher;

static void *finish_run(void *arg) {
  finisher *f = arg;
  f->rc = finish(f->c, &f->e);
  return NULL;
}

/* A count the operator's Stats show, read on c, and the value waited for. */
typedef struct stats_at_least {
  o3m_rpc_client *c;
  uint64_t n;
} stats_at_least;

static int unknown_cond(void *arg) {
  const stats_at_least *u = arg;
  return fed_active_stats(u->c)->unknown_user_rounds >= u->n;
}

static int fanouts_cond(void *arg) {
  const stats_at_least *u = arg;
  return fed_active_stats(u->c)->fanouts >= u->n;
}

/* Waits until the Stats read on c show want fan-outs. */
static void wait_fanouts(o3m_rpc_client *c, uint64_t want) {
  stats_at_least u = {c, want};
  fed_wait_until(fanouts_cond, &u, 20000, "the AP's fan-outs to reach the count");
}

/* The other client's round of 8 new items (its whole burst of 4, and 4
 * more: it owes them) is in flight, held by a frozen passive party; then
 * its second round, of 4 new items, and this client's round of cached
 * items queue. Over its budget, the other client's round does not go in
 * this client's batch: it waits for a batch of its own, three fan-outs in
 * all, and it is answered, not refused. Before the budget both went in
 * one batch: two fan-outs. Whatever the order in which the two queued
 * rounds arrive, the budget gives three; the party is thawed once both
 * are queued, so that the old code shows its two. */
Test(cost_model, a_client_over_its_uncached_budget_waits_for_a_batch_of_its_own,
     .init = cost_up_budget, .fini = cost_down) {
  static const char *const fresh8[] = {"a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7"};
  static const char *const fresh4[] = {"b0", "b1", "b2", "b3"};
  o3m_rpc_client *mine = raw_as(FED_CLIENT), *o1 = raw_as(FED_CLIENT2),
                 *o2 = raw_as(FED_CLIENT2), *sc = raw_as("ap");
  /* Connected, and the known items cached: rounds of them cost no budget. */
  answered(mine, "u2", 2, known);
  answered(o1, "u1", 2, known);
  answered(o2, "u1", 2, known);
  const O3m__V1__ActiveStats *st = fed_active_stats(sc);
  const uint64_t fan0 = st->fanouts, waits0 = st->over_budget_waits, unc0 = st->uncached_ids;

  cr_assert(eq(int, kill(fed.proc[FED_PP2].pid, SIGSTOP), 0));
  start_items(o1, "u1", 8, fresh8);
  wait_fanouts(sc, fan0 + 1);
  /* Both rounds are of users the AP's table lacks, so that its Stats
   * count each the moment the AP takes it: the wait for both to be queued
   * is on that count, not on a sleep. */
  const uint64_t unknown0 = fed_active_stats(sc)->unknown_user_rounds;
  start_items(o2, "late-user-1", 4, fresh4);
  start_items(mine, "late-user-2", 2, known);
  stats_at_least u = {sc, unknown0 + 2};
  fed_wait_until(unknown_cond, &u, 20000, "the AP to take both queued rounds (unknown_user_rounds)");
  finisher f[3] = {{.c = o1}, {.c = o2}, {.c = mine}};
  for (int i = 0; i < 3; i++)
    cr_assert(eq(int, pthread_create(&f[i].th, NULL, finish_run, &f[i]), 0));
  cr_assert(eq(int, kill(fed.proc[FED_PP2].pid, SIGCONT), 0));
  for (int i = 0; i < 3; i++) pthread_join(f[i].th, NULL);
  for (int i = 0; i < 3; i++)
    cr_assert(eq(int, f[i].rc, 0), "round %d: %s", i, o3m_err_message(&f[i].e));
  st = fed_active_stats(sc);
  cr_assert(eq(u64, st->fanouts - fan0, 3),
            "%llu fan-outs: the round of a client over its budget of uncached ids went in "
            "another client's batch", (unsigned long long)(st->fanouts - fan0));
  cr_assert(ge(u64, st->over_budget_waits - waits0, 1));
  cr_assert(eq(u64, st->uncached_ids - unc0, 12), "%llu uncached ids counted",
            (unsigned long long)(st->uncached_ids - unc0));
  o3m_rpc_client_destroy(sc);
  o3m_rpc_client_destroy(mine);
  o3m_rpc_client_destroy(o1);
  o3m_rpc_client_destroy(o2);
}
