/* ap_checkpoint.h -- durable model state of the active participant:
 * checkpoints, recovery, and the reward path through the journal.
 *
 * The AP's model is the policy state (o3m_policy.h). This module keeps it
 * durable with two kinds of file in the party's state_dir:
 *   - the write-ahead journal of rewards (ap_journal.h), through which every
 *     reward passes before it is acknowledged;
 *   - periodic checkpoints of the full policy state, so that a restart
 *     replays only the journal written since.
 * and a lock file, ap.lock (flock), so that two processes never share one
 * state_dir.
 *
 * Checkpoint files are named ap-ckpt-<journal seq, 16 hex digits>.ckpt: the
 * seq of the last journal record whose effect the state includes. A
 * checkpoint is written to ap-ckpt-<seq>.tmp, fsynced, renamed and the
 * directory fsynced, so a checkpoint file is either complete or absent. The
 * newest two are kept (a crash between the rename and the removal of the
 * oldest leaves three until the next checkpoint; leftover .tmp files are
 * removed at open); the journal is rotated at each checkpoint and pruned
 * of segments older than the OLDER of the two, so a damaged newest
 * checkpoint can always fall back to the previous one plus a longer replay.
 * The rotation comes BEFORE the checkpoint file: when ap_journal_rotate()
 * returns, the segment starting at seq + 1 is durable, so a checkpoint at
 * seq proves that segment existed, and a journal that ends before it (every
 * segment after the checkpoint lost) is refused at recovery instead of
 * being continued as if nothing had been acknowledged since (ap_journal.h,
 * opt.after). A crash anywhere in between leaves either no new checkpoint
 * (the older one and the longer journal recover) or a checkpoint whose
 * segment exists.
 * Format (little-endian):
 *    0   8  magic "O3MCKPT\0"
 *    8   4  version (2; version 1 is read as a file with M = 0)
 *   12   4  header length (64)
 *   16   8  journal seq included (the position)
 *   24   8  mask id of the block the state was learned under
 *   32   8  length N of the (federated) policy state image
 *   40   8  wall-clock time written, Unix ms (informational)
 *   48   8  policy update count (informational)
 *   56   4  length M of the local model's image (0: none; version 1: zero)
 *   60   4  CRC32C of bytes 0..59
 *   64   N  the policy state image (o3m_policy.h documents it)
 * 64+N   M  the local model's state image (ap_fallback.h), same format
 * 64+N+M 4  CRC32C of both images
 * 68+N+M 4  zero
 * 72+N+M 8  magic "O3MCKEND"
 * A checkpoint is valid when the file is exactly 80 + N + M bytes and both
 * CRCs and magics match; the images are then trusted, and only then
 * interpreted.
 *
 * The local model (opt.local, the fallback of ap_fallback.h) rides along:
 * its image in the checkpoint, its rewards in the journal (record types 4
 * and 5, ap_journal.h), so a restart restores it with every acknowledged
 * reward. It never refuses a start: a checkpoint without its image
 * (version 1, or written with fallback = none) or with one of another
 * configuration (local_lambda, the own columns) leaves it fresh with a
 * warning, and the journal records after the checkpoint are replayed into
 * it all the same; a local record whose federated record was never written
 * (a crash between the two appends) is dropped, as the live path dropped
 * it. Its numerical health is not checked here (it is the fallback, and
 * rebuilt by a fresh start at worst).
 *
 * Recovery (ap_checkpoint_open). The policy is reset; the newest valid
 * checkpoint is loaded (an invalid one is renamed to *.corrupt with a
 * warning and the next older one is tried; with none left the policy stays
 * fresh and the whole journal is replayed, which must then exist: see
 * opt.had_state); then the journal records after
 * its position are replayed in order: reward records through
 * o3m_policy_update, refactor records through o3m_policy_refactor, exactly as
 * they were applied live. The resulting state equals, bit for bit, that of
 * an uninterrupted process that applied the same journal records (with one
 * exception: Thompson draws are not journaled, so the sampler is restored to
 * its state at the checkpoint; see the note below). A torn last journal
 * record (a write a crash interrupted, never acknowledged, unless the disk
 * lost a synced write: ap_journal.h) is cut with a warning; any other
 * loss of journal records (damage, a file cut short, a lost segment)
 * refuses to start with O3M_ECORRUPT unless salvage is set (see
 * ap_journal.h). With salvage and no valid checkpoint newer than the loss,
 * the model is what the checkpoint and the surviving records hold.
 *
 * Mask ids. A masked context is meaningful only under the block it was
 * masked with: Lambda and theta learned under Q cannot be combined with
 * contexts masked by another Q'. The checkpoint and every journal record
 * carry the mask id, and recovery fails with O3M_EMASK when any of them
 * differs from opt.mask_id (info->found_mask_id names the old one). The
 * service must then either refuse to start, or, by an explicit operator
 * choice, call ap_checkpoint_discard() (which moves the old state aside,
 * nothing is deleted) and open again with a fresh model.
 *
 * Configuration changes. A checkpoint saved by a policy with another algo,
 * model, d, number of arms or lambda, or in another format version of the
 * policy state (another release), is refused with O3M_EDIM (the message
 * names the field) and left where it is: the state cannot be
 * reinterpreted, and it is not damage. alpha, v,
 * max_candidates and refactor_every may change between runs; the sampler
 * keeps its saved stream rather than restarting from the config's seed.
 *
 * The Thompson sampler. Its state is in every checkpoint, but draws made
 * after the checkpoint are not journaled, so after a restart the sampler
 * repeats the draws made since the last checkpoint. Each draw is still
 * N(0, 1) and independent of the new model state; nothing learned is lost.
 *
 * Decisions waiting for a reward are not made durable here (the pending
 * table lives in memory): after a restart a reward for a decision issued
 * before it is answered NOT_FOUND. A reward that reached the journal but
 * whose reply was lost in the crash is in the model exactly once; its retry
 * also gets NOT_FOUND, because decision ids are random 64-bit values
 * (ap_pending.h), so a new run repeats an old one only by a chance of
 * about pending_capacity / 2^64.
 *
 * Not thread-safe: the service calls everything under its server's lock
 * (one handler at a time); only the checkpoint writer thread, which
 * touches nothing but its snapshot and the checkpoint file, runs beside
 * it (ap_checkpoint_start). */
#ifndef AP_CHECKPOINT_H
#define AP_CHECKPOINT_H

#include <stdint.h>

#include "ap_fallback.h"
#include "ap_journal.h"
#include "o3m_policy.h"
#include "o3m_error.h"

typedef struct ap_checkpoint_options {
  const char *state_dir;   /* created (mode 0700) if missing; required */
  uint64_t mask_id;        /* mask id of the installed block */
  int salvage;             /* the daemon's --salvage (see ap_journal.h) */
  /* 1: the state_dir held state of an earlier run (the AP's block, stored
   * by the run that fetched it). Such a directory had a model: with no
   * checkpoint left (none at all, or only damaged ones) and no journal
   * segment, open refuses with O3M_ENOTFOUND instead of starting a fresh
   * model over it. 0 for a brand-new state_dir, and after
   * ap_checkpoint_discard (the operator chose a fresh model). */
  int had_state;
  size_t segment_bytes;    /* journal segment size */
  int group_records;       /* journal append buffer, in records */
  uint64_t every_records;  /* ap_checkpoint_due after this many rewards (0: off; a
                            * local part record does not count apart) */
  int64_t every_ms;        /* ... or after this long with >= 1 record (0: off) */
  /* 1: the log of rewards is kept elsewhere (AP replicas: the JetStream
   * stream, ap_replica.h). There is no journal: open loads the newest
   * checkpoint only, whose seq is then a position in that log; the caller
   * applies the records after it and reports each position with
   * ap_checkpoint_set_position; checkpoints are written at that position;
   * a repairable health problem is reported but not repaired (a repair
   * made by one replica alone would make the replicas differ). */
  int external_log;
  /* The local model (ap_fallback.h), saved and replayed beside p; NULL
   * without the fallback. Borrowed like p. Its d must be at most p's. */
  ap_fallback *local;
} ap_checkpoint_options;

/* Defaults: state_dir NULL (must be set), mask_id 0, salvage 0, journal
 * defaults, a checkpoint every 10000 records or 60 s. */
void ap_checkpoint_options_default(ap_checkpoint_options *o);

/* What recovery did. */
typedef struct ap_recovery_info {
  uint64_t checkpoint_seq;   /* position of the checkpoint loaded; 0: none */
  int checkpoints_rejected;  /* invalid ones renamed to *.corrupt */
  uint64_t replayed;         /* journal records applied after the checkpoint */
  uint64_t refactors;        /* of which refactor records */
  uint64_t update_errors;    /* reward records whose update failed, as live */
  uint64_t last_seq;         /* last journal record */
  uint64_t tail_bytes_cut;   /* torn journal tail removed */
  int salvaged;              /* salvage cut the journal (data after it lost) */
  uint64_t salvage_seq;      /* with salvaged: the first seq not recovered */
  uint64_t found_mask_id;    /* with O3M_EMASK: the mask id of the saved state */
  uint64_t local_replayed;   /* local model updates replayed from the journal */
  uint64_t local_dropped;    /* local parts whose federated record was never written */
} ap_recovery_info;

typedef struct ap_checkpoint ap_checkpoint;

/* Locks opt->state_dir, recovers policy p from it (above) and opens the
 * journal for appends. p is borrowed: it must outlive the handle, and from
 * now on every change to it must go through this module
 * (ap_checkpoint_apply_reward, ap_checkpoint_health), or the journal would
 * not describe it. info may be NULL. Errors: O3M_EINVAL (options),
 * O3M_ESTATE (state_dir locked by another process), O3M_ENOTFOUND (the
 * model is gone: opt.had_state), O3M_EMASK, O3M_EDIM
 * (config changed, or a journal of another format version), O3M_ECORRUPT
 * (journal damage or a lost segment, without salvage), O3M_EIO,
 * O3M_ENOMEM. On failure *out is NULL, p is reset to a fresh state and the
 * lock is released. */
int ap_checkpoint_open(ap_checkpoint **out, o3m_policy *p, const ap_checkpoint_options *opt,
                       ap_recovery_info *info, o3m_err *e);

/* The reward path. First asks o3m_policy_update_check whether the model can
 * take the update: if not (its O3M_EINVAL or O3M_ENONFINITE) nothing is
 * journaled and nothing changes, so
 * no update that would leave the model non-finite or damaged ever becomes
 * durable or is replayed. Otherwise appends a reward record (with the
 * handle's mask id) to the journal buffer, then applies
 * o3m_policy_update(arm, x, reward). Not durable, and so not to be
 * acknowledged, until ap_checkpoint_sync() returns 0; several rewards may
 * share one sync (group commit). Returns O3M_EIO if the journal has failed
 * (nothing applied; the service must stop: see ap_journal.h),
 * O3M_EUNAVAILABLE if the journal cannot start a new segment yet (nothing
 * journaled or applied; the journal goes on, the reward may be retried),
 * else the
 * update's code, 0 after a passed check: an update that still failed (only
 * possible for a rank-one path that lost definiteness and whose exact
 * refactorization failed too) stays journaled and replays as failed
 * (ap_recovery_info.update_errors), as journals written before the check
 * do. Allocates nothing. */
int ap_checkpoint_apply_reward(ap_checkpoint *c, uint64_t decision, int arm, const double *x,
                               const double *x0, double reward);

/* With opt.local: x0 (may be NULL, then the local model learns nothing)
 * is the decision's own part; when the local model can take the update, a
 * local part record is appended BEFORE the reward record and the local
 * model learns it after both were appended (a replay does the same, or
 * applies neither; see ap_checkpoint.h). ap_checkpoint_apply_local is the
 * path of a degraded decision's reward: a local record, then the local
 * model's update; a reward the local model cannot take is skipped (and
 * counted) with nothing journaled and returns 0. Both: not durable until
 * ap_checkpoint_sync; O3M_EIO / O3M_EUNAVAILABLE as above; O3M_EINVAL
 * without opt.local. */
int ap_checkpoint_apply_local(ap_checkpoint *c, uint64_t decision, int arm, const double *x0,
                              double reward);

/* Makes every applied reward durable (one write and one fdatasync for all
 * of them). O3M_EIO on failure: do not acknowledge, stop the service. */
int ap_checkpoint_sync(ap_checkpoint *c, o3m_err *e);

/* 1 if a checkpoint is due by the every_records / every_ms settings, else 0. */
int ap_checkpoint_due(const ap_checkpoint *c);

/* Writes a checkpoint now and waits for it: ap_checkpoint_start, then
 * ap_checkpoint_collect with wait (a checkpoint already in flight is
 * finished first). Used for the final checkpoint and by tests. */
int ap_checkpoint_write(ap_checkpoint *c, o3m_err *e);

/* Starts a checkpoint off the caller's thread. On the caller's thread:
 * runs the quick health check (a repairable problem is repaired through
 * ap_checkpoint_health's journaled refactor; a damaged Lambda or u is
 * O3M_ECORRUPT and nothing is written, so a bad state never becomes
 * durable), syncs and rotates the journal, and copies the policy state
 * image into a snapshot buffer (o3m_policy_state_export; a memcpy-speed
 * pass over O(n_models d^2) bytes, held as a second copy of the model for
 * the handle's life). The snapshot is consistent: it is the state after
 * exactly the journal records up to the rotation, since the caller applies
 * nothing meanwhile. Then a writer thread of the handle (started on first
 * use) writes, fsyncs and renames the checkpoint file and fsyncs the
 * directory, while the caller goes on applying rewards. O3M_ESTATE if one
 * is in flight already; ap_checkpoint_due() is 0 until it is collected. */
int ap_checkpoint_start(ap_checkpoint *c, o3m_err *e);

/* Finishes the checkpoint in flight, on the caller's (the journal's)
 * thread: *done = 0 and 0 returned when none is in flight or (without
 * wait) it is still being written; otherwise *done = 1 and the outcome is
 * returned: on success the checkpoint becomes the newest, all but the
 * newest two are deleted and the journal is pruned before the older of
 * them. A failure (O3M_EIO for a file error) leaves the previous
 * checkpoints and the journal intact, so it is safe to continue serving
 * and retry later. */
int ap_checkpoint_collect(ap_checkpoint *c, int wait, int *done, o3m_err *e);

/* The journal seq of the newest checkpoint written or loaded (0: none). */
uint64_t ap_checkpoint_seq(const ap_checkpoint *c);

/* Checks the policy's numerical health (o3m_policy_health_check with flags);
 * if a factor or theta is broken but Lambda and u are sound, appends a
 * refactor record (all models), applies o3m_policy_refactor(p, -1) and syncs,
 * so that the repair is part of the durable history and replays identically.
 * Returns 0 when healthy or repaired (*h, if not NULL, holds the finding
 * before the repair), O3M_ECORRUPT when Lambda or u itself is damaged (not
 * repairable in memory: stop, and recover from disk), O3M_EIO. */
int ap_checkpoint_health(ap_checkpoint *c, int flags, o3m_policy_health *h, o3m_err *e);

/* external_log: the position of the last record applied to the policy
 * (the next checkpoint is written at it). */
void ap_checkpoint_set_position(ap_checkpoint *c, uint64_t seq);

/* The journal (for its seq counters and tests). */
ap_journal *ap_checkpoint_journal(ap_checkpoint *c);

/* Journal records since the last checkpoint. */
uint64_t ap_checkpoint_records_since(const ap_checkpoint *c);

/* Syncs the journal (best effort), closes it and releases the lock. Does
 * not write a checkpoint; call ap_checkpoint_write() first for a quick next
 * start. The policy is not freed. NULL is accepted. */
void ap_checkpoint_close(ap_checkpoint *c);

/* For an explicit fresh start (after O3M_EMASK, or by operator choice):
 * moves every checkpoint and journal file of state_dir into a new
 * subdirectory discarded-<Unix ms>/ (nothing is deleted) and fsyncs. Takes
 * the lock, so not while a handle is open on state_dir. A missing state_dir
 * is fine. O3M_ESTATE if locked, O3M_EIO. */
int ap_checkpoint_discard(const char *state_dir, o3m_err *e);

#endif
