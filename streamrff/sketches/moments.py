"""Second moments of feature tiles: float32 rank-k updates, accumulated in float64.

The moment kernel of :func:`streamrff.sketches.mean.mean_sketch_of_chunk` (and of the
regression sketch's tiles): a tile's ``Z^T Z`` by a symmetric rank-k update (BLAS
``?syrk``), on the tile centred on its own mean, the mean's terms added in float64.
"""

from __future__ import annotations

import numpy as np

from ..maps import tile_column_sums

#: Rows per tile of the second-moment update: large enough that the float32 rank-k update, not
#: the D x D mirror and float64 accumulation after it, dominates (100k rows, D = 1024, one core:
#: 1.60 s at 512 rows, 1.12 s at 2048); float32 partial sums of that many rows stay below the
#: 1e-6 chunking tolerance.
_MOMENT_TILE_ROWS = 2048


def moment_tile_rows(dtype: np.dtype) -> int:
    """Rows per tile of :func:`mean_sketch_of_chunk`'s second-moment update: the bytes of
    :data:`_MOMENT_TILE_ROWS` float64 rows (the tile :mod:`streamrff._base.memory` counts), so 4096
    float32 rows. numpy mirrors each update's D x D triangle and the float64 moment adds it, a
    fixed cost per tile that the longer tile halves (D = 1024, one core, CPU time: 11.0 us per row
    at 4096 rows against 12.7 at 2048, the SYRK share from 0.81 to ~0.9 of the in-cache rate);
    the float32 sums of 4096 rows stay within 1.1e-7 of float64 (max relative, measured)."""
    return _MOMENT_TILE_ROWS * 8 // np.dtype(dtype).itemsize


def _rank_k_update(features: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``features.T @ features`` into ``out``, in the tile's dtype.

    numpy hands a product of an array with its own transpose to BLAS ``?syrk``
    (half the flops of a GEMM) and mirrors the triangle; unlike scipy's BLAS
    wrappers it releases the GIL, so tasks on several threads scale.
    """
    return np.matmul(features.T, features, out=out)


class CentredMoments:
    """Float64 sums of feature tiles and their second moment, each tile's rank-k product taken on the tile centred.

    :meth:`add` shifts a tile in place by ``c``, its column means rounded to
    the features' dtype, and adds ``Zc^T Zc`` (a rank-k update in the tile's
    dtype); the rank-2 terms of ``Z^T Z = Zc^T Zc + u c^T + c u^T``
    (``u = s + t c / 2``, ``s`` the column sums of ``Zc``, ``t`` the tile's
    rows) are added for up to 64 tiles at once, by one float64 product of the
    stacked ``u`` and ``c`` (the last ones by :meth:`totals`). The rounding of
    a float32 product is then relative to the within-tile variance, not to
    the raw moment that the mean direction dominates: for RFF with a
    bandwidth of 3 on 10 normal columns (the mean holds 37% of the raw
    trace), the centred moment ``Z^T Z - n mu mu^T`` comes out 8 times closer
    to float64 arithmetic (spectral norm, 6e-9 instead of 5e-8 on 61 440
    rows, D = 1024), for a subtraction and two GEMVs per tile (3% of the
    pass). The sums are of the shifted features ``Zc + c``, exact in float64,
    so the moment and the sums describe the same features.
    """

    def __init__(self, width: int, dtype: np.dtype) -> None:
        self.feature_sum = np.zeros(width)
        self.moment = np.zeros((width, width))
        self.squared_norm_sum = 0.0
        self._tile_moment = np.empty((width, width), dtype=dtype)
        self._rank_two: list[tuple[np.ndarray, np.ndarray]] = []

    def add(self, features: np.ndarray) -> np.ndarray:
        """Add a tile of shape (t, D), overwriting it by ``Zc``; return the float64 shift ``c``."""
        rows = features.shape[0]
        shift = (tile_column_sums(features) / rows).astype(features.dtype)
        features -= shift
        # Float32 GEMVs of the centred tile: their rounding is relative to the small centred sums.
        centred_sum = tile_column_sums(features)
        shift = shift.astype(np.float64)
        product = _rank_k_update(features, self._tile_moment)
        self.moment += product
        self._rank_two.append((centred_sum + 0.5 * rows * shift, shift))
        if len(self._rank_two) == _RANK_TWO_BATCH:
            self._add_rank_two_terms()
        self.feature_sum += centred_sum + rows * shift
        self.squared_norm_sum += float(np.trace(product, dtype=np.float64)) + float(
            shift @ (2.0 * centred_sum + rows * shift)
        )
        return shift

    def totals(self) -> tuple[np.ndarray, float, np.ndarray]:
        """``(feature_sum, squared_norm_sum, moment)`` of the tiles added so far.

        The moment is made exactly symmetric: numpy takes ``?syrk`` only for a contiguous tile, and
        a GEMM's two triangles may round differently (OpenBLAS's Haswell kernels on AMD EPYC do).
        """
        self._add_rank_two_terms()
        self.moment += self.moment.T
        self.moment *= 0.5
        return self.feature_sum, self.squared_norm_sum, self.moment

    def _add_rank_two_terms(self) -> None:
        if self._rank_two:
            halves, shifts = (np.stack(column) for column in zip(*self._rank_two))
            self.moment += np.concatenate([halves, shifts]).T @ np.concatenate([shifts, halves])
            self._rank_two = []


#: Tiles whose rank-2 terms :class:`CentredMoments` adds in one float64 product (D x 2b x D):
#: few enough that the stacked vectors stay small (16 MiB at D = 16 384).
_RANK_TWO_BATCH = 64
