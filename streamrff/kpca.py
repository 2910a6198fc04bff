"""Kernel PCA from a mergeable second-moment sketch.

One pass over the data builds a :class:`MeanSketch` with moments (count, sum z,
sum z z^T), or for wide maps its low-rank linear sketch :class:`NystromSketch`
(``sum z z^T Omega``); the centred feature covariance ``C = M/n - mu mu^T`` is
diagonalised (exactly, or by the Nystrom reconstruction). Because the sketch merges, two sites can sketch separately and
fit on the merged sketch (:meth:`KernelPCA.fit_from_sketch`).

Costs and memory. The D x D moment (``moments="full"``) costs ``8 D^2`` bytes per
partial and ``n D^2`` flops: 8 MiB at D = 1024, 128 MiB at D = 4096, 2 GiB at D = 16 384.
Peak memory of ``fit`` is the interpreter's (~0.2 GB with dask and numba loaded) plus the
larger of two phases:

- sketch: ``min(chunks, threads + split_every) x P`` (the partials being built plus those
  waiting for their merge; groups of ``split_every = 8`` merge in place into one new
  partial) plus, per thread, one chunk of rows and one tile product (``4 D^2`` float32);
- solve, on the driver: the merged moment, the covariance and one temporary (``3 x 8 D^2``).

With ``moments="low-rank"`` the partial is the Nystrom sketch ``Y = M Omega``
(:class:`streamrff.NystromSketch`, ``P = 8 D l`` bytes, ``2 n D l`` flops), the tile
product ``4 D l``, plus one cached ``8 D l`` test matrix per process, and the solve holds
about nine D x l float64 matrices (QR, Cholesky and SVD, ``O(D l^2)`` flops).
``benchmarks/bench_kpca.py`` prints this formula next to the measured peak. ``moments="auto"``
(the default) takes the low-rank sketch when one D x D partial would exceed 256 MiB
(D > 5 792) or a quarter of a task thread's memory. The dense eigendecomposition costs
``O(D^3)`` once: ``eigh`` takes seconds at D = 1600 and about half a minute at D = 4096
on one core, so for ``n_components`` well below D the default ``eigen_solver="auto"``
uses ARPACK (Lanczos, ``O(D^2)`` per iteration; the same eigenpairs to machine
precision). ``transform`` embeds row tiles of 1 MiB, so scoring holds one chunk of rows
and its ``n x k`` scores per thread.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin

from ._base.blas import single_blas_thread
from ._base.validation import check_positive_int, is_in_memory, normalize_seed, store_params, validate_estimator_input
from ._estimators import apply_to_rows, initial_feature_map, sketch_or_load
from .engine import connect, current_job_options, fit_map_and_sample, memory_per_thread, open_job_source, run_sketch
from .errors import InputError, NotFittedMapError
from .maps import FeatureMap
from .sketches.mean import MeanSketch
from .sketches.moments import moment_eigenpairs
from .sketches.nystrom import NystromSketch, nystrom_eigenpairs
from .typing import PathOrURL, StorageOptions

__all__ = ["KernelPCA"]

_METHODS = ("rff", "kjl")
_EIGEN_SOLVERS = ("auto", "dense", "arpack")
_MOMENTS = ("auto", "full", "low-rank")
#: moments="auto" takes the low-rank sketch when one D x D float64 partial exceeds this (D > 5 792)...
_MAX_FULL_MOMENT_BYTES = 256 * 2**20
#: ... or this fraction of a task thread's memory (room for the partials of the merge tree).
_FULL_MOMENT_MEMORY_SHARE = 0.25
#: sketch_size="auto": l = min(D, max(4 k, 512)). l = 4k alone left a 15% error in R_hat_20 on
#: the digits (a slowly decaying spectrum; 3% at l = 200, 0.5% at l = 400, D = 16 384), and the
#: cost of l is small: 8 D l bytes per partial (64 MiB at D = 16 384) and 2 D l flops per row.
_MIN_AUTO_SKETCH_SIZE = 512


class KernelPCA(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Kernel PCA of out-of-core data in random-feature space, from one mergeable sketch.

    The data are embedded with a feature map ``z`` (random Fourier features by
    default, or the K-JL sketch), the centred covariance of the features is
    accumulated in one pass (a moment sketch) and its top eigenvectors are the
    principal axes. With ``E[z(x).z(y)] = k(x, y)`` the covariance's nonzero
    spectrum times n approximates that of the centred Gram matrix ``H K H``,
    and the residual ``R_hat_k`` approximates the exact ``R_k`` with relative
    error (Chen & Phillips 2016, sec. 7.1).

    Parameters
    ----------
    n_components : int, default=2
        Number of principal components k (1 <= k <= the map's output width).
    n_features : int, default=1024
        Output width D of the default map: random features (``method="rff"``)
        or K-JL components d' (``method="kjl"``).
    bandwidth : float or "median", default="median"
        Gaussian kernel width sigma of the default map.
    method : {"rff", "kjl"}, default="rff"
        Default map: ``RFF(n_features, bandwidth, seed=seed)`` (sincos), or
        ``KJL(n_landmarks, n_components=n_features, bandwidth=bandwidth,
        seed=seed)``: the K-JL Gaussian sketch fitted on a seeded landmark
        sample (Kpotufe & Sriperumbudur, sec. 5). Its features live in K-JL
        units, so ``residual_`` is comparable across K-JL fits but not to R_k.
    n_landmarks : int, default=1000
        Landmark rows of the K-JL map (``method="kjl"`` only).
    eigen_solver : {"auto", "dense", "arpack"}, default="auto"
        ``"dense"``: ``numpy.linalg.eigh`` of the D x D covariance.
        ``"arpack"``: the top ``n_components`` eigenpairs by Lanczos iteration
        (``scipy.sparse.linalg.eigsh``, start vector from ``seed``), much
        faster when ``n_components`` is small. ``"auto"``: arpack when
        D > 1024 and ``n_components < D / 10``, else dense.
    moments : {"auto", "full", "low-rank"}, default="auto"
        How the feature covariance is sketched. ``"full"``: the D x D second
        moment (exact eigenpairs of the feature covariance). ``"low-rank"``:
        the streaming Nystrom sketch ``Y = M Omega`` with a D x l Gaussian
        test matrix (Tropp et al. 2017), ``8 D l`` bytes per partial instead
        of ``8 D^2``; see Notes for its error bound. ``"auto"``: low-rank when
        one D x D float64 partial would exceed 256 MiB (D > 5 792) or a
        quarter of a task thread's memory, else full.
    sketch_size : int or "auto", default="auto"
        Columns l of the test matrix (``moments="low-rank"`` only), with
        ``n_components < l``; values above D are clipped to D (where the
        sketch is exact). "auto" is ``min(D, max(4 n_components, 512))``:
        l = 4k alone left a 15% error in ``R_hat_20`` on the digits, whose
        spectrum decays slowly, and 512 columns cost 64 MiB per partial at
        D = 16 384.
    seed : int, default=0
        Seed of the default map, its row sample, the test matrix and ARPACK's
        start vector.
    feature_map : FeatureMap, optional
        Use this map instead of the default (for instance a ``JL`` composition
        for large D, or ``RelativeErrorRFF``); ``n_features``, ``bandwidth``,
        ``method`` and ``n_landmarks`` then do not apply.

    Attributes
    ----------
    feature_map_ : FeatureMap
        The fitted map.
    mean_ : ndarray of shape (D,), float64
        Mean feature vector.
    components_ : ndarray of shape (n_components, D), float64
        Principal axes in feature space, by decreasing variance; each axis's
        largest-magnitude loading is positive.
    explained_variance_ : ndarray of shape (n_components,), float64
        Variance along each axis (population covariance, divided by n).
    explained_variance_ratio_ : ndarray of shape (n_components,), float64
        Fraction of ``total_variance_``.
    eigenvalues_ : ndarray of shape (n_components,), float64
        ``n * explained_variance_``: estimates of the top eigenvalues of the
        centred Gram matrix ``H K H`` (as scikit-learn's ``KernelPCA.eigenvalues_``).
    total_variance_ : float
        Trace of the centred feature covariance.
    residual_ : float
        ``R_hat_k``: the sum over rows of squared residuals after projecting
        the centred features on the k components (Chen & Phillips 2016,
        sec. 7.1), i.e. ``n * (total_variance_ - sum(explained_variance_))``.
    n_samples_ : int
    n_features_in_ : int
    moments_ : str
        ``"full"`` or ``"low-rank"``: the sketch the fit used.

    Notes
    -----
    Error bound of the low-rank sketch. The reconstruction is the truncated
    Nystrom approximation ``C_hat_k`` of the centred covariance ``C`` (rank
    k = ``n_components``) from l Gaussian test vectors. Tropp, Yurtsever,
    Udell & Cevher (2017, Theorem 4.1, real field) bound it in the Schatten
    1-norm: ``E ||C - C_hat_k||_1 <= (1 + k / (l - k - 1)) ||C - [[C]]_k||_1``
    for ``l >= k + 2``. Since ``C_hat_k <= C`` (Loewner order),
    ``||C - C_hat_k||_1 = trace(C) - sum(explained_variance_)``, and the trace is
    exact, so ``E[residual_] <= (1 + k / (l - k - 1)) R_hat_k(full)``: the
    low-rank residual exceeds the full-moment one by at most a factor
    ``1 + k / (l - k - 1)`` in expectation (1.04 at k = 20, l = 512), and its
    eigenvalues never exceed the full moment's. The same bound holds for the
    variance the components leave out, ``trace(C) - trace(U^T C U)``. On
    decaying spectra the error is far below the bound (Theorem 4.2 there).

    References
    ----------
    Chen, D. & Phillips, J. M. (2016). Relative error embeddings of the
    Gaussian kernel distance, sec. 7.1.
    Kpotufe, S. & Sriperumbudur, B. K. (2020). Gaussian sketching yields a J-L
    lemma in RKHS. AISTATS, sec. 5.
    Tropp, J. A., Yurtsever, A., Udell, M. & Cevher, V. (2017). Fixed-rank
    approximation of a positive-semidefinite matrix from streaming data.
    NeurIPS 30 (arXiv:1706.05736), Algorithm 3 and Theorem 4.1.

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> X = np.random.default_rng(0).normal(size=(500, 3))
    >>> kpca = srf.KernelPCA(n_components=2, n_features=256, bandwidth=2.0).fit(X)
    >>> kpca.transform(X).shape
    (500, 2)
    >>> bool(kpca.explained_variance_[0] >= kpca.explained_variance_[1])
    True
    >>> bool(np.isclose(kpca.residual_, kpca.residual(2)))
    True
    """

    def __init__(
        self,
        n_components: int = 2,
        n_features: int = 1024,
        bandwidth: float | str = "median",
        method: str = "rff",
        n_landmarks: int = 1000,
        eigen_solver: str = "auto",
        moments: str = "auto",
        sketch_size: int | str = "auto",
        seed: int = 0,
        feature_map: FeatureMap | None = None,
    ) -> None:
        store_params(self, locals())

    def _check_params(self) -> int:
        k = check_positive_int(self.n_components, "n_components")
        if self.method not in _METHODS:
            raise InputError(f"method must be 'rff' or 'kjl'. Got {self.method!r}.")
        if self.eigen_solver not in _EIGEN_SOLVERS:
            raise InputError(f"eigen_solver must be 'auto', 'dense' or 'arpack'. Got {self.eigen_solver!r}.")
        if self.moments not in _MOMENTS:
            raise InputError(f"moments must be 'auto', 'full' or 'low-rank'. Got {self.moments!r}.")
        if self.sketch_size != "auto":
            size = check_positive_int(self.sketch_size, "sketch_size", minimum=2)
            if size <= k:
                raise InputError(
                    f"sketch_size must exceed n_components ({k}). Got {size}; use sketch_size='auto' "
                    f"or at least {k + 2}."
                )
        normalize_seed(self.seed)
        return k

    def _moments_kind(self, width: int, memory_per_thread: float) -> str:
        """The sketch to use for a map of output width D = ``width`` (see ``moments``)."""
        if self.moments != "auto":
            return self.moments
        limit = min(_MAX_FULL_MOMENT_BYTES, _FULL_MOMENT_MEMORY_SHARE * memory_per_thread)
        return "low-rank" if 8 * width * width > limit else "full"

    def _sketch_size(self, width: int, k: int) -> int:
        if self.sketch_size == "auto":
            return min(width, max(4 * k, _MIN_AUTO_SKETCH_SIZE))
        return min(width, int(self.sketch_size))

    def _initial_map(self) -> FeatureMap:
        if self.feature_map is not None:
            if not isinstance(self.feature_map, FeatureMap):
                raise InputError(
                    f"feature_map must be a streamrff FeatureMap. Got {type(self.feature_map).__name__}."
                )
            return self.feature_map
        return initial_feature_map(self.method, self.n_features, self.bandwidth, self.seed, self.n_landmarks)

    def fit(self, X: Any, y: Any = None, **options: Any) -> KernelPCA:
        """Sketch ``X`` in one pass (second moments or their Nystrom sketch) and diagonalise the centred covariance.

        Parameters
        ----------
        X : array-like, dask Array, xarray DataArray, or str/PathLike
            Anything :func:`streamrff.sketch` accepts (zarr path or URL included).
        y : ignored
        **options
            The job options (``client``, ``storage_options``, ``progress``, ...), as for
            :func:`streamrff.sketch`.

        Returns
        -------
        self : KernelPCA
            Fitted on the rows of ``X``.

        Raises
        ------
        InputError
            On bad parameters or data (NaN/inf, non-2-D, fewer than 2 samples),
            or ``n_components`` larger than the map's output width.
        """
        k = self._check_params()
        feature_map = self._initial_map()
        if is_in_memory(X):
            X = validate_estimator_input(self, X, reset=True)
        job = current_job_options(**options)
        source = open_job_source(X, job)
        with connect(job.client) as active:
            job = job.replace(client=active)
            # Fit the map first (the seeded row sample; nothing else is read) to learn D.
            fitted = fit_map_and_sample(feature_map, [source], 0, 0, job)[0]
            width = fitted.n_features_out_
            if self._moments_kind(width, memory_per_thread(active)) == "full":
                covariance_sketch = run_sketch(source, "mean", fitted, job, moments=True)
            else:
                covariance_sketch = run_sketch(
                    source, "nystrom", fitted, job, sketch_size=self._sketch_size(width, k),
                    test_seed=normalize_seed(self.seed),
                )  # fmt: skip
        return self.fit_from_sketch(covariance_sketch)

    def fit_from_sketch(
        self, sketch: MeanSketch | NystromSketch | PathOrURL, storage_options: StorageOptions = None
    ) -> KernelPCA:
        """Fit from a :class:`MeanSketch` with moments or a :class:`NystromSketch`, or the path/URL of one.

        The sketch may be the merge of several sites' sketches (same map); the
        fit equals the fit on all their rows.

        Parameters
        ----------
        sketch : MeanSketch, str or PathLike
            A moment sketch (``streamrff.sketch(..., moments=True)``) or where one was saved.
        storage_options : dict, optional
            fsspec options when ``sketch`` is a URL.

        Returns
        -------
        self : KernelPCA
            Fitted on the rows the sketch summarises.

        Raises
        ------
        InputError
            If the sketch has no second moment (re-sketch with ``moments=True``,
            CLI ``--moments``), fewer than 2 samples, or ``n_components`` exceeds its width.
        SketchFormatError
            If the path holds no valid sketch.
        """
        k = self._check_params()
        sketch = sketch_or_load(
            sketch,
            (MeanSketch, NystromSketch),
            storage_options,
            takes="a MeanSketch or the path/URL of a saved one (or a NystromSketch)",
            needs="KernelPCA needs a mean sketch with moments or a Nystrom sketch",
        )
        if isinstance(sketch, MeanSketch) and not sketch.has_moments:
            raise InputError(
                "This sketch has no second moment, which KernelPCA needs. Re-sketch with moments=True "
                "(streamrff.sketch(X, feature_map, moments=True); CLI: streamrff sketch ... --moments)."
            )
        if sketch.count < 2:
            raise InputError(
                f"KernelPCA needs at least 2 samples. Got a sketch of {sketch.count} sample(s) "
                f"(n_samples = {sketch.count})."
            )
        width = sketch.feature_sum.shape[0]
        if k > width:
            raise InputError(
                f"n_components must be <= the number of features of the map ({width}). Got {k}; lower "
                "n_components or raise n_features."
            )
        n = sketch.count
        mean = sketch.feature_sum / n
        if isinstance(sketch, NystromSketch):
            if k >= sketch.sketch_size:
                raise InputError(
                    f"n_components must be < the Nystrom sketch's sketch_size ({sketch.sketch_size}). Got {k}; "
                    "lower n_components or re-sketch with a larger sketch_size."
                )
            variances, axes, total = nystrom_eigenpairs(sketch, k)
            self.moments_ = "low-rank"
        else:
            variances, axes, total = moment_eigenpairs(sketch, k, self.eigen_solver, normalize_seed(self.seed))
            self.moments_ = "full"
        # Reproducible signs: each axis's largest-magnitude loading is positive.
        signs = np.sign(axes[np.argmax(np.abs(axes), axis=0), np.arange(k)])
        axes *= np.where(signs == 0, 1.0, signs)
        self.feature_map_ = sketch.feature_map
        self.n_features_in_ = sketch.feature_map.n_features_in_
        self.n_samples_ = n
        self.mean_ = mean
        self.components_ = np.ascontiguousarray(axes.T)
        self.explained_variance_ = variances
        self.explained_variance_ratio_ = variances / total if total > 0 else np.zeros(k)
        self.eigenvalues_ = n * variances
        self.total_variance_ = total
        self.residual_ = self.residual(k)
        self._n_features_out = k
        return self

    def residual(self, k: int) -> float:
        """``R_hat_k`` for ``0 <= k <= n_components``: squared residual summed over rows after keeping k axes.

        ``R_hat_k = n * (total_variance_ - sum of the top k variances)``
        (Chen & Phillips 2016, sec. 7.1); ``residual(0)`` is the total
        squared deviation from the mean, ``n * total_variance_``.

        Raises
        ------
        InputError
            If k is negative or above ``n_components`` (fit with more components).
        """
        self._check_fitted()
        k = check_positive_int(k, "k", minimum=0)
        if k > self.explained_variance_.shape[0]:
            raise InputError(
                f"k must be <= n_components ({self.explained_variance_.shape[0]}) to compute R_hat_k. "
                f"Got {k}; fit with n_components >= {k}."
            )
        return float(self.n_samples_ * max(self.total_variance_ - float(self.explained_variance_[:k].sum()), 0.0))

    def _check_fitted(self) -> None:
        if not hasattr(self, "components_"):
            raise NotFittedMapError("This KernelPCA is not fitted yet. Call fit(X) or fit_from_sketch(sketch) first.")

    @single_blas_thread
    def _scores(self, rows: np.ndarray) -> np.ndarray:
        # Tile by tile: a chunk's full features (rows x D float32, and a float64 copy for the
        # centring) were 0.6 GB per 50 000-row chunk at D = 1024, most of `streamrff kpca`'s
        # 1.57 GiB peak; a tile is 1 MiB. (Z - mu) C^T = Z C^T - mu C^T, in float64.
        scores = np.empty((rows.shape[0], self.components_.shape[0]), dtype=np.float32)
        offset = self.mean_ @ self.components_.T
        for start, features in self.feature_map_.embed_tiles(rows):
            scores[start : start + features.shape[0]] = features @ self.components_.T - offset
        return scores

    def transform(self, X: Any, storage_options: StorageOptions = None) -> Any:
        """Scores of rows on the components: numpy in, numpy out; anything else gives a lazy dask array.

        Parameters
        ----------
        X : array-like, dask Array, xarray DataArray, or str/PathLike
            Rows to project; dask, xarray and zarr sources are read chunk by
            chunk when the result is computed (nothing is read here).
        storage_options : dict, optional
            fsspec options for URL sources.

        Returns
        -------
        ndarray or dask Array of shape (n_samples, n_components), float32
        """
        self._check_fitted()
        return apply_to_rows(self, X, self._scores, storage_options, np.float32, self._n_features_out)

    def __sklearn_tags__(self):  # noqa: D105
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float32"]
        tags.input_tags.allow_nan = False
        return tags
