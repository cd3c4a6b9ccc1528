/* o3m_rpc_client.c -- a client: one channel, one call in flight, started
 * and finished separately (see o3m_rpc.h and o3m_rpc_impl.h). */
#include "o3m_rpc_impl.h"
#include "o3m_alloc.h"

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
  if (cfg->insecure && !o3m_rpc__tls_empty(&cfg->tls))
    return o3m_err_set(e, O3M_EINVAL, "insecure and tls settings are exclusive");
  if (!cfg->tls.cert_file != !cfg->tls.key_file)
    return o3m_err_set(e, O3M_EINVAL, "tls.cert_file and tls.key_file go together");
  if (cfg->deadline_ms < 1 || cfg->deadline_ms > MAX_DEADLINE_MS)
    return o3m_err_set(e, O3M_EINVAL, "deadline_ms must be in 1..%d, got %d", MAX_DEADLINE_MS,
                       cfg->deadline_ms);
  return o3m_rpc__check_limits(cfg->max_message_bytes, cfg->arena_bytes, e);
}

int o3m_rpc_client_create(o3m_rpc_client **out, const o3m_rpc_client_config *cfg,
                          o3m_err *e) {
  if (!out) return o3m_err_set(e, O3M_EINVAL, "out is NULL");
  *out = NULL;
  int rc = client_check(cfg, e);
  if (rc < 0) return rc;

  o3m_rpc_client *c = o3m_calloc(1, sizeof *c);
  if (!c) return o3m_err_set(e, O3M_ENOMEM, "client: out of memory");
  c->tag.kind = TAG_CLIENT;
  c->deadline_ms = cfg->deadline_ms;
  c->max_message = cfg->max_message_bytes;
  c->wait_for_ready = cfg->wait_for_ready != 0;
  c->target = o3m_strdup(cfg->target);
  if (!c->target) {
    rc = o3m_err_set(e, O3M_ENOMEM, "client: out of memory");
    goto fail_client;
  }
  rc = o3m_rpc__arena_init(&c->arena, cfg->arena_bytes,
                           o3m_rpc__arena_cap_for(cfg->max_message_bytes));
  if (rc < 0) {
    rc = o3m_err_set(e, rc, "client arena of %zu bytes: out of memory", cfg->arena_bytes);
    goto fail_target;
  }
  o3m_rpc_route_grpc_log();
  grpc_init();
  grpc_channel_credentials *creds;
  rc = o3m_rpc__make_credentials(cfg->insecure, &cfg->tls, NULL, &creds, e);
  if (rc < 0) goto fail_grpc;
  chan_args ca;
  o3m_rpc__chan_args_fill(&ca, cfg->max_message_bytes, cfg->max_message_bytes, 1,
                          cfg->tls.server_name, 0, cfg->round_robin, 0);
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
  o3m_rpc__arena_release(&c->arena);
fail_target:
  o3m_free(c->target);
fail_client:
  o3m_free(c);
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
  o3m_rpc__arena_release(&c->arena);
  o3m_free(c->target);
  o3m_free(c);
}

int o3m_rpc_client_start(o3m_rpc_client *c, const char *path, const ProtobufCMessage *req,
                         const ProtobufCMessageDescriptor *reply_desc, o3m_err *e) {
  if (!c || !path || !req || !o3m_rpc__descriptor_ok(reply_desc))
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

  o3m_rpc__arena_reset(&c->arena);
  grpc_byte_buffer *send;
  int rc = o3m_rpc__pack_message(req, (size_t)c->max_message, &send, e);
  if (rc < 0) return rc;

  c->call = grpc_channel_create_call(c->ch, NULL, GRPC_PROPAGATE_DEFAULTS, c->cq,
                                     grpc_slice_from_static_string(path), NULL,
                                     o3m_rpc__after_ms(c->deadline_ms), NULL);
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
    rc = o3m_rpc__unpack_message(&c->arena, c->recv, c->reply_desc, &m, &inner);
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
