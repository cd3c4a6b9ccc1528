/* o3m_fingerprint.h -- the federation fingerprint: one hash that every party
 * computes from its own copy of federation.conf and compares with its peers'.
 *
 * Secure aggregation and the column split rest on each party's copy of the
 * config: a passive party takes its peers' agg_public keys and the list of
 * passive parties from it, and nobody relays them. A config author who hands
 * one party a swapped key or an extra party removes the masks without any
 * error. The fingerprint makes such inconsistencies visible: every daemon
 * logs it at start, sends it in Info, the active participant refuses a
 * passive party whose fingerprint differs from its own, a party refuses a
 * mask generator whose fingerprint differs, and the generator refuses
 * GetBlock from a party whose request states another one. It cannot detect
 * a config that is consistent and malicious everywhere: the operators compare
 * the fingerprint out of band for that (SECURITY.md, deploy/README.md).
 *
 * Fingerprint = BLAKE2b-256 (libsodium crypto_generichash, no key) of a
 * canonical text encoding. The text is built from the parsed config, so the
 * layout of the file (whitespace, comments, the order of keys in a section,
 * the place of the pmg and client sections, how a number is written: 1e4 or
 * 10000) never changes it. Version 2 of the encoding, one field per line:
 *
 *   o3m-federation-fingerprint-v2     the encoding's version (domain tag)
 *   d=D                               the context dimension
 *   aggregation=secure|per-party      how the active party gets the parts
 *   max_candidates=K                  [policy]: the passive parties size
 *                                     their buffers and refuse requests by it
 *   pmg=NAME                          the mask generator's identity (its
 *                                     certificate's CN)
 *   party=NAME role=R dims=N max_norm=B agg_public=HEX|- tables=T
 *                                     one line per column party in column
 *                                     order (the active and passive ones):
 *                                     names are certificate identities, the
 *                                     order and dims are the partition, the
 *                                     bounds are enforced by the active party
 *                                     on the others' parts, the keys make the
 *                                     secure-aggregation masks (a key is
 *                                     included whenever it is given, also
 *                                     with per-party aggregation); T is
 *                                     user,item, user, item or - (which
 *                                     tables the party has: the active party
 *                                     refuses an empty user id exactly when
 *                                     some party has a user table, as that
 *                                     party would refuse it)
 *
 * Numbers are written with %d or, for max_norm, %.17g (exact for a double).
 * Names are restricted by the parser to [A-Za-z0-9_.-], so no name can
 * forge a separator.
 *
 * Left out on purpose: addresses, listen and instances (where a party is
 * reached is local to each deployment and listen is read by the party's
 * own daemon only, so a party behind NAT and its peers, whose copies name
 * another listen for it or none, still agree; identities are the names),
 * every path (ca, cert,
 * key, tables, items, state_dir, agg_secret: of the tables only whether a
 * party has each one counts) and every secret, threads,
 * deadline_ms, insecure (it only relaxes the parser; plaintext needs a
 * daemon's --insecure), replication (the active party's own journal), whiten
 * (a party's private choice for its own columns), the [client] sections and
 * the rest of [policy] (algo, model, alpha, lambda, v, seed, refactor_every,
 * pending_*, reward_*, items): only the active participant reads them and no
 * other party could check what it does with them. The CA certificate's
 * contents are not hashed either (only its path is in the config). */
#ifndef O3M_FINGERPRINT_H
#define O3M_FINGERPRINT_H

#include <stddef.h>

#include "o3m_error.h"

struct o3m_config;

/* Bytes of a fingerprint; characters of its hex form with the NUL; hex
 * digits shown in logs and error messages. */
#define O3M_FINGERPRINT_BYTES 32
#define O3M_FINGERPRINT_HEX (2 * O3M_FINGERPRINT_BYTES + 1)
#define O3M_FINGERPRINT_SHORT 16

/* The canonical encoding of c (see above) as a NUL-terminated text in a new
 * buffer *out (*len bytes without the NUL) that the caller frees. On failure
 * (O3M_ENOMEM, O3M_EINVAL) *out is NULL. */
int o3m_fingerprint_canonical(const struct o3m_config *c, char **out, size_t *len, o3m_err *e);

/* out = BLAKE2b-256 of the canonical encoding of c. O3M_ENOMEM, or
 * O3M_ERANDOM when libsodium cannot be initialized; out is then zeroed.
 * The config loader (common/, below this library) does not call it: each
 * user computes it once from its loaded config, at creation, and keeps it,
 * as the config never changes. */
int o3m_fingerprint_compute(const struct o3m_config *c, unsigned char out[O3M_FINGERPRINT_BYTES],
                            o3m_err *e);

/* The 64 lower-case hex digits of fp and a NUL. */
void o3m_fingerprint_hex(const unsigned char fp[O3M_FINGERPRINT_BYTES],
                         char out[O3M_FINGERPRINT_HEX]);

/* Compares a peer's fingerprint (theirs, n bytes as received) with ours.
 * Returns 0 when they are equal, else O3M_ESTATE with a message that names
 * the peer (who, for example "peer" or "BlockRequest: party 2"), the first
 * O3M_FINGERPRINT_SHORT hex digits of both fingerprints (or that the peer
 * sent none: an older build) and the way out: compare the configs. The
 * message is kept short (about 130 bytes) so that it survives the
 * callers' prefixes within O3M_ERRMSG_MAX. */
int o3m_fingerprint_check(const void *theirs, size_t n,
                          const unsigned char ours[O3M_FINGERPRINT_BYTES], const char *who,
                          o3m_err *e);

#endif
