/* main.c -- o3m-eval: dispatches to one subcommand (see eval_cmds.h).
 * `o3m-eval --threads N COMMAND ...` lets BLAS use N threads (1..256);
 * without it every command runs BLAS single-threaded (see main).
 * Every subcommand describes its options in its own o3m_cli_spec (o3m_cli.h,
 * prog "o3m-eval COMMAND"), so `o3m-eval COMMAND --help` lists them all and
 * `o3m-eval COMMAND --version` works; --version here prints the release and
 * protocol. Exit codes, the same everywhere: 0 ok, 1 runtime failure, 2
 * usage error. */
#include <stdio.h>
#include <string.h>

#include "eval_cmds.h"
#include "o3m_blas.h"
#include "o3m_cli.h"

#define PROG "o3m-eval"

/* The peer systems' commands, or where the build left them out
 * (-DO3M_BUILD_PEERS=OFF, for a machine without GMP) one that says so. */
#ifdef O3M_BUILD_PEERS
#define PEER(fn) fn
#else
static int peer_not_built(int argc, char **argv) {
  (void)argc;
  fprintf(stderr, PROG ": '%s' was not built: this build has no peer systems "
                  "(configure with -DO3M_BUILD_PEERS=ON, which needs GMP)\n", argv[0]);
  return O3M_CLI_EXIT_FAILURE;
}
#define PEER(fn) peer_not_built
#endif

static const struct {
  const char *name;
  int (*fn)(int, char **);
  const char *help;
} commands[] = {
    {"simulate", eval_simulate_main, "run a policy on a full-information stream file"},
    {"gen-synthetic", eval_gen_synthetic_main, "write the paper's synthetic stream file"},
    {"gen-federation", eval_gen_federation_main, "write a local trial federation (config, tables)"},
    {"federate", eval_federate_main, "drive a running federation; compare with central"},
    {"regret", eval_regret_main, "the paper's synthetic regret experiment (Fig. 4, 6)"},
    {"cost", eval_cost_main, "measured cost federated vs central (Fig. 5, app. C.3)"},
    {"baselines", PEER(eval_baselines_main), "O3M beside MPC, HE and DP on one round, measured"},
    {"replay", eval_replay_main, "replay logged data (news10k, OBD, Criteo): relative CTR"},
    {"ope", eval_ope_main, "off-policy estimates (IPW, SNIPW, DM, DR) of a frozen policy"},
    {"gen-criteo", eval_gen_criteo_main, "write synthetic rows in the Kaggle Criteo format"},
    {"audit", eval_audit_main, "alias of o3m-audit: what the AP could learn from your table"},
    {"hannun", PEER(eval_hannun_main),
     "Hannun et al.'s private MPC learner vs plaintext"},
    {"p2b", PEER(eval_p2b_main), "P2B: cold vs shuffled-warm vs central local agents"},
    {"samba", PEER(eval_samba_main), "Samba: secure vs plain federated K-armed bandits"},
};

static void usage(FILE *f) {
  fprintf(f, "usage: " PROG " [--threads N] COMMAND [options]   (" PROG
             " COMMAND --help lists its options)\n"
             "       " PROG " --help | --version\n\n"
             "--threads N lets BLAS use N threads (1..256, default 1: single-threaded)\n\n"
             "commands:\n");
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
#ifndef O3M_BUILD_PEERS
    if (commands[i].fn == peer_not_built) {
      fprintf(f, "  %-14s (not built: O3M_BUILD_PEERS=OFF) %s\n", commands[i].name,
              commands[i].help);
      continue;
    }
#endif
    fprintf(f, "  %-14s %s\n", commands[i].name, commands[i].help);
  }
  fprintf(f, "\nexit codes: %d ok, %d runtime failure, %d usage error\n", O3M_CLI_EXIT_OK,
          O3M_CLI_EXIT_FAILURE, O3M_CLI_EXIT_USAGE);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return O3M_CLI_EXIT_USAGE;
  }
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
    usage(stdout);
    return O3M_CLI_EXIT_OK;
  }
  if (!strcmp(argv[1], "--version")) {
    o3m_cli_version(PROG, stdout);
    return O3M_CLI_EXIT_OK;
  }
  /* BLAS single-threaded unless asked: the commands' matrices are small,
   * and OpenBLAS's own threads only spun in sched_yield around each call
   * (p2b took 10 times its CPU time in wall time on a loaded machine). One
   * place for every command, so that none can forget it. */
  long long threads = 1;
  if (!strcmp(argv[1], "--threads")) {
    if (argc < 3 || o3m_cli_parse_long(argv[2], 1, 256, &threads) < 0) {
      fprintf(stderr, PROG ": --threads takes a number of threads in 1..256, got '%s'\n",
              argc < 3 ? "" : argv[2]);
      return O3M_CLI_EXIT_USAGE;
    }
    argc -= 2;
    argv += 2;
    if (argc < 2) {
      usage(stderr);
      return O3M_CLI_EXIT_USAGE;
    }
  }
  o3m_blas_threads((int)threads);
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
  fprintf(stderr, PROG ": unknown %s '%s'\n", argv[1][0] == '-' ? "option" : "command", argv[1]);
  usage(stderr);
  return O3M_CLI_EXIT_USAGE;
}
