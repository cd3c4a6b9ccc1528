/* o3m_secagg.c -- secure aggregation of the passive participants' parts
 * (see o3m_secagg.h for the scheme). X25519 (crypto_scalarmult) and BLAKE2b
 * (crypto_generichash) are libsodium's; the streams are AES-256-CTR from
 * OpenSSL's libcrypto (EVP, AES-NI), one cipher context per handle, rekeyed
 * per stream. The pair keys live in one sodium_malloc'd array; the
 * transcript state is public and lives in ordinary (64-byte aligned)
 * memory. Streams are generated in chunks on the stack, so a batch of any
 * size needs no allocation. */
#include "o3m_secagg.h"
#include "o3m_alloc.h"
#include "o3m_assert.h"

#include "o3m_bytes.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <openssl/evp.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char PAIR_DOMAIN[] = "o3m-secagg-v1 pair";
static const char TRANSCRIPT_DOMAIN[] = "o3m-secagg-v1 transcript";

/* Bytes of stream generated per chunk: 256 AES blocks. */
#define CHUNK_BYTES 4096
#define CHUNK_WORDS (CHUNK_BYTES / 8)

struct o3m_secagg {
  int n, me, scale;
  unsigned char *pair;            /* n x 32 bytes, sodium_malloc; own row unused */
  crypto_generichash_state *tr;   /* the batch's transcript, 64-byte aligned */
  EVP_CIPHER_CTX *aes;            /* AES-256-CTR, rekeyed per stream */
  /* Queries the begun batch still expects before its mask; -1: no batch
   * begun (the order of "Use" in o3m_secagg.h). */
  int queries_left;
};

static int init(o3m_err *e) {
  if (sodium_init() < 0) return o3m_err_set(e, O3M_ERANDOM, "libsodium could not start");
  return 0;
}

void o3m_secagg_hex(const unsigned char pk[O3M_SECAGG_KEY_BYTES], char hex[65]) {
  sodium_bin2hex(hex, 65, pk, O3M_SECAGG_KEY_BYTES);
}

int o3m_secagg_parse_hex(const char *hex, unsigned char pk[O3M_SECAGG_KEY_BYTES]) {
  size_t len = 0;
  const char *end = NULL;
  if (!hex || strlen(hex) != 2 * O3M_SECAGG_KEY_BYTES) return O3M_EPARSE;
  if (sodium_hex2bin(pk, O3M_SECAGG_KEY_BYTES, hex, strlen(hex), NULL, &len, &end) != 0 ||
      len != O3M_SECAGG_KEY_BYTES || *end != '\0')
    return O3M_EPARSE;
  return 0;
}

/* The message for a key file whose folder is missing, naming the folder
 * and the command that makes it. The folder is not created here: a typo in
 * the path would otherwise put the secret key where no config points, and
 * the folder's owner and mode are the operator's to choose. */
static int missing_folder(const char *path, o3m_err *e) {
  char dir[1024];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (!slash) snprintf(dir, sizeof dir, ".");
  else if (slash == dir) dir[1] = '\0';
  else *slash = '\0';
  return o3m_err_set(e, O3M_EIO, "agg secret key %s: the folder %s does not exist; create it "
                     "first (mkdir -p -m 700 %s)", path, dir, dir);
}

int o3m_secagg_keygen(const char *path, unsigned char pk[O3M_SECAGG_KEY_BYTES], o3m_err *e) {
  int rc = init(e);
  if (rc < 0) return rc;
  unsigned char *sk = sodium_malloc(O3M_SECAGG_KEY_BYTES);
  if (!sk) return o3m_err_set(e, O3M_ENOMEM, "agg keygen: out of guarded memory");
  crypto_box_keypair(pk, sk); /* an X25519 key pair (crypto_box uses X25519) */
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    int err = errno;
    sodium_free(sk);
    if (err == ENOENT) return missing_folder(path, e);
    return o3m_err_set(e, err == EEXIST ? O3M_EEXISTS : O3M_EIO, "agg secret key %s: %s%s", path,
                       strerror(err), err == EEXIST ? " (never overwritten; remove it first)" : "");
  }
  ssize_t w = write(fd, sk, O3M_SECAGG_KEY_BYTES);
  sodium_free(sk); /* wipes */
  int ok = w == O3M_SECAGG_KEY_BYTES && fsync(fd) == 0;
  int err = errno;
  if (close(fd) != 0) ok = 0;
  if (!ok) {
    unlink(path);
    return o3m_err_set(e, O3M_EIO, "agg secret key %s: cannot write: %s", path, strerror(err));
  }
  return 0;
}

int o3m_secagg_scale(int n, const double *max_norms, int *scale, o3m_err *e) {
  if (n < 1 || !max_norms)
    return o3m_err_set(e, O3M_EINVAL, "secure aggregation needs at least one passive party");
  double B = 0;
  for (int j = 0; j < n; j++) {
    if (!isfinite(max_norms[j]) || !(max_norms[j] > 0))
      return o3m_err_set(e, O3M_EINVAL, "secure aggregation: max_norm of passive party %d is "
                         "not a finite number > 0", j);
    B += max_norms[j];
  }
  /* The largest s with B 2^s <= 2^62: B = f 2^x with f in [0.5, 1). */
  int x;
  double f = frexp(B, &x);
  int s = 62 - x + (f == 0.5 ? 1 : 0);
  if (s > O3M_SECAGG_MAX_SCALE) s = O3M_SECAGG_MAX_SCALE;
  if (s < O3M_SECAGG_MIN_SCALE)
    return o3m_err_set(e, O3M_ERANGE, "secure aggregation: the passive parties' max_norm sum "
                       "to B = %g, which leaves %d bits after the binary point in int64 "
                       "(B 2^s <= 2^62); at least %d are needed: lower max_norm or use "
                       "aggregation = per-party", B, s, O3M_SECAGG_MIN_SCALE);
  *scale = s;
  return 0;
}

double o3m_secagg_max_error(int n, int scale) { return ldexp((double)n, -(scale + 1)); }

void o3m_secagg_destroy(o3m_secagg *s) {
  if (!s) return;
  if (s->pair) sodium_free(s->pair); /* wipes */
  if (s->tr) {
    sodium_memzero(s->tr, sizeof *s->tr);
    o3m_free(s->tr);
  }
  EVP_CIPHER_CTX_free(s->aes); /* cleanses the key schedule */
  o3m_free(s);
}

int o3m_secagg_create_from_key(o3m_secagg **out, int n,
                               const unsigned char (*pks)[O3M_SECAGG_KEY_BYTES], int me,
                               const unsigned char sk[O3M_SECAGG_KEY_BYTES], int scale,
                               o3m_err *e) {
  *out = NULL;
  if (n < 1 || me < 0 || me >= n || (n > 1 && (!pks || !sk)) || scale < O3M_SECAGG_MIN_SCALE ||
      scale > O3M_SECAGG_MAX_SCALE)
    return o3m_err_set(e, O3M_EINVAL, "o3m_secagg_create: bad arguments");
  int rc = init(e);
  if (rc < 0) return rc;
  unsigned char pk[O3M_SECAGG_KEY_BYTES];
  if (n > 1) crypto_scalarmult_base(pk, sk);
  if (n > 1 && sodium_memcmp(pk, pks[me], sizeof pk) != 0)
    return o3m_err_set(e, O3M_EINVAL, "the agg secret key does not belong to the agg_public "
                       "configured for passive party %d", me);
  o3m_secagg *s = o3m_calloc(1, sizeof *s);
  if (!s) return o3m_err_set(e, O3M_ENOMEM, "secagg: out of memory");
  s->n = n;
  s->me = me;
  s->scale = scale;
  s->queries_left = -1;
  s->pair = sodium_malloc((size_t)n * O3M_SECAGG_KEY_BYTES);
  s->tr = aligned_alloc(64, (sizeof *s->tr + 63) / 64 * 64);
  s->aes = EVP_CIPHER_CTX_new();
  if (s->aes && EVP_EncryptInit_ex(s->aes, EVP_aes_256_ctr(), NULL, NULL, NULL) != 1) {
    o3m_secagg_destroy(s);
    return o3m_err_set(e, O3M_EINVAL, "secagg: libcrypto has no AES-256-CTR");
  }
  if (!s->pair || !s->tr || !s->aes) {
    o3m_secagg_destroy(s);
    return o3m_err_set(e, O3M_ENOMEM, "secagg: out of memory for %d pair keys", n);
  }
  sodium_memzero(s->pair, (size_t)n * O3M_SECAGG_KEY_BYTES);
  unsigned char q[crypto_scalarmult_BYTES];
  crypto_generichash_state st;
  rc = 0;
  for (int i = 0; i < n && rc == 0; i++) {
    if (i == me) continue;
    /* crypto_scalarmult fails on an all-zero result; checked again here. */
    if (crypto_scalarmult(q, sk, pks[i]) != 0 || sodium_is_zero(q, sizeof q)) {
      rc = o3m_err_set(e, O3M_ECORRUPT, "the agg_public of passive party %d gives an all-zero "
                       "shared secret (a low-order point): refused", i);
      break;
    }
    const unsigned char *lo = pks[me < i ? me : i], *hi = pks[me < i ? i : me];
    crypto_generichash_init(&st, q, sizeof q, O3M_SECAGG_KEY_BYTES);
    crypto_generichash_update(&st, (const unsigned char *)PAIR_DOMAIN, sizeof PAIR_DOMAIN - 1);
    crypto_generichash_update(&st, lo, O3M_SECAGG_KEY_BYTES);
    crypto_generichash_update(&st, hi, O3M_SECAGG_KEY_BYTES);
    crypto_generichash_final(&st, s->pair + (size_t)i * O3M_SECAGG_KEY_BYTES,
                             O3M_SECAGG_KEY_BYTES);
  }
  sodium_memzero(q, sizeof q);
  sodium_memzero(&st, sizeof st);
  if (rc < 0) {
    o3m_secagg_destroy(s);
    return rc;
  }
  *out = s;
  return 0;
}

/* Reads the secret key file into guarded memory *sk (sodium_malloc'd; the
 * caller sodium_frees it) after checking that only its owner may read it. */
static int read_secret(const char *path, unsigned char **sk, o3m_err *e) {
  *sk = NULL;
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return o3m_err_set(e, O3M_EIO, "agg secret key %s: %s", path, strerror(errno));
  struct stat sb;
  int rc = o3m_secret_file_check("agg secret key", path, fd, &sb, e);
  if (rc == 0 && sb.st_size != O3M_SECAGG_KEY_BYTES)
    rc = o3m_err_set(e, O3M_ECORRUPT, "agg secret key %s: %lld bytes, expected %d (write one "
                     "with o3m-passive --agg-keygen)", path, (long long)sb.st_size,
                     O3M_SECAGG_KEY_BYTES);
  if (rc == 0) {
    *sk = sodium_malloc(O3M_SECAGG_KEY_BYTES);
    if (!*sk) rc = o3m_err_set(e, O3M_ENOMEM, "agg secret key: out of guarded memory");
  }
  size_t got = 0;
  while (rc == 0 && got < O3M_SECAGG_KEY_BYTES) {
    ssize_t r = read(fd, *sk + got, O3M_SECAGG_KEY_BYTES - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) rc = o3m_err_set(e, O3M_EIO, "agg secret key %s: short read", path);
    else got += (size_t)r;
  }
  close(fd);
  if (rc < 0 && *sk) {
    sodium_free(*sk);
    *sk = NULL;
  }
  return rc;
}

int o3m_secagg_create(o3m_secagg **out, int n, const unsigned char (*pks)[O3M_SECAGG_KEY_BYTES],
                      int me, const char *secret_path, int scale, o3m_err *e) {
  *out = NULL;
  if (n == 1) return o3m_secagg_create_from_key(out, 1, NULL, 0, NULL, scale, e);
  if (!secret_path) return o3m_err_set(e, O3M_EINVAL, "no agg secret key file");
  int rc = init(e);
  if (rc < 0) return rc;
  unsigned char *sk;
  rc = read_secret(secret_path, &sk, e);
  if (rc < 0) return rc;
  rc = o3m_secagg_create_from_key(out, n, pks, me, sk, scale, e);
  sodium_free(sk); /* wipes */
  return rc;
}

int o3m_secagg_scale_of(const o3m_secagg *s) { return s->scale; }
int o3m_secagg_index(const o3m_secagg *s) { return s->me; }

static void put_u32(crypto_generichash_state *st, uint32_t v) {
  unsigned char b[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                        (unsigned char)(v >> 24)};
  crypto_generichash_update(st, b, sizeof b);
}

static void put_str(crypto_generichash_state *st, const char *str) {
  size_t len = str ? strlen(str) : 0;
  put_u32(st, (uint32_t)len);
  if (len) crypto_generichash_update(st, (const unsigned char *)str, len);
}

void o3m_secagg_begin(o3m_secagg *s, uint64_t mask_id,
                      const unsigned char nonce[O3M_SECAGG_NONCE_BYTES], int d, int n_queries) {
  O3M_ASSERT(n_queries >= 0);
  s->queries_left = n_queries;
  crypto_generichash_init(s->tr, NULL, 0, O3M_SECAGG_KEY_BYTES);
  crypto_generichash_update(s->tr, (const unsigned char *)TRANSCRIPT_DOMAIN,
                            sizeof TRANSCRIPT_DOMAIN - 1);
  unsigned char m[8];
  for (int i = 0; i < 8; i++) m[i] = (unsigned char)(mask_id >> (8 * i));
  crypto_generichash_update(s->tr, m, sizeof m);
  crypto_generichash_update(s->tr, nonce, O3M_SECAGG_NONCE_BYTES);
  put_u32(s->tr, (uint32_t)d);
  put_u32(s->tr, (uint32_t)n_queries);
}

void o3m_secagg_query(o3m_secagg *s, const char *user, int n_items, const char *const *items) {
  O3M_ASSERT(s->queries_left > 0);
  s->queries_left--;
  put_str(s->tr, user);
  put_u32(s->tr, (uint32_t)n_items);
  for (int k = 0; k < n_items; k++) put_str(s->tr, items[k]);
}

int o3m_secagg_encode(int scale, size_t n, const double *v, uint64_t *out, o3m_err *e) {
  O3M_ASSERT(scale >= O3M_SECAGG_MIN_SCALE && scale <= O3M_SECAGG_MAX_SCALE);
  const double f = ldexp(1.0, scale);
  for (size_t i = 0; i < n; i++) {
    double x = v[i] * f; /* exact: a power of two (no value here is subnormal after it) */
    if (!(fabs(x) <= 0x1p62))
      return o3m_err_set(e, O3M_ERANGE, "secure aggregation: value %zu is not finite or too "
                         "large to encode", i);
    /* Rounded to the nearest integer (ties to even, the default rounding
     * mode), as int64, then its two's complement as uint64 (a conversion
     * that is defined for negatives). */
    out[i] = (uint64_t)llrint(x);
  }
  return 0;
}

/* Words are added (a PP's pair streams in add_words, the AP's parts in
 * o3m_secagg_add_part) and decoded in blocks of BLOCK_WORDS with a fixed trip
 * count, which compilers turn into vector code even where their cost model
 * for loops of unknown length does not (gcc 12 at -O2); the tail is scalar.
 * The results are the same word for word: integer addition modulo 2^64 and
 * one conversion per word do not depend on the order. */
#define BLOCK_WORDS 8

/* o[i] += w[i] (plus) or o[i] -= w[i] modulo 2^64 for i < n, w's words
 * little-endian (le64toh is the identity on a little-endian host and a byte
 * swap elsewhere). */
static void add_words(size_t n, const uint64_t *restrict w, uint64_t *restrict o, int plus) {
  size_t i = 0;
  if (plus) {
    for (; i + BLOCK_WORDS <= n; i += BLOCK_WORDS)
      for (size_t k = 0; k < BLOCK_WORDS; k++) o[i + k] += le64toh(w[i + k]);
    for (; i < n; i++) o[i] += le64toh(w[i]);
  } else {
    for (; i + BLOCK_WORDS <= n; i += BLOCK_WORDS)
      for (size_t k = 0; k < BLOCK_WORDS; k++) o[i + k] -= le64toh(w[i + k]);
    for (; i < n; i++) o[i] -= le64toh(w[i]);
  }
}

/* out[i] += or -= the i-th little-endian word of the AES-256-CTR stream
 * of key (zero initial counter: the key is fresh per batch and pair), for
 * i < n. O3M_ECORRUPT if libcrypto fails (out is garbage then). */
static int add_stream(EVP_CIPHER_CTX *aes, uint64_t *out, size_t n, const unsigned char key[32],
                      int plus) {
  static const unsigned char zeros[CHUNK_BYTES];
  static const unsigned char iv[16];
  /* Words, so that add_words is plain vector adds. */
  uint64_t buf[CHUNK_WORDS];
  if (EVP_EncryptInit_ex(aes, NULL, NULL, key, iv) != 1) return O3M_ECORRUPT;
  for (size_t off = 0; off < n; off += CHUNK_WORDS) {
    size_t w = n - off < CHUNK_WORDS ? n - off : CHUNK_WORDS;
    int len = 0;
    if (EVP_EncryptUpdate(aes, (unsigned char *)buf, &len, zeros, (int)(w * 8)) != 1 ||
        len != (int)(w * 8)) {
      sodium_memzero(buf, sizeof buf);
      return O3M_ECORRUPT;
    }
    add_words(w, buf, out + off, plus);
  }
  sodium_memzero(buf, sizeof buf);
  return 0;
}

int o3m_secagg_mask(o3m_secagg *s, size_t n, const double *v, uint64_t *out, o3m_err *e) {
  /* Every query of the batch is in the transcript, which this ends. */
  O3M_ASSERT(s->queries_left == 0);
  s->queries_left = -1;
  unsigned char T[O3M_SECAGG_KEY_BYTES];
  crypto_generichash_final(s->tr, T, sizeof T);
  int rc = o3m_secagg_encode(s->scale, n, v, out, e);
  if (rc < 0) return rc;
  unsigned char key[O3M_SECAGG_KEY_BYTES];
  for (int i = 0; i < s->n && rc == 0; i++) {
    if (i == s->me) continue;
    crypto_generichash(key, sizeof key, T, sizeof T, s->pair + (size_t)i * O3M_SECAGG_KEY_BYTES,
                       O3M_SECAGG_KEY_BYTES);
    if (add_stream(s->aes, out, n, key, s->me < i) < 0)
      rc = o3m_err_set(e, O3M_ECORRUPT, "secure aggregation: AES-256-CTR failed (libcrypto)");
  }
  sodium_memzero(key, sizeof key);
  return rc;
}

void o3m_secagg_add_part(size_t n, const int64_t *restrict part, uint64_t *restrict acc) {
  size_t i = 0;
  for (; i + BLOCK_WORDS <= n; i += BLOCK_WORDS)
    for (size_t k = 0; k < BLOCK_WORDS; k++) acc[i + k] += (uint64_t)part[i + k];
  for (; i < n; i++) acc[i] += (uint64_t)part[i];
}

/* The uint64 sum read as int64: the same bits (int64_t is two's
 * complement), which memcpy reads without the implementation-defined
 * conversion of an out-of-range value. */
static inline double decode_word(uint64_t u, double f) {
  int64_t x;
  memcpy(&x, &u, sizeof x);
  return (double)x * f;
}

void o3m_secagg_decode(int scale, size_t n, const uint64_t *restrict acc, double *restrict out) {
  O3M_ASSERT(scale >= O3M_SECAGG_MIN_SCALE && scale <= O3M_SECAGG_MAX_SCALE);
  const double f = ldexp(1.0, -scale); /* exact: a power of two */
  size_t i = 0;
  for (; i + BLOCK_WORDS <= n; i += BLOCK_WORDS)
    for (size_t k = 0; k < BLOCK_WORDS; k++) out[i + k] = decode_word(acc[i + k], f);
  for (; i < n; i++) out[i] = decode_word(acc[i], f);
}
