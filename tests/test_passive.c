/* test_passive.c -- the o3m-passive daemon, started as a real process
 * together with a real o3m-pmg.
 *
 * The federation: pmg, active "shop" (dims 3, never started: the test calls
 * as the shop with its certificate) and passive "bank" (dims 3: two user
 * columns and one item column), max_candidates 4. The pmg runs with
 * --mask-seed-insecure, so the test recomputes Q with o3m_mask_generate and
 * the same seed and checks every masked value against Q^bank x^bank. The
 * passive daemon is started before the pmg, so its retry path runs in every
 * test. fed_cleanup (the suite's .fini) kills what is left. */
#include <criterion/criterion.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fed_proc.h"
#include "health.pb-c.h"
#include "o3m.pb-c.h"
#include "o3m_mask.h"
#include "o3m_rng.h"
#include "o3m_rpc.h"
#include "o3m_wire.h"
#include "o3m_secagg.h"

/* The norm bound the reply checks apply: the config default. */
#define NB O3M_CONFIG_DEFAULT_MAX_NORM

#define D 6
#define BANK 1 /* party index of the bank; its columns are 3..5 */
#define COL0 3
#define DJ 3
#define MAXC 4
#define SEED 42

TestSuite(passive, .fini = fed_cleanup, .timeout = 30);

/* A value that must never show up in a log. */
#define SECRET_VALUE "0.123456789"

/* [federation] aggregation: the per-party protocol, whose parts these
 * tests check value by value, unless a test sets "secure". */
static const char *aggregation = "per-party";

typedef struct fed {
  fed_proc pmg, bank;
  char target[64]; /* the bank */
  char config[512];
  char pmg_config[512]; /* the config the pmg runs with */
  char pmg_party[64];   /* and its party name there */
  int pmg_port, bank_port;
} fed;

/* Writes a federation config to file, the pmg's section named pmg and
 * holding certificate pmg, the active party's named shop and holding
 * certificate shop; returns the path (a fed_path slot). */
static const char *write_config(const fed *f, const char *file, const char *pmg,
                                const char *shop, int shop_port) {
  char text[2048];
  snprintf(text, sizeof text,
           "[federation]\nd = %d\nca = certs/ca.pem\naggregation = %s\n"
           "[policy]\nalgo = linucb\nmodel = shared\nmax_candidates = %d\n"
           "[party %s]\nrole = pmg\naddress = 127.0.0.1:%d\n"
           "cert = certs/%s.pem\nkey = certs/%s.key\n"
           "[party %s]\nrole = active\naddress = 127.0.0.1:%d\ndims = 3\n"
           "cert = certs/%s.pem\nkey = certs/%s.key\n"
           "[party bank]\nrole = passive\naddress = 127.0.0.1:%d\ndims = %d\n"
           "user_table = users.csv\nitem_table = items.csv\n"
           "cert = certs/bank.pem\nkey = certs/bank.key\n",
           D, aggregation, MAXC, pmg, f->pmg_port, pmg, pmg, shop, shop_port, shop, shop, f->bank_port, DJ);
  return fed_write(file, text);
}

/* Certificates and the config fed.conf. The pmg serves as the party
 * pmg_party: normally "pmg", with fed.conf; another name (an impostor with
 * its own federation certificate, as a daemon only starts with a
 * certificate issued to its party name) swaps that party's name with the
 * pmg's in a config of its own, rogue.conf, at the same pmg address. */
static void setup_fed(fed *f, const char *pmg_party) {
  fed_make_certs("certs", "pmg shop bank mallory");
  fed_make_certs("evil", "shop");
  fed_write("users.csv", "user_id,a,b\nu0,1.5,-2\nu1," SECRET_VALUE ",4\nu2,-3,0.5\n");
  fed_write("items.csv", "item_id,p\ni0,10\ni1,-7.5\n");
  f->pmg_port = fed_free_port();
  f->bank_port = fed_free_port();
  int shop_port = fed_free_port();
  snprintf(f->config, sizeof f->config, "%s",
           write_config(f, "fed.conf", "pmg", "shop", shop_port));
  snprintf(f->pmg_party, sizeof f->pmg_party, "%s", pmg_party);
  if (strcmp(pmg_party, "pmg") == 0)
    snprintf(f->pmg_config, sizeof f->pmg_config, "%s", f->config);
  else
    snprintf(f->pmg_config, sizeof f->pmg_config, "%s",
             write_config(f, "rogue.conf", pmg_party, "pmg", shop_port));
  snprintf(f->target, sizeof f->target, "127.0.0.1:%d", f->bank_port);
}

static void spawn_bank(fed *f, const char *timeout_s) {
  const char *args[] = {"--config", f->config, "--party", "bank", "--pmg-timeout-s", timeout_s,
                        NULL};
  fed_spawn(&f->bank, "bank", "o3m-passive", args);
}

static void spawn_pmg(fed *f) {
  const char *args[] = {"--config", f->pmg_config, "--party", f->pmg_party,
                        "--mask-seed-insecure", "42", NULL};
  fed_spawn(&f->pmg, "pmg", "o3m-pmg", args);
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* The whole federation minus the AP: the bank first, the pmg 300 ms later. */
static void start(fed *f) {
  setup_fed(f, "pmg");
  spawn_bank(f, "20");
  sleep_ms(300);
  spawn_pmg(f);
  fed_wait_ready(&f->pmg, 10000);
  int port = fed_wait_ready(&f->bank, 15000);
  cr_assert_eq(port, f->bank_port);
}

static o3m_rpc_client *as(const fed *f, const char *name) {
  return fed_client(f->target, "certs", "certs", name, "bank", 5000);
}

/* The mask the pmg drew from SEED. */
static o3m_mask *seeded_mask(void) {
  o3m_rng *rng;
  o3m_mask *m;
  cr_assert_eq(o3m_rng_create_seeded_insecure(&rng, SEED), 0);
  cr_assert_eq(o3m_mask_generate(&m, D, rng), 0);
  o3m_rng_destroy(rng);
  return m;
}

/* Mask as the client; on success copies the K x D values into out. */
static int mask(o3m_rpc_client *c, uint64_t mask_id, const char *user, const char *const *items,
                int K, double *out, o3m_err *e) {
  O3m__V1__MaskRequest req = O3M__V1__MASK_REQUEST__INIT;
  req.mask_id = mask_id;
  req.user = (char *)user;
  req.n_items = (size_t)K;
  req.items = (char **)items;
  ProtobufCMessage *m;
  o3m_err_clear(e);
  int rc = o3m_rpc_client_call(c, O3M_PATH_PASSIVE_MASK, &req.base,
                               &o3m__v1__masked_contexts__descriptor, &m, e);
  if (rc < 0) return rc;
  const O3m__V1__MaskedContexts *r = (const O3m__V1__MaskedContexts *)m;
  int crc = o3m_wire_masked_check(r, BANK, K, D, mask_id, NB, e);
  cr_assert_eq(crc, 0, "reply: %s", o3m_err_message(e));
  if (out) memcpy(out, r->values, sizeof(double) * (size_t)K * D);
  return 0;
}

/* The party's counters into *out, which is an empty message on failure (so
 * that no caller reads uninitialized counters). */
static int stats(o3m_rpc_client *c, O3m__V1__PassiveStats *out, o3m_err *e) {
  O3m__V1__StatsRequest req = O3M__V1__STATS_REQUEST__INIT;
  o3m__v1__passive_stats__init(out);
  ProtobufCMessage *m;
  o3m_err_clear(e);
  int rc = o3m_rpc_client_call(c, "/o3m.v1.Passive/Stats", &req.base,
                               &o3m__v1__passive_stats__descriptor, &m, e);
  if (rc == 0) *out = *(const O3m__V1__PassiveStats *)m;
  return rc;
}

static uint64_t info_mask_id(o3m_rpc_client *c) {
  O3m__V1__InfoRequest req = O3M__V1__INFO_REQUEST__INIT;
  ProtobufCMessage *m;
  o3m_err e;
  o3m_err_clear(&e);
  int rc = o3m_rpc_client_call(c, O3M_PATH_PASSIVE_INFO, &req.base,
                               &o3m__v1__node_info__descriptor, &m, &e);
  cr_assert_eq(rc, 0, "Info: %s", o3m_err_message(&e));
  const O3m__V1__NodeInfo *ni = (const O3m__V1__NodeInfo *)m;
  cr_assert_eq(ni->role, O3M__V1__ROLE__ROLE_PASSIVE);
  cr_assert_eq(ni->party, BANK);
  cr_assert_eq(ni->dim, D);
  cr_assert_str_eq(ni->name, "bank");
  return ni->mask_id;
}

static int all_equal(const double *a, const double *b, int n) {
  return memcmp(a, b, sizeof(double) * (size_t)n) == 0;
}

Test(passive, masks_known_rows_exactly_and_checks_the_request) {
  fed f;
  start(&f);
  o3m_mask *m = seeded_mask();
  const double *Q = o3m_mask_matrix(m);
  uint64_t id = o3m_mask_id(m);
  o3m_rpc_client *shop = as(&f, "shop");
  cr_assert_eq(info_mask_id(shop), id, "the bank holds another mask than the seeded one");

  const char *items[] = {"i0", "i1", "i0"};
  double y[3 * D];
  o3m_err e;
  cr_assert_eq(mask(shop, id, "u1", items, 3, y, &e), 0, "%s", o3m_err_message(&e));
  /* x^bank of (u1, item): [0.123456789, 4, price]. */
  const double price[3] = {10, -7.5, 10};
  for (int k = 0; k < 3; k++) {
    double x[DJ] = {0.123456789, 4, price[k]};
    for (int r = 0; r < D; r++) {
      double want = 0;
      for (int c = 0; c < DJ; c++) want += Q[r * D + COL0 + c] * x[c];
      cr_assert(fabs(y[k * D + r] - want) <= 1e-12 * (1 + fabs(want)),
                "row %d, component %d: %.17g, want %.17g", k, r, y[k * D + r], want);
    }
  }

  /* A vector masked under another mask must never be summed. */
  cr_assert_eq(mask(shop, id ^ 1, "u1", items, 3, NULL, &e), O3M_EMASK, "%s", o3m_err_message(&e));
  cr_assert_eq(mask(shop, 0, "u1", items, 3, NULL, &e), O3M_EMASK, "%s", o3m_err_message(&e));
  /* K over max_candidates; the shared wire check calls it RANGE. */
  const char *five[] = {"i0", "i1", "i0", "i1", "i0"};
  cr_assert_eq(mask(shop, id, "u1", five, MAXC + 1, NULL, &e), O3M_ERANGE, "%s",
               o3m_err_message(&e));
  cr_assert_eq(mask(shop, id, "u1", five, MAXC, NULL, &e), 0, "%s", o3m_err_message(&e));
  cr_assert_eq(mask(shop, id, "u1", five, 0, NULL, &e), O3M_ERANGE, "%s", o3m_err_message(&e));
  cr_assert_eq(mask(shop, id, "", items, 3, NULL, &e), O3M_EINVAL, "%s", o3m_err_message(&e));
  const char *empty_item[] = {"i0", ""};
  cr_assert_eq(mask(shop, id, "u1", empty_item, 2, NULL, &e), O3M_EINVAL, "%s",
               o3m_err_message(&e));

  Grpc__Health__V1__HealthCheckRequest hreq = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
  hreq.service = "o3m.v1.Passive";
  ProtobufCMessage *hm;
  cr_assert_eq(o3m_rpc_client_call(shop, O3M_RPC_HEALTH_CHECK_PATH, &hreq.base,
                                   &grpc__health__v1__health_check_response__descriptor, &hm, &e),
               0, "%s", o3m_err_message(&e));
  cr_assert_eq(((Grpc__Health__V1__HealthCheckResponse *)hm)->status,
               GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING);
  o3m_rpc_client_destroy(shop);
  o3m_mask_destroy(m);

  cr_assert_eq(fed_stop(&f.bank, SIGTERM, 5000), 0, "%s", fed_log(&f.bank));
  const char *log = fed_log(&f.bank);
  cr_assert(strstr(log, "stopped: 8 requests, 2 answered"), "%s", log);
  cr_assert(strstr(log, "installed the block of mask"), "%s", log);
  cr_assert(strstr(log, "retrying"), "the pmg came late, yet no retry was logged:\n%s", log);
  cr_assert_null(strstr(log, SECRET_VALUE), "a feature value reached the log:\n%s", log);
  cr_assert_null(strstr(log, "u1"), "a user id reached the log:\n%s", log);
  cr_assert_neq(access(f.bank.ready, F_OK), 0, "the ready file outlived the daemon");
  cr_assert_eq(fed_stop(&f.pmg, SIGTERM, 5000), 0);
  /* Both parties confirmed? Only the bank did (the shop never ran). */
  cr_assert(strstr(fed_log(&f.pmg), "party 1 (bank) confirmed"), "%s", fed_log(&f.pmg));
}

/* MaskBatch as the shop: n queries of K[q] items each; on success checks
 * the reply and copies the sum(K) x D values into out. */
static int mask_batch(o3m_rpc_client *c, uint64_t mask_id, int n, const char *const *users,
                      const char *const *const *items, const int *K, double *out, o3m_err *e) {
  O3m__V1__MaskQuery q[O3M_WIRE_MAX_BATCH + 1];
  O3m__V1__MaskQuery *qp[O3M_WIRE_MAX_BATCH + 1];
  for (int i = 0; i < n; i++) {
    o3m__v1__mask_query__init(&q[i]);
    q[i].user = (char *)users[i];
    q[i].n_items = (size_t)K[i];
    q[i].items = (char **)items[i];
    qp[i] = &q[i];
  }
  O3m__V1__MaskBatchRequest req = O3M__V1__MASK_BATCH_REQUEST__INIT;
  req.mask_id = mask_id;
  req.n_queries = (size_t)n;
  req.queries = qp;
  ProtobufCMessage *m;
  o3m_err_clear(e);
  int rc = o3m_rpc_client_call(c, O3M_PATH_PASSIVE_MASK_BATCH, &req.base,
                               &o3m__v1__mask_batch_reply__descriptor, &m, e);
  if (rc < 0) return rc;
  const O3m__V1__MaskBatchReply *r = (const O3m__V1__MaskBatchReply *)m;
  int crc = o3m_wire_mask_batch_reply_check(r, BANK, n, K, D, mask_id, 0, NB, e);
  cr_assert_eq(crc, 0, "reply: %s", o3m_err_message(e));
  if (out) memcpy(out, r->values, sizeof(double) * r->n_values);
  return 0;
}

/* A batch answers each query exactly (bit for bit) as Mask answers it on
 * its own, refuses as a whole, and counts one request per query. */
Test(passive, mask_batch_answers_each_query_as_mask_does) {
  fed f;
  start(&f);
  o3m_rpc_client *shop = as(&f, "shop"), *bank = as(&f, "bank");
  uint64_t id = info_mask_id(shop);
  o3m_err e;
  O3m__V1__PassiveStats st0, st1;
  cr_assert_eq(stats(bank, &st0, &e), 0, "%s", o3m_err_message(&e));

  const char *i0[] = {"i0", "i1", "i0"}, *i1[] = {"i9", "i0"}, *i2[] = {"i1"};
  const char *const *items[] = {i0, i1, i2};
  const char *users[] = {"u1", "ghost-1", "u0"};
  int K[] = {3, 2, 1};
  double batch[6 * D], one[3 * D];
  cr_assert_eq(mask_batch(shop, id, 3, users, items, K, batch, &e), 0, "%s", o3m_err_message(&e));
  int off = 0;
  for (int q = 0; q < 3; q++) {
    cr_assert_eq(mask(shop, id, users[q], items[q], K[q], one, &e), 0, "%s", o3m_err_message(&e));
    cr_assert(all_equal(batch + off * D, one, K[q] * D), "query %d differs from its Mask", q);
    off += K[q];
  }
  cr_assert_eq(stats(bank, &st1, &e), 0, "%s", o3m_err_message(&e));
  cr_assert_eq(st1.requests - st0.requests, 6, "a batch of 3 and 3 Mask calls");
  cr_assert_eq(st1.lookups - st0.lookups, 6);
  cr_assert_eq(st1.unknown_users - st0.unknown_users, 2);
  cr_assert_eq(st1.errors, st0.errors);

  /* The whole batch is refused: another mask, a round over max_candidates,
   * an empty item (named by query), too many queries, another caller. */
  cr_assert_eq(mask_batch(shop, id ^ 1, 3, users, items, K, NULL, &e), O3M_EMASK, "%s",
               o3m_err_message(&e));
  const char *five[] = {"i0", "i1", "i0", "i1", "i0"};
  const char *const *big[] = {i0, five};
  int Kbig[] = {3, MAXC + 1};
  cr_assert_eq(mask_batch(shop, id, 2, users, big, Kbig, NULL, &e), O3M_ERANGE, "%s",
               o3m_err_message(&e));
  cr_assert(strstr(e.msg, "query 1"), "%s", e.msg);
  const char *empty[] = {"i0", ""};
  const char *const *with_empty[] = {i0, empty};
  int Ke[] = {3, 2};
  cr_assert_eq(mask_batch(shop, id, 2, users, with_empty, Ke, NULL, &e), O3M_EINVAL, "%s",
               o3m_err_message(&e));
  cr_assert(strstr(e.msg, "query 1: items[1] is empty"), "%s", e.msg);
  /* The largest batch passes; one more query does not. */
  const char *many_users[O3M_WIRE_MAX_BATCH + 1];
  const char *const *many_items[O3M_WIRE_MAX_BATCH + 1];
  int Km[O3M_WIRE_MAX_BATCH + 1];
  for (int q = 0; q <= O3M_WIRE_MAX_BATCH; q++) {
    many_users[q] = q % 2 ? "u2" : "ghost-3";
    many_items[q] = five;
    Km[q] = MAXC;
  }
  static double all[O3M_WIRE_MAX_BATCH * MAXC * D];
  cr_assert_eq(mask_batch(shop, id, O3M_WIRE_MAX_BATCH, many_users, many_items, Km, all, &e), 0,
               "%s", o3m_err_message(&e));
  cr_assert(all_equal(all, all + 2 * MAXC * D, MAXC * D), "the same query gave two answers");
  cr_assert_eq(mask_batch(shop, id, O3M_WIRE_MAX_BATCH + 1, many_users, many_items, Km, NULL, &e),
               O3M_ERANGE, "%s", o3m_err_message(&e));
  cr_assert_eq(mask_batch(bank, id, 3, users, items, K, NULL, &e), O3M_EPERM, "%s",
               o3m_err_message(&e));
  o3m_rpc_client_destroy(shop);
  o3m_rpc_client_destroy(bank);
  cr_assert_eq(fed_stop(&f.bank, SIGTERM, 5000), 0, "%s", fed_log(&f.bank));
  cr_assert_null(strstr(fed_log(&f.bank), "ghost"), "%s", fed_log(&f.bank));
  cr_assert_null(strstr(fed_log(&f.bank), SECRET_VALUE), "%s", fed_log(&f.bank));
}

Test(passive, unknown_users_get_stable_distinct_dummies_and_are_counted) {
  fed f;
  start(&f);
  o3m_rpc_client *shop = as(&f, "shop"), *bank = as(&f, "bank");
  uint64_t id = info_mask_id(shop);
  o3m_err e;
  O3m__V1__PassiveStats st0, st1;
  cr_assert_eq(stats(bank, &st0, &e), 0, "%s", o3m_err_message(&e));

  const char *items[] = {"i0", "i9"};
  double a[2 * D], b[2 * D], c[2 * D], known[2 * D];
  cr_assert_eq(mask(shop, id, "ghost-1", items, 2, a, &e), 0, "%s", o3m_err_message(&e));
  cr_assert_eq(mask(shop, id, "u0", items, 2, known, &e), 0, "%s", o3m_err_message(&e));
  cr_assert_eq(mask(shop, id, "ghost-1", items, 2, b, &e), 0, "%s", o3m_err_message(&e));
  cr_assert_eq(mask(shop, id, "ghost-2", items, 2, c, &e), 0, "%s", o3m_err_message(&e));
  double norm = 0;
  for (int i = 0; i < D; i++) norm += a[i] * a[i];
  cr_assert_gt(norm, 1e-6, "the unknown user's vector is zero");
  cr_assert(all_equal(a, b, 2 * D), "one unknown user, two different vectors");
  for (int i = 0; i < D; i++)
    cr_assert_neq(a[i], c[i], "two unknown users share component %d", i);
  /* The unknown item i9 has its own stable dummy whoever asks. */
  for (int i = 0; i < D; i++) cr_assert_neq(a[D + i], a[i]);

  cr_assert_eq(stats(bank, &st1, &e), 0, "%s", o3m_err_message(&e));
  cr_assert_eq(st1.unknown_users - st0.unknown_users, 3);
  cr_assert_eq(st1.unknown_items - st0.unknown_items, 4);
  cr_assert_eq(st1.item_lookups - st0.item_lookups, 8);
  cr_assert_eq(st1.lookups - st0.lookups, 4);
  cr_assert_eq(st1.requests - st0.requests, 4);
  cr_assert_eq(st1.errors, st0.errors);
  /* The AP may not read the counters: around one Mask call they would tell
   * it whether the bank knows the user. */
  cr_assert_eq(stats(shop, &st1, &e), O3M_EPERM, "%s", o3m_err_message(&e));
  o3m_rpc_client_destroy(shop);
  o3m_rpc_client_destroy(bank);
  cr_assert_eq(fed_stop(&f.bank, SIGTERM, 5000), 0, "%s", fed_log(&f.bank));
  cr_assert_null(strstr(fed_log(&f.bank), "ghost"), "%s", fed_log(&f.bank));
}

Test(passive, only_the_active_party_is_answered) {
  fed f;
  start(&f);
  o3m_rpc_client *shop = as(&f, "shop");
  uint64_t id = info_mask_id(shop);
  o3m_rpc_client_destroy(shop);
  const char *items[] = {"i0"};
  o3m_err e;
  o3m_rpc_client *c = as(&f, "bank");
  cr_assert_eq(mask(c, id, "u0", items, 1, NULL, &e), O3M_EPERM, "%s", o3m_err_message(&e));
  o3m_rpc_client_destroy(c);
  c = as(&f, "mallory");
  cr_assert_eq(mask(c, id, "u0", items, 1, NULL, &e), O3M_EPERM, "%s", o3m_err_message(&e));
  cr_assert(strstr(e.msg, "'mallory' may not call /o3m.v1.Passive/Mask"), "%s", e.msg);
  cr_assert(strstr(e.msg, "answered only to the active party"), "%s", e.msg);
  o3m_rpc_client_destroy(c);
  c = fed_client(f.target, "certs", "certs", NULL, "bank", 5000);
  cr_assert_eq(mask(c, id, "u0", items, 1, NULL, &e), O3M_EUNAVAILABLE, "%s",
               o3m_err_message(&e));
  o3m_rpc_client_destroy(c);
  /* CN shop, signed by another CA. */
  c = fed_client(f.target, "certs", "evil", "shop", "bank", 5000);
  int rc = mask(c, id, "u0", items, 1, NULL, &e);
  cr_assert(rc == O3M_EUNAVAILABLE || rc == O3M_EPERM, "outsider got %s: %s", o3m_errname(rc),
            o3m_err_message(&e));
  o3m_rpc_client_destroy(c);
  c = fed_client(f.target, NULL, NULL, NULL, NULL, 5000);
  cr_assert_eq(mask(c, id, "u0", items, 1, NULL, &e), O3M_EUNAVAILABLE, "%s",
               o3m_err_message(&e));
  o3m_rpc_client_destroy(c);

  O3m__V1__PassiveStats st;
  c = as(&f, "bank");
  cr_assert_eq(stats(c, &st, &e), 0, "%s", o3m_err_message(&e));
  /* The access policy refuses them before the service sees a request. */
  cr_assert_eq(st.requests, 0, "refused calls reached the handler");
  cr_assert_eq(st.errors, 0);
  cr_assert_eq(st.lookups, 0);
  o3m_rpc_client_destroy(c);
  cr_assert_eq(fed_stop(&f.bank, SIGTERM, 5000), 0);
  cr_assert(strstr(fed_log(&f.bank), "refused /o3m.v1.Passive/Mask to certificate 'bank'"), "%s",
            fed_log(&f.bank));
}

Test(passive, gives_up_without_a_mask_generator_and_stops_cleanly_while_waiting) {
  fed f;
  setup_fed(&f, "pmg");
  spawn_bank(&f, "1");
  int rc = fed_wait_exit(&f.bank, 6000);
  cr_assert_eq(rc, 1, "exit %d:\n%s", rc, fed_log(&f.bank));
  cr_assert(strstr(fed_log(&f.bank), "gave up after 1 s"), "%s", fed_log(&f.bank));

  spawn_bank(&f, "20");
  sleep_ms(500);
  cr_assert_eq(fed_stop(&f.bank, SIGTERM, 5000), 0, "%s", fed_log(&f.bank));
  cr_assert(strstr(fed_log(&f.bank), "stopped before the block was installed"), "%s",
            fed_log(&f.bank));

  /* Start-up errors name the key. */
  fed_proc p;
  const char *a1[] = {"--config", f.config, "--party", "shop", NULL};
  fed_spawn(&p, "wrong-role", "o3m-passive", a1);
  cr_assert_eq(fed_wait_exit(&p, 5000), 1);
  cr_assert(strstr(fed_log(&p), "[party shop] has role active"), "%s", fed_log(&p));
  fed_write("users.csv", "user_id,a\nu0,1\n");
  const char *a2[] = {"--config", f.config, "--party", "bank", NULL};
  fed_spawn(&p, "bad-table", "o3m-passive", a2);
  cr_assert_eq(fed_wait_exit(&p, 5000), 1);
  cr_assert(strstr(fed_log(&p), "user_table/item_table") && strstr(fed_log(&p), "dims are 3"),
            "%s", fed_log(&p));
}

/* The passive party pins the mask generator by name: a server holding
 * another federation certificate (here the active party's, which would love
 * to hand out a Q it knows) does not get to install a block. */
Test(passive, refuses_a_mask_generator_with_another_partys_certificate) {
  fed f;
  setup_fed(&f, "shop");
  spawn_pmg(&f);
  fed_wait_ready(&f.pmg, 10000);
  spawn_bank(&f, "2");
  int rc = fed_wait_exit(&f.bank, 8000);
  cr_assert_eq(rc, 1, "exit %d:\n%s", rc, fed_log(&f.bank));
  cr_assert(strstr(fed_log(&f.bank), "gave up"), "%s", fed_log(&f.bank));
  cr_assert_null(strstr(fed_log(&f.pmg), "served the block"), "%s", fed_log(&f.pmg));
}

/* Secure aggregation with one passive party: it says at start that its part
 * cannot hide, refuses Mask and a MaskBatch without a nonce (no downgrade),
 * and answers a nonce with its part in fixed point, which decodes to Q^j x^j
 * within 2^-(s+1): with nobody to pair with, the AP learns it exactly. */
Test(passive, secure_aggregation_with_one_party_warns_and_refuses_per_party_requests) {
  aggregation = "secure";
  fed f;
  start(&f);
  cr_assert(strstr(fed_log(&f.bank), "one passive party: its part cannot hide among others; the "
                                     "AP learns it exactly"), "%s", fed_log(&f.bank));
  o3m_rpc_client *shop = as(&f, "shop");
  uint64_t id = info_mask_id(shop);
  o3m_err e;
  const char *items[] = {"i0", "i1"};
  cr_assert_eq(mask(shop, id, "u1", items, 2, NULL, &e), O3M_ESTATE);
  cr_assert(strstr(o3m_err_message(&e), "use MaskBatch"), "%s", o3m_err_message(&e));
  O3m__V1__MaskQuery q = O3M__V1__MASK_QUERY__INIT, *qp = &q;
  q.user = "u1";
  q.n_items = 2;
  q.items = (char **)items;
  O3m__V1__MaskBatchRequest req = O3M__V1__MASK_BATCH_REQUEST__INIT;
  req.mask_id = id;
  req.n_queries = 1;
  req.queries = &qp;
  ProtobufCMessage *m;
  o3m_err_clear(&e);
  cr_assert_eq(o3m_rpc_client_call(shop, O3M_PATH_PASSIVE_MASK_BATCH, &req.base,
                                   &o3m__v1__mask_batch_reply__descriptor, &m, &e), O3M_EINVAL);
  cr_assert(strstr(o3m_err_message(&e), "nonce of 0 bytes"), "%s", o3m_err_message(&e));
  uint8_t nonce[32] = {1, 2, 3};
  req.nonce.data = nonce;
  req.nonce.len = 31;
  cr_assert_eq(o3m_rpc_client_call(shop, O3M_PATH_PASSIVE_MASK_BATCH, &req.base,
                                   &o3m__v1__mask_batch_reply__descriptor, &m, &e), O3M_EINVAL);
  req.nonce.len = 32;
  double norms[1] = {NB};
  int scale;
  cr_assert_eq(o3m_secagg_scale(1, norms, &scale, NULL), 0);
  req.scale = (uint32_t)scale + 1; /* another config's */
  cr_assert_eq(o3m_rpc_client_call(shop, O3M_PATH_PASSIVE_MASK_BATCH, &req.base,
                                   &o3m__v1__mask_batch_reply__descriptor, &m, &e), O3M_ESTATE);
  cr_assert(strstr(o3m_err_message(&e), "configs differ"), "%s", o3m_err_message(&e));
  req.scale = (uint32_t)scale;
  o3m_err_clear(&e);
  cr_assert_eq(o3m_rpc_client_call(shop, O3M_PATH_PASSIVE_MASK_BATCH, &req.base,
                                   &o3m__v1__mask_batch_reply__descriptor, &m, &e), 0, "%s",
               o3m_err_message(&e));
  const O3m__V1__MaskBatchReply *r = (const O3m__V1__MaskBatchReply *)m;
  int K[1] = {2};
  cr_assert_eq(o3m_wire_mask_batch_reply_check(r, BANK, 1, K, D, id, 1, NB, &e), 0, "%s",
               o3m_err_message(&e));
  /* The part it encodes is the per-party one of the same request. */
  o3m_mask *mk = seeded_mask();
  o3m_block *blk;
  cr_assert_eq(o3m_block_from_mask(&blk, mk, 3, DJ), 0);
  double x[2 * DJ] = {[0] = atof(SECRET_VALUE), [1] = 4, [2] = 10, [DJ] = atof(SECRET_VALUE),
                      [DJ + 1] = 4, [DJ + 2] = -7.5};
  double want[2 * D], got[2 * D];
  o3m_block_apply(blk, 2, x, 0.0, want);
  uint64_t acc[2 * D] = {0};
  o3m_secagg_add_part(2 * D, r->masked, acc);
  o3m_secagg_decode(scale, 2 * D, acc, got);
  for (int i = 0; i < 2 * D; i++)
    cr_assert(fabs(got[i] - want[i]) <= o3m_secagg_max_error(1, scale) + 1e-15 * fabs(want[i]),
              "value %d: %.17g vs %.17g", i, got[i], want[i]);
  o3m_block_destroy(blk);
  o3m_mask_destroy(mk);
  o3m_rpc_client_destroy(shop);
  fed_stop(&f.bank, SIGTERM, 5000);
  fed_stop(&f.pmg, SIGTERM, 5000);
}

/* ---------------------------------------------------------------- reload */

/* Reload as the client c; *out (may be NULL) gets the reply. */
static int reload(o3m_rpc_client *c, O3m__V1__ReloadReply *out, o3m_err *e) {
  O3m__V1__ReloadRequest req = O3M__V1__RELOAD_REQUEST__INIT;
  ProtobufCMessage *m;
  o3m_err_clear(e);
  int rc = o3m_rpc_client_call(c, O3M_PATH_PASSIVE_RELOAD, &req.base,
                               &o3m__v1__reload_reply__descriptor, &m, e);
  if (rc == 0 && out) *out = *(const O3m__V1__ReloadReply *)m;
  return rc;
}

/* Asserts that the shop's Mask of (user, i0) is Q^bank [u[0], u[1], 10]. */
static void assert_user_row(o3m_rpc_client *shop, uint64_t id, const double *Q, const char *user,
                            double u0, double u1, const char *when) {
  const char *items[] = {"i0"};
  double y[D];
  o3m_err e;
  cr_assert_eq(mask(shop, id, user, items, 1, y, &e), 0, "%s: %s", when, o3m_err_message(&e));
  double x[DJ] = {u0, u1, 10};
  for (int r = 0; r < D; r++) {
    double want = 0;
    for (int c = 0; c < DJ; c++) want += Q[r * D + COL0 + c] * x[c];
    cr_assert(fabs(y[r] - want) <= 1e-12 * (1 + fabs(want)),
              "%s: user %s, component %d: %.17g, want %.17g", when, user, r, y[r], want);
  }
}

/* Waits up to 5 s until the bank's Stats report `reloads` swaps and
 * `refused` refusals (a SIGHUP is taken by the idle hook within ~100 ms). */
static void wait_reload_counts(o3m_rpc_client *bank, uint64_t reloads, uint64_t refused) {
  O3m__V1__PassiveStats st;
  o3m_err e;
  for (int i = 0; i < 100; i++) {
    cr_assert_eq(stats(bank, &st, &e), 0, "%s", o3m_err_message(&e));
    if (st.reloads == reloads && st.reloads_refused == refused) return;
    sleep_ms(50);
  }
  cr_assert_fail("after 5 s: %llu reloads, %llu refused; want %llu and %llu",
                 (unsigned long long)st.reloads, (unsigned long long)st.reloads_refused,
                 (unsigned long long)reloads, (unsigned long long)refused);
}

/* Tables change without a restart: a bad file is refused with
 * the start's file:line message and the old rows keep serving; a good one
 * is swapped in whole (a changed row and a new user are used at once); the
 * Reload RPC is its operator's alone; SIGHUP does the same as the RPC; the
 * lookup counters continue across the swap. */
Test(passive, reload_swaps_good_tables_and_refuses_bad_ones) {
  fed f;
  start(&f);
  o3m_mask *m = seeded_mask();
  const double *Q = o3m_mask_matrix(m);
  uint64_t id = o3m_mask_id(m);
  o3m_rpc_client *shop = as(&f, "shop"), *bank = as(&f, "bank");
  assert_user_row(shop, id, Q, "u0", 1.5, -2, "before any reload");

  /* A ragged row on line 3: refused as a start would refuse it. */
  fed_write("users.csv", "user_id,a,b\nu0,2.5,-1\nu1,4\n");
  O3m__V1__ReloadReply rr;
  o3m_err e;
  int rc = reload(bank, &rr, &e);
  cr_assert_eq(rc, O3M_EPARSE, "%s: %s", o3m_errname(rc), o3m_err_message(&e));
  cr_assert(strstr(e.msg, "users.csv:3") && strstr(e.msg, "[party bank] user_table/item_table"),
            "%s", e.msg);
  cr_assert(strstr(e.msg, "refused, old tables kept"), "%s", e.msg);
  assert_user_row(shop, id, Q, "u0", 1.5, -2, "after a refused reload");
  /* A row beyond the party's bound is refused like at a start. */
  fed_write("users.csv", "user_id,a,b\nu0,2.5,-1\nu1,1e300,0\n");
  cr_assert_eq(reload(bank, &rr, &e), O3M_ERANGE, "%s", o3m_err_message(&e));
  cr_assert(strstr(e.msg, "users.csv:3") && strstr(e.msg, "l2 norm is above"), "%s", e.msg);
  /* Only the party's own certificate may reload: not the active party. */
  fed_write("users.csv", "user_id,a,b\nu0,2.5,-1\nu1,0,4\nu2,-3,0.5\nu9,7,8\n");
  cr_assert_eq(reload(shop, &rr, &e), O3M_EPERM, "%s", o3m_err_message(&e));
  assert_user_row(shop, id, Q, "u0", 1.5, -2, "after a refused caller");

  cr_assert_eq(reload(bank, &rr, &e), 0, "%s", o3m_err_message(&e));
  cr_assert_eq(rr.reloads, 1);
  cr_assert_eq(rr.refused, 2);
  cr_assert_eq(rr.users, 4);
  cr_assert_eq(rr.items, 2);
  cr_assert_gt(rr.last_reload_ms, 0);
  assert_user_row(shop, id, Q, "u0", 2.5, -1, "after the reload");
  assert_user_row(shop, id, Q, "u9", 7, 8, "a user added by the reload");

  /* SIGHUP: a bad file is refused, then a good one swapped. */
  fed_write("users.csv", "user_id,a,b\nu0,nan,1\n");
  cr_assert_eq(kill(f.bank.pid, SIGHUP), 0);
  wait_reload_counts(bank, 1, 3);
  assert_user_row(shop, id, Q, "u0", 2.5, -1, "after a refused SIGHUP");
  fed_write("users.csv", "user_id,a,b\nu0,-4,0.25\n");
  cr_assert_eq(kill(f.bank.pid, SIGHUP), 0);
  wait_reload_counts(bank, 2, 3);
  assert_user_row(shop, id, Q, "u0", -4, 0.25, "after SIGHUP");

  O3m__V1__PassiveStats st;
  cr_assert_eq(stats(bank, &st, &e), 0, "%s", o3m_err_message(&e));
  cr_assert_eq(st.lookups, 7, "lookups across the swaps: %llu", (unsigned long long)st.lookups);
  o3m_rpc_client_destroy(shop);
  o3m_rpc_client_destroy(bank);
  o3m_mask_destroy(m);
  cr_assert_eq(fed_stop(&f.bank, SIGTERM, 5000), 0, "%s", fed_log(&f.bank));
  const char *log = fed_log(&f.bank);
  cr_assert(strstr(log, "reload refused, the tables of version 0 keep serving"), "%s", log);
  cr_assert(strstr(log, "tables reloaded (version 2"), "%s", log);
  cr_assert(strstr(log, "2 table reloads (3 refused)"), "%s", log);
  cr_assert_null(strstr(log, "1e300"), "a feature value reached the log:\n%s", log);
  cr_assert_eq(fed_stop(&f.pmg, SIGTERM, 5000), 0);
}
