/* o3m_rpc_tls.c -- the transport credentials of servers and clients (TLS
 * from PEM files checked first, or plaintext) and the channel arguments
 * both sides set (see o3m_rpc_impl.h). */
#include "o3m_rpc_impl.h"
#include "o3m_pem.h"

/* ================================================================ TLS */

typedef struct pem_set {
  char *ca, *cert, *key;
} pem_set;

static void pem_free(pem_set *p) {
  /* Private keys are wiped before their memory goes back to malloc. */
  o3m_pem_free(p->ca, p->ca ? strlen(p->ca) : 0);
  o3m_pem_free(p->cert, p->cert ? strlen(p->cert) : 0);
  o3m_pem_free(p->key, p->key ? strlen(p->key) : 0);
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
  if (t->ca_file && (rc = o3m_pem_read("tls.ca_file", t->ca_file, 0, &p->ca, NULL, e)) < 0)
    goto fail;
  if (t->cert_file && (rc = o3m_pem_read("tls.cert_file", t->cert_file, 0, &p->cert, NULL, e)) < 0)
    goto fail;
  if (t->key_file && (rc = o3m_pem_read("tls.key_file", t->key_file, 1, &p->key, NULL, e)) < 0)
    goto fail;
  return 0;
fail:
  pem_free(p);
  return rc;
}

int o3m_rpc__tls_empty(const o3m_rpc_tls *t) {
  return !t->ca_file && !t->cert_file && !t->key_file && !t->server_name;
}

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

void o3m_rpc__chan_args_fill(chan_args *ca, int max_message, int max_receive, int client,
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
     * connections that never start TLS give their descriptors back soon. */
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

int o3m_rpc__check_limits(int max_message, size_t arena_bytes, o3m_err *e) {
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
size_t o3m_rpc__arena_cap_for(int max_message) {
  return (size_t)max_message * 10 + ((size_t)1 << 20);
}

o3m_rpc_tls o3m_rpc_tls_of_party(const o3m_config *cfg, const o3m_party *me) {
  o3m_rpc_tls t = {.ca_file = o3m_config_ca(cfg), .cert_file = me->cert, .key_file = me->key};
  return t;
}

o3m_rpc_tls o3m_rpc_tls_to_party(const o3m_config *cfg, const o3m_party *me,
                                 const o3m_party *peer) {
  o3m_rpc_tls t = o3m_rpc_tls_of_party(cfg, me);
  t.server_name = peer->name;
  return t;
}

void o3m_rpc_client_secure(o3m_rpc_client_config *cc, int insecure, o3m_rpc_tls tls) {
  static const o3m_rpc_tls none;
  cc->insecure = insecure;
  cc->tls = insecure ? none : tls;
}

/* The transport credentials of a server (sout) or a client (cout): exactly
 * one of the two is not NULL. Plaintext when insecure, else TLS from the PEM
 * files of tls. On failure the credentials pointer is left NULL. */
int o3m_rpc__make_credentials(int insecure, const o3m_rpc_tls *tls, grpc_server_credentials **sout,
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
