/* o3m_cli.h -- the command line of every o3m binary: one table of options
 * with their help text, from which both the parser (getopt_long) and --help
 * are made, plus --version and the exit codes.
 *
 * A binary describes itself in an o3m_cli_spec: its name, a usage line, a
 * table of long options (name, the value's name or NULL for a flag, one line
 * of help) and optional text after the options (commands, notes). Then
 *
 *   o3m_cli cl;
 *   o3m_cli_begin(&cl, &spec, argc, argv);
 *   for (int i; (i = o3m_cli_next(&cl, &value)) != O3M_CLI_END;) {
 *     if (i == O3M_CLI_STOP) return cl.exit_code;
 *     switch (i) { case OPT_CONFIG: ... }   (indexes into spec.options)
 *   }
 *   operands: argv[o3m_cli_operands(&cl)] .. argv[argc - 1]
 *
 * --help (and -h) and --version are added to every table: they print to
 * stdout and stop with exit code 0. An unknown option or a missing value
 * prints "PROG: unknown option '--x'" (or "PROG: --x needs a value"), the
 * usage line and a pointer to --help on stderr, and stops with exit code 2.
 * Options and operands may come in any order (GNU getopt_long permutes
 * them); "--" ends the options.
 *
 * Exit codes, the same for every binary and listed in every --help:
 * O3M_CLI_EXIT_OK (0), O3M_CLI_EXIT_FAILURE (1, the work failed at run
 * time), O3M_CLI_EXIT_USAGE (2, the command line is wrong).
 *
 * The parser holds no state outside its o3m_cli (getopt_long's own globals
 * excepted: parse one command line at a time, on one thread) and allocates
 * nothing. */
#ifndef O3M_CLI_H
#define O3M_CLI_H

#include <getopt.h>
#include <stdio.h>

#define O3M_CLI_EXIT_OK 0
#define O3M_CLI_EXIT_FAILURE 1
#define O3M_CLI_EXIT_USAGE 2

/* Most options one table may hold (--help and --version not counted). */
#define O3M_CLI_MAX_OPTIONS 48

/* Returned by o3m_cli_next: every option is read / stop with exit_code. */
#define O3M_CLI_END (-1)
#define O3M_CLI_STOP (-2)

typedef struct o3m_cli_option {
  const char *name;  /* the long name without its dashes: "config" */
  const char *value; /* the value's name in --help ("FILE"); NULL: a flag */
  const char *help;  /* one line */
} o3m_cli_option;

typedef struct o3m_cli_spec {
  const char *prog;     /* "o3m-pmg": prefixes every message */
  const char *synopsis; /* what follows "usage: PROG " */
  const char *about;    /* one sentence under the usage line, or NULL */
  const o3m_cli_option *options; /* ends with a {NULL} entry; may be NULL */
  const char *more;     /* printed after the options (commands, notes), or NULL */
} o3m_cli_spec;

/* One parse of one command line. Callers read exit_code after O3M_CLI_STOP
 * and nothing else; the rest is the parser's. */
typedef struct o3m_cli {
  const o3m_cli_spec *spec;
  int argc;
  char **argv;
  int exit_code;
  int n_options;
  struct option longopts[O3M_CLI_MAX_OPTIONS + 3];
} o3m_cli;

/* Starts a parse of argv (argv[0] is skipped). spec and argv must outlive
 * the parse. A table longer than O3M_CLI_MAX_OPTIONS is a programming error
 * (assert). */
void o3m_cli_begin(o3m_cli *cl, const o3m_cli_spec *spec, int argc, char **argv);

/* The next option: its index in spec->options, with *value its value (NULL
 * for a flag); O3M_CLI_END when every option is read; O3M_CLI_STOP after
 * --help, --version or a usage error, with cl->exit_code set and the message
 * printed as described above. */
int o3m_cli_next(o3m_cli *cl, const char **value);

/* The index in argv of the first operand (argument that is not an option)
 * after O3M_CLI_END; argc if there is none. */
int o3m_cli_operands(const o3m_cli *cl);

/* Prints the whole help: usage line, about, one line per option (--help
 * and --version included), the more text and the exit codes. */
void o3m_cli_help(const o3m_cli_spec *spec, FILE *f);

/* Prints "PROG VERSION (protocol N)" and a newline (o3m_version.h). */
void o3m_cli_version(const char *prog, FILE *f);

/* Prints "PROG: message", the usage line and "Try 'PROG --help'." on
 * stderr; returns O3M_CLI_EXIT_USAGE. */
int o3m_cli_usage_error(const o3m_cli_spec *spec, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Prints "PROG: message" on stderr; returns O3M_CLI_EXIT_FAILURE. */
int o3m_cli_fail(const char *prog, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Parses a whole decimal integer s in lo..hi into *out: 0, or -1 (nothing
 * stored) if s is empty, has trailing characters or is out of range. */
int o3m_cli_parse_long(const char *s, long long lo, long long hi, long long *out);

/* Parses the value s of option --opt, a comma-separated list of whole
 * decimal integers each in lo..hi ("5,20,40"), into out (room for max
 * entries): returns the number of entries, at least 1. Otherwise prints
 * "PROG: --OPT: 'S': entry K is not an integer in LO..HI (at most MAX
 * entries)" on stderr, naming the first bad entry (empty, not such an
 * integer, or one too many), and returns -1; out may then hold the entries
 * before it, which callers must not use. */
int o3m_cli_parse_int_list(const char *prog, const char *opt, const char *s, int lo, int hi,
                           int *out, int max);

/* Parses a whole decimal floating-point number s (strtod's syntax) that is
 * finite and in lo..hi, both bounds included, into *out: 0, or -1 (nothing
 * stored) if s is empty, has trailing characters, overflows or underflows
 * (ERANGE), is not finite or is out of range. Open bounds (> 0) are the
 * caller's second test. */
int o3m_cli_parse_double(const char *s, double lo, double hi, double *out);

/* Parses a comma-separated list of finite decimal floating-point numbers
 * each in lo..hi, both bounds included ("0.5,1,2e-3"), into out (room for
 * max entries): returns the number of entries, at least 1. Otherwise
 * returns -K, K the first bad entry (1 for the first): empty, not such a
 * number (ERANGE included), out of range, or one too many; out may then
 * hold the entries before it, which callers must not use. Prints nothing:
 * each option keeps its own message. For an open bound "> 0" pass
 * DBL_TRUE_MIN, the least positive double. */
int o3m_cli_parse_double_list(const char *s, double lo, double hi, double *out, int max);

/* Splits a comma-separated list s in place into out (room for max
 * entries): every comma becomes '\0', blanks (spaces and tabs) around an
 * entry are cut, and out[i] points into s. Returns the number of entries,
 * at least 1. Otherwise returns -K, K the first bad entry (1 for the
 * first): empty after the cut ("a,,b", a trailing comma) or one too many;
 * s is then partly split and out may hold the entries before it, which
 * callers must not use. Prints nothing: each caller names its list. The
 * one splitter of address and name lists (AP targets, NATS URLs, --items). */
int o3m_cli_split_list(char *s, char **out, int max);

/* Parses a whole unsigned 64-bit integer s (decimal, 0x hex or 0 octal, no
 * sign) into *out: 0, or -1 (nothing stored). */
int o3m_cli_parse_u64(const char *s, unsigned long long *out);

/* o3m_cli_parse_long for the value s of option --opt: 0, or -1 (nothing
 * stored) after "PROG: --OPT: 'S' is not an integer in LO..HI" on stderr. */
int o3m_cli_opt_long(const char *prog, const char *opt, const char *s, long long lo,
                     long long hi, long long *out);

/* o3m_cli_parse_double for the value s of option --opt: 0, or -1 (nothing
 * stored) after "PROG: --OPT: 'S' is not a number in [LO, HI]" on stderr,
 * or "... is not a number" when the bounds are -DBL_MAX and DBL_MAX. */
int o3m_cli_opt_double(const char *prog, const char *opt, const char *s, double lo, double hi,
                       double *out);

#endif
