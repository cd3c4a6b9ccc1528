/* test_pmg.c -- the o3m-pmg daemon, started as a real process.
 *
 * Each test writes a federation config (pmg, active "shop" with dims 3,
 * passive "bank" with dims 2) into a temporary directory with certificates
 * from scripts/make-certs.sh: pmg, shop, bank and mallory from the
 * federation CA, and a second CA whose "bank" certificate impersonates the
 * bank. It starts o3m-pmg on a free loopback port and talks to it through
 * o3m_rpc clients holding those certificates. fed_cleanup (the suite's
 * .fini) kills whatever is left, also after a failed assertion. */
#include <criterion/criterion.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fed_proc.h"
#include "health.pb-c.h"
#include "o3m.pb-c.h"
#include "o3m_rpc.h"
#include "o3m_wire.h"

#define D 5
#define SHOP 0 /* party index (column order): shop's columns come first */
#define BANK 1

TestSuite(pmg, .fini = fed_cleanup, .timeout = 30);

typedef struct fed {
  fed_proc pmg;
  char target[64];
  char config[512];
} fed;

/* The fingerprint of the config start() writes, which every GetBlock of
 * get_block states (one test per process: start() sets it). */
static unsigned char g_fingerprint[O3M_FINGERPRINT_BYTES];

/* Certificates, a config and a running o3m-pmg with the extra flags. */
static void start(fed *f, const char *const *extra) {
  fed_make_certs("certs", "pmg shop bank mallory");
  fed_make_certs("evil", "bank");
  char text[2048];
  int p0 = fed_free_port(), p1 = fed_free_port(), p2 = fed_free_port();
  snprintf(text, sizeof text,
           "[federation]\nd = %d\nca = certs/ca.pem\n"
           "[policy]\nalgo = linucb\nmodel = shared\n"
           "[party pmg]\nrole = pmg\naddress = 127.0.0.1:%d\n"
           "cert = certs/pmg.pem\nkey = certs/pmg.key\n"
           "[party shop]\nrole = active\naddress = 127.0.0.1:%d\ndims = 3\n"
           "cert = certs/shop.pem\nkey = certs/shop.key\n"
           "[party bank]\nrole = passive\naddress = 127.0.0.1:%d\ndims = 2\n"
           "user_table = users.csv\ncert = certs/bank.pem\nkey = certs/bank.key\n",
           D, p0, p1, p2);
  snprintf(f->config, sizeof f->config, "%s", fed_write("fed.conf", text));
  fed_fingerprint(f->config, g_fingerprint);
  const char *args[16] = {"--config", f->config, "--party", "pmg"};
  int n = 4;
  for (int i = 0; extra && extra[i]; i++) args[n++] = extra[i];
  args[n] = NULL;
  fed_spawn(&f->pmg, "pmg", "o3m-pmg", args);
  int port = fed_wait_ready(&f->pmg, 10000);
  cr_assert_eq(port, p0, "the ready file names port %d, the config %d", port, p0);
  snprintf(f->target, sizeof f->target, "127.0.0.1:%d", port);
}

/* A client of the pmg holding the federation CA and NAME's certificate. */
static o3m_rpc_client *as(const fed *f, const char *name) {
  return fed_client(f->target, "certs", "certs", name, "pmg", 5000);
}

/* The partition of the config start() writes. */
static o3m_partition partition(void) {
  o3m_partition p;
  o3m_err e;
  int dims[2] = {3, 2};
  cr_assert_eq(o3m_partition_from_dims(&p, 2, dims, &e), 0);
  return p;
}

/* GetBlock for party with the given dims, sealed to a key pair drawn for
 * the call (as the daemons fetch); with blk, the block is opened into *blk
 * (the caller destroys it), with msg the reply's public fields stay
 * readable until the next call on c. */
static int get_block(o3m_rpc_client *c, int party, int dim, int party_dim,
                     const O3m__V1__Block **msg, o3m_block **blk, o3m_err *e) {
  o3m_partition p = partition();
  o3m_seal_key *key;
  cr_assert_eq(o3m_seal_key_create(&key), 0);
  O3m__V1__BlockRequest req = O3M__V1__BLOCK_REQUEST__INIT;
  o3m_wire_block_request_fill(&req, &p, party < p.m ? party : 0, key, g_fingerprint);
  req.party = (uint32_t)party;
  req.dim = (uint32_t)dim;
  req.party_dim = (uint32_t)party_dim;
  ProtobufCMessage *m = NULL;
  o3m_err_clear(e);
  int rc = o3m_rpc_client_call(c, O3M_PATH_PMG_GET_BLOCK, &req.base, &o3m__v1__block__descriptor,
                               &m, e);
  if (msg) *msg = (const O3m__V1__Block *)m;
  if (rc == 0 && blk) rc = o3m_wire_block_import(blk, (const O3m__V1__Block *)m, &p, party, key, e);
  o3m_seal_key_destroy(key);
  return rc;
}

static int confirm(o3m_rpc_client *c, int party, uint64_t mask_id, o3m_err *e) {
  O3m__V1__BlockReceipt req = O3M__V1__BLOCK_RECEIPT__INIT;
  req.party = (uint32_t)party;
  req.mask_id = mask_id;
  ProtobufCMessage *m;
  o3m_err_clear(e);
  return o3m_rpc_client_call(c, O3M_PATH_PMG_CONFIRM_BLOCK, &req.base, &o3m__v1__ack__descriptor,
                             &m, e);
}

static uint64_t info_mask_id(o3m_rpc_client *c) {
  O3m__V1__InfoRequest req = O3M__V1__INFO_REQUEST__INIT;
  ProtobufCMessage *m;
  o3m_err e;
  o3m_err_clear(&e);
  int rc = o3m_rpc_client_call(c, O3M_PATH_PMG_INFO, &req.base, &o3m__v1__node_info__descriptor,
                               &m, &e);
  cr_assert_eq(rc, 0, "Info: %s", o3m_err_message(&e));
  const O3m__V1__NodeInfo *ni = (const O3m__V1__NodeInfo *)m;
  cr_assert_eq(ni->role, O3M__V1__ROLE__ROLE_MASK_GENERATOR);
  cr_assert_eq(ni->protocol, O3M_PROTOCOL_VERSION);
  cr_assert_eq(ni->dim, D);
  cr_assert_eq(ni->n_dims, 2);
  cr_assert_eq(ni->dims[SHOP], 3);
  cr_assert_eq(ni->dims[BANK], 2);
  cr_assert_neq(ni->mask_id, 0);
  return ni->mask_id;
}

/* Fetches party's block as name and copies it into Q (D x D, row-major) at
 * its columns. */
static uint64_t fetch_into(const fed *f, const char *name, int party, int dj, double *Q) {
  o3m_rpc_client *c = as(f, name);
  const O3m__V1__Block *b;
  o3m_block *blk;
  o3m_err e;
  int rc = get_block(c, party, D, dj, &b, &blk, &e);
  cr_assert_eq(rc, 0, "%s's GetBlock: %s", name, o3m_err_message(&e));
  cr_assert_eq(b->party, (uint32_t)party);
  cr_assert_eq(b->rows, D);
  cr_assert_eq(b->cols, (uint32_t)dj);
  cr_assert_eq(b->col0, party == SHOP ? 0u : 3u);
  cr_assert_eq(b->n_data, 0, "values crossed the wire in the clear");
  cr_assert_eq(b->sealed.len, o3m_seal_block_bytes(D, dj));
  const double *v = o3m_block_data(blk);
  for (int r = 0; r < D; r++)
    for (int c2 = 0; c2 < dj; c2++) Q[r * D + b->col0 + c2] = v[r * dj + c2];
  uint64_t id = b->mask_id;
  o3m_block_destroy(blk);
  o3m_rpc_client_destroy(c);
  return id;
}

static int health(o3m_rpc_client *c, const char *service) {
  Grpc__Health__V1__HealthCheckRequest req = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
  req.service = (char *)service;
  ProtobufCMessage *m;
  o3m_err e;
  o3m_err_clear(&e);
  int rc = o3m_rpc_client_call(c, O3M_RPC_HEALTH_CHECK_PATH, &req.base,
                               &grpc__health__v1__health_check_response__descriptor, &m, &e);
  if (rc < 0) return rc;
  return (int)((const Grpc__Health__V1__HealthCheckResponse *)m)->status;
}

Test(pmg, blocks_assemble_an_orthogonal_mask_and_health_is_serving) {
  fed f;
  start(&f, NULL);
  double Q[D * D];
  for (int i = 0; i < D * D; i++) Q[i] = NAN;
  uint64_t id_bank = fetch_into(&f, "bank", BANK, 2, Q);
  uint64_t id_shop = fetch_into(&f, "shop", SHOP, 3, Q);
  cr_assert_eq(id_bank, id_shop, "the two blocks come from different masks");
  o3m_rpc_client *c = as(&f, "shop");
  cr_assert_eq(info_mask_id(c), id_bank);
  /* Q^T Q = I: the blocks are the columns of one orthogonal matrix. */
  double worst = 0;
  for (int i = 0; i < D; i++)
    for (int j = 0; j < D; j++) {
      double s = 0;
      for (int r = 0; r < D; r++) s += Q[r * D + i] * Q[r * D + j];
      double err = fabs(s - (i == j));
      if (!(err <= worst)) worst = err; /* NaN-safe */
    }
  cr_assert_lt(worst, 1e-12, "max |Q^T Q - I| = %g", worst);
  /* And it is not the identity or a signed permutation. */
  int big = 0;
  for (int i = 0; i < D * D; i++) big += fabs(Q[i]) > 0.999;
  cr_assert_lt(big, D, "Q looks like a permutation");

  const int SERVING = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
  cr_assert_eq(health(c, ""), SERVING);
  cr_assert_eq(health(c, "o3m.v1.MaskGenerator"), SERVING);
  cr_assert_eq(health(c, "o3m.v1.Passive"), O3M_ENOTFOUND);
  o3m_rpc_client_destroy(c);
  cr_assert_eq(fed_stop(&f.pmg, SIGTERM, 5000), 0, "%s", fed_log(&f.pmg));
}

Test(pmg, only_the_party_named_in_the_certificate_gets_its_block) {
  fed f;
  start(&f, NULL);
  o3m_err e;
  /* Another federation member asking for the bank's block. */
  o3m_rpc_client *c = as(&f, "mallory");
  cr_assert_eq(get_block(c, BANK, D, 2, NULL, NULL, &e), O3M_EPERM, "%s", o3m_err_message(&e));
  cr_assert(strstr(e.msg, "mallory"), "%s", e.msg);
  o3m_rpc_client_destroy(c);
  /* The active party must never hold a passive party's block (with Q^bank
   * it could unmask the bank's features), nor the other way round. */
  c = as(&f, "shop");
  cr_assert_eq(get_block(c, BANK, D, 2, NULL, NULL, &e), O3M_EPERM, "%s", o3m_err_message(&e));
  o3m_rpc_client_destroy(c);
  c = as(&f, "bank");
  cr_assert_eq(get_block(c, SHOP, D, 3, NULL, NULL, &e), O3M_EPERM, "%s", o3m_err_message(&e));
  o3m_rpc_client_destroy(c);
  /* No client certificate: the TLS handshake fails. */
  c = fed_client(f.target, "certs", "certs", NULL, "pmg", 5000);
  cr_assert_eq(get_block(c, BANK, D, 2, NULL, NULL, &e), O3M_EUNAVAILABLE, "%s",
               o3m_err_message(&e));
  o3m_rpc_client_destroy(c);
  /* A certificate with CN bank from another CA: refused in the handshake. */
  c = fed_client(f.target, "certs", "evil", "bank", "pmg", 5000);
  int rc = get_block(c, BANK, D, 2, NULL, NULL, &e);
  cr_assert(rc == O3M_EUNAVAILABLE || rc == O3M_EPERM, "outsider got %s: %s", o3m_errname(rc),
            o3m_err_message(&e));
  o3m_rpc_client_destroy(c);
  /* Plaintext does not get through either. */
  c = fed_client(f.target, NULL, NULL, NULL, NULL, 5000);
  cr_assert_eq(get_block(c, BANK, D, 2, NULL, NULL, &e), O3M_EUNAVAILABLE, "%s",
               o3m_err_message(&e));
  o3m_rpc_client_destroy(c);
  /* A forged confirmation is refused as well, by a party and by anyone. */
  c = as(&f, "shop");
  uint64_t mask_id = info_mask_id(c);
  cr_assert_eq(confirm(c, BANK, mask_id, &e), O3M_EPERM, "%s", o3m_err_message(&e));
  o3m_rpc_client_destroy(c);
  c = as(&f, "mallory");
  cr_assert_eq(confirm(c, BANK, mask_id, &e), O3M_EPERM, "%s", o3m_err_message(&e));
  o3m_rpc_client_destroy(c);

  /* The refusals changed nothing: the bank still gets its block. */
  double Q[D * D];
  fetch_into(&f, "bank", BANK, 2, Q);
  cr_assert_eq(fed_stop(&f.pmg, SIGTERM, 5000), 0);
  cr_assert(strstr(fed_log(&f.pmg), "refused GetBlock of party 1 (bank) to certificate 'shop'"),
            "%s", fed_log(&f.pmg));
  cr_assert(strstr(fed_log(&f.pmg), "refused /o3m.v1.MaskGenerator/GetBlock to certificate "
                                    "'mallory'"),
            "%s", fed_log(&f.pmg));
}

Test(pmg, mismatched_dims_are_refused) {
  fed f;
  start(&f, NULL);
  o3m_rpc_client *c = as(&f, "bank");
  o3m_err e;
  cr_assert_eq(get_block(c, BANK, D, 3, NULL, NULL, &e), O3M_EDIM, "%s", o3m_err_message(&e));
  cr_assert_eq(get_block(c, BANK, D + 1, 2, NULL, NULL, &e), O3M_EDIM, "%s",
               o3m_err_message(&e));
  cr_assert_eq(get_block(c, 7, D, 2, NULL, NULL, &e), O3M_ERANGE, "%s", o3m_err_message(&e));
  /* A request without a public key (a protocol-2 party) gets no block: it
   * could only be sent in the clear. */
  O3m__V1__BlockRequest plain = O3M__V1__BLOCK_REQUEST__INIT;
  plain.party = BANK, plain.dim = D, plain.party_dim = 2;
  ProtobufCMessage *m;
  o3m_err_clear(&e);
  cr_assert_eq(o3m_rpc_client_call(c, O3M_PATH_PMG_GET_BLOCK, &plain.base,
                                   &o3m__v1__block__descriptor, &m, &e),
               O3M_EINVAL, "%s", o3m_err_message(&e));
  cr_assert(strstr(e.msg, "public_key has 0 bytes"), "%s", e.msg);
  /* A block not fetched cannot be confirmed: Q would be forgotten too soon. */
  cr_assert_eq(confirm(c, BANK, info_mask_id(c), &e), O3M_ESTATE, "%s", o3m_err_message(&e));
  o3m_rpc_client_destroy(c);
  cr_assert_eq(fed_stop(&f.pmg, SIGTERM, 5000), 0);
}

Test(pmg, forgets_the_mask_once_every_party_confirmed) {
  fed f;
  start(&f, NULL);
  double Q[D * D];
  uint64_t id = fetch_into(&f, "bank", BANK, 2, Q);
  fetch_into(&f, "shop", SHOP, 3, Q);
  o3m_rpc_client *bank = as(&f, "bank"), *shop = as(&f, "shop");
  o3m_err e;
  cr_assert_eq(confirm(bank, BANK, id ^ 1, &e), O3M_EMASK, "%s", o3m_err_message(&e));
  cr_assert_eq(confirm(bank, BANK, id, &e), 0, "%s", o3m_err_message(&e));
  cr_assert_eq(confirm(bank, BANK, id, &e), 0, "a repeated confirmation: %s", o3m_err_message(&e));
  /* A block is served once per party: the bank, confirmed, is refused; the
   * shop, not yet confirmed, is served again (its first reply may have been
   * lost). */
  cr_assert_eq(get_block(bank, BANK, D, 2, NULL, NULL, &e), O3M_ESTATE, "%s",
               o3m_err_message(&e));
  cr_assert(strstr(e.msg, "already confirmed"), "%s", e.msg);
  cr_assert_eq(get_block(shop, SHOP, D, 3, NULL, NULL, &e), 0, "%s", o3m_err_message(&e));
  cr_assert_eq(confirm(shop, SHOP, id, &e), 0, "%s", o3m_err_message(&e));
  cr_assert_eq(get_block(bank, BANK, D, 2, NULL, NULL, &e), O3M_ESTATE, "%s",
               o3m_err_message(&e));
  cr_assert(strstr(e.msg, "mask forgotten; restart the federation"), "%s", e.msg);
  cr_assert_eq(get_block(shop, SHOP, D, 3, NULL, NULL, &e), O3M_ESTATE, "%s",
               o3m_err_message(&e));
  cr_assert_eq(info_mask_id(shop), id, "Info still names the mask in use");
  o3m_rpc_client_destroy(bank);
  o3m_rpc_client_destroy(shop);
  cr_assert_eq(fed_stop(&f.pmg, SIGTERM, 5000), 0);
  cr_assert(strstr(fed_log(&f.pmg), "Q forgotten"), "%s", fed_log(&f.pmg));
}

Test(pmg, keep_mask_serves_after_every_confirmation) {
  fed f;
  const char *extra[] = {"--keep-mask", NULL};
  start(&f, extra);
  double Q[D * D];
  uint64_t id = fetch_into(&f, "bank", BANK, 2, Q);
  fetch_into(&f, "shop", SHOP, 3, Q);
  o3m_rpc_client *bank = as(&f, "bank"), *shop = as(&f, "shop");
  o3m_err e;
  cr_assert_eq(confirm(bank, BANK, id, &e), 0, "%s", o3m_err_message(&e));
  cr_assert_eq(confirm(shop, SHOP, id, &e), 0, "%s", o3m_err_message(&e));
  cr_assert_eq(get_block(bank, BANK, D, 2, NULL, NULL, &e), 0, "%s", o3m_err_message(&e));
  o3m_rpc_client_destroy(bank);
  o3m_rpc_client_destroy(shop);
  cr_assert_eq(fed_stop(&f.pmg, SIGINT, 5000), 0);
  cr_assert(strstr(fed_log(&f.pmg), "keeping Q"), "%s", fed_log(&f.pmg));
}

Test(pmg, insecure_serves_by_index_and_warns) {
  fed f;
  const char *extra[] = {"--insecure", "--mask-seed-insecure", "7", NULL};
  start(&f, extra);
  o3m_rpc_client *c = fed_client(f.target, NULL, NULL, NULL, NULL, 5000);
  o3m_err e;
  const O3m__V1__Block *b;
  o3m_block *blk;
  cr_assert_eq(get_block(c, BANK, D, 2, &b, &blk, &e), 0, "%s", o3m_err_message(&e));
  /* The seeded mask is the one o3m_mask_generate draws from that seed. */
  o3m_rng *rng;
  o3m_mask *m;
  cr_assert_eq(o3m_rng_create_seeded_insecure(&rng, 7), 0);
  cr_assert_eq(o3m_mask_generate(&m, D, rng), 0);
  cr_assert_eq(b->mask_id, o3m_mask_id(m));
  for (int r = 0; r < D; r++)
    for (int j = 0; j < 2; j++)
      cr_assert_eq(o3m_block_data(blk)[r * 2 + j], o3m_mask_matrix(m)[r * D + 3 + j],
                   "Q[%d][%d]", r, 3 + j);
  o3m_block_destroy(blk);
  o3m_mask_destroy(m);
  o3m_rng_destroy(rng);
  o3m_rpc_client_destroy(c);
  cr_assert_eq(fed_stop(&f.pmg, SIGTERM, 5000), 0);
  const char *log = fed_log(&f.pmg);
  cr_assert(strstr(log, "WARN INSECURE: plaintext"), "%s", log);
  cr_assert(strstr(log, "WARN INSECURE: the mask is drawn from a seeded generator"), "%s", log);
}

Test(pmg, sigterm_exits_zero_and_startup_errors_exit_one) {
  fed f;
  start(&f, NULL);
  cr_assert_eq(fed_stop(&f.pmg, SIGTERM, 5000), 0, "%s", fed_log(&f.pmg));
  cr_assert(strstr(fed_log(&f.pmg), "stopped: 0 blocks served"), "%s", fed_log(&f.pmg));
  cr_assert_neq(access(f.pmg.ready, F_OK), 0, "the ready file outlived the daemon");

  /* Not a pmg party. */
  fed_proc p;
  const char *a1[] = {"--config", f.config, "--party", "bank", NULL};
  fed_spawn(&p, "wrong-role", "o3m-pmg", a1);
  cr_assert_eq(fed_wait_exit(&p, 5000), 1);
  cr_assert(strstr(fed_log(&p), "[party bank] has role passive"), "%s", fed_log(&p));
  const char *a2[] = {"--config", f.config, "--party", "nobody", NULL};
  fed_spawn(&p, "no-party", "o3m-pmg", a2);
  cr_assert_eq(fed_wait_exit(&p, 5000), 1);
  cr_assert(strstr(fed_log(&p), "no section [party nobody]"), "%s", fed_log(&p));
  /* A missing certificate is named by its key. */
  char dir[512];
  snprintf(dir, sizeof dir, "%s/certs/pmg.pem", fed_dir());
  cr_assert_eq(unlink(dir), 0);
  const char *a3[] = {"--config", f.config, "--party", "pmg", NULL};
  fed_spawn(&p, "no-cert", "o3m-pmg", a3);
  cr_assert_eq(fed_wait_exit(&p, 5000), 1);
  cr_assert(strstr(fed_log(&p), "[party pmg]: cert = "), "%s", fed_log(&p));
  const char *a4[] = {"--config", "/nonexistent/fed.conf", "--party", "pmg", NULL};
  fed_spawn(&p, "no-config", "o3m-pmg", a4);
  cr_assert_eq(fed_wait_exit(&p, 5000), 1);
  cr_assert(strstr(fed_log(&p), "/nonexistent/fed.conf"), "%s", fed_log(&p));
}
