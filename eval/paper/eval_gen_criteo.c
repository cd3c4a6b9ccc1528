/* eval_gen_criteo.c -- `o3m-eval gen-criteo`: synthetic rows in the exact
 * Kaggle Display Advertising format, for scale tests of Criteo replay.
 *
 * Format of every line: label, I1..I13, C1..C26 separated by tabs, no
 * header, an empty field for a missing value; integers in decimal, the
 * categoricals as 8 lowercase hex digits.
 *
 * Model (made up, shaped loosely like the real data; reproducible from
 * --seed through the project's seeded generator):
 *   - I_i is missing with a per-column probability (0 to 0.45, like Kaggle's
 *     sparse I1, I10, I12); otherwise it is heavy-tailed: b bits uniform in
 *     0..B_i, then a uniform value below 2^b (so values span 0 .. ~2^B_i on a
 *     roughly log-uniform scale). I2 is sometimes negative (-1..-3).
 *   - C_j is missing with a per-column probability (0 to 0.77), otherwise
 *     the hash of a rank in the column's vocabulary of 2^L_j values (L_j
 *     from the real columns' cardinalities, 2 bits for C9 up to 23 for C3):
 *     b = floor((L_j + 1) q^2) bits with q uniform in [0, 1), then a rank
 *     uniform below 2^b. A few values are very frequent, as in the real data
 *     (C9 = a73ee510 on most rows; C1's top value on 40% of the sample). This skew is what makes
 *     the item labels concentrate: with uniform values the 40 top labels
 *     cover ~30% of the rows, with skewed ones more, closer to the real
 *     sample (whose most frequent label has 2.5% of the rows).
 *   - The label is a click with probability sigmoid(z),
 *       z = -1.5 + 0.25 (n0 - n2) + 0.6 (s1 - 0.5) + 0.5 (s1 - 0.5)(n1 - n / 3)
 *     where (n0, n1, n2) are the row's categorical bucket counts under the
 *     replay preprocessing (value mod 3, see eval_criteo_prep.h), n their sum,
 *     and s1 = b_1 / B_1 in [0, 1] the magnitude of I1 (0 if missing). So the
 *     item (the arm a row maps to) shifts the CTR (a shared model can learn
 *     which arms click more) and one user feature interacts with it (only a
 *     per-arm model can use that). Overall CTR is around 0.25, like Kaggle.
 *
 * Speed: the line is formatted by hand into a 1 MiB buffer written with
 * fwrite; nothing is allocated per row. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval_cmds.h"
#include "eval_criteo_prep.h"
#include "o3m_cli.h"
#include "o3m_rng.h"
#include "o3m_splitmix.h"

/* Per-column probability of a missing value (in 1/256) and bit range. */
static const unsigned char int_missing[EVAL_CRITEO_NINT] = {115, 0, 51, 56, 5, 56, 10, 0, 10,
                                                            115, 10, 196, 56};
static const unsigned char int_bits[EVAL_CRITEO_NINT] = {6, 12, 16, 8, 22, 14, 10, 7, 12,
                                                         3, 7, 8, 8};
static const unsigned char cat_missing[EVAL_CRITEO_NCAT] = {
    0, 0, 9, 9, 0, 30, 0, 0, 0, 9, 0, 9, 0, 0, 0, 9, 0, 0, 100, 100, 9, 195, 0, 9, 100, 100};
/* log2 of each categorical column's vocabulary size. */
static const unsigned char cat_bits[EVAL_CRITEO_NCAT] = {11, 10, 23, 21, 9, 5, 14, 10, 2,
                                                         17, 13, 23, 12, 5, 14, 23, 4, 13,
                                                         12, 2, 23, 5, 4, 19, 7, 18};

/* A 32-bit hash of (column, rank): the value a column writes for a rank. */
static inline uint32_t cat_value(int j, uint64_t rank) {
  uint64_t h = rank * 0x9e3779b97f4a7c15ull + (uint64_t)(j + 1) * 0xbf58476d1ce4e5b9ull;
  h ^= h >> 31;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 29;
  return (uint32_t)h;
}

static char *put_uint(char *p, uint64_t v) {
  char tmp[24];
  int n = 0;
  do {
    tmp[n++] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  while (n) *p++ = tmp[--n];
  return p;
}

typedef struct gen {
  o3m_rng *rng;
} gen;

static inline uint64_t next(gen *g) {
  uint64_t u;
  o3m_rng_u64(g->rng, &u);
  return u;
}

/* Formats one row at p (at most ~400 bytes); returns the end. */
static char *gen_row(gen *g, char *p) {
  static const char hex[] = "0123456789abcdef";
  char *line = p;
  p += 2; /* the label and its tab, filled in last */
  double s1 = 0;
  for (int i = 0; i < EVAL_CRITEO_NINT; i++) {
    uint64_t r = next(g);
    if ((r & 0xff) >= int_missing[i]) {
      int B = int_bits[i];
      int b = (int)(((r >> 8) & 0xffff) * (uint64_t)(B + 1) >> 16);
      uint64_t v = b ? (r >> 32) & ((1ull << b) - 1) : 0;
      if (i == 0) s1 = (double)b / B;
      if (i == 1 && ((r >> 24) & 0x1f) == 0) {
        *p++ = '-';
        v = 1 + (v % 3);
      }
      p = put_uint(p, v);
    }
    *p++ = '\t';
  }
  int n[EVAL_CRITEO_NBUCKET] = {0, 0, 0};
  for (int j = 0; j < EVAL_CRITEO_NCAT; j++) {
    uint64_t r = next(g);
    if ((r & 0xff) >= cat_missing[j]) {
      int L = cat_bits[j];
      uint64_t q = (r >> 8) & 0xffff;
      int b = (int)(((q * q) >> 16) * (uint64_t)(L + 1) >> 16);
      uint64_t rank = b ? (r >> 32) & ((1ull << b) - 1) : 0;
      uint32_t v = cat_value(j, rank);
      n[v % EVAL_CRITEO_NBUCKET]++;
      for (int k = 7; k >= 0; k--) *p++ = hex[(v >> (4 * k)) & 0xf];
    }
    *p++ = j == EVAL_CRITEO_NCAT - 1 ? '\n' : '\t';
  }
  double tot = n[0] + n[1] + n[2];
  double z = -1.5 + 0.25 * (n[0] - n[2]) + 0.6 * (s1 - 0.5) + 0.5 * (s1 - 0.5) * (n[1] - tot / 3);
  double pr = 1.0 / (1.0 + exp(-z));
  double u = o3m_u64_to_unit(next(g));
  line[0] = u < pr ? '1' : '0';
  line[1] = '\t';
  return p;
}

enum { CRITEO_ROWS, CRITEO_SEED, CRITEO_OUT, CRITEO_N };
static const o3m_cli_option gen_options[] = {
    [CRITEO_ROWS] = {"rows", "N", "rows to write (required)"},
    [CRITEO_SEED] = {"seed", "S", "seed of the rows (default 1)"},
    [CRITEO_OUT] = {"out", "FILE", "write there instead of standard output"},
    [CRITEO_N] = {NULL, NULL, NULL},
};
static const o3m_cli_spec gen_cli = {
    "o3m-eval gen-criteo", "--rows N [--seed S] [--out FILE]",
    "Writes N synthetic rows in the Kaggle Criteo train.txt format.", gen_options,
    "The format is tab-separated: label, I1..I13, C1..C26 as 8 hex digits; some\n"
    "fields empty = missing. The label depends weakly on the categorical bucket\n"
    "counts and on I1 (see eval/paper/eval_gen_criteo.c), so replay policies differ in CTR.\n"};

int eval_gen_criteo_main(int argc, char **argv) {
  long long rows = -1;
  unsigned long long seed = 1;
  const char *out = NULL;
  o3m_cli cl;
  o3m_cli_begin(&cl, &gen_cli, argc, argv);
  const char *arg;
  for (int c; (c = o3m_cli_next(&cl, &arg)) != O3M_CLI_END;) {
    char *end = NULL;
    switch (c) {
      case O3M_CLI_STOP: return cl.exit_code;
      case CRITEO_ROWS:
        rows = strtoll(arg, &end, 10);
        if (!*arg || *end || rows < 0) {
          fprintf(stderr, "gen-criteo: bad --rows '%s'\n", arg);
          return 2;
        }
        break;
      case CRITEO_SEED:
        seed = strtoull(arg, &end, 10);
        if (!*arg || *end) {
          fprintf(stderr, "gen-criteo: bad --seed '%s'\n", arg);
          return 2;
        }
        break;
      case CRITEO_OUT: out = arg; break;
    }
  }
  if (rows < 0) return o3m_cli_usage_error(&gen_cli, "--rows is required");
  if (o3m_cli_operands(&cl) < argc)
    return o3m_cli_usage_error(&gen_cli, "unexpected argument '%s'", argv[o3m_cli_operands(&cl)]);
  FILE *f = out ? fopen(out, "w") : stdout;
  if (!f) {
    fprintf(stderr, "gen-criteo: cannot create %s: %s\n", out, strerror(errno));
    return 1;
  }
  gen g;
  enum { BUF = 1 << 20, MAXROW = 512 };
  char *buf = malloc(BUF);
  if (!buf || o3m_rng_create_seeded_insecure(&g.rng, seed)) {
    fprintf(stderr, "gen-criteo: out of memory\n");
    free(buf);
    if (out) fclose(f);
    return 1;
  }
  size_t used = 0;
  int ok = 1;
  for (long long i = 0; i < rows && ok; i++) {
    used = (size_t)(gen_row(&g, buf + used) - buf);
    if (used > BUF - MAXROW) {
      ok = fwrite(buf, 1, used, f) == used;
      used = 0;
    }
  }
  if (ok && used) ok = fwrite(buf, 1, used, f) == used;
  if (fflush(f)) ok = 0;
  if (out && fclose(f)) ok = 0;
  o3m_rng_destroy(g.rng);
  free(buf);
  if (!ok) {
    fprintf(stderr, "gen-criteo: write failed: %s\n", strerror(errno));
    return 1;
  }
  return 0;
}
