/* ap_round.c -- the active participant's rounds (see ap_round.h).
 *
 * Three parts: the duplicate-id set (one request's candidates must be
 * distinct), the validation and the queue (ap_round_submit), and the batch
 * (ap_round_flush: fan-out and gather, then the decision of each round).
 *
 * The handlers borrow the request's strings (they live in the server arena
 * until a deferred Recommend is answered) and point the reply into the
 * request and the round's own storage, so a round allocates nothing. */
#include "ap_round.h"
#include "o3m_alloc.h"

#include "ap_fallback.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "o3m_clock.h"
#include "o3m_assert.h"
#include "o3m_blas.h"
#include "o3m_log.h"
#include "o3m_wire.h"
#include "o3m_features.h"
#include "o3m_secagg.h"
#include "o3m_tables.h"
#include "ap_epochwatch.h"
#include "ap_itemcache.h"

#include <sodium.h>

/* Failed rounds are logged at most once per this period. */
#define WARN_PERIOD_MS 1000

/* ================================================================ duplicate set */

/* Finds duplicate item ids in one request in O(K): an open-addressing table
 * with linear probing, at least twice as large as max_candidates. Entries
 * carry the round's generation number, so the table is never cleared: an
 * entry of an older generation counts as empty. The ids are
 * the client's, so the hash is keyed (o3m_hash_keyed.h): the callers give each
 * id's hash under the item cache's random key (ap_itemcache_hash), which
 * also finds it in the cache, so that an id is hashed once per round: no
 * one can choose ids that share a probe run and turn the check into
 * O(K^2). */
typedef struct dup_entry {
  uint64_t gen;
  uint64_t hash;
  int k;
} dup_entry;

typedef struct dupset {
  dup_entry *t;
  size_t cap; /* power of two */
  size_t mask; /* this generation's: a prefix of t twice its ids (dupset_begin) */
  uint64_t gen;
} dupset;

static int dupset_init(dupset *s, int k_max) {
  s->cap = 16;
  while (s->cap < 2 * (size_t)k_max) s->cap <<= 1;
  s->t = o3m_calloc(s->cap, sizeof *s->t);
  return s->t ? 0 : O3M_ENOMEM;
}

/* Starts a new generation for at most n ids: it uses the prefix of the
 * table at least twice as large, so that a round of 20 ids probes a few
 * hundred bytes rather than a table sized for the largest batch, which
 * does not stay in the cache (the prefix's older entries count as empty). */
static void dupset_begin(dupset *s, int n) {
  s->gen++;
  size_t m = 16;
  while (m < 2 * (size_t)n && m < s->cap) m <<= 1;
  s->mask = m - 1;
}

static void dupset_free(dupset *s) {
  o3m_free(s->t);
  s->t = NULL;
}

/* Returns -1 if the K ids (with their hashes) are distinct, else the index
 * of the first id that repeats an earlier one, with that earlier index in
 * *first. */
static int dupset_find(dupset *s, int K, char *const *ids, const uint64_t *hashes, int *first) {
  dupset_begin(s, K);
  const size_t mask = s->mask;
  for (int k = 0; k < K; k++) {
    uint64_t h = hashes[k];
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

/* Finds id among the n ids already in s (added with their indices in
 * ids, since dupset_begin for at least n + 1 ids): its index, or, when
 * absent, adds it as index n and returns -1. */
static int dupset_add(dupset *s, const char *const *ids, int n, const char *id, uint64_t h) {
  const size_t mask = s->mask;
  for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
    dup_entry *en = &s->t[i];
    if (en->gen != s->gen) {
      *en = (dup_entry){s->gen, h, n};
      return -1;
    }
    if (en->hash == h && strcmp(ids[en->k], id) == 0) return en->k;
  }
}

/* ================================================================ the round */

/* A Recommend call that passed validation and waits, deferred, for its
 * batch and then for its decision. call and req stay valid until the call is
 * answered (o3m_rpc.h). */
typedef struct queued {
  o3m_rpc_call *call;
  const O3m__V1__RecommendRequest *req;
  int K;
  int owner; /* the client that asked (ap_round_submit) */
  int next;  /* the owner's next waiting round, or the free list's next; -1 */
  int *arms; /* k_max entries: the disjoint model's arm of each candidate */
  uint64_t *hash; /* k_max entries: each item id's ap_itemcache_hash */
  int rc;    /* during a batch: 0, or why this round alone failed */
  int unknown_items; /* during a batch: an item not in the own item table */
} queued;

/* One client's rounds (see "Fairness" in ap_round.h): how many it has in
 * flight (waiting or in a batch), its waiting rounds in arrival order (pool
 * indices, -1 when none), and its place in the ring of the clients that
 * have waiting rounds (-1 when out of it). */
typedef struct round_owner {
  int inflight;
  int head, tail;
  int ring_prev, ring_next;
  int batches;                /* batches in flight that hold its rounds */
  uint64_t formed, finished;  /* the last batch counted in batches, each way */
  int64_t last_ms;            /* when it last queued a round (o3m_clock_ms) */
  /* Its budget of uncached item ids ("Cost model" in ap_round.h): what is
   * left, at most the burst and at least minus the burst, as of
   * tokens_ms (0: never refilled yet). */
  double tokens;
  int64_t tokens_ms;
  uint64_t uncached;          /* uncached ids charged to it so far */
  /* The scheduler's turns since its head round was first passed over for
   * its budget, and the last turn counted ("Cost model": a round passed over
   * AP_ROUND_BUDGET_PASSES times goes all the same). */
  int over_passes;
  uint64_t over_batch;
} round_owner;

/* One batch in flight (see "Pipelined batches" in ap_round.h): its rounds
 * (n entries of the queue from q, which do not wrap), its own buffers and
 * its own clients of the passive parties. Between the locked parts of
 * ap_round_flush only the thread that sent it touches it. */
typedef struct batch_slot {
  ap_round *r;
  ap_peers *peers;
  int busy;                     /* holds rounds (sent, not yet decided) */
  uint64_t seq;                 /* its number in the order batches are formed */
  queued *q[O3M_WIRE_MAX_BATCH];  /* its rounds, in the order they are decided */
  int n, rows;
  int rc;                       /* the gather's outcome, e its message */
  o3m_err e;
  double *X0;                   /* batch_rows x d0: own features from the tables */
  /* The own tables' version this batch reads, taken when it is sent (a
   * reload may swap r->own meanwhile; ap_round_reload_poll). */
  o3m_features *own;
  double *Y;                    /* batch_rows x d: the batch's sums Q x */
  /* The factored batch (ap_itemcache.h): the reply's rows are one user
   * part per round then one item part per item asked (at most reply_rows
   * = batch_rows + O3M_WIRE_MAX_BATCH). */
  uint64_t *acc;                /* reply_rows x d: the PPs' words, summed (secure) */
  double *P;                    /* reply_rows x d: the PPs' parts, summed and decoded */
  double *Ypp;                  /* batch_rows x d: each candidate's U(u) + I(i) */
  /* batch_rows x cw: the batch's distinct items' cache entries, I(i) then,
   * with own tables, the own item part and its known flag (ap_round.h
   * "Own parts"). */
  double *Ib;
  /* batch_rows: each distinct item's entry, its row of Ib or, with one
   * batch in flight, the cache's own (ap_itemcache_ref). */
  const double **ent;
  double *Uown;                 /* O3M_WIRE_MAX_BATCH x d: each round's own user part */
  double *Town;                 /* batch_rows x d: the new items' own parts */
  unsigned char *known;         /* batch_rows: the new items' known flags */
  /* batch_rows: 1 for each distinct item asked for in the first fan-out
   * (not found in the cache), so that a batch asked again asks only for
   * the others (batch_gather). */
  unsigned char *fresh;
  uint64_t own_epoch;           /* own: the item epoch of the tables read */
  const char **uniq_id;         /* batch_rows: the distinct items, first seen first */
  int *cand;                    /* batch_rows: each candidate row's index in uniq_id */
  char **new_items;             /* batch_rows: the items asked for (request's items) */
  int *new_of;                  /* batch_rows: their indices in uniq_id */
  dupset uniq;                  /* finds an item among uniq_id */
  int n_uniq, n_new;
  int n_epochs;                 /* the cache key's epochs when the batch was formed */
  uint64_t epochs[AP_ITEMCACHE_MAX_PARTIES];
  /* The epochs the replies named, then, with own tables, own_epoch. */
  uint64_t got[AP_ITEMCACHE_MAX_PARTIES];
  int n_got;
  int retried;                  /* asked again: stale cached parts */
  /* The passive parties whose second replies named another epoch than
   * their first (batch_gather): flapping (ap_epochwatch.h). */
  unsigned char flapped[AP_ITEMCACHE_MAX_PARTIES];
  O3m__V1__MaskQuery mq[O3M_WIRE_MAX_BATCH];
  O3m__V1__MaskQuery *mq_ptr[O3M_WIRE_MAX_BATCH];
  int Kb[O3M_WIRE_MAX_BATCH];   /* candidates of each round of the batch */
  /* Each round's first candidate in the batch (0 but for a slice), and
   * whether the batch decides it: every round but a slice before the last
   * ("Slices" in ap_round.h). sliced marks the sliced round's entry. */
  int k0[O3M_WIRE_MAX_BATCH];
  unsigned char fin[O3M_WIRE_MAX_BATCH];
  int sliced;                   /* its index among q, or -1 */
  o3m_policy_round pr[O3M_WIRE_MAX_BATCH]; /* the rounds' choices (batch_decide) */
  unsigned char nonce[O3M_SECAGG_NONCE_BYTES]; /* the batch's, fresh each time */
  /* A failed fan-out: the parties that were missing, each with why (an
   * O3M code name), for a degraded answer (ap_fallback.h). */
  int n_missing;
  char *missing[O3M_MAX_PARTIES];
  const char *why[O3M_MAX_PARTIES];
} batch_slot;

struct ap_round {
  char name[O3M_CONFIG_MAX_NAME + 1];
  int d, d0, k_max;
  int user_required; /* some party has a user table: a Recommend names its user */
  double max_norm, sum_norm;
  o3m_model_kind model;
  int n_arms;
  const ap_catalog *cat;
  o3m_policy *policy;
  ap_pending *pending;
  ap_fallback *fallback; /* NULL: a failed fan-out fails its rounds */
  double *X0lock;        /* k_max x d0: own parts read under the lock */
  double *zero_d;        /* d zeros: a degraded decision's federated context */
  int (*record)(void *ctx, uint64_t decision, int owner, int arm, uint64_t mask_id,
                const double *x, const double *x0, int degraded, o3m_err *e);
  void *record_ctx;
  int (*before_decide)(void *ctx, o3m_err *e);
  void *before_decide_ctx;

  int refuse_unknown_items; /* [policy] unknown_items = refuse */

  /* The AP's own feature tables: NULL when the features come in the
   * requests. tables loads and reloads them; retired is the version the
   * last reload replaced while a batch in flight still read it. */
  o3m_features *own;
  o3m_tables *tables;
  o3m_features *retired;
  /* With own tables, a round's own part is factored like the passive
   * parties' and its item half cached beside theirs ("Own parts" in
   * ap_round.h): cw = 2d + 1 values per cache entry, else d. */
  int own_fact, cw;

  /* Set by ap_round_connect. */
  const o3m_block *block;
  uint64_t mask_id;
  o3m_rpc_server *server;

  dupset dup;

  /* The deferred rounds (see "Fairness" in ap_round.h): a pool of
   * AP_ROUND_SLOTS entries (unused ones in a free list), each either
   * waiting in its owner's queue or in a batch in flight. */
  queued pool[AP_ROUND_SLOTS];
  int free_head;                /* the free list, linked by next */
  int n_waiting;                /* rounds in the owners' queues */
  int *arms_pool;               /* AP_ROUND_SLOTS x k_max, pool[i].arms */
  uint64_t *hash_pool;          /* AP_ROUND_SLOTS x k_max, pool[i].hash */
  int batch_rows;               /* most candidate rows of one MaskBatch */
  int64_t cost_max;             /* most of each cost summed over a batch ("Cost model") */
  int64_t slice_cost;           /* most of each cost of one slice while others are active */
  int64_t pp_row;               /* one row asked of every passive party: n_pp x d */
  double uncached_rate, uncached_burst; /* each client's budget of uncached ids; 0: none */
  /* The round gathered in slices ("Slices" in ap_round.h), NULL when none:
   * the next slice's first candidate, whether a slice of it is in flight,
   * its contexts (k_max x d), its user parts from the first slice (the
   * passive parties' and the own one, d each) and the cache key its first
   * slice's replies named. */
  queued *big;
  int big_next, big_busy;
  double *bigY, *bigU, *bigUo;
  int big_nk;
  uint64_t big_key[AP_ITEMCACHE_MAX_PARTIES];
  int inflight_max;             /* most rounds in flight per owner */
  round_owner *owners;          /* n_owners */
  ap_round_client_stats *cst;   /* n_owners: each client's own counters */
  int n_owners;
  int ring;                     /* the owner whose turn is next, or -1 */
  int ring_len;                 /* owners in the ring */
  int owner_batches_max;        /* batches in flight one owner's rounds may be in */
  uint64_t n_formed, n_finished; /* batches formed and finished so far */

  /* The batches in flight: n_slots (cfg->inflight) of them. */
  batch_slot slot[AP_ROUND_MAX_INFLIGHT];
  int n_slots;

  /* The cache of the passive parties' summed item parts. */
  ap_itemcache *cache;
  /* The watch on the passive parties' item epochs (ap_epochwatch.h). */
  ap_epochwatch *ew;
  int ew_max;                   /* epoch_changes_max_per_minute; 0: not watched */
  int reply_rows;               /* most rows of a factored reply */

  /* Secure aggregation (aggregation = secure with passive parties). */
  int secure, agg_scale;
  double pp_bound;              /* bound of a row of the decoded PP sum */

  ap_round_stats st;
  int64_t last_warn_ms;
  uint64_t warn_suppressed;
};

/* Loads the own tables if the config names any, and checks their rows
 * against this party's bound. */
static int own_tables_load(ap_round *r, const ap_round_config *cfg, o3m_err *e) {
  if (!cfg->user_table && !cfg->item_table) return 0;
  /* The code of a passive party's start and reload: the same checks and
   * messages. The active party does not whiten (a passive party's option). */
  const o3m_tables_config tc = {cfg->config_name, r->name,     cfg->user_table, cfg->item_table,
                                r->d0,            0,           r->max_norm,
                                cfg->table_bytes_max,          cfg->metrics};
  int rc = o3m_tables_create(&r->tables, &tc, e);
  if (rc == 0) rc = o3m_tables_load(r->tables, &r->own, e);
  return rc;
}

int ap_round_create(ap_round **out, const ap_round_config *cfg, o3m_err *e) {
  *out = NULL;
  ap_round *r = o3m_calloc(1, sizeof *r);
  if (!r) return o3m_err_set(e, O3M_ENOMEM, "out of memory");
  snprintf(r->name, sizeof r->name, "%s", cfg->party);
  r->refuse_unknown_items = cfg->refuse_unknown_items;
  r->d = cfg->d;
  r->d0 = cfg->d0;
  r->k_max = cfg->k_max;
  r->user_required = cfg->user_required;
  r->max_norm = cfg->max_norm;
  r->sum_norm = cfg->sum_norm;
  r->model = cfg->model;
  r->n_arms = cfg->n_arms;
  r->cat = cfg->catalog;
  r->policy = cfg->policy;
  r->pending = cfg->pending;
  r->fallback = cfg->fallback;
  r->record = cfg->record;
  r->record_ctx = cfg->record_ctx;
  r->before_decide = cfg->before_decide;
  r->before_decide_ctx = cfg->before_decide_ctx;
  r->secure = cfg->secure;
  r->agg_scale = cfg->agg_scale;
  if (cfg->inflight < 1 || cfg->inflight > AP_ROUND_MAX_INFLIGHT) {
    ap_round_destroy(r);
    return o3m_err_set(e, O3M_EINVAL, "batches in flight: %d, expected 1..%d", cfg->inflight,
                       AP_ROUND_MAX_INFLIGHT);
  }
  if (cfg->n_owners < 1 || cfg->client_inflight_max < 1 ||
      cfg->client_inflight_max > AP_ROUND_SLOTS || cfg->batch_cost_max < 1 ||
      cfg->slice_cost_max < 1) {
    ap_round_destroy(r);
    return o3m_err_set(e, O3M_EINVAL, "clients %d, client_inflight_max %d (expected 1..%d), "
                       "batch_cost_max %lld, slice_cost_max %lld: out of range", cfg->n_owners,
                       cfg->client_inflight_max, AP_ROUND_SLOTS,
                       (long long)cfg->batch_cost_max, (long long)cfg->slice_cost_max);
  }
  r->n_owners = cfg->n_owners;
  r->inflight_max = cfg->client_inflight_max;
  r->cost_max = cfg->batch_cost_max;
  r->slice_cost = cfg->slice_cost_max;
  r->pp_row = (int64_t)cfg->n_pp * cfg->d;
  r->uncached_rate = (double)cfg->client_uncached_rate;
  r->uncached_burst = cfg->client_uncached_burst > 0 ? (double)cfg->client_uncached_burst : 0.0;
  r->ring = -1;
  r->owners = o3m_malloc(sizeof *r->owners * (size_t)r->n_owners);
  r->cst = o3m_calloc((size_t)r->n_owners, sizeof *r->cst);
  if (!r->owners || !r->cst) {
    ap_round_destroy(r);
    return o3m_err_set(e, O3M_ENOMEM, "round state of %d clients: out of memory", cfg->n_owners);
  }
  for (int o = 0; o < r->n_owners; o++)
    r->owners[o] = (round_owner){0, -1, -1, -1, -1, 0, 0, 0, 0, r->uncached_burst, 0, 0, 0, 0};
  /* Honest PP parts sum to at most sqrt(sum over PPs of max_norm_j^2) per
   * row; decoding may add n_pp 2^-(s+1) per component, sqrt(d) times that
   * per row (the relative rounding is inside O3M_WIRE_NORM_RTOL). */
  if (r->secure)
    r->pp_bound = cfg->pp_sum_norm +
                  sqrt((double)cfg->d) * o3m_secagg_max_error(cfg->n_pp, cfg->agg_scale);

  int rc = own_tables_load(r, cfg, e);
  if (rc < 0) goto fail;

  /* Round buffers are indexed with int (BLAS), so K x d must fit. */
  if ((int64_t)r->k_max * r->d > INT_MAX) {
    rc = o3m_err_set(e, O3M_EINVAL, "[policy] max_candidates = %d is too large for d = %d",
                     r->k_max, r->d);
    goto fail;
  }
  if (dupset_init(&r->dup, r->k_max) < 0) {
    rc = o3m_err_set(e, O3M_ENOMEM, "round buffers for %d candidates: out of memory", r->k_max);
    goto fail;
  }
  /* The batch's row budget is the one the passive participants use
   * (o3m_wire_mask_batch_rows). */
  r->batch_rows = o3m_wire_mask_batch_rows(r->k_max, r->d);
  if (r->batch_rows < r->k_max) {
    rc = o3m_err_set(e, O3M_EINVAL, "[policy] max_candidates = %d with d = %d", r->k_max, r->d);
    goto fail;
  }
  r->bigY = o3m_malloc(sizeof *r->bigY * (size_t)r->k_max * (size_t)r->d);
  r->bigU = o3m_malloc(sizeof *r->bigU * (size_t)r->d);
  r->bigUo = o3m_calloc((size_t)r->d, sizeof *r->bigUo);
  if (!r->bigY || !r->bigU || !r->bigUo) {
    rc = o3m_err_set(e, O3M_ENOMEM, "slice buffers for %d candidates: out of memory", r->k_max);
    goto fail;
  }
  r->arms_pool = o3m_malloc(sizeof *r->arms_pool * (size_t)AP_ROUND_SLOTS * (size_t)r->k_max);
  r->hash_pool = o3m_malloc(sizeof *r->hash_pool * (size_t)AP_ROUND_SLOTS * (size_t)r->k_max);
  if (!r->arms_pool || !r->hash_pool) {
    rc = o3m_err_set(e, O3M_ENOMEM, "queue for %d rounds: out of memory", AP_ROUND_SLOTS);
    goto fail;
  }
  /* A factored reply has one user row per round besides its item rows. */
  r->reply_rows = r->batch_rows + O3M_WIRE_MAX_BATCH;
  r->own_fact = r->own != NULL;
  r->cw = r->own_fact ? 2 * r->d + 1 : r->d;
  /* The key: one epoch per passive party, and the own item epoch. */
  if (cfg->n_pp + r->own_fact > AP_ITEMCACHE_MAX_PARTIES) {
    rc = o3m_err_set(e, O3M_EINVAL, "%d passive parties: the item cache keys at most %d",
                     cfg->n_pp, AP_ITEMCACHE_MAX_PARTIES - r->own_fact);
    goto fail;
  }
  if ((rc = ap_itemcache_create(&r->cache, cfg->item_cache, r->cw, e)) < 0) goto fail;
  rc = ap_epochwatch_create(&r->ew, AP_ITEMCACHE_MAX_PARTIES, cfg->epoch_changes_max, e);
  if (rc < 0) goto fail;
  r->ew_max = cfg->epoch_changes_max;
  /* The buffers of cfg->inflight slots (see ap_round.h). */
  r->n_slots = cfg->inflight;
  /* With several clients and slots, one slot is kept for the others
   * ("Fairness"). */
  r->owner_batches_max = r->n_owners > 1 && r->n_slots > 1 ? r->n_slots - 1 : r->n_slots;
  const size_t nv = (size_t)r->batch_rows * (size_t)r->d;
  for (int b = 0; b < r->n_slots; b++) {
    batch_slot *bs = &r->slot[b];
    bs->r = r;
    const size_t nr = (size_t)r->reply_rows * (size_t)r->d, nb = (size_t)r->batch_rows;
    bs->X0 = o3m_malloc(sizeof *bs->X0 * nb * (size_t)r->d0);
    bs->Y = o3m_malloc(sizeof *bs->Y * nv);
    if (r->secure) bs->acc = o3m_malloc(sizeof *bs->acc * nr);
    bs->P = o3m_malloc(sizeof *bs->P * nr);
    bs->Ypp = o3m_malloc(sizeof *bs->Ypp * nv);
    bs->Ib = o3m_malloc(sizeof *bs->Ib * nb * (size_t)r->cw);
    bs->Uown = o3m_malloc(sizeof *bs->Uown * O3M_WIRE_MAX_BATCH * (size_t)r->d);
    bs->Town = o3m_malloc(sizeof *bs->Town * nv);
    bs->known = o3m_malloc(nb);
    bs->fresh = o3m_malloc(nb);
    bs->ent = o3m_malloc(sizeof *bs->ent * nb);
    bs->uniq_id = o3m_malloc(sizeof *bs->uniq_id * nb);
    bs->cand = o3m_malloc(sizeof *bs->cand * nb);
    bs->new_items = o3m_malloc(sizeof *bs->new_items * nb);
    bs->new_of = o3m_malloc(sizeof *bs->new_of * nb);
    if (!bs->X0 || !bs->Y || (r->secure && !bs->acc) || !bs->P || !bs->Ypp || !bs->Ib ||
        !bs->Uown || !bs->Town || !bs->known || !bs->fresh || !bs->ent ||
        !bs->uniq_id || !bs->cand || !bs->new_items || !bs->new_of ||
        dupset_init(&bs->uniq, r->batch_rows) < 0) {
      rc = o3m_err_set(e, O3M_ENOMEM, "batch buffers for %d candidate rows: out of memory",
                       r->batch_rows);
      goto fail;
    }
    for (int i = 0; i < O3M_WIRE_MAX_BATCH; i++) bs->mq_ptr[i] = &bs->mq[i];
  }
  /* The fallback's buffers (ap_fallback.h): its rounds read their own
   * parts under the lock. */
  if (r->fallback) {
    r->X0lock = o3m_malloc(sizeof *r->X0lock * (size_t)r->k_max * (size_t)r->d0);
    r->zero_d = o3m_calloc((size_t)r->d, sizeof *r->zero_d);
    if (!r->X0lock || !r->zero_d) {
      rc = o3m_err_set(e, O3M_ENOMEM, "fallback buffers for %d candidates: out of memory",
                       r->k_max);
      goto fail;
    }
  }
  for (int i = 0; i < AP_ROUND_SLOTS; i++) {
    r->pool[i].arms = r->arms_pool + (size_t)i * (size_t)r->k_max;
    r->pool[i].hash = r->hash_pool + (size_t)i * (size_t)r->k_max;
    r->pool[i].next = i + 1 < AP_ROUND_SLOTS ? i + 1 : -1;
  }
  r->free_head = 0;
  *out = r;
  return 0;

fail:
  ap_round_destroy(r);
  return rc;
}

void ap_round_connect(ap_round *r, const o3m_block *block, uint64_t mask_id,
                      o3m_rpc_server *server, ap_peers *const *peers) {
  r->block = block;
  r->mask_id = mask_id;
  r->server = server;
  /* Parts cached under another mask are never summed under this one. */
  ap_itemcache_reset(r->cache, mask_id, 0, NULL);
  for (int b = 0; b < r->n_slots; b++) r->slot[b].peers = peers[b];
}

void ap_round_client_stats_get(const ap_round *r, int owner, ap_round_client_stats *st) {
  if (owner < 0 || owner >= r->n_owners) {
    memset(st, 0, sizeof *st);
    return;
  }
  *st = r->cst[owner];
}

void ap_round_stats_get(const ap_round *r, ap_round_stats *st) {
  *st = r->st;
  if (r->tables) {
    o3m_tables_stats ts;
    o3m_tables_stats_get(r->tables, r->own, &ts);
    st->reloads = ts.swaps;
    st->reloads_refused = ts.refused;
    st->last_reload_ms = ts.last_reload_ms;
  }
  ap_itemcache_stats cs;
  ap_itemcache_stats_get(r->cache, &cs);
  st->cache_hits = cs.hits;
  st->cache_misses = cs.misses;
  st->cache_size = cs.size;
  st->cache_capacity = cs.capacity;
  st->cache_resets = cs.resets;
  st->cache_evictions = cs.evictions;
}

uint64_t ap_round_owner_uncached(const ap_round *r, int owner) {
  return owner >= 0 && owner < r->n_owners ? r->owners[owner].uncached : 0;
}

void ap_round_destroy(ap_round *r) {
  if (!r) return;
  o3m_features_destroy(r->own);
  o3m_features_destroy(r->retired);
  o3m_tables_destroy(r->tables);
  ap_itemcache_destroy(r->cache);
  ap_epochwatch_destroy(r->ew);
  dupset_free(&r->dup);
  o3m_free(r->arms_pool);
  o3m_free(r->hash_pool);
  o3m_free(r->bigY);
  o3m_free(r->bigU);
  o3m_free(r->bigUo);
  o3m_free(r->owners);
  o3m_free(r->cst);
  o3m_free(r->X0lock);
  o3m_free(r->zero_d);
  for (int b = 0; b < AP_ROUND_MAX_INFLIGHT; b++) {
    o3m_free(r->slot[b].X0);
    o3m_free(r->slot[b].Y);
    batch_slot *bs = &r->slot[b];
    o3m_free(bs->acc);
    o3m_free(bs->P);
    o3m_free(bs->Ypp);
    o3m_free(bs->Ib);
    o3m_free(bs->Uown);
    o3m_free(bs->Town);
    o3m_free(bs->known);
    o3m_free(bs->fresh);
    o3m_free(bs->ent);
    o3m_free(bs->uniq_id);
    o3m_free(bs->cand);
    o3m_free(bs->new_items);
    o3m_free(bs->new_of);
    dupset_free(&bs->uniq);
  }
  o3m_free(r);
}

/* Logs a failed round at most once per WARN_PERIOD_MS, with the number of
 * failures left out since the last line. The message is the one sent to the
 * caller, which never quotes a feature or a reward. */
static void warn_round(ap_round *r, const o3m_err *e) {
  int64_t t = o3m_clock_ms();
  if (r->last_warn_ms != 0 && t - r->last_warn_ms < WARN_PERIOD_MS) {
    r->warn_suppressed++;
    return;
  }
  if (r->warn_suppressed)
    o3m_log_warn("round failed: %s: %s (%llu similar failures not logged)", o3m_errname(e->code),
                 o3m_err_message(e), (unsigned long long)r->warn_suppressed);
  else
    o3m_log_warn("round failed: %s: %s", o3m_errname(e->code), o3m_err_message(e));
  r->last_warn_ms = t;
  r->warn_suppressed = 0;
}

/* ---------------------------------------------------------------- validation */

/* Checks everything about a request before any state is touched, and puts
 * the disjoint model's arm of each candidate into arms (k_max entries). The
 * own features are read later, by the batch: from the request, or from the
 * own tables (which have a row, or a dummy, for every id). */
/* Unknown ids, as far as the AP's own tables tell (see "Unknown ids" in
 * ap_round.h): counts the round when its user or one of its items is not
 * in them and, with unknown_items = refuse, refuses a round with an unknown
 * item (O3M_ENOTFOUND naming it) before anything is queued or asked. */
static int own_ids_check(ap_round *r, const O3m__V1__RecommendRequest *req, int K, int owner,
                         o3m_err *e) {
  if (!r->own) return 0;
  if (req->user && req->user[0] &&
      o3m_features_find(r->own, O3M_FEATURES_USERS, req->user) == -1) {
    r->st.unknown_user_rounds++;
    r->cst[owner].unknown_user_rounds++;
  }
  /* Under serve the items are counted from the batch's own lookups
   * (batch_finish), so that each costs one lookup, or none when its own
   * part is cached; only a refusal must know before the round is queued. */
  if (!r->refuse_unknown_items) return 0;
  int k = 0;
  while (k < K && o3m_features_find(r->own, O3M_FEATURES_ITEMS, req->items[k]) != -1) k++;
  if (k == K) return 0;
  r->st.unknown_item_rounds++;
  r->cst[owner].unknown_item_rounds++;
  return o3m_err_set(e, O3M_ENOTFOUND, "items[%d] '%.64s' is not in the item table of the "
                     "active party '%s' ([policy] unknown_items = refuse)", k, req->items[k],
                     r->name);
}

static int recommend_validate(ap_round *r, const O3m__V1__RecommendRequest *req, int owner,
                              int *arms, uint64_t *hashes, o3m_err *e) {
  if (req->n_items < 1 || req->n_items > (size_t)r->k_max)
    return o3m_err_set(e, O3M_EINVAL, "items: %zu candidates, expected 1..%d", req->n_items,
                       r->k_max);
  int K = (int)req->n_items;
  int rc = o3m_wire_recommend_check(req, r->k_max, r->model == O3M_MODEL_DISJOINT ? r->n_arms : 0,
                                    e);
  if (rc < 0) {
    /* Every finding of the check is about the caller's arguments. */
    if (e) e->code = O3M_EINVAL;
    return O3M_EINVAL;
  }
  /* The ids are checked as every passive party checks them (an empty user
   * where some party has a user table, an empty item, an id longer than
   * any table holds), here, before any is asked: a query a passive party
   * refuses would fail its whole MaskBatch, every other client's round in
   * it too. */
  rc = o3m_wire_query_ids_check("RecommendRequest", req->user, r->user_required, K, req->items,
                                1, e);
  if (rc < 0) return rc;
  /* Each id hashed once (its length checked above): the duplicate sets and
   * the item cache use it. */
  for (int k = 0; k < K; k++) hashes[k] = ap_itemcache_hash(r->cache, req->items[k]);
  int first;
  int dup = dupset_find(&r->dup, K, req->items, hashes, &first);
  if (dup >= 0)
    return o3m_err_set(e, O3M_EINVAL, "items[%d] duplicates items[%d]", dup, first);
  rc = own_ids_check(r, req, K, owner, e);
  if (rc < 0) return rc;

  if (req->n_own_features > 0) {
    if (req->n_own_features != (size_t)K * (size_t)r->d0)
      return o3m_err_set(e, O3M_EINVAL, "own_features: %zu values, expected K x d_0 = %d x %d",
                         req->n_own_features, K, r->d0);
    for (size_t i = 0; i < req->n_own_features; i++)
      if (!isfinite(req->own_features[i]))
        return o3m_err_set(e, O3M_EINVAL, "own_features[%zu] is not finite", i);
    /* Each candidate's own part x^0 within this party's bound. */
    char what[O3M_CONFIG_MAX_NAME + 32];
    snprintf(what, sizeof what, "own_features of party '%s'", r->name);
    int nrc = o3m_wire_check_row_norms(what, K, r->d0, req->own_features, r->max_norm, 0, NULL, e);
    if (nrc < 0) return nrc;
  } else if (!r->own) {
    return o3m_err_set(e, O3M_EINVAL, "own_features: required (%d x %d values), this active "
                       "party has no feature tables", K, r->d0);
  }

  if (r->model == O3M_MODEL_DISJOINT) {
    if (req->n_arms > 0) {
      for (int k = 0; k < K; k++) arms[k] = (int)req->arms[k];
    } else {
      for (int k = 0; k < K; k++) {
        int a = ap_catalog_find(r->cat, req->items[k]);
        if (a < 0)
          return o3m_err_set(e, O3M_EINVAL, "items[%d] is not in the items catalog "
                             "(and no arms were given)", k);
        arms[k] = a;
      }
    }
  }
  return 0;
}

/* Adds owner o to the ring of owners with waiting rounds, just before the
 * owner whose turn is next (so it comes last in the current turn), or, when
 * that owner already had a round in the last batch formed, in its place:
 * its turn has just been, and a client that comes back with new rounds
 * (its previous ones answered) would otherwise wait for a second batch of
 * a client that always has rounds waiting (a flooding client: the flood
 * alone in the ring is always next). That owner's round then waits for
 * this one's turn only, as for any other's. */
static void ring_add(ap_round *r, int o) {
  round_owner *w = &r->owners[o];
  if (r->ring < 0) {
    w->ring_prev = w->ring_next = o;
    r->ring = o;
  } else {
    round_owner *nx = &r->owners[r->ring];
    w->ring_next = r->ring;
    w->ring_prev = nx->ring_prev;
    r->owners[nx->ring_prev].ring_next = o;
    nx->ring_prev = o;
    if (r->n_formed > 0 && nx->formed == r->n_formed) r->ring = o;
  }
  r->ring_len++;
}

/* Takes owner o out of the ring (its queue is empty). */
static void ring_remove(ap_round *r, int o) {
  round_owner *w = &r->owners[o];
  if (w->ring_next == o) {
    r->ring = -1;
  } else {
    r->owners[w->ring_prev].ring_next = w->ring_next;
    r->owners[w->ring_next].ring_prev = w->ring_prev;
    if (r->ring == o) r->ring = w->ring_next;
  }
  w->ring_prev = w->ring_next = -1;
  r->ring_len--;
}

int ap_round_submit(ap_round *r, o3m_rpc_call *call, const O3m__V1__RecommendRequest *req,
                    int owner, const char *client, o3m_err *e) {
  O3M_ASSERT(owner >= 0 && owner < r->n_owners);
  round_owner *w = &r->owners[owner];
  /* A client's share of the AP (ap_round.h, "Fairness"): refused before
   * anything is looked at, so that a client over its share costs no
   * validation either. */
  if (w->inflight >= r->inflight_max) {
    r->st.failed_rounds++;
    r->st.over_share++;
    return o3m_err_set(e, O3M_EFULL, "client '%s' has %d Recommend calls in flight, its cap "
                       "([policy] client_inflight_max = %d); retry when one is answered",
                       client ? client : "(no identity)", w->inflight, r->inflight_max);
  }
  /* Every waiting round holds one of Recommend's AP_ROUND_SLOTS server
   * slots, so gRPC cannot hand over a call while the pool is empty. */
  O3M_ASSERT(r->free_head >= 0);
  int i = r->free_head;
  queued *q = &r->pool[i];
  int rc = recommend_validate(r, req, owner, q->arms, q->hash, e);
  if (rc < 0) {
    r->st.failed_rounds++;
    return rc;
  }
  r->free_head = q->next;
  q->call = call;
  q->req = req;
  q->K = (int)req->n_items;
  q->owner = owner;
  q->next = -1;
  q->rc = 0;
  if (w->tail >= 0) r->pool[w->tail].next = i;
  else w->head = i;
  w->tail = i;
  if (w->ring_next < 0) ring_add(r, owner);
  w->last_ms = o3m_clock_ms();
  w->inflight++;
  r->n_waiting++;
  return O3M_RPC_DEFERRED;
}

/* ---------------------------------------------------------------- the batch */

/* 1 when round q's own part is factored (ap_round.h "Own parts"): the AP
 * has tables and the request brings no own features. */
static int own_factored(const ap_round *r, const queued *q) {
  return r->own_fact && q->req->n_own_features == 0;
}

/* The own parts of slot b's rounds (without the lock, while the passive
 * parties work): a factored round's user part Q^0 [u^0, 0] into b->Uown
 * (its item parts are the cache's or the new items' below), another
 * round's whole block X^0 (Q^0)^T from the request into its rows of b->Y;
 * then, with own tables, every new item's part Q^0 [0, i^0] and whether
 * the own item table holds it, into its entry of b->Ib. A round whose
 * lookup fails gets q->rc and zeros. */
static void own_parts_mask(batch_slot *b) {
  const ap_round *r = b->r;
  const size_t d = (size_t)r->d;
  const size_t d0 = (size_t)r->d0;
  size_t off = 0;
  for (int i = 0; i < b->n; i++) {
    queued *q = b->q[i];
    double *x = b->X0 + (size_t)i * d0;
    if (own_factored(r, q)) {
      /* A slice's earlier failure stays (its round fails when decided). */
      int rc = o3m_features_fill_user(b->own, q->req->user, x);
      if (rc < 0) {
        q->rc = rc;
        memset(x, 0, sizeof *x * d0);
      }
    } else {
      /* A request's own features are masked whole (round_take never
       * slices such a round); without any, a slice's rows are zeroed. */
      if (r->own_fact) memset(x, 0, sizeof *x * d0); /* its Uown row is not read */
      const double *X = q->req->own_features;
      o3m_block_apply(r->block, b->Kb[i], X ? X + (size_t)b->k0[i] * d0 : NULL, 0.0,
                      b->Y + off * d);
    }
    off += (size_t)b->Kb[i];
  }
  /* The user parts of the whole batch in one call: a call per round packed
   * the block again for one row each time. */
  if (r->own_fact) o3m_block_apply(r->block, b->n, b->X0, 0.0, b->Uown);
  if (!r->own_fact || b->n_new == 0) return;
  int rc = o3m_features_fill_items_known(b->own, b->n_new, (const char *const *)b->new_items,
                                         b->X0, b->known);
  if (rc < 0) {
    for (int i = 0; i < b->n; i++) b->q[i]->rc = rc;
    memset(b->Town, 0, sizeof *b->Town * (size_t)b->n_new * d);
    memset(b->known, 1, (size_t)b->n_new);
  } else {
    o3m_block_apply(r->block, b->n_new, b->X0, 0.0, b->Town);
  }
  for (int t = 0; t < b->n_new; t++) {
    double *en = b->Ib + (size_t)b->new_of[t] * (size_t)r->cw;
    memcpy(en + d, b->Town + (size_t)t * d, sizeof *en * d);
    en[2 * d] = b->known[t];
  }
}

/* Fills slot b's factored MaskBatch from its rounds (under the lock): one
 * query per round with its user only; the batch's distinct items, each
 * either found in the item cache (its I(i) copied into b->Ib, so that an
 * eviction before the batch is decided changes nothing it sums) or asked
 * for in the request's items. The cache key's epochs are kept: a reply
 * that names others makes the copied parts stale (batch_gather). */
static void batch_build(ap_round *r, batch_slot *b) {
  b->own = r->own;
  uint64_t mask_id;
  b->n_epochs = ap_itemcache_key(r->cache, &mask_id, b->epochs);
  /* The own item parts cached were masked from other own tables (a reload
   * swapped them): every entry goes, as when a passive party's epoch
   * changes, before any is read. */
  if (r->own_fact) {
    b->own_epoch = o3m_features_epoch(b->own, O3M_FEATURES_ITEMS);
    if (b->n_epochs > 0 && b->epochs[b->n_epochs - 1] != b->own_epoch) {
      b->epochs[b->n_epochs - 1] = b->own_epoch;
      ap_itemcache_reset(r->cache, r->mask_id, b->n_epochs, b->epochs);
    }
  }
  dupset_begin(&b->uniq, b->rows);
  b->n_uniq = b->n_new = 0;
  b->retried = 0;
  int row = 0;
  for (int i = 0; i < b->n; i++) {
    const O3m__V1__RecommendRequest *req = b->q[i]->req;
    O3m__V1__MaskQuery *mq = &b->mq[i];
    o3m__v1__mask_query__init(mq);
    mq->user = req->user;
    /* A round's outcome starts with its first candidates (batch_form set
     * Kb and k0: the whole round, or a slice). */
    if (b->k0[i] == 0) {
      b->q[i]->rc = 0;
      b->q[i]->unknown_items = 0;
    }
    for (int k = b->k0[i]; k < b->k0[i] + b->Kb[i]; k++) {
      const char *id = req->items[k];
      const uint64_t h = b->q[i]->hash[k];
      int u = dupset_add(&b->uniq, b->uniq_id, b->n_uniq, id, h);
      if (u < 0) {
        u = b->n_uniq++;
        b->uniq_id[u] = id;
        double *en = b->Ib + (size_t)u * (size_t)r->cw;
        /* With one slot nothing puts or resets before this batch's sums
         * are made (ap_itemcache.h, Threads): the entry is read in place;
         * with several it is copied. */
        const double *c = ap_itemcache_ref_hashed(r->cache, id, h);
        if (c && r->n_slots > 1) {
          memcpy(en, c, sizeof *en * (size_t)r->cw);
          c = en;
        }
        b->ent[u] = c ? c : en;
        b->fresh[u] = !c;
        if (!c) {
          b->new_of[b->n_new] = u;
          b->new_items[b->n_new++] = req->items[k];
        }
      }
      b->cand[row++] = u;
    }
  }
}

/* Puts the items slot b asked for into the cache (under the lock), after
 * making the epochs its replies named the cache's key: a change drops
 * every entry, so that no context sums parts of two epochs. */
static void batch_cache(ap_round *r, batch_slot *b) {
  if (b->rc < 0) return;
  const int nk = b->n_got + r->own_fact;
  if (!ap_itemcache_matches(r->cache, r->mask_id, nk, b->got))
    ap_itemcache_reset(r->cache, r->mask_id, nk, b->got);
  for (int t = 0; t < b->n_new; t++) {
    int u = b->new_of[t];
    ap_itemcache_put(r->cache, b->uniq_id[u], b->Ib + (size_t)u * (size_t)r->cw);
  }
}

/* ================================================================ cost model */

/* What a round, or a slice of it, costs ("Cost model" in ap_round.h), in
 * values of d: the AP's part, one context and one score per candidate
 * (s x d), and the passive parties' part, what they compute and send for
 * it: one user row per round in the batch and one item part per item the
 * AP has not cached, each by every passive party ((1 + uncached) x n_pp x
 * d). A round whose items are all cached costs them one user row. */
typedef struct round_cost {
  int64_t ap, pp;
  int uncached; /* its items that are not in the item cache */
} round_cost;

/* Costs of candidates k0.. of round q, as many as fit ap_room and pp_room
 * (at most s_max; 0 when not even the first does): *c gets the costs of
 * those taken. The cache is looked at without counting a lookup or
 * touching its order (ap_itemcache_has_hashed); a batch in flight may put
 * an item meanwhile, so the count is what the parties would be asked now,
 * an upper bound of what the batch asks. */
static int cost_fit(ap_round *r, const queued *q, int k0, int s_max, int64_t ap_room,
                    int64_t pp_room, round_cost *c) {
  *c = (round_cost){0, r->pp_row, 0};
  if (c->pp > pp_room) return 0;
  int s = 0;
  for (; s < s_max; s++) {
    const int k = k0 + s;
    const int miss = !ap_itemcache_has_hashed(r->cache, q->req->items[k], q->hash[k]);
    const int64_t ap = c->ap + r->d, pp = c->pp + miss * r->pp_row;
    if (ap > ap_room || pp > pp_room) break;
    c->ap = ap;
    c->pp = pp;
    c->uncached += miss;
  }
  return s;
}

/* Owner w's budget of uncached ids refilled up to now (at most the burst). */
static void budget_refill(const ap_round *r, round_owner *w, int64_t now) {
  if (r->uncached_rate <= 0) return;
  if (w->tokens_ms > 0 && now > w->tokens_ms) {
    w->tokens += r->uncached_rate * (double)(now - w->tokens_ms) / 1e3;
    if (w->tokens > r->uncached_burst) w->tokens = r->uncached_burst;
  }
  w->tokens_ms = now;
}

/* 1 when owner w may have u more uncached ids at its share of the turns:
 * no budget, none uncached, or enough left (a round of more than the burst
 * needs a full budget). */
static int budget_within(const ap_round *r, const round_owner *w, int u) {
  if (r->uncached_rate <= 0 || u == 0) return 1;
  return w->tokens >= (u < r->uncached_burst ? u : r->uncached_burst);
}

/* Owner w's budget after u uncached ids were taken: it may go below zero
 * (a round served while over it, or one larger than the burst), at most
 * the burst, so that a client that stops is back within it after at most
 * twice the burst's time. */
static void budget_take(const ap_round *r, round_owner *w, int u) {
  w->uncached += (uint64_t)u;
  if (r->uncached_rate <= 0) return;
  w->tokens -= u;
  if (w->tokens < -r->uncached_burst) w->tokens = -r->uncached_burst;
}

/* 1 when owner o is active (AP_ROUND_ACTIVE_MS in ap_round.h): it has a
 * round in flight or asked one lately. */
static int owner_active(const ap_round *r, int o, int64_t now) {
  return r->owners[o].inflight > 0 || now - r->owners[o].last_ms < AP_ROUND_ACTIVE_MS;
}

/* The budgets a batch has left for one more round: its share of each cost
 * (no bound for the first round: one above the budget goes alone). */
typedef struct batch_room {
  int n, rows;     /* rounds and candidate rows in the batch */
  int64_t ap, pp;  /* its costs so far */
} batch_room;

static int64_t room_of(const ap_round *r, const batch_room *bt, int64_t used) {
  return bt->n == 0 ? INT64_MAX : r->cost_max - used;
}

/* How many candidates of round q (an owner's oldest waiting round) a batch
 * takes, given what it holds (bt), from candidate *k0 on, with the costs
 * of those in *c: q whole when it fits (as before slices existed), a slice
 * of it ("Slices" in ap_round.h), or 0 when it waits for a later batch.
 * took_big: the batch holds a slice already; others: another owner is
 * active. A round is sliced when either of its costs is above slice_cost,
 * and a slice has at most slice_cost of each, but at least one candidate
 * when the batch has room for that one. */
static int round_take(ap_round *r, const queued *q, const batch_room *bt, int took_big,
                      int others, int *k0, round_cost *c) {
  *k0 = 0;
  *c = (round_cost){0, 0, 0};
  const int room_rows = r->batch_rows - bt->rows;
  const int64_t ap_room = room_of(r, bt, bt->ap), pp_room = room_of(r, bt, bt->pp);
  int slicing = 0, from = 0;
  if (r->big == q) {
    if (took_big || r->big_busy) return 0;
    /* Alone now: the rest in as few slices as the budget allows. */
    slicing = others;
    from = r->big_next;
  } else {
    round_cost whole;
    cost_fit(r, q, 0, q->K, INT64_MAX, INT64_MAX, &whole);
    const int fits = q->K <= room_rows && whole.ap <= ap_room && whole.pp <= pp_room;
    /* Sliced: a cost above a slice, the others active, its own parts from
     * the tables (a request's own features are masked whole, as one
     * call). One round is sliced at a time: while another is, this one
     * goes whole if it fits the batch's budget beside others, and waits if
     * not. */
    if ((whole.ap > r->slice_cost || whole.pp > r->slice_cost) && q->req->n_own_features == 0 &&
        others) {
      if (r->big || took_big) {
        if (!fits || whole.ap > r->cost_max || whole.pp > r->cost_max) return 0;
        *c = whole;
        return q->K;
      }
      slicing = 1;
    } else {
      if (!fits) return 0;
      *c = whole;
      return q->K;
    }
  }
  *k0 = from;
  int s_max = q->K - from;
  if (s_max > room_rows) s_max = room_rows;
  int64_t a = ap_room, p = pp_room;
  if (slicing) {
    if (a > r->slice_cost) a = r->slice_cost;
    if (p > r->slice_cost) p = r->slice_cost;
  }
  int s = cost_fit(r, q, from, s_max, a, p, c);
  /* A slice smaller than one candidate's cost still takes one, when the
   * batch's budget has room for it. */
  if (s == 0 && s_max > 0) s = cost_fit(r, q, from, 1, ap_room, pp_room, c);
  return s;
}

/* Moves waiting rounds into slot b (under the lock; see "Fairness" in
 * ap_round.h): the owners take turns in the ring, each giving its oldest
 * waiting round, while the batch has room: at most O3M_WIRE_MAX_BATCH
 * rounds, batch_rows candidate rows and cost_max of each cost ("Cost
 * model"; a round that costs more goes alone, or in slices: round_take).
 * An owner whose next round does not fit is passed over (that round waits
 * for the next batch, where it comes first in its turn); so is one whose
 * round would take uncached ids beyond its budget, as long as another
 * owner's round goes in the batch: such rounds go only in batches that no
 * round within its budget wants (over, the second pass). The turns stop
 * once every owner in the ring was passed over in a row. The next batch
 * goes on with the owner whose turn came next. A sliced round stays at its
 * owner's head until the batch of its last slice is decided
 * (batch_finish). */
static void batch_form_pass(ap_round *r, batch_slot *b, uint64_t id, int64_t now, int n_active,
                            int over) {
  batch_room bt = {0, 0, 0, 0};
  int misses = 0, took_big = 0;
  int o = r->ring;
  while (o >= 0 && bt.n < O3M_WIRE_MAX_BATCH && misses < r->ring_len) {
    round_owner *w = &r->owners[o];
    int next = w->ring_next;
    queued *q = &r->pool[w->head];
    /* An owner already in owner_batches_max batches in flight waits for
     * one of them, unless this batch holds its rounds already. */
    int room = w->formed == id || w->batches < r->owner_batches_max;
    const int others = n_active - owner_active(r, o, now) > 0;
    int k0 = 0;
    round_cost c;
    int s = room ? round_take(r, q, &bt, took_big, others, &k0, &c) : 0;
    if (s > 0 && !over && w->over_passes < AP_ROUND_BUDGET_PASSES) {
      budget_refill(r, w, now);
      if (!budget_within(r, w, c.uncached)) {
        r->st.over_budget_waits++;
        if (w->over_batch != id) {
          w->over_batch = id;
          w->over_passes++;
        }
        s = 0;
      }
    }
    if (s > 0) {
      budget_take(r, w, c.uncached);
      w->over_passes = 0;
      if (w->formed != id) {
        w->formed = id;
        w->batches++;
      }
      if (r->big == q || s < q->K) {
        /* A slice: the round stays at its owner's head. */
        if (!r->big) {
          r->big = q;
          r->big_next = 0;
        }
        r->big_next = k0 + s;
        r->big_busy = 1;
        took_big = 1;
        b->sliced = bt.n;
      } else {
        w->head = q->next;
        if (w->head < 0) {
          w->tail = -1;
          ring_remove(r, o);
          if (r->ring < 0) next = -1;
        }
        r->n_waiting--;
      }
      b->k0[bt.n] = k0;
      b->Kb[bt.n] = s;
      b->fin[bt.n] = k0 + s == q->K;
      b->q[bt.n++] = q;
      bt.rows += s;
      bt.ap += c.ap;
      bt.pp += c.pp;
      misses = 0;
    } else {
      misses++;
    }
    o = next;
  }
  if (o >= 0 && bt.n > 0) r->ring = o;
  b->n = bt.n;
  b->rows = bt.rows;
}

/* Forms slot b's batch: the rounds within their clients' budgets, or, when
 * none can go, those over theirs. */
static void batch_form(ap_round *r, batch_slot *b) {
  const uint64_t id = ++r->n_formed;
  b->seq = id;
  /* The active owners, counted once: nothing here changes who is. */
  const int64_t now = o3m_clock_ms();
  int n_active = 0;
  for (int x = 0; x < r->n_owners; x++) n_active += owner_active(r, x, now);
  b->sliced = -1;
  batch_form_pass(r, b, id, now, n_active, 0);
  /* Nothing within its budget could go: the rounds over it have the batch,
   * when no other batch is in flight, so that they never make the parties
   * compute beside a batch of rounds within their budget (with several
   * slots, that batch's completion runs this again). */
  if (b->n == 0 && r->uncached_rate > 0) {
    for (int k = 0; k < r->n_slots; k++)
      if (r->slot[k].busy) return;
    batch_form_pass(r, b, id, now, n_active, 1);
  }
}

/* Notes passive party j as missing from slot b's batch, for reason (a
 * degraded answer names it, ap_fallback.h), and opens its circuit breaker
 * (ap_peers.h): the next batches do not wait for it. */
static void batch_missing(batch_slot *b, int j, const char *reason) {
  if (j >= ap_peers_count(b->peers)) return;
  b->missing[b->n_missing] = (char *)ap_peers_name(b->peers, j);
  b->why[b->n_missing++] = reason;
}

/* One factored fan-out of slot b (without the lock): the MaskBatch with
 * the rounds' users and the items in b->new_items to every passive party,
 * their replies checked and summed into b->P (n user rows, then n_new
 * item rows; decoded once when secure), the epochs they name in b->got.
 * The own blocks are masked while the parties work when own is set. Every
 * started call is finished. */
static int fanout(batch_slot *b, int own, o3m_err *e) {
  const ap_round *r = b->r;
  const int n = b->n, rows = n + b->n_new;
  O3m__V1__MaskBatchRequest br = O3M__V1__MASK_BATCH_REQUEST__INIT;
  br.mask_id = r->mask_id;
  br.n_queries = (size_t)n;
  br.queries = b->mq_ptr;
  br.factored = 1;
  br.n_items = (size_t)b->n_new;
  br.items = b->new_items;
  if (r->secure) {
    /* A fresh nonce binds this batch's masks (o3m_secagg.h). */
    randombytes_buf(b->nonce, sizeof b->nonce);
    br.nonce.data = b->nonce;
    br.nonce.len = sizeof b->nonce;
    br.scale = (uint32_t)r->agg_scale;
  }
  int started = 0, rc = 0;
  b->n_missing = 0;
  /* A party whose circuit breaker is open is not waited for: the batch
   * goes to the local model at once (ap_peers.h). Nor is one held out
   * because its epochs flapped (ap_epochwatch.h), which is not asked. */
  const int64_t now = o3m_clock_ms();
  for (int j = 0; j < ap_peers_count(b->peers); j++)
    if (ap_peers_held(b->peers, j, now)) {
      batch_missing(b, j, "EPOCH_FLAPPING");
      if (rc == 0)
        rc = o3m_err_set(e, O3M_EUNAVAILABLE, "party '%s': held out for a minute (its item "
                         "epochs flapped: epoch_changes_max_per_minute)",
                         ap_peers_name(b->peers, j));
    } else if (ap_peers_is_open(b->peers, j)) {
      batch_missing(b, j, "BREAKER");
      if (rc == 0)
        rc = o3m_err_set(e, O3M_EUNAVAILABLE, "party '%s': missing (its circuit breaker is "
                         "open until it answers again)", ap_peers_name(b->peers, j));
    }
  if (rc == 0) {
    rc = ap_peers_start(b->peers, O3M_PATH_PASSIVE_MASK_BATCH, &br.base,
                        &o3m__v1__mask_batch_reply__descriptor, &started, e);
    if (rc < 0) {
      batch_missing(b, started, o3m_errname(rc));
      ap_peers_trip(b->peers, started);
    }
  }
  /* The own parts, overlapped with the passive participants' work. */
  if (own && rc == 0) own_parts_mask(b);
  const size_t nv = (size_t)rows * (size_t)r->d;
  if (r->secure) memset(b->acc, 0, sizeof *b->acc * nv);
  else memset(b->P, 0, sizeof *b->P * nv);
  b->n_got = started;
  if (r->own_fact) b->got[started] = b->own_epoch;
  o3m_err pe;
  for (int j = 0; j < started; j++) {
    ProtobufCMessage *m;
    o3m_err_clear(&pe);
    int x = ap_peers_finish(b->peers, j, &m, &pe);
    if (x == 0)
      x = o3m_wire_mask_batch_factored_reply_check((const O3m__V1__MaskBatchReply *)m,
                                                   ap_peers_slot(b->peers, j), n, b->n_new, r->d,
                                                   r->mask_id, r->secure,
                                                   ap_peers_max_norm(b->peers, j), &pe);
    if (x < 0) {
      batch_missing(b, j, o3m_errname(x));
      ap_peers_trip(b->peers, j);
      if (rc == 0)
        rc = o3m_err_set(e, x, "party '%s': %s", ap_peers_name(b->peers, j),
                         o3m_err_message(&pe));
      continue;
    }
    const O3m__V1__MaskBatchReply *rep = (const O3m__V1__MaskBatchReply *)m;
    b->got[j] = rep->item_epoch;
    /* Secure: acc += the party's words (mod 2^64). Per-party: P += its
     * parts, every row at once. */
    if (rc == 0 && r->secure)
      o3m_secagg_add_part(nv, rep->masked, b->acc);
    else if (rc == 0)
      o3m_axpy(rows * r->d, 1.0, rep->values, b->P);
  }
  if (rc == 0 && r->secure) o3m_secagg_decode(r->agg_scale, nv, b->acc, b->P);
  return rc;
}

/* Round i's U(u), the passive parties' summed user part: its row of the
 * replies, or for a slice after the first the first slice's ("Slices" in
 * ap_round.h). */
static const double *user_part(const batch_slot *b, int i) {
  if (i == b->sliced && b->k0[i] > 0) return b->r->bigU;
  return b->P + (size_t)i * (size_t)b->r->d;
}

/* Every candidate's U(u) + I(i), the passive parties' sum, into b->Ypp
 * (for the message of a failed check only: batch_contexts checks each row
 * as it makes it). */
static void pp_sums(batch_slot *b) {
  const size_t d = (size_t)b->r->d;
  int row = 0;
  for (int i = 0; i < b->n; i++)
    for (int k = 0; k < b->Kb[i]; k++, row++) {
      const double *Uq = user_part(b, i), *Iq = b->ent[b->cand[row]];
      double *o = b->Ypp + (size_t)row * d;
      for (size_t c = 0; c < d; c++) o[c] = Uq[c] + Iq[c];
    }
}

/* After a fan-out that succeeded: the new items' I(i) into their entries,
 * then, in one pass, every candidate's context into b->Y: U(u) + I(i)
 * plus its own user and item parts, or plus the own block already there
 * (own_parts_mask), with each round's unknown_items from the entries'
 * flags. Each row is checked while it is in the cache, against the
 * bounds of o3m_wire_check_row_norms: secure, U(u) + I(i), the only sum
 * that decodes, against the passive parties' joint bound (so that a hostile
 * PP can move the sum only inside it, as with per-party parts), and the
 * whole context against sum_norm (honest parts sum to ||Q x|| = ||x|| <=
 * sqrt(sum_j max_norm_j^2); parts that each keep their bound but are not
 * Q^j x^j could add up to more). On a failure that check runs again over
 * all rows, for its message. */
static int batch_contexts(batch_slot *b, o3m_err *e) {
  const ap_round *r = b->r;
  const size_t d = (size_t)r->d, cw = (size_t)r->cw;
  const int n = b->n;
  for (int t = 0; t < b->n_new; t++)
    memcpy(b->Ib + (size_t)b->new_of[t] * cw, b->P + (size_t)(n + t) * d, sizeof *b->Ib * d);
  const double lim_pp = r->secure ? o3m_wire_norm_limit2(r->pp_bound) : 0.0;
  const double lim_sum = o3m_wire_norm_limit2(r->sum_norm);
  double *o = b->Ypp; /* the row's U(u) + I(i), while it is checked */
  int over_pp = 0, over_sum = 0, row = 0;
  for (int i = 0; i < n; i++) {
    const int fact = own_factored(r, b->q[i]);
    const double *Uq = user_part(b, i), *Uo = b->Uown + (size_t)i * d;
    if (i == b->sliced && b->k0[i] > 0) Uo = r->bigUo;
    int unknown = 0;
    for (int k = 0; k < b->Kb[i]; k++, row++) {
      const double *Iq = b->ent[b->cand[row]];
      double *y = b->Y + (size_t)row * d;
      if (fact) {
        const double *Io = Iq + d;
        for (size_t c = 0; c < d; c++) {
          o[c] = Uq[c] + Iq[c];
          y[c] = o[c] + Uo[c] + Io[c];
        }
      } else {
        for (size_t c = 0; c < d; c++) {
          o[c] = Uq[c] + Iq[c];
          y[c] += o[c];
        }
      }
      /* Not <=: a NaN fails too. */
      if (r->secure && !(o3m_dot(r->d, o, o) <= lim_pp)) over_pp = 1;
      if (!(o3m_dot(r->d, y, y) <= lim_sum)) over_sum = 1;
      if (r->own_fact) unknown |= Iq[2 * d] == 0.0;
    }
    b->q[i]->unknown_items |= unknown;
  }
  const int rows = b->rows;
  if (over_pp) {
    pp_sums(b);
    int rc = o3m_wire_check_row_norms("the decoded sum of the passive parties' parts", rows,
                                      r->d, b->Ypp, r->pp_bound, n, b->Kb, e);
    if (rc < 0) return rc;
  }
  if (over_sum)
    return o3m_wire_check_row_norms("the sum of the parties' masked parts", rows, r->d, b->Y,
                                    r->sum_norm, n, b->Kb, e);
  return 0;
}

/* Keeps what slot b gathered of the sliced round ("Slices" in ap_round.h):
 * its contexts into their rows of r->bigY and, from its first slice, its
 * user parts for the later ones. Only the slot that holds the round's one
 * slice in flight writes these. */
static void slice_keep(batch_slot *b) {
  const ap_round *r = b->r;
  const size_t d = (size_t)r->d;
  const int i = b->sliced;
  size_t off = 0;
  for (int j = 0; j < i; j++) off += (size_t)b->Kb[j];
  memcpy(r->bigY + (size_t)b->k0[i] * d, b->Y + off * d, sizeof *r->bigY * (size_t)b->Kb[i] * d);
  if (b->k0[i] == 0) {
    memcpy(r->bigU, b->P + (size_t)i * d, sizeof *r->bigU * d);
    if (own_factored(r, b->q[i])) memcpy(r->bigUo, b->Uown + (size_t)i * d, sizeof *r->bigUo * d);
  }
}

/* The fan-out of slot b's batch of n rounds with rows candidates in all,
 * run without the server's lock (it touches only the slot, its rounds'
 * requests and read-only state: the block, the own tables, the bounds):
 * one factored MaskBatch to every passive participant at once, the own
 * parts masked while they work, and every reply checked and added, so
 * that the rows of round i in b->Y (after those of rounds 0..i-1) are its
 * sums Q x = own part + U(u) + I(i). When the batch used cached item parts
 * and a reply names other item epochs than those parts were summed under
 * (a party reloaded its items), the batch is asked again for the items it
 * had from the cache, so that no context sums parts of two epochs; the
 * items of the first replies are kept, being parts of the epochs named,
 * and a second reply must name the same epochs, or its party is flapping
 * ("Flapping epochs" in ap_round.h) and the batch fails naming it. Every
 * call that was started is finished, whatever happens, so that no client
 * is left with a call in flight. On failure b->rc is the first failing
 * party's code (in party order) and b->e names it; b->Y is then garbage,
 * and nothing else changed. A round whose own features cannot be read
 * gets q[i].rc instead. */
static void batch_gather(void *arg) {
  batch_slot *b = arg;
  const ap_round *r = b->r;
  const size_t d = (size_t)r->d;
  o3m_err *e = &b->e;
  o3m_err_clear(e);
  int rc = fanout(b, 1, e);
  memset(b->flapped, 0, sizeof b->flapped);
  /* The key the replies make: the passive parties' epochs and the own one,
   * which batch_build already made the cache's. */
  const int nk = b->n_got + r->own_fact;
  if (rc == 0 && b->n_new < b->n_uniq &&
      (b->n_epochs != nk || memcmp(b->epochs, b->got, sizeof *b->got * (size_t)nk))) {
    /* The items the first replies brought are parts of the epochs they
     * named, and kept: only the cached ones are asked for again, so that
     * no party is asked for an item twice under one epoch. */
    const size_t cw = (size_t)r->cw;
    const int n = b->n;
    for (int t = 0; t < b->n_new; t++)
      memcpy(b->Ib + (size_t)b->new_of[t] * cw, b->P + (size_t)(n + t) * d, sizeof *b->Ib * d);
    uint64_t first[AP_ITEMCACHE_MAX_PARTIES];
    memcpy(first, b->got, sizeof *b->got * (size_t)nk);
    int s = 0;
    for (int u = 0; u < b->n_uniq; u++) {
      if (b->fresh[u]) continue;
      b->new_of[s] = u;
      b->new_items[s++] = (char *)b->uniq_id[u];
      /* The item's row of Ib gets the new answer; the own half of one
       * read in the cache is still valid (its own epoch is the key's). */
      double *en = b->Ib + (size_t)u * cw;
      if (b->ent[u] != en) {
        memcpy(en + d, b->ent[u] + d, sizeof *en * (cw - d));
        b->ent[u] = en;
      }
    }
    b->n_new = s;
    b->retried = 1;
    rc = fanout(b, 0, e);
    /* The second replies must name the epochs of the first: a party that
     * names yet another one within one batch is flapping (no reload is
     * that fast), and its parts of two epochs cannot be summed. */
    int flaps = 0;
    for (int j = 0; rc == 0 && j < b->n_got; j++)
      if (b->got[j] != first[j]) {
        b->flapped[j] = 1;
        batch_missing(b, j, "EPOCH_FLAPPING");
        if (flaps++ == 0)
          o3m_err_set(e, O3M_EUNAVAILABLE, "party '%s': %s", ap_peers_name(b->peers, j),
                      ap_epochwatch_why(-1));
      }
    if (flaps > 0) rc = O3M_EUNAVAILABLE;
  }
  if (rc == 0) rc = batch_contexts(b, e);
  /* Asked again: every item of the batch is new to the cache now
   * (batch_cache puts them all). */
  if (rc == 0 && b->retried) {
    for (int u = 0; u < b->n_uniq; u++) b->new_of[u] = u;
    b->n_new = b->n_uniq;
  }
  if (rc == 0 && b->sliced >= 0) slice_keep(b);
  b->rc = rc;
}

/* Fails deferred round q with code and a message, and counts it. */
static void round_fail(ap_round *r, queued *q, const o3m_err *why) {
  r->st.failed_rounds++;
  warn_round(r, why);
  o3m_rpc_call_fail(q->call, why->code, why);
}

/* Round q's own parts X^0 (K x d0): the request's, or read from the own
 * tables into r->X0lock (under the lock). NULL if the lookup fails. */
static const double *own_parts(ap_round *r, const queued *q) {
  if (q->req->n_own_features > 0) return q->req->own_features;
  if (o3m_features_fill(r->own, q->req->user, q->K, (const char *const *)q->req->items,
                        r->X0lock, NULL, NULL) < 0)
    return NULL;
  return r->X0lock;
}

/* Answers round q with its decision (every Recommendation field but the
 * degraded ones set from the arguments). */
static void round_answer(ap_round *r, queued *q, uint64_t id, int chosen, double score,
                         const batch_slot *degraded_by) {
  O3m__V1__Recommendation rep = O3M__V1__RECOMMENDATION__INIT;
  rep.decision = id;
  rep.candidate = (uint32_t)chosen;
  rep.item = q->req->items[chosen];
  rep.score = score;
  rep.mask_id = r->mask_id;
  rep.updates = o3m_policy_updates(r->policy);
  if (degraded_by) {
    rep.degraded = 1;
    rep.n_missing = (size_t)degraded_by->n_missing;
    rep.missing = (char **)degraded_by->missing;
  }
  /* The call is deferred, the reply is a Recommendation with every field
   * set and a few dozen bytes (an id of at most O3M_MAX_ID, and the names
   * of the missing parties), far below the server's message limit (the
   * largest valid Recommend): it packs. */
  o3m_err e;
  o3m_err_clear(&e);
  int rc = o3m_rpc_call_reply(q->call, &rep.base, &e);
  O3M_ASSERT(rc == 0);
}

/* Decides round q of slot b, whose fan-out failed, with the local model
 * (ap_fallback.h): chooses on the own parts alone, opens the decision with
 * a zero federated context and the degraded flag (its reward reaches the
 * local model only) and answers it degraded, naming the missing parties. */
static void round_decide_local(ap_round *r, queued *q, const batch_slot *b) {
  o3m_err e;
  o3m_err_clear(&e);
  const double *X0 = own_parts(r, q);
  if (!X0) {
    o3m_err_set(&e, O3M_EINVAL, "own_features: lookup in the own tables failed");
    round_fail(r, q, &e);
    return;
  }
  const int *arms = r->model == O3M_MODEL_DISJOINT ? q->arms : NULL;
  int chosen;
  double score;
  int rc = ap_fallback_choose(r->fallback, q->K, X0, arms, &chosen, &score);
  if (rc < 0) {
    o3m_err_set(&e, rc, "the local model could not choose among the %d candidates", q->K);
    round_fail(r, q, &e);
    return;
  }
  uint64_t id;
  int arm = arms ? arms[chosen] : 0;
  rc = ap_pending_open_as(r->pending, q->owner, arm, r->mask_id, r->zero_d, o3m_clock_ms(), &id);
  if (rc < 0) {
    o3m_err_set(&e, rc, "no decision id could be drawn from the OS random source");
    round_fail(r, q, &e);
    return;
  }
  const double *x0 = X0 + (size_t)chosen * (size_t)r->d0;
  ap_pending_set_local(r->pending, id, x0, 1);
  if (r->record &&
      (rc = r->record(r->record_ctx, id, q->owner, arm, r->mask_id, r->zero_d, x0, 1, &e)) < 0) {
    ap_pending_close(r->pending, id);
    round_fail(r, q, &e);
    return;
  }
  for (int j = 0; j < b->n_missing; j++)
    ap_fallback_note(r->fallback, b->missing[j], b->why[j]);
  r->st.rounds++;
  r->st.degraded++;
  r->cst[q->owner].rounds++;
  r->cst[q->owner].degraded++;
  round_answer(r, q, id, chosen, score, b);
}

/* Opens and answers round q, whose sums Q x are the K rows at Y and whose
 * choice the policy made in pc (batch_decide). */
static void round_decide(ap_round *r, queued *q, const double *Y, const o3m_policy_round *pc) {
  o3m_err e;
  o3m_err_clear(&e);
  if (q->rc < 0) {
    o3m_err_set(&e, q->rc, "own_features: lookup in the own tables failed");
    round_fail(r, q, &e);
    return;
  }
  const int *arms = pc->arms;
  int chosen = pc->chosen, rc = pc->rc;
  double score = pc->score;
  if (rc < 0) {
    o3m_err_set(&e, rc, "the policy could not choose among the %d candidates", q->K);
    round_fail(r, q, &e);
    return;
  }
  uint64_t id;
  int arm = arms ? arms[chosen] : 0;
  rc = ap_pending_open_as(r->pending, q->owner, arm, r->mask_id, Y + (size_t)chosen * r->d,
                          o3m_clock_ms(), &id);
  if (rc < 0) {
    o3m_err_set(&e, rc, "no decision id could be drawn from the OS random source");
    round_fail(r, q, &e);
    return;
  }
  /* The local model learns from this decision's reward too: keep the
   * chosen candidate's own part beside it (and in the replica record). */
  const double *x0 = NULL;
  if (r->fallback) {
    if (q->req->n_own_features > 0) {
      x0 = q->req->own_features + (size_t)chosen * (size_t)r->d0;
    } else {
      /* The round's own lookup succeeded (q->rc): the chosen row's too. */
      char *item = q->req->items[chosen];
      o3m_features_fill(r->own, q->req->user, 1, (const char *const *)&item, r->X0lock, NULL,
                        NULL);
      x0 = r->X0lock;
    }
    ap_pending_set_local(r->pending, id, x0, 0);
  }
  if (r->record &&
      (rc = r->record(r->record_ctx, id, q->owner, arm, r->mask_id, Y + (size_t)chosen * r->d,
                      x0, 0, &e)) < 0) {
    ap_pending_close(r->pending, id);
    round_fail(r, q, &e);
    return;
  }
  r->st.rounds++;
  r->cst[q->owner].rounds++;
  round_answer(r, q, id, chosen, score, NULL);
}

/* Decides slot b's rounds, in arrival order, after its fan-out (under the
 * lock): every round fails if the fan-out failed, or if the before_decide
 * hook refuses (What a decision sees, ap_round.h). The policy chooses for
 * all rounds at once (o3m_policy_choose_batch: one scoring call for the
 * shared model), which is exactly choosing round by round: the model
 * cannot change between them, since no reward is applied while the lock
 * is held, and opening, recording and answering a decision do not touch
 * the policy. A round whose own lookup failed is passed with K = 0, which
 * the policy refuses without a draw, as it was never asked before. */
static void batch_decide(ap_round *r, batch_slot *b) {
  o3m_err he;
  o3m_err_clear(&he);
  int hrc = r->before_decide ? r->before_decide(r->before_decide_ctx, &he) : 0;
  /* A failed batch ends all its rounds, a sliced one too ("Slices"). */
  if (hrc < 0 || b->rc < 0) memset(b->fin, 1, (size_t)b->n);
  if (hrc < 0) {
    for (int i = 0; i < b->n; i++) round_fail(r, b->q[i], &he);
    return;
  }
  if (b->rc < 0) {
    /* A party was missing: the local model decides (ap_fallback.h). A
     * failure no party is named for (the sum of the parts out of its
     * bound) still fails the batch. */
    if (r->fallback && b->n_missing > 0) {
      for (int i = 0; i < b->n; i++) round_decide_local(r, b->q[i], b);
      return;
    }
    r->st.peer_failures += (uint64_t)b->n;
    for (int i = 0; i < b->n; i++) round_fail(r, b->q[i], &b->e);
    return;
  }
  /* A slice before the last is passed with K = 0 too, and not decided;
   * the last one's round is scored on all its rows, gathered in r->bigY. */
  size_t off = 0;
  for (int i = 0; i < b->n; i++) {
    const queued *q = b->q[i];
    const double *X = i == b->sliced ? r->bigY : b->Y + off * (size_t)r->d;
    b->pr[i] = (o3m_policy_round){.K = q->rc < 0 || !b->fin[i] ? 0 : q->K,
                                  .X = X,
                                  .arms = r->model == O3M_MODEL_DISJOINT ? q->arms : NULL};
    off += (size_t)b->Kb[i];
  }
  int rc = o3m_policy_choose_batch(r->policy, b->n, b->pr);
  O3M_ASSERT(rc == O3M_OK);
  for (int i = 0; i < b->n; i++)
    if (b->fin[i]) round_decide(r, b->q[i], b->pr[i].X, &b->pr[i]);
}

/* After the fan-out of a batch that holds a slice (under the lock): the
 * first slice's replies name the epochs every later slice must name; when
 * a later one names others (a party reloaded its items, or the AP its own
 * tables), its round is not decided but gathered again from its first
 * slice, so that no context of it sums parts of two epochs ("Slices" in
 * ap_round.h). */
static void slice_check(ap_round *r, batch_slot *b) {
  const int i = b->sliced;
  if (i < 0 || b->rc < 0) return;
  const int nk = b->n_got + r->own_fact;
  if (b->k0[i] == 0) {
    r->big_nk = nk;
    memcpy(r->big_key, b->got, sizeof *b->got * (size_t)nk);
  } else if (r->big_nk != nk || memcmp(r->big_key, b->got, sizeof *b->got * (size_t)nk)) {
    b->fin[i] = 0;
    r->big_next = 0;
    r->st.slice_restarts++;
  }
}

/* Takes round q, which its batch ended, from the head of its owner's
 * queue, where it stayed while it was gathered in slices. */
static void slice_done(ap_round *r, queued *q) {
  round_owner *w = &r->owners[q->owner];
  O3M_ASSERT(r->big == q && w->head == (int)(q - r->pool));
  w->head = q->next;
  if (w->head < 0) {
    w->tail = -1;
    ring_remove(r, q->owner);
  }
  r->n_waiting--;
  r->big = NULL;
  r->st.sliced_rounds++;
}

/* Notes the item epochs slot b's replies named (ap_epochwatch.h), under
 * the lock, and holds out for a window every party whose epochs flapped:
 * by the watch's rules, or by naming two epochs within this batch
 * (batch_gather). The hold is set in every slot's peers (ap_peers_hold),
 * so no batch asks the party until it is over; this batch, when it had
 * succeeded, goes to the fallback too, its rounds degraded with the
 * reason EPOCH_FLAPPING, and nothing of it is cached. A party already
 * held is not held again (replies of batches in flight when it was). */
static void batch_epochs(ap_round *r, batch_slot *b) {
  const int64_t now = o3m_clock_ms();
  /* Every party is noted when the gather succeeded, also after one of them
   * tripped a rule here. */
  const int ok = b->rc == 0;
  for (int j = 0; j < b->n_got && j < ap_peers_count(b->peers); j++) {
    int v = b->flapped[j] ? -1 : AP_EPOCH_OK;
    if (!b->flapped[j] && ok) v = ap_epochwatch_note(r->ew, j, b->got[j], b->seq, now);
    if (v == AP_EPOCH_OK || r->ew_max == 0 || ap_peers_held(b->peers, j, now)) continue;
    for (int k = 0; k < r->n_slots; k++)
      ap_peers_hold(r->slot[k].peers, j, now + AP_EPOCHWATCH_WINDOW_MS, k == 0);
    r->st.epoch_flapping++;
    o3m_log_warn("passive party '%s' %s (%d changes within the last minute): it is held out "
                 "for a minute, its rounds go to the local model or fail",
                 ap_peers_name(b->peers, j), ap_epochwatch_why(v),
                 ap_epochwatch_changes(r->ew, j, now));
    if (ok) {
      batch_missing(b, j, "EPOCH_FLAPPING");
      if (b->rc == 0)
        b->rc = o3m_err_set(&b->e, O3M_EUNAVAILABLE, "party '%s': %s",
                            ap_peers_name(b->peers, j), ap_epochwatch_why(v));
    }
  }
}

/* Decides batch b as soon as its fan-out is over, whether or not an older
 * batch still waits for the passive parties (see "Pipelined batches": a
 * small batch is not held behind a large one), and frees its slot and its
 * rounds' pool entries. */
static void batch_finish(ap_round *r, batch_slot *b) {
  /* A party whose epochs flapped fails this batch before anything of it
   * is cached. */
  batch_epochs(r, b);
  /* The items are put before the rounds are answered: their ids live in
   * the requests. */
  batch_cache(r, b);
  if (b->retried) r->st.stale_retries++;
  /* Under serve, the rounds whose items the own lookups (or the cached
   * flags) found missing from the own item table ("Unknown ids"); refuse
   * counted them at submit. Counted before the rounds are answered. */
  slice_check(r, b);
  if (b->rc == 0 && !r->refuse_unknown_items)
    for (int i = 0; i < b->n; i++)
      if (b->fin[i]) {
        r->st.unknown_item_rounds += (uint64_t)b->q[i]->unknown_items;
        r->cst[b->q[i]->owner].unknown_item_rounds += (uint64_t)b->q[i]->unknown_items;
      }
  /* What a decision sees (ap_round.h): no reward that is not durable
   * (batch_decide runs the before_decide hook first). */
  batch_decide(r, b);
  O3M_ASSERT(b->busy && r->n_finished < r->n_formed);
  const uint64_t id = ++r->n_finished;
  if (b->sliced >= 0) r->big_busy = 0;
  for (int i = 0; i < b->n; i++) {
    queued *q = b->q[i];
    round_owner *w = &r->owners[q->owner];
    if (w->finished != id) {
      O3M_ASSERT(w->batches > 0);
      w->finished = id;
      w->batches--;
    }
    /* A slice before the last: the round waits at its owner's head. */
    if (!b->fin[i]) continue;
    if (i == b->sliced) slice_done(r, q);
    O3M_ASSERT(w->inflight > 0);
    w->inflight--;
    q->next = r->free_head;
    r->free_head = (int)(q - r->pool);
  }
  b->busy = 0;
}

/* ---------------------------------------------------------------- reload */

/* 1 when a batch in flight reads tables f. */
static int tables_read(const ap_round *r, const o3m_features *f) {
  for (int k = 0; k < r->n_slots; k++)
    if (r->slot[k].busy && r->slot[k].own == f) return 1;
  return 0;
}

/* Frees the version a reload replaced once no batch in flight reads it. */
static void retired_free_if_unread(ap_round *r) {
  if (r->retired && !tables_read(r, r->retired)) {
    o3m_features_destroy(r->retired);
    r->retired = NULL;
  }
}

int ap_round_reload_start(ap_round *r, int coalesce, o3m_err *e) {
  if (!r->tables)
    return o3m_err_set(e, O3M_ESTATE, "party '%s' has no feature tables to reload (its own "
                       "features come in the requests)", r->name);
  return o3m_tables_reload_start(r->tables, coalesce, e);
}

int ap_round_reload_poll(ap_round *r, int *users, int *items, o3m_err *e) {
  if (!r->tables) return 0;
  retired_free_if_unread(r);
  if (r->retired) return 0; /* the finished load waits for the batch that reads it */
  o3m_features *old;
  int rc = o3m_tables_reload_poll(r->tables, &r->own, &old, e);
  if (rc <= 0) return rc;
  r->retired = old;
  retired_free_if_unread(r);
  if (users) *users = o3m_features_n_users(r->own);
  if (items) *items = o3m_features_n_items(r->own);
  return 1;
}

void ap_round_flush(ap_round *r) {
  /* One batch per call, whatever the number of threads: its replies are
   * completions, after which the server runs this hook again, and the calls
   * that arrived meanwhile have then joined the turns ("Fairness"). Looping
   * until the queue is empty would keep them out while one client's many
   * large rounds are all sent: with one thread, whose fan-out takes no new
   * call, an honest round then waited for every flood round queued before
   * it (so one client's flood failed others' rounds). The server's arenas are reset between batches
   * although calls stay deferred (o3m_rpc.h, "Memory"). */
  batch_slot *b = NULL;
  for (int k = 0; k < r->n_slots && !b; k++)
    if (!r->slot[k].busy) b = &r->slot[k];
  /* Nothing waits, or every slot is in flight: the replies of the one that
   * finishes run this hook again for what waits. */
  if (r->n_waiting == 0 || !b) return;
  batch_form(r, b);
  /* Every owner that waits is in its most batches: one of them ends soon,
   * and its replies run this hook again. */
  if (b->n == 0) return;
  O3M_ASSERT(!b->busy && b->n <= O3M_WIRE_MAX_BATCH);
  b->busy = 1;
  batch_build(r, b);
  r->st.fanouts++;
  r->st.uncached_ids += (uint64_t)b->n_new;
  o3m_rpc_server_unlocked(r->server, batch_gather, b);
  batch_finish(r, b);
  retired_free_if_unread(r);
  /* A batch that answered nothing (a slice) brings no completion that
   * would run this hook again for what waits. */
  if (r->n_waiting > 0) o3m_rpc_server_idle_again(r->server);
}
