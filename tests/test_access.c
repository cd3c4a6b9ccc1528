/* test_access.c -- the daemons' access policies (proto/o3m_access.h).
 *
 * A federation config with every kind of identity (pmg, an active and two
 * passive parties, two clients) and the AP's and a PP's rule tables: each
 * identity gets the right classes, each decision names who may call, and
 * create refuses tables that do not match the methods one to one. The
 * policies of the real daemons are exercised end to end in test_authz.c. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "o3m_access.h"
#include "o3m_wire.h"

static const char *const CONF =
    "[federation]\nd = 4\ninsecure = true\naggregation = per-party\n"
    "[policy]\nalgo = linucb\nmodel = shared\n"
    "[party pmg]\nrole = pmg\naddress = 127.0.0.1:1\n"
    "[party shop]\nrole = active\naddress = 127.0.0.1:2\ndims = 2\n"
    "[party bank]\nrole = passive\naddress = 127.0.0.1:3\ndims = 1\nuser_table = u.csv\n"
    "[client frontend]\n"
    "[party telco]\nrole = passive\naddress = 127.0.0.1:4\ndims = 1\nuser_table = u.csv\n"
    "[client ops]\n";

static int h_none(void *ctx, o3m_rpc_call *call, const ProtobufCMessage *req,
                  ProtobufCMessage *reply, o3m_err *e) {
  (void)ctx, (void)call, (void)req, (void)reply, (void)e;
  return 0;
}

static const o3m_rpc_method methods[] = {
    {"/t.S/A", &o3m__v1__info_request__descriptor, &o3m__v1__ack__descriptor, h_none},
    {"/t.S/B", &o3m__v1__info_request__descriptor, &o3m__v1__ack__descriptor, h_none},
};

static o3m_config *cfg;

static void load(void) {
  o3m_err e;
  cr_assert_eq(o3m_config_parse_string(&cfg, CONF, NULL, "t.conf", &e), 0, "%s",
               o3m_err_message(&e));
}

static void unload(void) { o3m_config_destroy(cfg); }

TestSuite(access, .init = load, .fini = unload);

Test(access, identities_get_their_classes) {
  static const o3m_access_rule rules[] = {{"/t.S/A", O3M_ACCESS_CLIENT}, {"/t.S/B", 0}};
  o3m_access *a;
  o3m_err e;
  cr_assert_eq(o3m_access_create(&a, cfg, "bank", rules, 2, methods, 2, &e), 0, "%s",
               o3m_err_message(&e));
  cr_assert_eq(o3m_access_classes(a, "pmg"), O3M_ACCESS_PMG);
  cr_assert_eq(o3m_access_classes(a, "shop"), O3M_ACCESS_ACTIVE);
  cr_assert_eq(o3m_access_classes(a, "bank"), O3M_ACCESS_PASSIVE | O3M_ACCESS_SELF);
  cr_assert_eq(o3m_access_classes(a, "telco"), O3M_ACCESS_PASSIVE);
  cr_assert_eq(o3m_access_classes(a, "frontend"), O3M_ACCESS_CLIENT);
  cr_assert_eq(o3m_access_classes(a, "ops"), O3M_ACCESS_CLIENT);
  cr_assert_eq(o3m_access_classes(a, "mallory"), 0);
  cr_assert_eq(o3m_access_classes(a, "Bank"), 0, "names are compared exactly");
  cr_assert_eq(o3m_access_classes(a, ""), 0);
  cr_assert_eq(o3m_access_classes(a, NULL), 0);
  o3m_access_destroy(a);
}

/* The config is only read during create: the policy keeps working after
 * the config is gone (the AP frees its config after start-up). */
Test(access, the_policy_outlives_its_config) {
  static const o3m_access_rule rules[] = {{"/t.S/A", O3M_ACCESS_CLIENT | O3M_ACCESS_SELF},
                                          {"/t.S/B", O3M_ACCESS_COLUMN}};
  o3m_access *a;
  o3m_err e;
  cr_assert_eq(o3m_access_create(&a, cfg, "shop", rules, 2, methods, 2, &e), 0);
  o3m_config_destroy(cfg);
  cfg = NULL;
  load();
  cr_assert_eq(o3m_access_classes(a, "shop"), O3M_ACCESS_ACTIVE | O3M_ACCESS_SELF);
  cr_assert_eq(o3m_access_classes(a, "ops"), O3M_ACCESS_CLIENT);
  o3m_access_destroy(a);
}

Test(access, rule_tables_must_match_the_methods) {
  o3m_access *a = (o3m_access *)1;
  o3m_err e;
  static const o3m_access_rule missing[] = {{"/t.S/A", O3M_ACCESS_CLIENT}};
  cr_assert_eq(o3m_access_create(&a, cfg, "shop", missing, 1, methods, 2, &e), O3M_EINVAL);
  cr_assert_null(a);
  cr_assert(strstr(e.msg, "method /t.S/B has no access rule"), "%s", e.msg);
  static const o3m_access_rule extra[] = {
      {"/t.S/A", 0}, {"/t.S/B", 0}, {"/t.S/C", O3M_ACCESS_CLIENT}};
  cr_assert_eq(o3m_access_create(&a, cfg, "shop", extra, 3, methods, 2, &e), O3M_EINVAL);
  cr_assert(strstr(e.msg, "/t.S/C names no method"), "%s", e.msg);
  static const o3m_access_rule twice[] = {{"/t.S/A", 0}, {"/t.S/A", 0}, {"/t.S/B", 0}};
  cr_assert_eq(o3m_access_create(&a, cfg, "shop", twice, 3, methods, 2, &e), O3M_EINVAL);
  cr_assert(strstr(e.msg, "listed twice"), "%s", e.msg);
  static const o3m_access_rule bad_bits[] = {{"/t.S/A", 1u << 9}, {"/t.S/B", 0}};
  cr_assert_eq(o3m_access_create(&a, cfg, "shop", bad_bits, 2, methods, 2, &e), O3M_EINVAL);
  static const o3m_access_rule ok[] = {{"/t.S/A", 0}, {"/t.S/B", 0}};
  cr_assert_eq(o3m_access_create(&a, cfg, "frontend", ok, 2, methods, 2, &e), O3M_EINVAL,
               "a client is not a daemon");
  cr_assert(strstr(e.msg, "'frontend' is not a party"), "%s", e.msg);
}

/* Decisions: a rule's classes against the caller's; a path without a rule
 * and an identity without a class get nothing. */
Test(access, decisions_and_their_messages) {
  static const o3m_access_rule rules[] = {{"/t.S/A", O3M_ACCESS_CLIENT},
                                          {"/t.S/B", O3M_ACCESS_ACTIVE | O3M_ACCESS_SELF}};
  o3m_access *a;
  o3m_err e;
  cr_assert_eq(o3m_access_create(&a, cfg, "bank", rules, 2, methods, 2, &e), 0);
  cr_assert_eq(o3m_access_authorize(a, NULL, "/t.S/A", "frontend", &e), 0);
  cr_assert_eq(o3m_access_authorize(a, NULL, "/t.S/B", "shop", &e), 0);
  cr_assert_eq(o3m_access_authorize(a, NULL, "/t.S/B", "bank", &e), 0);
  cr_assert_eq(o3m_access_refused(a), 0);
  o3m_err_clear(&e);
  cr_assert_eq(o3m_access_authorize(a, NULL, "/t.S/A", "shop", &e), O3M_EPERM);
  cr_assert(strstr(e.msg, "answered only to the configured clients"), "%s", e.msg);
  cr_assert_eq(o3m_access_authorize(a, NULL, "/t.S/B", "telco", &e), O3M_EPERM);
  cr_assert(strstr(e.msg, "only to the active party and this party itself"), "%s", e.msg);
  cr_assert_eq(o3m_access_authorize(a, NULL, "/t.S/B", "frontend", &e), O3M_EPERM);
  cr_assert_eq(o3m_access_authorize(a, NULL, "/t.S/A", "mallory", &e), O3M_EPERM);
  cr_assert_eq(o3m_access_authorize(a, NULL, "/t.S/A", NULL, &e), O3M_EPERM);
  cr_assert_eq(o3m_access_authorize(a, NULL, "/t.S/Z", "frontend", &e), O3M_EPERM);
  cr_assert(strstr(e.msg, "answered to nobody"), "%s", e.msg);
  cr_assert_eq(o3m_access_refused(a), 6);
  o3m_access_destroy(a);
}

/* A certificate of the CA that the config does not name (a new
 * front end whose section was forgotten) was told only who a method is
 * answered to. Now the refusal names the section to add, with its CN. A
 * known identity of the wrong role is not told to add one. */
Test(access, an_unknown_certificate_is_told_which_section_to_add) {
  static const o3m_access_rule rules[] = {{"/t.S/A", O3M_ACCESS_CLIENT},
                                          {"/t.S/B", O3M_ACCESS_ACTIVE | O3M_ACCESS_SELF}};
  o3m_access *a;
  o3m_err e;
  cr_assert_eq(o3m_access_create(&a, cfg, "bank", rules, 2, methods, 2, &e), 0);
  o3m_err_clear(&e);
  cr_assert_eq(o3m_access_authorize(a, NULL, "/t.S/A", "frontend2", &e), O3M_EPERM);
  cr_assert(strstr(e.msg, "answered only to the configured clients; certificate CN 'frontend2' "
                          "is none: add a section [client frontend2] to the federation config"),
            "%s", e.msg);
  cr_assert_eq(o3m_access_authorize(a, NULL, "/t.S/A", "shop", &e), O3M_EPERM);
  cr_assert_null(strstr(e.msg, "[client"), "%s", e.msg);
  cr_assert_eq(o3m_access_authorize(a, NULL, "/t.S/B", "mallory", &e), O3M_EPERM);
  cr_assert_null(strstr(e.msg, "[client"), "a client could not call it either: %s", e.msg);
  o3m_access_destroy(a);
}

/* The names of [federation] metrics_clients are the MONITOR class: one
 * the config has no other section for gets it alone, a client or a party
 * listed there keeps its classes and gains it. Blanks and empty names of
 * the list are skipped. With the default list, "monitor" is the one. */
Test(access, metrics_clients_are_monitors) {
  static const o3m_access_rule rules[] = {{"/t.S/A", O3M_ACCESS_CLIENT | O3M_ACCESS_OPERATOR},
                                          {"/t.S/B", O3M_ACCESS_CLIENT}};
  o3m_access *a;
  o3m_err e;
  cr_assert_eq(o3m_access_create(&a, cfg, "shop", rules, 2, methods, 2, &e), 0, "%s",
               o3m_err_message(&e));
  cr_assert_eq(o3m_access_classes(a, "monitor"), O3M_ACCESS_MONITOR);
  o3m_access_destroy(a);

  char text[1024];
  const char *head = "[federation]\n";
  cr_assert_eq(strncmp(CONF, head, strlen(head)), 0);
  snprintf(text, sizeof text, "%smetrics_clients = prom1 ,ops,, shop  \n%s", head,
           CONF + strlen(head));
  o3m_config *c2;
  cr_assert_eq(o3m_config_parse_string(&c2, text, NULL, "t.conf", &e), 0, "%s",
               o3m_err_message(&e));
  cr_assert_eq(o3m_access_create(&a, c2, "shop", rules, 2, methods, 2, &e), 0, "%s",
               o3m_err_message(&e));
  o3m_config_destroy(c2);
  cr_assert_eq(o3m_access_classes(a, "prom1"), O3M_ACCESS_MONITOR);
  cr_assert_eq(o3m_access_classes(a, "ops"), O3M_ACCESS_CLIENT | O3M_ACCESS_MONITOR);
  cr_assert_eq(o3m_access_classes(a, "shop"),
               O3M_ACCESS_ACTIVE | O3M_ACCESS_SELF | O3M_ACCESS_MONITOR);
  cr_assert_eq(o3m_access_classes(a, "monitor"), 0, "the list replaces the default");
  cr_assert_eq(o3m_access_classes(a, ""), 0);
  cr_assert_eq(o3m_access_authorize(a, NULL, "/t.S/A", "prom1", &e), 0);
  cr_assert_eq(o3m_access_authorize(a, NULL, "/t.S/B", "prom1", &e), O3M_EPERM);
  cr_assert_eq(o3m_access_authorize(a, NULL, "/t.S/A", "frontend", &e), 0);
  o3m_access_destroy(a);
}
