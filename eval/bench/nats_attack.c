/* nats_attack.c -- o3m-bench-nats-attack: a purge or delete of the reward stream against a
 * running AP replica cluster's JetStream, with a given identity (the
 * active party's certificate, as a thief of its key would connect).
 *
 * Reads the NATS servers, the stream's and the bucket's names and the CA
 * from --config ([federation] replication = nats), connects with --cert
 * and --key, and asks JetStream to purge the reward stream, then to delete
 * it, printing the stream's state before and after each:
 *   state: first=F last=L msgs=N      (or state: gone)
 *   purge: accepted | refused (NATS status)
 *   delete: accepted | refused (NATS status)
 * A request NATS refuses for want of permission is never answered, so it
 * ends after the 2 s API wait ("timeout"); one the stream's configuration
 * refuses is answered with JetStream's error. With --max-msgs N it asks
 * instead for a stream update that sets max_msgs = N (the administrative
 * identity may; JetStream then erases all but the last N records):
 *   max_msgs: accepted | refused (NATS status)
 * between two state lines. eval/bench/attack-nats.sh runs it before and
 * after, with the federation around it. */
#include <nats/nats.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ap_replica.h"
#include "o3m_cli.h"
#include "o3m_config.h"

enum { OPT_CONFIG, OPT_CERT, OPT_KEY, OPT_MAX_MSGS };
static const o3m_cli_option options[] = {
    [OPT_CONFIG] = {"config", "F", "the federation config (replication = nats)"},
    [OPT_CERT] = {"cert", "F", "the certificate to present to NATS (the active party's)"},
    [OPT_KEY] = {"key", "F", "its private key"},
    [OPT_MAX_MSGS] = {"max-msgs", "N", "instead of the purge and the delete: set max_msgs = N"},
    {NULL, NULL, NULL},
};
static const o3m_cli_spec spec = {
    "o3m-bench-nats-attack", "--config F --cert F --key F [--max-msgs N]",
    "Tries to purge and then delete the AP replicas' reward stream, and reports.", options,
    NULL};

static void state(jsCtx *js, const char *stream) {
  jsStreamInfo *si = NULL;
  jsErrCode jerr = 0;
  natsStatus s = js_GetStreamInfo(&si, js, stream, NULL, &jerr);
  if (s == NATS_OK)
    printf("state: first=%llu last=%llu msgs=%llu\n", (unsigned long long)si->State.FirstSeq,
           (unsigned long long)si->State.LastSeq, (unsigned long long)si->State.Msgs);
  else if (jerr == JSStreamNotFoundErr)
    printf("state: gone\n");
  else
    printf("state: unknown (%s)\n", natsStatus_GetText(s));
  jsStreamInfo_Destroy(si);
}

static void outcome(const char *what, natsStatus s, jsErrCode jerr) {
  if (s == NATS_OK) printf("%s: accepted\n", what);
  else printf("%s: refused (%s, JetStream error %d)\n", what, natsStatus_GetText(s), (int)jerr);
}

int main(int argc, char **argv) {
  const char *cfg_path = NULL, *cert = NULL, *key = NULL;
  long long max_msgs = 0;
  o3m_cli cl;
  o3m_cli_begin(&cl, &spec, argc, argv);
  const char *v;
  for (int i; (i = o3m_cli_next(&cl, &v)) != O3M_CLI_END;) {
    if (i == O3M_CLI_STOP) return cl.exit_code;
    if (i == OPT_CONFIG) cfg_path = v;
    else if (i == OPT_CERT) cert = v;
    else if (i == OPT_KEY) key = v;
    else if (o3m_cli_parse_long(v, 1, INT64_MAX, &max_msgs) < 0)
      return o3m_cli_usage_error(&spec, "--max-msgs '%s' is not a count of 1 or more", v);
  }
  if (!cfg_path || !cert || !key || o3m_cli_operands(&cl) < argc)
    return o3m_cli_usage_error(&spec, "give --config, --cert and --key, nothing else");
  o3m_err e;
  o3m_err_clear(&e);
  o3m_config *cfg;
  ap_replica_config rc;
  if (o3m_config_load(&cfg, cfg_path, &e) < 0 || ap_replica_config_of(&rc, cfg, cert, key, &e) < 0)
    return o3m_cli_fail(spec.prog, "%s", o3m_err_message(&e));
  char url[256];
  snprintf(url, sizeof url, "%s", rc.servers);
  char *comma = strchr(url, ',');
  if (comma) *comma = '\0';
  natsOptions *no = NULL;
  natsConnection *nc = NULL;
  jsCtx *js = NULL;
  natsStatus s = natsOptions_Create(&no);
  if (s == NATS_OK) s = natsOptions_SetURL(no, url);
  if (s == NATS_OK && rc.tls) s = natsOptions_SetSecure(no, true);
  if (s == NATS_OK && rc.tls) s = natsOptions_LoadCATrustedCertificates(no, rc.ca);
  if (s == NATS_OK && rc.tls) s = natsOptions_LoadCertificatesChain(no, cert, key);
  if (s == NATS_OK && rc.tls) s = natsOptions_SetExpectedHostname(no, rc.server_name);
  if (s == NATS_OK) s = natsConnection_Connect(&nc, no);
  jsOptions jo;
  jsOptions_Init(&jo);
  jo.Wait = 2000;
  if (s == NATS_OK) s = natsConnection_JetStream(&js, nc, &jo);
  int code = 0;
  if (s != NATS_OK) {
    code = o3m_cli_fail(spec.prog, "cannot connect to %s as %s: %s", url, cert,
                        natsStatus_GetText(s));
  } else if (max_msgs > 0) {
    state(js, rc.stream);
    jsStreamInfo *si = NULL, *ui = NULL;
    jsErrCode jerr = 0;
    s = js_GetStreamInfo(&si, js, rc.stream, NULL, &jerr);
    if (s == NATS_OK) {
      jsStreamConfig c = *si->Config;
      c.MaxMsgs = max_msgs;
      s = js_UpdateStream(&ui, js, &c, NULL, &jerr);
    }
    outcome("max_msgs", s, jerr);
    jsStreamInfo_Destroy(ui);
    jsStreamInfo_Destroy(si);
    state(js, rc.stream);
  } else {
    jsErrCode jerr = 0;
    state(js, rc.stream);
    outcome("purge", js_PurgeStream(js, rc.stream, NULL, &jerr), jerr);
    state(js, rc.stream);
    jerr = 0;
    outcome("delete", js_DeleteStream(js, rc.stream, NULL, &jerr), jerr);
    state(js, rc.stream);
  }
  jsCtx_Destroy(js);
  natsConnection_Destroy(nc);
  natsOptions_Destroy(no);
  o3m_config_destroy(cfg);
  return code;
}
