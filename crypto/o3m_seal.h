/* o3m_seal.h -- a mask block crosses the wire only sealed to its party.
 *
 * A party that fetches its block Q^j from the mask generator (PMG) draws an
 * ephemeral X25519 key pair for that one fetch (o3m_seal_key_create: libsodium
 * crypto_box_keypair) and sends the public key in its BlockRequest. The PMG
 * seals the block to it (o3m_seal_block: crypto_box_seal, an anonymous
 * sealed box, X25519 + XSalsa20-Poly1305) and the party opens it
 * (o3m_seal_open_block: crypto_box_seal_open) straight into a new o3m_block,
 * then destroys the key pair. So the block's values exist in the clear only
 * in the PMG's Q and blocks, in one scratch buffer of the PMG that is wiped
 * right after sealing, and in the party's o3m_block: never in a gRPC slice,
 * a TLS record or an RPC arena of either side, which are freed without
 * being wiped. Mutual TLS with the federation CA already authenticates the
 * requester, and with it the public key it sends; the seal adds no
 * authentication of its own and needs none.
 *
 * Plaintext inside the seal: the block in the form of o3m_block_write_le
 * (d x d_j binary64 little-endian, row-major); the sealed box is
 * O3M_SEAL_OVERHEAD bytes longer. The mask id and the shape travel beside
 * it in the clear (they are public).
 *
 * The secret key lives in libsodium's guarded memory (sodium_malloc: locked
 * against swapping, wiped by sodium_free). Handles are not thread-safe;
 * separate handles may be used from separate threads. */
#ifndef O3M_SEAL_H
#define O3M_SEAL_H

#include <stddef.h>
#include <stdint.h>

#include "o3m_error.h"
#include "o3m_mask.h"

/* Bytes of a public key (crypto_box_PUBLICKEYBYTES). */
#define O3M_SEAL_KEY_BYTES 32
/* What sealing adds to the plaintext (crypto_box_SEALBYTES: the sender's
 * ephemeral public key and the Poly1305 tag). */
#define O3M_SEAL_OVERHEAD 48

typedef struct o3m_seal_key o3m_seal_key;

/* Draws a fresh key pair from libsodium's CSPRNG. O3M_ERANDOM if libsodium
 * cannot initialize (no random source), O3M_ENOMEM. On failure *out is
 * NULL. */
int o3m_seal_key_create(o3m_seal_key **out);

/* Wipes the key pair and frees it. NULL is accepted. */
void o3m_seal_key_destroy(o3m_seal_key *k);

/* The public half, O3M_SEAL_KEY_BYTES bytes owned by k. */
const unsigned char *o3m_seal_key_public(const o3m_seal_key *k);

/* Length of a sealed d x dj block: o3m_block_le_bytes(d, dj) +
 * O3M_SEAL_OVERHEAD. */
size_t o3m_seal_block_bytes(int d, int dj);

/* Seals b to the public key pk (O3M_SEAL_KEY_BYTES bytes) into out, which
 * receives exactly o3m_seal_block_bytes of b's shape. scratch is the
 * caller's buffer of at least o3m_block_le_bytes of b's shape: the
 * plaintext is written there and wiped (sodium_memzero) before this returns,
 * whatever the outcome, so a caller keeps one scratch buffer from start to
 * exit and allocates nothing per call. O3M_EINVAL if libsodium refuses the
 * key (a low-order point that would give an all-zero shared secret),
 * O3M_ERANDOM if libsodium cannot initialize; out is then unspecified. */
int o3m_seal_block(const o3m_block *b, const unsigned char *pk, unsigned char *scratch,
                   unsigned char *out);

/* Opens sealed (len bytes) with k into a new d x dj block of mask mask_id:
 * the box is opened straight into the block's storage (o3m_block_read_le),
 * so no other plaintext copy is made. Errors: O3M_EDIM if len is not
 * o3m_seal_block_bytes(d, dj); O3M_ECORRUPT if the box does not open under
 * k (sealed to another key, or altered: the tag fails); O3M_ENONFINITE for
 * a NaN or an infinity inside; O3M_EINVAL for a bad shape; O3M_ENOMEM. On
 * failure *out is NULL and nothing of the plaintext is left. */
int o3m_seal_open_block(o3m_block **out, const o3m_seal_key *k, const unsigned char *sealed,
                        size_t len, int d, int dj, uint64_t mask_id);

/* Zeroes the SIMD registers of the calling thread (x86-64: the vector
 * registers XMM/YMM/ZMM 0-31 that the CPU has; elsewhere nothing). Sealing,
 * opening, drawing Q and copying blocks leave pieces of the plaintext in
 * them (glibc's memcpy and libsodium's stream cipher run through them), and
 * a thread created afterwards starts with a copy of the creator's
 * registers, which the dynamic linker's lazy binding or a signal frame then
 * stores on that thread's stack, where no wipe reaches: a memory scan of
 * the PMG found a row of a block there. o3m_seal_block and
 * o3m_seal_open_block call it before they return; call it after any other
 * work on secret values that precedes the creation of threads. */
void o3m_seal_scrub_registers(void);

#endif
