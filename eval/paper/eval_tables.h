/* eval_tables.h -- synthetic feature tables for demos, tests and o3m-eval.
 *
 * Writes a table in the format of party/o3m_features.h whose features are
 * standard normal draws that depend only on a seed, so that a demo, an
 * end-to-end test and an evaluation run can each build the same federation
 * of tables. Moved here from the feature-table module, which only reads
 * tables. Not thread-safe with respect to the same path. */
#ifndef EVAL_TABLES_H
#define EVAL_TABLES_H

#include <stdint.h>

#include "o3m_error.h"
#include "o3m_features.h"

/* Writes a valid table of n_rows (1..O3M_FEATURES_MAX_ROWS) rows and n_cols
 * (1..O3M_FEATURES_MAX_COLS) standard normal features to path: header
 * `user_id` or `item_id` (by kind) then x0..x{n_cols-1}; ids
 * id_prefix0 .. id_prefix{n_rows-1}; values printed with 17 significant
 * digits, so they load back bit for bit. The draws come from a splitmix64
 * stream (o3m_splitmix.h) and depend only on seed. Errors: O3M_EINVAL
 * (arguments, an id prefix with a comma or line break or too long for
 * O3M_MAX_ID), O3M_EIO (the message names the file); a partly
 * written file is removed on failure. */
int eval_tables_write_synthetic(const char *path, o3m_features_kind kind,
                                const char *id_prefix, int n_rows, int n_cols,
                                uint64_t seed, o3m_err *e);

/* Writes n_rows x n_cols values (row-major, each finite, else
 * O3M_ENONFINITE) as a table: header as above but with the column names
 * given (NULL: x0, x1, ...; names must be valid header fields), ids
 * id_prefix0 ..; 17 significant digits. Other errors as above. Used by
 * `o3m-eval audit` to turn data-set columns into a party's table. */
int eval_tables_write_matrix(const char *path, o3m_features_kind kind, const char *id_prefix,
                             int n_rows, int n_cols, const char *const *names,
                             const double *vals, o3m_err *e);

/* The bank-like user table of the audit demo (`o3m-eval audit --bank`):
 * EVAL_TABLES_BANK_COLS columns of very different scales (age in years,
 * income and balances in currency units up to 1e5-1e6, a credit score in
 * 300..850, counts, a 0..1 utilization, a mortgage that is 0 for most
 * customers), several correlated through three latent factors (age,
 * wealth, risk), with rounding as a bank's records have it. Depends on
 * seed alone. Errors as above. */
#define EVAL_TABLES_BANK_COLS 20
extern const char *const eval_tables_bank_columns[EVAL_TABLES_BANK_COLS];
int eval_tables_write_bank(const char *path, const char *id_prefix, int n_rows, uint64_t seed,
                           o3m_err *e);

#endif
