/* o3m_cert.h -- checks of a party's TLS files with OpenSSL's libcrypto,
 * made before gRPC sees them, so that a bad file stops a daemon at start
 * with a message naming the file and the check that failed, instead of
 * surfacing as an unexplained listen failure or as UNAVAILABLE at the first
 * call that crosses the wire.
 *
 * Two levels:
 *   o3m_cert_check_files  each given file parses (the CA file holds at least
 *                         one certificate, the certificate file a
 *                         certificate, the key file an unencrypted private
 *                         key) and the key belongs to the certificate. The
 *                         RPC layer runs it for every server and client it
 *                         creates (proto/o3m_rpc_tls.c), so a credential problem
 *                         is never mistaken for a listen problem.
 *   o3m_cert_check_party  the file checks, then: the certificate is valid
 *                         now, chains to the federation CA for both TLS
 *                         server and TLS client use (every daemon is both),
 *                         and its subject common name is the party name, the
 *                         identity peers will see (o3m_rpc_call_identity).
 *                         Every daemon runs it at start, through
 *                         o3m_daemon_load_party, unless --insecure.
 *
 * The module lives in crypto/, below the RPC layer, which runs the file
 * checks before it hands the files to gRPC (proto/o3m_rpc.c), and below the
 * daemons' start-up (o3m_daemon_load_party). The files are read through
 * the one PEM reader (o3m_pem.h) and its cap.
 *
 * Every failure is O3M_ETLS, except O3M_ENOMEM when OpenSSL cannot allocate
 * and O3M_EINVAL for a NULL argument that is required; the message names
 * the file and says what is wrong with it. Messages longer than
 * O3M_ERRMSG_MAX are cut. Nothing is kept between calls: each call reads
 * the files and frees what it parsed before it returns (OpenSSL clears a
 * private key's memory when it frees it). Safe to call from any thread;
 * OpenSSL 3 initializes itself. */
#ifndef O3M_CERT_H
#define O3M_CERT_H

#include <stddef.h>

#include "o3m_error.h"

/* Checks the files that are not NULL: ca_file must hold at least one PEM
 * certificate and nothing unparsable before it; cert_file must start with
 * a PEM certificate (more may follow: the chain); key_file must hold a PEM
 * private key that is not encrypted (gRPC cannot use one that is). With
 * both cert_file and key_file, the key must be the certificate's. Messages:
 * "ca|certificate|key FILE: cannot read: strerror",
 * "... FILE: no PEM certificate|private key (REASON)" and
 * "key FILE does not match certificate FILE". */
int o3m_cert_check_files(const char *ca_file, const char *cert_file, const char *key_file,
                         o3m_err *e);

/* The start-up check of a party's own TLS material; all three files are
 * required (O3M_EINVAL if one is NULL), and party may be NULL to skip the
 * name check (a tool that presents a certificate not named after a party).
 * In this order, the first failure is reported:
 *   the o3m_cert_check_files checks;
 *   "certificate FILE is not yet valid: valid from DATE" /
 *   "certificate FILE expired: valid until DATE" (DATE as
 *   "2026-01-31 23:59:59 UTC");
 *   "certificate FILE does not chain to the federation CA CA: REASON";
 *   "certificate FILE is not for TLS server|client use: REASON" (its key
 *   usage or extended key usage leaves that out);
 *   "certificate FILE is issued to CN 'X', not to the party name 'P'" (or
 *   has no CN, or more than one). */
int o3m_cert_check_party(const char *ca_file, const char *cert_file, const char *key_file,
                         const char *party, o3m_err *e);

/* The name check peers make in the TLS handshake, made at start: the
 * certificate's subjectAltName must carry name, as a DNS entry (or an IP
 * entry when name reads as an IP address). Every o3m client dials a party
 * with the party name as the TLS server name (o3m_rpc_client_config
 * tls.server_name), so a party certificate without it passes every check
 * above and then fails every call with "Peer name NAME is not in peer
 * certificate". The CN is not consulted. Message:
 *   "certificate FILE has SANs DNS:localhost, IP:127.0.0.1 but not
 *   DNS:NAME, the name every peer checks" ("SANs none" without the
 *   extension). O3M_ETLS, or a file error as o3m_cert_check_files. */
int o3m_cert_check_san(const char *cert_file, const char *name, o3m_err *e);

/* The fix for a failed o3m_cert_check_san, for the operator: the openssl
 * lines that make a certificate request with the name from the party's key
 * (key_file) and sign it with the federation CA, keeping its extensions.
 * Longer than an o3m_err message can hold, so callers print it on a line
 * of its own; buf of 1024 bytes holds it with paths of 200. */
void o3m_cert_san_fix(char *buf, size_t n, const char *key_file, const char *name);

#endif
