/* fed_nats.c -- see fed_nats.h. */
#include "fed_nats.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define NATS_BIN "/usr/sbin/nats-server"

/* 1 when something accepts TCP connections on 127.0.0.1:port. */
static int port_open(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int ok = connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
  close(fd);
  return ok;
}

/* Runs node i as "env O3M_NATS_...=... nats-server -c o3m-nats.conf ...":
 * the config file takes the TLS files and the cluster address from the
 * environment, the rest comes from the command line (the file's header). */
static void spawn_node(fed_nats *n, int i) {
  char name[32], store[512], port[16], routes[256] = "";
  char env_ca[600], env_cert[600], env_key[600], env_cluster[64], conf[512];
  snprintf(name, sizeof name, "nats-n%d", i + 1);
  snprintf(store, sizeof store, "%s/%s", fed_dir(), name);
  snprintf(port, sizeof port, "%d", n->port[i]);
  snprintf(env_ca, sizeof env_ca, "O3M_NATS_CA=%s/%s/ca.pem", fed_dir(), n->certs);
  snprintf(env_cert, sizeof env_cert, "O3M_NATS_CERT=%s/%s/%s.pem", fed_dir(), n->certs, name);
  snprintf(env_key, sizeof env_key, "O3M_NATS_KEY=%s/%s/%s.key", fed_dir(), n->certs, name);
  snprintf(env_cluster, sizeof env_cluster, "O3M_NATS_CLUSTER=127.0.0.1:%d", n->cport[i]);
  snprintf(conf, sizeof conf, "%s/deploy/nats/o3m-nats.conf", O3M_SOURCE_DIR);
  for (int j = 0; j < FED_NATS_NODES; j++) {
    if (j == i) continue;
    size_t l = strlen(routes);
    snprintf(routes + l, sizeof routes - l, "%snats://127.0.0.1:%d", l ? "," : "", n->cport[j]);
  }
  const char *args[] = {env_ca, env_cert, env_key, env_cluster, "O3M_NATS_REPLICAS=CN=ap",
                        "O3M_NATS_ADMIN=CN=" FED_NATS_ADMIN, NATS_BIN, "-c", conf,
                        "-sd", store, "-n", name, "-a", "127.0.0.1", "-p", port,
                        "--routes", routes, NULL};
  fed_spawn(&n->proc[i], name, "/usr/bin/env", args);
}

static void wait_node(fed_nats *n, int i) {
  for (int waited = 0; !port_open(n->port[i]); waited += 50) {
    cr_assert_lt(waited, 20000, "nats node %d not listening after 20 s:\n%s", i + 1,
                 fed_log(&n->proc[i]));
    cr_assert_gt(n->proc[i].pid, 0, "nats node %d exited:\n%s", i + 1, fed_log(&n->proc[i]));
    fed_sleep_ms(50);
  }
}

void fed_nats_start(fed_nats *n, const char *certs) {
  cr_assert_eq(access(NATS_BIN, X_OK), 0, "%s is not installed: apt-get install nats-server "
               "(scripts/setup-deps.sh lists it)", NATS_BIN);
  memset(n, 0, sizeof *n);
  snprintf(n->certs, sizeof n->certs, "%s", certs);
  fed_make_certs_dns(certs, "nats", "nats-n1 nats-n2 nats-n3");
  fed_make_certs(certs, FED_NATS_ADMIN);
  for (int i = 0; i < FED_NATS_NODES; i++) {
    n->port[i] = fed_free_port();
    n->cport[i] = fed_free_port();
    size_t l = strlen(n->urls);
    snprintf(n->urls + l, sizeof n->urls - l, "%snats://127.0.0.1:%d", l ? "," : "", n->port[i]);
  }
  for (int i = 0; i < FED_NATS_NODES; i++) spawn_node(n, i);
  for (int i = 0; i < FED_NATS_NODES; i++) wait_node(n, i);
}

void fed_nats_restart(fed_nats *n, int i) {
  spawn_node(n, i);
  wait_node(n, i);
}

void fed_nats_setup(fed_nats *n, const char *conf) {
  char cmd[2048], out[4096];
  snprintf(cmd, sizeof cmd, "'%s/o3m-cli' --config '%s' --cert '%s/%s/%s.pem' --key "
           "'%s/%s/%s.key' nats-setup 2>&1", O3M_BIN_DIR, conf, fed_dir(), n->certs,
           FED_NATS_ADMIN, fed_dir(), n->certs, FED_NATS_ADMIN);
  FILE *f = popen(cmd, "r");
  cr_assert_not_null(f, "%s", cmd);
  size_t len = fread(out, 1, sizeof out - 1, f);
  out[len] = '\0';
  int code = pclose(f);
  cr_assert_eq(code, 0, "o3m-cli nats-setup failed (status %d):\n%s", code, out);
}
