/* fuzz_config.c -- libFuzzer target for the federation config parser.
 *
 * Each input is parsed twice: as text by o3m_config_parse_string (the bytes
 * up to the first NUL, with a base directory so that path resolution runs)
 * and as a file by o3m_config_load (all bytes, NULs included, which the
 * loader must reject). A config that parses is then walked through every
 * accessor and checked against the structure o3m_config.h promises: one pmg,
 * one active party, dims summing to d, column parties in slot order with
 * increasing col0, names found again by o3m_config_party, clients whose
 * names are no party's. */
#include <stdint.h>
#include <string.h>

#include "fuzz_util.h"
#include "o3m_config.h"

static fuzz_file g_file;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  fuzz_file_init(&g_file, "fuzz_config");
  return 0;
}

/* Reads every field of every party (ASan sees a dangling string) and checks
 * the documented invariants of a loaded config. */
static void walk(const o3m_config *c) {
  int d = o3m_config_d(c);
  FUZZ_CHECK(d >= 1 && d <= O3M_MAX_DIM);
  FUZZ_CHECK(o3m_config_deadline_ms(c) >= 1);
  FUZZ_CHECK(strlen(o3m_config_name(c)) > 0);
  FUZZ_CHECK(o3m_config_base_dir(c) != NULL);
  if (o3m_config_ca(c)) FUZZ_CHECK(strlen(o3m_config_ca(c)) > 0);
  if (!o3m_config_insecure(c)) FUZZ_CHECK(o3m_config_ca(c) != NULL);

  const o3m_config_policy_section *pol = o3m_config_policy(c);
  FUZZ_CHECK(pol != NULL);
  FUZZ_CHECK(!strcmp(pol->algo, "linucb") || !strcmp(pol->algo, "lints"));
  FUZZ_CHECK(!strcmp(pol->model, "shared") || !strcmp(pol->model, "disjoint"));
  FUZZ_CHECK((pol->items != NULL) == !strcmp(pol->model, "disjoint"));
  FUZZ_CHECK(pol->lambda > 0 && pol->alpha >= 0 && pol->v >= 0);
  FUZZ_CHECK(pol->reward_max > pol->reward_min);
  FUZZ_CHECK(pol->max_candidates >= 1 && pol->pending_capacity >= 1);
  FUZZ_CHECK(pol->refactor_every >= 1 && pol->pending_expiry_s >= 1);

  int n = o3m_config_n_parties(c);
  int pmg = 0, active = 0, passive = 0, dims_sum = 0;
  FUZZ_CHECK(n >= 2 && n <= O3M_CONFIG_MAX_PARTIES);
  FUZZ_CHECK(o3m_config_party_at(c, -1) == NULL && o3m_config_party_at(c, n) == NULL);
  for (int i = 0; i < n; i++) {
    const o3m_party *p = o3m_config_party_at(c, i);
    FUZZ_CHECK(p != NULL);
    size_t len = strlen(p->name);
    FUZZ_CHECK(len >= 1 && len <= O3M_CONFIG_MAX_NAME);
    FUZZ_CHECK(o3m_config_party(c, p->name) == p);
    FUZZ_CHECK(strlen(p->address) > 0);
    FUZZ_CHECK(strcmp(o3m_role_name(p->role), "unknown") != 0);
    if (!o3m_config_insecure(c)) FUZZ_CHECK(p->cert && p->key);
    if (p->cert) (void)strlen(p->cert);
    if (p->key) (void)strlen(p->key);
    if (p->state_dir) (void)strlen(p->state_dir);
    if (p->role == O3M_ROLE_PMG) {
      pmg++;
      FUZZ_CHECK(p->dims == 0 && p->col0 == -1 && p->slot == -1);
      FUZZ_CHECK(!p->user_table && !p->item_table);
    } else {
      if (p->role == O3M_ROLE_ACTIVE) active++;
      else passive++;
      FUZZ_CHECK(p->dims >= 1 && p->dims <= O3M_MAX_DIM);
      if (p->role == O3M_ROLE_PASSIVE) FUZZ_CHECK(p->user_table || p->item_table);
      if (p->user_table) (void)strlen(p->user_table);
      if (p->item_table) (void)strlen(p->item_table);
      dims_sum += p->dims;
    }
  }
  FUZZ_CHECK(pmg == 1 && active == 1);
  FUZZ_CHECK(dims_sum == d);
  FUZZ_CHECK(o3m_config_pmg(c)->role == O3M_ROLE_PMG);
  FUZZ_CHECK(o3m_config_active(c)->role == O3M_ROLE_ACTIVE);
  FUZZ_CHECK(o3m_config_n_passive(c) == passive);
  for (int i = 0; i < passive; i++)
    FUZZ_CHECK(o3m_config_passive(c, i)->role == O3M_ROLE_PASSIVE);

  int m = o3m_config_n_column_parties(c);
  FUZZ_CHECK(m == active + passive);
  int col = 0;
  for (int s = 0; s < m; s++) {
    const o3m_party *p = o3m_config_column_party(c, s);
    FUZZ_CHECK(p && p->slot == s && p->col0 == col);
    col += p->dims;
  }
  FUZZ_CHECK(col == d);

  /* Clients: valid names, never a party's name, found again by name; cert
   * and key both or neither. */
  int nc = o3m_config_n_clients(c);
  FUZZ_CHECK(nc >= 0 && nc <= O3M_CONFIG_MAX_CLIENTS);
  FUZZ_CHECK(o3m_config_client_at(c, -1) == NULL && o3m_config_client_at(c, nc) == NULL);
  for (int i = 0; i < nc; i++) {
    const o3m_client *cl = o3m_config_client_at(c, i);
    FUZZ_CHECK(cl != NULL);
    size_t len = strlen(cl->name);
    FUZZ_CHECK(len >= 1 && len <= O3M_CONFIG_MAX_NAME);
    FUZZ_CHECK(o3m_config_client(c, cl->name) == cl);
    FUZZ_CHECK(o3m_config_party(c, cl->name) == NULL);
    FUZZ_CHECK(!cl->cert == !cl->key);
    if (cl->cert) (void)strlen(cl->cert);
    if (cl->key) (void)strlen(cl->key);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  o3m_err e;
  o3m_config *c = NULL;

  char *text = fuzz_cstr(data, size);
  int rc = o3m_config_parse_string(&c, text, "base/dir", "fuzz.conf", &e);
  free(text);
  if (rc == 0) {
    walk(c);
    o3m_config_destroy(c);
  } else {
    FUZZ_CHECK(rc < 0 && c == NULL);
    FUZZ_CHECK(strlen(o3m_err_message(&e)) < O3M_ERRMSG_MAX);
  }

  c = NULL;
  rc = o3m_config_load(&c, fuzz_file_set(&g_file, data, size), &e);
  if (rc == 0) {
    FUZZ_CHECK(memchr(data, 0, size) == NULL);
    walk(c);
    o3m_config_destroy(c);
  } else {
    FUZZ_CHECK(rc < 0 && c == NULL);
  }
  return 0;
}
