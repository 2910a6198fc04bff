"""Second moments of feature tiles: float32 rank-k updates, accumulated in float64.

The moment kernel of :func:`streamrff.sketches.mean.mean_sketch_of_chunk` (and of the
regression sketch's tiles): a tile's ``Z^T Z`` by a symmetric rank-k update (BLAS
``?syrk``), on the tile centred on its own mean, the mean's terms added in float64.
"""

from __future__ import annotations

import numpy as np

from .._base.blas import one_blas_thread, tile_column_sums

#: eigen_solver="auto" uses ARPACK above this width when k < D / 10.
_ARPACK_MIN_WIDTH = 1024
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


def moment_eigenpairs(sketch, k: int, solver: str = "auto", seed: int = 0) -> tuple[np.ndarray, np.ndarray, float]:
    """The k largest variances of a moment sketch's features, their axes (columns) and the total variance.

    The eigenpairs of the covariance ``moment / n - mean mean^T`` (decreasing,
    clipped at 0): kernel PCA's spectrum (:class:`streamrff.KernelPCA`), and the
    explained variance that ``streamrff info`` prints. ``solver`` is ``"dense"``
    (``eigh``), ``"arpack"`` (``eigsh`` from a start vector seeded by ``seed``,
    deterministic as scikit-learn's) or ``"auto"`` (ARPACK above D = 1 024 when
    k < D / 10). On one BLAS thread: on a busy 2-core machine OpenBLAS's spinning
    threads made the dense ``eigh`` at D = 1024 take 11.4 s (of a 27 s fit); one
    thread took 0.6 s at load 11.

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> from streamrff.sketches.moments import moment_eigenpairs
    >>> X = np.random.default_rng(0).normal(size=(200, 2))
    >>> sketch = srf.sketch_array(X, srf.RFF(n_features=16, bandwidth=1.0), moments=True)
    >>> variances, axes, total = moment_eigenpairs(sketch, 3)
    >>> Z = sketch.feature_map.transform(X).astype(np.float64)
    >>> bool(np.allclose(variances, np.linalg.eigvalsh(np.cov(Z.T, bias=True))[::-1][:3], atol=1e-6))
    True
    """
    n = sketch.count
    mean = sketch.feature_sum / n
    covariance = sketch.moment / n
    covariance -= np.outer(mean, mean)  # in place: one D x D copy, not three
    covariance += covariance.T
    covariance /= 2.0
    width = covariance.shape[0]
    if solver == "auto":
        solver = "arpack" if width > _ARPACK_MIN_WIDTH and k < width // 10 else "dense"
    with one_blas_thread():
        if solver == "arpack":
            from scipy.sparse.linalg import eigsh

            # A seeded start vector makes ARPACK deterministic (as scikit-learn's _init_arpack_v0).
            start = np.random.default_rng(seed).uniform(-1.0, 1.0, width)
            values, vectors = eigsh(covariance, k=k, which="LA", v0=start, tol=0.0)
        else:
            values, vectors = np.linalg.eigh(covariance)
    order = np.argsort(values)[::-1][:k]
    return np.clip(values[order], 0.0, None), vectors[:, order], float(max(np.trace(covariance), 0.0))
