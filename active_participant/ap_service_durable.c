/* ap_service_durable.c -- reward durability: rewards through the journal
 * with one group commit per drain, periodic and final checkpoints, the
 * server's idle hook that orders them, and the stop after a disk error or
 * a damaged model (see "States" in ap_service.h and ap_service_impl.h). */
#include "ap_service_impl.h"

const char *ap_service__stop_cause_text(stop_cause c) {
  switch (c) {
  case STOP_DISK: return "a disk error (the reward journal failed)";
  case STOP_DAMAGED: return "damage to the model in memory (its checkpoint was refused)";
  case STOP_STREAM: return "damage to the reward stream (records lost or unreadable)";
  case STOP_NONE: break;
  }
  return "no error";
}

/* SERVING -> STOPPING (see "States" in ap_service.h): the first cause
 * stays, and the server is asked to stop. Both causes come from the journal
 * or a checkpoint, so only a durable service gets here. */
static void service_stop(ap_service *s, stop_cause cause) {
  O3M_ASSERT(s->ckpt != NULL && cause != STOP_NONE);
  if (!s->stopped) s->stopped = cause;
  o3m_rpc_server_shutdown(s->server);
}

/* The journal failed (ap_journal.h: after a failed write or fdatasync
 * nothing since the last good sync can be trusted). Marks the service,
 * asks the server to stop (run() returns O3M_EIO, the daemon exits 1 and a
 * restart recovers from disk) and answers this reward with UNAVAILABLE: it
 * was not acknowledged, and it may or may not be found in the model after
 * the restart. */
int ap_service__durability_fail(ap_service *s, uint64_t decision, const o3m_err *why, o3m_err *e) {
  if (!s->stopped)
    o3m_log_error("the reward journal failed: %s; no more rewards are accepted and the active "
                  "party is stopping (restart it to recover from %s)", o3m_err_message(why),
                  s->state_dir);
  service_stop(s, STOP_DISK);
  return o3m_err_set(e, O3M_EUNAVAILABLE, "decision %llu: the reward could not be written to "
                     "disk and is not acknowledged; the active party is stopping",
                     (unsigned long long)decision);
}

/* The answer to a reward the model cannot take (o3m_policy_update_check
 * refused it): nothing was changed or journaled, and the decision stays
 * open (a retry meets the same refusal until the decision expires; another
 * reward value may pass). */
int ap_service__reward_refused(uint64_t decision, int rc, const char *what, o3m_err *e) {
  return o3m_err_set(e, rc, "decision %llu: refused, the model would become non-finite or "
                     "singular (%s); nothing changed, the decision stays open",
                     (unsigned long long)decision, what);
}

/* What a journal append's failure means for the Reward call: 0, or the
 * call's error (EIO stops the service). */
static int journal_append_result(ap_service *s, uint64_t decision, int rc, o3m_err *e) {
  unsigned long long id = (unsigned long long)decision;
  if (rc == O3M_EUNAVAILABLE)
    return o3m_err_set(e, rc, "decision %llu: the reward journal cannot start a new segment "
                       "now (ap_journal.h); nothing changed, the decision stays open: retry",
                       id);
  if (rc == O3M_EIO) {
    o3m_err why;
    o3m_err_set(&why, O3M_EIO, "a journal write failed");
    return ap_service__durability_fail(s, decision, &why, e);
  }
  return rc;
}

/* Appends a reward and applies it to the model: with a state_dir through
 * the journal's append buffer (ap_checkpoint_apply_reward), which is not
 * durable until ap_service__reward_commit() or ap_checkpoint_sync(); without one in
 * memory only. Either way o3m_policy_update_check runs first, so a reward
 * that would poison the model is refused with nothing changed. x0 (may be
 * NULL) is the decision's own part, which the local model learns too.
 * Returns 0 when the reward is in the model (and, with a state_dir, in the
 * journal's buffer). */
int ap_service__reward_append(ap_service *s, uint64_t decision, int arm, const double *x,
                              const double *x0, double reward, o3m_err *e) {
  unsigned long long id = (unsigned long long)decision;
  const char *what;
  int rc = o3m_policy_update_check(s->policy, arm, x, reward, &what);
  if (rc < 0) return ap_service__reward_refused(decision, rc, what, e);
  if (!s->ckpt) {
    rc = o3m_policy_update(s->policy, arm, x, reward);
    if (rc == 0 && x0) ap_fallback_update(s->fallback, arm, x0, reward);
    return rc < 0 ? o3m_err_set(e, rc, "decision %llu: the policy update failed", id) : 0;
  }
  /* apply_reward checks again (and so refuses to journal a bad update even
   * for another caller); with w kept by the check above that costs O(d). */
  rc = ap_checkpoint_apply_reward(s->ckpt, decision, arm, x, x0, reward);
  if (rc == O3M_EUNAVAILABLE || rc == O3M_EIO) return journal_append_result(s, decision, rc, e);
  /* Only an update that passed the check and still failed gets here: it is
   * journaled and replays as failed; it is made durable with the next sync,
   * and the decision stays open. */
  if (rc < 0) return o3m_err_set(e, rc, "decision %llu: the policy update failed", id);
  return 0;
}

/* A degraded decision's reward: the local model alone learns it, through
 * the journal like any reward when there is a state_dir
 * (ap_checkpoint_apply_local), so that it survives a crash. */
int ap_service__local_append(ap_service *s, uint64_t decision, int arm, const double *x0,
                             double reward, o3m_err *e) {
  if (!s->ckpt) {
    ap_fallback_update(s->fallback, arm, x0, reward);
    return 0;
  }
  return journal_append_result(
      s, decision, ap_checkpoint_apply_local(s->ckpt, decision, arm, x0, reward), e);
}

/* One fdatasync of the journal (ap_checkpoint_sync), timed into the
 * journal fdatasync latency histogram. */
int ap_service__journal_sync(ap_service *s, o3m_err *e) {
  double t0 = o3m_clock_s();
  int rc = ap_checkpoint_sync(s->ckpt, e);
  o3m_metric_observe(s->m_fsync, o3m_clock_s() - t0);
  return rc;
}

/* The group commit, and the one place where appended rewards become
 * durable and are acknowledged (a replicated log would take the journal's
 * place here): one fdatasync (ap_checkpoint_sync) covers every reward of
 * s->group, that is every Reward that arrived since the previous commit,
 * while it ran included; then each is answered with its RewardReply.updates,
 * in arrival order. If the sync fails, none is acknowledged: each gets
 * UNAVAILABLE and the service stops (ap_service__durability_fail), so a group is
 * durable whole or, after the restart, as the prefix the disk kept. Runs
 * on the serving thread: from the idle hook before any queued Recommend is
 * decided, and from h_reward when the group is full. */
void ap_service__reward_commit(ap_service *s) {
  if (s->n_group == 0) return;
  o3m_err se;
  o3m_err_clear(&se);
  int rc = ap_service__journal_sync(s, &se);
  for (int i = 0; i < s->n_group; i++) {
    struct reward_wait *w = &s->group[i];
    if (rc < 0) {
      o3m_err e;
      o3m_err_clear(&e);
      int code = ap_service__durability_fail(s, w->decision, &se, &e);
      o3m_rpc_call_fail(w->call, code, &e);
      continue;
    }
    O3m__V1__RewardReply rep = O3M__V1__REWARD_REPLY__INIT;
    rep.updates = w->updates;
    o3m_rpc_call_reply(w->call, &rep.base, NULL);
  }
  if (rc == 0) {
    s->commits++;
    s->committed += (uint64_t)s->n_group;
  }
  s->n_group = 0;
}

/* The server's idle hook: first the rewards that queued (they are durable
 * and acknowledged before anything else happens, so a decision never sees
 * a reward that is not durable), then a due checkpoint, then the queued
 * Recommends in batches (ap_round.h). */
void ap_service__service_idle(void *ctx) {
  ap_service *s = ctx;
  if (s->rep) {
    /* Replicas: the stream instead of the journal; bounded per hook so
     * that Recommends are not starved while catching up. */
    ap_service__replica_drain(s, 0, 4096);
    ap_service__replica_answer(s);
    if (!s->stopped) ap_service__replica_check_if_due(s);
    if (s->ckpt) ap_service__checkpoint_if_due(s);
  } else if (s->ckpt) {
    ap_service__reward_commit(s);
    ap_service__checkpoint_if_due(s);
  }
  /* A finished reload of the own tables is swapped in between batches;
   * SIGHUP asks for one, coalesced with one under way (one more follows). */
  ap_service__reload_take(s);
  if (s->reload && *s->reload) {
    *s->reload = 0;
    o3m_err re;
    o3m_err_clear(&re);
    /* A refused load is logged and counted by o3m_tables; only "nothing to
     * reload" (no own tables) is said here. */
    if (ap_round_reload_start(s->round, 1, &re) == O3M_ESTATE)
      o3m_log_warn("SIGHUP: %s", o3m_err_message(&re));
  }
  ap_round_flush(s->round);
  ap_service__metrics_publish(s);
}

/* The outcome of a checkpoint (why: "periodic" or "final"). A file error
 * leaves the older checkpoints and the journal intact: it is logged and
 * the periodic checkpoint retried after CKPT_RETRY_MS. O3M_ECORRUPT means
 * Lambda or u itself is damaged in memory (ap_checkpoint_start refuses to
 * save it): the service stops, and a restart rebuilds the model from
 * disk. */
static void checkpoint_result(ap_service *s, const char *why, int rc, const o3m_err *ce) {
  if (rc == 0) {
    s->checkpoints++;
    o3m_metric_touch(s->m_ckpt_age);
    s->ckpt_retry_ms = 0;
    o3m_log_info("%s checkpoint written: journal seq %llu", why,
                 (unsigned long long)ap_checkpoint_seq(s->ckpt));
    return;
  }
  s->ckpt_failures++;
  s->ckpt_retry_ms = o3m_clock_ms() + CKPT_RETRY_MS;
  if (rc == O3M_ECORRUPT) {
    o3m_log_error("%s checkpoint refused: %s; the model in memory is damaged: stopping (a "
                  "restart recovers it from %s)", why, o3m_err_message(ce), s->state_dir);
    service_stop(s, STOP_DAMAGED);
    return;
  }
  if (rc == O3M_EIO && !s->rep && ap_journal_failed(ap_checkpoint_journal(s->ckpt))) {
    /* The health repair's journal record (or the rotation) could not be
     * written: that is the journal failing, not only this checkpoint. */
    o3m_err why_;
    o3m_err_set(&why_, O3M_EIO, "%s", o3m_err_message(ce));
    o3m_err ignored;
    ap_service__durability_fail(s, 0, &why_, &ignored);
    return;
  }
  o3m_log_warn("%s checkpoint failed (%s: %s); the journal still holds every reward, retrying "
               "in %d s", why, o3m_errname(rc), o3m_err_message(ce), CKPT_RETRY_MS / 1000);
}

/* Writes a checkpoint and waits for it (the final one). */
void ap_service__checkpoint_now(ap_service *s, const char *why) {
  o3m_err ce;
  o3m_err_clear(&ce);
  int rc = ap_checkpoint_write(s->ckpt, &ce);
  checkpoint_result(s, why, rc, &ce);
}

/* Collects a periodic checkpoint written off the serving thread, if one
 * finished (or, with wait, once it finishes), and reports its outcome;
 * does nothing when none was started. */
void ap_service__checkpoint_collect(ap_service *s, int wait) {
  o3m_err ce;
  o3m_err_clear(&ce);
  int done, rc = ap_checkpoint_collect(s->ckpt, wait, &done, &ce);
  if (done) checkpoint_result(s, "periodic", rc, &ce);
}

/* Periodic checkpoints are written off the serving thread
 * (ap_checkpoint_start): here a finished one is collected, and a due one
 * is started from a snapshot of the model as of the last journaled reward;
 * the serving threads only pay for the journal rotation and the copy of
 * the state. */
void ap_service__checkpoint_if_due(ap_service *s) {
  ap_service__checkpoint_collect(s, 0);
  if (s->stopped || !ap_checkpoint_due(s->ckpt) || o3m_clock_ms() < s->ckpt_retry_ms) return;
  o3m_err ce;
  o3m_err_clear(&ce);
  int rc = ap_checkpoint_start(s->ckpt, &ce);
  if (rc) checkpoint_result(s, "periodic", rc, &ce);
}

