/* o3m_rpc.c -- unary RPC over the gRPC C core (see o3m_rpc.h).
 *
 * The file has seven parts: the status mapping, the arena that backs
 * protobuf-c unpacking, message packing and unpacking over gRPC byte
 * buffers, the TLS credentials, the listening port, the server (slots, the
 * completion-queue loop of its threads, shutdown, and the built-in
 * grpc.health.v1 Check method) and the client (one call in flight per
 * client, started and finished separately).
 *
 * Server slots. Each method has slots_per_method slots (or its own number
 * from method_slots, and at least one identity's receive cap plus
 * SLOTS_BEYOND_CAP), plus one generic slot for unknown paths. A slot is
 * requested (gRPC will fill it with the next call, matched on its headers,
 * and post its on_call tag), receiving (the call was let in and its
 * RECV_MESSAGE batch is in flight and will post on_recv, or is cancelled
 * by the receive deadline and then posts it), deferred (its handler
 * returned O3M_RPC_DEFERRED; no tag is owed until the service completes
 * the call) or replying (its reply batch is in flight and will post
 * on_reply); when the reply completes the slot is cleaned and requested
 * again. A call refused on its headers (authorization, a limit, an unknown
 * path) had no batch started: it is cancelled with its status, cleaned and
 * requested again at once (slot_refuse), so it owes no tag. Slots, the arena and the outstanding-tag and deferred
 * counts are touched only under the server's lock (held by the serving
 * thread that handles an event); only the stop flag and the statistics are
 * atomic.
 *
 * The loop. completion_queue_next blocks (for at most POLL_MS, to notice a
 * stop) only when the previous event was followed by an empty queue and the
 * idle hook has run; after an event it polls again with a deadline in the
 * past, which gRPC answers after one non-blocking pass over its sockets. So
 * the idle hook sees everything that was ready as one batch (or, under a
 * flood, what came in IDLE_EVERY completions). */
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
#include "o3m_bytes.h"
#include "o3m_cert.h"
#include "o3m_clock.h"
#include "o3m_log.h"

/* Largest PEM file read for TLS. */
#define PEM_MAX (1 << 20)
/* Longest accepted method path. */
#define PATH_MAX_LEN 255
/* Upper bounds on configuration values. */
#define MAX_MESSAGE_LIMIT (1 << 30)
#define MAX_METHODS 64
#define MAX_DEADLINE_MS 86400000
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
 * o3m_rpc.h and on_recv. One thread needs them too: its idle hook sends one
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

/* ================================================================ status */

grpc_status_code o3m_rpc_status_from_error(int code) {
  switch (code) {
  case O3M_OK: return GRPC_STATUS_OK;
  case O3M_ENOMEM: return GRPC_STATUS_RESOURCE_EXHAUSTED;
  case O3M_EINVAL: return GRPC_STATUS_INVALID_ARGUMENT;
  case O3M_EDIM: return GRPC_STATUS_INVALID_ARGUMENT;
  case O3M_ENONFINITE: return GRPC_STATUS_INVALID_ARGUMENT;
  case O3M_ENOTPD: return GRPC_STATUS_INTERNAL;
  case O3M_EIO: return GRPC_STATUS_INTERNAL;
  case O3M_EPARSE: return GRPC_STATUS_INVALID_ARGUMENT;
  case O3M_ERANDOM: return GRPC_STATUS_INTERNAL;
  case O3M_ENOTFOUND: return GRPC_STATUS_NOT_FOUND;
  case O3M_EEXISTS: return GRPC_STATUS_ALREADY_EXISTS;
  case O3M_EFULL: return GRPC_STATUS_RESOURCE_EXHAUSTED;
  /* An expired round, a mask from another draw and a call in the wrong
   * state all say: the request is fine, the server's state does not allow
   * it (gRPC's FAILED_PRECONDITION). */
  case O3M_EEXPIRED: return GRPC_STATUS_FAILED_PRECONDITION;
  case O3M_EMASK: return GRPC_STATUS_FAILED_PRECONDITION;
  case O3M_ESTATE: return GRPC_STATUS_FAILED_PRECONDITION;
  case O3M_EUNAVAILABLE: return GRPC_STATUS_UNAVAILABLE;
  case O3M_EDEADLINE: return GRPC_STATUS_DEADLINE_EXCEEDED;
  case O3M_EPERM: return GRPC_STATUS_PERMISSION_DENIED;
  case O3M_ERANGE: return GRPC_STATUS_OUT_OF_RANGE;
  /* A handler that failed to reach its own peer over TLS reports the peer
   * as unavailable. */
  case O3M_ETLS: return GRPC_STATUS_UNAVAILABLE;
  case O3M_ERPC: return GRPC_STATUS_UNKNOWN;
  case O3M_ECORRUPT: return GRPC_STATUS_DATA_LOSS;
  default: return GRPC_STATUS_UNKNOWN;
  }
}

int o3m_rpc_error_from_status(grpc_status_code status) {
  switch (status) {
  case GRPC_STATUS_OK: return O3M_OK;
  case GRPC_STATUS_INVALID_ARGUMENT: return O3M_EINVAL;
  case GRPC_STATUS_DEADLINE_EXCEEDED: return O3M_EDEADLINE;
  case GRPC_STATUS_NOT_FOUND: return O3M_ENOTFOUND;
  case GRPC_STATUS_ALREADY_EXISTS: return O3M_EEXISTS;
  case GRPC_STATUS_PERMISSION_DENIED: return O3M_EPERM;
  case GRPC_STATUS_UNAUTHENTICATED: return O3M_EPERM;
  case GRPC_STATUS_RESOURCE_EXHAUSTED: return O3M_EFULL;
  case GRPC_STATUS_FAILED_PRECONDITION: return O3M_ESTATE;
  case GRPC_STATUS_OUT_OF_RANGE: return O3M_ERANGE;
  case GRPC_STATUS_UNAVAILABLE: return O3M_EUNAVAILABLE;
  case GRPC_STATUS_DATA_LOSS: return O3M_ECORRUPT;
  /* CANCELLED, UNKNOWN, ABORTED, UNIMPLEMENTED, INTERNAL: the call failed
   * for a reason the O3M table has no closer name for. */
  default: return O3M_ERPC;
  }
}

int o3m_rpc_error_from_name(const char *name) {
  if (!name) return 0;
  for (int code = O3M__ERR_FIRST + 1; code < O3M__ERR_LAST; code++)
    if (strcmp(o3m_errname(code), name) == 0) return code;
  return 0;
}

/* ================================================================ arena */

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

#define ARENA_ALIGN _Alignof(max_align_t)
#define CHUNK_HDR ((sizeof(arena_chunk) + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN)

static arena_chunk *chunk_new(size_t cap) {
  arena_chunk *ch = malloc(CHUNK_HDR + cap);
  if (!ch) return NULL;
  ch->next = NULL;
  ch->cap = cap;
  ch->used = 0;
  return ch;
}

static int arena_init(arena *a, size_t initial, size_t cap) {
  a->head = chunk_new(initial);
  if (!a->head) return O3M_ENOMEM;
  a->total = initial;
  a->initial = initial;
  a->cap = cap;
  a->exhausted = 0;
  return 0;
}

static void arena_release(arena *a) {
  arena_chunk *ch = a->head;
  while (ch) {
    arena_chunk *next = ch->next;
    free(ch);
    ch = next;
  }
  a->head = NULL;
  a->total = 0;
}

/* Makes the whole capacity free again. Every pointer handed out before is
 * dead after this. The arena is then sized for what the cycle that just
 * ended used (at least its initial size): chunks added by a growth are
 * folded into one block of that size, so that steady traffic of that size
 * allocates nothing, and capacity beyond twice the need goes back to
 * malloc (one oversized message therefore costs its memory until the
 * second reset after it, not for good). If the new block cannot be
 * allocated the chunks are kept as they are (only the head is used until
 * the next reset), so a reset never fails. */
static void arena_reset(arena *a) {
  size_t used = 0;
  for (arena_chunk *ch = a->head; ch; ch = ch->next) used += ch->used;
  size_t need = used > a->initial ? used : a->initial;
  if (a->head && (a->head->next || a->total / 2 > need)) {
    arena_chunk *one = chunk_new(need);
    if (one) {
      arena_release(a);
      a->head = one;
      a->total = one->cap;
    }
  }
  for (arena_chunk *ch = a->head; ch; ch = ch->next) ch->used = 0;
  a->exhausted = 0;
}

static void *arena_alloc(arena *a, size_t n) {
  if (n == 0) n = 1;
  if (n > SIZE_MAX / 2) {
    a->exhausted = 1;
    return NULL;
  }
  n = (n + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
  arena_chunk *ch = a->head;
  if (!ch || ch->cap - ch->used < n) {
    size_t want = a->total > n ? a->total : n;
    if (a->total >= a->cap || want > a->cap - a->total) {
      want = a->total < a->cap ? a->cap - a->total : 0;
      if (want < n) {
        a->exhausted = 1;
        return NULL;
      }
    }
    ch = chunk_new(want);
    if (!ch) {
      a->exhausted = 1;
      return NULL;
    }
    ch->next = a->head;
    a->head = ch;
    a->total += want;
  }
  void *p = (unsigned char *)ch + CHUNK_HDR + ch->used;
  ch->used += n;
  return p;
}

/* protobuf-c's allocator interface over an arena; free is a no-op because
 * the arena is reset as a whole. */
static void *pb_arena_alloc(void *data, size_t n) { return arena_alloc(data, n); }

static void pb_arena_free(void *data, void *p) {
  (void)data;
  (void)p;
}

/* ================================================================ messages */

/* Packs m into a new byte buffer (owned by the caller, released with
 * grpc_byte_buffer_destroy). The packed bytes are written straight into the
 * slice that gRPC sends, so there is no extra copy. O3M_ERANGE if the packed
 * size exceeds max. */
static int pack_message(const ProtobufCMessage *m, size_t max, grpc_byte_buffer **out,
                        o3m_err *e) {
  size_t n = protobuf_c_message_get_packed_size(m);
  if (n > max)
    return o3m_err_set(e, O3M_ERANGE, "%s of %zu bytes exceeds the message limit of %zu",
                       m->descriptor->name, n, max);
  grpc_slice s = grpc_slice_malloc(n);
  size_t w = protobuf_c_message_pack(m, GRPC_SLICE_START_PTR(s));
  if (w != n) {
    grpc_slice_unref(s);
    return o3m_err_set(e, O3M_ECORRUPT, "%s packed to %zu bytes, expected %zu",
                       m->descriptor->name, w, n);
  }
  *out = grpc_raw_byte_buffer_create(&s, 1);
  grpc_slice_unref(s);
  return 0;
}

/* Unpacks the bytes of bb as desc, with the arena as protobuf-c's
 * allocator; the message lives until the arena is reset (protobuf-c copies
 * every field it keeps, so the message never points into bb). A payload in
 * one slice (small messages) is unpacked where the reader holds it; one in
 * several slices (large ones, split as they arrived) is first copied into
 * one piece of the arena, which is taken in both cases. The slices are peeked at, not referenced: bb is
 * owned by the caller and stays unchanged for the whole call, and the
 * reader that holds the peeked slice (its own decompressed copy, if the
 * payload was compressed) is destroyed only after the unpack. O3M_EFULL
 * when the arena cap is reached, O3M_EPARSE when the bytes do not decode. */
static int unpack_message(arena *a, grpc_byte_buffer *bb, const ProtobufCMessageDescriptor *desc,
                          ProtobufCMessage **out, o3m_err *e) {
  grpc_byte_buffer_reader r, r2;
  grpc_slice *s;
  size_t len = 0, pieces = 0;
  const uint8_t *buf = NULL;
  int rc = 0;

  *out = NULL;
  /* The first pass finds the length (the reader decompresses, so
   * grpc_byte_buffer_length is not it in general). */
  if (!grpc_byte_buffer_reader_init(&r, bb))
    return o3m_err_set(e, O3M_EPARSE, "%s: cannot read the payload", desc->name);
  while (grpc_byte_buffer_reader_peek(&r, &s)) {
    len += GRPC_SLICE_LENGTH(*s);
    buf = GRPC_SLICE_START_PTR(*s);
    pieces++;
  }
  /* The copy's room is taken even when there is nothing to copy, so that
   * how gRPC happened to slice a payload does not change how much of the
   * arena a message takes (arena_reset sizes the arena by that). */
  uint8_t *copy = arena_alloc(a, len);
  if (!copy) {
    rc = o3m_err_set(e, O3M_EFULL, "%s of %zu bytes does not fit the arena", desc->name, len);
    goto done;
  }
  if (pieces != 1) {
    /* The second pass copies the pieces into one. */
    if (!grpc_byte_buffer_reader_init(&r2, bb)) {
      rc = o3m_err_set(e, O3M_EPARSE, "%s: cannot read the payload", desc->name);
      goto done;
    }
    size_t off = 0;
    while (grpc_byte_buffer_reader_peek(&r2, &s)) {
      size_t n = GRPC_SLICE_LENGTH(*s);
      if (n <= len - off) memcpy(copy + off, GRPC_SLICE_START_PTR(*s), n);
      off += n;
    }
    grpc_byte_buffer_reader_destroy(&r2);
    if (off != len) {
      rc = o3m_err_set(e, O3M_ECORRUPT, "%s: payload changed length while read", desc->name);
      goto done;
    }
    buf = copy;
  }

  ProtobufCAllocator al = {pb_arena_alloc, pb_arena_free, a};
  ProtobufCMessage *m = protobuf_c_message_unpack(desc, &al, len, buf);
  if (!m) {
    if (a->exhausted)
      rc = o3m_err_set(e, O3M_EFULL, "%s of %zu bytes needs more memory than the arena allows",
                       desc->name, len);
    else
      rc = o3m_err_set(e, O3M_EPARSE, "%s: %zu bytes do not decode", desc->name, len);
    goto done;
  }
  *out = m;
done:
  grpc_byte_buffer_reader_destroy(&r);
  return rc;
}

static int descriptor_ok(const ProtobufCMessageDescriptor *d) {
  return d && d->magic == PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC;
}

/* ================================================================ TLS */

/* Reads a PEM file into a new NUL-terminated string (freed by the caller).
 * A secret one (the private key) must pass o3m_secret_file_check on the
 * file opened: owned by this user, mode 0600 or stricter. */
static int read_pem(const char *path, const char *what, int secret, char **out, o3m_err *e) {
  *out = NULL;
  FILE *f = fopen(path, "rb");
  if (!f) return o3m_err_set(e, O3M_ETLS, "%s %s: %s", what, path, strerror(errno));
  if (secret) {
    int rc = o3m_secret_file_check(what, path, fileno(f), NULL, e);
    if (rc < 0) {
      fclose(f);
      return rc;
    }
  }
  char *buf = malloc(PEM_MAX + 1);
  if (!buf) {
    fclose(f);
    return o3m_err_set(e, O3M_ENOMEM, "%s %s: out of memory", what, path);
  }
  size_t n = fread(buf, 1, PEM_MAX + 1, f);
  int bad = ferror(f);
  fclose(f);
  if (bad) {
    free(buf);
    return o3m_err_set(e, O3M_ETLS, "%s %s: read error", what, path);
  }
  if (n > PEM_MAX) {
    free(buf);
    return o3m_err_set(e, O3M_ETLS, "%s %s: larger than %d bytes", what, path, PEM_MAX);
  }
  if (n == 0) {
    free(buf);
    return o3m_err_set(e, O3M_ETLS, "%s %s: empty file", what, path);
  }
  buf[n] = '\0';
  *out = buf;
  return 0;
}

typedef struct pem_set {
  char *ca, *cert, *key;
} pem_set;

static void pem_free(pem_set *p) {
  /* Private keys are wiped before their memory goes back to malloc. */
  if (p->key) explicit_bzero(p->key, strlen(p->key));
  free(p->ca);
  free(p->cert);
  free(p->key);
  p->ca = p->cert = p->key = NULL;
}

/* Reads the TLS files that are set, after o3m_cert_check_files has parsed
 * them and matched the key to the certificate: gRPC takes any string and
 * fails only later (a server's add_http2_port returns 0, a client's
 * handshake fails), without saying which file is wrong. */
static int pem_load(const o3m_rpc_tls *t, pem_set *p, o3m_err *e) {
  memset(p, 0, sizeof *p);
  int rc = o3m_cert_check_files(t->ca_file, t->cert_file, t->key_file, e);
  if (rc < 0) return rc;
  if (t->ca_file && (rc = read_pem(t->ca_file, "tls.ca_file", 0, &p->ca, e)) < 0) goto fail;
  if (t->cert_file && (rc = read_pem(t->cert_file, "tls.cert_file", 0, &p->cert, e)) < 0) goto fail;
  if (t->key_file && (rc = read_pem(t->key_file, "tls.key_file", 1, &p->key, e)) < 0) goto fail;
  return 0;
fail:
  pem_free(p);
  return rc;
}

static int tls_empty(const o3m_rpc_tls *t) {
  return !t->ca_file && !t->cert_file && !t->key_file && !t->server_name;
}

/* Channel arguments shared by both sides: the message limits both ways; for
 * servers no SO_REUSEPORT, the idle-connection close, the handshake
 * timeout and the per-connection limits (streams, metadata, no window
 * growth); for clients the reconnect cap, the TLS name override and
 * round-robin balancing. At most eight of them. */
typedef struct chan_args {
  grpc_arg arg[8];
  grpc_channel_args args;
} chan_args;

/* Appends one integer or string argument to ca (the keys and strings are
 * static or outlive the channel's creation). */
static void arg_int(chan_args *ca, int *n, const char *key, int value) {
  ca->arg[*n].type = GRPC_ARG_INTEGER;
  ca->arg[*n].key = (char *)key;
  ca->arg[(*n)++].value.integer = value;
}

static void arg_str(chan_args *ca, int *n, const char *key, const char *value) {
  ca->arg[*n].type = GRPC_ARG_STRING;
  ca->arg[*n].key = (char *)key;
  ca->arg[(*n)++].value.string = (char *)value;
}

static void chan_args_fill(chan_args *ca, int max_message, int max_receive, int client,
                           const char *server_name, int idle_close_ms, int round_robin,
                           int streams) {
  int n = 0;
  arg_int(ca, &n, GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, max_receive);
  arg_int(ca, &n, GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, max_message);
  if (!client) {
    /* gRPC sets SO_REUSEPORT on listening sockets by default, so a second
     * daemon on a taken port would bind it too and take half the calls.
     * Without it the second bind fails with EADDRINUSE. */
    arg_int(ca, &n, GRPC_ARG_ALLOW_REUSEPORT, 0);
    if (idle_close_ms > 0) arg_int(ca, &n, GRPC_ARG_MAX_CONNECTION_IDLE_MS, idle_close_ms);
    /* A connection that has not finished its TLS handshake within
     * HANDSHAKE_TIMEOUT_MS is closed (gRPC's default is 120 s), so idle
     * connections that never start TLS give their descriptors back soon
     * (else a flood of them exhausts the file descriptors). */
    arg_int(ca, &n, GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS, HANDSHAKE_TIMEOUT_MS);
    /* Bounds on what one connection may hold before any call is let in
     * ("Limits before the request is read" in o3m_rpc.h): this many
     * streams open at once, this much header data per stream, and no
     * BDP-probe growth of the flow-control windows, so that a stream whose
     * body is not being read holds at most the initial window. */
    arg_int(ca, &n, GRPC_ARG_MAX_CONCURRENT_STREAMS, streams);
    arg_int(ca, &n, GRPC_ARG_MAX_METADATA_SIZE, O3M_RPC_MAX_METADATA_BYTES);
    arg_int(ca, &n, GRPC_ARG_HTTP2_BDP_PROBE, 0);
  } else {
    arg_int(ca, &n, GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, RECONNECT_MAX_MS);
    if (server_name) arg_str(ca, &n, GRPC_SSL_TARGET_NAME_OVERRIDE_ARG, server_name);
    if (round_robin) arg_str(ca, &n, GRPC_ARG_LB_POLICY_NAME, "round_robin");
  }
  ca->args.num_args = (size_t)n;
  ca->args.args = ca->arg;
}

static int check_limits(int max_message, size_t arena_bytes, o3m_err *e) {
  if (max_message < 1 || max_message > MAX_MESSAGE_LIMIT)
    return o3m_err_set(e, O3M_EINVAL, "max_message_bytes must be in 1..%d, got %d",
                       MAX_MESSAGE_LIMIT, max_message);
  if (arena_bytes < 1)
    return o3m_err_set(e, O3M_EINVAL, "arena_bytes must be positive");
  return 0;
}

/* The arena cap: the raw copy of the largest message plus its unpacked
 * form, which for a message of many tiny strings or sub-messages can be
 * several times its wire size. */
static size_t arena_cap_for(int max_message) {
  return (size_t)max_message * 10 + ((size_t)1 << 20);
}

/* ================================================================ listen */

/* Why a bind of address failed, as a phrase for the listen message. port
 * (NULL for a unix socket path) is quoted in the hints. */
static void bind_cause(int err, const char *port, const char *path, char *buf, size_t n) {
  if (err == EADDRINUSE && port)
    snprintf(buf, n, "address in use (another process holds port %s)", port);
  else if (err == EADDRINUSE)
    snprintf(buf, n, "address in use (%s exists; remove it if no daemon serves there)", path);
  else if (err == EADDRNOTAVAIL)
    snprintf(buf, n, "address not available (no local interface has it)");
  else if (err == EACCES && port)
    snprintf(buf, n, "permission denied (port %s needs privileges)", port);
  else
    snprintf(buf, n, "%s", strerror(err));
}

/* The path of a "unix:PATH" or "unix:///PATH" address, or NULL. */
static const char *unix_path_of(const char *addr) {
  if (strncmp(addr, "unix:", 5) != 0) return NULL;
  addr += 5;
  return strncmp(addr, "//", 2) == 0 ? addr + 2 : addr;
}

/* Fills sa with a unix socket path; ENAMETOOLONG if it does not fit. */
static int unix_sockaddr(const char *path, struct sockaddr_un *sa) {
  memset(sa, 0, sizeof *sa);
  sa->sun_family = AF_UNIX;
  if (strlen(path) >= sizeof sa->sun_path) return ENAMETOOLONG;
  memcpy(sa->sun_path, path, strlen(path));
  return 0;
}

/* gRPC unlinks a socket file already at a unix listen path and binds
 * anew, which would silently cut off a daemon still serving there. So
 * before gRPC binds, a connect to the path tells whether one is: if it
 * accepts, the address is in use (O3M_EIO, "listen ADDRESS: address in use
 * (another process serves on PATH)"). A stale file (connection refused) or
 * no file is left to gRPC. Other addresses pass. */
static int unix_check_free(const char *addr, o3m_err *e) {
  const char *path = unix_path_of(addr);
  struct sockaddr_un sa;
  if (!path || unix_sockaddr(path, &sa) != 0) return 0;
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  int live = connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
  close(fd);
  if (live)
    return o3m_err_set(e, O3M_EIO, "listen %s: address in use (another process serves on %s)",
                       addr, path);
  return 0;
}

/* Binds a socket of our own to the unix path, the way gRPC would, and
 * returns 0 or the errno of the failure. A socket file the probe created is
 * removed again. */
static int probe_unix(const char *path) {
  struct sockaddr_un sa;
  int err = unix_sockaddr(path, &sa);
  if (err) return err;
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  if (fd < 0) return errno;
  err = bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 ? 0 : errno;
  close(fd);
  if (err == 0) unlink(path);
  return err;
}

/* Binds a TCP socket of our own to every address host:port resolves to,
 * with SO_REUSEADDR as gRPC sets it (so connections in TIME_WAIT do not
 * count) and without SO_REUSEPORT, and returns 0 or the errno of the first
 * failure; *gai gets a getaddrinfo error instead, if any. */
static int probe_tcp(const char *host, const char *port, int *gai) {
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  *gai = getaddrinfo(*host ? host : NULL, port, &hints, &res);
  if (*gai != 0) return 0;
  int err = 0;
  for (struct addrinfo *ai = res; ai && !err; ai = ai->ai_next) {
    int fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
    if (fd < 0) continue; /* an address family this host lacks */
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0) err = errno;
    close(fd);
  }
  freeaddrinfo(res);
  return err;
}

/* The error of a listen address gRPC could not bind:
 * grpc_server_add_http2_port returns 0 and tells the cause only to gRPC's
 * own log, so the address is bound once more by a probe socket of ours
 * (closed at once) to learn the errno. The forms are those a server
 * accepts: "unix:PATH", optionally "ipv4:" or "ipv6:" before HOST:PORT,
 * HOST being a name, an IPv4 address, a bracketed IPv6 address or empty
 * (another form gets a message without a cause). Returns O3M_EIO with "listen ADDRESS: CAUSE", for example "listen
 * 127.0.0.1:7002: address in use (another process holds port 7002)". */
static int listen_error(const char *addr, o3m_err *e) {
  char cause[160], host[256], port[16];
  const char *rest = addr, *path = unix_path_of(addr);
  int err = 0, gai = 0;
  if (path) {
    err = probe_unix(path);
    if (err) bind_cause(err, NULL, path, cause, sizeof cause);
  } else {
    if (strncmp(rest, "ipv4:", 5) == 0 || strncmp(rest, "ipv6:", 5) == 0) rest += 5;
    const char *colon = strrchr(rest, ':');
    const char *h = rest, *h_end = colon;
    if (*rest == '[') {
      h = rest + 1;
      h_end = strchr(rest, ']');
      if (h_end && h_end[1] != ':') h_end = NULL;
    }
    size_t hl = h_end ? (size_t)(h_end - h) : 0;
    size_t pl = colon ? strlen(colon + 1) : 0;
    if (!h_end || !colon || hl >= sizeof host || pl == 0 || pl >= sizeof port ||
        strspn(colon + 1, "0123456789") != pl)
      return o3m_err_set(e, O3M_EIO, "listen %s: cannot bind it (and it is not a HOST:PORT or "
                         "unix:PATH address whose cause could be found)", addr);
    memcpy(host, h, hl);
    host[hl] = '\0';
    memcpy(port, colon + 1, pl + 1);
    if (atol(port) > 65535)
      return o3m_err_set(e, O3M_EIO, "listen %s: port %s is out of range (0..65535)", addr, port);
    err = probe_tcp(host, port, &gai);
    if (gai)
      snprintf(cause, sizeof cause, "host '%.64s' does not resolve (%s)", host,
               gai_strerror(gai));
    else if (err)
      bind_cause(err, port, NULL, cause, sizeof cause);
  }
  if (!err && !gai)
    snprintf(cause, sizeof cause, "gRPC cannot bind it, though a plain socket can (see gRPC's "
             "log above)");
  return o3m_err_set(e, O3M_EIO, "listen %s: %s", addr, cause);
}

/* ================================================================ server */

/* The largest request a server reads. */
static int receive_limit(const o3m_rpc_server_config *cfg) {
  return cfg->max_receive_bytes ? cfg->max_receive_bytes : cfg->max_message_bytes;
}

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
  double arrived;            /* o3m_clock_s() when on_call took it (metrics only) */
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
  gpr_timespec next_expiry;  /* when expire_receives looks again */
  double limit_logged;       /* o3m_clock_s() of the last limit WARN */
  uint64_t limit_unlogged;   /* refusals by a limit not logged since */
  void *ctx;
  method_entry *methods;
  int n_methods;
  struct o3m_rpc_call *slots;
  int n_slots;
  /* Requests are unpacked into arenas[cur_arena]; arena_deferred[i] counts
   * the deferred calls whose requests live in arenas[i] (see on_call). */
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

/* The arena of the request whose handler runs on this thread, -1 when
 * none does: what o3m_rpc_server_unlocked keeps from being reset. Not
 * s->cur_arena, which other threads move while a handler gives the lock
 * up, so that a handler's second release would pin another arena. */
static _Thread_local int handler_arena = -1;

/* Publishes the arenas' capacity for o3m_rpc_server_stats (under s->mu). */
static void arena_publish(o3m_rpc_server *s) {
  size_t total = 0;
  for (int i = 0; i < s->n_arenas; i++) total += s->arenas[i].total;
  atomic_store_explicit(&s->arena_total, total, memory_order_relaxed);
}

/* ---------------------------------------------------------------- health */

/* grpc.health.v1.Health/Check, answered by every server (see o3m_rpc.h).
 * Handlers run only while the server serves, so "" and every service of
 * the method table are SERVING; another name is NOT_FOUND, as the health
 * protocol prescribes. The service is named by the path's part between the
 * slashes. */
static int health_check(void *ctx, o3m_rpc_call *call, const ProtobufCMessage *req_,
                        ProtobufCMessage *reply_, o3m_err *e) {
  (void)ctx;
  const Grpc__Health__V1__HealthCheckRequest *req =
      (const Grpc__Health__V1__HealthCheckRequest *)req_;
  Grpc__Health__V1__HealthCheckResponse *reply = (Grpc__Health__V1__HealthCheckResponse *)reply_;
  const char *want = req->service ? req->service : "";
  int known = want[0] == '\0';
  const o3m_rpc_server *s = call->srv;
  size_t n = strlen(want);
  for (int i = 0; !known && i < s->n_methods; i++) {
    const char *path = s->methods[i].m->path;
    known = strncmp(path + 1, want, n) == 0 && path[1 + n] == '/';
  }
  if (!known)
    return o3m_err_set(e, O3M_ENOTFOUND, "health: unknown service '%.64s'", want);
  reply->status = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
  return 0;
}

static const o3m_rpc_method health_method = {
    O3M_RPC_HEALTH_CHECK_PATH, &grpc__health__v1__health_check_request__descriptor,
    &grpc__health__v1__health_check_response__descriptor, health_check};

o3m_rpc_tls o3m_rpc_tls_of_party(const o3m_config *cfg, const o3m_party *me) {
  o3m_rpc_tls t = {.ca_file = o3m_config_ca(cfg), .cert_file = me->cert, .key_file = me->key};
  return t;
}

/* gRPC core's own log lines, through o3m_log (see o3m_rpc.h). */
static void grpc_log_to_o3m(gpr_log_func_args *args) {
  o3m_log_level level = args->severity == GPR_LOG_SEVERITY_ERROR  ? O3M_LOG_ERROR
                        : args->severity == GPR_LOG_SEVERITY_INFO ? O3M_LOG_INFO
                                                                  : O3M_LOG_DEBUG;
  const char *file = args->file ? strrchr(args->file, '/') : NULL;
  file = file ? file + 1 : (args->file ? args->file : "?");
  const char *msg = args->message ? args->message : "";
  size_t n = strlen(msg);
  while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == '\r')) n--;
  /* A failed bind: gRPC logs its whole error tree (some 600 characters)
   * before o3m_rpc_server_create reports the same failure as "listen ADDR:
   * address in use (...)". The operator needs only the latter; the tree
   * stays available at debug level. */
  if (level == O3M_LOG_ERROR && strstr(msg, "No address added out of total"))
    level = O3M_LOG_DEBUG;
  o3m_log(level, "grpc %s:%d: %.*s", file, args->line, (int)n, msg);
}

static void route_grpc_log_once(void) { gpr_set_log_function(grpc_log_to_o3m); }

void o3m_rpc_route_grpc_log(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, route_grpc_log_once);
}

void o3m_rpc_server_config_default(o3m_rpc_server_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->max_message_bytes = O3M_RPC_DEFAULT_MAX_MESSAGE;
  cfg->slots_per_method = O3M_RPC_DEFAULT_SLOTS;
  cfg->arena_bytes = O3M_RPC_DEFAULT_ARENA;
  cfg->streams_per_connection = O3M_RPC_DEFAULT_STREAMS;
  cfg->receive_timeout_ms = O3M_RPC_DEFAULT_RECEIVE_TIMEOUT_MS;
  cfg->connections_per_identity = O3M_RPC_DEFAULT_CONNECTIONS_PER_IDENTITY;
}

static void count(atomic_uint_least64_t *c) { atomic_fetch_add_explicit(c, 1, memory_order_relaxed); }

static int server_check(const o3m_rpc_server_config *cfg, const o3m_rpc_method *methods,
                        int n_methods, o3m_err *e) {
  if (!cfg) return o3m_err_set(e, O3M_EINVAL, "server config is NULL");
  if (!cfg->listen || !cfg->listen[0])
    return o3m_err_set(e, O3M_EINVAL, "listen address is not set");
  if (cfg->insecure && !tls_empty(&cfg->tls))
    return o3m_err_set(e, O3M_EINVAL, "insecure and tls settings are exclusive");
  if (!cfg->insecure && (!cfg->tls.cert_file || !cfg->tls.key_file))
    return o3m_err_set(e, O3M_EINVAL,
                       "tls.cert_file and tls.key_file are required (or set insecure for "
                       "plaintext)");
  if (cfg->tls.server_name)
    return o3m_err_set(e, O3M_EINVAL, "tls.server_name applies to clients only");
  /* Without client certificates no caller has an identity, and the hook
   * would refuse everyone. */
  if (cfg->authorize && !cfg->insecure && !cfg->tls.ca_file)
    return o3m_err_set(e, O3M_EINVAL,
                       "an authorization hook needs client certificates (tls.ca_file)");
  int rc = check_limits(cfg->max_message_bytes, cfg->arena_bytes, e);
  if (rc < 0) return rc;
  if (cfg->max_receive_bytes < 0 || cfg->max_receive_bytes > cfg->max_message_bytes)
    return o3m_err_set(e, O3M_EINVAL, "max_receive_bytes must be in 0..max_message_bytes (%d), "
                       "got %d", cfg->max_message_bytes, cfg->max_receive_bytes);
  if (cfg->idle_close_ms < 0)
    return o3m_err_set(e, O3M_EINVAL, "idle_close_ms must be >= 0, got %d", cfg->idle_close_ms);
  if (cfg->streams_per_connection < 1 || cfg->streams_per_connection > O3M_RPC_MAX_STREAMS)
    return o3m_err_set(e, O3M_EINVAL, "streams_per_connection must be in 1..%d, got %d",
                       O3M_RPC_MAX_STREAMS, cfg->streams_per_connection);
  if (cfg->receive_timeout_ms < 0 || cfg->receive_timeout_ms > MAX_DEADLINE_MS)
    return o3m_err_set(e, O3M_EINVAL, "receive_timeout_ms must be in 0..%d, got %d",
                       MAX_DEADLINE_MS, cfg->receive_timeout_ms);
  if (cfg->receiving_per_identity < 0 ||
      cfg->receiving_per_identity > O3M_RPC_MAX_SLOTS - SLOTS_BEYOND_CAP)
    return o3m_err_set(e, O3M_EINVAL, "receiving_per_identity must be in 0..%d, got %d",
                       O3M_RPC_MAX_SLOTS - SLOTS_BEYOND_CAP, cfg->receiving_per_identity);
  if (cfg->connections_per_identity < 1 ||
      cfg->connections_per_identity > O3M_RPC_MAX_CONNECTIONS_PER_IDENTITY)
    return o3m_err_set(e, O3M_EINVAL, "connections_per_identity must be in 1..%d, got %d",
                       O3M_RPC_MAX_CONNECTIONS_PER_IDENTITY, cfg->connections_per_identity);
  if (cfg->arena_max_bytes && cfg->arena_max_bytes < cfg->arena_bytes)
    return o3m_err_set(e, O3M_EINVAL, "arena_max_bytes (%zu) is below arena_bytes (%zu)",
                       cfg->arena_max_bytes, cfg->arena_bytes);
  if (cfg->threads < 0 || cfg->threads > O3M_RPC_MAX_THREADS)
    return o3m_err_set(e, O3M_EINVAL, "threads must be in 1..%d (0: 1), got %d",
                       O3M_RPC_MAX_THREADS, cfg->threads);
  if (cfg->slots_per_method < 1 || cfg->slots_per_method > O3M_RPC_MAX_SLOTS)
    return o3m_err_set(e, O3M_EINVAL, "slots_per_method must be in 1..%d, got %d",
                       O3M_RPC_MAX_SLOTS, cfg->slots_per_method);
  if (!methods || n_methods < 1 || n_methods > MAX_METHODS)
    return o3m_err_set(e, O3M_EINVAL, "method table must have 1..%d rows, got %d", MAX_METHODS,
                       n_methods);
  for (int i = 0; i < n_methods; i++) {
    const o3m_rpc_method *m = &methods[i];
    if (!m->path || m->path[0] != '/' || strlen(m->path) > PATH_MAX_LEN)
      return o3m_err_set(e, O3M_EINVAL, "method %d: path must start with '/' and be at most %d "
                         "characters", i, PATH_MAX_LEN);
    if (!descriptor_ok(m->request) || !descriptor_ok(m->reply))
      return o3m_err_set(e, O3M_EINVAL, "method %s: request or reply descriptor is missing",
                         m->path);
    if (!m->handler) return o3m_err_set(e, O3M_EINVAL, "method %s: handler is NULL", m->path);
    for (int j = 0; j < i; j++)
      if (strcmp(methods[j].path, m->path) == 0)
        return o3m_err_set(e, O3M_EINVAL, "method %s is listed twice", m->path);
  }
  if (cfg->n_method_slots < 0 || (cfg->n_method_slots > 0 && !cfg->method_slots))
    return o3m_err_set(e, O3M_EINVAL, "method_slots: %d rows but no table", cfg->n_method_slots);
  for (int i = 0; i < cfg->n_method_slots; i++) {
    const o3m_rpc_method_slots *ms = &cfg->method_slots[i];
    int found = 0;
    for (int j = 0; ms->path && j < n_methods; j++) found |= strcmp(methods[j].path, ms->path) == 0;
    if (!found)
      return o3m_err_set(e, O3M_EINVAL, "method_slots[%d]: %s is not in the method table", i,
                         ms->path ? ms->path : "(null)");
    if (ms->slots < 1 || ms->slots > O3M_RPC_MAX_SLOTS)
      return o3m_err_set(e, O3M_EINVAL, "method_slots[%d]: %s: slots must be in 1..%d, got %d",
                         i, ms->path, O3M_RPC_MAX_SLOTS, ms->slots);
    for (int j = 0; j < i; j++)
      if (strcmp(cfg->method_slots[j].path, ms->path) == 0)
        return o3m_err_set(e, O3M_EINVAL, "method_slots: %s is listed twice", ms->path);
  }
  return 0;
}

/* Whether the server's callers have identities, which the per-identity
 * limits count by. */
static int has_identities(const o3m_rpc_server_config *cfg) {
  return !cfg->insecure && cfg->tls.ca_file;
}

/* The per-identity receive cap under cfg (0: no identity caps). */
static int receiving_cap_of(const o3m_rpc_server_config *cfg) {
  if (!has_identities(cfg)) return 0;
  if (cfg->receiving_per_identity > 0) return cfg->receiving_per_identity;
  size_t n = RECEIVE_BUDGET / (size_t)receive_limit(cfg);
  return n < RECEIVING_MIN ? RECEIVING_MIN : n > RECEIVING_MAX ? RECEIVING_MAX : (int)n;
}

/* The number of slots of path under cfg: as configured, but at least
 * SLOTS_BEYOND_CAP more than one identity may fill with calls still
 * receiving (capped at O3M_RPC_MAX_SLOTS). */
static int slots_for(const o3m_rpc_server_config *cfg, const char *path) {
  int n = cfg->slots_per_method;
  for (int i = 0; i < cfg->n_method_slots; i++)
    if (strcmp(cfg->method_slots[i].path, path) == 0) n = cfg->method_slots[i].slots;
  int least = receiving_cap_of(cfg) + SLOTS_BEYOND_CAP;
  if (receiving_cap_of(cfg) > 0 && n < least) n = least;
  return n > O3M_RPC_MAX_SLOTS ? O3M_RPC_MAX_SLOTS : n;
}

/* The transport credentials of a server (sout) or a client (cout): exactly
 * one of the two is not NULL. Plaintext when insecure, else TLS from the PEM
 * files of tls. On failure the credentials pointer is left NULL. */
static int make_credentials(int insecure, const o3m_rpc_tls *tls, grpc_server_credentials **sout,
                            grpc_channel_credentials **cout, o3m_err *e) {
  if (sout) *sout = NULL;
  if (cout) *cout = NULL;
  int made;
  if (insecure) {
    if (sout)
      made = (*sout = grpc_insecure_server_credentials_create()) != NULL;
    else
      made = (*cout = grpc_insecure_credentials_create()) != NULL;
    return made ? 0 : o3m_err_set(e, O3M_ETLS, "cannot create plaintext credentials");
  }
  pem_set p;
  int rc = pem_load(tls, &p, e);
  if (rc < 0) return rc;
  grpc_ssl_pem_key_cert_pair pair = {p.key, p.cert};
  /* gRPC copies the PEM strings. */
  if (sout)
    /* With a client CA the server demands a verified client certificate:
     * that is what lets the mask generator tell the parties apart. */
    made = (*sout = grpc_ssl_server_credentials_create_ex(
                p.ca, &pair, 1,
                p.ca ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                     : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE,
                NULL)) != NULL;
  else
    /* A NULL CA means the system roots. */
    made = (*cout = grpc_ssl_credentials_create(p.ca, p.cert ? &pair : NULL, NULL, NULL)) != NULL;
  pem_free(&p);
  if (!made)
    return o3m_err_set(e, O3M_ETLS, "the TLS %s credentials were rejected",
                       sout ? "server" : "client");
  return 0;
}

static gpr_timespec after_ms(int64_t ms) {
  return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(ms, GPR_TIMESPAN));
}

/* Drops everything a call left in a slot so the slot can be requested
 * again. */
static void slot_clean(struct o3m_rpc_call *sl) {
  if (sl->payload) grpc_byte_buffer_destroy(sl->payload);
  if (sl->reply) grpc_byte_buffer_destroy(sl->reply);
  sl->payload = sl->reply = NULL;
  if (sl->has_details) grpc_slice_unref(sl->status_details);
  sl->has_details = 0;
  grpc_metadata_array_destroy(&sl->md);
  grpc_metadata_array_init(&sl->md);
  if (!sl->me) {
    grpc_call_details_destroy(&sl->details);
    grpc_call_details_init(&sl->details);
  }
  if (sl->peer) gpr_free(sl->peer);
  sl->peer = NULL;
  if (sl->call) grpc_call_unref(sl->call);
  sl->call = NULL;
  sl->identity_state = 0;
  sl->cancelled = 0;
  sl->receiving = sl->expired = sl->live = 0;
  if (sl->deferred) {
    sl->srv->n_deferred--;
    sl->srv->arena_deferred[sl->arena_ix]--;
  }
  sl->deferred = 0;
}

static void slot_request(o3m_rpc_server *s, struct o3m_rpc_call *sl) {
  grpc_call_error ce;
  if (s->stopping) return;
  if (sl->me)
    /* No payload: the call is matched on its headers, and its body is read
     * only after on_call let it in (slot_receive). */
    ce = grpc_server_request_registered_call(s->server, sl->me->registered, &sl->call,
                                             &sl->deadline, &sl->md, NULL, s->cq, s->cq,
                                             &sl->on_call);
  else
    ce = grpc_server_request_call(s->server, &sl->call, &sl->details, &sl->md, s->cq, s->cq,
                                  &sl->on_call);
  if (ce != GRPC_CALL_OK) {
    count(&s->n_internal);
    return;
  }
  sl->requested = 1;
  s->outstanding++;
}

/* Sends the reply batch: initial metadata, the message if any, the status
 * (with the O3M code name in trailing metadata when code is an O3M error)
 * and the close. msg may be NULL. */
static void slot_reply(o3m_rpc_server *s, struct o3m_rpc_call *sl, grpc_status_code status,
                       int code, const char *msg) {
  if (s->metrics && sl->me)
    o3m_metrics_rpc_observe(s->metrics, &sl->me->series, sl->me->m->path, code,
                            o3m_clock_s() - sl->arrived);
  grpc_op ops[4];
  size_t n = 0;
  memset(ops, 0, sizeof ops);
  ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
  if (sl->reply) {
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n++].data.send_message.send_message = sl->reply;
  }
  ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
  ops[n].data.send_status_from_server.status = status;
  if (msg && msg[0]) {
    sl->status_details = grpc_slice_from_copied_string(msg);
    sl->has_details = 1;
    ops[n].data.send_status_from_server.status_details = &sl->status_details;
  }
  if (code < 0 && o3m_rpc_error_from_name(o3m_errname(code)) == code) {
    sl->trailing.key = grpc_slice_from_static_string(O3M_RPC_ERROR_KEY);
    sl->trailing.value = grpc_slice_from_static_string(o3m_errname(code));
    ops[n].data.send_status_from_server.trailing_metadata_count = 1;
    ops[n].data.send_status_from_server.trailing_metadata = &sl->trailing;
  }
  n++;
  ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
  ops[n++].data.recv_close_on_server.cancelled = &sl->cancelled;

  grpc_call_error ce = grpc_call_start_batch(sl->call, ops, n, &sl->on_reply, NULL);
  if (ce != GRPC_CALL_OK) {
    count(&s->n_internal);
    slot_clean(sl);
    slot_request(s, sl);
    return;
  }
  sl->replying = 1;
  s->outstanding++;
}

/* Refuses the call in sl at once, before any batch was started on it:
 * the status and message go to the caller as a trailers-only answer and
 * the stream is reset (grpc_call_cancel_with_status), so gRPC keeps no byte
 * of its body, and no tag is owed, so the slot is requested again at once
 * and the next stream that waits for it is matched without delay. The
 * code's name does not travel in "o3m-error" here; the client maps the
 * status back (PERMISSION_DENIED to O3M_EPERM, RESOURCE_EXHAUSTED to
 * O3M_EFULL). */
static void slot_refuse(o3m_rpc_server *s, struct o3m_rpc_call *sl, grpc_status_code status,
                        int code, const char *msg) {
  if (s->metrics && sl->me)
    o3m_metrics_rpc_observe(s->metrics, &sl->me->series, sl->me->m->path, code,
                            o3m_clock_s() - sl->arrived);
  grpc_call_cancel_with_status(sl->call, status, msg, NULL);
  slot_clean(sl);
  slot_request(s, sl);
}

/* Refuses sl by a limit (RESOURCE_EXHAUSTED), counted in limited and
 * logged at WARN at most once a second, so that a flood cannot flood the
 * log. */
static void refuse_limited(o3m_rpc_server *s, struct o3m_rpc_call *sl, const char *msg) {
  count(&s->n_limited);
  double now = o3m_clock_s();
  if (now - s->limit_logged >= 1.0) {
    if (s->limit_unlogged > 0)
      o3m_log_warn("refused %s from %s: %s (and %llu more refusals by a limit not logged)",
                   sl->me->m->path, o3m_rpc_call_peer(sl), msg,
                   (unsigned long long)s->limit_unlogged);
    else
      o3m_log_warn("refused %s from %s: %s", sl->me->m->path, o3m_rpc_call_peer(sl), msg);
    s->limit_logged = now;
    s->limit_unlogged = 0;
  } else {
    s->limit_unlogged++;
  }
  slot_refuse(s, sl, GRPC_STATUS_RESOURCE_EXHAUSTED, O3M_EFULL, msg);
}

/* FNV-1a of a peer address: the per-identity limits compare connections
 * by it, so that counting them costs integer comparisons (a collision
 * only undercounts by one). */
static uint64_t peer_hash(const char *p) {
  uint64_t h = 14695981039346656037ull;
  for (; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
  return h;
}

/* The per-identity limits for the call in sl from identity id: NULL when
 * it may be read, else why not (in buf). Among the accepted calls of the
 * same identity, those still receiving must be fewer than receiving_cap,
 * and the distinct peer addresses (one per connection: the address
 * includes the client's port) at most connections_cap, this call's own
 * peer included. A scan of the slots, not a table: the slots are few, and
 * a call is counted exactly while it holds its slot. */
static const char *identity_limits(o3m_rpc_server *s, struct o3m_rpc_call *sl, const char *id,
                                   char *buf, size_t n) {
  sl->peer_hash = peer_hash(o3m_rpc_call_peer(sl));
  /* The distinct peers seen, at most connections_cap of them. */
  uint64_t peers[O3M_RPC_MAX_CONNECTIONS_PER_IDENTITY];
  int n_peers = 0, receiving = 0, same_peer = 0, over = 0;
  for (int i = 0; i < s->n_slots; i++) {
    struct o3m_rpc_call *o = &s->slots[i];
    if (!o->live || o == sl || o->identity_state != 1 || strcmp(o->identity, id) != 0) continue;
    if (o->receiving && !o->expired) receiving++;
    if (o->peer_hash == sl->peer_hash) {
      same_peer = 1;
      continue;
    }
    int seen = 0;
    for (int j = 0; j < n_peers && !seen; j++) seen = peers[j] == o->peer_hash;
    if (seen) continue;
    if (n_peers < s->connections_cap)
      peers[n_peers++] = o->peer_hash;
    else
      over = 1;
  }
  if (receiving >= s->receiving_cap) {
    snprintf(buf, n, "certificate '%.64s' already has %d calls whose requests are being "
             "received, the most allowed per identity", id, receiving);
    return buf;
  }
  if (!same_peer && (over || n_peers >= s->connections_cap)) {
    snprintf(buf, n, "certificate '%.64s' already has calls on %d connections, the most "
             "allowed per identity", id, s->connections_cap);
    return buf;
  }
  return NULL;
}

/* Starts reading the request of the accepted call in sl; the receive
 * deadline starts now. */
static void slot_receive(o3m_rpc_server *s, struct o3m_rpc_call *sl) {
  grpc_op op;
  memset(&op, 0, sizeof op);
  op.op = GRPC_OP_RECV_MESSAGE;
  op.data.recv_message.recv_message = &sl->payload;
  sl->live = 1;
  sl->recv_by = after_ms(s->receive_timeout_ms);
  grpc_call_error ce = grpc_call_start_batch(sl->call, &op, 1, &sl->on_recv, NULL);
  if (ce != GRPC_CALL_OK) {
    count(&s->n_internal);
    slot_refuse(s, sl, GRPC_STATUS_INTERNAL, O3M_ERPC, "cannot read the request");
    return;
  }
  sl->receiving = 1;
  s->outstanding++;
}

/* Cancels every call whose request has not arrived whole within
 * receive_timeout_ms of its acceptance (DEADLINE_EXCEEDED); its receive
 * batch then completes and on_recv frees the slot. Looks at most every
 * EXPIRY_EVERY_MS. */
static void expire_receives(o3m_rpc_server *s) {
  gpr_timespec now = gpr_now(GPR_CLOCK_MONOTONIC);
  if (gpr_time_cmp(now, s->next_expiry) < 0) return;
  s->next_expiry = gpr_time_add(now, gpr_time_from_millis(EXPIRY_EVERY_MS, GPR_TIMESPAN));
  for (int i = 0; i < s->n_slots; i++) {
    struct o3m_rpc_call *sl = &s->slots[i];
    if (!sl->receiving || sl->expired || gpr_time_cmp(now, sl->recv_by) < 0) continue;
    char msg[128];
    snprintf(msg, sizeof msg, "the request was not received whole within %d ms",
             s->receive_timeout_ms);
    sl->expired = 1;
    count(&s->n_expired);
    grpc_call_cancel_with_status(sl->call, GRPC_STATUS_DEADLINE_EXCEEDED, msg, NULL);
  }
}

/* A call arrived in sl, with its headers only: authorize it and check its
 * caller's limits before a byte of its body is read (see "Limits before
 * the request is read" in o3m_rpc.h); then start reading it. */
static void on_call(o3m_rpc_server *s, struct o3m_rpc_call *sl, int success) {
  sl->requested = 0;
  if (s->metrics) sl->arrived = o3m_clock_s();
  if (!success) {
    /* The request was withdrawn because the server is shutting down. */
    slot_clean(sl);
    return;
  }
  if (!sl->me) {
    char msg[PATH_MAX_LEN + 32];
    snprintf(msg, sizeof msg, "unknown method %.*s",
             (int)(GRPC_SLICE_LENGTH(sl->details.method) > PATH_MAX_LEN
                       ? PATH_MAX_LEN
                       : GRPC_SLICE_LENGTH(sl->details.method)),
             (const char *)GRPC_SLICE_START_PTR(sl->details.method));
    count(&s->n_unknown);
    slot_refuse(s, sl, GRPC_STATUS_UNIMPLEMENTED, 0, msg);
    return;
  }
  if (!s->serving) {
    /* destroy() without run(): the daemon's context may be gone already. */
    slot_refuse(s, sl, GRPC_STATUS_UNAVAILABLE, O3M_EUNAVAILABLE, "server is shutting down");
    return;
  }
  const o3m_rpc_method *m = sl->me->m;
  /* Authorization comes first: a refused call is not even read. */
  const char *id = NULL;
  if (s->authorize || s->receiving_cap > 0) id = o3m_rpc_call_identity(sl);
  if (s->authorize && m != &health_method) {
    o3m_err err;
    o3m_err_clear(&err);
    if (s->authorize(s->authorize_ctx, sl, m->path, id, &err) != 0) {
      char msg[PATH_MAX_LEN + O3M_ERRMSG_MAX + 128];
      snprintf(msg, sizeof msg, "%s%.64s%s may not call %s%s%s",
               id ? "certificate '" : "a caller without a verified certificate", id ? id : "",
               id ? "'" : "", m->path, err.msg[0] ? ": " : "", err.msg);
      count(&s->n_denied);
      slot_refuse(s, sl, GRPC_STATUS_PERMISSION_DENIED, O3M_EPERM, msg);
      return;
    }
  }
  if (id && s->receiving_cap > 0) {
    char buf[256];
    const char *why = identity_limits(s, sl, id, buf, sizeof buf);
    if (why) {
      refuse_limited(s, sl, why);
      return;
    }
  }
  slot_receive(s, sl);
}

/* The request of sl was read (or its stream ended first): decode, run the
 * handler, reply. */
static void on_recv(o3m_rpc_server *s, struct o3m_rpc_call *sl, int success) {
  sl->receiving = 0;
  if (sl->expired || !success) {
    /* Cancelled by the receive deadline, by the caller or by shutdown:
     * nobody is left to answer. */
    slot_clean(sl);
    slot_request(s, sl);
    return;
  }
  const o3m_rpc_method *m = sl->me->m;
  o3m_err err;
  o3m_err_clear(&err);
  ProtobufCMessage *req = NULL;
  int rc;

  /* A deferred call's request lives in its arena: no reset under it. With
   * several arenas (several threads), an arena that holds deferred calls is
   * left for one that holds none, which is reset, so that calls deferred
   * without pause (batches in flight while others queue) do not keep every
   * arena from being reset. */
  if (s->arena_deferred[s->cur_arena] > 0)
    for (int i = 0; i < s->n_arenas; i++)
      if (s->arena_deferred[i] == 0) {
        s->cur_arena = i;
        break;
      }
  arena *a = &s->arenas[s->cur_arena];
  if (s->arena_deferred[s->cur_arena] == 0) arena_reset(a);
  sl->arena_ix = s->cur_arena;
  if (!sl->payload)
    rc = o3m_err_set(&err, O3M_EPARSE, "%s: the request carries no message", m->path);
  else
    rc = unpack_message(a, sl->payload, m->request, &req, &err);
  if (rc < 0) {
    count(&s->n_malformed);
  } else {
    ProtobufCMessage *reply = sl->me->reply;
    protobuf_c_message_init(m->reply, reply);
    handler_arena = sl->arena_ix;
    rc = m->handler(s->ctx, sl, req, reply, &err);
    handler_arena = -1;
    if (rc == O3M_RPC_DEFERRED) {
      sl->deferred = 1;
      s->n_deferred++;
      s->arena_deferred[sl->arena_ix]++;
      count(&s->n_deferred_total);
      arena_publish(s);
      return;
    }
    if (rc > 0) rc = o3m_err_set(&err, O3M_ESTATE, "%s: handler returned %d", m->path, rc);
    if (rc == 0 && !protobuf_c_message_check(reply)) {
      count(&s->n_internal);
      rc = o3m_err_set(&err, O3M_ECORRUPT, "%s: the handler built an incomplete reply", m->path);
    }
    if (rc == 0) rc = pack_message(reply, (size_t)s->max_message, &sl->reply, &err);
    if (rc < 0) count(&s->n_failed);
  }
  arena_publish(s);

  if (rc == 0) {
    count(&s->n_ok);
    slot_reply(s, sl, GRPC_STATUS_OK, 0, NULL);
  } else {
    slot_reply(s, sl, o3m_rpc_status_from_error(rc), rc, o3m_err_message(&err));
  }
}

/* Ends the deferred state of sl before its reply goes out. */
static void undefer(o3m_rpc_server *s, struct o3m_rpc_call *sl) {
  sl->deferred = 0;
  s->n_deferred--;
  s->arena_deferred[sl->arena_ix]--;
}

int o3m_rpc_call_reply(o3m_rpc_call *c, const ProtobufCMessage *reply, o3m_err *e) {
  if (!c || !c->deferred)
    return o3m_err_set(e, O3M_ESTATE, "reply: the call is not deferred");
  o3m_rpc_server *s = c->srv;
  const o3m_rpc_method *m = c->me->m;
  o3m_err err;
  o3m_err_clear(&err);
  int rc = 0;
  if (!reply || reply->descriptor != m->reply)
    rc = o3m_err_set(&err, O3M_EINVAL, "%s: the deferred reply is not a %s", m->path,
                     m->reply->name);
  else if (!protobuf_c_message_check(reply)) {
    count(&s->n_internal);
    rc = o3m_err_set(&err, O3M_ECORRUPT, "%s: the service built an incomplete reply", m->path);
  } else {
    rc = pack_message(reply, (size_t)s->max_message, &c->reply, &err);
  }
  undefer(s, c);
  if (rc == 0) {
    count(&s->n_ok);
    slot_reply(s, c, GRPC_STATUS_OK, 0, NULL);
    return 0;
  }
  count(&s->n_failed);
  slot_reply(s, c, o3m_rpc_status_from_error(rc), rc, o3m_err_message(&err));
  if (e) *e = err;
  return rc;
}

int o3m_rpc_call_fail(o3m_rpc_call *c, int code, const o3m_err *why) {
  if (!c || !c->deferred) return O3M_ESTATE;
  o3m_rpc_server *s = c->srv;
  if (code >= 0) code = O3M_ESTATE;
  const char *msg = why && why->msg[0] ? why->msg : o3m_strerror(code);
  undefer(s, c);
  count(&s->n_failed);
  slot_reply(s, c, o3m_rpc_status_from_error(code), code, msg);
  return 0;
}

/* Fails every call that is still deferred (at the end of a shutdown). */
static void fail_deferred(o3m_rpc_server *s) {
  for (int i = 0; i < s->n_slots && s->n_deferred > 0; i++)
    if (s->slots[i].deferred) {
      o3m_err why;
      o3m_err_set(&why, O3M_EUNAVAILABLE, "server is shutting down");
      o3m_rpc_call_fail(&s->slots[i], O3M_EUNAVAILABLE, &why);
    }
}

static void on_reply(o3m_rpc_server *s, struct o3m_rpc_call *sl) {
  sl->replying = 0;
  slot_clean(sl);
  slot_request(s, sl);
}

static void server_dispatch(o3m_rpc_server *s, grpc_event ev, int *shutdown_done) {
  rpc_tag *t = ev.tag;
  switch (t->kind) {
  case TAG_SHUTDOWN: *shutdown_done = 1; break;
  case TAG_CALL:
    s->outstanding--;
    on_call(s, t->slot, ev.success);
    break;
  case TAG_RECV:
    s->outstanding--;
    on_recv(s, t->slot, ev.success);
    break;
  case TAG_REPLY:
    s->outstanding--;
    on_reply(s, t->slot);
    break;
  case TAG_CLIENT: break;
  }
}

/* One serving thread's loop (see "Threads" in o3m_rpc.h): every thread
 * polls the one completion queue outside the lock, so gRPC's work for the
 * sockets (reading, TLS, HTTP/2) runs on all of them at once, and handles
 * what it got under s->mu, so handlers and the idle hook run one at a time.
 * The stop, the grace period and the end are the server's shared state:
 * the first thread to see the stop flag shuts the gRPC server down, calls
 * in flight get the grace period, then everything left is cancelled; the
 * loops end once the shutdown tag and every other tag have come back. */
static void serve_loop(o3m_rpc_server *s) {
  for (;;) {
    pthread_mutex_lock(&s->mu);
    if (!s->shutdown_sent && atomic_load(&s->stop)) {
      s->stopping = 1;
      grpc_server_shutdown_and_notify(s->server, s->cq, &s->shutdown_tag);
      s->shutdown_sent = 1;
      s->grace_end = after_ms(O3M_RPC_SHUTDOWN_GRACE_MS);
    }
    if (s->shutdown_sent && !s->cancelled &&
        gpr_time_cmp(gpr_now(GPR_CLOCK_MONOTONIC), s->grace_end) > 0) {
      grpc_server_cancel_all_calls(s->server);
      s->cancelled = 1;
    }
    if (s->receive_timeout_ms > 0) expire_receives(s);
    if (s->shutdown_done && s->outstanding == 0 && s->n_deferred == 0) s->finished = 1;
    int finished = s->finished, busy = s->busy;
    pthread_mutex_unlock(&s->mu);
    if (finished) break;
    /* After an event, look again without blocking: the hook runs only once
     * the queue is empty. */
    grpc_event ev = grpc_completion_queue_next(
        s->cq, busy ? gpr_inf_past(GPR_CLOCK_MONOTONIC) : after_ms(POLL_MS), NULL);
    pthread_mutex_lock(&s->mu);
    if (ev.type == GRPC_QUEUE_TIMEOUT) {
      if ((s->busy || s->idle_on_timeout) && s->idle && s->serving) {
        count(&s->n_idle);
        s->idle(s->ctx);
      }
      s->busy = 0;
      /* The service had its chance with every deferred call: after the
       * grace period what is left fails, so that shutdown can finish. Not
       * while a thread is released (o3m_rpc_server_unlocked): calls it
       * still owns would be completed twice; it comes back within its
       * own bound (the AP's: the passive parties' deadline). */
      if (s->cancelled && s->n_deferred > 0 && s->released == 0) {
        fail_deferred(s);
        s->busy = 1;
      }
    } else if (ev.type == GRPC_QUEUE_SHUTDOWN) {
      s->finished = 1;
    } else {
      server_dispatch(s, ev, &s->shutdown_done);
      if (++s->busy >= IDLE_EVERY && s->idle && s->serving) {
        count(&s->n_idle);
        s->idle(s->ctx);
        s->busy = 1; /* the queue was not seen empty: look again, then run it */
      }
    }
    pthread_mutex_unlock(&s->mu);
  }
}

static void *serve_thread(void *arg) {
  serve_loop(arg);
  return NULL;
}

/* Serves on the calling thread and threads - 1 more until the stop (see
 * serve_loop). A thread that cannot be started leaves fewer serving
 * threads, which is logged by the count in o3m_rpc_server_stats. */
static void server_serve(o3m_rpc_server *s) {
  pthread_t th[O3M_RPC_MAX_THREADS];
  int n = 0;
  for (int i = 1; i < s->threads; i++)
    if (pthread_create(&th[n], NULL, serve_thread, s) == 0) n++;
  atomic_store(&s->threads_running, n + 1);
  serve_loop(s);
  for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
}

/* Destroys the gRPC server and the completion queue, in that order, after
 * server_serve() returned (or when the server never started). Tags that
 * still arrive while the queue drains only have their slots cleaned. */
static void server_teardown(o3m_rpc_server *s) {
  if (s->torn_down) return;
  s->torn_down = 1;
  s->stopping = 1;
  /* Deferred slots owe no tag; their calls are released before the server
   * goes (normally there are none left: see server_serve). */
  for (int i = 0; s->slots && s->grpc_inited && i < s->n_slots; i++)
    if (s->slots[i].deferred) slot_clean(&s->slots[i]);
  if (s->server) grpc_server_destroy(s->server);
  s->server = NULL;
  if (s->cq) {
    grpc_completion_queue_shutdown(s->cq);
    for (;;) {
      grpc_event ev = grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
      if (ev.type == GRPC_QUEUE_SHUTDOWN) break;
      if (ev.type != GRPC_OP_COMPLETE) continue;
      rpc_tag *t = ev.tag;
      if (t->kind == TAG_CALL || t->kind == TAG_RECV || t->kind == TAG_REPLY) {
        t->slot->requested = t->slot->replying = t->slot->receiving = 0;
        slot_clean(t->slot);
      }
    }
    grpc_completion_queue_destroy(s->cq);
    s->cq = NULL;
  }
}

/* Frees what create allocated; the gRPC objects must be gone already. */
static void server_free(o3m_rpc_server *s) {
  if (s->slots) {
    /* Slots hold gRPC objects only once gRPC is initialized. */
    for (int i = 0; s->grpc_inited && i < s->n_slots; i++) {
      slot_clean(&s->slots[i]);
      grpc_metadata_array_destroy(&s->slots[i].md);
      if (!s->slots[i].me) grpc_call_details_destroy(&s->slots[i].details);
    }
    free(s->slots);
  }
  if (s->methods) {
    for (int i = 0; i < s->n_methods; i++) free(s->methods[i].reply);
    free(s->methods);
  }
  for (int i = 0; i < SERVER_ARENAS; i++) arena_release(&s->arenas[i]);
  if (s->grpc_inited) grpc_shutdown();
  pthread_mutex_destroy(&s->mu);
  free(s);
}

int o3m_rpc_server_create(o3m_rpc_server **out, const o3m_rpc_server_config *cfg,
                          const o3m_rpc_method *methods, int n_methods, void *ctx,
                          o3m_err *e) {
  if (!out) return o3m_err_set(e, O3M_EINVAL, "out is NULL");
  *out = NULL;
  int rc = server_check(cfg, methods, n_methods, e);
  if (rc < 0) return rc;

  o3m_rpc_server *s = calloc(1, sizeof *s);
  if (!s) return o3m_err_set(e, O3M_ENOMEM, "server: out of memory");
  atomic_init(&s->stop, 0);
  atomic_init(&s->threads_running, 0);
  if (pthread_mutex_init(&s->mu, NULL) != 0) {
    free(s);
    return o3m_err_set(e, O3M_ENOMEM, "server: cannot create its lock");
  }
  s->threads = cfg->threads ? cfg->threads : 1;
  s->ctx = ctx;
  s->idle = cfg->idle;
  s->idle_on_timeout = cfg->idle_on_timeout;
  /* Plaintext has no identities: the hook would refuse everyone. */
  s->authorize = cfg->insecure ? NULL : cfg->authorize;
  s->authorize_ctx = cfg->authorize_ctx;
  s->metrics = cfg->metrics;
  s->max_message = cfg->max_message_bytes;
  s->receive_timeout_ms = cfg->receive_timeout_ms;
  s->receiving_cap = receiving_cap_of(cfg);
  s->connections_cap = cfg->connections_per_identity;
  s->limit_logged = -1.0;
  s->shutdown_tag.kind = TAG_SHUTDOWN;
  s->n_arenas = SERVER_ARENAS;
  for (int i = 0; i < s->n_arenas; i++) {
    rc = arena_init(&s->arenas[i], cfg->arena_bytes,
                    cfg->arena_max_bytes ? cfg->arena_max_bytes
                                         : arena_cap_for(receive_limit(cfg)));
    if (rc < 0) {
      rc = o3m_err_set(e, rc, "server arena of %zu bytes: out of memory", cfg->arena_bytes);
      goto fail;
    }
  }
  atomic_init(&s->arena_total, 0);
  arena_publish(s);

  /* The daemon's table, then the health check unless the table has its
   * own. */
  int with_health = 1;
  for (int i = 0; i < n_methods; i++)
    if (strcmp(methods[i].path, O3M_RPC_HEALTH_CHECK_PATH) == 0) with_health = 0;
  s->n_methods = n_methods + with_health;
  s->methods = calloc((size_t)s->n_methods, sizeof *s->methods);
  s->n_slots = 1;
  for (int i = 0; i < s->n_methods; i++)
    s->n_slots += slots_for(cfg, i < n_methods ? methods[i].path : health_method.path);
  s->slots = calloc((size_t)s->n_slots, sizeof *s->slots);
  if (!s->methods || !s->slots) {
    rc = o3m_err_set(e, O3M_ENOMEM, "server tables: out of memory");
    goto fail;
  }
  for (int i = 0; i < s->n_methods; i++) {
    const o3m_rpc_method *m = i < n_methods ? &methods[i] : &health_method;
    s->methods[i].m = m;
    s->methods[i].reply = calloc(1, m->reply->sizeof_message);
    if (!s->methods[i].reply) {
      rc = o3m_err_set(e, O3M_ENOMEM, "reply storage for %s: out of memory", m->path);
      goto fail;
    }
  }
  for (int i = 0, mi = 0, left = 0; i < s->n_slots; i++) {
    struct o3m_rpc_call *sl = &s->slots[i];
    /* The methods' slots in table order, then the generic slot. */
    while (left == 0 && mi < s->n_methods) left = slots_for(cfg, s->methods[mi++].m->path);
    sl->srv = s;
    sl->me = i < s->n_slots - 1 ? &s->methods[mi - 1] : NULL;
    left--;
    sl->on_call.kind = TAG_CALL;
    sl->on_call.slot = sl;
    sl->on_recv.kind = TAG_RECV;
    sl->on_recv.slot = sl;
    sl->on_reply.kind = TAG_REPLY;
    sl->on_reply.slot = sl;
    grpc_metadata_array_init(&sl->md);
    if (!sl->me) grpc_call_details_init(&sl->details);
  }

  o3m_rpc_route_grpc_log();
  grpc_init();
  s->grpc_inited = 1;
  s->cq = grpc_completion_queue_create_for_next(NULL);
  chan_args ca;
  chan_args_fill(&ca, cfg->max_message_bytes, receive_limit(cfg), 0, NULL, cfg->idle_close_ms, 0,
                 cfg->streams_per_connection);
  s->server = grpc_server_create(&ca.args, NULL);
  if (!s->cq || !s->server) {
    rc = o3m_err_set(e, O3M_ENOMEM, "cannot create the gRPC server");
    goto fail;
  }
  grpc_server_register_completion_queue(s->server, s->cq, NULL);
  for (int i = 0; i < s->n_methods; i++) {
    const char *path = s->methods[i].m->path;
    s->methods[i].registered = grpc_server_register_method(
        s->server, path, NULL, GRPC_SRM_PAYLOAD_NONE, 0);
    if (!s->methods[i].registered) {
      rc = o3m_err_set(e, O3M_EINVAL, "gRPC refused to register %s", path);
      goto fail;
    }
  }
  grpc_server_credentials *creds;
  rc = make_credentials(cfg->insecure, &cfg->tls, &creds, NULL, e);
  if (rc < 0) goto fail;
  rc = unix_check_free(cfg->listen, e);
  if (rc < 0) {
    grpc_server_credentials_release(creds);
    goto fail;
  }
  s->port = grpc_server_add_http2_port(s->server, cfg->listen, creds);
  grpc_server_credentials_release(creds);
  if (s->port <= 0) {
    /* The TLS files passed o3m_cert_check_files above, so this is the
     * address. */
    rc = listen_error(cfg->listen, e);
    goto fail;
  }
  grpc_server_start(s->server);
  s->started = 1;
  for (int i = 0; i < s->n_slots; i++) slot_request(s, &s->slots[i]);
  if (atomic_load(&s->n_internal) > 0) {
    rc = o3m_err_set(e, O3M_ERPC, "gRPC refused to queue call requests");
    goto fail;
  }
  *out = s;
  return 0;

fail:
  if (s->started) {
    atomic_store(&s->stop, 1);
    s->threads = 1;
    server_serve(s);
  }
  server_teardown(s);
  server_free(s);
  return rc;
}

int o3m_rpc_server_port(const o3m_rpc_server *s) { return s->port; }

int o3m_rpc_server_run(o3m_rpc_server *s) {
  if (!s || s->ran) return O3M_ESTATE;
  s->ran = 1;
  s->serving = 1;
  server_serve(s);
  s->serving = 0;
  server_teardown(s);
  return 0;
}

void o3m_rpc_server_shutdown(o3m_rpc_server *s) {
  if (s) atomic_store(&s->stop, 1);
}

void o3m_rpc_server_destroy(o3m_rpc_server *s) {
  if (!s) return;
  if (!s->torn_down) {
    atomic_store(&s->stop, 1);
    server_serve(s);
    server_teardown(s);
  }
  server_free(s);
}

void o3m_rpc_server_stats_get(const o3m_rpc_server *s, o3m_rpc_server_stats *st) {
  o3m_rpc_server *m = (o3m_rpc_server *)s; /* atomics are read, not changed */
  st->ok = atomic_load_explicit(&m->n_ok, memory_order_relaxed);
  st->threads = atomic_load_explicit(&m->threads_running, memory_order_relaxed);
  st->failed = atomic_load_explicit(&m->n_failed, memory_order_relaxed);
  st->malformed = atomic_load_explicit(&m->n_malformed, memory_order_relaxed);
  st->unknown = atomic_load_explicit(&m->n_unknown, memory_order_relaxed);
  st->denied = atomic_load_explicit(&m->n_denied, memory_order_relaxed);
  st->internal = atomic_load_explicit(&m->n_internal, memory_order_relaxed);
  st->deferred = atomic_load_explicit(&m->n_deferred_total, memory_order_relaxed);
  st->idle_runs = atomic_load_explicit(&m->n_idle, memory_order_relaxed);
  st->limited = atomic_load_explicit(&m->n_limited, memory_order_relaxed);
  st->expired = atomic_load_explicit(&m->n_expired, memory_order_relaxed);
  st->arena_bytes = atomic_load_explicit(&m->arena_total, memory_order_relaxed);
}

const char *o3m_rpc_call_method(const o3m_rpc_call *c) { return c->me ? c->me->m->path : ""; }

const char *o3m_rpc_call_peer(o3m_rpc_call *c) {
  if (!c->peer && c->call) c->peer = grpc_call_get_peer(c->call);
  return c->peer ? c->peer : "";
}

const char *o3m_rpc_call_identity(o3m_rpc_call *c) {
  if (c->identity_state == 0) {
    c->identity_state = -1;
    grpc_auth_context *ac = c->call ? grpc_call_auth_context(c->call) : NULL;
    if (ac) {
      /* The common name, not the peer identity gRPC reports (the first
       * subject alternative name): every federation certificate carries
       * SAN localhost, so only the CN tells the parties apart. A name with
       * a NUL byte ("bank\0x" would compare equal to "bank") or a second
       * CN makes the identity ambiguous, and then there is none. */
      if (grpc_auth_context_peer_is_authenticated(ac)) {
        grpc_auth_property_iterator it =
            grpc_auth_context_find_properties_by_name(ac, GRPC_X509_CN_PROPERTY_NAME);
        const grpc_auth_property *p = grpc_auth_property_iterator_next(&it);
        const grpc_auth_property *second = p ? grpc_auth_property_iterator_next(&it) : NULL;
        if (p && !second && p->value && p->value_length > 0 && p->value_length < IDENTITY_MAX &&
            !memchr(p->value, '\0', p->value_length)) {
          memcpy(c->identity, p->value, p->value_length);
          c->identity[p->value_length] = '\0';
          c->identity_state = 1;
        }
      }
      grpc_auth_context_release(ac);
    }
  }
  return c->identity_state == 1 ? c->identity : NULL;
}

void *o3m_rpc_call_alloc(o3m_rpc_call *c, size_t n) {
  return arena_alloc(&c->srv->arenas[c->arena_ix], n);
}

/* The calling handler's arena (the current one from the idle hook) is
 * pinned like one holding a deferred call, so that the handler's request
 * stays valid while other threads unpack into another arena. */
void o3m_rpc_server_unlocked(o3m_rpc_server *s, void (*fn)(void *), void *arg) {
  int a = handler_arena >= 0 ? handler_arena : s->cur_arena;
  s->arena_deferred[a]++;
  s->released++;
  pthread_mutex_unlock(&s->mu);
  fn(arg);
  pthread_mutex_lock(&s->mu);
  s->released--;
  s->arena_deferred[a]--;
}

/* ================================================================ client */

struct o3m_rpc_client {
  grpc_channel *ch;
  grpc_completion_queue *cq;
  char *target;
  int deadline_ms;
  int max_message;
  int wait_for_ready;
  arena arena;
  /* The call in flight. */
  int in_flight;
  rpc_tag tag;
  grpc_call *call;
  const char *path;
  const ProtobufCMessageDescriptor *reply_desc;
  grpc_byte_buffer *send, *recv;
  grpc_metadata_array init_md, trail_md;
  grpc_status_code status;
  grpc_slice details;
  const char *error_string;
};

void o3m_rpc_client_config_default(o3m_rpc_client_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->deadline_ms = O3M_RPC_DEFAULT_DEADLINE_MS;
  cfg->max_message_bytes = O3M_RPC_DEFAULT_MAX_MESSAGE;
  cfg->arena_bytes = O3M_RPC_DEFAULT_ARENA;
}

static int client_check(const o3m_rpc_client_config *cfg, o3m_err *e) {
  if (!cfg) return o3m_err_set(e, O3M_EINVAL, "client config is NULL");
  if (!cfg->target || !cfg->target[0]) return o3m_err_set(e, O3M_EINVAL, "target is not set");
  if (cfg->insecure && !tls_empty(&cfg->tls))
    return o3m_err_set(e, O3M_EINVAL, "insecure and tls settings are exclusive");
  if (!cfg->tls.cert_file != !cfg->tls.key_file)
    return o3m_err_set(e, O3M_EINVAL, "tls.cert_file and tls.key_file go together");
  if (cfg->deadline_ms < 1 || cfg->deadline_ms > MAX_DEADLINE_MS)
    return o3m_err_set(e, O3M_EINVAL, "deadline_ms must be in 1..%d, got %d", MAX_DEADLINE_MS,
                       cfg->deadline_ms);
  return check_limits(cfg->max_message_bytes, cfg->arena_bytes, e);
}

int o3m_rpc_client_create(o3m_rpc_client **out, const o3m_rpc_client_config *cfg,
                          o3m_err *e) {
  if (!out) return o3m_err_set(e, O3M_EINVAL, "out is NULL");
  *out = NULL;
  int rc = client_check(cfg, e);
  if (rc < 0) return rc;

  o3m_rpc_client *c = calloc(1, sizeof *c);
  if (!c) return o3m_err_set(e, O3M_ENOMEM, "client: out of memory");
  c->tag.kind = TAG_CLIENT;
  c->deadline_ms = cfg->deadline_ms;
  c->max_message = cfg->max_message_bytes;
  c->wait_for_ready = cfg->wait_for_ready != 0;
  c->target = strdup(cfg->target);
  if (!c->target) {
    rc = o3m_err_set(e, O3M_ENOMEM, "client: out of memory");
    goto fail_client;
  }
  rc = arena_init(&c->arena, cfg->arena_bytes, arena_cap_for(cfg->max_message_bytes));
  if (rc < 0) {
    rc = o3m_err_set(e, rc, "client arena of %zu bytes: out of memory", cfg->arena_bytes);
    goto fail_target;
  }
  o3m_rpc_route_grpc_log();
  grpc_init();
  grpc_channel_credentials *creds;
  rc = make_credentials(cfg->insecure, &cfg->tls, NULL, &creds, e);
  if (rc < 0) goto fail_grpc;
  chan_args ca;
  chan_args_fill(&ca, cfg->max_message_bytes, cfg->max_message_bytes, 1, cfg->tls.server_name, 0,
                 cfg->round_robin, 0);
  c->ch = grpc_channel_create(cfg->target, creds, &ca.args);
  grpc_channel_credentials_release(creds);
  if (!c->ch) {
    rc = o3m_err_set(e, O3M_ENOMEM, "cannot create a channel to %s", cfg->target);
    goto fail_grpc;
  }
  c->cq = grpc_completion_queue_create_for_next(NULL);
  if (!c->cq) {
    rc = o3m_err_set(e, O3M_ENOMEM, "cannot create a completion queue");
    goto fail_channel;
  }
  *out = c;
  return 0;

fail_channel:
  grpc_channel_destroy(c->ch);
fail_grpc:
  grpc_shutdown();
  arena_release(&c->arena);
fail_target:
  free(c->target);
fail_client:
  free(c);
  return rc;
}

const char *o3m_rpc_client_target(const o3m_rpc_client *c) { return c->target; }

size_t o3m_rpc_client_arena_bytes(const o3m_rpc_client *c) { return c->arena.total; }

/* Releases everything the finished call holds. */
static void client_clean_call(o3m_rpc_client *c) {
  if (c->send) grpc_byte_buffer_destroy(c->send);
  if (c->recv) grpc_byte_buffer_destroy(c->recv);
  c->send = c->recv = NULL;
  grpc_metadata_array_destroy(&c->init_md);
  grpc_metadata_array_destroy(&c->trail_md);
  grpc_slice_unref(c->details);
  c->details = grpc_empty_slice();
  if (c->error_string) gpr_free((void *)c->error_string);
  c->error_string = NULL;
  if (c->call) grpc_call_unref(c->call);
  c->call = NULL;
  c->in_flight = 0;
}

/* Waits for the tag of the call in flight. */
static grpc_event client_wait(o3m_rpc_client *c) {
  for (;;) {
    grpc_event ev = grpc_completion_queue_next(c->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
    if (ev.type != GRPC_OP_COMPLETE || ev.tag == &c->tag) return ev;
  }
}

void o3m_rpc_client_destroy(o3m_rpc_client *c) {
  if (!c) return;
  if (c->in_flight) {
    grpc_call_cancel(c->call, NULL);
    client_wait(c);
    client_clean_call(c);
  }
  grpc_channel_destroy(c->ch);
  grpc_completion_queue_shutdown(c->cq);
  while (grpc_completion_queue_next(c->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).type !=
         GRPC_QUEUE_SHUTDOWN) {
  }
  grpc_completion_queue_destroy(c->cq);
  grpc_shutdown();
  arena_release(&c->arena);
  free(c->target);
  free(c);
}

int o3m_rpc_client_start(o3m_rpc_client *c, const char *path, const ProtobufCMessage *req,
                         const ProtobufCMessageDescriptor *reply_desc, o3m_err *e) {
  if (!c || !path || !req || !descriptor_ok(reply_desc))
    return o3m_err_set(e, O3M_EINVAL, "client call: NULL client, path, request or descriptor");
  if (path[0] != '/' || strlen(path) > PATH_MAX_LEN)
    return o3m_err_set(e, O3M_EINVAL, "method path must start with '/' and be at most %d "
                       "characters", PATH_MAX_LEN);
  if (c->in_flight)
    return o3m_err_set(e, O3M_ESTATE, "%s%s: a call is already in flight on this client",
                       c->target, path);
  if (!protobuf_c_message_check(req))
    return o3m_err_set(e, O3M_EINVAL, "%s%s: the %s request is incomplete", c->target, path,
                       req->descriptor->name);

  arena_reset(&c->arena);
  grpc_byte_buffer *send;
  int rc = pack_message(req, (size_t)c->max_message, &send, e);
  if (rc < 0) return rc;

  c->call = grpc_channel_create_call(c->ch, NULL, GRPC_PROPAGATE_DEFAULTS, c->cq,
                                     grpc_slice_from_static_string(path), NULL,
                                     after_ms(c->deadline_ms), NULL);
  if (!c->call) {
    grpc_byte_buffer_destroy(send);
    return o3m_err_set(e, O3M_ERPC, "%s%s: cannot create the call", c->target, path);
  }
  c->send = send;
  c->recv = NULL;
  grpc_metadata_array_init(&c->init_md);
  grpc_metadata_array_init(&c->trail_md);
  c->details = grpc_empty_slice();
  c->error_string = NULL;
  c->status = GRPC_STATUS_UNKNOWN;
  c->path = path;
  c->reply_desc = reply_desc;

  grpc_op ops[6];
  memset(ops, 0, sizeof ops);
  ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
  if (c->wait_for_ready)
    ops[0].flags = GRPC_INITIAL_METADATA_WAIT_FOR_READY |
                   GRPC_INITIAL_METADATA_WAIT_FOR_READY_EXPLICITLY_SET;
  ops[1].op = GRPC_OP_SEND_MESSAGE;
  ops[1].data.send_message.send_message = c->send;
  ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
  ops[3].data.recv_initial_metadata.recv_initial_metadata = &c->init_md;
  ops[4].op = GRPC_OP_RECV_MESSAGE;
  ops[4].data.recv_message.recv_message = &c->recv;
  ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  ops[5].data.recv_status_on_client.trailing_metadata = &c->trail_md;
  ops[5].data.recv_status_on_client.status = &c->status;
  ops[5].data.recv_status_on_client.status_details = &c->details;
  ops[5].data.recv_status_on_client.error_string = &c->error_string;
  grpc_call_error ce = grpc_call_start_batch(c->call, ops, 6, &c->tag, NULL);
  if (ce != GRPC_CALL_OK) {
    client_clean_call(c);
    return o3m_err_set(e, O3M_ERPC, "%s%s: %s", c->target, path, grpc_call_error_to_string(ce));
  }
  c->in_flight = 1;
  return 0;
}

/* The O3M code named in the trailing metadata, or 0. */
static int trailing_code(const grpc_metadata_array *md) {
  for (size_t i = 0; i < md->count; i++) {
    const grpc_slice *k = &md->metadata[i].key, *v = &md->metadata[i].value;
    if (GRPC_SLICE_LENGTH(*k) != strlen(O3M_RPC_ERROR_KEY) ||
        memcmp(GRPC_SLICE_START_PTR(*k), O3M_RPC_ERROR_KEY, GRPC_SLICE_LENGTH(*k)) != 0)
      continue;
    char name[32];
    size_t n = GRPC_SLICE_LENGTH(*v);
    if (n >= sizeof name) return 0;
    memcpy(name, GRPC_SLICE_START_PTR(*v), n);
    name[n] = '\0';
    return o3m_rpc_error_from_name(name);
  }
  return 0;
}

int o3m_rpc_client_finish(o3m_rpc_client *c, ProtobufCMessage **reply, o3m_err *e) {
  if (reply) *reply = NULL;
  if (!c || !reply) return o3m_err_set(e, O3M_EINVAL, "client finish: NULL client or reply");
  if (!c->in_flight) return o3m_err_set(e, O3M_ESTATE, "%s: no call in flight", c->target);

  grpc_event ev = client_wait(c);
  const char *path = c->path;
  int rc = 0;
  if (ev.type != GRPC_OP_COMPLETE || !ev.success) {
    rc = o3m_err_set(e, O3M_ERPC, "%s%s: the call did not complete", c->target, path);
  } else if (c->status != GRPC_STATUS_OK) {
    /* The remote O3M code if the server sent one, else the status class. A
     * remote name that says "OK" or nonsense is ignored. */
    int code = trailing_code(&c->trail_md);
    if (code >= 0) code = o3m_rpc_error_from_status(c->status);
    size_t dl = GRPC_SLICE_LENGTH(c->details);
    if (dl > 0)
      rc = o3m_err_set(e, code, "%s%s: %.*s", c->target, path, (int)(dl > 200 ? 200 : dl),
                       (const char *)GRPC_SLICE_START_PTR(c->details));
    else
      rc = o3m_err_set(e, code, "%s%s: %s", c->target, path, o3m_strerror(code));
  } else if (!c->recv) {
    rc = o3m_err_set(e, O3M_EPARSE, "%s%s: status OK but no reply message", c->target, path);
  } else {
    o3m_err inner;
    o3m_err_clear(&inner);
    ProtobufCMessage *m;
    rc = unpack_message(&c->arena, c->recv, c->reply_desc, &m, &inner);
    if (rc < 0)
      o3m_err_set(e, rc, "%s%s: %s", c->target, path, o3m_err_message(&inner));
    else
      *reply = m;
  }
  client_clean_call(c);
  return rc;
}

int o3m_rpc_client_call(o3m_rpc_client *c, const char *path, const ProtobufCMessage *req,
                        const ProtobufCMessageDescriptor *reply_desc, ProtobufCMessage **reply,
                        o3m_err *e) {
  if (reply) *reply = NULL;
  int rc = o3m_rpc_client_start(c, path, req, reply_desc, e);
  if (rc < 0) return rc;
  return o3m_rpc_client_finish(c, reply, e);
}
