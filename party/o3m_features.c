/* o3m_features.c -- CSV feature tables with an id index (see
 * o3m_features.h): loading both tables of a party, the accessors, the
 * lookups with their counters and the norm bound. The module's other files
 * are listed in o3m_features_internal.h: reading a CSV table, the id
 * index, the dummy rows, whitening. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "o3m_alloc.h"
#include "o3m_features_internal.h"

/* Frees what t holds and zeroes it; a partly loaded table is fine. */
static void table_free(ft_table *t) {
  o3m_free(t->vals);
  o3m_free(t->means);
  o3m_free(t->root);
  o3m_free(t->ids);
  o3m_free(t->header);
  o3m_free(t->cols);
  o3m_free(t->id_off);
  o3m_free(t->slots);
  memset(t, 0, sizeof *t);
}

/* The epoch of t (o3m_features_epoch): BLAKE2b-64 over the kind, the
 * shape, the column names, and every row's id and values as they are in
 * memory (so after whitening when the party whitens), forced nonzero;
 * keyed with key (crypto_generichash_KEYBYTES bytes) when it is not NULL.
 * An absent table hashes its kind only, so that it too has a fixed,
 * nonzero epoch. The values are hashed as their bytes: the epoch names the
 * exact numbers a party masks, and a table that reads back to the same
 * doubles keeps its epoch. */
static void table_epoch(ft_table *t, o3m_features_kind kind, const unsigned char *key) {
  crypto_generichash_state h;
  unsigned char out[8];
  uint32_t hdr[3] = {(uint32_t)kind, (uint32_t)t->n_rows, (uint32_t)t->n_cols};
  crypto_generichash_init(&h, key, key ? crypto_generichash_KEYBYTES : 0, sizeof out);
  crypto_generichash_update(&h, (const unsigned char *)"o3m-features-epoch-v1", 21);
  crypto_generichash_update(&h, (const unsigned char *)hdr, sizeof hdr);
  if (t->present) {
    for (int c = 0; c < t->n_cols; c++)
      crypto_generichash_update(&h, (const unsigned char *)t->cols[c], strlen(t->cols[c]) + 1);
    for (int r = 0; r < t->n_rows; r++) {
      const char *id = row_id(t, r);
      crypto_generichash_update(&h, (const unsigned char *)id, strlen(id) + 1);
    }
    crypto_generichash_update(&h, (const unsigned char *)t->vals,
                              sizeof *t->vals * (size_t)t->n_rows * (size_t)t->n_cols);
  }
  crypto_generichash_final(&h, out, sizeof out);
  sodium_memzero(&h, sizeof h); /* a keyed state holds the key */
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)out[i] << (8 * i);
  t->epoch = v ? v : 1;
}

_Static_assert(2 * crypto_shorthash_KEYBYTES == crypto_kdf_KEYBYTES,
               "the two dummy-row keys make one KDF master key");
_Static_assert(crypto_generichash_KEYBYTES >= crypto_kdf_BYTES_MIN &&
               crypto_generichash_KEYBYTES <= crypto_kdf_BYTES_MAX,
               "the KDF can make a BLAKE2b key");

/* Both epochs of f. With the party's key set (o3m_features_set_dummy_key)
 * they are keyed with a subkey derived from it (libsodium's crypto_kdf,
 * context "o3mepoch", subkey 1; the dummy rows use the key itself), which
 * lives only on this stack and is wiped here; without it they are the
 * unkeyed hash, which only parties that show nobody their epochs use (the
 * AP's own tables, o3m-eval). */
void features_epochs(o3m_features *f) {
  unsigned char master[crypto_kdf_KEYBYTES], sub[crypto_generichash_KEYBYTES];
  const unsigned char *key = NULL;
  if (f->has_key) {
    memcpy(master, f->dummy_key[0].k, crypto_shorthash_KEYBYTES);
    memcpy(master + crypto_shorthash_KEYBYTES, f->dummy_key[1].k, crypto_shorthash_KEYBYTES);
    crypto_kdf_derive_from_key(sub, sizeof sub, 1, "o3mepoch", master);
    sodium_memzero(master, sizeof master);
    key = sub;
  }
  table_epoch(&f->user, O3M_FEATURES_USERS, key);
  table_epoch(&f->item, O3M_FEATURES_ITEMS, key);
  sodium_memzero(sub, sizeof sub);
}

int o3m_features_load(o3m_features **out, const char *user_csv,
                     const char *item_csv, int expected_dims, o3m_err *e) {
  return o3m_features_load_with(out, user_csv, item_csv, expected_dims, NULL, e);
}

int o3m_features_load_with(o3m_features **out, const char *user_csv, const char *item_csv,
                           int expected_dims, const o3m_features_read *rd, o3m_err *e) {
  if (!out) return o3m_err_set(e, O3M_EINVAL, "o3m_features_load: out is NULL");
  *out = NULL;
  if (!user_csv && !item_csv)
    return o3m_err_set(e, O3M_EINVAL,
                       "o3m_features_load: neither a user nor an item table");
  if (expected_dims < 1)
    return o3m_err_set(e, O3M_EINVAL,
                       "o3m_features_load: expected_dims %d is not positive",
                       expected_dims);
  o3m_features *f = o3m_calloc(1, sizeof *f);
  if (!f) return o3m_err_set(e, O3M_ENOMEM, "out of memory");
  int rc = O3M_OK;
  if (user_csv) rc = table_load(&f->user, user_csv, O3M_FEATURES_USERS, rd, e);
  if (!rc && item_csv) rc = table_load(&f->item, item_csv, O3M_FEATURES_ITEMS, rd, e);
  if (rc) {
    o3m_features_destroy(f);
    return rc;
  }
  f->dims = f->user.n_cols + f->item.n_cols;
  if (f->dims != expected_dims) {
    rc = o3m_err_set(e, O3M_EDIM,
                     "feature tables give %d user + %d item columns = %d, but "
                     "the party's dims are %d (user table %s, item table %s)",
                     f->user.n_cols, f->item.n_cols, f->dims, expected_dims,
                     user_csv ? user_csv : "none", item_csv ? item_csv : "none");
    o3m_features_destroy(f);
    return rc;
  }
  /* Every load gets the epochs of its content, so a reload (a new
   * handle) has new epochs exactly when a table's numbers changed. */
  if (sodium_init() < 0) {
    o3m_features_destroy(f);
    return o3m_err_set(e, O3M_ERANDOM, "libsodium could not start (table epochs)");
  }
  features_epochs(f);
  atomic_init(&f->lookups, 0);
  atomic_init(&f->item_lookups, 0);
  atomic_init(&f->unknown_users, 0);
  atomic_init(&f->unknown_items, 0);
  o3m_err_clear(e);
  *out = f;
  return O3M_OK;
}

void o3m_features_destroy(o3m_features *f) {
  if (!f) return;
  o3m_hash_key_wipe(&f->dummy_key[0]);
  o3m_hash_key_wipe(&f->dummy_key[1]);
  table_free(&f->user);
  table_free(&f->item);
  o3m_free(f);
}

int o3m_features_dims(const o3m_features *f) { return f->dims; }
int o3m_features_user_cols(const o3m_features *f) { return f->user.n_cols; }
int o3m_features_item_cols(const o3m_features *f) { return f->item.n_cols; }
int o3m_features_n_users(const o3m_features *f) { return f->user.n_rows; }
int o3m_features_n_items(const o3m_features *f) { return f->item.n_rows; }

uint64_t o3m_features_epoch(const o3m_features *f, o3m_features_kind which) {
  return which == O3M_FEATURES_USERS ? f->user.epoch : f->item.epoch;
}

static const ft_table *table_of(const o3m_features *f, o3m_features_kind which) {
  const ft_table *t = which == O3M_FEATURES_USERS ? &f->user
                      : which == O3M_FEATURES_ITEMS ? &f->item : NULL;
  return t && t->present ? t : NULL;
}

const char *o3m_features_row_id(const o3m_features *f, o3m_features_kind which, int row) {
  const ft_table *t = table_of(f, which);
  return t && row >= 0 && row < t->n_rows ? row_id(t, row) : NULL;
}

int o3m_features_find(const o3m_features *f, o3m_features_kind which, const char *id) {
  const ft_table *t = table_of(f, which);
  if (!t) return -2;
  return id ? (int)table_find(t, id, NULL) : -1;
}

const char *o3m_features_column(const o3m_features *f, o3m_features_kind which, int c) {
  const ft_table *t = table_of(f, which);
  return t && c >= 0 && c < t->n_cols ? t->cols[c] : NULL;
}

/* ------------------------------------------------------------------ lookup */

int o3m_features_fill(o3m_features *f, const char *user_id, int K,
                     const char *const *item_ids, double *X,
                     int *unknown_user, int *unknown_items) {
  if (!f || K < 1 || !X) return O3M_EINVAL;
  if (f->user.present && !user_id) return O3M_EINVAL;
  if (f->item.present) {
    if (!item_ids) return O3M_EINVAL;
    for (int k = 0; k < K; k++)
      if (!item_ids[k]) return O3M_EINVAL;
  }
  const size_t nu = (size_t)f->user.n_cols;
  const size_t dims = (size_t)f->dims;

  /* The user's columns go into row 0 (its real row or its dummy) and are
   * copied to the other rows. */
  int uu = 0;
  if (f->user.present) {
    size_t decoy;
    long r = table_find(&f->user, user_id, &decoy);
    uu = r < 0;
    pick_row(f, &f->user, 0, user_id, r, decoy, X);
  }
  int ui = 0;
  for (int k = 0; k < K; k++) {
    double *row = X + (size_t)k * dims;
    if (nu && k > 0) memcpy(row, X, nu * sizeof *row);
    if (f->item.present) {
      size_t decoy;
      long r = table_find(&f->item, item_ids[k], &decoy);
      ui += r < 0;
      pick_row(f, &f->item, 1, item_ids[k], r, decoy, row + nu);
    }
  }

  atomic_fetch_add_explicit(&f->lookups, 1, memory_order_relaxed);
  if (f->item.present)
    atomic_fetch_add_explicit(&f->item_lookups, (uint_least64_t)K,
                              memory_order_relaxed);
  /* Added whether 0 or not: the same work for known and unknown ids. */
  atomic_fetch_add_explicit(&f->unknown_users, (uint_least64_t)uu, memory_order_relaxed);
  atomic_fetch_add_explicit(&f->unknown_items, (uint_least64_t)ui, memory_order_relaxed);
  if (unknown_user) *unknown_user = uu;
  if (unknown_items) *unknown_items = ui;
  return O3M_OK;
}

int o3m_features_fill_user(o3m_features *f, const char *user_id, double *x) {
  if (!f || !x || (f->user.present && !user_id)) return O3M_EINVAL;
  memset(x, 0, sizeof *x * (size_t)f->dims);
  int uu = 0;
  if (f->user.present) {
    size_t decoy;
    long r = table_find(&f->user, user_id, &decoy);
    uu = r < 0;
    pick_row(f, &f->user, 0, user_id, r, decoy, x);
  }
  atomic_fetch_add_explicit(&f->lookups, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&f->unknown_users, (uint_least64_t)uu, memory_order_relaxed);
  return O3M_OK;
}

/* o3m_features_fill_items, and, when known is not NULL, known[k] = 1 when
 * item_ids[k] is in the item table (or there is none), else 0. */
static int fill_items(o3m_features *f, int K, const char *const *item_ids, double *X,
                      unsigned char *known) {
  if (!f || K < 0 || (K > 0 && !X)) return O3M_EINVAL;
  if (f->item.present) {
    if (K > 0 && !item_ids) return O3M_EINVAL;
    for (int k = 0; k < K; k++)
      if (!item_ids[k]) return O3M_EINVAL;
  }
  const size_t nu = (size_t)f->user.n_cols, dims = (size_t)f->dims;
  if (K > 0) memset(X, 0, sizeof *X * (size_t)K * dims);
  if (known && K > 0) memset(known, 1, (size_t)K);
  if (!f->item.present) return O3M_OK; /* zeros, no lookup */
  int ui = 0;
  for (int k = 0; k < K; k++) {
    size_t decoy;
    long r = table_find(&f->item, item_ids[k], &decoy);
    ui += r < 0;
    if (known) known[k] = r >= 0;
    pick_row(f, &f->item, 1, item_ids[k], r, decoy, X + (size_t)k * dims + nu);
  }
  atomic_fetch_add_explicit(&f->item_lookups, (uint_least64_t)K, memory_order_relaxed);
  atomic_fetch_add_explicit(&f->unknown_items, (uint_least64_t)ui, memory_order_relaxed);
  return O3M_OK;
}

int o3m_features_fill_items(o3m_features *f, int K, const char *const *item_ids, double *X) {
  return fill_items(f, K, item_ids, X, NULL);
}

int o3m_features_fill_items_known(o3m_features *f, int K, const char *const *item_ids,
                                  double *X, unsigned char *known) {
  return fill_items(f, K, item_ids, X, known);
}

void o3m_features_stats_get(const o3m_features *f, o3m_features_stats *out) {
  /* atomic_load takes a non-const pointer in some C libraries. */
  o3m_features *m = (o3m_features *)f;
  out->lookups = atomic_load_explicit(&m->lookups, memory_order_relaxed);
  out->item_lookups = atomic_load_explicit(&m->item_lookups, memory_order_relaxed);
  out->unknown_users = atomic_load_explicit(&m->unknown_users, memory_order_relaxed);
  out->unknown_items = atomic_load_explicit(&m->unknown_items, memory_order_relaxed);
}

/* ------------------------------------------------------------------ bound */

/* A row is line row + 2 of its file: the header is line 1 and empty lines
 * are refused. */
static long row_line(int row) { return (long)row + 2; }

int o3m_features_check_norm(o3m_features *f, double max_norm, o3m_err *e) {
  if (!f || !(max_norm > 0) || !isfinite(max_norm))
    return o3m_err_set(e, O3M_EINVAL, "o3m_features_check_norm: bad arguments");
  ft_table *u = &f->user, *it = &f->item;
  f->norm_checked = 1;
  /* The worst part: the largest user row with the largest item row. */
  double U = u->present ? u->max_sq : 0.0, It = it->present ? it->max_sq : 0.0;
  double bound_sq = max_norm * max_norm, worst = U + It;
  if (worst <= bound_sq) {
    /* The slack below the bound is shared by the two tables' dummies, so
     * that any pair of rows, real or dummy, stays inside it. With real data
     * far below the bound a dummy is then practically never redrawn. */
    double half = (bound_sq - worst) / 2;
    u->dummy_max_sq = U + half;
    it->dummy_max_sq = It + half;
    return O3M_OK;
  }
  /* Blame the row that contributes more; name the other one too. */
  const ft_table *t = !it->present || (u->present && u->max_sq >= it->max_sq) ? u : it;
  const ft_table *o = t == u ? it : u;
  if (!o->present)
    return o3m_err_set_at(e, O3M_ERANGE, t->name, row_line(t->max_row),
                          "the row of '%.40s' has an l2 norm above max_norm = %g", 
                          row_id(t, t->max_row), max_norm);
  return o3m_err_set_at(e, O3M_ERANGE, t->name, row_line(t->max_row),
                        "the row of '%.40s', with the largest row of %s (line %ld), forms a "
                        "part x^j whose l2 norm is above max_norm = %g",
                        row_id(t, t->max_row), o->name, row_line(o->max_row), max_norm);
}
