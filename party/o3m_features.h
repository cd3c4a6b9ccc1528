/* o3m_features.h -- the feature tables of one participant.
 *
 * A participant's block x^j of the context for (user, item) is its user
 * columns followed by its item columns. Each comes from a CSV table keyed by
 * id; either table may be absent and then contributes no columns, and the two
 * widths must add up to the party's configured dims.
 *
 * File format: CSV as pandas and spreadsheets export it, cut into fields by
 * libcsv (Debian libcsv-dev) in strict mode. The first row is the header: the
 * id column, named exactly `user_id` in a user table and `item_id` in an item
 * table (so that swapped tables are caught), then at least one feature column
 * name (non-empty, distinct). Every further row is an id (1..O3M_MAX_ID
 * bytes, no NUL) and one decimal number per feature column in strtod syntax,
 * finite, no hex form. Accepted: fields in double quotes (a quoted id may
 * hold commas, line breaks and doubled quotes ""), spaces and tabs around
 * unquoted fields (trimmed; inside quotes they are kept, and a number with
 * them is refused), a UTF-8 byte order mark, LF or CRLF line ends, blank
 * lines (skipped), no final line end. Ragged rows, empty fields,
 * non-numbers, NaN/Inf, duplicate ids, a missing header and a table without
 * rows are each an O3M_EPARSE error naming the file and the line the row
 * begins on (and the column by name); malformed quoting (a quote inside an
 * unquoted field, text after a closing quote) names the file, line and
 * byte column ("t.csv:3:5: ..."); an unterminated quote names the line its
 * row begins on. Messages quote ids and column names but never the text of
 * a feature field, so that no raw feature value reaches a log.
 *
 * In memory each table is one contiguous row-major array of doubles plus an
 * open-addressing hash index (linear probing, load factor <= 1/2) from id to
 * row; lookups allocate nothing.
 *
 * Unknown ids. An id that a table does not hold still gets a row. By
 * default it is the table's column means: deterministic and needing no
 * secret, which is all the active participant (AP) and o3m-eval need,
 * because nobody else sees the rows they fill.
 *
 * Dummy rows, the passive participant's option. A PP's zeros or means
 * would tell the AP which users this party knows: the AP receives this
 * party's masked vector on its own, so one shared dummy (say the column
 * means) would give every unknown user the same vector, and a fresh random
 * dummy per request would give one user two different vectors; both reveal
 * who is unknown. So a PP passes its secret dummy-row key in explicitly
 * (o3m_features_set_dummy_key), and from then on the dummy row of an id is
 * deterministic per id and different across ids: it is mu + Sigma^{1/2} z,
 * with mu the table's column means, Sigma the (population) covariance of
 * its rows, Sigma^{1/2} = V diag(sqrt(lambda)) V^T its symmetric square
 * root (both computed once at load, linalg/o3m_moments.h; a singular table
 * is fine) and z a vector of standard normals from a generator seeded with
 * a keyed hash (SipHash-2-4, libsodium's crypto_shorthash: its 8 bytes
 * read little-endian) of the id under that 256-bit key, bytes 0..15 for the
 * user table and 16..31 for the item table. Without the
 * key, rows of different ids look like independent draws from N(mu, Sigma).
 *
 * Why the full covariance: the AP sees the part Q^j x^j of every
 * dummy, so the covariance of dummy parts is Q^j C Q^jT, C the dummies' own
 * covariance, and PCA of that traffic yields Q^j times the eigenvectors of
 * C. Dummies drawn column by column (the earlier construction)
 * have a diagonal C, whose eigenvectors are the coordinate axes: PCA on the
 * parts of a few thousand unknown ids handed the AP the columns of Q^j and
 * then every real row. Dummies with C = Sigma give it the eigenvectors of
 * Q^j Sigma Q^jT, exactly what PCA on real traffic gives, and nothing
 * more. Limits: only the first two moments match. Gaussian dummies have no
 * structure beyond them, so ICA (which needs non-Gaussian sources) learns
 * nothing from them that real rows do not show, but real rows with
 * discrete (0/1 flags), skewed or heavy-tailed columns differ from the
 * dummies in distribution, and an AP that sees a party's parts of many
 * users might tell dummies from real rows statistically and so learn which
 * ids this party knows. A dummy costs d_t^2 flops (d_t columns of the
 * table) instead of d_t.
 *
 * The o3m-passive daemon draws the key when it fetches its block and
 * stores it beside the block in its state_dir (o3m_party_block.h), so a
 * restarted party gives unknown ids the same dummies as before, provided
 * its table and its BLAS/LAPACK build are unchanged (Sigma^{1/2} depends
 * only on Sigma, not on how LAPACK picks eigenvectors, but another build
 * may round differently in the last bits); a party run without a state_dir
 * draws a new key at every start, and then a restart under the same mask
 * would show the AP exactly which ids' vectors changed. Once the party's
 * norm bound is set (o3m_features_check_norm) a dummy stays inside it: a
 * draw above the table's share of the bound is scaled radially onto it
 * (one draw per id, a fixed amount of work), so the dummy comes from
 * N(mu, Sigma) with the mass beyond the bound moved onto it; with a bound
 * far above the real rows (the default) that practically never happens.
 * Unknown lookups are counted either way.
 *
 * Timing. A lookup takes the same time whether or not
 * the table holds the id: fill computes the dummy of every id, known or
 * not, reads one row of the table for every id (the id's own, or for an
 * unknown id a decoy row its hash picks), and selects between the two
 * without a branch. What still differs: the hash probe (a string compare
 * on a hit, an empty slot on a miss; tens of nanoseconds against the
 * dummy's d_t^2 flops). Up to release 0.4.0 a dummy above the bound
 * was redrawn up to 32 times: those few dummies changed once (SECURITY.md,
 * "Unknown users").
 *
 * Whitening, a party's option (`whiten = true`, o3m_config.h). Even with
 * such dummies the AP can run PCA on a party's real
 * parts: their covariance Q^j Sigma Q^jT has the eigenvectors Q^j v, so a
 * party whose columns have distinct spreads shows the AP how its mask block
 * is oriented. o3m_features_whiten replaces every row x of each table by
 * W x, with W = V diag(w) V^T the table's symmetric inverse square root of
 * Sigma (ZCA; w_i = 1/sqrt(lambda_i), and 1 for eigenvalues at or below
 * O3M_MOMENTS_RTOL times the largest, so W stays invertible). The whitened
 * rows have identity covariance on the table's varying directions, so
 * their parts Q^j W x have covariance Q^j Q^jT: isotropic in the party's
 * subspace, and PCA cannot single out one column. W is computed from the
 * party's own table at start-up, used once on its rows and wiped; it is
 * never written anywhere nor sent. There is no centering: x -> W x stays
 * linear, so a linear reward model theta^T x = (W^{-1} theta)^T (W x) is
 * still representable. What it changes: the federation is then lossless
 * with respect to the whitened features, that is, its decisions equal a
 * central learner's on W x, not on the raw x; LinUCB's ridge penalty
 * lambda ||theta||^2 is not invariant under a non-orthogonal W, so the
 * regret changes (docs/evaluation/whitening.md). It does not hide
 * everything: independent non-Gaussian columns stay independent
 * non-Gaussian sources after whitening, and ICA can still separate them
 * (up to sign and order). Whitening scales up the mean along directions of
 * small spread (no centering), so a column that barely varies around a
 * large value gives large whitened values: the norm bound then applies to
 * the whitened rows and may need raising. The dummies are drawn from the
 * whitened table's moments.
 *
 * Threads: after o3m_features_load the tables are read-only; only the stats
 * counters change, and they are C11 atomics, so any number of threads may call
 * o3m_features_fill on one handle at once. Load and destroy are not concurrent
 * with anything. */
#ifndef O3M_FEATURES_H
#define O3M_FEATURES_H

#include <limits.h>
#include <stdatomic.h>
#include <stdint.h>

#include "o3m_config.h"
#include "o3m_error.h"
#include "o3m_limits.h"

/* Size of the dummy-row key (o3m_features_set_dummy_key). */
#define O3M_FEATURES_KEY_BYTES 32
/* Most feature columns of one table: a table never holds more columns than
 * the largest context dimension (o3m_limits.h). Ids are at most O3M_MAX_ID. */
#define O3M_FEATURES_MAX_COLS O3M_MAX_DIM
/* Most rows of one table. */
#define O3M_FEATURES_MAX_ROWS O3M_MAX_TABLE_ROWS

typedef struct o3m_features o3m_features;

typedef enum o3m_features_kind {
  O3M_FEATURES_USERS = 1, /* header starts with user_id */
  O3M_FEATURES_ITEMS = 2  /* header starts with item_id */
} o3m_features_kind;

/* Counters since load. lookups counts o3m_features_fill calls that succeeded;
 * item_lookups the item ids they looked up. unknown_users counts fills whose
 * user was not in the user table (only when there is one); unknown_items the
 * item ids not in the item table (only when there is one). */
typedef struct o3m_features_stats {
  uint64_t lookups;
  uint64_t item_lookups;
  uint64_t unknown_users;
  uint64_t unknown_items;
} o3m_features_stats;

/* Loads the user table and/or the item table (NULL for an absent one; not
 * both) and checks that their feature columns add up to expected_dims
 * (>= 1), else O3M_EDIM. On success *out owns everything; the caller frees it
 * with o3m_features_destroy. On failure *out is NULL, nothing is leaked and e
 * names the file and line. O3M_EIO when a file cannot be read. Unknown
 * ids get the column means until o3m_features_set_dummy_key. */
int o3m_features_load(o3m_features **out, const char *user_csv,
                     const char *item_csv, int expected_dims, o3m_err *e);

/* How o3m_features_load_with reads a table file. The path is opened
 * (O_NONBLOCK, so that a FIFO does not wait for a writer) and the
 * descriptor, not the path, must be a regular file: a FIFO, a device
 * (/dev/zero), a directory or a socket is refused with O3M_EINVAL naming
 * the path and what it is. The file is read up to max_bytes: a size above
 * it (st_size) is refused before a byte is read, and so is a file that
 * turns out longer while it is read (it grew, or it reports size 0 like a
 * /proc file), with O3M_ERANGE naming limit_key. stop, when set, ends a
 * read between two blocks with O3M_ESTATE (a daemon's shutdown). */
typedef struct o3m_features_read {
  uint64_t max_bytes;     /* 0: O3M_DEFAULT_TABLE_BYTES_MAX */
  const char *limit_key;  /* the setting to raise, for messages; NULL: "table_bytes_max" */
  const atomic_int *stop; /* NULL: none */
} o3m_features_read;

/* o3m_features_load with rd's checks of the files (rd NULL: the defaults,
 * which o3m_features_load uses). */
int o3m_features_load_with(o3m_features **out, const char *user_csv, const char *item_csv,
                           int expected_dims, const o3m_features_read *rd, o3m_err *e);

/* NULL is accepted. The key is wiped. */
void o3m_features_destroy(o3m_features *f);

/* Whitens both tables in place (see "Whitening" above): every row x of a
 * table becomes W x, W the table's own whitening map, and the norm bound
 * and the dummies then apply to the whitened rows. Order: after
 * o3m_features_load and before o3m_features_check_norm (O3M_ESTATE after
 * it, or on a second call) and before any o3m_features_fill; the dummy key
 * may be set before or after. O3M_ENONFINITE when a table's covariance
 * overflows (values beyond about 1e154), O3M_ENOMEM; e names the table.
 * On failure the tables may be partly transformed and the handle is fit
 * only for o3m_features_destroy. Not concurrent with anything. */
int o3m_features_whiten(o3m_features *f, o3m_err *e);

/* Turns on the dummy rows of unknown ids (see "Dummy rows" above) under key
 * (copied; bytes 0..15 key the user table, 16..31 the item table), or
 * replaces the key set before, and keys the epochs with it
 * (o3m_features_epoch). Two handles with the same key and tables give the
 * same dummies and epochs, which tests rely on; the PP calls it with the key
 * it stores beside its block. The key must never leave the party: an AP
 * that learned it could recompute the dummies and so recognize unknown ids.
 * The key is wiped by o3m_features_destroy. Not concurrent with
 * o3m_features_fill. */
void o3m_features_set_dummy_key(o3m_features *f, const unsigned char key[O3M_FEATURES_KEY_BYTES]);

/* dims = user columns + item columns. */
int o3m_features_dims(const o3m_features *f);
int o3m_features_user_cols(const o3m_features *f);
int o3m_features_item_cols(const o3m_features *f);
/* Rows of each table (0 for an absent table). */
int o3m_features_n_users(const o3m_features *f);
int o3m_features_n_items(const o3m_features *f);

/* The epoch of the user or the item table: a nonzero 64-bit value computed
 * by o3m_features_load (and again by o3m_features_whiten and
 * o3m_features_set_dummy_key) from the table's content, the first 8 bytes
 * of a BLAKE2b hash (libsodium crypto_generichash) of its column names,
 * ids and values as the party masks them. Two loads of the same content
 * under the same key have the same epoch, and a table whose content
 * changed gets another one (but for a 2^-64 chance), so a reload needs
 * nothing more to announce its new tables. An absent table has a fixed
 * epoch of its own. The active participant keys its cache of masked item
 * parts on the passive parties' item epochs (MaskBatchReply).
 *
 * Keyed. Once the party's key is set (o3m_features_set_dummy_key) the hash
 * is keyed with a subkey derived from it (crypto_kdf, context "o3mepoch"),
 * so the epoch a passive party sends tells the AP only whether a table
 * changed: an unkeyed hash would let it confirm a guess of a whole
 * low-entropy table (a few known ids, 0/1 columns) by hashing the guess.
 * The subkey is derived for each computation and wiped. A party keeps its
 * key beside its block in state_dir, so its epochs survive a restart with
 * the same table; one run without a state_dir draws a new key per start,
 * and then its epochs change at every restart (the AP drops its item
 * cache once). Without a key (the AP's own tables, o3m-eval, which show
 * nobody their epochs) the hash is unkeyed. */
uint64_t o3m_features_epoch(const o3m_features *f, o3m_features_kind which);

/* The id of row `row` (0-based, in file order) of the user or item table, as
 * the CSV reading gave it (quotes removed, surrounding blanks trimmed), or
 * NULL when there is no such table or row. Owned by f. */
const char *o3m_features_row_id(const o3m_features *f, o3m_features_kind which, int row);

/* The row of id in the user or item table (0-based), -1 when the table
 * does not hold it (or id is NULL), -2 when there is no such table. For the
 * active party, which may tell its operator what its own tables lack
 * (active_participant/ap_round.h "Unknown ids"); unlike fill, its time
 * depends on whether the id is known, so a passive party never calls it on
 * a query. */
int o3m_features_find(const o3m_features *f, o3m_features_kind which, const char *id);

/* The name of feature column c (0-based, header order, the id column not
 * counted) of the user or item table, or NULL. Owned by f. */
const char *o3m_features_column(const o3m_features *f, o3m_features_kind which, int c);

/* Writes the blocks of K candidates into X (K x dims, row-major): row k is
 * [user columns of user_id, item columns of item_ids[k]]. An id not in its
 * table gets the column means, or its dummy row once a dummy-row key is set
 * (see above). user_id may be NULL only
 * when there is no user table, item_ids only when there is no item table (the
 * ids are then ignored). If not NULL, *unknown_user is set to 1 when the user
 * was looked up and not found (else 0) and *unknown_items to the number of
 * item ids not found. Errors: O3M_EINVAL for K < 1 or a missing pointer; X
 * is then untouched and nothing is counted. Allocates nothing; thread-safe
 * as described above. */
int o3m_features_fill(o3m_features *f, const char *user_id, int K,
                     const char *const *item_ids, double *X,
                     int *unknown_user, int *unknown_items);

/* The halves of o3m_features_fill, for the factored MaskBatch (protocol 6):
 * a block x = [u, i] splits as [u, 0] + [0, i], and so does its masked
 * part. o3m_features_fill_user writes one row of dims values into x, the
 * user's columns (its row or its dummy, with the same-work lookup of
 * o3m_features_fill) then zeros; with no user table it writes zeros and
 * looks nothing up (user_id may then be NULL). It counts one lookup and,
 * unknown, one unknown user. o3m_features_fill_items writes K >= 0 rows
 * into X (K x dims): zeros then item ids[k]'s columns (row or dummy, same
 * work); with no item table zeros and no lookup. It counts K item lookups
 * and the unknown ones. O3M_EINVAL for a missing pointer (X untouched,
 * nothing counted). Allocate nothing; thread-safe as o3m_features_fill. */
int o3m_features_fill_user(o3m_features *f, const char *user_id, double *x);
int o3m_features_fill_items(o3m_features *f, int K, const char *const *item_ids, double *X);

/* o3m_features_fill_items that also tells, from the same lookups, which
 * ids the item table holds: known[k] (K bytes) is 1 when item_ids[k] is in
 * it (or there is no item table), else 0. For the active party, whose item
 * parts are cached with that flag so that its unknown-id counts need no
 * second lookup (active_participant/ap_round.h "Unknown ids"); like
 * o3m_features_find, never for a passive party's queries. */
int o3m_features_fill_items_known(o3m_features *f, int K, const char *const *item_ids,
                                  double *X, unsigned char *known);

/* Checks that every block this party can produce, its user row (or dummy)
 * followed by its item row (or dummy), has an l2 norm of at most max_norm
 * (> 0, finite): the party's bound of the config (o3m_config.h, "Bounded
 * contexts"). The worst real block pairs the largest row of each table;
 * the room left below the bound is split between the two tables' dummy
 * rows, which from then on are scaled onto their share when drawn longer
 * (see "Dummy rows" above), so every block stays inside the bound. O3M_ERANGE
 * when the tables exceed it: the message names the file and line of the
 * larger of the two rows and the other one's, never a value or a norm;
 * the dummies are then unchanged. O3M_EINVAL for bad arguments. Not
 * concurrent with o3m_features_fill. */
int o3m_features_check_norm(o3m_features *f, double max_norm, o3m_err *e);

/* A consistent-enough snapshot of the counters (each is read atomically). */
void o3m_features_stats_get(const o3m_features *f, o3m_features_stats *out);

#endif
