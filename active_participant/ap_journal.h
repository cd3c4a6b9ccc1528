/* ap_journal.h -- the active participant's write-ahead log of rewards.
 *
 * The AP acknowledges a reward only after the reward is in this log on disk.
 * Each reward becomes one fixed-length record holding everything the policy
 * update needs (arm, reward, the masked context x as binary64 bit patterns),
 * so replaying the log through ap_policy_update() reproduces the model bit
 * for bit. Appends go to a buffer allocated at open and reach the file with
 * write(2) when the buffer fills or at ap_journal_sync(), which also calls
 * fdatasync(2): group commit. The caller appends any number of records, then
 * syncs once, then acknowledges all of them.
 *
 * Files (in the party's state_dir). The log is a sequence of segment files
 *   ap-journal-<first seq, 16 lowercase hex digits>.wal
 * Records are numbered by a sequence number seq = 1, 2, 3, ... that never
 * restarts; a segment holds consecutive records starting at the seq in its
 * name, and the next segment starts where it ends. A new segment is started
 * by ap_journal_rotate() (the checkpoint module rotates at every checkpoint)
 * or when a segment grows past segment_bytes; it is created complete (header
 * written to a .tmp file, fdatasync, rename, fsync of the directory), so a
 * segment never has a torn header. ap_journal_prune() deletes whole segments
 * whose records are all covered by a checkpoint, which bounds the log.
 *
 * Segment header, 64 bytes, little-endian:
 *    0  8  magic "O3MJSEG\0"
 *    8  4  version (1)
 *   12  4  d, the context dimension of every record
 *   16  8  seq of the first record in this segment
 *   24  8  creation time, Unix ms (informational)
 *   32 28  zero
 *   60  4  CRC32C of bytes 0..59
 * Record, L = 64 + 8 d bytes (every record of a journal has the same length,
 * so record k of a segment is at offset 64 + k L), little-endian:
 *    0  4  magic "O3MJ"
 *    4  1  version (1)
 *    5  1  type: 1 reward, 2 refactor (ap_policy_refactor of model `arm`,
 *          -1 = all models; replayed so that repairs are reproduced too)
 *    6  2  zero
 *    8  4  record length L
 *   12  4  d
 *   16  8  seq
 *   24  8  decision id (0 for refactor records)
 *   32  8  mask id of the block the context x was masked with
 *   40  4  arm (int32; shared models ignore it)
 *   44  4  zero
 *   48  8  reward (binary64 bit pattern)
 *   56 8d  x[0..d) (binary64 bit patterns; zeros for refactor records)
 * 56+8d 4  zero
 * 60+8d 4  CRC32C (Castagnoli, reflected, as in iSCSI/ext4) of bytes 0..L-5
 *
 * Opening replays and repairs. ap_journal_open() lists the segments, reads
 * every record with seq > opt.after in order (records at or before it are
 * covered by the checkpoint the caller loaded and are not read) and hands
 * each to the replay callback. A record is valid when its magic, version,
 * type, length, d and CRC are right and its seq is the next one expected.
 * The first invalid record ends the replay, and what follows decides:
 *   - nothing valid after it in its segment, and it is in the last segment:
 *     a torn or corrupt TAIL, left by a crash during a write that was never
 *     acknowledged. The file is truncated to the last valid record
 *     (ftruncate, fdatasync) and a log line says how many bytes were
 *     dropped.
 *   - a valid record after it, or later segments: corruption in the MIDDLE of
 *     acknowledged data. Without salvage this is O3M_ECORRUPT (the journal is
 *     not changed, the message names the file, offset and seq): losing data
 *     must never be silent. With salvage the replay stops there; the rest of
 *     that segment is copied to <segment>.dropped and cut, later segments
 *     are renamed to <segment>.dropped (kept for inspection, never read
 *     again), and info->salvaged says so.
 * A gap (the first segment starts after opt.after + 1, or a segment does not
 * start where the previous one ends) is handled like middle corruption. A
 * journal that ends before opt.after (its files were lost, the checkpoint has
 * everything) continues with a new segment at opt.after + 1, with a warning.
 * A missing or empty journal is a fresh start. Leftover .tmp files are
 * removed.
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

/* Sizes of the on-disk structures (see above). */
#define AP_JOURNAL_SEGMENT_HEADER 64
#define AP_JOURNAL_RECORD_BYTES(d) (64 + 8 * (size_t)(d))

/* One record. For append: type, decision, mask_id, arm, reward and x are
 * read (x is d values; it may be NULL for a refactor record); seq is
 * ignored. For replay: every field is set, x points into the journal's
 * buffer and is valid only during the callback. */
typedef struct ap_journal_record {
  int type;          /* AP_JOURNAL_REWARD or AP_JOURNAL_REFACTOR */
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
  int d;                  /* record dimension, 1..4096 */
  uint64_t after;         /* replay records with seq > after */
  int salvage;            /* cut at middle corruption instead of failing */
  size_t segment_bytes;   /* start a new segment at sync past this size */
  int buffer_records;     /* append buffer (group commit) in records */
  ap_journal_replay_fn replay; /* may be NULL: records are checked only */
  void *replay_ctx;
} ap_journal_options;

/* Defaults: dir NULL and d 0 (must be set), after 0, salvage 0,
 * segment_bytes 64 MiB, buffer_records 64, replay NULL. */
void ap_journal_options_default(ap_journal_options *o);

/* What ap_journal_open found. */
typedef struct ap_journal_info {
  uint64_t replayed;        /* records handed to the callback */
  uint64_t last_seq;        /* last record in the journal after open */
  uint64_t tail_bytes_cut;  /* bytes of a torn tail removed */
  int salvaged;             /* 1 if salvage cut the journal at corruption */
  uint64_t salvage_seq;     /* with salvaged: the first seq not recovered */
  uint64_t dropped_bytes;   /* with salvaged: bytes moved to .dropped files */
  int segments;             /* segment files after open */
} ap_journal_info;

typedef struct ap_journal ap_journal;

/* Opens the journal in opt->dir as described above and leaves it ready for
 * appends at seq info->last_seq + 1. info may be NULL. Errors: O3M_EINVAL
 * (options), O3M_ENOMEM, O3M_EIO (a file operation; the message names it),
 * O3M_EDIM (a segment was written with another d), O3M_ECORRUPT (middle
 * corruption or a gap, without salvage), or the callback's code. On failure
 * *out is NULL and, except for the torn-tail cut or salvage already done,
 * the files are as they were. */
int ap_journal_open(ap_journal **out, const ap_journal_options *opt, ap_journal_info *info,
                    o3m_err *e);

/* Adds a record to the append buffer (writing the buffer out when it is
 * full) and returns its seq in *seq (may be NULL). Not durable until
 * ap_journal_sync() returns 0. Allocates nothing. O3M_EINVAL for a bad type
 * or a NULL x in a reward record, O3M_EIO when the journal has failed. */
int ap_journal_append(ap_journal *j, const ap_journal_record *r, uint64_t *seq);

/* Writes the buffer and fdatasyncs the segment: afterwards every appended
 * record is durable and may be acknowledged. Then starts a new segment if
 * the current one has grown past segment_bytes (if that fails the records
 * are durable all the same: a warning, and a retry later). O3M_EIO when the
 * write or the fdatasync fails (the journal is then failed, see above). A
 * sync with nothing new is a cheap no-op. */
int ap_journal_sync(ap_journal *j, o3m_err *e);

/* seq of the last appended record, and of the last durable one. */
uint64_t ap_journal_last_seq(const ap_journal *j);
uint64_t ap_journal_synced_seq(const ap_journal *j);

/* Syncs and starts a new segment at last_seq + 1 (no-op if the current
 * segment holds no records). */
int ap_journal_rotate(ap_journal *j, o3m_err *e);

/* Deletes every segment (never the current one) whose records all have
 * seq <= upto, then fsyncs the directory. */
int ap_journal_prune(ap_journal *j, uint64_t upto, o3m_err *e);

/* Number of segment files. */
int ap_journal_segments(const ap_journal *j);

/* 0, or O3M_EIO once the journal has failed. */
int ap_journal_failed(const ap_journal *j);

/* Syncs (best effort; a failure is logged) and frees. NULL is accepted. */
void ap_journal_close(ap_journal *j);



#endif
