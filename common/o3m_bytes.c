/* o3m_bytes.c -- CRC32C, whole-buffer I/O and numbered file names for the
 * on-disk formats (see o3m_bytes.h). */
#include "o3m_bytes.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Slicing by 8: table[0] is the classic byte-wise table of the reflected
 * polynomial 0x82F63B78; table[k][b] is the CRC of byte b followed by k zero
 * bytes, so eight bytes are folded per step. The tables are filled once per
 * process and only read afterwards. */
static uint32_t crc_table[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void) {
  for (uint32_t b = 0; b < 256; b++) {
    uint32_t c = b;
    for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
    crc_table[0][b] = c;
  }
  for (uint32_t b = 0; b < 256; b++)
    for (int t = 1; t < 8; t++)
      crc_table[t][b] = (crc_table[t - 1][b] >> 8) ^ crc_table[0][crc_table[t - 1][b] & 0xff];
}

uint32_t o3m_crc32c(uint32_t crc, const void *buf, size_t len) {
  pthread_once(&crc_once, crc_init);
  const unsigned char *p = buf;
  uint32_t c = ~crc;
  while (len >= 8) {
    uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                       (uint32_t)p[3] << 24);
    c = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^
        crc_table[5][(lo >> 16) & 0xff] ^ crc_table[4][lo >> 24] ^ crc_table[3][p[4]] ^
        crc_table[2][p[5]] ^ crc_table[1][p[6]] ^ crc_table[0][p[7]];
    p += 8;
    len -= 8;
  }
  while (len--) c = (c >> 8) ^ crc_table[0][(c ^ *p++) & 0xff];
  return ~c;
}

void o3m_file_hdr_begin(unsigned char *h, const char *magic, uint32_t version) {
  memset(h, 0, O3M_FILE_HDR);
  memcpy(h + O3M_FILE_HDR_AT_MAGIC, magic, 8);
  o3m_put_le32(h + O3M_FILE_HDR_AT_VERSION, version);
}

void o3m_file_hdr_seal(unsigned char *h) {
  o3m_put_le32(h + O3M_FILE_HDR_AT_CRC, o3m_crc32c(0, h, O3M_FILE_HDR_AT_CRC));
}

o3m_file_hdr_state o3m_file_hdr_check(const unsigned char *h, const char *magic,
                                      uint32_t *version) {
  *version = o3m_get_le32(h + O3M_FILE_HDR_AT_VERSION);
  if (memcmp(h + O3M_FILE_HDR_AT_MAGIC, magic, 8) != 0) return O3M_FILE_HDR_BAD_MAGIC;
  if (o3m_get_le32(h + O3M_FILE_HDR_AT_CRC) != o3m_crc32c(0, h, O3M_FILE_HDR_AT_CRC))
    return O3M_FILE_HDR_BAD_CRC;
  return O3M_FILE_HDR_OK;
}

/* The one loop behind o3m_write_full, o3m_read_full, o3m_pwrite_full and
 * o3m_pread_full: moves len bytes between fd and p, at offset off when at is
 * nonzero (pread/pwrite) or at the file position otherwise, retrying short
 * transfers and EINTR. A read that meets the end of the file fails. The
 * writers pass a const buffer cast to p: it is only read. */
static int io_full(int fd, unsigned char *p, size_t len, int at, uint64_t off, int wr) {
  while (len > 0) {
    ssize_t r;
    if (at)
      r = wr ? pwrite(fd, p, len, (off_t)off) : pread(fd, p, len, (off_t)off);
    else
      r = wr ? write(fd, p, len) : read(fd, p, len);
    if (r < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (r == 0 && !wr) return -1;
    p += r;
    len -= (size_t)r;
    off += (uint64_t)r;
  }
  return 0;
}

int o3m_write_full(int fd, const void *buf, size_t len) {
  return io_full(fd, (unsigned char *)buf, len, 0, 0, 1);
}

int o3m_read_full(int fd, void *buf, size_t len) { return io_full(fd, buf, len, 0, 0, 0); }

int o3m_pwrite_full(int fd, const void *buf, size_t len, uint64_t off) {
  return io_full(fd, (unsigned char *)buf, len, 1, off, 1);
}

int o3m_pread_full(int fd, void *buf, size_t len, uint64_t off) {
  return io_full(fd, buf, len, 1, off, 0);
}

int o3m_parse_seq_name(const char *name, const char *prefix, const char *suffix,
                       uint64_t *seq) {
  size_t pl = strlen(prefix), sl = strlen(suffix);
  if (strncmp(name, prefix, pl) || strlen(name) != pl + 16 + sl || strcmp(name + pl + 16, suffix))
    return 0;
  uint64_t v = 0;
  for (int i = 0; i < 16; i++) {
    char ch = name[pl + i];
    int h = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
    if (h < 0) return 0;
    v = v << 4 | (uint64_t)h;
  }
  *seq = v;
  return 1;
}

/* Makes the entry of the directory whose path is path[0..len) durable by an
 * fsync of that directory ("/" for a root level, "." for a relative name
 * without a slash is handled by the caller passing len 0). */
static int sync_dir_prefix(const char *path, size_t len) {
  char buf[4096];
  if (len == 0) snprintf(buf, sizeof buf, ".");
  else snprintf(buf, sizeof buf, "%.*s", (int)len, path);
  int fd = open(buf, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return -1;
  int rc = fsync(fd);
  close(fd);
  return rc;
}

int o3m_mkdir_p(const char *dir, unsigned mode, int durable, o3m_err *e) {
  char buf[4096];
  size_t n = dir ? strlen(dir) : 0;
  if (n == 0 || n >= sizeof buf)
    return o3m_err_set(e, O3M_EINVAL, "directory name '%s' is empty or too long",
                       dir ? dir : "");
  memcpy(buf, dir, n + 1);
  /* Each level in turn: buf[0..i) is the level, i its end (a '/' or the
   * terminating NUL). A leading '/' is not a level of its own. */
  for (size_t i = 1; i <= n; i++) {
    if (buf[i] != '/' && buf[i] != '\0') continue;
    if (buf[i - 1] == '/') continue; /* "a//b" */
    char keep = buf[i];
    buf[i] = '\0';
    if (mkdir(buf, (mode_t)mode) == 0) {
      /* The parent of the new level holds its entry. */
      char *slash = strrchr(buf, '/');
      size_t plen = slash ? (slash == buf ? 1 : (size_t)(slash - buf)) : 0;
      if (durable && sync_dir_prefix(buf, plen) != 0)
        return o3m_err_set(e, O3M_EIO, "cannot make directory %s durable: %s", buf,
                           strerror(errno));
    } else if (errno != EEXIST) {
      return o3m_err_set(e, O3M_EIO, "cannot create directory %s: %s", buf, strerror(errno));
    }
    struct stat st;
    if (stat(buf, &st) != 0 || !S_ISDIR(st.st_mode))
      return o3m_err_set(e, O3M_EIO, "%s exists and is not a directory", buf);
    buf[i] = keep;
  }
  return O3M_OK;
}

int o3m_state_dir_open(const char *dir, int *fd, o3m_err *e) {
  *fd = -1;
  o3m_err me;
  o3m_err_clear(&me);
  if (o3m_mkdir_p(dir, 0700, 1, &me) != 0)
    return o3m_err_set(e, O3M_EIO, "state_dir %s: %s", dir ? dir : "", o3m_err_message(&me));
  *fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (*fd < 0)
    return o3m_err_set(e, O3M_EIO, "state_dir %s: cannot open: %s", dir, strerror(errno));
  int rc = o3m_state_dir_check(dir, *fd, e);
  if (rc < 0) {
    close(*fd);
    *fd = -1;
  }
  return rc;
}

int o3m_state_dir_check(const char *dir, int fd, o3m_err *e) {
  struct stat st;
  if (fstat(fd, &st) != 0)
    return o3m_err_set(e, O3M_EIO, "state_dir %s: cannot stat: %s", dir, strerror(errno));
  if (st.st_uid != geteuid())
    return o3m_err_set(e, O3M_EPERM, "state_dir %s: owned by uid %u, not by the user this runs "
                       "as (uid %u): chown it to that user", dir, (unsigned)st.st_uid,
                       (unsigned)geteuid());
  if (st.st_mode & 077)
    return o3m_err_set(e, O3M_EPERM, "state_dir %s: mode %03o lets group or others in; run "
                       "chmod 700 %s", dir, (unsigned)(st.st_mode & 0777), dir);
  return O3M_OK;
}

int o3m_secret_file_check(const char *what, const char *path, int fd, struct stat *st,
                          o3m_err *e) {
  struct stat sb;
  if (fstat(fd, &sb) != 0)
    return o3m_err_set(e, O3M_EIO, "%s %s: cannot stat: %s", what, path, strerror(errno));
  if (!S_ISREG(sb.st_mode))
    return o3m_err_set(e, O3M_EPERM, "%s %s: not a regular file", what, path);
  if (sb.st_uid != geteuid())
    return o3m_err_set(e, O3M_EPERM, "%s %s: owned by uid %u, not by the user this runs as "
                       "(uid %u): chown it to that user and run chmod 600 %s", what, path,
                       (unsigned)sb.st_uid, (unsigned)geteuid(), path);
  if (sb.st_mode & 077)
    return o3m_err_set(e, O3M_EPERM, "%s %s: mode %03o lets group or others read it; run "
                       "chmod 600 %s", what, path, (unsigned)(sb.st_mode & 0777), path);
  if (st) *st = sb;
  return O3M_OK;
}
