"""Kernel ridge regression and classification from one mergeable regression sketch.

The rows are embedded with a random feature map z (random Fourier features by
default) and ridge regression is solved in feature space from the sums of a
:class:`~streamrff.RegressionSketch`: with ``n`` rows, feature mean ``mu``,
target mean ``ybar``, the centred second moment ``C = Z^T Z - n mu mu^T`` and
the centred cross moment ``c = Z^T y - n mu ybar^T``, the coefficients are
``beta = (C + alpha I)^-1 c`` and the intercept ``ybar - mu^T beta`` (the
intercept is not penalised, as in scikit-learn's ``Ridge``). This is the
"normal solutions method" of the random-features tutorial (Rahimi & Recht 2007).

One eigendecomposition ``C = V diag(s) V^T`` gives the coefficients for every
alpha at once, so ``alpha="auto"`` compares a grid of alphas by generalized
cross-validation (Golub, Heath & Wahba 1979) from the sketch alone, with no
second pass over the data. With ``b = V^T c`` (one column per target)::

    RSS(alpha)  = ||y_c||^2 - sum_i b_i^2 (s_i + 2 alpha) / (s_i + alpha)^2
    df(alpha)   = 1 + sum_i s_i / (s_i + alpha)          (1 for the intercept)
    GCV(alpha)  = n RSS(alpha) / (n - df(alpha))^2

For several targets the GCV scores are summed over targets and one alpha
serves all of them (scikit-learn's ``RidgeCV`` default, ``alpha_per_target=False``).

Low rank (``rank=k``, for wide maps). A :class:`~streamrff.NystromRegressionSketch`
holds the range sketch ``C Omega`` (D x l) instead of ``C``; its rank-k Nystrom
eigenpairs ``C ~ U diag(lam) U^T`` (Tropp et al. 2017, Algorithm 3, truncated)
replace the full eigendecomposition, and the ridge problem is solved on the
captured range: ``beta = U (lam + alpha)^-1 U^T c``, with the same GCV formulas
over ``lam`` and ``b = U^T c``. This drops the complement ``(I - U U^T)``: its
share of the feature variance (``trace(C) - sum lam``, exact from the sums) and
of ``c``. Adding ``(I - U U^T) c / alpha`` instead, the solve of
``(U diag(lam) U^T + alpha I) beta = c``, treats the complement as directions of
zero variance that still carry ``c``: its RSS falls as ``2 ||(I - U U^T) c||^2 /
alpha``, so GCV takes the smallest alpha of the grid and the fit is useless
(measured on Friedman #1: test R^2 < 0); on the captured range, GCV is that of
principal-component ridge regression on ``Z_c U``.

Costs: the fit is one pass of a moment sketch (``n D^2`` flops, ``8 D^2`` bytes
per partial) plus ``n D t`` for ``Z^T y``; the solve is one dense ``eigh`` of the
D x D system (``O(D^3)``: about a second at D = 1024 and half a minute at
D = 4096 on one core) and ``O(D t)`` per alpha of the grid. Low rank: ``4 n D l``
flops for the range sketch, ``8 D l`` bytes per partial, ``O(D l^2)`` for the solve.
"""

from __future__ import annotations

import os
from typing import Any

import dask.array as da
import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin

from .._base.blas import single_blas_thread
from .._base.validation import (
    check_bandwidth,
    check_positive_int,
    is_in_memory,
    normalize_seed,
    store_params,
    validate_estimator_input,
)
from .._estimators import apply_to_rows, initial_feature_map, sketch_or_load
from ..engine import connect, current_job_options, fit_map_and_sample, nystrom_sketch, open_job_source, sketch
from ..errors import InputError, NotFittedMapError
from ..maps import FeatureMap
from ..sketches.regression import NystromRegressionSketch, RegressionSketch
from ..sources.rows import open_zarr_array
from ..typing import PathOrURL, StorageOptions
from .gcv import _centred_system, _gcv_from_spectrum, _low_rank_system, _Spectrum, rank_tolerance, rounding_level

__all__ = ["KernelRidge", "KernelRidgeClassifier", "ridge_gcv", "default_alphas", "rank_tolerance", "rounding_level"]

#: alpha="auto" without ``alphas``: this grid times the trace of the centred second moment
#: (4 per decade). The trace is n times the total feature variance, so the grid follows n.
_RELATIVE_ALPHAS = np.logspace(-12.0, 0.0, 49)


def _spectrum(sketch: RegressionSketch | NystromRegressionSketch, rank: int | None) -> _Spectrum:
    """The centred system of either kind of regression sketch (``rank`` checked against it)."""
    _check_sketch_rows(sketch)
    if isinstance(sketch, NystromRegressionSketch):
        if rank is None:
            rank = max(1, sketch.sketch_size // 2)
        elif rank > sketch.sketch_size:
            raise InputError(
                f"rank must be <= the low-rank sketch's sketch_size ({sketch.sketch_size}). Got {rank}; lower rank "
                "or re-sketch with sketch_size >= rank (streamrff.nystrom_sketch(X, map, sketch_size, target=y))."
            )
        return _low_rank_system(sketch, rank)
    width = sketch.feature_sum.shape[0]
    if rank is not None and rank > width:
        raise InputError(f"rank must be <= the map's output width D = {width}. Got {rank}; lower rank.")
    return _centred_system(sketch, rank)


def default_alphas(eigenvalues: np.ndarray, noise: float, trace: float | None = None) -> np.ndarray:
    """The grid of ``alpha="auto"``: 4 per decade from ``1e-12`` to ``1`` times the trace, above the rounding floor.

    ``trace`` is that of the centred moment, by default ``eigenvalues.sum()``
    (pass it when the eigenvalues are only the top ones of a low-rank fit).

    ``noise`` is the rounding level of the eigenvalues (:func:`rounding_level`:
    float32 tile products, about ``1e-7`` of the largest eigenvalue). Directions
    at that level are rounding, and an alpha near it would fit the rounding while
    the GCV formula, which trusts the sums, reports a good score; so the grid
    starts at 10 times it.
    """
    trace = float(eigenvalues.sum() if trace is None else trace) or 1.0
    grid = trace * _RELATIVE_ALPHAS
    kept = grid[grid >= 10.0 * noise]
    return kept if kept.size else grid[-1:]


def ridge_gcv(
    sketch: RegressionSketch | NystromRegressionSketch, alphas: Any, rank: int | None = None
) -> dict[str, np.ndarray]:
    """Generalized cross-validation scores of ridge regression on a regression sketch, for each alpha.

    ``GCV(alpha) = n RSS(alpha) / (n - df(alpha))^2`` (Golub, Heath & Wahba
    1979, eq. 1.4 with the intercept counted in df), summed over targets; RSS
    and df come from one eigendecomposition of the centred second moment (see
    the module notes), not from another pass over the rows.

    Parameters
    ----------
    sketch : RegressionSketch or NystromRegressionSketch
        Sketch of at least 2 rows.
    alphas : array-like of float
        Positive penalties.
    rank : int, optional
        Keep only the top ``rank`` eigenpairs (principal-component ridge; see
        :class:`KernelRidge`). Default: all of a :class:`RegressionSketch`,
        half the ``sketch_size`` of a :class:`NystromRegressionSketch`.

    Returns
    -------
    dict
        ``{"alphas", "scores", "df", "rss"}``: arrays of the same length; ``rss``
        is the training residual sum of squares summed over targets.

    Raises
    ------
    InputError
        For a sketch of another kind or of fewer than 2 rows, non-positive
        alphas, or a rank above the sketch's width or ``sketch_size``.

    References
    ----------
    Golub, G. H., Heath, M. & Wahba, G. (1979). Generalized cross-validation as
    a method for choosing a good ridge parameter. Technometrics 21(2), 215-223.

    Examples
    --------
    Against the hat matrix of explicitly centred features:

    >>> import numpy as np, streamrff as srf
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(60, 2)); y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=60)
    >>> s = srf.regression_sketch_array(X, y, srf.RFF(n_features=16, bandwidth=1.0))
    >>> table = srf.ridge_gcv(s, [0.1])
    >>> Z = s.feature_map.transform(X).astype(np.float64); Zc = Z - Z.mean(axis=0)
    >>> hat = Zc @ np.linalg.solve(Zc.T @ Zc + 0.1 * np.eye(16), Zc.T) + 1.0 / 60
    >>> residual = y - hat @ y
    >>> reference = 60 * residual @ residual / (60 - np.trace(hat)) ** 2
    >>> bool(np.isclose(table["scores"][0], reference, rtol=1e-5))
    True
    """
    if not isinstance(sketch, (RegressionSketch, NystromRegressionSketch)):
        raise InputError(
            "sketch must be a RegressionSketch (streamrff.sketch(X, map, target=y)) or a NystromRegressionSketch. "
            f"Got {type(sketch).__name__}."
        )
    alphas = _check_alphas(alphas, "alphas")
    spectrum = _spectrum(sketch, None if rank is None else check_positive_int(rank, "rank"))
    scores, dofs, residuals = _gcv_from_spectrum(
        spectrum.eigenvalues, spectrum.projected, spectrum.target_total, sketch.count, alphas
    )
    return {"alphas": alphas, "scores": scores, "df": dofs, "rss": residuals}


def _check_alphas(alphas: Any, name: str) -> np.ndarray:
    try:
        values = np.asarray(alphas, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError) as error:
        raise InputError(f"{name} must be positive numbers. Got {alphas!r}.") from error
    if values.size == 0 or not np.isfinite(values).all() or (values <= 0).any():
        raise InputError(f"{name} must be a non-empty list of positive finite numbers. Got {alphas!r}.")
    return values


def _check_sketch_rows(sketch: RegressionSketch) -> None:
    if sketch.count < 2:
        raise InputError(
            f"Kernel ridge regression needs at least 2 samples. Got a sketch of {sketch.count} sample(s) "
            f"(n_samples = {sketch.count})."
        )


class _KernelRidgeBase(BaseEstimator):
    """Parameters, the solve from a sketch and the scoring shared by the regressor and the classifier."""

    def __init__(
        self,
        alpha: float | str = "auto",
        n_features: int = 1024,
        bandwidth: float | str = "median",
        alphas: Any = None,
        seed: int = 0,
        feature_map: FeatureMap | None = None,
        rank: int | None = None,
    ) -> None:
        store_params(self, locals())

    def _check_params(self) -> None:
        if isinstance(self.alpha, str):
            if self.alpha != "auto":
                raise InputError(f"alpha must be a positive number or 'auto'. Got {self.alpha!r}.")
        else:
            _check_alphas(self.alpha, "alpha")
            if np.ndim(self.alpha) != 0:
                raise InputError(f"alpha must be one positive number or 'auto'. Got {self.alpha!r}; use alphas=[...].")
        if self.alphas is not None:
            if self.alpha != "auto":
                raise InputError(
                    f"alphas is the grid of alpha='auto'. Got alphas={self.alphas!r} with alpha={self.alpha!r}; "
                    "pass alpha='auto' or drop alphas."
                )
            _check_alphas(self.alphas, "alphas")
        if self.feature_map is not None:
            if not isinstance(self.feature_map, FeatureMap):
                raise InputError(f"feature_map must be a streamrff FeatureMap. Got {type(self.feature_map).__name__}.")
        else:
            check_positive_int(self.n_features, "n_features")
            check_bandwidth(self.bandwidth)
        normalize_seed(self.seed)
        if self.rank is not None:
            check_positive_int(self.rank, "rank")

    def _initial_map(self) -> FeatureMap:
        if self.feature_map is not None:
            return self.feature_map
        return initial_feature_map("rff", self.n_features, self.bandwidth, self.seed)

    def _check_y(self, y: Any) -> None:
        if y is None:
            raise InputError(
                f"{type(self).__name__} requires y to be passed, but the target y is None. "
                "Pass the targets (or class labels) of the rows of X."
            )

    def _sketch(self, X: Any, targets: Any, options: dict[str, Any]) -> Any:
        # No rows are skipped: a NaN in X or y is named, with no option to skip.
        job = current_job_options(**options).replace(on_invalid="require")
        if self.rank is None:
            return sketch(X, self._initial_map(), target=targets, **job.as_dict())
        source = open_job_source(X, job)
        with connect(job.client) as active:
            job = job.replace(client=active, sample_dim=None, chunk_rows=None)  # the source is open
            # Fit the map first (the seeded row sample; nothing else is read) to learn D.
            fitted = fit_map_and_sample(self._initial_map(), [source], 0, 0, job)[0]
            width = fitted.n_features_out_
            if self.rank > width:
                raise InputError(f"rank must be <= the map's output width D = {width}. Got {self.rank}; lower rank.")
            return nystrom_sketch(
                source, fitted, sketch_size=min(width, 2 * self.rank), seed=normalize_seed(self.seed),
                target=targets, **job.as_dict(),
            )  # fmt: skip

    def _solve(self, sketch: RegressionSketch) -> None:
        """Coefficients, intercept, alpha and the GCV table from a regression sketch (trusted kind)."""
        n = sketch.count
        spectrum = _spectrum(sketch, self.rank)
        if self.alpha == "auto":
            if self.alphas is None:
                alphas = default_alphas(spectrum.eigenvalues, spectrum.noise, spectrum.trace)
            else:
                alphas = _check_alphas(self.alphas, "alphas")
        else:
            alphas = np.array([float(self.alpha)])
        scores, dofs, _ = _gcv_from_spectrum(spectrum.eigenvalues, spectrum.projected, spectrum.target_total, n, alphas)
        best = int(np.argmin(scores)) if np.isfinite(scores).any() else len(alphas) - 1
        alpha = float(alphas[best])
        coef = spectrum.eigenvectors @ (spectrum.projected / (spectrum.eigenvalues + alpha)[:, None])  # (D, t)
        intercept = sketch.target_mean - spectrum.mean @ coef
        self.feature_map_ = sketch.feature_map
        self.n_features_in_ = sketch.feature_map.n_features_in_
        self.n_samples_ = n
        self.alpha_ = alpha
        self.gcv_ = {"alphas": alphas, "scores": scores, "df": dofs}
        self._coef_matrix = np.ascontiguousarray(coef)
        self._intercepts = intercept
        self._target_ndim = sketch.target_ndim

    def _load_sketch(self, sketch: Any, storage_options: StorageOptions) -> RegressionSketch | NystromRegressionSketch:
        return sketch_or_load(
            sketch,
            (RegressionSketch, NystromRegressionSketch),
            storage_options,
            takes="a RegressionSketch, a NystromRegressionSketch or the path/URL of a saved one",
            needs="Kernel ridge needs a regression sketch (streamrff.sketch(X, map, target=y) or "
            "streamrff.nystrom_sketch(X, map, sketch_size, target=y))",
        )

    def _check_fitted(self) -> None:
        if not hasattr(self, "_coef_matrix"):
            raise NotFittedMapError(
                f"This {type(self).__name__} is not fitted yet. Call fit(X, y) or fit_from_sketch(sketch) first."
            )

    @single_blas_thread
    def _raw_scores(self, rows: np.ndarray) -> np.ndarray:
        """``z(x) beta + intercept`` for trusted rows, (n, t) float64, row tile by row tile."""
        scores = np.empty((rows.shape[0], self._coef_matrix.shape[1]))
        for start, features in self.feature_map_.embed_tiles(rows):
            scores[start : start + features.shape[0]] = features @ self._coef_matrix
        scores += self._intercepts
        return scores

    def _scores(self, X: Any, storage_options: StorageOptions) -> Any:
        """(n, t) scores: numpy for in-memory X, a lazy dask array otherwise."""
        self._check_fitted()
        return apply_to_rows(self, X, self._raw_scores, storage_options, np.float64, self._coef_matrix.shape[1])

    def __sklearn_tags__(self):  # noqa: D105
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        return tags



class KernelRidge(RegressorMixin, _KernelRidgeBase):
    """Kernel ridge regression of out-of-core data in random-feature space, from one mergeable sketch.

    One pass over the rows and targets builds a :class:`RegressionSketch`
    (count, sums, second moment of the features, ``Z^T y``, ``sum y``,
    ``y^T y``); the ridge normal equations are solved from its centred sums
    by one eigendecomposition, and ``alpha="auto"`` picks alpha on a grid by
    generalized cross-validation from the same eigendecomposition (see
    :func:`ridge_gcv`). Sketches of several sites merge
    (:meth:`fit_from_sketch`), giving the fit on all their rows.

    Parameters
    ----------
    alpha : float or "auto", default="auto"
        Ridge penalty on the coefficients (the intercept is not penalised),
        in the units of scikit-learn's ``Ridge`` on the features. "auto"
        chooses it from ``alphas`` by generalized cross-validation.
    n_features : int, default=1024
        Number of random Fourier features D of the default map.
    bandwidth : float or "median", default="median"
        Gaussian kernel width sigma of the default map; "median" is the
        median heuristic on a seeded row sample.
    alphas : array-like of float, optional
        The grid of ``alpha="auto"``. Default: from ``1e-12`` to ``1`` times the
        trace of the centred second moment (n times the total feature
        variance), 4 per decade, leaving out alphas below 10 times the
        rounding level of the sums (see :func:`streamrff.ridge.estimators.default_alphas`).
    seed : int, default=0
        Seed of the default map, of its row sample and of the low-rank test matrix.
    feature_map : FeatureMap, optional
        Use this map instead of ``RFF(n_features, bandwidth, seed=seed)``.
    rank : int, optional
        Solve on the top ``rank`` eigen-directions of the centred feature
        moment only (principal-component ridge regression), for wide maps
        where a D x D float64 system does not fit (2 GiB at D = 16 384).
        :meth:`fit` then makes the low-rank
        :class:`~streamrff.NystromRegressionSketch` with ``sketch_size =
        min(D, 2 rank)`` (``8 D l`` bytes per partial instead of ``8 D^2``)
        in the same single pass; :meth:`fit_from_sketch` keeps the top
        ``rank`` Nystrom eigenpairs of such a sketch (default: half its
        ``sketch_size``) or of the exact moment of a :class:`RegressionSketch`.
        What it drops: the complement of the captured range, i.e. the
        directions of the smallest feature variance and the part of ``Z^T y``
        in them (module notes of :mod:`streamrff.ridge.estimators`). How much that costs
        depends on how fast the spectrum decays; measured on Friedman #1
        (20 000 rows, D = 2 048, median bandwidth): test R^2 0.925 at rank 256,
        0.952 at ranks 384 and 512, against 0.956 for the full solve; digits
        (D = 4 096): accuracy 0.993 at rank 256, 0.995 at rank 512 and in
        full (docs/guide/ridge.rst). None (default)
        solves the full system; the choice is never automatic, since it changes
        the model.

    Attributes
    ----------
    coef_ : ndarray of shape (D,) or (n_targets, D), float64
        Coefficients on the features (one row per target for 2-D y).
    intercept_ : float or ndarray of shape (n_targets,)
    alpha_ : float
        The penalty used.
    gcv_ : dict
        What was compared: ``"alphas"``, ``"scores"`` (GCV, summed over
        targets) and ``"df"`` (effective degrees of freedom, intercept
        included), arrays of the same length; one entry for a given alpha.
    feature_map_ : FeatureMap
        The fitted map.
    n_samples_ : int
    n_features_in_ : int

    Notes
    -----
    The solve and the GCV formulas are in the notes of :mod:`streamrff.ridge.estimators`.
    ``predict`` on dask, xarray or zarr input returns a lazy dask array, read
    and scored chunk by chunk when computed.

    References
    ----------
    Rahimi, A. & Recht, B. (2007). Random features for large-scale kernel machines. NIPS.
    Golub, G. H., Heath, M. & Wahba, G. (1979). Generalized cross-validation as
    a method for choosing a good ridge parameter. Technometrics 21(2), 215-223.

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(-3, 3, size=(2000, 1)); y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=2000)
    >>> model = srf.KernelRidge(n_features=128, bandwidth=1.0).fit(X, y)
    >>> grid = np.linspace(-2.5, 2.5, 50)[:, None]
    >>> bool(np.abs(model.predict(grid) - np.sin(grid[:, 0])).max() < 0.05)
    True
    >>> model.coef_.shape, bool(model.alpha_ == model.gcv_["alphas"][np.argmin(model.gcv_["scores"])])
    ((128,), True)

    The low-rank fit (a D x 2 rank sketch instead of D x D) on this smooth
    target: rank 16 of D = 128 directions predicts as well.

    >>> low = srf.KernelRidge(n_features=128, bandwidth=1.0, rank=16).fit(X, y)
    >>> bool(np.abs(low.predict(grid) - np.sin(grid[:, 0])).max() < 0.05)
    True
    """

    def fit(
        self, X: Any, y: Any, **options: Any
    ) -> KernelRidge:
        """Sketch rows and targets in one pass and solve the ridge normal equations.

        Parameters
        ----------
        X : array-like, dask Array, xarray DataArray, or str/PathLike
            Rows: anything :func:`streamrff.sketch` accepts (zarr path or URL included).
        y : array-like, dask Array, xarray DataArray, or str/PathLike
            Targets of shape (n_samples,) or (n_samples, n_targets), the same kinds of source.
        **options
            The job options (``client``, ``storage_options``, ``progress``, ...), as for
            :func:`streamrff.sketch`.

        Returns
        -------
        self : KernelRidge

        Raises
        ------
        InputError
            On bad parameters, NaN/inf in X or y, y with another number of
            rows, or fewer than 2 samples.
        """
        self._check_params()
        self._check_y(y)
        if is_in_memory(X) and is_in_memory(y):
            X, y = _validate_xy(self, X, y, y_numeric=True, multi_output=True)
        sketch = self._sketch(X, y, options)
        return self.fit_from_sketch(sketch)

    def fit_from_sketch(
        self, sketch: RegressionSketch | PathOrURL, storage_options: StorageOptions = None
    ) -> KernelRidge:
        """Solve from a regression sketch (for instance several sites' merged sketches), or its path/URL.

        A :class:`RegressionSketch` gives the full solve (or the top ``rank``
        eigen-directions when ``rank`` is set); a
        :class:`~streamrff.NystromRegressionSketch` the low-rank one (see
        ``rank``).

        Returns
        -------
        self : KernelRidge

        Raises
        ------
        InputError
            For another kind of sketch, fewer than 2 samples, or ``rank``
            above the sketch's width (or ``sketch_size`` for a low-rank sketch).
        SketchFormatError
            If the path holds no valid sketch.
        """
        self._check_params()
        self._solve(self._load_sketch(sketch, storage_options))
        return self

    @property
    def coef_(self) -> np.ndarray:
        self._check_fitted()
        return self._coef_matrix[:, 0].copy() if self._target_ndim == 1 else self._coef_matrix.T.copy()

    @property
    def intercept_(self) -> float | np.ndarray:
        self._check_fitted()
        return float(self._intercepts[0]) if self._target_ndim == 1 else self._intercepts.copy()

    def predict(self, X: Any, storage_options: StorageOptions = None) -> Any:
        """Predicted targets: numpy in, numpy out; dask, xarray or zarr in, a lazy dask array out.

        Returns
        -------
        ndarray or dask Array of shape (n_samples,) or (n_samples, n_targets), float64
        """
        scores = self._scores(X, storage_options)
        return scores[:, 0] if self._target_ndim == 1 else scores

    def __sklearn_tags__(self):  # noqa: D105
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags


class KernelRidgeClassifier(ClassifierMixin, _KernelRidgeBase):
    """Classification by kernel ridge regression on +-1 targets (one vs rest), from one mergeable sketch.

    Like scikit-learn's ``RidgeClassifier``: each class becomes a target
    column of +1 (the class) and -1 (the rest), one :class:`KernelRidge`
    solve fits all columns at once (one alpha, chosen by GCV summed over the
    columns), and a row is given the class of its largest score. Two classes
    use one column (+1 for ``classes_[1]``).

    Parameters
    ----------
    alpha, n_features, bandwidth, alphas, seed, feature_map, rank
        As in :class:`KernelRidge`.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
        The class labels, sorted.
    coef_ : ndarray of shape (1, D) or (n_classes, D), float64
    intercept_ : ndarray of shape (1,) or (n_classes,), float64
    alpha_, gcv_, feature_map_, n_samples_, n_features_in_
        As in :class:`KernelRidge`.

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(600, 2)); labels = np.where(np.hypot(X[:, 0], X[:, 1]) < 1.2, "in", "out")
    >>> model = srf.KernelRidgeClassifier(n_features=256, bandwidth=1.0).fit(X, labels)
    >>> model.classes_.tolist(), bool(model.score(X, labels) > 0.95)
    (['in', 'out'], True)

    Sites sketch their own rows with one map and the same +-1 encoding, then merge:

    >>> rff = srf.RFF(n_features=256, bandwidth=1.0).fit(X)
    >>> classes = np.array(["in", "out"])
    >>> parts = [srf.sketch(X[part], rff, target=srf.KernelRidgeClassifier.encode_targets(labels[part], classes))
    ...          for part in (slice(0, 250), slice(250, 600))]
    >>> merged = srf.KernelRidgeClassifier().fit_from_sketch(srf.merge(*parts), classes=classes)
    >>> gap = np.abs(merged.decision_function(X) - model.decision_function(X)).max()  # float32 sums: ~1e-3
    >>> bool(gap < 1e-2), bool((merged.predict(X) == model.predict(X)).all())
    (True, True)
    """

    @staticmethod
    def encode_targets(labels: Any, classes: Any) -> Any:
        """One-vs-rest targets of ``labels``: +1 in the column of its class, -1 elsewhere; one column for 2 classes.

        Numpy labels give a numpy array, dask labels a lazy dask array; a label
        outside ``classes`` raises when the targets are computed.

        Parameters
        ----------
        labels : array-like or dask Array of shape (n_samples,)
        classes : array-like of shape (n_classes,)
            Sorted distinct labels, at least 2.

        Returns
        -------
        ndarray or dask Array of shape (n_samples, n_classes) or (n_samples, 1), float64
        """
        classes = _check_classes(classes)
        if hasattr(labels, "dask") and hasattr(labels, "map_blocks"):
            width = 1 if classes.size == 2 else classes.size
            column = labels.reshape(-1) if labels.ndim > 1 else labels
            return column.map_blocks(
                _one_vs_rest, classes, dtype=np.float64, new_axis=1, chunks=(column.chunks[0], (width,))
            )
        return _one_vs_rest(np.asarray(labels).reshape(-1), classes)

    def fit(
        self, X: Any, y: Any, **options: Any
    ) -> KernelRidgeClassifier:
        """Encode the labels one vs rest, sketch rows and targets in one pass, and solve.

        Parameters
        ----------
        X : array-like, dask Array, xarray DataArray, or str/PathLike
            Rows: anything :func:`streamrff.sketch` accepts.
        y : array-like, dask Array, xarray DataArray, or str/PathLike
            Class labels of shape (n_samples,). Out-of-core labels are read
            once for their distinct values, then encoded chunk by chunk.
        **options
            The job options, as in :meth:`KernelRidge.fit`.

        Returns
        -------
        self : KernelRidgeClassifier

        Raises
        ------
        InputError
            On bad parameters or data, or labels of fewer than 2 classes.
        """
        from sklearn.utils.multiclass import check_classification_targets

        self._check_params()
        self._check_y(y)
        if is_in_memory(y):
            if is_in_memory(X):
                X, y = _validate_xy(self, X, y, y_numeric=False, multi_output=False)
            else:
                y = np.asarray(y).reshape(-1) if np.ndim(y) == 2 and np.shape(y)[1] == 1 else np.asarray(y)
            check_classification_targets(y)
            classes = np.unique(y)
        else:
            y = _labels_as_dask(y, current_job_options(**options).storage_options)
            classes = np.unique(y.map_blocks(np.unique, dtype=y.dtype, chunks=((np.nan,) * y.numblocks[0],)).compute())
        if classes.size < 2:
            raise InputError(
                f"Classifier can't train when only one class is present. Got the single class {classes.tolist()}; "
                "pass labels of at least 2 classes."
            )
        sketch = self._sketch(X, self.encode_targets(y, classes), options)
        return self.fit_from_sketch(sketch.with_classes(classes))

    def fit_from_sketch(
        self, sketch: RegressionSketch | PathOrURL, classes: Any = None, storage_options: StorageOptions = None
    ) -> KernelRidgeClassifier:
        """Solve from a regression sketch of :meth:`encode_targets` targets (merged sites' sketches, or a path).

        Parameters
        ----------
        sketch : RegressionSketch, str or PathLike
        classes : array-like of shape (n_classes,), optional
            The labels the targets were encoded with, sorted: required unless
            the sketch records them (:meth:`RegressionSketch.with_classes`,
            CLI ``sketch --classes``), and then equal to those.
        storage_options : dict, optional
            fsspec options when ``sketch`` is a URL.

        Returns
        -------
        self : KernelRidgeClassifier

        Raises
        ------
        InputError
            Without ``classes`` for a sketch that records none, with classes
            other than those it records, or when their number does not match
            the sketch's target columns.
        """
        self._check_params()
        sketch = self._load_sketch(sketch, storage_options)
        if classes is None:
            if sketch.classes is None:
                raise InputError(
                    "fit_from_sketch needs classes=: the labels the targets were encoded with "
                    "(KernelRidgeClassifier.encode_targets(labels, classes)); this sketch records none."
                )
            classes = np.asarray(sketch.classes)
        classes = _check_classes(classes)
        if sketch.classes is not None and tuple(classes.tolist()) != sketch.classes:
            raise InputError(
                f"Expected the classes the sketch's targets encode, {list(sketch.classes)!r}. Got classes="
                f"{classes.tolist()!r}. Drop classes= (the sketch records them) or pass the same list."
            )
        expected = 1 if classes.size == 2 else classes.size
        if sketch.n_targets != expected:
            raise InputError(
                f"Expected a sketch of {expected} target column(s) for {classes.size} classes. Got "
                f"{sketch.n_targets}. Encode the labels with KernelRidgeClassifier.encode_targets(labels, classes)."
            )
        self._solve(sketch)
        self.classes_ = classes
        return self

    @property
    def coef_(self) -> np.ndarray:
        self._check_fitted()
        return self._coef_matrix.T.copy()

    @property
    def intercept_(self) -> np.ndarray:
        self._check_fitted()
        return self._intercepts.copy()

    def decision_function(self, X: Any, storage_options: StorageOptions = None) -> Any:
        """Scores: (n_samples,) for two classes (positive: ``classes_[1]``), else (n_samples, n_classes).

        Numpy in, numpy out; dask, xarray or zarr in, a lazy dask array out.
        """
        scores = self._scores(X, storage_options)
        return scores[:, 0] if self.classes_.size == 2 else scores

    def predict(self, X: Any, storage_options: StorageOptions = None) -> Any:
        """Class labels: numpy in, numpy out; dask, xarray or zarr in, a lazy dask array out."""
        scores = self._scores(X, storage_options)
        if isinstance(scores, np.ndarray):
            return _labels_of_scores(scores, self.classes_)
        return scores.map_blocks(_labels_of_scores, self.classes_, dtype=self.classes_.dtype, drop_axis=1)


def _labels_of_scores(scores: np.ndarray, classes: np.ndarray) -> np.ndarray:
    if classes.size == 2:
        return classes[(scores[:, 0] > 0).astype(np.intp)]
    return classes[np.argmax(scores, axis=1)]


def _one_vs_rest(labels: np.ndarray, classes: np.ndarray) -> np.ndarray:
    index = np.searchsorted(classes, labels)
    index = np.clip(index, 0, classes.size - 1)
    unknown = classes[index] != labels
    if unknown.any():
        raise InputError(
            f"Expected labels among the classes {classes.tolist()}. Got {labels[unknown][:5].tolist()}; "
            "pass every class to encode_targets."
        )
    if classes.size == 2:
        return np.where(index == 1, 1.0, -1.0)[:, None]
    targets = np.full((labels.shape[0], classes.size), -1.0)
    targets[np.arange(labels.shape[0]), index] = 1.0
    return targets


def _check_classes(classes: Any) -> np.ndarray:
    values = np.asarray(classes)
    if values.ndim != 1 or values.size < 2 or np.unique(values).size != values.size:
        raise InputError(f"classes must be at least 2 distinct labels. Got {classes!r}.")
    if not (values[:-1] < values[1:]).all():
        raise InputError(f"classes must be sorted (as numpy.unique returns them). Got {values.tolist()}.")
    return values


def _labels_as_dask(y: Any, storage_options: StorageOptions) -> Any:
    # Labels may be strings: read as they are, without open_source's check for numbers.
    if isinstance(y, (str, os.PathLike)):
        labels = da.from_zarr(open_zarr_array(os.fspath(y), storage_options))
    else:
        labels = y.data if hasattr(y, "dims") else y
        labels = labels if isinstance(labels, da.Array) else da.from_array(np.asarray(labels))
    if labels.ndim == 2 and labels.shape[1] == 1:
        labels = labels[:, 0]
    if labels.ndim != 1:
        raise InputError(f"Expected class labels of shape (n_samples,). Got shape {labels.shape}.")
    return labels


def _numeric_targets(y: Any) -> Any:
    """In-memory regression targets as numbers: text (or objects that are not numbers) is one error naming y."""
    values = np.asarray(y)
    if values.dtype.kind in "biuf":
        return y
    try:
        if values.dtype.kind in "USTV":  # text is never taken for numbers, even "1.5"
            raise TypeError(values.dtype)
        return values.astype(np.float64)
    except (TypeError, ValueError):
        example = values.reshape(-1)[0] if values.size else None
        raise InputError(
            f"y must be numbers (regression targets). Got dtype {values.dtype} with values such as {example!r}; "
            "convert them to floats (y.astype(float)), or fit a KernelRidgeClassifier for class labels."
        ) from None


def _validate_xy(model: Any, X: Any, y: Any, y_numeric: bool, multi_output: bool) -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's ``validate_data`` for X and y, plus streamrff's finite checks."""
    if y_numeric:
        y = _numeric_targets(y)
    X, y = validate_estimator_input(
        model, X, reset=True, y=y, multi_output=multi_output, y_numeric=y_numeric, ensure_min_samples=1
    )
    if y_numeric and not np.isfinite(y).all():
        raise InputError("y must contain only finite values. Got NaN or inf; drop or impute those rows.")
    return X, y
