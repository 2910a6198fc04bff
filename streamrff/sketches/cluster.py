"""The mergeable sketch of one Lloyd step and its pure per-chunk kernel.

:class:`ClusterSketch` holds per-cluster counts and feature sums, the
inertia, ``sum ||z||^2`` and the moved-row count of some rows for one set of
centres; :func:`cluster_sketch_of_chunk` builds it from a chunk (for RFF maps
in one compiled call, :mod:`~streamrff._kernels.lloyd`; for other maps float32
scores from :mod:`~streamrff.sketches.cluster` and float32 one-hot sums per
tile; tiles accumulated in float64), and the engine tree-merges the partials.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from typing import Any

import numpy as np

from .._base.blas import single_blas_thread
from .._base.validation import check_positive_int
from ..errors import InputError, SketchMismatchError
from ..maps import RFF, FeatureMap
from .base import ChunkJob, SumSketch, describe_spec, expect_array, expect_int

__all__ = ["ClusterSketch", "cluster_sketch_of_chunk"]

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
#: Bytes of float32 features per tile of a Lloyd pass (256 rows at D = 1024, 128 at D = 4096):
#: enough rows to amortise the per-tile calls and keep the float32 score product efficient, few
#: enough to stay near the core's L2 cache. 128-512 rows measured alike at D = 1024; at D = 4096,
#: k = 50, 128-row tiles made a Lloyd pass 13% faster than 64-row ones (benchmarks/bench_kmeans.py).
_LLOYD_TILE_BYTES = 2**21
#: At most this many rows per tile, whatever D: float32 per-cluster partial sums over a tile
#: then stay well below the float32 chunking tolerance (rel 1e-6).
_LLOYD_MAX_TILE_ROWS = 256


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
    the dot-product bound of Higham 2002, eq. 3.5, which holds for any order of
    summation, so also for the compiled Lloyd kernel's
    :func:`~streamrff._kernels.rowdot.row_dots`; plus the roundings of ``c``,
    ``||c||^2`` and the sum). A row whose two lowest scores in a block
    differ by more than ``4 e(z)`` (twice what two scores can be off
    together) therefore has float64 arithmetic's nearest centre; the few other
    rows are rescored in float64 against the centres whose float32 score is
    within the bound of their lowest (only those can be nearest). Labels are thus
    those of float64 arithmetic (ties to the lowest index) whatever the tiling or
    the calling path: both paths rescore with the same compiled function.
    """

    def __init__(self, blocks: list[np.ndarray], tile_rows: int) -> None:
        self.blocks = blocks
        self.block_norms = [np.einsum("ij,ij->i", block, block) for block in blocks]
        stacked = np.concatenate(blocks)
        # Multiplying by -2 is exact, so this is -2 (c rounded to float32).
        self.scaled = np.ascontiguousarray((-2.0 * stacked).T, dtype=np.float32)
        self.norms32 = np.concatenate(self.block_norms).astype(np.float32)
        self.scores = np.empty((tile_rows, stacked.shape[0]), dtype=np.float32)
        # The float64 rescoring's centres as one numba type (C-contiguous, writeable).
        self.exact_blocks = [np.array(block, dtype=np.float64, order="C") for block in blocks]
        self._slots = np.arange(tile_rows, dtype=np.int64)
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
        from .._kernels.lloyd import exact_labels  # here: numba loads only when k-means runs

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
            rows, exact = np.ascontiguousarray(features, dtype=np.float32), np.empty(unsure.size, dtype=np.int64)
            slots = self._slots[: unsure.size]
            for index, (block, norms) in enumerate(zip(self.exact_blocks, self.block_norms)):
                exact_labels(rows, unsure, scores, index * block.shape[0], bound, block, norms, exact, slots)
                labels[unsure, index] = exact
        return labels, margins[:, 0], bound


@single_blas_thread
def _labels_of_rows(rows: np.ndarray, feature_map: FeatureMap, centers: np.ndarray) -> np.ndarray:
    """Nearest centre of every row (float64 arithmetic's, from float32 scores; see _NearestCentres)."""
    from .._kernels.lloyd import lloyd_step  # here: numba loads only when k-means runs

    labels = np.empty(rows.shape[0], dtype=np.int64)
    if rows.shape[0] == 0:
        return labels
    tile_rows = _lloyd_tile_rows(rows.shape[0], centers.shape[1])
    nearest = _NearestCentres([centers], tile_rows)
    if isinstance(feature_map, RFF) and feature_map._float32_phases():
        return lloyd_step(rows, feature_map, tile_rows, nearest)[0]
    for start, features in feature_map.embed_tiles(rows, tile_rows=tile_rows):
        length = float(np.sqrt(_squared_row_norms(features).max()))
        labels[start : start + features.shape[0]] = nearest.assign(features, length)[0][:, 0]
    return labels


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


@dataclasses.dataclass(eq=False, repr=False)
class ClusterSketch(SumSketch):
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

    Against a NumPy reference: each row goes to its nearest centre in feature space.

    >>> Z = rff.transform(X).astype(np.float64)
    >>> labels = ((Z[:, None, :] - centers[None]) ** 2).sum(axis=2).argmin(axis=1)
    >>> bool((merged.counts == np.bincount(labels, minlength=3)).all())
    True
    >>> bool(np.allclose(merged.sums, [Z[labels == c].sum(axis=0) for c in range(3)], atol=1e-5))
    True
    """

    kind = "cluster"
    _summed_fields = ("counts", "sums", "inertia", "squared_norm_sum", "n_moved")
    _fixed_fields = ("feature_map", "centers", "previous_centers")

    feature_map: FeatureMap
    centers: np.ndarray
    previous_centers: np.ndarray | None
    counts: np.ndarray
    sums: np.ndarray
    inertia: float
    squared_norm_sum: float
    n_moved: int
    count: int = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.count = int(self.counts.sum())
        super().__post_init__()

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
    def _extra_attrs(self) -> dict[str, Any]:
        return {
            "n_clusters": self.n_clusters,
            "has_previous_centers": self.previous_centers is not None,
            "centers_fingerprint": self.centers_fingerprint,
        }

    @classmethod
    def _from_parts(cls, spec, map_arrays, attrs, arrays) -> ClusterSketch:
        from ..maps import map_from_spec

        feature_map = map_from_spec(spec, map_arrays)
        width = feature_map.n_features_out_
        k = check_positive_int(attrs.get("n_clusters"), "n_clusters")
        has_previous = attrs.get("has_previous_centers")
        if not isinstance(has_previous, bool):
            raise InputError(f"has_previous_centers must be true or false. Got {has_previous!r}.")
        expected = {"counts", "sums", "centers"} | ({"previous_centers"} if has_previous else set())
        if set(arrays) != expected:
            raise InputError(f"A cluster sketch holds the arrays {sorted(expected)}. Got {sorted(arrays)}.")
        counts = expect_array(arrays, "counts", (k,), np.int64)
        if (counts < 0).any():
            raise InputError("Cluster counts must be >= 0. Got a negative count.")
        sums = expect_array(arrays, "sums", (k, width), np.float64)
        centers = expect_array(arrays, "centers", (k, width), np.float64)
        previous = expect_array(arrays, "previous_centers", (k, width), np.float64) if has_previous else None
        count = expect_int(attrs, "count")
        if count != int(counts.sum()):
            raise InputError(f"count must equal the sum of the cluster counts ({int(counts.sum())}). Got {count}.")
        n_moved = expect_int(attrs, "n_moved")
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

    @classmethod
    def chunk_job(
        cls, feature_map: FeatureMap, centers: np.ndarray, previous_centers: np.ndarray | None = None
    ) -> ChunkJob:
        """The engine's pass for one Lloyd step from ``centers`` (and the rows moved since ``previous_centers``)."""
        kernel = functools.partial(
            _cluster_kernel, feature_map=feature_map, centers=centers, previous_centers=previous_centers
        )
        key = f"cluster-{feature_map.fingerprint[:20]}-{_centers_fingerprint(centers, previous_centers)[:20]}"
        return ChunkJob(kernel, cls, key, feature_map.n_features_out_)

    def __repr__(self) -> str:
        return (
            f"ClusterSketch(count={self.count}, k={self.n_clusters}, n_features={self.sums.shape[1]}, "
            f"inertia={self.inertia:.6g}, n_moved={self.n_moved}, map={describe_spec(self.spec)})"
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


@single_blas_thread
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
    convergence are few. RFF maps run all of it in one compiled call per chunk
    (:mod:`streamrff._kernels.lloyd`: the features of a tile stay in a
    cache-sized buffer and each row is added to its cluster's float32 tile sum);
    other maps' (K-JL: its embedding is the pass's whole cost) cluster sums are
    a float32 GEMM of the one-hot labels with each tile. Per-tile sums are
    accumulated in float64: they equal
    float64 arithmetic's to float32 rounding of per-tile partial sums (far
    below the 1e-6 chunking tolerance). The sum of ``||z||^2`` comes from
    float32 row norms summed in float64 (for RFF's sincos variant, ``m scale^2``
    a row: ``cos^2 + sin^2 = 1``), and the inertia from the float64
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
    if isinstance(feature_map, RFF) and feature_map._float32_phases() and rows.shape[0]:
        return _compiled_lloyd_step(rows, feature_map, centers, previous_centers)[0]
    from .._kernels.lloyd import FULL_RESCORE_FRACTION  # here: numba loads only when k-means runs

    k, width = centers.shape
    tile_rows, current, previous, move = _scorers(rows.shape[0], centers, previous_centers)
    both = None
    if previous is not None:
        shift, norm_change = move
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
                if candidates.size > FULL_RESCORE_FRACTION * n:
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
    cross = float(np.einsum("ij,ij->", centers, sums))
    inertia = squared_norm_sum - 2.0 * cross + float(counts @ current.block_norms[0])
    return ClusterSketch(
        feature_map, centers, previous_centers, counts, sums, max(inertia, 0.0), squared_norm_sum, n_moved
    )


def _scorers(
    n_rows: int, centers: np.ndarray, previous_centers: np.ndarray | None
) -> tuple[int, _NearestCentres, _NearestCentres | None, tuple[float, float] | None]:
    """Tile rows, the current centres' scorer and, when rows can move (previous centres, k > 1),
    the previous centres' scorer and :func:`_move_bound`; else None, None."""
    tile_rows = _lloyd_tile_rows(n_rows, centers.shape[1])
    current = _NearestCentres([centers], tile_rows)
    if previous_centers is None or centers.shape[0] == 1:  # with one cluster no row can move
        return tile_rows, current, None, None
    previous = _NearestCentres([previous_centers], tile_rows)
    return tile_rows, current, previous, _move_bound(current, previous)


def _move_bound(current: _NearestCentres, previous: _NearestCentres) -> tuple[float, float]:
    """``(shift, norm_change)``: a row may have changed cluster only if its margin is within
    ``bound + shift ||z|| + norm_change``.

    How far a centre's scores can have moved: ``|s'_j - s_j| <= norm_change_j + 2 ||z|| shift_j``.
    A row keeps its centre if its margin exceeds twice the largest such change (1% spare for
    the float32 comparison); the float32 error of the margin is in the scoring bound.
    """
    step = previous.blocks[0] - current.blocks[0]
    norm_change = 1.01 * 2.0 * float(np.abs(previous.block_norms[0] - current.block_norms[0]).max())
    shift = 1.01 * 4.0 * float(np.sqrt(np.einsum("ij,ij->i", step, step).max()))
    return shift, norm_change


def _compiled_lloyd_step(
    rows: np.ndarray, feature_map: RFF, centers: np.ndarray, previous_centers: np.ndarray | None
) -> tuple[ClusterSketch, np.ndarray, int]:
    """:func:`cluster_sketch_of_chunk` for RFF maps in one compiled call (:mod:`streamrff._kernels.lloyd`).

    Returns the sketch, the rows' labels and how many rows were rescored in float64.
    """
    from .._kernels.lloyd import lloyd_step  # here: numba loads only when k-means runs

    tile_rows, current, previous, move = _scorers(rows.shape[0], centers, previous_centers)
    labels, counts, sums, squared_norm_sum, n_moved, n_rescored = lloyd_step(
        rows, feature_map, tile_rows, current, previous, move
    )
    if previous_centers is None:
        n_moved = rows.shape[0]
    inertia = (
        squared_norm_sum - 2.0 * float(np.einsum("ij,ij->", centers, sums)) + float(counts @ current.block_norms[0])
    )
    sketch = ClusterSketch(
        feature_map, centers, previous_centers, counts, sums, max(inertia, 0.0), squared_norm_sum, n_moved
    )
    return sketch, labels, n_rescored


def _cluster_kernel(
    rows: np.ndarray,
    row_offset: int,
    valid: np.ndarray | None,
    feature_map: FeatureMap,
    centers: np.ndarray,
    previous_centers: np.ndarray | None,
) -> ClusterSketch:
    return cluster_sketch_of_chunk(rows, feature_map, centers, previous_centers)
