/* o3m_rpc.h -- unary RPC over the gRPC C core, shared by every O3M daemon.
 *
 * All O3M calls are unary: one protobuf-c request, one reply or an error.
 * This module writes the grpc_op batch plumbing once for both sides, so a
 * daemon only supplies a table of methods and a client only names a path.
 *
 * Server. A daemon describes its service as a table of o3m_rpc_method rows
 * {path, request descriptor, reply descriptor, handler}; the descriptors
 * stand for the unpack, pack and free steps of each method. The server
 * registers every path with gRPC so that a call arrives with its headers
 * only, lets it in or refuses it (below, "Limits before the request is
 * read"), reads its request only then, and keeps a few calls requested per
 * method. o3m_rpc_server_run()
 * serves on the calling thread and threads - 1 more (below); handlers run
 * one at a time, so a handler may touch its daemon's state without locks
 * (the bandit policy is not thread-safe). Completion-queue tags point at
 * small typed structs {kind, slot}. Calls to paths outside the table are
 * answered UNIMPLEMENTED through one generic request slot.
 *
 * Threads. With threads = N every one of N serving threads polls the
 * server's one completion queue. gRPC does its work for the sockets -
 * reading, TLS decryption, HTTP/2 framing - inside the polling call, so
 * that work runs on all N threads at once. What a thread takes off the
 * queue it handles under the server's lock: unpacking, the authorization
 * hook, the handler, packing the reply and the idle hook run one at a time,
 * in the order the events were taken, exactly as with one thread. So a
 * service needs no locks of its own for its handlers, and what they decide
 * does not depend on N (only on the order in which calls arrive). A
 * handler or idle hook that would block (the active participant's fan-out)
 * gives the lock up for the blocking part with o3m_rpc_server_unlocked(),
 * like an interpreter's global lock around blocking I/O: meanwhile the
 * other threads handle calls and run the idle hook, which can therefore be
 * entered again by another thread while one is inside it (a service whose
 * hook releases the lock makes its hook re-entrant). What runs released
 * touches only what no handler touches (its own buffers, read-only state)
 * and the requests of calls it keeps deferred. The server counts the
 * threads inside such regions; shutdown fails the calls still deferred
 * after the grace period only once none is (it would complete calls a
 * released thread still owns), so a released part must be bounded (the
 * AP's by the passive parties' deadline). With threads = 1 nothing else
 * runs meanwhile, and the behaviour is the same as without the release.
 *
 * Deferred replies and the idle hook (adaptive batching). A handler may
 * return O3M_RPC_DEFERRED instead of answering: the call then stays open, its
 * request stays valid, and the service completes it later, in a handler or
 * the idle hook, with o3m_rpc_call_reply() or o3m_rpc_call_fail(). The
 * serving threads take every completion that is ready at once off the
 * queue (they poll without blocking until nothing is left), and only then,
 * before one blocks for more, runs the configured idle hook. So everything that queued
 * up while the thread was busy - for the active participant, the Recommend
 * calls that arrived during the previous fan-out - is seen by the hook as one
 * batch, and at low load a batch is a single call handled as soon as it
 * arrives. Each deferred call occupies one of its method's request slots
 * until it is completed; raise the slots of a batched method with
 * method_slots so that enough calls can queue while a batch is in flight.
 *
 * Health. Every server also answers the standard gRPC health check,
 * grpc.health.v1.Health/Check (proto/health.proto), without the daemon
 * listing it: the request's service "" (the whole server) or the name of a
 * service in the method table ("o3m.v1.Passive") gets status SERVING while
 * the server runs; another name gets NOT_FOUND. Health/Watch (streaming) is
 * UNIMPLEMENTED. A table that lists O3M_RPC_HEALTH_CHECK_PATH itself
 * replaces the built-in method. Behind mutual TLS a health probe needs a
 * client certificate like any other call.
 *
 * Errors. A handler returns an O3M code. o3m_rpc_status_from_error() is the
 * one place that maps O3M codes to gRPC status codes. The server also sends
 * the code's name in trailing metadata "o3m-error", and the client maps it
 * back, so an O3M client sees exactly the code the remote handler returned
 * (O3M_EMASK, not merely FAILED_PRECONDITION); a non-O3M peer's status goes
 * through o3m_rpc_error_from_status(). The client's o3m_err message names the
 * target and the path.
 *
 * Memory. Each client owns one arena and each server four (below). The
 * request payload is copied into an arena and unpacked with it as
 * protobuf-c's allocator, and a handler may borrow scratch space from it
 * for its reply. It is reset at the
 * start of every call, never freed per call, and grows (up to a cap of ten
 * times the request limit plus 1 MiB, or arena_max_bytes) only when a message
 * is larger than any before; a reset then sizes it for what the call before
 * needed (never below arena_bytes) and gives capacity beyond twice that back
 * to malloc, so an oversized message holds its memory only until the second
 * reset after it. So nobody ever calls __free_unpacked on a message from
 * this module, and steady-state calls allocate nothing here (gRPC itself
 * allocates its call objects and slices). The server skips the reset while any call is
 * deferred: a deferred call's request (and its o3m_rpc_call_alloc() memory)
 * lives in the arena until that call is completed, and the calls that
 * arrive meanwhile are unpacked behind it. The arena therefore holds a whole
 * batch (for Recommend requests, a few hundred bytes each) and is reset by
 * the first call that arrives when no call is deferred; a service that kept
 * calls deferred forever would fill it up to the cap, after which new calls
 * fail with O3M_EFULL. Complete deferred calls in the idle hook. A server
 * has four arenas (each with the same initial size and cap, taking memory
 * only once used): a call is unpacked into the current one, which is left
 * for an arena without deferred calls (reset first) when it holds some, so
 * that calls deferred without a pause - batches in flight while the next
 * ones queue, o3m_rpc_server_unlocked, or one thread's idle hook that
 * completes one batch at a time and takes new calls between batches -
 * still let arenas be reset. Only when all four hold deferred calls does
 * the current one grow as above.
 *
 * Limits before the request is read. A call reaches the server with its
 * headers: the method path and, behind mutual TLS, the caller's
 * certificate. Before a byte of its body is kept, the server authorizes it
 * (below) and checks its caller's limits; a call that fails either is
 * answered at once (PERMISSION_DENIED, or RESOURCE_EXHAUSTED naming the
 * identity and the limit) and its stream is reset, so gRPC drops whatever
 * of its body arrives, and the slot is requested again at once. Only a
 * call let in has its request read, and that read must complete within
 * receive_timeout_ms, or the call is cancelled with DEADLINE_EXCEEDED and
 * its slot freed. The limits, all in o3m_rpc_server_config:
 *   - streams_per_connection: HTTP/2 streams one connection may have open
 *     (gRPC's max_concurrent_streams); a stream whose body is not being
 *     read holds at most the initial flow-control window (64 KiB: the
 *     windows do not grow by BDP probing), and its headers at most
 *     O3M_RPC_MAX_METADATA_BYTES;
 *   - receiving_per_identity: calls of one identity whose requests are
 *     being read at once, so an identity holds at most that many times the
 *     request limit in request bytes, and never every slot of a method
 *     (each method has at least that many slots plus two);
 *   - connections_per_identity: connections (distinct peer addresses) on
 *     which one identity has calls in flight; a call on a further one is
 *     refused.
 * The per-identity limits count the verified certificate's identity, so
 * they apply with mutual TLS only (plaintext carries no identity); the
 * health check counts like any call. Refusals by a limit are counted in
 * o3m_rpc_server_stats.limited and logged at WARN at most once a second;
 * expired receives in expired.
 *
 * Security. Either TLS (optionally mutual, with client certificates whose
 * identity a handler can read) or, only when asked for explicitly with
 * insecure = 1, plaintext for loopback tests and the in-process simulation.
 *
 * Authorization. A server with mutual TLS may have an authorization hook
 * (o3m_rpc_server_config.authorize; proto/o3m_access.h builds the daemons'
 * policies on it). The layer calls it for every call of the method table,
 * with the path and the caller's identity (o3m_rpc_call_identity), before
 * the request is read (when the call's headers arrive) and before any
 * handler runs; the call goes on only if the hook allows it. A refusal is
 * answered PERMISSION_DENIED (O3M_EPERM) with a message naming the identity
 * and the method, counted in o3m_rpc_server_stats.denied, and the stream
 * is reset; nothing else happens: no reading, no handler, no arena reset. So every access rule lives in the hook, and
 * handlers need no identity checks of their own (except rules that depend
 * on the request, such as "party j fetches only block j"). The built-in
 * health check is never passed to the hook: any caller that passed the TLS
 * handshake may probe it. With insecure = 1 the hook is never called and
 * every call is allowed: plaintext carries no identity, which is what the
 * daemons' --insecure trials have always meant.
 *
 * Logging. The first server or client created routes gRPC core's own log
 * lines (gpr_log) through o3m_log (o3m_rpc_route_grpc_log), so they carry
 * the daemon's tag, level filter and format (--log-format json) instead of
 * going raw to stderr; gRPC's severities DEBUG, INFO and ERROR map to the
 * same o3m levels, except the error tree gRPC logs for a bind that failed,
 * which goes to DEBUG: o3m_rpc_server_create reports that failure itself
 * ("listen ADDR: address in use"). (gRPC still filters by its own
 * GRPC_VERBOSITY first, ERROR by default.)
 *
 * Shutdown follows gRPC's order: server shutdown-and-notify, drain, cancel
 * what is left after a grace period, destroy the server, then shut down,
 * drain and destroy the completion queue. Clients destroy the channel, then
 * their completion queue. */
#ifndef O3M_RPC_H
#define O3M_RPC_H

#include <stddef.h>
#include <stdint.h>

#include <grpc/status.h>
#include <protobuf-c/protobuf-c.h>

#include "o3m_config.h"
#include "o3m_error.h"
#include "o3m_metrics.h"

/* Largest message accepted or sent, unless configured otherwise
 * (o3m_defaults.h says why 64 MiB). */
#define O3M_RPC_DEFAULT_MAX_MESSAGE O3M_DEFAULT_MAX_MESSAGE
/* A daemon server's idle_close_ms (see o3m_rpc_server_config). */
#define O3M_RPC_DAEMON_IDLE_CLOSE_MS 10000
/* Initial arena size of a server or client. */
#define O3M_RPC_DEFAULT_ARENA (1 << 20)
/* Client deadline per call, unless configured otherwise. */
#define O3M_RPC_DEFAULT_DEADLINE_MS 5000
/* Calls kept requested per method: how many calls to one method can queue
 * while a handler runs. */
#define O3M_RPC_DEFAULT_SLOTS 4
/* Most request slots one method may have. */
#define O3M_RPC_MAX_SLOTS O3M_MAX_METHOD_SLOTS
/* Streams one connection may have open at once, unless configured
 * otherwise, and the most it may be configured to. */
#define O3M_RPC_DEFAULT_STREAMS O3M_DEFAULT_STREAMS
#define O3M_RPC_MAX_STREAMS O3M_MAX_STREAMS
/* How long a call that was let in may take to deliver its whole request,
 * unless configured otherwise. */
#define O3M_RPC_DEFAULT_RECEIVE_TIMEOUT_MS O3M_DEFAULT_RECEIVE_TIMEOUT_MS
/* Connections per identity, unless configured otherwise. Every
 * o3m_rpc_client has a connection of its own (gRPC does not share them
 * between channels whose credentials differ, and each client makes its
 * own). */
#define O3M_RPC_DEFAULT_CONNECTIONS_PER_IDENTITY O3M_DEFAULT_CONNECTIONS_PER_IDENTITY
#define O3M_RPC_MAX_CONNECTIONS_PER_IDENTITY O3M_MAX_CONNECTIONS_PER_IDENTITY
/* Largest header block (metadata) of one request. */
#define O3M_RPC_MAX_METADATA_BYTES O3M_MAX_METADATA_BYTES
/* Most serving threads of one server. */
#define O3M_RPC_MAX_THREADS O3M_MAX_THREADS
/* How long shutdown lets calls in flight finish before cancelling them. */
#define O3M_RPC_SHUTDOWN_GRACE_MS 1000
/* The built-in health method; request and reply are
 * grpc__health__v1__health_check_request__descriptor and
 * grpc__health__v1__health_check_response__descriptor of "health.pb-c.h". */
#define O3M_RPC_HEALTH_CHECK_PATH "/grpc.health.v1.Health/Check"
/* Trailing-metadata key carrying the O3M code name of a failed call. */
#define O3M_RPC_ERROR_KEY "o3m-error"

/* Routes gRPC core's log lines through o3m_log (see "Logging"); idempotent
 * and thread-safe. Server and client creation call it. */
void o3m_rpc_route_grpc_log(void);

/* ------------------------------------------------------------ status codes */

/* The one mapping from O3M codes to gRPC status codes. 0 gives GRPC_STATUS_OK;
 * a code outside the table gives GRPC_STATUS_UNKNOWN. */
grpc_status_code o3m_rpc_status_from_error(int code);

/* The fallback in the other direction, for a status that came without an
 * "o3m-error" name (a non-O3M peer, or an error raised by gRPC itself:
 * deadline, unreachable peer, message too large). GRPC_STATUS_OK gives 0;
 * any other status gives a negative code, O3M_ERPC when no closer one fits. */
int o3m_rpc_error_from_status(grpc_status_code status);

/* The code whose name o3m_errname() returns (for example "MASK"), or 0 when
 * the name is not in the table. */
int o3m_rpc_error_from_name(const char *name);

/* ------------------------------------------------------------ TLS */

/* PEM file paths; any may be NULL. The files are read once, when a server or
 * client is created.
 *   server: cert_file and key_file are required for TLS. With ca_file the
 *           server requires and verifies a client certificate signed by it.
 *   client: ca_file verifies the server (NULL: the system roots); cert_file
 *           and key_file, both or neither, are the client's certificate for
 *           mutual TLS; server_name, if set, is the name expected in the
 *           server certificate in place of the target's host. */
typedef struct o3m_rpc_tls {
  const char *ca_file;
  const char *cert_file;
  const char *key_file;
  const char *server_name;
} o3m_rpc_tls;

/* The mutual-TLS files of party me in a federation config: the federation
 * CA (which a server trusts for its callers, and a client for the server),
 * and me's certificate and key. server_name is NULL; a client pins its peer
 * by setting it to the peer party's name, which its certificate carries.
 * The strings belong to cfg. */
o3m_rpc_tls o3m_rpc_tls_of_party(const o3m_config *cfg, const o3m_party *me);

/* Party me's files as a client of party peer: o3m_rpc_tls_of_party with
 * server_name set to peer's name, since peers' certificates name the party,
 * not the host it runs on. The strings belong to cfg. */
o3m_rpc_tls o3m_rpc_tls_to_party(const o3m_config *cfg, const o3m_party *me,
                                 const o3m_party *peer);

/* ------------------------------------------------------------ server */

typedef struct o3m_rpc_server o3m_rpc_server;
/* The call being handled: valid during the handler, and for a deferred call
 * until it is completed. */
typedef struct o3m_rpc_call o3m_rpc_call;

/* A handler's return value that answers nothing yet: the call is deferred
 * and the service completes it later with o3m_rpc_call_reply() or
 * o3m_rpc_call_fail(). Positive, so it is never an O3M error code (those are
 * negative; see o3m_error.h). */
#define O3M_RPC_DEFERRED 1

/* A method implementation. req is the unpacked request (cast it to the
 * method's type); it and everything it points to live in the server arena
 * until the handler returns, so keep nothing from it - unless the handler
 * defers the call (below). reply has been initialized with the method's
 * reply descriptor (cast it likewise); the handler fills its fields, and
 * whatever they point to must stay valid until the handler returns, because
 * the reply is packed right after: point into the daemon's own preallocated
 * buffers or into o3m_rpc_call_alloc() memory. The handler returns 0, or a
 * negative O3M code after filling e with a message for the caller (if it
 * leaves e empty the code's default message is sent). On error the reply is
 * not sent. The message crosses to the peer, so it must not quote private
 * data.
 *
 * Or the handler returns O3M_RPC_DEFERRED, leaving reply and e untouched
 * (they are ignored). Then call and req - with everything req points to -
 * stay valid until the service completes the call with o3m_rpc_call_reply()
 * or o3m_rpc_call_fail(), which it must do in a later handler or in the
 * idle hook (under the server's lock). The service owns nothing of them: it keeps
 * the two pointers and must not use them after the completion. */
typedef int (*o3m_rpc_handler)(void *ctx, o3m_rpc_call *call, const ProtobufCMessage *req,
                               ProtobufCMessage *reply, o3m_err *e);

/* One row of a service's method table. The table and the strings it points
 * to must outlive the server (a static const array is the usual form). */
typedef struct o3m_rpc_method {
  const char *path;                              /* "/o3m.v1.Passive/Mask" */
  const ProtobufCMessageDescriptor *request;     /* unpacks the request */
  const ProtobufCMessageDescriptor *reply;       /* initializes and packs the reply */
  o3m_rpc_handler handler;
} o3m_rpc_method;

/* A per-method override of slots_per_method (see o3m_rpc_server_config). */
typedef struct o3m_rpc_method_slots {
  const char *path;  /* a path of the method table */
  int slots;         /* 1..O3M_RPC_MAX_SLOTS */
} o3m_rpc_method_slots;

/* The authorization hook (see "Authorization" above): ctx is the
 * server config's authorize_ctx, call the call being decided (for the
 * peer's address in a log line: o3m_rpc_call_peer), path its method and
 * identity o3m_rpc_call_identity(call), NULL for a caller without a verified
 * certificate. Returns 0 to allow the call. Any other value refuses it: the
 * caller gets O3M_EPERM and the message "<who> may not call <path>", followed
 * by ": " and e's message if the hook set one (it crosses to the peer, so it
 * must not quote private data). Runs on a serving thread, one call at a
 * time, like a handler; it must not block. */
typedef int (*o3m_rpc_authorize_fn)(void *ctx, o3m_rpc_call *call, const char *path,
                                    const char *identity, o3m_err *e);

/* The idle hook: ctx is the server's ctx. It runs on a serving thread
 * after every drain of the completion queue that handled at least one
 * completion (a call, a finished reply), when nothing more is ready, and
 * before the thread blocks; under a flood of completions also after every
 * 256 in a row, so it is never starved. It may complete deferred calls,
 * make blocking client calls and touch the service's state like a
 * handler. A hook that gives the lock up (o3m_rpc_server_unlocked) may be
 * entered by another thread meanwhile: it must be re-entrant. */
typedef void (*o3m_rpc_idle_fn)(void *ctx);

typedef struct o3m_rpc_server_config {
  /* Address to listen on: "127.0.0.1:7001", "[::]:7001", "unix:/path".
   * Port 0 picks a free port; o3m_rpc_server_port() tells which. */
  const char *listen;
  int insecure;           /* 1: plaintext; then tls must be empty */
  o3m_rpc_tls tls;
  int max_message_bytes;  /* both directions */
  /* Optional: a smaller limit for requests only (0: max_message_bytes). A
   * larger request is refused by gRPC with RESOURCE_EXHAUSTED before any
   * handler sees it; a daemon sets it to its largest valid request. */
  int max_receive_bytes;
  int slots_per_method;   /* calls kept requested per method, 1..O3M_RPC_MAX_SLOTS */
  /* The limits of "Limits before the request is read" above. Streams open
   * at once per connection, 1..O3M_RPC_MAX_STREAMS (default
   * O3M_RPC_DEFAULT_STREAMS). */
  int streams_per_connection;
  /* Time a call that was let in has to deliver its request, in ms (default
   * O3M_RPC_DEFAULT_RECEIVE_TIMEOUT_MS; 0: no limit). */
  int receive_timeout_ms;
  /* Calls of one identity whose requests are being read at once (0, the
   * default: as many as 32 MiB of requests at the request limit make,
   * within 4..32; at most O3M_RPC_MAX_SLOTS - 2). Every method gets at
   * least this many slots plus two. Mutual TLS only. */
  int receiving_per_identity;
  /* Connections on which one identity may have calls at once,
   * 1..O3M_RPC_MAX_CONNECTIONS_PER_IDENTITY (default
   * O3M_RPC_DEFAULT_CONNECTIONS_PER_IDENTITY). Mutual TLS only. */
  int connections_per_identity;
  /* Serving threads, 1..O3M_RPC_MAX_THREADS (0: 1); see "Threads" above. */
  int threads;
  size_t arena_bytes;     /* initial arena size */
  /* Optional: the arena's cap (0: ten times the request limit plus 1 MiB;
   * see "Memory" above). A server that defers many calls needs room for
   * all of their requests at once. */
  size_t arena_max_bytes;
  /* Optional: close a client's connection after it was idle this long (0:
   * never; gRPC's max_connection_idle). A client reconnects on its next
   * call. gRPC keeps buffers of the largest message a connection carried
   * (a refused oversized one included) until the connection closes, so
   * this bounds how long an idle attacker's connection holds memory. */
  int idle_close_ms;
  /* Optional: n_method_slots rows, each giving one method of the table its
   * own number of slots (a method whose calls are deferred and batched needs
   * about as many as there are concurrent callers). Read during create. */
  const o3m_rpc_method_slots *method_slots;
  int n_method_slots;
  o3m_rpc_idle_fn idle;   /* optional: see o3m_rpc_idle_fn */
  /* 1: the idle hook also runs when a poll of the queue (about every 100
   * ms) found nothing, so a service can take in work that does not arrive
   * as a call (the AP replicas' reward stream). 0 (default): only after a
   * drain that handled a completion. */
  int idle_on_timeout;
  /* Optional: see o3m_rpc_authorize_fn. With TLS it needs tls.ca_file (client
   * certificates); with insecure it is ignored. authorize_ctx must outlive the
   * server. */
  o3m_rpc_authorize_fn authorize;
  void *authorize_ctx;
  /* Optional: the registry every call of the method table (the health check
   * included) is counted in when its answer is sent, with its code and the
   * seconds since it arrived, a deferred call's wait included
   * (o3m_metrics_rpc_observe). NULL: none. It must outlive the server. */
  o3m_metrics *metrics;
} o3m_rpc_server_config;

/* Counters, read with o3m_rpc_server_stats_get() from any thread. */
typedef struct o3m_rpc_server_stats {
  uint64_t ok;          /* replies sent with status OK */
  uint64_t failed;      /* handler returned an error */
  uint64_t malformed;   /* request missing or not decodable */
  uint64_t unknown;     /* path not in the table */
  uint64_t denied;      /* refused by the authorization hook */
  uint64_t internal;    /* a gRPC call failed on our side (should stay 0) */
  uint64_t deferred;    /* calls deferred by their handler, since start */
  uint64_t idle_runs;   /* runs of the idle hook */
  uint64_t limited;     /* refused by a per-identity limit */
  uint64_t expired;     /* cancelled: the request did not arrive in time */
  int threads;          /* serving threads running (0 before run) */
  size_t arena_bytes;   /* current capacity of the arenas, summed */
} o3m_rpc_server_stats;

/* Defaults: listen NULL (must be set), TLS, max message
 * O3M_RPC_DEFAULT_MAX_MESSAGE, O3M_RPC_DEFAULT_SLOTS, O3M_RPC_DEFAULT_ARENA,
 * the limits' defaults (O3M_RPC_DEFAULT_STREAMS and so on),
 * no per-method slots, no idle hook, no authorization hook. */
void o3m_rpc_server_config_default(o3m_rpc_server_config *cfg);

/* Validates cfg and the method table (paths start with '/', no duplicates,
 * descriptors and handlers set; method_slots name paths of the table, once
 * each; an authorization hook only with client certificates or insecure),
 * reads the TLS files, allocates every slot
 * and the arena, binds the address and starts the server. Calls queue until
 * o3m_rpc_server_run() serves them. ctx is passed to every handler. The
 * server keeps pointers to methods and ctx, and copies everything in cfg.
 * The listening socket has no SO_REUSEPORT, so an address another process
 * listens on fails here instead of being shared with it; a unix socket path
 * that a live server accepts on is refused likewise (gRPC would unlink it
 * and bind anew), while a stale socket file is replaced.
 * Errors: O3M_EINVAL (config or table, the message names the field),
 * O3M_ETLS (a TLS file cannot be read, does not parse, or the key is not
 * the certificate's: o3m_cert_check_files, whose message names the file),
 * O3M_EIO (the address cannot be bound: "listen ADDRESS: CAUSE", the cause
 * found by binding a probe socket, for example "address in use (another
 * process holds port 7002)"), O3M_ENOMEM. On failure *out is NULL and
 * nothing is left allocated or listening. */
int o3m_rpc_server_create(o3m_rpc_server **out, const o3m_rpc_server_config *cfg,
                          const o3m_rpc_method *methods, int n_methods, void *ctx,
                          o3m_err *e);

/* The bound TCP port (the one chosen when the address said port 0). */
int o3m_rpc_server_port(const o3m_rpc_server *s);

/* Serves calls on the calling thread (and threads - 1 more, started here
 * and joined before it returns) until o3m_rpc_server_shutdown() is called,
 * then drains and shuts the server down, and returns 0. It returns
 * O3M_ESTATE if the server was already run. Handlers run on these threads,
 * one at a time (see "Threads" above). */
int o3m_rpc_server_run(o3m_rpc_server *s);

/* Asks a running (or not yet run) server to stop. It only sets an atomic
 * flag, so it is safe from any thread and from a signal handler; run()
 * notices it within 100 ms, lets calls in flight finish for up to
 * O3M_RPC_SHUTDOWN_GRACE_MS, cancels the rest and returns. Handlers and the
 * idle hook keep running during the grace period, so deferred calls are
 * normally completed by the service; a call still deferred when the grace
 * period is over (after the idle hook has run) is failed by the layer with
 * O3M_EUNAVAILABLE, and its handle must not be used again. */
void o3m_rpc_server_shutdown(o3m_rpc_server *s);

/* Frees the server. If run() never ran, this performs the shutdown first. It
 * must not be called while run() is executing: shut down, join the thread
 * that runs it, then destroy. NULL is accepted. */
void o3m_rpc_server_destroy(o3m_rpc_server *s);

void o3m_rpc_server_stats_get(const o3m_rpc_server *s, o3m_rpc_server_stats *st);

/* ---- inside a handler ---- */

/* The method path of the call. */
const char *o3m_rpc_call_method(const o3m_rpc_call *c);

/* The peer's address ("ipv4:127.0.0.1:40212"), fetched on first use. It is
 * not authenticated: use it for logs, never for access decisions. Never
 * NULL ("" if unknown). */
const char *o3m_rpc_call_peer(o3m_rpc_call *c);

/* The peer's TLS identity: the subject common name (CN) of a verified
 * client certificate, or NULL if the peer is not authenticated (plaintext
 * server, or TLS without client certificates) or its CN is ambiguous (more
 * than one CN, a NUL byte, 256 bytes or more). Federation certificates
 * (scripts/make-certs.sh) have CN = party or client name and share the
 * subject alternative names localhost and 127.0.0.1, so the CN, not a SAN,
 * names the party. This is what an access decision rests on (the
 * authorization hook gets it). */
const char *o3m_rpc_call_identity(o3m_rpc_call *c);

/* n bytes from the server arena, aligned for any type, valid until the reply
 * has been packed (for a deferred call: until it is completed). NULL when
 * the arena cap is reached; the handler should then return O3M_EFULL. */
void *o3m_rpc_call_alloc(o3m_rpc_call *c, size_t n);

/* ---- completing a deferred call (from a handler or the idle hook only) ---- */

/* Sends reply, a message of the method's reply type built by the service,
 * as the answer of deferred call c. The reply is packed before this returns
 * and stays the caller's. Returns 0 when the reply was sent. If the reply
 * cannot be sent - another message type (O3M_EINVAL), an incomplete message
 * (O3M_ECORRUPT), larger than max_message_bytes (O3M_ERANGE) - the call is
 * failed with that code instead, which is returned; e (may be NULL) gets
 * the message. Either way c is completed and must not be used again.
 * O3M_ESTATE, with nothing sent, if c is not a deferred call. */
int o3m_rpc_call_reply(o3m_rpc_call *c, const ProtobufCMessage *reply, o3m_err *e);

/* Fails deferred call c with code (a negative O3M code; anything else is
 * sent as O3M_ESTATE) and the message of why (NULL or empty: the code's
 * default message), exactly as if its handler had returned the error.
 * Returns 0, after which c must not be used again; O3M_ESTATE, with nothing
 * sent, if c is not a deferred call. */
int o3m_rpc_call_fail(o3m_rpc_call *c, int code, const o3m_err *why);

/* ---- giving the lock up (from a handler or the idle hook only) ---- */

/* Releases the server's lock, runs fn(arg) and takes the lock back (see
 * "Threads" above). Only from a handler or the idle hook of s, on a
 * serving thread. The requests of deferred calls and of the calling
 * handler's call stay valid meanwhile (the arena they live in is not
 * reset); fn must not call any function of this module on s, and what it
 * reads and writes no handler may touch meanwhile. It must return in
 * bounded time: shutdown waits for it before failing the calls still
 * deferred. */
void o3m_rpc_server_unlocked(o3m_rpc_server *s, void (*fn)(void *), void *arg);

/* From the idle hook of s only: run the hook again once the queue is
 * empty, as if a completion had been handled, even when none comes. For a
 * hook that does part of its work per run, so that calls arriving
 * meanwhile are taken between the parts, and whose part completed no call
 * (the active participant's slice of a large round, ap_round.h). */
void o3m_rpc_server_idle_again(o3m_rpc_server *s);

/* ------------------------------------------------------------ client */

typedef struct o3m_rpc_client o3m_rpc_client;

typedef struct o3m_rpc_client_config {
  /* gRPC target: "127.0.0.1:7001", "dns:///pp2.example.org:7001",
   * "unix:/run/o3m/pp2.sock". */
  const char *target;
  int insecure;           /* 1: plaintext; then tls must be empty */
  o3m_rpc_tls tls;
  int deadline_ms;        /* per call, 1 .. 86,400,000 */
  int max_message_bytes;  /* both directions */
  size_t arena_bytes;     /* initial arena size */
  /* 0: a call fails at once with O3M_EUNAVAILABLE when the peer cannot be
   * reached. 1: the call waits for the peer (up to its deadline), which is
   * what a daemon wants while the federation starts up. Either way the
   * channel retries a lost connection with a backoff capped at 2 s. */
  int wait_for_ready;
  /* 1: balance calls over every address the target resolves to, round
   * robin (gRPC's round_robin policy; "ipv4:a:p1,b:p2" names several), and
   * skip those that fail: a party served by several instances. 0: gRPC's
   * default (the first address that connects). */
  int round_robin;
} o3m_rpc_client_config;

/* Defaults: target NULL (must be set), TLS with the system roots, deadline
 * O3M_RPC_DEFAULT_DEADLINE_MS, max message O3M_RPC_DEFAULT_MAX_MESSAGE,
 * arena O3M_RPC_DEFAULT_ARENA, wait_for_ready 0. */
void o3m_rpc_client_config_default(o3m_rpc_client_config *cfg);

/* Sets how client cc secures its channel, the one way every O3M client
 * does: plaintext when insecure (its tls then left empty, as
 * o3m_rpc_client_create requires), else TLS with tls. The strings are not
 * copied: they must outlive o3m_rpc_client_create. */
void o3m_rpc_client_secure(o3m_rpc_client_config *cc, int insecure, o3m_rpc_tls tls);

/* Validates cfg, reads the TLS files and creates the channel (gRPC connects
 * lazily, on the first call) and the arena. Errors as for server_create
 * except that nothing binds (so no O3M_EIO). On failure *out is NULL. */
int o3m_rpc_client_create(o3m_rpc_client **out, const o3m_rpc_client_config *cfg,
                          o3m_err *e);

/* Frees the client; a call still in flight is cancelled first. NULL is
 * accepted. */
void o3m_rpc_client_destroy(o3m_rpc_client *c);

/* The target the client was created for. */
const char *o3m_rpc_client_target(const o3m_rpc_client *c);

/* One blocking unary call: start plus finish. */
int o3m_rpc_client_call(o3m_rpc_client *c, const char *path, const ProtobufCMessage *req,
                        const ProtobufCMessageDescriptor *reply_desc, ProtobufCMessage **reply,
                        o3m_err *e);

/* Starts a call without waiting, so that a caller can have calls to several
 * peers in flight at once (the active participant asks every passive
 * participant in parallel): start on each client, then finish on each. The
 * request is packed before this returns, so req may be reused at once; path
 * must stay valid until finish (string literals, as in o3m_wire.h). Starting
 * resets the client arena, which ends the life of the previous reply.
 * Errors: O3M_ESTATE if a call is already in flight on this client,
 * O3M_EINVAL for a NULL argument or a path not starting with '/',
 * O3M_ERANGE if the request is larger than max_message_bytes, O3M_ENOMEM,
 * O3M_ERPC if gRPC refuses the batch. On error no call is in flight. */
int o3m_rpc_client_start(o3m_rpc_client *c, const char *path, const ProtobufCMessage *req,
                         const ProtobufCMessageDescriptor *reply_desc, o3m_err *e);

/* Waits for the call started on c (the deadline bounds the wait) and unpacks
 * the reply. On success *reply points into the client arena and stays valid
 * until the next start on this client or its destruction; the caller never
 * frees it. Errors: the remote handler's exact code when the peer is an O3M
 * server; otherwise o3m_rpc_error_from_status() of the status, typically
 * O3M_EDEADLINE, O3M_EUNAVAILABLE (peer unreachable, or TLS handshake
 * failed), O3M_EFULL (message over a size limit), O3M_ERPC (UNIMPLEMENTED
 * and the like); O3M_EPARSE if the reply does not decode; O3M_ESTATE if no
 * call was started. e names the target and the path. On return no call is
 * in flight, whatever the outcome, and *reply is NULL on error. */
int o3m_rpc_client_finish(o3m_rpc_client *c, ProtobufCMessage **reply, o3m_err *e);

/* Current arena capacity of the client, for tests of the no-growth claim. */
size_t o3m_rpc_client_arena_bytes(const o3m_rpc_client *c);

#endif
