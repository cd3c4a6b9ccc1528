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
#include <getopt.h>
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

static void simulate_usage(FILE *f) {
  fprintf(f,
          "usage: o3m-eval simulate [options] FILE\n"
          "  Runs a policy over a full-information stream file (header\n"
          "  round,arm,reward,x1..xd; K rows per round, arms 0..K-1) and writes\n"
          "  round,arm to stdout.\n"
          "  --algo linucb|lints     (default linucb)\n"
          "  --model shared|disjoint (default shared)\n"
          "  --alpha A               LinUCB width (default 0.5)\n"
          "  --lambda L              ridge (default 1)\n"
          "  --v V                   LinTS scale (default 0.01)\n"
          "  --seed S                LinTS sampler seed (default 1)\n"
          "  --refactor-every N      exact refactorization period (default 1000)\n"
          "  --parties D1,D2,...     run masked: columns split in order across parties\n"
          "  --mask-seed-insecure S  draw the mask from a seeded generator (tests only;\n"
          "                          default: the OS CSPRNG)\n"
          "  --aggregation MODE      with --parties: secure (default, as the daemons) or\n"
          "                          per-party\n");
}

int eval_simulate_main(int argc, char **argv) {
  static const struct option opts[] = {
      {"algo", required_argument, 0, 'a'},   {"model", required_argument, 0, 'm'},
      {"alpha", required_argument, 0, 'A'},  {"lambda", required_argument, 0, 'l'},
      {"v", required_argument, 0, 'v'},      {"seed", required_argument, 0, 's'},
      {"parties", required_argument, 0, 'p'}, {"mask-seed-insecure", required_argument, 0, 'q'},
      {"refactor-every", required_argument, 0, 'r'}, {"help", no_argument, 0, 'h'},
      {"aggregation", required_argument, 0, 'g'},
      {0, 0, 0, 0}};
  o3m_policy_config cfg;
  o3m_policy_config_default(&cfg);
  const char *parties = NULL;
  int have_mask_seed = 0;
  eval_aggregation agg = EVAL_AGG_SECURE;
  uint64_t mask_seed = 0;
  long lv;
  int c;
  optind = 1;
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
    case 'a':
      if (o3m_algo_parse(optarg, &cfg.algo)) {
        fprintf(stderr, "o3m-eval: --algo: '%s' is not linucb or lints\n", optarg);
        return 2;
      }
      break;
    case 'm':
      if (o3m_model_parse(optarg, &cfg.model)) {
        fprintf(stderr, "o3m-eval: --model: '%s' is not shared or disjoint\n", optarg);
        return 2;
      }
      break;
    case 'A': if (!opt_double("alpha", optarg, &cfg.alpha)) return 2; break;
    case 'l': if (!opt_double("lambda", optarg, &cfg.lambda)) return 2; break;
    case 'v': if (!opt_double("v", optarg, &cfg.v)) return 2; break;
    case 's':
      if (!opt_long("seed", optarg, 0, __LONG_MAX__, &lv)) return 2;
      cfg.seed = (uint64_t)lv;
      break;
    case 'g':
      if (eval_aggregation_parse(optarg, &agg)) {
        fprintf(stderr, "o3m-eval: --aggregation: '%s' is not secure or per-party\n", optarg);
        return 2;
      }
      break;
    case 'q':
      if (!opt_long("mask-seed-insecure", optarg, 0, __LONG_MAX__, &lv)) return 2;
      mask_seed = (uint64_t)lv;
      have_mask_seed = 1;
      break;
    case 'r':
      if (!opt_long("refactor-every", optarg, 1, 1000000000, &lv)) return 2;
      cfg.refactor_every = (int)lv;
      break;
    case 'p': parties = optarg; break;
    case 'h': simulate_usage(stdout); return 0;
    default: simulate_usage(stderr); return 2;
    }
  }
  if (optind != argc - 1) {
    simulate_usage(stderr);
    return 2;
  }
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
  if (eval_stream_open(&in, argv[optind], &err)) goto fail;
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

int eval_gen_synthetic_main(int argc, char **argv) {
  static const struct option opts[] = {
      {"d", required_argument, 0, 'd'},    {"K", required_argument, 0, 'K'},
      {"T", required_argument, 0, 'T'},    {"seed", required_argument, 0, 's'},
      {"noise-var", required_argument, 0, 'n'}, {"out", required_argument, 0, 'o'},
      {"help", no_argument, 0, 'h'},       {0, 0, 0, 0}};
  eval_synth_config sc = {.d = 100, .K = 10, .noise_var = 0.05, .seed = 1};
  long T = 5000, lv;
  const char *out = NULL;
  int c;
  optind = 1;
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
    case 'd': if (!opt_long("d", optarg, 1, 4096, &lv)) return 2; sc.d = (int)lv; break;
    case 'K': if (!opt_long("K", optarg, 1, 100000, &lv)) return 2; sc.K = (int)lv; break;
    case 'T': if (!opt_long("T", optarg, 1, 100000000, &T)) return 2; break;
    case 's':
      if (!opt_long("seed", optarg, 0, __LONG_MAX__, &lv)) return 2;
      sc.seed = (uint64_t)lv;
      break;
    case 'n': if (!opt_double("noise-var", optarg, &sc.noise_var)) return 2; break;
    case 'o': out = optarg; break;
    case 'h':
      printf("usage: o3m-eval gen-synthetic [--d 100] [--K 10] [--T 5000] [--seed 1]\n"
             "                              [--noise-var 0.05] [--out FILE]\n"
             "  Writes the paper's synthetic environment as a stream file.\n");
      return 0;
    default: return 2;
    }
  }
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
