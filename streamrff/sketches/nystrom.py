"""A mergeable low-rank sketch of the feature covariance: the streaming Nystrom sketch.

For wide maps (D in the thousands to tens of thousands) the D x D second moment
``M = sum z z^T`` of :class:`~streamrff.sketches.mean.MeanSketch` costs ``8 D^2`` bytes
per partial (2 GiB at D = 16 384). :class:`NystromSketch` keeps instead the
*linear* sketch ``Y = M Omega`` (D x l, float64) with a seeded D x l Gaussian test
matrix ``Omega`` that every worker regenerates from ``(test_seed, D, l)`` (it is
never shipped or stored), plus the count, the feature sum and the sum of squared
norms. Every part is a sum over rows, so merging is a sum: commutative and
associative to float64 rounding (relative 1e-12), whatever the merge order.

The centred covariance ``C = M/n - mu mu^T`` is sketched exactly by
``C Omega = Y/n - mu (mu^T Omega)``; its top eigenpairs come from the
numerically stable fixed-rank Nystrom reconstruction of Tropp, Yurtsever, Udell
& Cevher (2017, Algorithm 3): shift by ``nu``, Cholesky factor of
``Omega^T Y_nu``, SVD. Its trace, ``sum ||z||^2 / n - ||mu||^2``, is exact.

Costs per row ``2 D l`` flops (two GEMMs per row tile) instead of the ``D^2`` of
the full moment's rank-k update; ``8 D l`` bytes per partial.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np

from .._base.blas import one_blas_thread, single_blas_thread, tile_column_sums
from .._base.validation import check_positive_int, normalize_seed
from ..errors import InputError, SketchMismatchError
from .base import ChunkJob, SumSketch, describe_spec, expect_array, expect_int, expect_squared_norm_sum, invalid_count

if TYPE_CHECKING:  # pragma: no cover - the maps import scikit-learn, which reading a sketch file does not need
    from ..maps import FeatureMap

__all__ = ["NystromSketch", "nystrom_sketch_of_chunk", "nystrom_eigenpairs", "test_matrix"]

#: Name of the test-matrix construction; a new construction gets a new name (old files then
#: refuse to merge with new ones instead of mixing two matrices).
TEST_MATRIX_SCHEME = "gaussian-pcg64-v1"
#: Stream key that separates the test matrix's random stream from the maps' streams.
_TEST_MATRIX_STREAM = 0x4E595354
#: Fewest rows per tile of the chunk kernel: the two GEMMs per tile (rows x D x l) stay
#: efficient; a tile is at most max(1 MiB, 256 D float32) (16 MiB at D = 16 384).
_MIN_TILE_ROWS = 256


@lru_cache(maxsize=4)
def _cached_test_matrix(seed: int, width: int, sketch_size: int) -> np.ndarray:
    rng = np.random.default_rng(np.random.SeedSequence([seed, _TEST_MATRIX_STREAM, width, sketch_size]))
    omega = rng.standard_normal((width, sketch_size)) / np.sqrt(width)
    omega.setflags(write=False)
    return omega


def test_matrix(seed: int, width: int, sketch_size: int) -> np.ndarray:
    """The D x l Gaussian test matrix ``Omega`` (entries N(0, 1/D), float64, read-only).

    A pure function of ``(seed, width, sketch_size)``: numpy's PCG64 stream is the
    same on every platform, so every worker regenerates the same matrix from the
    sketch's attributes (cached per process, 4 matrices at most).

    Examples
    --------
    >>> from streamrff.sketches.nystrom import test_matrix
    >>> omega = test_matrix(0, 64, 8)
    >>> omega.shape, bool((omega == test_matrix(0, 64, 8)).all())
    ((64, 8), True)
    """
    return _cached_test_matrix(int(seed), int(width), int(sketch_size))


test_matrix.__test__ = False  # a library function, not a pytest test


@dataclasses.dataclass(eq=False, repr=False)
class NystromSketch(SumSketch):
    """Count, feature sum, sum of squared norms and the range sketch ``Y = sum z z^T Omega``.

    A linear, mergeable sketch of the second moment for wide maps (see the
    module docstring). Build it with :func:`streamrff.nystrom_sketch` (Dask) or
    :meth:`from_rows` (in memory); fit :class:`streamrff.KernelPCA` on it.

    Parameters
    ----------
    feature_map : FeatureMap
        The fitted map that produced the features.
    count : int
        Rows sketched.
    feature_sum : ndarray of shape (D,), float64
    squared_norm_sum : float
        Sum of ``||z_i||^2``: the trace of the second moment, exactly.
    range_sketch : ndarray of shape (D, l), float64
        ``sum_i z_i (z_i^T Omega)``.
    test_seed : int
        Seed of the test matrix ``Omega`` (see :func:`streamrff.sketches.nystrom.test_matrix`).
    n_invalid : int, default=0
        Rows skipped as non-finite.

    Notes
    -----
    ``fingerprint`` covers the map and the test matrix (seed, size, scheme), so
    a file whose ``test_seed`` was edited fails to load instead of pairing ``Y``
    with another ``Omega``; :attr:`map_fingerprint` is the map's alone.

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> X = np.random.default_rng(0).normal(size=(100, 3))
    >>> rff = srf.RFF(n_features=64, bandwidth=1.0).fit(X)
    >>> a = srf.NystromSketch.from_rows(X[:60], rff, sketch_size=16, test_seed=1)
    >>> b = srf.NystromSketch.from_rows(X[60:], rff, sketch_size=16, test_seed=1)
    >>> whole = srf.NystromSketch.from_rows(X, rff, sketch_size=16, test_seed=1)
    >>> merged = a.merge(b)
    >>> merged.count, bool(np.allclose(merged.range_sketch, whole.range_sketch, rtol=1e-5, atol=1e-7))
    (100, True)
    """

    kind = "nystrom"
    _summed_fields = ("count", "feature_sum", "squared_norm_sum", "range_sketch", "n_invalid")
    _fixed_fields = ("feature_map", "test_seed")

    feature_map: FeatureMap
    count: int
    feature_sum: np.ndarray
    squared_norm_sum: float
    range_sketch: np.ndarray
    test_seed: int
    n_invalid: int = 0

    @classmethod
    def empty(cls, feature_map: FeatureMap, sketch_size: int, test_seed: int) -> NystromSketch:
        """The neutral element: zero rows."""
        width = feature_map.n_features_out_
        return cls(feature_map, 0, np.zeros(width), 0.0, np.zeros((width, sketch_size)), test_seed)

    @classmethod
    def from_rows(
        cls, rows: Any, feature_map: FeatureMap, sketch_size: int, test_seed: int = 0, dtype: Any = "float32"
    ) -> NystromSketch:
        """Sketch finite in-memory rows with a fitted map (validated; see :func:`nystrom_sketch_of_chunk`).

        Raises
        ------
        InputError
            On non-2-D or non-finite rows, an unfitted map, a width other than
            the map's, or ``sketch_size`` outside ``1..D``.
        """
        from .._base.validation import check_feature_dtype, check_rows, check_width
        from ..maps import FeatureMap

        if not isinstance(feature_map, FeatureMap) or not feature_map.is_fitted():
            raise InputError(
                f"feature_map must be a fitted streamrff FeatureMap. Got {feature_map!r}; fit it first "
                "(feature_map.fit(X)) or use streamrff.nystrom_sketch, which fits it on a row sample."
            )
        rows = check_rows(rows, "rows")
        check_width(rows, feature_map.n_features_in_, type(feature_map).__name__)
        sketch_size = check_sketch_size(sketch_size, feature_map.n_features_out_)
        test_seed = normalize_seed(test_seed, "test_seed")
        return nystrom_sketch_of_chunk(rows, feature_map, sketch_size, test_seed, dtype=check_feature_dtype(dtype))

    @property
    def sketch_size(self) -> int:
        """Columns l of the test matrix."""
        return self.range_sketch.shape[1]

    @property
    def test_matrix(self) -> np.ndarray:
        """``Omega``, regenerated from ``(test_seed, D, l)``."""
        return test_matrix(self.test_seed, self.range_sketch.shape[0], self.sketch_size)

    @property
    def map_fingerprint(self) -> str:
        """Fingerprint of the feature map alone."""
        return self.feature_map.fingerprint

    @property
    def fingerprint(self) -> str:
        identity = {"map": self.feature_map.fingerprint, "test_matrix": self._test_matrix_spec()}
        return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()

    def _test_matrix_spec(self) -> dict[str, Any]:
        return {"scheme": TEST_MATRIX_SCHEME, "seed": self.test_seed, "sketch_size": self.sketch_size}

    def check_compatible(self, other: Any) -> None:
        if isinstance(other, NystromSketch) and other.map_fingerprint == self.map_fingerprint:
            if other.test_seed != self.test_seed or other.sketch_size != self.sketch_size:
                raise SketchMismatchError(
                    "Cannot merge Nystrom sketches made with different test matrices: test_seed="
                    f"{self.test_seed}, sketch_size={self.sketch_size} vs test_seed={other.test_seed}, "
                    f"sketch_size={other.sketch_size}. Sketch every part with the same sketch_size and seed."
                )
        if isinstance(other, NystromSketch) and other.map_fingerprint != self.map_fingerprint:
            raise SketchMismatchError(
                "Cannot merge sketches of different feature maps: fingerprint "
                f"{self.map_fingerprint[:16]} ({describe_spec(self.spec)}) vs {other.map_fingerprint[:16]} "
                f"({describe_spec(other.spec)}). Sketch every part with the same map spec "
                "(same kind, n_features, bandwidth, variant and seed)."
            )
        super().check_compatible(other)

    def _attrs(self) -> dict[str, Any]:  # test_seed is saved in test_matrix, beside the scheme it seeds
        return {
            "count": self.count,
            "squared_norm_sum": self.squared_norm_sum,
            "n_invalid": self.n_invalid,
            "test_matrix": self._test_matrix_spec(),
        }

    @classmethod
    def _from_parts(cls, spec, map_arrays, attrs, arrays) -> NystromSketch:
        return cls(**cls._range_parts(spec, map_arrays, attrs, arrays))

    @staticmethod
    def _range_parts(spec, map_arrays, attrs, arrays) -> dict[str, Any]:
        """The fields of a Nystrom sketch file (map, count, sums, range sketch, test seed), checked."""
        from ..maps import map_from_spec

        feature_map = map_from_spec(spec, map_arrays)
        width = feature_map.n_features_out_
        expect_array(arrays, "feature_sum", (width,), np.float64)
        test = attrs.get("test_matrix")
        if not isinstance(test, dict) or test.get("scheme") != TEST_MATRIX_SCHEME:
            raise InputError(
                f"Expected attribute test_matrix with scheme {TEST_MATRIX_SCHEME!r}. Got {test!r}: the sketch "
                "was made by another version of streamrff; re-sketch the data."
            )
        test_seed = normalize_seed(test.get("seed"), "test_matrix seed")
        sketch_size = check_sketch_size(test.get("sketch_size"), width)
        range_sketch = expect_array(arrays, "range_sketch", (width, sketch_size), np.float64)
        expect_int(attrs, "count")
        expect_int(attrs, "n_invalid")
        squared_norm_sum = expect_squared_norm_sum(attrs)
        return {
            "feature_map": feature_map, "count": attrs["count"], "feature_sum": arrays["feature_sum"],
            "squared_norm_sum": squared_norm_sum, "range_sketch": range_sketch, "test_seed": test_seed,
            "n_invalid": attrs["n_invalid"],
        }  # fmt: skip

    @classmethod
    def chunk_job(cls, feature_map: FeatureMap, sketch_size: int, test_seed: int, dtype: Any = "float32") -> ChunkJob:
        """The engine's pass for range sketches ``sum z z^T Omega`` (``Omega`` of ``test_seed``) of a fitted map."""
        kernel = functools.partial(
            _nystrom_kernel, feature_map=feature_map, sketch_size=sketch_size, test_seed=test_seed, dtype=dtype
        )
        key = f"nystrom-{feature_map.fingerprint[:20]}-{sketch_size}-{test_seed}"
        return ChunkJob(kernel, cls, key + _dtype_suffix(dtype), feature_map.n_features_out_)

    def __repr__(self) -> str:
        return (
            f"NystromSketch(count={self.count}, n_features={self.feature_sum.shape[0]}, "
            f"sketch_size={self.sketch_size}, test_seed={self.test_seed}, map={describe_spec(self.spec)})"
        )


def _dtype_suffix(dtype: Any) -> str:
    """What a checkpoint key adds for float64 features (float32 partials differ by rounding)."""
    return "-float64" if np.dtype(dtype) == np.float64 else ""


def _nystrom_kernel(
    rows: np.ndarray, row_offset: int, valid: np.ndarray | None, feature_map: FeatureMap, sketch_size: int,
    test_seed: int, dtype: Any = "float32",
) -> NystromSketch:  # fmt: skip
    n_invalid = invalid_count(valid)
    return nystrom_sketch_of_chunk(rows, feature_map, sketch_size, test_seed, n_invalid=n_invalid, dtype=dtype)


def check_sketch_size(sketch_size: Any, width: int) -> int:
    """``sketch_size`` as an int in ``1..width`` (the map's output width D), or InputError."""
    size = check_positive_int(sketch_size, "sketch_size")
    if size > width:
        raise InputError(
            f"sketch_size must be <= the map's output width D = {width}. Got {size}; lower sketch_size "
            "(or use moments='full': at this D the full moment is as cheap)."
        )
    return size


@single_blas_thread
def nystrom_sketch_of_chunk(
    rows: np.ndarray,
    feature_map: FeatureMap,
    sketch_size: int,
    test_seed: int,
    n_invalid: int = 0,
    dtype: Any = "float32",
) -> NystromSketch:
    """The pure per-chunk kernel: ``Y = sum z z^T Omega`` over trusted, finite ``rows``.

    Row tiles are embedded into one reused buffer; per tile ``Z^T (Z Omega)`` is
    two GEMMs in the features' dtype, accumulated in float64 (as the moment
    sketch's rank-k updates), so the chunk's features are never all in memory.
    """
    dtype = np.dtype(dtype)
    width = feature_map.n_features_out_
    omega = test_matrix(test_seed, width, sketch_size).astype(dtype)
    feature_sum = np.zeros(width)
    range_sketch = np.zeros((width, sketch_size))
    projected = np.empty((0, sketch_size), dtype=dtype)
    tile_range = np.empty((width, sketch_size), dtype=dtype)
    squared_norm_sum = 0.0
    tile_rows = max(_MIN_TILE_ROWS, feature_map._tile_rows(width))
    for _, features in feature_map.embed_tiles(rows, tile_rows=tile_rows, dtype=dtype):
        feature_sum += tile_column_sums(features)
        squared_norm_sum += float(np.einsum("ij,ij->i", features, features).sum(dtype=np.float64))
        if projected.shape[0] != features.shape[0]:
            projected = np.empty((features.shape[0], sketch_size), dtype=dtype)
        np.matmul(features, omega, out=projected)
        range_sketch += np.matmul(features.T, projected, out=tile_range)
    return NystromSketch(feature_map, rows.shape[0], feature_sum, squared_norm_sum, range_sketch, test_seed, n_invalid)


def nystrom_eigenpairs(sketch: NystromSketch, rank: int) -> tuple[np.ndarray, np.ndarray, float]:
    """Top ``rank`` eigenpairs of the centred covariance from its Nystrom sketch, and its exact trace.

    With ``C = M/n - mu mu^T`` and ``Omega = Q R`` (thin QR), ``C Q = (Y/n -
    mu (mu^T Omega)) R^{-1}``; then, as Tropp et al. (2017, Algorithm 3):
    ``Y_nu = C Q + nu Q``, ``B = Q^T Y_nu = U^T U`` (Cholesky),
    ``E = Y_nu U^{-1}``, ``E = V S W^T`` (thin SVD), eigenvalues
    ``max(S^2 - nu, 0)`` with eigenvectors ``V``: the rank-``rank`` truncation
    of the Nystrom approximation ``C Q (Q^T C Q)^+ Q^T C`` of ``C``. The
    shift ``nu = sqrt(D) * eps32 * ||C Q||_F`` exceeds the float32 rounding of
    the sketched features (the paper's ``eps`` of float64 would not), and is
    raised tenfold while the Cholesky factorisation fails.

    Returns
    -------
    eigenvalues : ndarray of shape (rank,), float64, decreasing, >= 0
    eigenvectors : ndarray of shape (D, rank), float64, orthonormal columns
    trace : float
        ``trace(C) = sum ||z||^2 / n - ||mu||^2`` (exact, not sketched).
    """
    # One BLAS thread: O(D l^2) flops take < 1 s at D = 16 384, l = 512, while OpenBLAS's
    # spinning threads on a busy 2-core machine took 12 s for the SVD at D = 1024; and the
    # result does not depend on the machine's thread count.
    with one_blas_thread():
        values, vectors, trace, _ = nystrom_reconstruction(sketch, rank)
    return values, vectors, trace


def nystrom_reconstruction(
    sketch: NystromSketch, rank: int, epsilon: float = float(np.finfo(np.float32).eps)
) -> tuple[np.ndarray, np.ndarray, float, float]:
    """:func:`nystrom_eigenpairs` and the shift ``nu`` it used (run it under :func:`one_blas_thread`).

    ``epsilon`` is the relative rounding of the sketched products (float32 by
    default, as the features of :func:`nystrom_sketch_of_chunk`); the shift is
    ``sqrt(D) * epsilon * ||C Q||_F``. Eigenvalues at or below ``nu`` are not
    resolved by the sketch (they come out 0).
    """
    from scipy.linalg import LinAlgError, cholesky, solve_triangular

    n = sketch.count
    omega = sketch.test_matrix
    mean = sketch.feature_sum / n
    centred = sketch.range_sketch / n - np.outer(mean, mean @ omega)
    q, r = np.linalg.qr(omega)
    centred = solve_triangular(r, centred.T, trans="T").T  # C Q = C Omega R^{-1}
    shift = np.sqrt(omega.shape[0]) * epsilon * max(np.linalg.norm(centred), np.finfo(float).tiny)
    for _ in range(8):
        shifted = centred + shift * q
        inner = q.T @ shifted
        try:
            factor = cholesky((inner + inner.T) / 2.0, lower=False)
            break
        except LinAlgError:
            shift *= 10.0
    else:  # pragma: no cover - B + nu I is positive definite for nu > ||rounding||
        raise InputError("The Nystrom reconstruction failed: the sketch is not positive semidefinite (corrupt?).")
    basis = solve_triangular(factor, shifted.T, trans="T").T  # E = Y_nu U^{-1}
    vectors, singular, _ = np.linalg.svd(basis, full_matrices=False)
    values = np.maximum(singular[:rank] ** 2 - shift, 0.0)
    trace = max(sketch.squared_norm_sum / n - float(mean @ mean), 0.0)
    return values, vectors[:, :rank], trace, float(shift)

