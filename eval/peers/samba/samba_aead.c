/* samba_aead.c -- AES-256-GCM through OpenSSL's EVP interface (see
 * samba_aead.h). The key is set once; each message only sets its nonce. */
#include "samba_aead.h"

#include <openssl/evp.h>
#include <openssl/rand.h>
#include <stdlib.h>
#include <string.h>

struct samba_aead {
  EVP_CIPHER_CTX *enc, *dec;
  uint8_t key[SAMBA_AEAD_KEY];
};

int samba_aead_create(samba_aead **out, const uint8_t *key, o3m_err *e) {
  samba_aead *a = calloc(1, sizeof *a);
  if (!a) return o3m_err_set(e, O3M_ENOMEM, "aes-gcm: out of memory");
  int rc;
  if (key) {
    memcpy(a->key, key, SAMBA_AEAD_KEY);
  } else if (RAND_bytes(a->key, SAMBA_AEAD_KEY) != 1) {
    rc = o3m_err_set(e, O3M_ERANDOM, "aes-gcm: RAND_bytes failed to draw a key");
    goto fail_a;
  }
  a->enc = EVP_CIPHER_CTX_new();
  a->dec = EVP_CIPHER_CTX_new();
  if (!a->enc || !a->dec) {
    rc = o3m_err_set(e, O3M_ENOMEM, "aes-gcm: out of memory for the cipher contexts");
    goto fail_ctx;
  }
  /* 12-byte nonces are GCM's default IV length. */
  if (EVP_EncryptInit_ex(a->enc, EVP_aes_256_gcm(), NULL, a->key, NULL) != 1 ||
      EVP_DecryptInit_ex(a->dec, EVP_aes_256_gcm(), NULL, a->key, NULL) != 1) {
    rc = o3m_err_set(e, O3M_ETLS, "aes-gcm: libcrypto refused the AES-256-GCM key");
    goto fail_ctx;
  }
  *out = a;
  return O3M_OK;
fail_ctx:
  EVP_CIPHER_CTX_free(a->dec);
  EVP_CIPHER_CTX_free(a->enc);
fail_a:
  OPENSSL_cleanse(a->key, sizeof a->key);
  free(a);
  return rc;
}

void samba_aead_destroy(samba_aead *a) {
  if (!a) return;
  EVP_CIPHER_CTX_free(a->dec);
  EVP_CIPHER_CTX_free(a->enc);
  OPENSSL_cleanse(a->key, sizeof a->key);
  free(a);
}

void samba_aead_key(const samba_aead *a, uint8_t key[SAMBA_AEAD_KEY]) {
  memcpy(key, a->key, SAMBA_AEAD_KEY);
}

void samba_aead_nonce(uint32_t sender, uint64_t counter, uint8_t nonce[SAMBA_AEAD_NONCE]) {
  for (int i = 0; i < 4; i++) nonce[i] = (uint8_t)(sender >> (24 - 8 * i));
  for (int i = 0; i < 8; i++) nonce[4 + i] = (uint8_t)(counter >> (56 - 8 * i));
}

int samba_aead_seal_nonce(samba_aead *a, const uint8_t nonce[SAMBA_AEAD_NONCE], const uint8_t *aad,
                          size_t aad_len, const uint8_t *pt, size_t n, uint8_t *ct, o3m_err *e) {
  int len;
  if (EVP_EncryptInit_ex(a->enc, NULL, NULL, NULL, nonce) != 1 ||
      (aad_len && EVP_EncryptUpdate(a->enc, NULL, &len, aad, (int)aad_len) != 1) ||
      (n && EVP_EncryptUpdate(a->enc, ct, &len, pt, (int)n) != 1) ||
      EVP_EncryptFinal_ex(a->enc, ct + n, &len) != 1 ||
      EVP_CIPHER_CTX_ctrl(a->enc, EVP_CTRL_GCM_GET_TAG, SAMBA_AEAD_TAG, ct + n) != 1)
    return o3m_err_set(e, O3M_ETLS, "aes-gcm: libcrypto failed to encrypt");
  return O3M_OK;
}

int samba_aead_open_nonce(samba_aead *a, const uint8_t nonce[SAMBA_AEAD_NONCE],
                          const uint8_t *aad, size_t aad_len, const uint8_t *ct, size_t n,
                          uint8_t *pt, o3m_err *e) {
  int len;
  uint8_t tag[SAMBA_AEAD_TAG];
  memcpy(tag, ct + n, SAMBA_AEAD_TAG);
  if (EVP_DecryptInit_ex(a->dec, NULL, NULL, NULL, nonce) != 1 ||
      (aad_len && EVP_DecryptUpdate(a->dec, NULL, &len, aad, (int)aad_len) != 1) ||
      (n && EVP_DecryptUpdate(a->dec, pt, &len, ct, (int)n) != 1) ||
      EVP_CIPHER_CTX_ctrl(a->dec, EVP_CTRL_GCM_SET_TAG, SAMBA_AEAD_TAG, tag) != 1 ||
      EVP_DecryptFinal_ex(a->dec, pt + n, &len) != 1) {
    if (n) memset(pt, 0, n);
    uint32_t sender = 0;
    uint64_t counter = 0;
    for (int i = 0; i < 4; i++) sender = sender << 8 | nonce[i];
    for (int i = 0; i < 8; i++) counter = counter << 8 | nonce[4 + i];
    return o3m_err_set(e, O3M_ECORRUPT,
                       "aes-gcm: message %llu from sender %u does not authenticate",
                       (unsigned long long)counter, (unsigned)sender);
  }
  return O3M_OK;
}

int samba_aead_seal(samba_aead *a, uint32_t sender, uint64_t counter, const uint8_t *pt, size_t n,
                    uint8_t *ct, o3m_err *e) {
  uint8_t nonce[SAMBA_AEAD_NONCE];
  samba_aead_nonce(sender, counter, nonce);
  return samba_aead_seal_nonce(a, nonce, NULL, 0, pt, n, ct, e);
}

int samba_aead_open(samba_aead *a, uint32_t sender, uint64_t counter, const uint8_t *ct, size_t n,
                    uint8_t *pt, o3m_err *e) {
  uint8_t nonce[SAMBA_AEAD_NONCE];
  samba_aead_nonce(sender, counter, nonce);
  return samba_aead_open_nonce(a, nonce, NULL, 0, ct, n, pt, e);
}
