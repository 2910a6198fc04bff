"""Nearest centres in feature space: float32 scores, rescored in float64 where rounding could matter.

:class:`_NearestCentres` scores float32 feature rows against one or more blocks
of centres with one float32 GEMM and rescores in float64
(:func:`~streamrff.kmeans._lloyd.exact_labels`, shared with the compiled Lloyd
kernel) the rows whose two lowest scores are within float32 rounding of each other,
so labels are those of float64 arithmetic whatever the tiling.
:func:`_labels_of_rows` labels in-memory rows tile by tile (what
:meth:`~streamrff.KernelKMeans.predict` maps over chunks).
"""

from __future__ import annotations

import numpy as np

from .._blas import single_blas_thread
from ..maps import RFF, FeatureMap
from ._lloyd import exact_labels, lloyd_step

__all__: list[str] = []


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
    :func:`~streamrff._rowdot.row_dots`; plus the roundings of ``c``,
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
