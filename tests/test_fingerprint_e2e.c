/* test_fingerprint_e2e.c -- the federation fingerprint end to end, so that
 * inconsistent copies of the config are refused at start
 * (crypto/o3m_fingerprint.h, SECURITY.md "Federation fingerprint").
 *
 * The attack: a config author hands pp1 a copy of federation.conf in which
 * pp2's agg_public is another key (one the author holds), which would remove
 * the masks between pp1 and pp2. Every test starts the real daemons of
 * fed_proc.h's federation (o3m-pmg, o3m-active "ap", o3m-passive "pp1" and
 * "pp2") on loopback with mutual TLS:
 * - pp1 started with that copy does not start: it finds the PMG's
 *   fingerprint different from its own and exits 1 naming both; the PMG, asked
 *   directly with pp1's certificate for a block under that copy's
 *   fingerprint, refuses (STATE, both named) and serves it under the shared
 *   one;
 * - a pp1 that already holds its block (state_dir) and restarts with that
 *   copy is refused by the AP at the AP's start, naming pp1 and both
 *   fingerprints;
 * - o3m-cli info prints the AP's fingerprint, the shared config's, and
 *   o3m-cli fingerprint prints a config's offline, with the fields it
 *   covers. */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fed_proc.h"
#include "o3m.pb-c.h"
#include "o3m_rpc.h"
#include "o3m_seal.h"
#include "o3m_wire.h"

static fed_net fed;

static void fed_down(void) {
  for (int p = FED_N_PARTIES - 1; p >= 0; p--) fed_stop(&fed.proc[p], SIGTERM, 5000);
  fed_cleanup();
}

TestSuite(fingerprint_e2e, .fini = fed_down, .timeout = 180);

/* The key the author gives pp1 for pp2 (any valid X25519 public key). */
#define OTHER_KEY "7777777777777777777777777777777777777777777777777777777777777777"

/* Writes the federation (state dirs if asked) and fed_dir()/pp1.conf, the
 * shared config with pp2's agg_public replaced by OTHER_KEY. Puts the first
 * O3M_FINGERPRINT_SHORT hex digits of both fingerprints into shared_hex and
 * pp1_hex, and the full ones into the byte arrays if not NULL. */
static void prepare(int state_dirs, char *shared_hex, char *pp1_hex,
                    unsigned char *shared_fp, unsigned char *pp1_fp) {
  fed_setup s = {.table_seed = 500, .pp1_users = FED_USERS, .deadline_ms = 2000,
                 .policy = "algo = linucb\nmodel = shared\n", .pending_capacity = 100,
                 .state_dirs = state_dirs};
  fed_net_prepare(&fed, &s);
  char cmd[2048];
  snprintf(cmd, sizeof cmd,
           "sed '/^\\[party pp2\\]$/,/^\\[/ s/^agg_public = .*/agg_public = " OTHER_KEY "/' "
           "'%s' > '%s/pp1.conf' && ! cmp -s '%s' '%s/pp1.conf'",
           fed.conf, fed_dir(), fed.conf, fed_dir());
  cr_assert(eq(int, system(cmd), 0), "%s", cmd);
  unsigned char a[O3M_FINGERPRINT_BYTES], b[O3M_FINGERPRINT_BYTES];
  fed_fingerprint(fed.conf, a);
  fed_fingerprint(fed_path("pp1.conf"), b);
  char hex[O3M_FINGERPRINT_HEX];
  o3m_fingerprint_hex(a, hex);
  memcpy(shared_hex, hex, O3M_FINGERPRINT_SHORT);
  shared_hex[O3M_FINGERPRINT_SHORT] = '\0';
  o3m_fingerprint_hex(b, hex);
  memcpy(pp1_hex, hex, O3M_FINGERPRINT_SHORT);
  pp1_hex[O3M_FINGERPRINT_SHORT] = '\0';
  cr_assert(not(eq(str, shared_hex, pp1_hex)), "the two configs have one fingerprint");
  if (shared_fp) memcpy(shared_fp, a, sizeof a);
  if (pp1_fp) memcpy(pp1_fp, b, sizeof b);
}

/* The output of `o3m-cli ARGS` (static buffer); fails unless it exits 0. */
static const char *cli(const char *args) {
  static char out[8192];
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "'%s/o3m-cli' %s 2>&1", O3M_BIN_DIR, args);
  FILE *f = popen(cmd, "r");
  cr_assert(not(eq(ptr, f, NULL)));
  size_t n = fread(out, 1, sizeof out - 1, f);
  out[n] = '\0';
  cr_assert(eq(int, pclose(f), 0), "%s:\n%s", cmd, out);
  return out;
}

/* p's whole log (static buffer), for the error line at its end. */
static const char *whole_log(int p) {
  static char buf[1 << 16];
  FILE *f = fopen(fed.proc[p].log, "r");
  cr_assert(not(eq(ptr, f, NULL)), "%s", fed.proc[p].log);
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

/* GetBlock of pp1 (slot 1 of the partition 3,2,3) with pp1's certificate,
 * stating fingerprint fp. */
static int get_block_as_pp1(const unsigned char *fp, o3m_err *e) {
  char target[64];
  snprintf(target, sizeof target, "127.0.0.1:%d", fed.port[FED_PMG]);
  o3m_rpc_client *c = fed_client(target, "certs", "certs", "pp1", "pmg", 10000);
  o3m_partition part;
  int dims[3] = {3, 2, 3};
  cr_assert(eq(int, o3m_partition_from_dims(&part, 3, dims, e), 0));
  o3m_block *blk = NULL;
  o3m_err_clear(e);
  int rc = o3m_wire_get_block(c, &part, 1, fp, &blk, e);
  o3m_block_destroy(blk);
  o3m_rpc_client_destroy(c);
  return rc;
}

Test(fingerprint_e2e, pp_with_another_key_for_a_peer_gets_no_block) {
  char shared[O3M_FINGERPRINT_HEX], mine[O3M_FINGERPRINT_HEX];
  unsigned char shared_fp[O3M_FINGERPRINT_BYTES], pp1_fp[O3M_FINGERPRINT_BYTES];
  prepare(0, shared, mine, shared_fp, pp1_fp);
  /* Offline, before any daemon: what pp1's operator would compare. */
  char args[1024], want[256];
  snprintf(args, sizeof args, "--config '%s' fingerprint", fed_path("pp1.conf"));
  const char *out = cli(args);
  snprintf(want, sizeof want, "\nfingerprint=%s", mine);
  cr_assert(not(eq(ptr, strstr(out, want), NULL)), "want '%s' in:\n%s", want, out);
  cr_assert(not(eq(ptr, strstr(out, "party=pp2 role=passive dims=3 max_norm=10000 agg_public="
                                    OTHER_KEY " tables="), NULL)), "%s", out);
  cr_assert(eq(ptr, strstr(out, ".csv"), NULL), "a path in:\n%s", out);
  static const char *const pmg_args[] = {"--keep-mask", NULL};
  fed_net_start(&fed, FED_PMG, pmg_args);
  fed_wait_ready(&fed.proc[FED_PMG], 20000);

  /* pp1 compares the PMG's Info with its own config first. */
  static const char *const pp_args[] = {"--pmg-timeout-s", "20", NULL};
  fed_net_start_conf(&fed, FED_PP1, fed_path("pp1.conf"), pp_args);
  cr_assert(eq(int, fed_wait_exit(&fed.proc[FED_PP1], 20000), 1), "%s",
            fed_log(&fed.proc[FED_PP1]));
  snprintf(want, sizeof want,
           "federation fingerprint mismatch: peer has %s..., this party %s...", shared,
           mine);
  const char *log = whole_log(FED_PP1);
  cr_assert(not(eq(ptr, strstr(log, want), NULL)), "want '%s' in:\n%s", want, log);
  cr_assert(not(eq(ptr, strstr(log, "compare the configs"), NULL)), "log:\n%s", log);
  char line[128];
  snprintf(line, sizeof line, "federation fingerprint: %s...", mine);
  cr_assert(not(eq(ptr, strstr(log, line), NULL)), "log:\n%s", log);

  /* The PMG refuses a GetBlock that states that copy's fingerprint. */
  o3m_err e;
  int rc = get_block_as_pp1(pp1_fp, &e);
  cr_assert(eq(int, rc, O3M_ESTATE), "GetBlock: %s: %s", o3m_errname(rc), o3m_err_message(&e));
  snprintf(want, sizeof want,
           "federation fingerprint mismatch: BlockRequest: party 1 has %s..., this party %s...",
           mine, shared);
  cr_assert(not(eq(ptr, strstr(e.msg, want), NULL)), "want '%s' in: %s", want, e.msg);
  log = whole_log(FED_PMG);
  cr_assert(not(eq(ptr, strstr(log, "refused GetBlock of party 1"), NULL)), "log:\n%s", log);
  /* The same request under the shared config's fingerprint is served. */
  rc = get_block_as_pp1(shared_fp, &e);
  cr_assert(eq(int, rc, 0), "GetBlock: %s: %s", o3m_errname(rc), o3m_err_message(&e));
}

Test(fingerprint_e2e, ap_refuses_a_pp_whose_config_differs) {
  char shared[O3M_FINGERPRINT_HEX], mine[O3M_FINGERPRINT_HEX];
  prepare(1, shared, mine, NULL, NULL);
  static const char *const pmg_args[] = {"--keep-mask", NULL};
  fed_net_start(&fed, FED_PMG, pmg_args);
  fed_wait_ready(&fed.proc[FED_PMG], 20000);
  for (int p = FED_AP; p < FED_N_PARTIES; p++) fed_net_start(&fed, p, NULL);
  for (int p = FED_AP; p < FED_N_PARTIES; p++) fed_wait_ready(&fed.proc[p], 30000);

  /* o3m-cli info prints the AP's fingerprint: the shared config's. */
  char args[1024], want[256];
  snprintf(args, sizeof args, "--config '%s' --as " FED_CLIENT " info", fed.conf);
  const char *out = cli(args);
  snprintf(want, sizeof want, "\nfingerprint=%s", shared);
  cr_assert(not(eq(ptr, strstr(out, want), NULL)), "want '%s' in:\n%s", want, out);
  /* The role as the config spells it, not the wire's number. */
  cr_assert(not(eq(ptr, strstr(out, "role=active\n"), NULL)), "want 'role=active' in:\n%s", out);

  /* pp1 restarts from its stored block (the PMG is not asked) with the
   * other copy; the AP, restarting, checks every PP's Info. */
  cr_assert(eq(int, fed_stop(&fed.proc[FED_AP], SIGTERM, 5000), 0));
  cr_assert(eq(int, fed_stop(&fed.proc[FED_PP1], SIGTERM, 5000), 0));
  fed_net_start_conf(&fed, FED_PP1, fed_path("pp1.conf"), NULL);
  fed_wait_ready(&fed.proc[FED_PP1], 30000);
  fed_net_start(&fed, FED_AP, NULL);
  cr_assert(eq(int, fed_wait_exit(&fed.proc[FED_AP], 20000), 1), "%s",
            fed_log(&fed.proc[FED_AP]));
  snprintf(want, sizeof want,
           "passive party 'pp1': federation fingerprint mismatch: peer has %s..., this party "
           "%s...",
           mine, shared);
  const char *log = whole_log(FED_AP);
  cr_assert(not(eq(ptr, strstr(log, want), NULL)), "want '%s' in:\n%s", want, log);
}
