/* o3m_features_internal.h -- what the files of the features module share
 * (party/o3m_features.h is its public header): the tables' layout and the
 * functions one file of the module calls in another. Not for other
 * modules.
 *
 *   o3m_features.c         loading both tables, the accessors, the lookups
 *                          (fill), the counters, the norm bound, the epochs
 *   o3m_features_csv.c     reading one CSV table (libcsv)
 *   o3m_features_index.c   the id index of a table
 *   o3m_features_dummy.c   the dummy rows of unknown ids and their keyed hash
 *   o3m_features_whiten.c  the tables' moments and whitening */
#ifndef O3M_FEATURES_INTERNAL_H
#define O3M_FEATURES_INTERNAL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "o3m_features.h"
#include "o3m_hash_keyed.h"

/* File names in messages are shortened from the left beyond this. */
#define NAME_SHOW_MAX 96

typedef struct ft_slot {
  uint32_t tag;
  uint32_t row1; /* row + 1; 0 = empty */
} ft_slot;

typedef struct ft_table {
  int present;
  int n_rows;
  int n_cols;
  double *vals;   /* n_rows x n_cols, row-major */
  double *means;  /* n_cols */
  double *root;   /* n_cols x n_cols: Sigma^{1/2} of the rows (0 if Sigma overflows) */
  char *ids;      /* NUL-terminated ids back to back */
  char *header;   /* the header's fields, NUL-terminated, back to back */
  char **cols;    /* n_cols column names, pointers into header */
  size_t *id_off; /* n_rows offsets into ids */
  ft_slot *slots;
  size_t mask;    /* slot capacity - 1 */
  double max_sq;  /* the largest squared l2 norm of a row (inf if one overflows) */
  int max_row;    /* a row that has it */
  double dummy_max_sq; /* dummy rows are drawn no longer than this (inf: any) */
  char name[NAME_SHOW_MAX + 1]; /* the file, for messages */
  uint64_t epoch;  /* o3m_features_epoch: the (keyed) hash of the content below */
  /* Capacities while loading. */
  size_t cap_rows;
  size_t ids_len;
  size_t ids_cap;
} ft_table;

struct o3m_features {
  ft_table user;
  ft_table item;
  int dims;
  /* Keyed-hash keys of the dummy rows (crypto/o3m_hash_keyed.h): [0] the
   * user table, [1] the item table; used only once has_key is set
   * (o3m_features_set_dummy_key). */
  o3m_hash_key dummy_key[2];
  int has_key;
  int whitened;     /* o3m_features_whiten ran */
  int norm_checked; /* o3m_features_check_norm ran (whitening must come before) */
  atomic_uint_least64_t lookups;
  atomic_uint_least64_t item_lookups;
  atomic_uint_least64_t unknown_users;
  atomic_uint_least64_t unknown_items;
};

/* The id of row `row` of t. */
static inline const char *row_id(const ft_table *t, int row) {
  return t->ids + t->id_off[row];
}

/* The squared l2 norm of v[0..n). */
static inline double sum_sq(const double *v, int n) {
  double s = 0;
  for (int i = 0; i < n; i++) s += v[i] * v[i];
  return s;
}

/* o3m_features_index.c */
long table_find(const ft_table *t, const char *id, size_t *decoy);
void slot_put(ft_slot *slots, size_t mask, const char *id, int row);
int index_reserve(ft_table *t);

/* o3m_features_csv.c */
/* rd: the checks of the file (o3m_features_read; NULL: the defaults). */
int table_load(ft_table *t, const char *path, o3m_features_kind kind,
               const o3m_features_read *rd, o3m_err *e);

/* o3m_features_dummy.c */
void pick_row(const o3m_features *f, const ft_table *t, int which, const char *id, long r,
              size_t decoy, double *out);

/* o3m_features_whiten.c */
int table_moments(ft_table *t);
void note_max_row(ft_table *t, int r);

/* o3m_features.c: both epochs of f, keyed once f has the party's key. */
void features_epochs(o3m_features *f);

#endif
