/* main.c -- o3m-pmg, the privacy mask generator daemon.
 *
 *   o3m-pmg --config FILE --party NAME [--insecure] [--mask-seed-insecure S]
 *           [--ready-file PATH] [--keep-mask]
 *           [--log-level L] [--log-format text|json] [--metrics-listen ADDR]
 *
 * Reads the federation config, draws the mask and binds the server
 * (pmg_service), serves it on the party's listen address with mutual TLS (the
 * party's cert and key, the federation CA) until SIGTERM or SIGINT, then
 * exits 0. --ready-file PATH is written once the server listens,
 * atomically (a temporary file renamed), and holds the bound port and a
 * newline; it is removed at exit. Startup failures print one message
 * naming the config file and key and exit 1; usage errors exit 2. The
 * command line and the start-up steps are the ones every daemon shares
 * (o3m_daemon.h, o3m_cli.h). */
#include <stdint.h>
#include <string.h>

#include "o3m_cli.h"
#include "o3m_config.h"
#include "o3m_daemon.h"
#include "o3m_log.h"
#include "pmg_service.h"

#define PROG "o3m-pmg"

enum { OPT_SEED = O3M_DAEMON_N_OPTIONS, OPT_KEEP_MASK };
static const o3m_cli_option options[] = {
    O3M_DAEMON_OPTIONS("pmg"),
    {"mask-seed-insecure", "S", "draw Q from a seeded generator (tests only, never real data)"},
    {"keep-mask", NULL, "do not forget Q after every party confirmed its block"},
    {NULL, NULL, NULL},
};
static const o3m_cli_spec spec = {
    PROG, "--config FILE --party NAME [options]",
    "The privacy mask generator daemon: serves each column party its block of Q.", options,
    NULL};

static int run_service(void *s) { return pmg_service_run(s); }
static void stop_service(void *s) { pmg_service_shutdown(s); }

static int take_option(void *ctx, int i, const char *v) {
  pmg_options *opt = ctx;
  if (i == OPT_KEEP_MASK) opt->keep_mask = 1;
  if (i == OPT_SEED) {
    unsigned long long seed;
    if (o3m_cli_parse_u64(v, &seed) < 0)
      return o3m_cli_usage_error(&spec, "--mask-seed-insecure: '%s' is not an unsigned 64-bit "
                                 "integer", v);
    opt->seeded = 1;
    opt->seed = (uint64_t)seed;
  }
  return 0;
}

int main(int argc, char **argv) {
  o3m_daemon_args a = {0};
  pmg_options opt = {0};
  int rc;
  if (!o3m_daemon_parse_args(&a, &spec, argc, argv, take_option, &opt, &rc)) return rc;
  opt.insecure = a.insecure;

  o3m_config *cfg;
  const o3m_party *me;
  rc = o3m_daemon_start(PROG, &a, O3M_ROLE_PMG, 1, &cfg, &me);
  if (rc) {
    explicit_bzero(&opt.seed, sizeof opt.seed);
    return rc;
  }
  if (opt.seeded)
    o3m_log_warn("INSECURE: the mask is drawn from a seeded generator (--mask-seed-insecure); "
                 "anyone who knows the seed knows Q. Never mask real data this way.");
  if (opt.insecure)
    o3m_log_warn("INSECURE: plaintext gRPC (--insecure); callers have no identity, so any "
                 "caller may fetch any party's block by its index.");
  opt.metrics = o3m_daemon_metrics();
  o3m_err e;
  o3m_err_clear(&e);
  pmg_service *svc;
  rc = pmg_service_create(&svc, cfg, &opt, &e);
  /* A seed regenerates Q: keep it no longer than the draw. */
  explicit_bzero(&opt.seed, sizeof opt.seed);
  if (rc < 0) {
    o3m_config_destroy(cfg);
    return o3m_cli_fail(PROG, "%s", o3m_err_message(&e));
  }
  rc = o3m_daemon_serve(PROG, a.ready_file, svc, NULL, pmg_service_port(svc), run_service,
                        stop_service, NULL);
  pmg_service_destroy(svc);
  o3m_config_destroy(cfg);
  return rc;
}
