/* fed_nats.c -- see fed_nats.h. */
#include "fed_nats.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <stdio.h>
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

static void spawn_node(fed_nats *n, int i) {
  char name[32], store[512], port[16], cluster[64], routes[256] = "";
  snprintf(name, sizeof name, "nats-n%d", i + 1);
  snprintf(store, sizeof store, "%s/%s", fed_dir(), name);
  snprintf(port, sizeof port, "%d", n->port[i]);
  snprintf(cluster, sizeof cluster, "nats://127.0.0.1:%d", n->cport[i]);
  for (int j = 0; j < FED_NATS_NODES; j++) {
    if (j == i) continue;
    size_t l = strlen(routes);
    snprintf(routes + l, sizeof routes - l, "%snats://127.0.0.1:%d", l ? "," : "", n->cport[j]);
  }
  const char *args[] = {"-js", "-sd", store, "-n", name, "-a", "127.0.0.1", "-p", port,
                        "--cluster_name", "o3m", "--cluster", cluster, "--routes", routes,
                        NULL};
  fed_spawn(&n->proc[i], name, NATS_BIN, args);
}

static void wait_node(fed_nats *n, int i) {
  for (int waited = 0; !port_open(n->port[i]); waited += 50) {
    cr_assert_lt(waited, 20000, "nats node %d not listening after 20 s:\n%s", i + 1,
                 fed_log(&n->proc[i]));
    cr_assert_gt(n->proc[i].pid, 0, "nats node %d exited:\n%s", i + 1, fed_log(&n->proc[i]));
    fed_sleep_ms(50);
  }
}

void fed_nats_start(fed_nats *n) {
  cr_assert_eq(access(NATS_BIN, X_OK), 0, "%s is not installed: apt-get install nats-server "
               "(scripts/setup-deps.sh lists it)", NATS_BIN);
  memset(n, 0, sizeof *n);
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
