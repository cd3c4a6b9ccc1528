/* main.c -- o3m-eval: dispatches to one subcommand (see eval_cmds.h). */
#include <stdio.h>
#include <string.h>

#include "eval_cmds.h"

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
    {"replay", eval_replay_main, "replay logged data (news10k, OBD, Criteo): relative CTR"},
    {"gen-criteo", eval_gen_criteo_main, "write synthetic rows in the Kaggle Criteo format"},
};

static void usage(FILE *f) {
  fprintf(f, "usage: o3m-eval COMMAND [options]   (o3m-eval COMMAND --help)\n\ncommands:\n");
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    fprintf(f, "  %-14s %s\n", commands[i].name, commands[i].help);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
    usage(stdout);
    return 0;
  }
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
  fprintf(stderr, "o3m-eval: unknown command '%s'\n", argv[1]);
  usage(stderr);
  return 2;
}
