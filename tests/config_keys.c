/* config_keys.c -- prints every key the config parser accepts, one
 * "SECTION KEY ROLES REQUIRED" line each ("-" for an empty field), from the
 * parser's own tables (o3m_config_key_at). tests/config_doc.sh compares
 * the list with docs/configuration.md and o3m.conf(5), so that neither
 * can leave out a key the parser reads nor describe one it refuses. */
#include <stdio.h>

#include "o3m_config.h"

static const char *or_dash(const char *s) { return s && *s ? s : "-"; }

int main(void) {
  o3m_config_key k;
  int i = 0;
  for (; o3m_config_key_at(i, &k); i++)
    printf("%s %s %s %s\n", k.section, k.key, or_dash(k.roles), or_dash(k.required));
  return i > 0 ? 0 : 1;
}
