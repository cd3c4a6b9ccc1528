/* fuzz_util.h -- what the libFuzzer targets in tests/fuzz share.
 *
 * The readers under test take a path, not a buffer, so a target hands them
 * its input as an in-memory file: fuzz_file wraps one memfd, created once per
 * process, whose contents are replaced for each input and which is opened by
 * its /proc/self/fd path (every open gets a fresh offset 0). Nothing touches
 * the disk, and a crashed run leaves no temporary file behind. Targets whose
 * code works on a directory of files (the AP's journal and checkpoints) get
 * a private directory on /dev/shm (tmpfs, so fsync costs nothing) from
 * fuzz_dir_init, emptied before each input and removed at exit.
 *
 * FUZZ_CHECK states a property the code under test documents (a successful
 * parse has d equal to the sum of the dims, an event's arm is below K). A
 * violated property is a bug like a memory error, so it aborts and libFuzzer
 * keeps the input as a crash. Harness set-up failures (no memfd, out of
 * memory while building a fixture) abort the same way, with a message that
 * says it was the harness. */
#ifndef FUZZ_UTIL_H
#define FUZZ_UTIL_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define FUZZ_CHECK(cond)                                                          \
  do {                                                                            \
    if (!(cond)) {                                                                \
      fprintf(stderr, "%s:%d: property violated: %s\n", __FILE__, __LINE__, #cond); \
      abort();                                                                    \
    }                                                                             \
  } while (0)

/* Aborts with a message naming a failure of the harness itself. */
static inline void fuzz_die(const char *what) {
  fprintf(stderr, "fuzz harness: %s: %s\n", what, strerror(errno));
  abort();
}

typedef struct fuzz_file {
  int fd;
  char path[48]; /* "/proc/self/fd/N" */
} fuzz_file;

/* Creates the memfd once; name shows up in /proc for debugging only. */
static inline void fuzz_file_init(fuzz_file *f, const char *name) {
  f->fd = memfd_create(name, MFD_CLOEXEC);
  if (f->fd < 0) fuzz_die("memfd_create");
  snprintf(f->path, sizeof f->path, "/proc/self/fd/%d", f->fd);
}

/* Replaces the file's contents with n bytes of data and returns its path
 * (owned by f). */
static inline const char *fuzz_file_set(fuzz_file *f, const uint8_t *data, size_t n) {
  if (ftruncate(f->fd, 0) != 0) fuzz_die("ftruncate");
  size_t off = 0;
  while (off < n) {
    ssize_t w = pwrite(f->fd, data + off, n - off, (off_t)off);
    if (w < 0) {
      if (errno == EINTR) continue;
      fuzz_die("pwrite");
    }
    off += (size_t)w;
  }
  return f->path;
}

/* A NUL-terminated copy of n bytes (an embedded NUL simply ends the text
 * early, as it would for a C caller). The caller frees it. */
static inline char *fuzz_cstr(const uint8_t *data, size_t n) {
  char *s = malloc(n + 1);
  if (!s) fuzz_die("malloc");
  if (n) memcpy(s, data, n);
  s[n] = '\0';
  return s;
}

/* Finds the first NUL byte: the targets that need two inputs (a log and its
 * item table) take the bytes before it as the first and the rest as the
 * second. Returns n when there is none. */
static inline size_t fuzz_split_at_nul(const uint8_t *data, size_t n) {
  const uint8_t *z = n ? memchr(data, 0, n) : NULL;
  return z ? (size_t)(z - data) : n;
}

/* A private scratch directory: fuzz_dir_init creates it (under /dev/shm,
 * else $TMPDIR or /tmp) and removes it at exit; fuzz_dir_clear empties it
 * (files, and the files of subdirectories one level down). */
static char fuzz__dir_path[256];

static inline void fuzz__dir_empty(const char *path, int depth) {
  DIR *dh = opendir(path);
  if (!dh) return;
  struct dirent *de;
  char sub[512];
  while ((de = readdir(dh))) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    snprintf(sub, sizeof sub, "%s/%s", path, de->d_name);
    if (unlink(sub) != 0 && errno == EISDIR && depth > 0) {
      fuzz__dir_empty(sub, depth - 1);
      rmdir(sub);
    }
  }
  closedir(dh);
}

static inline void fuzz_dir_clear(void) { fuzz__dir_empty(fuzz__dir_path, 1); }

static inline void fuzz__dir_remove(void) {
  fuzz_dir_clear();
  rmdir(fuzz__dir_path);
}

static inline const char *fuzz_dir_init(const char *name) {
  const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR");
  if (!base) base = "/tmp";
  snprintf(fuzz__dir_path, sizeof fuzz__dir_path, "%s/o3m-%s-XXXXXX", base, name);
  if (!mkdtemp(fuzz__dir_path)) fuzz_die("mkdtemp");
  atexit(fuzz__dir_remove);
  return fuzz__dir_path;
}

/* Writes n bytes to the file name in the scratch directory. */
static inline void fuzz_dir_write(const char *name, const uint8_t *data, size_t n) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", fuzz__dir_path, name);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) fuzz_die("open");
  size_t off = 0;
  while (off < n) {
    ssize_t w = write(fd, data + off, n - off);
    if (w < 0) {
      if (errno == EINTR) continue;
      fuzz_die("write");
    }
    off += (size_t)w;
  }
  close(fd);
}

/* Little-endian loads and stores, for targets that patch binary formats. */
static inline uint64_t fuzz_le64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

static inline void fuzz_put_le32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

#endif
