/* o3m_daemon.h -- what every O3M daemon does the same way around its
 * service: announcing readiness to the scripts and tests that start it.
 *
 * A daemon started with --ready-file PATH writes its bound port to PATH once
 * it serves. The file appears whole or not at all (written under a temporary
 * name and renamed), so a reader that polls for it never sees a partial
 * port. */
#ifndef O3M_DAEMON_H
#define O3M_DAEMON_H

#include "o3m_error.h"

/* Writes "PORT\n" to path atomically. O3M_EINVAL if the path is too long,
 * O3M_EIO if the file cannot be written or renamed (e names it); nothing is
 * left behind on failure. */
int o3m_daemon_write_ready_file(const char *path, int port, o3m_err *e);

#endif
