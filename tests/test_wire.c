/* test_wire.c -- the wire contract (proto/o3m.proto, proto/o3m_wire.h).
 *
 * Checks that the path constants are exactly the methods protoc-c generated
 * from o3m.proto, that every checker accepts a correct message and names
 * the first wrong field with the documented code, and that the masking
 * protocol survives the wire: blocks cut by the generator, packed, unpacked
 * and imported by the parties, then masked contexts packed, unpacked and
 * summed by the active participant, give Q x to rounding. */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <float.h>
#include <math.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "o3m.pb-c.h"
#include "o3m_bytes.h"
#include "o3m_mask.h"
#include "o3m_rng.h"
#include "o3m_wire.h"

/* The norm bound the reply checks apply: the config default. */
#define NB O3M_CONFIG_DEFAULT_MAX_NORM

#define has(msg, s) not(eq(ptr, strstr((msg), (s)), NULL))

/* ------------------------------------------------------------ paths */

static int path_in(const ProtobufCServiceDescriptor *sd, const char *path) {
  char buf[256];
  for (unsigned i = 0; i < sd->n_methods; i++) {
    snprintf(buf, sizeof buf, "/%s/%s", sd->name, sd->methods[i].name);
    if (strcmp(buf, path) == 0) return 1;
  }
  return 0;
}

Test(wire, paths_are_the_generated_methods) {
  const char *pmg[] = {O3M_PATH_PMG_INFO, O3M_PATH_PMG_GET_BLOCK, O3M_PATH_PMG_CONFIRM_BLOCK};
  const char *pp[] = {O3M_PATH_PASSIVE_INFO, O3M_PATH_PASSIVE_MASK, O3M_PATH_PASSIVE_MASK_BATCH,
                      O3M_PATH_PASSIVE_STATS, O3M_PATH_PASSIVE_RELOAD};
  const char *ap[] = {O3M_PATH_ACTIVE_INFO, O3M_PATH_ACTIVE_RECOMMEND, O3M_PATH_ACTIVE_REWARD,
                      O3M_PATH_ACTIVE_STATS, O3M_PATH_ACTIVE_RELOAD};
  for (size_t i = 0; i < 3; i++)
    cr_assert(path_in(&o3m__v1__mask_generator__descriptor, pmg[i]), "%s", pmg[i]);
  for (size_t i = 0; i < 5; i++)
    cr_assert(path_in(&o3m__v1__passive__descriptor, pp[i]), "%s", pp[i]);
  for (size_t i = 0; i < 5; i++)
    cr_assert(path_in(&o3m__v1__active__descriptor, ap[i]), "%s", ap[i]);
  /* And no method lacks a constant. */
  cr_assert(eq(uint, o3m__v1__mask_generator__descriptor.n_methods, 3));
  cr_assert(eq(uint, o3m__v1__passive__descriptor.n_methods, 5));
  cr_assert(eq(uint, o3m__v1__active__descriptor.n_methods, 5));
}

/* The privacy claim of the contract: nothing a passive participant
 * receives or sends can carry the chosen candidate, the score or the
 * reward. Pins the field lists of the Passive messages (MaskBatch's
 * included: reviewed, no such field). */
Test(wire, passive_messages_have_no_choice_or_reward_field) {
  const ProtobufCMessageDescriptor *ds[] = {
      &o3m__v1__mask_request__descriptor,       &o3m__v1__masked_contexts__descriptor,
      &o3m__v1__passive_stats__descriptor,      &o3m__v1__mask_batch_request__descriptor,
      &o3m__v1__mask_query__descriptor,         &o3m__v1__mask_batch_reply__descriptor,
      &o3m__v1__reload_request__descriptor,     &o3m__v1__reload_reply__descriptor};
  const char *allowed[] = {"round", "mask_id", "user", "items", "party", "rows", "cols",
                           "values", "requests", "lookups", "unknown_users",
                           "unknown_items", "errors", "item_lookups", "queries",
                           /* Protocol 4, reviewed: a fresh random value per batch drawn
                            * apart from any decision id, and the masked words. */
                           "nonce", "scale", "masked",
                           /* Table reloads, reviewed: counters and a time the
                            * party's own operator reads (Stats, Reload). */
                           "reloads", "reloads_refused", "last_reload_ms", "refused",
                           "users",
                           /* Protocol 6, reviewed: the factored form's flag,
                            * and the hashes of the party's whole tables (public). */
                           "factored", "user_epoch", "item_epoch"};
  /* Every message the Passive service's methods take or give is listed. */
  const ProtobufCServiceDescriptor *sd = &o3m__v1__passive__descriptor;
  for (unsigned m = 0; m < sd->n_methods; m++) {
    if (strcmp(sd->methods[m].name, "Info") == 0) continue; /* NodeInfo: public by design */
    int in = 0, out = 0;
    for (size_t i = 0; i < sizeof ds / sizeof ds[0]; i++) {
      in |= sd->methods[m].input == ds[i] || sd->methods[m].input == &o3m__v1__stats_request__descriptor;
      out |= sd->methods[m].output == ds[i];
    }
    cr_assert(in && out, "Passive/%s: its messages are not in the reviewed list",
              sd->methods[m].name);
  }
  for (size_t i = 0; i < sizeof ds / sizeof ds[0]; i++)
    for (unsigned f = 0; f < ds[i]->n_fields; f++) {
      int ok = 0;
      for (size_t a = 0; a < sizeof allowed / sizeof allowed[0]; a++)
        ok |= strcmp(ds[i]->fields[f].name, allowed[a]) == 0;
      cr_assert(ok, "%s has a field %s that is not in the reviewed list", ds[i]->name,
                ds[i]->fields[f].name);
    }
}

/* ------------------------------------------------------------ matrices */

Test(wire, check_matrix_codes) {
  double v[15];
  for (int i = 0; i < 15; i++) v[i] = i * 0.5;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert(eq(int, o3m_wire_check_matrix("M", 3, 5, 15, v, 3, 5, &e), 0));
  cr_assert(eq(int, o3m_wire_check_matrix("M", 0, 5, 0, v, 3, 5, &e), O3M_ERANGE));
  cr_assert(eq(int, o3m_wire_check_matrix("M", 3, 6, 18, v, 3, 5, &e), O3M_ERANGE));
  cr_assert(eq(int, o3m_wire_check_matrix("M", 3, 5, 14, v, 3, 5, &e), O3M_EDIM));
  cr_assert(has(e.msg, "14 values for 3 x 5"), "%s", e.msg);
  cr_assert(eq(int, o3m_wire_check_matrix("M", 3, 5, 15, NULL, 3, 5, &e), O3M_EINVAL));
  v[7] = NAN;
  cr_assert(eq(int, o3m_wire_check_matrix("M", 3, 5, 15, v, 3, 5, &e), O3M_ENONFINITE));
  cr_assert(has(e.msg, "row 1, col 2"), "%s", e.msg);
  v[7] = -INFINITY;
  cr_assert(eq(int, o3m_wire_check_matrix("M", 3, 5, 15, v, 3, 5, &e), O3M_ENONFINITE));
  /* rows * cols overflowing 32 bits must not wrap to a small count. */
  cr_assert(eq(int, o3m_wire_check_matrix("M", 65536, 65536, 0, v, 1u << 31, 1u << 31, &e),
               O3M_EDIM));
}

/* ------------------------------------------------------------ NodeInfo */

static o3m_partition part(const char *text) {
  o3m_partition p;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert(eq(int, o3m_partition_parse(&p, text, &e), 0), "%s", o3m_err_message(&e));
  return p;
}

/* Packs m and unpacks it again with the default allocator. */
static ProtobufCMessage *through_wire(const ProtobufCMessage *m) {
  size_t n = protobuf_c_message_get_packed_size(m);
  uint8_t *buf = malloc(n ? n : 1);
  cr_assert(not(eq(ptr, buf, NULL)));
  cr_assert(eq(sz, protobuf_c_message_pack(m, buf), n));
  ProtobufCMessage *out = protobuf_c_message_unpack(m->descriptor, NULL, n, buf);
  free(buf);
  cr_assert(not(eq(ptr, out, NULL)));
  return out;
}

/* Two federation fingerprints: fp_other differs in its first byte (shown
 * in messages) and in its last one (which they do not show). */
static const unsigned char fp[O3M_FINGERPRINT_BYTES] = {0xab, 0xcd, 1, 2, 3, 4, 5, 6, 7, 8, 9};
static const unsigned char fp_other[O3M_FINGERPRINT_BYTES] = {
    0xee, 0xcd, 1, 2, 3, 4, 5, 6, 7, 8, 9, [O3M_FINGERPRINT_BYTES - 1] = 1};
static const unsigned char fp_last[O3M_FINGERPRINT_BYTES] = {
    0xab, 0xcd, 1, 2, 3, 4, 5, 6, 7, 8, 9, [O3M_FINGERPRINT_BYTES - 1] = 1};

Test(wire, node_info_round_trip_and_mismatches) {
  o3m_partition p = part("4,3,2");
  uint32_t dims[O3M_MAX_PARTIES];
  O3m__V1__NodeInfo info = O3M__V1__NODE_INFO__INIT;
  o3m_wire_info_fill(&info, O3M__V1__ROLE__ROLE_PASSIVE, 2, &p, dims, 77, "pp-b", fp);
  O3m__V1__NodeInfo *got = (O3m__V1__NodeInfo *)through_wire(&info.base);
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert(eq(int, o3m_wire_info_check(got, O3M__V1__ROLE__ROLE_PASSIVE, 2, &p, fp, &e), 0), "%s",
            o3m_err_message(&e));
  cr_assert(eq(int, o3m_wire_info_check(got, O3M__V1__ROLE__ROLE_PASSIVE, -1, &p, fp, &e), 0));
  cr_assert(eq(u64, got->mask_id, 77));
  cr_assert(eq(str, got->name, "pp-b"));
  cr_assert(eq(sz, got->fingerprint.len, O3M_FINGERPRINT_BYTES));

  /* Another fingerprint: refused with both named and the way out. */
  cr_assert(eq(int, o3m_wire_info_check(got, O3M__V1__ROLE__ROLE_PASSIVE, 2, &p, fp_other, &e),
               O3M_ESTATE));
  cr_assert(has(e.msg, "federation fingerprint mismatch: peer has abcd010203040506..."),
            "%s", e.msg);
  cr_assert(has(e.msg, "this party eecd010203040506..."), "%s", e.msg);
  cr_assert(has(e.msg, "compare the configs"), "%s", e.msg);
  /* Every byte counts, also those the message does not show. */
  cr_assert(eq(int, o3m_wire_info_check(got, O3M__V1__ROLE__ROLE_PASSIVE, 2, &p, fp_last, &e),
               O3M_ESTATE));
  /* None at all (a protocol-4 build), or one of the wrong length. */
  got->fingerprint.len = 0;
  cr_assert(eq(int, o3m_wire_info_check(got, O3M__V1__ROLE__ROLE_PASSIVE, 2, &p, fp, &e),
               O3M_ESTATE));
  cr_assert(has(e.msg, "sends no federation fingerprint"), "%s", e.msg);
  got->fingerprint.len = O3M_FINGERPRINT_BYTES - 1;
  cr_assert(eq(int, o3m_wire_info_check(got, O3M__V1__ROLE__ROLE_PASSIVE, 2, &p, fp, &e),
               O3M_ESTATE));
  cr_assert(has(e.msg, "(malformed)"), "%s", e.msg);
  got->fingerprint.len = O3M_FINGERPRINT_BYTES;

  cr_assert(eq(int, o3m_wire_info_check(got, O3M__V1__ROLE__ROLE_ACTIVE, 2, &p, fp, &e), O3M_ESTATE));
  cr_assert(has(e.msg, "passive participant"), "%s", e.msg);
  cr_assert(eq(int, o3m_wire_info_check(got, O3M__V1__ROLE__ROLE_PASSIVE, 1, &p, fp, &e), O3M_ESTATE));
  o3m_partition q = part("4,2,3");
  cr_assert(eq(int, o3m_wire_info_check(got, O3M__V1__ROLE__ROLE_PASSIVE, 2, &q, fp, &e), O3M_EDIM));
  cr_assert(has(e.msg, "dims[1]"), "%s", e.msg);
  o3m_partition r = part("4,3,2,1");
  cr_assert(eq(int, o3m_wire_info_check(got, O3M__V1__ROLE__ROLE_PASSIVE, 2, &r, fp, &e), O3M_EDIM));
  got->protocol = O3M_PROTOCOL_VERSION + 1;
  cr_assert(eq(int, o3m_wire_info_check(got, O3M__V1__ROLE__ROLE_PASSIVE, 2, &p, fp, &e), O3M_ESTATE));
  cr_assert(has(e.msg, "protocol"), "%s", e.msg);
  protobuf_c_message_free_unpacked(&got->base, NULL);
}

/* ------------------------------------------------------------ blocks */

Test(wire, block_request_check) {
  o3m_partition p = part("4,3,2");
  O3m__V1__BlockRequest r = O3M__V1__BLOCK_REQUEST__INIT;
  o3m_err e;
  o3m_err_clear(&e);
  o3m_seal_key *k;
  cr_assert(eq(int, o3m_seal_key_create(&k), 0));
  o3m_wire_block_request_fill(&r, &p, 1, k, fp);
  cr_assert(eq(u32, r.dim, 9));
  cr_assert(eq(u32, r.party_dim, 3));
  cr_assert(eq(int, o3m_wire_block_request_check(&r, &p, fp, &e), 0), "%s", o3m_err_message(&e));
  /* A party whose config differs from the generator's gets no block. */
  cr_assert(eq(int, o3m_wire_block_request_check(&r, &p, fp_other, &e), O3M_ESTATE));
  cr_assert(has(e.msg, "fingerprint mismatch: BlockRequest: party 1 has abcd"), "%s", e.msg);
  r.fingerprint.len = 0;
  cr_assert(eq(int, o3m_wire_block_request_check(&r, &p, fp, &e), O3M_ESTATE));
  cr_assert(has(e.msg, "sends no federation fingerprint"), "%s", e.msg);
  r.fingerprint.len = O3M_FINGERPRINT_BYTES;
  /* No key, or not an X25519 key: the block could only go out in the clear. */
  r.public_key.len = 0;
  cr_assert(eq(int, o3m_wire_block_request_check(&r, &p, fp, &e), O3M_EINVAL));
  cr_assert(has(e.msg, "public_key has 0 bytes"), "%s", e.msg);
  r.public_key.len = O3M_SEAL_KEY_BYTES - 1;
  cr_assert(eq(int, o3m_wire_block_request_check(&r, &p, fp, &e), O3M_EINVAL));
  r.public_key.len = O3M_SEAL_KEY_BYTES;
  o3m_seal_key_destroy(k);
  r.party = 3;
  cr_assert(eq(int, o3m_wire_block_request_check(&r, &p, fp, &e), O3M_ERANGE));
  r.party = 1, r.dim = 8;
  cr_assert(eq(int, o3m_wire_block_request_check(&r, &p, fp, &e), O3M_EDIM));
  r.dim = 9, r.party_dim = 2;
  cr_assert(eq(int, o3m_wire_block_request_check(&r, &p, fp, &e), O3M_EDIM));
  cr_assert(has(e.msg, "d_j = 3"), "%s", e.msg);
}

typedef struct fed {
  o3m_partition p;
  o3m_rng *rng;
  o3m_mask *mask;
  o3m_seal_key *key; /* the fetching party's key pair */
} fed;

static void fed_init(fed *f, const char *dims, uint64_t seed) {
  f->p = part(dims);
  cr_assert(eq(int, o3m_rng_create_seeded_insecure(&f->rng, seed), 0));
  cr_assert(eq(int, o3m_mask_generate(&f->mask, f->p.d, f->rng), 0));
  cr_assert(eq(int, o3m_seal_key_create(&f->key), 0));
}

static void fed_fini(fed *f) {
  o3m_seal_key_destroy(f->key);
  o3m_mask_destroy(f->mask);
  o3m_rng_destroy(f->rng);
}

/* The generator's side: cut party j's block, seal it to f->key and fill a
 * Block message. */
static O3m__V1__Block *block_over_wire(fed *f, int j) {
  o3m_block *b;
  cr_assert(eq(int, o3m_block_from_mask(&b, f->mask, f->p.offset[j], f->p.dims[j]), 0));
  size_t n = o3m_seal_block_bytes(f->p.d, f->p.dims[j]);
  unsigned char *scratch = malloc(o3m_block_le_bytes(f->p.d, f->p.dims[j]));
  unsigned char *sealed = malloc(n);
  cr_assert(scratch && sealed);
  cr_assert(eq(int, o3m_seal_block(b, o3m_seal_key_public(f->key), scratch, sealed), 0));
  for (size_t i = 0; i < o3m_block_le_bytes(f->p.d, f->p.dims[j]); i++)
    cr_assert(eq(u8, scratch[i], 0), "the seal's scratch is not wiped at byte %zu", i);
  O3m__V1__Block msg = O3M__V1__BLOCK__INIT;
  o3m_wire_block_fill(&msg, b, j, &f->p, sealed, n);
  cr_assert(eq(sz, msg.n_data, 0), "a value went into the message in the clear");
  O3m__V1__Block *got = (O3m__V1__Block *)through_wire(&msg.base);
  o3m_block_destroy(b);
  free(scratch);
  free(sealed);
  return got;
}

Test(wire, block_import_is_bit_exact_and_checks_every_field) {
  fed f;
  fed_init(&f, "2,3,1", 11);
  O3m__V1__Block *msg = block_over_wire(&f, 1);
  o3m_err e;
  o3m_err_clear(&e);
  o3m_block *b;
  cr_assert(eq(int, o3m_wire_block_import(&b, msg, &f.p, 1, f.key, &e), 0), "%s",
            o3m_err_message(&e));
  cr_assert(eq(u64, o3m_block_mask_id(b), o3m_mask_id(f.mask)));
  const double *Q = o3m_mask_matrix(f.mask);
  const double *B = o3m_block_data(b);
  for (int r = 0; r < 6; r++)
    for (int c = 0; c < 3; c++)
      cr_assert(eq(dbl, B[r * 3 + c], Q[r * 6 + 2 + c]), "r=%d c=%d", r, c);
  o3m_block_destroy(b);

  b = (o3m_block *)&e;
  cr_assert(eq(int, o3m_wire_block_import(&b, msg, &f.p, 2, f.key, &e), O3M_EINVAL));
  cr_assert(eq(ptr, b, NULL));
  msg->col0 = 0;
  cr_assert(eq(int, o3m_wire_block_import(&b, msg, &f.p, 1, f.key, &e), O3M_EDIM));
  cr_assert(has(e.msg, "col0"), "%s", e.msg);
  msg->col0 = 2;
  msg->cols = 2;
  cr_assert(eq(int, o3m_wire_block_import(&b, msg, &f.p, 1, f.key, &e), O3M_EDIM));
  msg->cols = 3;
  msg->sealed.len -= 1;
  cr_assert(eq(int, o3m_wire_block_import(&b, msg, &f.p, 1, f.key, &e), O3M_EDIM));
  cr_assert(has(e.msg, "sealed has"), "%s", e.msg);
  msg->sealed.len += 1;
  /* One bit flipped anywhere: the tag fails and nothing is imported. */
  msg->sealed.data[60] ^= 1;
  cr_assert(eq(int, o3m_wire_block_import(&b, msg, &f.p, 1, f.key, &e), O3M_ECORRUPT));
  cr_assert(eq(ptr, b, NULL));
  msg->sealed.data[60] ^= 1;
  /* Another key cannot open it. */
  o3m_seal_key *other;
  cr_assert(eq(int, o3m_seal_key_create(&other), 0));
  cr_assert(eq(int, o3m_wire_block_import(&b, msg, &f.p, 1, other, &e), O3M_ECORRUPT));
  cr_assert(has(e.msg, "another key"), "%s", e.msg);
  o3m_seal_key_destroy(other);
  /* Values in the clear (what a protocol-2 generator sends) are refused. */
  double clear[18] = {0};
  msg->n_data = 18;
  msg->data = clear;
  cr_assert(eq(int, o3m_wire_block_import(&b, msg, &f.p, 1, f.key, &e), O3M_ESTATE));
  cr_assert(has(e.msg, "in the clear"), "%s", e.msg);
  msg->n_data = 0;
  msg->data = NULL;
  uint64_t id = msg->mask_id;
  msg->mask_id = 0;
  cr_assert(eq(int, o3m_wire_block_import(&b, msg, &f.p, 1, f.key, &e), O3M_EMASK));
  msg->mask_id = id;
  cr_assert(eq(int, o3m_wire_block_import(&b, msg, &f.p, 1, f.key, &e), 0), "%s",
            o3m_err_message(&e));
  o3m_block_destroy(b);
  protobuf_c_message_free_unpacked(&msg->base, NULL);

  /* A NaN sealed properly is still refused after opening. */
  unsigned char plain[6 * 3 * 8], box[sizeof plain + O3M_SEAL_OVERHEAD];
  for (int i = 0; i < 18; i++) o3m_put_le64(plain + 8 * i, o3m_double_bits(i == 4 ? NAN : 0.5));
  cr_assert(eq(int, crypto_box_seal(box, plain, sizeof plain, o3m_seal_key_public(f.key)), 0));
  O3m__V1__Block nan_msg = O3M__V1__BLOCK__INIT;
  nan_msg.mask_id = id, nan_msg.party = 1, nan_msg.rows = 6, nan_msg.cols = 3, nan_msg.col0 = 2;
  nan_msg.sealed.len = sizeof box;
  nan_msg.sealed.data = box;
  cr_assert(eq(int, o3m_wire_block_import(&b, &nan_msg, &f.p, 1, f.key, &e), O3M_ENONFINITE));
  cr_assert(eq(ptr, b, NULL));
  fed_fini(&f);
}

/* ------------------------------------------------------------ masking */

Test(wire, mask_request_check) {
  O3m__V1__MaskRequest r = O3M__V1__MASK_REQUEST__INIT;
  char *items[3] = {"a", "b", "c"};
  r.mask_id = 5;
  r.n_items = 3;
  r.items = items;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert(eq(int, o3m_wire_mask_request_check(&r, 5, 3, &e), 0), "%s", o3m_err_message(&e));
  cr_assert(eq(int, o3m_wire_mask_request_check(&r, 6, 3, &e), O3M_EMASK));
  cr_assert(eq(int, o3m_wire_mask_request_check(&r, 0, 3, &e), O3M_EMASK));
  cr_assert(has(e.msg, "no mask"), "%s", e.msg);
  cr_assert(eq(int, o3m_wire_mask_request_check(&r, 5, 2, &e), O3M_ERANGE));
  r.n_items = 0;
  cr_assert(eq(int, o3m_wire_mask_request_check(&r, 5, 3, &e), O3M_ERANGE));
}

Test(wire, masked_contexts_check) {
  double v[6] = {1, 2, 3, 4, 5, 6};
  O3m__V1__MaskedContexts m = O3M__V1__MASKED_CONTEXTS__INIT;
  o3m_wire_masked_fill(&m, 9, 2, 2, 3, v);
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert(eq(int, o3m_wire_masked_check(&m, 2, 2, 3, 9, NB, &e), 0), "%s",
            o3m_err_message(&e));
  cr_assert(eq(int, o3m_wire_masked_check(&m, 1, 2, 3, 9, NB, &e), O3M_EINVAL));
  cr_assert(eq(int, o3m_wire_masked_check(&m, 2, 2, 3, 8, NB, &e), O3M_EMASK));
  cr_assert(eq(int, o3m_wire_masked_check(&m, 2, 3, 3, 9, NB, &e), O3M_EDIM));
  cr_assert(eq(int, o3m_wire_masked_check(&m, 2, 2, 2, 9, NB, &e), O3M_EDIM));
  m.n_values = 5;
  cr_assert(eq(int, o3m_wire_masked_check(&m, 2, 2, 3, 9, NB, &e), O3M_EDIM));
  m.n_values = 6;
  v[5] = INFINITY;
  cr_assert(eq(int, o3m_wire_masked_check(&m, 2, 2, 3, 9, NB, &e), O3M_ENONFINITE));
  cr_assert(has(e.msg, "party 2"), "%s", e.msg);
}

/* ------------------------------------------------------------ batches */

Test(wire, mask_batch_rows_budget) {
  /* 64 full rounds when they fit in the byte budget... */
  cr_assert(eq(int, o3m_wire_mask_batch_rows(20, 100), O3M_WIRE_MAX_BATCH * 20));
  cr_assert(eq(int, o3m_wire_mask_batch_rows(64, 100), O3M_WIRE_MAX_BATCH * 64));
  /* ...cut to the budget of values... */
  int r = o3m_wire_mask_batch_rows(1000, 1000);
  cr_assert(eq(int, r, O3M_WIRE_BATCH_BYTES / (1000 * 8)));
  /* ...but never below one full round. */
  cr_assert(eq(int, o3m_wire_mask_batch_rows(2048, 4096), 2048));
  cr_assert(eq(int, o3m_wire_mask_batch_rows(0, 100), 0));
  cr_assert(eq(int, o3m_wire_mask_batch_rows(10, 0), 0));
}

Test(wire, mask_batch_check) {
  char *a[3] = {"a", "b", "c"}, *b[2] = {"d", "e"};
  O3m__V1__MaskQuery q[2] = {O3M__V1__MASK_QUERY__INIT, O3M__V1__MASK_QUERY__INIT};
  q[0].user = "u0", q[0].n_items = 3, q[0].items = a;
  q[1].user = "u1", q[1].n_items = 2, q[1].items = b;
  O3m__V1__MaskQuery *qp[O3M_WIRE_MAX_BATCH + 1];
  for (int i = 0; i <= O3M_WIRE_MAX_BATCH; i++) qp[i] = &q[i % 2];
  O3m__V1__MaskBatchRequest r = O3M__V1__MASK_BATCH_REQUEST__INIT;
  r.mask_id = 5;
  r.n_queries = 2;
  r.queries = qp;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert(eq(int, o3m_wire_mask_batch_check(&r, 5, 3, 5, &e), 0), "%s", o3m_err_message(&e));
  cr_assert(eq(int, o3m_wire_mask_batch_check(&r, 6, 3, 5, &e), O3M_EMASK));
  cr_assert(eq(int, o3m_wire_mask_batch_check(&r, 0, 3, 5, &e), O3M_EMASK));
  cr_assert(has(e.msg, "no mask"), "%s", e.msg);
  /* A round over max_candidates is named. */
  cr_assert(eq(int, o3m_wire_mask_batch_check(&r, 5, 2, 5, &e), O3M_ERANGE));
  cr_assert(has(e.msg, "query 0 has 3 items"), "%s", e.msg);
  /* More rows than the batch budget. */
  cr_assert(eq(int, o3m_wire_mask_batch_check(&r, 5, 3, 4, &e), O3M_ERANGE));
  cr_assert(has(e.msg, "5 items in all"), "%s", e.msg);
  /* A query without items. */
  q[1].n_items = 0;
  cr_assert(eq(int, o3m_wire_mask_batch_check(&r, 5, 3, 5, &e), O3M_ERANGE));
  cr_assert(has(e.msg, "query 1"), "%s", e.msg);
  q[1].n_items = 2;
  /* No query, and one too many. */
  r.n_queries = 0;
  cr_assert(eq(int, o3m_wire_mask_batch_check(&r, 5, 3, 5, &e), O3M_ERANGE));
  r.n_queries = O3M_WIRE_MAX_BATCH;
  cr_assert(eq(int, o3m_wire_mask_batch_check(&r, 5, 3, 1000, &e), 0), "%s", o3m_err_message(&e));
  r.n_queries = O3M_WIRE_MAX_BATCH + 1;
  cr_assert(eq(int, o3m_wire_mask_batch_check(&r, 5, 3, 1000, &e), O3M_ERANGE));
  cr_assert(eq(int, o3m_wire_mask_batch_check(NULL, 5, 3, 5, &e), O3M_EINVAL));
}

Test(wire, mask_batch_reply_check) {
  double v[5 * 2];
  for (int i = 0; i < 10; i++) v[i] = i;
  uint32_t rows[2] = {3, 2};
  int K[2] = {3, 2};
  O3m__V1__MaskBatchReply m = O3M__V1__MASK_BATCH_REPLY__INIT;
  o3m_wire_mask_batch_fill(&m, 9, 2, 2, rows, 2, v);
  cr_assert(eq(sz, m.n_values, 10));
  cr_assert(eq(sz, m.n_rows, 2));
  O3m__V1__MaskBatchReply *got = (O3m__V1__MaskBatchReply *)through_wire(&m.base);
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert(eq(int, o3m_wire_mask_batch_reply_check(got, 2, 2, K, 2, 9, 0, NB, &e), 0), "%s",
            o3m_err_message(&e));
  cr_assert(eq(int, memcmp(got->values, v, sizeof v), 0), "values changed on the wire");
  cr_assert(eq(int, o3m_wire_mask_batch_reply_check(got, 1, 2, K, 2, 9, 0, NB, &e), O3M_EINVAL));
  cr_assert(eq(int, o3m_wire_mask_batch_reply_check(got, 2, 2, K, 2, 8, 0, NB, &e), O3M_EMASK));
  cr_assert(eq(int, o3m_wire_mask_batch_reply_check(got, 2, 2, K, 3, 9, 0, NB, &e), O3M_EDIM));
  /* Rows of the queries swapped: same total, still wrong. */
  int swapped[2] = {2, 3};
  cr_assert(eq(int, o3m_wire_mask_batch_reply_check(got, 2, 2, swapped, 2, 9, 0, NB, &e),
               O3M_EDIM));
  cr_assert(has(e.msg, "query 0 has 3 rows, expected 2"), "%s", e.msg);
  int one[1] = {5};
  cr_assert(eq(int, o3m_wire_mask_batch_reply_check(got, 2, 1, one, 2, 9, 0, NB, &e), O3M_EDIM));
  got->n_values = 9;
  cr_assert(eq(int, o3m_wire_mask_batch_reply_check(got, 2, 2, K, 2, 9, 0, NB, &e), O3M_EDIM));
  got->n_values = 10;
  got->values[7] = NAN;
  cr_assert(eq(int, o3m_wire_mask_batch_reply_check(got, 2, 2, K, 2, 9, 0, NB, &e),
               O3M_ENONFINITE));
  cr_assert(has(e.msg, "party 2"), "%s", e.msg);
  protobuf_c_message_free_unpacked(&got->base, NULL);
}

/* Secure aggregation (protocol 4): the words survive the wire bit for bit,
 * and a reply of the other mode's form is refused either way. */
Test(wire, mask_batch_reply_forms_follow_the_aggregation_mode) {
  uint64_t w[5 * 2];
  for (int i = 0; i < 10; i++) w[i] = UINT64_MAX - (uint64_t)i * 0x0123456789abcdefULL;
  uint32_t rows[2] = {3, 2};
  int K[2] = {3, 2};
  O3m__V1__MaskBatchReply m = O3M__V1__MASK_BATCH_REPLY__INIT;
  o3m_wire_mask_batch_fill_masked(&m, 9, 2, 2, rows, 2, w);
  cr_assert(eq(sz, m.n_values, 0));
  O3m__V1__MaskBatchReply *got = (O3m__V1__MaskBatchReply *)through_wire(&m.base);
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert(eq(int, o3m_wire_mask_batch_reply_check(got, 2, 2, K, 2, 9, 1, NB, &e), 0), "%s",
            o3m_err_message(&e));
  cr_assert(eq(sz, got->n_masked, 10));
  cr_assert(eq(int, memcmp(got->masked, w, sizeof w), 0), "words changed on the wire");
  cr_assert(eq(int, o3m_wire_mask_batch_reply_check(got, 2, 2, K, 2, 9, 0, NB, &e), O3M_EINVAL));
  cr_assert(has(e.msg, "aggregation = per-party"), "%s", e.msg);
  got->n_masked = 9;
  cr_assert(eq(int, o3m_wire_mask_batch_reply_check(got, 2, 2, K, 2, 9, 1, NB, &e), O3M_EDIM));
  got->n_masked = 10;
  protobuf_c_message_free_unpacked(&got->base, NULL);
  double v[10] = {0};
  o3m_wire_mask_batch_fill(&m, 9, 2, 2, rows, 2, v);
  m.n_masked = 0;
  cr_assert(eq(int, o3m_wire_mask_batch_reply_check(&m, 2, 2, K, 2, 9, 1, NB, &e), O3M_EINVAL));
  cr_assert(has(e.msg, "a per-party part, but aggregation = secure"), "%s", e.msg);
}

/* The party's norm bound: each row of a masked part is Q^j x^j,
 * whose norm is ||x^j||. The rows here have norms 1, 3.61, 6.40, 9.22 and
 * 12.04; the last is query 1's candidate 1. */
Test(wire, masked_rows_above_the_party_bound_are_refused) {
  double v[5 * 2];
  for (int i = 0; i < 10; i++) v[i] = i;
  uint32_t rows[2] = {3, 2};
  int K[2] = {3, 2};
  O3m__V1__MaskBatchReply m = O3M__V1__MASK_BATCH_REPLY__INIT;
  o3m_wire_mask_batch_fill(&m, 9, 2, 2, rows, 2, v);
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert(eq(int, o3m_wire_mask_batch_reply_check(&m, 2, 2, K, 2, 9, 0, 12.05, &e), 0), "%s",
            o3m_err_message(&e));
  cr_assert(eq(int, o3m_wire_mask_batch_reply_check(&m, 2, 2, K, 2, 9, 0, 12.0, &e), O3M_EINVAL));
  cr_assert(has(e.msg, "party 2: round 1, candidate 1: the l2 norm is above max_norm = 12"),
            "%s", e.msg);
  /* Within the rounding tolerance: accepted. */
  double n4 = sqrt(64.0 + 81.0);
  cr_assert(eq(int, o3m_wire_mask_batch_reply_check(&m, 2, 2, K, 2, 9, 0, n4 * (1 - 1e-12), &e),
               0), "%s", o3m_err_message(&e));
  /* Finite values near DBL_MAX: their squares overflow, which is refused,
   * not summed to infinity. */
  v[2] = DBL_MAX;
  v[3] = -DBL_MAX;
  cr_assert(eq(int, o3m_wire_mask_batch_reply_check(&m, 2, 2, K, 2, 9, 0, 1e50, &e), O3M_EINVAL));
  cr_assert(has(e.msg, "round 0, candidate 1"), "%s", e.msg);
  cr_assert(not(has(e.msg, "1.79")), "the message quotes a value: %s", e.msg);
  /* The single-round check and the plain helper agree. */
  O3m__V1__MaskedContexts mc = O3M__V1__MASKED_CONTEXTS__INIT;
  o3m_wire_masked_fill(&mc, 9, 2, 3, 2, v);
  cr_assert(eq(int, o3m_wire_masked_check(&mc, 2, 3, 2, 9, 1e50, &e), O3M_EINVAL));
  cr_assert(has(e.msg, "candidate 1"), "%s", e.msg);
  cr_assert(eq(int, o3m_wire_check_row_norms("x", 1, 2, v, 1.5, 0, NULL, &e), 0));
  cr_assert(eq(int, o3m_wire_check_row_norms("x", 1, 2, v, 0.5, 0, NULL, &e), O3M_EINVAL));
  cr_assert(eq(int, o3m_wire_check_row_norms("x", 1, 2, v, 0, 0, NULL, &e), O3M_EINVAL));
}

/* The request size limits bound the largest valid message of the config
 * from above, by little: protobuf-c's own (packed) encoding of a maximal
 * request fits, with less than the per-element tags and the slack to
 * spare. */
Test(wire, size_limits_cover_the_largest_valid_requests) {
  enum { KM = 7, D0 = 3, D = 11 };
  static char ids[KM + 1][O3M_MAX_ID + 1];
  char *items[KM];
  uint32_t arms[KM];
  double own[KM * D0];
  for (int k = 0; k <= KM; k++) {
    memset(ids[k], 'a' + k, O3M_MAX_ID);
    ids[k][O3M_MAX_ID] = '\0';
    if (k < KM) items[k] = ids[k], arms[k] = 4000000000u;
  }
  for (int i = 0; i < KM * D0; i++) own[i] = -1.5e300;
  O3m__V1__RecommendRequest r = O3M__V1__RECOMMEND_REQUEST__INIT;
  r.user = ids[KM];
  r.n_items = KM;
  r.items = items;
  r.n_arms = KM;
  r.arms = arms;
  r.n_own_features = KM * D0;
  r.own_features = own;
  size_t packed = protobuf_c_message_get_packed_size(&r.base);
  int lim = o3m_wire_recommend_max_bytes(KM, D0);
  cr_assert(ge(int, lim, (int)packed));
  cr_assert(le(int, lim, (int)packed + KM * (D0 + 1) + 4 * (KM + 1) + 16 + O3M_WIRE_SIZE_SLACK));
  /* A MaskBatch of the most rows, every id of the longest length. */
  int rows = o3m_wire_mask_batch_rows(KM, D);
  cr_assert(eq(int, rows, O3M_WIRE_MAX_BATCH * KM));
  O3m__V1__MaskQuery q[O3M_WIRE_MAX_BATCH], *qp[O3M_WIRE_MAX_BATCH];
  for (int i = 0; i < O3M_WIRE_MAX_BATCH; i++) {
    o3m__v1__mask_query__init(&q[i]);
    q[i].user = ids[KM];
    q[i].n_items = KM;
    q[i].items = items;
    qp[i] = &q[i];
  }
  O3m__V1__MaskBatchRequest b = O3M__V1__MASK_BATCH_REQUEST__INIT;
  b.mask_id = UINT64_MAX;
  b.n_queries = O3M_WIRE_MAX_BATCH;
  b.queries = qp;
  packed = protobuf_c_message_get_packed_size(&b.base);
  lim = o3m_wire_mask_batch_max_bytes(KM, D);
  cr_assert(ge(int, lim, (int)packed));
  cr_assert(le(int, lim, (int)packed + 4 * rows + 8 * O3M_WIRE_MAX_BATCH + O3M_WIRE_SIZE_SLACK));
  /* Its reply. */
  static double vals[O3M_WIRE_MAX_BATCH * KM * D];
  uint32_t rws[O3M_WIRE_MAX_BATCH];
  for (int i = 0; i < O3M_WIRE_MAX_BATCH; i++) rws[i] = KM;
  O3m__V1__MaskBatchReply rep = O3M__V1__MASK_BATCH_REPLY__INIT;
  o3m_wire_mask_batch_fill(&rep, UINT64_MAX, 1000, O3M_WIRE_MAX_BATCH, rws, D, vals);
  packed = protobuf_c_message_get_packed_size(&rep.base);
  lim = o3m_wire_mask_batch_reply_max_bytes(KM, D);
  cr_assert(ge(int, lim, (int)packed));
  /* The bound has room for a factored batch's user rows, one per query. */
  cr_assert(le(int, lim, (int)packed + rows * D + 9 * O3M_WIRE_MAX_BATCH * D +
                             2 * O3M_WIRE_SIZE_SLACK));
  /* The largest factored reply: a user row per query, then as many item
   * rows as a batch has candidates, with both epochs. */
  static double fvals[(O3M_WIRE_MAX_BATCH + O3M_WIRE_MAX_BATCH * KM) * D];
  O3m__V1__MaskBatchReply frep = O3M__V1__MASK_BATCH_REPLY__INIT;
  o3m_wire_mask_batch_fill_factored(&frep, UINT64_MAX, 1000, O3M_WIRE_MAX_BATCH, rows, rws, D,
                                    fvals, NULL, UINT64_MAX, UINT64_MAX);
  cr_assert(ge(int, lim, (int)protobuf_c_message_get_packed_size(&frep.base)));
  cr_assert(eq(int, o3m_wire_recommend_max_bytes(0, 3), 0));
  cr_assert(eq(int, o3m_wire_recommend_max_bytes(1000000, 4096), 1 << 30));
}

Test(wire, recommend_check) {
  O3m__V1__RecommendRequest r = O3M__V1__RECOMMEND_REQUEST__INIT;
  char *items[3] = {"a", "b", "c"};
  uint32_t arms[3] = {0, 4, 2};
  r.n_items = 3;
  r.items = items;
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert(eq(int, o3m_wire_recommend_check(&r, 10, 0, &e), 0));
  cr_assert(eq(int, o3m_wire_recommend_check(&r, 2, 0, &e), O3M_ERANGE));
  r.arms = arms;
  r.n_arms = 3;
  cr_assert(eq(int, o3m_wire_recommend_check(&r, 10, 5, &e), 0), "%s", o3m_err_message(&e));
  cr_assert(eq(int, o3m_wire_recommend_check(&r, 10, 4, &e), O3M_ERANGE));
  cr_assert(has(e.msg, "arms[1] = 4"), "%s", e.msg);
  cr_assert(eq(int, o3m_wire_recommend_check(&r, 10, 0, &e), 0), "shared model ignores arms");
  r.n_arms = 2;
  cr_assert(eq(int, o3m_wire_recommend_check(&r, 10, 5, &e), O3M_EINVAL));
  r.n_items = 0;
  cr_assert(eq(int, o3m_wire_recommend_check(&r, 10, 5, &e), O3M_ERANGE));
}

/* One check of a query's ids for both sides, so that the
 * AP refuses whatever a PP would refuse (an empty user where a user table
 * exists, an empty item, an id longer than a table holds). */
Test(wire, query_ids_check_refuses_what_a_passive_party_refuses) {
  char *items[3] = {"a", "b", "c"};
  o3m_err e;
  o3m_err_clear(&e);
  cr_assert(eq(int, o3m_wire_query_ids_check("Q", "u", 1, 3, items, 1, &e), 0));
  cr_assert(eq(int, o3m_wire_query_ids_check("Q", "", 1, 3, items, 1, &e), O3M_EINVAL));
  cr_assert(has(e.msg, "Q: user is empty"), "%s", e.msg);
  cr_assert(eq(int, o3m_wire_query_ids_check("Q", NULL, 1, 3, items, 1, &e), O3M_EINVAL));
  /* No user table anywhere: an empty user is fine. */
  cr_assert(eq(int, o3m_wire_query_ids_check("Q", "", 0, 3, items, 1, &e), 0));
  cr_assert(eq(int, o3m_wire_query_ids_check("Q", "u", 1, 3, NULL, 0, &e), 0));
  items[2] = "";
  cr_assert(eq(int, o3m_wire_query_ids_check("Q", "u", 1, 3, items, 1, &e), O3M_EINVAL));
  cr_assert(has(e.msg, "Q: items[2] is empty"), "%s", e.msg);
  cr_assert(eq(int, o3m_wire_query_ids_check("Q", "u", 1, 3, items, 0, &e), 0));
  char longid[O3M_MAX_ID + 2];
  memset(longid, 'x', sizeof longid - 1);
  longid[O3M_MAX_ID + 1] = '\0';
  items[2] = longid;
  cr_assert(eq(int, o3m_wire_query_ids_check("Q", "u", 1, 3, items, 1, &e), O3M_EINVAL));
  cr_assert(has(e.msg, "items[2] is longer than"), "%s", e.msg);
  longid[O3M_MAX_ID] = '\0'; /* exactly the limit */
  cr_assert(eq(int, o3m_wire_query_ids_check("Q", "u", 1, 3, items, 1, &e), 0), "%s", e.msg);
  longid[O3M_MAX_ID] = 'x';
  cr_assert(eq(int, o3m_wire_query_ids_check("Q", longid, 0, 3, NULL, 0, &e), O3M_EINVAL));
  cr_assert(has(e.msg, "user is longer than"), "%s", e.msg);
}

/* The whole masking protocol through the wire: every party imports its
 * block, masks its columns of K contexts and sends them; the active
 * participant checks and sums the replies. The sum is Q x, and inner
 * products are those of the raw contexts (Q is orthogonal). */
Test(wire, masked_sum_over_the_wire_is_Qx) {
  enum { K = 5 };
  fed f;
  fed_init(&f, "3,4,2,3", 2024);
  const int d = f.p.d, M = f.p.m;
  uint64_t id = o3m_mask_id(f.mask);
  double X[K * 12], Y[K * 12], sum[K * 12] = {0};
  o3m_rng *xr;
  cr_assert(eq(int, o3m_rng_create_seeded_insecure(&xr, 7), 0));
  cr_assert(eq(int, o3m_rng_gaussian(xr, X, K * d), 0));
  o3m_rng_destroy(xr);

  for (int j = 0; j < M; j++) {
    O3m__V1__Block *bm = block_over_wire(&f, j);
    o3m_block *b;
    o3m_err e;
    o3m_err_clear(&e);
    cr_assert(eq(int, o3m_wire_block_import(&b, bm, &f.p, j, f.key, &e), 0), "%s",
              o3m_err_message(&e));
    protobuf_c_message_free_unpacked(&bm->base, NULL);
    double Xj[K * 12];
    for (int k = 0; k < K; k++)
      for (int c = 0; c < f.p.dims[j]; c++) Xj[k * f.p.dims[j] + c] = X[k * d + f.p.offset[j] + c];
    o3m_block_apply(b, K, Xj, 0.0, Y);
    O3m__V1__MaskedContexts mc = O3M__V1__MASKED_CONTEXTS__INIT;
    o3m_wire_masked_fill(&mc, id, j, K, d, Y);
    O3m__V1__MaskedContexts *got = (O3m__V1__MaskedContexts *)through_wire(&mc.base);
    cr_assert(eq(int, o3m_wire_masked_check(got, j, K, d, id, NB, &e), 0), "%s",
              o3m_err_message(&e));
    for (int i = 0; i < K * d; i++) sum[i] += got->values[i];
    protobuf_c_message_free_unpacked(&got->base, NULL);
    o3m_block_destroy(b);
  }

  const double *Q = o3m_mask_matrix(f.mask);
  for (int k = 0; k < K; k++)
    for (int r = 0; r < d; r++) {
      double want = 0;
      for (int c = 0; c < d; c++) want += Q[r * d + c] * X[k * d + c];
      cr_assert(epsilon_eq(dbl, sum[k * d + r], want, 1e-12), "k=%d r=%d", k, r);
    }
  for (int a = 0; a < K; a++)
    for (int b = 0; b < K; b++) {
      double raw = 0, masked = 0;
      for (int i = 0; i < d; i++) {
        raw += X[a * d + i] * X[b * d + i];
        masked += sum[a * d + i] * sum[b * d + i];
      }
      cr_assert(epsilon_eq(dbl, masked, raw, 1e-10), "a=%d b=%d", a, b);
    }
  fed_fini(&f);
}
