/* o3m_features.c -- CSV feature tables with an id index (see o3m_features.h).
 *
 * A table is read line by line with getline(3) and cut into fields by
 * libcsv (quoting, trimming; see table_load): the header fixes the number of
 * columns, each row is checked completely before it is appended, and its id
 * goes into the hash index at once, so a duplicate id is reported at the line
 * where it happens. Values, ids and the index grow by doubling while
 * loading and never change afterwards.
 *
 * The index is open addressing with linear probing over slots of {tag, row+1}
 * (row+1 == 0 marks an empty slot; tag is the upper half of the 64-bit hash,
 * compared before the id string). The capacity is a power of two at least
 * twice the number of rows. The hash is 64-bit FNV-1a followed by the
 * splitmix64 finalizer, which spreads the low bits used as the slot index.
 * The ids are the participant's own, so an outsider cannot choose colliding
 * keys for the table; lookups of foreign ids only probe.
 *
 * Unknown ids. Without a dummy-row key an id a table does not hold gets
 * the column means. With the key a PP sets (o3m_features_set_dummy_key) it
 * gets mu + Sigma^{1/2} z, the table's mean plus the symmetric square root
 * of its covariance (both computed at load, linalg/o3m_moments.h) times a
 * vector z of standard normals from a splitmix64 stream seeded with
 * SipHash-2-4(key, id); bytes 0..15 of the key key the user table, 16..31
 * the item table, so a user and an item with the same id get unrelated
 * rows. SipHash is a pseudo-random function: without the key the dummies
 * of different ids look like independent draws from N(mu, Sigma), and the
 * same id always gets the same row, so neither repeated requests nor a
 * comparison across ids tells the active participant which ids are
 * unknown. Why the full covariance, and the limits that remain, are in
 * o3m_features.h ("Dummy rows").
 *
 * Whitening (o3m_features_whiten) replaces every row x of a table by W x
 * in place, W the table's symmetric inverse square root of the covariance
 * (linalg/o3m_moments.h); the largest row and the moments of the dummies
 * are then computed again from the whitened rows, and W is wiped. */
#include "o3m_features.h"
#include "o3m_alloc.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <csv.h>
#include <sodium.h>

#include "o3m_blas.h"
#include "o3m_hash.h"
#include "o3m_moments.h"
#include "o3m_splitmix.h"

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
  uint64_t epoch;  /* o3m_features_epoch: the hash of the content below */
  /* Capacities while loading. */
  size_t cap_rows;
  size_t ids_len;
  size_t ids_cap;
} ft_table;

struct o3m_features {
  ft_table user;
  ft_table item;
  int dims;
  /* SipHash keys of the dummy rows: [0] the user table, [1] the item table;
   * used only once has_key is set (o3m_features_set_dummy_key). */
  uint64_t dummy_key[2][2];
  int has_key;
  int whitened;     /* o3m_features_whiten ran */
  int norm_checked; /* o3m_features_check_norm ran (whitening must come before) */
  atomic_uint_least64_t lookups;
  atomic_uint_least64_t item_lookups;
  atomic_uint_least64_t unknown_users;
  atomic_uint_least64_t unknown_items;
};

/* ------------------------------------------------------------------ index */

static uint64_t id_hash(const char *s, size_t n) { return o3m_hash_bytes(s, n, 0); }

static const char *row_id(const ft_table *t, int row) {
  return t->ids + t->id_off[row];
}

/* The row of id, or -1. Ids longer than O3M_MAX_ID are never
 * stored, so they are not found without hashing all of them. If decoy is
 * not NULL it receives a row that the id's hash picks (0 for an id too
 * long or an empty table): fill reads it for an unknown id, so that a known
 * and an unknown id both read one row at a place the id determines, not a
 * random row against the same cached one. */
static long table_find(const ft_table *t, const char *id, size_t *decoy) {
  size_t n = strnlen(id, O3M_MAX_ID + 1);
  if (decoy) *decoy = 0;
  if (n > O3M_MAX_ID || !t->slots) return -1;
  uint64_t h = id_hash(id, n);
  /* A multiply-shift instead of h % n_rows: no division, whose time may
   * depend on its operands; n_rows < 2^32. */
  if (decoy) *decoy = (size_t)(((h & 0xffffffffu) * (uint64_t)t->n_rows) >> 32);
  uint32_t tag = (uint32_t)(h >> 32);
  for (size_t i = (size_t)h & t->mask;; i = (i + 1) & t->mask) {
    ft_slot s = t->slots[i];
    if (!s.row1) return -1;
    if (s.tag == tag && strcmp(row_id(t, (int)(s.row1 - 1)), id) == 0)
      return (long)s.row1 - 1;
  }
}

/* Places row (whose id is already in the pool) into slots without a
 * duplicate check; the caller guarantees room. */
static void slot_put(ft_slot *slots, size_t mask, const char *id, int row) {
  uint64_t h = id_hash(id, strlen(id));
  size_t i = (size_t)h & mask;
  while (slots[i].row1) i = (i + 1) & mask;
  slots[i].tag = (uint32_t)(h >> 32);
  slots[i].row1 = (uint32_t)row + 1;
}

/* Makes room for one more row in the index (capacity >= 2 (n + 1)). */
static int index_reserve(ft_table *t) {
  size_t cap = t->slots ? t->mask + 1 : 0;
  size_t need = 2 * ((size_t)t->n_rows + 1);
  if (cap >= need) return O3M_OK;
  size_t ncap = cap ? 2 * cap : 64;
  while (ncap < need) ncap *= 2;
  ft_slot *ns = o3m_calloc(ncap, sizeof *ns);
  if (!ns) return O3M_ENOMEM;
  for (int r = 0; r < t->n_rows; r++) slot_put(ns, ncap - 1, row_id(t, r), r);
  o3m_free(t->slots);
  t->slots = ns;
  t->mask = ncap - 1;
  return O3M_OK;
}

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

/* ------------------------------------------------------------------ random */

#define ROTL64(x, b) (((x) << (b)) | ((x) >> (64 - (b))))

#define SIPROUND(v0, v1, v2, v3) \
  do {                           \
    v0 += v1;                    \
    v1 = ROTL64(v1, 13);         \
    v1 ^= v0;                    \
    v0 = ROTL64(v0, 32);         \
    v2 += v3;                    \
    v3 = ROTL64(v3, 16);         \
    v3 ^= v2;                    \
    v0 += v3;                    \
    v3 = ROTL64(v3, 21);         \
    v3 ^= v0;                    \
    v2 += v1;                    \
    v1 = ROTL64(v1, 17);         \
    v1 ^= v2;                    \
    v2 = ROTL64(v2, 32);         \
  } while (0)

/* SipHash-2-4 of n bytes under the 128-bit key k (k[0] = the key's first 8
 * bytes read little-endian, k[1] the next 8), as specified by Aumasson and
 * Bernstein; the bytes are read little-endian whatever the host's order, so
 * a key gives the same dummies on every machine. */
static uint64_t siphash24(const uint64_t k[2], const unsigned char *in, size_t n) {
  uint64_t v0 = 0x736f6d6570736575ull ^ k[0];
  uint64_t v1 = 0x646f72616e646f6dull ^ k[1];
  uint64_t v2 = 0x6c7967656e657261ull ^ k[0];
  uint64_t v3 = 0x7465646279746573ull ^ k[1];
  const size_t full = n & ~(size_t)7;
  for (size_t i = 0; i < full; i += 8) {
    uint64_t m = 0;
    for (int b = 0; b < 8; b++) m |= (uint64_t)in[i + (size_t)b] << (8 * b);
    v3 ^= m;
    SIPROUND(v0, v1, v2, v3);
    SIPROUND(v0, v1, v2, v3);
    v0 ^= m;
  }
  uint64_t last = (uint64_t)(n & 0xff) << 56;
  for (size_t i = full; i < n; i++) last |= (uint64_t)in[i] << (8 * (i - full));
  v3 ^= last;
  SIPROUND(v0, v1, v2, v3);
  SIPROUND(v0, v1, v2, v3);
  v0 ^= last;
  v2 ^= 0xff;
  for (int r = 0; r < 4; r++) SIPROUND(v0, v1, v2, v3);
  return v0 ^ v1 ^ v2 ^ v3;
}

/* Splits 32 key bytes into the two SipHash keys (little-endian words). */
static void set_key(o3m_features *f, const unsigned char key[O3M_FEATURES_KEY_BYTES]) {
  for (int t = 0; t < 2; t++)
    for (int w = 0; w < 2; w++) {
      uint64_t x = 0;
      for (int b = 0; b < 8; b++) x |= (uint64_t)key[16 * t + 8 * w + b] << (8 * b);
      f->dummy_key[t][w] = x;
    }
}

/* A dummy drawn above its table's bound is scaled onto the bound times
 * this factor, which keeps it inside after the rounding of the scaling
 * and of the norm (a relative error of at most about n 2^-53, n the
 * number of columns). */
#define DUMMY_SHRINK (1.0 - 1e-9)

static double sum_sq(const double *v, int n) {
  double s = 0;
  for (int i = 0; i < n; i++) s += v[i] * v[i];
  return s;
}

/* a when pick is 1, b when pick is 0, bit for bit and without a branch:
 * the lookup must not take a different path for a known id, or its time
 * would tell which ids the table holds. */
static inline double select_double(uint64_t pick, double a, double b) {
  uint64_t ua, ub, m = (uint64_t)0 - pick;
  memcpy(&ua, &a, sizeof ua);
  memcpy(&ub, &b, sizeof ub);
  uint64_t r = (ua & m) | (ub & ~m);
  double out;
  memcpy(&out, &r, sizeof out);
  return out;
}

/* Writes the dummy row of id into out[0..t->n_cols):
 * mu + Sigma^{1/2} z = mu + sum_k z_k (row k of the symmetric root), z drawn
 * from the stream that SipHash(key, id) seeds, so nothing but out is
 * written. Ids are compared as byte strings everywhere, so the hash covers
 * exactly the bytes up to the NUL.
 *
 * A dummy must stay inside the party's norm bound (o3m_features_check_norm
 * sets t->dummy_max_sq, at least the table's largest real row). The work
 * is the same for every id, so that its time tells nothing about which
 * ids are known: one draw, then a scaling by c = 1 for a draw inside the bound and
 * c = DUMMY_SHRINK sqrt(dummy_max_sq / ||draw||^2) for one above it,
 * chosen without a branch. Multiplying by 1 is exact, so a draw inside the
 * bound is the dummy bit for bit; one above it is pulled radially onto the
 * bound. (Before, a draw above the bound was redrawn up to 32 times and
 * then replaced by the means: a loop whose length depended on the id.)
 * The dummies thus come from N(mu, Sigma) with the mass beyond the bound
 * moved onto it; with a bound far above the real rows (the default) that
 * practically never happens. A draw whose squared norm overflows gets
 * c = 0, the zero row. */
static void dummy_row(const ft_table *t, const uint64_t key[2], const char *id, double *out) {
  uint64_t s = siphash24(key, (const unsigned char *)id, strlen(id));
  const int n = t->n_cols;
  double z[2];
  memcpy(out, t->means, sizeof *out * (size_t)n);
  for (int k = 0; k < n; k++) {
    if (k % 2 == 0) o3m_splitmix64_gauss2(&s, &z[0], &z[1]);
    o3m_axpy(n, z[k % 2], t->root + (size_t)k * (size_t)n, out);
  }
  double sq = sum_sq(out, n);
  double shrink = DUMMY_SHRINK * sqrt(t->dummy_max_sq / sq);
  /* sq = 0 gives shrink = inf, unused since 0 is inside; sq = inf inside
   * an infinite bound gives NaN, unused likewise. */
  uint64_t inside = sq <= t->dummy_max_sq;
  o3m_scal(n, select_double(inside, 1.0, shrink), out);
}

/* The row of id in t (table `which`: 0 users, 1 items) into out: its real
 * row when t holds it (r >= 0), else its dummy once a dummy-row key is set,
 * else the column means (whose norm is at most the mean of the row norms
 * and so inside any bound the table passed). The dummy is computed for
 * every id, known or not, and a row of the table is read for every id too
 * (for an unknown id the decoy row table_find picked, then discarded); the
 * two are selected without a branch, so the work does not depend on
 * whether t holds id (a timing channel otherwise). A present table has at least one
 * row. */
static void pick_row(const o3m_features *f, const ft_table *t, int which, const char *id, long r,
                     size_t decoy, double *out) {
  if (f->has_key)
    dummy_row(t, f->dummy_key[which], id, out);
  else
    memcpy(out, t->means, sizeof *out * (size_t)t->n_cols);
  uint64_t known = r >= 0;
  size_t m = (size_t)((uint64_t)0 - known);
  size_t row = ((size_t)r & m) | (decoy & ~m);
  const double *real = t->vals + row * (size_t)t->n_cols;
  for (int i = 0; i < t->n_cols; i++) out[i] = select_double(known, real[i], out[i]);
}

/* ------------------------------------------------------------------ moments */

/* Sets t->means and t->root (Sigma^{1/2}) from t's rows, allocating them on
 * the first call. A table whose covariance overflows (values beyond about
 * 1e154) gets a zero root, so its dummies are its means. O3M_ENOMEM is the
 * only failure. */
static int table_moments(ft_table *t) {
  const size_t n = (size_t)t->n_cols;
  if (!t->means) t->means = o3m_malloc(sizeof *t->means * n);
  if (!t->root) t->root = o3m_malloc(sizeof *t->root * n * n);
  double *V = o3m_malloc(sizeof *V * n * n), *lambda = o3m_malloc(sizeof *lambda * n);
  int rc = t->means && t->root && V && lambda ? O3M_OK : O3M_ENOMEM;
  if (!rc) rc = o3m_moments_eig(t->n_rows, t->n_cols, t->vals, t->n_cols, t->means, V, lambda);
  if (rc == O3M_ENONFINITE) {
    memset(t->root, 0, sizeof *t->root * n * n);
    rc = O3M_OK;
  } else if (!rc) {
    rc = o3m_moments_root(t->n_cols, V, lambda, 0, t->root);
  }
  o3m_free(V);
  o3m_free(lambda);
  return rc == O3M_OK ? O3M_OK : O3M_ENOMEM;
}

/* Records row r as t's largest when it is (see parse_row). */
static void note_max_row(ft_table *t, int r) {
  double sq = sum_sq(t->vals + (size_t)r * (size_t)t->n_cols, t->n_cols);
  if (r == 0 || !(sq <= t->max_sq)) {
    t->max_sq = sq;
    t->max_row = r;
  }
}

/* Replaces every row x of t by W x, W its whitening map, then recomputes
 * the largest row and the dummies' moments; W is wiped. On failure the
 * rows may be partly transformed. */
static int table_whiten(ft_table *t) {
  const int n = t->n_cols;
  double *W = o3m_malloc(sizeof *W * (size_t)n * (size_t)n), *x = o3m_malloc(sizeof *x * (size_t)n);
  int rc = W && x ? o3m_moments_whitener(t->n_rows, n, t->vals, n, W) : O3M_ENOMEM;
  for (int r = 0; !rc && r < t->n_rows; r++) {
    double *row = t->vals + (size_t)r * (size_t)n;
    o3m_symv(n, 1.0, W, row, 0.0, x); /* W is symmetric: its upper triangle is enough */
    memcpy(row, x, sizeof *x * (size_t)n);
    note_max_row(t, r);
  }
  if (W) explicit_bzero(W, sizeof *W * (size_t)n * (size_t)n);
  o3m_free(W);
  o3m_free(x);
  return rc ? rc : table_moments(t);
}

/* The epoch of t (o3m_features_epoch): BLAKE2b-64 over the kind, the
 * shape, the column names, and every row's id and values as they are in
 * memory (so after whitening when the party whitens), forced nonzero.
 * An absent table hashes its kind only, so that it too has a fixed,
 * nonzero epoch. The values are hashed as their bytes: the epoch names the
 * exact numbers a party masks, and a table that reads back to the same
 * doubles keeps its epoch. */
static void table_epoch(ft_table *t, o3m_features_kind kind) {
  crypto_generichash_state h;
  unsigned char out[8];
  uint32_t hdr[3] = {(uint32_t)kind, (uint32_t)t->n_rows, (uint32_t)t->n_cols};
  crypto_generichash_init(&h, NULL, 0, sizeof out);
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
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)out[i] << (8 * i);
  t->epoch = v ? v : 1;
}

/* ------------------------------------------------------------------ loading */

typedef struct loader {
  const char *name; /* file name for messages, shortened */
  char namebuf[NAME_SHOW_MAX + 1];
  o3m_err *e;
} loader;

static void loader_init(loader *L, const char *path, o3m_err *e) {
  size_t n = strlen(path);
  if (n <= NAME_SHOW_MAX) {
    L->name = path;
  } else {
    memcpy(L->namebuf, "...", 3);
    memcpy(L->namebuf + 3, path + n - (NAME_SHOW_MAX - 3), NAME_SHOW_MAX - 2);
    L->name = L->namebuf;
  }
  L->e = e;
}

/* Sets e to code with "name:line: message" ("name: message" for line 0)
 * and returns code. */
#define lerr(L, code, line, ...) o3m_err_set_at((L)->e, (code), (L)->name, (line), __VA_ARGS__)

/* One row's fields as libcsv hands them over: their bytes back to back,
 * each NUL-terminated, in buf; field i starts at buf + off[i]. Grown by
 * doubling, reused for every row. */
typedef struct csv_fields {
  char *buf;
  size_t len, cap;
  size_t *off;
  int n, cap_n;
} csv_fields;

/* What the libcsv callbacks share while one table is read. */
typedef struct table_reader {
  loader *L;
  ft_table *t;
  o3m_features_kind kind;
  csv_fields fields;
  char **names;   /* the column names (t->cols once the header is read) */
  int have_header;
  long line;      /* the physical line being fed */
  long row_line;  /* the line where the row in progress began */
  int in_row;     /* a row has begun and not ended */
  int rc;         /* the first error; the callbacks do nothing after one */
} table_reader;

/* Makes the byte buffer *buf (capacity *cap) hold at least need bytes,
 * doubling from `first` bytes (the contents are kept). O3M_ENOMEM when it
 * cannot; *buf and *cap are then unchanged (still owned by the caller). */
static int grow_bytes(char **buf, size_t *cap, size_t need, size_t first) {
  if (need <= *cap) return O3M_OK;
  size_t nc = *cap ? 2 * *cap : first;
  while (nc < need) {
    if (nc > SIZE_MAX / 2) return O3M_ENOMEM;
    nc *= 2;
  }
  char *nb = o3m_realloc(*buf, nc);
  if (!nb) return O3M_ENOMEM;
  *buf = nb;
  *cap = nc;
  return O3M_OK;
}

/* libcsv's field callback: appends the field (len bytes at s) to the row.
 * A NUL byte inside a field is an error (ids are C strings). */
static void on_field(void *s, size_t len, void *data) {
  table_reader *R = data;
  if (R->rc) return;
  csv_fields *F = &R->fields;
  if (memchr(s, '\0', len)) {
    R->rc = lerr(R->L, O3M_EPARSE, R->row_line, "NUL byte in field %d", F->n + 1);
    return;
  }
  if (F->n == F->cap_n) {
    int nc = F->cap_n ? 2 * F->cap_n : 16;
    size_t *no = o3m_realloc(F->off, sizeof *no * (size_t)nc);
    if (!no) {
      R->rc = lerr(R->L, O3M_ENOMEM, 0, "out of memory");
      return;
    }
    F->off = no;
    F->cap_n = nc;
  }
  if (grow_bytes(&F->buf, &F->cap, F->len + len + 1, 1024)) {
    R->rc = lerr(R->L, O3M_ENOMEM, 0, "out of memory");
    return;
  }
  F->off[F->n++] = F->len;
  memcpy(F->buf + F->len, s, len);
  F->len += len;
  F->buf[F->len++] = '\0';
}

static const char *field(const table_reader *R, int i) {
  return R->fields.buf + R->fields.off[i];
}

/* Checks the header's fields (the id column and the names) and keeps the
 * names in R->names. */
static int parse_header(table_reader *R) {
  loader *L = R->L;
  const char *want = R->kind == O3M_FEATURES_USERS ? "user_id" : "item_id";
  int nf = R->fields.n;
  if (strcmp(field(R, 0), want) != 0)
    return lerr(L, O3M_EPARSE, 1, "first header field must be '%s', got '%.40s'", want,
                field(R, 0));
  if (nf < 2) return lerr(L, O3M_EPARSE, 1, "header has no feature columns");
  if (nf - 1 > O3M_FEATURES_MAX_COLS)
    return lerr(L, O3M_EPARSE, 1, "%d feature columns, at most %d allowed", nf - 1,
                O3M_FEATURES_MAX_COLS);
  /* The names are kept with the table (o3m_features_column); table_free
   * releases them, also after a failure. */
  ft_table *t = R->t;
  t->header = o3m_malloc(R->fields.len);
  R->names = t->cols = o3m_malloc((size_t)(nf - 1) * sizeof *t->cols);
  if (!t->header || !t->cols) return lerr(L, O3M_ENOMEM, 0, "out of memory");
  memcpy(t->header, R->fields.buf, R->fields.len);
  for (int c = 0; c < nf - 1; c++) {
    const char *p = t->header + R->fields.off[c + 1];
    if (!*p) return lerr(L, O3M_EPARSE, 1, "header field %d (a column name) is empty", c + 2);
    for (int j = 0; j < c; j++)
      if (strcmp(R->names[j], p) == 0)
        return lerr(L, O3M_EPARSE, 1, "column name '%.40s' repeated", p);
    R->names[c] = (char *)p;
  }
  R->t->n_cols = nf - 1;
  return O3M_OK;
}

/* Grows the row arrays and the id pool so that one more row of idlen bytes
 * fits. */
static int table_reserve(ft_table *t, size_t idlen) {
  if ((size_t)t->n_rows == t->cap_rows) {
    size_t cap = t->cap_rows ? 2 * t->cap_rows : 256;
    if (cap > SIZE_MAX / sizeof(double) / (size_t)t->n_cols) return O3M_ENOMEM;
    double *nv = o3m_realloc(t->vals, cap * (size_t)t->n_cols * sizeof *nv);
    if (!nv) return O3M_ENOMEM;
    t->vals = nv;
    size_t *no = o3m_realloc(t->id_off, cap * sizeof *no);
    if (!no) return O3M_ENOMEM;
    t->id_off = no;
    t->cap_rows = cap;
  }
  if (grow_bytes(&t->ids, &t->ids_cap, t->ids_len + idlen + 1, 4096)) return O3M_ENOMEM;
  return index_reserve(t);
}

/* Parses the fields of one data row (begun at line) into row t->n_rows and
 * indexes it. */
static int parse_row(table_reader *R, long line) {
  loader *L = R->L;
  ft_table *t = R->t;
  char *const *names = R->names;
  if (R->fields.n != t->n_cols + 1)
    return lerr(L, O3M_EPARSE, line, "expected %d fields, got %d", t->n_cols + 1,
                R->fields.n);
  if (t->n_rows >= O3M_FEATURES_MAX_ROWS)
    return lerr(L, O3M_EPARSE, line, "more than %d rows", O3M_FEATURES_MAX_ROWS);
  const char *s = field(R, 0);
  size_t idlen = strlen(s);
  if (idlen == 0) return lerr(L, O3M_EPARSE, line, "field 1 (the id) is empty");
  if (idlen > O3M_MAX_ID)
    return lerr(L, O3M_EPARSE, line, "id of %zu bytes, at most %d allowed", idlen, O3M_MAX_ID);
  long dup = table_find(t, s, NULL);
  if (dup >= 0)
    return lerr(L, O3M_EPARSE, line, "duplicate id '%.40s' (first at data row %ld)", s,
                dup + 1);
  if (table_reserve(t, idlen)) return lerr(L, O3M_ENOMEM, 0, "out of memory");
  double *row = t->vals + (size_t)t->n_rows * (size_t)t->n_cols;
  for (int c = 0; c < t->n_cols; c++) {
    const char *p = field(R, c + 1);
    if (!*p)
      return lerr(L, O3M_EPARSE, line, "field %d (column '%.40s') is empty", c + 2, names[c]);
    char *end;
    /* Unquoted fields come trimmed of spaces and tabs; a quoted one with
     * spaces inside the quotes, or a hex form, is not a decimal number. */
    int ok = !(*p == ' ' || *p == '\t') && !strpbrk(p, "xX");
    double v = ok ? strtod(p, &end) : 0.0;
    if (!ok || end == p || *end)
      return lerr(L, O3M_EPARSE, line, "field %d (column '%.40s') is not a decimal number",
                  c + 2, names[c]);
    if (!isfinite(v))
      return lerr(L, O3M_EPARSE, line,
                  "field %d (column '%.40s') is not finite (NaN, Inf or out of range)", c + 2,
                  names[c]);
    row[c] = v;
  }
  /* The largest row norm, for the bound (o3m_features_check_norm) and the
   * dummy rows. A square that overflows makes it infinite, which no bound
   * accepts. */
  note_max_row(t, t->n_rows);
  memcpy(t->ids + t->ids_len, s, idlen + 1);
  t->id_off[t->n_rows] = t->ids_len;
  t->ids_len += idlen + 1;
  slot_put(t->slots, t->mask, s, t->n_rows);
  t->n_rows++;
  return O3M_OK;
}

/* libcsv's row callback: the header first, then the data rows. */
static void on_row(int c, void *data) {
  (void)c;
  table_reader *R = data;
  R->in_row = 0;
  if (R->rc) return;
  if (!R->have_header) {
    R->rc = parse_header(R);
    R->have_header = 1;
  } else {
    R->rc = parse_row(R, R->row_line);
  }
  R->fields.n = 0;
  R->fields.len = 0;
}

/* Only LF ends a row (CRLF's CR is removed before the parser sees it), so
 * a stray CR inside a field is data, as it was before libcsv. */
static int is_term(unsigned char c) { return c == '\n'; }

/* Loads one table into t (zeroed by the caller). On failure t holds partial
 * allocations that table_free releases.
 *
 * The file is read line by line (getline) and each line is handed to libcsv
 * with its line end normalized to LF, so that the line a row begins on is
 * known for messages, and a libcsv syntax error is located by line and
 * column: csv_parse stops at the byte it cannot take. libcsv runs in strict
 * mode (a quote inside an unquoted field, text after a closing quote and an
 * unterminated quote at the end are errors) with its default trimming of
 * spaces and tabs around unquoted fields. A UTF-8 byte order mark at the
 * start of the file is skipped. Blank lines are skipped by libcsv. */
static int table_load(ft_table *t, const char *path, o3m_features_kind kind,
                      o3m_err *e) {
  loader L;
  loader_init(&L, path, e);
  snprintf(t->name, sizeof t->name, "%s", L.name);
  t->dummy_max_sq = INFINITY;
  FILE *f = fopen(path, "r");
  if (!f) return lerr(&L, O3M_EIO, 0, "cannot open: %s", strerror(errno));
  struct csv_parser csv;
  if (csv_init(&csv, CSV_STRICT | CSV_STRICT_FINI) != 0) {
    fclose(f);
    return lerr(&L, O3M_ENOMEM, 0, "out of memory");
  }
  csv_set_term_func(&csv, is_term);
  /* libcsv's field buffer grows through the project's allocator too. */
  csv_set_realloc_func(&csv, o3m_realloc);
  csv_set_free_func(&csv, o3m_free);
  table_reader R;
  memset(&R, 0, sizeof R);
  R.L = &L;
  R.t = t;
  R.kind = kind;
  t->present = 1;
  char *buf = NULL;
  size_t bufcap = 0;
  ssize_t n;
  errno = 0;
  while (!R.rc && (n = getline(&buf, &bufcap, f)) >= 0) {
    R.line++;
    char *p = buf;
    size_t len = (size_t)n, skip = 0;
    if (R.line == 1 && len >= 3 && memcmp(p, "\xEF\xBB\xBF", 3) == 0) {
      p += 3;
      len -= 3;
      skip = 3;
    }
    if (len >= 2 && p[len - 2] == '\r' && p[len - 1] == '\n') {
      p[len - 2] = '\n';
      len--;
    }
    if (!R.in_row) {
      /* A row begins on the first line that is not blank. */
      size_t i = 0;
      while (i < len && (p[i] == ' ' || p[i] == '\t' || p[i] == '\n' || p[i] == '\r')) i++;
      if (i < len) {
        R.in_row = 1;
        R.row_line = R.line;
      }
    }
    size_t done = csv_parse(&csv, p, len, on_field, on_row, &R);
    /* libcsv stops short when it cannot grow its field buffer, too: that
     * is no quoting error. */
    if (!R.rc && done < len && csv_error(&csv) == CSV_ENOMEM)
      R.rc = lerr(&L, O3M_ENOMEM, R.line, "out of memory");
    if (!R.rc && done < len)
      R.rc = o3m_err_set(e, O3M_EPARSE, "%s:%ld:%zu: malformed CSV quoting (a quote inside "
                         "an unquoted field, or text after a closing quote)", L.name, R.line,
                         done + skip + 1);
  }
  if (!R.rc && ferror(f)) R.rc = lerr(&L, O3M_EIO, R.line, "read error");
  /* getline's -1 without end of file or a read error: it could not grow
   * buf. The rows after would be lost, not the file ended. */
  if (!R.rc && !feof(f)) R.rc = lerr(&L, O3M_ENOMEM, R.line + 1, "out of memory");
  if (!R.rc && csv_fini(&csv, on_field, on_row, &R) != 0 && !R.rc)
    R.rc = lerr(&L, O3M_EPARSE, R.row_line, "unterminated quoted field (the row begins here)");
  if (!R.rc && !R.have_header) R.rc = lerr(&L, O3M_EPARSE, 1, "missing header (empty file)");
  if (!R.rc && t->n_rows == 0)
    R.rc = lerr(&L, O3M_EPARSE, R.line + 1, "no data rows after the header");
  /* The mean and covariance the dummy rows for ids the table does not
   * hold are drawn from. */
  if (!R.rc && table_moments(t)) R.rc = lerr(&L, O3M_ENOMEM, 0, "out of memory");
  csv_free(&csv);
  o3m_free(R.fields.buf);
  o3m_free(R.fields.off);
  o3m_free(buf);
  fclose(f);
  return R.rc;
}

int o3m_features_load(o3m_features **out, const char *user_csv,
                     const char *item_csv, int expected_dims, o3m_err *e) {
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
  if (user_csv) rc = table_load(&f->user, user_csv, O3M_FEATURES_USERS, e);
  if (!rc && item_csv) rc = table_load(&f->item, item_csv, O3M_FEATURES_ITEMS, e);
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
  table_epoch(&f->user, O3M_FEATURES_USERS);
  table_epoch(&f->item, O3M_FEATURES_ITEMS);
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
  explicit_bzero(f->dummy_key, sizeof f->dummy_key);
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

int o3m_features_whiten(o3m_features *f, o3m_err *e) {
  if (!f) return o3m_err_set(e, O3M_EINVAL, "o3m_features_whiten: f is NULL");
  if (f->whitened || f->norm_checked)
    return o3m_err_set(e, O3M_ESTATE,
                       f->whitened ? "o3m_features_whiten: the tables are already whitened"
                                   : "o3m_features_whiten: must come before "
                                     "o3m_features_check_norm");
  ft_table *tables[2] = {&f->user, &f->item};
  for (int i = 0; i < 2; i++) {
    if (!tables[i]->present) continue;
    int rc = table_whiten(tables[i]);
    if (rc == O3M_ENONFINITE)
      return o3m_err_set_at(e, rc, tables[i]->name, 0,
                            "cannot whiten: the covariance of the columns overflows "
                            "(values beyond about 1e154)");
    if (rc) return o3m_err_set_at(e, rc, tables[i]->name, 0, "cannot whiten: out of memory");
  }
  /* The whitened values are what the party masks: the epochs name them. */
  table_epoch(&f->user, O3M_FEATURES_USERS);
  table_epoch(&f->item, O3M_FEATURES_ITEMS);
  f->whitened = 1;
  o3m_err_clear(e);
  return O3M_OK;
}

void o3m_features_set_dummy_key(o3m_features *f, const unsigned char key[O3M_FEATURES_KEY_BYTES]) {
  set_key(f, key);
  f->has_key = 1;
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
