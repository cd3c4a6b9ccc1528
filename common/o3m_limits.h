/* o3m_limits.h: the one home of the project's size limits.
 *
 * Every module that bounds a dimension, an id or a count by one of these
 * takes it from here, so that a config the loader accepts is also one the
 * policy, the masks, the wire and the feature tables accept. Plain
 * constants: no functions, no state, safe from any thread. */
#ifndef O3M_LIMITS_H
#define O3M_LIMITS_H

/* Largest context dimension d (and any party's dims). A block of
 * d x d float64 values at this size is 128 MiB, the most the PMG, a stored
 * block and one gRPC message are sized for; the O(d^3) policy update would
 * be impractical well before it. */
#define O3M_MAX_DIM 4096

/* Longest user or item id in bytes, the one id limit of the whole
 * federation: feature tables, the disjoint model's catalog and the ids of a
 * Recommend request (longer ones are refused before any passive party is
 * asked). 128 bytes holds any UUID, hash or URL-safe key in use, and keeps a
 * request of the most candidates bounded on the wire. */
#define O3M_MAX_ID 128

/* Most arms of the disjoint model (catalog items) and most candidates of one
 * Recommend request. A million keeps the disjoint model's per-arm state and
 * one request's scores within memory reserved at init. */
#define O3M_MAX_ARMS 1000000
#define O3M_MAX_CANDIDATES 1000000

/* Largest magnitude of a number o3m-eval reads from a data file (a stream
 * file's contexts and rewards, a logged table's numeric features); larger
 * ones are refused naming the line and the value. Below it x . x of a
 * context of O3M_MAX_DIM values (4096 x 1e300 = 4e303) and a sum of
 * rewards over any feasible number of rounds (1e158 of them) stay finite,
 * so such a file cannot make the policy fail later with "not finite" or a
 * cumulative reward print as inf. Subnormal values are accepted. */
#define O3M_MAX_INPUT_ABS 1e150

#endif
