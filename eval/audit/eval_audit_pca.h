/* eval_audit_pca.h -- the linear algebra of the audit's attacks (not for
 * callers): least squares, PCA, FastICA and the matching of recovered
 * components to the true columns. Each function returns O3M_OK or an
 * o3m_error code; the comments at the definitions say what each computes. */
#ifndef EVAL_AUDIT_PCA_H
#define EVAL_AUDIT_PCA_H

#include "o3m_rng.h"

/* The basis an attacker learns from training observations (n x p): the
 * mean, the top k eigenvectors V (p x k, as columns) and their eigenvalues,
 * largest first. */
typedef struct eval_audit_basis {
  int p, k;
  double *mean; /* p */
  double *V;    /* p x k */
  double *lam;  /* k */
} eval_audit_basis;

int eval_audit_lstsq(int m, int n, int nrhs, double *A, double *B);
void eval_audit_standardize(int n, int c, double *A, unsigned char *flag);
void eval_audit_basis_free(eval_audit_basis *b);
int eval_audit_pca_fit(eval_audit_basis *b, int n, int p, const double *Tr, int want);
int eval_audit_project(const eval_audit_basis *b, int n, const double *A, double *Out);
int eval_audit_fastica(int n, int k, const double *Z, int max_iter, o3m_rng *rng, double *W);
int eval_audit_score(int N, int dj, const double *Tn, const unsigned char *cflag, double *R,
                     int k, int match, double *corr);

#endif
