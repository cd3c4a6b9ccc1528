/* test_active.c -- the active participant daemon (o3m-active) end to end.
 *
 * Every test starts a real federation on loopback with mutual TLS: o3m-pmg
 * (with a seeded mask, so the test can recompute Q's id), two o3m-passive
 * daemons (dims 2 and 3) and o3m-active (dims 3, its own feature tables), all
 * from the build's bin directory, with certificates from
 * scripts/make-certs.sh and small synthetic CSV tables. The test talks to the
 * AP through ap_client (the library o3m-cli uses) with a certificate of its
 * own ("client"), and runs o3m-cli itself for the command-line checks.
 *
 * The central claim is checked end to end: for 200 rounds the AP's chosen
 * candidate and score equal those of an in-process ap_policy fed the
 * unmasked contexts, which the test builds by reading the same CSV tables
 * with pp_features and concatenating the parties' blocks in column order
 * (LinUCB shared; and disjoint LinTS, which agrees draw by draw). The other
 * tests pin the error contract: rewards twice, unknown, out of range or NaN;
 * malformed requests; a passive participant stopped (SIGSTOP) or killed
 * fails the round within the deadline and changes nothing, and the service
 * recovers when it returns; SIGTERM exits 0. Batching: rounds sent at once
 * by several clients are answered in a few fan-outs (ActiveStats.fanouts)
 * with exactly the central decisions, and a passive participant that fails
 * fails every round of its batch and changes nothing.
 *
 * Children get PR_SET_PDEATHSIG, and every fixture stops what it started,
 * continuing stopped processes first, so nothing outlives a failed test. Set
 * O3M_TEST_KEEP=1 to keep the work directory (configs, logs). */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ap_client.h"
#include "fed_proc.h"
#include "ap_policy.h"
#include "o3m.pb-c.h"
#include "o3m_mask.h"
#include "o3m_rng.h"
#include "o3m_rpc.h"
#include "o3m_wire.h"
#include "pp_features.h"

#define BIN O3M_BIN_DIR
#define MAKE_CERTS O3M_SOURCE_DIR "/scripts/make-certs.sh"

#define D 8
#define N_USERS 30
#define N_ITEMS 12
#define K_MAX 8
#define DEADLINE_MS 300
#define MASK_SEED 4242
#define TS_SEED 77

enum { P_PMG, P_AP, P_PP1, P_PP2, N_PROC };
static const char *const proc_name[N_PROC] = {"pmg", "ap", "pp1", "pp2"};
static const char *const proc_exe[N_PROC] = {"o3m-pmg", "o3m-active", "o3m-passive",
                                             "o3m-passive"};

static char work[] = "/tmp/o3m_test_active_XXXXXX";
static char conf[512];
static int port[N_PROC];
static pid_t pid[N_PROC];
static int stopped[N_PROC];
static ap_client *cli;

/* ------------------------------------------------------------ helpers */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static const char *path_in(const char *name) {
  static char buf[4][600];
  static int slot;
  char *p = buf[slot++ % 4];
  snprintf(p, 600, "%s/%s", work, name);
  return p;
}

static void write_file(const char *name, const char *text) {
  FILE *f = fopen(path_in(name), "w");
  cr_assert_not_null(f, "cannot write %s", name);
  fputs(text, f);
  fclose(f);
}

/* Prints the last lines of a daemon's log to stderr, for failures. */
static void dump_log(int p) {
  char cmd[700];
  snprintf(cmd, sizeof cmd, "echo '--- %s.log'; tail -n 20 %s/%s.log 1>&2", proc_name[p], work,
           proc_name[p]);
  if (system(cmd) != 0) fprintf(stderr, "(no log for %s)\n", proc_name[p]);
}

static void spawn(int p, const char *extra) {
  char ready[600], log[600];
  snprintf(ready, sizeof ready, "%s/%s.ready", work, proc_name[p]);
  snprintf(log, sizeof log, "%s/%s.log", work, proc_name[p]);
  unlink(ready);
  char exe[600];
  snprintf(exe, sizeof exe, "%s/%s", BIN, proc_exe[p]);
  cr_assert(eq(int, access(exe, X_OK), 0), "%s is not built", exe);
  pid_t c = fork();
  cr_assert(ge(int, c, 0));
  if (c == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    char *argv[16];
    int n = 0;
    argv[n++] = exe;
    argv[n++] = "--config";
    argv[n++] = conf;
    argv[n++] = "--party";
    argv[n++] = (char *)proc_name[p];
    argv[n++] = "--ready-file";
    argv[n++] = ready;
    char extra_buf[128];
    if (extra) {
      snprintf(extra_buf, sizeof extra_buf, "%s", extra);
      for (char *tok = strtok(extra_buf, " "); tok && n < 15; tok = strtok(NULL, " "))
        argv[n++] = tok;
    }
    argv[n] = NULL;
    execv(exe, argv);
    _exit(127);
  }
  pid[p] = c;
  stopped[p] = 0;
}

static void wait_ready(int p) {
  char ready[600];
  snprintf(ready, sizeof ready, "%s/%s.ready", work, proc_name[p]);
  double t0 = now_s();
  while (now_s() - t0 < 20) {
    struct stat st;
    if (stat(ready, &st) == 0 && st.st_size > 0) return;
    int status;
    if (waitpid(pid[p], &status, WNOHANG) == pid[p]) {
      pid[p] = 0;
      dump_log(p);
      cr_fatal("%s exited during start-up (status %d)", proc_name[p], status);
    }
    sleep_ms(20);
  }
  dump_log(p);
  cr_fatal("%s did not become ready in 20 s", proc_name[p]);
}

/* Stops a daemon (continuing it first if it was stopped), SIGKILL after 5 s.
 * Returns its wait status, or -1. */
static int stop_proc(int p, int sig) {
  if (pid[p] <= 0) return -1;
  if (stopped[p]) kill(pid[p], SIGCONT);
  stopped[p] = 0;
  kill(pid[p], sig);
  int status = -1;
  double t0 = now_s();
  for (;;) {
    pid_t r = waitpid(pid[p], &status, WNOHANG);
    if (r == pid[p] || r < 0) break;
    if (now_s() - t0 > 5) {
      kill(pid[p], SIGKILL);
      waitpid(pid[p], &status, 0);
      status = -1;
      break;
    }
    sleep_ms(10);
  }
  pid[p] = 0;
  return status;
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(p);
}

/* ------------------------------------------------------------ federation */

/* Feature tables: the AP has 2 user + 1 item columns, pp1 2 user columns,
 * pp2 1 user + 2 item columns; d = 3 + 2 + 3. */
static void write_tables(void) {
  o3m_err e;
  struct {
    const char *file;
    pp_table_kind kind;
    const char *prefix;
    int rows, cols;
  } t[] = {
      {"ap_users.csv", PP_TABLE_USERS, "u", N_USERS, 2},
      {"ap_items.csv", PP_TABLE_ITEMS, "i", N_ITEMS, 1},
      {"pp1_users.csv", PP_TABLE_USERS, "u", N_USERS, 2},
      {"pp2_users.csv", PP_TABLE_USERS, "u", N_USERS, 1},
      {"pp2_items.csv", PP_TABLE_ITEMS, "i", N_ITEMS, 2},
  };
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
    cr_assert(eq(int, pp_features_write_synthetic(path_in(t[i].file), t[i].kind, t[i].prefix,
                                                  t[i].rows, t[i].cols, 100 + i, &e), 0),
              "%s", o3m_err_message(&e));
  FILE *f = fopen(path_in("catalog.txt"), "w");
  cr_assert_not_null(f);
  for (int i = 0; i < N_ITEMS; i++) fprintf(f, "i%d\n", i);
  fclose(f);
}

static void write_config(const char *policy) {
  char text[4096];
  snprintf(text, sizeof text,
           "[federation]\nd = %d\ndeadline_ms = %d\nca = certs/ca.pem\n\n"
           "[policy]\n%s"
           "max_candidates = %d\npending_capacity = 1000\npending_expiry_s = 600\n"
           "reward_min = 0\nreward_max = 1\n\n"
           "[party pmg]\nrole = pmg\naddress = 127.0.0.1:%d\ncert = certs/pmg.pem\n"
           "key = certs/pmg.key\n\n"
           "[party ap]\nrole = active\naddress = 127.0.0.1:%d\ndims = 3\n"
           "user_table = ap_users.csv\nitem_table = ap_items.csv\ncert = certs/ap.pem\n"
           "key = certs/ap.key\n\n"
           "[party pp1]\nrole = passive\naddress = 127.0.0.1:%d\ndims = 2\n"
           "user_table = pp1_users.csv\ncert = certs/pp1.pem\nkey = certs/pp1.key\n\n"
           "[party pp2]\nrole = passive\naddress = 127.0.0.1:%d\ndims = 3\n"
           "user_table = pp2_users.csv\nitem_table = pp2_items.csv\ncert = certs/pp2.pem\n"
           "key = certs/pp2.key\n",
           D, DEADLINE_MS, policy, K_MAX, port[P_PMG], port[P_AP], port[P_PP1], port[P_PP2]);
  write_file("federation.conf", text);
  snprintf(conf, sizeof conf, "%s/federation.conf", work);
}

static void client_create(ap_client **out, int with_cert) {
  ap_client_options o;
  ap_client_options_default(&o);
  char target[64];
  snprintf(target, sizeof target, "127.0.0.1:%d", port[P_AP]);
  o.target = target;
  o.server_name = "ap";
  o.ca_file = path_in("certs/ca.pem");
  if (with_cert) {
    o.cert_file = path_in("certs/client.pem");
    o.key_file = path_in("certs/client.key");
  }
  o.deadline_ms = 5000;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert(eq(int, ap_client_create(out, &o, &e), 0), "%s", o3m_err_message(&e));
}

/* Certificates, tables, config and the mask generator. */
static void fed_prepare(const char *policy) {
  cr_assert_not_null(mkdtemp(work));
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "%s %s/certs pmg ap pp1 pp2 client", MAKE_CERTS, work);
  cr_assert(eq(int, system(cmd), 0), "make-certs.sh failed");
  write_tables();
  for (int p = 0; p < N_PROC; p++) port[p] = fed_free_port();
  write_config(policy);
  char seed[64];
  snprintf(seed, sizeof seed, "--mask-seed-insecure %d --keep-mask", MASK_SEED);
  spawn(P_PMG, seed);
  wait_ready(P_PMG);
}

static void fed_up(const char *policy) {
  fed_prepare(policy);
  spawn(P_PP1, NULL);
  spawn(P_PP2, NULL);
  spawn(P_AP, "--pmg-timeout-s 20");
  wait_ready(P_PP1);
  wait_ready(P_PP2);
  wait_ready(P_AP);
  client_create(&cli, 1);
}

static void fed_up_linucb(void) {
  fed_up("algo = linucb\nmodel = shared\nalpha = 1.0\nlambda = 1\n");
}

/* The AP first; the passive parties start later (in the test). */
static void fed_up_ap_first(void) {
  fed_prepare("algo = linucb\nmodel = shared\n");
  spawn(P_AP, "--pmg-timeout-s 15");
}

static void fed_up_lints_disjoint(void) {
  char policy[256];
  snprintf(policy, sizeof policy,
           "algo = lints\nmodel = disjoint\nv = 0.5\nlambda = 1\nseed = %d\nitems = catalog.txt\n",
           TS_SEED);
  fed_up(policy);
}

static void fed_down(void) {
  ap_client_destroy(cli);
  cli = NULL;
  for (int p = N_PROC - 1; p >= 0; p--) stop_proc(p, SIGTERM);
  if (work[strlen(work) - 1] != 'X') {
    const char *keep = getenv("O3M_TEST_KEEP");
    if (keep && *keep == '1')
      fprintf(stderr, "kept %s\n", work);
    else
      nftw(work, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
  }
}

/* ------------------------------------------------------------ central model */

typedef struct central {
  pp_features *ap, *pp1, *pp2;
  double blk[K_MAX * 3];
  double X[K_MAX * D];
} central;

static void central_load(central *c) {
  o3m_err e;
  cr_assert(eq(int, pp_features_load(&c->ap, path_in("ap_users.csv"), path_in("ap_items.csv"), 3,
                                     &e), 0), "%s", o3m_err_message(&e));
  cr_assert(eq(int, pp_features_load(&c->pp1, path_in("pp1_users.csv"), NULL, 2, &e), 0), "%s",
            o3m_err_message(&e));
  cr_assert(eq(int, pp_features_load(&c->pp2, path_in("pp2_users.csv"), path_in("pp2_items.csv"),
                                     3, &e), 0), "%s", o3m_err_message(&e));
}

static void central_free(central *c) {
  pp_features_destroy(c->ap);
  pp_features_destroy(c->pp1);
  pp_features_destroy(c->pp2);
}

/* X = [x^ap, x^pp1, x^pp2] per candidate, the unmasked contexts. */
static void central_contexts(central *c, const char *user, int K, const char *const *items) {
  pp_features *f[3] = {c->ap, c->pp1, c->pp2};
  int off[3] = {0, 3, 5}, dims[3] = {3, 2, 3};
  for (int j = 0; j < 3; j++) {
    cr_assert(eq(int, pp_features_fill(f[j], user, K, items, c->blk, NULL, NULL), 0));
    for (int k = 0; k < K; k++)
      memcpy(c->X + (size_t)k * D + off[j], c->blk + (size_t)k * dims[j],
             sizeof(double) * dims[j]);
  }
}

/* K distinct items out of N_ITEMS, in a random order. */
static void draw_items(o3m_rng *r, int K, const char **items, char names[][16]) {
  int perm[N_ITEMS];
  for (int i = 0; i < N_ITEMS; i++) perm[i] = i;
  for (int i = N_ITEMS - 1; i > 0; i--) {
    uint64_t u;
    o3m_rng_u64(r, &u);
    int j = (int)(u % (uint64_t)(i + 1));
    int t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
  for (int k = 0; k < K; k++) {
    snprintf(names[k], 16, "i%d", perm[k]);
    items[k] = names[k];
  }
}

static void expect_stats(uint64_t rounds, uint64_t updates, uint32_t pending) {
  ap_stats st;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert(eq(int, ap_client_stats(cli, &st, &e), 0), "stats: %s", o3m_err_message(&e));
  cr_assert(eq(u64, st.rounds, rounds));
  cr_assert(eq(u64, st.updates, updates));
  cr_assert(eq(u32, st.pending, pending));
}

/* Runs n rounds against the federation and the central policy side by side:
 * same users and candidates, same rewards, and asserts that every decision
 * and score agree. Odd rounds pass the AP's own features in the request
 * instead of letting it read its tables. */
static void lossless_rounds(ap_policy_config *pc, int n) {
  central c;
  central_load(&c);
  ap_policy *pol;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert(eq(int, ap_policy_create(&pol, pc, &e), 0), "%s", o3m_err_message(&e));
  o3m_rng *r;
  cr_assert(eq(int, o3m_rng_create_seeded_insecure(&r, 99), 0));
  /* A hidden linear click model over the unmasked context. */
  double theta[D] = {0.9, -0.4, 0.3, 0.5, -0.7, 0.2, 0.6, -0.1};

  double t0 = now_s();
  for (int t = 0; t < n; t++) {
    char user[16], names[K_MAX][16];
    const char *items[K_MAX];
    uint64_t u;
    o3m_rng_u64(r, &u);
    snprintf(user, sizeof user, "u%d", (int)(u % N_USERS));
    int K = 2 + (int)(u / N_USERS % (K_MAX - 1)); /* 2..K_MAX */
    draw_items(r, K, items, names);
    central_contexts(&c, user, K, items);

    const double *own = NULL;
    size_t n_own = 0;
    if (t % 2 == 1) {
      cr_assert(eq(int, pp_features_fill(c.ap, user, K, items, c.blk, NULL, NULL), 0));
      own = c.blk;
      n_own = (size_t)K * 3;
    }
    int arms[K_MAX];
    uint32_t arms_u[K_MAX];
    for (int k = 0; k < K; k++) arms_u[k] = (uint32_t)(arms[k] = atoi(items[k] + 1));
    /* Disjoint: even rounds let the AP use its catalog, odd ones send arms. */
    const uint32_t *send_arms = pc->model == AP_MODEL_DISJOINT && t % 2 == 1 ? arms_u : NULL;

    ap_recommendation rec;
    int rc = ap_client_recommend(cli, user, K, items, send_arms, own, n_own, &rec, &e);
    cr_assert(eq(int, rc, 0), "round %d: %s: %s", t, o3m_errname(rc), o3m_err_message(&e));
    int chosen;
    double score;
    cr_assert(eq(int, ap_policy_choose(pol, K, c.X, arms, &chosen, &score), 0));
    cr_assert(eq(int, rec.candidate, chosen), "round %d: federated chose %d, central %d", t,
              rec.candidate, chosen);
    cr_assert(eq(str, (char *)rec.item, (char *)items[chosen]));
    cr_assert(le(dbl, fabs(rec.score - score), 1e-9 * fmax(1.0, fabs(score))),
              "round %d: score %.17g vs central %.17g", t, rec.score, score);

    const double *x = c.X + (size_t)chosen * D;
    double z = 0;
    for (int i = 0; i < D; i++) z += theta[i] * x[i];
    double reward = 1.0 / (1.0 + exp(-z));
    uint64_t updates;
    rc = ap_client_reward(cli, rec.decision, reward, &updates, &e);
    cr_assert(eq(int, rc, 0), "round %d reward: %s", t, o3m_err_message(&e));
    cr_assert(eq(u64, updates, (uint64_t)t + 1));
    cr_assert(eq(int, ap_policy_update(pol, arms[chosen], x, reward), 0));
  }
  double dt = now_s() - t0;
  fprintf(stderr, "test_active: %d rounds (recommend + reward) in %.3f s, %.0f rounds/s\n", n, dt,
          n / dt);

  ap_stats st;
  cr_assert(eq(int, ap_client_stats(cli, &st, &e), 0));
  cr_assert(eq(u64, st.rounds, (uint64_t)n));
  cr_assert(eq(u64, st.updates, (uint64_t)n));
  cr_assert(eq(u32, st.pending, 0));
  if (pc->model == AP_MODEL_SHARED) {
    double tn = ap_policy_theta_norm(pol, 0);
    cr_assert(le(dbl, fabs(st.theta_norm - tn), 1e-9 * fmax(1.0, tn)),
              "theta norm %.17g vs central %.17g", st.theta_norm, tn);
  }
  o3m_rng_destroy(r);
  ap_policy_destroy(pol);
  central_free(&c);
}

/* ------------------------------------------------------------ tests */

TestSuite(active, .timeout = 60);

Test(active, linucb_decisions_equal_central_for_200_rounds, .init = fed_up_linucb,
     .fini = fed_down) {
  /* The AP holds a block of the seeded mask the PMG drew. */
  ap_info info;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert(eq(int, ap_client_info(cli, &info, &e), 0), "%s", o3m_err_message(&e));
  o3m_rng *r;
  o3m_mask *m;
  cr_assert(eq(int, o3m_rng_create_seeded_insecure(&r, MASK_SEED), 0));
  cr_assert(eq(int, o3m_mask_generate(&m, D, r), 0));
  cr_assert(eq(u64, info.mask_id, o3m_mask_id(m)));
  cr_assert(eq(u32, info.dim, D));
  cr_assert(eq(u32, info.n_parties, 3));
  cr_assert(eq(int, info.role, 3));
  o3m_mask_destroy(m);
  o3m_rng_destroy(r);

  ap_policy_config pc;
  ap_policy_config_default(&pc);
  pc.algo = AP_ALGO_LINUCB;
  pc.model = AP_MODEL_SHARED;
  pc.d = D;
  pc.max_candidates = K_MAX;
  pc.alpha = 1.0;
  pc.lambda = 1.0;
  lossless_rounds(&pc, 200);
}

Test(active, disjoint_lints_decisions_equal_central_draw_by_draw, .init = fed_up_lints_disjoint,
     .fini = fed_down) {
  ap_policy_config pc;
  ap_policy_config_default(&pc);
  pc.algo = AP_ALGO_LINTS;
  pc.model = AP_MODEL_DISJOINT;
  pc.d = D;
  pc.n_arms = N_ITEMS;
  pc.max_candidates = K_MAX;
  pc.v = 0.5;
  pc.lambda = 1.0;
  pc.seed = TS_SEED;
  lossless_rounds(&pc, 100);
}

static void recommend_ok(ap_recommendation *rec) {
  const char *items[3] = {"i1", "i2", "i3"};
  o3m_err e;
  o3m_err_clear(&e);
  int rc = ap_client_recommend(cli, "u1", 3, items, NULL, NULL, 0, rec, &e);
  cr_assert(eq(int, rc, 0), "%s: %s", o3m_errname(rc), o3m_err_message(&e));
}

Test(active, reward_errors_change_nothing, .init = fed_up_linucb, .fini = fed_down) {
  ap_recommendation a, b;
  recommend_ok(&a);
  recommend_ok(&b);
  cr_assert(eq(u64, b.decision, a.decision + 1));
  o3m_err e;
  o3m_err_clear(&e);
  uint64_t updates = 0;
  cr_assert(eq(int, ap_client_reward(cli, a.decision, 1.0, &updates, &e), 0));
  cr_assert(eq(u64, updates, 1));
  expect_stats(2, 1, 1);

  /* Twice: ALREADY_EXISTS. */
  cr_assert(eq(int, ap_client_reward(cli, a.decision, 1.0, &updates, &e), O3M_EEXISTS));
  /* Never issued: NOT_FOUND. */
  cr_assert(eq(int, ap_client_reward(cli, b.decision + 1000, 0.5, &updates, &e), O3M_ENOTFOUND));
  cr_assert(eq(int, ap_client_reward(cli, 0, 0.5, &updates, &e), O3M_ENOTFOUND));
  /* Out of [0, 1], NaN and infinity: INVALID_ARGUMENT naming the field. */
  double bad[] = {1.5, -0.1, NAN, INFINITY};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    o3m_err_clear(&e);
    cr_assert(eq(int, ap_client_reward(cli, b.decision, bad[i], &updates, &e), O3M_EINVAL),
              "reward %g", bad[i]);
    cr_assert_not_null(strstr(o3m_err_message(&e), "reward"), "%s", o3m_err_message(&e));
  }
  expect_stats(2, 1, 1);
  /* b is still open and can be rewarded. */
  cr_assert(eq(int, ap_client_reward(cli, b.decision, 0.0, &updates, &e), 0));
  cr_assert(eq(u64, updates, 2));
  expect_stats(2, 2, 0);
}

Test(active, malformed_requests_are_invalid_argument, .init = fed_up_linucb, .fini = fed_down) {
  o3m_err e;
  ap_recommendation rec;
  const char *dup[4] = {"i1", "i2", "i3", "i2"};
  o3m_err_clear(&e);
  cr_assert(eq(int, ap_client_recommend(cli, "u1", 4, dup, NULL, NULL, 0, &rec, &e), O3M_EINVAL));
  cr_assert_not_null(strstr(o3m_err_message(&e), "items[3] duplicates items[1]"), "%s",
                     o3m_err_message(&e));
  /* K = 0. */
  cr_assert(eq(int, ap_client_recommend(cli, "u1", 0, dup, NULL, NULL, 0, &rec, &e), O3M_EINVAL));
  /* K over the cap of 8. */
  const char *many[K_MAX + 1];
  char names[K_MAX + 1][16];
  for (int k = 0; k <= K_MAX; k++) {
    snprintf(names[k], 16, "i%d", k);
    many[k] = names[k];
  }
  cr_assert(eq(int, ap_client_recommend(cli, "u1", K_MAX + 1, many, NULL, NULL, 0, &rec, &e),
               O3M_EINVAL));
  /* own_features of the wrong length, or not finite. */
  double own[9] = {0};
  o3m_err_clear(&e);
  cr_assert(eq(int, ap_client_recommend(cli, "u1", 3, many, NULL, own, 8, &rec, &e), O3M_EINVAL));
  cr_assert_not_null(strstr(o3m_err_message(&e), "own_features"), "%s", o3m_err_message(&e));
  own[4] = NAN;
  cr_assert(eq(int, ap_client_recommend(cli, "u1", 3, many, NULL, own, 9, &rec, &e), O3M_EINVAL));
  expect_stats(0, 0, 0);
  /* The maximum itself is fine. */
  cr_assert(eq(int, ap_client_recommend(cli, "u1", K_MAX, many, NULL, NULL, 0, &rec, &e), 0),
            "%s", o3m_err_message(&e));
  expect_stats(1, 0, 1);
}

Test(active, client_without_certificate_is_refused, .init = fed_up_linucb, .fini = fed_down) {
  ap_client *anon;
  client_create(&anon, 0);
  ap_recommendation rec;
  const char *items[2] = {"i1", "i2"};
  o3m_err e;
  o3m_err_clear(&e);
  int rc = ap_client_recommend(anon, "u1", 2, items, NULL, NULL, 0, &rec, &e);
  ap_client_destroy(anon);
  cr_assert(eq(int, rc, O3M_EUNAVAILABLE), "%s: %s", o3m_errname(rc), o3m_err_message(&e));
  expect_stats(0, 0, 0);
}

/* Retries a recommendation for up to 10 s (a channel reconnects with a
 * backoff of up to 2 s); asserts that it eventually works. */
static void recommend_eventually(ap_recommendation *rec) {
  const char *items[3] = {"i4", "i5", "i6"};
  o3m_err e;
  int rc = -1;
  double t0 = now_s();
  while (now_s() - t0 < 10) {
    o3m_err_clear(&e);
    rc = ap_client_recommend(cli, "u2", 3, items, NULL, NULL, 0, rec, &e);
    if (rc == 0) return;
    sleep_ms(100);
  }
  cr_fatal("no recovery in 10 s: %s: %s", o3m_errname(rc), o3m_err_message(&e));
}

Test(active, stopped_or_killed_passive_fails_the_round_and_recovers, .init = fed_up_linucb,
     .fini = fed_down) {
  ap_recommendation rec;
  recommend_ok(&rec);
  expect_stats(1, 0, 1);

  /* pp2 frozen: the round misses the deadline, names pp2, changes nothing. */
  cr_assert(eq(int, kill(pid[P_PP2], SIGSTOP), 0));
  stopped[P_PP2] = 1;
  const char *items[3] = {"i1", "i2", "i3"};
  o3m_err e;
  for (int i = 0; i < 3; i++) {
    o3m_err_clear(&e);
    double t0 = now_s();
    int rc = ap_client_recommend(cli, "u1", 3, items, NULL, NULL, 0, &rec, &e);
    double dt = now_s() - t0;
    cr_assert(rc == O3M_EDEADLINE || rc == O3M_EUNAVAILABLE, "%s: %s", o3m_errname(rc),
              o3m_err_message(&e));
    cr_assert(lt(dbl, dt, DEADLINE_MS / 1000.0 + 0.7), "the round took %.3f s", dt);
    cr_assert_not_null(strstr(o3m_err_message(&e), "pp2"), "%s", o3m_err_message(&e));
  }
  expect_stats(1, 0, 1);
  cr_assert(eq(int, kill(pid[P_PP2], SIGCONT), 0));
  stopped[P_PP2] = 0;
  recommend_eventually(&rec);
  expect_stats(2, 0, 2);

  /* pp1 killed: UNAVAILABLE at once, nothing changes; restarted, it works. */
  stop_proc(P_PP1, SIGKILL);
  o3m_err_clear(&e);
  double t0 = now_s();
  int rc = ap_client_recommend(cli, "u1", 3, items, NULL, NULL, 0, &rec, &e);
  double dt = now_s() - t0;
  cr_assert(rc == O3M_EUNAVAILABLE || rc == O3M_EDEADLINE, "%s: %s", o3m_errname(rc),
            o3m_err_message(&e));
  cr_assert(lt(dbl, dt, DEADLINE_MS / 1000.0 + 0.7), "the round took %.3f s", dt);
  cr_assert_not_null(strstr(o3m_err_message(&e), "pp1"), "%s", o3m_err_message(&e));
  expect_stats(2, 0, 2);
  spawn(P_PP1, NULL);
  wait_ready(P_PP1);
  recommend_eventually(&rec);
  expect_stats(3, 0, 3);
  /* The decision made after the recovery takes its reward. */
  uint64_t updates;
  cr_assert(eq(int, ap_client_reward(cli, rec.decision, 1.0, &updates, &e), 0), "%s",
            o3m_err_message(&e));
  cr_assert(eq(u64, updates, 1));
}

/* Runs o3m-cli with args (a shell fragment) and captures stdout and
 * stderr; returns the exit status. */
static int run_cli(const char *args, char *out, size_t out_len) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "%s/o3m-cli --config %s %s 2>&1", BIN, conf, args);
  FILE *p = popen(cmd, "r");
  cr_assert_not_null(p);
  size_t n = fread(out, 1, out_len - 1, p);
  out[n] = '\0';
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

Test(active, cli_commands_and_exit_codes, .init = fed_up_linucb, .fini = fed_down) {
  char out[4096], args[1024];
  cr_assert(eq(int, run_cli("--as ap recommend --user u3 --items i1,i2,i3", out, sizeof out),
               0), "%s", out);
  unsigned long long id;
  char item[16];
  int cand;
  cr_assert(eq(int, sscanf(out, "decision=%llu item=%15s candidate=%d score=", &id, item, &cand),
               3), "%s", out);
  char expect[16];
  snprintf(expect, sizeof expect, "i%d", cand + 1);
  cr_assert(eq(str, item, expect));

  snprintf(args, sizeof args, "--as ap reward --decision %llu --reward 0.25", id);
  cr_assert(eq(int, run_cli(args, out, sizeof out), 0), "%s", out);
  cr_assert(eq(str, out, "updates=1\n"));
  cr_assert(eq(int, run_cli(args, out, sizeof out), 1), "%s", out);
  cr_assert_not_null(strstr(out, "EXISTS"), "%s", out);

  cr_assert(eq(int, run_cli("--as ap stats", out, sizeof out), 0), "%s", out);
  cr_assert_not_null(strstr(out, "rounds=1\nupdates=1\npending=0\nexpired=0\n"), "%s", out);
  cr_assert_not_null(strstr(out, "algo=linucb\nmodel=shared\n"), "%s", out);

  /* A front end's own certificate instead of a party's. */
  snprintf(args, sizeof args, "--cert %s/certs/client.pem --key %s/certs/client.key --ca "
           "%s/certs/ca.pem health", work, work, work);
  cr_assert(eq(int, run_cli(args, out, sizeof out), 0), "%s", out);
  cr_assert(eq(str, out, "SERVING\n"));
  /* health of another daemon. */
  snprintf(args, sizeof args, "--as ap --server-name pp1 health --target 127.0.0.1:%d",
           port[P_PP1]);
  cr_assert(eq(int, run_cli(args, out, sizeof out), 0), "%s", out);
  cr_assert(eq(str, out, "SERVING\n"));

  cr_assert(eq(int, run_cli("--as ap recommend --user u3 --items i1,i1", out, sizeof out), 1));
  cr_assert_not_null(strstr(out, "INVAL"), "%s", out);
  cr_assert(eq(int, run_cli("--as ap reward --decision x --reward 1", out, sizeof out), 2));
  cr_assert(eq(int, run_cli("--as ap frobnicate", out, sizeof out), 2));
  cr_assert(eq(int, run_cli("stats", out, sizeof out), 2));
}

Test(active, sigterm_exits_zero, .init = fed_up_linucb, .fini = fed_down) {
  ap_recommendation rec;
  recommend_ok(&rec);
  double t0 = now_s();
  int status = stop_proc(P_AP, SIGTERM);
  double dt = now_s() - t0;
  int exited = status != -1 && WIFEXITED(status);
  int code = exited ? WEXITSTATUS(status) : -1;
  cr_assert(exited, "status %d", status);
  cr_assert(eq(int, code, 0));
  cr_assert(lt(dbl, dt, 3.0));
  /* The stop line carries the counters. */
  char cmd[700];
  snprintf(cmd, sizeof cmd, "grep -q 'stopped: rounds=1 ' %s/ap.log", work);
  cr_assert(eq(int, system(cmd), 0), "no stop line in ap.log");
}

/* Regression: a gRPC channel whose first connection attempts were refused
 * kept failing every call for ~30 s after its peer came up (until gRPC
 * re-resolved the target), so an AP started before its passive parties
 * waited half a minute at start-up. The AP now rebuilds such channels. */
Test(active, passive_started_after_the_ap_is_used_within_seconds, .init = fed_up_ap_first,
     .fini = fed_down) {
  sleep_ms(1500);
  struct stat st;
  cr_assert(ne(int, stat(path_in("ap.ready"), &st), 0), "the AP is ready without its peers");
  spawn(P_PP1, NULL);
  spawn(P_PP2, NULL);
  wait_ready(P_PP1);
  wait_ready(P_PP2);
  double t0 = now_s();
  wait_ready(P_AP);
  double dt = now_s() - t0;
  cr_assert(lt(dbl, dt, 3.0), "the AP became ready %.3f s after its passive parties", dt);
  client_create(&cli, 1);
  ap_recommendation rec;
  recommend_ok(&rec);
  expect_stats(1, 0, 1);
}

/* ------------------------------------------------------------ batching */

/* A raw RPC client of the AP with the test's certificate: start and finish
 * let one thread keep several Recommend calls in flight, one per client. */
static o3m_rpc_client *raw_client(void) {
  o3m_rpc_client_config cc;
  o3m_rpc_client_config_default(&cc);
  char target[64];
  snprintf(target, sizeof target, "127.0.0.1:%d", port[P_AP]);
  cc.target = target;
  cc.tls.ca_file = path_in("certs/ca.pem");
  cc.tls.cert_file = path_in("certs/client.pem");
  cc.tls.key_file = path_in("certs/client.key");
  cc.tls.server_name = "ap";
  cc.deadline_ms = 5000;
  o3m_rpc_client *c;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert(eq(int, o3m_rpc_client_create(&c, &cc, &e), 0), "%s", o3m_err_message(&e));
  /* Connect now, so that the calls of the test only queue at the AP. */
  O3m__V1__InfoRequest ir = O3M__V1__INFO_REQUEST__INIT;
  ProtobufCMessage *m;
  cr_assert(eq(int, o3m_rpc_client_call(c, O3M_PATH_ACTIVE_INFO, &ir.base,
                                        &o3m__v1__node_info__descriptor, &m, &e), 0),
            "%s", o3m_err_message(&e));
  return c;
}

static uint64_t fanouts(o3m_rpc_client *c) {
  O3m__V1__StatsRequest req = O3M__V1__STATS_REQUEST__INIT;
  ProtobufCMessage *m;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert(eq(int, o3m_rpc_client_call(c, O3M_PATH_ACTIVE_STATS, &req.base,
                                        &o3m__v1__active_stats__descriptor, &m, &e), 0),
            "%s", o3m_err_message(&e));
  return ((const O3m__V1__ActiveStats *)m)->fanouts;
}

enum { BURST = 8 };

/* One round of a burst: user and candidates drawn from r. */
typedef struct burst_round {
  char user[16];
  char names[K_MAX][16];
  const char *items[K_MAX];
  int K;
} burst_round;

static void burst_draw(o3m_rng *r, burst_round *b) {
  uint64_t u;
  o3m_rng_u64(r, &u);
  snprintf(b->user, sizeof b->user, "u%d", (int)(u % N_USERS));
  b->K = 2 + (int)(u / N_USERS % (K_MAX - 1));
  draw_items(r, b->K, b->items, b->names);
}

static void burst_start(o3m_rpc_client *c, const burst_round *b) {
  O3m__V1__RecommendRequest req = O3M__V1__RECOMMEND_REQUEST__INIT;
  req.user = (char *)b->user;
  req.n_items = (size_t)b->K;
  req.items = (char **)b->items;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert(eq(int, o3m_rpc_client_start(c, O3M_PATH_ACTIVE_RECOMMEND, &req.base,
                                         &o3m__v1__recommendation__descriptor, &e), 0),
            "%s", o3m_err_message(&e));
}

/* Sends a burst of BURST rounds on BURST clients so that they reach the AP
 * together: pp2 is frozen first, so the first round's fan-out waits for it
 * while the other rounds queue behind it; pp2 is thawed after thaw_ms (0:
 * left frozen, every round then misses the deadline). */
static void burst_send(o3m_rpc_client **c, const burst_round *b, int thaw_ms) {
  cr_assert(eq(int, kill(pid[P_PP2], SIGSTOP), 0));
  stopped[P_PP2] = 1;
  burst_start(c[0], &b[0]);
  sleep_ms(30);
  for (int i = 1; i < BURST; i++) burst_start(c[i], &b[i]);
  if (thaw_ms > 0) {
    sleep_ms(thaw_ms);
    cr_assert(eq(int, kill(pid[P_PP2], SIGCONT), 0));
    stopped[P_PP2] = 0;
  }
}

Test(active, concurrent_rounds_are_batched_and_equal_central, .init = fed_up_linucb,
     .fini = fed_down) {
  ap_policy_config pc;
  ap_policy_config_default(&pc);
  pc.algo = AP_ALGO_LINUCB;
  pc.model = AP_MODEL_SHARED;
  pc.d = D;
  pc.max_candidates = K_MAX;
  pc.alpha = 1.0;
  pc.lambda = 1.0;
  ap_policy *pol;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert(eq(int, ap_policy_create(&pol, &pc, &e), 0), "%s", o3m_err_message(&e));
  central c;
  central_load(&c);
  o3m_rng *r;
  cr_assert(eq(int, o3m_rng_create_seeded_insecure(&r, 5), 0));
  o3m_rpc_client *rc_[BURST];
  for (int i = 0; i < BURST; i++) rc_[i] = raw_client();

  /* Two bursts with rewards in between, so the second runs on a learned
   * model; the central policy gets the same rewards in the same order. */
  uint64_t fan0 = fanouts(rc_[0]), rounds = 0;
  for (int burst = 0; burst < 2; burst++) {
    burst_round b[BURST];
    for (int i = 0; i < BURST; i++) burst_draw(r, &b[i]);
    burst_send(rc_, b, 120);
    uint64_t ids[BURST];
    int chosen_c[BURST];
    for (int i = 0; i < BURST; i++) {
      ProtobufCMessage *m;
      o3m_err_clear(&e);
      int rc = o3m_rpc_client_finish(rc_[i], &m, &e);
      cr_assert(eq(int, rc, 0), "burst %d round %d: %s: %s", burst, i, o3m_errname(rc),
                o3m_err_message(&e));
      const O3m__V1__Recommendation *rec = (const O3m__V1__Recommendation *)m;
      /* No reward inside a burst: every round sees the same model, in any
       * order. */
      central_contexts(&c, b[i].user, b[i].K, b[i].items);
      int chosen;
      double score;
      cr_assert(eq(int, ap_policy_choose(pol, b[i].K, c.X, NULL, &chosen, &score), 0));
      cr_assert(eq(int, (int)rec->candidate, chosen), "burst %d round %d: federated %u, central %d",
                burst, i, rec->candidate, chosen);
      cr_assert(eq(str, rec->item, (char *)b[i].items[chosen]));
      cr_assert(le(dbl, fabs(rec->score - score), 1e-9 * fmax(1.0, fabs(score))),
                "burst %d round %d: score %.17g vs %.17g", burst, i, rec->score, score);
      ids[i] = rec->decision;
      chosen_c[i] = chosen;
      for (int j = 0; j < i; j++) cr_assert(ne(u64, ids[j], ids[i]), "decision id issued twice");
    }
    rounds += BURST;
    for (int i = 0; i < BURST; i++) {
      central_contexts(&c, b[i].user, b[i].K, b[i].items);
      const double *x = c.X + (size_t)chosen_c[i] * D;
      double reward = (i % 3) ? 1.0 : 0.0;
      uint64_t updates;
      cr_assert(eq(int, ap_client_reward(cli, ids[i], reward, &updates, &e), 0), "%s",
                o3m_err_message(&e));
      cr_assert(eq(int, ap_policy_update(pol, 0, x, reward), 0));
    }
  }
  uint64_t fan = fanouts(rc_[0]) - fan0;
  fprintf(stderr, "test_active: %llu rounds in %llu fan-outs\n", (unsigned long long)rounds,
          (unsigned long long)fan);
  /* Normally 2 per burst (the first round, then the 7 that queued). */
  cr_assert(le(u64, fan, rounds / 2), "%llu rounds took %llu fan-outs: not batched",
            (unsigned long long)rounds, (unsigned long long)fan);
  expect_stats(rounds, rounds, 0);
  ap_stats st;
  cr_assert(eq(int, ap_client_stats(cli, &st, &e), 0));
  double tn = ap_policy_theta_norm(pol, 0);
  cr_assert(le(dbl, fabs(st.theta_norm - tn), 1e-9 * fmax(1.0, tn)), "theta %.17g vs %.17g",
            st.theta_norm, tn);
  for (int i = 0; i < BURST; i++) o3m_rpc_client_destroy(rc_[i]);
  o3m_rng_destroy(r);
  central_free(&c);
  ap_policy_destroy(pol);
}

Test(active, failing_passive_fails_the_whole_batch_and_changes_nothing, .init = fed_up_linucb,
     .fini = fed_down) {
  ap_recommendation first, rec;
  recommend_ok(&first);
  expect_stats(1, 0, 1);
  o3m_rpc_client *rc_[BURST];
  for (int i = 0; i < BURST; i++) rc_[i] = raw_client();
  o3m_rng *r;
  cr_assert(eq(int, o3m_rng_create_seeded_insecure(&r, 6), 0));
  burst_round b[BURST];
  for (int i = 0; i < BURST; i++) burst_draw(r, &b[i]);
  uint64_t fan0 = fanouts(rc_[0]);
  /* pp2 stays frozen: the first round misses the deadline, and so does the
   * batch of the seven that queued meanwhile. */
  burst_send(rc_, b, 0);
  o3m_err e;
  for (int i = 0; i < BURST; i++) {
    ProtobufCMessage *m;
    o3m_err_clear(&e);
    int rc = o3m_rpc_client_finish(rc_[i], &m, &e);
    cr_assert(rc == O3M_EDEADLINE || rc == O3M_EUNAVAILABLE, "round %d: %s: %s", i,
              o3m_errname(rc), o3m_err_message(&e));
    cr_assert_not_null(strstr(o3m_err_message(&e), "pp2"), "%s", o3m_err_message(&e));
  }
  uint64_t fan = fanouts(rc_[0]) - fan0;
  cr_assert(le(u64, fan, BURST / 2), "%d rounds took %llu fan-outs: not batched", BURST,
            (unsigned long long)fan);
  /* Nothing changed: no round, no pending decision, no id used up. */
  expect_stats(1, 0, 1);
  cr_assert(eq(int, kill(pid[P_PP2], SIGCONT), 0));
  stopped[P_PP2] = 0;
  recommend_eventually(&rec);
  cr_assert(eq(u64, rec.decision, first.decision + 1));
  expect_stats(2, 0, 2);
  for (int i = 0; i < BURST; i++) o3m_rpc_client_destroy(rc_[i]);
  o3m_rng_destroy(r);
}
