/* eval_reader_obd.c -- the Open Bandit Dataset (ZOZOTOWN) as replay events.
 *
 * Input: the log (e.g. men.csv: an unnamed index column, timestamp, item_id,
 * position, click, propensity_score, user_feature_0..3, user-item affinity
 * columns) and the item table (item_context.csv: an unnamed index column,
 * item_id, item_feature_0..3). Columns are found by their header names, so
 * their order does not matter. Plain CSV without quoting (the OBD files have
 * none); a quote character is an error.
 *
 * Choices (the data set leaves them to the user; documented here and in
 * docs/evaluation/replay.md):
 *   - Positions. The logging policy fills three slots per impression; only
 *     rows at one position (default 1, eval_obd_options.position) are used,
 *     so that every event is one decision among all items. Rows at other
 *     positions are skipped and counted. position 0 uses every row.
 *   - Arms are the items: K = number of rows of the item table, whose
 *     item_id must be exactly 0..K-1 (34 in the shipped campaign).
 *   - User features: each user_feature_* column is a categorical value (a
 *     hex digest). Each column gets user_buckets one-hot slots (default 16),
 *     one per distinct value, given in order of first appearance in the log:
 *     the k-th distinct value of column j sets slot j * B + k. A value never
 *     shares a slot with another, so no two user groups are merged (a 16-way
 *     hash did merge them: 8 of the 9 values of user_feature_2 in the men
 *     campaign fell into 6 buckets, about 30% of the rows sharing a slot with
 *     another group). The slots are fixed before the log is read, so the
 *     reader stays one-pass and the dimension is known at open (4 B user
 *     columns); a column with more than B distinct values is an error naming
 *     the column and the line, not a silent merge (the men campaign has 3, 5,
 *     9 and 8). Order of first appearance makes the encoding depend on the
 *     log: a state saved by ope --state-out fits the same log read again (as
 *     --state-in does), not another campaign's. An empty value leaves its
 *     column's slots at zero.
 *   - Item features: item_feature_0 is numeric and is min-max scaled over
 *     the items to [0, 1] (0 if constant); every other item_feature_* column
 *     is categorical and one-hot encoded with its exact vocabulary, in order
 *     of first appearance in the item table (the table is small and read
 *     whole, so no hashing is needed).
 *   - Context of arm a = [user one-hot ; item features of a], the plain
 *     concatenation (d = 4 B + 1 + sum of the item vocabularies, 92 for the
 *     shipped files). Why not an outer product: it would be 64 x 28 = 1,792
 *     dimensions for ~100 matched replay rows, and concatenation keeps the
 *     column split meaningful for the federation (the first 4 B columns are
 *     the user features the recommender holds, the rest the item features
 *     another department may hold; --parties 64,28 says exactly that). The
 *     price: under the shared model the user block adds the same to every
 *     arm's mean, so personalization comes only through the confidence width;
 *     the disjoint model (one theta per item) personalizes fully.
 *   - Reward: the click column (0/1).
 *   - Propensity: the propensity_score column, when the header has it, is
 *     the logging policy's probability of the logged item at the logged
 *     position; it is given with each event (eval_event.pscore, for the
 *     off-policy estimators of eval_ope.h) and must be in (0, 1].
 * The contexts are additively split: w = [user ; 0], c_a = [0 ; item_a]. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval_reader_impl.h"
#include "o3m_hash.h"
#include "o3m_limits.h"

#define OBD_MAX_FIELDS 256
#define OBD_MAX_USER_COLS 16
#define OBD_MAX_ITEMS O3M_EVAL_MAX_K
#define OBD_MAX_ITEM_COLS 64
#define OBD_MAX_USER_VALUE 64 /* bytes of one user feature value (OBD's: 32) */
#define OBD_MAX_COL_NAME 32

typedef struct obd_reader {
  eval_reader base;
  eval_obd_options opt;
  int n_fields; /* of the log's header */
  int col_item, col_pos, col_click, col_ps; /* col_ps -1: no propensity_score */
  int n_user;
  int col_user[OBD_MAX_USER_COLS];
  char user_name[OBD_MAX_USER_COLS][OBD_MAX_COL_NAME];
  int d_user;
  /* The vocabulary of each user column, slot k of column j at j * B + k:
   * its value (NUL-terminated, OBD_MAX_USER_VALUE + 1 bytes each) and the
   * value's hash, compared first so that a row costs a string comparison
   * only on a match. */
  int n_vocab[OBD_MAX_USER_COLS];
  char *vocab;
  uint64_t *vocab_hash;
  char *fields[OBD_MAX_FIELDS + 1];
} obd_reader;

void eval_obd_options_default(eval_obd_options *o) {
  o->position = 1;
  o->user_buckets = 16;
}

static int has_quote(const char *s) { return strchr(s, '"') != NULL; }

/* The slot of value v (vl bytes) in user column j: its index in the column's
 * vocabulary, appended on first appearance. Returns the slot, or a (negative)
 * error code with e set when the value is too long or the column has no free
 * slot. */
static int user_slot(obd_reader *o, int j, const char *v, size_t vl, o3m_err *e) {
  eval_lines *L = &o->base.lines;
  const int B = o->opt.user_buckets;
  uint64_t h = o3m_hash_bytes(v, vl, (uint64_t)j);
  for (int k = 0; k < o->n_vocab[j]; k++) {
    size_t at = (size_t)j * B + k;
    if (o->vocab_hash[at] == h && !strcmp(o->vocab + at * (OBD_MAX_USER_VALUE + 1), v))
      return k;
  }
  if (vl > OBD_MAX_USER_VALUE)
    return o3m_err_set(e, O3M_EPARSE, "%s:%lld: %s value of %zu bytes, longer than %d",
                       L->path, L->line, o->user_name[j], vl, OBD_MAX_USER_VALUE);
  if (o->n_vocab[j] == B)
    return o3m_err_set(e, O3M_ERANGE, "%s:%lld: %s has more than %d distinct values ('%.40s' "
                       "is value %d); raise --obd-user-buckets (at most 4096) so that each "
                       "value keeps its own slot", L->path, L->line, o->user_name[j], B, v,
                       B + 1);
  int k = o->n_vocab[j]++;
  size_t at = (size_t)j * B + k;
  memcpy(o->vocab + at * (OBD_MAX_USER_VALUE + 1), v, vl + 1);
  o->vocab_hash[at] = h;
  return k;
}

static int obd_parse(eval_reader *r, char *line, eval_event *ev, o3m_err *e) {
  obd_reader *o = (obd_reader *)r;
  eval_lines *L = &r->lines;
  if (has_quote(line))
    return o3m_err_set(e, O3M_EPARSE, "%s:%lld: quoted CSV fields are not supported", L->path,
                       L->line);
  int n = eval__split(line, ',', o->fields, OBD_MAX_FIELDS + 1);
  if (n != o->n_fields)
    return o3m_err_set(e, O3M_EPARSE, "%s:%lld: expected %d fields as in the header, got %d",
                       L->path, L->line, o->n_fields, n);
  long long pos, item, click;
  if (eval__parse_ll(o->fields[o->col_pos], &pos))
    return o3m_err_set(e, O3M_EPARSE, "%s:%lld: position '%.40s' is not an integer", L->path,
                       L->line, o->fields[o->col_pos]);
  if (eval__parse_ll(o->fields[o->col_item], &item))
    return o3m_err_set(e, O3M_EPARSE, "%s:%lld: item_id '%.40s' is not an integer", L->path,
                       L->line, o->fields[o->col_item]);
  if (eval__parse_ll(o->fields[o->col_click], &click))
    return o3m_err_set(e, O3M_EPARSE, "%s:%lld: click '%.40s' is not an integer", L->path,
                       L->line, o->fields[o->col_click]);
  if (item < 0 || item >= r->K)
    return o3m_err_set(e, O3M_ERANGE, "%s:%lld: item_id %lld out of range 0..%d", L->path,
                       L->line, item, r->K - 1);
  if (click != 0 && click != 1)
    return o3m_err_set(e, O3M_ERANGE, "%s:%lld: click %lld is not 0 or 1", L->path, L->line,
                       click);
  if (pos < 1)
    return o3m_err_set(e, O3M_ERANGE, "%s:%lld: position %lld is not >= 1", L->path, L->line,
                       pos);
  if (o->opt.position && pos != o->opt.position) return 0; /* skipped */
  if (o->col_ps >= 0) {
    double ps;
    if (eval__parse_double(o->fields[o->col_ps], &ps) || !(ps > 0 && ps <= 1))
      return o3m_err_set(e, O3M_ERANGE, "%s:%lld: propensity_score '%.40s' is not a number in "
                         "(0, 1]", L->path, L->line, o->fields[o->col_ps]);
    ev->pscore = ps;
  }
  /* w = [user one-hot ; 0]; X = 1 w^T + C. */
  int B = o->opt.user_buckets, d = r->d, K = r->K;
  memset(r->w, 0, sizeof(double) * o->d_user);
  for (int j = 0; j < o->n_user; j++) {
    const char *v = o->fields[o->col_user[j]];
    size_t vl = strlen(v);
    if (!vl) continue;
    int k = user_slot(o, j, v, vl, e);
    if (k < 0) return k;
    r->w[j * B + k] = 1.0;
  }
  if (!r->no_matrix) {
    memcpy(r->X, r->C, sizeof(double) * (size_t)K * d);
    for (int a = 0; a < K; a++) memcpy(r->X + (size_t)a * d, r->w, sizeof(double) * o->d_user);
  }
  ev->arm = (int)item;
  ev->reward = (double)click;
  ev->X = r->no_matrix ? NULL : r->X;
  ev->w = r->w;
  return 1;
}

static void obd_destroy(eval_reader *r) {
  obd_reader *o = (obd_reader *)r;
  free(o->vocab);
  free(o->vocab_hash);
  free(r);
}

static const eval_reader_ops obd_ops = {obd_parse, obd_destroy};

/* The item table, read whole at open: K items, their one numeric feature and
 * their categorical values (kept as strings only until encoded). */
typedef struct item_table {
  int K;
  int n_cat;
  double *num;  /* K */
  char **cat;   /* K x n_cat strings (malloc'd) */
  int *cat_code; /* K x n_cat: index in the column's vocabulary */
  int card[OBD_MAX_ITEM_COLS];
} item_table;

static void item_table_free(item_table *t) {
  if (t->cat)
    for (int i = 0; i < t->K * t->n_cat; i++) free(t->cat[i]);
  free(t->cat);
  free(t->cat_code);
  free(t->num);
}

/* Reads item_context.csv into t. Errors name the line. */
static int read_items(item_table *t, const char *path, o3m_err *e) {
  memset(t, 0, sizeof *t);
  eval_lines L;
  int rc = eval_lines_open(&L, path, e);
  if (rc) return rc;
  char *line, *f[OBD_MAX_ITEM_COLS + 1];
  size_t len;
  int col_id = -1, col_num = -1, col_cat[OBD_MAX_ITEM_COLS], nf;
  rc = eval_lines_next(&L, &line, &len, e);
  if (rc <= 0) {
    if (rc == 0) rc = o3m_err_set(e, O3M_EPARSE, "%s: empty file, expected a header", path);
    goto out;
  }
  nf = eval__split(line, ',', f, OBD_MAX_ITEM_COLS + 1);
  if (nf > OBD_MAX_ITEM_COLS) {
    rc = o3m_err_set(e, O3M_EPARSE, "%s:1: more than %d columns", path, OBD_MAX_ITEM_COLS);
    goto out;
  }
  for (int i = 0; i < nf; i++) {
    if (!strcmp(f[i], "item_id")) col_id = i;
    else if (!strcmp(f[i], "item_feature_0")) col_num = i;
    else if (!strncmp(f[i], "item_feature_", 13)) col_cat[t->n_cat++] = i;
  }
  if (col_id < 0 || col_num < 0) {
    rc = o3m_err_set(e, O3M_EPARSE, "%s:1: header lacks item_id or item_feature_0", path);
    goto out;
  }
  /* Items are few; grow the arrays by doubling while reading. */
  int cap = 0;
  while ((rc = eval_lines_next(&L, &line, &len, e)) == 1) {
    if (len == 0) continue;
    int n = eval__split(line, ',', f, OBD_MAX_ITEM_COLS + 1);
    if (n != nf) {
      rc = o3m_err_set(e, O3M_EPARSE, "%s:%lld: expected %d fields as in the header, got %d",
                       path, L.line, nf, n);
      goto out;
    }
    long long id;
    if (eval__parse_ll(f[col_id], &id) || id != t->K) {
      rc = o3m_err_set(e, O3M_EPARSE, "%s:%lld: item_id '%.40s', expected %d (ids must be "
                       "0, 1, 2, ... in order)", path, L.line, f[col_id], t->K);
      goto out;
    }
    if (t->K >= OBD_MAX_ITEMS) {
      rc = o3m_err_set(e, O3M_ERANGE, "%s:%lld: more than %d items", path, L.line,
                       OBD_MAX_ITEMS);
      goto out;
    }
    if (t->K == cap) {
      int nc = cap ? 2 * cap : 64;
      double *num = realloc(t->num, sizeof(double) * nc);
      if (num) t->num = num;
      char **cat = num ? realloc(t->cat, sizeof(char *) * nc * (t->n_cat ? t->n_cat : 1)) : NULL;
      if (cat) t->cat = cat;
      if (!num || !cat) {
        rc = o3m_err_set(e, O3M_ENOMEM, "%s: out of memory", path);
        goto out;
      }
      cap = nc;
    }
    double x;
    if ((rc = eval__parse_double(f[col_num], &x))) {
      rc = o3m_err_set(e, rc, "%s:%lld: item_feature_0 '%.40s' is not a finite number of "
                       "magnitude at most %g", path, L.line, f[col_num], O3M_MAX_INPUT_ABS);
      goto out;
    }
    t->num[t->K] = x;
    for (int c = 0; c < t->n_cat; c++) t->cat[t->K * t->n_cat + c] = NULL;
    t->K++;
    for (int c = 0; c < t->n_cat; c++) {
      char *s = strdup(f[col_cat[c]]);
      if (!s) {
        rc = o3m_err_set(e, O3M_ENOMEM, "%s: out of memory", path);
        goto out;
      }
      t->cat[(t->K - 1) * t->n_cat + c] = s;
    }
  }
  if (rc < 0) goto out;
  if (t->K < 1) {
    rc = o3m_err_set(e, O3M_EPARSE, "%s: no items", path);
    goto out;
  }
  /* Vocabularies in order of first appearance (quadratic, K is small). */
  t->cat_code = malloc(sizeof(int) * (size_t)t->K * (t->n_cat ? t->n_cat : 1));
  if (!t->cat_code) {
    rc = o3m_err_set(e, O3M_ENOMEM, "%s: out of memory", path);
    goto out;
  }
  for (int c = 0; c < t->n_cat; c++) {
    t->card[c] = 0;
    for (int i = 0; i < t->K; i++) {
      int code = -1;
      for (int j = 0; j < i && code < 0; j++)
        if (!strcmp(t->cat[j * t->n_cat + c], t->cat[i * t->n_cat + c]))
          code = t->cat_code[j * t->n_cat + c];
      t->cat_code[i * t->n_cat + c] = code >= 0 ? code : t->card[c]++;
    }
  }
  rc = O3M_OK;
out:
  eval_lines_close(&L);
  return rc;
}

int eval_reader_open_obd(eval_reader **out, const char *path, const char *item_path,
                         const eval_obd_options *opt, o3m_err *e) {
  *out = NULL;
  eval_obd_options def;
  if (!opt) {
    eval_obd_options_default(&def);
    opt = &def;
  }
  if (opt->position < 0 || opt->user_buckets < 1 || opt->user_buckets > 4096)
    return o3m_err_set(e, O3M_EINVAL, "obd: position %d (0..) or user buckets %d (1..4096) "
                       "out of range", opt->position, opt->user_buckets);
  if (!item_path)
    return o3m_err_set(e, O3M_EINVAL, "obd: the item table (item_context.csv) is required");
  item_table t;
  int rc = read_items(&t, item_path, e);
  if (rc) {
    item_table_free(&t);
    return rc;
  }
  obd_reader *o = calloc(1, sizeof *o);
  if (!o) {
    item_table_free(&t);
    return o3m_err_set(e, O3M_ENOMEM, "%s: out of memory", path);
  }
  eval_reader *r = &o->base;
  r->ops = &obd_ops;
  r->skip_reason = opt->position ? "other position, or blank line" : "blank line";
  o->opt = *opt;
  rc = eval_lines_open(&r->lines, path, e);
  if (rc) {
    free(o);
    item_table_free(&t);
    return rc;
  }
  /* Header: find the columns by name. */
  char *line;
  size_t len;
  rc = eval_lines_next(&r->lines, &line, &len, e);
  if (rc == 0) rc = o3m_err_set(e, O3M_EPARSE, "%s: empty file, expected a header", path);
  if (rc < 0) goto fail;
  o->col_item = o->col_pos = o->col_click = o->col_ps = -1;
  o->n_fields = eval__split(line, ',', o->fields, OBD_MAX_FIELDS + 1);
  if (o->n_fields > OBD_MAX_FIELDS) {
    rc = o3m_err_set(e, O3M_EPARSE, "%s:1: more than %d columns", path, OBD_MAX_FIELDS);
    goto fail;
  }
  for (int i = 0; i < o->n_fields; i++) {
    const char *h = o->fields[i];
    if (!strcmp(h, "item_id")) o->col_item = i;
    else if (!strcmp(h, "position")) o->col_pos = i;
    else if (!strcmp(h, "click")) o->col_click = i;
    else if (!strcmp(h, "propensity_score")) o->col_ps = i;
    else if (!strncmp(h, "user_feature_", 13)) {
      if (o->n_user == OBD_MAX_USER_COLS) {
        rc = o3m_err_set(e, O3M_EPARSE, "%s:1: more than %d user_feature columns", path,
                         OBD_MAX_USER_COLS);
        goto fail;
      }
      snprintf(o->user_name[o->n_user], OBD_MAX_COL_NAME, "%s", h);
      o->col_user[o->n_user++] = i;
    }
  }
  if (o->col_item < 0 || o->col_pos < 0 || o->col_click < 0) {
    rc = o3m_err_set(e, O3M_EPARSE, "%s:1: header lacks item_id, position or click", path);
    goto fail;
  }
  int d_item = 1;
  for (int c = 0; c < t.n_cat; c++) d_item += t.card[c];
  o->d_user = o->n_user * opt->user_buckets;
  r->K = t.K;
  r->d = o->d_user + d_item;
  if (r->d > 4096) {
    rc = o3m_err_set(e, O3M_ERANGE, "obd: context dimension %d exceeds 4096", r->d);
    goto fail;
  }
  size_t Kd = (size_t)r->K * r->d;
  r->X = malloc(sizeof(double) * Kd);
  r->C = calloc(Kd, sizeof(double));
  r->w = calloc((size_t)r->d, sizeof(double));
  o->vocab = malloc((size_t)o->d_user * (OBD_MAX_USER_VALUE + 1));
  o->vocab_hash = malloc(sizeof(uint64_t) * (size_t)o->d_user);
  if (!r->X || !r->C || !r->w || (o->d_user && (!o->vocab || !o->vocab_hash))) {
    rc = o3m_err_set(e, O3M_ENOMEM, "%s: out of memory", path);
    goto fail;
  }
  /* c_a = [0 ; scaled numeric ; one-hot categoricals]. */
  double lo = t.num[0], hi = t.num[0];
  for (int a = 1; a < t.K; a++) {
    if (t.num[a] < lo) lo = t.num[a];
    if (t.num[a] > hi) hi = t.num[a];
  }
  for (int a = 0; a < t.K; a++) {
    double *c = r->C + (size_t)a * r->d + o->d_user;
    c[0] = hi > lo ? (t.num[a] - lo) / (hi - lo) : 0.0;
    int off = 1;
    for (int k = 0; k < t.n_cat; k++) {
      c[off + t.cat_code[a * t.n_cat + k]] = 1.0;
      off += t.card[k];
    }
  }
  char pos[16] = "all";
  if (opt->position) snprintf(pos, sizeof pos, "%d", opt->position);
  snprintf(r->desc, sizeof r->desc,
           "obd: %d items as arms, position %s, context = [%d user one-hot (%d columns x %d "
           "slots, one per value) ; %d item features]", t.K, pos, o->d_user, o->n_user,
           opt->user_buckets, d_item);
  item_table_free(&t);
  *out = r;
  return O3M_OK;
fail:
  item_table_free(&t);
  eval_reader_destroy(r);
  return rc;
}
