/* eval_audit.h -- `o3m-audit` (alias `o3m-eval audit`): what the active
 * participant (AP) could learn about one passive participant's (PP's)
 * feature columns.
 *
 * A department runs it on its own table before it joins. Everything is
 * simulated in one process from the mathematics of the protocol: one mask Q
 * is drawn (seeded, evaluation only), cut into the parties' blocks Q^k, and
 * every party's rows are masked with o3m_block_apply, the routine the PP
 * daemon runs. The audited party is `party` (1..m-1; party 0 is the AP).
 *
 * Protocol modes, i.e. what the attacker (the AP) observes per user i:
 *   PER_PARTY    y_i = Q^j x^j_i, the audited party's part alone (today's
 *                protocol: each PP's part reaches the AP separately).
 *   SECAGG       s_i = sum over PPs k >= 1 of Q^k x^k_i (secure
 *                aggregation: the AP receives only the sum).
 *   SECAGG_OWN   s_i as above, plus everything the AP holds itself: its
 *                block Q^0, so it projects s onto the orthogonal complement
 *                of span Q^0, which is where s lives, in d - d_0
 *                coordinates, and its own columns x^0_i. Since s alone is
 *                an invertible linear image of all PPs' columns, Q^0 adds
 *                nothing the attacks below can use beyond a smaller space;
 *                the AP's own columns could help only through a correlation
 *                with yours, which the audit does not model (with synthetic
 *                others they are independent of your table).
 * Under factored batches (protocol 6) the AP sees each row's user half and
 * item half apart: eval_audit_factored.h plays the same attacks on them.
 *
 * Attacks (a strong attacker: it knows the protocol, that Q is orthogonal,
 * every dimension, and it may choose which ids to ask about). Each reports,
 * per audited column, |corr| between the true and the recovered values over
 * all audited users; the summary is the mean, min and max over the columns
 * that are not constant (a constant column has no correlation: NaN).
 *   KP        known plaintext: the attacker knows the audited party's raw
 *             columns of n users (drawn at random) and regresses them on its
 *             observations (minimum-norm least squares, dgelsd), then applies
 *             the map to every user. Per-party mode: n = 1..2 d_j (exact at
 *             n = d_j when those rows span the party's columns; random rows
 *             of a sparse table may not). Secure modes: n = 1..2 (d - d_0),
 *             exact at d - d_0 likewise; s is an invertible
 *             linear image of all PPs' columns, so the regression is exact at
 *             n = d - d_0 rows even though the others' columns stay unknown.
 *   KP_FULL   secure modes only: the attacker knows n full rows of ALL PPs'
 *             columns, estimates the map x^PP -> s by least squares and
 *             inverts it for every user (the strongest known-plaintext case;
 *             for noiseless data it coincides with KP, a useful cross-check).
 *   PCA       the eigenvectors of the covariance of the observations of N
 *             users (dsyevd): the top d_j (per-party) or d - d_0 (secure)
 *             components, matched one to one to the columns (greedy on
 *             |corr|, sign-free).
 *   ICA       FastICA (symmetric, tanh = log-cosh contrast) on the PCA-
 *             whitened observations of N users; components matched likewise.
 *   DUMMY_PCA, DUMMY_ICA
 *             the attacker asks about N ids nobody holds and gets the
 *             parties' dummy rows (o3m_features_fill under a dummy-row key,
 *             so whatever construction party/o3m_features implements is
 *             audited); it learns the PCA/ICA basis from them and applies it
 *             to the real users' observations. Printed beside PCA/ICA on real
 *             traffic: a dummy that teaches more than real traffic shows here.
 * Norms and Gram: in per-party mode ||y_i|| = ||x^j_i|| and y_i . y_k =
 * x^j_i . x^j_k exactly (reported as the largest relative error); in secure
 * modes the correlation of ||s_i|| with ||x^j_i||, and of s_i . s_k with
 * x^j_i . x^j_k over random pairs.
 *
 * Threads: a result is read-only once returned; the functions are not
 * thread-safe on one input. Everything is allocated in the calls named; no
 * global state. */
#ifndef EVAL_AUDIT_H
#define EVAL_AUDIT_H

#include <stdint.h>
#include <stdio.h>

#include "o3m_error.h"
#include "o3m_features.h"
#include "o3m_mask.h"

typedef enum {
  EVAL_AUDIT_PER_PARTY = 0,
  EVAL_AUDIT_SECAGG = 1,
  EVAL_AUDIT_SECAGG_OWN = 2,
  EVAL_AUDIT_N_MODES = 3
} eval_audit_mode;

typedef enum {
  EVAL_AUDIT_KP = 0,
  EVAL_AUDIT_KP_FULL = 1,
  EVAL_AUDIT_PCA = 2,
  EVAL_AUDIT_ICA = 3,
  EVAL_AUDIT_DUMMY_PCA = 4,
  EVAL_AUDIT_DUMMY_ICA = 5,
  EVAL_AUDIT_N_SERIES = 6
} eval_audit_series;

/* Short names for files and tables: "per-party", "secagg", "secagg+own";
 * "kp", "kp-full", "pca", "ica", "dummy-pca", "dummy-ica". */
const char *eval_audit_mode_name(eval_audit_mode m);
const char *eval_audit_series_name(eval_audit_series s);

/* Where the rows come from.
 *   The audited party: user_table and/or item_table in the o3m_features
 *   format (row i of the audit is user i with item i mod n_items; with an
 *   item table alone, item i), or bank = 1 (the bank-like table of
 *   eval_tables_write_bank, `rows` customers, written into work_dir), or a
 *   data set (dataset "news" or "obd" read from data_dir: row t is the
 *   context of the arm logged at event t, position 1 for OBD; every party's
 *   columns are its slice of those contexts, and the audited party's and
 *   the other PPs' slices are written into work_dir as tables).
 *   The other parties (including the AP): their own user table when
 *   other_tables[k] names one (row r of it is audited row r, matched by
 *   position; it needs at least as many rows), else their slices of the
 *   data set, else standard normal columns (eval_tables_write_synthetic,
 *   one seed per party): a documented choice, since the audit cannot know
 *   the others' tables; real others with large scales hide more in the
 *   secure modes.
 * rows caps the number of audited users (0: every row of the table; with
 * bank or a data set 0 means 1000).
 * whiten = 1: the audited party applies the whitening defence
 * (o3m_features_whiten, party/o3m_features.h) to its own tables, so its
 * parts and its dummy rows are made from W x. The truth every attack is
 * scored against stays the raw x: the department's question is whether its
 * raw columns leak. Only the audited party whitens; the other PPs' tables
 * (given, data-set slices or synthetic) are used as they are, since whether
 * they whiten is their choice. score_whitened = 1 scores the attacks on the
 * whitened values W x instead (an invertible image of x, so recovering it
 * is a leak too); it needs whiten (O3M_EINVAL otherwise). In per-party mode
 * the norms and Gram are exact for whatever the party sends: for W x, not
 * for the raw x, so with whiten alone they are reported as correlations. Known plaintext is not affected (x = W^-1
 * Q^jT y is still linear in what the AP sees); PCA is, and ICA may not be
 * (whitened independent non-Gaussian columns are still separable). */
typedef struct eval_audit_source {
  o3m_partition part;
  int party;              /* 1..part.m - 1 */
  const char *user_table; /* or NULL */
  const char *item_table; /* or NULL */
  int bank;               /* 1: the bank-like demo table */
  const char *dataset;    /* NULL, "news" or "obd" */
  const char *data_dir;   /* the shared data directory (see its README) */
  const char *work_dir;   /* written tables go here (created if missing) */
  const char *const *other_tables; /* NULL or part.m entries, NULL = none */
  int rows;
  uint64_t seed;
  int whiten;         /* 1: the audited party whitens its tables (see below) */
  int score_whitened; /* 1 (with whiten): the truth is W x, not x */
} eval_audit_source;

typedef struct eval_audit_input eval_audit_input;

/* Builds the input: every PP's table loaded with o3m_features_load and given
 * a dummy-row key derived from seed, and the N x d rows. Errors name the
 * option or the file: O3M_EINVAL (bad source, e.g. party 0 or no table),
 * O3M_EDIM (the tables' columns differ from dims[party]), O3M_ENOTFOUND
 * (the data set is absent: the message names the path and the README),
 * table errors as o3m_features_load gives them. On failure *out is NULL. */
int eval_audit_input_build(eval_audit_input **out, const eval_audit_source *src, o3m_err *e);
void eval_audit_input_destroy(eval_audit_input *in);
int eval_audit_input_users(const eval_audit_input *in);
/* The audited party's column names (as in its table header, or c<index>
 * for a data set); valid while in lives. */
const char *eval_audit_input_column(const eval_audit_input *in, int c);

typedef struct eval_audit_config {
  uint64_t seed;    /* the mask, the known rows, ICA's start */
  int dummies;      /* dummy ids asked (0: as many as users) */
  int ica_max_iter; /* FastICA iterations (200) */
  int known_max;    /* largest n of known plaintext (0: twice the exact count) */
  int modes;        /* bit (1 << mode) per mode to run (all) */
  /* Per mode, the known-row counts n to try instead of the grid up to
   * known_max (NULL: the grid); eval_audit_factored_run passes the whole
   * rows' points so that the figures stand side by side. */
  const int *kp_points[EVAL_AUDIT_N_MODES];
  int n_kp_points[EVAL_AUDIT_N_MODES];
} eval_audit_config;

void eval_audit_config_default(eval_audit_config *c);

typedef struct eval_audit eval_audit;

/* Runs every attack of the selected modes. On failure *out is NULL. */
int eval_audit_run(eval_audit **out, const eval_audit_input *in, const eval_audit_config *c,
                   o3m_err *e);
void eval_audit_destroy(eval_audit *a);

/* One point of a series: x is n (known rows) or N (users or dummies seen);
 * corr has d_j entries (|corr| per audited column, NaN for a constant
 * column), owned by the result. */
typedef struct eval_audit_point {
  int x;
  double mean, min, max;
  const double *corr;
} eval_audit_point;

int eval_audit_dj(const eval_audit *a);
/* Number of points of a series (0 when not run or not applicable). */
int eval_audit_n_points(const eval_audit *a, eval_audit_mode m, eval_audit_series s);
/* Point i, or O3M_EINVAL when out of range. */
int eval_audit_point_get(const eval_audit *a, eval_audit_mode m, eval_audit_series s, int i,
                         eval_audit_point *out);

/* Norms and Gram exposure of one mode. Per-party: the largest relative
 * errors (exact == about 1e-15); secure, or per-party when the party
 * whitens and the truth is its raw x: the correlations. */
typedef struct eval_audit_exposure {
  int exact;         /* 1 in per-party mode, unless whitened (see above) */
  double norm;       /* max rel. error (exact) or corr(||s_i||, ||x^j_i||) */
  double gram;       /* max rel. error (exact) or corr(s_i.s_k, x^j_i.x^j_k) */
} eval_audit_exposure;
int eval_audit_exposure_get(const eval_audit *a, eval_audit_mode m, eval_audit_exposure *out);

/* The readable tables on f: per mode the exposure, every series' points and
 * the per-column figures at each attack's strongest setting. */
void eval_audit_print(const eval_audit *a, const eval_audit_input *in, FILE *f);

/* DIR/audit_<mode>_<series>.csv per series that ran (columns: n or N,
 * mean, min, max, then one per audited column), DIR created if missing. */
int eval_audit_write_csv(const eval_audit *a, const eval_audit_input *in, const char *dir,
                         o3m_err *e);

/* DIR/audit_plots.gp and, through gnuplot (eval_plot_render), per mode
 * audit_<mode>_vs_n.<ext> and audit_<mode>_vs_N.<ext> for each format of
 * the eval_plot.h set `formats` (listed on f). As eval_plot_render:
 * O3M_ENOTFOUND when gnuplot is missing. */
int eval_audit_plot(const eval_audit *a, const char *dir, int formats, FILE *f, o3m_err *e);

/* The command line of o3m-audit, with main()'s signature and its exit
 * status (0 ok, 1 runtime failure, 2 usage error); `o3m-eval audit`
 * (eval_audit_main, eval_cmds.h) is the same command under the name
 * "o3m-eval audit". */
int eval_audit_tool_main(int argc, char **argv);

#endif
