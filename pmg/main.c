/* main.c -- o3m-pmg, the privacy mask generator daemon.
 *
 *   o3m-pmg --config FILE --party NAME [--insecure] [--mask-seed-insecure S]
 *           [--ready-file PATH] [--keep-mask]
 *
 * Reads the federation config, draws the mask (pmg_service), serves it on
 * the party's address with mutual TLS (the party's cert and key, the
 * federation CA) until SIGTERM or SIGINT, then exits 0. --ready-file PATH is
 * written once the server listens, atomically (a temporary file renamed),
 * and holds the bound port and a newline; it is removed at exit. Startup
 * failures print one message naming the config file and key and exit 1. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "o3m_config.h"
#include "o3m_daemon.h"
#include "o3m_log.h"
#include "o3m_rpc.h"
#include "pmg_service.h"

#define PROG "o3m-pmg"
/* Largest request read (see the server config below). */
#define PMG_MAX_REQUEST 4096

/* What the signal handler touches; the daemon's only globals, because a
 * signal handler has no context argument. */
static o3m_rpc_server *volatile g_server;
static volatile sig_atomic_t g_stop;

static void on_signal(int sig) {
  (void)sig;
  g_stop = 1;
  o3m_rpc_server *s = g_server;
  if (s) o3m_rpc_server_shutdown(s); /* sets an atomic flag: signal-safe */
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: " PROG " --config FILE --party NAME [--insecure] [--mask-seed-insecure S]\n"
          "               [--ready-file PATH] [--keep-mask]\n"
          "  --config FILE            the federation config\n"
          "  --party NAME             this daemon's [party NAME] section (role = pmg)\n"
          "  --insecure               plaintext gRPC, no client identities (trials only)\n"
          "  --mask-seed-insecure S   draw Q from a seeded generator (tests only, never real data)\n"
          "  --ready-file PATH        write the bound port to PATH once serving\n"
          "  --keep-mask              do not forget Q after every party confirmed its block\n");
}

/* Prints "o3m-pmg: message" and returns the startup-failure exit code. */
__attribute__((format(printf, 1, 2))) static int fail(const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fprintf(stderr, PROG ": %s\n", msg);
  return 1;
}

int main(int argc, char **argv) {
  const char *config_path = NULL, *party_name = NULL, *ready_file = NULL;
  pmg_options opt = {0};
  static const struct option longopts[] = {
      {"config", required_argument, NULL, 'c'},
      {"party", required_argument, NULL, 'p'},
      {"insecure", no_argument, NULL, 'i'},
      {"mask-seed-insecure", required_argument, NULL, 's'},
      {"ready-file", required_argument, NULL, 'r'},
      {"keep-mask", no_argument, NULL, 'k'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  int ch;
  while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
    switch (ch) {
    case 'c': config_path = optarg; break;
    case 'p': party_name = optarg; break;
    case 'i': opt.insecure = 1; break;
    case 'r': ready_file = optarg; break;
    case 'k': opt.keep_mask = 1; break;
    case 's': {
      char *end;
      errno = 0;
      unsigned long long v = strtoull(optarg, &end, 0);
      if (errno || end == optarg || *end || optarg[0] == '-')
        return fail("--mask-seed-insecure: '%s' is not an unsigned 64-bit integer", optarg);
      opt.seeded = 1;
      opt.seed = (uint64_t)v;
      break;
    }
    case 'h': usage(stdout); return 0;
    default: usage(stderr); return 1;
    }
  }
  if (optind < argc) return fail("unexpected argument '%s'", argv[optind]);
  if (!config_path || !party_name) {
    usage(stderr);
    return fail("--config and --party are required");
  }

  o3m_daemon_log_init(PROG, party_name);
  o3m_daemon_memory_init();
  /* Signals first, so that a stop at any point of start-up is clean. */
  o3m_daemon_catch_stop_signals(on_signal, 1);

  o3m_err err;
  o3m_err_clear(&err);
  /* Before any key is read or Q is drawn: no core file, no ptrace. */
  if (o3m_daemon_protect_memory(&err) < 0)
    return fail("refusing to start: %s", o3m_err_message(&err));
  o3m_config *cfg;
  const o3m_party *me;
  if (o3m_daemon_load_party(&cfg, &me, config_path, party_name, O3M_ROLE_PMG, PROG, opt.insecure,
                            &err) < 0)
    return fail("%s", o3m_err_message(&err));
  int code = 1;
  pmg_service *svc = NULL;
  o3m_access *acc = NULL;
  o3m_rpc_server *srv = NULL;
  char section[96];
  snprintf(section, sizeof section, "[party %s]", party_name);

  if (opt.seeded)
    o3m_log_warn("INSECURE: the mask is drawn from a seeded generator (--mask-seed-insecure); "
                 "anyone who knows the seed knows Q. Never mask real data this way.");
  if (opt.insecure)
    o3m_log_warn("INSECURE: plaintext gRPC (--insecure); callers have no identity, so any "
                 "caller may fetch any party's block by its index.");
  int created = pmg_service_create(&svc, cfg, &opt, &err);
  /* A seed regenerates Q: keep it no longer than the draw. */
  explicit_bzero(&opt.seed, sizeof opt.seed);
  if (created < 0) {
    fail("%s", o3m_err_message(&err));
    goto out;
  }

  o3m_rpc_server_config sc;
  o3m_rpc_server_config_default(&sc);
  sc.listen = me->address;
  sc.insecure = opt.insecure;
  if (!opt.insecure) sc.tls = o3m_rpc_tls_of_party(cfg, me);
  /* Its requests (Info, GetBlock, ConfirmBlock) are a few dozen bytes:
   * anything much larger is refused unread. */
  sc.max_receive_bytes = PMG_MAX_REQUEST;
  sc.idle_close_ms = O3M_RPC_DAEMON_IDLE_CLOSE_MS;
  int n_methods, n_rules;
  const o3m_rpc_method *methods = pmg_service_methods(&n_methods);
  const o3m_access_rule *rules = pmg_service_access(&n_rules);
  if (o3m_access_create(&acc, cfg, me->name, rules, n_rules, methods, n_methods, &err) < 0) {
    fail("%s", o3m_err_message(&err));
    goto out;
  }
  o3m_access_install(acc, &sc);
  if (o3m_rpc_server_create(&srv, &sc, methods, n_methods, svc, &err) < 0) {
    /* "listen ADDRESS: CAUSE" (O3M_EIO) or a TLS file's problem (O3M_ETLS);
     * either names what to fix. */
    fail("%s: %s: %s", o3m_config_name(cfg), section, o3m_err_message(&err));
    goto out;
  }

  g_server = srv;
  if (g_stop) o3m_rpc_server_shutdown(srv); /* a signal before g_server was set */

  pmg_stats st;
  pmg_service_stats(svc, &st);
  int port = o3m_rpc_server_port(srv);
  o3m_log_info("serving %s (port %d) with %s: d = %d over %d parties, mask %016" PRIx64,
               me->address, port, opt.insecure ? "PLAINTEXT" : "mutual TLS",
               pmg_service_dim(svc), st.parties, pmg_service_mask_id(svc));
  o3m_err rerr;
  if (ready_file && o3m_daemon_write_ready_file(ready_file, port, &rerr) < 0) {
    fail("--ready-file: %s", o3m_err_message(&rerr));
    goto out;
  }
  o3m_rpc_server_run(srv);
  g_server = NULL;
  pmg_service_stats(svc, &st);
  o3m_log_info("stopped: %" PRIu64 " blocks served, %" PRIu64 " calls refused, %d of %d "
               "parties confirmed, Q %s",
               st.blocks_served, st.refused, st.confirmed, st.parties,
               st.forgotten ? "forgotten" : "wiped at exit");
  code = 0;

out:
  g_server = NULL;
  if (ready_file && code == 0) unlink(ready_file);
  o3m_rpc_server_destroy(srv);
  o3m_access_destroy(acc);
  pmg_service_destroy(svc);
  o3m_config_destroy(cfg);
  return code;
}
