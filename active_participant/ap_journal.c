/* ap_journal.c -- segmented write-ahead log with CRC32C records.
 *
 * The on-disk format and the recovery rules are in ap_journal.h. The
 * implementation keeps one open descriptor for the directory (every file
 * operation is relative to it, and it is what gets fsynced after a rename or
 * unlink), one for the current segment, the sorted list of the segments'
 * first seqs, and one buffer: the append buffer, which at open also serves
 * as the read buffer of the scan. Everything is allocated in
 * ap_journal_open(); appends and syncs allocate nothing (a rotation grows the
 * segment list only when it is full). */
#include "ap_journal.h"
#include "o3m_bytes.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "o3m_log.h"

#define SEG_MAGIC "O3MJSEG\0"
#define REC_MAGIC "O3MJ"
#define FORMAT_VERSION 1u
#define HDR AP_JOURNAL_SEGMENT_HEADER
#define NAME_MAX_LEN 64


/* ------------------------------------------------------------------ handle */

struct ap_journal {
  int dirfd;
  char *dir;              /* for messages */
  int d;
  size_t L;               /* record length */
  size_t seg_max;
  uint64_t rotate_at;     /* rotate at a sync past this size */
  int fd;                 /* current segment, -1 if none */
  uint64_t cur_first;     /* first seq of the current segment */
  uint64_t cur_bytes;     /* its size including the buffered bytes */
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

/* Reads exactly len bytes at off; -1 on error or end of file. */
static int pread_all(int fd, void *buf, size_t len, uint64_t off) {
  unsigned char *p = buf;
  while (len > 0) {
    ssize_t r = pread(fd, p, len, (off_t)off);
    if (r < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (r == 0) return -1;
    p += r;
    len -= (size_t)r;
    off += (uint64_t)r;
  }
  return 0;
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

static int push_seg(ap_journal *j, uint64_t first) {
  if (j->nsegs == j->segcap) {
    int nc = j->segcap ? 2 * j->segcap : 16;
    uint64_t *ns = realloc(j->segs, sizeof *ns * (size_t)nc);
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

static void encode_record(const ap_journal *j, unsigned char *b, const ap_journal_record *r,
                          uint64_t seq) {
  memset(b, 0, j->L);
  memcpy(b, REC_MAGIC, 4);
  b[4] = (unsigned char)FORMAT_VERSION;
  b[5] = (unsigned char)r->type;
  o3m_put_le32(b + 8, (uint32_t)j->L);
  o3m_put_le32(b + 12, (uint32_t)j->d);
  o3m_put_le64(b + 16, seq);
  o3m_put_le64(b + 24, r->decision);
  o3m_put_le64(b + 32, r->mask_id);
  o3m_put_le32(b + 40, (uint32_t)r->arm);
  o3m_put_le64(b + 48, o3m_double_bits(r->reward));
  if (r->x)
    for (int i = 0; i < j->d; i++) o3m_put_le64(b + 56 + 8 * (size_t)i, o3m_double_bits(r->x[i]));
  o3m_put_le32(b + j->L - 4, o3m_crc32c(0, b, j->L - 4));
}

/* 1 if b holds a structurally valid record with a correct CRC. */
static int record_ok(const ap_journal *j, const unsigned char *b) {
  return !memcmp(b, REC_MAGIC, 4) && b[4] == FORMAT_VERSION &&
         (b[5] == AP_JOURNAL_REWARD || b[5] == AP_JOURNAL_REFACTOR) &&
         o3m_get_le32(b + 8) == (uint32_t)j->L && o3m_get_le32(b + 12) == (uint32_t)j->d &&
         o3m_get_le32(b + j->L - 4) == o3m_crc32c(0, b, j->L - 4);
}

static void decode_record(ap_journal *j, const unsigned char *b, ap_journal_record *r) {
  r->type = b[5];
  r->seq = o3m_get_le64(b + 16);
  r->decision = o3m_get_le64(b + 24);
  r->mask_id = o3m_get_le64(b + 32);
  r->arm = (int)(int32_t)o3m_get_le32(b + 40);
  r->reward = o3m_bits_double(o3m_get_le64(b + 48));
  for (int i = 0; i < j->d; i++) j->xbuf[i] = o3m_bits_double(o3m_get_le64(b + 56 + 8 * (size_t)i));
  r->x = j->xbuf;
}

/* ----------------------------------------------------------------- segments */

static void encode_seg_header(const ap_journal *j, unsigned char *h, uint64_t first) {
  memset(h, 0, HDR);
  memcpy(h, SEG_MAGIC, 8);
  o3m_put_le32(h + 8, FORMAT_VERSION);
  o3m_put_le32(h + 12, (uint32_t)j->d);
  o3m_put_le64(h + 16, first);
  o3m_put_le64(h + 24, (uint64_t)wall_ms());
  o3m_put_le32(h + 60, o3m_crc32c(0, h, 60));
}

/* Creates segment `first` completely (temporary file, header, fdatasync,
 * rename, directory fsync) and returns its descriptor in *fd, positioned
 * after the header. *renamed tells whether the new name became visible. */
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
  if (o3m_write_full(f, h, HDR) || fdatasync(f)) {
    int err = errno;
    close(f);
    unlinkat(j->dirfd, tmp, 0);
    return o3m_err_set(e, O3M_EIO, "journal %s/%s: cannot write: %s", j->dir, tmp,
                       strerror(err));
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

/* Switches appends to a new segment starting at first. */
static int start_segment(ap_journal *j, uint64_t first, o3m_err *e) {
  int fd = -1, renamed = 0;
  int rc = create_segment(j, first, &fd, &renamed, e);
  if (rc) {
    /* Before the rename nothing changed and the old segment goes on; after
     * it the directory state is uncertain, so the journal stops. */
    if (renamed) j->failed = O3M_EIO;
    return rc;
  }
  if (j->nsegs && j->segs[j->nsegs - 1] == first) {
    j->nsegs--; /* replaced an empty segment of the same name */
  }
  rc = push_seg(j, first);
  if (rc) {
    close(fd);
    j->failed = O3M_EIO;
    return o3m_err_set(e, rc, "journal %s: out of memory", j->dir);
  }
  if (j->fd >= 0) close(j->fd);
  j->fd = fd;
  j->cur_first = first;
  j->cur_bytes = HDR;
  j->rotate_at = j->seg_max;
  return O3M_OK;
}

/* ------------------------------------------------------------------- scan */

/* 1 if any full record slot of segment fd at or after offset `from` (slot
 * aligned) is a valid record, 0 if none, -1 on a read error. */
static int any_valid_after(ap_journal *j, int fd, uint64_t from, uint64_t size) {
  size_t per = j->cap / j->L;
  while (from + j->L <= size) {
    uint64_t n = (size - from) / j->L;
    if (n > per) n = per;
    if (pread_all(fd, j->buf, (size_t)n * j->L, from)) return -1;
    for (uint64_t k = 0; k < n; k++)
      if (record_ok(j, j->buf + k * j->L)) return 1;
    from += n * j->L;
  }
  return 0;
}

/* Copies bytes [off, size) of segment `name` to name.dropped (fsynced). */
static int copy_aside(ap_journal *j, int fd, const char *name, uint64_t off, uint64_t size,
                      o3m_err *e) {
  char out[NAME_MAX_LEN + 16];
  snprintf(out, sizeof out, "%s.dropped", name);
  int o = openat(j->dirfd, out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (o < 0)
    return o3m_err_set(e, O3M_EIO, "journal %s/%s: cannot create: %s", j->dir, out,
                       strerror(errno));
  while (off < size) {
    size_t n = size - off < j->cap ? (size_t)(size - off) : j->cap;
    if (pread_all(fd, j->buf, n, off) || o3m_write_full(o, j->buf, n)) {
      int err = errno;
      close(o);
      return o3m_err_set(e, O3M_EIO, "journal %s/%s: cannot copy: %s", j->dir, out,
                         strerror(err));
    }
    off += n;
  }
  int bad = fsync(o);
  close(o);
  if (bad) return o3m_err_set(e, O3M_EIO, "journal %s/%s: cannot fsync", j->dir, out);
  return O3M_OK;
}

/* Where the replay stopped, and why. */
typedef struct stop_point {
  int seg;          /* index into j->segs, -1 if the replay ran to the end */
  uint64_t off;     /* byte offset in that segment; 0 = the whole segment */
  uint64_t seq;     /* the first seq not recovered */
  int middle;       /* 1: valid data follows (or a gap); 0: a tail */
  const char *why;
} stop_point;

/* Scans segments idx0.. from seq *next on, calling the replay callback.
 * Fills *sp with the first problem. *cur_fd and *cur_size describe the last
 * scanned segment when the scan reached its end (for appending), else
 * *cur_fd is -1. *behind is set when the journal ends before *next. */
static int scan(ap_journal *j, const ap_journal_options *opt, int idx0, uint64_t *next,
                stop_point *sp, int *cur_fd, uint64_t *cur_size, int *behind,
                ap_journal_info *info, o3m_err *e) {
  sp->seg = -1;
  *cur_fd = -1;
  *behind = 0;
  for (int i = idx0; i < j->nsegs; i++) {
    char name[NAME_MAX_LEN];
    seg_name(name, j->segs[i], "");
    int last = i == j->nsegs - 1;
    if (i > idx0 && j->segs[i] != *next) {
      *sp = (stop_point){i, 0, *next, 1, "a gap or overlap between segments"};
      return O3M_OK;
    }
    int fd = openat(j->dirfd, name, O_RDWR | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st)) {
      int err = errno;
      if (fd >= 0) close(fd);
      return o3m_err_set(e, O3M_EIO, "journal %s/%s: cannot open: %s", j->dir, name,
                         strerror(err));
    }
    uint64_t size = (uint64_t)st.st_size;
    unsigned char h[HDR];
    int hdr_ok = size >= HDR && !pread_all(fd, h, HDR, 0) && !memcmp(h, SEG_MAGIC, 8) &&
                 o3m_get_le32(h + 8) == FORMAT_VERSION &&
                 o3m_get_le32(h + 60) == o3m_crc32c(0, h, 60) &&
                 o3m_get_le64(h + 16) == j->segs[i];
    if (hdr_ok && o3m_get_le32(h + 12) != (uint32_t)j->d) {
      close(fd);
      return o3m_err_set(e, O3M_EDIM, "journal %s/%s: written with d = %u, the policy has "
                         "d = %d", j->dir, name, (unsigned)o3m_get_le32(h + 12), j->d);
    }
    if (!hdr_ok) {
      int after = last ? any_valid_after(j, fd, HDR, size) : 1;
      close(fd);
      if (after < 0)
        return o3m_err_set(e, O3M_EIO, "journal %s/%s: read error", j->dir, name);
      *sp = (stop_point){i, 0, *next, after != 0, "a damaged segment header"};
      return O3M_OK;
    }
    uint64_t off = HDR + (*next - j->segs[i]) * j->L;
    if (off > size) {
      /* The segment ends before *next (only possible for the first one
       * scanned: later ones start exactly at *next). */
      close(fd);
      if (last) {
        *behind = 1;
        return O3M_OK;
      }
      *sp = (stop_point){i + 1, 0, *next, 1, "records missing between segments"};
      return O3M_OK;
    }
    size_t per = j->cap / j->L;
    while (off < size) {
      uint64_t n = (size - off) / j->L;
      if (n == 0) { /* a partial record at the end */
        *sp = (stop_point){i, off, *next, !last, "a short record"};
        break;
      }
      if (n > per) n = per;
      if (pread_all(fd, j->buf, (size_t)n * j->L, off)) {
        close(fd);
        return o3m_err_set(e, O3M_EIO, "journal %s/%s: read error", j->dir, name);
      }
      uint64_t k = 0;
      for (; k < n; k++) {
        const unsigned char *b = j->buf + k * j->L;
        if (!record_ok(j, b)) break;
        if (o3m_get_le64(b + 16) != *next) {
          /* Valid data out of sequence is never a torn write. */
          *sp = (stop_point){i, off + k * j->L, *next, 1, "a record out of sequence"};
          break;
        }
        ap_journal_record r;
        decode_record(j, b, &r);
        if (opt->replay) {
          int rc = opt->replay(opt->replay_ctx, &r);
          if (rc) {
            close(fd);
            return rc;
          }
        }
        info->replayed++;
        (*next)++;
      }
      if (sp->seg >= 0) break;
      if (k < n) {
        uint64_t bad = off + k * j->L;
        int after = last ? any_valid_after(j, fd, bad + j->L, size) : 1;
        if (after < 0) {
          close(fd);
          return o3m_err_set(e, O3M_EIO, "journal %s/%s: read error", j->dir, name);
        }
        *sp = (stop_point){i, bad, *next, after != 0, "a bad record (CRC or header)"};
        break;
      }
      off += n * j->L;
    }
    if (sp->seg >= 0) {
      if (sp->seg == i && !sp->middle && last) {
        *cur_fd = fd; /* the tail will be cut and appends go on here */
        *cur_size = size;
      } else {
        close(fd);
      }
      return O3M_OK;
    }
    if (last) {
      *cur_fd = fd;
      *cur_size = size;
    } else {
      close(fd);
    }
  }
  return O3M_OK;
}

/* Salvage: moves everything from the stop point on aside. */
static int salvage(ap_journal *j, const stop_point *sp, int *cur_fd, uint64_t *cur_size,
                   ap_journal_info *info, o3m_err *e) {
  for (int i = j->nsegs - 1; i >= sp->seg; i--) {
    char name[NAME_MAX_LEN], out[NAME_MAX_LEN + 16];
    seg_name(name, j->segs[i], "");
    int fd = openat(j->dirfd, name, O_RDWR | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st)) {
      if (fd >= 0) close(fd);
      return o3m_err_set(e, O3M_EIO, "journal %s/%s: cannot open: %s", j->dir, name,
                         strerror(errno));
    }
    uint64_t size = (uint64_t)st.st_size;
    if (i == sp->seg && sp->off >= HDR) {
      int rc = copy_aside(j, fd, name, sp->off, size, e);
      if (!rc && (ftruncate(fd, (off_t)sp->off) || fdatasync(fd)))
        rc = o3m_err_set(e, O3M_EIO, "journal %s/%s: cannot truncate: %s", j->dir, name,
                         strerror(errno));
      if (rc) {
        close(fd);
        return rc;
      }
      info->dropped_bytes += size - sp->off;
      *cur_fd = fd;
      *cur_size = sp->off;
      continue;
    }
    close(fd);
    snprintf(out, sizeof out, "%s.dropped", name);
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
  free(j->dir);
  free(j->buf);
  free(j->segs);
  free(j->xbuf);
  free(j);
}

int ap_journal_open(ap_journal **out, const ap_journal_options *opt, ap_journal_info *info_,
                    o3m_err *e) {
  *out = NULL;
  ap_journal_info tmp_info;
  ap_journal_info *info = info_ ? info_ : &tmp_info;
  memset(info, 0, sizeof *info);
  if (!opt->dir || opt->d < 1 || opt->d > 4096 || opt->buffer_records < 1 ||
      opt->segment_bytes < HDR)
    return o3m_err_set(e, O3M_EINVAL, "journal: options: dir must be set, d in 1..4096, "
                       "buffer_records >= 1, segment_bytes >= %d", HDR);
  ap_journal *j = calloc(1, sizeof *j);
  if (!j) return o3m_err_set(e, O3M_ENOMEM, "journal: out of memory");
  j->fd = -1;
  j->dirfd = -1;
  j->d = opt->d;
  j->L = AP_JOURNAL_RECORD_BYTES(opt->d);
  j->seg_max = opt->segment_bytes;
  j->cap = (size_t)opt->buffer_records * j->L;
  j->dir = strdup(opt->dir);
  j->buf = malloc(j->cap);
  j->xbuf = malloc(sizeof(double) * (size_t)opt->d);
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

  uint64_t next = opt->after + 1;
  stop_point sp = {.seg = -1};
  int cur_fd = -1, behind = 0;
  uint64_t cur_size = 0;
  if (j->nsegs > 0) {
    int idx0 = -1;
    for (int i = 0; i < j->nsegs; i++)
      if (j->segs[i] <= next) idx0 = i;
    if (idx0 < 0)
      sp = (stop_point){0, 0, next, 1, "records missing before the first segment"};
    else if ((rc = scan(j, opt, idx0, &next, &sp, &cur_fd, &cur_size, &behind, info, e)))
      goto fail;
  }

  if (sp.seg >= 0 && !sp.middle) {
    /* A torn tail: cut it (or drop a last segment with a broken header). */
    char name[NAME_MAX_LEN];
    seg_name(name, j->segs[sp.seg], "");
    if (sp.off >= HDR) {
      if (ftruncate(cur_fd, (off_t)sp.off) || fdatasync(cur_fd)) {
        rc = o3m_err_set(e, O3M_EIO, "journal %s/%s: cannot truncate: %s", j->dir, name,
                         strerror(errno));
        goto fail_fd;
      }
      info->tail_bytes_cut = cur_size - sp.off;
      cur_size = sp.off;
    } else {
      struct stat st;
      info->tail_bytes_cut = fstatat(j->dirfd, name, &st, 0) ? 0 : (uint64_t)st.st_size;
      if (unlinkat(j->dirfd, name, 0) || fsync(j->dirfd)) {
        rc = o3m_err_set(e, O3M_EIO, "journal %s/%s: cannot remove: %s", j->dir, name,
                         strerror(errno));
        goto fail_fd;
      }
      j->nsegs--;
    }
    o3m_log_warn("journal %s/%s: cut a torn tail of %" PRIu64 " bytes at offset %" PRIu64
                 " (%s; records from seq %" PRIu64 " on were incomplete: dropped)", j->dir, name,
                 info->tail_bytes_cut, sp.off, sp.why, sp.seq);
  } else if (sp.seg >= 0) {
    char name[NAME_MAX_LEN];
    seg_name(name, j->segs[sp.seg], "");
    if (!opt->salvage) {
      rc = o3m_err_set(e, O3M_ECORRUPT, "journal %s/%s: %s at offset %" PRIu64 " (seq %" PRIu64
                       "), and valid records follow: refusing to start (salvage cuts the "
                       "journal there, losing what follows)", j->dir, name, sp.why, sp.off,
                       sp.seq);
      goto fail_fd;
    }
    if (cur_fd >= 0) close(cur_fd);
    cur_fd = -1;
    if ((rc = salvage(j, &sp, &cur_fd, &cur_size, info, e))) goto fail_fd;
    info->salvaged = 1;
    info->salvage_seq = sp.seq;
    o3m_log_error("journal %s/%s: SALVAGE: %s at offset %" PRIu64 "; recovery stopped before "
                  "seq %" PRIu64 " and %" PRIu64 " bytes were moved to *.dropped files",
                  j->dir, name, sp.why, sp.off, sp.seq, info->dropped_bytes);
  } else if (behind) {
    o3m_log_warn("journal %s: ends before seq %" PRIu64 " of the checkpoint; continuing with a "
                 "new segment", j->dir, next);
  }

  j->last_seq = j->synced_seq = next - 1;
  if (cur_fd >= 0) {
    j->fd = cur_fd;
    cur_fd = -1;
    j->cur_first = j->segs[j->nsegs - 1];
    j->cur_bytes = cur_size;
    j->rotate_at = j->seg_max;
    if (lseek(j->fd, (off_t)cur_size, SEEK_SET) < 0) {
      rc = o3m_err_set(e, O3M_EIO, "journal %s: seek failed: %s", j->dir, strerror(errno));
      goto fail;
    }
  } else if ((rc = start_segment(j, next, e))) {
    goto fail;
  }
  info->last_seq = j->last_seq;
  info->segments = j->nsegs;
  *out = j;
  return O3M_OK;

fail_fd:
  if (cur_fd >= 0) close(cur_fd);
fail:
  j->failed = rc; /* no final sync in close */
  ap_journal_close(j);
  return rc;
}

/* ------------------------------------------------------------------ writing */

static int flush(ap_journal *j) {
  if (j->fill == 0) return O3M_OK;
  if (o3m_write_full(j->fd, j->buf, j->fill)) {
    o3m_log_error("journal %s: write failed: %s", j->dir, strerror(errno));
    j->failed = O3M_EIO;
    return O3M_EIO;
  }
  j->cur_bytes += j->fill;
  j->fill = 0;
  return O3M_OK;
}

int ap_journal_append(ap_journal *j, const ap_journal_record *r, uint64_t *seq) {
  if (j->failed) return O3M_EIO;
  if ((r->type != AP_JOURNAL_REWARD && r->type != AP_JOURNAL_REFACTOR) ||
      (r->type == AP_JOURNAL_REWARD && !r->x))
    return O3M_EINVAL;
  if (j->fill + j->L > j->cap && flush(j)) return O3M_EIO;
  uint64_t s = j->last_seq + 1;
  encode_record(j, j->buf + j->fill, r, s);
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
  if (j->cur_bytes >= j->rotate_at) {
    /* The records are durable whatever happens here. A segment that cannot
     * be created (a full disk) is not a reason to refuse the acknowledgement:
     * the current segment goes on and the rotation is retried later. */
    o3m_err re;
    o3m_err_clear(&re);
    int rc = ap_journal_rotate(j, &re);
    if (rc && j->failed) return o3m_err_set(e, rc, "%s", o3m_err_message(&re));
    if (rc) {
      o3m_log_warn("journal %s: cannot start a new segment (%s); continuing in the current one",
                   j->dir, o3m_err_message(&re));
      j->rotate_at = j->cur_bytes + j->seg_max / 8 + 1;
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
  if (j->cur_first == j->last_seq + 1) return O3M_OK; /* no records yet */
  return start_segment(j, j->last_seq + 1, e);
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
  if (fsync(j->dirfd) && !rc)
    rc = o3m_err_set(e, O3M_EIO, "journal %s: cannot fsync the directory", j->dir);
  return rc;
}
