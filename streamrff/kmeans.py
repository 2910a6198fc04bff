"""Kernel k-means of out-of-core data: Lloyd iterations in feature space, one pass per iteration.

A feature map (RFF, or K-JL as in Kpotufe & Sriperumbudur sec. 5.2) is fitted
once on the seeded row sample; candidate starts (spectral and k-means++) are
refined by Lloyd iterations on the embedded sample and the best one starts the
full-data passes; then every Lloyd iteration is one pass over the data that
builds a mergeable :class:`ClusterSketch` (per-cluster counts and feature
sums, inertia, moved rows) from pure per-chunk kernels, tree-merged by the
engine. New centres are ``sums / counts``.

A chunk is scored against the centres by a float32 GEMM, with the rows that
float32 rounding could send elsewhere rescored in float64, so labels and
counts are those of float64 arithmetic; cluster sums are float32 per row tile
and float64 across tiles. Partials merge in a tree fixed by the chunk order:
the same seed gives bit-identical centres however many workers run, and
centres equal to float32 rounding of the tile sums (rel 1e-6; the same labels
in practice) whatever the chunking.
"""

from __future__ import annotations

import hashlib
import logging
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import dask.array as da
import numpy as np
from sklearn.base import BaseEstimator, ClusterMixin
from sklearn.exceptions import NotFittedError

from ._validation import check_bandwidth, check_positive_int, check_rows, check_width, is_in_memory, normalize_seed, validate_estimator_input
from .errors import InputError, NotFittedMapError, SketchMismatchError
from .maps import KJL, RFF, FeatureMap
from .sketches import MappedSketch, _describe, _expect_array, _expect_int
from .typing import Seed, StorageOptions

__all__ = ["ClusterSketch", "KernelKMeans", "LloydIteration", "cluster_sketch_of_chunk"]

logger = logging.getLogger("streamrff.kmeans")

#: SeedSequence spawn key of the initialisation stream (ASCII "KMPP"), apart from the maps' streams.
_INIT_STREAM = 0x4B4D5050
#: Lloyd iterations on the in-memory sample for each initialisation candidate.
_SAMPLE_MAX_ITER = 100
#: Default n_init for the "k-means++" and "random" initialisations.
_DEFAULT_N_INIT = 10
#: Default n_init for "spectral": k-means++ starts that compete with the spectral ones, a guard
#: against a spectral embedding that misses the clusters (each costs Lloyd on the init sample).
_SPECTRAL_N_INIT = 4
#: Cap of the default K-JL landmark count (the n x n Gram matrix is built in memory).
_MAX_DEFAULT_LANDMARKS = 2000


class _NotFittedEstimatorError(NotFittedMapError, NotFittedError):
    """streamrff's NotFittedMapError that is also scikit-learn's NotFittedError (what its checks expect)."""


def _centers_fingerprint(centers: np.ndarray, previous_centers: np.ndarray | None) -> str:
    digest = hashlib.sha256()
    for name, array in (("centers", centers), ("previous_centers", previous_centers)):
        if array is None:
            digest.update(f"{name}:none".encode())
            continue
        little = np.ascontiguousarray(array, dtype="<f8")
        digest.update(f"{name}:{little.shape}".encode())
        digest.update(little.tobytes())
    return digest.hexdigest()


class ClusterSketch(MappedSketch):
    """One Lloyd step of kernel k-means over some rows: per-cluster counts and feature sums, inertia.

    Every row is assigned to its nearest centre in feature space; the sketch
    holds, per cluster, the number of rows and the float64 sum of their
    features, plus the inertia (sum of squared distances of the rows to their
    centre), the sum of ``||z||^2`` and the number of rows whose nearest centre
    differs from their nearest *previous* centre. It merges like a sum, but only
    with sketches of the same map and the same centres (its identity includes a
    fingerprint of the centres), so partials of different iterations never mix.

    Parameters
    ----------
    feature_map : FeatureMap
        The fitted map.
    centers : ndarray of shape (k, D), float64
        Centres the rows were assigned to.
    previous_centers : ndarray of shape (k, D), float64, or None
        Centres of the previous iteration; None on the first one, where every
        row counts as moved.
    counts : ndarray of shape (k,), int64
        Rows per cluster.
    sums : ndarray of shape (k, D), float64
        Sum of the features of each cluster's rows.
    inertia : float
        ``sum_i min_c ||z_i - c||^2``.
    squared_norm_sum : float
        ``sum_i ||z_i||^2`` (gives the total feature variance, and the inertia
        of the partition about its own means, ``Q - sum_c ||S_c||^2 / n_c``).
    n_moved : int
        Rows whose nearest centre changed from ``previous_centers`` to ``centers``.

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> from streamrff.kmeans import cluster_sketch_of_chunk
    >>> X = np.random.default_rng(0).normal(size=(100, 2))
    >>> rff = srf.RFF(n_features=64, bandwidth=1.0).fit(X)
    >>> centers = rff.transform(X[:3]).astype(np.float64)
    >>> a = cluster_sketch_of_chunk(X[:60], rff, centers)
    >>> b = cluster_sketch_of_chunk(X[60:], rff, centers)
    >>> merged = a.merge(b)
    >>> merged.count, int(merged.counts.sum()), merged.sums.shape
    (100, 100, (3, 64))
    """

    kind = "cluster"

    def __init__(
        self,
        feature_map: FeatureMap,
        centers: np.ndarray,
        previous_centers: np.ndarray | None,
        counts: np.ndarray,
        sums: np.ndarray,
        inertia: float,
        squared_norm_sum: float,
        n_moved: int,
    ) -> None:
        self.feature_map = feature_map
        self.centers = centers
        self.previous_centers = previous_centers
        self.counts = counts
        self.sums = sums
        self.inertia = float(inertia)
        self.squared_norm_sum = float(squared_norm_sum)
        self.n_moved = int(n_moved)
        self.count = int(counts.sum())
        for array in (centers, previous_centers, counts, sums):
            if array is not None:
                array.setflags(write=False)

    @classmethod
    def empty(
        cls, feature_map: FeatureMap, centers: np.ndarray, previous_centers: np.ndarray | None = None
    ) -> ClusterSketch:
        """The neutral element for these centres: zero rows."""
        centers, previous_centers = _check_centers(feature_map, centers, previous_centers)
        k, width = centers.shape
        return cls(feature_map, centers, previous_centers, np.zeros(k, np.int64), np.zeros((k, width)), 0.0, 0.0, 0)

    # -- identity ------------------------------------------------------------------
    @property
    def centers_fingerprint(self) -> str:
        """sha256 of the centres and previous centres: sketches merge only when these agree."""
        return _centers_fingerprint(self.centers, self.previous_centers)

    @property
    def n_clusters(self) -> int:
        """Number of clusters k."""
        return int(self.centers.shape[0])

    def check_compatible(self, other: Any) -> None:
        super().check_compatible(other)
        if other.n_clusters != self.n_clusters:
            raise SketchMismatchError(
                f"Cannot merge cluster sketches with different numbers of clusters: k={self.n_clusters} vs "
                f"k={other.n_clusters}. Sketch every chunk with the same centres."
            )
        if other.centers_fingerprint != self.centers_fingerprint:
            raise SketchMismatchError(
                "Cannot merge cluster sketches of different centres (different Lloyd iterations): centres "
                f"fingerprint {self.centers_fingerprint[:16]} vs {other.centers_fingerprint[:16]}. Sketch "
                "every chunk of one iteration with the same centres and previous centres."
            )

    # -- reading ---------------------------------------------------------------------
    def means(self) -> np.ndarray:
        """Per-cluster mean features ``sums / counts`` (k x D, float64); rows of empty clusters are NaN."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return self.sums / self.counts[:, None]

    @property
    def total_variance(self) -> float:
        """Trace of the feature covariance of the rows, ``Q/n - ||mean||^2`` (0 for an empty sketch)."""
        if self.count == 0:
            return 0.0
        mean = self.sums.sum(axis=0) / self.count
        return max(0.0, self.squared_norm_sum / self.count - float(mean @ mean))

    @property
    def partition_inertia(self) -> float:
        """Inertia of this sketch's partition about its own means: ``Q - sum_c ||S_c||^2 / n_c``.

        It is never above :attr:`inertia` (the means minimise each cluster's
        sum of squares), and equals the inertia the next Lloyd step starts from.
        """
        filled = self.counts > 0
        spread = np.einsum("ij,ij->i", self.sums[filled], self.sums[filled]) / self.counts[filled]
        return max(0.0, self.squared_norm_sum - float(spread.sum()))

    # -- monoid and file format --------------------------------------------------------
    def _merge(self, other: ClusterSketch) -> ClusterSketch:
        return ClusterSketch(
            self.feature_map,
            self.centers,
            self.previous_centers,
            self.counts + other.counts,
            self.sums + other.sums,
            self.inertia + other.inertia,
            self.squared_norm_sum + other.squared_norm_sum,
            self.n_moved + other.n_moved,
        )

    def _arrays(self) -> dict[str, np.ndarray]:
        arrays = {"counts": self.counts, "sums": self.sums, "centers": self.centers}
        if self.previous_centers is not None:
            arrays["previous_centers"] = self.previous_centers
        return arrays

    def _attrs(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "n_clusters": self.n_clusters,
            "inertia": self.inertia,
            "squared_norm_sum": self.squared_norm_sum,
            "n_moved": self.n_moved,
            "has_previous_centers": self.previous_centers is not None,
            "centers_fingerprint": self.centers_fingerprint,
        }

    @classmethod
    def _from_parts(cls, spec, map_arrays, attrs, arrays) -> ClusterSketch:
        from .maps import map_from_spec

        feature_map = map_from_spec(spec, map_arrays)
        width = feature_map.n_features_out_
        k = check_positive_int(attrs.get("n_clusters"), "n_clusters")
        has_previous = attrs.get("has_previous_centers")
        if not isinstance(has_previous, bool):
            raise InputError(f"has_previous_centers must be true or false. Got {has_previous!r}.")
        expected = {"counts", "sums", "centers"} | ({"previous_centers"} if has_previous else set())
        if set(arrays) != expected:
            raise InputError(f"A cluster sketch holds the arrays {sorted(expected)}. Got {sorted(arrays)}.")
        counts = _expect_array(arrays, "counts", (k,), np.int64)
        if (counts < 0).any():
            raise InputError("Cluster counts must be >= 0. Got a negative count.")
        sums = _expect_array(arrays, "sums", (k, width), np.float64)
        centers = _expect_array(arrays, "centers", (k, width), np.float64)
        previous = _expect_array(arrays, "previous_centers", (k, width), np.float64) if has_previous else None
        count = _expect_int(attrs, "count")
        if count != int(counts.sum()):
            raise InputError(f"count must equal the sum of the cluster counts ({int(counts.sum())}). Got {count}.")
        n_moved = _expect_int(attrs, "n_moved")
        if n_moved > count or (previous is None and n_moved != count):
            raise InputError(
                f"n_moved must be <= count, and equal to count without previous centres. Got n_moved={n_moved}, "
                f"count={count}."
            )
        for name in ("inertia", "squared_norm_sum"):
            value = attrs.get(name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value) or value < 0:
                raise InputError(f"{name} must be a finite number >= 0. Got {value!r}.")
        if attrs.get("centers_fingerprint") != _centers_fingerprint(centers, previous):
            raise InputError("The stored centres fingerprint does not match the stored centres.")
        return cls(feature_map, centers, previous, counts, sums, attrs["inertia"], attrs["squared_norm_sum"], n_moved)

    def __repr__(self) -> str:
        return (
            f"ClusterSketch(count={self.count}, k={self.n_clusters}, n_features={self.sums.shape[1]}, "
            f"inertia={self.inertia:.6g}, n_moved={self.n_moved}, map={_describe(self.spec)})"
        )


def _check_centers(
    feature_map: FeatureMap, centers: Any, previous_centers: Any
) -> tuple[np.ndarray, np.ndarray | None]:
    width = feature_map.n_features_out_
    checked = []
    for name, value in (("centers", centers), ("previous_centers", previous_centers)):
        if value is None:
            checked.append(None)
            continue
        array = np.asarray(value, dtype=np.float64)
        if array.ndim != 2 or array.shape[0] < 1 or array.shape[1] != width:
            raise InputError(f"{name} must have shape (k, {width}) with k >= 1. Got shape {array.shape}.")
        if not np.isfinite(array).all():
            raise InputError(f"{name} hold NaN or inf.")
        checked.append(array)
    if checked[1] is not None and checked[1].shape != checked[0].shape:
        raise InputError(
            f"previous_centers must have the shape of centers {checked[0].shape}. Got {checked[1].shape}."
        )
    return checked[0], checked[1]


def _nearest(features: np.ndarray, centers: np.ndarray, center_norms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Nearest centre of each float64 feature row and the squared distance to it.

    ``||z - c||^2 = ||z||^2 - 2 z.c + ||c||^2`` in float64; ties go to the lowest index.
    """
    scores = center_norms - 2.0 * (features @ centers.T)  # ||z||^2 is the same for every centre
    labels = np.argmin(scores, axis=1)
    row_norms = np.einsum("ij,ij->i", features, features)
    distances = np.maximum(row_norms + scores[np.arange(features.shape[0]), labels], 0.0)
    return labels, distances


#: Unit roundoff of float32.
_FLOAT32_UNIT = 2.0**-24
#: Bytes of float32 features per tile of a Lloyd pass (256 rows at D = 1024): enough rows to
#: amortise the per-tile calls and keep the two float32 GEMMs (scores, one-hot sums) efficient,
#: few enough to stay in the core's L2 cache (128-512 rows measured alike at D = 1024).
_LLOYD_TILE_BYTES = 2**20
#: At most this many rows per tile, whatever D: float32 per-cluster partial sums over a tile
#: then stay well below the float32 chunking tolerance (rel 1e-6).
_LLOYD_MAX_TILE_ROWS = 512
#: Once more than this fraction of a tile's rows may have changed cluster, the chunk's remaining
#: tiles are scored against the current and previous centres in one GEMM.
_FULL_RESCORE_FRACTION = 0.25


def _squared_row_norms(features: np.ndarray) -> np.ndarray:
    """``||z||^2`` of every row, in the features' dtype (a batched dot product: faster than einsum)."""
    return np.matmul(features[:, None, :], features[:, :, None]).reshape(features.shape[0])


def _lloyd_tile_rows(n_rows: int, width: int) -> int:
    return max(1, min(n_rows, _LLOYD_MAX_TILE_ROWS, max(16, _LLOYD_TILE_BYTES // (4 * width))))


class _NearestCentres:
    """Nearest centre of float32 feature rows, equal to float64 arithmetic's, from a float32 GEMM.

    Scores ``s_j = ||c_j||^2 - 2 z.c_j`` (``||z||^2`` is the same for every
    centre) come from one float32 GEMM of the tile against ``-2 c`` rounded to
    float32, for one or more blocks of centres at once (the current and the
    previous ones). Against float64 arithmetic on the same float32 features a
    score is off by at most ``e(z) = (2 gamma_D + 10 u) ||z|| c_max + 5 u c_max^2``
    (``u = 2^-24``, ``gamma_D = D u / (1 - D u)``, ``c_max = max_j ||c_j||``:
    the dot-product bound of Higham 2002, eq. 3.5, plus the roundings of
    ``c``, ``||c||^2`` and the sum). A row whose two lowest scores in a block
    differ by more than ``4 e(z)`` (twice what two scores can be off
    together) therefore has float64 arithmetic's nearest centre; the few other
    rows are rescored in float64. Labels are thus those of float64 arithmetic
    (ties to the lowest index) whatever the tiling.
    """

    def __init__(self, blocks: list[np.ndarray], tile_rows: int) -> None:
        self.blocks = blocks
        self.block_norms = [np.einsum("ij,ij->i", block, block) for block in blocks]
        stacked = np.concatenate(blocks)
        # Multiplying by -2 is exact, so this is -2 (c rounded to float32).
        self.scaled = np.ascontiguousarray((-2.0 * stacked).T, dtype=np.float32)
        self.norms32 = np.concatenate(self.block_norms).astype(np.float32)
        self.scores = np.empty((tile_rows, stacked.shape[0]), dtype=np.float32)
        width = stacked.shape[1]
        gamma = width * _FLOAT32_UNIT / (1.0 - width * _FLOAT32_UNIT)
        largest = float(np.sqrt(max(norms.max() for norms in self.block_norms)))
        # 4 e(z) as slope * ||z|| + offset.
        self.slope = np.float32(4.0 * (2.0 * gamma + 10.0 * _FLOAT32_UNIT) * largest)
        self.offset = np.float32(20.0 * _FLOAT32_UNIT * largest * largest)

    def assign(self, features: np.ndarray, length: float) -> tuple[np.ndarray, np.ndarray, np.float32]:
        """Nearest centres of float32 rows whose norms are at most ``length``, with score margins.

        Returns the int64 labels, shape (n, n_blocks); the float32 difference
        between the two lowest scores of each row in the first block (inf for
        blocks of one centre); and the bound ``4 e(z)`` at ``||z|| = length``.
        Rows with a margin within the bound in any block were rescored in float64.
        """
        n, n_blocks = features.shape[0], len(self.blocks)
        scores = self.scores[:n]
        np.matmul(features, self.scaled, out=scores)
        scores += self.norms32
        per_block = scores.reshape(n, n_blocks, -1)
        labels = np.argmin(per_block, axis=2)
        bound = np.float32(length) * self.slope + self.offset
        if per_block.shape[2] == 1:
            return labels, np.full(n, np.inf, dtype=np.float32), bound
        lowest = np.partition(per_block, 1, axis=2)
        margins = lowest[:, :, 1] - lowest[:, :, 0]
        unsure = np.flatnonzero((margins <= bound).any(axis=1))
        if unsure.size:
            wide = features[unsure].astype(np.float64)
            for index, (block, norms) in enumerate(zip(self.blocks, self.block_norms)):
                labels[unsure, index] = _nearest(wide, block, norms)[0]
        return labels, margins[:, 0], bound


def _sum_by_label(features: np.ndarray, labels: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows per label and per-label feature sums (k x D, float64) of an in-memory sample.

    One GEMM of the one-hot labels with the features, in the features' dtype
    (float32 for the init sample: its sums only seed the full-data passes).
    """
    counts = np.bincount(labels, minlength=k).astype(np.int64)
    onehot = np.zeros((k, features.shape[0]), dtype=features.dtype)
    onehot[labels, np.arange(features.shape[0])] = 1.0
    return counts, (onehot @ features).astype(np.float64)


def cluster_sketch_of_chunk(
    rows: np.ndarray,
    feature_map: FeatureMap,
    centers: np.ndarray,
    previous_centers: np.ndarray | None = None,
) -> ClusterSketch:
    """One Lloyd step over trusted, finite rows: the pure per-chunk kernel that Dask maps over chunks.

    Rows are embedded tile by tile (:meth:`FeatureMap.embed_tiles`, float32).
    Each row goes to its nearest centre by float32 scores ``||c||^2 - 2 z.c``
    from one GEMM, rescored in float64 where float32 rounding could change the
    winner, so labels, counts and moved rows are those of float64 arithmetic.
    A row can have changed cluster since ``previous_centers`` only if its
    margin between its two lowest scores is within what the centres' shift can
    change (``|s'_j - s_j| <= | ||c'_j||^2 - ||c_j||^2 | + 2 ||z|| ||c'_j - c_j||``):
    only those rows are scored against the previous centres, which near
    convergence are few. Per tile, cluster sums are a float32 GEMM of the
    one-hot labels with the features, accumulated in float64: they equal
    float64 arithmetic's to float32 rounding of per-tile partial sums (far
    below the 1e-6 chunking tolerance). The sum of ``||z||^2`` comes from
    float32 row norms summed in float64, and the inertia from the float64
    identity ``sum_i ||z_i - c_(i)||^2 = sum_i ||z_i||^2 - 2 sum_c c.S_c + sum_c n_c ||c||^2``.

    Parameters
    ----------
    rows : ndarray of shape (n, d)
        Finite rows (validated by the caller).
    feature_map : FeatureMap
        Fitted map.
    centers : ndarray of shape (k, D)
        Current centres in feature space.
    previous_centers : ndarray of shape (k, D), optional
        The previous iteration's centres, to count the rows that changed cluster.

    Returns
    -------
    ClusterSketch

    Raises
    ------
    InputError
        If the centres do not have the map's width or hold NaN/inf.

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> from streamrff.kmeans import cluster_sketch_of_chunk
    >>> X = np.array([[0.0], [0.1], [5.0]])
    >>> rff = srf.RFF(n_features=512, bandwidth=1.0).fit(X)
    >>> sketch = cluster_sketch_of_chunk(X, rff, rff.transform(X[[0, 2]]))
    >>> sketch.counts.tolist()
    [2, 1]
    """
    centers, previous_centers = _check_centers(feature_map, centers, previous_centers)
    k, width = centers.shape
    tile_rows = _lloyd_tile_rows(rows.shape[0], width)
    current = _NearestCentres([centers], tile_rows)
    previous = both = None
    if previous_centers is not None and k > 1:  # with one cluster no row can move
        previous = _NearestCentres([previous_centers], tile_rows)
        # How far a centre's scores can have moved: |s'_j - s_j| <= norm_change_j + 2 ||z|| shift_j.
        # A row keeps its centre if its margin exceeds twice the largest such change (1% spare
        # for the float32 comparison); the float32 error of the margin is in `bound`.
        step = previous_centers - centers
        norm_change = 1.01 * 2.0 * float(np.abs(previous.block_norms[0] - current.block_norms[0]).max())
        shift = 1.01 * 4.0 * float(np.sqrt(np.einsum("ij,ij->i", step, step).max()))
    onehot = np.empty((k, tile_rows), dtype=np.float32)
    cluster_index = np.arange(k)[:, None]
    tile_sums = np.empty((k, width), dtype=np.float32)
    counts = np.zeros(k, np.int64)
    sums = np.zeros((k, width))
    squared_norm_sum = 0.0
    n_moved = rows.shape[0] if previous_centers is None else 0
    for _, features in feature_map.embed_tiles(rows, tile_rows=tile_rows):
        n = features.shape[0]
        row_norms = _squared_row_norms(features)
        squared_norm_sum += float(row_norms.sum(dtype=np.float64))
        length = float(np.sqrt(row_norms.max()))  # the error bounds use the tile's largest ||z||
        if both is not None:  # most rows may move: one GEMM scores current and previous centres
            pair = both.assign(features, length)[0]
            labels = pair[:, 0]
            n_moved += int(np.count_nonzero(pair[:, 1] != labels))
        else:
            assigned, margins, bound = current.assign(features, length)
            labels = assigned[:, 0]
            if previous is not None:
                candidates = np.flatnonzero(margins <= bound + (shift * length + norm_change))
                if candidates.size > _FULL_RESCORE_FRACTION * n:
                    n_moved += int(np.count_nonzero(previous.assign(features, length)[0][:, 0] != labels))
                    both = _NearestCentres([centers, previous_centers], tile_rows)  # for the next tiles
                elif candidates.size:
                    before = previous.assign(features[candidates], length)[0][:, 0]
                    n_moved += int(np.count_nonzero(before != labels[candidates]))
        counts += np.bincount(labels, minlength=k)
        block = onehot[:, :n]
        np.equal(cluster_index, labels, out=block, casting="unsafe")  # one-hot, 1.0 / 0.0
        np.matmul(block, features, out=tile_sums)
        sums += tile_sums
    inertia = squared_norm_sum - 2.0 * float(np.einsum("ij,ij->", centers, sums)) + float(counts @ current.block_norms[0])
    return ClusterSketch(feature_map, centers, previous_centers, counts, sums, max(inertia, 0.0), squared_norm_sum, n_moved)


def _cluster_kernel(
    rows: np.ndarray,
    row_offset: int,
    valid: np.ndarray | None,
    feature_map: FeatureMap,
    centers: np.ndarray,
    previous_centers: np.ndarray | None,
) -> ClusterSketch:
    return cluster_sketch_of_chunk(rows, feature_map, centers, previous_centers)


@dataclass(frozen=True)
class LloydIteration:
    """Progress of one full-data Lloyd iteration (what :meth:`KernelKMeans.fit` reports per pass).

    Attributes
    ----------
    iteration : int
        1-based pass number.
    inertia : float
        Sum of squared feature-space distances of the rows to their nearest
        centre of this pass (non-increasing from pass to pass).
    moved_fraction : float
        Fraction of the rows whose nearest centre changed since the previous
        pass (1.0 on the first pass).
    center_shift : float
        ``sum_c ||c_new - c||^2 / total feature variance``: the convergence
        measure compared with ``tol``.
    n_empty : int
        Clusters that received no row and were re-seeded.
    """

    iteration: int
    inertia: float
    moved_fraction: float
    center_shift: float
    n_empty: int = 0


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
#: SeedSequence spawn key of the spectral starts (ASCII "SPEC").
_SPECTRAL_STREAM = 0x53504543


def _spectral_labels(squared_distances: np.ndarray, bandwidth: float, k: int, seed: int) -> list[np.ndarray]:
    """Spectral clustering of a few rows (their pairwise squared distances) at each of ``_SPECTRAL_SCALES`` times the bandwidth.

    Ng, Jordan & Weiss (2002): the ``k`` leading eigenvectors of
    ``D^-1/2 A D^-1/2`` (``A`` the exact Gaussian affinity, ``D`` its degrees),
    rows normalised to unit length, then k-means. Dhillon, Guan & Kulis (2004)
    show that kernel k-means and this relaxation optimise related objectives;
    the labels serve only as candidate starts for kernel k-means.
    """
    from scipy.linalg import eigh
    from scipy.sparse.linalg import eigsh
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
        if 4 * k < n:  # Lanczos for a few leading eigenvectors; its start vector is seeded
            _, vectors = eigsh(normalized, k=k, which="LA", v0=rng.standard_normal(n))
        else:
            _, vectors = eigh(normalized, subset_by_index=[n - k, n - 1])
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


class KernelKMeans(ClusterMixin, BaseEstimator):
    """Kernel k-means of out-of-core data: Lloyd iterations in random-feature space, one pass each.

    The Gaussian kernel ``k(x, y) = exp(-||x - y||^2 / (2 sigma^2))`` is
    approximated by a feature map ``z`` with ``z(x).z(y) ~ k(x, y)``, and
    k-means runs on the features: kernel k-means (Dhillon et al. 2004) with
    explicit centres. ``method="rff"`` uses random Fourier features (D =
    ``n_features``); ``method="kjl"`` clusters K-JL embeddings instead
    (Kpotufe & Sriperumbudur 2020, sec. 5.2: centralised K-JL on ``n``
    landmarks, ``d' = 10 k``).

    Parameters
    ----------
    n_clusters : int, default=8
        Number of clusters k (1 <= k <= number of rows).
    method : {"rff", "kjl"}, default="rff"
        Feature map: :class:`~streamrff.RFF` or centralised :class:`~streamrff.KJL`.
    n_features : int or None, default=None
        Width D of the feature space. None means 1024 for ``"rff"`` and
        ``10 * n_clusters`` (the paper's ``d' = 10 k``) for ``"kjl"``.
    n_landmarks : int or None, default=None
        K-JL landmarks n (``method="kjl"`` only). None means
        ``max(200, N // 100)`` capped at 2000 and at N (the paper uses
        ``max(200, N / 100)``).
    bandwidth : float or "median", default="median"
        Kernel width sigma; "median" is the median pairwise distance of the
        seeded row sample (1 000 rows for RFF, the landmarks for K-JL). For
        clustering, the median is often too wide (see Notes).
    init : {"spectral", "k-means++", "random"} or array-like of shape (k, n_features_in), default="spectral"
        Candidate starts on the init sample. "spectral": spectral clustering
        (Ng, Jordan & Weiss 2002) of its first 2 000 rows on the exact Gaussian
        affinity at the bandwidth and at half of it, plus ``n_init`` k-means++
        starts; "k-means++": ``n_init`` k-means++ seedings of the embedded
        sample; "random": ``n_init`` sets of k distinct sample rows. Every
        candidate is refined by Lloyd iterations on the embedded sample until
        no label changes, and the best one starts the full-data passes: for
        ``method="rff"`` the one with the lowest *exact* kernel k-means
        objective on those 2 000 rows (their RFF inertias differ by the RFF
        error), for ``"kjl"`` the lowest K-JL inertia (the geometry it
        clusters). An array gives k rows in *input* space, embedded by the map.
    n_init : int or "auto", default="auto"
        Random candidate starts (k-means++ or random). "auto" means 4 besides
        the two spectral starts for "spectral", 10 for "k-means++" and
        "random", 1 for an array.
    init_size : int or None, default=None
        Rows in the init sample (the bottom-m seeded row sample, independent
        of chunking). None means ``min(N, max(10 k, 2000))``.
    max_iter : int, default=100
        Maximum full-data Lloyd passes.
    tol : float, default=1e-4
        Stop when ``sum_c ||c_new - c||^2`` falls to ``tol`` times the total
        feature variance.
    seed : int, numpy.random.Generator or None, default=0
        Seed of the map, of the row samples and of the initialisation.

    Attributes
    ----------
    cluster_centers_ : ndarray of shape (n_clusters, D), float64
        Centres in feature space: the means of the clusters of the last pass
        (an empty cluster's centre is a re-seeded sample row).
    labels_ : ndarray of shape (n_samples,), int64
        Labels of the training rows; set only when ``X`` was in memory (numpy,
        list). For other sources call :meth:`predict` (lazy).
    inertia_ : float
        Sum of squared feature-space distances of the rows to the centre of
        their cluster, for the partition of the last pass and ``cluster_centers_``.
    n_iter_ : int
        Full-data passes run.
    history_ : list of LloydIteration
        Per-pass progress (inertia, moved fraction, centre shift).
    feature_map_ : FeatureMap
        The fitted map (RFF or KJL).
    init_sample_labels_ : ndarray of shape (m,), int64
        Cluster of each init-sample row under the initial centres, which are
        the feature means of these clusters for "k-means++" and "random". The
        sample is the bottom-m rows by ``streamrff.sampling.row_keys(seed_, ...)``.
    seed_ : int
        The integer seed in use.
    n_features_in_ : int
        Input width d.

    Raises
    ------
    InputError
        On bad parameters, ``n_clusters`` or ``n_landmarks`` above the number
        of rows, NaN/inf rows, or data of another width in :meth:`predict`.
    NotFittedMapError
        From :meth:`predict` before :meth:`fit`.

    Notes
    -----
    Cost: one embedding pass per Lloyd iteration (plus one pass to draw the
    seeded row sample); each task holds one chunk, its features tile by tile,
    and ``2 k D`` float64 centres. Per tile, a float32 GEMM scores the rows
    (rows within float32 rounding of a tie are rescored in float64) and a
    float32 one-hot GEMM sums each cluster; near convergence only rows close
    to a boundary are scored against the previous centres for the moved-row
    count. At k = 10, D = 1024 a pass costs 1.5-1.7 single-threaded sketch
    passes, 1.85 with both cores of a 2-core machine busy
    (``benchmarks/bench_kmeans.py``): the two float32 GEMMs cost 2 k D flops
    per row each, on top of the embedding that a sketch pass also pays.

    Random Fourier features approximate the kernel with additive noise:
    ``z(x).z(y) = k(x, y) + O(D^-1/2)`` whatever ``k(x, y)`` is. Kernel k-means
    compares within-cluster mean kernel values, which shrink with the
    bandwidth: at a small bandwidth, where a point's kernel values to most of
    its own cluster are close to zero, the noise floor ``D^-1/2`` swamps the
    differences between partitions, and in feature space the correct partition
    and one that splits every cluster (e.g. both of two nested rings or two
    moons in halves) become indistinguishable. Keep ``D^-1/2`` well below the
    smallest within-cluster mean kernel value ``kappa`` (about
    ``||cluster_centers_[c]||^2`` after a fit): for clusters of intrinsic
    dimension m that are wider than sigma, ``kappa`` scales like ``sigma^m``,
    so D must grow like ``sigma^(-2m)`` as sigma shrinks - 4-fold per halving
    of sigma for rings or curves (m = 1), 16-fold for 2-D blobs. ``D >=
    (10 / kappa)^2`` is safe; shapes whose best partitions are close in
    objective need the most. Measured on two moons (5 000 rows, noise 0.05,
    8 seeds, defaults otherwise): D = 1024 separates them (ARI >= 0.95) at
    sigma = 0.15-0.3 (kappa = 0.11-0.22) and misses one seed in 8 at
    sigma = 0.1 (kappa = 0.07, ARI 0.72), where D = 4096 separates all.
    K-JL has no such additive floor (its error is relative to the
    Sigma^3-weighted inner product it preserves, Kpotufe & Sriperumbudur
    Thm. 1), but it clusters that reweighted geometry, dominated by the
    leading kernel eigen-directions (like KPCA), rather than the kernel k-means
    one: on two moons the moons partition is not a k-means minimum of K-JL
    features at any bandwidth (nor of its d' -> infinity limit), so
    ``method="kjl"`` splits them, while it separates nested rings.

    The median heuristic is a good default for two-sample tests but is
    usually too wide for clustering, where kernel k-means then behaves like
    linear k-means; Kpotufe & Sriperumbudur use ``s`` = the 25th percentile of
    inter-point distances in ``exp(-||x - y||^2 / s^2)``, i.e.
    ``bandwidth = s / sqrt(2)`` here.

    Lloyd's algorithm finds a local minimum, and kernel k-means has narrow
    basins: on two moons at sigma = 0.25 the moons partition is the global
    minimum, yet only ~7% of k-means++ starts reach it (exact kernel k-means
    on the full Gram matrix). Spectral clustering, which optimises a relaxed
    form of the same objective (Dhillon et al. 2004), lands in that basin, so
    the default candidates are two spectral starts and four k-means++ starts,
    ranked by the exact objective on the init sample. Cost: the exact
    2 000 x 2 000 affinity, two Lanczos eigensolves and Lloyd on the sample
    per candidate (~0.2-0.6 s at D = 1024); ``init="k-means++"`` skips the
    spectral part.

    References
    ----------
    Dhillon, I., Guan, Y. & Kulis, B. (2004). Kernel k-means, spectral
    clustering and normalized cuts. KDD.
    Kpotufe, S. & Sriperumbudur, B. K. (2020). Gaussian sketching yields a J-L
    lemma in RKHS. AISTATS. Sec. 5.2.
    Arthur, D. & Vassilvitskii, S. (2007). k-means++: the advantages of careful seeding. SODA.
    Ng, A., Jordan, M. & Weiss, Y. (2002). On spectral clustering: analysis and
    an algorithm. NIPS.
    Higham, N. J. (2002). Accuracy and Stability of Numerical Algorithms, 2nd
    ed., SIAM. Eq. 3.5 (error of float32 dot products; the float32 scores).

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> from sklearn.datasets import make_circles
    >>> from sklearn.metrics import adjusted_rand_score
    >>> X, y = make_circles(2000, factor=0.3, noise=0.05, random_state=0)
    >>> model = srf.KernelKMeans(n_clusters=2, bandwidth=0.3, seed=0).fit(X)
    >>> bool(adjusted_rand_score(y, model.labels_) > 0.9)
    True
    >>> model.predict(X[:3]).dtype
    dtype('int64')
    """

    def __init__(
        self,
        n_clusters: int = 8,
        method: str = "rff",
        n_features: int | None = None,
        n_landmarks: int | None = None,
        bandwidth: float | str = "median",
        init: str | Any = "spectral",
        n_init: int | str = "auto",
        init_size: int | None = None,
        max_iter: int = 100,
        tol: float = 1e-4,
        seed: Seed = 0,
    ) -> None:
        self.n_clusters = n_clusters
        self.method = method
        self.n_features = n_features
        self.n_landmarks = n_landmarks
        self.bandwidth = bandwidth
        self.init = init
        self.n_init = n_init
        self.init_size = init_size
        self.max_iter = max_iter
        self.tol = tol
        self.seed = seed

    # -- parameters ----------------------------------------------------------------------
    def _check_params(self, n_rows: int, n_columns: int) -> dict[str, Any]:
        """Validate every parameter against the data's shape; return the resolved values."""
        k = check_positive_int(self.n_clusters, "n_clusters")
        if k > n_rows:
            raise InputError(
                f"n_clusters must be <= the number of rows (n_samples={n_rows}). Got n_clusters={k}; "
                "pass more rows or lower n_clusters."
            )
        if self.method not in ("rff", "kjl"):
            raise InputError(f"method must be 'rff' or 'kjl'. Got {self.method!r}.")
        if self.n_features is None:
            width = 1024 if self.method == "rff" else 10 * k
        else:
            width = check_positive_int(self.n_features, "n_features")
        landmarks = None
        if self.method == "rff":
            if self.n_landmarks is not None:
                raise InputError(
                    f"n_landmarks applies to method='kjl' only. Got n_landmarks={self.n_landmarks!r} with "
                    "method='rff'; drop it or use method='kjl'."
                )
        else:
            if self.n_landmarks is None:
                landmarks = min(n_rows, max(200, min(n_rows // 100, _MAX_DEFAULT_LANDMARKS)))
                if landmarks < 2:
                    raise InputError(f"method='kjl' needs at least 2 rows for its landmarks. Got n_samples={n_rows}.")
            else:
                landmarks = check_positive_int(self.n_landmarks, "n_landmarks", minimum=2)
                if landmarks > n_rows:
                    raise InputError(
                        f"n_landmarks must be <= the number of rows (n_samples={n_rows}). Got "
                        f"n_landmarks={landmarks}; lower it or leave it None."
                    )
        check_bandwidth(self.bandwidth)
        init = self.init
        if isinstance(init, str):
            if init not in ("spectral", "k-means++", "random"):
                raise InputError(
                    f"init must be 'spectral', 'k-means++', 'random' or an array of centres. Got {init!r}."
                )
        else:
            init = check_rows(init, "init")
            if init.shape != (k, n_columns):
                raise InputError(
                    f"An init array must hold n_clusters rows of the input width: shape ({k}, {n_columns}). "
                    f"Got {init.shape}."
                )
        if isinstance(self.n_init, str):
            if self.n_init != "auto":
                raise InputError(f"n_init must be a positive integer or 'auto'. Got {self.n_init!r}.")
            n_init = 1 if not isinstance(init, str) else _SPECTRAL_N_INIT if init == "spectral" else _DEFAULT_N_INIT
        else:
            n_init = check_positive_int(self.n_init, "n_init")
            if not isinstance(init, str) and n_init != 1:
                raise InputError(f"n_init must be 1 (or 'auto') with an init array of centres. Got {n_init}.")
        if self.init_size is None:
            init_size = min(n_rows, max(10 * k, 2000))
        else:
            init_size = min(n_rows, check_positive_int(self.init_size, "init_size", minimum=k))
        max_iter = check_positive_int(self.max_iter, "max_iter")
        if isinstance(self.tol, bool) or not isinstance(self.tol, numbers.Real) or not np.isfinite(self.tol) or self.tol < 0:
            raise InputError(f"tol must be a finite number >= 0. Got {self.tol!r}.")
        return {
            "k": k,
            "width": width,
            "landmarks": landmarks,
            "init": init,
            "n_init": n_init,
            "init_size": init_size,
            "max_iter": max_iter,
            "tol": float(self.tol),
        }

    def _make_map(self, params: dict[str, Any], seed: int) -> FeatureMap:
        if self.method == "rff":
            return RFF(n_features=params["width"], bandwidth=self.bandwidth, seed=seed)
        return KJL(
            n_landmarks=params["landmarks"],
            n_components=params["width"],
            bandwidth=self.bandwidth,
            center=True,
            seed=seed,
        )

    # -- fitting -------------------------------------------------------------------------
    def fit(
        self,
        X: Any,
        y: Any = None,
        client: Any = None,
        storage_options: StorageOptions = None,
        progress: bool = False,
        callback: Callable[[LloydIteration], Any] | None = None,
    ) -> KernelKMeans:
        """Fit the map on the seeded sample, initialise on the sample, then run full-data Lloyd passes.

        Parameters
        ----------
        X : ndarray, dask Array, xarray DataArray, or str/PathLike
            Anything :func:`streamrff.sketch` accepts (numpy, dask, xarray,
            zarr path or URL).
        y : ignored
        client : None, distributed.Client or str, default=None
            Where the passes run (see :func:`streamrff.sketch`).
        storage_options : dict, optional
            fsspec options for URL sources. Never logged.
        progress : bool, default=False
            Show a progress bar for every pass.
        callback : callable, optional
            Called with a :class:`LloydIteration` after every pass (the CLI
            shows them as progress); every pass is also logged at INFO level
            on the ``streamrff.kmeans`` logger.

        Returns
        -------
        self : KernelKMeans

        Raises
        ------
        InputError
            See the class docstring.
        """
        from .io import as_row_chunked

        in_memory = is_in_memory(X)
        fitted_before = hasattr(self, "cluster_centers_")
        try:
            if in_memory:
                X = validate_estimator_input(self, X, reset=True)
            array = as_row_chunked(X, storage_options=storage_options)
            result = self._fit_array(array, client, progress, callback)
        except BaseException:
            if not fitted_before:  # validate_data sets n_features_in_ early; a failed fit stays unfitted
                vars(self).pop("n_features_in_", None)
            raise
        for name, value in result.items():
            setattr(self, name, value)
        if in_memory:
            self.labels_ = self._labels(X)
        else:
            vars(self).pop("labels_", None)  # a refit on out-of-core data must not keep stale labels
        return self

    def _fit_array(
        self, array: da.Array, client: Any, progress: bool, callback: Callable[[LloydIteration], Any] | None
    ) -> dict[str, Any]:
        from .engine import connect, landmark_sample, run_chunks

        n_rows, n_columns = (int(size) for size in array.shape)
        params = self._check_params(n_rows, n_columns)
        seed = normalize_seed(self.seed)
        history: list[LloydIteration] = []
        with connect(client) as active:
            # One sampling pass serves the map and the init: bottom-k samples under one seed
            # are nested, so the map's sample (what engine.fit_map would draw) is the first
            # rows of the init sample, in key order.
            feature_map = self._make_map(params, seed)
            map_rows, map_seed = feature_map._begin_fit(n_columns)
            if map_seed != seed:  # pragma: no cover - both maps key their sample by their own seed
                raise AssertionError("the map's row sample must be keyed by the estimator's seed")
            size = max(params["init_size"], map_rows)
            sample = landmark_sample([array], size, seed, client=active, progress=progress).rows
            feature_map._finish_fit(sample[:map_rows])
            sample_features = feature_map._embed(sample[: params["init_size"]])  # float32
            centers, sample_labels = self._initial_centers(params, seed, feature_map, sample_features, sample[: params["init_size"]])
            previous = None
            for iteration in range(1, params["max_iter"] + 1):
                kernel = partial(_cluster_kernel, feature_map=feature_map, centers=centers, previous_centers=previous)
                pass_sketch = run_chunks([array], kernel, client=active, progress=progress)
                counts = pass_sketch.counts
                new_centers = pass_sketch.sums / np.maximum(counts, 1)[:, None]
                empty = np.flatnonzero(counts == 0)
                if empty.size:
                    new_centers = _fill_empty(new_centers, empty, sample_features)
                variance = pass_sketch.total_variance
                squared_shift = float(np.sum((new_centers - centers) ** 2))
                shift = squared_shift / variance if variance > 0 else (0.0 if squared_shift == 0 else np.inf)
                report = LloydIteration(
                    iteration, pass_sketch.inertia, pass_sketch.n_moved / pass_sketch.count, shift, int(empty.size)
                )
                history.append(report)
                logger.info(
                    "iteration %d: inertia %.6g, moved %.4f, centre shift %.3g, empty %d",
                    iteration, report.inertia, report.moved_fraction, shift, report.n_empty,
                )  # fmt: skip
                if callback is not None:
                    callback(report)
                previous, centers = centers, new_centers
                if shift <= params["tol"]:
                    break
        return {
            "feature_map_": feature_map,
            "seed_": seed,
            "cluster_centers_": centers,
            "inertia_": pass_sketch.partition_inertia,
            "n_iter_": len(history),
            "history_": history,
            "init_sample_labels_": sample_labels,
            "n_features_in_": n_columns,
        }

    def _initial_centers(
        self,
        params: dict[str, Any],
        seed: int,
        feature_map: FeatureMap,
        sample_features: np.ndarray,
        sample_rows: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Candidate starts, each refined by Lloyd on the init sample; the best one's centres and labels."""
        k, init = params["k"], params["init"]
        if not isinstance(init, str):
            centers = feature_map._embed(init).astype(np.float64)
            labels, _ = _nearest(sample_features, centers, np.einsum("ij,ij->i", centers, centers))
            return centers, labels
        from scipy.spatial.distance import cdist
        from sklearn.cluster import kmeans_plusplus

        # The exact Gram matrix of the first rows of the init sample: for the spectral starts, and
        # for RFF to rank the candidates by the exact kernel k-means objective. Their RFF inertias
        # differ by the RFF error, O(D^-1/2) per kernel value, which on two moons at D = 1024
        # ranks a split of both moons above the moons partition.
        exact_rows = min(sample_rows.shape[0], _SPECTRAL_ROWS)
        needs_gram = (init == "spectral" and k > 1) or (self.method == "rff" and params["n_init"] > 1)
        squared_distances = cdist(sample_rows[:exact_rows], sample_rows[:exact_rows], "sqeuclidean") if needs_gram else None
        starts: list[tuple[str, np.ndarray]] = []
        if init == "spectral" and k > 1:
            spectral = _spectral_labels(squared_distances, feature_map.bandwidth_, k, seed)
            for scale, labels in zip(_SPECTRAL_SCALES, spectral):
                counts, sums = _sum_by_label(sample_features[:exact_rows], labels, k)
                starts.append((f"spectral (bandwidth x {scale:g})", sums / np.maximum(counts, 1)[:, None]))
        for candidate in range(params["n_init"]):
            rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(_INIT_STREAM, candidate)))
            if init == "random":
                start = sample_features[rng.choice(sample_features.shape[0], size=k, replace=False)]
            else:
                start, _ = kmeans_plusplus(sample_features, k, random_state=int(rng.integers(2**31 - 1)))
            starts.append((f"{'random' if init == 'random' else 'k-means++'} {candidate}", start))
        gram = None
        if self.method == "rff" and len(starts) > 1:
            bandwidth = feature_map.bandwidth_
            gram = np.exp(squared_distances / (-2.0 * bandwidth * bandwidth))
        best = None
        for name, start in starts:
            centers, labels, inertia = _lloyd_in_memory(sample_features, start)
            # K-JL clusters its own geometry (Kpotufe & Sriperumbudur sec. 5.2): rank by its inertia.
            score = inertia if gram is None else _kernel_kmeans_objective(gram, labels[:exact_rows], k)
            logger.debug("init candidate %s: sample inertia %.6g, score %.6g", name, inertia, score)
            if best is None or score < best[2]:
                best = (centers, labels, score, name)
        logger.info("initial centres from the %s start (score %.6g)", best[3], best[2])
        return best[0], best[1].astype(np.int64)

    # -- prediction ----------------------------------------------------------------------
    def _check_fitted(self) -> None:
        if not hasattr(self, "cluster_centers_"):
            raise _NotFittedEstimatorError("This KernelKMeans is not fitted yet. Call fit(X) first.")

    def _labels(self, rows: np.ndarray) -> np.ndarray:
        return _labels_of_rows(rows, self.feature_map_, self.cluster_centers_)

    def predict(self, X: Any, storage_options: StorageOptions = None) -> Any:
        """Index of the nearest centre in feature space for every row.

        Parameters
        ----------
        X : ndarray, dask Array, xarray DataArray, or str/PathLike
            Rows of the training width.
        storage_options : dict, optional
            fsspec options for URL sources.

        Returns
        -------
        labels : ndarray of shape (n_samples,), int64, or dask Array
            NumPy for in-memory input; otherwise a lazy dask array chunked like
            the rows (write it with ``labels.to_zarr(url)``). NaN/inf rows
            raise when the chunk holding them is computed.

        Raises
        ------
        NotFittedMapError
            Before :meth:`fit`.
        InputError
            For data of another width, or NaN/inf rows in memory.
        """
        self._check_fitted()
        if is_in_memory(X):
            return self._labels(validate_estimator_input(self, X, reset=False))
        from .io import as_row_chunked

        array = as_row_chunked(X, storage_options=storage_options)
        check_width(array, self.n_features_in_, "KernelKMeans")
        return array.map_blocks(
            _checked_labels,
            self.feature_map_,
            self.cluster_centers_,
            dtype=np.int64,
            drop_axis=1,
            chunks=(array.chunks[0],),
        )

    def fit_predict(self, X: Any, y: Any = None, **fit_params: Any) -> Any:
        """Fit, then return the training labels: ``labels_`` for in-memory ``X``, else lazy :meth:`predict`."""
        self.fit(X, **fit_params)
        if hasattr(self, "labels_"):
            return self.labels_
        return self.predict(X, storage_options=fit_params.get("storage_options"))


def _labels_of_rows(rows: np.ndarray, feature_map: FeatureMap, centers: np.ndarray) -> np.ndarray:
    """Nearest centre of every row (float64 arithmetic's, from float32 scores; see _NearestCentres)."""
    labels = np.empty(rows.shape[0], dtype=np.int64)
    if rows.shape[0] == 0:
        return labels
    tile_rows = _lloyd_tile_rows(rows.shape[0], centers.shape[1])
    nearest = _NearestCentres([centers], tile_rows)
    for start, features in feature_map.embed_tiles(rows, tile_rows=tile_rows):
        length = float(np.sqrt(_squared_row_norms(features).max()))
        labels[start : start + features.shape[0]] = nearest.assign(features, length)[0][:, 0]
    return labels


def _checked_labels(block: np.ndarray, feature_map: FeatureMap, centers: np.ndarray) -> np.ndarray:
    if block.shape[0] == 0:
        return np.empty(0, dtype=np.int64)
    return _labels_of_rows(check_rows(block, "X"), feature_map, centers)


