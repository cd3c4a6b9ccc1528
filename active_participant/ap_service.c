/* ap_service.c -- the active participant's service (see ap_service.h).
 *
 * The file has six parts: two small hash tables (the disjoint model's
 * catalog, item id -> arm, and the per-round set that finds duplicate item
 * ids), the start-up fetch of the AP's block from the mask generator, the
 * clients of the passive participants, the four handlers, and the lifecycle
 * (create, run, shutdown, destroy).
 *
 * Every buffer a round needs is sized at create: for max_candidates the K x d_0
 * own features and the duplicate set, and for the largest batch of rounds
 * the summed masked contexts Y and the arm indices (see "Recommend" below).
 * The handlers borrow the request's strings (they live in the server arena
 * until the handler returns, or for a deferred Recommend until it is
 * answered) and point the reply into the service's own storage, so a round
 * allocates nothing in this module. */
#include "ap_service.h"
#include "o3m_daemon.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ap_checkpoint.h"
#include "ap_pending.h"
#include "ap_policy.h"
#include "o3m.pb-c.h"
#include "o3m_access.h"
#include "o3m_blas.h"
#include "o3m_hash.h"
#include "o3m_log.h"
#include "o3m_mask.h"
#include "o3m_party_block.h"
#include "o3m_rpc.h"
#include "o3m_wire.h"
#include "o3m_features.h"

/* Largest catalog file read, and the longest item id in it (the limit of the
 * feature tables, so that every catalog id can also be a table id). */
#define CATALOG_MAX_FILE (256u << 20)
#define CATALOG_MAX_ID O3M_FEATURES_MAX_ID
/* Backoff between start-up attempts to reach the passive parties: first
 * and largest pause. */
#define PMG_BACKOFF_FIRST_MS 100
#define PMG_BACKOFF_MAX_MS 2000
/* Calls kept requested per method; with handlers running one at a time this
 * is how many calls can be queued without waiting for gRPC to hand over
 * the next one. A load test runs 32 clients at once. */
#define SERVER_SLOTS 32
/* Recommend's own slots, which is also how many rounds can wait for the next
 * fan-out: every waiting round holds a slot (see "Recommend" below). Twice
 * the load test's 32 clients, so that a full batch can be answered while as
 * many new calls queue. */
#define RECOMMEND_SLOTS 64
/* A passive participant's channel is rebuilt after it has been unavailable
 * this long, and then at most this often (see peer_reset). */
#define PEER_RESET_MS 1000
/* Failed rounds are logged at most once per this period. */
#define WARN_PERIOD_MS 1000
/* After a failed periodic checkpoint, the next attempt waits this long. */
#define CKPT_RETRY_MS 10000

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static uint64_t hash_str(const char *s) { return o3m_hash_bytes(s, strlen(s), 0); }

/* The smallest power of two >= 2 n (load factor <= 1/2), at least 16. */
static size_t table_size(size_t n) {
  size_t cap = 16;
  while (cap < 2 * n) cap <<= 1;
  return cap;
}

/* ================================================================ catalog */

/* The disjoint model's arms: line i of the items file is arm i. The ids live
 * in one buffer (text, with the line ends replaced by NULs); index is an
 * open-addressing table of arm + 1 (0 = empty) with linear probing. */
typedef struct catalog {
  char *text;
  const char **ids; /* n pointers into text */
  int n;
  int *index;
  size_t cap; /* power of two */
} catalog;

static void catalog_free(catalog *c) {
  free(c->text);
  free(c->ids);
  free(c->index);
  memset(c, 0, sizeof *c);
}

/* The arm of id, or -1. */
static int catalog_find(const catalog *c, const char *id) {
  size_t mask = c->cap - 1;
  for (size_t i = (size_t)hash_str(id) & mask;; i = (i + 1) & mask) {
    int a = c->index[i];
    if (a == 0) return -1;
    if (strcmp(c->ids[a - 1], id) == 0) return a - 1;
  }
}

/* Reads the catalog file at path: one item id per line (LF or CRLF), 1 to
 * CATALOG_MAX_ID bytes without NUL, no duplicates, no empty line, at least
 * one line and at most max_arms. Errors name the file and line. */
static int catalog_load(catalog *c, const char *path, int max_arms, o3m_err *e) {
  memset(c, 0, sizeof *c);
  FILE *f = fopen(path, "rb");
  if (!f) return o3m_err_set(e, O3M_EIO, "%s: cannot open the items catalog: %s", path,
                             strerror(errno));
  size_t cap = 1 << 16, len = 0;
  char *buf = malloc(cap + 1);
  int rc = 0;
  if (!buf) {
    fclose(f);
    return o3m_err_set(e, O3M_ENOMEM, "%s: out of memory", path);
  }
  for (;;) {
    if (len == cap) {
      if (cap >= CATALOG_MAX_FILE) {
        rc = o3m_err_set(e, O3M_EPARSE, "%s: items catalog larger than %u bytes", path,
                         CATALOG_MAX_FILE);
        break;
      }
      char *nb = realloc(buf, 2 * cap + 1);
      if (!nb) {
        rc = o3m_err_set(e, O3M_ENOMEM, "%s: out of memory", path);
        break;
      }
      buf = nb;
      cap *= 2;
    }
    size_t got = fread(buf + len, 1, cap - len, f);
    len += got;
    if (got == 0) {
      if (ferror(f)) rc = o3m_err_set(e, O3M_EIO, "%s: read error", path);
      break;
    }
  }
  fclose(f);
  if (rc < 0) {
    free(buf);
    return rc;
  }
  buf[len] = '\0';
  c->text = buf;

  /* Count lines; a final line end is not an extra (empty) line. */
  int n = 0;
  for (size_t i = 0; i < len; i++)
    if (buf[i] == '\n') n++;
  if (len > 0 && buf[len - 1] != '\n') n++;
  if (n < 1) {
    catalog_free(c);
    return o3m_err_set(e, O3M_EPARSE, "%s: the items catalog is empty", path);
  }
  if (n > max_arms) {
    catalog_free(c);
    return o3m_err_set(e, O3M_EPARSE, "%s: %d items, at most %d arms are supported", path, n,
                       max_arms);
  }
  c->ids = malloc(sizeof *c->ids * (size_t)n);
  c->cap = table_size((size_t)n);
  c->index = calloc(c->cap, sizeof *c->index);
  if (!c->ids || !c->index) {
    catalog_free(c);
    return o3m_err_set(e, O3M_ENOMEM, "%s: out of memory", path);
  }
  char *p = buf;
  for (int line = 1; line <= n; line++) {
    char *end = memchr(p, '\n', (size_t)(buf + len - p));
    if (!end) end = buf + len;
    *end = '\0';
    size_t l = (size_t)(end - p);
    if (l > 0 && p[l - 1] == '\r') p[--l] = '\0';
    if (l == 0) {
      catalog_free(c);
      return o3m_err_set(e, O3M_EPARSE, "%s:%d: empty item id", path, line);
    }
    if (l > CATALOG_MAX_ID || strlen(p) != l) {
      catalog_free(c);
      return o3m_err_set(e, O3M_EPARSE, "%s:%d: item id longer than %d bytes or containing NUL",
                         path, line, CATALOG_MAX_ID);
    }
    if (c->n > 0 && catalog_find(c, p) >= 0) {
      int first = catalog_find(c, p) + 1;
      catalog_free(c);
      return o3m_err_set(e, O3M_EPARSE, "%s:%d: duplicate item id (first on line %d)", path,
                         line, first);
    }
    c->ids[c->n] = p;
    size_t mask = c->cap - 1, i = (size_t)hash_str(p) & mask;
    while (c->index[i]) i = (i + 1) & mask;
    c->index[i] = ++c->n;
    p = end + 1;
  }
  return 0;
}

/* ================================================================ duplicate set */

/* Finds duplicate item ids in one request in O(K). Entries carry the round's
 * generation number, so the table is never cleared: an entry of an older
 * generation counts as empty. */
typedef struct dup_entry {
  uint64_t gen;
  uint64_t hash;
  int k;
} dup_entry;

typedef struct dupset {
  dup_entry *t;
  size_t cap;
  uint64_t gen;
} dupset;

/* Returns -1 if the K ids are distinct, else the index of the first id that
 * repeats an earlier one, with that earlier index in *first. */
static int dupset_find(dupset *s, int K, char *const *ids, int *first) {
  s->gen++;
  size_t mask = s->cap - 1;
  for (int k = 0; k < K; k++) {
    uint64_t h = hash_str(ids[k]);
    size_t i = (size_t)h & mask;
    for (;; i = (i + 1) & mask) {
      dup_entry *en = &s->t[i];
      if (en->gen != s->gen) {
        en->gen = s->gen;
        en->hash = h;
        en->k = k;
        break;
      }
      if (en->hash == h && strcmp(ids[en->k], ids[k]) == 0) {
        *first = en->k;
        return k;
      }
    }
  }
  return -1;
}

/* ================================================================ service */

/* A passive participant. The client can be rebuilt (peer_reset), so the
 * peer keeps its own copies of the strings its client config points to. */
typedef struct peer {
  o3m_rpc_client *client; /* NULL after a failed rebuild */
  char name[O3M_CONFIG_MAX_NAME + 1];
  int slot;
  double max_norm; /* the party's bound on its masked parts (o3m_config.h) */
  o3m_rpc_client_config cc;
  char *target, *ca, *cert, *key;
  int64_t failing_since_ms; /* first UNAVAILABLE of the current outage, or 0 */
  int64_t last_reset_ms;
} peer;

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

static void peer_free(peer *p) {
  o3m_rpc_client_destroy(p->client);
  free(p->target);
  free(p->ca);
  free(p->cert);
  free(p->key);
  memset(p, 0, sizeof *p);
}

/* Replaces the peer's client by a new one, with a new channel. Why: with
 * gRPC 1.51 a channel whose first connection attempts were refused was
 * seen to fail every call that does not wait for it for about 30 s after
 * the peer came up (gRPC's minimum interval between re-resolutions of a
 * target), while a new channel connects on its first call. On failure
 * p->client is NULL (rounds then fail with UNAVAILABLE naming the peer) and
 * e says why. */
static int peer_reset(peer *p, o3m_err *e) {
  o3m_rpc_client_destroy(p->client);
  p->client = NULL;
  p->last_reset_ms = now_ms();
  return o3m_rpc_client_create(&p->client, &p->cc, e);
}

/* Runs after each call to a peer: after UNAVAILABLE lasting at least
 * PEER_RESET_MS, and then at most once per PEER_RESET_MS, the peer's
 * channel is rebuilt (see peer_reset), so a passive participant that was
 * down when the AP started is used within about a second of coming up. */
static void peer_note(peer *p, int rc) {
  if (rc != O3M_EUNAVAILABLE) {
    if (rc == 0) p->failing_since_ms = 0;
    return;
  }
  int64_t t = now_ms();
  if (p->failing_since_ms == 0) p->failing_since_ms = t;
  if (t - p->failing_since_ms >= PEER_RESET_MS && t - p->last_reset_ms >= PEER_RESET_MS) {
    o3m_err e;
    o3m_err_clear(&e);
    if (peer_reset(p, &e) < 0)
      o3m_log_warn("passive party '%s': cannot rebuild its channel: %s", p->name,
                   o3m_err_message(&e));
  }
}

/* A Recommend call that passed validation and waits, deferred, for the next
 * batch. call and req stay valid until the call is answered (o3m_rpc.h). */
typedef struct queued {
  o3m_rpc_call *call;
  const O3m__V1__RecommendRequest *req;
  int K;
  int *arms; /* k_max entries: the disjoint model's arm of each candidate */
  int rc;    /* during a batch: 0, or why this round alone failed */
} queued;

/* Why the service stopped itself. Each cause has its own words in every
 * message that reports the stop (the reward refusals, the last state line,
 * the daemon's exit line), so that an operator looks at the right thing. */
typedef enum stop_cause {
  STOP_NONE = 0,
  STOP_DISK,   /* a journal write or sync failed */
  STOP_DAMAGED /* the model in memory failed its health check at a checkpoint */
} stop_cause;

static const char *stop_cause_text(stop_cause c) {
  switch (c) {
  case STOP_DISK: return "a disk error (the reward journal failed)";
  case STOP_DAMAGED: return "damage to the model in memory (its checkpoint was refused)";
  case STOP_NONE: break;
  }
  return "no error";
}

struct ap_service {
  char name[O3M_CONFIG_MAX_NAME + 1];
  int d, d0, k_max;
  int slot; /* own party index in column order (0 in the usual layout) */
  o3m_partition part;
  /* The bounds of "Bounded contexts" (o3m_config.h): this party's own
   * max_norm, and sqrt(sum_j max_norm_j^2), the bound of a summed context. */
  double max_norm, sum_norm;
  uint32_t *dims_buf; /* part.m entries, for Info replies */

  ap_policy *policy;
  ap_algo algo;
  ap_model_kind model;
  int n_arms; /* disjoint only; 0 for shared */
  catalog cat;
  double reward_min, reward_max;
  int expiry_s;

  o3m_features *own; /* NULL when the features come in the requests */
  o3m_block *block;
  uint64_t mask_id;

  int n_peers;
  peer *peers;

  ap_pending *pending;

  /* Round buffers, sized for k_max at create. */
  double *X0; /* k_max x d0 */
  dupset dup;

  /* Recommend batching (batch_init; see "Recommend" below). */
  queued queue[RECOMMEND_SLOTS]; /* deferred rounds in arrival order */
  int n_queued;
  int *arms_pool;                /* RECOMMEND_SLOTS x k_max, queue[i].arms */
  int batch_rows;                /* most candidate rows of one MaskBatch */
  double *Y;                     /* batch_rows x d: the batch's sums Q x */
  O3m__V1__MaskQuery mq[O3M_WIRE_MAX_BATCH];
  O3m__V1__MaskQuery *mq_ptr[O3M_WIRE_MAX_BATCH];
  int Kb[O3M_WIRE_MAX_BATCH];    /* candidates of each round of the batch */
  uint64_t fanouts;              /* batches sent to the passive parties */

  o3m_access *access; /* who may call what: ap_access below */
  o3m_rpc_server *server;
  int ran;

  /* Counters. */
  uint64_t rounds;        /* decisions issued */
  uint64_t failed_rounds; /* Recommend calls refused or failed */
  uint64_t peer_failures; /* rounds failed because of a passive participant */
  int64_t last_warn_ms;
  uint64_t warn_suppressed;

  /* Durability (NULL/0 without a state_dir; see ap_service.h). */
  char *state_dir;
  ap_checkpoint *ckpt;
  /* Why the service stopped itself (refusing rewards meanwhile), or
   * STOP_NONE; see stop_cause_text. */
  stop_cause stopped;
  int64_t ckpt_retry_ms;    /* no periodic checkpoint before this (after a failure) */
  uint64_t checkpoints;     /* written since start */
  uint64_t ckpt_failures;
};

void ap_service_options_default(ap_service_options *opt) {
  memset(opt, 0, sizeof *opt);
  opt->pmg_timeout_s = 60;
}

int ap_service_port(const ap_service *s) { return o3m_rpc_server_port(s->server); }

uint64_t ap_service_mask_id(const ap_service *s) { return s->mask_id; }

/* Logs a failed round at most once per WARN_PERIOD_MS, with the number of
 * failures left out since the last line. The message is the one sent to the
 * caller, which never quotes a feature or a reward. */
static void warn_round(ap_service *s, const o3m_err *e) {
  int64_t t = now_ms();
  if (s->last_warn_ms != 0 && t - s->last_warn_ms < WARN_PERIOD_MS) {
    s->warn_suppressed++;
    return;
  }
  if (s->warn_suppressed)
    o3m_log_warn("round failed: %s: %s (%llu similar failures not logged)", o3m_errname(e->code),
                 o3m_err_message(e), (unsigned long long)s->warn_suppressed);
  else
    o3m_log_warn("round failed: %s: %s", o3m_errname(e->code), o3m_err_message(e));
  s->last_warn_ms = t;
  s->warn_suppressed = 0;
}

/* ---------------------------------------------------------------- Info */

static int h_info(void *ctx, o3m_rpc_call *call, const ProtobufCMessage *req_,
                  ProtobufCMessage *rep_, o3m_err *e) {
  (void)call, (void)req_, (void)e;
  ap_service *s = ctx;
  o3m_wire_info_fill((O3m__V1__NodeInfo *)rep_, O3M__V1__ROLE__ROLE_ACTIVE, s->slot, &s->part,
                     s->dims_buf, s->mask_id, s->name);
  return 0;
}

/* ---------------------------------------------------------------- Recommend */

/* Adaptive batching. A round costs the AP one server call and one client
 * call per passive participant, and almost all of that is gRPC, TLS and the
 * kernel, not arithmetic; and while a fan-out is in flight the single
 * serving thread waits. So Recommend does not fan out by itself: the
 * handler validates the request at once (an invalid one is answered at
 * once and changes nothing), queues it and defers the call
 * (O3M_RPC_DEFERRED). When the serving thread has taken every completion
 * that is ready, the server's idle hook (recommend_flush) sends everything
 * queued as one MaskBatch per passive participant: start them all, mask
 * the AP's own blocks meanwhile, finish them all and sum. Then each round,
 * in arrival order, is chosen, opened and answered exactly as a round on
 * its own would be. At low load a batch is the one request that arrived;
 * under load the rounds that queue while a batch is in flight make the next
 * batch, so the fan-out cost is shared by all of them.
 *
 * Identical decisions: each round's own block is masked by its own
 * o3m_block_apply of K rows, each passive participant masks each query with
 * its own call of the same shape (pp_service.c), and the parties' rows are
 * added in party order, so every sum Q x is bit for bit what an unbatched
 * round computes; the policy then sees the rounds one after the other in
 * arrival order. A Reward that arrives while rounds are queued is applied at
 * once, before those rounds are chosen, as it would be if they had arrived
 * after it.
 *
 * Failures: if a passive participant fails (or misses the deadline) every
 * round of the batch fails with its code and a message naming it, and
 * nothing changes: no pending entry, no policy call, no round counted. A
 * failure of the policy fails only its own round. */

/* Allocates the queue's arm indices and the batch buffers (the row budget
 * is the one the passive participants use, o3m_wire_mask_batch_rows). */
static int batch_init(ap_service *s, o3m_err *e) {
  s->batch_rows = o3m_wire_mask_batch_rows(s->k_max, s->d);
  if (s->batch_rows < s->k_max)
    return o3m_err_set(e, O3M_EINVAL, "[policy] max_candidates = %d with d = %d", s->k_max, s->d);
  s->arms_pool = malloc(sizeof *s->arms_pool * (size_t)RECOMMEND_SLOTS * (size_t)s->k_max);
  s->Y = malloc(sizeof *s->Y * (size_t)s->batch_rows * (size_t)s->d);
  if (!s->arms_pool || !s->Y)
    return o3m_err_set(e, O3M_ENOMEM, "batch buffers for %d candidate rows: out of memory",
                       s->batch_rows);
  for (int i = 0; i < RECOMMEND_SLOTS; i++)
    s->queue[i].arms = s->arms_pool + (size_t)i * (size_t)s->k_max;
  for (int i = 0; i < O3M_WIRE_MAX_BATCH; i++) s->mq_ptr[i] = &s->mq[i];
  return 0;
}

static void batch_free(ap_service *s) {
  free(s->arms_pool);
  free(s->Y);
  s->arms_pool = NULL;
  s->Y = NULL;
}

/* Checks everything about a request before any state is touched, and puts
 * the disjoint model's arm of each candidate into arms (k_max entries). The
 * own features are read later, by the batch: from the request, or from the
 * own tables (which have a row, or a dummy, for every id). */
static int recommend_validate(ap_service *s, const O3m__V1__RecommendRequest *req, int *arms,
                              o3m_err *e) {
  if (req->n_items < 1 || req->n_items > (size_t)s->k_max)
    return o3m_err_set(e, O3M_EINVAL, "items: %zu candidates, expected 1..%d", req->n_items,
                       s->k_max);
  int K = (int)req->n_items;
  int rc = o3m_wire_recommend_check(req, s->k_max, s->model == AP_MODEL_DISJOINT ? s->n_arms : 0,
                                    e);
  if (rc < 0) {
    /* Every finding of the check is about the caller's arguments. */
    if (e) e->code = O3M_EINVAL;
    return O3M_EINVAL;
  }
  /* Ids longer than any table can hold are refused here, before a passive
   * party is asked about them (strnlen: never read past the limit). */
  if (req->user && strnlen(req->user, O3M_CONFIG_MAX_ID + 1) > O3M_CONFIG_MAX_ID)
    return o3m_err_set(e, O3M_EINVAL, "user: longer than %d bytes", O3M_CONFIG_MAX_ID);
  for (int k = 0; k < K; k++) {
    if (!req->items[k] || !req->items[k][0])
      return o3m_err_set(e, O3M_EINVAL, "items[%d] is empty", k);
    if (strnlen(req->items[k], O3M_CONFIG_MAX_ID + 1) > O3M_CONFIG_MAX_ID)
      return o3m_err_set(e, O3M_EINVAL, "items[%d]: longer than %d bytes", k, O3M_CONFIG_MAX_ID);
  }
  int first;
  int dup = dupset_find(&s->dup, K, req->items, &first);
  if (dup >= 0)
    return o3m_err_set(e, O3M_EINVAL, "items[%d] duplicates items[%d]", dup, first);

  if (req->n_own_features > 0) {
    if (req->n_own_features != (size_t)K * (size_t)s->d0)
      return o3m_err_set(e, O3M_EINVAL, "own_features: %zu values, expected K x d_0 = %d x %d",
                         req->n_own_features, K, s->d0);
    for (size_t i = 0; i < req->n_own_features; i++)
      if (!isfinite(req->own_features[i]))
        return o3m_err_set(e, O3M_EINVAL, "own_features[%zu] is not finite", i);
    /* Each candidate's own part x^0 within this party's bound. */
    char what[O3M_CONFIG_MAX_NAME + 32];
    snprintf(what, sizeof what, "own_features of party '%s'", s->name);
    int nrc = o3m_wire_check_row_norms(what, K, s->d0, req->own_features, s->max_norm, 0, NULL, e);
    if (nrc < 0) return nrc;
  } else if (!s->own) {
    return o3m_err_set(e, O3M_EINVAL, "own_features: required (%d x %d values), this active "
                       "party has no feature tables", K, s->d0);
  }

  if (s->model == AP_MODEL_DISJOINT) {
    if (req->n_arms > 0) {
      for (int k = 0; k < K; k++) arms[k] = (int)req->arms[k];
    } else {
      for (int k = 0; k < K; k++) {
        int a = catalog_find(&s->cat, req->items[k]);
        if (a < 0)
          return o3m_err_set(e, O3M_EINVAL, "items[%d] is not in the items catalog "
                             "(and no arms were given)", k);
        arms[k] = a;
      }
    }
  }
  return 0;
}

/* Masks the own block of round q into Y (K x d): Y = X^0 (Q^0)^T, with X^0
 * from the request or, with unknown ids as dummies, from the own tables. */
static int mask_own(ap_service *s, const queued *q, double *Y) {
  const double *X0 = q->req->own_features;
  if (q->req->n_own_features == 0) {
    int rc = o3m_features_fill(s->own, q->req->user, q->K, (const char *const *)q->req->items,
                              s->X0, NULL, NULL);
    if (rc < 0) return rc;
    X0 = s->X0;
  }
  o3m_block_apply(s->block, q->K, X0, 0.0, Y);
  return 0;
}

/* The fan-out of one batch of n rounds with rows candidates in all: one
 * MaskBatch to every passive participant at once, the own blocks masked
 * while they work, and every reply checked and added, so that the rows of
 * round i in s->Y (after those of rounds 0..i-1) are its sums Q x. Every
 * call that was started is finished, whatever happens, so that no client is
 * left with a call in flight. On failure the first failing party (in party
 * order) names the error; s->Y is then garbage, and nothing else changed. A
 * round whose own features cannot be read gets q[i].rc instead. */
static int batch_gather(ap_service *s, queued *q, int n, int rows, o3m_err *e) {
  O3m__V1__MaskBatchRequest br = O3M__V1__MASK_BATCH_REQUEST__INIT;
  br.mask_id = s->mask_id;
  br.n_queries = (size_t)n;
  br.queries = s->mq_ptr;
  for (int i = 0; i < n; i++) {
    O3m__V1__MaskQuery *mq = &s->mq[i];
    o3m__v1__mask_query__init(mq);
    mq->user = q[i].req->user;
    mq->n_items = q[i].req->n_items;
    mq->items = q[i].req->items;
    s->Kb[i] = q[i].K;
    q[i].rc = 0;
  }
  s->fanouts++;

  int rc = 0, started = 0;
  o3m_err pe;
  for (; started < s->n_peers; started++) {
    peer *p = &s->peers[started];
    o3m_err_clear(&pe);
    int r = p->client ? o3m_rpc_client_start(p->client, O3M_PATH_PASSIVE_MASK_BATCH, &br.base,
                                             &o3m__v1__mask_batch_reply__descriptor, &pe)
                      : o3m_err_set(&pe, O3M_EUNAVAILABLE, "no channel (rebuilding failed)");
    if (r < 0) {
      rc = o3m_err_set(e, r, "party '%s': %s", p->name, o3m_err_message(&pe));
      peer_note(p, r);
      break;
    }
  }
  /* The own blocks, overlapped with the passive participants' work. */
  size_t off = 0;
  for (int i = 0; rc == 0 && i < n; i++) {
    double *Yi = s->Y + off * (size_t)s->d;
    q[i].rc = mask_own(s, &q[i], Yi);
    /* That round fails alone (round_decide); zeros keep the batch's sums,
     * which the other rounds' checks read, defined. */
    if (q[i].rc < 0) memset(Yi, 0, sizeof *Yi * (size_t)q[i].K * (size_t)s->d);
    off += (size_t)q[i].K;
  }
  for (int j = 0; j < started; j++) {
    peer *p = &s->peers[j];
    ProtobufCMessage *m;
    o3m_err_clear(&pe);
    int r = o3m_rpc_client_finish(p->client, &m, &pe);
    peer_note(p, r);
    if (r == 0)
      r = o3m_wire_mask_batch_reply_check((const O3m__V1__MaskBatchReply *)m, p->slot, n, s->Kb,
                                          s->d, s->mask_id, p->max_norm, &pe);
    if (r < 0) {
      if (rc == 0) rc = o3m_err_set(e, r, "party '%s': %s", p->name, o3m_err_message(&pe));
      continue;
    }
    /* Y += Q^j x^j, every row of the batch at once. */
    if (rc == 0)
      o3m_axpy(rows * s->d, 1.0, ((const O3m__V1__MaskBatchReply *)m)->values, s->Y);
  }
  /* Honest parts sum to ||Q x|| = ||x|| <= sqrt(sum_j max_norm_j^2); parts
   * that each keep their bound but are not Q^j x^j could add up to more, so
   * the sum is checked too, before the policy sees it. */
  if (rc == 0)
    rc = o3m_wire_check_row_norms("the sum of the parties' masked parts", rows, s->d, s->Y,
                                  s->sum_norm, n, s->Kb, e);
  return rc;
}

/* Fails deferred round q with code and a message, and counts it. */
static void round_fail(ap_service *s, queued *q, const o3m_err *why) {
  s->failed_rounds++;
  warn_round(s, why);
  o3m_rpc_call_fail(q->call, why->code, why);
}

/* Chooses, opens and answers round q, whose sums Q x are the K rows at Y. */
static void round_decide(ap_service *s, queued *q, const double *Y) {
  o3m_err e;
  o3m_err_clear(&e);
  if (q->rc < 0) {
    o3m_err_set(&e, q->rc, "own_features: lookup in the own tables failed");
    round_fail(s, q, &e);
    return;
  }
  const int *arms = s->model == AP_MODEL_DISJOINT ? q->arms : NULL;
  int chosen;
  double score;
  int rc = ap_policy_choose(s->policy, q->K, Y, arms, &chosen, &score);
  if (rc < 0) {
    o3m_err_set(&e, rc, "the policy could not choose among the %d candidates", q->K);
    round_fail(s, q, &e);
    return;
  }
  uint64_t id;
  int arm = arms ? arms[chosen] : 0;
  rc = ap_pending_open(s->pending, arm, s->mask_id, Y + (size_t)chosen * s->d, now_ms(), &id);
  if (rc < 0) {
    o3m_err_set(&e, rc, "no decision id could be drawn from the OS random source");
    round_fail(s, q, &e);
    return;
  }
  s->rounds++;

  O3m__V1__Recommendation rep = O3M__V1__RECOMMENDATION__INIT;
  rep.decision = id;
  rep.candidate = (uint32_t)chosen;
  rep.item = q->req->items[chosen];
  rep.score = score;
  rep.mask_id = s->mask_id;
  /* A reply of a few dozen bytes cannot fail to pack; if it did the caller
   * would get the error and the decision would expire unrewarded. */
  rc = o3m_rpc_call_reply(q->call, &rep.base, &e);
  if (rc < 0)
    o3m_log_warn("decision %llu: the reply was not sent: %s", (unsigned long long)id,
                 o3m_err_message(&e));
}

/* One batch: the fan-out, then every round in arrival order. */
static void batch_run(ap_service *s, queued *q, int n, int rows) {
  o3m_err e;
  o3m_err_clear(&e);
  int rc = batch_gather(s, q, n, rows, &e);
  if (rc < 0) {
    s->peer_failures += (uint64_t)n;
    for (int i = 0; i < n; i++) round_fail(s, &q[i], &e);
    return;
  }
  size_t off = 0;
  for (int i = 0; i < n; i++) {
    round_decide(s, &q[i], s->Y + off * (size_t)s->d);
    off += (size_t)q[i].K;
  }
}

/* The server's idle hook: answers every queued round, in batches of at most
 * O3M_WIRE_MAX_BATCH rounds and batch_rows candidates, so that no call stays
 * deferred after it returns (the server arena is then reset by the next
 * call; o3m_rpc.h). */
static void recommend_flush(void *ctx) {
  ap_service *s = ctx;
  int i = 0;
  while (i < s->n_queued) {
    int n = 0, rows = 0;
    while (i + n < s->n_queued && n < O3M_WIRE_MAX_BATCH &&
           rows + s->queue[i + n].K <= s->batch_rows)
      rows += s->queue[i + n++].K;
    batch_run(s, s->queue + i, n, rows);
    i += n;
  }
  s->n_queued = 0;
}

/* Validates and queues; the idle hook answers (see above). */
static int h_recommend(void *ctx, o3m_rpc_call *call, const ProtobufCMessage *req_,
                       ProtobufCMessage *rep_, o3m_err *e) {
  (void)rep_;
  ap_service *s = ctx;
  const O3m__V1__RecommendRequest *req = (const O3m__V1__RecommendRequest *)req_;
  if (s->n_queued >= RECOMMEND_SLOTS) {
    /* Cannot happen: every queued round holds one of Recommend's slots. */
    s->failed_rounds++;
    return o3m_err_set(e, O3M_EFULL, "%d rounds are waiting already", RECOMMEND_SLOTS);
  }
  queued *q = &s->queue[s->n_queued];
  int rc = recommend_validate(s, req, q->arms, e);
  if (rc < 0) {
    s->failed_rounds++;
    return rc;
  }
  q->call = call;
  q->req = req;
  q->K = (int)req->n_items;
  q->rc = 0;
  s->n_queued++;
  return O3M_RPC_DEFERRED;
}

/* ---------------------------------------------------------------- Reward */

/* The journal failed (ap_journal.h: after a failed write or fdatasync
 * nothing since the last good sync can be trusted). Marks the service,
 * asks the server to stop (run() returns O3M_EIO, the daemon exits 1 and a
 * restart recovers from disk) and answers this reward with UNAVAILABLE: it
 * was not acknowledged, and it may or may not be found in the model after
 * the restart. */
static int durability_fail(ap_service *s, uint64_t decision, const o3m_err *why, o3m_err *e) {
  if (!s->stopped)
    o3m_log_error("the reward journal failed: %s; no more rewards are accepted and the active "
                  "party is stopping (restart it to recover from %s)", o3m_err_message(why),
                  s->state_dir);
  if (!s->stopped) s->stopped = STOP_DISK;
  o3m_rpc_server_shutdown(s->server);
  return o3m_err_set(e, O3M_EUNAVAILABLE, "decision %llu: the reward could not be written to "
                     "disk and is not acknowledged; the active party is stopping",
                     (unsigned long long)decision);
}

/* The answer to a reward the model cannot take (ap_policy_update_check
 * refused it): nothing was changed or journaled, and the decision stays
 * open (a retry meets the same refusal until the decision expires; another
 * reward value may pass). */
static int reward_refused(uint64_t decision, int rc, const char *what, o3m_err *e) {
  return o3m_err_set(e, rc, "decision %llu: refused, the model would become non-finite or "
                     "singular (%s); nothing changed, the decision stays open",
                     (unsigned long long)decision, what);
}

/* Applies a reward to the model: with a state_dir through the journal and
 * synced to disk (one fdatasync per reward: handlers run one at a time, so
 * there is nothing to group it with), otherwise in memory only. Either way
 * ap_policy_update_check runs first, so a reward that would poison the
 * model is refused with nothing changed. Returns 0 when the reward may be
 * acknowledged. */
static int reward_apply(ap_service *s, uint64_t decision, int arm, const double *x,
                        double reward, o3m_err *e) {
  unsigned long long id = (unsigned long long)decision;
  const char *what;
  int rc = ap_policy_update_check(s->policy, arm, x, reward, &what);
  if (rc < 0) return reward_refused(decision, rc, what, e);
  if (!s->ckpt) {
    rc = ap_policy_update(s->policy, arm, x, reward);
    return rc < 0 ? o3m_err_set(e, rc, "decision %llu: the policy update failed", id) : 0;
  }
  /* apply_reward checks again (and so refuses to journal a bad update even
   * for another caller); with w kept by the check above that costs O(d). */
  rc = ap_checkpoint_apply_reward(s->ckpt, decision, arm, x, reward);
  if (rc == O3M_EIO) {
    o3m_err why;
    o3m_err_set(&why, O3M_EIO, "a journal write failed");
    return durability_fail(s, decision, &why, e);
  }
  /* Only an update that passed the check and still failed gets here: it is
   * journaled and replays as failed; it is made durable with the next sync,
   * and the decision stays open. */
  if (rc < 0) return o3m_err_set(e, rc, "decision %llu: the policy update failed", id);
  o3m_err se;
  o3m_err_clear(&se);
  rc = ap_checkpoint_sync(s->ckpt, &se);
  if (rc < 0) return durability_fail(s, decision, &se, e);
  return 0;
}

/* Writes a checkpoint (why: "periodic" or "final"). A file error leaves the
 * older checkpoints and the journal intact: it is logged and the periodic
 * checkpoint retried after CKPT_RETRY_MS. O3M_ECORRUPT means Lambda or u
 * itself is damaged in memory (ap_checkpoint_write refuses to save it): the
 * service stops, and a restart rebuilds the model from disk. */
static void checkpoint_now(ap_service *s, const char *why) {
  o3m_err ce;
  o3m_err_clear(&ce);
  int rc = ap_checkpoint_write(s->ckpt, &ce);
  if (rc == 0) {
    s->checkpoints++;
    s->ckpt_retry_ms = 0;
    o3m_log_info("%s checkpoint written: %llu updates, journal seq %llu", why,
                 (unsigned long long)ap_policy_updates(s->policy),
                 (unsigned long long)ap_journal_last_seq(ap_checkpoint_journal(s->ckpt)));
    return;
  }
  s->ckpt_failures++;
  s->ckpt_retry_ms = now_ms() + CKPT_RETRY_MS;
  if (rc == O3M_ECORRUPT) {
    o3m_log_error("%s checkpoint refused: %s; the model in memory is damaged: stopping (a "
                  "restart recovers it from %s)", why, o3m_err_message(&ce), s->state_dir);
    if (!s->stopped) s->stopped = STOP_DAMAGED;
    o3m_rpc_server_shutdown(s->server);
    return;
  }
  if (rc == O3M_EIO && ap_journal_failed(ap_checkpoint_journal(s->ckpt))) {
    /* The health repair's journal record could not be written: that is the
     * journal failing, not only this checkpoint. */
    o3m_err why;
    o3m_err_set(&why, O3M_EIO, "%s", o3m_err_message(&ce));
    o3m_err ignored;
    durability_fail(s, 0, &why, &ignored);
    return;
  }
  o3m_log_warn("%s checkpoint failed (%s: %s); the journal still holds every reward, retrying "
               "in %d s", why, o3m_errname(rc), o3m_err_message(&ce), CKPT_RETRY_MS / 1000);
}

static int h_reward(void *ctx, o3m_rpc_call *call, const ProtobufCMessage *req_,
                    ProtobufCMessage *rep_, o3m_err *e) {
  (void)call;
  ap_service *s = ctx;
  const O3m__V1__RewardRequest *req = (const O3m__V1__RewardRequest *)req_;
  O3m__V1__RewardReply *rep = (O3m__V1__RewardReply *)rep_;

  if (s->stopped)
    return o3m_err_set(e, O3M_EUNAVAILABLE, "the active party is stopping after %s; rewards "
                       "are not accepted", stop_cause_text(s->stopped));
  /* The message names the bounds, never the value sent. */
  if (!isfinite(req->reward) || req->reward < s->reward_min || req->reward > s->reward_max)
    return o3m_err_set(e, O3M_EINVAL, "reward must be a finite value in [%g, %g]",
                       s->reward_min, s->reward_max);
  int64_t t = now_ms();
  int arm;
  uint64_t mask_id;
  const double *x;
  int rc = ap_pending_peek(s->pending, req->decision, t, &arm, &mask_id, &x);
  unsigned long long id = (unsigned long long)req->decision;
  switch (rc) {
  case 0: break;
  case O3M_ENOTFOUND:
    return o3m_err_set(e, rc, "decision %llu is unknown (never issued, evicted from the "
                       "pending table, or issued before a restart of the active party)", id);
  case O3M_EEXISTS: return o3m_err_set(e, rc, "decision %llu was already rewarded", id);
  case O3M_EEXPIRED:
    ap_pending_expire(s->pending, req->decision);
    return o3m_err_set(e, rc, "decision %llu expired (older than %d s)", id, s->expiry_s);
  default: return o3m_err_set(e, rc, "decision %llu: pending table lookup failed", id);
  }
  if (mask_id != s->mask_id)
    return o3m_err_set(e, O3M_EMASK, "decision %llu was made under mask %016llx, the current "
                       "mask is %016llx", id, (unsigned long long)mask_id,
                       (unsigned long long)s->mask_id);
  rc = reward_apply(s, req->decision, arm, x, req->reward, e);
  if (rc < 0) return rc;
  ap_pending_close(s->pending, req->decision);
  rep->updates = ap_policy_updates(s->policy);
  /* The reward is durable; a due checkpoint delays only this reply. */
  if (s->ckpt && ap_checkpoint_due(s->ckpt) && now_ms() >= s->ckpt_retry_ms)
    checkpoint_now(s, "periodic");
  return 0;
}

/* ---------------------------------------------------------------- Stats */

static int h_stats(void *ctx, o3m_rpc_call *call, const ProtobufCMessage *req_,
                   ProtobufCMessage *rep_, o3m_err *e) {
  (void)call, (void)req_, (void)e;
  ap_service *s = ctx;
  O3m__V1__ActiveStats *rep = (O3m__V1__ActiveStats *)rep_;
  ap_pending_stats st;
  ap_pending_stats_get(s->pending, now_ms(), &st);
  rep->rounds = s->rounds;
  rep->updates = ap_policy_updates(s->policy);
  rep->pending = st.waiting;
  rep->expired = st.expired + st.evicted;
  rep->theta_norm = s->model == AP_MODEL_SHARED ? ap_policy_theta_norm(s->policy, 0) : 0.0;
  /* protobuf-c packs but never writes through these pointers. */
  rep->algo = (char *)ap_algo_name(s->algo);
  rep->model = (char *)ap_model_name(s->model);
  rep->fanouts = s->fanouts;
  return 0;
}

static const o3m_rpc_method ap_methods[] = {
    {O3M_PATH_ACTIVE_INFO, &o3m__v1__info_request__descriptor, &o3m__v1__node_info__descriptor,
     h_info},
    {O3M_PATH_ACTIVE_RECOMMEND, &o3m__v1__recommend_request__descriptor,
     &o3m__v1__recommendation__descriptor, h_recommend},
    {O3M_PATH_ACTIVE_REWARD, &o3m__v1__reward_request__descriptor,
     &o3m__v1__reward_reply__descriptor, h_reward},
    {O3M_PATH_ACTIVE_STATS, &o3m__v1__stats_request__descriptor,
     &o3m__v1__active_stats__descriptor, h_stats},
};

/* Recommend, Reward and Stats only for the clients the config names: a
 * party (or any other certificate of the federation CA) must not see the
 * chosen items and scores, learn whether a reward arrived or write rewards
 * into users' decisions. Info is public to the federation. */
static const o3m_access_rule ap_access[] = {
    {O3M_PATH_ACTIVE_INFO, O3M_ACCESS_PARTY | O3M_ACCESS_CLIENT},
    {O3M_PATH_ACTIVE_RECOMMEND, O3M_ACCESS_CLIENT},
    {O3M_PATH_ACTIVE_REWARD, O3M_ACCESS_CLIENT},
    {O3M_PATH_ACTIVE_STATS, O3M_ACCESS_CLIENT},
};

/* ================================================================ start-up */

/* TLS settings of this party as a client of peer (NULL fields when
 * insecure). The strings belong to cfg. */
static void client_tls(o3m_rpc_client_config *cc, const o3m_config *cfg, const o3m_party *me,
                       const o3m_party *peer_party, int insecure) {
  cc->insecure = insecure;
  if (insecure) return;
  cc->tls = o3m_rpc_tls_of_party(cfg, me);
  /* Peers' certificates name the party, not the host it runs on. */
  cc->tls.server_name = peer_party->name;
}

/* Sleeps ms milliseconds in short steps; returns 1 early if *stop is set. */
static int sleep_unless_stopped(int64_t ms, volatile sig_atomic_t *stop) {
  while (ms > 0) {
    if (stop && *stop) return 1;
    int64_t step = ms < 50 ? ms : 50;
    struct timespec ts = {0, (long)step * 1000000L};
    nanosleep(&ts, NULL);
    ms -= step;
  }
  return stop && *stop;
}

/* The block, by the behaviour both column parties share
 * (party/o3m_party_block.h): the one stored in state_dir if there is one,
 * else fetched from the mask generator, stored and confirmed. The AP keeps
 * no secret beside it. */
static int install_block(ap_service *s, const o3m_config *cfg, const o3m_party *me,
                         const ap_service_options *opt, o3m_err *e) {
  o3m_party_block_options o = {cfg, me, &s->part, opt->insecure, opt->pmg_timeout_s, opt->stop};
  int rc = o3m_party_block_obtain(&o, &s->block, NULL, 0, e);
  if (rc == 0) s->mask_id = o3m_block_mask_id(s->block);
  return rc;
}

/* Recovers the model from state_dir and opens the reward journal (see
 * ap_service.h); without a state_dir only warns. Errors that need the
 * operator's decision name the flag that makes it. */
static int open_state(ap_service *s, const ap_service_options *opt, o3m_err *e) {
  if (!s->state_dir) {
    o3m_log_warn("WARNING: party '%s' has no state_dir: the model lives in memory only and "
                 "rewards are NOT durable (a restart loses every acknowledged reward, and the "
                 "block must then come from a mask generator that still holds Q)", s->name);
    return 0;
  }
  int rc;
  if (opt->discard_state && (rc = ap_checkpoint_discard(s->state_dir, e)) < 0) return rc;
  ap_checkpoint_options co;
  ap_checkpoint_options_default(&co);
  co.state_dir = s->state_dir;
  co.mask_id = s->mask_id;
  co.salvage = opt->salvage;
  if (opt->checkpoint_records) co.every_records = opt->checkpoint_records;
  if (opt->checkpoint_ms) co.every_ms = opt->checkpoint_ms;
  ap_recovery_info ri;
  o3m_err ce;
  o3m_err_clear(&ce);
  rc = ap_checkpoint_open(&s->ckpt, s->policy, &co, &ri, &ce);
  if (rc < 0) {
    const char *way = rc == O3M_EMASK
                          ? "the saved model was learned under another mask; --discard-state "
                            "moves it aside and starts a fresh model"
                      : rc == O3M_EDIM
                          ? "the [policy] does not match the saved model (or the model was "
                            "saved by another release); restore the old [policy] or release, "
                            "or --discard-state"
                      : rc == O3M_ECORRUPT
                          ? "the reward journal is damaged or incomplete; --salvage keeps the "
                            "rewards before the damage (the rest is set aside), or "
                            "--discard-state"
                          : NULL;
    o3m_log_error("recovery from %s failed: %s", s->state_dir, o3m_err_message(&ce));
    if (!way) return o3m_err_set(e, rc, "%s", o3m_err_message(&ce));
    o3m_log_error("%s", way);
    return o3m_err_set(e, rc, "%s (%s)", way, o3m_err_message(&ce));
  }
  if (ri.salvaged)
    o3m_log_warn("SALVAGED: journal records from seq %llu on were set aside as *.dropped; "
                 "those rewards are not in the model", (unsigned long long)ri.salvage_seq);
  o3m_log_info("rewards are durable in %s: %llu updates recovered (checkpoint seq %llu, %llu "
               "journal records replayed)", s->state_dir,
               (unsigned long long)ap_policy_updates(s->policy),
               (unsigned long long)ri.checkpoint_seq, (unsigned long long)ri.replayed);
  return 0;
}

/* One client per passive participant: TLS with this party's certificate,
 * the federation deadline, and no waiting for a peer that is down (a round
 * fails fast instead).
 *
 * Then the start-up wait: Info goes to every peer in parallel, again and
 * again (backoff 100 ms doubling to 2 s) until each has answered or
 * budget_ms is spent. This opens the connections before the first round (a
 * channel whose first connect failed would otherwise refuse calls during
 * gRPC's reconnect backoff, so a daemon started next to its peers would fail
 * its first rounds) and checks each peer's role, party index and partition.
 * Only unreachable peers are retried: any other answer (a wrong partition,
 * PERM because the peer refuses our certificate, UNIMPLEMENTED because
 * another daemon listens there) fails the start. A peer still unreachable
 * at the end is logged and the service starts anyway; its rounds fail until
 * it comes. */
static int connect_peers(ap_service *s, const o3m_config *cfg, const o3m_party *me,
                         const ap_service_options *opt, o3m_err *e) {
  s->n_peers = o3m_config_n_passive(cfg);
  if (s->n_peers == 0) return 0;
  s->peers = calloc((size_t)s->n_peers, sizeof *s->peers);
  int *ok = calloc((size_t)s->n_peers, sizeof *ok);
  o3m_err *last = calloc((size_t)s->n_peers, sizeof *last); /* for the warnings */
  if (!s->peers || !ok || !last) {
    free(ok);
    free(last);
    return o3m_err_set(e, O3M_ENOMEM, "out of memory");
  }
  int rc = 0;
  for (int j = 0; j < s->n_peers && rc == 0; j++) {
    const o3m_party *pp = o3m_config_passive(cfg, j);
    peer *p = &s->peers[j];
    snprintf(p->name, sizeof p->name, "%s", pp->name);
    p->slot = pp->slot;
    p->max_norm = pp->max_norm;
    o3m_rpc_client_config_default(&p->cc);
    client_tls(&p->cc, cfg, me, pp, opt->insecure);
    p->target = strdup(pp->address);
    p->ca = dup_or_null(p->cc.tls.ca_file);
    p->cert = dup_or_null(p->cc.tls.cert_file);
    p->key = dup_or_null(p->cc.tls.key_file);
    if (!p->target || (p->cc.tls.ca_file && !p->ca) || (p->cc.tls.cert_file && !p->cert) ||
        (p->cc.tls.key_file && !p->key)) {
      rc = o3m_err_set(e, O3M_ENOMEM, "out of memory");
      break;
    }
    p->cc.target = p->target;
    p->cc.tls.ca_file = p->ca;
    p->cc.tls.cert_file = p->cert;
    p->cc.tls.key_file = p->key;
    p->cc.tls.server_name = p->cc.tls.server_name ? p->name : NULL;
    p->cc.deadline_ms = o3m_config_deadline_ms(cfg);
    p->cc.wait_for_ready = 0;
    o3m_err ce;
    o3m_err_clear(&ce);
    rc = peer_reset(p, &ce);
    if (rc < 0) rc = o3m_err_set(e, rc, "passive party '%s': %s", pp->name, o3m_err_message(&ce));
  }

  int64_t t0 = now_ms(), budget_ms = (int64_t)opt->pmg_timeout_s * 1000;
  int64_t backoff = PMG_BACKOFF_FIRST_MS;
  int missing = s->n_peers;
  O3m__V1__InfoRequest ir = O3M__V1__INFO_REQUEST__INIT;
  while (rc == 0 && missing > 0) {
    int started[O3M_MAX_PARTIES];
    for (int j = 0; j < s->n_peers; j++)
      started[j] = !ok[j] && s->peers[j].client &&
                   o3m_rpc_client_start(s->peers[j].client, O3M_PATH_PASSIVE_INFO, &ir.base,
                                        &o3m__v1__node_info__descriptor, NULL) == 0;
    for (int j = 0; j < s->n_peers; j++) {
      if (!started[j]) continue;
      peer *p = &s->peers[j];
      ProtobufCMessage *m;
      o3m_err ce;
      o3m_err_clear(&ce);
      int r = o3m_rpc_client_finish(p->client, &m, &ce);
      if (r == 0)
        r = o3m_wire_info_check((const O3m__V1__NodeInfo *)m, O3M__V1__ROLE__ROLE_PASSIVE,
                                p->slot, &s->part, &ce);
      if (r == 0) {
        ok[j] = 1;
        missing--;
      } else if (r == O3M_EUNAVAILABLE || r == O3M_EDEADLINE) {
        last[j] = ce;
        /* A fresh channel for the next attempt (see peer_reset). */
        o3m_err_clear(&ce);
        if (r == O3M_EUNAVAILABLE && peer_reset(p, &ce) < 0 && rc == 0)
          rc = o3m_err_set(e, ce.code, "passive party '%s': %s", p->name, o3m_err_message(&ce));
      } else if (rc == 0) {
        rc = o3m_err_set(e, r, "passive party '%s': %s", p->name, o3m_err_message(&ce));
      }
    }
    if (rc < 0 || missing == 0) break;
    int64_t left = budget_ms - (now_ms() - t0);
    if (left <= 0) {
      for (int j = 0; j < s->n_peers; j++)
        if (!ok[j])
          o3m_log_warn("passive party '%s' is not reachable; its rounds fail until it is "
                       "(last error: %s: %s)", s->peers[j].name, o3m_errname(last[j].code),
                       o3m_err_message(&last[j]));
      break;
    }
    if (sleep_unless_stopped(backoff < left ? backoff : left, opt->stop)) {
      rc = o3m_err_set(e, O3M_ESTATE, "stopped while waiting for the passive parties");
      break;
    }
    backoff = backoff * 2 > PMG_BACKOFF_MAX_MS ? PMG_BACKOFF_MAX_MS : backoff * 2;
  }
  free(ok);
  free(last);
  return rc;
}

static int build_policy(ap_service *s, const o3m_config *cfg, o3m_err *e) {
  const o3m_policy_params *pp = o3m_config_policy(cfg);
  ap_policy_config pc;
  ap_policy_config_default(&pc);
  if (ap_algo_parse(pp->algo, &pc.algo) < 0 || ap_model_parse(pp->model, &pc.model) < 0)
    return o3m_err_set(e, O3M_EINVAL, "[policy]: unknown algo '%s' or model '%s'", pp->algo,
                       pp->model);
  s->algo = pc.algo;
  s->model = pc.model;
  if (pc.model == AP_MODEL_DISJOINT) {
    if (!pp->items) return o3m_err_set(e, O3M_EINVAL, "[policy]: model disjoint needs items");
    int rc = catalog_load(&s->cat, pp->items, 1000000, e);
    if (rc < 0) return rc;
    s->n_arms = s->cat.n;
  }
  pc.d = s->d;
  pc.n_arms = s->n_arms;
  pc.max_candidates = pp->max_candidates;
  pc.lambda = pp->lambda;
  pc.alpha = pp->alpha;
  pc.v = pp->v;
  pc.seed = pp->seed;
  pc.refactor_every = pp->refactor_every;
  return ap_policy_create(&s->policy, &pc, e);
}

/* Frees whatever create got to; every field is NULL/0 or owned. */
static void service_free(ap_service *s) {
  if (!s) return;
  o3m_rpc_server_destroy(s->server);
  o3m_access_destroy(s->access); /* after the server that calls it */
  ap_checkpoint_close(s->ckpt); /* syncs; before the policy it borrows */
  free(s->state_dir);
  for (int j = 0; s->peers && j < s->n_peers; j++) peer_free(&s->peers[j]);
  free(s->peers);
  ap_pending_destroy(s->pending);
  o3m_block_destroy(s->block);
  o3m_features_destroy(s->own);
  ap_policy_destroy(s->policy);
  catalog_free(&s->cat);
  free(s->dup.t);
  batch_free(s);
  free(s->X0);
  free(s->dims_buf);
  free(s);
}

int ap_service_create(ap_service **out, const o3m_config *cfg, const ap_service_options *opt,
                      o3m_err *e) {
  if (!out) return o3m_err_set(e, O3M_EINVAL, "out is NULL");
  *out = NULL;
  if (!cfg || !opt || !opt->party)
    return o3m_err_set(e, O3M_EINVAL, "config and party name are required");
  if (opt->pmg_timeout_s < 1)
    return o3m_err_set(e, O3M_EINVAL, "pmg timeout must be >= 1 s, got %d", opt->pmg_timeout_s);
  const o3m_party *me = o3m_config_party(cfg, opt->party);
  if (!me) return o3m_err_set(e, O3M_EINVAL, "no party '%s' in %s", opt->party,
                              o3m_config_name(cfg));
  if (me->role != O3M_ROLE_ACTIVE)
    return o3m_err_set(e, O3M_EINVAL, "party '%s' has role %s, expected active", me->name,
                       o3m_role_name(me->role));
  if (!opt->insecure && (!o3m_config_ca(cfg) || !me->cert || !me->key))
    return o3m_err_set(e, O3M_EINVAL, "party '%s': TLS needs ca, cert and key in %s (or run with "
                       "--insecure)", me->name, o3m_config_name(cfg));

  ap_service *s = calloc(1, sizeof *s);
  if (!s) return o3m_err_set(e, O3M_ENOMEM, "out of memory");
  snprintf(s->name, sizeof s->name, "%s", me->name);
  s->d = o3m_config_d(cfg);
  s->d0 = me->dims;
  s->slot = me->slot;
  const o3m_policy_params *pp = o3m_config_policy(cfg);
  s->k_max = pp->max_candidates;
  s->reward_min = pp->reward_min;
  s->reward_max = pp->reward_max;
  s->expiry_s = pp->pending_expiry_s;

  /* The public partition, in column order; the active party is slot 0. */
  int m = o3m_config_n_column_parties(cfg);
  int dims[O3M_MAX_PARTIES];
  if (m > O3M_MAX_PARTIES) {
    service_free(s);
    return o3m_err_set(e, O3M_EINVAL, "%d column parties, at most %d", m, O3M_MAX_PARTIES);
  }
  double sum_sq = 0;
  for (int j = 0; j < m; j++) {
    const o3m_party *cp = o3m_config_column_party(cfg, j);
    dims[j] = cp->dims;
    sum_sq += cp->max_norm * cp->max_norm;
  }
  s->max_norm = me->max_norm;
  s->sum_norm = sqrt(sum_sq);
  int rc = o3m_partition_from_dims(&s->part, m, dims, e);
  if (rc < 0) goto fail;

  rc = build_policy(s, cfg, e);
  if (rc < 0) goto fail;

  if (me->user_table || me->item_table) {
    rc = o3m_features_load(&s->own, me->user_table, me->item_table, s->d0, e);
    if (rc < 0) goto fail;
    o3m_err ne;
    o3m_err_clear(&ne);
    rc = o3m_features_check_norm(s->own, s->max_norm, &ne);
    if (rc < 0) {
      rc = o3m_err_set(e, rc, "%s (the bound of [party %s] in %s; raise its max_norm if such "
                       "rows are meant)", o3m_err_message(&ne), me->name, o3m_config_name(cfg));
      goto fail;
    }
  }

  /* Round buffers are indexed with int (BLAS), so K x d must fit. */
  if ((int64_t)s->k_max * s->d > INT_MAX) {
    rc = o3m_err_set(e, O3M_EINVAL, "[policy] max_candidates = %d is too large for d = %d",
                     s->k_max, s->d);
    goto fail;
  }
  size_t K = (size_t)s->k_max;
  s->dims_buf = malloc(sizeof *s->dims_buf * (size_t)m);
  s->X0 = malloc(sizeof *s->X0 * K * (size_t)s->d0);
  s->dup.cap = table_size(K);
  s->dup.t = calloc(s->dup.cap, sizeof *s->dup.t);
  if (!s->dims_buf || !s->X0 || !s->dup.t) {
    rc = o3m_err_set(e, O3M_ENOMEM, "round buffers for %d candidates: out of memory", s->k_max);
    goto fail;
  }
  rc = batch_init(s, e);
  if (rc < 0) goto fail;

  /* Decision ids come from the OS CSPRNG (ap_pending.h). */
  rc = ap_pending_create(&s->pending, pp->pending_capacity, s->d,
                         (int64_t)pp->pending_expiry_s * 1000, NULL, NULL);
  if (rc < 0) {
    rc = o3m_err_set(e, rc, "pending table of %d entries: %s", pp->pending_capacity,
                     o3m_strerror(rc));
    goto fail;
  }

  if (me->state_dir && !(s->state_dir = strdup(me->state_dir))) {
    rc = o3m_err_set(e, O3M_ENOMEM, "out of memory");
    goto fail;
  }
  rc = install_block(s, cfg, me, opt, e);
  if (rc < 0) goto fail;

  rc = open_state(s, opt, e);
  if (rc < 0) goto fail;

  rc = connect_peers(s, cfg, me, opt, e);
  if (rc < 0) goto fail;

  o3m_rpc_server_config sc;
  o3m_rpc_server_config_default(&sc);
  sc.listen = opt->listen ? opt->listen : me->address;
  sc.insecure = opt->insecure;
  /* Callers need a certificate from the federation CA, and the access
   * policy decides what each may call: front ends and operators are
   * [client NAME]s of the config with certificates of their own. */
  if (!opt->insecure) sc.tls = o3m_rpc_tls_of_party(cfg, me);
  const int n_ap_methods = (int)(sizeof ap_methods / sizeof ap_methods[0]);
  rc = o3m_access_create(&s->access, cfg, me->name, ap_access,
                         (int)(sizeof ap_access / sizeof ap_access[0]), ap_methods, n_ap_methods,
                         e);
  if (rc < 0) goto fail;
  o3m_access_install(s->access, &sc);
  sc.slots_per_method = SERVER_SLOTS;
  /* Requests are refused by size before they are read whole: the largest
   * valid Recommend (o3m_wire_recommend_max_bytes) is the limit, so an
   * over-long id or too many values costs the AP at most that much, and no
   * passive party hears of it. The arena holds a whole batch of deferred
   * Recommends (every slot at the largest size, unpacked). */
  sc.max_message_bytes = o3m_wire_recommend_max_bytes(s->k_max, s->d0);
  sc.arena_max_bytes = (size_t)RECOMMEND_SLOTS * 3 * (size_t)sc.max_message_bytes + (1u << 20);
  sc.idle_close_ms = O3M_RPC_DAEMON_IDLE_CLOSE_MS;
  /* Recommend calls are deferred and answered in batches by the idle hook. */
  static const o3m_rpc_method_slots recommend_slots = {O3M_PATH_ACTIVE_RECOMMEND,
                                                       RECOMMEND_SLOTS};
  sc.method_slots = &recommend_slots;
  sc.n_method_slots = 1;
  sc.idle = recommend_flush;
  rc = o3m_rpc_server_create(&s->server, &sc, ap_methods, n_ap_methods, s, e);
  if (rc < 0) goto fail;

  o3m_log_info("active party '%s' listening on %s (port %d): d = %d, %d parties, %s/%s, "
               "max %d candidates, mask %016llx", s->name, sc.listen, ap_service_port(s), s->d,
               m, ap_algo_name(s->algo), ap_model_name(s->model), s->k_max,
               (unsigned long long)s->mask_id);
  *out = s;
  return 0;

fail:
  service_free(s);
  return rc;
}

int ap_service_write_ready_file(const ap_service *s, const char *path, o3m_err *e) {
  return o3m_daemon_write_ready_file(path, ap_service_port(s), e);
}

int ap_service_run(ap_service *s) {
  if (s->ran) return O3M_ESTATE;
  s->ran = 1;
  int rc = o3m_rpc_server_run(s->server);
  if (s->ckpt && !s->stopped) checkpoint_now(s, "final");
  if (s->ckpt)
    o3m_log_info("state: %llu checkpoints written, %llu failed, journal at seq %llu%s%s",
                 (unsigned long long)s->checkpoints, (unsigned long long)s->ckpt_failures,
                 (unsigned long long)ap_journal_synced_seq(ap_checkpoint_journal(s->ckpt)),
                 s->stopped ? ", STOPPED AFTER " : "",
                 s->stopped ? stop_cause_text(s->stopped) : "");
  if (rc == 0 && s->stopped) rc = s->stopped == STOP_DISK ? O3M_EIO : O3M_ECORRUPT;
  ap_pending_stats st;
  ap_pending_stats_get(s->pending, now_ms(), &st);
  o3m_rpc_server_stats rs;
  o3m_rpc_server_stats_get(s->server, &rs);
  o3m_log_info("stopped: rounds=%llu failed_rounds=%llu peer_failures=%llu updates=%llu "
               "pending=%u expired=%llu evicted=%llu calls_ok=%llu calls_failed=%llu "
               "calls_denied=%llu",
               (unsigned long long)s->rounds, (unsigned long long)s->failed_rounds,
               (unsigned long long)s->peer_failures,
               (unsigned long long)ap_policy_updates(s->policy), st.waiting,
               (unsigned long long)st.expired, (unsigned long long)st.evicted,
               (unsigned long long)rs.ok, (unsigned long long)rs.failed,
               (unsigned long long)rs.denied);
  return rc;
}

void ap_service_shutdown(ap_service *s) {
  if (s) o3m_rpc_server_shutdown(s->server);
}

void ap_service_destroy(ap_service *s) { service_free(s); }
