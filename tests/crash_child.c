/* crash_child.c -- the process the crash test kills.
 *
 *   crash_child STATE_DIR KIND CKPT_EVERY MAX_BATCH SEED
 *
 * Recovers the policy of configuration KIND (crash_child.h) from STATE_DIR
 * exactly as the AP daemon would, then applies rewards crash_reward(n+1),
 * crash_reward(n+2), ... forever, where n is the number of rewards already
 * in the recovered model: batches of 1..MAX_BATCH rewards go through the
 * journal, one ap_checkpoint_sync per batch (group commit), and only after
 * the sync is each reward acknowledged, by printing its id on its own line
 * to stdout (a pipe to the test). A checkpoint is written every CKPT_EVERY
 * rewards. The test kills this process with SIGKILL at a random moment.
 * Exits 1 on any error (the test then fails). */
#include <stdio.h>
#include <stdlib.h>

#include "ap_checkpoint.h"
#include "crash_child.h"
#include "o3m_blas.h"
#include "o3m_log.h"

int main(int argc, char **argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: crash_child STATE_DIR KIND CKPT_EVERY MAX_BATCH SEED\n");
    return 2;
  }
  o3m_log_init("crash_child", O3M_LOG_WARN);
  o3m_blas_single_thread();
  int kind = atoi(argv[2]), max_batch = atoi(argv[4]);
  uint64_t ckpt_every = strtoull(argv[3], NULL, 10), rs = strtoull(argv[5], NULL, 10);
  o3m_policy_config cfg;
  crash_config(&cfg, kind);
  o3m_err e;
  o3m_err_clear(&e);
  o3m_policy *p;
  if (o3m_policy_create(&p, &cfg, &e)) {
    fprintf(stderr, "crash_child: %s\n", e.msg);
    return 1;
  }
  ap_checkpoint_options co;
  ap_checkpoint_options_default(&co);
  co.state_dir = argv[1];
  co.mask_id = CRASH_MASK_ID;
  co.every_records = ckpt_every;
  co.every_ms = 0;
  ap_checkpoint *c;
  if (ap_checkpoint_open(&c, p, &co, NULL, &e)) {
    fprintf(stderr, "crash_child: recovery: %s\n", e.msg);
    return 1;
  }
  uint64_t id = o3m_policy_updates(p);
  double x[64];
  for (;;) {
    rs = rs * 6364136223846793005ULL + 1442695040888963407ULL;
    int batch = 1 + (int)((rs >> 33) % (uint64_t)max_batch);
    uint64_t first = id + 1;
    for (int k = 0; k < batch; k++) {
      int arm;
      double r;
      crash_reward(++id, cfg.d, cfg.n_arms, &arm, x, &r);
      if (ap_checkpoint_apply_reward(c, id, arm, x, NULL, r)) {
        fprintf(stderr, "crash_child: apply failed at %llu\n", (unsigned long long)id);
        return 1;
      }
    }
    if (ap_checkpoint_sync(c, &e)) {
      fprintf(stderr, "crash_child: sync: %s\n", e.msg);
      return 1;
    }
    for (uint64_t a = first; a <= id; a++) printf("%llu\n", (unsigned long long)a);
    fflush(stdout);
    if (ap_checkpoint_due(c) && ap_checkpoint_write(c, &e)) {
      fprintf(stderr, "crash_child: checkpoint: %s\n", e.msg);
      return 1;
    }
  }
}
