/* test_startup.c -- what a daemon refuses at start.
 *
 * One daemon per port: a second daemon of the same config exits 1 at once
 * with "address in use" and the port, and the first one keeps serving
 * (gRPC's default SO_REUSEPORT used to let the second bind the port too and
 * take half of the calls). A port the test picked is its own until the
 * daemon binds it (fed_free_port's reservation). A TLS file that is wrong
 * gives a message naming the file, distinct from that listen message.
 *
 * Certificates are checked at start: a key that is not the certificate's, a
 * certificate of another CA, an expired or not yet valid certificate, and
 * one issued to another name each stop the daemon at once with a message
 * saying which check failed and naming the file (before, a wrong CA showed
 * only at the first call). The cases are spread over o3m-pmg, o3m-passive,
 * o3m-active and o3m-cli; the federation with good certificates starts.
 *
 * The tests use the AP tests' federation (fed_proc.h): certificates in
 * fed_dir()/certs, config federation.conf. A bad case overwrites the files
 * of one party in certs/, so the config stays the one that works. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fed_proc.h"
#include "health.pb-c.h"
#include "o3m_rpc.h"

TestSuite(startup, .fini = fed_cleanup, .timeout = 90);

/* How long a refused start may take: the checks run before anything
 * connects, so this is process start-up plus the load of the machine. */
#define REFUSE_MS 5000

static fed_net net;

static void prepare(void) {
  fed_setup s = {.table_seed = 7, .pp1_users = FED_USERS, .deadline_ms = 2000,
                 .policy = "algo = linucb\nmodel = shared\n", .pending_capacity = 100,
                 .state_dirs = 0};
  fed_net_prepare(&net, &s);
}

/* Runs a shell command in fed_dir() and asserts that it succeeded. */
static void sh(const char *fmt, const char *a, const char *b) {
  char cmd[4096], full[4600];
  snprintf(cmd, sizeof cmd, fmt, a, b);
  snprintf(full, sizeof full, "cd '%s' && (%s) >>openssl.log 2>&1", fed_dir(), cmd);
  int rc = system(full);
  cr_assert_eq(rc, 0, "failed (%d): %s", rc, cmd);
}

/* Replaces certs/NAME.pem by a certificate for the same key and CN, signed
 * by the federation CA, valid from start to end ("YYYYMMDDHHMMSSZ"):
 * `openssl ca` is the OpenSSL 3.0 tool that takes both dates. */
static void resign_with_dates(const char *name, const char *start, const char *end) {
  sh("mkdir -p %s%s", "dates", "");
  fed_write("dates/index.txt", "");
  fed_write("dates/ca.cnf",
            "[ca]\ndefault_ca = fed\n"
            "[fed]\ndatabase = dates/index.txt\nserial = dates/serial\nnew_certs_dir = dates\n"
            "default_md = sha256\n"
            "policy = any\nunique_subject = no\ncopy_extensions = none\n"
            "x509_extensions = party\n"
            "[any]\ncommonName = supplied\n"
            "[party]\nbasicConstraints = critical, CA:FALSE\n"
            "keyUsage = critical, digitalSignature\n"
            "extendedKeyUsage = serverAuth, clientAuth\n"
            "subjectAltName = DNS:localhost, IP:127.0.0.1\n");
  sh("openssl req -new -key certs/%s.key -subj /CN=%s -out dates/party.csr", name, name);
  char dates[128];
  snprintf(dates, sizeof dates, "-startdate %s -enddate %s", start, end);
  sh("openssl ca -batch -notext -rand_serial -config dates/ca.cnf -cert certs/ca.pem "
     "-keyfile certs/ca.key -in dates/party.csr -out certs/%s.pem %s",
     name, dates);
}

/* Starts party p (extra arguments as for fed_net_start) and asserts that
 * it exits 1 within REFUSE_MS with every one of the NULL-terminated
 * strings in its log. */
static void assert_refused(int p, const char *const *extra, const char *const *expect) {
  fed_proc *pr = &net.proc[p];
  double t0 = fed_now_s();
  fed_net_start(&net, p, extra);
  int rc = fed_wait_exit(pr, REFUSE_MS);
  double dt = fed_now_s() - t0;
  cr_assert_eq(rc, 1, "%s: exit %d after %.1f s, expected 1 within %d ms:\n%s",
               fed_party_name[p], rc, dt, REFUSE_MS, fed_log(pr));
  for (int i = 0; expect[i]; i++)
    cr_assert(strstr(fed_log(pr), expect[i]), "%s: no \"%s\" in its log:\n%s",
              fed_party_name[p], expect[i], fed_log(pr));
}

/* A second copy of a running party, with the same config: it must exit 1
 * within REFUSE_MS with "address in use" and the port in its log. */
static void assert_second_refused(int p, fed_proc *second) {
  char name[64];
  snprintf(name, sizeof name, "%s-again", fed_party_name[p]);
  const char *const args[] = {"--config", net.conf, "--party", fed_party_name[p], NULL};
  static const char *const exe[FED_N_PARTIES] = {"o3m-pmg", "o3m-active", "o3m-passive",
                                                 "o3m-passive"};
  double t0 = fed_now_s();
  fed_spawn(second, name, exe[p], args);
  int rc = fed_wait_exit(second, REFUSE_MS);
  double dt = fed_now_s() - t0;
  if (rc < 0) fed_stop(second, SIGKILL, 2000);
  cr_assert_eq(rc, 1, "second %s: exit %d after %.1f s, expected 1 within %d ms:\n%s",
               fed_party_name[p], rc, dt, REFUSE_MS, fed_log(second));
  char port[64];
  snprintf(port, sizeof port, "port %d", net.port[p]);
  cr_assert(strstr(fed_log(second), "address in use"), "%s", fed_log(second));
  cr_assert(strstr(fed_log(second), port), "no \"%s\" in:\n%s", port, fed_log(second));
  /* A listen error, not a TLS one. */
  cr_assert_null(strstr(fed_log(second), "certificate"), "%s", fed_log(second));
  /* Only the clear message, not gRPC's error tree of the same
   * bind before it (about 600 characters at ERROR). */
  cr_assert_null(strstr(fed_log(second), "No address added"), "%s", fed_log(second));
}

/* The health status of the daemon at port, asked as "client" (every
 * federation certificate may ask), expecting server_name in its
 * certificate; or the negative code of the failed call. */
static int health(int port, const char *server_name) {
  char target[64];
  snprintf(target, sizeof target, "127.0.0.1:%d", port);
  o3m_rpc_client *c = fed_client(target, "certs", "certs", "client", server_name, 5000);
  Grpc__Health__V1__HealthCheckRequest req = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
  req.service = "";
  ProtobufCMessage *m;
  o3m_err e;
  o3m_err_clear(&e);
  int rc = o3m_rpc_client_call(c, O3M_RPC_HEALTH_CHECK_PATH, &req.base,
                               &grpc__health__v1__health_check_response__descriptor, &m, &e);
  if (rc == 0) rc = (int)((const Grpc__Health__V1__HealthCheckResponse *)m)->status;
  o3m_rpc_client_destroy(c);
  return rc;
}

#define SERVING GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING

/* ------------------------------------------------------------ item 5 */

/* The federation with good certificates starts (every daemon kind passes
 * the certificate check); a second o3m-passive and a second o3m-pmg on the
 * ports of the running ones exit 1 with "address in use" and the port, and
 * the first ones answer every health check afterwards. */
Test(startup, a_second_daemon_on_a_port_exits_with_address_in_use) {
  prepare();
  static const char *const ap_args[] = {"--pmg-timeout-s", "20", NULL};
  /* --keep-mask: a second passive daemon would get its block too and serve,
   * as it did when it could share the port. */
  static const char *const pmg_args[] = {"--keep-mask", NULL};
  fed_net_start(&net, FED_PMG, pmg_args);
  fed_wait_ready(&net.proc[FED_PMG], 10000);
  fed_net_start(&net, FED_PP1, NULL);
  fed_net_start(&net, FED_PP2, NULL);
  fed_net_start(&net, FED_AP, ap_args);
  for (int p = FED_AP; p < FED_N_PARTIES; p++) fed_wait_ready(&net.proc[p], 20000);

  fed_proc second;
  assert_second_refused(FED_PP1, &second);
  assert_second_refused(FED_PMG, &second);
  /* Had the second daemon shared the port, about half of these would have
   * gone to it (and failed once it was killed, or been answered by it). */
  for (int i = 0; i < 20; i++) {
    cr_assert_eq(health(net.port[FED_PP1], "pp1"), SERVING, "health check %d of pp1", i);
    cr_assert_eq(health(net.port[FED_PMG], "pmg"), SERVING, "health check %d of pmg", i);
  }
  cr_assert_eq(health(net.port[FED_AP], "ap"), SERVING);
  for (int p = 0; p < FED_N_PARTIES; p++)
    cr_assert_eq(fed_stop(&net.proc[p], SIGTERM, 10000), 0, "%s:\n%s", fed_party_name[p],
                 fed_log(&net.proc[p]));
}

/* The ports a test picks stay its own until its daemons bind them
 * (fed_free_port): another process's bind of one fails, as its port-0
 * binds never get one, and the daemon still binds it and serves. Before,
 * the port was let go at once and anyone could take it first. */
Test(startup, a_picked_port_stays_reserved_and_the_daemon_binds_it) {
  prepare();
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  cr_assert_geq(fd, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)net.port[FED_PMG])};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int rc = bind(fd, (struct sockaddr *)&a, sizeof a), err = errno;
  close(fd);
  cr_assert(rc != 0 && err == EADDRINUSE, "another process could bind the pmg's port %d before "
            "the pmg (bind: %s)", net.port[FED_PMG], rc == 0 ? "succeeded" : strerror(err));
  fed_net_start(&net, FED_PMG, NULL);
  cr_assert_eq(fed_wait_ready(&net.proc[FED_PMG], 10000), net.port[FED_PMG]);
  cr_assert_eq(health(net.port[FED_PMG], "pmg"), SERVING);
  cr_assert_eq(fed_stop(&net.proc[FED_PMG], SIGTERM, 10000), 0, "%s", fed_log(&net.proc[FED_PMG]));
}

/* A certificate file that is not PEM: the message names the file and says
 * what is wrong with it, and is not a listen message. */
Test(startup, a_garbage_certificate_is_a_tls_error_naming_the_file) {
  prepare();
  fed_write("certs/pp2.pem", "this is not a certificate\n");
  static const char *const expect[] = {"certs/pp2.pem", "no PEM certificate", NULL};
  assert_refused(FED_PP2, NULL, expect);
  cr_assert_null(strstr(fed_log(&net.proc[FED_PP2]), "listen"), "%s",
                 fed_log(&net.proc[FED_PP2]));
  cr_assert_null(strstr(fed_log(&net.proc[FED_PP2]), "address in use"), "%s",
                 fed_log(&net.proc[FED_PP2]));
}

/* The same two errors from the RPC layer itself, in process: a port held
 * by another server is O3M_EIO naming the address and the port; a garbage
 * key is O3M_ETLS naming the key file. */
static int no_handler(void *ctx, o3m_rpc_call *call, const ProtobufCMessage *req,
                      ProtobufCMessage *reply, o3m_err *e) {
  (void)ctx, (void)call, (void)req, (void)reply, (void)e;
  return 0;
}

Test(startup, the_rpc_layer_tells_listen_and_tls_errors_apart) {
  static const o3m_rpc_method methods[] = {
      {"/o3m.test.Startup/Nothing", &grpc__health__v1__health_check_request__descriptor,
       &grpc__health__v1__health_check_response__descriptor, no_handler},
  };
  o3m_rpc_server_config sc;
  o3m_rpc_server_config_default(&sc);
  sc.listen = "127.0.0.1:0";
  sc.insecure = 1;
  o3m_rpc_server *first, *second = NULL;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert_eq(o3m_rpc_server_create(&first, &sc, methods, 1, NULL, &e), 0, "%s",
               o3m_err_message(&e));
  char listen_at[64], addr[80], port[32];
  snprintf(listen_at, sizeof listen_at, "127.0.0.1:%d", o3m_rpc_server_port(first));
  snprintf(addr, sizeof addr, "listen %s:", listen_at);
  snprintf(port, sizeof port, "port %d", o3m_rpc_server_port(first));
  sc.listen = listen_at;
  int rc = o3m_rpc_server_create(&second, &sc, methods, 1, NULL, &e);
  cr_assert_eq(rc, O3M_EIO, "second server on %s: %s (%s)", listen_at, o3m_errname(rc),
               o3m_err_message(&e));
  cr_assert_null(second);
  cr_assert(strstr(e.msg, addr) && strstr(e.msg, "address in use") && strstr(e.msg, port),
            "%s", e.msg);
  o3m_rpc_server_destroy(first);

  /* The same for a unix socket path, which gRPC would otherwise unlink
   * and bind anew, cutting the first server off. */
  char unix_at[600];
  snprintf(unix_at, sizeof unix_at, "unix:%s/o3m.sock", fed_dir());
  sc.listen = unix_at;
  cr_assert_eq(o3m_rpc_server_create(&first, &sc, methods, 1, NULL, &e), 0, "%s",
               o3m_err_message(&e));
  rc = o3m_rpc_server_create(&second, &sc, methods, 1, NULL, &e);
  if (rc == 0) o3m_rpc_server_destroy(second);
  cr_assert_eq(rc, O3M_EIO, "second server on %s: %s (%s)", unix_at, o3m_errname(rc),
               o3m_err_message(&e));
  cr_assert(strstr(e.msg, "address in use") && strstr(e.msg, unix_at), "%s", e.msg);
  o3m_rpc_server_destroy(first);

  fed_make_certs("certs", "srv");
  const char *key = fed_write("certs/srv.key", "-----BEGIN PRIVATE KEY-----\nnot base64\n");
  char pem[512], ca[512];
  snprintf(pem, sizeof pem, "%s/certs/srv.pem", fed_dir());
  snprintf(ca, sizeof ca, "%s/certs/ca.pem", fed_dir());
  sc.listen = "127.0.0.1:0";
  sc.insecure = 0;
  sc.tls.ca_file = ca;
  sc.tls.cert_file = pem;
  sc.tls.key_file = key;
  rc = o3m_rpc_server_create(&second, &sc, methods, 1, NULL, &e);
  cr_assert_eq(rc, O3M_ETLS, "%s (%s)", o3m_errname(rc), o3m_err_message(&e));
  cr_assert(strstr(e.msg, key) && !strstr(e.msg, "listen"), "%s", e.msg);
}

/* ------------------------------------------------------------ item 6 */

/* o3m-passive holding pp2's key for its own certificate. */
Test(startup, a_key_of_another_certificate_is_refused) {
  prepare();
  sh("cp certs/%s.key certs/%s.key", "pp2", "pp1");
  static const char *const expect[] = {"certs/pp1.key does not match certificate",
                                       "certs/pp1.pem", NULL};
  assert_refused(FED_PP1, NULL, expect);
}

/* A private key that group or others may read was once
 * accepted. Now the daemon exits 1 naming the key file, its mode and the
 * fix; in process, the RPC layer refuses it for a server and a client with
 * O3M_EPERM. */
Test(startup, regression_a_group_readable_key_is_refused_naming_chmod) {
  prepare();
  sh("chmod %s certs/%s.key", "640", "pp2");
  static const char *const expect[] = {"certs/pp2.key: mode 640 lets group or others read it",
                                       "chmod 600", NULL};
  assert_refused(FED_PP2, NULL, expect);

  static const o3m_rpc_method methods[] = {
      {"/o3m.test.Startup/Nothing", &grpc__health__v1__health_check_request__descriptor,
       &grpc__health__v1__health_check_response__descriptor, no_handler},
  };
  char pem[512], key[512], ca[512];
  snprintf(pem, sizeof pem, "%s/certs/client.pem", fed_dir());
  snprintf(key, sizeof key, "%s/certs/client.key", fed_dir());
  snprintf(ca, sizeof ca, "%s/certs/ca.pem", fed_dir());
  cr_assert_eq(chmod(key, 0604), 0);
  o3m_rpc_server_config sc;
  o3m_rpc_server_config_default(&sc);
  sc.listen = "127.0.0.1:0";
  sc.tls.ca_file = ca;
  sc.tls.cert_file = pem;
  sc.tls.key_file = key;
  o3m_rpc_server *srv = NULL;
  o3m_err e;
  o3m_err_clear(&e);
  int rc = o3m_rpc_server_create(&srv, &sc, methods, 1, NULL, &e);
  if (rc == 0) o3m_rpc_server_destroy(srv);
  cr_assert_eq(rc, O3M_EPERM, "%s (%s)", o3m_errname(rc), o3m_err_message(&e));
  cr_assert(strstr(e.msg, key) && strstr(e.msg, "mode 604") && strstr(e.msg, "chmod 600"), "%s",
            e.msg);
  o3m_rpc_client_config cc;
  o3m_rpc_client_config_default(&cc);
  cc.target = "127.0.0.1:1";
  cc.tls = sc.tls;
  cc.tls.server_name = "ap";
  o3m_rpc_client *cl = NULL;
  rc = o3m_rpc_client_create(&cl, &cc, &e);
  if (rc == 0) o3m_rpc_client_destroy(cl);
  cr_assert_eq(rc, O3M_EPERM, "%s (%s)", o3m_errname(rc), o3m_err_message(&e));
  cr_assert(strstr(e.msg, key) && strstr(e.msg, "chmod 600"), "%s", e.msg);
}

/* o3m-pmg with a certificate and key from another CA (its own CN). */
Test(startup, a_certificate_of_another_ca_is_refused) {
  prepare();
  fed_make_certs("evil", "pmg");
  sh("cp evil/%s.pem evil/%s.key certs/", "pmg", "pmg");
  static const char *const expect[] = {"certs/pmg.pem does not chain to the federation CA",
                                       "certs/ca.pem", NULL};
  assert_refused(FED_PMG, NULL, expect);
}

/* o3m-active with a certificate that expired at the end of 2021. */
Test(startup, an_expired_certificate_is_refused) {
  prepare();
  resign_with_dates("ap", "20200101000000Z", "20211231235959Z");
  static const char *const expect[] = {
      "certs/ap.pem expired: valid until 2021-12-31 23:59:59 UTC", NULL};
  static const char *const args[] = {"--pmg-timeout-s", "20", NULL};
  assert_refused(FED_AP, args, expect);
}

/* o3m-passive with a certificate valid only from 2099. */
Test(startup, a_certificate_not_yet_valid_is_refused) {
  prepare();
  resign_with_dates("pp2", "20990101000000Z", "21000101000000Z");
  static const char *const expect[] = {
      "certs/pp2.pem is not yet valid: valid from 2099-01-01 00:00:00 UTC", NULL};
  assert_refused(FED_PP2, NULL, expect);
}

/* o3m-passive pp1 presenting pp2's certificate and key: a good pair of the
 * federation, but peers would take it for pp2. */
Test(startup, a_certificate_for_another_name_is_refused) {
  prepare();
  sh("cp certs/%s.pem certs/pp1.pem && cp certs/%s.key certs/pp1.key", "pp2", "pp2");
  static const char *const expect[] = {
      "certs/pp1.pem is issued to CN 'pp2', not to the party name 'pp1'", NULL};
  assert_refused(FED_PP1, NULL, expect);
}

/* o3m-active with the certificate of the PMG: the name check holds for the
 * active daemon too. */
Test(startup, the_active_daemon_checks_its_name_too) {
  prepare();
  sh("cp certs/%s.pem certs/ap.pem && cp certs/%s.key certs/ap.key", "pmg", "pmg");
  static const char *const expect[] = {"is issued to CN 'pmg', not to the party name 'ap'",
                                       NULL};
  assert_refused(FED_AP, NULL, expect);
}

/* --insecure skips the check: the expired certificate does not matter to a
 * plaintext daemon. */
Test(startup, insecure_skips_the_certificate_check) {
  prepare();
  resign_with_dates("pmg", "20200101000000Z", "20211231235959Z");
  static const char *const args[] = {"--insecure", NULL};
  fed_net_start(&net, FED_PMG, args);
  fed_wait_ready(&net.proc[FED_PMG], 10000);
  cr_assert_eq(fed_stop(&net.proc[FED_PMG], SIGTERM, 10000), 0, "%s",
               fed_log(&net.proc[FED_PMG]));
}

/* o3m-cli with an expired client certificate: named before any call. */
Test(startup, the_cli_checks_its_client_certificate) {
  prepare();
  resign_with_dates("client", "20200101000000Z", "20211231235959Z");
  char pem[512], key[512], ca[512], target[64];
  snprintf(pem, sizeof pem, "%s/certs/client.pem", fed_dir());
  snprintf(key, sizeof key, "%s/certs/client.key", fed_dir());
  snprintf(ca, sizeof ca, "%s/certs/ca.pem", fed_dir());
  snprintf(target, sizeof target, "127.0.0.1:%d", net.port[FED_AP]);
  char cmd[4096];
  snprintf(cmd, sizeof cmd,
           "'%s/o3m-cli' --cert '%s' --key '%s' --ca '%s' --target %s --server-name ap health "
           ">'%s/cli.out' 2>&1",
           O3M_BIN_DIR, pem, key, ca, target, fed_dir());
  double t0 = fed_now_s();
  int rc = system(cmd);
  double dt = fed_now_s() - t0;
  cr_assert(WIFEXITED(rc) && WEXITSTATUS(rc) == 1, "status %d: %s", rc, cmd);
  cr_assert_lt(dt, REFUSE_MS / 1000.0, "the refusal took %.1f s", dt);
  char out[1024] = "";
  FILE *f = fopen(fed_path("cli.out"), "r");
  cr_assert_not_null(f);
  out[fread(out, 1, sizeof out - 1, f)] = '\0';
  fclose(f);
  cr_assert(strstr(out, "client.pem expired: valid until 2021-12-31"), "%s", out);
}

/* A certificate of the right CN and CA whose SANs leave out the
 * party name passed every start-up check; the PMG then handed out the
 * blocks and every call failed in the handshake ("Peer name pp1 is not in
 * peer certificate"), since peers dial a party by its name. Now each daemon
 * kind exits 1 at start naming the file, the SANs it has and the name
 * expected, followed by the openssl lines that fix it. */
Test(startup, a_certificate_without_the_party_name_among_its_sans_is_refused) {
  prepare();
  static const char *const ap_args[] = {"--pmg-timeout-s", "20", NULL};
  static const struct {
    int party;
    const char *const *args;
    const char *want[4];
  } cases[] = {
      {FED_PP1, NULL, {"certs/pp1.pem has SANs DNS:localhost, IP:127.0.0.1 but not DNS:pp1",
                       "openssl req -new -key", "subjectAltName = DNS:pp1", NULL}},
      {FED_PMG, NULL, {"certs/pmg.pem has SANs DNS:localhost, IP:127.0.0.1 but not DNS:pmg",
                       "subjectAltName = DNS:pmg", NULL}},
      {FED_AP, ap_args, {"certs/ap.pem has SANs DNS:localhost, IP:127.0.0.1 but not DNS:ap",
                         "subjectAltName = DNS:ap", NULL}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    resign_with_dates(fed_party_name[cases[i].party], "20200101000000Z", "20991231235959Z");
    assert_refused(cases[i].party, cases[i].args, cases[i].want);
  }
  /* o3m-cli presenting pp1's certificate (--as pp1) refuses it alike. */
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "'%s/o3m-cli' --config '%s' --as pp1 info >'%s/cli.out' 2>&1",
           O3M_BIN_DIR, net.conf, fed_dir());
  int rc = system(cmd);
  cr_assert(WIFEXITED(rc) && WEXITSTATUS(rc) == 1, "status %d: %s", rc, cmd);
  char out[2048] = "";
  FILE *f = fopen(fed_path("cli.out"), "r");
  cr_assert_not_null(f);
  out[fread(out, 1, sizeof out - 1, f)] = '\0';
  fclose(f);
  cr_assert(strstr(out, "certs/pp1.pem has SANs DNS:localhost, IP:127.0.0.1 but not DNS:pp1") &&
                strstr(out, "subjectAltName = DNS:pp1"),
            "%s", out);
}
