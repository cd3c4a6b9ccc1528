/* ap_checkpoint.c -- checkpoints of the policy state, recovery at start, and
 * the journaled reward path.
 *
 * Formats and rules are in ap_checkpoint.h. The handle holds the state
 * directory (descriptor and lock), the journal, the borrowed policy and one
 * I/O buffer for checkpoint files, all allocated in ap_checkpoint_open().
 * A checkpoint is streamed through the policy's save/load callbacks, so the
 * state is never copied whole; reading one takes two passes over the file,
 * the first only to verify the checksums, so that an image is interpreted
 * only once it is known to be intact (a flipped bit in the policy header
 * must read as corruption, never as a configuration mismatch). */
#include "ap_checkpoint.h"
#include "o3m_alloc.h"
#include "o3m_bytes.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "o3m_clock.h"
#include "o3m_log.h"

#define CK_MAGIC "O3MCKPT\0"
#define CK_END "O3MCKEND"
#define CK_VERSION 2u
/* Version 1 (the release before the local model) is read too: its layout
 * is version 2's with a local image of 0 bytes. */
#define CK_VERSION_OLDEST 1u
#define CK_HDR O3M_FILE_HDR
#define CK_TRAILER 16
/* Byte offsets of the header's fields (layout in ap_checkpoint.h), used by
 * both the writer and the reader; magic, version and CRC are framed and
 * checked by o3m_file_hdr (o3m_bytes.h). Then the trailer's, from the end of
 * the images. */
enum ck_field {
  CK_AT_MAGIC = O3M_FILE_HDR_AT_MAGIC,     /* 8 bytes, CK_MAGIC */
  CK_AT_VERSION = O3M_FILE_HDR_AT_VERSION, /* le32, CK_VERSION */
  CK_AT_HDR_LEN = 12,   /* le32, CK_HDR */
  CK_AT_SEQ = 16,       /* le64, journal sequence number covered */
  CK_AT_MASK_ID = 24,   /* le64 */
  CK_AT_STATE_LEN = 32, /* le64, bytes of policy state that follow */
  CK_AT_WALL_MS = 40,   /* le64, wall clock at write, informational */
  CK_AT_UPDATES = 48,   /* le64, policy updates, informational */
  CK_AT_LOCAL_LEN = 56, /* le32, bytes of the local model's image after it (v1: 0) */
  CK_AT_HDR_CRC = O3M_FILE_HDR_AT_CRC, /* le32, CRC32C of bytes 0..59 */
  CK_AT_DATA_CRC = 0,   /* trailer: le32, CRC32C of the policy state */
  CK_AT_END = 8         /* trailer: 8 bytes, CK_END */
};
#define IO_BYTES ((size_t)1 << 20)
#define NAME_LEN 64

struct ap_checkpoint {
  o3m_policy *p;
  ap_fallback *local;  /* the local model (opt.local), or NULL */
  double *xpad;        /* with local: a local record's x (d values, x^0 then zeros) */
  char *dir;
  int dirfd;
  int lockfd;
  uint64_t mask_id;
  ap_journal *j;       /* NULL exactly when the log is elsewhere (opt.external_log) */
  uint64_t ext_seq;    /* external_log: position of the last applied record */
  uint64_t every_records;
  /* Local part records (type 5) appended since the last checkpoint began:
   * they share their reward with the record after them, so every_records
   * counts rewards, as with one record per reward. */
  uint64_t paired;
  int64_t every_ms;
  uint64_t ckpt_seq;   /* position of the newest checkpoint (0: none) */
  int64_t ckpt_time;   /* monotonic ms when it was written or loaded */
  unsigned char *io;   /* IO_BYTES; the writer's while a job runs */
  /* The checkpoint writer (ap_checkpoint_start): the snapshot of the
   * policy state it writes, and the job. mu guards job, done, job_rc,
   * job_err and quit; the rest of a job (snap, job_seq, job_updates, io)
   * belongs to the writer from start until collect sees done. */
  unsigned char *snap;
  size_t snap_len;
  size_t snap_local;   /* of which the local model's image, at the end */
  pthread_t writer;
  int writer_started;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int job;             /* a snapshot was handed over and not yet collected */
  int done;            /* the writer finished it: job_rc, job_err */
  int quit;
  int job_rc;
  o3m_err job_err;
  uint64_t job_seq, job_updates;
};

void ap_checkpoint_options_default(ap_checkpoint_options *o) {
  memset(o, 0, sizeof *o);
  ap_journal_options jo;
  ap_journal_options_default(&jo);
  o->segment_bytes = jo.segment_bytes;
  o->group_records = jo.buffer_records;
  o->every_records = 10000;
  o->every_ms = 60000;
}

/* ------------------------------------------------------------------ helpers */


static int64_t wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void ck_name(char *out, uint64_t seq, const char *ext) {
  snprintf(out, NAME_LEN, "ap-ckpt-%016" PRIx64 "%s", seq, ext);
}

static int cmp_desc(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x > y ? -1 : x < y;
}

/* Lists the checkpoint positions in dirfd, newest first, into a malloc'ed
 * array (*out, *n; NULL and 0 when there are none). Removes leftover .tmp
 * checkpoints when clean_tmp is set. */
static int list_ckpts(int dirfd, int clean_tmp, uint64_t **out, int *n) {
  *out = NULL;
  *n = 0;
  int fd = dup(dirfd);
  DIR *dh = fd >= 0 ? fdopendir(fd) : NULL;
  if (!dh) {
    if (fd >= 0) close(fd);
    return O3M_EIO;
  }
  rewinddir(dh); /* the offset is shared with dirfd, a dup */
  uint64_t *a = NULL;
  int cap = 0, cnt = 0, rc = O3M_OK;
  struct dirent *de;
  while ((de = readdir(dh))) {
    uint64_t seq;
    size_t nl = strlen(de->d_name);
    if (clean_tmp && !strncmp(de->d_name, "ap-ckpt-", 8) && nl > 4 &&
        !strcmp(de->d_name + nl - 4, ".tmp")) {
      unlinkat(dirfd, de->d_name, 0);
      continue;
    }
    if (!o3m_parse_seq_name(de->d_name, "ap-ckpt-", ".ckpt", &seq)) continue;
    if (cnt == cap) {
      int nc = cap ? 2 * cap : 8;
      uint64_t *na = o3m_realloc(a, sizeof *a * (size_t)nc);
      if (!na) {
        rc = O3M_ENOMEM;
        break;
      }
      a = na;
      cap = nc;
    }
    a[cnt++] = seq;
  }
  closedir(dh);
  if (rc) {
    o3m_free(a);
    return rc;
  }
  if (cnt > 1) qsort(a, (size_t)cnt, sizeof *a, cmp_desc);
  *out = a;
  *n = cnt;
  return O3M_OK;
}

/* ---------------------------------------------------------- reading files */

/* The policy's source over a checkpoint file: reads the image sequentially
 * straight into the policy's arrays, never past the image's length. */
typedef struct file_source {
  int fd;
  uint64_t left;
} file_source;

static int file_read(void *ctx, void *buf, size_t len) {
  file_source *fs = ctx;
  if (len > fs->left) return O3M_ECORRUPT;
  if (o3m_read_full(fs->fd, buf, len)) return O3M_EIO;
  fs->left -= len;
  return O3M_OK;
}

/* Loads the local model's image (nloc bytes at fd's offset, already
 * checksummed) into c->local. The local model is not worth refusing to
 * start for: a checkpoint without one (version 1, or written with the
 * fallback off) or with one of another configuration leaves it fresh,
 * with a warning, and the journal after the checkpoint is still replayed
 * into it (ap_checkpoint.h). */
static void load_local(ap_checkpoint *c, int fd, const char *name, uint64_t nloc) {
  if (!c->local) return;
  o3m_policy *lp = ap_fallback_model(c->local);
  if (nloc == 0) {
    o3m_log_warn("checkpoint %s/%s holds no local model (written by an earlier release or "
                 "with fallback = none): the local model starts fresh and learns the rewards "
                 "journaled after it", c->dir, name);
    return;
  }
  file_source fs = {fd, nloc};
  o3m_err pe;
  o3m_err_clear(&pe);
  int rc = o3m_policy_state_load(lp, file_read, &fs, &pe);
  if (!rc && fs.left != 0)
    rc = o3m_err_set(&pe, O3M_ECORRUPT, "%" PRIu64 " bytes left over", fs.left);
  if (rc) {
    o3m_policy_reset(lp);
    o3m_log_warn("checkpoint %s/%s: its local model cannot be loaded (%s: %s; [policy] "
                 "local_lambda or the own columns changed?): the local model starts fresh and "
                 "learns the rewards journaled after it", c->dir, name, o3m_errname(rc),
                 o3m_err_message(&pe));
  }
}

/* Verifies checkpoint `seq` and, if it is intact, loads it into the policy.
 * O3M_ECORRUPT: the file is damaged or torn (the policy is untouched unless
 * the second pass failed, which the caller handles by a reset). O3M_EDIM:
 * intact, but from a differently configured policy. *mask gets its mask id. */
static int load_ckpt(ap_checkpoint *c, uint64_t seq, uint64_t *mask, o3m_err *e) {
  char name[NAME_LEN];
  ck_name(name, seq, ".ckpt");
  int fd = openat(c->dirfd, name, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return o3m_err_set(e, O3M_EIO, "checkpoint %s/%s: cannot open: %s", c->dir, name,
                       strerror(errno));
  int rc = O3M_OK;
  struct stat st;
  unsigned char h[CK_HDR], t[CK_TRAILER];
  if (fstat(fd, &st)) {
    rc = o3m_err_set(e, O3M_EIO, "checkpoint %s/%s: cannot stat", c->dir, name);
    goto out;
  }
  uint64_t size = (uint64_t)st.st_size;
  uint32_t version;
  if (size < CK_HDR + CK_TRAILER || o3m_read_full(fd, h, CK_HDR) ||
      o3m_file_hdr_check(h, CK_MAGIC, &version) != O3M_FILE_HDR_OK ||
      version < CK_VERSION_OLDEST || version > CK_VERSION ||
      o3m_get_le32(h + CK_AT_HDR_LEN) != CK_HDR) {
    rc = o3m_err_set(e, O3M_ECORRUPT, "checkpoint %s/%s: bad header", c->dir, name);
    goto out;
  }
  uint64_t nfed = o3m_get_le64(h + CK_AT_STATE_LEN), nloc = o3m_get_le32(h + CK_AT_LOCAL_LEN);
  uint64_t n = nfed + nloc;
  if (o3m_get_le64(h + CK_AT_SEQ) != seq || nfed > size || size != CK_HDR + n + CK_TRAILER) {
    rc = o3m_err_set(e, O3M_ECORRUPT, "checkpoint %s/%s: %" PRIu64 " bytes, header says %" PRIu64
                     " (torn or misnamed)", c->dir, name, size, CK_HDR + n + CK_TRAILER);
    goto out;
  }
  /* Pass 1: checksums only (of both images). */
  uint32_t crc = 0;
  for (uint64_t left = n; left > 0;) {
    size_t k = left < IO_BYTES ? (size_t)left : IO_BYTES;
    if (o3m_read_full(fd, c->io, k)) {
      rc = o3m_err_set(e, O3M_EIO, "checkpoint %s/%s: read error", c->dir, name);
      goto out;
    }
    crc = o3m_crc32c(crc, c->io, k);
    left -= k;
  }
  if (o3m_read_full(fd, t, CK_TRAILER) || o3m_get_le32(t + CK_AT_DATA_CRC) != crc || memcmp(t + CK_AT_END, CK_END, 8)) {
    rc = o3m_err_set(e, O3M_ECORRUPT, "checkpoint %s/%s: checksum mismatch", c->dir, name);
    goto out;
  }
  /* Pass 2: the image is intact; interpret it. */
  if (lseek(fd, CK_HDR, SEEK_SET) != CK_HDR) {
    rc = o3m_err_set(e, O3M_EIO, "checkpoint %s/%s: seek failed", c->dir, name);
    goto out;
  }
  file_source fs = {fd, nfed};
  o3m_err pe;
  o3m_err_clear(&pe);
  rc = o3m_policy_state_load(c->p, file_read, &fs, &pe);
  if (!rc && fs.left != 0)
    rc = o3m_err_set(&pe, O3M_ECORRUPT, "policy state: %" PRIu64 " bytes left over", fs.left);
  if (rc) {
    rc = o3m_err_set(e, rc, "checkpoint %s/%s: %s", c->dir, name, o3m_err_message(&pe));
    goto out;
  }
  load_local(c, fd, name, nloc);
  *mask = o3m_get_le64(h + CK_AT_MASK_ID);
out:
  close(fd);
  return rc;
}

/* ---------------------------------------------------------- writing files */

/* The policy's sink into a checkpoint file: buffered, with a running CRC. */
typedef struct file_sink {
  ap_checkpoint *c;
  int fd;
  size_t fill;
  uint32_t crc;
  uint64_t written;
} file_sink;

static int sink_flush(file_sink *s) {
  if (s->fill && o3m_write_full(s->fd, s->c->io, s->fill)) return O3M_EIO;
  s->fill = 0;
  return O3M_OK;
}

static int file_write(void *ctx, const void *buf, size_t len) {
  file_sink *s = ctx;
  s->crc = o3m_crc32c(s->crc, buf, len);
  s->written += len;
  if (s->fill + len <= IO_BYTES) {
    memcpy(s->c->io + s->fill, buf, len);
    s->fill += len;
    return O3M_OK;
  }
  if (sink_flush(s)) return O3M_EIO;
  if (len >= IO_BYTES) return o3m_write_full(s->fd, buf, len) ? O3M_EIO : O3M_OK;
  memcpy(s->c->io, buf, len);
  s->fill = len;
  return O3M_OK;
}

/* Writes ap-ckpt-<seq>.ckpt atomically from the snapshot c->snap (the
 * policy state image of updates updates). Runs on the writer thread, or on
 * the caller's while no job is in flight: it touches only the directory,
 * c->io and the snapshot. */
static int write_ckpt(ap_checkpoint *c, uint64_t seq, uint64_t updates, o3m_err *e) {
  char tmp[NAME_LEN], fin[NAME_LEN];
  ck_name(tmp, seq, ".tmp");
  ck_name(fin, seq, ".ckpt");
  size_t n = c->snap_len;
  unsigned char h[CK_HDR], t[CK_TRAILER];
  /* The local model's image is small (d0 x d0 per model) and le32 is
   * plenty; the federated one keeps its le64. */
  o3m_file_hdr_begin(h, CK_MAGIC, CK_VERSION);
  o3m_put_le32(h + CK_AT_HDR_LEN, CK_HDR);
  o3m_put_le64(h + CK_AT_SEQ, seq);
  o3m_put_le64(h + CK_AT_MASK_ID, c->mask_id);
  o3m_put_le64(h + CK_AT_STATE_LEN, (uint64_t)(n - c->snap_local));
  o3m_put_le32(h + CK_AT_LOCAL_LEN, (uint32_t)c->snap_local);
  o3m_put_le64(h + CK_AT_WALL_MS, (uint64_t)wall_ms());
  o3m_put_le64(h + CK_AT_UPDATES, updates);
  o3m_file_hdr_seal(h);
  int fd = openat(c->dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0)
    return o3m_err_set(e, O3M_EIO, "checkpoint %s/%s: cannot create: %s", c->dir, tmp,
                       strerror(errno));
  file_sink s = {c, fd, 0, 0, 0};
  int rc = o3m_write_full(fd, h, CK_HDR) ? O3M_EIO : O3M_OK;
  if (!rc) rc = file_write(&s, c->snap, n);
  if (!rc) rc = sink_flush(&s);
  if (!rc) {
    memset(t, 0, sizeof t);
    o3m_put_le32(t + CK_AT_DATA_CRC, s.crc);
    memcpy(t + CK_AT_END, CK_END, 8);
    if (s.written != n || o3m_write_full(fd, t, CK_TRAILER) || fsync(fd)) rc = O3M_EIO;
  }
  int err = errno;
  if (close(fd) && !rc) rc = O3M_EIO;
  if (rc) {
    unlinkat(c->dirfd, tmp, 0);
    return o3m_err_set(e, rc, "checkpoint %s/%s: write failed: %s", c->dir, tmp, strerror(err));
  }
  if (renameat(c->dirfd, tmp, c->dirfd, fin)) {
    err = errno;
    unlinkat(c->dirfd, tmp, 0);
    return o3m_err_set(e, O3M_EIO, "checkpoint %s/%s: cannot rename: %s", c->dir, fin,
                       strerror(err));
  }
  if (fsync(c->dirfd))
    return o3m_err_set(e, O3M_EIO, "checkpoint %s: cannot fsync the directory: %s", c->dir,
                       strerror(errno));
  return O3M_OK;
}

/* The writer thread: writes each snapshot it is handed, off the serving
 * thread, and reports the result for ap_checkpoint_collect. */
static void *writer_main(void *arg) {
  ap_checkpoint *c = arg;
  pthread_mutex_lock(&c->mu);
  for (;;) {
    while (!c->quit && !(c->job && !c->done)) pthread_cond_wait(&c->cv, &c->mu);
    if (c->quit) break;
    pthread_mutex_unlock(&c->mu);
    o3m_err e;
    o3m_err_clear(&e);
    int rc = write_ckpt(c, c->job_seq, c->job_updates, &e);
    pthread_mutex_lock(&c->mu);
    c->job_rc = rc;
    c->job_err = e;
    c->done = 1;
    pthread_cond_broadcast(&c->cv);
  }
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

/* ------------------------------------------------------------------ replay */

typedef struct replay_ctx {
  o3m_policy *p;
  ap_fallback *local;  /* NULL: local records are skipped */
  double *held;        /* a type 5 record's x^0 waiting for its type 1 (d values) */
  uint64_t held_decision; /* 0: none held */
  int held_arm;
  double held_reward;
  uint64_t mask_id;
  uint64_t found_mask;
  uint64_t bad_seq;
  uint64_t refactors, update_errors, local_applied, local_dropped;
} replay_ctx;

/* Applies one journal record exactly as the live service did: a reward
 * through o3m_policy_update, a repair through o3m_policy_refactor. A failed
 * update failed live as well (the record is written before the update), and
 * left the same state, so it is counted and the replay goes on. */
static int replay_one(void *ctx, const ap_journal_record *r) {
  replay_ctx *x = ctx;
  if (r->mask_id != x->mask_id) {
    x->found_mask = r->mask_id;
    x->bad_seq = r->seq;
    return O3M_EMASK;
  }
  int rc = 0;
  if (r->type == AP_JOURNAL_LOCAL_PAIRED) {
    /* Held until its federated record: the live service applied the two
     * together, after both were appended, or neither. */
    if (x->held_decision) x->local_dropped++;
    x->held_decision = r->decision;
    x->held_arm = r->arm;
    x->held_reward = r->reward;
    memcpy(x->held, r->x, sizeof(double) * (size_t)o3m_policy_config_of(x->p)->d);
    return O3M_OK;
  }
  int paired = x->held_decision && r->type == AP_JOURNAL_REWARD && r->decision == x->held_decision;
  if (x->held_decision && !paired) x->local_dropped++;
  x->held_decision = 0;
  if (x->local && (r->type == AP_JOURNAL_LOCAL || paired)) {
    /* The local model skips what it could not take, as live (ap_fallback.h). */
    const double *x0 = paired ? x->held : r->x;
    double reward = paired ? x->held_reward : r->reward;
    x->local_applied += (uint64_t)ap_fallback_update(x->local, paired ? x->held_arm : r->arm,
                                                     x0, reward);
  }
  if (r->type == AP_JOURNAL_LOCAL) return O3M_OK;
  if (r->type == AP_JOURNAL_REWARD) {
    rc = o3m_policy_update(x->p, r->arm, r->x, r->reward);
  } else {
    rc = o3m_policy_refactor(x->p, r->arm);
    x->refactors++;
  }
  if (rc) x->update_errors++;
  return O3M_OK;
}

/* ------------------------------------------------------------------ open */

static int take_lock(const char *dir, int dirfd, int *lockfd, o3m_err *e) {
  int fd = openat(dirfd, "ap.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0)
    return o3m_err_set(e, O3M_EIO, "state_dir %s: cannot open ap.lock: %s", dir,
                       strerror(errno));
  if (flock(fd, LOCK_EX | LOCK_NB)) {
    int err = errno;
    close(fd);
    if (err == EWOULDBLOCK)
      return o3m_err_set(e, O3M_ESTATE, "state_dir %s is in use by another process (ap.lock)",
                         dir);
    return o3m_err_set(e, O3M_EIO, "state_dir %s: cannot lock ap.lock: %s", dir,
                       strerror(err));
  }
  *lockfd = fd;
  return O3M_OK;
}

void ap_checkpoint_close(ap_checkpoint *c) {
  if (!c) return;
  if (c->writer_started) {
    pthread_mutex_lock(&c->mu);
    c->quit = 1; /* after the job in flight, if any */
    while (c->job && !c->done) pthread_cond_wait(&c->cv, &c->mu);
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->writer, NULL);
  }
  pthread_cond_destroy(&c->cv);
  pthread_mutex_destroy(&c->mu);
  o3m_free(c->snap);
  ap_journal_close(c->j);
  if (c->lockfd >= 0) close(c->lockfd); /* releases the flock */
  if (c->dirfd >= 0) close(c->dirfd);
  o3m_free(c->io);
  o3m_free(c->xpad);
  o3m_free(c->dir);
  o3m_free(c);
}

int ap_checkpoint_open(ap_checkpoint **out, o3m_policy *p, const ap_checkpoint_options *opt,
                       ap_recovery_info *info_, o3m_err *e) {
  *out = NULL;
  ap_recovery_info tmp_info;
  ap_recovery_info *info = info_ ? info_ : &tmp_info;
  memset(info, 0, sizeof *info);
  if (!opt->state_dir || !*opt->state_dir || opt->group_records < 1 || opt->every_ms < 0)
    return o3m_err_set(e, O3M_EINVAL, "checkpoint: options: state_dir must be set, "
                       "group_records >= 1, every_ms >= 0");
  ap_checkpoint *c = o3m_calloc(1, sizeof *c);
  if (!c) return o3m_err_set(e, O3M_ENOMEM, "checkpoint: out of memory");
  c->p = p;
  c->local = opt->local;
  c->dirfd = c->lockfd = -1;
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->cv, NULL);
  c->mask_id = opt->mask_id;
  c->every_records = opt->every_records;
  c->every_ms = opt->every_ms;
  c->dir = o3m_strdup(opt->state_dir);
  c->io = o3m_malloc(IO_BYTES);
  const int d = o3m_policy_config_of(p)->d;
  c->xpad = o3m_calloc((size_t)d, sizeof *c->xpad);
  uint64_t *seqs = NULL;
  int nseq = 0, rc;
  if (c->local && o3m_policy_config_of(ap_fallback_model(c->local))->d > d) {
    rc = o3m_err_set(e, O3M_EINVAL, "checkpoint: the local model's d (%d) exceeds the "
                     "federated d (%d)", o3m_policy_config_of(ap_fallback_model(c->local))->d, d);
    goto fail;
  }
  if (!c->dir || !c->io || !c->xpad) {
    rc = o3m_err_set(e, O3M_ENOMEM, "checkpoint: out of memory");
    goto fail;
  }
  if ((rc = o3m_state_dir_open(c->dir, &c->dirfd, e)) ||
      (rc = take_lock(c->dir, c->dirfd, &c->lockfd, e)))
    goto fail;
  if ((rc = list_ckpts(c->dirfd, 1, &seqs, &nseq))) {
    rc = o3m_err_set(e, rc, "state_dir %s: cannot list the checkpoints", c->dir);
    goto fail;
  }
  if ((rc = o3m_policy_reset(p)) || (c->local && (rc = o3m_policy_reset(ap_fallback_model(c->local))))) {
    rc = o3m_err_set(e, rc, "checkpoint: cannot reset the policy");
    goto fail;
  }

  /* The newest valid checkpoint. */
  uint64_t pos = 0, mask = 0;
  int loaded = 0;
  for (int i = 0; i < nseq && !loaded; i++) {
    o3m_err le;
    o3m_err_clear(&le);
    rc = load_ckpt(c, seqs[i], &mask, &le);
    if (!rc) {
      loaded = 1;
      pos = seqs[i];
      break;
    }
    o3m_policy_reset(p);
    if (c->local) o3m_policy_reset(ap_fallback_model(c->local));
    if (rc != O3M_ECORRUPT) {
      rc = o3m_err_set(e, rc, "%s", o3m_err_message(&le));
      goto fail;
    }
    char name[NAME_LEN], bad[NAME_LEN + 16];
    ck_name(name, seqs[i], ".ckpt");
    snprintf(bad, sizeof bad, "%s.corrupt", name);
    o3m_log_warn("%s; renamed to %s, falling back to an older checkpoint",
                 o3m_err_message(&le), bad);
    if (renameat(c->dirfd, name, c->dirfd, bad) || fsync(c->dirfd)) {
      rc = o3m_err_set(e, O3M_EIO, "checkpoint %s/%s: cannot set aside: %s", c->dir, name,
                       strerror(errno));
      goto fail;
    }
    info->checkpoints_rejected++;
  }
  if (loaded && mask != c->mask_id) {
    info->found_mask_id = mask;
    rc = o3m_err_set(e, O3M_EMASK, "state_dir %s: the checkpoint at seq %" PRIu64 " was learned "
                     "under mask %016" PRIx64 ", the current block is %016" PRIx64 ": refusing to "
                     "combine them (discard the old state explicitly to start fresh)", c->dir,
                     pos, mask, c->mask_id);
    goto fail;
  }
  info->checkpoint_seq = pos;
  if (opt->external_log) {
    /* The records after pos are in the external log; the caller applies
     * them (ap_checkpoint_set_position). */
    c->ext_seq = info->last_seq = pos;
    c->ckpt_seq = pos;
    c->ckpt_time = o3m_clock_ms();
    o3m_free(seqs);
    o3m_log_info("state_dir %s: loaded %" PRIu64 " updates from the snapshot at log position %"
                 PRIu64 " (%d rejected)", c->dir, o3m_policy_updates(p), pos,
                 info->checkpoints_rejected);
    *out = c;
    return O3M_OK;
  }

  /* Replay the journal after it. */
  ap_journal_options jo;
  ap_journal_options_default(&jo);
  jo.dir = c->dir;
  jo.d = o3m_policy_config_of(p)->d;
  jo.after = pos;
  jo.salvage = opt->salvage;
  jo.expect_segments = !loaded && (opt->had_state || info->checkpoints_rejected > 0);
  if (opt->segment_bytes) jo.segment_bytes = opt->segment_bytes;
  jo.buffer_records = opt->group_records;
  /* The held record's x^0 borrows xpad: nothing is appended during replay. */
  replay_ctx rx = {.p = p, .local = c->local, .held = c->xpad, .mask_id = c->mask_id};
  jo.replay = replay_one;
  jo.replay_ctx = &rx;
  ap_journal_info ji;
  rc = ap_journal_open(&c->j, &jo, &ji, e);
  if (rc == O3M_EMASK) {
    info->found_mask_id = rx.found_mask;
    rc = o3m_err_set(e, O3M_EMASK, "state_dir %s: journal record %" PRIu64 " was learned under "
                     "mask %016" PRIx64 ", the current block is %016" PRIx64 ": refusing to "
                     "combine them (discard the old state explicitly to start fresh)", c->dir,
                     rx.bad_seq, rx.found_mask, c->mask_id);
  }
  if (rc == O3M_ENOTFOUND)
    rc = o3m_err_set(e, O3M_ENOTFOUND, "state_dir %s held %s from an earlier run but neither a "
                     "valid checkpoint nor a journal segment: the model learned there is gone "
                     "(deleted or lost); refusing to start a fresh model over it", c->dir,
                     info->checkpoints_rejected ? "checkpoints" : "this party's block");
  if (rc) goto fail;
  info->replayed = ji.replayed;
  info->refactors = rx.refactors;
  info->update_errors = rx.update_errors;
  info->local_replayed = rx.local_applied;
  /* A local part still held at the end: its federated record was never
   * written (a crash between the two appends), and so never acknowledged. */
  info->local_dropped = rx.local_dropped + (rx.held_decision != 0);
  info->last_seq = ji.last_seq;
  info->tail_bytes_cut = ji.tail_bytes_cut;
  info->salvaged = ji.salvaged;
  info->salvage_seq = ji.salvage_seq;
  c->ckpt_seq = pos;
  c->ckpt_time = o3m_clock_ms();
  o3m_free(seqs);
  if (c->local)
    o3m_log_info("state_dir %s: the local model has %" PRIu64 " updates (%" PRIu64 " replayed "
                 "from the journal, %" PRIu64 " unpaired local parts dropped)", c->dir,
                 o3m_policy_updates(ap_fallback_model(c->local)), info->local_replayed,
                 info->local_dropped);
  o3m_log_info("state_dir %s: recovered %" PRIu64 " updates: checkpoint seq %" PRIu64
               " (%d rejected), %" PRIu64 " journal records replayed (%" PRIu64 " refactors, %"
               PRIu64 " failed updates), journal at seq %" PRIu64 ", %" PRIu64 " tail bytes cut%s",
               c->dir, o3m_policy_updates(p), pos, info->checkpoints_rejected, info->replayed,
               info->refactors, info->update_errors, info->last_seq, info->tail_bytes_cut,
               info->salvaged ? ", SALVAGED" : "");
  *out = c;
  return O3M_OK;

fail:
  o3m_free(seqs);
  o3m_policy_reset(p);
  if (c->local) o3m_policy_reset(ap_fallback_model(c->local));
  ap_checkpoint_close(c);
  return rc;
}

/* ----------------------------------------------------------- reward path */

/* Appends a local record (type 4 or 5) of x^0, padded to the journal's d. */
static int append_local(ap_checkpoint *c, int type, uint64_t decision, int arm,
                        const double *x0, double reward) {
  int d0 = o3m_policy_config_of(ap_fallback_model(c->local))->d;
  memcpy(c->xpad, x0, sizeof(double) * (size_t)d0);
  ap_journal_record r = {.type = type, .decision = decision, .mask_id = c->mask_id,
                         .arm = arm, .reward = reward, .x = c->xpad};
  return ap_journal_append(c->j, &r, NULL);
}

int ap_checkpoint_apply_reward(ap_checkpoint *c, uint64_t decision, int arm, const double *x,
                               const double *x0, double reward) {
  /* Refused before the journal: a record is written only for an update the
   * model can take, so replay never meets a poisoned one. */
  int rc = o3m_policy_update_check(c->p, arm, x, reward, NULL);
  if (rc) return rc;
  /* The local part goes first and only if the local model can take it; a
   * replay holds it until the federated record, so that a crash between
   * the two appends (or a refused second append) applies neither. */
  int local = x0 && c->local &&
              o3m_policy_update_check(ap_fallback_model(c->local), arm, x0, reward, NULL) == 0;
  if (local && (rc = append_local(c, AP_JOURNAL_LOCAL_PAIRED, decision, arm, x0, reward)))
    return rc;
  c->paired += local;
  ap_journal_record r = {.type = AP_JOURNAL_REWARD, .decision = decision,
                         .mask_id = c->mask_id, .arm = arm, .reward = reward, .x = x};
  rc = ap_journal_append(c->j, &r, NULL);
  if (rc) return rc;
  /* Counted as skipped when the check above failed, as in a replay. */
  if (x0 && c->local) ap_fallback_update(c->local, arm, x0, reward);
  return o3m_policy_update(c->p, arm, x, reward);
}

int ap_checkpoint_apply_local(ap_checkpoint *c, uint64_t decision, int arm, const double *x0,
                              double reward) {
  if (!c->local) return O3M_EINVAL;
  int rc = o3m_policy_update_check(ap_fallback_model(c->local), arm, x0, reward, NULL);
  if (rc) {
    ap_fallback_update(c->local, arm, x0, reward); /* counts the skip */
    return O3M_OK;
  }
  if ((rc = append_local(c, AP_JOURNAL_LOCAL, decision, arm, x0, reward))) return rc;
  ap_fallback_update(c->local, arm, x0, reward);
  return O3M_OK;
}

int ap_checkpoint_sync(ap_checkpoint *c, o3m_err *e) { return ap_journal_sync(c->j, e); }

ap_journal *ap_checkpoint_journal(ap_checkpoint *c) { return c->j; }

void ap_checkpoint_set_position(ap_checkpoint *c, uint64_t seq) { c->ext_seq = seq; }

uint64_t ap_checkpoint_records_since(const ap_checkpoint *c) {
  if (!c->j) return c->ext_seq - c->ckpt_seq;
  return ap_journal_last_seq(c->j) - c->ckpt_seq;
}

int ap_checkpoint_due(const ap_checkpoint *c) {
  if (c->job) return 0; /* read on the serving thread, which alone sets it */
  uint64_t n = ap_checkpoint_records_since(c);
  if (c->every_records && n - (n >= c->paired ? c->paired : n) >= c->every_records) return 1;
  return c->every_ms && n > 0 && o3m_clock_ms() - c->ckpt_time >= c->every_ms;
}

int ap_checkpoint_health(ap_checkpoint *c, int flags, o3m_policy_health *h_, o3m_err *e) {
  o3m_policy_health h;
  int rc = o3m_policy_health_check(c->p, flags, &h);
  if (h_) *h_ = h;
  if (rc == O3M_OK) return O3M_OK;
  if (rc == O3M_ENOMEM) return o3m_err_set(e, rc, "health check: out of memory");
  if (rc == O3M_ECORRUPT)
    return o3m_err_set(e, rc, "model %d: %s: the exact statistics are damaged; stop and "
                       "recover from the checkpoint and journal", h.model, h.what);
  if (!c->j) {
    /* Replicas must stay bit-identical: a repair made by one replica alone
     * would make it differ, so it is only reported. */
    o3m_log_warn("numerical health: %d model(s) bad, first %d: %s (residual %.3g); not "
                 "repaired (replicated log)", h.n_bad, h.model, h.what, h.max_residual);
    return O3M_OK;
  }
  /* Repairable: journal the repair first, so that a replay repeats it. */
  ap_journal_record r = {.type = AP_JOURNAL_REFACTOR, .mask_id = c->mask_id, .arm = -1};
  if ((rc = ap_journal_append(c->j, &r, NULL)))
    return o3m_err_set(e, rc, "health repair: %s",
                       rc == O3M_EUNAVAILABLE
                           ? "the journal cannot start a new segment now (nothing changed; "
                             "retried with the next checkpoint)"
                           : "the journal has failed");
  rc = o3m_policy_refactor(c->p, -1);
  int src = ap_journal_sync(c->j, e);
  if (rc)
    return o3m_err_set(e, O3M_ECORRUPT, "model %d: %s; refactorization from Lambda failed (%s)",
                       h.model, h.what, o3m_errname(rc));
  if (src) return src;
  o3m_log_warn("numerical health: %d model(s) bad, first %d: %s (residual %.3g); all "
               "refactorized exactly from Lambda and u", h.n_bad, h.model, h.what,
               h.max_residual);
  return O3M_OK;
}

int ap_checkpoint_start(ap_checkpoint *c, o3m_err *e) {
  if (c->job) return o3m_err_set(e, O3M_ESTATE, "a checkpoint is being written already");
  int rc = ap_checkpoint_health(c, 0, NULL, e);
  if (rc) return rc;
  size_t nfed = o3m_policy_state_size(c->p);
  size_t nloc = c->local ? o3m_policy_state_size(ap_fallback_model(c->local)) : 0;
  if (nloc > UINT32_MAX)
    return o3m_err_set(e, O3M_EINVAL, "checkpoint: the local model's image of %zu bytes does "
                       "not fit the format's 32-bit length", nloc);
  size_t n = nfed + nloc;
  if (!c->snap || c->snap_len != n) {
    unsigned char *b = o3m_realloc(c->snap, n);
    if (!b) return o3m_err_set(e, O3M_ENOMEM, "checkpoint snapshot of %zu bytes: out of memory", n);
    c->snap = b;
    c->snap_len = n;
  }
  if (!c->writer_started) {
    if (pthread_create(&c->writer, NULL, writer_main, c))
      return o3m_err_set(e, O3M_ENOMEM, "cannot start the checkpoint writer thread");
    c->writer_started = 1;
  }
  /* Everything applied to the policy is in the journal up to last_seq; make
   * it durable and start a new segment there, so that old segments can go.
   * The rotation must come first: once it returns, segment seq + 1 exists,
   * which is what lets recovery tell a journal lost after this checkpoint
   * from one that simply has nothing after it (ap_journal.h). */
  if (c->j && (rc = ap_journal_rotate(c->j, e))) return rc;
  c->paired = 0;
  if ((rc = o3m_policy_state_export(c->p, c->snap, nfed)) ||
      (nloc && (rc = o3m_policy_state_export(ap_fallback_model(c->local), c->snap + nfed, nloc))))
    return o3m_err_set(e, rc, "checkpoint: the policy state image does not fit");
  c->snap_local = nloc;
  pthread_mutex_lock(&c->mu);
  c->job_seq = c->j ? ap_journal_last_seq(c->j) : c->ext_seq;
  c->job_updates = o3m_policy_updates(c->p);
  c->job = 1;
  c->done = 0;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  return O3M_OK;
}

int ap_checkpoint_collect(ap_checkpoint *c, int wait, int *done, o3m_err *e) {
  *done = 0;
  if (!c->job) return O3M_OK;
  pthread_mutex_lock(&c->mu);
  while (wait && !c->done) pthread_cond_wait(&c->cv, &c->mu);
  int finished = c->done, rc = c->job_rc;
  o3m_err je = c->job_err;
  if (finished) c->job = c->done = 0;
  pthread_mutex_unlock(&c->mu);
  if (!finished) return O3M_OK;
  *done = 1;
  if (rc) {
    if (e) *e = je;
    return rc;
  }
  uint64_t seq = c->job_seq;
  c->ckpt_seq = seq;
  c->ckpt_time = o3m_clock_ms();
  /* Keep the newest two; prune the journal before the older of them. */
  uint64_t *seqs;
  int n;
  if ((rc = list_ckpts(c->dirfd, 0, &seqs, &n)))
    return o3m_err_set(e, rc, "state_dir %s: cannot list the checkpoints", c->dir);
  for (int i = 2; i < n; i++) {
    char name[NAME_LEN];
    ck_name(name, seqs[i], ".ckpt");
    if (unlinkat(c->dirfd, name, 0) && errno != ENOENT && !rc)
      rc = o3m_err_set(e, O3M_EIO, "checkpoint %s/%s: cannot remove: %s", c->dir, name,
                       strerror(errno));
  }
  if (n > 2 && fsync(c->dirfd) && !rc)
    rc = o3m_err_set(e, O3M_EIO, "state_dir %s: cannot fsync", c->dir);
  if (!rc && n >= 2 && c->j) rc = ap_journal_prune(c->j, seqs[1], e);
  o3m_free(seqs);
  return rc;
}

int ap_checkpoint_write(ap_checkpoint *c, o3m_err *e) {
  int done;
  /* A checkpoint in flight is finished first (its outcome is superseded
   * by this one's). */
  o3m_err ignored;
  ap_checkpoint_collect(c, 1, &done, &ignored);
  int rc = ap_checkpoint_start(c, e);
  if (rc) return rc;
  return ap_checkpoint_collect(c, 1, &done, e);
}

uint64_t ap_checkpoint_seq(const ap_checkpoint *c) { return c->ckpt_seq; }

/* ----------------------------------------------------------------- discard */

int ap_checkpoint_discard(const char *state_dir, o3m_err *e) {
  int dirfd = open(state_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dirfd < 0) {
    if (errno == ENOENT) return O3M_OK;
    return o3m_err_set(e, O3M_EIO, "state_dir %s: cannot open: %s", state_dir, strerror(errno));
  }
  int lockfd = -1, rc = take_lock(state_dir, dirfd, &lockfd, e);
  if (rc) {
    close(dirfd);
    return rc;
  }
  char sub[64];
  snprintf(sub, sizeof sub, "discarded-%" PRId64, wall_ms());
  int subfd = -1, moved = 0;
  /* Entries are moved while the directory is being read, which may hide
   * others from that pass, so passes repeat until one moves nothing. */
  for (int pass_moved = 1; pass_moved && !rc;) {
    pass_moved = 0;
    int fd = dup(dirfd);
    DIR *dh = fd >= 0 ? fdopendir(fd) : NULL;
    if (!dh) {
      if (fd >= 0) close(fd);
      rc = o3m_err_set(e, O3M_EIO, "state_dir %s: cannot list", state_dir);
      break;
    }
    rewinddir(dh);
    struct dirent *de;
    while ((de = readdir(dh))) {
      if (strncmp(de->d_name, "ap-ckpt-", 8) && strncmp(de->d_name, "ap-journal-", 11))
        continue;
      if (subfd < 0) {
        if (mkdirat(dirfd, sub, 0700) ||
            (subfd = openat(dirfd, sub, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
          rc = o3m_err_set(e, O3M_EIO, "state_dir %s: cannot create %s: %s", state_dir, sub,
                           strerror(errno));
          break;
        }
      }
      if (renameat(dirfd, de->d_name, subfd, de->d_name)) {
        rc = o3m_err_set(e, O3M_EIO, "state_dir %s: cannot move %s: %s", state_dir,
                         de->d_name, strerror(errno));
        break;
      }
      moved++;
      pass_moved++;
    }
    closedir(dh);
  }
  if (subfd >= 0 && (fsync(subfd) || fsync(dirfd)) && !rc)
    rc = o3m_err_set(e, O3M_EIO, "state_dir %s: cannot fsync", state_dir);
  if (!rc && moved)
    o3m_log_warn("state_dir %s: moved %d state files to %s/ for a fresh start", state_dir,
                 moved, sub);
  if (subfd >= 0) close(subfd);
  close(lockfd);
  close(dirfd);
  return rc;
}
