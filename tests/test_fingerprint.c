/* test_fingerprint.c -- the federation fingerprint (crypto/o3m_fingerprint.h).
 *
 * BASE is a three-party federation (pmg, the active shop, the passive bank
 * and telco with agg_public keys). The canonical encoding of BASE is pinned
 * byte for byte, and its hash against BLAKE2b-256 computed independently
 * (Python's hashlib.blake2b(digest_size=32) of the same text). Then the
 * fingerprint must stay the same under every change of layout and of every
 * field left out on purpose, and change with each field it covers. */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "o3m_config.h"
#include "o3m_fingerprint.h"

#define KEY_BANK "1111111111111111111111111111111111111111111111111111111111111111"
#define KEY_TELCO "2222222222222222222222222222222222222222222222222222222222222222"

static const char BASE[] =
    "[federation]\n"
    "d = 10\n"
    "insecure = true\n"
    "[policy]\n"
    "algo = linucb\n"
    "model = shared\n"
    "[party pmg]\n"
    "role = pmg\n"
    "address = 127.0.0.1:50050\n"
    "[party shop]\n"
    "role = active\n"
    "address = 127.0.0.1:50051\n"
    "dims = 5\n"
    "[party bank]\n"
    "role = passive\n"
    "address = 127.0.0.1:50052\n"
    "dims = 3\n"
    "user_table = bank_users.csv\n"
    "agg_public = " KEY_BANK "\n"
    "[party telco]\n"
    "role = passive\n"
    "address = 127.0.0.1:50053\n"
    "dims = 2\n"
    "max_norm = 50\n"
    "item_table = telco_items.csv\n"
    "agg_public = " KEY_TELCO "\n";

/* The canonical encoding of BASE (version 2). */
static const char BASE_CANONICAL[] =
    "o3m-federation-fingerprint-v2\n"
    "d=10\n"
    "aggregation=secure\n"
    "max_candidates=1000\n"
    "pmg=pmg\n"
    "party=shop role=active dims=5 max_norm=10000 agg_public=- tables=-\n"
    "party=bank role=passive dims=3 max_norm=10000 agg_public=" KEY_BANK " tables=user\n"
    "party=telco role=passive dims=2 max_norm=50 agg_public=" KEY_TELCO " tables=item\n";

/* hashlib.blake2b(BASE_CANONICAL.encode(), digest_size=32).hexdigest() */
static const char BASE_FINGERPRINT[] =
    "547ba02196b81324aee9e7dd86a670c711ef5e512f9b04130a10a75f2f5289ff";

/* The fingerprint of text in hex; the test fails if text does not parse. */
static void fingerprint_of(const char *text, char hex[O3M_FINGERPRINT_HEX]) {
  o3m_config *c;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert(eq(int, o3m_config_parse_string(&c, text, NULL, "t.conf", &e), 0), "%s\n%s",
            o3m_err_message(&e), text);
  unsigned char fp[O3M_FINGERPRINT_BYTES];
  cr_assert(eq(int, o3m_fingerprint_compute(c, fp, &e), 0), "%s", o3m_err_message(&e));
  o3m_fingerprint_hex(fp, hex);
  o3m_config_destroy(c);
}

/* BASE with the first occurrence of from replaced by to (static buffer). */
static const char *edited(const char *from, const char *to) {
  static char buf[4096];
  const char *at = strstr(BASE, from);
  cr_assert(not(eq(ptr, (void *)at, NULL)), "'%s' is not in BASE", from);
  size_t head = (size_t)(at - BASE);
  int n = snprintf(buf, sizeof buf, "%.*s%s%s", (int)head, BASE, to, at + strlen(from));
  cr_assert(lt(int, n, (int)sizeof buf));
  return buf;
}

Test(fingerprint, canonical_encoding_and_hash_are_pinned) {
  o3m_config *c;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert(eq(int, o3m_config_parse_string(&c, BASE, NULL, "t.conf", &e), 0), "%s",
            o3m_err_message(&e));
  char *text;
  size_t len;
  cr_assert(eq(int, o3m_fingerprint_canonical(c, &text, &len, &e), 0), "%s",
            o3m_err_message(&e));
  cr_assert(eq(str, text, (char *)BASE_CANONICAL));
  cr_assert(eq(sz, len, strlen(BASE_CANONICAL)));
  free(text);
  unsigned char fp[O3M_FINGERPRINT_BYTES];
  cr_assert(eq(int, o3m_fingerprint_compute(c, fp, &e), 0));
  char hex[O3M_FINGERPRINT_HEX];
  o3m_fingerprint_hex(fp, hex);
  cr_assert(eq(str, hex, (char *)BASE_FINGERPRINT));
  /* A peer with the same fingerprint passes; the check names both when not. */
  cr_assert(eq(int, o3m_fingerprint_check(fp, sizeof fp, fp, "peer 'x'", &e), 0));
  o3m_config_destroy(c);
}

/* Layout and the fields left out on purpose: none of them may change it. */
Test(fingerprint, insensitive_to_layout_and_local_fields) {
  char base[O3M_FINGERPRINT_HEX], hex[O3M_FINGERPRINT_HEX];
  fingerprint_of(BASE, base);
  static const char reordered[] =
      "; the same federation, written by another hand\r\n"
      "[party pmg]\r\n"
      "  address=10.0.0.9:7000   # another host\r\n"
      "listen = 0.0.0.0:7000     # behind NAT: only its own copy says so\r\n"
      "role=pmg\r\n"
      "\r\n"
      "[client frontend]\r\n"
      "[party shop]\r\n"
      "dims=5\r\n"
      "role=active\r\n"
      "threads = 4\r\n"
      "address = unix:/run/o3m/shop.sock\r\n"
      "max_norm = 1e4\r\n"
      "state_dir = /var/lib/o3m\r\n"
      "[federation]\r\n"
      "insecure=true\r\n"
      "deadline_ms = 900\r\n"
      "d=10\r\n"
      "aggregation = secure\r\n"
      "[party bank]\r\n"
      "agg_public = " KEY_BANK "\r\n"
      "agg_secret = /etc/o3m/bank.agg\r\n"
      "whiten = true\r\n"
      "dims = 3\r\n"
      "role = passive\r\n"
      "address = 127.0.0.1:6000\r\n"
      "listen = 10.0.0.3:6000\r\n"
      "instances = 127.0.0.1:6001,127.0.0.1:6002\r\n"
      "user_table = elsewhere.csv\r\n"
      "[policy]\r\n"
      "model = disjoint\r\n"
      "items = items.txt\r\n"
      "algo = lints\r\n"
      "alpha = 2\r\n"
      "lambda = 3\r\n"
      "v = 0.5\r\n"
      "seed = 99\r\n"
      "reward_max = 5\r\n"
      "pending_capacity = 7\r\n"
      "max_candidates = 1000\r\n"
      "[party telco]\r\n"
      "item_table = telco_items.csv\r\n"
      "agg_public = " KEY_TELCO "\r\n"
      "max_norm = 5.0e1\r\n"
      "dims = 2\r\n"
      "role = passive\r\n"
      "address = 127.0.0.1:50053\r\n"
      "[client ops]\r\n";
  fingerprint_of(reordered, hex);
  cr_assert(eq(str, hex, base));
}

/* Each field the fingerprint covers changes it. */
Test(fingerprint, changes_with_each_covered_field) {
  char base[O3M_FINGERPRINT_HEX], hex[O3M_FINGERPRINT_HEX];
  fingerprint_of(BASE, base);
  static const struct {
    const char *what, *from, *to;
  } cases[] = {
      {"d and a party's dims", "d = 10\n", "d = 11\n"},
      {"aggregation", "insecure = true\n", "insecure = true\naggregation = per-party\n"},
      {"max_candidates", "model = shared\n", "model = shared\nmax_candidates = 999\n"},
      {"the pmg's name", "[party pmg]", "[party pmg2]"},
      {"a party's name", "[party bank]", "[party bank2]"},
      {"the active party's max_norm", "dims = 5\n", "dims = 5\nmax_norm = 10001\n"},
      {"a passive party's max_norm", "max_norm = 50\n", "max_norm = 50.000001\n"},
      {"a passive party's agg_public", "agg_public = " KEY_BANK,
       "agg_public = 1111111111111111111111111111111111111111111111111111111111111112"},
      /* The active party refuses an empty user by the parties' user tables
       * (ap_round), the passive party by its own: the copies must agree. */
      {"a passive party's table kind", "user_table = bank_users.csv\n",
       "item_table = bank_users.csv\n"},
      {"a passive party's extra table", "user_table = bank_users.csv\n",
       "user_table = bank_users.csv\nitem_table = bank_items.csv\n"},
      {"the active party's user table", "dims = 5\n", "dims = 5\nuser_table = shop.csv\n"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *text = edited(cases[i].from, cases[i].to);
    /* d = 11 needs one more column somewhere. */
    char buf[4096];
    if (!strcmp(cases[i].from, "d = 10\n")) {
      snprintf(buf, sizeof buf, "%s", text);
      char *dims = strstr(buf, "dims = 2\n");
      dims[7] = '3';
      text = buf;
    }
    fingerprint_of(text, hex);
    cr_assert(not(eq(str, hex, base)), "%s does not change the fingerprint", cases[i].what);
  }
}

/* The cases a malicious or careless config author could hand one party. */
Test(fingerprint, changes_with_column_order_roles_and_extra_party) {
  char base[O3M_FINGERPRINT_HEX], hex[O3M_FINGERPRINT_HEX];
  fingerprint_of(BASE, base);
  /* bank and telco swap places (and so columns). */
  char swapped[4096];
  const char *bank = strstr(BASE, "[party bank]"), *telco = strstr(BASE, "[party telco]");
  snprintf(swapped, sizeof swapped, "%.*s%s%.*s", (int)(bank - BASE), BASE, telco,
           (int)(telco - bank), bank);
  fingerprint_of(swapped, hex);
  cr_assert(not(eq(str, hex, base)), "the column order does not change it");
  /* An extra passive party (d grows with it). */
  char extra[4096];
  snprintf(extra, sizeof extra,
           "%s[party mallory]\nrole = passive\naddress = 127.0.0.1:50099\ndims = 1\n"
           "user_table = m.csv\nagg_public = "
           "3333333333333333333333333333333333333333333333333333333333333333\n",
           edited("d = 10\n", "d = 11\n"));
  fingerprint_of(extra, hex);
  cr_assert(not(eq(str, hex, base)), "an extra party does not change it");
  /* The active and a passive party trade roles, all else equal (without
   * keys: per-party aggregation does not require them). */
  static const char per_party[] =
      "[federation]\nd = 8\ninsecure = true\naggregation = per-party\n"
      "[policy]\nalgo = linucb\nmodel = shared\n"
      "[party pmg]\nrole = pmg\naddress = 127.0.0.1:50050\n"
      "[party shop]\nrole = %s\naddress = 127.0.0.1:50051\ndims = 5\nuser_table = s.csv\n"
      "[party bank]\nrole = %s\naddress = 127.0.0.1:50052\ndims = 3\nuser_table = b.csv\n";
  char roles[1024], before[O3M_FINGERPRINT_HEX];
  snprintf(roles, sizeof roles, per_party, "active", "passive");
  fingerprint_of(roles, before);
  snprintf(roles, sizeof roles, per_party, "passive", "active");
  fingerprint_of(roles, hex);
  cr_assert(not(eq(str, hex, before)), "the roles do not change it");
}
