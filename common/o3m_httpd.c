/* o3m_httpd.c -- see o3m_httpd.h. The listening socket is made here
 * (getaddrinfo, bind, listen) and handed to libmicrohttpd, so that a bind
 * error names its cause the way the gRPC port's does and the bound port is
 * known at once; libmicrohttpd owns the socket from then on and closes it
 * when the daemon stops. */
#include "o3m_httpd.h"
#include "o3m_alloc.h"

#include <errno.h>
#include <fcntl.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "o3m_bytes.h"
#include "o3m_pem.h"
#include "o3m_probesock.h"

struct o3m_httpd {
  struct MHD_Daemon *mhd;     /* NULL: no TCP port, the probe socket only */
  o3m_probesock *probe_sock;  /* NULL: no probe socket */
  o3m_metrics *metrics;
  volatile sig_atomic_t ready;
  int port;
  /* HTTPS: the PEM texts libmicrohttpd was given (kept until it stops; the
   * key is wiped then) and the names that may read /metrics, ",a,b,". */
  int tls;
  char *pem_ca, *pem_cert, *pem_key;
  size_t key_len;
  char *clients;
  /* The readiness probe (o3m_httpd_set_probe) and its last answer, under
   * probe_lock; probed_at is 0 before the first probe. */
  pthread_mutex_t probe_lock;
  int (*probe)(void *ctx);
  void *probe_ctx;
  int probe_ok;
  double probed_at;
  /* The open connections and when their current request began, under
   * conn_lock; the reaper thread cuts those older than
   * O3M_HTTPD_REQUEST_MAX_S (cut_request). */
  pthread_mutex_t conn_lock;
  pthread_cond_t conn_cv;
  struct conn_slot {
    int used;
    MHD_socket fd;
    double since;
  } conns[O3M_HTTPD_MAX_CONNECTIONS];
  pthread_t reaper;
  int reaper_started;
  int stopping;
};

/* Seconds on the monotonic clock. */
static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* What /readyz says when the daemon is marked ready: the probe's answer,
 * asked again once the cached one is O3M_HTTPD_PROBE_CACHE_MS old, so that
 * many probes in a row cost one call; 1 without a probe. */
static int probe_ready(o3m_httpd *h) {
  pthread_mutex_lock(&h->probe_lock);
  int ok = 1;
  if (h->probe) {
    double now = now_s();
    if (h->probed_at == 0 || now - h->probed_at >= O3M_HTTPD_PROBE_CACHE_MS / 1000.0) {
      h->probe_ok = h->probe(h->probe_ctx) ? 1 : 0;
      h->probed_at = now_s();
    }
    ok = h->probe_ok;
  }
  pthread_mutex_unlock(&h->probe_lock);
  return ok;
}

/* What /healthz and /readyz answer, on the metrics port and on the probe
 * socket alike (o3m_probesock_answer_fn): the status, and the body in
 * *body; 404 for any other path. */
static int probe_answer(void *ctx, const char *path, const char **body) {
  o3m_httpd *h = ctx;
  if (strcmp(path, "/healthz") == 0) {
    *body = "ok\n";
    return MHD_HTTP_OK;
  }
  if (strcmp(path, "/readyz") != 0) {
    *body = "not found\n";
    return MHD_HTTP_NOT_FOUND;
  }
  if (!h->ready) {
    *body = "not ready\n";
    return MHD_HTTP_SERVICE_UNAVAILABLE;
  }
  if (!probe_ready(h)) {
    *body = "not ready: the service port does not answer\n";
    return MHD_HTTP_SERVICE_UNAVAILABLE;
  }
  *body = "ready\n";
  return MHD_HTTP_OK;
}

/* Queues a reply of status with body (copied) as text/plain. */
static enum MHD_Result reply_text(struct MHD_Connection *c, unsigned status, const char *body) {
  struct MHD_Response *r =
      MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_MUST_COPY);
  if (!r) return MHD_NO;
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; charset=utf-8");
  enum MHD_Result ok = MHD_queue_response(c, status, r);
  MHD_destroy_response(r);
  return ok;
}

/* libmicrohttpd's connection notifications: a new connection takes a slot
 * (its socket context) with the time it opened; a closed one gives it
 * back. The slot is freed before libmicrohttpd closes the descriptor, so the
 * reaper never touches a descriptor that another file may have reused. */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe) {
  o3m_httpd *h = cls;
  pthread_mutex_lock(&h->conn_lock);
  if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    for (int i = 0; ci && i < O3M_HTTPD_MAX_CONNECTIONS; i++) {
      if (h->conns[i].used) continue;
      h->conns[i] = (struct conn_slot){1, ci->connect_fd, now_s()};
      *socket_context = &h->conns[i];
      break;
    }
  } else if (*socket_context) {
    ((struct conn_slot *)*socket_context)->used = 0;
    *socket_context = NULL;
  }
  pthread_mutex_unlock(&h->conn_lock);
}

/* A request was answered: the connection's next request (keep-alive)
 * starts its own clock. */
static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
  (void)con_cls;
  (void)toe;
  o3m_httpd *h = cls;
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
  pthread_mutex_lock(&h->conn_lock);
  struct conn_slot *slot = ci ? ci->socket_context : NULL;
  if (slot && slot->used) slot->since = now_s();
  pthread_mutex_unlock(&h->conn_lock);
}

/* The reaper: once a second, shuts down every connection whose request
 * (or TLS handshake, or the wait for its first request) has taken more
 * than O3M_HTTPD_REQUEST_MAX_S, however slowly it trickles bytes in (a
 * slowloris: the inactivity timeout alone let 16 sockets sending a header
 * line every 3 s hold the port). shutdown() wakes libmicrohttpd's poll,
 * which then closes the connection itself. */
static void *reaper_main(void *arg) {
  o3m_httpd *h = arg;
  pthread_mutex_lock(&h->conn_lock);
  while (!h->stopping) {
    double now = now_s();
    for (int i = 0; i < O3M_HTTPD_MAX_CONNECTIONS; i++) {
      struct conn_slot *sl = &h->conns[i];
      if (sl->used && now - sl->since > O3M_HTTPD_REQUEST_MAX_S) {
        shutdown(sl->fd, SHUT_RDWR);
        sl->since = now; /* once; it closes at the next poll */
      }
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 1;
    pthread_cond_timedwait(&h->conn_cv, &h->conn_lock, &until);
  }
  pthread_mutex_unlock(&h->conn_lock);
  return NULL;
}

/* The common name of the verified client certificate of c, in cn, if it
 * chains to the trusted CA for TLS client use; 0 or -1 (none, not
 * verified, no common name). */
static int client_name(struct MHD_Connection *c, char *cn, size_t n) {
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(c, MHD_CONNECTION_INFO_GNUTLS_SESSION);
  if (!ci || !ci->tls_session) return -1;
  gnutls_session_t s = (gnutls_session_t)ci->tls_session;
  gnutls_typed_vdata_st purpose = {GNUTLS_DT_KEY_PURPOSE_OID,
                                   (unsigned char *)GNUTLS_KP_TLS_WWW_CLIENT, 0};
  unsigned status = 0, n_peers = 0;
  if (gnutls_certificate_verify_peers(s, &purpose, 1, &status) < 0 || status != 0) return -1;
  const gnutls_datum_t *peers = gnutls_certificate_get_peers(s, &n_peers);
  gnutls_x509_crt_t crt;
  if (!peers || n_peers == 0 || gnutls_x509_crt_init(&crt) < 0) return -1;
  size_t len = n - 1;
  int rc = gnutls_x509_crt_import(crt, &peers[0], GNUTLS_X509_FMT_DER);
  if (rc >= 0) rc = gnutls_x509_crt_get_dn_by_oid(crt, GNUTLS_OID_X520_COMMON_NAME, 0, 0, cn, &len);
  gnutls_x509_crt_deinit(crt);
  if (rc < 0 || len == 0 || memchr(cn, ',', len)) return -1;
  cn[len] = '\0';
  return 0;
}

/* Whether c may read /metrics: without TLS anyone (the daemon was started
 * with --insecure); with it, a verified client certificate whose common
 * name is in the list. */
static int metrics_allowed(const o3m_httpd *h, struct MHD_Connection *c) {
  if (!h->tls) return 1;
  char cn[130], key[134];
  if (client_name(c, cn, sizeof cn) < 0) return 0;
  snprintf(key, sizeof key, ",%s,", cn);
  return strstr(h->clients, key) != NULL;
}

/* Answers one request; see the table in o3m_httpd.h. Requests carry no
 * body, so the first call for a connection answers at once. */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
  (void)version;
  (void)upload_data;
  (void)con_cls;
  o3m_httpd *h = cls;
  if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0) {
    *upload_data_size = 0;
    return reply_text(c, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET and HEAD\n");
  }
  const char *body;
  int status = probe_answer(h, url, &body);
  if (status != MHD_HTTP_NOT_FOUND) return reply_text(c, (unsigned)status, body);
  if (strcmp(url, "/metrics") != 0) return reply_text(c, MHD_HTTP_NOT_FOUND, "not found\n");
  if (!metrics_allowed(h, c))
    return reply_text(c, MHD_HTTP_FORBIDDEN, "/metrics needs a client certificate of the "
                      "federation CA whose name is in metrics_clients\n");
  char *text;
  size_t len;
  o3m_err e;
  o3m_err_clear(&e);
  if (o3m_metrics_render(h->metrics, &text, &len, &e) < 0)
    return reply_text(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "cannot render the metrics\n");
  struct MHD_Response *r = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
  if (!r) {
    o3m_free(text);
    return MHD_NO;
  }
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                          "text/plain; version=0.0.4; charset=utf-8");
  enum MHD_Result ok = MHD_queue_response(c, MHD_HTTP_OK, r);
  MHD_destroy_response(r);
  return ok;
}

/* Splits "HOST:PORT", "[V6]:PORT" or ":PORT" into host (the default host
 * when empty) and port. */
static int split_listen(const char *listen, char *host, size_t hn, char *port, size_t pn,
                        o3m_err *e) {
  const char *colon = listen ? strrchr(listen, ':') : NULL;
  if (!colon || !colon[1] || strlen(colon + 1) > 5 || strlen(colon + 1) >= pn ||
      strspn(colon + 1, "0123456789") != strlen(colon + 1) || atoi(colon + 1) > 65535)
    return o3m_err_set(e, O3M_EINVAL, "metrics listen '%s' is not HOST:PORT (for example "
                       "127.0.0.1:9464)", listen ? listen : "(null)");
  const char *h = listen;
  size_t len = (size_t)(colon - listen);
  if (len >= 2 && h[0] == '[' && h[len - 1] == ']') {
    h++;
    len -= 2;
  }
  if (len == 0) {
    h = O3M_HTTPD_DEFAULT_HOST;
    len = strlen(h);
  }
  if (len >= hn) return o3m_err_set(e, O3M_EINVAL, "metrics listen '%s': host too long", listen);
  memcpy(host, h, len);
  host[len] = '\0';
  snprintf(port, pn, "%s", colon + 1);
  return O3M_OK;
}

/* A listening TCP socket on addr, its port in *port_out. */
static int bind_addr(const char *addr, int *fd_out, int *port_out, o3m_err *e) {
  char host[256], port[16];
  int rc = split_listen(addr, host, sizeof host, port, sizeof port, e);
  if (rc < 0) return rc;
  struct addrinfo hints, *ai;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  int g = getaddrinfo(host, port, &hints, &ai);
  if (g != 0) return o3m_err_set(e, O3M_EINVAL, "metrics listen %s: %s", addr, gai_strerror(g));
  int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
  int one = 1;
  if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
      bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 32) != 0) {
    int err = errno;
    if (fd >= 0) close(fd);
    freeaddrinfo(ai);
    return o3m_err_set(e, O3M_EIO, "metrics listen %s: %s", addr, strerror(err));
  }
  freeaddrinfo(ai);
  struct sockaddr_storage sa;
  socklen_t sl = sizeof sa;
  char pb[NI_MAXSERV];
  if (getsockname(fd, (struct sockaddr *)&sa, &sl) != 0 ||
      getnameinfo((struct sockaddr *)&sa, sl, NULL, 0, pb, sizeof pb, NI_NUMERICSERV) != 0) {
    int err = errno;
    close(fd);
    return o3m_err_set(e, O3M_EIO, "metrics listen %s: cannot read the bound port: %s", addr,
                       strerror(err));
  }
  *fd_out = fd;
  *port_out = atoi(pb);
  return O3M_OK;
}

/* Frees h and what it holds, the key wiped first. */
static void httpd_free(o3m_httpd *h) {
  o3m_pem_free(h->pem_key, h->key_len);
  o3m_free(h->pem_cert);
  o3m_free(h->pem_ca);
  o3m_free(h->clients);
  pthread_mutex_destroy(&h->probe_lock);
  pthread_mutex_destroy(&h->conn_lock);
  pthread_cond_destroy(&h->conn_cv);
  o3m_free(h);
}

/* Loads tls into h: the PEM texts and the list ",a,b,". */
static int load_tls(o3m_httpd *h, const o3m_httpd_tls *tls, o3m_err *e) {
  if (!tls->ca_file || !tls->cert_file || !tls->key_file)
    return o3m_err_set(e, O3M_EINVAL, "metrics listen: HTTPS needs the CA, certificate and key");
  const char *list = tls->clients ? tls->clients : "";
  h->clients = o3m_malloc(strlen(list) + 3);
  if (!h->clients) return o3m_err_set(e, O3M_ENOMEM, "metrics listen: out of memory");
  /* ",a,b," with the blanks around names dropped. */
  char *w = h->clients;
  *w++ = ',';
  for (const char *p = list; *p; p++)
    if (*p != ' ' && *p != '\t' && !(*p == ',' && w[-1] == ',')) *w++ = *p;
  if (w[-1] != ',') *w++ = ',';
  *w = '\0';
  int rc = o3m_pem_read("metrics listen: ca", tls->ca_file, 0, &h->pem_ca, NULL, e);
  if (rc == O3M_OK)
    rc = o3m_pem_read("metrics listen: cert", tls->cert_file, 0, &h->pem_cert, NULL, e);
  if (rc == O3M_OK)
    rc = o3m_pem_read("metrics listen: key", tls->key_file, 1, &h->pem_key, &h->key_len, e);
  h->tls = rc == O3M_OK;
  return rc;
}

/* The TCP port on listen_addr: HTTPS with tls, or plain HTTP with tls
 * NULL; its reaper thread. On failure nothing of it is left running. */
static int tcp_start(o3m_httpd *h, const char *listen_addr, const o3m_httpd_tls *tls,
                     o3m_err *e) {
  int fd;
  int rc = tls ? load_tls(h, tls, e) : O3M_OK;
  if (rc == O3M_OK) rc = bind_addr(listen_addr, &fd, &h->port, e);
  if (rc < 0) return rc;
  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO;
  /* Limits shared by both kinds: connections in all and per address,
   * the inactivity timeout, and the notifications that time requests. */
#define O3M_HTTPD_LIMITS                                                                      \
  MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_CONNECTION_LIMIT,                                  \
      (unsigned)O3M_HTTPD_MAX_CONNECTIONS, MHD_OPTION_PER_IP_CONNECTION_LIMIT,                \
      (unsigned)O3M_HTTPD_MAX_PER_ADDRESS, MHD_OPTION_CONNECTION_TIMEOUT,                     \
      (unsigned)O3M_HTTPD_TIMEOUT_S, MHD_OPTION_NOTIFY_CONNECTION, on_connection, h,          \
      MHD_OPTION_NOTIFY_COMPLETED, on_completed, h
  if (h->tls) {
    /* With a trust list libmicrohttpd asks for a client certificate but
     * does not require one: the probes answer without, /metrics checks it
     * (metrics_allowed). */
    h->mhd = MHD_start_daemon(flags | MHD_USE_TLS, 0, NULL, NULL, on_request, h,
                              O3M_HTTPD_LIMITS, MHD_OPTION_HTTPS_MEM_KEY, h->pem_key,
                              MHD_OPTION_HTTPS_MEM_CERT, h->pem_cert,
                              MHD_OPTION_HTTPS_MEM_TRUST, h->pem_ca, MHD_OPTION_END);
  } else {
    h->mhd = MHD_start_daemon(flags, 0, NULL, NULL, on_request, h, O3M_HTTPD_LIMITS,
                              MHD_OPTION_END);
  }
#undef O3M_HTTPD_LIMITS
  if (!h->mhd) {
    close(fd);
    return o3m_err_set(e, O3M_EIO, "metrics listen %s: libmicrohttpd did not start%s",
                       listen_addr, tls ? " (HTTPS: check the certificate and key)" : "");
  }
  if (pthread_create(&h->reaper, NULL, reaper_main, h) != 0) {
    MHD_stop_daemon(h->mhd);
    h->mhd = NULL;
    return o3m_err_set(e, O3M_EIO, "metrics listen %s: cannot start the request timer thread",
                       listen_addr);
  }
  h->reaper_started = 1;
  return O3M_OK;
}

int o3m_httpd_start(o3m_httpd **out, const char *listen_addr, const char *probe_socket,
                    o3m_metrics *metrics, const o3m_httpd_tls *tls, o3m_err *e) {
  *out = NULL;
  if (!metrics) return o3m_err_set(e, O3M_EINVAL, "metrics listen: no registry");
  if (!listen_addr && !probe_socket)
    return o3m_err_set(e, O3M_EINVAL, "metrics listen: neither an address nor a probe socket");
  o3m_httpd *h = o3m_calloc(1, sizeof *h);
  if (!h) return o3m_err_set(e, O3M_ENOMEM, "metrics listen: out of memory");
  h->metrics = metrics;
  if (pthread_mutex_init(&h->probe_lock, NULL) != 0) {
    o3m_free(h);
    return o3m_err_set(e, O3M_ENOMEM, "metrics listen: cannot create a mutex");
  }
  if (pthread_mutex_init(&h->conn_lock, NULL) != 0) {
    pthread_mutex_destroy(&h->probe_lock);
    o3m_free(h);
    return o3m_err_set(e, O3M_ENOMEM, "metrics listen: cannot create a mutex");
  }
  if (pthread_cond_init(&h->conn_cv, NULL) != 0) {
    pthread_mutex_destroy(&h->conn_lock);
    pthread_mutex_destroy(&h->probe_lock);
    o3m_free(h);
    return o3m_err_set(e, O3M_ENOMEM, "metrics listen: cannot create a condition variable");
  }
  int rc = listen_addr ? tcp_start(h, listen_addr, tls, e) : O3M_OK;
  if (rc == O3M_OK && probe_socket)
    rc = o3m_probesock_start(&h->probe_sock, probe_socket, probe_answer, h, e);
  if (rc < 0) {
    o3m_httpd_stop(h);
    return rc;
  }
  *out = h;
  return O3M_OK;
}

int o3m_httpd_port(const o3m_httpd *h) { return h->port; }

int o3m_httpd_is_tls(const o3m_httpd *h) { return h->tls; }

void o3m_httpd_set_ready(o3m_httpd *h, int ready) {
  if (h) h->ready = ready ? 1 : 0;
}

void o3m_httpd_set_probe(o3m_httpd *h, int (*probe)(void *ctx), void *ctx) {
  if (!h) return;
  pthread_mutex_lock(&h->probe_lock); /* waits for a probe in progress */
  h->probe = probe;
  h->probe_ctx = ctx;
  h->probed_at = 0;
  pthread_mutex_unlock(&h->probe_lock);
}

void o3m_httpd_stop(o3m_httpd *h) {
  if (!h) return;
  if (h->reaper_started) {
    pthread_mutex_lock(&h->conn_lock);
    h->stopping = 1;
    pthread_cond_signal(&h->conn_cv);
    pthread_mutex_unlock(&h->conn_lock);
    pthread_join(h->reaper, NULL);
  }
  o3m_probesock_stop(h->probe_sock);
  if (h->mhd) MHD_stop_daemon(h->mhd);
  httpd_free(h);
}
