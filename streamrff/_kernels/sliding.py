"""The compiled per-batch step of :meth:`DriftMonitor.update`: window sums, statistic and alarm in one call.

A batch of rows enters the window one row at a time, in a compiled loop: the
row's features are added to the float64 window sum and those of the row that
leaves (read from the ring buffer, in the slot the entering row then takes)
are subtracted, ``S <- S + (z_in - z_out)``; the same pass over the D
columns forms ``||S||^2`` and ``S . S_r`` for the statistic. Every row costs
O(D) with no temporaries, and the sums are accumulated in row order, so any
split of a stream into batches gives the same sums bit for bit. For the
default map (a dense float32 RFF) the features are computed in the same call
(:func:`streamrff._kernels.sincos.rff_features`, the features of ``transform`` bit for
bit), in tiles of ``tile_rows`` rows, so that a batch costs one dispatch: the
call also checks that the rows are finite and casts them to float32, so that a
one-row update pays no numpy call for either. Any other map embeds its tiles
first and passes their features to :func:`slide_features`.
"""

from __future__ import annotations

import numpy as np

from .compiled import jit
from .sincos import rff_features

__all__ = ["NOT_FINITE", "reference_term", "slide_features", "slide_rows"]

_jit = jit(nogil=True, boundscheck=False)


@_jit
def _slide_tile(
    features, window_state, reference, start, norm_sum, watch, statistic, threshold, offset
):  # pragma: no cover - compiled
    """Slide the window over ``features`` (run rows ``start``, ``start + 1``, ...); write rows ``offset``... of
    ``statistic`` and ``threshold``; return the new squared-norm sum and the first crossing (-1 if none or not
    ``watch``). ``window_state`` is ``(ring, ring_norms, window_sum)`` and ``reference`` is ``(reference_sum,
    reference_term, n_reference, thresholds)``, as :func:`slide_rows` takes them."""
    ring, ring_norms, window_sum = window_state
    reference_sum, reference_term, n_reference, thresholds = reference
    window, width = ring.shape
    first = -1
    for k in range(features.shape[0]):
        run_row = start + k
        slot = run_row % window
        leaves = run_row >= window
        squared_norm = 0.0
        sum_squared = 0.0
        cross = 0.0
        for j in range(width):
            entering = np.float64(features[k, j])
            squared_norm += entering * entering
            if leaves:
                entering -= np.float64(ring[slot, j])
            total = window_sum[j] + entering
            window_sum[j] = total
            sum_squared += total * total
            cross += total * reference_sum[j]
            ring[slot, j] = features[k, j]
        if leaves:
            norm_sum += squared_norm - ring_norms[slot]
        else:
            norm_sum += squared_norm
        ring_norms[slot] = squared_norm
        size = np.float64(min(run_row + 1, window))
        level = min(run_row, window)
        threshold[offset + k] = thresholds[level]
        if size < 2.0:
            statistic[offset + k] = np.nan
            continue
        value = reference_term + (sum_squared - norm_sum) / (size * (size - 1.0)) - 2.0 * cross / (n_reference * size)
        statistic[offset + k] = value
        if watch and first < 0 and value > thresholds[level]:
            first = offset + k
    return norm_sum, first


@_jit
def reference_term(reference_sum, reference_norm_sum, n_reference):  # pragma: no cover - compiled
    """(||S_r||^2 - Q_r) / (n (n - 1)): the reference's part of the unbiased MMD^2 (fixed after ``fit``, so
    the monitor computes it once, not per call)."""
    total = 0.0
    for j in range(reference_sum.shape[0]):
        total += reference_sum[j] * reference_sum[j]
    return (total - reference_norm_sum) / (n_reference * (n_reference - 1.0))


#: ``first`` of :func:`slide_rows` when a row holds NaN or inf: nothing was changed.
NOT_FINITE = -2


@_jit
def slide_rows(
    rows,
    frequencies,
    offsets,
    scale,
    tile_rows,
    ring,
    ring_norms,
    window_sum,
    reference_sum,
    reference_term,
    n_reference,
    thresholds,
    start,
    norm_sum,
    watch,
):  # pragma: no cover - compiled
    """Slide the window over ``rows`` (float32 or float64, C-contiguous), embedded tile by tile with a dense RFF
    (:func:`rff_features`) after a cast of the tile to float32 (numpy's cast, bit for bit).
    ``reference_term`` is :func:`reference_term` of the reference.

    Returns ``(statistic, threshold, norm_sum, first)``: per row the statistic and the threshold in force, the
    window's new squared-norm sum, and the batch index of the first crossing (-1 if none or not ``watch``); if
    a value of ``rows`` is NaN or inf, ``first`` is :data:`NOT_FINITE` and nothing was changed (the caller
    words the error), so that a one-row update needs no separate check.
    """
    n_rows, width = rows.shape
    for i in range(n_rows):
        for j in range(width):
            if not np.isfinite(rows[i, j]):
                return np.empty(0), np.empty(0), norm_sum, NOT_FINITE
    statistic = np.empty(n_rows)
    threshold = np.empty(n_rows)
    step = max(1, min(tile_rows, n_rows))
    tile = np.empty((step, width), dtype=np.float32)
    projection = np.empty((step, frequencies.shape[1]), dtype=np.float32)
    features = np.empty((step, ring.shape[1]), dtype=np.float32)
    window_state = (ring, ring_norms, window_sum)
    reference = (reference_sum, reference_term, n_reference, thresholds)
    first = -1
    for begin in range(0, n_rows, step):
        count = min(n_rows, begin + step) - begin
        for i in range(count):
            for j in range(width):
                tile[i, j] = rows[begin + i, j]
        rff_features(tile[:count], frequencies, offsets, scale, projection[:count], features[:count])
        norm_sum, crossed = _slide_tile(
            features[:count], window_state, reference, start + begin, norm_sum, watch and first < 0, statistic,
            threshold, begin,
        )  # fmt: skip
        if first < 0:
            first = crossed
    return statistic, threshold, norm_sum, first


@_jit
def slide_features(
    features, ring, ring_norms, window_sum, reference_sum, reference_term, n_reference, thresholds, start, norm_sum,
    watch,
):  # pragma: no cover - compiled
    """:func:`slide_rows` for float32 ``features`` that another map embedded (finite: the map's output)."""
    statistic = np.empty(features.shape[0])
    threshold = np.empty(features.shape[0])
    window_state = (ring, ring_norms, window_sum)
    reference = (reference_sum, reference_term, n_reference, thresholds)
    norm_sum, first = _slide_tile(features, window_state, reference, start, norm_sum, watch, statistic, threshold, 0)
    return statistic, threshold, norm_sum, first
