/* eval_reader.h -- streaming readers of logged bandit data for replay.
 *
 * A reader turns a log file into a sequence of events, one logged decision at
 * a time: the arm the logging policy played (0..K-1), the reward it got, and
 * the K x d matrix of the contexts every arm had at that moment (row a is
 * arm a's context). K and d are fixed when the reader is opened.
 *
 * Readers stream: they hold one fixed-size input buffer (EVAL_READER_BUFSZ)
 * and one K x d matrix, whatever the size of the file, and allocate nothing
 * per event. Every error names the file and the line. Rows that the format
 * defines as not usable (an Open Bandit row at another position, a Criteo row
 * whose item label is not among the arms) are skipped and counted
 * (eval_reader_skipped), never an error; malformed rows (wrong number of
 * fields, non-numbers, an arm or reward out of range) are errors.
 *
 * Formats (details and every preprocessing choice are documented in the
 * reader's .c file):
 *   news        news10k: "arm reward f(1,1) .. f(1,10) f(2,1) .. f(10,10)",
 *               space separated integers, arms 1..10: K = 10, d = 10.
 *   obd         Open Bandit Dataset (men.csv + item_context.csv), one
 *               position: items are arms; context = [hashed one-hot user
 *               features ; item features].
 *   criteo-tsv  Kaggle Display Advertising train.txt (no header).
 *   criteo-csv  the same columns as CSV with a header line.
 *               Criteo rows go through eval_criteo_prep (the paper's
 *               preprocessing): K = 40 arms, d = 13 * 3 = 39.
 *
 * Additive split. Some formats build every context as a row part plus an arm
 * part, x_{t,a} = w_t + c_a, with c_a the same on every row (OBD: [user ; 0]
 * + [0 ; item_a]; Criteo: u_i + v_{a,k}). Such readers expose C (K x d, the
 * c_a) through eval_reader_item_part() and give w_t with each event, so that
 * a caller may mask c_a once and w_t once per row instead of all K rows of
 * X every row (masking is linear). X is always filled as well. */
#ifndef EVAL_READER_H
#define EVAL_READER_H

#include <stdint.h>

#include "o3m_error.h"

/* Size of a reader's input buffer; also the longest line accepted. */
#define EVAL_READER_BUFSZ (1u << 20)

typedef enum {
  EVAL_FORMAT_NEWS = 1,
  EVAL_FORMAT_OBD = 2,
  EVAL_FORMAT_CRITEO_TSV = 3,
  EVAL_FORMAT_CRITEO_CSV = 4
} eval_format;

/* Parses "news", "obd", "criteo-tsv", "criteo-csv". O3M_EINVAL otherwise. */
int eval_format_parse(const char *s, eval_format *out);
const char *eval_format_name(eval_format f);

/* One logged event. The pointers are owned by the reader and valid until the
 * next call of eval_reader_next() or eval_reader_destroy(). */
typedef struct eval_event {
  int arm;          /* the logged arm, 0..K-1 */
  double reward;    /* the logged reward */
  const double *X;  /* K x d row-major contexts, row a = arm a (see
                       eval_reader_fill_matrix) */
  const double *w;  /* d: the row part when the reader is additively split, else NULL */
  double pscore;    /* the logging policy's probability of `arm` (its propensity
                       score) when the format logs it (obd's propensity_score,
                       in (0, 1]), else NaN */
  long long line;   /* 1-based line number of the event in the input */
} eval_event;

typedef struct eval_reader eval_reader;

/* Reads the next event. Returns 1 with *ev filled, 0 at the end of the input
 * (also on later calls), or a negative code with e naming file and line.
 * After an error the reader may only be destroyed. */
int eval_reader_next(eval_reader *r, eval_event *ev, o3m_err *e);

int eval_reader_arms(const eval_reader *r); /* K */
int eval_reader_dim(const eval_reader *r);  /* d */

/* Rows skipped so far by design of the format, and why (a short phrase such
 * as "label not among the top 40 arms"; "" for readers that never skip). */
uint64_t eval_reader_skipped(const eval_reader *r);
const char *eval_reader_skip_reason(const eval_reader *r);

/* Bytes consumed so far and the input's size in bytes (-1 if unknown, e.g.
 * stdin or a pipe); for progress and ETA. */
long long eval_reader_bytes_read(const eval_reader *r);
long long eval_reader_size(const eval_reader *r);

/* The arm part C (K x d, row a = c_a) of an additively split reader, or NULL
 * when the contexts have no such split (news). Owned by the reader. */
const double *eval_reader_item_part(const eval_reader *r);

/* For additively split readers: with on = 0 the reader stops filling X
 * (events then carry X = NULL and only w), which saves K x d additions per
 * event for a caller that rebuilds the contexts from w and the item part, as
 * replay does. Ignored (X is always filled) by readers without a split. */
void eval_reader_fill_matrix(eval_reader *r, int on);

/* A one-line description of the features ("criteo: 13 user x 3 item, outer
 * sum"), owned by the reader. */
const char *eval_reader_describe(const eval_reader *r);

void eval_reader_destroy(eval_reader *r);

/* ---- constructors; path "-" reads standard input ---- */

/* news10k. */
int eval_reader_open_news(eval_reader **out, const char *path, o3m_err *e);

/* Open Bandit Dataset. */
typedef struct eval_obd_options {
  int position;     /* the one position used, 1..3; 0 = every position */
  int user_buckets; /* one-hot slots per user feature column, one per distinct value in
                     * order of first appearance (default 16; more values: an error) */
} eval_obd_options;

void eval_obd_options_default(eval_obd_options *o);

/* path is the log (men.csv), item_path the item table (item_context.csv),
 * which is read whole at open (one row per item). */
int eval_reader_open_obd(eval_reader **out, const char *path, const char *item_path,
                         const eval_obd_options *opt, o3m_err *e);

/* Criteo: csv selects the header-carrying CSV form, otherwise the Kaggle
 * tab-separated form. stats are the preprocessing statistics (see
 * eval_criteo_prep.h, e.g. from eval_criteo_scan); they are copied. */
struct eval_criteo_stats;
int eval_reader_open_criteo(eval_reader **out, const char *path, int csv,
                            const struct eval_criteo_stats *stats, o3m_err *e);

#endif
