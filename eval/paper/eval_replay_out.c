/* eval_replay_out.c -- see eval_replay_out.h.
 *
 * Every number is computed by the functions that print the stdout table
 * (eval_replay_ctr, eval_replay_relative, eval_replay_random_summary), so
 * the files and the table cannot disagree; they differ only in precision
 * (%.17g here). The JSON is written by hand: a handful of value kinds, with
 * strings escaped as RFC 8259 asks (quote, backslash, control characters;
 * other bytes are copied, so a non-UTF-8 path gives non-UTF-8 JSON). */
#include "eval_replay_out.h"

#include <errno.h>
#include <math.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>

#include "eval_masker.h"
#include "eval_plot.h"
#include "eval_regret.h"
#include "eval_stats.h"
#include "o3m_version.h"

int eval_replay_sha256_file(const char *path, char hex[65], o3m_err *e) {
  hex[0] = 0;
  FILE *f = fopen(path, "rb");
  if (!f) return o3m_err_set(e, O3M_EIO, "cannot read %s for its checksum: %s", path,
                             strerror(errno));
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  static const size_t chunk = 1 << 20;
  unsigned char *buf = malloc(chunk);
  int ok = ctx && buf && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1;
  size_t n;
  while (ok && (n = fread(buf, 1, chunk, f)) > 0) ok = EVP_DigestUpdate(ctx, buf, n) == 1;
  int read_err = ferror(f);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (ok && !read_err) ok = EVP_DigestFinal_ex(ctx, md, &len) == 1 && len == 32;
  EVP_MD_CTX_free(ctx);
  free(buf);
  fclose(f);
  if (read_err) return o3m_err_set(e, O3M_EIO, "cannot read %s for its checksum", path);
  if (!ok) return o3m_err_set(e, O3M_ENOMEM, "SHA-256 of %s failed", path);
  for (unsigned i = 0; i < len; i++) snprintf(hex + 2 * i, 3, "%02x", md[i]);
  return O3M_OK;
}

/* The variants that ran, in table order: central, federated, partial, then
 * the DP variants, each named by its epsilon ("dp_eps_0.5"). */
#define MAX_VARIANTS (3 + EVAL_REPLAY_MAX_DP)
typedef struct variant {
  char name[40];
  int cols;
  const eval_replay_tally *t;
  int bit;  /* EVAL_REPLAY_* of a non-DP variant, 0 for a DP one */
  int dp;   /* index into res->dp of a DP variant, -1 otherwise */
  int slot; /* the plot's colour and dash: 0..2 the plain variants, 3.. DP */
} variant;

static int variants_of(const eval_replay_result *res, variant v[MAX_VARIANTS]) {
  static const struct {
    int bit;
    const char *name;
  } plain[] = {{EVAL_REPLAY_CENTRAL, "central"},
               {EVAL_REPLAY_FEDERATED, "federated"},
               {EVAL_REPLAY_PARTIAL, "partial"}};
  const eval_replay_tally *tally[] = {&res->central, &res->federated, &res->partial};
  int n = 0;
  for (int i = 0; i < 3; i++) {
    if (!(res->variants & plain[i].bit)) continue;
    v[n] = (variant){"", plain[i].bit == EVAL_REPLAY_PARTIAL ? res->partial_d : res->d,
                     tally[i], plain[i].bit, -1, i};
    snprintf(v[n++].name, sizeof v->name, "%s", plain[i].name);
  }
  for (int i = 0; i < res->n_dp; i++) {
    v[n] = (variant){"", res->d, &res->dp[i], 0, i, 3 + i};
    snprintf(v[n++].name, sizeof v->name, "dp_eps_%g", res->dp_eps[i]);
  }
  return n;
}

/* Variant v's tally at curve point p. */
static const eval_replay_tally *point_tally(const eval_replay_point *p, const variant *v) {
  if (v->dp >= 0) return &p->dp[v->dp];
  return v->bit == EVAL_REPLAY_CENTRAL     ? &p->central
         : v->bit == EVAL_REPLAY_FEDERATED ? &p->federated
                                           : &p->partial;
}

/* ---- CSV ---- */

/* ",x" at full precision, or "," for an undefined value. */
static void csv_num(FILE *f, double x) {
  if (isfinite(x)) fprintf(f, ",%.17g", x);
  else fputc(',', f);
}

static void csv_spread(FILE *f, const eval_replay_rel *r, int n) {
  double h = eval_stats_band95(r->std, n);
  csv_num(f, r->rel);
  csv_num(f, r->mean);
  csv_num(f, r->std);
  csv_num(f, r->min);
  csv_num(f, r->max);
  csv_num(f, n > 1 ? r->mean - h : NAN);
  csv_num(f, n > 1 ? r->mean + h : NAN);
}

static int write_csv(const char *dir, const char *stem, const eval_replay_result *res,
                     const eval_replay_config *cfg, o3m_err *e) {
  char path[4096];
  FILE *f = eval_out_open(dir, stem, ".csv", path, sizeof path, e);
  if (!f) return O3M_EIO;
  fprintf(f, "variant,cols,matched,clicks,ctr,rel_ctr,rel_mean,rel_std,rel_min,rel_max,"
             "rel_ci95_lo,rel_ci95_hi\n");
  variant v[MAX_VARIANTS];
  int nv = variants_of(res, v), n = res->n_random;
  for (int i = 0; i < nv; i++) {
    eval_replay_rel r;
    eval_replay_relative(res, v[i].t, &r);
    fprintf(f, "%s,%d,%llu", v[i].name, v[i].cols, (unsigned long long)v[i].t->matched);
    csv_num(f, v[i].t->clicks);
    csv_num(f, eval_replay_ctr(v[i].t));
    csv_spread(f, &r, n);
    fputc('\n', f);
  }
  double m, c, ctr;
  eval_replay_rel rr;
  eval_replay_random_summary(res, &m, &c, &ctr, &rr);
  fprintf(f, "random,%d", res->d);
  csv_num(f, m);
  csv_num(f, c);
  csv_num(f, ctr);
  csv_spread(f, &rr, n);
  fputc('\n', f);
  for (int s = 0; s < n; s++) {
    fprintf(f, "random_seed_%llu,%d,%llu", (unsigned long long)(cfg->random_seed + (uint64_t)s),
            res->d, (unsigned long long)res->random[s].matched);
    csv_num(f, res->random[s].clicks);
    double cs = eval_replay_ctr(&res->random[s]);
    csv_num(f, cs);
    csv_num(f, cs / ctr);
    fputs(",,,,,,\n", f);
  }
  return eval_out_close(f, path, e);
}

static int write_curve(const char *dir, const char *stem, const eval_replay_result *res,
                       o3m_err *e) {
  char path[4096];
  FILE *f = eval_out_open(dir, stem, "_curve.csv", path, sizeof path, e);
  if (!f) return O3M_EIO;
  variant v[MAX_VARIANTS];
  int nv = variants_of(res, v), n = res->n_random;
  fprintf(f, "rows");
  for (int i = 0; i < nv; i++)
    fprintf(f, ",%s_matched,%s_clicks,%s_ctr,%s_rel", v[i].name, v[i].name, v[i].name,
            v[i].name);
  fprintf(f, ",random_matched,random_clicks,random_ctr\n");
  for (int k = 0; k < res->n_curve; k++) {
    const eval_replay_point *p = &res->curve[k];
    double rctr = eval_replay_ctr(&p->random);
    fprintf(f, "%llu", (unsigned long long)p->events);
    for (int i = 0; i < nv; i++) {
      const eval_replay_tally *t = point_tally(p, &v[i]);
      fprintf(f, ",%llu", (unsigned long long)t->matched);
      csv_num(f, t->clicks);
      csv_num(f, eval_replay_ctr(t));
      csv_num(f, eval_replay_ctr(t) / rctr);
    }
    csv_num(f, (double)p->random.matched / n);
    csv_num(f, p->random.clicks / n);
    csv_num(f, rctr);
    fputc('\n', f);
  }
  return eval_out_close(f, path, e);
}

/* ---- JSON ---- */

static void json_str(FILE *f, const char *s) {
  if (!s) {
    fputs("null", f);
    return;
  }
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
    else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
    else fputc(*p, f);
  }
  fputc('"', f);
}

static void json_num(FILE *f, double x) {
  if (isfinite(x)) fprintf(f, "%.17g", x);
  else fputs("null", f);
}

static void json_spread(FILE *f, const eval_replay_rel *r, int n, const char *ind) {
  double h = eval_stats_band95(r->std, n);
  fprintf(f, "%s\"rel_ctr\": ", ind);
  json_num(f, r->rel);
  fprintf(f, ",\n%s\"rel_ctr_over_seeds\": {\"mean\": ", ind);
  json_num(f, r->mean);
  fputs(", \"std\": ", f);
  json_num(f, r->std);
  fputs(", \"min\": ", f);
  json_num(f, r->min);
  fputs(", \"max\": ", f);
  json_num(f, r->max);
  fputs(", \"ci95\": [", f);
  json_num(f, n > 1 ? r->mean - h : NAN);
  fputs(", ", f);
  json_num(f, n > 1 ? r->mean + h : NAN);
  fprintf(f, "], \"t_quantile\": ");
  json_num(f, n > 1 ? eval_stats_t_quantile(0.975, n - 1) : NAN);
  fputs("}", f);
}

static int write_json(const char *dir, const char *stem, const eval_replay_result *res,
                      const eval_replay_config *cfg, const eval_replay_info *info, o3m_err *e) {
  char path[4096];
  FILE *f = eval_out_open(dir, stem, ".json", path, sizeof path, e);
  if (!f) return O3M_EIO;
  const o3m_policy_config *pc = &cfg->policy;
  int n = res->n_random;
  fprintf(f, "{\n  \"o3m_version\": \"%s\",\n  \"command\": \"replay\",\n  \"data\": {\n"
             "    \"format\": ", O3M_VERSION);
  json_str(f, info->format);
  fputs(",\n    \"input\": ", f);
  json_str(f, info->input);
  fputs(",\n    \"input_sha256\": ", f);
  json_str(f, info->input_sha256[0] ? info->input_sha256 : NULL);
  fputs(",\n    \"item_context\": ", f);
  json_str(f, info->item_context);
  fputs(",\n    \"item_context_sha256\": ", f);
  json_str(f, info->item_sha256[0] ? info->item_sha256 : NULL);
  fprintf(f, ",\n    \"arms\": %d,\n    \"d\": %d,\n    \"rows_used\": %llu,\n"
             "    \"rows_skipped\": %llu,\n    \"options\": {",
          res->K, res->d, (unsigned long long)res->events, (unsigned long long)res->skipped);
  for (int i = 0; i < info->n_opts; i++) {
    fputs(i ? ", " : "", f);
    json_str(f, info->opt_name[i]);
    fputs(": ", f);
    json_str(f, info->opt_value[i]);
  }
  fprintf(f, "}\n  },\n  \"config\": {\n    \"algo\": \"%s\",\n    \"model\": \"%s\",\n"
             "    \"alpha\": ",
          o3m_algo_name(pc->algo), o3m_model_name(pc->model));
  json_num(f, pc->alpha);
  fputs(",\n    \"lambda\": ", f);
  json_num(f, pc->lambda);
  fputs(",\n    \"v\": ", f);
  json_num(f, pc->v);
  fprintf(f, ",\n    \"sampler_seed\": %llu,\n    \"refactor_every\": %d,\n    \"parties\": [",
          (unsigned long long)pc->seed, pc->refactor_every);
  for (int j = 0; j < cfg->part.m; j++) fprintf(f, "%s%d", j ? ", " : "", cfg->part.dims[j]);
  fprintf(f, "],\n    \"mask_seed\": %llu,\n    \"aggregation\": \"%s\",\n    \"whiten\": ",
          (unsigned long long)cfg->mask_seed,
          eval_aggregation_name((eval_aggregation)cfg->aggregation));
  json_str(f, info->whiten);
  fprintf(f, ",\n    \"limit\": %lld,\n    \"random_seeds\": [", cfg->limit > 0 ? cfg->limit : 0);
  for (int s = 0; s < n; s++)
    fprintf(f, "%s%llu", s ? ", " : "", (unsigned long long)(cfg->random_seed + (uint64_t)s));
  fprintf(f, "],\n    \"threads\": %d,\n    \"dp\": ", cfg->threads);
  if (cfg->n_dp > 0) {
    fputs("{\"epsilons\": [", f);
    for (int i = 0; i < cfg->n_dp; i++) {
      fputs(i ? ", " : "", f);
      json_num(f, cfg->dp_eps[i]);
    }
    fputs("], \"delta\": ", f);
    json_num(f, cfg->dp_delta);
    fputs(", \"clip\": ", f);
    json_num(f, cfg->dp_clip);
    fprintf(f, ", \"T\": %lld, \"seed\": %llu}", cfg->dp_T, (unsigned long long)cfg->dp_seed);
  } else {
    fputs("null", f);
  }
  fputs("\n  },\n  \"variants\": [", f);
  variant v[MAX_VARIANTS];
  int nv = variants_of(res, v);
  for (int i = 0; i < nv; i++) {
    eval_replay_rel r;
    eval_replay_relative(res, v[i].t, &r);
    double ctr = eval_replay_ctr(v[i].t);
    fprintf(f, "%s\n    {\n      \"name\": \"%s\",\n      \"cols\": %d,\n      \"matched\": %llu,\n"
               "      \"clicks\": ",
            i ? "," : "", v[i].name, v[i].cols, (unsigned long long)v[i].t->matched);
    json_num(f, v[i].t->clicks);
    fputs(",\n      \"ctr\": ", f);
    json_num(f, ctr);
    fputs(",\n", f);
    if (v[i].dp >= 0) {
      fputs("      \"epsilon\": ", f);
      json_num(f, res->dp_eps[v[i].dp]);
      fputs(",\n      \"sigma_per_entry\": ", f);
      json_num(f, res->dp_sigma[v[i].dp]);
      fputs(",\n", f);
    }
    json_spread(f, &r, n, "      ");
    fputs(",\n      \"rel_ctr_per_seed\": [", f);
    for (int s = 0; s < n; s++) {
      fputs(s ? ", " : "", f);
      json_num(f, ctr / eval_replay_ctr(&res->random[s]));
    }
    fputs("]\n    }", f);
  }
  double m, c, rctr;
  eval_replay_rel rr;
  eval_replay_random_summary(res, &m, &c, &rctr, &rr);
  fputs("\n  ],\n  \"random\": {\n    \"matched_mean\": ", f);
  json_num(f, m);
  fputs(",\n    \"clicks_mean\": ", f);
  json_num(f, c);
  fputs(",\n    \"ctr_mean\": ", f);
  json_num(f, rctr);
  fputs(",\n", f);
  json_spread(f, &rr, n, "    ");
  fputs(",\n    \"per_seed\": [", f);
  for (int s = 0; s < n; s++) {
    fprintf(f, "%s\n      {\"seed\": %llu, \"matched\": %llu, \"clicks\": ", s ? "," : "",
            (unsigned long long)(cfg->random_seed + (uint64_t)s),
            (unsigned long long)res->random[s].matched);
    json_num(f, res->random[s].clicks);
    fputs(", \"ctr\": ", f);
    json_num(f, eval_replay_ctr(&res->random[s]));
    fputs("}", f);
  }
  fputs("\n    ]\n  },\n  \"agreement\": ", f);
  if ((res->variants & EVAL_REPLAY_CENTRAL) && (res->variants & EVAL_REPLAY_FEDERATED))
    fprintf(f, "{\"rows\": %llu, \"equal_decisions\": %llu}", (unsigned long long)res->events,
            (unsigned long long)res->agree);
  else
    fputs("null", f);
  fprintf(f, ",\n  \"curve_csv\": ");
  char curve[512];
  snprintf(curve, sizeof curve, "%s_curve.csv", stem);
  json_str(f, curve);
  fputs(",\n  \"seconds\": ", f);
  json_num(f, res->seconds);
  fputs("\n}\n", f);
  return eval_out_close(f, path, e);
}

int eval_replay_write_results(const char *dir, const char *stem, const eval_replay_result *res,
                              const eval_replay_config *cfg, const eval_replay_info *info,
                              o3m_err *e) {
  int rc = eval_regret_mkdir_p(dir, e);
  if (!rc) rc = write_csv(dir, stem, res, cfg, e);
  if (!rc) rc = write_json(dir, stem, res, cfg, info, e);
  if (!rc) rc = write_curve(dir, stem, res, e);
  return rc;
}

/* ---- the curve plot ---- */

int eval_replay_plot_curve(const char *dir, const char *stem, const eval_replay_result *res,
                           const eval_replay_config *cfg, const eval_replay_info *info,
                           int formats, FILE *out, o3m_err *e) {
  char path[4096], script[512], csv[512], pstem[512];
  snprintf(script, sizeof script, "%s_curve.gp", stem);
  snprintf(csv, sizeof csv, "%s_curve.csv", stem);
  snprintf(pstem, sizeof pstem, "%s_curve", stem);
  FILE *g = eval_out_open(dir, script, "", path, sizeof path, e);
  if (!g) return O3M_EIO;
  /* Central, federated, partial, then the DP variants (dotted). */
  static const char *colors[MAX_VARIANTS] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd",
                                             "#ff7f0e", "#8c564b", "#e377c2"};
  static const char *dash[MAX_VARIANTS] = {"dt 1", "dt 2", "dt 1", "dt 3",
                                           "dt 3", "dt 3", "dt 3"};
  variant v[MAX_VARIANTS];
  int nv = variants_of(res, v);
  eval_plot_preamble(g, "replay", script);
  eval_plot_output(g, pstem);
  fprintf(g, "set key top left horizontal maxrows 2 box opaque\nset offsets 0, 0, graph 0.4, 0\n"
             "set xlabel 'rows of the log read'\nset format x '%%.0s%%c'\n"
             "set multiplot layout 2,1 title \"Replay over the log: %s, %s %s, %d parties "
             "(%llu rows)\"\n"
             "set ylabel 'CTR over matched rows'\nset title 'CTR'\nplot \\\n",
          info->format, o3m_algo_name(cfg->policy.algo), o3m_model_name(cfg->policy.model),
          cfg->part.m, (unsigned long long)res->events);
  int col = 2;
  for (int i = 0; i < nv; i++, col += 4)
    fprintf(g, "  '%s' using 1:%d with lines lw 2 lc rgb '%s' %s title '%s (%d cols)' noenhanced, "
               "\\\n",
            csv, col + 2, colors[v[i].slot], dash[v[i].slot], v[i].name, v[i].cols);
  fprintf(g, "  '%s' using 1:%d with lines lw 1.5 lc rgb '#7f7f7f' title 'random (pooled over "
             "%d seeds)'\n",
          csv, col + 2, res->n_random);
  fprintf(g, "set title 'relative CTR: CTR / random CTR'\nset ylabel 'relative CTR'\nplot \\\n");
  col = 2;
  for (int i = 0; i < nv; i++, col += 4)
    fprintf(g, "  '%s' using 1:%d with lines lw 2 lc rgb '%s' %s title '%s' noenhanced%s\n",
            csv, col + 3, colors[v[i].slot], dash[v[i].slot], v[i].name, i + 1 < nv ? ", \\" : "");
  fprintf(g, "unset multiplot\nunset output\n");
  int rc = eval_out_close(g, path, e);
  if (rc || (rc = eval_plot_render(dir, script, formats, e))) return rc;
  char list[1024] = "";
  eval_plot_append_names(list, sizeof list, pstem, formats);
  if (out) fprintf(out, "curve plot in %s:%s\n", dir, list);
  return O3M_OK;
}
