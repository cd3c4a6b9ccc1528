/* o3m_party_block.c -- a column party's block: stored, or fetched, stored
 * and confirmed (see o3m_party_block.h).
 *
 * The fetch is one loop of two phases, 0 (Info and GetBlock) and 1
 * (ConfirmBlock), that share the budget and the backoff; a success moves to
 * the next phase and resets the backoff, so a confirmation that fails is
 * retried alone and the block it confirms is never fetched twice. */
#include "o3m_party_block.h"

#include <string.h>

#include "o3m_block_store.h"
#include "o3m_clock.h"
#include "o3m_log.h"
#include "o3m_rpc.h"
#include "o3m_wire.h"

/* A client for the PMG with a deadline of deadline_ms per call, pinned to
 * the PMG's name unless insecure. */
static int pmg_client(const o3m_party_block_options *o, int deadline_ms, o3m_rpc_client **c,
                      o3m_err *e) {
  const o3m_party *pmg = o3m_config_pmg(o->cfg);
  o3m_rpc_client_config cc;
  o3m_rpc_client_config_default(&cc);
  cc.target = pmg->address;
  cc.deadline_ms = deadline_ms;
  o3m_rpc_client_secure(&cc, o->insecure, o3m_rpc_tls_to_party(o->cfg, o->me, pmg));
  return o3m_rpc_client_create(c, &cc, e);
}

/* Phase 0, one attempt: Info, checked against the config (fp is its
 * fingerprint), then GetBlock sealed to a key pair drawn for it
 * (o3m_wire_get_block). */
static int fetch_once(const o3m_party_block_options *o, const unsigned char *fp, int deadline_ms,
                      o3m_block **out, o3m_err *e) {
  o3m_rpc_client *c;
  int rc = pmg_client(o, deadline_ms, &c, e);
  if (rc < 0) return rc;
  ProtobufCMessage *m;
  O3m__V1__InfoRequest ireq = O3M__V1__INFO_REQUEST__INIT;
  rc = o3m_rpc_client_call(c, O3M_PATH_PMG_INFO, &ireq.base, &o3m__v1__node_info__descriptor, &m,
                           e);
  if (rc == 0) {
    o3m_err ie;
    o3m_err_clear(&ie);
    rc = o3m_wire_info_check((const O3m__V1__NodeInfo *)m, O3M__V1__ROLE__ROLE_MASK_GENERATOR, -1,
                             o->part, fp, &ie);
    if (rc < 0)
      o3m_err_set(e, rc, "it disagrees with %s: %s", o3m_config_name(o->cfg),
                  o3m_err_message(&ie));
  }
  if (rc == 0)
    rc = o3m_wire_get_block(c, o->part, o->me->slot, fp, out, e);
  o3m_rpc_client_destroy(c);
  return rc;
}

/* Phase 1, one attempt: ConfirmBlock for mask_id. */
static int confirm_once(const o3m_party_block_options *o, int deadline_ms, uint64_t mask_id,
                        o3m_err *e) {
  o3m_rpc_client *c;
  int rc = pmg_client(o, deadline_ms, &c, e);
  if (rc < 0) return rc;
  O3m__V1__BlockReceipt r = O3M__V1__BLOCK_RECEIPT__INIT;
  r.party = (uint32_t)o->me->slot;
  r.mask_id = mask_id;
  ProtobufCMessage *m;
  rc = o3m_rpc_client_call(c, O3M_PATH_PMG_CONFIRM_BLOCK, &r.base, &o3m__v1__ack__descriptor, &m,
                           e);
  o3m_rpc_client_destroy(c);
  return rc;
}

/* Failures worth another try: the PMG is not up yet or was slow. */
static int transient(int rc) {
  return rc == O3M_EUNAVAILABLE || rc == O3M_EDEADLINE || rc == O3M_ERPC;
}

/* verb is "loaded" or "installed", how where the block came from. */
static void log_block(const o3m_block *b, const o3m_party_block_options *o, const char *verb,
                      const char *how) {
  o3m_log_info("%s the block of mask %016llx (%d x %d) %s", verb,
               (unsigned long long)o3m_block_mask_id(b), o->part->d, o->me->dims, how);
}

/* The stored block, if there is one. 0: *out loaded (and secret restored);
 * O3M_ENOTFOUND: nothing stored (fetch one); other codes refuse the start. */
static int load_stored(const o3m_party_block_options *o, const o3m_block_store_id *sid,
                       o3m_block **out, void *secret, size_t secret_len, o3m_err *e) {
  const char *dir = o->me->state_dir;
  unsigned char stored[O3M_BLOCK_STORE_SECRET_MAX];
  size_t slen = 0;
  int rc = o3m_block_store_load(dir, sid, out, stored, secret_len, &slen, e);
  if (rc == 0 && slen != secret_len) {
    o3m_block_destroy(*out);
    *out = NULL;
    rc = o3m_err_set(e, O3M_ECORRUPT, "%s/%s holds a secret of %zu bytes, not the %zu this "
                     "party keeps (its dummy-row key); delete the state_dir of every party to "
                     "join a new federation", dir, O3M_BLOCK_STORE_FILE, slen, secret_len);
  }
  if (rc == 0) {
    if (secret_len) memcpy(secret, stored, secret_len);
    log_block(*out, o, "loaded", secret_len ? "from state_dir (the mask generator is not asked); "
                                        "its secret restored"
                                      : "from state_dir (the mask generator is not asked)");
  } else if (rc == O3M_ECORRUPT || rc == O3M_EDIM) {
    o3m_log_error("the stored block in %s cannot be used. It cannot be fetched again either "
                  "(the mask generator forgets Q once every party has its block). Restore %s "
                  "from a backup, or, to join a new federation, stop every party, delete the "
                  "state_dir of every party and restart the mask generator.", dir,
                  O3M_BLOCK_STORE_FILE);
  }
  explicit_bzero(stored, sizeof stored);
  return rc;
}

int o3m_party_block_obtain(const o3m_party_block_options *o, o3m_block **out, void *secret,
                           size_t secret_len, o3m_err *e) {
  if (!out) return o3m_err_set(e, O3M_EINVAL, "o3m_party_block_obtain: out is NULL");
  *out = NULL;
  if (!o || !o->cfg || !o->me || !o->part || o->timeout_s < 1 ||
      secret_len > O3M_BLOCK_STORE_SECRET_MAX || (secret_len && !secret))
    return o3m_err_set(e, O3M_EINVAL, "o3m_party_block_obtain: bad arguments");
  const o3m_party *pmg = o3m_config_pmg(o->cfg);
  const char *dir = o->me->state_dir;
  o3m_block_store_id sid = {o->me->slot, o->me->col0, o->part->d, o->me->dims};
  if (dir) {
    int r = load_stored(o, &sid, out, secret, secret_len, e);
    if (r != O3M_ENOTFOUND) return r;
    o3m_err_clear(e);
    o3m_log_info("no stored block in %s: fetching it from the mask generator", dir);
  } else {
    o3m_log_warn("no state_dir: the block%s not kept; a restart of this party needs a mask "
                 "generator that still holds Q (--keep-mask)%s",
                 secret_len ? " and the dummy-row key are" : " is",
                 secret_len ? ", and its unknown ids then get new dummy rows and its tables "
                              "new epochs (the AP drops its item cache once)"
                            : "");
  }
  o3m_backoff bo;
  o3m_backoff_start(&bo, O3M_PARTY_BLOCK_DELAY0_MS, O3M_PARTY_BLOCK_DELAY_MAX_MS,
                    1000 * (int64_t)o->timeout_s);
  o3m_block *blk = NULL;
  unsigned char fp[O3M_FINGERPRINT_BYTES];
  int rc = o3m_fingerprint_compute(o->cfg, fp, e);
  if (rc < 0) return rc;
  for (int phase = 0, attempt = 1; phase < 2; attempt++) {
    int64_t left = o3m_backoff_left(&bo);
    int call_ms = left < O3M_PARTY_BLOCK_CALL_MS ? (int)(left > 1 ? left : 1)
                                                 : O3M_PARTY_BLOCK_CALL_MS;
    o3m_err ae;
    o3m_err_clear(&ae);
    rc = phase == 0 ? fetch_once(o, fp, call_ms, &blk, &ae)
                    : confirm_once(o, call_ms, o3m_block_mask_id(blk), &ae);
    /* Stored before it is confirmed (see the header). */
    if (rc == 0 && phase == 0 && dir &&
        (rc = o3m_block_store_save(dir, &sid, blk, secret, secret_len, e)) < 0)
      goto fail;
    if (rc == 0) {
      phase++;
      attempt = 0;
      o3m_backoff_reset(&bo);
      continue;
    }
    const char *what = phase == 0 ? "fetching the block" : "confirming the block";
    if (!transient(rc)) {
      o3m_err_set(e, rc, "%s from the mask generator %s at %s: %s", what, pmg->name,
                  pmg->address, o3m_err_message(&ae));
      goto fail;
    }
    if (o3m_backoff_left(&bo) <= 0) {
      o3m_err_set(e, rc, "%s from the mask generator %s at %s: gave up after %d s and %d "
                  "attempts; last error: %s", what, pmg->name, pmg->address, o->timeout_s,
                  attempt, o3m_err_message(&ae));
      goto fail;
    }
    int64_t wait = o3m_backoff_next(&bo);
    /* The first failure says why in full; later ones only repeat the code. */
    if (attempt == 1)
      o3m_log_warn("%s from %s at %s failed (%s: %s); retrying with backoff for up to %d s",
                   what, pmg->name, pmg->address, o3m_errname(rc), o3m_err_message(&ae),
                   o->timeout_s);
    else
      o3m_log_warn("%s, attempt %d: %s; retrying in %lld ms", what, attempt, o3m_errname(rc),
                   (long long)wait);
    if (o3m_clock_sleep_unless_stopped(wait, o->stop)) {
      rc = o3m_err_set(e, O3M_ESTATE, "stopped while %s", what);
      goto fail;
    }
  }
  log_block(blk, o, "installed", dir ? "from the mask generator, stored in state_dir and confirmed"
                            : "from the mask generator and confirmed");
  *out = blk;
  return 0;

fail:
  o3m_block_destroy(blk);
  return rc;
}
