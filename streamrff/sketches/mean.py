"""The mean sketch: count, float64 feature sums and optional second moments, and its per-chunk kernel.

:func:`sketch_array` sketches rows in memory, :func:`mmd2` reads two mean sketches (an estimate is
a small function over sketches, not a method on them).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import TYPE_CHECKING, Any

import numpy as np

from .._base.blas import single_blas_thread
from .._base.validation import check_feature_dtype, check_rows, check_width
from ..errors import InputError, SketchMismatchError
from ..typing import ArrayLike2D, PathOrURL, StorageOptions
from .base import (
    ChunkJob,
    Sketch,
    SumSketch,
    describe_spec,
    expect_array,
    expect_int,
    expect_squared_norm_sum,
    invalid_count,
    read_sketch_file,
    rebuild_sketch,
)  # fmt: skip
from .columns import (
    DEFAULT_COLUMN_FEATURES,
    ColumnMaps,
    ColumnSketch,
    check_columns,
    column_maps_key,
    column_sketch_of_chunk,
)
from .columns import PREFIX as COLUMN_PREFIX
from .moments import CentredMoments, moment_tile_rows

if TYPE_CHECKING:  # pragma: no cover - the maps import scikit-learn, which reading a sketch file does not need
    from ..formats.sketch import StoredSketch
    from ..maps import FeatureMap


@dataclasses.dataclass(eq=False, repr=False)
class MeanSketch(SumSketch):
    """Count, float64 sum of features and (optionally) the float64 second moment ``sum z z^T``.

    Built with :func:`sketch_array` (in memory) or :func:`streamrff.sketch`
    (Dask); merged with :meth:`merge`; read by :func:`mmd2`.

    Parameters
    ----------
    feature_map : FeatureMap
        The fitted map that produced the features.
    count : int
        Number of rows sketched.
    feature_sum : ndarray of shape (D,), float64
        Sum of the feature vectors.
    squared_norm_sum : float
        Sum of ``||z_i||^2`` (needed for the unbiased MMD when ``||z|| != 1``).
    moment : ndarray of shape (D, D), float64, optional
        Sum of ``z_i z_i^T``; present when sketched with ``moments=True``.
    n_invalid : int, default=0
        Rows skipped because they held NaN or inf (``on_invalid="skip"``).
    columns : ColumnSketch, optional
        Per input column, the sums and second moment of a 1-D map of that column
        (:mod:`streamrff.sketches.columns`); present when sketched with ``columns=True``.

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> X = np.random.default_rng(0).normal(size=(100, 2))
    >>> rff = srf.RFF(n_features=256, bandwidth=1.0).fit(X)
    >>> a, b = srf.sketch_array(X[:60], rff), srf.sketch_array(X[60:], rff)
    >>> whole = srf.sketch_array(X, rff)
    >>> merged = a.merge(b)
    >>> merged.count, bool(np.allclose(merged.feature_sum, whole.feature_sum))
    (100, True)
    """

    kind = "mean"
    _summed_fields = ("count", "feature_sum", "squared_norm_sum", "moment", "n_invalid", "columns")

    feature_map: FeatureMap
    count: int
    feature_sum: np.ndarray
    squared_norm_sum: float
    moment: np.ndarray | None = None
    n_invalid: int = 0
    columns: ColumnSketch | None = None

    @classmethod
    def empty(cls, feature_map: FeatureMap, moments: bool = False) -> MeanSketch:
        """The neutral element: zero rows."""
        width = feature_map.n_features_out_
        return cls(
            feature_map,
            0,
            np.zeros(width),
            0.0,
            np.zeros((width, width)) if moments else None,
        )

    @property
    def has_moments(self) -> bool:
        """Whether the second moment was sketched."""
        return self.moment is not None

    @property
    def mean(self) -> np.ndarray:
        """Mean feature vector (the empirical kernel mean embedding), float64."""
        if self.count == 0:
            raise InputError("The mean of an empty sketch is undefined; sketch at least one row.")
        return self.feature_sum / self.count

    @property
    def has_columns(self) -> bool:
        """Whether the per-column part was sketched (``columns=True``)."""
        return self.columns is not None

    def check_compatible(self, other: Any) -> None:
        super().check_compatible(other)
        if self.has_moments != other.has_moments:
            raise SketchMismatchError(
                "Cannot merge a sketch with second moments and one without. Re-sketch the "
                "part without moments with moments=True (CLI: --moments)."
            )
        mine, theirs = self.columns, other.columns
        if (mine is None) != (theirs is None):
            raise SketchMismatchError(
                f"Cannot merge a sketch with column parts and one without (columns: {mine is not None} vs "
                f"{theirs is not None}). Re-sketch the part without them with columns=True (CLI: --columns)."
            )
        if mine is not None:
            mine.check_compatible(theirs)

    def __sub__(self, other: MeanSketch) -> MeanSketch:
        """The sketch of the rows of ``self`` that are not in ``other`` (a mean sketch is linear).

        Counts, sums, squared norms and (when both have them) second moments are subtracted.
        It is exact when ``other``'s rows are a part of ``self``'s: a leave-out reference.

        Raises
        ------
        SketchMismatchError
            If the maps differ, or one sketch has second moments or column parts and the other not.
        InputError
            If ``other`` has more rows than ``self`` (a negative count), or the sketches have column parts.

        Examples
        --------
        >>> import numpy as np, streamrff as srf
        >>> X = np.random.default_rng(0).normal(size=(100, 2))
        >>> rff = srf.RFF(n_features=64, bandwidth=1.0).fit(X)
        >>> rest = srf.sketch_array(X, rff) - srf.sketch_array(X[:30], rff)
        >>> rest.count, bool(np.allclose(rest.feature_sum, srf.sketch_array(X[30:], rff).feature_sum))
        (70, True)
        """
        if not isinstance(other, MeanSketch):
            return NotImplemented
        self.check_compatible(other)
        if self.columns is not None:
            raise InputError("Cannot subtract sketches with column parts. Sketch both without columns=True.")
        count, n_invalid = self.count - other.count, self.n_invalid - other.n_invalid
        if count < 0 or n_invalid < 0:
            raise InputError(
                f"Cannot subtract a sketch of {other.count} rows from one of {self.count}: the count would be "
                f"{count}. Subtract only a part of the rows a sketch holds."
            )
        moment = None if self.moment is None else self.moment - other.moment
        return MeanSketch(
            self.feature_map, count, self.feature_sum - other.feature_sum,
            float(self.squared_norm_sum - other.squared_norm_sum), moment, n_invalid,
        )  # fmt: skip

    def _arrays(self) -> dict[str, np.ndarray]:
        arrays = super()._arrays()
        if self.columns is not None:
            arrays.update(self.columns.file_arrays())
        return arrays

    def _extra_attrs(self) -> dict[str, Any]:
        attrs: dict[str, Any] = {"moments": self.has_moments}
        if self.columns is not None:  # absent, not null, without columns: the files of before
            attrs.update(self.columns.file_attrs())
        return attrs

    @classmethod
    def _from_parts(cls, spec, map_arrays, attrs, arrays, feature_map=None) -> MeanSketch:
        if feature_map is None:  # else the map's identity (sketches.base.load_described)
            from ..maps import map_from_spec

            feature_map = map_from_spec(spec, map_arrays)
        width = feature_map.n_features_out_
        expect_array(arrays, "feature_sum", (width,), np.float64)
        moment = None
        if attrs.get("moments"):
            moment = expect_array(arrays, "moment", (width, width), np.float64)
        expect_int(attrs, "count")
        expect_int(attrs, "n_invalid")
        squared_norm_sum = expect_squared_norm_sum(attrs)
        columns = None
        if "columns" in attrs:
            columns = ColumnSketch.from_file(feature_map, attrs, arrays, attrs["count"])
        elif any(name.startswith(COLUMN_PREFIX) for name in arrays):
            raise InputError(f"Arrays {sorted(arrays)} include a column part, but the attribute 'columns' is absent.")
        return cls(
            feature_map, attrs["count"], arrays["feature_sum"], squared_norm_sum, moment, attrs["n_invalid"], columns
        )

    @classmethod
    def chunk_job(
        cls, feature_map: FeatureMap, moments: bool = False, dtype: Any = "float32", method: str = "auto",
        column_maps: ColumnMaps | None = None,
    ) -> ChunkJob:  # fmt: skip
        """The engine's pass for mean sketches of a fitted map (arguments checked by the caller, but for the
        NUFFT's fit to the map): :func:`mean_sketch_of_chunk` on every chunk."""
        from ..maps import RFF
        from ..maps.nufft import nufft_supports

        dtype = np.dtype(dtype)
        if method == "nufft" and not nufft_supports(feature_map):
            raise InputError(
                f"method='nufft' serves RFF and RelativeErrorRFF maps on at most 3 input columns. Got "
                f"{describe_spec(feature_map.spec)}. Use method='auto' or 'direct'."
            )
        key = f"mean-{feature_map.fingerprint[:20]}-{'moments' if moments else 'sums'}"
        if column_maps is not None:
            key += f"-columns-{column_maps_key(column_maps)}"
        # RFF maps with float32 features on the direct path: a NaN in a row makes every phase it enters
        # NaN, an inf makes them infinite or NaN, and the sine and cosine of either are NaN, which every
        # sum keeps; so the chunk's sum shows a non-finite row and no pass over the rows is needed first
        # (104 ns per row at d = 768: 3.8% of the structured kernel at D = 4096, one core).
        shows_non_finite = isinstance(feature_map, RFF) and dtype == np.float32 and method != "nufft"
        kernel = functools.partial(
            _mean_kernel, feature_map=feature_map, moments=moments, dtype=dtype, method=method, column_maps=column_maps
        )
        return ChunkJob(
            kernel, cls, key + ("-float64" if dtype == np.float64 else ""), feature_map.n_features_out_, moments,
            _feature_sum_not_finite if shows_non_finite else None,
        )  # fmt: skip

    def __repr__(self) -> str:
        columns = "" if self.columns is None else f", columns={self.columns.column_maps.n_columns}"
        return (
            f"MeanSketch(count={self.count}, n_features={self.feature_sum.shape[0]}, "
            f"moments={self.has_moments}{columns}, map={describe_spec(self.spec)})"
        )


#: Ways to compute a mean sketch's sums: "direct" embeds every row; "nufft" evaluates the sums
#: as one type-3 NUFFT (d <= 3, RFF maps, no moments; optional extra streamrff[nufft]); "auto"
#: takes the NUFFT when it applies and its cost model predicts it at least twice as fast.
SUM_METHODS = ("auto", "direct", "nufft")


def check_sum_method(method: Any, moments: bool, dtype: np.dtype, feature_map: FeatureMap | None = None) -> str:
    """Validate a mean sketch's ``method`` against ``moments``, ``dtype`` and (once fitted) the map."""
    if method not in SUM_METHODS:
        raise InputError(f"method must be one of {SUM_METHODS}. Got {method!r}.")
    if method != "nufft":
        return method
    if moments or dtype != np.float32:
        raise InputError(
            f"method='nufft' computes float32-accurate sums without a second moment. Got moments={moments}, "
            f"dtype='{dtype}'. Use method='auto' or 'direct' for moments or float64 features."
        )
    from ..maps.nufft import nufft_available

    if not nufft_available():
        raise InputError("method='nufft' needs the finufft package. Install it with: pip install 'streamrff[nufft]'.")
    if feature_map is not None:
        MeanSketch.chunk_job(feature_map, moments, dtype, method)  # refuses a map the NUFFT does not serve
    return method


@single_blas_thread
def mean_sketch_of_chunk(
    rows: np.ndarray,
    feature_map: FeatureMap,
    moments: bool = False,
    n_invalid: int = 0,
    dtype: Any = "float32",
    method: str = "auto",
    column_maps: ColumnMaps | None = None,
) -> MeanSketch:
    """Sketch trusted, finite rows: the pure per-chunk kernel that Dask maps over chunks.

    Features are embedded tile by tile into one reused, cache-sized buffer,
    so the chunk's features are never all in memory. Each tile is reduced in
    the features' dtype and the tiles are accumulated in float64: column sums
    by GEMVs over 256-row segments (:func:`streamrff.maps.tile_column_sums`;
    without moments, RFF maps use their fused kernel), and with ``moments``
    each tile's ``Z^T Z`` by a symmetric rank-k update (BLAS ``ssyrk``) of
    the tile centred on its own mean, the mean's terms added in float64
    (:class:`CentredMoments`). Both agree with float64 arithmetic on the same
    features to float32 rounding, the centred moment to that of the
    within-tile variance.
    ``dtype="float64"`` embeds in float64 throughout (about 10x slower:
    numpy's float64 sin/cos are not vectorised).

    For rows in d <= 3 dimensions and an RFF map, ``method="auto"`` (float32,
    no moments) computes the sums by a type-3 NUFFT instead when finufft is
    installed and predicted faster (:mod:`streamrff.maps.nufft`); the sums agree
    to float32 rounding (relative 1e-6).

    With ``column_maps`` (:func:`streamrff.sketches.columns.derive_column_maps`) the
    sketch also holds the per-column part (:func:`streamrff.sketches.columns.column_sketch_of_chunk`).
    """
    dtype = np.dtype(dtype)
    columns = None if column_maps is None else column_sketch_of_chunk(rows, column_maps, dtype)
    from ..maps.nufft import nufft_applies, nufft_mean_sums

    if method == "nufft" or (
        method == "auto" and not moments and dtype == np.float32 and nufft_applies(feature_map, rows)
    ):
        feature_sum, squared_norm_sum = nufft_mean_sums(rows, feature_map)
        return MeanSketch(feature_map, rows.shape[0], feature_sum, squared_norm_sum, None, n_invalid, columns)
    if not moments:
        feature_sum, squared_norm_sum = feature_map._feature_sums(rows, dtype)
        return MeanSketch(feature_map, rows.shape[0], feature_sum, squared_norm_sum, None, n_invalid, columns)
    sums = CentredMoments(feature_map.n_features_out_, dtype)
    for _, features in feature_map.embed_tiles(rows, tile_rows=moment_tile_rows(dtype), dtype=dtype):
        sums.add(features)
    feature_sum, squared_norm_sum, moment = sums.totals()
    return MeanSketch(feature_map, rows.shape[0], feature_sum, squared_norm_sum, moment, n_invalid, columns)


def _mean_kernel(
    rows: np.ndarray, row_offset: int, valid: np.ndarray | None, feature_map: FeatureMap, moments: bool,
    dtype: Any = "float32", method: str = "auto", column_maps: ColumnMaps | None = None,
) -> MeanSketch:  # fmt: skip
    return mean_sketch_of_chunk(
        rows, feature_map, moments=moments, n_invalid=invalid_count(valid), dtype=dtype, method=method,
        column_maps=column_maps,
    )  # fmt: skip


def _feature_sum_not_finite(partial: MeanSketch) -> bool:
    return not bool(np.isfinite(partial.feature_sum).all())


def sketch_array(
    X: ArrayLike2D,
    feature_map: FeatureMap,
    moments: bool = False,
    dtype: Any = "float32",
    method: str = "auto",
    columns: bool = False,
    column_features: int = DEFAULT_COLUMN_FEATURES,
    column_bandwidth: float | None = None,
) -> MeanSketch:
    """Sketch an in-memory array: count, float64 feature sum and optionally the second moment.

    An unfitted map is cloned and fitted on ``X`` first (the input map is not
    modified); the fitted map is ``result.feature_map``.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features_in)
        Finite rows.
    feature_map : FeatureMap
        Fitted or unfitted map.
    moments : bool, default=False
        Also accumulate ``sum z z^T`` (D x D float64).
    dtype : {"float32", "float64"}, default="float32"
        Precision of the features (sums are float64 either way); see
        :func:`streamrff.sketch`.
    method : {"auto", "direct", "nufft"}, default="auto"
        How the sums are computed; see :func:`streamrff.sketch`.
    columns : bool, default=False
        Also sketch each input column alone (:mod:`streamrff.sketches.columns`): for
        :func:`streamrff.explain`'s column table.
    column_features : int, default=64
        Features of each column's 1-D map (even).
    column_bandwidth : float, optional
        Every column kernel's width; by default the map's bandwidth over
        ``sqrt(n_features_in)`` (see :func:`streamrff.sketches.columns.derive_column_maps`).

    Returns
    -------
    MeanSketch

    Raises
    ------
    InputError
        On non-2-D input, NaN/inf rows, a width different from the fitted
        map's, or an unknown ``dtype``.

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> X = np.random.default_rng(0).normal(size=(50, 4)).astype("float32")
    >>> s = srf.sketch_array(X, srf.RFF(n_features=128, bandwidth="median"), moments=True)
    >>> s.count, s.feature_sum.shape, s.moment.shape
    (50, (128,), (128, 128))
    >>> Z = s.feature_map.transform(X).astype(np.float64)
    >>> bool(np.allclose(s.feature_sum, Z.sum(axis=0), atol=1e-5)), bool(np.allclose(s.moment, Z.T @ Z, atol=1e-5))
    (True, True)
    """
    from sklearn.base import clone

    from ..maps import FeatureMap

    if not isinstance(feature_map, FeatureMap):
        raise InputError(f"feature_map must be a streamrff FeatureMap such as RFF(). Got {type(feature_map).__name__}.")
    dtype = check_feature_dtype(dtype)
    X = check_rows(X, "X")
    if feature_map.is_fitted():
        check_width(X, feature_map.n_features_in_, type(feature_map).__name__)
    else:
        feature_map = clone(feature_map).fit(X)
    method = check_sum_method(method, bool(moments), dtype, feature_map)
    column_maps = check_columns(columns, feature_map, column_features, column_bandwidth)
    return mean_sketch_of_chunk(
        X, feature_map, moments=bool(moments), dtype=dtype, method=method, column_maps=column_maps
    )


def mmd2(a: MeanSketch, b: MeanSketch, unbiased: bool = True) -> float:
    """Squared maximum mean discrepancy between the samples behind two mean sketches.

    With ``zbar`` the mean feature vectors, the biased estimate is
    ``||zbar(X) - zbar(Y)||^2``. The unbiased one removes the ``k(x_i, x_i)``
    terms (Sutherland & Schneider 2015, sec. 3.3)::

        MMD^2_u = (||S_x||^2 - Q_x) / (n (n-1)) + (||S_y||^2 - Q_y) / (m (m-1)) - 2 S_x.S_y / (n m)

    with ``S`` the feature sums and ``Q = sum ||z_i||^2``. For unit-norm
    features (sincos RFF), ``Q_x = n`` and the first term is the paper's
    ``n/(n-1) ||zbar||^2 - 1/(n-1)``; other maps use the tracked ``Q``.

    Parameters
    ----------
    a, b : MeanSketch
        Sketches made with the same feature map.
    unbiased : bool, default=True

    Returns
    -------
    float

    Raises
    ------
    SketchMismatchError
        If the sketches come from different maps.
    InputError
        If a sketch is empty, or has fewer than 2 rows for the unbiased estimate.

    References
    ----------
    Sutherland, D. J. & Schneider, J. (2015). On the error of random Fourier
    features. UAI, sec. 3.3. Gretton, A. et al. (2012). A kernel two-sample test. JMLR.

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> rng = np.random.default_rng(0)
    >>> X, Y = rng.normal(size=(500, 2)), rng.normal(1.0, size=(500, 2))
    >>> rff = srf.RFF(n_features=2048, bandwidth=1.0).fit(X)
    >>> bool(srf.mmd2(srf.sketch_array(X, rff), srf.sketch_array(Y, rff)) > 0.1)
    True
    """
    for name, sketch in (("a", a), ("b", b)):
        if not isinstance(sketch, MeanSketch):
            raise InputError(f"{name} must be a MeanSketch. Got {type(sketch).__name__}.")
    if a.fingerprint != b.fingerprint:
        a.check_compatible(b)  # raises with both fingerprints named
    minimum = 2 if unbiased else 1
    for name, sketch in (("a", a), ("b", b)):
        if sketch.count < minimum:
            raise InputError(
                f"Sketch {name} has {sketch.count} row(s); the {'unbiased' if unbiased else 'biased'} "
                f"MMD^2 needs at least {minimum}."
            )
    n, m = a.count, b.count
    sx, sy = a.feature_sum, b.feature_sum
    if not unbiased:
        diff = sx / n - sy / m
        return float(diff @ diff)
    within_x = (sx @ sx - a.squared_norm_sum) / (n * (n - 1.0))
    within_y = (sy @ sy - b.squared_norm_sum) / (m * (m - 1.0))
    return float(within_x + within_y - 2.0 * (sx @ sy) / (n * m))


def load_described(
    path_or_url: PathOrURL, storage_options: StorageOptions = None, verify_key: bytes | None = None
) -> Sketch:
    """:func:`load` for a reader that only describes, compares, merges and saves sketches.

    A mean sketch of an oblivious map (``rff``, ``relative_rff``, ``jl``) without
    a column part holds its map's identity (:class:`streamrff.maps.params.MapIdentity`:
    the spec, state arrays and fingerprint, checked as :func:`load` checks them)
    in place of the estimator, so reading it never imports scikit-learn (0.5 s of
    a command's start); its merges and saves write the same files. Any other
    sketch is loaded as by :func:`load`. ``streamrff info`` and ``merge`` read
    their inputs with it.

    Examples
    --------
    >>> import numpy as np, tempfile, os, streamrff as srf
    >>> from streamrff.sketches.mean import load_described
    >>> s = srf.sketch_array(np.ones((3, 2)), srf.RFF(n_features=8, bandwidth=1.0))
    >>> path = os.path.join(tempfile.mkdtemp(), "s.zarr")
    >>> s.save(path)
    >>> described = load_described(path)
    >>> type(described.feature_map).__name__, described == s, described.merge(s).count
    ('MapIdentity', True, 6)
    """
    from . import KIND_NAMES
    return read_sketch_file(
        path_or_url, _rebuild_described, KIND_NAMES, storage_options=storage_options, verify_key=verify_key
    )


def _rebuild_described(stored: StoredSketch) -> Sketch:
    from ..maps.params import MapIdentity, has_identity

    if stored.kind != "mean" or not has_identity(stored.spec) or "columns" in stored.attrs:
        from . import register_kinds

        register_kinds()
        return rebuild_sketch(stored)
    identity = MapIdentity(stored.spec, stored.map_arrays)
    sketch = MeanSketch._from_parts(stored.spec, stored.map_arrays, stored.attrs, stored.arrays, identity)
    stored.check_written(sketch._file_parts())
    return sketch
