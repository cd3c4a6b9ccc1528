/* eval_criteo_prep.h -- the paper's preprocessing of Criteo rows into bandit
 * events (KDD 2023 "Privacy Matters", section 5, following P2B).
 *
 * A Criteo row (Kaggle Display Advertising Challenge) is: label (click 0/1),
 * 13 integer columns I1..I13, 26 categorical columns C1..C26 (32-bit hashes
 * written as 8 hex digits); an empty field is missing. The paper turns a row
 * into a user (the integers) and an item (built from the categoricals):
 *
 *   user features   u in R^13: the integer columns, min-max scaled.
 *   item buckets    each present categorical value is hashed to one of 3
 *                   buckets; the item is the count vector (n0, n1, n2),
 *                   n0 + n1 + n2 = number of present categoricals <= 26.
 *   item label      Cantor pairing of the three counts, pi(pi(n0, n1), n2)
 *                   with pi(x, y) = (x + y)(x + y + 1) / 2 + y.
 *   arms            the 40 most frequent labels; arm a's item features v_a
 *                   are its three counts, min-max scaled.
 *   context         outer sum x_a[i * 3 + k] = u_i + v_{a,k}: d = 13 * 3 = 39.
 *   logged arm      the row's own label's arm; a row whose label is not among
 *                   the arms is skipped (and counted) by the reader.
 *
 * Choices the paper leaves open, made here (and echoed in the stats file):
 *   - Bucket of a categorical value s: if s is 1..8 hex digits (every real
 *     Criteo value), bucket = (the value as an unsigned integer) mod 3; the
 *     values are already hashes, so this is uniform and can be checked by
 *     hand ("05db9164" = 98275684, mod 3 = 1). Any other non-empty string:
 *     bucket = FNV-1a-32(s) mod 3. Missing values count in no bucket.
 *   - Integer transform before scaling: "raw" (default, the paper's plain
 *     min-max) or "log", t(x) = sign(x) log(1 + |x|), which keeps the heavy
 *     tails (I5 reaches millions) from squashing every other value to ~0.
 *   - Min-max: per column over the rows of the statistics pass, of present
 *     values only: s = (t(x) - min) / (max - min), clamped to [0, 1] (values
 *     outside the range can occur when the statistics come from a prefix);
 *     a constant or never-present column scales to 0.
 *   - Missing integer: 0 after scaling, i.e. the column minimum.
 *   - The count columns are scaled the same way, by their min and max over
 *     all statistics rows (not only the arms' rows): every column of the
 *     data set, user or item, is treated alike.
 *   - Ties in label frequency go to the smaller label; arm 0 is the most
 *     frequent label.
 *
 * The statistics (min/max per column, the arms) come from one streaming pass
 * over the file or a prefix of it (eval_criteo_scan) and can be written to a
 * small text file and read back, so a second run reuses them. */
#ifndef EVAL_CRITEO_PREP_H
#define EVAL_CRITEO_PREP_H

#include <stddef.h>
#include <stdint.h>

#include "o3m_error.h"

#define EVAL_CRITEO_NINT 13
#define EVAL_CRITEO_NCAT 26
#define EVAL_CRITEO_NBUCKET 3
#define EVAL_CRITEO_FIELDS (1 + EVAL_CRITEO_NINT + EVAL_CRITEO_NCAT)
#define EVAL_CRITEO_DIM (EVAL_CRITEO_NINT * EVAL_CRITEO_NBUCKET)
/* Count triples (n0, n1, n2) with each n in 0..26, indexed n0 * 27^2 + n1 * 27 + n2. */
#define EVAL_CRITEO_NTRIPLES ((EVAL_CRITEO_NCAT + 1) * (EVAL_CRITEO_NCAT + 1) * (EVAL_CRITEO_NCAT + 1))
#define EVAL_CRITEO_DEFAULT_ARMS 40
#define EVAL_CRITEO_MAX_ARMS 1000

typedef enum { EVAL_CRITEO_INT_RAW = 0, EVAL_CRITEO_INT_LOG = 1 } eval_criteo_transform;

int eval_criteo_transform_parse(const char *s, eval_criteo_transform *out);
const char *eval_criteo_transform_name(eval_criteo_transform t);

/* One parsed row. ival holds transformed values; imissing[i] is 1 when
 * column i was empty (ival[i] is then 0). */
typedef struct eval_criteo_row {
  int label;
  double ival[EVAL_CRITEO_NINT];
  unsigned char imissing[EVAL_CRITEO_NINT];
  int count[EVAL_CRITEO_NBUCKET];
} eval_criteo_row;

/* The bucket of one categorical field of n bytes (not NUL-terminated), or -1
 * for an empty (missing) field. See above for the rule. */
int eval_criteo_bucket(const char *s, size_t n);

/* pi(x, y) = (x + y)(x + y + 1) / 2 + y. */
uint64_t eval_criteo_cantor(uint64_t x, uint64_t y);

/* The item label pi(pi(n0, n1), n2). */
uint64_t eval_criteo_item_label(const int count[EVAL_CRITEO_NBUCKET]);

/* Index of a count triple in 0..EVAL_CRITEO_NTRIPLES-1. */
static inline int eval_criteo_triple_index(const int c[EVAL_CRITEO_NBUCKET]) {
  return (c[0] * (EVAL_CRITEO_NCAT + 1) + c[1]) * (EVAL_CRITEO_NCAT + 1) + c[2];
}

/* Parses one line of exactly 40 fields separated by sep ('\t' for Kaggle,
 * ',' for CSV); the line ends at its NUL. Integer fields accept plain
 * integers fast and any finite decimal ("260.0") through strtod. On error
 * returns O3M_EPARSE and sets *bad_field to the 1-based field number (0 for
 * the field count) and *why to a static phrase. */
int eval_criteo_parse(const char *line, char sep, eval_criteo_transform tr,
                      eval_criteo_row *row, int *bad_field, const char **why);

/* ---- statistics ---- */

typedef struct eval_criteo_stats {
  long long rows;   /* rows the statistics were computed from */
  long long clicks; /* of those, with label 1 */
  eval_criteo_transform transform;
  double imin[EVAL_CRITEO_NINT], imax[EVAL_CRITEO_NINT]; /* of transformed present values */
  double cmin[EVAL_CRITEO_NBUCKET], cmax[EVAL_CRITEO_NBUCKET];
  int n_arms;
  int arm_count[EVAL_CRITEO_MAX_ARMS][EVAL_CRITEO_NBUCKET];
  long long arm_rows[EVAL_CRITEO_MAX_ARMS];   /* rows with this arm's label */
  long long arm_clicks[EVAL_CRITEO_MAX_ARMS]; /* of those, clicks */
} eval_criteo_stats;

/* Accumulates statistics row by row (min/max and the frequency of every
 * count triple: a fixed table of 27^3 counters, so memory is constant). */
typedef struct eval_criteo_accum eval_criteo_accum;

int eval_criteo_accum_create(eval_criteo_accum **out, eval_criteo_transform tr);
void eval_criteo_accum_add(eval_criteo_accum *a, const eval_criteo_row *row);
/* Fills st with the min/max and the n_arms most frequent labels (fewer if
 * fewer distinct labels were seen). O3M_EINVAL if no row was added or n_arms
 * is out of 1..EVAL_CRITEO_MAX_ARMS. */
int eval_criteo_accum_finish(const eval_criteo_accum *a, int n_arms, eval_criteo_stats *st,
                             o3m_err *e);
void eval_criteo_accum_destroy(eval_criteo_accum *a);

/* Streams path (csv: header line first) and computes the statistics from
 * its first max_rows rows (all rows if max_rows <= 0). Malformed rows are
 * errors naming the line. Implemented in eval_reader_criteo.c beside the
 * reader, with which it shares the line reader and the header check. */
int eval_criteo_scan(const char *path, int csv, long long max_rows, eval_criteo_transform tr,
                     int n_arms, eval_criteo_stats *st, o3m_err *e);

/* Text form, one "key values" line each (see the .c file); written with 17
 * significant digits so it reads back exactly. Read errors name the line. */
int eval_criteo_stats_write(const eval_criteo_stats *st, const char *path, o3m_err *e);
int eval_criteo_stats_read(eval_criteo_stats *st, const char *path, o3m_err *e);

/* ---- features ---- */

/* Scaled user features u (13) of a row. */
void eval_criteo_user(const eval_criteo_stats *st, const eval_criteo_row *row,
                      double u[EVAL_CRITEO_NINT]);

/* Scaled item features v (3) of a count triple. */
void eval_criteo_item(const eval_criteo_stats *st, const int count[EVAL_CRITEO_NBUCKET],
                      double v[EVAL_CRITEO_NBUCKET]);

/* x[i * 3 + k] = u[i] + v[k], 39 values. */
void eval_criteo_outer_sum(const double u[EVAL_CRITEO_NINT], const double v[EVAL_CRITEO_NBUCKET],
                           double x[EVAL_CRITEO_DIM]);

#endif
