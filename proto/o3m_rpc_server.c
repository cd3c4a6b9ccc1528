/* o3m_rpc_server.c -- a server's configuration, set-up, serving loop,
 * shutdown and statistics, and the grpc.health.v1 Check method every server
 * answers (see o3m_rpc_impl.h; its calls are in o3m_rpc_call.c).
 *
 * The loop. completion_queue_next blocks (for at most POLL_MS, to notice a
 * stop) only when the previous event was followed by an empty queue and the
 * idle hook has run; after an event it polls again with a deadline in the
 * past, which gRPC answers after one non-blocking pass over its sockets. So
 * the idle hook sees everything that was ready as one batch (or, under a
 * flood, what came in IDLE_EVERY completions). */
#include "o3m_rpc_impl.h"
#include "o3m_alloc.h"

/* ================================================================ server */

/* The largest request a server reads. */
static int receive_limit(const o3m_rpc_server_config *cfg) {
  return cfg->max_receive_bytes ? cfg->max_receive_bytes : cfg->max_message_bytes;
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

const o3m_rpc_method o3m_rpc__health_method = {
    O3M_RPC_HEALTH_CHECK_PATH, &grpc__health__v1__health_check_request__descriptor,
    &grpc__health__v1__health_check_response__descriptor, health_check};


void o3m_rpc_server_config_default(o3m_rpc_server_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->max_message_bytes = O3M_RPC_DEFAULT_MAX_MESSAGE;
  cfg->slots_per_method = O3M_RPC_DEFAULT_SLOTS;
  cfg->arena_bytes = O3M_RPC_DEFAULT_ARENA;
  cfg->streams_per_connection = O3M_RPC_DEFAULT_STREAMS;
  cfg->receive_timeout_ms = O3M_RPC_DEFAULT_RECEIVE_TIMEOUT_MS;
  cfg->connections_per_identity = O3M_RPC_DEFAULT_CONNECTIONS_PER_IDENTITY;
}

void o3m_rpc__count(atomic_uint_least64_t *c) {
  atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

static int server_check(const o3m_rpc_server_config *cfg, const o3m_rpc_method *methods,
                        int n_methods, o3m_err *e) {
  if (!cfg) return o3m_err_set(e, O3M_EINVAL, "server config is NULL");
  if (!cfg->listen || !cfg->listen[0])
    return o3m_err_set(e, O3M_EINVAL, "listen address is not set");
  if (cfg->insecure && !o3m_rpc__tls_empty(&cfg->tls))
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
  int rc = o3m_rpc__check_limits(cfg->max_message_bytes, cfg->arena_bytes, e);
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
    if (!o3m_rpc__descriptor_ok(m->request) || !o3m_rpc__descriptor_ok(m->reply))
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


static void server_dispatch(o3m_rpc_server *s, grpc_event ev, int *shutdown_done) {
  rpc_tag *t = ev.tag;
  switch (t->kind) {
  case TAG_SHUTDOWN: *shutdown_done = 1; break;
  case TAG_CALL:
    s->outstanding--;
    o3m_rpc__on_call(s, t->slot, ev.success);
    break;
  case TAG_RECV:
    s->outstanding--;
    o3m_rpc__on_recv(s, t->slot, ev.success);
    break;
  case TAG_REPLY:
    s->outstanding--;
    o3m_rpc__on_reply(s, t->slot);
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
      s->grace_end = o3m_rpc__after_ms(O3M_RPC_SHUTDOWN_GRACE_MS);
    }
    if (s->shutdown_sent && !s->cancelled &&
        gpr_time_cmp(gpr_now(GPR_CLOCK_MONOTONIC), s->grace_end) > 0) {
      grpc_server_cancel_all_calls(s->server);
      s->cancelled = 1;
    }
    if (s->receive_timeout_ms > 0) o3m_rpc__expire_receives(s);
    if (s->shutdown_done && s->outstanding == 0 && s->n_deferred == 0) s->finished = 1;
    int finished = s->finished, busy = s->busy;
    pthread_mutex_unlock(&s->mu);
    if (finished) break;
    /* After an event, look again without blocking: the hook runs only once
     * the queue is empty. */
    grpc_event ev = grpc_completion_queue_next(
        s->cq, busy ? gpr_inf_past(GPR_CLOCK_MONOTONIC) : o3m_rpc__after_ms(POLL_MS), NULL);
    pthread_mutex_lock(&s->mu);
    if (ev.type == GRPC_QUEUE_TIMEOUT) {
      const int run = (s->busy || s->idle_on_timeout) && s->idle && s->serving;
      /* Cleared first: the hook may ask to run again (idle_again). */
      s->busy = 0;
      if (run) {
        o3m_rpc__count(&s->n_idle);
        s->idle(s->ctx);
      }
      /* The service had its chance with every deferred call: after the
       * grace period what is left fails, so that shutdown can finish. Not
       * while a thread is released (o3m_rpc_server_unlocked): calls it
       * still owns would be completed twice; it comes back within its
       * own bound (the AP's: the passive parties' deadline). */
      if (s->cancelled && s->n_deferred > 0 && s->released == 0) {
        o3m_rpc__fail_deferred(s);
        s->busy = 1;
      }
    } else if (ev.type == GRPC_QUEUE_SHUTDOWN) {
      s->finished = 1;
    } else {
      server_dispatch(s, ev, &s->shutdown_done);
      if (++s->busy >= IDLE_EVERY && s->idle && s->serving) {
        o3m_rpc__count(&s->n_idle);
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
    if (s->slots[i].deferred) o3m_rpc__slot_clean(&s->slots[i]);
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
        o3m_rpc__slot_clean(t->slot);
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
      o3m_rpc__slot_clean(&s->slots[i]);
      grpc_metadata_array_destroy(&s->slots[i].md);
      if (!s->slots[i].me) grpc_call_details_destroy(&s->slots[i].details);
    }
    o3m_free(s->slots);
  }
  if (s->methods) {
    for (int i = 0; i < s->n_methods; i++) o3m_free(s->methods[i].reply);
    o3m_free(s->methods);
  }
  for (int i = 0; i < SERVER_ARENAS; i++) o3m_rpc__arena_release(&s->arenas[i]);
  if (s->grpc_inited) grpc_shutdown();
  pthread_mutex_destroy(&s->mu);
  o3m_free(s);
}

int o3m_rpc_server_create(o3m_rpc_server **out, const o3m_rpc_server_config *cfg,
                          const o3m_rpc_method *methods, int n_methods, void *ctx,
                          o3m_err *e) {
  if (!out) return o3m_err_set(e, O3M_EINVAL, "out is NULL");
  *out = NULL;
  int rc = server_check(cfg, methods, n_methods, e);
  if (rc < 0) return rc;

  o3m_rpc_server *s = o3m_calloc(1, sizeof *s);
  if (!s) return o3m_err_set(e, O3M_ENOMEM, "server: out of memory");
  atomic_init(&s->stop, 0);
  atomic_init(&s->threads_running, 0);
  if (pthread_mutex_init(&s->mu, NULL) != 0) {
    o3m_free(s);
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
    rc = o3m_rpc__arena_init(&s->arenas[i], cfg->arena_bytes,
                             cfg->arena_max_bytes ? cfg->arena_max_bytes
                                         : o3m_rpc__arena_cap_for(receive_limit(cfg)));
    if (rc < 0) {
      rc = o3m_err_set(e, rc, "server arena of %zu bytes: out of memory", cfg->arena_bytes);
      goto fail;
    }
  }
  atomic_init(&s->arena_total, 0);
  o3m_rpc__arena_publish(s);

  /* The daemon's table, then the health check unless the table has its
   * own. */
  int with_health = 1;
  for (int i = 0; i < n_methods; i++)
    if (strcmp(methods[i].path, O3M_RPC_HEALTH_CHECK_PATH) == 0) with_health = 0;
  s->n_methods = n_methods + with_health;
  s->methods = o3m_calloc((size_t)s->n_methods, sizeof *s->methods);
  s->n_slots = 1;
  for (int i = 0; i < s->n_methods; i++)
    s->n_slots += slots_for(cfg, i < n_methods ? methods[i].path : o3m_rpc__health_method.path);
  s->slots = o3m_calloc((size_t)s->n_slots, sizeof *s->slots);
  if (!s->methods || !s->slots) {
    rc = o3m_err_set(e, O3M_ENOMEM, "server tables: out of memory");
    goto fail;
  }
  for (int i = 0; i < s->n_methods; i++) {
    const o3m_rpc_method *m = i < n_methods ? &methods[i] : &o3m_rpc__health_method;
    s->methods[i].m = m;
    s->methods[i].reply = o3m_calloc(1, m->reply->sizeof_message);
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
  o3m_rpc__chan_args_fill(&ca, cfg->max_message_bytes, receive_limit(cfg), 0, NULL,
                          cfg->idle_close_ms, 0, cfg->streams_per_connection);
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
  rc = o3m_rpc__make_credentials(cfg->insecure, &cfg->tls, &creds, NULL, e);
  if (rc < 0) goto fail;
  rc = o3m_rpc__unix_check_free(cfg->listen, e);
  if (rc < 0) {
    grpc_server_credentials_release(creds);
    goto fail;
  }
  s->port = grpc_server_add_http2_port(s->server, cfg->listen, creds);
  grpc_server_credentials_release(creds);
  if (s->port <= 0) {
    /* The TLS files passed o3m_cert_check_files above, so this is the
     * address. */
    rc = o3m_rpc__listen_error(cfg->listen, e);
    goto fail;
  }
  grpc_server_start(s->server);
  s->started = 1;
  for (int i = 0; i < s->n_slots; i++) o3m_rpc__slot_request(s, &s->slots[i]);
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

