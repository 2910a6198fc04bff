"""The Kernel-JL sketch of Kpotufe & Sriperumbudur (2020): the :class:`KJL` map.

Not oblivious: fitted on a seeded landmark sample of the data, whose rows travel
with the map as its state arrays (saved in sketch and map files, no pickle);
the Gaussian projection is regenerated from the seed. Once fitted it is
broadcast like any other map.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.spatial.distance import cdist

from .._base.blas import single_blas_thread
from .._base.sampling import median_heuristic
from .._base.validation import check_bandwidth, check_positive_int, normalize_seed, store_params
from ..errors import InputError
from ..typing import MapSpec, Seed
from .base import FeatureMap, _fitted_bandwidth, _require

__all__ = ["KJL"]


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
        store_params(self, locals())

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
            raise InputError(f"K-JL needs at least 2 landmark rows. Got {sample.shape[0]} sample(s); pass more rows.")
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

    def _spec_entries(self) -> MapSpec:
        return {
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
