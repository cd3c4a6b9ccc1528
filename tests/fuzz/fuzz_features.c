/* fuzz_features.c -- libFuzzer target for the passive participant's feature
 * tables (party/o3m_features.h).
 *
 * The input is loaded as a user table and then as an item table (its header
 * decides which one can succeed). The expected dims are taken from the
 * input's first line (its commas), so that a well-formed table gets past
 * the dims check and the index and means are built too. If the input holds
 * a NUL byte, the bytes before it and after it are also loaded together as
 * a user table and an item table. A table that loads is then looked up: the
 * id of its first row must be found, an unknown id must get finite means,
 * and the counters must count what happened. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "fuzz_util.h"
#include "o3m_features.h"

#define MAX_DIMS 64

static fuzz_file g_a, g_b;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  fuzz_file_init(&g_a, "fuzz_table_a");
  fuzz_file_init(&g_b, "fuzz_table_b");
  return 0;
}

/* Feature columns announced by the header: commas in the first line. */
static int header_cols(const uint8_t *data, size_t n) {
  int c = 0;
  for (size_t i = 0; i < n && data[i] != '\n'; i++) c += data[i] == ',';
  return c;
}

/* Copies the first row's id (line 2 up to its first comma) into id; 0 if
 * there is none, it is not a plain C string of 1..O3M_MAX_ID, or the CSV
 * reading may make it another id or another row: a quote in line 1 or in
 * the id (quoting), spaces or tabs around the id (trimmed), a line 1 of
 * blanks only, after a byte order mark if any (then line 2 is the header). */
static int first_id(const uint8_t *data, size_t n, char *id) {
  const uint8_t *nl = memchr(data, '\n', n);
  if (!nl) return 0;
  if (memchr(data, '"', (size_t)(nl - data))) return 0;
  size_t b = n >= 3 && memcmp(data, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0; /* a BOM */
  while (data + b < nl && (data[b] == ' ' || data[b] == '\t' || data[b] == '\r')) b++;
  if (data + b == nl) return 0;
  const uint8_t *p = nl + 1, *end = data + n;
  size_t len = 0;
  while (p + len < end && p[len] != ',' && p[len] != '\n') len++;
  if (p + len >= end || p[len] != ',' || len < 1 || len > O3M_MAX_ID) return 0;
  if (memchr(p, 0, len) || memchr(p, '"', len)) return 0;
  if (p[0] == ' ' || p[0] == '\t' || p[len - 1] == ' ' || p[len - 1] == '\t') return 0;
  memcpy(id, p, len);
  id[len] = '\0';
  return 1;
}

/* Looks up the table(s) of f: known ids (when given) and an unknown one. */
static void exercise(o3m_features *f, int dims, const char *user_id, const char *item_id) {
  FUZZ_CHECK(o3m_features_dims(f) == dims);
  FUZZ_CHECK(o3m_features_user_cols(f) + o3m_features_item_cols(f) == dims);
  int has_users = o3m_features_user_cols(f) > 0, has_items = o3m_features_item_cols(f) > 0;
  FUZZ_CHECK(!has_users || o3m_features_n_users(f) >= 1);
  FUZZ_CHECK(!has_items || o3m_features_n_items(f) >= 1);

  double X[2 * MAX_DIMS];
  const char *items[2] = {item_id ? item_id : "no,such item 1", "no,such item 2"};
  int uu = -1, ui = -1;
  int rc = o3m_features_fill(f, user_id ? user_id : "no,such user", 2, items, X, &uu, &ui);
  FUZZ_CHECK(rc == 0);
  for (int i = 0; i < 2 * dims; i++) FUZZ_CHECK(isfinite(X[i]));
  if (has_users) FUZZ_CHECK(uu == (user_id ? 0 : 1));
  else FUZZ_CHECK(uu == 0);
  if (has_items) FUZZ_CHECK(ui == (item_id ? 1 : 2));
  else FUZZ_CHECK(ui == 0);

  o3m_features_stats st;
  o3m_features_stats_get(f, &st);
  FUZZ_CHECK(st.lookups == 1);
  FUZZ_CHECK(st.unknown_users == (uint64_t)(has_users && !user_id));
  FUZZ_CHECK(st.unknown_items == (uint64_t)(has_items ? (item_id ? 1 : 2) : 0));

  /* K < 1 is refused without counting. */
  FUZZ_CHECK(o3m_features_fill(f, "x", 0, items, X, NULL, NULL) == O3M_EINVAL);
  o3m_features_stats_get(f, &st);
  FUZZ_CHECK(st.lookups == 1);

  /* Unknown ids got the column means; with a PP's dummy-row key they get
   * keyed dummies, finite as well. */
  static const unsigned char key[O3M_FEATURES_KEY_BYTES] = {1, 2, 3};
  o3m_features_set_dummy_key(f, key);
  rc = o3m_features_fill(f, user_id ? user_id : "no,such user", 2, items, X, NULL, NULL);
  FUZZ_CHECK(rc == 0);
  for (int i = 0; i < 2 * dims; i++) FUZZ_CHECK(isfinite(X[i]));
}

static void load_one(const uint8_t *data, size_t n, int as_items) {
  int dims = header_cols(data, n);
  if (dims < 1 || dims > MAX_DIMS) dims = 1;
  const char *path = fuzz_file_set(&g_a, data, n);
  o3m_features *f = NULL;
  o3m_err e;
  int rc = as_items ? o3m_features_load(&f, NULL, path, dims, &e)
                    : o3m_features_load(&f, path, NULL, dims, &e);
  if (rc != 0) {
    FUZZ_CHECK(rc < 0 && f == NULL);
    return;
  }
  char id[O3M_MAX_ID + 1];
  int known = first_id(data, n, id);
  if (as_items) exercise(f, dims, NULL, known ? id : NULL);
  else exercise(f, dims, known ? id : NULL, NULL);
  o3m_features_destroy(f);
}

static void load_both(const uint8_t *u, size_t nu, const uint8_t *it, size_t ni) {
  int du = header_cols(u, nu), di = header_cols(it, ni);
  if (du < 1 || di < 1 || du + di > MAX_DIMS) return;
  o3m_features *f = NULL;
  o3m_err e;
  int rc = o3m_features_load(&f, fuzz_file_set(&g_a, u, nu), fuzz_file_set(&g_b, it, ni),
                            du + di, &e);
  if (rc != 0) {
    FUZZ_CHECK(rc < 0 && f == NULL);
    return;
  }
  FUZZ_CHECK(o3m_features_user_cols(f) == du && o3m_features_item_cols(f) == di);
  char uid[O3M_MAX_ID + 1], iid[O3M_MAX_ID + 1];
  int ku = first_id(u, nu, uid), ki = first_id(it, ni, iid);
  exercise(f, du + di, ku ? uid : NULL, ki ? iid : NULL);
  o3m_features_destroy(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  load_one(data, size, 0);
  load_one(data, size, 1);
  size_t cut = fuzz_split_at_nul(data, size);
  if (cut < size) load_both(data, cut, data + cut + 1, size - cut - 1);
  return 0;
}
