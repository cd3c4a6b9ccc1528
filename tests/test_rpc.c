/* test_rpc.c -- the unary RPC layer (proto/o3m_rpc.h) on loopback.
 *
 * Each test starts real gRPC servers in threads of its own process, speaking
 * the o3m.v1 messages, and calls them through o3m_rpc clients. A small test
 * service stands in for a passive participant: Mask returns K x d values
 * that encode (party, row, column) so that every value can be checked
 * exactly, and answers MASK for a wrong mask id as a real party must. Other
 * methods sleep, build a broken reply, or echo what the call knows about its
 * peer. The TLS test makes a CA and certificates with the openssl tool. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "health.pb-c.h"
#include "o3m.pb-c.h"
#include "o3m_rpc.h"
#include "o3m_wire.h"

/* The norm bound the reply checks apply: the largest allowed (these
 * synthetic values are not bounded; test_wire checks the bound). */
#define NB O3M_CONFIG_MAX_NORM_LIMIT

#define TEST_MASK 0x0123456789abcdefULL

/* ------------------------------------------------------------ test service */

typedef struct svc {
  int party;
  int d;
  uint64_t mask_id;
  int sleep_ms;
  char peer[128];
  char identity[128];
  int identity_null;
  int calls;
  int inside;   /* handlers of h_sleep running now */
  int overlaps; /* times one started while another ran */
  o3m_rpc_server *srv; /* for h_released */
  /* h_gate: set by the handler when it starts, and by the test when the
   * handler may return. */
  atomic_int gate_entered, gate_open;
} svc;

static double value_of(int party, int k, int i) { return party * 1e6 + k * 1000.0 + i + 0.25; }

static int h_mask(void *ctx, o3m_rpc_call *call, const ProtobufCMessage *req_, ProtobufCMessage *rep_,
                  o3m_err *e) {
  svc *s = ctx;
  const O3m__V1__MaskRequest *req = (const O3m__V1__MaskRequest *)req_;
  O3m__V1__MaskedContexts *rep = (O3m__V1__MaskedContexts *)rep_;
  s->calls++;
  int rc = o3m_wire_mask_request_check(req, s->mask_id, 5000, e);
  if (rc < 0) return rc;
  int K = (int)req->n_items;
  double *v = o3m_rpc_call_alloc(call, sizeof(double) * (size_t)K * (size_t)s->d);
  if (!v) return o3m_err_set(e, O3M_EFULL, "no room for %d x %d", K, s->d);
  for (int k = 0; k < K; k++)
    for (int i = 0; i < s->d; i++) v[(size_t)k * s->d + i] = value_of(s->party, k, i);
  o3m_wire_masked_fill(rep, s->mask_id, s->party, K, s->d, v);
  return 0;
}

static int h_sleep(void *ctx, o3m_rpc_call *call, const ProtobufCMessage *req, ProtobufCMessage *rep,
                   o3m_err *e) {
  (void)call, (void)req, (void)rep, (void)e;
  svc *s = ctx;
  s->calls++;
  if (s->inside++) s->overlaps++;
  struct timespec ts = {s->sleep_ms / 1000, (long)(s->sleep_ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
  s->inside--;
  return 0;
}

/* Longest that h_gate and the test wait for each other. */
#define GATE_WAIT_MS 10000

static void pause_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Says it started, then returns once the test opens the gate: an order
 * the test sets, not a duration. O3M_ESTATE if the gate stays shut for
 * GATE_WAIT_MS. */
static int h_gate(void *ctx, o3m_rpc_call *call, const ProtobufCMessage *req, ProtobufCMessage *rep,
                  o3m_err *e) {
  (void)call, (void)req, (void)rep;
  svc *s = ctx;
  s->calls++;
  atomic_store(&s->gate_entered, 1);
  for (int t = 0; !atomic_load(&s->gate_open); t++) {
    if (t >= GATE_WAIT_MS) return o3m_err_set(e, O3M_ESTATE, "the test never opened the gate");
    pause_ms(1);
  }
  return 0;
}

/* Sleeps sleep_ms without the server's lock (o3m_rpc_server_unlocked). */
static void sleep_released(void *arg) {
  const svc *s = arg;
  struct timespec ts = {s->sleep_ms / 1000, (long)(s->sleep_ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static int h_released(void *ctx, o3m_rpc_call *call, const ProtobufCMessage *req,
                      ProtobufCMessage *rep, o3m_err *e) {
  (void)call, (void)req, (void)rep, (void)e;
  svc *s = ctx;
  o3m_rpc_server_unlocked(s->srv, sleep_released, s);
  s->calls++;
  return 0;
}

/* Gives the lock up twice, then checks that its request (a MaskRequest)
 * still holds the user it arrived with: the arena it lives in must not be
 * reset by the calls other threads unpack meanwhile. */
static int h_released_twice(void *ctx, o3m_rpc_call *call, const ProtobufCMessage *req_,
                            ProtobufCMessage *rep, o3m_err *e) {
  (void)call, (void)rep;
  svc *s = ctx;
  const O3m__V1__MaskRequest *req = (const O3m__V1__MaskRequest *)req_;
  char user[128];
  snprintf(user, sizeof user, "%s", req->user ? req->user : "");
  o3m_rpc_server_unlocked(s->srv, sleep_released, s);
  o3m_rpc_server_unlocked(s->srv, sleep_released, s);
  if (strcmp(user, req->user ? req->user : "") != 0)
    return o3m_err_set(e, O3M_ECORRUPT, "the request changed while the lock was given up");
  return 0;
}

/* Claims three values but points at none: the layer must refuse to pack it. */
static int h_broken(void *ctx, o3m_rpc_call *call, const ProtobufCMessage *req, ProtobufCMessage *rep_,
                    o3m_err *e) {
  (void)ctx, (void)call, (void)req, (void)e;
  O3m__V1__MaskedContexts *rep = (O3m__V1__MaskedContexts *)rep_;
  rep->n_values = 3;
  rep->values = NULL;
  return 0;
}

static int h_who(void *ctx, o3m_rpc_call *call, const ProtobufCMessage *req, ProtobufCMessage *rep_,
                 o3m_err *e) {
  (void)req, (void)e;
  svc *s = ctx;
  O3m__V1__NodeInfo *rep = (O3m__V1__NodeInfo *)rep_;
  s->calls++;
  snprintf(s->peer, sizeof s->peer, "%s", o3m_rpc_call_peer(call));
  const char *id = o3m_rpc_call_identity(call);
  s->identity_null = id == NULL;
  snprintf(s->identity, sizeof s->identity, "%s", id ? id : "");
  rep->role = O3M__V1__ROLE__ROLE_PASSIVE;
  rep->protocol = O3M_PROTOCOL_VERSION;
  rep->party = (uint32_t)s->party;
  /* The reply's string lives in the call arena until the reply is packed. */
  char *name = o3m_rpc_call_alloc(call, 64);
  if (!name) return O3M_EFULL;
  snprintf(name, 64, "%s|%s", o3m_rpc_call_method(call), id ? id : "-");
  rep->name = name;
  return 0;
}

static const o3m_rpc_method svc_methods[] = {
    {O3M_PATH_PASSIVE_MASK, &o3m__v1__mask_request__descriptor,
     &o3m__v1__masked_contexts__descriptor, h_mask},
    {O3M_PATH_PASSIVE_INFO, &o3m__v1__info_request__descriptor, &o3m__v1__node_info__descriptor,
     h_who},
    {"/test.Slow/Sleep", &o3m__v1__info_request__descriptor, &o3m__v1__ack__descriptor, h_sleep},
    {"/test.Slow/Gate", &o3m__v1__info_request__descriptor, &o3m__v1__ack__descriptor, h_gate},
    {"/test.Slow/Released", &o3m__v1__info_request__descriptor, &o3m__v1__ack__descriptor,
     h_released},
    {"/test.Slow/ReleasedTwice", &o3m__v1__mask_request__descriptor, &o3m__v1__ack__descriptor,
     h_released_twice},
    {"/test.Bad/Broken", &o3m__v1__info_request__descriptor,
     &o3m__v1__masked_contexts__descriptor, h_broken},
    /* Expects a BlockRequest, whose field 3 is a varint: a MaskRequest's
     * field 3 is a string, so one sent here cannot decode. */
    {"/test.Block/Get", &o3m__v1__block_request__descriptor, &o3m__v1__ack__descriptor, h_sleep},
};
#define N_METHODS ((int)(sizeof svc_methods / sizeof svc_methods[0]))

/* ------------------------------------------------------------ fixtures */

typedef struct server_fx {
  o3m_rpc_server *srv;
  pthread_t th;
  svc ctx;
  char target[64];
} server_fx;

static void *run_thread(void *arg) {
  int rc = o3m_rpc_server_run(arg);
  return (void *)(intptr_t)rc;
}

static void start_server_cfg(server_fx *f, int party, int d, const o3m_rpc_server_config *cfg) {
  memset(&f->ctx, 0, sizeof f->ctx);
  f->ctx.party = party;
  f->ctx.d = d;
  f->ctx.mask_id = TEST_MASK;
  o3m_err e;
  o3m_err_clear(&e);
  int rc = o3m_rpc_server_create(&f->srv, cfg, svc_methods, N_METHODS, &f->ctx, &e);
  cr_assert(eq(int, rc, 0), "server_create: %s", o3m_err_message(&e));
  cr_assert(gt(int, o3m_rpc_server_port(f->srv), 0));
  snprintf(f->target, sizeof f->target, "127.0.0.1:%d", o3m_rpc_server_port(f->srv));
  f->ctx.srv = f->srv;
  cr_assert(eq(int, pthread_create(&f->th, NULL, run_thread, f->srv), 0));
}

/* A plaintext loopback server on threads serving threads. */
static void start_server_threads(server_fx *f, int party, int d, int threads) {
  o3m_rpc_server_config cfg;
  o3m_rpc_server_config_default(&cfg);
  cfg.listen = "127.0.0.1:0";
  cfg.insecure = 1;
  cfg.threads = threads;
  start_server_cfg(f, party, d, &cfg);
}

static void start_server(server_fx *f, int party, int d) { start_server_threads(f, party, d, 1); }

static void stop_server(server_fx *f) {
  void *ret;
  o3m_rpc_server_shutdown(f->srv);
  cr_assert(eq(int, pthread_join(f->th, &ret), 0));
  cr_assert(eq(int, (int)(intptr_t)ret, 0), "run() returned an error");
  o3m_rpc_server_destroy(f->srv);
  f->srv = NULL;
}

static o3m_rpc_client *make_client(const char *target, int deadline_ms) {
  o3m_rpc_client_config cfg;
  o3m_rpc_client_config_default(&cfg);
  cfg.target = target;
  cfg.insecure = 1;
  cfg.deadline_ms = deadline_ms;
  o3m_rpc_client *c = NULL;
  o3m_err e;
  o3m_err_clear(&e);
  int rc = o3m_rpc_client_create(&c, &cfg, &e);
  cr_assert(eq(int, rc, 0), "client_create: %s", o3m_err_message(&e));
  return c;
}

/* One Info call on c that must succeed. */
static void info_ok(o3m_rpc_client *c) {
  O3m__V1__InfoRequest req = O3M__V1__INFO_REQUEST__INIT;
  ProtobufCMessage *m;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert(eq(int, o3m_rpc_client_call(c, O3M_PATH_PASSIVE_INFO, &req.base,
                                        &o3m__v1__node_info__descriptor, &m, &e), 0),
            "%s", o3m_err_message(&e));
}

/* A MaskRequest for K items named "item0", "item1", ... under mask_id. */
typedef struct mask_req {
  O3m__V1__MaskRequest msg;
  char *items[2048];
  char names[2048][16];
} mask_req;

static void mask_req_init(mask_req *r, int K, uint64_t mask_id) {
  o3m__v1__mask_request__init(&r->msg);
  for (int k = 0; k < K; k++) {
    snprintf(r->names[k], sizeof r->names[k], "item%d", k);
    r->items[k] = r->names[k];
  }
  r->msg.mask_id = mask_id;
  r->msg.user = "user-7";
  r->msg.n_items = (size_t)K;
  r->msg.items = r->items;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* A TCP port on 127.0.0.1 that was free a moment ago. */
static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  cr_assert(ge(int, fd, 0));
  struct sockaddr_in a = {0};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  cr_assert(eq(int, bind(fd, (struct sockaddr *)&a, sizeof a), 0));
  socklen_t len = sizeof a;
  cr_assert(eq(int, getsockname(fd, (struct sockaddr *)&a, &len), 0));
  close(fd);
  return ntohs(a.sin_port);
}

/* ------------------------------------------------------------ status map */

Test(rpc_status, every_code_maps_to_a_specific_status) {
  for (int code = O3M__ERR_FIRST + 1; code < O3M__ERR_LAST; code++) {
    grpc_status_code st = o3m_rpc_status_from_error(code);
    cr_assert(ne(int, (int)st, (int)GRPC_STATUS_OK), "%s maps to OK", o3m_errname(code));
    if (code != O3M_ERPC)
      cr_assert(ne(int, (int)st, (int)GRPC_STATUS_UNKNOWN), "%s maps to UNKNOWN",
                o3m_errname(code));
  }
  cr_assert(eq(int, (int)o3m_rpc_status_from_error(0), (int)GRPC_STATUS_OK));
  cr_assert(eq(int, (int)o3m_rpc_status_from_error(-5), (int)GRPC_STATUS_UNKNOWN));
  cr_assert(eq(int, (int)o3m_rpc_status_from_error(7), (int)GRPC_STATUS_UNKNOWN));
  cr_assert(eq(int, (int)o3m_rpc_status_from_error(O3M_EMASK),
               (int)GRPC_STATUS_FAILED_PRECONDITION));
  cr_assert(eq(int, (int)o3m_rpc_status_from_error(O3M_EDEADLINE),
               (int)GRPC_STATUS_DEADLINE_EXCEEDED));
}

Test(rpc_status, canonical_codes_survive_the_round_trip) {
  const int codes[] = {O3M_EINVAL,       O3M_ENOTFOUND, O3M_EEXISTS, O3M_EFULL,
                       O3M_EUNAVAILABLE, O3M_EDEADLINE, O3M_EPERM,   O3M_ERANGE,
                       O3M_ECORRUPT,     O3M_ESTATE,    O3M_ERPC};
  for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
    cr_assert(eq(int, o3m_rpc_error_from_status(o3m_rpc_status_from_error(codes[i])), codes[i]),
              "%s", o3m_errname(codes[i]));
  cr_assert(eq(int, o3m_rpc_error_from_status(GRPC_STATUS_OK), 0));
  cr_assert(eq(int, o3m_rpc_error_from_status(GRPC_STATUS_UNIMPLEMENTED), O3M_ERPC));
  cr_assert(eq(int, o3m_rpc_error_from_status(GRPC_STATUS_UNAUTHENTICATED), O3M_EPERM));
}

Test(rpc_status, names_map_back_to_codes) {
  cr_assert(eq(int, o3m_rpc_error_from_name("MASK"), O3M_EMASK));
  cr_assert(eq(int, o3m_rpc_error_from_name("EXPIRED"), O3M_EEXPIRED));
  cr_assert(eq(int, o3m_rpc_error_from_name("OK"), 0));
  cr_assert(eq(int, o3m_rpc_error_from_name("mask"), 0));
  cr_assert(eq(int, o3m_rpc_error_from_name(""), 0));
  cr_assert(eq(int, o3m_rpc_error_from_name(NULL), 0));
}

/* ------------------------------------------------------------ calls */

Test(rpc, masked_contexts_round_trip_bit_exact, .timeout = 30) {
  server_fx f;
  start_server(&f, 2, 5);
  o3m_rpc_client *c = make_client(f.target, 5000);
  static mask_req r;
  mask_req_init(&r, 7, TEST_MASK);
  ProtobufCMessage *m;
  o3m_err e;
  o3m_err_clear(&e);
  int rc = o3m_rpc_client_call(c, O3M_PATH_PASSIVE_MASK, &r.msg.base,
                               &o3m__v1__masked_contexts__descriptor, &m, &e);
  cr_assert(eq(int, rc, 0), "%s", o3m_err_message(&e));
  const O3m__V1__MaskedContexts *mc = (const O3m__V1__MaskedContexts *)m;
  cr_assert(eq(int, o3m_wire_masked_check(mc, 2, 7, 5, TEST_MASK, NB, &e), 0), "%s",
            o3m_err_message(&e));
  for (int k = 0; k < 7; k++)
    for (int i = 0; i < 5; i++)
      cr_assert(eq(dbl, mc->values[k * 5 + i], value_of(2, k, i)), "k=%d i=%d", k, i);
  o3m_rpc_client_destroy(c);
  stop_server(&f);
}

Test(rpc, remote_o3m_code_arrives_exactly, .timeout = 30) {
  server_fx f;
  start_server(&f, 1, 3);
  o3m_rpc_client *c = make_client(f.target, 5000);
  static mask_req r;
  mask_req_init(&r, 2, TEST_MASK ^ 1);
  ProtobufCMessage *m = (ProtobufCMessage *)&r; /* must be reset to NULL */
  o3m_err e;
  o3m_err_clear(&e);
  int rc = o3m_rpc_client_call(c, O3M_PATH_PASSIVE_MASK, &r.msg.base,
                               &o3m__v1__masked_contexts__descriptor, &m, &e);
  /* The gRPC status alone (FAILED_PRECONDITION) would give O3M_ESTATE. */
  cr_assert(eq(int, rc, O3M_EMASK), "%s", o3m_err_message(&e));
  cr_assert(eq(int, e.code, O3M_EMASK));
  cr_assert(eq(ptr, m, NULL));
  cr_assert(not(eq(ptr, strstr(e.msg, f.target), NULL)), "message lacks the target: %s", e.msg);
  cr_assert(not(eq(ptr, strstr(e.msg, O3M_PATH_PASSIVE_MASK), NULL)), "%s", e.msg);
  cr_assert(not(eq(ptr, strstr(e.msg, "this party holds"), NULL)), "%s", e.msg);
  o3m_rpc_server_stats st;
  o3m_rpc_server_stats_get(f.srv, &st);
  cr_assert(eq(u64, st.failed, 1));
  cr_assert(eq(u64, st.ok, 0));
  o3m_rpc_client_destroy(c);
  stop_server(&f);
}

Test(rpc, unknown_method_is_unimplemented, .timeout = 30) {
  server_fx f;
  start_server(&f, 1, 3);
  o3m_rpc_client *c = make_client(f.target, 5000);
  O3m__V1__InfoRequest req = O3M__V1__INFO_REQUEST__INIT;
  ProtobufCMessage *m;
  o3m_err e;
  o3m_err_clear(&e);
  int rc = o3m_rpc_client_call(c, "/o3m.v1.Passive/Nope", &req.base,
                               &o3m__v1__node_info__descriptor, &m, &e);
  cr_assert(eq(int, rc, O3M_ERPC), "%s", o3m_err_message(&e));
  cr_assert(not(eq(ptr, strstr(e.msg, "unknown method /o3m.v1.Passive/Nope"), NULL)), "%s",
            e.msg);
  /* The server keeps serving known methods. */
  rc = o3m_rpc_client_call(c, O3M_PATH_PASSIVE_INFO, &req.base, &o3m__v1__node_info__descriptor,
                           &m, &e);
  cr_assert(eq(int, rc, 0), "%s", o3m_err_message(&e));
  o3m_rpc_server_stats st;
  o3m_rpc_server_stats_get(f.srv, &st);
  cr_assert(eq(u64, st.unknown, 1));
  cr_assert(eq(u64, st.ok, 1));
  o3m_rpc_client_destroy(c);
  stop_server(&f);
}

Test(rpc, undecodable_request_is_parse_error, .timeout = 30) {
  server_fx f;
  start_server(&f, 1, 3);
  o3m_rpc_client *c = make_client(f.target, 5000);
  static mask_req r;
  mask_req_init(&r, 1, TEST_MASK);
  ProtobufCMessage *m;
  o3m_err e;
  o3m_err_clear(&e);
  int rc = o3m_rpc_client_call(c, "/test.Block/Get", &r.msg.base, &o3m__v1__ack__descriptor, &m,
                               &e);
  cr_assert(eq(int, rc, O3M_EPARSE), "%s", o3m_err_message(&e));
  o3m_rpc_server_stats st;
  o3m_rpc_server_stats_get(f.srv, &st);
  cr_assert(eq(u64, st.malformed, 1));
  cr_assert(eq(int, f.ctx.calls, 0), "a handler ran on an undecodable request");
  o3m_rpc_client_destroy(c);
  stop_server(&f);
}

Test(rpc, incomplete_reply_is_refused_not_sent, .timeout = 30) {
  server_fx f;
  start_server(&f, 1, 3);
  o3m_rpc_client *c = make_client(f.target, 5000);
  O3m__V1__InfoRequest req = O3M__V1__INFO_REQUEST__INIT;
  ProtobufCMessage *m;
  o3m_err e;
  o3m_err_clear(&e);
  int rc = o3m_rpc_client_call(c, "/test.Bad/Broken", &req.base,
                               &o3m__v1__masked_contexts__descriptor, &m, &e);
  cr_assert(eq(int, rc, O3M_ECORRUPT), "%s", o3m_err_message(&e));
  o3m_rpc_server_stats st;
  o3m_rpc_server_stats_get(f.srv, &st);
  cr_assert(eq(u64, st.internal, 1));
  o3m_rpc_client_destroy(c);
  stop_server(&f);
}

Test(rpc, deadline_exceeded, .timeout = 30) {
  server_fx f;
  start_server(&f, 1, 3);
  f.ctx.sleep_ms = 1500;
  o3m_rpc_client *c = make_client(f.target, 200);
  O3m__V1__InfoRequest req = O3M__V1__INFO_REQUEST__INIT;
  ProtobufCMessage *m;
  o3m_err e;
  o3m_err_clear(&e);
  double t0 = now_ms();
  int rc = o3m_rpc_client_call(c, "/test.Slow/Sleep", &req.base, &o3m__v1__ack__descriptor, &m,
                               &e);
  double dt = now_ms() - t0;
  cr_assert(eq(int, rc, O3M_EDEADLINE), "%s", o3m_err_message(&e));
  cr_assert(lt(dbl, dt, 1200.0), "the client waited for the handler instead of its deadline");
  o3m_rpc_client_destroy(c);
  stop_server(&f);
}

Test(rpc, unreachable_peer_fails_fast, .timeout = 30) {
  char target[64];
  snprintf(target, sizeof target, "127.0.0.1:%d", free_port());
  o3m_rpc_client *c = make_client(target, 5000);
  O3m__V1__InfoRequest req = O3M__V1__INFO_REQUEST__INIT;
  ProtobufCMessage *m;
  o3m_err e;
  o3m_err_clear(&e);
  double t0 = now_ms();
  int rc = o3m_rpc_client_call(c, O3M_PATH_PASSIVE_INFO, &req.base,
                               &o3m__v1__node_info__descriptor, &m, &e);
  cr_assert(eq(int, rc, O3M_EUNAVAILABLE), "%s", o3m_err_message(&e));
  cr_assert(lt(dbl, now_ms() - t0, 4000.0));
  o3m_rpc_client_destroy(c);
}

typedef struct late_start {
  server_fx *f;
  int port;
} late_start;

static void *start_late(void *arg) {
  late_start *ls = arg;
  struct timespec ts = {0, 400 * 1000000L};
  nanosleep(&ts, NULL);
  o3m_rpc_server_config cfg;
  o3m_rpc_server_config_default(&cfg);
  char listen[64];
  snprintf(listen, sizeof listen, "127.0.0.1:%d", ls->port);
  cfg.listen = listen;
  cfg.insecure = 1;
  start_server_cfg(ls->f, 3, 2, &cfg);
  return NULL;
}

/* A daemon that starts before its peer: with wait_for_ready the call waits
 * for the peer to come up instead of failing. */
Test(rpc, wait_for_ready_waits_for_a_late_server, .timeout = 30) {
  int port = free_port();
  char target[64];
  snprintf(target, sizeof target, "127.0.0.1:%d", port);
  o3m_rpc_client_config cfg;
  o3m_rpc_client_config_default(&cfg);
  cfg.target = target;
  cfg.insecure = 1;
  cfg.deadline_ms = 10000;
  cfg.wait_for_ready = 1;
  o3m_rpc_client *c;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert(eq(int, o3m_rpc_client_create(&c, &cfg, &e), 0), "%s", o3m_err_message(&e));

  server_fx f;
  late_start ls = {&f, port};
  pthread_t th;
  cr_assert(eq(int, pthread_create(&th, NULL, start_late, &ls), 0));
  static mask_req r;
  mask_req_init(&r, 1, TEST_MASK);
  ProtobufCMessage *m;
  int rc = o3m_rpc_client_call(c, O3M_PATH_PASSIVE_MASK, &r.msg.base,
                               &o3m__v1__masked_contexts__descriptor, &m, &e);
  cr_assert(eq(int, pthread_join(th, NULL), 0));
  cr_assert(eq(int, rc, 0), "%s", o3m_err_message(&e));
  cr_assert(eq(dbl, ((O3m__V1__MaskedContexts *)m)->values[1], value_of(3, 0, 1)));
  o3m_rpc_client_destroy(c);
  stop_server(&f);
}

/* The active participant's pattern: start a call on every party's client,
 * then finish each, and sum the masked vectors. */
Test(rpc, parallel_fan_out_to_three_parties, .timeout = 30) {
  enum { P = 3, K = 4, D = 6 };
  server_fx f[P];
  o3m_rpc_client *c[P];
  for (int j = 0; j < P; j++) {
    start_server(&f[j], j + 1, D);
    c[j] = make_client(f[j].target, 5000);
  }
  static mask_req r;
  mask_req_init(&r, K, TEST_MASK);
  o3m_err e;
  o3m_err_clear(&e);
  for (int round = 0; round < 3; round++) {
    for (int j = 0; j < P; j++)
      cr_assert(eq(int, o3m_rpc_client_start(c[j], O3M_PATH_PASSIVE_MASK, &r.msg.base,
                                             &o3m__v1__masked_contexts__descriptor, &e),
                   0),
                "%s", o3m_err_message(&e));
    /* One call at a time per client. */
    cr_assert(eq(int, o3m_rpc_client_start(c[0], O3M_PATH_PASSIVE_MASK, &r.msg.base,
                                           &o3m__v1__masked_contexts__descriptor, &e),
                 O3M_ESTATE));
    double sum[K * D] = {0};
    for (int j = P - 1; j >= 0; j--) {
      ProtobufCMessage *m;
      cr_assert(eq(int, o3m_rpc_client_finish(c[j], &m, &e), 0), "%s", o3m_err_message(&e));
      const O3m__V1__MaskedContexts *mc = (const O3m__V1__MaskedContexts *)m;
      cr_assert(eq(int, o3m_wire_masked_check(mc, j + 1, K, D, TEST_MASK, NB, &e), 0), "%s",
                o3m_err_message(&e));
      for (int x = 0; x < K * D; x++) sum[x] += mc->values[x];
    }
    for (int k = 0; k < K; k++)
      for (int i = 0; i < D; i++) {
        double want = value_of(1, k, i) + value_of(2, k, i) + value_of(3, k, i);
        cr_assert(eq(dbl, sum[k * D + i], want), "k=%d i=%d", k, i);
      }
  }
  ProtobufCMessage *m;
  cr_assert(eq(int, o3m_rpc_client_finish(c[0], &m, &e), O3M_ESTATE));
  for (int j = 0; j < P; j++) {
    o3m_rpc_client_destroy(c[j]);
    stop_server(&f[j]);
  }
}

/* Several serving threads poll the queue, but handlers run one at a time
 * (o3m_rpc.h, "Threads"): 8 clients calling a handler that sleeps 2 ms
 * never find another one inside it, and every call is answered. */
typedef struct sleeper {
  const char *target;
  int ok;
} sleeper;

static void *sleeper_main(void *arg) {
  sleeper *sl = arg;
  o3m_rpc_client *c = make_client(sl->target, 10000);
  O3m__V1__InfoRequest req = O3M__V1__INFO_REQUEST__INIT;
  for (int i = 0; i < 10; i++) {
    ProtobufCMessage *m;
    o3m_err e;
    if (o3m_rpc_client_call(c, "/test.Slow/Sleep", &req.base, &o3m__v1__ack__descriptor, &m,
                            &e) == 0)
      sl->ok++;
  }
  o3m_rpc_client_destroy(c);
  return NULL;
}

Test(rpc, threads_poll_together_and_handlers_run_one_at_a_time, .timeout = 60) {
  o3m_rpc_server_config cfg;
  o3m_rpc_server_config_default(&cfg);
  cfg.listen = "127.0.0.1:0";
  cfg.insecure = 1;
  cfg.threads = O3M_RPC_MAX_THREADS + 1;
  o3m_rpc_server *bad = NULL;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert(eq(int, o3m_rpc_server_create(&bad, &cfg, svc_methods, N_METHODS, NULL, &e),
               O3M_EINVAL));
  cr_assert(not(eq(ptr, strstr(e.msg, "threads"), NULL)), "%s", e.msg);
  cfg.threads = 4;
  cfg.slots_per_method = 8;
  server_fx f;
  start_server_cfg(&f, 1, 4, &cfg);
  f.ctx.sleep_ms = 2;
  enum { N = 8 };
  pthread_t th[N];
  sleeper sl[N];
  for (int i = 0; i < N; i++) {
    sl[i] = (sleeper){f.target, 0};
    cr_assert(eq(int, pthread_create(&th[i], NULL, sleeper_main, &sl[i]), 0));
  }
  int ok = 0;
  for (int i = 0; i < N; i++) {
    pthread_join(th[i], NULL);
    ok += sl[i].ok;
  }
  o3m_rpc_server_stats st;
  o3m_rpc_server_stats_get(f.srv, &st);
  cr_assert(eq(int, st.threads, 4));
  cr_assert(eq(int, ok, N * 10));
  cr_assert(eq(int, f.ctx.calls, N * 10));
  cr_assert(eq(int, f.ctx.overlaps, 0), "%d handlers overlapped", f.ctx.overlaps);
  stop_server(&f);
}

/* A handler that waits through o3m_rpc_server_unlocked does not hold the
 * other threads up: with 2 threads an Info sent while a Released call
 * sleeps 400 ms is answered long before it; with 1 thread it waits for it
 * (nothing else can run), as without the release. */
typedef struct released_call {
  const char *target;
  double t_answered; /* ms */
  int rc;
} released_call;

static void *released_main(void *arg) {
  released_call *rc = arg;
  o3m_rpc_client *c = make_client(rc->target, 10000);
  O3m__V1__InfoRequest req = O3M__V1__INFO_REQUEST__INIT;
  ProtobufCMessage *m;
  o3m_err e;
  rc->rc = o3m_rpc_client_call(c, "/test.Slow/Released", &req.base, &o3m__v1__ack__descriptor,
                               &m, &e);
  rc->t_answered = now_ms();
  o3m_rpc_client_destroy(c);
  return NULL;
}

/* Milliseconds from the Released call's start to the answer of an Info
 * sent 100 ms after it, on a server with threads serving threads. */
static double info_while_released(int threads) {
  server_fx f;
  start_server_threads(&f, 1, 4, threads);
  f.ctx.sleep_ms = 400;
  o3m_rpc_client *c = make_client(f.target, 10000);
  /* Connect first, so that the timing below is the server's. */
  info_ok(c);
  released_call rc = {f.target, 0, -1};
  pthread_t th;
  double t0 = now_ms();
  cr_assert(eq(int, pthread_create(&th, NULL, released_main, &rc), 0));
  struct timespec ts = {0, 100 * 1000000L};
  nanosleep(&ts, NULL);
  info_ok(c);
  double t_info = now_ms() - t0;
  pthread_join(th, NULL);
  cr_assert(eq(int, rc.rc, 0));
  cr_assert(rc.t_answered - t0 >= 400.0, "Released answered after %.0f ms", rc.t_answered - t0);
  o3m_rpc_client_destroy(c);
  stop_server(&f);
  return t_info;
}

Test(rpc, unlocked_handler_lets_other_threads_serve, .timeout = 60) {
  double two = info_while_released(2);
  double one = info_while_released(1);
  cr_assert(two < 300.0, "Info waited for the released handler on 2 threads: %.0f ms",
            two);
  cr_assert(one >= 390.0, "Info overtook the handler on 1 thread: %.0f ms", one);
}

/* A handler that gives the lock up twice keeps its request through both:
 * a call unpacked during each release (into another arena) must not reset
 * the handler's arena during the second. */
typedef struct twice_call {
  const char *target;
  int rc;
  o3m_err e;
} twice_call;

static void *twice_main(void *arg) {
  twice_call *t = arg;
  o3m_rpc_client *c = make_client(t->target, 10000);
  O3m__V1__MaskRequest req = O3M__V1__MASK_REQUEST__INIT;
  req.user = "the-released-handler's-own-user-id-aaaaaaaa";
  ProtobufCMessage *m;
  o3m_err_clear(&t->e);
  t->rc = o3m_rpc_client_call(c, "/test.Slow/ReleasedTwice", &req.base,
                              &o3m__v1__ack__descriptor, &m, &t->e);
  o3m_rpc_client_destroy(c);
  return NULL;
}

Test(rpc, unlocked_twice_keeps_the_handlers_request, .timeout = 60) {
  server_fx f;
  start_server_threads(&f, 1, 4, 3);
  f.ctx.sleep_ms = 400;
  o3m_rpc_client *c = make_client(f.target, 10000);
  info_ok(c);
  ProtobufCMessage *m;
  o3m_err e;
  o3m_err_clear(&e);
  twice_call t = {f.target, -1, {0}};
  pthread_t th;
  cr_assert(eq(int, pthread_create(&th, NULL, twice_main, &t), 0));
  /* One request of the same shape during each release (their outcome
   * does not matter, only where they are unpacked). */
  const char *users[2] = {"another-caller's-user-id-bbbbbbbbbbbbbbbbbb",
                          "another-caller's-user-id-cccccccccccccccccc"};
  for (int i = 0; i < 2; i++) {
    struct timespec ts = {0, (i == 0 ? 200 : 400) * 1000000L};
    nanosleep(&ts, NULL);
    O3m__V1__MaskRequest mr = O3M__V1__MASK_REQUEST__INIT;
    mr.user = (char *)users[i];
    o3m_rpc_client_call(c, O3M_PATH_PASSIVE_MASK, &mr.base, &o3m__v1__masked_contexts__descriptor,
                        &m, &e);
  }
  pthread_join(th, NULL);
  cr_assert(eq(int, t.rc, 0), "%s", o3m_err_message(&t.e));
  o3m_rpc_client_destroy(c);
  stop_server(&f);
}

/* d = K = 1000, the paper's example: an 8 MB reply, twice gRPC's default
 * receive limit. */
Test(rpc, eight_megabyte_reply, .timeout = 60) {
  server_fx f;
  start_server(&f, 4, 1000);
  o3m_rpc_client *c = make_client(f.target, 20000);
  static mask_req r;
  mask_req_init(&r, 1000, TEST_MASK);
  ProtobufCMessage *m;
  o3m_err e;
  o3m_err_clear(&e);
  int rc = o3m_rpc_client_call(c, O3M_PATH_PASSIVE_MASK, &r.msg.base,
                               &o3m__v1__masked_contexts__descriptor, &m, &e);
  cr_assert(eq(int, rc, 0), "%s", o3m_err_message(&e));
  const O3m__V1__MaskedContexts *mc = (const O3m__V1__MaskedContexts *)m;
  cr_assert(eq(sz, mc->n_values, (size_t)1000 * 1000));
  for (int k = 0; k < 1000; k += 7)
    for (int i = 0; i < 1000; i += 13)
      cr_assert(eq(dbl, mc->values[k * 1000 + i], value_of(4, k, i)), "k=%d i=%d", k, i);
  o3m_rpc_client_destroy(c);
  stop_server(&f);
}

Test(rpc, size_limits_give_range_and_full, .timeout = 30) {
  o3m_rpc_server_config scfg;
  o3m_rpc_server_config_default(&scfg);
  scfg.listen = "127.0.0.1:0";
  scfg.insecure = 1;
  scfg.max_message_bytes = 64 * 1024;
  server_fx f;
  start_server_cfg(&f, 1, 100, &scfg);
  o3m_rpc_client *c = make_client(f.target, 5000);
  static mask_req r;
  ProtobufCMessage *m;
  o3m_err e;
  o3m_err_clear(&e);

  /* 200 x 100 doubles (160 kB) is over the server's reply limit. */
  mask_req_init(&r, 200, TEST_MASK);
  int rc = o3m_rpc_client_call(c, O3M_PATH_PASSIVE_MASK, &r.msg.base,
                               &o3m__v1__masked_contexts__descriptor, &m, &e);
  cr_assert(eq(int, rc, O3M_ERANGE), "%s", o3m_err_message(&e));

  /* A request over the server's receive limit is refused by gRPC. */
  mask_req_init(&r, 2048, TEST_MASK);
  static char big[70000];
  memset(big, 'u', sizeof big - 1);
  r.msg.user = big;
  rc = o3m_rpc_client_call(c, O3M_PATH_PASSIVE_MASK, &r.msg.base,
                           &o3m__v1__masked_contexts__descriptor, &m, &e);
  cr_assert(eq(int, rc, O3M_EFULL), "%s", o3m_err_message(&e));
  cr_assert(eq(int, f.ctx.calls, 1), "the handler saw the oversized request");
  o3m_rpc_client_destroy(c);

  /* A request over the client's own limit never leaves the client. */
  o3m_rpc_client_config ccfg;
  o3m_rpc_client_config_default(&ccfg);
  ccfg.target = f.target;
  ccfg.insecure = 1;
  ccfg.max_message_bytes = 1024;
  cr_assert(eq(int, o3m_rpc_client_create(&c, &ccfg, &e), 0), "%s", o3m_err_message(&e));
  rc = o3m_rpc_client_start(c, O3M_PATH_PASSIVE_MASK, &r.msg.base,
                            &o3m__v1__masked_contexts__descriptor, &e);
  cr_assert(eq(int, rc, O3M_ERANGE), "%s", o3m_err_message(&e));
  cr_assert(eq(int, o3m_rpc_client_finish(c, &m, &e), O3M_ESTATE), "a failed start left a call");
  o3m_rpc_client_destroy(c);
  stop_server(&f);
}

/* The arenas grow to the largest message once and then stay put: steady
 * state allocates nothing in this layer. */
Test(rpc, arenas_stop_growing_after_warm_up, .timeout = 60) {
  o3m_rpc_server_config scfg;
  o3m_rpc_server_config_default(&scfg);
  scfg.listen = "127.0.0.1:0";
  scfg.insecure = 1;
  scfg.arena_bytes = 4096;
  server_fx f;
  start_server_cfg(&f, 1, 50, &scfg);
  o3m_rpc_client_config ccfg;
  o3m_rpc_client_config_default(&ccfg);
  ccfg.target = f.target;
  ccfg.insecure = 1;
  ccfg.arena_bytes = 4096;
  o3m_rpc_client *c;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert(eq(int, o3m_rpc_client_create(&c, &ccfg, &e), 0), "%s", o3m_err_message(&e));
  static mask_req r;
  mask_req_init(&r, 300, TEST_MASK); /* 120 kB reply */
  ProtobufCMessage *m;
  size_t c_after = 0, s_after = 0;
  for (int i = 0; i < 12; i++) {
    cr_assert(eq(int, o3m_rpc_client_call(c, O3M_PATH_PASSIVE_MASK, &r.msg.base,
                                          &o3m__v1__masked_contexts__descriptor, &m, &e),
                 0),
              "%s", o3m_err_message(&e));
    o3m_rpc_server_stats st;
    o3m_rpc_server_stats_get(f.srv, &st);
    if (i == 1) {
      c_after = o3m_rpc_client_arena_bytes(c);
      s_after = st.arena_bytes;
      cr_assert(gt(sz, c_after, (size_t)4096), "the client arena never grew");
      cr_assert(gt(sz, s_after, (size_t)4096), "the server arena never grew");
    } else if (i > 1) {
      cr_assert(eq(sz, o3m_rpc_client_arena_bytes(c), c_after), "call %d", i);
      cr_assert(eq(sz, st.arena_bytes, s_after), "call %d", i);
    }
  }
  /* Growth is bounded: a few times the largest message, not one per call. */
  cr_assert(lt(sz, c_after, (size_t)8 * 300 * 50 * sizeof(double)));
  o3m_rpc_client_destroy(c);
  stop_server(&f);
}

/* One oversized message must not keep an arena large for good.
 * After a call with a 120 kB reply, small calls bring the client's arena
 * and the server's back to their initial size by the second reset. */
Test(rpc, arenas_give_memory_back_after_a_large_message, .timeout = 60) {
  o3m_rpc_server_config scfg;
  o3m_rpc_server_config_default(&scfg);
  scfg.listen = "127.0.0.1:0";
  scfg.insecure = 1;
  scfg.arena_bytes = 4096;
  server_fx f;
  start_server_cfg(&f, 1, 50, &scfg);
  o3m_rpc_client_config ccfg;
  o3m_rpc_client_config_default(&ccfg);
  ccfg.target = f.target;
  ccfg.insecure = 1;
  ccfg.arena_bytes = 4096;
  o3m_rpc_client *c;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert(eq(int, o3m_rpc_client_create(&c, &ccfg, &e), 0), "%s", o3m_err_message(&e));
  static mask_req big, small;
  mask_req_init(&big, 300, TEST_MASK); /* 120 kB reply */
  mask_req_init(&small, 1, TEST_MASK);
  ProtobufCMessage *m;
  o3m_rpc_server_stats st;
  for (int i = 0; i < 4; i++) {
    mask_req *r = i == 0 ? &big : &small;
    cr_assert(eq(int, o3m_rpc_client_call(c, O3M_PATH_PASSIVE_MASK, &r->msg.base,
                                          &o3m__v1__masked_contexts__descriptor, &m, &e),
                 0),
              "%s", o3m_err_message(&e));
    o3m_rpc_server_stats_get(f.srv, &st);
    if (i == 0) cr_assert(gt(sz, o3m_rpc_client_arena_bytes(c), (size_t)100000));
  }
  cr_assert(eq(sz, o3m_rpc_client_arena_bytes(c), (size_t)4096));
  /* The server's four arenas (one thread has them too), each back at its
   * initial size. */
  cr_assert(eq(sz, st.arena_bytes, (size_t)4 * 4096));
  o3m_rpc_client_destroy(c);
  stop_server(&f);
}

Test(rpc, peer_address_and_no_identity_in_plaintext, .timeout = 30) {
  server_fx f;
  start_server(&f, 1, 3);
  o3m_rpc_client *c = make_client(f.target, 5000);
  O3m__V1__InfoRequest req = O3M__V1__INFO_REQUEST__INIT;
  ProtobufCMessage *m;
  o3m_err e;
  o3m_err_clear(&e);
  int rc = o3m_rpc_client_call(c, O3M_PATH_PASSIVE_INFO, &req.base,
                               &o3m__v1__node_info__descriptor, &m, &e);
  cr_assert(eq(int, rc, 0), "%s", o3m_err_message(&e));
  cr_assert(not(eq(ptr, strstr(f.ctx.peer, "127.0.0.1"), NULL)), "peer %s", f.ctx.peer);
  cr_assert(eq(int, f.ctx.identity_null, 1), "identity %s without TLS", f.ctx.identity);
  cr_assert(eq(str, ((O3m__V1__NodeInfo *)m)->name, "/o3m.v1.Passive/Info|-"));
  o3m_rpc_client_destroy(c);
  stop_server(&f);
}

/* ------------------------------------------------------------ lifecycle */

Test(rpc, shutdown_is_prompt_and_frees_the_port, .timeout = 30) {
  server_fx f;
  start_server(&f, 1, 3);
  int port = o3m_rpc_server_port(f.srv);
  double t0 = now_ms();
  stop_server(&f);
  cr_assert(lt(dbl, now_ms() - t0, 1500.0));

  /* Created but never run: destroy shuts it down by itself. */
  o3m_rpc_server_config cfg;
  o3m_rpc_server_config_default(&cfg);
  char listen[64];
  snprintf(listen, sizeof listen, "127.0.0.1:%d", port);
  cfg.listen = listen;
  cfg.insecure = 1;
  svc ctx = {0};
  o3m_rpc_server *s;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert(eq(int, o3m_rpc_server_create(&s, &cfg, svc_methods, N_METHODS, &ctx, &e), 0), "%s",
            o3m_err_message(&e));
  cr_assert(eq(int, o3m_rpc_server_port(s), port));
  o3m_rpc_server_destroy(s);
  cr_assert(eq(int, o3m_rpc_server_create(&s, &cfg, svc_methods, N_METHODS, &ctx, &e), 0),
            "port not released: %s", o3m_err_message(&e));
  o3m_rpc_server_shutdown(s);
  cr_assert(eq(int, o3m_rpc_server_run(s), 0));
  cr_assert(eq(int, o3m_rpc_server_run(s), O3M_ESTATE));
  o3m_rpc_server_destroy(s);
  o3m_rpc_server_destroy(NULL);
  o3m_rpc_client_destroy(NULL);
}

/* Shutdown while a handler runs: that call still gets its reply. The
 * handler holds the call until the test, which waits for it to start, has
 * asked for the shutdown. */
Test(rpc, shutdown_lets_the_running_call_finish, .timeout = 30) {
  server_fx f;
  start_server(&f, 1, 3);
  o3m_rpc_client *c = make_client(f.target, 5000);
  O3m__V1__InfoRequest req = O3M__V1__INFO_REQUEST__INIT;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert(eq(int, o3m_rpc_client_start(c, "/test.Slow/Gate", &req.base,
                                         &o3m__v1__ack__descriptor, &e),
               0));
  for (int t = 0; !atomic_load(&f.ctx.gate_entered); t++) {
    cr_assert(lt(int, t, GATE_WAIT_MS), "the handler did not start within %d ms", GATE_WAIT_MS);
    pause_ms(1);
  }
  o3m_rpc_server_shutdown(f.srv);
  atomic_store(&f.ctx.gate_open, 1);
  ProtobufCMessage *m;
  int rc = o3m_rpc_client_finish(c, &m, &e);
  cr_assert(eq(int, rc, 0), "%s", o3m_err_message(&e));
  stop_server(&f);
  o3m_rpc_client_destroy(c);
}

static int create_err(const o3m_rpc_server_config *cfg, const o3m_rpc_method *m, int n,
                      o3m_err *e) {
  o3m_rpc_server *s = (o3m_rpc_server *)e; /* must come back NULL */
  int rc = o3m_rpc_server_create(&s, cfg, m, n, NULL, e);
  cr_assert(eq(ptr, s, NULL));
  return rc;
}

Test(rpc, bad_configurations_are_named, .timeout = 30) {
  o3m_rpc_server_config cfg;
  o3m_err e;
  o3m_err_clear(&e);

  o3m_rpc_server_config_default(&cfg);
  cr_assert(eq(int, create_err(&cfg, svc_methods, N_METHODS, &e), O3M_EINVAL));
  cr_assert(not(eq(ptr, strstr(e.msg, "listen"), NULL)), "%s", e.msg);

  cfg.listen = "127.0.0.1:0";
  cr_assert(eq(int, create_err(&cfg, svc_methods, N_METHODS, &e), O3M_EINVAL));
  cr_assert(not(eq(ptr, strstr(e.msg, "tls.cert_file"), NULL)), "%s", e.msg);

  cfg.insecure = 1;
  cfg.tls.ca_file = "/nonexistent/ca.pem";
  cr_assert(eq(int, create_err(&cfg, svc_methods, N_METHODS, &e), O3M_EINVAL));
  cfg.tls.ca_file = NULL;

  /* The limits before a request is read, each named. */
  static const struct {
    int streams, timeout, receiving, connections;
    const char *field;
  } limits[] = {{0, 0, 0, 1, "streams_per_connection"},
                {64, -1, 0, 1, "receive_timeout_ms"},
                {64, 0, O3M_RPC_MAX_SLOTS - 1, 1, "receiving_per_identity"},
                {64, 0, 0, 0, "connections_per_identity"},
                {64, 0, 0, O3M_RPC_MAX_CONNECTIONS_PER_IDENTITY + 1, "connections_per_identity"}};
  for (size_t i = 0; i < sizeof limits / sizeof limits[0]; i++) {
    o3m_rpc_server_config bad = cfg;
    bad.streams_per_connection = limits[i].streams;
    bad.receive_timeout_ms = limits[i].timeout;
    bad.receiving_per_identity = limits[i].receiving;
    bad.connections_per_identity = limits[i].connections;
    cr_assert(eq(int, create_err(&bad, svc_methods, N_METHODS, &e), O3M_EINVAL));
    cr_assert(not(eq(ptr, strstr(e.msg, limits[i].field), NULL)), "%s", e.msg);
  }

  o3m_rpc_method dup[2] = {svc_methods[0], svc_methods[0]};
  cr_assert(eq(int, create_err(&cfg, dup, 2, &e), O3M_EINVAL));
  cr_assert(not(eq(ptr, strstr(e.msg, "twice"), NULL)), "%s", e.msg);
  dup[1].path = "o3m.v1.Passive/Info";
  cr_assert(eq(int, create_err(&cfg, dup, 2, &e), O3M_EINVAL));
  dup[1] = svc_methods[1];
  dup[1].handler = NULL;
  cr_assert(eq(int, create_err(&cfg, dup, 2, &e), O3M_EINVAL));
  cr_assert(eq(int, create_err(&cfg, svc_methods, 0, &e), O3M_EINVAL));

  cfg.max_message_bytes = 0;
  cr_assert(eq(int, create_err(&cfg, svc_methods, N_METHODS, &e), O3M_EINVAL));
  cfg.max_message_bytes = O3M_RPC_DEFAULT_MAX_MESSAGE;

  cfg.listen = "256.0.0.1:99999";
  cr_assert(eq(int, create_err(&cfg, svc_methods, N_METHODS, &e), O3M_EIO), "%s", e.msg);

  cfg.listen = "127.0.0.1:0";
  cfg.insecure = 0;
  cfg.tls.cert_file = "/nonexistent/srv.pem";
  cfg.tls.key_file = "/nonexistent/srv.key";
  cr_assert(eq(int, create_err(&cfg, svc_methods, N_METHODS, &e), O3M_ETLS));
  cr_assert(not(eq(ptr, strstr(e.msg, "/nonexistent/srv.pem"), NULL)), "%s", e.msg);

  o3m_rpc_client_config cc;
  o3m_rpc_client *c = (o3m_rpc_client *)&e;
  o3m_rpc_client_config_default(&cc);
  cr_assert(eq(int, o3m_rpc_client_create(&c, &cc, &e), O3M_EINVAL));
  cr_assert(eq(ptr, c, NULL));
  cc.target = "127.0.0.1:1";
  cc.deadline_ms = 0;
  cr_assert(eq(int, o3m_rpc_client_create(&c, &cc, &e), O3M_EINVAL));
  cc.deadline_ms = 1000;
  cc.tls.cert_file = "/x.pem";
  cr_assert(eq(int, o3m_rpc_client_create(&c, &cc, &e), O3M_EINVAL));
  cr_assert(not(eq(ptr, strstr(e.msg, "go together"), NULL)), "%s", e.msg);
}

/* ------------------------------------------------------------ health */

/* The status a health Check for service returns, or the negative code. */
static int health(o3m_rpc_client *c, const char *service, const char *path) {
  Grpc__Health__V1__HealthCheckRequest req = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
  req.service = (char *)service;
  ProtobufCMessage *m;
  o3m_err e;
  o3m_err_clear(&e);
  int rc = o3m_rpc_client_call(c, path, &req.base,
                               &grpc__health__v1__health_check_response__descriptor, &m, &e);
  if (rc < 0) return rc;
  return (int)((Grpc__Health__V1__HealthCheckResponse *)m)->status;
}

/* Every server answers grpc.health.v1.Health/Check although the test
 * service's table does not list it. */
Test(rpc, health_check_is_built_into_every_server, .timeout = 30) {
  server_fx f;
  start_server(&f, 1, 4);
  o3m_rpc_client *c = make_client(f.target, 5000);
  const int SERVING = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
  cr_assert(eq(int, health(c, "", O3M_RPC_HEALTH_CHECK_PATH), SERVING));
  cr_assert(eq(int, health(c, "o3m.v1.Passive", O3M_RPC_HEALTH_CHECK_PATH), SERVING));
  cr_assert(eq(int, health(c, "test.Slow", O3M_RPC_HEALTH_CHECK_PATH), SERVING));
  cr_assert(eq(int, health(c, "grpc.health.v1.Health", O3M_RPC_HEALTH_CHECK_PATH), SERVING));
  /* A service the server does not have, also a prefix of one it has. */
  cr_assert(eq(int, health(c, "o3m.v1.Active", O3M_RPC_HEALTH_CHECK_PATH), O3M_ENOTFOUND));
  cr_assert(eq(int, health(c, "o3m.v1.Pass", O3M_RPC_HEALTH_CHECK_PATH), O3M_ENOTFOUND));
  /* Watch streams; the unary layer does not serve it. */
  cr_assert(eq(int, health(c, "", "/grpc.health.v1.Health/Watch"), O3M_ERPC));
  cr_assert(eq(int, f.ctx.calls, 0), "health calls reached the daemon's handlers");
  o3m_rpc_client_destroy(c);
  stop_server(&f);
}

/* ------------------------------------------------------------ TLS */

static int sh(const char *fmt, const char *dir) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd, fmt, dir, dir, dir, dir, dir, dir, dir, dir);
  return system(cmd);
}

/* A CA, a server certificate for "localhost" and a client certificate with
 * CN party-2, all EC P-256, in dir. The client certificate's only subject
 * alternative name is localhost, as in every federation certificate
 * (scripts/make-certs.sh), so the identity must come from the CN. */
static int make_certs(const char *dir) {
  static const char *steps[] = {
      "cd %s && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
      "-keyout ca.key -out ca.pem -subj /CN=o3m-test-ca -days 2 2>/dev/null",
      "cd %s && printf 'subjectAltName=DNS:localhost\\n' > srv.ext && "
      "printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n' > cli.ext",
      "cd %s && openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
      "-keyout srv.key -out srv.csr -subj /CN=localhost 2>/dev/null && openssl x509 -req "
      "-in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out srv.pem -days 2 "
      "-extfile srv.ext 2>/dev/null",
      "cd %s && openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
      "-keyout cli.key -out cli.csr -subj /CN=party-2 2>/dev/null && openssl x509 -req "
      "-in cli.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out cli.pem -days 2 "
      "-extfile cli.ext 2>/dev/null",
  };
  for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++)
    if (sh(steps[i], dir) != 0) return -1;
  return 0;
}

/* A fresh directory from template tmpl with make_certs' files, and their
 * paths. */
typedef struct tls_fx {
  char dir[64];
  char ca[128], srv_pem[128], srv_key[128], cli_pem[128], cli_key[128];
} tls_fx;

static void tls_setup(tls_fx *t, const char *tmpl) {
  snprintf(t->dir, sizeof t->dir, "%s", tmpl);
  cr_assert(not(eq(ptr, mkdtemp(t->dir), NULL)));
  cr_assert(eq(int, make_certs(t->dir), 0), "openssl failed in %s", t->dir);
  snprintf(t->ca, sizeof t->ca, "%s/ca.pem", t->dir);
  snprintf(t->srv_pem, sizeof t->srv_pem, "%s/srv.pem", t->dir);
  snprintf(t->srv_key, sizeof t->srv_key, "%s/srv.key", t->dir);
  snprintf(t->cli_pem, sizeof t->cli_pem, "%s/cli.pem", t->dir);
  snprintf(t->cli_key, sizeof t->cli_key, "%s/cli.key", t->dir);
}

static int tls_call(const char *target, const o3m_rpc_tls *tls, o3m_err *e) {
  o3m_rpc_client_config cfg;
  o3m_rpc_client_config_default(&cfg);
  cfg.target = target;
  cfg.tls = *tls;
  cfg.deadline_ms = 5000;
  o3m_rpc_client *c;
  int rc = o3m_rpc_client_create(&c, &cfg, e);
  cr_assert(eq(int, rc, 0), "%s", o3m_err_message(e));
  O3m__V1__InfoRequest req = O3M__V1__INFO_REQUEST__INIT;
  ProtobufCMessage *m;
  rc = o3m_rpc_client_call(c, O3M_PATH_PASSIVE_INFO, &req.base, &o3m__v1__node_info__descriptor,
                           &m, e);
  o3m_rpc_client_destroy(c);
  return rc;
}

static int plain_call(const char *target, o3m_err *e) {
  o3m_rpc_client *c = make_client(target, 5000);
  O3m__V1__InfoRequest req = O3M__V1__INFO_REQUEST__INIT;
  ProtobufCMessage *m;
  int rc = o3m_rpc_client_call(c, O3M_PATH_PASSIVE_INFO, &req.base,
                               &o3m__v1__node_info__descriptor, &m, e);
  o3m_rpc_client_destroy(c);
  return rc;
}

/* Mutual TLS as the mask generator runs it: the server demands a client
 * certificate from its CA and the handler reads the party's identity. */
Test(rpc_tls, mutual_tls_gives_the_handler_the_client_identity, .timeout = 60) {
  if (system("openssl version >/dev/null 2>&1") != 0) cr_skip_test("openssl tool not installed");
  tls_fx t;
  tls_setup(&t, "/tmp/o3m_test_tls_XXXXXX");
  const char *dir = t.dir, *ca = t.ca, *srv_pem = t.srv_pem, *srv_key = t.srv_key;
  const char *cli_pem = t.cli_pem, *cli_key = t.cli_key;

  o3m_rpc_server_config scfg;
  o3m_rpc_server_config_default(&scfg);
  scfg.listen = "127.0.0.1:0";
  scfg.tls.ca_file = ca;
  scfg.tls.cert_file = srv_pem;
  scfg.tls.key_file = srv_key;
  server_fx f;
  start_server_cfg(&f, 2, 3, &scfg);

  o3m_err e;
  o3m_err_clear(&e);
  o3m_rpc_tls good = {ca, cli_pem, cli_key, "localhost"};
  int rc = tls_call(f.target, &good, &e);
  cr_assert(eq(int, rc, 0), "%s", o3m_err_message(&e));
  cr_assert(eq(int, f.ctx.identity_null, 0));
  cr_assert(eq(str, f.ctx.identity, "party-2"));

  /* Without a client certificate the handshake fails. */
  o3m_rpc_tls anon = {ca, NULL, NULL, "localhost"};
  rc = tls_call(f.target, &anon, &e);
  cr_assert(eq(int, rc, O3M_EUNAVAILABLE), "%s", o3m_err_message(&e));
  /* A client that does not trust the server's CA fails too. */
  o3m_rpc_tls untrusting = {cli_pem, cli_pem, cli_key, "localhost"};
  rc = tls_call(f.target, &untrusting, &e);
  cr_assert(eq(int, rc, O3M_EUNAVAILABLE), "%s", o3m_err_message(&e));
  /* And plaintext does not get through. */
  rc = plain_call(f.target, &e);
  cr_assert(eq(int, rc, O3M_EUNAVAILABLE), "%s", o3m_err_message(&e));
  cr_assert(eq(int, f.ctx.calls, 1), "a call without valid credentials reached the handler");

  stop_server(&f);
  char cmd[256];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  cr_assert(eq(int, system(cmd), 0));
}

/* The authorization hook of the tests below: allows Info, refuses
 * everything else with a reason, and counts what it was asked. */
typedef struct gate {
  int asked;
  char last_path[64], last_identity[64];
} gate;

static int gate_authorize(void *ctx, o3m_rpc_call *call, const char *path, const char *identity,
                          o3m_err *e) {
  gate *g = ctx;
  g->asked++;
  snprintf(g->last_path, sizeof g->last_path, "%s", path);
  snprintf(g->last_identity, sizeof g->last_identity, "%s", identity ? identity : "(none)");
  cr_assert(eq(str, (char *)o3m_rpc_call_method(call), (char *)path));
  if (strcmp(path, O3M_PATH_PASSIVE_INFO) == 0) return 0;
  return o3m_err_set(e, O3M_EPERM, "the test says no");
}

/* An identity may have calls on connections_per_identity
 * connections at once; a call on a further one is refused at once with
 * RESOURCE_EXHAUSTED naming the identity, counted in limited, and the same
 * connection is let in again once the identity's other calls are done.
 * Each o3m_rpc_client has a connection of its own. */
Test(rpc_tls, connections_per_identity_are_capped, .timeout = 60) {
  if (system("openssl version >/dev/null 2>&1") != 0) cr_skip_test("openssl tool not installed");
  tls_fx t;
  tls_setup(&t, "/tmp/o3m_test_conncap_XXXXXX");
  const char *dir = t.dir, *ca = t.ca, *srv_pem = t.srv_pem, *srv_key = t.srv_key;
  const char *cli_pem = t.cli_pem, *cli_key = t.cli_key;

  o3m_rpc_server_config scfg;
  o3m_rpc_server_config_default(&scfg);
  scfg.listen = "127.0.0.1:0";
  scfg.threads = 2;
  scfg.tls = (o3m_rpc_tls){ca, srv_pem, srv_key, NULL};
  scfg.connections_per_identity = 1;
  server_fx f;
  start_server_cfg(&f, 2, 3, &scfg);
  f.ctx.sleep_ms = 1500;

  o3m_rpc_client_config cc;
  o3m_rpc_client_config_default(&cc);
  cc.target = f.target;
  cc.tls = (o3m_rpc_tls){ca, cli_pem, cli_key, "localhost"};
  o3m_rpc_client *a, *b;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert(eq(int, o3m_rpc_client_create(&a, &cc, &e), 0), "%s", o3m_err_message(&e));
  cr_assert(eq(int, o3m_rpc_client_create(&b, &cc, &e), 0), "%s", o3m_err_message(&e));

  /* a's call sleeps 1.5 s in its handler (without the lock) ... */
  O3m__V1__InfoRequest ir = O3M__V1__INFO_REQUEST__INIT;
  cr_assert(eq(int, o3m_rpc_client_start(a, "/test.Slow/Released", &ir.base,
                                         &o3m__v1__ack__descriptor, &e), 0),
            "%s", o3m_err_message(&e));
  struct timespec ts = {0, 400 * 1000000L};
  nanosleep(&ts, NULL);
  /* ... so a call on party-2's second connection is refused. */
  ProtobufCMessage *m;
  int rc = o3m_rpc_client_call(b, O3M_PATH_PASSIVE_INFO, &ir.base, &o3m__v1__node_info__descriptor,
                               &m, &e);
  cr_assert(eq(int, rc, O3M_EFULL), "%s", o3m_err_message(&e));
  cr_assert(not(eq(ptr, strstr(e.msg, "certificate 'party-2' already has calls on 1 "
                                      "connections"), NULL)), "%s", e.msg);
  cr_assert(eq(int, o3m_rpc_client_finish(a, &m, &e), 0), "%s", o3m_err_message(&e));
  /* Once a's call is done, b's connection is let in. The server frees a's
   * slot when its reply batch completes, which may come a moment after a
   * has its answer (under ASan, later still): b tries for up to 3 s. */
  for (int i = 0; i < 30; i++) {
    rc = o3m_rpc_client_call(b, O3M_PATH_PASSIVE_INFO, &ir.base, &o3m__v1__node_info__descriptor,
                             &m, &e);
    if (rc != O3M_EFULL) break;
    nanosleep(&(struct timespec){0, 100 * 1000000L}, NULL);
  }
  cr_assert(eq(int, rc, 0), "%s", o3m_err_message(&e));
  o3m_rpc_server_stats st;
  o3m_rpc_server_stats_get(f.srv, &st);
  cr_assert(ge(u64, st.limited, 1));
  o3m_rpc_client_destroy(a);
  o3m_rpc_client_destroy(b);
  stop_server(&f);
  sh("rm -rf %s", dir);
}

/* The hook decides every call before the request is read and
 * before any handler runs; a refusal is PERMISSION_DENIED naming the caller
 * and the method, counted, and nothing else happens. The health check does
 * not ask it. */
Test(rpc_tls, authorization_hook_decides_before_the_request_is_read, .timeout = 60) {
  if (system("openssl version >/dev/null 2>&1") != 0) cr_skip_test("openssl tool not installed");
  tls_fx t;
  tls_setup(&t, "/tmp/o3m_test_authz_XXXXXX");
  const char *dir = t.dir, *ca = t.ca, *srv_pem = t.srv_pem, *srv_key = t.srv_key;
  const char *cli_pem = t.cli_pem, *cli_key = t.cli_key;

  gate g = {0};
  o3m_rpc_server_config scfg;
  o3m_rpc_server_config_default(&scfg);
  scfg.listen = "127.0.0.1:0";
  scfg.tls.ca_file = ca;
  scfg.tls.cert_file = srv_pem;
  scfg.tls.key_file = srv_key;
  scfg.authorize = gate_authorize;
  scfg.authorize_ctx = &g;
  server_fx f;
  start_server_cfg(&f, 2, 3, &scfg);

  o3m_rpc_client_config cc;
  o3m_rpc_client_config_default(&cc);
  cc.target = f.target;
  cc.tls = (o3m_rpc_tls){ca, cli_pem, cli_key, "localhost"};
  o3m_rpc_client *c;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert(eq(int, o3m_rpc_client_create(&c, &cc, &e), 0), "%s", o3m_err_message(&e));

  /* Allowed: the handler runs and sees the same identity. */
  O3m__V1__InfoRequest ir = O3M__V1__INFO_REQUEST__INIT;
  ProtobufCMessage *m;
  cr_assert(eq(int, o3m_rpc_client_call(c, O3M_PATH_PASSIVE_INFO, &ir.base,
                                        &o3m__v1__node_info__descriptor, &m, &e), 0),
            "%s", o3m_err_message(&e));
  cr_assert(eq(int, g.asked, 1));
  cr_assert(eq(str, g.last_identity, "party-2"));
  cr_assert(eq(int, f.ctx.calls, 1));

  /* Refused: a valid Mask ... */
  static mask_req r;
  mask_req_init(&r, 1, TEST_MASK);
  int rc = o3m_rpc_client_call(c, O3M_PATH_PASSIVE_MASK, &r.msg.base,
                               &o3m__v1__masked_contexts__descriptor, &m, &e);
  cr_assert(eq(int, rc, O3M_EPERM), "%s", o3m_err_message(&e));
  cr_assert(not(eq(ptr, strstr(e.msg, "certificate 'party-2' may not call /o3m.v1.Passive/Mask: "
                                      "the test says no"), NULL)), "%s", e.msg);
  /* ... and a request that would not even decode (PARSE without the hook):
   * the hook comes first. */
  rc = o3m_rpc_client_call(c, "/test.Block/Get", &r.msg.base, &o3m__v1__ack__descriptor, &m, &e);
  cr_assert(eq(int, rc, O3M_EPERM), "%s", o3m_err_message(&e));
  cr_assert(eq(str, g.last_path, "/test.Block/Get"));
  cr_assert(eq(int, f.ctx.calls, 1), "a refused call reached a handler");

  /* The built-in health check is open to any caller past the handshake. */
  cr_assert(eq(int, health(c, "", O3M_RPC_HEALTH_CHECK_PATH),
               GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING));
  cr_assert(eq(int, g.asked, 3), "the hook was asked about the health check");

  o3m_rpc_server_stats st;
  o3m_rpc_server_stats_get(f.srv, &st);
  cr_assert(eq(u64, st.denied, 2));
  cr_assert(eq(u64, st.malformed, 0));
  cr_assert(eq(u64, st.failed, 0));
  o3m_rpc_client_destroy(c);
  stop_server(&f);

  /* A hook without client certificates could only refuse everyone. */
  scfg.tls.ca_file = NULL;
  o3m_rpc_server *srv = (o3m_rpc_server *)&g;
  cr_assert(eq(int, o3m_rpc_server_create(&srv, &scfg, svc_methods, N_METHODS, NULL, &e),
               O3M_EINVAL));
  cr_assert(eq(ptr, srv, NULL));
  cr_assert(not(eq(ptr, strstr(e.msg, "client certificates"), NULL)), "%s", e.msg);

  char cmd[256];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  cr_assert(eq(int, system(cmd), 0));
}

/* With plaintext there is no identity: the hook is not asked and every call
 * goes through, which is what --insecure means for the daemons. */
Test(rpc, authorization_hook_is_not_asked_in_plaintext, .timeout = 30) {
  gate g = {0};
  o3m_rpc_server_config cfg;
  o3m_rpc_server_config_default(&cfg);
  cfg.listen = "127.0.0.1:0";
  cfg.insecure = 1;
  cfg.authorize = gate_authorize;
  cfg.authorize_ctx = &g;
  server_fx f;
  start_server_cfg(&f, 1, 3, &cfg);
  o3m_rpc_client *c = make_client(f.target, 5000);
  static mask_req r;
  mask_req_init(&r, 2, TEST_MASK);
  ProtobufCMessage *m;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert(eq(int, o3m_rpc_client_call(c, O3M_PATH_PASSIVE_MASK, &r.msg.base,
                                        &o3m__v1__masked_contexts__descriptor, &m, &e), 0),
            "%s", o3m_err_message(&e));
  cr_assert(eq(int, g.asked, 0));
  o3m_rpc_client_destroy(c);
  stop_server(&f);
}

/* ------------------------------------------------------------ deferred replies */

/* A service that defers every Hold call and answers them from the idle hook
 * once `want` calls are held, in reverse arrival order: even parties get a
 * NodeInfo echoing their party, odd ones fail with EXPIRED. With hold_forever
 * it never answers (for the shutdown test). */
enum { MAX_HELD = 16 };

/* The hook's fields are the serving thread's: the test reads them after
 * joining it (want alone is changed while it runs). */
typedef struct dsvc {
  svc base; /* first: h_sleep reads it */
  _Atomic int want;
  int hold_forever;
  o3m_rpc_call *call[MAX_HELD];
  const O3m__V1__BlockRequest *req[MAX_HELD];
  int n_held;
  _Atomic int max_seen; /* most calls held at one run of the hook */
  int arrival[2 * MAX_HELD]; /* parties in the order they were held */
  int n_arrived;
  int prev_held;        /* held at the end of the previous run */
  int max_new;          /* most calls that arrived between two runs */
  int early_rc;         /* reply on a call that is not deferred yet */
  int order[2 * MAX_HELD]; /* parties in the order they were answered */
  int n_answered;
  int reply_rc[2 * MAX_HELD];
} dsvc;

static int h_hold(void *ctx, o3m_rpc_call *call, const ProtobufCMessage *req, ProtobufCMessage *rep,
                  o3m_err *e) {
  (void)e;
  dsvc *s = ctx;
  /* Not deferred yet: completing it is refused and sends nothing. */
  s->early_rc = o3m_rpc_call_reply(call, rep, NULL);
  if (s->n_held >= MAX_HELD) return O3M_EFULL;
  s->call[s->n_held] = call;
  s->req[s->n_held++] = (const O3m__V1__BlockRequest *)req;
  s->arrival[s->n_arrived++] = (int)((const O3m__V1__BlockRequest *)req)->party;
  return O3M_RPC_DEFERRED;
}

static void hold_hook(void *ctx) {
  dsvc *s = ctx;
  if (s->n_held > s->max_seen) s->max_seen = s->n_held;
  if (s->n_held - s->prev_held > s->max_new) s->max_new = s->n_held - s->prev_held;
  s->prev_held = s->n_held;
  if (s->hold_forever || s->n_held < s->want) return;
  for (int i = s->n_held - 1; i >= 0; i--) {
    /* The request is intact although later calls were unpacked meanwhile. */
    int party = (int)s->req[i]->party;
    s->order[s->n_answered] = party;
    if (party % 2 == 1) {
      o3m_err why;
      o3m_err_set(&why, O3M_EEXPIRED, "held %d expired", party);
      s->reply_rc[s->n_answered++] = o3m_rpc_call_fail(s->call[i], O3M_EEXPIRED, &why);
    } else {
      O3m__V1__NodeInfo rep = O3M__V1__NODE_INFO__INIT;
      rep.party = (uint32_t)party;
      char *name = o3m_rpc_call_alloc(s->call[i], 32);
      snprintf(name, 32, "held %d", party);
      rep.name = name;
      s->reply_rc[s->n_answered++] = o3m_rpc_call_reply(s->call[i], &rep.base, NULL);
    }
  }
  s->n_held = s->prev_held = 0;
}

static const o3m_rpc_method hold_methods[] = {
    {"/test.Defer/Hold", &o3m__v1__block_request__descriptor, &o3m__v1__node_info__descriptor,
     h_hold},
    {"/test.Slow/Sleep", &o3m__v1__info_request__descriptor, &o3m__v1__ack__descriptor, h_sleep},
};

typedef struct hold_fx {
  o3m_rpc_server *srv;
  pthread_t th;
  dsvc ctx;
  char target[64];
} hold_fx;

static void hold_start(hold_fx *f, int want, int hold_forever) {
  memset(&f->ctx, 0, sizeof f->ctx);
  f->ctx.want = want;
  f->ctx.hold_forever = hold_forever;
  f->ctx.early_rc = 1;
  o3m_rpc_server_config cfg;
  o3m_rpc_server_config_default(&cfg);
  cfg.listen = "127.0.0.1:0";
  cfg.insecure = 1;
  /* Hold gets enough slots for every call to be held at once. */
  o3m_rpc_method_slots ms = {"/test.Defer/Hold", MAX_HELD};
  cfg.method_slots = &ms;
  cfg.n_method_slots = 1;
  cfg.idle = hold_hook;
  o3m_err e;
  o3m_err_clear(&e);
  int rc = o3m_rpc_server_create(&f->srv, &cfg, hold_methods, 2, &f->ctx, &e);
  cr_assert(eq(int, rc, 0), "server_create: %s", o3m_err_message(&e));
  snprintf(f->target, sizeof f->target, "127.0.0.1:%d", o3m_rpc_server_port(f->srv));
  cr_assert(eq(int, pthread_create(&f->th, NULL, run_thread, f->srv), 0));
}

static void hold_stop(hold_fx *f) {
  void *ret;
  o3m_rpc_server_shutdown(f->srv);
  cr_assert(eq(int, pthread_join(f->th, &ret), 0));
  cr_assert(eq(int, (int)(intptr_t)ret, 0));
  o3m_rpc_server_destroy(f->srv);
}

static void hold_send(o3m_rpc_client *c, int party) {
  O3m__V1__BlockRequest req = O3M__V1__BLOCK_REQUEST__INIT;
  req.party = (uint32_t)party;
  req.dim = 1000 + (uint32_t)party;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert(eq(int, o3m_rpc_client_start(c, "/test.Defer/Hold", &req.base,
                                         &o3m__v1__node_info__descriptor, &e), 0),
            "%s", o3m_err_message(&e));
}

/* Calls that queue up while the serving thread is busy reach the idle hook
 * together, stay valid while held, and are answered in another order than
 * they came, some with replies and some with errors. */
Test(rpc_deferred, calls_held_together_and_completed_out_of_order, .timeout = 30) {
  enum { N = 6 };
  hold_fx f;
  hold_start(&f, N, 0);
  f.ctx.base.sleep_ms = 400;
  o3m_rpc_client *sleeper = make_client(f.target, 5000), *c[N];
  for (int i = 0; i < N; i++) c[i] = make_client(f.target, 5000);
  /* Connect every channel first, so that the calls below only queue. */
  o3m_err e;
  o3m_err_clear(&e);
  ProtobufCMessage *m;
  O3m__V1__InfoRequest ir = O3M__V1__INFO_REQUEST__INIT;
  f.ctx.base.sleep_ms = 0;
  cr_assert(eq(int, o3m_rpc_client_call(sleeper, "/test.Slow/Sleep", &ir.base,
                                        &o3m__v1__ack__descriptor, &m, &e), 0));
  /* Busy the serving thread, then send all N while it sleeps. */
  f.ctx.base.sleep_ms = 400;
  cr_assert(eq(int, o3m_rpc_client_start(sleeper, "/test.Slow/Sleep", &ir.base,
                                         &o3m__v1__ack__descriptor, &e), 0));
  struct timespec ts = {0, 100 * 1000000L};
  nanosleep(&ts, NULL);
  for (int i = 0; i < N; i++) hold_send(c[i], i);
  cr_assert(eq(int, o3m_rpc_client_finish(sleeper, &m, &e), 0), "%s", o3m_err_message(&e));

  for (int i = 0; i < N; i++) {
    o3m_err_clear(&e);
    int rc = o3m_rpc_client_finish(c[i], &m, &e);
    if (i % 2 == 1) {
      cr_assert(eq(int, rc, O3M_EEXPIRED), "call %d: %s", i, o3m_err_message(&e));
      char want[32];
      snprintf(want, sizeof want, "held %d expired", i);
      cr_assert(not(eq(ptr, strstr(o3m_err_message(&e), want), NULL)), "%s", o3m_err_message(&e));
    } else {
      cr_assert(eq(int, rc, 0), "call %d: %s", i, o3m_err_message(&e));
      const O3m__V1__NodeInfo *ni = (const O3m__V1__NodeInfo *)m;
      char want[32];
      snprintf(want, sizeof want, "held %d", i);
      cr_assert(eq(u32, ni->party, (uint32_t)i));
      cr_assert(eq(str, ni->name, want));
    }
  }
  o3m_rpc_server_stats st;
  o3m_rpc_server_stats_get(f.srv, &st);
  cr_assert(eq(u64, st.deferred, N));
  cr_assert(eq(u64, st.ok, 2 + N / 2));
  cr_assert(eq(u64, st.failed, N / 2));
  cr_assert(ge(u64, st.idle_runs, 1));
  cr_assert(eq(u64, st.internal, 0));

  /* The slots are free again: another round works the same way. */
  f.ctx.want = 2;
  hold_send(c[0], 4);
  hold_send(c[1], 3);
  cr_assert(eq(int, o3m_rpc_client_finish(c[0], &m, &e), 0), "%s", o3m_err_message(&e));
  cr_assert(eq(u32, ((const O3m__V1__NodeInfo *)m)->party, 4));
  cr_assert(eq(int, o3m_rpc_client_finish(c[1], &m, &e), O3M_EEXPIRED));

  for (int i = 0; i < N; i++) o3m_rpc_client_destroy(c[i]);
  o3m_rpc_client_destroy(sleeper);
  hold_stop(&f);
  /* Several calls arrived between two runs of the hook: it runs once the
   * queue is drained, not after every call (all N of them, unless the
   * machine was very slow). */
  cr_assert(ge(int, f.ctx.max_new, 2), "the hook ran after every call (at most %d new)",
            f.ctx.max_new);
  if (f.ctx.max_new < N) fprintf(stderr, "note: the hook saw %d of %d at once\n", f.ctx.max_new, N);
  cr_assert(eq(int, f.ctx.n_answered, N + 2));
  cr_assert(eq(int, f.ctx.early_rc, O3M_ESTATE));
  for (int i = 0; i < N + 2; i++) cr_assert(eq(int, f.ctx.reply_rc[i], 0), "answer %d", i);
  /* The first N were answered last-in first-out. */
  cr_assert(eq(int, f.ctx.n_arrived, N + 2));
  for (int i = 0; i < N; i++)
    cr_assert(eq(int, f.ctx.order[i], f.ctx.arrival[N - 1 - i]), "answer %d", i);
}

/* The layer's contract on completion: a reply of the wrong type or an
 * incomplete one fails the call instead (and the call is then completed). */
static int bad_mode;
static void bad_hook(void *ctx) {
  dsvc *s = ctx;
  for (int i = 0; i < s->n_held; i++) {
    o3m_err e;
    o3m_err_clear(&e);
    if (bad_mode == 0) {
      O3m__V1__Ack ack = O3M__V1__ACK__INIT; /* not a NodeInfo */
      s->reply_rc[i] = o3m_rpc_call_reply(s->call[i], &ack.base, &e);
    } else {
      O3m__V1__NodeInfo rep = O3M__V1__NODE_INFO__INIT;
      rep.n_dims = 3; /* and no dims */
      s->reply_rc[i] = o3m_rpc_call_reply(s->call[i], &rep.base, &e);
    }
    /* Completed either way. */
    s->early_rc = o3m_rpc_call_fail(s->call[i], O3M_EINVAL, NULL);
  }
  s->n_answered += s->n_held;
  s->n_held = 0;
}

Test(rpc_deferred, bad_deferred_replies_fail_the_call, .timeout = 30) {
  for (bad_mode = 0; bad_mode < 2; bad_mode++) {
    dsvc ctx;
    memset(&ctx, 0, sizeof ctx);
    o3m_rpc_server_config cfg;
    o3m_rpc_server_config_default(&cfg);
    cfg.listen = "127.0.0.1:0";
    cfg.insecure = 1;
    cfg.idle = bad_hook;
    o3m_rpc_server *srv;
    o3m_err e;
    o3m_err_clear(&e);
    cr_assert(eq(int, o3m_rpc_server_create(&srv, &cfg, hold_methods, 2, &ctx, &e), 0), "%s",
              o3m_err_message(&e));
    pthread_t th;
    cr_assert(eq(int, pthread_create(&th, NULL, run_thread, srv), 0));
    char target[64];
    snprintf(target, sizeof target, "127.0.0.1:%d", o3m_rpc_server_port(srv));
    o3m_rpc_client *c = make_client(target, 5000);
    hold_send(c, 2);
    ProtobufCMessage *m;
    int rc = o3m_rpc_client_finish(c, &m, &e);
    cr_assert(eq(int, rc, bad_mode == 0 ? O3M_EINVAL : O3M_ECORRUPT), "%s: %s", o3m_errname(rc),
              o3m_err_message(&e));
    o3m_rpc_client_destroy(c);
    o3m_rpc_server_shutdown(srv);
    cr_assert(eq(int, pthread_join(th, NULL), 0));
    /* Read after the join: the hook's thread wrote them. */
    cr_assert(eq(int, ctx.reply_rc[0], rc));
    cr_assert(eq(int, ctx.early_rc, O3M_ESTATE), "a completed call was completed again");
    o3m_rpc_server_destroy(srv);
  }
}

/* A call the service never completes cannot hold shutdown: after the grace
 * period it fails with UNAVAILABLE and run() returns. */
Test(rpc_deferred, shutdown_fails_calls_left_deferred, .timeout = 30) {
  hold_fx f;
  hold_start(&f, 0, 1);
  o3m_rpc_client *c = make_client(f.target, 10000);
  hold_send(c, 2);
  for (int i = 0; i < 100 && f.ctx.max_seen == 0; i++) {
    struct timespec ts = {0, 20 * 1000000L};
    nanosleep(&ts, NULL);
  }
  cr_assert(eq(int, f.ctx.max_seen, 1), "the call was never held");
  double t0 = now_ms();
  o3m_rpc_server_shutdown(f.srv);
  ProtobufCMessage *m;
  o3m_err e;
  o3m_err_clear(&e);
  int rc = o3m_rpc_client_finish(c, &m, &e);
  cr_assert(eq(int, rc, O3M_EUNAVAILABLE), "%s: %s", o3m_errname(rc), o3m_err_message(&e));
  void *ret;
  cr_assert(eq(int, pthread_join(f.th, &ret), 0));
  cr_assert(lt(dbl, now_ms() - t0, O3M_RPC_SHUTDOWN_GRACE_MS + 1500.0));
  o3m_rpc_server_destroy(f.srv);
  o3m_rpc_client_destroy(c);
}

Test(rpc_deferred, method_slots_are_checked, .timeout = 30) {
  o3m_rpc_server_config cfg;
  o3m_rpc_server_config_default(&cfg);
  cfg.listen = "127.0.0.1:0";
  cfg.insecure = 1;
  o3m_err e;
  o3m_err_clear(&e);
  o3m_rpc_method_slots ms[2] = {{"/test.Nope/X", 8}, {"/test.Defer/Hold", 8}};
  cfg.method_slots = ms;
  cfg.n_method_slots = 1;
  cr_assert(eq(int, create_err(&cfg, hold_methods, 2, &e), O3M_EINVAL));
  cr_assert(not(eq(ptr, strstr(e.msg, "/test.Nope/X"), NULL)), "%s", e.msg);
  ms[0].path = "/test.Defer/Hold";
  ms[0].slots = 0;
  cr_assert(eq(int, create_err(&cfg, hold_methods, 2, &e), O3M_EINVAL));
  ms[0].slots = O3M_RPC_MAX_SLOTS + 1;
  cr_assert(eq(int, create_err(&cfg, hold_methods, 2, &e), O3M_EINVAL));
  ms[0].slots = 8;
  cfg.n_method_slots = 2;
  cr_assert(eq(int, create_err(&cfg, hold_methods, 2, &e), O3M_EINVAL));
  cr_assert(not(eq(ptr, strstr(e.msg, "twice"), NULL)), "%s", e.msg);
  /* Valid: O3M_RPC_MAX_SLOTS for one method. */
  cfg.n_method_slots = 1;
  ms[0].slots = O3M_RPC_MAX_SLOTS;
  o3m_rpc_server *s;
  cr_assert(eq(int, o3m_rpc_server_create(&s, &cfg, hold_methods, 2, NULL, &e), 0), "%s",
            o3m_err_message(&e));
  o3m_rpc_server_destroy(s);
}
