/* samba_aead.h -- AES-256-GCM for Samba's messages (OpenSSL libcrypto).
 *
 * Samba (Ciucanu et al., JAIR 2022) encrypts every score a data owner sends
 * and every pulling bit the Comp node sends back with AES-GCM under a key
 * shared by the data owners and Comp, unknown to the Controller that relays
 * them. This module is that primitive and nothing more: one key, one
 * reusable EVP context, seal and open of short messages with a 12-byte
 * nonce and a 16-byte tag. Nonces are never reused under one key: callers
 * pass a 64-bit message counter, which fills the last 8 bytes of the nonce
 * after a 4-byte sender id; a counter must not repeat for one sender.
 *
 * Ciphertext layout: the encrypted message (same length as the plaintext)
 * followed by the 16-byte tag. Nothing is allocated after create. */
#ifndef SAMBA_AEAD_H
#define SAMBA_AEAD_H

#include <stddef.h>
#include <stdint.h>

#include "o3m_error.h"

#define SAMBA_AEAD_KEY 32
#define SAMBA_AEAD_NONCE 12
#define SAMBA_AEAD_TAG 16

typedef struct samba_aead samba_aead;

/* A context for key (32 bytes, copied); key NULL draws a fresh key from
 * OpenSSL's RAND_bytes. O3M_ENOMEM, O3M_ERANDOM; *out untouched on error. */
int samba_aead_create(samba_aead **out, const uint8_t *key, o3m_err *e);
void samba_aead_destroy(samba_aead *a);

/* Copies the key out (32 bytes): how it is shared with the other holders. */
void samba_aead_key(const samba_aead *a, uint8_t key[SAMBA_AEAD_KEY]);

/* The nonce of (sender, counter): sender big-endian in bytes 0..3, counter
 * big-endian in bytes 4..11. */
void samba_aead_nonce(uint32_t sender, uint64_t counter, uint8_t nonce[SAMBA_AEAD_NONCE]);

/* Encrypts n bytes of pt with the nonce and the optional aad into ct
 * (n + 16 bytes). O3M_ETLS if libcrypto fails. */
int samba_aead_seal_nonce(samba_aead *a, const uint8_t nonce[SAMBA_AEAD_NONCE], const uint8_t *aad,
                          size_t aad_len, const uint8_t *pt, size_t n, uint8_t *ct, o3m_err *e);

/* Decrypts ct (n + 16 bytes) into pt (n bytes). O3M_ECORRUPT, naming the
 * nonce's sender and counter, if the tag does not verify (a changed
 * ciphertext, nonce, aad or key); pt is then zeroed. */
int samba_aead_open_nonce(samba_aead *a, const uint8_t nonce[SAMBA_AEAD_NONCE],
                          const uint8_t *aad, size_t aad_len, const uint8_t *ct, size_t n,
                          uint8_t *pt, o3m_err *e);

/* The two above with the nonce of (sender, counter) and no aad. */
int samba_aead_seal(samba_aead *a, uint32_t sender, uint64_t counter, const uint8_t *pt, size_t n,
                    uint8_t *ct, o3m_err *e);
int samba_aead_open(samba_aead *a, uint32_t sender, uint64_t counter, const uint8_t *ct, size_t n,
                    uint8_t *pt, o3m_err *e);

#endif
