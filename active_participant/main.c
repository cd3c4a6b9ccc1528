/* main.c -- o3m-active, the active participant daemon.
 *
 *   o3m-active --config FILE --party NAME [--insecure] [--ready-file PATH]
 *              [--pmg-timeout-s 60] [--salvage] [--discard-state]
 *              [--checkpoint-every N] [--checkpoint-ms MS]
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
 * 0. Exit 1 when start-up fails or the service stopped itself (after a disk
 * error, or because its model was found damaged: the last line says which),
 * 2 for a usage error.
 *
 * Durability flags (they matter only with a state_dir in the party's
 * section): --salvage recovers a journal that is damaged or lost records
 * up to the damage and sets the rest aside (ap_journal.h); --discard-state moves the
 * saved model aside (into state_dir/discarded-<ms>/, nothing is deleted)
 * and starts a fresh one, the way out after the block changed;
 * --checkpoint-every and --checkpoint-ms set how often a checkpoint is
 * written (defaults 10000 rewards, 60000 ms). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ap_service.h"
#include "o3m_blas.h"
#include "o3m_config.h"
#include "o3m_daemon.h"
#include "o3m_log.h"

/* The one piece of process state: what the signal handler stops. */
static volatile sig_atomic_t g_stop;
static ap_service *volatile g_service;

static void on_signal(int sig) {
  (void)sig;
  g_stop = 1;
  ap_service *s = g_service;
  if (s) ap_service_shutdown(s);
}

static void usage(FILE *f) {
  fprintf(f, "usage: o3m-active --config FILE --party NAME [--insecure] [--ready-file PATH] "
             "[--pmg-timeout-s SECONDS]\n"
             "                  [--salvage] [--discard-state] [--checkpoint-every N] "
             "[--checkpoint-ms MS]\n");
}

int main(int argc, char **argv) {
  const char *config = NULL, *party = NULL, *ready = NULL;
  ap_service_options opt;
  ap_service_options_default(&opt);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int has_value = i + 1 < argc;
    if (!strcmp(a, "--config") && has_value) config = argv[++i];
    else if (!strcmp(a, "--party") && has_value) party = argv[++i];
    else if (!strcmp(a, "--ready-file") && has_value) ready = argv[++i];
    else if (!strcmp(a, "--insecure")) opt.insecure = 1;
    else if (!strcmp(a, "--pmg-timeout-s") && has_value) {
      char *end;
      long v = strtol(argv[++i], &end, 10);
      if (*end || v < 1 || v > 86400) {
        fprintf(stderr, "o3m-active: --pmg-timeout-s must be an integer in 1..86400\n");
        return 2;
      }
      opt.pmg_timeout_s = (int)v;
    } else if (!strcmp(a, "--salvage")) {
      opt.salvage = 1;
    } else if (!strcmp(a, "--discard-state")) {
      opt.discard_state = 1;
    } else if ((!strcmp(a, "--checkpoint-every") || !strcmp(a, "--checkpoint-ms")) && has_value) {
      char *end;
      errno = 0;
      long long v = strtoll(argv[++i], &end, 10);
      if (errno || end == argv[i] || *end || v < 1 || v > 1000000000LL) {
        fprintf(stderr, "o3m-active: %s must be an integer in 1..1000000000\n", a);
        return 2;
      }
      if (!strcmp(a, "--checkpoint-every")) opt.checkpoint_records = (uint64_t)v;
      else opt.checkpoint_ms = (int64_t)v;
    } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return 0;
    } else {
      fprintf(stderr, "o3m-active: unknown or incomplete argument '%s'\n", a);
      usage(stderr);
      return 2;
    }
  }
  if (!config || !party) {
    usage(stderr);
    return 2;
  }

  o3m_daemon_log_init("o3m-active", party);
  o3m_daemon_memory_init();
  o3m_blas_single_thread();

  o3m_daemon_catch_stop_signals(on_signal, 0);
  signal(SIGPIPE, SIG_IGN);

  o3m_err e;
  o3m_err_clear(&e);
  /* Before any key, table, block or model is read: no core file, no ptrace. */
  if (o3m_daemon_protect_memory(&e) < 0) {
    o3m_log_error("refusing to start: %s", o3m_err_message(&e));
    return 1;
  }
  o3m_config *cfg;
  const o3m_party *me;
  /* The config, the party's role and its TLS files (o3m_cert), checked the
   * way the other daemons check theirs, before any peer is contacted. */
  if (o3m_daemon_load_party(&cfg, &me, config, party, O3M_ROLE_ACTIVE, "o3m-active",
                            opt.insecure, &e) < 0) {
    o3m_log_error("%s", o3m_err_message(&e));
    return 1;
  }
  (void)me; /* ap_service_create looks the party up itself */
  opt.party = party;
  opt.stop = &g_stop;
  if (opt.insecure) o3m_log_warn("--insecure: every channel is PLAINTEXT and unauthenticated");
  ap_service *s;
  int rc = ap_service_create(&s, cfg, &opt, &e);
  o3m_config_destroy(cfg);
  if (rc < 0) {
    if (g_stop) {
      o3m_log_info("stopped during start-up");
      return 0;
    }
    o3m_log_error("start-up failed: %s: %s", o3m_errname(rc), o3m_err_message(&e));
    return 1;
  }
  g_service = s;
  if (g_stop) ap_service_shutdown(s); /* a signal came before g_service was set */
  if (ready && ap_service_write_ready_file(s, ready, &e) < 0) {
    o3m_log_error("ready file: %s", o3m_err_message(&e));
    return 1; /* the process ends; s is not freed under a running handler */
  }
  rc = ap_service_run(s);
  /* Keep the handler away from s while it is freed. */
  sigset_t block;
  sigemptyset(&block);
  sigaddset(&block, SIGTERM);
  sigaddset(&block, SIGINT);
  sigprocmask(SIG_BLOCK, &block, NULL);
  g_service = NULL;
  ap_service_destroy(s);
  if (ready) unlink(ready); /* not serving any more */
  if (rc == O3M_EIO) o3m_log_error("stopped after a disk error; restart to recover from state_dir");
  if (rc == O3M_ECORRUPT)
    o3m_log_error("stopped because the model in memory was damaged; restart to rebuild it from "
                  "state_dir");
  return rc < 0 ? 1 : 0;
}
