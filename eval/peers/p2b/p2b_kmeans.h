/* p2b_kmeans.h -- the k-means encoder of P2B's local agents.
 *
 * P2B maps a d-dimensional context x to a code y in 0..k-1, the index of the
 * nearest of k centroids (section 3.2 of the paper; its artifact trains them
 * with k-means). The encoder is trained once, offline, on public or
 * synthetic contexts, and shipped to every agent; encoding costs O(k d).
 *
 * Training is Lloyd's algorithm from a k-means++ start, all from a seed:
 * squared distances ||x||^2 - 2 x.c + ||c||^2 with the cross terms X C^T as
 * one BLAS-3 product per block of rows (linalg/o3m_blas.h). An empty cluster
 * is re-seeded with the point farthest from its centroid. Ties go to the
 * smaller code. The encoder owns its centroids and workspace; nothing is
 * allocated after create. */
#ifndef P2B_KMEANS_H
#define P2B_KMEANS_H

#include <stdint.h>

#include "o3m_error.h"

typedef struct p2b_kmeans p2b_kmeans;

/* Trains k centroids on the n x d row-major points X (copied as needed; X
 * is not kept) with at most iters Lloyd iterations (it stops earlier when no
 * assignment changes). n >= k >= 1, d >= 1, iters >= 1 and every value
 * finite, else O3M_EINVAL / O3M_ENONFINITE naming the problem and *out
 * untouched; O3M_ENOMEM. */
int p2b_kmeans_train(p2b_kmeans **out, const double *X, long n, int d, int k, int iters,
                     uint64_t seed, o3m_err *e);

/* Frees the encoder; NULL is accepted. */
void p2b_kmeans_destroy(p2b_kmeans *km);

int p2b_kmeans_k(const p2b_kmeans *km);
int p2b_kmeans_d(const p2b_kmeans *km);

/* The code of x (d values): the nearest centroid, ties to the smaller. */
int p2b_kmeans_encode(const p2b_kmeans *km, const double *x);

/* Centroid y (d values, owned by the encoder), or NULL for y out of range:
 * the context a code stands for when a model is trained on codes. */
const double *p2b_kmeans_centroid(const p2b_kmeans *km, int y);

/* Mean squared distance of X's n points to their nearest centroid. */
double p2b_kmeans_inertia(const p2b_kmeans *km, const double *X, long n);

#endif
