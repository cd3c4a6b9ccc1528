/* ap_service_replica.c -- the service's side of AP replicas (ap_replica.h):
 * the applied-decision ring, records applied from the stream, the Rewards
 * they settle and a replica's Reward (see ap_service_impl.h). */
#include "ap_service_impl.h"

/* ------------------------------------------------ AP replicas (ap_replica.h) */

/* The applied set: was decision id applied from a record at most
 * expiry_s older than now_ms (a stream time)? Deterministic in the stream:
 * every replica that applied the same records answers the same. */
static struct applied_slot *applied_find(ap_service *s, uint64_t id, int64_t now_ms, int *found) {
  int64_t horizon = now_ms - (int64_t)s->expiry_s * 1000;
  struct applied_slot *free_slot = NULL;
  size_t i = (size_t)o3m_hash_bytes(&id, sizeof id, 0) & s->applied_mask;
  for (size_t n = 0; n <= s->applied_mask; n++, i = (i + 1) & s->applied_mask) {
    struct applied_slot *a = &s->applied[i];
    if (a->id == id && a->t_ms >= horizon) {
      *found = 1;
      return a;
    }
    if (!free_slot && (a->id == 0 || a->t_ms < horizon)) free_slot = a;
    if (a->id == 0) break;
  }
  *found = 0;
  return free_slot;
}

static void applied_add(ap_service *s, uint64_t id, int64_t t_ms) {
  int found;
  struct applied_slot *a = applied_find(s, id, t_ms, &found);
  if (!a) {
    o3m_log_warn("the applied-decision set is full; decision %llu is not remembered (JetStream's "
                 "duplicate window still refuses its retries)", (unsigned long long)id);
    return;
  }
  a->id = id;
  a->t_ms = t_ms;
}

/* A replica's decision id source (ap_pending_id_fn): 48 random bits and
 * the replica's tag. */
int ap_service__tagged_id(void *ctx, uint64_t *id) {
  ap_service *s = ctx;
  uint64_t v;
  int rc = o3m_rng_u64(s->ids, &v);
  if (rc < 0) return rc;
  *id = (v & ~(uint64_t)((UINT64_C(1) << AP_REPLICA_TAG_BITS) - 1)) | s->id_tag;
  return 0;
}

/* ap_round's record hook: the decision's masked context is kept where
 * every other replica can ask for it (ap_replica.h, "Decision records")
 * before the Recommend is answered, so any live replica can take its
 * reward. */
int ap_service__replica_record(void *ctx, uint64_t decision, int owner, int arm, uint64_t mask_id,
                               const double *x, const double *x0, int degraded, o3m_err *e) {
  ap_service *s = ctx;
  return ap_replica_put_decision(s->rep, decision, ap_service__owner_name(s, owner), arm, mask_id,
                                 x, x0, degraded, e);
}

/* The one check of a reward's value, for a Reward call and for a record
 * of the stream: finite and within [reward_min, reward_max]. 0, or
 * O3M_EINVAL with a message that names the bounds, never the value. */
int ap_service__reward_check(const ap_service *s, double reward, o3m_err *e) {
  if (!isfinite(reward) || reward < s->reward_min || reward > s->reward_max)
    return o3m_err_set(e, O3M_EINVAL, "reward is not a finite value in [%g, %g]", s->reward_min,
                       s->reward_max);
  return 0;
}

/* The bounds every record taken from the stream or the bucket must keep,
 * whoever wrote it (defence in depth against a forged record or a
 * compromised replica): the masked context's l2 norm within sum_norm, the
 * bound a real sum Q x has (the check and slack ap_round applies to the
 * parties' sums), the arm in range (disjoint models; a shared model has
 * no arms) and the reward finite and within
 * [reward_min, reward_max] (what h_reward refuses). Returns 0, or
 * O3M_EINVAL with e naming the bound (never the value). Deterministic: a
 * function of the record and the config only. */
static int replica_bounds(ap_service *s, int arm, const double *x, double reward, o3m_err *e) {
  if (s->n_arms > 0 && (arm < 0 || arm >= s->n_arms))
    return o3m_err_set(e, O3M_EINVAL, "arm outside 0..%d", s->n_arms - 1);
  int rc = ap_service__reward_check(s, reward, e);
  if (rc < 0) return rc;
  return o3m_wire_check_row_norms("masked context", 1, s->d, x, s->sum_norm, 0, NULL, e);
}

/* Applies one stream record to the model, exactly as every replica does:
 * skipped (and counted) when its decision was applied before within the
 * pending lifetime, when it was made under another mask, when it is
 * outside the bounds (replica_bounds: counted in refused and logged), or
 * when the model cannot take it (o3m_policy_update_check); the outcome
 * goes to the Reward waiting for it here, if any. */
static int replica_apply(ap_service *s, const ap_replica_record *r) {
  int found, rc;
  o3m_err be;
  o3m_err_clear(&be);
  applied_find(s, r->decision, r->time_ms, &found);
  if (found) rc = O3M_EEXISTS;
  else if (r->mask_id != s->mask_id) rc = O3M_EMASK;
  else if ((rc = replica_bounds(s, r->arm, r->x, r->reward, &be)) < 0) {
    s->refused++;
    o3m_log_warn("replica '%s': stream record %llu (decision %llu) skipped, out of bounds: %s "
                 "(%llu refused so far)", s->replica, (unsigned long long)r->seq,
                 (unsigned long long)r->decision, o3m_err_message(&be),
                 (unsigned long long)s->refused);
  } else if (r->degraded) {
    /* A degraded decision's reward: the local model alone (its x is no
     * context); a replica without the local model skips it. */
    rc = s->fallback && r->x0 ? 0 : O3M_EINVAL;
    if (rc == 0) ap_fallback_update(s->fallback, r->arm, r->x0, r->reward);
  } else if ((rc = o3m_policy_update_check(s->policy, r->arm, r->x, r->reward, NULL)) == 0) {
    rc = o3m_policy_update(s->policy, r->arm, r->x, r->reward);
    if (rc == 0 && s->fallback && r->x0) ap_fallback_update(s->fallback, r->arm, r->x0, r->reward);
  }
  if (rc == 0) applied_add(s, r->decision, r->time_ms);
  else s->skipped++;
  /* A decision made here and rewarded through another replica. */
  ap_pending_close(s->pending, r->decision);
  s->applied_seq = r->seq;
  if (s->ckpt) ap_checkpoint_set_position(s->ckpt, r->seq);
  for (int i = 0; i < s->n_rwait; i++)
    if (s->rwait[i].seq == r->seq) s->rwait[i].rc = rc;
  return rc;
}

/* The reward stream cannot be followed any more (a record that does not
 * parse, records lost, the stream re-created or gone: ap_replica.h): the
 * replica stops serving, and writes no final checkpoint, rather than go
 * on with a model no other replica will have. */
static void replica_damaged(ap_service *s, const o3m_err *why) {
  if (!s->stopped)
    o3m_log_error("replica '%s': %s; stopping (the stream must hold every record this "
                  "replica applied; see docs/scaling.md, \"AP replicas on NATS "
                  "JetStream\")",
                  s->replica, o3m_err_message(why));
  if (!s->stopped) s->stopped = STOP_STREAM;
  o3m_rpc_server_shutdown(s->server);
}

/* A limit on the reward stream (ap_replica_limits) as the last check read
 * it: an ERROR when one appears or changes, and again every
 * LIMITS_REPEAT_MS while it stays, so that a log search finds it; a
 * line when it is gone. The replica serves on: the records it applied are
 * in its model, and it is the next replica, not this one, that would lack
 * the ones JetStream drops. The gauge o3m_ap_replica_stream_limits holds
 * the number, for the alert O3MReplicaStreamLimits. */
#define LIMITS_REPEAT_MS 60000
static void replica_limits_report(ap_service *s, int64_t now) {
  char what[AP_REPLICA_LIMITS_TEXT];
  int n = ap_replica_limits(s->rep, what, sizeof what);
  if (n > 0 && (n != s->rep_limits || now - s->rep_limits_said_ms >= LIMITS_REPEAT_MS)) {
    s->rep_limits_said_ms = now;
    o3m_log_error("replica '%s': the reward stream may drop records (%s): JetStream erases "
                  "records without a purge, and a new replica then cannot rebuild the model; "
                  "remove the limits with o3m-cli nats-setup (docs/scaling.md, \"AP replicas "
                  "on NATS JetStream\")", s->replica, what);
  } else if (n == 0 && s->rep_limits > 0) {
    o3m_log_info("replica '%s': the reward stream has no limit that drops records any more",
                 s->replica);
  }
  s->rep_limits = n;
  if (s->m_rep_limits) o3m_metric_set(s->m_rep_limits, (double)n);
}

/* Every nats_check_ms the serving thread asks JetStream whether the
 * stream still holds what this replica applied (ap_replica_check): a
 * purge or a deletion is otherwise seen only when the next record comes,
 * or never by a replica that takes no reward. The replica stops only when
 * two checks in a row, nats_check_ms apart, find records lost: a purge
 * or a deletion cannot be undone, so a real loss is still there at the
 * second, while a stream's state read once during a leader election in
 * the NATS cluster (a node killed under load) need not be the stream's.
 * The same read names the stream's limits (replica_limits_report). */
void ap_service__replica_check_if_due(ap_service *s) {
  int64_t now = o3m_clock_ms();
  if (now - s->rep_checked_ms < s->rep_check_ms) return;
  s->rep_checked_ms = now;
  o3m_err e;
  o3m_err_clear(&e);
  int rc = ap_replica_check(s->rep, &e);
  if (rc == O3M_ECORRUPT && s->rep_suspect) {
    replica_damaged(s, &e);
  } else if (rc == O3M_ECORRUPT) {
    s->rep_suspect = 1;
    o3m_log_warn("replica '%s': %s; stopping if the next check, in %d ms, finds the same",
                 s->replica, o3m_err_message(&e), s->rep_check_ms);
  } else {
    s->rep_suspect = 0;
    if (rc < 0) o3m_log_warn("replica '%s': %s", s->replica, o3m_err_message(&e));
  }
  if (rc == 0 || rc == O3M_EPERM) replica_limits_report(s, now);
}

/* Applies every record that has arrived (at most max, 0: no limit),
 * waiting up to wait_ms for the first. A record that does not parse stops
 * the service: skipping it would let the replicas differ. */
int ap_service__replica_drain(ap_service *s, int64_t wait_ms, int max) {
  for (int n = 0; max == 0 || n < max; n++) {
    ap_replica_record r;
    o3m_err e;
    o3m_err_clear(&e);
    int rc = ap_replica_next(s->rep, &r, n == 0 ? wait_ms : 0, &e);
    if (rc == 0) return n;
    if (rc < 0) {
      if (rc == O3M_ECORRUPT) {
        replica_damaged(s, &e);
      } else {
        o3m_log_warn("replica '%s': %s", s->replica, o3m_err_message(&e));
      }
      return rc;
    }
    replica_apply(s, &r);
  }
  return max;
}

/* Answers the Rewards whose records are applied here, with the outcome. */
void ap_service__replica_answer(ap_service *s) {
  int k = 0;
  for (int i = 0; i < s->n_rwait; i++) {
    struct replica_wait *w = &s->rwait[i];
    if (w->seq > s->applied_seq) {
      s->rwait[k++] = *w;
      continue;
    }
    if (w->rc == 0) {
      O3m__V1__RewardReply rep = O3M__V1__REWARD_REPLY__INIT;
      rep.updates = o3m_policy_updates(s->policy);
      o3m_rpc_call_reply(w->call, &rep.base, NULL);
      s->committed++;
      continue;
    }
    o3m_err e;
    o3m_err_set(&e, w->rc, "decision %llu: %s", (unsigned long long)w->decision,
                w->rc == O3M_EEXISTS ? "was already rewarded (found when applying the stream)"
                                     : "its record was refused when applied (nothing changed)");
    o3m_rpc_call_fail(w->call, w->rc, &e);
  }
  s->n_rwait = k;
}

/* A Reward on a replica: checked like a local one, the decision found in
 * this replica's pending table or else by lookup, then appended to the
 * stream; the call waits until this replica has applied the record (so
 * its reply reports the model that includes it). See ap_replica.h. */
int ap_service__replica_reward(ap_service *s, o3m_rpc_call *call,
                               const O3m__V1__RewardRequest *req, o3m_err *e) {
  unsigned long long id = (unsigned long long)req->decision;
  int found;
  int64_t now = o3m_clock_ms();
  applied_find(s, req->decision, o3m_clock_wall_ms(), &found);
  if (found) return o3m_err_set(e, O3M_EEXISTS, "decision %llu was already rewarded", id);
  if (s->n_rwait == REWARD_SLOTS)
    return o3m_err_set(e, O3M_EFULL, "too many rewards wait for the stream; retry");
  int arm, degraded;
  uint64_t mask_id;
  const double *x, *x0;
  int rc = ap_service__reward_lookup(s, o3m_rpc_call_identity(call), req->decision, now, &arm,
                                     &mask_id, &x, &x0, &degraded, e);
  if (rc < 0) return rc;
  /* A degraded decision's record says so and carries x^0 (its x is zeros):
   * every replica's local model alone learns it (replica_apply). */
  degraded = degraded && x0;
  /* A decision record from another replica is checked like a stream record. */
  o3m_err be;
  o3m_err_clear(&be);
  if ((rc = replica_bounds(s, arm, x, req->reward, &be)) < 0)
    return o3m_err_set(e, O3M_ECORRUPT, "decision %llu: its record from another replica is out of "
                       "bounds (%s); nothing changed", id, o3m_err_message(&be));
  const char *what;
  if (!degraded && (rc = o3m_policy_update_check(s->policy, arm, x, req->reward, &what)) < 0)
    return ap_service__reward_refused(req->decision, rc, what, e);
  uint64_t seq;
  int dup;
  o3m_err pe;
  o3m_err_clear(&pe);
  rc = ap_replica_publish(s->rep, req->decision, mask_id, arm, req->reward, x, x0, degraded, &seq,
                          &dup, &pe);
  if (rc == O3M_ECORRUPT) {
    replica_damaged(s, &pe);
    return o3m_err_set(e, O3M_EUNAVAILABLE, "decision %llu: the reward stream lost records; "
                       "this replica is stopping: retry on another", id);
  }
  if (rc < 0)
    return o3m_err_set(e, O3M_EUNAVAILABLE, "decision %llu: the reward is not acknowledged "
                       "(%s); retry, on this or another replica", id, o3m_err_message(&pe));
  if (dup) return o3m_err_set(e, O3M_EEXISTS, "decision %llu was already rewarded", id);
  s->commits++;
  s->rwait[s->n_rwait++] = (struct replica_wait){call, req->decision, seq, 0};
  /* Usually the record is back within the publish's round trip: apply it
   * now; the idle hook that follows this handler answers the call (a
   * deferred call is never completed inside its own handler). */
  ap_service__replica_drain(s, 0, 0);
  return O3M_RPC_DEFERRED;
}

