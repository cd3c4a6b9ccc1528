/* test_metrics.c -- the metrics registry (common/o3m_metrics.h): series
 * register once, values move, histograms are cumulative, the rendered text
 * groups a family's series under one HELP and TYPE, and bad registrations
 * are refused with a message and change nothing. The HTTP side and
 * promtool run end to end in ops_e2e.sh. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "o3m_metrics.h"

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
