/* o3m_rpc_call.c -- a server's calls: each slot from requested through
 * receiving, deferred and replying back to requested, the per-identity
 * limits checked before a request is read, the handler run and the reply,
 * the one place of a server's gRPC batches (see o3m_rpc_impl.h).
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
 * requested again at once (slot_refuse), so it owes no tag. Slots, the
 * arenas and the outstanding-tag and deferred counts are touched only under
 * the server's lock (held by the serving thread that handles an event);
 * only the stop flag and the statistics are atomic. */
#include "o3m_rpc_impl.h"

/* The arena of the request whose handler runs on this thread, -1 when
 * none does: what o3m_rpc_server_unlocked keeps from being reset. Not
 * s->cur_arena, which other threads move while a handler gives the lock
 * up, so that a handler's second release would pin another arena. */
static _Thread_local int handler_arena = -1;

/* Publishes the arenas' capacity for o3m_rpc_server_stats (under s->mu). */
void o3m_rpc__arena_publish(o3m_rpc_server *s) {
  size_t total = 0;
  for (int i = 0; i < s->n_arenas; i++) total += s->arenas[i].total;
  atomic_store_explicit(&s->arena_total, total, memory_order_relaxed);
}


gpr_timespec o3m_rpc__after_ms(int64_t ms) {
  return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(ms, GPR_TIMESPAN));
}

/* Drops everything a call left in a slot so the slot can be requested
 * again. */
void o3m_rpc__slot_clean(struct o3m_rpc_call *sl) {
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
    O3M_ASSERT(sl->srv->n_deferred > 0 && sl->srv->arena_deferred[sl->arena_ix] > 0);
    sl->srv->n_deferred--;
    sl->srv->arena_deferred[sl->arena_ix]--;
  }
  sl->deferred = 0;
}

void o3m_rpc__slot_request(o3m_rpc_server *s, struct o3m_rpc_call *sl) {
  grpc_call_error ce;
  if (s->stopping) return;
  /* A slot is requested only once it is clean: no batch of it is pending. */
  O3M_ASSERT(!sl->requested && !sl->receiving && !sl->replying && !sl->deferred && !sl->call);
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
    o3m_rpc__count(&s->n_internal);
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

  O3M_ASSERT(!sl->replying && !sl->receiving && !sl->deferred);

  grpc_call_error ce = grpc_call_start_batch(sl->call, ops, n, &sl->on_reply, NULL);
  if (ce != GRPC_CALL_OK) {
    o3m_rpc__count(&s->n_internal);
    o3m_rpc__slot_clean(sl);
    o3m_rpc__slot_request(s, sl);
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
  o3m_rpc__slot_clean(sl);
  o3m_rpc__slot_request(s, sl);
}

/* Refuses sl by a limit (RESOURCE_EXHAUSTED), counted in limited and
 * logged at WARN at most once a second, so that a flood cannot flood the
 * log. */
static void refuse_limited(o3m_rpc_server *s, struct o3m_rpc_call *sl, const char *msg) {
  o3m_rpc__count(&s->n_limited);
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
  O3M_ASSERT(!sl->requested && !sl->receiving && !sl->live);
  sl->live = 1;
  sl->recv_by = o3m_rpc__after_ms(s->receive_timeout_ms);
  grpc_call_error ce = grpc_call_start_batch(sl->call, &op, 1, &sl->on_recv, NULL);
  if (ce != GRPC_CALL_OK) {
    o3m_rpc__count(&s->n_internal);
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
void o3m_rpc__expire_receives(o3m_rpc_server *s) {
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
    o3m_rpc__count(&s->n_expired);
    grpc_call_cancel_with_status(sl->call, GRPC_STATUS_DEADLINE_EXCEEDED, msg, NULL);
  }
}

/* A call arrived in sl, with its headers only: authorize it and check its
 * caller's limits before a byte of its body is read (see "Limits before
 * the request is read" in o3m_rpc.h); then start reading it. */
void o3m_rpc__on_call(o3m_rpc_server *s, struct o3m_rpc_call *sl, int success) {
  O3M_ASSERT(sl->requested);
  sl->requested = 0;
  if (s->metrics) sl->arrived = o3m_clock_s();
  if (!success) {
    /* The request was withdrawn because the server is shutting down. */
    o3m_rpc__slot_clean(sl);
    return;
  }
  if (!sl->me) {
    char msg[PATH_MAX_LEN + 32];
    snprintf(msg, sizeof msg, "unknown method %.*s",
             (int)(GRPC_SLICE_LENGTH(sl->details.method) > PATH_MAX_LEN
                       ? PATH_MAX_LEN
                       : GRPC_SLICE_LENGTH(sl->details.method)),
             (const char *)GRPC_SLICE_START_PTR(sl->details.method));
    o3m_rpc__count(&s->n_unknown);
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
  if (s->authorize && m != &o3m_rpc__health_method) {
    o3m_err err;
    o3m_err_clear(&err);
    if (s->authorize(s->authorize_ctx, sl, m->path, id, &err) != 0) {
      char msg[PATH_MAX_LEN + O3M_ERRMSG_MAX + 128];
      snprintf(msg, sizeof msg, "%s%.64s%s may not call %s%s%s",
               id ? "certificate '" : "a caller without a verified certificate", id ? id : "",
               id ? "'" : "", m->path, err.msg[0] ? ": " : "", err.msg);
      o3m_rpc__count(&s->n_denied);
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
void o3m_rpc__on_recv(o3m_rpc_server *s, struct o3m_rpc_call *sl, int success) {
  O3M_ASSERT(sl->receiving);
  sl->receiving = 0;
  if (sl->expired || !success) {
    /* Cancelled by the receive deadline, by the caller or by shutdown:
     * nobody is left to answer. */
    o3m_rpc__slot_clean(sl);
    o3m_rpc__slot_request(s, sl);
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
  if (s->arena_deferred[s->cur_arena] == 0) o3m_rpc__arena_reset(a);
  sl->arena_ix = s->cur_arena;
  if (!sl->payload)
    rc = o3m_err_set(&err, O3M_EPARSE, "%s: the request carries no message", m->path);
  else
    rc = o3m_rpc__unpack_message(a, sl->payload, m->request, &req, &err);
  if (rc < 0) {
    o3m_rpc__count(&s->n_malformed);
  } else {
    ProtobufCMessage *reply = sl->me->reply;
    protobuf_c_message_init(m->reply, reply);
    handler_arena = sl->arena_ix;
    rc = m->handler(s->ctx, sl, req, reply, &err);
    handler_arena = -1;
    if (rc == O3M_RPC_DEFERRED) {
      O3M_ASSERT(!sl->deferred);
      sl->deferred = 1;
      s->n_deferred++;
      s->arena_deferred[sl->arena_ix]++;
      o3m_rpc__count(&s->n_deferred_total);
      o3m_rpc__arena_publish(s);
      return;
    }
    if (rc > 0) rc = o3m_err_set(&err, O3M_ESTATE, "%s: handler returned %d", m->path, rc);
    if (rc == 0 && !protobuf_c_message_check(reply)) {
      o3m_rpc__count(&s->n_internal);
      rc = o3m_err_set(&err, O3M_ECORRUPT, "%s: the handler built an incomplete reply", m->path);
    }
    if (rc == 0) rc = o3m_rpc__pack_message(reply, (size_t)s->max_message, &sl->reply, &err);
    if (rc < 0) o3m_rpc__count(&s->n_failed);
  }
  o3m_rpc__arena_publish(s);

  if (rc == 0) {
    o3m_rpc__count(&s->n_ok);
    slot_reply(s, sl, GRPC_STATUS_OK, 0, NULL);
  } else {
    slot_reply(s, sl, o3m_rpc_status_from_error(rc), rc, o3m_err_message(&err));
  }
}

/* Ends the deferred state of sl before its reply goes out. */
static void undefer(o3m_rpc_server *s, struct o3m_rpc_call *sl) {
  O3M_ASSERT(sl->deferred && s->n_deferred > 0 && s->arena_deferred[sl->arena_ix] > 0);
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
    o3m_rpc__count(&s->n_internal);
    rc = o3m_err_set(&err, O3M_ECORRUPT, "%s: the service built an incomplete reply", m->path);
  } else {
    rc = o3m_rpc__pack_message(reply, (size_t)s->max_message, &c->reply, &err);
  }
  undefer(s, c);
  if (rc == 0) {
    o3m_rpc__count(&s->n_ok);
    slot_reply(s, c, GRPC_STATUS_OK, 0, NULL);
    return 0;
  }
  o3m_rpc__count(&s->n_failed);
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
  o3m_rpc__count(&s->n_failed);
  slot_reply(s, c, o3m_rpc_status_from_error(code), code, msg);
  return 0;
}

/* Fails every call that is still deferred (at the end of a shutdown). */
void o3m_rpc__fail_deferred(o3m_rpc_server *s) {
  for (int i = 0; i < s->n_slots && s->n_deferred > 0; i++)
    if (s->slots[i].deferred) {
      o3m_err why;
      o3m_err_set(&why, O3M_EUNAVAILABLE, "server is shutting down");
      o3m_rpc_call_fail(&s->slots[i], O3M_EUNAVAILABLE, &why);
    }
}

void o3m_rpc__on_reply(o3m_rpc_server *s, struct o3m_rpc_call *sl) {
  O3M_ASSERT(sl->replying);
  sl->replying = 0;
  o3m_rpc__slot_clean(sl);
  o3m_rpc__slot_request(s, sl);
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
  return o3m_rpc__arena_alloc(&c->srv->arenas[c->arena_ix], n);
}

/* The calling handler's arena (the current one from the idle hook) is
 * pinned like one holding a deferred call, so that the handler's request
 * stays valid while other threads unpack into another arena. */
void o3m_rpc_server_idle_again(o3m_rpc_server *s) { s->busy = 1; }

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

