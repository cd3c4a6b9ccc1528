/* o3m_daemon.c -- see o3m_daemon.h. */
#include "o3m_daemon.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int o3m_daemon_write_ready_file(const char *path, int port, o3m_err *e) {
  char tmp[4096];
  if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp)
    return o3m_err_set(e, O3M_EINVAL, "ready file path too long");
  FILE *f = fopen(tmp, "w");
  if (!f) return o3m_err_set(e, O3M_EIO, "%s: %s", tmp, strerror(errno));
  int ok = fprintf(f, "%d\n", port) > 0;
  ok = (fclose(f) == 0) && ok;
  if (!ok || rename(tmp, path) != 0) {
    int err = errno;
    unlink(tmp);
    return o3m_err_set(e, O3M_EIO, "%s: %s", path, strerror(err));
  }
  return O3M_OK;
}
