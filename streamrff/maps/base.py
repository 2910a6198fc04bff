"""The base of streamrff's feature maps: the :class:`FeatureMap` contract and what every map shares.

A fitted map is fully described by its JSON-able :attr:`FeatureMap.spec`; the
random parameters are regenerated from the spec wherever the map is used, so
the same spec gives the same map on every worker and every machine, and a
pickled map (as Dask ships it) carries only the spec.

This module holds the base class and its machinery: the registry of map kinds
behind :func:`map_from_spec`, the per-process cache of parameters regenerated
from a spec, the fingerprint (sha256 of spec and parameters), the helpers that
read a spec back, the tiling of rows into cache-sized blocks with
:func:`tile_column_sums`, and :func:`exact_kernel`, the reference every map is
tested against. The map families live beside it: :mod:`streamrff.maps.fourier`
(RFF), :mod:`streamrff.maps.relative` (RelativeErrorRFF), :mod:`streamrff.maps.jl`
(JL) and :mod:`streamrff.maps.kjl` (KJL).

Convention (see DESIGN.md): ``k(x, y) = exp(-||x - y||^2 / (2 sigma^2))`` with
``sigma = bandwidth``.
"""

from __future__ import annotations

import numbers
from abc import ABCMeta, abstractmethod
from collections.abc import Iterator
from typing import Any, ClassVar

import numpy as np
from scipy.spatial.distance import cdist
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils.validation import validate_data

from .._base.blas import single_blas_thread
from .._base.blas import tile_column_sums as tile_column_sums
from .._base.registry import KindRegistry
from .._base.sampling import bottom_k, row_keys
from .._base.validation import check_bandwidth, check_finite_rows, check_rows, check_width
from ..errors import InputError, NotFittedMapError
from ..typing import ArrayLike2D, MapSpec
from .params import cached_params, spec_fingerprint, spec_key

__all__ = ["FeatureMap", "exact_kernel", "map_from_spec", "spec_bandwidth", "tile_column_sums"]


#: Bytes of float32 features one tile may hold: small enough that a tile's projection, features
#: and their sums stay in cache (single-core time per row was flat from 256 KiB to 1 MiB tiles and
#: 15-25% slower at 4 MiB, d = 32, D = 1024, on the 2-core dev machine), large enough that the
#: Python between numpy calls (which holds the GIL) is rare: 2 threads gave 1.57x at 512 KiB
#: tiles and 1.76x at 1 MiB in the same run.
_TILE_BYTES = 2**20
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
        raise InputError(f"X and Y must have the same number of columns. Got {X.shape[1]} and {Y.shape[1]}.")
    return np.exp(-cdist(X, Y, "sqeuclidean") / (2.0 * sigma * sigma))


class FeatureMap(KindRegistry, ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator, metaclass=ABCMeta):
    """Base class of streamrff's feature maps (scikit-learn transformers).

    Subclasses implement ``_begin_fit``, ``_finish_fit``, ``_spec_entries``,
    ``_from_spec``, a draw in :mod:`.params` and ``_embed_tile``. Fitting happens in two
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

    _registry: ClassVar[dict[str, type[FeatureMap]]] = {}

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
            # With the rows at hand, a map may look at a sample it would not ask the engine to
            # draw (an extra pass there): RFF's phase precision check (_in_memory_sample_rows).
            n_rows = max(n_rows, self._in_memory_sample_rows(X))
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
    def spec(self) -> MapSpec:
        """JSON-able description from which :func:`map_from_spec` rebuilds this map."""
        self._check_fitted()
        return {"kind": self.kind, "n_features_in": self.n_features_in_, **self._spec_entries()}

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

    def _feature_dots(self, X: np.ndarray, direction: np.ndarray) -> np.ndarray:
        """``transform(X) @ direction`` of trusted rows, float64, without holding ``X``'s features.

        Tile by tile: the float32 features of :meth:`transform` times ``direction`` in
        float32 (a GEMV). Maps with a compiled path (:class:`RFF`) fuse the two.
        """
        out = np.empty(X.shape[0], dtype=np.float64)
        weights = np.asarray(direction, dtype=np.float32)
        for start, features in self.embed_tiles(X):
            out[start : start + features.shape[0]] = features @ weights
        return out

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
            # bandwidth="median" (the default) is chosen from data: say so, as that is why fit is needed.
            median = " (bandwidth='median' is chosen from a sample of the data)" if self._median_bandwidth() else ""
            raise NotFittedMapError(
                f"This {type(self).__name__} is not fitted yet{median}. Call fit(X) first, or pass it "
                "to streamrff.sketch, which fits it on a seeded sample of the data"
                + (", or give a numeric bandwidth and fit it on any rows of the data's width." if median else ".")
            )

    def _median_bandwidth(self) -> bool:
        """Whether this map takes its bandwidth from the data by the median heuristic."""
        return getattr(self, "bandwidth", None) == "median"

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
        """Random parameters, regenerated from the spec (:mod:`.params`) and cached per process."""
        return cached_params(type(self).kind, spec_key(self.spec))

    def _in_memory_sample_rows(self, X: np.ndarray) -> int:
        """Rows of the seeded sample that an in-memory :meth:`fit` on ``X`` passes to ``_finish_fit``
        even when ``_begin_fit`` asks for fewer (called after it): a look at data already in memory,
        which the Dask engine skips rather than pay a pass. 0 here."""
        return 0

    @abstractmethod
    def _spec_entries(self) -> MapSpec:
        """The spec's entries after ``kind`` and ``n_features_in``, in the order they are written."""
        ...

    @abstractmethod
    def _output_width(self) -> int: ...

    @abstractmethod
    def _embed_tile(self, X: np.ndarray, out: np.ndarray) -> None: ...

    @abstractmethod
    def _begin_fit(self, n_features_in: int) -> tuple[int, int]: ...

    @abstractmethod
    def _finish_fit(self, sample: np.ndarray) -> FeatureMap: ...

    @classmethod
    @abstractmethod
    def _from_spec(cls, spec: MapSpec, arrays: dict[str, np.ndarray]) -> FeatureMap: ...


def _fingerprint(feature_map: FeatureMap) -> str:
    if type(feature_map)._params is FeatureMap._params:  # the parameters are a function of the spec
        return spec_fingerprint(feature_map.spec, feature_map.state_arrays())
    # parameters computed from fitted state (K-JL's landmarks)
    return spec_fingerprint(feature_map.spec, feature_map.state_arrays(), feature_map._params())


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


def spec_bandwidth(spec: MapSpec) -> float | None:
    """The Gaussian bandwidth of a fitted map's spec (of its inner map for a JL composition), None if it has none.

    Examples
    --------
    >>> spec_bandwidth({"kind": "jl", "inner": {"kind": "rff", "bandwidth": 2.0}}), spec_bandwidth({"kind": "kjl"})
    (2.0, None)
    """
    while isinstance(spec, dict):
        value = spec.get("bandwidth")
        if isinstance(value, numbers.Real) and not isinstance(value, bool) and np.isfinite(value) and value > 0:
            return float(value)
        spec = spec.get("inner")  # type: ignore[assignment]
    return None


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
    >>> rff = srf.RFF(n_features=8, bandwidth=1.0).fit(X)
    >>> twin = srf.map_from_spec(rff.spec)
    >>> bool((twin.transform(X) == rff.transform(X)).all()), twin.fingerprint == rff.fingerprint
    (True, True)
    """
    if not isinstance(spec, dict):
        raise InputError(f"spec must be a dict (a map's .spec). Got {type(spec).__name__}.")
    from . import JL, KJL, RFF, RelativeErrorRFF  # noqa: F401  (every kind registers on import)

    kind = spec.get("kind")
    if kind not in FeatureMap._registry:
        raise InputError(f"Unknown feature map kind {kind!r}. Expected one of {sorted(FeatureMap._registry)}.")
    return FeatureMap._registry[kind]._from_spec(spec, dict(arrays or {}))
