/* o3m_rpc_listen.c -- a server's listen address checked before gRPC binds
 * it, and the message that says why a bind failed (see o3m_rpc_impl.h). */
#include "o3m_rpc_impl.h"

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
int o3m_rpc__unix_check_free(const char *addr, o3m_err *e) {
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
int o3m_rpc__listen_error(const char *addr, o3m_err *e) {
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
