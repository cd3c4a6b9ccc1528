/* eval_cmds.h -- the subcommands of o3m-eval.
 *
 * Each subcommand is a function with main()'s signature, argv[0] being the
 * subcommand's name; it returns a process exit status (0 success, 1 runtime
 * failure, 2 usage error). main.c dispatches on the table in main.c. */
#ifndef EVAL_CMDS_H
#define EVAL_CMDS_H

int eval_simulate_main(int argc, char **argv);
int eval_gen_synthetic_main(int argc, char **argv);
int eval_gen_federation_main(int argc, char **argv);
int eval_federate_main(int argc, char **argv);
int eval_regret_main(int argc, char **argv);
int eval_cost_main(int argc, char **argv);
int eval_baselines_main(int argc, char **argv);
int eval_replay_main(int argc, char **argv);
int eval_ope_main(int argc, char **argv);
int eval_gen_criteo_main(int argc, char **argv);
int eval_audit_main(int argc, char **argv);
int eval_hannun_main(int argc, char **argv);
int eval_p2b_main(int argc, char **argv);
int eval_samba_main(int argc, char **argv);

#endif
