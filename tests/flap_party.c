/* flap_party.c -- a passive party that misbehaves, for tests and the
 * attack bench (a tool, not a test; never installed).
 *
 * It stands where a passive party's address is in the federation config
 * and forwards each Info and MaskBatch of the active party, unchanged, to
 * the real o3m-passive of that party listening elsewhere (--upstream); the
 * one thing it changes is the item_epoch of each MaskBatch reply, which it
 * makes new every time (--every 1, the default) or every N replies. To the
 * active party it is an unmodified-looking peer: the same certificate, the
 * same masked parts, only epochs that flap. It counts what it is asked:
 * MaskBatch calls, item ids received (in all and per id) and the epochs it
 * named, and writes them to --counts FILE when it stops (SIGTERM or
 * SIGINT) as "key value" lines:
 *   batches N          MaskBatch calls answered
 *   items N            item ids received in them, in all
 *   distinct N         distinct item ids received
 *   max_per_item N     the most times one item id was received
 *   epochs N           distinct epochs named
 *
 *   flap_party --config CONF --party NAME --listen ADDR --upstream ADDR
 *              [--every N] [--counts FILE] [--ready-file FILE] [--insecure]
 *
 * The ready file gets the port it listens on, as the daemons' do. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "o3m.pb-c.h"
#include "o3m_config.h"
#include "o3m_error.h"
#include "o3m_rpc.h"
#include "o3m_wire.h"

/* Most distinct item ids counted; more are counted in items only. */
#define MAX_IDS 4096

static o3m_rpc_server *srv;
static o3m_rpc_client *up;
static int every = 1;
static uint64_t batches, items, epoch_base = 0x5eed000000000000ull, epochs;
static char *ids[MAX_IDS];
static uint64_t id_count[MAX_IDS];
static int n_ids;

static void on_signal(int sig) {
  (void)sig;
  o3m_rpc_server_shutdown(srv);
}

static void count_item(const char *id) {
  items++;
  for (int i = 0; i < n_ids; i++)
    if (strcmp(ids[i], id) == 0) {
      id_count[i]++;
      return;
    }
  if (n_ids < MAX_IDS && (ids[n_ids] = strdup(id))) id_count[n_ids++] = 1;
}

static int forward(const char *path, const ProtobufCMessage *req,
                   const ProtobufCMessageDescriptor *desc, ProtobufCMessage *reply, o3m_err *e) {
  ProtobufCMessage *m;
  int rc = o3m_rpc_client_call(up, path, req, desc, &m, e);
  if (rc < 0) return rc;
  /* The upstream reply lives in the client's arena until its next call,
   * after this reply is packed (one serving thread). */
  memcpy(reply, m, desc->sizeof_message);
  return 0;
}

static int h_info(void *ctx, o3m_rpc_call *call, const ProtobufCMessage *req,
                  ProtobufCMessage *reply, o3m_err *e) {
  (void)ctx;
  (void)call;
  return forward(O3M_PATH_PASSIVE_INFO, req, &o3m__v1__node_info__descriptor, reply, e);
}

static int h_mask_batch(void *ctx, o3m_rpc_call *call, const ProtobufCMessage *req,
                        ProtobufCMessage *reply, o3m_err *e) {
  (void)ctx;
  (void)call;
  const O3m__V1__MaskBatchRequest *br = (const O3m__V1__MaskBatchRequest *)req;
  for (size_t k = 0; k < br->n_items; k++) count_item(br->items[k]);
  int rc = forward(O3M_PATH_PASSIVE_MASK_BATCH, req, &o3m__v1__mask_batch_reply__descriptor,
                   reply, e);
  if (rc < 0) return rc;
  O3m__V1__MaskBatchReply *rep = (O3m__V1__MaskBatchReply *)reply;
  rep->item_epoch = epoch_base + batches / (uint64_t)every;
  if (batches % (uint64_t)every == 0) epochs++;
  batches++;
  return 0;
}

static void usage(void) {
  fprintf(stderr, "usage: flap_party --config CONF --party NAME --listen ADDR --upstream ADDR "
                  "[--every N] [--counts FILE] [--ready-file FILE] [--insecure]\n");
  exit(2);
}

int main(int argc, char **argv) {
  const char *conf = NULL, *party = NULL, *listen = NULL, *upstream = NULL, *counts = NULL,
             *ready = NULL;
  int insecure = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--insecure") == 0) {
      insecure = 1;
      continue;
    }
    if (!v) usage();
    if (strcmp(a, "--config") == 0) conf = v;
    else if (strcmp(a, "--party") == 0) party = v;
    else if (strcmp(a, "--listen") == 0) listen = v;
    else if (strcmp(a, "--upstream") == 0) upstream = v;
    else if (strcmp(a, "--counts") == 0) counts = v;
    else if (strcmp(a, "--ready-file") == 0) ready = v;
    else if (strcmp(a, "--every") == 0) every = atoi(v);
    else usage();
    i++;
  }
  if (!conf || !party || !listen || !upstream || every < 1) usage();
  o3m_err e;
  o3m_err_clear(&e);
  o3m_config *cfg;
  if (o3m_config_load(&cfg, conf, &e) < 0) {
    fprintf(stderr, "flap_party: %s\n", o3m_err_message(&e));
    return 1;
  }
  const o3m_party *me = o3m_config_party(cfg, party), *ap = o3m_config_active(cfg);
  if (!me || !ap) {
    fprintf(stderr, "flap_party: no party '%s' or no active party in %s\n", party, conf);
    return 1;
  }
  /* Upstream: the real party, called as the active party would. */
  o3m_rpc_client_config cc;
  o3m_rpc_client_config_default(&cc);
  o3m_rpc_client_secure(&cc, insecure, o3m_rpc_tls_to_party(cfg, ap, me));
  cc.target = upstream;
  cc.deadline_ms = o3m_config_deadline_ms(cfg);
  cc.wait_for_ready = 1;
  if (o3m_rpc_client_create(&up, &cc, &e) < 0) {
    fprintf(stderr, "flap_party: upstream %s: %s\n", upstream, o3m_err_message(&e));
    return 1;
  }
  static const o3m_rpc_method methods[] = {
      {O3M_PATH_PASSIVE_INFO, &o3m__v1__info_request__descriptor,
       &o3m__v1__node_info__descriptor, h_info},
      {O3M_PATH_PASSIVE_MASK_BATCH, &o3m__v1__mask_batch_request__descriptor,
       &o3m__v1__mask_batch_reply__descriptor, h_mask_batch},
  };
  o3m_rpc_server_config sc;
  o3m_rpc_server_config_default(&sc);
  sc.listen = listen;
  sc.insecure = insecure;
  if (!insecure) sc.tls = o3m_rpc_tls_of_party(cfg, me);
  if (o3m_rpc_server_create(&srv, &sc, methods, 2, NULL, &e) < 0) {
    fprintf(stderr, "flap_party: listen %s: %s\n", listen, o3m_err_message(&e));
    return 1;
  }
  signal(SIGTERM, on_signal);
  signal(SIGINT, on_signal);
  if (ready) {
    /* Written aside and renamed, so a reader never sees it empty. */
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", ready);
    FILE *f = fopen(tmp, "w");
    if (!f) return 1;
    fprintf(f, "%d\n", o3m_rpc_server_port(srv));
    if (fclose(f) != 0 || rename(tmp, ready) != 0) return 1;
  }
  o3m_rpc_server_run(srv);
  o3m_rpc_server_destroy(srv);
  o3m_rpc_client_destroy(up);
  uint64_t max = 0;
  for (int i = 0; i < n_ids; i++) {
    if (id_count[i] > max) max = id_count[i];
    free(ids[i]);
  }
  FILE *f = counts ? fopen(counts, "w") : stdout;
  if (f) {
    fprintf(f, "batches %llu\nitems %llu\ndistinct %d\nmax_per_item %llu\nepochs %llu\n",
            (unsigned long long)batches, (unsigned long long)items, n_ids,
            (unsigned long long)max, (unsigned long long)epochs);
    if (f != stdout) fclose(f);
  }
  o3m_config_destroy(cfg);
  return 0;
}
