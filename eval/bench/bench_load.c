/* bench_load.c -- o3m-bench-load: drives a running federation's active
 * participant and reports decisions per second, latency and bytes on the
 * wire per decision.
 *
 * Each of C client threads has its own channel and keeps one Recommend in
 * flight at a time (concurrency C). A decision is one Recommend (the AP's
 * fan-out to every passive participant, the summation and the policy); with
 * --with-reward each decision is followed by its Reward on the same thread.
 * With --rewards-only the run measures Rewards alone: all clients send 100
 * Recommends each (untimed), meet at a barrier, send the 100 Rewards of
 * those decisions one at a time each (timed: rewards/s and latency per
 * Reward), meet again, and so on until the reward phases add up to
 * --seconds; that is what a group commit of the AP's journal is measured
 * with.
 * Latency is measured per Recommend, client-side. Bytes on the wire are
 * the loopback interface's byte counter (/proc/net/dev, "lo") over the
 * measured interval divided by the decisions: every byte of every connection
 * of the federation, TLS records, HTTP/2 framing, TCP/IP headers and ACKs
 * included, so it is an upper bound of the protocol's own overhead. It is
 * compared with the paper's payload, K (M-1) d float64s per decision: the
 * masked vectors the passive participants send. Run it alone on the machine:
 * other loopback traffic would count too. The last column is the mean
 * number of rounds per fan-out (ActiveStats rounds / fanouts over the
 * level): the AP batches the Recommend calls that queue while a fan-out is
 * in flight into one MaskBatch per passive participant.
 *
 * Options for a client that floods, or for one beside a flood
 * (eval/bench/attack-fairness.sh): --id-bytes pads every item id to that
 * many bytes (the largest allowed is O3M_MAX_ID), --fresh-ids makes every
 * round's item ids new (the fresh-id flood: none is in the AP's item
 * cache, every passive party computes every item part), --calls stops a level
 * after that many Recommends, and --reward-delay S keeps every decision of
 * the level open and, S seconds after the level, rewards each one (one at
 * a time per client), counting those the AP no longer holds (NOT_FOUND:
 * evicted). The errors column counts every failed call; when there were
 * any, the line after it says how many were DEADLINE_EXCEEDED and
 * RESOURCE_EXHAUSTED.
 *
 * eval/bench/run-load.sh starts a federation (M = 5, d = 100) and runs this. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

#include "o3m.pb-c.h"
#include "o3m_cli.h"
#include "o3m_clock.h"
#include "o3m_config.h"
#include "o3m_rng.h"
#include "o3m_rpc.h"
#include "o3m_wire.h"

#define MAX_THREADS 256
#define MAX_LAT 2000000

typedef struct bench {
  const o3m_config *cfg;
  const char *cert, *key;
  int insecure, K, users, items, with_reward, rewards_only;
  int id_bytes;           /* --id-bytes: item ids padded to this length (0: as drawn) */
  int fresh_ids;          /* --fresh-ids: every round's item ids are new */
  long calls;             /* --calls: Recommends per level (0: no limit) */
  atomic_long started;    /* Recommends started in the level */
  double reward_delay;    /* --reward-delay: seconds; < 0: off */
  int deadline_ms;        /* --deadline-ms: per call (0: the RPC client's default) */
  /* --targets: AP replicas' addresses (default: the config's active
   * party); worker i calls targets[i % n_targets]. */
  char targets_buf[1024]; /* the list, split in place */
  char *targets[8];
  int n_targets;
  atomic_int phase; /* 0 warm-up, 1 measure, 2 stop */
  pthread_barrier_t bar; /* --rewards-only: the workers and the main thread */
} bench;

typedef struct worker {
  bench *b;
  int id;
  pthread_t th;
  o3m_rpc_client *cli;
  double *lat; /* seconds, measured phase only */
  long n_lat;
  long errors;
  long deadline, exhausted; /* of errors: DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED */
  uint64_t *held;           /* --reward-delay: the level's decisions */
  long n_held;
  long rewarded, not_found; /* --reward-delay: their rewards' outcomes */
  char err[256];
} worker;

/* Loopback bytes received so far (equal to bytes sent on lo). */
static long long lo_bytes(void) {
  FILE *f = fopen("/proc/net/dev", "r");
  if (!f) return -1;
  char line[512];
  long long v = -1;
  while (fgets(line, sizeof line, f)) {
    char *p = line;
    while (*p == ' ') p++;
    if (!strncmp(p, "lo:", 3)) {
      v = strtoll(p + 3, NULL, 10);
      break;
    }
  }
  fclose(f);
  return v;
}

/* --fresh-ids: the rounds of this process so far, over every worker. */
static atomic_long fresh_rounds;

/* One Recommend of K random candidates for a random user on w's client;
 * *reply lives until w's next call. */
static int recommend_once(worker *w, o3m_rng *rng, int *perm, ProtobufCMessage **reply,
                          uint64_t *u, o3m_err *e) {
  const bench *b = w->b;
  char user[32], ids[1024][O3M_MAX_ID + 1];
  char *idp[1024];
  for (int k = 0; k < b->K; k++) idp[k] = ids[k];
  const long fresh = b->fresh_ids ? atomic_fetch_add(&fresh_rounds, 1) : 0;
  o3m_rng_u64(rng, u);
  snprintf(user, sizeof user, "u%d", (int)(*u % (uint64_t)b->users));
  for (int k = 0; k < b->K; k++) {
    o3m_rng_u64(rng, u);
    int j = k + (int)(*u % (uint64_t)(b->items - k));
    int t = perm[k];
    perm[k] = perm[j];
    perm[j] = t;
    /* --fresh-ids: an id no round asked before (worker, round, candidate),
     * so that the AP has none cached and every passive party computes
     * every candidate's item part. */
    int len = b->fresh_ids ? snprintf(ids[k], sizeof ids[k], "f%ld.%d", fresh, k)
                           : snprintf(ids[k], sizeof ids[k], "i%d", perm[k]);
    /* --id-bytes: padded after the number, so that the ids stay distinct. */
    if (len < b->id_bytes) {
      memset(ids[k] + len, 'x', (size_t)(b->id_bytes - len));
      ids[k][b->id_bytes] = '\0';
    }
  }
  O3m__V1__RecommendRequest req = O3M__V1__RECOMMEND_REQUEST__INIT;
  req.user = user;
  req.n_items = (size_t)b->K;
  req.items = idp;
  return o3m_rpc_client_call(w->cli, O3M_PATH_ACTIVE_RECOMMEND, &req.base,
                             &o3m__v1__recommendation__descriptor, reply, e);
}

static int reward_once(worker *w, uint64_t decision, double reward, o3m_err *e) {
  O3m__V1__RewardRequest rw = O3M__V1__REWARD_REQUEST__INIT;
  rw.decision = decision;
  rw.reward = reward;
  ProtobufCMessage *reply;
  return o3m_rpc_client_call(w->cli, O3M_PATH_ACTIVE_REWARD, &rw.base,
                             &o3m__v1__reward_reply__descriptor, &reply, e);
}

static void *worker_main(void *arg) {
  worker *w = arg;
  bench *b = w->b;
  o3m_rng *rng;
  o3m_rng_create_seeded_insecure(&rng, 1000 + (uint64_t)w->id);
  int *perm = malloc(sizeof(int) * b->items);
  for (int i = 0; i < b->items; i++) perm[i] = i;
  o3m_err e;
  while (atomic_load(&b->phase) < 2) {
    if (b->calls > 0 && atomic_fetch_add(&b->started, 1) >= b->calls) break;
    ProtobufCMessage *reply;
    uint64_t u;
    int phase = atomic_load(&b->phase);
    double t0 = o3m_clock_s();
    int rc = recommend_once(w, rng, perm, &reply, &u, &e);
    double dt = o3m_clock_s() - t0;
    if (rc) {
      w->errors++;
      w->deadline += rc == O3M_EDEADLINE;
      w->exhausted += rc == O3M_EFULL;
      snprintf(w->err, sizeof w->err, "%s: %s", o3m_errname(rc), o3m_err_message(&e));
      continue;
    }
    if (phase == 1 && atomic_load(&b->phase) == 1 && w->n_lat < MAX_LAT) w->lat[w->n_lat++] = dt;
    if (b->reward_delay >= 0 && w->n_held < MAX_LAT)
      w->held[w->n_held++] = ((const O3m__V1__Recommendation *)reply)->decision;
    if (b->with_reward &&
        reward_once(w, ((const O3m__V1__Recommendation *)reply)->decision, (u & 1) ? 1.0 : 0.0,
                    &e))
      w->errors++;
  }
  free(perm);
  o3m_rng_destroy(rng);
  return NULL;
}

/* --rewards-only: cycles of BURST Recommends per worker (not measured),
 * then a barrier, then their BURST Rewards, one in flight per worker, so
 * that while the main thread times a reward phase only Rewards reach the
 * AP. Latency is measured per Reward. */
#define BURST 100
static void *worker_rewards(void *arg) {
  worker *w = arg;
  bench *b = w->b;
  o3m_rng *rng;
  o3m_rng_create_seeded_insecure(&rng, 1000 + (uint64_t)w->id);
  int *perm = malloc(sizeof(int) * b->items);
  for (int i = 0; i < b->items; i++) perm[i] = i;
  uint64_t dec[BURST];
  o3m_err e;
  for (;;) {
    pthread_barrier_wait(&b->bar); /* a cycle starts, or the run ends */
    if (atomic_load(&b->phase) == 2) break;
    int n = 0;
    for (int i = 0; i < BURST; i++) {
      ProtobufCMessage *reply;
      uint64_t u;
      int rc = recommend_once(w, rng, perm, &reply, &u, &e);
      if (rc == 0) dec[n++] = ((const O3m__V1__Recommendation *)reply)->decision;
      else {
        w->errors++;
        snprintf(w->err, sizeof w->err, "%s: %s", o3m_errname(rc), o3m_err_message(&e));
      }
    }
    pthread_barrier_wait(&b->bar); /* the main thread starts its clock */
    int measured = atomic_load(&b->phase) == 1;
    for (int i = 0; i < n; i++) {
      double t0 = o3m_clock_s();
      int rc = reward_once(w, dec[i], (dec[i] & 1) ? 1.0 : 0.0, &e);
      double dt = o3m_clock_s() - t0;
      if (rc) {
        w->errors++;
        snprintf(w->err, sizeof w->err, "%s: %s", o3m_errname(rc), o3m_err_message(&e));
      } else if (measured && w->n_lat < MAX_LAT) {
        w->lat[w->n_lat++] = dt;
      }
    }
    pthread_barrier_wait(&b->bar); /* every reward of the cycle is answered */
  }
  free(perm);
  o3m_rng_destroy(rng);
  return NULL;
}

/* --reward-delay: rewards every decision worker w kept, one at a time. */
static void *worker_reward_held(void *arg) {
  worker *w = arg;
  o3m_err e;
  for (long i = 0; i < w->n_held; i++) {
    int rc = reward_once(w, w->held[i], (w->held[i] & 1) ? 1.0 : 0.0, &e);
    if (rc == 0) w->rewarded++;
    else if (rc == O3M_ENOTFOUND) w->not_found++;
    else {
      w->errors++;
      snprintf(w->err, sizeof w->err, "Reward: %s: %s", o3m_errname(rc), o3m_err_message(&e));
    }
  }
  return NULL;
}

/* The AP's rounds and fan-outs so far (both 0 if Stats fails). */
static void ap_counts(o3m_rpc_client *c, uint64_t *rounds, uint64_t *fanouts) {
  O3m__V1__StatsRequest req = O3M__V1__STATS_REQUEST__INIT;
  ProtobufCMessage *m;
  o3m_err e;
  *rounds = *fanouts = 0;
  if (o3m_rpc_client_call(c, O3M_PATH_ACTIVE_STATS, &req.base, &o3m__v1__active_stats__descriptor,
                          &m, &e) == 0) {
    *rounds = ((const O3m__V1__ActiveStats *)m)->rounds;
    *fanouts = ((const O3m__V1__ActiveStats *)m)->fanouts;
  }
}

/* A client of the active participant with the load client's certificate
 * (plaintext with --insecure), waiting for the AP to be ready; with
 * as_operator set, with the active party's own certificate instead when the
 * config names readable files for it: the AP answers the fan-outs, which
 * give the batch column, only to its operator (a client's Stats are its
 * own, SECURITY.md "Stats by who asks"). */
static int ap_client(const bench *b, int i, int as_operator, o3m_rpc_client **out, o3m_err *e) {
  o3m_rpc_client_config cc;
  o3m_rpc_client_config_default(&cc);
  cc.target = b->n_targets ? b->targets[i % b->n_targets] : o3m_config_active(b->cfg)->address;
  cc.insecure = b->insecure;
  if (!b->insecure) {
    cc.tls.ca_file = o3m_config_ca(b->cfg);
    cc.tls.cert_file = b->cert;
    cc.tls.key_file = b->key;
    const o3m_party *ap = o3m_config_active(b->cfg);
    if (as_operator && ap->cert && ap->key && access(ap->cert, R_OK) == 0 &&
        access(ap->key, R_OK) == 0) {
      cc.tls.cert_file = ap->cert;
      cc.tls.key_file = ap->key;
    }
    /* Certificates name parties: a replica at another address presents
     * the active party's certificate. */
    cc.tls.server_name = o3m_config_active(b->cfg)->name;
  }
  cc.wait_for_ready = 1;
  if (b->deadline_ms > 0) cc.deadline_ms = b->deadline_ms;
  return o3m_rpc_client_create(out, &cc, e);
}

/* One --rewards-only level on the n workers (started here; the caller
 * joins them): an unmeasured cycle, then measured cycles until their
 * reward phases add up to seconds. Returns the measured seconds. */
static double rewards_level(bench *b, worker *ws, int n, double seconds) {
  pthread_barrier_init(&b->bar, NULL, (unsigned)n + 1);
  for (int i = 0; i < n; i++) pthread_create(&ws[i].th, NULL, worker_rewards, &ws[i]);
  for (int k = 0; k < 3; k++) pthread_barrier_wait(&b->bar); /* the warm-up cycle */
  atomic_store(&b->phase, 1);
  double el = 0;
  while (el < seconds) {
    pthread_barrier_wait(&b->bar); /* the cycle's Recommends start */
    pthread_barrier_wait(&b->bar); /* ... are done: the Rewards start */
    double t0 = o3m_clock_s();
    pthread_barrier_wait(&b->bar); /* ... are answered */
    el += o3m_clock_s() - t0;
  }
  atomic_store(&b->phase, 2);
  pthread_barrier_wait(&b->bar); /* the workers see the end */
  return el;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

enum {
  OPT_CONFIG, OPT_CERT, OPT_KEY, OPT_INSECURE, OPT_K, OPT_CONCURRENCY, OPT_SECONDS, OPT_WARMUP,
  OPT_USERS, OPT_ITEMS, OPT_WITH_REWARD, OPT_REWARDS_ONLY, OPT_TARGETS, OPT_ID_BYTES,
  OPT_CALLS, OPT_REWARD_DELAY, OPT_DEADLINE, OPT_FRESH_IDS
};
static const o3m_cli_option options[] = {
    [OPT_CONFIG] = {"config", "F", "the federation config (the AP's address, the CA)"},
    [OPT_CERT] = {"cert", "F", "a client certificate named in the config"},
    [OPT_KEY] = {"key", "F", "its private key"},
    [OPT_INSECURE] = {"insecure", NULL, "plaintext gRPC instead of --cert and --key"},
    [OPT_K] = {"K", "N", "candidates per round, 1..1024 (default 20)"},
    [OPT_CONCURRENCY] = {"concurrency", "LIST", "calls in flight, one run each (default 1,8,32)"},
    [OPT_SECONDS] = {"seconds", "S", "measured seconds per run (default 5)"},
    [OPT_WARMUP] = {"warmup", "S", "unmeasured seconds before each run (default 1)"},
    [OPT_USERS] = {"users", "N", "user ids drawn from (default 1000)"},
    [OPT_ITEMS] = {"items", "N", "item ids drawn from, at least K (default 200)"},
    [OPT_WITH_REWARD] = {"with-reward", NULL, "send a Reward after every Recommend"},
    [OPT_REWARDS_ONLY] = {"rewards-only", NULL,
                          "measure Rewards alone: cycles of 100 Recommends per client, then "
                          "their Rewards, timed (seconds = reward time)"},
    [OPT_TARGETS] = {"targets", "LIST", "AP replicas' addresses, comma-separated: client i "
                                        "calls address i mod n (default: the config's)"},
    [OPT_ID_BYTES] = {"id-bytes", "N", "pad every item id to N bytes, up to 128 (default: "
                                       "as drawn, i0..)"},
    [OPT_CALLS] = {"calls", "N", "stop a level after N Recommends (default: --seconds only)"},
    [OPT_REWARD_DELAY] = {"reward-delay", "S", "keep the level's decisions open, and reward "
                                               "them S seconds after it, counting NOT_FOUND"},
    [OPT_DEADLINE] = {"deadline-ms", "MS", "each call's deadline (default 5000)"},
    [OPT_FRESH_IDS] = {"fresh-ids", NULL, "item ids new every round (none cached by the AP), "
                                          "instead of drawn from --items"},
    {NULL, NULL, NULL},
};
static const o3m_cli_spec spec = {
    "o3m-bench-load",
    "--config F (--cert F --key F | --insecure) [--K 20]\n"
    "       [--concurrency 1,8,32] [--seconds 5] [--warmup 1] [--users 1000]\n"
    "       [--items 200] [--with-reward | --rewards-only | --reward-delay S]\n"
    "       [--id-bytes N] [--fresh-ids] [--calls N] [--deadline-ms MS]",
    "Drives a running federation's active party with Recommend calls and reports latency.",
    options, NULL};

int main(int argc, char **argv) {
  bench b = {.K = 20, .users = 1000, .items = 200, .reward_delay = -1};
  const char *cfg_path = NULL, *conc = "1,8,32";
  double seconds = 5, warmup = 1;
  o3m_cli cl;
  o3m_cli_begin(&cl, &spec, argc, argv);
  const char *v;
  for (int i; (i = o3m_cli_next(&cl, &v)) != O3M_CLI_END;) {
    switch (i) {
    case O3M_CLI_STOP: return cl.exit_code;
    case OPT_CONFIG: cfg_path = v; break;
    case OPT_CERT: b.cert = v; break;
    case OPT_KEY: b.key = v; break;
    case OPT_INSECURE: b.insecure = 1; break;
    case OPT_K: b.K = atoi(v); break;
    case OPT_CONCURRENCY: conc = v; break;
    case OPT_SECONDS: seconds = atof(v); break;
    case OPT_WARMUP: warmup = atof(v); break;
    case OPT_USERS: b.users = atoi(v); break;
    case OPT_ITEMS: b.items = atoi(v); break;
    case OPT_WITH_REWARD: b.with_reward = 1; break;
    case OPT_REWARDS_ONLY: b.rewards_only = 1; break;
    case OPT_ID_BYTES: b.id_bytes = atoi(v); break;
    case OPT_CALLS: b.calls = atol(v); break;
    case OPT_DEADLINE: b.deadline_ms = atoi(v); break;
    case OPT_FRESH_IDS: b.fresh_ids = 1; break;
    case OPT_REWARD_DELAY: b.reward_delay = atof(v); break;
    case OPT_TARGETS:
      if (strlen(v) >= sizeof b.targets_buf ||
          (b.n_targets = o3m_cli_split_list(strcpy(b.targets_buf, v), b.targets, 8)) < 0)
        return o3m_cli_usage_error(&spec, "--targets: expected at most 8 non-empty addresses, "
                                   "comma-separated, in at most %zu bytes, got '%s'",
                                   sizeof b.targets_buf - 1, v);
      break;
    }
  }
  if (o3m_cli_operands(&cl) < argc)
    return o3m_cli_usage_error(&spec, "unexpected argument '%s'", argv[o3m_cli_operands(&cl)]);
  if (b.rewards_only + b.with_reward + (b.reward_delay >= 0) > 1)
    return o3m_cli_usage_error(&spec, "--with-reward, --rewards-only and --reward-delay exclude "
                               "each other");
  if (b.id_bytes < 0 || b.id_bytes > O3M_MAX_ID || b.calls < 0 || b.deadline_ms < 0 ||
      b.deadline_ms > 86400000)
    return o3m_cli_usage_error(&spec, "--id-bytes: expected 0..%d; --calls: expected >= 0; "
                               "--deadline-ms: expected 1..86400000", O3M_MAX_ID);
  if (!cfg_path || (!b.insecure && (!b.cert || !b.key)) || b.K < 1 || b.K > 1024 ||
      b.items < b.K || b.users < 1 || seconds <= 0)
    return o3m_cli_usage_error(&spec, "give --config and --cert and --key (or --insecure), "
                               "1 <= K <= items, users >= 1, seconds > 0");
  o3m_err e;
  o3m_config *cfg;
  if (o3m_config_load(&cfg, cfg_path, &e)) {
    fprintf(stderr, "o3m-bench-load: %s\n", e.msg);
    return 1;
  }
  b.cfg = cfg;
  int d = o3m_config_d(cfg), M = o3m_config_n_column_parties(cfg);
  double payload = (double)b.K * (M - 1) * d * 8;
  printf("o3m-bench-load: M = %d parties, d = %d, K = %d, %s, %s, %.0f s per level\n", M, d,
         b.K, b.insecure ? "plaintext" : "mutual TLS",
         b.rewards_only ? "Reward only (timed), after untimed Recommends"
         : b.with_reward ? "Recommend+Reward"
                         : "Recommend only",
         seconds);
  printf("payload per decision: K (M-1) d 8 = %.0f bytes; aggregation = %s\n\n", payload,
         o3m_config_secure_aggregation(cfg) ? "secure" : "per-party");
  if (b.rewards_only)
    printf("%11s %12s %10s %10s %10s %7s\n", "concurrency", "rewards/s", "p50 ms", "p99 ms",
           "max ms", "errors");
  else
    printf("%11s %12s %10s %10s %10s %14s %10s %7s %7s\n", "concurrency", "decisions/s",
           "p50 ms", "p99 ms", "max ms", "wire B/dec", "wire/pay", "errors", "batch");
  /* Stats go through a client of their own (a client carries one call at
   * a time, and the workers' clients are busy). */
  o3m_rpc_client *stats_cli;
  if (ap_client(&b, 0, 1, &stats_cli, &e)) {
    fprintf(stderr, "o3m-bench-load: %s\n", e.msg);
    return 1;
  }
  int status = 0;
  char *list = strdup(conc), *save = NULL;
  for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    int n = atoi(tok);
    if (n < 1 || n > MAX_THREADS) {
      fprintf(stderr, "o3m-bench-load: concurrency %s out of 1..%d\n", tok, MAX_THREADS);
      status = 2;
      break;
    }
    worker *ws = calloc(n, sizeof *ws);
    for (int i = 0; i < n; i++) {
      ws[i].b = &b;
      ws[i].id = i;
      ws[i].lat = malloc(sizeof(double) * MAX_LAT);
      if (b.reward_delay >= 0) ws[i].held = malloc(sizeof *ws[i].held * MAX_LAT);
      if (ap_client(&b, i, 0, &ws[i].cli, &e)) {
        fprintf(stderr, "o3m-bench-load: %s\n", e.msg);
        return 1;
      }
    }
    atomic_store(&b.phase, 0);
    atomic_store(&b.started, 0);
    uint64_t rounds0 = 0, fan0 = 0, rounds1 = 0, fan1 = 0;
    long long bytes0 = 0, bytes1 = 0;
    double el = b.rewards_only ? rewards_level(&b, ws, n, seconds) : 0;
    if (!b.rewards_only) {
      for (int i = 0; i < n; i++) pthread_create(&ws[i].th, NULL, worker_main, &ws[i]);
      struct timespec ts = {(time_t)warmup, (long)((warmup - (time_t)warmup) * 1e9)};
      nanosleep(&ts, NULL);
      ap_counts(stats_cli, &rounds0, &fan0);
      bytes0 = lo_bytes();
      double t0 = o3m_clock_s();
      atomic_store(&b.phase, 1);
      ts.tv_sec = (time_t)seconds;
      ts.tv_nsec = (long)((seconds - (time_t)seconds) * 1e9);
      nanosleep(&ts, NULL);
      atomic_store(&b.phase, 2);
      el = o3m_clock_s() - t0;
      bytes1 = lo_bytes();
    }
    long total = 0, errors = 0, deadline = 0, exhausted = 0;
    for (int i = 0; i < n; i++) {
      pthread_join(ws[i].th, NULL);
      total += ws[i].n_lat;
      errors += ws[i].errors;
      deadline += ws[i].deadline;
      exhausted += ws[i].exhausted;
    }
    if (b.rewards_only) pthread_barrier_destroy(&b.bar);
    else ap_counts(stats_cli, &rounds1, &fan1);
    double *all = malloc(sizeof(double) * (total ? total : 1));
    long k = 0;
    for (int i = 0; i < n; i++) {
      memcpy(all + k, ws[i].lat, sizeof(double) * ws[i].n_lat);
      k += ws[i].n_lat;
    }
    qsort(all, total, sizeof(double), cmp_double);
    double p50 = total ? all[total / 2] : 0, p99 = total ? all[(long)(total * 0.99)] : 0;
    double mx = total ? all[total - 1] : 0;
    /* Bytes include the calls still in flight at the edges; over seconds of
     * traffic that error is a few decisions in thousands. */
    double per = total ? (double)(bytes1 - bytes0) / total : 0;
    double batch = fan1 > fan0 ? (double)(rounds1 - rounds0) / (double)(fan1 - fan0) : 0;
    if (b.rewards_only)
      printf("%11d %12.0f %10.3f %10.3f %10.3f %7ld\n", n, total / el, p50 * 1e3, p99 * 1e3,
             mx * 1e3, errors);
    else
      printf("%11d %12.0f %10.3f %10.3f %10.3f %14.0f %10.3f %7ld %7.1f\n", n, total / el,
             p50 * 1e3, p99 * 1e3, mx * 1e3, per, per / payload, errors, batch);
    if (!b.rewards_only && errors)
      printf("%11s of the errors: %ld DEADLINE_EXCEEDED, %ld RESOURCE_EXHAUSTED\n", "", deadline,
             exhausted);
    if (b.reward_delay >= 0) {
      struct timespec ts = {(time_t)b.reward_delay,
                            (long)((b.reward_delay - (time_t)b.reward_delay) * 1e9)};
      nanosleep(&ts, NULL);
      long held = 0, ok = 0, nf = 0;
      for (int i = 0; i < n; i++) pthread_create(&ws[i].th, NULL, worker_reward_held, &ws[i]);
      for (int i = 0; i < n; i++) {
        pthread_join(ws[i].th, NULL);
        held += ws[i].n_held;
        ok += ws[i].rewarded;
        nf += ws[i].not_found;
      }
      printf("%11s rewards %.0f s later: %ld decisions, %ld rewarded, %ld NOT_FOUND (evicted)\n",
             "", b.reward_delay, held, ok, nf);
    }
    fflush(stdout);
    for (int i = 0; i < n; i++) {
      if (ws[i].errors) fprintf(stderr, "  worker %d: last error %s\n", i, ws[i].err);
      o3m_rpc_client_destroy(ws[i].cli);
      free(ws[i].lat);
      free(ws[i].held);
    }
    free(all);
    free(ws);
  }
  free(list);
  o3m_rpc_client_destroy(stats_cli);
  o3m_config_destroy(cfg);
  return status;
}
