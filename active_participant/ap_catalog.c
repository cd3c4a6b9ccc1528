/* ap_catalog.c -- the disjoint model's items catalog (see ap_catalog.h).
 *
 * One buffer holds the file's text with its line ends replaced by NULs, ids
 * points into it (arm i -> line i), and index is an open-addressing table of
 * arm + 1 (0 = empty) with linear probing, twice as large as the catalog
 * (rounded up to a power of two) so that a probe ends soon. */
#include "ap_catalog.h"
#include "o3m_alloc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "o3m_hash.h"

struct ap_catalog {
  char *text;
  const char **ids; /* n pointers into text */
  int n;
  int *index;
  size_t cap; /* power of two */
};

static uint64_t hash_str(const char *s) { return o3m_hash_bytes(s, strlen(s), 0); }

void ap_catalog_destroy(ap_catalog *c) {
  if (!c) return;
  o3m_free(c->text);
  o3m_free(c->ids);
  o3m_free(c->index);
  o3m_free(c);
}

int ap_catalog_size(const ap_catalog *c) { return c->n; }

const char *ap_catalog_id(const ap_catalog *c, int arm) { return c->ids[arm]; }

int ap_catalog_find(const ap_catalog *c, const char *id) {
  size_t mask = c->cap - 1;
  for (size_t i = (size_t)hash_str(id) & mask;; i = (i + 1) & mask) {
    int a = c->index[i];
    if (a == 0) return -1;
    if (strcmp(c->ids[a - 1], id) == 0) return a - 1;
  }
}

/* Reads the whole file at path into a fresh NUL-terminated buffer (*buf,
 * *len bytes before the NUL). On failure nothing is left allocated. */
static int read_whole(const char *path, char **buf_out, size_t *len_out, o3m_err *e) {
  FILE *f = fopen(path, "rb");
  if (!f) return o3m_err_set(e, O3M_EIO, "%s: cannot open the items catalog: %s", path,
                             strerror(errno));
  size_t cap = 1 << 16, len = 0;
  char *buf = o3m_malloc(cap + 1);
  int rc = 0;
  if (!buf) {
    fclose(f);
    return o3m_err_set(e, O3M_ENOMEM, "%s: out of memory", path);
  }
  for (;;) {
    if (len == cap) {
      if (cap >= AP_CATALOG_MAX_FILE) {
        rc = o3m_err_set(e, O3M_EPARSE, "%s: items catalog larger than %u bytes", path,
                         AP_CATALOG_MAX_FILE);
        break;
      }
      char *nb = o3m_realloc(buf, 2 * cap + 1);
      if (!nb) {
        rc = o3m_err_set(e, O3M_ENOMEM, "%s: out of memory", path);
        break;
      }
      buf = nb;
      cap *= 2;
    }
    size_t got = fread(buf + len, 1, cap - len, f);
    len += got;
    if (got == 0) {
      if (ferror(f)) rc = o3m_err_set(e, O3M_EIO, "%s: read error", path);
      break;
    }
  }
  fclose(f);
  if (rc < 0) {
    o3m_free(buf);
    return rc;
  }
  buf[len] = '\0';
  *buf_out = buf;
  *len_out = len;
  return 0;
}

/* Splits c->text (len bytes) into its n lines, checks each id and indexes
 * it. Errors name the file and line; the caller frees c. */
static int index_lines(ap_catalog *c, const char *path, size_t len, int n, o3m_err *e) {
  char *buf = c->text, *p = buf;
  for (int line = 1; line <= n; line++) {
    char *end = memchr(p, '\n', (size_t)(buf + len - p));
    if (!end) end = buf + len;
    *end = '\0';
    size_t l = (size_t)(end - p);
    if (l > 0 && p[l - 1] == '\r') p[--l] = '\0';
    if (l == 0) return o3m_err_set(e, O3M_EPARSE, "%s:%d: empty item id", path, line);
    if (l > O3M_MAX_ID || strlen(p) != l)
      return o3m_err_set(e, O3M_EPARSE, "%s:%d: item id longer than %d bytes or containing NUL",
                         path, line, O3M_MAX_ID);
    int first = c->n > 0 ? ap_catalog_find(c, p) : -1;
    if (first >= 0)
      return o3m_err_set(e, O3M_EPARSE, "%s:%d: duplicate item id (first on line %d)", path,
                         line, first + 1);
    c->ids[c->n] = p;
    size_t mask = c->cap - 1, i = (size_t)hash_str(p) & mask;
    while (c->index[i]) i = (i + 1) & mask;
    c->index[i] = ++c->n;
    p = end + 1;
  }
  return 0;
}

int ap_catalog_load(ap_catalog **out, const char *path, int max_arms, o3m_err *e) {
  *out = NULL;
  ap_catalog *c = o3m_calloc(1, sizeof *c);
  if (!c) return o3m_err_set(e, O3M_ENOMEM, "%s: out of memory", path);
  size_t len = 0;
  int rc = read_whole(path, &c->text, &len, e);
  if (rc < 0) goto fail;

  /* Count lines; a final line end is not an extra (empty) line. */
  int n = 0;
  for (size_t i = 0; i < len; i++)
    if (c->text[i] == '\n') n++;
  if (len > 0 && c->text[len - 1] != '\n') n++;
  if (n < 1) {
    rc = o3m_err_set(e, O3M_EPARSE, "%s: the items catalog is empty", path);
    goto fail;
  }
  if (n > max_arms) {
    rc = o3m_err_set(e, O3M_EPARSE, "%s: %d items, at most %d arms are supported", path, n,
                     max_arms);
    goto fail;
  }
  c->ids = o3m_malloc(sizeof *c->ids * (size_t)n);
  c->cap = 16;
  while (c->cap < 2 * (size_t)n) c->cap <<= 1;
  c->index = o3m_calloc(c->cap, sizeof *c->index);
  if (!c->ids || !c->index) {
    rc = o3m_err_set(e, O3M_ENOMEM, "%s: out of memory", path);
    goto fail;
  }
  rc = index_lines(c, path, len, n, e);
  if (rc < 0) goto fail;
  *out = c;
  return 0;

fail:
  ap_catalog_destroy(c);
  return rc;
}
