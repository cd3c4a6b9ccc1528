/* main.c -- o3m-passive, the passive participant daemon.
 *
 *   o3m-passive --config FILE --party NAME [--insecure] [--ready-file PATH]
 *               [--pmg-timeout-s N]
 *
 * Loads the party's feature tables, binds its address (so that a taken port
 * fails before the mask generator is involved), installs its mask block
 * (pp_service_fetch_block: with a state_dir in the party's section the
 * block and dummy-row key stored there, else fetched and confirmed from the
 * PMG, retrying for up to --pmg-timeout-s seconds, default 60, and then
 * stored in the state_dir if there is one), then serves the Passive service
 * with mutual TLS (the party's cert and key, the federation CA) until
 * SIGTERM or SIGINT, and exits 0. A request larger than the largest
 * MaskBatch the AP can send under the config is refused unread
 * (RESOURCE_EXHAUSTED); a table row that could form a part above the
 * party's max_norm fails the start naming file and line. --ready-file PATH is written once the
 * block is installed and the server is about to serve, atomically (a
 * temporary file renamed), holding the bound port and a newline; it is
 * removed at exit. Startup failures print one message naming the config
 * file and key (or the stored block file and how to recover) and exit 1; a
 * stop signal during start-up exits 0. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "o3m_config.h"
#include "o3m_daemon.h"
#include "o3m_log.h"
#include "o3m_rpc.h"
#include "o3m_features.h"
#include "pp_service.h"

#define PROG "o3m-passive"

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
          "usage: " PROG " --config FILE --party NAME [--insecure] [--ready-file PATH]\n"
          "                   [--pmg-timeout-s N]\n"
          "  --config FILE        the federation config\n"
          "  --party NAME         this daemon's [party NAME] section (role = passive)\n"
          "  --insecure           plaintext gRPC, no caller checks (trials only)\n"
          "  --ready-file PATH    write the bound port to PATH once the block is installed\n"
          "  --pmg-timeout-s N    give up fetching the block after N seconds (default %d)\n",
          PP_DEFAULT_PMG_TIMEOUT_S);
}

/* Prints "o3m-passive: message" and returns the startup-failure exit code. */
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
  pp_options opt = {0, PP_DEFAULT_PMG_TIMEOUT_S};
  static const struct option longopts[] = {
      {"config", required_argument, NULL, 'c'},
      {"party", required_argument, NULL, 'p'},
      {"insecure", no_argument, NULL, 'i'},
      {"ready-file", required_argument, NULL, 'r'},
      {"pmg-timeout-s", required_argument, NULL, 't'},
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
    case 't': {
      char *end;
      errno = 0;
      long v = strtol(optarg, &end, 10);
      if (errno || end == optarg || *end || v < 1 || v > 86400)
        return fail("--pmg-timeout-s: '%s' is not a number of seconds in 1..86400", optarg);
      opt.pmg_timeout_s = (int)v;
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
  /* Signals first, so that a stop during the block fetch is clean. */
  o3m_daemon_catch_stop_signals(on_signal, 1);

  o3m_err err;
  o3m_err_clear(&err);
  /* Before any key, table or block is read: no core file, no ptrace. */
  if (o3m_daemon_protect_memory(&err) < 0)
    return fail("refusing to start: %s", o3m_err_message(&err));
  o3m_config *cfg;
  const o3m_party *me;
  if (o3m_daemon_load_party(&cfg, &me, config_path, party_name, O3M_ROLE_PASSIVE, PROG,
                            opt.insecure, &err) < 0)
    return fail("%s", o3m_err_message(&err));
  int code = 1;
  pp_service *svc = NULL;
  o3m_access *acc = NULL;
  o3m_rpc_server *srv = NULL;
  char section[96];
  snprintf(section, sizeof section, "[party %s]", party_name);
  if (opt.insecure)
    o3m_log_warn("INSECURE: plaintext gRPC (--insecure); Mask answers any caller and the "
                 "block travels unencrypted.");
  if (pp_service_create(&svc, cfg, party_name, &opt, &err) < 0) {
    fail("%s", o3m_err_message(&err));
    goto out;
  }

  o3m_rpc_server_config sc;
  o3m_rpc_server_config_default(&sc);
  sc.listen = me->address;
  sc.insecure = opt.insecure;
  /* Requests beyond the largest MaskBatch the AP can send are refused
   * unread; replies may be as large as their answers. */
  const o3m_policy_params *pol = o3m_config_policy(cfg);
  sc.max_receive_bytes = o3m_wire_mask_batch_max_bytes(pol->max_candidates, o3m_config_d(cfg));
  sc.max_message_bytes = o3m_wire_mask_batch_reply_max_bytes(pol->max_candidates,
                                                              o3m_config_d(cfg));
  if (sc.max_receive_bytes > sc.max_message_bytes) sc.max_message_bytes = sc.max_receive_bytes;
  sc.idle_close_ms = O3M_RPC_DAEMON_IDLE_CLOSE_MS;
  if (!opt.insecure) sc.tls = o3m_rpc_tls_of_party(cfg, me);
  int n_methods, n_rules;
  const o3m_rpc_method *methods = pp_service_methods(&n_methods);
  const o3m_access_rule *rules = pp_service_access(&n_rules);
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

  if (pp_service_fetch_block(svc, &g_stop, &err) < 0) {
    if (g_stop) {
      o3m_log_info("stopped before the block was installed");
      code = 0;
    } else {
      fail("%s", o3m_err_message(&err));
    }
    goto out;
  }
  int port = o3m_rpc_server_port(srv);
  const o3m_features *ft = pp_service_features(svc);
  o3m_log_info("serving %s (port %d) with %s: party %d, d_j = %d (%d users x %d + %d items x %d "
               "columns) of d = %d, mask %016" PRIx64 ", up to %d candidates",
               me->address, port, opt.insecure ? "PLAINTEXT" : "mutual TLS",
               pp_service_party(svc), pp_service_party_dim(svc), o3m_features_n_users(ft),
               o3m_features_user_cols(ft), o3m_features_n_items(ft), o3m_features_item_cols(ft),
               pp_service_dim(svc), pp_service_mask_id(svc), pp_service_max_candidates(svc));
  o3m_err rerr;
  if (ready_file && o3m_daemon_write_ready_file(ready_file, port, &rerr) < 0) {
    fail("--ready-file: %s", o3m_err_message(&rerr));
    goto out;
  }
  o3m_rpc_server_run(srv);
  pp_service_stats st;
  pp_service_stats_get(svc, &st);
  o3m_log_info("stopped: %" PRIu64 " requests, %" PRIu64 " answered, %" PRIu64
               " unknown users, %" PRIu64 " unknown items of %" PRIu64 ", %" PRIu64 " errors",
               st.requests, st.lookups, st.unknown_users, st.unknown_items, st.item_lookups,
               st.errors);
  code = 0;
  if (ready_file) unlink(ready_file);

out:
  g_server = NULL;
  o3m_rpc_server_destroy(srv);
  o3m_access_destroy(acc);
  pp_service_destroy(svc);
  o3m_config_destroy(cfg);
  return code;
}
