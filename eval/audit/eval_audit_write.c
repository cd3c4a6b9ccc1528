/* eval_audit_write.c -- the audit's writers (eval_audit.h): the tables on
 * stdout, the CSVs and the gnuplot scripts. */
#include "eval_audit_impl.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "eval_plot.h"
#include "eval_regret.h"

static const char *series_x(eval_audit_series s) { return s <= EVAL_AUDIT_KP_FULL ? "n" : "N"; }

static const char *mode_what(eval_audit_mode m) {
  switch (m) {
    case EVAL_AUDIT_PER_PARTY: return "the AP sees the audited party's part Q^j x^j alone";
    case EVAL_AUDIT_SECAGG: return "the AP sees only s = sum over PPs of Q^k x^k";
    default: return "s, plus the AP's own block Q^0 and own columns x^0";
  }
}

/* "0.570 (0.00-1.00)" of point i of a series, or blanks. */
static void cell(const eval_audit *a, int m, int s, int i, char *buf, size_t n) {
  eval_audit_point pt;
  if (eval_audit_point_get(a, m, s, i, &pt))
    snprintf(buf, n, "%s", "");
  else
    snprintf(buf, n, "%.3f (%.2f-%.2f)", pt.mean, pt.min, pt.max);
}

void eval_audit_print(const eval_audit *a, const eval_audit_input *in, FILE *f) {
  const int dj = a->dj;
  char c1[40], c2[40], c3[40], c4[40];
  fprintf(f, "audit of party %d: %d columns, %d users, %d dummy ids; d = %d, AP d_0 = %d, "
             "all PPs d - d_0 = %d\n"
             "figures: |corr| between true and recovered values, mean (min-max) over your "
             "columns\n",
          in->party, dj, a->N, a->Nd, a->d, a->d0, a->D);
  if (in->whitened)
    fprintf(f, "you whiten (o3m_features_whiten): the AP sees W x; scored against your %s\n",
            in->sends_truth ? "whitened values W x" : "raw values x");
  for (int m = 0; m < EVAL_AUDIT_N_MODES; m++) {
    if (!(a->ran & (1 << m))) continue;
    const eval_audit_exposure *x = &a->ex[m];
    const char *obs = m == EVAL_AUDIT_PER_PARTY ? "y" : "s";
    fprintf(f, "\n== mode %s: %s\n", eval_audit_mode_name(m), mode_what(m));
    if (x->exact)
      fprintf(f, "norms ||x^j||: EXACT (largest relative error %.1e); Gram x^j_i.x^j_k: EXACT "
                 "(%.1e)\n",
              x->norm, x->gram);
    else
      fprintf(f, "norms: corr(||%s_i||, ||x^j_i||) = %.3f%s; Gram: corr(%s_i.%s_k, "
                 "x^j_i.x^j_k) = %.3f (%d random pairs)\n",
              obs, x->norm, isnan(x->norm) ? " (your norms are all equal: nothing to learn)" : "",
              obs, obs, x->gram, GRAM_PAIRS);
    int full = eval_audit_n_points(a, m, EVAL_AUDIT_KP_FULL) > 0;
    fprintf(f, "known plaintext:\n%6s  %-22s%s\n", "n", "your columns known",
            full ? "  n full rows of every PP known" : "");
    for (int i = 0; i < eval_audit_n_points(a, m, EVAL_AUDIT_KP); i++) {
      eval_audit_point pt;
      eval_audit_point_get(a, m, EVAL_AUDIT_KP, i, &pt);
      cell(a, m, EVAL_AUDIT_KP, i, c1, sizeof c1);
      cell(a, m, EVAL_AUDIT_KP_FULL, i, c2, sizeof c2);
      fprintf(f, "%6d  %-22s  %s\n", pt.x, c1, c2);
    }
    fprintf(f, "statistics of traffic (PCA, FastICA), real users vs dummy rows of unknown ids:\n"
               "%6s  %-22s  %-22s  %-22s  %-22s\n",
            "N", "pca real", "pca dummies", "ica real", "ica dummies");
    int n1 = eval_audit_n_points(a, m, EVAL_AUDIT_PCA);
    int n2 = eval_audit_n_points(a, m, EVAL_AUDIT_DUMMY_PCA);
    for (int i = 0, k = 0; i < n1 || k < n2;) {
      eval_audit_point p1, p2;
      int x1 = i < n1 && !eval_audit_point_get(a, m, EVAL_AUDIT_PCA, i, &p1) ? p1.x : -1;
      int x2 = k < n2 && !eval_audit_point_get(a, m, EVAL_AUDIT_DUMMY_PCA, k, &p2) ? p2.x : -1;
      int xv = x1 < 0 ? x2 : x2 < 0 ? x1 : x1 < x2 ? x1 : x2;
      int ir = x1 == xv ? i++ : -1, kd = x2 == xv ? k++ : -1;
      cell(a, m, EVAL_AUDIT_PCA, ir, c1, sizeof c1);
      cell(a, m, EVAL_AUDIT_DUMMY_PCA, kd, c2, sizeof c2);
      cell(a, m, EVAL_AUDIT_ICA, ir, c3, sizeof c3);
      cell(a, m, EVAL_AUDIT_DUMMY_ICA, kd, c4, sizeof c4);
      fprintf(f, "%6d  %-22s  %-22s  %-22s  %-22s\n", xv, c1, c2, c3, c4);
    }
    fprintf(f, "per column, at each attack's largest setting:\n%-16s", "column");
    for (int s = 0; s < EVAL_AUDIT_N_SERIES; s++) {
      int np = eval_audit_n_points(a, m, s);
      if (!np) continue;
      char h[40];
      eval_audit_point pt;
      eval_audit_point_get(a, m, s, np - 1, &pt);
      snprintf(h, sizeof h, "%s %s=%d", eval_audit_series_name(s), series_x(s), pt.x);
      fprintf(f, " %17s", h);
    }
    fputc('\n', f);
    for (int c = 0; c < dj; c++) {
      fprintf(f, "%-16.16s", eval_audit_input_column(in, c));
      for (int s = 0; s < EVAL_AUDIT_N_SERIES; s++) {
        int np = eval_audit_n_points(a, m, s);
        if (!np) continue;
        eval_audit_point pt;
        eval_audit_point_get(a, m, s, np - 1, &pt);
        if (isnan(pt.corr[c]))
          fprintf(f, " %17s", "constant");
        else
          fprintf(f, " %17.3f", pt.corr[c]);
      }
      fputc('\n', f);
    }
  }
  fprintf(f, "\nnotes: |corr| 1 = the column is recovered up to scale and offset; the other "
             "parties' columns are\n  standard normal unless a data set gives them; masks come "
             "from a seeded generator (evaluation only).\n");
}

static void csv_file_name(char *buf, size_t n, const char *tag, eval_audit_mode m,
                          eval_audit_series s, const char *ext) {
  const char *mn = m == EVAL_AUDIT_PER_PARTY ? "per_party" : m == EVAL_AUDIT_SECAGG ? "secagg"
                                                                                     : "secagg_own";
  char sn[16];
  snprintf(sn, sizeof sn, "%s", eval_audit_series_name(s));
  for (char *q = sn; *q; q++)
    if (*q == '-') *q = '_';
  snprintf(buf, n, "%s_%s_%s.%s", tag, mn, sn, ext);
}

int eval_audit_write_csv(const eval_audit *a, const eval_audit_input *in, const char *dir,
                         o3m_err *e) {
  int rc = eval_regret_mkdir_p(dir, e);
  if (rc) return rc;
  for (int m = 0; m < EVAL_AUDIT_N_MODES; m++)
    for (int s = 0; s < EVAL_AUDIT_N_SERIES; s++) {
      int np = eval_audit_n_points(a, m, s);
      if (!np) continue;
      char name[64], path[4096];
      csv_file_name(name, sizeof name, a->tag, m, s, "csv");
      snprintf(path, sizeof path, "%s/%s", dir, name);
      FILE *f = fopen(path, "w");
      if (!f) return o3m_err_set(e, O3M_EIO, "cannot write %s: %s", path, strerror(errno));
      fprintf(f, "%s,mean,min,max", series_x(s));
      for (int c = 0; c < a->dj; c++) fprintf(f, ",%s", eval_audit_input_column(in, c));
      fputc('\n', f);
      for (int i = 0; i < np; i++) {
        eval_audit_point pt;
        eval_audit_point_get(a, m, s, i, &pt);
        fprintf(f, "%d,%.6f,%.6f,%.6f", pt.x, pt.mean, pt.min, pt.max);
        for (int c = 0; c < a->dj; c++) fprintf(f, ",%.6f", pt.corr[c]);
        fputc('\n', f);
      }
      int bad = ferror(f);
      if (fclose(f) != 0 || bad)
        return o3m_err_set(e, O3M_EIO, "cannot write %s: %s", path, strerror(errno));
    }
  return O3M_OK;
}

int eval_audit_plot(const eval_audit *a, const char *dir, int formats, FILE *f, o3m_err *e) {
  static const char *colors[EVAL_AUDIT_N_SERIES] = {"#1f77b4", "#9467bd", "#2ca02c",
                                                    "#ff7f0e", "#d62728", "#8c564b"};
  int rc = eval_regret_mkdir_p(dir, e);
  if (rc) return rc;
  char path[4096], list[1024] = "";
  snprintf(path, sizeof path, "%s/audit_plots.gp", dir);
  FILE *g = fopen(path, "w");
  if (!g) return o3m_err_set(e, O3M_EIO, "cannot write %s: %s", path, strerror(errno));
  eval_plot_preamble(g, "audit", "audit_plots.gp");
  fprintf(g, "set key bottom right box opaque\nset yrange [0:1.02]\n"
             "set ylabel 'mean over your columns of |corr| true vs recovered'\n");
  for (int m = 0; m < EVAL_AUDIT_N_MODES; m++) {
    if (!(a->ran & (1 << m))) continue;
    for (int byN = 0; byN < 2; byN++) {
      char stem[64];
      const char *mn = m == EVAL_AUDIT_PER_PARTY ? "per_party" : m == EVAL_AUDIT_SECAGG
                                                                     ? "secagg"
                                                                     : "secagg_own";
      snprintf(stem, sizeof stem, "audit_%s_vs_%s", mn, byN ? "N" : "n");
      eval_plot_output(g, stem);
      fprintf(g, "set title 'o3m-eval audit, mode %s: recovery vs %s'\n", eval_audit_mode_name(m),
              byN ? "users (or dummies) observed N" : "known rows n");
      fprintf(g, "set xlabel '%s'\n%s\nplot \\\n", byN ? "N" : "n",
              byN ? "set logscale x" : "unset logscale x");
      int first = 1;
      for (int s = byN ? EVAL_AUDIT_PCA : EVAL_AUDIT_KP;
           s <= (byN ? EVAL_AUDIT_DUMMY_ICA : EVAL_AUDIT_KP_FULL); s++) {
        if (!eval_audit_n_points(a, m, s)) continue;
        char csv[64];
        csv_file_name(csv, sizeof csv, a->tag, m, s, "csv");
        fprintf(g, "%s  '%s' using 1:2 with linespoints lw 2 lc rgb '%s' %s title '%s'",
                first ? "" : ", \\\n", csv, colors[s],
                s >= EVAL_AUDIT_DUMMY_PCA || s == EVAL_AUDIT_KP_FULL ? "dt 2" : "dt 1",
                eval_audit_series_name(s));
        first = 0;
      }
      fputc('\n', g);
      eval_plot_append_names(list, sizeof list, stem, formats);
    }
  }
  fprintf(g, "unset output\n");
  int bad = ferror(g);
  if (fclose(g) != 0 || bad)
    return o3m_err_set(e, O3M_EIO, "cannot write %s: %s", path, strerror(errno));
  if ((rc = eval_plot_render(dir, "audit_plots.gp", formats, e))) return rc;
  if (f) fprintf(f, "plots in %s:%s\n", dir, list);
  return O3M_OK;
}
