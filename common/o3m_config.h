/* o3m_config.h -- the federation config file shared by all parties.
 *
 * One INI-style file describes a whole federation: the context dimension, the
 * policy of the active participant (AP) and every party (the privacy mask
 * generator, the AP and the passive participants) with its address, its
 * feature dims and its TLS files. Every daemon is started with
 * `--config FILE --party NAME` and reads the same file, so all parties agree
 * on the column split of the context.
 *
 * Syntax. A line is blank, a comment, a section header `[federation]`,
 * `[policy]`, `[party NAME]` or `[client NAME]`, or `key = value`. A comment starts with '#'
 * or ';' as the first non-blank character of a line, or after whitespace
 * inside a line (`d = 100   # total`); a '#' or ';' glued to a value
 * (`a#b`) is part of the value. Whitespace around keys, '=' and values is
 * ignored; values are never quoted and may not be empty. Party and client
 * names are 1 to 64 characters from [A-Za-z0-9_.-] (they are matched against
 * certificate identities, so the set is kept conservative), and parties and
 * clients share one name space: no name may be used twice, by two parties,
 * two clients or a party and a client. Lines end in LF or CRLF.
 *
 *   [federation]  d (required, 1..O3M_MAX_DIM) = sum of the dims of the
 *                 active and passive parties; deadline_ms (200, 1..3600000);
 *                 ca (path; required unless insecure = true);
 *                 insecure (true|false, default false); metrics_clients
 *                 (default "monitor": the certificate names, comma-separated,
 *                 that may read the daemons' /metrics, common/o3m_httpd.h);
 *                 aggregation
 *                 (secure|per-party, default secure: how the active party
 *                 receives the passive parties' masked parts, see "Secure
 *                 aggregation" below); fallback (local|none, default
 *                 local: the active party decides with its local model on
 *                 its own columns when a passive party is missing, see
 *                 active_participant/ap_fallback.h; none: such rounds
 *                 fail); epoch_changes_max_per_minute (12, 0..600: a
 *                 passive party whose item epoch changes more often, or
 *                 goes back, is held out as flapping, ap_epochwatch.h);
 *                 replication (none|nats, default
 *                 none), nats_servers, nats_stream, nats_bucket,
 *                 nats_replicas, nats_tls (on|off, default on),
 *                 nats_server_name (default nats), nats_check_ms (5000,
 *                 100..600000): AP replicas
 *                 (o3m_config_replication); rpc_streams_per_connection
 *                 (64, 1..4096), rpc_receive_timeout_ms (10000,
 *                 0..86400000; 0: none), rpc_receiving_per_identity (0:
 *                 from the request limit, 4..32; 0..254) and
 *                 rpc_connections_per_identity (64, 1..1024): every daemon's
 *                 limits before a request is read (o3m_config_rpc).
 *   [policy]      algo (required: linucb|lints); model (required:
 *                 shared|disjoint); alpha (0.5, >= 0); lambda (1, > 0);
 *                 local_alpha (>= 0) and local_lambda (> 0): the local
 *                 fallback model's (default: alpha and lambda);
 *                 v (0.01, >= 0); seed (1, 0..2^64-1); refactor_every (1000,
 *                 >= 1); max_candidates (1000, 1..1000000); pending_capacity
 *                 (100000, 1..10000000); pending_expiry_s (3600, 1..31536000);
 *                 the clients' shares of the active party (see "Per-client
 *                 shares" below): pending_client_share (0 = pending_capacity
 *                 / number of clients, 0..10000000, at most that quotient),
 *                 client_inflight_max (32, 1..O3M_CONFIG_MAX_CLIENT_INFLIGHT),
 *                 batch_cost_max (65536, 1..2^31-1); slice_cost_max
 *                 (16384, 1..2^31-1); client_uncached_rate (1000 ids/s,
 *                 1..2^31-1) and client_uncached_burst (10000, 1..2^31-1);
 *                 item_cache (100000, 0..10000000): the entries of the
 *                 active party's cache of the passive parties' summed item
 *                 parts (active_participant/ap_itemcache.h), d doubles
 *                 each (2d + 1 with own tables: its own item part and
 *                 flag too), least recently used evicted; 0 caches nothing;
 *                 unknown_items (serve|refuse, default serve: a
 *                 Recommend naming an item that the active party's own
 *                 item table lacks is decided, the passive parties using
 *                 their dummy rows, as always; refuse: it is refused with
 *                 NOT_FOUND naming the item and nothing changes; refuse
 *                 needs an item_table on the active party, the only table
 *                 the AP can tell an unknown item by, since a passive party
 *                 never says; active_participant/ap_round.h "Unknown ids");
 *                 reward_min (0); reward_max (1, > reward_min);
 *                 items (path; required with model = disjoint, rejected with
 *                 model = shared: the catalog, one item id per line, line
 *                 order = arm index).
 *   [party NAME]  role (required: pmg|active|passive); address (required:
 *                 host:port with port 1..65535, or unix:PATH: where the
 *                 other parties and the clients dial the party; the host is
 *                 also what they expect to reach, while the party's identity
 *                 is checked by its name, see "Listen" below); listen
 *                 (optional, validated like address, default: address:
 *                 where the party's own daemon binds); cert and key
 *                 (paths; required unless insecure = true); state_dir (path,
 *                 optional). For active and passive parties also dims
 *                 (required, 1..O3M_MAX_DIM), user_table and
 *                 item_table (paths; a passive party needs at least one, the
 *                 active party may have none when its features come in the
 *                 requests); max_norm (O3M_CONFIG_DEFAULT_MAX_NORM, a number
 *                 > 0 and <= O3M_CONFIG_MAX_NORM_LIMIT; see "Bounded
 *                 contexts" below); table_bytes_max (bytes, the largest
 *                 table file a load or reload reads, 1..O3M_CONFIG_MAX_TABLE_BYTES,
 *                 default O3M_CONFIG_DEFAULT_TABLE_BYTES_MAX; party/o3m_tables.h);
 *                 threads (1..O3M_CONFIG_MAX_THREADS,
 *                 default 1: the threads its daemon serves on, which a
 *                 --threads option overrides; proto/o3m_rpc.h "Threads");
 *                 instances (passive only: more instances of the party,
 *                 "a.b.c.d:port,...", IPv4 literals like its address; see
 *                 o3m_party.instances). A pmg party may not have dims, tables or
 *                 max_norm. Passive parties also whiten (true|false, default
 *                 false: the party whitens its own columns with a private map
 *                 before masking, party/o3m_features.h "Whitening"; decisions
 *                 then equal a central learner's on the whitened features;
 *                 refused for the active party, whose columns need no hiding
 *                 from itself and whose request features could not be
 *                 whitened alike).
 *                 Passive parties also agg_public (64 hex
 *                 digits, the party's X25519 public key for secure
 *                 aggregation; required for every passive party when
 *                 aggregation = secure and there are 2 or more of them) and
 *                 agg_secret (path of the party's secret key file, read only
 *                 by that party's own daemon, which needs it then).
 *   [client NAME] cert and key (paths, optional, both or neither). A client
 *                 is an identity that is not a party: a front end or an
 *                 operator calling the active party. Only clients may call
 *                 the active party's Recommend, Reward and Stats (the
 *                 certificate common name must be NAME); cert and key only
 *                 tell o3m-cli --as NAME which files to present. A section
 *                 may be empty.
 *
 * Bounded contexts. max_norm bounds ||x^j||, the l2 norm of party j's whole
 * part of one context (its user columns then its item columns). Every party
 * enforces it where values enter: a passive party refuses at start a table
 * whose rows could form a part above it (and keeps its dummy rows inside
 * it), the active party refuses a request whose own features exceed its own
 * bound, and it refuses every masked part Q^j x^j whose rows exceed party
 * j's bound (Q^j has orthonormal columns, so ||Q^j x^j|| = ||x^j||) and a
 * summed context above sqrt(sum_j max_norm_j^2). So no request can make the
 * model's statistics (sums of x x^T) overflow. Every party reads the bounds
 * of every party from the shared file. The default, 1e4, is chosen from
 * what real data needs: the largest context norms of the shared data sets
 * as o3m-eval replay builds them are 118 (news10k, whose features are raw
 * integers up to 118), 7.0 (Criteo, log transform; 5.4 raw) and 2.8 (Open
 * Bandit), and the demo's standard normal tables give parts of at most 7.9;
 * 1e4 leaves a margin of almost 100 over the largest, while x x^T stays
 * below 1e8 per party and update, so Lambda = lambda I + sum x x^T could take
 * 1e290 updates before it overflowed. Raise it for unnormalized data with
 * larger values (the limit, 1e50, still keeps a single x x^T below 1e100).
 *
 * Listen. address is the party as its peers see it and listen the socket
 * its daemon binds. They differ when the party is behind NAT or a port
 * forward (peers dial the public address, the daemon binds its private one)
 * or binds every interface (listen = 0.0.0.0:PORT). listen is read only by
 * the party's own daemon (its server and its readiness probe; the daemons'
 * --listen option overrides it), so it is not covered by the fingerprint
 * and two parties may have the same one (0.0.0.0:7000 on two hosts); the
 * addresses must still differ. The gRPC clients check the peer's
 * certificate against its party name (a DNS SAN), never against the host
 * they dialled, so a certificate may name its hosts as IP SANs for other
 * tools without any party depending on them (scripts/make-certs.sh --ip).
 *
 * Per-client shares. Every [client NAME] gets its own share of the active
 * party, so that one authorized client cannot fail or evict the others'
 * requests (active_participant/ap_round.h "Fairness", ap_pending.h
 * "Shares"): at most client_inflight_max Recommend calls in flight (waiting
 * or in a batch; the next is RESOURCE_EXHAUSTED at once), batches of at most
 * batch_cost_max in K x d summed over their rounds (a round above it goes
 * alone, or, while other clients are active, is gathered in slices of at
 * most slice_cost_max over several batches and decided once whole), filled
 * by taking the clients' rounds in turn, and
 * pending_client_share entries of the pending table that no other client's
 * decisions can evict. The defaults fit the load benchmark (32 calls of
 * K = 20 at d = 100 in flight from one client, 2000 each: a batch of all of
 * them costs 64000) and leave Recommend's 64 server slots to two clients at
 * their caps.
 *
 * Secure aggregation. With aggregation = secure each passive party adds
 * pairwise masks agreed with every other passive party to its fixed-point
 * part, so that the active party learns only the sum of their parts
 * (crypto/o3m_secagg.h). The public keys are pinned here, which is what
 * authenticates them: the active party never relays them. o3m-passive
 * --agg-keygen FILE writes a secret key file and prints the agg_public line.
 * With per-party the active party receives every part on its own (the
 * protocol of the paper, kept for comparison and audits).
 *
 * Structure: exactly one pmg party, exactly one active party, any number of
 * passive parties and clients (in any order among the parties), no two
 * parties with the same address, no name used twice, and the
 * dims summing to d. The order of the active and passive sections in the file
 * is the column order of the context x; each such party gets its first column
 * col0 and its position slot in that order.
 *
 * `insecure = true` only relaxes the parser (ca, cert and key may then be
 * absent). It does not make any daemon speak plaintext: a daemon does that
 * only when it is also started with --insecure, which is meant for explicit
 * trials. Whether TLS files exist and parse is checked by the daemons, not
 * here.
 *
 * Paths (ca, items, user_table, item_table, cert, key, state_dir,
 * agg_secret) are relative to the directory of the config file and are
 * resolved at load: an absolute path is kept, a relative one is prefixed
 * with that directory (nothing is prefixed when the directory is "."). Files
 * need not exist at load time.
 *
 * Strictness: unknown sections and keys, keys outside a section, duplicate
 * sections, keys and party or client names, missing required keys, malformed values
 * (not a number, out of range, trailing junk) and an inconsistent structure
 * all fail with O3M_EPARSE (O3M_ENOMEM, O3M_EIO for the obvious cases) and a
 * message that names the file, the line and the key, for example
 *   fed.conf:14: key 'dims': expected an integer in 1..4096, got 'x'
 * Errors of single lines (syntax, unknown or repeated keys, bad values) are
 * reported in file order; checks that need the whole file (missing required
 * keys, roles, addresses, the dims sum, TLS keys) run afterwards and name the
 * line of the offending section or key. An absent section has no line and is
 * named alone ("fed.conf: missing section [policy]"). Only the first error is
 * reported.
 *
 * A loaded config is immutable, so any number of threads may read it. */
#ifndef O3M_CONFIG_H
#define O3M_CONFIG_H

#include <stdint.h>

#include "o3m_defaults.h"
#include "o3m_error.h"
#include "o3m_limits.h"

/* The config's names of limits and defaults whose values live in
 * o3m_limits.h and o3m_defaults.h (see there why each). */
#define O3M_CONFIG_MAX_PARTIES O3M_MAX_PARTIES
#define O3M_CONFIG_MAX_CLIENTS O3M_MAX_CLIENTS
#define O3M_CONFIG_MAX_NAME O3M_MAX_NAME
#define O3M_CONFIG_MAX_FILE O3M_MAX_CONFIG_FILE
#define O3M_CONFIG_DEFAULT_MAX_NORM O3M_DEFAULT_MAX_NORM
#define O3M_CONFIG_MAX_NORM_LIMIT O3M_MAX_NORM_LIMIT
#define O3M_CONFIG_DEFAULT_TABLE_BYTES_MAX O3M_DEFAULT_TABLE_BYTES_MAX
#define O3M_CONFIG_MAX_TABLE_BYTES O3M_MAX_TABLE_BYTES
#define O3M_CONFIG_MAX_CLIENT_INFLIGHT O3M_MAX_CLIENT_INFLIGHT
#define O3M_CONFIG_MAX_THREADS O3M_MAX_THREADS

typedef enum o3m_role {
  O3M_ROLE_PMG = 1,
  O3M_ROLE_ACTIVE = 2,
  O3M_ROLE_PASSIVE = 3
} o3m_role;

/* "pmg", "active", "passive"; "unknown" otherwise. Never NULL. */
const char *o3m_role_name(o3m_role r);

/* One party. Read-only for callers: every field may be read, none written.
 * Strings are owned by the config and live until o3m_config_destroy. Path
 * fields are already resolved against the config's directory; an optional
 * path that was not given is NULL. */
typedef struct o3m_party {
  const char *name;       /* the NAME of [party NAME] */
  o3m_role role;
  const char *address;    /* as written: host:port or unix:PATH; where peers dial */
  /* Where the party's own daemon listens: listen as written (host:port or
   * unix:PATH), or address when the key is not given (never NULL). */
  const char *listen;
  /* Passive only, or NULL: more instances of this party (same block, same
   * dummy-row key, same tables), "a.b.c.d:port,..." (IPv4 literals, like
   * address then); the AP's channel balances MaskBatch calls over address
   * and these, round robin. */
  const char *instances;
  int dims;               /* feature columns; 0 for the pmg */
  int col0;               /* first column of this party in x; -1 for the pmg */
  int slot;               /* position in column order, 0..M-1; -1 for the pmg */
  const char *user_table; /* path or NULL (always NULL for the pmg) */
  const char *item_table; /* path or NULL (always NULL for the pmg) */
  const char *cert;       /* path; NULL only when insecure and not given */
  const char *key;        /* path; NULL only when insecure and not given */
  const char *state_dir;  /* path or NULL */
  double max_norm;        /* bound on ||x^j|| (O3M_CONFIG_DEFAULT_MAX_NORM if not set) */
  int whiten;             /* whiten = true: whiten the own tables (o3m_features_whiten) */
  uint64_t table_bytes_max; /* largest table file read, bytes (O3M_CONFIG_DEFAULT_TABLE_BYTES_MAX) */
  int threads;            /* serving threads, 1..O3M_CONFIG_MAX_THREADS (1 if not set) */
  int has_agg_public;     /* 1 if agg_public was given (passive parties only) */
  unsigned char agg_public[32]; /* X25519 public key for secure aggregation */
  const char *agg_secret; /* path of the secret key file, or NULL */
  int line;               /* line of the [party NAME] header */
} o3m_party;

/* One client ([client NAME]). Read-only for callers, like o3m_party; the
 * strings live until o3m_config_destroy. */
typedef struct o3m_client {
  const char *name;  /* the NAME of [client NAME]: its certificate's CN */
  const char *cert;  /* path or NULL (then key is NULL too) */
  const char *key;   /* path or NULL */
  int line;          /* line of the [client NAME] header */
} o3m_client;

/* The [policy] section as plain values, defaults filled in. algo and model
 * are the strings of the file, already checked to be one of the allowed
 * words; the AP maps them with o3m_algo_parse and o3m_model_parse. Read-only
 * for callers. */
typedef struct o3m_config_policy_section {
  const char *algo;      /* "linucb" or "lints" */
  const char *model;     /* "shared" or "disjoint" */
  double alpha;
  double lambda;
  double local_alpha;  /* the local fallback model's (ap_fallback.h) */
  double local_lambda;
  double v;
  uint64_t seed;
  int refactor_every;
  int max_candidates;
  int pending_capacity;
  int pending_expiry_s;
  /* Each client's share of the AP (SECURITY.md, "What one authorized
   * client can do to others"): its entries of the pending table (0 in the
   * file means pending_capacity / clients, which the loaded config holds),
   * its cap on Recommends in flight, the cost budget of a batch in K x d
   * and the most a larger round adds to one batch (gathered in slices). */
  int pending_client_share;
  int client_inflight_max;
  int batch_cost_max;
  int slice_cost_max;
  /* Each client's budget of uncached item ids: per second, and the burst
   * (active_participant/ap_round.h "Cost model"). */
  int client_uncached_rate;
  int client_uncached_burst;
  /* Entries of the AP's cache of summed item parts (ap_itemcache.h). */
  int item_cache;
  /* "serve" or "refuse": what the AP does with a Recommend naming an item
   * its own item table lacks (active_participant/ap_round.h "Unknown
   * ids"). */
  const char *unknown_items;
  double reward_min;
  double reward_max;
  const char *items;     /* path; set exactly when model is "disjoint" */
} o3m_config_policy_section;

/* Opaque: use the accessors below. */
typedef struct o3m_config o3m_config;

/* Reads and parses the file at path. Relative paths inside it are resolved
 * against the directory part of path; messages name the file as path was
 * given (shortened from the left if very long so that the line number always
 * fits). On success *out owns everything and the caller frees it with
 * o3m_config_destroy; on failure *out is NULL, nothing is leaked and e (if not
 * NULL) names the problem. Files larger than O3M_CONFIG_MAX_FILE or
 * containing NUL bytes are rejected. */
int o3m_config_load(o3m_config **out, const char *path, o3m_err *e);

/* Parses text held in memory (for tests and fuzzers). base_dir is the
 * directory relative paths are resolved against (NULL or "." leaves them as
 * written); name_for_messages names the text in errors (NULL gives
 * "<config>"). text is copied; ownership and failure behaviour as for
 * o3m_config_load. */
int o3m_config_parse_string(o3m_config **out, const char *text,
                            const char *base_dir, const char *name_for_messages,
                            o3m_err *e);

/* Frees everything, including every string handed out. NULL is accepted. */
void o3m_config_destroy(o3m_config *c);

/* [federation] values. */
int o3m_config_d(const o3m_config *c);
int o3m_config_deadline_ms(const o3m_config *c);
const char *o3m_config_ca(const o3m_config *c); /* path, or NULL */
/* [federation] rpc_*: the limits every daemon's gRPC server applies before
 * it reads a request (proto/o3m_rpc.h, "Limits before the request is
 * read"; docs/federation.md, "Limits before authorization"). One set for
 * the whole federation: they bound what any caller can make a daemon hold,
 * whatever its role. */
#define O3M_CONFIG_DEFAULT_STREAMS O3M_DEFAULT_STREAMS
#define O3M_CONFIG_MAX_STREAMS O3M_MAX_STREAMS
#define O3M_CONFIG_DEFAULT_RECEIVE_TIMEOUT_MS O3M_DEFAULT_RECEIVE_TIMEOUT_MS
#define O3M_CONFIG_MAX_RECEIVING O3M_MAX_RECEIVING
#define O3M_CONFIG_DEFAULT_CONNECTIONS O3M_DEFAULT_CONNECTIONS_PER_IDENTITY
#define O3M_CONFIG_MAX_CONNECTIONS O3M_MAX_CONNECTIONS_PER_IDENTITY
typedef struct o3m_config_rpc_limits {
  int streams_per_connection;   /* HTTP/2 streams open at once per connection */
  int receive_timeout_ms;       /* to receive a whole request once let in; 0: none */
  int receiving_per_identity;   /* calls being received at once per identity; 0: derived */
  int connections_per_identity; /* connections with calls in flight per identity */
} o3m_config_rpc_limits;
const o3m_config_rpc_limits *o3m_config_rpc(const o3m_config *c);
/* [federation] metrics_clients: "monitor" unless set. */
const char *o3m_config_metrics_clients(const o3m_config *c);
int o3m_config_insecure(const o3m_config *c);   /* 1 if insecure = true */
/* 1 if aggregation = secure (the default), 0 for per-party. */
int o3m_config_secure_aggregation(const o3m_config *c);

/* 1 if fallback = local (the default), 0 for none. */
int o3m_config_fallback_local(const o3m_config *c);

/* [federation] epoch_changes_max_per_minute (O3M_DEFAULT_EPOCH_CHANGES,
 * 0..O3M_MAX_EPOCH_CHANGES): how often a passive party's item epoch may
 * change within a minute, and whether it may go back to one it left,
 * before the active party takes it as flapping
 * (active_participant/ap_epochwatch.h); 0: not watched. */
int o3m_config_epoch_changes_max(const o3m_config *c);

/* [federation] replication (AP replicas over NATS JetStream,
 * active_participant/ap_replica.h): mode "none" (the default: one AP
 * process with its local journal) or "nats"; servers: the NATS URLs,
 * comma-separated (required with nats); stream (O3M_REWARDS) and bucket
 * (O3M_DECISIONS): the names of the reward stream and of the decision
 * records' key-value bucket; replicas (3, 1..5): copies JetStream keeps of
 * each. tls ("on", the default, or "off"): "on" is mutual TLS to every NATS
 * server with the federation's ca and the active party's cert and key, and
 * server_name ("nats") is the DNS name every NATS server's certificate must
 * carry. "off" is plain text without credentials, an explicit insecure
 * choice for trials: the parser refuses it unless every nats_servers URL
 * names a loopback host (127.x.x.x, localhost, [::1]). The pointer lives as
 * long as c. */
typedef struct o3m_config_replication {
  const char *mode;
  const char *servers;
  const char *stream;
  const char *bucket;
  int replicas;
  const char *tls;
  const char *server_name;
  int check_ms; /* nats_check_ms: how often a replica reads the stream's state and limits */
} o3m_config_replication;
const o3m_config_replication *o3m_config_replication_of(const o3m_config *c);

/* The [policy] section; the pointer lives as long as c. */
const o3m_config_policy_section *o3m_config_policy(const o3m_config *c);

/* All parties in file order (the pmg included): i in 0..n-1. Out-of-range i
 * gives NULL. */
int o3m_config_n_parties(const o3m_config *c);
const o3m_party *o3m_config_party_at(const o3m_config *c, int i);

/* The party called name, or NULL. */
const o3m_party *o3m_config_party(const o3m_config *c, const char *name);

/* All clients in file order: i in 0..n-1 (n may be 0). Out-of-range i gives
 * NULL. */
int o3m_config_n_clients(const o3m_config *c);
const o3m_client *o3m_config_client_at(const o3m_config *c, int i);

/* The client called name, or NULL (also for NULL name, and for a party's
 * name: parties are never clients). */
const o3m_client *o3m_config_client(const o3m_config *c, const char *name);

/* The one pmg party and the one active party (never NULL for a loaded
 * config). */
const o3m_party *o3m_config_pmg(const o3m_config *c);
const o3m_party *o3m_config_active(const o3m_config *c);

/* The passive parties in column order: i in 0..n-1 (n may be 0). */
int o3m_config_n_passive(const o3m_config *c);
const o3m_party *o3m_config_passive(const o3m_config *c, int i);

/* The parties that own columns (the active one and the passive ones) in
 * column order, so that o3m_config_column_party(c, s)->slot == s and the
 * col0 increase with s. M = o3m_config_n_column_parties(c). */
int o3m_config_n_column_parties(const o3m_config *c);
const o3m_party *o3m_config_column_party(const o3m_config *c, int slot);

/* The name used in messages and the directory paths were resolved against
 * ("." when none). */
const char *o3m_config_name(const o3m_config *c);
const char *o3m_config_base_dir(const o3m_config *c);

/* One key the parser accepts, from its own tables (so that the
 * configuration reference, docs/configuration.md, and o3m.conf(5) can be
 * checked against what the parser really reads; tests/config_doc.sh).
 * section is "federation", "policy", "party" or "client"; roles, for a
 * party key, the roles that may set it ("pmg,active,passive", "passive",
 * ...; "" elsewhere); required is "yes" for a required key of the other
 * sections, the roles that must set it for a party key, "" when optional
 * (a key required only in some cases, like ca or items, is ""). The
 * strings are static. */
typedef struct o3m_config_key {
  const char *section;
  const char *key;
  const char *roles;
  const char *required;
} o3m_config_key;

/* Fills *out with the i-th key (0-based, sections in the order above, keys
 * in table order) and returns 1, or returns 0 when i is out of range. */
int o3m_config_key_at(int i, o3m_config_key *out);

#endif
