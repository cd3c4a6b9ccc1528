/* fuzz_policy_state.c -- libFuzzer target for the policy state image reader
 * (o3m_policy_state_import and o3m_policy_state_load, policy/o3m_policy.h),
 * which a checkpoint hands whatever is on disk once its CRCs match.
 *
 * Byte 0 picks one of four fixed policies (LinUCB or LinTS, shared or
 * disjoint with 3 arms, d = 3) and, with bit 2, whether the harness first
 * repairs the header's length field (bytes 104..111) to the input's length,
 * so that mutations get past the length check to the fields behind it. The
 * rest is the image. Properties checked:
 *   - a refused image leaves the state unchanged (the export is identical);
 *   - an accepted image exports back byte for byte (but for three fields
 *     import ignores, see canonical_padding);
 *   - o3m_policy_state_load, fed the same bytes in 7-byte pieces, accepts
 *     them and reads them all exactly when import accepts them;
 *   - after an accepted image the health check runs, and choose and update
 *     run without a memory error whatever the numbers are (import does not
 *     check them; see o3m_policy.h); when the health check finds every model
 *     sound, choose succeeds on a finite context. */
#include <stdint.h>
#include <string.h>

#include "o3m_policy.h"
#include "fuzz_util.h"

#define D 3
#define N_ARMS 3

static o3m_policy *g_pol[4];
static uint8_t *g_fresh[4]; /* the image of each new policy */
static size_t g_size[4];
static uint8_t *g_buf;      /* scratch for exports */
static uint8_t *g_before;   /* the state before a choose */
static size_t g_buf_cap;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  for (int i = 0; i < 4; i++) {
    o3m_policy_config cfg;
    o3m_policy_config_default(&cfg);
    cfg.algo = (i & 1) ? O3M_ALGO_LINTS : O3M_ALGO_LINUCB;
    cfg.model = (i & 2) ? O3M_MODEL_DISJOINT : O3M_MODEL_SHARED;
    cfg.d = D;
    cfg.n_arms = N_ARMS;
    cfg.max_candidates = 4;
    o3m_err e;
    if (o3m_policy_create(&g_pol[i], &cfg, &e) != 0) fuzz_die("o3m_policy_create");
    g_size[i] = o3m_policy_state_size(g_pol[i]);
    g_fresh[i] = malloc(g_size[i]);
    if (!g_fresh[i]) fuzz_die("malloc");
    if (o3m_policy_state_export(g_pol[i], g_fresh[i], g_size[i]) != 0) fuzz_die("export");
    if (g_size[i] > g_buf_cap) g_buf_cap = g_size[i];
  }
  g_buf = malloc(g_buf_cap);
  g_before = malloc(g_buf_cap);
  if (!g_buf || !g_before) fuzz_die("malloc");
  return 0;
}

/* 1 if policy i's state exports to exactly want[0..n). */
static int exports_as(int i, const uint8_t *want, size_t n) {
  if (o3m_policy_state_size(g_pol[i]) != n) return 0;
  FUZZ_CHECK(o3m_policy_state_export(g_pol[i], g_buf, g_buf_cap) == 0);
  return memcmp(g_buf, want, n) == 0;
}

/* Import ignores two header fields: refactor_every (informational, the
 * policy keeps its own, as o3m_policy.h says), and one whose value the format
 * fixes: the cached Gaussian when none is cached (0). The round trip is
 * compared with those set as export writes them. */
static void canonical_padding(int i, uint8_t *img) {
  memcpy(img + 36, g_fresh[i] + 36, 4);
  if (fuzz_le64(img + 88) == 0) memset(img + 96, 0, 8);
}

typedef struct source {
  const uint8_t *p;
  size_t n, off;
} source;

/* Hands out the image in pieces of at most 7 bytes. */
static int src_read(void *ctx, void *buf, size_t len) {
  source *s = ctx;
  uint8_t *out = buf;
  while (len > 0) {
    if (s->off >= s->n) return O3M_EIO;
    size_t k = len < 7 ? len : 7;
    if (k > s->n - s->off) k = s->n - s->off;
    memcpy(out, s->p + s->off, k);
    s->off += k, out += k, len -= k;
  }
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  int i = data[0] & 3;
  o3m_policy *p = g_pol[i];
  uint8_t *img = malloc(size - 1 ? size - 1 : 1);
  if (!img) fuzz_die("malloc");
  size_t n = size - 1;
  memcpy(img, data + 1, n);
  if ((data[0] & 4) && n >= 120)
    for (int k = 0; k < 8; k++) img[104 + k] = (uint8_t)((uint64_t)n >> (8 * k));

  /* Every input starts from the fresh state. */
  FUZZ_CHECK(o3m_policy_reset(p) == 0);
  FUZZ_CHECK(exports_as(i, g_fresh[i], g_size[i]));

  o3m_err e;
  int rc = o3m_policy_state_import(p, img, n, &e);
  if (rc != 0) {
    FUZZ_CHECK(rc < 0);
    FUZZ_CHECK(exports_as(i, g_fresh[i], g_size[i]));
  } else {
    FUZZ_CHECK(n == g_size[i]);
    canonical_padding(i, img);
    FUZZ_CHECK(exports_as(i, img, n));
  }

  /* The streaming loader must accept exactly what import accepts. */
  FUZZ_CHECK(o3m_policy_reset(p) == 0);
  source s = {img, n, 0};
  int rc2 = o3m_policy_state_load(p, src_read, &s, &e);
  /* (load cannot know the image's length: it reads what the header
   * announces, so it may succeed on a prefix of a longer input.) */
  FUZZ_CHECK((rc2 == 0 && s.off == n) == (rc == 0));
  if (rc2 == 0 && s.off == n) {
    FUZZ_CHECK(exports_as(i, img, n));
    /* Whatever the numbers, the policy may be checked and used. */
    o3m_policy_health h;
    int healthy = o3m_policy_health_check(p, O3M_POLICY_HEALTH_DEEP, &h) == 0 && h.model == -1;
    double X[2 * D] = {1, 0, 0.5, -1, 2, 0};
    int arms[2] = {0, 2}, chosen = -1;
    double score;
    FUZZ_CHECK(o3m_policy_state_export(p, g_before, g_buf_cap) == 0);
    rc = o3m_policy_choose(p, 2, X, arms, &chosen, &score);
    /* choose fails only for bad arguments or a non-finite context, so a
     * healthy state must answer a finite one; and a failing choose leaves
     * the state, sampler included, as it was. */
    if (healthy) FUZZ_CHECK(rc == 0);
    if (rc == 0) FUZZ_CHECK(chosen == 0 || chosen == 1);
    else FUZZ_CHECK(exports_as(i, g_before, n));
    (void)o3m_policy_update(p, 1, X, 0.5);
  }
  free(img);
  return 0;
}
