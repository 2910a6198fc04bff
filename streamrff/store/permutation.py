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

Compacted ranges. Buckets are exchangeable when they span equal times (or rows), so a range is
permuted in units of one span (:func:`exchangeable_units`): the store's buckets if the two
ranges hold fine buckets only, the compacted (coarse) buckets if they hold compacted buckets
only, and, when they hold both, units of the compacted span: the fine buckets of each compacted
bucket's span summed into one unit. The units then share one map: with compacted buckets kept
at ``k < D`` features, every unit (and so the statistic) uses the common prefix, the first
``k`` features (fine sums truncated and rescaled as :meth:`~streamrff.SketchStore.range` does:
the sums of the ``k``-feature map of the same seed). A range whose fine part does not fill whole
compacted spans is refused, naming the span: ask for ranges on the compacted buckets' edges.
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
from ..sketches.mean import MeanSketch
from ..twosample.result import TwoSampleResult, _result

__all__ = [
    "bucket_permutation_test",
    "bucket_series",
    "exchangeable_units",
    "store_series",
    "store_test",
    "StoreSeries",
]

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
    pairs: Iterable[tuple[Sequence[Sequence[Record]], FeatureMap]], n_permutations: int = 999, seed: Any = 0,
    alpha: float = 0.05,
) -> StoreSeries:  # fmt: skip
    """The series of :meth:`streamrff.SketchStore.series` from the units of each (window, reference) pair.

    ``pairs`` may be an iterator of ``([window_units, reference_units], feature_map)`` (each read
    when its turn comes): the series holds one pair's records at a time.
    """
    n_permutations = check_positive_int(n_permutations, "n_permutations")
    if not isinstance(alpha, (int, float)) or not 0 < alpha < 1:
        raise InputError(f"alpha must be in (0, 1). Got {alpha!r}.")
    statistics, p_values, bands, firsts, stops = [], [], [], [], []
    reference_rows = (0, 0)
    for (window, reference), feature_map in pairs:
        if not firsts:
            _check_sides([window, reference])
        reference_rows = (reference[0].first_row, reference[-1].stop_row)
        firsts.append(window[0].first_row)
        stops.append(window[-1].stop_row)
        result = bucket_permutation_test([window, reference], feature_map, n_permutations, seed)
        statistics.append(result.statistic)
        p_values.append(result.p_value)
        bands.append(float(np.quantile(result.null, 1 - alpha)))
    p_value = np.array(p_values)
    return StoreSeries(
        first_row=np.array(firsts, dtype=np.int64), stop_row=np.array(stops, dtype=np.int64),
        statistic=np.array(statistics), p_value=p_value, band=np.array(bands), alarm=p_value <= alpha,
        reference=reference_rows, alpha=float(alpha), n_permutations=n_permutations,
    )  # fmt: skip


# Ranges of a store: the exchangeable units of a pair of ranges, compacted parts included.


def _side_parts(store: Any, compacted: Any, first: int, stop: int) -> tuple[list[Record], list[Record]]:
    """The fine records and the coarse (compacted) records of fine buckets ``[first, stop)``, in order."""
    if compacted is None or not compacted.buckets:
        return store._bucket_records(first, stop), []
    ratio = compacted.ratio
    inside = [c for c in compacted.buckets if c * ratio < stop and (c + 1) * ratio > first]
    for coarse in inside[:1] + inside[-1:]:
        if coarse * ratio < first or (coarse + 1) * ratio > stop:
            lo, hi = coarse * ratio, (coarse + 1) * ratio
            raise InputError(
                f"The range {store._describe(first, stop)} cuts compacted bucket {coarse} ({store._describe(lo, hi)}) "
                f"of {store.path}. Pass ranges on the compacted buckets' edges in the compacted part."
            )
    fine: list[Record] = []
    cursor = first
    for coarse in inside + [None]:
        end = stop if coarse is None else coarse * ratio
        if cursor < end:
            fine += store._bucket_records(cursor, end)
        if coarse is not None:
            cursor = (coarse + 1) * ratio
    coarse_records = [] if not inside else compacted.tier._read_buckets(inside)
    return fine, coarse_records


def _coarsened(store: Any, compacted: Any, fine: list[Record], name: str) -> list[Record]:
    """Fine records summed into units of one compacted bucket's span, at the compacted map's features."""
    ratio = compacted.ratio
    groups: dict[int, list[Record]] = {}
    for record in fine:
        groups.setdefault(record.index // ratio, []).append(record)
    units = []
    for coarse, group in sorted(groups.items()):
        if len(group) != ratio:
            lo, hi = coarse * ratio, (coarse + 1) * ratio
            raise InputError(
                f"Range {name} mixes compacted buckets of {store._describe(0, ratio)} with fine buckets that do not "
                f"fill one ({store._describe(lo, hi)} holds {len(group)} of {ratio} in the range): buckets are "
                "exchangeable only at one span. Pass ranges on the compacted buckets' edges, or ranges of fine "
                "buckets only."
            )
        total = np.sum([record.feature_sum for record in group], axis=0)
        count = sum(record.count for record in group)
        norms = float(sum(record.squared_norm_sum for record in group))
        sketch = compacted.truncate(MeanSketch(store.feature_map, count, total, norms, None, 0))
        units.append(dataclasses.replace(
            group[0], level=0, index=coarse, count=count, n_invalid=sum(r.n_invalid for r in group),
            squared_norm_sum=float(sketch.squared_norm_sum), stop_row=group[-1].stop_row,
            feature_sum=np.asarray(sketch.feature_sum, dtype=np.float64),
        ))  # fmt: skip
    return units


def exchangeable_units(store: Any, spans: Sequence[tuple[int, int]]) -> tuple[list[list[Record]], FeatureMap]:
    """The units each range is permuted in, and their map: fine buckets, or compacted buckets, or both made coarse.

    Ranges of fine buckets only are permuted bucket by bucket; ranges of compacted buckets only,
    compacted bucket by compacted bucket (all of one span). When the ranges together hold both,
    the fine buckets of each compacted bucket's span are summed into one unit of that span and
    truncated to the compacted map's features (the common prefix), so every unit has one span
    and one map; a range whose fine part does not fill whole compacted spans is refused.
    """
    compacted = store._compacted_buckets()
    for attempt in range(3):  # a compactor may move buckets from fine to coarse while we read: read again
        try:
            parts = [_side_parts(store, compacted, first, stop) for first, stop in spans]
            break
        except InputError:
            again = store._compacted_buckets()
            if attempt == 2 or again is None or (compacted is not None and again.buckets == compacted.buckets):
                raise
            compacted = again
    has_fine = any(fine for fine, _ in parts)
    has_coarse = any(coarse for _, coarse in parts)
    if not has_coarse:
        return [fine for fine, _ in parts], store.feature_map
    if not has_fine:
        return [coarse for _, coarse in parts], compacted.tier.feature_map
    units = []
    for name, (fine, coarse) in zip("ab", parts):
        merged = sorted(_coarsened(store, compacted, fine, name) + coarse, key=lambda record: record.first_row)
        units.append(merged)
    return units, compacted.tier.feature_map


def disjoint_spans(store: Any, a: tuple[Any, Any], b: tuple[Any, Any]) -> list[tuple[int, int]]:
    """The bucket spans of two disjoint ranges of :meth:`SketchStore.test`, or InputError if they overlap."""
    spans = [store._bucket_span(*pair) for pair in (a, b)]
    if spans[0][0] < spans[1][1] and spans[1][0] < spans[0][1]:
        raise InputError(f"The two ranges overlap: a={a!r}, b={b!r}. Pass disjoint ranges.")
    return spans


def store_test(store: Any, a: tuple[Any, Any], b: tuple[Any, Any], n_permutations: int, seed: Any) -> TwoSampleResult:
    """:meth:`SketchStore.test`: the two ranges' exchangeable units, then the bucket permutation test."""
    sides, feature_map = exchangeable_units(store, disjoint_spans(store, a, b))
    return bucket_permutation_test(sides, feature_map, n_permutations, seed)


def store_series(
    store: Any, reference: tuple[Any, Any], every: int, start: Any, stop: Any, n_permutations: int, seed: Any,
    alpha: float,
) -> StoreSeries:  # fmt: skip
    """:meth:`SketchStore.series`: windows of ``every`` buckets, each tested against the reference in common units."""
    every = check_positive_int(every, "every")
    reference_span = store._bucket_span(*reference)
    first, stop_bucket = store._bucket_span(start, stop)
    windows = [
        (lo, lo + every) for lo in range(first, stop_bucket - every + 1, every)
        if lo + every <= reference_span[0] or lo >= reference_span[1]
    ]  # fmt: skip
    if not windows:
        raise InputError(
            f"No window of {every} bucket(s) outside the reference {reference!r} in the range asked. Pass a "
            "shorter reference or a smaller every=."
        )
    pairs = (exchangeable_units(store, [window, reference_span]) for window in windows)  # one window at a time
    return bucket_series(pairs, n_permutations, seed, alpha)
