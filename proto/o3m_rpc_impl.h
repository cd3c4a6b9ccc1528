/* o3m_rpc_impl.h -- what the RPC layer's own files share; not installed.
 *
 * The RPC layer (o3m_rpc.h) is one module in seven files, one per concern:
 * the status mapping and gRPC's log routing (o3m_rpc.c), the arena that backs
 * protobuf-c unpacking with message packing and unpacking over gRPC byte
 * buffers (o3m_rpc_arena.c), TLS credentials and channel arguments
 * (o3m_rpc_tls.c), the listen checks and messages (o3m_rpc_listen.c), the
 * server's set-up, loop and shutdown with the built-in health check
 * (o3m_rpc_server.c), a server's calls from slot to reply, the one place of
 * the server's gRPC batches (o3m_rpc_call.c), and the client, the one place
 * of the client's (o3m_rpc_client.c). This header holds the limits, the
 * structures more than one of them reads and the helpers more than one of
 * them calls. Only files in proto/ include it; everyone else uses
 * o3m_rpc.h. */
#ifndef O3M_RPC_IMPL_H
#define O3M_RPC_IMPL_H

#include "o3m_rpc.h"

#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/log.h>
#include <grpc/support/time.h>

#include "health.pb-c.h"
#include "o3m_assert.h"
#include "o3m_bytes.h"
#include "o3m_cert.h"
#include "o3m_clock.h"
#include "o3m_limits.h"
#include "o3m_log.h"

/* Longest accepted method path. */
#define PATH_MAX_LEN O3M_MAX_METHOD_PATH
/* Upper bounds on configuration values. */
#define MAX_MESSAGE_LIMIT O3M_MAX_MESSAGE
#define MAX_METHODS O3M_MAX_METHODS
#define MAX_DEADLINE_MS O3M_MAX_DEADLINE_MS
/* Poll period of the server loop, which bounds how late a shutdown request
 * is noticed. */
#define POLL_MS 100
/* The idle hook runs at the latest after this many completions in a row,
 * so that a steady stream of other calls cannot keep it waiting. */
#define IDLE_EVERY 256
/* Reconnect backoff cap of client channels (gRPC's default is 120 s, which
 * would make a daemon that started before its peer wait minutes). */
#define RECONNECT_MAX_MS 2000
/* A server closes a connection whose TLS (or plaintext HTTP/2) handshake
 * has not completed after this long. */
#define HANDSHAKE_TIMEOUT_MS 5000
/* Room for a TLS identity (a DNS name or URI). */
#define IDENTITY_MAX 256
/* Arenas of a server, whatever its number of threads; see "Memory" in
 * o3m_rpc.h and o3m_rpc__on_recv. One thread needs them too: its idle hook sends one
 * batch of deferred calls at a time and comes back for new calls between
 * batches, so some call is deferred at nearly every moment, and a single
 * arena, reset only when none is, would grow for as long as the load
 * lasts. */
#define SERVER_ARENAS 4
/* How often the server looks for requests past their receive deadline. */
#define EXPIRY_EVERY_MS 50
/* The per-identity receive cap when none is configured: as many calls as
 * fit RECEIVE_BUDGET bytes of the largest request, within
 * RECEIVING_MIN..RECEIVING_MAX (see o3m_rpc_server_config). */
#define RECEIVE_BUDGET (32u << 20)
#define RECEIVING_MIN 4
#define RECEIVING_MAX 32
/* Slots every method has beyond one identity's receive cap, so that the
 * calls of one identity never hold all of a method's slots and the
 * others' calls (and the refusals) still find one. */
#define SLOTS_BEYOND_CAP 2
_Static_assert(O3M_MAX_RECEIVING == O3M_MAX_METHOD_SLOTS - SLOTS_BEYOND_CAP, "receive cap range");

/* A bump allocator made of chunks. Only the head chunk is filled; a request
 * that does not fit in it adds a chunk at least as large as everything
 * before (so the total doubles) while the total stays under the cap. A reset
 * folds several chunks into one of the total size, so that after a growth
 * the next message of the same size fits in one block again. */
typedef struct arena_chunk {
  struct arena_chunk *next;
  size_t cap;
  size_t used;
} arena_chunk;

typedef struct arena {
  arena_chunk *head;
  size_t total;   /* sum of chunk capacities */
  size_t initial; /* the size it was created with; it never shrinks below */
  size_t cap;     /* limit on total */
  int exhausted;  /* an allocation failed since the last reset */
} arena;

/* Channel arguments shared by both sides: the message limits both ways; for
 * servers no SO_REUSEPORT, the idle-connection close, the handshake
 * timeout and the per-connection limits (streams, metadata, no window
 * growth); for clients the reconnect cap, the TLS name override and
 * round-robin balancing. At most eight of them. */
typedef struct chan_args {
  grpc_arg arg[8];
  grpc_channel_args args;
} chan_args;

typedef enum { TAG_CALL = 1, TAG_RECV, TAG_REPLY, TAG_SHUTDOWN, TAG_CLIENT } tag_kind;

typedef struct rpc_tag {
  tag_kind kind;
  struct o3m_rpc_call *slot;
} rpc_tag;

typedef struct method_entry {
  const o3m_rpc_method *m;
  void *registered;          /* gRPC's handle for the path */
  ProtobufCMessage *reply;   /* reply storage, sizeof_message bytes */
  o3m_metrics_rpc_method series; /* its metrics, found at its first answer */
} method_entry;

struct o3m_rpc_call {
  o3m_rpc_server *srv;
  method_entry *me;          /* NULL: the generic slot */
  rpc_tag on_call, on_recv, on_reply;
  int requested, replying;
  /* Its request message is being read (a RECV_MESSAGE batch is in flight,
   * started only once the call was authorized and within its caller's
   * limits); recv_by is when the receive deadline cancels it, and expired
   * says that it did. */
  int receiving, expired;
  gpr_timespec recv_by;
  /* Accepted (authorized and within the limits) and not yet cleaned: the
   * calls whose identities and peers (peer_hash) the per-identity limits
   * count. */
  int live;
  uint64_t peer_hash;
  int deferred;              /* the handler deferred it; not yet completed */
  grpc_call *call;
  gpr_timespec deadline;
  grpc_metadata_array md;
  grpc_call_details details; /* generic slot only */
  grpc_byte_buffer *payload;
  grpc_byte_buffer *reply;
  grpc_slice status_details;
  int has_details;
  grpc_metadata trailing;
  int cancelled;
  char *peer;                /* gpr_malloc'd by gRPC */
  int identity_state;        /* 0 not looked up, 1 found, -1 none */
  char identity[IDENTITY_MAX];
  double arrived;            /* o3m_clock_s() when o3m_rpc__on_call took it (metrics only) */
  int arena_ix;              /* the server arena its request was unpacked in */
};

struct o3m_rpc_server {
  grpc_server *server;
  grpc_completion_queue *cq;
  int grpc_inited, started, ran, torn_down;
  int serving;               /* handlers may run (inside run() only) */
  int stopping;              /* shutdown sent: slots are not requested again */
  int outstanding;           /* tags gRPC still owes us, shutdown tag excluded */
  int n_deferred;            /* slots that are deferred */
  o3m_rpc_idle_fn idle;
  int idle_on_timeout;
  o3m_rpc_authorize_fn authorize; /* NULL: every call is allowed */
  void *authorize_ctx;
  o3m_metrics *metrics;      /* NULL: calls are not counted */
  int port;
  int max_message;
  /* The limits of "Limits before the request is read" (o3m_rpc.h). */
  int receive_timeout_ms;
  int receiving_cap;         /* per identity; 0 with no identity caps */
  int connections_cap;       /* per identity */
  gpr_timespec next_expiry;  /* when o3m_rpc__expire_receives looks again */
  double limit_logged;       /* o3m_clock_s() of the last limit WARN */
  uint64_t limit_unlogged;   /* refusals by a limit not logged since */
  void *ctx;
  method_entry *methods;
  int n_methods;
  struct o3m_rpc_call *slots;
  int n_slots;
  /* Requests are unpacked into arenas[cur_arena]; arena_deferred[i] counts
   * the deferred calls whose requests live in arenas[i] (see o3m_rpc__on_call). */
  arena arenas[SERVER_ARENAS];
  int n_arenas, cur_arena;
  int arena_deferred[SERVER_ARENAS];
  rpc_tag shutdown_tag;
  /* Serving threads (see "Threads" in o3m_rpc.h). mu guards everything
   * above and below that is not atomic while they run. */
  int threads;
  pthread_mutex_t mu;
  int busy;                  /* events handled since the idle hook last ran */
  int released;              /* threads inside o3m_rpc_server_unlocked */
  int shutdown_sent, shutdown_done, cancelled, finished;
  gpr_timespec grace_end;
  atomic_int threads_running;
  atomic_int stop;
  atomic_uint_least64_t n_ok, n_failed, n_malformed, n_unknown, n_internal, n_deferred_total,
      n_idle, n_denied, n_limited, n_expired;
  atomic_size_t arena_total;
};


/* o3m_rpc_arena.c */
int o3m_rpc__arena_init(arena *a, size_t initial, size_t cap);
void o3m_rpc__arena_release(arena *a);
void o3m_rpc__arena_reset(arena *a);
void *o3m_rpc__arena_alloc(arena *a, size_t n);
int o3m_rpc__pack_message(const ProtobufCMessage *m, size_t max, grpc_byte_buffer **out,
                          o3m_err *e);
int o3m_rpc__unpack_message(arena *a, grpc_byte_buffer *bb, const ProtobufCMessageDescriptor *desc,
                            ProtobufCMessage **out, o3m_err *e);
int o3m_rpc__descriptor_ok(const ProtobufCMessageDescriptor *d);

/* o3m_rpc_tls.c */
int o3m_rpc__tls_empty(const o3m_rpc_tls *t);
void o3m_rpc__chan_args_fill(chan_args *ca, int max_message, int max_receive, int client,
                             const char *server_name, int idle_close_ms, int round_robin,
                             int streams);
int o3m_rpc__check_limits(int max_message, size_t arena_bytes, o3m_err *e);
size_t o3m_rpc__arena_cap_for(int max_message);
int o3m_rpc__make_credentials(int insecure, const o3m_rpc_tls *tls, grpc_server_credentials **sout,
                              grpc_channel_credentials **cout, o3m_err *e);

/* o3m_rpc_listen.c */
int o3m_rpc__unix_check_free(const char *addr, o3m_err *e);
int o3m_rpc__listen_error(const char *addr, o3m_err *e);

/* o3m_rpc_server.c */
extern const o3m_rpc_method o3m_rpc__health_method;
void o3m_rpc__count(atomic_uint_least64_t *c);

/* o3m_rpc_call.c */
void o3m_rpc__arena_publish(o3m_rpc_server *s);
gpr_timespec o3m_rpc__after_ms(int64_t ms);
void o3m_rpc__slot_clean(struct o3m_rpc_call *sl);
void o3m_rpc__slot_request(o3m_rpc_server *s, struct o3m_rpc_call *sl);
void o3m_rpc__expire_receives(o3m_rpc_server *s);
void o3m_rpc__on_call(o3m_rpc_server *s, struct o3m_rpc_call *sl, int success);
void o3m_rpc__on_recv(o3m_rpc_server *s, struct o3m_rpc_call *sl, int success);
void o3m_rpc__fail_deferred(o3m_rpc_server *s);
void o3m_rpc__on_reply(o3m_rpc_server *s, struct o3m_rpc_call *sl);

#endif
