/* fed_proc.h -- helpers for end-to-end tests that start the real daemons.
 *
 * A test makes a temporary directory, certificates with
 * scripts/make-certs.sh, free loopback ports and a federation config, then
 * starts daemons from O3M_BIN_DIR with posix_spawn (stdout and stderr go to
 * DIR/NAME.log) and waits for their --ready-file. Every spawned process is
 * remembered, so fed_cleanup() (called from a suite's .fini, which Criterion
 * runs also after a failed assertion) kills what is still running and
 * removes the directory. The helpers assert with Criterion themselves. */
#ifndef FED_PROC_H
#define FED_PROC_H

#include <stddef.h>
#include <sys/types.h>

#include "o3m_rpc.h"

typedef struct fed_proc {
  pid_t pid;             /* 0 once reaped */
  int status;            /* exit code once reaped (128 + signal if killed) */
  char name[64];
  char log[512];         /* DIR/NAME.log */
  char ready[512];       /* DIR/NAME.ready */
} fed_proc;

/* Makes a fresh temporary directory (kept in the helper's state for
 * fed_cleanup) and returns its path. */
const char *fed_dir(void);

/* Runs scripts/make-certs.sh SUBDIR NAME... inside fed_dir() (subdir
 * relative to it); names is a space-separated list. */
void fed_make_certs(const char *subdir, const char *names);

/* A TCP port on 127.0.0.1 that was free a moment ago and that this process
 * has not handed out among its last 32 calls. */
int fed_free_port(void);

/* Writes text to fed_dir()/name and returns the full path (static storage
 * per call, 8 slots). */
const char *fed_write(const char *name, const char *text);

/* Starts O3M_BIN_DIR/bin with args (NULL-terminated, without argv[0]) and
 * "--ready-file DIR/NAME.ready" appended. */
void fed_spawn(fed_proc *p, const char *name, const char *bin, const char *const *args);

/* Waits up to timeout_ms for p's ready file and returns the port in it;
 * fails the test (with the log) if the process exits first or the time
 * runs out. */
int fed_wait_ready(fed_proc *p, int timeout_ms);

/* Waits up to timeout_ms for p to exit by itself; returns its exit code, or
 * -1 if it is still running. */
int fed_wait_exit(fed_proc *p, int timeout_ms);

/* Sends sig and waits up to timeout_ms; returns the exit code (128 +
 * signal if it died of one), or -1 after a SIGKILL when it did not exit. */
int fed_stop(fed_proc *p, int sig, int timeout_ms);

/* The first bytes of p's log (static buffer), for assertion messages. */
const char *fed_log(const fed_proc *p);

/* Kills every process still running and removes fed_dir(). */
void fed_cleanup(void);

/* A client for target. ca_dir NULL: plaintext. Otherwise TLS trusting
 * fed_dir()/CA_DIR/ca.pem, presenting fed_dir()/CERT_DIR/NAME.pem and .key
 * (name NULL: no client certificate) and expecting server_name in the
 * server's certificate. */
o3m_rpc_client *fed_client(const char *target, const char *ca_dir, const char *cert_dir,
                           const char *name, const char *server_name, int deadline_ms);

#endif
