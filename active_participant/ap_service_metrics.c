/* ap_service_metrics.c -- the service's series in the metrics registry
 * and the copy of its running totals into them (see ap_service_impl.h). */
#include "ap_service_impl.h"

/* Copies the service's own running totals into the metrics: after every
 * drain of the serving thread (the idle hook) and every reward. Reading
 * them is a few loads; the totals stay where the service keeps them. */
void ap_service__metrics_publish(ap_service *s) {
  if (!s->m_decisions) return;
  ap_pending_stats st;
  ap_pending_stats_get(s->pending, o3m_clock_ms(), &st);
  ap_round_stats rst;
  ap_round_stats_get(s->round, &rst);
  o3m_metric_set(s->m_decisions, (double)rst.rounds);
  o3m_metric_set(s->m_rounds, (double)rst.fanouts);
  o3m_metric_set(s->m_failed, (double)rst.failed_rounds);
  o3m_metric_set(s->m_pending, (double)st.waiting);
  o3m_metric_set(s->m_evicted, (double)st.evicted);
  o3m_metric_set(s->m_expired, (double)st.expired);
  o3m_metric_set(s->m_rewards, (double)st.closed);
  o3m_metric_set(s->m_checkpoints, (double)s->checkpoints);
  o3m_metric_set(s->m_cache_hits, (double)rst.cache_hits);
  o3m_metric_set(s->m_cache_misses, (double)rst.cache_misses);
  o3m_metric_set(s->m_cache_entries, (double)rst.cache_size);
  o3m_metric_set(s->m_unknown_users, (double)rst.unknown_user_rounds);
  o3m_metric_set(s->m_unknown_items, (double)rst.unknown_item_rounds);
  o3m_metric_set(s->m_sliced, (double)rst.sliced_rounds);
  o3m_metric_set(s->m_uncached, (double)rst.uncached_ids);
  o3m_metric_set(s->m_over_budget, (double)rst.over_budget_waits);
  for (int i = 0; i < s->n_clients && i < METRIC_CLIENTS; i++) {
    ap_pending_owner_stats(s->pending, i, &st);
    o3m_metric_set(s->m_client_evicted[i], (double)st.evicted);
    o3m_metric_set(s->m_client_uncached[i], (double)ap_round_owner_uncached(s->round, i));
  }
}

/* Registers the AP's series in m (see ap_service_options.metrics). */
int ap_service__metrics_register(ap_service *s, o3m_metrics *m, o3m_err *e) {
  static const o3m_metric_spec specs[] = {
      {"o3m_ap_decisions_total", "Decisions issued (answered Recommend calls)",
       O3M_METRIC_COUNTER, NULL, 0},
      {"o3m_ap_rounds_total", "Fan-out rounds: batches of Recommends sent to the passive parties",
       O3M_METRIC_COUNTER, NULL, 0},
      {"o3m_ap_recommend_failed_total", "Recommend calls refused or failed", O3M_METRIC_COUNTER,
       NULL, 0},
      {"o3m_ap_pending_decisions", "Decisions waiting for a reward", O3M_METRIC_GAUGE, NULL, 0},
      {"o3m_ap_pending_evicted_total", "Waiting decisions overwritten in the full pending table",
       O3M_METRIC_COUNTER, NULL, 0},
      {"o3m_ap_pending_expired_total", "Decisions found expired", O3M_METRIC_COUNTER, NULL, 0},
      {"o3m_ap_rewards_total", "Rewards applied to the model", O3M_METRIC_COUNTER, NULL, 0},
      {"o3m_ap_checkpoints_total", "Checkpoints written since start", O3M_METRIC_COUNTER, NULL,
       0},
      {"o3m_ap_item_cache_hits_total", "Candidate items whose summed part the AP had cached",
       O3M_METRIC_COUNTER, NULL, 0},
      {"o3m_ap_item_cache_misses_total", "Candidate items whose part the AP asked the PPs for",
       O3M_METRIC_COUNTER, NULL, 0},
      {"o3m_ap_item_cache_entries", "Items in the AP's cache of summed item parts",
       O3M_METRIC_GAUGE, NULL, 0},
      {"o3m_ap_unknown_user_rounds_total",
       "Valid Recommend calls whose user the AP's own user table lacks (the PPs never say)",
       O3M_METRIC_COUNTER, NULL, 0},
      {"o3m_ap_unknown_item_rounds_total",
       "Valid Recommend calls with an item the AP's own item table lacks (the PPs never say)",
       O3M_METRIC_COUNTER, NULL, 0},
      {"o3m_ap_sliced_rounds_total",
       "Recommend rounds gathered in slices while other clients were active (slice_cost_max)",
       O3M_METRIC_COUNTER, NULL, 0},
      {"o3m_ap_uncached_ids_total",
       "Item ids the AP asked the passive parties for (not in its item cache)",
       O3M_METRIC_COUNTER, NULL, 0},
      {"o3m_ap_over_budget_waits_total",
       "Rounds passed over in the turns: their client was over client_uncached_rate",
       O3M_METRIC_COUNTER, NULL, 0},
  };
  o3m_metric **slots[] = {&s->m_decisions,  &s->m_rounds,       &s->m_failed,
                          &s->m_pending,    &s->m_evicted,      &s->m_expired,
                          &s->m_rewards,    &s->m_checkpoints,  &s->m_cache_hits,
                          &s->m_cache_misses, &s->m_cache_entries, &s->m_unknown_users,
                          &s->m_unknown_items, &s->m_sliced, &s->m_uncached,
                          &s->m_over_budget};
  static const o3m_metric_spec fsync = {
      "o3m_ap_journal_sync_seconds", "Journal fdatasync time (one makes a group of rewards durable)",
      O3M_METRIC_HISTOGRAM, o3m_metrics_latency_bounds, O3M_METRICS_LATENCY_N};
  static const o3m_metric_spec age = {
      "o3m_ap_checkpoint_age_seconds",
      "Seconds since this process last wrote a checkpoint (since start before the first)",
      O3M_METRIC_AGE, NULL, 0};
  int rc = 0;
  for (size_t i = 0; rc == 0 && i < sizeof specs / sizeof specs[0]; i++)
    rc = o3m_metrics_series(m, &specs[i], NULL, slots[i], e);
  if (rc == 0 && s->ckpt) rc = o3m_metrics_series(m, &fsync, NULL, &s->m_fsync, e);
  if (rc == 0 && s->ckpt) rc = o3m_metrics_series(m, &age, NULL, &s->m_ckpt_age, e);
  /* Every AP has it (0 without replicas), so that the alert's name is in
   * every scrape (tests/monitoring_names.py); a replica sets it at each
   * check of its stream (ap_service_replica.c). */
  static const o3m_metric_spec limits = {
      "o3m_ap_replica_stream_limits",
      "Settings of the replicas' reward stream that can drop records (max_msgs, max_bytes, "
      "max_age, max_msgs_per_subject, a retention other than limits) at the last check",
      O3M_METRIC_GAUGE, NULL, 0};
  if (rc == 0) rc = o3m_metrics_series(m, &limits, NULL, &s->m_rep_limits, e);
  static const o3m_metric_spec client_evicted = {
      "o3m_ap_client_pending_evicted_total",
      "Waiting decisions of this client evicted from the pending table (by its own newer ones, "
      "or taken back by a client below its share)",
      O3M_METRIC_COUNTER, NULL, 0};
  for (int i = 0; rc == 0 && i < s->n_clients && i < METRIC_CLIENTS; i++) {
    char label[O3M_CONFIG_MAX_NAME + 16];
    snprintf(label, sizeof label, "client=\"%s\"", s->clients[i]);
    rc = o3m_metrics_series(m, &client_evicted, label, &s->m_client_evicted[i], e);
  }
  static const o3m_metric_spec client_uncached = {
      "o3m_ap_client_uncached_ids_total",
      "Uncached item ids of this client's rounds, charged to its budget (client_uncached_rate)",
      O3M_METRIC_COUNTER, NULL, 0};
  for (int i = 0; rc == 0 && i < s->n_clients && i < METRIC_CLIENTS; i++) {
    char label[O3M_CONFIG_MAX_NAME + 16];
    snprintf(label, sizeof label, "client=\"%s\"", s->clients[i]);
    rc = o3m_metrics_series(m, &client_uncached, label, &s->m_client_uncached[i], e);
  }
  if (rc == 0) o3m_metrics_mask_id(m, s->mask_id);
  return rc;
}

