/* eval_replay_out.h -- the result files of `o3m-eval replay`: what a
 * researcher publishes from a run, beside the table printed on stdout.
 *
 * For a run named STEM in DIR:
 *   STEM.csv        one row per variant (central, federated, partial, each
 *                   DP variant named by its epsilon, dp_eps_<eps> with eps
 *                   as %g prints it, the random baseline's mean, then each
 *                   random seed): columns
 *                   variant, cols, matched, clicks, ctr, rel_ctr, rel_mean,
 *                   rel_std, rel_min, rel_max, rel_ci95_lo, rel_ci95_hi.
 *                   The numbers are those of the stdout table (same
 *                   functions), at full precision; an undefined value
 *                   (no match, no random click) is an empty field.
 *   STEM.json       the same per variant plus the relative CTR against each
 *                   random seed, the random seeds' own tallies, the decision
 *                   agreement, the configuration (policy, parties, mask
 *                   seed, aggregation, whitening, limit, format options), the
 *                   data file's (and item file's) SHA-256, and the o3m
 *                   version; a DP variant adds its epsilon and its noise's
 *                   sigma per entry, and config.dp the DP settings (null
 *                   without DP variants). Undefined numbers are null.
 *   STEM_curve.csv  the CTR-over-rows curve (eval_replay_result.curve):
 *                   rows, then per variant that ran <v>_matched, <v>_clicks,
 *                   <v>_ctr, <v>_rel (CTR / the random CTR pooled over
 *                   seeds), then random_matched, random_clicks (both
 *                   averaged over the seeds) and random_ctr (pooled).
 *   STEM_curve.gp   the gnuplot script, and STEM_curve.<png|pdf|svg>: every
 *                   variant of the CSV, DP ones dashed.
 *
 * The relative CTR's 95% interval is mean +- t_{0.975,n-1} sd / sqrt(n)
 * over the n per-seed ratios CTR / CTR_random_s (eval_stats.h). Files are
 * overwritten; nothing is global. */
#ifndef EVAL_REPLAY_OUT_H
#define EVAL_REPLAY_OUT_H

#include <stdio.h>

#include "eval_replay.h"
#include "o3m_error.h"

#define EVAL_REPLAY_OUT_MAX_OPTS 12

/* What the files say about the run beyond the result and the config. All
 * strings are borrowed. */
typedef struct eval_replay_info {
  const char *format;       /* "news", "obd", "criteo-tsv", "criteo-csv" */
  const char *input;        /* the log's path, "-" for stdin */
  const char *item_context; /* obd's item file, or NULL */
  const char *whiten;       /* --whiten's spec, or NULL */
  char input_sha256[65];    /* lowercase hex, "" when not computed (stdin) */
  char item_sha256[65];
  int n_opts; /* format options, written as JSON strings */
  const char *opt_name[EVAL_REPLAY_OUT_MAX_OPTS];
  char opt_value[EVAL_REPLAY_OUT_MAX_OPTS][512];
} eval_replay_info;

/* SHA-256 of the file at path (OpenSSL's libcrypto), as 64 lowercase hex
 * digits and a NUL in hex. O3M_EIO naming the file when it cannot be read;
 * hex is then "". */
int eval_replay_sha256_file(const char *path, char hex[65], o3m_err *e);

/* Writes DIR/STEM.csv, DIR/STEM.json and DIR/STEM_curve.csv, creating DIR
 * if needed. O3M_EIO naming the file on a write error (files already
 * written stay). */
int eval_replay_write_results(const char *dir, const char *stem, const eval_replay_result *res,
                              const eval_replay_config *cfg, const eval_replay_info *info,
                              o3m_err *e);

/* Writes DIR/STEM_curve.gp (reading STEM_curve.csv) and renders it in each
 * format of the eval_plot.h set; lists the files on f (may be NULL).
 * O3M_ENOTFOUND when gnuplot is missing (the CSVs are there either way). */
int eval_replay_plot_curve(const char *dir, const char *stem, const eval_replay_result *res,
                           const eval_replay_config *cfg, const eval_replay_info *info,
                           int formats, FILE *f, o3m_err *e);

#endif
