/* ap_journal.c -- segmented write-ahead log with CRC32C records written in
 * place into preallocated segments.
 *
 * The on-disk format and the recovery rules are in ap_journal.h. The
 * implementation keeps one open descriptor for the directory (every file
 * operation is relative to it, and it is what gets fsynced after a rename or
 * unlink), one for the current segment, the sorted list of the segments'
 * first seqs, and one buffer: the append buffer, which at open also serves
 * as the read buffer of the scan. Everything is allocated in
 * ap_journal_open(); appends and syncs allocate nothing (a rotation grows the
 * segment list only when it is full).
 *
 * Open works in two phases so that a refusal changes nothing: scan() reads
 * and replays, and describes what it found (where the log ends, a torn last
 * record, an interrupted rotation, or the first damage); only then does
 * ap_journal_open() write: the torn cut, the salvage, the missing close
 * record. */
#include "ap_journal.h"
#include "o3m_alloc.h"
#include "o3m_assert.h"
#include "o3m_bytes.h"
#include "o3m_limits.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "o3m_log.h"

#define SEG_MAGIC "O3MJSEG\0"
#define REC_MAGIC "O3MJ"
#define REC_END "JEND"
#define FORMAT_VERSION 3u
/* Version 2 (the release before the local model's records) is still read:
 * its layout is the same, it only lacks the record types 4 and 5. */
#define FORMAT_VERSION_OLDEST 2u
#define TYPE_CLOSE 3
#define HDR AP_JOURNAL_SEGMENT_HEADER
_Static_assert(HDR == O3M_FILE_HDR, "a segment header is an o3m_file_hdr");
#define NAME_MAX_LEN 64
#define ASIDE_LEN (NAME_MAX_LEN + 24)

/* Byte offsets of a record slot's fields (layout in ap_journal.h), used by
 * both encode_slot and classify/decode_record; the tail's are counted back
 * from the slot's end (j->L). */
enum rec_field {
  REC_AT_MAGIC = 0,     /* 4 bytes, REC_MAGIC */
  REC_AT_VERSION = 4,   /* 1 byte, FORMAT_VERSION */
  REC_AT_TYPE = 5,      /* 1 byte, reward, refactor, close or local */
  REC_AT_LEN = 8,       /* le32, slot length L */
  REC_AT_D = 12,        /* le32, dimension */
  REC_AT_SEQ = 16,      /* le64 */
  REC_AT_DECISION = 24, /* le64 */
  REC_AT_MASK_ID = 32,  /* le64 */
  REC_AT_ARM = 40,      /* le32 */
  REC_AT_REWARD = 48,   /* le64, IEEE 754 bits */
  REC_AT_X = 56,        /* d x le64, IEEE 754 bits */
  REC_TAIL_CRC = 8,     /* from the end: le32, CRC32C of bytes 0..L-9 */
  REC_TAIL_END = 4      /* from the end: 4 bytes, REC_END */
};

/* Byte offsets of a segment header's fields (HDR bytes), used by both the
 * writer and the segment check; magic, version and CRC are framed and
 * checked by o3m_file_hdr (o3m_bytes.h). */
enum seg_field {
  SEG_AT_MAGIC = O3M_FILE_HDR_AT_MAGIC,     /* 8 bytes, SEG_MAGIC */
  SEG_AT_VERSION = O3M_FILE_HDR_AT_VERSION, /* le32, FORMAT_VERSION */
  SEG_AT_D = 12,       /* le32, dimension */
  SEG_AT_FIRST = 16,   /* le64, first seq */
  SEG_AT_WALL_MS = 24, /* le64, wall clock at creation, informational */
  SEG_AT_NSLOTS = 32,  /* le64, slots in the segment */
  SEG_AT_HDR_CRC = O3M_FILE_HDR_AT_CRC /* le32, CRC32C of bytes 0..59 */
};

/* ------------------------------------------------------------------ handle */

struct ap_journal {
  int dirfd;
  char *dir;              /* for messages */
  int d;
  size_t L;               /* record length */
  uint64_t nslots;        /* N of the segments this handle creates */
  int fd;                 /* current segment, -1 if none */
  uint64_t cur_first;     /* first seq of the current segment */
  uint64_t cur_slots;     /* its N (from its header) */
  uint64_t cur_written;   /* its slots written to the file */
  uint64_t rotate_at;     /* a sync tries a rotation once cur_written reaches this */
  unsigned char *buf;
  size_t cap, fill;
  uint64_t last_seq, synced_seq;
  int failed;
  uint64_t *segs;         /* first seqs, ascending; the last is current */
  int nsegs, segcap;
  double *xbuf;           /* d doubles: x of the record being replayed */
};

void ap_journal_options_default(ap_journal_options *o) {
  memset(o, 0, sizeof *o);
  o->segment_bytes = (size_t)64 << 20;
  o->buffer_records = 64;
}

static void seg_name(char *out, uint64_t first, const char *suffix) {
  snprintf(out, NAME_MAX_LEN, "ap-journal-%016" PRIx64 ".wal%s", first, suffix);
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static int64_t wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static uint64_t slot_off(const ap_journal *j, uint64_t k) { return HDR + k * j->L; }

/* The slot count at which a sync starts a new segment: 7/8 of the data
 * slots (all but the last, kept for the close record), so that a failure to
 * create the next segment (a full disk) is noticed while there is room. */
static uint64_t rotate_point(uint64_t nslots) {
  uint64_t data = nslots - 1;
  return data - data / 8;
}

static int push_seg(ap_journal *j, uint64_t first) {
  if (j->nsegs == j->segcap) {
    int nc = j->segcap ? 2 * j->segcap : 16;
    uint64_t *ns = o3m_realloc(j->segs, sizeof *ns * (size_t)nc);
    if (!ns) return O3M_ENOMEM;
    j->segs = ns;
    j->segcap = nc;
  }
  j->segs[j->nsegs++] = first;
  return O3M_OK;
}

/* Lists the segments into j->segs (sorted) and removes leftover .tmp files
 * of segments that were being created. */
static int list_segments(ap_journal *j, o3m_err *e) {
  int fd = dup(j->dirfd);
  DIR *dh = fd >= 0 ? fdopendir(fd) : NULL;
  if (!dh) {
    if (fd >= 0) close(fd);
    return o3m_err_set(e, O3M_EIO, "journal %s: cannot list: %s", j->dir, strerror(errno));
  }
  rewinddir(dh); /* the offset is shared with dirfd, a dup */
  struct dirent *de;
  int rc = O3M_OK;
  while (!rc && (de = readdir(dh))) {
    uint64_t first;
    size_t nl = strlen(de->d_name);
    if (!strncmp(de->d_name, "ap-journal-", 11) && nl > 8 &&
        !strcmp(de->d_name + nl - 8, ".wal.tmp")) {
      unlinkat(j->dirfd, de->d_name, 0);
      continue;
    }
    if (o3m_parse_seq_name(de->d_name, "ap-journal-", ".wal", &first)) rc = push_seg(j, first);
  }
  closedir(dh);
  if (rc) return o3m_err_set(e, rc, "journal %s: out of memory", j->dir);
  if (j->nsegs > 1) qsort(j->segs, (size_t)j->nsegs, sizeof *j->segs, cmp_u64);
  return O3M_OK;
}

/* ------------------------------------------------------------------ records */

/* Encodes a record of type `type` (r may be NULL for a close record, whose
 * seq is the next segment's first). */
static void encode_slot(const ap_journal *j, unsigned char *b, int type,
                        const ap_journal_record *r, uint64_t seq) {
  memset(b, 0, j->L);
  memcpy(b + REC_AT_MAGIC, REC_MAGIC, 4);
  b[REC_AT_VERSION] = (unsigned char)FORMAT_VERSION;
  b[REC_AT_TYPE] = (unsigned char)type;
  o3m_put_le32(b + REC_AT_LEN, (uint32_t)j->L);
  o3m_put_le32(b + REC_AT_D, (uint32_t)j->d);
  o3m_put_le64(b + REC_AT_SEQ, seq);
  if (r) {
    o3m_put_le64(b + REC_AT_DECISION, r->decision);
    o3m_put_le64(b + REC_AT_MASK_ID, r->mask_id);
    o3m_put_le32(b + REC_AT_ARM, (uint32_t)r->arm);
    o3m_put_le64(b + REC_AT_REWARD, o3m_double_bits(r->reward));
    if (r->x)
      for (int i = 0; i < j->d; i++)
        o3m_put_le64(b + REC_AT_X + 8 * (size_t)i, o3m_double_bits(r->x[i]));
  }
  o3m_put_le32(b + j->L - REC_TAIL_CRC, o3m_crc32c(0, b, j->L - REC_TAIL_CRC));
  memcpy(b + j->L - REC_TAIL_END, REC_END, 4);
}

/* What a slot holds (ap_journal.h, "What a crash can leave"). */
enum { SLOT_ZERO, SLOT_TORN, SLOT_BAD, SLOT_DATA, SLOT_CLOSE };

static int classify(const ap_journal *j, const unsigned char *b) {
  if (b[0] == 0 && !memcmp(b, b + 1, j->L - 1)) return SLOT_ZERO;
  if (o3m_get_le32(b) == 0 || o3m_get_le32(b + j->L - REC_TAIL_END) == 0) return SLOT_TORN;
  int v = b[REC_AT_VERSION], t = b[REC_AT_TYPE];
  int ok = !memcmp(b + REC_AT_MAGIC, REC_MAGIC, 4) && v >= (int)FORMAT_VERSION_OLDEST &&
           v <= (int)FORMAT_VERSION &&
           (t == AP_JOURNAL_REWARD || t == AP_JOURNAL_REFACTOR || t == TYPE_CLOSE ||
            (v >= 3 && (t == AP_JOURNAL_LOCAL || t == AP_JOURNAL_LOCAL_PAIRED))) &&
           o3m_get_le32(b + REC_AT_LEN) == (uint32_t)j->L && o3m_get_le32(b + REC_AT_D) == (uint32_t)j->d &&
           !memcmp(b + j->L - REC_TAIL_END, REC_END, 4) &&
           o3m_get_le32(b + j->L - REC_TAIL_CRC) == o3m_crc32c(0, b, j->L - REC_TAIL_CRC);
  if (!ok) return SLOT_BAD;
  return b[REC_AT_TYPE] == TYPE_CLOSE ? SLOT_CLOSE : SLOT_DATA;
}

static void decode_record(ap_journal *j, const unsigned char *b, ap_journal_record *r) {
  r->type = b[REC_AT_TYPE];
  r->seq = o3m_get_le64(b + REC_AT_SEQ);
  r->decision = o3m_get_le64(b + REC_AT_DECISION);
  r->mask_id = o3m_get_le64(b + REC_AT_MASK_ID);
  r->arm = (int)(int32_t)o3m_get_le32(b + REC_AT_ARM);
  r->reward = o3m_bits_double(o3m_get_le64(b + REC_AT_REWARD));
  for (int i = 0; i < j->d; i++) j->xbuf[i] = o3m_bits_double(o3m_get_le64(b + REC_AT_X + 8 * (size_t)i));
  r->x = j->xbuf;
}

/* Sequential reads of whole slots through j->buf. */
typedef struct slot_reader {
  int fd;
  uint64_t avail;  /* whole slots in the file */
  uint64_t lo, n;  /* slots lo..lo+n-1 are in j->buf */
} slot_reader;

static const unsigned char *slot_get(ap_journal *j, slot_reader *r, uint64_t k) {
  if (k < r->lo || k >= r->lo + r->n) {
    uint64_t n = r->avail - k, per = j->cap / j->L;
    if (n > per) n = per;
    r->n = 0;
    if (o3m_pread_full(r->fd, j->buf, (size_t)n * j->L, slot_off(j, k))) return NULL;
    r->lo = k;
    r->n = n;
  }
  return j->buf + (k - r->lo) * j->L;
}

/* ----------------------------------------------------------------- segments */

static void encode_seg_header(const ap_journal *j, unsigned char *h, uint64_t first) {
  o3m_file_hdr_begin(h, SEG_MAGIC, FORMAT_VERSION);
  o3m_put_le32(h + SEG_AT_D, (uint32_t)j->d);
  o3m_put_le64(h + SEG_AT_FIRST, first);
  o3m_put_le64(h + SEG_AT_WALL_MS, (uint64_t)wall_ms());
  o3m_put_le64(h + SEG_AT_NSLOTS, j->nslots);
  o3m_file_hdr_seal(h);
}

/* Gives file fd its full length as a sparse file: unwritten slots are a
 * hole and read as zeros. Not fallocate(2): ext4 reports preallocated
 * (unwritten) extents as data to SEEK_DATA, so every open would read the
 * whole unused part of a segment (64 MiB by default; measured: a restart
 * took 2-3 times as long), and on tmpfs preallocation takes memory. The
 * price: a full disk shows as a failed write (the journal fails and the AP
 * stops, as with appends) rather than as a failed rotation. */
static int set_length(int fd, uint64_t size) { return ftruncate(fd, (off_t)size); }

/* Creates segment `first` completely (temporary file at its full length,
 * header, fdatasync, rename, directory fsync) and returns its descriptor in
 * *fd. *renamed tells whether the new name became visible. */
static int create_segment(ap_journal *j, uint64_t first, int *fd, int *renamed, o3m_err *e) {
  char tmp[NAME_MAX_LEN], fin[NAME_MAX_LEN];
  seg_name(tmp, first, ".tmp");
  seg_name(fin, first, "");
  *renamed = 0;
  unsigned char h[HDR];
  encode_seg_header(j, h, first);
  int f = openat(j->dirfd, tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (f < 0)
    return o3m_err_set(e, O3M_EIO, "journal %s/%s: cannot create: %s", j->dir, tmp,
                       strerror(errno));
  if (set_length(f, slot_off(j, j->nslots)) || o3m_pwrite_full(f, h, HDR, 0) || fdatasync(f)) {
    int err = errno;
    close(f);
    unlinkat(j->dirfd, tmp, 0);
    return o3m_err_set(e, O3M_EIO, "journal %s/%s: cannot write a %" PRIu64 "-byte segment: %s",
                       j->dir, tmp, slot_off(j, j->nslots), strerror(err));
  }
  if (renameat(j->dirfd, tmp, j->dirfd, fin)) {
    int err = errno;
    close(f);
    unlinkat(j->dirfd, tmp, 0);
    return o3m_err_set(e, O3M_EIO, "journal %s/%s: cannot rename: %s", j->dir, fin,
                       strerror(err));
  }
  *renamed = 1;
  if (fsync(j->dirfd)) {
    int err = errno;
    close(f);
    return o3m_err_set(e, O3M_EIO, "journal %s: cannot fsync the directory: %s", j->dir,
                       strerror(err));
  }
  *fd = f;
  return O3M_OK;
}

/* Makes fd (segment `first`, N slots, the first `written` in use) the
 * current segment; takes ownership of fd. */
static void set_current(ap_journal *j, int fd, uint64_t first, uint64_t nslots,
                        uint64_t written) {
  /* The current segment is the last of the list, and its close slot is free. */
  O3M_ASSERT(j->nsegs > 0 && j->segs[j->nsegs - 1] == first && written < nslots);
  if (j->fd >= 0) close(j->fd);
  j->fd = fd;
  j->cur_first = first;
  j->cur_slots = nslots;
  j->cur_written = written;
  j->rotate_at = rotate_point(nslots);
}

/* Starts a new segment at `first` and makes it current (at open, where no
 * segment is current or the current one was set aside). */
static int start_segment(ap_journal *j, uint64_t first, o3m_err *e) {
  int fd = -1, renamed = 0;
  int rc = create_segment(j, first, &fd, &renamed, e);
  if (rc) return rc;
  if (j->nsegs && j->segs[j->nsegs - 1] == first) j->nsegs--; /* replaced by the new one */
  O3M_ASSERT(j->nsegs == 0 || j->segs[j->nsegs - 1] < first);
  if ((rc = push_seg(j, first))) {
    close(fd);
    return o3m_err_set(e, rc, "journal %s: out of memory", j->dir);
  }
  set_current(j, fd, first, j->nslots, 0);
  return O3M_OK;
}

/* Writes the close record "next seq = next" into slot k of fd and syncs it
 * (rotation step 3). Uses j->buf, which must be empty. */
static int write_close(ap_journal *j, int fd, uint64_t k, uint64_t next) {
  encode_slot(j, j->buf, TYPE_CLOSE, NULL, next);
  return o3m_pwrite_full(fd, j->buf, j->L, slot_off(j, k)) || fdatasync(fd) ? -1 : 0;
}

/* Rotation steps 2 and 3 (ap_journal.h); the records must be synced. */
static int switch_segment(ap_journal *j, o3m_err *e) {
  uint64_t next = j->last_seq + 1;
  int fd = -1, renamed = 0;
  int rc = create_segment(j, next, &fd, &renamed, e);
  if (rc) {
    /* Before the rename nothing changed and the old segment goes on; after
     * it the directory state is uncertain, so the journal stops. */
    if (renamed) j->failed = O3M_EIO;
    return rc;
  }
  O3M_ASSERT(j->nsegs > 0 && j->segs[j->nsegs - 1] < next); /* the list stays ascending */
  if ((rc = push_seg(j, next))) {
    close(fd);
    j->failed = O3M_EIO;
    return o3m_err_set(e, rc, "journal %s: out of memory", j->dir);
  }
  if (write_close(j, j->fd, j->cur_written, next)) {
    /* The new segment exists and the old one is not closed: what a crash
     * between the steps leaves, which recovery completes. */
    int err = errno;
    close(fd);
    j->failed = O3M_EIO;
    o3m_log_error("journal %s: cannot close segment %016" PRIx64 ": %s", j->dir, j->cur_first,
                  strerror(err));
    return o3m_err_set(e, O3M_EIO, "journal %s: cannot close segment %016" PRIx64 ": %s",
                       j->dir, j->cur_first, strerror(err));
  }
  set_current(j, fd, next, j->nslots, 0);
  return O3M_OK;
}

/* ------------------------------------------------------------------- scan */

/* What the scan found. */
typedef struct scan_state {
  int stop;          /* 1: damage or a lost segment at the point below */
  int torn;          /* 1: a torn last record at the point below (not damage) */
  int seg;           /* index into j->segs; -1: no segment concerned */
  uint64_t off;      /* byte offset of the first slot not recovered; 0: the whole segment */
  uint64_t seq;      /* the first seq not recovered */
  uint64_t nslots;   /* N of segment `seg` when off > 0 */
  char why[224];
  int cur;           /* a segment that ends unclosed (appends may go on there), or -1 */
  uint64_t cur_slot, cur_slots;
  int repair;        /* an unclosed segment with a successor (rotation step 3 missing), or -1 */
  uint64_t repair_slot;
} scan_state;

static void stop_at(scan_state *st, int seg, uint64_t off, uint64_t seq, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static void stop_at(scan_state *st, int seg, uint64_t off, uint64_t seq, const char *fmt, ...) {
  st->stop = 1;
  st->seg = seg;
  st->off = off;
  st->seq = seq;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(st->why, sizeof st->why, fmt, ap);
  va_end(ap);
}

/* Index of the first non-zero slot in from..r->avail-1, r->avail if none, or
 * UINT64_MAX on a read error. The unwritten part of a segment is mostly a
 * hole or unwritten extents, which read as zeros: SEEK_DATA skips them
 * instead of reading megabytes of zeros (where it is not supported, every
 * slot is read). */
static uint64_t first_nonzero(ap_journal *j, slot_reader *r, uint64_t from) {
  for (uint64_t k = from; k < r->avail; k++) {
    if (k < r->lo || k >= r->lo + r->n) {
      off_t d = lseek(r->fd, (off_t)slot_off(j, k), SEEK_DATA);
      if (d < 0 && errno == ENXIO) return r->avail;
      if (d > (off_t)slot_off(j, k)) {
        k = ((uint64_t)d - HDR) / j->L;
        if (k >= r->avail) return r->avail;
      }
    }
    const unsigned char *b = slot_get(j, r, k);
    if (!b) return UINT64_MAX;
    if (classify(j, b) != SLOT_ZERO) return k;
  }
  return r->avail;
}

/* Scans segment i from seq *next on (the first segment scanned may start
 * before it), replaying its records; sets st->stop or st->torn at the first
 * problem. Returns an error only for I/O, another d or format version, or
 * the callback's code. */
static int scan_segment(ap_journal *j, const ap_journal_options *opt, int i, uint64_t *next,
                        scan_state *st, ap_journal_info *info, o3m_err *e) {
  char name[NAME_MAX_LEN];
  seg_name(name, j->segs[i], "");
  int last = i == j->nsegs - 1;
  int fd = openat(j->dirfd, name, O_RDONLY | O_CLOEXEC);
  struct stat sb;
  if (fd < 0 || fstat(fd, &sb)) {
    int err = errno;
    if (fd >= 0) close(fd);
    return o3m_err_set(e, O3M_EIO, "journal %s/%s: cannot open: %s", j->dir, name,
                       strerror(err));
  }
  int rc = O3M_OK;
  uint64_t size = (uint64_t)sb.st_size, n = 0;
  unsigned char h[HDR];
  uint32_t version;
  if (size < HDR || o3m_pread_full(fd, h, HDR, 0) ||
      o3m_file_hdr_check(h, SEG_MAGIC, &version) != O3M_FILE_HDR_OK) {
    stop_at(st, i, 0, *next, "a damaged segment header");
    goto out;
  }
  if (version < FORMAT_VERSION_OLDEST || version > FORMAT_VERSION) {
    rc = o3m_err_set(e, O3M_EDIM, "journal %s/%s: format version %u, this build reads versions "
                     "%u..%u (a journal written by %s release of o3m: use that release, or "
                     "discard the state)", j->dir, name, (unsigned)version,
                     FORMAT_VERSION_OLDEST, FORMAT_VERSION,
                     version < FORMAT_VERSION ? "an earlier" : "a later");
    goto out;
  }
  if (o3m_get_le32(h + SEG_AT_D) != (uint32_t)j->d) {
    rc = o3m_err_set(e, O3M_EDIM, "journal %s/%s: written with d = %u, the policy has d = %d",
                     j->dir, name, (unsigned)o3m_get_le32(h + SEG_AT_D), j->d);
    goto out;
  }
  n = o3m_get_le64(h + SEG_AT_NSLOTS);
  if (o3m_get_le64(h + SEG_AT_FIRST) != j->segs[i] || n < 2 || n > (UINT64_MAX / 2 - HDR) / j->L) {
    stop_at(st, i, 0, *next, "a segment header that does not match its name or declares %" PRIu64
            " slots", n);
    goto out;
  }
  uint64_t expect = slot_off(j, n);
  slot_reader r = {fd, size >= expect ? n : (size - HDR) / j->L, 0, 0};
  uint64_t k = *next - j->segs[i];
  const unsigned char *b = NULL;
  if (k > 0) {
    /* The first segment scanned: records before *next are covered by the
     * caller's checkpoint. If it holds no record *next, the log must at
     * least reach *next - 1, or records (segments) after it are lost. */
    int here = 0;
    if (k < r.avail) {
      if (!(b = slot_get(j, &r, k))) goto read_error;
      here = classify(j, b) == SLOT_DATA;
    }
    if (!here) {
      b = NULL;
      if (k < n && k - 1 < r.avail && !(b = slot_get(j, &r, k - 1))) goto read_error;
      if (!b || classify(j, b) != SLOT_DATA || o3m_get_le64(b + REC_AT_SEQ) != *next - 1) {
        stop_at(st, i, 0, *next, "the journal ends before seq %" PRIu64 " (the checkpoint's "
                "position) in this segment: later records or segments are missing", *next - 1);
        goto out;
      }
    }
  }
  for (; k < r.avail; k++) {
    if (!(b = slot_get(j, &r, k))) goto read_error;
    if (classify(j, b) != SLOT_DATA) break;
    if (k == n - 1) {
      stop_at(st, i, slot_off(j, k), *next, "a record in the slot kept for the close record");
      goto out;
    }
    if (o3m_get_le64(b + REC_AT_SEQ) != *next) {
      stop_at(st, i, slot_off(j, k), *next, "a record out of sequence (seq %" PRIu64 ")",
              o3m_get_le64(b + REC_AT_SEQ));
      goto out;
    }
    ap_journal_record rec;
    decode_record(j, b, &rec);
    if (opt->replay && (rc = opt->replay(opt->replay_ctx, &rec))) goto out;
    info->replayed++;
    (*next)++;
  }
  if (k == r.avail) {
    /* No end in the slots the file holds: it was cut short. */
    stop_at(st, i, slot_off(j, k), *next, "a file of %" PRIu64 " bytes whose header declares %"
            PRIu64 " (cut short)", size, expect);
    goto out;
  }
  int kind = classify(j, b);
  if (kind == SLOT_BAD) {
    stop_at(st, i, slot_off(j, k), *next, "a damaged record (complete, bad CRC or header)");
    goto out;
  }
  if (kind == SLOT_CLOSE && o3m_get_le64(b + REC_AT_SEQ) != *next) {
    stop_at(st, i, slot_off(j, k), *next, "a close record naming seq %" PRIu64,
            o3m_get_le64(b + REC_AT_SEQ));
    goto out;
  }
  /* The end of this segment: every later slot must be unwritten. */
  uint64_t nz = first_nonzero(j, &r, k + 1);
  if (nz == UINT64_MAX) goto read_error;
  if (nz < r.avail) {
    stop_at(st, i, slot_off(j, k), *next, "data at offset %" PRIu64 " after the end of the "
            "segment's records", slot_off(j, nz));
    goto out;
  }
  if (size != expect) {
    stop_at(st, i, slot_off(j, k), *next, "a file of %" PRIu64 " bytes whose header declares %"
            PRIu64 " (%s)", size, expect, size < expect ? "cut short" : "grown");
    goto out;
  }
  if (kind == SLOT_TORN) {
    if (!last) {
      stop_at(st, i, slot_off(j, k), *next, "a torn record in a segment with a successor");
    } else {
      st->torn = 1;
      st->seg = i;
      st->off = slot_off(j, k);
      st->seq = *next;
      st->cur = i;
      st->cur_slot = k;
      st->cur_slots = n;
    }
  } else if (kind == SLOT_CLOSE) {
    if (last) {
      char succ[NAME_MAX_LEN];
      seg_name(succ, *next, "");
      stop_at(st, i, slot_off(j, k), *next, "a segment closed at seq %" PRIu64 " whose "
              "successor %s is missing", *next, succ);
    }
  } else if (last || i == j->nsegs - 2) {
    /* Unclosed: the end of the log, or a rotation interrupted before its
     * step 3 (only ever the segment before the last). */
    st->cur = i;
    st->cur_slot = k;
    st->cur_slots = n;
    if (!last) {
      st->repair = i;
      st->repair_slot = k;
    }
  } else {
    stop_at(st, i, slot_off(j, k), *next, "a segment that was never closed but has successors");
  }
out:
  if (st->stop && st->seg == i) st->nslots = n;
  close(fd);
  return rc;
read_error:
  close(fd);
  return o3m_err_set(e, O3M_EIO, "journal %s/%s: read error: %s", j->dir, name, strerror(errno));
}

/* Scans the whole journal from opt->after + 1 (see ap_journal.h). */
static int scan(ap_journal *j, const ap_journal_options *opt, uint64_t *next, scan_state *st,
                ap_journal_info *info, o3m_err *e) {
  if (j->nsegs == 0) {
    if (opt->after > 0)
      stop_at(st, -1, 0, *next, "no journal segment, although the checkpoint at seq %" PRIu64
              " proves that segment %016" PRIx64 " was made", opt->after, opt->after + 1);
    return O3M_OK;
  }
  int idx0 = -1;
  for (int i = 0; i < j->nsegs; i++)
    if (j->segs[i] <= *next) idx0 = i;
  if (idx0 < 0) {
    stop_at(st, 0, 0, *next, "records missing before the first segment");
    return O3M_OK;
  }
  for (int i = idx0; i < j->nsegs && !st->stop; i++) {
    if (i > idx0 && j->segs[i] != *next) {
      stop_at(st, i, 0, *next, "a gap or overlap between segments");
      break;
    }
    int rc = scan_segment(j, opt, i, next, st, info, e);
    if (rc) return rc;
  }
  return O3M_OK;
}

/* ------------------------------------------------------------ open repairs */

/* A name for setting `name` aside: name.dropped, or name.dropped.N if that
 * exists from an earlier salvage (never overwritten). */
static void aside_name(const ap_journal *j, const char *name, char *out) {
  snprintf(out, ASIDE_LEN, "%s.dropped", name);
  for (int n = 1; n < 1000 && faccessat(j->dirfd, out, F_OK, 0) == 0; n++)
    snprintf(out, ASIDE_LEN, "%s.dropped.%d", name, n);
}

/* End of the last non-zero byte of fd in [off, size), or off if none;
 * UINT64_MAX on a read error. */
static uint64_t data_end(ap_journal *j, int fd, uint64_t off, uint64_t size) {
  uint64_t end = off;
  while (off < size) {
    size_t n = size - off < j->cap ? (size_t)(size - off) : j->cap;
    if (o3m_pread_full(fd, j->buf, n, off)) return UINT64_MAX;
    for (size_t k = n; k > 0; k--)
      if (j->buf[k - 1]) {
        end = off + k;
        break;
      }
    off += n;
  }
  return end;
}

/* Copies bytes [off, end) of segment fd to a .dropped file (fsynced), then
 * zeroes them in place. */
static int set_bytes_aside(ap_journal *j, int fd, const char *name, uint64_t off, uint64_t end,
                           o3m_err *e) {
  char out[ASIDE_LEN];
  aside_name(j, name, out);
  int o = openat(j->dirfd, out, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (o < 0)
    return o3m_err_set(e, O3M_EIO, "journal %s/%s: cannot create: %s", j->dir, out,
                       strerror(errno));
  for (uint64_t p = off; p < end;) {
    size_t n = end - p < j->cap ? (size_t)(end - p) : j->cap;
    if (o3m_pread_full(fd, j->buf, n, p) || o3m_write_full(o, j->buf, n)) {
      int err = errno;
      close(o);
      return o3m_err_set(e, O3M_EIO, "journal %s/%s: cannot copy: %s", j->dir, out,
                         strerror(err));
    }
    p += n;
  }
  int bad = fsync(o);
  close(o);
  if (bad) return o3m_err_set(e, O3M_EIO, "journal %s/%s: cannot fsync", j->dir, out);
  memset(j->buf, 0, j->cap);
  for (uint64_t p = off; p < end;) {
    size_t n = end - p < j->cap ? (size_t)(end - p) : j->cap;
    if (o3m_pwrite_full(fd, j->buf, n, p))
      return o3m_err_set(e, O3M_EIO, "journal %s/%s: cannot zero: %s", j->dir, name,
                         strerror(errno));
    p += n;
  }
  return O3M_OK;
}

/* Salvage: moves everything from the stop point on aside (ap_journal.h). */
static int salvage(ap_journal *j, scan_state *st, ap_journal_info *info, o3m_err *e) {
  int from = st->seg < 0 ? j->nsegs : st->seg;
  for (int i = j->nsegs - 1; i >= from; i--) {
    char name[NAME_MAX_LEN], out[ASIDE_LEN];
    seg_name(name, j->segs[i], "");
    struct stat sb;
    uint64_t size = fstatat(j->dirfd, name, &sb, 0) ? 0 : (uint64_t)sb.st_size;
    if (i == st->seg && st->off >= HDR) {
      int fd = openat(j->dirfd, name, O_RDWR | O_CLOEXEC);
      if (fd < 0)
        return o3m_err_set(e, O3M_EIO, "journal %s/%s: cannot open: %s", j->dir, name,
                           strerror(errno));
      uint64_t full = slot_off(j, st->nslots), end = data_end(j, fd, st->off, size);
      int rc = end == UINT64_MAX
                   ? o3m_err_set(e, O3M_EIO, "journal %s/%s: read error", j->dir, name)
                   : set_bytes_aside(j, fd, name, st->off, end, e);
      int bad = size > full ? ftruncate(fd, (off_t)full) : size < full ? set_length(fd, full) : 0;
      if (!rc && (bad || fdatasync(fd)))
        rc = o3m_err_set(e, O3M_EIO, "journal %s/%s: cannot restore its length: %s", j->dir,
                         name, strerror(errno));
      close(fd);
      if (rc) return rc;
      info->dropped_bytes += end - st->off;
      st->cur = i;
      st->cur_slot = (st->off - HDR) / j->L;
      st->cur_slots = st->nslots;
      continue;
    }
    aside_name(j, name, out);
    if (renameat(j->dirfd, name, j->dirfd, out))
      return o3m_err_set(e, O3M_EIO, "journal %s/%s: cannot rename: %s", j->dir, name,
                         strerror(errno));
    info->dropped_bytes += size;
    j->nsegs--;
  }
  if (fsync(j->dirfd))
    return o3m_err_set(e, O3M_EIO, "journal %s: cannot fsync the directory", j->dir);
  return O3M_OK;
}

/* Zeroes the torn last record. A crash during its write leaves this shape
 * (then it was never acknowledged), but so does a disk that lost a synced
 * write of an acknowledged one (ap_journal.h): the warning says both. */
static int cut_torn(ap_journal *j, const scan_state *st, ap_journal_info *info, o3m_err *e) {
  char name[NAME_MAX_LEN];
  seg_name(name, j->segs[st->seg], "");
  int fd = openat(j->dirfd, name, O_RDWR | O_CLOEXEC);
  memset(j->buf, 0, j->L);
  if (fd < 0 || o3m_pwrite_full(fd, j->buf, j->L, st->off) || fdatasync(fd)) {
    int err = errno;
    if (fd >= 0) close(fd);
    return o3m_err_set(e, O3M_EIO, "journal %s/%s: cannot zero the torn record: %s", j->dir,
                       name, strerror(err));
  }
  close(fd);
  info->tail_bytes_cut = j->L;
  o3m_log_warn("journal %s/%s: zeroed a torn record at offset %" PRIu64 " (seq %" PRIu64 "): "
               "the last record is incomplete (its start or end marker is zero); a crash "
               "during its write leaves this, and then it was never acknowledged, but it may "
               "have been acknowledged if the disk lost a write", j->dir, name, st->off,
               st->seq);
  return O3M_OK;
}

/* Rotation step 3 that a crash prevented: closes segment st->repair. */
static int complete_rotation(ap_journal *j, const scan_state *st, ap_journal_info *info,
                             o3m_err *e) {
  char name[NAME_MAX_LEN];
  seg_name(name, j->segs[st->repair], "");
  int fd = openat(j->dirfd, name, O_RDWR | O_CLOEXEC);
  if (fd < 0 || write_close(j, fd, st->repair_slot, j->segs[st->repair + 1])) {
    int err = errno;
    if (fd >= 0) close(fd);
    return o3m_err_set(e, O3M_EIO, "journal %s/%s: cannot write its close record: %s", j->dir,
                       name, strerror(err));
  }
  close(fd);
  info->rotation_completed = 1;
  o3m_log_info("journal %s/%s: closed (a rotation was interrupted before it)", j->dir, name);
  return O3M_OK;
}

void ap_journal_close(ap_journal *j) {
  if (!j) return;
  if (j->fd >= 0 && !j->failed && (j->fill || j->synced_seq != j->last_seq)) {
    o3m_err e;
    o3m_err_clear(&e);
    if (ap_journal_sync(j, &e))
      o3m_log_error("journal %s: final sync failed: %s", j->dir, o3m_err_message(&e));
  }
  if (j->fd >= 0) close(j->fd);
  if (j->dirfd >= 0) close(j->dirfd);
  o3m_free(j->dir);
  o3m_free(j->buf);
  o3m_free(j->segs);
  o3m_free(j->xbuf);
  o3m_free(j);
}

int ap_journal_open(ap_journal **out, const ap_journal_options *opt, ap_journal_info *info_,
                    o3m_err *e) {
  *out = NULL;
  ap_journal_info tmp_info;
  ap_journal_info *info = info_ ? info_ : &tmp_info;
  memset(info, 0, sizeof *info);
  if (!opt->dir || opt->d < 1 || opt->d > O3M_MAX_DIM || opt->buffer_records < 1 ||
      opt->segment_bytes < HDR + 2 * AP_JOURNAL_RECORD_BYTES(opt->d))
    return o3m_err_set(e, O3M_EINVAL, "journal: options: dir must be set, d in 1..%d, "
                       "buffer_records >= 1, segment_bytes >= %d + 2 records", O3M_MAX_DIM, HDR);
  ap_journal *j = o3m_calloc(1, sizeof *j);
  if (!j) return o3m_err_set(e, O3M_ENOMEM, "journal: out of memory");
  j->fd = -1;
  j->dirfd = -1;
  j->d = opt->d;
  j->L = AP_JOURNAL_RECORD_BYTES(opt->d);
  j->nslots = (opt->segment_bytes - HDR) / j->L;
  j->cap = (size_t)opt->buffer_records * j->L;
  j->dir = o3m_strdup(opt->dir);
  j->buf = o3m_malloc(j->cap);
  j->xbuf = o3m_malloc(sizeof(double) * (size_t)opt->d);
  int rc = O3M_OK;
  if (!j->dir || !j->buf || !j->xbuf) {
    rc = o3m_err_set(e, O3M_ENOMEM, "journal: out of memory for a %zu-byte buffer", j->cap);
    goto fail;
  }
  j->dirfd = open(opt->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (j->dirfd < 0) {
    rc = o3m_err_set(e, O3M_EIO, "journal %s: cannot open the directory: %s", opt->dir,
                     strerror(errno));
    goto fail;
  }
  if ((rc = list_segments(j, e))) goto fail;
  if (opt->expect_segments && j->nsegs == 0) {
    rc = o3m_err_set(e, O3M_ENOTFOUND, "journal %s: no journal segment, although this directory "
                     "held a journal before", j->dir);
    goto fail;
  }

  uint64_t next = opt->after + 1;
  scan_state st = {.seg = -1, .cur = -1, .repair = -1};
  if ((rc = scan(j, opt, &next, &st, info, e))) goto fail;

  /* Nothing has been written so far. */
  char name[NAME_MAX_LEN] = "";
  if (st.seg >= 0) seg_name(name, j->segs[st.seg], "");
  if (st.stop && !opt->salvage) {
    rc = o3m_err_set(e, O3M_ECORRUPT, "journal %s%s%s: %s at offset %" PRIu64 " (seq %" PRIu64
                     "): refusing to start", j->dir, *name ? "/" : "", name, st.why, st.off,
                     st.seq);
    goto fail;
  }
  if (st.stop) {
    if ((rc = salvage(j, &st, info, e))) goto fail;
    info->salvaged = 1;
    info->salvage_seq = st.seq;
    o3m_log_error("journal %s%s%s: SALVAGE: %s at offset %" PRIu64 "; recovery stopped before "
                  "seq %" PRIu64 " and %" PRIu64 " bytes were set aside in *.dropped files",
                  j->dir, *name ? "/" : "", name, st.why, st.off, st.seq, info->dropped_bytes);
  } else if (st.torn && (rc = cut_torn(j, &st, info, e))) {
    goto fail;
  }
  if (st.repair >= 0 && st.repair < j->nsegs - 1 && (rc = complete_rotation(j, &st, info, e)))
    goto fail;

  j->last_seq = j->synced_seq = next - 1;
  if (st.cur >= 0 && st.cur == j->nsegs - 1) {
    char cur[NAME_MAX_LEN];
    seg_name(cur, j->segs[st.cur], "");
    int fd = openat(j->dirfd, cur, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
      rc = o3m_err_set(e, O3M_EIO, "journal %s/%s: cannot open: %s", j->dir, cur,
                       strerror(errno));
      goto fail;
    }
    set_current(j, fd, j->segs[st.cur], st.cur_slots, st.cur_slot);
  } else if ((rc = start_segment(j, next, e))) {
    goto fail;
  }
  info->last_seq = j->last_seq;
  info->segments = j->nsegs;
  *out = j;
  return O3M_OK;

fail:
  j->failed = rc; /* no final sync in close */
  ap_journal_close(j);
  return rc;
}

/* ------------------------------------------------------------------ writing */

static int flush(ap_journal *j) {
  if (j->fill == 0) return O3M_OK;
  if (o3m_pwrite_full(j->fd, j->buf, j->fill, slot_off(j, j->cur_written))) {
    o3m_log_error("journal %s: write failed: %s", j->dir, strerror(errno));
    j->failed = O3M_EIO;
    return O3M_EIO;
  }
  j->cur_written += j->fill / j->L;
  O3M_ASSERT(j->cur_written < j->cur_slots); /* the last slot is the close record's */
  j->fill = 0;
  return O3M_OK;
}

int ap_journal_append(ap_journal *j, const ap_journal_record *r, uint64_t *seq) {
  if (j->failed) return O3M_EIO;
  int local = r->type == AP_JOURNAL_LOCAL || r->type == AP_JOURNAL_LOCAL_PAIRED;
  if ((r->type != AP_JOURNAL_REWARD && r->type != AP_JOURNAL_REFACTOR && !local) ||
      ((r->type == AP_JOURNAL_REWARD || local) && !r->x))
    return O3M_EINVAL;
  if (j->cur_written + j->fill / j->L >= j->cur_slots - 1) {
    /* No free slot but the close record's: sync (which rotates when it
     * can), and if that did not make room, rotate or fail. */
    o3m_err re;
    o3m_err_clear(&re);
    int rc = ap_journal_sync(j, &re);
    if (!rc && j->cur_written + 1 >= j->cur_slots) rc = switch_segment(j, &re);
    if (rc && !j->failed) {
      /* The sync succeeded and the new segment failed before its rename
       * (no descriptor left, EMFILE; a full disk): nothing on disk changed,
       * so this record is refused and the next append tries again, rather
       * than stopping the journal for a cause that may pass (a connection
       * flood's EMFILE once stopped it for good). */
      o3m_log_warn("journal %s: segment full and no new one yet: %s; refusing the record, "
                   "retrying at the next one", j->dir, o3m_err_message(&re));
      return O3M_EUNAVAILABLE;
    }
    if (rc) {
      o3m_log_error("journal %s: segment full and no new one: %s", j->dir,
                    o3m_err_message(&re));
      j->failed = O3M_EIO;
      return O3M_EIO;
    }
  }
  if (j->fill + j->L > j->cap && flush(j)) return O3M_EIO;
  uint64_t s = j->last_seq + 1;
  encode_slot(j, j->buf + j->fill, r->type, r, s);
  j->fill += j->L;
  j->last_seq = s;
  if (seq) *seq = s;
  return O3M_OK;
}

int ap_journal_sync(ap_journal *j, o3m_err *e) {
  if (j->failed) return o3m_err_set(e, O3M_EIO, "journal %s: failed earlier", j->dir);
  if (j->fill == 0 && j->synced_seq == j->last_seq) return O3M_OK;
  if (flush(j)) return o3m_err_set(e, O3M_EIO, "journal %s: write failed", j->dir);
  if (fdatasync(j->fd)) {
    int err = errno;
    j->failed = O3M_EIO;
    o3m_log_error("journal %s: fdatasync failed: %s", j->dir, strerror(err));
    return o3m_err_set(e, O3M_EIO, "journal %s: fdatasync failed: %s", j->dir, strerror(err));
  }
  j->synced_seq = j->last_seq;
  if (j->cur_written >= j->rotate_at) {
    /* The records are durable whatever happens here. A segment that cannot
     * be created (a full disk) is not a reason to refuse the acknowledgement:
     * the current segment goes on while it has room and the rotation is
     * retried a little later. */
    o3m_err re;
    o3m_err_clear(&re);
    int rc = switch_segment(j, &re);
    if (rc && j->failed) return o3m_err_set(e, rc, "%s", o3m_err_message(&re));
    if (rc) {
      o3m_log_warn("journal %s: cannot start a new segment (%s); continuing in the current one",
                   j->dir, o3m_err_message(&re));
      j->rotate_at = j->cur_written + j->cur_slots / 64 + 1;
    }
  }
  return O3M_OK;
}

uint64_t ap_journal_last_seq(const ap_journal *j) { return j->last_seq; }
uint64_t ap_journal_synced_seq(const ap_journal *j) { return j->synced_seq; }
int ap_journal_segments(const ap_journal *j) { return j->nsegs; }
int ap_journal_failed(const ap_journal *j) { return j->failed ? O3M_EIO : O3M_OK; }

int ap_journal_rotate(ap_journal *j, o3m_err *e) {
  if (j->failed) return o3m_err_set(e, O3M_EIO, "journal %s: failed earlier", j->dir);
  if (j->fill || j->synced_seq != j->last_seq) {
    int rc = ap_journal_sync(j, e);
    if (rc) return rc;
  }
  if (j->cur_written == 0) return O3M_OK; /* no records yet: starts at last_seq + 1 */
  return switch_segment(j, e);
}

int ap_journal_prune(ap_journal *j, uint64_t upto, o3m_err *e) {
  int k = 0;
  while (k < j->nsegs - 1 && j->segs[k + 1] <= upto + 1) k++;
  if (k == 0) return O3M_OK;
  int rc = O3M_OK, done = 0;
  for (; done < k; done++) {
    char name[NAME_MAX_LEN];
    seg_name(name, j->segs[done], "");
    if (unlinkat(j->dirfd, name, 0) && errno != ENOENT) {
      rc = o3m_err_set(e, O3M_EIO, "journal %s/%s: cannot remove: %s", j->dir, name,
                       strerror(errno));
      break;
    }
  }
  memmove(j->segs, j->segs + done, sizeof *j->segs * (size_t)(j->nsegs - done));
  j->nsegs -= done;
  O3M_ASSERT(j->nsegs >= 1); /* the current segment is never pruned */
  if (fsync(j->dirfd) && !rc)
    rc = o3m_err_set(e, O3M_EIO, "journal %s: cannot fsync the directory", j->dir);
  return rc;
}
