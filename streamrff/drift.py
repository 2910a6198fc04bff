"""Streaming drift monitoring: a reference kernel-mean sketch against a sliding window of the last rows.

A :class:`DriftMonitor` holds the reference as sums of features (count, feature
sum, sum of squared norms: any number of rows, sketched out of core and merged
across sites) and the last ``window`` rows of the stream as a ring buffer of
their features. Each new row costs O(D): its features enter the window sums,
the features of the row that leaves are subtracted, and the unbiased MMD^2 of
the window against the reference is read off the sums. The alarm thresholds
are calibrated, from the reference alone, to an expected run time under no
change (Cobb, Van Looveren & Klaise 2022).

The monitor's state saves to a zarr group (format ``"streamrff.drift-monitor"``,
version 1; no pickle)::

    <monitor>/zarr.json               group; attrs: format, version, map (spec),
                                      fingerprint, params, counters, checksums,
                                      attributes_digest
    <monitor>/reference_sum           (D,) float64
    <monitor>/thresholds              (window + 1,) float64; [0] is +inf
    <monitor>/window_features         (window, D) float32 ring buffer
    <monitor>/window_squared_norms    (window,) float64 ring buffer
    <monitor>/window_sum              (D,) float64
    <monitor>/map/<array>             fitted map arrays the spec does not give (K-JL)
"""

from __future__ import annotations

import hashlib
import json
import math
import numbers
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator

from ._publish import publish, remove_path, staging_path
from ._validation import check_bandwidth, check_positive_int, check_rows, check_width, is_in_memory, normalize_seed
from .errors import InputError, NotFittedMapError, SketchFormatError
from .maps import RFF, FeatureMap, map_from_spec
from .sketches import MeanSketch
from .typing import PathOrURL, StorageOptions

__all__ = ["DriftMonitor", "DriftUpdate", "load_monitor", "calibrate_thresholds", "MONITOR_FORMAT_NAME"]

MONITOR_FORMAT_NAME = "streamrff.drift-monitor"
MONITOR_FORMAT_VERSION = 1
_SIMULATIONS = ("auto", "resample", "gaussian")
#: Feature values touched by the calibration's simulated streams before the number of streams is capped
#: (about 2-4 s of one core in the compiled kernel); rarer tails are extrapolated (see calibrate_thresholds).
_SIMULATION_BUDGET = 4e9
_MIN_STREAMS = 2000
#: Rows per vectorised step of update (its cumulative sums stay in cache).
_TILE_ROWS = 1024
#: Below this many expected exceedances an upper quantile is extrapolated from an exponential tail.
_MIN_EXCEEDANCES = 5
#: Streams wanted per 1/ERT: enough for a per-step quantile among survivors without extrapolation.
_STREAMS_PER_ERT = 40


@dataclass(frozen=True)
class DriftUpdate:
    """What :meth:`DriftMonitor.update` saw in one batch of rows.

    Attributes
    ----------
    statistic : ndarray of shape (n_rows,), float64
        Per row, the unbiased MMD^2 of the window of the last ``window`` rows
        (fewer after a reset) against the reference; NaN while the window holds
        one row.
    threshold : ndarray of shape (n_rows,), float64
        Per row, the threshold in force (+inf while the window holds one row).
    drift : bool
        Whether the current run has raised an alarm (in this batch or before).
    drift_at : int or None
        Global index (rows counted from the first row ever passed to ``update``)
        of the first row of the current run whose statistic crossed its threshold.
    n_rows_seen : int
        Rows passed to ``update`` since ``fit``, this batch included.
    run_length : int
        Rows since the start of the current run (``fit`` or ``reset``).

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> rng = np.random.default_rng(0)
    >>> monitor = srf.DriftMonitor(window=10, ert=100, n_features=64, n_streams=1000).fit(rng.normal(size=(500, 2)))
    >>> update = monitor.update(rng.normal(size=(15, 2)))
    >>> update.statistic.shape, update.n_rows_seen, update.run_length
    ((15,), 15, 15)
    >>> bool(np.isnan(update.statistic[0])), bool(np.all(update.threshold[10:] == monitor.thresholds_[10]))
    (True, True)
    """

    statistic: np.ndarray
    threshold: np.ndarray
    drift: bool
    drift_at: int | None
    n_rows_seen: int
    run_length: int


def _check_checksum_array(array: np.ndarray) -> str:
    little = np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<"), copy=False)
    return hashlib.sha256(little.tobytes()).hexdigest()


def _canonical_digest(attrs: dict[str, Any]) -> str:
    text = json.dumps(attrs, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


_SIMULATION_KERNEL = None


def _simulation_kernel() -> Any:
    """The compiled per-stream kernel (numba, compiled on first use, not cached on disk)."""
    global _SIMULATION_KERNEL
    if _SIMULATION_KERNEL is None:
        import numba

        @numba.njit(parallel=True, nogil=True, cache=False)
        def simulated_statistics(bank, bank_squared_norms, mean, indices, window):  # pragma: no cover - compiled
            n_streams, n_steps = indices.shape
            width = bank.shape[1]
            statistics = np.full((n_streams, n_steps), np.nan)
            mean_squared = 0.0
            for j in range(width):
                mean_squared += mean[j] * mean[j]
            for stream in numba.prange(n_streams):
                total = np.zeros(width)
                squared_norm_sum = 0.0
                for step in range(n_steps):
                    row = indices[stream, step]
                    for j in range(width):
                        total[j] += bank[row, j]
                    squared_norm_sum += bank_squared_norms[row]
                    if step >= window:
                        leaving = indices[stream, step - window]
                        for j in range(width):
                            total[j] -= bank[leaving, j]
                        squared_norm_sum -= bank_squared_norms[leaving]
                    size = min(step + 1, window)
                    if size >= 2:
                        total_squared = 0.0
                        cross = 0.0
                        for j in range(width):
                            total_squared += total[j] * total[j]
                            cross += total[j] * mean[j]
                        statistics[stream, step] = (
                            (total_squared - squared_norm_sum) / (size * (size - 1.0))
                            - 2.0 * cross / size
                            + mean_squared
                        )
            return statistics

        _SIMULATION_KERNEL = simulated_statistics
    return _SIMULATION_KERNEL


def _upper_quantile(values: np.ndarray, probability: float) -> float:
    """The value exceeded by a fraction ``probability`` of ``values``.

    Empirical when at least ``_MIN_EXCEEDANCES`` values are expected above it;
    rarer levels are extrapolated from an exponential tail (peaks over a
    threshold with generalized-Pareto shape 0, the Gumbel domain of quadratic
    forms of Gaussian-like sums): with ``u`` the ``k``-th largest value and
    ``beta`` the mean excess of the ``k`` largest over it,
    ``P(X > u + y) = (k / n) exp(-y / beta)``.
    """
    n = values.shape[0]
    if probability >= 1.0:
        return -math.inf
    if n * probability >= _MIN_EXCEEDANCES:
        return float(np.quantile(values, 1.0 - probability, method="higher"))
    k = min(max(min(200, n // 10), 10), n - 1)
    largest = np.sort(values)[n - k - 1 :]
    floor, top = largest[0], largest[1:]
    beta = max(float(np.mean(top - floor)), np.finfo(float).tiny)
    return float(floor + beta * math.log(k / (n * probability)))


def _steady_threshold(statistics: np.ndarray, ert: float) -> float:
    """One threshold for the steps after the window filled: first crossings per surviving step = 1/ERT.

    ``statistics`` is (streams that survived the fill, steady steps). For a
    threshold ``h``, F(h) streams cross within the steps and the survivors spend
    N(h) steps (up to and including the crossing); the hazard F/N equals 1/ERT
    at the fixed point of ``h = upper quantile of the per-stream maxima at
    level N(h) / (ERT * streams)``, found in a few iterations.
    """
    n_streams, n_steps = statistics.shape
    maxima = statistics.max(axis=1)
    exposure = float(n_streams * n_steps)
    threshold = math.inf
    for _ in range(8):
        threshold = _upper_quantile(maxima, min(1.0, exposure / (ert * n_streams)))
        crossed = statistics > threshold
        first = np.where(crossed.any(axis=1), crossed.argmax(axis=1) + 1, n_steps)
        updated = float(first.sum())
        if abs(updated - exposure) <= 1e-3 * exposure:
            break
        exposure = updated
    return threshold


def calibrate_thresholds(
    bank: np.ndarray, window: int, ert: float, n_streams: int, seed: int, n_steady_steps: int | None = None
) -> np.ndarray:
    """Thresholds per window fill level for a run length with mean ``ert`` under no change.

    Simulates ``n_streams`` streams of ``window + n_steady_steps`` rows drawn
    with replacement from the rows of ``bank`` (features of reference rows, or
    Gaussian draws with the reference's mean and covariance), each from an empty
    window, and computes every stream's statistic at every step with the same
    sums as :meth:`DriftMonitor.update` (O(D) per step, compiled). Then, as in
    Cobb, Van Looveren & Klaise (2022, sec. 4, Algorithm 1), for fill levels
    t = 2..window in turn the threshold is the (1 - 1/ERT) quantile of the
    statistic among the streams without an earlier alarm, which removes them
    for the next level: the probability of a first alarm at t given none before
    is 1/ERT, so the run length is geometric with mean ERT. One threshold
    serves every step after the window filled: it makes first crossings per
    surviving step 1/ERT over the ``n_steady_steps`` steady steps of all
    surviving streams (pooling those steps needs ``window / n_steady_steps``
    times fewer streams than a per-step quantile). Quantiles rarer than the
    simulation resolves are extrapolated from an exponential tail.

    Parameters
    ----------
    bank : ndarray of shape (n_bank, D), float32
        Rows to resample (trusted).
    window : int
    ert : float
    n_streams : int
    seed : int
    n_steady_steps : int, optional
        Steps simulated after the window filled (default ``window``).

    Returns
    -------
    ndarray of shape (window + 1,), float64
        ``[t - 1]`` is the threshold at fill level t (t = 1..window; +inf at
        t = 1, where the unbiased statistic is undefined); ``[window]`` serves
        every later step.

    References
    ----------
    Cobb, O., Van Looveren, A. & Klaise, J. (2022). Sequential multivariate
    change detection with calibrated and memoryless false detection rates.
    AISTATS, PMLR 151.
    """
    steady = window if n_steady_steps is None else n_steady_steps
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x0D1F7]))
    bank = np.ascontiguousarray(bank, dtype=np.float32)
    bank_squared_norms = np.einsum("ij,ij->i", bank, bank, dtype=np.float64)
    mean = bank.mean(axis=0, dtype=np.float64)  # the simulated streams' own mean (see DriftMonitor Notes)
    indices = rng.integers(0, bank.shape[0], size=(n_streams, window + steady), dtype=np.int32)
    statistics = _simulation_kernel()(bank, bank_squared_norms, mean, indices, window)
    thresholds = np.full(window + 1, np.inf)
    alive = np.ones(n_streams, dtype=bool)
    for step in range(1, window):
        values = statistics[alive, step]
        if values.shape[0] < 2:
            raise InputError(
                f"Expected streams without an alarm at every fill level. Got none left at fill level {step + 1} "
                f"of {window}; increase n_streams (got {n_streams}) or ert (got {ert})."
            )
        thresholds[step] = _upper_quantile(values, 1.0 / ert)
        alive &= statistics[:, step] <= thresholds[step]
    if alive.sum() < 2:
        raise InputError(
            f"Expected streams that survive the window's fill. Got {int(alive.sum())}; increase n_streams."
        )
    thresholds[window] = _steady_threshold(statistics[alive, window:], ert)
    return thresholds


def _gaussian_bank(summary: MeanSketch, n_rows: int, seed: int) -> np.ndarray:
    """``n_rows`` Gaussian draws with the features' mean and covariance, in the covariance's eigenbasis.

    Inner products are invariant under the rotation, so the statistic of a
    stream drawn from the rotated bank has the distribution it would have in
    the original coordinates, without a D x D product per row.
    """
    mean = summary.feature_sum / summary.count
    covariance = summary.moment / summary.count - np.outer(mean, mean)
    variances, axes = np.linalg.eigh(covariance)
    scales = np.sqrt(np.clip(variances, 0.0, None))
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x6A055]))
    noise = rng.standard_normal((n_rows, mean.shape[0]))
    return ((axes.T @ mean) + noise * scales).astype(np.float32)


class DriftMonitor(BaseEstimator):
    """Sliding-window kernel drift detector against a sketched reference, calibrated to an expected run time.

    The statistic after each row is the unbiased MMD^2 (Gretton et al. 2012)
    in feature space between the last ``window`` rows (fewer after a start or
    a reset) and the reference, from sums only::

        MMD^2_u = (||S_r||^2 - Q_r) / (n (n-1)) + (||S_w||^2 - Q_w) / (m (m-1)) - 2 S_r.S_w / (n m)

    with S the feature sums, Q the sums of squared feature norms, n the
    reference rows and m the window's rows. The window's S_w and Q_w move by
    one row in and one row out, so a row costs O(D) and a batch is one
    cumulative sum; the features of the last ``window`` rows are kept (a
    ``window x D`` float32 ring buffer) to subtract the row that leaves.
    Memory is independent of the reference size.

    An alarm is raised at the first row whose statistic exceeds the threshold
    of its window fill level; thresholds are calibrated from the reference
    alone so that, with no change, the run length to a false alarm is geometric
    with mean ``ert`` (see :func:`calibrate_thresholds`).

    Parameters
    ----------
    window : int
        Rows in the sliding window, at least 2. Larger windows detect smaller
        changes, later.
    ert : float
        Expected run time (rows) between false alarms under no change, > 1.
    n_features : int, default=512
        Random features of the default map ``RFF(n_features, bandwidth, seed)``.
    bandwidth : float or "median", default="median"
        Gaussian kernel bandwidth of the default map.
    seed : int, Generator or None, default=0
        Seeds the map, the calibration sample and the simulated streams.
    feature_map : FeatureMap, optional
        Use this map instead of the default (fitted on the reference if not fitted).
    simulation : {"auto", "resample", "gaussian"}, default="auto"
        Where calibration streams come from: "resample" draws features of a
        seeded sample of ``n_reference_rows`` reference rows (the engine's
        bottom-k landmark sample); "gaussian" draws from a Gaussian with the
        features' mean and covariance (needs the second moment: the reference
        is sketched with ``moments=True``, or a MeanSketch with moments is
        given). "auto": "resample" for a data reference, "gaussian" for a
        MeanSketch (which holds no rows).
    n_streams : int or "auto", default="auto"
        Simulated calibration streams. "auto": enough for 100 expected
        crossings over the steady steps (at least 2000, at most a budget of
        about 4e9 feature values, ~2-4 s of one core).
    n_reference_rows : int, default=4096
        Rows in the calibration bank (resampled reference rows or Gaussian draws).

    Attributes
    ----------
    feature_map_ : FeatureMap
        The fitted map.
    n_features_in_ : int
        Columns of the data.
    reference_count_ : int
        Reference rows n.
    reference_sum_ : ndarray of shape (D,), float64
        Sum of the reference rows' features S_r.
    reference_squared_norm_sum_ : float
        Sum of their squared feature norms Q_r.
    thresholds_ : ndarray of shape (window + 1,), float64
        ``thresholds_[t - 1]`` at fill level t (+inf at t = 1), ``thresholds_[window]`` afterwards.
    simulation_ : str
        The simulation source used ("resample" or "gaussian").
    n_streams_ : int
        Simulated streams used.
    window_features_ : ndarray of shape (window, D), float32
        Ring buffer: the features of global row g sit at ``g % window``.
    window_squared_norms_ : ndarray of shape (window,), float64
        Their squared norms.
    window_sum_ : ndarray of shape (D,), float64
        Feature sum of the rows in the window.
    window_squared_norm_sum_ : float
        Their squared norms' sum.
    run_length_ : int
        Rows since the current run started.
    n_rows_seen_ : int
        Rows passed to ``update`` since ``fit``.
    drift_at_ : int or None
        Global index of the current run's first alarm.

    Notes
    -----
    Calibration (Cobb et al. 2022, Algorithm 1, with the per-step conditional
    quantiles pooled over the steady state) simulates ``n_streams`` streams of
    ``2 * window`` rows from the calibration bank, never from the monitored
    stream. It costs ``n_streams * 2 * window * D`` multiply-adds (compiled,
    both cores): ``ert=100_000, window=200, D=512`` uses 19 500 streams, about
    4e9, a few seconds. An alarm rate of 1/ERT per step does not need streams of
    ERT rows: per-step conditional quantiles need ~ERT streams of ``2 * window``
    rows at most, the pooled steady threshold ``window`` times fewer, and
    levels rarer than the simulation resolves are extrapolated from an
    exponential tail of the statistic (this matters only for the first
    ``window`` steps, whose alarms are a fraction ``window / ert`` of all).
    The simulated statistic is centred on the bank's own mean: a finite
    reference of n rows makes the real statistic's reference term smaller by
    ``tr(Cov z) / (n - 1)`` in expectation, which the reference mean's own
    error adds back (the unbiased estimate has mean 0 under no change), so
    no correction is needed.

    Detection delay: after a change, the statistic's mean grows towards the
    MMD^2 of the change as the window fills with changed rows; with a window
    of W rows a change of MMD^2 well above the steady threshold is detected
    within about W rows, a smaller one may need a larger window.

    References
    ----------
    Cobb, O., Van Looveren, A. & Klaise, J. (2022). Sequential multivariate
    change detection with calibrated and memoryless false detection rates.
    AISTATS, PMLR 151. Gretton, A. et al. (2012). A kernel two-sample test. JMLR.

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> rng = np.random.default_rng(0)
    >>> reference = rng.normal(size=(2000, 3))
    >>> monitor = srf.DriftMonitor(window=50, ert=500, n_features=128, seed=0).fit(reference)
    >>> calm, shifted = rng.normal(size=(200, 3)), rng.normal(size=(200, 3)) + [1.5, 0.0, 0.0]
    >>> before, after = monitor.update(calm), monitor.update(shifted)
    >>> bool(before.drift), bool(after.drift), 200 <= after.drift_at < 400
    (False, True, True)

    The last statistic is the unbiased MMD^2 of the last 50 rows' features against the reference's:

    >>> Zr = monitor.feature_map_.transform(reference).astype(float)
    >>> Zw = monitor.feature_map_.transform(shifted[-50:]).astype(float)
    >>> n, m = len(Zr), len(Zw)
    >>> Krr, Kww, Krw = Zr @ Zr.T, Zw @ Zw.T, Zr @ Zw.T
    >>> exact = ((Krr.sum() - np.trace(Krr)) / (n * (n - 1)) + (Kww.sum() - np.trace(Kww)) / (m * (m - 1))
    ...          - 2 * Krw.mean())
    >>> bool(abs(after.statistic[-1] - exact) < 1e-6)
    True
    """

    def __init__(
        self,
        window: int = 100,
        ert: float = 1000,
        n_features: int = 512,
        bandwidth: float | str = "median",
        seed: int | np.random.Generator | None = 0,
        feature_map: FeatureMap | None = None,
        simulation: str = "auto",
        n_streams: int | str = "auto",
        n_reference_rows: int = 4096,
    ) -> None:
        self.window = window
        self.ert = ert
        self.n_features = n_features
        self.bandwidth = bandwidth
        self.seed = seed
        self.feature_map = feature_map
        self.simulation = simulation
        self.n_streams = n_streams
        self.n_reference_rows = n_reference_rows

    def _check_params(self) -> tuple[int, float]:
        window = check_positive_int(self.window, "window", minimum=2)
        ert = self.ert
        if isinstance(ert, bool) or not isinstance(ert, numbers.Real) or not (np.isfinite(ert) and ert > 1):
            raise InputError(f"ert must be a finite number of rows > 1. Got {ert!r}; use e.g. ert=10_000.")
        check_positive_int(self.n_features, "n_features")
        check_bandwidth(self.bandwidth)
        if self.simulation not in _SIMULATIONS:
            raise InputError(f"simulation must be 'auto', 'resample' or 'gaussian'. Got {self.simulation!r}.")
        if self.n_streams != "auto":
            check_positive_int(self.n_streams, "n_streams", minimum=10)
        check_positive_int(self.n_reference_rows, "n_reference_rows", minimum=2)
        if self.feature_map is not None and not isinstance(self.feature_map, FeatureMap):
            raise InputError(f"feature_map must be a streamrff FeatureMap. Got {type(self.feature_map).__name__}.")
        return window, float(ert)

    def _streams(self, window: int, ert: float, width: int) -> int:
        if self.n_streams != "auto":
            return int(self.n_streams)
        budget = max(_MIN_STREAMS, int(_SIMULATION_BUDGET // (2 * window * width)))
        wanted = max(_MIN_STREAMS, math.ceil(100 * ert / window), math.ceil(_STREAMS_PER_ERT * ert))
        return int(min(budget, wanted))

    def fit(
        self,
        reference: Any,
        y: Any = None,
        client: Any = None,
        storage_options: StorageOptions = None,
        progress: bool = False,
    ) -> DriftMonitor:
        """Sketch the reference (one pass through the engine) and calibrate the thresholds.

        Parameters
        ----------
        reference : array-like, dask Array, xarray DataArray, str/PathLike, or MeanSketch
            Anything :func:`streamrff.sketch` reads, or a MeanSketch (e.g.
            ``srf.load(path)``, possibly merged across sites; it needs second
            moments for the Gaussian calibration, its only option).
        y : ignored
        client : None, distributed.Client or str, default=None
            Where the reference pass runs (see :func:`streamrff.sketch`).
        storage_options : dict, optional
            fsspec options for URL sources.
        progress : bool, default=False
            Show a progress bar.

        Returns
        -------
        self : DriftMonitor

        Raises
        ------
        InputError
            On bad parameters or data, a sketch without moments, or a reference of fewer than 2 rows.
        """
        window, ert = self._check_params()
        seed = normalize_seed(self.seed)
        if isinstance(reference, MeanSketch):
            simulation = "gaussian" if self.simulation == "auto" else self.simulation
            if simulation == "resample":
                raise InputError(
                    "simulation='resample' needs reference rows, but a MeanSketch holds none. Pass the "
                    "reference data, or use simulation='gaussian' (the sketch needs second moments)."
                )
            summary, sample = reference, None
        else:
            simulation = "resample" if self.simulation == "auto" else self.simulation
            summary, sample = self._sketch_reference(reference, simulation, seed, client, storage_options, progress)
        if simulation == "gaussian" and not summary.has_moments:
            raise InputError(
                "simulation='gaussian' needs the reference's second moment. Got a MeanSketch without "
                "moments; sketch the reference with moments=True (CLI: --moments)."
            )
        if summary.count < 2:
            raise InputError(f"The reference must hold at least 2 rows. Got {summary.count}.")
        feature_map = summary.feature_map
        if simulation == "gaussian":
            bank = _gaussian_bank(summary, int(self.n_reference_rows), seed)
        else:
            bank = feature_map.transform(sample).astype(np.float32, copy=False)
        width = feature_map.n_features_out_
        self.n_streams_ = self._streams(window, ert, width)
        self.thresholds_ = calibrate_thresholds(bank, window, ert, self.n_streams_, seed)
        self.simulation_ = simulation
        self.feature_map_ = feature_map
        self.n_features_in_ = int(feature_map.n_features_in_)
        self.reference_count_ = int(summary.count)
        self.reference_sum_ = np.array(summary.feature_sum, dtype=np.float64)
        self.reference_squared_norm_sum_ = float(summary.squared_norm_sum)
        self.n_rows_seen_ = 0
        self._start_run(window, width)
        return self

    def _sketch_reference(
        self, reference: Any, simulation: str, seed: int, client: Any, storage_options: StorageOptions, progress: bool
    ) -> tuple[MeanSketch, np.ndarray]:
        from .engine import connect, fit_map, landmark_sample, sketch
        from .io import as_row_chunked

        if is_in_memory(reference):
            reference = check_rows(reference, "reference")
        initial = self.feature_map or RFF(n_features=self.n_features, bandwidth=self.bandwidth, seed=seed)
        with connect(client) as active:
            rows = as_row_chunked(reference, storage_options=storage_options)
            fitted = fit_map(initial, [rows], client=active, progress=progress)
            summary = sketch(
                reference, fitted, moments=simulation == "gaussian", client=active,
                storage_options=storage_options, progress=progress,
            )  # fmt: skip
            sample = landmark_sample(
                [rows], int(self.n_reference_rows), int(np.random.SeedSequence([seed, 0xBA4C]).generate_state(1)[0]),
                client=active, progress=progress,
            ).rows  # fmt: skip
        return summary, sample

    def _start_run(self, window: int, width: int) -> None:
        self.window_features_ = np.zeros((window, width), dtype=np.float32)
        self.window_squared_norms_ = np.zeros(window)
        self.window_sum_ = np.zeros(width)
        self.window_squared_norm_sum_ = 0.0
        self.run_length_ = 0
        self.drift_at_ = None

    def _check_fitted(self) -> None:
        if not hasattr(self, "thresholds_"):
            raise NotFittedMapError(
                "This DriftMonitor is not fitted yet. Call fit(reference) with the reference data or "
                "sketch first, or load a saved monitor with DriftMonitor.load(path)."
            )

    def reset(self) -> DriftMonitor:
        """Start a new run: empty the window and clear the alarm (reference and thresholds stay).

        Returns
        -------
        self : DriftMonitor
        """
        self._check_fitted()
        self._start_run(self.window_features_.shape[0], self.window_features_.shape[1])
        return self

    def update(self, rows: Any) -> DriftUpdate:
        """Slide the window over ``rows`` (a batch of any size) and return every row's statistic.

        Vectorised over the batch: the window sums after each row are the sums
        before the batch plus the cumulative sum of the entering rows' features
        minus the leaving rows' (from the ring buffer, or from the batch itself
        when it is longer than the window), summed in the order of row-by-row
        updates: O(D) per row, and the same result however the stream is split
        into batches.

        Parameters
        ----------
        rows : array-like of shape (n_rows, n_features_in_)
            The next rows of the stream, in order; finite.

        Returns
        -------
        DriftUpdate

        Raises
        ------
        InputError
            If ``rows`` is not 2-D, has another width or holds NaN or inf.
        """
        self._check_fitted()
        rows = check_rows(rows, "rows", allow_empty=True)
        check_width(rows, self.n_features_in_, "DriftMonitor", name="rows")
        # Tiles of rows keep the cumulative sums in cache; the ring buffer carries the window between them.
        parts = [self._slide(rows[start : start + _TILE_ROWS]) for start in range(0, rows.shape[0], _TILE_ROWS)]
        statistic = np.concatenate([part[0] for part in parts]) if parts else np.zeros(0)
        threshold = np.concatenate([part[1] for part in parts]) if parts else np.zeros(0)
        return DriftUpdate(
            statistic=statistic,
            threshold=threshold,
            drift=self.drift_at_ is not None,
            drift_at=self.drift_at_,
            n_rows_seen=self.n_rows_seen_,
            run_length=self.run_length_,
        )

    def _slide(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Slide the window over checked ``rows``; the statistic and threshold of each."""
        window, width = self.window_features_.shape
        n_new = rows.shape[0]
        features = self.feature_map_._embed(rows)  # rows checked above: the trusted path of transform
        squared_norms = np.einsum("ij,ij->i", features, features, dtype=np.float64)
        start = self.run_length_  # rows in this run before the batch; row k of the batch is run row start + k
        steps = start + np.arange(n_new)
        leaving_run_rows = steps - window  # run row that leaves when batch row k enters (if >= 0)
        leaving = np.zeros((n_new, width), dtype=np.float32)
        leaving_norms = np.zeros(n_new)
        from_ring = (leaving_run_rows >= 0) & (leaving_run_rows < start)
        ring_positions = leaving_run_rows[from_ring] % window
        leaving[from_ring] = self.window_features_[ring_positions]
        leaving_norms[from_ring] = self.window_squared_norms_[ring_positions]
        from_batch = leaving_run_rows >= start
        leaving[from_batch] = features[leaving_run_rows[from_batch] - start]
        leaving_norms[from_batch] = squared_norms[leaving_run_rows[from_batch] - start]
        # S_k = (((S_0 + d_1) + d_2) + ... + d_k) with d the entering minus the leaving row's features:
        # a sequential cumulative sum in the order of row-by-row updates, so any split of the batch agrees.
        sums = np.subtract(features, leaving, dtype=np.float64)
        sums[0] += self.window_sum_
        np.cumsum(sums, axis=0, out=sums)
        norm_sums = squared_norms - leaving_norms
        norm_sums[0] += self.window_squared_norm_sum_
        np.cumsum(norm_sums, out=norm_sums)
        sizes = np.minimum(steps + 1, window).astype(np.float64)
        statistic = self._statistic(sums, norm_sums, sizes)
        threshold = self.thresholds_[np.minimum(steps, window)]
        if self.drift_at_ is None:
            crossed = np.flatnonzero(statistic > threshold)
            if crossed.size:
                self.drift_at_ = int(self.n_rows_seen_ + crossed[0])
        if n_new:  # the last rows enter the ring buffer, the sums move to the end of the tile
            kept = np.arange(max(0, n_new - window), n_new)
            self.window_features_[(start + kept) % window] = features[kept]
            self.window_squared_norms_[(start + kept) % window] = squared_norms[kept]
            self.window_sum_ = sums[-1].copy()
            self.window_squared_norm_sum_ = float(norm_sums[-1])
        self.run_length_ = start + n_new
        self.n_rows_seen_ += n_new
        return statistic, threshold

    def _statistic(self, sums: np.ndarray, norm_sums: np.ndarray, sizes: np.ndarray) -> np.ndarray:
        n = float(self.reference_count_)
        reference_sum = self.reference_sum_
        reference_term = (reference_sum @ reference_sum - self.reference_squared_norm_sum_) / (n * (n - 1.0))
        with np.errstate(divide="ignore", invalid="ignore"):
            within = (np.einsum("ij,ij->i", sums, sums) - norm_sums) / (sizes * (sizes - 1.0))
            statistic = reference_term + within - 2.0 * (sums @ reference_sum) / (n * sizes)
        statistic[sizes < 2] = np.nan
        return statistic

    # ---- file format -------------------------------------------------------------------------

    def _state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        arrays = {
            "reference_sum": self.reference_sum_,
            "thresholds": self.thresholds_,
            "window_features": self.window_features_,
            "window_squared_norms": self.window_squared_norms_,
            "window_sum": self.window_sum_,
        }
        arrays.update({f"map/{name}": value for name, value in self.feature_map_.state_arrays().items()})
        params = self.get_params()
        params["feature_map"] = None  # the fitted map is stored as the map spec
        params["seed"] = normalize_seed(self.seed) if isinstance(self.seed, numbers.Integral) else None
        attrs = {
            "format": MONITOR_FORMAT_NAME,
            "version": MONITOR_FORMAT_VERSION,
            "map": self.feature_map_.spec,
            "fingerprint": self.feature_map_.fingerprint,
            "params": params,
            "simulation": self.simulation_,
            "n_streams": self.n_streams_,
            "n_features_in": self.n_features_in_,
            "reference_count": self.reference_count_,
            "reference_squared_norm_sum": self.reference_squared_norm_sum_,
            "window_squared_norm_sum": self.window_squared_norm_sum_,
            "run_length": self.run_length_,
            "n_rows_seen": self.n_rows_seen_,
            "drift_at": self.drift_at_,
            "checksums": {name: _check_checksum_array(np.asarray(value)) for name, value in arrays.items()},
        }
        return attrs, arrays

    def save(self, path: PathOrURL, overwrite: bool = False) -> None:
        """Write the monitor (reference sums, thresholds, window state) to a local zarr directory.

        Written under a temporary name and published in one step
        (:func:`streamrff._publish.publish`): a reader never sees a half-written
        monitor, and an existing one is replaced only with ``overwrite``.

        Parameters
        ----------
        path : str or PathLike
            A local directory to create.
        overwrite : bool, default=False

        Raises
        ------
        FileExistsError
            If ``path`` exists and ``overwrite`` is False.
        InputError
            If ``path`` is a URL (monitors are saved locally).
        """
        import zarr
        from zarr.codecs import BytesCodec

        self._check_fitted()
        target = Path(_local_target(path))
        if target.exists() and not overwrite:
            raise FileExistsError(f"{target} already exists. Choose another path or pass overwrite=True.")
        attrs, arrays = self._state()
        attrs = json.loads(json.dumps(attrs))
        attrs["attributes_digest"] = _canonical_digest(attrs)
        staging = staging_path(target)
        try:
            root = zarr.open_group(store=zarr.storage.LocalStore(staging), mode="w", zarr_format=3)
            for name, value in arrays.items():
                little = np.ascontiguousarray(value)
                little = little.astype(little.dtype.newbyteorder("<"), copy=False)
                node = root.create_array(
                    name, shape=little.shape, dtype=little.dtype, chunks=little.shape if little.size else "auto",
                    serializer=BytesCodec(endian="little"), fill_value=0,
                )  # fmt: skip
                if little.size:
                    node[...] = little
            root.attrs.update(attrs)  # last: marks the group complete
            publish(staging, target, overwrite)
        finally:
            remove_path(staging)

    @classmethod
    def load(cls, path: PathOrURL) -> DriftMonitor:
        """Read a monitor written by :meth:`save`; it continues exactly where the saved one stopped.

        Parameters
        ----------
        path : str or PathLike

        Returns
        -------
        DriftMonitor

        Raises
        ------
        SketchFormatError
            If ``path`` holds no monitor, another format or version, or fails a checksum or shape check.
        """
        return load_monitor(path)


def _local_target(path: Any) -> str:
    if not isinstance(path, (str, os.PathLike)):
        raise InputError(f"path must be a local path (str or PathLike). Got {type(path).__name__}.")
    target = os.fspath(path)
    if "://" in target and not target.startswith("file://"):
        raise InputError(f"Expected a local path for a drift monitor. Got the URL {target!r}; save it locally.")
    return target[len("file://") :] if target.startswith("file://") else target


def load_monitor(path: PathOrURL) -> DriftMonitor:
    """Read a :class:`DriftMonitor` saved with :meth:`DriftMonitor.save`, validating everything.

    Checks the format name and version, the attributes' digest, every array's
    checksum, shape and dtype, and rebuilds the map from its spec (its
    fingerprint must match).

    Parameters
    ----------
    path : str or PathLike
        The saved monitor's directory.

    Returns
    -------
    DriftMonitor

    Raises
    ------
    SketchFormatError
        If the directory is not a valid monitor of this format version.

    Examples
    --------
    >>> import os, tempfile, numpy as np, streamrff as srf
    >>> rng = np.random.default_rng(1)
    >>> monitor = srf.DriftMonitor(window=20, ert=100, n_features=64, n_streams=500).fit(rng.normal(size=(500, 2)))
    >>> _ = monitor.update(rng.normal(size=(30, 2)))
    >>> path = os.path.join(tempfile.mkdtemp(), "monitor")
    >>> monitor.save(path)
    >>> loaded = srf.load_monitor(path)
    >>> rows = rng.normal(size=(10, 2))
    >>> bool(np.array_equal(loaded.update(rows).statistic, monitor.update(rows).statistic))
    True
    """
    import zarr

    target = _local_target(path)
    if not Path(target).is_dir():
        raise SketchFormatError(f"No drift monitor at {target}: expected a directory written by DriftMonitor.save.")
    try:
        root = zarr.open_group(store=zarr.storage.LocalStore(target, read_only=True), mode="r", zarr_format=3)
        attrs = dict(root.attrs)
    except Exception as error:  # zarr raises many types for a damaged group
        raise SketchFormatError(f"{target} is not a readable zarr group: {type(error).__name__}: {error}") from error
    if attrs.get("format") != MONITOR_FORMAT_NAME or attrs.get("version") != MONITOR_FORMAT_VERSION:
        raise SketchFormatError(
            f"Expected format {MONITOR_FORMAT_NAME!r} version {MONITOR_FORMAT_VERSION} at {target}. Got format "
            f"{attrs.get('format')!r} version {attrs.get('version')!r}; a sketch loads with srf.load instead."
        )
    digest = attrs.pop("attributes_digest", None)
    try:
        matches = digest == _canonical_digest(attrs)
    except (TypeError, ValueError):
        matches = False
    if not matches:
        raise SketchFormatError(f"{target}: the group attributes do not match their digest (tampered or incomplete).")
    arrays: dict[str, np.ndarray] = {}
    checksums = attrs["checksums"]
    for name, expected in checksums.items():
        try:
            value = np.asarray(root[name][...])
        except Exception as error:
            raise SketchFormatError(f"{target}: array {name!r} is missing or unreadable ({error}).") from error
        if _check_checksum_array(value) != expected:
            raise SketchFormatError(f"{target}: array {name!r} does not match its checksum (corrupt).")
        arrays[name] = value.astype(value.dtype.newbyteorder("="), copy=False)
    try:
        feature_map = map_from_spec(
            attrs["map"], {name[4:]: value for name, value in arrays.items() if name.startswith("map/")}
        )
        if feature_map.fingerprint != attrs["fingerprint"]:
            raise SketchFormatError(f"{target}: the map rebuilt from its spec does not match the stored fingerprint.")
        monitor = DriftMonitor(**attrs["params"])
        window, width = int(attrs["params"]["window"]), feature_map.n_features_out_
        expected_shapes = {
            "reference_sum": ((width,), np.float64),
            "thresholds": ((window + 1,), np.float64),
            "window_features": ((window, width), np.float32),
            "window_squared_norms": ((window,), np.float64),
            "window_sum": ((width,), np.float64),
        }
        for name, (shape, dtype) in expected_shapes.items():
            if name not in arrays or arrays[name].shape != shape or arrays[name].dtype != dtype:
                raise SketchFormatError(
                    f"{target}: array {name!r} must have shape {shape} and dtype {np.dtype(dtype)}."
                )
        monitor.feature_map_ = feature_map
        monitor.n_features_in_ = int(attrs["n_features_in"])
        monitor.simulation_ = str(attrs["simulation"])
        monitor.n_streams_ = int(attrs["n_streams"])
        monitor.reference_count_ = int(attrs["reference_count"])
        monitor.reference_sum_ = np.array(arrays["reference_sum"])
        monitor.reference_squared_norm_sum_ = float(attrs["reference_squared_norm_sum"])
        monitor.thresholds_ = np.array(arrays["thresholds"])
        monitor.window_features_ = np.array(arrays["window_features"])
        monitor.window_squared_norms_ = np.array(arrays["window_squared_norms"])
        monitor.window_sum_ = np.array(arrays["window_sum"])
        monitor.window_squared_norm_sum_ = float(attrs["window_squared_norm_sum"])
        monitor.run_length_ = int(attrs["run_length"])
        monitor.n_rows_seen_ = int(attrs["n_rows_seen"])
        monitor.drift_at_ = None if attrs["drift_at"] is None else int(attrs["drift_at"])
    except SketchFormatError:
        raise
    except (KeyError, TypeError, ValueError) as error:
        raise SketchFormatError(f"{target}: not a valid drift monitor ({type(error).__name__}: {error}).") from error
    if monitor.reference_count_ < 2 or not np.isfinite(monitor.thresholds_[1:]).all():
        raise SketchFormatError(f"{target}: expected a reference of >= 2 rows and finite thresholds.")
    return monitor
