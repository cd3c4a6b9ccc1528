/* eval_regret.h -- the paper's synthetic regret experiment (Figures 4 and 6).
 *
 * For every seed one synthetic stream (eval_synth.h, seeded with that seed)
 * is drawn round by round and fed to all variants of every configuration
 * (algorithm x model) at once, so they see the same contexts and the same
 * noisy rewards:
 *
 *   central     the plain policy on the full context x (d columns);
 *   federated   the same policy on Q x, masked and summed in-process by
 *               eval_masker (one mask per seed, drawn from a seeded, NOT
 *               cryptographically secure generator for reproducibility);
 *   local       the active participant alone: the first party's columns only;
 *   ratio r     the first ceil(r d) columns only (the paper's partial ratio);
 *   outage      the active participant as it runs with [federation]
 *               fallback = local (active_participant/ap_fallback.h): the
 *               federated learner beside a local one on the first party's
 *               columns; rounds [outage_a, outage_b) have a passive party
 *               missing and are decided and learned by the local learner
 *               alone, the others by the federated one, whose rewards the
 *               local learner learns too (only with --outage);
 *   dp eps      the full context, but every passive party (all but the first)
 *               releases its columns through the Gaussian mechanism of
 *               eval/peers/dp/bl_dp.h every round: rows clipped to dp_clip,
 *               noise calibrated so that the T rounds together are
 *               (eps, dp_delta)-DP per party by zCDP composition. The learner
 *               chooses and updates on the released contexts; regret is on
 *               the true ones. Noise is seeded (reproducible, not private).
 *
 * With `whiten` the chosen parties' columns are whitened before any
 * variant sees them (eval_whiten.h), so central is the central learner on
 * the whitened features and federated must still decide as it does.
 *
 * Regret is measured with the expected rewards: per round
 * max_a x_a^T theta* - x_{a_t}^T theta*; each learner is fed the noisy
 * reward of the arm it chose. The policies' Thompson-sampling seed is the
 * stream seed for every variant.
 *
 * Beside those variants each configuration keeps a "same-history" federated
 * learner: masked inputs, but updated with the central learner's chosen arm.
 * Its per-round estimated reward x^T theta and width sqrt(x^T Lambda^-1 x)
 * are compared with the central learner's at the central's chosen arm. For
 * LinUCB and disjoint LinTS the federated learner makes the central's
 * decisions, so the two coincide; for shared LinTS the federated learner's
 * draws differ sample by sample (equal only in distribution), its history
 * drifts away from the central's, and the same-history learner is what shows
 * that the posterior it samples from is the same.
 *
 * Results are kept every `every`-th step (and at the last step) per seed; the
 * writers turn them into CSVs (mean and 95% t band over seeds), a summary table
 * and gnuplot plots (PNG, PDF, SVG). Everything is allocated in eval_regret_run(); nothing is
 * global, and a result is read-only once returned. */
#ifndef EVAL_REGRET_H
#define EVAL_REGRET_H

#include <stdint.h>
#include <stdio.h>

#include "o3m_policy.h"
#include "o3m_error.h"
#include "o3m_mask.h"

/* Largest number of partial ratios in one run. */
#define EVAL_REGRET_MAX_RATIOS 8
/* Largest number of DP variants in one run. */
#define EVAL_REGRET_MAX_DP 4
/* Most variants of one configuration. */
#define EVAL_REGRET_MAX_VARIANTS (3 + EVAL_REGRET_MAX_RATIOS + EVAL_REGRET_MAX_DP + 1)

/* Variant indices: 0..2 fixed, then one per partial ratio, then one per DP
 * epsilon (eval_regret_dp_variant), then the outage variant if any
 * (eval_regret_outage_variant). */
enum {
  EVAL_REGRET_CENTRAL = 0,
  EVAL_REGRET_FEDERATED = 1,
  EVAL_REGRET_LOCAL = 2,
  EVAL_REGRET_RATIO0 = 3 /* ratio i is EVAL_REGRET_RATIO0 + i */
};

/* Bit sets for eval_regret_config.algos and .models. */
#define EVAL_REGRET_LINUCB 1
#define EVAL_REGRET_LINTS 2
#define EVAL_REGRET_SHARED 1
#define EVAL_REGRET_DISJOINT 2

/* A plain value; eval_regret_config_default() fills the paper's settings. */
typedef struct eval_regret_config {
  int d;              /* context dimension (paper: 100) */
  int K;              /* arms per round (paper: 10) */
  long T;             /* rounds (paper: 5000) */
  int n_seeds;        /* repeats (paper: 5) */
  uint64_t first_seed; /* seeds first_seed .. first_seed + n_seeds - 1 */
  double noise_var;   /* reward noise variance (paper: 0.05) */
  double alpha;       /* LinUCB beta (paper: 0.5) */
  double v;           /* LinTS v (paper: 0.01) */
  double lambda;      /* ridge (paper: 1) */
  int refactor_every; /* policy refactorization period */
  o3m_partition part; /* the federation's columns; part.d must equal d */
  int n_ratios;
  double ratios[EVAL_REGRET_MAX_RATIOS]; /* each in (0, 1] */
  int algos;  /* EVAL_REGRET_LINUCB | EVAL_REGRET_LINTS */
  int models; /* EVAL_REGRET_SHARED | EVAL_REGRET_DISJOINT */
  int every;  /* keep every every-th step, and the last */
  /* Parties that whiten their columns (eval_whiten.h: "all", "none" or
   * indices, NULL = none). Their maps come per seed from
   * EVAL_REGRET_WHITEN_ROWS contexts of an independent stream; every
   * learner then sees the whitened contexts, the regret stays that of the
   * raw ones. */
  const char *whiten;
  int aggregation; /* eval_aggregation of the federated variant (default secure) */
  int n_dp;        /* DP variants (0 by default) */
  double dp_eps[EVAL_REGRET_MAX_DP]; /* each > 0: the budget over all T rounds */
  double dp_delta;                   /* (1e-5) */
  double dp_clip;                    /* L2 bound of a row of a party's block (1) */
  /* The outage variant: rounds [outage_a, outage_b) (1-based, 1 <= a < b
   * <= T + 1) with a passive party missing; a = b = 0: no such variant. */
  long outage_a, outage_b;
} eval_regret_config;

/* The variant index of DP epsilon i: EVAL_REGRET_RATIO0 + n_ratios + i. */
int eval_regret_dp_variant(const eval_regret_config *c, int i);

/* The outage variant's index (after the DP variants), or -1 without one. */
int eval_regret_outage_variant(const eval_regret_config *c);

/* Contexts each whitening map is estimated from. */
#define EVAL_REGRET_WHITEN_ROWS 20000

/* Final numbers of one configuration, over all seeds. */
typedef struct eval_regret_summary {
  int n_variants;
  int cols[EVAL_REGRET_MAX_VARIANTS];          /* columns each variant sees */
  double final_mean[EVAL_REGRET_MAX_VARIANTS]; /* R(T) mean over seeds */
  double final_std[EVAL_REGRET_MAX_VARIANTS];  /* sample std (0 for 1 seed) */
  double agreement;       /* rounds where federated chose as central, fraction */
  double max_mean_diff;   /* max |x^T theta| difference, same-history learner */
  double max_width_diff;  /* max |sqrt(x^T Lambda^-1 x)| difference, same */
  double max_theta_diff;  /* max over steps and seeds of | ||theta_fed|| - ||theta_c|| | */
  double max_theta_diff_same; /* the same for the same-history learner */
} eval_regret_summary;

typedef struct eval_regret eval_regret;

/* d 100, K 10, T 5000, 5 seeds from 1, noise 0.05, alpha 0.5, v 0.01,
 * lambda 1, refactor_every 1000, parties 20,20,20,20,20, ratios 0.2 and 0.8,
 * both algorithms, shared model, every 10th step, no DP variant (delta 1e-5
 * and clip 1 when some are asked for). */
void eval_regret_config_default(eval_regret_config *c);

/* Columns a partial ratio keeps: ceil(r d), at least 1 (a tolerance of 1e-9
 * keeps 0.7 * 100 at 70 despite rounding). */
int eval_regret_ratio_cols(double r, int d);

/* Validates c (errors name the option) and runs the whole experiment. On
 * success *out holds the results; free with eval_regret_destroy(). On
 * failure *out is NULL. */
int eval_regret_run(eval_regret **out, const eval_regret_config *c, o3m_err *e);
void eval_regret_destroy(eval_regret *r);

const eval_regret_config *eval_regret_config_of(const eval_regret *r);
/* Wall-clock seconds eval_regret_run took. */
double eval_regret_seconds(const eval_regret *r);
/* Number of kept steps (rows of each CSV). */
int eval_regret_n_steps(const eval_regret *r);

/* Summary of one configuration. O3M_ENOTFOUND if it was not run. */
int eval_regret_summary_of(const eval_regret *r, o3m_algo a, o3m_model_kind m,
                           eval_regret_summary *out);

/* R(T) of one variant for the seed with index s (0-based); NAN if the
 * configuration was not run or an index is out of range. */
double eval_regret_final(const eval_regret *r, o3m_algo a, o3m_model_kind m, int variant, int s);

/* Creates dir and its missing parents (like mkdir -p); existing directories
 * are fine. Errors name the component. Also used by `o3m-eval cost`. */
int eval_regret_mkdir_p(const char *dir, o3m_err *e);

/* Writes DIR/regret_<algo>_<model>.csv for every configuration, creating DIR
 * and its parents if needed. Columns: t, then for every variant <name>_mean,
 * <name>_lo, <name>_hi (the 95% band mean -+ t_{0.975,n-1} std / sqrt(n) over the
 * n seeds, eval_stats.h; equal to the mean for one seed), then
 * theta_norm_diff_mean, theta_norm_diff_maxabs (||theta_fed|| -
 * ||theta_central||, disjoint: over the stacked per-arm thetas) and
 * theta_norm_diff_same_history_maxabs. Variant names: central, federated,
 * local, ratio<r> (e.g. ratio0.2), dp<eps> (e.g. dp100). */
int eval_regret_write_csv(const eval_regret *r, const char *dir, o3m_err *e);

/* The summary table and notes on f. */
void eval_regret_print_summary(const eval_regret *r, FILE *f);

/* Writes DIR/regret_plots.gp and runs gnuplot on it inside DIR once per
 * format in the eval_plot.h set `formats`, producing fig4a..d and fig6a..b
 * per model (file names listed on f; figure numbers are in the names, not
 * the titles). Bands are the CSV's 95% t bands, named in the key. Returns
 * O3M_ENOTFOUND, with a message, if gnuplot cannot be run; the CSVs are not
 * touched either way. */
int eval_regret_plot(const eval_regret *r, const char *dir, int formats, FILE *f, o3m_err *e);

#endif
