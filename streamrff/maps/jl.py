"""The Johnson-Lindenstrauss projection after another map: the :class:`JL` map.

``z(x) = P^T inner(x)`` with a seeded Gaussian ``P`` (Phillips & Tai 2018, sec. 4):
storage drops from the inner map's width to ``n_components`` while inner products
are kept in expectation. Its spec nests the inner map's spec.
"""

from __future__ import annotations

import numpy as np
from sklearn.base import clone

from .._base.validation import check_positive_int, normalize_seed
from ..errors import InputError
from ..typing import MapSpec, Seed
from .base import FeatureMap, _require, map_from_spec
from .fourier import RFF

__all__ = ["JL"]



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
    >>> jl = srf.JL(srf.RFF(n_features=512, bandwidth=1.0), n_components=64).fit(X)
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
            raise InputError(f"inner_map must be a streamrff FeatureMap such as RFF(). Got {type(inner).__name__}.")
        check_positive_int(self.n_components, "n_components")
        self.seed_ = normalize_seed(self.seed)
        self.inner_map_ = clone(inner)
        self.n_features_in_ = int(n_features_in)
        return self.inner_map_._begin_fit(n_features_in)

    def _median_bandwidth(self) -> bool:
        # No inner map means RFF(), whose bandwidth is the median heuristic.
        return self.inner_map is None or (isinstance(self.inner_map, FeatureMap) and self.inner_map._median_bandwidth())

    def _in_memory_sample_rows(self, X: np.ndarray) -> int:
        return self.inner_map_._in_memory_sample_rows(X)

    def _finish_fit(self, sample: np.ndarray) -> JL:
        self.inner_map_._finish_fit(sample)
        return self

    def _spec_entries(self) -> MapSpec:
        return {
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

    def _output_width(self) -> int:
        return int(self.n_components)

    def _embed_tile(self, X: np.ndarray, out: np.ndarray) -> None:
        inner = self.inner_map_._embed(X, out.dtype)
        out[...] = inner.astype(np.float64, copy=False) @ self._params()["projection"]
