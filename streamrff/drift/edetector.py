"""E-detector drift alarms: e-CUSUM or e-Shiryaev-Roberts, betting each new row against the reference's kernel mean.

Shin, Ramdas & Rinaldo (arXiv 2203.03532): under no change the e-CUSUM
``M_t = max(M_{t-1}, 1) (1 + lambda_t f_t)`` and the e-Shiryaev-Roberts
``R_t = (R_{t-1} + 1) (1 + lambda_t f_t)`` (the max, or the sum, of the
e-processes started at each row) with predictable bets have an
average run length to a false alarm of at least ``1/alpha`` when they alarm at
``1/alpha``, with no simulation (for SR, ``R_t - t`` is a martingale under no change,
so the bound is nearly attained; the e-CUSUM's run length is much longer). Row ``t`` pays
``f_t = <S_{t-1}, z(x_t) - mu> / (2 ||S_{t-1}||)`` in [-1, 1], where ``mu`` is
the reference's mean feature vector (from its sketch) and ``S_{t-1}`` the sum of
``z(x_s) - mu`` over the rows before it, or the last ``window`` of them (the predictable plug-in witness); the
fraction follows the online Newton step. The step is the compiled
:func:`streamrff._kernels.betting.e_detector_rows`. The guarantee
treats ``mu`` as the true reference mean: a finite reference of n rows adds an
error of order ``1/sqrt(n)`` to every payoff.

This module also holds the ``method="e-detector"`` side of :class:`streamrff.DriftMonitor`
(its validation, update, saved state): the monitor keeps one :class:`EDetector` per run.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._base.blas import one_blas_thread
from .._base.validation import check_rows, check_width
from .._kernels.betting import e_detector_rows
from ..errors import InputError, SketchFormatError
from ..maps import RFF

__all__ = ["EDetector"]

#: ``DriftMonitor(method=...)``: the ERT-calibrated sliding window, or an e-detector.
METHODS = ("ert", "e-detector")
#: ``procedure``: e-Shiryaev-Roberts (the sum of the e-processes started at each row) or e-CUSUM (their max).
PROCEDURES = ("sr", "cusum")
#: Arrays of a saved e-detector monitor (:mod:`streamrff.formats.monitor`): the run's witness sum and scalars.
DETECTOR_ARRAYS = ("detector_witness_sum", "detector_scalars")

#: Rows embedded at once.
_TILE_ROWS = 8192
#: ``[betting fraction, ONS curvature sum, log e-detector, running max]`` before any row.
_INITIAL_SCALARS = (0.0, 1.0, 0.0, 0.0)


class EDetector:
    """E-CUSUM change detector against a reference kernel mean (Shin, Ramdas & Rinaldo 2022).

    Parameters
    ----------
    feature_map : RFF
        A fitted sincos random Fourier feature map (unit-norm features).
    reference_mean : array-like of shape (n_features_out,)
        The reference's mean feature vector (feature sum over count of its sketch).
    alpha : float, default=0.05
        Alarm when the e-detector reaches ``1/alpha``; the average run length to a
        false alarm is then at least ``1/alpha`` rows.
    procedure : {"cusum", "sr"}, default="cusum"
        "cusum": ``M_t = max(M_{t-1}, 1) (1 + lambda_t f_t)``; "sr" (Shiryaev-Roberts):
        ``R_t = (R_{t-1} + 1) (1 + lambda_t f_t)``, whose run length is about ``1/alpha``
        and whose delay is shorter at the same ``alpha``.
    window : int or None, default=None
        The witness sums ``z(x_s) - mu`` over the last ``window`` rows only (their
        features kept in a ring buffer), so that rows long before a change do not
        blur its direction; None: over every earlier row.

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> from streamrff.drift.edetector import EDetector
    >>> rng = np.random.default_rng(0)
    >>> rff = srf.RFF(n_features=64, bandwidth=1.0, seed=0).fit(np.zeros((4, 2)))
    >>> mean = rff.transform(rng.normal(size=(2000, 2))).mean(axis=0)
    >>> detector = EDetector(rff, mean, alpha=0.01).update(rng.normal(3.0, 1.0, size=(200, 2)))
    >>> detector.alarm_at is not None
    True
    """

    def __init__(
        self, feature_map: RFF, reference_mean: Any, alpha: float = 0.05, procedure: str = "cusum",
        window: int | None = None,
    ) -> None:  # fmt: skip
        from ..twosample.sequential import _check_alpha, _check_unit_norm_map

        self.feature_map = _check_unit_norm_map(feature_map)
        mean = np.asarray(reference_mean, np.float64)
        width = int(np.prod(self.feature_map.transform(np.zeros((1, self.feature_map.n_features_in_))).shape[1:]))
        if mean.shape != (width,) or not np.all(np.isfinite(mean)):
            raise InputError(
                f"reference_mean must be a finite vector of length {width}, got shape {mean.shape}; "
                "pass the reference sketch's feature sum divided by its count"
            )
        self.reference_mean = mean
        self.alpha = _check_alpha(alpha)
        if procedure not in PROCEDURES:
            raise InputError(f"procedure must be 'sr' or 'cusum'. Got {procedure!r}; use procedure='sr'.")
        self.procedure = procedure
        if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
            raise InputError(f"window must be None or an integer >= 1. Got {window!r}; use e.g. window=100.")
        self.window = window
        self._ring = np.zeros((window or 0, width), np.float32)
        self.n_rows = 0
        self.alarm_at: int | None = None
        self._witness_sum = np.zeros(width, np.float64)
        self._scalars = np.array(_INITIAL_SCALARS, np.float64)
        if procedure == "sr":
            self._scalars[2] = -math.inf  # R_0 = 0: no e-process started yet

    @property
    def log_e_value(self) -> float:
        """The log of the e-detector after the last row (before any row: 0 for the e-CUSUM, -inf for SR)."""
        return float(self._scalars[2])

    def update(self, rows: Any) -> EDetector:
        """Bet on each new row in order; set ``alarm_at`` (1-based row count) at the first alarm.

        Parameters
        ----------
        rows : array-like of shape (n, n_features_in)
            New rows of the stream.

        Returns
        -------
        EDetector
            ``self``.

        Examples
        --------
        >>> import numpy as np, streamrff as srf
        >>> from streamrff.drift.edetector import EDetector
        >>> rff = srf.RFF(n_features=16, bandwidth=1.0, seed=0).fit(np.zeros((4, 2)))
        >>> EDetector(rff, rff.transform(np.zeros((1, 2)))[0]).update(np.zeros((3, 2))).n_rows
        3
        """
        array = check_rows(rows, "rows", allow_empty=True)
        check_width(array, self.feature_map.n_features_in_, "EDetector", "rows")
        with one_blas_thread():  # the features must not depend on the BLAS thread count
            for _, features in self.feature_map.embed_tiles(array, tile_rows=_TILE_ROWS):
                self.bet(features)
        return self

    def bet(self, features: np.ndarray) -> tuple[np.ndarray, int]:
        """Bet on trusted float32 ``features`` (the map's, of the next rows, in order).

        Returns
        -------
        log_e_values : ndarray of shape (n,), float64
            The log e-detector after each row.
        first : int
            The index of the first row whose log e-value reaches ``log(1/alpha)`` (-1 if none).
        """
        path = np.empty(features.shape[0])
        log_threshold = math.log(1.0 / self.alpha)
        first = e_detector_rows(
            features, self.reference_mean, self._witness_sum, self._scalars, log_threshold, path,
            self.procedure == "sr", self._ring, self.n_rows,
        )  # fmt: skip
        if self.alarm_at is None and first >= 0:
            self.alarm_at = self.n_rows + first + 1
        self.n_rows += features.shape[0]
        return path, first

    def state_dict(self) -> dict[str, Any]:
        """The detector's state: plain numbers and float64 arrays (round-trips bit for bit with :meth:`from_state`).

        Examples
        --------
        >>> import numpy as np, streamrff as srf
        >>> from streamrff.drift.edetector import EDetector
        >>> rff = srf.RFF(n_features=16, bandwidth=1.0, seed=0).fit(np.zeros((4, 2)))
        >>> sorted(EDetector(rff, np.zeros(16)).state_dict())
        ['alarm_at', 'alpha', 'n_rows', 'procedure', 'reference_mean', 'ring', 'scalars', 'window', 'witness_sum']
        """
        return {
            "alpha": self.alpha,
            "procedure": self.procedure,
            "window": self.window,
            "ring": self._ring.copy(),
            "n_rows": self.n_rows,
            "alarm_at": -1 if self.alarm_at is None else self.alarm_at,
            "reference_mean": self.reference_mean.copy(),
            "witness_sum": self._witness_sum.copy(),
            "scalars": self._scalars.copy(),
        }

    @classmethod
    def from_state(cls, feature_map: RFF, state: dict[str, Any]) -> EDetector:
        """Rebuild a detector from :meth:`state_dict` and its feature map.

        Examples
        --------
        >>> import numpy as np, streamrff as srf
        >>> from streamrff.drift.edetector import EDetector
        >>> rff = srf.RFF(n_features=16, bandwidth=1.0, seed=0).fit(np.zeros((4, 2)))
        >>> EDetector.from_state(rff, EDetector(rff, np.zeros(16)).state_dict()).n_rows
        0
        """
        procedure, window = state.get("procedure", "cusum"), state.get("window")
        detector = cls(feature_map, state["reference_mean"], state["alpha"], procedure, window)
        witness = np.asarray(state["witness_sum"], np.float64)
        scalars = np.asarray(state["scalars"], np.float64)
        ring = np.asarray(state.get("ring", detector._ring), np.float32)
        if witness.shape != detector._witness_sum.shape or scalars.shape != (4,) or ring.shape != detector._ring.shape:
            raise InputError("state has witness_sum, scalars or ring of the wrong shape; pass EDetector.state_dict()")
        detector._ring = ring.copy()
        detector._witness_sum = witness.copy()
        detector._scalars = scalars.copy()
        detector.n_rows = int(state["n_rows"])
        detector.alarm_at = None if int(state["alarm_at"]) < 0 else int(state["alarm_at"])
        return detector


# The ``method="e-detector"`` side of DriftMonitor: kept here so that monitor.py holds the ERT monitor.


def check_method(monitor: Any) -> float | None:
    """Validate ``method`` and ``alpha`` of a :class:`~streamrff.DriftMonitor` (``ert`` checked before); return the
    e-detector's alarm level ``alpha`` (``1/ert`` when ``alpha`` is None), or None for ``method="ert"``."""
    from ..maps import RFF

    method, alpha = monitor.method, monitor.alpha
    if not isinstance(method, str) or method not in METHODS:
        raise InputError(
            f"method must be 'ert' or 'e-detector'. Got {method!r}; use method='e-detector' for alarms "
            "by betting, or the default 'ert'."
        )
    if method == "ert":
        for name, value in (("alpha", alpha), ("procedure", monitor.procedure)):
            if value is not None:
                raise InputError(
                    f"{name} goes with method='e-detector' (the ERT monitor is calibrated by ert). Got "
                    f"{name}={value!r}; drop {name}, or pass method='e-detector'."
                )
        return None
    if monitor.procedure is not None and monitor.procedure not in PROCEDURES:
        raise InputError(
            f"procedure must be 'sr', 'cusum' or None (for 'sr'). Got {monitor.procedure!r}; use procedure='sr'."
        )
    for name, default in (("simulation", "auto"), ("n_streams", "auto")):
        if getattr(monitor, name) != default:
            raise InputError(
                f"{name} calibrates method='ert'; the e-detector needs no calibration. Got "
                f"{name}={getattr(monitor, name)!r}; drop it."
            )
    feature_map = monitor.feature_map
    if feature_map is not None and (not isinstance(feature_map, RFF) or feature_map.variant != "sincos"):
        raise InputError(
            f"method='e-detector' needs an srf.RFF feature_map with variant='sincos' (unit-norm "
            f"features bound the bets). Got {type(feature_map).__name__}; pass such a map or none."
        )
    if alpha is None:
        return 1.0 / float(monitor.ert)
    from ..twosample.sequential import _check_alpha

    return _check_alpha(alpha)


def e_thresholds(window: int, alpha: float) -> np.ndarray:
    """``thresholds_`` of an e-detector monitor: ``log(1/alpha)`` at every fill level (no calibration)."""
    return np.full(window + 1, math.log(1.0 / alpha))


def start_detector(monitor: Any) -> EDetector:
    """A new run's detector: the reference's mean feature vector, the monitor's map, alpha and procedure."""
    mean = monitor.reference_sum_ / monitor.reference_count_
    window = monitor.window_features_.shape[0]
    detector = EDetector(monitor.feature_map_, mean, check_method(monitor), monitor.procedure or "sr", window)
    detector._ring = monitor.window_features_  # one ring buffer: the witness's rows are the window's
    return detector


def bet_monitor(monitor: Any, rows: Any) -> tuple[np.ndarray, np.ndarray, int]:
    """The betting part of :meth:`DriftMonitor.update` for ``method="e-detector"``: check ``rows``, bet on each in
    order against the witness of the last ``window`` rows, whose features the window's ring buffer keeps (run
    row ``r`` in slot ``r % window``; the alarm's explanation reads them too). Returns the checked rows, the
    log e-value after each row and the batch index of the first row that reached ``log(1/alpha)`` (-1 if
    none)."""
    fix = (
        "Row {first} of this batch is row {row:,} of the monitor's stream since fit. Drop or impute those "
        "rows, or pass on_invalid='skip' to skip them."
    )
    rows = check_rows(rows, "rows", allow_empty=True, fix=fix, row_offset=monitor.n_rows_seen_)
    check_width(rows, monitor.n_features_in_, "DriftMonitor", name="rows")
    paths, first = [], -1
    dense = _dense_rff_args(monitor)
    with one_blas_thread():  # the features must not depend on the BLAS thread count
        if dense is not None and rows.shape[0] <= _TILE_ROWS:  # one tile: embed_tiles' call, without its layers
            from .._kernels.sincos import rff_features

            features = np.empty((rows.shape[0], monitor.window_features_.shape[1]), np.float32)
            projection = np.empty((rows.shape[0], dense[0].shape[1]), np.float32)
            rff_features(np.ascontiguousarray(rows, dtype=np.float32), *dense, projection, features)
            return (rows, *monitor.detector_.bet(features))
        for offset, features in monitor.feature_map_.embed_tiles(rows, tile_rows=_TILE_ROWS):
            path, crossed = monitor.detector_.bet(features)  # it moves the window's ring buffer too
            paths.append(path)
            if first < 0 and crossed >= 0:
                first = offset + crossed
    statistic = np.concatenate(paths) if len(paths) != 1 else paths[0]
    return rows, statistic, first


def _dense_rff_args(monitor: Any) -> tuple[Any, ...] | None:
    """``(frequencies, offsets, scale)`` of a dense float32 RFF map without categorical columns (None for another
    map), held while the map is the same object: a one-row update then does not pay for the map's layers."""
    from ..maps import RFF

    cached = getattr(monitor, "_e_detector_cache", None)
    feature_map = monitor.feature_map_
    if cached is None or cached[0] is not feature_map:
        dense = (
            type(feature_map) is RFF and not feature_map.structured and feature_map._float32_phases()
            and not feature_map._categorical_columns
        )  # fmt: skip
        cached = (feature_map, feature_map._float32_kernel_args() if dense else None)
        monitor._e_detector_cache = cached
    return cached[1]


def detector_arrays(monitor: Any) -> dict[str, np.ndarray]:
    """The arrays an e-detector monitor saves beside the ERT monitor's (none for ``method="ert"``)."""
    if monitor.method != "e-detector":
        return {}
    state = monitor.detector_.state_dict()
    return {"detector_witness_sum": state["witness_sum"], "detector_scalars": state["scalars"]}


def restore_detector(monitor: Any, arrays: dict[str, np.ndarray], target: str) -> None:
    """Rebuild a loaded e-detector monitor's :class:`EDetector`, refusing a state it could not have reached."""
    try:
        alpha = check_method(monitor)
    except InputError as error:
        raise SketchFormatError(f"{target}: {error}") from None
    if alpha is None:
        return
    if not np.array_equal(monitor.thresholds_, e_thresholds(monitor.thresholds_.shape[0] - 1, alpha)):
        raise SketchFormatError(f"{target}: an e-detector's thresholds must all be log(1/alpha) (tampered).")
    witness, scalars = arrays.get("detector_witness_sum"), arrays.get("detector_scalars")
    width, run_length = monitor.reference_sum_.shape[0], monitor.run_length_
    if witness is None or scalars is None or witness.shape != (width,) or scalars.shape != (4,):
        raise SketchFormatError(
            f"{target}: an e-detector monitor needs arrays {', '.join(DETECTOR_ARRAYS)} of "
            f"shapes ({width},) and (4,) (damaged or tampered)."
        )
    fraction, curvature, log_e, max_log_e = (float(value) for value in scalars)
    log_threshold, procedure = math.log(1.0 / alpha), monitor.procedure or "sr"
    unstarted = procedure == "sr" and run_length == 0  # R_0 = 0: log -inf
    # the e-CUSUM's log e-value grows by at most log 1.5 a row; SR's R_t <= 1.5 + ... + 1.5^t < 3 (1.5^t)
    most = run_length * math.log(1.5) + (math.log(3.0) if procedure == "sr" else 0.0) + 1e-12
    start = monitor.n_rows_seen_ - run_length
    problems = [
        (not np.isfinite(witness).all() or float(np.linalg.norm(witness)) > 2.0 * run_length + 1e-9,
         "its witness sum must be finite, of norm <= 2 per row of the run"),
        (not (np.isfinite(scalars[[0, 1, 3]]).all() and 0 <= fraction <= 0.5 and 1 <= curvature <= 1 + 4 * run_length),
         "its betting fraction must lie in [0, 1/2] and its curvature in [1, 1 + 4 run length]"),
        (not (log_e == -math.inf if unstarted else -math.log(2.0) - 1e-12 <= log_e <= max_log_e <= most)
         or max_log_e < 0,
         "its log e-value must lie in [-log 2, its running max] and the max in [0, the most run length rows pay]"),
        ((monitor.drift_at_ is None) != (max_log_e < log_threshold),
         "its running max must reach log(1/alpha) exactly when the run has an alarm"),
        (monitor.drift_at_ is not None and not 0 <= monitor.drift_at_ - start < run_length,
         "its alarm must lie in the current run"),
    ]  # fmt: skip
    for failed, what in problems:
        if failed:
            raise SketchFormatError(f"{target}: not a state an e-detector reaches: {what} (tampered or damaged).")
    state = {
        "alpha": alpha, "procedure": procedure, "n_rows": run_length, "window": monitor.window_features_.shape[0],
        "ring": monitor.window_features_,
        "reference_mean": monitor.reference_sum_ / monitor.reference_count_,
        "alarm_at": -1 if monitor.drift_at_ is None else monitor.drift_at_ - start + 1,
        "witness_sum": witness, "scalars": scalars,
    }  # fmt: skip
    try:
        monitor.detector_ = EDetector.from_state(monitor.feature_map_, state)
    except InputError as error:
        raise SketchFormatError(f"{target}: {error}") from None
    monitor.window_features_ = monitor.detector_._ring  # one ring buffer, as start_detector shares it
