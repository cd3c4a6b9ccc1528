/* test_degraded.c -- a department's outage does not stop the
 * recommendations, end to end.
 *
 * The AP tests' federation (fed_proc.h: o3m-pmg, o3m-active and two
 * o3m-passive on loopback with mutual TLS, secure aggregation, the default
 * fallback = local). The test runs rounds with rewards, kills pp2 with
 * SIGKILL in the middle of the run, keeps asking for a while, restarts it
 * and keeps asking until the rounds are federated again, and checks:
 *  - no Recommend fails, before, during or after the outage;
 *  - every answer during the outage is degraded and names pp2, and is
 *    exactly the decision of an in-process LinUCB on the AP's own columns
 *    x^0 fed the same rewards (the local model learns every reward);
 *  - after the first degraded answer the degraded rounds cost what a local
 *    decision costs (the circuit breaker: nobody waits for pp2);
 *  - federated answers resume within a few seconds of pp2's ready file;
 *  - the rewards landed on the right models: ActiveStats.updates counts
 *    the federated decisions' rewards only, local_updates every reward, and
 *    degraded_rounds the degraded answers.
 * On the code before the fallback every round of the outage failed with
 * UNAVAILABLE naming pp2, which the first check refuses.
 *
 * The circuit breaker: a frozen pp2 (SIGSTOP) costs the first round a
 * deadline, and then no round waits for it: the later degraded rounds are
 * answered at local speed, and the probe finds pp2 back once it is
 * thawed. Without the breaker each of those rounds waited for the whole
 * deadline. */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "ap_client.h"
#include "fed_proc.h"
#include "o3m_policy.h"
#include "o3m_rng.h"

#define D0 3 /* the AP's own columns in fed_proc's federation */
#define OUTAGE_ROUNDS 60

static fed_net fed;
static ap_client *cli;

/* The run's bookkeeping: the in-process local model, the tables, the
 * counts of what the AP should have done. */
typedef struct run {
  fed_tables t;
  o3m_policy *local;
  o3m_rng *rng;
  uint64_t rounds, federated_rewards, rewards, degraded;
} run;

/* Creates the in-process local model (LinUCB on x^0, as the config's) and
 * the draws of a run. */
static void run_init(run *r, unsigned seed) {
  memset(r, 0, sizeof *r);
  fed_tables_load(&r->t);
  o3m_policy_config pc;
  o3m_policy_config_default(&pc);
  pc.algo = O3M_ALGO_LINUCB;
  pc.model = O3M_MODEL_SHARED;
  pc.d = D0;
  pc.max_candidates = FED_K_MAX;
  pc.alpha = 1.0;
  pc.lambda = 1.0;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert(eq(int, o3m_policy_create(&r->local, &pc, &e), 0), "%s", o3m_err_message(&e));
  cr_assert(eq(int, o3m_rng_create_seeded_insecure(&r->rng, seed), 0));
}

/* Checks that every reward landed on the right model(s) (see above) and
 * frees the run. */
static void run_finish(run *r) {
  ap_stats st;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert(eq(int, ap_client_stats(cli, &st, &e), 0), "%s", o3m_err_message(&e));
  cr_assert(eq(u64, st.rounds, r->rounds));
  cr_assert(eq(u64, st.updates, r->federated_rewards));
  cr_assert(eq(u64, st.local_updates, r->rewards));
  cr_assert(eq(u64, st.degraded_rounds, r->degraded));
  cr_assert(eq(u32, st.pending, 0));
  o3m_rng_destroy(r->rng);
  o3m_policy_destroy(r->local);
  fed_tables_free(&r->t);
}

static void ap_client_connect(void);

/* The AP's metrics port (--metrics-listen), which the test's client
 * certificate may read (metrics_clients). */
static int metrics_port;

/* The AP's options, kept for a restart: its metrics port and, with a
 * state_dir (the durability test), a checkpoint every 25 rewards, so that
 * its local model is restored from a checkpoint and the journal after it. */
static const char *ap_args[8];

/* The federation; state: every party with a state_dir. */
static void fed_up_with(int state) {
  fed_setup s = {.table_seed = 500, .pp1_users = FED_USERS, .deadline_ms = 1000,
                 .policy = "algo = linucb\nmodel = shared\nalpha = 1.0\nlambda = 1\n",
                 .pending_capacity = 1000, .state_dirs = state,
                 .federation_extra = "metrics_clients = " FED_CLIENT "\n"};
  fed_net_prepare(&fed, &s);
  static const char *const pmg_args[] = {"--keep-mask", NULL};
  fed_net_start(&fed, FED_PMG, pmg_args);
  fed_wait_ready(&fed.proc[FED_PMG], 20000);
  static char listen[32];
  metrics_port = fed_free_port();
  snprintf(listen, sizeof listen, "127.0.0.1:%d", metrics_port);
  int n = 0;
  ap_args[n++] = "--pmg-timeout-s";
  ap_args[n++] = "20";
  ap_args[n++] = "--metrics-listen";
  ap_args[n++] = listen;
  if (state) {
    ap_args[n++] = "--checkpoint-every";
    ap_args[n++] = "25";
  }
  ap_args[n] = NULL;
  fed_net_start(&fed, FED_PP1, NULL);
  fed_net_start(&fed, FED_PP2, NULL);
  fed_net_start(&fed, FED_AP, ap_args);
  for (int p = FED_PP1; p <= FED_PP2; p++) fed_wait_ready(&fed.proc[p], 20000);
  fed_wait_ready(&fed.proc[FED_AP], 20000);
  ap_client_connect();
}

/* The test's client of the AP (cli). */
static void ap_client_connect(void) {
  ap_client_options o;
  ap_client_options_default(&o);
  char target[64];
  snprintf(target, sizeof target, "127.0.0.1:%d", fed.port[FED_AP]);
  o.target = target;
  o.server_name = "ap";
  o.ca_file = fed_path("certs/ca.pem");
  o.cert_file = fed_path("certs/client.pem");
  o.key_file = fed_path("certs/client.key");
  o.deadline_ms = 5000;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert(eq(int, ap_client_create(&cli, &o, &e), 0), "%s", o3m_err_message(&e));
}

static void fed_down(void) {
  ap_client_destroy(cli);
  cli = NULL;
  for (int p = FED_N_PARTIES - 1; p >= 0; p--) fed_stop(&fed.proc[p], SIGTERM, 5000);
  fed_cleanup();
}

static void fed_up(void) { fed_up_with(0); }

TestSuite(degraded, .init = fed_up, .fini = fed_down);

static void fed_up_state(void) { fed_up_with(1); }

TestSuite(degraded_state, .init = fed_up_state, .fini = fed_down);

/* One round with its reward: asserts that it is answered OK; with
 * expect_degraded 1 that it is degraded, names pp2 and equals the
 * in-process local model's decision. Returns whether it was degraded. */
static int round_once(run *r, int expect_degraded, double *seconds) {
  fed_round q;
  fed_draw_round(r->rng, FED_USERS, &q);
  double X[FED_K_MAX * FED_D], X0[FED_K_MAX * D0];
  cr_assert(eq(int, fed_contexts(&r->t, q.user, q.K, q.items, X), 0));
  for (int k = 0; k < q.K; k++) memcpy(X0 + k * D0, X + k * FED_D, sizeof(double) * D0);
  int want;
  cr_assert(eq(int, o3m_policy_choose(r->local, q.K, X0, NULL, &want, NULL), 0));

  ap_recommendation rec;
  o3m_err e;
  o3m_err_clear(&e);
  double t0 = fed_now_s();
  int rc = ap_client_recommend(cli, q.user, q.K, q.items, NULL, NULL, 0, &rec, &e);
  if (seconds) *seconds = fed_now_s() - t0;
  cr_assert(eq(int, rc, 0), "round %llu: %s: %s", (unsigned long long)r->rounds,
            o3m_errname(rc), o3m_err_message(&e));
  r->rounds++;
  if (expect_degraded == 1) {
    cr_assert(rec.degraded, "round %llu during the outage was not degraded",
              (unsigned long long)r->rounds);
  }
  if (rec.degraded) {
    cr_assert(eq(sz, rec.n_missing, 1));
    cr_assert(eq(str, (char *)rec.missing[0], "pp2"));
    cr_assert(eq(int, rec.candidate, want), "degraded round %llu: the local model chose %d, "
              "the in-process one %d", (unsigned long long)r->rounds, rec.candidate, want);
    r->degraded++;
  } else {
    r->federated_rewards++;
  }
  double reward = fed_click_reward(X + rec.candidate * FED_D);
  uint64_t updates;
  o3m_err_clear(&e);
  cr_assert(eq(int, ap_client_reward(cli, rec.decision, reward, &updates, &e), 0), "%s",
            o3m_err_message(&e));
  cr_assert(eq(u64, updates, r->federated_rewards), "the federated model learned a degraded "
            "decision's reward");
  r->rewards++;
  cr_assert(eq(int, o3m_policy_update(r->local, 0, X0 + rec.candidate * D0, reward), 0));
  return rec.degraded;
}

/* Runs rounds (each answered OK) until one is federated again: the seconds
 * that took, or -1 if none was within 10 s. */
static double until_federated(run *r) {
  double t0 = fed_now_s();
  while (fed_now_s() - t0 < 10) {
    if (!round_once(r, 0, NULL)) return fed_now_s() - t0;
    fed_sleep_ms(20);
  }
  return -1;
}

Test(degraded, killed_passive_degrades_to_the_local_model_and_recovers) {
  run r;
  run_init(&r, 24);

  /* Federated rounds; the local model learns them too. */
  for (int i = 0; i < 30; i++)
    cr_assert(not(round_once(&r, 0, NULL)), "round %d degraded with every party up", i);

  /* pp2 killed: every round is answered, degraded, naming pp2. */
  fed_stop(&fed.proc[FED_PP2], SIGKILL, 5000);
  double worst = 0, first;
  round_once(&r, 1, &first);
  for (int i = 1; i < OUTAGE_ROUNDS; i++) {
    double dt;
    round_once(&r, 1, &dt);
    if (dt > worst) worst = dt;
  }
  /* The breaker: no round after the first waits for pp2 (the deadline is
   * 1 s; a local decision takes a few ms, more under sanitizers). */
  cr_assert(lt(dbl, worst, FED_ASAN ? 0.5 : 0.2), "a degraded round took %.3f s", worst);

  /* pp2 back: federated rounds resume soon after its ready file. */
  fed_net_start(&fed, FED_PP2, NULL);
  fed_wait_ready(&fed.proc[FED_PP2], 20000);
  double back = until_federated(&r);
  cr_assert(ge(dbl, back, 0), "no federated round within 10 s of pp2's ready file");
  cr_assert(lt(dbl, back, 3.0), "federated rounds came back %.3f s after pp2's ready file", back);
  for (int i = 0; i < 20; i++)
    cr_assert(not(round_once(&r, 0, NULL)), "round %d after the recovery degraded", i);
  cr_log_info("outage: first degraded round %.3f s, worst after it %.3f s; federated again "
              "%.3f s after the ready file", first, worst, back);
  run_finish(&r);
}

Test(degraded, frozen_passive_costs_one_deadline_then_local_decisions) {
  run r;
  run_init(&r, 25);
  for (int i = 0; i < 10; i++)
    cr_assert(not(round_once(&r, 0, NULL)), "round %d degraded with every party up", i);
  cr_assert(eq(int, kill(fed.proc[FED_PP2].pid, SIGSTOP), 0));
  double first, worst = 0;
  round_once(&r, 1, &first);
  for (int i = 1; i < 10; i++) {
    double dt;
    round_once(&r, 1, &dt);
    if (dt > worst) worst = dt;
  }
  /* The deadline is 1 s: only the first round waited for it. */
  cr_assert(lt(dbl, worst, FED_ASAN ? 0.5 : 0.2), "a degraded round after the first took "
            "%.3f s: the AP still waits for the frozen party", worst);
  cr_assert(eq(int, kill(fed.proc[FED_PP2].pid, SIGCONT), 0));
  double back = until_federated(&r);
  cr_assert(ge(dbl, back, 0), "no federated round within 10 s of pp2's thaw");
  cr_log_info("frozen: first degraded round %.3f s, worst after it %.3f s; federated again "
              "%.3f s after the thaw", first, worst, back);
  run_finish(&r);
}

/* Waits until the restarted AP answers Stats (the client reconnects). */
static void until_ap_answers(ap_stats *st) {
  o3m_err e;
  for (int i = 0; i < 100; i++) {
    o3m_err_clear(&e);
    if (ap_client_stats(cli, st, &e) == 0) return;
    fed_sleep_ms(100);
  }
  cr_assert(0, "the restarted AP does not answer Stats: %s", o3m_err_message(&e));
}

/* The local model is durable: after federated
 * rounds (whose rewards both models learn), an outage (whose rewards only
 * the local model learns) and federated rounds again, the AP is killed
 * with SIGKILL and restarted from its state_dir; its local model must
 * then be the uncrashed in-process one: ActiveStats.local_updates counts
 * every acknowledged reward, and in a second outage each degraded decision
 * is exactly the in-process model's. On the code before, the restarted AP
 * had a fresh local model (local_updates 0, and other decisions). */
/* pp2 killed for n rounds (each degraded and checked), then back until
 * the rounds are federated again. */
static void outage(run *r, int n) {
  fed_stop(&fed.proc[FED_PP2], SIGKILL, 5000);
  for (int i = 0; i < n; i++) round_once(r, 1, NULL);
  fed_net_start(&fed, FED_PP2, NULL);
  fed_wait_ready(&fed.proc[FED_PP2], 20000);
  cr_assert(ge(dbl, until_federated(r), 0), "no federated round within 10 s of pp2's return");
}

Test(degraded_state, local_model_survives_a_kill9_of_the_ap) {
  run r;
  run_init(&r, 26);
  for (int i = 0; i < 20; i++)
    cr_assert(not(round_once(&r, 0, NULL)), "round %d degraded with every party up", i);
  outage(&r, 30);
  for (int i = 0; i < 12; i++)
    cr_assert(not(round_once(&r, 0, NULL)), "round %d after the recovery degraded", i);

  /* kill -9 and restart the AP: every reward above was acknowledged. */
  cr_assert(eq(int, fed_stop(&fed.proc[FED_AP], SIGKILL, 5000), 128 + SIGKILL));
  fed_net_start(&fed, FED_AP, ap_args);
  fed_wait_ready(&fed.proc[FED_AP], 20000);
  ap_stats st;
  until_ap_answers(&st);
  cr_assert(eq(u64, st.updates, r.federated_rewards), "the federated model after the restart");
  cr_assert(eq(u64, st.local_updates, r.rewards), "the local model after the restart has %llu "
            "of the %llu acknowledged rewards", (unsigned long long)st.local_updates,
            (unsigned long long)r.rewards);
  /* The restarted AP's counters start from zero. */
  r.rounds = r.degraded = 0;

  /* A second outage: every decision is the uncrashed local model's. */
  outage(&r, 30);
  run_finish(&r);
}

/* The AP's o3m_ap_degraded_rounds_total series (scraped over HTTPS with
 * the test client's certificate): the sum for party, and that for party
 * and reason (NULL: every reason). */
static double degraded_metric(const char *party, const char *reason) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "curl -sf --cacert '%s' --cert '%s' --key '%s' "
           "https://127.0.0.1:%d/metrics", fed_path("certs/ca.pem"),
           fed_path("certs/" FED_CLIENT ".pem"), fed_path("certs/" FED_CLIENT ".key"),
           metrics_port);
  FILE *f = popen(cmd, "r");
  cr_assert_not_null(f);
  char line[1024], want_party[96], want_reason[96];
  snprintf(want_party, sizeof want_party, "party=\"%s\"", party);
  snprintf(want_reason, sizeof want_reason, "reason=\"%s\"", reason ? reason : "");
  double sum = 0;
  int lines = 0;
  while (fgets(line, sizeof line, f)) {
    lines++;
    if (strncmp(line, "o3m_ap_degraded_rounds_total{", 29) || !strstr(line, want_party) ||
        (reason && !strstr(line, want_reason)))
      continue;
    const char *v = strrchr(line, ' ');
    cr_assert_not_null(v, "%s", line);
    sum += strtod(v + 1, NULL);
  }
  cr_assert(eq(int, pclose(f), 0), "curl of the AP's /metrics failed");
  cr_assert(gt(int, lines, 0), "the AP's /metrics is empty");
  return sum;
}

/* The degraded rounds are counted per missing party and reason
 * (ap_fallback.h): none before the outage; during it every degraded round
 * once for pp2, the first with the failure's code (UNAVAILABLE: nothing
 * listens on pp2's port) and the ones after it with BREAKER (the circuit
 * breaker is open), none for pp1; and they stop moving once pp2 is back. */
Test(degraded, degraded_rounds_are_counted_per_party_and_reason) {
  run r;
  run_init(&r, 27);
  for (int i = 0; i < 5; i++) cr_assert(not(round_once(&r, 0, NULL)));
  cr_assert(eq(dbl, degraded_metric("pp2", NULL), 0));
  fed_stop(&fed.proc[FED_PP2], SIGKILL, 5000);
  const int n = 8;
  for (int i = 0; i < n; i++) round_once(&r, 1, NULL);
  double all = degraded_metric("pp2", NULL), breaker = degraded_metric("pp2", "BREAKER");
  double unavailable = degraded_metric("pp2", "UNAVAILABLE");
  cr_assert(eq(dbl, all, n), "pp2's degraded rounds: %g counted, %d made", all, n);
  cr_assert(ge(dbl, unavailable, 1), "no round counted the failure's reason UNAVAILABLE");
  cr_assert(ge(dbl, breaker, n - 2), "only %g rounds counted BREAKER", breaker);
  cr_assert(eq(dbl, unavailable + breaker, n), "other reasons counted: %g of %d", all - breaker -
            unavailable, n);
  cr_assert(eq(dbl, degraded_metric("pp1", NULL), 0), "pp1 was never missing");
  fed_net_start(&fed, FED_PP2, NULL);
  fed_wait_ready(&fed.proc[FED_PP2], 20000);
  cr_assert(ge(dbl, until_federated(&r), 0));
  double after = degraded_metric("pp2", NULL);
  for (int i = 0; i < 5; i++) cr_assert(not(round_once(&r, 0, NULL)));
  cr_assert(eq(dbl, degraded_metric("pp2", NULL), after), "federated rounds moved the counter");
  cr_assert(eq(u64, (uint64_t)after, r.degraded));
  run_finish(&r);
}
