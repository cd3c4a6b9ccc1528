/* main.c -- o3m-passive, the passive participant daemon.
 *
 *   o3m-passive --config FILE --party NAME [--insecure] [--ready-file PATH]
 *               [--pmg-timeout-s N] [--threads N] [--test-reply-delay-ms N]
 *               [--log-level L] [--log-format text|json] [--metrics-listen ADDR]
 *   o3m-passive --agg-keygen FILE
 *
 * --agg-keygen writes a new secure aggregation secret key to FILE (mode
 * 0600, never over an existing file) and prints the line to put in the
 * party's config section, "agg_public = <64 hex digits>" (o3m_secagg.h);
 * the party's agg_secret then names FILE. Exit 0, or 1 with a message.
 *
 * Loads the party's feature tables, binds its address (so that a taken port
 * fails before the mask generator is involved), installs its mask block
 * (o3m_party_block_obtain: with a state_dir in the party's section the
 * block and dummy-row key stored there, else fetched and confirmed from the
 * PMG, retrying for up to --pmg-timeout-s seconds, default 60, and then
 * stored in the state_dir if there is one), then serves the Passive service
 * with mutual TLS (the party's cert and key, the federation CA) until
 * SIGTERM or SIGINT, and exits 0. SIGHUP (or o3m-cli reload) reloads the
 * feature tables without a restart (o3m_tables.h). A request larger than the largest
 * MaskBatch the AP can send under the config is refused unread
 * (RESOURCE_EXHAUSTED); a table row that could form a part above the
 * party's max_norm fails the start naming file and line. --ready-file PATH is written once the
 * block is installed and the server is about to serve, atomically (a
 * temporary file renamed), holding the bound port and a newline; it is
 * removed at exit. Startup failures print one message naming the config
 * file and key (or the stored block file and how to recover) and exit 1; a
 * stop signal during start-up exits 0; usage errors exit 2. --threads N
 * (default: the party's threads key, else 1) serves on N threads
 * (proto/o3m_rpc.h, "Threads"). --test-reply-delay-ms N (tests only,
 * 0..2000) answers every MaskBatch N ms late, waiting without the server's
 * lock, so that the AP's pipelined batches can be observed. The command
 * line and the start-up steps are the ones every daemon shares
 * (o3m_daemon.h, o3m_cli.h). */

#include <stdio.h>
#include <string.h>

#include "o3m_cli.h"
#include "o3m_config.h"
#include "o3m_daemon.h"
#include "o3m_log.h"
#include "o3m_secagg.h"
#include "pp_service.h"

#define PROG "o3m-passive"

enum { OPT_PMG_TIMEOUT = O3M_DAEMON_N_OPTIONS, OPT_THREADS, OPT_LISTEN, OPT_TEST_DELAY };
static const o3m_cli_option options[] = {
    O3M_DAEMON_OPTIONS("passive"),
    {"pmg-timeout-s", "N", "give up fetching the block after N seconds (1..86400, default 60)"},
    {"threads", "N", "serve on N threads (1..16; default: the party's threads key, else 1)"},
    {"listen", "ADDR", "listen on ADDR instead of the party's listen address: another instance "
                       "of the party, listed in its instances key"},
    {"test-reply-delay-ms", "N", "tests only: answer every MaskBatch N ms late (0..2000), "
                                 "waiting without the server's lock"},
    {NULL, NULL, NULL},
};
static const o3m_cli_spec spec = {
    PROG, "--config FILE --party NAME [options]",
    "The passive participant daemon: masks its feature rows for the active party.", options,
    "exit 0 also after a stop during start-up.\n"
    "o3m-passive --agg-keygen FILE writes a secure aggregation secret key to FILE (mode 0600)\n"
    "and prints the config line 'agg_public = HEX' for the party's section.\n"};

static int run_service(void *s) { return pp_service_run(s); }
static void stop_service(void *s) { pp_service_shutdown(s); }

static int take_option(void *ctx, int i, const char *v) {
  pp_options *opt = ctx;
  long long n;
  if (i == OPT_PMG_TIMEOUT) {
    if (o3m_cli_parse_long(v, 1, 86400, &n) < 0)
      return o3m_cli_usage_error(&spec, "--pmg-timeout-s: '%s' is not a number of seconds in "
                                 "1..86400", v);
    opt->pmg_timeout_s = (int)n;
  }
  if (i == OPT_LISTEN) opt->listen = v;
  if (i == OPT_TEST_DELAY) {
    if (o3m_cli_parse_long(v, 0, PP_MAX_TEST_DELAY_MS, &n) < 0)
      return o3m_cli_usage_error(&spec, "--test-reply-delay-ms: '%s' is not a number in 0..%d",
                                 v, PP_MAX_TEST_DELAY_MS);
    opt->test_reply_delay_ms = (int)n;
  }
  if (i == OPT_THREADS) {
    if (o3m_cli_parse_long(v, 1, O3M_CONFIG_MAX_THREADS, &n) < 0)
      return o3m_cli_usage_error(&spec, "--threads: '%s' is not a number in 1..%d", v,
                                 O3M_CONFIG_MAX_THREADS);
    opt->threads = (int)n;
  }
  return 0;
}

/* o3m-passive --agg-keygen FILE. */
static int agg_keygen(const char *path) {
  unsigned char pk[O3M_SECAGG_KEY_BYTES];
  char hex[2 * O3M_SECAGG_KEY_BYTES + 1];
  o3m_err e;
  o3m_err_clear(&e);
  if (o3m_secagg_keygen(path, pk, &e) < 0) return o3m_cli_fail(PROG, "%s", o3m_err_message(&e));
  o3m_secagg_hex(pk, hex);
  printf("agg_public = %s\n", hex);
  return O3M_CLI_EXIT_OK;
}

int main(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "--agg-keygen") == 0) {
    if (argc != 3)
      return o3m_cli_usage_error(&spec, "--agg-keygen FILE takes one file and no other option");
    return agg_keygen(argv[2]);
  }
  o3m_daemon_args a = {0};
  pp_options opt = {.pmg_timeout_s = PP_DEFAULT_PMG_TIMEOUT_S};
  int rc;
  if (!o3m_daemon_parse_args(&a, &spec, argc, argv, take_option, &opt, &rc)) return rc;
  opt.insecure = a.insecure;

  o3m_config *cfg;
  const o3m_party *me;
  rc = o3m_daemon_start(PROG, &a, O3M_ROLE_PASSIVE, 1, &cfg, &me);
  if (rc) return rc;
  if (opt.insecure)
    o3m_log_warn("INSECURE: plaintext gRPC (--insecure); Mask answers any caller and the "
                 "block travels unencrypted.");
  opt.stop = o3m_daemon_stop_flag();
  opt.metrics = o3m_daemon_metrics();
  opt.reload = o3m_daemon_catch_reload_signal();
  o3m_err e;
  o3m_err_clear(&e);
  pp_service *svc;
  rc = pp_service_create(&svc, cfg, a.party, &opt, &e);
  if (rc < 0) {
    o3m_config_destroy(cfg);
    if (*opt.stop) {
      o3m_log_info("stopped before the block was installed");
      return O3M_CLI_EXIT_OK;
    }
    return o3m_cli_fail(PROG, "%s", o3m_err_message(&e));
  }
  rc = o3m_daemon_serve(PROG, a.ready_file, svc, opt.listen, pp_service_port(svc), run_service,
                        stop_service, NULL);
  pp_service_destroy(svc);
  o3m_config_destroy(cfg);
  return rc;
}
