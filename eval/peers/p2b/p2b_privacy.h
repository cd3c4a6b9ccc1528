/* p2b_privacy.h -- P2B's differential-privacy accounting (Malekzadeh et al.,
 * "Privacy-Preserving Bandits", MLSys 2020, section 4).
 *
 * P2B releases a user's encoded tuple only if (i) the user's agent elects to
 * participate, with probability p (pre-sampling), and (ii) the tuple's code
 * is shared by at least l - 1 other released tuples (the shuffler's
 * threshold: (l, eps_bar)-crowd-blending). Following Gehrke et al. (2012),
 * pre-sampling followed by crowd-blending is (epsilon, delta)-differentially
 * private with (the paper's equation 2)
 *
 *   epsilon = ln( p * ((2 - p) / (1 - p)) * e^eps_bar + (1 - p) )
 *
 * and delta = e^(-Omega(l (1 - p)^2)) (equation 3), whose constant the paper
 * does not give; so delta is reported only as its exponent's scale
 * l (1 - p)^2. P2B's encoder gives eps_bar = 0, so epsilon depends on p alone
 * (ln 2 ~ 0.693 at p = 0.5, the paper's setting). m tuples from one user
 * compose to m * epsilon. */
#ifndef P2B_PRIVACY_H
#define P2B_PRIVACY_H

#include "o3m_error.h"

/* epsilon of pre-sampling with probability p followed by
 * (l, eps_bar)-crowd-blending, into *eps. p must lie in (0, 1) (p = 1 gives
 * no guarantee: the formula diverges; p = 0 releases nothing) and eps_bar
 * must be finite and >= 0; otherwise O3M_EINVAL naming the value, *eps
 * untouched. */
int p2b_epsilon(double p, double eps_bar, double *eps, o3m_err *e);

/* The scale l (1 - p)^2 of delta's exponent, delta = e^(-Omega(l (1-p)^2)):
 * a larger value means an exponentially smaller delta. l >= 1 and p in
 * [0, 1), else O3M_EINVAL. */
int p2b_delta_exponent(int l, double p, double *scale, o3m_err *e);

#endif
