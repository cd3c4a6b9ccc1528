/* test_alloc_faults.c -- every constructor of the core fails cleanly when
 * any one of its allocations fails (common/o3m_alloc.h).
 *
 * For each constructor the sweep makes the 1st, 2nd, ... allocation from
 * the call on fail (o3m_alloc_fail_nth), until a call goes through without
 * reaching the failing one; then again with every allocation after the
 * n-th failing too (o3m_alloc_fail_from). A call that hit the failure must return a
 * negative code with a message (O3M_ENOMEM unless the constructor documents
 * turning it into another), leave *out NULL and everything freed; a call
 * that succeeded although an allocation failed (an optional buffer given
 * up) must leave a handle that works. Leaks fail the test under the ASan
 * build (CI's -DO3M_ASAN=ON): each test ends with LeakSanitizer's check
 * (no_leaks), since the report it prints when Criterion's worker exits
 * fails nothing. The same loop is SQLite's test/malloc_common.tcl; the count of
 * failure points exercised is printed at the end of each test.
 *
 * The request paths allocate nothing per call (style: allocation at init
 * only), except what a reload builds anew: the tables' reload
 * (o3m_tables_load, the code of ap_round_reload and the PPs' reload) and the
 * pending table's local parts are swept too, and the mask generator's
 * service, which needs no peer. The AP's and the PPs' services fetch their
 * blocks from a running PMG at create: they are left to the end-to-end
 * tests. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ap_catalog.h"
#include "ap_checkpoint.h"
#include "ap_client.h"
#include "ap_fallback.h"
#include "ap_itemcache.h"
#include "ap_journal.h"
#include "ap_peers.h"
#include "ap_pending.h"
#include "ap_round.h"
#include "ap_service.h"
#include "o3m_access.h"
#include "o3m_alloc.h"
#include "o3m_blas.h"
#include "o3m_block_store.h"
#include "o3m_config.h"
#include "o3m_features.h"
#include "o3m_limits.h"
#include "o3m_mask.h"
#include "o3m_metrics.h"
#include "o3m_policy.h"
#include "o3m_rng.h"
#include "o3m_secagg.h"
#include "o3m_tables.h"
#include "o3m_wire.h"
#include "pmg_service.h"
#include "pp_service.h"
#include "test_dir.h"

static char dir[64];

static void make_dir(void) {
  o3m_blas_single_thread();
  snprintf(dir, sizeof dir, "/tmp/o3m-alloc-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
}

/* Under AddressSanitizer the test checks for leaks itself at its end:
 * LeakSanitizer's report at exit of Criterion's worker is printed but does
 * not fail the test. */
#if defined(__SANITIZE_ADDRESS__)
#define LEAK_CHECK 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LEAK_CHECK 1
#endif
#endif
#ifdef LEAK_CHECK
#include <sanitizer/lsan_interface.h>
#endif

/* Called at the end of each test, after everything it made is destroyed. */
static void no_leaks(void) {
#ifdef LEAK_CHECK
  cr_assert_eq(__lsan_do_recoverable_leak_check(), 0, "leaks (LeakSanitizer's report above)");
#endif
}

static void drop_dir(void) {
  o3m_alloc_fail_nth(0);
  test_dir_remove(dir);
}

TestSuite(alloc, .init = make_dir, .fini = drop_dir);

/* One attempt: builds the object, uses it and destroys it. Returns the
 * constructor's code (what it left is checked by the attempt itself). */
typedef int (*attempt_fn)(void *ctx, o3m_err *e);

/* Runs f with the n-th allocation failing for n = 1, 2, ... until a call
 * reaches no failure, and returns how many failure points it exercised.
 * enomem_only: every failure must be reported as O3M_ENOMEM. */
static long sweep_codes(const char *what, attempt_fn f, void *ctx, int enomem_only,
                        attempt_fn after, int persistent) {
  long tolerated = 0;
  for (long n = 1;; n++) {
    o3m_err e;
    o3m_err_clear(&e);
    if (persistent)
      o3m_alloc_fail_from(n);
    else
      o3m_alloc_fail_nth(n);
    int rc = f(ctx, &e);
    long failed = o3m_alloc_failed();
    o3m_alloc_fail_nth(0);
    /* What failed must leave the object usable: after runs without failures. */
    if (after) {
      o3m_err e2;
      o3m_err_clear(&e2);
      int rc2 = after(ctx, &e2);
      cr_assert_eq(rc2, O3M_OK, "%s: after allocation %ld failed (%s), the next call failed: %s (%s)",
                   what, n, o3m_errname(rc), o3m_errname(rc2), o3m_err_message(&e2));
    }
    if (!failed) {
      cr_assert_eq(rc, O3M_OK, "%s: failed without an allocation failure: %s (%s)", what,
                   o3m_errname(rc), o3m_err_message(&e));
      fprintf(stderr, "%s%s: %ld allocation failure points (%ld of them tolerated)\n", what,
              persistent ? " (persistent)" : "", n - 1, tolerated);
      cr_assert_gt(n, 1, "%s allocates nothing: the sweep tests nothing", what);
      return n - 1;
    }
    if (rc == O3M_OK) { /* tolerated: f used the handle */
      tolerated++;
      continue;
    }
    cr_assert_lt(rc, 0, "%s: allocation %ld failed, returned %d", what, n, rc);
    if (enomem_only)
      cr_assert_eq(rc, O3M_ENOMEM, "%s: allocation %ld failed, reported as %s (%s)", what, n,
                   o3m_errname(rc), o3m_err_message(&e));
    cr_assert_neq(o3m_err_message(&e)[0], '\0', "%s: allocation %ld failed without a message",
                  what, n);
  }
}

/* Both modes: the n-th allocation failing alone, then with every later
 * one (a caller that retries smaller, as libcsv does, fails then too). */
static long sweep(const char *what, attempt_fn f, void *ctx) {
  return sweep_codes(what, f, ctx, 1, NULL, 0) + sweep_codes(what, f, ctx, 1, NULL, 1);
}

static void write_file(const char *name, const char *text) {
  char p[128];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  FILE *f = fopen(p, "w");
  cr_assert_not_null(f, "%s", p);
  fputs(text, f);
  cr_assert_eq(fclose(f), 0);
}

static const char *path_of(const char *name) {
  static char p[4][128];
  static int i;
  i = (i + 1) % 4;
  snprintf(p[i], sizeof p[i], "%s/%s", dir, name);
  return p[i];
}

/* ---------------------------------------------------------------- common */

static const char *const CONF =
    "[federation]\nd = 4\ninsecure = true\naggregation = per-party\n"
    "[policy]\nalgo = lints\nmodel = shared\nmax_candidates = 8\n"
    "[party pmg]\nrole = pmg\naddress = 127.0.0.1:1\n"
    "[party shop]\nrole = active\naddress = 127.0.0.1:2\ndims = 2\n"
    "[party bank]\nrole = passive\naddress = 127.0.0.1:3\ndims = 1\nuser_table = u.csv\n"
    "[client frontend]\n"
    "[party telco]\nrole = passive\naddress = 127.0.0.1:4\ndims = 1\nuser_table = u.csv\n"
    "[client ops]\n";

static int try_config(void *ctx, o3m_err *e) {
  (void)ctx;
  o3m_config *c = NULL;
  int rc = o3m_config_parse_string(&c, CONF, NULL, "t.conf", e);
  if (rc < 0) {
    cr_assert_null(c);
    return rc;
  }
  cr_assert_eq(o3m_config_d(c), 4);
  o3m_config_destroy(c);
  return rc;
}

static int try_config_file(void *ctx, o3m_err *e) {
  o3m_config *c = NULL;
  int rc = o3m_config_load(&c, ctx, e);
  if (rc < 0) {
    cr_assert_null(c);
    return rc;
  }
  o3m_config_destroy(c);
  return rc;
}

static int try_metrics(void *ctx, o3m_err *e) {
  (void)ctx;
  o3m_metrics *m = NULL;
  int rc = o3m_metrics_create(&m, e);
  if (rc < 0) {
    cr_assert_null(m);
    return rc;
  }
  o3m_metrics_destroy(m);
  return rc;
}

Test(alloc, common) {
  long total = sweep("o3m_config_parse_string", try_config, NULL);
  write_file("fed.conf", CONF);
  total += sweep("o3m_config_load", try_config_file, (void *)path_of("fed.conf"));
  total += sweep("o3m_metrics_create", try_metrics, NULL);
  no_leaks();
  fprintf(stderr, "common: %ld failure points\n", total);
}

/* ---------------------------------------------------------------- linalg */

static int try_block(void *ctx, o3m_err *e) {
  (void)ctx;
  double data[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  o3m_block *b = NULL;
  int rc = o3m_block_create(&b, 4, 3, data, 7);
  if (rc < 0) {
    cr_assert_null(b);
    return o3m_err_set(e, rc, "o3m_block_create");
  }
  o3m_block_destroy(b);
  return rc;
}

static int try_rng(void *ctx, o3m_err *e) {
  (void)ctx;
  o3m_rng *r = NULL;
  int rc = o3m_rng_create_seeded_insecure(&r, 5);
  if (rc < 0) {
    cr_assert_null(r);
    return o3m_err_set(e, rc, "o3m_rng_create_seeded_insecure");
  }
  o3m_rng_destroy(r);
  return rc;
}

Test(alloc, linalg) {
  long total = sweep("o3m_block_create", try_block, NULL);
  total += sweep("o3m_rng_create_seeded_insecure", try_rng, NULL);
  no_leaks();
  fprintf(stderr, "linalg: %ld failure points\n", total);
}

/* ---------------------------------------------------------------- policy */

static void policy_config(o3m_policy_config *c, o3m_algo algo, o3m_model_kind model) {
  o3m_policy_config_default(c);
  c->algo = algo;
  c->model = model;
  c->d = 6;
  c->n_arms = 3;
  c->max_candidates = 4;
  c->refactor_every = 5;
  c->seed = 11;
}

/* Creates, decides and learns once, destroys. */
static int try_policy(void *ctx, o3m_err *e) {
  const o3m_policy_config *c = ctx;
  o3m_policy *p = NULL;
  int rc = o3m_policy_create(&p, c, e);
  if (rc < 0) {
    cr_assert_null(p);
    return rc;
  }
  double X[4 * 6];
  for (int i = 0; i < 4 * 6; i++) X[i] = 0.1 * (i % 5) - 0.2;
  int arms[4] = {0, 1, 2, 0}, chosen = -1;
  cr_assert_eq(o3m_policy_choose(p, 4, X, c->model == O3M_MODEL_DISJOINT ? arms : NULL, &chosen,
                                 NULL),
               O3M_OK);
  cr_assert(chosen >= 0 && chosen < 4);
  cr_assert_eq(o3m_policy_update(p, arms[chosen], X + 6 * chosen, 1.0), O3M_OK);
  o3m_policy_destroy(p);
  return rc;
}

Test(alloc, policy) {
  long total = 0;
  const o3m_algo algos[] = {O3M_ALGO_LINUCB, O3M_ALGO_LINTS};
  const o3m_model_kind models[] = {O3M_MODEL_SHARED, O3M_MODEL_DISJOINT};
  for (int a = 0; a < 2; a++)
    for (int m = 0; m < 2; m++) {
      o3m_policy_config c;
      policy_config(&c, algos[a], models[m]);
      total += sweep("o3m_policy_create", try_policy, &c);
    }
  no_leaks();
  fprintf(stderr, "policy: %ld failure points\n", total);
}

/* ---------------------------------------------------------------- party */

static int try_secagg(void *ctx, o3m_err *e) {
  (void)ctx;
  unsigned char pk[3][O3M_SECAGG_KEY_BYTES], sk[3][O3M_SECAGG_KEY_BYTES];
  for (int i = 0; i < 3; i++) crypto_box_keypair(pk[i], sk[i]);
  o3m_secagg *s = NULL;
  int rc = o3m_secagg_create_from_key(&s, 3, (const unsigned char(*)[O3M_SECAGG_KEY_BYTES])pk, 1,
                                      sk[1], 40, e);
  if (rc < 0) {
    cr_assert_null(s);
    return rc;
  }
  o3m_secagg_destroy(s);
  return rc;
}

static int try_features(void *ctx, o3m_err *e) {
  (void)ctx;
  o3m_features *f = NULL;
  int rc = o3m_features_load(&f, path_of("users.csv"), path_of("items.csv"), 5, e);
  if (rc < 0) {
    cr_assert_null(f);
    return rc;
  }
  o3m_features_destroy(f);
  return rc;
}

/* Creates the tables' handle and loads through it, as a reload does. */
static int try_tables(void *ctx, o3m_err *e) {
  o3m_metrics *m = ctx;
  o3m_tables_config c = {.config_name = "t.conf",
                         .party = "bank",
                         .user_table = path_of("users.csv"),
                         .item_table = path_of("items.csv"),
                         .dims = 5,
                         .max_norm = 1e6,
                         .metrics = m};
  o3m_tables *t = NULL;
  int rc = o3m_tables_create(&t, &c, e);
  if (rc < 0) {
    cr_assert_null(t);
    return rc;
  }
  o3m_features *f = NULL;
  rc = o3m_tables_load(t, &f, e);
  if (rc < 0) cr_assert_null(f);
  o3m_features_destroy(f);
  o3m_tables_destroy(t);
  return rc;
}

static void write_tables(void) {
  write_file("users.csv", "user_id,age,income,score\nu0,1.5,-2.25,0\nu1,0.5,4,1e-3\n"
                          "u2,2,1,1\n");
  write_file("items.csv", "item_id,price,rating\ni0,10,0.5\ni1,20.5,-0.25\ni2,3,1\n");
}

static const o3m_block_store_id STORE_ID = {.party = 1, .col0 = 2, .d = 4, .dj = 2};

static int try_block_store(void *ctx, o3m_err *e) {
  (void)ctx;
  o3m_block *b = NULL;
  char secret[16];
  size_t n = 0;
  int rc = o3m_block_store_load(dir, &STORE_ID, &b, secret, sizeof secret, &n, e);
  if (rc < 0) {
    cr_assert_null(b);
    return rc;
  }
  cr_assert_eq(n, 3);
  o3m_block_destroy(b);
  return rc;
}

Test(alloc, party) {
  write_tables();
  long total = sweep("o3m_secagg_create_from_key", try_secagg, NULL);
  total += sweep("o3m_features_load", try_features, NULL);
  o3m_metrics *m;
  cr_assert_eq(o3m_metrics_create(&m, NULL), O3M_OK);
  total += sweep("o3m_tables_create+load", try_tables, m);
  o3m_metrics_destroy(m);
  total += sweep("o3m_tables_create+load (no metrics)", try_tables, NULL);
  double data[4 * 2] = {1, 2, 3, 4, 5, 6, 7, 8};
  o3m_block *b;
  cr_assert_eq(o3m_block_create(&b, 4, 2, data, 9), O3M_OK);
  cr_assert_eq(o3m_block_store_save(dir, &STORE_ID, b, "key", 3, NULL), O3M_OK);
  o3m_block_destroy(b);
  total += sweep("o3m_block_store_load", try_block_store, NULL);
  no_leaks();
  fprintf(stderr, "party: %ld failure points\n", total);
}

/* ---------------------------------------------------------------- AP */

static int try_pending(void *ctx, o3m_err *e) {
  int shared = *(int *)ctx;
  ap_pending *t = NULL;
  int rc = shared ? ap_pending_create_shared(&t, 64, 4, 1000, 4, 8, NULL, NULL)
                  : ap_pending_create(&t, 64, 4, 1000, NULL, NULL);
  if (rc < 0) {
    cr_assert_null(t);
    return o3m_err_set(e, rc, "ap_pending_create");
  }
  /* The local parts' side table, allocated once at start-up. */
  rc = ap_pending_keep_local(t, 2);
  if (rc < 0) {
    ap_pending_destroy(t);
    return o3m_err_set(e, rc, "ap_pending_keep_local");
  }
  double x[4] = {1, 2, 3, 4}, x0[2] = {5, 6};
  uint64_t id;
  cr_assert_eq(ap_pending_open_as(t, shared ? 3 : 0, 1, 9, x, 10, &id), O3M_OK);
  ap_pending_set_local(t, id, x0, 0);
  const double *got;
  int degraded;
  cr_assert_eq(ap_pending_local(t, id, &got, &degraded), O3M_OK);
  cr_assert_eq(got[1], 6.0);
  ap_pending_destroy(t);
  return 0;
}

static int try_itemcache(void *ctx, o3m_err *e) {
  (void)ctx;
  ap_itemcache *c = NULL;
  int rc = ap_itemcache_create(&c, 16, 3, e);
  if (rc < 0) {
    cr_assert_null(c);
    return rc;
  }
  uint64_t epochs[2] = {1, 2};
  double v[3] = {1, 2, 3}, out[3];
  ap_itemcache_reset(c, 5, 2, epochs);
  ap_itemcache_put(c, "i0", v);
  cr_assert_eq(ap_itemcache_get(c, "i0", out), 1);
  ap_itemcache_destroy(c);
  return rc;
}

static int try_catalog(void *ctx, o3m_err *e) {
  (void)ctx;
  ap_catalog *c = NULL;
  int rc = ap_catalog_load(&c, path_of("items.txt"), 10, e);
  if (rc < 0) {
    cr_assert_null(c);
    return rc;
  }
  ap_catalog_destroy(c);
  return rc;
}

static int try_fallback(void *ctx, o3m_err *e) {
  o3m_metrics *m = ctx;
  o3m_policy_config pc;
  policy_config(&pc, O3M_ALGO_LINUCB, O3M_MODEL_SHARED);
  ap_fallback *fb = NULL;
  int rc = ap_fallback_create(&fb, &pc, m, e);
  if (rc < 0) {
    cr_assert_null(fb);
    return rc;
  }
  ap_fallback_destroy(fb);
  return rc;
}

/* The state directories of the journal and checkpoint sweeps: a new one
 * for each attempt (fresh = 1), so that each attempt opens what a first
 * start opens, or always the same one, written once before the sweep, so
 * that each replays what a restart replays. */
typedef struct state_ctx {
  const char *name;
  int fresh;
  int attempt;
  o3m_policy *policy;
  char path[128];
} state_ctx;

static const char *state_dir(state_ctx *c) {
  if (c->fresh || !c->path[0]) {
    snprintf(c->path, sizeof c->path, "%s/%s-%d", dir, c->name, c->attempt++);
    cr_assert_eq(mkdir(c->path, 0700), 0, "%s", c->path);
  }
  return c->path;
}

static int journal_records(void *ctx, const ap_journal_record *r) {
  (void)r;
  (*(int *)ctx)++;
  return 0;
}

/* Opens the journal, appends and syncs a reward, closes. */
static int try_journal(void *ctx, o3m_err *e) {
  ap_journal_options o;
  ap_journal_options_default(&o);
  o.dir = state_dir(ctx);
  o.d = 3;
  o.segment_bytes = 4096;
  o.buffer_records = 4;
  int seen = 0;
  o.replay = journal_records;
  o.replay_ctx = &seen;
  ap_journal *j = NULL;
  int rc = ap_journal_open(&j, &o, NULL, e);
  if (rc < 0) {
    cr_assert_null(j);
    return rc;
  }
  double x[3] = {1, 2, 3};
  ap_journal_record r = {.type = AP_JOURNAL_REWARD, .decision = 1, .mask_id = 2, .arm = 0,
                         .reward = 1, .x = x};
  /* Enough records to rotate to a second segment (4096-byte segments). */
  for (int i = 0; i < 80 && rc == 0; i++) {
    rc = ap_journal_append(j, &r, NULL);
    if (rc == 0 && i % 8 == 7) rc = ap_journal_sync(j, e);
  }
  if (rc < 0) o3m_err_set(e, rc, "ap_journal_append");
  ap_journal_close(j);
  return rc;
}

/* Recovers the policy from the state directory, learns a reward through
 * the checkpoint, writes a checkpoint, closes. */
static int try_checkpoint(void *ctx, o3m_err *e) {
  state_ctx *c = ctx;
  ap_checkpoint_options o;
  ap_checkpoint_options_default(&o);
  o.state_dir = state_dir(c);
  o.mask_id = 3;
  o.every_ms = 0;
  o.segment_bytes = 4096;
  ap_checkpoint *ck = NULL;
  int rc = ap_checkpoint_open(&ck, c->policy, &o, NULL, e);
  if (rc < 0) {
    cr_assert_null(ck);
    return rc;
  }
  double x[6] = {0.1, 0.2, 0.3, 0.4, 0.5, 0.6};
  rc = ap_checkpoint_apply_reward(ck, 1, 0, x, NULL, 1.0);
  if (rc < 0)
    o3m_err_set(e, rc, "ap_checkpoint_apply_reward");
  else
    rc = ap_checkpoint_sync(ck, e);
  if (rc == 0) rc = ap_checkpoint_write(ck, e);
  ap_checkpoint_close(ck);
  return rc;
}

Test(alloc, ap) {
  long total = 0;
  int shared = 0;
  total += sweep("ap_pending_create", try_pending, &shared);
  shared = 1;
  total += sweep("ap_pending_create_shared", try_pending, &shared);
  total += sweep("ap_itemcache_create", try_itemcache, NULL);
  write_file("items.txt", "i0\ni1\r\ni2\n");
  total += sweep("ap_catalog_load", try_catalog, NULL);
  o3m_metrics *m;
  cr_assert_eq(o3m_metrics_create(&m, NULL), O3M_OK);
  total += sweep("ap_fallback_create", try_fallback, m);
  o3m_metrics_destroy(m);

  state_ctx jc = {.name = "journal", .fresh = 1};
  total += sweep("ap_journal_open (new)", try_journal, &jc);
  state_ctx jr = {.name = "journal-replay", .fresh = 0};
  cr_assert_eq(try_journal(&jr, NULL), O3M_OK);
  total += sweep("ap_journal_open (replay)", try_journal, &jr);

  o3m_policy_config pc;
  policy_config(&pc, O3M_ALGO_LINTS, O3M_MODEL_SHARED);
  o3m_policy *p;
  cr_assert_eq(o3m_policy_create(&p, &pc, NULL), O3M_OK);
  state_ctx cc = {.name = "ckpt", .fresh = 1, .policy = p};
  total += sweep("ap_checkpoint_open (new)", try_checkpoint, &cc);
  state_ctx cr_ = {.name = "ckpt-recover", .fresh = 0, .policy = p};
  cr_assert_eq(try_checkpoint(&cr_, NULL), O3M_OK);
  total += sweep("ap_checkpoint_open (recover)", try_checkpoint, &cr_);
  o3m_policy_destroy(p);
  no_leaks();
  fprintf(stderr, "ap: %ld failure points\n", total);
}

/* ---------------------------------------------------------------- AP, federation */

static o3m_config *load_conf(void) {
  o3m_config *c;
  o3m_err e;
  cr_assert_eq(o3m_config_parse_string(&c, CONF, NULL, "t.conf", &e), 0, "%s",
               o3m_err_message(&e));
  return c;
}

/* A config and its fingerprint, computed before the sweep as the AP's
 * service does before it creates its peer sets. */
typedef struct {
  const o3m_config *cfg;
  unsigned char fp[O3M_FINGERPRINT_BYTES];
} peers_ctx;

static int try_peers(void *ctx, o3m_err *e) {
  const peers_ctx *pc = ctx;
  ap_peers *ps = NULL;
  int rc = ap_peers_create(&ps, pc->cfg, o3m_config_party(pc->cfg, "shop"), 1, pc->fp, e);
  if (rc < 0) {
    cr_assert_null(ps);
    return rc;
  }
  ap_peers_destroy(ps);
  return rc;
}

static int try_client(void *ctx, o3m_err *e) {
  (void)ctx;
  ap_client_options o;
  ap_client_options_default(&o);
  o.target = "127.0.0.1:1,127.0.0.1:2";
  o.insecure = 1;
  ap_client *c = NULL;
  int rc = ap_client_create(&c, &o, e);
  if (rc < 0) {
    cr_assert_null(c);
    return rc;
  }
  ap_client_destroy(c);
  return rc;
}

static int h_none(void *ctx, o3m_rpc_call *call, const ProtobufCMessage *req,
                  ProtobufCMessage *reply, o3m_err *e) {
  (void)ctx, (void)call, (void)req, (void)reply, (void)e;
  return 0;
}

static const o3m_rpc_method METHODS[] = {
    {"/t.S/A", &o3m__v1__info_request__descriptor, &o3m__v1__ack__descriptor, h_none},
    {"/t.S/B", &o3m__v1__info_request__descriptor, &o3m__v1__ack__descriptor, h_none},
};

static int try_access(void *ctx, o3m_err *e) {
  const o3m_config *cfg = ctx;
  static const o3m_access_rule rules[] = {{"/t.S/A", O3M_ACCESS_CLIENT}, {"/t.S/B", 0}};
  o3m_access *a = NULL;
  int rc = o3m_access_create(&a, cfg, "shop", rules, 2, METHODS, 2, e);
  if (rc < 0) {
    cr_assert_null(a);
    return rc;
  }
  o3m_access_destroy(a);
  return rc;
}

/* The AP's round engine with its own tables, over a policy and a pending
 * table made before the sweep (as ap_service_create makes them first). */
typedef struct round_ctx {
  o3m_policy *policy;
  ap_pending *pending;
  int item_cache;
} round_ctx;

static int try_round(void *ctx, o3m_err *e) {
  round_ctx *c = ctx;
  ap_round_config rc_ = {.party = "shop",
                         .config_name = "t.conf",
                         .d = 6,
                         .d0 = 5,
                         .k_max = 4,
                         .max_norm = 1e6,
                         .sum_norm = 2e6,
                         .model = O3M_MODEL_SHARED,
                         .policy = c->policy,
                         .pending = c->pending,
                         .user_table = path_of("users.csv"),
                         .item_table = path_of("items.csv"),
                         .inflight = 2,
                         .n_owners = 1,
                         .client_inflight_max = 4,
                         .batch_cost_max = 1000,
                         .slice_cost_max = 1000,
                         .item_cache = c->item_cache};
  ap_round *r = NULL;
  int rc = ap_round_create(&r, &rc_, e);
  if (rc < 0) {
    cr_assert_null(r);
    return rc;
  }
  ap_round_destroy(r);
  return rc;
}

Test(alloc, ap_federation) {
  write_tables();
  o3m_config *cfg = load_conf();
  peers_ctx pctx = {.cfg = cfg};
  o3m_err fe;
  cr_assert_eq(o3m_fingerprint_compute(cfg, pctx.fp, &fe), 0, "%s", o3m_err_message(&fe));
  long total = sweep("ap_peers_create", try_peers, &pctx);
  total += sweep("ap_client_create", try_client, NULL);
  total += sweep("o3m_access_create", try_access, cfg);
  o3m_config_destroy(cfg);

  o3m_policy_config pc;
  policy_config(&pc, O3M_ALGO_LINUCB, O3M_MODEL_SHARED);
  round_ctx rc = {0};
  cr_assert_eq(o3m_policy_create(&rc.policy, &pc, NULL), O3M_OK);
  cr_assert_eq(ap_pending_create(&rc.pending, 64, 6, 1000, NULL, NULL), O3M_OK);
  total += sweep("ap_round_create", try_round, &rc);
  rc.item_cache = 8;
  total += sweep("ap_round_create (item cache)", try_round, &rc);
  ap_pending_destroy(rc.pending);
  o3m_policy_destroy(rc.policy);
  no_leaks();
  fprintf(stderr, "ap_federation: %ld failure points\n", total);
}

/* ---------------------------------------------------------------- PMG */

/* The mask generator: draws Q, builds the partition and binds its server
 * (plaintext, on a Unix socket of the test's directory). */
static int try_pmg(void *ctx, o3m_err *e) {
  const o3m_config *cfg = ctx;
  pmg_options o = {.insecure = 1, .seeded = 1, .seed = 3};
  pmg_service *s = NULL;
  int rc = pmg_service_create(&s, cfg, &o, e);
  if (rc < 0) {
    cr_assert_null(s);
    return rc;
  }
  pmg_service_destroy(s);
  return rc;
}

/* A federation of a PMG, the AP and one PP on Unix sockets of the test's
 * directory, plaintext. */
static o3m_config *fed_conf(void) {
  char text[1024];
  snprintf(text, sizeof text,
           "[federation]\nd = 4\ninsecure = true\naggregation = per-party\n"
           "[policy]\nalgo = linucb\nmodel = shared\n"
           "[party pmg]\nrole = pmg\naddress = unix:%s/pmg.sock\n"
           "[party shop]\nrole = active\naddress = unix:%s/ap.sock\ndims = 2\n"
           "state_dir = %s/shop\n"
           "[party bank]\nrole = passive\naddress = unix:%s/pp.sock\ndims = 2\n"
           "user_table = %s/users2.csv\nstate_dir = %s/bank\n",
           dir, dir, dir, dir, dir, dir);
  write_file("users2.csv", "user_id,a,b\nu0,1,2\nu1,-1,0.5\n");
  o3m_config *cfg;
  o3m_err e;
  cr_assert_eq(o3m_config_parse_string(&cfg, text, NULL, "t.conf", &e), 0, "%s",
               o3m_err_message(&e));
  return cfg;
}

static void *pmg_thread(void *s) {
  pmg_service_run(s);
  return NULL;
}

static void *pp_thread(void *s) {
  pp_service_run(s);
  return NULL;
}

/* The passive party's service: loads its tables, loads its block from its
 * state_dir (stored by a first start before the sweep, from the PMG that
 * runs in a thread) and binds its server. */
/* The active party's service: its policy, pending table, checkpoint and
 * journal (recovered from its state_dir), peers, round engine and server,
 * with its block loaded from the state_dir as the PP's. */
static int try_ap(void *ctx, o3m_err *e) {
  const o3m_config *cfg = ctx;
  ap_service_options o;
  ap_service_options_default(&o);
  o.party = "shop";
  o.insecure = 1;
  o.pmg_timeout_s = 5;
  o.threads = 2;
  ap_service *s = NULL;
  int rc = ap_service_create(&s, cfg, &o, e);
  if (rc < 0) {
    cr_assert_null(s);
    return rc;
  }
  ap_service_destroy(s);
  return rc;
}

/* A client of the AP in this process: a Recommend and the Reward of its
 * decision, through the AP's handlers, its fan-out to the PP's Mask
 * handler, the replies and the journal; the countdown hits whichever
 * thread allocates next. */
typedef struct call_ctx {
  ap_client *client;
  const o3m_config *cfg;
} call_ctx;

enum { BIG_K = 1000 };

/* A small round, then one of BIG_K candidates with the longest ids, whose
 * messages outgrow every arena on the way (the AP's request, its MaskBatch
 * at the PP, the replies), each rewarded. */
static int try_calls(void *ctx, o3m_err *e) {
  call_ctx *c = ctx;
  static char ids[BIG_K][O3M_MAX_ID + 1];
  static const char *items[BIG_K];
  static double own[BIG_K * 2];
  for (int k = 0; k < BIG_K; k++) {
    snprintf(ids[k], sizeof ids[k], "%0*d", O3M_MAX_ID, k);
    items[k] = ids[k];
    own[2 * k] = 0.001 * k;
    own[2 * k + 1] = -0.5;
  }
  const int sizes[2] = {2, BIG_K};
  for (int i = 0; i < 2; i++) {
    ap_recommendation rec;
    int rc = ap_client_recommend(c->client, "u1", sizes[i], items, NULL, own,
                                 (size_t)sizes[i] * 2, &rec, e);
    if (rc < 0) return rc;
    cr_assert(rec.candidate >= 0 && rec.candidate < sizes[i]);
    rc = ap_client_reward(c->client, rec.decision, 1.0, NULL, e);
    if (rc < 0) return rc;
  }
  return 0;
}

static void *ap_thread(void *s) {
  ap_service_run(s);
  return NULL;
}

/* A fresh AP serving (its arenas at their initial size), a fresh client
 * and try_calls; the PMG and the PP keep serving across attempts. */
static int try_live(void *ctx, o3m_err *e) {
  call_ctx *c = ctx;
  ap_service_options apo;
  ap_service_options_default(&apo);
  apo.party = "shop";
  apo.insecure = 1;
  apo.pmg_timeout_s = 5;
  apo.threads = 2;
  ap_service *ap = NULL;
  int rc = ap_service_create(&ap, c->cfg, &apo, e);
  if (rc < 0) return rc;
  pthread_t th;
  cr_assert_eq(pthread_create(&th, NULL, ap_thread, ap), 0);
  char target[96];
  snprintf(target, sizeof target, "unix:%s/ap.sock", dir);
  ap_client_options co;
  ap_client_options_default(&co);
  co.target = target;
  co.insecure = 1;
  co.deadline_ms = 5000;
  co.wait_for_ready = 1;
  rc = ap_client_create(&c->client, &co, e);
  if (rc == 0) rc = try_calls(c, e);
  ap_client_destroy(c->client);
  c->client = NULL;
  ap_service_shutdown(ap);
  pthread_join(th, NULL);
  ap_service_destroy(ap);
  return rc;
}

static int try_pp(void *ctx, o3m_err *e) {
  const o3m_config *cfg = ctx;
  pp_options o = {.insecure = 1, .pmg_timeout_s = 5, .threads = 1};
  pp_service *s = NULL;
  int rc = pp_service_create(&s, cfg, "bank", &o, e);
  if (rc < 0) {
    cr_assert_null(s);
    return rc;
  }
  pp_service_destroy(s);
  return rc;
}

Test(alloc, services) {
  o3m_config *cfg = fed_conf();
  long total = sweep("pmg_service_create", try_pmg, cfg);

  pmg_options po = {.insecure = 1, .keep_mask = 1, .seeded = 1, .seed = 3};
  pmg_service *pmg;
  o3m_err e;
  cr_assert_eq(pmg_service_create(&pmg, cfg, &po, &e), O3M_OK, "%s", o3m_err_message(&e));
  pthread_t th;
  cr_assert_eq(pthread_create(&th, NULL, pmg_thread, pmg), 0);
  cr_assert_eq(try_pp(cfg, &e), O3M_OK, "first start: %s", o3m_err_message(&e));
  total += sweep("pp_service_create", try_pp, cfg);
  /* The AP's start-up waits for its peers: the PP serves meanwhile. */
  pp_options ppo = {.insecure = 1, .pmg_timeout_s = 5, .threads = 1};
  pp_service *pp;
  cr_assert_eq(pp_service_create(&pp, cfg, "bank", &ppo, &e), O3M_OK, "%s", o3m_err_message(&e));
  pthread_t pth;
  cr_assert_eq(pthread_create(&pth, NULL, pp_thread, pp), 0);
  cr_assert_eq(try_ap(cfg, &e), O3M_OK, "first start: %s", o3m_err_message(&e));
  total += sweep("ap_service_create", try_ap, cfg);

  /* The request paths, with the three services serving. A failure may
   * reach the client as another code than O3M_ENOMEM (the server's
   * arena full is O3M_EFULL, a PP that could not answer makes the round
   * O3M_EUNAVAILABLE), so any error with a message passes; the PP must
   * serve the next attempt as before. */
  call_ctx cc = {.cfg = cfg};
  cr_assert_eq(try_live(&cc, &e), O3M_OK, "first calls: %s", o3m_err_message(&e));
  total += sweep_codes("AP start + Recommend + Reward", try_live, &cc, 0, try_live, 0);
  pp_service_shutdown(pp);
  pthread_join(pth, NULL);
  pp_service_destroy(pp);
  pmg_service_shutdown(pmg);
  pthread_join(th, NULL);
  pmg_service_destroy(pmg);
  o3m_config_destroy(cfg);
  no_leaks();
  fprintf(stderr, "services: %ld failure points\n", total);
}
