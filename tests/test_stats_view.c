/* test_stats_view.c -- the AP's Stats split by who asks, end to end.
 *
 * The AP tests' federation of fed_proc.h with two clients, "client" and
 * "other", and a certificate "monitor" (the default [federation]
 * metrics_clients, no [client NAME] section). Every counter of the AP
 * moves with some call; the federation-wide ones (the rounds of every
 * client, the fan-outs, the item cache's hits and misses, the unknown ids)
 * move with every client's, so a client that could read them would learn
 * whether another client asked for an id (a cache hit, an unknown item) and
 * how much it asks. The test asserts (SECURITY.md, "Stats by who asks"):
 *
 *  - a client is answered its own view (per_client, its name) with its own
 *    rounds, pending decisions, rewards and unknown ids, and 0 in the
 *    federation-wide fields;
 *  - nothing it reads but the shared model's counts (updates,
 *    local_updates, theta_norm, which every reply carries) moves with the
 *    other client's calls: rounds on the same items (cache hits), a round
 *    with an item and one with a user the AP's own tables lack, rewards;
 *  - the operator identities, the AP's own certificate and a name of
 *    metrics_clients, are answered the whole federation's counters, which
 *    did move with both clients' calls. */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include "ap_client.h"
#include "fed_proc.h"

static fed_net fed;

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
  /* A first connect that fails waits for the server, not a backoff. */
  o.wait_for_ready = 1;
  ap_client *c = NULL;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert(eq(int, ap_client_create(&c, &o, &e), 0), "%s: %s", name, o3m_err_message(&e));
  return c;
}

static void view_up(void) {
  fed_setup s = {.table_seed = 700, .pp1_users = FED_USERS, .deadline_ms = 3000,
                 .policy = "algo = linucb\nmodel = shared\n", .pending_capacity = 1000,
                 .second_client = 1};
  fed_net_prepare(&fed, &s);
  /* The default metrics_clients: a monitoring certificate of the same CA. */
  fed_make_certs("certs", "monitor");
  fed_net_start(&fed, FED_PMG, NULL);
  fed_wait_ready(&fed.proc[FED_PMG], 20000);
  fed_net_start(&fed, FED_PP1, NULL);
  fed_net_start(&fed, FED_PP2, NULL);
  fed_net_start(&fed, FED_AP, NULL);
  for (int p = FED_PP1; p <= FED_PP2; p++) fed_wait_ready(&fed.proc[p], 20000);
  fed_wait_ready(&fed.proc[FED_AP], 20000);
}

static void view_down(void) {
  for (int p = FED_N_PARTIES - 1; p >= 0; p--) fed_stop(&fed.proc[p], SIGTERM, 5000);
  fed_cleanup();
}

TestSuite(stats_view, .init = view_up, .fini = view_down, .timeout = 120);

/* A Recommend of user and items on c, asserted to be answered. */
static uint64_t recommend(ap_client *c, const char *user, int K, const char *const *items) {
  ap_recommendation rec;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert(eq(int, ap_client_recommend(c, user, K, items, NULL, NULL, 0, &rec, &e), 0),
            "recommend %s: %s", user, o3m_err_message(&e));
  return rec.decision;
}

static void reward(ap_client *c, uint64_t decision) {
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert(eq(int, ap_client_reward(c, decision, 0.5, NULL, &e), 0), "%s",
            o3m_err_message(&e));
}

static ap_stats stats(ap_client *c, const char *who) {
  ap_stats st;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert(eq(int, ap_client_stats(c, &st, &e), 0), "Stats as %s: %s", who,
            o3m_err_message(&e));
  return st;
}

/* Every field a client's view holds but the shared model's counts, with
 * the federation-wide ones that must stay 0 in it: those of a that differ
 * in b are named in the message. */
static void assert_unmoved(const ap_stats *a, const ap_stats *b, const char *what) {
  char moved[512] = "";
  size_t n = 0;
#define FIELD(f)                                                                           \
  if (a->f != b->f && n < sizeof moved)                                                    \
    n += (size_t)snprintf(moved + n, sizeof moved - n, " %s %llu -> %llu", #f,            \
                          (unsigned long long)a->f, (unsigned long long)b->f);
  FIELD(rounds)
  FIELD(pending)
  FIELD(expired)
  FIELD(rewards)
  FIELD(degraded_rounds)
  FIELD(unknown_user_rounds)
  FIELD(unknown_item_rounds)
  FIELD(cache_hits)
  FIELD(cache_misses)
  FIELD(cache_size)
  FIELD(cache_resets)
  FIELD(cache_evictions)
  FIELD(cache_stale_retries)
  FIELD(sliced_rounds)
  FIELD(slice_restarts)
#undef FIELD
  cr_assert(eq(str, moved, ""), "the counters client 'client' reads moved with %s:%s", what,
            moved);
}

static const char *const known[] = {"i0", "i1", "i2", "i3"};

Test(stats_view, a_client_reads_only_its_own_counters_and_the_operator_reads_all) {
  ap_client *a = client_as(FED_CLIENT), *b = client_as(FED_CLIENT2);
  ap_client *ap = client_as("ap"), *mon = client_as("monitor");

  /* Client's own calls: three rounds on known ids, one rewarded. */
  uint64_t d0 = recommend(a, "u1", 4, known);
  recommend(a, "u2", 4, known);
  recommend(a, "u3", 3, known);
  reward(a, d0);
  ap_stats a0 = stats(a, FED_CLIENT);

  /* The other client: the same items (cache hits), an item and a user
   * that the AP's own tables lack, and rewards. */
  uint64_t e0 = recommend(b, "u1", 4, known);
  recommend(b, "u4", 2, known);
  static const char *const unknown_item[] = {"i0", "no-such-item"};
  uint64_t e2 = recommend(b, "u5", 2, unknown_item);
  recommend(b, "no-such-user", 2, known);
  reward(b, e0);
  reward(b, e2);
  ap_stats a1 = stats(a, FED_CLIENT);
  assert_unmoved(&a0, &a1, "the other client's calls");
  /* Its own view: its own counts, and none of the federation-wide ones. */
  cr_assert(a0.per_client, "client 'client' was answered the federation-wide view");
  cr_assert(eq(str, a0.client, FED_CLIENT));
  cr_assert(eq(u64, a0.rounds, 3));
  cr_assert(eq(u64, a0.rewards, 1));
  cr_assert(eq(u32, a0.pending, 2));
  cr_assert(eq(u64, a0.unknown_user_rounds, 0));
  cr_assert(eq(u64, a0.unknown_item_rounds, 0));
  cr_assert(eq(u64, a0.cache_hits + a0.cache_misses + a0.cache_size + a0.cache_capacity, 0),
            "the item cache in a client's view: hits %llu misses %llu",
            (unsigned long long)a0.cache_hits, (unsigned long long)a0.cache_misses);
  /* Its own view is the other client's own counts. */
  ap_stats b1 = stats(b, FED_CLIENT2);
  cr_assert(b1.per_client, "client 'other' was answered the federation-wide view");
  cr_assert(eq(str, b1.client, FED_CLIENT2));
  cr_assert(eq(u64, b1.rounds, 4));
  cr_assert(eq(u64, b1.rewards, 2));
  cr_assert(eq(u32, b1.pending, 2));
  cr_assert(eq(u64, b1.unknown_item_rounds, 1));
  cr_assert(eq(u64, b1.unknown_user_rounds, 1));
  cr_assert(eq(u64, b1.cache_hits, 0));

  /* The operator identities see the whole federation, moved by both. */
  ap_stats op1 = stats(ap, "ap"), m1 = stats(mon, "monitor");
  const ap_stats *ops[] = {&op1, &m1};
  for (int i = 0; i < 2; i++) {
    const ap_stats *o = ops[i];
    const char *who = i ? "monitor" : "ap";
    cr_assert(o->per_client == 0, "%s was answered a client's view (%s)", who, o->client);
    cr_assert(eq(u64, o->rounds, 7), "%s: rounds %llu", who, (unsigned long long)o->rounds);
    cr_assert(eq(u64, o->rewards, 3));
    cr_assert(eq(u32, o->pending, 4));
    cr_assert(eq(u64, o->unknown_item_rounds, 1));
    cr_assert(eq(u64, o->unknown_user_rounds, 1));
    /* The client's three rounds on 4 distinct ids hit the cache at most
     * 4 + 3 times: the rest are the other client's. */
    cr_assert(gt(u64, o->cache_hits, 7), "%s: %llu cache hits, the other client's are not in "
              "the operator's view", who, (unsigned long long)o->cache_hits);
    cr_assert(gt(u64, o->cache_capacity, 0));
  }
  ap_client_destroy(a);
  ap_client_destroy(b);
  ap_client_destroy(ap);
  ap_client_destroy(mon);
}

/* A client's calls that fail move its own view's counters too, and never
 * the other client's: a refused round is counted nowhere it can read, a
 * rewarded decision of another client is refused. */
Test(stats_view, a_refused_reward_of_another_clients_decision_moves_nothing_it_reads) {
  ap_client *a = client_as(FED_CLIENT), *b = client_as(FED_CLIENT2);
  uint64_t d = recommend(a, "u1", 4, known);
  ap_stats a0 = stats(a, FED_CLIENT);
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert(eq(int, ap_client_reward(b, d, 0.5, NULL, &e), O3M_EPERM), "%s",
            o3m_err_message(&e));
  ap_stats a1 = stats(a, FED_CLIENT);
  assert_unmoved(&a0, &a1, "the other client's refused reward");
  cr_assert(eq(u64, a1.updates, a0.updates));
  ap_stats b1 = stats(b, FED_CLIENT2);
  cr_assert(eq(u64, b1.rounds, 0));
  cr_assert(eq(u64, b1.rewards, 0));
  ap_client_destroy(a);
  ap_client_destroy(b);
}

/* o3m-cli --config CONF ARGS, its stdout and stderr in out; the exit code. */
static int run_cli(const char *args, char *out, size_t out_len) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "%s/o3m-cli --config %s %s 2>&1", O3M_BIN_DIR, fed.conf, args);
  FILE *p = popen(cmd, "r");
  cr_assert_not_null(p);
  size_t n = fread(out, 1, out_len - 1, p);
  out[n] = '\0';
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* o3m-cli stats says whose counters it prints: a client's own view leaves
 * the federation-wide lines out, the operator's (--as the AP) has them. */
Test(stats_view, o3m_cli_stats_says_which_view_it_prints) {
  char out[4096];
  cr_assert(eq(int, run_cli("--as " FED_CLIENT " recommend --user u1 --items i0,i1", out,
                            sizeof out), 0), "%s", out);
  cr_assert(eq(int, run_cli("--as " FED_CLIENT " stats", out, sizeof out), 0), "%s", out);
  const char *mine = "view=client\nclient=" FED_CLIENT "\nrounds=1\n";
  cr_assert(strncmp(out, mine, strlen(mine)) == 0, "%s", out);
  cr_assert_null(strstr(out, "item_cache_hits="), "%s", out);
  cr_assert_null(strstr(out, "fanouts="), "%s", out);
  cr_assert_not_null(strstr(out, "\nnote=the counters of client " FED_CLIENT "'s own calls"),
                     "%s", out);
  cr_assert(eq(int, run_cli("--as " FED_CLIENT2 " stats", out, sizeof out), 0), "%s", out);
  cr_assert_not_null(strstr(out, "view=client\nclient=" FED_CLIENT2 "\nrounds=0\n"), "%s", out);
  cr_assert(eq(int, run_cli("--as ap stats", out, sizeof out), 0), "%s", out);
  const char *all = "view=federation\nrounds=1\n";
  cr_assert(strncmp(out, all, strlen(all)) == 0, "%s", out);
  cr_assert_not_null(strstr(out, "\nitem_cache_misses=2\n"), "%s", out);
  cr_assert_not_null(strstr(out, "\nfanouts=1\n"), "%s", out);
}
