/* ap_client.h -- a client of the active participant's service.
 *
 * Wraps one o3m_rpc client with plain C calls for the Active service
 * (Recommend, Reward, Stats, Info) and the standard health check, so that
 * o3m-cli, the demo driver and load tests do not build protobuf-c messages
 * themselves. One call is in flight per client at a time; for concurrency,
 * use one client per thread (clients share nothing).
 *
 * Security: TLS with a client certificate (mutual TLS) by default. The
 * active participant answers Recommend, Reward and Stats only to the clients
 * its config names ([client NAME], with a certificate whose common name is
 * NAME, signed by the federation CA); every other caller, a party included,
 * gets O3M_EPERM. Info and the health check are open to parties as well.
 * Plaintext only with insecure = 1.
 *
 * Errors are the remote handler's O3M code (O3M_EINVAL, O3M_ENOTFOUND,
 * O3M_EEXISTS, O3M_EEXPIRED, O3M_EMASK, O3M_EUNAVAILABLE, O3M_EDEADLINE, ...)
 * with its message, or the transport's (O3M_EUNAVAILABLE when the active
 * participant cannot be reached, O3M_EDEADLINE). Nothing here allocates per
 * call beyond what the RPC layer does. */
#ifndef AP_CLIENT_H
#define AP_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "o3m_config.h"
#include "o3m_error.h"
#include "o3m_fingerprint.h"

typedef struct ap_client ap_client;

typedef struct ap_client_options {
  /* "127.0.0.1:7000", "unix:/path", ... (required); or a comma-separated
   * list of up to 8 addresses (AP replicas): a call goes to the current one
   * and, when that is UNAVAILABLE or misses its deadline, to the next ones
   * in turn, the first that answers becoming the current one (failover). */
  const char *target;
  int insecure;            /* 1: plaintext; the TLS fields must then be NULL */
  const char *ca_file;     /* federation CA that signed the server's certificate */
  const char *cert_file;   /* client certificate and key (both or neither) */
  const char *key_file;
  /* Name expected in the server certificate instead of the target's host:
   * the active party's name, since certificates name parties. Required
   * with TLS (ap_client_create refuses NULL or ""): the target's host would
   * be matched by any party's trial certificate (localhost, 127.0.0.1). */
  const char *server_name;
  int deadline_ms;         /* per call; default 5000 */
  int wait_for_ready;      /* 1: a call waits (up to its deadline) for the server */
} ap_client_options;

/* Everything NULL/0 except deadline_ms = 5000. wait_for_ready stays 0 on
 * purpose: a call to an AP that cannot be reached fails at once with
 * O3M_EUNAVAILABLE, so that a serving program can fall back within its own
 * latency budget instead of waiting out the deadline, a list of replicas
 * fails over at once, and a health probe says "down" without waiting. The
 * price: after a failed connect, also a transient one on a loaded machine,
 * every call on that client fails at once until gRPC's reconnect backoff
 * ends (about 1 s at first, at most 2 s: o3m_rpc caps it). A program that
 * would rather wait, such as one started beside the AP, or a test of a
 * daemon that is already up, sets wait_for_ready = 1 (the installed
 * library's and the Python client's wait-for-ready option). */
void ap_client_options_default(ap_client_options *o);

/* Fills the connection fields from a federation config: target = the active
 * party's address, server_name = its name, ca_file = the federation CA and,
 * if as is not NULL, cert_file and key_file of the client or party named as
 * (O3M_EINVAL naming it if there is no such client or party, or it has no
 * cert and key in the config). Other fields are left as they are. The
 * strings belong to cfg, which must outlive the options. */
int ap_client_options_from_config(ap_client_options *o, const o3m_config *cfg, const char *as,
                                  o3m_err *e);

/* Points the options at target instead of the active party. When target is
 * the address of a party of cfg, server_name becomes that party's name, so
 * the TLS check expects the certificate of the daemon that really listens
 * there (`o3m-cli --config F --as bank health --target <bank's address>`);
 * otherwise server_name is left as it is. cfg may be NULL. The strings must
 * outlive the options. */
void ap_client_options_set_target(ap_client_options *o, const o3m_config *cfg,
                                  const char *target);

/* How a program names its connection: the same choices as o3m-cli's
 * options (--config F --as NAME | [--config F] --cert FILE --key FILE
 * --ca FILE, --insecure, --target, --server-name, --deadline-ms), so that
 * o3m-cli and the installed library (lib/o3m.c) open a client by one code
 * path. Every field may be NULL or 0. */
typedef struct ap_client_conn {
  const char *config;      /* federation config: the AP's address and name, the CA */
  const char *as;          /* [client NAME] or [party NAME] of config: cert and key */
  const char *cert, *key;  /* instead of as: this client's certificate and key */
  const char *ca;          /* overrides the config's CA */
  const char *target;      /* overrides the address (health can probe any daemon) */
  const char *server_name; /* overrides the name expected in the server's certificate */
  int insecure;            /* 1: plaintext, no certificates (trials only) */
  int deadline_ms;         /* per call, 1..86400000; 0 keeps the default 5000 */
  int wait_for_ready;      /* 1: a call waits (up to its deadline) for the server */
  char *fix;               /* optional, fix_n bytes: the openssl lines that fix a party */
  size_t fix_n;            /* certificate refused for its SANs (o3m_cert_san_fix) */
} ap_client_conn;

/* Checks the combination without touching a file: as needs config and
 * excludes cert/key, cert and key go together, one of as, cert or insecure
 * is given, config or target is given, without insecure config or
 * server_name is given (the name the AP's certificate must carry: the
 * config's active party by default), deadline_ms is in range. O3M_EINVAL
 * with a message naming the options (in o3m-cli's spelling) otherwise. */
int ap_client_conn_check(const ap_client_conn *a, o3m_err *e);

/* Opens a client as o3m-cli does: checks a (ap_client_conn_check), loads
 * the config if one is named, fills the options from it, applies the
 * overrides, checks the client's own certificate as the daemons check theirs
 * (o3m_cert_check_party: key, validity, chain to the CA, and with as the
 * CN; with as naming a party, also its name among the SANs,
 * o3m_cert_check_san, the fix then in a->fix), then creates the client. On
 * success *out is the client and *cfg_out the loaded config (NULL without
 * one), which the caller destroys after the client (the client's strings
 * point into it). On failure both are NULL and nothing is left allocated;
 * the error is the check's, the config loader's (O3M_IO, O3M_PARSE, ...),
 * the certificate check's (O3M_TLS) or ap_client_create's. */
int ap_client_open(ap_client **out, o3m_config **cfg_out, const ap_client_conn *a, o3m_err *e);

/* Creates the client (gRPC connects lazily, at the first call). Errors:
 * O3M_EINVAL, O3M_EIO (a TLS file cannot be read), O3M_ETLS, O3M_ENOMEM.
 * On failure *out is NULL. */
int ap_client_create(ap_client **out, const ap_client_options *o, o3m_err *e);

/* NULL is accepted. */
void ap_client_destroy(ap_client *c);

typedef struct ap_recommendation {
  uint64_t decision;  /* ticket for ap_client_reward */
  int candidate;      /* index into the items passed */
  const char *item;   /* items[candidate], valid until the next call on c */
  double score;
  uint64_t mask_id;
  uint64_t updates;   /* the model's reward count the decision saw */
  /* Decided by the AP's local model because passive parties were missing
   * (ap_fallback.h); their names, valid until the next call on c. */
  int degraded;
  size_t n_missing;
  char *const *missing;
} ap_recommendation;

/* Recommend among K candidate items for user. arms: NULL, or K arm indices
 * for the disjoint model. own_features: NULL (n_own = 0), or K x d_0 values,
 * row-major, the active party's own features of the candidates. */
int ap_client_recommend(ap_client *c, const char *user, int K, const char *const *items,
                        const uint32_t *arms, const double *own_features, size_t n_own,
                        ap_recommendation *out, o3m_err *e);

/* Rewards a decision; *updates (may be NULL) is the policy's update count
 * after it. */
int ap_client_reward(ap_client *c, uint64_t decision, double reward, uint64_t *updates,
                     o3m_err *e);

typedef struct ap_stats {
  uint64_t rounds;    /* decisions issued */
  uint64_t updates;   /* rewards applied */
  uint32_t pending;   /* decisions waiting for a reward */
  uint64_t expired;   /* decisions dropped without a reward (expired or evicted) */
  double theta_norm;  /* shared model; 0 for disjoint */
  uint64_t degraded_rounds; /* decisions of the local model (ap_fallback.h) */
  uint64_t local_updates;   /* rewards the local model learned */
  char algo[16];
  char model[16];
  uint64_t reloads;         /* own table reloads swapped in */
  uint64_t reloads_refused; /* own table reloads refused, the old tables kept */
  int64_t last_reload_ms;   /* Unix time of the last swap, ms (0: none) */
  /* The AP's cache of summed item parts (ActiveStats.item_cache_*). */
  uint64_t cache_hits, cache_misses, cache_size, cache_capacity;
  /* Its resets, LRU evictions and batches asked again on stale epochs. */
  uint64_t cache_resets, cache_evictions, cache_stale_retries;
  /* Valid rounds whose user or an item the AP's own tables lack. */
  uint64_t unknown_user_rounds, unknown_item_rounds;
  /* Rounds gathered in slices, and slices gathered again on an epoch
   * change (ActiveStats.sliced_rounds, slice_restarts). */
  uint64_t sliced_rounds, slice_restarts;
  /* Who the counters are of (ActiveStats.per_client): 1 when the AP
   * answered this client's own view (client its [client NAME]; the
   * federation-wide fields above are then 0), 0 for the operator's whole
   * view (and from an AP older than the split). */
  int per_client;
  char client[O3M_CONFIG_MAX_NAME + 1];
  uint64_t rewards; /* rewards applied: the client's own, or all of them */
  uint64_t fanouts; /* MaskBatch fan-outs (the operator's view only) */
  /* Item ids asked of the passive parties, and rounds that waited because
   * their client was over its budget of them (ActiveStats.uncached_ids,
   * over_budget_waits). */
  uint64_t uncached_ids, over_budget_waits;
} ap_stats;

int ap_client_stats(ap_client *c, ap_stats *out, o3m_err *e);

/* What a Reload answered (o3m.proto, ReloadReply). */
typedef struct ap_reload_info {
  uint64_t reloads;        /* swaps of the tables since the daemon started */
  uint64_t refused;        /* reloads refused, the old tables kept */
  int64_t last_reload_ms;  /* Unix time of the last swap, ms */
  uint32_t users, items;   /* rows now served */
} ap_reload_info;

/* Reload of the feature tables of the daemon at the target: passive 1
 * calls o3m.v1.Passive/Reload, 0 o3m.v1.Active/Reload. Answered only to
 * that party's own certificate (O3M_EPERM otherwise); a bad file is the
 * load's code (O3M_EPARSE, O3M_ERANGE, ...) with its file:line message. */
int ap_client_reload(ap_client *c, int passive, ap_reload_info *out, o3m_err *e);

typedef struct ap_info {
  int role;           /* O3m__V1__Role value: 3 = active */
  uint32_t protocol;
  uint32_t party;
  uint32_t dim;
  uint32_t n_parties; /* entries of the partition */
  uint64_t mask_id;
  char name[O3M_CONFIG_MAX_NAME + 1];
  /* The daemon's federation fingerprint in hex (o3m_fingerprint.h), or ""
   * when the reply carries none of the right length (an older build). */
  char fingerprint[O3M_FINGERPRINT_HEX];
} ap_info;

/* Info of the Active service. */
int ap_client_info(ap_client *c, ap_info *out, o3m_err *e);

/* The standard gRPC health check (grpc.health.v1.Health/Check) for service
 * ("" = the whole server). *serving is 1 for SERVING, else 0 with the status
 * name in status (at least 32 bytes; may be NULL). Every o3m_rpc server
 * answers it, so this probes any O3M daemon; behind mutual TLS it needs a
 * client certificate like any call. */
int ap_client_health(ap_client *c, const char *service, int *serving, char *status,
                     size_t status_len, o3m_err *e);

#endif
