/* o3m_access.c -- the daemons' access policies (see o3m_access.h).
 *
 * A policy is the rule table and a copy of every name of the config (the
 * parties and the clients) with the classes it confers, the own party's
 * marked SELF. Deciding a call is a lookup of the path among the few rules
 * and of the identity among the names (linear: a federation has a handful
 * of each, and the lookup allocates nothing). */
#include "o3m_access.h"
#include "o3m_alloc.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "o3m_clock.h"
#include "o3m_log.h"

/* At most one refusal line per this many milliseconds. */
#define LOG_PERIOD_MS 1000

typedef struct named {
  char name[O3M_CONFIG_MAX_NAME + 1];
  unsigned classes;
} named;

struct o3m_access {
  named *names;  /* every party, client and metrics client of the config */
  int n_names;
  const o3m_access_rule *rules;
  int n_rules;
  int64_t last_log_ms;   /* 0: nothing logged yet */
  uint64_t unlogged;     /* refusals since the last line that were not logged */
  atomic_uint_least64_t refused;
};

static const o3m_access_rule *rule_of(const o3m_access *a, const char *path) {
  for (int i = 0; i < a->n_rules; i++)
    if (strcmp(a->rules[i].path, path) == 0) return &a->rules[i];
  return NULL;
}

/* The names of a metrics_clients list ("a, b"): comma-separated, blanks
 * around them dropped, empty ones skipped. monitor_next copies the next one
 * of *p into name (cut to O3M_CONFIG_MAX_NAME: a longer name matches no
 * certificate the config can name either) and returns 0 at the end. */
static int monitor_next(const char **p, char name[O3M_CONFIG_MAX_NAME + 1]) {
  for (;;) {
    const char *s = *p;
    while (*s == ' ' || *s == '\t' || *s == ',') s++;
    if (!*s) {
      *p = s;
      return 0;
    }
    const char *end = s;
    while (*end && *end != ',') end++;
    *p = end;
    const char *last = end;
    while (last > s && (last[-1] == ' ' || last[-1] == '\t')) last--;
    size_t len = (size_t)(last - s);
    if (len == 0 || len > O3M_CONFIG_MAX_NAME) continue;
    memcpy(name, s, len);
    name[len] = '\0';
    return 1;
  }
}

static int monitor_count(const char *list) {
  char name[O3M_CONFIG_MAX_NAME + 1];
  int n = 0;
  for (const char *p = list ? list : ""; monitor_next(&p, name);) n++;
  return n;
}

/* Marks every metrics client MONITOR: a name the config already has (a
 * party or a client listed as a reader of /metrics too) keeps its classes
 * and gains this one, any other is added with it alone. */
static void monitors_add(o3m_access *a, const char *list) {
  char name[O3M_CONFIG_MAX_NAME + 1];
  for (const char *p = list ? list : ""; monitor_next(&p, name);) {
    int i = 0;
    while (i < a->n_names && strcmp(a->names[i].name, name) != 0) i++;
    if (i == a->n_names) snprintf(a->names[a->n_names++].name, sizeof a->names[i].name, "%s", name);
    a->names[i].classes |= O3M_ACCESS_MONITOR;
  }
}

int o3m_access_create(o3m_access **out, const o3m_config *cfg, const char *self,
                      const o3m_access_rule *rules, int n_rules, const o3m_rpc_method *methods,
                      int n_methods, o3m_err *e) {
  if (!out) return o3m_err_set(e, O3M_EINVAL, "o3m_access_create: out is NULL");
  *out = NULL;
  if (!cfg || !self || (!rules && n_rules) || n_rules < 0 || (!methods && n_methods) ||
      n_methods < 0)
    return o3m_err_set(e, O3M_EINVAL, "o3m_access_create: NULL or negative argument");
  if (!o3m_config_party(cfg, self))
    return o3m_err_set(e, O3M_EINVAL, "access policy: '%s' is not a party of %s", self,
                       o3m_config_name(cfg));
  const unsigned all = O3M_ACCESS_PARTY | O3M_ACCESS_CLIENT | O3M_ACCESS_OPERATOR;
  for (int i = 0; i < n_rules; i++) {
    const o3m_access_rule *r = &rules[i];
    if (!r->path || r->path[0] != '/')
      return o3m_err_set(e, O3M_EINVAL, "access rule %d: the path must start with '/'", i);
    if (r->allow & ~all)
      return o3m_err_set(e, O3M_EINVAL, "access rule %s: unknown caller class bits %#x",
                         r->path, r->allow & ~all);
    for (int j = 0; j < i; j++)
      if (strcmp(rules[j].path, r->path) == 0)
        return o3m_err_set(e, O3M_EINVAL, "access rule %s is listed twice", r->path);
    int found = 0;
    for (int m = 0; m < n_methods && !found; m++) found = strcmp(methods[m].path, r->path) == 0;
    if (!found)
      return o3m_err_set(e, O3M_EINVAL, "access rule %s names no method of the service",
                         r->path);
  }
  for (int m = 0; m < n_methods; m++) {
    int found = 0;
    for (int i = 0; i < n_rules && !found; i++) found = strcmp(rules[i].path, methods[m].path) == 0;
    if (!found)
      return o3m_err_set(e, O3M_EINVAL, "method %s has no access rule", methods[m].path);
  }
  o3m_access *a = o3m_calloc(1, sizeof *a);
  int n_parties = o3m_config_n_parties(cfg), n_clients = o3m_config_n_clients(cfg);
  const char *monitors = o3m_config_metrics_clients(cfg);
  int n_monitors = monitor_count(monitors);
  if (a) a->names = o3m_calloc((size_t)(n_parties + n_clients + n_monitors), sizeof *a->names);
  if (!a || !a->names) {
    o3m_access_destroy(a);
    return o3m_err_set(e, O3M_ENOMEM, "access policy: out of memory");
  }
  for (int i = 0; i < n_parties; i++) {
    const o3m_party *p = o3m_config_party_at(cfg, i);
    named *n = &a->names[a->n_names++];
    snprintf(n->name, sizeof n->name, "%s", p->name);
    n->classes = p->role == O3M_ROLE_PMG       ? O3M_ACCESS_PMG
                 : p->role == O3M_ROLE_ACTIVE  ? O3M_ACCESS_ACTIVE
                 : p->role == O3M_ROLE_PASSIVE ? O3M_ACCESS_PASSIVE
                                               : 0;
    if (strcmp(p->name, self) == 0) n->classes |= O3M_ACCESS_SELF;
  }
  for (int i = 0; i < n_clients; i++) {
    named *n = &a->names[a->n_names++];
    snprintf(n->name, sizeof n->name, "%s", o3m_config_client_at(cfg, i)->name);
    n->classes = O3M_ACCESS_CLIENT;
  }
  monitors_add(a, monitors);
  a->rules = rules;
  a->n_rules = n_rules;
  atomic_init(&a->refused, 0);
  *out = a;
  return 0;
}

void o3m_access_destroy(o3m_access *a) {
  if (!a) return;
  o3m_free(a->names);
  o3m_free(a);
}

void o3m_access_install(o3m_access *a, o3m_rpc_server_config *sc) {
  sc->authorize = o3m_access_authorize;
  sc->authorize_ctx = a;
}

unsigned o3m_access_classes(const o3m_access *a, const char *identity) {
  if (!identity) return 0;
  /* Names are unique across parties and clients (o3m_config.h), and a
   * metrics client's name is merged into theirs (monitors_add). */
  for (int i = 0; i < a->n_names; i++)
    if (strcmp(a->names[i].name, identity) == 0) return a->names[i].classes;
  return 0;
}

/* "the active party and the passive parties" and so on: who a rule allows,
 * for the refusal message. */
static void describe(unsigned allow, char *buf, size_t n) {
  static const struct {
    unsigned bit;
    const char *what;
  } names[] = {{O3M_ACCESS_PMG, "the mask generator"},
               {O3M_ACCESS_ACTIVE, "the active party"},
               {O3M_ACCESS_PASSIVE, "the passive parties"},
               {O3M_ACCESS_CLIENT, "the configured clients"},
               {O3M_ACCESS_SELF, "this party itself"},
               {O3M_ACCESS_MONITOR, "the metrics_clients"}};
  const size_t n_names = sizeof names / sizeof names[0];
  size_t left = 0, len = 0;
  for (size_t i = 0; i < n_names; i++) left += (allow & names[i].bit) != 0;
  snprintf(buf, n, "nobody");
  for (size_t i = 0; i < n_names; i++) {
    if (!(allow & names[i].bit)) continue;
    left--;
    const char *sep = !len ? "" : left ? ", " : " and ";
    int w = snprintf(buf + len, n - len, "%s%s", sep, names[i].what);
    if (w < 0 || (size_t)w >= n - len) return;
    len += (size_t)w;
  }
}

int o3m_access_authorize(void *ctx, o3m_rpc_call *call, const char *path, const char *identity,
                         o3m_err *e) {
  o3m_access *a = ctx;
  const o3m_access_rule *r = rule_of(a, path);
  unsigned classes = o3m_access_classes(a, identity);
  if (r && (r->allow & classes)) return 0;

  atomic_fetch_add_explicit(&a->refused, 1, memory_order_relaxed);
  int64_t t = o3m_clock_ms();
  if (a->last_log_ms == 0 || t - a->last_log_ms >= LOG_PERIOD_MS) {
    char unlogged[64] = "";
    if (a->unlogged)
      snprintf(unlogged, sizeof unlogged, " (%llu more refusals not logged)",
               (unsigned long long)a->unlogged);
    o3m_log_warn("refused %s to %s%.64s%s at %s: %s%s", path,
                 identity ? "certificate '" : "a caller without a certificate",
                 identity ? identity : "", identity ? "'" : "",
                 call ? o3m_rpc_call_peer(call) : "(no call)",
                 !identity ? "no identity"
                 : classes ? "not allowed for its role"
                           : "neither a party nor a client of the config",
                 unlogged);
    a->last_log_ms = t;
    a->unlogged = 0;
  } else {
    a->unlogged++;
  }
  char who[160];
  describe(r ? r->allow : 0, who, sizeof who);
  /* A certificate of the CA that the config does not name is most often a
   * new front end whose section was forgotten: say which one to add. */
  if (identity && !classes && r && (r->allow & O3M_ACCESS_CLIENT))
    return o3m_err_set(e, O3M_EPERM, "it is answered only to %s; certificate CN '%.64s' is "
                       "none: add a section [client %.64s] to the federation config", who,
                       identity, identity);
  return o3m_err_set(e, O3M_EPERM, "it is answered %s%s", r && r->allow ? "only to " : "to ",
                     who);
}

uint64_t o3m_access_refused(const o3m_access *a) {
  return atomic_load_explicit(&((o3m_access *)a)->refused, memory_order_relaxed);
}

int o3m_access_serve(o3m_rpc_server **srv, o3m_access **acc, o3m_rpc_server_config *sc,
                     const o3m_config *cfg, const o3m_party *me, const o3m_access_rule *rules,
                     int n_rules, const o3m_rpc_method *methods, int n_methods, void *ctx,
                     o3m_err *e) {
  *srv = NULL;
  if (!sc->listen) sc->listen = me->listen;
  if (!sc->insecure) sc->tls = o3m_rpc_tls_of_party(cfg, me);
  sc->idle_close_ms = O3M_RPC_DAEMON_IDLE_CLOSE_MS;
  const o3m_config_rpc_limits *lim = o3m_config_rpc(cfg);
  sc->streams_per_connection = lim->streams_per_connection;
  sc->receive_timeout_ms = lim->receive_timeout_ms;
  sc->receiving_per_identity = lim->receiving_per_identity;
  sc->connections_per_identity = lim->connections_per_identity;
  int rc = o3m_access_create(acc, cfg, me->name, rules, n_rules, methods, n_methods, e);
  if (rc < 0) return rc;
  o3m_access_install(*acc, sc);
  o3m_err why;
  o3m_err_clear(&why);
  rc = o3m_rpc_server_create(srv, sc, methods, n_methods, ctx, &why);
  if (rc < 0) {
    o3m_access_destroy(*acc);
    *acc = NULL;
    return o3m_err_set(e, rc, "%s: [party %s]: %s", o3m_config_name(cfg), me->name,
                       o3m_err_message(&why));
  }
  return 0;
}
