/* o3m_httpd.h -- a daemon's metrics and health port: plain HTTP, served by
 * libmicrohttpd on its own thread, apart from the gRPC port.
 *
 *   GET /metrics  200, the registry in the Prometheus text format
 *   GET /healthz  200 "ok": the process is alive and its HTTP thread runs
 *   GET /readyz   200 "ready" once the daemon serves (o3m_httpd_set_ready)
 *                 and its service port answers (o3m_httpd_set_probe),
 *                 503 "not ready" before that (the AP waiting for its mask
 *                 and its passive parties, a PP for its block), after a
 *                 stop began, and while the probe fails (a daemon out of
 *                 file descriptors accepts no gRPC connection, audit
 *                 finding 2)
 *
 * HEAD is answered like GET; any other method gets 405, any other path 404.
 * No client certificate is asked for: this port is for an orchestrator's
 * probes and a Prometheus scraper, which cannot present the federation's
 * certificates. What it reveals is what o3m_metrics.h allows: counts,
 * durations, the mask id, readiness; no feature, id, item, score, reward or
 * model value. It listens on 127.0.0.1 unless told otherwise; bind it to an
 * address that only the monitoring network reaches.
 *
 * Threads: libmicrohttpd's one internal polling thread answers every
 * request (at most O3M_HTTPD_MAX_CONNECTIONS at a time, each dropped after
 * O3M_HTTPD_TIMEOUT_S idle seconds), reading the registry under its lock
 * and the ready flag atomically and the probe under its own lock;
 * o3m_httpd_set_ready may be called from any thread and from a signal
 * handler. */
#ifndef O3M_HTTPD_H
#define O3M_HTTPD_H

#include "o3m_error.h"
#include "o3m_metrics.h"

#define O3M_HTTPD_MAX_CONNECTIONS 16
#define O3M_HTTPD_TIMEOUT_S 5
/* How long /readyz reuses the probe's last answer. */
#define O3M_HTTPD_PROBE_CACHE_MS 1500
/* The default listen address's host. */
#define O3M_HTTPD_DEFAULT_HOST "127.0.0.1"

typedef struct o3m_httpd o3m_httpd;

/* Binds listen ("HOST:PORT", "[V6]:PORT" or ":PORT" for 127.0.0.1; port 0
 * picks a free one) and starts serving metrics (borrowed: it must outlive
 * the server) not ready. Errors: O3M_EINVAL (listen is not HOST:PORT, the
 * host does not resolve), O3M_EIO ("metrics listen ADDR: CAUSE" when the
 * address cannot be bound, or the server thread does not start),
 * O3M_ENOMEM. *out is NULL on failure and nothing listens. */
int o3m_httpd_start(o3m_httpd **out, const char *listen, o3m_metrics *metrics, o3m_err *e);

/* The bound TCP port. */
int o3m_httpd_port(const o3m_httpd *h);

/* Sets what /readyz answers (nonzero: 200). Async-signal-safe. NULL is
 * accepted. */
void o3m_httpd_set_ready(o3m_httpd *h, int ready);

/* Makes a /readyz of a ready daemon also ask probe(ctx) (nonzero: the
 * service answers), at most once per O3M_HTTPD_PROBE_CACHE_MS: the answer
 * is cached, so a flood of probes costs one call per period. The probe
 * runs on the HTTP thread, which answers nothing else meanwhile: bound its
 * time (the daemons' health call has a 1 s deadline). probe NULL removes
 * it; either way this waits for a probe in progress, so ctx may be freed
 * once it returns. Not async-signal-safe. NULL h is accepted. */
void o3m_httpd_set_probe(o3m_httpd *h, int (*probe)(void *ctx), void *ctx);

/* Stops the thread, closes the port and frees h. NULL is accepted. */
void o3m_httpd_stop(o3m_httpd *h);

#endif
