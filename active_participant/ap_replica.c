/* ap_replica.c -- the replicated reward log and decision records on NATS
 * JetStream (see ap_replica.h). A thin layer over the C client libnats: it
 * owns one connection, one JetStream context, the bucket and one ordered
 * consumer, and encodes the two record formats. Buffers for one record are
 * allocated at create; nothing is allocated per call except by libnats. */
#include "ap_replica.h"
#include "o3m_alloc.h"

#include <inttypes.h>
#include <nats/nats.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "o3m_bytes.h"
#include "o3m_cli.h"
#include "o3m_clock.h"
#include "o3m_config.h"
#include "o3m_hash.h"
#include "o3m_log.h"

#define MAX_SERVERS 16
#define SLOW_TAGS 8
#define REC_HDR 32
#define DEC_HDR 16

struct ap_replica {
  natsConnection *nc;
  jsCtx *js;
  kvStore *kv;
  natsSubscription *sub;
  char *stream;       /* a copy of cfg->stream */
  char subject[160];
  /* The reward stream's settings that can drop records, as the last
   * stream info read them (stream_limits): their number and names. */
  int limits;
  char limits_what[AP_REPLICA_LIMITS_TEXT];
  /* The bucket's stream and the subject prefix of its keys, for the read
   * from the stream's leader (ap_replica_get_decision). */
  char kv_stream[160], kv_prefix[160];
  /* The bucket's subjects, "$KV.<bucket>.>" (the setup's stream config). */
  char kv_subjects[160];
  int d;
  int d0;             /* the local part's dimension (0: records carry none) */
  /* The stream sequence this replica applies next: one past the last
   * record ap_replica_next returned (cfg->start_seq at first). Every check
   * that the stream did not lose records compares with it. */
  uint64_t next_seq;
  unsigned char *buf; /* one encoded record */
  double *x;          /* the last record's context */
  double *x0;         /* and its local part (d0 values) */
  /* mu guards what a libnats thread shares with the serving thread: the
   * open decisions (below). */
  pthread_mutex_t mu;
  int mu_made;
  /* This replica's open decisions, for the lookups of the other replicas
   * (see "Decision records" in ap_replica.h): open_mask + 1 slots of
   * OPEN_SLOT(r) bytes (id u64, time ms i64, length u32, pad, the record),
   * probed linearly up to OPEN_PROBES slots from the id's hash; a new one
   * takes a free, expired or else the oldest of those. on_lookup answers
   * from it on a libnats thread, with lbuf as its copy of one record. */
  unsigned char *open;
  size_t open_mask;
  int64_t ttl_ms;
  unsigned char *lbuf;
  natsSubscription *lookup;
  char lookup_subject[176];
  uint64_t tag; /* this replica's tag: the low bits of its decision ids */
  /* Replicas (by tag) that let a lookup time out, and until when their
   * decisions' Rewards are refused at once (the serving thread's). */
  struct slow_tag {
    uint64_t tag;
    int64_t until_ms;
  } slow[SLOW_TAGS];
};

/* The open-decision table (struct ap_replica): a slot's header, its size,
 * the probes per id, and how long a lookup waits for the replica that
 * holds the decision. */
#define OPEN_HDR 24
#define LOCAL_DEC(r) ((r)->d0 ? 1 + 8 * (size_t)(r)->d0 : 0) /* flags u8, x0 */
#define LOCAL_REC(r) (8 + 8 * (size_t)(r)->d0)                /* d0 u32, flags u32, x0 */
#define REC_MAX(r) (DEC_HDR + 8 * (size_t)(r)->d + 1 + AP_REPLICA_MAX_OWNER + LOCAL_DEC(r))
#define OPEN_SLOT(r) (OPEN_HDR + REC_MAX(r))
#define OPEN_PROBES 8
#define LOOKUP_WAIT_MS 250
/* How long the decisions of a replica that let a lookup time out (alive
 * to NATS, yet not answering) are refused without asking it again: one
 * client's Rewards can make the serving thread wait LOOKUP_WAIT_MS at most
 * once per SLOW_MS for each such replica. */
#define SLOW_MS 5000
#define TAG_MASK ((UINT64_C(1) << AP_REPLICA_TAG_BITS) - 1)

/* An O3M error for a NATS status, naming what was tried. */
static int nats_fail(o3m_err *e, natsStatus s, const char *what) {
  const char *last = nats_GetLastError(NULL);
  return o3m_err_set(e, O3M_EUNAVAILABLE, "NATS: %s: %s%s%s", what, natsStatus_GetText(s),
                     last && *last ? ": " : "", last && *last ? last : "");
}

void ap_replica_destroy(ap_replica *r) {
  if (!r) return;
  /* No lookup callback may run on a freed handle: the subscription is
   * drained, and its end (every callback returned) waited for. */
  if (r->lookup && natsSubscription_Drain(r->lookup) == NATS_OK)
    natsSubscription_WaitForDrainCompletion(r->lookup, 2000);
  if (r->sub) natsSubscription_Destroy(r->sub);
  if (r->lookup) natsSubscription_Destroy(r->lookup);
  if (r->kv) kvStore_Destroy(r->kv);
  if (r->js) jsCtx_Destroy(r->js);
  if (r->nc) natsConnection_Destroy(r->nc);
  o3m_free(r->buf);
  o3m_free(r->x);
  o3m_free(r->x0);
  o3m_free(r->stream);
  o3m_free(r->open);
  o3m_free(r->lbuf);
  if (r->mu_made) pthread_mutex_destroy(&r->mu);
  o3m_free(r);
}

static pthread_once_t library_once = PTHREAD_ONCE_INIT;
static natsStatus library_status = NATS_OK;
static int library_opened;
static int library_tls; /* a handle used TLS (see ap_replica_library_close) */

static void library_open(void) {
  library_status = nats_Open(-1);
  library_opened = library_status == NATS_OK;
}

void ap_replica_library_close(void) {
  /* The library's global state (its threads, its timers) goes, so that a
   * leak checker sees nothing at exit. Not after TLS: libnats 3.4 (Debian's)
   * frees OpenSSL's compression method stack on close without clearing it,
   * and OpenSSL's own cleanup at exit frees it again (github.com/nats-io/nats.c/issues/904; seen
   * here as "malloc_consolidate(): unaligned fastbin chunk" at exit). Its
   * state then stays reachable until exit, which leak checkers accept. */
  if (library_opened && !library_tls) nats_CloseAndWait(2000);
  library_opened = 0;
}

/* The TLS options of a replica (see "Transport" in ap_replica.h): a file
 * that cannot be loaded is named in the error. */
static int tls_options(natsOptions *no, const ap_replica_config *cfg, o3m_err *e) {
  if (!cfg->ca || !cfg->cert || !cfg->key || !cfg->server_name || !*cfg->server_name)
    return o3m_err_set(e, O3M_EINVAL, "replication: TLS to NATS needs a CA file, a "
                       "certificate, its key and the servers' name");
  library_tls = 1;
  natsStatus s = natsOptions_SetSecure(no, true);
  if (s != NATS_OK) return nats_fail(e, s, "TLS");
  if ((s = natsOptions_LoadCATrustedCertificates(no, cfg->ca)) != NATS_OK) {
    nats_fail(e, s, "");
    return o3m_err_set(e, O3M_EINVAL, "replication: cannot load the CA certificates of %s "
                       "(%s)", cfg->ca, o3m_err_message(e));
  }
  if ((s = natsOptions_LoadCertificatesChain(no, cfg->cert, cfg->key)) != NATS_OK) {
    nats_fail(e, s, "");
    return o3m_err_set(e, O3M_EINVAL, "replication: cannot load the certificate %s with the key "
                       "%s (%s)", cfg->cert, cfg->key, o3m_err_message(e));
  }
  if ((s = natsOptions_SetExpectedHostname(no, cfg->server_name)) != NATS_OK)
    return nats_fail(e, s, "TLS server name");
  return 0;
}

/* The setup command's name in every refusal that it would mend. */
#define SETUP_CMD "o3m-cli --config FILE --cert ADMIN.pem --key ADMIN.key nats-setup"

/* The configuration of the reward stream: R copies on file storage, a
 * duplicate window of ttl_ms, no limits (the stream is the model's
 * history; see docs/scaling.md on its growth) and append-only: no message
 * delete, no purge, no rollup (a rollup is a purge by header), so that
 * even an identity allowed the whole JetStream API cannot shorten it. */
static void reward_stream_config(jsStreamConfig *sc, const char **subjects,
                                 const ap_replica_config *cfg) {
  jsStreamConfig_Init(sc);
  sc->Name = cfg->stream;
  sc->Subjects = subjects;
  sc->SubjectsLen = 1;
  sc->Storage = js_FileStorage;
  sc->Replicas = cfg->replicas;
  sc->Duplicates = cfg->ttl_ms * 1000000; /* nanoseconds */
  sc->DenyDelete = true;
  sc->DenyPurge = true;
  sc->AllowRollup = false;
}

/* The bucket's stream as libnats' js_CreateKeyValue makes it (History 1,
 * the TTL as MaxAge, discard new, direct gets), but with purges and
 * rollups denied as well: libnats allows rollups, which purge a key or the
 * whole bucket by a header any writer may send. The replicas need neither:
 * they put and get decision records; a record leaves by its TTL (MaxAge
 * is a limit, not a purge, and still applies). */
static void bucket_stream_config(jsStreamConfig *sc, const char **subjects, const char *name,
                                 const ap_replica_config *cfg) {
  jsStreamConfig_Init(sc);
  sc->Name = name;
  sc->Subjects = subjects;
  sc->SubjectsLen = 1;
  sc->MaxMsgsPerSubject = 1;
  sc->MaxBytes = -1;
  sc->MaxMsgSize = -1;
  sc->MaxAge = cfg->ttl_ms * 1000000; /* nanoseconds */
  sc->Storage = js_FileStorage;
  sc->Replicas = cfg->replicas;
  sc->Discard = js_DiscardNew;
  sc->AllowDirect = true;
  sc->DenyDelete = true;
  sc->DenyPurge = true;
  sc->AllowRollup = false;
}

static int append_only(const jsStreamConfig *c) {
  return c->DenyDelete && c->DenyPurge && !c->AllowRollup;
}

/* Appends one more setting to the list in what (len bytes, cut to fit),
 * after a comma unless it is the first. */
static void limit_add(char *what, size_t len, int *n, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void limit_add(char *what, size_t len, int *n, const char *fmt, ...) {
  size_t off = strlen(what);
  if ((*n)++ && off + 2 < len) {
    memcpy(what + off, ", ", 3);
    off += 2;
  }
  va_list ap;
  va_start(ap, fmt);
  if (off < len) vsnprintf(what + off, len - off, fmt, ap);
  va_end(ap);
}

/* The settings of the reward stream's configuration c that can drop
 * records without a delete or a purge: every limit (a count, a size, an
 * age, a count per subject), whatever the discard policy (discard old
 * erases the oldest records; discard new refuses every reward once the
 * stream is full, and a per-subject limit may erase records even so), and
 * a retention other than limits (interest or work queue: records leave
 * once consumed). Returns their number (0: none), and names them with
 * their values and the discard policy in what (len bytes, cut to fit):
 * "max_msgs = 2, discard old". */
static int stream_limits(const jsStreamConfig *c, char *what, size_t len) {
  int n = 0;
  what[0] = '\0';
  if (c->Retention != js_LimitsPolicy)
    limit_add(what, len, &n, "retention = %s",
              c->Retention == js_InterestPolicy ? "interest" : "workqueue");
  if (c->MaxMsgs > 0) limit_add(what, len, &n, "max_msgs = %lld", (long long)c->MaxMsgs);
  if (c->MaxBytes > 0) limit_add(what, len, &n, "max_bytes = %lld", (long long)c->MaxBytes);
  if (c->MaxAge > 0)
    limit_add(what, len, &n, "max_age = %lld s", (long long)(c->MaxAge / 1000000000));
  if (c->MaxMsgsPerSubject > 0)
    limit_add(what, len, &n, "max_msgs_per_subject = %lld", (long long)c->MaxMsgsPerSubject);
  if (n && (c->MaxMsgs > 0 || c->MaxBytes > 0 || c->MaxAge > 0 || c->MaxMsgsPerSubject > 0)) {
    int k = n; /* the policy is said, not counted */
    limit_add(what, len, &k, "discard %s", c->Discard == js_DiscardNew ? "new" : "old");
  }
  return n;
}

/* Administrative: creates a stream, or makes an existing one append-only
 * and, with unlimited (the reward stream), removes its limits that can drop
 * records (stream_limits; a retention other than limits cannot be changed
 * and is refused by JetStream, named in the error). Its other settings,
 * the records included, stay. *made is 1 when it was created, 2 when it
 * was made append-only, 3 when only limits were removed, 0 when it was
 * already so; *first and *last are its sequences. */
static int setup_stream(ap_replica *r, jsStreamConfig *want, int unlimited, int *made,
                        uint64_t *first, uint64_t *last, o3m_err *e) {
  jsStreamInfo *si = NULL;
  jsErrCode jerr = 0;
  char what[256 + AP_REPLICA_LIMITS_TEXT], limits[AP_REPLICA_LIMITS_TEXT];
  natsStatus s = js_GetStreamInfo(&si, r->js, want->Name, NULL, &jerr);
  *made = 0;
  int limited = s == NATS_OK && unlimited && stream_limits(si->Config, limits, sizeof limits);
  if (s == NATS_OK && (!append_only(si->Config) || limited)) {
    jsStreamConfig c = *si->Config;
    *made = append_only(&c) ? 3 : 2;
    c.DenyDelete = true;
    c.DenyPurge = true;
    c.AllowRollup = false;
    if (limited) {
      c.MaxMsgs = -1;
      c.MaxBytes = -1;
      c.MaxAge = 0;
      c.MaxMsgsPerSubject = -1;
    }
    jsStreamInfo *ui = NULL;
    s = js_UpdateStream(&ui, r->js, &c, NULL, &jerr);
    jsStreamInfo_Destroy(si);
    si = ui;
    if (limited)
      snprintf(what, sizeof what, "cannot make stream '%s' append-only without limits (it has "
               "%s; error %d)", want->Name, limits, (int)jerr);
    else
      snprintf(what, sizeof what, "cannot make stream '%s' append-only (error %d)", want->Name,
               (int)jerr);
  } else if (s != NATS_OK && jerr == JSStreamNotFoundErr) {
    s = js_AddStream(&si, r->js, want, NULL, &jerr);
    *made = 1;
    snprintf(what, sizeof what, "cannot create stream '%s' with %d replicas (error %d)",
             want->Name, (int)want->Replicas, (int)jerr);
  } else {
    snprintf(what, sizeof what, "stream info of '%s' (error %d)", want->Name, (int)jerr);
  }
  if (s != NATS_OK) {
    jsStreamInfo_Destroy(si);
    return nats_fail(e, s, what);
  }
  *first = si->State.FirstSeq;
  *last = si->State.LastSeq;
  jsStreamInfo_Destroy(si);
  return 0;
}

/* One stream's state for a replica: O3M_ENOTFOUND when it does not exist
 * and O3M_EPERM when it is not append-only (both mended by the setup
 * command, which the error names), O3M_EUNAVAILABLE when JetStream does
 * not answer (yet). */
static int stream_state(ap_replica *r, const char *name, const char *what, uint64_t *first,
                        uint64_t *last, o3m_err *e) {
  jsStreamInfo *si = NULL;
  jsErrCode jerr = 0;
  /* A short wait: the serving thread asks this every nats_check_ms
   * (ap_service_replica.c), and a cluster that does not answer within a second is
   * asked again at the next check (or, at start, the next attempt). */
  jsOptions jo;
  jsOptions_Init(&jo);
  jo.Wait = 1000;
  natsStatus s = js_GetStreamInfo(&si, r->js, name, &jo, &jerr);
  if (s != NATS_OK && jerr == JSStreamNotFoundErr)
    return o3m_err_set(e, O3M_ENOTFOUND, "the %s '%s' does not exist; it is created by the "
                       "administrative identity, not by a replica: %s", what, name, SETUP_CMD);
  if (s != NATS_OK) {
    char w[200];
    snprintf(w, sizeof w, "stream info of the %s '%s'", what, name);
    return nats_fail(e, s, w);
  }
  int ok = append_only(si->Config);
  *first = si->State.FirstSeq;
  *last = si->State.LastSeq;
  if (!strcmp(name, r->stream))
    r->limits = stream_limits(si->Config, r->limits_what, sizeof r->limits_what);
  jsStreamInfo_Destroy(si);
  if (!ok)
    return o3m_err_set(e, O3M_EPERM, "the %s '%s' allows deletes or purges; make it "
                       "append-only: %s", what, name, SETUP_CMD);
  return 0;
}

int ap_replica_check(ap_replica *r, o3m_err *e) {
  uint64_t first, last, next = r->next_seq;
  int rc = stream_state(r, r->stream, "reward stream", &first, &last, e);
  /* Missing before anything was applied: the setup was not run (the
   * message names it). Missing after: its history is lost. */
  if (rc == O3M_ENOTFOUND && next > 1)
    return o3m_err_set(e, O3M_ECORRUPT, "the reward stream '%s' is gone (deleted) while this "
                       "replica has applied it up to seq %llu", r->stream,
                       (unsigned long long)(next - 1));
  /* Lost records are named before a stream that is not append-only. */
  if (rc < 0 && rc != O3M_EPERM) return rc;
  if (last + 1 < next)
    return o3m_err_set(e, O3M_ECORRUPT, "the reward stream '%s' moved backwards: its last "
                       "seq is %llu, this replica has applied it up to seq %llu (deleted and "
                       "re-created?)", r->stream, (unsigned long long)last,
                       (unsigned long long)(next - 1));
  if (first > next)
    return o3m_err_set(e, O3M_ECORRUPT, "the reward stream '%s' lost records %llu..%llu "
                       "(purged: its first seq is %llu, its last %llu) that this replica "
                       "has not applied", r->stream, (unsigned long long)next,
                       (unsigned long long)(first - 1), (unsigned long long)first,
                       (unsigned long long)last);
  return rc;
}

int ap_replica_limits(const ap_replica *r, char *what, size_t len) {
  if (what && len) snprintf(what, len, "%s", r->limits ? r->limits_what : "");
  return r->limits;
}

int ap_replica_config_of(ap_replica_config *rc, const o3m_config *cfg, const char *cert,
                         const char *key, o3m_err *e) {
  const o3m_config_replication *repl = o3m_config_replication_of(cfg);
  memset(rc, 0, sizeof *rc);
  if (strcmp(repl->mode, "nats") != 0)
    return o3m_err_set(e, O3M_EINVAL, "%s: [federation] replication is '%s', not nats",
                       o3m_config_name(cfg), repl->mode);
  rc->tls = strcmp(repl->tls, "on") == 0;
  if (rc->tls && (!o3m_config_ca(cfg) || !cert || !key))
    return o3m_err_set(e, O3M_EINVAL, "%s: nats_tls = on needs the federation's ca and a "
                       "certificate and key to present to NATS; nats_tls = off is for NATS on "
                       "loopback only", o3m_config_name(cfg));
  rc->ca = o3m_config_ca(cfg);
  rc->cert = cert;
  rc->key = key;
  rc->server_name = repl->server_name;
  rc->servers = repl->servers;
  rc->stream = repl->stream;
  rc->bucket = repl->bucket;
  rc->replicas = repl->replicas;
  rc->ttl_ms = (int64_t)o3m_config_policy(cfg)->pending_expiry_s * 1000;
  rc->d = 1;
  rc->start_seq = 1;
  return 0;
}

/* The names a handle derives from cfg (the stream's subject, the bucket's
 * stream and subjects) into a zeroed r. */
static int replica_names(ap_replica *r, const ap_replica_config *cfg, o3m_err *e) {
  if (pthread_mutex_init(&r->mu, NULL) != 0) return o3m_err_set(e, O3M_ENOMEM, "mutex");
  r->mu_made = 1;
  if (!cfg->servers || !*cfg->servers || !cfg->stream || !cfg->bucket || cfg->replicas < 1 ||
      cfg->replicas > 5 || cfg->d < 1 || cfg->ttl_ms < 1000 || cfg->start_seq < 1 ||
      cfg->d0 < 0 || cfg->d0 > cfg->d)
    return o3m_err_set(e, O3M_EINVAL, "replication: servers, stream and bucket are required, "
                       "replicas in 1..5, d >= 1, d0 in 0..d, ttl >= 1 s");
  r->d = cfg->d;
  r->d0 = cfg->d0;
  r->next_seq = cfg->start_seq;
  int ns = snprintf(r->subject, sizeof r->subject, "%s.rewards", cfg->stream);
  int nk = snprintf(r->kv_stream, sizeof r->kv_stream, "KV_%s", cfg->bucket);
  int np = snprintf(r->kv_prefix, sizeof r->kv_prefix, "$KV.%s.", cfg->bucket);
  int nb = snprintf(r->kv_subjects, sizeof r->kv_subjects, "$KV.%s.>", cfg->bucket);
  r->tag = ap_replica_tag(cfg->name ? cfg->name : "");
  int nl = snprintf(r->lookup_subject, sizeof r->lookup_subject, "%s.lookup.%04" PRIx64,
                    cfg->stream, r->tag);
  if (ns < 0 || (size_t)ns >= sizeof r->subject || nl < 0 ||
      (size_t)nl >= sizeof r->lookup_subject)
    return o3m_err_set(e, O3M_EINVAL, "replication: stream name '%.40s...' is too long",
                       cfg->stream);
  if (nk < 0 || np < 0 || nb < 0 || (size_t)nk >= sizeof r->kv_stream ||
      (size_t)np + 16 >= sizeof r->kv_prefix || (size_t)nb >= sizeof r->kv_subjects)
    return o3m_err_set(e, O3M_EINVAL, "replication: bucket name '%.40s...' is too long",
                       cfg->bucket);
  r->stream = o3m_strdup(cfg->stream);
  if (!r->stream) return o3m_err_set(e, O3M_ENOMEM, "out of memory");
  return 0;
}

/* Connects r to NATS (retrying until the time until, Unix ms of
 * o3m_clock_ms) and opens its JetStream context: the part a replica and
 * the setup command share. */
static int replica_connect(ap_replica *r, const ap_replica_config *cfg, int64_t until,
                           o3m_err *e) {
  char copy[1024];
  char *urls[MAX_SERVERS];
  int n, rc;
  natsOptions *no = NULL;
  if (strlen(cfg->servers) >= sizeof copy)
    return o3m_err_set(e, O3M_EINVAL, "replication: nats_servers is too long");
  snprintf(copy, sizeof copy, "%s", cfg->servers);
  if ((n = o3m_cli_split_list(copy, urls, MAX_SERVERS)) < 0)
    return o3m_err_set(e, O3M_EINVAL, "replication: nats_servers '%s': entry %d is empty or one "
                       "too many (at most %d URLs)", cfg->servers, -n, MAX_SERVERS);
  pthread_once(&library_once, library_open);
  if (library_status != NATS_OK)
    return nats_fail(e, library_status, "cannot initialize the NATS library");
  natsStatus s = natsOptions_Create(&no);
  if (s == NATS_OK) s = natsOptions_SetServers(no, (const char **)urls, n);
  if (s == NATS_OK && cfg->name) s = natsOptions_SetName(no, cfg->name);
  /* Reconnect forever: a NATS node that dies is replaced by another of the
   * list; calls fail meanwhile and are answered UNAVAILABLE. */
  if (s == NATS_OK) s = natsOptions_SetMaxReconnect(no, -1);
  if (s == NATS_OK) s = natsOptions_SetReconnectWait(no, 100);
  if (s == NATS_OK) s = natsOptions_SetTimeout(no, 2000);
  if (s != NATS_OK) {
    rc = nats_fail(e, s, "options");
    goto done;
  }
  if (cfg->tls && (rc = tls_options(no, cfg, e)) < 0) goto done;
  /* A refused certificate (either side's) or identity does not heal by
   * waiting: those end the attempts at once. */
  do {
    s = natsConnection_Connect(&r->nc, no);
    if (s == NATS_OK || s == NATS_SSL_ERROR || s == NATS_CONNECTION_AUTH_FAILED) break;
    nats_Sleep(200);
  } while (o3m_clock_ms() < until);
  if (s != NATS_OK) {
    /* The library's detail (an OpenSSL reason, "Authorization Violation")
     * goes to the log whole; the error names the files and the servers
     * first, where a 256-byte message keeps them. */
    const char *last = nats_GetLastError(NULL);
    o3m_log_error("NATS: connecting to %s: %s%s%s", cfg->servers, natsStatus_GetText(s),
                  last && *last ? ": " : "", last && *last ? last : "");
    if (cfg->tls)
      rc = o3m_err_set(e, O3M_EUNAVAILABLE, "NATS: cannot connect to %s over TLS (CA %s, server "
                       "name '%s', certificate %s): %s", cfg->servers, cfg->ca,
                       cfg->server_name, cfg->cert, natsStatus_GetText(s));
    else
      rc = o3m_err_set(e, O3M_EUNAVAILABLE, "NATS: cannot connect to %s in plain text "
                       "(nats_tls = off): %s", cfg->servers, natsStatus_GetText(s));
    goto done;
  }
  jsOptions jo;
  jsOptions_Init(&jo);
  jo.Wait = 5000;
  rc = 0;
  if ((s = natsConnection_JetStream(&r->js, r->nc, &jo)) != NATS_OK)
    rc = nats_fail(e, s, "JetStream context");
done:
  natsOptions_Destroy(no);
  return rc;
}

static int64_t deadline_of(const ap_replica_config *cfg) {
  return o3m_clock_ms() + (cfg->connect_timeout_ms > 0 ? cfg->connect_timeout_ms : 10000);
}

int ap_replica_setup(const ap_replica_config *cfg, ap_replica_setup_info *info, o3m_err *e) {
  memset(info, 0, sizeof *info);
  ap_replica *r = o3m_calloc(1, sizeof *r);
  if (!r) return o3m_err_set(e, O3M_ENOMEM, "out of memory");
  int64_t until = deadline_of(cfg);
  int rc = replica_names(r, cfg, e);
  if (!rc) rc = replica_connect(r, cfg, until, e);
  if (rc) goto done;
  jsStreamConfig rs, bs;
  const char *rsub[1] = {r->subject}, *bsub[1] = {r->kv_subjects};
  reward_stream_config(&rs, rsub, cfg);
  bucket_stream_config(&bs, bsub, r->kv_stream, cfg);
  /* A new or restarted cluster elects its leaders a moment after it
   * answers ("JetStream system temporarily unavailable"): retry until the
   * connect timeout. */
  do {
    o3m_err_clear(e);
    rc = setup_stream(r, &rs, 1, &info->stream_made, &info->first_seq, &info->last_seq, e);
    uint64_t f, l;
    if (!rc) rc = setup_stream(r, &bs, 0, &info->bucket_made, &f, &l, e);
    if (!rc) break;
    o3m_log_warn("%s; retrying", o3m_err_message(e));
    nats_Sleep(500);
  } while (o3m_clock_ms() < until);
done:
  ap_replica_destroy(r);
  return rc;
}

static void on_lookup(natsConnection *nc, natsSubscription *sub, natsMsg *msg, void *closure);

int ap_replica_create(ap_replica **out, const ap_replica_config *cfg, o3m_err *e) {
  *out = NULL;
  ap_replica *r = o3m_calloc(1, sizeof *r);
  if (!r) return o3m_err_set(e, O3M_ENOMEM, "out of memory");
  int64_t until = deadline_of(cfg);
  int rc = replica_names(r, cfg, e);
  if (rc) goto fail;
  /* Either record: a stream record is REC_HDR + 8 d + LOCAL_REC, less. */
  r->buf = o3m_malloc(REC_MAX(r) + REC_HDR + LOCAL_REC(r));
  r->x = o3m_malloc(sizeof *r->x * (size_t)cfg->d);
  r->x0 = o3m_malloc(sizeof *r->x0 * (size_t)(cfg->d0 + 1));
  /* The open-decision table: a power of two of slots, at least open_max. */
  size_t slots = 64;
  while (slots < (size_t)(cfg->open_max > 0 ? cfg->open_max : 1)) slots *= 2;
  r->open_mask = slots - 1;
  r->ttl_ms = cfg->ttl_ms;
  r->open = o3m_calloc(slots, OPEN_SLOT(r));
  r->lbuf = o3m_malloc(REC_MAX(r));
  if (!r->buf || !r->x || !r->x0 || !r->open || !r->lbuf) {
    rc = o3m_err_set(e, O3M_ENOMEM, "out of memory");
    goto fail;
  }
  if ((rc = replica_connect(r, cfg, until, e)) < 0) goto fail;
  /* Two live replicas with one tag would answer each other's lookups, the
   * one without the decision perhaps first: a name whose tag a live
   * replica already answers on is refused. NATS answers "no responders"
   * at once when none does. */
  unsigned char probe[8] = {0};
  natsMsg *pm = NULL;
  natsStatus ps = natsConnection_Request(&pm, r->nc, r->lookup_subject, probe, 8, 1000);
  natsMsg_Destroy(pm);
  if (ps == NATS_OK) {
    rc = o3m_err_set(e, O3M_EEXISTS, "replica '%s': a live replica already answers the "
                     "decision lookups of tag %04" PRIx64 " (%s): give this replica another "
                     "name, or stop the other one", cfg->name ? cfg->name : "",
                     r->tag, r->lookup_subject);
    goto fail;
  }
  natsStatus ls = natsConnection_Subscribe(&r->lookup, r->nc, r->lookup_subject, on_lookup, r);
  if (ls != NATS_OK) {
    r->lookup = NULL;
    rc = nats_fail(e, ls, "the decision lookups' subscription");
    goto fail;
  }
  jsSubOptions so;
  jsSubOptions_Init(&so);
  so.Stream = cfg->stream;
  so.Ordered = true;
  so.Config.DeliverPolicy = js_DeliverByStartSequence;
  so.Config.OptStartSeq = cfg->start_seq;
  /* Heartbeats every second (the library's default is 5 s): an ordered
   * consumer whose NATS node died is noticed after two missed ones and
   * recreated on another node from the next sequence. */
  so.Config.Heartbeat = (int64_t)1000 * 1000000;
  /* The stream and the bucket must exist, append-only, and the stream must
   * still hold every record after this replica's snapshot (ap_replica_check):
   * a replica never creates them, so that its identity needs no right to
   * change them. A new or restarted cluster elects its leaders a moment
   * after it answers: only that (UNAVAILABLE) is retried. */
  do {
    o3m_err_clear(e);
    uint64_t f, l;
    rc = ap_replica_check(r, e);
    /* A limit is named first: records it already erased are what a
     * new replica then finds lost. */
    if (r->limits && (rc == 0 || rc == O3M_ECORRUPT || rc == O3M_EPERM)) {
      char also[O3M_ERRMSG_MAX];
      snprintf(also, sizeof also, "%s", rc ? o3m_err_message(e) : "");
      rc = o3m_err_set(e, rc == O3M_ECORRUPT ? rc : O3M_EPERM, "the reward stream '%s' may "
                       "drop records (%s); remove the limits: %s%s%s", r->stream,
                       r->limits_what, SETUP_CMD, *also ? "; and " : "", also);
    }
    if (!rc) rc = stream_state(r, r->kv_stream, "decision bucket", &f, &l, e);
    if (!rc) {
      natsStatus s = js_KeyValue(&r->kv, r->js, cfg->bucket);
      if (s != NATS_OK) rc = nats_fail(e, s, "decision bucket");
    }
    if (!rc) {
      jsErrCode jerr = 0;
      natsStatus s = js_SubscribeSync(&r->sub, r->js, r->subject, NULL, &so, &jerr);
      if (s == NATS_OK) break;
      r->sub = NULL;
      rc = nats_fail(e, s, "ordered consumer");
    }
    if (r->kv) kvStore_Destroy(r->kv);
    r->kv = NULL;
    if (rc != O3M_EUNAVAILABLE) break;
    o3m_log_warn("%s; retrying", o3m_err_message(e));
    nats_Sleep(500);
  } while (o3m_clock_ms() < until);
  if (rc) goto fail;
  *out = r;
  return 0;
fail:
  ap_replica_destroy(r);
  return rc;
}

static void key_of(char key[17], uint64_t decision) {
  snprintf(key, 17, "%016" PRIx64, decision);
}

uint64_t ap_replica_tag(const char *name) {
  return o3m_hash_bytes(name, strlen(name), 0) & TAG_MASK;
}

/* The open-decision table's slot of decision id, or NULL (under mu). */
static unsigned char *open_find(ap_replica *r, uint64_t id, int64_t now_ms) {
  size_t i = (size_t)o3m_hash_bytes(&id, sizeof id, 0) & r->open_mask;
  for (int n = 0; n < OPEN_PROBES; n++, i = (i + 1) & r->open_mask) {
    unsigned char *slot = r->open + i * OPEN_SLOT(r);
    if (o3m_get_le64(slot) == id) {
      int64_t t = (int64_t)o3m_get_le64(slot + 8);
      return now_ms - t <= r->ttl_ms ? slot : NULL;
    }
  }
  return NULL;
}

int ap_replica_put_decision(ap_replica *r, uint64_t decision, const char *owner, int arm,
                            uint64_t mask_id, const double *x, const double *x0, int degraded,
                            o3m_err *e) {
  size_t on = strlen(owner);
  if (on > AP_REPLICA_MAX_OWNER)
    return o3m_err_set(e, O3M_EINVAL, "decision owner of %zu bytes, at most %d", on,
                       AP_REPLICA_MAX_OWNER);
  int64_t now = o3m_clock_ms();
  pthread_mutex_lock(&r->mu);
  /* A free slot, else an expired one, else the oldest of the probes. */
  size_t i = (size_t)o3m_hash_bytes(&decision, sizeof decision, 0) & r->open_mask;
  unsigned char *best = NULL;
  int64_t best_t = INT64_MAX;
  for (int n = 0; n < OPEN_PROBES; n++, i = (i + 1) & r->open_mask) {
    unsigned char *slot = r->open + i * OPEN_SLOT(r);
    int64_t t = o3m_get_le64(slot) == 0 ? INT64_MIN : (int64_t)o3m_get_le64(slot + 8);
    if (t < best_t) {
      best = slot;
      best_t = t;
    }
    if (t == INT64_MIN) break;
  }
  unsigned char *b = best + OPEN_HDR;
  o3m_put_le32(b, (uint32_t)arm);
  o3m_put_le32(b + 4, (uint32_t)r->d);
  o3m_put_le64(b + 8, mask_id);
  for (int k = 0; k < r->d; k++) o3m_put_le64(b + DEC_HDR + 8 * k, o3m_double_bits(x[k]));
  /* The owner after x (see "Record format" in ap_replica.h). */
  unsigned char *ob = b + DEC_HDR + 8 * r->d;
  ob[0] = (unsigned char)on;
  memcpy(ob + 1, owner, on);
  /* Then the local part, when this federation keeps a local model. */
  size_t tail = 0;
  if (r->d0 && x0) {
    unsigned char *lb = ob + 1 + on;
    lb[0] = degraded ? 1 : 0;
    for (int k = 0; k < r->d0; k++) o3m_put_le64(lb + 1 + 8 * k, o3m_double_bits(x0[k]));
    tail = LOCAL_DEC(r);
  }
  o3m_put_le64(best, decision);
  o3m_put_le64(best + 8, (uint64_t)now);
  o3m_put_le32(best + 16, (uint32_t)(DEC_HDR + 8 * r->d + 1 + on + tail));
  pthread_mutex_unlock(&r->mu);
  return 0;
}

/* The record of decision id in this replica's open-decision table, copied
 * to out (REC_MAX bytes): its length, or 0 when not held. */
static int open_copy(ap_replica *r, uint64_t id, unsigned char *out) {
  int len = 0;
  pthread_mutex_lock(&r->mu);
  unsigned char *slot = id ? open_find(r, id, o3m_clock_ms()) : NULL;
  if (slot) {
    len = (int)o3m_get_le32(slot + 16);
    memcpy(out, slot + OPEN_HDR, (size_t)len);
  }
  pthread_mutex_unlock(&r->mu);
  return len;
}

/* A lookup from another replica (on a libnats thread): the 8-byte decision
 * id; answered with its record when this replica holds it, with an empty
 * message when not: only this replica subscribes to its tag's subject, so
 * no other will answer, and the asker must not wait. */
static void on_lookup(natsConnection *nc, natsSubscription *sub, natsMsg *msg, void *closure) {
  (void)sub;
  ap_replica *r = closure;
  const char *reply = natsMsg_GetReply(msg);
  if (reply && natsMsg_GetDataLength(msg) == 8) {
    uint64_t id = o3m_get_le64((const unsigned char *)natsMsg_GetData(msg));
    int len = open_copy(r, id, r->lbuf);
    natsConnection_Publish(nc, reply, r->lbuf, len);
  }
  natsMsg_Destroy(msg);
}

int ap_replica_get_decision(ap_replica *r, uint64_t decision, char *owner, int *has_owner,
                            int *arm, uint64_t *mask_id, double *x, double *x0, int *has_local,
                            int *degraded, o3m_err *e) {
  char key[17];
  key_of(key, decision);
  kvEntry *ent = NULL;
  natsMsg *m = NULL;
  const unsigned char *b = NULL;
  int len = 0;
  /* The decision's id names the replica that made it (its tag): this
   * one answers from its own table, with no NATS traffic; another is asked
   * on its own subject and answers found or not at once; for a tag no live
   * replica has, NATS answers "no responders" at once. Only a replica that
   * is alive to NATS but does not answer costs a wait (LOOKUP_WAIT_MS),
   * and then not again for SLOW_MS. No Reward waits for an answer that
   * will not come. */
  uint64_t tag = decision & TAG_MASK;
  int64_t now = o3m_clock_ms();
  natsStatus s;
  if (tag == r->tag) {
    len = open_copy(r, decision, r->buf);
    b = r->buf;
    s = len > 0 ? NATS_OK : NATS_NOT_FOUND;
    if (s == NATS_NOT_FOUND)
      return o3m_err_set(e, O3M_ENOTFOUND, "decision %llu names this replica (tag %04" PRIx64
                         "), which does not hold it", (unsigned long long)decision, tag);
  } else {
    struct slow_tag *st = NULL;
    for (int i = 0; i < SLOW_TAGS; i++)
      if (r->slow[i].until_ms > now && r->slow[i].tag == tag) st = &r->slow[i];
    if (st)
      return o3m_err_set(e, O3M_EUNAVAILABLE, "decision %llu: the replica that made it (tag %04"
                         PRIx64 ") did not answer a lookup within %d ms; its decisions are "
                         "refused for %lld ms more", (unsigned long long)decision, tag,
                         LOOKUP_WAIT_MS, (long long)(st->until_ms - now));
    char subject[sizeof r->lookup_subject];
    snprintf(subject, sizeof subject, "%.*s%04" PRIx64,
             (int)(strlen(r->lookup_subject) - 4), r->lookup_subject, tag);
    unsigned char idb[8];
    o3m_put_le64(idb, decision);
    s = natsConnection_Request(&m, r->nc, subject, idb, 8, LOOKUP_WAIT_MS);
    if (s == NATS_OK) {
      b = (const unsigned char *)natsMsg_GetData(m);
      len = natsMsg_GetDataLength(m);
      if (len == 0) {
        natsMsg_Destroy(m);
        return o3m_err_set(e, O3M_ENOTFOUND, "decision %llu: the live replica that made it "
                           "(tag %04" PRIx64 ") does not hold it", (unsigned long long)decision,
                           tag);
      }
    } else if (s == NATS_TIMEOUT) {
      /* The oldest (or an expired) entry gives way. */
      struct slow_tag *old = &r->slow[0];
      for (int i = 1; i < SLOW_TAGS; i++)
        if (r->slow[i].until_ms < old->until_ms) old = &r->slow[i];
      old->tag = tag;
      old->until_ms = now + SLOW_MS;
      return o3m_err_set(e, O3M_EUNAVAILABLE, "decision %llu: the replica that made it (tag %04"
                         PRIx64 ") did not answer a lookup within %d ms",
                         (unsigned long long)decision, tag, LOOKUP_WAIT_MS);
    } else if (s == NATS_NO_RESPONDERS) {
      natsMsg_Destroy(m);
      m = NULL;
      /* No live replica has the tag: the bucket, where older replicas
       * wrote every decision (random ids; gone one
       * pending lifetime after the upgrade). A direct get: answered at
       * once. */
      if ((s = kvStore_Get(&ent, r->kv, key)) == NATS_OK) {
        b = kvEntry_Value(ent);
        len = kvEntry_ValueLen(ent);
      } else if (s == NATS_NOT_FOUND) {
        return o3m_err_set(e, O3M_ENOTFOUND, "decision %llu: no live replica has its tag %04"
                           PRIx64 " (the replica that made it died, taking its open decisions "
                           "with it, or it never was)", (unsigned long long)decision, tag);
      }
    }
  }
  if (s != NATS_OK) return nats_fail(e, s, "the decision record could not be read");
  int rc = 0;
  const int base = DEC_HDR + 8 * r->d;
  /* Without the owner (len == base): a record of a replica from before
   * owners were recorded. */
  int on = len > base ? b[base] : -1;
  /* With the owner, optionally the local part after it. */
  int local = on >= 0 && r->d0 && len == base + 1 + on + (int)LOCAL_DEC(r);
  if (len < base || (len > base && len != base + 1 + on && !local) ||
      on > AP_REPLICA_MAX_OWNER || (int)o3m_get_le32(b + 4) != r->d) {
    rc = o3m_err_set(e, O3M_ECORRUPT, "decision %llu: its record has %d bytes, expected %d "
                     "and its owner's name", (unsigned long long)decision, len, base);
  } else {
    *has_owner = on >= 0;
    if (on >= 0) {
      memcpy(owner, b + base + 1, (size_t)on);
      owner[on] = '\0';
    }
    *arm = (int)o3m_get_le32(b);
    *mask_id = o3m_get_le64(b + 8);
    for (int i = 0; i < r->d; i++) x[i] = o3m_bits_double(o3m_get_le64(b + DEC_HDR + 8 * i));
    *has_local = local;
    *degraded = 0;
    if (local) {
      const unsigned char *lb = b + base + 1 + on;
      *degraded = lb[0] & 1;
      for (int i = 0; i < r->d0; i++) x0[i] = o3m_bits_double(o3m_get_le64(lb + 1 + 8 * i));
    }
  }
  if (ent) kvEntry_Destroy(ent);
  if (m) natsMsg_Destroy(m);
  return rc;
}

int ap_replica_publish(ap_replica *r, uint64_t decision, uint64_t mask_id, int arm,
                       double reward, const double *x, const double *x0, int degraded,
                       uint64_t *seq, int *duplicate, o3m_err *e) {
  unsigned char *b = r->buf;
  o3m_put_le64(b, decision);
  o3m_put_le64(b + 8, mask_id);
  o3m_put_le32(b + 16, (uint32_t)arm);
  o3m_put_le32(b + 20, (uint32_t)r->d);
  o3m_put_le64(b + 24, o3m_double_bits(reward));
  for (int i = 0; i < r->d; i++) o3m_put_le64(b + REC_HDR + 8 * i, o3m_double_bits(x[i]));
  size_t len = REC_HDR + 8 * (size_t)r->d;
  if (r->d0 && x0) {
    unsigned char *lb = b + len;
    o3m_put_le32(lb, (uint32_t)r->d0);
    o3m_put_le32(lb + 4, degraded ? 1u : 0u);
    for (int i = 0; i < r->d0; i++) o3m_put_le64(lb + 8 + 8 * i, o3m_double_bits(x0[i]));
    len += LOCAL_REC(r);
  }
  char key[17];
  key_of(key, decision);
  jsPubOptions po;
  jsPubOptions_Init(&po);
  po.MsgId = key; /* JetStream keeps one record per decision in the window */
  jsPubAck *ack = NULL;
  jsErrCode jerr = 0;
  natsStatus s = js_Publish(&ack, r->js, r->subject, b, (int)len, &po, &jerr);
  if (s != NATS_OK)
    return nats_fail(e, s, "the reward was not acknowledged by JetStream");
  *seq = ack->Sequence;
  *duplicate = ack->Duplicate ? 1 : 0;
  jsPubAck_Destroy(ack);
  /* A new record goes after every record the stream held, so after every
   * one this replica applied; a lower sequence means the stream was
   * re-created under the replica. */
  if (!*duplicate && *seq < r->next_seq)
    return o3m_err_set(e, O3M_ECORRUPT, "the reward stream moved backwards: JetStream stored "
                       "a new record at seq %llu, this replica has applied it up to seq %llu "
                       "(deleted and re-created?)", (unsigned long long)*seq,
                       (unsigned long long)(r->next_seq - 1));
  return 0;
}

int ap_replica_next(ap_replica *r, ap_replica_record *rec, int64_t wait_ms, o3m_err *e) {
  natsMsg *m = NULL;
  natsStatus s = natsSubscription_NextMsg(&m, r->sub, wait_ms);
  if (s == NATS_TIMEOUT) return 0;
  if (s != NATS_OK) return nats_fail(e, s, "reading the reward stream");
  jsMsgMetaData *meta = NULL;
  int rc = 1;
  const unsigned char *b = (const unsigned char *)natsMsg_GetData(m);
  int len = natsMsg_GetDataLength(m);
  if ((s = natsMsg_GetMetaData(&meta, m)) != NATS_OK) {
    rc = nats_fail(e, s, "a stream record without metadata");
  } else if ((len != REC_HDR + 8 * r->d &&
              !(r->d0 && len == REC_HDR + 8 * r->d + (int)LOCAL_REC(r) &&
                (int)o3m_get_le32(b + REC_HDR + 8 * r->d) == r->d0 &&
                o3m_get_le32(b + REC_HDR + 8 * r->d + 4) <= 1)) ||
             (int)o3m_get_le32(b + 20) != r->d) {
    rc = o3m_err_set(e, O3M_ECORRUPT, "stream record %llu has %d bytes, expected %d (another "
                     "d, or not a reward record)", (unsigned long long)meta->Sequence.Stream,
                     len, REC_HDR + 8 * r->d);
  } else if (meta->Sequence.Stream != r->next_seq) {
    /* The stream has one subject and no record is ever deleted from it,
     * so its records come in consecutive sequences: a gap means records
     * were purged or deleted, a step back that the stream was re-created
     * (its ordered consumer resumes at the next sequence, whatever the
     * stream now holds). Either way the replicas would differ from here. */
    uint64_t got = meta->Sequence.Stream;
    if (got > r->next_seq)
      rc = o3m_err_set(e, O3M_ECORRUPT, "the reward stream skipped from seq %llu to %llu: "
                       "records %llu..%llu were purged or deleted",
                       (unsigned long long)(r->next_seq - 1), (unsigned long long)got,
                       (unsigned long long)r->next_seq, (unsigned long long)(got - 1));
    else
      rc = o3m_err_set(e, O3M_ECORRUPT, "the reward stream moved backwards: record seq %llu "
                       "came after seq %llu (deleted and re-created?)", (unsigned long long)got,
                       (unsigned long long)(r->next_seq - 1));
  } else {
    r->next_seq++;
    rec->seq = meta->Sequence.Stream;
    rec->time_ms = meta->Timestamp / 1000000;
    rec->decision = o3m_get_le64(b);
    rec->mask_id = o3m_get_le64(b + 8);
    rec->arm = (int)o3m_get_le32(b + 16);
    rec->reward = o3m_bits_double(o3m_get_le64(b + 24));
    for (int i = 0; i < r->d; i++)
      r->x[i] = o3m_bits_double(o3m_get_le64(b + REC_HDR + 8 * i));
    rec->x = r->x;
    rec->x0 = NULL;
    rec->degraded = 0;
    if (len > REC_HDR + 8 * r->d) {
      const unsigned char *lb = b + REC_HDR + 8 * r->d;
      rec->degraded = (int)o3m_get_le32(lb + 4);
      for (int i = 0; i < r->d0; i++) r->x0[i] = o3m_bits_double(o3m_get_le64(lb + 8 + 8 * i));
      rec->x0 = r->x0;
    }
  }
  jsMsgMetaData_Destroy(meta);
  natsMsg_Destroy(m);
  return rc;
}

int ap_replica_last_seq(ap_replica *r, uint64_t *seq, o3m_err *e) {
  jsStreamInfo *si = NULL;
  natsStatus s = js_GetStreamInfo(&si, r->js, r->stream, NULL, NULL);
  if (s != NATS_OK) return nats_fail(e, s, "stream info");
  *seq = si->State.LastSeq;
  jsStreamInfo_Destroy(si);
  return 0;
}
