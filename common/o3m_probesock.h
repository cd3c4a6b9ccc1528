/* o3m_probesock.h -- a daemon's health probes on a unix socket, for the
 * local orchestrator (systemd, a kubelet exec probe, a monitoring agent on
 * the host), apart from the metrics port (o3m_httpd.h).
 *
 * Why a socket of its own (so that no flood can blind the probes): the metrics port is TCP and
 * answers anyone who reaches it before any certificate is shown, within
 * connection limits (O3M_HTTPD_MAX_CONNECTIONS in all, a few per address).
 * Partial TLS handshakes from 64 local addresses, held open and reconnected
 * whenever cut, kept those limits full: /healthz answered 0 of 39 probes
 * within 1 s, and an orchestrator that probes /readyz there would have
 * restarted a healthy daemon. Who may connect to a unix socket is decided
 * by the file system before the daemon sees a byte: the socket is made
 * with mode 0660 (the daemon's user and group), and the directory it is
 * put in (systemd's RuntimeDirectory=, mode 0750) keeps everyone else out.
 * So no flood on the metrics port, and none from another user, reaches it.
 *
 * The protocol is the least HTTP/1.0 an orchestrator's probe speaks (curl
 * --unix-socket, or any HTTP client over a unix socket): one request per
 * connection, "METHOD PATH HTTP/1.x" and headers up to a blank line, at
 * most O3M_PROBESOCK_REQUEST_MAX bytes; the answer, with Connection: close,
 * is what answer() returns for GET and HEAD (HEAD without the body); any
 * other method is 405, anything that does not parse 400. No body is read,
 * no header is interpreted, nothing is kept between connections.
 *
 * Bounds: one thread polls at most O3M_PROBESOCK_MAX_CONNECTIONS
 * connections; each must deliver its request within O3M_PROBESOCK_REQUEST_MS
 * of being accepted or is closed (a local probe sends it at once; dribbling
 * bytes does not extend the time). A request already there when the
 * connection is accepted, as a probe's usually is, is answered at once
 * without taking a slot. The mode keeps other users out, but every process
 * of the daemon's own group may connect, so the slots are shared out by
 * peer process (SO_PEERCRED): one process holds at most
 * O3M_PROBESOCK_PER_PEER of them, its own oldest making room for its
 * newest. When every slot is taken, a new connection closes one of the
 * process that holds the most: the oldest that has had a round of the
 * poll to send its request, or, when all were taken in by this accept
 * round, the oldest of a process that holds more than the new one's would
 * (a probe, alone from its process, goes after the connections of every
 * process that holds more); with none such the new one is closed. Every
 * round empties the pending-connection queue of listen()
 * (O3M_PROBESOCK_BACKLOG, more connections than a flood of a few hundred
 * held ones), so that a flood cannot keep it full and have the kernel
 * refuse a probe's connect. The newest caller is the one an orchestrator
 * is waiting for, and an old one that has not sent its request is not a
 * probe. Without these rules 8 processes of the daemon's own group with
 * 32 held or dribbling connections each, reopened as soon as closed, left
 * 6 of 28 probes answered within 1 s, most refused at connect with the
 * queue full (eval/bench/attack-probes.sh).
 *
 * Threads: answer(ctx, path) runs on the socket's thread, one at a time;
 * it must be thread-safe against the rest of the daemon and should return
 * quickly (the /readyz probe of o3m_httpd is cached and bounded by 1 s). */
#ifndef O3M_PROBESOCK_H
#define O3M_PROBESOCK_H

#include "o3m_error.h"

#define O3M_PROBESOCK_MAX_CONNECTIONS 16
#define O3M_PROBESOCK_REQUEST_MS 500
/* Slots one peer process holds at once: an agent may probe a few paths at
 * the same time, and one process can fill no more than a quarter. */
#define O3M_PROBESOCK_PER_PEER 4
#define O3M_PROBESOCK_REQUEST_MAX 1024
#define O3M_PROBESOCK_BACKLOG 1024
/* The socket file's mode: the daemon's user and group. */
#define O3M_PROBESOCK_MODE 0660

typedef struct o3m_probesock o3m_probesock;

/* What a probe gets for path ("/healthz"): the HTTP status (200, 404, 503)
 * and the body, a static string. */
typedef int (*o3m_probesock_answer_fn)(void *ctx, const char *path, const char **body);

/* Creates the socket at path (a stale socket file that nobody listens on
 * is replaced; the directory must exist), sets its mode to
 * O3M_PROBESOCK_MODE and starts serving. Errors: O3M_EINVAL ("probe socket
 * PATH: ..." for a path that is empty, too long for a unix socket, or names
 * something that is not a socket), O3M_EEXISTS (another process listens on
 * it), O3M_EIO (the socket cannot be made, bound or listened on; the
 * message names the call and its errno), O3M_ENOMEM. *out is NULL on
 * failure and nothing is left behind. */
int o3m_probesock_start(o3m_probesock **out, const char *path, o3m_probesock_answer_fn answer,
                        void *ctx, o3m_err *e);

/* Stops the thread, closes every connection, removes the socket file (if it
 * is still the one made here) and frees p. NULL is accepted. */
void o3m_probesock_stop(o3m_probesock *p);

#endif
