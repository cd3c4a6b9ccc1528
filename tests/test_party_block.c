/* test_party_block.c -- how a column party obtains its block
 * (party/o3m_party_block.h), the one behaviour the AP and every PP share.
 *
 * A real mask generator service (pmg_service) runs in-process on loopback
 * behind a method table that wraps its handlers: GetBlock calls are counted
 * per party, and a party's first ConfirmBlock reaches the generator but its
 * reply is lost (the wrapper answers UNAVAILABLE after the real handler
 * ran). The party must retry the confirmation alone: a second GetBlock is
 * never sent, which after the last confirmation the generator could no
 * longer answer. Both shapes of caller are run: the AP's (no state_dir, no
 * secret) and a PP's (a state_dir and its dummy-row key). */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "o3m_block_store.h"
#include "o3m_party_block.h"
#include "o3m_rpc.h"
#include "o3m_wire.h"
#include "pmg_service.h"

#define SHOP 0 /* the active party, slot 0 */
#define BANK 1 /* the passive party, slot 1 */

static const char *const CONF_FMT =
    "[federation]\nd = 3\ninsecure = true\n"
    "[policy]\nalgo = linucb\nmodel = shared\n"
    "[party pmg]\nrole = pmg\naddress = 127.0.0.1:%d\n"
    "[party shop]\nrole = active\naddress = 127.0.0.1:3\ndims = 2\n"
    "[party bank]\nrole = passive\naddress = 127.0.0.1:4\ndims = 1\nuser_table = u.csv\n"
    "state_dir = %s\n";

static pmg_service *g_pmg;
static const o3m_rpc_method *g_real;
static int g_n_real;
static atomic_int g_gets[2], g_confirms[2];

static o3m_rpc_handler real_handler(const char *path) {
  for (int i = 0; i < g_n_real; i++)
    if (strcmp(g_real[i].path, path) == 0) return g_real[i].handler;
  return NULL;
}

static int h_info(void *ctx, o3m_rpc_call *call, const ProtobufCMessage *req,
                  ProtobufCMessage *reply, o3m_err *e) {
  return real_handler(O3M_PATH_PMG_INFO)(ctx, call, req, reply, e);
}

static int h_get(void *ctx, o3m_rpc_call *call, const ProtobufCMessage *req,
                 ProtobufCMessage *reply, o3m_err *e) {
  unsigned j = ((const O3m__V1__BlockRequest *)req)->party;
  if (j < 2) atomic_fetch_add(&g_gets[j], 1);
  return real_handler(O3M_PATH_PMG_GET_BLOCK)(ctx, call, req, reply, e);
}

/* The first confirmation of each party is taken, then its reply lost. */
static int h_confirm(void *ctx, o3m_rpc_call *call, const ProtobufCMessage *req,
                     ProtobufCMessage *reply, o3m_err *e) {
  unsigned j = ((const O3m__V1__BlockReceipt *)req)->party;
  int rc = real_handler(O3M_PATH_PMG_CONFIRM_BLOCK)(ctx, call, req, reply, e);
  if (rc == 0 && j < 2 && atomic_fetch_add(&g_confirms[j], 1) == 0)
    return o3m_err_set(e, O3M_EUNAVAILABLE, "test: the reply of the confirmation was lost");
  return rc;
}

static const o3m_rpc_method methods[] = {
    {O3M_PATH_PMG_INFO, &o3m__v1__info_request__descriptor, &o3m__v1__node_info__descriptor,
     h_info},
    {O3M_PATH_PMG_GET_BLOCK, &o3m__v1__block_request__descriptor, &o3m__v1__block__descriptor,
     h_get},
    {O3M_PATH_PMG_CONFIRM_BLOCK, &o3m__v1__block_receipt__descriptor, &o3m__v1__ack__descriptor,
     h_confirm},
};

static void *run_thread(void *srv) {
  o3m_rpc_server_run(srv);
  return NULL;
}

static o3m_config *parse(int port, const char *dir) {
  char text[1024];
  snprintf(text, sizeof text, CONF_FMT, port, dir);
  o3m_config *cfg;
  o3m_err e;
  cr_assert(eq(int, o3m_config_parse_string(&cfg, text, NULL, "t.conf", &e), 0), "%s",
            o3m_err_message(&e));
  return cfg;
}

static o3m_partition partition(const o3m_config *cfg) {
  int dims[2] = {o3m_config_column_party(cfg, 0)->dims, o3m_config_column_party(cfg, 1)->dims};
  o3m_partition p;
  o3m_err e;
  cr_assert(eq(int, o3m_partition_from_dims(&p, 2, dims, &e), 0), "%s", o3m_err_message(&e));
  return p;
}

Test(party_block, regression_a_lost_confirmation_is_retried_without_a_second_get_block,
     .timeout = 60) {
  char dir[] = "/tmp/o3m_party_block_XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  char sdir[sizeof dir + 8];
  snprintf(sdir, sizeof sdir, "%s/bank", dir);

  /* The generator's config only fixes the partition and the names. */
  o3m_config *pcfg = parse(1, sdir);
  pmg_options po = {.insecure = 1, .seeded = 1, .seed = 7};
  o3m_err e;
  cr_assert(eq(int, pmg_service_create(&g_pmg, pcfg, &po, &e), 0), "%s", o3m_err_message(&e));
  g_real = pmg_service_methods(&g_n_real);
  o3m_rpc_server_config sc;
  o3m_rpc_server_config_default(&sc);
  sc.listen = "127.0.0.1:0";
  sc.insecure = 1;
  o3m_rpc_server *srv;
  cr_assert(eq(int, o3m_rpc_server_create(&srv, &sc, methods, 3, g_pmg, &e), 0), "%s",
            o3m_err_message(&e));
  pthread_t th;
  cr_assert(eq(int, pthread_create(&th, NULL, run_thread, srv), 0));

  o3m_config *cfg = parse(o3m_rpc_server_port(srv), sdir);
  o3m_partition part = partition(cfg);
  volatile sig_atomic_t stop = 0;

  /* The AP's shape: no state_dir in its section, no secret. */
  o3m_party_block_options ap = {cfg, o3m_config_column_party(cfg, SHOP), &part, 1, 20, &stop};
  o3m_block *b0 = NULL;
  cr_assert(eq(int, o3m_party_block_obtain(&ap, &b0, NULL, 0, &e), 0), "%s",
            o3m_err_message(&e));
  cr_assert(eq(int, atomic_load(&g_gets[SHOP]), 1), "the AP fetched its block again");
  cr_assert(eq(int, atomic_load(&g_confirms[SHOP]), 2), "the lost confirmation was not retried");

  /* A PP's shape: state_dir and a dummy-row key. Its confirmation is the
   * last one, after which the generator forgets Q. */
  unsigned char key[32], back[32];
  memset(key, 0x5a, sizeof key);
  o3m_party_block_options pp = {cfg, o3m_config_column_party(cfg, BANK), &part, 1, 20, &stop};
  o3m_block *b1 = NULL;
  cr_assert(eq(int, o3m_party_block_obtain(&pp, &b1, key, sizeof key, &e), 0), "%s",
            o3m_err_message(&e));
  cr_assert(eq(int, atomic_load(&g_gets[BANK]), 1), "the PP fetched its block again");
  cr_assert(eq(int, atomic_load(&g_confirms[BANK]), 2), "the lost confirmation was not retried");
  pmg_stats st;
  pmg_service_stats(g_pmg, &st);
  cr_assert(eq(int, st.forgotten, 1), "both parties confirmed, yet Q is kept");
  cr_assert(eq(u64, o3m_block_mask_id(b0), o3m_block_mask_id(b1)));

  /* A restart loads the stored block and its key; the generator, which has
   * forgotten Q, is not asked. */
  memset(back, 0, sizeof back);
  o3m_block *b2 = NULL;
  cr_assert(eq(int, o3m_party_block_obtain(&pp, &b2, back, sizeof back, &e), 0), "%s",
            o3m_err_message(&e));
  cr_assert(eq(int, atomic_load(&g_gets[BANK]), 1), "a stored block was fetched");
  cr_assert(eq(int, memcmp(back, key, sizeof key), 0), "the stored key was not restored");
  cr_assert(eq(u64, o3m_block_mask_id(b2), o3m_block_mask_id(b1)));

  o3m_block_destroy(b0);
  o3m_block_destroy(b1);
  o3m_block_destroy(b2);
  o3m_rpc_server_shutdown(srv);
  pthread_join(th, NULL);
  o3m_rpc_server_destroy(srv);
  pmg_service_destroy(g_pmg);
  o3m_config_destroy(cfg);
  o3m_config_destroy(pcfg);
  char path[512];
  remove(o3m_block_store_path(sdir, path, sizeof path));
  rmdir(sdir);
  rmdir(dir);
}
