/* eval_ope.c -- the off-policy estimators (see eval_ope.h) and the
 * `o3m-eval ope` subcommand.
 *
 * One pass over the log. The training prefix updates the evaluated policy
 * and the reward model with every logged row; after it both are frozen and
 * each event costs one choose (the policy's decision among the K arms) and
 * one o3m_policy_stats of the reward model (its K predictions), then one
 * eval_ope_acc_add. The estimators need nothing but running sums. */
#include "eval_ope.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "eval_cmds.h"
#include "o3m_cli.h"
#include "o3m_clock.h"

const char *eval_ope_name(eval_ope_kind k) {
  static const char *const names[EVAL_OPE_N] = {"replay", "ipw", "snipw", "dm", "dr"};
  return k >= 0 && k < EVAL_OPE_N ? names[k] : "?";
}

void eval_ope_acc_init(eval_ope_acc *a) { memset(a, 0, sizeof *a); }

static void moments_add(eval_ope_moments *m, double weight, double t) {
  if (!(weight > 0)) return;
  if (m->w == 0) m->shift = t;
  double u = t - m->shift;
  m->w += weight;
  m->s += weight * u;
  m->s2 += weight * u * u;
}

int eval_ope_acc_add(eval_ope_acc *a, double pi_logged, double pscore, double reward,
                     double qlog, double qpi) {
  if (!(pscore > 0 && pscore <= 1) || !(pi_logged >= 0 && pi_logged <= 1) ||
      !isfinite(reward) || !isfinite(qlog) || !isfinite(qpi))
    return O3M_ERANGE;
  double w = pi_logged / pscore;
  a->n++;
  if (pi_logged > 0) a->m++;
  if (pi_logged > 0 && reward != 0) a->k++;
  a->sw += w;
  a->sw2 += w * w;
  a->swr += w * reward;
  a->sw2r += w * w * reward;
  a->sw2r2 += w * w * reward * reward;
  moments_add(&a->replay, pi_logged, reward);
  moments_add(&a->ipw, 1, w * reward);
  moments_add(&a->dm, 1, qpi);
  moments_add(&a->dr, 1, qpi + w * (reward - qlog));
  moments_add(&a->logged, 1, reward);
  return O3M_OK;
}

/* The weighted mean of the terms in m, its standard error sd / sqrt(W)
 * (sd with W - 1; W the total weight, the row count for unit weights) and
 * the interval; rows is reported as is. */
static eval_ope_estimate mean_estimate(const eval_ope_moments *m, long long rows, double z) {
  eval_ope_estimate r = {NAN, NAN, NAN, NAN, rows};
  if (!(m->w > 0)) return r;
  r.value = m->shift + m->s / m->w;
  if (rows >= 2 && m->w > 1) {
    double var = fmax(0.0, (m->s2 - m->s * m->s / m->w) / (m->w - 1));
    r.se = sqrt(var / m->w);
    r.lo = r.value - z * r.se;
    r.hi = r.value + z * r.se;
  }
  return r;
}

void eval_ope_finish(const eval_ope_acc *a, double z, eval_ope_estimate out[EVAL_OPE_N],
                     eval_ope_estimate *logged) {
  double n = (double)a->n;
  out[EVAL_OPE_REPLAY] = mean_estimate(&a->replay, a->m, z);
  out[EVAL_OPE_IPW] = mean_estimate(&a->ipw, a->n, z);
  out[EVAL_OPE_DM] = mean_estimate(&a->dm, a->n, z);
  out[EVAL_OPE_DR] = mean_estimate(&a->dr, a->n, z);
  /* SNIPW: V = sum w r / sum w; delta-method terms w (r - V) / wbar. */
  eval_ope_estimate s = {NAN, NAN, NAN, NAN, a->n};
  if (a->n > 0 && a->sw > 0) {
    s.value = a->swr / a->sw;
    if (a->n >= 2) {
      double V = s.value, wbar = a->sw / n;
      double ss = fmax(0.0, a->sw2r2 - 2 * V * a->sw2r + V * V * a->sw2);
      s.se = sqrt(ss / (wbar * wbar * n * (n - 1)));
      s.lo = V - z * s.se;
      s.hi = V + z * s.se;
    }
  }
  out[EVAL_OPE_SNIPW] = s;
  if (logged) *logged = mean_estimate(&a->logged, a->n, z);
}

/* ---- a frozen learner on a log ---- */

void eval_ope_config_default(eval_ope_config *c) {
  memset(c, 0, sizeof *c);
  o3m_policy_config_default(&c->policy);
  c->train = 1000;
  c->reward_lambda = 1.0;
  c->z = 1.959963984540054;
}

static int file_sink(void *ctx, const void *buf, size_t len) {
  return fwrite(buf, 1, len, (FILE *)ctx) == len ? O3M_OK : O3M_EIO;
}

static int file_source(void *ctx, void *buf, size_t len) {
  return fread(buf, 1, len, (FILE *)ctx) == len ? O3M_OK : O3M_EIO;
}

int eval_ope_state_write(const o3m_policy *p, const char *path, o3m_err *e) {
  FILE *f = fopen(path, "wb");
  if (!f) return o3m_err_set(e, O3M_EIO, "%s: cannot create: %s", path, strerror(errno));
  int rc = o3m_policy_state_save(p, file_sink, f);
  if (fclose(f) && !rc) rc = O3M_EIO;
  if (rc) return o3m_err_set(e, rc, "%s: writing the policy state failed", path);
  return O3M_OK;
}

int eval_ope_state_read(o3m_policy *p, const char *path, o3m_err *e) {
  FILE *f = fopen(path, "rb");
  if (!f) return o3m_err_set(e, O3M_EIO, "%s: cannot open: %s", path, strerror(errno));
  o3m_err pe;
  o3m_err_clear(&pe);
  int rc = o3m_policy_state_load(p, file_source, f, &pe);
  /* A state must be the whole file: trailing bytes mean another file. */
  if (!rc && fgetc(f) != EOF) {
    rc = O3M_ECORRUPT;
    o3m_err_set(&pe, rc, "trailing bytes after the policy state");
  }
  fclose(f);
  if (rc == O3M_EIO && !pe.code) o3m_err_set(&pe, rc, "the file is shorter than a policy state");
  if (rc) return o3m_err_set(e, rc, "%s: %s", path, o3m_err_message(&pe));
  return O3M_OK;
}

int eval_ope_run(eval_reader *rd, const eval_ope_config *cfg, eval_ope_result *res,
                 o3m_err *e) {
  memset(res, 0, sizeof *res);
  if (cfg->train < 1 || cfg->limit < 0 || !(cfg->reward_lambda > 0) || !(cfg->z > 0))
    return o3m_err_set(e, O3M_EINVAL, "ope: training prefix %lld (>= 1), limit %lld (>= 0), "
                       "reward lambda %g (> 0) or z %g (> 0) out of range", cfg->train,
                       cfg->limit, cfg->reward_lambda, cfg->z);
  const int K = eval_reader_arms(rd), d = eval_reader_dim(rd);
  o3m_policy_config pc = cfg->policy, qc;
  pc.d = d;
  pc.n_arms = K;
  pc.max_candidates = K;
  o3m_policy_config_default(&qc);
  qc.algo = O3M_ALGO_LINUCB;
  qc.model = O3M_MODEL_DISJOINT;
  qc.alpha = 0;
  qc.lambda = cfg->reward_lambda;
  qc.d = d;
  qc.n_arms = K;
  qc.max_candidates = K;
  o3m_policy *pol = NULL, *qm = NULL;
  double *q = malloc(sizeof(double) * (size_t)K);
  int rc = q ? O3M_OK : o3m_err_set(e, O3M_ENOMEM, "ope: out of memory");
  if (!rc) rc = o3m_policy_create(&pol, &pc, e);
  if (!rc) rc = o3m_policy_create(&qm, &qc, e);
  if (!rc && cfg->state_in) rc = eval_ope_state_read(pol, cfg->state_in, e);
  if (rc) goto out;

  eval_ope_acc acc;
  eval_ope_acc_init(&acc);
  double t0 = o3m_clock_s();
  eval_event ev;
  eval_reader_fill_matrix(rd, 1);
  const char *step = NULL; /* which model call failed, for the message */
  while ((cfg->limit == 0 || res->eval_events < cfg->limit) &&
         (step = NULL, rc = eval_reader_next(rd, &ev, e)) == 1) {
    const double *xa = ev.X + (size_t)ev.arm * d;
    if (res->train_events < cfg->train) {
      /* Training: both models fit the logged row (the policy only without
       * a saved state). */
      step = "policy's training update";
      if (!cfg->state_in && (rc = o3m_policy_update(pol, ev.arm, xa, ev.reward))) break;
      step = "reward model's training update";
      if ((rc = o3m_policy_update(qm, ev.arm, xa, ev.reward))) break;
      res->train_events++;
      if (res->train_events == cfg->train && cfg->state_out &&
          (rc = eval_ope_state_write(pol, cfg->state_out, e)))
        goto out;
      continue;
    }
    if (isnan(ev.pscore) && cfg->uniform_logging) ev.pscore = 1.0 / K;
    if (isnan(ev.pscore)) {
      rc = o3m_err_set(e, O3M_EINVAL, "ope: line %lld carries no propensity score (the format "
                       "must log one: obd's propensity_score column; or say the log is "
                       "uniformly random)", ev.line);
      goto out;
    }
    int c;
    step = "frozen policy's choice";
    if ((rc = o3m_policy_choose(pol, K, ev.X, NULL, &c, NULL))) break;
    step = "reward model's prediction";
    if ((rc = o3m_policy_stats(qm, K, ev.X, NULL, q, NULL))) break;
    double pi = c == ev.arm ? 1.0 : 0.0;
    if ((rc = eval_ope_acc_add(&acc, pi, ev.pscore, ev.reward, q[ev.arm], q[c]))) {
      rc = o3m_err_set(e, rc, "ope: line %lld: reward %g or reward-model prediction %g/%g is "
                       "not finite", ev.line, ev.reward, q[ev.arm], q[c]);
      goto out;
    }
    if (!res->eval_events) res->first_line = ev.line;
    res->last_line = ev.line;
    res->eval_events++;
    res->matched += c == ev.arm;
  }
  if (rc < 0 && step) /* a model call failed (reader errors are already in e) */
    rc = o3m_err_set(e, rc, "ope: line %lld: the %s failed: %s", ev.line, step,
                     o3m_strerror(rc));
  if (rc < 0) goto out;
  rc = O3M_OK;
  if (res->train_events < cfg->train || res->eval_events == 0) {
    rc = o3m_err_set(e, O3M_EINVAL, "ope: the log has %lld events, fewer than the training "
                     "prefix (%lld) plus one to evaluate", res->train_events + res->eval_events,
                     cfg->train);
    goto out;
  }
  eval_ope_finish(&acc, cfg->z, res->est, &res->logged);
  res->matched_nonzero = acc.k;
  res->seconds = o3m_clock_s() - t0;
out:
  o3m_policy_destroy(qm);
  o3m_policy_destroy(pol);
  free(q);
  return rc;
}

void eval_ope_print(FILE *f, const eval_ope_result *res) {
  fprintf(f, "training prefix: %lld events; evaluated: %lld events (lines %lld..%lld), the "
          "policy chose the logged arm on %lld\n", res->train_events, res->eval_events,
          res->first_line, res->last_line, res->matched);
  fprintf(f, "%-8s %12s %12s   %-27s %s\n", "estimator", "value", "se", "95% CI (normal)",
          "rows");
  for (int k = 0; k < EVAL_OPE_N + 1; k++) {
    const eval_ope_estimate *x = k < EVAL_OPE_N ? &res->est[k] : &res->logged;
    fprintf(f, "%-8s %12.6f %12.6f   [%11.6f, %11.6f] %lld%s\n",
            k < EVAL_OPE_N ? eval_ope_name((eval_ope_kind)k) : "logged", x->value, x->se,
            x->lo, x->hi, x->rows,
            k == EVAL_OPE_REPLAY ? " matched" : k == EVAL_OPE_N ? " (the logging policy)" : "");
  }
  if (res->matched_nonzero < 10)
    fprintf(f, "warning: only %lld matched events have a non-zero reward; the intervals of "
            "replay, ipw and snipw are not reliable with so few\n", res->matched_nonzero);
}

/* ---- the subcommand ---- */

enum {
  O_FORMAT, O_INPUT, O_ITEMS, O_OBDPOS, O_OBDB, O_TRAIN, O_LIMIT, O_ALGO, O_MODEL, O_ALPHA,
  O_LAMBDA, O_V, O_SEED, O_QLAMBDA, O_SIN, O_SOUT, O_UNIFORM, O_COUNT
};
static const o3m_cli_option ope_options[] = {
    [O_FORMAT] = {"format", "F", "data: obd (logs propensities), or news with --uniform-logging"},
    [O_INPUT] = {"input", "FILE", "data: the log, e.g. men.csv ('-' = stdin)"},
    [O_ITEMS] = {"item-context", "FILE", "obd: item_context.csv (required)"},
    [O_OBDPOS] = {"obd-position", "P", "obd: position used, 1..3, or 0 for all (default 1)"},
    [O_OBDB] = {"obd-user-buckets", "B",
                "obd: one-hot slots per user feature column, one per distinct value (default 16)"},
    [O_TRAIN] = {"train", "N", "the first N events train policy and reward model (default 1000)"},
    [O_LIMIT] = {"limit", "N", "evaluate at most N events after them (default: to the end)"},
    [O_ALGO] = {"algo", "linucb|lints", "policy (default linucb; lints: one sample per row)"},
    [O_MODEL] = {"model", "shared|disjoint", "policy model (default shared)"},
    [O_ALPHA] = {"alpha", "A", "LinUCB width (default 0.5; 0 = greedy)"},
    [O_LAMBDA] = {"lambda", "L", "policy ridge (default 1)"},
    [O_V] = {"v", "V", "LinTS scale (default 0.01)"},
    [O_SEED] = {"seed", "S", "LinTS sampler seed (default 1)"},
    [O_QLAMBDA] = {"reward-lambda", "L", "ridge of the per-arm reward model of dm/dr (default 1)"},
    [O_SIN] = {"state-in", "FILE", "evaluate this saved policy (from --state-out), untrained"},
    [O_SOUT] = {"state-out", "FILE", "save the frozen policy after the training prefix"},
    [O_UNIFORM] = {"uniform-logging", NULL,
                   "the log is uniformly random: propensity 1/K where none is logged (news10k)"},
    [O_COUNT] = {NULL, NULL, NULL},
};
static const o3m_cli_spec ope_cli = {
    "o3m-eval ope", "--format obd --input FILE --item-context FILE [options]\n"
    "       o3m-eval ope --format news --uniform-logging --input FILE [options]",
    "Off-policy estimates (replay, IPW, self-normalized IPW, direct method, doubly\n"
    "robust) of a frozen policy's value on a log with propensity scores.",
    ope_options,
    "The policy and a per-arm ridge reward model are fitted on every row of the\n"
    "training prefix, then frozen. Intervals: value +- 1.96 se, se from the\n"
    "estimator's per-row terms (delta method for snipw). See docs/evaluation/ope.md."};

int eval_ope_main(int argc, char **argv) {
  eval_ope_config cfg;
  eval_ope_config_default(&cfg);
  eval_obd_options obd;
  eval_obd_options_default(&obd);
  eval_format fmt = 0;
  const char *input = NULL, *items = NULL;
  long long ll = 0;
  unsigned long long u = 0;
  o3m_cli cl;
  o3m_cli_begin(&cl, &ope_cli, argc, argv);
  const char *a;
  for (int c; (c = o3m_cli_next(&cl, &a)) != O3M_CLI_END;) {
    int bad = 0;
    switch (c) {
      case O3M_CLI_STOP: return cl.exit_code;
      case O_FORMAT: bad = eval_format_parse(a, &fmt) != 0; break;
      case O_INPUT: input = a; break;
      case O_ITEMS: items = a; break;
      case O_OBDPOS: bad = o3m_cli_parse_long(a, 0, 1000, &ll); obd.position = (int)ll; break;
      case O_OBDB: bad = o3m_cli_parse_long(a, 1, 4096, &ll); obd.user_buckets = (int)ll; break;
      case O_TRAIN: bad = o3m_cli_parse_long(a, 1, (long long)1 << 50, &cfg.train); break;
      case O_LIMIT: bad = o3m_cli_parse_long(a, 1, (long long)1 << 50, &cfg.limit); break;
      case O_ALGO: bad = o3m_algo_parse(a, &cfg.policy.algo) != 0; break;
      case O_MODEL: bad = o3m_model_parse(a, &cfg.policy.model) != 0; break;
      case O_ALPHA: bad = o3m_cli_parse_double(a, -DBL_MAX, DBL_MAX, &cfg.policy.alpha) || cfg.policy.alpha < 0; break;
      case O_LAMBDA: bad = o3m_cli_parse_double(a, -DBL_MAX, DBL_MAX, &cfg.policy.lambda) || !(cfg.policy.lambda > 0); break;
      case O_V: bad = o3m_cli_parse_double(a, -DBL_MAX, DBL_MAX, &cfg.policy.v) || cfg.policy.v < 0; break;
      case O_SEED: bad = o3m_cli_parse_u64(a, &u); cfg.policy.seed = u; break;
      case O_QLAMBDA: bad = o3m_cli_parse_double(a, -DBL_MAX, DBL_MAX, &cfg.reward_lambda) || !(cfg.reward_lambda > 0); break;
      case O_SIN: cfg.state_in = a; break;
      case O_SOUT: cfg.state_out = a; break;
      case O_UNIFORM: cfg.uniform_logging = 1; break;
    }
    if (bad)
      return o3m_cli_usage_error(&ope_cli, "bad value '%s' for --%s", a, ope_options[c].name);
  }
  if (o3m_cli_operands(&cl) < argc)
    return o3m_cli_usage_error(&ope_cli, "unexpected argument '%s'", argv[o3m_cli_operands(&cl)]);
  if (!fmt || !input) return o3m_cli_usage_error(&ope_cli, "--format and --input are required");
  if (fmt != EVAL_FORMAT_OBD && !(fmt == EVAL_FORMAT_NEWS && cfg.uniform_logging))
    return o3m_cli_usage_error(&ope_cli, "format %s logs no propensity scores (use obd, or news "
                               "with --uniform-logging)", eval_format_name(fmt));
  if (fmt == EVAL_FORMAT_OBD && !items)
    return o3m_cli_usage_error(&ope_cli, "obd needs --item-context (item_context.csv)");

  o3m_err err;
  o3m_err_clear(&err);
  eval_reader *rd = NULL;
  int rc = fmt == EVAL_FORMAT_OBD ? eval_reader_open_obd(&rd, input, items, &obd, &err)
                                  : eval_reader_open_news(&rd, input, &err);
  if (rc) return o3m_cli_fail(ope_cli.prog, "%s", o3m_err_message(&err));
  printf("data: %s\n", eval_reader_describe(rd));
  printf("policy: %s %s, alpha %g, lambda %g, v %g, seed %llu, %s, then frozen\n",
         o3m_algo_name(cfg.policy.algo), o3m_model_name(cfg.policy.model), cfg.policy.alpha,
         cfg.policy.lambda, cfg.policy.v, (unsigned long long)cfg.policy.seed,
         cfg.state_in ? "read from the saved state" : "fitted on every training row");
  printf("reward model (dm, dr): per-arm ridge regression, lambda %g, fitted on the training "
         "prefix\n", cfg.reward_lambda);
  printf("propensities: %s\n", cfg.uniform_logging ? "1/K where the log has none "
         "(--uniform-logging)" : "as logged");
  fflush(stdout);
  eval_ope_result res;
  rc = eval_ope_run(rd, &cfg, &res, &err);
  eval_reader_destroy(rd);
  if (rc) return o3m_cli_fail(ope_cli.prog, "%s", o3m_err_message(&err));
  if (cfg.state_out) printf("frozen policy saved to %s\n", cfg.state_out);
  eval_ope_print(stdout, &res);
  return O3M_CLI_EXIT_OK;
}
