/* test_mask.c -- the orthogonal mask, its blocks and partitions. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "o3m_blas.h"
#include "o3m_mask.h"
#include "o3m_rng.h"

/* max |Q^T Q - I| */
static double orthogonality_error(const double *Q, int d) {
  double *G = malloc(sizeof(double) * (size_t)d * d);
  o3m_gemm_tn(d, d, d, 1.0, Q, Q, 0.0, G);
  double worst = 0;
  for (int i = 0; i < d; i++)
    for (int j = 0; j < d; j++) {
      double err = fabs(G[(size_t)i * d + j] - (i == j ? 1.0 : 0.0));
      if (err > worst) worst = err;
    }
  free(G);
  return worst;
}

Test(mask, os_mask_is_orthogonal_for_all_sizes) {
  int dims[] = {1, 2, 5, 100, 1000};
  o3m_rng *rng;
  cr_assert_eq(o3m_rng_create_os(&rng), O3M_OK);
  for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
    o3m_mask *m;
    cr_assert_eq(o3m_mask_generate(&m, dims[i], rng), O3M_OK);
    double err = orthogonality_error(o3m_mask_matrix(m), dims[i]);
    cr_assert_leq(err, 1e-12, "d = %d: max |Q^T Q - I| = %g", dims[i], err);
    cr_assert_neq(o3m_mask_id(m), 0);
    if (dims[i] > 1)
      cr_assert_eq(o3m_mask_is_signed_permutation(o3m_mask_matrix(m), dims[i], 1e-6), 0,
                   "d = %d: mask is a signed permutation", dims[i]);
    o3m_mask_destroy(m);
  }
  o3m_rng_destroy(rng);
}

Test(mask, seeded_masks_are_reproducible_and_seed_dependent) {
  o3m_rng *a, *b, *c;
  o3m_rng_create_seeded_insecure(&a, 7);
  o3m_rng_create_seeded_insecure(&b, 7);
  o3m_rng_create_seeded_insecure(&c, 8);
  o3m_mask *ma, *mb, *mc;
  cr_assert_eq(o3m_mask_generate(&ma, 30, a), O3M_OK);
  cr_assert_eq(o3m_mask_generate(&mb, 30, b), O3M_OK);
  cr_assert_eq(o3m_mask_generate(&mc, 30, c), O3M_OK);
  cr_assert_eq(memcmp(o3m_mask_matrix(ma), o3m_mask_matrix(mb), sizeof(double) * 900), 0);
  cr_assert_eq(o3m_mask_id(ma), o3m_mask_id(mb));
  cr_assert_neq(memcmp(o3m_mask_matrix(ma), o3m_mask_matrix(mc), sizeof(double) * 900), 0);
  cr_assert_neq(o3m_mask_id(ma), o3m_mask_id(mc));
  o3m_mask_destroy(ma);
  o3m_mask_destroy(mb);
  o3m_mask_destroy(mc);
  o3m_rng_destroy(a);
  o3m_rng_destroy(b);
  o3m_rng_destroy(c);
}

Test(mask, signed_permutations_are_recognized) {
  double I3[9] = {1, 0, 0, 0, 1, 0, 0, 0, 1};
  double P3[9] = {0, -1, 0, 0, 0, 1, 1, 0, 0};
  double R[4] = {0.6, -0.8, 0.8, 0.6};
  cr_assert_eq(o3m_mask_is_signed_permutation(I3, 3, 1e-9), 1);
  cr_assert_eq(o3m_mask_is_signed_permutation(P3, 3, 1e-9), 1);
  cr_assert_eq(o3m_mask_is_signed_permutation(R, 2, 1e-9), 0);
}

Test(mask, sum_of_blocks_equals_full_mask_for_uneven_partitions) {
  const char *parts[] = {"3,1,7,2,17", "1,29", "30", "10,10,5,5"};
  o3m_rng *rng;
  o3m_rng_create_seeded_insecure(&rng, 3);
  o3m_mask *m;
  cr_assert_eq(o3m_mask_generate(&m, 30, rng), O3M_OK);
  int K = 4, d = 30;
  double X[4 * 30], Y[4 * 30], Yfull[4 * 30], Xj[4 * 30];
  o3m_rng_gaussian(rng, X, K * d);
  /* Yfull = X Q^T: row k is Q x_k */
  o3m_gemm_nt(K, d, d, 1.0, X, o3m_mask_matrix(m), 0.0, Yfull);
  for (size_t p = 0; p < sizeof parts / sizeof parts[0]; p++) {
    o3m_partition part;
    cr_assert_eq(o3m_partition_parse(&part, parts[p], NULL), O3M_OK);
    cr_assert_eq(part.d, d);
    for (int j = 0; j < part.m; j++) {
      o3m_block *b;
      cr_assert_eq(o3m_block_from_mask(&b, m, part.offset[j], part.dims[j]), O3M_OK);
      cr_assert_eq(o3m_block_mask_id(b), o3m_mask_id(m));
      for (int k = 0; k < K; k++)
        memcpy(Xj + k * part.dims[j], X + k * d + part.offset[j], sizeof(double) * part.dims[j]);
      o3m_block_apply(b, K, Xj, j == 0 ? 0.0 : 1.0, Y);
      o3m_block_destroy(b);
    }
    for (int i = 0; i < K * d; i++)
      cr_assert_float_eq(Y[i], Yfull[i], 1e-12, "partition %s entry %d: %g vs %g", parts[p], i,
                         Y[i], Yfull[i]);
  }
  o3m_mask_destroy(m);
  o3m_rng_destroy(rng);
}

Test(mask, masking_preserves_norms_and_inner_products) {
  /* What O3M does not hide, asserted so the documentation stays true. */
  o3m_rng *rng;
  o3m_rng_create_seeded_insecure(&rng, 11);
  o3m_mask *m;
  o3m_mask_generate(&m, 20, rng);
  double x[40], y[40];
  o3m_rng_gaussian(rng, x, 40);
  o3m_gemm_nt(2, 20, 20, 1.0, x, o3m_mask_matrix(m), 0.0, y);
  cr_assert_float_eq(o3m_nrm2(20, y), o3m_nrm2(20, x), 1e-12);
  cr_assert_float_eq(o3m_dot(20, y, y + 20), o3m_dot(20, x, x + 20), 1e-12);
  o3m_mask_destroy(m);
  o3m_rng_destroy(rng);
}

Test(mask, partition_errors_name_the_entry) {
  o3m_partition p;
  o3m_err e;
  const char *bad[] = {"", "20,,20", "0,5", "a", "5,-1", "3,4,"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    o3m_err_clear(&e);
    cr_assert_eq(o3m_partition_parse(&p, bad[i], &e), O3M_EINVAL, "accepted '%s'", bad[i]);
    cr_assert_neq(e.msg[0], '\0');
  }
  o3m_partition_parse(&p, "5,x", &e);
  cr_assert(strstr(e.msg, "entry 2") != NULL, "message: %s", e.msg);
  cr_assert_eq(o3m_partition_parse(&p, "4,6", NULL), O3M_OK);
  cr_assert_eq(p.m, 2);
  cr_assert_eq(p.offset[1], 4);
}

Test(mask, even_partition_widens_the_first_blocks) {
  o3m_partition p;
  cr_assert_eq(o3m_partition_even(&p, 11, 4, NULL), O3M_OK);
  const int dims[4] = {3, 3, 3, 2}, offset[4] = {0, 3, 6, 9};
  cr_assert_eq(p.m, 4);
  cr_assert_eq(p.d, 11);
  for (int j = 0; j < 4; j++) {
    cr_assert_eq(p.dims[j], dims[j], "dims[%d] %d vs %d", j, p.dims[j], dims[j]);
    cr_assert_eq(p.offset[j], offset[j], "offset[%d] %d vs %d", j, p.offset[j], offset[j]);
  }
  o3m_err e;
  cr_assert_eq(o3m_partition_even(&p, 3, 4, &e), O3M_EINVAL);
  cr_assert(strstr(e.msg, "d = 3") != NULL, "message: %s", e.msg);
  cr_assert_eq(o3m_partition_even(&p, 3, 0, &e), O3M_EINVAL);
  cr_assert_eq(p.m, 4, "a refused split changed p");
}

Test(mask, wire_block_with_nan_is_rejected) {
  double data[6] = {1, 0, 0, 1, 0, NAN};
  o3m_block *b = (o3m_block *)1;
  cr_assert_eq(o3m_block_create(&b, 3, 2, data, 42), O3M_ENONFINITE);
  cr_assert_null(b);
  data[5] = 0;
  cr_assert_eq(o3m_block_create(&b, 3, 2, data, 42), O3M_OK);
  cr_assert_eq(o3m_block_rows(b), 3);
  cr_assert_eq(o3m_block_cols(b), 2);
  o3m_block_destroy(b);
}

Test(mask, forget_erases_the_matrix) {
  o3m_rng *rng;
  o3m_rng_create_seeded_insecure(&rng, 5);
  o3m_mask *m;
  o3m_mask_generate(&m, 8, rng);
  o3m_mask_forget(m);
  for (int i = 0; i < 64; i++) cr_assert_eq(o3m_mask_matrix(m)[i], 0.0);
  o3m_mask_destroy(m);
  o3m_rng_destroy(rng);
}
