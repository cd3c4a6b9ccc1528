/* test_config.c -- the federation config parser (common/o3m_config.h).
 *
 * A valid 29-line federation (BASE below) is parsed for values, defaults and
 * column offsets; then one or more of its lines are replaced to produce each
 * class of error, and the message must name the file, the expected line and
 * the key. tests/data/fed.conf checks loading from disk and resolving paths
 * against the config's directory. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "o3m_config.h"

/* Line numbers are part of the expected messages below. */
static const char *const BASE[] = {
    "[federation]",                    /* 1 */
    "d = 10",                          /* 2 */
    "ca = certs/ca.pem",               /* 3 */
    "",                                /* 4 */
    "[policy]",                        /* 5 */
    "algo = linucb",                   /* 6 */
    "model = shared",                  /* 7 */
    "",                                /* 8 */
    "[party pmg]",                     /* 9 */
    "role = pmg",                      /* 10 */
    "address = 127.0.0.1:50050",       /* 11 */
    "cert = certs/pmg.pem",            /* 12 */
    "key = certs/pmg.key",             /* 13 */
    "",                                /* 14 */
    "[party shop]",                    /* 15 */
    "role = active",                   /* 16 */
    "address = 127.0.0.1:50051",       /* 17 */
    "dims = 6",                        /* 18 */
    "user_table = data/shop_users.csv",/* 19 */
    "cert = certs/shop.pem",           /* 20 */
    "key = certs/shop.key",            /* 21 */
    "",                                /* 22 */
    "[party bank]",                    /* 23 */
    "role = passive",                  /* 24 */
    "address = 127.0.0.1:50052",       /* 25 */
    "dims = 4",                        /* 26 */
    "item_table = data/bank_items.csv",/* 27 */
    "cert = certs/bank.pem",           /* 28 */
    "key = certs/bank.key",            /* 29 */
};
#define NBASE ((int)(sizeof BASE / sizeof BASE[0]))

/* BASE with lines from..to (1-based, inclusive) replaced by repl (which may
 * hold several lines or none); from > NBASE appends. Static buffer. */
static const char *variant(int from, int to, const char *repl) {
  static char buf[8192];
  size_t n = 0;
  buf[0] = '\0';
  for (int i = 1; i <= NBASE + 1; i++) {
    if (i == from) n += (size_t)snprintf(buf + n, sizeof buf - n, "%s\n", repl);
    if (i <= NBASE && (i < from || i > to))
      n += (size_t)snprintf(buf + n, sizeof buf - n, "%s\n", BASE[i - 1]);
  }
  cr_assert_lt(n, sizeof buf);
  return buf;
}

static const char *line(int i, const char *repl) { return variant(i, i, repl); }

/* Parses text expecting failure with every needle in the message. */
static void expect_error(const char *text, const char *n1, const char *n2,
                         const char *n3) {
  o3m_config *c = (o3m_config *)0x1;
  o3m_err e;
  int rc = o3m_config_parse_string(&c, text, "/base", "fed.conf", &e);
  cr_assert_eq(rc, O3M_EPARSE, "rc %s, message: %s\n--- text ---\n%s",
               o3m_errname(rc), o3m_err_message(&e), text);
  cr_assert_eq(e.code, O3M_EPARSE);
  cr_assert_null(c, "*out must be NULL on failure");
  const char *needles[] = {n1, n2, n3};
  for (int i = 0; i < 3; i++)
    if (needles[i])
      cr_assert(strstr(e.msg, needles[i]), "message '%s' lacks '%s'", e.msg,
                needles[i]);
}

static o3m_config *parse_ok(const char *text, const char *base) {
  o3m_config *c = NULL;
  o3m_err e;
  int rc = o3m_config_parse_string(&c, text, base, "fed.conf", &e);
  cr_assert_eq(rc, O3M_OK, "%s\n--- text ---\n%s", o3m_err_message(&e), text);
  cr_assert_not_null(c);
  return c;
}

Test(config, valid_values_offsets_and_defaults) {
  o3m_config *c = parse_ok(variant(NBASE + 1, NBASE + 1, ""), "/base");
  cr_assert_eq(o3m_config_d(c), 10);
  cr_assert_eq(o3m_config_deadline_ms(c), 200);
  cr_assert_eq(o3m_config_insecure(c), 0);
  cr_assert_str_eq(o3m_config_ca(c), "/base/certs/ca.pem");
  cr_assert_str_eq(o3m_config_metrics_clients(c), "monitor");

  const o3m_config_policy_section *p = o3m_config_policy(c);
  cr_assert_str_eq(p->algo, "linucb");
  cr_assert_str_eq(p->model, "shared");
  cr_assert_eq(p->alpha, 0.5);
  cr_assert_eq(p->lambda, 1.0);
  cr_assert_eq(p->v, 0.01);
  cr_assert_eq(p->seed, 1);
  cr_assert_eq(p->refactor_every, 1000);
  cr_assert_eq(p->max_candidates, 1000);
  cr_assert_eq(p->pending_capacity, 100000);
  cr_assert_eq(p->pending_expiry_s, 3600);
  cr_assert_eq(p->pending_client_share, 100000, "no clients: one share, the whole table");
  cr_assert_eq(p->client_inflight_max, 32);
  cr_assert_eq(p->batch_cost_max, 65536);
  cr_assert_eq(p->reward_min, 0.0);
  cr_assert_eq(p->reward_max, 1.0);
  cr_assert_null(p->items);

  cr_assert_eq(o3m_config_n_parties(c), 3);
  const o3m_party *pmg = o3m_config_pmg(c);
  cr_assert_str_eq(pmg->name, "pmg");
  cr_assert_eq(pmg->role, O3M_ROLE_PMG);
  cr_assert_eq(pmg->dims, 0);
  cr_assert_eq(pmg->col0, -1);
  cr_assert_eq(pmg->slot, -1);
  cr_assert_eq(pmg->line, 9);
  cr_assert_str_eq(pmg->address, "127.0.0.1:50050");
  cr_assert_str_eq(pmg->cert, "/base/certs/pmg.pem");
  cr_assert_str_eq(pmg->key, "/base/certs/pmg.key");
  cr_assert_null(pmg->user_table);

  const o3m_party *shop = o3m_config_active(c);
  cr_assert_eq(shop, o3m_config_party(c, "shop"));
  cr_assert_eq(shop->role, O3M_ROLE_ACTIVE);
  cr_assert_eq(shop->dims, 6);
  cr_assert_eq(shop->col0, 0);
  cr_assert_eq(shop->slot, 0);
  cr_assert_str_eq(shop->user_table, "/base/data/shop_users.csv");
  cr_assert_null(shop->item_table);
  cr_assert_null(shop->state_dir);

  cr_assert_eq(o3m_config_n_passive(c), 1);
  const o3m_party *bank = o3m_config_passive(c, 0);
  cr_assert_eq(bank, o3m_config_party(c, "bank"));
  cr_assert_eq(bank->role, O3M_ROLE_PASSIVE);
  cr_assert_eq(bank->dims, 4);
  cr_assert_eq(bank->col0, 6);
  cr_assert_eq(bank->slot, 1);
  cr_assert_str_eq(bank->item_table, "/base/data/bank_items.csv");
  cr_assert_null(o3m_config_passive(c, 1));

  cr_assert_eq(o3m_config_n_column_parties(c), 2);
  cr_assert_eq(o3m_config_column_party(c, 0), shop);
  cr_assert_eq(o3m_config_column_party(c, 1), bank);
  cr_assert_null(o3m_config_column_party(c, 2));
  cr_assert_null(o3m_config_party(c, "nobody"));
  cr_assert_eq(o3m_config_party_at(c, 2), bank);
  cr_assert_null(o3m_config_party_at(c, 3));
  cr_assert_str_eq(o3m_role_name(bank->role), "passive");
  o3m_config_destroy(c);
}

/* The clients' shares of the active party: the pending share
 * defaults to pending_capacity / clients and may not promise more than the
 * table holds; the caps are range-checked like every key. */
Test(config, client_shares) {
  static const char clients[] = "\n[client a]\n[client b]\n[client c]\n";
  o3m_config *c = parse_ok(variant(NBASE + 1, NBASE + 1, clients), "/base");
  cr_assert_eq(o3m_config_policy(c)->pending_client_share, 33333);
  o3m_config_destroy(c);
  char text[8192];
  snprintf(text, sizeof text, "%s%s",
           line(8, "pending_capacity = 90\npending_client_share = 30\nclient_inflight_max = 4\n"
                   "batch_cost_max = 100"),
           clients);
  c = parse_ok(text, "/base");
  const o3m_config_policy_section *p = o3m_config_policy(c);
  cr_assert_eq(p->pending_client_share, 30);
  cr_assert_eq(p->client_inflight_max, 4);
  cr_assert_eq(p->batch_cost_max, 100);
  o3m_config_destroy(c);
  snprintf(text, sizeof text, "%s%s",
           line(8, "pending_capacity = 90\npending_client_share = 31"), clients);
  expect_error(text, "fed.conf:9:", "'pending_client_share'", "more than pending_capacity (90)");
  expect_error(line(8, "client_inflight_max = 0"), "fed.conf:8:", "'client_inflight_max'",
               "1..64");
  expect_error(line(8, "client_inflight_max = 65"), "fed.conf:8:", "'client_inflight_max'",
               NULL);
  expect_error(line(8, "batch_cost_max = 0"), "fed.conf:8:", "'batch_cost_max'", NULL);
  expect_error(line(8, "pending_client_share = -1"), "fed.conf:8:", "'pending_client_share'",
               NULL);
}

/* The local fallback model: fallback defaults to local, and
 * local_alpha / local_lambda to alpha / lambda; bad values are refused
 * naming the key. */
Test(config, fallback_and_local_model_keys) {
  o3m_config *c = parse_ok(variant(NBASE + 1, NBASE + 1, ""), "/base");
  const o3m_config_policy_section *p = o3m_config_policy(c);
  cr_assert_eq(o3m_config_fallback_local(c), 1);
  cr_assert_eq(p->local_alpha, p->alpha);
  cr_assert_eq(p->local_lambda, p->lambda);
  o3m_config_destroy(c);
  c = parse_ok(line(8, "alpha = 2\nlambda = 3"), "/base");
  cr_assert_eq(o3m_config_policy(c)->local_alpha, 2.0);
  cr_assert_eq(o3m_config_policy(c)->local_lambda, 3.0);
  o3m_config_destroy(c);
  c = parse_ok(line(8, "local_alpha = 0.25\nlocal_lambda = 4"), "/base");
  cr_assert_eq(o3m_config_policy(c)->local_alpha, 0.25);
  cr_assert_eq(o3m_config_policy(c)->local_lambda, 4.0);
  o3m_config_destroy(c);
  c = parse_ok(line(3, "ca = certs/ca.pem\nfallback = none"), "/base");
  cr_assert_eq(o3m_config_fallback_local(c), 0);
  o3m_config_destroy(c);
  expect_error(line(3, "ca = certs/ca.pem\nfallback = remote"), "fed.conf:4: key 'fallback'",
               "local|none", NULL);
  expect_error(line(8, "local_lambda = 0"), "fed.conf:8:", "'local_lambda'", NULL);
  expect_error(line(8, "local_alpha = -1"), "fed.conf:8:", "'local_alpha'", NULL);
}

/* [client NAME]: identities that may call the active party as clients. */
Test(config, client_sections) {
  o3m_config *c = parse_ok(variant(NBASE + 1, NBASE + 1,
                                   "\n[client frontend]\ncert = certs/fe.pem\n"
                                   "key = certs/fe.key\n[client ops]\n"),
                           "/base");
  cr_assert_eq(o3m_config_n_clients(c), 2);
  const o3m_client *fe = o3m_config_client_at(c, 0);
  cr_assert_str_eq(fe->name, "frontend");
  cr_assert_str_eq(fe->cert, "/base/certs/fe.pem");
  cr_assert_str_eq(fe->key, "/base/certs/fe.key");
  cr_assert_eq(fe->line, NBASE + 2);
  const o3m_client *ops = o3m_config_client(c, "ops");
  cr_assert_eq(ops, o3m_config_client_at(c, 1));
  cr_assert_null(ops->cert);
  cr_assert_null(ops->key);
  cr_assert_null(o3m_config_client_at(c, 2));
  cr_assert_null(o3m_config_client_at(c, -1));
  /* Parties are not clients, and clients are not parties. */
  cr_assert_null(o3m_config_client(c, "shop"));
  cr_assert_null(o3m_config_party(c, "ops"));
  cr_assert_null(o3m_config_client(c, NULL));
  cr_assert_eq(o3m_config_n_parties(c), 3);
  o3m_config_destroy(c);

  /* A client between parties does not change the column order. */
  c = parse_ok(line(22, "[client fe]"), "/base");
  cr_assert_eq(o3m_config_n_clients(c), 1);
  cr_assert_eq(o3m_config_column_party(c, 1), o3m_config_party(c, "bank"));
  o3m_config_destroy(c);

  /* None is fine too. */
  c = parse_ok(variant(NBASE + 1, NBASE + 1, ""), "/base");
  cr_assert_eq(o3m_config_n_clients(c), 0);
  cr_assert_null(o3m_config_client(c, "fe"));
  o3m_config_destroy(c);
}

Test(config, client_section_errors) {
  expect_error(variant(NBASE + 1, NBASE + 1, "[client]"), "fed.conf:30:", "needs a name",
               "[client NAME]");
  expect_error(variant(NBASE + 1, NBASE + 1, "[client f@e]"), "fed.conf:30:", "f@e",
               "client name");
  expect_error(variant(NBASE + 1, NBASE + 1, "[client fe]\n[client fe]"), "fed.conf:31:",
               "duplicate client 'fe'", "first at line 30");
  /* One name space for parties and clients, whichever comes first. */
  expect_error(variant(NBASE + 1, NBASE + 1, "[client bank]"), "fed.conf:30:",
               "client name 'bank'", "party at line 23");
  expect_error(line(8, "[client bank]"), "fed.conf:23:", "party name 'bank'",
               "client at line 8");
  expect_error(variant(NBASE + 1, NBASE + 1, "[client fe]\nrole = active"), "fed.conf:31:",
               "'role'", "[client fe]");
  expect_error(variant(NBASE + 1, NBASE + 1, "[client fe]\ncert = fe.pem"), "fed.conf:30:",
               "'cert' needs key 'key'", NULL);
  expect_error(variant(NBASE + 1, NBASE + 1, "[client fe]\nkey = fe.key"), "fed.conf:30:",
               "'key' needs key 'cert'", NULL);
  expect_error(variant(NBASE + 1, NBASE + 1, "[client fe]\ncert ="), "fed.conf:31:", "'cert'",
               "empty");
  expect_error(line(5, "[clients]"), "fed.conf:5:", "unknown section", "[client NAME]");
}

Test(config, relative_paths_without_base_dir_stay_as_written) {
  o3m_config *c = parse_ok(line(19, "user_table = /abs/users.csv"), NULL);
  cr_assert_str_eq(o3m_config_ca(c), "certs/ca.pem");
  cr_assert_str_eq(o3m_config_active(c)->user_table, "/abs/users.csv");
  cr_assert_str_eq(o3m_config_base_dir(c), ".");
  o3m_config_destroy(c);
  /* A base dir with a trailing slash gets no second slash. */
  c = parse_ok(line(19, "user_table = u.csv"), "rel/dir/");
  cr_assert_str_eq(o3m_config_active(c)->user_table, "rel/dir/u.csv");
  o3m_config_destroy(c);
}

Test(config, comments_whitespace_and_crlf) {
  const char *text =
      "# leading comment\r\n"
      "  [ federation ]  \r\n"
      "\td\t=\t10   ; trailing comment\r\n"
      "insecure = true\r\n"
      "[policy]\r\n"
      "algo=lints#not a comment: glued to the value\r\n";
  expect_error(text, "fed.conf:6:", "'algo'", "linucb|lints");

  text = "[federation]\r\n"
         "d = 3 # total\r\n"
         "insecure = true\r\n"
         "[policy]\r\n"
         "algo=lints\r\n"
         "model = shared\r\n"
         "[party  p]\r\n"
         "role = pmg\r\n"
         "address = h:1\r\n"
         "[party a]\r\n"
         "role = active\r\n"
         "address = h:2\r\n"
         "dims = 3\r\n"
         "cert = x#y.pem\r\n";
  o3m_config *c = parse_ok(text, NULL);
  cr_assert_eq(o3m_config_d(c), 3);
  cr_assert_str_eq(o3m_config_policy(c)->algo, "lints");
  cr_assert_str_eq(o3m_config_active(c)->cert, "x#y.pem");
  cr_assert_null(o3m_config_active(c)->key);
  cr_assert_null(o3m_config_pmg(c)->cert);
  cr_assert_null(o3m_config_ca(c));
  cr_assert_eq(o3m_config_n_passive(c), 0);
  o3m_config_destroy(c);
}

Test(config, all_policy_keys_parse) {
  const char *repl = "algo = lints\nmodel = disjoint\nitems = items.txt\n"
                     "alpha = 2\nlambda = 0.5\nv = 1e-3\n"
                     "seed = 18446744073709551615\nrefactor_every = 7\n"
                     "max_candidates = 20\npending_capacity = 9\n"
                     "pending_expiry_s = 5\nreward_min = -1.5\nreward_max = -1";
  o3m_config *c = parse_ok(variant(6, 7, repl), "/b");
  const o3m_config_policy_section *p = o3m_config_policy(c);
  cr_assert_str_eq(p->algo, "lints");
  cr_assert_str_eq(p->model, "disjoint");
  cr_assert_str_eq(p->items, "/b/items.txt");
  cr_assert_eq(p->alpha, 2.0);
  cr_assert_eq(p->lambda, 0.5);
  cr_assert_eq(p->v, 1e-3);
  cr_assert_eq(p->seed, UINT64_MAX);
  cr_assert_eq(p->refactor_every, 7);
  cr_assert_eq(p->max_candidates, 20);
  cr_assert_eq(p->pending_capacity, 9);
  cr_assert_eq(p->pending_expiry_s, 5);
  cr_assert_eq(p->reward_min, -1.5);
  cr_assert_eq(p->reward_max, -1.0);
  o3m_config_destroy(c);
}

Test(config, syntax_errors_name_line) {
  expect_error(line(5, "[polcy]"), "fed.conf:5:", "[polcy]", "unknown section");
  expect_error(line(5, "[policy"), "fed.conf:5:", "section header", NULL);
  expect_error(line(5, "[policy] x"), "fed.conf:5:", "section header", NULL);
  expect_error(line(23, "[party]"), "fed.conf:23:", "needs a name", NULL);
  expect_error(line(23, "[party b@nk]"), "fed.conf:23:", "b@nk", NULL);
  expect_error(line(4, "just some words"), "fed.conf:4:", "key = value", NULL);
  expect_error(line(4, "= 5"), "fed.conf:4:", "missing key", NULL);
  expect_error(line(4, "Deadline_ms = 5"), "fed.conf:4:", "Deadline_ms", NULL);
  expect_error(line(1, "d = 1\n[federation]"), "fed.conf:1:", "'d'", "outside");
  expect_error(line(4, "deadline_ms ="), "fed.conf:4:", "'deadline_ms'", "empty");
  expect_error(line(4, "deadline_ms =   # nothing"), "fed.conf:4:",
               "'deadline_ms'", "empty");
  expect_error(line(4, "x = \x01"), "fed.conf:4:", "control character", NULL);
}

Test(config, unknown_and_duplicate_keys_and_sections) {
  expect_error(line(4, "speed = 3"), "fed.conf:4:", "'speed'", "unknown key");
  expect_error(line(8, "beta = 3"), "fed.conf:8:", "'beta'", "[policy]");
  expect_error(line(22, "colour = red"), "fed.conf:22:", "'colour'", "[party shop]");
  expect_error(line(4, "d = 12"), "fed.conf:4:", "'d'", "first at line 2");
  expect_error(line(8, "[federation]"), "fed.conf:8:", "[federation]",
               "first at line 1");
  expect_error(line(23, "[party shop]"), "fed.conf:23:", "'shop'",
               "first at line 15");
  /* Keys of data parties are not valid for the pmg. */
  expect_error(line(14, "dims = 3"), "fed.conf:14:", "'dims'", "pmg");
  expect_error(line(14, "user_table = u.csv"), "fed.conf:14:", "'user_table'",
               "pmg");
}

Test(config, missing_required_keys) {
  expect_error(line(18, ""), "fed.conf:15:", "'dims'", "missing");
  expect_error(line(6, ""), "fed.conf:5:", "'algo'", "missing");
  expect_error(line(7, ""), "fed.conf:5:", "'model'", "missing");
  expect_error(line(2, ""), "fed.conf:1:", "'d'", "missing");
  expect_error(line(16, ""), "fed.conf:15:", "'role'", "missing");
  expect_error(line(25, ""), "fed.conf:23:", "'address'", "missing");
  expect_error(variant(1, 4, "\n\n\n"), "fed.conf:", "[federation]", "missing");
  expect_error(variant(5, 8, "\n\n\n"), "fed.conf:", "[policy]", "missing");
  /* TLS files unless insecure = true. */
  expect_error(line(3, ""), "fed.conf:1:", "'ca'", "insecure");
  expect_error(line(28, ""), "fed.conf:23:", "'cert'", "insecure");
  expect_error(line(13, ""), "fed.conf:9:", "'key'", "insecure");
  o3m_config *c = parse_ok(variant(3, 4, "insecure = true\n"), NULL);
  cr_assert_eq(o3m_config_insecure(c), 1);
  cr_assert_null(o3m_config_ca(c));
  o3m_config_destroy(c);
}

Test(config, metrics_clients_names_who_may_read_metrics) {
  o3m_config *c = parse_ok(line(4, "metrics_clients = prom1, prom2"), NULL);
  cr_assert_str_eq(o3m_config_metrics_clients(c), "prom1, prom2");
  o3m_config_destroy(c);
}

Test(config, missing_tls_files_are_accepted_with_insecure) {
  o3m_config *c =
      parse_ok(variant(3, 4, "insecure = true\n"), NULL);
  o3m_config_destroy(c);
  const char *t = variant(3, 4, "insecure = true\n");
  char text[8192];
  snprintf(text, sizeof text, "%s", t);
  /* Drop every cert and key line of the insecure text. */
  char out[8192];
  size_t n = 0;
  for (char *l = strtok(text, "\n"); l; l = strtok(NULL, "\n"))
    if (strncmp(l, "cert", 4) && strncmp(l, "key", 3))
      n += (size_t)snprintf(out + n, sizeof out - n, "%s\n", l);
  c = parse_ok(out, NULL);
  cr_assert_null(o3m_config_active(c)->cert);
  cr_assert_null(o3m_config_passive(c, 0)->key);
  o3m_config_destroy(c);
  expect_error(variant(3, 4, "insecure = yes\n"), "fed.conf:3:", "'insecure'",
               "true or false");
}

Test(config, bad_values_name_line_and_key) {
  expect_error(line(18, "dims = x"), "fed.conf:18:", "key 'dims'", "got 'x'");
  expect_error(line(18, "dims = 0"), "fed.conf:18:", "key 'dims'", "got '0'");
  expect_error(line(18, "dims = 6x"), "fed.conf:18:", "key 'dims'", "'6x'");
  expect_error(line(18, "dims = 6 7"), "fed.conf:18:", "key 'dims'", NULL);
  expect_error(line(18, "dims = +6"), "fed.conf:18:", "key 'dims'", NULL);
  expect_error(line(18, "dims = 99999"), "fed.conf:18:", "key 'dims'", "1..4096");
  expect_error(line(18, "dims = 99999999999999999999"), "fed.conf:18:",
               "key 'dims'", NULL);
  expect_error(line(2, "d = -3"), "fed.conf:2:", "key 'd'", NULL);
  expect_error(line(4, "deadline_ms = 1.5"), "fed.conf:4:", "key 'deadline_ms'",
               NULL);
  expect_error(line(8, "lambda = 0"), "fed.conf:8:", "key 'lambda'", "> 0");
  expect_error(line(8, "alpha = -1"), "fed.conf:8:", "key 'alpha'", ">= 0");
  expect_error(line(8, "alpha = nan"), "fed.conf:8:", "key 'alpha'", NULL);
  expect_error(line(8, "alpha = inf"), "fed.conf:8:", "key 'alpha'", NULL);
  expect_error(line(8, "alpha = 1e400"), "fed.conf:8:", "key 'alpha'", NULL);
  expect_error(line(8, "alpha = 0x10"), "fed.conf:8:", "key 'alpha'", NULL);
  expect_error(line(8, "v = 1,5"), "fed.conf:8:", "key 'v'", NULL);
  expect_error(line(8, "seed = -1"), "fed.conf:8:", "key 'seed'", NULL);
  expect_error(line(8, "seed = 18446744073709551616"), "fed.conf:8:",
               "key 'seed'", NULL);
  expect_error(line(8, "refactor_every = 0"), "fed.conf:8:", "'refactor_every'",
               NULL);
  expect_error(line(8, "max_candidates = 1000001"), "fed.conf:8:",
               "'max_candidates'", NULL);
  expect_error(line(8, "pending_capacity = 0"), "fed.conf:8:",
               "'pending_capacity'", NULL);
  expect_error(line(8, "pending_expiry_s = 0"), "fed.conf:8:",
               "'pending_expiry_s'", NULL);
  expect_error(line(6, "algo = ucb"), "fed.conf:6:", "key 'algo'", "got 'ucb'");
  expect_error(line(6, "algo = LinUCB"), "fed.conf:6:", "key 'algo'", NULL);
  expect_error(line(7, "model = both"), "fed.conf:7:", "key 'model'", NULL);
  expect_error(line(16, "role = boss"), "fed.conf:16:", "key 'role'", NULL);
  expect_error(line(17, "address = localhost"), "fed.conf:17:", "key 'address'",
               NULL);
  expect_error(line(17, "address = host:70000"), "fed.conf:17:",
               "key 'address'", NULL);
  expect_error(line(17, "address = :50051"), "fed.conf:17:", "key 'address'",
               NULL);
  expect_error(line(17, "address = host:"), "fed.conf:17:", "key 'address'",
               NULL);
  /* reward_min above the default reward_max names reward_min's line. */
  expect_error(line(8, "reward_min = 2"), "fed.conf:8:", "'reward_min'", NULL);
  expect_error(line(8, "reward_max = 0"), "fed.conf:8:", "'reward_max'", NULL);
  /* A very long value is cut, so the line and key always fit. */
  char longv[600];
  memset(longv, 'x', sizeof longv);
  memcpy(longv, "dims = ", 7);
  longv[sizeof longv - 1] = '\0';
  expect_error(line(18, longv), "fed.conf:18:", "key 'dims'", "...");
}

Test(config, items_only_with_disjoint) {
  expect_error(line(8, "items = items.txt"), "fed.conf:8:", "'items'",
               "disjoint");
  expect_error(line(7, "model = disjoint"), "fed.conf:5:", "'items'", "disjoint");
}

Test(config, structure_errors) {
  /* No pmg: its section becomes a comment block. */
  expect_error(variant(9, 13, "#\n#\n#\n#\n#"), "fed.conf:", "role = pmg", NULL);
  /* No active party. */
  expect_error(line(16, "role = passive"), "fed.conf:", "role = active", NULL);
  /* Two active parties: the second one's header line is named. */
  expect_error(line(24, "role = active"), "fed.conf:23:", "active",
               "'shop' at line 15");
  /* Two pmg parties. */
  expect_error(variant(NBASE + 1, NBASE + 1,
                       "[party pmg2]\nrole = pmg\naddress = h:9\n"
                       "cert = c\nkey = k"),
               "fed.conf:30:", "pmg", "'pmg' at line 9");
  /* The dims must add up to d; the message names d's line. */
  expect_error(line(26, "dims = 5"), "fed.conf:2:", "key 'd'", "11");
  expect_error(line(2, "d = 100"), "fed.conf:2:", "key 'd'", "10");
  /* A passive party needs a table. */
  expect_error(line(27, ""), "fed.conf:23:", "user_table", "item_table");
  /* Two parties on one address. */
  expect_error(line(25, "address = 127.0.0.1:50051"), "fed.conf:23:",
               "'address'", "'shop' (line 15)");
}

Test(config, active_party_without_tables_is_valid) {
  o3m_config *c = parse_ok(line(19, ""), NULL);
  cr_assert_null(o3m_config_active(c)->user_table);
  cr_assert_null(o3m_config_active(c)->item_table);
  o3m_config_destroy(c);
}

/* threads: per party, 1 when the key is not set (the daemons' --threads
 * overrides it). */
Test(config, threads_default_one) {
  o3m_config *c = parse_ok(line(30, "threads = 3"), NULL);
  cr_assert_eq(o3m_config_party(c, "bank")->threads, 3);
  cr_assert_eq(o3m_config_active(c)->threads, 1);
  cr_assert_eq(o3m_config_pmg(c)->threads, 1);
  o3m_config_destroy(c);
}

/* listen: where the party's own daemon binds; the address when not given,
 * validated like address, and (being local to one host) free to repeat
 * another party's listen, while the addresses must still differ. */
Test(config, listen_defaults_to_address) {
  o3m_config *c = parse_ok(variant(14, 14, "listen = 0.0.0.0:7000\n"), NULL);
  cr_assert_str_eq(o3m_config_pmg(c)->listen, "0.0.0.0:7000");
  cr_assert_str_eq(o3m_config_pmg(c)->address, "127.0.0.1:50050");
  cr_assert_str_eq(o3m_config_active(c)->listen, "127.0.0.1:50051");
  cr_assert_str_eq(o3m_config_party(c, "bank")->listen, "127.0.0.1:50052");
  o3m_config_destroy(c);
  c = parse_ok(variant(22, 22, "listen = 0.0.0.0:7000\n"), NULL);
  o3m_config_destroy(c);
  const char *twice = variant(14, 14, "listen = 0.0.0.0:7000\n");
  char both[8192];
  snprintf(both, sizeof both, "%slisten = 0.0.0.0:7000\n", twice);
  c = parse_ok(both, NULL);
  cr_assert_str_eq(o3m_config_party(c, "bank")->listen, "0.0.0.0:7000");
  cr_assert_str_eq(o3m_config_pmg(c)->listen, "0.0.0.0:7000");
  o3m_config_destroy(c);
  c = parse_ok(line(30, "listen = unix:/run/o3m/bank.sock"), NULL);
  cr_assert_str_eq(o3m_config_party(c, "bank")->listen, "unix:/run/o3m/bank.sock");
  o3m_config_destroy(c);
  expect_error(line(30, "listen = 0.0.0.0"), "fed.conf:30:", "key 'listen'", "host:port");
  expect_error(line(30, "listen = :7000"), "fed.conf:30:", "key 'listen'", NULL);
  expect_error(line(30, "listen = 0.0.0.0:0"), "fed.conf:30:", "key 'listen'", NULL);
  expect_error(line(30, "listen = 0.0.0.0:70000"), "fed.conf:30:", "key 'listen'", NULL);
  expect_error(variant(30, 30, "listen = 0.0.0.0:7000\nlisten = 0.0.0.0:7001"), "fed.conf:31:",
               "'listen'", NULL);
}

/* max_norm: per active or passive party, default O3M_CONFIG_DEFAULT_MAX_NORM,
 * strictly parsed (> 0, at most the limit, a finite number), refused for
 * the pmg. */
Test(config, max_norm_per_party) {
  o3m_config *c = parse_ok(variant(22, 22, "max_norm = 12.5\n"), NULL);
  cr_assert_eq(o3m_config_active(c)->max_norm, 12.5);
  cr_assert_eq(o3m_config_party(c, "bank")->max_norm, O3M_CONFIG_DEFAULT_MAX_NORM);
  cr_assert_eq(o3m_config_pmg(c)->max_norm, O3M_CONFIG_DEFAULT_MAX_NORM);
  o3m_config_destroy(c);
  c = parse_ok(line(30, "max_norm = 1e50"), NULL);
  cr_assert_eq(o3m_config_party(c, "bank")->max_norm, 1e50);
  o3m_config_destroy(c);
  expect_error(line(30, "max_norm = 0"), "fed.conf:30:", "'max_norm'", "got '0'");
  expect_error(line(30, "max_norm = -1"), "fed.conf:30:", "'max_norm'", "> 0");
  expect_error(line(30, "max_norm = 2e50"), "fed.conf:30:", "'max_norm'", "<= 1e+50");
  expect_error(line(30, "max_norm = inf"), "fed.conf:30:", "'max_norm'", "got 'inf'");
  expect_error(line(30, "max_norm = 1e400"), "fed.conf:30:", "'max_norm'", NULL);
  expect_error(line(30, "max_norm = 10x"), "fed.conf:30:", "'max_norm'", NULL);
  expect_error(line(14, "max_norm = 10"), "fed.conf:14:", "'max_norm'", "pmg");
}

/* whiten: per passive party, default false, a strict boolean,
 * refused for the pmg and for the active party (whitening hides a party's
 * columns from the AP; the AP's own columns need no hiding from itself, and
 * its features that come inside a Recommend could not be whitened alike). */
Test(config, whiten_per_party) {
  o3m_config *c = parse_ok(line(30, "whiten = true"), NULL);
  cr_assert_eq(o3m_config_party(c, "bank")->whiten, 1);
  cr_assert_eq(o3m_config_active(c)->whiten, 0);
  o3m_config_destroy(c);
  expect_error(variant(22, 22, "whiten = true\n"), "fed.conf:22:", "'whiten'", "active");
  expect_error(line(30, "whiten = yes please"), "fed.conf:30:", "'whiten'", NULL);
  expect_error(line(14, "whiten = true"), "fed.conf:14:", "'whiten'", "pmg");
}

Test(config, long_file_name_keeps_line_number) {
  char name[1000];
  memset(name, 'n', sizeof name);
  name[sizeof name - 1] = '\0';
  o3m_config *c = NULL;
  o3m_err e;
  int rc = o3m_config_parse_string(&c, line(18, "dims = x"), NULL, name, &e);
  cr_assert_eq(rc, O3M_EPARSE);
  cr_assert(strstr(e.msg, "nnn:18: key 'dims'"), "%s", e.msg);
}

Test(config, load_fixture_resolves_paths_against_its_directory) {
  const char *path = O3M_SOURCE_DIR "/tests/data/fed.conf";
  const char *dir = O3M_SOURCE_DIR "/tests/data";
  o3m_config *c = NULL;
  o3m_err e;
  int rc = o3m_config_load(&c, path, &e);
  cr_assert_eq(rc, O3M_OK, "%s", o3m_err_message(&e));
  cr_assert_str_eq(o3m_config_base_dir(c), dir);
  cr_assert_str_eq(o3m_config_name(c), path);
  char want[4096];
  snprintf(want, sizeof want, "%s/certs/ca.pem", dir);
  cr_assert_str_eq(o3m_config_ca(c), want);
  cr_assert_eq(o3m_config_deadline_ms(c), 150);

  const o3m_config_policy_section *p = o3m_config_policy(c);
  cr_assert_str_eq(p->algo, "lints");
  cr_assert_str_eq(p->model, "disjoint");
  snprintf(want, sizeof want, "%s/data/items.txt", dir);
  cr_assert_str_eq(p->items, want);
  cr_assert_eq(p->alpha, 1.5);
  cr_assert_eq(p->lambda, 2.0);
  cr_assert_eq(p->v, 0.25);
  cr_assert_eq(p->seed, UINT64_MAX);
  cr_assert_eq(p->refactor_every, 50);
  cr_assert_eq(p->max_candidates, 20);
  cr_assert_eq(p->pending_capacity, 500);
  cr_assert_eq(p->pending_expiry_s, 60);
  cr_assert_eq(p->reward_min, -1.0);
  cr_assert_eq(p->reward_max, 2.5);

  /* Column order is file order: bank (passive), shop (active), telco. */
  const o3m_party *bank = o3m_config_party(c, "bank");
  const o3m_party *shop = o3m_config_active(c);
  const o3m_party *telco = o3m_config_party(c, "telco");
  cr_assert_str_eq(shop->name, "shop");
  cr_assert_eq(bank->col0, 0);
  cr_assert_eq(bank->slot, 0);
  cr_assert_eq(shop->col0, 3);
  cr_assert_eq(shop->slot, 1);
  cr_assert_eq(telco->col0, 7);
  cr_assert_eq(telco->slot, 2);
  cr_assert_eq(o3m_config_n_passive(c), 2);
  cr_assert_eq(o3m_config_passive(c, 0), bank);
  cr_assert_eq(o3m_config_passive(c, 1), telco);
  cr_assert_eq(o3m_config_column_party(c, 1), shop);
  cr_assert_str_eq(telco->address, "unix:/tmp/o3m-telco.sock");

  snprintf(want, sizeof want, "%s/users.csv", dir);
  cr_assert_str_eq(bank->user_table, want);
  snprintf(want, sizeof want, "%s/state/shop", dir);
  cr_assert_str_eq(shop->state_dir, want);
  /* Absolute paths are kept. */
  cr_assert_str_eq(o3m_config_pmg(c)->key, "/etc/o3m/pmg.key");
  cr_assert_eq(o3m_config_n_clients(c), 1);
  snprintf(want, sizeof want, "%s/certs/frontend.pem", dir);
  cr_assert_str_eq(o3m_config_client(c, "frontend")->cert, want);
  /* Secure aggregation, the default: both passive parties' keys. */
  cr_assert_eq(o3m_config_secure_aggregation(c), 1);
  cr_assert(bank->has_agg_public && telco->has_agg_public);
  cr_assert_eq(bank->agg_public[0], 0x0f);
  cr_assert_eq(bank->agg_public[31], 0xf0);
  cr_assert_eq(telco->agg_public[10], 0xaa, "upper-case hex");
  snprintf(want, sizeof want, "%s/keys/bank.agg", dir);
  cr_assert_str_eq(bank->agg_secret, want);
  cr_assert_null(telco->agg_secret);
  o3m_config_destroy(c);
}

/* aggregation and the passive parties' agg_public / agg_secret. */
Test(config, secure_aggregation_keys) {
  static const char key[] =
      "agg_public = 00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
  static const char telco[] = "\n[party telco]\nrole = passive\naddress = 127.0.0.1:50053\n"
                              "dims = 1\nitem_table = t.csv\ncert = c\nkey = k\n";
  char text[8192];
  /* One passive party: secure is the default and needs no key. */
  o3m_config *c = parse_ok(variant(NBASE + 1, NBASE + 1, ""), "/base");
  cr_assert_eq(o3m_config_secure_aggregation(c), 1);
  cr_assert_eq(o3m_config_passive(c, 0)->has_agg_public, 0);
  o3m_config_destroy(c);
  /* Two passive parties (d = 11 with telco's column): both need agg_public. */
  snprintf(text, sizeof text, "%s%s", variant(2, 2, "d = 11"), telco);
  expect_error(text, "fed.conf:23: [party bank]", "missing required key 'agg_public'",
               "--agg-keygen");
  /* With per-party no key is needed. */
  snprintf(text, sizeof text, "%s%s",
           variant(2, 3, "d = 11\nca = certs/ca.pem\naggregation = per-party"), telco);
  c = parse_ok(text, "/base");
  cr_assert_eq(o3m_config_secure_aggregation(c), 0);
  o3m_config_destroy(c);
  /* Both keys given: loads, agg_secret resolved like every path. */
  snprintf(text, sizeof text, "%s%s%s\nagg_secret = keys/telco.agg\n",
           variant(2, 2, "d = 11"), key, telco);
  /* bank's key goes after its last line, telco's after its own. */
  size_t n = strlen(text);
  snprintf(text + n, sizeof text - n, "%s\n", key);
  c = parse_ok(text, "/base");
  cr_assert_str_eq(o3m_config_passive(c, 1)->agg_secret, "/base/keys/telco.agg");
  cr_assert_eq(o3m_config_passive(c, 1)->agg_public[1], 0x11);
  cr_assert_eq(o3m_config_passive(c, 0)->has_agg_public, 1);
  o3m_config_destroy(c);
  /* Bad values name the line and key; the keys are for passive parties only. */
  expect_error(line(3, "ca = certs/ca.pem\naggregation = plain"),
               "fed.conf:4: key 'aggregation'", "secure|per-party", NULL);
  expect_error(line(29, "key = certs/bank.key\nagg_public = 0011"),
               "fed.conf:30: key 'agg_public'", "64 hex digits", NULL);
  expect_error(line(29, "key = certs/bank.key\nagg_public = "
                    "zz112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"),
               "fed.conf:30: key 'agg_public'", NULL, NULL);
  expect_error(line(21, "key = certs/shop.key\nagg_secret = x"),
               "fed.conf:22: key 'agg_secret'", "role active", NULL);
}

Test(config, load_errors) {
  o3m_config *c = NULL;
  o3m_err e;
  cr_assert_eq(o3m_config_load(&c, "/nonexistent/fed.conf", &e), O3M_EIO);
  cr_assert(strstr(e.msg, "/nonexistent/fed.conf"), "%s", e.msg);
  cr_assert_null(c);

  char path[] = "/tmp/o3m_test_config_XXXXXX";
  int fd = mkstemp(path);
  cr_assert_geq(fd, 0);
  const char text[] = "[federation]\nd = 1\0\n";
  cr_assert_eq(write(fd, text, sizeof text - 1), (ssize_t)(sizeof text - 1));
  close(fd);
  cr_assert_eq(o3m_config_load(&c, path, &e), O3M_EPARSE);
  cr_assert(strstr(e.msg, ":2: NUL"), "%s", e.msg);
  /* A relative path in the file resolves against the file's directory. */
  FILE *f = fopen(path, "w");
  fputs(variant(19, 19, "user_table = rel/u.csv"), f);
  fclose(f);
  cr_assert_eq(o3m_config_load(&c, path, &e), O3M_OK, "%s", e.msg);
  cr_assert_str_eq(o3m_config_active(c)->user_table, "/tmp/rel/u.csv");
  o3m_config_destroy(c);
  unlink(path);
}

/* Random damage to a valid text must give either a config or an error whose
 * message starts with the file name; never a crash (run under ASan). */
Test(config, random_mutations_do_not_crash) {
  char base[8192];
  snprintf(base, sizeof base, "%s", variant(NBASE + 1, NBASE + 1, ""));
  size_t n = strlen(base);
  uint64_t s = 12345;
  int n_ok = 0, n_err = 0;
  static const char alphabet[] = "[]=#;\n \t.-0123456789abcdxyz_:/\r";
  for (int it = 0; it < 5000; it++) {
    char text[8192];
    memcpy(text, base, n + 1);
    int edits = 1 + it % 4;
    for (int k = 0; k < edits; k++) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      size_t pos = (size_t)(s >> 33) % n;
      char ch = alphabet[(s >> 20) % (sizeof alphabet - 1)];
      if ((s >> 10) % 5 == 0)
        text[pos] = '\0'; /* truncate */
      else
        text[pos] = ch;
    }
    o3m_config *c = NULL;
    o3m_err e;
    int rc = o3m_config_parse_string(&c, text, "/b", "fed.conf", &e);
    if (rc == O3M_OK) {
      n_ok++;
      cr_assert_not_null(o3m_config_active(c));
      cr_assert_not_null(o3m_config_pmg(c));
      int sum = 0;
      for (int i = 0; i < o3m_config_n_column_parties(c); i++)
        sum += o3m_config_column_party(c, i)->dims;
      cr_assert_eq(sum, o3m_config_d(c));
      o3m_config_destroy(c);
    } else {
      n_err++;
      cr_assert_eq(rc, O3M_EPARSE, "%s", e.msg);
      cr_assert_null(c);
      cr_assert(strncmp(e.msg, "fed.conf:", 9) == 0, "%s", e.msg);
    }
  }
  cr_assert_gt(n_ok, 0);
  cr_assert_gt(n_err, 0);
}

/* The annotated config example is what a new user reads first after the
 * quickstart (whose own config the test quickstart runs): it must load as it
 * stands (it once said d = 100 over two parties of 20 columns). The block is
 * the first ```ini fence of docs/federation.md. */
Test(config, the_readme_example_loads) {
  FILE *f = fopen(O3M_SOURCE_DIR "/docs/federation.md", "rb");
  cr_assert_not_null(f);
  static char buf[1 << 20];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  char *start = strstr(buf, "```ini\n");
  cr_assert_not_null(start, "docs/federation.md has no ```ini block");
  start += strlen("```ini\n");
  char *end = strstr(start, "```");
  cr_assert_not_null(end);
  *end = '\0';
  o3m_config *c = NULL;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert_eq(o3m_config_parse_string(&c, start, NULL, "docs/federation.md", &e), 0, "%s", e.msg);
  cr_assert_eq(o3m_config_d(c), 40);
  cr_assert_not_null(o3m_config_party(c, "bank"));
  o3m_config_destroy(c);
}

/* AP replicas ([federation] replication) and instances of a
 * passive party (the instances key, IPv4 literals only). */
Test(config, replication_and_instances) {
  o3m_config *c = parse_ok(line(3, "ca = certs/ca.pem\nreplication = nats\nnats_servers = "
                                   "nats://10.0.0.1:4222,nats://10.0.0.2:4222\nnats_replicas = 5"),
                           "/base");
  const o3m_config_replication *r = o3m_config_replication_of(c);
  cr_assert_str_eq(r->mode, "nats");
  cr_assert_str_eq(r->servers, "nats://10.0.0.1:4222,nats://10.0.0.2:4222");
  cr_assert_str_eq(r->stream, "O3M_REWARDS");
  cr_assert_str_eq(r->bucket, "O3M_DECISIONS");
  cr_assert_eq(r->replicas, 5);
  o3m_config_destroy(c);
  c = parse_ok(line(29, "key = certs/bank.key\ninstances = 127.0.0.1:50060,10.1.2.3:7"), "/base");
  cr_assert_str_eq(o3m_config_party(c, "bank")->instances, "127.0.0.1:50060,10.1.2.3:7");
  cr_assert_null(o3m_config_party(c, "shop")->instances);
  cr_assert_str_eq(o3m_config_replication_of(c)->mode, "none");
  o3m_config_destroy(c);
  expect_error(line(3, "ca = certs/ca.pem\nreplication = nats"), "nats_servers", NULL, NULL);
  expect_error(line(3, "ca = certs/ca.pem\nreplication = raft"), "none|nats", NULL, NULL);
  expect_error(line(29, "key = certs/bank.key\ninstances = bank2.example.org:7000"),
               "[party bank]", "IPv4", NULL);
  expect_error(line(29, "key = certs/bank.key\ninstances = 127.0.0.1:0"), "IPv4", NULL, NULL);
  expect_error(line(21, "key = certs/shop.key\ninstances = 127.0.0.1:7000"), "instances", NULL,
               NULL);
}

/* The replicas' NATS transport: TLS by default; plain text (nats_tls =
 * off) only when every NATS URL is on loopback. */
Test(config, nats_tls_off_only_on_loopback) {
  const char *rep = "ca = certs/ca.pem\nreplication = nats\n";
  char text[512];
  snprintf(text, sizeof text, "%snats_servers = nats://10.0.0.1:4222", rep);
  o3m_config *c = parse_ok(line(3, text), "/base");
  cr_assert_str_eq(o3m_config_replication_of(c)->tls, "on");
  cr_assert_str_eq(o3m_config_replication_of(c)->server_name, "nats");
  o3m_config_destroy(c);
  snprintf(text, sizeof text, "%snats_servers = nats://127.0.0.1:4222, localhost:4223,"
           "tls://[::1]:4224,127.8.9.10\nnats_tls = off\nnats_server_name = n.example", rep);
  c = parse_ok(line(3, text), "/base");
  cr_assert_str_eq(o3m_config_replication_of(c)->tls, "off");
  cr_assert_str_eq(o3m_config_replication_of(c)->server_name, "n.example");
  o3m_config_destroy(c);
  /* One remote URL is enough to refuse plain text, and is named. */
  const char *remote[][2] = {
      {"nats://127.0.0.1:4222,nats://10.0.0.2:4222", "'nats://10.0.0.2:4222'"},
      {"nats://127.evil.org:1", "'nats://127.evil.org:1'"},
      {"nats://user@127.0.0.1:4222", "'nats://user@127.0.0.1:4222'"},
      {"localhost.example.org:4222", "'localhost.example.org:4222'"}};
  for (size_t i = 0; i < sizeof remote / sizeof remote[0]; i++) {
    snprintf(text, sizeof text, "%snats_servers = %s\nnats_tls = off", rep, remote[i][0]);
    expect_error(line(3, text), "nats_tls = off", "loopback", remote[i][1]);
  }
  snprintf(text, sizeof text, "%snats_servers = nats://127.0.0.1:1\nnats_tls = maybe", rep);
  expect_error(line(3, text), "on|off", NULL, NULL);
}

/* [federation] rpc_*: the limits before a request is read. */
Test(config, rpc_limits) {
  o3m_config *c = parse_ok(variant(NBASE + 1, NBASE + 1, ""), "/base");
  const o3m_config_rpc_limits *l = o3m_config_rpc(c);
  cr_assert_eq(l->streams_per_connection, 64);
  cr_assert_eq(l->receive_timeout_ms, 10000);
  cr_assert_eq(l->receiving_per_identity, 0);
  cr_assert_eq(l->connections_per_identity, 64);
  o3m_config_destroy(c);

  c = parse_ok(line(4, "rpc_streams_per_connection = 16\nrpc_receive_timeout_ms = 0\n"
                       "rpc_receiving_per_identity = 12\nrpc_connections_per_identity = 2"),
               "/base");
  l = o3m_config_rpc(c);
  cr_assert_eq(l->streams_per_connection, 16);
  cr_assert_eq(l->receive_timeout_ms, 0);
  cr_assert_eq(l->receiving_per_identity, 12);
  cr_assert_eq(l->connections_per_identity, 2);
  o3m_config_destroy(c);

  expect_error(line(4, "rpc_streams_per_connection = 0"), "fed.conf:4:",
               "key 'rpc_streams_per_connection'", "1..4096");
  expect_error(line(4, "rpc_receive_timeout_ms = -1"), "fed.conf:4:",
               "key 'rpc_receive_timeout_ms'", NULL);
  expect_error(line(4, "rpc_receiving_per_identity = 255"), "fed.conf:4:",
               "key 'rpc_receiving_per_identity'", "0..254");
  expect_error(line(4, "rpc_connections_per_identity = 1025"), "fed.conf:4:",
               "key 'rpc_connections_per_identity'", "1..1024");
  expect_error(variant(11, 10, "rpc_connections_per_identity = 4"), "fed.conf:11:",
               "rpc_connections_per_identity", NULL);
}

/* [policy] unknown_items is serve by default; refuse is taken
 * when the active party has an item table and refused, naming the key and
 * the party, when it has none (its table is all the AP can tell an unknown
 * item by); another word is refused naming the choices. */
Test(config, unknown_items_key) {
  o3m_config *c = parse_ok(variant(NBASE + 1, NBASE + 1, ""), "/base");
  cr_assert_str_eq(o3m_config_policy(c)->unknown_items, "serve");
  o3m_config_destroy(c);
  c = parse_ok(variant(8, 19, "unknown_items = refuse\n\n[party pmg]\nrole = pmg\n"
                              "address = 127.0.0.1:50050\ncert = certs/pmg.pem\n"
                              "key = certs/pmg.key\n\n[party shop]\nrole = active\n"
                              "address = 127.0.0.1:50051\ndims = 6\n"
                              "item_table = data/shop_items.csv"),
               "/base");
  cr_assert_str_eq(o3m_config_policy(c)->unknown_items, "refuse");
  o3m_config_destroy(c);
  expect_error(line(8, "unknown_items = refuse"), "fed.conf:8: key 'unknown_items'",
               "refuse needs an item_table in [party shop], the active party", NULL);
  expect_error(line(8, "unknown_items = drop"), "fed.conf:8: key 'unknown_items'",
               "serve|refuse", NULL);
}
