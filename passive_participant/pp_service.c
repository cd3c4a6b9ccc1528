/* pp_service.c -- the passive participant's handlers and its start-up
 * fetch of the mask block (see pp_service.h).
 *
 * The Mask handler is the hot path: it checks the caller, the mask id and
 * the request, fills X^j into a buffer sized for max_candidates, masks it
 * into a second such buffer with one o3m_block_apply (a dgemm) and points
 * the reply at that buffer, which the RPC layer packs right after the
 * handler returns. Both buffers are allocated at creation. */
#include "pp_service.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "o3m_log.h"
#include "o3m_mask.h"
#include "o3m_wire.h"
#include "pp_features.h"

/* Backoff of the block fetch. */
#define FETCH_DELAY0_MS 100
#define FETCH_DELAY_MAX_MS 2000
/* Deadline of one call to the PMG (bounded by the time left). */
#define FETCH_CALL_MS 5000
/* How often the stop flag is looked at while waiting. */
#define STOP_POLL_MS 50

struct pp_service {
  const o3m_config *cfg;
  const o3m_party *me;
  const o3m_party *active;  /* the only caller Mask answers */
  const o3m_party *pmg;
  int insecure;
  int pmg_timeout_s;
  int slot;                 /* this party's index j */
  o3m_partition part;
  pp_features *features;
  o3m_block *block;         /* NULL until fetched */
  uint64_t mask_id;         /* 0 until fetched */
  int max_candidates;
  double *X;                /* max_candidates x d_j */
  double *Y;                /* max_candidates x d */
  uint32_t *dims_buf;       /* M entries, Info's storage */
  uint64_t requests, errors;
};

/* ---------------------------------------------------------------- lifecycle */

int pp_service_create(pp_service **out, const o3m_config *cfg, const char *party,
                      const pp_options *opt, o3m_err *e) {
  if (!out) return o3m_err_set(e, O3M_EINVAL, "pp_service_create: out is NULL");
  *out = NULL;
  if (!cfg || !party || !opt)
    return o3m_err_set(e, O3M_EINVAL, "pp_service_create: NULL argument");
  const o3m_party *me = o3m_config_party(cfg, party);
  if (!me) return o3m_err_set(e, O3M_EINVAL, "%s: no section [party %s]", o3m_config_name(cfg), party);
  if (me->role != O3M_ROLE_PASSIVE)
    return o3m_err_set(e, O3M_EINVAL, "%s:%d: [party %s] has role %s; o3m-passive needs role = "
                       "passive", o3m_config_name(cfg), me->line, party, o3m_role_name(me->role));
  if (opt->pmg_timeout_s < 1)
    return o3m_err_set(e, O3M_EINVAL, "the PMG timeout must be at least 1 s, got %d",
                       opt->pmg_timeout_s);

  pp_service *s = calloc(1, sizeof *s);
  if (!s) return o3m_err_set(e, O3M_ENOMEM, "passive: out of memory");
  s->cfg = cfg;
  s->me = me;
  s->active = o3m_config_active(cfg);
  s->pmg = o3m_config_pmg(cfg);
  s->insecure = opt->insecure != 0;
  s->pmg_timeout_s = opt->pmg_timeout_s;
  s->slot = me->slot;
  s->max_candidates = o3m_config_policy(cfg)->max_candidates;

  int rc;
  int m = o3m_config_n_column_parties(cfg);
  int *dims = calloc((size_t)m, sizeof *dims);
  s->dims_buf = calloc((size_t)m, sizeof *s->dims_buf);
  if (!dims || !s->dims_buf) {
    free(dims);
    rc = o3m_err_set(e, O3M_ENOMEM, "passive: out of memory");
    goto fail;
  }
  for (int j = 0; j < m; j++) dims[j] = o3m_config_column_party(cfg, j)->dims;
  rc = o3m_partition_from_dims(&s->part, m, dims, e);
  free(dims);
  if (rc < 0) goto fail;

  o3m_err fe;
  o3m_err_clear(&fe);
  rc = pp_features_load(&s->features, me->user_table, me->item_table, me->dims, &fe);
  if (rc < 0) {
    rc = o3m_err_set(e, rc, "%s: [party %s] user_table/item_table: %s", o3m_config_name(cfg),
                     party, o3m_err_message(&fe));
    goto fail;
  }
  size_t K = (size_t)s->max_candidates;
  s->X = malloc(K * (size_t)me->dims * sizeof *s->X);
  s->Y = malloc(K * (size_t)s->part.d * sizeof *s->Y);
  if (!s->X || !s->Y) {
    rc = o3m_err_set(e, O3M_ENOMEM, "passive: no memory for %zu candidates x d = %d", K,
                     s->part.d);
    goto fail;
  }
  *out = s;
  return 0;

fail:
  pp_service_destroy(s);
  return rc;
}

void pp_service_destroy(pp_service *s) {
  if (!s) return;
  o3m_block_destroy(s->block); /* wipes Q^j */
  pp_features_destroy(s->features);
  free(s->X);
  free(s->Y);
  free(s->dims_buf);
  free(s);
}

uint64_t pp_service_mask_id(const pp_service *s) { return s->mask_id; }
int pp_service_party(const pp_service *s) { return s->slot; }
int pp_service_dim(const pp_service *s) { return s->part.d; }
int pp_service_party_dim(const pp_service *s) { return s->me->dims; }
int pp_service_max_candidates(const pp_service *s) { return s->max_candidates; }
const pp_features *pp_service_features(const pp_service *s) { return s->features; }

void pp_service_stats_get(const pp_service *s, pp_service_stats *out) {
  pp_features_stats fs;
  pp_features_stats_get(s->features, &fs);
  out->requests = s->requests;
  out->lookups = fs.lookups;
  out->unknown_users = fs.unknown_users;
  out->unknown_items = fs.unknown_items;
  out->item_lookups = fs.item_lookups;
  out->errors = s->errors;
}

/* ---------------------------------------------------------------- block fetch */

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Sleeps ms milliseconds unless *stop becomes nonzero; returns 1 if stopped. */
static int sleep_unless_stopped(double ms, const volatile sig_atomic_t *stop) {
  double end = now_ms() + ms;
  for (;;) {
    if (stop && *stop) return 1;
    double left = end - now_ms();
    if (left <= 0) return 0;
    if (left > STOP_POLL_MS) left = STOP_POLL_MS;
    struct timespec ts = {0, (long)(left * 1e6)};
    nanosleep(&ts, NULL);
  }
}

/* A client for the PMG with a deadline of deadline_ms per call. */
static int pmg_client(pp_service *s, int deadline_ms, o3m_rpc_client **c, o3m_err *e) {
  o3m_rpc_client_config cc;
  o3m_rpc_client_config_default(&cc);
  cc.target = s->pmg->address;
  cc.deadline_ms = deadline_ms;
  cc.insecure = s->insecure;
  if (!s->insecure) {
    cc.tls.ca_file = o3m_config_ca(s->cfg);
    cc.tls.cert_file = s->me->cert;
    cc.tls.key_file = s->me->key;
    /* Pin the peer: the PMG's certificate must name the PMG party. */
    cc.tls.server_name = s->pmg->name;
  }
  return o3m_rpc_client_create(c, &cc, e);
}

/* One attempt: Info, GetBlock and import. On success *out holds the block. */
static int fetch_once(pp_service *s, int deadline_ms, o3m_block **out, o3m_err *e) {
  o3m_rpc_client *c;
  int rc = pmg_client(s, deadline_ms, &c, e);
  if (rc < 0) return rc;
  ProtobufCMessage *m;
  O3m__V1__InfoRequest ireq = O3M__V1__INFO_REQUEST__INIT;
  rc = o3m_rpc_client_call(c, O3M_PATH_PMG_INFO, &ireq.base, &o3m__v1__node_info__descriptor, &m,
                           e);
  if (rc == 0) {
    o3m_err ie;
    o3m_err_clear(&ie);
    rc = o3m_wire_info_check((const O3m__V1__NodeInfo *)m, O3M__V1__ROLE__ROLE_MASK_GENERATOR, -1,
                             &s->part, &ie);
    if (rc < 0)
      o3m_err_set(e, rc, "the mask generator at %s disagrees with %s: %s", s->pmg->address,
                  o3m_config_name(s->cfg), o3m_err_message(&ie));
  }
  if (rc == 0) {
    O3m__V1__BlockRequest breq = O3M__V1__BLOCK_REQUEST__INIT;
    breq.party = (uint32_t)s->slot;
    breq.dim = (uint32_t)s->part.d;
    breq.party_dim = (uint32_t)s->me->dims;
    rc = o3m_rpc_client_call(c, O3M_PATH_PMG_GET_BLOCK, &breq.base, &o3m__v1__block__descriptor,
                             &m, e);
  }
  if (rc == 0) rc = o3m_wire_block_import(out, (const O3m__V1__Block *)m, &s->part, s->slot, e);
  o3m_rpc_client_destroy(c);
  return rc;
}

/* One attempt at ConfirmBlock. */
static int confirm_once(pp_service *s, int deadline_ms, uint64_t mask_id, o3m_err *e) {
  o3m_rpc_client *c;
  int rc = pmg_client(s, deadline_ms, &c, e);
  if (rc < 0) return rc;
  O3m__V1__BlockReceipt r = O3M__V1__BLOCK_RECEIPT__INIT;
  r.party = (uint32_t)s->slot;
  r.mask_id = mask_id;
  ProtobufCMessage *m;
  rc = o3m_rpc_client_call(c, O3M_PATH_PMG_CONFIRM_BLOCK, &r.base, &o3m__v1__ack__descriptor, &m,
                           e);
  o3m_rpc_client_destroy(c);
  return rc;
}

/* Failures worth another try: the PMG is not up yet or was slow. */
static int transient(int rc) {
  return rc == O3M_EUNAVAILABLE || rc == O3M_EDEADLINE || rc == O3M_ERPC;
}

int pp_service_fetch_block(pp_service *s, const volatile sig_atomic_t *stop, o3m_err *e) {
  if (!s) return o3m_err_set(e, O3M_EINVAL, "pp_service_fetch_block: NULL service");
  if (s->block) return o3m_err_set(e, O3M_ESTATE, "the block is already installed");
  const double give_up = now_ms() + 1e3 * s->pmg_timeout_s;
  double delay = FETCH_DELAY0_MS;
  o3m_block *blk = NULL;
  int rc = 0;
  /* Phase 0 fetches the block, phase 1 confirms it; a confirmation that
   * fails transiently is retried on its own, because after the last
   * confirmation the PMG forgets Q and a second GetBlock would fail. */
  for (int phase = 0, attempt = 1; phase < 2; attempt++) {
    double left = give_up - now_ms();
    int call_ms = left < FETCH_CALL_MS ? (int)(left > 1 ? left : 1) : FETCH_CALL_MS;
    o3m_err ae;
    o3m_err_clear(&ae);
    rc = phase == 0 ? fetch_once(s, call_ms, &blk, &ae)
                    : confirm_once(s, call_ms, o3m_block_mask_id(blk), &ae);
    if (rc == 0) {
      phase++;
      attempt = 0;
      delay = FETCH_DELAY0_MS;
      continue;
    }
    const char *what = phase == 0 ? "fetching the block" : "confirming the block";
    if (!transient(rc)) {
      o3m_err_set(e, rc, "%s from the mask generator %s at %s: %s", what, s->pmg->name,
                  s->pmg->address, o3m_err_message(&ae));
      goto fail;
    }
    left = give_up - now_ms();
    if (left <= 0) {
      o3m_err_set(e, rc, "%s from the mask generator %s at %s: gave up after %d s and %d "
                  "attempts; last error: %s", what, s->pmg->name, s->pmg->address,
                  s->pmg_timeout_s, attempt, o3m_err_message(&ae));
      goto fail;
    }
    double wait = delay < left ? delay : left;
    /* The first failure says why in full; later ones only repeat the code. */
    if (attempt == 1)
      o3m_log_warn("%s from %s at %s failed (%s: %s); retrying with backoff for up to %d s",
                   what, s->pmg->name, s->pmg->address, o3m_errname(rc), o3m_err_message(&ae),
                   s->pmg_timeout_s);
    else
      o3m_log_warn("%s, attempt %d: %s; retrying in %.0f ms", what, attempt, o3m_errname(rc),
                   wait);
    if (sleep_unless_stopped(wait, stop)) {
      rc = o3m_err_set(e, O3M_ESTATE, "stopped while %s", what);
      goto fail;
    }
    delay = delay * 2 < FETCH_DELAY_MAX_MS ? delay * 2 : FETCH_DELAY_MAX_MS;
  }
  s->block = blk;
  s->mask_id = o3m_block_mask_id(blk);
  o3m_log_info("installed the block of mask %016llx (%d x %d) and confirmed it",
               (unsigned long long)s->mask_id, s->part.d, s->me->dims);
  return 0;

fail:
  o3m_block_destroy(blk);
  return rc;
}

/* ---------------------------------------------------------------- handlers */

/* Access rule: only the certificate whose CN is `who`'s name. */
static int check_caller(pp_service *s, o3m_rpc_call *call, const o3m_party *who,
                        const char *what, o3m_err *e) {
  if (s->insecure) return 0;
  const char *id = o3m_rpc_call_identity(call);
  if (id && strcmp(id, who->name) == 0) return 0;
  o3m_log_warn("refused %s to %s%s%s at %s", what,
               id ? "certificate '" : "a caller without a certificate", id ? id : "",
               id ? "'" : "", o3m_rpc_call_peer(call));
  if (!id) return o3m_err_set(e, O3M_EPERM, "%s: the caller has no verified certificate", what);
  return o3m_err_set(e, O3M_EPERM, "%s is answered to '%s' only, not to '%.64s'", what,
                     who->name, id);
}

static int h_info(void *ctx, o3m_rpc_call *call, const ProtobufCMessage *req,
                  ProtobufCMessage *reply, o3m_err *e) {
  (void)call, (void)req, (void)e;
  pp_service *s = ctx;
  o3m_wire_info_fill((O3m__V1__NodeInfo *)reply, O3M__V1__ROLE__ROLE_PASSIVE, s->slot, &s->part,
                     s->dims_buf, s->mask_id, s->me->name);
  return 0;
}

static int mask(pp_service *s, o3m_rpc_call *call, const O3m__V1__MaskRequest *req,
                O3m__V1__MaskedContexts *reply, o3m_err *e) {
  int rc = check_caller(s, call, s->active, "Mask", e);
  if (rc < 0) return rc;
  if ((rc = o3m_wire_mask_request_check(req, s->mask_id, s->max_candidates, e)) < 0) return rc;
  const int K = (int)req->n_items;
  if (pp_features_n_users(s->features) > 0 && (!req->user || !req->user[0]))
    return o3m_err_set(e, O3M_EINVAL, "MaskRequest: user is empty");
  if (pp_features_n_items(s->features) > 0)
    for (int k = 0; k < K; k++)
      if (!req->items[k] || !req->items[k][0])
        return o3m_err_set(e, O3M_EINVAL, "MaskRequest: item %d is empty", k);
  rc = pp_features_fill(s->features, req->user, K, (const char *const *)req->items, s->X, NULL,
                        NULL);
  if (rc < 0) return o3m_err_set(e, rc, "MaskRequest: feature lookup failed");
  /* Y = X^j (Q^j)^T: row k is Q^j x^j_k. */
  o3m_block_apply(s->block, K, s->X, 0.0, s->Y);
  o3m_wire_masked_fill(reply, s->mask_id, s->slot, K, s->part.d, s->Y);
  return 0;
}

static int h_mask(void *ctx, o3m_rpc_call *call, const ProtobufCMessage *req,
                  ProtobufCMessage *reply, o3m_err *e) {
  pp_service *s = ctx;
  s->requests++;
  int rc = mask(s, call, (const O3m__V1__MaskRequest *)req, (O3m__V1__MaskedContexts *)reply, e);
  if (rc < 0) {
    s->errors++;
    o3m_log_debug("round %llu refused: %s", (unsigned long long)((const O3m__V1__MaskRequest *)req)->round,
                  o3m_errname(rc));
  }
  return rc;
}

static int h_stats(void *ctx, o3m_rpc_call *call, const ProtobufCMessage *req,
                   ProtobufCMessage *reply_, o3m_err *e) {
  (void)req;
  pp_service *s = ctx;
  int rc = check_caller(s, call, s->me, "Stats", e);
  if (rc < 0) return rc;
  pp_service_stats st;
  pp_service_stats_get(s, &st);
  O3m__V1__PassiveStats *reply = (O3m__V1__PassiveStats *)reply_;
  reply->requests = st.requests;
  reply->lookups = st.lookups;
  reply->unknown_users = st.unknown_users;
  reply->unknown_items = st.unknown_items;
  reply->errors = st.errors;
  reply->item_lookups = st.item_lookups;
  return 0;
}

static const o3m_rpc_method methods[] = {
    {O3M_PATH_PASSIVE_INFO, &o3m__v1__info_request__descriptor, &o3m__v1__node_info__descriptor,
     h_info},
    {O3M_PATH_PASSIVE_MASK, &o3m__v1__mask_request__descriptor,
     &o3m__v1__masked_contexts__descriptor, h_mask},
    {O3M_PATH_PASSIVE_STATS, &o3m__v1__stats_request__descriptor,
     &o3m__v1__passive_stats__descriptor, h_stats},
};

const o3m_rpc_method *pp_service_methods(int *n) {
  *n = (int)(sizeof methods / sizeof methods[0]);
  return methods;
}
