/*
 * bl_mpc: additive secret sharing over Z/2^64 with a trusted dealer (see
 * bl_mpc.h for the protocols, the counting rules and the ranges).
 *
 * Every party and the dealer own a ChaCha20 keystream (bl__prg). Ring
 * arithmetic is plain uint64_t arithmetic, whose wrap-around is reduction
 * mod 2^64. Dealer work runs between dealer_begin and dealer_end, which add
 * its wall time to the offline counter; everything else is online.
 */
#include "bl_mpc.h"

#include <math.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "o3m_clock.h"
#include "o3m_splitmix.h"

/* One ChaCha20 keystream: a 256-bit key and a counter used as the nonce of
 * each refill or bulk draw, so no (key, nonce) pair is ever reused. */
typedef struct bl__prg {
  unsigned char key[crypto_stream_chacha20_ietf_KEYBYTES];
  uint64_t nonce;
  uint64_t buf[512];
  int pos; /* next unread word of buf; 512 means empty */
} bl__prg;

struct bl_mpc {
  int N, F;
  bl__prg *prg; /* N + 1 streams: parties 0..N-1, then the dealer */
  uint64_t bytes;
  int rounds;
  double offline;
  double dealer_t0;
};

static void prg_bulk(bl__prg *g, uint64_t *out, long n) {
  unsigned char nonce[crypto_stream_chacha20_ietf_NONCEBYTES] = {0};
  memcpy(nonce, &g->nonce, sizeof g->nonce);
  g->nonce++;
  crypto_stream_chacha20_ietf((unsigned char *)out, (unsigned long long)n * 8u, nonce, g->key);
}

static uint64_t prg_u64(bl__prg *g) {
  if (g->pos >= 512) {
    prg_bulk(g, g->buf, 512);
    g->pos = 0;
  }
  return g->buf[g->pos++];
}

/* A uniform integer in [0, bound) for bound >= 1, by rejection (no bias). */
static uint64_t prg_below(bl__prg *g, uint64_t bound) {
  uint64_t lim = UINT64_MAX - UINT64_MAX % bound;
  uint64_t v;
  do v = prg_u64(g);
  while (v >= lim);
  return v % bound;
}

static bl__prg *dealer(bl_mpc *m) { return &m->prg[m->N]; }
static void dealer_begin(bl_mpc *m) { m->dealer_t0 = o3m_clock_s(); }
static void dealer_end(bl_mpc *m) { m->offline += o3m_clock_s() - m->dealer_t0; }

int bl_mpc_create(bl_mpc **out, int nparties, int frac_bits, const uint64_t *seed, o3m_err *e) {
  *out = NULL;
  if (nparties < 2 || nparties > 100000)
    return o3m_err_set(e, O3M_EINVAL, "mpc: need 2..100000 parties, got %d", nparties);
  if (frac_bits < 8 || frac_bits > 24)
    return o3m_err_set(e, O3M_EINVAL, "mpc: fractional bits must be 8..24, got %d", frac_bits);
  if (sodium_init() < 0) return o3m_err_set(e, O3M_ERANDOM, "mpc: libsodium failed to initialize");
  bl_mpc *m = calloc(1, sizeof *m);
  if (!m) return o3m_err_set(e, O3M_ENOMEM, "mpc: out of memory for the context");
  m->prg = calloc((size_t)nparties + 1, sizeof *m->prg);
  if (!m->prg) {
    free(m);
    return o3m_err_set(e, O3M_ENOMEM, "mpc: out of memory for %d random streams", nparties + 1);
  }
  m->N = nparties;
  m->F = frac_bits;
  for (int p = 0; p <= nparties; p++) {
    bl__prg *g = &m->prg[p];
    if (seed) {
      /* Key = BLAKE2b(seed || stream index): reproducible, not secret. */
      uint64_t in[2] = {*seed, (uint64_t)p};
      crypto_generichash(g->key, sizeof g->key, (const unsigned char *)in, sizeof in, NULL, 0);
    } else {
      randombytes_buf(g->key, sizeof g->key);
    }
    g->pos = 512;
  }
  *out = m;
  return 0;
}

void bl_mpc_destroy(bl_mpc *m) {
  if (!m) return;
  sodium_memzero(m->prg, sizeof *m->prg * ((size_t)m->N + 1));
  free(m->prg);
  free(m);
}

int bl_mpc_parties(const bl_mpc *m) { return m->N; }
int bl_mpc_frac_bits(const bl_mpc *m) { return m->F; }
double bl_mpc_max_input(const bl_mpc *m) { return ldexp(1.0, 31 - m->F); }
uint64_t bl_mpc_bytes(const bl_mpc *m) { return m->bytes; }
int bl_mpc_rounds(const bl_mpc *m) { return m->rounds; }
double bl_mpc_offline_seconds(const bl_mpc *m) { return m->offline; }

void bl_mpc_reset_counters(bl_mpc *m) {
  m->bytes = 0;
  m->rounds = 0;
  m->offline = 0.0;
}

uint64_t *bl_mpc_alloc(const bl_mpc *m, long n) {
  return calloc((size_t)m->N * (size_t)(n > 0 ? n : 1), sizeof(uint64_t));
}

uint64_t bl_mpc_encode(const bl_mpc *m, double v) {
  return (uint64_t)(int64_t)llround(ldexp(v, m->F));
}

double bl_mpc_decode(const bl_mpc *m, uint64_t v) { return ldexp((double)(int64_t)v, -m->F); }

/* The dealer's sharing of v[0..n) (ring elements): parties 1..N-1 get
 * uniform words, party 0 the difference. Offline, not counted. */
static void deal(bl_mpc *m, const uint64_t *v, long n, uint64_t *x) {
  bl__prg *g = dealer(m);
  if (v && v != x) memcpy(x, v, sizeof *x * (size_t)n);
  else if (!v) memset(x, 0, sizeof *x * (size_t)n);
  for (int p = 1; p < m->N; p++) {
    uint64_t *s = x + (size_t)p * (size_t)n;
    prg_bulk(g, s, n);
    for (long i = 0; i < n; i++) x[i] -= s[i];
  }
}

/* The dealer's XOR sharing of v[0..n) (binary words). */
static void deal_xor(bl_mpc *m, const uint64_t *v, long n, uint64_t *x) {
  bl__prg *g = dealer(m);
  if (v != x) memcpy(x, v, sizeof *x * (size_t)n);
  for (int p = 1; p < m->N; p++) {
    uint64_t *s = x + (size_t)p * (size_t)n;
    prg_bulk(g, s, n);
    for (long i = 0; i < n; i++) x[i] ^= s[i];
  }
}

/* Party owner shares the ring elements v[0..n) it holds: it draws the other
 * parties' shares from its own stream and sends them (counted by the caller,
 * which knows whether several owners share in the same round). */
static void owner_share(bl_mpc *m, int owner, const uint64_t *v, long n, uint64_t *x) {
  bl__prg *g = &m->prg[owner];
  uint64_t *mine = x + (size_t)owner * (size_t)n;
  memcpy(mine, v, sizeof *x * (size_t)n);
  for (int p = 0; p < m->N; p++) {
    if (p == owner) continue;
    uint64_t *s = x + (size_t)p * (size_t)n;
    prg_bulk(g, s, n);
    for (long i = 0; i < n; i++) mine[i] -= s[i];
  }
}

static int check_input(const bl_mpc *m, const double *v, long n, o3m_err *e) {
  double lim = bl_mpc_max_input(m);
  for (long i = 0; i < n; i++)
    if (!isfinite(v[i]) || fabs(v[i]) > lim)
      return o3m_err_set(e, O3M_ERANGE,
                         "mpc: input %ld is %g, outside the fixed-point range |v| <= %g "
                         "(%d fractional bits)",
                         i, v[i], lim, m->F);
  return 0;
}

static int share_words(bl_mpc *m, int owner, const uint64_t *w, long n, uint64_t *x, o3m_err *e) {
  if (owner == BL_MPC_STATE) {
    dealer_begin(m);
    deal(m, w, n, x);
    dealer_end(m);
    return 0;
  }
  if (owner < 0 || owner >= m->N)
    return o3m_err_set(e, O3M_EINVAL, "mpc: owner %d is not a party (0..%d)", owner, m->N - 1);
  owner_share(m, owner, w, n, x);
  m->bytes += 8u * (uint64_t)(m->N - 1) * (uint64_t)n;
  m->rounds++;
  return 0;
}

int bl_mpc_share(bl_mpc *m, int owner, const double *v, long n, uint64_t *x, o3m_err *e) {
  int rc = check_input(m, v, n, e);
  if (rc) return rc;
  uint64_t *w = malloc(sizeof *w * (size_t)(n > 0 ? n : 1));
  if (!w) return o3m_err_set(e, O3M_ENOMEM, "mpc: out of memory sharing %ld values", n);
  for (long i = 0; i < n; i++) w[i] = bl_mpc_encode(m, v[i]);
  rc = share_words(m, owner, w, n, x, e);
  free(w);
  return rc;
}

int bl_mpc_share_int(bl_mpc *m, int owner, const int64_t *v, long n, uint64_t *x, o3m_err *e) {
  return share_words(m, owner, (const uint64_t *)v, n, x, e);
}

int bl_mpc_share_cols(bl_mpc *m, const int *dims, const double *v, int rows, int cols, uint64_t *x,
                      o3m_err *e) {
  long n = (long)rows * cols;
  int rc = check_input(m, v, n, e);
  if (rc) return rc;
  long sum = 0;
  for (int p = 0; p < m->N; p++) sum += dims[p];
  if (sum != cols)
    return o3m_err_set(e, O3M_EDIM, "mpc: party widths sum to %ld, not %d columns", sum, cols);
  /* Each owner's values in place, zeros elsewhere; the owners' sharings add
   * up because sharing is linear. */
  for (long i = 0; i < (long)m->N * n; i++) x[i] = 0;
  uint64_t *w = malloc(sizeof *w * (size_t)(n > 0 ? n : 1));
  uint64_t *t = bl_mpc_alloc(m, n);
  if (!w || !t) {
    free(w);
    free(t);
    return o3m_err_set(e, O3M_ENOMEM, "mpc: out of memory sharing a %d x %d matrix", rows, cols);
  }
  int c0 = 0;
  for (int p = 0; p < m->N; p++) {
    for (int i = 0; i < rows; i++)
      for (int j = 0; j < cols; j++) {
        long k = (long)i * cols + j;
        w[k] = (j >= c0 && j < c0 + dims[p]) ? bl_mpc_encode(m, v[k]) : 0;
      }
    /* Only the owner's block carries information; the zeros elsewhere are
     * not sent (a real party would send shares of its block only). */
    owner_share(m, p, w, n, t);
    for (long i = 0; i < (long)m->N * n; i++) x[i] += t[i];
    m->bytes += 8u * (uint64_t)(m->N - 1) * (uint64_t)rows * (uint64_t)dims[p];
    c0 += dims[p];
  }
  m->rounds++;
  free(w);
  free(t);
  return 0;
}

/* The sum of the N shares of x (what every party computes from the
 * messages it received). */
static void reconstruct(const bl_mpc *m, const uint64_t *x, long n, uint64_t *out) {
  memcpy(out, x, sizeof *out * (size_t)n);
  for (int p = 1; p < m->N; p++) {
    const uint64_t *s = x + (size_t)p * (size_t)n;
    for (long i = 0; i < n; i++) out[i] += s[i];
  }
}

/* The sum of the N shares of x - a: what every party computes from the
 * opened messages x_p - a_p, without a buffer for the messages. */
static void reconstruct_diff(const bl_mpc *m, const uint64_t *x, const uint64_t *a, long n,
                             uint64_t *out) {
  for (long i = 0; i < n; i++) out[i] = x[i] - a[i];
  for (int p = 1; p < m->N; p++) {
    const uint64_t *xs = x + (size_t)p * (size_t)n, *as = a + (size_t)p * (size_t)n;
    for (long i = 0; i < n; i++) out[i] += xs[i] - as[i];
  }
}

static void reconstruct_xor(const bl_mpc *m, const uint64_t *x, long n, uint64_t *out) {
  memcpy(out, x, sizeof *out * (size_t)n);
  for (int p = 1; p < m->N; p++) {
    const uint64_t *s = x + (size_t)p * (size_t)n;
    for (long i = 0; i < n; i++) out[i] ^= s[i];
  }
}

static void count_open_all(bl_mpc *m, long n) {
  m->bytes += 8u * (uint64_t)m->N * (uint64_t)(m->N - 1) * (uint64_t)n;
}

int bl_mpc_open(bl_mpc *m, const uint64_t *x, long n, uint64_t *out, o3m_err *e) {
  (void)e;
  reconstruct(m, x, n, out);
  count_open_all(m, n);
  m->rounds++;
  return 0;
}

int bl_mpc_open_to(bl_mpc *m, int to, const uint64_t *x, long n, uint64_t *out, o3m_err *e) {
  if (to < 0 || to >= m->N)
    return o3m_err_set(e, O3M_EINVAL, "mpc: party %d does not exist (0..%d)", to, m->N - 1);
  reconstruct(m, x, n, out);
  m->bytes += 8u * (uint64_t)(m->N - 1) * (uint64_t)n;
  m->rounds++;
  return 0;
}

void bl_mpc_peek(const bl_mpc *m, const uint64_t *x, long n, uint64_t *out) {
  reconstruct(m, x, n, out);
}

void bl_mpc_add(const bl_mpc *m, uint64_t *z, const uint64_t *x, const uint64_t *y, long n) {
  for (long i = 0; i < (long)m->N * n; i++) z[i] = x[i] + y[i];
}

void bl_mpc_sub(const bl_mpc *m, uint64_t *z, const uint64_t *x, const uint64_t *y, long n) {
  for (long i = 0; i < (long)m->N * n; i++) z[i] = x[i] - y[i];
}

void bl_mpc_add_public(const bl_mpc *m, uint64_t *x, long n, const uint64_t *c, uint64_t c0) {
  (void)m;
  for (long i = 0; i < n; i++) x[i] += c ? c[i] : c0;
}

void bl_mpc_mul_int(const bl_mpc *m, uint64_t *x, long n, int64_t k) {
  for (long i = 0; i < (long)m->N * n; i++) x[i] *= (uint64_t)k;
}

int bl_mpc_trunc(bl_mpc *m, uint64_t *z, const uint64_t *x, long n, o3m_err *e) {
  const int F = m->F;
  uint64_t *rs = bl_mpc_alloc(m, 3 * n); /* shares of r, r >> F, msb(r) */
  uint64_t *c = malloc(sizeof *c * (size_t)(n > 0 ? n : 1));
  uint64_t *v = malloc(sizeof *v * (size_t)(n > 0 ? n : 1));
  if (!rs || !c || !v) {
    free(rs);
    free(c);
    free(v);
    return o3m_err_set(e, O3M_ENOMEM, "mpc: out of memory truncating %ld values", n);
  }
  /* Offline: the truncation pairs. */
  dealer_begin(m);
  uint64_t *r = rs, *rh = rs + (size_t)m->N * (size_t)n, *rb = rh + (size_t)m->N * (size_t)n;
  prg_bulk(dealer(m), v, n);
  deal(m, v, n, r);
  for (long i = 0; i < n; i++) c[i] = v[i] >> F;
  deal(m, c, n, rh);
  for (long i = 0; i < n; i++) c[i] = v[i] >> 63;
  deal(m, c, n, rb);
  dealer_end(m);
  /* Online: open c = x + 2^62 + r (uniform), then local shares. */
  bl_mpc_add(m, r, x, r, n);
  bl_mpc_add_public(m, r, n, NULL, (uint64_t)1 << 62);
  reconstruct(m, r, n, c);
  count_open_all(m, n);
  m->rounds++;
  for (int p = 0; p < m->N; p++) {
    uint64_t *zp = z + (size_t)p * (size_t)n;
    const uint64_t *hp = rh + (size_t)p * (size_t)n, *bp = rb + (size_t)p * (size_t)n;
    for (long i = 0; i < n; i++) {
      uint64_t wrap = (c[i] >> 63) ? 0 : bp[i] << (64 - F);
      zp[i] = wrap - hp[i];
      if (p == 0) zp[i] += (c[i] >> F) - ((uint64_t)1 << (62 - F));
    }
  }
  free(rs);
  free(c);
  free(v);
  return 0;
}

int bl_mpc_mul(bl_mpc *m, uint64_t *z, const uint64_t *x, const uint64_t *y, long n, int trunc,
               o3m_err *e) {
  size_t Nn = (size_t)m->N * (size_t)n;
  uint64_t *t = bl_mpc_alloc(m, 3 * n); /* a, b, c */
  uint64_t *ef = malloc(sizeof *ef * 2 * (size_t)(n > 0 ? n : 1));
  if (!t || !ef) {
    free(t);
    free(ef);
    return o3m_err_set(e, O3M_ENOMEM, "mpc: out of memory multiplying %ld values", n);
  }
  uint64_t *a = t, *b = t + Nn, *c = t + 2 * Nn;
  /* Offline: a Beaver triple c = a b (ring products). */
  dealer_begin(m);
  prg_bulk(dealer(m), a, n);
  prg_bulk(dealer(m), b, n);
  for (long i = 0; i < n; i++) c[i] = a[i] * b[i];
  deal(m, a, n, a);
  deal(m, b, n, b);
  deal(m, c, n, c);
  dealer_end(m);
  /* Online: open e = x - a and f = y - b together (one round). */
  reconstruct_diff(m, x, a, n, ef);
  reconstruct_diff(m, y, b, n, ef + n);
  count_open_all(m, 2 * n);
  m->rounds++;
  for (int p = 0; p < m->N; p++) {
    size_t o = (size_t)p * (size_t)n;
    for (long i = 0; i < n; i++) {
      uint64_t v = c[o + i] + ef[i] * b[o + i] + ef[n + i] * a[o + i];
      if (p == 0) v += ef[i] * ef[n + i];
      z[o + i] = v;
    }
  }
  free(t);
  free(ef);
  return trunc ? bl_mpc_trunc(m, z, z, n, e) : 0;
}

/* C (+)= A B over the ring, A r x k, B k x c, row-major. */
static void ring_gemm(int r, int k, int c, const uint64_t *A, const uint64_t *B, uint64_t *C,
                      int accumulate) {
  if (!accumulate) memset(C, 0, sizeof *C * (size_t)r * (size_t)c);
  for (int i = 0; i < r; i++)
    for (int l = 0; l < k; l++) {
      uint64_t a = A[(size_t)i * k + l];
      const uint64_t *b = B + (size_t)l * c;
      uint64_t *ci = C + (size_t)i * c;
      for (int j = 0; j < c; j++) ci[j] += a * b[j];
    }
}

int bl_mpc_matmul(bl_mpc *m, int nb, uint64_t *Z, const uint64_t *X, const uint64_t *Y, int r,
                  int k, int c, int trunc, o3m_err *e) {
  const long nx = (long)nb * r * k, ny = (long)nb * k * c, nz = (long)nb * r * c;
  const size_t N = (size_t)m->N;
  uint64_t *A = bl_mpc_alloc(m, nx), *B = bl_mpc_alloc(m, ny), *C = bl_mpc_alloc(m, nz);
  uint64_t *E = malloc(sizeof *E * (size_t)(nx + ny));
  int rc = 0;
  if (!A || !B || !C || !E) {
    rc = o3m_err_set(e, O3M_ENOMEM, "mpc: out of memory for %d products of %d x %d by %d x %d",
                     nb, r, k, k, c);
    goto out;
  }
  /* Offline: a matrix triple C = A B per batch. */
  dealer_begin(m);
  prg_bulk(dealer(m), A, nx);
  prg_bulk(dealer(m), B, ny);
  for (int b = 0; b < nb; b++)
    ring_gemm(r, k, c, A + (size_t)b * r * k, B + (size_t)b * k * c, C + (size_t)b * r * c, 0);
  deal(m, A, nx, A);
  deal(m, B, ny, B);
  deal(m, C, nz, C);
  dealer_end(m);
  /* Online: open E = X - A and F = Y - B in one round. */
  uint64_t *Eo = E, *Fo = E + nx;
  reconstruct_diff(m, X, A, nx, Eo);
  reconstruct_diff(m, Y, B, ny, Fo);
  count_open_all(m, nx + ny);
  m->rounds++;
  /* Z_p = C_p + E B_p + A_p F (+ E F at party 0). */
  for (size_t p = 0; p < N; p++)
    for (int b = 0; b < nb; b++) {
      uint64_t *zp = Z + p * (size_t)nz + (size_t)b * r * c;
      memcpy(zp, C + p * (size_t)nz + (size_t)b * r * c, sizeof *zp * (size_t)r * c);
      const uint64_t *eb = Eo + (size_t)b * r * k, *fb = Fo + (size_t)b * k * c;
      ring_gemm(r, k, c, eb, B + p * (size_t)ny + (size_t)b * k * c, zp, 1);
      ring_gemm(r, k, c, A + p * (size_t)nx + (size_t)b * r * k, fb, zp, 1);
      if (p == 0) ring_gemm(r, k, c, eb, fb, zp, 1);
    }
  if (trunc) rc = bl_mpc_trunc(m, Z, Z, nz, e);
out:
  free(A);
  free(B);
  free(C);
  free(E);
  return rc;
}

/* z = x AND y on XOR-shared words with the dealer's bit triples: one round
 * opening x ^ a and y ^ b (2 N(N-1) n words). */
static int and_words(bl_mpc *m, uint64_t *z, const uint64_t *x, const uint64_t *y, long n,
                     o3m_err *e) {
  size_t Nn = (size_t)m->N * (size_t)n;
  uint64_t *t = bl_mpc_alloc(m, 4 * n);
  uint64_t *de = malloc(sizeof *de * 2 * (size_t)(n > 0 ? n : 1));
  if (!t || !de) {
    free(t);
    free(de);
    return o3m_err_set(e, O3M_ENOMEM, "mpc: out of memory for %ld binary ANDs", n);
  }
  uint64_t *a = t, *b = t + Nn, *c = t + 2 * Nn, *s = t + 3 * Nn;
  dealer_begin(m);
  prg_bulk(dealer(m), a, n);
  prg_bulk(dealer(m), b, n);
  for (long i = 0; i < n; i++) c[i] = a[i] & b[i];
  deal_xor(m, a, n, a);
  deal_xor(m, b, n, b);
  deal_xor(m, c, n, c);
  dealer_end(m);
  for (size_t i = 0; i < Nn; i++) s[i] = x[i] ^ a[i];
  reconstruct_xor(m, s, n, de);
  for (size_t i = 0; i < Nn; i++) s[i] = y[i] ^ b[i];
  reconstruct_xor(m, s, n, de + n);
  count_open_all(m, 2 * n);
  m->rounds++;
  for (int p = 0; p < m->N; p++) {
    size_t o = (size_t)p * (size_t)n;
    for (long i = 0; i < n; i++) {
      uint64_t v = c[o + i] ^ (de[i] & b[o + i]) ^ (de[n + i] & a[o + i]);
      if (p == 0) v ^= de[i] & de[n + i];
      z[o + i] = v;
    }
  }
  free(t);
  free(de);
  return 0;
}

/* s = x + y mod 2^64 on XOR-shared words: a Kogge-Stone adder, one AND
 * round for the generate bits and one per prefix level (6 for 64 bits). */
static int add_words(bl_mpc *m, uint64_t *s, const uint64_t *x, const uint64_t *y, long n,
                     o3m_err *e) {
  size_t Nn = (size_t)m->N * (size_t)n;
  uint64_t *t = bl_mpc_alloc(m, 6 * n);
  if (!t) return o3m_err_set(e, O3M_ENOMEM, "mpc: out of memory adding %ld binary words", n);
  uint64_t *G = t, *P = t + Nn, *L = t + 2 * Nn, *R = t + 4 * Nn; /* L, R: 2n each */
  int rc = and_words(m, G, x, y, n, e);
  for (size_t i = 0; i < Nn && !rc; i++) P[i] = x[i] ^ y[i];
  for (int sh = 1; sh < 64 && !rc; sh <<= 1) {
    /* G = G ^ (P & (G << sh)); P = P & (P << sh), both ANDs in one round. */
    for (int p = 0; p < m->N; p++) {
      size_t o = (size_t)p * (size_t)n, o2 = (size_t)p * 2 * (size_t)n;
      for (long i = 0; i < n; i++) {
        L[o2 + i] = P[o + i];
        L[o2 + n + i] = P[o + i];
        R[o2 + i] = G[o + i] << sh;
        R[o2 + n + i] = P[o + i] << sh;
      }
    }
    rc = and_words(m, L, L, R, 2 * n, e);
    for (int p = 0; p < m->N && !rc; p++) {
      size_t o = (size_t)p * (size_t)n, o2 = (size_t)p * 2 * (size_t)n;
      for (long i = 0; i < n; i++) {
        G[o + i] ^= L[o2 + i];
        P[o + i] = L[o2 + n + i];
      }
    }
  }
  for (size_t i = 0; i < Nn && !rc; i++) s[i] = x[i] ^ y[i] ^ (G[i] << 1);
  free(t);
  return rc;
}

int bl_mpc_ge0(bl_mpc *m, uint64_t *z, const uint64_t *x, long n, o3m_err *e) {
  const int N = m->N;
  const size_t Nn = (size_t)N * (size_t)n;
  /* bin[q]: the XOR sharing of party q's arithmetic share, N shares each. */
  uint64_t *bin = bl_mpc_alloc(m, (long)N * n);
  uint64_t *tmp = bl_mpc_alloc(m, 2 * n);
  uint64_t *bits = malloc(sizeof *bits * (size_t)(n > 0 ? n : 1));
  int rc = 0;
  if (!bin || !tmp || !bits) {
    rc = o3m_err_set(e, O3M_ENOMEM, "mpc: out of memory comparing %ld values", n);
    goto out;
  }
  /* Arithmetic to binary, step 1: every party XOR-shares its own share
   * (all in one round, N(N-1) n words). */
  for (int q = 0; q < N; q++) {
    uint64_t *bq = bin + (size_t)q * Nn, *mine = bq + (size_t)q * (size_t)n;
    const uint64_t *xq = x + (size_t)q * (size_t)n;
    memcpy(mine, xq, sizeof *mine * (size_t)n);
    for (int p = 0; p < N; p++) {
      if (p == q) continue;
      uint64_t *s = bq + (size_t)p * (size_t)n;
      prg_bulk(&m->prg[q], s, n);
      for (long i = 0; i < n; i++) mine[i] ^= s[i];
    }
  }
  count_open_all(m, n);
  m->rounds++;
  /* Step 2: sum the N binary numbers by a tree of adders; the adders of one
   * level run side by side (their ANDs share rounds). */
  for (int have = N; have > 1 && !rc;) {
    int pairs = have / 2;
    long w = (long)pairs * n;
    uint64_t *xs = bl_mpc_alloc(m, 2 * w);
    if (!xs) {
      rc = o3m_err_set(e, O3M_ENOMEM, "mpc: out of memory in the comparison adder");
      break;
    }
    uint64_t *ys = xs + (size_t)N * (size_t)w;
    /* Gather operands 2j and 2j+1 of every pair into party-major batches. */
    for (int j = 0; j < pairs; j++)
      for (int p = 0; p < N; p++) {
        memcpy(xs + (size_t)p * w + (size_t)j * n, bin + (size_t)(2 * j) * Nn + (size_t)p * n,
               sizeof *xs * (size_t)n);
        memcpy(ys + (size_t)p * w + (size_t)j * n,
               bin + (size_t)(2 * j + 1) * Nn + (size_t)p * n, sizeof *ys * (size_t)n);
      }
    rc = add_words(m, xs, xs, ys, w, e);
    for (int j = 0; j < pairs && !rc; j++)
      for (int p = 0; p < N; p++)
        memcpy(bin + (size_t)j * Nn + (size_t)p * n, xs + (size_t)p * w + (size_t)j * n,
               sizeof *xs * (size_t)n);
    if (!rc && (have & 1))
      memmove(bin + (size_t)pairs * Nn, bin + (size_t)(have - 1) * Nn, sizeof *bin * Nn);
    free(xs);
    have = pairs + (have & 1);
  }
  if (rc) goto out;
  /* Binary to arithmetic for the most significant bit, with a doubly shared
   * random bit beta: open msb ^ beta (n bits per message), then
   * [msb] = c + (1 - 2c) [beta]. */
  uint64_t *ba = tmp, *bb = tmp + Nn;
  dealer_begin(m);
  for (long i = 0; i < n; i++) bits[i] = prg_u64(dealer(m)) & 1u;
  deal(m, bits, n, ba);
  deal_xor(m, bits, n, bb);
  dealer_end(m);
  for (size_t i = 0; i < Nn; i++) bb[i] ^= bin[i] >> 63;
  reconstruct_xor(m, bb, n, bits);
  m->bytes += (uint64_t)N * (uint64_t)(N - 1) * (uint64_t)((n + 7) / 8);
  m->rounds++;
  /* [x >= 0] = 1 - msb = (1 - c) - (1 - 2c) [beta]. */
  for (int p = 0; p < N; p++) {
    size_t o = (size_t)p * (size_t)n;
    for (long i = 0; i < n; i++) {
      uint64_t c = bits[i] & 1u;
      z[o + i] = (uint64_t)0 - (1u - 2u * c) * ba[o + i];
      if (p == 0) z[o + i] += 1u - c;
    }
  }
out:
  free(bin);
  free(tmp);
  free(bits);
  return rc;
}

int bl_mpc_rand_bernoulli(bl_mpc *m, double p, long n, uint64_t *x, o3m_err *e) {
  if (!(p >= 0.0 && p <= 1.0))
    return o3m_err_set(e, O3M_EINVAL, "mpc: Bernoulli probability %g is not in [0, 1]", p);
  dealer_begin(m);
  for (long i = 0; i < n; i++) x[i] = o3m_u64_to_unit(prg_u64(dealer(m))) < p;
  deal(m, x, n, x);
  dealer_end(m);
  return 0;
}

int bl_mpc_rand_uniform(bl_mpc *m, long n, uint64_t *x, o3m_err *e) {
  (void)e;
  dealer_begin(m);
  for (long i = 0; i < n; i++) x[i] = prg_u64(dealer(m)) >> (64 - m->F);
  deal(m, x, n, x);
  dealer_end(m);
  return 0;
}

int bl_mpc_rand_perm(bl_mpc *m, long n, uint64_t *x, o3m_err *e) {
  (void)e;
  dealer_begin(m);
  for (long i = 0; i < n; i++) x[i] = (uint64_t)i + 1;
  for (long i = n - 1; i > 0; i--) {
    long j = (long)prg_below(dealer(m), (uint64_t)i + 1);
    uint64_t t = x[i];
    x[i] = x[j];
    x[j] = t;
  }
  deal(m, x, n, x);
  dealer_end(m);
  return 0;
}

uint64_t bl_mpc_round_bytes(int d, int K, int N) {
  uint64_t D = (uint64_t)d, k = (uint64_t)K, n = (uint64_t)N;
  return 8u * (n - 1) * (k * D + 2 * k + n * (4 * k * D + D * D + D + 2 * k));
}

int bl_mpc_round(const bl_round *r, double *lin, double *quad, bl_cost *c, o3m_err *e) {
  int rc = bl_round_check(r, e);
  if (rc) return rc;
  const int d = r->d, K = r->K, N = r->N;
  bl_mpc *m = NULL;
  rc = bl_mpc_create(&m, N, BL_MPC_FRAC_BITS, NULL, e);
  if (rc) return rc;
  double *M = malloc(sizeof *M * (size_t)d * (size_t)(d + 1));
  uint64_t *sX = bl_mpc_alloc(m, (long)K * d), *sM = bl_mpc_alloc(m, (long)d * (d + 1));
  uint64_t *sZ = bl_mpc_alloc(m, (long)K * (d + 1)), *sY = bl_mpc_alloc(m, (long)K * d);
  uint64_t *sQ = bl_mpc_alloc(m, 2L * K), *out = malloc(sizeof *out * 2 * (size_t)K);
  if (!M || !sX || !sM || !sZ || !sY || !sQ || !out) {
    rc = o3m_err_set(e, O3M_ENOMEM, "mpc round: out of memory (d=%d K=%d N=%d)", d, K, N);
    goto out;
  }
  /* The model M = [Ainv | theta], d x (d + 1), exists only in shares. */
  for (int i = 0; i < d; i++) {
    memcpy(M + (size_t)i * (d + 1), r->Ainv + (size_t)i * d, sizeof *M * (size_t)d);
    M[(size_t)i * (d + 1) + d] = r->theta[i];
  }
  rc = bl_mpc_share(m, BL_MPC_STATE, M, (long)d * (d + 1), sM, e);
  if (rc) goto out;
  bl_mpc_reset_counters(m);
  double t0 = o3m_clock_s();
  /* Round 1: the parties share their column blocks of X. */
  rc = bl_mpc_share_cols(m, r->dims, r->X, K, d, sX, e);
  /* Rounds 2-3: Z = X M, truncated. */
  if (!rc) rc = bl_mpc_matmul(m, 1, sZ, sX, sM, K, d, d + 1, 1, e);
  if (rc) goto out;
  /* lin = Z[:, d] into sQ[0..K), Y = Z[:, 0..d). */
  for (int p = 0; p < N; p++) {
    const uint64_t *zp = sZ + (size_t)p * K * (d + 1);
    for (int k = 0; k < K; k++) {
      memcpy(sY + (size_t)p * K * d + (size_t)k * d, zp + (size_t)k * (d + 1),
             sizeof *sY * (size_t)d);
      sQ[(size_t)p * 2 * K + k] = zp[(size_t)k * (d + 1) + d];
    }
  }
  /* Round 4: Y o X elementwise; rows summed locally into sQ[K..2K). */
  rc = bl_mpc_mul(m, sY, sY, sX, (long)K * d, 0, e);
  if (rc) goto out;
  for (int p = 0; p < N; p++)
    for (int k = 0; k < K; k++) {
      uint64_t s = 0;
      const uint64_t *y = sY + (size_t)p * K * d + (size_t)k * d;
      for (int j = 0; j < d; j++) s += y[j];
      sQ[(size_t)p * 2 * K + K + k] = s;
    }
  /* Round 5: truncate the quadratic sums (in a K-long view of sQ). */
  {
    uint64_t *q = bl_mpc_alloc(m, K);
    if (!q) {
      rc = o3m_err_set(e, O3M_ENOMEM, "mpc round: out of memory (K=%d)", K);
      goto out;
    }
    for (int p = 0; p < N; p++)
      memcpy(q + (size_t)p * K, sQ + (size_t)p * 2 * K + K, sizeof *q * (size_t)K);
    rc = bl_mpc_trunc(m, q, q, K, e);
    for (int p = 0; p < N; p++)
      memcpy(sQ + (size_t)p * 2 * K + K, q + (size_t)p * K, sizeof *q * (size_t)K);
    free(q);
  }
  /* Round 6: open lin and quad to party 0, the active participant. */
  if (!rc) rc = bl_mpc_open_to(m, 0, sQ, 2L * K, out, e);
  if (rc) goto out;
  double wall = o3m_clock_s() - t0;
  for (int k = 0; k < K; k++) {
    lin[k] = bl_mpc_decode(m, out[k]);
    quad[k] = bl_mpc_decode(m, out[K + k]);
  }
  c->seconds = wall - bl_mpc_offline_seconds(m);
  c->offline_seconds = bl_mpc_offline_seconds(m);
  c->bytes = bl_mpc_bytes(m);
  c->rounds = bl_mpc_rounds(m);
  rc = bl_round_score(r, lin, quad, c, e);
out:
  free(M);
  free(sX);
  free(sM);
  free(sZ);
  free(sY);
  free(sQ);
  free(out);
  bl_mpc_destroy(m);
  return rc;
}
