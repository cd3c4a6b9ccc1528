/* ap_journal.h -- the active participant's write-ahead log of rewards.
 *
 * The AP acknowledges a reward only after the reward is in this log on disk.
 * Each reward becomes one fixed-length record holding everything the policy
 * update needs (arm, reward, the masked context x as binary64 bit patterns),
 * so replaying the log through o3m_policy_update() reproduces the model bit
 * for bit (with the AP's local model, ap_fallback.h, a second record of the
 * same length carries its part: types 4 and 5 below). Appends go to a buffer allocated at open and reach the file with
 * pwrite(2) when the buffer fills or at ap_journal_sync(), which also calls
 * fdatasync(2): group commit. The caller appends any number of records, then
 * syncs once, then acknowledges all of them.
 *
 * The one promise: a record whose sync returned 0 is never dropped without
 * an error. Every way the log can lose acknowledged records that is not a
 * crash in the middle of a write (a damaged record, a file cut short, a lost
 * segment) must be told apart from a crash, so the log is laid out so that
 * its own contents say how long it must be.
 *
 * Files (in the party's state_dir). The log is a sequence of segment files
 *   ap-journal-<first seq, 16 lowercase hex digits>.wal
 * Records are numbered by a sequence number seq = 1, 2, 3, ... that never
 * restarts; a segment holds consecutive records starting at the seq in its
 * name, and the next segment starts where it ends. A segment is a fixed
 * array of N record slots after its header: its file is created at its full
 * size, 64 + N L bytes, as a sparse file (ftruncate(2); unwritten slots are
 * a hole and read as zeros, and open skips the hole with SEEK_DATA),
 * complete (header written to a .tmp file, fdatasync, rename, fsync of the
 * directory), and never changes length afterwards. Record k of a segment is
 * written in place, at offset 64 + k L, exactly once.
 *
 * Segment header, 64 bytes, little-endian:
 *    0  8  magic "O3MJSEG\0"
 *    8  4  version (3; version 2 is read too)
 *   12  4  d, the context dimension of every record
 *   16  8  seq of the first record in this segment
 *   24  8  creation time, Unix ms (informational)
 *   32  8  N, the number of record slots (the file is 64 + N L bytes)
 *   40 20  zero
 *   60  4  CRC32C of bytes 0..59
 * Record, L = 64 + 8 d bytes (every record of a journal has the same
 * length), little-endian:
 *    0  4  magic "O3MJ"          (the start marker)
 *    4  1  version (3; 2 in segments of the release before, which have
 *          no record of type 4 or 5)
 *    5  1  type: 1 reward, 2 refactor (o3m_policy_refactor of model `arm`,
 *          -1 = all models; replayed so that repairs are reproduced too),
 *          3 close (see "Rotation"; not handed to the replay callback),
 *          4 local reward (a degraded decision's: the AP's local model
 *          alone learns it, ap_fallback.h), 5 local part (the local model's
 *          share of the type 1 record of the same decision that follows
 *          it; a replay applies the two together or, if the type 1 record
 *          never made it to the log, neither). For types 4 and 5 x holds
 *          the decision's own part x^0 in its first d0 values, zeros after
 *    6  2  zero
 *    8  4  record length L
 *   12  4  d
 *   16  8  seq (of a close record: the first seq of the next segment)
 *   24  8  decision id (0 for refactor and close records)
 *   32  8  mask id of the block the context x was masked with
 *   40  4  arm (int32; shared models ignore it)
 *   44  4  zero
 *   48  8  reward (binary64 bit pattern)
 *   56 8d  x[0..d) (binary64 bit patterns; zeros for refactor records)
 * 56+8d 4  CRC32C (Castagnoli, reflected, as in iSCSI/ext4) of bytes 0..L-9
 * 60+8d 4  magic "JEND"          (the end marker)
 * Data records use slots 0..N-2; the last slot is kept for the close record.
 *
 * Rotation. ap_journal_rotate() (the checkpoint module rotates at every
 * checkpoint) or a segment that fills up starts a new segment at seq S =
 * last_seq + 1 in three steps: (1) the records are synced; (2) segment S is
 * created complete, as above; (3) a close record "next seq = S" is written
 * into the old segment's first free slot and fdatasynced. Only then do
 * appends go to segment S. So a closed segment proves that its successor
 * existed, and a crash between (2) and (3) leaves an unclosed segment
 * followed by an empty one (open finishes step 3). A rotation also returns
 * only once segment S is durable: a caller that writes a checkpoint at seq
 * S - 1 after ap_journal_rotate() returned may rely on segment S existing
 * (this is what opt.after means below). ap_journal_prune() deletes whole
 * segments whose records are all covered by a checkpoint.
 *
 * What a crash can leave, and why the rules below are sound. A process
 * crash (SIGKILL, the crash tests) loses nothing that write(2) accepted;
 * the write it interrupts (one pwrite of whole records into never-written
 * slots) stops at some byte, so its last slot holds a prefix of a record
 * and its END MARKER is still zero. A system crash can also lose pages of
 * the write that was not yet fdatasynced; for a record of at most one page
 * (d <= 504) a lost page leaves its start or end marker zero. Either way the
 * damage is confined to records that were never acknowledged, and such a
 * record reads as "torn": not all zero, but its start or end marker zero.
 * A disk that loses a write it had reported synced (a failing disk, or a
 * write cache without power-loss protection) can leave the same shape on a
 * record that was acknowledged: nothing in the file tells the two apart,
 * so the cut's warning says only what is known (the last record is
 * incomplete; it may have been acknowledged if the disk lost a write).
 * A record whose two markers are present was written whole; a wrong CRC, a
 * wrong header field or a wrong seq in it is damage, never a crash. Nothing
 * a crash does changes a file's length (files are created at full size) or
 * removes a segment (only rotation creates and only prune deletes them).
 *
 * Opening replays and checks. ap_journal_open() lists the segments, reads
 * every record with seq > opt.after in order (records at or before it are
 * covered by the checkpoint the caller loaded and are not replayed) and
 * hands each to the replay callback. Then:
 *   - a segment whose header is damaged, whose file is not exactly 64 + N L
 *     bytes (cut short: the "cut at a record boundary" case), a full-length
 *     record (both markers) that fails its CRC or header checks or is out of
 *     sequence, a record in the slot kept for the close record, and any
 *     non-zero slot after the end of the log (the first all-zero slot, a
 *     torn record or a close record ends a segment) is DAMAGE;
 *   - a closed segment with no segment after it is a LOST SEGMENT (the newest
 *     segment deleted), and so is a gap or overlap between segments, records
 *     missing before the first segment, and a journal that ends before
 *     opt.after + 1: opt.after > 0 says that a checkpoint at that seq exists,
 *     which by the rotation rule proves that segment opt.after + 1 existed
 *     (every segment after the newest checkpoint deleted, or no segment at
 *     all, is caught here);
 *   - a torn record is cut only if it is the last non-zero slot of the last
 *     segment: its slot is zeroed (pwrite, fdatasync), a warning says so,
 *     and info->tail_bytes_cut = L. A torn record anywhere else is damage.
 *   - an unclosed segment just before the last one is a crash between
 *     rotation steps (2) and (3) (the seqs prove that nothing is missing
 *     between them): open writes its close record
 *     (info->rotation_completed), so that losing the last segment later is
 *     still found. An unclosed segment anywhere else before the last is
 *     damage.
 * Damage and lost segments without salvage are O3M_ECORRUPT: the journal is
 * not changed and the message names the file, the offset and the first seq
 * not recovered: losing acknowledged data must never be silent. With
 * salvage the replay stops there; the non-zero bytes of that segment from
 * the stop point on are copied to <segment>.dropped, zeroed in place, and
 * the file is brought back to its full length; later segments are renamed
 * to <segment>.dropped (kept for inspection, never read again); appends go
 * on after the last record recovered (in a new segment when that one is
 * closed or was set aside), and info->salvaged says so. A missing or empty
 * journal with opt.after = 0 is a fresh start. Leftover .tmp files are
 * removed.
 *
 * Limits. A slot overwritten in place with zeros reads as never written:
 * zeroing the last records of the last segment (or their markers) cannot be
 * told from a crash without a second copy of the log length, which would
 * cost a second fdatasync per group; it is no accident a disk or a crash
 * produces. A system crash that loses an inner page of an unsynced record
 * longer than a page (d > 504), or a page of an unsynced group while a
 * later page of it survives, is refused as damage although only
 * unacknowledged records are involved: a false alarm that --salvage clears,
 * never a silent loss.
 *
 * Format version 1 (append-only segments of earlier releases) is refused
 * with O3M_EDIM naming the version: it is another release's journal, not
 * damage, and it is left where it is.
 *
 * After a write or sync error the journal is failed: every later append or
 * sync returns O3M_EIO (after a failed fsync the kernel may have dropped the
 * dirty pages, so nothing written since the last good sync can be trusted;
 * the process must stop and recover from disk).
 *
 * A journal is used by one thread at a time and one process at a time (the
 * checkpoint module holds a lock file on the state_dir). */
#ifndef AP_JOURNAL_H
#define AP_JOURNAL_H

#include <stddef.h>
#include <stdint.h>

#include "o3m_error.h"

#define AP_JOURNAL_REWARD 1
#define AP_JOURNAL_REFACTOR 2
#define AP_JOURNAL_LOCAL 4        /* a degraded decision's reward: local model only */
#define AP_JOURNAL_LOCAL_PAIRED 5 /* the local part of the type 1 record after it */

/* Sizes of the on-disk structures (see above). */
#define AP_JOURNAL_SEGMENT_HEADER 64
#define AP_JOURNAL_RECORD_BYTES(d) (64 + 8 * (size_t)(d))

/* One record. For append: type, decision, mask_id, arm, reward and x are
 * read (x is d values; it may be NULL for a refactor record); seq is
 * ignored. For replay: every field is set, x points into the journal's
 * buffer and is valid only during the callback. */
typedef struct ap_journal_record {
  int type;          /* AP_JOURNAL_REWARD, _REFACTOR, _LOCAL or _LOCAL_PAIRED */
  uint64_t seq;
  uint64_t decision;
  uint64_t mask_id;
  int arm;
  double reward;
  const double *x;
} ap_journal_record;

/* Called for each replayed record in seq order. A nonzero return stops
 * ap_journal_open, which then fails with that value (files unchanged). */
typedef int (*ap_journal_replay_fn)(void *ctx, const ap_journal_record *r);

typedef struct ap_journal_options {
  const char *dir;        /* directory of the segments; must exist */
  int d;                  /* record dimension, 1..O3M_MAX_DIM */
  uint64_t after;         /* replay records with seq > after */
  int salvage;            /* set damage aside instead of failing (above) */
  /* 1: the caller knows this directory held a journal before (the AP's
   * state_dir kept its block from an earlier run, ap_checkpoint.h): no
   * segment at all is then O3M_ENOTFOUND, not a new journal, salvage or
   * not, since there is nothing a salvage could keep. */
  int expect_segments;
  size_t segment_bytes;   /* size of each new segment file, >= 64 + 2 L */
  int buffer_records;     /* append buffer (group commit) in records */
  ap_journal_replay_fn replay; /* may be NULL: records are checked only */
  void *replay_ctx;
} ap_journal_options;

/* Defaults: dir NULL and d 0 (must be set), after 0, salvage 0,
 * segment_bytes 64 MiB, buffer_records 64, replay NULL. A segment's N is
 * (segment_bytes - 64) / L, fixed when it is created (a changed
 * segment_bytes applies to the next segment). */
void ap_journal_options_default(ap_journal_options *o);

/* What ap_journal_open found. */
typedef struct ap_journal_info {
  uint64_t replayed;        /* records handed to the callback */
  uint64_t last_seq;        /* last record in the journal after open */
  uint64_t tail_bytes_cut;  /* bytes of a torn last record zeroed (0 or L) */
  int rotation_completed;   /* 1 if open wrote an interrupted rotation's close */
  int salvaged;             /* 1 if salvage cut the journal at corruption */
  uint64_t salvage_seq;     /* with salvaged: the first seq not recovered */
  uint64_t dropped_bytes;   /* with salvaged: bytes moved to .dropped files */
  int segments;             /* segment files after open */
} ap_journal_info;

typedef struct ap_journal ap_journal;

/* Opens the journal in opt->dir as described above and leaves it ready for
 * appends at seq info->last_seq + 1. info may be NULL. Errors: O3M_EINVAL
 * (options), O3M_ENOMEM, O3M_EIO (a file operation; the message names it),
 * O3M_ENOTFOUND (no segment although opt.expect_segments), O3M_EDIM (a
 * segment was written with another d, or in another format
 * version: another release), O3M_ECORRUPT (damage or a lost segment,
 * without salvage; the message names the file, offset and seq), or the
 * callback's code. On failure *out is NULL and the files are as they were,
 * except that a failure after the scan (an I/O error while cutting a torn
 * record, completing a rotation or salvaging) may leave that step half done;
 * each is safe to repeat. */
int ap_journal_open(ap_journal **out, const ap_journal_options *opt, ap_journal_info *info,
                    o3m_err *e);

/* Adds a record to the append buffer (writing the buffer out when it is
 * full) and returns its seq in *seq (may be NULL). Not durable until
 * ap_journal_sync() returns 0. When the current segment has no free slot
 * left (the rotation at sync failed, or one group filled it), this first
 * syncs and rotates; if that fails the journal fails. Allocates nothing
 * (except that rotation may grow the segment list). O3M_EINVAL for a bad
 * type or a NULL x in a reward record, O3M_EIO when the journal has failed.
 * O3M_EUNAVAILABLE, with nothing appended and the journal still working,
 * when the current segment is full and a new one cannot be created yet
 * (no file descriptor left, a full disk: the creation failed before its
 * rename, so nothing on disk changed); a later append tries again. */
int ap_journal_append(ap_journal *j, const ap_journal_record *r, uint64_t *seq);

/* Writes the buffer and fdatasyncs the segment: afterwards every appended
 * record is durable and may be acknowledged. Then starts a new segment if
 * 7/8 of the current one's slots are used (if that fails the records are
 * durable all the same: a warning, and a retry a little later; the disk
 * being full is noticed here, while the current segment still has room). O3M_EIO when the
 * write or the fdatasync fails (the journal is then failed, see above). A
 * sync with nothing new is a cheap no-op. */
int ap_journal_sync(ap_journal *j, o3m_err *e);

/* seq of the last appended record, and of the last durable one. */
uint64_t ap_journal_last_seq(const ap_journal *j);
uint64_t ap_journal_synced_seq(const ap_journal *j);

/* Syncs and starts a new segment at last_seq + 1 (see "Rotation"; a no-op
 * if the current segment holds no records, which then starts at
 * last_seq + 1). When it returns 0, a segment starting at last_seq + 1 is
 * durable. A failure before the new segment got its name leaves the journal
 * usable; a later one fails the journal (O3M_EIO). */
int ap_journal_rotate(ap_journal *j, o3m_err *e);

/* Deletes every segment (never the current one) whose records all have
 * seq <= upto, then fsyncs the directory. upto must be the position of a
 * durable checkpoint (records up to it are never read again). */
int ap_journal_prune(ap_journal *j, uint64_t upto, o3m_err *e);

/* Number of segment files. */
int ap_journal_segments(const ap_journal *j);

/* 0, or O3M_EIO once the journal has failed. */
int ap_journal_failed(const ap_journal *j);

/* Syncs (best effort; a failure is logged) and frees. NULL is accepted. */
void ap_journal_close(ap_journal *j);



#endif
