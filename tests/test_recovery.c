/* test_recovery.c -- restarts and crashes of the real daemons, end to end.
 *
 * Every test starts a federation on loopback with mutual TLS (fed_proc.h):
 * o3m-pmg (seeded, and WITHOUT --keep-mask, so it forgets Q as soon as the
 * three parties have confirmed their blocks), two o3m-passive and
 * o3m-active, each with its own state_dir: fed_net, which test_active.c
 * uses too. The AP has 2 user + 1 item columns, pp1 2 user columns, pp2
 * 1 user + 2 item columns, d = 8. pp1 knows only the
 * users u0..u19 (u20.. get its dummy rows); the rounds compared with the
 * central model use u0..u19 only, since the central model cannot know pp1's
 * dummy key.
 *
 * "Central" is an in-process o3m_policy (LinUCB, shared model) fed the
 * unmasked contexts, rebuilt from the same CSV files, and the rewards the
 * AP acknowledged, in the order it acknowledged them. Because Q is
 * orthogonal, the AP's decisions, scores and ||theta|| equal the central
 * ones (to rounding) exactly when the AP's model holds exactly the
 * acknowledged rewards.
 *
 * The tests: (a) the AP is SIGKILLed while the PPs keep running and comes
 * back with its stored block (the PMG has forgotten Q and is then stopped
 * too), the same mask id as the PPs, every acknowledged reward and decisions
 * equal to central; decisions pending at the crash get NOT_FOUND. (b) A PP
 * is SIGKILLed and restarted: it answers Mask with bit-identical vectors for
 * a known and an unknown user (same block, same dummy key), and decisions
 * stay equal to central. (c) Batches of rewards are acknowledged and the AP
 * is SIGKILLed right after the last reply, three times, with checkpoints
 * every 5 rewards: Stats updates and ||theta|| equal an in-process replay.
 * (d) A corrupt stored block makes the AP and a PP refuse to start, with a
 * message saying how to recover, and a saved model learned under another
 * mask refuses the start until --discard-state. (f) A journal write that
 * fails (a file size limit stands in for a full disk) answers that reward
 * UNAVAILABLE, unacknowledged, and the AP stops; restarted, it has every
 * acknowledged reward. (g) Acknowledged rewards are never dropped
 * silently: after a SIGKILL the journal is damaged in one of three ways (a
 * byte flipped in its last record, the newest segment cut at a record
 * boundary, the newest segment deleted after a checkpoint; one test each);
 * the AP refuses to start (exit 1, the corruption message) and starts with
 * --salvage, holding exactly the rewards before the damage. (e)
 * Several client threads drive
 * recommend + reward while the AP is SIGKILLed at random moments
 * (O3M_RECOVERY_KILLS, default 3; eval/bench/crash-bench.sh runs 25, with
 * O3M_RECOVERY_MIN_REWARDS acknowledged rewards at least): after
 * each restart every acknowledged reward is in the model exactly once. A
 * reward whose reply was lost in the crash may or may not be in the model;
 * the test reads the journal (on a copy of state_dir) to know which, and
 * checks the rest against the ordinal each reply carries (RewardReply.updates),
 * which gives the exact order the AP applied the rewards in.
 *
 * Set O3M_KEEP_TEST_DIR=1 to keep the work directory (configs, logs). */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ap_client.h"
#include "ap_journal.h"
#include "o3m_policy.h"
#include "fed_proc.h"
#include "o3m_secagg.h"
#include "o3m.pb-c.h"
#include "o3m_block_store.h"
#include "o3m_mask.h"
#include "o3m_rng.h"
#include "o3m_wire.h"

#define D FED_D
#define K_MAX FED_K_MAX
#define N_KNOWN 20 /* users pp1 knows */
#define ALPHA 1.0
#define MASK_SEED "4242"
#define CLIENTS 4
#define MAX_CLIENTS 16
#define MAX_KILLS 200
#define MAX_REWARDS 200000

static fed_net fed;
static const char *ap_extra[8]; /* extra o3m-active arguments, NULL-terminated */
static const char *pp_threads;   /* o3m-passive --threads, or NULL */
/* The AP's address and the test client's TLS files, for client_try_new. */
static char cli_target[64], cli_ca[600], cli_cert[600], cli_key[600];

/* ------------------------------------------------------------ helpers */

/* Starts party p: the PMG with its seeded mask, the others with a PMG
 * timeout, the AP also with ap_extra. */
static void start(int p) {
  const char *args[16];
  int n = 0;
  if (p == FED_PMG) {
    args[n++] = "--mask-seed-insecure";
    args[n++] = MASK_SEED;
  } else {
    args[n++] = "--pmg-timeout-s";
    args[n++] = "20";
  }
  if (p == FED_AP)
    for (int i = 0; ap_extra[i]; i++) args[n++] = ap_extra[i];
  if (p != FED_AP && p != FED_PMG && pp_threads) {
    args[n++] = "--threads";
    args[n++] = pp_threads;
  }
  args[n] = NULL;
  fed_net_start(&fed, p, args);
}

/* Appends p's log so far to DIR/NAME.log.N before a restart truncates it. */
static void keep_log(int p) {
  static int gen;
  char cmd[1400];
  snprintf(cmd, sizeof cmd, "cp '%s' '%s.%d' 2>/dev/null", fed.proc[p].log, fed.proc[p].log,
           ++gen);
  if (system(cmd) != 0) fprintf(stderr, "could not keep %s\n", fed.proc[p].log);
}

static void kill9(int p) {
  cr_assert_neq(fed.proc[p].pid, 0, "%s is not running", fed_party_name[p]);
  int st = fed_stop(&fed.proc[p], SIGKILL, 5000);
  cr_assert_eq(st, 128 + SIGKILL, "%s: exit %d", fed_party_name[p], st);
  keep_log(p);
}

static void restart(int p) {
  start(p);
  fed_wait_ready(&fed.proc[p], 20000);
}

/* The federation with state_dirs; pp1 knows only N_KNOWN users. */
static void fed_up_with(const char *const *extra) {
  pp_threads = NULL;
  int n = 0;
  for (; extra && extra[n]; n++) ap_extra[n] = extra[n];
  ap_extra[n] = NULL;
  char policy[128];
  snprintf(policy, sizeof policy, "algo = linucb\nmodel = shared\nalpha = %g\nlambda = 1\n",
           ALPHA);
  fed_setup s = {.table_seed = 300, .pp1_users = N_KNOWN, .deadline_ms = 2000,
                 .policy = policy, .pending_capacity = 10000, .state_dirs = 1};
  fed_net_prepare(&fed, &s);
  snprintf(cli_target, sizeof cli_target, "127.0.0.1:%d", fed.port[FED_AP]);
  snprintf(cli_ca, sizeof cli_ca, "%s", fed_path("certs/ca.pem"));
  snprintf(cli_cert, sizeof cli_cert, "%s", fed_path("certs/client.pem"));
  snprintf(cli_key, sizeof cli_key, "%s", fed_path("certs/client.key"));
  for (int p = 0; p < FED_N_PARTIES; p++) start(p);
  for (int p = 0; p < FED_N_PARTIES; p++) fed_wait_ready(&fed.proc[p], 20000);
}

static void fed_up(void) { fed_up_with(NULL); }

static void fed_up_ckpt5(void) {
  static const char *const extra[] = {"--checkpoint-every", "5", NULL};
  fed_up_with(extra);
}

static void fed_up_ckpt50(void) {
  static const char *const extra[] = {"--checkpoint-every", "50", NULL};
  fed_up_with(extra);
}

/* The AP and the PPs on several serving threads (o3m_rpc.h, "Threads"). */
static void fed_up_ckpt50_threads(void) {
  static const char *const extra[] = {"--checkpoint-every", "50", "--threads", "3", NULL};
  fed_up_with(extra);
  /* Only the PPs started from now on: restart them with threads. */
  pp_threads = "2";
  for (int p = 0; p < FED_N_PARTIES; p++)
    if (p != FED_AP && p != FED_PMG) {
      cr_assert_eq(fed_stop(&fed.proc[p], SIGTERM, 20000), 0);
      restart(p);
    }
}

static void fed_down(void) { fed_cleanup(); }

/* A client of the AP with the certificate "client"; NULL on failure (e
 * says why). Thread-safe: the paths are fixed by fed_up_with. */

static ap_client *client_try_new(o3m_err *e) {
  ap_client_options o;
  ap_client_options_default(&o);
  o.target = cli_target;
  o.server_name = "ap";
  o.ca_file = cli_ca;
  o.cert_file = cli_cert;
  o.key_file = cli_key;
  o.deadline_ms = 5000;
  o.wait_for_ready = 0;
  ap_client *c = NULL;
  return ap_client_create(&c, &o, e) == 0 ? c : NULL;
}

static ap_client *client_new(void) {
  o3m_err e;
  o3m_err_clear(&e);
  ap_client *c = client_try_new(&e);
  cr_assert_not_null(c, "%s", o3m_err_message(&e));
  return c;
}

/* A client of party p's own service, presenting certificate `as`. */
static o3m_rpc_client *party_client(int p, const char *as) {
  char target[64];
  snprintf(target, sizeof target, "127.0.0.1:%d", fed.port[p]);
  return fed_client(target, "certs", "certs", as, fed_party_name[p], 5000);
}

/* Info's mask id of a passive party or the PMG. */
static uint64_t party_mask_id(int p) {
  /* Info of a PP or the PMG is answered to the active party, not to clients. */
  o3m_rpc_client *c = party_client(p, "ap");
  O3m__V1__InfoRequest req = O3M__V1__INFO_REQUEST__INIT;
  ProtobufCMessage *m;
  o3m_err e;
  o3m_err_clear(&e);
  int rc = o3m_rpc_client_call(c, O3M_PATH_PASSIVE_INFO, &req.base,
                               &o3m__v1__node_info__descriptor, &m, &e);
  cr_assert_eq(rc, 0, "Info of %s: %s", fed_party_name[p], o3m_err_message(&e));
  uint64_t id = ((O3m__V1__NodeInfo *)m)->mask_id;
  o3m_rpc_client_destroy(c);
  return id;
}

static uint64_t ap_mask_id(ap_client *c) {
  ap_info info;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert_eq(ap_client_info(c, &info, &e), 0, "%s", o3m_err_message(&e));
  return info.mask_id;
}

static void ap_stats_get(ap_client *c, ap_stats *st) {
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert_eq(ap_client_stats(c, st, &e), 0, "%s", o3m_err_message(&e));
}

static int log_has(int p, const char *what) {
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "grep -qF -- '%s' '%s'", what, fed.proc[p].log);
  return system(cmd) == 0;
}

/* ------------------------------------------------------------ central model */

typedef struct central {
  fed_tables t;
  o3m_policy *pol;
} central;

static void central_init(central *c) {
  fed_tables_load(&c->t);
  o3m_policy_config pc;
  o3m_policy_config_default(&pc);
  pc.algo = O3M_ALGO_LINUCB;
  pc.model = O3M_MODEL_SHARED;
  pc.d = D;
  pc.max_candidates = K_MAX;
  pc.alpha = ALPHA;
  pc.lambda = 1.0;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert_eq(o3m_policy_create(&c->pol, &pc, &e), 0, "%s", o3m_err_message(&e));
}

static void central_free(central *c) {
  fed_tables_free(&c->t);
  o3m_policy_destroy(c->pol);
}

/* A round's request: a known user and K distinct items. */
static void draw_round(o3m_rng *r, fed_round *q) { fed_draw_round(r, N_KNOWN, q); }

static void assert_theta(ap_client *c, const o3m_policy *pol, uint64_t updates) {
  ap_stats st;
  ap_stats_get(c, &st);
  cr_assert_eq(st.updates, updates, "AP updates %" PRIu64 ", acknowledged %" PRIu64, st.updates,
               updates);
  double tn = o3m_policy_theta_norm(pol, 0);
  cr_assert_leq(fabs(st.theta_norm - tn), 1e-9 * fmax(1.0, tn),
                "AP ||theta|| %.17g, in-process replay %.17g", st.theta_norm, tn);
}

/* n rounds (recommend, compare with central, reward, update central).
 * *acked counts the acknowledged rewards; every reply's ordinal must be
 * the next one. */
static void lossless_rounds(ap_client *cli, central *c, o3m_rng *r, int n, uint64_t *acked) {
  for (int t = 0; t < n; t++) {
    fed_round q;
    draw_round(r, &q);
    double X[K_MAX * D];
    cr_assert_eq(fed_contexts(&c->t, q.user, q.K, q.items, X), 0);
    ap_recommendation rec;
    o3m_err e;
    o3m_err_clear(&e);
    int rc = ap_client_recommend(cli, q.user, q.K, q.items, NULL, NULL, 0, &rec, &e);
    cr_assert_eq(rc, 0, "round %d: %s: %s", t, o3m_errname(rc), o3m_err_message(&e));
    int chosen;
    double score;
    cr_assert_eq(o3m_policy_choose(c->pol, q.K, X, NULL, &chosen, &score), 0);
    cr_assert_eq(rec.candidate, chosen, "round %d: federated chose %d, central %d", t,
                 rec.candidate, chosen);
    cr_assert_leq(fabs(rec.score - score), 1e-9 * fmax(1.0, fabs(score)),
                  "round %d: score %.17g vs central %.17g", t, rec.score, score);
    const double *x = X + (size_t)chosen * D;
    double rw = fed_click_reward(x);
    uint64_t updates;
    rc = ap_client_reward(cli, rec.decision, rw, &updates, &e);
    cr_assert_eq(rc, 0, "round %d reward: %s", t, o3m_err_message(&e));
    cr_assert_eq(updates, *acked + 1);
    cr_assert_eq(o3m_policy_update(c->pol, 0, x, rw), 0);
    (*acked)++;
  }
}

/* Recommends until one succeeds (a channel to a restarted party may need a
 * moment); the decisions are never rewarded, which changes nothing in a
 * LinUCB model. */
static void wait_rounds_ok(ap_client *cli, o3m_rng *r) {
  double t0 = fed_now_s();
  for (;;) {
    fed_round q;
    draw_round(r, &q);
    ap_recommendation rec;
    o3m_err e;
    o3m_err_clear(&e);
    int rc = ap_client_recommend(cli, q.user, q.K, q.items, NULL, NULL, 0, &rec, &e);
    if (rc == 0) return;
    cr_assert_lt(fed_now_s() - t0, 15.0, "rounds still fail: %s: %s", o3m_errname(rc),
                 o3m_err_message(&e));
    fed_sleep_ms(100);
  }
}

/* ------------------------------------------------------------ tests */

TestSuite(recovery, .timeout = 180);

Test(recovery, ap_restart_keeps_block_and_every_acknowledged_reward, .init = fed_up,
     .fini = fed_down) {
  central c;
  central_init(&c);
  o3m_rng *r;
  cr_assert_eq(o3m_rng_create_seeded_insecure(&r, 11), 0);
  ap_client *cli = client_new();
  uint64_t mask = ap_mask_id(cli);
  cr_assert_neq(mask, 0);
  cr_assert_eq(party_mask_id(FED_PP1), mask);
  cr_assert_eq(party_mask_id(FED_PP2), mask);

  uint64_t acked = 0;
  lossless_rounds(cli, &c, r, 40, &acked);
  /* Three decisions left waiting for their reward at the crash. */
  uint64_t waiting[3];
  for (int i = 0; i < 3; i++) {
    fed_round q;
    draw_round(r, &q);
    ap_recommendation rec;
    o3m_err e;
    o3m_err_clear(&e);
    cr_assert_eq(ap_client_recommend(cli, q.user, q.K, q.items, NULL, NULL, 0, &rec, &e), 0,
                 "%s", o3m_err_message(&e));
    waiting[i] = rec.decision;
  }

  /* The PMG has forgotten Q: nobody could fetch the AP's block again. Then
   * it goes away altogether. */
  o3m_rpc_client *pmg = party_client(FED_PMG, "ap");
  o3m_partition part;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert_eq(o3m_partition_parse(&part, "3,2,3", &e), 0, "%s", o3m_err_message(&e));
  cr_assert_eq(part.d, D);
  o3m_block *blk;
  unsigned char fp[O3M_FINGERPRINT_BYTES];
  fed_fingerprint(fed.conf, fp);
  int rc = o3m_wire_get_block(pmg, &part, 0, fp, &blk, &e);
  cr_assert_eq(rc, O3M_ESTATE, "GetBlock after distribution: %s: %s", o3m_errname(rc),
               o3m_err_message(&e));
  o3m_rpc_client_destroy(pmg);
  cr_assert_eq(fed_stop(&fed.proc[FED_PMG], SIGTERM, 5000), 0);

  ap_client_destroy(cli);
  kill9(FED_AP);
  restart(FED_AP);
  cr_assert(log_has(FED_AP, "loaded the block of mask"), "%s", fed_log(&fed.proc[FED_AP]));
  cli = client_new();
  cr_assert_eq(ap_mask_id(cli), mask);
  cr_assert_eq(party_mask_id(FED_PP1), mask);
  cr_assert_eq(party_mask_id(FED_PP2), mask);
  assert_theta(cli, c.pol, acked);

  /* Decisions pending at the crash were not journaled. */
  for (int i = 0; i < 3; i++) {
    o3m_err_clear(&e);
    rc = ap_client_reward(cli, waiting[i], 1.0, NULL, &e);
    cr_assert_eq(rc, O3M_ENOTFOUND, "reward of a decision from before the restart: %s",
                 o3m_errname(rc));
  }
  assert_theta(cli, c.pol, acked);

  /* Lossless after recovery: the next decisions equal central's. */
  lossless_rounds(cli, &c, r, 40, &acked);
  assert_theta(cli, c.pol, 80);
  ap_client_destroy(cli);
  o3m_rng_destroy(r);
  central_free(&c);
}

/* Party p's securely aggregated words for user and items i0..i3 under a
 * fixed nonce, answered to the AP's certificate: the same request gives the
 * same words exactly when the party holds the same block, dummy-row key and
 * aggregation keys. */
static void mask_of(int p, const char *user, uint64_t *out, size_t n) {
  o3m_rpc_client *c = party_client(p, "ap");
  static const char *items[] = {"i0", "i1", "i2", "i3"};
  O3m__V1__MaskQuery q = O3M__V1__MASK_QUERY__INIT, *qp = &q;
  q.user = (char *)user;
  q.n_items = 4;
  q.items = (char **)items;
  O3m__V1__MaskBatchRequest req = O3M__V1__MASK_BATCH_REQUEST__INIT;
  uint8_t nonce[32] = {9, 9, 9};
  req.mask_id = party_mask_id(p);
  req.n_queries = 1;
  req.queries = &qp;
  req.nonce.data = nonce;
  req.nonce.len = sizeof nonce;
  double norms[2] = {O3M_CONFIG_DEFAULT_MAX_NORM, O3M_CONFIG_DEFAULT_MAX_NORM};
  int scale;
  cr_assert_eq(o3m_secagg_scale(2, norms, &scale, NULL), 0);
  req.scale = (uint32_t)scale;
  ProtobufCMessage *m;
  o3m_err e;
  o3m_err_clear(&e);
  int rc = o3m_rpc_client_call(c, O3M_PATH_PASSIVE_MASK_BATCH, &req.base,
                               &o3m__v1__mask_batch_reply__descriptor, &m, &e);
  cr_assert_eq(rc, 0, "MaskBatch of %s: %s", fed_party_name[p], o3m_err_message(&e));
  const O3m__V1__MaskBatchReply *mc = (const O3m__V1__MaskBatchReply *)m;
  cr_assert_eq(mc->n_masked, n);
  memcpy(out, mc->masked, n * sizeof *out);
  o3m_rpc_client_destroy(c);
}

Test(recovery, pp_restart_keeps_block_and_dummy_key, .init = fed_up, .fini = fed_down) {
  central c;
  central_init(&c);
  o3m_rng *r;
  cr_assert_eq(o3m_rng_create_seeded_insecure(&r, 12), 0);
  ap_client *cli = client_new();
  uint64_t mask = ap_mask_id(cli);

  uint64_t known0[4 * D], unknown0[4 * D], known1[4 * D], unknown1[4 * D];
  mask_of(FED_PP1, "u3", known0, 4 * D);
  mask_of(FED_PP1, "u25", unknown0, 4 * D); /* pp1 has no row for u25: dummies */
  uint64_t acked = 0;
  lossless_rounds(cli, &c, r, 20, &acked);

  kill9(FED_PP1);
  restart(FED_PP1);
  cr_assert(log_has(FED_PP1, "from state_dir"), "%s", fed_log(&fed.proc[FED_PP1]));
  cr_assert_eq(party_mask_id(FED_PP1), mask);
  mask_of(FED_PP1, "u3", known1, 4 * D);
  mask_of(FED_PP1, "u25", unknown1, 4 * D);
  for (int i = 0; i < 4 * D; i++) {
    cr_assert_eq(known1[i], known0[i], "known user, word %d: %016llx before, %016llx after", i,
                 (unsigned long long)known0[i], (unsigned long long)known1[i]);
    cr_assert_eq(unknown1[i], unknown0[i], "unknown user (dummy row), word %d: %016llx before, "
                 "%016llx after", i, (unsigned long long)unknown0[i],
                 (unsigned long long)unknown1[i]);
  }

  wait_rounds_ok(cli, r);
  lossless_rounds(cli, &c, r, 20, &acked);
  assert_theta(cli, c.pol, 40);
  ap_client_destroy(cli);
  o3m_rng_destroy(r);
  central_free(&c);
}

Test(recovery, acknowledged_batch_survives_kill9, .init = fed_up_ckpt5, .fini = fed_down) {
  central c;
  central_init(&c);
  o3m_rng *r;
  cr_assert_eq(o3m_rng_create_seeded_insecure(&r, 13), 0);
  uint64_t acked = 0;
  static const int batch[] = {13, 1, 24};
  for (int kp = 0; kp < 3; kp++) {
    ap_client *cli = client_new();
    /* B decisions, then their B rewards back to back, then SIGKILL. */
    int B = batch[kp];
    double X[24][D], rw[24];
    uint64_t dec[24];
    for (int b = 0; b < B; b++) {
      fed_round q;
      draw_round(r, &q);
      double Xq[K_MAX * D];
      cr_assert_eq(fed_contexts(&c.t, q.user, q.K, q.items, Xq), 0);
      ap_recommendation rec;
      o3m_err e;
      o3m_err_clear(&e);
      cr_assert_eq(ap_client_recommend(cli, q.user, q.K, q.items, NULL, NULL, 0, &rec, &e), 0,
                   "%s", o3m_err_message(&e));
      memcpy(X[b], Xq + (size_t)rec.candidate * D, sizeof X[b]);
      rw[b] = fed_click_reward(X[b]);
      dec[b] = rec.decision;
    }
    for (int b = 0; b < B; b++) {
      uint64_t updates;
      o3m_err e;
      o3m_err_clear(&e);
      cr_assert_eq(ap_client_reward(cli, dec[b], rw[b], &updates, &e), 0, "%s",
                   o3m_err_message(&e));
      cr_assert_eq(updates, acked + 1);
      cr_assert_eq(o3m_policy_update(c.pol, 0, X[b], rw[b]), 0);
      acked++;
    }
    ap_client_destroy(cli);
    kill9(FED_AP);
    restart(FED_AP);
    cr_assert(log_has(FED_AP, "recovered"), "%s", fed_log(&fed.proc[FED_AP]));
    cli = client_new();
    assert_theta(cli, c.pol, acked);
    ap_client_destroy(cli);
  }
  /* And the model keeps learning losslessly. */
  ap_client *cli = client_new();
  lossless_rounds(cli, &c, r, 10, &acked);
  assert_theta(cli, c.pol, acked);
  ap_client_destroy(cli);
  o3m_rng_destroy(r);
  central_free(&c);
}

/* Flips one byte of path at offset (negative: from the end). */
static void flip_byte(const char *path, long offset) {
  FILE *f = fopen(path, "r+b");
  cr_assert_not_null(f, "%s: %s", path, strerror(errno));
  cr_assert_eq(fseek(f, offset, offset < 0 ? SEEK_END : SEEK_SET), 0);
  int ch = fgetc(f);
  cr_assert_neq(ch, EOF);
  cr_assert_eq(fseek(f, -1, SEEK_CUR), 0);
  fputc(ch ^ 0x10, f);
  cr_assert_eq(fclose(f), 0);
}

Test(recovery, corrupt_stored_block_refuses_to_start, .init = fed_up, .fini = fed_down) {
  cr_assert_eq(fed_stop(&fed.proc[FED_AP], SIGTERM, 5000), 0, "%s", fed_log(&fed.proc[FED_AP]));
  cr_assert_eq(fed_stop(&fed.proc[FED_PP1], SIGTERM, 5000), 0, "%s", fed_log(&fed.proc[FED_PP1]));
  struct stat st;
  cr_assert_eq(stat(fed_path("ap_state/mask-block.o3m"), &st), 0);
  cr_assert_eq(st.st_mode & 0777, 0600, "block file mode %o", st.st_mode & 0777);
  cr_assert_eq(stat(fed_path("ap_state"), &st), 0);
  cr_assert_eq(st.st_mode & 0777, 0700, "state_dir mode %o", st.st_mode & 0777);

  /* The AP: one bit of a block value. */
  flip_byte(fed_path("ap_state/mask-block.o3m"), 100);
  start(FED_AP);
  cr_assert_eq(fed_wait_exit(&fed.proc[FED_AP], 10000), 1, "%s", fed_log(&fed.proc[FED_AP]));
  cr_assert(log_has(FED_AP, "mask-block.o3m is corrupt (data CRC mismatch)"), "%s",
            fed_log(&fed.proc[FED_AP]));
  cr_assert(log_has(FED_AP, "delete the state_dir of every party"), "%s",
            fed_log(&fed.proc[FED_AP]));

  /* A passive party: its file cut short. */
  const char *pp = fed_path("pp1_state/mask-block.o3m");
  cr_assert_eq(stat(pp, &st), 0);
  cr_assert_eq(truncate(pp, st.st_size - 3), 0);
  start(FED_PP1);
  cr_assert_eq(fed_wait_exit(&fed.proc[FED_PP1], 10000), 1, "%s", fed_log(&fed.proc[FED_PP1]));
  cr_assert(log_has(FED_PP1, "is corrupt (wrong length"), "%s", fed_log(&fed.proc[FED_PP1]));
  cr_assert(log_has(FED_PP1, "delete the state_dir of every party"), "%s",
            fed_log(&fed.proc[FED_PP1]));
}

Test(recovery, saved_model_under_another_mask_refuses_start_until_discarded, .init = fed_up,
     .fini = fed_down) {
  central c;
  central_init(&c);
  o3m_rng *r;
  cr_assert_eq(o3m_rng_create_seeded_insecure(&r, 14), 0);
  ap_client *cli = client_new();
  uint64_t acked = 0;
  lossless_rounds(cli, &c, r, 10, &acked);
  ap_client_destroy(cli);
  cr_assert_eq(fed_stop(&fed.proc[FED_AP], SIGTERM, 5000), 0, "%s", fed_log(&fed.proc[FED_AP]));

  /* The AP's block replaced by one of another mask, as if its block file
   * had been lost and a block of a new federation fetched. */
  o3m_rng *mr;
  o3m_mask *m;
  o3m_block *b;
  cr_assert_eq(o3m_rng_create_seeded_insecure(&mr, 777), 0);
  cr_assert_eq(o3m_mask_generate(&m, D, mr), 0);
  cr_assert_eq(o3m_block_from_mask(&b, m, 0, 3), 0);
  o3m_block_store_id sid = {0, 0, D, 3};
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert_eq(o3m_block_store_save(fed_path("ap_state"), &sid, b, NULL, 0, &e), 0, "%s",
               o3m_err_message(&e));
  uint64_t new_mask = o3m_block_mask_id(b);
  o3m_block_destroy(b);
  o3m_mask_destroy(m);
  o3m_rng_destroy(mr);

  start(FED_AP);
  cr_assert_eq(fed_wait_exit(&fed.proc[FED_AP], 10000), 1, "%s", fed_log(&fed.proc[FED_AP]));
  cr_assert(log_has(FED_AP, "start-up failed: MASK"), "%s", fed_log(&fed.proc[FED_AP]));
  cr_assert(log_has(FED_AP, "--discard-state"), "%s", fed_log(&fed.proc[FED_AP]));
  keep_log(FED_AP);

  ap_extra[0] = "--discard-state";
  ap_extra[1] = NULL;
  restart(FED_AP);
  cr_assert(log_has(FED_AP, "for a fresh start"), "%s", fed_log(&fed.proc[FED_AP]));
  cli = client_new();
  cr_assert_eq(ap_mask_id(cli), new_mask);
  ap_stats st;
  ap_stats_get(cli, &st);
  cr_assert_eq(st.updates, 0);
  /* The passive parties hold blocks of the old mask: every round is
   * decided by the AP's local model, degraded and naming the parties
   * (fallback = local, the default; with none it fails with MASK), until
   * the whole federation starts afresh. */
  fed_round q;
  draw_round(r, &q);
  ap_recommendation rec;
  o3m_err_clear(&e);
  int rc = ap_client_recommend(cli, q.user, q.K, q.items, NULL, NULL, 0, &rec, &e);
  cr_assert_eq(rc, 0, "%s: %s", o3m_errname(rc), o3m_err_message(&e));
  cr_assert(rec.degraded, "a round with both parties on another mask was federated");
  cr_assert_geq(rec.n_missing, 1);
  cr_assert_eq(strncmp(rec.missing[0], "pp", 2), 0, "%s", rec.missing[0]);
  ap_client_destroy(cli);
  o3m_rng_destroy(r);
  central_free(&c);
}

Test(recovery, disk_error_fails_the_reward_unacknowledged_and_stops_the_ap, .init = fed_up,
     .fini = fed_down) {
  central c;
  central_init(&c);
  o3m_rng *r;
  cr_assert_eq(o3m_rng_create_seeded_insecure(&r, 15), 0);
  ap_client *cli = client_new();
  uint64_t acked = 0;
  lossless_rounds(cli, &c, r, 5, &acked);
  ap_client_destroy(cli);
  /* A clean stop checkpoints and starts a fresh journal segment. */
  cr_assert_eq(fed_stop(&fed.proc[FED_AP], SIGTERM, 5000), 0, "%s", fed_log(&fed.proc[FED_AP]));
  keep_log(FED_AP);

  /* The "disk" fills up: the AP runs with a file size limit (RLIMIT_FSIZE,
   * SIGXFSZ ignored, both inherited), so its journal segment cannot grow
   * past 8 KiB and a journal write fails with EFBIG after about 60
   * rewards. */
  struct rlimit old, lim;
  cr_assert_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
  lim = old;
  lim.rlim_cur = 8192;
  signal(SIGXFSZ, SIG_IGN);
  cr_assert_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
  start(FED_AP);
  cr_assert_eq(setrlimit(RLIMIT_FSIZE, &old), 0);
  fed_wait_ready(&fed.proc[FED_AP], 20000);

  cli = client_new();
  int failed_at = -1;
  double x_fail[D], rw_fail = 0;
  for (int t = 0; t < 200 && failed_at < 0; t++) {
    fed_round q;
    draw_round(r, &q);
    double X[K_MAX * D];
    cr_assert_eq(fed_contexts(&c.t, q.user, q.K, q.items, X), 0);
    ap_recommendation rec;
    o3m_err e;
    o3m_err_clear(&e);
    int rc = ap_client_recommend(cli, q.user, q.K, q.items, NULL, NULL, 0, &rec, &e);
    cr_assert_eq(rc, 0, "round %d: %s: %s", t, o3m_errname(rc), o3m_err_message(&e));
    const double *x = X + (size_t)rec.candidate * D;
    double rw = fed_click_reward(x);
    uint64_t updates;
    rc = ap_client_reward(cli, rec.decision, rw, &updates, &e);
    if (rc == 0) {
      cr_assert_eq(updates, acked + 1);
      cr_assert_eq(o3m_policy_update(c.pol, 0, x, rw), 0);
      acked++;
      continue;
    }
    cr_assert_eq(rc, O3M_EUNAVAILABLE, "%s: %s", o3m_errname(rc), o3m_err_message(&e));
    cr_assert_not_null(strstr(o3m_err_message(&e), "not acknowledged"), "%s",
                       o3m_err_message(&e));
    failed_at = t;
    memcpy(x_fail, x, sizeof x_fail);
    rw_fail = rw;
  }
  cr_assert_geq(failed_at, 0, "no reward failed under the file size limit");
  cr_assert_gt(acked, 20);
  /* It stops by itself, exit 1; later rewards are refused meanwhile or
   * find no server. */
  cr_assert_eq(fed_wait_exit(&fed.proc[FED_AP], 10000), 1, "%s", fed_log(&fed.proc[FED_AP]));
  cr_assert(log_has(FED_AP, "the reward journal failed"), "%s", fed_log(&fed.proc[FED_AP]));
  /* The stop names its real cause, and only that one. */
  cr_assert(log_has(FED_AP, "stopped after a disk error"), "%s", fed_log(&fed.proc[FED_AP]));
  cr_assert(!log_has(FED_AP, "damage"), "%s", fed_log(&fed.proc[FED_AP]));
  ap_client_destroy(cli);
  keep_log(FED_AP);

  /* Restarted on a working disk: every acknowledged reward is there; the
   * one that failed may or may not be (here its record was torn and cut). */
  restart(FED_AP);
  cli = client_new();
  ap_stats st;
  ap_stats_get(cli, &st);
  cr_assert(st.updates == acked || st.updates == acked + 1, "updates %" PRIu64 ", acked %" PRIu64,
            st.updates, acked);
  if (st.updates == acked + 1) {
    cr_assert_eq(o3m_policy_update(c.pol, 0, x_fail, rw_fail), 0);
    acked++;
  }
  assert_theta(cli, c.pol, acked);
  lossless_rounds(cli, &c, r, 10, &acked);
  ap_client_destroy(cli);
  o3m_rng_destroy(r);
  central_free(&c);
}

/* ------------------------------------------------- journal damage (g) */

/* Path of the newest journal segment of the AP's state_dir (a fed_path
 * slot). */
static const char *newest_segment(void) {
  DIR *d = opendir(fed_path("ap_state"));
  cr_assert_not_null(d);
  char best[64] = "";
  struct dirent *de;
  while ((de = readdir(d))) {
    size_t n = strlen(de->d_name);
    if (n == 31 && !strncmp(de->d_name, "ap-journal-", 11) && !strcmp(de->d_name + 27, ".wal") &&
        strcmp(de->d_name, best) > 0)
      snprintf(best, sizeof best, "%s", de->d_name);
  }
  closedir(d);
  cr_assert_neq(best[0], 0, "no journal segment in ap_state");
  char rel[128];
  snprintf(rel, sizeof rel, "ap_state/%s", best);
  return fed_path(rel);
}

/* Records in segment path: its slots up to the first all-zero one. */
static int segment_records(const char *path) {
  const size_t L = AP_JOURNAL_RECORD_BYTES(D);
  FILE *f = fopen(path, "rb");
  cr_assert_not_null(f, "%s: %s", path, strerror(errno));
  unsigned char b[AP_JOURNAL_RECORD_BYTES(D)];
  int n = 0;
  for (;; n++) {
    cr_assert_eq(fseek(f, (long)(AP_JOURNAL_SEGMENT_HEADER + (size_t)n * L), SEEK_SET), 0);
    if (fread(b, 1, L, f) != L) break;
    size_t k = 0;
    while (k < L && !b[k]) k++;
    if (k == L) break;
  }
  fclose(f);
  return n;
}

/* n rounds of recommend + reward (any reward; no central model); returns
 * the ordinal of the last acknowledged one. */
static uint64_t plain_rounds(ap_client *cli, o3m_rng *r, int n, uint64_t ordinal) {
  for (int t = 0; t < n; t++) {
    fed_round q;
    draw_round(r, &q);
    ap_recommendation rec;
    o3m_err e;
    o3m_err_clear(&e);
    int rc = ap_client_recommend(cli, q.user, q.K, q.items, NULL, NULL, 0, &rec, &e);
    cr_assert_eq(rc, 0, "round %d: %s: %s", t, o3m_errname(rc), o3m_err_message(&e));
    uint64_t updates;
    rc = ap_client_reward(cli, rec.decision, 0.5, &updates, &e);
    cr_assert_eq(rc, 0, "reward %d: %s", t, o3m_err_message(&e));
    cr_assert_eq(updates, ordinal + 1);
    ordinal = updates;
  }
  return ordinal;
}

/* Starts the AP on the damaged journal: it must exit 1 with the corruption
 * message (what names the damage); then with --salvage it must start and
 * hold exactly `expect` updates. */
static void refused_then_salvaged(const char *what, uint64_t expect) {
  ap_extra[0] = NULL;
  start(FED_AP);
  cr_assert_eq(fed_wait_exit(&fed.proc[FED_AP], 15000), 1, "%s", fed_log(&fed.proc[FED_AP]));
  cr_assert(log_has(FED_AP, "the reward journal is damaged or incomplete; --salvage"), "%s",
            fed_log(&fed.proc[FED_AP]));
  cr_assert(log_has(FED_AP, "refusing to start"), "%s", fed_log(&fed.proc[FED_AP]));
  cr_assert(log_has(FED_AP, what), "no '%s' in: %s", what, fed_log(&fed.proc[FED_AP]));
  keep_log(FED_AP);
  ap_extra[0] = "--salvage";
  ap_extra[1] = NULL;
  restart(FED_AP);
  ap_extra[0] = NULL;
  cr_assert(log_has(FED_AP, "SALVAGE"), "%s", fed_log(&fed.proc[FED_AP]));
  ap_client *cli = client_new();
  ap_stats st;
  ap_stats_get(cli, &st);
  ap_client_destroy(cli);
  cr_assert_eq(st.updates, expect, "after --salvage: %" PRIu64 " updates, expected %" PRIu64,
               st.updates, expect);
}

/* Journal records per federated reward: the local model's part, then the
 * federated record (fallback = local, the default; ap_journal.h). */
#define RECORDS_PER_REWARD 2

/* n acknowledged rewards, then SIGKILL; returns the newest segment and
 * sets *records to the records in it. */
static const char *rewards_then_kill(o3m_rng *r, int n, uint64_t *acked, int *records) {
  ap_client *cli = client_new();
  *acked = plain_rounds(cli, r, n, *acked);
  ap_client_destroy(cli);
  kill9(FED_AP);
  const char *seg = newest_segment();
  *records = segment_records(seg);
  return seg;
}

Test(recovery, journal_last_record_damaged_refuses_start_until_salvage, .init = fed_up,
     .fini = fed_down) {
  o3m_rng *r;
  cr_assert_eq(o3m_rng_create_seeded_insecure(&r, 16), 0);
  uint64_t acked = 0;
  int n;
  const char *seg = rewards_then_kill(r, 20, &acked, &n);
  cr_assert_eq(n, 20 * RECORDS_PER_REWARD);
  /* One byte of x[2] of reward 20's federated record, the last one
   * acknowledged (its local part before it is dropped with it). */
  flip_byte(seg, AP_JOURNAL_SEGMENT_HEADER + (long)(n - 1) * (long)AP_JOURNAL_RECORD_BYTES(D) +
                     56 + 16);
  refused_then_salvaged("a damaged record", acked - 1);
  /* The salvaged AP goes on from there. */
  ap_client *cli = client_new();
  plain_rounds(cli, r, 3, acked - 1);
  ap_client_destroy(cli);
  o3m_rng_destroy(r);
}

Test(recovery, journal_cut_at_a_record_boundary_refuses_start_until_salvage, .init = fed_up,
     .fini = fed_down) {
  o3m_rng *r;
  cr_assert_eq(o3m_rng_create_seeded_insecure(&r, 17), 0);
  uint64_t acked = 0;
  int n;
  const char *seg = rewards_then_kill(r, 20, &acked, &n);
  cr_assert_eq(n, 20 * RECORDS_PER_REWARD);
  /* The file ends after reward 17: 18..20 are gone. */
  cr_assert_eq(truncate(seg, AP_JOURNAL_SEGMENT_HEADER + (off_t)(n - 3 * RECORDS_PER_REWARD) *
                                 (off_t)AP_JOURNAL_RECORD_BYTES(D)), 0);
  refused_then_salvaged("cut short", acked - 3);
  o3m_rng_destroy(r);
}

Test(recovery, newest_journal_segment_deleted_refuses_start_until_salvage, .init = fed_up,
     .fini = fed_down) {
  o3m_rng *r;
  cr_assert_eq(o3m_rng_create_seeded_insecure(&r, 18), 0);
  ap_client *cli = client_new();
  uint64_t acked = plain_rounds(cli, r, 10, 0);
  ap_client_destroy(cli);
  /* A clean stop writes a checkpoint at 10 and rotates the journal; five
   * more rewards go to the new segment, which is then lost. */
  cr_assert_eq(fed_stop(&fed.proc[FED_AP], SIGTERM, 5000), 0, "%s", fed_log(&fed.proc[FED_AP]));
  keep_log(FED_AP);
  restart(FED_AP);
  int n;
  const char *seg = rewards_then_kill(r, 5, &acked, &n);
  cr_assert_eq(n, 5 * RECORDS_PER_REWARD);
  cr_assert_eq(acked, 15);
  cr_assert_eq(unlink(seg), 0);
  refused_then_salvaged("is missing", 10);
  o3m_rng_destroy(r);
}

/* No silent fresh start: the AP's state_dir keeps its block, but its
 * checkpoints and journal are gone (deleted, or a restore that missed
 * them). Before, the AP started a fresh model with an INFO line; now it
 * refuses, naming --discard-state, which then starts a fresh model under
 * the stored block. (A brand-new state_dir starting fresh is what every
 * fed_up does.) */
Test(recovery, regression_block_without_model_refuses_start_until_discarded,
     .init = fed_up, .fini = fed_down) {
  o3m_rng *r;
  cr_assert_eq(o3m_rng_create_seeded_insecure(&r, 19), 0);
  ap_client *cli = client_new();
  uint64_t acked = plain_rounds(cli, r, 6, 0);
  uint64_t mask = ap_mask_id(cli);
  ap_client_destroy(cli);
  cr_assert_eq(acked, 6);
  cr_assert_eq(fed_stop(&fed.proc[FED_AP], SIGTERM, 5000), 0, "%s", fed_log(&fed.proc[FED_AP]));
  keep_log(FED_AP);
  DIR *d = opendir(fed_path("ap_state"));
  cr_assert_not_null(d);
  struct dirent *de;
  int removed = 0;
  while ((de = readdir(d))) {
    if (strncmp(de->d_name, "ap-ckpt-", 8) && strncmp(de->d_name, "ap-journal-", 11)) continue;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", fed_path("ap_state"), de->d_name);
    cr_assert_eq(unlink(path), 0, "%s", path);
    removed++;
  }
  closedir(d);
  cr_assert_geq(removed, 2);

  ap_extra[0] = NULL;
  start(FED_AP);
  cr_assert_eq(fed_wait_exit(&fed.proc[FED_AP], 15000), 1, "started a fresh model: %s",
               fed_log(&fed.proc[FED_AP]));
  cr_assert(log_has(FED_AP, "the saved model is missing"), "%s", fed_log(&fed.proc[FED_AP]));
  cr_assert(log_has(FED_AP, "--discard-state"), "%s", fed_log(&fed.proc[FED_AP]));
  cr_assert(log_has(FED_AP, "neither a valid checkpoint nor a journal segment"), "%s",
            fed_log(&fed.proc[FED_AP]));
  keep_log(FED_AP);

  ap_extra[0] = "--discard-state";
  ap_extra[1] = NULL;
  restart(FED_AP);
  ap_extra[0] = NULL;
  cli = client_new();
  cr_assert_eq(ap_mask_id(cli), mask, "the stored block is kept");
  ap_stats st;
  ap_stats_get(cli, &st);
  cr_assert_eq(st.updates, 0);
  plain_rounds(cli, r, 2, 0);
  ap_client_destroy(cli);
  /* And the next start finds the new model. */
  cr_assert_eq(fed_stop(&fed.proc[FED_AP], SIGTERM, 5000), 0, "%s", fed_log(&fed.proc[FED_AP]));
  keep_log(FED_AP);
  restart(FED_AP);
  cli = client_new();
  ap_stats_get(cli, &st);
  cr_assert_eq(st.updates, 2);
  ap_client_destroy(cli);
  o3m_rng_destroy(r);
}

/* ------------------------------------------------------------ crash test */

/* One reward a client sent: acknowledged (with its ordinal) or in flight
 * when the AP died. */
typedef struct sent {
  uint64_t decision;
  uint64_t ordinal; /* RewardReply.updates; 0: not acknowledged */
  int epoch;        /* AP run it was sent to */
  double x[D];
  double reward;
} sent;

typedef struct crash_ctx {
  central c;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int epoch;    /* bumped by the main thread after each restart */
  int parked;   /* clients waiting for the next epoch */
  int done;
  sent *acked;  /* MAX_REWARDS */
  size_t n_acked;
  sent *inflight; /* MAX_REWARDS */
  size_t n_inflight;
  char err[256];
} crash_ctx;

typedef struct client_arg {
  crash_ctx *x;
  int id;
} client_arg;

static void *client_main(void *arg_) {
  client_arg *arg = arg_;
  crash_ctx *x = arg->x;
  o3m_rng *r;
  o3m_rng_create_seeded_insecure(&r, 1000 + (uint64_t)arg->id);
  int epoch = 0;
  ap_client *cli = NULL;
  for (;;) {
    if (!cli) {
      pthread_mutex_lock(&x->mu);
      int done = x->done;
      epoch = x->epoch;
      pthread_mutex_unlock(&x->mu);
      if (done) break;
      o3m_err e;
      o3m_err_clear(&e);
      cli = client_try_new(&e);
      if (!cli) {
        pthread_mutex_lock(&x->mu);
        if (!x->err[0])
          snprintf(x->err, sizeof x->err, "client %d: %s", arg->id, o3m_err_message(&e));
        x->parked++; /* gone for good; the main thread sees err */
        pthread_mutex_unlock(&x->mu);
        break;
      }
    }
    fed_round q;
    draw_round(r, &q);
    double X[K_MAX * D];
    ap_recommendation rec;
    o3m_err e;
    o3m_err_clear(&e);
    int rc = fed_contexts(&x->c.t, q.user, q.K, q.items, X);
    if (rc == 0) rc = ap_client_recommend(cli, q.user, q.K, q.items, NULL, NULL, 0, &rec, &e);
    sent s = {0};
    int have = 0;
    if (rc == 0) {
      s.decision = rec.decision;
      s.epoch = epoch;
      memcpy(s.x, X + (size_t)rec.candidate * D, sizeof s.x);
      s.reward = fed_click_reward(s.x);
      have = 1;
      uint64_t updates = 0;
      rc = ap_client_reward(cli, rec.decision, s.reward, &updates, &e);
      s.ordinal = rc == 0 ? updates : 0;
    }
    pthread_mutex_lock(&x->mu);
    if (have && rc == 0 && x->n_acked < MAX_REWARDS) x->acked[x->n_acked++] = s;
    if (have && rc != 0 && x->n_inflight < MAX_REWARDS) x->inflight[x->n_inflight++] = s;
    if (rc != 0 && rc != O3M_EUNAVAILABLE && rc != O3M_EDEADLINE && !x->err[0])
      snprintf(x->err, sizeof x->err, "client %d: %s: %s", arg->id, o3m_errname(rc),
               o3m_err_message(&e));
    if (rc != 0) {
      /* The AP is gone (or failing): wait for the next run. */
      x->parked++;
      pthread_cond_broadcast(&x->cv);
      while (x->epoch == epoch && !x->done) pthread_cond_wait(&x->cv, &x->mu);
      x->parked--;
    }
    int done = x->done;
    pthread_mutex_unlock(&x->mu);
    if (rc != 0) {
      ap_client_destroy(cli);
      cli = NULL;
    }
    if (done) break;
  }
  ap_client_destroy(cli);
  o3m_rng_destroy(r);
  return NULL;
}

/* Decision ids (and how often each occurs) in the journal of a copy of the
 * AP's state_dir, read with the AP's own journal reader. */
typedef struct jscan {
  uint64_t *dec;
  size_t n, cap;
} jscan;

static int jscan_one(void *ctx, const ap_journal_record *rec) {
  jscan *j = ctx;
  if (rec->type != AP_JOURNAL_REWARD) return 0;
  if (j->n == j->cap) {
    j->cap = j->cap ? 2 * j->cap : 1024;
    j->dec = realloc(j->dec, j->cap * sizeof *j->dec);
    if (!j->dec) return O3M_ENOMEM;
  }
  j->dec[j->n++] = rec->decision;
  return 0;
}

static void journal_scan(int kp, jscan *j) {
  char copy[700], cmd[1500];
  snprintf(copy, sizeof copy, "%s/jcopy%d", fed_dir(), kp);
  snprintf(cmd, sizeof cmd, "cp -a '%s' '%s'", fed_path("ap_state"), copy);
  cr_assert_eq(system(cmd), 0, "%s", cmd);
  /* The journal starts after the newest segment pruned away. */
  DIR *d = opendir(copy);
  cr_assert_not_null(d);
  uint64_t first = UINT64_MAX;
  struct dirent *de;
  while ((de = readdir(d))) {
    unsigned long long s;
    int end = 0;
    if (strlen(de->d_name) == 31 && sscanf(de->d_name, "ap-journal-%16llx.wal%n", &s, &end) == 1 &&
        end == 31 && s < first)
      first = s;
  }
  closedir(d);
  j->n = 0;
  if (first == UINT64_MAX) return;
  ap_journal_options o;
  ap_journal_options_default(&o);
  o.dir = copy;
  o.d = D;
  o.after = first - 1;
  o.replay = jscan_one;
  o.replay_ctx = j;
  ap_journal *jr;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert_eq(ap_journal_open(&jr, &o, NULL, &e), 0, "journal copy: %s", o3m_err_message(&e));
  ap_journal_close(jr);
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static int cmp_ordinal(const void *a, const void *b) {
  return cmp_u64(&((const sent *)a)->ordinal, &((const sent *)b)->ordinal);
}

/* Position of decision in the journal (record order), or -1. */
static long journal_pos(const jscan *j, uint64_t decision) {
  for (size_t i = 0; i < j->n; i++)
    if (j->dec[i] == decision) return (long)i;
  return -1;
}

/* A client that sends GROUP_ROUNDS recommend + reward pairs. */
#define GROUP_ROUNDS 60
typedef struct group_arg {
  int id;
  long acked;
} group_arg;

static void *group_client(void *arg_) {
  group_arg *g = arg_;
  o3m_rng *r;
  o3m_rng_create_seeded_insecure(&r, 5000 + (uint64_t)g->id);
  o3m_err e;
  o3m_err_clear(&e);
  ap_client *cli = client_try_new(&e);
  for (int i = 0; cli && i < GROUP_ROUNDS; i++) {
    fed_round q;
    draw_round(r, &q);
    ap_recommendation rec;
    uint64_t updates;
    if (ap_client_recommend(cli, q.user, q.K, q.items, NULL, NULL, 0, &rec, &e) == 0 &&
        ap_client_reward(cli, rec.decision, 0.5, &updates, &e) == 0)
      g->acked++;
  }
  ap_client_destroy(cli);
  o3m_rng_destroy(r);
  return NULL;
}

/* The crash test with n_clients client threads: kills o3m-active with
 * SIGKILL at `kills` random moments under load and checks after each
 * restart that every acknowledged reward is in the model exactly once and
 * that the rest of the journal is a prefix of the rewards in flight (the
 * in-process replay in journal order gives the AP's theta). */
static void crash_run(int n_clients, int kills) {
  if (kills < 1) kills = 1;
  if (kills > MAX_KILLS) kills = MAX_KILLS;
  cr_assert(n_clients >= 1 && n_clients <= MAX_CLIENTS);
  static crash_ctx x;
  memset(&x, 0, sizeof x);
  central_init(&x.c);
  pthread_mutex_init(&x.mu, NULL);
  pthread_cond_init(&x.cv, NULL);
  x.acked = calloc(MAX_REWARDS, sizeof *x.acked);
  x.inflight = calloc(MAX_REWARDS, sizeof *x.inflight);
  cr_assert(x.acked && x.inflight);
  o3m_rng *r;
  cr_assert_eq(o3m_rng_create_seeded_insecure(&r, (uint64_t)time(NULL)), 0);
  pthread_t th[MAX_CLIENTS];
  client_arg args[MAX_CLIENTS];
  for (int i = 0; i < n_clients; i++) {
    args[i] = (client_arg){&x, i};
    cr_assert_eq(pthread_create(&th[i], NULL, client_main, &args[i]), 0);
  }
  /* In-flight rewards found in the journal ("landed"): they fill the
   * ordinal gaps. */
  sent *landed = calloc(MAX_REWARDS, sizeof *landed);
  cr_assert_not_null(landed);
  size_t n_landed = 0, inflight_seen = 0;
  long lost = 0, duplicated = 0;
  jscan js = {0};
  double t_start = fed_now_s();
  /* O3M_RECOVERY_MIN_REWARDS: keep each run going until that share of the
   * total has been acknowledged (the benchmark asks for thousands). */
  const char *env_min = getenv("O3M_RECOVERY_MIN_REWARDS");
  size_t min_rewards = env_min ? (size_t)atol(env_min) : 0;
  for (int kp = 0; kp < kills; kp++) {
    uint64_t u;
    o3m_rng_u64(r, &u);
    fed_sleep_ms(100 + (int)(u % 500)); /* a random moment */
    for (double t0 = fed_now_s(); fed_now_s() - t0 < 60;) {
      pthread_mutex_lock(&x.mu);
      size_t n = x.n_acked;
      pthread_mutex_unlock(&x.mu);
      if (n * (size_t)kills >= min_rewards * (size_t)(kp + 1)) break;
      fed_sleep_ms(20 + (int)(u % 50));
    }
    kill(fed.proc[FED_AP].pid, SIGKILL);
    cr_assert_eq(fed_wait_exit(&fed.proc[FED_AP], 5000), 128 + SIGKILL);
    keep_log(FED_AP);
    /* Every client notices and parks. */
    pthread_mutex_lock(&x.mu);
    double t0 = fed_now_s();
    while (x.parked < n_clients) {
      pthread_mutex_unlock(&x.mu);
      cr_assert_lt(fed_now_s() - t0, 20.0, "clients did not stop after the kill");
      fed_sleep_ms(10);
      pthread_mutex_lock(&x.mu);
    }
    pthread_mutex_unlock(&x.mu);
    cr_assert_eq(x.err[0], 0, "%s", x.err);

    /* Which of the rewards in flight reached the journal. */
    journal_scan(kp, &js);
    size_t first_new = n_landed;
    for (; inflight_seen < x.n_inflight; inflight_seen++) {
      long pos = journal_pos(&js, x.inflight[inflight_seen].decision);
      if (pos >= 0) {
        landed[n_landed] = x.inflight[inflight_seen];
        landed[n_landed++].ordinal = (uint64_t)pos; /* reused as the sort key */
      }
    }
    /* This run's landed rewards in journal order, which is apply order. */
    qsort(landed + first_new, n_landed - first_new, sizeof *landed, cmp_ordinal);
    /* A kill before the first reward reached the journal leaves it empty
     * (js.dec NULL), which qsort may not be given. */
    if (js.n > 1) qsort(js.dec, js.n, sizeof *js.dec, cmp_u64);
    for (size_t i = 1; i < js.n; i++) duplicated += js.dec[i] == js.dec[i - 1];

    restart(FED_AP);
    ap_client *cli = client_new();
    ap_stats st;
    ap_stats_get(cli, &st);
    ap_client_destroy(cli);

    /* Exactly the acknowledged rewards plus the landed ones, in ordinal
     * order: ordinals of acknowledged rewards are distinct and <= U, and
     * the gaps are exactly the landed ones. */
    uint64_t U = st.updates;
    qsort(x.acked, x.n_acked, sizeof *x.acked, cmp_ordinal);
    for (size_t i = 1; i < x.n_acked; i++)
      duplicated += x.acked[i].ordinal == x.acked[i - 1].ordinal;
    for (size_t i = 0; i < x.n_acked; i++) lost += x.acked[i].ordinal > U;
    uint64_t expect = x.n_acked + n_landed;
    if (U < expect) lost += (long)(expect - U);
    if (U > expect) duplicated += (long)(U - expect);
    cr_assert_eq(lost, 0, "kill point %d: %ld acknowledged rewards lost (U = %" PRIu64
                 ", acknowledged %zu, landed %zu)", kp, lost, U, x.n_acked, n_landed);
    cr_assert_eq(duplicated, 0, "kill point %d: %ld duplicated (U = %" PRIu64
                 ", acknowledged %zu, landed %zu)", kp, duplicated, U, x.n_acked, n_landed);

    /* The in-process replay in the AP's order: the gaps of the ordinals are
     * filled by the landed rewards in the order they were sent (their
     * journal order: one in flight per client, and the AP applies the
     * rewards of a run in journal order). */
    o3m_policy_reset(x.c.pol);
    size_t ai = 0, li = 0;
    for (uint64_t o = 1; o <= U; o++) {
      const sent *s;
      if (ai < x.n_acked && x.acked[ai].ordinal == o) s = &x.acked[ai++];
      else {
        cr_assert_lt(li, n_landed, "ordinal %" PRIu64 " is neither acknowledged nor landed", o);
        s = &landed[li++];
      }
      cr_assert_eq(o3m_policy_update(x.c.pol, 0, s->x, s->reward), 0);
    }
    double tn = o3m_policy_theta_norm(x.c.pol, 0);
    cr_assert_leq(fabs(st.theta_norm - tn), 1e-9 * fmax(1.0, tn),
                  "kill point %d: AP ||theta|| %.17g, replay %.17g", kp, st.theta_norm, tn);

    pthread_mutex_lock(&x.mu);
    x.epoch++;
    pthread_cond_broadcast(&x.cv);
    pthread_mutex_unlock(&x.mu);
  }
  pthread_mutex_lock(&x.mu);
  x.done = 1;
  pthread_cond_broadcast(&x.cv);
  pthread_mutex_unlock(&x.mu);
  for (int i = 0; i < n_clients; i++) pthread_join(th[i], NULL);
  cr_assert_eq(x.err[0], 0, "%s", x.err);
  fprintf(stderr, "crash test: %d clients, %zu rewards acknowledged, %zu in flight at a kill "
          "(%zu of them landed), %.1f s\n", n_clients, x.n_acked, x.n_inflight, n_landed,
          fed_now_s() - t_start);
  fprintf(stderr, "kill points: %d, lost: %ld, duplicated: %ld\n", kills, lost, duplicated);
  free(js.dec);
  free(landed);
  free(x.acked);
  free(x.inflight);
  o3m_rng_destroy(r);
  central_free(&x.c);
}

Test(recovery, crash_several_clients_every_acknowledged_reward_exactly_once,
     .init = fed_up_ckpt50, .fini = fed_down, .timeout = 1800) {
  const char *env = getenv("O3M_RECOVERY_KILLS");
  crash_run(CLIENTS, env ? atoi(env) : 3);
}

/* Group commit (ap_service.h, "A reward"), with the AP on 3 serving
 * threads and the PPs on 2: with 16 clients rewarding at once, one fdatasync acknowledges several rewards, and a kill -9 between
 * a group's append and its sync loses no acknowledged reward and leaves a
 * prefix of the group (crash_run's checks). The last run is stopped
 * cleanly, and its log line "N rewards acknowledged in G commits" must
 * show groups: fewer commits than rewards. */
Test(recovery, group_commit_groups_rewards_and_kill9_keeps_a_prefix,
     .init = fed_up_ckpt50_threads, .fini = fed_down, .timeout = 600) {
  crash_run(MAX_CLIENTS, 2);
  /* More rewards on the last run, so groups can form. */
  pthread_t th[MAX_CLIENTS];
  group_arg ga[MAX_CLIENTS];
  for (int i = 0; i < MAX_CLIENTS; i++) {
    ga[i] = (group_arg){i, 0};
    cr_assert_eq(pthread_create(&th[i], NULL, group_client, &ga[i]), 0);
  }
  for (int i = 0; i < MAX_CLIENTS; i++) pthread_join(th[i], NULL);
  long ok = 0;
  for (int i = 0; i < MAX_CLIENTS; i++) ok += ga[i].acked;
  cr_assert_gt(ok, 0);
  cr_assert_eq(fed_stop(&fed.proc[FED_AP], SIGTERM, 20000), 0, "%s", fed_log(&fed.proc[FED_AP]));
  FILE *f = fopen(fed.proc[FED_AP].log, "r");
  cr_assert_not_null(f);
  char line[1024];
  unsigned long long acked = 0, commits = 0;
  int found = 0;
  while (fgets(line, sizeof line, f)) {
    const char *p = strstr(line, "rewards acknowledged in ");
    if (!p) continue;
    while (p > line && p[-1] == ' ') p--;
    while (p > line && p[-1] >= '0' && p[-1] <= '9') p--;
    found = sscanf(p, "%llu rewards acknowledged in %llu commits", &acked, &commits) == 2;
  }
  fclose(f);
  cr_assert(found, "no commit line in the AP's log: %s", fed_log(&fed.proc[FED_AP]));
  fprintf(stderr, "group commit: %llu rewards acknowledged in %llu commits\n", acked, commits);
  cr_assert_geq(acked, (unsigned long long)ok);
  cr_assert_lt(commits, acked, "every reward had an fdatasync of its own: no group commit");
}

/* The same sequence of calls, one at a time: each decision's candidate and
 * score and each reward's ordinal. */
#define SEQ_ROUNDS 150
typedef struct seq_out {
  int candidate;
  double score;
  uint64_t updates;
} seq_out;

static void run_sequence(seq_out *out) {
  ap_client *cli = client_new();
  o3m_rng *r;
  cr_assert_eq(o3m_rng_create_seeded_insecure(&r, 77), 0);
  for (int i = 0; i < SEQ_ROUNDS; i++) {
    fed_round q;
    draw_round(r, &q);
    ap_recommendation rec;
    o3m_err e;
    o3m_err_clear(&e);
    cr_assert_eq(ap_client_recommend(cli, q.user, q.K, q.items, NULL, NULL, 0, &rec, &e), 0,
                 "%s", o3m_err_message(&e));
    out[i].candidate = rec.candidate;
    out[i].score = rec.score;
    cr_assert_eq(ap_client_reward(cli, rec.decision, (i % 3) / 2.0, &out[i].updates, &e), 0,
                 "%s", o3m_err_message(&e));
  }
  o3m_rng_destroy(r);
  ap_client_destroy(cli);
}

/* Decisions do not depend on the number of serving threads (ap_service.h,
 * "Threads"): the same sequence from a fresh model gives bit-identical
 * candidates, scores and ordinals on 3 threads (PPs on 2) and on 1. */
Test(recovery, decisions_do_not_depend_on_the_serving_threads, .init = fed_up_ckpt50_threads,
     .fini = fed_down, .timeout = 300) {
  static seq_out many[SEQ_ROUNDS], one[SEQ_ROUNDS];
  run_sequence(many);
  cr_assert_eq(fed_stop(&fed.proc[FED_AP], SIGTERM, 20000), 0);
  keep_log(FED_AP);
  ap_extra[0] = "--threads";
  ap_extra[1] = "1";
  ap_extra[2] = "--discard-state";
  ap_extra[3] = NULL;
  restart(FED_AP);
  run_sequence(one);
  int changed = 0;
  for (int i = 0; i < SEQ_ROUNDS; i++) {
    cr_assert_eq(many[i].candidate, one[i].candidate, "round %d", i);
    cr_assert_eq(memcmp(&many[i].score, &one[i].score, sizeof(double)), 0,
                 "round %d: score %.17g on 3 threads, %.17g on 1", i, many[i].score,
                 one[i].score);
    cr_assert_eq(many[i].updates, one[i].updates, "round %d", i);
    changed += i > 0 && many[i].score != many[i - 1].score;
  }
  cr_assert_gt(changed, SEQ_ROUNDS / 2, "the model did not move");
}
