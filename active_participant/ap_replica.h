/* ap_replica.h -- AP replicas over NATS JetStream: the replicated reward log
 * and the shared decision records.
 *
 * With [federation] replication = nats several o3m-active processes (the
 * replicas, each named by --replica) serve one active party. Each holds its
 * own copy of the model; the single source of truth is a JetStream stream
 * (nats_stream, subject "<stream>.rewards", nats_replicas copies, file
 * storage) of reward records. A replica that receives a Reward appends the
 * record to the stream (ap_replica_publish) and acknowledges the client only
 * after JetStream has acknowledged it, that is after a majority of the
 * stream's copies hold it. Every replica, the publisher included, applies
 * the stream in stream order through an ordered consumer
 * (ap_replica_next), so every replica's model is the same function of the
 * same sequence of records: bit-identical after the same stream sequence.
 *
 * Decision records. A Reward may reach a replica that did not make the
 * decision. The replica that made it keeps its record (the masked context,
 * arm, mask and owner) in an open-decision table of its own, as many as
 * its pending table holds, for the pending lifetime
 * (ap_replica_put_decision), and answers the other replicas' lookups from
 * it on the core NATS subject "<stream>.lookup.<tag>" (request and reply,
 * not stored; tag: 4 hex digits of ap_replica_tag of its name, the low 16
 * bits of every decision id it draws), found or not found at once; a
 * replica that does not find a decision in its own pending table asks the
 * subject of the id's tag (ap_replica_get_decision), or its own table for
 * its own tag. No Reward waits for an answer that will not come: a tag no
 * live replica has gets NATS's "no responders" at once; only a replica
 * alive to NATS but silent costs LOOKUP_WAIT_MS, and its tag is then
 * refused at once for SLOW_MS. A replica refuses to start when a live one
 * already answers its tag. Why not the replicated
 * key-value bucket of the first replicas: a write per Recommend, acknowledged by a
 * majority of 3 NATS servers, cost those servers 0.6-0.9 ms of CPU per
 * decision, more than the AP's whole decision, and a round trip under the
 * handler lock; with lookups a Recommend costs NATS nothing. The price:
 * the open decisions of a replica that dies die with it (a Reward for one
 * is NOT_FOUND, "unknown to every live replica", at once);
 * rewards already acknowledged are in the stream and are never lost. The
 * bucket is still read when no replica has an id's tag, for the records replicas
 * of the previous release wrote (during a rolling upgrade).
 *
 * De-duplication. A record is published with the decision id as its
 * Nats-Msg-Id, and the stream's duplicate window is the pending lifetime,
 * so JetStream stores a retried reward only once (ap_replica_publish says
 * duplicate). Replicas additionally skip, when applying, a record whose
 * decision was already applied (the service's applied set), so a duplicate
 * that reached the stream anyway changes no model.
 *
 * Record format (little-endian): decision u64, mask id u64, arm i32, d u32,
 * reward f64, then x[d] f64 (the masked context), 32 + 8 d bytes; with a
 * local model (d0 > 0, [federation] fallback = local) followed by its
 * part: d0 u32, flags u32 (1: degraded), x^0[d0] f64. A degraded
 * decision's record has x all zero and flag 1: every replica applies it to
 * its local model alone, a record with flag 0 to both models, a record
 * without the part (a replica of the release before) to the federated
 * model alone. The decision record (a lookup's answer, or the bucket's) is
 * arm i32, d u32, mask id u64, x[d], then the owner: its length u8
 * (0..AP_REPLICA_MAX_OWNER) and the name of the
 * client that asked for the decision, which alone may reward it (the
 * service checks it on every replica, as it does its own pending table's
 * owner), then with d0 > 0 the local part: flags u8 (1: degraded),
 * x^0[d0], so that the replica a Reward reaches learns the right model(s)
 * whichever replica made the decision. A record of exactly 16 + 8 d bytes is one of a replica from
 * before owners were recorded: it has no owner to check, and such records
 * leave the bucket with its TTL, one pending lifetime after an upgrade.
 *
 * Who may do what. The stream and the bucket are created by an
 * administrative identity (ap_replica_setup), append-only: deletes, purges
 * and rollups are denied by their own configuration. The replicas' NATS
 * identity (the active party's certificate) may append to the stream, ask
 * and answer decision lookups, put and read bucket records, read the
 * stream through ordered consumers and
 * ask for stream info, nothing else (deploy/nats/o3m-nats.conf): a stolen
 * AP key can add records, which every replica checks (replica_bounds in
 * ap_service_replica.c), but not remove any. A replica that finds records gone
 * anyway (a purge by the administrative identity, a re-created stream)
 * refuses to start or stops (ap_replica_check, ap_replica_next). The
 * administrative identity can still set a limit (max_msgs, max_bytes,
 * max_age, max_msgs_per_subject) or another retention, with which
 * JetStream itself drops records (max_msgs = 2 erases all but the last
 * two at once): a replica refuses to start over such a stream, and a
 * running one reads the configuration at every check and reports a limit
 * (ap_replica_limits) without stopping, since the records it applied are
 * in its model and only new replicas would lack them. nats-setup removes
 * the limits.
 *
 * Transport. With tls = 1 (the default, [federation] nats_tls = on) the
 * connection is TLS with mutual authentication: the replica trusts ca (the
 * federation CA), presents cert and key (the active party's own, so NATS
 * can map it to the one user allowed to use the stream and the bucket;
 * deploy/nats/o3m-nats.conf), and requires the server's certificate to
 * carry server_name (every NATS node's certificate names "nats"), so that
 * another party's certificate from the same CA cannot pose as a NATS
 * server. tls = 0 is plain text without credentials: the config accepts it
 * only for NATS on loopback (o3m_config.h, nats_tls).
 *
 * The NATS library's process-wide state is set up by the first create (the
 * one place that initializes it) and released by ap_replica_library_close,
 * which the daemon's main calls once before it exits, not by
 * ap_replica_destroy: a process may create and destroy several handles.
 *
 * Threads: the handle is used by one thread at a time (the service calls it
 * under its server's lock); the NATS library runs threads of its own that
 * never touch the service: one answers lookups from the open-decision
 * table, under the handle's own mutex. */
#ifndef AP_REPLICA_H
#define AP_REPLICA_H

#include <stddef.h>
#include <stdint.h>

#include "o3m_error.h"
#include "o3m_limits.h"

typedef struct ap_replica ap_replica;

typedef struct ap_replica_config {
  const char *servers;   /* comma-separated NATS URLs (required) */
  const char *stream;    /* stream name; subject "<stream>.rewards" */
  const char *bucket;    /* key-value bucket of decision records */
  int replicas;          /* R: copies of the stream and the bucket (1..5) */
  int64_t ttl_ms;        /* pending-decision lifetime: bucket TTL, duplicate window */
  int open_max;          /* open decisions kept for lookups (the pending capacity) */
  int d;                 /* context dimension */
  int d0;                /* the local model's dimension (ap_fallback.h); 0: none */
  uint64_t start_seq;    /* the first stream sequence to apply (1: all) */
  const char *name;      /* this replica's name, for the NATS connection */
  int connect_timeout_ms;
  int tls;               /* 1: mutual TLS with the four below (required) */
  const char *ca;        /* PEM file of the CA the NATS servers' certificates chain to */
  const char *cert;      /* PEM file of this replica's certificate (the party's) */
  const char *key;       /* PEM file of its private key */
  const char *server_name; /* the DNS name every NATS server's certificate carries */
} ap_replica_config;

/* Fills rc from cfg's [federation] replication keys (servers, stream,
 * bucket, copies, TLS: the federation's ca and server name) and [policy]
 * pending_expiry_s (the bucket's TTL, the duplicate window), with cert and
 * key as the identity to present (the party's for a replica, the
 * administrative one for ap_replica_setup). The rest is zeroed (d,
 * start_seq 1, name, timeout): the caller's. O3M_EINVAL, naming the keys,
 * when cfg has no replication = nats or TLS lacks a file. */
struct o3m_config;
int ap_replica_config_of(ap_replica_config *rc, const struct o3m_config *cfg, const char *cert,
                         const char *key, o3m_err *e);

/* One reward record of the stream. x points into the handle (valid until
 * the next ap_replica_next). */
typedef struct ap_replica_record {
  uint64_t seq;          /* stream sequence */
  int64_t time_ms;       /* stream timestamp, Unix ms */
  uint64_t decision;
  uint64_t mask_id;
  int arm;
  double reward;
  const double *x;
  /* The decision's own part x^0 (d0 values; NULL when the record has none:
   * d0 0, or a replica of the release before) and whether the decision
   * was degraded (the local model alone learns it; x is then zeros). */
  const double *x0;
  int degraded;
} ap_replica_record;

/* What ap_replica_setup did: for the stream and the bucket, 1 created, 2
 * made append-only (it existed, allowing deletes or purges), 3 the reward
 * stream's limits removed (ap_replica_limits), 0 already so; and the
 * stream's first and last sequences. */
typedef struct ap_replica_setup_info {
  int stream_made, bucket_made;
  uint64_t first_seq, last_seq;
} ap_replica_setup_info;

/* The administrative step, run once per federation before any replica
 * starts (o3m-cli nats-setup) with an identity no daemon holds (cfg's cert
 * and key: NATS maps them to its administrative user; the replicas'
 * identity may not create, change or remove streams; deploy/nats/
 * o3m-nats.conf). Creates the stream and the bucket with cfg's copies and
 * TTL, append-only: deletes, purges and rollups denied in their own
 * configuration, so that no identity can shorten them without first
 * changing that. An existing one keeps its records and settings and is
 * made append-only if it was not; the reward stream's limits that can
 * drop records are removed (a retention other than limits cannot be, and
 * is an error naming it). Idempotent. d and start_seq are not
 * used (any valid value). Errors as ap_replica_create's. */
int ap_replica_setup(const ap_replica_config *cfg, ap_replica_setup_info *info, o3m_err *e);

/* Connects to NATS (retrying up to connect_timeout_ms), checks that the
 * stream and the bucket exist and are append-only (else O3M_ENOTFOUND or
 * O3M_EPERM, naming the setup command: a replica never creates them), that
 * the stream still holds every record from start_seq on
 * (ap_replica_check), and subscribes an ordered consumer from start_seq.
 * Errors name the
 * servers and the NATS status (O3M_EUNAVAILABLE), with tls the CA file,
 * the expected server name and the certificate presented too; a TLS
 * handshake that fails (the servers' certificates do not chain to ca or do
 * not name server_name, or NATS refused this certificate) or an
 * authorization refusal ends the attempts at once. A bad config is
 * O3M_EINVAL (a TLS file that cannot be loaded is named). On failure *out
 * is NULL and nothing is left. */
int ap_replica_create(ap_replica **out, const ap_replica_config *cfg, o3m_err *e);

/* Decision ids name their replica: the low AP_REPLICA_TAG_BITS bits of
 * every id a replica draws are the tag of its name (this function), the
 * other 48 bits random (see "Decision records" above). */
#define AP_REPLICA_TAG_BITS 16
uint64_t ap_replica_tag(const char *name);

/* Keeps the decision record of a Recommend (see "Decision records"
 * above) in this replica's open-decision table, where the other replicas'
 * lookups find it; nothing goes to NATS. O3M_EINVAL for an owner name
 * longer than AP_REPLICA_MAX_OWNER. */
int ap_replica_put_decision(ap_replica *r, uint64_t decision, const char *owner, int arm,
                            uint64_t mask_id, const double *x, const double *x0, int degraded,
                            o3m_err *e);

/* The longest owner name a decision record carries (a client name): a
 * field of the record format, which must hold every name the config
 * accepts. */
#define AP_REPLICA_MAX_OWNER 64
_Static_assert(AP_REPLICA_MAX_OWNER >= O3M_MAX_NAME, "every client name fits a decision record");

/* Reads a decision record into *arm, *mask_id, x (d values) and, when it
 * names one (*has_owner 1, else 0), its owner into owner
 * (AP_REPLICA_MAX_OWNER + 1 bytes).
 * O3M_ENOTFOUND when the bucket has none (never made, or older than the
 * TTL), O3M_EUNAVAILABLE when NATS does not answer. */
int ap_replica_get_decision(ap_replica *r, uint64_t decision, char *owner, int *has_owner,
                            int *arm, uint64_t *mask_id, double *x, double *x0, int *has_local,
                            int *degraded, o3m_err *e);

/* Appends a reward record and waits for JetStream's acknowledgement:
 * *seq is its stream sequence and *duplicate is 1 when JetStream already
 * held a record with this decision id (then nothing was added and *seq is
 * the original's). O3M_EUNAVAILABLE when it is not acknowledged (the
 * record may or may not be in the stream). */
int ap_replica_publish(ap_replica *r, uint64_t decision, uint64_t mask_id, int arm,
                       double reward, const double *x, const double *x0, int degraded,
                       uint64_t *seq, int *duplicate, o3m_err *e);

/* The next record of the stream in order, waiting up to wait_ms (0: only
 * what has arrived). Returns 1 with *rec filled, 0 when nothing came, or a
 * negative code: O3M_ECORRUPT for a record that does not parse, or whose
 * sequence is not the one after the last record returned (records were
 * purged or deleted, or the stream re-created; the error names both
 * sequences). The service must then stop: going on would let replicas
 * differ. */
int ap_replica_next(ap_replica *r, ap_replica_record *rec, int64_t wait_ms, o3m_err *e);

/* Checks that the stream still holds what this replica needs: it exists,
 * its last sequence is not below the last record this replica applied
 * (start_seq - 1 before any), and its first sequence is not above the next
 * one it will apply. O3M_ECORRUPT names the sequences when the stream moved
 * backwards, lost records this replica has not applied (a purge) or is
 * gone; the replica must then refuse to start or stop serving, never start
 * over. O3M_ENOTFOUND when the stream does not exist and nothing was
 * applied (the setup was not run); O3M_EUNAVAILABLE when NATS does not
 * answer (try again later). The service calls it at start (within
 * ap_replica_create) and every few seconds while it serves. */
int ap_replica_check(ap_replica *r, o3m_err *e);

/* The settings of the reward stream that can drop records (a limit of
 * count, size, age or count per subject, whatever the discard policy; a
 * retention other than limits), as the last ap_replica_check read them:
 * their number, 0 for none, and in what (len bytes, cut to fit; may be
 * NULL) their names and values, "max_msgs = 2, discard old". A replica
 * refuses to start while there is one (O3M_EPERM from ap_replica_create,
 * naming them and the setup command, which removes them). */
#define AP_REPLICA_LIMITS_TEXT 160
int ap_replica_limits(const ap_replica *r, char *what, size_t len);

/* The stream's last sequence as JetStream reports it now (for catching up
 * at start). */
int ap_replica_last_seq(ap_replica *r, uint64_t *seq, o3m_err *e);

/* Closes the subscription and the connection. The library's global state
 * stays (see "Transport" above). NULL is accepted. */
void ap_replica_destroy(ap_replica *r);

/* Releases the NATS library's process-wide state (nats_CloseAndWait), if a
 * create opened it and no handle used TLS (libnats 3.4 then corrupts
 * OpenSSL's state for its exit handler: see ap_replica.c): once, at
 * process exit, after every handle is destroyed, from the thread that runs
 * main. A process that never created a handle does nothing. */
void ap_replica_library_close(void);

#endif
