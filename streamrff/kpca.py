"""Kernel PCA from a mergeable second-moment sketch.

One pass over the data builds a :class:`MeanSketch` with moments (count, sum z,
sum z z^T); the centred feature covariance ``C = M/n - mu mu^T`` is
diagonalised with ``eigh``. Because the sketch merges, two sites can sketch
separately and fit on the merged sketch (:meth:`KernelPCA.fit_from_sketch`).
The D x D moment costs ``8 D^2`` bytes per task and ``n D^2`` flops: 8 MiB and
fine at D = 1024, 128 MiB at D = 4096; above that, compose the map with a JL
projection (``JL(RFF(16384), n_components=2048)``) and pass it as ``feature_map``.
"""

from __future__ import annotations

from typing import Any

import dask.array as da
import numpy as np
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin

from ._validation import check_positive_int, check_rows
from .errors import InputError, NotFittedMapError
from .maps import RFF, FeatureMap
from .sketches import MeanSketch
from .typing import PathOrURL, StorageOptions

__all__ = ["KernelPCA"]


class KernelPCA(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Kernel PCA of out-of-core data in random-feature space, from one mergeable sketch.

    Parameters
    ----------
    n_components : int, default=2
        Number of principal components k (1 <= k <= the map's output width).
    n_features : int, default=1024
        Random features D of the default RFF map.
    bandwidth : float or "median", default="median"
        Gaussian kernel width sigma of the default map.
    seed : int, default=0
        Seed of the default map and its row sample.
    feature_map : FeatureMap, optional
        Use this map instead of ``RFF(n_features, bandwidth, seed=seed)`` (for
        instance a ``JL`` composition for large D).

    Attributes
    ----------
    feature_map_ : FeatureMap
        The fitted map.
    mean_ : ndarray of shape (D,), float64
        Mean feature vector.
    components_ : ndarray of shape (n_components, D), float64
        Principal axes in feature space, by decreasing variance.
    explained_variance_ : ndarray of shape (n_components,), float64
        Variance along each axis (population covariance, divided by n).
    explained_variance_ratio_ : ndarray of shape (n_components,)
        Fraction of the total feature variance.
    eigenvalues_ : ndarray of shape (D,)
        All eigenvalues of the centred covariance, decreasing.
    residual_ : float
        ``R_hat_k``: the sum over rows of squared residuals after projecting
        the centred features on the k components (Chen & Phillips 2016,
        sec. 7.1), i.e. ``n * sum_{i > k} eigenvalues_[i]``.
    n_samples_ : int
    n_features_in_ : int

    References
    ----------
    Chen, D. & Phillips, J. M. (2016). Relative error embeddings of the
    Gaussian kernel distance, sec. 7.1.

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> X = np.random.default_rng(0).normal(size=(500, 3))
    >>> kpca = srf.KernelPCA(n_components=2, n_features=256, bandwidth=2.0).fit(X)
    >>> kpca.transform(X).shape
    (500, 2)
    >>> bool(kpca.explained_variance_[0] >= kpca.explained_variance_[1])
    True
    """

    def __init__(
        self,
        n_components: int = 2,
        n_features: int = 1024,
        bandwidth: float | str = "median",
        seed: int = 0,
        feature_map: FeatureMap | None = None,
    ) -> None:
        self.n_components = n_components
        self.n_features = n_features
        self.bandwidth = bandwidth
        self.seed = seed
        self.feature_map = feature_map

    def _initial_map(self) -> FeatureMap:
        if self.feature_map is not None:
            if not isinstance(self.feature_map, FeatureMap):
                raise InputError(
                    f"feature_map must be a streamrff FeatureMap. Got {type(self.feature_map).__name__}."
                )
            return self.feature_map
        return RFF(n_features=self.n_features, bandwidth=self.bandwidth, seed=self.seed)

    def fit(
        self,
        X: Any,
        y: Any = None,
        client: Any = None,
        storage_options: StorageOptions = None,
        progress: bool = False,
    ) -> KernelPCA:
        """Sketch ``X`` with second moments in one pass and diagonalise the centred covariance.

        ``X`` is anything :func:`streamrff.sketch` accepts (numpy, dask,
        xarray, zarr path or URL).
        """
        from .engine import sketch

        check_positive_int(self.n_components, "n_components")
        in_memory = _is_in_memory(X)
        if in_memory:
            X = _validate(self, X, reset=True)
        moment_sketch = sketch(
            X, self._initial_map(), moments=True, client=client, storage_options=storage_options, progress=progress
        )
        return self.fit_from_sketch(moment_sketch)

    def fit_from_sketch(self, sketch: MeanSketch | PathOrURL, storage_options: StorageOptions = None) -> KernelPCA:
        """Fit from a :class:`MeanSketch` with moments, or from the path/URL of a saved one.

        Raises
        ------
        InputError
            If the sketch has no second moment (re-sketch with ``moments=True``,
            CLI ``--moments``), fewer than 2 rows, or ``n_components`` exceeds its width.
        """
        if not isinstance(sketch, MeanSketch):
            from .fileformat import load

            sketch = load(sketch, storage_options=storage_options)
            if not isinstance(sketch, MeanSketch):
                raise InputError(f"KernelPCA needs a mean sketch with moments. Got a {sketch.kind!r} sketch.")
        if not sketch.has_moments:
            raise InputError(
                "This sketch has no second moment, which KernelPCA needs. Re-sketch with moments=True "
                "(CLI: streamrff sketch ... --moments)."
            )
        if sketch.count < 2:
            raise InputError(f"KernelPCA needs at least 2 rows. Got a sketch of {sketch.count}.")
        width = sketch.feature_sum.shape[0]
        k = check_positive_int(self.n_components, "n_components")
        if k > width:
            raise InputError(
                f"n_components must be <= the number of features ({width}). Got {k}; lower n_components "
                "or raise n_features."
            )
        n = sketch.count
        mean = sketch.feature_sum / n
        covariance = sketch.moment / n - np.outer(mean, mean)
        covariance = (covariance + covariance.T) / 2.0
        eigenvalues, eigenvectors = np.linalg.eigh(covariance)
        order = np.argsort(eigenvalues)[::-1]
        eigenvalues = np.clip(eigenvalues[order], 0.0, None)
        eigenvectors = eigenvectors[:, order]
        # Fix signs so that results are reproducible: largest-magnitude loading positive.
        signs = np.sign(eigenvectors[np.argmax(np.abs(eigenvectors), axis=0), np.arange(width)])
        eigenvectors *= np.where(signs == 0, 1.0, signs)
        total = float(eigenvalues.sum())
        self.feature_map_ = sketch.feature_map
        self.n_features_in_ = sketch.feature_map.n_features_in_
        self.n_samples_ = n
        self.mean_ = mean
        self.eigenvalues_ = eigenvalues
        self.components_ = eigenvectors[:, :k].T.copy()
        self.explained_variance_ = eigenvalues[:k].copy()
        self.explained_variance_ratio_ = eigenvalues[:k] / total if total > 0 else np.zeros(k)
        self.residual_ = self.residual(k)
        self._n_features_out = k
        return self

    def residual(self, k: int) -> float:
        """``R_hat_k`` for any ``k``: squared residual summed over rows after keeping k components."""
        self._check_fitted()
        k = check_positive_int(k, "k", minimum=0)
        return float(self.n_samples_ * self.eigenvalues_[k:].sum())

    def _check_fitted(self) -> None:
        if not hasattr(self, "components_"):
            raise NotFittedMapError("This KernelPCA is not fitted yet. Call fit(X) or fit_from_sketch(sketch) first.")

    def _scores(self, rows: np.ndarray) -> np.ndarray:
        features = self.feature_map_._embed(rows)
        return ((features - self.mean_) @ self.components_.T).astype(np.float32)

    def transform(self, X: Any, storage_options: StorageOptions = None) -> Any:
        """Scores of rows on the components: numpy in, numpy out; anything else gives a lazy dask array.

        Returns float32 of shape (n_samples, n_components).
        """
        self._check_fitted()
        if _is_in_memory(X):
            return self._scores(_validate(self, X, reset=False))
        from .io import as_row_chunked

        array = as_row_chunked(X, storage_options=storage_options)
        if array.shape[1] != self.n_features_in_:
            raise InputError(
                f"The data has {array.shape[1]} features, but KernelPCA is expecting {self.n_features_in_} features as input."
            )
        return array.map_blocks(
            _checked_scores, self, dtype=np.float32, chunks=(array.chunks[0], (self._n_features_out,))
        )

    def __sklearn_tags__(self):  # noqa: D105
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float32"]
        return tags


def _is_in_memory(X: Any) -> bool:
    """numpy arrays, lists and pandas frames (not dask, xarray or paths)."""
    if isinstance(X, (str, da.Array)) or hasattr(X, "dims") or hasattr(X, "__fspath__"):
        return False
    return isinstance(X, (np.ndarray, list, tuple)) or hasattr(X, "__array__")


def _validate(model: KernelPCA, X: Any, reset: bool) -> np.ndarray:
    from sklearn.utils.validation import validate_data

    try:
        rows = validate_data(model, X, reset=reset, dtype=[np.float64, np.float32], ensure_all_finite=False)
    except ValueError as error:
        if isinstance(error, InputError):
            raise
        raise InputError(str(error)) from error
    return check_rows(rows, "X")


def _checked_scores(block: np.ndarray, model: KernelPCA) -> np.ndarray:
    return model._scores(check_rows(block, "X", allow_empty=True) if block.shape[0] else block.astype(np.float64))
