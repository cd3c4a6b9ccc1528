/* cli_main.c -- o3m-cli, the active participant's service from the shell.
 *
 *   o3m-cli (--config F --as NAME | [--config F] --cert FILE --key FILE --ca FILE)
 *           [--insecure] [--target ADDR] [--server-name NAME] [--deadline-ms N]
 *           COMMAND [options]
 *
 *   recommend --user U --items a,b,c [--arms 0,1,2] [--own-features 1,2,3,...]
 *             prints `decision=<id> item=<item> candidate=<k> score=<s>`
 *   reward --decision ID --reward R      prints `updates=<n>`
 *   stats                                prints one `name=value` per line,
 *                                        view=client (a client's own
 *                                        counters) or view=federation
 *                                        (the operator's: --as the AP)
 *   info                                 prints one `name=value` per line, the
 *                                        federation fingerprint among them
 *   reload                               with --as PARTY (its own certificate):
 *                                        that party's daemon reloads its
 *                                        feature tables (as on SIGHUP);
 *                                        prints one `name=value` per line
 *   health [--target ADDR]               prints SERVING
 *   fingerprint                          prints the canonical encoding of
 *                                        --config's shared fields and its
 *                                        federation fingerprint; no call
 *   nats-setup                           with --config, --cert and --key of
 *                                        the NATS administrative identity:
 *                                        creates the AP replicas' reward
 *                                        stream and decision bucket
 *                                        append-only (ap_replica_setup),
 *                                        prints name=value lines; calls
 *                                        NATS, not the AP
 *
 * The connection comes from the config (the active party's address and
 * name, the federation CA, and with --as NAME the cert and key of that
 * [client NAME] or [party NAME]) or from the explicit options, which
 * override it. recommend and reward are answered only to a client named in
 * the config ([client NAME]); stats to a client (its own counters) and to
 * the active party's own certificate or a metrics_clients name (all of
 * them); info and health also to a party.
 * --target overrides the address (health can so probe any daemon; a comma-
 * separated list of AP replicas fails over, ap_client.h); when it
 * is the address of a party of the config, that party's certificate name is
 * expected (--server-name overrides it). Without --config, TLS needs
 * --server-name: the server's certificate is checked against that party
 * name, never against the target's host, which every trial certificate
 * carries (localhost). Errors print the
 * O3M code name and the message on stderr and exit 1; usage errors exit 2.
 * The options are parsed by o3m_cli (getopt_long: options and the command
 * in any order); --help describes every option, --version prints the
 * release and protocol.
 * The client's certificate is checked before any call (o3m_cert.h: key,
 * validity, chain to the CA, and with --as the CN): a bad one is TLS, exit 1.
 * The calls to the AP are done by ap_client.h; nats-setup by ap_replica.h
 * (ap_replica_setup), the one command that talks to NATS, not to the AP. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ap_client.h"
#include "o3m_alloc.h"
#include "ap_replica.h"
#include "o3m_cli.h"
#include "o3m_config.h"
#include "o3m_fingerprint.h"
#include "o3m_wire.h"

#define PROG "o3m-cli"

enum {
  OPT_CONFIG, OPT_AS, OPT_CERT, OPT_KEY, OPT_CA, OPT_TARGET, OPT_SERVER_NAME, OPT_DEADLINE,
  OPT_INSECURE, OPT_USER, OPT_ITEMS, OPT_ARMS, OPT_OWN, OPT_DECISION, OPT_REWARD
};
static const o3m_cli_option options[] = {
    [OPT_CONFIG] = {"config", "F", "the federation config: the AP's address and name, the CA"},
    [OPT_AS] = {"as", "NAME", "use the cert and key of [client NAME] or [party NAME] of --config"},
    [OPT_CERT] = {"cert", "FILE", "this client's certificate (with --key; instead of --as)"},
    [OPT_KEY] = {"key", "FILE", "its private key"},
    [OPT_CA] = {"ca", "FILE", "the federation CA (overrides the config's)"},
    [OPT_TARGET] = {"target", "ADDR", "call ADDR instead of the active party (health: any "
                                      "daemon); ADDR,ADDR,...: AP replicas, failing over to "
                                      "the next when one is unavailable"},
    [OPT_SERVER_NAME] = {"server-name", "NAME",
                         "expect party NAME's certificate (default: the config's active party, "
                         "or the configured party at --target); required with TLS and no "
                         "--config"},
    [OPT_DEADLINE] = {"deadline-ms", "N", "give up a call after N ms (1..86400000)"},
    [OPT_INSECURE] = {"insecure", NULL, "plaintext gRPC, no certificates (trials only)"},
    [OPT_USER] = {"user", "U", "recommend: the user id"},
    [OPT_ITEMS] = {"items", "a,b,c", "recommend: the candidate item ids"},
    [OPT_ARMS] = {"arms", "0,1,2", "recommend: one arm per item (disjoint models)"},
    [OPT_OWN] = {"own-features", "1,2,3,...", "recommend: the AP's own feature rows, row-major"},
    [OPT_DECISION] = {"decision", "ID", "reward: the decision id that recommend printed"},
    [OPT_REWARD] = {"reward", "R", "reward: the reward, a number"},
    {NULL, NULL, NULL},
};
static const o3m_cli_spec spec = {
    PROG,
    "(--config F --as NAME | [--config F] --cert FILE --key FILE --ca FILE)\n"
    "               [--insecure] [--target ADDR] [--server-name NAME] [--deadline-ms N]\n"
    "               COMMAND [options]",
    "Calls the active participant's service (or probes any daemon's health).",
    options,
    "commands:\n"
    "  recommend --user U --items a,b,c [--arms 0,1,2] [--own-features 1,2,3,...]\n"
    "            prints decision=<id> item=<item> candidate=<k> score=<s>\n"
    "  reward --decision ID --reward R      prints updates=<n>\n"
    "  stats                                prints one name=value per line: view=client\n"
    "                                       (a client's own counters) or view=federation\n"
    "                                       (all of them: --as the active party, or a\n"
    "                                       metrics_clients name)\n"
    "  info                                 prints one name=value per line (fingerprint=:\n"
    "                                       the AP's federation fingerprint, SECURITY.md)\n"
    "  reload                               with --config and --as PARTY: PARTY's daemon\n"
    "                                       reloads its feature tables (as on SIGHUP);\n"
    "                                       prints reloads=, refused=, users=, items=\n"
    "  health [--target ADDR]               prints SERVING (exit 1 if not serving)\n"
    "  fingerprint                          prints what --config's federation fingerprint\n"
    "                                       covers, then fingerprint=HEX; calls nobody\n"
    "  nats-setup                           with --cert/--key of the NATS administrative\n"
    "                                       identity: creates the AP replicas' stream and\n"
    "                                       bucket of --config, append-only; calls NATS\n"
    "exit 1 prints the O3M code name and the message on stderr.\n"};

typedef struct args {
  const char *config, *as, *cert, *key, *ca, *target, *server_name;
  int insecure, deadline_ms;
  const char *command;
  const char *user, *items, *arms, *own, *decision, *reward;
} args;

/* Splits a comma-separated list in place (o3m_cli_split_list); *out
 * (malloc'd, also on failure: the caller frees it) gets n pointers.
 * Returns 0, -1 when out of memory, -2 for an empty entry. */
static int split_list(char *s, char ***out, int *n) {
  int count = 1;
  for (char *p = s; *p; p++) count += *p == ',';
  char **v = o3m_malloc(sizeof *v * (size_t)count);
  *out = v;
  if (!v) return -1;
  *n = o3m_cli_split_list(s, v, count);
  return *n < 0 ? -2 : 0;
}

static int parse_u64(const char *s, uint64_t *v) {
  if (!s || !*s || *s == '-') return -1;
  char *end;
  errno = 0;
  unsigned long long x = strtoull(s, &end, 0);
  if (errno || *end) return -1;
  *v = x;
  return 0;
}

static int parse_double(const char *s, double *v) {
  if (!s || !*s) return -1;
  char *end;
  errno = 0;
  *v = strtod(s, &end);
  return (errno == ERANGE && !isfinite(*v)) || *end ? -1 : 0;
}

static int fail(int rc, const o3m_err *e) {
  fprintf(stderr, "%s: %s\n", o3m_errname(rc), o3m_err_message(e));
  return 1;
}

/* The federation fingerprint of a config, offline: operators compare it
 * out of band before any daemon starts (SECURITY.md). The canonical text
 * comes first so that two hosts' outputs can be diffed field by field; it
 * holds no path and no secret. */
static int cmd_fingerprint(const char *config) {
  if (!config) return o3m_cli_usage_error(&spec, "%s needs --config", "fingerprint");
  o3m_err e;
  o3m_err_clear(&e);
  o3m_config *cfg;
  int rc = o3m_config_load(&cfg, config, &e);
  if (rc < 0) return fail(rc, &e);
  char *text = NULL;
  size_t len;
  unsigned char fp[O3M_FINGERPRINT_BYTES];
  rc = o3m_fingerprint_compute(cfg, fp, &e);
  if (rc == 0) rc = o3m_fingerprint_canonical(cfg, &text, &len, &e);
  if (rc == 0) {
    char hex[O3M_FINGERPRINT_HEX];
    o3m_fingerprint_hex(fp, hex);
    fwrite(text, 1, len, stdout);
    printf("fingerprint=%s\n", hex);
    o3m_free(text);
  }
  o3m_config_destroy(cfg);
  return rc < 0 ? fail(rc, &e) : 0;
}

static const char *made_text(int made) {
  return made == 1   ? "created"
         : made == 2 ? "made-append-only"
         : made == 3 ? "limits-removed"
                     : "unchanged";
}

/* The administrative step of AP replicas (ap_replica.h, "Who may do
 * what"): the identity given by --cert and --key is the one NATS maps to
 * its administrative user (deploy/nats/o3m-nats.conf), which no daemon
 * holds; the servers, names, copies, TTL and CA come from --config. */
static int cmd_nats_setup(const args *a) {
  if (!a->config) return o3m_cli_usage_error(&spec, "%s needs --config", "nats-setup");
  if (a->as || a->target || a->insecure)
    return o3m_cli_usage_error(&spec, "nats-setup takes --cert and --key of the NATS "
                               "administrative identity, not --as, --target or --insecure");
  o3m_err e;
  o3m_err_clear(&e);
  o3m_config *cfg;
  int rc = o3m_config_load(&cfg, a->config, &e);
  if (rc < 0) return fail(rc, &e);
  ap_replica_config rc_;
  ap_replica_setup_info info;
  rc = ap_replica_config_of(&rc_, cfg, a->cert, a->key, &e);
  if (rc == 0) {
    if (a->ca) rc_.ca = a->ca;
    rc_.name = "o3m-cli nats-setup";
    rc_.connect_timeout_ms = a->deadline_ms > 0 ? a->deadline_ms : 20000;
    rc = ap_replica_setup(&rc_, &info, &e);
  }
  if (rc == 0)
    printf("stream=%s\nstream_setup=%s\nbucket=%s\nbucket_setup=%s\nfirst_seq=%llu\n"
           "last_seq=%llu\n", rc_.stream, made_text(info.stream_made), rc_.bucket,
           made_text(info.bucket_made), (unsigned long long)info.first_seq,
           (unsigned long long)info.last_seq);
  o3m_config_destroy(cfg);
  ap_replica_library_close();
  return rc < 0 ? fail(rc, &e) : 0;
}

static int cmd_recommend(ap_client *c, const args *a) {
  if (!a->user || !a->items)
    return o3m_cli_usage_error(&spec, "%s needs --user and --items", "recommend");
  char *items_s = o3m_strdup(a->items), *arms_s = a->arms ? o3m_strdup(a->arms) : NULL;
  char *own_s = a->own ? o3m_strdup(a->own) : NULL;
  char **items = NULL, **arm_v = NULL, **own_v = NULL;
  uint32_t *arms = NULL;
  double *own = NULL;
  int K = 0, n_arms = 0, n_own = 0, rc = 2;
  if (!items_s || (a->arms && !arms_s) || (a->own && !own_s)) {
    fprintf(stderr, "o3m-cli: out of memory\n");
    rc = 1;
    goto done;
  }
  const char *bad = NULL;
  int src = split_list(items_s, &items, &K);
  if (src == -2) bad = "--items";
  if (src == 0 && arms_s && (src = split_list(arms_s, &arm_v, &n_arms)) == -2) bad = "--arms";
  if (src == 0 && own_s && (src = split_list(own_s, &own_v, &n_own)) == -2) bad = "--own";
  if (bad) {
    rc = o3m_cli_usage_error(&spec, "recommend: %s has an empty entry", bad);
    goto done;
  }
  if (src < 0) {
    fprintf(stderr, "o3m-cli: out of memory\n");
    rc = 1;
    goto done;
  }
  if (arm_v) {
    if (n_arms != K) {
      rc = o3m_cli_usage_error(&spec, "%s: --arms needs one arm per item", "recommend");
      goto done;
    }
    arms = o3m_malloc(sizeof *arms * (size_t)K);
    for (int k = 0; arms && k < K; k++) {
      uint64_t v;
      if (parse_u64(arm_v[k], &v) < 0 || v > UINT32_MAX) {
        rc = o3m_cli_usage_error(&spec, "recommend: bad arm '%s'", arm_v[k]);
        goto done;
      }
      arms[k] = (uint32_t)v;
    }
  }
  if (own_v) {
    own = o3m_malloc(sizeof *own * (size_t)n_own);
    for (int i = 0; own && i < n_own; i++)
      if (parse_double(own_v[i], &own[i]) < 0) {
        rc = o3m_cli_usage_error(&spec, "recommend: bad own feature '%s'", own_v[i]);
        goto done;
      }
  }
  if ((arm_v && !arms) || (own_v && !own)) {
    fprintf(stderr, "o3m-cli: out of memory\n");
    rc = 1;
    goto done;
  }
  o3m_err e;
  o3m_err_clear(&e);
  ap_recommendation r;
  int r_rc = ap_client_recommend(c, a->user, K, (const char *const *)items, arms, own,
                                 (size_t)n_own, &r, &e);
  if (r_rc < 0) {
    rc = fail(r_rc, &e);
    goto done;
  }
  printf("decision=%llu item=%s candidate=%d score=%.17g", (unsigned long long)r.decision,
         r.item, r.candidate, r.score);
  /* A degraded answer says so, with the parties that were missing. */
  if (r.degraded) {
    printf(" degraded=");
    for (size_t j = 0; j < r.n_missing; j++) printf("%s%s", j ? "," : "", r.missing[j]);
  }
  printf("\n");
  rc = 0;
done:
  o3m_free(items_s);
  o3m_free(arms_s);
  o3m_free(own_s);
  o3m_free(items);
  o3m_free(arm_v);
  o3m_free(own_v);
  o3m_free(arms);
  o3m_free(own);
  return rc;
}

static int cmd_reward(ap_client *c, const args *a) {
  uint64_t id;
  double r;
  if (!a->decision || !a->reward)
    return o3m_cli_usage_error(&spec, "%s needs --decision and --reward", "reward");
  if (parse_u64(a->decision, &id) < 0)
    return o3m_cli_usage_error(&spec, "reward: bad decision id '%s'", a->decision);
  /* NaN and infinities parse; the service refuses them with INVALID_ARGUMENT. */
  if (parse_double(a->reward, &r) < 0)
    return o3m_cli_usage_error(&spec, "reward: bad reward '%s'", a->reward);
  o3m_err e;
  o3m_err_clear(&e);
  uint64_t updates;
  int rc = ap_client_reward(c, id, r, &updates, &e);
  if (rc < 0) return fail(rc, &e);
  printf("updates=%llu\n", (unsigned long long)updates);
  return 0;
}

/* Prints what the AP answered. The first line says whose counters they
 * are: view=client with client=NAME for a client's own view, in which the
 * federation-wide counters are not sent and so not printed; view=federation
 * for the operator's (the AP's own certificate, metrics_clients). */
static int cmd_stats(ap_client *c) {
  o3m_err e;
  o3m_err_clear(&e);
  ap_stats s;
  int rc = ap_client_stats(c, &s, &e);
  if (rc < 0) return fail(rc, &e);
  if (s.per_client)
    printf("view=client\nclient=%s\n", s.client);
  else
    printf("view=federation\n");
  printf("rounds=%llu\nupdates=%llu\npending=%u\nexpired=%llu\ntheta_norm=%.17g\nalgo=%s\n"
         "model=%s\nrewards=%llu\n", (unsigned long long)s.rounds, (unsigned long long)s.updates,
         s.pending, (unsigned long long)s.expired, s.theta_norm, s.algo, s.model,
         (unsigned long long)s.rewards);
  printf("degraded_rounds=%llu\nlocal_updates=%llu\n", (unsigned long long)s.degraded_rounds,
         (unsigned long long)s.local_updates);
  printf("unknown_user_rounds=%llu\nunknown_item_rounds=%llu\n",
         (unsigned long long)s.unknown_user_rounds, (unsigned long long)s.unknown_item_rounds);
  if (s.per_client) {
    printf("note=the counters of client %s's own calls; the federation-wide and item cache "
           "counters are answered only to the operator (the active party's own certificate "
           "or a name of metrics_clients)\n", s.client);
    return 0;
  }
  printf("fanouts=%llu\nreloads=%llu\nreloads_refused=%llu\n", (unsigned long long)s.fanouts,
         (unsigned long long)s.reloads, (unsigned long long)s.reloads_refused);
  printf("item_cache_hits=%llu\nitem_cache_misses=%llu\nitem_cache_size=%llu\n"
         "item_cache_capacity=%llu\n", (unsigned long long)s.cache_hits,
         (unsigned long long)s.cache_misses, (unsigned long long)s.cache_size,
         (unsigned long long)s.cache_capacity);
  printf("item_cache_resets=%llu\nitem_cache_evictions=%llu\nitem_cache_stale_retries=%llu\n",
         (unsigned long long)s.cache_resets, (unsigned long long)s.cache_evictions,
         (unsigned long long)s.cache_stale_retries);
  printf("sliced_rounds=%llu\nslice_restarts=%llu\n", (unsigned long long)s.sliced_rounds,
         (unsigned long long)s.slice_restarts);
  printf("uncached_ids=%llu\nover_budget_waits=%llu\n", (unsigned long long)s.uncached_ids,
         (unsigned long long)s.over_budget_waits);
  return 0;
}

static int cmd_info(ap_client *c) {
  o3m_err e;
  o3m_err_clear(&e);
  ap_info s;
  int rc = ap_client_info(c, &s, &e);
  if (rc < 0) return fail(rc, &e);
  printf("role=%s\nprotocol=%u\nparty=%u\ndim=%u\nparties=%u\nmask_id=%016llx\nname=%s\n"
         "fingerprint=%s\n",
         o3m_wire_role_config_name(s.role), s.protocol, s.party, s.dim, s.n_parties,
         (unsigned long long)s.mask_id, s.name, s.fingerprint);
  return 0;
}

/* The party --as names (active or passive) is the daemon called, at its
 * address unless --target says otherwise: only its own certificate may
 * reload its tables. */
static int cmd_reload(ap_client *c, int passive) {
  o3m_err e;
  o3m_err_clear(&e);
  ap_reload_info r;
  int rc = ap_client_reload(c, passive, &r, &e);
  if (rc < 0) return fail(rc, &e);
  printf("reloads=%llu\nrefused=%llu\nlast_reload_ms=%lld\nusers=%u\nitems=%u\n",
         (unsigned long long)r.reloads, (unsigned long long)r.refused,
         (long long)r.last_reload_ms, r.users, r.items);
  return 0;
}

/* Finds the party of reload: --config's party --as names, with tables of
 * its own to reload (role active or passive). Its address becomes the
 * target unless one is given. Returns 0, or an exit code after a message. */
static int reload_party(args *a, o3m_config **cfg, int *passive) {
  if (!a->config || !a->as)
    return o3m_cli_usage_error(&spec, "%s", "reload needs --config and --as PARTY (the party "
                               "whose tables to reload, with its own certificate)");
  o3m_err e;
  o3m_err_clear(&e);
  int rc = o3m_config_load(cfg, a->config, &e);
  if (rc < 0) return fail(rc, &e);
  const o3m_party *p = o3m_config_party(*cfg, a->as);
  if (!p || (p->role != O3M_ROLE_PASSIVE && p->role != O3M_ROLE_ACTIVE))
    return o3m_cli_usage_error(&spec, "reload: --as %s is not an active or passive party of %s",
                               a->as, a->config);
  *passive = p->role == O3M_ROLE_PASSIVE;
  if (!a->target) a->target = p->address;
  return 0;
}

static int cmd_health(ap_client *c) {
  o3m_err e;
  o3m_err_clear(&e);
  int serving;
  char status[32];
  int rc = ap_client_health(c, "", &serving, status, sizeof status, &e);
  if (rc < 0) return fail(rc, &e);
  printf("%s\n", status);
  return serving ? 0 : 1;
}

int main(int argc, char **argv) {
  args a;
  memset(&a, 0, sizeof a);
  const char **slots[] = {
      [OPT_CONFIG] = &a.config, [OPT_AS] = &a.as, [OPT_CERT] = &a.cert, [OPT_KEY] = &a.key,
      [OPT_CA] = &a.ca, [OPT_TARGET] = &a.target, [OPT_SERVER_NAME] = &a.server_name,
      [OPT_USER] = &a.user, [OPT_ITEMS] = &a.items, [OPT_ARMS] = &a.arms, [OPT_OWN] = &a.own,
      [OPT_DECISION] = &a.decision, [OPT_REWARD] = &a.reward,
  };
  o3m_cli cl;
  o3m_cli_begin(&cl, &spec, argc, argv);
  const char *v;
  for (int i; (i = o3m_cli_next(&cl, &v)) != O3M_CLI_END;) {
    if (i == O3M_CLI_STOP) return cl.exit_code;
    long long n;
    if (i == OPT_INSECURE) {
      a.insecure = 1;
    } else if (i == OPT_DEADLINE) {
      if (o3m_cli_parse_long(v, 1, 86400000, &n) < 0)
        return o3m_cli_usage_error(&spec, "bad --deadline-ms '%s'", v);
      a.deadline_ms = (int)n;
    } else {
      *slots[i] = v;
    }
  }
  int first = o3m_cli_operands(&cl);
  if (first < argc) a.command = argv[first];
  if (first + 1 < argc)
    return o3m_cli_usage_error(&spec, "unexpected argument '%s'", argv[first + 1]);
  if (!a.command) return o3m_cli_usage_error(&spec, "%s", "no command given");
  int is_rec = !strcmp(a.command, "recommend"), is_rew = !strcmp(a.command, "reward");
  int is_stats = !strcmp(a.command, "stats"), is_info = !strcmp(a.command, "info");
  int is_health = !strcmp(a.command, "health"), is_fpr = !strcmp(a.command, "fingerprint");
  int is_setup = !strcmp(a.command, "nats-setup"), is_reload = !strcmp(a.command, "reload");
  if (!is_rec && !is_rew && !is_stats && !is_info && !is_health && !is_fpr && !is_setup &&
      !is_reload)
    return o3m_cli_usage_error(&spec, "unknown command '%s'", a.command);
  if ((a.user || a.items || a.arms || a.own) && !is_rec)
    return o3m_cli_usage_error(
        &spec, "--user, --items, --arms and --own-features belong to recommend (not %s)",
        a.command);
  if ((a.decision || a.reward) && !is_rew)
    return o3m_cli_usage_error(&spec, "--decision and --reward belong to reward (not %s)",
                               a.command);
  if (is_fpr) return cmd_fingerprint(a.config);
  if (is_setup) return cmd_nats_setup(&a);
  /* reload: the party's config is kept until the end (a.target may point
   * into it). */
  o3m_config *party_cfg = NULL;
  int passive = 0;
  if (is_reload) {
    int prc = reload_party(&a, &party_cfg, &passive);
    if (prc) {
      o3m_config_destroy(party_cfg);
      return prc;
    }
  }
  /* The connection: checked here first, so that a bad combination is a
   * usage error (exit 2), then opened by the code the library shares. */
  o3m_err e;
  o3m_err_clear(&e);
  char fix[1024] = "";
  const ap_client_conn conn = {
      .config = a.config, .as = a.as, .cert = a.cert, .key = a.key, .ca = a.ca,
      .target = a.target, .server_name = a.server_name, .insecure = a.insecure,
      .deadline_ms = a.deadline_ms, .fix = fix, .fix_n = sizeof fix,
  };
  if (ap_client_conn_check(&conn, &e) < 0) {
    o3m_config_destroy(party_cfg);
    return o3m_cli_usage_error(&spec, "%s", o3m_err_message(&e));
  }
  o3m_config *cfg;
  ap_client *c;
  int rc = ap_client_open(&c, &cfg, &conn, &e);
  if (rc < 0) {
    o3m_config_destroy(party_cfg);
    rc = fail(rc, &e);
    if (fix[0]) fprintf(stderr, "%s: %s\n", PROG, fix);
    return rc;
  }
  if (is_reload) rc = cmd_reload(c, passive);
  else if (is_rec) rc = cmd_recommend(c, &a);
  else if (is_rew) rc = cmd_reward(c, &a);
  else if (is_stats) rc = cmd_stats(c);
  else if (is_info) rc = cmd_info(c);
  else rc = cmd_health(c);
  ap_client_destroy(c);
  o3m_config_destroy(cfg);
  o3m_config_destroy(party_cfg);
  return rc;
}
