/* o3m_tables.h -- a column party's feature tables as its daemon serves
 * them: loaded with every check of a start, reloaded without a restart,
 * swapped whole between requests.
 *
 * Departments refresh their tables daily. A daemon (o3m-passive, and
 * o3m-active with tables of its own) reloads them on SIGHUP and on its
 * Reload RPC (o3m-cli reload). A reload parses the files named in the
 * party's section again into a complete new o3m_features handle, with every
 * check a start makes: the CSV syntax, ids and dims (o3m_features_load, so
 * the dummy-row moments are those of the new rows and a content epoch is
 * computed there too), whitening when the party whitens, the party's norm
 * bound (o3m_features_check_norm) and the dummy-row key the party holds.
 * Only a handle that passed all of them is swapped in; a bad file is
 * refused with the same file:line message as at a start, counted, and the
 * old tables keep serving.
 *
 * Threads. The parse runs without the server's lock (o3m_rpc_server_unlocked:
 * with threads >= 2 the other serving threads answer calls from the old
 * tables meanwhile; with one thread the calls wait in gRPC's queue), and
 * the swap happens when the lock is taken back, between two handlers, so
 * that every call is answered wholly from one version. One reload runs at a
 * time: another one asked meanwhile is refused (O3M_ESTATE). Reading the
 * current handle is the service's business (it owns the pointer that the
 * hot path reads); this module only says when it may change.
 *
 * Counters: the swaps since start (each one a new version; the factored
 * masking's epochs come from the content, o3m_features), the refused
 * reloads and the wall time of the last swap, in Stats and as metrics
 * o3m_tables_reloads_total, o3m_tables_reload_refused_total and
 * o3m_tables_last_reload_timestamp_seconds. The lookup counters of the
 * tables (o3m_features_stats) continue across swaps. */
#ifndef O3M_TABLES_H
#define O3M_TABLES_H

#include <stdint.h>

#include "o3m_error.h"
#include "o3m_features.h"
#include "o3m_metrics.h"
#include "o3m_rpc.h"

typedef struct o3m_tables o3m_tables;

/* What a load reads. The strings are copied at create. */
typedef struct o3m_tables_config {
  const char *config_name;  /* the federation config's name, for messages */
  const char *party;        /* the party's name, for messages */
  const char *user_table;   /* NULL: none (not both NULL) */
  const char *item_table;
  int dims;                 /* the party's dims */
  int whiten;               /* 1: o3m_features_whiten after the load */
  double max_norm;          /* the party's bound */
  o3m_metrics *metrics;     /* NULL: none; must outlive the handle */
} o3m_tables_config;

typedef struct o3m_tables_stats {
  uint64_t swaps;           /* reloads swapped in since start */
  uint64_t refused;         /* reloads refused, the old tables kept */
  int64_t last_reload_ms;   /* wall clock (ms since the epoch) of the last swap; 0: none */
  o3m_features_stats lookups; /* of every version served since start */
} o3m_tables_stats;

/* Copies c and registers the metrics. O3M_EINVAL (no table, dims < 1),
 * O3M_ENOMEM, or the registry's error; *out NULL on failure. */
int o3m_tables_create(o3m_tables **out, const o3m_tables_config *c, o3m_err *e);

/* NULL is accepted. Wipes the dummy-row key. Does not free any features. */
void o3m_tables_destroy(o3m_tables *t);

/* Keeps a copy of the party's dummy-row key, which every later load sets
 * on its new tables (o3m_features_set_dummy_key), so that an unknown id
 * gets a dummy from the new moments under the same key. Call it when the
 * key is given to the first tables; not concurrent with a reload. */
void o3m_tables_set_key(o3m_tables *t, const unsigned char key[O3M_FEATURES_KEY_BYTES]);

/* Loads the tables with every check of a start into *out (the caller owns
 * it): errors name the config, the party and the file and line
 * ("fed.conf: [party bank] user_table/item_table: users.csv:3: ..."), or
 * the bound ("... raise its max_norm if such rows are meant"). Reads only
 * what create copied and the key: safe while other threads serve. */
int o3m_tables_load(o3m_tables *t, o3m_features **out, o3m_err *e);

/* A reload, called under the server's lock (from a handler or the idle
 * hook of server; server NULL: no lock to give up, tests): loads new
 * tables without the lock, then, with the lock back, swaps them into *cur
 * and hands the replaced handle to *old, which the caller frees once no
 * thread reads it any more. On failure *cur is unchanged, *old NULL, the
 * refusal counted and logged (WARN, with the message), and e holds the
 * load's message; O3M_ESTATE while another reload is under way. */
int o3m_tables_reload(o3m_tables *t, o3m_rpc_server *server, o3m_features **cur,
                      o3m_features **old, o3m_err *e);

/* 1 while a reload parses (o3m_tables_reload gave the lock up), else 0:
 * a SIGHUP seen meanwhile is kept for after it. Under the server's lock. */
int o3m_tables_reload_busy(const o3m_tables *t);

/* The counters, with cur's lookup counters added to those of the versions
 * it replaced. */
void o3m_tables_stats_get(const o3m_tables *t, const o3m_features *cur, o3m_tables_stats *out);

#endif
