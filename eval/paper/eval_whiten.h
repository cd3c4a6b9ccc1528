/* eval_whiten.h -- the whitening defence for offline runs.
 *
 * `o3m-eval regret --whiten` and `o3m-eval replay --whiten` let chosen
 * parties whiten their own columns as the daemons do with `whiten = true`
 * (party/o3m_features.h, "Whitening"): each chosen party j maps its block
 * x^j to W_j x^j, W_j its symmetric inverse square root of the covariance
 * of its columns over a calibration sample (the stand-in for the party's
 * table), computed by the same routine the daemons use
 * (o3m_moments_whitener, linalg/o3m_moments.h). Every learner then sees the
 * whitened contexts; the rewards and the regret stay those of the raw
 * contexts. */
#ifndef EVAL_WHITEN_H
#define EVAL_WHITEN_H

#include "o3m_error.h"
#include "o3m_mask.h"

typedef struct eval_whiten eval_whiten;

/* Reads spec: "all", "none", or party indices in column order (0 = the
 * active participant), comma-separated, e.g. "1,2". Sets on[j] = 1 for the
 * chosen parties of part, 0 for the others. O3M_EINVAL (e names the field)
 * for anything else or an index outside 0..part->m - 1. */
int eval_whiten_parse(const char *spec, const o3m_partition *part,
                      unsigned char on[O3M_MAX_PARTIES], o3m_err *e);

/* Computes W_j for every chosen party from the n >= 2 rows of X (n x
 * part->d, row-major). *out is NULL when no party is chosen (nothing to
 * do); on failure *out is NULL and e says why. */
int eval_whiten_create(eval_whiten **out, const o3m_partition *part,
                       const unsigned char on[O3M_MAX_PARTIES], long n, const double *X,
                       o3m_err *e);

/* Whitens the chosen parties' blocks of the n rows of X (n x d) in place.
 * w may be NULL (nothing to do). Allocation-free; uses a scratch row inside
 * w, so one thread at a time. */
void eval_whiten_apply(eval_whiten *w, long n, double *X);

void eval_whiten_destroy(eval_whiten *w);

#endif
