/*
 * bl_mpc: additive secret sharing over Z/2^64 between N parties with a
 * trusted dealer, the MPC baseline of `o3m-eval baselines` and the layer Hannun et al.'s
 * private learner (bl_hannun.h) runs on.
 *
 * A real value v is encoded in fixed point with F fractional bits (the
 * context's frac_bits; CrypTen uses 16, Hannun et al. 20) as the ring element
 * round(v * 2^F) mod 2^64. A secret-shared vector of n elements is an array of
 * N * n uint64_t laid out party-major: party p's shares are x[p*n .. p*n+n).
 * The value is the sum of the N shares mod 2^64; any N-1 shares are uniform
 * and say nothing about it. Addition and multiplication by a public integer
 * are local; a product of two fixed-point values carries 2F fractional bits
 * and is truncated back to F bits by one more round.
 *
 * Parties are separate agents that exchange explicit messages: a party's
 * message in an opening is the buffer of its own shares (x_p, or x_p - a_p
 * for a Beaver opening), which every other party reads; no party reads
 * another's shares outside an opening. Every party would then compute the
 * same sum; the sum is formed once and handed to all of them, which changes
 * no message. The counters
 * count exactly what crosses between parties: an opening to all of n
 * elements is N(N-1)n words of 8 bytes in one round, an opening to one party
 * (N-1)n words, the sharing of an input by its owner (N-1)n words.
 *
 * The dealer (a trusted third party, as in Hannun et al. and CrypTen's TTP
 * mode) hands out correlated randomness: Beaver triples for elementwise and
 * matrix products, truncation pairs, bit triples and doubly shared bits for
 * comparisons, and private random samples. What it sends is the offline
 * phase: it is not counted in bytes or rounds, and the time spent in the
 * dealer is accumulated separately (bl_mpc_offline_seconds).
 *
 * Truncation (dealer-assisted, exact up to one unit in the last place): to
 * divide [x] by 2^F the parties open c = x + 2^62 + r for a dealer-shared
 * uniform r, which is uniform and hides x perfectly. Because x + 2^62 lies in
 * [0, 2^63) whenever |x| < 2^62, the addition wrapped around 2^64 exactly
 * when msb(r) = 1 and msb(c) = 0, so with the dealer's shares of r >> F and
 * of msb(r) each party computes its share of floor(x / 2^F) locally, off by
 * at most +1 unit (the borrow of the low F bits). Products must therefore
 * stay below 2^62 in magnitude before truncation: |value| < 2^(62-2F), which
 * is 2^30 for F = 16 and 2^22 for F = 20. Nothing checks this on secret data
 * (it cannot be checked without revealing the value); the encoders refuse
 * inputs beyond bl_mpc_max_input() = 2^(31-F), so that one product of two
 * inputs is always in range.
 *
 * Comparison (as Hannun et al. describe it): [x] is converted to XOR shares
 * <x> (each party XOR-shares its own arithmetic share, one round, and the N
 * binary numbers are summed by a tree of Kogge-Stone adders whose ANDs use
 * the dealer's bit triples, log2(64) + 1 rounds per adder level), the most
 * significant bit is taken and turned back into an arithmetic share with a
 * doubly shared random bit (one round). [x >= 0] = 1 - msb(x).
 *
 * Randomness: every party and the dealer draw from their own ChaCha20
 * keystream (libsodium crypto_stream_chacha20_ietf) keyed from the operating
 * system's CSPRNG (randombytes_buf), or, for reproducible tests and
 * evaluation only, from a seed. Never rand().
 *
 * A context is not thread-safe. Shared vectors are plain arrays the caller
 * allocates (bl_mpc_alloc) and frees with free(); functions that fail leave
 * their outputs unspecified and the counters possibly advanced.
 */
#ifndef BL_MPC_H
#define BL_MPC_H

#include <stdint.h>

#include "bl_round.h"
#include "o3m_error.h"

typedef struct bl_mpc bl_mpc;

/* CrypTen's default number of fractional bits. */
#define BL_MPC_FRAC_BITS 16

/* The owner argument of bl_mpc_share for state that already exists in
 * shares (the model, carried over from the previous round): shared by the
 * dealer, nothing counted. */
#define BL_MPC_STATE (-1)

/* Creates a context for nparties >= 2 parties with frac_bits in 8..24.
 * seed NULL keys every party's and the dealer's stream from the OS CSPRNG;
 * a seed makes the run reproducible (tests, evaluation; NOT secure). */
int bl_mpc_create(bl_mpc **out, int nparties, int frac_bits, const uint64_t *seed, o3m_err *e);
void bl_mpc_destroy(bl_mpc *m);

int bl_mpc_parties(const bl_mpc *m);
int bl_mpc_frac_bits(const bl_mpc *m);

/* The largest |v| the encoders accept: 2^(31 - F), so that the product of
 * two encoded inputs stays inside the truncation's range. */
double bl_mpc_max_input(const bl_mpc *m);

/* Counters since creation or the last reset: bytes and rounds of the online
 * phase, seconds spent in the dealer (offline phase). */
uint64_t bl_mpc_bytes(const bl_mpc *m);
int bl_mpc_rounds(const bl_mpc *m);
double bl_mpc_offline_seconds(const bl_mpc *m);
void bl_mpc_reset_counters(bl_mpc *m);

/* A zeroed shared vector of n elements (N * n words); free() it. NULL when
 * out of memory. */
uint64_t *bl_mpc_alloc(const bl_mpc *m, long n);

/* Fixed-point encoding of one value (no range check) and decoding of an
 * opened ring element as a signed fixed-point number. */
uint64_t bl_mpc_encode(const bl_mpc *m, double v);
double bl_mpc_decode(const bl_mpc *m, uint64_t v);

/* Party owner (0..N-1) encodes v[0..n) and sends one share of each element
 * to every other party: one round, (N-1) n words. owner BL_MPC_STATE: the
 * dealer creates the shares and nothing is counted. O3M_ERANGE (nothing
 * sent) when some |v[i]| exceeds bl_mpc_max_input or is not finite. */
int bl_mpc_share(bl_mpc *m, int owner, const double *v, long n, uint64_t *x, o3m_err *e);

/* The same for public-integer-valued inputs (bits, indices), not scaled by
 * 2^F: v[i] is shared as the ring element v[i]. */
int bl_mpc_share_int(bl_mpc *m, int owner, const int64_t *v, long n, uint64_t *x, o3m_err *e);

/* A rows x cols row-major matrix whose columns are split in consecutive
 * blocks of widths dims[0..N-1] among the parties: each party shares its own
 * block, all in the same round; (N-1) rows cols words. */
int bl_mpc_share_cols(bl_mpc *m, const int *dims, const double *v, int rows, int cols, uint64_t *x,
                      o3m_err *e);

/* Opens x to every party (one round, N(N-1) n words); out[i] is the ring
 * element. */
int bl_mpc_open(bl_mpc *m, const uint64_t *x, long n, uint64_t *out, o3m_err *e);

/* Opens x to party `to` only (one round, (N-1) n words). */
int bl_mpc_open_to(bl_mpc *m, int to, const uint64_t *x, long n, uint64_t *out, o3m_err *e);

/* Reconstructs x for verification only (the eval's check that the private
 * learner makes the same choices as a plaintext one given the dealer's
 * samples): not a protocol step, nothing is counted, no party sees it. */
void bl_mpc_peek(const bl_mpc *m, const uint64_t *x, long n, uint64_t *out);

/* Local operations (no communication). z may alias x or y. */
void bl_mpc_add(const bl_mpc *m, uint64_t *z, const uint64_t *x, const uint64_t *y, long n);
void bl_mpc_sub(const bl_mpc *m, uint64_t *z, const uint64_t *x, const uint64_t *y, long n);
/* x[i] += c[i] (public ring elements; party 0 adds them). c NULL: adds c0 to
 * every element. */
void bl_mpc_add_public(const bl_mpc *m, uint64_t *x, long n, const uint64_t *c, uint64_t c0);
/* x[i] *= k for a public integer k (no truncation needed). */
void bl_mpc_mul_int(const bl_mpc *m, uint64_t *x, long n, int64_t k);

/* [x] / 2^F, rounded down or up by at most one unit: one round, N(N-1) n
 * words (see the file comment for the range). z may alias x. */
int bl_mpc_trunc(bl_mpc *m, uint64_t *z, const uint64_t *x, long n, o3m_err *e);

/* Elementwise z = x * y with a Beaver triple: one round opening x - a and
 * y - b (2 N(N-1) n words), plus a truncation round when trunc is nonzero
 * (fixed point times fixed point); trunc 0 for a product with an integer
 * factor (a bit, an indicator). z may alias x or y. */
int bl_mpc_mul(bl_mpc *m, uint64_t *z, const uint64_t *x, const uint64_t *y, long n, int trunc,
               o3m_err *e);

/* nb independent matrix products Z_b = X_b Y_b (X_b r x k, Y_b k x c,
 * row-major, batch b at offset b*r*k, b*k*c, b*r*c of each party's share)
 * with matrix Beaver triples: one round opening X - A and Y - B (N(N-1)
 * nb (rk + kc) words), plus a truncation round (N(N-1) nb r c words) when
 * trunc is nonzero. Z must not alias X or Y. */
int bl_mpc_matmul(bl_mpc *m, int nb, uint64_t *Z, const uint64_t *X, const uint64_t *Y, int r,
                  int k, int c, int trunc, o3m_err *e);

/* z[i] = [x[i] >= 0] as an integer 0/1 share, by the comparison circuit of
 * the file comment. z may alias x. */
int bl_mpc_ge0(bl_mpc *m, uint64_t *z, const uint64_t *x, long n, o3m_err *e);

/* Private random samples from the dealer (offline): Bernoulli(p) bits as
 * integer shares, uniform(0, 1) values in fixed point, and a uniformly
 * random permutation of 1..n as integer shares. */
int bl_mpc_rand_bernoulli(bl_mpc *m, double p, long n, uint64_t *x, o3m_err *e);
int bl_mpc_rand_uniform(bl_mpc *m, long n, uint64_t *x, o3m_err *e);
int bl_mpc_rand_perm(bl_mpc *m, long n, uint64_t *x, o3m_err *e);

/*
 * One LinUCB round's statistic (bl_round.h) in MPC. The parties share their
 * column blocks of X (round 1); the model M = [Ainv | theta] exists only in
 * shares (created by the dealer here, as if left by the previous round's
 * update, and not counted); Z = X M with one matrix triple (rounds 2 and 3:
 * open, truncate) gives lin = Z[:, d] and Y = X Ainv; quad[k] = sum_j
 * Y[k][j] X[k][j] with an elementwise triple and one truncation of the K
 * sums (rounds 4 and 5); lin and quad are opened to party 0, the active
 * participant (round 6). So c->rounds = 6 and
 *
 *   c->bytes = 8 (N-1) [K d + 2K + N (4 K d + d^2 + d + 2K)].
 *
 * c->seconds is the online wall time (dealer time excluded), c->offline_seconds
 * the dealer's, c->max_abs_err against r->plain or bl_round_plain. Fixed point with
 * BL_MPC_FRAC_BITS fractional bits; randomness from the OS CSPRNG. Entries of
 * X, theta and Ainv must lie within bl_mpc_max_input (O3M_ERANGE), and the
 * statistic within 2^(62-2F-1). lin and quad hold K values each. Every
 * party's shares live in this one process: about 16 N d^2 bytes at peak
 * (the shared model and its triple), 2.2 GB at d = 500, N = 500.
 */
int bl_mpc_round(const bl_round *r, double *lin, double *quad, bl_cost *c, o3m_err *e);

/* The byte count of bl_mpc_round by the formula above. */
uint64_t bl_mpc_round_bytes(int d, int K, int N);

#endif
