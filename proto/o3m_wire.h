/* o3m_wire.h -- the contract of o3m.proto in C: paths, version, checks.
 *
 * o3m.proto says what each message means; this module holds what C code
 * needs to keep to it: the method paths (string literals, so they can be
 * passed to o3m_rpc_client_start and put in method tables), the protocol
 * version, and one checker per received message. Each checker compares a
 * message with what the receiver knows (the public partition, the mask id it
 * holds, its candidate limit) before any value is used, so a wrong peer, a
 * stale mask or a truncated matrix is caught at the boundary with an error
 * that names the field, and the three daemons check alike. A mask block is
 * the one message whose values are secret: it travels sealed to a key the
 * fetching party draws (o3m_seal.h), and o3m_wire_get_block is the one
 * place where a party fetches it.
 *
 * The fill functions set a reply's fields to point into the caller's
 * storage without copying (protobuf-c packs straight from there), so that
 * storage must outlive the packing of the message; see o3m_rpc.h for when
 * a handler's reply is packed.
 *
 * Codes: O3M_EMASK for a mask id other than the expected one (or 0),
 * O3M_EDIM for a shape that disagrees with the partition, O3M_ENONFINITE
 * for a NaN or infinity, O3M_ERANGE for a count or index out of bounds,
 * O3M_ESTATE for a peer in the wrong role or speaking another protocol
 * version, O3M_EINVAL for a NULL argument or an inconsistent field. */
#ifndef O3M_WIRE_H
#define O3M_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "o3m.pb-c.h"
#include "o3m_config.h"
#include "o3m_error.h"
#include "o3m_fingerprint.h"
#include "o3m_mask.h"
#include "o3m_rpc.h"
#include "o3m_seal.h"

/* Raised whenever a change to o3m.proto would be misread by an old peer, or
 * a peer needs a method an old one lacks. 2: the active participant asks
 * passive participants with MaskBatch only, so a version-1 passive
 * participant is refused at start-up (Info) rather than failing every round
 * with UNIMPLEMENTED. 3: two changes of one release. MaskRequest and
 * MaskQuery no longer carry the round id (field 1 is reserved), which was
 * the decision id the round would get: nothing a passive participant
 * receives may name a decision. And a block crosses the wire only sealed to
 * a key the fetching party sends (BlockRequest.public_key, Block.sealed;
 * o3m_seal.h): a version-2 generator would send it in the clear, a
 * version-2 party could not open it. Peers of another version are refused
 * at start-up (Info). 4: secure aggregation (crypto/o3m_secagg.h):
 * MaskBatchRequest.nonce and MaskBatchReply.masked; a version-3 passive
 * participant would answer per-party parts, which a version-4 active
 * participant in secure mode must never see. 5: the federation fingerprint
 * (NodeInfo.fingerprint, BlockRequest.fingerprint; crypto/o3m_fingerprint.h):
 * a version-4 peer sends none, so a version-5 party could not tell whether
 * the peer's config agrees with its own. 6: the factored MaskBatch
 * (MaskBatchRequest.factored and items, MaskBatchReply.user_epoch and
 * item_epoch): the active participant asks for one user part per
 * query and only the item parts it has not cached, which a version-5
 * passive participant would refuse as queries without items. */
#define O3M_PROTOCOL_VERSION 6

/* Most queries in one MaskBatch. */
#define O3M_WIRE_MAX_BATCH O3M_MAX_WIRE_BATCH
/* Bytes of masked values a MaskBatch may aim for: the row budget of
 * o3m_wire_mask_batch_rows keeps a reply of d-vectors near this size. */
#define O3M_WIRE_BATCH_BYTES O3M_MAX_WIRE_BATCH_BYTES

#define O3M_PATH_PMG_INFO "/o3m.v1.MaskGenerator/Info"
#define O3M_PATH_PMG_GET_BLOCK "/o3m.v1.MaskGenerator/GetBlock"
#define O3M_PATH_PMG_CONFIRM_BLOCK "/o3m.v1.MaskGenerator/ConfirmBlock"
#define O3M_PATH_PASSIVE_INFO "/o3m.v1.Passive/Info"
#define O3M_PATH_PASSIVE_MASK "/o3m.v1.Passive/Mask"
#define O3M_PATH_PASSIVE_MASK_BATCH "/o3m.v1.Passive/MaskBatch"
#define O3M_PATH_PASSIVE_STATS "/o3m.v1.Passive/Stats"
#define O3M_PATH_PASSIVE_RELOAD "/o3m.v1.Passive/Reload"
#define O3M_PATH_ACTIVE_INFO "/o3m.v1.Active/Info"
#define O3M_PATH_ACTIVE_RECOMMEND "/o3m.v1.Active/Recommend"
#define O3M_PATH_ACTIVE_REWARD "/o3m.v1.Active/Reward"
#define O3M_PATH_ACTIVE_STATS "/o3m.v1.Active/Stats"
#define O3M_PATH_ACTIVE_RELOAD "/o3m.v1.Active/Reload"

/* Checks a received matrix: rows in 1..max_rows, cols in 1..max_cols,
 * n == rows * cols and every value finite. what names the message in the
 * error ("Block", "MaskedContexts from party 2"). */
int o3m_wire_check_matrix(const char *what, uint32_t rows, uint32_t cols, size_t n,
                          const double *v, uint32_t max_rows, uint32_t max_cols, o3m_err *e);

/* Relative tolerance of the norm checks: a masked part Q^j x^j has the norm
 * of x^j only up to rounding (about d eps), so a bound is exceeded only by
 * more than this. */
#define O3M_WIRE_NORM_RTOL 1e-9

/* Checks that each of the rows x cols rows of v has an l2 norm of at most
 * max_norm (> 0) times 1 + O3M_WIRE_NORM_RTOL; a non-finite value fails too.
 * The rows may be grouped into n_blocks rounds of block_rows[i] rows each
 * (n_blocks 0: one group, block_rows NULL), so that the message names the
 * round and the candidate of the first row above the bound: O3M_EINVAL
 * with "what: round i, candidate k: the l2 norm is above max_norm = B",
 * never a value or the norm. This is how the active participant keeps the
 * context bounded (o3m_config.h, "Bounded contexts"). */
/* The square of the largest norm that check accepts for max_norm: a row
 * x passes when o3m_dot(cols, x, x) <= it, which lets a caller check each
 * row as it writes it and call the check for the message only when one
 * fails. */
double o3m_wire_norm_limit2(double max_norm);

int o3m_wire_check_row_norms(const char *what, int rows, int cols, const double *v,
                             double max_norm, int n_blocks, const int *block_rows, o3m_err *e);

/* ---- NodeInfo (every service's Info) ---- */

/* Fills an initialized NodeInfo. dims_buf (p->m entries, caller's storage)
 * receives the partition; name may be NULL. For the mask generator pass
 * party 0. fingerprint (O3M_FINGERPRINT_BYTES, o3m_fingerprint_compute) is
 * borrowed by the message and must outlive its packing. */
void o3m_wire_info_fill(O3m__V1__NodeInfo *msg, O3m__V1__Role role, int party,
                        const o3m_partition *p, uint32_t *dims_buf, uint64_t mask_id,
                        const char *name, const unsigned char *fingerprint);

/* A NodeInfo role as the config spells it ("pmg", "passive", "active"),
 * so that an operator reads what the [party NAME] role key says; any other
 * value is "unspecified". Never NULL. */
const char *o3m_wire_role_config_name(int role);

/* Checks a peer's NodeInfo at start-up: same protocol version, the expected
 * role, the expected party (party < 0: any), exactly the partition p and
 * then the same federation fingerprint as ours (fingerprint,
 * O3M_FINGERPRINT_BYTES): O3M_ESTATE with o3m_fingerprint_check's message,
 * which names the peer and both fingerprints, otherwise. */
int o3m_wire_info_check(const O3m__V1__NodeInfo *msg, O3m__V1__Role role, int party,
                        const o3m_partition *p, const unsigned char *fingerprint, o3m_err *e);

/* ---- mask generator ---- */

/* A participant's BlockRequest for its block: party, d and d_party from p,
 * key's public half and the caller's federation fingerprint, both of which
 * the request borrows (they must outlive the packing of req). */
void o3m_wire_block_request_fill(O3m__V1__BlockRequest *req, const o3m_partition *p, int party,
                                 const o3m_seal_key *key, const unsigned char *fingerprint);

/* The generator's check of a BlockRequest: party in 0..m-1, dim == d,
 * party_dim == d_party, a public key of O3M_SEAL_KEY_BYTES bytes
 * (O3M_EINVAL otherwise: without one the block could only go out in the
 * clear, which protocol 3 never does), and the generator's own federation
 * fingerprint (O3M_ESTATE otherwise, o3m_fingerprint_check). */
int o3m_wire_block_request_check(const O3m__V1__BlockRequest *req, const o3m_partition *p,
                                 const unsigned char *fingerprint, o3m_err *e);

/* Fills an initialized Block with the public fields of a column block that
 * the generator cut out of Q for party (o3m_block_from_mask with p's offset
 * and dim) and with sealed, the block sealed to the requester's key
 * (o3m_seal_block; sealed_len = o3m_seal_block_bytes of its shape).
 * msg->sealed points into the caller's buffer, which must outlive the
 * packing. The values themselves never enter the message. */
void o3m_wire_block_fill(O3m__V1__Block *msg, const o3m_block *b, int party,
                         const o3m_partition *p, unsigned char *sealed, size_t sealed_len);

/* A participant's import of its Block: party, rows == d, cols == d_party,
 * col0 == offset of party, nonzero mask id, no value in the clear (data
 * empty: O3M_ESTATE otherwise, a protocol-2 generator), and sealed opening
 * under key (the key whose public half the request carried) into d * d_party
 * finite values: O3M_EDIM for a wrong length, O3M_ECORRUPT for a box that
 * does not open, O3M_ENONFINITE. On success *out is a new block (the caller
 * destroys it); on failure *out is NULL and no plaintext is left behind. */
int o3m_wire_block_import(o3m_block **out, const O3m__V1__Block *msg, const o3m_partition *p,
                          int party, const o3m_seal_key *key, o3m_err *e);

/* The participant's whole GetBlock on client c (TLS-pinned to the
 * generator): draws an ephemeral key pair, sends the request (with our
 * federation fingerprint, which the generator checks), imports the
 * sealed reply and destroys the key pair, so that the block exists in the
 * clear only in *out. Errors are those of o3m_rpc_client_call (the
 * generator's code, for example O3M_ESTATE for a block already confirmed)
 * and of o3m_wire_block_import, plus O3M_ERANDOM or O3M_ENOMEM for the key
 * pair; e says which. On failure *out is NULL. */
int o3m_wire_get_block(o3m_rpc_client *c, const o3m_partition *p, int party,
                       const unsigned char *fingerprint, o3m_block **out, o3m_err *e);

/* ---- passive participant ---- */

/* The ids of one query (a RecommendRequest, a MaskRequest, or one query of
 * a MaskBatchRequest), checked alike by the active participant before it
 * asks anyone and by each passive participant, so that no query a passive
 * participant would refuse can pass the active one's check (a refused
 * MaskBatch fails every round batched in it, other clients' too). With
 * check_user, user must be non-empty; with check_items, each of the K
 * items must be non-empty (items may be NULL without check_items). Any id
 * given must be at most O3M_MAX_ID bytes (never read past it). The
 * message starts with what and names the field ("user is empty", "items[2]
 * is longer than 128 bytes"). O3M_EINVAL; 0 when all pass. */
int o3m_wire_query_ids_check(const char *what, const char *user, int check_user, int K,
                             char *const *items, int check_items, o3m_err *e);

/* A passive participant's check of a MaskRequest: mask_id equals the mask
 * it holds (O3M_EMASK otherwise, also when it holds none: mask_id 0), and
 * 1..max_candidates items. */
int o3m_wire_mask_request_check(const O3m__V1__MaskRequest *req, uint64_t mask_id,
                                int max_candidates, o3m_err *e);

/* Fills an initialized MaskedContexts with K rows of d values (row-major,
 * row k = Q^j x^j_k, the layout o3m_block_apply writes). values stays the
 * caller's and must outlive the packing. */
void o3m_wire_masked_fill(O3m__V1__MaskedContexts *msg, uint64_t mask_id, int party, int K,
                          int d, double *values);

/* The active participant's check of one party's MaskedContexts: from the
 * party it asked, under its mask, K x d finite values, each row's l2 norm
 * at most max_norm, the party's bound (o3m_wire_check_row_norms: the
 * orthonormal columns of Q^j keep ||x^j||). */
int o3m_wire_masked_check(const O3m__V1__MaskedContexts *msg, int party, int K, int d,
                          uint64_t mask_id, double max_norm, o3m_err *e);

/* ---- batched masking (MaskBatch) ---- */

/* The most candidate rows, summed over the queries, that one MaskBatch may
 * carry for max_candidates per round and dimension d: O3M_WIRE_MAX_BATCH
 * full rounds, cut down to about O3M_WIRE_BATCH_BYTES of values but never
 * below one full round. Both sides compute it from the federation config:
 * the passive participant sizes its buffers with it and refuses a larger
 * batch, the active participant never sends one. 0 for bad arguments. */
int o3m_wire_mask_batch_rows(int max_candidates, int d);

/* A MaskBatchRequest carries a nonce of this many bytes with aggregation =
 * secure (O3M_SECAGG_NONCE_BYTES). */
#define O3M_WIRE_NONCE_BYTES 32

/* A passive participant's check of a MaskBatchRequest: mask_id equals the
 * mask it holds (O3M_EMASK, also when it holds none), 1..O3M_WIRE_MAX_BATCH
 * queries, each with 1..max_candidates items (O3M_ERANGE naming the query),
 * and at most max_rows items in all (O3M_ERANGE). */
int o3m_wire_mask_batch_check(const O3m__V1__MaskBatchRequest *req, uint64_t mask_id,
                              int max_candidates, int max_rows, o3m_err *e);

/* Fills an initialized MaskBatchReply: n_queries blocks of rows[q] x d values
 * one after the other in values. rows and values stay the caller's and must
 * outlive the packing. */
void o3m_wire_mask_batch_fill(O3m__V1__MaskBatchReply *msg, uint64_t mask_id, int party,
                              int n_queries, uint32_t *rows, int d, double *values);

/* The same with the securely aggregated words instead of values (masked:
 * n_queries blocks of rows[q] x d words; the caller's storage). */
void o3m_wire_mask_batch_fill_masked(O3m__V1__MaskBatchReply *msg, uint64_t mask_id, int party,
                                     int n_queries, uint32_t *rows, int d, uint64_t *masked);

/* The active participant's check of one party's MaskBatchReply: from the
 * party it asked, under its mask, n_queries blocks with K[q] rows each (the
 * items it sent), d columns. With secure = 0 (per-party): sum(K) x d finite
 * values and no masked words, each row's l2 norm at most max_norm, the
 * party's bound (O3M_EINVAL naming the round and the candidate, as
 * o3m_wire_check_row_norms). With secure = 1: sum(K) x d masked words and
 * no values (O3M_EINVAL for a reply of the other form, naming the mode);
 * the words of one party cannot be checked alone (max_norm is unused): the
 * caller checks their decoded sum. */
int o3m_wire_mask_batch_reply_check(const O3m__V1__MaskBatchReply *msg, int party, int n_queries,
                                    const int *K, int d, uint64_t mask_id, int secure,
                                    double max_norm, o3m_err *e);

/* A passive participant's check of a factored MaskBatchRequest (factored
 * set): mask_id as o3m_wire_mask_batch_check, 1..O3M_WIRE_MAX_BATCH
 * queries, none with items (O3M_EINVAL: the factored form carries the
 * items once, in the request's items), and at most max_rows items
 * (O3M_ERANGE). The ids themselves are checked by the caller with
 * o3m_wire_query_ids_check. */
int o3m_wire_mask_batch_factored_check(const O3m__V1__MaskBatchRequest *req, uint64_t mask_id,
                                       int max_rows, o3m_err *e);

/* Fills an initialized MaskBatchReply of a factored batch: n_queries user
 * rows (rows[q] = 1, set here in rows, n_queries entries of caller's
 * storage) then n_items item rows of d values, or their words when masked
 * is not NULL (values is then ignored), and the tables' epochs. */
void o3m_wire_mask_batch_fill_factored(O3m__V1__MaskBatchReply *msg, uint64_t mask_id,
                                       int party, int n_queries, int n_items, uint32_t *rows,
                                       int d, double *values, uint64_t *masked,
                                       uint64_t user_epoch, uint64_t item_epoch);

/* The active participant's check of one party's reply to a factored batch
 * of n_queries queries and n_items items: origin and mask as
 * o3m_wire_mask_batch_reply_check, rows[q] = 1 for each query, cols = d,
 * the form of the mode (masked words when secure, values otherwise) with
 * (n_queries + n_items) x d entries, nonzero epochs (O3M_EINVAL: a party
 * before protocol 6) and, per-party, each row within max_norm. */
int o3m_wire_mask_batch_factored_reply_check(const O3m__V1__MaskBatchReply *msg, int party,
                                             int n_queries, int n_items, int d,
                                             uint64_t mask_id, int secure, double max_norm,
                                             o3m_err *e);

/* ---- size limits of requests ----
 *
 * The largest encoding of a valid message under the config, counted in the
 * costliest form a peer may legally choose (ids of O3M_MAX_ID bytes,
 * repeated numbers unpacked, that is with a tag per element), plus
 * O3M_WIRE_SIZE_SLACK bytes. A server refuses anything larger unread
 * (o3m_rpc_server_config.max_receive_bytes), which gives RESOURCE_EXHAUSTED.
 * Clamped to 1 GiB, the most the RPC layer accepts; 0 for bad arguments. */
#define O3M_WIRE_SIZE_SLACK 1024

/* A RecommendRequest with max_candidates items, arms and own features of
 * the active party's d0 columns. */
int o3m_wire_recommend_max_bytes(int max_candidates, int d0);

/* A MaskBatchRequest as the active participant sends it: up to
 * O3M_WIRE_MAX_BATCH queries, o3m_wire_mask_batch_rows(max_candidates, d)
 * items in all. */
int o3m_wire_mask_batch_max_bytes(int max_candidates, int d);

/* The MaskBatchReply to such a request (the passive participant's largest
 * reply). */
int o3m_wire_mask_batch_reply_max_bytes(int max_candidates, int d);

/* ---- active participant ---- */

/* The active participant's check of a RecommendRequest: 1..max_candidates
 * items, and either no arms or one per item, each below n_arms (n_arms <= 0
 * for the shared model, which then ignores arms and only checks the count). */
int o3m_wire_recommend_check(const O3m__V1__RecommendRequest *req, int max_candidates,
                             int n_arms, o3m_err *e);

#endif
