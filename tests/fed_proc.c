/* fed_proc.c -- see fed_proc.h. The helper's state (the directory and the
 * spawned processes) is file-scope because Criterion's .init/.fini take no
 * argument; each test runs in its own process, so it never leaks across
 * tests. */
#include "fed_proc.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define MAX_PROCS 16

/* The pids spawned and not yet reaped (0: free slot). Pids, not fed_proc
 * pointers: a test's fed_proc lives on its stack, which is gone when the
 * suite's .fini runs. */
static char g_dir[256];
static pid_t g_pids[MAX_PROCS];

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

const char *fed_dir(void) {
  if (!g_dir[0]) {
    snprintf(g_dir, sizeof g_dir, "/tmp/o3m_fed_XXXXXX");
    cr_assert_not_null(mkdtemp(g_dir), "mkdtemp: %s", strerror(errno));
  }
  return g_dir;
}

void fed_make_certs(const char *subdir, const char *names) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "'%s/scripts/make-certs.sh' '%s/%s' %s", O3M_SOURCE_DIR, fed_dir(),
           subdir, names);
  int rc = system(cmd);
  cr_assert_eq(rc, 0, "make-certs.sh failed (%d): %s", rc, cmd);
}

int fed_free_port(void) {
  /* Binding port 0 twice in a row can return the same port once the first
   * socket is closed, and a config with two parties on one port is refused;
   * so a port handed out recently by this process is never handed out again. */
  static int recent[32];
  static int n_recent;
  for (;;) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert_geq(fd, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    socklen_t len = sizeof a;
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd);
    int port = ntohs(a.sin_port), seen = 0;
    for (int i = 0; i < n_recent && i < 32; i++) seen |= recent[i] == port;
    if (seen) continue;
    recent[n_recent++ % 32] = port;
    return port;
  }
}

const char *fed_write(const char *name, const char *text) {
  static char paths[8][512];
  static int slot;
  char *p = paths[slot++ % 8];
  snprintf(p, 512, "%s/%s", fed_dir(), name);
  FILE *f = fopen(p, "w");
  cr_assert_not_null(f, "%s: %s", p, strerror(errno));
  fputs(text, f);
  cr_assert_eq(fclose(f), 0);
  return p;
}

void fed_spawn(fed_proc *p, const char *name, const char *bin, const char *const *args) {
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "%s", name);
  snprintf(p->log, sizeof p->log, "%s/%s.log", fed_dir(), name);
  snprintf(p->ready, sizeof p->ready, "%s/%s.ready", fed_dir(), name);
  unlink(p->ready);
  char path[512];
  snprintf(path, sizeof path, "%s/%s", O3M_BIN_DIR, bin);
  const char *argv[32];
  int n = 0;
  argv[n++] = path;
  for (int i = 0; args[i]; i++) {
    cr_assert_lt(n, 28);
    argv[n++] = args[i];
  }
  argv[n++] = "--ready-file";
  argv[n++] = p->ready;
  argv[n] = NULL;

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, p->log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  int rc = posix_spawn(&p->pid, path, &fa, NULL, (char *const *)argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  cr_assert_eq(rc, 0, "posix_spawn %s: %s", path, strerror(rc));
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
    sleep_ms(20);
  }
}

int fed_wait_exit(fed_proc *p, int timeout_ms) {
  for (int waited = 0;; waited += 20) {
    if (reap(p, WNOHANG)) return p->status;
    if (waited >= timeout_ms) return -1;
    sleep_ms(20);
  }
}

int fed_stop(fed_proc *p, int sig, int timeout_ms) {
  if (!p->pid) return p->status;
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
  if (g_dir[0] && !getenv("O3M_KEEP_TEST_DIR")) nftw(g_dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
  g_dir[0] = '\0';
}

o3m_rpc_client *fed_client(const char *target, const char *ca_dir, const char *cert_dir,
                           const char *name, const char *server_name, int deadline_ms) {
  static char ca[512], pem[512], key[512];
  o3m_rpc_client_config cfg;
  o3m_rpc_client_config_default(&cfg);
  cfg.target = target;
  cfg.deadline_ms = deadline_ms;
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
