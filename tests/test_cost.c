/* test_cost.c -- how `o3m-eval cost` turns C.3 timings into its table
 * (eval_cost.h), and the Figure 5 plot of the command.
 *
 * The table's invariant (mask+sum <= +stats <= round) is checked on the
 * summarizing function with made-up timings, not by timing anything: with
 * the three pipelines timed in the same repetition and medians of paired
 * sums, a part cannot exceed the whole unless it does in the repetitions
 * themselves, whatever load falls on which repetition. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_dir.h"
#include "eval_cmds.h"
#include "eval_cost.h"

Test(cost_c3, medians_of_paired_sums_by_hand) {
  double a[] = {3, 1, 2, 10, 2}, b[] = {1, 1, 1, 1, 1.2}, c[] = {2, 2, 1.5, 2, 1}, s[5];
  eval_cost_c3_times t;
  cr_assert_eq(eval_cost_c3_summarize(5, a, b, c, s, &t), O3M_OK);
  cr_assert_float_eq(t.mask_sum, 2.0, 1e-15);   /* 1 2 2 3 10 */
  cr_assert_float_eq(t.mask_stats, 3.2, 1e-15); /* a + b: 4 2 3 11 3.2 -> 2 3 3.2 4 11 */
  cr_assert_float_eq(t.round, 3.5, 1e-15);      /* a + c: 5 3 3.5 12 3 -> 3 3 3.5 5 12 */
  cr_assert_float_eq(t.inverted, 0.2, 1e-15);   /* the last repetition: c < b */
  cr_assert_eq(t.reps, 5);
  double e[] = {4, 1, 3, 2};
  cr_assert_float_eq(eval_cost_median(e, 4), 2.5, 1e-15);
  cr_assert_eq(eval_cost_c3_summarize(0, a, b, c, s, &t), O3M_EINVAL);
}

/* A draw in [0, 1) from a small LCG (reproducible, test-only). */
static double unif(unsigned long long *st) {
  *st = *st * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(*st >> 11) / 9007199254740992.0;
}

/* A past bug: load that falls on some repetitions only (here
 * spikes of up to 50 times the work on a random tenth of them, in any of the
 * three parts) must not put a part above the whole. Every repetition does
 * the statistics' work and more in its choose + update (c >= b), and the
 * table keeps mask+sum <= +stats <= round, in each of 2000 random runs. */
Test(cost_c3, parts_never_exceed_the_whole_under_uneven_load) {
  enum { N = 101 };
  unsigned long long st = 42;
  double a[N], b[N], c[N], s[N];
  for (int trial = 0; trial < 2000; trial++) {
    for (int j = 0; j < N; j++) {
      double load_a = unif(&st) < 0.1 ? 1 + 49 * unif(&st) : 1;
      double load_b = unif(&st) < 0.1 ? 1 + 49 * unif(&st) : 1;
      a[j] = 1e-3 * (1 + 0.3 * unif(&st)) * load_a;
      b[j] = 2e-4 * (1 + 0.3 * unif(&st)) * load_b;
      c[j] = b[j] + 5e-5 * unif(&st); /* choose does the statistics and more */
    }
    eval_cost_c3_times t;
    cr_assert_eq(eval_cost_c3_summarize(N, a, b, c, s, &t), O3M_OK);
    cr_assert(t.mask_sum <= t.mask_stats && t.mask_stats <= t.round,
              "trial %d: mask+sum %.6e, +stats %.6e, round %.6e", trial, t.mask_sum,
              t.mask_stats, t.round);
    cr_assert_eq(t.inverted, 0.0);
  }
}

/* Counts the lines of path that start with prefix. */
static int count_lines(const char *path, const char *prefix) {
  FILE *f = fopen(path, "r");
  cr_assert_not_null(f, "cannot open %s", path);
  char line[1024];
  int n = 0;
  while (fgets(line, sizeof line, f)) n += !strncmp(line, prefix, strlen(prefix));
  fclose(f);
  return n;
}

/* Figure 5 is plotted, not only written as a CSV: fig5_cost in each format
 * asked for, from a script whose datablocks hold every CSV row's ratio. */
Test(cost_cmd, figure5_plot_in_every_format) {
  if (system("command -v gnuplot >/dev/null 2>&1") != 0) cr_skip_test("gnuplot not installed");
  char dir[] = "/tmp/test_cost_XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  char *argv[] = {"cost", "--only", "fig5", "--T", "20", "--K", "4,6", "--d", "6,8", "--M", "2",
                  "--out-dir", dir, "--plot-format", "png,pdf,svg", NULL};
  cr_assert_eq(eval_cost_main(15, argv), 0);
  static const char *files[] = {"fig5_cost.png", "fig5_cost.pdf", "fig5_cost.svg"};
  char p[512];
  for (size_t i = 0; i < 3; i++) {
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, files[i]);
    cr_assert_eq(stat(p, &st), 0, "%s missing", p);
    cr_assert_gt(st.st_size, 1000, "%s is only %lld bytes", p, (long long)st.st_size);
  }
  snprintf(p, sizeof p, "%s/cost_fig5.csv", dir);
  int csv_rows = count_lines(p, "lin");
  cr_assert_eq(csv_rows, 2 * 2 * 2, "2 algorithms x 2 K x 2 d rows, got %d", csv_rows);
  snprintf(p, sizeof p, "%s/cost_plots.gp", dir);
  cr_assert_eq(count_lines(p, "6,") + count_lines(p, "8,"), csv_rows, "one datum per CSV row");
  cr_assert_eq(count_lines(p, "$linucb_K4 << EOD"), 1);
  cr_assert_eq(count_lines(p, "$lints_K6 << EOD"), 1);
  test_dir_remove(dir);
}

Test(cost_cmd, bad_plot_format_is_a_usage_error) {
  char *argv[] = {"cost", "--plot-format", "png,gif", NULL};
  cr_assert_eq(eval_cost_main(3, argv), 2);
}
