/* o3m_pem.h -- the one reader of PEM files (CA bundles, certificate chains,
 * private keys).
 *
 * Three places read them: the checks of a party's TLS files at start
 * (o3m_cert.h), the gRPC credentials (proto/o3m_rpc.c) and the metrics
 * port's HTTPS (common/o3m_httpd.c). They read the same files, so they take
 * the same cap and the same check of a secret file from here: a file the
 * start-up check accepted cannot then be refused by the next reader for
 * its size. */
#ifndef O3M_PEM_H
#define O3M_PEM_H

#include <stddef.h>

#include "o3m_error.h"
#include "o3m_limits.h"

/* Reads the file path whole into a new NUL-terminated string *out of *len
 * bytes (len may be NULL); free it with o3m_pem_free. what names the file
 * in messages ("key", "tls.ca_file", "metrics listen: ca"). A secret file
 * (a private key) must first pass o3m_secret_file_check (common/o3m_bytes.h)
 * on the descriptor opened. Errors, each naming what and path: O3M_ETLS
 * "cannot read: REASON", "empty file", "larger than O3M_MAX_PEM_FILE bytes"
 * (o3m_limits.h) or "read error"; O3M_EPERM from the secret check;
 * O3M_ENOMEM. On failure *out is NULL and nothing read is left in memory.
 * The contents are not parsed: that is the caller's library's business
 * (OpenSSL, gRPC, GnuTLS). */
int o3m_pem_read(const char *what, const char *path, int secret, char **out, size_t *len,
                 o3m_err *e);

/* Wipes the len bytes of pem (a key must not linger in freed memory) and
 * frees it. NULL is accepted. */
void o3m_pem_free(char *pem, size_t len);

#endif
