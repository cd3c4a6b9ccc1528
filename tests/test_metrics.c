/* test_metrics.c -- the metrics registry (common/o3m_metrics.h): series
 * register once, values move, histograms are cumulative, the rendered text
 * groups a family's series under one HELP and TYPE, and bad registrations
 * are refused with a message and change nothing. The probe socket
 * (common/o3m_probesock.h, through o3m_httpd): the two probes and nothing
 * else, answered past a flood of silent connections, and a path that is
 * not its own refused. The HTTP port and promtool run end to end in
 * ops_e2e.sh, the probes under a flood of the port in probe_e2e.sh. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "o3m_config.h"
#include "o3m_httpd.h"
#include "o3m_metrics.h"
#include "o3m_probesock.h"
#include "o3m_version.h"

static o3m_metrics *new_registry(void) {
  o3m_metrics *m;
  cr_assert_eq(o3m_metrics_create(&m, NULL), O3M_OK);
  return m;
}

static char *render(o3m_metrics *m) {
  char *text;
  size_t len;
  cr_assert_eq(o3m_metrics_render(m, &text, &len, NULL), O3M_OK);
  cr_assert_eq(strlen(text), len);
  return text;
}

static const o3m_metric_spec calls = {"t_calls_total", "calls", O3M_METRIC_COUNTER, NULL, 0};

Test(metrics, a_series_registers_once_and_counts) {
  o3m_metrics *m = new_registry();
  o3m_metric *a, *b, *c;
  cr_assert_eq(o3m_metrics_series(m, &calls, "code=\"OK\"", &a, NULL), O3M_OK);
  cr_assert_eq(o3m_metrics_series(m, &calls, "code=\"OK\"", &b, NULL), O3M_OK);
  cr_assert_eq(a, b, "the same labels must give the same series");
  cr_assert_eq(o3m_metrics_series(m, &calls, "code=\"EIO\"", &c, NULL), O3M_OK);
  cr_assert_neq(a, c);
  o3m_metric_add(a, 2);
  o3m_metric_add(a, -1); /* a counter never goes down */
  o3m_metrics_inc(m, &calls, "code=\"EIO\"");
  cr_assert_float_eq(o3m_metric_value(a), 2.0, 0);
  cr_assert_float_eq(o3m_metric_value(c), 1.0, 0);
  char *t = render(m);
  cr_assert_not_null(strstr(t, "# HELP t_calls_total calls\n# TYPE t_calls_total counter\n"
                               "t_calls_total{code=\"OK\"} 2\nt_calls_total{code=\"EIO\"} 1\n"),
                     "got:\n%s", t);
  free(t);
  o3m_metrics_destroy(m);
}

Test(metrics, histogram_buckets_are_cumulative_with_sum_and_count) {
  static const double bounds[] = {0.1, 1.0};
  static const o3m_metric_spec h = {"t_seconds", "latency", O3M_METRIC_HISTOGRAM, bounds, 2};
  o3m_metrics *m = new_registry();
  o3m_metric *s;
  cr_assert_eq(o3m_metrics_series(m, &h, NULL, &s, NULL), O3M_OK);
  o3m_metric_observe(s, 0.05);
  o3m_metric_observe(s, 0.1); /* on the bound: le="0.1" */
  o3m_metric_observe(s, 0.5);
  o3m_metric_observe(s, 7.0);
  char *t = render(m);
  cr_assert_not_null(strstr(t, "# TYPE t_seconds histogram\n"
                               "t_seconds_bucket{le=\"0.10000000000000001\"} 2\n"
                               "t_seconds_bucket{le=\"1\"} 3\n"
                               "t_seconds_bucket{le=\"+Inf\"} 4\n"
                               "t_seconds_sum 7.6500000000000004\n"
                               "t_seconds_count 4\n"),
                     "got:\n%s", t);
  free(t);
  o3m_metrics_destroy(m);
}

Test(metrics, gauges_set_and_ages_grow_from_a_touch) {
  static const o3m_metric_spec g = {"t_pending", "pending", O3M_METRIC_GAUGE, NULL, 0};
  static const o3m_metric_spec a = {"t_age_seconds", "age", O3M_METRIC_AGE, NULL, 0};
  o3m_metrics *m = new_registry();
  o3m_metric *gs, *as;
  cr_assert_eq(o3m_metrics_series(m, &g, NULL, &gs, NULL), O3M_OK);
  cr_assert_eq(o3m_metrics_series(m, &a, NULL, &as, NULL), O3M_OK);
  o3m_metric_set(gs, 5);
  o3m_metric_add(gs, -2);
  cr_assert_float_eq(o3m_metric_value(gs), 3.0, 0);
  o3m_metric_touch(as);
  char *t = render(m);
  const char *line = strstr(t, "# TYPE t_age_seconds gauge\nt_age_seconds ");
  cr_assert_not_null(line, "got:\n%s", t);
  double age = strtod(line + strlen("# TYPE t_age_seconds gauge\nt_age_seconds "), NULL);
  cr_assert(age >= 0 && age < 1.0, "age %g s right after the touch", age);
  free(t);
  o3m_metrics_destroy(m);
}

Test(metrics, bad_registrations_are_refused_and_change_nothing) {
  static const o3m_metric_spec bad_name = {"9lives", "x", O3M_METRIC_COUNTER, NULL, 0};
  static const o3m_metric_spec as_gauge = {"t_calls_total", "x", O3M_METRIC_GAUGE, NULL, 0};
  static const double down[] = {1.0, 0.5};
  static const o3m_metric_spec bad_hist = {"t_h", "x", O3M_METRIC_HISTOGRAM, down, 2};
  o3m_metrics *m = new_registry();
  o3m_metric *s = (o3m_metric *)1;
  o3m_err e;
  cr_assert_eq(o3m_metrics_series(m, &bad_name, NULL, &s, &e), O3M_EINVAL);
  cr_assert_null(s);
  cr_assert_not_null(strstr(e.msg, "9lives"), "message: %s", e.msg);
  cr_assert_eq(o3m_metrics_series(m, &calls, "a=\"1\"", &s, NULL), O3M_OK);
  cr_assert_eq(o3m_metrics_series(m, &as_gauge, NULL, &s, &e), O3M_EINVAL);
  cr_assert_not_null(strstr(e.msg, "another kind"), "message: %s", e.msg);
  cr_assert_eq(o3m_metrics_series(m, &bad_hist, NULL, &s, &e), O3M_EINVAL);
  cr_assert_eq(o3m_metrics_series(m, &calls, "a=\"1\"\nb", &s, &e), O3M_EINVAL);
  char *t = render(m);
  cr_assert_null(strstr(t, "9lives"));
  cr_assert_null(strstr(t, "t_h"));
  free(t);
  /* Full tables: O3M_EFULL, and what was registered stays. */
  char labels[32];
  int rc = O3M_OK, n = 1;
  while (rc == O3M_OK && n <= O3M_METRICS_MAX_SERIES) {
    snprintf(labels, sizeof labels, "i=\"%d\"", n++);
    rc = o3m_metrics_series(m, &calls, labels, &s, &e);
  }
  cr_assert_eq(rc, O3M_EFULL, "%s", e.msg);
  o3m_metrics_destroy(m);
}

Test(metrics, updates_accept_null) {
  o3m_metric_add(NULL, 1);
  o3m_metric_set(NULL, 1);
  o3m_metric_observe(NULL, 1);
  o3m_metric_touch(NULL);
  o3m_metrics_inc(NULL, &calls, NULL);
  o3m_metrics_mask_id(NULL, 1);
  o3m_metrics_rpc_observe(NULL, NULL, "/a/b", 0, 0.1);
  cr_assert_float_eq(o3m_metric_value(NULL), 0.0, 0);
}

/* The value of the sample line that starts with prefix, or -1. */
static double sample(const char *text, const char *prefix) {
  size_t n = strlen(prefix);
  for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
    if (strncmp(l, prefix, n) == 0 && l[n] == ' ') return strtod(l + n + 1, NULL);
  return -1;
}

Test(metrics, build_info_and_process_families_describe_the_daemon) {
  o3m_metrics *m = new_registry();
  char *text = render(m);
  cr_assert_null(strstr(text, "process_"), "no process families before o3m_metrics_process");
  free(text);
  cr_assert_eq(o3m_metrics_process(m, "passive", "bank", NULL), O3M_OK);
  text = render(m);
  char want[256];
  snprintf(want, sizeof want,
           "o3m_build_info{version=\"%s\",commit=\"%s\",protocol=\"%d\",role=\"passive\","
           "party=\"bank\"}", O3M_VERSION, O3M_GIT_COMMIT, O3M_VERSION_PROTOCOL);
  cr_expect_eq(sample(text, want), 1.0, "%s", text);
  cr_expect(strstr(text, "# TYPE process_cpu_seconds_total counter\n"), "%s", text);
  cr_expect_geq(sample(text, "process_cpu_seconds_total"), 0.0);
  double rss = sample(text, "process_resident_memory_bytes");
  cr_expect(rss > 4096 && rss < 1e12, "resident memory %g", rss);
  cr_expect_geq(sample(text, "process_virtual_memory_bytes"), rss);
  /* This test has stdin, stdout and stderr open at least. */
  cr_expect_geq(sample(text, "process_open_fds"), 3.0);
  cr_expect_geq(sample(text, "process_max_fds"), sample(text, "process_open_fds"));
  double start = sample(text, "process_start_time_seconds"), now = (double)time(NULL);
  cr_expect(start > now - 3600 && start <= now + 1, "start %f, now %f", start, now);
  free(text);
  cr_expect_eq(o3m_metrics_process(m, "pass ive", "bank", NULL), O3M_EINVAL);
  cr_expect_eq(o3m_metrics_process(m, "passive", "", NULL), O3M_EINVAL);
  /* The longest party name the config allows still fits the labels. */
  char longest[O3M_CONFIG_MAX_NAME + 1];
  memset(longest, 'p', O3M_CONFIG_MAX_NAME);
  longest[O3M_CONFIG_MAX_NAME] = '\0';
  cr_expect_eq(o3m_metrics_process(m, "passive", longest, NULL), O3M_OK);
  o3m_metrics_destroy(m);
}

Test(metrics, rpc_observer_counts_by_method_and_code) {
  o3m_metrics *m = new_registry();
  o3m_metrics_rpc_method cache = {NULL, NULL};
  o3m_metrics_rpc_observe(m, &cache, "/o3m.v1.Passive/Mask", 0, 0.002);
  o3m_metrics_rpc_observe(m, &cache, "/o3m.v1.Passive/Mask", O3M_EPERM, 0.001);
  /* Later calls go through the series the first one found. */
  cr_assert(cache.ok != NULL && cache.duration != NULL);
  o3m_metrics_rpc_observe(m, &cache, "/o3m.v1.Passive/Mask", 0, 0.003);
  o3m_metrics_rpc_observe(m, NULL, "/o3m.v1.Passive/Mask", 0, 0.004);
  o3m_metrics_mask_id(m, 0xabcULL);
  char *t = render(m);
  cr_assert_not_null(strstr(t, "o3m_rpc_calls_total{method=\"/o3m.v1.Passive/Mask\",code=\"OK\"} 3\n"));
  cr_assert_not_null(strstr(t, "o3m_rpc_calls_total{method=\"/o3m.v1.Passive/Mask\",code=\"PERM\"} 1\n"));
  cr_assert_not_null(strstr(t, "o3m_rpc_duration_seconds_count{method=\"/o3m.v1.Passive/Mask\"} 4\n"));
  cr_assert_not_null(strstr(t, "o3m_mask_info{mask_id=\"0000000000000abc\"} 1\n"), "got:\n%s", t);
  free(t);
  o3m_metrics_destroy(m);
}

/* ------------------------------------------------------------ probe socket */

static char sock_dir[64];
static char sock_path[96];

static void make_sock_dir(void) {
  snprintf(sock_dir, sizeof sock_dir, "/tmp/o3m-probe-XXXXXX");
  cr_assert_not_null(mkdtemp(sock_dir));
  snprintf(sock_path, sizeof sock_path, "%s/probe.sock", sock_dir);
}

static void drop_sock_dir(void) {
  unlink(sock_path);
  rmdir(sock_dir);
}

static int unix_connect(const char *path) {
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  cr_assert_lt(strlen(path), sizeof sa.sun_path);
  memcpy(sa.sun_path, path, strlen(path) + 1);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  cr_assert_geq(fd, 0);
  if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

static double mono_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Sends req on a new connection to the probe socket and reads the answer
 * into out (n bytes, NUL-ended) within 1 s; returns its status, 0 for none. */
static int probe_req(const char *req, char *out, size_t n) {
  int fd = unix_connect(sock_path);
  if (fd < 0) return 0;
  struct timeval tv = {1, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  cr_assert_eq(send(fd, req, strlen(req), MSG_NOSIGNAL), (ssize_t)strlen(req));
  size_t len = 0;
  ssize_t got;
  while (len + 1 < n && (got = recv(fd, out + len, n - 1 - len, 0)) > 0) len += (size_t)got;
  close(fd);
  out[len] = '\0';
  int status = 0;
  return sscanf(out, "HTTP/1.0 %d ", &status) == 1 ? status : 0;
}

static o3m_httpd *start_probe_only(o3m_metrics *m) {
  o3m_httpd *h;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert_eq(o3m_httpd_start(&h, NULL, sock_path, m, NULL, &e), O3M_OK, "%s", e.msg);
  return h;
}

Test(probesock, answers_the_two_probes_and_nothing_else, .init = make_sock_dir,
     .fini = drop_sock_dir) {
  o3m_metrics *m = new_registry();
  o3m_httpd *h = start_probe_only(m);
  cr_assert_eq(o3m_httpd_port(h), 0, "no TCP port was asked for");
  struct stat st;
  cr_assert_eq(stat(sock_path, &st), 0);
  cr_assert(S_ISSOCK(st.st_mode));
  cr_assert_eq(st.st_mode & 0777, O3M_PROBESOCK_MODE, "mode %o", st.st_mode & 0777);
  char out[1024];
  cr_assert_eq(probe_req("GET /healthz HTTP/1.0\r\n\r\n", out, sizeof out), 200, "%s", out);
  cr_assert_not_null(strstr(out, "\r\n\r\nok\n"), "%s", out);
  cr_assert_eq(probe_req("GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n", out, sizeof out), 503);
  o3m_httpd_set_ready(h, 1);
  cr_assert_eq(probe_req("GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n", out, sizeof out), 200);
  cr_assert_not_null(strstr(out, "ready\n"), "%s", out);
  cr_assert_eq(probe_req("HEAD /healthz HTTP/1.0\n\n", out, sizeof out), 200);
  cr_assert_null(strstr(out, "\r\n\r\nok"), "HEAD has no body: %s", out);
  cr_assert_eq(probe_req("GET /metrics HTTP/1.0\r\n\r\n", out, sizeof out), 404,
               "the metrics stay on the port with its client certificates: %s", out);
  cr_assert_eq(probe_req("POST /healthz HTTP/1.0\r\n\r\n", out, sizeof out), 405);
  cr_assert_eq(probe_req("hello\r\n\r\n", out, sizeof out), 400);
  char big[O3M_PROBESOCK_REQUEST_MAX + 64];
  memset(big, 'a', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  cr_assert_eq(probe_req(big, out, sizeof out), 400, "%s", out);
  o3m_httpd_stop(h);
  cr_assert_neq(stat(sock_path, &st), 0, "the stop removes the socket file");
  o3m_metrics_destroy(m);
}

/* The probes' blinding flood on the socket itself: four times as many connections
 * as it has slots, none sending a byte; a new probe still gets its answer
 * within 1 s (its request is there when it is accepted, and the flood,
 * from the same process, only ever replaces its own oldest connections),
 * again and again. A flood from other processes of the group is
 * tests/probe_e2e.sh's. */
Test(probesock, a_probe_is_answered_past_a_flood_of_silent_connections,
     .init = make_sock_dir, .fini = drop_sock_dir) {
  o3m_metrics *m = new_registry();
  o3m_httpd *h = start_probe_only(m);
  o3m_httpd_set_ready(h, 1);
  enum { FLOOD = 4 * O3M_PROBESOCK_MAX_CONNECTIONS };
  int fds[FLOOD];
  for (int i = 0; i < FLOOD; i++) fds[i] = unix_connect(sock_path);
  char out[1024];
  for (int k = 0; k < 20; k++) {
    /* The flood reconnects what was cut. */
    for (int i = 0; i < FLOOD; i++) {
      char b;
      if (fds[i] >= 0 && recv(fds[i], &b, 1, MSG_DONTWAIT) == 0) {
        close(fds[i]);
        fds[i] = -1;
      }
      if (fds[i] < 0) fds[i] = unix_connect(sock_path);
    }
    double t0 = mono_s();
    int status = probe_req(k % 2 ? "GET /readyz HTTP/1.0\r\n\r\n" : "GET /healthz HTTP/1.0\r\n\r\n",
                           out, sizeof out);
    double took = mono_s() - t0;
    cr_assert_eq(status, 200, "probe %d under the flood: '%s'", k, out);
    cr_assert_lt(took, 1.0, "probe %d took %.3f s", k, took);
  }
  for (int i = 0; i < FLOOD; i++)
    if (fds[i] >= 0) close(fds[i]);
  o3m_httpd_stop(h);
  o3m_metrics_destroy(m);
}

Test(probesock, a_path_that_is_not_its_own_is_refused, .init = make_sock_dir,
     .fini = drop_sock_dir) {
  o3m_metrics *m = new_registry();
  o3m_httpd *h = NULL;
  o3m_err e;
  /* A regular file: refused and left alone. */
  FILE *f = fopen(sock_path, "w");
  cr_assert_not_null(f);
  fputs("keep me\n", f);
  fclose(f);
  o3m_err_clear(&e);
  cr_assert_eq(o3m_httpd_start(&h, NULL, sock_path, m, NULL, &e), O3M_EINVAL);
  cr_assert_null(h);
  cr_assert_not_null(strstr(e.msg, "exists and is not a socket"), "%s", e.msg);
  struct stat st;
  cr_assert_eq(stat(sock_path, &st), 0);
  cr_assert(S_ISREG(st.st_mode) && st.st_size == 8);
  unlink(sock_path);
  /* A stale socket (its process died without removing it): replaced. */
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof sa.sun_path, "%s", sock_path);
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  close(fd);
  h = start_probe_only(m);
  /* A socket another server listens on: refused, and that one still works. */
  o3m_httpd *second = NULL;
  o3m_err_clear(&e);
  cr_assert_eq(o3m_httpd_start(&second, NULL, sock_path, m, NULL, &e), O3M_EEXISTS);
  cr_assert_null(second);
  cr_assert_not_null(strstr(e.msg, "another process listens on it"), "%s", e.msg);
  char out[256];
  cr_assert_eq(probe_req("GET /healthz HTTP/1.0\r\n\r\n", out, sizeof out), 200);
  o3m_httpd_stop(h);
  /* Paths a unix socket cannot have; and neither a port nor a socket. */
  char longp[200];
  memset(longp, 'x', sizeof longp - 1);
  longp[0] = '/';
  longp[sizeof longp - 1] = '\0';
  o3m_err_clear(&e);
  cr_assert_eq(o3m_httpd_start(&h, NULL, longp, m, NULL, &e), O3M_EINVAL);
  cr_assert_not_null(strstr(e.msg, "longer than a unix socket path may be"), "%s", e.msg);
  cr_assert_eq(o3m_httpd_start(&h, NULL, "", m, NULL, &e), O3M_EINVAL);
  cr_assert_eq(o3m_httpd_start(&h, NULL, NULL, m, NULL, &e), O3M_EINVAL);
  cr_assert_null(h);
  o3m_metrics_destroy(m);
}
