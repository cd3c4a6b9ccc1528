/* test_authz.c -- who may call what, end to end.
 *
 * Starts the real federation of fed_proc.h (o3m-pmg, o3m-active "ap", two
 * o3m-passive "pp1" and "pp2", mutual TLS on loopback; the config names one
 * client, "client") and calls every RPC of the three daemons - the PMG's
 * Info, GetBlock and ConfirmBlock, each PP's Info, Mask, MaskBatch and
 * Stats, the AP's Info, Recommend, Reward and Stats, and the health check of
 * each - as every identity: the PMG, the AP and each PP (their own party
 * certificates), the configured client, "stranger" (a certificate of the
 * federation CA whose name is in no section), "other-CA" (CN client, signed
 * by another CA) and a caller without a certificate. Each cell is asserted:
 *
 *   OK      allowed: the call reached the handler, which answered it (every
 *           request is valid for its caller, so the answer is OK);
 *   DENIED  PERMISSION_DENIED from the access policy, with a message naming
 *           the identity and the method, before the request was read;
 *   TLS     UNAVAILABLE: the handshake refused the caller.
 *
 * The matrix is printed (stderr). Then: the denied Recommend and Reward
 * calls changed nothing (the AP's counters, read as its operator, moved
 * only by the client's own calls, and every decision a denied caller tried to
 * reward is still open); decision ids are not consecutive and spread over
 * the 64-bit range; the MaskQuery and MaskRequest a PP receives have no
 * field that could carry a decision id, and no decision id appears in a
 * PP's log; and every daemon survived to exit 0 on SIGTERM. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fed_proc.h"
#include "health.pb-c.h"
#include "o3m.pb-c.h"
#include "o3m_rpc.h"
#include "o3m_seal.h"
#include "o3m_wire.h"

/* The callers, columns of the matrix. */
enum { ID_PMG, ID_AP, ID_PP1, ID_PP2, ID_CLIENT, ID_STRANGER, ID_OTHER_CA, ID_NO_CERT, N_IDS };
static const char *const id_label[N_IDS] = {"pmg",    "ap",       "pp1",      "pp2",
                                            "client", "stranger", "other-CA", "no-cert"};
#define BIT(i) (1u << (i))
#define TLS_OK (BIT(ID_PMG) | BIT(ID_AP) | BIT(ID_PP1) | BIT(ID_PP2) | BIT(ID_CLIENT) | \
                BIT(ID_STRANGER))
#define COLUMN (BIT(ID_AP) | BIT(ID_PP1) | BIT(ID_PP2))

/* The RPCs, rows of the matrix. */
typedef enum {
  K_INFO, K_GET_BLOCK, K_CONFIRM, K_HEALTH, K_MASK, K_MASK_BATCH, K_PP_STATS, K_RECOMMEND,
  K_REWARD, K_AP_STATS, K_RELOAD
} kind;

typedef struct row {
  const char *label;
  int target;        /* FED_PMG, FED_AP, FED_PP1, FED_PP2 */
  kind k;
  const char *path;
  unsigned allow;    /* the identities that may call it */
} row;

static const row rows[] = {
    {"pmg  Info", FED_PMG, K_INFO, O3M_PATH_PMG_INFO, COLUMN},
    {"pmg  GetBlock", FED_PMG, K_GET_BLOCK, O3M_PATH_PMG_GET_BLOCK, COLUMN},
    {"pmg  ConfirmBlock", FED_PMG, K_CONFIRM, O3M_PATH_PMG_CONFIRM_BLOCK, COLUMN},
    {"pmg  Health/Check", FED_PMG, K_HEALTH, O3M_RPC_HEALTH_CHECK_PATH, TLS_OK},
    {"pp1  Info", FED_PP1, K_INFO, O3M_PATH_PASSIVE_INFO, BIT(ID_AP) | BIT(ID_PP1)},
    {"pp1  Mask", FED_PP1, K_MASK, O3M_PATH_PASSIVE_MASK, BIT(ID_AP)},
    {"pp1  MaskBatch", FED_PP1, K_MASK_BATCH, O3M_PATH_PASSIVE_MASK_BATCH, BIT(ID_AP)},
    {"pp1  Stats", FED_PP1, K_PP_STATS, O3M_PATH_PASSIVE_STATS, BIT(ID_PP1)},
    {"pp1  Reload", FED_PP1, K_RELOAD, O3M_PATH_PASSIVE_RELOAD, BIT(ID_PP1)},
    {"pp1  Health/Check", FED_PP1, K_HEALTH, O3M_RPC_HEALTH_CHECK_PATH, TLS_OK},
    {"pp2  Info", FED_PP2, K_INFO, O3M_PATH_PASSIVE_INFO, BIT(ID_AP) | BIT(ID_PP2)},
    {"pp2  Mask", FED_PP2, K_MASK, O3M_PATH_PASSIVE_MASK, BIT(ID_AP)},
    {"pp2  MaskBatch", FED_PP2, K_MASK_BATCH, O3M_PATH_PASSIVE_MASK_BATCH, BIT(ID_AP)},
    {"pp2  Stats", FED_PP2, K_PP_STATS, O3M_PATH_PASSIVE_STATS, BIT(ID_PP2)},
    {"pp2  Reload", FED_PP2, K_RELOAD, O3M_PATH_PASSIVE_RELOAD, BIT(ID_PP2)},
    {"pp2  Health/Check", FED_PP2, K_HEALTH, O3M_RPC_HEALTH_CHECK_PATH, TLS_OK},
    {"ap   Info", FED_AP, K_INFO, O3M_PATH_ACTIVE_INFO, TLS_OK & ~BIT(ID_STRANGER)},
    {"ap   Recommend", FED_AP, K_RECOMMEND, O3M_PATH_ACTIVE_RECOMMEND, BIT(ID_CLIENT)},
    {"ap   Reward", FED_AP, K_REWARD, O3M_PATH_ACTIVE_REWARD, BIT(ID_CLIENT)},
    {"ap   Stats", FED_AP, K_AP_STATS, O3M_PATH_ACTIVE_STATS, BIT(ID_CLIENT) | BIT(ID_AP)},
    {"ap   Reload", FED_AP, K_RELOAD, O3M_PATH_ACTIVE_RELOAD, BIT(ID_AP)},
    {"ap   Health/Check", FED_AP, K_HEALTH, O3M_RPC_HEALTH_CHECK_PATH, TLS_OK},
};
#define N_ROWS ((int)(sizeof rows / sizeof rows[0]))

/* Decisions the client opens before the matrix: one per identity, which
 * that identity then tries to reward, plus a few more for the id checks. */
#define N_DECISIONS (N_IDS + 4)

static fed_net fed;
static o3m_rpc_client *clients[N_IDS][FED_N_PARTIES];
static uint64_t mask_id;
static uint64_t decisions[N_DECISIONS];

static void up(void) {
  fed_setup s = {.table_seed = 900, .pp1_users = FED_USERS, .deadline_ms = 2000,
                 .policy = "algo = linucb\nmodel = shared\n", .pending_capacity = 1000,
                 .state_dirs = 0,
                 /* The matrix is about who may call; per-party Mask and MaskBatch
                  * answer a bare request, which secure aggregation refuses
                  * (test_active and test_passive check that). */
                 .aggregation = "per-party"};
  fed_net_prepare(&fed, &s);
  /* A certificate of the federation CA for a name in no section, and the
   * client's name signed by another CA. */
  fed_make_certs("certs", "stranger");
  fed_make_certs("evil", FED_CLIENT);
  /* --keep-mask: a party may fetch its block again, so GetBlock by its own
   * party is an allowed call that the handler answers with the block. */
  static const char *const pmg_args[] = {"--keep-mask", NULL};
  static const char *const ap_args[] = {"--pmg-timeout-s", "30", NULL};
  fed_net_start(&fed, FED_PMG, pmg_args);
  fed_wait_ready(&fed.proc[FED_PMG], 20000);
  fed_net_start(&fed, FED_PP1, NULL);
  fed_net_start(&fed, FED_PP2, NULL);
  fed_net_start(&fed, FED_AP, ap_args);
  for (int p = FED_AP; p <= FED_PP2; p++) fed_wait_ready(&fed.proc[p], 30000);
}

static void down(void) {
  for (int i = 0; i < N_IDS; i++)
    for (int p = 0; p < FED_N_PARTIES; p++) {
      o3m_rpc_client_destroy(clients[i][p]);
      clients[i][p] = NULL;
    }
  for (int p = FED_N_PARTIES - 1; p >= 0; p--) fed_stop(&fed.proc[p], SIGTERM, 5000);
  fed_cleanup();
}

TestSuite(authz, .init = up, .fini = down, .timeout = 240);

/* The client of identity id for daemon p (made once). */
static o3m_rpc_client *client_of(int id, int p) {
  if (!clients[id][p]) {
    char target[64];
    snprintf(target, sizeof target, "127.0.0.1:%d", fed.port[p]);
    const char *server = fed_party_name[p];
    if (id <= ID_PP2)
      clients[id][p] = fed_client(target, "certs", "certs", fed_party_name[id], server, 5000);
    else if (id == ID_CLIENT)
      clients[id][p] = fed_client(target, "certs", "certs", FED_CLIENT, server, 5000);
    else if (id == ID_STRANGER)
      clients[id][p] = fed_client(target, "certs", "certs", "stranger", server, 5000);
    else if (id == ID_OTHER_CA)
      clients[id][p] = fed_client(target, "certs", "evil", FED_CLIENT, server, 5000);
    else
      clients[id][p] = fed_client(target, "certs", "certs", NULL, server, 5000);
  }
  return clients[id][p];
}

/* The party index (column slot) of identity id: its own for a column
 * party, 0 for everyone else (whom the policy refuses before the index is
 * read). */
static int slot_of(int id) {
  return id == ID_AP ? 0 : id == ID_PP1 ? 1 : id == ID_PP2 ? 2 : 0;
}
static const int party_dims[3] = {3, 2, 3};

/* One key pair for every GetBlock of the matrix, drawn at first use and
 * left to the process's exit. */
static o3m_seal_key *seal_key(void) {
  static o3m_seal_key *k;
  if (!k) cr_assert_eq(o3m_seal_key_create(&k), 0);
  return k;
}

/* Storage for any request of the matrix. */
typedef struct request {
  O3m__V1__InfoRequest info;
  O3m__V1__BlockRequest block;
  O3m__V1__BlockReceipt receipt;
  Grpc__Health__V1__HealthCheckRequest health;
  O3m__V1__MaskRequest mask;
  O3m__V1__MaskQuery q[2];
  O3m__V1__MaskQuery *qp[2];
  O3m__V1__MaskBatchRequest batch;
  O3m__V1__StatsRequest stats;
  O3m__V1__ReloadRequest reload;
  O3m__V1__RecommendRequest rec;
  O3m__V1__RewardRequest reward;
} request;

static char *items[3] = {"i1", "i2", "i3"};

/* Builds the request of r for identity id: valid for an allowed caller. */
static const ProtobufCMessage *build(const row *r, int id, request *q,
                                     const ProtobufCMessageDescriptor **reply) {
  switch (r->k) {
  case K_INFO:
    o3m__v1__info_request__init(&q->info);
    *reply = &o3m__v1__node_info__descriptor;
    return &q->info.base;
  case K_GET_BLOCK:
    o3m__v1__block_request__init(&q->block);
    q->block.party = (uint32_t)slot_of(id);
    q->block.dim = FED_D;
    q->block.party_dim = (uint32_t)party_dims[slot_of(id)];
    /* A valid request carries the key the block is sealed to (protocol 3);
     * the matrix only needs the call to reach the handler and succeed. */
    q->block.public_key.data = (uint8_t *)o3m_seal_key_public(seal_key());
    q->block.public_key.len = O3M_SEAL_KEY_BYTES;
    /* And the federation's fingerprint (protocol 5), the PMG's own. */
    static unsigned char fp[O3M_FINGERPRINT_BYTES];
    fed_fingerprint(fed.conf, fp);
    q->block.fingerprint.data = fp;
    q->block.fingerprint.len = sizeof fp;
    *reply = &o3m__v1__block__descriptor;
    return &q->block.base;
  case K_CONFIRM:
    o3m__v1__block_receipt__init(&q->receipt);
    q->receipt.party = (uint32_t)slot_of(id);
    q->receipt.mask_id = mask_id;
    *reply = &o3m__v1__ack__descriptor;
    return &q->receipt.base;
  case K_HEALTH:
    grpc__health__v1__health_check_request__init(&q->health);
    q->health.service = "";
    *reply = &grpc__health__v1__health_check_response__descriptor;
    return &q->health.base;
  case K_MASK:
    o3m__v1__mask_request__init(&q->mask);
    q->mask.mask_id = mask_id;
    q->mask.user = "u1";
    q->mask.n_items = 2;
    q->mask.items = items;
    *reply = &o3m__v1__masked_contexts__descriptor;
    return &q->mask.base;
  case K_MASK_BATCH:
    for (int i = 0; i < 2; i++) {
      o3m__v1__mask_query__init(&q->q[i]);
      q->q[i].user = i ? "u2" : "u1";
      q->q[i].n_items = 3;
      q->q[i].items = items;
      q->qp[i] = &q->q[i];
    }
    o3m__v1__mask_batch_request__init(&q->batch);
    q->batch.mask_id = mask_id;
    q->batch.n_queries = 2;
    q->batch.queries = q->qp;
    *reply = &o3m__v1__mask_batch_reply__descriptor;
    return &q->batch.base;
  case K_PP_STATS:
    o3m__v1__stats_request__init(&q->stats);
    *reply = &o3m__v1__passive_stats__descriptor;
    return &q->stats.base;
  case K_RECOMMEND:
    o3m__v1__recommend_request__init(&q->rec);
    q->rec.user = "u3";
    q->rec.n_items = 3;
    q->rec.items = items;
    *reply = &o3m__v1__recommendation__descriptor;
    return &q->rec.base;
  case K_REWARD:
    o3m__v1__reward_request__init(&q->reward);
    q->reward.decision = decisions[id];
    q->reward.reward = 0.5;
    *reply = &o3m__v1__reward_reply__descriptor;
    return &q->reward.base;
  case K_AP_STATS:
    o3m__v1__stats_request__init(&q->stats);
    *reply = &o3m__v1__active_stats__descriptor;
    return &q->stats.base;
  case K_RELOAD:
    o3m__v1__reload_request__init(&q->reload);
    *reply = &o3m__v1__reload_reply__descriptor;
    return &q->reload.base;
  }
  cr_assert_fail("unknown row kind");
  return NULL;
}

static int call(int id, int p, const char *path, const ProtobufCMessage *req,
                const ProtobufCMessageDescriptor *reply_desc, ProtobufCMessage **reply,
                o3m_err *e) {
  o3m_err_clear(e);
  return o3m_rpc_client_call(client_of(id, p), path, req, reply_desc, reply, e);
}

/* The AP's counters as its operator (its own certificate) reads them: the
 * whole federation's, fan-outs included (a client reads its own only). */
static O3m__V1__ActiveStats ap_stats(void) {
  O3m__V1__StatsRequest req = O3M__V1__STATS_REQUEST__INIT;
  ProtobufCMessage *m;
  o3m_err e;
  int rc = call(ID_AP, FED_AP, O3M_PATH_ACTIVE_STATS, &req.base,
                &o3m__v1__active_stats__descriptor, &m, &e);
  cr_assert_eq(rc, 0, "Stats as the AP's operator: %s", o3m_err_message(&e));
  return *(const O3m__V1__ActiveStats *)m;
}

static uint64_t recommend_as_client(void) {
  O3m__V1__RecommendRequest req = O3M__V1__RECOMMEND_REQUEST__INIT;
  req.user = "u4";
  req.n_items = 3;
  req.items = items;
  ProtobufCMessage *m;
  o3m_err e;
  int rc = call(ID_CLIENT, FED_AP, O3M_PATH_ACTIVE_RECOMMEND, &req.base,
                &o3m__v1__recommendation__descriptor, &m, &e);
  cr_assert_eq(rc, 0, "Recommend as the client: %s", o3m_err_message(&e));
  return ((const O3m__V1__Recommendation *)m)->decision;
}

static int reward_as_client(uint64_t decision, o3m_err *e) {
  O3m__V1__RewardRequest req = O3M__V1__REWARD_REQUEST__INIT;
  req.decision = decision;
  req.reward = 0.25;
  ProtobufCMessage *m;
  return call(ID_CLIENT, FED_AP, O3M_PATH_ACTIVE_REWARD, &req.base,
              &o3m__v1__reward_reply__descriptor, &m, e);
}

/* How a cell came out: "OK", "DENIED", "TLS", or a code name. */
static const char *outcome(int rc) {
  if (rc == 0) return "OK";
  if (rc == O3M_EPERM) return "DENIED";
  if (rc == O3M_EUNAVAILABLE) return "TLS";
  return o3m_errname(rc);
}

Test(authz, every_rpc_of_every_daemon_by_every_identity) {
  /* The mask id, as the AP sees it (Info of a PP answers the AP). */
  {
    O3m__V1__InfoRequest req = O3M__V1__INFO_REQUEST__INIT;
    ProtobufCMessage *m;
    o3m_err e;
    cr_assert_eq(call(ID_AP, FED_PP1, O3M_PATH_PASSIVE_INFO, &req.base,
                      &o3m__v1__node_info__descriptor, &m, &e),
                 0, "%s", o3m_err_message(&e));
    mask_id = ((const O3m__V1__NodeInfo *)m)->mask_id;
    cr_assert_neq(mask_id, 0);
  }
  for (int i = 0; i < N_DECISIONS; i++) decisions[i] = recommend_as_client();
  const O3m__V1__ActiveStats before = ap_stats();

  /* The matrix. */
  static char cell[N_ROWS][N_IDS][16];
  int failures = 0;
  char failure_log[8192] = "";
  for (int r = 0; r < N_ROWS; r++) {
    for (int id = 0; id < N_IDS; id++) {
      const row *rw = &rows[r];
      request q;
      const ProtobufCMessageDescriptor *rd;
      const ProtobufCMessage *req = build(rw, id, &q, &rd);
      ProtobufCMessage *m = NULL;
      o3m_err e;
      int rc = call(id, rw->target, rw->path, req, rd, &m, &e);
      snprintf(cell[r][id], sizeof cell[r][id], "%s", outcome(rc));
      const char *want;
      int ok;
      if (!(TLS_OK & BIT(id))) {
        want = "TLS";
        ok = rc == O3M_EUNAVAILABLE;
      } else if (rw->allow & BIT(id)) {
        want = "OK";
        ok = rc == 0;
      } else {
        /* Refused by the policy, before the request was read: the layer's
         * message names the caller and the method. */
        char who[96];
        snprintf(who, sizeof who, "certificate '%s' may not call %s",
                 id == ID_CLIENT ? FED_CLIENT : id_label[id], rw->path);
        want = "DENIED";
        ok = rc == O3M_EPERM && strstr(e.msg, who) != NULL;
      }
      if (!ok) {
        failures++;
        size_t n = strlen(failure_log);
        snprintf(failure_log + n, sizeof failure_log - n, "  %s as %s: want %s, got %s: %s\n",
                 rw->label, id_label[id], want, o3m_errname(rc), o3m_err_message(&e));
      }
    }
  }

  /* Print the matrix for the report. */
  fprintf(stderr, "\nauthorization matrix (OK = answered by the handler, DENIED = "
                  "PERMISSION_DENIED by the access policy, TLS = refused in the handshake)\n");
  fprintf(stderr, "%-19s", "RPC \\ caller");
  for (int id = 0; id < N_IDS; id++) fprintf(stderr, " %-9s", id_label[id]);
  fprintf(stderr, "\n");
  for (int r = 0; r < N_ROWS; r++) {
    fprintf(stderr, "%-19s", rows[r].label);
    for (int id = 0; id < N_IDS; id++) fprintf(stderr, " %-9s", cell[r][id]);
    fprintf(stderr, "\n");
  }
  cr_assert_eq(failures, 0, "%d cells differ from the policy:\n%s", failures, failure_log);

  /* The denied Recommend and Reward calls changed nothing: the counters
   * moved by the client's own Recommend (one round) and Reward (one
   * update, one decision closed), nothing else; no fan-out for a refused
   * Recommend. */
  const O3m__V1__ActiveStats after = ap_stats();
  cr_assert_eq(after.rounds, before.rounds + 1, "rounds %llu -> %llu",
               (unsigned long long)before.rounds, (unsigned long long)after.rounds);
  cr_assert_eq(after.updates, before.updates + 1);
  cr_assert_eq(after.pending, before.pending);
  cr_assert_eq(after.expired, before.expired);
  cr_assert_eq(after.fanouts, before.fanouts + 1);
  /* Every decision that a refused caller tried to reward is still open: the
   * client rewards it now. The client's own was rewarded in the matrix. */
  for (int id = 0; id < N_IDS; id++) {
    o3m_err e;
    int rc = reward_as_client(decisions[id], &e);
    if (id == ID_CLIENT)
      cr_assert_eq(rc, O3M_EEXISTS, "%s", o3m_err_message(&e));
    else
      cr_assert_eq(rc, 0, "the decision %s tried to reward: %s: %s", id_label[id],
                   o3m_errname(rc), o3m_err_message(&e));
  }

  /* Every daemon is still up and stops cleanly. */
  for (int i = 0; i < N_IDS; i++)
    for (int p = 0; p < FED_N_PARTIES; p++) {
      o3m_rpc_client_destroy(clients[i][p]);
      clients[i][p] = NULL;
    }
  for (int p = FED_N_PARTIES - 1; p >= 0; p--)
    cr_assert_eq(fed_stop(&fed.proc[p], SIGTERM, 5000), 0, "%s:\n%s", fed_party_name[p],
                 fed_log(&fed.proc[p]));
  /* Refusals are logged, naming the caller. */
  cr_assert(strstr(fed_log(&fed.proc[FED_AP]), "refused /o3m.v1.Active/"), "%s",
            fed_log(&fed.proc[FED_AP]));
}

/* Decision ids were consecutive from a random base, so a party that saw one
 * (or was sent the next one, in MaskQuery.round) could name any other. */
Test(authz, decision_ids_are_unpredictable) {
  uint64_t id[16];
  for (int i = 0; i < 16; i++) id[i] = recommend_as_client();
  int top_bits_differ = 0;
  for (int i = 0; i < 16; i++) {
    cr_assert_neq(id[i], 0);
    for (int j = 0; j < i; j++) cr_assert_neq(id[i], id[j]);
    if (i > 0) {
      /* Random 64-bit ids are within 2^32 of each other with probability
       * 2^-31; consecutive or nearby ids always are. */
      uint64_t diff = id[i] - id[i - 1];
      cr_assert(diff > (1ull << 32) && diff < UINT64_MAX - (1ull << 32),
                "decision %llu followed %llu", (unsigned long long)id[i],
                (unsigned long long)id[i - 1]);
      top_bits_differ |= (id[i] >> 48) != (id[0] >> 48);
    }
  }
  cr_assert(top_bits_differ, "16 ids share their top 16 bits");
  /* An id next to a real one is unknown. */
  o3m_err e;
  cr_assert_eq(reward_as_client(id[15] + 1, &e), O3M_ENOTFOUND, "%s", o3m_err_message(&e));
  cr_assert_eq(reward_as_client(id[15] - 1, &e), O3M_ENOTFOUND, "%s", o3m_err_message(&e));

  /* Nothing a PP receives can carry one: MaskQuery and MaskRequest have no
   * round field and no 64-bit field but the mask id ... */
  const ProtobufCMessageDescriptor *msgs[] = {&o3m__v1__mask_query__descriptor,
                                              &o3m__v1__mask_request__descriptor,
                                              &o3m__v1__mask_batch_request__descriptor};
  for (size_t i = 0; i < sizeof msgs / sizeof msgs[0]; i++) {
    const ProtobufCMessageDescriptor *d = msgs[i];
    cr_assert_null(protobuf_c_message_descriptor_get_field_by_name(d, "round"), "%s.round",
                   d->name);
    for (unsigned f = 0; f < d->n_fields; f++) {
      const ProtobufCFieldDescriptor *fd = &d->fields[f];
      int wide = fd->type == PROTOBUF_C_TYPE_FIXED64 || fd->type == PROTOBUF_C_TYPE_UINT64 ||
                 fd->type == PROTOBUF_C_TYPE_INT64 || fd->type == PROTOBUF_C_TYPE_SFIXED64 ||
                 fd->type == PROTOBUF_C_TYPE_SINT64;
      cr_assert(!wide || strcmp(fd->name, "mask_id") == 0, "%s.%s could carry a decision id",
                d->name, fd->name);
    }
  }
  /* ... and no decision id shows up in a PP's log. */
  for (int p = FED_PP1; p <= FED_PP2; p++) {
    cr_assert_eq(fed_stop(&fed.proc[p], SIGTERM, 5000), 0);
    const char *log = fed_log(&fed.proc[p]);
    for (int i = 0; i < 16; i++) {
      char dec[32], hex[32];
      snprintf(dec, sizeof dec, "%llu", (unsigned long long)id[i]);
      snprintf(hex, sizeof hex, "%016llx", (unsigned long long)id[i]);
      cr_assert(!strstr(log, dec) && !strstr(log, hex), "%s logs decision %s:\n%s",
                fed_party_name[p], dec, log);
    }
  }
}
