/* o3m_metrics.c -- see o3m_metrics.h. Families and series live in two
 * fixed arrays allocated at create; a series points at its family and the
 * family lists its series in registration order through an index chain, so
 * rendering groups every series under its family's HELP and TYPE lines as
 * the text format requires. Values are doubles kept as their bit patterns
 * in 64-bit atomics (C11 has no atomic double add), updated with a
 * compare-and-swap loop; histogram bucket counts are plain atomic integers.
 * A rendered histogram may be a few observations apart between its buckets,
 * sum and count when it races an update: Prometheus tolerates that. */
#include "o3m_metrics.h"
#include "o3m_alloc.h"

#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "o3m_bytes.h"
#include "o3m_clock.h"
#include "o3m_config.h"
#include "o3m_version.h"

const double o3m_metrics_latency_bounds[O3M_METRICS_LATENCY_N] = {
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
    0.025,  0.05,    0.1,    0.25,  0.5,    1.0,   10.0};

typedef struct family {
  char name[O3M_METRICS_NAME_MAX];
  char help[O3M_METRICS_HELP_MAX];
  o3m_metric_kind kind;
  double bounds[O3M_METRICS_MAX_BUCKETS];
  int n_bounds;
  int first, last; /* series indexes, -1 when none */
} family;

struct o3m_metric {
  family *fam;
  char labels[O3M_METRICS_LABELS_MAX];
  int next;                         /* next series of the family, -1 */
  _Atomic uint64_t value;           /* counter, gauge: a double's bits; age: start ns */
  _Atomic uint64_t sum;             /* histogram: a double's bits */
  _Atomic uint64_t count;           /* histogram */
  _Atomic uint64_t buckets[O3M_METRICS_MAX_BUCKETS];
};

struct o3m_metrics {
  pthread_mutex_t lock;
  family families[O3M_METRICS_MAX_FAMILIES];
  int n_families;
  o3m_metric series[O3M_METRICS_MAX_SERIES];
  int n_series;
  _Atomic int process; /* render the process_* families (o3m_metrics_process) */
};

/* Adds v to the double whose bits a holds. */
static void atomic_add_double(_Atomic uint64_t *a, double v) {
  uint64_t old = atomic_load_explicit(a, memory_order_relaxed);
  while (!atomic_compare_exchange_weak_explicit(a, &old, o3m_double_bits(o3m_bits_double(old) + v),
                                                memory_order_relaxed, memory_order_relaxed)) {
  }
}

int o3m_metrics_create(o3m_metrics **out, o3m_err *e) {
  *out = NULL;
  o3m_metrics *m = o3m_calloc(1, sizeof *m);
  if (!m) return o3m_err_set(e, O3M_ENOMEM, "metrics registry: out of memory");
  if (pthread_mutex_init(&m->lock, NULL) != 0) {
    o3m_free(m);
    return o3m_err_set(e, O3M_ENOMEM, "metrics registry: cannot create its mutex");
  }
  *out = m;
  return O3M_OK;
}

void o3m_metrics_destroy(o3m_metrics *m) {
  if (!m) return;
  pthread_mutex_destroy(&m->lock);
  o3m_free(m);
}

static int name_ok(const char *n) {
  if (!n || !n[0] || strlen(n) >= O3M_METRICS_NAME_MAX) return 0;
  for (const char *p = n; *p; p++) {
    int alpha = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || *p == '_' || *p == ':';
    int digit = *p >= '0' && *p <= '9';
    if (!alpha && !(digit && p != n)) return 0;
  }
  return 1;
}

/* Checks spec and labels before anything is registered. */
static int spec_check(const o3m_metric_spec *spec, const char *labels, o3m_err *e) {
  if (!spec || !name_ok(spec->name))
    return o3m_err_set(e, O3M_EINVAL, "metric name '%s' is not [a-zA-Z_:][a-zA-Z0-9_:]* of at "
                       "most %d characters", spec && spec->name ? spec->name : "(null)",
                       O3M_METRICS_NAME_MAX - 1);
  if (spec->kind < O3M_METRIC_COUNTER || spec->kind > O3M_METRIC_HISTOGRAM)
    return o3m_err_set(e, O3M_EINVAL, "metric %s: unknown kind %d", spec->name, (int)spec->kind);
  if (spec->help && strchr(spec->help, '\n'))
    return o3m_err_set(e, O3M_EINVAL, "metric %s: the help text has a newline", spec->name);
  if (labels && (strlen(labels) >= O3M_METRICS_LABELS_MAX || strchr(labels, '\n')))
    return o3m_err_set(e, O3M_EINVAL, "metric %s: labels longer than %d characters or with a "
                       "newline", spec->name, O3M_METRICS_LABELS_MAX - 1);
  if (spec->kind == O3M_METRIC_HISTOGRAM) {
    if (!spec->bounds || spec->n_bounds < 1 || spec->n_bounds > O3M_METRICS_MAX_BUCKETS)
      return o3m_err_set(e, O3M_EINVAL, "histogram %s: needs 1..%d bucket bounds, has %d",
                         spec->name, O3M_METRICS_MAX_BUCKETS, spec->n_bounds);
    for (int i = 0; i < spec->n_bounds; i++)
      if (!isfinite(spec->bounds[i]) || (i > 0 && spec->bounds[i] <= spec->bounds[i - 1]))
        return o3m_err_set(e, O3M_EINVAL, "histogram %s: bound %d is not finite and above the "
                           "one before", spec->name, i);
  }
  return O3M_OK;
}

/* The family named spec->name into *out, registered if new. O3M_EINVAL
 * when the name has another kind, O3M_EFULL when the table is full. Under
 * the lock. */
static int family_get(o3m_metrics *m, const o3m_metric_spec *spec, family **out, o3m_err *e) {
  for (int i = 0; i < m->n_families; i++) {
    family *f = &m->families[i];
    if (strcmp(f->name, spec->name) != 0) continue;
    if (f->kind != spec->kind)
      return o3m_err_set(e, O3M_EINVAL, "metric %s is already registered with another kind",
                         spec->name);
    *out = f;
    return O3M_OK;
  }
  if (m->n_families == O3M_METRICS_MAX_FAMILIES)
    return o3m_err_set(e, O3M_EFULL, "metric %s: the registry holds %d families already",
                       spec->name, O3M_METRICS_MAX_FAMILIES);
  family *f = &m->families[m->n_families++];
  snprintf(f->name, sizeof f->name, "%s", spec->name);
  snprintf(f->help, sizeof f->help, "%s", spec->help ? spec->help : "");
  f->kind = spec->kind;
  f->n_bounds = spec->kind == O3M_METRIC_HISTOGRAM ? spec->n_bounds : 0;
  for (int i = 0; i < f->n_bounds; i++) f->bounds[i] = spec->bounds[i];
  f->first = f->last = -1;
  *out = f;
  return O3M_OK;
}

int o3m_metrics_series(o3m_metrics *m, const o3m_metric_spec *spec, const char *labels,
                       o3m_metric **out, o3m_err *e) {
  *out = NULL;
  if (!m) return o3m_err_set(e, O3M_EINVAL, "metrics: no registry");
  int rc = spec_check(spec, labels, e);
  if (rc < 0) return rc;
  if (!labels) labels = "";
  pthread_mutex_lock(&m->lock);
  family *f = NULL;
  rc = family_get(m, spec, &f, e);
  if (rc < 0 || !f) {
    pthread_mutex_unlock(&m->lock);
    return rc;
  }
  for (int i = f->first; i >= 0; i = m->series[i].next)
    if (strcmp(m->series[i].labels, labels) == 0) {
      *out = &m->series[i];
      pthread_mutex_unlock(&m->lock);
      return O3M_OK;
    }
  if (m->n_series == O3M_METRICS_MAX_SERIES) {
    pthread_mutex_unlock(&m->lock);
    return o3m_err_set(e, O3M_EFULL, "metric %s: the registry holds %d series already",
                       spec->name, O3M_METRICS_MAX_SERIES);
  }
  int idx = m->n_series++;
  o3m_metric *s = &m->series[idx];
  s->fam = f;
  snprintf(s->labels, sizeof s->labels, "%s", labels);
  s->next = -1;
  if (f->kind == O3M_METRIC_AGE) atomic_store(&s->value, o3m_clock_ns());
  if (f->last >= 0) m->series[f->last].next = idx;
  else f->first = idx;
  f->last = idx;
  *out = s;
  pthread_mutex_unlock(&m->lock);
  return O3M_OK;
}

void o3m_metric_add(o3m_metric *s, double v) {
  if (!s || s->fam->kind == O3M_METRIC_HISTOGRAM || s->fam->kind == O3M_METRIC_AGE) return;
  if (s->fam->kind == O3M_METRIC_COUNTER && !(v >= 0)) return;
  atomic_add_double(&s->value, v);
}

void o3m_metric_set(o3m_metric *s, double v) {
  if (!s || s->fam->kind == O3M_METRIC_HISTOGRAM || s->fam->kind == O3M_METRIC_AGE) return;
  atomic_store_explicit(&s->value, o3m_double_bits(v), memory_order_relaxed);
}

void o3m_metric_touch(o3m_metric *s) {
  if (!s || s->fam->kind != O3M_METRIC_AGE) return;
  atomic_store_explicit(&s->value, o3m_clock_ns(), memory_order_relaxed);
}

void o3m_metric_observe(o3m_metric *s, double v) {
  if (!s || s->fam->kind != O3M_METRIC_HISTOGRAM || isnan(v)) return;
  const family *f = s->fam;
  int b = 0;
  while (b < f->n_bounds && v > f->bounds[b]) b++;
  if (b < f->n_bounds) atomic_fetch_add_explicit(&s->buckets[b], 1, memory_order_relaxed);
  atomic_add_double(&s->sum, v);
  atomic_fetch_add_explicit(&s->count, 1, memory_order_relaxed);
}

double o3m_metric_value(const o3m_metric *s) {
  if (!s) return 0;
  return o3m_bits_double(atomic_load_explicit(&((o3m_metric *)s)->value, memory_order_relaxed));
}

void o3m_metrics_inc(o3m_metrics *m, const o3m_metric_spec *spec, const char *labels) {
  o3m_metric *s;
  if (m && o3m_metrics_series(m, spec, labels, &s, NULL) == O3M_OK) o3m_metric_add(s, 1);
}

void o3m_metrics_mask_id(o3m_metrics *m, uint64_t mask_id) {
  static const o3m_metric_spec mask = {"o3m_mask_info",
                                       "The mask id this party serves with (value always 1)",
                                       O3M_METRIC_GAUGE, NULL, 0};
  char labels[64];
  o3m_metric *s;
  snprintf(labels, sizeof labels, "mask_id=\"%016llx\"", (unsigned long long)mask_id);
  if (m && o3m_metrics_series(m, &mask, labels, &s, NULL) == O3M_OK) o3m_metric_set(s, 1);
}

void o3m_metrics_rpc_observe(o3m_metrics *m, o3m_metrics_rpc_method *cache, const char *path,
                             int code, double seconds) {
  static const o3m_metric_spec calls = {"o3m_rpc_calls_total",
                                        "RPC calls this daemon answered, by method and O3M code",
                                        O3M_METRIC_COUNTER, NULL, 0};
  static const o3m_metric_spec duration = {
      "o3m_rpc_duration_seconds",
      "Time from a call's arrival to its answer (queueing and batching included), by method",
      O3M_METRIC_HISTOGRAM, o3m_metrics_latency_bounds, O3M_METRICS_LATENCY_N};
  if (!m || !path) return;
  o3m_metrics_rpc_method none = {NULL, NULL};
  if (!cache) cache = &none;
  char labels[O3M_METRICS_LABELS_MAX];
  /* Method paths and code names are [A-Za-z0-9./_]: nothing to escape. */
  if (code != 0 || !cache->ok) {
    o3m_metric *s;
    snprintf(labels, sizeof labels, "method=\"%.100s\",code=\"%s\"", path,
             code == 0 ? "OK" : o3m_errname(code));
    if (o3m_metrics_series(m, &calls, labels, &s, NULL) != O3M_OK) s = NULL;
    if (code == 0) cache->ok = s;
    o3m_metric_add(s, 1);
  } else {
    o3m_metric_add(cache->ok, 1);
  }
  if (!cache->duration) {
    snprintf(labels, sizeof labels, "method=\"%.100s\"", path);
    if (o3m_metrics_series(m, &duration, labels, &cache->duration, NULL) != O3M_OK)
      cache->duration = NULL;
  }
  o3m_metric_observe(cache->duration, seconds);
}

/* 1 when s is 1..O3M_CONFIG_MAX_NAME characters of [A-Za-z0-9_.-], the
 * config's names: a label value that needs no escaping. */
static int label_word_ok(const char *s) {
  size_t n = s ? strlen(s) : 0;
  if (n == 0 || n > O3M_CONFIG_MAX_NAME) return 0;
  for (; *s; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
          *s == '_' || *s == '.' || *s == '-'))
      return 0;
  return 1;
}

int o3m_metrics_process(o3m_metrics *m, const char *role, const char *party, o3m_err *e) {
  static const o3m_metric_spec build = {
      "o3m_build_info",
      "The daemon's release, git commit, wire protocol, role and party (value always 1)",
      O3M_METRIC_GAUGE, NULL, 0};
  if (!m) return o3m_err_set(e, O3M_EINVAL, "metrics: no registry");
  if (!label_word_ok(role) || !label_word_ok(party))
    return o3m_err_set(e, O3M_EINVAL, "o3m_build_info: role and party must be 1..64 characters "
                       "from [A-Za-z0-9_.-]");
  char labels[O3M_METRICS_LABELS_MAX];
  int n = snprintf(labels, sizeof labels,
                   "version=\"%s\",commit=\"%s\",protocol=\"%d\",role=\"%s\",party=\"%s\"",
                   O3M_VERSION, O3M_GIT_COMMIT, O3M_VERSION_PROTOCOL, role, party);
  if (n < 0 || (size_t)n >= sizeof labels)
    return o3m_err_set(e, O3M_EINVAL, "o3m_build_info: the labels of party %s do not fit in %d "
                       "characters", party, O3M_METRICS_LABELS_MAX - 1);
  o3m_metric *s;
  int rc = o3m_metrics_series(m, &build, labels, &s, e);
  if (rc < 0) return rc;
  o3m_metric_set(s, 1);
  atomic_store(&m->process, 1);
  return O3M_OK;
}

/* ---------------------------------------------------------------- render */

typedef struct textbuf {
  char *p;
  size_t len, cap;
  int failed;
} textbuf;

static void put(textbuf *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(textbuf *t, const char *fmt, ...) {
  if (t->failed) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->p + t->len, t->cap - t->len, fmt, ap);
    va_end(ap);
    if (n < 0) {
      t->failed = 1;
      return;
    }
    if ((size_t)n < t->cap - t->len) {
      t->len += (size_t)n;
      return;
    }
    size_t cap = 2 * t->cap + (size_t)n;
    char *p = o3m_realloc(t->p, cap);
    if (!p) {
      t->failed = 1;
      return;
    }
    t->p = p;
    t->cap = cap;
  }
}

/* A sample value as the text format spells it. */
static void put_value(textbuf *t, double v) {
  if (isnan(v)) put(t, "NaN");
  else if (isinf(v)) put(t, v > 0 ? "+Inf" : "-Inf");
  else put(t, "%.17g", v);
}

/* `{labels,extra}` or `{labels}` or `{extra}` or nothing. */
static void put_labels(textbuf *t, const char *labels, const char *extra) {
  int a = labels && labels[0], b = extra && extra[0];
  if (!a && !b) return;
  put(t, "{%s%s%s}", a ? labels : "", a && b ? "," : "", b ? extra : "");
}

static void render_series(textbuf *t, const family *f, o3m_metric *s, uint64_t now) {
  if (f->kind == O3M_METRIC_HISTOGRAM) {
    uint64_t cum = 0;
    char le[64];
    for (int b = 0; b < f->n_bounds; b++) {
      cum += atomic_load_explicit(&s->buckets[b], memory_order_relaxed);
      snprintf(le, sizeof le, "le=\"%.17g\"", f->bounds[b]);
      put(t, "%s_bucket", f->name);
      put_labels(t, s->labels, le);
      put(t, " %llu\n", (unsigned long long)cum);
    }
    uint64_t count = atomic_load_explicit(&s->count, memory_order_relaxed);
    if (count < cum) count = cum; /* a racing observe: keep +Inf >= every bucket */
    put(t, "%s_bucket", f->name);
    put_labels(t, s->labels, "le=\"+Inf\"");
    put(t, " %llu\n%s_sum", (unsigned long long)count, f->name);
    put_labels(t, s->labels, NULL);
    put(t, " ");
    put_value(t, o3m_bits_double(atomic_load_explicit(&s->sum, memory_order_relaxed)));
    put(t, "\n%s_count", f->name);
    put_labels(t, s->labels, NULL);
    put(t, " %llu\n", (unsigned long long)count);
    return;
  }
  double v;
  if (f->kind == O3M_METRIC_AGE) {
    uint64_t since = atomic_load_explicit(&s->value, memory_order_relaxed);
    v = now > since ? (double)(now - since) * 1e-9 : 0.0;
  } else {
    v = o3m_bits_double(atomic_load_explicit(&s->value, memory_order_relaxed));
  }
  put(t, "%s", f->name);
  put_labels(t, s->labels, NULL);
  put(t, " ");
  put_value(t, v);
  put(t, "\n");
}

/* One process_* family with one sample. */
static void put_process(textbuf *t, const char *name, const char *type, const char *help,
                        double v) {
  put(t, "# HELP %s %s\n# TYPE %s %s\n%s ", name, help, name, type, name);
  put_value(t, v);
  put(t, "\n");
}

/* The process families from /proc/self (Linux). Fields of
 * /proc/self/stat after the command's closing parenthesis, counted from 3
 * as proc(5) does: utime 14, stime 15, starttime 22 (clock ticks after
 * boot), vsize 23 (bytes), rss 24 (pages). The boot time is /proc/stat's
 * btime. */
static void render_process(textbuf *t) {
  long tick = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
  char buf[1024];
  FILE *f = fopen("/proc/self/stat", "r");
  size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
  if (f) fclose(f);
  buf[n] = '\0';
  const char *q = strrchr(buf, ')');
  unsigned long long v[25] = {0};
  int got = 0;
  if (q && tick > 0) {
    q++;
    for (int field = 3; field <= 24 && *q; field++) {
      while (*q == ' ') q++;
      char *end;
      v[field] = strtoull(q, &end, 10);
      if (end == q) v[field] = 0; /* the state letter, field 3 */
      while (*end && *end != ' ') end++;
      q = end;
      got = field;
    }
  }
  if (got == 24) {
    put_process(t, "process_cpu_seconds_total", "counter",
                "Total user and system CPU time spent in seconds",
                (double)(v[14] + v[15]) / (double)tick);
    put_process(t, "process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes",
                (double)v[23]);
    if (page > 0)
      put_process(t, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes",
                  (double)v[24] * (double)page);
    unsigned long long btime = 0;
    f = fopen("/proc/stat", "r");
    char line[256];
    while (f && fgets(line, sizeof line, f))
      if (sscanf(line, "btime %llu", &btime) == 1) break;
    if (f) fclose(f);
    if (btime > 0)
      put_process(t, "process_start_time_seconds", "gauge",
                  "Start time of the process since unix epoch in seconds",
                  (double)btime + (double)v[22] / (double)tick);
  }
  DIR *d = opendir("/proc/self/fd");
  if (d) {
    long fds = 0;
    for (struct dirent *de; (de = readdir(d));) fds += de->d_name[0] != '.';
    closedir(d);
    put_process(t, "process_open_fds", "gauge", "Number of open file descriptors.",
                (double)(fds > 0 ? fds - 1 : 0)); /* less the one opendir holds */
  }
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
    put_process(t, "process_max_fds", "gauge", "Maximum number of open file descriptors.",
                (double)rl.rlim_cur);
}

int o3m_metrics_render(o3m_metrics *m, char **text, size_t *len, o3m_err *e) {
  static const char *types[] = {"counter", "gauge", "gauge", "histogram"};
  *text = NULL;
  *len = 0;
  textbuf t = {o3m_malloc(4096), 0, 4096, 0};
  if (!t.p) return o3m_err_set(e, O3M_ENOMEM, "metrics: out of memory rendering");
  t.p[0] = '\0';
  uint64_t now = o3m_clock_ns();
  pthread_mutex_lock(&m->lock);
  for (int i = 0; i < m->n_families; i++) {
    const family *f = &m->families[i];
    if (f->first < 0) continue;
    put(&t, "# HELP %s %s\n# TYPE %s %s\n", f->name, f->help, f->name, types[f->kind]);
    for (int j = f->first; j >= 0; j = m->series[j].next) render_series(&t, f, &m->series[j], now);
  }
  pthread_mutex_unlock(&m->lock);
  if (atomic_load(&m->process)) render_process(&t);
  if (t.failed) {
    o3m_free(t.p);
    return o3m_err_set(e, O3M_ENOMEM, "metrics: out of memory rendering");
  }
  *text = t.p;
  *len = t.len;
  return O3M_OK;
}
