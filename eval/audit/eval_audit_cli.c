/* eval_audit_cli.c -- the audit's command line (eval_audit.h), o3m-audit's
 * and its alias `o3m-eval audit`'s. */
#include "eval_audit_impl.h"
#include "eval_audit_factored.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "eval_cmds.h"
#include "eval_plot.h"
#include "o3m_cli.h"
#include "o3m_clock.h"

enum {
  O_DIMS, O_PARTY, O_UT, O_IT, O_BANK, O_DS, O_DD, O_TABLE, O_USERS, O_DUMMIES, O_KNOWN, O_MODES,
  O_ICA, O_SEED, O_OUT, O_NOPLOT, O_PLOT_FORMAT, O_WHITEN, O_SCOREW, O_FACTORED, O_COUNT
};
static const o3m_cli_option audit_options[] = {
    [O_DIMS] = {"dims", "D0,D1,...", "every party's number of columns, the AP first (required)"},
    [O_PARTY] = {"party", "J", "the audited party, 1..M-1 (required)"},
    [O_UT] = {"user-table", "CSV", "your user table (o3m_features format)"},
    [O_IT] = {"item-table", "CSV", "your item table (row i of the audit: user i, item i mod n)"},
    [O_BANK] = {"bank", NULL, "audit the bank-like demo table (20 columns; written to --out)"},
    [O_DS] = {"dataset", "news|obd", "split the shared data set's contexts into the parties"},
    [O_DD] = {"data-dir", "DIR", "the shared data directory (../shared/data)"},
    [O_TABLE] = {"table", "K=CSV", "party K's own user table (repeatable; row r = your row r)"},
    [O_USERS] = {"users", "N", "audit at most N users (all; 1000 for --bank and --dataset)"},
    [O_DUMMIES] = {"dummies", "N", "unknown ids the attacker asks about (as many as users)"},
    [O_KNOWN] = {"known-max", "N", "largest known-row count n (2 d_j; 2 (d - d_0) when secure)"},
    [O_MODES] = {"modes", "LIST", "any of per-party,secagg,secagg+own (all)"},
    [O_ICA] = {"ica-iter", "N", "FastICA iterations at most (200)"},
    [O_SEED] = {"seed", "S", "the mask, the known rows, the other parties' columns (1)"},
    [O_OUT] = {"out", "DIR", "CSVs, plots and written tables (eval-out/audit)"},
    [O_NOPLOT] = {"no-plots", NULL, "tables and CSVs only"},
    [O_PLOT_FORMAT] = {"plot-format", "png,pdf,svg",
                       "plot formats, any of png, pdf and svg (png)"},
    [O_WHITEN] = {"whiten", NULL,
                  "you whiten your columns (config key whiten): the attacks see W x, and are "
                  "scored on your raw x"},
    [O_SCOREW] = {"score-whitened", NULL, "with --whiten: score them on your whitened values W x"},
    [O_FACTORED] = {"factored", NULL,
                    "also under factored batches (protocol 6: U(u) and I(i) seen apart), side "
                    "by side"},
    [O_COUNT] = {NULL, NULL, NULL},
};
static const o3m_cli_spec audit_cli = {
    "o3m-audit",
    "--dims D0,D1,... --party J (--user-table CSV [--item-table CSV] | --item-table CSV\n"
    "       | --bank | --dataset news|obd) [options]",
    "What the active participant (AP, party 0) could learn about party J's columns,\n"
    "simulated in-process under each protocol mode (per-party parts; secure\n"
    "aggregation; secure aggregation plus the AP's own block and columns): known\n"
    "plaintext, PCA and FastICA on honest traffic, the same on dummy rows, and the\n"
    "norms/Gram exposure. Per column |corr| true vs recovered; tables on stdout,\n"
    "CSVs and plots (PNG, or --plot-format) in --out.",
    audit_options,
    "Other parties' columns: --table, else their slice of --dataset, else standard normal.\n"
    "`o3m-eval audit` is an alias of o3m-audit: the same code and options.\n"};

static int parse_modes(const char *s, int *out) {
  char buf[256];
  snprintf(buf, sizeof buf, "%s", s);
  *out = 0;
  char *save = NULL;
  for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    int m = 0;
    while (m < EVAL_AUDIT_N_MODES && strcmp(t, eval_audit_mode_name(m))) m++;
    if (m == EVAL_AUDIT_N_MODES) return -1;
    *out |= 1 << m;
  }
  return *out ? 0 : -1;
}

/* The command under the name prog, which prefixes its help and messages. */
static int audit_main(const char *prog, int argc, char **argv) {
  o3m_cli_spec spec = audit_cli;
  spec.prog = prog;
  eval_audit_source src;
  memset(&src, 0, sizeof src);
  src.party = -1;
  src.data_dir = "../shared/data";
  eval_audit_config cfg;
  eval_audit_config_default(&cfg);
  const char *dims = NULL, *out_dir = "eval-out/audit";
  enum { MAX_TABLES = 64 };
  const char *tables[MAX_TABLES];
  int n_tables = 0;
  int plots = 1, formats = EVAL_PLOT_PNG, factored = 0;
  long long v = 0;
  o3m_err err;
  o3m_err_clear(&err);
  o3m_cli cl;
  o3m_cli_begin(&cl, &spec, argc, argv);
  const char *optarg_;
  for (int ch; (ch = o3m_cli_next(&cl, &optarg_)) != O3M_CLI_END;) {
    int bad = 0;
    switch (ch) {
      case O3M_CLI_STOP: return cl.exit_code;
      case O_DIMS: dims = optarg_; break;
      case O_PARTY:
        bad = o3m_cli_parse_long(optarg_, 1, O3M_MAX_PARTIES - 1, &v);
        src.party = (int)v;
        break;
      case O_UT: src.user_table = optarg_; break;
      case O_IT: src.item_table = optarg_; break;
      case O_BANK: src.bank = 1; break;
      case O_DS: src.dataset = optarg_; bad = strcmp(optarg_, "news") && strcmp(optarg_, "obd"); break;
      case O_DD: src.data_dir = optarg_; break;
      case O_USERS:
        bad = o3m_cli_parse_long(optarg_, 2, O3M_FEATURES_MAX_ROWS, &v);
        src.rows = (int)v;
        break;
      case O_DUMMIES:
        bad = o3m_cli_parse_long(optarg_, 2, 10000000, &v);
        cfg.dummies = (int)v;
        break;
      case O_MODES: bad = parse_modes(optarg_, &cfg.modes); break;
      case O_ICA:
        bad = o3m_cli_parse_long(optarg_, 1, 100000, &v);
        cfg.ica_max_iter = (int)v;
        break;
      case O_KNOWN:
        bad = o3m_cli_parse_long(optarg_, 1, 1000000, &v);
        cfg.known_max = (int)v;
        break;
      case O_TABLE:
        bad = n_tables == MAX_TABLES || !strchr(optarg_, '=');
        if (!bad) tables[n_tables++] = optarg_;
        break;
      case O_SEED:
        bad = o3m_cli_parse_long(optarg_, 0, __LONG_MAX__, &v);
        cfg.seed = src.seed = (uint64_t)v;
        break;
      case O_OUT: out_dir = optarg_; break;
      case O_NOPLOT: plots = 0; break;
      case O_PLOT_FORMAT:
        if (eval_plot_formats_parse(optarg_, &formats, &err)) {
          fprintf(stderr, "%s: %s\n", prog, o3m_err_message(&err));
          return 2;
        }
        break;
      case O_WHITEN: src.whiten = 1; break;
      case O_SCOREW: src.score_whitened = 1; break;
      case O_FACTORED: factored = 1; break;
    }
    if (bad) {
      fprintf(stderr, "%s: bad value '%s' for --%s\n", prog, optarg_, audit_options[ch].name);
      return 2;
    }
  }
  if (o3m_cli_operands(&cl) < argc)
    return o3m_cli_usage_error(&spec, "unexpected argument '%s'",
                               argv[o3m_cli_operands(&cl)]);
  if (!dims || src.party < 0)
    return o3m_cli_usage_error(&spec, "--dims and --party are required");
  if (o3m_partition_parse(&src.part, dims, &err)) {
    fprintf(stderr, "%s: --dims: %s\n", prog, o3m_err_message(&err));
    return 2;
  }
  /* --table K=PATH: party K's own user table instead of synthetic columns. */
  const char **others = NULL;
  if (n_tables) {
    others = calloc((size_t)src.part.m, sizeof *others);
    if (!others) {
      fprintf(stderr, "%s: out of memory\n", prog);
      return 1;
    }
    for (int t = 0; t < n_tables; t++) {
      const char *eq = strchr(tables[t], '=');
      char num[16];
      size_t len = (size_t)(eq - tables[t]);
      snprintf(num, sizeof num, "%.*s", (int)(len < sizeof num ? len : sizeof num - 1),
               tables[t]);
      if (len >= sizeof num || o3m_cli_parse_long(num, 0, src.part.m - 1, &v) || v == src.party ||
          !eq[1]) {
        fprintf(stderr, "%s: --table '%s': expected K=PATH with K another party (0..%d, not %d)\n",
                prog, tables[t], src.part.m - 1, src.party);
        free(others);
        return 2;
      }
      others[v] = eq + 1;
    }
    src.other_tables = others;
  }
  if (!src.seed) src.seed = cfg.seed;
  src.work_dir = out_dir;
  double t0 = o3m_clock_s();
  eval_audit_input *in = NULL;
  int rc = eval_audit_input_build(&in, &src, &err);
  free(others);
  if (rc) {
    fprintf(stderr, "%s: %s\n", prog, o3m_err_message(&err));
    return rc == O3M_EINVAL || rc == O3M_EDIM ? 2 : 1;
  }
  eval_audit *a = NULL;
  rc = eval_audit_run(&a, in, &cfg, &err);
  if (rc) {
    fprintf(stderr, "%s: %s\n", prog, o3m_err_message(&err));
    eval_audit_input_destroy(in);
    return 1;
  }
  eval_audit_factored *fa = NULL;
  if (factored && eval_audit_factored_run(&fa, in, a, &cfg, &err)) {
    fprintf(stderr, "%s: %s\n", prog, o3m_err_message(&err));
    eval_audit_destroy(a);
    eval_audit_input_destroy(in);
    return 1;
  }
  double secs = o3m_clock_s() - t0;
  int status = 0;
  eval_audit_print(a, in, stdout);
  if (fa) eval_audit_factored_print(fa, a, stdout);
  if (fa && eval_audit_factored_write_csv(fa, in, out_dir, &err)) {
    fprintf(stderr, "%s: %s\n", prog, o3m_err_message(&err));
    status = 1;
  }
  if (eval_audit_write_csv(a, in, out_dir, &err)) {
    fprintf(stderr, "%s: %s\n", prog, o3m_err_message(&err));
    status = 1;
  } else {
    printf("CSVs in %s: audit_<mode>_<attack>.csv%s\n", out_dir,
           fa ? ", audit_factored_... and audit_differenced_..." : "");
    if (plots && eval_audit_plot(a, out_dir, formats, stdout, &err)) {
      fprintf(stderr, "%s: %s\n", prog, o3m_err_message(&err));
      if (err.code != O3M_ENOTFOUND) status = 1;
    }
  }
  printf("runtime: %.2f s (single-threaded BLAS)\n", secs);
  eval_audit_factored_destroy(fa);
  eval_audit_destroy(a);
  eval_audit_input_destroy(in);
  if (fflush(stdout) != 0) status = 1;
  return status;
}

int eval_audit_main(int argc, char **argv) { return audit_main("o3m-eval audit", argc, argv); }

int eval_audit_tool_main(int argc, char **argv) { return audit_main("o3m-audit", argc, argv); }
