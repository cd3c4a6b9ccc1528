/* ap_catalog.h -- the disjoint model's items catalog: item id -> arm.
 *
 * With [policy] model = disjoint every arm is one item, and the catalog
 * file ([policy] items) lists them: line i (counting from 0) is arm i. A
 * Recommend that names its candidates by item id alone (no arms) gets each
 * candidate's arm from here (ap_round.h).
 *
 * The file is read once, whole, at load: the ids live in one buffer (the
 * file's text with every line end replaced by a NUL), and an
 * open-addressing hash table of arm + 1 (0 = empty; o3m_hash.h, linear
 * probing, load factor at most 1/2) finds an id's arm in O(1) expected.
 * Nothing is allocated after ap_catalog_load; a catalog is never changed.
 *
 * Threads: a loaded catalog is read-only, so any number of threads may call
 * ap_catalog_find and ap_catalog_id at once. */
#ifndef AP_CATALOG_H
#define AP_CATALOG_H

#include "o3m_config.h"
#include "o3m_error.h"
#include "o3m_limits.h"

/* Largest catalog file read. Item ids are at most O3M_MAX_ID bytes
 * (o3m_limits.h), the limit of the feature tables, so that every catalog id
 * can also be a table id. */
#define AP_CATALOG_MAX_FILE O3M_MAX_CATALOG_FILE

typedef struct ap_catalog ap_catalog;

/* Reads the catalog file at path: one item id per line (LF or CRLF; a final
 * line end is optional), each 1 to O3M_MAX_ID bytes without NUL, no
 * duplicates, no empty line, at least one line and at most max_arms.
 * Errors name the file and, for a bad line, its number ("items.txt:7:
 * duplicate item id (first on line 3)"): O3M_EIO (cannot open or read),
 * O3M_EPARSE (the content: empty, too many items, an empty, over-long or
 * duplicate id, larger than AP_CATALOG_MAX_FILE), O3M_ENOMEM. On failure
 * *out is NULL and nothing is left allocated. */
int ap_catalog_load(ap_catalog **out, const char *path, int max_arms, o3m_err *e);

/* The number of items (arms), >= 1. */
int ap_catalog_size(const ap_catalog *c);

/* The arm of id (a NUL-terminated string), or -1 if the catalog does not
 * list it. */
int ap_catalog_find(const ap_catalog *c, const char *id);

/* The item id of arm (0 <= arm < ap_catalog_size), owned by the catalog. */
const char *ap_catalog_id(const ap_catalog *c, int arm);

/* Frees the catalog. NULL is accepted. */
void ap_catalog_destroy(ap_catalog *c);

#endif
