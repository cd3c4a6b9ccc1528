/* test_secrets.c -- secrets do not outlive their use.
 *
 * End to end, against the real daemons:
 *
 *   - The mask generator's memory. o3m-pmg serves a federation of d = 100
 *     (the active "shop" and the passive "bank", "telco", "insurer" and
 *     "mall", 20 columns each). The test fetches every block as its party
 *     (with that party's certificate and a key pair of its own), confirms
 *     them all, waits until the PMG logs that Q is forgotten, and then reads
 *     the PMG's whole readable memory as its parent (/proc/PID/maps and
 *     /proc/PID/mem; root reads a non-dumpable process). The blocks put
 *     together are Q, so it searches for every row of every block (its d_j
 *     consecutive doubles), every row of Q, and every pair of adjacent
 *     values along a row or a column of Q (a partial or transposed copy),
 *     each as little-endian binary64 (the memory, wire and disk form) and
 *     byte-reversed, and every value of Q as the text "%.17g" prints
 *     (its first 14 characters). Nothing may be found. Before the fix a
 *     scan found whole rows in gRPC reply slices freed without being wiped.
 *   - No core dumps, no ptrace. /proc/PID/limits of every daemon shows a
 *     core file size of 0 (soft and hard), and an o3m-pmg started by an
 *     unprivileged user cannot be read (/proc/PID/mem) or attached
 *     (PTRACE_SEIZE) by that same user, its parent, which it could if the
 *     daemon were dumpable.
 *   - A block is served once per party. A second GetBlock by a party that
 *     has confirmed is refused (FAILED_PRECONDITION, O3M_ESTATE) and logged
 *     at WARN naming the party; a repeat before the confirmation is served;
 *     --keep-mask serves it after the confirmation too.
 *
 * The fetch helper accepts a block in the clear (Block.data) as well as a
 * sealed one, only so that the memory scan can also run against an
 * unfixed (protocol 2) o3m-pmg and show the rows it leaves behind. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fed_proc.h"
#include "o3m.pb-c.h"
#include "o3m_bytes.h"
#include "o3m_rpc.h"
#include "o3m_seal.h"
#include "o3m_wire.h"

#include <sodium.h>

#define D 100
#define DJ 20
#define M 5

static const char *const k_party[M] = {"shop", "bank", "telco", "insurer", "mall"};

TestSuite(secrets, .fini = fed_cleanup, .timeout = 120);

typedef struct pmg {
  fed_proc proc;
  char target[64];
  char config[512];
  o3m_partition part;
  unsigned char fingerprint[O3M_FINGERPRINT_BYTES]; /* of config */
} pmg;

/* The federation's config text for a PMG on port, pmg_port and the five
 * column parties on other ports (nothing listens there). */
static void config_text(char *buf, size_t n, int pmg_port) {
  int len = snprintf(buf, n,
                     "[federation]\nd = %d\nca = certs/ca.pem\n"
                     /* Only the PMG runs with this config. */
                     "aggregation = per-party\n"
                     "[policy]\nalgo = linucb\nmodel = shared\n"
                     "[party pmg]\nrole = pmg\naddress = 127.0.0.1:%d\n"
                     "cert = certs/pmg.pem\nkey = certs/pmg.key\n",
                     D, pmg_port);
  for (int j = 0; j < M; j++)
    len += snprintf(buf + len, n - (size_t)len,
                    "[party %s]\nrole = %s\naddress = 127.0.0.1:%d\ndims = %d\n"
                    "%scert = certs/%s.pem\nkey = certs/%s.key\n",
                    k_party[j], j == 0 ? "active" : "passive", fed_free_port(), DJ,
                    j == 0 ? "" : "user_table = users.csv\n", k_party[j], k_party[j]);
  cr_assert_lt((size_t)len, n);
}

/* Certificates, the config and a running o3m-pmg with the extra flags. */
static void start(pmg *f, const char *const *extra) {
  fed_make_certs("certs", "pmg shop bank telco insurer mall");
  char text[4096];
  int port = fed_free_port();
  config_text(text, sizeof text, port);
  snprintf(f->config, sizeof f->config, "%s", fed_write("fed.conf", text));
  fed_fingerprint(f->config, f->fingerprint);
  int dims[M];
  for (int j = 0; j < M; j++) dims[j] = DJ;
  o3m_err e;
  cr_assert_eq(o3m_partition_from_dims(&f->part, M, dims, &e), 0);
  const char *args[16] = {"--config", f->config, "--party", "pmg"};
  int n = 4;
  for (int i = 0; extra && extra[i]; i++) args[n++] = extra[i];
  args[n] = NULL;
  fed_spawn(&f->proc, "pmg", "o3m-pmg", args);
  cr_assert_eq(fed_wait_ready(&f->proc, 20000), port);
  snprintf(f->target, sizeof f->target, "127.0.0.1:%d", port);
}

static o3m_rpc_client *as(const pmg *f, int j) {
  return fed_client(f->target, "certs", "certs", k_party[j], "pmg", 10000);
}

/* GetBlock of party j as party j, with a key pair drawn here. On success
 * the d x DJ values are copied to out (row-major) and 0 is returned.
 * *clear (may be NULL) says whether the generator sent them in the clear,
 * which only an unfixed (protocol 2) generator does. */
static int fetch(const pmg *f, int j, double *out, int *clear, o3m_err *e) {
  o3m_rpc_client *c = as(f, j);
  o3m_seal_key *key;
  cr_assert_eq(o3m_seal_key_create(&key), 0);
  O3m__V1__BlockRequest req = O3M__V1__BLOCK_REQUEST__INIT;
  o3m_wire_block_request_fill(&req, &f->part, j, key, f->fingerprint);
  ProtobufCMessage *m;
  o3m_err_clear(e);
  int rc = o3m_rpc_client_call(c, O3M_PATH_PMG_GET_BLOCK, &req.base, &o3m__v1__block__descriptor,
                               &m, e);
  if (rc == 0) {
    const O3m__V1__Block *b = (const O3m__V1__Block *)m;
    if (clear) *clear = b->n_data > 0;
    if (b->n_data > 0) {
      cr_assert_eq(b->n_data, (size_t)D * DJ);
      memcpy(out, b->data, sizeof(double) * D * DJ);
    } else {
      o3m_block *blk;
      rc = o3m_wire_block_import(&blk, b, &f->part, j, key, e);
      if (rc == 0) {
        memcpy(out, o3m_block_data(blk), sizeof(double) * D * DJ);
        o3m_block_destroy(blk);
      }
    }
  }
  o3m_seal_key_destroy(key);
  o3m_rpc_client_destroy(c);
  return rc;
}

static int confirm(const pmg *f, int j, uint64_t mask_id, o3m_err *e) {
  o3m_rpc_client *c = as(f, j);
  O3m__V1__BlockReceipt r = O3M__V1__BLOCK_RECEIPT__INIT;
  r.party = (uint32_t)j;
  r.mask_id = mask_id;
  ProtobufCMessage *m;
  o3m_err_clear(e);
  int rc = o3m_rpc_client_call(c, O3M_PATH_PMG_CONFIRM_BLOCK, &r.base, &o3m__v1__ack__descriptor,
                               &m, e);
  o3m_rpc_client_destroy(c);
  return rc;
}

static uint64_t mask_id_of(const pmg *f) {
  o3m_rpc_client *c = as(f, 0);
  O3m__V1__InfoRequest req = O3M__V1__INFO_REQUEST__INIT;
  ProtobufCMessage *m;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert_eq(o3m_rpc_client_call(c, O3M_PATH_PMG_INFO, &req.base,
                                   &o3m__v1__node_info__descriptor, &m, &e),
               0, "Info: %s", o3m_err_message(&e));
  uint64_t id = ((const O3m__V1__NodeInfo *)m)->mask_id;
  o3m_rpc_client_destroy(c);
  return id;
}

/* The whole log of p (fed_log shows only its beginning); the caller frees
 * it. */
static char *read_log(const fed_proc *p) {
  FILE *fp = fopen(p->log, "r");
  cr_assert_not_null(fp, "%s: %s", p->log, strerror(errno));
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap);
  cr_assert_not_null(buf);
  size_t got;
  while ((got = fread(buf + n, 1, cap - 1 - n, fp)) > 0) {
    n += got;
    if (n + 1 == cap) {
      cap *= 2;
      buf = realloc(buf, cap);
      cr_assert_not_null(buf);
    }
  }
  fclose(fp);
  buf[n] = '\0';
  return buf;
}

static int log_has(const fed_proc *p, const char *what) {
  char *log = read_log(p);
  int yes = strstr(log, what) != NULL;
  free(log);
  return yes;
}

static void wait_for_log(const fed_proc *p, const char *what, int timeout_ms) {
  for (int waited = 0; !log_has(p, what); waited += 50) {
    cr_assert_lt(waited, timeout_ms, "no '%s' in the log of %s after %d ms:\n%s", what, p->name,
                 timeout_ms, fed_log(p));
    fed_sleep_ms(50);
  }
}

/* ------------------------------------------------------------ memory scan */

/* A set of byte patterns (8 bytes or longer), each with a tag saying what
 * it is, indexed by its first 8 bytes so that a scan looks up every byte
 * offset of memory once. */
enum { P_BLOCK_ROW, P_Q_ROW, P_ROW_PAIR, P_COL_PAIR, P_TEXT, P_AGG, P_KINDS };
static const char *const k_kind[P_KINDS] = {"block rows (d_j doubles)", "Q rows (d doubles)",
                                            "pairs along a row", "pairs along a column",
                                            "values as %.17g text",
                                            "secure aggregation secrets"};

typedef struct pattern {
  uint64_t first;        /* its first 8 bytes, as a native word */
  const unsigned char *bytes;
  size_t len;
  int kind;              /* P_* */
  int id;                /* block row (j * D + r), Q row, pair or value index */
  int big_endian;        /* byte-reversed form */
  int found;
  unsigned long where;   /* address of its first occurrence */
} pattern;

typedef struct pattern_set {
  pattern *p;
  int n, cap;
  unsigned char *arena;  /* the bytes of every pattern */
  size_t arena_used, arena_cap;
  int *table;            /* open addressing over first words: index + 1 of a chain head */
  int *next;             /* the chain of patterns with the same hash slot */
  size_t mask;
} pattern_set;

static void set_add(pattern_set *s, const void *bytes, size_t len, int kind, int id, int be) {
  cr_assert_geq(len, 8);
  if (s->n == s->cap) {
    s->cap = s->cap ? 2 * s->cap : 1024;
    s->p = realloc(s->p, sizeof *s->p * (size_t)s->cap);
    cr_assert_not_null(s->p);
  }
  cr_assert_leq(s->arena_used + len, s->arena_cap, "pattern arena too small");
  unsigned char *dst = s->arena + s->arena_used;
  memcpy(dst, bytes, len);
  s->arena_used += len;
  pattern *p = &s->p[s->n++];
  memcpy(&p->first, dst, 8);
  p->bytes = dst;
  p->len = len;
  p->kind = kind;
  p->id = id;
  p->big_endian = be;
  p->found = 0;
}

static size_t hash_word(uint64_t w, size_t mask) {
  return (size_t)((w * 0x9e3779b97f4a7c15ull) >> 40) & mask;
}

static void set_index(pattern_set *s) {
  size_t slots = 1;
  while (slots < 4 * (size_t)s->n) slots <<= 1;
  s->mask = slots - 1;
  s->table = calloc(slots, sizeof *s->table);
  s->next = calloc((size_t)s->n, sizeof *s->next);
  cr_assert(s->table && s->next);
  for (int i = 0; i < s->n; i++) {
    size_t h = hash_word(s->p[i].first, s->mask);
    s->next[i] = s->table[h];
    s->table[h] = i + 1;
  }
}

static void set_free(pattern_set *s) {
  free(s->p);
  free(s->arena);
  free(s->table);
  free(s->next);
  memset(s, 0, sizeof *s);
}

/* Adds v (n doubles) as little-endian binary64 and byte-reversed. */
static void add_doubles(pattern_set *s, const double *v, size_t stride, int n, int kind, int id) {
  unsigned char le[8 * D], be[8 * D];
  for (int i = 0; i < n; i++) {
    uint64_t bits = o3m_double_bits(v[(size_t)i * stride]);
    o3m_put_le64(le + 8 * i, bits);
    for (int k = 0; k < 8; k++) be[8 * i + k] = le[8 * i + 7 - k];
  }
  set_add(s, le, 8 * (size_t)n, kind, id, 0);
  set_add(s, be, 8 * (size_t)n, kind, id, 1);
}

/* Every form of Q (d x d row-major; block j is columns 20j..20j+19) that
 * the scan looks for. */
static void build_patterns(pattern_set *s, const double *Q) {
  memset(s, 0, sizeof *s);
  s->arena_cap = (size_t)1 << 23;
  s->arena = malloc(s->arena_cap);
  cr_assert_not_null(s->arena);
  for (int j = 0; j < M; j++)
    for (int r = 0; r < D; r++)
      add_doubles(s, Q + (size_t)r * D + j * DJ, 1, DJ, P_BLOCK_ROW, j * D + r);
  for (int r = 0; r < D; r++) add_doubles(s, Q + (size_t)r * D, 1, D, P_Q_ROW, r);
  for (int r = 0; r < D; r++)
    for (int c = 0; c + 1 < D; c++) {
      add_doubles(s, Q + (size_t)r * D + c, 1, 2, P_ROW_PAIR, r * D + c);
      add_doubles(s, Q + (size_t)c * D + r, D, 2, P_COL_PAIR, c * D + r);
    }
  for (int i = 0; i < D * D; i++) {
    char txt[40];
    snprintf(txt, sizeof txt, "%.17g", Q[i]);
    /* %g drops trailing zeros; a text shorter than 8 is too common to
     * search for (a value of Q is such a text with probability ~1e-9). */
    size_t len = strlen(txt) < 14 ? strlen(txt) : 14;
    if (len >= 8) set_add(s, txt, len, P_TEXT, i, 0);
  }
  set_index(s);
}

/* Marks every pattern that occurs in buf[0..n) at an offset below limit
 * (the rest of buf is the overlap with the next chunk). */
static void scan_buffer(pattern_set *s, const unsigned char *buf, size_t n, size_t limit,
                        unsigned long base) {
  for (size_t i = 0; i + 8 <= n && i < limit; i++) {
    uint64_t w;
    memcpy(&w, buf + i, 8);
    int k = s->table[hash_word(w, s->mask)];
    while (k) {
      pattern *p = &s->p[k - 1];
      if (p->first == w && i + p->len <= n && memcmp(buf + i, p->bytes, p->len) == 0 &&
          !p->found++)
        p->where = base + i;
      k = s->next[k - 1];
    }
  }
}

typedef struct scan_stats {
  int regions;
  size_t bytes;
  char maps[1 << 16]; /* the start of /proc/PID/maps, to name where a hit lies */
} scan_stats;

/* The line of st->maps whose range holds addr (static buffer). */
static const char *region_of(const scan_stats *st, unsigned long addr) {
  static char line[256];
  for (const char *l = st->maps; *l;) {
    const char *end = strchr(l, '\n');
    size_t n = end ? (size_t)(end - l) : strlen(l);
    unsigned long lo, hi;
    if (sscanf(l, "%lx-%lx", &lo, &hi) == 2 && lo <= addr && addr < hi) {
      snprintf(line, sizeof line, "%.*s", (int)(n < 255 ? n : 255), l);
      return line;
    }
    l += n + (end != NULL);
  }
  return "(a region not listed)";
}

/* A whole address space is not scanned under ASan (fed_proc.h, FED_ASAN). */
#define SKIP_SCAN_UNDER_ASAN()                                                                 \
  do {                                                                                         \
    if (FED_ASAN)                                                                              \
      cr_skip_test("a whole-memory scan is not run under AddressSanitizer (its shadow)");      \
  } while (0)

/* Reads every readable mapping of pid through /proc/PID/mem and scans it. */
static void scan_process(pattern_set *s, pid_t pid, scan_stats *st) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
  FILE *maps = fopen(path, "r");
  cr_assert_not_null(maps, "%s: %s", path, strerror(errno));
  snprintf(path, sizeof path, "/proc/%d/mem", (int)pid);
  int mem = open(path, O_RDONLY | O_CLOEXEC);
  cr_assert_geq(mem, 0, "%s: %s (the test must run as root to read a non-dumpable daemon)", path,
                strerror(errno));
  enum { CHUNK = 1 << 20, OVERLAP = 8 * D };
  unsigned char *buf = malloc(CHUNK + OVERLAP);
  cr_assert_not_null(buf);
  st->regions = 0;
  st->bytes = 0;
  st->maps[0] = '\0';
  char line[1024];
  size_t kept = 0;
  while (fgets(line, sizeof line, maps)) {
    size_t len = strlen(line);
    if (kept + len < sizeof st->maps) memcpy(st->maps + kept, line, len + 1), kept += len;
    unsigned long lo, hi;
    char perms[8];
    if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) != 3 || perms[0] != 'r') continue;
    if (strstr(line, "[vvar]") || strstr(line, "[vsyscall]")) continue;
    int read_any = 0;
    for (unsigned long at = lo; at < hi; at += CHUNK) {
      size_t want = hi - at < (unsigned long)CHUNK + OVERLAP ? hi - at : CHUNK + OVERLAP;
      ssize_t got = pread(mem, buf, want, (off_t)at);
      if (got <= 0) break;
      read_any = 1;
      size_t limit = (size_t)got < CHUNK ? (size_t)got : CHUNK;
      scan_buffer(s, buf, (size_t)got, limit, at);
      st->bytes += limit;
    }
    st->regions += read_any;
  }
  free(buf);
  close(mem);
  fclose(maps);
}

/* The core file size limits of pid from /proc/PID/limits, as text. */
static void core_limits(pid_t pid, char *soft, char *hard) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/limits", (int)pid);
  FILE *f = fopen(path, "r");
  cr_assert_not_null(f, "%s: %s", path, strerror(errno));
  char line[256];
  soft[0] = hard[0] = '\0';
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, "Max core file size", 18)) sscanf(line + 18, "%31s %31s", soft, hard);
  fclose(f);
  cr_assert(soft[0] && hard[0], "%s has no core file size line", path);
}

static void assert_no_core(const fed_proc *p) {
  char soft[32], hard[32];
  core_limits(p->pid, soft, hard);
  cr_assert(!strcmp(soft, "0") && !strcmp(hard, "0"),
            "%s (pid %d) may write a core file: core file size %s (soft) %s (hard)", p->name,
            (int)p->pid, soft, hard);
}

Test(secrets, pmg_memory_holds_no_block_after_q_is_forgotten) {
  SKIP_SCAN_UNDER_ASAN();
  cr_assert_eq(geteuid(), 0, "reading a daemon's memory needs root (CAP_SYS_PTRACE)");
  pmg f;
  start(&f, NULL);
  double *Q = malloc(sizeof(double) * D * D);
  double *blk = malloc(sizeof(double) * D * DJ);
  cr_assert(Q && blk);
  uint64_t id = mask_id_of(&f);
  int clear = 0;
  for (int j = 0; j < M; j++) {
    o3m_err e;
    cr_assert_eq(fetch(&f, j, blk, &clear, &e), 0, "GetBlock of %s: %s", k_party[j],
                 o3m_err_message(&e));
    for (int r = 0; r < D; r++) memcpy(Q + (size_t)r * D + j * DJ, blk + (size_t)r * DJ, 8 * DJ);
  }
  if (clear) printf("secrets: this o3m-pmg sends blocks in the clear (protocol 2)\n");
  for (int j = 0; j < M; j++) {
    o3m_err e;
    cr_assert_eq(confirm(&f, j, id, &e), 0, "ConfirmBlock of %s: %s", k_party[j],
                 o3m_err_message(&e));
  }
  wait_for_log(&f.proc, "Q forgotten", 10000);

  pattern_set s;
  build_patterns(&s, Q);
  scan_stats st;
  double t0 = fed_now_s();
  scan_process(&s, f.proc.pid, &st);
  int searched[P_KINDS] = {0}, found[P_KINDS] = {0}, rows_hit[M * D] = {0};
  /* A form counts once per id, whichever byte order hit; the byte-reversed
   * pattern follows its little-endian one (text has one form). */
  for (int i = 0; i < s.n; i++) {
    const pattern *p = &s.p[i];
    if (p->big_endian) continue;
    int hit = p->found || (p->kind != P_TEXT && s.p[i + 1].found);
    searched[p->kind]++;
    found[p->kind] += hit;
    if (hit && p->kind == P_ROW_PAIR) rows_hit[(p->id % D) / DJ * D + p->id / D] = 1;
    if (hit && p->kind == P_BLOCK_ROW) rows_hit[p->id] = 1;
  }
  int any_row = 0;
  for (int i = 0; i < M * D; i++) any_row += rows_hit[i];
  printf("secrets: scanned %.1f MB in %d regions of o3m-pmg (pid %d) in %.1f s after 'Q "
         "forgotten'\n", (double)st.bytes / 1e6, st.regions, (int)f.proc.pid,
         fed_now_s() - t0);
  int total = 0;
  for (int k = 0; k < P_KINDS; k++) {
    printf("secrets:   %-28s found %5d of %5d\n", k_kind[k], found[k], searched[k]);
    total += found[k];
  }
  printf("secrets:   block rows found whole or in part: %d of %d\n", any_row, M * D);
  int shown = 0;
  for (int i = 0; i < s.n && shown < 20; i++)
    if (s.p[i].found) {
      shown++;
      printf("secrets:   hit: %s id %d%s at 0x%lx in %s\n", k_kind[s.p[i].kind], s.p[i].id,
             s.p[i].big_endian ? " (byte-reversed)" : "", s.p[i].where,
             region_of(&st, s.p[i].where));
    }

  cr_assert_gt(st.bytes, (size_t)1 << 20, "only %zu bytes could be read", st.bytes);
  cr_assert_eq(total, 0,
               "the mask generator still holds the mask after forgetting it: %d of %d block rows "
               "whole, %d of %d Q rows, %d row pairs, %d column pairs, %d values as text",
               found[P_BLOCK_ROW], searched[P_BLOCK_ROW], found[P_Q_ROW], searched[P_Q_ROW],
               found[P_ROW_PAIR], found[P_COL_PAIR], found[P_TEXT]);
  set_free(&s);
  free(Q);
  free(blk);
  cr_assert_eq(fed_stop(&f.proc, SIGTERM, 5000), 0, "%s", fed_log(&f.proc));
}

/* The scan can fail: it finds every form of a block that a process holds.
 * A forked child keeps three rows of block 2 as little-endian doubles, one
 * row byte-reversed, one pair along a column and one value as text, and
 * wipes its copy of Q; the patterns are built only after the fork, so the
 * child has none of them. */
Test(secrets, the_scan_finds_what_a_process_holds) {
  SKIP_SCAN_UNDER_ASAN();
  cr_assert_eq(geteuid(), 0, "reading another process's memory needs root");
  double *Q = malloc(sizeof(double) * D * D);
  cr_assert_not_null(Q);
  o3m_rng *r;
  cr_assert_eq(o3m_rng_create_seeded_insecure(&r, 99), 0);
  cr_assert_eq(o3m_rng_gaussian(r, Q, D * D), 0);
  o3m_rng_destroy(r);
  for (int i = 0; i < D * D; i++) Q[i] *= 0.1; /* about the size of an orthogonal Q's entries */
  enum { HELD = 4096 };
  unsigned char *held = malloc(HELD);
  cr_assert_not_null(held);
  memset(held, 0, HELD);
  size_t at = 3; /* unaligned, as in a packed message */
  for (int i = 0; i < 3; i++)
    for (int c = 0; c < DJ; c++, at += 8)
      o3m_put_le64(held + at, o3m_double_bits(Q[(size_t)(10 + i) * D + 2 * DJ + c]));
  for (int c = 0; c < DJ; c++, at += 8)
    for (int k = 0; k < 8; k++)
      held[at + (size_t)k] =
          (unsigned char)(o3m_double_bits(Q[13 * D + 2 * DJ + c]) >> (8 * (7 - k)));
  for (int i = 0; i < 2; i++, at += 8)
    o3m_put_le64(held + at, o3m_double_bits(Q[(5 + i) * D + 77]));
  at += (size_t)snprintf((char *)held + at, HELD - at, "x=%.17g;", Q[42 * D + 42]);
  cr_assert_lt(at, (size_t)HELD);

  pid_t child = fork();
  cr_assert_geq(child, 0);
  if (child == 0) {
    explicit_bzero(Q, sizeof(double) * D * D);
    for (;;) pause();
  }
  explicit_bzero(held, HELD);
  pattern_set s;
  build_patterns(&s, Q);
  scan_stats st;
  scan_process(&s, child, &st);
  kill(child, SIGKILL);
  waitpid(child, NULL, 0);

  int whole_le = 0, whole_be = 0, col_pair = 0, text = 0;
  for (int i = 0; i < s.n; i++) {
    const pattern *p = &s.p[i];
    if (!p->found) continue;
    if (p->kind == P_BLOCK_ROW) {
      int want = p->big_endian ? p->id == 2 * D + 13 : p->id >= 2 * D + 10 && p->id <= 2 * D + 12;
      cr_assert(want, "block row %d (%s) found, the child does not hold it", p->id,
                p->big_endian ? "byte-reversed" : "little-endian");
      *(p->big_endian ? &whole_be : &whole_le) += 1;
    }
    col_pair += p->kind == P_COL_PAIR && p->id == 5 * D + 77;
    text += p->kind == P_TEXT && p->id == 42 * D + 42;
  }
  printf("secrets: self-check: scanned %.1f MB of a child: %d rows, %d byte-reversed row, %d "
         "column pair, %d text value found\n", (double)st.bytes / 1e6, whole_le, whole_be,
         col_pair, text);
  cr_assert_eq(whole_le, 3);
  cr_assert_eq(whole_be, 1);
  cr_assert_eq(col_pair, 1);
  cr_assert_eq(text, 1);
  set_free(&s);
  free(held);
  free(Q);
}

Test(secrets, every_daemon_refuses_core_dumps) {
  fed_net n;
  fed_setup setup = {.table_seed = 7, .pp1_users = FED_USERS, .deadline_ms = 2000,
                     .policy = "algo = linucb\nmodel = shared\n", .pending_capacity = 100};
  fed_net_prepare(&n, &setup);
  static const char *const ap_args[] = {"--pmg-timeout-s", "30", NULL};
  fed_net_start(&n, FED_PMG, NULL);
  fed_net_start(&n, FED_PP1, NULL);
  fed_net_start(&n, FED_PP2, NULL);
  fed_net_start(&n, FED_AP, ap_args);
  for (int p = 0; p < FED_N_PARTIES; p++) fed_wait_ready(&n.proc[p], 30000);
  for (int p = 0; p < FED_N_PARTIES; p++) assert_no_core(&n.proc[p]);
  for (int p = FED_N_PARTIES - 1; p >= 0; p--)
    cr_assert_eq(fed_stop(&n.proc[p], SIGTERM, 10000), 0, "%s", fed_log(&n.proc[p]));
}

/* A passive party's secure aggregation secrets (o3m_secagg.h) do not
 * outlive their use: once pp1 serves, neither its secret key (the 32 bytes
 * of its key file, read into guarded memory and wiped after the pair keys
 * are derived) nor its X25519 shared secret with pp2 (wiped at once) is
 * anywhere in its memory, freed or not. */
Test(secrets, pp_memory_holds_no_agg_secret_key_or_shared_secret) {
  SKIP_SCAN_UNDER_ASAN();
  cr_assert_eq(geteuid(), 0, "reading a daemon's memory needs root (CAP_SYS_PTRACE)");
  fed_net n;
  fed_setup setup = {.table_seed = 8, .pp1_users = FED_USERS, .deadline_ms = 2000,
                     .policy = "algo = linucb\nmodel = shared\n", .pending_capacity = 100};
  fed_net_prepare(&n, &setup);
  fed_net_start(&n, FED_PMG, NULL);
  fed_net_start(&n, FED_PP1, NULL);
  fed_net_start(&n, FED_PP2, NULL);
  for (int p = FED_PMG; p <= FED_PP2; p++)
    if (p != FED_AP) fed_wait_ready(&n.proc[p], 30000);
  cr_assert(log_has(&n.proc[FED_PP1], "secure aggregation among 2 passive parties"), "%s",
            fed_log(&n.proc[FED_PP1]));
  unsigned char sk1[32], sk2[32], pk2[32], shared[32];
  FILE *f = fopen(fed_path("pp1.agg"), "rb");
  cr_assert_not_null(f);
  cr_assert_eq(fread(sk1, 1, 32, f), 32);
  fclose(f);
  f = fopen(fed_path("pp2.agg"), "rb");
  cr_assert_not_null(f);
  cr_assert_eq(fread(sk2, 1, 32, f), 32);
  fclose(f);
  crypto_scalarmult_base(pk2, sk2);
  cr_assert_eq(crypto_scalarmult(shared, sk1, pk2), 0);
  pattern_set s = {0};
  s.arena_cap = 64;
  s.arena = malloc(s.arena_cap);
  cr_assert_not_null(s.arena);
  set_add(&s, sk1, 32, P_AGG, 0, 0);
  set_add(&s, shared, 32, P_AGG, 1, 0);
  set_index(&s);
  scan_stats *st = calloc(1, sizeof *st);
  cr_assert_not_null(st);
  scan_process(&s, n.proc[FED_PP1].pid, st);
  printf("secrets: scanned %.1f MB of pp1 (%d regions) for its agg secret key and shared "
         "secret\n", st->bytes / 1e6, st->regions);
  cr_assert_gt(st->bytes, 1000000);
  for (int i = 0; i < s.n; i++)
    cr_assert(!s.p[i].found, "pp1 holds its %s at %#lx: %s",
              s.p[i].id ? "X25519 shared secret with pp2" : "agg secret key", s.p[i].where,
              region_of(st, s.p[i].where));
  free(st);
  set_free(&s);
  sodium_memzero(sk1, sizeof sk1);
  sodium_memzero(sk2, sizeof sk2);
  for (int p = FED_PP2; p >= FED_PMG; p--)
    if (p != FED_AP) fed_stop(&n.proc[p], SIGTERM, 10000);
}

/* What the unprivileged prober reports in its exit code. */
enum { PROBE_MEM_OPENED = 1, PROBE_PTRACE_SEIZED = 2, PROBE_CORE_ALLOWED = 4, PROBE_SETUP = 64 };

static void sleep_ms_raw(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* The forked prober: becomes nobody, starts o3m-pmg as its own child
 * (argv), waits for its ready file and tries what an unprivileged
 * user could do to its own dumpable process. Only async-signal-safe calls:
 * the test process may have threads. Never returns. */
static void probe_child(char *const *argv, const char *ready, int log_fd, pid_t test) {
  /* The death signal is cleared by a change of credentials: set it after. */
  if (setgroups(0, NULL) != 0 || setgid(65534) != 0 || setuid(65534) != 0) _exit(PROBE_SETUP);
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != test) _exit(PROBE_SETUP);
  pid_t pmg = fork();
  if (pmg < 0) _exit(PROBE_SETUP);
  if (pmg == 0) {
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) _exit(127);
    if (dup2(log_fd, 1) < 0 || dup2(log_fd, 2) < 0) _exit(127);
    execv(argv[0], argv);
    _exit(127);
  }
  int ok = 0;
  for (int waited = 0; waited < 20000 && !ok; waited += 20) {
    ok = access(ready, F_OK) == 0;
    if (!ok) sleep_ms_raw(20);
  }
  int code = 0;
  if (!ok) {
    code = PROBE_SETUP;
  } else {
    char path[64] = "/proc/", digits[16];
    int n = 0;
    for (pid_t v = pmg; v > 0; v /= 10) digits[n++] = (char)('0' + v % 10);
    size_t at = strlen(path);
    while (n > 0) path[at++] = digits[--n];
    path[at] = '\0';
    char mem[64], limits[64];
    memcpy(mem, path, at);
    memcpy(mem + at, "/mem", 5);
    memcpy(limits, path, at);
    memcpy(limits + at, "/limits", 8);
    int fd = open(mem, O_RDONLY);
    if (fd >= 0) {
      code |= PROBE_MEM_OPENED;
      close(fd);
    }
    if (ptrace(PTRACE_SEIZE, pmg, 0, 0) == 0) code |= PROBE_PTRACE_SEIZED;
    fd = open(limits, O_RDONLY);
    char text[4096];
    ssize_t got = fd >= 0 ? read(fd, text, sizeof text - 1) : -1;
    if (fd >= 0) close(fd);
    if (got <= 0) {
      code |= PROBE_SETUP;
    } else {
      text[got] = '\0';
      const char *line = strstr(text, "Max core file size");
      if (!line) code |= PROBE_SETUP;
      else {
        line += 18;
        while (*line == ' ') line++;
        if (line[0] != '0' || line[1] != ' ') code |= PROBE_CORE_ALLOWED;
      }
    }
  }
  kill(pmg, SIGKILL);
  waitpid(pmg, NULL, 0);
  _exit(code);
}

Test(secrets, an_unprivileged_user_cannot_read_or_attach_to_its_own_pmg) {
  cr_assert_eq(geteuid(), 0, "the test switches to the user nobody, which needs root");
  /* A corner of the test directory that nobody may use: the PMG runs as
   * nobody, in plaintext (no key files to read), and writes its ready file
   * there. */
  char dir[512];
  snprintf(dir, sizeof dir, "%s", fed_path("nobody"));
  cr_assert_eq(mkdir(dir, 0755), 0, "%s: %s", dir, strerror(errno));
  cr_assert_eq(chown(dir, 65534, 65534), 0, "%s: %s", dir, strerror(errno));
  cr_assert_eq(chmod(fed_dir(), 0711), 0);
  char text[4096], conf[600], ready[600], log[600], bin[600];
  config_text(text, sizeof text, fed_free_port());
  snprintf(conf, sizeof conf, "%s", fed_write("nobody/fed.conf", text));
  snprintf(ready, sizeof ready, "%s/pmg.ready", dir);
  snprintf(log, sizeof log, "%s/pmg.log", dir);
  snprintf(bin, sizeof bin, "%s/o3m-pmg", O3M_BIN_DIR);
  cr_assert_eq(chmod(conf, 0644), 0);
  int log_fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  cr_assert_geq(log_fd, 0);
  char *const argv[] = {bin,    "--config",     conf,  "--party", "pmg",
                        "--insecure", "--ready-file", ready, NULL};
  pid_t test = getpid();
  pid_t child = fork();
  cr_assert_geq(child, 0);
  if (child == 0) probe_child(argv, ready, log_fd, test);
  close(log_fd);
  int st;
  cr_assert_eq(waitpid(child, &st, 0), child);
  cr_assert(WIFEXITED(st), "the prober died of signal %d", WTERMSIG(st));
  int code = WEXITSTATUS(st);
  FILE *lf = fopen(log, "r");
  char shown[4096] = "";
  if (lf) {
    shown[fread(shown, 1, sizeof shown - 1, lf)] = '\0';
    fclose(lf);
  }
  cr_assert_eq(code & PROBE_SETUP, 0, "the prober could not start o3m-pmg as nobody:\n%s",
               shown);
  printf("secrets: as its own user (nobody): /proc/PID/mem %s, PTRACE_SEIZE %s, core file "
         "size %s\n", code & PROBE_MEM_OPENED ? "opened" : "refused",
         code & PROBE_PTRACE_SEIZED ? "attached" : "refused",
         code & PROBE_CORE_ALLOWED ? "not 0" : "0");
  cr_assert_eq(code & PROBE_MEM_OPENED, 0, "its own user opened /proc/PID/mem of o3m-pmg");
  cr_assert_eq(code & PROBE_PTRACE_SEIZED, 0, "its own user attached to o3m-pmg with ptrace");
  cr_assert_eq(code & PROBE_CORE_ALLOWED, 0, "o3m-pmg may write a core file");
}

Test(secrets, a_block_is_served_once_per_party) {
  pmg f;
  start(&f, NULL);
  uint64_t id = mask_id_of(&f);
  double *first = malloc(sizeof(double) * D * DJ), *again = malloc(sizeof(double) * D * DJ);
  cr_assert(first && again);
  o3m_err e;
  /* A repeat before the confirmation (a lost reply) is served, the same. */
  cr_assert_eq(fetch(&f, 1, first, NULL, &e), 0, "%s", o3m_err_message(&e));
  cr_assert_eq(fetch(&f, 1, again, NULL, &e), 0, "%s", o3m_err_message(&e));
  cr_assert_eq(memcmp(first, again, sizeof(double) * D * DJ), 0);
  cr_assert_eq(confirm(&f, 1, id, &e), 0, "%s", o3m_err_message(&e));
  cr_assert_eq(confirm(&f, 1, id, &e), 0, "a repeated confirmation: %s", o3m_err_message(&e));
  /* After it: refused, whoever's block is still out. */
  int rc = fetch(&f, 1, again, NULL, &e);
  cr_assert_eq(rc, O3M_ESTATE, "a second GetBlock after the confirmation got %s: %s",
               o3m_errname(rc), o3m_err_message(&e));
  cr_assert(strstr(e.msg, "already confirmed"), "%s", e.msg);
  wait_for_log(&f.proc, "WARN refused GetBlock of party 1 (bank)", 5000);
  cr_assert(log_has(&f.proc, "already confirmed its block"), "%s", fed_log(&f.proc));
  /* The others are not affected. */
  cr_assert_eq(fetch(&f, 2, again, NULL, &e), 0, "%s", o3m_err_message(&e));
  free(first);
  free(again);
  cr_assert_eq(fed_stop(&f.proc, SIGTERM, 5000), 0, "%s", fed_log(&f.proc));
}

Test(secrets, keep_mask_serves_a_block_again_after_the_confirmation) {
  pmg f;
  const char *keep[] = {"--keep-mask", NULL};
  start(&f, keep);
  double *first = malloc(sizeof(double) * D * DJ), *again = malloc(sizeof(double) * D * DJ);
  cr_assert(first && again);
  o3m_err e;
  uint64_t id = mask_id_of(&f);
  for (int j = 0; j < M; j++) {
    cr_assert_eq(fetch(&f, j, first, NULL, &e), 0, "%s", o3m_err_message(&e));
    cr_assert_eq(confirm(&f, j, id, &e), 0, "%s", o3m_err_message(&e));
  }
  cr_assert_eq(fetch(&f, M - 1, again, NULL, &e), 0, "--keep-mask: %s", o3m_err_message(&e));
  cr_assert_eq(memcmp(first, again, sizeof(double) * D * DJ), 0);
  cr_assert(!log_has(&f.proc, "refused GetBlock"), "%s", fed_log(&f.proc));
  free(first);
  free(again);
  cr_assert_eq(fed_stop(&f.proc, SIGTERM, 5000), 0, "%s", fed_log(&f.proc));
}
