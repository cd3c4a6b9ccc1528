/* o3m_wire.c -- paths, version and message checks of o3m.proto (see
 * o3m_wire.h). Every check runs before the message's values are used and
 * names the first field that is wrong. */
#include "o3m_wire.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "o3m_blas.h"

int o3m_wire_check_matrix(const char *what, uint32_t rows, uint32_t cols, size_t n,
                          const double *v, uint32_t max_rows, uint32_t max_cols, o3m_err *e) {
  if (rows < 1 || rows > max_rows)
    return o3m_err_set(e, O3M_ERANGE, "%s: rows = %u, expected 1..%u", what, rows, max_rows);
  if (cols < 1 || cols > max_cols)
    return o3m_err_set(e, O3M_ERANGE, "%s: cols = %u, expected 1..%u", what, cols, max_cols);
  /* Both factors are below 2^32, so the product fits in 64 bits. */
  uint64_t want = (uint64_t)rows * cols;
  if ((uint64_t)n != want)
    return o3m_err_set(e, O3M_EDIM, "%s: %zu values for %u x %u", what, n, rows, cols);
  if (n > 0 && !v) return o3m_err_set(e, O3M_EINVAL, "%s: values missing", what);
  for (size_t i = 0; i < n; i++)
    if (!isfinite(v[i]))
      return o3m_err_set(e, O3M_ENONFINITE, "%s: value %zu (row %zu, col %zu) is not finite",
                         what, i, i / cols, i % cols);
  return 0;
}

double o3m_wire_norm_limit2(double max_norm) {
  double lim = max_norm * (1.0 + O3M_WIRE_NORM_RTOL);
  return lim * lim;
}

int o3m_wire_check_row_norms(const char *what, int rows, int cols, const double *v,
                             double max_norm, int n_blocks, const int *block_rows, o3m_err *e) {
  if (!what || rows < 0 || cols < 1 || (rows > 0 && !v) || !(max_norm > 0))
    return o3m_err_set(e, O3M_EINVAL, "row norm check: bad arguments");
  /* Squares of values beyond about 1e154 overflow to infinity, which is
   * above any bound: no scaling is needed to refuse them. */
  double lim2 = o3m_wire_norm_limit2(max_norm);
  int block = 0, first = 0; /* the block of row r and its first row */
  for (int r = 0; r < rows; r++) {
    while (n_blocks > 0 && block < n_blocks - 1 && r >= first + block_rows[block])
      first += block_rows[block++];
    const double *x = v + (size_t)r * (size_t)cols;
    /* One vectorized dot product per row (several partial sums, not one
     * serial chain): a NaN or an overflow still makes s fail the test. */
    double s = o3m_dot(cols, x, x);
    if (s <= lim2) continue;
    /* The message names where, never a value or the norm. */
    if (n_blocks > 0)
      return o3m_err_set(e, O3M_EINVAL, "%s: round %d, candidate %d: the l2 norm is above "
                         "max_norm = %g", what, block, r - first, max_norm);
    return o3m_err_set(e, O3M_EINVAL, "%s: candidate %d: the l2 norm is above max_norm = %g",
                       what, r, max_norm);
  }
  return 0;
}

static int partition_ok(const o3m_partition *p) {
  return p && p->m >= 1 && p->m <= O3M_MAX_PARTIES && p->d >= 1 && p->d <= O3M_MAX_DIM;
}

/* ---------------------------------------------------------------- NodeInfo */

void o3m_wire_info_fill(O3m__V1__NodeInfo *msg, O3m__V1__Role role, int party,
                        const o3m_partition *p, uint32_t *dims_buf, uint64_t mask_id,
                        const char *name, const unsigned char *fingerprint) {
  msg->role = role;
  msg->protocol = O3M_PROTOCOL_VERSION;
  msg->party = party < 0 ? 0u : (uint32_t)party;
  msg->dim = (uint32_t)p->d;
  for (int j = 0; j < p->m; j++) dims_buf[j] = (uint32_t)p->dims[j];
  msg->n_dims = (size_t)p->m;
  msg->dims = dims_buf;
  msg->mask_id = mask_id;
  /* protobuf-c packs but never writes through the name pointer. */
  if (name) msg->name = (char *)name;
  /* Borrowed the same way: packed from, never written through. */
  msg->fingerprint.len = O3M_FINGERPRINT_BYTES;
  msg->fingerprint.data = (uint8_t *)fingerprint;
}

static const char *role_name(O3m__V1__Role r) {
  switch (r) {
  case O3M__V1__ROLE__ROLE_MASK_GENERATOR: return "mask generator";
  case O3M__V1__ROLE__ROLE_PASSIVE: return "passive participant";
  case O3M__V1__ROLE__ROLE_ACTIVE: return "active participant";
  default: return "unspecified role";
  }
}

const char *o3m_wire_role_config_name(int role) {
  switch (role) {
  case O3M__V1__ROLE__ROLE_MASK_GENERATOR: return "pmg";
  case O3M__V1__ROLE__ROLE_PASSIVE: return "passive";
  case O3M__V1__ROLE__ROLE_ACTIVE: return "active";
  default: return "unspecified";
  }
}

int o3m_wire_info_check(const O3m__V1__NodeInfo *msg, O3m__V1__Role role, int party,
                        const o3m_partition *p, const unsigned char *fingerprint, o3m_err *e) {
  if (!msg || !partition_ok(p) || !fingerprint)
    return o3m_err_set(e, O3M_EINVAL, "NodeInfo check: bad arguments");
  if (msg->protocol != O3M_PROTOCOL_VERSION)
    return o3m_err_set(e, O3M_ESTATE, "peer speaks O3M protocol %u, this build speaks %d",
                       msg->protocol, O3M_PROTOCOL_VERSION);
  if (msg->role != role)
    return o3m_err_set(e, O3M_ESTATE, "peer is a %s, expected a %s", role_name(msg->role),
                       role_name(role));
  if (party >= 0 && msg->party != (uint32_t)party)
    return o3m_err_set(e, O3M_ESTATE, "peer is party %u, expected party %d", msg->party, party);
  if (msg->n_dims != (size_t)p->m)
    return o3m_err_set(e, O3M_EDIM, "peer's partition has %zu parties, ours %d", msg->n_dims,
                       p->m);
  if (msg->dim != (uint32_t)p->d)
    return o3m_err_set(e, O3M_EDIM, "peer's dim is %u, ours %d", msg->dim, p->d);
  for (int j = 0; j < p->m; j++)
    if (msg->dims[j] != (uint32_t)p->dims[j])
      return o3m_err_set(e, O3M_EDIM, "peer's dims[%d] is %u, ours %d", j, msg->dims[j],
                         p->dims[j]);
  /* Last, so that a plain partition mismatch keeps its own message. The
   * peer is not named by the name it sends (its own claim, for logs only):
   * callers say which configured party they called. */
  return o3m_fingerprint_check(msg->fingerprint.data, msg->fingerprint.len, fingerprint, "peer",
                               e);
}

/* ---------------------------------------------------------------- blocks */

void o3m_wire_block_request_fill(O3m__V1__BlockRequest *req, const o3m_partition *p, int party,
                                 const o3m_seal_key *key, const unsigned char *fingerprint) {
  req->party = (uint32_t)party;
  req->dim = (uint32_t)p->d;
  req->party_dim = (uint32_t)p->dims[party];
  req->public_key.len = O3M_SEAL_KEY_BYTES;
  /* protobuf-c packs from this pointer and never writes through it. */
  req->public_key.data = (uint8_t *)o3m_seal_key_public(key);
  req->fingerprint.len = O3M_FINGERPRINT_BYTES;
  req->fingerprint.data = (uint8_t *)fingerprint;
}

int o3m_wire_block_request_check(const O3m__V1__BlockRequest *req, const o3m_partition *p,
                                 const unsigned char *fingerprint, o3m_err *e) {
  if (!req || !partition_ok(p) || !fingerprint)
    return o3m_err_set(e, O3M_EINVAL, "BlockRequest check: bad arguments");
  if (req->party >= (uint32_t)p->m)
    return o3m_err_set(e, O3M_ERANGE, "BlockRequest: party %u, the partition has %d parties",
                       req->party, p->m);
  if (req->dim != (uint32_t)p->d)
    return o3m_err_set(e, O3M_EDIM, "BlockRequest: dim %u, the partition has d = %d", req->dim,
                       p->d);
  if (req->party_dim != (uint32_t)p->dims[req->party])
    return o3m_err_set(e, O3M_EDIM, "BlockRequest: party %u has d_j = %d, asked for %u",
                       req->party, p->dims[req->party], req->party_dim);
  if (req->public_key.len != O3M_SEAL_KEY_BYTES || !req->public_key.data)
    return o3m_err_set(e, O3M_EINVAL, "BlockRequest: public_key has %zu bytes, expected %d; a "
                       "block is sent only sealed to the caller's key (protocol %d)",
                       req->public_key.len, O3M_SEAL_KEY_BYTES, O3M_PROTOCOL_VERSION);
  char who[48];
  snprintf(who, sizeof who, "BlockRequest: party %u", req->party);
  return o3m_fingerprint_check(req->fingerprint.data, req->fingerprint.len, fingerprint, who, e);
}

void o3m_wire_block_fill(O3m__V1__Block *msg, const o3m_block *b, int party,
                         const o3m_partition *p, unsigned char *sealed, size_t sealed_len) {
  msg->mask_id = o3m_block_mask_id(b);
  msg->party = (uint32_t)party;
  msg->rows = (uint32_t)o3m_block_rows(b);
  msg->cols = (uint32_t)o3m_block_cols(b);
  msg->col0 = (uint32_t)p->offset[party];
  msg->sealed.len = sealed_len;
  msg->sealed.data = sealed;
}

int o3m_wire_block_import(o3m_block **out, const O3m__V1__Block *msg, const o3m_partition *p,
                          int party, const o3m_seal_key *key, o3m_err *e) {
  if (!out) return o3m_err_set(e, O3M_EINVAL, "Block import: out is NULL");
  *out = NULL;
  if (!msg || !key || !partition_ok(p) || party < 0 || party >= p->m)
    return o3m_err_set(e, O3M_EINVAL, "Block import: bad arguments");
  if (msg->mask_id == 0) return o3m_err_set(e, O3M_EMASK, "Block: mask id is 0");
  if (msg->party != (uint32_t)party)
    return o3m_err_set(e, O3M_EINVAL, "Block: for party %u, expected party %d", msg->party,
                       party);
  if (msg->rows != (uint32_t)p->d || msg->cols != (uint32_t)p->dims[party])
    return o3m_err_set(e, O3M_EDIM, "Block: %u x %u, expected %d x %d", msg->rows, msg->cols,
                       p->d, p->dims[party]);
  if (msg->col0 != (uint32_t)p->offset[party])
    return o3m_err_set(e, O3M_EDIM, "Block: col0 %u, party %d starts at column %d", msg->col0,
                       party, p->offset[party]);
  if (msg->n_data != 0)
    return o3m_err_set(e, O3M_ESTATE, "Block: %zu values sent in the clear (a protocol-2 mask "
                       "generator?); only a sealed block is accepted", msg->n_data);
  size_t want = o3m_seal_block_bytes(p->d, p->dims[party]);
  if (msg->sealed.len != want)
    return o3m_err_set(e, O3M_EDIM, "Block: sealed has %zu bytes, a sealed %d x %d block has %zu",
                       msg->sealed.len, p->d, p->dims[party], want);
  int rc = o3m_seal_open_block(out, key, msg->sealed.data, msg->sealed.len, p->d,
                               p->dims[party], msg->mask_id);
  if (rc == O3M_ECORRUPT)
    return o3m_err_set(e, rc, "Block: the sealed block does not open with this request's key "
                       "(altered, or sealed to another key)");
  if (rc == O3M_ENONFINITE)
    return o3m_err_set(e, rc, "Block: the sealed block holds a non-finite value");
  if (rc < 0) return o3m_err_set(e, rc, "Block: %s", o3m_strerror(rc));
  return 0;
}

int o3m_wire_get_block(o3m_rpc_client *c, const o3m_partition *p, int party,
                       const unsigned char *fingerprint, o3m_block **out, o3m_err *e) {
  if (!out) return o3m_err_set(e, O3M_EINVAL, "GetBlock: out is NULL");
  *out = NULL;
  if (!c || !partition_ok(p) || party < 0 || party >= p->m || !fingerprint)
    return o3m_err_set(e, O3M_EINVAL, "GetBlock: bad arguments");
  o3m_seal_key *key;
  int rc = o3m_seal_key_create(&key);
  if (rc < 0) return o3m_err_set(e, rc, "GetBlock: cannot draw a key pair: %s", o3m_strerror(rc));
  O3m__V1__BlockRequest req = O3M__V1__BLOCK_REQUEST__INIT;
  o3m_wire_block_request_fill(&req, p, party, key, fingerprint);
  ProtobufCMessage *m;
  rc = o3m_rpc_client_call(c, O3M_PATH_PMG_GET_BLOCK, &req.base, &o3m__v1__block__descriptor, &m,
                           e);
  if (rc == 0) rc = o3m_wire_block_import(out, (const O3m__V1__Block *)m, p, party, key, e);
  o3m_seal_key_destroy(key);
  return rc;
}

/* ---------------------------------------------------------------- masking */

/* What is wrong with one id of a query: 0 nothing, 1 missing or empty, 2
 * longer than any table can hold (strnlen: never read past the limit). */
static int id_fault(const char *id) {
  if (!id || !id[0]) return 1;
  return strnlen(id, O3M_MAX_ID + 1) > O3M_MAX_ID ? 2 : 0;
}

/* The message of fault (id_fault) for field ("user", or "items" with its
 * index k >= 0): formatted only when an id is refused. */
static int id_refuse(const char *what, const char *field, int k, int fault, o3m_err *e) {
  char name[32];
  if (k >= 0)
    snprintf(name, sizeof name, "%s[%d]", field, k);
  else
    snprintf(name, sizeof name, "%s", field);
  if (fault == 1) return o3m_err_set(e, O3M_EINVAL, "%s: %s is empty", what, name);
  return o3m_err_set(e, O3M_EINVAL, "%s: %s is longer than %d bytes", what, name, O3M_MAX_ID);
}

int o3m_wire_query_ids_check(const char *what, const char *user, int check_user, int K,
                             char *const *items, int check_items, o3m_err *e) {
  int fault = check_user || (user && user[0]) ? id_fault(user) : 0;
  if (fault) return id_refuse(what, "user", -1, fault, e);
  for (int k = 0; check_items && k < K; k++)
    if ((fault = id_fault(items[k])) != 0) return id_refuse(what, "items", k, fault, e);
  return 0;
}

int o3m_wire_mask_request_check(const O3m__V1__MaskRequest *req, uint64_t mask_id,
                                int max_candidates, o3m_err *e) {
  if (!req) return o3m_err_set(e, O3M_EINVAL, "MaskRequest check: request is NULL");
  if (mask_id == 0) return o3m_err_set(e, O3M_EMASK, "MaskRequest: no mask installed yet");
  if (req->mask_id != mask_id)
    return o3m_err_set(e, O3M_EMASK, "MaskRequest: mask %016llx, this party holds %016llx",
                       (unsigned long long)req->mask_id, (unsigned long long)mask_id);
  if (req->n_items < 1 || req->n_items > (size_t)(max_candidates > 0 ? max_candidates : 0))
    return o3m_err_set(e, O3M_ERANGE, "MaskRequest: %zu items, expected 1..%d", req->n_items,
                       max_candidates);
  return 0;
}

void o3m_wire_masked_fill(O3m__V1__MaskedContexts *msg, uint64_t mask_id, int party, int K,
                          int d, double *values) {
  msg->mask_id = mask_id;
  msg->party = (uint32_t)party;
  msg->rows = (uint32_t)K;
  msg->cols = (uint32_t)d;
  msg->n_values = (size_t)K * (size_t)d;
  msg->values = values;
}

/* A passive party's reply (what names the message) must come from the party
 * asked and be masked under the current block. */
static int check_origin(const char *what, uint32_t got_party, uint64_t got_mask, int party,
                        uint64_t mask_id, o3m_err *e) {
  if (got_party != (uint32_t)party)
    return o3m_err_set(e, O3M_EINVAL, "%s: answered as party %u, asked party %d", what, got_party,
                       party);
  if (got_mask != mask_id)
    return o3m_err_set(e, O3M_EMASK, "%s from party %d: mask %016llx, expected %016llx", what,
                       party, (unsigned long long)got_mask, (unsigned long long)mask_id);
  return 0;
}

int o3m_wire_masked_check(const O3m__V1__MaskedContexts *msg, int party, int K, int d,
                          uint64_t mask_id, double max_norm, o3m_err *e) {
  if (!msg || K < 1 || d < 1) return o3m_err_set(e, O3M_EINVAL, "MaskedContexts check: bad arguments");
  int rc = check_origin("MaskedContexts", msg->party, msg->mask_id, party, mask_id, e);
  if (rc) return rc;
  if (msg->rows != (uint32_t)K || msg->cols != (uint32_t)d)
    return o3m_err_set(e, O3M_EDIM, "MaskedContexts from party %d: %u x %u, expected %d x %d",
                       party, msg->rows, msg->cols, K, d);
  char what[48];
  snprintf(what, sizeof what, "MaskedContexts from party %d", party);
  rc = o3m_wire_check_matrix(what, msg->rows, msg->cols, msg->n_values, msg->values,
                                 (uint32_t)K, (uint32_t)d, e);
  if (rc < 0) return rc;
  return o3m_wire_check_row_norms(what, K, d, msg->values, max_norm, 0, NULL, e);
}

/* ---------------------------------------------------------------- batches */

int o3m_wire_mask_batch_rows(int max_candidates, int d) {
  if (max_candidates < 1 || d < 1) return 0;
  int64_t full = (int64_t)O3M_WIRE_MAX_BATCH * max_candidates;
  int64_t budget = (int64_t)O3M_WIRE_BATCH_BYTES / ((int64_t)d * (int64_t)sizeof(double));
  int64_t rows = full < budget ? full : budget;
  if (rows < max_candidates) rows = max_candidates;
  return rows > INT32_MAX ? INT32_MAX : (int)rows;
}

/* What both forms of a MaskBatchRequest must have: the party's mask
 * installed and named, and 1..O3M_WIRE_MAX_BATCH queries. */
static int mask_batch_head_check(const O3m__V1__MaskBatchRequest *req, uint64_t mask_id,
                                 o3m_err *e) {
  if (!req) return o3m_err_set(e, O3M_EINVAL, "MaskBatchRequest check: request is NULL");
  if (mask_id == 0) return o3m_err_set(e, O3M_EMASK, "MaskBatchRequest: no mask installed yet");
  if (req->mask_id != mask_id)
    return o3m_err_set(e, O3M_EMASK, "MaskBatchRequest: mask %016llx, this party holds %016llx",
                       (unsigned long long)req->mask_id, (unsigned long long)mask_id);
  if (req->n_queries < 1 || req->n_queries > O3M_WIRE_MAX_BATCH)
    return o3m_err_set(e, O3M_ERANGE, "MaskBatchRequest: %zu queries, expected 1..%d",
                       req->n_queries, O3M_WIRE_MAX_BATCH);
  return 0;
}

int o3m_wire_mask_batch_check(const O3m__V1__MaskBatchRequest *req, uint64_t mask_id,
                              int max_candidates, int max_rows, o3m_err *e) {
  int rc = mask_batch_head_check(req, mask_id, e);
  if (rc < 0) return rc;
  size_t total = 0, kmax = (size_t)(max_candidates > 0 ? max_candidates : 0);
  for (size_t q = 0; q < req->n_queries; q++) {
    const O3m__V1__MaskQuery *mq = req->queries[q];
    if (!mq) return o3m_err_set(e, O3M_EINVAL, "MaskBatchRequest: query %zu is missing", q);
    if (mq->n_items < 1 || mq->n_items > kmax)
      return o3m_err_set(e, O3M_ERANGE, "MaskBatchRequest: query %zu has %zu items, expected "
                         "1..%d", q, mq->n_items, max_candidates);
    total += mq->n_items;
  }
  if (total > (size_t)(max_rows > 0 ? max_rows : 0))
    return o3m_err_set(e, O3M_ERANGE, "MaskBatchRequest: %zu items in all, at most %d per batch",
                       total, max_rows);
  return 0;
}

void o3m_wire_mask_batch_fill(O3m__V1__MaskBatchReply *msg, uint64_t mask_id, int party,
                              int n_queries, uint32_t *rows, int d, double *values) {
  size_t total = 0;
  for (int q = 0; q < n_queries; q++) total += rows[q];
  msg->mask_id = mask_id;
  msg->party = (uint32_t)party;
  msg->cols = (uint32_t)d;
  msg->n_rows = (size_t)n_queries;
  msg->rows = rows;
  msg->n_values = total * (size_t)d;
  msg->values = values;
}

void o3m_wire_mask_batch_fill_masked(O3m__V1__MaskBatchReply *msg, uint64_t mask_id, int party,
                                     int n_queries, uint32_t *rows, int d, uint64_t *masked) {
  o3m_wire_mask_batch_fill(msg, mask_id, party, n_queries, rows, d, NULL);
  msg->n_masked = msg->n_values;
  msg->n_values = 0;
  /* int64 and uint64 may alias (C11 6.5p7): the words go out as they are. */
  msg->masked = (int64_t *)masked;
}

int o3m_wire_mask_batch_factored_check(const O3m__V1__MaskBatchRequest *req, uint64_t mask_id,
                                       int max_rows, o3m_err *e) {
  int rc = mask_batch_head_check(req, mask_id, e);
  if (rc < 0) return rc;
  for (size_t q = 0; q < req->n_queries; q++) {
    if (!req->queries[q])
      return o3m_err_set(e, O3M_EINVAL, "MaskBatchRequest: query %zu is missing", q);
    if (req->queries[q]->n_items != 0)
      return o3m_err_set(e, O3M_EINVAL, "MaskBatchRequest: factored, but query %zu has %zu "
                         "items (a factored batch names its items once, in items)", q,
                         req->queries[q]->n_items);
  }
  if (req->n_items > (size_t)(max_rows > 0 ? max_rows : 0))
    return o3m_err_set(e, O3M_ERANGE, "MaskBatchRequest: %zu items, at most %d per batch",
                       req->n_items, max_rows);
  return 0;
}

void o3m_wire_mask_batch_fill_factored(O3m__V1__MaskBatchReply *msg, uint64_t mask_id,
                                       int party, int n_queries, int n_items, uint32_t *rows,
                                       int d, double *values, uint64_t *masked,
                                       uint64_t user_epoch, uint64_t item_epoch) {
  for (int q = 0; q < n_queries; q++) rows[q] = 1;
  size_t n = (size_t)(n_queries + n_items) * (size_t)d;
  msg->mask_id = mask_id;
  msg->party = (uint32_t)party;
  msg->cols = (uint32_t)d;
  msg->n_rows = (size_t)n_queries;
  msg->rows = rows;
  if (masked) {
    msg->n_masked = n;
    msg->masked = (int64_t *)masked;
  } else {
    msg->n_values = n;
    msg->values = values;
  }
  msg->user_epoch = user_epoch;
  msg->item_epoch = item_epoch;
}

/* What every MaskBatchReply check starts with: its origin and mask, one
 * answer per query, d columns. */
static int reply_head_check(const O3m__V1__MaskBatchReply *msg, int party, int n_queries, int d,
                            uint64_t mask_id, o3m_err *e) {
  int rc = check_origin("MaskBatchReply", msg->party, msg->mask_id, party, mask_id, e);
  if (rc) return rc;
  if (msg->n_rows != (size_t)n_queries)
    return o3m_err_set(e, O3M_EDIM, "MaskBatchReply from party %d: %zu queries answered, %d "
                       "asked", party, msg->n_rows, n_queries);
  if (msg->cols != (uint32_t)d)
    return o3m_err_set(e, O3M_EDIM, "MaskBatchReply from party %d: %u columns, expected %d",
                       party, msg->cols, d);
  return 0;
}

/* The form of the mode, total rows of d: masked words when secure, else
 * finite values (what names the reply). The norms are the caller's. */
static int reply_body_check(const O3m__V1__MaskBatchReply *msg, int party, uint64_t total, int d,
                            int secure, const char *what, o3m_err *e) {
  if (secure) {
    if (msg->n_values != 0)
      return o3m_err_set(e, O3M_EINVAL, "MaskBatchReply from party %d: a per-party part, but "
                         "aggregation = secure (is its config the same as ours?)", party);
    if (msg->n_masked != total * (uint64_t)d)
      return o3m_err_set(e, O3M_EDIM, "MaskBatchReply from party %d: %zu masked words, "
                         "expected %llu x %d", party, msg->n_masked, (unsigned long long)total, d);
    return 0;
  }
  if (msg->n_masked != 0)
    return o3m_err_set(e, O3M_EINVAL, "MaskBatchReply from party %d: securely aggregated words, "
                       "but aggregation = per-party (is its config the same as ours?)", party);
  return o3m_wire_check_matrix(what, (uint32_t)total, (uint32_t)d, msg->n_values, msg->values,
                               (uint32_t)total, (uint32_t)d, e);
}

int o3m_wire_mask_batch_factored_reply_check(const O3m__V1__MaskBatchReply *msg, int party,
                                             int n_queries, int n_items, int d,
                                             uint64_t mask_id, int secure, double max_norm,
                                             o3m_err *e) {
  if (!msg || n_queries < 1 || n_items < 0 || d < 1)
    return o3m_err_set(e, O3M_EINVAL, "MaskBatchReply check: bad arguments");
  int rc = reply_head_check(msg, party, n_queries, d, mask_id, e);
  if (rc) return rc;
  for (int q = 0; q < n_queries; q++)
    if (msg->rows[q] != 1)
      return o3m_err_set(e, O3M_EDIM, "MaskBatchReply from party %d: query %d has %u user rows, "
                         "a factored batch has 1", party, q, msg->rows[q]);
  if (msg->user_epoch == 0 || msg->item_epoch == 0)
    return o3m_err_set(e, O3M_EINVAL, "MaskBatchReply from party %d: no table epochs (a party "
                       "before protocol 6?)", party);
  char what[48];
  snprintf(what, sizeof what, "MaskBatchReply from party %d", party);
  rc = reply_body_check(msg, party, (uint64_t)(n_queries + n_items), d, secure, what, e);
  if (rc < 0 || secure) return rc;
  /* The message names the round of a user part, or the index of an item
   * part among the request's items. */
  for (int q = 0; q < n_queries; q++) {
    o3m_err ne;
    if (o3m_wire_check_row_norms(what, 1, d, msg->values + (size_t)q * (size_t)d, max_norm, 0,
                                 NULL, &ne) < 0)
      return o3m_err_set(e, O3M_EINVAL, "%s: round %d, its user part: the l2 norm is above "
                         "max_norm = %g", what, q, max_norm);
  }
  for (int t = 0; t < n_items; t++) {
    o3m_err ne;
    if (o3m_wire_check_row_norms(what, 1, d, msg->values + (size_t)(n_queries + t) * (size_t)d,
                                 max_norm, 0, NULL, &ne) < 0)
      return o3m_err_set(e, O3M_EINVAL, "%s: item %d of the request: the l2 norm is above "
                         "max_norm = %g", what, t, max_norm);
  }
  return 0;
}

int o3m_wire_mask_batch_reply_check(const O3m__V1__MaskBatchReply *msg, int party, int n_queries,
                                    const int *K, int d, uint64_t mask_id, int secure,
                                    double max_norm, o3m_err *e) {
  if (!msg || !K || n_queries < 1 || d < 1)
    return o3m_err_set(e, O3M_EINVAL, "MaskBatchReply check: bad arguments");
  int rc = reply_head_check(msg, party, n_queries, d, mask_id, e);
  if (rc) return rc;
  uint64_t total = 0;
  for (int q = 0; q < n_queries; q++) {
    if (K[q] < 1 || msg->rows[q] != (uint32_t)K[q])
      return o3m_err_set(e, O3M_EDIM, "MaskBatchReply from party %d: query %d has %u rows, "
                         "expected %d", party, q, msg->rows[q], K[q]);
    total += (uint64_t)K[q];
  }
  if (total > UINT32_MAX)
    return o3m_err_set(e, O3M_ERANGE, "MaskBatchReply from party %d: %llu rows", party,
                       (unsigned long long)total);
  char what[48];
  snprintf(what, sizeof what, "MaskBatchReply from party %d", party);
  rc = reply_body_check(msg, party, total, d, secure, what, e);
  if (rc < 0 || secure) return rc;
  return o3m_wire_check_row_norms(what, (int)total, d, msg->values, max_norm, n_queries, K, e);
}

int o3m_wire_recommend_check(const O3m__V1__RecommendRequest *req, int max_candidates,
                             int n_arms, o3m_err *e) {
  if (!req) return o3m_err_set(e, O3M_EINVAL, "RecommendRequest check: request is NULL");
  if (req->n_items < 1 || req->n_items > (size_t)(max_candidates > 0 ? max_candidates : 0))
    return o3m_err_set(e, O3M_ERANGE, "RecommendRequest: %zu items, expected 1..%d",
                       req->n_items, max_candidates);
  if (req->n_arms == 0 || n_arms <= 0) return 0;
  if (req->n_arms != req->n_items)
    return o3m_err_set(e, O3M_EINVAL, "RecommendRequest: %zu arms for %zu items", req->n_arms,
                       req->n_items);
  for (size_t k = 0; k < req->n_arms; k++)
    if (req->arms[k] >= (uint32_t)n_arms)
      return o3m_err_set(e, O3M_ERANGE, "RecommendRequest: arms[%zu] = %u, the model has %d arms",
                         k, req->arms[k], n_arms);
  return 0;
}

/* ---------------------------------------------------------------- sizes */

/* Bytes of one field: a one-byte tag (every field number here is below 16),
 * then a varint length for length-delimited fields. */
#define TAG 1
#define VARINT_MAX 10
#define LEN_MAX 5 /* a length below 2^32 */
/* A string field holding an id of the longest length. */
#define ID_FIELD (TAG + LEN_MAX + O3M_MAX_ID)
/* Elements of unpacked repeated fields. */
#define DOUBLE_FIELD (TAG + 8)
#define UINT32_FIELD (TAG + 5)
#define FIXED64_FIELD (TAG + 8)

/* The RPC layer accepts messages of at most 1 GiB (O3M_MAX_MESSAGE); a config
 * whose largest message is larger still gets a server, whose limit then
 * cuts the largest requests. */
#define BYTES_MAX O3M_MAX_MESSAGE
static int clamp_bytes(double n) { return n > BYTES_MAX ? BYTES_MAX : (int)n; }

int o3m_wire_recommend_max_bytes(int max_candidates, int d0) {
  if (max_candidates < 1 || d0 < 0) return 0;
  double K = max_candidates;
  return clamp_bytes(ID_FIELD + K * ID_FIELD + K * UINT32_FIELD + K * d0 * DOUBLE_FIELD +
                     O3M_WIRE_SIZE_SLACK);
}

int o3m_wire_mask_batch_max_bytes(int max_candidates, int d) {
  int rows = o3m_wire_mask_batch_rows(max_candidates, d);
  if (rows < 1) return 0;
  /* Per query: the embedded message's tag and length, and the user (a
   * query carries no round id since protocol 3). */
  double query = TAG + LEN_MAX + ID_FIELD;
  double nonce = TAG + LEN_MAX + O3M_WIRE_NONCE_BYTES + TAG + VARINT_MAX; /* and scale */
  return clamp_bytes(FIXED64_FIELD + nonce + O3M_WIRE_MAX_BATCH * query +
                     (double)rows * ID_FIELD + O3M_WIRE_SIZE_SLACK);
}

int o3m_wire_mask_batch_reply_max_bytes(int max_candidates, int d) {
  int rows = o3m_wire_mask_batch_rows(max_candidates, d);
  if (rows < 1) return 0;
  /* One of values (doubles) and masked (sfixed64) is set; both are 8 bytes
   * a tag each unpacked, so one bound covers either mode. A factored batch
   * has up to one user row per query besides its item rows, and two
   * epochs. */
  return clamp_bytes(3 * FIXED64_FIELD + 2 * (TAG + VARINT_MAX) +
                     O3M_WIRE_MAX_BATCH * UINT32_FIELD +
                     ((double)rows + O3M_WIRE_MAX_BATCH) * d * DOUBLE_FIELD +
                     O3M_WIRE_SIZE_SLACK);
}
