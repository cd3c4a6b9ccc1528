/* eval_federate.h -- a synthetic federation: files to start it, and a driver
 * that streams a population through the real daemons.
 *
 * `o3m-eval gen-federation` writes everything a local federation needs
 * except certificates (scripts/make-certs.sh makes those): the config file,
 * each party's user and item tables, the item catalog, and the ground truth
 * of the simulated click model. `o3m-eval federate` is the front end: each
 * round it draws a user and K candidate items, asks the active participant to
 * recommend over gRPC, draws the click from the ground truth and sends the
 * reward; beside it, in the same process, it runs the centralized policy on
 * the concatenated raw features and the AP-only policy on the AP's own
 * columns, with the same clicks, and reports the three regrets and whether
 * every federated decision equalled the centralized one.
 *
 * A degraded answer (Recommendation.degraded: a passive party missing, the
 * AP decided with its local model) is checked against a third in-process
 * policy, a copy of the AP's local model (its columns, local_alpha and
 * local_lambda, every reward of the AP's decisions); the centralized policy
 * then learns the federated rounds only, as the AP's federated model does,
 * so the decisions after an outage are still compared exactly. --seconds
 * bounds the run in time and --trace writes when each round was answered
 * and whether it was degraded (the link-down test and benchmark read it).
 *
 * The driver reads every party's tables: it is the experimenter's oracle, not
 * a party, which is the only way to compare against a centralized run. */
#ifndef EVAL_FEDERATE_H
#define EVAL_FEDERATE_H

/* The click model: P(click | x) = 1 / (1 + exp(-(bias + scale x^T theta*))). */
#define EVAL_FED_BIAS (-2.0)
#define EVAL_FED_SCALE 1.0

#endif
