"""The kernel k-means estimator: fit the map and the initial centres on a sample, then one pass per Lloyd step.

:class:`KernelKMeans` validates its parameters, draws the seeded row sample
once for the map and the initialisation, and runs the full-data Lloyd passes
with :func:`~streamrff.sketches.cluster.cluster_sketch_of_chunk` on the engine;
:class:`LloydIteration` is what every pass reports.
"""

from __future__ import annotations

import functools
import logging
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClusterMixin

from .._base.blas import single_blas_thread
from .._base.validation import (
    check_bandwidth,
    check_positive_int,
    check_rows,
    is_in_memory,
    normalize_seed,
    store_params,
    validate_estimator_input,
)
from .._estimators import apply_to_rows, initial_feature_map
from ..engine import JobOptions, current_job_options, landmark_sample, open_job_source, run_chunks
from ..engine.connection import connect
from ..errors import InputError, NotFittedMapError
from ..maps import KJL, RFF, FeatureMap
from ..sketches.cluster import ClusterSketch, _labels_of_rows, _nearest
from ..sources.rows import RowSource
from ..typing import Seed, StorageOptions
from .initialization import (
    _INIT_STREAM,
    _SPECTRAL_ROWS,
    _SPECTRAL_SCALES,
    _fill_empty,
    _kernel_kmeans_objective,
    _lloyd_in_memory,
    _spectral_labels,
    _sum_by_label,
)

__all__ = ["KernelKMeans", "LloydIteration"]

logger = logging.getLogger("streamrff.kmeans")

#: Default n_init for the "k-means++" and "random" initialisations.
_DEFAULT_N_INIT = 10
#: Default n_init for "spectral": k-means++ starts that compete with the spectral ones, a guard
#: against a spectral embedding that misses the clusters (each costs Lloyd on the init sample).
_SPECTRAL_N_INIT = 4
#: Cap of the default K-JL landmark count (the n x n Gram matrix is built in memory).
_MAX_DEFAULT_LANDMARKS = 2000


@dataclass(frozen=True)
class LloydIteration:
    """Progress of one full-data Lloyd iteration (what :meth:`KernelKMeans.fit` reports per pass).

    Attributes
    ----------
    iteration : int
        1-based pass number.
    inertia : float
        Sum of squared feature-space distances of the rows to their nearest
        centre of this pass (non-increasing from pass to pass).
    moved_fraction : float
        Fraction of the rows whose nearest centre changed since the previous
        pass (1.0 on the first pass).
    center_shift : float
        ``sum_c ||c_new - c||^2 / total feature variance``: the convergence
        measure compared with ``tol``.
    n_empty : int
        Clusters that received no row and were re-seeded.

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> rng = np.random.default_rng(0)
    >>> X = np.vstack([rng.normal(-3, 0.5, size=(100, 2)), rng.normal(3, 0.5, size=(100, 2))])
    >>> reports = []
    >>> model = srf.KernelKMeans(n_clusters=2, n_features=128, bandwidth=1.0, seed=0).fit(X, callback=reports.append)
    >>> reports == model.history_, [report.iteration for report in reports] == list(range(1, len(reports) + 1))
    (True, True)
    >>> all(b.inertia <= a.inertia * (1 + 1e-6) for a, b in zip(reports, reports[1:], strict=False))
    True
    >>> bool(np.isclose(reports[-1].inertia, model.inertia_))
    True
    """

    iteration: int
    inertia: float
    moved_fraction: float
    center_shift: float
    n_empty: int = 0


class KernelKMeans(ClusterMixin, BaseEstimator):
    """Kernel k-means of out-of-core data: Lloyd iterations in random-feature space, one pass each.

    The Gaussian kernel ``k(x, y) = exp(-||x - y||^2 / (2 sigma^2))`` is
    approximated by a feature map ``z`` with ``z(x).z(y) ~ k(x, y)``, and
    k-means runs on the features: kernel k-means (Dhillon et al. 2004) with
    explicit centres. ``method="rff"`` uses random Fourier features (D =
    ``n_features``); ``method="kjl"`` clusters K-JL embeddings instead
    (Kpotufe & Sriperumbudur 2020, sec. 5.2: centralised K-JL on ``n``
    landmarks, ``d' = 10 k``).

    Parameters
    ----------
    n_clusters : int, default=8
        Number of clusters k (1 <= k <= number of rows).
    method : {"rff", "kjl"}, default="rff"
        Feature map: :class:`~streamrff.RFF` or centralised :class:`~streamrff.KJL`.
    n_features : int or None, default=None
        Width D of the feature space. None means 1024 for ``"rff"`` and
        ``10 * n_clusters`` (the paper's ``d' = 10 k``) for ``"kjl"``.
    n_landmarks : int or None, default=None
        K-JL landmarks n (``method="kjl"`` only). None means
        ``max(200, N // 100)`` capped at 2000 and at N (the paper uses
        ``max(200, N / 100)``).
    bandwidth : float or "median", default="median"
        Kernel width sigma; "median" is the median pairwise distance of the
        seeded row sample (1 000 rows for RFF, the landmarks for K-JL). For
        clustering, the median is often too wide (see Notes).
    init : {"spectral", "k-means++", "random"} or array-like of shape (k, n_features_in), default="spectral"
        Candidate starts on the init sample. "spectral": spectral clustering
        (Ng, Jordan & Weiss 2002) of its first 2 000 rows on the exact Gaussian
        affinity at the bandwidth and at half of it, plus ``n_init`` k-means++
        starts; "k-means++": ``n_init`` k-means++ seedings of the embedded
        sample; "random": ``n_init`` sets of k distinct sample rows. Every
        candidate is refined by Lloyd iterations on the embedded sample until
        no label changes, and the best one starts the full-data passes: for
        ``method="rff"`` the one with the lowest *exact* kernel k-means
        objective on those 2 000 rows (their RFF inertias differ by the RFF
        error), for ``"kjl"`` the lowest K-JL inertia (the geometry it
        clusters). An array gives k rows in *input* space, embedded by the map.
    n_init : int or "auto", default="auto"
        Random candidate starts (k-means++ or random). "auto" means 4 besides
        the two spectral starts for "spectral", 10 for "k-means++" and
        "random", 1 for an array.
    init_size : int or None, default=None
        Rows in the init sample (the bottom-m seeded row sample, independent
        of chunking). None means ``min(N, max(10 k, 2000))``.
    max_iter : int, default=100
        Maximum full-data Lloyd passes.
    tol : float, default=1e-4
        Stop when ``sum_c ||c_new - c||^2`` falls to ``tol`` times the total
        feature variance.
    seed : int, numpy.random.Generator or None, default=0
        Seed of the map, of the row samples and of the initialisation.
    feature_map : RFF or KJL, optional
        A fitted map to cluster in, e.g. ``streamrff.load_map(path)`` shared by
        several sites, instead of fitting one. Its kind sets the method ("rff"
        for RFF, "kjl" for KJL); ``method``, ``n_features``, ``n_landmarks``
        and ``bandwidth`` then do not apply and must keep their defaults.

    Attributes
    ----------
    cluster_centers_ : ndarray of shape (n_clusters, D), float64
        Centres in feature space: the means of the clusters of the last pass
        (an empty cluster's centre is a re-seeded sample row).
    labels_ : ndarray of shape (n_samples,), int64
        Labels of the training rows; set only when ``X`` was in memory (numpy,
        list). For other sources call :meth:`predict` (lazy).
    inertia_ : float
        Sum of squared feature-space distances of the rows to the centre of
        their cluster, for the partition of the last pass and ``cluster_centers_``.
    n_iter_ : int
        Full-data passes run.
    stop_reason_ : {"converged", "max_iter"}
        Why the passes stopped: the centre shift of the last pass fell to
        ``tol`` ("converged"), or ``max_iter`` passes ran first ("max_iter").
    history_ : list of LloydIteration
        Per-pass progress (inertia, moved fraction, centre shift).
    feature_map_ : FeatureMap
        The fitted map (RFF or KJL).
    init_sample_labels_ : ndarray of shape (m,), int64
        Cluster of each init-sample row under the initial centres, which are
        the feature means of these clusters for "k-means++" and "random". The
        sample is the bottom-m rows by ``streamrff._base.sampling.row_keys(seed_, ...)``.
    seed_ : int
        The integer seed in use.
    n_features_in_ : int
        Input width d.

    Raises
    ------
    InputError
        On bad parameters, ``n_clusters`` or ``n_landmarks`` above the number
        of rows, NaN/inf rows, or data of another width in :meth:`predict`.
    NotFittedMapError
        From :meth:`predict` before :meth:`fit`.

    Notes
    -----
    Cost: one embedding pass per Lloyd iteration (plus one pass to draw the
    seeded row sample); each task holds one chunk, its features tile by tile,
    and ``2 k D`` float64 centres. For RFF maps a chunk is one compiled call
    (:mod:`streamrff._kernels.lloyd`): per tile the rows are scored by float32
    dot products (compiled register blocks up to 24 centres on AVX-512 CPUs,
    BLAS otherwise; rows within float32 rounding of a tie are rescored in
    float64) and each row is added to its cluster's float32 tile sum; near
    convergence only rows close to a boundary are scored against the previous
    centres for the moved-row count. At k = 10, D = 1024 a pass costs 1.43-1.55
    sketch passes on clustered data and 1.55-1.69 on data without cluster
    structure, where rows keep moving and every row is scored against the
    previous centres too (``benchmarks/bench_kmeans.py --dim 32``, 1e6 rows,
    2 cores: 0.71-0.91 s against 0.46-0.56 s).

    Random Fourier features approximate the kernel with additive noise:
    ``z(x).z(y) = k(x, y) + O(D^-1/2)`` whatever ``k(x, y)`` is. Kernel k-means
    compares within-cluster mean kernel values, which shrink with the
    bandwidth: at a small bandwidth, where a point's kernel values to most of
    its own cluster are close to zero, the noise floor ``D^-1/2`` swamps the
    differences between partitions, and in feature space the correct partition
    and one that splits every cluster (e.g. both of two nested rings or two
    moons in halves) become indistinguishable. Keep ``D^-1/2`` well below the
    smallest within-cluster mean kernel value ``kappa`` (about
    ``||cluster_centers_[c]||^2`` after a fit): for clusters of intrinsic
    dimension m that are wider than sigma, ``kappa`` scales like ``sigma^m``,
    so D must grow like ``sigma^(-2m)`` as sigma shrinks - 4-fold per halving
    of sigma for rings or curves (m = 1), 16-fold for 2-D blobs. ``D >=
    (10 / kappa)^2`` is safe; shapes whose best partitions are close in
    objective need the most. Measured on two moons (5 000 rows, noise 0.05,
    8 seeds, defaults otherwise): D = 1024 separates them (ARI >= 0.95) at
    sigma = 0.15-0.3 (kappa = 0.11-0.22) and misses one seed in 8 at
    sigma = 0.1 (kappa = 0.07, ARI 0.72), where D = 4096 separates all.
    K-JL has no such additive floor (its error is relative to the
    Sigma^3-weighted inner product it preserves, Kpotufe & Sriperumbudur
    Thm. 1), but it clusters that reweighted geometry, dominated by the
    leading kernel eigen-directions (like KPCA), rather than the kernel k-means
    one: on two moons the moons partition is not a k-means minimum of K-JL
    features at any bandwidth (nor of its d' -> infinity limit), so
    ``method="kjl"`` splits them, while it separates nested rings.

    The median heuristic is a good default for two-sample tests but is
    usually too wide for clustering, where kernel k-means then behaves like
    linear k-means; Kpotufe & Sriperumbudur use ``s`` = the 25th percentile of
    inter-point distances in ``exp(-||x - y||^2 / s^2)``, i.e.
    ``bandwidth = s / sqrt(2)`` here.

    Lloyd's algorithm finds a local minimum, and kernel k-means has narrow
    basins: on two moons at sigma = 0.25 the moons partition is the global
    minimum, yet only ~7% of k-means++ starts reach it (exact kernel k-means
    on the full Gram matrix). Spectral clustering, which optimises a relaxed
    form of the same objective (Dhillon et al. 2004), lands in that basin, so
    the default candidates are two spectral starts and four k-means++ starts,
    ranked by the exact objective on the init sample. Cost: the exact
    2 000 x 2 000 affinity, two Lanczos eigensolves and Lloyd on the sample
    per candidate (~0.2-0.6 s at D = 1024); ``init="k-means++"`` skips the
    spectral part.

    References
    ----------
    Dhillon, I., Guan, Y. & Kulis, B. (2004). Kernel k-means, spectral
    clustering and normalized cuts. KDD.
    Kpotufe, S. & Sriperumbudur, B. K. (2020). Gaussian sketching yields a J-L
    lemma in RKHS. AISTATS. Sec. 5.2.
    Arthur, D. & Vassilvitskii, S. (2007). k-means++: the advantages of careful seeding. SODA.
    Ng, A., Jordan, M. & Weiss, Y. (2002). On spectral clustering: analysis and
    an algorithm. NIPS.
    Higham, N. J. (2002). Accuracy and Stability of Numerical Algorithms, 2nd
    ed., SIAM. Eq. 3.5 (error of float32 dot products; the float32 scores).

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> from sklearn.datasets import make_circles
    >>> from sklearn.metrics import adjusted_rand_score
    >>> X, y = make_circles(600, factor=0.3, noise=0.05, random_state=0)
    >>> model = srf.KernelKMeans(n_clusters=2, bandwidth=0.3, seed=0).fit(X)
    >>> bool(adjusted_rand_score(y, model.labels_) > 0.9)
    True
    >>> model.predict(X[:3]).dtype
    dtype('int64')
    """

    def __init__(
        self,
        n_clusters: int = 8,
        method: str = "rff",
        n_features: int | None = None,
        n_landmarks: int | None = None,
        bandwidth: float | str = "median",
        init: str | Any = "spectral",
        n_init: int | str = "auto",
        init_size: int | None = None,
        max_iter: int = 100,
        tol: float = 1e-4,
        seed: Seed = 0,
        feature_map: FeatureMap | None = None,
    ) -> None:
        store_params(self, locals())

    # -- parameters ----------------------------------------------------------------------
    def _check_params(self, n_rows: int, n_columns: int) -> dict[str, Any]:
        """Validate every parameter against the data's shape; return the resolved values."""
        k = check_positive_int(self.n_clusters, "n_clusters")
        if k > n_rows:
            raise InputError(
                f"n_clusters must be <= the number of rows (n_samples={n_rows}). Got n_clusters={k}; "
                "pass more rows or lower n_clusters."
            )
        if self.method not in ("rff", "kjl"):
            raise InputError(f"method must be 'rff' or 'kjl'. Got {self.method!r}.")
        method = self.method
        if self.feature_map is not None:
            width, landmarks, method = self._check_given_map(n_columns)
        elif self.n_features is None:
            width = 1024 if self.method == "rff" else 10 * k
        else:
            width = check_positive_int(self.n_features, "n_features")
        if self.feature_map is not None:
            pass
        elif self.method == "rff":
            landmarks = None
            if self.n_landmarks is not None:
                raise InputError(
                    f"n_landmarks applies to method='kjl' only. Got n_landmarks={self.n_landmarks!r} with "
                    "method='rff'; drop it or use method='kjl'."
                )
        else:
            if self.n_landmarks is None:
                landmarks = min(n_rows, max(200, min(n_rows // 100, _MAX_DEFAULT_LANDMARKS)))
                if landmarks < 2:
                    raise InputError(f"method='kjl' needs at least 2 rows for its landmarks. Got n_samples={n_rows}.")
            else:
                landmarks = check_positive_int(self.n_landmarks, "n_landmarks", minimum=2)
                if landmarks > n_rows:
                    raise InputError(
                        f"n_landmarks must be <= the number of rows (n_samples={n_rows}). Got "
                        f"n_landmarks={landmarks}; lower it or leave it None."
                    )
        check_bandwidth(self.bandwidth)
        init = self.init
        if isinstance(init, str):
            if init not in ("spectral", "k-means++", "random"):
                raise InputError(
                    f"init must be 'spectral', 'k-means++', 'random' or an array of centres. Got {init!r}."
                )
        else:
            init = check_rows(init, "init")
            if init.shape != (k, n_columns):
                raise InputError(
                    f"An init array must hold n_clusters rows of the input width: shape ({k}, {n_columns}). "
                    f"Got {init.shape}."
                )
        if isinstance(self.n_init, str):
            if self.n_init != "auto":
                raise InputError(f"n_init must be a positive integer or 'auto'. Got {self.n_init!r}.")
            n_init = 1 if not isinstance(init, str) else _SPECTRAL_N_INIT if init == "spectral" else _DEFAULT_N_INIT
        else:
            n_init = check_positive_int(self.n_init, "n_init")
            if not isinstance(init, str) and n_init != 1:
                raise InputError(f"n_init must be 1 (or 'auto') with an init array of centres. Got {n_init}.")
        if self.init_size is None:
            init_size = min(n_rows, max(10 * k, 2000))
        else:
            init_size = min(n_rows, check_positive_int(self.init_size, "init_size", minimum=k))
        max_iter = check_positive_int(self.max_iter, "max_iter")
        if (
            isinstance(self.tol, bool)
            or not isinstance(self.tol, numbers.Real)
            or not np.isfinite(self.tol)
            or self.tol < 0
        ):
            raise InputError(f"tol must be a finite number >= 0. Got {self.tol!r}.")
        return {
            "k": k,
            "method": method,
            "width": width,
            "landmarks": landmarks,
            "init": init,
            "n_init": n_init,
            "init_size": init_size,
            "max_iter": max_iter,
            "tol": float(self.tol),
        }

    def _check_given_map(self, n_columns: int) -> tuple[int, None, str]:
        """Width, landmarks and method of a given fitted ``feature_map``; refuse parameters it overrides."""
        feature_map = self.feature_map
        if not isinstance(feature_map, (RFF, KJL)) or not feature_map.is_fitted():
            raise InputError(
                "feature_map must be a fitted RFF or KJL map (e.g. streamrff.load_map(path)). Got "
                f"{'an unfitted ' if isinstance(feature_map, FeatureMap) else ''}{type(feature_map).__name__}."
            )
        overridden = {
            name: getattr(self, name)
            for name, default in (
                ("method", "rff"),
                ("n_features", None),
                ("n_landmarks", None),
                ("bandwidth", "median"),
            )
            if getattr(self, name) != default
        }
        if overridden:
            raise InputError(
                f"feature_map sets the feature space, so {', '.join(f'{k}={v!r}' for k, v in overridden.items())} "
                "would be ignored. Drop them, or drop feature_map."
            )
        if feature_map.n_features_in_ != n_columns:
            raise InputError(
                f"The data has {n_columns} features, but feature_map expects {feature_map.n_features_in_}. "
                "Pass data of that width or a map fitted on this data."
            )
        return feature_map.n_features_out_, None, "kjl" if isinstance(feature_map, KJL) else "rff"

    def _make_map(self, params: dict[str, Any], seed: int) -> FeatureMap:
        return initial_feature_map(self.method, params["width"], self.bandwidth, seed, params["landmarks"])

    # -- fitting -------------------------------------------------------------------------
    def fit(
        self, X: Any, y: Any = None, callback: Callable[[LloydIteration], Any] | None = None, **options: Any
    ) -> KernelKMeans:
        """Fit the map on the seeded sample, initialise on the sample, then run full-data Lloyd passes.

        Parameters
        ----------
        X : ndarray, dask Array, xarray DataArray, or str/PathLike
            Anything :func:`streamrff.sketch` accepts (numpy, dask, xarray,
            zarr path or URL).
        y : ignored
        callback : callable, optional
            Called with a :class:`LloydIteration` after every pass (the CLI
            shows them as progress); every pass is also logged at INFO level
            on the ``streamrff.kmeans`` logger.
        **options
            The job options of every pass (``client``, ``storage_options``,
            ``progress``, ...), as for :func:`streamrff.sketch`.

        Returns
        -------
        self : KernelKMeans

        Raises
        ------
        InputError
            See the class docstring.
        """
        in_memory = is_in_memory(X)
        fitted_before = hasattr(self, "cluster_centers_")
        try:
            if in_memory:
                X = validate_estimator_input(self, X, reset=True)
            job = current_job_options(**options)
            source = open_job_source(X, job)
            result = self._fit_source(source, job, callback)
        except BaseException:
            if not fitted_before:  # validate_data sets n_features_in_ early; a failed fit stays unfitted
                vars(self).pop("n_features_in_", None)
            raise
        for name, value in result.items():
            setattr(self, name, value)
        if in_memory:
            self.labels_ = self._labels(X)
        else:
            vars(self).pop("labels_", None)  # a refit on out-of-core data must not keep stale labels
        return self

    def _fit_source(
        self, source: RowSource, job: JobOptions, callback: Callable[[LloydIteration], Any] | None
    ) -> dict[str, Any]:
        n_rows, n_columns = source.shape
        params = self._check_params(n_rows, n_columns)
        seed = normalize_seed(self.seed)
        history: list[LloydIteration] = []
        with connect(job.client) as active:
            job = job.replace(client=active)
            # One sampling pass serves the map and the init: bottom-k samples under one seed
            # are nested, so the map's sample (what engine.fit_map would draw) is the first
            # rows of the init sample, in key order.
            if self.feature_map is not None:
                feature_map, map_rows = self.feature_map, 0
            else:
                feature_map = self._make_map(params, seed)
                map_rows, map_seed = feature_map._begin_fit(n_columns)
                if map_seed != seed:  # pragma: no cover - both maps key their sample by their own seed
                    raise AssertionError("the map's row sample must be keyed by the estimator's seed")
            size = max(params["init_size"], map_rows)
            sample = landmark_sample([source], size, seed, job).rows
            if self.feature_map is None:
                feature_map._finish_fit(sample[:map_rows])
            sample_features = feature_map._embed(sample[: params["init_size"]])  # float32
            centers, sample_labels = self._initial_centers(
                params, seed, feature_map, sample_features, sample[: params["init_size"]]
            )
            previous = None
            for iteration in range(1, params["max_iter"] + 1):
                lloyd_step = ClusterSketch.chunk_job(feature_map, centers, previous)
                pass_sketch = run_chunks([source], lloyd_step.kernel, job.replace(checkpoint=None))
                counts = pass_sketch.counts
                new_centers = pass_sketch.sums / np.maximum(counts, 1)[:, None]
                empty = np.flatnonzero(counts == 0)
                if empty.size:
                    new_centers = _fill_empty(new_centers, empty, sample_features)
                variance = pass_sketch.total_variance
                squared_shift = float(np.sum((new_centers - centers) ** 2))
                shift = squared_shift / variance if variance > 0 else (0.0 if squared_shift == 0 else np.inf)
                report = LloydIteration(
                    iteration, pass_sketch.inertia, pass_sketch.n_moved / pass_sketch.count, shift, int(empty.size)
                )
                history.append(report)
                logger.info(
                    "iteration %d: inertia %.6g, moved %.4f, centre shift %.3g, empty %d",
                    iteration, report.inertia, report.moved_fraction, shift, report.n_empty,
                )  # fmt: skip
                if callback is not None:
                    callback(report)
                previous, centers = centers, new_centers
                if shift <= params["tol"]:
                    break
        stop_reason = "converged" if shift <= params["tol"] else "max_iter"
        return {
            "feature_map_": feature_map,
            "seed_": seed,
            "cluster_centers_": centers,
            "inertia_": pass_sketch.partition_inertia,
            "n_iter_": len(history),
            "stop_reason_": stop_reason,
            "history_": history,
            "init_sample_labels_": sample_labels,
            "n_features_in_": n_columns,
        }

    @single_blas_thread
    def _initial_centers(
        self,
        params: dict[str, Any],
        seed: int,
        feature_map: FeatureMap,
        sample_features: np.ndarray,
        sample_rows: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Candidate starts, each refined by Lloyd on the init sample; the best one's centres and labels."""
        k, init = params["k"], params["init"]
        if not isinstance(init, str):
            centers = feature_map._embed(init).astype(np.float64)
            labels, _ = _nearest(sample_features, centers, np.einsum("ij,ij->i", centers, centers))
            return centers, labels
        from scipy.spatial.distance import cdist
        from sklearn.cluster import kmeans_plusplus

        # The exact Gram matrix of the first rows of the init sample: for the spectral starts, and
        # for RFF to rank the candidates by the exact kernel k-means objective. Their RFF inertias
        # differ by the RFF error, O(D^-1/2) per kernel value, which on two moons at D = 1024
        # ranks a split of both moons above the moons partition.
        exact_rows = min(sample_rows.shape[0], _SPECTRAL_ROWS)
        needs_gram = (init == "spectral" and k > 1) or (params["method"] == "rff" and params["n_init"] > 1)
        squared_distances = (
            cdist(sample_rows[:exact_rows], sample_rows[:exact_rows], "sqeuclidean") if needs_gram else None
        )
        starts: list[tuple[str, np.ndarray]] = []
        if init == "spectral" and k > 1:
            spectral = _spectral_labels(squared_distances, feature_map.bandwidth_, k, seed)
            for scale, labels in zip(_SPECTRAL_SCALES, spectral):
                counts, sums = _sum_by_label(sample_features[:exact_rows], labels, k)
                starts.append((f"spectral (bandwidth x {scale:g})", sums / np.maximum(counts, 1)[:, None]))
        for candidate in range(params["n_init"]):
            rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(_INIT_STREAM, candidate)))
            if init == "random":
                start = sample_features[rng.choice(sample_features.shape[0], size=k, replace=False)]
            else:
                start, _ = kmeans_plusplus(sample_features, k, random_state=int(rng.integers(2**31 - 1)))
            starts.append((f"{'random' if init == 'random' else 'k-means++'} {candidate}", start))
        gram = None
        if params["method"] == "rff" and len(starts) > 1:
            bandwidth = feature_map.bandwidth_
            gram = np.exp(squared_distances / (-2.0 * bandwidth * bandwidth))
        best = None
        for name, start in starts:
            centers, labels, inertia = _lloyd_in_memory(sample_features, start)
            # K-JL clusters its own geometry (Kpotufe & Sriperumbudur sec. 5.2): rank by its inertia.
            score = inertia if gram is None else _kernel_kmeans_objective(gram, labels[:exact_rows], k)
            logger.debug("init candidate %s: sample inertia %.6g, score %.6g", name, inertia, score)
            if best is None or score < best[2]:
                best = (centers, labels, score, name)
        logger.info("initial centres from the %s start (score %.6g)", best[3], best[2])
        return best[0], best[1].astype(np.int64)

    # -- prediction ----------------------------------------------------------------------
    def _check_fitted(self) -> None:
        if not hasattr(self, "cluster_centers_"):
            raise NotFittedMapError("This KernelKMeans is not fitted yet. Call fit(X) first.")

    def _labels(self, rows: np.ndarray) -> np.ndarray:
        return _labels_of_rows(rows, self.feature_map_, self.cluster_centers_)

    def predict(self, X: Any, storage_options: StorageOptions = None) -> Any:
        """Index of the nearest centre in feature space for every row.

        Parameters
        ----------
        X : ndarray, dask Array, xarray DataArray, or str/PathLike
            Rows of the training width.
        storage_options : dict, optional
            fsspec options for URL sources.

        Returns
        -------
        labels : ndarray of shape (n_samples,), int64, or dask Array
            NumPy for in-memory input; otherwise a lazy dask array chunked like
            the rows (write it with ``labels.to_zarr(url)``). NaN/inf rows
            raise when the chunk holding them is computed.

        Raises
        ------
        NotFittedMapError
            Before :meth:`fit`.
        InputError
            For data of another width, or NaN/inf rows in memory.
        """
        self._check_fitted()
        # The labels of the fitted map and centres alone: what ships to the workers (never labels_).
        labels = functools.partial(_labels_of_rows, feature_map=self.feature_map_, centers=self.cluster_centers_)
        return apply_to_rows(self, X, labels, storage_options, np.int64, None)

    def fit_predict(self, X: Any, y: Any = None, **fit_params: Any) -> Any:
        """Fit, then return the training labels: ``labels_`` for in-memory ``X``, else lazy :meth:`predict`."""
        self.fit(X, **fit_params)
        if hasattr(self, "labels_"):
            return self.labels_
        options = {name: value for name, value in fit_params.items() if name != "callback"}
        return self.predict(X, storage_options=current_job_options(**options).storage_options)
