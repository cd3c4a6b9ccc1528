/* o3m_mask.h -- the privacy mask Q and its column blocks Q^j.
 *
 * The privacy mask generator draws Q, a d x d random orthogonal matrix: a
 * Gaussian matrix orthonormalized by modified Gram-Schmidt with a second
 * re-orthogonalization pass ("twice is enough"), redrawn in the (measure-zero)
 * case that it came out as the identity or a signed permutation, which would
 * not mask anything. Participant j gets only the column block Q^j (d x d_j)
 * for its feature columns; it sends Q^j x^j and the active participant sums
 * the M vectors into Q x.
 *
 * A mask carries a 64-bit id (random, drawn with Q) so that vectors masked
 * with different draws are never summed together.
 *
 * Partitions: the d context columns are split in order across M parties by
 * the dims d_1..d_M (public); o3m_partition parses "20,20,20,20,20". */
#ifndef O3M_MASK_H
#define O3M_MASK_H

#include <stddef.h>
#include <stdint.h>

#include "o3m_error.h"
#include "o3m_limits.h"
#include "o3m_rng.h"


typedef struct o3m_mask o3m_mask;
typedef struct o3m_block o3m_block;

/* The split of d columns across m parties: party j owns columns
 * [offset[j], offset[j] + dims[j]). A plain value; o3m_partition_parse fills
 * it and nothing needs freeing. */
typedef struct o3m_partition {
  int m;
  int d;
  int dims[O3M_MAX_PARTIES];
  int offset[O3M_MAX_PARTIES];
} o3m_partition;

/* Parses a comma-separated list of positive dims. Errors name the offending
 * entry. */
int o3m_partition_parse(o3m_partition *p, const char *text, o3m_err *e);

/* Fills p from an array of dims. */
int o3m_partition_from_dims(o3m_partition *p, int m, const int *dims, o3m_err *e);

/* Splits d columns into m near-equal consecutive blocks, the first d % m
 * of them one column wider: party j gets d / m + (j < d % m). O3M_EINVAL,
 * p unchanged, unless 1 <= m <= min(d, O3M_MAX_PARTIES); otherwise as
 * o3m_partition_from_dims. */
int o3m_partition_even(o3m_partition *p, int d, int m, o3m_err *e);

/* Draws a mask of dimension d (1 <= d <= O3M_MAX_DIM) from rng. Production
 * code passes an O3M_RNG_OS handle; tests and evaluation may pass a seeded
 * one. For d == 1 the only orthogonal matrices are +1 and -1 and both are
 * signed permutations, so d == 1 yields Q = [-1] or [+1] as drawn: document
 * it to users, since such a mask hides nothing. */
int o3m_mask_generate(o3m_mask **out, int d, o3m_rng *rng);

/* Wraps a caller-supplied d x d matrix (copied) as a mask with the given id;
 * used by tests and by the in-process simulation. No orthogonality check. */
int o3m_mask_from_matrix(o3m_mask **out, int d, const double *Q, uint64_t id);

void o3m_mask_destroy(o3m_mask *m);

int o3m_mask_dim(const o3m_mask *m);
uint64_t o3m_mask_id(const o3m_mask *m);
/* The d x d matrix, row-major; owned by the mask. */
const double *o3m_mask_matrix(const o3m_mask *m);

/* Overwrites Q with zeros (explicit_bzero) so that a PMG can forget it once
 * every party holds its block. The handle stays valid for destroy only. */
void o3m_mask_forget(o3m_mask *m);

/* Orthonormalizes the rows of the row-major d x d matrix A in place by
 * modified Gram-Schmidt with a second re-orthogonalization pass. For a square
 * matrix orthonormal rows are orthonormal columns too. O3M_ENOTPD if a row is
 * numerically dependent on the previous ones (its norm falls below 1e-10 of
 * its original norm). */
int o3m_mgs_orthonormalize(double *A, int d);

/* 1 if Q (d x d) is, up to tol, a signed permutation (which includes the
 * identity); 0 otherwise. */
int o3m_mask_is_signed_permutation(const double *Q, int d, double tol);

/* ---- column blocks ---- */

/* Copies columns [col0, col0 + dj) of m into a new block. */
int o3m_block_from_mask(o3m_block **out, const o3m_mask *m, int col0, int dj);

/* A block received over the wire: data is d x dj row-major, copied.
 * Non-finite entries give O3M_ENONFINITE. */
int o3m_block_create(o3m_block **out, int d, int dj, const double *data, uint64_t mask_id);

/* Wipes the values (explicit_bzero) and frees the block. NULL is accepted. */
void o3m_block_destroy(o3m_block *b);

/* ---- the block as bytes (wire and disk) ----
 *
 * A block crosses the wire (sealed, o3m_seal.h) and lies on disk
 * (o3m_block_store.h) in one form: its d x d_j values row-major, each an
 * IEEE-754 binary64 in little-endian byte order, 8 d d_j bytes in all.
 * These two functions are the only converters, and neither leaves a copy
 * of a value anywhere but in the buffers it is given. */

/* 8 * d * dj: the length of that form. */
size_t o3m_block_le_bytes(int d, int dj);

/* Writes b's values in that form into out (o3m_block_le_bytes of b's
 * shape). out then holds the secret block: the caller wipes it
 * (explicit_bzero) as soon as it is used. */
void o3m_block_write_le(const o3m_block *b, unsigned char *out);

/* The source of a block's bytes for o3m_block_read_le: writes exactly n
 * bytes into buf and returns 0, or returns a negative O3M code. */
typedef int (*o3m_block_fill_fn)(void *ctx, unsigned char *buf, size_t n);

/* Builds a d x dj block of mask mask_id from bytes in that form without a
 * plaintext copy outside the block: fill writes them straight into the new
 * block's own storage, where they are decoded in place. A non-finite value
 * gives O3M_ENONFINITE; O3M_EINVAL for a bad shape, O3M_ENOMEM; a negative
 * return of fill is passed on. On failure the storage is wiped before it
 * is freed and *out is NULL. */
int o3m_block_read_le(o3m_block **out, int d, int dj, uint64_t mask_id, o3m_block_fill_fn fill,
                      void *ctx);

int o3m_block_rows(const o3m_block *b);  /* d */
int o3m_block_cols(const o3m_block *b);  /* d_j */
uint64_t o3m_block_mask_id(const o3m_block *b);
const double *o3m_block_data(const o3m_block *b);  /* d x d_j row-major */

/* Masks K contexts of this party at once:
 *     Y = X^j (Q^j)^T + beta Y
 * where X^j is K x d_j (row k is the party's part x^j of candidate k) and Y
 * is K x d (row k becomes Q^j x^j_k). beta = 0 is what a passive participant
 * sends; beta = 1 accumulates, which is how the in-process simulation sums the
 * parties. This is the one masking routine in the project. */
void o3m_block_apply(const o3m_block *b, int K, const double *Xj, double beta, double *Y);

#endif
