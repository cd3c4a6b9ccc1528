/* o3m_cert.c -- see o3m_cert.h.
 *
 * The files are parsed into one tls_set (CA store, certificate, its chain,
 * private key), which the checks then read; one function frees it on every
 * path. OpenSSL reports why a parse failed on its thread-local error queue:
 * the reason of the newest entry goes into the message, and the queue is
 * cleared afterwards so that nothing stale is left for gRPC, which shares
 * the library. */
#include "o3m_cert.h"

#include "o3m_pem.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/objects.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <openssl/x509_vfy.h>

typedef struct tls_set {
  X509_STORE *store;      /* the CA file's certificates: the trust anchors */
  X509 *cert;             /* the first certificate of cert_file */
  STACK_OF(X509) *chain;  /* the certificates after it (intermediates) */
  EVP_PKEY *key;
} tls_set;

static void tls_set_free(tls_set *t) {
  X509_STORE_free(t->store);
  X509_free(t->cert);
  sk_X509_pop_free(t->chain, X509_free);
  EVP_PKEY_free(t->key);
  memset(t, 0, sizeof *t);
  ERR_clear_error();
}

/* The reason of OpenSSL's newest queued error ("no start line"), or a
 * generic phrase when the queue is empty. */
static const char *ssl_reason(void) {
  unsigned long err = ERR_peek_last_error();
  const char *r = err ? ERR_reason_error_string(err) : NULL;
  return r ? r : "not PEM";
}

/* Reads path (o3m_pem_read: the cap, and for a secret file, the private
 * key, o3m_secret_file_check) into a memory BIO for OpenSSL to parse; on
 * failure e says "WHAT FILE: cannot read: ..." and the like. The text is
 * wiped once copied, and a memory BIO wipes its own copy when freed. */
static int open_pem(const char *what, const char *path, int secret, BIO **out, o3m_err *e) {
  *out = NULL;
  char *text;
  size_t len;
  int rc = o3m_pem_read(what, path, secret, &text, &len, e);
  if (rc < 0) return rc;
  BIO *b = BIO_new(BIO_s_mem());
  if (b && BIO_write(b, text, (int)len) != (int)len) {
    BIO_free(b);
    b = NULL;
  }
  o3m_pem_free(text, len);
  if (!b) return o3m_err_set(e, O3M_ENOMEM, "%s %s: out of memory", what, path);
  *out = b;
  return O3M_OK;
}

/* A passphrase callback that has none: an encrypted key fails to load
 * instead of prompting on the terminal. */
static int no_passphrase(char *buf, int size, int rwflag, void *u) {
  (void)buf, (void)size, (void)rwflag, (void)u;
  return -1;
}

/* Every certificate in ca_file, into a new store. */
static int load_ca(const char *path, tls_set *t, o3m_err *e) {
  BIO *b;
  int rc = open_pem("ca", path, 0, &b, e);
  if (rc < 0) return rc;
  t->store = X509_STORE_new();
  if (!t->store) {
    BIO_free(b);
    return o3m_err_set(e, O3M_ENOMEM, "ca %s: out of memory", path);
  }
  int n = 0;
  X509 *x;
  while ((x = PEM_read_bio_X509(b, NULL, NULL, NULL)) != NULL) {
    int ok = X509_STORE_add_cert(t->store, x);
    X509_free(x);
    if (!ok) {
      BIO_free(b);
      return o3m_err_set(e, O3M_ETLS, "ca %s: certificate %d: %s", path, n + 1, ssl_reason());
    }
    n++;
  }
  /* The loop ends at the end of the file ("no start line") or at a block
   * that does not parse; only the former is fine, and only after one. */
  unsigned long last = ERR_peek_last_error();
  int at_end = ERR_GET_REASON(last) == PEM_R_NO_START_LINE;
  BIO_free(b);
  if (n == 0 || !at_end)
    return o3m_err_set(e, O3M_ETLS, "ca %s: no PEM certificate%s (%s)", path,
                       n ? " after the first ones" : "", ssl_reason());
  ERR_clear_error();
  return O3M_OK;
}

/* The first certificate of cert_file and the chain after it. */
static int load_cert(const char *path, tls_set *t, o3m_err *e) {
  BIO *b;
  int rc = open_pem("certificate", path, 0, &b, e);
  if (rc < 0) return rc;
  t->cert = PEM_read_bio_X509(b, NULL, NULL, NULL);
  if (!t->cert) {
    BIO_free(b);
    return o3m_err_set(e, O3M_ETLS, "certificate %s: no PEM certificate (%s)", path,
                       ssl_reason());
  }
  t->chain = sk_X509_new_null();
  if (!t->chain) {
    BIO_free(b);
    return o3m_err_set(e, O3M_ENOMEM, "certificate %s: out of memory", path);
  }
  X509 *x;
  while ((x = PEM_read_bio_X509(b, NULL, NULL, NULL)) != NULL)
    if (!sk_X509_push(t->chain, x)) {
      X509_free(x);
      BIO_free(b);
      return o3m_err_set(e, O3M_ENOMEM, "certificate %s: out of memory", path);
    }
  BIO_free(b);
  ERR_clear_error();
  return O3M_OK;
}

static int load_key(const char *path, tls_set *t, o3m_err *e) {
  BIO *b;
  int rc = open_pem("key", path, 1, &b, e);
  if (rc < 0) return rc;
  t->key = PEM_read_bio_PrivateKey(b, NULL, no_passphrase, NULL);
  BIO_free(b);
  if (!t->key)
    return o3m_err_set(e, O3M_ETLS, "key %s: no PEM private key, or an encrypted one (%s)", path,
                       ssl_reason());
  ERR_clear_error();
  return O3M_OK;
}

/* Parses the files that are not NULL and checks that the key is the
 * certificate's. On failure t holds what was parsed; the caller frees it. */
static int load_files(const char *ca_file, const char *cert_file, const char *key_file,
                      tls_set *t, o3m_err *e) {
  memset(t, 0, sizeof *t);
  int rc = O3M_OK;
  if (ca_file && (rc = load_ca(ca_file, t, e)) < 0) return rc;
  if (cert_file && (rc = load_cert(cert_file, t, e)) < 0) return rc;
  if (key_file && (rc = load_key(key_file, t, e)) < 0) return rc;
  if (t->cert && t->key && X509_check_private_key(t->cert, t->key) != 1)
    return o3m_err_set(e, O3M_ETLS, "key %s does not match certificate %s", key_file, cert_file);
  return O3M_OK;
}

int o3m_cert_check_files(const char *ca_file, const char *cert_file, const char *key_file,
                         o3m_err *e) {
  tls_set t;
  int rc = load_files(ca_file, cert_file, key_file, &t, e);
  tls_set_free(&t);
  return rc;
}

/* "2026-01-31 23:59:59 UTC", or "an unreadable date". */
static void format_time(const ASN1_TIME *at, char *buf, size_t n) {
  struct tm tm;
  if (!at || ASN1_TIME_to_tm(at, &tm) != 1 || strftime(buf, n, "%Y-%m-%d %H:%M:%S UTC", &tm) == 0)
    snprintf(buf, n, "an unreadable date");
}

/* Not before <= now <= not after, each bound named in the message. */
static int check_dates(const tls_set *t, const char *cert_file, o3m_err *e) {
  char when[64];
  const ASN1_TIME *from = X509_get0_notBefore(t->cert), *until = X509_get0_notAfter(t->cert);
  /* X509_cmp_current_time: -1 earlier than now, 1 later, 0 unreadable. */
  int c = X509_cmp_current_time(from);
  if (c >= 0) {
    format_time(from, when, sizeof when);
    return o3m_err_set(e, O3M_ETLS, "certificate %s is not yet valid: valid from %s", cert_file,
                       when);
  }
  c = X509_cmp_current_time(until);
  if (c <= 0) {
    format_time(until, when, sizeof when);
    return o3m_err_set(e, O3M_ETLS, "certificate %s expired: valid until %s", cert_file, when);
  }
  return O3M_OK;
}

/* Verifies the certificate against the CA store for one TLS purpose
 * (X509_PURPOSE_SSL_SERVER or _CLIENT): the chain, the signatures, the
 * CA's validity and constraints, and the key usages the purpose needs. */
static int check_chain(const tls_set *t, int purpose, const char *ca_file, const char *cert_file,
                       o3m_err *e) {
  X509_STORE_CTX *ctx = X509_STORE_CTX_new();
  if (!ctx) return o3m_err_set(e, O3M_ENOMEM, "certificate %s: out of memory", cert_file);
  int rc = O3M_OK;
  if (X509_STORE_CTX_init(ctx, t->store, t->cert, t->chain) != 1 ||
      X509_STORE_CTX_set_purpose(ctx, purpose) != 1) {
    rc = o3m_err_set(e, O3M_ENOMEM, "certificate %s: cannot set up verification (%s)", cert_file,
                     ssl_reason());
  } else if (X509_verify_cert(ctx) != 1) {
    int err = X509_STORE_CTX_get_error(ctx);
    const char *why = X509_verify_cert_error_string(err);
    if (err == X509_V_ERR_INVALID_PURPOSE)
      rc = o3m_err_set(e, O3M_ETLS, "certificate %s is not for TLS %s use: %s", cert_file,
                       purpose == X509_PURPOSE_SSL_SERVER ? "server" : "client", why);
    else
      rc = o3m_err_set(e, O3M_ETLS, "certificate %s does not chain to the federation CA %s: %s",
                       cert_file, ca_file, why);
  }
  X509_STORE_CTX_free(ctx);
  return rc;
}

/* The subject must carry exactly one CN, equal to party byte for byte: the
 * rule o3m_rpc_call_identity applies on the other end. */
static int check_name(const tls_set *t, const char *cert_file, const char *party, o3m_err *e) {
  const X509_NAME *subject = X509_get_subject_name(t->cert);
  int i = subject ? X509_NAME_get_index_by_NID(subject, NID_commonName, -1) : -1;
  if (i < 0)
    return o3m_err_set(e, O3M_ETLS, "certificate %s has no subject CN; it must be the party "
                       "name '%s'", cert_file, party);
  if (X509_NAME_get_index_by_NID(subject, NID_commonName, i) >= 0)
    return o3m_err_set(e, O3M_ETLS, "certificate %s has more than one subject CN; it must have "
                       "one, the party name '%s'", cert_file, party);
  unsigned char *cn = NULL;
  int n = ASN1_STRING_to_UTF8(&cn, X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, i)));
  if (n < 0) return o3m_err_set(e, O3M_ETLS, "certificate %s: unreadable subject CN", cert_file);
  int same = (size_t)n == strlen(party) && memcmp(cn, party, (size_t)n) == 0;
  int rc = O3M_OK;
  if (!same) {
    /* The CN is quoted printable and short: it comes from a file an
     * operator may have picked up anywhere. */
    char shown[65];
    int k = 0;
    for (; k < n && k < 64; k++) shown[k] = (cn[k] >= 0x20 && cn[k] < 0x7f) ? (char)cn[k] : '?';
    shown[k] = '\0';
    rc = o3m_err_set(e, O3M_ETLS, "certificate %s is issued to CN '%s%s', not to the party "
                     "name '%s'", cert_file, shown, n > 64 ? "..." : "", party);
  }
  OPENSSL_free(cn);
  return rc;
}

int o3m_cert_check_party(const char *ca_file, const char *cert_file, const char *key_file,
                         const char *party, o3m_err *e) {
  if (!ca_file || !cert_file || !key_file)
    return o3m_err_set(e, O3M_EINVAL, "the CA, certificate and key files are all required");
  tls_set t;
  int rc = load_files(ca_file, cert_file, key_file, &t, e);
  if (rc == O3M_OK) rc = check_dates(&t, cert_file, e);
  if (rc == O3M_OK) rc = check_chain(&t, X509_PURPOSE_SSL_SERVER, ca_file, cert_file, e);
  if (rc == O3M_OK) rc = check_chain(&t, X509_PURPOSE_SSL_CLIENT, ca_file, cert_file, e);
  if (rc == O3M_OK && party) rc = check_name(&t, cert_file, party, e);
  tls_set_free(&t);
  return rc;
}

/* "DNS:localhost, IP:127.0.0.1" (cut with "..." when it does not fit), or
 * "none" for a certificate without a subjectAltName extension. Only DNS
 * and IP entries are spelled out; the others are counted as "other". */
static void list_sans(const GENERAL_NAMES *sans, char *buf, size_t n) {
  size_t used = 0;
  buf[0] = '\0';
  int count = sans ? sk_GENERAL_NAME_num(sans) : 0;
  for (int i = 0; i < count && used + 1 < n; i++) {
    const GENERAL_NAME *g = sk_GENERAL_NAME_value(sans, i);
    char one[80];
    if (g->type == GEN_DNS) {
      const unsigned char *d = ASN1_STRING_get0_data(g->d.dNSName);
      int len = ASN1_STRING_length(g->d.dNSName);
      int k = 0;
      one[k++] = 'D', one[k++] = 'N', one[k++] = 'S', one[k++] = ':';
      for (int j = 0; j < len && k < 70; j++)
        one[k++] = (d[j] >= 0x20 && d[j] < 0x7f) ? (char)d[j] : '?';
      one[k] = '\0';
    } else if (g->type == GEN_IPADD) {
      const unsigned char *d = ASN1_STRING_get0_data(g->d.iPAddress);
      int len = ASN1_STRING_length(g->d.iPAddress);
      char ip[INET6_ADDRSTRLEN] = "?";
      if (len == 4) inet_ntop(AF_INET, d, ip, sizeof ip);
      else if (len == 16) inet_ntop(AF_INET6, d, ip, sizeof ip);
      snprintf(one, sizeof one, "IP:%s", ip);
    } else {
      snprintf(one, sizeof one, "other");
    }
    int w = snprintf(buf + used, n - used, "%s%s", i ? ", " : "", one);
    if (w < 0 || (size_t)w >= n - used) {
      if (n > 4) snprintf(buf + n - 4, 4, "...");
      return;
    }
    used += (size_t)w;
  }
  if (count == 0) snprintf(buf, n, "none");
}

int o3m_cert_check_san(const char *cert_file, const char *name, o3m_err *e) {
  if (!cert_file || !name) return o3m_err_set(e, O3M_EINVAL, "certificate file or name is NULL");
  tls_set t;
  int rc = load_files(NULL, cert_file, NULL, &t, e);
  if (rc < 0) {
    tls_set_free(&t);
    return rc;
  }
  /* What gRPC's check on the other end compares: a name that reads as an
   * IP address against the IP entries, any other against the DNS entries
   * (wildcards as TLS allows them). The subject CN is never consulted:
   * RFC 6125 retired it as a host name, and gRPC uses it only when a
   * certificate has no subjectAltName at all. */
  unsigned char bin[16];
  int is_ip = inet_pton(AF_INET, name, bin) == 1 || inet_pton(AF_INET6, name, bin) == 1;
  int ok = is_ip ? X509_check_ip_asc(t.cert, name, 0) == 1
                 : X509_check_host(t.cert, name, 0, X509_CHECK_FLAG_NEVER_CHECK_SUBJECT, NULL) == 1;
  if (!ok) {
    GENERAL_NAMES *sans = X509_get_ext_d2i(t.cert, NID_subject_alt_name, NULL, NULL);
    char have[128];
    list_sans(sans, have, sizeof have);
    GENERAL_NAMES_free(sans);
    rc = o3m_err_set(e, O3M_ETLS, "certificate %s has SANs %s but not %s:%s, the name every "
                     "peer checks", cert_file, have, is_ip ? "IP" : "DNS", name);
  }
  tls_set_free(&t);
  return rc;
}

void o3m_cert_san_fix(char *buf, size_t n, const char *key_file, const char *name) {
  snprintf(buf, n,
           "to fix: make a request with the name, openssl req -new -key %s -subj /CN=%s "
           "-addext 'subjectAltName = DNS:%s' -addext 'extendedKeyUsage = serverAuth, "
           "clientAuth' -out %s.csr, and have the federation CA sign it keeping the "
           "extensions (openssl x509 -req -in %s.csr -CA ca.pem -CAkey ca.key "
           "-copy_extensions copy -days 825 -sha256 -out %s.pem; scripts/make-certs.sh "
           "does both)",
           key_file, name, name, name, name, name);
}
