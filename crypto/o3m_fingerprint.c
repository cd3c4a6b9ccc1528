/* o3m_fingerprint.c -- the federation fingerprint (see o3m_fingerprint.h).
 *
 * The canonical text is written into one buffer sized up front from the
 * number of column parties (every line has a bounded length, names being at
 * most O3M_CONFIG_MAX_NAME characters), then hashed with libsodium's
 * crypto_generichash (BLAKE2b) to 32 bytes. */
#include "o3m_fingerprint.h"
#include "o3m_alloc.h"

#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "o3m_config.h"

/* The longest line: "party=" NAME " role=passive dims=" int " max_norm="
 * %.17g " agg_public=" 64 hex digits " tables=user,item\n", with room to
 * spare. */
#define LINE_MAX_BYTES (O3M_CONFIG_MAX_NAME + 2 * O3M_FINGERPRINT_BYTES + 128)

typedef struct text {
  char *buf;
  size_t len, cap;
} text;

/* Appends one formatted line; the buffer was sized so that it always fits,
 * which the return value confirms (O3M_EINVAL otherwise, never a cut). */
static int put(text *t, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= t->cap - t->len) return O3M_EINVAL;
  t->len += (size_t)n;
  return 0;
}

int o3m_fingerprint_canonical(const o3m_config *c, char **out, size_t *len, o3m_err *e) {
  if (!out || !len) return o3m_err_set(e, O3M_EINVAL, "fingerprint: out is NULL");
  *out = NULL;
  *len = 0;
  if (!c) return o3m_err_set(e, O3M_EINVAL, "fingerprint: config is NULL");
  int m = o3m_config_n_column_parties(c);
  text t = {.cap = (size_t)(m + 5) * LINE_MAX_BYTES};
  t.buf = o3m_malloc(t.cap);
  if (!t.buf) return o3m_err_set(e, O3M_ENOMEM, "fingerprint: out of memory");
  int rc = put(&t, "o3m-federation-fingerprint-v2\n");
  if (!rc) rc = put(&t, "d=%d\n", o3m_config_d(c));
  if (!rc)
    rc = put(&t, "aggregation=%s\n", o3m_config_secure_aggregation(c) ? "secure" : "per-party");
  if (!rc) rc = put(&t, "max_candidates=%d\n", o3m_config_policy(c)->max_candidates);
  if (!rc) rc = put(&t, "pmg=%s\n", o3m_config_pmg(c)->name);
  for (int s = 0; s < m && !rc; s++) {
    const o3m_party *p = o3m_config_column_party(c, s);
    char key[O3M_FINGERPRINT_HEX] = "-";
    if (p->has_agg_public) sodium_bin2hex(key, sizeof key, p->agg_public, sizeof p->agg_public);
    /* Which tables the party has (not where): the active participant
     * refuses an empty user exactly when some party has a user table, as
     * that party refuses it, so all copies must agree on it. */
    const char *tables = p->user_table && p->item_table ? "user,item"
                         : p->user_table                 ? "user"
                         : p->item_table                 ? "item"
                                                         : "-";
    rc = put(&t, "party=%s role=%s dims=%d max_norm=%.17g agg_public=%s tables=%s\n", p->name,
             o3m_role_name(p->role), p->dims, p->max_norm, key, tables);
  }
  if (rc) {
    o3m_free(t.buf);
    return o3m_err_set(e, rc, "fingerprint: the canonical encoding overflows its buffer");
  }
  *out = t.buf;
  *len = t.len;
  return 0;
}

int o3m_fingerprint_compute(const o3m_config *c, unsigned char out[O3M_FINGERPRINT_BYTES],
                            o3m_err *e) {
  memset(out, 0, O3M_FINGERPRINT_BYTES);
  /* sodium_init is idempotent and thread-safe; 1 means already done. */
  if (sodium_init() < 0)
    return o3m_err_set(e, O3M_ERANDOM, "fingerprint: libsodium cannot be initialized");
  char *txt;
  size_t n;
  int rc = o3m_fingerprint_canonical(c, &txt, &n, e);
  if (rc < 0) return rc;
  crypto_generichash(out, O3M_FINGERPRINT_BYTES, (const unsigned char *)txt, n, NULL, 0);
  o3m_free(txt);
  return 0;
}

void o3m_fingerprint_hex(const unsigned char fp[O3M_FINGERPRINT_BYTES],
                         char out[O3M_FINGERPRINT_HEX]) {
  sodium_bin2hex(out, O3M_FINGERPRINT_HEX, fp, O3M_FINGERPRINT_BYTES);
}

int o3m_fingerprint_check(const void *theirs, size_t n,
                          const unsigned char ours[O3M_FINGERPRINT_BYTES], const char *who,
                          o3m_err *e) {
  char mine[O3M_FINGERPRINT_HEX];
  o3m_fingerprint_hex(ours, mine);
  if (n == 0 || !theirs)
    return o3m_err_set(e, O3M_ESTATE,
                       "%s sends no federation fingerprint (a build before protocol 5?); "
                       "ours is %.*s...",
                       who, O3M_FINGERPRINT_SHORT, mine);
  if (n == O3M_FINGERPRINT_BYTES && sodium_memcmp(theirs, ours, O3M_FINGERPRINT_BYTES) == 0)
    return 0;
  char peer[O3M_FINGERPRINT_HEX] = "(malformed)";
  if (n == O3M_FINGERPRINT_BYTES) o3m_fingerprint_hex(theirs, peer);
  return o3m_err_set(e, O3M_ESTATE,
                     "federation fingerprint mismatch: %s has %.*s..., this party %.*s...; "
                     "compare the configs",
                     who, O3M_FINGERPRINT_SHORT, peer, O3M_FINGERPRINT_SHORT, mine);
}
