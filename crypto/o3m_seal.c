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

/* Not inlined, so that no caller keeps a value in a vector register across
 * the call (they are all caller-saved in the x86-64 System V ABI anyway). */
__attribute__((noinline)) void o3m_seal_scrub_registers(void) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx")) {
    /* VZEROALL clears YMM0-15 (ZMM0-15 on an AVX-512 machine). */
    __asm__ volatile("vzeroall" ::: "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6",
                     "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14",
                     "xmm15");
    /* glibc's AVX-512 string functions work in ZMM16-31, which VZEROALL
     * leaves alone. The compiler never uses them in this build (no
     * -mavx512f), so they need no clobber. */
    if (__builtin_cpu_supports("avx512f"))
      __asm__ volatile(
          "vpxord %zmm16, %zmm16, %zmm16\n\tvpxord %zmm17, %zmm17, %zmm17\n\t"
          "vpxord %zmm18, %zmm18, %zmm18\n\tvpxord %zmm19, %zmm19, %zmm19\n\t"
          "vpxord %zmm20, %zmm20, %zmm20\n\tvpxord %zmm21, %zmm21, %zmm21\n\t"
          "vpxord %zmm22, %zmm22, %zmm22\n\tvpxord %zmm23, %zmm23, %zmm23\n\t"
          "vpxord %zmm24, %zmm24, %zmm24\n\tvpxord %zmm25, %zmm25, %zmm25\n\t"
          "vpxord %zmm26, %zmm26, %zmm26\n\tvpxord %zmm27, %zmm27, %zmm27\n\t"
          "vpxord %zmm28, %zmm28, %zmm28\n\tvpxord %zmm29, %zmm29, %zmm29\n\t"
          "vpxord %zmm30, %zmm30, %zmm30\n\tvpxord %zmm31, %zmm31, %zmm31");
  } else {
    __asm__ volatile("pxor %%xmm0, %%xmm0\n\tpxor %%xmm1, %%xmm1\n\tpxor %%xmm2, %%xmm2\n\t"
                     "pxor %%xmm3, %%xmm3\n\tpxor %%xmm4, %%xmm4\n\tpxor %%xmm5, %%xmm5\n\t"
                     "pxor %%xmm6, %%xmm6\n\tpxor %%xmm7, %%xmm7\n\tpxor %%xmm8, %%xmm8\n\t"
                     "pxor %%xmm9, %%xmm9\n\tpxor %%xmm10, %%xmm10\n\tpxor %%xmm11, %%xmm11\n\t"
                     "pxor %%xmm12, %%xmm12\n\tpxor %%xmm13, %%xmm13\n\tpxor %%xmm14, %%xmm14\n\t"
                     "pxor %%xmm15, %%xmm15" ::: "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5",
                     "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13",
                     "xmm14", "xmm15");
  }
#endif
}

int o3m_seal_block(const o3m_block *b, const unsigned char *pk, unsigned char *scratch,
                   unsigned char *out) {
  if (init() != O3M_OK) return O3M_ERANDOM;
  size_t n = o3m_block_le_bytes(o3m_block_rows(b), o3m_block_cols(b));
  o3m_block_write_le(b, scratch);
  int rc = crypto_box_seal(out, scratch, n, pk);
  sodium_memzero(scratch, n);
  o3m_seal_scrub_registers();
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
  int rc = o3m_block_read_le(out, d, dj, mask_id, open_into, &o);
  o3m_seal_scrub_registers();
  return rc;
}
