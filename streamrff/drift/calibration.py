"""Thresholds of the drift monitor: simulated short streams and conditional quantiles (Cobb et al. 2022)."""

from __future__ import annotations

import math

import numba
import numpy as np

from .._kernels.compiled import jit
from ..errors import InputError
from ..sketches.mean import MeanSketch

__all__ = ["calibrate_thresholds", "default_stream_count", "gaussian_bank"]

#: Below this many expected exceedances an upper quantile is extrapolated from an exponential tail.
_MIN_EXCEEDANCES = 5
#: Feature values touched by the simulated streams before the number of streams is capped
#: (about 2-4 s of one core in the compiled kernel); rarer tails are extrapolated (see calibrate_thresholds).
_SIMULATION_BUDGET = 4e9
_MIN_STREAMS = 2000
#: Streams wanted per 1/ERT: enough for a per-step quantile among survivors without extrapolation.
_STREAMS_PER_ERT = 40


@jit(parallel=True, nogil=True)  # streams in parallel: each stream is its own, so threads do not change results
def _simulated_statistics(bank, bank_squared_norms, mean, indices, window):  # pragma: no cover - compiled
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
                    (total_squared - squared_norm_sum) / (size * (size - 1.0)) - 2.0 * cross / size + mean_squared
                )
    return statistics


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


def default_stream_count(window: int, ert: float, width: int) -> int:
    """Simulated streams for ``n_streams="auto"``: enough for 100 expected crossings over the steady steps and
    ``_STREAMS_PER_ERT`` per 1/ERT, at least 2000, at most a budget of about 4e9 feature values.

    Examples
    --------
    >>> default_stream_count(50, 1000.0, 64), default_stream_count(200, 100_000.0, 512)  # 40 per 1/ERT; capped
    (40000, 19531)
    """
    budget = max(_MIN_STREAMS, int(_SIMULATION_BUDGET // (2 * window * width)))
    wanted = max(_MIN_STREAMS, math.ceil(100 * ert / window), math.ceil(_STREAMS_PER_ERT * ert))
    return int(min(budget, wanted))


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

    Examples
    --------
    At ERT = 50, the share of fresh simulated streams (other draws from the
    same bank) whose first alarm comes at fill level 2 is about 1/50:

    >>> import numpy as np
    >>> from streamrff.drift import calibrate_thresholds
    >>> rng = np.random.default_rng(0)
    >>> bank = rng.normal(size=(2000, 16)).astype("float32") / 4
    >>> thresholds = calibrate_thresholds(bank, window=10, ert=50.0, n_streams=20_000, seed=0)
    >>> thresholds.shape, bool(thresholds[0] == np.inf)
    ((11,), True)
    >>> pairs = bank[rng.integers(0, 2000, size=(100_000, 2))].astype(float)  # fill level 2: two rows
    >>> mean = bank.mean(axis=0, dtype=float)
    >>> statistic = (pairs[:, 0] * pairs[:, 1]).sum(axis=1) - (pairs.sum(axis=1) @ mean) + mean @ mean
    >>> bool(abs(np.mean(statistic > thresholds[1]) - 1 / 50) < 0.004)
    True
    """
    steady = window if n_steady_steps is None else n_steady_steps
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x0D1F7]))
    bank = np.ascontiguousarray(bank, dtype=np.float32)
    bank_squared_norms = np.einsum("ij,ij->i", bank, bank, dtype=np.float64)
    mean = bank.mean(axis=0, dtype=np.float64)  # the simulated streams' own mean (see DriftMonitor Notes)
    indices = rng.integers(0, bank.shape[0], size=(n_streams, window + steady), dtype=np.int32)
    statistics = _simulated_statistics(bank, bank_squared_norms, mean, indices, window)
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


def gaussian_bank(summary: MeanSketch, n_rows: int, seed: int) -> np.ndarray:
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
