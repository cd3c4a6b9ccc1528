/* ap_peers.c -- the active participant's clients of the passive
 * participants (see ap_peers.h).
 *
 * A peer is its client plus the copies of the strings the client's config
 * points to (so that peer_reset can build a new client at any time), and
 * the two times that pace the rebuild of a channel that stays unavailable. */
#include "ap_peers.h"
#include "o3m_alloc.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "o3m_clock.h"
#include "o3m.pb-c.h"
#include "o3m_log.h"
#include "o3m_wire.h"

/* A passive participant's channel is rebuilt after it has been unavailable
 * this long, and then at most this often (see peer_note). */
#define PEER_RESET_MS 1000
/* Backoff between the start-up wait's rounds of Info: first and largest
 * pause. */
#define WAIT_BACKOFF_FIRST_MS 100
#define WAIT_BACKOFF_MAX_MS 2000
/* The circuit breaker's probe (see ap_peers.h): first and largest pause
 * between two Info calls to a party whose breaker is open, and how often
 * the probe thread looks at the breakers. The largest pause bounds how
 * long after a party is back the federated rounds resume. */
#define PROBE_BACKOFF_FIRST_MS 50
#define PROBE_BACKOFF_MAX_MS 500
#define PROBE_TICK_MS 10

typedef struct peer {
  o3m_rpc_client *client; /* NULL after a failed rebuild */
  char name[O3M_CONFIG_MAX_NAME + 1];
  int slot;
  double max_norm; /* the party's bound on its masked parts (o3m_config.h) */
  o3m_rpc_client_config cc;
  char *target, *ca, *cert, *key;
  int64_t failing_since_ms; /* first UNAVAILABLE of the current outage, or 0 */
  int64_t last_reset_ms;
  /* The start-up wait: answered Info correctly; the last transient error
   * (for the warning about a peer that never answered). */
  int ready;
  o3m_err last;
  o3m_metrics *metrics; /* ap_peers_set_metrics; NULL: not counted */
  /* The circuit breaker (ap_peers_breaker_start): open while the party is
   * taken as missing; set by the serving thread (ap_peers_trip), cleared
   * by the probe thread, which sets renew first: the serving thread then
   * rebuilds the channel before its next call (see peer_reset). */
  atomic_int open, renew;
  /* Held out until this time (o3m_clock_ms; 0: not held), whatever the
   * breaker says: the party's epochs flapped (ap_peers_hold). Set by the
   * serving thread, read by the probe thread, which does not probe before
   * it. */
  _Atomic int64_t held_until_ms;
  o3m_metric *m_flapping; /* o3m_ap_pp_epoch_flapping_total{party} */
  o3m_rpc_client *probe; /* the probe thread's own client */
  int64_t probe_next_ms; /* the probe thread's, with its backoff */
  o3m_backoff probe_backoff;
} peer;

struct ap_peers {
  int n;
  peer *p; /* n entries */
  unsigned char fingerprint[O3M_FINGERPRINT_BYTES]; /* the config's: peers must match it */
  /* The circuit breaker's probe thread (ap_peers_breaker_start). */
  int breaker;
  pthread_t prober;
  atomic_int stopping;
  const o3m_partition *part;
  uint64_t mask_id;
};

static char *dup_or_null(const char *s) { return s ? o3m_strdup(s) : NULL; }

static void peer_free(peer *p) {
  o3m_rpc_client_destroy(p->client);
  o3m_rpc_client_destroy(p->probe);
  o3m_free(p->target);
  o3m_free(p->ca);
  o3m_free(p->cert);
  o3m_free(p->key);
  memset(p, 0, sizeof *p);
}

/* Replaces the peer's client by a new one, with a new channel (see
 * ap_peers.h for why). On failure p->client is NULL (rounds then fail with
 * UNAVAILABLE naming the peer) and e says why. */
static int peer_reset(peer *p, o3m_err *e) {
  o3m_rpc_client_destroy(p->client);
  p->client = NULL;
  p->last_reset_ms = o3m_clock_ms();
  return o3m_rpc_client_create(&p->client, &p->cc, e);
}

/* Runs after each call to a peer: after UNAVAILABLE lasting at least
 * PEER_RESET_MS, and then at most once per PEER_RESET_MS, the peer's
 * channel is rebuilt (see peer_reset), so a passive participant that was
 * down when the AP started is used within about a second of coming up. */
static void peer_note(peer *p, int rc) {
  static const o3m_metric_spec calls = {"o3m_ap_pp_calls_total",
                                        "Calls of the active party to each passive party, by "
                                        "party and O3M code", O3M_METRIC_COUNTER, NULL, 0};
  if (p->metrics) {
    char labels[O3M_METRICS_LABELS_MAX];
    /* Party names are [A-Za-z0-9_.-] (o3m_config.h): nothing to escape. */
    snprintf(labels, sizeof labels, "party=\"%s\",code=\"%s\"", p->name,
             rc == 0 ? "OK" : o3m_errname(rc));
    o3m_metrics_inc(p->metrics, &calls, labels);
  }
  if (rc != O3M_EUNAVAILABLE) {
    if (rc == 0) p->failing_since_ms = 0;
    return;
  }
  int64_t t = o3m_clock_ms();
  if (p->failing_since_ms == 0) p->failing_since_ms = t;
  if (t - p->failing_since_ms >= PEER_RESET_MS && t - p->last_reset_ms >= PEER_RESET_MS) {
    o3m_err e;
    o3m_err_clear(&e);
    if (peer_reset(p, &e) < 0)
      o3m_log_warn("passive party '%s': cannot rebuild its channel: %s", p->name,
                   o3m_err_message(&e));
  }
}

/* Fills peer p for passive party pp and creates its client. */
static int peer_init(peer *p, const o3m_config *cfg, const o3m_party *me, const o3m_party *pp,
                     int insecure, o3m_err *e) {
  snprintf(p->name, sizeof p->name, "%s", pp->name);
  p->slot = pp->slot;
  p->max_norm = pp->max_norm;
  o3m_rpc_client_config_default(&p->cc);
  o3m_rpc_client_secure(&p->cc, insecure, o3m_rpc_tls_to_party(cfg, me, pp));
  /* Several instances of the party: one channel over all of them. */
  if (pp->instances) {
    size_t n = strlen("ipv4:") + strlen(pp->address) + 1 + strlen(pp->instances) + 1;
    if ((p->target = o3m_malloc(n))) snprintf(p->target, n, "ipv4:%s,%s", pp->address, pp->instances);
    p->cc.round_robin = 1;
  } else {
    p->target = o3m_strdup(pp->address);
  }
  p->ca = dup_or_null(p->cc.tls.ca_file);
  p->cert = dup_or_null(p->cc.tls.cert_file);
  p->key = dup_or_null(p->cc.tls.key_file);
  if (!p->target || (p->cc.tls.ca_file && !p->ca) || (p->cc.tls.cert_file && !p->cert) ||
      (p->cc.tls.key_file && !p->key))
    return o3m_err_set(e, O3M_ENOMEM, "out of memory");
  p->cc.target = p->target;
  p->cc.tls.ca_file = p->ca;
  p->cc.tls.cert_file = p->cert;
  p->cc.tls.key_file = p->key;
  p->cc.tls.server_name = p->cc.tls.server_name ? p->name : NULL;
  p->cc.deadline_ms = o3m_config_deadline_ms(cfg);
  p->cc.wait_for_ready = 0;
  o3m_err ce;
  o3m_err_clear(&ce);
  int rc = peer_reset(p, &ce);
  if (rc < 0) return o3m_err_set(e, rc, "passive party '%s': %s", pp->name, o3m_err_message(&ce));
  return 0;
}

int ap_peers_create(ap_peers **out, const o3m_config *cfg, const o3m_party *me, int insecure,
                    const unsigned char fingerprint[O3M_FINGERPRINT_BYTES], o3m_err *e) {
  *out = NULL;
  ap_peers *ps = o3m_calloc(1, sizeof *ps);
  if (!ps) return o3m_err_set(e, O3M_ENOMEM, "out of memory");
  int n = o3m_config_n_passive(cfg);
  if (n > 0 && !(ps->p = o3m_calloc((size_t)n, sizeof *ps->p))) {
    o3m_free(ps);
    return o3m_err_set(e, O3M_ENOMEM, "out of memory");
  }
  ps->n = n;
  memcpy(ps->fingerprint, fingerprint, sizeof ps->fingerprint);
  int rc = 0;
  for (int j = 0; j < n && rc == 0; j++)
    rc = peer_init(&ps->p[j], cfg, me, o3m_config_passive(cfg, j), insecure, e);
  if (rc < 0) {
    ap_peers_destroy(ps);
    return rc;
  }
  *out = ps;
  return 0;
}

int ap_peers_wait_ready(ap_peers *ps, const o3m_partition *part, int64_t budget_ms,
                        volatile sig_atomic_t *stop, o3m_err *e) {
  o3m_backoff bo;
  o3m_backoff_start(&bo, WAIT_BACKOFF_FIRST_MS, WAIT_BACKOFF_MAX_MS, budget_ms);
  int missing = ps->n, rc = 0;
  O3m__V1__InfoRequest ir = O3M__V1__INFO_REQUEST__INIT;
  for (int j = 0; j < ps->n; j++) {
    ps->p[j].ready = 0;
    o3m_err_clear(&ps->p[j].last);
  }
  while (missing > 0) {
    int started[O3M_MAX_PARTIES];
    for (int j = 0; j < ps->n; j++)
      started[j] = !ps->p[j].ready && ps->p[j].client &&
                   o3m_rpc_client_start(ps->p[j].client, O3M_PATH_PASSIVE_INFO, &ir.base,
                                        &o3m__v1__node_info__descriptor, NULL) == 0;
    for (int j = 0; j < ps->n; j++) {
      if (!started[j]) continue;
      peer *p = &ps->p[j];
      ProtobufCMessage *m;
      o3m_err ce;
      o3m_err_clear(&ce);
      int r = o3m_rpc_client_finish(p->client, &m, &ce);
      if (r == 0)
        r = o3m_wire_info_check((const O3m__V1__NodeInfo *)m, O3M__V1__ROLE__ROLE_PASSIVE,
                                p->slot, part, ps->fingerprint, &ce);
      if (r == 0) {
        p->ready = 1;
        missing--;
      } else if (r == O3M_EUNAVAILABLE || r == O3M_EDEADLINE) {
        p->last = ce;
        /* A fresh channel for the next attempt (see peer_reset). */
        o3m_err_clear(&ce);
        if (r == O3M_EUNAVAILABLE && peer_reset(p, &ce) < 0 && rc == 0)
          rc = o3m_err_set(e, ce.code, "passive party '%s': %s", p->name, o3m_err_message(&ce));
      } else if (rc == 0) {
        rc = o3m_err_set(e, r, "passive party '%s': %s", p->name, o3m_err_message(&ce));
      }
    }
    if (rc < 0 || missing == 0) break;
    if (o3m_backoff_left(&bo) <= 0) {
      for (int j = 0; j < ps->n; j++)
        if (!ps->p[j].ready)
          o3m_log_warn("passive party '%s' is not reachable; its rounds fail until it is "
                       "(last error: %s: %s)", ps->p[j].name, o3m_errname(ps->p[j].last.code),
                       o3m_err_message(&ps->p[j].last));
      break;
    }
    if (o3m_backoff_sleep(&bo, stop)) {
      rc = o3m_err_set(e, O3M_ESTATE, "stopped while waiting for the passive parties");
      break;
    }
  }
  return rc;
}

int ap_peers_count(const ap_peers *ps) { return ps->n; }

const char *ap_peers_name(const ap_peers *ps, int j) { return ps->p[j].name; }

int ap_peers_slot(const ap_peers *ps, int j) { return ps->p[j].slot; }

double ap_peers_max_norm(const ap_peers *ps, int j) { return ps->p[j].max_norm; }

int ap_peers_start(ap_peers *ps, const char *path, const ProtobufCMessage *req,
                   const ProtobufCMessageDescriptor *reply, int *started, o3m_err *e) {
  o3m_err pe;
  for (*started = 0; *started < ps->n; (*started)++) {
    peer *p = &ps->p[*started];
    o3m_err_clear(&pe);
    /* The probe found the party back: a new channel (see peer_reset). */
    if (atomic_exchange(&p->renew, 0) && peer_reset(p, &pe) < 0)
      o3m_log_warn("passive party '%s': cannot rebuild its channel: %s", p->name,
                   o3m_err_message(&pe));
    int r = p->client ? o3m_rpc_client_start(p->client, path, req, reply, &pe)
                      : o3m_err_set(&pe, O3M_EUNAVAILABLE, "no channel (rebuilding failed)");
    if (r < 0) {
      int rc = o3m_err_set(e, r, "party '%s': %s", p->name, o3m_err_message(&pe));
      peer_note(p, r);
      return rc;
    }
  }
  return 0;
}

int ap_peers_finish(ap_peers *ps, int j, ProtobufCMessage **reply, o3m_err *e) {
  peer *p = &ps->p[j];
  int r = o3m_rpc_client_finish(p->client, reply, e);
  peer_note(p, r);
  return r;
}

/* One probe of peer p by the probe thread: Info on its own client, checked
 * like the start-up wait's, and the mask the AP uses. 0 when the party may
 * be asked again. */
static int probe_once(ap_peers *ps, peer *p) {
  O3m__V1__InfoRequest ir = O3M__V1__INFO_REQUEST__INIT;
  ProtobufCMessage *m;
  o3m_err ce;
  o3m_err_clear(&ce);
  int r = p->probe ? o3m_rpc_client_call(p->probe, O3M_PATH_PASSIVE_INFO, &ir.base,
                                         &o3m__v1__node_info__descriptor, &m, &ce)
                   : O3M_EUNAVAILABLE;
  if (r == 0)
    r = o3m_wire_info_check((const O3m__V1__NodeInfo *)m, O3M__V1__ROLE__ROLE_PASSIVE, p->slot,
                            ps->part, ps->fingerprint, &ce);
  if (r == 0 && ((const O3m__V1__NodeInfo *)m)->mask_id != ps->mask_id) r = O3M_EMASK;
  if (r == O3M_EUNAVAILABLE || r == O3M_EDEADLINE) {
    /* A fresh channel for the next probe (see peer_reset). Past the
     * deadline too: a host cut off the network loses the channel's SYNs,
     * and its one connect attempt stays in SYN-SENT through the cut and
     * after it, until the kernel's next retransmission (a doubling
     * backoff) or gRPC's 20 s connect timeout: the party back on the
     * network went unseen for about 2 s in e2e_netns_linkdown. A fresh
     * channel dials at once. */
    o3m_rpc_client_destroy(p->probe);
    p->probe = NULL;
    o3m_err_clear(&ce);
    if (o3m_rpc_client_create(&p->probe, &p->cc, &ce) < 0) p->probe = NULL;
  }
  return r;
}

/* The probe thread: every open breaker's party is asked for its Info with
 * a backoff (PROBE_BACKOFF_FIRST_MS doubling to PROBE_BACKOFF_MAX_MS), and
 * its breaker closes as soon as it answers with the federation's partition,
 * fingerprint and the AP's mask. It touches only the peers' probe clients,
 * their probe times and the two flags. */
static void *prober_main(void *arg) {
  ap_peers *ps = arg;
  const struct timespec tick = {0, PROBE_TICK_MS * 1000000L};
  while (!atomic_load(&ps->stopping)) {
    int64_t now = o3m_clock_ms();
    for (int j = 0; j < ps->n; j++) {
      peer *p = &ps->p[j];
      if (!atomic_load(&p->open)) {
        p->probe_next_ms = 0;
        continue;
      }
      if (p->probe_next_ms == 0) {
        o3m_backoff_start(&p->probe_backoff, PROBE_BACKOFF_FIRST_MS, PROBE_BACKOFF_MAX_MS,
                          O3M_BACKOFF_UNBOUNDED);
        p->probe_next_ms = now + o3m_backoff_next(&p->probe_backoff);
      }
      if (now < p->probe_next_ms || now < atomic_load(&p->held_until_ms)) continue;
      if (probe_once(ps, p) == 0) {
        o3m_log_info("passive party '%s' answers again: its rounds are federated again",
                     p->name);
        atomic_store(&p->renew, 1);
        atomic_store(&p->open, 0);
        p->probe_next_ms = 0;
        continue;
      }
      now = o3m_clock_ms();
      p->probe_next_ms = now + o3m_backoff_next(&p->probe_backoff);
    }
    nanosleep(&tick, NULL);
  }
  return NULL;
}

int ap_peers_breaker_start(ap_peers *ps, const o3m_partition *part, uint64_t mask_id,
                           o3m_err *e) {
  if (ps->breaker || ps->n == 0) return 0;
  ps->part = part;
  ps->mask_id = mask_id;
  for (int j = 0; j < ps->n; j++) {
    peer *p = &ps->p[j];
    o3m_err ce;
    o3m_err_clear(&ce);
    int rc = o3m_rpc_client_create(&p->probe, &p->cc, &ce);
    if (rc < 0)
      return o3m_err_set(e, rc, "passive party '%s': its probe client: %s", p->name,
                         o3m_err_message(&ce));
    /* A party the start-up wait did not reach is missing from the start. */
    atomic_store(&p->open, !p->ready);
  }
  atomic_store(&ps->stopping, 0);
  int rc = pthread_create(&ps->prober, NULL, prober_main, ps);
  if (rc != 0) return o3m_err_set(e, O3M_ENOMEM, "the probe thread: %s", strerror(rc));
  ps->breaker = 1;
  return 0;
}

void ap_peers_trip(ap_peers *ps, int j) {
  if (ps->breaker && j >= 0 && j < ps->n && !atomic_exchange(&ps->p[j].open, 1))
    o3m_log_warn("passive party '%s' is missing: its rounds go to the local model until it "
                 "answers again", ps->p[j].name);
}

int ap_peers_is_open(const ap_peers *ps, int j) {
  return ps->breaker && atomic_load(&ps->p[j].open);
}

void ap_peers_hold(ap_peers *ps, int j, int64_t until_ms, int count) {
  if (j < 0 || j >= ps->n) return;
  peer *p = &ps->p[j];
  atomic_store(&p->held_until_ms, until_ms);
  if (ps->breaker) atomic_store(&p->open, 1);
  if (count && p->m_flapping) o3m_metric_add(p->m_flapping, 1);
}

int ap_peers_held(const ap_peers *ps, int j, int64_t now_ms) {
  return now_ms < atomic_load(&ps->p[j].held_until_ms);
}

void ap_peers_set_metrics(ap_peers *ps, o3m_metrics *m) {
  static const o3m_metric_spec flapping = {
      "o3m_ap_pp_epoch_flapping_total",
      "Times the active party held a passive party out because its item epochs flapped "
      "(epoch_changes_max_per_minute)", O3M_METRIC_COUNTER, NULL, 0};
  for (int j = 0; j < ps->n; j++) {
    ps->p[j].metrics = m;
    /* Registered at once, so the series is 0 until it counts (an alert
     * and a dashboard see it); a registry that is full only loses it. */
    char labels[O3M_METRICS_LABELS_MAX];
    snprintf(labels, sizeof labels, "party=\"%s\"", ps->p[j].name);
    o3m_err e;
    o3m_err_clear(&e);
    if (m && o3m_metrics_series(m, &flapping, labels, &ps->p[j].m_flapping, &e) < 0)
      ps->p[j].m_flapping = NULL;
  }
}

void ap_peers_destroy(ap_peers *ps) {
  if (!ps) return;
  if (ps->breaker) {
    atomic_store(&ps->stopping, 1);
    pthread_join(ps->prober, NULL);
  }
  for (int j = 0; ps->p && j < ps->n; j++) peer_free(&ps->p[j]);
  o3m_free(ps->p);
  o3m_free(ps);
}
