"""The drift monitor: a reference sketch against the sliding window of a stream's last rows."""

from __future__ import annotations

import dataclasses
import numbers
import operator
import os
from dataclasses import dataclass
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator

from .._base.blas import one_blas_thread
from .._base.validation import (
    check_bandwidth,
    check_finite_rows,
    check_positive_int,
    check_rows,
    check_width,
    is_in_memory,
    normalize_seed,
    store_params,
    validate_estimator_input,
)
from .._kernels.sliding import NOT_FINITE, reference_term, slide_features, slide_rows
from ..engine import JobOptions, compute, current_job_options, fit_map_and_sample, open_job_source, run_sketch
from ..engine.connection import connect
from ..errors import InputError, NotFittedMapError, SketchFormatError
from ..formats.monitor import read_monitor_group, write_monitor_group
from ..maps import RFF, FeatureMap, map_from_spec
from ..sketches.mean import MeanSketch
from ..typing import PathOrURL
from .calibration import calibrate_thresholds, default_stream_count, gaussian_bank
from .edetector import bet_monitor, check_method, detector_arrays, e_thresholds, restore_detector, start_detector
from .ranking import kernel_mean_ratio

__all__ = ["DriftMonitor", "DriftUpdate"]

_SIMULATIONS = ("auto", "resample", "gaussian")
#: Rows per tile of update's features (a tile's features stay in cache).
_TILE_ROWS = 1024
#: Row dtypes that slide_rows takes as they are (C-contiguous, writeable): one compiled type each.
_KERNEL_ROW_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
#: Window rows an alarm names (``DriftUpdate.top_rows``).
ALARM_TOP_ROWS = 10
EMPTY_ROWS = np.zeros(0, dtype=np.int64)
EMPTY_ROWS.setflags(write=False)


def _explain_window(monitor: DriftMonitor, k: int) -> tuple[Any, np.ndarray, np.ndarray]:
    """The witness of the monitor's window against its reference, and the window's k rows with the largest
    kernel-mean ratio (:func:`kernel_mean_ratio`, each row left out of the window's mean).

    The window is the ring buffer of the last ``min(window, run_length_)`` rows' features (those the
    statistic read); run row ``r`` sits in slot ``r % window`` and is stream row
    ``n_rows_seen_ - run_length_ + r``.
    """
    from ..twosample.witness import TopRows, Witness  # the witness reaches the engine; drift stays light

    window = monitor.window_features_.shape[0]
    run_length = monitor.run_length_
    filled = min(window, run_length)
    run_rows = np.arange(run_length - filled, run_length, dtype=np.int64)
    window_mean = monitor.window_sum_ / filled
    reference_mean = monitor.reference_sum_ / monitor.reference_count_
    diagonal = monitor.reference_squared_norm_sum_ / monitor.reference_count_
    witness = Witness(monitor.feature_map_, window_mean, reference_mean, diagonal if diagonal > 0 else 1.0)
    features = monitor.window_features_[run_rows % window].astype(np.float64)
    values = kernel_mean_ratio(features, window_mean, reference_mean, filled if filled >= 2 else None)
    stream_rows = monitor.n_rows_seen_ - run_length + run_rows
    top = TopRows.of_values(values, 0, min(k, filled), "largest", stream_rows)
    columns = _column_statistics(monitor, run_rows % window)
    return witness, top.rows, top.values, *columns


def _column_statistics(monitor: DriftMonitor, slots: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Per column, the standardised mean difference of the window's raw rows (ring buffer ``slots``) against
    the reference, ``z_j = (mean_window_j - mean_reference_j) / sqrt(var_reference_j / n_window)``, and the
    columns by ``|z|`` descending; ``(None, None)`` for a monitor without raw reference columns (a sketch).

    A reference column of variance 0 gives ``z = 0`` where the window's mean equals it, ``+-inf`` elsewhere.
    """
    window_rows = getattr(monitor, "window_rows_", None)
    if window_rows is None or getattr(monitor, "reference_column_mean_", None) is None:
        return None, None
    difference = window_rows[slots].mean(axis=0, dtype=np.float64) - monitor.reference_column_mean_
    with np.errstate(divide="ignore", invalid="ignore"):
        statistic = difference / np.sqrt(monitor.reference_column_variance_ / slots.size)
    statistic[difference == 0] = 0.0
    return statistic, np.argsort(-np.abs(statistic), kind="stable").astype(np.int64)


def _column_moments(source: Any, job: JobOptions) -> tuple[np.ndarray, np.ndarray]:
    """Per column of an opened reference source, the mean and the variance (``ddof=1``) of its raw rows, in float64.

    An on-disk reference is read once more for them (a dask reduction; no features). Folding them
    into the sketch pass would need a partial kind beside :class:`MeanSketch` that carries column
    moments through the engine's job (its checkpointed partials are sketch files, its NaN check
    reads the feature sums, its merge tree is typed by the sketch kind), for a pass that costs a
    read of the rows and a few flops per value.
    """
    if source.rows is not None:
        rows = np.asarray(source.rows)
        return rows.mean(axis=0, dtype=np.float64), rows.var(axis=0, dtype=np.float64, ddof=1)
    array = source.array
    mean, variance = compute((array.mean(axis=0, dtype=np.float64), array.var(axis=0, dtype=np.float64, ddof=1)),
                             job.client, job.progress, job.retries)  # fmt: skip
    return np.asarray(mean, dtype=np.float64), np.asarray(variance, dtype=np.float64)


def _keep_rows(buffer: np.ndarray, rows: np.ndarray, run_length: int) -> None:
    """Copy a batch's raw rows into the window's ring buffer: run row ``run_length + i`` to slot ``% window``
    (the last ``window`` rows of the batch only; O(d) per row)."""
    window, n_rows = buffer.shape[0], rows.shape[0]
    if n_rows == 1:
        buffer[run_length % window] = rows[0]
    elif n_rows:
        kept = min(n_rows, window)
        buffer[(run_length + np.arange(n_rows - kept, n_rows)) % window] = rows[n_rows - kept :]


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
        Rows passed to ``update`` since ``fit``, this batch included (skipped rows not counted).
    run_length : int
        Rows since the start of the current run (``fit`` or ``reset``).
    skipped : ndarray of int64
        With ``on_invalid="skip"``: the indices, in this batch, of the rows
        skipped for NaN or inf (``statistic`` and ``threshold`` then hold the
        kept rows only); empty otherwise.
    witness : Witness or None
        On the update that raises the alarm: the witness of the window against
        the reference (:class:`streamrff.Witness`; positive where the window is
        over-represented), from the window at the end of this batch. None otherwise.
    top_rows : ndarray of int64 or None
        With ``witness``: the window's rows with the largest kernel-mean ratio
        (:func:`~streamrff.drift.kernel_mean_ratio`: the window's kernel mean at the
        row, the row left out, over the reference's), largest first, as global
        indices (counted as ``drift_at``): the rows most likely after the change.
    top_values : ndarray of float64 or None
        The kernel-mean ratios at ``top_rows`` (1 where the window looks like the reference).
    column_statistics : ndarray of shape (n_features_in,), float64, or None
        With ``witness``, for a monitor fitted on reference data: per column j,
        the standardised mean difference of the window's raw rows against the
        reference, ``z_j = (mean_window_j - mean_reference_j) / sqrt(var_reference_j / n_window)``
        (``var_reference_j`` with ``ddof=1``, ``n_window`` the rows in the window;
        ``+-inf`` for a constant reference column the window's mean leaves). None
        otherwise, and for a monitor fitted on a sketch (which holds no raw columns).
    columns : ndarray of int64 or None
        With ``column_statistics``: the column indices by ``|z|`` descending (the columns that moved most first).

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
    skipped: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    witness: Any = None
    top_rows: np.ndarray | None = None
    top_values: np.ndarray | None = None
    column_statistics: np.ndarray | None = None
    columns: np.ndarray | None = None


class DriftMonitor(BaseEstimator):
    """Sliding-window kernel drift detector against a sketched reference, calibrated to an expected run time.

    The statistic after each row is the unbiased MMD^2 (Gretton et al. 2012)
    in feature space between the last ``window`` rows (fewer after a start or
    a reset) and the reference, from sums only::

        MMD^2_u = (||S_r||^2 - Q_r) / (n (n-1)) + (||S_w||^2 - Q_w) / (m (m-1)) - 2 S_r.S_w / (n m)

    with S the feature sums, Q the sums of squared feature norms, n the
    reference rows and m the window's rows. The window's S_w and Q_w move by
    one row in and one row out, so a row costs O(D) and a batch is one
    compiled call; the features of the last ``window`` rows are kept (a
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
    method : {"ert", "e-detector"}, default="ert"
        "ert": the window's MMD^2 against thresholds simulated so that, for i.i.d. rows
        like the reference's, the run length to a false alarm is geometric with mean
        ``ert`` (a calibration). "e-detector": betting (:class:`streamrff.drift.EDetector`;
        Shin, Ramdas & Rinaldo, arXiv 2203.03532), alarm at e-value ``1/alpha``: the
        average run length to a false alarm is >= ``1/alpha`` by construction, for any
        dependence that keeps the rows' conditional feature mean the reference's, if the
        reference mean is exact (n rows err by ``O(1/sqrt(n))``: see the drift guide).
        ``statistic`` is then the log e-value, ``threshold`` ``log(1/alpha)``, and
        ``window`` the rows of the witness (and of an alarm's explanation). Needs a sincos RFF map.
    alpha : float or None, default=None
        With ``method="e-detector"``: the alarm level in (0, 1); None: ``1/ert``.
    procedure : {"sr", "cusum"} or None, default=None
        With ``method="e-detector"``: "sr" (None; e-Shiryaev-Roberts, run length about
        ``1/alpha``) or "cusum" (e-CUSUM: rarer false alarms, longer delays).

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
    reference_column_mean_ : ndarray of shape (n_features_in,), float64, or None
        Per column, the mean of the raw reference rows (None for a reference given as a sketch).
    reference_column_variance_ : ndarray of shape (n_features_in,), float64, or None
        Their variance (``ddof=1``).
    window_rows_ : ndarray of shape (window, n_features_in), float64, or None
        Ring buffer of the window's raw rows, beside ``window_features_`` (same slots); None with the reference
        columns. An alarm's ``DriftUpdate.column_statistics`` compares them with the reference columns.
    window_squared_norm_sum_ : float
        Their squared norms' sum.
    run_length_ : int
        Rows since the current run started.
    n_rows_seen_ : int
        Rows passed to ``update`` since ``fit``.
    drift_at_ : int or None
        Global index of the current run's first alarm.
    n_rows_skipped_ : int
        Rows skipped by ``update(..., on_invalid="skip")`` since ``fit``.
    detector_ : EDetector
        With ``method="e-detector"``: the current run's detector (its
        ``log_e_value``, witness sum and betting state).
    source_cursor_ : dict or None
        Where in its source a follower of the stream stopped (``streamrff watch``
        records the source's identity and the next row to read; see
        :mod:`streamrff.drift.follow`); saved and loaded with the monitor. None
        after ``fit``.

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
    >>> monitor = srf.DriftMonitor(window=50, ert=5000, n_features=128, seed=0, n_streams=20_000).fit(reference)
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

    With ``method="e-detector"`` nothing is calibrated; the statistic is the log e-value:

    >>> e_monitor = srf.DriftMonitor(window=50, n_features=128, method="e-detector", alpha=0.001).fit(reference)
    >>> update = e_monitor.update(shifted)
    >>> bool(update.drift), bool(update.threshold[0] == np.log(1000)), e_monitor.n_streams_
    (True, True, 0)
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
        method: str = "ert",
        alpha: float | None = None,
        procedure: str | None = None,
    ) -> None:
        store_params(self, locals())

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
        if self.method == "e-detector":
            return 0  # no calibration
        return default_stream_count(window, ert, width) if self.n_streams == "auto" else int(self.n_streams)

    def fit(
        self, reference: Any, y: Any = None, **options: Any
    ) -> DriftMonitor:
        """Sketch the reference (one pass through the engine) and calibrate the thresholds.

        Parameters
        ----------
        reference : array-like, dask Array, xarray DataArray, str/PathLike, or MeanSketch
            Anything :func:`streamrff.sketch` reads, or a MeanSketch (e.g.
            ``srf.load(path)``, possibly merged across sites; it needs second
            moments for the Gaussian calibration, its only option).
        y : ignored
        **options
            The job options of the reference pass (``client``, ``storage_options``,
            ``progress``, ...), as for :func:`streamrff.sketch`.

        Returns
        -------
        self : DriftMonitor

        Raises
        ------
        InputError
            On bad parameters or data, a sketch without moments, or a reference of fewer than 2 rows.
        """
        return self._fit_uncalibrated(reference, **options)._calibrate()

    def _fit_uncalibrated(self, reference: Any, **options: Any) -> DriftMonitor:
        """:meth:`fit` up to the calibration, which :meth:`_calibrate` runs from ``calibration_inputs_``
        (the simulation bank and its window, ERT, stream count and seed): a service can save the fit first."""
        window, ert = self._check_params()
        alpha = check_method(self)  # None for method="ert"
        seed = normalize_seed(self.seed)
        job = current_job_options(**options)
        if not isinstance(reference, MeanSketch):  # opened (metadata only) for its width: the raw rows' buffer
            if is_in_memory(reference):
                reference = validate_estimator_input(self, reference, reset=True)
            reference = open_job_source(reference, job)
        self._check_memory(reference, window, ert)  # before the reference pass: a window too large fails at once
        if isinstance(reference, MeanSketch):
            simulation = "gaussian" if self.simulation == "auto" else self.simulation
            simulation = "none" if alpha is not None else simulation
            if simulation == "resample":
                raise InputError(
                    "simulation='resample' needs reference rows, but a MeanSketch holds none. Pass the "
                    "reference data, or use simulation='gaussian' (the sketch needs second moments)."
                )
            summary, sample, columns = reference, None, (None, None)
        else:
            simulation = "none" if alpha is not None else "resample" if self.simulation == "auto" else self.simulation
            summary, sample, columns = self._sketch_reference(reference, simulation, seed, job)
        if simulation == "gaussian" and not summary.has_moments:
            raise InputError(
                "simulation='gaussian' needs the reference's second moment. Got a MeanSketch without "
                "moments; sketch the reference with moments=True (CLI: --moments)."
            )
        if summary.count < 2:
            raise InputError(f"Expected a reference of at least 2 rows. Got n_samples = {summary.count}; add rows.")
        feature_map = summary.feature_map
        width = feature_map.n_features_out_
        self.n_streams_ = self._streams(window, ert, width)
        if alpha is not None:  # the e-detector: no calibration
            self.thresholds_ = e_thresholds(window, alpha)
        elif simulation == "gaussian":
            bank = gaussian_bank(summary, int(self.n_reference_rows), seed)
        else:
            bank = feature_map.transform(sample).astype(np.float32, copy=False)
        if alpha is None:
            self.calibration_inputs_ = (bank, window, ert, self.n_streams_, seed)
        self.simulation_ = simulation
        self.feature_map_ = feature_map
        self.n_features_in_ = int(feature_map.n_features_in_)
        self.reference_count_ = int(summary.count)
        self.reference_sum_ = np.array(summary.feature_sum, dtype=np.float64)
        self.reference_squared_norm_sum_ = float(summary.squared_norm_sum)
        self.reference_column_mean_, self.reference_column_variance_ = columns
        self.n_rows_seen_ = 0
        self.n_rows_skipped_ = 0
        self.source_cursor_ = None
        self._start_run(window, width)
        return self

    def _calibrate(self, thresholds: np.ndarray | None = None) -> DriftMonitor:
        """Set ``thresholds_``: the given ones (computed before from the same ``calibration_inputs_``) or calibrated.

        An e-detector has no calibration (its threshold is ``log(1/alpha)``, set by the fit).
        """
        if "calibration_inputs_" not in self.__dict__:
            return self
        inputs = self.__dict__.pop("calibration_inputs_")
        self.thresholds_ = calibrate_thresholds(*inputs) if thresholds is None else thresholds
        return self

    def _check_memory(self, reference: Any, window: int, ert: float) -> None:
        """Refuse a window whose buffers cannot fit: features, and the raw rows of a reference given as data."""
        from .._base.memory import _map_width, check_monitor_fits, memory_available

        n_columns = 0
        if isinstance(reference, MeanSketch):
            width = _map_width(reference.feature_map)
        else:
            n_columns = int(reference.shape[1])  # an opened source: the window keeps its raw rows too
            width = _map_width(self.feature_map) if self.feature_map is not None else int(self.n_features)
        if width is not None:
            check_monitor_fits(window, width, self._streams(window, ert, width), memory_available(), n_columns)

    def _sketch_reference(
        self, source: Any, simulation: str, seed: int, job: JobOptions
    ) -> tuple[MeanSketch, np.ndarray, tuple[np.ndarray, np.ndarray]]:
        """The reference's sketch, calibration sample and column moments, from its opened ``source``."""
        initial = self.feature_map or RFF(n_features=self.n_features, bandwidth=self.bandwidth, seed=seed)
        # One sampling pass serves the map's fit (the median bandwidth) and the calibration bank.
        n_bank_rows = int(self.n_reference_rows) if simulation == "resample" else 0
        bank_seed = int(np.random.SeedSequence([seed, 0xBA4C]).generate_state(1)[0])  # when the map takes no sample
        with connect(job.client) as active:
            job = job.replace(client=active)
            fitted, sample = fit_map_and_sample(initial, [source], n_bank_rows, bank_seed, job)
            summary = run_sketch(source, "mean", fitted, job, moments=simulation == "gaussian")
            columns = _column_moments(source, job)
        return summary, sample, columns

    def _start_run(self, window: int, width: int) -> None:
        self.window_features_ = np.zeros((window, width), dtype=np.float32)
        self.window_squared_norms_ = np.zeros(window)
        self.window_sum_ = np.zeros(width)
        self.window_squared_norm_sum_ = 0.0
        has_columns = getattr(self, "reference_column_mean_", None) is not None
        self.window_rows_ = np.zeros((window, self.n_features_in_)) if has_columns else None
        self.run_length_ = 0
        self.drift_at_ = None
        if self.method == "e-detector":
            self.detector_ = start_detector(self)

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

    def update(self, rows: Any, on_invalid: str = "raise") -> DriftUpdate:
        """Slide the window over ``rows`` (a batch of any size) and return every row's statistic.

        One compiled call per batch (:mod:`streamrff._kernels.sliding`; per tile of
        1024 rows for maps other than a dense RFF): each row's features enter
        the window sums and those of the row that leaves (from the ring buffer)
        are subtracted, in row order, and the statistic is read off the sums
        and compared with the threshold in the same pass: O(D) per row, no
        Python loop per row, and the same sums bit for bit however the stream
        is split into batches.

        Parameters
        ----------
        rows : array-like of shape (n_rows, n_features_in)
            The next rows of the stream, in order.
        on_invalid : {"raise", "skip"}, default="raise"
            A row holding NaN or inf: "raise" refuses the batch (the monitor is
            unchanged; the message names the first such row, in the batch and in
            the stream since ``fit``); "skip" leaves such rows out (the others
            enter the window in order), lists them in ``DriftUpdate.skipped``
            and counts them in ``n_rows_skipped_``.

        Returns
        -------
        DriftUpdate

        Raises
        ------
        InputError
            If ``rows`` is not 2-D, has another width, or holds NaN or inf with ``on_invalid="raise"``.

        Examples
        --------
        >>> import numpy as np, streamrff as srf
        >>> rng = np.random.default_rng(0)
        >>> monitor = srf.DriftMonitor(window=10, ert=100, n_features=32, n_streams=500).fit(rng.normal(size=(300, 2)))
        >>> rows = rng.normal(size=(6, 2))
        >>> rows[2, 1] = np.nan
        >>> update = monitor.update(rows, on_invalid="skip")
        >>> update.skipped.tolist(), update.n_rows_seen, monitor.n_rows_skipped_
        ([2], 5, 1)
        """
        self._check_fitted()
        if on_invalid != "raise":
            return self._update_skipping(rows, on_invalid)
        if self.method == "e-detector":
            return self._update_e_detector(rows)
        fix = (
            "Row {first} of this batch is row {row:,} of the monitor's stream since fit. Drop or impute those "
            "rows, or pass on_invalid='skip' to skip them."
        )
        rff_args, reference_args = self._kernel_constants()
        kernel_ready = (  # then the compiled call checks the values and casts them itself (no numpy call)
            rff_args is not None and type(rows) is np.ndarray and rows.dtype in _KERNEL_ROW_DTYPES
            and rows.ndim == 2 and rows.shape[1] == self.n_features_in_ and rows.flags.c_contiguous
            and rows.flags.writeable
        )  # fmt: skip
        if not kernel_ready:
            rows = check_rows(rows, "rows", allow_empty=True, fix=fix, row_offset=self.n_rows_seen_)
            check_width(rows, self.n_features_in_, "DriftMonitor", name="rows")
        raw_rows = rows  # the window's raw rows come from here, before any cast
        if not kernel_ready and rff_args is not None:
            rows = rows.astype(np.float32, order="C")  # one compiled type (C, writeable)
        run_length, drift_at = self.run_length_, self.drift_at_
        window_args = (self.window_features_, self.window_squared_norms_, self.window_sum_)
        with one_blas_thread():  # the features must not depend on the BLAS thread count
            if rff_args is not None:  # one compiled call embeds and slides the whole batch
                statistic, threshold, norm_sum, first = slide_rows(
                    rows, *rff_args, *window_args, *reference_args, run_length, self.window_squared_norm_sum_,
                    drift_at is None,
                )  # fmt: skip
            else:  # another map embeds a tile, the compiled call slides over its features
                parts, norm_sum, first = [], self.window_squared_norm_sum_, -1
                for offset, features in self.feature_map_.embed_tiles(rows, tile_rows=_TILE_ROWS):
                    *part, norm_sum, crossed = slide_features(
                        features, *window_args, *reference_args, run_length + offset, norm_sum,
                        first < 0 and drift_at is None,
                    )  # fmt: skip
                    parts.append(part)
                    first = offset + crossed if first < 0 and crossed >= 0 else first
                statistic = np.concatenate([part[0] for part in parts]) if parts else np.zeros(0)
                threshold = np.concatenate([part[1] for part in parts]) if parts else np.zeros(0)
        if first == NOT_FINITE:  # nothing changed; the check words the error
            check_finite_rows(rows, "rows", fix=fix, row_offset=self.n_rows_seen_)
        n_rows = rows.shape[0]
        if self.window_rows_ is not None:
            _keep_rows(self.window_rows_, raw_rows, run_length)
        self.window_squared_norm_sum_ = norm_sum  # a float from the compiled call
        n_rows_seen = self.n_rows_seen_ + n_rows
        if first >= 0:
            drift_at = self.drift_at_ = self.n_rows_seen_ + int(first)
        self.run_length_ = run_length = run_length + n_rows
        self.n_rows_seen_ = n_rows_seen
        if first >= 0:  # the alarm's update explains itself
            explained = _explain_window(self, ALARM_TOP_ROWS)
            return DriftUpdate(statistic, threshold, True, drift_at, n_rows_seen, run_length, EMPTY_ROWS, *explained)
        # positional: a keyword call costs a third more, paid per row by one-row updates
        return DriftUpdate(statistic, threshold, drift_at is not None, drift_at, n_rows_seen, run_length)

    def _update_e_detector(self, rows: Any) -> DriftUpdate:
        """:meth:`update` with ``method="e-detector"``: ``statistic`` is the log e-value after each row, ``threshold``
        ``log(1/alpha)``; the ring buffers keep the last rows (the witness's, and the alarm's explanation's)."""
        rows, statistic, first = bet_monitor(self, rows)
        if self.window_rows_ is not None:
            _keep_rows(self.window_rows_, rows, self.run_length_)
        raised = first >= 0 and self.drift_at_ is None
        if raised:
            self.drift_at_ = self.n_rows_seen_ + first
        self.run_length_ = run_length = self.run_length_ + rows.shape[0]
        self.n_rows_seen_ += rows.shape[0]
        threshold = np.full(statistic.shape[0], self.thresholds_[-1])
        if not raised:
            return DriftUpdate(statistic, threshold, self.drift_at_ is not None, self.drift_at_, self.n_rows_seen_,
                               run_length)  # fmt: skip
        window = self.window_features_.shape[0]  # the alarm explains itself: the window's sum is formed for it
        slots = np.arange(run_length - min(window, run_length), run_length) % window
        self.window_sum_ = self.window_features_[slots].sum(axis=0, dtype=np.float64)
        explained = _explain_window(self, ALARM_TOP_ROWS)
        return DriftUpdate(statistic, threshold, True, self.drift_at_, self.n_rows_seen_, run_length, EMPTY_ROWS,
                           *explained)  # fmt: skip

    def _update_skipping(self, rows: Any, on_invalid: str) -> DriftUpdate:
        """:meth:`update` with ``on_invalid="skip"``: the finite rows, in order, and the indices of the others."""
        if on_invalid != "skip":
            raise InputError(f"on_invalid must be 'raise' or 'skip'. Got {on_invalid!r}.")
        array = np.asarray(rows)
        if array.ndim != 2 or array.dtype.kind not in "fc":  # integers are finite; the update words other errors
            return self.update(rows)
        finite = np.isfinite(array).all(axis=1)
        skipped = np.flatnonzero(~finite)
        update = self.update(array[finite] if skipped.size else array)
        self.n_rows_skipped_ = getattr(self, "n_rows_skipped_", 0) + int(skipped.size)
        return dataclasses.replace(update, skipped=skipped.astype(np.int64))

    def _kernel_constants(self) -> tuple[tuple[Any, ...] | None, tuple[Any, ...]]:
        """The constant arguments of :func:`slide_rows`: ``(frequencies, offsets, scale, tile_rows)`` of a dense
        RFF map (None for any other map) and ``(reference_sum, reference_term, n_reference, thresholds)``.

        Computed once (the reference's term of the statistic, :func:`reference_term`, is a pass over D) and
        held while the map, the reference attributes and the thresholds are the same objects (fitted
        attributes are replaced, never changed in place), so that a one-row update does not pay for them.
        """
        sources = (self.feature_map_, self.reference_sum_, self.reference_squared_norm_sum_, self.reference_count_,
                   self.thresholds_)  # fmt: skip
        cached = getattr(self, "_kernel_cache", None)
        feature_map, reference_sum, norm_sum, count, thresholds = sources
        if cached is None or not all(map(operator.is_, cached[0], sources)):
            dense_rff = type(feature_map) is RFF and not feature_map.structured and feature_map._float32_phases()
            rff_args = (*feature_map._float32_kernel_args(), _TILE_ROWS) if dense_rff else None
            term = float(reference_term(reference_sum, norm_sum, float(count)))
            cached = (sources, rff_args, (reference_sum, term, float(count), thresholds))
            self._kernel_cache = cached
        return cached[1], cached[2]

    def save(self, path: PathOrURL, overwrite: bool = False, signing_key: bytes | None = None) -> None:
        """Write the monitor (reference sums, thresholds, window state, source cursor) to a local zarr directory.

        Written under a temporary name and published in one step
        (:func:`streamrff._files.publish.publish`): a reader never sees a half-written
        monitor, and an existing one is replaced only with ``overwrite``.

        Parameters
        ----------
        path : str or PathLike
            A local directory to create.
        overwrite : bool, default=False
        signing_key : bytes, optional
            Sign the state (HMAC-SHA256, the rule of sketch files; CLI ``watch --sign-key``):
            ``load_monitor(path, verify_key=key)`` then proves a holder of the key wrote it.

        Raises
        ------
        FileExistsError
            If ``path`` exists and ``overwrite`` is False.
        InputError
            If ``path`` is a URL (monitors are saved locally).
        """
        self._check_fitted()
        write_monitor_group(path, *self._state(), overwrite=overwrite, signing_key=signing_key)

    def _state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """The group attributes and arrays that describe this monitor (see :mod:`streamrff.formats.monitor`)."""
        arrays = {
            "reference_sum": self.reference_sum_,
            "thresholds": self.thresholds_,
            "window_features": self.window_features_,
            "window_squared_norms": self.window_squared_norms_,
            "window_sum": self.window_sum_,
        }
        if getattr(self, "window_rows_", None) is not None:  # a monitor fitted on data: its raw columns
            arrays["reference_column_mean"] = self.reference_column_mean_
            arrays["reference_column_variance"] = self.reference_column_variance_
            arrays["window_rows"] = self.window_rows_
        arrays.update(detector_arrays(self))  # method="e-detector": the run's betting state
        arrays.update({f"map/{name}": value for name, value in self.feature_map_.state_arrays().items()})
        params = self.get_params(deep=False)
        params["feature_map"] = None  # the fitted map is stored as the map spec
        if self.method == "ert":  # an ERT monitor's file stays as earlier versions wrote and read it
            params = {name: value for name, value in params.items() if name not in ("method", "alpha", "procedure")}
        params["seed"] = normalize_seed(self.seed) if isinstance(self.seed, numbers.Integral) else None
        attrs = {
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
            "n_rows_skipped": int(getattr(self, "n_rows_skipped_", 0)),
            "cursor": getattr(self, "source_cursor_", None),
        }
        return attrs, arrays

    @classmethod
    def load(cls, path: PathOrURL, verify_key: bytes | None = None) -> DriftMonitor:
        """Read a monitor written by :meth:`save`; it continues exactly where the saved one stopped.

        :func:`streamrff.load_monitor` is the same, as a function: see it for the checks and an example.
        """
        target = os.fspath(path)
        attrs, arrays = read_monitor_group(target, verify_key=verify_key)
        return cls._from_state(attrs, arrays, target)

    @classmethod
    def _from_state(cls, attrs: dict[str, Any], arrays: dict[str, np.ndarray], target: str) -> DriftMonitor:
        """The monitor that :meth:`_state` described, checked (``target`` names it in errors)."""
        try:
            feature_map = map_from_spec(
                attrs["map"], {name[4:]: value for name, value in arrays.items() if name.startswith("map/")}
            )
            if feature_map.fingerprint != attrs["fingerprint"]:
                raise SketchFormatError(f"{target}: the map rebuilt from its spec does not match the fingerprint.")
            monitor = cls(**attrs["params"])
            window, width = int(attrs["params"]["window"]), feature_map.n_features_out_
            expected_shapes = {
                "reference_sum": ((width,), np.float64),
                "thresholds": ((window + 1,), np.float64),
                "window_features": ((window, width), np.float32),
                "window_squared_norms": ((window,), np.float64),
                "window_sum": ((width,), np.float64),
            }
            n_columns = int(attrs["n_features_in"])
            if "window_rows" in arrays:  # optional (version 2, a monitor fitted on data)
                expected_shapes.update({
                    "reference_column_mean": ((n_columns,), np.float64),
                    "reference_column_variance": ((n_columns,), np.float64),
                    "window_rows": ((window, n_columns), np.float64),
                })  # fmt: skip
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
            has_columns = "window_rows" in arrays
            monitor.reference_column_mean_ = np.array(arrays["reference_column_mean"]) if has_columns else None
            monitor.reference_column_variance_ = np.array(arrays["reference_column_variance"]) if has_columns else None
            monitor.window_rows_ = np.array(arrays["window_rows"]) if has_columns else None
            monitor.run_length_ = int(attrs["run_length"])
            monitor.n_rows_seen_ = int(attrs["n_rows_seen"])
            monitor.drift_at_ = None if attrs["drift_at"] is None else int(attrs["drift_at"])
            monitor.n_rows_skipped_ = int(attrs.get("n_rows_skipped", 0))  # version 1: none
            cursor = attrs.get("cursor")
            if cursor is not None and not isinstance(cursor, dict):
                raise SketchFormatError(f"{target}: the attribute 'cursor' must be null or a mapping.")
            monitor.source_cursor_ = cursor
            restore_detector(monitor, arrays, target)
        except SketchFormatError:
            raise
        except (KeyError, TypeError, ValueError) as error:
            message = f"{target}: not a valid drift monitor ({type(error).__name__}: {error})."
            raise SketchFormatError(message) from error
        if monitor.reference_count_ < 2 or not np.isfinite(monitor.thresholds_[1:]).all():
            raise SketchFormatError(f"{target}: expected a reference of >= 2 rows and finite thresholds.")
        return monitor


def load_monitor(path: PathOrURL, verify_key: bytes | None = None) -> DriftMonitor:
    """Read a :class:`DriftMonitor` saved with :meth:`DriftMonitor.save`, validating everything.

    Checks the format name and version, the attributes' digest, every array's
    checksum, shape and dtype, and rebuilds the map from its spec (its
    fingerprint must match).

    Parameters
    ----------
    path : str or PathLike
        The saved monitor's directory.
    verify_key : bytes, optional
        Accept only a state signed with this key (``save(..., signing_key=key)``).

    Returns
    -------
    DriftMonitor

    Raises
    ------
    SketchFormatError
        If the directory is not a valid monitor of this format version.
    SketchSignatureError
        If ``verify_key`` is given and the state is unsigned, signed with another key or edited.

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
    return DriftMonitor.load(path, verify_key=verify_key)
