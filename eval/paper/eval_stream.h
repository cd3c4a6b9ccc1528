/* eval_stream.h -- reader of full-information stream files.
 *
 * Format (what `o3m-eval simulate` reads and `gen-synthetic` writes): a
 * header line `round,arm,reward,x1,...,xd`, then K rows per round with arms
 * 0..K-1 in order. Each row is arm's context and the reward it would give
 * that round. Values are decimal text. K is learned from the first round and
 * must stay the same; rounds carry strictly increasing round numbers.
 *
 * The file is streamed: memory is one round (K x d) plus one line. Every
 * error names the line: ragged rows, non-numbers, NaN or infinities, values
 * beyond O3M_MAX_INPUT_ABS (o3m_limits.h), arms out of order, a changing K,
 * more than EVAL_STREAM_MAX_ARMS arms, a short last round. Accepted as the
 * replay readers accept them: blank lines (skipped), subnormal values. A
 * directory is refused at open. A file with only the header has no rounds:
 * eval_stream_next returns 0 at once (`simulate` reports it as an error). */
#ifndef EVAL_STREAM_H
#define EVAL_STREAM_H

#include <stdio.h>

#include "o3m_error.h"
#include "o3m_limits.h"

#define EVAL_STREAM_MAX_ARMS O3M_EVAL_MAX_K

typedef struct eval_stream eval_stream;

/* Opens path ("-" for stdin) and reads the header. */
int eval_stream_open(eval_stream **out, const char *path, o3m_err *e);
void eval_stream_close(eval_stream *s);

int eval_stream_dim(const eval_stream *s);
/* K; 0 before the first round was read. */
int eval_stream_arms(const eval_stream *s);

/* Reads the next round. Returns 1 with *round, *X (K x d) and *rewards (K)
 * pointing into the reader's buffers (valid until the next call), 0 at the
 * end of the file, or a negative code with e naming the line. */
int eval_stream_next(eval_stream *s, long *round, const double **X, const double **rewards,
                     o3m_err *e);

/* Writes the header line for dimension d. */
void eval_stream_write_header(FILE *f, int d);
/* Writes one round of K rows. Values are printed with 17 significant digits
 * so that they read back bit for bit. */
void eval_stream_write_round(FILE *f, long round, int K, int d, const double *X,
                             const double *rewards);

#endif
