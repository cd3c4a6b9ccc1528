/* fed_proc.c -- see fed_proc.h. The helper's state (the directory and the
 * spawned processes) is file-scope because Criterion's .init/.fini take no
 * argument; each test runs in its own process, so it never leaks across
 * tests. The AP tests' federation (fed_net, fed_tables) keeps no state of
 * its own. */
#include "fed_proc.h"
#include "o3m_secagg.h"
#include "o3m.pb-c.h"
#include "o3m_wire.h"
#include "eval_tables.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <linux/tcp.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_PROCS 16

/* The pids spawned and not yet reaped (0: free slot). Pids, not fed_proc
 * pointers: a test's fed_proc lives on its stack, which is gone when the
 * suite's .fini runs. */
static char g_dir[256];
static pid_t g_pids[MAX_PROCS];

void fed_sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

double fed_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

const char *fed_dir(void) {
  if (!g_dir[0]) {
    snprintf(g_dir, sizeof g_dir, "/tmp/o3m_fed_XXXXXX");
    cr_assert_not_null(mkdtemp(g_dir), "mkdtemp: %s", strerror(errno));
  }
  return g_dir;
}

void fed_make_certs(const char *subdir, const char *names) {
  fed_make_certs_dns(subdir, NULL, names);
}

void fed_make_certs_dns(const char *subdir, const char *alt, const char *names) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "'%s/scripts/make-certs.sh' %s%s%s'%s/%s' %s", O3M_SOURCE_DIR,
           alt ? "--dns '" : "", alt ? alt : "", alt ? "' " : "", fed_dir(), subdir, names);
  int rc = system(cmd);
  cr_assert_eq(rc, 0, "make-certs.sh failed (%d): %s", rc, cmd);
}

/* The ports fed_free_port has reserved: each a socket bound to
 * 127.0.0.1:PORT with SO_REUSEADDR and not listening, held until
 * fed_release_port or fed_cleanup (see fed_free_port in fed_proc.h for why
 * that keeps the port ours and still lets the daemon bind it). */
#define MAX_RESERVED 64
static struct {
  int fd, port;
} g_resv[MAX_RESERVED];
static int g_n_resv;

int fed_free_port(void) {
  cr_assert_lt(g_n_resv, MAX_RESERVED, "more than %d ports reserved at once", MAX_RESERVED);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  cr_assert_geq(fd, 0, "socket: %s", strerror(errno));
  int one = 1;
  cr_assert_eq(setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one), 0,
               "SO_REUSEADDR: %s", strerror(errno));
  struct sockaddr_in a = {0};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
      getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
    int err = errno;
    close(fd);
    cr_assert_fail("reserving a port on 127.0.0.1: %s", strerror(err));
  }
  g_resv[g_n_resv].fd = fd;
  g_resv[g_n_resv].port = ntohs(a.sin_port);
  return g_resv[g_n_resv++].port;
}

void fed_release_port(int port) {
  for (int i = 0; i < g_n_resv; i++)
    if (g_resv[i].port == port) {
      close(g_resv[i].fd);
      g_resv[i] = g_resv[--g_n_resv];
      return;
    }
}

/* Closes every reservation (fed_cleanup). */
static void release_ports(void) {
  while (g_n_resv > 0) close(g_resv[--g_n_resv].fd);
}

const char *fed_path(const char *name) {
  static char paths[8][512];
  static int slot;
  char *p = paths[slot++ % 8];
  snprintf(p, 512, "%s/%s", fed_dir(), name);
  return p;
}

const char *fed_write(const char *name, const char *text) {
  const char *p = fed_path(name);
  FILE *f = fopen(p, "w");
  cr_assert_not_null(f, "%s: %s", p, strerror(errno));
  fputs(text, f);
  cr_assert_eq(fclose(f), 0);
  return p;
}

void fed_fingerprint(const char *path, unsigned char out[O3M_FINGERPRINT_BYTES]) {
  o3m_config *c;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert_eq(o3m_config_load(&c, path, &e), 0, "%s", o3m_err_message(&e));
  cr_assert_eq(o3m_fingerprint_compute(c, out, &e), 0, "%s", o3m_err_message(&e));
  o3m_config_destroy(c);
}

void fed_spawn(fed_proc *p, const char *name, const char *bin, const char *const *args) {
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "%s", name);
  snprintf(p->log, sizeof p->log, "%s/%s.log", fed_dir(), name);
  snprintf(p->ready, sizeof p->ready, "%s/%s.ready", fed_dir(), name);
  unlink(p->ready);
  char path[512];
  /* An absolute path is a program of the system (nats-server), which
   * gets no --ready-file. */
  if (bin[0] == '/') snprintf(path, sizeof path, "%s", bin);
  else snprintf(path, sizeof path, "%s/%s", O3M_BIN_DIR, bin);
  const char *argv[32];
  int n = 0;
  argv[n++] = path;
  for (int i = 0; args[i]; i++) {
    cr_assert_lt(n, 28);
    argv[n++] = args[i];
  }
  if (bin[0] != '/') {
    argv[n++] = "--ready-file";
    argv[n++] = p->ready;
  }
  argv[n] = NULL;

  cr_assert_eq(access(path, X_OK), 0, "%s is not built", path);

  /* fork and exec rather than posix_spawn, for PR_SET_PDEATHSIG: a test
   * process killed by Criterion's timeout takes its daemons with it. The
   * files are opened here, where a failure can be asserted; the child only
   * makes async-signal-safe calls (the test may have threads). */
  int in = open("/dev/null", O_RDONLY | O_CLOEXEC);
  int out = open(p->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  cr_assert(in >= 0 && out >= 0, "%s: %s", p->log, strerror(errno));
  pid_t parent = getpid();
  p->pid = fork();
  if (p->pid == 0) {
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(127);
    if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(out, 2) < 0) _exit(127);
    execv(path, (char *const *)argv);
    _exit(127);
  }
  int err = errno;
  close(in);
  close(out);
  cr_assert_gt(p->pid, 0, "fork for %s: %s", path, strerror(err));
  int i = 0;
  while (i < MAX_PROCS && g_pids[i]) i++;
  if (i == MAX_PROCS) {
    kill(p->pid, SIGKILL);
    cr_assert_fail("more than %d daemons at once", MAX_PROCS);
  }
  g_pids[i] = p->pid;
}

/* Reaps p if it has exited; returns 1 if it has. */
static int reap(fed_proc *p, int flags) {
  if (!p->pid) return 1;
  int st;
  pid_t r = waitpid(p->pid, &st, flags);
  if (r != p->pid) return 0;
  p->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  for (int i = 0; i < MAX_PROCS; i++)
    if (g_pids[i] == p->pid) g_pids[i] = 0;
  p->pid = 0;
  return 1;
}

const char *fed_log(const fed_proc *p) {
  static char buf[6000];
  buf[0] = '\0';
  FILE *f = fopen(p->log, "r");
  if (!f) return "(no log)";
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

const char *fed_log_tail(const fed_proc *p) {
  static char buf[6000];
  buf[0] = '\0';
  FILE *f = fopen(p->log, "r");
  if (!f) return "(no log)";
  if (fseek(f, 0, SEEK_END) == 0) {
    long end = ftell(f);
    if (end > (long)sizeof buf - 1) fseek(f, end - (long)(sizeof buf - 1), SEEK_SET);
    else rewind(f);
  }
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

int fed_wait_ready(fed_proc *p, int timeout_ms) {
  for (int waited = 0;; waited += 20) {
    FILE *f = fopen(p->ready, "r");
    if (f) {
      int port = 0;
      int ok = fscanf(f, "%d", &port) == 1;
      fclose(f);
      cr_assert(ok && port > 0, "%s: ready file without a port", p->name);
      return port;
    }
    cr_assert(!reap(p, WNOHANG), "%s exited with %d before it was ready:\n%s", p->name,
              p->status, fed_log(p));
    cr_assert_lt(waited, timeout_ms, "%s not ready after %d ms:\n%s", p->name, timeout_ms,
                 fed_log(p));
    fed_sleep_ms(20);
  }
}

int fed_wait_exit(fed_proc *p, int timeout_ms) {
  for (int waited = 0;; waited += 20) {
    if (reap(p, WNOHANG)) return p->status;
    if (waited >= timeout_ms) return -1;
    fed_sleep_ms(20);
  }
}

int fed_stop(fed_proc *p, int sig, int timeout_ms) {
  if (!p->pid) return p->status;
  /* A stopped process would hold sig pending until the timeout. */
  kill(p->pid, SIGCONT);
  kill(p->pid, sig);
  int rc = fed_wait_exit(p, timeout_ms);
  if (rc >= 0) return rc;
  kill(p->pid, SIGKILL);
  reap(p, 0);
  return -1;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(path);
}

void fed_cleanup(void) {
  for (int i = 0; i < MAX_PROCS; i++)
    if (g_pids[i]) {
      kill(g_pids[i], SIGKILL);
      waitpid(g_pids[i], NULL, 0);
      g_pids[i] = 0;
    }
  if (g_dir[0] && getenv("O3M_KEEP_TEST_DIR"))
    fprintf(stderr, "kept %s\n", g_dir);
  else if (g_dir[0])
    nftw(g_dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
  g_dir[0] = '\0';
  release_ports();
}

/* fed_client and fed_client_ready: the paths are formatted on the stack
 * and read by o3m_rpc_client_create, so that threads may make clients at
 * once. */
static o3m_rpc_client *client_make(const char *target, const char *ca_dir, const char *cert_dir,
                                   const char *name, const char *server_name, int deadline_ms,
                                   int wait_for_ready) {
  char ca[512], pem[512], key[512];
  o3m_rpc_client_config cfg;
  o3m_rpc_client_config_default(&cfg);
  cfg.target = target;
  cfg.deadline_ms = deadline_ms;
  cfg.wait_for_ready = wait_for_ready;
  if (!ca_dir) {
    cfg.insecure = 1;
  } else {
    snprintf(ca, sizeof ca, "%s/%s/ca.pem", fed_dir(), ca_dir);
    cfg.tls.ca_file = ca;
    cfg.tls.server_name = server_name;
    if (name) {
      snprintf(pem, sizeof pem, "%s/%s/%s.pem", fed_dir(), cert_dir, name);
      snprintf(key, sizeof key, "%s/%s/%s.key", fed_dir(), cert_dir, name);
      cfg.tls.cert_file = pem;
      cfg.tls.key_file = key;
    }
  }
  o3m_rpc_client *c = NULL;
  o3m_err e;
  o3m_err_clear(&e);
  int rc = o3m_rpc_client_create(&c, &cfg, &e);
  cr_assert_eq(rc, 0, "client for %s: %s", target, o3m_err_message(&e));
  return c;
}

o3m_rpc_client *fed_client(const char *target, const char *ca_dir, const char *cert_dir,
                           const char *name, const char *server_name, int deadline_ms) {
  return client_make(target, ca_dir, cert_dir, name, server_name, deadline_ms, 0);
}

const O3m__V1__ActiveStats *fed_active_stats(o3m_rpc_client *c) {
  O3m__V1__StatsRequest req = O3M__V1__STATS_REQUEST__INIT;
  ProtobufCMessage *m;
  o3m_err e;
  o3m_err_clear(&e);
  int rc = o3m_rpc_client_call(c, O3M_PATH_ACTIVE_STATS, &req.base,
                               &o3m__v1__active_stats__descriptor, &m, &e);
  cr_assert_eq(rc, 0, "Stats: %s", o3m_err_message(&e));
  return (const O3m__V1__ActiveStats *)m;
}

/* ------------------------------------------------------------ the AP tests' federation */

const char *const fed_party_name[FED_N_PARTIES] = {"pmg", "ap", "pp1", "pp2"};
static const char *const party_exe[FED_N_PARTIES] = {"o3m-pmg", "o3m-active", "o3m-passive",
                                                     "o3m-passive"};
/* Each party's role and tables in the config (dims 0: none). */
static const struct {
  const char *role;
  int dims;
  const char *users, *items;
} party_conf[FED_N_PARTIES] = {
    {"pmg", 0, NULL, NULL},
    {"active", 3, "ap_users.csv", "ap_items.csv"},
    {"passive", 2, "pp1_users.csv", NULL},
    {"passive", 3, "pp2_users.csv", "pp2_items.csv"},
};

/* pp1's table of the federation fed_net_prepare wrote last: its user
 * table, or its item table with fed_setup.pp1_items (fed_tables_load reads
 * what the parties read). */
static int pp1_items;

static void write_tables(const fed_setup *s) {
  pp1_items = s->pp1_items;
  const struct {
    const char *file;
    o3m_features_kind kind;
    const char *prefix;
    int rows, cols;
  } t[] = {
      {"ap_users.csv", O3M_FEATURES_USERS, "u", FED_USERS, 2},
      {"ap_items.csv", O3M_FEATURES_ITEMS, "i", FED_ITEMS, 1},
      {s->pp1_items ? "pp1_items.csv" : "pp1_users.csv",
       s->pp1_items ? O3M_FEATURES_ITEMS : O3M_FEATURES_USERS, s->pp1_items ? "i" : "u",
       s->pp1_items ? FED_ITEMS : s->pp1_users, 2},
      {"pp2_users.csv", O3M_FEATURES_USERS, "u", FED_USERS, 1},
      {"pp2_items.csv", O3M_FEATURES_ITEMS, "i", FED_ITEMS, 2},
  };
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
    o3m_err e;
    o3m_err_clear(&e);
    cr_assert_eq(eval_tables_write_synthetic(fed_path(t[i].file), t[i].kind, t[i].prefix,
                                             t[i].rows, t[i].cols, s->table_seed + i, &e),
                 0, "%s", o3m_err_message(&e));
  }
  char catalog[FED_ITEMS * 8] = "";
  for (int i = 0; i < FED_ITEMS; i++)
    snprintf(catalog + strlen(catalog), sizeof catalog - strlen(catalog), "i%d\n", i);
  fed_write("catalog.txt", catalog);
}

/* Appends printf output to buf (size cap); asserts that it fits. */
static void append(char *buf, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void append(char *buf, size_t cap, const char *fmt, ...) {
  size_t len = strlen(buf);
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf + len, cap - len, fmt, ap);
  va_end(ap);
  cr_assert(n >= 0 && (size_t)n < cap - len, "federation config too long");
}

/* A new secure aggregation key pair for passive party name (the library
 * function behind o3m-passive --agg-keygen), written to fed_dir()/NAME.agg,
 * and its agg_public and agg_secret lines. */
static void append_agg_keys(char *text, size_t cap, const char *name) {
  char file[80];
  snprintf(file, sizeof file, "%s.agg", name);
  const char *path = fed_path(file);
  unlink(path); /* a config written again gets new keys */
  unsigned char pk[O3M_SECAGG_KEY_BYTES];
  char hex[2 * O3M_SECAGG_KEY_BYTES + 1];
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert_eq(o3m_secagg_keygen(path, pk, &e), 0, "%s", o3m_err_message(&e));
  o3m_secagg_hex(pk, hex);
  append(text, cap, "agg_public = %s\nagg_secret = %s\n", hex, file);
}

static void write_config(fed_net *n, const fed_setup *s) {
  char text[4096] = "";
  append(text, sizeof text, "[federation]\nd = %d\ndeadline_ms = %d\nca = certs/ca.pem\n", FED_D,
         s->deadline_ms);
  if (s->aggregation) append(text, sizeof text, "aggregation = %s\n", s->aggregation);
  if (s->federation_extra) append(text, sizeof text, "%s", s->federation_extra);
  append(text, sizeof text,
         "\n[policy]\n%smax_candidates = %d\npending_capacity = %d\npending_expiry_s = 600\n"
         "reward_min = 0\nreward_max = 1\n",
         s->policy, FED_K_MAX, s->pending_capacity);
  for (int p = 0; p < FED_N_PARTIES; p++) {
    const char *name = fed_party_name[p];
    append(text, sizeof text, "\n[party %s]\nrole = %s\naddress = 127.0.0.1:%d\n", name,
           party_conf[p].role, n->port[p]);
    if (party_conf[p].dims) append(text, sizeof text, "dims = %d\n", party_conf[p].dims);
    const char *users = party_conf[p].users, *items = party_conf[p].items;
    if (p == FED_PP1 && s->pp1_items) users = NULL, items = "pp1_items.csv";
    if (users) append(text, sizeof text, "user_table = %s\n", users);
    if (items) append(text, sizeof text, "item_table = %s\n", items);
    append(text, sizeof text, "cert = certs/%s.pem\nkey = certs/%s.key\n", name, name);
    if (s->state_dirs) append(text, sizeof text, "state_dir = %s_state\n", name);
    if (strcmp(party_conf[p].role, "passive") == 0) append_agg_keys(text, sizeof text, name);
    if (p == FED_PP1 && s->pp1_instances)
      append(text, sizeof text, "instances = %s\n", s->pp1_instances);
  }
  /* The test's own identity: the only caller of Recommend, Reward, Stats. */
  append(text, sizeof text, "\n[client %s]\ncert = certs/%s.pem\nkey = certs/%s.key\n",
         FED_CLIENT, FED_CLIENT, FED_CLIENT);
  if (s->second_client)
    append(text, sizeof text, "\n[client %s]\ncert = certs/%s.pem\nkey = certs/%s.key\n",
           FED_CLIENT2, FED_CLIENT2, FED_CLIENT2);
  snprintf(n->conf, sizeof n->conf, "%s", fed_write("federation.conf", text));
}

void fed_net_prepare(fed_net *n, const fed_setup *s) {
  memset(n, 0, sizeof *n);
  fed_make_certs("certs", s->second_client ? "pmg ap pp1 pp2 " FED_CLIENT " " FED_CLIENT2
                                           : "pmg ap pp1 pp2 " FED_CLIENT);
  write_tables(s);
  for (int p = 0; p < FED_N_PARTIES; p++) n->port[p] = fed_free_port();
  write_config(n, s);
}

void fed_net_start(fed_net *n, int p, const char *const *extra) {
  fed_net_start_conf(n, p, n->conf, extra);
}

void fed_net_start_conf(fed_net *n, int p, const char *conf, const char *const *extra) {
  const char *args[24];
  int k = 0;
  args[k++] = "--config";
  args[k++] = conf;
  args[k++] = "--party";
  args[k++] = fed_party_name[p];
  for (int i = 0; extra && extra[i]; i++) {
    cr_assert_lt(k, 23, "too many arguments for %s", fed_party_name[p]);
    args[k++] = extra[i];
  }
  args[k] = NULL;
  fed_spawn(&n->proc[p], fed_party_name[p], party_exe[p], args);
}

void fed_tables_load(fed_tables *t) {
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert_eq(o3m_features_load(&t->ap, fed_path("ap_users.csv"), fed_path("ap_items.csv"), 3,
                                &e), 0, "%s", o3m_err_message(&e));
  cr_assert_eq(o3m_features_load(&t->pp1, pp1_items ? NULL : fed_path("pp1_users.csv"),
                                pp1_items ? fed_path("pp1_items.csv") : NULL, 2, &e), 0, "%s",
               o3m_err_message(&e));
  cr_assert_eq(o3m_features_load(&t->pp2, fed_path("pp2_users.csv"), fed_path("pp2_items.csv"),
                                3, &e), 0, "%s", o3m_err_message(&e));
}

void fed_tables_free(fed_tables *t) {
  o3m_features_destroy(t->ap);
  o3m_features_destroy(t->pp1);
  o3m_features_destroy(t->pp2);
  t->ap = t->pp1 = t->pp2 = NULL;
}

int fed_contexts(const fed_tables *t, const char *user, int K, const char *const *items,
                 double *X) {
  o3m_features *f[3] = {t->ap, t->pp1, t->pp2};
  int off[3] = {0, 3, 5}, dims[3] = {3, 2, 3};
  double blk[FED_K_MAX * 3];
  if (K < 1 || K > FED_K_MAX) return -1;
  for (int j = 0; j < 3; j++) {
    if (o3m_features_fill(f[j], user, K, items, blk, NULL, NULL) != 0) return -1;
    for (int k = 0; k < K; k++)
      memcpy(X + (size_t)k * FED_D + off[j], blk + (size_t)k * dims[j],
             sizeof(double) * dims[j]);
  }
  return 0;
}

void fed_draw_round(o3m_rng *r, int n_users, fed_round *q) {
  uint64_t u;
  o3m_rng_u64(r, &u);
  snprintf(q->user, sizeof q->user, "u%d", (int)(u % (uint64_t)n_users));
  q->K = 2 + (int)(u / (uint64_t)n_users % (FED_K_MAX - 1));
  /* A Fisher-Yates shuffle of the items; the first K are the candidates. */
  int perm[FED_ITEMS];
  for (int i = 0; i < FED_ITEMS; i++) perm[i] = i;
  for (int i = FED_ITEMS - 1; i > 0; i--) {
    o3m_rng_u64(r, &u);
    int j = (int)(u % (uint64_t)(i + 1));
    int t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
  for (int k = 0; k < q->K; k++) {
    snprintf(q->names[k], sizeof q->names[k], "i%d", perm[k]);
    q->items[k] = q->names[k];
  }
}

double fed_click_reward(const double *x) {
  static const double theta[FED_D] = {0.9, -0.4, 0.3, 0.5, -0.7, 0.2, 0.6, -0.1};
  double z = 0;
  for (int i = 0; i < FED_D; i++) z += theta[i] * x[i];
  return 1.0 / (1.0 + exp(-z));
}

/* ------------------------------------------------------------ waiting on conditions */

/* The backoff of fed_wait_until. */
#include "o3m_clock.h"

void fed_wait_until(int (*cond)(void *arg), void *arg, int deadline_ms, const char *what) {
  o3m_backoff b;
  o3m_backoff_start(&b, 1, 50, deadline_ms);
  double t0 = fed_now_s();
  while (!cond(arg)) {
    if (o3m_backoff_left(&b) <= 0) {
      if (cond(arg)) return;
      cr_assert_fail("gave up after %.0f ms waiting for %s", 1e3 * (fed_now_s() - t0), what);
    }
    fed_sleep_ms((int)o3m_backoff_next(&b));
  }
}

o3m_rpc_client *fed_client_ready(const char *target, const char *ca_dir, const char *cert_dir,
                                 const char *name, const char *server_name, int deadline_ms) {
  return client_make(target, ca_dir, cert_dir, name, server_name, deadline_ms, 1);
}

/* ------------------------------------------------ conditions on this process's connections */

int fed_conns_acked(int port, int *fds, unsigned long long *acked, int cap) {
  DIR *d = opendir("/proc/self/fd");
  cr_assert_not_null(d, "/proc/self/fd: %s", strerror(errno));
  int n = 0;
  for (struct dirent *de; (de = readdir(d));) {
    char *end;
    long fd = strtol(de->d_name, &end, 10);
    if (*end || end == de->d_name || fd == dirfd(d)) continue;
    struct sockaddr_storage sa;
    socklen_t sl = sizeof sa;
    if (getpeername((int)fd, (struct sockaddr *)&sa, &sl) != 0) continue;
    int peer_port = sa.ss_family == AF_INET    ? ntohs(((struct sockaddr_in *)&sa)->sin_port)
                    : sa.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&sa)->sin6_port)
                                               : -1;
    struct tcp_info ti;
    socklen_t tl = sizeof ti;
    if (peer_port != port || getsockopt((int)fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) != 0) continue;
    if (n < cap) {
      fds[n] = (int)fd;
      acked[n] = (unsigned long long)ti.tcpi_bytes_acked;
    }
    n++;
  }
  closedir(d);
  /* readdir gives no order; the callers compare two calls by descriptor. */
  int m = n < cap ? n : cap;
  for (int i = 1; i < m; i++)
    for (int j = i; j > 0 && fds[j - 1] > fds[j]; j--) {
      int f = fds[j];
      fds[j] = fds[j - 1], fds[j - 1] = f;
      unsigned long long a = acked[j];
      acked[j] = acked[j - 1], acked[j - 1] = a;
    }
  return n;
}
