/* o3m.h -- the installed C API of O3M: the bandit engine and the client of
 * an active participant.
 *
 * This is the one header a program outside the project includes
 * (`#include <o3m/o3m.h>`, flags from `pkg-config --cflags --libs o3m`). It
 * is a small facade over the internal modules (policy/o3m_policy.h and
 * active_participant/ap_client.h), which are not installed and may change
 * between releases; what is declared here changes only with the major
 * version, which is also the shared library's soname (libo3m.so.MAJOR).
 *
 * Shape of the API:
 *   - Two opaque handles, o3m_engine (LinUCB / linear Thompson sampling, in
 *     process) and o3m_ap_client (Recommend, Reward, Stats and the health
 *     check of a running o3m-active, over gRPC with mutual TLS).
 *   - Both are configured by a NULL-terminated list of "key=value" strings,
 *     so that options can be added without changing a struct's layout. The
 *     engine's keys are the [policy] keys of the federation config; the
 *     client's are o3m-cli's long options (see below). An unknown key, a
 *     malformed value or a bad combination is O3M_EINVAL with a message
 *     naming it, and nothing is created.
 *   - Every function that can fail returns 0 or a negative O3M_E* code from
 *     o3m_error.h and, when e is not NULL, fills e with the code and a
 *     sentence naming the problem (o3m_err_message(e)). A failed call
 *     changes nothing that the caller can observe.
 *   - The two public structs below (o3m_recommendation, o3m_stats) are
 *     plain values the caller allocates; their layout is fixed for a major
 *     version.
 *
 * Threads: a handle is not thread-safe; use one per thread, or serialize
 * calls on it. Handles share nothing, so any number may live in a process.
 * (An o3m_ap_client keeps its last reply until its next call: two calls at
 * once on one client free one reply twice. The Python APClient serializes
 * its calls with a lock of its own.)
 *
 * The text between the O3M_CDEF_BEGIN and O3M_CDEF_END lines is plain
 * declarations without macros: the Python package (python/o3m) hands it to
 * cffi as it is, so the Python binding is this header, not a copy of it. */
#ifndef O3M_O3M_H
#define O3M_O3M_H

#include <stddef.h>
#include <stdint.h>

#include "o3m_error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* O3M_CDEF_BEGIN */

/* The release ("0.4.0", the VERSION file of the build) and the wire
 * protocol version the client speaks. */
const char *o3m_version(void);
int o3m_protocol_version(void);

/* ---- the engine ----------------------------------------------------------
 *
 * Keys (defaults in parentheses; the federation config's [policy] keys):
 *   algo=linucb|lints (linucb)      model=shared|disjoint (shared)
 *   d=N       context dimension, required
 *   n_arms=N  disjoint: number of arms, required; shared: ignored
 *   max_candidates=N (1000)         lambda=X ridge, > 0 (1)
 *   alpha=X   LinUCB width, >= 0 (0.5)   v=X LinTS scale, >= 0 (0.01)
 *   seed=N    LinTS sampler seed (1)     refactor_every=N (1000)
 *
 * Contexts are float64, row-major: X is K x d, row k the context of
 * candidate k. arms[k] is candidate k's arm for the disjoint model (NULL
 * means arms[k] = k); the shared model ignores arms. Ties within a relative
 * 1e-10 of the best score go to the lowest index, so decisions are
 * reproducible. */
typedef struct o3m_engine o3m_engine;

/* Creates an engine; on failure *out is NULL. */
int o3m_engine_create(o3m_engine **out, const char *const *options, o3m_err *e);
/* NULL is accepted. */
void o3m_engine_destroy(o3m_engine *g);

int o3m_engine_dim(const o3m_engine *g);
/* 1 for the shared model, n_arms for the disjoint one. */
int o3m_engine_n_models(const o3m_engine *g);
int o3m_engine_max_candidates(const o3m_engine *g);
/* Number of updates applied so far. */
uint64_t o3m_engine_updates(const o3m_engine *g);

/* Chooses among K candidates: *chosen gets the candidate index and, if
 * score is not NULL, *score its score (LinUCB: mean plus alpha times the
 * width; LinTS: the sampled score). O3M_EINVAL for K outside
 * 1..max_candidates or a bad arm, O3M_ENONFINITE for a non-finite context;
 * the engine (its sampler included) is unchanged on error. */
int o3m_engine_choose(o3m_engine *g, int K, const double *X, const int *arms, int *chosen,
                      double *score, o3m_err *e);

/* Per-candidate quantities without sampling: mean[k] = x_k . theta and
 * var[k] = x_k^T Lambda^{-1} x_k (the squared LinUCB width before alpha).
 * Either output may be NULL. */
int o3m_engine_scores(o3m_engine *g, int K, const double *X, const int *arms, double *mean,
                      double *var, o3m_err *e);

/* Learns the reward of context x (d values) played on arm (ignored for the
 * shared model). The update is checked first: a non-finite or overflowing
 * x or reward is O3M_ENONFINITE, a bad arm O3M_EINVAL, and the engine is
 * then unchanged. */
int o3m_engine_update(o3m_engine *g, int arm, const double *x, double reward, o3m_err *e);

/* Copies theta (d values) of the shared model or of one arm. */
int o3m_engine_theta(const o3m_engine *g, int arm, double *theta, o3m_err *e);

/* The engine's whole state as bytes (the policy state image, little-endian
 * on every host), to save it and load it into an engine created with the
 * same algo, model, d, n_arms and lambda: the two then decide alike.
 * export: O3M_EINVAL if len < o3m_engine_state_size(g). import: O3M_ECORRUPT
 * or O3M_EDIM (naming the field), the state unchanged. */
size_t o3m_engine_state_size(const o3m_engine *g);
int o3m_engine_state_export(const o3m_engine *g, void *buf, size_t len, o3m_err *e);
int o3m_engine_state_import(o3m_engine *g, const void *buf, size_t len, o3m_err *e);

/* ---- the client of an active participant -------------------------------
 *
 * Keys, as o3m-cli's options:
 *   config=FILE       the federation config: the AP's address and name, CA
 *   as=NAME           the cert and key of [client NAME] (or [party NAME])
 *   cert=FILE key=FILE  this client's certificate and key (instead of as)
 *   ca=FILE           the federation CA (overrides the config's)
 *   target=ADDR       call ADDR instead of the active party
 *   server-name=NAME  expect NAME in the server's certificate
 *   deadline-ms=N     give up a call after N ms (5000)
 *   wait-for-ready=1  a call waits (up to its deadline) for the server;
 *                     by default it fails at once (O3M_EUNAVAILABLE) while
 *                     the server cannot be reached, and for up to 2 s
 *                     after a failed connect, so a program can fall back
 *   insecure=1        plaintext gRPC, no certificates (trials only)
 * As with o3m-cli: config and as, or cert, key and ca, or insecure. The
 * client's certificate is checked when the client is opened (O3M_ETLS
 * naming the problem); the connection is made at the first call. The
 * active participant answers recommend, reward and stats only to a client
 * its config names ([client NAME]); others get O3M_EPERM. */
typedef struct o3m_ap_client o3m_ap_client;

/* The longest user or item id o3m_ap_client_recommend sends, in bytes (the
 * federation's one id limit), and one past the largest arm it sends: it
 * refuses a longer id or a larger arm (O3M_EINVAL) without calling. An arm
 * is unsigned: -1 passed from a signed type is 4294967295 and refused. */
#define O3M_API_MAX_ID 128
#define O3M_API_MAX_ARMS 1000000

typedef struct o3m_recommendation {
  uint64_t decision; /* ticket for o3m_ap_client_reward */
  int candidate;     /* index into the items passed */
  double score;
  uint64_t mask_id;  /* the federation's current mask */
} o3m_recommendation;

typedef struct o3m_stats {
  uint64_t rounds;   /* decisions issued */
  uint64_t updates;  /* rewards applied */
  uint32_t pending;  /* decisions waiting for a reward */
  uint64_t expired;  /* decisions dropped without a reward */
  double theta_norm; /* shared model; 0 for disjoint */
  char algo[16];
  char model[16];
} o3m_stats;

/* Opens a client; on failure *out is NULL. */
int o3m_ap_client_open(o3m_ap_client **out, const char *const *options, o3m_err *e);
/* NULL is accepted. */
void o3m_ap_client_close(o3m_ap_client *c);

/* Recommends one of K candidate items for user. arms: NULL, or K arm
 * indices (disjoint model), each below O3M_API_MAX_ARMS. user and every
 * item: at most O3M_API_MAX_ID bytes, no item NULL. own_features: NULL
 * (n_own = 0) or the active party's own feature rows of the candidates,
 * K x d_0 row-major. A refused argument is O3M_EINVAL naming it. Errors are
 * the active participant's (O3M_EINVAL, O3M_EUNAVAILABLE, O3M_EDEADLINE,
 * O3M_EPERM, ...) with its message. An unknown user or item is not an
 * error by default: the passive parties answer it with dummy rows and never
 * say, and the round is decided ([policy] unknown_items = serve). Under
 * unknown_items = refuse an item that the active party's own item table
 * lacks is O3M_ENOTFOUND naming it, and nothing changes. An unknown user is
 * never refused (only counted on the active party's metrics). */
int o3m_ap_client_recommend(o3m_ap_client *c, const char *user, int K, const char *const *items,
                            const uint32_t *arms, const double *own_features, size_t n_own,
                            o3m_recommendation *out, o3m_err *e);

/* 1 if the last successful o3m_ap_client_recommend on c was degraded: a
 * passive party was missing and the active participant's local model
 * decided on its own features alone (its reward teaches that model only);
 * then missing (may be NULL; len bytes, cut to fit) gets the missing
 * parties' names, comma-separated. 0 otherwise (missing gets ""). A
 * function rather than a field, so o3m_recommendation keeps its layout. */
int o3m_ap_client_degraded(const o3m_ap_client *c, char *missing, size_t len);

/* Rewards a decision once; *updates (may be NULL) is the policy's update
 * count after it. O3M_ENOTFOUND / O3M_EEXPIRED for an unknown, already
 * rewarded or expired decision. */
int o3m_ap_client_reward(o3m_ap_client *c, uint64_t decision, double reward, uint64_t *updates,
                         o3m_err *e);

/* The active participant's counters. A [client NAME] is answered its own
 * view: rounds, pending and expired count its own decisions alone, updates
 * and theta_norm are the shared model's (SECURITY.md, "Stats by who
 * asks"); the operator (the active party's own certificate, a name of
 * [federation] metrics_clients) is answered the whole federation's. */
int o3m_ap_client_stats(o3m_ap_client *c, o3m_stats *out, o3m_err *e);

/* 1 if the last successful o3m_ap_client_stats on c was a client's own
 * view; then client (may be NULL; len bytes, cut to fit) gets the client's
 * name. 0 for the whole federation's view (client gets ""), also before
 * any call and from an active participant older than the split. A
 * function rather than a field, so o3m_stats keeps its layout. */
int o3m_ap_client_stats_per_client(const o3m_ap_client *c, char *client, size_t len);

/* The standard gRPC health check of the server: *serving is 1 or 0. */
int o3m_ap_client_health(o3m_ap_client *c, int *serving, o3m_err *e);

/* O3M_CDEF_END */

#ifdef __cplusplus
}
#endif

#endif
