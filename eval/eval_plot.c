/* eval_plot.c -- see eval_plot.h. Moved here from eval_regret.c so that
 * every command that plots runs gnuplot the same way. */
#include "eval_plot.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

int eval_plot_run(const char *dir, const char *script, o3m_err *e) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) return o3m_err_set(e, O3M_EIO, "cannot start gnuplot: %s", strerror(errno));
  if (pid == 0) {
    if (chdir(dir) != 0) _exit(126);
    execlp("gnuplot", "gnuplot", script, (char *)NULL);
    _exit(127);
  }
  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR)
      return o3m_err_set(e, O3M_EIO, "waiting for gnuplot: %s", strerror(errno));
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
    return o3m_err_set(e, O3M_ENOTFOUND,
                       "gnuplot not found (Debian package gnuplot-nox): no plots; the script "
                       "is %s/%s",
                       dir, script);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return o3m_err_set(e, O3M_EIO, "gnuplot failed on %s/%s (status %d)", dir, script, status);
  return O3M_OK;
}
