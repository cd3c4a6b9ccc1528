/* test_secagg.c -- the secure aggregation module (crypto/o3m_secagg.h): the
 * masks of all passive parties cancel exactly in the sum and only there, a
 * party asked something else breaks every row, the decoding error stays
 * inside the stated bound, the scale, and the refusals (key file modes,
 * all-zero shared secret, a key that is not the configured one). */
#include <criterion/criterion.h>
#include <math.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "o3m_secagg.h"

#define NPP 4
#define D 20
#define K 5
#define NQ 3
#define NV (NQ * K * D)

static unsigned char sk[NPP][32], pk[NPP][32];
static o3m_secagg *h[NPP];
static double part[NPP][NV];
static const char *users[NQ] = {"alice", "bob", "carol"};
static const char *items[NQ][K] = {{"i1", "i2", "i3", "i4", "i5"},
                                   {"i6", "i7", "i8", "i9", "i10"},
                                   {"a", "b", "c", "d", "e"}};
static unsigned char nonce[32];

static void setup(void) {
  cr_assert(sodium_init() >= 0);
  for (int j = 0; j < NPP; j++) crypto_box_keypair(pk[j], sk[j]);
  double mn[NPP] = {10, 10, 10, 10};
  int s;
  cr_assert_eq(o3m_secagg_scale(NPP, mn, &s, NULL), 0);
  for (int j = 0; j < NPP; j++) {
    o3m_err e;
    o3m_err_clear(&e);
    cr_assert_eq(o3m_secagg_create_from_key(&h[j], NPP, (const unsigned char(*)[32])pk, j, sk[j],
                                            s, &e), 0, "%s", o3m_err_message(&e));
    for (int i = 0; i < NV; i++) part[j][i] = sin(1.0 + i * 0.37 + j * 1.3) * (j + 1) * 0.4;
  }
  randombytes_buf(nonce, sizeof nonce);
}

static void teardown(void) {
  for (int j = 0; j < NPP; j++) o3m_secagg_destroy(h[j]);
}

/* Party j's words for the standard batch, with optional changes. */
static void masked(int j, uint64_t mask_id, const unsigned char *nc, int swap_items,
                   const char *user0, uint64_t *out) {
  o3m_secagg_begin(h[j], mask_id, nc, D, NQ);
  for (int q = 0; q < NQ; q++) {
    const char *it[K];
    memcpy(it, items[q], sizeof it);
    if (q == 0 && swap_items) {
      const char *t = it[0];
      it[0] = it[1];
      it[1] = t;
    }
    o3m_secagg_query(h[j], q == 0 && user0 ? user0 : users[q], K, it);
  }
  cr_assert_eq(o3m_secagg_mask(h[j], NV, part[j], out, NULL), 0);
}

static void sum_decode(uint64_t (*w)[NV], double *out) {
  uint64_t acc[NV] = {0};
  for (int j = 0; j < NPP; j++) o3m_secagg_add_part(NV, (const int64_t *)w[j], acc);
  o3m_secagg_decode(o3m_secagg_scale_of(h[0]), NV, acc, out);
}

TestSuite(secagg, .init = setup, .fini = teardown);

Test(secagg, masks_cancel_in_the_sum_within_the_bound) {
  static uint64_t w[NPP][NV];
  for (int j = 0; j < NPP; j++) masked(j, 42, nonce, 0, NULL, w[j]);
  double sum[NV];
  sum_decode(w, sum);
  double bound = o3m_secagg_max_error(NPP, o3m_secagg_scale_of(h[0]));
  /* The reference in long double (64-bit mantissa) is exact enough; the
   * stated bound adds the relative 2^-53 of the final conversion. */
  for (int i = 0; i < NV; i++) {
    long double t = (long double)part[0][i] + part[1][i] + part[2][i] + part[3][i];
    double err = (double)fabsl((long double)sum[i] - t);
    double lim = bound + ldexp(fabs((double)t), -53);
    cr_assert(err <= lim, "value %d: decoding error %g above the bound %g", i, err, lim);
  }
  cr_assert(bound < 1e-13, "bound %g for max_norm 10 x 4", bound);
}

/* One part alone differs from its plain encoding in (nearly) every word, and
 * its words spread over the whole ring, not near zero. */
Test(secagg, one_part_alone_is_noise) {
  static uint64_t w[NV], plain[NV];
  masked(1, 42, nonce, 0, NULL, w);
  cr_assert_eq(o3m_secagg_encode(o3m_secagg_scale_of(h[1]), NV, part[1], plain, NULL), 0);
  int same = 0, small = 0, high = 0;
  for (int i = 0; i < NV; i++) {
    same += w[i] == plain[i];
    int64_t x;
    memcpy(&x, &w[i], 8);
    small += llabs(x) < ((int64_t)1 << 58);
    high += (w[i] >> 63) != 0;
  }
  cr_assert_eq(same, 0, "%d of %d words equal the plain encoding", same, NV);
  cr_assert(small < NV / 8, "%d of %d words look like small encoded values", small, NV);
  cr_assert(high > NV / 3 && high < 2 * NV / 3, "top bit set in %d of %d words", high, NV);
}

/* A party asked a different query (user, item order, nonce, mask id) adds
 * streams that cancel nothing: every row of the sum is garbage. */
static void check_broken(int variant) {
  static uint64_t w[NPP][NV];
  unsigned char other[32];
  memcpy(other, nonce, 32);
  other[7] ^= 1;
  for (int j = 0; j < NPP; j++) {
    int odd = j == 2;
    masked(j, odd && variant == 3 ? 43 : 42, odd && variant == 2 ? other : nonce,
           odd && variant == 1, odd && variant == 0 ? "mallory" : NULL, w[j]);
  }
  double sum[NV];
  sum_decode(w, sum);
  for (int r = 0; r < NQ * K; r++) {
    double err = 0;
    for (int c = 0; c < D; c++) {
      int i = r * D + c;
      double t = part[0][i] + part[1][i] + part[2][i] + part[3][i];
      err = fmax(err, fabs(sum[i] - t));
    }
    /* Parts are below 1.6 each, the noise spreads over +-2^63 / 2^s = 128. */
    cr_assert(err > 8, "variant %d, row %d: the sum still decodes (error %g)", variant, r, err);
  }
}

Test(secagg, other_user_breaks_every_row) { check_broken(0); }
Test(secagg, other_item_order_breaks_every_row) { check_broken(1); }
Test(secagg, other_nonce_breaks_every_row) { check_broken(2); }
Test(secagg, other_mask_id_breaks_every_row) { check_broken(3); }

Test(secagg, replayed_nonce_gives_the_same_words) {
  static uint64_t a[NV], b[NV];
  masked(0, 42, nonce, 0, NULL, a);
  masked(0, 42, nonce, 0, NULL, b);
  cr_assert_eq(memcmp(a, b, sizeof a), 0);
}

Test(secagg, encode_decode_roundtrip_bound) {
  double v[6] = {0, 1e-300, -3.25, 1e4, -1e4, 0.1234567890123};
  uint64_t u[6];
  double o[6];
  int s = 46;
  cr_assert_eq(o3m_secagg_encode(s, 6, v, u, NULL), 0);
  o3m_secagg_decode(s, 6, u, o);
  for (int i = 0; i < 6; i++)
    cr_assert(fabs(o[i] - v[i]) <= o3m_secagg_max_error(1, s), "%d: %g vs %g", i, o[i], v[i]);
  double bad[1] = {NAN};
  cr_assert_eq(o3m_secagg_encode(s, 1, bad, u, NULL), O3M_ERANGE);
  double big[1] = {1e30};
  cr_assert_eq(o3m_secagg_encode(s, 1, big, u, NULL), O3M_ERANGE);
}

/* The add and the decode run in blocks of 8 words and a scalar tail: every
 * word of a length that is not a multiple of 8 must come out as the plain
 * formula says, wrapping modulo 2^64 and decoding words above INT64_MAX as
 * negative. */
Test(secagg, blocked_add_and_decode_cover_every_word) {
  enum { N = 8 * 3 + 5 };
  int64_t part[N];
  uint64_t acc[N], want[N];
  double out[N];
  for (int i = 0; i < N; i++) {
    acc[i] = UINT64_MAX - (uint64_t)i;            /* wraps when part > i */
    part[i] = (int64_t)(i * 1000003) - 7 * i * i; /* both signs */
    want[i] = acc[i] + (uint64_t)part[i];
  }
  o3m_secagg_add_part(N, part, acc);
  for (int i = 0; i < N; i++)
    cr_assert(acc[i] == want[i], "word %d: %llu, expected %llu", i, (unsigned long long)acc[i],
              (unsigned long long)want[i]);
  int s = 20;
  o3m_secagg_decode(s, N, acc, out);
  for (int i = 0; i < N; i++) {
    /* want[i] as a two's complement int64, without converting out of range. */
    double x = want[i] <= (uint64_t)INT64_MAX ? (double)(int64_t)want[i]
                                              : -(double)(UINT64_MAX - want[i]) - 1.0;
    cr_assert(out[i] == x * ldexp(1.0, -s), "word %d: %.17g, expected %.17g", i, out[i],
              x * ldexp(1.0, -s));
  }
}

Test(secagg, scale_derivation) {
  int s;
  double one[1] = {1.0};
  cr_assert_eq(o3m_secagg_scale(1, one, &s, NULL), 0);
  cr_assert_eq(s, 62);
  double four[4] = {1e4, 1e4, 1e4, 1e4};
  cr_assert_eq(o3m_secagg_scale(4, four, &s, NULL), 0);
  cr_assert_eq(s, 46, "B = 4e4: s = %d", s);
  cr_assert(4e4 * ldexp(1, s) <= ldexp(1, 62) && 4e4 * ldexp(1, s + 1) > ldexp(1, 62));
  double two[2] = {1.0, 1.0}; /* B = 2 exactly: 2 2^61 = 2^62 */
  cr_assert_eq(o3m_secagg_scale(2, two, &s, NULL), 0);
  cr_assert_eq(s, 61);
  double small[1] = {0.01};
  cr_assert_eq(o3m_secagg_scale(1, small, &s, NULL), 0);
  cr_assert_eq(s, 62, "capped");
  double huge[2] = {1e13, 1e13};
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert_eq(o3m_secagg_scale(2, huge, &s, &e), O3M_ERANGE);
  cr_assert(strstr(o3m_err_message(&e), "B = 2e+13"), "%s", o3m_err_message(&e));
  cr_assert_float_eq(o3m_secagg_max_error(4, 46), 4 * ldexp(1, -47), 1e-30);
}

Test(secagg, all_zero_shared_secret_refused) {
  unsigned char pks[2][32];
  memset(pks, 0, sizeof pks);
  memcpy(pks[0], pk[0], 32); /* peer 1 is the zero point, of low order */
  o3m_secagg *x;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert_eq(o3m_secagg_create_from_key(&x, 2, (const unsigned char(*)[32])pks, 0, sk[0], 40,
                                          &e), O3M_ECORRUPT);
  cr_assert_null(x);
  cr_assert(strstr(o3m_err_message(&e), "all-zero"), "%s", o3m_err_message(&e));
}

Test(secagg, key_of_another_party_refused) {
  o3m_secagg *x;
  cr_assert_eq(o3m_secagg_create_from_key(&x, NPP, (const unsigned char(*)[32])pk, 0, sk[1], 40,
                                          NULL), O3M_EINVAL);
}

Test(secagg, key_file_permissions_and_keygen) {
  char dir[] = "/tmp/o3m-secagg-XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  char path[128];
  snprintf(path, sizeof path, "%s/agg.key", dir);
  unsigned char p0[32], p1[32];
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert_eq(o3m_secagg_keygen(path, p0, &e), 0, "%s", o3m_err_message(&e));
  struct stat sb;
  cr_assert_eq(stat(path, &sb), 0);
  cr_assert_eq(sb.st_mode & 0777, 0600, "mode %o", (unsigned)(sb.st_mode & 0777));
  cr_assert_eq(sb.st_size, 32);
  cr_assert_eq(o3m_secagg_keygen(path, p1, NULL), O3M_EEXISTS, "never overwritten");
  /* The file's key is the one keygen printed. */
  unsigned char pks[2][32];
  memcpy(pks[0], p0, 32);
  memcpy(pks[1], pk[1], 32);
  o3m_secagg *x = NULL;
  cr_assert_eq(o3m_secagg_create(&x, 2, (const unsigned char(*)[32])pks, 0, path, 40, &e), 0,
               "%s", o3m_err_message(&e));
  o3m_secagg_destroy(x);
  cr_assert_eq(chmod(path, 0640), 0);
  o3m_err_clear(&e);
  cr_assert_eq(o3m_secagg_create(&x, 2, (const unsigned char(*)[32])pks, 0, path, 40, &e),
               O3M_EPERM);
  cr_assert(strstr(o3m_err_message(&e), "chmod 600"), "%s", o3m_err_message(&e));
  cr_assert_eq(chmod(path, 0604), 0);
  cr_assert_eq(o3m_secagg_create(&x, 2, (const unsigned char(*)[32])pks, 0, path, 40, NULL),
               O3M_EPERM);
  cr_assert_eq(chmod(path, 0600), 0);
  FILE *f = fopen(path, "ab");
  fputc(0, f);
  fclose(f);
  cr_assert_eq(o3m_secagg_create(&x, 2, (const unsigned char(*)[32])pks, 0, path, 40, NULL),
               O3M_ECORRUPT);
  char hex[65];
  o3m_secagg_hex(p0, hex);
  unsigned char back[32];
  cr_assert_eq(o3m_secagg_parse_hex(hex, back), 0);
  cr_assert_eq(memcmp(back, p0, 32), 0);
  hex[10] = 'g';
  cr_assert_eq(o3m_secagg_parse_hex(hex, back), O3M_EPARSE);
  cr_assert_eq(o3m_secagg_parse_hex("abcd", back), O3M_EPARSE);
  unlink(path);
  rmdir(dir);
}

/* Reads path as the user nobody (uid and gid 65534) in a child process, as
 * the PP's daemon user reads its agg_secret: the code of o3m_secagg_create,
 * or 1000 when the child could not switch users. */
static int create_as_nobody(const char *path, const unsigned char (*pks)[32]) {
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(100);
    o3m_secagg *x = NULL;
    int rc = o3m_secagg_create(&x, 2, pks, 0, path, 40, NULL);
    o3m_secagg_destroy(x);
    _exit(rc == 0 ? 0 : rc == O3M_EPERM ? 1 : 2);
  }
  int st;
  cr_assert_eq(waitpid(pid, &st, 0), pid);
  cr_assert(WIFEXITED(st), "the child died");
  int code = WEXITSTATUS(st);
  return code == 100 ? 1000 : code == 0 ? 0 : code == 1 ? O3M_EPERM : O3M_EIO;
}

/* deploy/README.md once told operators to make agg_secret
 * root:o3m 0640, which the daemon (user o3m) refuses, so a PP set up by the
 * guide did not start. The guide's commands now: keygen as root (mode 0600),
 * then chown to the daemon's user; here nobody plays o3m. */
Test(secagg, regression_the_deploy_guides_agg_secret_is_readable_by_the_daemon) {
  if (geteuid() != 0) cr_skip_test("needs root to switch to the user nobody");
  char dir[] = "/tmp/o3m-secagg-XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  cr_assert_eq(chmod(dir, 0755), 0);
  char path[128], other[128];
  snprintf(path, sizeof path, "%s/agg.secret", dir);
  snprintf(other, sizeof other, "%s/peer.secret", dir);
  unsigned char pks[2][32];
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert_eq(o3m_secagg_keygen(path, pks[0], &e), 0, "%s", o3m_err_message(&e));
  cr_assert_eq(o3m_secagg_keygen(other, pks[1], &e), 0, "%s", o3m_err_message(&e));
  /* The old guide: root:o3m 0640. */
  cr_assert_eq(chown(path, 0, 65534), 0);
  cr_assert_eq(chmod(path, 0640), 0);
  cr_assert_eq(create_as_nobody(path, (const unsigned char(*)[32])pks), O3M_EPERM);
  /* The guide now: `o3m-passive --agg-keygen FILE && chown o3m:o3m FILE`. */
  cr_assert_eq(chmod(path, 0600), 0);
  cr_assert_eq(chown(path, 65534, 65534), 0);
  cr_assert_eq(create_as_nobody(path, (const unsigned char(*)[32])pks), 0);
  unlink(path);
  unlink(other);
  rmdir(dir);
}

/* `o3m-passive --agg-keygen state/bank/agg.key` before the folder
 * existed said only "No such file or directory". Now the message names the
 * missing folder and the mkdir that makes it, and nothing is created. */
Test(secagg, keygen_into_a_missing_folder_names_the_folder) {
  char dir[] = "/tmp/o3m-secagg-XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  char folder[64], path[128], want[256];
  snprintf(folder, sizeof folder, "%s/bank", dir);
  snprintf(path, sizeof path, "%s/agg.key", folder);
  snprintf(want, sizeof want, "the folder %s does not exist; create it first (mkdir -p -m 700 %s)",
           folder, folder);
  unsigned char pk[O3M_SECAGG_KEY_BYTES];
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert_eq(o3m_secagg_keygen(path, pk, &e), O3M_EIO, "%s", o3m_err_message(&e));
  cr_assert(strstr(o3m_err_message(&e), path) && strstr(o3m_err_message(&e), want), "%s",
            o3m_err_message(&e));
  struct stat st;
  cr_assert_neq(stat(folder, &st), 0, "the folder was created");
  cr_assert_eq(rmdir(dir), 0);
}
