/* o3m_metrics.h -- counters, gauges and histograms of a daemon, rendered
 * in the Prometheus text exposition format (version 0.0.4).
 *
 * A registry holds metric families (a name, a help line, a kind) and their
 * series (one per label set). A daemon registers the series it updates when
 * it builds its service, keeps the o3m_metric pointers and updates them on
 * its serving threads; the HTTP server (o3m_httpd.h) renders the registry on
 * another thread. Updates are lock-free atomics, so any thread may update
 * any series at any time; registration and rendering take the registry's
 * mutex. Every update function accepts NULL and then does nothing, so a
 * service built without a registry (tests, the in-process simulation) calls
 * them unconditionally.
 *
 * Memory: the registry allocates its fixed tables once, at create
 * (O3M_METRICS_MAX_FAMILIES families, O3M_METRICS_MAX_SERIES series);
 * registering or updating a series allocates nothing. Rendering allocates
 * the text it returns.
 *
 * Kinds. A counter only goes up (o3m_metric_add with v >= 0, or
 * o3m_metric_set with a running total the service keeps itself). A
 * gauge is set or added to. An age is a gauge whose rendered value is the
 * seconds since the last o3m_metric_touch (since registration before the
 * first touch): checkpoint age. A histogram counts observations into fixed
 * buckets given at registration (upper bounds, ascending; +Inf is implied)
 * and keeps their sum and count.
 *
 * What a registry may hold: counts, durations, sizes and ids of keys the
 * federation already publishes (the mask id). Never a feature value, a
 * decision id, an item, a score, a reward or a model entry: the metrics
 * port answers without a client certificate. */
#ifndef O3M_METRICS_H
#define O3M_METRICS_H

#include <stdint.h>

#include "o3m_error.h"

#define O3M_METRICS_MAX_FAMILIES 64
#define O3M_METRICS_MAX_SERIES 512
#define O3M_METRICS_MAX_BUCKETS 16
#define O3M_METRICS_NAME_MAX 64
#define O3M_METRICS_HELP_MAX 192
#define O3M_METRICS_LABELS_MAX 160

typedef enum {
  O3M_METRIC_COUNTER = 0,
  O3M_METRIC_GAUGE,
  O3M_METRIC_AGE,
  O3M_METRIC_HISTOGRAM
} o3m_metric_kind;

typedef struct o3m_metrics o3m_metrics;
typedef struct o3m_metric o3m_metric;

/* A family: its name ([a-zA-Z_:][a-zA-Z0-9_:]*, at most
 * O3M_METRICS_NAME_MAX - 1 characters), one line of help, its kind and,
 * for a histogram, n_bounds (1..O3M_METRICS_MAX_BUCKETS) ascending finite
 * bucket upper bounds. */
typedef struct o3m_metric_spec {
  const char *name;
  const char *help;
  o3m_metric_kind kind;
  const double *bounds;
  int n_bounds;
} o3m_metric_spec;

/* Latency buckets in seconds, 100 us to 10 s, for every RPC and disk
 * histogram of the daemons (one scale, so that dashboards compare them). */
extern const double o3m_metrics_latency_bounds[];
#define O3M_METRICS_LATENCY_N 14

/* A registry with room for the maximum tables. O3M_ENOMEM; *out NULL on
 * failure. */
int o3m_metrics_create(o3m_metrics **out, o3m_err *e);

/* Frees the registry and every series; the caller makes sure no thread
 * still updates or renders it. NULL is accepted. */
void o3m_metrics_destroy(o3m_metrics *m);

/* The series of family spec with the given labels, registered if it is
 * new. labels is the inside of the braces, already in Prometheus form
 * (`method="Mask",code="OK"`), or NULL or "" for none; it is copied. The
 * same name and labels give the same series. Errors, with *out NULL:
 * O3M_EINVAL (a bad name, a label string with a newline or too long, a
 * histogram without valid bounds, or a name already registered with
 * another kind), O3M_EFULL (the tables are full). Thread-safe. */
int o3m_metrics_series(o3m_metrics *m, const o3m_metric_spec *spec, const char *labels,
                       o3m_metric **out, o3m_err *e);

/* Adds v to a counter or gauge (v >= 0 for a counter). */
void o3m_metric_add(o3m_metric *s, double v);
/* Sets a gauge, or a counter to a running total kept elsewhere. */
void o3m_metric_set(o3m_metric *s, double v);
/* Restarts an age series at zero (now). */
void o3m_metric_touch(o3m_metric *s);
/* Counts v into a histogram. */
void o3m_metric_observe(o3m_metric *s, double v);
/* The current value of a counter or gauge (tests; 0 for NULL). */
double o3m_metric_value(const o3m_metric *s);

/* Registers the series of spec with labels if it is new and adds 1 to it:
 * for series whose labels are known only when the event happens (a
 * peer's status code). A series that cannot be registered is skipped
 * silently: metrics never fail the event they count. m may be NULL. */
void o3m_metrics_inc(o3m_metrics *m, const o3m_metric_spec *spec, const char *labels);

/* Sets o3m_mask_info{mask_id="016x hex"} to 1: the mask a party serves
 * with (an id every party and client already sees in Info, not a secret),
 * so a dashboard sees a federation whose parties disagree. m may be NULL. */
void o3m_metrics_mask_id(o3m_metrics *m, uint64_t mask_id);

/* One method's series in the RPC layer's metrics: its OK calls and its
 * latency histogram. The RPC layer keeps one per method, zeroed at server
 * create; o3m_metrics_rpc_observe() fills it at the method's first answered
 * call, so that every later call costs two atomic updates and no lookup.
 * It is touched only where calls are answered (under the server's lock). */
typedef struct o3m_metrics_rpc_method {
  o3m_metric *ok, *duration;
} o3m_metrics_rpc_method;

/* The RPC layer's count of one answered call (o3m_rpc_server_config.metrics):
 * o3m_rpc_calls_total{method,code} and o3m_rpc_duration_seconds{method}.
 * path is the method path, code 0 or the O3M code the call was answered
 * with (its name from o3m_errname labels the series; only the rare failed
 * calls look their series up each time), seconds the time since it arrived.
 * cache is the method's o3m_metrics_rpc_method, or NULL to look every
 * series up. A series that cannot be registered (full tables) is skipped
 * silently: metrics never fail a call. m may be NULL. */
void o3m_metrics_rpc_observe(o3m_metrics *m, o3m_metrics_rpc_method *cache, const char *path,
                             int code, double seconds);

/* What every daemon's /metrics says about the daemon itself:
 * registers o3m_build_info{version,commit,protocol,role,party} = 1 (the
 * release, the git commit cmake was run on or "unknown", the wire protocol,
 * the party's role and name: all public, every peer sees them in Info)
 * and makes every later render end with the process families under the
 * names of Prometheus' own process collector, read from /proc/self at
 * render time: process_cpu_seconds_total, process_resident_memory_bytes,
 * process_virtual_memory_bytes, process_open_fds, process_max_fds and
 * process_start_time_seconds (Unix time). role and party are [A-Za-z0-9_.-]
 * (the config's names), so no label needs escaping. A value /proc does not
 * give is left out of that render. O3M_EINVAL (a name with other
 * characters), the errors of o3m_metrics_series. */
int o3m_metrics_process(o3m_metrics *m, const char *role, const char *party, o3m_err *e);

/* Renders every family in registration order as Prometheus text. *text is
 * malloc'd and NUL-terminated (the caller frees it), *len its length.
 * O3M_ENOMEM. Thread-safe. */
int o3m_metrics_render(o3m_metrics *m, char **text, size_t *len, o3m_err *e);

#endif
