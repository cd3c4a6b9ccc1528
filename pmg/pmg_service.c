/* pmg_service.c -- the mask generator's handlers (see pmg_service.h).
 *
 * The service keeps Q, one block per column party, and per party whether
 * its block was served and confirmed. Access rules: the policy table below
 * (o3m_access.h, applied by the RPC layer before a request is unpacked)
 * lets only the column parties call at all; then GetBlock and ConfirmBlock
 * alike require that the caller's certificate common name is the configured
 * name of the party the request is about, a rule that needs the request and
 * so lives here. It is checked before the dims and the state, so a caller
 * learns nothing about another party's request beyond the refusal. Every
 * refusal is logged with the caller's identity and address, because a
 * refused GetBlock is either a misconfiguration or an attack and the
 * operator should see both. */
#include "pmg_service.h"
#include "o3m_alloc.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "o3m_log.h"
#include "o3m_mask.h"
#include "o3m_rng.h"
#include "o3m_seal.h"
#include "o3m_wire.h"

/* Largest request read (o3m_limits.h says why). */
#define PMG_MAX_REQUEST O3M_MAX_PMG_REQUEST

struct pmg_service {
  const o3m_config *cfg;
  const o3m_party *me;       /* the pmg party of cfg: address, TLS files */
  o3m_access *access;        /* the server's caller checks */
  o3m_rpc_server *server;
  o3m_metrics *metrics;      /* NULL: none (pmg_options.metrics) */
  o3m_metric *m_confirmed, *m_forgotten; /* NULL without metrics */
  const char *name;          /* the pmg party's name, for Info */
  o3m_partition part;        /* the column split, party j = slot j */
  o3m_mask *mask;
  uint64_t mask_id;
  o3m_block **blocks;        /* M blocks; all NULL once forgotten */
  const char **names;        /* M party names, borrowed from cfg */
  unsigned char *served;     /* M flags: block handed out at least once */
  unsigned char *confirmed;  /* M flags */
  uint32_t *dims_buf;        /* M entries, Info's storage */
  unsigned char fingerprint[O3M_FINGERPRINT_BYTES]; /* of cfg, computed at creation */
  /* GetBlock's buffers, sized for the widest block at creation: the
   * plaintext that o3m_seal_block writes and wipes, and the sealed box the
   * reply points at (ciphertext: nothing secret survives in it). */
  unsigned char *seal_scratch;
  unsigned char *sealed;
  int n_confirmed;
  int insecure, keep_mask, forgotten;
  uint64_t blocks_served, refused;
};

/* ---------------------------------------------------------------- lifecycle */

#define N_METHODS 3
static const o3m_rpc_method methods[N_METHODS];
static const o3m_access_rule access_rules[N_METHODS];

/* Binds the server on the pmg party's listen address with its access policy:
 * mutual TLS with the party's files unless insecure, no request above
 * PMG_MAX_REQUEST, idle connections closed. Errors name the config and the
 * party's section: "listen ADDRESS: CAUSE" (O3M_EIO) or a TLS file's
 * problem (O3M_ETLS). On failure s->server is NULL (s->access may be set;
 * pmg_service_destroy frees it). */
static int bind_server(pmg_service *s, o3m_err *e) {
  o3m_rpc_server_config sc;
  o3m_rpc_server_config_default(&sc);
  sc.insecure = s->insecure;
  sc.max_receive_bytes = PMG_MAX_REQUEST;
  sc.metrics = s->metrics;
  return o3m_access_serve(&s->server, &s->access, &sc, s->cfg, s->me, access_rules, N_METHODS,
                          methods, N_METHODS, s, e);
}

/* Registers the PMG's own series: how many column parties there are, how
 * many confirmed their block, whether Q is forgotten (so an operator sees
 * when the PMG may be stopped), and the mask id. */
static int metrics_register(pmg_service *s, o3m_err *e) {
  static const o3m_metric_spec parties = {"o3m_pmg_parties", "Column parties of the federation",
                                          O3M_METRIC_GAUGE, NULL, 0};
  static const o3m_metric_spec confirmed = {
      "o3m_pmg_parties_confirmed", "Column parties that confirmed their block",
      O3M_METRIC_GAUGE, NULL, 0};
  static const o3m_metric_spec forgotten = {
      "o3m_pmg_mask_forgotten", "1 once Q is forgotten (every party confirmed; the PMG may stop)",
      O3M_METRIC_GAUGE, NULL, 0};
  o3m_metric *p;
  int rc = o3m_metrics_series(s->metrics, &parties, NULL, &p, e);
  if (rc == 0) rc = o3m_metrics_series(s->metrics, &confirmed, NULL, &s->m_confirmed, e);
  if (rc == 0) rc = o3m_metrics_series(s->metrics, &forgotten, NULL, &s->m_forgotten, e);
  if (rc < 0) return rc;
  o3m_metric_set(p, s->part.m);
  o3m_metrics_mask_id(s->metrics, s->mask_id);
  return 0;
}

int pmg_service_create(pmg_service **out, const o3m_config *cfg, const pmg_options *opt,
                       o3m_err *e) {
  if (!out) return o3m_err_set(e, O3M_EINVAL, "pmg_service_create: out is NULL");
  *out = NULL;
  if (!cfg || !opt) return o3m_err_set(e, O3M_EINVAL, "pmg_service_create: NULL argument");
  int m = o3m_config_n_column_parties(cfg);
  if (m < 1 || m > O3M_MAX_PARTIES)
    return o3m_err_set(e, O3M_EINVAL, "%s: %d column parties, expected 1..%d",
                       o3m_config_name(cfg), m, O3M_MAX_PARTIES);

  pmg_service *s = o3m_calloc(1, sizeof *s);
  if (!s) return o3m_err_set(e, O3M_ENOMEM, "pmg: out of memory");
  s->cfg = cfg;
  s->me = o3m_config_pmg(cfg);
  s->name = s->me->name;
  s->insecure = opt->insecure != 0;
  s->keep_mask = opt->keep_mask != 0;
  s->metrics = opt->metrics;
  s->blocks = o3m_calloc((size_t)m, sizeof *s->blocks);
  s->names = o3m_calloc((size_t)m, sizeof *s->names);
  s->served = o3m_calloc((size_t)m, 1);
  s->confirmed = o3m_calloc((size_t)m, 1);
  s->dims_buf = o3m_calloc((size_t)m, sizeof *s->dims_buf);
  int *dims = o3m_calloc((size_t)m, sizeof *dims);
  o3m_rng *rng = NULL;
  int rc;
  if (!s->blocks || !s->names || !s->served || !s->confirmed || !s->dims_buf || !dims) {
    rc = o3m_err_set(e, O3M_ENOMEM, "pmg: out of memory");
    goto fail;
  }
  for (int j = 0; j < m; j++) {
    const o3m_party *p = o3m_config_column_party(cfg, j);
    s->names[j] = p->name;
    dims[j] = p->dims;
  }
  rc = o3m_partition_from_dims(&s->part, m, dims, e);
  if (rc == 0) rc = o3m_fingerprint_compute(cfg, s->fingerprint, e);
  if (rc < 0) goto fail;
  if (s->part.d != o3m_config_d(cfg)) {
    rc = o3m_err_set(e, O3M_EDIM, "%s: dims add up to %d, d is %d", o3m_config_name(cfg),
                     s->part.d, o3m_config_d(cfg));
    goto fail;
  }

  rc = opt->seeded ? o3m_rng_create_seeded_insecure(&rng, opt->seed) : o3m_rng_create_os(&rng);
  if (rc < 0) {
    rc = o3m_err_set(e, rc, "pmg: cannot create the random source: %s", o3m_strerror(rc));
    goto fail;
  }
  rc = o3m_mask_generate(&s->mask, s->part.d, rng);
  if (rc < 0) {
    rc = o3m_err_set(e, rc, "pmg: cannot draw a %d x %d mask: %s", s->part.d, s->part.d,
                     o3m_strerror(rc));
    goto fail;
  }
  s->mask_id = o3m_mask_id(s->mask);
  for (int j = 0; j < m; j++) {
    rc = o3m_block_from_mask(&s->blocks[j], s->mask, s->part.offset[j], s->part.dims[j]);
    if (rc < 0) {
      rc = o3m_err_set(e, rc, "pmg: cannot cut the block of party %d: %s", j, o3m_strerror(rc));
      goto fail;
    }
  }
  int widest = 0;
  for (int j = 0; j < m; j++)
    if (s->part.dims[j] > widest) widest = s->part.dims[j];
  s->seal_scratch = o3m_malloc(o3m_block_le_bytes(s->part.d, widest));
  s->sealed = o3m_malloc(o3m_seal_block_bytes(s->part.d, widest));
  if (!s->seal_scratch || !s->sealed) {
    rc = o3m_err_set(e, O3M_ENOMEM, "pmg: out of memory");
    goto fail;
  }
  o3m_rng_destroy(rng);
  rng = NULL;
  o3m_free(dims);
  dims = NULL;
  /* Drawing Q and cutting the blocks left values of Q in this thread's
   * vector registers, which every thread created later (gRPC starts its
   * threads next) would inherit. */
  o3m_seal_scrub_registers();
  rc = bind_server(s, e);
  if (rc < 0) goto fail;
  if (s->metrics) {
    rc = metrics_register(s, e);
    if (rc < 0) goto fail;
  }
  pmg_stats st;
  pmg_service_stats(s, &st);
  o3m_log_info("serving %s (port %d) with %s: d = %d over %d parties, mask %016" PRIx64,
               s->me->listen, pmg_service_port(s), s->insecure ? "PLAINTEXT" : "mutual TLS",
               s->part.d, st.parties, s->mask_id);
  *out = s;
  return 0;

fail:
  o3m_rng_destroy(rng);
  o3m_free(dims);
  pmg_service_destroy(s);
  return rc;
}

void pmg_service_destroy(pmg_service *s) {
  if (!s) return;
  o3m_rpc_server_destroy(s->server); /* no handler runs after this */
  o3m_access_destroy(s->access);
  if (s->blocks)
    for (int j = 0; j < s->part.m; j++) o3m_block_destroy(s->blocks[j]); /* wiped first */
  o3m_mask_destroy(s->mask); /* wipes Q first */
  o3m_free(s->seal_scratch);     /* wiped after every use */
  o3m_free(s->sealed);
  o3m_free(s->blocks);
  o3m_free(s->names);
  o3m_free(s->served);
  o3m_free(s->confirmed);
  o3m_free(s->dims_buf);
  o3m_free(s);
}

int pmg_service_port(const pmg_service *s) { return o3m_rpc_server_port(s->server); }

int pmg_service_run(pmg_service *s) {
  o3m_rpc_server_run(s->server);
  pmg_stats st;
  pmg_service_stats(s, &st);
  o3m_log_info("stopped: %" PRIu64 " blocks served, %" PRIu64 " calls refused, %d of %d "
               "parties confirmed, Q %s",
               st.blocks_served, st.refused, st.confirmed, st.parties,
               st.forgotten ? "forgotten" : "wiped at exit");
  return 0;
}

void pmg_service_shutdown(pmg_service *s) {
  o3m_rpc_server_shutdown(s->server); /* sets an atomic flag: async-signal-safe */
}

uint64_t pmg_service_mask_id(const pmg_service *s) { return s->mask_id; }

int pmg_service_dim(const pmg_service *s) { return s->part.d; }

void pmg_service_stats(const pmg_service *s, pmg_stats *out) {
  out->blocks_served = s->blocks_served;
  out->refused = s->refused;
  out->confirmed = s->n_confirmed;
  out->parties = s->part.m;
  out->forgotten = s->forgotten;
}

/* ---------------------------------------------------------------- handlers */

/* The per-request rule: the caller's certificate CN must be the name of
 * party j (the access policy has already let only column parties in).
 * Without TLS there is no identity and everyone may act for any party. */
static int check_caller(pmg_service *s, o3m_rpc_call *call, int j, const char *what, o3m_err *e) {
  if (s->insecure) return 0;
  const char *id = o3m_rpc_call_identity(call);
  if (id && strcmp(id, s->names[j]) == 0) return 0;
  o3m_log_warn("refused %s of party %d (%s) to %s%s%s at %s", what, j, s->names[j],
               id ? "certificate '" : "a caller without a certificate", id ? id : "",
               id ? "'" : "", o3m_rpc_call_peer(call));
  if (!id) return o3m_err_set(e, O3M_EPERM, "%s: the caller has no verified certificate", what);
  return o3m_err_set(e, O3M_EPERM, "%s: certificate '%.64s' may not act for party %d ('%s')",
                     what, id, j, s->names[j]);
}

static int h_info(void *ctx, o3m_rpc_call *call, const ProtobufCMessage *req,
                  ProtobufCMessage *reply, o3m_err *e) {
  (void)call, (void)req, (void)e;
  pmg_service *s = ctx;
  o3m_wire_info_fill((O3m__V1__NodeInfo *)reply, O3M__V1__ROLE__ROLE_MASK_GENERATOR, 0, &s->part,
                     s->dims_buf, s->mask_id, s->name, s->fingerprint);
  return 0;
}

static int get_block(pmg_service *s, o3m_rpc_call *call, const O3m__V1__BlockRequest *req,
                     O3m__V1__Block *reply, o3m_err *e) {
  int rc;
  if (req->party < (uint32_t)s->part.m &&
      (rc = check_caller(s, call, (int)req->party, "GetBlock", e)) < 0)
    return rc;
  if ((rc = o3m_wire_block_request_check(req, &s->part, s->fingerprint, e)) < 0) {
    /* A differing fingerprint is a config that differs from ours in a
     * shared field (a swapped key, an extra party): worth a warning. */
    if (rc == O3M_ESTATE)
      o3m_log_warn("refused GetBlock of party %u to %s: %s", req->party, o3m_rpc_call_peer(call),
                   o3m_err_message(e));
    return rc;
  }
  int j = (int)req->party;
  /* Once per party: after its confirmation a party has its block (and, with
   * a state_dir, a stored copy), so another fetch is either an attack with
   * its certificate or a misconfigured restart. A repeat before the
   * confirmation is served, because the reply may have been lost. The
   * refusal is STATE (FAILED_PRECONDITION), not PERM: the caller is the
   * right party; it is the state of the distribution that forbids it. Once
   * Q is forgotten every party has confirmed, so this also covers that
   * case. */
  if (s->confirmed[j] && !s->keep_mask) {
    o3m_log_warn("refused GetBlock of party %d (%s) to %s: the party already confirmed its "
                 "block of mask %016llx (a block is served once; --keep-mask serves it again)%s",
                 j, s->names[j], o3m_rpc_call_peer(call), (unsigned long long)s->mask_id,
                 s->forgotten ? "; Q is forgotten" : "");
    if (s->forgotten)
      return o3m_err_set(e, O3M_ESTATE,
                         "GetBlock: mask forgotten; restart the federation (mask %016llx was "
                         "confirmed by all %d parties)",
                         (unsigned long long)s->mask_id, s->part.m);
    return o3m_err_set(e, O3M_ESTATE,
                       "GetBlock: party %d already confirmed its block of mask %016llx, which "
                       "is served once; use the copy in the party's state_dir, or restart the "
                       "federation",
                       j, (unsigned long long)s->mask_id);
  }
  size_t n = o3m_seal_block_bytes(s->part.d, s->part.dims[j]);
  rc = o3m_seal_block(s->blocks[j], req->public_key.data, s->seal_scratch, s->sealed);
  if (rc < 0)
    return o3m_err_set(e, rc, "GetBlock: cannot seal the block to the request's public_key (%s)",
                       o3m_strerror(rc));
  o3m_wire_block_fill(reply, s->blocks[j], j, &s->part, s->sealed, n);
  s->served[j] = 1;
  s->blocks_served++;
  o3m_log_info("served the block of party %d (%s, %d x %d) of mask %016llx, sealed to the "
               "caller's key, to %s", j, s->names[j], s->part.d, s->part.dims[j],
               (unsigned long long)s->mask_id, o3m_rpc_call_peer(call));
  return 0;
}

static int h_get_block(void *ctx, o3m_rpc_call *call, const ProtobufCMessage *req,
                       ProtobufCMessage *reply, o3m_err *e) {
  pmg_service *s = ctx;
  int rc = get_block(s, call, (const O3m__V1__BlockRequest *)req, (O3m__V1__Block *)reply, e);
  if (rc < 0) s->refused++;
  return rc;
}

/* Wipes Q and drops the blocks once every column party has confirmed. */
static void forget(pmg_service *s) {
  o3m_mask_forget(s->mask);
  for (int j = 0; j < s->part.m; j++) {
    o3m_block_destroy(s->blocks[j]);
    s->blocks[j] = NULL;
  }
  s->forgotten = 1;
  o3m_metric_set(s->m_forgotten, 1);
  o3m_log_info("all %d parties confirmed mask %016llx; Q forgotten (a new mask needs a restart "
               "of the federation)",
               s->part.m, (unsigned long long)s->mask_id);
}

static int confirm_block(pmg_service *s, o3m_rpc_call *call, const O3m__V1__BlockReceipt *req,
                         o3m_err *e) {
  if (req->party >= (uint32_t)s->part.m)
    return o3m_err_set(e, O3M_ERANGE, "BlockReceipt: party %u, the partition has %d parties",
                       req->party, s->part.m);
  int j = (int)req->party;
  int rc = check_caller(s, call, j, "ConfirmBlock", e);
  if (rc < 0) return rc;
  if (req->mask_id != s->mask_id)
    return o3m_err_set(e, O3M_EMASK, "BlockReceipt: mask %016llx, the generator holds %016llx",
                       (unsigned long long)req->mask_id, (unsigned long long)s->mask_id);
  /* Confirming a block never fetched would let Q be forgotten before the
   * party has it. */
  if (!s->served[j])
    return o3m_err_set(e, O3M_ESTATE, "BlockReceipt: party %d has not fetched its block", j);
  if (s->confirmed[j]) return 0; /* a retried confirmation changes nothing */
  s->confirmed[j] = 1;
  s->n_confirmed++;
  o3m_metric_set(s->m_confirmed, s->n_confirmed);
  o3m_log_info("party %d (%s) confirmed mask %016llx (%d of %d)", j, s->names[j],
               (unsigned long long)s->mask_id, s->n_confirmed, s->part.m);
  if (s->n_confirmed == s->part.m) {
    if (s->keep_mask)
      o3m_log_info("all %d parties confirmed mask %016llx; keeping Q (--keep-mask)", s->part.m,
                   (unsigned long long)s->mask_id);
    else
      forget(s);
  }
  return 0;
}

static int h_confirm_block(void *ctx, o3m_rpc_call *call, const ProtobufCMessage *req,
                           ProtobufCMessage *reply, o3m_err *e) {
  (void)reply;
  pmg_service *s = ctx;
  int rc = confirm_block(s, call, (const O3m__V1__BlockReceipt *)req, e);
  if (rc < 0) s->refused++;
  return rc;
}

static const o3m_rpc_method methods[N_METHODS] = {
    {O3M_PATH_PMG_INFO, &o3m__v1__info_request__descriptor, &o3m__v1__node_info__descriptor,
     h_info},
    {O3M_PATH_PMG_GET_BLOCK, &o3m__v1__block_request__descriptor, &o3m__v1__block__descriptor,
     h_get_block},
    {O3M_PATH_PMG_CONFIRM_BLOCK, &o3m__v1__block_receipt__descriptor, &o3m__v1__ack__descriptor,
     h_confirm_block},
};

/* Only the parties that own columns ever need the mask generator: the
 * clients, the generator's own certificate and any other identity are
 * refused before a request is read. */
static const o3m_access_rule access_rules[N_METHODS] = {
    {O3M_PATH_PMG_INFO, O3M_ACCESS_COLUMN},
    {O3M_PATH_PMG_GET_BLOCK, O3M_ACCESS_COLUMN},
    {O3M_PATH_PMG_CONFIRM_BLOCK, O3M_ACCESS_COLUMN},
};

const o3m_rpc_method *pmg_service_methods(int *n) {
  *n = (int)(sizeof methods / sizeof methods[0]);
  return methods;
}

const o3m_access_rule *pmg_service_access(int *n) {
  *n = (int)(sizeof access_rules / sizeof access_rules[0]);
  return access_rules;
}
