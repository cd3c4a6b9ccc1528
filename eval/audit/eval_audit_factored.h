/* eval_audit_factored.h -- `o3m-eval audit --factored`: the same attacks as
 * eval_audit.h under factored batches (protocol 6), beside the
 * whole-row figures.
 *
 * Under factored batches a party's part splits into its user half and its
 * item half, Q^k x^k = Q^k_U u^k + Q^k_I i^k (user columns are the party's
 * user table's, item columns its item table's, or a data set's arm part),
 * and the AP receives the halves' sums apart: U(u) = sum_k Q^k_U u^k per
 * user and I(i) = sum_k Q^k_I i^k per item (each party's halves alone in
 * per-party mode). So for audited row r (user r, item r mod n_items) the
 * attacker holds U(u_r) and I(i_r) instead of only their sum. It attacks
 * each half with what that half shows: the audited party's user columns
 * from the U vectors, its item columns from the I vectors (known plaintext
 * with n known rows, with n full rows of every PP, PCA, FastICA, the same on
 * dummy rows whose other half is zero, norms and Gram of each half). The
 * per-column figures are put back together into a result of eval_audit's
 * shape, at the same known-row counts and N as the whole-row result, so the
 * two stand side by side. A party (or a whole side) with no columns of one
 * half answers zeros for it, as the daemons do.
 *
 * What the split adds to what the AP could compute before: the differences
 * U(u) - U(u') and I(i) - I(i') came already from the sums (two users on one
 * item, two items of one user); the split reveals the common offset, one
 * d-vector per mask, and with it each half on its own. Where only one PP has
 * columns of a half (OBD with --dims 32,32,28: party 1 holds every PP user
 * column) that half's sum is that party's part alone, and secure
 * aggregation no longer hides it: the figures show it. */
#ifndef EVAL_AUDIT_FACTORED_H
#define EVAL_AUDIT_FACTORED_H

#include <stdio.h>

#include "eval_audit.h"

typedef struct eval_audit_factored eval_audit_factored;

/* Runs every attack of the modes whole ran, on each half the audited party
 * has columns of, with c's settings and whole's known-row counts. On
 * failure *out is NULL. */
int eval_audit_factored_run(eval_audit_factored **out, const eval_audit_input *in,
                            const eval_audit *whole, const eval_audit_config *c, o3m_err *e);
void eval_audit_factored_destroy(eval_audit_factored *f);

/* The factored figures (differenced = 0), or those of the halves the AP
 * computes from whole rows by differencing every user's candidates
 * (differenced = 1: U(u) + I(i0) and I(i) - I(i0), i0 the item of audited
 * row 0), in eval_audit's shape (series, points, per column); its exposure
 * is undefined: ask the halves. Valid while f lives. */
const eval_audit *eval_audit_factored_result(const eval_audit_factored *f, int differenced);
/* The audited party's user (item = 0) or item (item = 1) columns, or every
 * PP's (all_pps = 1). */
int eval_audit_factored_columns(const eval_audit_factored *f, int item, int all_pps);
/* Norms and Gram of one half of one view (its vectors against the audited
 * party's columns of that half), or O3M_EINVAL when it has none. */
int eval_audit_factored_exposure(const eval_audit_factored *f, int differenced,
                                 eval_audit_mode m, int item, eval_audit_exposure *out);

/* Per mode, whole rows, differenced and factored side by side: the
 * exposure of each half and every series' points. */
void eval_audit_factored_print(const eval_audit_factored *f, const eval_audit *whole,
                               FILE *out);
/* DIR/audit_factored_<mode>_<series>.csv and audit_differenced_..., as
 * eval_audit_write_csv. */
int eval_audit_factored_write_csv(const eval_audit_factored *f, const eval_audit_input *in,
                                  const char *dir, o3m_err *e);

#endif
