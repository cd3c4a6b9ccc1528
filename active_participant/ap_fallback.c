/* ap_fallback.c -- the active participant's local model (see
 * ap_fallback.h). */
#include "ap_fallback.h"
#include "o3m_alloc.h"

#include <stdio.h>
#include <stdlib.h>

struct ap_fallback {
  o3m_policy *local;
  o3m_metrics *metrics;
  ap_fallback_stats st;
};

int ap_fallback_create(ap_fallback **out, const o3m_policy_config *pc, o3m_metrics *m,
                       o3m_err *e) {
  *out = NULL;
  ap_fallback *fb = o3m_calloc(1, sizeof *fb);
  if (!fb) return o3m_err_set(e, O3M_ENOMEM, "out of memory");
  o3m_err pe;
  o3m_err_clear(&pe);
  int rc = o3m_policy_create(&fb->local, pc, &pe);
  if (rc < 0) {
    o3m_free(fb);
    return o3m_err_set(e, rc, "the local model: %s", o3m_err_message(&pe));
  }
  fb->metrics = m;
  *out = fb;
  return 0;
}

int ap_fallback_choose(ap_fallback *fb, int K, const double *X0, const int *arms, int *chosen,
                       double *score) {
  return o3m_policy_choose(fb->local, K, X0, arms, chosen, score);
}

int ap_fallback_update(ap_fallback *fb, int arm, const double *x0, double reward) {
  if (o3m_policy_update_check(fb->local, arm, x0, reward, NULL) < 0 ||
      o3m_policy_update(fb->local, arm, x0, reward) < 0) {
    fb->st.skipped++;
    return 0;
  }
  fb->st.updates++;
  return 1;
}

void ap_fallback_note(ap_fallback *fb, const char *party, const char *reason) {
  static const o3m_metric_spec degraded = {
      "o3m_ap_degraded_rounds_total",
      "Rounds decided by the local model, by missing passive party and why it was missing",
      O3M_METRIC_COUNTER, NULL, 0};
  if (!fb->metrics) return;
  char labels[O3M_METRICS_LABELS_MAX];
  /* Party names are [A-Za-z0-9_.-] and reasons code names: nothing to
   * escape. */
  snprintf(labels, sizeof labels, "party=\"%s\",reason=\"%s\"", party, reason);
  o3m_metrics_inc(fb->metrics, &degraded, labels);
}

void ap_fallback_stats_get(const ap_fallback *fb, ap_fallback_stats *st) { *st = fb->st; }

const o3m_policy *ap_fallback_policy(const ap_fallback *fb) { return fb->local; }

o3m_policy *ap_fallback_model(ap_fallback *fb) { return fb->local; }

void ap_fallback_destroy(ap_fallback *fb) {
  if (!fb) return;
  o3m_policy_destroy(fb->local);
  o3m_free(fb);
}
