/* test_flapping.c -- a passive party whose replies name a new item epoch
 * every time, end to end.
 *
 * The AP tests' federation (fed_proc.h; mutual TLS, secure aggregation, the
 * default fallback = local) with flap_party (tests/flap_party.c) at pp1's
 * address: it forwards every Info and MaskBatch to the real pp1, which
 * listens elsewhere, and names a new item epoch in each MaskBatch reply.
 * Every round asks for the same eight items, so an honest party would be
 * asked for each of them once. The test checks:
 *  - every round is answered OK; all but the first are degraded, naming
 *    pp1, and counted with the reason EPOCH_FLAPPING in
 *    o3m_ap_degraded_rounds_total, and ActiveStats.degraded_rounds agrees;
 *  - pp1 was held out once (o3m_ap_pp_epoch_flapping_total{party="pp1"});
 *  - flap_party received each item at most twice (once per epoch it named
 *    while it was asked: the first batch, and the second batch asked again
 *    because the cached parts were stale) and at most three MaskBatch
 *    calls in all.
 * On the code before the epoch watch no round was degraded and the AP
 * dropped its cache and asked for all eight items again in every round. */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ap_client.h"
#include "fed_proc.h"

#define ROUNDS 30
#define K 8

static fed_net fed;
static fed_proc flap;
static ap_client *cli;
static int metrics_port;
static char counts[512];

static void fed_up(void) {
  fed_setup s = {.table_seed = 700, .pp1_users = FED_USERS, .deadline_ms = 2000,
                 .policy = "algo = linucb\nmodel = shared\nalpha = 1.0\nlambda = 1\n",
                 .pending_capacity = 1000,
                 .federation_extra = "metrics_clients = " FED_CLIENT "\n"};
  fed_net_prepare(&fed, &s);
  static const char *const pmg_args[] = {"--keep-mask", NULL};
  fed_net_start(&fed, FED_PMG, pmg_args);
  fed_wait_ready(&fed.proc[FED_PMG], 20000);
  /* The real pp1 listens on a port of its own; flap_party on pp1's. */
  static char real[32], front[32], metrics[32];
  snprintf(real, sizeof real, "127.0.0.1:%d", fed_free_port());
  snprintf(front, sizeof front, "127.0.0.1:%d", fed.port[FED_PP1]);
  const char *const pp1_args[] = {"--listen", real, NULL};
  fed_net_start(&fed, FED_PP1, pp1_args);
  fed_net_start(&fed, FED_PP2, NULL);
  for (int p = FED_PP1; p <= FED_PP2; p++) fed_wait_ready(&fed.proc[p], 20000);
  snprintf(counts, sizeof counts, "%s", fed_path("flap.counts"));
  const char *const flap_args[] = {"--config", fed.conf, "--party", "pp1", "--listen", front,
                                   "--upstream", real, "--counts", counts, NULL};
  fed_spawn(&flap, "flap", "flap_party", flap_args);
  fed_wait_ready(&flap, 20000);
  metrics_port = fed_free_port();
  snprintf(metrics, sizeof metrics, "127.0.0.1:%d", metrics_port);
  const char *const ap_args[] = {"--pmg-timeout-s", "20", "--metrics-listen", metrics, NULL};
  fed_net_start(&fed, FED_AP, ap_args);
  fed_wait_ready(&fed.proc[FED_AP], 20000);
  ap_client_options o;
  ap_client_options_default(&o);
  char target[64];
  snprintf(target, sizeof target, "127.0.0.1:%d", fed.port[FED_AP]);
  o.target = target;
  o.server_name = "ap";
  o.ca_file = fed_path("certs/ca.pem");
  o.cert_file = fed_path("certs/client.pem");
  o.key_file = fed_path("certs/client.key");
  o.deadline_ms = 10000;
  o.wait_for_ready = 1;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert(eq(int, ap_client_create(&cli, &o, &e), 0), "%s", o3m_err_message(&e));
}

static void fed_down(void) {
  ap_client_destroy(cli);
  cli = NULL;
  fed_stop(&flap, SIGTERM, 5000);
  for (int p = FED_N_PARTIES - 1; p >= 0; p--) fed_stop(&fed.proc[p], SIGTERM, 5000);
  fed_cleanup();
}

TestSuite(flapping, .init = fed_up, .fini = fed_down);

/* The sum of the AP's series name{...} whose labels hold every one of
 * want (NULL-terminated), scraped over HTTPS with the client's
 * certificate. */
static double metric(const char *name, const char *const *want) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "curl -sf --cacert '%s' --cert '%s' --key '%s' "
           "https://127.0.0.1:%d/metrics", fed_path("certs/ca.pem"),
           fed_path("certs/" FED_CLIENT ".pem"), fed_path("certs/" FED_CLIENT ".key"),
           metrics_port);
  FILE *f = popen(cmd, "r");
  cr_assert_not_null(f);
  char line[1024];
  double sum = 0;
  size_t n = strlen(name);
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, name, n) || line[n] != '{') continue;
    int all = 1;
    for (int k = 0; want[k]; k++) all &= strstr(line, want[k]) != NULL;
    const char *v = strrchr(line, ' ');
    if (all && v) sum += strtod(v + 1, NULL);
  }
  cr_assert(eq(int, pclose(f), 0), "curl of the AP's /metrics failed");
  return sum;
}

/* flap_party's count of key (its --counts file, written when it stops). */
static long long count_of(const char *key) {
  FILE *f = fopen(counts, "r");
  cr_assert_not_null(f, "flap_party wrote no counts:\n%s", fed_log_tail(&flap));
  char k[64];
  long long v, found = -1;
  while (fscanf(f, "%63s %lld", k, &v) == 2)
    if (strcmp(k, key) == 0) found = v;
  fclose(f);
  cr_assert(ge(int, (int)found, 0), "no %s in flap_party's counts", key);
  return found;
}

Test(flapping, a_party_naming_a_new_epoch_every_time_is_held_out_and_asked_once_per_epoch) {
  char names[K][8];
  const char *items[K];
  for (int k = 0; k < K; k++) {
    snprintf(names[k], sizeof names[k], "i%d", k);
    items[k] = names[k];
  }
  int degraded = 0, first_degraded = -1;
  for (int i = 0; i < ROUNDS; i++) {
    char user[16];
    snprintf(user, sizeof user, "u%d", i % FED_USERS);
    ap_recommendation rec;
    o3m_err e;
    o3m_err_clear(&e);
    int rc = ap_client_recommend(cli, user, K, items, NULL, NULL, 0, &rec, &e);
    cr_assert(eq(int, rc, 0), "round %d: %s: %s", i, o3m_errname(rc), o3m_err_message(&e));
    if (rec.degraded) {
      cr_assert(eq(sz, rec.n_missing, 1));
      cr_assert(eq(str, (char *)rec.missing[0], "pp1"));
      if (first_degraded < 0) first_degraded = i;
      degraded++;
    }
  }
  /* The first batch is federated (nothing to compare its epoch with);
   * the second, asked again because its cached parts were stale, got yet
   * another epoch: pp1 is held out from there on. */
  cr_assert(eq(int, degraded, ROUNDS - 1), "%d of %d rounds degraded (the first at round %d); "
            "want all but the first", degraded, ROUNDS, first_degraded);
  ap_stats st;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert(eq(int, ap_client_stats(cli, &st, &e), 0), "%s", o3m_err_message(&e));
  cr_assert(eq(u64, st.degraded_rounds, (uint64_t)degraded));
  const char *const flapping[] = {"party=\"pp1\"", "reason=\"EPOCH_FLAPPING\"", NULL};
  const char *const pp1[] = {"party=\"pp1\"", NULL}, *const pp2[] = {"party=\"pp2\"", NULL};
  double by_reason = metric("o3m_ap_degraded_rounds_total", flapping);
  cr_assert(eq(dbl, by_reason, degraded), "%g degraded rounds counted EPOCH_FLAPPING of %d",
            by_reason, degraded);
  cr_assert(eq(dbl, metric("o3m_ap_degraded_rounds_total", pp2), 0), "pp2 was never missing");
  double held = metric("o3m_ap_pp_epoch_flapping_total", pp1);
  cr_assert(eq(dbl, held, 1), "pp1 was held out %g times, want once", held);
  cr_assert(eq(dbl, metric("o3m_ap_pp_epoch_flapping_total", pp2), 0));
  /* What flap_party was asked. */
  cr_assert(eq(int, fed_stop(&flap, SIGTERM, 5000), 0), "%s", fed_log_tail(&flap));
  long long batches = count_of("batches"), max = count_of("max_per_item");
  long long epochs = count_of("epochs"), distinct = count_of("distinct");
  fprintf(stderr, "test_flapping: flap_party answered %lld batches, named %lld epochs, received "
          "%lld distinct items, each at most %lld times\n", batches, epochs, distinct, max);
  cr_assert(eq(int, (int)distinct, K));
  cr_assert(le(int, (int)max, 2), "flap_party received an item %lld times in %d rounds; want "
            "at most twice (once per epoch it named while asked)", max, ROUNDS);
  cr_assert(le(int, (int)batches, 3), "flap_party answered %lld MaskBatch calls; want at most 3",
            batches);
}

/* How it recovers: pp1 is held out for a minute (AP_EPOCHWATCH_WINDOW_MS),
 * asked nothing meanwhile, then let back in by its circuit breaker's
 * probe; since it goes on flapping, its first batch back (asked again for
 * its cached items, whose second replies name yet another epoch) holds it
 * out again at once. Every round stays answered, and flap_party is asked
 * two more MaskBatch calls, not one per round. Waits on the AP's counter
 * with a deadline. */
Test(flapping, a_held_party_is_let_back_after_a_minute_and_held_again_if_it_goes_on,
     .timeout = 170) {
  char names[K][8];
  const char *items[K];
  for (int k = 0; k < K; k++) {
    snprintf(names[k], sizeof names[k], "i%d", k);
    items[k] = names[k];
  }
  const char *const pp1[] = {"party=\"pp1\"", NULL};
  int rounds = 0, federated = 0;
  double t0 = fed_now_s(), held = 0, held_at = -1;
  while (held < 2 && fed_now_s() - t0 < 150) {
    char user[16];
    snprintf(user, sizeof user, "u%d", rounds % FED_USERS);
    ap_recommendation rec;
    o3m_err e;
    o3m_err_clear(&e);
    int rc = ap_client_recommend(cli, user, K, items, NULL, NULL, 0, &rec, &e);
    cr_assert(eq(int, rc, 0), "round %d: %s: %s", rounds, o3m_errname(rc), o3m_err_message(&e));
    rounds++;
    federated += !rec.degraded;
    held = metric("o3m_ap_pp_epoch_flapping_total", pp1);
    if (held >= 1 && held_at < 0) held_at = fed_now_s();
    fed_sleep_ms(200);
  }
  cr_assert(eq(dbl, held, 2), "pp1 held out %g times in %.0f s; want twice (again after the "
            "first minute)", held, fed_now_s() - t0);
  double again = fed_now_s() - held_at;
  cr_assert(ge(dbl, again, 55), "held out again %.1f s after the first time: before its minute "
            "was over", again);
  cr_assert(le(int, federated, 1), "%d of %d rounds federated", federated, rounds);
  cr_assert(eq(int, fed_stop(&flap, SIGTERM, 5000), 0), "%s", fed_log_tail(&flap));
  long long batches = count_of("batches"), max = count_of("max_per_item");
  fprintf(stderr, "test_flapping: %d rounds over %.0f s, pp1 held out twice; flap_party "
          "answered %lld batches, each item at most %lld times\n", rounds, fed_now_s() - t0,
          batches, max);
  cr_assert(le(int, (int)batches, 5), "flap_party answered %lld MaskBatch calls in %d rounds",
            batches, rounds);
  cr_assert(le(int, (int)max, 3), "flap_party received an item %lld times", max);
}
