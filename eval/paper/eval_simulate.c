/* eval_simulate.c -- `o3m-eval simulate` and `o3m-eval gen-synthetic`.
 *
 * simulate runs one policy over a full-information stream file (see
 * eval_stream.h), either centrally on x or masked: the columns are split in
 * order across the parties of --parties, each party's part is masked with its
 * block of one orthogonal Q by o3m_block_apply (the routine the passive
 * participants run) and the parts are summed, as the active participant does.
 * (eval_masker.h). It writes `round,arm` to stdout and a one-line summary to stderr: the
 * cumulative reward and the regret against the best arm of each round, both
 * from the file's rewards (the file is full-information, so the best arm of
 * each round is known).
 *
 * gen-synthetic writes the paper's synthetic environment (eval_synth.h) as a
 * stream file, with noisy rewards. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "o3m_policy.h"
#include "eval_cmds.h"
#include "eval_stream.h"
#include "eval_synth.h"
#include "eval_masker.h"
#include "o3m_mask.h"
#include "o3m_cli.h"

/* Parses a double or int option value; exits the subcommand with usage on
 * error through the returned flag. */
static int opt_double(const char *name, const char *s, double *out) {
  char *end;
  double v = strtod(s, &end);
  if (end == s || *end || !isfinite(v)) {
    fprintf(stderr, "o3m-eval: --%s: '%s' is not a number\n", name, s);
    return 0;
  }
  *out = v;
  return 1;
}

static int opt_long(const char *name, const char *s, long lo, long hi, long *out) {
  char *end;
  long v = strtol(s, &end, 10);
  if (end == s || *end || v < lo || v > hi) {
    fprintf(stderr, "o3m-eval: --%s: '%s' is not an integer in %ld..%ld\n", name, s, lo, hi);
    return 0;
  }
  *out = v;
  return 1;
}

enum {
  SIM_ALGO, SIM_MODEL, SIM_ALPHA, SIM_LAMBDA, SIM_V, SIM_SEED, SIM_REFACTOR, SIM_PARTIES,
  SIM_MASK_SEED, SIM_AGGREGATION, SIM_N
};
static const o3m_cli_option simulate_options[] = {
    [SIM_ALGO] = {"algo", "linucb|lints", "the policy (default linucb)"},
    [SIM_MODEL] = {"model", "shared|disjoint", "one model or one per arm (default shared)"},
    [SIM_ALPHA] = {"alpha", "A", "LinUCB width (default 0.5)"},
    [SIM_LAMBDA] = {"lambda", "L", "ridge (default 1)"},
    [SIM_V] = {"v", "V", "LinTS scale (default 0.01)"},
    [SIM_SEED] = {"seed", "S", "LinTS sampler seed (default 1)"},
    [SIM_REFACTOR] = {"refactor-every", "N", "exact refactorization period (default 1000)"},
    [SIM_PARTIES] = {"parties", "D1,D2,...", "run masked: columns split in order across parties"},
    [SIM_MASK_SEED] = {"mask-seed-insecure", "S",
                       "draw the mask from a seeded generator (tests only; default: OS CSPRNG)"},
    [SIM_AGGREGATION] = {"aggregation", "secure|per-party",
                         "with --parties: secure (default, as the daemons) or per-party"},
    [SIM_N] = {NULL, NULL, NULL},
};
static const o3m_cli_spec simulate_cli = {
    "o3m-eval simulate", "[options] FILE",
    "Runs a policy over a full-information stream file (header round,arm,reward,x1..xd;\n"
    "K rows per round, arms 0..K-1) and writes round,arm to stdout.",
    simulate_options, NULL};

int eval_simulate_main(int argc, char **argv) {
  o3m_policy_config cfg;
  o3m_policy_config_default(&cfg);
  const char *parties = NULL;
  int have_mask_seed = 0;
  eval_aggregation agg = EVAL_AGG_SECURE;
  uint64_t mask_seed = 0;
  long lv;
  o3m_cli cl;
  o3m_cli_begin(&cl, &simulate_cli, argc, argv);
  const char *arg;
  for (int c; (c = o3m_cli_next(&cl, &arg)) != O3M_CLI_END;) {
    switch (c) {
    case O3M_CLI_STOP: return cl.exit_code;
    case SIM_ALGO:
      if (o3m_algo_parse(arg, &cfg.algo)) {
        fprintf(stderr, "o3m-eval: --algo: '%s' is not linucb or lints\n", arg);
        return 2;
      }
      break;
    case SIM_MODEL:
      if (o3m_model_parse(arg, &cfg.model)) {
        fprintf(stderr, "o3m-eval: --model: '%s' is not shared or disjoint\n", arg);
        return 2;
      }
      break;
    case SIM_ALPHA: if (!opt_double("alpha", arg, &cfg.alpha)) return 2; break;
    case SIM_LAMBDA: if (!opt_double("lambda", arg, &cfg.lambda)) return 2; break;
    case SIM_V: if (!opt_double("v", arg, &cfg.v)) return 2; break;
    case SIM_SEED:
      if (!opt_long("seed", arg, 0, __LONG_MAX__, &lv)) return 2;
      cfg.seed = (uint64_t)lv;
      break;
    case SIM_AGGREGATION:
      if (eval_aggregation_parse(arg, &agg)) {
        fprintf(stderr, "o3m-eval: --aggregation: '%s' is not secure or per-party\n", arg);
        return 2;
      }
      break;
    case SIM_MASK_SEED:
      if (!opt_long("mask-seed-insecure", arg, 0, __LONG_MAX__, &lv)) return 2;
      mask_seed = (uint64_t)lv;
      have_mask_seed = 1;
      break;
    case SIM_REFACTOR:
      if (!opt_long("refactor-every", arg, 1, 1000000000, &lv)) return 2;
      cfg.refactor_every = (int)lv;
      break;
    case SIM_PARTIES: parties = arg; break;
    }
  }
  int file = o3m_cli_operands(&cl);
  if (file != argc - 1)
    return o3m_cli_usage_error(&simulate_cli, "give one stream FILE");
  o3m_err err;
  o3m_err_clear(&err);
  eval_stream *in = NULL;
  o3m_policy *pol = NULL;
  eval_masker *mk = NULL;
  int status = 1;
  o3m_partition part;
  if (parties && o3m_partition_parse(&part, parties, &err)) {
    fprintf(stderr, "o3m-eval: --parties: %s\n", err.msg);
    return 2;
  }
  if (eval_stream_open(&in, argv[file], &err)) goto fail;
  int d = eval_stream_dim(in);
  if (parties && part.d != d) {
    fprintf(stderr, "o3m-eval: --parties: dims sum to %d but the file has d = %d\n", part.d, d);
    eval_stream_close(in);
    return 2;
  }
  cfg.d = d;
  printf("round,arm\n");
  double total = 0, regret = 0;
  long rounds = 0, rnd;
  const double *X, *r;
  int rc;
  while ((rc = eval_stream_next(in, &rnd, &X, &r, &err)) == 1) {
    int K = eval_stream_arms(in);
    if (!pol) {
      cfg.n_arms = K;
      cfg.max_candidates = K;
      if (o3m_policy_create(&pol, &cfg, &err)) goto fail;
      if (parties) {
        if (eval_masker_create(&mk, &part, K, have_mask_seed, mask_seed, agg, &err)) goto fail;
      }
    }
    const double *V = mk ? eval_masker_apply(mk, K, X) : X;
    if (!V) {
      o3m_err_set(&err, O3M_ERANGE, "round %ld: a part is too large for secure aggregation",
                  (long)rnd);
      goto fail;
    }
    int arm;
    rc = o3m_policy_choose(pol, K, V, NULL, &arm, NULL);
    if (!rc) rc = o3m_policy_update(pol, arm, V + (size_t)arm * d, r[arm]);
    if (rc) {
      o3m_err_set(&err, rc, "round %ld: policy failed: %s", rnd, o3m_strerror(rc));
      goto fail;
    }
    printf("%ld,%d\n", rnd, arm);
    double best = r[0];
    for (int a = 1; a < K; a++)
      if (r[a] > best) best = r[a];
    total += r[arm];
    regret += best - r[arm];
    rounds++;
  }
  if (rc < 0) goto fail;
  if (rounds == 0) {
    o3m_err_set(&err, O3M_EPARSE, "%s: no rounds after the header", argv[file]);
    goto fail;
  }
  fprintf(stderr,
          "simulate: %s %s %s, %ld rounds, cumulative reward %.6f, regret vs best arm per round "
          "%.6f\n",
          parties ? "masked" : "central", o3m_algo_name(cfg.algo), o3m_model_name(cfg.model),
          rounds, total, regret);
  status = 0;
  goto done;
fail:
  fprintf(stderr, "o3m-eval simulate: %s\n", o3m_err_message(&err));
done:
  if (fflush(stdout) != 0) status = 1;
  eval_masker_destroy(mk);
  o3m_policy_destroy(pol);
  eval_stream_close(in);
  return status;
}

enum { GEN_D, GEN_K, GEN_T, GEN_SEED, GEN_NOISE, GEN_OUT, GEN_N };
static const o3m_cli_option gen_synthetic_options[] = {
    [GEN_D] = {"d", "N", "context dimension (default 100)"},
    [GEN_K] = {"K", "N", "arms per round (default 10)"},
    [GEN_T] = {"T", "N", "rounds (default 5000)"},
    [GEN_SEED] = {"seed", "S", "seed of the environment (default 1)"},
    [GEN_NOISE] = {"noise-var", "S2", "reward noise variance (default 0.05)"},
    [GEN_OUT] = {"out", "FILE", "write there instead of stdout"},
    [GEN_N] = {NULL, NULL, NULL},
};
static const o3m_cli_spec gen_synthetic_cli = {
    "o3m-eval gen-synthetic",
    "[--d 100] [--K 10] [--T 5000] [--seed 1] [--noise-var 0.05] [--out FILE]",
    "Writes the paper's synthetic environment as a stream file.", gen_synthetic_options, NULL};

int eval_gen_synthetic_main(int argc, char **argv) {
  eval_synth_config sc = {.d = 100, .K = 10, .noise_var = 0.05, .seed = 1};
  long T = 5000, lv;
  const char *out = NULL;
  o3m_cli cl;
  o3m_cli_begin(&cl, &gen_synthetic_cli, argc, argv);
  const char *arg;
  for (int c; (c = o3m_cli_next(&cl, &arg)) != O3M_CLI_END;) {
    switch (c) {
    case O3M_CLI_STOP: return cl.exit_code;
    case GEN_D: if (!opt_long("d", arg, 1, 4096, &lv)) return 2; sc.d = (int)lv; break;
    case GEN_K: if (!opt_long("K", arg, 1, O3M_EVAL_MAX_K, &lv)) return 2; sc.K = (int)lv; break;
    case GEN_T: if (!opt_long("T", arg, 1, 100000000, &T)) return 2; break;
    case GEN_SEED:
      if (!opt_long("seed", arg, 0, __LONG_MAX__, &lv)) return 2;
      sc.seed = (uint64_t)lv;
      break;
    case GEN_NOISE: if (!opt_double("noise-var", arg, &sc.noise_var)) return 2; break;
    case GEN_OUT: out = arg; break;
    }
  }
  if (o3m_cli_operands(&cl) < argc)
    return o3m_cli_usage_error(&gen_synthetic_cli, "unexpected argument '%s'",
                               argv[o3m_cli_operands(&cl)]);
  FILE *f = out ? fopen(out, "w") : stdout;
  if (!f) {
    perror(out);
    return 1;
  }
  eval_synth *s = NULL;
  double *X = malloc(sizeof(double) * (size_t)sc.K * sc.d);
  double *r = malloc(sizeof(double) * sc.K);
  int rc = (!X || !r) ? O3M_ENOMEM : eval_synth_create(&s, &sc);
  if (!rc) eval_stream_write_header(f, sc.d);
  for (long t = 0; !rc && t < T; t++) {
    rc = eval_synth_round(s, X, NULL, r);
    if (!rc) eval_stream_write_round(f, t, sc.K, sc.d, X, r);
  }
  if (fflush(f) != 0 || ferror(f)) rc = O3M_EIO;
  if (out && fclose(f) != 0) rc = O3M_EIO;
  eval_synth_destroy(s);
  free(X);
  free(r);
  if (rc) {
    fprintf(stderr, "o3m-eval gen-synthetic: %s\n", o3m_strerror(rc));
    return 1;
  }
  return 0;
}
