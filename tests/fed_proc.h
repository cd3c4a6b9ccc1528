/* fed_proc.h -- helpers for end-to-end tests that start the real daemons.
 *
 * A test makes a temporary directory, certificates with
 * scripts/make-certs.sh, free loopback ports and a federation config, then
 * starts daemons from O3M_BIN_DIR (stdout and stderr go to DIR/NAME.log;
 * each child gets PR_SET_PDEATHSIG, so none outlives a test process that
 * dies) and waits for their --ready-file. Every spawned process is
 * remembered, so fed_cleanup() (called from a suite's .fini, which Criterion
 * runs also after a failed assertion) kills what is still running, removes
 * the directory and releases the ports fed_free_port reserved. The helpers
 * assert with Criterion themselves.
 *
 * The second half is the four-party federation that test_active and
 * test_recovery share (fed_net): o3m-pmg, o3m-active and two o3m-passive
 * with small synthetic feature tables, and the in-process view of the same
 * tables (fed_tables) that those tests compare the AP's decisions with. */
#ifndef FED_PROC_H
#define FED_PROC_H

#include <stddef.h>
#include <sys/types.h>

#include "o3m_rng.h"
#include "o3m_rpc.h"
#include "o3m_features.h"
#include "o3m_fingerprint.h"

/* FED_ASAN is 1 when this test, and so the daemons of its build, run under
 * AddressSanitizer. Two kinds of check mean nothing there: a scan of a whole
 * address space (every process maps terabytes of reserved shadow memory
 * read-write) and resident-memory figures (freed memory waits in ASan's
 * quarantine, up to 256 MB, instead of going back to the kernel). CI runs
 * the plain build first, where they are made. */
#if defined(__SANITIZE_ADDRESS__)
#define FED_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FED_ASAN 1
#endif
#endif
#ifndef FED_ASAN
#define FED_ASAN 0
#endif

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

/* The same with --dns ALT: every certificate also names ALT (the NATS
 * nodes' shared name, fed_nats.h). */
void fed_make_certs_dns(const char *subdir, const char *alt, const char *names);

/* A TCP port on 127.0.0.1 reserved for this test until fed_release_port
 * or fed_cleanup (or the test process's exit, which closes it too).
 *
 * Why a reservation held, and not "bind port 0 and close it" or "the
 * daemon binds port 0". Closing the probe socket before the daemon binds
 * left a window in which any process on the machine could get the same
 * port from its own port-0 bind or outgoing connect (a parallel test, a
 * browser), and the daemon then failed with "address in use". Letting the
 * daemons bind port 0 and report it in their ready file works only for a
 * party nobody dials first: every party dials the others at the addresses
 * of the shared config, which must be written before the first one starts.
 *
 * So the reservation is a socket bound to 127.0.0.1:PORT with
 * SO_REUSEADDR, never listening, kept open. On Linux:
 * - another process's port-0 bind or connect never gets a port that a
 *   bound socket holds (the kernel's automatic choice does not share a
 *   port, SO_REUSEADDR or not);
 * - an explicit bind of the port with SO_REUSEADDR succeeds, and so does
 *   listen(), while the other socket holding it does not listen. Every
 *   listener the tests start sets SO_REUSEADDR: gRPC's TCP listeners
 *   (grpc_tcp_server_prepare_socket; o3m_rpc_tls.c turns off gRPC's
 *   SO_REUSEPORT, so a reservation with SO_REUSEPORT, the obvious
 *   alternative, would make the daemon's bind fail), the metrics listener
 *   of o3m_httpd.c (its own socket, handed to libmicrohttpd) and
 *   nats-server (Go's listeners). The probe socket is a unix path, with no
 *   port;
 * - a second daemon on the port still fails with "address in use", since
 *   the first one listens there.
 * The reservation is kept after the daemon has bound (until
 * fed_cleanup), so a daemon that a test stops and starts again on the same
 * port finds it free too. A process that binds without SO_REUSEADDR cannot
 * bind a reserved port: release it first with fed_release_port. */
int fed_free_port(void);

/* Closes the reservation of port (nothing if it has none). */
void fed_release_port(int port);

/* fed_dir()/name (static storage per call, 8 slots). */
const char *fed_path(const char *name);

/* Writes text to fed_dir()/name and returns the full path (a fed_path
 * slot). */
const char *fed_write(const char *name, const char *text);

/* The federation fingerprint of the config file at path (o3m_config_load;
 * fails the test if it does not load), as a daemon started with it computes
 * it: what a test's own calls to a daemon must state. */
void fed_fingerprint(const char *path, unsigned char out[O3M_FINGERPRINT_BYTES]);

/* Starts O3M_BIN_DIR/bin with args (NULL-terminated, without argv[0]) and
 * "--ready-file DIR/NAME.ready" appended; fails the test if bin is not
 * built. DIR/NAME.log is truncated. */
void fed_spawn(fed_proc *p, const char *name, const char *bin, const char *const *args);

/* Waits up to timeout_ms for p's ready file and returns the port in it;
 * fails the test (with the log) if the process exits first or the time
 * runs out. */
int fed_wait_ready(fed_proc *p, int timeout_ms);

/* Waits up to timeout_ms for p to exit by itself; returns its exit code, or
 * -1 if it is still running. */
int fed_wait_exit(fed_proc *p, int timeout_ms);

/* Sends sig (and SIGCONT, so that a process stopped with SIGSTOP gets it
 * too) and waits up to timeout_ms; returns the exit code (128 + signal if
 * it died of one), or -1 after a SIGKILL when it did not exit. */
int fed_stop(fed_proc *p, int sig, int timeout_ms);

/* The first bytes of p's log (static buffer), for assertion messages. */
const char *fed_log(const fed_proc *p);

/* The last bytes of p's log (another static buffer): what a process that
 * stopped said last. */
const char *fed_log_tail(const fed_proc *p);

/* Kills every process still running and removes fed_dir(), unless
 * O3M_KEEP_TEST_DIR is set: then it says on stderr which directory it kept. */
void fed_cleanup(void);

/* A client for target. ca_dir NULL: plaintext. Otherwise TLS trusting
 * fed_dir()/CA_DIR/ca.pem, presenting fed_dir()/CERT_DIR/NAME.pem and .key
 * (name NULL: no client certificate) and expecting server_name in the
 * server's certificate. Threads may make clients at once. */
o3m_rpc_client *fed_client(const char *target, const char *ca_dir, const char *cert_dir,
                           const char *name, const char *server_name, int deadline_ms);

/* The AP's ActiveStats, asked by client c (asserts that the call
 * succeeds); the message lives until c's next call. */
const struct O3m__V1__ActiveStats *fed_active_stats(o3m_rpc_client *c);

/* Seconds on the monotonic clock, for timing. */
double fed_now_s(void);

void fed_sleep_ms(int ms);

/* ------------------------------------------------------------------------
 * The AP tests' federation. Parties, in column order of the context:
 * "ap" (o3m-active; 2 user + 1 item columns), "pp1" (o3m-passive; 2 user
 * columns) and "pp2" (o3m-passive; 1 user + 2 item columns), so d = 8; and
 * "pmg" (o3m-pmg). Users are u0..u{FED_USERS-1} (pp1 may know fewer), items
 * i0..i{FED_ITEMS-1}; certificates for the parties and for the client
 * FED_CLIENT are in fed_dir()/certs. The config names FED_CLIENT in a
 * [client NAME] section (with its cert and key), so it is the one identity
 * the AP answers Recommend, Reward and Stats. */
#define FED_D 8
#define FED_USERS 30
#define FED_ITEMS 12
#define FED_K_MAX 8 /* the config's max_candidates */

enum { FED_PMG, FED_AP, FED_PP1, FED_PP2, FED_N_PARTIES };

/* The [client NAME] of the federation and its certificate's name. */
#define FED_CLIENT "client"
/* The second client of fed_setup.second_client. */
#define FED_CLIENT2 "other"


/* "pmg", "ap", "pp1", "pp2": party names in the config, the certificate
 * names and the fed_proc names (hence the log and ready file names). */
extern const char *const fed_party_name[FED_N_PARTIES];

/* What differs between the tests that use the federation. */
typedef struct fed_setup {
  unsigned table_seed;   /* the five tables use table_seed + 0 .. + 4 */
  int pp1_users;         /* rows of pp1's user table (<= FED_USERS) */
  int deadline_ms;       /* [federation] deadline_ms */
  const char *policy;    /* [policy] lines before max_candidates, each ending in \n */
  int pending_capacity;  /* [policy] pending_capacity */
  int state_dirs;        /* nonzero: state_dir = NAME_state for every party */
  /* [federation] aggregation: NULL for the default (secure). Every passive
   * party gets a fresh key pair (NAME.agg) and its agg_public either way. */
  const char *aggregation;
  /* More [federation] lines, each ending in \n (NULL: none); the replicas'
   * tests put replication = nats and the NATS servers here. */
  const char *federation_extra;
  /* pp1's instances key (more instances of pp1; NULL: none). */
  const char *pp1_instances;
  /* Nonzero: a second client, FED_CLIENT2, with its own certificate and
   * [client NAME] section after FED_CLIENT's (the tests of what one client
   * can do to another). */
  int second_client;
  /* Nonzero: pp1's 2 columns are item columns (pp1_items.csv, FED_ITEMS
   * rows) instead of user columns, so that pp1 has no user table: the
   * federation then has a party with only item columns (the
   * factored batches answer its user half with zeros). */
  int pp1_items;
} fed_setup;

/* A federation: its processes, ports and config. The caller owns it (a
 * static in the test, as Criterion's .init and .fini take no argument). */
typedef struct fed_net {
  fed_proc proc[FED_N_PARTIES];
  int port[FED_N_PARTIES];
  char conf[512]; /* fed_dir()/federation.conf */
} fed_net;

/* Writes the certificates, the feature tables (ap_users.csv, ap_items.csv,
 * pp1_users.csv or pp1_items.csv, pp2_users.csv, pp2_items.csv) and catalog.txt (the items,
 * one a line) into fed_dir(), picks a free port per party and writes the
 * config. Starts nothing. */
void fed_net_prepare(fed_net *n, const fed_setup *s);

/* Starts party p with "--config CONF --party NAME", then extra (NULL or
 * NULL-terminated), then the ready file that fed_spawn appends. Waits for
 * nothing: fed_wait_ready(&n->proc[p], ...) does. */
void fed_net_start(fed_net *n, int p, const char *const *extra);

/* The same with another config file, conf (a party handed its own copy,
 * as the federation fingerprint's and the bounds' tests need). */
void fed_net_start_conf(fed_net *n, int p, const char *conf, const char *const *extra);

/* The federation's feature tables loaded in process, as the parties load
 * them: the unmasked contexts that a central model would see. */
typedef struct fed_tables {
  o3m_features *ap, *pp1, *pp2;
} fed_tables;

/* Loads the tables fed_net_prepare wrote; fed_tables_free releases them. */
void fed_tables_load(fed_tables *t);
void fed_tables_free(fed_tables *t);

/* Writes X (K x FED_D, row-major) = [x^ap, x^pp1, x^pp2] per candidate for
 * user and items[0..K-1] (K <= FED_K_MAX). An id a party does not know gets
 * that party's dummy row, which only the party can reproduce. Returns 0, or
 * -1 if a table refused the lookup (X is then partly written). Thread-safe
 * (o3m_features_fill is); asserts nothing, so client threads may call it. */
int fed_contexts(const fed_tables *t, const char *user, int K, const char *const *items,
                 double *X);

/* A round's request: a user and K distinct items in a random order. */
typedef struct fed_round {
  char user[16];
  char names[FED_K_MAX][16];
  const char *items[FED_K_MAX]; /* point into names */
  int K;                        /* 2 .. FED_K_MAX */
} fed_round;

/* Draws a round from r: the user among u0..u{n_users-1}, then K, then the
 * items. The same r gives the same rounds, so a test is reproducible. */
void fed_draw_round(o3m_rng *r, int n_users, fed_round *q);

/* The tests' hidden click model: a reward in (0, 1), the logistic of a fixed
 * theta times the unmasked context x (FED_D values). */
double fed_click_reward(const double *x);

/* ------------------------------------------------------------------------
 * Waiting on conditions. A test orders its events by waiting for what the
 * daemons show (a Stats counter, a ready file, a log line), never by a
 * sleep; these helpers poll with a deadline and fail the test naming what
 * they waited for. */

/* Polls cond(arg) until it returns nonzero, pausing 1 ms at first and
 * doubling up to 50 ms (o3m_backoff), and fails the test if deadline_ms
 * pass first: "gave up after D ms waiting for WHAT". what is a phrase that
 * completes "waiting for" ("pp1 to be asked for the first slice"). cond is
 * called at least once, and once more after the deadline, so that a
 * condition met while the last pause ran still counts. */
void fed_wait_until(int (*cond)(void *arg), void *arg, int deadline_ms, const char *what);

/* fed_client with wait_for_ready set: a call waits (up to its deadline) for
 * the connection instead of failing at once while gRPC backs off after a
 * failed connect. What a test's client of a daemon that is already ready
 * wants: on a loaded machine a first connect can fail, and without it
 * every call on that channel fails until the reconnect backoff ends. */
o3m_rpc_client *fed_client_ready(const char *target, const char *ca_dir, const char *cert_dir,
                                 const char *name, const char *server_name, int deadline_ms);

/* ------------------------------------------------------------------------
 * Conditions on this process's own connections (the ports helpers). */

/* This process's TCP connections to 127.0.0.1:port (IPv4, or IPv6 mapped):
 * fills fds[] and acked[] (the bytes the peer's kernel has acknowledged,
 * TCP_INFO's tcpi_bytes_acked) for up to cap of them, in descriptor order,
 * and returns how many there are. A request a client has started has
 * reached the peer's host once its connection's count has grown: the
 * condition a test waits on instead of a sleep when the peer cannot be
 * asked (a daemon whose only thread is busy). */
int fed_conns_acked(int port, int *fds, unsigned long long *acked, int cap);

#endif
