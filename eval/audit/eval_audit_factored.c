/* eval_audit_factored.c -- see eval_audit_factored.h.
 *
 * Each half is audited as an input of its own: the same rows with the other
 * half's columns zero (what a party answers for a half it has no columns
 * of), or for the differenced view shifted by a reference row, and the
 * truth cut to the audited party's columns of that half; then
 * eval_audit_run plays every attack on it, every mode in one call with each
 * mode's known-row counts taken from the whole rows. The halves' per-column
 * figures are put back in the audited party's column order. */
#include "eval_audit_factored.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "eval_audit_impl.h"

/* The two views of the halves: the AP's under factored batches, and what
 * it already computes from whole rows by differencing candidates. */
enum { FACTORED = 0, DIFFERENCED = 1, N_VIEWS = 2 };

struct eval_audit_factored {
  eval_audit *merged[N_VIEWS];
  /* [view][half]: the run on one half (NULL: no columns of it). */
  eval_audit *half[N_VIEWS][2];
  int *hcol;       /* dj: the audited column's index within its half */
  int n_cols[2];   /* the audited party's user and item columns */
  int all_cols[2]; /* every PP's user and item columns */
  int party0;      /* offset of the audited party's first column */
};

void eval_audit__keep_half(const eval_audit_input *in, int n, double *R) {
  const int d = in->part.d, want_item = in->half == AUDIT_ITEM_HALF;
  for (int c = 0; c < d; c++) {
    int own = in->item_col[c] == want_item;
    for (int i = 0; i < n; i++) {
      double *r = R + (size_t)i * d + c;
      if (!own)
        *r = in->ref && !want_item ? in->ref[c] : 0; /* U(u) + I(i0), or 0 */
      else if (in->ref && want_item)
        *r -= in->ref[c]; /* I(i) - I(i0) */
    }
  }
}

/* The input of one half: rows turned by eval_audit__keep_half (with audited
 * row 0 as the reference when differenced), the truth and the names cut to
 * the audited party's nh columns cols of this half. */
static int half_input(eval_audit_input **out, const eval_audit_input *in, audit_half h,
                      int differenced, const int *cols, int nh, o3m_err *e) {
  const int N = in->N, d = in->part.d;
  eval_audit_input *o = calloc(1, sizeof *o);
  if (!o) return o3m_err_set(e, O3M_ENOMEM, "out of memory");
  *o = *in;
  o->dj = nh;
  o->half = h;
  o->borrowed = 1;
  o->X = malloc(sizeof *o->X * (size_t)N * d);
  o->T = malloc(sizeof *o->T * (size_t)N * nh);
  o->names = malloc(sizeof *o->names * (size_t)nh);
  o->item_col = malloc((size_t)d);
  /* The reference row of the differenced view: audited row 0. */
  o->ref = differenced ? malloc(sizeof *o->ref * (size_t)d) : NULL;
  if (!o->X || !o->T || !o->names || !o->item_col || (differenced && !o->ref)) {
    eval_audit_input_destroy(o);
    return o3m_err_set(e, O3M_ENOMEM, "out of memory");
  }
  memcpy(o->item_col, in->item_col, (size_t)d);
  if (o->ref) memcpy(o->ref, in->X, sizeof *o->ref * (size_t)d);
  memcpy(o->X, in->X, sizeof *o->X * (size_t)N * d);
  eval_audit__keep_half(o, N, o->X);
  for (int i = 0; i < N; i++)
    for (int c = 0; c < nh; c++) o->T[(size_t)i * nh + c] = in->T[(size_t)i * in->dj + cols[c]];
  for (int c = 0; c < nh; c++) o->names[c] = in->names[cols[c]];
  *out = o;
  return O3M_OK;
}

void eval_audit_factored_destroy(eval_audit_factored *f) {
  if (!f) return;
  for (int v = 0; v < N_VIEWS; v++) {
    eval_audit_destroy(f->merged[v]);
    for (int h = 0; h < 2; h++) eval_audit_destroy(f->half[v][h]);
  }
  free(f->hcol);
  free(f);
}

/* Point x of series s of one half's run, or NULL. */
static const double *half_corr(const eval_audit *h, eval_audit_mode m, eval_audit_series s,
                               int x) {
  eval_audit_point p;
  for (int i = 0; h && i < eval_audit_n_points(h, m, s); i++)
    if (!eval_audit_point_get(h, m, s, i, &p) && p.x == x) return p.corr;
  return NULL;
}

/* The merged result: whole's points, each column's figure from its half. */
static int merge(eval_audit_factored *f, int v, const eval_audit_input *in,
                 const eval_audit *whole, const eval_audit_config *c) {
  eval_audit *a = calloc(1, sizeof *a);
  if (!a) return O3M_ENOMEM;
  f->merged[v] = a;
  *a = *whole;
  memset(a->s, 0, sizeof a->s);
  memset(a->ex, 0, sizeof a->ex);
  a->c = *c;
  a->tag = v == FACTORED ? "audit_factored" : "audit_differenced";
  for (int m = 0; m < EVAL_AUDIT_N_MODES; m++)
    for (int s = 0; s < EVAL_AUDIT_N_SERIES; s++) {
      const series *W = &whole->s[m][s];
      series *S = &a->s[m][s];
      if (!W->n) continue;
      S->x = malloc(sizeof *S->x * (size_t)W->n);
      S->corr = malloc(sizeof *S->corr * (size_t)W->n * a->dj);
      if (!S->x || !S->corr) return O3M_ENOMEM;
      for (int i = 0; i < W->n; i++, S->n++) {
        S->x[i] = W->x[i];
        for (int col = 0; col < a->dj; col++) {
          int h = in->item_col[f->party0 + col];
          const double *hc = half_corr(f->half[v][h], m, s, W->x[i]);
          S->corr[(size_t)i * a->dj + col] = hc ? hc[f->hcol[col]] : NAN;
        }
      }
    }
  return O3M_OK;
}

int eval_audit_factored_run(eval_audit_factored **out, const eval_audit_input *in,
                            const eval_audit *whole, const eval_audit_config *c, o3m_err *e) {
  o3m_err local;
  if (!e) e = &local;
  o3m_err_clear(e);
  *out = NULL;
  const int dj = in->dj, d = in->part.d, d0 = in->part.dims[0];
  eval_audit_factored *f = calloc(1, sizeof *f);
  int *cols[2] = {malloc(sizeof(int) * (size_t)dj), malloc(sizeof(int) * (size_t)dj)};
  int *kp[EVAL_AUDIT_N_MODES];
  int kp_ok = 1;
  for (int m = 0; m < EVAL_AUDIT_N_MODES; m++)
    kp_ok &= !!(kp[m] = malloc(sizeof *kp[m] * (size_t)(in->N + 1)));
  int rc = O3M_ENOMEM;
  if (!f || !cols[0] || !cols[1] || !kp_ok || !(f->hcol = malloc(sizeof *f->hcol * (size_t)dj)))
    goto out;
  f->party0 = in->part.offset[in->party];
  for (int col = 0; col < dj; col++) {
    int h = in->item_col[f->party0 + col];
    f->hcol[col] = f->n_cols[h];
    cols[h][f->n_cols[h]++] = col;
  }
  for (int col = d0; col < d; col++) f->all_cols[in->item_col[col]]++;
  for (int v = 0; v < N_VIEWS; v++) {
    for (int h = 0; h < 2; h++) {
      if (!f->n_cols[h]) continue;
      eval_audit_input *hin = NULL;
      if ((rc = half_input(&hin, in, h ? AUDIT_ITEM_HALF : AUDIT_USER_HALF, v == DIFFERENCED,
                           cols[h], f->n_cols[h], e)))
        goto out;
      /* All modes in one run, as the whole rows' were, so that a half
       * equal to the whole rows (no columns of the other half anywhere)
       * draws the same Gram pairs and ICA starts and gives the same
       * figures. */
      eval_audit_config hc = *c;
      hc.modes = whole->ran;
      for (int m = 0; m < EVAL_AUDIT_N_MODES; m++) {
        eval_audit_point p;
        int np = eval_audit_n_points(whole, m, EVAL_AUDIT_KP);
        for (int i = 0; i < np; i++)
          kp[m][i] = eval_audit_point_get(whole, m, EVAL_AUDIT_KP, i, &p) ? 1 : p.x;
        hc.kp_points[m] = kp[m];
        hc.n_kp_points[m] = np;
      }
      rc = eval_audit_run(&f->half[v][h], hin, &hc, e);
      eval_audit_input_destroy(hin);
      if (rc) goto out;
    }
    if ((rc = merge(f, v, in, whole, c))) goto out;
  }
out:
  free(cols[0]);
  free(cols[1]);
  for (int m = 0; m < EVAL_AUDIT_N_MODES; m++) free(kp[m]);
  if (rc) {
    if (!e->code) o3m_err_set(e, rc, "audit, factored: %s", o3m_strerror(rc));
    eval_audit_factored_destroy(f);
    return rc;
  }
  *out = f;
  return O3M_OK;
}

const eval_audit *eval_audit_factored_result(const eval_audit_factored *f, int differenced) {
  return f->merged[differenced ? DIFFERENCED : FACTORED];
}

int eval_audit_factored_columns(const eval_audit_factored *f, int item, int all_pps) {
  return all_pps ? f->all_cols[!!item] : f->n_cols[!!item];
}

int eval_audit_factored_exposure(const eval_audit_factored *f, int differenced,
                                 eval_audit_mode m, int item, eval_audit_exposure *out) {
  const int v = differenced ? DIFFERENCED : FACTORED;
  if ((unsigned)m >= EVAL_AUDIT_N_MODES || !f->half[v][!!item]) return O3M_EINVAL;
  return eval_audit_exposure_get(f->half[v][!!item], m, out);
}

/* "0.570 (0.00-1.00)" of series s at point i of a, or blanks. */
static void fmt(const eval_audit *a, eval_audit_mode m, eval_audit_series s, int i, char *buf,
                size_t n) {
  eval_audit_point p;
  if (eval_audit_point_get(a, m, s, i, &p))
    snprintf(buf, n, "%s", "");
  else
    snprintf(buf, n, "%.3f (%.2f-%.2f)", p.mean, p.min, p.max);
}

static void fmt_exposure(const eval_audit_exposure *x, char *buf, size_t n) {
  if (x->exact)
    snprintf(buf, n, "EXACT (%.0e / %.0e)", x->norm, x->gram);
  else
    snprintf(buf, n, "%.3f / %.3f", x->norm, x->gram);
}

void eval_audit_factored_print(const eval_audit_factored *f, const eval_audit *whole,
                               FILE *out) {
  fprintf(out, "\n== factored batches (protocol 6): the AP sees U(u) = sum Q^k_U u^k and "
               "I(i) = sum Q^k_I i^k apart\n"
               "your columns: %d user, %d item; every PP's: %d user, %d item\n"
               "whole rows: one context per user (above); differenced: U(u) + I(i0) and "
               "I(i) - I(i0), what\n  the AP computes from whole rows of every user's "
               "candidates (i0: one item they share);\n  factored: U(u) and I(i) themselves\n",
          f->n_cols[0], f->n_cols[1], f->all_cols[0], f->all_cols[1]);
  for (int m = 0; m < EVAL_AUDIT_N_MODES; m++) {
    if (!(whole->ran & (1 << m))) continue;
    eval_audit_exposure x;
    char c[3][48];
    eval_audit_exposure_get(whole, m, &x);
    fmt_exposure(&x, c[0], sizeof c[0]);
    fprintf(out, "\n-- mode %s\nnorms / Gram: whole rows %s\n", eval_audit_mode_name(m), c[0]);
    for (int v = 0; v < N_VIEWS; v++)
      for (int h = 0; h < 2; h++)
        if (!eval_audit_factored_exposure(f, v, m, h, &x)) {
          fmt_exposure(&x, c[0], sizeof c[0]);
          fprintf(out, "  %s, %s half: %s\n", v == FACTORED ? "factored" : "differenced",
                  h ? "item" : "user", c[0]);
        }
    fprintf(out, "%-10s %6s  %-22s  %-22s  %-22s\n", "attack", "n|N", "whole rows",
            "differenced", "factored");
    for (int s = 0; s < EVAL_AUDIT_N_SERIES; s++)
      for (int i = 0; i < eval_audit_n_points(whole, m, s); i++) {
        eval_audit_point p;
        eval_audit_point_get(whole, m, s, i, &p);
        fmt(whole, m, s, i, c[0], sizeof c[0]);
        fmt(f->merged[DIFFERENCED], m, s, i, c[1], sizeof c[1]);
        fmt(f->merged[FACTORED], m, s, i, c[2], sizeof c[2]);
        fprintf(out, "%-10s %6d  %-22s  %-22s  %-22s\n", eval_audit_series_name(s), p.x, c[0],
                c[1], c[2]);
      }
  }
  fprintf(out, "\nfactored and differenced: your user columns are attacked from the user "
               "halves alone, your\n  item columns from the item halves alone; what the "
               "split adds is factored minus differenced:\n  the common offset I(i0), one "
               "d-vector per mask.\n");
}

int eval_audit_factored_write_csv(const eval_audit_factored *f, const eval_audit_input *in,
                                  const char *dir, o3m_err *e) {
  int rc = O3M_OK;
  for (int v = 0; !rc && v < N_VIEWS; v++) rc = eval_audit_write_csv(f->merged[v], in, dir, e);
  return rc;
}
