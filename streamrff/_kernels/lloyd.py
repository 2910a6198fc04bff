"""One compiled call per chunk for a Lloyd step of RFF kernel k-means (float32 features).

Per row tile, :func:`lloyd_chunk` embeds the rows (:func:`streamrff._kernels.sincos.rff_features`,
or :func:`streamrff._kernels.sorf.structured_rff_features` for ``RFF(structured=True)``:
the features :meth:`RFF.transform` returns, bit for bit), scores them against
the k centres (``s_j = ||c_j||^2 - 2 z.c_j``; the float32 products by
:func:`streamrff._kernels.rowdot.row_dots` up to ``MAX_COLUMNS`` centres, 2x
OpenBLAS's GEMM at k = 10, by BLAS beyond), takes the
lowest and second-lowest score of every row in one loop, and adds the row to
its cluster's float32 tile sum (D additions; the numpy path's one-hot GEMM
costs 2 k D flops a row), tile sums accumulated in float64. The features of a
tile live in one cache-sized scratch buffer; nothing of size rows x D is
written, and the call holds the GIL once.

Exact labels. A row whose two lowest float32 scores differ by at most the
bound of :class:`~streamrff.sketches.cluster._NearestCentres` (``4 e(z)``, from
the tile's largest ``||z||``) is rescored in float64 from the same float32
features, against only the centres whose float32 score is within the bound of
its lowest (:func:`exact_labels`, which the numpy path uses too), so labels are
those of float64 arithmetic (ties to the lowest index); the call counts those
rows. With the previous iteration's centres, only rows whose margin is within
what the centres' move can change are scored against them (a second product
over those rows, gathered), to count the rows that changed cluster.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .compiled import jit
from .rowdot import MAX_COLUMNS, row_dots
from .sincos import rff_features
from .sorf import structured_rff_features

__all__ = ["exact_labels", "lloyd_chunk", "lloyd_step"]

_jit = jit(nogil=True, boundscheck=False, error_model="numpy")

#: Once more than this fraction of a tile's rows may have changed cluster, the chunk's later tiles
#: are scored against the current and the previous centres in one product.
FULL_RESCORE_FRACTION = 0.25


@_jit
def exact_labels(  # pragma: no cover - compiled
    features, rows, scores, column, bound, centers, center_norms, out, slots
):
    """``out[slots[a]] = argmin_j ||c_j||^2 - 2 z.c_j`` in float64 for ``z = features[rows[a]]``
    (ties to the lowest index).

    Only the centres whose float32 score ``scores[rows[a], column + j]`` (norms included) is
    within ``bound`` of the row's lowest can be float64's nearest (each float32 score is off
    by at most a quarter of the bound), so only those are rescored (one BLAS ddot each).
    ``centers``: float64 (k, D) C-contiguous; ``center_norms``: float64 (k,).
    """
    k = centers.shape[0]
    wide = np.empty(centers.shape[1])
    for a in range(rows.shape[0]):
        i = rows[a]
        source = features[i]
        for j in range(wide.shape[0]):
            wide[j] = source[j]
        lowest = np.float32(np.inf)
        for c in range(k):
            lowest = min(lowest, scores[i, column + c])
        threshold = lowest + bound
        best, label = np.inf, 0
        for c in range(k):
            if scores[i, column + c] <= threshold:
                value = center_norms[c] - 2.0 * np.dot(wide, centers[c])
                if value < best:
                    best, label = value, c
        out[slots[a]] = label


@_jit
def _lowest_two(scores):  # pragma: no cover - compiled
    """(index of the lowest of ``scores``, lowest, second lowest); ties to the lowest index.
    Branch-free (min, max and a select per centre): labels of unclustered rows are unpredictable."""
    label, lowest, second = 0, np.float32(np.inf), np.float32(np.inf)
    for c in range(scores.shape[0]):
        value = scores[c]
        second = min(second, max(value, lowest))
        label = c if value < lowest else label
        lowest = min(lowest, value)
    return label, lowest, second


@_jit
def _score(block, scaled, scaled_rows, norms, scores):  # pragma: no cover - compiled
    """``scores = block @ scaled + norms``; ``scaled_rows`` is ``scaled.T`` C-contiguous: up to
    :data:`~streamrff._kernels.rowdot.MAX_COLUMNS` centres :func:`~streamrff._kernels.rowdot.row_dots` is faster
    than BLAS (2x at k = 10, D = 1024)."""
    if norms.shape[0] <= MAX_COLUMNS:
        row_dots(block, scaled_rows, scores)
    else:
        np.dot(block, scaled, scores)
    for i in range(scores.shape[0]):
        for c in range(norms.shape[0]):
            scores[i, c] += norms[c]


@_jit
def _embed_rows(rows, frequencies, signs, permutation, gaussian, row_scales, offsets, scale, projection, out):
    """``out`` = the float32 features of ``rows``: structured when ``row_scales`` is not empty."""
    if row_scales.shape[0]:
        structured_rff_features(rows, signs, permutation, gaussian, row_scales, offsets, scale, out)
    else:
        rff_features(rows, frequencies, offsets, scale, projection, out)


@_jit
def lloyd_chunk(
    rows,
    frequencies,
    signs,
    permutation,
    gaussian,
    row_scales,
    offsets,
    scale,
    tile_rows,
    scaled,
    norms32,
    centers,
    center_norms,
    bound_slope,
    bound_offset,
    previous_scaled,
    previous_norms32,
    previous_centers,
    previous_norms,
    previous_slope,
    previous_offset,
    move_slope,
    move_offset,
    both_scaled,
    both_norms32,
    labels,
    counts,
    sums,
):  # pragma: no cover - compiled
    """Label ``rows`` and add them to ``counts`` and ``sums``; return
    ``(sum of ||z||^2, rows moved since the previous centres, rows rescored in float64)``.

    ``rows``: float32 (n, d) C-contiguous; ``frequencies``: float32 (d, m), or (0, m) for a
    structured map, whose ``signs``, ``permutation``, ``gaussian`` and ``row_scales`` (the
    arrays of :func:`streamrff._kernels.sorf.structured_params`; all empty for a dense map)
    give its frequencies instead; ``offsets``: float32 (m,) for the cosphase variant, length 0 for sincos;
    ``scaled``: float32 (D, k), ``-2 c`` rounded; ``norms32``: float32 (k,);
    ``centers``: float64 (k, D); ``center_norms``: float64 (k,). The margin
    bound of a row is ``bound_slope * L + bound_offset`` with ``L`` its tile's
    largest ``||z||``. ``previous_*``: the same for the previous centres (k = 0
    arrays when there are none); a row may have moved if its margin is within
    ``bound + move_slope * L + move_offset``. ``both_scaled``, ``both_norms32``:
    ``scaled`` and ``previous_scaled`` side by side (D, 2k), and their norms:
    once a tile has more than :data:`FULL_RESCORE_FRACTION` of its rows as
    candidates, the chunk's later tiles are scored against both in one product
    (gathering the candidates for a second one copies each, 4 KiB at D = 1024,
    and measured slower when most rows are candidates). ``labels``: int64 (n,),
    ``counts``: int64 (k,),
    ``sums``: float64 (k, D), all written into.
    """
    n = rows.shape[0]
    m = frequencies.shape[1]
    width = scaled.shape[0]
    k = centers.shape[0]
    k_previous = previous_scaled.shape[1]
    tile = min(tile_rows, n)
    projection = np.empty((0 if row_scales.shape[0] else tile, m), np.float32)
    features = np.empty((tile, width), np.float32)
    single_scores = np.empty((tile, k), np.float32)
    both_scores = np.empty((tile, 2 * k if k_previous else 1), np.float32)
    score_both = False
    sincos = offsets.shape[0] == 0
    tile_sums = np.zeros((k, width), np.float32)
    scaled_rows = np.ascontiguousarray(scaled.T)
    previous_rows = np.ascontiguousarray(previous_scaled.T)
    both_rows = np.ascontiguousarray(both_scaled.T)
    candidates = np.empty((tile, width), np.float32)
    candidate_rows = np.empty(tile, np.int64)
    previous_scores = np.empty((tile, max(k_previous, 1)), np.float32)
    tile_labels = np.empty(tile, np.int64)
    before_labels = np.empty(tile, np.int64)
    margins = np.empty(tile, np.float32)
    unsure = np.empty(tile, np.int64)
    unsure_rows = np.empty(tile, np.int64)
    squared_norm_sum = 0.0
    n_moved = 0
    n_rescored = 0
    for start in range(0, n, tile):
        t = min(n, start + tile) - start
        block = features[:t]
        _embed_rows(
            rows[start : start + t], frequencies, signs, permutation, gaussian, row_scales, offsets, scale,
            projection[:t], block,
        )  # fmt: skip
        if sincos:
            # cos^2 + sin^2 = 1: every row's ||z||^2 is m scale^2, up to float32 rounding of the
            # features (relative 2^-22 at most, covered by the 1e-5 margin on the length).
            squared_norm_sum += t * np.float64(m) * np.float64(scale) ** 2
            length = np.float32(np.sqrt(np.float64(m)) * np.float64(scale) * (1.0 + 1e-5))
        else:
            largest = np.float32(0.0)
            for i in range(t):
                norm = np.dot(block[i], block[i])  # BLAS sdot
                largest = max(largest, norm)
                squared_norm_sum += np.float64(norm)
            length = np.float32(np.sqrt(largest))
        bound = length * bound_slope + bound_offset
        moved_bound = bound + length * move_slope + move_offset
        previous_bound = length * previous_slope + previous_offset
        scores = both_scores[:t] if score_both else single_scores[:t]
        if score_both:
            _score(block, both_scaled, both_rows, both_norms32, scores)
        else:
            _score(block, scaled, scaled_rows, norms32, scores)
        # Float32 labels and margins; the rows too close to call are rescored in float64 at once.
        n_unsure = 0
        for i in range(t):
            label, lowest, second = _lowest_two(scores[i, :k])
            tile_labels[i] = label
            margins[i] = second - lowest
            if margins[i] <= bound:
                unsure[n_unsure] = i
                n_unsure += 1
        if n_unsure:
            slots = unsure[:n_unsure]
            exact_labels(block, slots, scores, 0, bound, centers, center_norms, tile_labels, slots)
            n_rescored += n_unsure
        n_candidates = 0
        n_unsure = 0
        for i in range(t):
            label = tile_labels[i]
            labels[start + i] = label
            counts[label] += 1
            destination, source = tile_sums[label], block[i]
            for j in range(width):
                destination[j] += source[j]
            if k_previous and margins[i] <= moved_bound:
                candidate_rows[n_candidates] = i
                if score_both:  # the previous centres' scores are in the same product's columns k..2k
                    before, lowest, second = _lowest_two(scores[i, k:])
                    before_labels[n_candidates] = before
                    if second - lowest <= previous_bound:
                        unsure[n_unsure] = n_candidates
                        n_unsure += 1
                else:
                    candidates[n_candidates] = source
                n_candidates += 1
        for c in range(k):
            for j in range(width):
                sums[c, j] += np.float64(tile_sums[c, j])
                tile_sums[c, j] = 0.0
        if n_candidates and not score_both:
            gathered, gathered_scores = candidates[:n_candidates], previous_scores[:n_candidates]
            _score(gathered, previous_scaled, previous_rows, previous_norms32, gathered_scores)
            for i in range(n_candidates):
                before, lowest, second = _lowest_two(gathered_scores[i])
                before_labels[i] = before
                if second - lowest <= previous_bound:
                    unsure[n_unsure] = i
                    n_unsure += 1
            if n_unsure:
                slots = unsure[:n_unsure]
                exact_labels(
                    gathered, slots, gathered_scores, 0, previous_bound,
                    previous_centers, previous_norms, before_labels, slots,
                )  # fmt: skip
        elif n_unsure:  # both at once: the unsure candidates' rows of the tile, rescored against the previous centres
            slots = unsure[:n_unsure]
            for a in range(n_unsure):
                unsure_rows[a] = candidate_rows[slots[a]]
            exact_labels(
                block, unsure_rows[:n_unsure], scores, k, previous_bound,
                previous_centers, previous_norms, before_labels, slots,
            )  # fmt: skip
        for i in range(n_candidates):
            if before_labels[i] != tile_labels[candidate_rows[i]]:
                n_moved += 1
        if n_candidates > FULL_RESCORE_FRACTION * t:
            score_both = True  # most rows may move: score the chunk's later tiles against both at once
    return squared_norm_sum, n_moved, n_rescored


def _kernel_array(array: np.ndarray, dtype: Any, copy: bool = True) -> np.ndarray:
    """A writeable C-contiguous array: every array argument of :func:`lloyd_chunk` has one numba
    type whatever the caller's layout or flags (read-only and strided arrays are other types,
    each of which would compile another specialisation, seconds in the middle of a fit). The
    small arrays (centres, norms) are always copied; ``copy=False`` (the rows) copies only
    when the array is not already writeable and C-contiguous."""
    if copy:
        return np.array(array, dtype=dtype, order="C", copy=True)
    array = np.ascontiguousarray(array, dtype=dtype)
    return array if array.flags.writeable else array.copy()


def lloyd_step(
    rows: np.ndarray,
    feature_map: Any,
    tile_rows: int,
    current: Any,
    previous: Any = None,
    move: tuple[float, float] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float, int, int]:
    """Run :func:`lloyd_chunk` on trusted rows of a fitted RFF map.

    ``current`` and ``previous`` are :class:`~streamrff.sketches.cluster._NearestCentres` of
    one block each (``previous`` None: no move count); ``move`` is ``(shift, norm_change)``.
    Returns ``(labels, counts, sums, sum of ||z||^2, rows moved, rows rescored)``.
    """
    centers = current.exact_blocks[0]  # float64, C-contiguous, writeable
    k, width = centers.shape
    if previous is None:
        previous_args = (np.empty((width, 0), np.float32), np.empty(0, np.float32), np.empty((0, width)), np.empty(0))
        previous_args += (np.float32(0.0),) * 4
        previous_args += (np.empty((width, 0), np.float32), np.empty(0, np.float32))
    else:
        previous_args = (
            _kernel_array(previous.scaled, dtype=np.float32),
            _kernel_array(previous.norms32, dtype=np.float32),
            previous.exact_blocks[0],
            _kernel_array(previous.block_norms[0], dtype=np.float64),
        )
        previous_args += tuple(np.float32(value) for value in (previous.slope, previous.offset, *move))
        previous_args += (
            _kernel_array(np.hstack([current.scaled, previous.scaled]), np.float32),
            _kernel_array(np.concatenate([current.norms32, previous.norms32]), np.float32),
        )
    labels = np.empty(rows.shape[0], np.int64)
    counts = np.zeros(k, np.int64)
    sums = np.zeros((k, width))
    frequencies, offsets, scale = feature_map._float32_kernel_args()
    squared_norm_sum, n_moved, n_rescored = lloyd_chunk(
        _kernel_array(rows, np.float32, copy=False),
        frequencies,
        *feature_map._structure_args(),
        offsets,
        scale,
        int(tile_rows),
        _kernel_array(current.scaled, dtype=np.float32),
        _kernel_array(current.norms32, dtype=np.float32),
        centers,
        _kernel_array(current.block_norms[0], dtype=np.float64),
        np.float32(current.slope),
        np.float32(current.offset),
        *previous_args,
        labels,
        counts,
        sums,
    )
    return labels, counts, sums, float(squared_norm_sum), int(n_moved), int(n_rescored)
