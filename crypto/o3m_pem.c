/* o3m_pem.c -- see o3m_pem.h.
 *
 * The file is read with read(2) into a buffer of the cap plus one byte (a
 * file that fills it is too large), whatever fstat says, so pipes and
 * files that grow while read are capped too; the text is then copied into
 * a buffer of its own size and the large one wiped, so that a daemon keeps
 * a few kilobytes per file and no copy of a key behind. No stdio: its
 * buffer would hold another copy of a key that nothing wipes. */
#include "o3m_pem.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "o3m_alloc.h"
#include "o3m_bytes.h"

void o3m_pem_free(char *pem, size_t len) {
  if (!pem) return;
  sodium_memzero(pem, len);
  o3m_free(pem);
}

/* Reads fd into buf (cap bytes) until the end of the file or cap bytes;
 * the count, or -1 with errno set. */
static ssize_t read_upto(int fd, char *buf, size_t cap) {
  size_t n = 0;
  while (n < cap) {
    ssize_t r = read(fd, buf + n, cap - n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r == 0) break;
    n += (size_t)r;
  }
  return (ssize_t)n;
}

int o3m_pem_read(const char *what, const char *path, int secret, char **out, size_t *len,
                 o3m_err *e) {
  *out = NULL;
  if (len) *len = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return o3m_err_set(e, O3M_ETLS, "%s %s: cannot read: %s", what, path, strerror(errno));
  if (secret) {
    int rc = o3m_secret_file_check(what, path, fd, NULL, e);
    if (rc < 0) {
      close(fd);
      return rc;
    }
  }
  char *buf = o3m_malloc((size_t)O3M_MAX_PEM_FILE + 1);
  if (!buf) {
    close(fd);
    return o3m_err_set(e, O3M_ENOMEM, "%s %s: out of memory", what, path);
  }
  ssize_t got = read_upto(fd, buf, (size_t)O3M_MAX_PEM_FILE + 1);
  int err = errno;
  close(fd);
  int rc = O3M_OK;
  if (got < 0)
    rc = o3m_err_set(e, O3M_ETLS, "%s %s: read error: %s", what, path, strerror(err));
  else if (got == 0)
    rc = o3m_err_set(e, O3M_ETLS, "%s %s: empty file", what, path);
  else if (got > O3M_MAX_PEM_FILE)
    rc = o3m_err_set(e, O3M_ETLS, "%s %s: larger than %d bytes", what, path,
                     O3M_MAX_PEM_FILE);
  char *text = NULL;
  if (rc == O3M_OK) {
    text = o3m_malloc((size_t)got + 1);
    if (!text) rc = o3m_err_set(e, O3M_ENOMEM, "%s %s: out of memory", what, path);
  }
  if (rc == O3M_OK) {
    memcpy(text, buf, (size_t)got);
    text[got] = '\0';
    *out = text;
    if (len) *len = (size_t)got;
  }
  o3m_pem_free(buf, got > 0 ? (size_t)got : 0);
  return rc;
}
