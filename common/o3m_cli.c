/* o3m_cli.c -- see o3m_cli.h. The getopt_long table is made from the
 * spec's options: option i gets the code O3M_CLI_CODE0 + i, so that the
 * codes of the table never meet a character code; --help and --version come
 * last. */
#include "o3m_cli.h"

#include <assert.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "o3m_version.h"

#define O3M_CLI_CODE0 256
#define O3M_CLI_CODE_HELP 'h'
#define O3M_CLI_CODE_VERSION (O3M_CLI_CODE0 + O3M_CLI_MAX_OPTIONS)

void o3m_cli_begin(o3m_cli *cl, const o3m_cli_spec *spec, int argc, char **argv) {
  memset(cl, 0, sizeof *cl);
  cl->spec = spec;
  cl->argc = argc;
  cl->argv = argv;
  int n = 0;
  for (const o3m_cli_option *o = spec->options; o && o->name; o++, n++) {
    assert(n < O3M_CLI_MAX_OPTIONS);
    cl->longopts[n] = (struct option){o->name, o->value ? required_argument : no_argument, NULL,
                                      O3M_CLI_CODE0 + n};
  }
  cl->n_options = n;
  cl->longopts[n] = (struct option){"help", no_argument, NULL, O3M_CLI_CODE_HELP};
  cl->longopts[n + 1] = (struct option){"version", no_argument, NULL, O3M_CLI_CODE_VERSION};
  cl->longopts[n + 2] = (struct option){NULL, 0, NULL, 0};
  optind = 0; /* 0, not 1: glibc then also forgets the previous parse's state */
  opterr = 0; /* the messages below name the program and the option */
}

int o3m_cli_next(o3m_cli *cl, const char **value) {
  *value = NULL;
  /* The leading ':' makes a missing value ':' rather than '?'. */
  int ch = getopt_long(cl->argc, cl->argv, ":h", cl->longopts, NULL);
  if (ch == -1) return O3M_CLI_END;
  if (ch >= O3M_CLI_CODE0 && ch < O3M_CLI_CODE0 + cl->n_options) {
    *value = optarg;
    return ch - O3M_CLI_CODE0;
  }
  if (ch == O3M_CLI_CODE_HELP) {
    o3m_cli_help(cl->spec, stdout);
    cl->exit_code = O3M_CLI_EXIT_OK;
  } else if (ch == O3M_CLI_CODE_VERSION) {
    o3m_cli_version(cl->spec->prog, stdout);
    cl->exit_code = O3M_CLI_EXIT_OK;
  } else {
    /* optind is past the offending word, whichever the error. */
    const char *word = optind > 0 && optind <= cl->argc ? cl->argv[optind - 1] : "?";
    if (ch == ':')
      cl->exit_code = o3m_cli_usage_error(cl->spec, "%s needs a value", word);
    else if (optopt && optopt < O3M_CLI_CODE0)
      cl->exit_code = o3m_cli_usage_error(cl->spec, "unknown option '-%c'", optopt);
    else
      cl->exit_code = o3m_cli_usage_error(cl->spec, "unknown option '%s'", word);
  }
  return O3M_CLI_STOP;
}

int o3m_cli_operands(const o3m_cli *cl) {
  (void)cl; /* getopt_long keeps the position in optind */
  return optind;
}

/* One line of the option list: the option and its value in a column of 28
 * characters, then the help (on the next line if the option is wider). */
static void help_line(FILE *f, const char *name, const char *value, const char *help) {
  char left[128];
  snprintf(left, sizeof left, "--%s%s%s", name, value ? " " : "", value ? value : "");
  if (strlen(left) > 26)
    fprintf(f, "  %s\n  %-26s  %s\n", left, "", help);
  else
    fprintf(f, "  %-26s  %s\n", left, help);
}

void o3m_cli_help(const o3m_cli_spec *spec, FILE *f) {
  fprintf(f, "usage: %s %s\n", spec->prog, spec->synopsis);
  if (spec->about) fprintf(f, "%s\n", spec->about);
  fprintf(f, "\noptions:\n");
  for (const o3m_cli_option *o = spec->options; o && o->name; o++)
    help_line(f, o->name, o->value, o->help);
  help_line(f, "help", NULL, "print this help and exit");
  help_line(f, "version", NULL, "print the version and exit");
  if (spec->more) fprintf(f, "\n%s", spec->more);
  fprintf(f, "\nexit codes: %d ok, %d runtime failure, %d usage error\n", O3M_CLI_EXIT_OK,
          O3M_CLI_EXIT_FAILURE, O3M_CLI_EXIT_USAGE);
}

void o3m_cli_version(const char *prog, FILE *f) {
  fprintf(f, "%s %s (protocol %d)\n", prog, O3M_VERSION, O3M_VERSION_PROTOCOL);
}

/* Prints "PROG: message" and a newline on stderr. */
static void vreport(const char *prog, const char *fmt, va_list ap) {
  char msg[1024];
  vsnprintf(msg, sizeof msg, fmt, ap);
  fprintf(stderr, "%s: %s\n", prog, msg);
}

int o3m_cli_usage_error(const o3m_cli_spec *spec, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vreport(spec->prog, fmt, ap);
  va_end(ap);
  fprintf(stderr, "usage: %s %s\nTry '%s --help'.\n", spec->prog, spec->synopsis, spec->prog);
  return O3M_CLI_EXIT_USAGE;
}

int o3m_cli_fail(const char *prog, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vreport(prog, fmt, ap);
  va_end(ap);
  return O3M_CLI_EXIT_FAILURE;
}

int o3m_cli_parse_long(const char *s, long long lo, long long hi, long long *out) {
  if (!s || !*s) return -1;
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || *end || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

int o3m_cli_parse_int_list(const char *prog, const char *opt, const char *s, int lo, int hi,
                           int *out, int max) {
  int n = 0;
  for (const char *p = s;;) {
    char *end;
    errno = 0;
    long v = strtol(p, &end, 10);
    if (end == p || errno || v < lo || v > hi || (*end && *end != ',') || n == max) {
      fprintf(stderr, "%s: --%s: '%s': entry %d is not an integer in %d..%d (at most %d "
                      "entries)\n", prog, opt, s, n + 1, lo, hi, max);
      return -1;
    }
    out[n++] = (int)v;
    if (!*end) return n;
    p = end + 1;
  }
}

int o3m_cli_parse_double(const char *s, double lo, double hi, double *out) {
  if (!s || !*s) return -1;
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || *end || !isfinite(v) || !(v >= lo && v <= hi)) return -1;
  *out = v;
  return 0;
}

int o3m_cli_parse_double_list(const char *s, double lo, double hi, double *out, int max) {
  int n = 0;
  for (const char *p = s;;) {
    char *end;
    errno = 0;
    double v = strtod(p, &end);
    if (end == p || errno || !isfinite(v) || !(v >= lo && v <= hi) || (*end && *end != ',') ||
        n == max)
      return -(n + 1);
    out[n++] = v;
    if (!*end) return n;
    p = end + 1;
  }
}

int o3m_cli_split_list(char *s, char **out, int max) {
  int n = 0;
  for (char *p = s;;) {
    char *comma = strchr(p, ',');
    if (comma) *comma = '\0';
    while (*p == ' ' || *p == '\t') p++;
    size_t len = strlen(p);
    while (len > 0 && (p[len - 1] == ' ' || p[len - 1] == '\t')) p[--len] = '\0';
    if (len == 0 || n == max) return -(n + 1);
    out[n++] = p;
    if (!comma) return n;
    p = comma + 1;
  }
}

int o3m_cli_parse_u64(const char *s, unsigned long long *out) {
  if (!s || !*s || *s == '-' || *s == '+') return -1;
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 0);
  if (errno || *end) return -1;
  *out = v;
  return 0;
}

int o3m_cli_opt_long(const char *prog, const char *opt, const char *s, long long lo,
                     long long hi, long long *out) {
  if (!o3m_cli_parse_long(s, lo, hi, out)) return 0;
  fprintf(stderr, "%s: --%s: '%s' is not an integer in %lld..%lld\n", prog, opt, s, lo, hi);
  return -1;
}

int o3m_cli_opt_double(const char *prog, const char *opt, const char *s, double lo, double hi,
                       double *out) {
  if (!o3m_cli_parse_double(s, lo, hi, out)) return 0;
  if (lo == -DBL_MAX && hi == DBL_MAX)
    fprintf(stderr, "%s: --%s: '%s' is not a number\n", prog, opt, s);
  else
    fprintf(stderr, "%s: --%s: '%s' is not a number in [%g, %g]\n", prog, opt, s, lo, hi);
  return -1;
}
