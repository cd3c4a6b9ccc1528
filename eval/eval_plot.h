/* eval_plot.h -- running a generated gnuplot script, shared by the o3m-eval
 * commands that draw PNGs (regret, audit).
 *
 * A command writes its script into its output directory, naming the CSVs and
 * PNGs relative to it; eval_plot_run then runs gnuplot on it inside that
 * directory with fork/exec, so that no path is ever quoted into a shell or
 * into the script. Not thread-safe (it forks); nothing is allocated. */
#ifndef EVAL_PLOT_H
#define EVAL_PLOT_H

#include "o3m_error.h"

/* Runs `gnuplot script` with dir as the working directory and waits for it.
 * script is the file name inside dir. O3M_ENOTFOUND, with a message naming
 * the Debian package and the script, when gnuplot is not installed: callers
 * then print the message and go on without plots. O3M_EIO when gnuplot
 * cannot be started or fails (the message names the script and the status). */
int eval_plot_run(const char *dir, const char *script, o3m_err *e);

#endif
