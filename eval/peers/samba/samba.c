/* samba.c -- Samba's plain and secure runs (see samba.h).
 *
 * One engine serves both: the scores, the selection and every random
 * stream are the same code; the secure run only routes the scores and the
 * pulling bits through AES-GCM, the Controller's permutation and Comp, and
 * sums the rewards under Paillier. All parties live in this process, each
 * touching only its own fields (the DO arrays by index, Comp's stream, the
 * Controller's streams); the time of each role is measured separately. */
#include "samba.h"

#include <math.h>
#include <openssl/rand.h>
#include <stdlib.h>
#include <string.h>

#include "o3m_clock.h"
#include "o3m_splitmix.h"
#include "samba_aead.h"

/* A DO's score message: random nonce, the masked score (binary64, little
 * endian), the tag. Comp's bit message: its nonce, one byte, the tag. */
#define SCORE_MSG (SAMBA_AEAD_NONCE + 8 + SAMBA_AEAD_TAG)
#define BIT_MSG (SAMBA_AEAD_NONCE + 1 + SAMBA_AEAD_TAG)
/* Comp's sender id in its nonces (DOs use random nonces). */
#define COMP_SENDER 0xC0C0C0C0u
/* The mask's exponent range: alpha_t = 2^e, e in 0..MASK_EXP. */
#define MASK_EXP 40

static const char *const algo_names[SAMBA_N_ALGOS] = {"eps-fixed", "eps-decay", "ucb",
                                                      "ts",        "softmax",   "pursuit"};

const char *samba_algo_name(samba_algo a) {
  return a >= 0 && a < SAMBA_N_ALGOS ? algo_names[a] : "unknown";
}

int samba_algo_parse(const char *s, samba_algo *out) {
  for (int a = 0; a < SAMBA_N_ALGOS; a++)
    if (!strcmp(s, algo_names[a])) {
      *out = (samba_algo)a;
      return O3M_OK;
    }
  return O3M_EINVAL;
}

void samba_config_default(samba_config *c) {
  memset(c, 0, sizeof *c);
  c->eps = 0.1;
  c->tau = 0.1;
  c->beta = 0.1;
  c->seed = 1;
}

typedef struct run {
  const samba_config *c;
  int K, secure;
  /* data owners */
  long long *s, *n;
  double *p;                /* Pursuit's probabilities */
  uint64_t *rew_st, *ts_st; /* each DO's reward and sampling streams */
  uint64_t coin_st;         /* epsilon-greedy's explore coins (seed shared by the DOs) */
  uint64_t mask_st;         /* the masks' seed (from the Controller, known to the DOs) */
  /* Controller and Comp */
  uint64_t perm_st, comp_st;
  int *sigma;
  double *v, *pv; /* scores by arm; scores by permuted position */
  /* secure transport */
  samba_aead *do_key, *comp_key; /* one shared key, one context per holder */
  uint8_t *ct_do, *ct_perm, *ct_bits, *ct_back;
  uint64_t comp_counter;
  samba_result *r;
} run;

/* Gamma(a, 1) for a >= 1 (Marsaglia and Tsang, 2000). */
static double gamma_draw(uint64_t *st, double a) {
  double d = a - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
  for (;;) {
    double x, unused, v;
    do {
      o3m_splitmix64_gauss2(st, &x, &unused);
      v = 1.0 + c * x;
    } while (v <= 0);
    v = v * v * v;
    double u = o3m_splitmix64_unif(st);
    if (u < 1.0 - 0.0331 * x * x * x * x) return d * v;
    if (log(u) < 0.5 * x * x + d * (1.0 - v + log(v))) return d * v;
  }
}

/* DO i's score at time t for the given iteration (Pursuit: 0 argmax of the
 * means, 1 its probability); explore is epsilon-greedy's coin. */
static double score(run *R, int i, long t, int iter, int explore) {
  const samba_config *c = R->c;
  double mu = (double)R->s[i] / (double)R->n[i];
  switch (c->algo) {
    case SAMBA_EPS_FIXED:
    case SAMBA_EPS_DECAY: return explore ? 0.0 : mu;
    case SAMBA_UCB: return mu + sqrt(2.0 * log((double)t) / (double)R->n[i]);
    case SAMBA_TS: {
      double x = gamma_draw(&R->ts_st[i], (double)R->s[i] + 1.0);
      double y = gamma_draw(&R->ts_st[i], (double)(R->n[i] - R->s[i]) + 1.0);
      return x / (x + y);
    }
    case SAMBA_SOFTMAX: return exp(mu / c->tau);
    case SAMBA_PURSUIT: return iter == 0 ? mu : R->p[i];
    default: return 0.0;
  }
}

/* Comp's selection over the values in scan order: the first maximum, or a
 * draw proportional to the values. Either way one uniform draw is made, so
 * Comp's stream advances the same for every kind. */
static int comp_select(uint64_t *st, const double *pv, int K, int match) {
  double u = o3m_splitmix64_unif(st);
  if (!match) {
    int best = 0;
    for (int j = 1; j < K; j++)
      if (pv[j] > pv[best]) best = j;
    return best;
  }
  double total = 0;
  for (int j = 0; j < K; j++) total += pv[j];
  double target = u * total, acc = 0;
  int last = 0;
  for (int j = 0; j < K; j++) {
    if (pv[j] > 0) last = j;
    acc += pv[j];
    if (target < acc) return j;
  }
  return last;
}

/* One run of the core (steps 2-5): the scores R->v go to Comp, which picks
 * one arm; *arm is it. Plain runs scan the same permutation. */
static int core(run *R, int match, int *arm, o3m_err *e) {
  const int K = R->K;
  samba_result *r = R->r;
  double t0 = 0;
  /* Controller: a fresh permutation. */
  if (R->secure) t0 = o3m_clock_s();
  for (int j = 0; j < K; j++) R->sigma[j] = j;
  for (int j = K - 1; j > 0; j--) {
    int k = (int)(o3m_splitmix64(&R->perm_st) % (uint64_t)(j + 1));
    int tmp = R->sigma[j];
    R->sigma[j] = R->sigma[k];
    R->sigma[k] = tmp;
  }
  r->iterations++;
  if (!R->secure) {
    for (int j = 0; j < K; j++) R->pv[j] = R->v[R->sigma[j]];
    *arm = R->sigma[comp_select(&R->comp_st, R->pv, K, match)];
    return O3M_OK;
  }
  double t1 = o3m_clock_s();
  r->sec_ctrl += t1 - t0;
  int rc;
  /* DOs: mask, encrypt under the DO-Comp key with a random nonce. */
  int ex = (int)(o3m_splitmix64(&R->mask_st) % (MASK_EXP + 1));
  for (int i = 0; i < K; i++) {
    uint8_t *m = R->ct_do + (size_t)i * SCORE_MSG, pt[8];
    double masked = ldexp(R->v[i], ex);
    uint64_t bits;
    memcpy(&bits, &masked, 8);
    for (int b = 0; b < 8; b++) pt[b] = (uint8_t)(bits >> (8 * b));
    if (RAND_bytes(m, SAMBA_AEAD_NONCE) != 1)
      return o3m_err_set(e, O3M_ERANDOM, "samba: RAND_bytes failed to draw a nonce");
    if ((rc = samba_aead_seal_nonce(R->do_key, m, NULL, 0, pt, 8, m + SAMBA_AEAD_NONCE, e)))
      return rc;
  }
  double t2 = o3m_clock_s();
  r->sec_do += t2 - t1;
  /* Controller: forward in permuted order. */
  for (int j = 0; j < K; j++)
    memcpy(R->ct_perm + (size_t)j * SCORE_MSG, R->ct_do + (size_t)R->sigma[j] * SCORE_MSG,
           SCORE_MSG);
  double t3 = o3m_clock_s();
  r->sec_ctrl += t3 - t2;
  /* Comp: decrypt, select, encrypt the pulling bits. */
  for (int j = 0; j < K; j++) {
    const uint8_t *m = R->ct_perm + (size_t)j * SCORE_MSG;
    uint8_t pt[8];
    if ((rc = samba_aead_open_nonce(R->comp_key, m, NULL, 0, m + SAMBA_AEAD_NONCE, 8, pt, e)))
      return rc;
    uint64_t bits = 0;
    for (int b = 0; b < 8; b++) bits |= (uint64_t)pt[b] << (8 * b);
    memcpy(&R->pv[j], &bits, 8);
  }
  int jstar = comp_select(&R->comp_st, R->pv, K, match);
  for (int j = 0; j < K; j++) {
    uint8_t *m = R->ct_bits + (size_t)j * BIT_MSG, bit = j == jstar;
    samba_aead_nonce(COMP_SENDER, R->comp_counter++, m);
    if ((rc = samba_aead_seal_nonce(R->comp_key, m, NULL, 0, &bit, 1, m + SAMBA_AEAD_NONCE, e)))
      return rc;
  }
  double t4 = o3m_clock_s();
  r->sec_comp += t4 - t3;
  /* Controller: undo the permutation. */
  for (int j = 0; j < K; j++)
    memcpy(R->ct_back + (size_t)R->sigma[j] * BIT_MSG, R->ct_bits + (size_t)j * BIT_MSG, BIT_MSG);
  double t5 = o3m_clock_s();
  r->sec_ctrl += t5 - t4;
  /* DOs: each opens its bit; exactly one may be set. */
  int ones = 0;
  for (int i = 0; i < K; i++) {
    const uint8_t *m = R->ct_back + (size_t)i * BIT_MSG;
    uint8_t bit;
    if ((rc = samba_aead_open_nonce(R->do_key, m, NULL, 0, m + SAMBA_AEAD_NONCE, 1, &bit, e)))
      return rc;
    if (bit) ones++, *arm = i;
  }
  r->sec_do += o3m_clock_s() - t5;
  r->aes_ops += 4LL * K;
  if (ones != 1)
    return o3m_err_set(e, O3M_ESTATE, "samba: %d data owners got a pulling bit, not 1", ones);
  return O3M_OK;
}

static void pull(run *R, int i) {
  long long rew = o3m_splitmix64_unif(&R->rew_st[i]) < R->c->mu[i];
  R->s[i] += rew;
  R->n[i]++;
  /* FNV-1a over the arm indices. */
  for (int b = 0; b < 4; b++) R->r->pulls_hash = (R->r->pulls_hash ^ ((uint32_t)i >> (8 * b) & 0xff)) * 0x100000001b3ull;
}

static int check_config(const samba_config *c, o3m_err *e) {
  if (c->algo < 0 || c->algo >= SAMBA_N_ALGOS)
    return o3m_err_set(e, O3M_EINVAL, "samba: unknown algorithm %d", (int)c->algo);
  if (c->K < 2 || c->K > SAMBA_MAX_K)
    return o3m_err_set(e, O3M_EINVAL, "samba: K = %d arms is not in 2..%d", c->K, SAMBA_MAX_K);
  if (c->N < c->K)
    return o3m_err_set(e, O3M_EINVAL, "samba: budget N = %ld is below K = %d (each arm is pulled once)",
                       c->N, c->K);
  if (!c->mu) return o3m_err_set(e, O3M_EINVAL, "samba: no arm means");
  for (int i = 0; i < c->K; i++)
    if (!(c->mu[i] >= 0 && c->mu[i] <= 1))
      return o3m_err_set(e, O3M_EINVAL, "samba: mean of arm %d, %g, is not in [0, 1]", i, c->mu[i]);
  if (!(c->eps >= 0 && c->eps <= 1))
    return o3m_err_set(e, O3M_EINVAL, "samba: epsilon %g is not in [0, 1]", c->eps);
  if (!(c->eps_c >= 0 && isfinite(c->eps_c)))
    return o3m_err_set(e, O3M_EINVAL, "samba: decreasing epsilon's constant %g is negative", c->eps_c);
  if (!(c->tau >= 0.01 && isfinite(c->tau)))
    return o3m_err_set(e, O3M_EINVAL, "samba: Softmax temperature %g is below 0.01 (e^(1/tau) overflows the mask)",
                       c->tau);
  if (!(c->beta > 0 && c->beta < 1))
    return o3m_err_set(e, O3M_EINVAL, "samba: Pursuit rate %g is not in (0, 1)", c->beta);
  return O3M_OK;
}

static void run_free(run *R) {
  samba_aead_destroy(R->comp_key);
  samba_aead_destroy(R->do_key);
  free(R->ct_back);
  free(R->ct_bits);
  free(R->ct_perm);
  free(R->ct_do);
  free(R->pv);
  free(R->v);
  free(R->sigma);
  free(R->ts_st);
  free(R->rew_st);
  free(R->p);
  free(R->n);
  free(R->s);
}

/* The cumulative reward under Paillier: E(s_i) by every DO with the DC's
 * public key, their product by the Controller, decryption by the DC. */
static int paillier_sum(run *R, const bl_paillier *dc, long long *sum, o3m_err *e) {
  double t0 = o3m_clock_s();
  bl_paillier *pub = NULL;
  bl_pct *acc = NULL, *c = NULL;
  int rc = bl_paillier_public(dc, &pub, e);
  if (rc || (rc = bl_pct_new(pub, &acc, e)) || (rc = bl_pct_new(pub, &c, e))) goto out;
  for (int i = 0; i < R->K; i++) {
    double a = o3m_clock_s();
    if ((rc = bl_paillier_encrypt_i64(pub, R->s[i], i ? c : acc, e))) goto out;
    double b = o3m_clock_s();
    R->r->sec_do += b - a;
    if (i) bl_paillier_add(pub, acc, acc, c); /* Controller */
    R->r->sec_ctrl += o3m_clock_s() - b;
  }
  double t2 = o3m_clock_s();
  int64_t m;
  if ((rc = bl_paillier_decrypt_i64(dc, acc, &m, e))) goto out;
  R->r->sec_dc += o3m_clock_s() - t2;
  R->r->paillier_ops += 2LL * R->K;
  *sum = m;
out:
  bl_pct_free(c);
  bl_pct_free(acc);
  bl_paillier_free(pub);
  R->r->sec_paillier += o3m_clock_s() - t0;
  return rc;
}

static int run_one(const samba_config *c, const bl_paillier *dc, samba_result *res, o3m_err *e) {
  int rc = check_config(c, e);
  if (rc) return rc;
  if (dc && !bl_paillier_has_secret(dc))
    return o3m_err_set(e, O3M_EINVAL, "samba: the DC's Paillier key has no secret part");
  const int K = c->K;
  samba_result r = {.pulls_hash = 0xcbf29ce484222325ull};
  run R = {.c = c, .K = K, .secure = dc != NULL, .r = &r};
  R.s = calloc((size_t)K, sizeof *R.s);
  R.n = calloc((size_t)K, sizeof *R.n);
  R.p = malloc((size_t)K * sizeof *R.p);
  R.rew_st = malloc((size_t)K * sizeof *R.rew_st);
  R.ts_st = malloc((size_t)K * sizeof *R.ts_st);
  R.sigma = malloc((size_t)K * sizeof *R.sigma);
  R.v = malloc((size_t)K * sizeof *R.v);
  R.pv = malloc((size_t)K * sizeof *R.pv);
  if (!R.s || !R.n || !R.p || !R.rew_st || !R.ts_st || !R.sigma || !R.v || !R.pv) {
    rc = o3m_err_set(e, O3M_ENOMEM, "samba: out of memory for K = %d", K);
    goto out;
  }
  if (R.secure) {
    uint8_t key[SAMBA_AEAD_KEY];
    R.ct_do = malloc((size_t)K * SCORE_MSG);
    R.ct_perm = malloc((size_t)K * SCORE_MSG);
    R.ct_bits = malloc((size_t)K * BIT_MSG);
    R.ct_back = malloc((size_t)K * BIT_MSG);
    if (!R.ct_do || !R.ct_perm || !R.ct_bits || !R.ct_back) {
      rc = o3m_err_set(e, O3M_ENOMEM, "samba: out of memory for K = %d messages", K);
      goto out;
    }
    /* The key shared by the DOs and Comp before the protocol starts. */
    if ((rc = samba_aead_create(&R.comp_key, NULL, e))) goto out;
    samba_aead_key(R.comp_key, key);
    rc = samba_aead_create(&R.do_key, key, e);
    memset(key, 0, sizeof key);
    if (rc) goto out;
  }
  for (int i = 0; i < K; i++) {
    R.rew_st[i] = o3m_splitmix64_stream(c->seed, 1, (uint64_t)i + 1);
    R.ts_st[i] = o3m_splitmix64_stream(c->seed, 2, (uint64_t)i + 1);
    R.p[i] = 1.0 / K;
  }
  R.coin_st = o3m_splitmix64_stream(c->seed, 3, 1);
  R.mask_st = o3m_splitmix64_stream(c->seed, 4, 1);
  R.perm_st = o3m_splitmix64_stream(c->seed, 5, 1);
  R.comp_st = o3m_splitmix64_stream(c->seed, 6, 1);
  double eps_c = c->eps_c > 0 ? c->eps_c : 5.0 * K;

  double start = o3m_clock_s();
  /* Every arm once (Figure 3's initialization; each DO pulls its own). */
  for (int i = 0; i < K; i++) pull(&R, i);
  for (long t = K + 1; t <= c->N; t++) {
    int arm = -1, explore = 0;
    if (c->algo == SAMBA_EPS_FIXED || c->algo == SAMBA_EPS_DECAY) {
      double eps = c->algo == SAMBA_EPS_FIXED ? c->eps : fmin(1.0, eps_c / (double)t);
      explore = o3m_splitmix64_unif(&R.coin_st) < eps;
    }
    double a = R.secure ? o3m_clock_s() : 0;
    for (int i = 0; i < K; i++) R.v[i] = score(&R, i, t, 0, explore);
    if (R.secure) r.sec_do += o3m_clock_s() - a;
    int match = c->algo == SAMBA_SOFTMAX;
    if ((rc = core(&R, match, &arm, e))) goto out;
    if (c->algo == SAMBA_PURSUIT) {
      /* Iteration 1 told each DO whether its mean is the largest; each
       * moves its probability, then iteration 2 matches on them. */
      for (int i = 0; i < K; i++) R.p[i] += c->beta * ((i == arm ? 1.0 : 0.0) - R.p[i]);
      for (int i = 0; i < K; i++) R.v[i] = score(&R, i, t, 1, 0);
      if ((rc = core(&R, 1, &arm, e))) goto out;
    }
    pull(&R, arm);
  }
  long long total = 0;
  for (int i = 0; i < K; i++) total += R.s[i];
  if (R.secure) {
    long long sum = -1;
    if ((rc = paillier_sum(&R, dc, &sum, e))) goto out;
    if (sum != total) {
      rc = o3m_err_set(e, O3M_ESTATE, "samba: the DC decrypted %lld, the DOs hold %lld", sum, total);
      goto out;
    }
    total = sum;
  }
  r.reward = total;
  r.seconds = o3m_clock_s() - start;
  *res = r;
out:
  run_free(&R);
  return rc;
}

int samba_run_plain(const samba_config *c, samba_result *r, o3m_err *e) {
  return run_one(c, NULL, r, e);
}

int samba_run_secure(const samba_config *c, const bl_paillier *dc, samba_result *r, o3m_err *e) {
  if (!dc) return o3m_err_set(e, O3M_EINVAL, "samba: the secure run needs the DC's Paillier key");
  return run_one(c, dc, r, e);
}

int samba_run_both(const samba_config *c, const bl_paillier *dc, samba_result *plain,
                   samba_result *secure, o3m_err *e) {
  samba_result p, s;
  int rc = samba_run_plain(c, &p, e);
  if (rc || (rc = samba_run_secure(c, dc, &s, e))) return rc;
  if (p.reward != s.reward || p.pulls_hash != s.pulls_hash)
    return o3m_err_set(e, O3M_ESTATE,
                       "samba %s, K %d, N %ld, seed %llu: secure reward %lld differs from plain "
                       "%lld (pull sequences %s)",
                       samba_algo_name(c->algo), c->K, c->N, (unsigned long long)c->seed,
                       s.reward, p.reward, p.pulls_hash == s.pulls_hash ? "equal" : "differ");
  *plain = p;
  *secure = s;
  return O3M_OK;
}
