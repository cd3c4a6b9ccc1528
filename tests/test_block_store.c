/* test_block_store.c -- the stored mask block (party/o3m_block_store.h).
 *
 * Round trip bit for bit (block, mask id, secret), the file's mode and the
 * directory's, every single-byte corruption detected as O3M_ECORRUPT (never
 * read as a valid block or as another party's), truncation and extension,
 * a missing file or directory as O3M_ENOTFOUND, another party's or
 * config's block as O3M_EDIM, and an overwrite that leaves no temporary
 * file behind. */
#include <criterion/criterion.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "o3m_block_store.h"
#include "o3m_bytes.h"
#include "o3m_mask.h"
#include "o3m_rng.h"

#define D 7
#define DJ 3

static char dir[64];
static char state[128];

static void setup(void) {
  snprintf(dir, sizeof dir, "/tmp/o3m_bstore_XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
  snprintf(state, sizeof state, "%s/state", dir);
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(p);
}

static void teardown(void) { nftw(dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS); }

/* Columns 2..4 of a seeded mask, as party 1 would hold them. */
static o3m_block *make_block(uint64_t seed) {
  o3m_rng *r;
  o3m_mask *m;
  o3m_block *b;
  cr_assert_eq(o3m_rng_create_seeded_insecure(&r, seed), 0);
  cr_assert_eq(o3m_mask_generate(&m, D, r), 0);
  cr_assert_eq(o3m_block_from_mask(&b, m, 2, DJ), 0);
  o3m_mask_destroy(m);
  o3m_rng_destroy(r);
  return b;
}

static const o3m_block_store_id ID = {1, 2, D, DJ};

static const char *file_path(void) {
  static char p[256];
  return o3m_block_store_path(state, p, sizeof p);
}

static void save(const o3m_block *b, const unsigned char *key, size_t n) {
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert_eq(o3m_block_store_save(state, &ID, b, key, n, &e), 0, "%s", o3m_err_message(&e));
}

static int load(o3m_block **out, unsigned char *key, size_t cap, size_t *n, o3m_err *e) {
  o3m_err_clear(e);
  return o3m_block_store_load(state, &ID, out, key, cap, n, e);
}

TestSuite(block_store, .init = setup, .fini = teardown);

Test(block_store, crc32c_check_value) {
  cr_assert_eq(o3m_crc32c(0, "123456789", 9), 0xE3069283u);
  /* Chained over two pieces, the same. */
  uint32_t c = o3m_crc32c(0, "1234", 4);
  cr_assert_eq(o3m_crc32c(c, "56789", 5), 0xE3069283u);
}

Test(block_store, round_trip_bit_for_bit_with_secret_and_private_modes) {
  o3m_block *b = make_block(5);
  unsigned char key[32], got[32];
  for (int i = 0; i < 32; i++) key[i] = (unsigned char)(i * 37 + 1);
  save(b, key, sizeof key);

  struct stat st;
  cr_assert_eq(stat(file_path(), &st), 0);
  cr_assert_eq(st.st_mode & 0777, 0600, "file mode %o", st.st_mode & 0777);
  cr_assert_eq(st.st_size, 80 + 8 * D * DJ + 32);
  cr_assert_eq(stat(state, &st), 0);
  cr_assert_eq(st.st_mode & 0777, 0700, "dir mode %o", st.st_mode & 0777);

  o3m_block *l;
  size_t n = 0;
  o3m_err e;
  cr_assert_eq(load(&l, got, sizeof got, &n, &e), 0, "%s", o3m_err_message(&e));
  cr_assert_eq(n, 32);
  cr_assert_arr_eq(got, key, 32);
  cr_assert_eq(o3m_block_mask_id(l), o3m_block_mask_id(b));
  cr_assert_eq(o3m_block_rows(l), D);
  cr_assert_eq(o3m_block_cols(l), DJ);
  cr_assert_arr_eq(o3m_block_data(l), o3m_block_data(b), sizeof(double) * D * DJ);
  o3m_block_destroy(l);
  o3m_block_destroy(b);
}

Test(block_store, missing_file_or_directory_is_not_found) {
  o3m_block *l = (o3m_block *)1;
  o3m_err e;
  cr_assert_eq(load(&l, NULL, 0, NULL, &e), O3M_ENOTFOUND);
  cr_assert_null(l);
  cr_assert_eq(mkdir(state, 0700), 0);
  cr_assert_eq(load(&l, NULL, 0, NULL, &e), O3M_ENOTFOUND);
}

Test(block_store, every_single_byte_flip_is_corrupt) {
  o3m_block *b = make_block(6);
  unsigned char key[32] = {1, 2, 3};
  save(b, key, sizeof key);
  FILE *f = fopen(file_path(), "rb");
  cr_assert_not_null(f);
  unsigned char orig[4096];
  size_t len = fread(orig, 1, sizeof orig, f);
  fclose(f);
  cr_assert_eq(len, (size_t)(80 + 8 * D * DJ + 32));
  for (size_t i = 0; i < len; i++) {
    unsigned char bad[4096];
    memcpy(bad, orig, len);
    bad[i] ^= 0x01;
    f = fopen(file_path(), "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(bad, 1, len, f), len);
    fclose(f);
    o3m_block *l;
    unsigned char got[32];
    o3m_err e;
    int rc = load(&l, got, sizeof got, NULL, &e);
    cr_assert_eq(rc, O3M_ECORRUPT, "flip of byte %zu: %s (%s)", i, o3m_errname(rc),
                 o3m_err_message(&e));
    cr_assert_not_null(strstr(o3m_err_message(&e), "delete the state_dir of every party"), "%s",
                       o3m_err_message(&e));
  }
  /* Truncated, and with a byte appended. */
  cr_assert_eq(truncate(file_path(), (off_t)len - 1), 0);
  o3m_block *l;
  o3m_err e;
  cr_assert_eq(load(&l, key, sizeof key, NULL, &e), O3M_ECORRUPT);
  f = fopen(file_path(), "wb");
  fwrite(orig, 1, len, f);
  fputc(0, f);
  fclose(f);
  cr_assert_eq(load(&l, key, sizeof key, NULL, &e), O3M_ECORRUPT);
  o3m_block_destroy(b);
}

Test(block_store, another_party_or_shape_or_secret_size_is_dim) {
  o3m_block *b = make_block(7);
  unsigned char key[32] = {9};
  save(b, key, sizeof key);
  o3m_block *l;
  o3m_err e;
  o3m_block_store_id other = ID;
  other.party = 2;
  cr_assert_eq(o3m_block_store_load(state, &other, &l, key, sizeof key, NULL, &e), O3M_EDIM);
  other = ID;
  other.col0 = 3;
  cr_assert_eq(o3m_block_store_load(state, &other, &l, key, sizeof key, NULL, &e), O3M_EDIM);
  other = ID;
  other.d = D + 1;
  cr_assert_eq(o3m_block_store_load(state, &other, &l, key, sizeof key, NULL, &e), O3M_EDIM);
  /* The AP expects no secret. */
  cr_assert_eq(o3m_block_store_load(state, &ID, &l, NULL, 0, NULL, &e), O3M_EDIM);
  cr_assert_null(l);
  o3m_block_destroy(b);
}

Test(block_store, overwrite_replaces_and_leaves_no_temporary) {
  o3m_block *a = make_block(8), *b = make_block(9);
  save(a, NULL, 0);
  /* A leftover temporary from a crash is replaced, not trusted. */
  char tmp[300];
  snprintf(tmp, sizeof tmp, "%s.tmp", file_path());
  FILE *f = fopen(tmp, "w");
  fputs("junk", f);
  fclose(f);
  save(b, NULL, 0);
  cr_assert_neq(access(tmp, F_OK), 0, "the temporary file is left behind");
  o3m_block *l;
  o3m_err e;
  size_t n = 99;
  cr_assert_eq(load(&l, NULL, 0, &n, &e), 0, "%s", o3m_err_message(&e));
  cr_assert_eq(n, 0);
  cr_assert_eq(o3m_block_mask_id(l), o3m_block_mask_id(b));
  cr_assert_neq(o3m_block_mask_id(a), o3m_block_mask_id(b));
  o3m_block_destroy(l);
  o3m_block_destroy(a);
  o3m_block_destroy(b);
}

Test(block_store, save_refuses_a_block_of_another_shape) {
  o3m_block *b = make_block(10);
  o3m_block_store_id other = ID;
  other.dj = DJ + 1;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert_eq(o3m_block_store_save(state, &other, b, NULL, 0, &e), O3M_EINVAL);
  cr_assert_neq(access(file_path(), F_OK), 0);
  o3m_block_destroy(b);
}

/* Secret files and state_dirs others may read: a stored block readable by group
 * or others was loaded with a warning, and an existing state_dir looser
 * than 0700 was used as it was. Both are now refused with O3M_EPERM naming
 * the path and the chmod that fixes it, for load and for save. */
Test(block_store, regression_a_loose_block_file_or_state_dir_is_refused) {
  o3m_block *b = make_block(8), *l = NULL;
  unsigned char key[32] = {1}, got[32];
  size_t n;
  save(b, key, sizeof key);
  o3m_err e;
  cr_assert_eq(chmod(file_path(), 0640), 0);
  cr_assert_eq(load(&l, got, sizeof got, &n, &e), O3M_EPERM, "%s", o3m_err_message(&e));
  cr_assert(strstr(e.msg, file_path()) && strstr(e.msg, "chmod 600"), "%s", e.msg);
  cr_assert_null(l);
  cr_assert_eq(chmod(file_path(), 0600), 0);
  cr_assert_eq(chmod(state, 0750), 0);
  cr_assert_eq(load(&l, got, sizeof got, &n, &e), O3M_EPERM, "%s", o3m_err_message(&e));
  cr_assert(strstr(e.msg, "mode 750") && strstr(e.msg, "chmod 700"), "%s", e.msg);
  o3m_err_clear(&e);
  cr_assert_eq(o3m_block_store_save(state, &ID, b, key, sizeof key, &e), O3M_EPERM, "%s",
               o3m_err_message(&e));
  cr_assert(strstr(e.msg, state) && strstr(e.msg, "chmod 700"), "%s", e.msg);
  int fd = -1;
  cr_assert_eq(o3m_state_dir_open(state, &fd, &e), O3M_EPERM);
  cr_assert_eq(fd, -1);
  cr_assert_eq(chmod(state, 0700), 0);
  cr_assert_eq(load(&l, got, sizeof got, &n, &e), 0, "%s", o3m_err_message(&e));
  o3m_block_destroy(l);
  o3m_block_destroy(b);
}
