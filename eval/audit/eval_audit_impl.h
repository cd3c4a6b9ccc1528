/* eval_audit_impl.h -- what the audit's files share (not for callers): the
 * input and the result, so that the input, the attacks and the writers each
 * have a file, and the factored mode (eval_audit_factored.c) can run the
 * same attacks on one half of every row and put the halves' figures back
 * together in a result of the same shape. */
#ifndef EVAL_AUDIT_IMPL_H
#define EVAL_AUDIT_IMPL_H

#include "eval_audit.h"

/* Pairs of users sampled for the Gram exposure. */
#define GRAM_PAIRS 4000

/* The ids of one table file, in file order (at most cap, 0: all). */
typedef struct id_list {
  int n;
  char **ids;
} id_list;

/* One passive participant: its tables and their ids. */
typedef struct pp_tables {
  o3m_features *f;
  id_list users, items;
} pp_tables;

/* Which columns of a row an input keeps (eval_audit_factored.c): all of
 * them, or only the user half or only the item half, the other half being
 * zero as the party's answer is for a half it has no columns for. */
typedef enum { AUDIT_WHOLE = 0, AUDIT_USER_HALF = 1, AUDIT_ITEM_HALF = 2 } audit_half;

struct eval_audit_input {
  o3m_partition part;
  int party, N, dj;
  double *X;  /* N x d: the rows every party sends (party 0: the AP's own) */
  double *T;  /* N x d_j: the audited party's raw columns, the truth */
  pp_tables *pp; /* part.m entries; [0] unused */
  char **names;  /* d_j column names */
  int whitened;    /* the party whitens (o3m_features_whiten) */
  int sends_truth; /* 1: the party's part is Q^j T (it does not whiten, or T is W x) */
  /* d flags: 1 for a column of some party's item half (its item table, or
   * a data set's arm part), 0 for a user column. */
  unsigned char *item_col;
  audit_half half; /* AUDIT_WHOLE unless made by eval_audit_factored.c */
  /* NULL, or (a half input) the d columns of a reference row whose item
   * half stands in for the common offset the AP does not know without the
   * split (see eval_audit__keep_half). */
  double *ref;
  int borrowed;    /* 1: pp and names belong to the whole input */
};

typedef struct series {
  int n;
  int *x;
  double *corr; /* n x dj */
} series;

struct eval_audit {
  int dj, d, d0, D, N, Nd, ran;
  series s[EVAL_AUDIT_N_MODES][EVAL_AUDIT_N_SERIES];
  eval_audit_exposure ex[EVAL_AUDIT_N_MODES];
  eval_audit_config c;
  const char *tag; /* the CSV files' prefix: "audit" or "audit_factored" */
};

/* Turns n whole rows R (n x d) into what a half input's attacker sees a
 * linear image of. Without ref, the factored halves: the other half's
 * columns zero (U(u), or I(i)). With ref, the halves the AP already
 * computes from whole rows by differencing candidates: a user's row with a
 * reference item i0, U(u) + I(i0) (the item columns are ref's), and one
 * item's difference to it, I(i) - I(i0) (ref's item columns subtracted,
 * the user columns zero). */
void eval_audit__keep_half(const eval_audit_input *in, int n, double *R);

#endif
