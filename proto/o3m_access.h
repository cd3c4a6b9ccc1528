/* o3m_access.h -- who may call which method of a daemon.
 *
 * Each daemon states its access policy as a small table of rules
 * {path, allow}, one per method of its method table, next to that table
 * (pmg_service_access, pp_service_access, the AP's ap_access in
 * ap_service_handlers.c).
 * allow is a set of caller classes:
 *
 *   O3M_ACCESS_PMG, O3M_ACCESS_ACTIVE, O3M_ACCESS_PASSIVE
 *                      a party of the federation config with that role;
 *   O3M_ACCESS_CLIENT  a [client NAME] of the config;
 *   O3M_ACCESS_SELF    the daemon's own party;
 *   O3M_ACCESS_MONITOR a name of [federation] metrics_clients (the
 *                      identities that may read /metrics); with SELF, the
 *                      operator identities (the AP's whole Stats).
 *
 * A caller's classes come from its identity, the common name of its
 * verified certificate (o3m_rpc_call_identity), looked up among the parties,
 * the clients and the metrics_clients of the config (a name may be in
 * several: its classes are the union). An identity that names neither (a
 * certificate the CA signed for someone else) and a caller without an
 * identity belong to no class and may call nothing. A path without a rule
 * is refused as well, and o3m_access_create checks that the rules and the
 * method table name exactly the same paths, so a method added later without
 * a rule fails the start instead of being open.
 *
 * o3m_access_install() makes the policy the authorization hook of a server
 * (o3m_rpc.h, "Authorization"): the RPC layer asks it before a request is
 * unpacked, answers a refusal with PERMISSION_DENIED and counts it, so the
 * handlers contain no identity checks. The built-in health check is open to
 * any caller that passed the TLS handshake, and with --insecure (plaintext,
 * no identities) the hook is not called at all, so every call is allowed,
 * as the daemons' --insecure has always meant.
 *
 * Refusals are logged at WARN with the identity, the method and the peer's
 * address, at most one line a second (the next line says how many were not
 * logged), so that a misconfigured or hostile caller cannot flood the log.
 *
 * Memory and threads: create copies the names it needs (cfg is only read
 * during the call); the rule table must outlive the policy. The hook runs
 * on a serving thread of the server, one call at a time;
 * o3m_access_refused() may be read from any thread. */
#ifndef O3M_ACCESS_H
#define O3M_ACCESS_H

#include <stdint.h>

#include "o3m_config.h"
#include "o3m_error.h"
#include "o3m_rpc.h"

/* Caller classes (bits of o3m_access_rule.allow). */
#define O3M_ACCESS_PMG (1u << 0)
#define O3M_ACCESS_ACTIVE (1u << 1)
#define O3M_ACCESS_PASSIVE (1u << 2)
#define O3M_ACCESS_CLIENT (1u << 3)
#define O3M_ACCESS_SELF (1u << 4)
#define O3M_ACCESS_MONITOR (1u << 5)
/* Who operates a daemon: its own certificate and the metrics readers. */
#define O3M_ACCESS_OPERATOR (O3M_ACCESS_SELF | O3M_ACCESS_MONITOR)
/* The parties that own columns of x. */
#define O3M_ACCESS_COLUMN (O3M_ACCESS_ACTIVE | O3M_ACCESS_PASSIVE)
/* Every party of the config. */
#define O3M_ACCESS_PARTY (O3M_ACCESS_PMG | O3M_ACCESS_COLUMN)

/* One method's rule. A static const array is the usual form. */
typedef struct o3m_access_rule {
  const char *path;  /* a path of the daemon's method table */
  unsigned allow;    /* O3M_ACCESS_* bits; 0 refuses everyone */
} o3m_access_rule;

typedef struct o3m_access o3m_access;

/* A policy for the daemon of party self (a name in cfg) serving methods
 * under rules. Errors: O3M_EINVAL when self is not a party of cfg, a rule
 * has a bad path or allow bit, two rules name one path, or a method has no
 * rule or a rule no method (the message names the path); O3M_ENOMEM. On
 * failure *out is NULL. */
int o3m_access_create(o3m_access **out, const o3m_config *cfg, const char *self,
                      const o3m_access_rule *rules, int n_rules, const o3m_rpc_method *methods,
                      int n_methods, o3m_err *e);

/* NULL is accepted. Not while a server that uses the policy exists. */
void o3m_access_destroy(o3m_access *a);

/* Sets sc's authorize hook to this policy. */
void o3m_access_install(o3m_access *a, o3m_rpc_server_config *sc);

/* Binds the server of a daemon's own party me under the access policy
 * rules, the way every daemon binds its server: it listens on sc->listen,
 * or me->listen (the party's listen key, else its address) if that is NULL;
 * unless sc->insecure, with mutual TLS from the party's cert and key and
 * the federation CA (o3m_rpc_tls_of_party);
 * connections idle for O3M_RPC_DAEMON_IDLE_CLOSE_MS are closed; the limits
 * before a request is read come from [federation] rpc_* (o3m_config_rpc).
 * The rest of sc (size limits, slots, idle hook) is the caller's; sc is
 * updated in place. On success *srv is the server (ctx is its handlers' context) and
 * *acc its policy: destroy the server first. On failure both are NULL and
 * nothing is left listening; e holds o3m_access_create's error, or "CONFIG:
 * [party NAME]: " and o3m_rpc_server_create's ("listen ADDRESS: CAUSE",
 * O3M_EIO, or a TLS file's problem, O3M_ETLS). */
int o3m_access_serve(o3m_rpc_server **srv, o3m_access **acc, o3m_rpc_server_config *sc,
                     const o3m_config *cfg, const o3m_party *me, const o3m_access_rule *rules,
                     int n_rules, const o3m_rpc_method *methods, int n_methods, void *ctx,
                     o3m_err *e);

/* The classes (O3M_ACCESS_* bits) of identity; 0 for NULL or an identity
 * that names no party, no client and no metrics client. */
unsigned o3m_access_classes(const o3m_access *a, const char *identity);

/* The hook itself (an o3m_rpc_authorize_fn; ctx is the o3m_access). 0 when
 * the classes of identity meet the rule of path; otherwise O3M_EPERM with e
 * saying which callers the method is for. call is only used for the peer's
 * address in the log line and may be NULL. */
int o3m_access_authorize(void *ctx, o3m_rpc_call *call, const char *path, const char *identity,
                         o3m_err *e);

/* Calls refused since create. */
uint64_t o3m_access_refused(const o3m_access *a);

#endif
