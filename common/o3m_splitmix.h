/* o3m_splitmix.h -- the splitmix64 stream, uniform doubles and Box-Muller
 * normals from it (and from any generator's 64-bit words).
 *
 * splitmix64 (Steele, Lea and Flood) is a 64-bit state that advances by a
 * fixed odd constant, each value finalized by two multiply-xorshift rounds.
 * It is tiny, has no bad seeds, and a stream is a pure function of its
 * seed, which is what its three users need: the seeded generator's state
 * expansion (o3m_rng), a passive party's dummy rows, one stream per id
 * (o3m_features), o3m-eval's synthetic tables (eval_tables) and the seeds
 * of its simulators' draws (o3m_splitmix64_stream). Not
 * cryptographically secure; the dummy rows get their unpredictability from
 * the keyed hash that seeds the stream. */
#ifndef O3M_SPLITMIX_H
#define O3M_SPLITMIX_H

#include <math.h>
#include <stdint.h>

/* Advances *s and returns its next value. */
static inline uint64_t o3m_splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* The first value of the stream for (seed, tag, i): the seed mixed with a
 * tag (which draw: rewards, shuffles, ...) and an index (which agent or
 * arm) by two odd constants, then one step. The simulators of o3m-eval
 * (p2b, samba) seed each of their independent draws this way, so that a
 * run is a pure function of its seed. Distinct (tag, i) pairs give
 * unrelated seeds; the same pair always the same. */
static inline uint64_t o3m_splitmix64_stream(uint64_t seed, uint64_t tag, uint64_t i) {
  uint64_t s = seed ^ (tag * 0xd1b54a32d192ed03ull) ^ (i * 0x9e3779b97f4a7c15ull);
  return o3m_splitmix64(&s);
}

/* The top 53 bits of a uniform 64-bit word w as a uniform double in
 * [0, 1): every value is a multiple of 2^-53, exactly. Any generator's
 * words will do (o3m_rng's, a PRG's), not only this stream's. */
static inline double o3m_u64_to_unit(uint64_t w) { return (double)(w >> 11) * 0x1.0p-53; }

/* A uniform double in [0, 1) from the stream's next value. */
static inline double o3m_splitmix64_unif(uint64_t *s) { return o3m_u64_to_unit(o3m_splitmix64(s)); }

/* Two independent standard normals from two uniform 64-bit words by
 * Box-Muller; u1 in (0, 1] keeps the logarithm finite. */
static inline void o3m_box_muller(uint64_t w1, uint64_t w2, double *a, double *b) {
  double u1 = ((double)(w1 >> 11) + 1.0) * 0x1.0p-53;
  double u2 = o3m_u64_to_unit(w2);
  double r = sqrt(-2.0 * log(u1));
  *a = r * cos(2.0 * M_PI * u2);
  *b = r * sin(2.0 * M_PI * u2);
}

/* Two independent standard normals from two values of the stream. */
static inline void o3m_splitmix64_gauss2(uint64_t *s, double *a, double *b) {
  uint64_t w1 = o3m_splitmix64(s);
  o3m_box_muller(w1, o3m_splitmix64(s), a, b);
}

#endif
