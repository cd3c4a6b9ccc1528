/* o3m_daemon.h -- what every O3M daemon does the same way around its
 * service: shielding its memory (no core dumps, no ptrace), naming itself
 * in the log, catching the stop signals, loading its party from the
 * federation config and announcing readiness to the scripts and tests that
 * start it.
 *
 * The command line is shared too: every daemon takes --config FILE,
 * --party NAME, --insecure, --ready-file PATH, --log-level LEVEL,
 * --log-format FORMAT, --metrics-listen ADDR and --probe-socket PATH
 * (O3M_DAEMON_OPTIONS, the
 * first entries of each daemon's o3m_cli table; o3m_daemon_parse_args), and
 * o3m_daemon_start does the start-up steps above in one call. A daemon's
 * main() is then: parse, start, create its service, publish it as the stop
 * target, write the ready file, run, destroy.
 *
 * Exit codes of every daemon (o3m_cli.h): 0 after a stop by SIGTERM or
 * SIGINT (also during start-up), 1 when start-up fails or the service
 * stopped itself, 2 for a usage error.
 *
 * State: the stop-signal handler has no context argument, so the one stop
 * flag and the one stop target of the process live here, written by the
 * main thread and read by the handler; so do the process's metrics
 * registry and port (the handler marks the port not ready), created once
 * by o3m_daemon_start and freed at exit. Everything else holds no state;
 * services get the registry as an option, so tests that build several
 * services in one process pass their own or none.
 *
 * Operations (docs/operations.md). --log-level and --log-format set the
 * log (o3m_log.h). --metrics-listen ADDR starts the process's metrics and
 * health port (o3m_httpd.h: HTTPS with the party's certificate, /metrics
 * only to the config's metrics_clients; plain HTTP with --insecure) during
 * o3m_daemon_start, before the service
 * is built, so /healthz answers and /readyz says 503 while the daemon
 * waits for its mask or block; o3m_daemon_metrics() is its registry, which
 * the daemon passes to its service. --probe-socket PATH answers the same
 * /healthz and /readyz on a unix socket (o3m_probesock.h), with or without
 * --metrics-listen: the probe path an orchestrator on the host should use,
 * since a connection flood on the TCP metrics port, which anyone who
 * reaches it may open, cannot fill it (the probes stay answered).
 * o3m_daemon_serve marks the daemon ready
 * there and tells systemd (sd_notify READY=1, with NOTIFY_SOCKET set: a
 * Type=notify unit, deploy/), and STOPPING=1 when it stops serving. The
 * registry and the port are the process's, like the stop flag: they are
 * freed at exit (atexit).
 *
 * A daemon started with --ready-file PATH writes its bound port to PATH once
 * it serves. The file appears whole or not at all (written under a temporary
 * name and renamed), so a reader that polls for it never sees a partial
 * port. */
#ifndef O3M_DAEMON_H
#define O3M_DAEMON_H

#include <signal.h>

#include "o3m_cli.h"
#include "o3m_config.h"
#include "o3m_error.h"
#include "o3m_log.h"
#include "o3m_metrics.h"

/* The options every daemon has, in this order, first in its o3m_cli table;
 * ROLE names the party's role in the help of --party ("pmg"). */
#define O3M_DAEMON_OPTIONS(role)                                                              \
  {"config", "FILE", "the federation config (required)"},                                      \
  {"party", "NAME", "this daemon's [party NAME] section, role = " role " (required)"},          \
  {"insecure", NULL, "plaintext gRPC without identities or caller checks (trials only)"},      \
  {"ready-file", "PATH", "write the bound port to PATH once serving; removed at exit"},         \
  {"log-level", "LEVEL", "debug, info (default), warn or error"},                              \
  {"log-format", "FORMAT", "text (default) or json: one JSON object per line"},                \
  {"metrics-listen", "ADDR", "serve /metrics, /healthz, /readyz over HTTPS on HOST:PORT (off by " \
                             "default; ':PORT' is 127.0.0.1; /metrics only to client "        \
                             "certificates named in metrics_clients; plain HTTP for anyone "  \
                             "with --insecure)"},                                             \
  {"probe-socket", "PATH", "also answer /healthz and /readyz (plain HTTP) on a unix socket at "   \
                           "PATH, mode 0660, for the local orchestrator: no flood of the "     \
                           "metrics port reaches it (off by default)"}
#define O3M_DAEMON_N_OPTIONS 8

/* What the shared options hold after parsing (pointers into argv). */
typedef struct o3m_daemon_args {
  const char *config;
  const char *party;
  const char *ready_file;
  int insecure;
  const char *metrics_listen; /* NULL: no metrics port */
  const char *probe_socket;   /* NULL: no probe socket */
  o3m_log_level log_level;    /* O3M_LOG_INFO unless --log-level */
  o3m_log_format log_format;  /* O3M_LOG_TEXT unless --log-format */
} o3m_daemon_args;

/* Parses argc/argv by spec, the option loop every daemon's main shares:
 * spec's first O3M_DAEMON_N_OPTIONS options must be O3M_DAEMON_OPTIONS and
 * go into a; every other option is passed to take(ctx, index, value),
 * which returns 0, or an exit code (O3M_CLI_EXIT_USAGE after printing its
 * message with o3m_cli_usage_error) that ends the parse. Operands and a
 * missing --config or --party are refused with a usage error. Returns 1 to
 * go on with the daemon, or 0 with *exit_code what main() returns
 * (O3M_CLI_EXIT_OK after --help or --version, O3M_CLI_EXIT_USAGE). */
int o3m_daemon_parse_args(o3m_daemon_args *a, const o3m_cli_spec *spec, int argc, char **argv,
                          int (*take)(void *ctx, int index, const char *value), void *ctx,
                          int *exit_code);

/* The start-up every daemon makes, in this order: the log tag
 * "PROG[PARTY]" with the level and format of a, the memory trimmer (o3m_daemon_memory_init), the stop
 * signals (o3m_daemon_catch_stop_signals with the handler below: from now
 * on a SIGTERM or SIGINT sets the stop flag and calls the stop target),
 * shielding memory (o3m_daemon_protect_memory), the open-file limit
 * (o3m_daemon_raise_nofile) and the party
 * (o3m_daemon_load_party with role), then the metrics port and the probe
 * socket if a->metrics_listen or a->probe_socket is set
 * (o3m_daemon_metrics). On success returns 0 with *cfg_out and
 * *me_out as o3m_daemon_load_party leaves them; on failure prints
 * "PROG: message" on stderr and returns O3M_CLI_EXIT_FAILURE, nothing left
 * allocated. restart: as for o3m_daemon_catch_stop_signals. Call it once,
 * from main(), before any thread starts. */
int o3m_daemon_start(const char *prog, const o3m_daemon_args *a, o3m_role role, int restart,
                     o3m_config **cfg_out, const o3m_party **me_out);

/* Serves a created service until it stops, the way every daemon does:
 * makes shutdown(svc) the stop target (o3m_daemon_stop_target), writes
 * "PORT\n" to ready_file if it is not NULL (o3m_daemon_write_ready_file),
 * calls run(svc) on this thread, forgets the stop target and removes the
 * ready file. Around run it marks the metrics port ready and tells
 * systemd READY=1, then not ready and STOPPING=1. While it runs, /readyz
 * also makes a gRPC health Check (cached O3M_HTTPD_PROBE_CACHE_MS, 1 s
 * deadline) on the service port, with the party's own certificate and
 * name: listen is the address the service listens on (NULL: the party's
 * listen key, else its address; a wildcard host is probed on the loopback) and
 * port the port it bound. So a daemon whose gRPC port accepts no connection
 * (out of file descriptors after a connection flood) is not reported ready. Under a
 * systemd watchdog (WATCHDOG_USEC, WatchdogSec= in the unit) a thread makes
 * the same check every third of the interval and sends WATCHDOG=1 only when
 * it answers, so that systemd restarts such a daemon. A ready file that cannot be written is reported as "PROG:
 * --ready-file: CAUSE" and the service is not run. *run_rc (may be NULL)
 * receives run's return, or 0 if it was not run. Returns
 * O3M_CLI_EXIT_OK, or O3M_CLI_EXIT_FAILURE if the ready file failed or run
 * returned a negative code. The caller destroys svc afterwards. */
int o3m_daemon_serve(const char *prog, const char *ready_file, void *svc, const char *listen,
                     int port, int (*run)(void *), void (*shutdown)(void *), int *run_rc);

/* The process's metrics registry, or NULL when the daemon runs without
 * --metrics-listen and --probe-socket. Pass it to the service (its options' metrics field). */
o3m_metrics *o3m_daemon_metrics(void);

/* The stop flag: nonzero once SIGTERM or SIGINT arrived. Pass it to the
 * services' start-up waits (their options' stop field). */
volatile sig_atomic_t *o3m_daemon_stop_flag(void);

/* Catches SIGHUP for a daemon that reloads its feature tables (o3m-passive,
 * o3m-active; o3m_tables.h) and returns its flag: the handler only sets it
 * (nothing else is safe in a handler), and the service's idle hook, which
 * the RPC layer runs at least every 100 ms, does the reload and clears it.
 * Without this call SIGHUP keeps its default action (the PMG). Call it from
 * main() before the service serves. */
volatile sig_atomic_t *o3m_daemon_catch_reload_signal(void);
/* Makes shutdown(target) what a stop signal calls (it must be
 * async-signal-safe: the services' *_shutdown are). If a signal already
 * came, calls it at once, so that a stop during start-up is not lost.
 * With shutdown NULL, forgets the target: stop signals are blocked in the
 * calling thread first, so that the handler cannot run on this thread with a
 * target that is about to be freed. */
void o3m_daemon_stop_target(void (*shutdown)(void *), void *target);

/* Sets the log tag to "PROG[PARTY]" ("o3m-passive[bank]") at level INFO.
 * Both strings are copied; a tag longer than the log's buffer is cut. Call
 * it in main() before any thread starts (o3m_log_init is not thread-safe). */
void o3m_daemon_log_init(const char *prog, const char *party);

/* Keeps this process's memory (Q, mask blocks, the dummy-row key, TLS
 * private keys) out of reach of anything but root: sets RLIMIT_CORE to 0
 * (no core file, soft and hard limit) and PR_SET_DUMPABLE to 0, which also
 * forbids ptrace attach and reading /proc/PID/mem to processes without
 * CAP_SYS_PTRACE, the daemon's own user included. Every daemon calls it
 * first thing in main(), before it reads a key; a failure must refuse the
 * start. O3M_EIO naming the call and its errno. */
int o3m_daemon_protect_memory(o3m_err *e);

/* Raises the soft limit on open files (RLIMIT_NOFILE) to the hard limit
 * and logs the limit in force ("open-file limit: 65536"): every connection
 * is a file descriptor, and the soft default of 1024 let 60 idle TCP
 * connections make a daemon with a low limit refuse every caller (the
 * systemd units set LimitNOFILE=65536). o3m_daemon_start
 * calls it; a failure there is logged as a warning. O3M_EIO naming the call
 * and its errno. */
int o3m_daemon_raise_nofile(o3m_err *e);

/* Memory that a burst of large messages made resident goes back to the
 * kernel (a 60 MB request once kept the AP at 1.2 GB for good).
 * gRPC reads a message into many small slices before its size check
 * refuses it, and glibc keeps freed small chunks on its heaps; so this
 * fixes malloc's mmap threshold at O3M_DAEMON_MMAP_THRESHOLD (large buffers
 * are mapped and unmapped) and starts a detached thread that calls
 * malloc_trim(0) every O3M_DAEMON_TRIM_MS (a walk over the free chunks:
 * well under a millisecond for the heaps of these daemons). Call it in
 * main() before any other thread starts. A thread that cannot start is
 * logged, not fatal. */
#define O3M_DAEMON_MMAP_THRESHOLD (128 * 1024)
#define O3M_DAEMON_TRIM_MS 1000
void o3m_daemon_memory_init(void);

/* Installs handler for SIGTERM and SIGINT with an empty signal mask. With
 * restart nonzero, system calls interrupted by the signal resume
 * (SA_RESTART); with 0 they fail with EINTR and the caller's loops must
 * retry them. Installing cannot fail for these two signals, so nothing is
 * returned. */
void o3m_daemon_catch_stop_signals(void (*handler)(int), int restart);

/* Loads the config at config_path and finds the daemon's own section,
 * [party PARTY], which must have the given role; prog ("o3m-pmg") names the
 * daemon in the role message. Unless insecure, the federation's ca and the
 * party's cert and key must then be set and readable by this process, and
 * pass o3m_cert_check_party (crypto/o3m_cert.h): the key is the
 * certificate's, the certificate is valid now, chains to the ca for TLS
 * server and client use and has CN = PARTY. So a daemon with unusable TLS
 * material refuses to start instead of failing its first call.
 *
 * On success *cfg_out owns the config (the caller frees it with
 * o3m_config_destroy) and *me_out points into it, valid until then. On
 * failure both are NULL, nothing is left allocated, and e names the problem
 * the way a user finds it: the config's own message when it does not load
 * (its code), "FILE: no section [party PARTY]" (O3M_ENOTFOUND),
 * "FILE:LINE: [party PARTY] has role R; PROG needs role = ROLE"
 * (O3M_EINVAL), "FILE: SECTION: key 'KEY' is not set (required without
 * --insecure)" (O3M_EINVAL), "FILE: SECTION: KEY = PATH: strerror"
 * (O3M_EIO), SECTION being [federation] for ca and [party PARTY] for cert
 * and key, or "FILE: [party PARTY]: " and o3m_cert_check_party's message,
 * which names the file and the check that failed (O3M_ETLS). Messages
 * longer than O3M_ERRMSG_MAX are cut. */
int o3m_daemon_load_party(o3m_config **cfg_out, const o3m_party **me_out,
                          const char *config_path, const char *party, o3m_role role,
                          const char *prog, int insecure, o3m_err *e);

/* Writes "PORT\n" to path atomically. O3M_EINVAL if the path is too long,
 * O3M_EIO if the file cannot be written or renamed (e names it); nothing is
 * left behind on failure. */
int o3m_daemon_write_ready_file(const char *path, int port, o3m_err *e);

#endif
