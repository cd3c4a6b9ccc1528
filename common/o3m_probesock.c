/* o3m_probesock.c -- see o3m_probesock.h. One thread polls the listening
 * socket, a pipe that wakes it for the stop, and a fixed table of
 * connections; every descriptor is non-blocking, so a caller that stops
 * reading or writing costs a slot until its deadline, never the thread. */
#include "o3m_probesock.h"
#include "o3m_alloc.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

typedef struct probe_conn {
  int fd; /* -1: free */
  pid_t pid; /* the peer process (SO_PEERCRED); 0 when unknown */
  unsigned long long round; /* the accept round that took it in */
  long long accepted_ms;
  size_t len;
  char buf[O3M_PROBESOCK_REQUEST_MAX + 1];
} probe_conn;

struct o3m_probesock {
  char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
  dev_t dev;
  ino_t ino;
  int listen_fd;
  int wake[2]; /* the stop writes a byte to wake[1] */
  o3m_probesock_answer_fn answer;
  void *ctx;
  pthread_t thread;
  unsigned long long round; /* accept rounds so far */
  probe_conn conns[O3M_PROBESOCK_MAX_CONNECTIONS];
};

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void conn_close(probe_conn *c) {
  if (c->fd >= 0) close(c->fd);
  c->fd = -1;
  c->len = 0;
}

/* Writes the whole answer, best effort: it is a few hundred bytes into an
 * empty socket buffer, so a single non-blocking send takes it unless the
 * caller is gone. */
static void send_answer(int fd, int status, const char *body, int head) {
  const char *reason = status == 200   ? "OK"
                       : status == 400 ? "Bad Request"
                       : status == 404 ? "Not Found"
                       : status == 405 ? "Method Not Allowed"
                                       : "Service Unavailable";
  char out[512];
  size_t blen = strlen(body);
  int n = snprintf(out, sizeof out,
                   "HTTP/1.0 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\n"
                   "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
                   status, reason, blen, head ? "" : body);
  if (n < 0 || (size_t)n >= sizeof out) return;
  (void)!send(fd, out, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* Answers the request in c->buf once its header block is complete: 1 when
 * the connection is done (answered or refused), 0 to wait for more. */
static int serve_request(o3m_probesock *p, probe_conn *c) {
  c->buf[c->len] = '\0';
  int full = c->len >= O3M_PROBESOCK_REQUEST_MAX;
  if (!strstr(c->buf, "\r\n\r\n") && !strstr(c->buf, "\n\n")) {
    if (!full) return 0;
    send_answer(c->fd, 400, "request too large\n", 0);
    return 1;
  }
  char method[8], path[128], version[16];
  if (sscanf(c->buf, "%7s %127s %15s", method, path, version) != 3 ||
      strncmp(version, "HTTP/1.", 7) != 0) {
    send_answer(c->fd, 400, "bad request\n", 0);
    return 1;
  }
  int head = strcmp(method, "HEAD") == 0;
  if (!head && strcmp(method, "GET") != 0) {
    send_answer(c->fd, 405, "only GET and HEAD\n", 0);
    return 1;
  }
  const char *body = "not found\n";
  int status = p->answer(p->ctx, path, &body);
  send_answer(c->fd, status, body, head);
  return 1;
}

/* The process at the other end of fd, 0 when the kernel does not say. */
static pid_t peer_pid(int fd) {
  struct ucred cred;
  socklen_t len = sizeof cred;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || len != sizeof cred) return 0;
  return cred.pid;
}

/* The slot a new connection from pid takes, closing the connection that
 * held it (o3m_probesock.h, "Bounds"): with O3M_PROBESOCK_PER_PEER already
 * open from pid, the oldest of its own; else a free slot; else the
 * connection of the peer that holds the most, one taken in by an earlier
 * round (it had a poll to send its request) before one of this round, the
 * oldest first; one of this round only when its peer holds more than pid
 * would with this one.
 * NULL when there is none (the new connection is then closed). */
static probe_conn *slot_for(o3m_probesock *p, pid_t pid) {
  probe_conn *own = NULL, *free_slot = NULL;
  int n_own = 0;
  for (int i = 0; i < O3M_PROBESOCK_MAX_CONNECTIONS; i++) {
    probe_conn *c = &p->conns[i];
    if (c->fd < 0) {
      if (!free_slot) free_slot = c;
    } else if (c->pid == pid) {
      n_own++;
      if (!own || c->accepted_ms < own->accepted_ms) own = c;
    }
  }
  probe_conn *slot = n_own >= O3M_PROBESOCK_PER_PEER ? own : free_slot;
  int best_held = 0, best_read = 0;
  if (!slot) {
    for (int i = 0; i < O3M_PROBESOCK_MAX_CONNECTIONS; i++) {
      probe_conn *c = &p->conns[i];
      int read = c->round != p->round, held = 0; /* read: had a poll */
      for (int j = 0; j < O3M_PROBESOCK_MAX_CONNECTIONS; j++)
        held += p->conns[j].fd >= 0 && p->conns[j].pid == c->pid;
      if (!read && held <= n_own + 1) continue; /* not read yet, and its peer has no more */
      if (!slot || held > best_held ||
          (held == best_held &&
           (read > best_read || (read == best_read && c->accepted_ms < slot->accepted_ms)))) {
        slot = c;
        best_held = held;
        best_read = read;
      }
    }
  }
  if (slot) conn_close(slot);
  return slot;
}

/* Accepts the pending connections. A request that is already there (a
 * probe sends its request right after connecting, so it is there by the
 * time the connection leaves the backlog) is answered at once, without a
 * slot; another connection waits in a slot (slot_for) for the rest of its
 * request, or is closed when every slot holds one not read yet. So the
 * backlog is emptied every round and a flood cannot keep it full. */
static void accept_all(o3m_probesock *p) {
  p->round++;
  /* At most a backlog's worth per round, so that callers reconnecting as
   * fast as they can do not keep the thread from reading requests. */
  for (int k = 0; k < O3M_PROBESOCK_BACKLOG; k++) {
    int fd = accept4(p->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return; /* EAGAIN, or an error the next poll retries */
    probe_conn c = {.fd = fd, .pid = peer_pid(fd), .round = p->round, .accepted_ms = now_ms()};
    ssize_t got = recv(fd, c.buf, O3M_PROBESOCK_REQUEST_MAX, 0);
    if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) {
      close(fd);
      continue;
    }
    if (got > 0) {
      c.len = (size_t)got;
      if (serve_request(p, &c)) {
        close(fd);
        continue;
      }
    }
    probe_conn *slot = slot_for(p, c.pid);
    if (slot)
      *slot = c;
    else
      close(fd);
  }
}

static void *probesock_main(void *arg) {
  o3m_probesock *p = arg;
  struct pollfd pfd[2 + O3M_PROBESOCK_MAX_CONNECTIONS];
  int owner[O3M_PROBESOCK_MAX_CONNECTIONS];
  for (;;) {
    long long now = now_ms();
    int timeout = -1, n = 2;
    pfd[0] = (struct pollfd){p->wake[0], POLLIN, 0};
    pfd[1] = (struct pollfd){p->listen_fd, POLLIN, 0};
    for (int i = 0; i < O3M_PROBESOCK_MAX_CONNECTIONS; i++) {
      probe_conn *c = &p->conns[i];
      if (c->fd < 0) continue;
      long long left = c->accepted_ms + O3M_PROBESOCK_REQUEST_MS - now;
      if (left <= 0) {
        conn_close(c); /* no request in time */
        continue;
      }
      if (timeout < 0 || left < timeout) timeout = (int)left;
      owner[n - 2] = i;
      pfd[n++] = (struct pollfd){c->fd, POLLIN, 0};
    }
    if (poll(pfd, (nfds_t)n, timeout) < 0) {
      if (errno == EINTR) continue;
      struct timespec pause = {0, 10 * 1000 * 1000};
      nanosleep(&pause, NULL); /* not expected; never spin */
      continue;
    }
    if (pfd[0].revents) return NULL;
    for (int k = 2; k < n; k++) {
      if (!pfd[k].revents) continue;
      probe_conn *c = &p->conns[owner[k - 2]];
      ssize_t got = recv(c->fd, c->buf + c->len, O3M_PROBESOCK_REQUEST_MAX - c->len, 0);
      if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) {
        conn_close(c);
        continue;
      }
      if (got > 0) c->len += (size_t)got;
      if (serve_request(p, c)) conn_close(c);
    }
    if (pfd[1].revents) accept_all(p);
  }
}

/* Makes room for the socket at path: nothing there, or a stale socket
 * that nobody listens on (removed). */
static int clear_path(const char *path, o3m_err *e) {
  struct stat st;
  if (lstat(path, &st) != 0) {
    if (errno == ENOENT) return O3M_OK;
    return o3m_err_set(e, O3M_EIO, "probe socket %s: %s", path, strerror(errno));
  }
  if (!S_ISSOCK(st.st_mode))
    return o3m_err_set(e, O3M_EINVAL, "probe socket %s: exists and is not a socket; refusing "
                       "to replace it", path);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  memcpy(sa.sun_path, path, strlen(path) + 1);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return o3m_err_set(e, O3M_EIO, "probe socket %s: socket: %s", path, strerror(errno));
  int live = connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
  close(fd);
  if (live)
    return o3m_err_set(e, O3M_EEXISTS, "probe socket %s: another process listens on it", path);
  if (unlink(path) != 0 && errno != ENOENT)
    return o3m_err_set(e, O3M_EIO, "probe socket %s: cannot remove the stale socket: %s", path,
                       strerror(errno));
  return O3M_OK;
}

/* Binds and listens on path with O3M_PROBESOCK_MODE; the file's identity
 * goes to p so that the stop removes only its own file. */
static int bind_path(o3m_probesock *p, o3m_err *e) {
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  memcpy(sa.sun_path, p->path, strlen(p->path) + 1);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  const char *call = "socket";
  struct stat st;
  if (fd >= 0 && (call = "bind", bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0)) {
    if ((call = "chmod", chmod(p->path, O3M_PROBESOCK_MODE) == 0) &&
        (call = "stat", stat(p->path, &st) == 0) &&
        (call = "listen", listen(fd, O3M_PROBESOCK_BACKLOG) == 0)) {
      p->listen_fd = fd;
      p->dev = st.st_dev;
      p->ino = st.st_ino;
      return O3M_OK;
    }
    int err = errno;
    unlink(p->path);
    errno = err;
  }
  int err = errno;
  if (fd >= 0) close(fd);
  return o3m_err_set(e, O3M_EIO, "probe socket %s: %s: %s", p->path, call, strerror(err));
}

int o3m_probesock_start(o3m_probesock **out, const char *path, o3m_probesock_answer_fn answer,
                        void *ctx, o3m_err *e) {
  *out = NULL;
  if (!answer) return o3m_err_set(e, O3M_EINVAL, "probe socket: no answer function");
  size_t plen = path ? strlen(path) : 0;
  o3m_probesock probe_tmp;
  if (plen == 0 || plen >= sizeof probe_tmp.path)
    return o3m_err_set(e, O3M_EINVAL, "probe socket '%s': %s", path ? path : "(null)",
                       plen == 0 ? "empty path"
                                 : "longer than a unix socket path may be (107 bytes)");
  o3m_probesock *p = o3m_calloc(1, sizeof *p);
  if (!p) return o3m_err_set(e, O3M_ENOMEM, "probe socket: out of memory");
  memcpy(p->path, path, plen + 1);
  p->answer = answer;
  p->ctx = ctx;
  p->listen_fd = p->wake[0] = p->wake[1] = -1;
  for (int i = 0; i < O3M_PROBESOCK_MAX_CONNECTIONS; i++) p->conns[i].fd = -1;
  int rc = clear_path(path, e);
  if (rc == O3M_OK) rc = bind_path(p, e);
  if (rc == O3M_OK && pipe2(p->wake, O_CLOEXEC) != 0)
    rc = o3m_err_set(e, O3M_EIO, "probe socket %s: pipe: %s", path, strerror(errno));
  if (rc == O3M_OK && pthread_create(&p->thread, NULL, probesock_main, p) != 0)
    rc = o3m_err_set(e, O3M_EIO, "probe socket %s: cannot start its thread", path);
  if (rc != O3M_OK) {
    if (p->listen_fd >= 0) {
      close(p->listen_fd);
      unlink(p->path);
    }
    if (p->wake[0] >= 0) close(p->wake[0]);
    if (p->wake[1] >= 0) close(p->wake[1]);
    o3m_free(p);
    return rc;
  }
  *out = p;
  return O3M_OK;
}

void o3m_probesock_stop(o3m_probesock *p) {
  if (!p) return;
  (void)!write(p->wake[1], "x", 1);
  pthread_join(p->thread, NULL);
  for (int i = 0; i < O3M_PROBESOCK_MAX_CONNECTIONS; i++) conn_close(&p->conns[i]);
  close(p->listen_fd);
  close(p->wake[0]);
  close(p->wake[1]);
  /* Only our own file: a successor may have replaced it meanwhile. */
  struct stat st;
  if (lstat(p->path, &st) == 0 && st.st_dev == p->dev && st.st_ino == p->ino) unlink(p->path);
  o3m_free(p);
}
