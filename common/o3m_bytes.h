/* o3m_bytes.h -- what O3M's on-disk formats share.
 *
 * The reward journal, the checkpoints, the policy state image and the stored
 * mask blocks are all little-endian with CRC32C checksums, written and read
 * whole, and the numbered files are named <prefix><16 hex digits><suffix>;
 * this header is the one place for all of it, so the formats cannot drift
 * apart. */
#ifndef O3M_BYTES_H
#define O3M_BYTES_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>

#include "o3m_error.h"

static inline void o3m_put_le32(unsigned char *b, uint32_t v) {
  for (int i = 0; i < 4; i++) b[i] = (unsigned char)(v >> (8 * i));
}

static inline void o3m_put_le64(unsigned char *b, uint64_t v) {
  for (int i = 0; i < 8; i++) b[i] = (unsigned char)(v >> (8 * i));
}

static inline uint32_t o3m_get_le32(const unsigned char *b) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) v |= (uint32_t)b[i] << (8 * i);
  return v;
}

static inline uint64_t o3m_get_le64(const unsigned char *b) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)b[i] << (8 * i);
  return v;
}

/* The IEEE-754 binary64 bit pattern of x, and back: doubles are stored
 * as these 64-bit words (with o3m_put_le64 / o3m_get_le64). */
static inline uint64_t o3m_double_bits(double x) {
  uint64_t v;
  memcpy(&v, &x, sizeof v);
  return v;
}

static inline double o3m_bits_double(uint64_t v) {
  double x;
  memcpy(&x, &v, sizeof x);
  return x;
}

/* CRC32C (Castagnoli, reflected polynomial 0x82F63B78) of buf, continuing
 * from crc (0 to start); pass a previous result to extend it over more data.
 * o3m_crc32c(0, "123456789", 9) = 0xE3069283. Thread-safe. */
uint32_t o3m_crc32c(uint32_t crc, const void *buf, size_t len);

/* The 64-byte header that opens a checkpoint, a stored block and a journal
 * segment: an 8-byte magic at 0, the format version (le32) at 8, the
 * format's own fields in bytes 12..59 (zero where it has none) and the
 * CRC32C of bytes 0..59 (le32) at 60. Each format keeps its own magic,
 * version and fields; this is where they are framed and checked. */
#define O3M_FILE_HDR 64
#define O3M_FILE_HDR_AT_MAGIC 0
#define O3M_FILE_HDR_AT_VERSION 8
#define O3M_FILE_HDR_AT_CRC 60

/* Starts header h (O3M_FILE_HDR bytes): zeros, then magic (8 bytes) and
 * version. The format writes its fields next, then o3m_file_hdr_seal. */
void o3m_file_hdr_begin(unsigned char *h, const char *magic, uint32_t version);

/* Writes the CRC32C of bytes 0..59 of h at 60, after the last field. */
void o3m_file_hdr_seal(unsigned char *h);

/* What o3m_file_hdr_check found, in the order it looks. */
typedef enum o3m_file_hdr_state {
  O3M_FILE_HDR_OK = 0,
  O3M_FILE_HDR_BAD_MAGIC, /* not this format's magic */
  O3M_FILE_HDR_BAD_CRC    /* the magic, but bytes 0..59 fail their CRC */
} o3m_file_hdr_state;

/* Checks h's magic against magic (8 bytes), then its CRC, and sets
 * *version to the version it declares (whatever the outcome; it is to be
 * trusted only with O3M_FILE_HDR_OK). Which versions to read is the
 * format's business. */
o3m_file_hdr_state o3m_file_hdr_check(const unsigned char *h, const char *magic,
                                      uint32_t *version);

/* Writes all len bytes to fd, retrying short writes and EINTR. 0, or -1 with
 * errno set. */
int o3m_write_full(int fd, const void *buf, size_t len);

/* Reads exactly len bytes from fd, retrying short reads and EINTR. 0, or -1
 * on an error (errno set) or an end of file before len bytes. */
int o3m_read_full(int fd, void *buf, size_t len);

/* The same at file offset off (pwrite(2) / pread(2)), leaving the file
 * position alone: 0, or -1 as above. */
int o3m_pwrite_full(int fd, const void *buf, size_t len, uint64_t off);
int o3m_pread_full(int fd, void *buf, size_t len, uint64_t off);

/* 1 and *seq if name is exactly prefix, 16 lowercase hex digits, suffix
 * ("ap-journal-00000000000000a1.wal"); 0 otherwise. */
int o3m_parse_seq_name(const char *name, const char *prefix, const char *suffix,
                       uint64_t *seq);

/* Creates directory dir with any missing parents, each new level with the
 * given mode (the umask applies), and checks that dir is a directory. With
 * durable nonzero every level it creates is made durable too (an fsync of
 * its parent), as a state directory must be before files in it are trusted.
 * Returns 0, or O3M_EINVAL (empty or over-long name) or O3M_EIO (a level
 * cannot be created or synced, or exists and is not a directory) with e
 * naming the level; levels created before the failure are left in place. */
int o3m_mkdir_p(const char *dir, unsigned mode, int durable, o3m_err *e);

/* Opens a party's state_dir for the files of the on-disk formats: creates
 * it first with its parents, mode 0700 and durably (o3m_mkdir_p), so that a
 * configured path such as state/bank works on a fresh machine. *fd is an
 * O_DIRECTORY descriptor the caller closes. O3M_EIO with e naming the
 * state_dir on failure (*fd is then -1). An existing directory that is not
 * owned by this process's user, or that group or others may use (mode
 * beyond 0700), is refused with O3M_EPERM naming the fix (chmod 700): its
 * files are 0600, but a looser directory still shows everyone their names,
 * sizes and times (the journal's growth is when rewards arrive), and lets
 * its group replace them. */
int o3m_state_dir_open(const char *dir, int *fd, o3m_err *e);

/* The check o3m_state_dir_open makes of the open directory fd (named dir
 * in messages), for readers that must not create it: 0, or O3M_EPERM
 * (another owner, or a mode beyond 0700) or O3M_EIO. */
int o3m_state_dir_check(const char *dir, int fd, o3m_err *e);

/* The one check of a secret file that a daemon or tool reads (a TLS
 * private key, the secure aggregation secret, a stored mask block), made
 * on the descriptor fd it opened, so that it applies to the file actually
 * read (a symlink's target): a regular file owned by the user this process
 * runs as (geteuid) that neither group nor others may read, write or
 * execute. Anyone else who can read the file holds the party's secret. On
 * failure O3M_EPERM with e naming what and path and the fix ("run chmod
 * 600 PATH", or the owner to chown it to); O3M_EIO when fstat fails. If st
 * is not NULL it receives the fstat on success. fd stays the caller's. */
int o3m_secret_file_check(const char *what, const char *path, int fd, struct stat *st,
                          o3m_err *e);

#endif
