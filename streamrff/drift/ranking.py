"""How an alarm names its rows: the kernel-mean ratio of the window against the reference at each row.

Shared by both drift methods (the ERT-calibrated :class:`~streamrff.drift.DriftMonitor` and the
e-detector): each hands :func:`kernel_mean_ratio` its window's mean features, the reference's and the
features of the rows it keeps, and names the rows with the largest ratio (``DriftUpdate.top_rows``).
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from ..errors import InputError

__all__ = ["RATIO_FLOOR", "kernel_mean_ratio"]

#: The smallest reference kernel mean a kernel-mean ratio divides by (kernel units: the kernel is 1 at distance 0).
RATIO_FLOOR = 1e-3


def kernel_mean_ratio(
    features: Any, window_mean: Any, reference_mean: Any, window_count: int | None = None
) -> np.ndarray:
    """Per row x, the window's kernel mean at x over the reference's: ``z(x).mu_window / z(x).mu_reference``.

    An alarm's window is a mixture of rows of the reference's law and of the new one; a row's
    ratio of kernel means estimates the ratio of the window's density to the reference's there
    (both smoothed by the kernel), which is monotone in the posterior probability that the row is
    new, so the rows with the largest ratio are the rows most likely after the change. Ranking by
    the witness ``z(x).(mu_window - mu_reference)`` instead favours rows where both densities are
    high (``benchmarks/check_drift_alarms.py --compare``: the top row is a changed row in 90% of
    alarms against 66% with the witness, 0.5 sd shift, d = 4). Both drift methods rank an alarm's
    rows with it (``DriftUpdate.top_rows``).

    Parameters
    ----------
    features : array-like of shape (n, D)
        The features ``z(x)`` of the rows to score (float32 or float64).
    window_mean : array-like of shape (D,)
        The mean feature vector of the window (its feature sum over its row count).
    reference_mean : array-like of shape (D,)
        The mean feature vector of the reference (its sketch's feature sum over its count).
    window_count : int, optional
        When the rows are the window's own (``window_mean`` includes them): the rows in the
        window, m >= 2. Each row then leaves itself out, ``(m z(x).mu_window - ||z(x)||^2) / (m - 1)``,
        so that a row is not scored by its kernel with itself (an isolated row would otherwise
        rank first on ``1/m`` alone). None: the rows are not in the window.

    Returns
    -------
    ndarray of shape (n,), float64
        The ratios; the denominator is floored at :data:`RATIO_FLOOR` (1e-3), so a row where the
        reference's kernel mean is about 0 (or negative, from random-feature noise) scores
        ``numerator / 1e-3``.

    Raises
    ------
    InputError
        On arrays of the wrong shape, non-finite values or a ``window_count`` below 2.

    Examples
    --------
    >>> import numpy as np
    >>> from streamrff.drift import kernel_mean_ratio
    >>> features = np.array([[1.0, 0.0], [0.6, 0.8]])
    >>> kernel_mean_ratio(features, window_mean=[0.5, 0.5], reference_mean=[0.5, 0.0]).tolist()
    [1.0, 2.3333333333333335]
    >>> kernel_mean_ratio(features, [0.8, 0.4], [0.5, 0.0], window_count=2).round(6).tolist()
    [1.2, 2.0]
    """
    rows = np.asarray(features, dtype=np.float64) if not isinstance(features, np.ndarray) else features
    if rows.ndim != 2 or rows.dtype.kind != "f" or not np.all(np.isfinite(rows)):
        raise InputError(f"features must be a finite float array of shape (n, D). Got {np.shape(features)}; "
                         "pass the feature map's transform of the rows to score.")  # fmt: skip
    means = []
    for name, value in (("window_mean", window_mean), ("reference_mean", reference_mean)):
        mean = np.asarray(value, dtype=np.float64)
        if mean.shape != (rows.shape[1],) or not np.all(np.isfinite(mean)):
            raise InputError(f"{name} must be a finite vector of length {rows.shape[1]} (the features' width). "
                             f"Got shape {mean.shape}; pass a feature sum divided by its row count.")  # fmt: skip
        means.append(mean)
    numerator = rows @ means[0]
    if window_count is not None:
        if isinstance(window_count, bool) or not isinstance(window_count, numbers.Integral) or window_count < 2:
            raise InputError(f"window_count must be an integer >= 2 (the rows in the window). Got {window_count!r}; "
                             "pass None for rows that are not in the window.")  # fmt: skip
        squared_norms = np.einsum("ij,ij->i", rows, rows, dtype=np.float64)
        numerator = (numerator * window_count - squared_norms) / (window_count - 1)
    return numerator / np.maximum(rows @ means[1], RATIO_FLOOR)
