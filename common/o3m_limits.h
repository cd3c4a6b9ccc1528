/* o3m_limits.h: the one home of the project's size limits.
 *
 * Every module that bounds a dimension, an id, a count, a message or a file
 * by one of these takes it from here, so that a config the loader accepts is
 * also one the policy, the masks, the wire and the feature tables accept,
 * and a newcomer who wants to know "how many parties, how large a request"
 * finds every answer in one file. Some modules keep their older public
 * names (O3M_RPC_MAX_STREAMS, O3M_CONFIG_MAX_NAME, ...) as aliases of these,
 * defined as the constant here and never as a number of their own.
 *
 * Sizes that bound nothing a caller can choose stay in their modules: buffer
 * growth steps, internal table sizes, message truncation lengths, retry
 * counts, backoff caps and the fields of on-disk formats.
 *
 * Plain constants: no functions, no state, safe from any thread. */
#ifndef O3M_LIMITS_H
#define O3M_LIMITS_H

#include <limits.h>

/* ---- The model: dimensions, parties, arms ---- */

/* Largest context dimension d (and any party's dims). A block of
 * d x d float64 values at this size is 128 MiB, the most the PMG, a stored
 * block and one gRPC message are sized for; the O(d^3) policy update would
 * be impractical well before it. */
#define O3M_MAX_DIM 4096

/* Most parties of one federation (party sections of a config, parts of a
 * mask's partition). Each party costs the PMG one block per epoch and the
 * active party one call per round, so a federation near this many would be
 * limited by its round trips long before by this bound. */
#define O3M_MAX_PARTIES 1024

/* Most passive parties one active participant serves: the item cache keys
 * its entries by every passive party's epoch, in arrays of this size held
 * in each batch slot, and the AP refuses to start with more. */
#define O3M_MAX_CACHED_PARTIES 64

/* Most arms of the disjoint model (catalog items) and most candidates of one
 * Recommend request. A million keeps the disjoint model's per-arm state and
 * one request's scores within memory reserved at init. */
#define O3M_MAX_ARMS 1000000
#define O3M_MAX_CANDIDATES 1000000

/* Largest max_norm a party may set: far above any real feature scale, and
 * small enough that a single x x^T stays below 1e100 (o3m_config.h,
 * "Bounded contexts"). */
#define O3M_MAX_NORM_LIMIT 1e50

/* ---- Names and ids ---- */

/* Longest party or client name in bytes (a config section's name, the
 * certificate name it is checked against, a metrics label). */
#define O3M_MAX_NAME 64

/* Longest user or item id in bytes, the one id limit of the whole
 * federation: feature tables, the disjoint model's catalog and the ids of a
 * Recommend request (longer ones are refused before any passive party is
 * asked). 128 bytes holds any UUID, hash or URL-safe key in use, and keeps a
 * request of the most candidates bounded on the wire. */
#define O3M_MAX_ID 128

/* Most client sections of a config, each an identity with its own quota on
 * the active party's pending table. */
#define O3M_MAX_CLIENTS 1024

/* ---- The active party's tables and batches ---- */

/* Largest [policy] client_inflight_max, and Recommend's server slots on the
 * active party (AP_ROUND_SLOTS): twice the load test's 32 clients, so that
 * a full batch can be answered while as many new calls queue. */
#define O3M_MAX_CLIENT_INFLIGHT 64

/* Largest [policy] pending_capacity and pending_client_share: ten million
 * open decisions of d doubles each is already gigabytes at the dimensions
 * in use, and the table is allocated whole at start-up. */
#define O3M_MAX_PENDING_CAPACITY 10000000

/* Largest [policy] item_cache: like the pending table, allocated whole at
 * start-up with d doubles per entry. */
#define O3M_MAX_ITEM_CACHE 10000000

/* Largest [federation] epoch_changes_max_per_minute: ten item epoch
 * changes a second, far beyond what a table reload can do (a reload parses
 * the whole table), and what sizes the active party's record of each
 * passive party's recent changes (ap_epochwatch.h). */
#define O3M_MAX_EPOCH_CHANGES 600

/* Largest [policy] pending_expiry_s: a year, beyond any reward worth
 * waiting for. */
#define O3M_MAX_PENDING_EXPIRY_S 31536000

/* Most owners (clients plus the shared pool) of one pending table: above
 * O3M_MAX_CLIENTS with room to spare for a caller that shares it finer. */
#define O3M_MAX_PENDING_OWNERS 65536

/* Most queries in one MaskBatch: the rounds the active party sends a
 * passive party in one call, which sizes the buffers of a batch slot. */
#define O3M_MAX_WIRE_BATCH 64

/* Bytes of masked values one MaskBatch may aim for: the row budget of
 * o3m_wire_mask_batch_rows keeps a reply of d-vectors near this size, a
 * quarter of the default message limit. */
#define O3M_MAX_WIRE_BATCH_BYTES (16 << 20)

/* Most batches the active party has in flight at once: each holds a few
 * batch buffers and one client per passive party, and beyond a few the
 * gain is nil on a machine whose cores the parties share. */
#define O3M_MAX_INFLIGHT_BATCHES 4

/* Most serving threads a party may ask for ([party] threads), which is also
 * the most one RPC server runs: beyond a handful the parties' shared cores,
 * not threads, bound the throughput. */
#define O3M_MAX_THREADS 16

/* Largest [federation] deadline_ms, the active party's deadline for one
 * round's passive parts: an hour, beyond any useful wait for a round. */
#define O3M_MAX_ROUND_DEADLINE_MS 3600000

/* Largest nats_replicas: NATS JetStream keeps at most five copies of a
 * stream or bucket. */
#define O3M_MAX_NATS_REPLICAS 5

/* Range of nats_check_ms: below 100 ms the stream info requests of many
 * replicas would load the JetStream cluster for nothing; above 10 minutes
 * a limit that erases records would go unreported for too long. */
#define O3M_MIN_NATS_CHECK_MS 100
#define O3M_MAX_NATS_CHECK_MS 600000

/* ---- gRPC: what a caller can make a daemon hold ---- */

/* Largest gRPC message any daemon may be configured to accept or send, and
 * so the longest bytes field the wire code sizes: gRPC itself takes at most
 * 2^31 - 1, and 1 GiB is eight blocks of O3M_MAX_DIM. */
#define O3M_MAX_MESSAGE (1 << 30)

/* Largest header block (metadata) of one request: a few short headers and a
 * token are well under a kilobyte, so anything near 16 KiB is abuse. */
#define O3M_MAX_METADATA_BYTES (16 << 10)

/* Longest accepted method path ("/o3m.v1.Service/Method"), the length an
 * RPC server copies into its refusal message at most. */
#define O3M_MAX_METHOD_PATH 255

/* Most methods of one server's table: each gets its slots requested up
 * front, and every daemon serves far fewer. */
#define O3M_MAX_METHODS 64

/* Most request slots one method may have; each is a call requested from
 * gRPC up front with its buffers. */
#define O3M_MAX_METHOD_SLOTS 256

/* Largest rpc_receiving_per_identity: a method's slots less the two every
 * method keeps beyond one identity's cap (SLOTS_BEYOND_CAP in o3m_rpc.c), so
 * that other identities' calls and the refusals still find a slot. */
#define O3M_MAX_RECEIVING (O3M_MAX_METHOD_SLOTS - 2)

/* Largest rpc_streams_per_connection: HTTP/2 streams one connection may
 * have open at once, each holding a call's state on the server. */
#define O3M_MAX_STREAMS 4096

/* Largest rpc_connections_per_identity: connections with calls in flight
 * per certificate identity, above any client pool in use. */
#define O3M_MAX_CONNECTIONS_PER_IDENTITY 1024

/* Longest client deadline and rpc_receive_timeout_ms: a day, beyond which a
 * value is a mistake rather than a wait. */
#define O3M_MAX_DEADLINE_MS 86400000

/* Largest request the PMG reads: its requests (Info, GetBlock,
 * ConfirmBlock) are a few dozen bytes, so anything much larger is refused
 * unread. */
#define O3M_MAX_PMG_REQUEST 4096

/* ---- The metrics and probe port (o3m_httpd) ---- */

/* Connections the port serves at once, from one address at once, and the
 * seconds one request may take from the connection's start (or the end of
 * its previous request) to its answer however busy the client keeps it: a
 * scraper needs one, and a slow client (slowloris) cannot hold the rest. */
#define O3M_MAX_HTTPD_CONNECTIONS 64
#define O3M_MAX_HTTPD_PER_ADDRESS 4
#define O3M_MAX_HTTPD_REQUEST_S 10

/* ---- Files ---- */

/* Largest config file o3m_config_load reads: a federation of
 * O3M_MAX_PARTIES parties and O3M_MAX_CLIENTS clients fits well within. */
#define O3M_MAX_CONFIG_FILE (1 << 20)

/* Largest PEM file (CA bundle, certificate chain, key) read for TLS, by the
 * one PEM reader (crypto/o3m_pem.h) that the start-up check of the TLS
 * files, the gRPC layer and the metrics port share: a long chain is a few
 * kilobytes. */
#define O3M_MAX_PEM_FILE (1 << 20)

/* Largest catalog file the active party reads: O3M_MAX_ARMS ids of at most
 * O3M_MAX_ID bytes each, one a line, fit. */
#define O3M_MAX_CATALOG_FILE (256u << 20)

/* Most rows of one feature table: row indices and counts are ints, and
 * half of INT_MAX leaves room for the table's growth by doubling. */
#define O3M_MAX_TABLE_ROWS (INT_MAX / 2)

/* Largest table_bytes_max a party may set: 1 TiB. A table of
 * O3M_MAX_TABLE_ROWS rows of a few columns is far below it; the key exists
 * so that a path that points at something endless (a growing file, a
 * /proc-style file of size 0 that never ends) cannot take the party's
 * memory, and a value above this is a typo rather than a table. */
#define O3M_MAX_TABLE_BYTES (1ull << 40)

/* Longest line of a feature table file: a row of O3M_MAX_DIM values at 17
 * significant digits is about 100 KiB, and a tenfold margin leaves room
 * for quoting and spaces. A longer run of bytes without a line end (a
 * sparse file of zeros under table_bytes_max) is refused as it is read,
 * so that one "line" cannot hold the file's size in memory. */
#define O3M_MAX_TABLE_LINE (1 << 20)

/* How long a daemon's shutdown waits for its table loader thread, which
 * may be inside read() of a slow file (a hung network mount), before it
 * leaves the thread behind and exits anyway: well inside the shutdown
 * deadline of a service manager (systemd's 90 s) and of the tests. */
#define O3M_TABLES_STOP_WAIT_MS 2000

/* ---- o3m-eval's input ---- */

/* Largest magnitude of a number o3m-eval reads from a data file (a stream
 * file's contexts and rewards, a logged table's numeric features); larger
 * ones are refused naming the line and the value. Below it x . x of a
 * context of O3M_MAX_DIM values (4096 x 1e300 = 4e303) and a sum of
 * rewards over any feasible number of rounds (1e158 of them) stay finite,
 * so such a file cannot make the policy fail later with "not finite" or a
 * cumulative reward print as inf. Subnormal values are accepted. */
#define O3M_MAX_INPUT_ABS 1e150

/* Most arms of one round o3m-eval simulates, replays or reads (--K, a
 * stream file's round, a logged data set's items): a tenth of the daemons'
 * O3M_MAX_CANDIDATES, since a simulation holds each party's share, their
 * masked sum and the centralized copy of a round's K x d contexts in one
 * process where a daemon holds one, and every data set in use has at most
 * a few hundred. */
#define O3M_EVAL_MAX_K (O3M_MAX_CANDIDATES / 10)

_Static_assert(O3M_MAX_CACHED_PARTIES <= O3M_MAX_PARTIES, "no more than a federation has");
_Static_assert(O3M_MAX_CLIENTS < O3M_MAX_PENDING_OWNERS, "every client and the pool own a share");
_Static_assert(O3M_MAX_RECEIVING >= 1 && O3M_MAX_RECEIVING < O3M_MAX_METHOD_SLOTS,
               "one identity's receive cap leaves slots for the others");
_Static_assert(O3M_MAX_ROUND_DEADLINE_MS <= O3M_MAX_DEADLINE_MS, "a round's deadline");
_Static_assert(O3M_EVAL_MAX_K <= O3M_MAX_CANDIDATES, "o3m-eval's K is one the daemons serve");

#endif
