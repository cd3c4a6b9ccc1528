/* main.c -- o3m-active, the active participant daemon.
 *
 *   o3m-active --config FILE --party NAME [--insecure] [--ready-file PATH]
 *              [--pmg-timeout-s 60] [--salvage] [--discard-state]
 *              [--checkpoint-every N] [--checkpoint-ms MS] [--commit group|each]
 *              [--threads N]
 *              [--log-level L] [--log-format text|json] [--metrics-listen ADDR]
 *
 * Parses the arguments, loads the federation config and checks the party's
 * TLS files (o3m_daemon_load_party: unless --insecure, a key that is not the
 * certificate's, a certificate that is not valid now, does not chain to the
 * federation CA or is not issued to the party name stops the start), builds
 * the service
 * (ap_service.h: own tables, policy, block from state_dir or the mask
 * generator, the model recovered from state_dir, clients of the passive
 * participants, server), writes the ready file and serves until SIGTERM or
 * SIGINT, then writes a final checkpoint, removes the ready file and exits
 * 0. SIGHUP (or o3m-cli reload) reloads the own feature tables without a
 * restart (o3m_tables.h). Exit 1 when start-up fails or the service stopped itself (after a disk
 * error, or because its model was found damaged: the last line says which),
 * 2 for a usage error. The command line and the start-up steps are the
 * ones every daemon shares (o3m_daemon.h, o3m_cli.h); --help lists every
 * option, --version prints the release and protocol.
 *
 * Durability flags (they matter only with a state_dir in the party's
 * section): --salvage recovers a journal that is damaged or lost records
 * up to the damage and sets the rest aside (ap_journal.h); --discard-state moves the
 * saved model aside (into state_dir/discarded-<ms>/, nothing is deleted)
 * and starts a fresh one, the way out after the block changed or when
 * the model is gone while the block stayed;
 * --checkpoint-every and --checkpoint-ms set how often a checkpoint is
 * written (defaults 10000 rewards, 60000 ms); --commit each syncs every
 * reward on its own instead of group-committing them (ap_service.h, "A
 * reward"), for the side-by-side benchmark. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "ap_replica.h"
#include "ap_service.h"
#include "o3m_blas.h"
#include "o3m_cli.h"
#include "o3m_config.h"
#include "o3m_daemon.h"
#include "o3m_log.h"

#define PROG "o3m-active"

enum {
  OPT_PMG_TIMEOUT = O3M_DAEMON_N_OPTIONS,
  OPT_SALVAGE,
  OPT_DISCARD,
  OPT_CKPT_EVERY,
  OPT_CKPT_MS,
  OPT_COMMIT,
  OPT_THREADS,
  OPT_REPLICA,
  OPT_LISTEN
};
static const o3m_cli_option options[] = {
    O3M_DAEMON_OPTIONS("active"),
    {"pmg-timeout-s", "N", "give up on the mask generator, then the passive parties, after N s "
                           "each (1..86400, default 60)"},
    {"salvage", NULL, "recover a damaged journal up to the damage, set the rest aside"},
    {"discard-state", NULL, "move the saved model aside (state_dir/discarded-<ms>/), start fresh"},
    {"checkpoint-every", "N", "write a checkpoint every N rewards (1..1000000000, default 10000)"},
    {"checkpoint-ms", "MS", "write a checkpoint every MS ms (1..1000000000, default 60000)"},
    {"commit", "MODE", "group (default): one fdatasync for every reward that arrived while the "
                       "previous one ran; each: one per reward (for comparison)"},
    {"threads", "N", "serve on N threads (1..16; default: the party's threads key, else 1)"},
    {"replica", "NAME", "serve as replica NAME of the active party (needs [federation] "
                        "replication = nats; snapshots in state_dir/replica-NAME; mutual TLS "
                        "to NATS with the party's ca, cert and key unless nats_tls = off)"},
    {"listen", "ADDR", "listen on ADDR (host:port) instead of the party's listen address (a "
                       "second replica on the same host)"},
    {NULL, NULL, NULL},
};
static const o3m_cli_spec spec = {
    PROG, "--config FILE --party NAME [options]",
    "The active participant daemon: serves Recommend and Reward until SIGTERM or SIGINT.",
    options,
    "--salvage, --discard-state, the checkpoint options and --commit matter only with a\n"
    "state_dir.\n"
    "exit 0 also after a stop during start-up; 1 also when the service stopped itself\n"
    "(a disk error, a damaged model: the last log line says which).\n"};

static int run_service(void *s) { return ap_service_run(s); }
static void stop_service(void *s) { ap_service_shutdown(s); }

static int take_option(void *ctx, int i, const char *v) {
  ap_service_options *opt = ctx;
  long long n;
  switch (i) {
  case OPT_PMG_TIMEOUT:
    if (o3m_cli_parse_long(v, 1, 86400, &n) < 0)
      return o3m_cli_usage_error(&spec, "--pmg-timeout-s must be an integer in 1..86400");
    opt->pmg_timeout_s = (int)n;
    break;
  case OPT_SALVAGE: opt->salvage = 1; break;
  case OPT_THREADS:
    if (o3m_cli_parse_long(v, 1, O3M_CONFIG_MAX_THREADS, &n) < 0)
      return o3m_cli_usage_error(&spec, "--threads must be an integer in 1..%d",
                                 O3M_CONFIG_MAX_THREADS);
    opt->threads = (int)n;
    break;
  case OPT_COMMIT:
    if (strcmp(v, "group") && strcmp(v, "each"))
      return o3m_cli_usage_error(&spec, "--commit must be group or each, got '%s'", v);
    opt->commit_each = v[0] == 'e';
    break;
  case OPT_DISCARD: opt->discard_state = 1; break;
  case OPT_REPLICA:
    if (!*v || strlen(v) > 64 || strspn(v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                        "0123456789_-") != strlen(v))
      return o3m_cli_usage_error(&spec, "--replica must be 1..64 letters, digits, _ or -");
    opt->replica = v;
    break;
  case OPT_LISTEN: opt->listen = v; break;
  case OPT_CKPT_EVERY:
  case OPT_CKPT_MS:
    if (o3m_cli_parse_long(v, 1, 1000000000LL, &n) < 0)
      return o3m_cli_usage_error(&spec, "--%s must be an integer in 1..1000000000",
                                 options[i].name);
    if (i == OPT_CKPT_EVERY) opt->checkpoint_records = (uint64_t)n;
    else opt->checkpoint_ms = (int64_t)n;
    break;
  }
  return 0;
}

int main(int argc, char **argv) {
  o3m_daemon_args a = {0};
  ap_service_options opt;
  ap_service_options_default(&opt);
  int rc;
  if (!o3m_daemon_parse_args(&a, &spec, argc, argv, take_option, &opt, &rc)) return rc;

  o3m_config *cfg;
  const o3m_party *me;
  /* Without SA_RESTART: the service's waits notice a stop through EINTR. */
  rc = o3m_daemon_start(PROG, &a, O3M_ROLE_ACTIVE, 0, &cfg, &me);
  if (rc) return rc;
  o3m_blas_single_thread();
  signal(SIGPIPE, SIG_IGN);
  (void)me; /* ap_service_create looks the party up itself */
  opt.party = a.party;
  opt.insecure = a.insecure;
  opt.stop = o3m_daemon_stop_flag();
  opt.metrics = o3m_daemon_metrics();
  opt.reload = o3m_daemon_catch_reload_signal();
  if (opt.insecure) o3m_log_warn("--insecure: every channel is PLAINTEXT and unauthenticated");
  o3m_err e;
  o3m_err_clear(&e);
  ap_service *s;
  rc = ap_service_create(&s, cfg, &opt, &e);
  o3m_config_destroy(cfg);
  if (rc < 0) {
    ap_replica_library_close();
    if (*opt.stop) {
      o3m_log_info("stopped during start-up");
      return O3M_CLI_EXIT_OK;
    }
    return o3m_cli_fail(PROG, "start-up failed: %s: %s", o3m_errname(rc), o3m_err_message(&e));
  }
  int run_rc;
  rc = o3m_daemon_serve(PROG, a.ready_file, s, opt.listen, ap_service_port(s), run_service,
                        stop_service, &run_rc);
  ap_service_destroy(s);
  /* The NATS library of the replicas goes at process exit, not with the
   * service (ap_replica.h). */
  ap_replica_library_close();
  if (run_rc == O3M_EIO)
    o3m_log_error("stopped after a disk error; restart to recover from state_dir");
  if (run_rc == O3M_ECORRUPT)
    o3m_log_error("stopped because the model in memory was damaged; restart to rebuild it from "
                  "state_dir");
  if (run_rc == O3M_ENOTFOUND)
    o3m_log_error("stopped because the reward stream lost records this replica had applied (or "
                  "holds one it cannot read); it will not start again until the stream is "
                  "restored");
  return rc;
}
