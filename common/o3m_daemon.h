/* o3m_daemon.h -- what every O3M daemon does the same way around its
 * service: shielding its memory (no core dumps, no ptrace), naming itself
 * in the log, catching the stop signals, loading its party from the
 * federation config and announcing readiness to the scripts and tests that
 * start it.
 *
 * The functions here hold no state of their own. The stop-signal handler
 * stays in each main.c, because what it stops (a server, a service) is the
 * daemon's business; o3m_daemon_catch_stop_signals only installs it.
 *
 * A daemon started with --ready-file PATH writes its bound port to PATH once
 * it serves. The file appears whole or not at all (written under a temporary
 * name and renamed), so a reader that polls for it never sees a partial
 * port. */
#ifndef O3M_DAEMON_H
#define O3M_DAEMON_H

#include "o3m_config.h"
#include "o3m_error.h"

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

/* Memory that a burst of large messages made resident goes back to the
 * kernel (issue 9: a 60 MB request once kept the AP at 1.2 GB for good).
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
 * pass o3m_cert_check_party (common/o3m_cert.h): the key is the
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
