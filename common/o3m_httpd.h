/* o3m_httpd.h -- a daemon's metrics and health port, served by
 * libmicrohttpd on its own thread, apart from the gRPC port: HTTPS with the
 * party's own certificate, or plain HTTP for a daemon started with
 * --insecure.
 *
 *   GET /metrics  200, the registry in the Prometheus text format, to a
 *                 caller whose client certificate chains to the federation
 *                 CA (for TLS client use) and names one of the allowed
 *                 clients ([federation] metrics_clients, default
 *                 "monitor"); 403 to anyone else. Over plain HTTP: to anyone
 *   GET /healthz  200 "ok": the process is alive and its HTTP thread runs
 *   GET /readyz   200 "ready" once the daemon serves (o3m_httpd_set_ready)
 *                 and its service port answers (o3m_httpd_set_probe),
 *                 503 "not ready" before that (the AP waiting for its mask
 *                 and its passive parties, a PP for its block), after a
 *                 stop began, and while the probe fails (a daemon out of
 *                 file descriptors accepts no gRPC connection)
 *
 * HEAD is answered like GET; any other method gets 405, any other path 404.
 * The probes need no client certificate: an orchestrator's probe cannot
 * present the federation's certificates. /metrics does: its counters and
 * histograms show when each call and each reward arrived, which a passive
 * party's operator could match with the MaskBatch calls
 * it served (SECURITY.md "Metrics"). What it reveals is otherwise what
 * o3m_metrics.h allows: counts, durations, the mask id, readiness; no
 * feature, id, item, score, reward or model value. It listens on 127.0.0.1
 * unless told otherwise.
 *
 * Since the port takes a TLS handshake from anyone who reaches it before
 * any certificate is shown, anyone can also fill its connection limits
 * with handshakes that never finish, blinding the probes: the probe socket
 * (o3m_probesock.h, o3m_httpd_start's probe_socket), answered by its own
 * thread from the same ready flag and probe, is the probe path no such
 * flood reaches, and the one an orchestrator on the host should use.
 *
 * Threads: libmicrohttpd's one internal polling thread answers every
 * request (at most O3M_HTTPD_MAX_CONNECTIONS at a time and
 * O3M_HTTPD_MAX_PER_ADDRESS from one address, each dropped after
 * O3M_HTTPD_TIMEOUT_S idle seconds, or once a request, TLS handshake
 * included, has taken O3M_HTTPD_REQUEST_MAX_S: a reaper thread checks once
 * a second), reading the registry under its lock
 * and the ready flag atomically and the probe under its own lock;
 * o3m_httpd_set_ready may be called from any thread and from a signal
 * handler. */
#ifndef O3M_HTTPD_H
#define O3M_HTTPD_H

#include "o3m_error.h"
#include "o3m_limits.h"
#include "o3m_metrics.h"

#define O3M_HTTPD_MAX_CONNECTIONS O3M_MAX_HTTPD_CONNECTIONS
#define O3M_HTTPD_TIMEOUT_S 5
/* Connections at a time from one address, and how long one request may
 * take from the connection's start (or the end of its previous request)
 * to its answer however busy the client keeps it: slowloris. */
#define O3M_HTTPD_MAX_PER_ADDRESS O3M_MAX_HTTPD_PER_ADDRESS
#define O3M_HTTPD_REQUEST_MAX_S O3M_MAX_HTTPD_REQUEST_S
/* How long /readyz reuses the probe's last answer. */
#define O3M_HTTPD_PROBE_CACHE_MS 1500
/* The default listen address's host. */
#define O3M_HTTPD_DEFAULT_HOST "127.0.0.1"

typedef struct o3m_httpd o3m_httpd;

/* HTTPS for the port: the federation CA (the trust for client
 * certificates), the party's certificate and key (PEM files), and clients,
 * the certificate names allowed to read /metrics, comma-separated. */
typedef struct o3m_httpd_tls {
  const char *ca_file, *cert_file, *key_file;
  const char *clients;
} o3m_httpd_tls;

/* Binds listen ("HOST:PORT", "[V6]:PORT" or ":PORT" for 127.0.0.1; port 0
 * picks a free one) and starts serving metrics (borrowed: it must outlive
 * the server) not ready, over HTTPS with tls, or plain HTTP with tls NULL.
 * The PEM texts are read here and kept until o3m_httpd_stop (the key wiped
 * then). With probe_socket, /healthz and /readyz are also answered on a
 * unix socket at that path (o3m_probesock.h), from the same ready flag and
 * probe; listen may then be NULL (no TCP port, tls unused). Errors:
 * O3M_EINVAL (both NULL, listen is not HOST:PORT, the host does not
 * resolve, a TLS file missing from tls), O3M_ETLS ("metrics listen: key
 * PATH: CAUSE" for a file that cannot be read, crypto/o3m_pem.h),
 * O3M_EPERM (a key file others may read, which the daemon's start-up
 * check of its TLS files refuses first), O3M_EIO ("metrics listen
 * ADDR: CAUSE" when the address cannot be bound, or the server does not
 * start), o3m_probesock_start's errors ("probe socket PATH: ..."),
 * O3M_ENOMEM. *out is NULL on failure and nothing listens. */
int o3m_httpd_start(o3m_httpd **out, const char *listen, const char *probe_socket,
                    o3m_metrics *metrics, const o3m_httpd_tls *tls, o3m_err *e);

/* 1 when the port speaks HTTPS. */
int o3m_httpd_is_tls(const o3m_httpd *h);

/* The bound TCP port (0 without one). */
int o3m_httpd_port(const o3m_httpd *h);

/* Sets what /readyz answers (nonzero: 200). Async-signal-safe. NULL is
 * accepted. */
void o3m_httpd_set_ready(o3m_httpd *h, int ready);

/* Makes a /readyz of a ready daemon also ask probe(ctx) (nonzero: the
 * service answers), at most once per O3M_HTTPD_PROBE_CACHE_MS: the answer
 * is cached, so a flood of probes costs one call per period. The probe
 * runs on the HTTP thread or the probe socket's (one at a time), which
 * answers nothing else meanwhile: bound its time (the daemons' health call
 * has a 1 s deadline). probe NULL removes
 * it; either way this waits for a probe in progress, so ctx may be freed
 * once it returns. Not async-signal-safe. NULL h is accepted. */
void o3m_httpd_set_probe(o3m_httpd *h, int (*probe)(void *ctx), void *ctx);

/* Stops the thread, closes the port and frees h. NULL is accepted. */
void o3m_httpd_stop(o3m_httpd *h);

#endif
