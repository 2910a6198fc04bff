"""The bucket permutation null: under no change whole buckets are exchangeable, so relabel them.

With per-bucket counts ``n_j``, feature sums ``S_j`` and squared-norm sums ``Q_j``, a labelling
``L`` (which buckets form sample X) gives ``S_X = sum_{j in L} S_j``, ``n_X``, ``Q_X`` and the
rest for Y, and the unbiased MMD^2 of :func:`streamrff.mmd2` (Sutherland & Schneider 2015,
sec. 3.3)::

    MMD^2_u = (||S_X||^2 - Q_X) / (n_X (n_X - 1)) + (||S_Y||^2 - Q_Y) / (n_Y (n_Y - 1)) - 2 S_X.S_Y / (n_X n_Y)

If the buckets are exchangeable (no change between the two ranges, and buckets independent
of each other), every labelling with the same number of buckets per side is equally likely,
so ``p = (1 + #{b : T_b >= T}) / (1 + B)`` over B random relabellings is an exact (valid)
p-value (Phipson & Smyth 2010); when there are at most B distinct labellings, all of them are
used and ``p = #{labellings : T_l >= T} / C(k_X + k_Y, k_X)`` (the observed one included).
It needs only the bucket sums: no rows and no second
moments. The resolution is limited by the number of distinct labellings,
``C(k_X + k_Y, k_X)``: at least 20 are required for a p-value below 0.05.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from .._base.validation import check_positive_int, normalize_seed
from ..errors import InputError
from ..formats.store import Record
from ..maps import FeatureMap
from ..twosample.result import TwoSampleResult, _result

__all__ = ["bucket_permutation_test", "bucket_series", "StoreSeries"]

#: Fewest distinct labellings of the buckets for a test (a p-value can then reach 1/20).
MIN_LABELLINGS = 20


def _statistics(labels: np.ndarray, sums: np.ndarray, counts: np.ndarray, norms: np.ndarray) -> np.ndarray:
    """MMD^2_u for each row of ``labels`` (True: the bucket is in X) from the bucket sums."""
    labels = labels.astype(np.float64)
    sum_x = labels @ sums
    sum_y = sums.sum(axis=0) - sum_x
    n_x, q_x = labels @ counts, labels @ norms
    n_y, q_y = counts.sum() - n_x, norms.sum() - q_x
    within_x = (np.einsum("bd,bd->b", sum_x, sum_x) - q_x) / (n_x * (n_x - 1))
    within_y = (np.einsum("bd,bd->b", sum_y, sum_y) - q_y) / (n_y * (n_y - 1))
    return within_x + within_y - 2.0 * np.einsum("bd,bd->b", sum_x, sum_y) / (n_x * n_y)


def _null_labels(n_x: int, n_total: int, n_permutations: int, rng: np.random.Generator) -> np.ndarray:
    """``n_permutations`` random labellings with ``n_x`` buckets in X; every labelling if there are no more."""
    if math.comb(n_total, n_x) <= n_permutations:
        labels = np.zeros((math.comb(n_total, n_x), n_total), dtype=bool)
        for row, chosen in enumerate(itertools.combinations(range(n_total), n_x)):
            labels[row, list(chosen)] = True
        return labels
    base = np.zeros(n_total, dtype=bool)
    base[:n_x] = True
    return rng.permuted(np.broadcast_to(base, (n_permutations, n_total)), axis=1)


def _pooled(sides: Sequence[Sequence[Record]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    records = [record for side in sides for record in side]
    sums = np.stack([record.feature_sum for record in records])
    counts = np.array([record.count for record in records], dtype=np.float64)
    norms = np.array([record.squared_norm_sum for record in records], dtype=np.float64)
    return sums, counts, norms


def _check_sides(sides: Sequence[Sequence[Record]]) -> None:
    k_x, k_y = len(sides[0]), len(sides[1])
    if math.comb(k_x + k_y, k_x) < MIN_LABELLINGS:
        raise InputError(
            f"The bucket permutation test needs at least {MIN_LABELLINGS} distinct relabellings of the buckets; "
            f"{k_x} and {k_y} buckets give {math.comb(k_x + k_y, k_x)}. Use longer ranges (more buckets per side)."
        )
    for name, side in zip("ab", sides):
        if sum(record.count for record in side) < 2:
            raise InputError(f"Range {name} holds fewer than 2 valid rows; the unbiased MMD^2 needs at least 2.")


def bucket_permutation_test(
    sides: Sequence[Sequence[Record]], feature_map: FeatureMap, n_permutations: int = 999, seed: Any = 0
) -> TwoSampleResult:
    """The test of :meth:`streamrff.SketchStore.test` on the bucket records of its two ranges."""
    n_permutations = check_positive_int(n_permutations, "n_permutations")
    _check_sides(sides)
    sums, counts, norms = _pooled(sides)
    rng = np.random.default_rng(normalize_seed(seed))
    observed = np.zeros((1, len(counts)), dtype=bool)
    observed[0, : len(sides[0])] = True
    statistic = float(_statistics(observed, sums, counts, norms)[0])
    null = _statistics(_null_labels(len(sides[0]), len(counts), n_permutations, rng), sums, counts, norms)
    if math.comb(len(counts), len(sides[0])) <= n_permutations:  # every labelling, the observed one included
        p_value = np.count_nonzero(null >= statistic - 1e-12 * abs(statistic)) / len(null)
    else:
        p_value = (1.0 + np.count_nonzero(null >= statistic)) / (1.0 + n_permutations)
    n_x, n_y = (sum(record.count for record in side) for side in sides)
    return _result("bucket-permutation", statistic, p_value, n_x, n_y, feature_map, null)


@dataclasses.dataclass(frozen=True)
class StoreSeries:
    """MMD^2 of windows of buckets against a reference range, with bucket-permutation p-values.

    Attributes
    ----------
    first_row, stop_row : ndarray of int64
        Each window's rows ``[first_row, stop_row)``.
    statistic : ndarray of float64
        Unbiased MMD^2 of the window against the reference.
    p_value : ndarray of float64
        Bucket permutation p-value of each window.
    band : ndarray of float64
        The ``1 - alpha`` quantile of each window's permutation null.
    alarm : ndarray of bool
        ``p_value <= alpha``.
    reference : (int, int)
        The reference rows.
    alpha : float
    n_permutations : int
    """

    first_row: np.ndarray
    stop_row: np.ndarray
    statistic: np.ndarray
    p_value: np.ndarray
    band: np.ndarray
    alarm: np.ndarray
    reference: tuple[int, int]
    alpha: float
    n_permutations: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-able: one entry per window."""
        return {
            "reference": list(self.reference), "alpha": self.alpha, "n_permutations": self.n_permutations,
            "windows": [
                {"first_row": int(a), "stop_row": int(b), "statistic": float(s), "p_value": float(p),
                 "band": float(q), "alarm": bool(x)}
                for a, b, s, p, q, x in zip(
                    self.first_row, self.stop_row, self.statistic, self.p_value, self.band, self.alarm
                )
            ],
        }  # fmt: skip

    def plot(self, ax: Any = None) -> Any:
        """The statistic per window, its null band and the alarms (matplotlib; needs ``streamrff[plot]``)."""
        try:
            import matplotlib.pyplot as plt
        except ImportError as error:  # pragma: no cover - depends on the environment
            raise ImportError("StoreSeries.plot needs matplotlib: pip install 'streamrff[plot]'.") from error
        if ax is None:
            _, ax = plt.subplots(figsize=(8, 3))
        middle = (self.first_row + self.stop_row) / 2
        ax.plot(middle, self.statistic, marker=".", label="MMD² vs reference")
        ax.plot(middle, self.band, linestyle="--", label=f"null {1 - self.alpha:.0%} quantile")
        ax.scatter(middle[self.alarm], self.statistic[self.alarm], color="red", zorder=3, label="alarm")
        ax.set_xlabel("row")
        ax.set_ylabel("MMD²")
        ax.legend(loc="upper left")
        return ax


def bucket_series(
    reference: Sequence[Record], windows: Iterable[Sequence[Record]], feature_map: FeatureMap,
    n_permutations: int = 999, seed: Any = 0, alpha: float = 0.05,
) -> StoreSeries:  # fmt: skip
    """The series of :meth:`streamrff.SketchStore.series` from the bucket records.

    ``windows`` may be an iterator (each window's records read when its turn comes): the series
    holds the reference's records and one window's at a time.
    """
    n_permutations = check_positive_int(n_permutations, "n_permutations")
    if not isinstance(alpha, (int, float)) or not 0 < alpha < 1:
        raise InputError(f"alpha must be in (0, 1). Got {alpha!r}.")
    statistics, p_values, bands, firsts, stops = [], [], [], [], []
    for window in windows:
        if not firsts:
            _check_sides([window, reference])
        firsts.append(window[0].first_row)
        stops.append(window[-1].stop_row)
        result = bucket_permutation_test([window, reference], feature_map, n_permutations, seed)
        statistics.append(result.statistic)
        p_values.append(result.p_value)
        bands.append(float(np.quantile(result.null, 1 - alpha)))
    p_value = np.array(p_values)
    reference_rows = (reference[0].first_row, reference[-1].stop_row)
    return StoreSeries(
        first_row=np.array(firsts, dtype=np.int64), stop_row=np.array(stops, dtype=np.int64),
        statistic=np.array(statistics), p_value=p_value, band=np.array(bands), alarm=p_value <= alpha,
        reference=reference_rows, alpha=float(alpha), n_permutations=n_permutations,
    )  # fmt: skip
