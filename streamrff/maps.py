"""Oblivious, seeded feature maps for the Gaussian kernel.

A fitted map is fully described by its JSON-able :attr:`FeatureMap.spec`; the
random parameters are regenerated from the spec wherever the map is used, so
the same spec gives the same map on every worker and every machine, and a
pickled map (as Dask ships it) carries only the spec.

Convention (see DESIGN.md): ``k(x, y) = exp(-||x - y||^2 / (2 sigma^2))`` with
``sigma = bandwidth``.
"""

from __future__ import annotations

import functools
import hashlib
import json
from abc import ABCMeta, abstractmethod
from collections.abc import Iterator
from typing import Any, ClassVar

import numpy as np
from scipy.spatial.distance import cdist
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin, clone
from sklearn.utils.validation import validate_data

from ._blas import single_blas_thread
from ._validation import (
    check_bandwidth,
    check_finite_rows,
    check_positive_int,
    check_rows,
    check_width,
    normalize_seed,
)
from .errors import InputError, NotFittedMapError
from .sampling import MEDIAN_SAMPLE_ROWS, bottom_k, median_heuristic, row_keys
from .typing import ArrayLike2D, MapSpec, Seed

__all__ = ["FeatureMap", "RFF", "JL", "KJL", "exact_kernel", "map_from_spec"]

#: Bytes of float32 features one tile may hold: small enough that a tile's projection, features
#: and their sums stay in cache (single-core time per row was flat from 256 KiB to 1 MiB tiles and
#: 15-25% slower at 4 MiB, d = 32, D = 1024, on the 2-core dev machine), large enough that the
#: Python between numpy calls (which holds the GIL) is rare: 2 threads gave 1.57x at 512 KiB
#: tiles and 1.76x at 1 MiB in the same run.
_TILE_BYTES = 2**20
#: Rows that one float32 GEMV sums before the float64 accumulation (see tile_column_sums).
_SUM_SEGMENT_ROWS = 256
#: Fewest rows per projection GEMM in the compiled RFF sums (see RFF._feature_sums).
_MIN_PROJECTION_ROWS = 256
#: The offsets argument of the compiled kernels for the sincos variant (which has none).
_NO_OFFSETS = np.zeros(0, np.float32)
_NO_OFFSETS.setflags(write=False)  # read-only like the cosphase offsets: one numba type for both

#: SeedSequence spawn key of the JL projection stream (ASCII "JL-P"), distinct from the RFF stream.
_JL_STREAM = 0x4A4C2D50


def tile_column_sums(features: np.ndarray) -> np.ndarray:
    """Column sums of a feature tile of shape (..., rows, columns), in float64.

    Like the second moment's rank-k update, the rows are reduced in the
    features' precision, by GEMVs over segments of at most 256 rows, and the
    segments are accumulated in float64. For float32 features the GEMV's
    rounding (measured 3e-9 to 1.4e-8 norm-wise per 256 rows, d = 32,
    D = 1024) stays below that of the float32 features themselves (up to 7e-8
    against float64 math), at an eighth of the cost of an exact float64 sum:
    numpy's float32 to float64 cast runs at ~0.4 ns per element.
    """
    rows, columns = features.shape[-2:]
    lead = features.shape[:-2]
    whole = rows - rows % _SUM_SEGMENT_ROWS
    ones = _segment_ones(features.dtype.char)
    if whole == rows == _SUM_SEGMENT_ROWS:  # the common case: one segment, one batched GEMV
        return np.matmul(ones, features).astype(np.float64)
    total = np.zeros((*lead, columns))
    if whole:
        segments = features[..., :whole, :].reshape(*lead, whole // _SUM_SEGMENT_ROWS, _SUM_SEGMENT_ROWS, columns)
        total += np.matmul(ones, segments).sum(axis=-2, dtype=np.float64)
    if whole < rows:
        total += np.matmul(ones[: rows - whole], features[..., whole:, :])
    return total


@functools.lru_cache(maxsize=4)
def _segment_ones(dtype_char: str) -> np.ndarray:
    ones = np.ones(_SUM_SEGMENT_ROWS, dtype=dtype_char)
    ones.setflags(write=False)
    return ones


def exact_kernel(X: ArrayLike2D, Y: ArrayLike2D | None = None, bandwidth: float = 1.0) -> np.ndarray:
    """Exact Gaussian Gram matrix ``K[i, j] = exp(-||X_i - Y_j||^2 / (2 bandwidth^2))``.

    The reference against which the approximations are tested.

    Parameters
    ----------
    X : array-like of shape (n, d)
    Y : array-like of shape (m, d), default=None
        Defaults to ``X``.
    bandwidth : float, default=1.0
        Kernel width sigma, > 0.

    Returns
    -------
    K : ndarray of shape (n, m), float64

    Raises
    ------
    InputError
        On non-2-D or non-finite input, mismatched widths or a non-positive bandwidth.

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> srf.exact_kernel(np.zeros((1, 2)), np.ones((1, 2)), bandwidth=1.0).round(4)
    array([[0.3679]])
    """
    sigma = check_bandwidth(bandwidth)
    if isinstance(sigma, str):
        raise InputError("exact_kernel needs a numeric bandwidth. Got 'median'.")
    X = check_rows(X, "X").astype(np.float64)
    Y = X if Y is None else check_rows(Y, "Y").astype(np.float64)
    if X.shape[1] != Y.shape[1]:
        raise InputError(
            f"X and Y must have the same number of columns. Got {X.shape[1]} and {Y.shape[1]}."
        )
    return np.exp(-cdist(X, Y, "sqeuclidean") / (2.0 * sigma * sigma))


def _spec_key(spec: MapSpec) -> str:
    return json.dumps(spec, sort_keys=True, separators=(",", ":"))


def _hash_arrays(digest: Any, arrays: dict[str, np.ndarray]) -> None:
    for name in sorted(arrays):
        array = np.ascontiguousarray(arrays[name])
        little = array.astype(array.dtype.newbyteorder("<"), copy=False)
        digest.update(f"{name}:{little.dtype.str}:{little.shape}".encode())
        digest.update(little.tobytes())


class FeatureMap(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator, metaclass=ABCMeta):
    """Base class of streamrff's feature maps (scikit-learn transformers).

    Subclasses implement ``_begin_fit``, ``_finish_fit``, ``spec``,
    ``_from_spec``, ``_make_params`` and ``_embed_tile``. Fitting happens in two
    steps so that the Dask engine can supply the seeded row sample itself:
    ``_begin_fit(n_features_in)`` validates parameters and says how many sample
    rows are needed and under which seed they are keyed; ``_finish_fit(rows)``
    completes the fit from the bottom-k rows.

    Examples
    --------
    Every map is a fitted scikit-learn transformer whose spec rebuilds it exactly:

    >>> import numpy as np, streamrff as srf
    >>> X = np.random.default_rng(0).normal(size=(6, 3))
    >>> rff = srf.RFF(n_features=2048, bandwidth=1.5, seed=0).fit(X)
    >>> isinstance(rff, srf.FeatureMap)
    True
    >>> rebuilt = srf.map_from_spec(rff.spec)
    >>> rebuilt.fingerprint == rff.fingerprint, bool((rebuilt.transform(X) == rff.transform(X)).all())
    (True, True)
    >>> Z = rff.transform(X)
    >>> bool(np.abs(Z @ Z.T - srf.exact_kernel(X, X, 1.5)).max() < 0.1)
    True
    """

    kind: ClassVar[str] = ""
    _registry: ClassVar[dict[str, type[FeatureMap]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.kind:
            FeatureMap._registry[cls.kind] = cls

    # -- scikit-learn contract -------------------------------------------------
    @single_blas_thread
    def fit(self, X: ArrayLike2D, y: Any = None) -> FeatureMap:
        """Infer the input width, choose the bandwidth if asked, and draw the random parameters.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features_in)
        y : ignored

        Returns
        -------
        self : FeatureMap
        """
        try:
            X = self._validate_input(X, reset=True)
            n_rows, sample_seed = self._begin_fit(X.shape[1])
            if n_rows:
                sample = X[bottom_k(row_keys(sample_seed, 0, X.shape[0]), n_rows)]
            else:
                sample = X[:0]
            return self._finish_fit(np.asarray(sample, dtype=np.float64))
        except BaseException:
            # validate_data sets n_features_in_ before the later checks run: a failed
            # fit must not leave a map that is_fitted() yet lacks its parameters.
            vars(self).pop("n_features_in_", None)
            raise

    def transform(self, X: ArrayLike2D) -> np.ndarray:
        """Embed rows of ``X``: returns float32 features of shape (n_samples, n_features_out)."""
        self._check_fitted()
        X = self._validate_input(X, reset=False)
        return self._embed(X)

    def __sklearn_tags__(self):  # noqa: D105
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float32"]
        tags.input_tags.allow_nan = False
        return tags

    # -- identity ---------------------------------------------------------------
    @property
    @abstractmethod
    def spec(self) -> MapSpec:
        """JSON-able description from which :func:`map_from_spec` rebuilds this map."""
        ...

    @property
    def fingerprint(self) -> str:
        """sha256 of the spec and of every random parameter: equal fingerprints, equal maps."""
        self._check_fitted()
        return _fingerprint(self)

    def state_arrays(self) -> dict[str, np.ndarray]:
        """Fitted arrays that the spec does not determine (landmarks); empty for oblivious maps."""
        return {}

    @property
    def n_features_out_(self) -> int:
        """Width of the embedding."""
        self._check_fitted()
        return self._output_width()

    @property
    def _n_features_out(self) -> int:  # used by get_feature_names_out
        return self.n_features_out_

    def is_fitted(self) -> bool:
        """Whether :meth:`fit` has run (or the map was rebuilt from a spec)."""
        return hasattr(self, "n_features_in_")

    # -- embedding --------------------------------------------------------------
    def _tile_rows(self, n_columns: int) -> int:
        return max(16, _TILE_BYTES // (4 * max(n_columns, 1)))

    @single_blas_thread
    def _embed(self, X: np.ndarray, dtype: Any = np.float32) -> np.ndarray:
        """Embed trusted, validated rows into a new array of ``dtype`` (float32 or float64)."""
        out = np.empty((X.shape[0], self._output_width()), dtype=dtype)
        step = self._tile_rows(self._output_width())
        for start in range(0, X.shape[0], step):
            self._embed_tile(X[start : start + step], out[start : start + step])
        return out

    def embed_tiles(
        self, X: np.ndarray, tile_rows: int | None = None, dtype: Any = np.float32
    ) -> Iterator[tuple[int, np.ndarray]]:
        """Yield ``(start_row, features)`` for row tiles of trusted ``X``, reusing one buffer.

        The yielded array is overwritten by the next tile: consume it before
        advancing. This is how sketches embed a chunk without holding all of
        its features at once. ``tile_rows`` defaults to a cache-sized tile;
        ``dtype`` is float32 (default) or float64 (about 10x the time for
        RFF maps; see :func:`streamrff.sketch`).
        """
        width = self._output_width()
        step = int(tile_rows) if tile_rows else self._tile_rows(width)
        buffer = np.empty((min(step, X.shape[0]), width), dtype=dtype)
        for start in range(0, X.shape[0], step):
            tile = X[start : start + step]
            out = buffer[: tile.shape[0]]
            self._embed_tile(tile, out)
            yield start, out

    def _feature_sums(self, X: np.ndarray, dtype: Any = np.float32) -> tuple[np.ndarray, float]:
        """Float64 column sums of the features of trusted rows ``X``, and the sum of their squared norms.

        The per-row values are those of :meth:`transform` (in ``dtype``); each
        tile is summed by :func:`tile_column_sums` and the tiles in float64.
        """
        feature_sum = np.zeros(self._output_width())
        squared_norm_sum = 0.0
        for _, features in self.embed_tiles(X, dtype=dtype):
            feature_sum += tile_column_sums(features)
            squared_norm_sum += float(np.einsum("ij,ij->i", features, features).sum(dtype=np.float64))
        return feature_sum, squared_norm_sum

    # -- helpers for subclasses ---------------------------------------------------
    def _check_fitted(self) -> None:
        if not self.is_fitted():
            raise NotFittedMapError(
                f"This {type(self).__name__} is not fitted yet. Call fit(X) first, or pass it "
                "to streamrff.sketch, which fits it on a seeded sample of the data."
            )

    def _validate_input(self, X: Any, reset: bool) -> np.ndarray:
        # Shape errors get streamrff's messages (argument, value and fix) rather
        # than scikit-learn's, which name neither the argument nor a fix.
        shape = getattr(X, "shape", None)
        if shape is not None and len(shape) != 2:
            check_rows(X, "X")
        if shape is not None and len(shape) == 2 and not reset and shape[1] != self.n_features_in_:
            check_width(X, self.n_features_in_, type(self).__name__)
        try:
            X = validate_data(
                self,
                X,
                reset=reset,
                dtype=[np.float64, np.float32],
                ensure_all_finite=False,
                ensure_min_samples=1,
            )
        except ValueError as error:
            if isinstance(error, InputError):
                raise
            raise InputError(f"{error} (in {type(self).__name__}.{'fit' if reset else 'transform'})") from error
        check_finite_rows(X, "X")
        return X

    def _params(self) -> dict[str, np.ndarray]:
        """Random parameters, regenerated from the spec and cached per process."""
        return _cached_params(type(self).kind, _spec_key(self.spec))

    @classmethod
    def _make_params(cls, spec: MapSpec) -> dict[str, np.ndarray]:
        return {}

    @abstractmethod
    def _output_width(self) -> int:
        ...

    @abstractmethod
    def _embed_tile(self, X: np.ndarray, out: np.ndarray) -> None:
        ...

    @abstractmethod
    def _begin_fit(self, n_features_in: int) -> tuple[int, int]:
        ...

    @abstractmethod
    def _finish_fit(self, sample: np.ndarray) -> FeatureMap:
        ...

    @classmethod
    @abstractmethod
    def _from_spec(cls, spec: MapSpec, arrays: dict[str, np.ndarray]) -> FeatureMap:
        ...


@functools.lru_cache(maxsize=32)
@single_blas_thread
def _cached_params(kind: str, spec_json: str) -> dict[str, np.ndarray]:
    params = FeatureMap._registry[kind]._make_params(json.loads(spec_json))
    for array in params.values():
        array.setflags(write=False)
    return params


@functools.lru_cache(maxsize=64)
def _projection_params(kind: str, spec_json: str, dtype_char: str) -> tuple[np.ndarray, np.ndarray | None]:
    """Transposed frequencies (d x m) and phases in the embedding's dtype, for the hot path."""
    params = _cached_params(kind, spec_json)
    frequencies = np.ascontiguousarray(params["frequencies"].T, dtype=dtype_char)
    phases = params["phases"].astype(dtype_char) if "phases" in params else None
    for array in (frequencies, phases):
        if array is not None:
            array.setflags(write=False)
    return frequencies, phases


def _project(X: np.ndarray, frequencies: np.ndarray, out: np.ndarray) -> None:
    """``out = X @ frequencies``. With one input column numpy's matmul does not call BLAS and
    runs ~3x slower than the equal outer product."""
    if frequencies.shape[0] == 1:
        np.multiply(X, frequencies, out=out)
    else:
        np.matmul(X, frequencies, out=out)


def _fingerprint(feature_map: FeatureMap) -> str:
    digest = hashlib.sha256(_spec_key(feature_map.spec).encode())
    _hash_arrays(digest, feature_map._params())
    _hash_arrays(digest, feature_map.state_arrays())
    return digest.hexdigest()


def _fitted_bandwidth(spec: MapSpec) -> float:
    """The numeric bandwidth of a fitted map's spec; "median" would silently rebuild with 1.0."""
    bandwidth = check_bandwidth(_require(spec, "bandwidth"))
    if bandwidth == "median":
        raise InputError("A map spec needs the fitted numeric bandwidth. Got 'median'; use the map's .spec after fit.")
    return bandwidth


def _require(spec: MapSpec, key: str) -> Any:
    if key not in spec:
        raise InputError(f"Map spec of kind {spec.get('kind')!r} lacks the key {key!r}. Got keys {sorted(spec)}.")
    return spec[key]


def _gaussian_frequencies(rng: np.random.Generator, n_rows: int, dim: int, orthogonal: bool) -> np.ndarray:
    """``n_rows`` frequency vectors in R^dim with N(0, I) marginals.

    With ``orthogonal=True`` they come in blocks of ``dim`` mutually orthogonal
    rows (QR of a Gaussian block, sign-corrected to be Haar), each row scaled by
    an independent chi(dim) norm: orthogonal random features (Yu et al. 2016).
    """
    if not orthogonal:
        return rng.standard_normal((n_rows, dim))
    blocks = []
    for _ in range(-(-n_rows // dim)):
        q, r = np.linalg.qr(rng.standard_normal((dim, dim)))
        q *= np.sign(np.diag(r))
        norms = np.sqrt(rng.chisquare(dim, size=dim))
        blocks.append(q.T * norms[:, None])
    return np.concatenate(blocks)[:n_rows]


class RFF(FeatureMap):
    """Random Fourier features for the Gaussian kernel (Rahimi & Recht 2007).

    Parameters
    ----------
    n_features : int, default=1024
        Output width D. Must be even and >= 2 for ``variant="sincos"``.
    bandwidth : float or "median", default=1.0
        Kernel width sigma; ``"median"`` takes the median pairwise distance of a
        seeded sample of 1 000 rows (the same rows the Dask engine samples).
    variant : {"sincos", "cosphase"}, default="sincos"
        ``"sincos"``: ``z(x) = m^-1/2 [cos(Wx), sin(Wx)]`` with m = D/2
        frequencies (Sutherland & Schneider 2015, eq. 1); ``z(x).z(x) = 1`` and
        lower variance for the Gaussian kernel (their eqs. 5-7).
        ``"cosphase"``: ``z(x) = sqrt(2/D) cos(Wx + b)`` with D frequencies and
        phases b ~ U[0, 2 pi) (their eq. 2; scikit-learn's ``RBFSampler``).
    orthogonal : bool, default=False
        Draw frequencies as orthogonal random features (Yu et al. 2016): rows of
        ``W`` orthogonal within blocks of ``d``, with chi(d) norms. Lower variance
        at the same D.
    seed : int, numpy.random.Generator or None, default=0
        Seed of the frequencies (and of the row sample for ``"median"``).

    Attributes
    ----------
    n_features_in_ : int
        Input width d.
    bandwidth_ : float
        Bandwidth in use.
    seed_ : int
        Integer seed recorded in :attr:`spec`.

    Raises
    ------
    InputError
        On an odd or too small ``n_features`` for sincos, a non-positive
        bandwidth, an unknown variant, or bad input rows.

    References
    ----------
    Sutherland, D. J. & Schneider, J. (2015). On the error of random Fourier
    features. UAI. Eqs. (1), (2), (5), (6).
    Yu, F. X. et al. (2016). Orthogonal random features. NeurIPS.

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> X = np.random.default_rng(0).normal(size=(5, 3))
    >>> rff = srf.RFF(n_features=4096, bandwidth=1.0, seed=0).fit(X)
    >>> Z = rff.transform(X)
    >>> Z.shape, Z.dtype
    ((5, 4096), dtype('float32'))
    >>> bool(np.abs(Z @ Z.T - srf.exact_kernel(X, X, 1.0)).max() < 0.1)
    True
    """

    kind = "rff"

    def __init__(
        self,
        n_features: int = 1024,
        bandwidth: float | str = 1.0,
        variant: str = "sincos",
        orthogonal: bool = False,
        seed: Seed = 0,
    ) -> None:
        self.n_features = n_features
        self.bandwidth = bandwidth
        self.variant = variant
        self.orthogonal = orthogonal
        self.seed = seed

    def _check_params(self) -> None:
        if self.variant not in ("sincos", "cosphase"):
            raise InputError(f"variant must be 'sincos' or 'cosphase'. Got {self.variant!r}.")
        n_features = check_positive_int(self.n_features, "n_features", minimum=1)
        if self.variant == "sincos" and (n_features < 2 or n_features % 2):
            suggestion = max(2, n_features + 1)
            raise InputError(
                f"n_features must be even and >= 2 for the sincos variant (got {self.n_features}); "
                f"use {suggestion} or variant='cosphase'."
            )
        if not isinstance(self.orthogonal, (bool, np.bool_)):
            raise InputError(f"orthogonal must be True or False. Got {self.orthogonal!r}.")
        check_bandwidth(self.bandwidth)

    def _begin_fit(self, n_features_in: int) -> tuple[int, int]:
        self._check_params()
        self.seed_ = normalize_seed(self.seed)
        self.n_features_in_ = int(n_features_in)
        return (MEDIAN_SAMPLE_ROWS if self.bandwidth == "median" else 0), self.seed_

    def _finish_fit(self, sample: np.ndarray) -> RFF:
        if self.bandwidth == "median":
            self.bandwidth_ = median_heuristic(sample)
        else:
            self.bandwidth_ = float(self.bandwidth)
        return self

    @property
    def spec(self) -> MapSpec:
        self._check_fitted()
        return {
            "kind": self.kind,
            "n_features_in": self.n_features_in_,
            "n_features": int(self.n_features),
            "bandwidth": self.bandwidth_,
            "variant": self.variant,
            "orthogonal": bool(self.orthogonal),
            "seed": self.seed_,
        }

    @classmethod
    def _from_spec(cls, spec: MapSpec, arrays: dict[str, np.ndarray]) -> RFF:
        bandwidth = _fitted_bandwidth(spec)
        feature_map = cls(
            n_features=_require(spec, "n_features"),
            bandwidth=bandwidth,
            variant=_require(spec, "variant"),
            orthogonal=_require(spec, "orthogonal"),
            seed=_require(spec, "seed"),
        )
        feature_map._begin_fit(check_positive_int(_require(spec, "n_features_in"), "n_features_in"))
        return feature_map._finish_fit(np.empty((0, spec["n_features_in"])))

    @classmethod
    def _make_params(cls, spec: MapSpec) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(spec["seed"])
        n_frequencies = spec["n_features"] // 2 if spec["variant"] == "sincos" else spec["n_features"]
        frequencies = _gaussian_frequencies(rng, n_frequencies, spec["n_features_in"], spec["orthogonal"])
        params = {"frequencies": frequencies / spec["bandwidth"]}
        if spec["variant"] == "cosphase":
            params["phases"] = rng.uniform(0.0, 2.0 * np.pi, size=spec["n_features"])
        return params

    def _output_width(self) -> int:
        return int(self.n_features)

    def _embed_tile(self, X: np.ndarray, out: np.ndarray) -> None:
        # The projection runs in the output's precision. For float32 nothing is lost by
        # it: the phase is rounded to float32 before the cosine anyway, and a float64
        # projection would cost twice the GEMM. It goes to its own contiguous buffer: numpy's
        # matmul, cos and sin run ~15% faster on it than on column halves of `out`.
        if out.dtype == np.float32:
            # One compiled call, shared with the compiled Lloyd kernel (same features bit for bit).
            frequencies, offsets, scale = self._float32_kernel_args()
            projection = np.empty((X.shape[0], frequencies.shape[1]), dtype=np.float32)
            rows = np.ascontiguousarray(X, dtype=np.float32)
            _compiled_sincos().rff_features(rows, frequencies, offsets, scale, projection, out)
            return
        frequencies, phases = _projection_params(self.kind, _spec_key(self.spec), out.dtype.char)
        m = frequencies.shape[1]
        projection = np.empty((X.shape[0], m), dtype=out.dtype)
        sincos = self.variant == "sincos"
        scale = out.dtype.type(1.0 / np.sqrt(m) if sincos else np.sqrt(2.0 / m))
        _project(X, frequencies, out=projection)
        if sincos:
            np.cos(projection, out=out[:, :m])
            np.sin(projection, out=out[:, m:])
        else:
            np.add(projection, phases, out=out)
            np.cos(out, out=out)
        out *= scale

    def _float32_kernel_args(self) -> tuple[np.ndarray, np.ndarray, np.float32]:
        """``(frequencies (d, m), offsets, scale)`` of :func:`streamrff._sincos.rff_features`:
        float32, with offsets of length 0 for the sincos variant."""
        frequencies, phases = _projection_params(self.kind, _spec_key(self.spec), "f")
        m = frequencies.shape[1]
        if self.variant == "sincos":
            return frequencies, _NO_OFFSETS, np.float32(1.0 / np.sqrt(m))
        return frequencies, phases, np.float32(np.sqrt(2.0 / m))

    def _feature_sums(self, X: np.ndarray, dtype: Any = np.float32) -> tuple[np.ndarray, float]:
        # Fused for speed:
        # - float32: one compiled call per chunk (streamrff._sincos) projects each tile and
        #   accumulates its cosines and sines without writing them, holding the GIL once (so
        #   the chunk's threads are not slowed by other threads' Python, such as zarr's reads);
        # - float64 (numpy): a tile's cosines and sines go to two contiguous blocks (numpy's
        #   matmul, sin and cos run 15-50% faster on those than on column halves of a tile);
        # - the scale multiplies the float64 sums, not every feature (a pass over the tile);
        # - with sines and cosines, every row's squared norm is m * scale^2 (cos^2 + sin^2 = 1).
        # The sums agree with those of transform's features to float32 rounding.
        dtype = np.dtype(dtype)
        frequencies, phases = _projection_params(self.kind, _spec_key(self.spec), dtype.char)
        sincos = self.variant == "sincos"
        m = frequencies.shape[1]
        scale = float(dtype.type(1.0 / np.sqrt(m) if sincos else np.sqrt(2.0 / m)))
        sums = np.zeros((2 if sincos else 1, m))
        squares = 0.0
        if dtype == np.float32:
            rows = np.ascontiguousarray(X, dtype=np.float32)
            # Only the projection is held: a cache-sized (rows, m) block, but at least 256 rows,
            # below which the projection GEMM slows (d = 128, D = 4096: 323 ms per 50k rows in
            # 64-row tiles, 244 ms in 256-row ones; equal or better for every D in 256..4096).
            step = max(_MIN_PROJECTION_ROWS, self._tile_rows(m))
            if sincos:
                _compiled_sincos().sincos_feature_sums(rows, frequencies, step, sums)
            else:
                squares = _compiled_sincos().cos_feature_sums(rows, frequencies, phases, step, sums[0])
        else:
            step = self._tile_rows(self._output_width())
            buffers = np.empty((sums.shape[0], min(step, X.shape[0]), m), dtype=dtype)
            for start in range(0, X.shape[0], step):
                tile = X[start : start + step]
                blocks = buffers[:, : tile.shape[0]]
                projection = blocks[-1]
                _project(tile.astype(dtype, copy=False), frequencies, out=projection)
                if sincos:
                    np.cos(projection, out=blocks[0])
                    np.sin(projection, out=projection)
                else:
                    projection += phases
                    np.cos(projection, out=projection)
                    squares += float(np.einsum("ij,ij->i", projection, projection).sum(dtype=np.float64))
                sums += tile_column_sums(blocks)
        if sincos:
            squares = float(X.shape[0] * m)
        return sums.reshape(-1) * scale, squares * scale * scale


@functools.cache
def _compiled_sincos() -> Any:
    """The compiled float32 sin/cos kernels, imported on first use (numba takes ~0.2 s to import)."""
    from . import _sincos

    return _sincos


class JL(FeatureMap):
    """A Johnson-Lindenstrauss Gaussian projection applied after another map.

    ``z(x) = P^T inner(x)`` with ``P[i, j] ~ N(0, 1/n_components)``, so inner
    products are preserved in expectation (Phillips & Tai 2018, sec. 4):
    storage drops from the inner width to ``n_components``.

    Parameters
    ----------
    inner_map : FeatureMap
        The map applied first (cloned and fitted in :meth:`fit`).
    n_components : int, default=256
        Output width.
    seed : int, numpy.random.Generator or None, default=0
        Seed of the projection.

    Attributes
    ----------
    inner_map_ : FeatureMap
        The fitted inner map.
    n_features_in_ : int
    seed_ : int

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> X = np.random.default_rng(0).normal(size=(10, 3))
    >>> jl = srf.JL(srf.RFF(n_features=512), n_components=64).fit(X)
    >>> Z = jl.transform(X)
    >>> Z.shape
    (10, 64)

    Inner products keep approximating the kernel, up to the projection's
    distortion (about ``1/sqrt(64)`` per entry):

    >>> bool(np.abs(Z @ Z.T - srf.exact_kernel(X, X, 1.0)).mean() < 0.2)
    True
    """

    kind = "jl"

    def __init__(self, inner_map: FeatureMap | None = None, n_components: int = 256, seed: Seed = 0) -> None:
        self.inner_map = inner_map
        self.n_components = n_components
        self.seed = seed

    def _begin_fit(self, n_features_in: int) -> tuple[int, int]:
        inner = RFF() if self.inner_map is None else self.inner_map
        if not isinstance(inner, FeatureMap):
            raise InputError(
                f"inner_map must be a streamrff FeatureMap such as RFF(). Got {type(inner).__name__}."
            )
        check_positive_int(self.n_components, "n_components")
        self.seed_ = normalize_seed(self.seed)
        self.inner_map_ = clone(inner)
        self.n_features_in_ = int(n_features_in)
        return self.inner_map_._begin_fit(n_features_in)

    def _finish_fit(self, sample: np.ndarray) -> JL:
        self.inner_map_._finish_fit(sample)
        return self

    @property
    def spec(self) -> MapSpec:
        self._check_fitted()
        return {
            "kind": self.kind,
            "n_features_in": self.n_features_in_,
            "n_components": int(self.n_components),
            "seed": self.seed_,
            "inner_width": self.inner_map_.n_features_out_,
            "inner": self.inner_map_.spec,
        }

    def state_arrays(self) -> dict[str, np.ndarray]:
        return {f"inner/{name}": array for name, array in self.inner_map_.state_arrays().items()}

    @classmethod
    def _from_spec(cls, spec: MapSpec, arrays: dict[str, np.ndarray]) -> JL:
        inner_arrays = {k.split("/", 1)[1]: v for k, v in arrays.items() if k.startswith("inner/")}
        inner = map_from_spec(_require(spec, "inner"), inner_arrays)
        feature_map = cls(inner, n_components=_require(spec, "n_components"), seed=_require(spec, "seed"))
        feature_map.seed_ = normalize_seed(feature_map.seed)
        check_positive_int(feature_map.n_components, "n_components")
        feature_map.inner_map_ = inner
        feature_map.n_features_in_ = inner.n_features_in_
        return feature_map

    @classmethod
    def _make_params(cls, spec: MapSpec) -> dict[str, np.ndarray]:
        # A stream of its own: with default_rng(seed) the projection would reuse the very
        # normals of an inner RFF with the same seed (both default to 0), making P and W
        # dependent, whereas the JL guarantee needs P independent of the inner features.
        rng = np.random.default_rng(np.random.SeedSequence(spec["seed"], spawn_key=(_JL_STREAM,)))
        k = spec["n_components"]
        return {"projection": rng.standard_normal((spec["inner_width"], k)) / np.sqrt(k)}

    def _output_width(self) -> int:
        return int(self.n_components)

    def _embed_tile(self, X: np.ndarray, out: np.ndarray) -> None:
        inner = self.inner_map_._embed(X, out.dtype)
        out[...] = inner.astype(np.float64, copy=False) @ self._params()["projection"]


#: SeedSequence spawn key of the RelativeErrorRFF frequency stream (ASCII "RERF"), so that its
#: frequencies are independent of an RFF's with the same seed (side-by-side comparisons).
_RELATIVE_RFF_STREAM = 0x52455246
#: RelativeErrorRFF warns (VarianceWarning) when the per-feature second moment exceeds this many
#: times a sincos RFF's: it then needs that many times more features for the same accuracy.
RELATIVE_RFF_VARIANCE_LIMIT = 50.0


def _check_fraction(value: Any, name: str, upper: float, include_upper: bool) -> float:
    """Return ``value`` as a float in (0, upper) (or (0, upper] with ``include_upper``) or raise InputError."""
    interval = f"(0, {upper:g}{']' if include_upper else ')'}"
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise InputError(f"{name} must be a number in {interval}. Got {value!r}.")
    number = float(value)
    if not (0.0 < number < upper or (include_upper and number == upper)):
        raise InputError(f"{name} must be in {interval}. Got {value!r}.")
    return number


def _relative_rff_gamma(n_features_in: int, alpha: float, eps: float) -> float:
    """Half-width of the frequency box of :class:`RelativeErrorRFF` (Phillips & Tai 2018, sec. 2).

    ``gamma = sqrt(4 ln(16 d / (sqrt(pi) eps alpha)))``, which bounds the
    truncation bias of every kernel value by ``eps alpha / 4`` (their Lemma 13).
    """
    return float(np.sqrt(4.0 * np.log(16.0 * n_features_in / (np.sqrt(np.pi) * eps * alpha))))


class RelativeErrorRFF(FeatureMap):
    """Relative-error random features for the Gaussian kernel distance between point sets (Phillips & Tai 2018).

    ``m = D/2`` frequency vectors ``v ~ Unif([-gamma, gamma]^d)`` are weighted
    rather than sampled from the kernel's spectrum::

        w(v) = (2 gamma)^(d/2) (4 pi)^(-d/4) exp(-||v||^2 / 8)
        z(x) = m^-1/2 [w(v_j) cos <v_j, x'>, w(v_j) sin <v_j, x'>]_j,   x' = x / (sigma sqrt 2)

    with ``gamma = sqrt(4 ln(16 d / (sqrt(pi) eps alpha)))``. Then
    ``E[z(x).z(y)] = k(x, y) + E_xy`` with ``|E_xy| <= eps alpha / 4`` (their
    Lemma 2 and 13), and the mean embeddings ``F(P)`` of point sets with
    ``D_K^2(P, Q) >= alpha`` satisfy ``||F(P) - F(Q)|| in (1 +- eps) D_K(P, Q)``
    with high probability once D is large enough (Theorems 9 and 12; D grows
    like ``gamma^(2d)`` times the squared volume of the data's region). Unlike
    sincos RFF, whose relative error blows up as ``D_K^2`` shrinks, the
    uniform frequency box keeps the error relative down to ``alpha``.

    The paper's kernel is ``exp(-||x - t||^2)``; streamrff's is
    ``exp(-||x - y||^2 / (2 sigma^2))``, hence the input scaling ``x'``.

    The price is variance: one hash's estimate of ``k(x, x)`` has second moment
    ``(2 gamma)^d (4 pi)^-d (2 pi)^(d/2) ~= (gamma / sqrt(2 pi))^d``
    (``variance_factor_``) against 1 for sincos RFF: about 8 for d = 2, 22 for
    d = 3, 66 for d = 4 with the defaults. The map is meant for small d
    (point sets, shapes, low-dimensional distributions); fitting warns with
    :class:`~streamrff.errors.VarianceWarning` when the factor exceeds
    ``RELATIVE_RFF_VARIANCE_LIMIT`` (50).

    Parameters
    ----------
    n_features : int, default=1024
        Output width D (even, >= 2): D/2 frequencies, a cos and a sin feature each.
    bandwidth : float or "median", default=1.0
        Kernel width sigma; ``"median"`` as for :class:`RFF`.
    alpha : float, default=1e-3
        Smallest squared kernel distance ``D_K^2(P, Q)`` to be approximated with
        relative error, in (0, 1). Enters only through ``gamma`` (logarithmically).
    eps : float, default=0.1
        Target relative error, in (0, 1/2] (the paper assumes eps < 1/2).
    seed : int, numpy.random.Generator or None, default=0
        Seed of the frequencies (and of the row sample for ``"median"``).

    Attributes
    ----------
    n_features_in_ : int
        Input width d.
    bandwidth_ : float
        Bandwidth in use.
    gamma_ : float
        Half-width of the frequency box (in units of the paper's kernel).
    variance_factor_ : float
        ``(gamma / sqrt(2 pi))^d``: per-feature second moment relative to sincos RFF.
    seed_ : int
        Integer seed recorded in :attr:`spec`.

    Raises
    ------
    InputError
        On an odd or too small ``n_features``, ``alpha`` outside (0, 1), ``eps``
        outside (0, 1/2], a non-positive bandwidth, or bad input rows.

    Warns
    -----
    VarianceWarning
        When ``variance_factor_ > RELATIVE_RFF_VARIANCE_LIMIT`` (e.g. d >= 4 with the defaults).

    References
    ----------
    Phillips, J. M. & Tai, W. M. (2018). Relative error RKHS embeddings for
    Gaussian kernels. Sec. 2 (hash family), Lemma 2, Theorems 9 and 12, Lemma 13.

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> X = np.random.default_rng(0).normal(size=(5, 2))
    >>> rel = srf.RelativeErrorRFF(n_features=8192, bandwidth=1.0, seed=0).fit(X)
    >>> Z = rel.transform(X)
    >>> Z.shape, Z.dtype, round(rel.gamma_, 2)
    ((5, 8192), dtype('float32'), 6.96)
    >>> bool(np.abs(Z @ Z.T - srf.exact_kernel(X, X, 1.0)).max() < 0.15)
    True
    """

    kind = "relative_rff"

    def __init__(
        self,
        n_features: int = 1024,
        bandwidth: float | str = 1.0,
        alpha: float = 1e-3,
        eps: float = 0.1,
        seed: Seed = 0,
    ) -> None:
        self.n_features = n_features
        self.bandwidth = bandwidth
        self.alpha = alpha
        self.eps = eps
        self.seed = seed

    def _setup(self, n_features_in: int) -> None:
        n_features = check_positive_int(self.n_features, "n_features", minimum=1)
        if n_features < 2 or n_features % 2:
            raise InputError(
                f"n_features must be even and >= 2: a cos and a sin feature per frequency (got "
                f"{self.n_features}); use {max(2, n_features + 1)}."
            )
        alpha = _check_fraction(self.alpha, "alpha", upper=1.0, include_upper=False)
        eps = _check_fraction(self.eps, "eps", upper=0.5, include_upper=True)
        check_bandwidth(self.bandwidth)
        self.seed_ = normalize_seed(self.seed)
        self.n_features_in_ = int(n_features_in)
        self.gamma_ = _relative_rff_gamma(self.n_features_in_, alpha, eps)
        self.variance_factor_ = float((self.gamma_ / np.sqrt(2.0 * np.pi)) ** self.n_features_in_)

    def _begin_fit(self, n_features_in: int) -> tuple[int, int]:
        import warnings

        from .errors import VarianceWarning

        self._setup(n_features_in)
        if self.variance_factor_ > RELATIVE_RFF_VARIANCE_LIMIT:
            warnings.warn(
                f"RelativeErrorRFF on {self.n_features_in_}-dimensional input: each feature has up to "
                f"{self.variance_factor_:.3g} times the variance of a sincos RFF feature "
                f"((gamma / sqrt(2 pi))^d with gamma = {self.gamma_:.3g}), so it needs about that many "
                "times more features for the same accuracy. It is meant for small d (point sets and "
                "shapes in 1-3 dimensions); use RFF for higher d, or raise alpha or eps to shrink gamma.",
                VarianceWarning,
                stacklevel=3,
            )
        return (MEDIAN_SAMPLE_ROWS if self.bandwidth == "median" else 0), self.seed_

    def _finish_fit(self, sample: np.ndarray) -> RelativeErrorRFF:
        self.bandwidth_ = median_heuristic(sample) if self.bandwidth == "median" else float(self.bandwidth)
        return self

    @property
    def spec(self) -> MapSpec:
        self._check_fitted()
        return {
            "kind": self.kind,
            "n_features_in": self.n_features_in_,
            "n_features": int(self.n_features),
            "bandwidth": self.bandwidth_,
            "alpha": float(self.alpha),
            "eps": float(self.eps),
            "seed": self.seed_,
        }

    @classmethod
    def _from_spec(cls, spec: MapSpec, arrays: dict[str, np.ndarray]) -> RelativeErrorRFF:
        bandwidth = _fitted_bandwidth(spec)
        feature_map = cls(
            n_features=_require(spec, "n_features"),
            bandwidth=bandwidth,
            alpha=_require(spec, "alpha"),
            eps=_require(spec, "eps"),
            seed=_require(spec, "seed"),
        )
        # No VarianceWarning here: it was given when the map was fitted, not on every load.
        feature_map._setup(check_positive_int(_require(spec, "n_features_in"), "n_features_in"))
        return feature_map._finish_fit(np.empty((0, spec["n_features_in"])))

    @classmethod
    def _make_params(cls, spec: MapSpec) -> dict[str, np.ndarray]:
        d = spec["n_features_in"]
        m = spec["n_features"] // 2
        gamma = _relative_rff_gamma(d, spec["alpha"], spec["eps"])
        rng = np.random.default_rng(np.random.SeedSequence(spec["seed"], spawn_key=(_RELATIVE_RFF_STREAM,)))
        frequencies = rng.uniform(-gamma, gamma, size=(m, d))
        # Weights in log space: (2 gamma)^(d/2) overflows for large d while exp(-||v||^2/8) underflows.
        log_weights = (
            0.5 * d * np.log(2.0 * gamma)
            - 0.25 * d * np.log(4.0 * np.pi)
            - np.einsum("ij,ij->i", frequencies, frequencies) / 8.0
            - 0.5 * np.log(m)
        )
        return {
            "frequencies": frequencies / (spec["bandwidth"] * np.sqrt(2.0)),  # <v, x'> = <v / (sigma sqrt 2), x>
            "weights": np.exp(log_weights),
        }

    def _output_width(self) -> int:
        return int(self.n_features)

    def _embed_tile(self, X: np.ndarray, out: np.ndarray) -> None:
        params = self._params()
        projection = X.astype(np.float64, copy=False) @ params["frequencies"].T
        m = projection.shape[1]
        weights = params["weights"].astype(out.dtype)
        np.cos(projection, out=out[:, :m], dtype=out.dtype)
        np.sin(projection, out=out[:, m:], dtype=out.dtype)
        out[:, :m] *= weights
        out[:, m:] *= weights


class KJL(FeatureMap):
    """The Kernel-JL (K-JL) Gaussian sketch of Kpotufe & Sriperumbudur: fitted on landmarks, then broadcast.

    On a seeded landmark sample ``X_L`` of ``n`` rows, with ``K = k(X_L, X_L)``
    and ``Z ~ N(0, 1)^(d' x n)``, ``V^T = Z K / (n sqrt(n d'))`` and
    ``x -> V^T k(X_L, x)`` (their eq. (1) normalisation; sec. 1 and 5). With
    ``center=True`` (the centralised variant of their experiments), ``K`` is
    replaced by the doubly centred ``H K H`` and ``k(X_L, x)`` by
    ``k(X_L, x) - K 1/n``, which is the exact kernel-space centring of the
    sketch. The landmarks travel with the map (``state_arrays``; saved in
    sketch files, no pickle); ``Z`` is regenerated from the seed.

    The paper's kernel is ``exp(-||x - y||^2 / s^2)``; here, as everywhere in
    streamrff, ``exp(-||x - y||^2 / (2 sigma^2))`` with ``sigma = bandwidth``,
    i.e. ``s = sigma sqrt(2)``.

    Parameters
    ----------
    n_landmarks : int, default=200
        Landmark sample size n (the bottom-k row sample, the same whatever the chunking).
    n_components : int or None, default=None
        Output width d'; None means ``min(n_landmarks, 100)``.
    bandwidth : float or "median", default="median"
        Kernel width sigma; "median" is the median pairwise distance of the landmarks.
    center : bool, default=True
        Use the centralised sketch.
    seed : int, numpy.random.Generator or None, default=0
        Seed of the landmark sample and of Z.

    Attributes
    ----------
    landmarks_ : ndarray of shape (n, n_features_in), float64
    bandwidth_ : float
    n_features_in_ : int
    seed_ : int

    References
    ----------
    Kpotufe, S. & Sriperumbudur, B. K. (2020). Gaussian sketching yields a J-L
    lemma in RKHS. AISTATS. Secs. 1 and 5.

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> X = np.random.default_rng(0).normal(size=(1000, 2))
    >>> kjl = srf.KJL(n_landmarks=100, n_components=20).fit(X)
    >>> kjl.transform(X).shape, kjl.landmarks_.shape
    ((1000, 20), (100, 2))

    The landmarks are rows of the data (a seeded sample):

    >>> all((X == landmark).all(axis=1).any() for landmark in kjl.landmarks_)
    True
    """

    kind = "kjl"

    def __init__(
        self,
        n_landmarks: int = 200,
        n_components: int | None = None,
        bandwidth: float | str = "median",
        center: bool = True,
        seed: Seed = 0,
    ) -> None:
        self.n_landmarks = n_landmarks
        self.n_components = n_components
        self.bandwidth = bandwidth
        self.center = center
        self.seed = seed

    def _width(self) -> int:
        if self.n_components is None:
            return min(int(self.n_landmarks), 100)
        return int(self.n_components)

    def _begin_fit(self, n_features_in: int) -> tuple[int, int]:
        check_positive_int(self.n_landmarks, "n_landmarks", minimum=2)
        if self.n_components is not None:
            check_positive_int(self.n_components, "n_components")
        check_bandwidth(self.bandwidth)
        if not isinstance(self.center, (bool, np.bool_)):
            raise InputError(f"center must be True or False. Got {self.center!r}.")
        self.seed_ = normalize_seed(self.seed)
        self.n_features_in_ = int(n_features_in)
        return int(self.n_landmarks), self.seed_

    def _finish_fit(self, sample: np.ndarray) -> KJL:
        if sample.shape[0] < 2:
            vars(self).pop("n_features_in_", None)
            raise InputError(
                f"K-JL needs at least 2 landmark rows. Got {sample.shape[0]} sample(s); pass more rows."
            )
        self.landmarks_ = np.array(sample, dtype=np.float64)
        self.bandwidth_ = median_heuristic(sample) if self.bandwidth == "median" else float(self.bandwidth)
        self._kjl_params = self._compute_params()
        return self

    @single_blas_thread  # recomputed on every worker: its rounding must not depend on the machine
    def _compute_params(self) -> dict[str, np.ndarray]:
        landmarks = self.landmarks_
        n = landmarks.shape[0]
        width = self._width()
        gram = np.exp(-cdist(landmarks, landmarks, "sqeuclidean") / (2.0 * self.bandwidth_**2))
        landmark_mean = gram.mean(axis=1) if self.center else np.zeros(n)
        if self.center:
            centering = np.eye(n) - 1.0 / n
            gram = centering @ gram @ centering
        gaussian = np.random.default_rng(self.seed_).standard_normal((width, n))
        projection = (gaussian @ gram / (n * np.sqrt(n * width))).T  # (n, d'): x -> k(X_L, x) @ projection
        return {"projection": projection, "landmark_mean": landmark_mean}

    def _params(self) -> dict[str, np.ndarray]:
        params = getattr(self, "_kjl_params", None)
        if params is None:  # rebuilt after unpickling without the cache
            params = self._kjl_params = self._compute_params()
        return params

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state.pop("_kjl_params", None)  # regenerated from landmarks and seed: ship only the landmarks
        return state

    @property
    def spec(self) -> MapSpec:
        self._check_fitted()
        return {
            "kind": self.kind,
            "n_features_in": self.n_features_in_,
            "n_landmarks": int(self.landmarks_.shape[0]),
            "n_components": self._width(),
            "bandwidth": self.bandwidth_,
            "center": bool(self.center),
            "seed": self.seed_,
        }

    def is_fitted(self) -> bool:
        return hasattr(self, "landmarks_")

    def state_arrays(self) -> dict[str, np.ndarray]:
        self._check_fitted()
        return {"landmarks": self.landmarks_}

    @classmethod
    def _from_spec(cls, spec: MapSpec, arrays: dict[str, np.ndarray]) -> KJL:
        landmarks = arrays.get("landmarks")
        n_landmarks = check_positive_int(_require(spec, "n_landmarks"), "n_landmarks", minimum=2)
        n_features_in = check_positive_int(_require(spec, "n_features_in"), "n_features_in")
        if landmarks is None or landmarks.shape != (n_landmarks, n_features_in) or landmarks.dtype != np.float64:
            raise InputError(
                f"A K-JL spec needs its landmarks array of shape ({n_landmarks}, {n_features_in}) float64. "
                f"Got {None if landmarks is None else (landmarks.shape, landmarks.dtype)}."
            )
        if not np.isfinite(landmarks).all():
            raise InputError("K-JL landmarks hold NaN or inf.")
        bandwidth = _fitted_bandwidth(spec)
        feature_map = cls(
            n_landmarks=n_landmarks,
            n_components=_require(spec, "n_components"),
            bandwidth=bandwidth,
            center=_require(spec, "center"),
            seed=_require(spec, "seed"),
        )
        feature_map._begin_fit(n_features_in)
        return feature_map._finish_fit(landmarks)

    def _output_width(self) -> int:
        return self._width()

    def _tile_rows(self, n_columns: int) -> int:
        return super()._tile_rows(max(n_columns, self.landmarks_.shape[0]))

    def _embed_tile(self, X: np.ndarray, out: np.ndarray) -> None:
        params = self._params()
        kernel = np.exp(
            -cdist(X.astype(np.float64, copy=False), self.landmarks_, "sqeuclidean") / (2.0 * self.bandwidth_**2)
        )
        kernel -= params["landmark_mean"]
        out[...] = kernel @ params["projection"]


def map_from_spec(spec: MapSpec, arrays: dict[str, np.ndarray] | None = None) -> FeatureMap:
    """Rebuild the fitted map described by ``spec`` (and its state arrays, for fitted maps like K-JL).

    Parameters
    ----------
    spec : dict
        A map's :attr:`FeatureMap.spec`.
    arrays : dict of str to ndarray, optional
        The map's :meth:`FeatureMap.state_arrays`; empty for oblivious maps.

    Returns
    -------
    FeatureMap
        A fitted map whose features equal the original's bit for bit.

    Raises
    ------
    InputError
        If the spec is not a dict, names an unknown kind, or lacks keys.

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> X = np.ones((2, 3))
    >>> rff = srf.RFF(n_features=8).fit(X)
    >>> twin = srf.map_from_spec(rff.spec)
    >>> bool((twin.transform(X) == rff.transform(X)).all()), twin.fingerprint == rff.fingerprint
    (True, True)
    """
    if not isinstance(spec, dict):
        raise InputError(f"spec must be a dict (a map's .spec). Got {type(spec).__name__}.")
    kind = spec.get("kind")
    if kind not in FeatureMap._registry:
        raise InputError(
            f"Unknown feature map kind {kind!r}. Expected one of {sorted(FeatureMap._registry)}."
        )
    return FeatureMap._registry[kind]._from_spec(spec, dict(arrays or {}))
