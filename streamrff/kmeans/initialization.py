"""Initial centres on the in-memory init sample: spectral starts, Lloyd on the sample, the exact objective.

The candidate starts of :class:`~streamrff.KernelKMeans` (spectral clustering of the
exact Gaussian affinity, :func:`_spectral_labels`; k-means++ or random
starts) are refined by Lloyd's algorithm on the embedded sample
(:func:`_lloyd_in_memory`) and, for RFF, ranked by the exact kernel k-means
objective (:func:`_kernel_kmeans_objective`). :func:`_fill_empty` re-seeds
empty clusters, here and in the full-data passes.
"""

from __future__ import annotations

import numpy as np

from ..sketches.cluster import _nearest

__all__: list[str] = []

#: SeedSequence spawn key of the initialisation stream (ASCII "KMPP"), apart from the maps' streams.
_INIT_STREAM = 0x4B4D5050
#: Lloyd iterations on the in-memory sample for each initialisation candidate.
_SAMPLE_MAX_ITER = 100


def _sum_by_label(features: np.ndarray, labels: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows per label and per-label feature sums (k x D, float64) of an in-memory sample.

    One GEMM of the one-hot labels with the features, in the features' dtype
    (float32 for the init sample: its sums only seed the full-data passes).
    """
    counts = np.bincount(labels, minlength=k).astype(np.int64)
    onehot = np.zeros((k, features.shape[0]), dtype=features.dtype)
    onehot[labels, np.arange(features.shape[0])] = 1.0
    return counts, (onehot @ features).astype(np.float64)


def _fill_empty(centers: np.ndarray, empty: np.ndarray, sample_features: np.ndarray) -> np.ndarray:
    """Re-seed empty clusters deterministically: each takes the sample row farthest from its nearest centre."""
    centers = centers.copy()
    sample_features = sample_features.astype(np.float64, copy=False)
    filled = np.setdiff1d(np.arange(centers.shape[0]), empty)
    norms = np.einsum("ij,ij->i", centers, centers)
    if filled.size:
        _, distances = _nearest(sample_features, centers[filled], norms[filled])
    else:  # pragma: no cover - a pass always fills at least one cluster
        distances = np.full(sample_features.shape[0], np.inf)
    for cluster in empty:
        farthest = int(np.argmax(distances))
        centers[cluster] = sample_features[farthest]
        step = sample_features - centers[cluster]
        distances = np.minimum(distances, np.einsum("ij,ij->i", step, step))
        distances[farthest] = -1.0  # never the same row twice
    return centers


def _lloyd_in_memory(features: np.ndarray, centers: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Lloyd's algorithm on the (small) embedded sample until no label changes.

    ``features`` are the sample's float32 features: the assignment GEMM and the
    one-hot GEMM of the cluster sums run in float32 (an initialisation needs no
    more), centres are float64. Returns the centres (the means of the returned
    labels' clusters), the labels and their inertia.
    """
    k = centers.shape[0]
    labels = counts = sums = None
    for _ in range(_SAMPLE_MAX_ITER):
        narrow = centers.astype(features.dtype)
        # ||z||^2 is the same for every centre, so the labels need only ||c||^2 - 2 z.c.
        new_labels = np.argmin(np.einsum("ij,ij->i", narrow, narrow) - 2.0 * (features @ narrow.T), axis=1)
        if labels is not None and np.array_equal(new_labels, labels):
            break
        labels = new_labels
        counts, sums = _sum_by_label(features, labels, k)
        centers = sums / np.maximum(counts, 1)[:, None]
        empty = np.flatnonzero(counts == 0)
        if empty.size:
            centers = _fill_empty(centers, empty, features)
    # Inertia about the cluster means: sum ||z||^2 - sum_c ||S_c||^2 / n_c.
    filled = counts > 0
    spread = float((np.einsum("ij,ij->i", sums[filled], sums[filled]) / counts[filled]).sum())
    total = float(np.einsum("ij,ij->", features, features, dtype=np.float64))
    return centers, labels.astype(np.int64), max(0.0, total - spread)


#: Rows of the init sample that the spectral starts use (their exact Gram matrix is built in memory).
_SPECTRAL_ROWS = 2000
#: Bandwidths of the spectral starts, as multiples of the kernel's. At the kernel's own width the
#: normalised cut can prefer a split that kernel k-means does not (two moons at sigma = 0.25); at
#: half of it (affinity K^4) the affinity graph follows elongated clusters.
_SPECTRAL_SCALES = (1.0, 0.5)
#: Lanczos restarts before the dense eigensolver takes over (converged starts need a few dozen).
_LANCZOS_MAX_ITER = 300
#: SeedSequence spawn key of the spectral starts (ASCII "SPEC").
_SPECTRAL_STREAM = 0x53504543


def _spectral_labels(squared_distances: np.ndarray, bandwidth: float, k: int, seed: int) -> list[np.ndarray]:
    """Spectral clustering of a few rows (from their pairwise squared distances) at each bandwidth scale.

    The scales are ``_SPECTRAL_SCALES`` times ``bandwidth``.
    Ng, Jordan & Weiss (2002): the ``k`` leading eigenvectors of
    ``D^-1/2 A D^-1/2`` (``A`` the exact Gaussian affinity, ``D`` its degrees),
    rows normalised to unit length, then k-means. Dhillon, Guan & Kulis (2004)
    show that kernel k-means and this relaxation optimise related objectives;
    the labels serve only as candidate starts for kernel k-means.
    """
    from scipy.sparse.linalg import ArpackError, eigsh
    from sklearn.cluster import KMeans

    n = squared_distances.shape[0]
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(_SPECTRAL_STREAM,)))
    results = []
    for scale in _SPECTRAL_SCALES:
        width = scale * bandwidth
        normalized = np.exp(squared_distances / (-2.0 * width * width))
        root_degree = np.sqrt(normalized.sum(axis=1))  # >= 1: the diagonal is 1
        normalized /= root_degree[:, None]
        normalized /= root_degree[None, :]
        start = rng.standard_normal(n)
        vectors = None
        if 4 * k < n:  # Lanczos for a few leading eigenvectors; its start vector is seeded
            try:
                _, vectors = eigsh(normalized, k=k, which="LA", v0=start, maxiter=_LANCZOS_MAX_ITER)
            except ArpackError:
                # Structureless affinities (a bandwidth far below the rows' spacing) have nearly
                # equal leading eigenvalues, where Lanczos crawls (ArpackNoConvergence) or finds no
                # shift to apply (ARPACK error 3, seen on CI): the dense solver is exact and bounded.
                vectors = None
        if vectors is None:
            # The full decomposition: LAPACK's subset drivers (evr, evx) return no eigenpair at all
            # when the leading eigenvalues are equal to working precision (measured, n = 2000).
            vectors = np.linalg.eigh(normalized)[1][:, n - k :]
        vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), np.finfo(float).tiny)
        model = KMeans(n_clusters=k, n_init=4, random_state=int(rng.integers(2**31 - 1)))
        results.append(model.fit_predict(vectors).astype(np.int64))
    return results


def _kernel_kmeans_objective(gram: np.ndarray, labels: np.ndarray, k: int) -> float:
    """Exact kernel k-means objective of a partition: ``sum_i K_ii - sum_c (1 / n_c) sum_{i, j in c} K_ij``."""
    onehot = np.zeros((k, labels.shape[0]))
    onehot[labels, np.arange(labels.shape[0])] = 1.0
    counts = onehot.sum(axis=1)
    within = np.einsum("cj,cj->c", onehot, onehot @ gram)  # sum_{i, j in c} K_ij
    filled = counts > 0
    return float(np.trace(gram) - (within[filled] / counts[filled]).sum())
