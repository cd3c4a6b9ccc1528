/* pp_service.c -- the passive participant's handlers and its start-up
 * fetch of the mask block (see pp_service.h).
 *
 * Who may call what is the access table at the end of the file, which the
 * RPC layer applies before a handler runs (o3m_access.h); the handlers do
 * no identity checks. Mask and MaskBatch are the hot path: each checks the mask id
 * and the request, then runs mask_query once per round: fill X^j into a
 * buffer sized for max_candidates, mask it with one o3m_block_apply (a
 * dgemm) into the round's rows of the Y buffer, which is sized for the
 * largest batch (o3m_wire_mask_batch_rows). The reply points at Y and is
 * packed by the RPC layer right after the handler returns. A query of a
 * batch is masked by exactly the code and the dgemm shape of a Mask call,
 * so its values are bit for bit what Mask would send. Both buffers are
 * allocated at creation.
 *
 * With aggregation = secure (the config's, never the request's) MaskBatch
 * needs the AP's nonce, checks each row of Y against this party's max_norm
 * and answers only the masked words of o3m_secagg_mask (a third buffer,
 * W); Mask is refused.
 *
 * Reload (the RPC and SIGHUP) loads the tables anew on the tables' loader
 * thread, never on a serving thread, and the idle hook (run at least
 * every 100 ms) swaps s->features between two handlers when the load is
 * whole (o3m_tables.h); the handlers read s->features under the lock, so a
 * call is answered wholly from one version, and the replaced version is
 * freed at once, as no handler can still hold it. The Reload call is
 * answered when its load is swapped in or refused (a deferred call). */
#include "pp_service.h"
#include "o3m_alloc.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "o3m_clock.h"
#include "o3m_log.h"
#include "o3m_mask.h"
#include "o3m_party_block.h"
#include "o3m_rng.h"
#include "o3m_wire.h"
#include "o3m_features.h"
#include "o3m_secagg.h"
#include "o3m_tables.h"

struct pp_service {
  const o3m_config *cfg;
  const o3m_party *me;
  int insecure;
  int pmg_timeout_s;
  int threads;              /* serving threads (pp_options.threads) */
  const char *listen;       /* pp_options.listen, read during create only */
  int slot;                 /* this party's index j */
  o3m_partition part;
  o3m_features *features;   /* the version now served (a reload swaps it) */
  o3m_tables *tables;       /* how it is (re)loaded, the reload counters */
  o3m_rpc_call *reload_call; /* the Reload call waiting for its load, or NULL */
  volatile sig_atomic_t *reload; /* pp_options.reload: SIGHUP's flag, or NULL */
  o3m_block *block;         /* NULL until fetched */
  uint64_t mask_id;         /* 0 until fetched */
  int max_candidates;
  int batch_rows;           /* most rows of one MaskBatch */
  double *X;                /* buf_rows x d_j */
  double *Y;                /* buf_rows x d */
  int buf_rows;             /* batch_rows + O3M_WIRE_MAX_BATCH: a factored batch's user rows too */
  uint32_t rows[O3M_WIRE_MAX_BATCH]; /* MaskBatchReply.rows */
  o3m_secagg *agg;          /* aggregation = secure; NULL for per-party */
  uint64_t *W;              /* batch_rows x d masked words (secure only) */
  uint32_t *dims_buf;       /* M entries, Info's storage */
  unsigned char fingerprint[O3M_FINGERPRINT_BYTES]; /* of cfg, computed at creation */
  uint64_t requests, errors;
  o3m_access *access;       /* the server's caller checks */
  o3m_rpc_server *server;
  o3m_metrics *metrics;     /* NULL: none (pp_options.metrics) */
  int test_delay_ms;        /* pp_options.test_reply_delay_ms */
};

/* ---------------------------------------------------------------- lifecycle */

#define N_METHODS 5
static const o3m_rpc_method methods[N_METHODS];
static const o3m_access_rule access_rules[N_METHODS];
static int fetch_block(pp_service *s, const volatile sig_atomic_t *stop, o3m_err *e);
static int secagg_setup(pp_service *s, o3m_err *e);
static void pp_idle(void *ctx);

/* Binds the server on the party's listen address with its access policy: mutual
 * TLS with the party's files unless insecure; requests beyond the largest
 * MaskBatch the AP can send under the config are refused unread, replies
 * may be as large as their answers; idle connections are closed. Errors
 * name the config and the party's section: "listen ADDRESS: CAUSE"
 * (O3M_EIO) or a TLS file's problem (O3M_ETLS). On failure s->server is
 * NULL (s->access may be set; pp_service_destroy frees it). */
static int bind_server(pp_service *s, o3m_err *e) {
  o3m_rpc_server_config sc;
  o3m_rpc_server_config_default(&sc);
  sc.insecure = s->insecure;
  sc.metrics = s->metrics;
  sc.threads = s->threads;
  sc.listen = s->listen; /* NULL: the party's listen address */
  sc.max_receive_bytes = o3m_wire_mask_batch_max_bytes(s->max_candidates, s->part.d);
  sc.max_message_bytes = o3m_wire_mask_batch_reply_max_bytes(s->max_candidates, s->part.d);
  if (sc.max_receive_bytes > sc.max_message_bytes) sc.max_message_bytes = sc.max_receive_bytes;
  /* The idle hook takes SIGHUP's reload, and swaps a finished load in,
   * also when no call arrives. */
  sc.idle = pp_idle;
  sc.idle_on_timeout = 1;
  return o3m_access_serve(&s->server, &s->access, &sc, s->cfg, s->me, access_rules, N_METHODS,
                          methods, N_METHODS, s, e);
}

int pp_service_create(pp_service **out, const o3m_config *cfg, const char *party,
                      const pp_options *opt, o3m_err *e) {
  if (!out) return o3m_err_set(e, O3M_EINVAL, "pp_service_create: out is NULL");
  *out = NULL;
  if (!cfg || !party || !opt)
    return o3m_err_set(e, O3M_EINVAL, "pp_service_create: NULL argument");
  const o3m_party *me = o3m_config_party(cfg, party);
  if (!me)
    return o3m_err_set(e, O3M_EINVAL, "%s: no section [party %s]", o3m_config_name(cfg), party);
  if (me->role != O3M_ROLE_PASSIVE)
    return o3m_err_set(e, O3M_EINVAL, "%s:%d: [party %s] has role %s; o3m-passive needs role = "
                       "passive", o3m_config_name(cfg), me->line, party, o3m_role_name(me->role));
  if (opt->pmg_timeout_s < 1)
    return o3m_err_set(e, O3M_EINVAL, "the PMG timeout must be at least 1 s, got %d",
                       opt->pmg_timeout_s);

  if (opt->threads < 0 || opt->threads > O3M_CONFIG_MAX_THREADS)
    return o3m_err_set(e, O3M_EINVAL, "threads must be in 1..%d, got %d", O3M_CONFIG_MAX_THREADS,
                       opt->threads);

  if (opt->test_reply_delay_ms < 0 || opt->test_reply_delay_ms > PP_MAX_TEST_DELAY_MS)
    return o3m_err_set(e, O3M_EINVAL, "test reply delay must be in 0..%d ms, got %d",
                       PP_MAX_TEST_DELAY_MS, opt->test_reply_delay_ms);

  pp_service *s = o3m_calloc(1, sizeof *s);
  if (!s) return o3m_err_set(e, O3M_ENOMEM, "passive: out of memory");
  s->cfg = cfg;
  s->me = me;
  s->insecure = opt->insecure != 0;
  s->pmg_timeout_s = opt->pmg_timeout_s;
  s->test_delay_ms = opt->test_reply_delay_ms;
  s->metrics = opt->metrics;
  s->threads = opt->threads ? opt->threads : me->threads;
  s->listen = opt->listen;
  s->slot = me->slot;
  s->max_candidates = o3m_config_policy(cfg)->max_candidates;
  s->reload = opt->reload;

  int rc = o3m_fingerprint_compute(cfg, s->fingerprint, e);
  if (rc < 0) goto fail;
  int m = o3m_config_n_column_parties(cfg);
  int *dims = o3m_calloc((size_t)m, sizeof *dims);
  s->dims_buf = o3m_calloc((size_t)m, sizeof *s->dims_buf);
  if (!dims || !s->dims_buf) {
    o3m_free(dims);
    rc = o3m_err_set(e, O3M_ENOMEM, "passive: out of memory");
    goto fail;
  }
  for (int j = 0; j < m; j++) dims[j] = o3m_config_column_party(cfg, j)->dims;
  rc = o3m_partition_from_dims(&s->part, m, dims, e);
  o3m_free(dims);
  if (rc < 0) goto fail;

  /* The tables by the code a reload runs too, so that a start and a
   * reload check the same things and say the same. */
  const o3m_tables_config tc = {o3m_config_name(cfg), party,       me->user_table,
                                me->item_table,       me->dims,    me->whiten,
                                me->max_norm,         me->table_bytes_max,
                                s->metrics};
  rc = o3m_tables_create(&s->tables, &tc, e);
  if (rc == 0) rc = o3m_tables_load(s->tables, &s->features, e);
  if (rc < 0) goto fail;
  s->batch_rows = o3m_wire_mask_batch_rows(s->max_candidates, s->part.d);
  if (s->batch_rows < 1) {
    rc = o3m_err_set(e, O3M_EINVAL, "passive: max_candidates = %d, d = %d", s->max_candidates,
                     s->part.d);
    goto fail;
  }
  /* A factored batch has one user row per query besides its item rows. */
  s->buf_rows = s->batch_rows + O3M_WIRE_MAX_BATCH;
  s->X = o3m_malloc((size_t)s->buf_rows * (size_t)me->dims * sizeof *s->X);
  s->Y = o3m_malloc((size_t)s->buf_rows * (size_t)s->part.d * sizeof *s->Y);
  if (!s->X || !s->Y) {
    rc = o3m_err_set(e, O3M_ENOMEM, "passive: no memory for %d candidate rows x d = %d",
                     s->batch_rows, s->part.d);
    goto fail;
  }
  rc = secagg_setup(s, e);
  if (rc < 0) goto fail;
  if (s->agg) {
    s->W = o3m_malloc((size_t)s->buf_rows * (size_t)s->part.d * sizeof *s->W);
    if (!s->W) {
      rc = o3m_err_set(e, O3M_ENOMEM, "passive: no memory for %d masked rows", s->batch_rows);
      goto fail;
    }
  }
  /* The server is bound before the block is installed, so that a taken
   * port fails before the mask generator is involved. */
  rc = bind_server(s, e);
  if (rc < 0) goto fail;
  rc = fetch_block(s, opt->stop, e);
  if (rc < 0) goto fail;
  o3m_metrics_mask_id(s->metrics, s->mask_id);
  const o3m_features *ft = s->features;
  o3m_log_info("serving %s (port %d) with %s: party %d, d_j = %d (%d users x %d + %d items x %d "
               "columns) of d = %d, mask %016" PRIx64 ", up to %d candidates, %d serving threads",
               s->listen ? s->listen : me->listen, pp_service_port(s),
               s->insecure ? "PLAINTEXT" : "mutual TLS", s->slot,
               me->dims, o3m_features_n_users(ft), o3m_features_user_cols(ft),
               o3m_features_n_items(ft), o3m_features_item_cols(ft), s->part.d, s->mask_id,
               s->max_candidates, s->threads);
  *out = s;
  return 0;

fail:
  pp_service_destroy(s);
  return rc;
}

void pp_service_destroy(pp_service *s) {
  if (!s) return;
  o3m_rpc_server_destroy(s->server); /* no handler runs after this */
  o3m_access_destroy(s->access);
  o3m_block_destroy(s->block); /* wipes Q^j */
  o3m_features_destroy(s->features);
  o3m_tables_destroy(s->tables); /* wipes its copy of the dummy-row key */
  o3m_secagg_destroy(s->agg); /* wipes the pair keys */
  o3m_free(s->X);
  o3m_free(s->Y);
  o3m_free(s->W);
  o3m_free(s->dims_buf);
  o3m_free(s);
}

int pp_service_port(const pp_service *s) { return o3m_rpc_server_port(s->server); }

int pp_service_run(pp_service *s) {
  o3m_rpc_server_run(s->server);
  pp_service_stats st;
  pp_service_stats_get(s, &st);
  o3m_log_info("stopped: %" PRIu64 " requests, %" PRIu64 " answered, %" PRIu64
               " unknown users, %" PRIu64 " unknown items of %" PRIu64 ", %" PRIu64 " errors, %"
               PRIu64 " table reloads (%" PRIu64 " refused)",
               st.requests, st.lookups, st.unknown_users, st.unknown_items, st.item_lookups,
               st.errors, st.reloads, st.reloads_refused);
  return 0;
}

void pp_service_shutdown(pp_service *s) {
  o3m_rpc_server_shutdown(s->server); /* sets an atomic flag: async-signal-safe */
}

uint64_t pp_service_mask_id(const pp_service *s) { return s->mask_id; }
int pp_service_party(const pp_service *s) { return s->slot; }
int pp_service_dim(const pp_service *s) { return s->part.d; }
int pp_service_party_dim(const pp_service *s) { return s->me->dims; }
int pp_service_max_candidates(const pp_service *s) { return s->max_candidates; }
const o3m_features *pp_service_features(const pp_service *s) { return s->features; }

void pp_service_stats_get(const pp_service *s, pp_service_stats *out) {
  o3m_tables_stats ts;
  o3m_tables_stats_get(s->tables, s->features, &ts);
  out->requests = s->requests;
  out->lookups = ts.lookups.lookups;
  out->unknown_users = ts.lookups.unknown_users;
  out->unknown_items = ts.lookups.unknown_items;
  out->item_lookups = ts.lookups.item_lookups;
  out->errors = s->errors;
  out->reloads = ts.swaps;
  out->reloads_refused = ts.refused;
  out->last_reload_ms = ts.last_reload_ms;
}

/* ---------------------------------------------------------------- secure aggregation */

/* With aggregation = secure: the scale from every passive party's bound,
 * and the pair keys with every other passive party (this party's secret key
 * file is its agg_secret, the others' public keys their agg_public). With
 * one passive party there is no pair: the part is only encoded, and the AP
 * learns it exactly, which is said in a WARN. Errors name the config. */
static int secagg_setup(pp_service *s, o3m_err *e) {
  const o3m_config *cfg = s->cfg;
  if (!o3m_config_secure_aggregation(cfg)) return 0;
  int n = o3m_config_n_passive(cfg), me = -1;
  double norms[O3M_CONFIG_MAX_PARTIES];
  unsigned char(*pks)[O3M_SECAGG_KEY_BYTES] = o3m_calloc((size_t)n, sizeof *pks);
  if (!pks) return o3m_err_set(e, O3M_ENOMEM, "passive: out of memory");
  for (int i = 0; i < n; i++) {
    const o3m_party *p = o3m_config_passive(cfg, i);
    norms[i] = p->max_norm;
    memcpy(pks[i], p->agg_public, O3M_SECAGG_KEY_BYTES);
    if (p == s->me) me = i;
  }
  o3m_err ae;
  o3m_err_clear(&ae);
  int scale, rc = o3m_secagg_scale(n, norms, &scale, &ae);
  if (rc < 0) {
    /* Named below with the config and the party. */
  } else if (n == 1) {
    o3m_log_warn("one passive party: its part cannot hide among others; the AP learns it "
                 "exactly (aggregation = secure in %s)", o3m_config_name(cfg));
    rc = o3m_secagg_create(&s->agg, 1, NULL, 0, NULL, scale, &ae);
  } else if (!s->me->agg_secret) {
    o3m_free(pks);
    return o3m_err_set(e, O3M_EINVAL, "%s:%d: [party %s]: missing key 'agg_secret' (the secret "
                       "key file of secure aggregation, needed by this party's daemon with "
                       "aggregation = secure; o3m-passive --agg-keygen FILE writes one)",
                       o3m_config_name(cfg), s->me->line, s->me->name);
  } else {
    rc = o3m_secagg_create(&s->agg, n, (const unsigned char(*)[O3M_SECAGG_KEY_BYTES])pks, me,
                           s->me->agg_secret, scale, &ae);
  }
  if (rc < 0)
    rc = o3m_err_set(e, rc, "%s: [party %s]: %s", o3m_config_name(cfg), s->me->name,
                     o3m_err_message(&ae));
  o3m_free(pks);
  if (rc == 0)
    o3m_log_info("secure aggregation among %d passive parties, fixed point 2^-%d (worst-case "
                 "decoding error %.3g per component)", n, scale, o3m_secagg_max_error(n, scale));
  return rc;
}

/* ---------------------------------------------------------------- block fetch */

/* Draws a fresh dummy-row key from the OS into key (wiping what it drew
 * besides). */
static int draw_dummy_key(unsigned char key[O3M_FEATURES_KEY_BYTES], o3m_err *e) {
  o3m_rng *r;
  int rc = o3m_rng_create_os(&r);
  if (rc < 0) return o3m_err_set(e, rc, "cannot open the OS random source for the dummy key");
  uint64_t u = 0;
  for (size_t i = 0; i < O3M_FEATURES_KEY_BYTES && rc == 0; i += 8) {
    rc = o3m_rng_u64(r, &u);
    memcpy(key + i, &u, 8);
  }
  explicit_bzero(&u, sizeof u); /* a quarter of the key */
  o3m_rng_destroy(r);           /* wipes the rest of what it drew */
  if (rc < 0) rc = o3m_err_set(e, rc, "cannot draw the dummy key");
  return rc;
}

/* Installs this party's block by the behaviour both column parties share
 * (o3m_party_block_obtain, party/o3m_party_block.h: the block stored in
 * state_dir, else fetched from the PMG with its Info checked, stored and
 * confirmed, a failed confirmation retried on its own, backoff 100 ms
 * doubling up to 2 s until pmg_timeout_s, *stop ending the wait with
 * O3M_ESTATE). The PMG's certificate must carry the PMG's party name
 * (scripts/make-certs.sh puts it there), so that no other party of the
 * federation can pose as the mask generator. The party's dummy-row key
 * (o3m_features_set_dummy_key) is the secret kept beside the block: a new
 * one is drawn for a fetched block, a stored block restores its own. On
 * success the block is installed and the Mask method can answer; errors
 * are those of o3m_party_block_obtain and O3M_ERANDOM (no key). Called
 * once, before the server runs. The key is given to the tables only once
 * the block is installed. */
static int fetch_block(pp_service *s, const volatile sig_atomic_t *stop, o3m_err *e) {
  if (!s) return o3m_err_set(e, O3M_EINVAL, "fetch_block: NULL service");
  if (s->block) return o3m_err_set(e, O3M_ESTATE, "the block is already installed");
  unsigned char key[O3M_FEATURES_KEY_BYTES];
  int rc = draw_dummy_key(key, e);
  if (rc == 0) {
    o3m_party_block_options o = {s->cfg, s->me, &s->part, s->insecure, s->pmg_timeout_s, stop};
    rc = o3m_party_block_obtain(&o, &s->block, key, sizeof key, e);
  }
  if (rc == 0) {
    o3m_features_set_dummy_key(s->features, key);
    o3m_tables_set_key(s->tables, key); /* for the tables of later reloads */
    s->mask_id = o3m_block_mask_id(s->block);
  }
  explicit_bzero(key, sizeof key);
  return rc;
}

/* ---------------------------------------------------------------- handlers */

static int h_info(void *ctx, o3m_rpc_call *call, const ProtobufCMessage *req,
                  ProtobufCMessage *reply, o3m_err *e) {
  (void)call, (void)req, (void)e;
  pp_service *s = ctx;
  o3m_wire_info_fill((O3m__V1__NodeInfo *)reply, O3M__V1__ROLE__ROLE_PASSIVE, s->slot, &s->part,
                     s->dims_buf, s->mask_id, s->me->name, s->fingerprint);
  return 0;
}

/* One round, the shared work of Mask and of every query of MaskBatch (q is
 * the query's index, -1 for Mask, for the messages): refuses an empty user
 * or item id where this party has the table to look it up, and any id
 * longer than a table holds (o3m_wire_query_ids_check, the check the
 * active participant makes too), fills X^j
 * (K x d_j) into s->X and writes Y = X^j (Q^j)^T (K x d) to Y. The caller
 * has checked 1 <= K <= max_candidates. */
static int mask_query(pp_service *s, int q, const char *user, int K, char *const *items,
                      double *Y, o3m_err *e) {
  char what[48];
  if (q < 0)
    snprintf(what, sizeof what, "MaskRequest");
  else
    snprintf(what, sizeof what, "MaskBatchRequest query %d", q);
  int rc = o3m_wire_query_ids_check(what, user, o3m_features_n_users(s->features) > 0, K, items,
                                    o3m_features_n_items(s->features) > 0, e);
  if (rc < 0) return rc;
  rc = o3m_features_fill(s->features, user, K, (const char *const *)items, s->X, NULL, NULL);
  if (rc < 0) return o3m_err_set(e, rc, "%s: feature lookup failed", what);
  /* Y = X^j (Q^j)^T: row k is Q^j x^j_k. */
  o3m_block_apply(s->block, K, s->X, 0.0, Y);
  return 0;
}

static int mask(pp_service *s, const O3m__V1__MaskRequest *req, O3m__V1__MaskedContexts *reply,
                o3m_err *e) {
  if (s->agg)
    return o3m_err_set(e, O3M_ESTATE, "Mask is not answered with aggregation = secure (a part "
                       "would reach the active party alone); use MaskBatch with a nonce");
  int rc = o3m_wire_mask_request_check(req, s->mask_id, s->max_candidates, e);
  if (rc < 0) return rc;
  const int K = (int)req->n_items;
  if ((rc = mask_query(s, -1, req->user, K, req->items, s->Y, e)) < 0) return rc;
  o3m_wire_masked_fill(reply, s->mask_id, s->slot, K, s->part.d, s->Y);
  return 0;
}

/* The secure answer of a batch whose rows parts are in s->Y: each row
 * checked against this party's own bound (so that an honest part never
 * wraps in the ring), then encoded and masked with the transcript of the
 * whole request into s->W. */
static int mask_batch_secure(pp_service *s, const O3m__V1__MaskBatchRequest *req, int rows,
                             O3m__V1__MaskBatchReply *reply, o3m_err *e) {
  const int n = (int)req->n_queries, d = s->part.d;
  int K[O3M_WIRE_MAX_BATCH];
  for (int q = 0; q < n; q++) K[q] = (int)s->rows[q];
  int rc = o3m_wire_check_row_norms("this party's masked part", rows, d, s->Y, s->me->max_norm,
                                    n, K, e);
  if (rc < 0) return rc;
  o3m_secagg_begin(s->agg, s->mask_id, req->nonce.data, d, n);
  for (int q = 0; q < n; q++)
    o3m_secagg_query(s->agg, req->queries[q]->user, K[q],
                     (const char *const *)req->queries[q]->items);
  rc = o3m_secagg_mask(s->agg, (size_t)rows * (size_t)d, s->Y, s->W, e);
  if (rc < 0) return rc;
  o3m_wire_mask_batch_fill_masked(reply, s->mask_id, s->slot, n, s->rows, d, s->W);
  return 0;
}

/* A factored batch (protocol 6, o3m.proto): one user part per query, then
 * one item part per item the AP asked for, each masked by the same dgemm
 * as a round's rows (a user row is [u, 0], an item row [0, i], so their
 * parts are Q^j_U u and Q^j_I i); a half this party has no table for is
 * zeros, looked up nowhere. Secure: every row is checked against this
 * party's bound (each half is no longer than a block) and the words are
 * bound to the whole request: one transcript query per user with no item,
 * then one with no user and the items. The reply names the tables'
 * epochs, so that the AP never sums item parts of two of them. */
static int mask_batch_factored(pp_service *s, const O3m__V1__MaskBatchRequest *req,
                               O3m__V1__MaskBatchReply *reply, o3m_err *e) {
  int rc = o3m_wire_mask_batch_factored_check(req, s->mask_id, s->batch_rows, e);
  if (rc < 0) return rc;
  const int n = (int)req->n_queries, ni = (int)req->n_items, d = s->part.d;
  const int dj = s->me->dims;
  const int has_users = o3m_features_n_users(s->features) > 0;
  const int has_items = o3m_features_n_items(s->features) > 0;
  for (int q = 0; q < n; q++) {
    char what[48];
    snprintf(what, sizeof what, "MaskBatchRequest query %d", q);
    if ((rc = o3m_wire_query_ids_check(what, req->queries[q]->user, has_users, 0, NULL, 0, e)) < 0)
      return rc;
  }
  rc = o3m_wire_query_ids_check("MaskBatchRequest", NULL, 0, ni, req->items, has_items, e);
  if (rc < 0) return rc;
  for (int q = 0; q < n && rc == 0; q++)
    rc = o3m_features_fill_user(s->features, req->queries[q]->user, s->X + (size_t)q * dj);
  if (rc == 0)
    rc = o3m_features_fill_items(s->features, ni, (const char *const *)req->items,
                                 s->X + (size_t)n * dj);
  if (rc < 0) return o3m_err_set(e, rc, "MaskBatchRequest: feature lookup failed");
  const int rows = n + ni;
  o3m_block_apply(s->block, rows, s->X, 0.0, s->Y);
  const uint64_t ue = o3m_features_epoch(s->features, O3M_FEATURES_USERS);
  const uint64_t ie = o3m_features_epoch(s->features, O3M_FEATURES_ITEMS);
  if (!s->agg) {
    o3m_wire_mask_batch_fill_factored(reply, s->mask_id, s->slot, n, ni, s->rows, d, s->Y, NULL,
                                      ue, ie);
    return 0;
  }
  rc = o3m_wire_check_row_norms("this party's masked part", rows, d, s->Y, s->me->max_norm, 0,
                                NULL, e);
  if (rc < 0) return rc;
  o3m_secagg_begin(s->agg, s->mask_id, req->nonce.data, d, n + 1);
  for (int q = 0; q < n; q++) o3m_secagg_query(s->agg, req->queries[q]->user, 0, NULL);
  o3m_secagg_query(s->agg, NULL, ni, (const char *const *)req->items);
  rc = o3m_secagg_mask(s->agg, (size_t)rows * (size_t)d, s->Y, s->W, e);
  if (rc < 0) return rc;
  o3m_wire_mask_batch_fill_factored(reply, s->mask_id, s->slot, n, ni, s->rows, d, NULL, s->W,
                                    ue, ie);
  return 0;
}

/* Every query in order into consecutive rows of s->Y; the first refused
 * query fails the whole batch. */
static int mask_batch(pp_service *s, const O3m__V1__MaskBatchRequest *req,
                      O3m__V1__MaskBatchReply *reply, o3m_err *e) {
  int rc = req->factored ? 0 : o3m_wire_mask_batch_check(req, s->mask_id, s->max_candidates,
                                                         s->batch_rows, e);
  if (rc < 0) return rc;
  /* The mode is this party's, whatever the request asks: no downgrade. */
  if (s->agg && req->nonce.len != O3M_SECAGG_NONCE_BYTES)
    return o3m_err_set(e, O3M_EINVAL, "MaskBatchRequest: nonce of %zu bytes, expected %d: this "
                       "party answers only securely aggregated parts (aggregation = secure)",
                       req->nonce.len, O3M_SECAGG_NONCE_BYTES);
  if (s->agg && req->scale != (uint32_t)o3m_secagg_scale_of(s->agg))
    return o3m_err_set(e, O3M_ESTATE, "MaskBatchRequest: the active party decodes at 2^-%u, "
                       "this party encodes at 2^-%d: their configs differ (max_norm of the "
                       "passive parties in %s)", req->scale, o3m_secagg_scale_of(s->agg),
                       o3m_config_name(s->cfg));
  if (req->factored) return mask_batch_factored(s, req, reply, e);
  const int n = (int)req->n_queries;
  size_t off = 0;
  for (int q = 0; q < n; q++) {
    const O3m__V1__MaskQuery *mq = req->queries[q];
    const int K = (int)mq->n_items;
    rc = mask_query(s, q, mq->user, K, mq->items, s->Y + off * (size_t)s->part.d, e);
    if (rc < 0) return rc;
    s->rows[q] = (uint32_t)K;
    off += (size_t)K;
  }
  if (s->agg) return mask_batch_secure(s, req, (int)off, reply, e);
  o3m_wire_mask_batch_fill(reply, s->mask_id, s->slot, n, s->rows, s->part.d, s->Y);
  return 0;
}

static int h_mask(void *ctx, o3m_rpc_call *call, const ProtobufCMessage *req,
                  ProtobufCMessage *reply, o3m_err *e) {
  (void)call;
  pp_service *s = ctx;
  s->requests++;
  int rc = mask(s, (const O3m__V1__MaskRequest *)req, (O3m__V1__MaskedContexts *)reply, e);
  if (rc < 0) {
    s->errors++;
    o3m_log_debug("Mask refused: %s", o3m_errname(rc));
  }
  return rc;
}

/* The test delay of a MaskBatch, made without the server's lock. */
static void test_delay(void *arg) {
  const pp_service *s = arg;
  o3m_clock_sleep_unless_stopped(s->test_delay_ms, NULL);
}

/* A batch counts as one request (and, refused, one error) per query. */
static int h_mask_batch(void *ctx, o3m_rpc_call *call, const ProtobufCMessage *req_,
                        ProtobufCMessage *reply, o3m_err *e) {
  (void)call;
  pp_service *s = ctx;
  const O3m__V1__MaskBatchRequest *req = (const O3m__V1__MaskBatchRequest *)req_;
  uint64_t n = req->n_queries > 0 ? (uint64_t)req->n_queries : 1;
  s->requests += n;
  if (s->test_delay_ms > 0) o3m_rpc_server_unlocked(s->server, test_delay, s);
  int rc = mask_batch(s, req, (O3m__V1__MaskBatchReply *)reply, e);
  if (rc < 0) {
    s->errors += n;
    o3m_log_debug("MaskBatch of %llu queries refused: %s", (unsigned long long)n,
                  o3m_errname(rc));
  }
  return rc;
}

static int h_stats(void *ctx, o3m_rpc_call *call, const ProtobufCMessage *req,
                   ProtobufCMessage *reply_, o3m_err *e) {
  (void)call, (void)req, (void)e;
  pp_service *s = ctx;
  pp_service_stats st;
  pp_service_stats_get(s, &st);
  O3m__V1__PassiveStats *reply = (O3m__V1__PassiveStats *)reply_;
  reply->requests = st.requests;
  reply->lookups = st.lookups;
  reply->unknown_users = st.unknown_users;
  reply->unknown_items = st.unknown_items;
  reply->errors = st.errors;
  reply->item_lookups = st.item_lookups;
  reply->reloads = st.reloads;
  reply->reloads_refused = st.reloads_refused;
  reply->last_reload_ms = st.last_reload_ms;
  return 0;
}

/* ---------------------------------------------------------------- reload */

/* Swaps a finished load in (o3m_tables_reload_poll); the version replaced
 * is freed at once, since handlers read s->features only under the lock.
 * A Reload call that waits for the load is answered with its outcome. */
static void reload_take(pp_service *s) {
  o3m_features *old;
  o3m_err e;
  o3m_err_clear(&e);
  int rc = o3m_tables_reload_poll(s->tables, &s->features, &old, &e);
  if (rc == 0) return; /* nothing finished */
  o3m_features_destroy(old);
  o3m_rpc_call *call = s->reload_call;
  if (!call) return;
  s->reload_call = NULL;
  if (rc < 0) {
    (void)o3m_rpc_call_fail(call, rc, &e);
    return;
  }
  pp_service_stats st;
  pp_service_stats_get(s, &st);
  O3m__V1__ReloadReply reply = O3M__V1__RELOAD_REPLY__INIT;
  reply.reloads = st.reloads;
  reply.refused = st.reloads_refused;
  reply.last_reload_ms = st.last_reload_ms;
  reply.users = (uint32_t)o3m_features_n_users(s->features);
  reply.items = (uint32_t)o3m_features_n_items(s->features);
  (void)o3m_rpc_call_reply(call, &reply.base, NULL);
}

/* The idle hook: a finished load is swapped in first; then SIGHUP asks for
 * a reload, coalesced with one under way (one more follows it). */
static void pp_idle(void *ctx) {
  pp_service *s = ctx;
  reload_take(s);
  if (!s->reload || !*s->reload || !s->block) return;
  *s->reload = 0;
  o3m_err e;
  o3m_err_clear(&e);
  (void)o3m_tables_reload_start(s->tables, 1, &e); /* the outcome is logged */
}

/* The operator's Reload: refused while another reload is under way (a
 * SIGHUP's, or another call's), else answered once its load is swapped in
 * or refused (deferred until then; the idle hook answers it). */
static int h_reload(void *ctx, o3m_rpc_call *call, const ProtobufCMessage *req,
                    ProtobufCMessage *reply_, o3m_err *e) {
  (void)req, (void)reply_;
  pp_service *s = ctx;
  if (s->reload_call)
    return o3m_err_set(e, O3M_ESTATE, "a reload of the feature tables is already under way");
  int rc = o3m_tables_reload_start(s->tables, 0, e);
  if (rc < 0) return rc;
  s->reload_call = call;
  return O3M_RPC_DEFERRED;
}

static const o3m_rpc_method methods[N_METHODS] = {
    {O3M_PATH_PASSIVE_INFO, &o3m__v1__info_request__descriptor, &o3m__v1__node_info__descriptor,
     h_info},
    {O3M_PATH_PASSIVE_MASK, &o3m__v1__mask_request__descriptor,
     &o3m__v1__masked_contexts__descriptor, h_mask},
    {O3M_PATH_PASSIVE_MASK_BATCH, &o3m__v1__mask_batch_request__descriptor,
     &o3m__v1__mask_batch_reply__descriptor, h_mask_batch},
    {O3M_PATH_PASSIVE_STATS, &o3m__v1__stats_request__descriptor,
     &o3m__v1__passive_stats__descriptor, h_stats},
    {O3M_PATH_PASSIVE_RELOAD, &o3m__v1__reload_request__descriptor,
     &o3m__v1__reload_reply__descriptor, h_reload},
};

/* Mask and MaskBatch only for the active party; Stats only for this party's
 * own certificate (its operator), never for the active party, which could
 * read the unknown-user counter around one Mask call; Reload, an operator's
 * act, also only for its own certificate; Info for both. */
static const o3m_access_rule access_rules[N_METHODS] = {
    {O3M_PATH_PASSIVE_INFO, O3M_ACCESS_ACTIVE | O3M_ACCESS_SELF},
    {O3M_PATH_PASSIVE_MASK, O3M_ACCESS_ACTIVE},
    {O3M_PATH_PASSIVE_MASK_BATCH, O3M_ACCESS_ACTIVE},
    {O3M_PATH_PASSIVE_STATS, O3M_ACCESS_SELF},
    {O3M_PATH_PASSIVE_RELOAD, O3M_ACCESS_SELF},
};

const o3m_rpc_method *pp_service_methods(int *n) {
  *n = (int)(sizeof methods / sizeof methods[0]);
  return methods;
}

const o3m_access_rule *pp_service_access(int *n) {
  *n = (int)(sizeof access_rules / sizeof access_rules[0]);
  return access_rules;
}
