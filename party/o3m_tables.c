/* o3m_tables.c -- loading and reloading a party's feature tables (see
 * o3m_tables.h). */
#include "o3m_tables.h"
#include "o3m_alloc.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "o3m_clock.h"
#include "o3m_log.h"

struct o3m_tables {
  char *config_name, *party, *user_table, *item_table;
  int dims, whiten;
  double max_norm;
  int has_key;
  unsigned char key[O3M_FEATURES_KEY_BYTES];
  uint64_t max_bytes; /* table_bytes_max */
  char *limit_key;    /* "[party NAME] table_bytes_max in CONFIG", for messages */
  /* The loader thread and what it shares with the serving threads, under
   * mu: a load asked (want), one running, one finished and not yet taken
   * (done, with its result), one more asked meanwhile (again). */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t thread;
  int sync_ok, thread_ok;
  int want, running, done, again, exited, abandoned;
  int64_t t0;            /* monotonic ms when the load was asked */
  o3m_features *done_f;
  int done_rc;
  o3m_err done_e;
  atomic_int stop;       /* the loader's file reads end (destroy) */
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

static void tables_free(o3m_tables *t) {
  explicit_bzero(t->key, sizeof t->key);
  o3m_features_destroy(t->done_f);
  o3m_free(t->config_name);
  o3m_free(t->party);
  o3m_free(t->user_table);
  o3m_free(t->item_table);
  o3m_free(t->limit_key);
  o3m_free(t);
}

static void *loader_main(void *arg);

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
  t->max_bytes = c->max_bytes ? c->max_bytes : O3M_DEFAULT_TABLE_BYTES_MAX;
  atomic_init(&t->stop, 0);
  if (!failed) {
    char key[512];
    snprintf(key, sizeof key, "table_bytes_max of [party %s] in %s", t->party, t->config_name);
    t->limit_key = dup_or_null(key, &failed);
  }
  if (failed) {
    tables_free(t);
    return o3m_err_set(e, O3M_ENOMEM, "out of memory");
  }
  /* The loader thread waits on a monotonic clock (destroy's bounded wait). */
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_mutex_init(&t->mu, NULL);
  pthread_cond_init(&t->cv, &ca);
  pthread_condattr_destroy(&ca);
  t->sync_ok = 1;
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
  /* The thread every reload parses on, started once here (nothing is
   * started per reload). */
  int prc = pthread_create(&t->thread, NULL, loader_main, t);
  if (prc != 0) {
    o3m_tables_destroy(t);
    return o3m_err_set(e, O3M_ENOMEM, "cannot start the table loader thread: %s",
                       strerror(prc));
  }
  t->thread_ok = 1;
  *out = t;
  return 0;
}

/* Ends the loader: its reads stop at the next block, and it is waited for
 * up to O3M_TABLES_STOP_WAIT_MS. A loader stuck in read() of a slow file
 * (a hung mount) is left behind, so that a shutdown never waits on a
 * file: it frees the handle itself if it ever returns. */
void o3m_tables_destroy(o3m_tables *t) {
  if (!t) return;
  if (t->thread_ok) {
    atomic_store(&t->stop, 1);
    pthread_mutex_lock(&t->mu);
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += O3M_TABLES_STOP_WAIT_MS / 1000;
    until.tv_nsec += (long)(O3M_TABLES_STOP_WAIT_MS % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
      until.tv_sec++;
      until.tv_nsec -= 1000000000L;
    }
    pthread_cond_broadcast(&t->cv);
    int rc = 0;
    while (!t->exited && rc != ETIMEDOUT) rc = pthread_cond_timedwait(&t->cv, &t->mu, &until);
    if (!t->exited) {
      /* Everything of t is read, and the key wiped, before mu is let go:
       * from then on the loader may return from its read and free t. */
      char party[128];
      snprintf(party, sizeof party, "%s", t->party);
      explicit_bzero(t->key, sizeof t->key);
      t->has_key = 0;
      t->abandoned = 1;
      pthread_detach(t->thread);
      pthread_mutex_unlock(&t->mu);
      o3m_log_warn("the table loader is still reading a file of [party %s] after %d ms; "
                   "stopping without it", party, O3M_TABLES_STOP_WAIT_MS);
      return; /* the loader frees t when its read returns */
    }
    pthread_mutex_unlock(&t->mu);
    pthread_join(t->thread, NULL);
  }
  if (t->sync_ok) {
    pthread_cond_destroy(&t->cv);
    pthread_mutex_destroy(&t->mu);
  }
  tables_free(t);
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
  const o3m_features_read rd = {t->max_bytes, t->limit_key, &t->stop};
  int rc = o3m_features_load_with(&f, t->user_table, t->item_table, t->dims, &rd, &fe);
  /* A shutdown asked meanwhile (destroy) ends the load between its steps
   * too, not only in its reads, so that it is rarely left behind busy. */
  if (!rc && atomic_load(&t->stop))
    rc = o3m_err_set(&fe, O3M_ESTATE, "the load was stopped (shutdown)");
  if (!rc && t->whiten) rc = o3m_features_whiten(f, &fe);
  if (!rc && atomic_load(&t->stop))
    rc = o3m_err_set(&fe, O3M_ESTATE, "the load was stopped (shutdown)");
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

/* The loader thread: waits for a load to be asked, parses it without any
 * lock the serving threads take (only mu, held for the hand-over), and
 * leaves the result for o3m_tables_reload_poll. */
static void *loader_main(void *arg) {
  o3m_tables *t = arg;
  pthread_mutex_lock(&t->mu);
  for (;;) {
    while (!t->want && !atomic_load(&t->stop)) pthread_cond_wait(&t->cv, &t->mu);
    if (atomic_load(&t->stop)) break;
    t->want = 0;
    t->running = 1;
    pthread_mutex_unlock(&t->mu);
    o3m_features *f = NULL;
    o3m_err le;
    o3m_err_clear(&le);
    int rc = o3m_tables_load(t, &f, &le);
    pthread_mutex_lock(&t->mu);
    t->running = 0;
    if (t->abandoned) {
      pthread_mutex_unlock(&t->mu);
      o3m_features_destroy(f);
      pthread_cond_destroy(&t->cv);
      pthread_mutex_destroy(&t->mu);
      tables_free(t);
      return NULL;
    }
    t->done = 1;
    t->done_rc = rc;
    t->done_f = f;
    t->done_e = le;
    pthread_cond_broadcast(&t->cv);
  }
  t->exited = 1;
  pthread_cond_broadcast(&t->cv);
  pthread_mutex_unlock(&t->mu);
  return NULL;
}

int o3m_tables_reload_start(o3m_tables *t, int coalesce, o3m_err *e) {
  pthread_mutex_lock(&t->mu);
  if (t->want || t->running || t->done) {
    int queued = coalesce && !t->again;
    if (coalesce) t->again = 1;
    pthread_mutex_unlock(&t->mu);
    if (!coalesce)
      return o3m_err_set(e, O3M_ESTATE, "a reload of the feature tables is already under way "
                         "(it ends with a swap or a refusal in the log; retry after it)");
    if (queued)
      o3m_log_info("reload asked while one runs: one more reload follows it");
    return 1;
  }
  t->want = 1;
  t->t0 = o3m_clock_ms();
  pthread_cond_broadcast(&t->cv);
  pthread_mutex_unlock(&t->mu);
  return 0;
}

static void stats_add(o3m_features_stats *a, const o3m_features_stats *b) {
  a->lookups += b->lookups;
  a->item_lookups += b->item_lookups;
  a->unknown_users += b->unknown_users;
  a->unknown_items += b->unknown_items;
}

int o3m_tables_reload_poll(o3m_tables *t, o3m_features **cur, o3m_features **old, o3m_err *e) {
  *old = NULL;
  pthread_mutex_lock(&t->mu);
  if (!t->done) {
    pthread_mutex_unlock(&t->mu);
    return 0;
  }
  o3m_features *f = t->done_f;
  int rc = t->done_rc;
  o3m_err le = t->done_e;
  int64_t t0 = t->t0;
  t->done = 0;
  t->done_f = NULL;
  /* The reload asked meanwhile starts now, from the files as they are. */
  if (t->again) {
    t->again = 0;
    t->want = 1;
    t->t0 = o3m_clock_ms();
    pthread_cond_broadcast(&t->cv);
  }
  pthread_mutex_unlock(&t->mu);
  if (rc < 0) {
    t->refused++;
    o3m_metric_add(t->m_refused, 1);
    o3m_log_warn("reload refused, the tables of version %llu keep serving: %s",
                 (unsigned long long)t->swaps, o3m_err_message(&le));
    return o3m_err_set(e, rc, "refused, old tables kept: %s", o3m_err_message(&le));
  }
  /* The lookups counted by the version that goes continue in Stats. */
  if (*cur) {
    o3m_features_stats st;
    o3m_features_stats_get(*cur, &st);
    stats_add(&t->base, &st);
  }
  *old = *cur;
  *cur = f;
  t->swaps++;
  t->last_reload_ms = o3m_clock_wall_ms();
  o3m_metric_add(t->m_swaps, 1);
  o3m_metric_set(t->m_last, (double)t->last_reload_ms / 1000.0);
  o3m_log_info("tables reloaded (version %llu, parsed and checked in %lld ms off the serving "
               "threads): %d users x %d + %d items x %d columns", (unsigned long long)t->swaps,
               (long long)(o3m_clock_ms() - t0), o3m_features_n_users(f),
               o3m_features_user_cols(f), o3m_features_n_items(f), o3m_features_item_cols(f));
  return 1;
}

/* Waits for the running load to finish (without the server's lock). */
static void wait_done(void *arg) {
  o3m_tables *t = arg;
  pthread_mutex_lock(&t->mu);
  while (!t->done) pthread_cond_wait(&t->cv, &t->mu);
  pthread_mutex_unlock(&t->mu);
}

int o3m_tables_reload(o3m_tables *t, o3m_rpc_server *server, o3m_features **cur,
                      o3m_features **old, o3m_err *e) {
  *old = NULL;
  int rc = o3m_tables_reload_start(t, 0, e);
  if (rc < 0) return rc;
  if (server)
    o3m_rpc_server_unlocked(server, wait_done, t);
  else
    wait_done(t);
  rc = o3m_tables_reload_poll(t, cur, old, e);
  return rc < 0 ? rc : 0;
}

int o3m_tables_reload_busy(const o3m_tables *t) {
  o3m_tables *m = (o3m_tables *)t; /* the mutex only */
  pthread_mutex_lock(&m->mu);
  int busy = t->want || t->running || t->done;
  pthread_mutex_unlock(&m->mu);
  return busy;
}

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
