/* o3m_daemon.c -- see o3m_daemon.h. */
#include "o3m_daemon.h"
#include "o3m_alloc.h"

#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>

#include "health.pb-c.h"
#include "o3m_cert.h"
#include "o3m_fingerprint.h"
#include "o3m_httpd.h"
#include "o3m_probesock.h"
#include "o3m_log.h"
#include "o3m_rpc.h"

void o3m_daemon_log_init(const char *prog, const char *party) {
  char tag[96];
  snprintf(tag, sizeof tag, "%s[%s]", prog, party);
  o3m_log_init(tag, O3M_LOG_INFO);
}

int o3m_daemon_protect_memory(o3m_err *e) {
  const struct rlimit none = {0, 0};
  if (setrlimit(RLIMIT_CORE, &none) != 0)
    return o3m_err_set(e, O3M_EIO, "cannot disable core dumps (setrlimit RLIMIT_CORE 0): %s",
                       strerror(errno));
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0)
    return o3m_err_set(e, O3M_EIO, "cannot forbid core dumps and ptrace attach (prctl "
                       "PR_SET_DUMPABLE 0): %s", strerror(errno));
  return O3M_OK;
}

int o3m_daemon_raise_nofile(o3m_err *e) {
  struct rlimit r;
  if (getrlimit(RLIMIT_NOFILE, &r) != 0)
    return o3m_err_set(e, O3M_EIO, "cannot read the open-file limit (getrlimit RLIMIT_NOFILE): %s",
                       strerror(errno));
  if (r.rlim_cur != r.rlim_max) {
    rlim_t was = r.rlim_cur;
    r.rlim_cur = r.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &r) != 0)
      return o3m_err_set(e, O3M_EIO, "cannot raise the open-file limit from %llu to %llu "
                         "(setrlimit RLIMIT_NOFILE): %s", (unsigned long long)was,
                         (unsigned long long)r.rlim_max, strerror(errno));
  }
  if (r.rlim_cur == RLIM_INFINITY)
    o3m_log_info("open-file limit: unlimited");
  else
    o3m_log_info("open-file limit: %llu", (unsigned long long)r.rlim_cur);
  return O3M_OK;
}

/* The trimmer thread: gives free heap memory back to the kernel once per
 * O3M_DAEMON_TRIM_MS. It holds no state. */
static void *trim_loop(void *arg) {
  (void)arg;
  for (;;) {
    struct timespec ts = {O3M_DAEMON_TRIM_MS / 1000, (long)(O3M_DAEMON_TRIM_MS % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    malloc_trim(0);
  }
  return NULL;
}

void o3m_daemon_memory_init(void) {
  /* A fixed threshold (setting it turns glibc's dynamic one off, which
   * would rise to the size of the largest buffer freed, up to 32 MiB, and
   * keep later buffers of that size on the heap): every buffer of 128 KiB
   * or more is its own mapping and goes back to the kernel when freed. */
  mallopt(M_MMAP_THRESHOLD, O3M_DAEMON_MMAP_THRESHOLD);
  pthread_t t;
  pthread_attr_t a;
  if (pthread_attr_init(&a) != 0) return;
  pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
  if (pthread_create(&t, &a, trim_loop, NULL) != 0)
    o3m_log_warn("cannot start the memory trimmer thread; freed memory may stay resident");
  pthread_attr_destroy(&a);
}

void o3m_daemon_catch_stop_signals(void (*handler)(int), int restart) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = restart ? SA_RESTART : 0;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
}

/* A TLS file named by a config key must be set and readable. The check is
 * made here, before any TLS library sees the path, so that the message can
 * name the section and key the path came from. */
static int check_tls_file(const o3m_config *cfg, const char *section, const char *key,
                          const char *path, o3m_err *e) {
  if (!path)
    return o3m_err_set(e, O3M_EINVAL, "%s: %s: key '%s' is not set (required without --insecure)",
                       o3m_config_name(cfg), section, key);
  if (access(path, R_OK) != 0)
    return o3m_err_set(e, O3M_EIO, "%s: %s: %s = %s: %s", o3m_config_name(cfg), section, key,
                       path, strerror(errno));
  return O3M_OK;
}

/* The party's own TLS material must be usable before the daemon binds or
 * calls anyone: the key is the certificate's, the certificate is valid now,
 * chains to the federation CA for TLS server and client use, and names the
 * party (o3m_cert_check_party). The message is prefixed with the config and
 * the party's section, as the other start-up errors are. */
/* The openssl lines that fix a certificate without the party name among
 * its SANs, set by check_tls_material and printed by o3m_daemon_start
 * after the error: they do not fit in an o3m_err message. Start-up runs on
 * one thread, once. */
static char g_san_fix[1024];

static int check_tls_material(const o3m_config *cfg, const o3m_party *me, o3m_err *e) {
  o3m_err why;
  o3m_err_clear(&why);
  int rc = o3m_cert_check_party(o3m_config_ca(cfg), me->cert, me->key, me->name, &why);
  /* Every peer dials the party by its name (tls.server_name), so without
   * it among the SANs the daemon would start, the PMG would hand out the
   * blocks, and every call would then fail in the handshake. */
  if (rc == O3M_OK) {
    rc = o3m_cert_check_san(me->cert, me->name, &why);
    if (rc < 0) o3m_cert_san_fix(g_san_fix, sizeof g_san_fix, me->key, me->name);
  }
  if (rc < 0)
    return o3m_err_set(e, rc, "%s: [party %s]: %s", o3m_config_name(cfg), me->name,
                       o3m_err_message(&why));
  return O3M_OK;
}

int o3m_daemon_load_party(o3m_config **cfg_out, const o3m_party **me_out,
                          const char *config_path, const char *party, o3m_role role,
                          const char *prog, int insecure, o3m_err *e) {
  *cfg_out = NULL;
  *me_out = NULL;
  o3m_config *cfg;
  int rc = o3m_config_load(&cfg, config_path, e);
  if (rc < 0) return rc;
  const o3m_party *me = o3m_config_party(cfg, party);
  if (!me) {
    rc = o3m_err_set(e, O3M_ENOTFOUND, "%s: no section [party %s]", o3m_config_name(cfg), party);
  } else if (me->role != role) {
    rc = o3m_err_set(e, O3M_EINVAL, "%s:%d: [party %s] has role %s; %s needs role = %s",
                     o3m_config_name(cfg), me->line, party, o3m_role_name(me->role), prog,
                     o3m_role_name(role));
  } else if (!insecure) {
    char section[O3M_ERRMSG_MAX];
    snprintf(section, sizeof section, "[party %s]", party);
    rc = check_tls_file(cfg, "[federation]", "ca", o3m_config_ca(cfg), e);
    if (rc == O3M_OK) rc = check_tls_file(cfg, section, "cert", me->cert, e);
    if (rc == O3M_OK) rc = check_tls_file(cfg, section, "key", me->key, e);
    if (rc == O3M_OK) rc = check_tls_material(cfg, me, e);
  }
  if (rc < 0) {
    o3m_config_destroy(cfg);
    return rc;
  }
  /* Operators compare this line across parties out of band (SECURITY.md,
   * "Federation fingerprint"); parties that call each other compare it
   * themselves, each service computing its own copy from cfg. */
  unsigned char bin[O3M_FINGERPRINT_BYTES];
  rc = o3m_fingerprint_compute(cfg, bin, e);
  if (rc < 0) {
    o3m_config_destroy(cfg);
    return rc;
  }
  char fp[O3M_FINGERPRINT_HEX];
  o3m_fingerprint_hex(bin, fp);
  o3m_log_info("federation fingerprint: %.*s... (%s; full: %s)", O3M_FINGERPRINT_SHORT, fp,
               o3m_config_name(cfg), fp);
  *cfg_out = cfg;
  *me_out = me;
  return O3M_OK;
}

/* Stores option index of O3M_DAEMON_OPTIONS into a: returns 1 when it was
 * one of them, 0 if not, or a usage error's exit code (negated) for a bad
 * value. */
static int args_take(const o3m_cli_spec *spec, o3m_daemon_args *a, int index, const char *value) {
  switch (index) {
  case 0: a->config = value; return 1;
  case 1: a->party = value; return 1;
  case 2: a->insecure = 1; return 1;
  case 3: a->ready_file = value; return 1;
  case 4:
    if (o3m_log_level_parse(value, &a->log_level) < 0)
      return -o3m_cli_usage_error(spec, "--log-level: '%s' is not debug, info, warn or error",
                                  value);
    return 1;
  case 5:
    if (o3m_log_format_parse(value, &a->log_format) < 0)
      return -o3m_cli_usage_error(spec, "--log-format: '%s' is not text or json", value);
    return 1;
  case 6: a->metrics_listen = value; return 1;
  case 7: a->probe_socket = value; return 1;
  default: return 0;
  }
}

int o3m_daemon_parse_args(o3m_daemon_args *a, const o3m_cli_spec *spec, int argc, char **argv,
                          int (*take)(void *ctx, int index, const char *value), void *ctx,
                          int *exit_code) {
  o3m_cli cl;
  o3m_cli_begin(&cl, spec, argc, argv);
  const char *v;
  a->log_level = O3M_LOG_INFO;
  a->log_format = O3M_LOG_TEXT;
  for (int i; (i = o3m_cli_next(&cl, &v)) != O3M_CLI_END;) {
    if (i == O3M_CLI_STOP) {
      *exit_code = cl.exit_code;
      return 0;
    }
    int took = args_take(spec, a, i, v);
    if (took < 0) {
      *exit_code = -took;
      return 0;
    }
    if (took) continue;
    int rc = take(ctx, i, v);
    if (rc) {
      *exit_code = rc;
      return 0;
    }
  }
  int first = o3m_cli_operands(&cl);
  if (first < cl.argc)
    *exit_code = o3m_cli_usage_error(spec, "unexpected argument '%s'", cl.argv[first]);
  else if (!a->config || !a->party)
    *exit_code = o3m_cli_usage_error(spec, "--config and --party are required");
  else
    return 1;
  return 0;
}

/* The process's one stop flag and stop target (see the header). The
 * target's function is written after its argument and cleared before it,
 * and the handler reads both and skips a NULL, so it never calls a
 * function with the wrong argument. */
static volatile sig_atomic_t g_stop;
/* The metrics port and its registry (see the header), set by
 * o3m_daemon_start, freed at exit. */
static o3m_metrics *g_metrics;
static o3m_httpd *volatile g_httpd;
static void (*volatile g_stop_fn)(void *);
static void *volatile g_stop_arg;

static void on_stop_signal(int sig) {
  (void)sig;
  g_stop = 1;
  o3m_httpd_set_ready(g_httpd, 0); /* a stop began: probes see it at once */
  void (*fn)(void *) = g_stop_fn;
  void *arg = g_stop_arg;
  if (fn && arg) fn(arg);
}

volatile sig_atomic_t *o3m_daemon_stop_flag(void) { return &g_stop; }

/* SIGHUP's flag (see the header). */
static volatile sig_atomic_t g_reload;

static void on_reload_signal(int sig) {
  (void)sig;
  g_reload = 1;
}

volatile sig_atomic_t *o3m_daemon_catch_reload_signal(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_reload_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGHUP, &sa, NULL);
  return &g_reload;
}

o3m_metrics *o3m_daemon_metrics(void) { return g_metrics; }

/* The readiness probe of the metrics port (o3m_httpd_set_probe): a gRPC
 * health Check on the daemon's own service port, made as a federation
 * party would make it, with the daemon's own certificate and expecting its
 * own name. The party's listen address and TLS files are copied at start, as the
 * config may be freed before the daemon serves. Each probe makes a new
 * client, hence a new connection: a connection made before the port ran
 * out of descriptors keeps working, so only a new one tells whether a
 * caller can connect now. Used by the HTTP thread (/readyz) and the
 * watchdog thread, one at a time (g_probe_mu). */
typedef struct probe_state {
  char *ca, *cert, *key, *name, *address; /* copies; ca..name NULL when insecure */
  int insecure;
  char target[320];
  int last_ok; /* the previous answer, so that only a change is logged */
  /* The watchdog's deadline: the federation's deadline plus a second (see
   * watchdog_main). */
  int watch_deadline_ms;
} probe_state;
static probe_state g_probe;

/* The /readyz health call's deadline: it holds the HTTP thread meanwhile. */
#define PROBE_DEADLINE_MS 1000

static void probe_forget(void) {
  o3m_free(g_probe.ca);
  o3m_free(g_probe.cert);
  o3m_free(g_probe.key);
  o3m_free(g_probe.name);
  o3m_free(g_probe.address);
  memset(&g_probe, 0, sizeof g_probe);
}

/* Copies what the probe needs of the party; 0 or O3M_ENOMEM. */
static int probe_remember(const o3m_config *cfg, const o3m_party *me, int insecure, o3m_err *e) {
  g_probe.insecure = insecure;
  g_probe.watch_deadline_ms = o3m_config_deadline_ms(cfg) + 1000;
  g_probe.address = o3m_strdup(me->listen);
  int ok = g_probe.address != NULL;
  if (!insecure) {
    g_probe.ca = o3m_strdup(o3m_config_ca(cfg));
    g_probe.cert = o3m_strdup(me->cert);
    g_probe.key = o3m_strdup(me->key);
    g_probe.name = o3m_strdup(me->name);
    ok = ok && g_probe.ca && g_probe.cert && g_probe.key && g_probe.name;
  }
  if (ok) return O3M_OK;
  probe_forget();
  return o3m_err_set(e, O3M_ENOMEM, "readiness probe: out of memory");
}

/* Where the probe calls: the listen address, with a wildcard host made the
 * loopback of its family and the port the one bound (listen may say 0). */
static void probe_target(char *out, size_t n, const char *listen, int port) {
  if (strncmp(listen, "unix:", 5) == 0) {
    snprintf(out, n, "%s", listen);
    return;
  }
  const char *colon = strrchr(listen, ':');
  int hl = colon ? (int)(colon - listen) : (int)strlen(listen);
  if (hl == 0 || (hl == 7 && strncmp(listen, "0.0.0.0", 7) == 0) ||
      (hl == 1 && listen[0] == '*'))
    snprintf(out, n, "127.0.0.1:%d", port);
  else if (hl == 4 && strncmp(listen, "[::]", 4) == 0)
    snprintf(out, n, "[::1]:%d", port);
  else
    snprintf(out, n, "%.*s:%d", hl, listen, port);
}

/* The probe: 1 when the health Check answers SERVING. The metrics port's
 * thread and the watchdog thread both call it, one at a time. */
static pthread_mutex_t g_probe_mu = PTHREAD_MUTEX_INITIALIZER;
static int probe_health_locked(probe_state *p, int deadline_ms);
static int probe_health_within(probe_state *p, int deadline_ms) {
  pthread_mutex_lock(&g_probe_mu);
  int serving = probe_health_locked(p, deadline_ms);
  pthread_mutex_unlock(&g_probe_mu);
  return serving;
}
/* /readyz's probe (o3m_httpd_set_probe). */
static int probe_health(void *ctx) { return probe_health_within(ctx, PROBE_DEADLINE_MS); }

static int probe_health_locked(probe_state *p, int deadline_ms) {
  o3m_err e;
  o3m_err_clear(&e);
  o3m_rpc_client *client = NULL;
  o3m_rpc_client_config cc;
  o3m_rpc_client_config_default(&cc);
  cc.target = p->target;
  o3m_rpc_client_secure(&cc, p->insecure, (o3m_rpc_tls){p->ca, p->cert, p->key, p->name});
  cc.deadline_ms = deadline_ms;
  cc.max_message_bytes = 4096;
  cc.arena_bytes = 4096;
  int rc = o3m_rpc_client_create(&client, &cc, &e);
  int serving = 0;
  if (rc == O3M_OK) {
    Grpc__Health__V1__HealthCheckRequest req = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
    ProtobufCMessage *m;
    rc = o3m_rpc_client_call(client, O3M_RPC_HEALTH_CHECK_PATH, &req.base,
                             &grpc__health__v1__health_check_response__descriptor, &m, &e);
    if (rc == O3M_OK)
      serving = ((const Grpc__Health__V1__HealthCheckResponse *)m)->status ==
                GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
  }
  o3m_rpc_client_destroy(client);
  if (!serving && p->last_ok)
    o3m_log_warn("not ready (/readyz 503, no WATCHDOG=1): the health check of %s failed: %s",
                 p->target, rc < 0 ? o3m_err_message(&e) : "not SERVING");
  else if (serving && !p->last_ok)
    o3m_log_info("the health check of %s answers SERVING again", p->target);
  p->last_ok = serving;
  return serving;
}

/* At exit: stops the metrics port before its registry goes. */
static void metrics_at_exit(void) {
  o3m_httpd *h = g_httpd;
  g_httpd = NULL;
  o3m_httpd_stop(h);
  o3m_metrics_destroy(g_metrics);
  g_metrics = NULL;
}

/* The systemd watchdog (WatchdogSec= in the unit, WATCHDOG_USEC in the
 * environment): while the daemon serves, a thread makes the same health
 * check as /readyz every third of the interval and sends WATCHDOG=1 only
 * when it answers. A daemon whose gRPC port stopped accepting (gRPC 1.51
 * after EMFILE in a connection flood) so misses the watchdog, and systemd kills
 * and restarts it. The watchdog's check waits longer than /readyz's: up to
 * the federation's deadline plus a second (at most a third of the
 * interval), because a serving thread may be busy for a whole fan-out to a
 * slow passive party (up to that deadline). With /readyz's 1 s a healthy AP
 * on one thread whose PP answers slowly would miss every check and be
 * restarted, which cures nothing. */
static pthread_mutex_t g_wd_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_wd_cv = PTHREAD_COND_INITIALIZER;
static int g_wd_stop;
static uint64_t g_wd_usec;

static void *watchdog_main(void *arg) {
  (void)arg;
  pthread_mutex_lock(&g_wd_mu);
  while (!g_wd_stop) {
    pthread_mutex_unlock(&g_wd_mu);
    int64_t third_ms = (int64_t)(g_wd_usec / 3000u);
    int deadline = g_probe.watch_deadline_ms;
    if (deadline > third_ms) deadline = (int)third_ms;
    if (deadline < PROBE_DEADLINE_MS) deadline = PROBE_DEADLINE_MS;
    if (probe_health_within(&g_probe, deadline)) sd_notify(0, "WATCHDOG=1");
    pthread_mutex_lock(&g_wd_mu);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    uint64_t ns = (uint64_t)until.tv_nsec + (g_wd_usec / 3) * 1000u;
    until.tv_sec += (time_t)(ns / 1000000000u);
    until.tv_nsec = (long)(ns % 1000000000u);
    if (!g_wd_stop) pthread_cond_timedwait(&g_wd_cv, &g_wd_mu, &until);
  }
  pthread_mutex_unlock(&g_wd_mu);
  return NULL;
}

/* Starts the watchdog thread if systemd asked for one; 1 when it runs. The
 * thread blocks the stop signals, which stay the main thread's. */
static int watchdog_start(pthread_t *t) {
  uint64_t usec = 0;
  if (sd_watchdog_enabled(0, &usec) <= 0 || usec == 0) return 0;
  g_wd_usec = usec;
  g_wd_stop = 0;
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGTERM);
  sigaddset(&block, SIGINT);
  pthread_sigmask(SIG_BLOCK, &block, &old);
  int ok = pthread_create(t, NULL, watchdog_main, NULL) == 0;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (!ok) {
    o3m_log_warn("cannot start the watchdog thread; systemd will restart the daemon");
    return 0;
  }
  o3m_log_info("watchdog: WATCHDOG=1 every %.1f s while the health check of %s answers",
               (double)usec / 3e6, g_probe.target);
  return 1;
}

static void watchdog_stop(pthread_t t) {
  pthread_mutex_lock(&g_wd_mu);
  g_wd_stop = 1;
  pthread_cond_signal(&g_wd_cv);
  pthread_mutex_unlock(&g_wd_mu);
  pthread_join(t, NULL);
}

/* Starts the metrics port on addr (NULL: none) and the probe socket at
 * probe (NULL: none) with a new registry: HTTPS with tls, or plain HTTP
 * with tls NULL. The registry starts with the daemon's build_info and
 * process series (o3m_metrics_process), which every daemon shows alike. */
static int metrics_start(const char *addr, const char *probe, const o3m_httpd_tls *tls,
                         o3m_role role, const char *party, o3m_err *e) {
  o3m_httpd *h = NULL;
  int rc = o3m_metrics_create(&g_metrics, e);
  if (rc == O3M_OK) rc = o3m_metrics_process(g_metrics, o3m_role_name(role), party, e);
  if (rc == O3M_OK) rc = o3m_httpd_start(&h, addr, probe, g_metrics, tls, e);
  g_httpd = h;
  if (rc < 0) {
    o3m_metrics_destroy(g_metrics);
    g_metrics = NULL;
    return rc;
  }
  atexit(metrics_at_exit);
  if (probe)
    o3m_log_info("health probes on the unix socket %s (mode %o): /healthz /readyz", probe,
                 O3M_PROBESOCK_MODE);
  if (!addr) return O3M_OK;
  if (tls)
    o3m_log_info("metrics and health on https://%s (port %d): /metrics for client "
                 "certificates named %s; /healthz /readyz for anyone", addr,
                 o3m_httpd_port(g_httpd), tls->clients);
  else
    o3m_log_warn("metrics and health on http://%s (port %d): /metrics /healthz /readyz, plain "
                 "HTTP for anyone who reaches the port (--insecure)", addr,
                 o3m_httpd_port(g_httpd));
  return O3M_OK;
}

void o3m_daemon_stop_target(void (*shutdown)(void *), void *target) {
  if (!shutdown) {
    sigset_t block;
    sigemptyset(&block);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGINT);
    pthread_sigmask(SIG_BLOCK, &block, NULL);
    g_stop_fn = NULL;
    g_stop_arg = NULL;
    return;
  }
  g_stop_arg = target;
  g_stop_fn = shutdown;
  if (g_stop) shutdown(target); /* a signal came before the target was set */
}

int o3m_daemon_serve(const char *prog, const char *ready_file, void *svc, const char *listen,
                     int port, int (*run)(void *), void (*shutdown)(void *), int *run_rc) {
  if (run_rc) *run_rc = 0;
  o3m_daemon_stop_target(shutdown, svc);
  o3m_err e;
  o3m_err_clear(&e);
  if (ready_file && o3m_daemon_write_ready_file(ready_file, port, &e) < 0) {
    o3m_daemon_stop_target(NULL, NULL);
    return o3m_cli_fail(prog, "--ready-file: %s", o3m_err_message(&e));
  }
  /* Ready: the service is built and about to serve (sd_notify does
   * nothing without NOTIFY_SOCKET, that is, outside a Type=notify unit). */
  probe_target(g_probe.target, sizeof g_probe.target, listen ? listen : g_probe.address, port);
  g_probe.last_ok = 1;
  o3m_httpd_set_probe(g_httpd, probe_health, &g_probe);
  if (!g_stop) o3m_httpd_set_ready(g_httpd, 1);
  sd_notifyf(0, "READY=1\nSTATUS=serving on port %d\nMAINPID=%ld", port, (long)getpid());
  pthread_t wd;
  int wd_on = watchdog_start(&wd);
  int rc = run(svc);
  if (run_rc) *run_rc = rc;
  if (wd_on) watchdog_stop(wd);
  o3m_httpd_set_ready(g_httpd, 0);
  o3m_httpd_set_probe(g_httpd, NULL, NULL); /* the service port closes next */
  sd_notify(0, "STOPPING=1");
  o3m_daemon_stop_target(NULL, NULL); /* keep the handler away from svc: it is freed next */
  if (ready_file) unlink(ready_file); /* not serving any more */
  return rc < 0 ? O3M_CLI_EXIT_FAILURE : O3M_CLI_EXIT_OK;
}

int o3m_daemon_start(const char *prog, const o3m_daemon_args *a, o3m_role role, int restart,
                     o3m_config **cfg_out, const o3m_party **me_out) {
  *cfg_out = NULL;
  *me_out = NULL;
  o3m_daemon_log_init(prog, a->party);
  o3m_log_configure(a->log_level, a->log_format);
  o3m_daemon_memory_init();
  /* Signals first, so that a stop at any point of start-up is clean. */
  o3m_daemon_catch_stop_signals(on_stop_signal, restart);
  o3m_err e;
  o3m_err_clear(&e);
  /* Before any key, table, block or model is read: no core file, no ptrace. */
  if (o3m_daemon_protect_memory(&e) < 0)
    return o3m_cli_fail(prog, "refusing to start: %s", o3m_err_message(&e));
  /* As many connections as the hard limit allows: a
   * flood of idle connections must take far more than the soft default of
   * 1024 to make accept() fail. A limit that cannot be read or raised is
   * logged, not fatal: the daemon still works within the lower one. */
  if (o3m_daemon_raise_nofile(&e) < 0) {
    o3m_log_warn("%s", o3m_err_message(&e));
    o3m_err_clear(&e);
  }
  /* The config, the party's role and its TLS files (o3m_cert), before any
   * peer is contacted. */
  if (o3m_daemon_load_party(cfg_out, me_out, a->config, a->party, role, prog, a->insecure, &e) <
      0) {
    int rc = o3m_cli_fail(prog, "%s", o3m_err_message(&e));
    if (g_san_fix[0]) fprintf(stderr, "%s: %s\n", prog, g_san_fix);
    return rc;
  }
  /* The probe port before the service: it answers "not ready" meanwhile. */
  /* Over HTTPS with the party's own certificate unless --insecure; the
   * names that may read /metrics come from the config. */
  o3m_httpd_tls tls = {o3m_config_ca(*cfg_out), (*me_out)->cert, (*me_out)->key,
                       o3m_config_metrics_clients(*cfg_out)};
  if (probe_remember(*cfg_out, *me_out, a->insecure, &e) < 0) {
    o3m_config_destroy(*cfg_out);
    *cfg_out = NULL;
    *me_out = NULL;
    return o3m_cli_fail(prog, "%s", o3m_err_message(&e));
  }
  atexit(probe_forget);
  if ((a->metrics_listen || a->probe_socket) &&
      metrics_start(a->metrics_listen, a->probe_socket, a->insecure ? NULL : &tls, role,
                    a->party, &e) < 0) {
    o3m_config_destroy(*cfg_out);
    *cfg_out = NULL;
    *me_out = NULL;
    return o3m_cli_fail(prog, "%s: %s",
                        strncmp(o3m_err_message(&e), "probe socket", 12) == 0 ? "--probe-socket"
                                                                               : "--metrics-listen",
                        o3m_err_message(&e));
  }
  return 0;
}

int o3m_daemon_write_ready_file(const char *path, int port, o3m_err *e) {
  char tmp[4096];
  if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp)
    return o3m_err_set(e, O3M_EINVAL, "ready file path too long");
  FILE *f = fopen(tmp, "w");
  if (!f) return o3m_err_set(e, O3M_EIO, "%s: %s", tmp, strerror(errno));
  int ok = fprintf(f, "%d\n", port) > 0;
  ok = (fclose(f) == 0) && ok;
  if (!ok || rename(tmp, path) != 0) {
    int err = errno;
    unlink(tmp);
    return o3m_err_set(e, O3M_EIO, "%s: %s", path, strerror(err));
  }
  return O3M_OK;
}
