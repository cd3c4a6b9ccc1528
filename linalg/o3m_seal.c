/* o3m_seal.c -- sealing a mask block to its party's ephemeral key (see
 * o3m_seal.h). Every primitive is libsodium's; this file only fixes the
 * plaintext form (o3m_block_write_le / o3m_block_read_le) and wipes it. */
#include "o3m_seal.h"

#include <sodium.h>

_Static_assert(O3M_SEAL_KEY_BYTES == crypto_box_PUBLICKEYBYTES, "X25519 public key size");
_Static_assert(O3M_SEAL_OVERHEAD == crypto_box_SEALBYTES, "sealed box overhead");

struct o3m_seal_key {
  unsigned char pk[crypto_box_PUBLICKEYBYTES];
  unsigned char sk[crypto_box_SECRETKEYBYTES];
};

/* sodium_init is idempotent and thread-safe; it fails only when no random
 * source can be opened. */
static int init(void) { return sodium_init() < 0 ? O3M_ERANDOM : O3M_OK; }

int o3m_seal_key_create(o3m_seal_key **out) {
  *out = NULL;
  if (init() != O3M_OK) return O3M_ERANDOM;
  o3m_seal_key *k = sodium_malloc(sizeof *k);
  if (!k) return O3M_ENOMEM;
  crypto_box_keypair(k->pk, k->sk);
  *out = k;
  return O3M_OK;
}

void o3m_seal_key_destroy(o3m_seal_key *k) {
  if (k) sodium_free(k); /* wipes the whole allocation first */
}

const unsigned char *o3m_seal_key_public(const o3m_seal_key *k) { return k->pk; }

size_t o3m_seal_block_bytes(int d, int dj) { return o3m_block_le_bytes(d, dj) + O3M_SEAL_OVERHEAD; }

int o3m_seal_block(const o3m_block *b, const unsigned char *pk, unsigned char *scratch,
                   unsigned char *out) {
  if (init() != O3M_OK) return O3M_ERANDOM;
  size_t n = o3m_block_le_bytes(o3m_block_rows(b), o3m_block_cols(b));
  o3m_block_write_le(b, scratch);
  int rc = crypto_box_seal(out, scratch, n, pk);
  sodium_memzero(scratch, n);
  return rc == 0 ? O3M_OK : O3M_EINVAL;
}

typedef struct open_ctx {
  const o3m_seal_key *k;
  const unsigned char *sealed;
  size_t len;
} open_ctx;

/* o3m_block_fill_fn: opens the box into the block's storage. */
static int open_into(void *ctx, unsigned char *buf, size_t n) {
  const open_ctx *o = ctx;
  if (o->len != n + crypto_box_SEALBYTES) return O3M_EDIM;
  return crypto_box_seal_open(buf, o->sealed, o->len, o->k->pk, o->k->sk) == 0 ? O3M_OK
                                                                               : O3M_ECORRUPT;
}

int o3m_seal_open_block(o3m_block **out, const o3m_seal_key *k, const unsigned char *sealed,
                        size_t len, int d, int dj, uint64_t mask_id) {
  *out = NULL;
  if (init() != O3M_OK) return O3M_ERANDOM;
  open_ctx o = {k, sealed, len};
  return o3m_block_read_le(out, d, dj, mask_id, open_into, &o);
}
