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
 * Files. Every table path is opened without waiting and must be a
 * regular file (fstat of the descriptor): a FIFO, a device such as
 * /dev/zero (a symlink to one included), a directory or a socket is
 * refused naming the path and what it is. A file is read up to the
 * party's table_bytes_max, checked against its size before a byte is read
 * and counted while it is read, so that a file that grows or reports no
 * size cannot take the party's memory (o3m_features_read). This holds at a
 * start and at every reload.
 *
 * Threads. A reload parses on the handle's own loader thread, started at
 * create, never on a serving thread: o3m_tables_reload_start asks for a
 * load and returns at once, the serving threads go on answering from the
 * old tables, and o3m_tables_reload_poll, called between two handlers
 * (the daemon's idle hook, which runs at least every 100 ms), swaps the
 * new handle in when it is whole. So every call is answered wholly from
 * one version, the swap of the pointer (and with it the epochs the replies
 * name) is the only step a caller can see, and no round waits for a parse.
 * One reload runs at a time. A second one asked while one runs is, from
 * SIGHUP (coalesce = 1), coalesced: exactly one more reload runs after the
 * running one, from the files as they are then, however many signals came;
 * from the Reload RPC (coalesce = 0) it is refused with O3M_ESTATE, so that
 * the operator's call answers for one load. The service owns the pointer
 * the hot path reads; this module only says when it may change. destroy
 * stops the loader's reads and waits for it at most
 * O3M_TABLES_STOP_WAIT_MS: a loader stuck in read() of a slow file is left
 * behind, so that a shutdown never waits on a file.
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
  uint64_t max_bytes;       /* table_bytes_max; 0: O3M_DEFAULT_TABLE_BYTES_MAX */
  o3m_metrics *metrics;     /* NULL: none; must outlive the handle */
} o3m_tables_config;

typedef struct o3m_tables_stats {
  uint64_t swaps;           /* reloads swapped in since start */
  uint64_t refused;         /* reloads refused, the old tables kept */
  int64_t last_reload_ms;   /* wall clock (ms since the epoch) of the last swap; 0: none */
  o3m_features_stats lookups; /* of every version served since start */
} o3m_tables_stats;

/* Copies c, registers the metrics and starts the loader thread.
 * O3M_EINVAL (no table, dims < 1), O3M_ENOMEM (also: no thread), or the
 * registry's error; *out NULL on failure. */
int o3m_tables_create(o3m_tables **out, const o3m_tables_config *c, o3m_err *e);

/* NULL is accepted. Stops the loader thread (see "Threads"), wipes the
 * dummy-row key and frees a loaded handle no poll took. Does not free the
 * features the caller holds. */
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

/* Asks the loader thread for a reload and returns at once: 0 started; 1
 * when one is under way and coalesce is set (one more reload follows it,
 * logged once); O3M_ESTATE when one is under way and coalesce is 0. */
int o3m_tables_reload_start(o3m_tables *t, int coalesce, o3m_err *e);

/* Never blocks. When the loader has finished a load: on success swaps the
 * new tables into *cur, hands the replaced handle to *old (the caller
 * frees it once no call reads it) and returns 1; on failure *cur is
 * unchanged, *old NULL, the refusal counted and logged (WARN, with the
 * message) and the load's code returned with e holding the message. 0
 * when no load has finished. A coalesced reload starts here. Call it where
 * *cur may change: under the server's lock, between handlers. */
int o3m_tables_reload_poll(o3m_tables *t, o3m_features **cur, o3m_features **old, o3m_err *e);

/* A whole reload, waiting for it: start (coalesce 0), wait without the
 * server's lock (server NULL: no lock to give up, tests), poll. 0 swapped,
 * or the refusal's code; O3M_ESTATE while another reload is under way.
 * The daemons use start and poll instead, so that no serving thread
 * waits. */
int o3m_tables_reload(o3m_tables *t, o3m_rpc_server *server, o3m_features **cur,
                      o3m_features **old, o3m_err *e);

/* 1 while a reload is asked, parses, or has finished and waits for
 * o3m_tables_reload_poll, else 0. */
int o3m_tables_reload_busy(const o3m_tables *t);

/* The counters, with cur's lookup counters added to those of the versions
 * it replaced. */
void o3m_tables_stats_get(const o3m_tables *t, const o3m_features *cur, o3m_tables_stats *out);

#endif
