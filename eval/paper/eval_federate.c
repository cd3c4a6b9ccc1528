/* eval_federate.c -- `o3m-eval gen-federation` and `o3m-eval federate`; see
 * eval_federate.h. */
#include "eval_federate.h"

#include <arpa/inet.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "o3m_policy.h"
#include "eval_cmds.h"
#include "eval_tables.h"
#include "o3m_cli.h"
#include "o3m.pb-c.h"
#include "o3m_blas.h"
#include "o3m_clock.h"
#include "o3m_config.h"
#include "o3m_mask.h"
#include "o3m_rng.h"
#include "o3m_rpc.h"
#include "o3m_wire.h"
#include "o3m_features.h"
#include "o3m_secagg.h"

static const char *passive_names[] = {"bank", "telco", "insurer", "mall", "clinic", "airline",
                                      "grocer", "utility"};

/* A free TCP port on 127.0.0.1 (bind to port 0 and read it back). The port
 * could be taken again before the daemon binds it; on loopback in a test
 * that race is not a practical concern. */
static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  int port = -1;
  if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
      getsockname(fd, (struct sockaddr *)&a, &len) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

/* ------------------------------------------------------------ gen-federation */

/* A new secure aggregation key pair for passive party name: the secret key
 * in DIR/keys/NAME.agg (o3m_secagg_keygen, the function behind o3m-passive
 * --agg-keygen; a key left by an earlier run is replaced), its agg_public
 * and agg_secret lines into the config f. */
static int write_agg_key(FILE *f, const char *out, const char *name) {
  char dir[4096], path[4200];
  snprintf(dir, sizeof dir, "%s/keys", out);
  if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
    fprintf(stderr, "o3m-eval: cannot create %s: %s\n", dir, strerror(errno));
    return 1;
  }
  snprintf(path, sizeof path, "%s/%s.agg", dir, name);
  unlink(path);
  unsigned char pk[O3M_SECAGG_KEY_BYTES];
  char hex[2 * O3M_SECAGG_KEY_BYTES + 1];
  o3m_err e;
  o3m_err_clear(&e);
  if (o3m_secagg_keygen(path, pk, &e) != 0) {
    fprintf(stderr, "o3m-eval: %s\n", o3m_err_message(&e));
    return 1;
  }
  o3m_secagg_hex(pk, hex);
  fprintf(f, "agg_public = %s\nagg_secret = keys/%s.agg\n", hex, name);
  return 0;
}

enum {
  GEN_OUT, GEN_PARTIES, GEN_USERS, GEN_ITEMS, GEN_ALGO, GEN_MODEL, GEN_ALPHA, GEN_V, GEN_SEED,
  GEN_DATA_SEED, GEN_DEADLINE, GEN_MAX_K, GEN_INSECURE, GEN_WHITEN, GEN_AGGREGATION, GEN_N
};
static const o3m_cli_option gen_options[] = {
    [GEN_OUT] = {"out", "DIR", "where to write (required)"},
    [GEN_PARTIES] = {"parties", "D0,D1,...",
                     "dims; the first party is the active one (default 20,20,20,20,20)"},
    [GEN_USERS] = {"users", "N", "users (default 1000)"},
    [GEN_ITEMS] = {"items", "N", "catalog size (default 100)"},
    [GEN_ALGO] = {"algo", "linucb|lints", "policy (default linucb)"},
    [GEN_MODEL] = {"model", "shared|disjoint", "policy model (default shared)"},
    [GEN_ALPHA] = {"alpha", "A", "LinUCB width (default 0.5)"},
    [GEN_V] = {"v", "V", "LinTS scale (default 0.01)"},
    [GEN_SEED] = {"seed", "S", "LinTS sampler seed (default 1)"},
    [GEN_DATA_SEED] = {"data-seed", "S", "seed of tables and ground truth (default 1)"},
    [GEN_DEADLINE] = {"deadline-ms", "MS", "fan-out deadline (default 500)"},
    [GEN_MAX_K] = {"max-candidates", "K", "cap on K per request (default 1000)"},
    [GEN_INSECURE] = {"insecure", NULL, "write a config without TLS files (trials only)"},
    [GEN_WHITEN] = {"whiten", NULL, "every passive party whitens its columns (whiten = true)"},
    [GEN_AGGREGATION] = {"aggregation", "secure|per-party",
                         "secure (default: a key pair per passive party in DIR/keys) or per-party"},
    [GEN_N] = {NULL, NULL, NULL},
};
static const o3m_cli_spec gen_cli = {
    "o3m-eval gen-federation", "--out DIR [options]",
    "Writes DIR/federation.conf, DIR/data/* (tables, catalog) and DIR/truth.txt.",
    gen_options,
    "Certificates are expected in DIR/certs (scripts/make-certs.sh DIR/certs ...),\n"
    "one per party and one for the client 'client', the config's one [client].\n"
    "Each party has dims/2 user columns and the rest item columns.\n"};

int eval_gen_federation_main(int argc, char **argv) {
  const char *out = NULL, *parties = "20,20,20,20,20", *algo = "linucb", *model = "shared";
  long long users = 1000, items = 100, seed = 1, data_seed = 1, deadline = 500;
  long long maxk = O3M_DEFAULT_MAX_CANDIDATES;
  double alpha = O3M_DEFAULT_ALPHA, v = O3M_DEFAULT_V;
  int insecure = 0, whiten = 0;
  const char *aggregation = "secure";
  o3m_cli cl;
  o3m_cli_begin(&cl, &gen_cli, argc, argv);
  const char *arg;
  for (int c; (c = o3m_cli_next(&cl, &arg)) != O3M_CLI_END;) {
    switch (c) {
    case O3M_CLI_STOP: return cl.exit_code;
    case GEN_OUT: out = arg; break;
    case GEN_PARTIES: parties = arg; break;
    case GEN_USERS:
      if (o3m_cli_opt_long("o3m-eval", "users", arg, 1, 10000000, &users)) return 2;
      break;
    case GEN_ITEMS:
      if (o3m_cli_opt_long("o3m-eval", "items", arg, 1, O3M_MAX_ARMS, &items)) return 2;
      break;
    case GEN_ALGO: algo = arg; break;
    case GEN_MODEL: model = arg; break;
    case GEN_ALPHA:
      if (o3m_cli_opt_double("o3m-eval", "alpha", arg, -DBL_MAX, DBL_MAX, &alpha)) return 2;
      break;
    case GEN_V:
      if (o3m_cli_opt_double("o3m-eval", "v", arg, -DBL_MAX, DBL_MAX, &v)) return 2;
      break;
    case GEN_SEED:
      if (o3m_cli_opt_long("o3m-eval", "seed", arg, 0, __LONG_MAX__, &seed)) return 2;
      break;
    case GEN_DATA_SEED:
      if (o3m_cli_opt_long("o3m-eval", "data-seed", arg, 0, __LONG_MAX__, &data_seed)) return 2;
      break;
    case GEN_DEADLINE:
      if (o3m_cli_opt_long("o3m-eval", "deadline-ms", arg, 1, O3M_MAX_ROUND_DEADLINE_MS, &deadline)) return 2;
      break;
    case GEN_MAX_K:
      if (o3m_cli_opt_long("o3m-eval", "max-candidates", arg, 1, O3M_MAX_CANDIDATES, &maxk)) return 2;
      break;
    case GEN_INSECURE: insecure = 1; break;
    case GEN_WHITEN: whiten = 1; break;
    case GEN_AGGREGATION: aggregation = arg; break;
    }
  }
  o3m_algo al;
  o3m_model_kind mo;
  if (!out) return o3m_cli_usage_error(&gen_cli, "--out is required");
  if (o3m_cli_operands(&cl) != argc)
    return o3m_cli_usage_error(&gen_cli, "unexpected argument '%s'", argv[o3m_cli_operands(&cl)]);
  if (o3m_algo_parse(algo, &al))
    return o3m_cli_usage_error(&gen_cli, "--algo: '%s' is not linucb or lints", algo);
  if (o3m_model_parse(model, &mo))
    return o3m_cli_usage_error(&gen_cli, "--model: '%s' is not shared or disjoint", model);
  int secure = strcmp(aggregation, "secure") == 0;
  if (!secure && strcmp(aggregation, "per-party") != 0)
    return o3m_cli_usage_error(&gen_cli, "--aggregation: '%s' is not secure or per-party",
                               aggregation);
  o3m_partition part;
  o3m_err err;
  if (o3m_partition_parse(&part, parties, &err)) {
    fprintf(stderr, "o3m-eval: --parties: %s\n", err.msg);
    return 2;
  }
  if (part.m - 1 > (int)(sizeof passive_names / sizeof passive_names[0])) {
    fprintf(stderr, "o3m-eval: --parties: at most %zu passive parties\n",
            sizeof passive_names / sizeof passive_names[0]);
    return 2;
  }
  char path[4096];
  snprintf(path, sizeof path, "%s/data", out);
  if ((mkdir(out, 0755) && errno != EEXIST) || (mkdir(path, 0755) && errno != EEXIST)) {
    fprintf(stderr, "o3m-eval: cannot create %s: %s\n", path, strerror(errno));
    return 1;
  }
  /* Tables: party j has dims/2 user columns (at least 1 when dims > 1) and
   * the rest item columns. */
  for (int j = 0; j < part.m; j++) {
    const char *name = j == 0 ? "shop" : passive_names[j - 1];
    int uc = part.dims[j] / 2, ic = part.dims[j] - uc;
    int rc = 0;
    if (uc > 0) {
      snprintf(path, sizeof path, "%s/data/%s_users.csv", out, name);
      rc = eval_tables_write_synthetic(path, O3M_FEATURES_USERS, "u", (int)users, uc,
                                       (uint64_t)data_seed * 1000 + 2 * j, &err);
    }
    if (!rc) {
      snprintf(path, sizeof path, "%s/data/%s_items.csv", out, name);
      rc = eval_tables_write_synthetic(path, O3M_FEATURES_ITEMS, "i", (int)items, ic,
                                       (uint64_t)data_seed * 1000 + 2 * j + 1, &err);
    }
    if (rc) {
      fprintf(stderr, "o3m-eval: %s\n", err.msg);
      return 1;
    }
  }
  snprintf(path, sizeof path, "%s/data/items.txt", out);
  FILE *f = fopen(path, "w");
  if (!f) goto io_fail;
  for (long i = 0; i < items; i++) fprintf(f, "i%ld\n", i);
  if (fclose(f)) goto io_fail;
  /* Ground truth. */
  snprintf(path, sizeof path, "%s/truth.txt", out);
  f = fopen(path, "w");
  if (!f) goto io_fail;
  {
    o3m_rng *r;
    double *theta = malloc(sizeof(double) * part.d);
    if (!theta || o3m_rng_create_seeded_insecure(&r, (uint64_t)data_seed * 7919 + 17)) {
      fclose(f);
      free(theta);
      return 1;
    }
    o3m_rng_gaussian(r, theta, part.d);
    o3m_scal(part.d, 1.0 / o3m_nrm2(part.d, theta), theta);
    fprintf(f, "# o3m demo ground truth: P(click | x) = 1 / (1 + exp(-(%g + %g x.theta)))\n",
            EVAL_FED_BIAS, EVAL_FED_SCALE);
    for (int i = 0; i < part.d; i++) fprintf(f, "%.17g\n", theta[i]);
    o3m_rng_destroy(r);
    free(theta);
  }
  if (fclose(f)) goto io_fail;
  /* Config. */
  snprintf(path, sizeof path, "%s/federation.conf", out);
  f = fopen(path, "w");
  if (!f) goto io_fail;
  fprintf(f, "# Generated by o3m-eval gen-federation: a local trial federation.\n"
             "[federation]\nd = %d\ndeadline_ms = %lld\n", part.d, deadline);
  if (insecure)
    fprintf(f, "insecure = true\n");
  else
    fprintf(f, "ca = certs/ca.pem\n");
  fprintf(f, "aggregation = %s\n", aggregation);
  fprintf(f,
          "\n[policy]\nalgo = %s\nmodel = %s\nalpha = %.17g\nlambda = 1\nv = %.17g\nseed = %lld\n"
          "max_candidates = %lld\n",
          algo, model, alpha, v, seed, maxk);
  if (mo == O3M_MODEL_DISJOINT) fprintf(f, "items = data/items.txt\n");
  const char *names[1 + 8];
  names[0] = "pmg";
  for (int j = 0; j < part.m; j++) names[1 + j] = j == 0 ? "shop" : passive_names[j - 1];
  int ports[1 + 8];
  for (int p = 0; p <= part.m; p++) {
    /* Port 0 may hand out the same free port twice in a row; the config
     * would then be refused, so a port already given to a party is skipped. */
    int port, dup;
    do {
      port = free_port();
      dup = 0;
      for (int q = 0; q < p; q++) dup |= ports[q] == port;
    } while (dup && port >= 0);
    ports[p] = port;
    if (port < 0) {
      fclose(f);
      fprintf(stderr, "o3m-eval: no free port on 127.0.0.1\n");
      return 1;
    }
    const char *role = p == 0 ? "pmg" : p == 1 ? "active" : "passive";
    fprintf(f, "\n[party %s]\nrole = %s\naddress = 127.0.0.1:%d\n", names[p], role, port);
    if (!insecure) fprintf(f, "cert = certs/%s.pem\nkey = certs/%s.key\n", names[p], names[p]);
    if (p > 0) {
      int j = p - 1, uc = part.dims[j] / 2;
      fprintf(f, "dims = %d\n", part.dims[j]);
      if (uc > 0) fprintf(f, "user_table = data/%s_users.csv\n", names[p]);
      fprintf(f, "item_table = data/%s_items.csv\n", names[p]);
      if (whiten && p > 1) fprintf(f, "whiten = true\n");
    }
    if (p > 1 && secure && write_agg_key(f, out, names[p]) != 0) {
      fclose(f);
      return 1;
    }
  }
  /* The driver's identity (o3m-eval federate, the load benchmarks): only a
   * configured client may call Recommend, Reward and Stats. */
  fprintf(f, "\n[client client]\n");
  if (!insecure) fprintf(f, "cert = certs/client.pem\nkey = certs/client.key\n");
  if (fclose(f)) goto io_fail;
  printf("%s/federation.conf: pmg", out);
  for (int p = 1; p <= part.m; p++) printf(" %s", names[p]);
  printf("\n");
  return 0;
io_fail:
  fprintf(stderr, "o3m-eval: cannot write %s: %s\n", path, strerror(errno));
  return 1;
}

/* ------------------------------------------------------------ federate */

/* Adds the missing parties of a degraded answer to the comma-separated
 * list seen (each name once), as far as it fits. */
static void note_missing(char *seen, size_t n, const O3m__V1__Recommendation *rec) {
  for (size_t i = 0; i < rec->n_missing; i++) {
    const char *m = rec->missing[i];
    size_t len = strlen(m), have = strlen(seen);
    if (!len) continue;
    int known = 0;
    for (const char *s = seen; (s = strstr(s, m)); s += len)
      if ((s == seen || s[-1] == ',') && (s[len] == ',' || s[len] == 0)) known = 1;
    if (!known && have + len + 2 <= n) snprintf(seen + have, n - have, "%s%s", have ? "," : "", m);
  }
}

/* One line of --trace for an answered round: when it was answered (wall
 * clock, ms, so that a script can set it against the times it acted), 1 if
 * degraded, and its missing parties. */
static void trace_round(FILE *f, const O3m__V1__Recommendation *rec) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  fprintf(f, "%lld %d ", (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000, rec->degraded ? 1 : 0);
  for (size_t i = 0; i < rec->n_missing; i++) fprintf(f, "%s%s", i ? "," : "", rec->missing[i]);
  fprintf(f, "%s\n", rec->n_missing ? "" : "-");
}

typedef struct driver {
  const o3m_config *cfg;
  int d, M, K, d0;
  o3m_features **tables; /* one per column party, in column order */
  double *theta;        /* ground truth, d */
  double *X;            /* K x d raw contexts */
  double *X0;           /* K x d0, the AP's columns */
  double *Xj;           /* K x max d_j */
  double *p;            /* K click probabilities */
  double *click;        /* K drawn clicks */
  int *arms;            /* K catalog indices */
  char (*ids)[24];      /* K item id strings */
  const char **idp;
  int n_users, n_items;
} driver;

static int read_truth(const char *path, int d, double *theta, o3m_err *e) {
  FILE *f = fopen(path, "r");
  if (!f) return o3m_err_set(e, O3M_EIO, "%s: %s", path, strerror(errno));
  char line[256];
  int n = 0, lineno = 0;
  while (fgets(line, sizeof line, f)) {
    lineno++;
    if (line[0] == '#') continue;
    char *end;
    double v = strtod(line, &end);
    if (end == line || !isfinite(v) || n >= d) {
      fclose(f);
      return o3m_err_set(e, O3M_EPARSE, "%s:%d: expected %d numbers, one per line", path,
                         lineno, d);
    }
    theta[n++] = v;
  }
  fclose(f);
  if (n != d) return o3m_err_set(e, O3M_EPARSE, "%s: %d values, expected d = %d", path, n, d);
  return O3M_OK;
}

/* Fills X (and X0) for the user and the K candidates from every party's
 * tables, in column order, and the click probabilities. */
static int driver_contexts(driver *dr, const char *user) {
  int col = 0, maxdj = 0;
  for (int j = 0; j < dr->M; j++) {
    int dj = o3m_features_dims(dr->tables[j]);
    const char *u = o3m_features_n_users(dr->tables[j]) ? user : NULL;
    const char *const *it = o3m_features_n_items(dr->tables[j]) ? dr->idp : NULL;
    int rc = o3m_features_fill(dr->tables[j], u, dr->K, it, dr->Xj, NULL, NULL);
    if (rc) return rc;
    for (int k = 0; k < dr->K; k++)
      memcpy(dr->X + (size_t)k * dr->d + col, dr->Xj + (size_t)k * dj, sizeof(double) * dj);
    col += dj;
    if (dj > maxdj) maxdj = dj;
  }
  for (int k = 0; k < dr->K; k++) {
    memcpy(dr->X0 + (size_t)k * dr->d0, dr->X + (size_t)k * dr->d, sizeof(double) * dr->d0);
    double z = EVAL_FED_BIAS + EVAL_FED_SCALE * o3m_dot(dr->d, dr->X + (size_t)k * dr->d,
                                                          dr->theta);
    dr->p[k] = 1.0 / (1.0 + exp(-z));
  }
  return O3M_OK;
}

enum {
  FED_CONFIG, FED_TRUTH, FED_ROUNDS, FED_K, FED_SEED, FED_CERT, FED_KEY, FED_INSECURE,
  FED_REQUIRE_MATCH, FED_SECONDS, FED_TRACE, FED_N
};
static const o3m_cli_option fed_options[] = {
    [FED_CONFIG] = {"config", "F", "the federation config (required)"},
    [FED_TRUTH] = {"truth", "F", "the ground truth written by gen-federation (required)"},
    [FED_ROUNDS] = {"rounds", "N", "rounds (default 3000)"},
    [FED_K] = {"K", "N", "candidates per round (default 10)"},
    [FED_SEED] = {"seed", "S", "seed of users, candidates and clicks (default 7)"},
    [FED_CERT] = {"cert", "F", "this client's certificate (CA from the config)"},
    [FED_KEY] = {"key", "F", "its private key"},
    [FED_INSECURE] = {"insecure", NULL, "plaintext (the daemons must run --insecure too)"},
    [FED_REQUIRE_MATCH] = {"require-match", NULL,
                           "exit 1 unless every decision equals the centralized one (a "
                           "degraded one: the AP's local model's)"},
    [FED_SECONDS] = {"seconds", "S", "stop after S seconds even before --rounds (default: none)"},
    [FED_TRACE] = {"trace", "F", "write one line per round to F: its wall-clock end in ms, "
                                 "1 if degraded else 0, and the missing parties (or -)"},
    [FED_N] = {NULL, NULL, NULL},
};
static const o3m_cli_spec fed_cli = {
    "o3m-eval federate", "--config F --truth F [options]",
    "Drives the active participant of a running federation.", fed_options, NULL};

int eval_federate_main(int argc, char **argv) {
  const char *cfg_path = NULL, *truth = NULL, *cert = NULL, *key = NULL, *trace_path = NULL;
  long long rounds = 3000, K = 10, seed = 7, seconds = 0;
  int insecure = 0, require_match = 0;
  o3m_cli cl;
  o3m_cli_begin(&cl, &fed_cli, argc, argv);
  const char *arg;
  for (int c; (c = o3m_cli_next(&cl, &arg)) != O3M_CLI_END;) {
    switch (c) {
    case O3M_CLI_STOP: return cl.exit_code;
    case FED_CONFIG: cfg_path = arg; break;
    case FED_TRUTH: truth = arg; break;
    case FED_ROUNDS:
      if (o3m_cli_opt_long("o3m-eval", "rounds", arg, 1, 100000000, &rounds)) return 2;
      break;
    case FED_K: if (o3m_cli_opt_long("o3m-eval", "K", arg, 1, O3M_EVAL_MAX_K, &K)) return 2; break;
    case FED_SEED:
      if (o3m_cli_opt_long("o3m-eval", "seed", arg, 0, __LONG_MAX__, &seed)) return 2;
      break;
    case FED_CERT: cert = arg; break;
    case FED_KEY: key = arg; break;
    case FED_INSECURE: insecure = 1; break;
    case FED_REQUIRE_MATCH: require_match = 1; break;
    case FED_SECONDS:
      if (o3m_cli_opt_long("o3m-eval", "seconds", arg, 1, 86400, &seconds)) return 2;
      break;
    case FED_TRACE: trace_path = arg; break;
    }
  }
  if (o3m_cli_operands(&cl) != argc)
    return o3m_cli_usage_error(&fed_cli, "unexpected argument '%s'", argv[o3m_cli_operands(&cl)]);
  if (!cfg_path || !truth || (!insecure && (!cert || !key)))
    return o3m_cli_usage_error(&fed_cli, "give --config, --truth and --cert and --key "
                               "(or --insecure)");
  o3m_err err;
  o3m_err_clear(&err);
  o3m_config *cfg = NULL;
  driver dr;
  memset(&dr, 0, sizeof dr);
  o3m_policy *central = NULL, *local = NULL, *fallback = NULL;
  FILE *trace = NULL;
  o3m_rpc_client *cli = NULL;
  o3m_rng *rng = NULL;
  int status = 1, rc;
  if ((rc = o3m_config_load(&cfg, cfg_path, &err))) goto fail;
  dr.cfg = cfg;
  dr.d = o3m_config_d(cfg);
  dr.M = o3m_config_n_column_parties(cfg);
  dr.K = (int)K;
  dr.d0 = o3m_config_active(cfg)->dims;
  dr.tables = calloc(dr.M, sizeof *dr.tables);
  dr.theta = malloc(sizeof(double) * dr.d);
  dr.X = malloc(sizeof(double) * K * dr.d);
  dr.X0 = malloc(sizeof(double) * K * dr.d0);
  dr.Xj = malloc(sizeof(double) * K * dr.d);
  dr.p = malloc(sizeof(double) * K);
  dr.click = malloc(sizeof(double) * K);
  dr.arms = malloc(sizeof(int) * K);
  dr.ids = malloc(sizeof *dr.ids * K);
  dr.idp = malloc(sizeof(char *) * K);
  if (!dr.tables || !dr.theta || !dr.X || !dr.X0 || !dr.Xj || !dr.p || !dr.click || !dr.arms ||
      !dr.ids || !dr.idp) {
    rc = o3m_err_set(&err, O3M_ENOMEM, "out of memory");
    goto fail;
  }
  for (int k = 0; k < K; k++) dr.idp[k] = dr.ids[k];
  if ((rc = read_truth(truth, dr.d, dr.theta, &err))) goto fail;
  for (int j = 0; j < dr.M; j++) {
    const o3m_party *pa = o3m_config_column_party(cfg, j);
    if ((rc = o3m_features_load(&dr.tables[j], pa->user_table, pa->item_table, pa->dims, &err)))
      goto fail;
    /* A party that whitens masks W x: the central and AP-only learners (and
     * the click model) see the same whitened columns. */
    if (pa->whiten && (rc = o3m_features_whiten(dr.tables[j], &err))) goto fail;
    if (o3m_features_n_users(dr.tables[j]) > dr.n_users)
      dr.n_users = o3m_features_n_users(dr.tables[j]);
    if (o3m_features_n_items(dr.tables[j]) > dr.n_items)
      dr.n_items = o3m_features_n_items(dr.tables[j]);
  }
  if (dr.n_items < K) {
    rc = o3m_err_set(&err, O3M_EINVAL, "--K %lld exceeds the %d catalog items", K, dr.n_items);
    goto fail;
  }
  /* The two in-process baselines share the AP's policy settings. */
  const o3m_config_policy_section *pp = o3m_config_policy(cfg);
  o3m_policy_config pc;
  o3m_policy_config_default(&pc);
  o3m_algo_parse(pp->algo, &pc.algo);
  o3m_model_parse(pp->model, &pc.model);
  pc.alpha = pp->alpha;
  pc.lambda = pp->lambda;
  pc.v = pp->v;
  pc.seed = pp->seed;
  pc.refactor_every = pp->refactor_every;
  pc.max_candidates = (int)K;
  pc.n_arms = dr.n_items;
  pc.d = dr.d;
  if ((rc = o3m_policy_create(&central, &pc, &err))) goto fail;
  pc.d = dr.d0;
  if ((rc = o3m_policy_create(&local, &pc, &err))) goto fail;
  /* The AP's local fallback model, as the AP builds it: its own columns,
   * its own alpha and lambda, and every reward of the AP's decisions. A
   * degraded round must be exactly its decision. */
  pc.alpha = pp->local_alpha;
  pc.lambda = pp->local_lambda;
  if ((rc = o3m_policy_create(&fallback, &pc, &err))) goto fail;
  if (trace_path && !(trace = fopen(trace_path, "w"))) {
    rc = o3m_err_set(&err, O3M_EIO, "--trace %s: %s", trace_path, strerror(errno));
    goto fail;
  }
  o3m_rpc_client_config cc;
  o3m_rpc_client_config_default(&cc);
  cc.target = o3m_config_active(cfg)->address;
  cc.insecure = insecure;
  if (!insecure) {
    cc.tls.ca_file = o3m_config_ca(cfg);
    cc.tls.cert_file = cert;
    cc.tls.key_file = key;
  }
  cc.deadline_ms = o3m_config_deadline_ms(cfg) + 5000;
  cc.wait_for_ready = 1;
  if ((rc = o3m_rpc_client_create(&cli, &cc, &err))) goto fail;
  if ((rc = o3m_rng_create_seeded_insecure(&rng, (uint64_t)seed))) goto fail;

  int tty = isatty(STDERR_FILENO);
  double reg_fed = 0, reg_central = 0, reg_local = 0, t0 = o3m_clock_s();
  long match = 0, done = 0, degraded = 0, match_degraded = 0;
  char missing_seen[256] = "";
  int *perm = malloc(sizeof(int) * dr.n_items);
  if (!perm) {
    rc = o3m_err_set(&err, O3M_ENOMEM, "out of memory");
    goto fail;
  }
  for (int i = 0; i < dr.n_items; i++) perm[i] = i;
  char user[32];
  for (long t = 0; t < rounds && !(seconds && o3m_clock_s() - t0 >= (double)seconds); t++) {
    uint64_t u;
    o3m_rng_u64(rng, &u);
    snprintf(user, sizeof user, "u%d", (int)(u % (uint64_t)dr.n_users));
    for (int k = 0; k < K; k++) { /* partial Fisher-Yates: K distinct items */
      o3m_rng_u64(rng, &u);
      int j = k + (int)(u % (uint64_t)(dr.n_items - k));
      int tmp = perm[k];
      perm[k] = perm[j];
      perm[j] = tmp;
      dr.arms[k] = perm[k];
      snprintf(dr.ids[k], sizeof dr.ids[k], "i%d", perm[k]);
    }
    if ((rc = driver_contexts(&dr, user))) {
      o3m_err_set(&err, rc, "round %ld: cannot build contexts", t);
      goto fail_perm;
    }
    double best = 0;
    for (int k = 0; k < K; k++) {
      uint64_t b;
      o3m_rng_u64(rng, &b);
      dr.click[k] = ((double)(b >> 11) / 9007199254740992.0) < dr.p[k] ? 1.0 : 0.0;
      if (dr.p[k] > best) best = dr.p[k];
    }
    int ac, al, ab;
    if ((rc = o3m_policy_choose(central, (int)K, dr.X, dr.arms, &ac, NULL)) ||
        (rc = o3m_policy_choose(local, (int)K, dr.X0, dr.arms, &al, NULL)) ||
        (rc = o3m_policy_choose(fallback, (int)K, dr.X0, dr.arms, &ab, NULL))) {
      o3m_err_set(&err, rc, "round %ld: in-process policy failed", t);
      goto fail_perm;
    }
    O3m__V1__RecommendRequest req = O3M__V1__RECOMMEND_REQUEST__INIT;
    req.user = user;
    req.n_items = (size_t)K;
    req.items = (char **)dr.idp;
    ProtobufCMessage *reply;
    if ((rc = o3m_rpc_client_call(cli, O3M_PATH_ACTIVE_RECOMMEND, &req.base,
                                  &o3m__v1__recommendation__descriptor, &reply, &err)))
      goto fail_perm;
    const O3m__V1__Recommendation *rec = (const O3m__V1__Recommendation *)reply;
    int af = (int)rec->candidate, deg = rec->degraded;
    uint64_t decision = rec->decision;
    if (deg) note_missing(missing_seen, sizeof missing_seen, rec);
    if (trace) trace_round(trace, rec);
    if (af < 0 || af >= K) {
      rc = o3m_err_set(&err, O3M_ERPC, "round %ld: candidate %d out of range", t, af);
      goto fail_perm;
    }
    O3m__V1__RewardRequest rw = O3M__V1__REWARD_REQUEST__INIT;
    rw.decision = decision;
    rw.reward = dr.click[af];
    if ((rc = o3m_rpc_client_call(cli, O3M_PATH_ACTIVE_REWARD, &rw.base,
                                  &o3m__v1__reward_reply__descriptor, &reply, &err)))
      goto fail_perm;
    /* The federated model learns the federated rounds only (it never saw
     * a degraded round's context), so the centralized one does too; the
     * local model learns every reward of the AP's decisions. */
    if (!deg) o3m_policy_update(central, dr.arms[ac], dr.X + (size_t)ac * dr.d, dr.click[ac]);
    o3m_policy_update(local, dr.arms[al], dr.X0 + (size_t)al * dr.d0, dr.click[al]);
    o3m_policy_update(fallback, dr.arms[af], dr.X0 + (size_t)af * dr.d0, dr.click[af]);
    reg_fed += best - dr.p[af];
    reg_central += best - dr.p[ac];
    reg_local += best - dr.p[al];
    if (deg) {
      degraded++;
      match_degraded += af == ab;
    } else {
      match += af == ac;
    }
    done = t + 1;
    if (tty ? (done % 50 == 0 || done == rounds) : (done % (rounds / 10 ? rounds / 10 : 1) == 0)) {
      double el = o3m_clock_s() - t0;
      fprintf(stderr, "%s[federate] %ld/%lld rounds  %.0f rounds/s  matched %ld%s",
              tty ? "\r" : "", done, rounds, done / el, match, tty ? "   " : "\n");
    }
  }
  if (tty) fputc('\n', stderr);
  long federated = done - degraded;
  printf("rounds                        %ld\n", done);
  printf("federated regret              %.3f\n", reg_fed);
  printf("centralized regret            %.3f   (in-process, all %d columns)\n", reg_central,
         dr.d);
  printf("AP-only regret                %.3f   (in-process, the AP's %d columns)\n", reg_local,
         dr.d0);
  /* Without an outage every round is federated and these are all rounds. */
  printf("decisions equal to central    %ld/%ld (%.2f%%)\n", match, federated,
         federated ? 100.0 * match / federated : 100.0);
  if (degraded) {
    printf("degraded rounds               %ld (missing: %s)\n", degraded, missing_seen);
    printf("degraded equal to local model %ld/%ld (the AP's fallback on its %d columns)\n",
           match_degraded, degraded, dr.d0);
  }
  int all = match == federated && match_degraded == degraded;
  printf("every decision matched        %s\n", all ? "yes" : "NO");
  printf("wall time                     %.2f s (%.0f rounds/s, each a Recommend and a Reward)\n",
         o3m_clock_s() - t0, done / (o3m_clock_s() - t0));
  status = (require_match && !all) ? 1 : 0;
  free(perm);
  goto done;
fail_perm:
  free(perm);
fail:
  fprintf(stderr, "o3m-eval federate: %s: %s\n", o3m_errname(rc), o3m_err_message(&err));
done:
  o3m_rpc_client_destroy(cli);
  o3m_rng_destroy(rng);
  o3m_policy_destroy(central);
  o3m_policy_destroy(local);
  o3m_policy_destroy(fallback);
  if (trace && fclose(trace) != 0 && status == 0) {
    fprintf(stderr, "o3m-eval federate: --trace %s: %s\n", trace_path, strerror(errno));
    status = 1;
  }
  if (dr.tables)
    for (int j = 0; j < dr.M; j++) o3m_features_destroy(dr.tables[j]);
  free(dr.tables);
  free(dr.theta);
  free(dr.X);
  free(dr.X0);
  free(dr.Xj);
  free(dr.p);
  free(dr.click);
  free(dr.arms);
  free(dr.ids);
  free(dr.idp);
  o3m_config_destroy(cfg);
  return status;
}
