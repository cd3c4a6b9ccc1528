/* o3m_config.c -- parser of the federation config file (see o3m_config.h).
 *
 * Parsing runs in two passes over an owned copy of the text. The first pass
 * splits the copy in place into lines, strips comments and whitespace, and
 * records every section header and every `key = value` pair with its line;
 * it rejects what a single line can show to be wrong (syntax, unknown
 * sections, repeated sections, party names and keys). Keys and values then
 * point into the copy, which the config keeps, so most strings cost no
 * allocation. The second pass interprets each section through a table of key
 * specifications (type, range, destination offset, which roles may use the
 * key) and finally checks the structure of the whole federation.
 *
 * Only resolved paths that need a directory prefix are allocated separately;
 * they are kept in a list and freed with the config. */
#include "o3m_config.h"
#include "o3m_alloc.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A name for messages longer than this is shortened from the left, so that
 * "name:line: key 'k': ..." always fits in O3M_ERRMSG_MAX. */
#define NAME_SHOW_MAX 96
/* Values quoted in messages are cut to this many bytes. */
#define VALUE_SHOW_MAX 40

struct o3m_config {
  char *name;     /* for messages */
  char *base_dir; /* relative paths are resolved against it */
  char *text;     /* the split copy of the file; keys and values point here */

  int d;
  int deadline_ms;
  int insecure;
  int agg_secure;
  const char *ca;
  const char *metrics_clients; /* comma-separated CNs */
  o3m_config_rpc_limits rpc;
  const char *aggregation; /* "secure" or "per-party" */
  const char *fallback;    /* "local" or "none" */
  int epoch_changes_max;   /* per minute; 0: not watched (ap_epochwatch.h) */
  o3m_config_replication repl;
  o3m_config_policy_section policy;

  o3m_party *parties; /* file order */
  int n_parties;
  o3m_client *clients; /* file order */
  int n_clients;
  const o3m_party **column; /* active and passive parties in column order */
  int n_column;
  const o3m_party **passive;
  int n_passive;
  const o3m_party *pmg;
  const o3m_party *active;

  char **owned; /* allocated path strings */
  int n_owned;
  int cap_owned;
};

/* ---------------------------------------------------------------- pass 1 */

enum { SEC_FEDERATION = 1, SEC_POLICY = 2, SEC_PARTY = 3, SEC_CLIENT = 4 };

typedef struct entry {
  const char *key;
  const char *value;
  int line;
} entry;

/* A section owns the entries [first, first + n) of the parser's array,
 * because the entries of one section are consecutive lines. */
typedef struct section {
  int kind;
  const char *name; /* party or client name; NULL otherwise */
  int line;
  int first;
  int n;
} section;

typedef struct parser {
  o3m_config *c;
  o3m_err *e;
  entry *ents;
  int n_ents;
  int cap_ents;
  section *secs;
  int n_secs;
  int cap_secs;
  int n_party_secs;
  int n_client_secs;
} parser;

/* Sets e to O3M_EPARSE with "name:line: message" ("name: message" for line
 * 0) and returns O3M_EPARSE. */
#define perr(p, line, ...) o3m_err_set_at((p)->e, O3M_EPARSE, (p)->c->name, (line), __VA_ARGS__)

/* Copies s into buf (VALUE_SHOW_MAX + 4 bytes), cut with "..." if long, so
 * that a hostile value cannot push the line number out of the message. */
static const char *show(char *buf, const char *s) {
  size_t n = strlen(s);
  if (n <= VALUE_SHOW_MAX) {
    memcpy(buf, s, n + 1);
  } else {
    memcpy(buf, s, VALUE_SHOW_MAX);
    memcpy(buf + VALUE_SHOW_MAX, "...", 4);
  }
  return buf;
}

static int is_blank(char ch) { return ch == ' ' || ch == '\t'; }

/* Trims blanks at both ends of s in place and returns the new start. */
static char *trim(char *s) {
  while (is_blank(*s)) s++;
  size_t n = strlen(s);
  while (n > 0 && is_blank(s[n - 1])) s[--n] = '\0';
  return s;
}

/* Cuts a comment: '#' or ';' at the start of the (untrimmed) line or after a
 * blank. */
static void strip_comment(char *s) {
  for (char *q = s; *q; q++) {
    if ((*q == '#' || *q == ';') && (q == s || is_blank(q[-1]))) {
      *q = '\0';
      return;
    }
  }
}

static int valid_party_name(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n > O3M_CONFIG_MAX_NAME) return 0;
  for (const char *q = s; *q; q++)
    if (!(isalnum((unsigned char)*q) || *q == '_' || *q == '.' || *q == '-'))
      return 0;
  return 1;
}

static int valid_key(const char *s) {
  if (!*s) return 0;
  for (const char *q = s; *q; q++)
    if (!((*q >= 'a' && *q <= 'z') || (*q >= '0' && *q <= '9') || *q == '_'))
      return 0;
  return 1;
}

/* "party" or "client", for messages about named sections. */
static const char *named_kind(int kind) { return kind == SEC_PARTY ? "party" : "client"; }

static int push_section(parser *p, int kind, const char *name, int line) {
  for (int i = 0; i < p->n_secs; i++) {
    const section *s = &p->secs[i];
    if (!name && s->kind == kind)
      return perr(p, line, "duplicate section [%s] (first at line %d)",
                  kind == SEC_FEDERATION ? "federation" : "policy", s->line);
    /* Parties and clients share one name space: a name is one certificate
     * identity, and the daemons decide access by it. */
    if (name && s->name && strcmp(s->name, name) == 0) {
      if (s->kind == kind)
        return perr(p, line, "duplicate %s '%s' (first at line %d)", named_kind(kind), name,
                    s->line);
      return perr(p, line, "%s name '%s' is also the name of the %s at line %d",
                  named_kind(kind), name, named_kind(s->kind), s->line);
    }
  }
  if (p->n_secs == p->cap_secs) {
    int cap = p->cap_secs ? 2 * p->cap_secs : 8;
    section *ns = o3m_realloc(p->secs, (size_t)cap * sizeof *ns);
    if (!ns) return o3m_err_set(p->e, O3M_ENOMEM, "out of memory");
    p->secs = ns;
    p->cap_secs = cap;
  }
  p->secs[p->n_secs++] = (section){kind, name, line, p->n_ents, 0};
  return O3M_OK;
}

static int push_entry(parser *p, const char *key, const char *value,
                      int line) {
  section *s = &p->secs[p->n_secs - 1];
  for (int i = s->first; i < s->first + s->n; i++)
    if (strcmp(p->ents[i].key, key) == 0)
      return perr(p, line, "key '%s' repeated (first at line %d)", key,
                  p->ents[i].line);
  if (p->n_ents == p->cap_ents) {
    int cap = p->cap_ents ? 2 * p->cap_ents : 32;
    entry *ne = o3m_realloc(p->ents, (size_t)cap * sizeof *ne);
    if (!ne) return o3m_err_set(p->e, O3M_ENOMEM, "out of memory");
    p->ents = ne;
    p->cap_ents = cap;
  }
  p->ents[p->n_ents++] = (entry){key, value, line};
  s->n++;
  return O3M_OK;
}

/* Handles one section header line (trimmed, starting with '['). */
static int header_line(parser *p, char *s, int line) {
  char shown[VALUE_SHOW_MAX + 4];
  size_t n = strlen(s);
  if (n < 2 || s[n - 1] != ']')
    return perr(p, line, "malformed section header '%s' (expected [name])",
                show(shown, s));
  s[n - 1] = '\0';
  char *in = trim(s + 1);
  if (strcmp(in, "federation") == 0)
    return push_section(p, SEC_FEDERATION, NULL, line);
  if (strcmp(in, "policy") == 0) return push_section(p, SEC_POLICY, NULL, line);
  for (int kind = SEC_PARTY; kind <= SEC_CLIENT; kind++) {
    const char *word = named_kind(kind);
    size_t wn = strlen(word);
    if (strncmp(in, word, wn) != 0 || !(in[wn] == '\0' || is_blank(in[wn]))) continue;
    char *name = trim(in + wn);
    if (!*name) return perr(p, line, "section [%s] needs a name: [%s NAME]", word, word);
    if (!valid_party_name(name))
      return perr(p, line, "%s name '%s' is not 1..%d characters from [A-Za-z0-9_.-]", word,
                  show(shown, name), O3M_CONFIG_MAX_NAME);
    int *n = kind == SEC_PARTY ? &p->n_party_secs : &p->n_client_secs;
    int max = kind == SEC_PARTY ? O3M_CONFIG_MAX_PARTIES : O3M_CONFIG_MAX_CLIENTS;
    if (*n == max)
      return perr(p, line, "too many %s (at most %d)",
                  kind == SEC_PARTY ? "parties" : "clients", max);
    (*n)++;
    return push_section(p, kind, name, line);
  }
  return perr(p, line,
              "unknown section [%s] (expected [federation], [policy], "
              "[party NAME] or [client NAME])",
              show(shown, in));
}

/* Pass 1 over the text owned by p->c (modified in place). */
static int split_lines(parser *p) {
  char shown[VALUE_SHOW_MAX + 4];
  char *s = p->c->text;
  int line = 0;
  while (*s) {
    line++;
    char *nl = strchr(s, '\n');
    char *next = nl ? nl + 1 : s + strlen(s);
    if (nl) *nl = '\0';
    size_t n = strlen(s);
    if (n > 0 && s[n - 1] == '\r') s[--n] = '\0';
    for (size_t i = 0; i < n; i++)
      if ((unsigned char)s[i] < 0x20 && s[i] != '\t')
        return perr(p, line, "control character (byte 0x%02x) in line",
                    (unsigned char)s[i]);
    strip_comment(s);
    char *t = trim(s);
    s = next;
    if (!*t) continue;
    if (*t == '[') {
      int rc = header_line(p, t, line);
      if (rc) return rc;
      continue;
    }
    char *eq = strchr(t, '=');
    if (!eq)
      return perr(p, line,
                  "expected 'key = value', a [section] header or a comment, "
                  "got '%s'",
                  show(shown, t));
    *eq = '\0';
    char *key = trim(t);
    char *value = trim(eq + 1);
    if (!*key) return perr(p, line, "missing key before '='");
    if (!valid_key(key))
      return perr(p, line, "malformed key '%s' (expected [a-z0-9_]+)",
                  show(shown, key));
    if (p->n_secs == 0)
      return perr(p, line, "key '%s' is outside any section", key);
    if (!*value) return perr(p, line, "key '%s': empty value", key);
    int rc = push_entry(p, key, value, line);
    if (rc) return rc;
  }
  return O3M_OK;
}

/* ---------------------------------------------------------------- pass 2 */

enum { KT_INT, KT_U64, KT_DBL, KT_PATH, KT_WORD, KT_BOOL, KT_ADDR, KT_ROLE, KT_HEX32, KT_STR };

/* Role bits of keyspec.roles / keyspec.req. Sections other than parties use
 * R_SEC. */
#define R_SEC 1u
#define R_PMG (1u << O3M_ROLE_PMG)
#define R_ACTIVE (1u << O3M_ROLE_ACTIVE)
#define R_PASSIVE (1u << O3M_ROLE_PASSIVE)
#define R_DATA (R_ACTIVE | R_PASSIVE)
#define R_PARTY (R_PMG | R_ACTIVE | R_PASSIVE)

typedef struct keyspec {
  const char *key;
  int type;
  size_t off;        /* destination in the section's target struct */
  long long lo, hi;  /* KT_INT: inclusive range */
  double dlo;        /* KT_DBL: lower bound (-HUGE_VAL for none) */
  int dlo_strict;    /* KT_DBL: 1 for value > dlo, 0 for value >= dlo */
  const char *words; /* KT_WORD: "a|b" */
  unsigned roles;    /* who may use the key */
  unsigned req;      /* for whom the key is required */
} keyspec;

#define NOB (-HUGE_VAL)
#define FED(f) offsetof(o3m_config, f)
#define POL(f) offsetof(o3m_config, policy.f)
#define PTY(f) offsetof(o3m_party, f)
#define CLI(f) offsetof(o3m_client, f)

/* The key tables. Every key here needs its row in docs/configuration.md,
 * which o3m.conf(5) is made from: tests/config_doc.sh fails otherwise. */
static const keyspec fed_keys[] = {
    {"d", KT_INT, FED(d), 1, O3M_MAX_DIM, 0, 0, NULL, R_SEC, R_SEC},
    {"deadline_ms", KT_INT, FED(deadline_ms), 1, O3M_MAX_ROUND_DEADLINE_MS, 0, 0, NULL, R_SEC, 0},
    {"ca", KT_PATH, FED(ca), 0, 0, 0, 0, NULL, R_SEC, 0},
    {"insecure", KT_BOOL, FED(insecure), 0, 0, 0, 0, NULL, R_SEC, 0},
    {"metrics_clients", KT_STR, FED(metrics_clients), 0, 0, 0, 0, NULL, R_SEC, 0},
    {"aggregation", KT_WORD, FED(aggregation), 0, 0, 0, 0, "secure|per-party", R_SEC, 0},
    {"fallback", KT_WORD, FED(fallback), 0, 0, 0, 0, "local|none", R_SEC, 0},
    {"epoch_changes_max_per_minute", KT_INT, FED(epoch_changes_max), 0, O3M_MAX_EPOCH_CHANGES, 0,
     0, NULL, R_SEC, 0},
    {"replication", KT_WORD, FED(repl.mode), 0, 0, 0, 0, "none|nats", R_SEC, 0},
    {"nats_servers", KT_STR, FED(repl.servers), 0, 0, 0, 0, NULL, R_SEC, 0},
    {"nats_stream", KT_STR, FED(repl.stream), 0, 0, 0, 0, NULL, R_SEC, 0},
    {"nats_bucket", KT_STR, FED(repl.bucket), 0, 0, 0, 0, NULL, R_SEC, 0},
    {"nats_replicas", KT_INT, FED(repl.replicas), 1, O3M_MAX_NATS_REPLICAS, 0, 0, NULL, R_SEC, 0},
    {"nats_tls", KT_WORD, FED(repl.tls), 0, 0, 0, 0, "on|off", R_SEC, 0},
    {"nats_server_name", KT_STR, FED(repl.server_name), 0, 0, 0, 0, NULL, R_SEC, 0},
    {"nats_check_ms", KT_INT, FED(repl.check_ms), O3M_MIN_NATS_CHECK_MS, O3M_MAX_NATS_CHECK_MS,
     0, 0, NULL, R_SEC, 0},
    {"rpc_streams_per_connection", KT_INT, FED(rpc.streams_per_connection), 1,
     O3M_CONFIG_MAX_STREAMS, 0, 0, NULL, R_SEC, 0},
    {"rpc_receive_timeout_ms", KT_INT, FED(rpc.receive_timeout_ms), 0, O3M_MAX_DEADLINE_MS, 0, 0,
     NULL, R_SEC, 0},
    {"rpc_receiving_per_identity", KT_INT, FED(rpc.receiving_per_identity), 0,
     O3M_CONFIG_MAX_RECEIVING, 0, 0, NULL, R_SEC, 0},
    {"rpc_connections_per_identity", KT_INT, FED(rpc.connections_per_identity), 1,
     O3M_CONFIG_MAX_CONNECTIONS, 0, 0, NULL, R_SEC, 0},
    {NULL, 0, 0, 0, 0, 0, 0, NULL, 0, 0}};

static const keyspec pol_keys[] = {
    {"algo", KT_WORD, POL(algo), 0, 0, 0, 0, "linucb|lints", R_SEC, R_SEC},
    {"model", KT_WORD, POL(model), 0, 0, 0, 0, "shared|disjoint", R_SEC, R_SEC},
    {"alpha", KT_DBL, POL(alpha), 0, 0, 0.0, 0, NULL, R_SEC, 0},
    {"lambda", KT_DBL, POL(lambda), 0, 0, 0.0, 1, NULL, R_SEC, 0},
    {"local_alpha", KT_DBL, POL(local_alpha), 0, 0, 0.0, 0, NULL, R_SEC, 0},
    {"local_lambda", KT_DBL, POL(local_lambda), 0, 0, 0.0, 1, NULL, R_SEC, 0},
    {"v", KT_DBL, POL(v), 0, 0, 0.0, 0, NULL, R_SEC, 0},
    {"seed", KT_U64, POL(seed), 0, 0, 0, 0, NULL, R_SEC, 0},
    {"refactor_every", KT_INT, POL(refactor_every), 1, 2147483647, 0, 0, NULL,
     R_SEC, 0},
    {"max_candidates", KT_INT, POL(max_candidates), 1, O3M_MAX_CANDIDATES, 0, 0, NULL,
     R_SEC, 0},
    {"pending_capacity", KT_INT, POL(pending_capacity), 1, O3M_MAX_PENDING_CAPACITY, 0, 0, NULL,
     R_SEC, 0},
    {"pending_expiry_s", KT_INT, POL(pending_expiry_s), 1, O3M_MAX_PENDING_EXPIRY_S, 0, 0, NULL,
     R_SEC, 0},
    {"pending_client_share", KT_INT, POL(pending_client_share), 0, O3M_MAX_PENDING_CAPACITY, 0,
     0, NULL, R_SEC, 0},
    {"client_inflight_max", KT_INT, POL(client_inflight_max), 1,
     O3M_CONFIG_MAX_CLIENT_INFLIGHT, 0, 0, NULL, R_SEC, 0},
    {"batch_cost_max", KT_INT, POL(batch_cost_max), 1, 2147483647, 0, 0, NULL, R_SEC, 0},
    {"slice_cost_max", KT_INT, POL(slice_cost_max), 1, 2147483647, 0, 0, NULL, R_SEC, 0},
    {"client_uncached_rate", KT_INT, POL(client_uncached_rate), 1, 2147483647, 0, 0, NULL, R_SEC,
     0},
    {"client_uncached_burst", KT_INT, POL(client_uncached_burst), 1, 2147483647, 0, 0, NULL,
     R_SEC, 0},
    {"item_cache", KT_INT, POL(item_cache), 0, O3M_MAX_ITEM_CACHE, 0, 0, NULL, R_SEC, 0},
    {"unknown_items", KT_WORD, POL(unknown_items), 0, 0, 0, 0, "serve|refuse", R_SEC, 0},
    {"reward_min", KT_DBL, POL(reward_min), 0, 0, NOB, 0, NULL, R_SEC, 0},
    {"reward_max", KT_DBL, POL(reward_max), 0, 0, NOB, 0, NULL, R_SEC, 0},
    {"items", KT_PATH, POL(items), 0, 0, 0, 0, NULL, R_SEC, 0},
    {NULL, 0, 0, 0, 0, 0, 0, NULL, 0, 0}};

static const keyspec party_keys[] = {
    {"role", KT_ROLE, PTY(role), 0, 0, 0, 0, NULL, R_PARTY, R_PARTY},
    {"address", KT_ADDR, PTY(address), 0, 0, 0, 0, NULL, R_PARTY, R_PARTY},
    {"listen", KT_ADDR, PTY(listen), 0, 0, 0, 0, NULL, R_PARTY, 0},
    {"dims", KT_INT, PTY(dims), 1, O3M_MAX_DIM, 0, 0, NULL, R_DATA,
     R_DATA},
    {"user_table", KT_PATH, PTY(user_table), 0, 0, 0, 0, NULL, R_DATA, 0},
    {"item_table", KT_PATH, PTY(item_table), 0, 0, 0, 0, NULL, R_DATA, 0},
    {"cert", KT_PATH, PTY(cert), 0, 0, 0, 0, NULL, R_PARTY, 0},
    {"key", KT_PATH, PTY(key), 0, 0, 0, 0, NULL, R_PARTY, 0},
    {"state_dir", KT_PATH, PTY(state_dir), 0, 0, 0, 0, NULL, R_PARTY, 0},
    {"instances", KT_STR, PTY(instances), 0, 0, 0, 0, NULL, R_PASSIVE, 0},
    {"max_norm", KT_DBL, PTY(max_norm), 0, 0, 0.0, 1, NULL, R_DATA, 0},
    {"whiten", KT_BOOL, PTY(whiten), 0, 0, 0, 0, NULL, R_PASSIVE, 0},
    {"table_bytes_max", KT_U64, PTY(table_bytes_max), 0, 0, 0, 0, NULL, R_DATA, 0},
    {"threads", KT_INT, PTY(threads), 1, O3M_CONFIG_MAX_THREADS, 0, 0, NULL, R_DATA, 0},
    {"agg_public", KT_HEX32, PTY(agg_public), 0, 0, 0, 0, NULL, R_PASSIVE, 0},
    {"agg_secret", KT_PATH, PTY(agg_secret), 0, 0, 0, 0, NULL, R_PASSIVE, 0},
    {NULL, 0, 0, 0, 0, 0, 0, NULL, 0, 0}};

static const keyspec client_keys[] = {
    {"cert", KT_PATH, CLI(cert), 0, 0, 0, 0, NULL, R_SEC, 0},
    {"key", KT_PATH, CLI(key), 0, 0, 0, 0, NULL, R_SEC, 0},
    {NULL, 0, 0, 0, 0, 0, 0, NULL, 0, 0}};

/* The tables above in the order o3m_config_key_at lists them, with the
 * section each one reads. */
static const struct {
  const char *section;
  const keyspec *keys;
} key_tables[] = {{"federation", fed_keys},
                  {"policy", pol_keys},
                  {"party", party_keys},
                  {"client", client_keys}};

/* "pmg,active,passive" or the part of it that roles names; "" for R_SEC. */
static const char *roles_text(unsigned roles) {
  static const char *const texts[8] = {"", "pmg", "active", "pmg,active",
                                       "passive", "pmg,passive", "active,passive",
                                       "pmg,active,passive"};
  return texts[(roles >> 1) & 7u];
}

int o3m_config_key_at(int i, o3m_config_key *out) {
  if (i < 0) return 0;
  for (size_t t = 0; t < sizeof key_tables / sizeof key_tables[0]; t++) {
    const keyspec *k = key_tables[t].keys;
    int n = 0;
    while (k[n].key) n++;
    if (i < n) {
      out->section = key_tables[t].section;
      out->key = k[i].key;
      out->roles = roles_text(k[i].roles);
      out->required = roles_text(k[i].req);
      if (k[i].req == R_SEC) out->required = "yes";
      return 1;
    }
    i -= n;
  }
  return 0;
}

static const keyspec *find_spec(const keyspec *t, const char *key) {
  for (; t->key; t++)
    if (strcmp(t->key, key) == 0) return t;
  return NULL;
}

static const entry *find_entry(const parser *p, const section *s,
                               const char *key) {
  for (int i = s->first; i < s->first + s->n; i++)
    if (strcmp(p->ents[i].key, key) == 0) return &p->ents[i];
  return NULL;
}

/* Decimal integer: optional '-', digits, nothing else. */
static int parse_ll(const char *s, long long *out) {
  if (!(*s == '-' || isdigit((unsigned char)*s))) return -1;
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || *end) return -1;
  *out = v;
  return 0;
}

static int parse_u64(const char *s, uint64_t *out) {
  if (!isdigit((unsigned char)*s)) return -1;
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || *end) return -1;
  *out = (uint64_t)v;
  return 0;
}

/* A finite decimal number (strtod syntax without hex, inf and nan). */
static int parse_dbl(const char *s, double *out) {
  if (!(isdigit((unsigned char)*s) || *s == '-' || *s == '+' || *s == '.'))
    return -1;
  if (strpbrk(s, "xX")) return -1;
  char *end;
  double v = strtod(s, &end);
  if (end == s || *end || !isfinite(v)) return -1;
  *out = v;
  return 0;
}

/* One of the '|'-separated words. */
static int word_ok(const char *words, const char *v) {
  size_t n = strlen(v);
  for (const char *w = words; *w;) {
    const char *bar = strchr(w, '|');
    size_t wn = bar ? (size_t)(bar - w) : strlen(w);
    if (wn == n && strncmp(w, v, n) == 0) return 1;
    if (!bar) break;
    w = bar + 1;
  }
  return 0;
}

/* host:port with a non-empty host and port 1..65535, or unix:PATH. No
 * whitespace anywhere. */
static int address_ok(const char *v) {
  for (const char *q = v; *q; q++)
    if (isspace((unsigned char)*q)) return 0;
  if (strncmp(v, "unix:", 5) == 0) return v[5] != '\0';
  const char *colon = strrchr(v, ':');
  if (!colon || colon == v || !colon[1] || strlen(colon + 1) > 5) return 0;
  for (const char *q = colon + 1; *q; q++)
    if (!isdigit((unsigned char)*q)) return 0;
  long port = strtol(colon + 1, NULL, 10);
  return port >= 1 && port <= 65535;
}

/* 1 when the n bytes at a are an address (address_ok) whose host is an
 * IPv4 literal. */
static int ipv4_one_ok(const char *a, size_t n) {
  char buf[64];
  if (n >= sizeof buf) return 0;
  memcpy(buf, a, n);
  buf[n] = '\0';
  if (!address_ok(buf)) return 0;
  *strrchr(buf, ':') = '\0';
  struct in_addr ia;
  return inet_pton(AF_INET, buf, &ia) == 1;
}

/* 1 when address and every entry of the comma-separated list are IPv4
 * literals with a port: what a gRPC "ipv4:" target of several addresses
 * takes (the AP's channel to a party's instances). */
static int ipv4_list_ok(const char *address, const char *list) {
  if (!ipv4_one_ok(address, strlen(address)) || !*list) return 0;
  for (const char *a = list;;) {
    const char *comma = strchr(a, ',');
    size_t n = comma ? (size_t)(comma - a) : strlen(a);
    if (!ipv4_one_ok(a, n)) return 0;
    if (!comma) return 1;
    a = comma + 1;
  }
}

/* 1 when the n bytes at url are a NATS URL ([scheme://]host[:port]) whose
 * host is on loopback: 127.x.x.x, localhost or [::1]. */
static int url_loopback(const char *url, size_t n) {
  while (n > 0 && (*url == ' ' || *url == '\t')) url++, n--;
  for (size_t i = 0; i + 3 <= n; i++)
    if (memcmp(url + i, "://", 3) == 0) {
      url += i + 3;
      n -= i + 3;
      break;
    }
  if (memchr(url, '@', n)) return 0;
  if (n >= 5 && memcmp(url, "[::1]", 5) == 0) return n == 5 || url[5] == ':';
  size_t h = 0;
  while (h < n && url[h] != ':' && url[h] != ' ' && url[h] != '\t') h++;
  if (h == 9 && memcmp(url, "localhost", 9) == 0) return 1;
  if (h < 5 || memcmp(url, "127.", 4) != 0) return 0;
  for (size_t i = 4; i < h; i++)
    if (!(url[i] == '.' || (url[i] >= '0' && url[i] <= '9'))) return 0;
  return 1;
}

/* The first URL of the comma-separated list that is not on loopback (*n
 * its length), or NULL when every one is. */
static const char *url_not_loopback(const char *list, size_t *n) {
  for (const char *a = list;;) {
    const char *comma = strchr(a, ',');
    *n = comma ? (size_t)(comma - a) : strlen(a);
    if (!url_loopback(a, *n)) return a;
    if (!comma) return NULL;
    a = comma + 1;
  }
}

/* Resolves a path against the base directory; may point into the text. */
static int resolve_path(parser *p, const char *v, const char **out) {
  o3m_config *c = p->c;
  if (v[0] == '/' || strcmp(c->base_dir, ".") == 0) {
    *out = v;
    return O3M_OK;
  }
  if (c->n_owned == c->cap_owned) {
    int cap = c->cap_owned ? 2 * c->cap_owned : 16;
    char **no = o3m_realloc(c->owned, (size_t)cap * sizeof *no);
    if (!no) return o3m_err_set(p->e, O3M_ENOMEM, "out of memory");
    c->owned = no;
    c->cap_owned = cap;
  }
  size_t bn = strlen(c->base_dir), vn = strlen(v);
  int slash = bn > 0 && c->base_dir[bn - 1] != '/';
  char *s = o3m_malloc(bn + (size_t)slash + vn + 1);
  if (!s) return o3m_err_set(p->e, O3M_ENOMEM, "out of memory");
  memcpy(s, c->base_dir, bn);
  if (slash) s[bn] = '/';
  memcpy(s + bn + slash, v, vn + 1);
  c->owned[c->n_owned++] = s;
  *out = s;
  return O3M_OK;
}

static int hexval(char ch) {
  if (ch >= '0' && ch <= '9') return ch - '0';
  if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
  if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
  return -1;
}

/* Parses one value by its spec into base + spec->off. */
static int apply(parser *p, const keyspec *k, const entry *en, void *base) {
  char shown[VALUE_SHOW_MAX + 4];
  char *dst = (char *)base + k->off;
  const char *v = en->value;
  switch (k->type) {
  case KT_INT: {
    long long x;
    if (parse_ll(v, &x) || x < k->lo || x > k->hi)
      return perr(p, en->line, "key '%s': expected an integer in %lld..%lld, got '%s'",
                  k->key, k->lo, k->hi, show(shown, v));
    *(int *)dst = (int)x;
    return O3M_OK;
  }
  case KT_U64:
    if (parse_u64(v, (uint64_t *)dst))
      return perr(p, en->line,
                  "key '%s': expected an integer in 0..%llu, got '%s'", k->key,
                  (unsigned long long)UINT64_MAX, show(shown, v));
    return O3M_OK;
  case KT_DBL: {
    double x;
    int bad = parse_dbl(v, &x);
    if (!bad && k->dlo != NOB) bad = k->dlo_strict ? !(x > k->dlo) : !(x >= k->dlo);
    if (bad) {
      if (k->dlo == NOB)
        return perr(p, en->line, "key '%s': expected a finite number, got '%s'",
                    k->key, show(shown, v));
      return perr(p, en->line, "key '%s': expected a finite number %s %g, got '%s'",
                  k->key, k->dlo_strict ? ">" : ">=", k->dlo, show(shown, v));
    }
    *(double *)dst = x;
    return O3M_OK;
  }
  case KT_PATH:
    return resolve_path(p, v, (const char **)dst);
  case KT_WORD:
    if (!word_ok(k->words, v))
      return perr(p, en->line, "key '%s': expected one of %s, got '%s'", k->key,
                  k->words, show(shown, v));
    *(const char **)dst = v;
    return O3M_OK;
  case KT_BOOL:
    if (strcmp(v, "true") == 0)
      *(int *)dst = 1;
    else if (strcmp(v, "false") == 0)
      *(int *)dst = 0;
    else
      return perr(p, en->line, "key '%s': expected true or false, got '%s'",
                  k->key, show(shown, v));
    return O3M_OK;
  case KT_STR:
    *(const char **)dst = v;
    return O3M_OK;
  case KT_ADDR:
    if (!address_ok(v))
      return perr(p, en->line,
                  "key '%s': expected host:port (port 1..65535) or unix:PATH, "
                  "got '%s'",
                  k->key, show(shown, v));
    *(const char **)dst = v;
    return O3M_OK;
  case KT_HEX32: {
    /* 64 hex digits: a secure aggregation public key (o3m_secagg.h). */
    unsigned char *b = (unsigned char *)dst;
    int ok = strlen(v) == 64;
    for (int i = 0; ok && i < 32; i++) {
      int hi = hexval(v[2 * i]), lo = hexval(v[2 * i + 1]);
      ok = hi >= 0 && lo >= 0;
      b[i] = (unsigned char)(ok ? hi << 4 | lo : 0);
    }
    if (!ok)
      return perr(p, en->line, "key '%s': expected 64 hex digits (the agg_public line that "
                  "o3m-passive --agg-keygen prints), got '%s'", k->key, show(shown, v));
    return O3M_OK;
  }
  case KT_ROLE:
    if (strcmp(v, "pmg") == 0)
      *(o3m_role *)dst = O3M_ROLE_PMG;
    else if (strcmp(v, "active") == 0)
      *(o3m_role *)dst = O3M_ROLE_ACTIVE;
    else if (strcmp(v, "passive") == 0)
      *(o3m_role *)dst = O3M_ROLE_PASSIVE;
    else
      return perr(p, en->line,
                  "key '%s': expected one of pmg|active|passive, got '%s'",
                  k->key, show(shown, v));
    return O3M_OK;
  }
  return o3m_err_set(p->e, O3M_EINVAL, "internal: bad key type");
}

/* Applies every entry of s in line order, then checks required keys. rbit is
 * R_SEC or the role bit of a party; label names the section in messages. */
static int apply_section(parser *p, const section *s, const keyspec *table,
                         unsigned rbit, const char *label, void *base) {
  for (int i = s->first; i < s->first + s->n; i++) {
    const entry *en = &p->ents[i];
    const keyspec *k = find_spec(table, en->key);
    if (!k) return perr(p, en->line, "unknown key '%s' in %s", en->key, label);
    if (!(k->roles & rbit)) {
      const o3m_party *pt = base;
      return perr(p, en->line, "key '%s' is not valid for a party with role %s",
                  en->key, o3m_role_name(pt->role));
    }
    int rc = apply(p, k, en, base);
    if (rc) return rc;
  }
  for (const keyspec *k = table; k->key; k++)
    if ((k->req & rbit) && !find_entry(p, s, k->key))
      return perr(p, s->line, "%s: missing required key '%s'", label, k->key);
  return O3M_OK;
}

static int do_policy(parser *p, const section *s) {
  o3m_config *c = p->c;
  int rc = apply_section(p, s, pol_keys, R_SEC, "[policy]", c);
  if (rc) return rc;
  const entry *items = find_entry(p, s, "items");
  if (strcmp(c->policy.model, "disjoint") == 0 && !items)
    return perr(p, s->line,
                "[policy]: missing required key 'items' (required with model "
                "= disjoint)");
  if (strcmp(c->policy.model, "shared") == 0 && items)
    return perr(p, items->line,
                "key 'items': only valid with model = disjoint");
  /* The local model's keys default to the federated model's. */
  if (!find_entry(p, s, "local_alpha")) c->policy.local_alpha = c->policy.alpha;
  if (!find_entry(p, s, "local_lambda")) c->policy.local_lambda = c->policy.lambda;
  if (!(c->policy.reward_max > c->policy.reward_min)) {
    const entry *en = find_entry(p, s, "reward_max");
    if (!en) en = find_entry(p, s, "reward_min");
    return perr(p, en ? en->line : s->line,
                "key '%s': reward_max (%g) must be greater than reward_min (%g)",
                en ? en->key : "reward_max", c->policy.reward_max,
                c->policy.reward_min);
  }
  return O3M_OK;
}

static int do_party(parser *p, const section *s, o3m_party *pt) {
  char label[O3M_CONFIG_MAX_NAME + 16];
  snprintf(label, sizeof label, "[party %s]", s->name);
  memset(pt, 0, sizeof *pt);
  pt->name = s->name;
  pt->line = s->line;
  pt->col0 = -1;
  pt->slot = -1;
  pt->max_norm = O3M_CONFIG_DEFAULT_MAX_NORM;
  pt->threads = 1;
  pt->table_bytes_max = O3M_CONFIG_DEFAULT_TABLE_BYTES_MAX;
  /* The role decides which keys are allowed, so it is read first. */
  const entry *role = find_entry(p, s, "role");
  if (!role) return perr(p, s->line, "%s: missing required key 'role'", label);
  int rc = apply(p, find_spec(party_keys, "role"), role, pt);
  if (rc) return rc;
  rc = apply_section(p, s, party_keys, 1u << pt->role, label, pt);
  if (rc) return rc;
  /* The table's spec checks > 0; the upper limit is the one key with one. */
  const entry *mn = find_entry(p, s, "max_norm");
  if (mn && !(pt->max_norm <= O3M_CONFIG_MAX_NORM_LIMIT)) {
    char shown[VALUE_SHOW_MAX + 4];
    return perr(p, mn->line, "key 'max_norm': expected a number > 0 and <= %g, got '%s'",
                O3M_CONFIG_MAX_NORM_LIMIT, show(shown, mn->value));
  }
  const entry *tb = find_entry(p, s, "table_bytes_max");
  if (tb && (pt->table_bytes_max < 1 || pt->table_bytes_max > O3M_CONFIG_MAX_TABLE_BYTES)) {
    char shown[VALUE_SHOW_MAX + 4];
    return perr(p, tb->line, "key 'table_bytes_max': expected a number of bytes in 1..%llu, "
                "got '%s'", (unsigned long long)O3M_CONFIG_MAX_TABLE_BYTES,
                show(shown, tb->value));
  }
  /* Without listen the daemon binds the address its peers dial, which is
   * what every party on one host or on a flat network wants. */
  if (!pt->listen) pt->listen = pt->address;
  pt->has_agg_public = find_entry(p, s, "agg_public") != NULL;
  if (pt->role == O3M_ROLE_PASSIVE && !pt->user_table && !pt->item_table)
    return perr(p, s->line,
                "%s: a passive party needs key 'user_table' or 'item_table' "
                "(or both)",
                label);
  return O3M_OK;
}

/* A [client NAME] section: an identity that may call the active party's
 * Recommend, Reward and Stats; cert and key, both or neither, only tell
 * o3m-cli --as NAME which files to present. */
static int do_client(parser *p, const section *s, o3m_client *cl) {
  char label[O3M_CONFIG_MAX_NAME + 16];
  snprintf(label, sizeof label, "[client %s]", s->name);
  memset(cl, 0, sizeof *cl);
  cl->name = s->name;
  cl->line = s->line;
  int rc = apply_section(p, s, client_keys, R_SEC, label, cl);
  if (rc) return rc;
  if (!cl->cert != !cl->key)
    return perr(p, s->line, "%s: key '%s' needs key '%s' (both or neither)", label,
                cl->cert ? "cert" : "key", cl->cert ? "key" : "cert");
  return O3M_OK;
}

/* Checks that need every section: roles, addresses, TLS keys, the dims sum;
 * fills the column order. */
static int check_structure(parser *p, const section *fed) {
  o3m_config *c = p->c;
  for (int i = 0; i < c->n_parties; i++) {
    const o3m_party *pt = &c->parties[i];
    if (pt->role == O3M_ROLE_PMG) {
      if (c->pmg)
        return perr(p, pt->line,
                    "[party %s]: a second party with role = pmg (the first is "
                    "'%s' at line %d)",
                    pt->name, c->pmg->name, c->pmg->line);
      c->pmg = pt;
    } else if (pt->role == O3M_ROLE_ACTIVE) {
      if (c->active)
        return perr(p, pt->line,
                    "[party %s]: a second party with role = active (the first "
                    "is '%s' at line %d); exactly one is allowed",
                    pt->name, c->active->name, c->active->line);
      c->active = pt;
    }
    for (int j = 0; j < i; j++)
      if (strcmp(c->parties[j].address, pt->address) == 0)
        return perr(p, pt->line,
                    "[party %s]: key 'address': %s is also the address of "
                    "party '%s' (line %d)",
                    pt->name, pt->address, c->parties[j].name,
                    c->parties[j].line);
  }
  if (!c->pmg) return perr(p, 0, "no party with role = pmg (exactly one is required)");
  if (!c->active)
    return perr(p, 0, "no party with role = active (exactly one is required)");
  if (!c->insecure) {
    if (!c->ca)
      return perr(p, fed->line,
                  "[federation]: missing required key 'ca' (required unless "
                  "insecure = true)");
    for (int i = 0; i < c->n_parties; i++) {
      const o3m_party *pt = &c->parties[i];
      if (!pt->cert || !pt->key)
        return perr(p, pt->line,
                    "[party %s]: missing required key '%s' (required unless "
                    "insecure = true)",
                    pt->name, !pt->cert ? "cert" : "key");
    }
  }
  long sum = 0;
  for (int i = 0; i < c->n_parties; i++) sum += c->parties[i].dims;
  if (sum != c->d) {
    const entry *en = find_entry(p, fed, "d");
    return perr(p, en->line,
                "key 'd': d = %d but the dims of the active and passive "
                "parties sum to %ld",
                c->d, sum);
  }
  /* Secure aggregation needs every passive party's public key once there
   * are two of them (with one there is no pair to mask with). */
  c->agg_secure = strcmp(c->aggregation, "secure") == 0;
  for (int i = 0; i < c->n_parties; i++) {
    const o3m_party *pt = &c->parties[i];
    if (pt->instances && !ipv4_list_ok(pt->address, pt->instances))
      return perr(p, pt->line, "[party %s]: key 'instances': every instance, and address, must "
                  "be an IPv4 literal with a port (a.b.c.d:port), comma-separated", pt->name);
  }
  if (strcmp(c->repl.mode, "nats") == 0 && (!c->repl.servers || !*c->repl.servers))
    return perr(p, 0, "[federation]: replication = nats needs nats_servers (the NATS URLs, "
                "comma-separated)");
  size_t bad_n = 0;
  const char *bad = strcmp(c->repl.mode, "nats") == 0 && strcmp(c->repl.tls, "off") == 0
                        ? url_not_loopback(c->repl.servers, &bad_n)
                        : NULL;
  if (bad)
    return perr(p, 0, "[federation]: nats_tls = off (plain text, no credentials) is allowed only "
                "with every nats_servers URL on loopback (127.x.x.x, localhost, [::1]); "
                "'%.*s' is not", (int)bad_n, bad);
  if (!*c->repl.server_name)
    return perr(p, 0, "[federation]: nats_server_name must not be empty");
  int n_pp = 0;
  for (int i = 0; i < c->n_parties; i++) n_pp += c->parties[i].role == O3M_ROLE_PASSIVE;
  if (c->agg_secure && n_pp >= 2)
    for (int i = 0; i < c->n_parties; i++) {
      const o3m_party *pt = &c->parties[i];
      if (pt->role == O3M_ROLE_PASSIVE && !pt->has_agg_public)
        return perr(p, pt->line, "[party %s]: missing required key 'agg_public' (required for "
                    "every passive party with aggregation = secure, the default, and 2 or more "
                    "passive parties; o3m-passive --agg-keygen FILE prints it)", pt->name);
    }
  c->column = o3m_malloc((size_t)c->n_parties * sizeof *c->column);
  c->passive = o3m_malloc((size_t)c->n_parties * sizeof *c->passive);
  if (!c->column || !c->passive)
    return o3m_err_set(p->e, O3M_ENOMEM, "out of memory");
  int col = 0;
  for (int i = 0; i < c->n_parties; i++) {
    o3m_party *pt = &c->parties[i];
    if (pt->role == O3M_ROLE_PMG) continue;
    pt->slot = c->n_column;
    pt->col0 = col;
    col += pt->dims;
    c->column[c->n_column++] = pt;
    if (pt->role == O3M_ROLE_PASSIVE) c->passive[c->n_passive++] = pt;
  }
  return O3M_OK;
}

/* unknown_items = refuse needs an item table on the active party: its own
 * table is all the AP can tell an unknown item by, since a passive party
 * answers one with a dummy row and never says so. */
static int check_unknown_items(parser *p, const section *pol) {
  if (strcmp(p->c->policy.unknown_items, "refuse") != 0 || p->c->active->item_table)
    return O3M_OK;
  const entry *en = find_entry(p, pol, "unknown_items");
  return perr(p, en ? en->line : pol->line,
              "key 'unknown_items': refuse needs an item_table in [party %s], the active "
              "party: it is the only table the active party can tell an unknown item by",
              p->c->active->name);
}

/* The clients' shares of the pending table need the number of clients:
 * pending_client_share x clients may not exceed pending_capacity (0, the
 * default, is that quotient). */
static int check_client_shares(parser *p, const section *pol) {
  o3m_config_policy_section *pc = &p->c->policy;
  int n = p->c->n_clients > 0 ? p->c->n_clients : 1;
  if (pc->pending_client_share == 0) {
    pc->pending_client_share = pc->pending_capacity / n;
    return O3M_OK;
  }
  if ((long long)pc->pending_client_share * n > pc->pending_capacity) {
    const entry *en = find_entry(p, pol, "pending_client_share");
    return perr(p, en ? en->line : pol->line,
                "key 'pending_client_share': %d entries for each of %d client(s) is more than "
                "pending_capacity (%d)", pc->pending_client_share, n, pc->pending_capacity);
  }
  return O3M_OK;
}

static int interpret(parser *p) {
  o3m_config *c = p->c;
  const section *fed = NULL, *pol = NULL;
  if (p->n_party_secs > 0) {
    c->parties = o3m_calloc((size_t)p->n_party_secs, sizeof *c->parties);
    if (!c->parties) return o3m_err_set(p->e, O3M_ENOMEM, "out of memory");
  }
  if (p->n_client_secs > 0) {
    c->clients = o3m_calloc((size_t)p->n_client_secs, sizeof *c->clients);
    if (!c->clients) return o3m_err_set(p->e, O3M_ENOMEM, "out of memory");
  }
  for (int i = 0; i < p->n_secs; i++) {
    const section *s = &p->secs[i];
    int rc;
    if (s->kind == SEC_FEDERATION) {
      fed = s;
      rc = apply_section(p, s, fed_keys, R_SEC, "[federation]", c);
    } else if (s->kind == SEC_POLICY) {
      pol = s;
      rc = do_policy(p, s);
    } else if (s->kind == SEC_CLIENT) {
      rc = do_client(p, s, &c->clients[c->n_clients]);
      c->n_clients++;
    } else {
      rc = do_party(p, s, &c->parties[c->n_parties]);
      c->n_parties++;
    }
    if (rc) return rc;
  }
  if (!fed) return perr(p, 0, "missing section [federation]");
  if (!pol) return perr(p, 0, "missing section [policy]");
  int rc = check_structure(p, fed);
  if (rc) return rc;
  rc = check_unknown_items(p, pol);
  if (rc) return rc;
  return check_client_shares(p, pol);
}

/* ------------------------------------------------------------- lifecycle */

/* Takes ownership of text (malloc'd) whatever happens. */
static int parse_owned(o3m_config **out, char *text, const char *base_dir,
                       const char *name, o3m_err *e) {
  *out = NULL;
  o3m_config *c = o3m_calloc(1, sizeof *c);
  if (!c) {
    o3m_free(text);
    return o3m_err_set(e, O3M_ENOMEM, "out of memory");
  }
  c->text = text;
  if (!name) name = "<config>";
  size_t nn = strlen(name);
  if (nn > NAME_SHOW_MAX) {
    c->name = o3m_malloc(NAME_SHOW_MAX + 1);
    if (c->name) {
      memcpy(c->name, "...", 3);
      memcpy(c->name + 3, name + nn - (NAME_SHOW_MAX - 3), NAME_SHOW_MAX - 2);
    }
  } else {
    c->name = o3m_strdup(name);
  }
  c->base_dir = o3m_strdup(base_dir && *base_dir ? base_dir : ".");
  if (!c->name || !c->base_dir) {
    o3m_config_destroy(c);
    return o3m_err_set(e, O3M_ENOMEM, "out of memory");
  }
  c->deadline_ms = O3M_DEFAULT_DEADLINE_MS;
  c->rpc.streams_per_connection = O3M_CONFIG_DEFAULT_STREAMS;
  c->rpc.receive_timeout_ms = O3M_CONFIG_DEFAULT_RECEIVE_TIMEOUT_MS;
  c->rpc.receiving_per_identity = 0;
  c->rpc.connections_per_identity = O3M_CONFIG_DEFAULT_CONNECTIONS;
  c->metrics_clients = "monitor";
  c->aggregation = "secure";
  c->fallback = "local";
  c->epoch_changes_max = O3M_DEFAULT_EPOCH_CHANGES;
  c->repl.mode = "none";
  c->repl.stream = "O3M_REWARDS";
  c->repl.bucket = "O3M_DECISIONS";
  c->repl.replicas = O3M_DEFAULT_NATS_REPLICAS;
  c->repl.tls = "on";
  c->repl.server_name = "nats";
  c->repl.check_ms = O3M_DEFAULT_NATS_CHECK_MS;
  c->policy.alpha = O3M_DEFAULT_ALPHA;
  c->policy.lambda = O3M_DEFAULT_LAMBDA;
  c->policy.v = O3M_DEFAULT_V;
  c->policy.seed = O3M_DEFAULT_SEED;
  c->policy.refactor_every = O3M_DEFAULT_REFACTOR_EVERY;
  c->policy.max_candidates = O3M_DEFAULT_MAX_CANDIDATES;
  c->policy.pending_capacity = O3M_DEFAULT_PENDING_CAPACITY;
  c->policy.pending_expiry_s = O3M_DEFAULT_PENDING_EXPIRY_S;
  c->policy.client_inflight_max = O3M_DEFAULT_CLIENT_INFLIGHT;
  c->policy.batch_cost_max = O3M_DEFAULT_BATCH_COST;
  c->policy.slice_cost_max = O3M_DEFAULT_SLICE_COST;
  c->policy.client_uncached_rate = O3M_DEFAULT_CLIENT_UNCACHED_RATE;
  c->policy.client_uncached_burst = O3M_DEFAULT_CLIENT_UNCACHED_BURST;
  c->policy.item_cache = O3M_DEFAULT_ITEM_CACHE;
  c->policy.unknown_items = "serve";
  c->policy.reward_min = O3M_DEFAULT_REWARD_MIN;
  c->policy.reward_max = O3M_DEFAULT_REWARD_MAX;

  parser p = {.c = c, .e = e};
  int rc = split_lines(&p);
  if (!rc) rc = interpret(&p);
  o3m_free(p.ents);
  o3m_free(p.secs);
  if (rc) {
    o3m_config_destroy(c);
    return rc;
  }
  o3m_err_clear(e);
  *out = c;
  return O3M_OK;
}

int o3m_config_parse_string(o3m_config **out, const char *text,
                            const char *base_dir, const char *name_for_messages,
                            o3m_err *e) {
  if (!out) return o3m_err_set(e, O3M_EINVAL, "o3m_config_parse_string: out is NULL");
  *out = NULL;
  if (!text) return o3m_err_set(e, O3M_EINVAL, "o3m_config_parse_string: text is NULL");
  char *copy = o3m_strdup(text);
  if (!copy) return o3m_err_set(e, O3M_ENOMEM, "out of memory");
  return parse_owned(out, copy, base_dir, name_for_messages, e);
}

int o3m_config_load(o3m_config **out, const char *path, o3m_err *e) {
  if (!out) return o3m_err_set(e, O3M_EINVAL, "o3m_config_load: out is NULL");
  *out = NULL;
  if (!path) return o3m_err_set(e, O3M_EINVAL, "o3m_config_load: path is NULL");
  FILE *f = fopen(path, "rb");
  if (!f) return o3m_err_set(e, O3M_EIO, "%s: cannot open: %s", path, strerror(errno));
  char *buf = o3m_malloc(O3M_CONFIG_MAX_FILE + 2);
  if (!buf) {
    fclose(f);
    return o3m_err_set(e, O3M_ENOMEM, "out of memory");
  }
  size_t n = fread(buf, 1, O3M_CONFIG_MAX_FILE + 1, f);
  int rd_err = ferror(f);
  fclose(f);
  if (rd_err) {
    o3m_free(buf);
    return o3m_err_set(e, O3M_EIO, "%s: read error", path);
  }
  if (n > O3M_CONFIG_MAX_FILE) {
    o3m_free(buf);
    return o3m_err_set(e, O3M_EPARSE, "%s: larger than %d bytes", path,
                       O3M_CONFIG_MAX_FILE);
  }
  buf[n] = '\0';
  if (memchr(buf, '\0', n)) {
    int line = 1;
    for (const char *q = buf; *q; q++) line += *q == '\n';
    o3m_free(buf);
    return o3m_err_set(e, O3M_EPARSE, "%s:%d: NUL byte in file", path, line);
  }
  char *shrunk = o3m_realloc(buf, n + 1);
  if (shrunk) buf = shrunk;

  /* The directory part of path: "." without a slash, "/" for "/x". */
  const char *slash = strrchr(path, '/');
  char *dir;
  if (!slash) {
    dir = o3m_strdup(".");
  } else if (slash == path) {
    dir = o3m_strdup("/");
  } else {
    dir = o3m_strndup(path, (size_t)(slash - path));
  }
  if (!dir) {
    o3m_free(buf);
    return o3m_err_set(e, O3M_ENOMEM, "out of memory");
  }
  int rc = parse_owned(out, buf, dir, path, e);
  o3m_free(dir);
  return rc;
}

void o3m_config_destroy(o3m_config *c) {
  if (!c) return;
  for (int i = 0; i < c->n_owned; i++) o3m_free(c->owned[i]);
  o3m_free(c->owned);
  o3m_free(c->column);
  o3m_free(c->passive);
  o3m_free(c->parties);
  o3m_free(c->clients);
  o3m_free(c->text);
  o3m_free(c->base_dir);
  o3m_free(c->name);
  o3m_free(c);
}

/* ------------------------------------------------------------- accessors */

const char *o3m_role_name(o3m_role r) {
  switch (r) {
  case O3M_ROLE_PMG: return "pmg";
  case O3M_ROLE_ACTIVE: return "active";
  case O3M_ROLE_PASSIVE: return "passive";
  }
  return "unknown";
}

int o3m_config_d(const o3m_config *c) { return c->d; }
int o3m_config_deadline_ms(const o3m_config *c) { return c->deadline_ms; }
const o3m_config_rpc_limits *o3m_config_rpc(const o3m_config *c) { return &c->rpc; }
const char *o3m_config_ca(const o3m_config *c) { return c->ca; }
const char *o3m_config_metrics_clients(const o3m_config *c) { return c->metrics_clients; }
int o3m_config_insecure(const o3m_config *c) { return c->insecure; }
int o3m_config_secure_aggregation(const o3m_config *c) { return c->agg_secure; }
int o3m_config_fallback_local(const o3m_config *c) { return strcmp(c->fallback, "local") == 0; }
int o3m_config_epoch_changes_max(const o3m_config *c) { return c->epoch_changes_max; }

const o3m_config_replication *o3m_config_replication_of(const o3m_config *c) {
  return &c->repl;
}
const o3m_config_policy_section *o3m_config_policy(const o3m_config *c) { return &c->policy; }
int o3m_config_n_parties(const o3m_config *c) { return c->n_parties; }

const o3m_party *o3m_config_party_at(const o3m_config *c, int i) {
  return i >= 0 && i < c->n_parties ? &c->parties[i] : NULL;
}

const o3m_party *o3m_config_party(const o3m_config *c, const char *name) {
  if (!name) return NULL;
  for (int i = 0; i < c->n_parties; i++)
    if (strcmp(c->parties[i].name, name) == 0) return &c->parties[i];
  return NULL;
}

int o3m_config_n_clients(const o3m_config *c) { return c->n_clients; }

const o3m_client *o3m_config_client_at(const o3m_config *c, int i) {
  return i >= 0 && i < c->n_clients ? &c->clients[i] : NULL;
}

const o3m_client *o3m_config_client(const o3m_config *c, const char *name) {
  if (!name) return NULL;
  for (int i = 0; i < c->n_clients; i++)
    if (strcmp(c->clients[i].name, name) == 0) return &c->clients[i];
  return NULL;
}

const o3m_party *o3m_config_pmg(const o3m_config *c) { return c->pmg; }
const o3m_party *o3m_config_active(const o3m_config *c) { return c->active; }
int o3m_config_n_passive(const o3m_config *c) { return c->n_passive; }

const o3m_party *o3m_config_passive(const o3m_config *c, int i) {
  return i >= 0 && i < c->n_passive ? c->passive[i] : NULL;
}

int o3m_config_n_column_parties(const o3m_config *c) { return c->n_column; }

const o3m_party *o3m_config_column_party(const o3m_config *c, int slot) {
  return slot >= 0 && slot < c->n_column ? c->column[slot] : NULL;
}

const char *o3m_config_name(const o3m_config *c) { return c->name; }
const char *o3m_config_base_dir(const o3m_config *c) { return c->base_dir; }
