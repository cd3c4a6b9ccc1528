/* test_samba.c -- Samba (eval/peers/samba): AES-256-GCM against the published
 * known answers (McGrew and Viega's GCM test cases 13, 14 and 16, the
 * AES-256 ones), tamper detection, and the protocol: for every algorithm
 * the secure run returns exactly the plain cumulative reward and pull
 * sequence, the operation counts are the paper's O(NK) AES-GCM and O(K)
 * Paillier, the algorithms find a clearly best arm, and bad configurations
 * are refused by name. Paillier itself is tested in test_paillier.c. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "bl_paillier.h"
#include "samba.h"
#include "samba_aead.h"

static void hex(const char *s, uint8_t *out, size_t n) {
  for (size_t i = 0; i < n; i++) {
    unsigned v;
    sscanf(s + 2 * i, "%2x", &v);
    out[i] = (uint8_t)v;
  }
}

static void kat(const char *key_h, const char *iv_h, const char *pt_h, const char *aad_h,
                const char *ct_h, const char *tag_h) {
  uint8_t key[32], iv[12], pt[64], aad[32], want[64 + 16], got[64 + 16], back[64];
  size_t n = strlen(pt_h) / 2, na = strlen(aad_h) / 2;
  hex(key_h, key, 32);
  hex(iv_h, iv, 12);
  hex(pt_h, pt, n);
  hex(aad_h, aad, na);
  hex(ct_h, want, n);
  hex(tag_h, want + n, 16);
  samba_aead *a;
  cr_assert_eq(samba_aead_create(&a, key, NULL), 0);
  cr_assert_eq(samba_aead_seal_nonce(a, iv, aad, na, pt, n, got, NULL), 0);
  cr_assert_arr_eq(got, want, n + 16, "ciphertext or tag differs from the known answer");
  cr_assert_eq(samba_aead_open_nonce(a, iv, aad, na, got, n, back, NULL), 0);
  cr_assert_arr_eq(back, pt, n);
  samba_aead_destroy(a);
}

Test(samba_aead, aes256_gcm_known_answers) {
  const char *zero32 = "0000000000000000000000000000000000000000000000000000000000000000";
  /* Test case 13: empty plaintext, only the tag. */
  kat(zero32, "000000000000000000000000", "", "", "", "530f8afbc74536b9a963b4f1c4cb738b");
  /* Test case 14: one zero block. */
  kat(zero32, "000000000000000000000000", "00000000000000000000000000000000", "",
      "cea7403d4d606b6e074ec5d3baf39d18", "d0d1c8a799996bf0265b98b5d48ab919");
  /* Test case 16: 60 bytes with 20 bytes of additional data. */
  kat("feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308",
      "cafebabefacedbaddecaf888",
      "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a721c3c0c95956809532fcf0e24"
      "49a6b525b16aedf5aa0de657ba637b39",
      "feedfacedeadbeeffeedfacedeadbeefabaddad2",
      "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa8cb08e48590dbb3da7b08b10"
      "56828838c5f61e6393ba7a0abcc9f662",
      "76fc6ece0f4e1768cddf8853bb2d551b");
}

Test(samba_aead, a_changed_message_does_not_open) {
  samba_aead *a, *b;
  cr_assert_eq(samba_aead_create(&a, NULL, NULL), 0);
  uint8_t key[32];
  samba_aead_key(a, key);
  cr_assert_eq(samba_aead_create(&b, key, NULL), 0);
  const uint8_t pt[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  uint8_t ct[24], out[8];
  cr_assert_eq(samba_aead_seal(a, 3, 77, pt, 8, ct, NULL), 0);
  /* The holder of the same key opens it. */
  cr_assert_eq(samba_aead_open(b, 3, 77, ct, 8, out, NULL), 0);
  cr_assert_arr_eq(out, pt, 8);
  o3m_err e;
  /* Another counter (nonce), a flipped bit, a flipped tag bit: refused, zeroed. */
  cr_assert_eq(samba_aead_open(b, 3, 78, ct, 8, out, &e), O3M_ECORRUPT);
  cr_assert(strstr(e.msg, "message 78 from sender 3"), "%s", e.msg);
  for (int i = 0; i < 8; i++) cr_assert_eq(out[i], 0);
  ct[0] ^= 1;
  cr_assert_eq(samba_aead_open(b, 3, 77, ct, 8, out, NULL), O3M_ECORRUPT);
  ct[0] ^= 1;
  ct[23] ^= 0x80;
  cr_assert_eq(samba_aead_open(b, 3, 77, ct, 8, out, NULL), O3M_ECORRUPT);
  samba_aead_destroy(b);
  /* Another key. */
  cr_assert_eq(samba_aead_create(&b, NULL, NULL), 0);
  ct[23] ^= 0x80;
  cr_assert_eq(samba_aead_open(b, 3, 77, ct, 8, out, NULL), O3M_ECORRUPT);
  samba_aead_destroy(b);
  samba_aead_destroy(a);
  uint8_t nonce[12];
  samba_aead_nonce(0x01020304u, 0x05060708090a0b0cull, nonce);
  for (int i = 0; i < 12; i++) cr_assert_eq(nonce[i], i + 1, "nonce byte %d", i);
}

static bl_paillier *small_key(void) {
  bl_paillier *k;
  o3m_err e = {0};
  cr_assert_eq(bl_paillier_keygen(512, &k, &e), 0, "%s", e.msg);
  return k;
}

Test(samba, secure_reward_equals_plain_for_every_algorithm_and_seed) {
  bl_paillier *key = small_key();
  double mu[7] = {0.3, 0.5, 0.52, 0.1, 0.9, 0.88, 0.0};
  for (int a = 0; a < SAMBA_N_ALGOS; a++)
    for (uint64_t seed = 1; seed <= 4; seed++) {
      samba_config c;
      samba_config_default(&c);
      c.algo = (samba_algo)a;
      c.K = 7;
      c.N = 600;
      c.mu = mu;
      c.seed = seed;
      samba_result p, s;
      o3m_err e = {0};
      cr_assert_eq(samba_run_both(&c, key, &p, &s, &e), 0, "%s: %s", samba_algo_name(c.algo), e.msg);
      cr_assert_eq(p.reward, s.reward);
      cr_assert_eq(p.pulls_hash, s.pulls_hash);
      long per = a == SAMBA_PURSUIT ? 2 : 1;
      cr_assert_eq(s.iterations, per * (c.N - c.K), "%s: %lld core runs", samba_algo_name(c.algo),
                   s.iterations);
      cr_assert_eq(s.aes_ops, 4LL * c.K * per * (c.N - c.K), "%s", samba_algo_name(c.algo));
      cr_assert_eq(s.paillier_ops, 2LL * c.K);
      cr_assert_eq(p.aes_ops, 0);
      cr_assert(p.reward > 0 && p.reward <= c.N);
    }
  bl_paillier_free(key);
}

Test(samba, seeds_change_the_run) {
  double mu[4] = {0.5, 0.5, 0.5, 0.5};
  samba_config c;
  samba_config_default(&c);
  c.algo = SAMBA_TS;
  c.K = 4;
  c.N = 500;
  c.mu = mu;
  samba_result a, b;
  cr_assert_eq(samba_run_plain(&c, &a, NULL), 0);
  c.seed = 2;
  cr_assert_eq(samba_run_plain(&c, &b, NULL), 0);
  cr_assert_neq(a.pulls_hash, b.pulls_hash, "two seeds gave one pull sequence");
}

Test(samba, every_algorithm_finds_a_clearly_best_arm) {
  double mu[5] = {0.2, 0.2, 0.9, 0.2, 0.2};
  for (int a = 0; a < SAMBA_N_ALGOS; a++) {
    samba_config c;
    samba_config_default(&c);
    c.algo = (samba_algo)a;
    c.K = 5;
    c.N = 4000;
    c.mu = mu;
    samba_result r;
    cr_assert_eq(samba_run_plain(&c, &r, NULL), 0);
    /* Uniform play earns 0.34 N; the best arm 0.9 N. */
    cr_assert(r.reward > 0.75 * c.N, "%s earned %lld of %ld", samba_algo_name(c.algo), r.reward,
              c.N);
  }
}

Test(samba, bad_config_is_refused_by_name) {
  double mu[3] = {0.1, 0.2, 1.5};
  samba_config c;
  samba_config_default(&c);
  c.algo = SAMBA_UCB;
  c.K = 3;
  c.N = 100;
  c.mu = mu;
  samba_result r = {.reward = 42};
  o3m_err e;
  cr_assert_eq(samba_run_plain(&c, &r, &e), O3M_EINVAL);
  cr_assert(strstr(e.msg, "arm 2"), "%s", e.msg);
  mu[2] = 0.3;
  c.N = 2;
  cr_assert_eq(samba_run_plain(&c, &r, &e), O3M_EINVAL);
  cr_assert(strstr(e.msg, "N = 2"), "%s", e.msg);
  c.N = 100;
  c.K = 1;
  cr_assert_eq(samba_run_plain(&c, &r, &e), O3M_EINVAL);
  c.K = 3;
  c.tau = 0.001;
  cr_assert_eq(samba_run_plain(&c, &r, &e), O3M_EINVAL);
  cr_assert(strstr(e.msg, "temperature"), "%s", e.msg);
  cr_assert_eq(r.reward, 42);
  cr_assert_eq(samba_run_secure(&c, NULL, &r, &e), O3M_EINVAL);
  samba_algo al;
  cr_assert_eq(samba_algo_parse("pursuit", &al), 0);
  cr_assert_eq(al, SAMBA_PURSUIT);
  cr_assert_eq(samba_algo_parse("greedy", &al), O3M_EINVAL);
}
