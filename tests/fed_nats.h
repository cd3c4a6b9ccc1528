/* fed_nats.h -- a 3-node NATS JetStream cluster for end-to-end tests.
 *
 * fed_nats_start starts three nats-server processes (the system's
 * /usr/sbin/nats-server) on loopback, on free client and cluster ports,
 * each with JetStream and a store of its own under fed_dir()/nats-NAME,
 * routed to each other as one cluster, and waits until each accepts
 * connections. Every node runs the deployment's own config,
 * deploy/nats/o3m-nats.conf: mutual TLS for clients and routes, and only
 * the certificate of party "ap" may connect as a client, as the replicas'
 * user, and that of FED_NATS_ADMIN as the administrative user. The nodes'
 * certificates (nats-n1..3, each also naming "nats") are made in
 * fed_dir()/CERTS by scripts/make-certs.sh, with the CA found there, or a
 * new one: "certs" is the federation's (fed_net_prepare reuses its CA),
 * another subdirectory gives the cluster a CA the federation does not
 * trust. The processes are fed_procs (fed_proc.h): fed_stop kills one,
 * fed_cleanup all. fed_nats_setup then creates the stream and the bucket
 * as a deployment does, with o3m-cli nats-setup and the administrative
 * certificate (FED_NATS_ADMIN, made next to the nodes'). A node stopped with fed_stop can be started again with
 * fed_nats_restart on the same ports and store. A test asks for the
 * cluster only when nats-server is installed; when it is not, the test
 * fails with a message naming the package (never skipped silently). */
#ifndef FED_NATS_H
#define FED_NATS_H

#include "fed_proc.h"

#define FED_NATS_NODES 3
/* The administrative identity's name (CN), O3M_NATS_ADMIN of the nodes. */
#define FED_NATS_ADMIN "o3m-admin"

typedef struct fed_nats {
  fed_proc proc[FED_NATS_NODES];
  int port[FED_NATS_NODES];    /* client ports */
  int cport[FED_NATS_NODES];   /* cluster ports */
  char urls[256];              /* "nats://127.0.0.1:P1,nats://...": nats_servers */
  char certs[64];              /* the certificates' subdirectory of fed_dir() */
} fed_nats;

/* Starts the cluster (see above) with its certificates made in
 * fed_dir()/CERTS and fills n. */
void fed_nats_start(fed_nats *n, const char *certs);

/* Runs o3m-cli --config conf --cert/--key of FED_NATS_ADMIN nats-setup
 * against the cluster (conf: a federation config with replication = nats
 * and these servers) and asserts that it succeeds. */
void fed_nats_setup(fed_nats *n, const char *conf);

/* Starts node i again (after fed_stop) on its ports and store. */
void fed_nats_restart(fed_nats *n, int i);

#endif
