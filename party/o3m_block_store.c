/* o3m_block_store.c -- a party's own mask block in its state_dir (see
 * o3m_block_store.h for the format and the rules).
 *
 * Save serializes the whole file into one buffer and writes it with one
 * loop of write(2); load reads the whole file into one buffer and checks it
 * completely (length, magics, CRCs, shape, finiteness) before it builds a
 * block. Files are a few hundred KiB for d ~ 1000, so one buffer is simpler
 * than streaming, and this runs once per daemon start. Every buffer that
 * held block values or the secret is wiped with explicit_bzero before it is
 * freed. */
#include "o3m_block_store.h"
#include "o3m_alloc.h"
#include "o3m_bytes.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>


#define BS_MAGIC "O3MBLK\0\0"
#define BS_END "O3MBKEND"
#define BS_VERSION 1u
#define BS_HDR O3M_FILE_HDR
#define BS_TRAILER 16
/* Byte offsets of the header's fields (layout in o3m_block_store.h), used by
 * both save and load; bytes 44..59 are zero; magic, version and CRC are
 * framed and checked by o3m_file_hdr (o3m_bytes.h). Then the trailer's, from
 * the end of the values and secret. */
enum bs_field {
  BS_AT_MAGIC = O3M_FILE_HDR_AT_MAGIC,     /* 8 bytes, BS_MAGIC */
  BS_AT_VERSION = O3M_FILE_HDR_AT_VERSION, /* le32, BS_VERSION */
  BS_AT_HDR_LEN = 12,    /* le32, BS_HDR */
  BS_AT_MASK_ID = 16,    /* le64 */
  BS_AT_D = 24,          /* le32 */
  BS_AT_DJ = 28,         /* le32 */
  BS_AT_PARTY = 32,      /* le32 */
  BS_AT_COL0 = 36,       /* le32 */
  BS_AT_SECRET_LEN = 40, /* le32 */
  BS_AT_HDR_CRC = O3M_FILE_HDR_AT_CRC, /* le32, CRC32C of bytes 0..59 */
  BS_AT_DATA_CRC = 0,    /* trailer: le32, CRC32C of values and secret */
  BS_AT_ZERO = 4,        /* trailer: le32, zero */
  BS_AT_END = 8          /* trailer: 8 bytes, BS_END */
};
/* Largest file accepted by load: a block of O3M_MAX_DIM^2 values. */
#define BS_MAX_FILE ((size_t)BS_HDR + 8 * (size_t)O3M_MAX_DIM * O3M_MAX_DIM + \
                     O3M_BLOCK_STORE_SECRET_MAX + BS_TRAILER)
/* What every corruption message ends with. */
#define BS_RECOVER "the block cannot be fetched again (the mask generator forgets Q); to join a " \
                   "new federation, delete the state_dir of every party"

const char *o3m_block_store_path(const char *state_dir, char *buf, size_t len) {
  snprintf(buf, len, "%s/%s", state_dir, O3M_BLOCK_STORE_FILE);
  return buf;
}

/* Frees a buffer that held secret material. */
static void wipe_free(unsigned char *b, size_t n) {
  if (!b) return;
  explicit_bzero(b, n);
  o3m_free(b);
}

int o3m_block_store_save(const char *state_dir, const o3m_block_store_id *id,
                         const o3m_block *b, const void *secret, size_t secret_len, o3m_err *e) {
  if (!state_dir || !*state_dir || !id || !b || secret_len > O3M_BLOCK_STORE_SECRET_MAX ||
      (secret_len && !secret))
    return o3m_err_set(e, O3M_EINVAL, "block store: bad arguments");
  int d = o3m_block_rows(b), dj = o3m_block_cols(b);
  if (d != id->d || dj != id->dj || id->party < 0 || id->col0 < 0)
    return o3m_err_set(e, O3M_EINVAL, "block store: a %d x %d block for a %d x %d slot", d, dj,
                       id->d, id->dj);
  size_t nv = (size_t)d * (size_t)dj;
  size_t len = BS_HDR + 8 * nv + secret_len + BS_TRAILER;
  unsigned char *buf = o3m_calloc(1, len);
  if (!buf) return o3m_err_set(e, O3M_ENOMEM, "block store: out of memory");

  o3m_file_hdr_begin(buf, BS_MAGIC, BS_VERSION);
  o3m_put_le32(buf + BS_AT_HDR_LEN, BS_HDR);
  o3m_put_le64(buf + BS_AT_MASK_ID, o3m_block_mask_id(b));
  o3m_put_le32(buf + BS_AT_D, (uint32_t)d);
  o3m_put_le32(buf + BS_AT_DJ, (uint32_t)dj);
  o3m_put_le32(buf + BS_AT_PARTY, (uint32_t)id->party);
  o3m_put_le32(buf + BS_AT_COL0, (uint32_t)id->col0);
  o3m_put_le32(buf + BS_AT_SECRET_LEN, (uint32_t)secret_len);
  o3m_file_hdr_seal(buf);
  o3m_block_write_le(b, buf + BS_HDR);
  if (secret_len) memcpy(buf + BS_HDR + 8 * nv, secret, secret_len);
  size_t body = 8 * nv + secret_len;
  unsigned char *t = buf + BS_HDR + body;
  o3m_put_le32(t + BS_AT_DATA_CRC, o3m_crc32c(0, buf + BS_HDR, body));
  memcpy(t + BS_AT_END, BS_END, 8);

  char path[4096];
  o3m_block_store_path(state_dir, path, sizeof path);
  int dirfd = -1, fd = -1, rc = o3m_state_dir_open(state_dir, &dirfd, e);
  if (rc < 0) goto out;
  static const char tmp[] = O3M_BLOCK_STORE_FILE ".tmp";
  unlinkat(dirfd, tmp, 0); /* a leftover of a crash during an earlier save */
  fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    rc = o3m_err_set(e, O3M_EIO, "%s.tmp: cannot create: %s", path, strerror(errno));
    goto out;
  }
  for (size_t off = 0; off < len;) {
    ssize_t w = write(fd, buf + off, len - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      rc = o3m_err_set(e, O3M_EIO, "%s.tmp: write: %s", path, w < 0 ? strerror(errno) : "short");
      goto out;
    }
    off += (size_t)w;
  }
  if (fsync(fd) != 0) {
    rc = o3m_err_set(e, O3M_EIO, "%s.tmp: fsync: %s", path, strerror(errno));
    goto out;
  }
  close(fd);
  fd = -1;
  if (renameat(dirfd, tmp, dirfd, O3M_BLOCK_STORE_FILE) != 0) {
    rc = o3m_err_set(e, O3M_EIO, "%s: rename: %s", path, strerror(errno));
    goto out;
  }
  if (fsync(dirfd) != 0) rc = o3m_err_set(e, O3M_EIO, "%s: fsync of the directory: %s", path,
                                          strerror(errno));

out:
  if (fd >= 0) close(fd);
  if (rc < 0 && dirfd >= 0) unlinkat(dirfd, tmp, 0);
  if (dirfd >= 0) close(dirfd);
  wipe_free(buf, len);
  return rc;
}

/* o3m_block_fill_fn over bytes already in memory (the file buffer). */
typedef struct copy_src {
  const unsigned char *p;
  size_t n;
} copy_src;

static int copy_bytes(void *ctx, unsigned char *buf, size_t n) {
  const copy_src *c = ctx;
  if (c->n != n) return O3M_EDIM;
  memcpy(buf, c->p, n);
  return O3M_OK;
}

/* Reads all of path (at most BS_MAX_FILE bytes) into a new buffer. */
static int read_all(const char *path, unsigned char **out, size_t *len, o3m_err *e) {
  *out = NULL;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR) return O3M_ENOTFOUND;
    return o3m_err_set(e, O3M_EIO, "%s: cannot open: %s", path, strerror(errno));
  }
  /* It holds this party's mask block and dummy-row key: refused, like a
   * TLS key, unless only this user may read it. */
  struct stat st;
  int rc = o3m_secret_file_check("stored block", path, fd, &st, e);
  if (rc < 0) {
    close(fd);
    return rc;
  }
  if (st.st_size < BS_HDR + BS_TRAILER || (size_t)st.st_size > BS_MAX_FILE) {
    close(fd);
    return o3m_err_set(e, O3M_ECORRUPT, "%s: %lld bytes is not a stored block; %s", path,
                       (long long)st.st_size, BS_RECOVER);
  }
  size_t n = (size_t)st.st_size;
  unsigned char *buf = o3m_malloc(n);
  if (!buf) {
    close(fd);
    return o3m_err_set(e, O3M_ENOMEM, "%s: out of memory", path);
  }
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, buf + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += (size_t)r;
  }
  close(fd);
  if (got != n) {
    wipe_free(buf, n);
    return o3m_err_set(e, O3M_EIO, "%s: short read", path);
  }
  *out = buf;
  *len = n;
  return 0;
}

int o3m_block_store_load(const char *state_dir, const o3m_block_store_id *id, o3m_block **out,
                         void *secret, size_t secret_cap, size_t *secret_len, o3m_err *e) {
  if (out) *out = NULL;
  if (!state_dir || !*state_dir || !id || !out || (secret_cap && !secret))
    return o3m_err_set(e, O3M_EINVAL, "block store: bad arguments");
  /* The directory is checked as o3m_state_dir_open checks it, without
   * creating it: a missing one means no stored block. */
  int dirfd = open(state_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dirfd < 0) {
    if (errno == ENOENT || errno == ENOTDIR) return O3M_ENOTFOUND;
    return o3m_err_set(e, O3M_EIO, "state_dir %s: cannot open: %s", state_dir, strerror(errno));
  }
  int rc = o3m_state_dir_check(state_dir, dirfd, e);
  close(dirfd);
  if (rc < 0) return rc;
  char path[4096];
  o3m_block_store_path(state_dir, path, sizeof path);
  unsigned char *buf = NULL;
  size_t n = 0;
  rc = read_all(path, &buf, &n, e);
  if (rc < 0) return rc;

  const char *bad = NULL;
  uint32_t d = o3m_get_le32(buf + BS_AT_D), dj = o3m_get_le32(buf + BS_AT_DJ), slen = o3m_get_le32(buf + BS_AT_SECRET_LEN);
  uint32_t version;
  o3m_file_hdr_state hs = o3m_file_hdr_check(buf, BS_MAGIC, &version);
  if (hs == O3M_FILE_HDR_BAD_MAGIC) bad = "bad magic";
  else if (hs == O3M_FILE_HDR_BAD_CRC) bad = "header CRC mismatch";
  else if (version != BS_VERSION) bad = "unknown version";
  else if (o3m_get_le32(buf + BS_AT_HDR_LEN) != BS_HDR) bad = "bad header length";
  else if (d < 1 || d > O3M_MAX_DIM || dj < 1 || dj > d || slen > O3M_BLOCK_STORE_SECRET_MAX)
    bad = "impossible shape";
  else if (n != BS_HDR + 8 * (size_t)d * dj + slen + BS_TRAILER) bad = "wrong length (truncated?)";
  size_t nv = (size_t)d * dj, body = 8 * nv + slen;
  if (!bad) {
    const unsigned char *t = buf + BS_HDR + body;
    if (memcmp(t + BS_AT_END, BS_END, 8) != 0 || o3m_get_le32(t + BS_AT_ZERO) != 0) bad = "bad end marker";
    else if (o3m_get_le32(t + BS_AT_DATA_CRC) != o3m_crc32c(0, buf + BS_HDR, body)) bad = "data CRC mismatch";
  }
  if (bad) {
    rc = o3m_err_set(e, O3M_ECORRUPT, "%s is corrupt (%s); %s", path, bad, BS_RECOVER);
    goto out;
  }
  if ((int)d != id->d || (int)dj != id->dj || (int)o3m_get_le32(buf + BS_AT_PARTY) != id->party ||
      (int)o3m_get_le32(buf + BS_AT_COL0) != id->col0) {
    rc = o3m_err_set(e, O3M_EDIM, "%s holds the block of party %u (columns %u..%u of d = %u), "
                     "the config gives party %d (columns %d..%d of d = %d): another config or "
                     "another party's state_dir", path, o3m_get_le32(buf + BS_AT_PARTY), o3m_get_le32(buf + BS_AT_COL0),
                     o3m_get_le32(buf + BS_AT_COL0) + dj - 1, d, id->party, id->col0, id->col0 + id->dj - 1,
                     id->d);
    goto out;
  }
  if (slen > secret_cap) {
    rc = o3m_err_set(e, O3M_EDIM, "%s holds a %u-byte secret, this party expects at most %zu",
                     path, slen, secret_cap);
    goto out;
  }
  /* The stored values are in the block's byte form (o3m_block_read_le),
   * which the block decodes in its own storage. */
  copy_src src = {buf + BS_HDR, 8 * nv};
  rc = o3m_block_read_le(out, (int)d, (int)dj, o3m_get_le64(buf + BS_AT_MASK_ID), copy_bytes, &src);
  if (rc == O3M_ENONFINITE) {
    rc = o3m_err_set(e, O3M_ECORRUPT, "%s is corrupt (non-finite value); %s", path, BS_RECOVER);
    goto out;
  }
  if (rc < 0) {
    rc = o3m_err_set(e, rc, "%s: cannot build the block", path);
    goto out;
  }
  if (slen) memcpy(secret, buf + BS_HDR + 8 * nv, slen);
  if (secret_len) *secret_len = slen;

out:
  wipe_free(buf, n);
  return rc;
}
