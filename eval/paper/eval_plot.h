/* eval_plot.h -- running a generated gnuplot script, shared by the o3m-eval
 * commands that draw plots (regret, cost, replay, audit, samba), and the
 * opening and checked closing of their output files.
 *
 * A command writes its script into its output directory, naming the CSVs and
 * plots relative to it; eval_plot_run then runs gnuplot on it inside that
 * directory with fork/exec, so that no path is ever quoted into a shell or
 * into the script. Not thread-safe (it forks); nothing is allocated.
 *
 * Vector formats. A script that starts with eval_plot_preamble() picks its
 * terminal from the gnuplot variable `ext` (png, the default: pngcairo;
 * pdf: pdfcairo; svg: svg) and names every output with eval_plot_output(),
 * i.e. '<stem>.'.ext. eval_plot_render() then runs it once per format asked
 * for, passing -e "ext='pdf'"; a user re-renders by hand with
 *   gnuplot -e "ext='svg'" regret_plots.gp   (inside the directory). */
#ifndef EVAL_PLOT_H
#define EVAL_PLOT_H

#include <stddef.h>
#include <stdio.h>

#include "o3m_error.h"

/* Creates (or truncates) the output file dir/stem+suffix, its name
 * written into path (capacity n, always terminated) for eval_out_close and
 * messages. NULL with O3M_EIO in e, naming the path and errno's text, when
 * it cannot be opened. */
FILE *eval_out_open(const char *dir, const char *stem, const char *suffix, char *path, size_t n,
                    o3m_err *e);

/* Closes f, opened by eval_out_open: O3M_EIO naming path when a write
 * failed before (ferror) or fclose fails, so that a short write is not
 * reported as success. f is closed either way. */
int eval_out_close(FILE *f, const char *path, o3m_err *e);

/* Output formats, a bit set. */
#define EVAL_PLOT_PNG 1
#define EVAL_PLOT_PDF 2
#define EVAL_PLOT_SVG 4

/* Parses a comma-separated list of png, pdf and svg (e.g. "png,pdf") into a
 * bit set. O3M_EINVAL naming the bad entry for anything else or an empty
 * list; *out is unchanged then. */
int eval_plot_formats_parse(const char *list, int *out, o3m_err *e);

/* Writes into buf (capacity n, always terminated) " stem.png stem.pdf ..."
 * for the formats in the set, appending to what buf holds: the file names
 * a command lists after rendering. */
void eval_plot_append_names(char *buf, size_t n, const char *stem, int formats);

/* The script's first lines: a comment naming the script and how to render
 * it, the terminal chosen from `ext` (default png) and settings every plot
 * shares (UTF-8, comma-separated data, a grid, a boxed key). */
void eval_plot_preamble(FILE *g, const char *command, const char *script);

/* `set output '<stem>.'.ext` on g. */
void eval_plot_output(FILE *g, const char *stem);

/* Runs `gnuplot script` with dir as the working directory and waits for it.
 * script is the file name inside dir. O3M_ENOTFOUND, with a message naming
 * the Debian package and the script, when gnuplot is not installed: callers
 * then print the message and go on without plots. O3M_EIO when gnuplot
 * cannot be started or fails (the message names the script and the status). */
int eval_plot_run(const char *dir, const char *script, o3m_err *e);

/* eval_plot_run once per format in the set (a script written with
 * eval_plot_preamble), PNG first; stops at the first failure, which it
 * returns as eval_plot_run does, the message naming the format. */
int eval_plot_render(const char *dir, const char *script, int formats, o3m_err *e);

#endif
