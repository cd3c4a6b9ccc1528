/* o3m_tables.c -- loading and reloading a party's feature tables (see
 * o3m_tables.h). */
#include "o3m_tables.h"
#include "o3m_alloc.h"

#include <stdlib.h>
#include <string.h>

#include "o3m_clock.h"
#include "o3m_log.h"

struct o3m_tables {
  char *config_name, *party, *user_table, *item_table;
  int dims, whiten;
  double max_norm;
  int has_key;
  unsigned char key[O3M_FEATURES_KEY_BYTES];
  int busy; /* a reload is parsing (under the server's lock) */
  uint64_t swaps, refused;
  int64_t last_reload_ms;
  o3m_features_stats base; /* lookups of the versions swapped out */
  o3m_metric *m_swaps, *m_refused, *m_last;
};

static char *dup_or_null(const char *s, int *failed) {
  if (!s) return NULL;
  char *d = o3m_strdup(s);
  if (!d) *failed = 1;
  return d;
}

int o3m_tables_create(o3m_tables **out, const o3m_tables_config *c, o3m_err *e) {
  *out = NULL;
  if (!c || (!c->user_table && !c->item_table) || c->dims < 1)
    return o3m_err_set(e, O3M_EINVAL, "o3m_tables_create: no table or dims < 1");
  o3m_tables *t = o3m_calloc(1, sizeof *t);
  if (!t) return o3m_err_set(e, O3M_ENOMEM, "out of memory");
  int failed = 0;
  t->config_name = dup_or_null(c->config_name ? c->config_name : "the config", &failed);
  t->party = dup_or_null(c->party ? c->party : "?", &failed);
  t->user_table = dup_or_null(c->user_table, &failed);
  t->item_table = dup_or_null(c->item_table, &failed);
  t->dims = c->dims;
  t->whiten = c->whiten != 0;
  t->max_norm = c->max_norm;
  if (failed) {
    o3m_tables_destroy(t);
    return o3m_err_set(e, O3M_ENOMEM, "out of memory");
  }
  if (c->metrics) {
    static const o3m_metric_spec specs[] = {
        {"o3m_tables_reloads_total", "Feature table reloads swapped in since start",
         O3M_METRIC_COUNTER, NULL, 0},
        {"o3m_tables_reload_refused_total",
         "Feature table reloads refused (a bad file; the old tables kept serving)",
         O3M_METRIC_COUNTER, NULL, 0},
        {"o3m_tables_last_reload_timestamp_seconds",
         "Unix time of the last feature table swap (0: none since start)", O3M_METRIC_GAUGE,
         NULL, 0},
    };
    o3m_metric **slots[] = {&t->m_swaps, &t->m_refused, &t->m_last};
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
      int rc = o3m_metrics_series(c->metrics, &specs[i], NULL, slots[i], e);
      if (rc < 0) {
        o3m_tables_destroy(t);
        return rc;
      }
    }
  }
  *out = t;
  return 0;
}

void o3m_tables_destroy(o3m_tables *t) {
  if (!t) return;
  explicit_bzero(t->key, sizeof t->key);
  o3m_free(t->config_name);
  o3m_free(t->party);
  o3m_free(t->user_table);
  o3m_free(t->item_table);
  o3m_free(t);
}

void o3m_tables_set_key(o3m_tables *t, const unsigned char key[O3M_FEATURES_KEY_BYTES]) {
  memcpy(t->key, key, sizeof t->key);
  t->has_key = 1;
}

int o3m_tables_load(o3m_tables *t, o3m_features **out, o3m_err *e) {
  *out = NULL;
  o3m_features *f;
  o3m_err fe;
  o3m_err_clear(&fe);
  int rc = o3m_features_load(&f, t->user_table, t->item_table, t->dims, &fe);
  if (!rc && t->whiten) rc = o3m_features_whiten(f, &fe);
  if (rc < 0) {
    if (!fe.code) o3m_err_set(&fe, rc, "%s", o3m_errname(rc));
    rc = o3m_err_set(e, rc, "%s: [party %s] user_table/item_table: %s", t->config_name,
                     t->party, o3m_err_message(&fe));
    o3m_features_destroy(f);
    return rc;
  }
  rc = o3m_features_check_norm(f, t->max_norm, &fe);
  if (rc < 0) {
    rc = o3m_err_set(e, rc, "%s (the bound of [party %s] in %s; raise its max_norm if such "
                     "rows are meant)", o3m_err_message(&fe), t->party, t->config_name);
    o3m_features_destroy(f);
    return rc;
  }
  if (t->has_key) o3m_features_set_dummy_key(f, t->key);
  *out = f;
  return 0;
}

/* The parse of a reload, run without the server's lock. */
typedef struct load_job {
  o3m_tables *t;
  o3m_features *f;
  int rc;
  o3m_err e;
} load_job;

static void load_unlocked(void *arg) {
  load_job *j = arg;
  o3m_err_clear(&j->e);
  j->rc = o3m_tables_load(j->t, &j->f, &j->e);
}

static void stats_add(o3m_features_stats *a, const o3m_features_stats *b) {
  a->lookups += b->lookups;
  a->item_lookups += b->item_lookups;
  a->unknown_users += b->unknown_users;
  a->unknown_items += b->unknown_items;
}

int o3m_tables_reload(o3m_tables *t, o3m_rpc_server *server, o3m_features **cur,
                      o3m_features **old, o3m_err *e) {
  *old = NULL;
  if (t->busy)
    return o3m_err_set(e, O3M_ESTATE, "a reload of the feature tables is already under way");
  int64_t t0 = o3m_clock_ms();
  load_job j = {t, NULL, 0, {0}};
  t->busy = 1;
  if (server)
    o3m_rpc_server_unlocked(server, load_unlocked, &j);
  else
    load_unlocked(&j);
  t->busy = 0;
  if (j.rc < 0) {
    t->refused++;
    o3m_metric_add(t->m_refused, 1);
    o3m_log_warn("reload refused, the tables of version %llu keep serving: %s",
                 (unsigned long long)t->swaps, o3m_err_message(&j.e));
    return o3m_err_set(e, j.rc, "refused, old tables kept: %s",
                       o3m_err_message(&j.e));
  }
  /* The lookups counted by the version that goes continue in Stats. */
  if (*cur) {
    o3m_features_stats s;
    o3m_features_stats_get(*cur, &s);
    stats_add(&t->base, &s);
  }
  *old = *cur;
  *cur = j.f;
  t->swaps++;
  t->last_reload_ms = o3m_clock_wall_ms();
  o3m_metric_add(t->m_swaps, 1);
  o3m_metric_set(t->m_last, (double)t->last_reload_ms / 1000.0);
  const o3m_features *f = j.f;
  o3m_log_info("tables reloaded (version %llu, parsed and checked in %lld ms): %d users x %d + "
               "%d items x %d columns", (unsigned long long)t->swaps,
               (long long)(o3m_clock_ms() - t0), o3m_features_n_users(f),
               o3m_features_user_cols(f), o3m_features_n_items(f), o3m_features_item_cols(f));
  return 0;
}

int o3m_tables_reload_busy(const o3m_tables *t) { return t->busy; }

void o3m_tables_stats_get(const o3m_tables *t, const o3m_features *cur, o3m_tables_stats *out) {
  out->swaps = t->swaps;
  out->refused = t->refused;
  out->last_reload_ms = t->last_reload_ms;
  out->lookups = t->base;
  if (cur) {
    o3m_features_stats s;
    o3m_features_stats_get(cur, &s);
    stats_add(&out->lookups, &s);
  }
}
