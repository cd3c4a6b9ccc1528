/* o3m_policy_state.c -- the policy's saved state: its size, the encoder
 * (export, save) and the decoder (import, load) of the image documented in
 * o3m_policy.h.
 *
 * Scalars are encoded little-endian byte by byte; the arrays are handed over
 * as they lie in memory on little-endian hosts and byte-swapped through a
 * small buffer on big-endian ones. The header's byte offsets are named once
 * (enum state_field below) and both directions use the names. */
#include "o3m_policy.h"

#include <math.h>
#include <string.h>

#include "o3m_assert.h"
#include "o3m_bytes.h"
#include "o3m_policy_impl.h"
#include "o3m_rng.h"

#define STATE_MAGIC "O3MPOLST"
#define STATE_VERSION 2u
#define STATE_HDR 120u

/* Where each header field starts (the table in o3m_policy.h); sizes there. */
enum state_field {
  F_MAGIC = 0,           /* 8 bytes */
  F_VERSION = 8,         /* 4 */
  F_HDR_LEN = 12,        /* 4 */
  F_ALGO = 16,           /* 4 */
  F_MODEL = 20,          /* 4 */
  F_D = 24,              /* 4 */
  F_N_MODELS = 28,       /* 4 */
  F_FACTOR = 32,         /* 4: 0 Ainv, 1 Cholesky factor U */
  F_REFACTOR_EVERY = 36, /* 4 */
  F_LAMBDA = 40,         /* 8 */
  F_UPDATES = 48,        /* 8 */
  F_RNG_S = 56,          /* 4 x 8: xoshiro256** s[0..3] */
  F_RNG_HAVE_SPARE = 88, /* 8 */
  F_RNG_SPARE = 96,      /* 8 */
  F_LENGTH = 104,        /* 8: total image length */
  F_BLOCK = 112,         /* 4: rows per Lambda block */
  F_RESERVED = 116,      /* 4: 0 */
  F_END = 120            /* the counters follow */
};
_Static_assert(F_END == STATE_HDR, "the header fields fill the header");

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define STATE_BIG_ENDIAN 1
#else
#define STATE_BIG_ENDIAN 0
#endif

/* Bytes of the two counter blocks (since_refactor, n_held: 4 bytes per
 * model each, so always a multiple of 8). */
static size_t counters_bytes(const o3m_policy *p) { return (size_t)p->n_models * 8; }

size_t o3m_policy_state_size(const o3m_policy *p) {
  size_t n = (size_t)p->n_models, d = (size_t)p->d;
  return STATE_HDR + counters_bytes(p) +
         sizeof(double) * (2 * n * d * d + 2 * n * d + n * LAMBDA_BLOCK * d);
}

static void encode_header(const o3m_policy *p, unsigned char *h) {
  memset(h, 0, STATE_HDR);
  memcpy(h + F_MAGIC, STATE_MAGIC, 8);
  o3m_put_le32(h + F_VERSION, STATE_VERSION);
  o3m_put_le32(h + F_HDR_LEN, STATE_HDR);
  o3m_put_le32(h + F_ALGO, (uint32_t)p->cfg.algo);
  o3m_put_le32(h + F_MODEL, (uint32_t)p->cfg.model);
  o3m_put_le32(h + F_D, (uint32_t)p->d);
  o3m_put_le32(h + F_N_MODELS, (uint32_t)p->n_models);
  o3m_put_le32(h + F_FACTOR, (uint32_t)p->use_chol);
  o3m_put_le32(h + F_REFACTOR_EVERY, (uint32_t)p->cfg.refactor_every);
  o3m_put_le64(h + F_LAMBDA, o3m_double_bits(p->cfg.lambda));
  o3m_put_le64(h + F_UPDATES, p->updates);
  o3m_rng_state st;
  /* The policy's sampler is always a seeded one, whose state can be read. */
  int rc = o3m_rng_state_get(p->rng, &st);
  O3M_ASSERT(rc == O3M_OK);
  for (int i = 0; i < 4; i++) o3m_put_le64(h + F_RNG_S + 8 * i, st.s[i]);
  o3m_put_le64(h + F_RNG_HAVE_SPARE, st.have_spare);
  o3m_put_le64(h + F_RNG_SPARE, o3m_double_bits(st.spare));
  o3m_put_le64(h + F_LENGTH, (uint64_t)o3m_policy_state_size(p));
  o3m_put_le32(h + F_BLOCK, LAMBDA_BLOCK);
}

/* Checks a header against this policy. On success fills the sampler state
 * and the update counter to install; nothing is changed here. */
static int check_header(const o3m_policy *p, const unsigned char *h, o3m_rng_state *st,
                        uint64_t *updates, o3m_err *e) {
  if (memcmp(h + F_MAGIC, STATE_MAGIC, 8))
    return o3m_err_set(e, O3M_ECORRUPT, "policy state: bad magic");
  /* Another format version is another release's state, not damage: the
   * caller must refuse it rather than set it aside as corrupt. */
  if (o3m_get_le32(h + F_VERSION) != STATE_VERSION)
    return o3m_err_set(e, O3M_EDIM,
                       "policy state: format version %u, this build reads version %u (state "
                       "written by another release of o3m)",
                       (unsigned)o3m_get_le32(h + F_VERSION), STATE_VERSION);
  if (o3m_get_le32(h + F_HDR_LEN) != STATE_HDR)
    return o3m_err_set(e, O3M_ECORRUPT, "policy state: header length %u, expected %u",
                       (unsigned)o3m_get_le32(h + F_HDR_LEN), STATE_HDR);
  uint32_t algo = o3m_get_le32(h + F_ALGO), model = o3m_get_le32(h + F_MODEL);
  uint32_t d = o3m_get_le32(h + F_D), n = o3m_get_le32(h + F_N_MODELS), chol = o3m_get_le32(h + F_FACTOR);
  if (algo != (uint32_t)p->cfg.algo || model != (uint32_t)p->cfg.model)
    return o3m_err_set(e, O3M_EDIM, "policy state: saved by a %s %s policy, this one is %s %s",
                       model == O3M_MODEL_DISJOINT ? "disjoint" : "shared",
                       algo == O3M_ALGO_LINTS ? "lints" : "linucb",
                       o3m_model_name(p->cfg.model), o3m_algo_name(p->cfg.algo));
  if (d != (uint32_t)p->d)
    return o3m_err_set(e, O3M_EDIM, "policy state: d = %u, this policy has d = %d",
                       (unsigned)d, p->d);
  if (n != (uint32_t)p->n_models)
    return o3m_err_set(e, O3M_EDIM, "policy state: %u models (arms), this policy has %d",
                       (unsigned)n, p->n_models);
  if (chol != (uint32_t)p->use_chol)
    return o3m_err_set(e, O3M_ECORRUPT, "policy state: factor kind %u does not fit the algo",
                       (unsigned)chol);
  if (o3m_get_le64(h + F_LAMBDA) != o3m_double_bits(p->cfg.lambda))
    return o3m_err_set(e, O3M_EDIM, "policy state: lambda = %.17g, this policy has %.17g",
                       o3m_bits_double(o3m_get_le64(h + F_LAMBDA)), p->cfg.lambda);
  if (o3m_get_le32(h + F_BLOCK) != LAMBDA_BLOCK)
    return o3m_err_set(e, O3M_EDIM, "policy state: Lambda blocks of %u rows, this build uses %d",
                       (unsigned)o3m_get_le32(h + F_BLOCK), LAMBDA_BLOCK);
  if (o3m_get_le32(h + F_RESERVED) != 0)
    return o3m_err_set(e, O3M_ECORRUPT, "policy state: reserved header field is %u, not 0",
                       (unsigned)o3m_get_le32(h + F_RESERVED));
  if (o3m_get_le64(h + F_LENGTH) != (uint64_t)o3m_policy_state_size(p))
    return o3m_err_set(e, O3M_ECORRUPT, "policy state: length field %llu, expected %zu",
                       (unsigned long long)o3m_get_le64(h + F_LENGTH), o3m_policy_state_size(p));
  for (int i = 0; i < 4; i++) st->s[i] = o3m_get_le64(h + F_RNG_S + 8 * i);
  st->have_spare = o3m_get_le64(h + F_RNG_HAVE_SPARE);
  st->spare = o3m_bits_double(o3m_get_le64(h + F_RNG_SPARE));
  if (st->have_spare > 1 || (st->s[0] | st->s[1] | st->s[2] | st->s[3]) == 0 ||
      (st->have_spare == 1 && !isfinite(st->spare)))
    return o3m_err_set(e, O3M_ECORRUPT, "policy state: invalid sampler state");
  *updates = o3m_get_le64(h + F_UPDATES);
  return O3M_OK;
}

/* Hands n doubles to sink in little-endian order. */
static int sink_doubles(o3m_policy_sink sink, void *ctx, const double *a, size_t n) {
#if STATE_BIG_ENDIAN
  unsigned char buf[4096];
  size_t per = sizeof buf / 8;
  for (size_t i = 0; i < n; i += per) {
    size_t m = n - i < per ? n - i : per;
    for (size_t k = 0; k < m; k++) o3m_put_le64(buf + 8 * k, o3m_double_bits(a[i + k]));
    int rc = sink(ctx, buf, 8 * m);
    if (rc) return rc;
  }
  return O3M_OK;
#else
  return n ? sink(ctx, a, n * sizeof(double)) : O3M_OK;
#endif
}

/* Reads n little-endian doubles from src straight into a. */
static int source_doubles(o3m_policy_source src, void *ctx, double *a, size_t n) {
  int rc = n ? src(ctx, a, n * sizeof(double)) : O3M_OK;
#if STATE_BIG_ENDIAN
  if (!rc)
    for (size_t i = 0; i < n; i++) {
      uint64_t v;
      memcpy(&v, a + i, 8);
      v = __builtin_bswap64(v);
      memcpy(a + i, &v, 8);
    }
#endif
  return rc;
}

/* Hands n int32 counters to sink in little-endian order, in chunks of a
 * stack buffer. */
static int sink_counters(o3m_policy_sink sink, void *ctx, const int *a, size_t n) {
  unsigned char c[4096];
  size_t per = sizeof c / 4;
  for (size_t i = 0; i < n; i += per) {
    size_t m = n - i < per ? n - i : per;
    for (size_t k = 0; k < m; k++) o3m_put_le32(c + 4 * k, (uint32_t)a[i + k]);
    int rc = sink(ctx, c, 4 * m);
    if (rc) return rc;
  }
  return O3M_OK;
}

/* Whether a saved counter is valid: since_refactor >= 0 (which = 0), n_held
 * in 0..LAMBDA_BLOCK-1 (which = 1). Returns the phrase naming the problem,
 * or NULL. */
static const char *counter_problem(int which, int32_t v) {
  if (v < 0) return which ? "negative held-row count" : "negative counter";
  if (which && v >= LAMBDA_BLOCK) return "held-row count not below the block size";
  return NULL;
}

/* Reads n counters of the given kind from src into a. */
static int source_counters(o3m_policy_source src, void *ctx, int which, int *a, size_t n,
                           o3m_err *e) {
  unsigned char c[4096];
  size_t per = sizeof c / 4;
  for (size_t i = 0; i < n; i += per) {
    size_t m = n - i < per ? n - i : per;
    int rc = src(ctx, c, 4 * m);
    if (rc) return o3m_err_set(e, rc, "policy state: short read");
    for (size_t k = 0; k < m; k++) {
      int32_t v = (int32_t)o3m_get_le32(c + 4 * k);
      const char *bad = counter_problem(which, v);
      if (bad) return o3m_err_set(e, O3M_ECORRUPT, "policy state: model %zu: %s", i + k, bad);
      a[i + k] = v;
    }
  }
  return O3M_OK;
}

int o3m_policy_state_save(const o3m_policy *p, o3m_policy_sink sink, void *ctx) {
  unsigned char h[STATE_HDR];
  encode_header(p, h);
  int rc = sink(ctx, h, STATE_HDR);
  if (rc) return rc;
  size_t n = (size_t)p->n_models;
  if ((rc = sink_counters(sink, ctx, p->since_refactor, n))) return rc;
  if ((rc = sink_counters(sink, ctx, p->n_held, n))) return rc;
  size_t dd = n * p->d * p->d, dv = n * p->d;
  if ((rc = sink_doubles(sink, ctx, p->lambda_m, dd))) return rc;
  if ((rc = sink_doubles(sink, ctx, p->fac, dd))) return rc;
  if ((rc = sink_doubles(sink, ctx, p->u, dv))) return rc;
  if ((rc = sink_doubles(sink, ctx, p->theta, dv))) return rc;
  return sink_doubles(sink, ctx, p->held, dv * LAMBDA_BLOCK);
}

int o3m_policy_state_load(o3m_policy *p, o3m_policy_source src, void *ctx, o3m_err *e) {
  unsigned char h[STATE_HDR];
  int rc = src(ctx, h, STATE_HDR);
  if (rc) return o3m_err_set(e, rc, "policy state: cannot read the header");
  o3m_rng_state st;
  uint64_t updates;
  if ((rc = check_header(p, h, &st, &updates, e))) return rc;
  /* From here on the state is being overwritten. */
  p->kept_arm = -1;
  size_t n = (size_t)p->n_models;
  if ((rc = source_counters(src, ctx, 0, p->since_refactor, n, e)) ||
      (rc = source_counters(src, ctx, 1, p->n_held, n, e)))
    return rc;
  size_t dd = n * p->d * p->d, dv = n * p->d;
  if ((rc = source_doubles(src, ctx, p->lambda_m, dd)) ||
      (rc = source_doubles(src, ctx, p->fac, dd)) || (rc = source_doubles(src, ctx, p->u, dv)) ||
      (rc = source_doubles(src, ctx, p->theta, dv)) ||
      (rc = source_doubles(src, ctx, p->held, dv * LAMBDA_BLOCK)))
    return o3m_err_set(e, rc, "policy state: short read");
  o3m_rng_state_set(p->rng, &st); /* validated by check_header */
  p->updates = updates;
  return O3M_OK;
}

/* A sink and a source over one memory buffer. */
typedef struct mem_cursor {
  unsigned char *w;
  const unsigned char *r;
  size_t left;
} mem_cursor;

static int mem_sink(void *ctx, const void *buf, size_t len) {
  mem_cursor *m = ctx;
  if (len > m->left) return O3M_EINVAL;
  memcpy(m->w, buf, len);
  m->w += len;
  m->left -= len;
  return O3M_OK;
}

static int mem_source(void *ctx, void *buf, size_t len) {
  mem_cursor *m = ctx;
  if (len > m->left) return O3M_ECORRUPT;
  memcpy(buf, m->r, len);
  m->r += len;
  m->left -= len;
  return O3M_OK;
}

int o3m_policy_state_export(const o3m_policy *p, void *buf, size_t len) {
  if (len < o3m_policy_state_size(p)) return O3M_EINVAL;
  mem_cursor m = {.w = buf, .left = len};
  return o3m_policy_state_save(p, mem_sink, &m);
}

int o3m_policy_state_import(o3m_policy *p, const void *buf, size_t len, o3m_err *e) {
  const unsigned char *b = buf;
  if (len < STATE_HDR)
    return o3m_err_set(e, O3M_ECORRUPT, "policy state: %zu bytes, shorter than the header",
                       len);
  o3m_rng_state st;
  uint64_t updates;
  int rc = check_header(p, b, &st, &updates, e);
  if (rc) return rc;
  if (len != o3m_policy_state_size(p))
    return o3m_err_set(e, O3M_ECORRUPT, "policy state: %zu bytes, expected %zu", len,
                       o3m_policy_state_size(p));
  /* Check the counters before anything is written, so a failed import
   * leaves the state as it was. */
  size_t n = (size_t)p->n_models;
  for (size_t i = 0; i < 2 * n; i++) {
    const char *bad = counter_problem(i >= n, (int32_t)o3m_get_le32(b + STATE_HDR + 4 * i));
    if (bad) return o3m_err_set(e, O3M_ECORRUPT, "policy state: model %zu: %s", i % n, bad);
  }
  mem_cursor m = {.r = b, .left = len};
  return o3m_policy_state_load(p, mem_source, &m, e);
}

