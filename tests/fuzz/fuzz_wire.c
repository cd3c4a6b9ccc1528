/* fuzz_wire.c -- libFuzzer targets for the protobuf messages the daemons
 * decode.
 *
 * One source, one target per message: CMake compiles this file once per
 * message with FUZZ_WIRE_ENTRY naming the function below that
 * LLVMFuzzerTestOneInput calls (fuzz_wire_block_request, ...), so that each
 * message has its own binary, corpus and coverage feedback. Each function
 * does what the receiving daemon does with the bytes: unpack with protobuf-c
 * and, if they decode, run the o3m_wire check the daemon runs against a
 * small fixed federation (partition 2,3,1 so d = 6, this process being
 * party 1, a fixed mask id, at most 8 candidates), then use the fields the
 * check let through the way the handler would. Properties that a passed
 * check promises are asserted, so a check that lets a bad message through
 * shows up as a crash, not only memory errors do.
 *
 * Messages are unpacked with protobuf-c's default allocator and freed with
 * __free_unpacked here, so that ASan sees every allocation separately; the
 * daemons use o3m_rpc's arena instead (see the caveat in README.md). */
#include <math.h>
#include <sodium.h>
#include <stdint.h>
#include <string.h>

#include "ap_pending.h"
#include "fuzz_util.h"
#include "o3m.pb-c.h"
#include "o3m_mask.h"
#include "o3m_seal.h"
#include "o3m_wire.h"
#include "o3m_features.h"

#define FUZZ_PARTY 1
#define FUZZ_MASK_ID 0x0123456789abcdefULL
#define FUZZ_MAX_CAND 8
#define FUZZ_N_ARMS 4
#define FUZZ_D 6
#define FUZZ_DJ 3 /* dims of FUZZ_PARTY */
#define FUZZ_MAX_NORM 10.0 /* max_norm of FUZZ_PARTY */

/* The fixed federation, built once in LLVMFuzzerInitialize and kept for the
 * life of the process (reachable, so LeakSanitizer does not report it). */
static o3m_partition g_part;
/* The federation fingerprint the fixed federation checks peers against. */
static const unsigned char g_fingerprint[O3M_FINGERPRINT_BYTES] = {
    0x5a, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
    16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31};
static o3m_block *g_block;       /* party 1's block under FUZZ_MASK_ID */
static o3m_seal_key *g_key;      /* party 1's key pair for its GetBlock */
static o3m_features *g_features;  /* party 1's tables: 2 user + 1 item columns */
static ap_pending *g_pending;    /* the AP's table with three decisions */
static uint64_t g_decisions[3];  /* open, rewarded, open */

/* The feature tables written to memfds and loaded once. */
static const char k_users[] = "user_id,u0,u1\nalice,1,2\nbob,-0.5,0.25\n";
static const char k_items[] = "item_id,i0\nbook,3\npen,-1\ncup,0.5\n";

/* Decision ids 100, 101, ... (see setup). */
static int fixed_ids(void *arg, uint64_t *id) {
  (void)arg;
  static uint64_t next = 100;
  *id = next++;
  return 0;
}

static void setup(void) {
  o3m_err e;
  int dims[3] = {2, FUZZ_DJ, 1};
  if (o3m_partition_from_dims(&g_part, 3, dims, &e) != 0) fuzz_die("partition");
  double q[FUZZ_D * FUZZ_DJ];
  for (int i = 0; i < FUZZ_D * FUZZ_DJ; i++) q[i] = 0.1 * (i + 1);
  if (o3m_block_create(&g_block, FUZZ_D, FUZZ_DJ, q, FUZZ_MASK_ID) != 0) fuzz_die("block");
  if (o3m_seal_key_create(&g_key) != 0) fuzz_die("seal key");

  /* The memfds stay open: the tables are read at load only, but closing
   * them would make no difference to the harness. */
  static fuzz_file users, items;
  fuzz_file_init(&users, "fuzz_users");
  fuzz_file_init(&items, "fuzz_items");
  const char *up = fuzz_file_set(&users, (const uint8_t *)k_users, strlen(k_users));
  const char *ip = fuzz_file_set(&items, (const uint8_t *)k_items, strlen(k_items));
  if (o3m_features_load(&g_features, up, ip, FUZZ_DJ, &e) != 0) {
    fprintf(stderr, "fuzz harness: feature tables: %s\n", o3m_err_message(&e));
    abort();
  }

  /* The AP draws decision ids from the OS; the harness hands out 100, 101, 102
   * so that the seed corpus can name an open and a rewarded decision. */
  if (ap_pending_create(&g_pending, 4, FUZZ_D, 1000, fixed_ids, NULL) != 0) fuzz_die("pending");
  double x[FUZZ_D] = {1, 2, 3, 4, 5, 6};
  for (int i = 0; i < 3; i++)
    if (ap_pending_open(g_pending, i, FUZZ_MASK_ID, x, 0, &g_decisions[i]) != 0) fuzz_die("open");
  int arm;
  uint64_t mid;
  const double *px;
  if (ap_pending_peek(g_pending, g_decisions[1], 0, &arm, &mid, &px) != 0) fuzz_die("peek");
  ap_pending_close(g_pending, g_decisions[1]);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  setup();
  return 0;
}

/* Sums n doubles so that a read of each one happens (and cannot be
 * optimized away). */
static double touch(const double *v, size_t n) {
  volatile double s = 0;
  for (size_t i = 0; i < n; i++) s += v[i];
  return s;
}

/* ---- mask generator: GetBlock ---- */
void fuzz_wire_block_request(const uint8_t *data, size_t size) {
  O3m__V1__BlockRequest *m = o3m__v1__block_request__unpack(NULL, size, data);
  if (!m) return;
  o3m_err e;
  if (o3m_wire_block_request_check(m, &g_part, g_fingerprint, &e) == 0) {
    FUZZ_CHECK(m->fingerprint.len == O3M_FINGERPRINT_BYTES &&
               memcmp(m->fingerprint.data, g_fingerprint, O3M_FINGERPRINT_BYTES) == 0);
    /* What the generator then does: cut the party's columns. */
    FUZZ_CHECK(m->party < (uint32_t)g_part.m);
    FUZZ_CHECK(m->party_dim == (uint32_t)g_part.dims[m->party]);
    FUZZ_CHECK(g_part.offset[m->party] + g_part.dims[m->party] <= g_part.d);
  }
  o3m__v1__block_request__free_unpacked(m, NULL);
}

/* ---- mask generator: ConfirmBlock (no wire check; the fields are plain) ---- */
void fuzz_wire_block_receipt(const uint8_t *data, size_t size) {
  O3m__V1__BlockReceipt *m = o3m__v1__block_receipt__unpack(NULL, size, data);
  if (!m) return;
  volatile uint64_t sink = m->party ^ m->mask_id;
  (void)sink;
  o3m__v1__block_receipt__free_unpacked(m, NULL);
}

/* ---- participants: the Block the generator sends ----
 * Byte 0 is an option: with bit 0 set, the harness takes the bytes of the
 * message's `sealed` field as the plaintext and seals them to its own key
 * first, as a generator would, so that mutations reach the length and value
 * checks behind the Poly1305 tag (which mutation cannot forge, like the
 * CRCs of the durable formats). Without it the box is opened as received
 * and exercises the tag and length checks. */
void fuzz_wire_block(const uint8_t *data, size_t size) {
  if (size < 1) return;
  int seal_here = data[0] & 1;
  O3m__V1__Block *m = o3m__v1__block__unpack(NULL, size - 1, data + 1);
  if (!m) return;
  unsigned char *box = NULL;
  ProtobufCBinaryData own = m->sealed;
  if (seal_here) {
    box = malloc(m->sealed.len + O3M_SEAL_OVERHEAD);
    if (!box) fuzz_die("malloc");
    if (crypto_box_seal(box, m->sealed.data, m->sealed.len, o3m_seal_key_public(g_key)) != 0)
      fuzz_die("crypto_box_seal");
    m->sealed.data = box;
    m->sealed.len += O3M_SEAL_OVERHEAD;
  }
  o3m_err e;
  o3m_block *b = NULL;
  int rc = o3m_wire_block_import(&b, m, &g_part, FUZZ_PARTY, g_key, &e);
  if (rc == 0) {
    FUZZ_CHECK(b != NULL);
    FUZZ_CHECK(o3m_block_rows(b) == FUZZ_D && o3m_block_cols(b) == FUZZ_DJ);
    FUZZ_CHECK(o3m_block_mask_id(b) == m->mask_id && m->mask_id != 0);
    FUZZ_CHECK(m->n_data == 0); /* nothing was accepted in the clear */
    /* Mask two candidates with the imported block, as the party will. */
    double X[2 * FUZZ_DJ] = {1, 0, -1, 0.5, 2, 0};
    double Y[2 * FUZZ_D];
    o3m_block_apply(b, 2, X, 0.0, Y);
    (void)touch(Y, 2 * FUZZ_D);
    o3m_block_destroy(b);
  } else {
    FUZZ_CHECK(rc < 0 && b == NULL);
  }
  /* Give m back its own field before protobuf-c frees it. */
  m->sealed = own;
  free(box);
  o3m__v1__block__free_unpacked(m, NULL);
}

/* ---- every daemon at start-up: a peer's NodeInfo ---- */
void fuzz_wire_node_info(const uint8_t *data, size_t size) {
  O3m__V1__NodeInfo *m = o3m__v1__node_info__unpack(NULL, size, data);
  if (!m) return;
  o3m_err e;
  if (o3m_wire_info_check(m, O3M__V1__ROLE__ROLE_PASSIVE, 2, &g_part, g_fingerprint, &e) == 0) {
    FUZZ_CHECK(m->fingerprint.len == O3M_FINGERPRINT_BYTES &&
               memcmp(m->fingerprint.data, g_fingerprint, O3M_FINGERPRINT_BYTES) == 0);
    FUZZ_CHECK(m->n_dims == (size_t)g_part.m);
    for (size_t j = 0; j < m->n_dims; j++) FUZZ_CHECK(m->dims[j] == (uint32_t)g_part.dims[j]);
  }
  (void)o3m_wire_info_check(m, O3M__V1__ROLE__ROLE_MASK_GENERATOR, -1, &g_part, g_fingerprint,
                            &e);
  if (m->name) (void)strlen(m->name);
  o3m__v1__node_info__free_unpacked(m, NULL);
}

/* ---- passive participant: Mask ---- */
void fuzz_wire_mask_request(const uint8_t *data, size_t size) {
  O3m__V1__MaskRequest *m = o3m__v1__mask_request__unpack(NULL, size, data);
  if (!m) return;
  o3m_err e;
  if (o3m_wire_mask_request_check(m, FUZZ_MASK_ID, FUZZ_MAX_CAND, &e) == 0) {
    /* The passive participant's handler: look up the features, mask. */
    FUZZ_CHECK(m->n_items >= 1 && m->n_items <= FUZZ_MAX_CAND);
    int K = (int)m->n_items;
    double X[FUZZ_MAX_CAND * FUZZ_DJ], Y[FUZZ_MAX_CAND * FUZZ_D];
    int unknown_user = -1, unknown_items = -1;
    int rc = o3m_features_fill(g_features, m->user, K, (const char *const *)m->items, X,
                              &unknown_user, &unknown_items);
    FUZZ_CHECK(rc == 0);
    FUZZ_CHECK(unknown_user == 0 || unknown_user == 1);
    FUZZ_CHECK(unknown_items >= 0 && unknown_items <= K);
    o3m_block_apply(g_block, K, X, 0.0, Y);
    FUZZ_CHECK(isfinite(touch(Y, (size_t)K * FUZZ_D)));
  }
  /* A party that holds no mask yet refuses everything. */
  FUZZ_CHECK(o3m_wire_mask_request_check(m, 0, FUZZ_MAX_CAND, &e) == O3M_EMASK);
  o3m__v1__mask_request__free_unpacked(m, NULL);
}

/* ---- active participant: a party's MaskedContexts ---- */
void fuzz_wire_masked_contexts(const uint8_t *data, size_t size) {
  O3m__V1__MaskedContexts *m = o3m__v1__masked_contexts__unpack(NULL, size, data);
  if (!m) return;
  o3m_err e;
  for (int K = 1; K <= 3; K += 2) {
    if (o3m_wire_masked_check(m, FUZZ_PARTY, K, FUZZ_D, FUZZ_MASK_ID, FUZZ_MAX_NORM, &e) == 0) {
      /* The AP sums the parties' vectors into Q x: the check promises rows
       * of norm at most the bound, so every sum of them is finite and the
       * sum of a row's entries is at most sqrt(d) times the bound. */
      FUZZ_CHECK(m->n_values == (size_t)K * FUZZ_D);
      double bound = FUZZ_MAX_NORM * (1 + O3M_WIRE_NORM_RTOL) * sqrt(FUZZ_D);
      for (int k = 0; k < K; k++) {
        double s = touch(m->values + (size_t)k * FUZZ_D, FUZZ_D);
        FUZZ_CHECK(isfinite(s) && fabs(s) <= bound);
      }
    }
  }
  o3m__v1__masked_contexts__free_unpacked(m, NULL);
}

/* ---- active participant: Recommend ---- */
void fuzz_wire_recommend_request(const uint8_t *data, size_t size) {
  O3m__V1__RecommendRequest *m = o3m__v1__recommend_request__unpack(NULL, size, data);
  if (!m) return;
  o3m_err e;
  /* The disjoint model with FUZZ_N_ARMS arms, then the shared model. */
  if (o3m_wire_recommend_check(m, FUZZ_MAX_CAND, FUZZ_N_ARMS, &e) == 0) {
    FUZZ_CHECK(m->n_items >= 1 && m->n_items <= FUZZ_MAX_CAND);
    FUZZ_CHECK(m->n_arms == 0 || m->n_arms == m->n_items);
    for (size_t k = 0; k < m->n_arms; k++) FUZZ_CHECK(m->arms[k] < FUZZ_N_ARMS);
  }
  if (o3m_wire_recommend_check(m, FUZZ_MAX_CAND, 0, &e) == 0) {
    for (size_t k = 0; k < m->n_items; k++) (void)strlen(m->items[k]);
    (void)strlen(m->user);
    /* The AP takes own_features only as K x d_0 (d_0 = 2 here). */
    if (m->n_own_features == m->n_items * 2) (void)touch(m->own_features, m->n_own_features);
  }
  o3m__v1__recommend_request__free_unpacked(m, NULL);
}

/* ---- active participant: Reward ----
 * o3m_wire has no check for RewardRequest: the AP validates the reward
 * inline in its handler (finite, within [reward_min, reward_max]) and then
 * looks the decision up in its pending table. This does the same with the
 * real pending table and the default range [0, 1]. */
void fuzz_wire_reward_request(const uint8_t *data, size_t size) {
  O3m__V1__RewardRequest *m = o3m__v1__reward_request__unpack(NULL, size, data);
  if (!m) return;
  if (isfinite(m->reward) && m->reward >= 0.0 && m->reward <= 1.0) {
    int arm = -1;
    uint64_t mask_id = 0;
    const double *x = NULL;
    int rc = ap_pending_peek(g_pending, m->decision, 500, &arm, &mask_id, &x);
    if (rc == 0) {
      FUZZ_CHECK(m->decision == g_decisions[0] || m->decision == g_decisions[2]);
      FUZZ_CHECK(arm >= 0 && arm < 3 && mask_id == FUZZ_MASK_ID && x != NULL);
      FUZZ_CHECK(touch(x, FUZZ_D) == 21.0);
    } else if (m->decision == g_decisions[1]) {
      FUZZ_CHECK(rc == O3M_EEXISTS);
    } else {
      FUZZ_CHECK(rc == O3M_ENOTFOUND);
    }
    /* Long after, every open decision has expired. */
    rc = ap_pending_peek(g_pending, m->decision, 5000, &arm, &mask_id, &x);
    FUZZ_CHECK(rc != 0);
  }
  o3m__v1__reward_request__free_unpacked(m, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  FUZZ_WIRE_ENTRY(data, size);
  return 0;
}
