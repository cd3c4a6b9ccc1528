/* o3m_secagg.h -- secure aggregation of the passive participants' parts.
 *
 * What it is for. Every round each passive participant (PP) j sends its
 * masked part Q^j x^j to the active participant (AP). Sent alone, a part
 * reveals ||x^j||, every inner product between users on party j's columns
 * and, over many rounds, Q^j itself. With secure aggregation the
 * AP receives from each PP a vector that looks uniformly random and learns
 * only the sum over the PPs of their parts, which it adds to its own part.
 *
 * The scheme (Bonawitz et al., CCS 2017, without dropout recovery: a round
 * needs every PP anyway).
 *  - Keys. Every PP has a static X25519 key pair: the secret key is a
 *    32-byte file only that party reads (o3m_secagg_keygen writes it with
 *    mode 0600 and O_EXCL; a file that group or others may read is refused,
 *    like a TLS key), the public key is pinned in the shared config
 *    (agg_public), so it is authenticated by the config's distribution and
 *    never relayed by the AP.
 *  - Pair keys. At start PP a computes, for every other PP b, the pair key
 *    k_ab = BLAKE2b-256 keyed by X25519(sk_a, pk_b) over "o3m-secagg-v1
 *    pair" || pk_lo || pk_hi (the public keys in party order). An all-zero
 *    shared secret (a low-order public key) is refused. The shared secret is
 *    wiped at once; the pair keys live in sodium_malloc'd memory, wiped and
 *    freed at destroy.
 *  - Binding. Per MaskBatch the AP draws a fresh 32-byte nonce. Every PP
 *    hashes the transcript T = BLAKE2b-256("o3m-secagg-v1 transcript" ||
 *    mask_id (u64 LE) || nonce || d (u32 LE) || number of queries (u32 LE)
 *    || per query: len(user) (u32 LE) || user || number of items (u32 LE)
 *    || per item: len (u32 LE) || item). The stream key of pair (a, b) for
 *    the batch is BLAKE2b-256 keyed by k_ab over T. A PP asked anything
 *    different from the others (another user, items, order, nonce, mask id
 *    or d) adds streams that cancel nothing: the AP gets noise. A replayed
 *    nonce with the same queries gives the same answer: nothing new.
 *  - Ring. Each value v of Q^j x^j is encoded in fixed point in Z/2^64 as
 *    the nearest integer to v 2^s (llrint, ties to even; computed as int64,
 *    added as uint64 so that wrapping is defined). PP a adds, for each peer
 *    b, the AES-256-CTR stream of the stream key (OpenSSL libcrypto's EVP,
 *    AES-NI; zero initial counter: the key is fresh per batch and pair)
 *    read as uint64 little-endian words, with + if a < b and - otherwise.
 *    AES-256-CTR rather than libsodium's ChaCha20: measured 3.5 times
 *    faster here (o3m-bench-core section e), which is most of a PP's cost
 *    (both are Debian's libraries, nothing hand-written). The streams cancel
 *    exactly in the sum over all PPs; the AP adds the PPs' words (wrapping),
 *    reads the sum as int64 and multiplies by 2^-s once.
 *  - Scale. B = sum over the PPs of max_norm_j (each component of Q^j x^j is
 *    at most ||x^j|| <= max_norm_j in absolute value); s is the largest
 *    integer with B 2^s <= 2^62, capped at 62, so that the true sum is far
 *    inside int64 and decodes exactly. A config with s < 20
 *    (O3M_SECAGG_MIN_SCALE) is refused as too coarse. Before encoding each
 *    PP checks its rows against its own max_norm, so an honest part never
 *    wraps.
 *  - Decoding error. Each PP's rounding is at most 2^-(s+1) per component,
 *    so the decoded sum differs from the true sum of the parts by at most
 *    n_pp 2^-(s+1) per component (plus the rounding of the one conversion of
 *    the int64 sum to a double, relative 2^-53, as any double sum has). For
 *    the defaults (max_norm 1e4, 4 PPs: B = 4e4, s = 46) that is
 *    4 2^-47 = 2.8e-14 per component; with 1 PP (B = 1e4, s = 48) 1.8e-15.
 *
 * Use. A PP: o3m_secagg_create (with its secret key file), then per
 * MaskBatch o3m_secagg_begin, o3m_secagg_query per query in order, and
 * o3m_secagg_mask over all the batch's values. The AP: o3m_secagg_add_part
 * for every PP's words into a zeroed accumulator, then o3m_secagg_decode.
 *
 * Failure: every function returns 0 or a negative o3m_error code with e
 * naming the problem; a failed create leaves nothing allocated and no key
 * material behind. Threads: a handle is used by one thread at a time; the
 * free functions are thread-safe. Nothing is allocated after create. */
#ifndef O3M_SECAGG_H
#define O3M_SECAGG_H

#include <stddef.h>
#include <stdint.h>

#include "o3m_error.h"

#define O3M_SECAGG_KEY_BYTES 32
#define O3M_SECAGG_NONCE_BYTES 32
/* Finest and coarsest allowed scales (bits after the binary point). */
#define O3M_SECAGG_MAX_SCALE 62
#define O3M_SECAGG_MIN_SCALE 20

typedef struct o3m_secagg o3m_secagg;

/* Draws a new X25519 key pair from the OS, writes the secret key (32 raw
 * bytes) to a new file at path (O_EXCL, mode 0600: an existing file is
 * O3M_EEXISTS, never overwritten; a missing folder is O3M_EIO naming it
 * and the mkdir that makes it, nothing is created) and gives its public
 * key in pk. The secret key is wiped from memory before return. Errors: O3M_EEXISTS,
 * O3M_EIO, O3M_ERANDOM (libsodium could not start). */
int o3m_secagg_keygen(const char *path, unsigned char pk[O3M_SECAGG_KEY_BYTES], o3m_err *e);

/* Writes the 64 lower-case hex digits of pk and a NUL into hex. */
void o3m_secagg_hex(const unsigned char pk[O3M_SECAGG_KEY_BYTES], char hex[65]);

/* Parses exactly 64 hex digits (either case) into pk: 0, or O3M_EPARSE. */
int o3m_secagg_parse_hex(const char *hex, unsigned char pk[O3M_SECAGG_KEY_BYTES]);

/* The scale s of the ring encoding for PPs with these bounds (above): the
 * largest s <= 62 with (sum max_norm) 2^s <= 2^62. O3M_ERANGE (naming the
 * bound B and O3M_SECAGG_MIN_SCALE) if s < 20, O3M_EINVAL for n < 1 or a
 * bound that is not finite and > 0. */
int o3m_secagg_scale(int n, const double *max_norms, int *scale, o3m_err *e);

/* The worst-case decoding error per component for n PPs at scale s:
 * n 2^-(s+1). */
double o3m_secagg_max_error(int n, int scale);

/* Creates PP me's handle among n PPs (0 <= me < n, n >= 1) whose public keys
 * are pks[0..n-1] in party order, reading its own secret key from the file
 * at secret_path: refused (O3M_EPERM) if the file is not a regular file
 * owned by the caller or if group or others may read or write it,
 * O3M_ECORRUPT unless it holds exactly 32 bytes, O3M_EIO if it cannot be
 * read. The key is read straight into guarded memory (no stdio buffer keeps
 * a copy). O3M_EINVAL if the secret key does not belong to pks[me] (a wrong
 * file, or a config whose agg_public is not this party's), O3M_ECORRUPT for
 * an all-zero shared secret with a peer (its public key is of low order).
 * scale as given by o3m_secagg_scale. With n = 1 there is no pair and no
 * key is needed (pks and secret_path may be NULL): the handle only encodes,
 * and the AP learns that one part exactly. */
int o3m_secagg_create(o3m_secagg **out, int n, const unsigned char (*pks)[O3M_SECAGG_KEY_BYTES],
                      int me, const char *secret_path, int scale, o3m_err *e);

/* As o3m_secagg_create with the secret key given in memory (the caller
 * wipes its copy): for tests and the in-process federation of o3m-eval. */
int o3m_secagg_create_from_key(o3m_secagg **out, int n,
                               const unsigned char (*pks)[O3M_SECAGG_KEY_BYTES], int me,
                               const unsigned char sk[O3M_SECAGG_KEY_BYTES], int scale,
                               o3m_err *e);

/* Wipes the pair keys and frees. NULL is accepted. */
void o3m_secagg_destroy(o3m_secagg *s);

/* The handle's scale and its own index. */
int o3m_secagg_scale_of(const o3m_secagg *s);
int o3m_secagg_index(const o3m_secagg *s);

/* Starts the transcript of one MaskBatch: mask id, the AP's nonce, d and the
 * number of queries that will follow. */
void o3m_secagg_begin(o3m_secagg *s, uint64_t mask_id,
                      const unsigned char nonce[O3M_SECAGG_NONCE_BYTES], int d, int n_queries);

/* Adds one query (user may be NULL: then empty) with its n_items item ids,
 * in the batch's order. */
void o3m_secagg_query(o3m_secagg *s, const char *user, int n_items, const char *const *items);

/* Ends the transcript and writes to out the n values of v encoded at the
 * handle's scale plus every pair stream (see above). The caller has checked
 * the rows' norms against its bound; a value that is not finite or whose
 * encoding would not fit in int64 is O3M_ERANGE (out is garbage then).
 * After it, a new batch needs o3m_secagg_begin. */
int o3m_secagg_mask(o3m_secagg *s, size_t n, const double *v, uint64_t *out, o3m_err *e);

/* Encodes n values at scale s without any mask: llrint(v 2^s), the nearest
 * integer with ties to even (not llround, which rounds ties away from 0).
 * O3M_ERANGE as o3m_secagg_mask. For tests and o3m_secagg_mask itself. */
int o3m_secagg_encode(int scale, size_t n, const double *v, uint64_t *out, o3m_err *e);

/* acc[i] += part[i] modulo 2^64 for i < n (a PP's words as received).
 * part and acc must not overlap. */
void o3m_secagg_add_part(size_t n, const int64_t *restrict part, uint64_t *restrict acc);

/* out[i] = (acc[i] read as int64) 2^-scale for i < n. acc and out must not
 * overlap. */
void o3m_secagg_decode(int scale, size_t n, const uint64_t *restrict acc, double *restrict out);

#endif
