"""Per-column bin counts of two samples in one pass: the data of the per-column tests' null.

:func:`streamrff.marginal_tests` tests each column from its values' quantile bins. Before the
pass, :func:`quantile_bins` takes each column's edges from the pooled row sample; in the pass,
every chunk adds, per column and bin, the number of A rows, the number of B rows (int64, exact)
and the pooled sum of the values (float64), in one compiled loop over the chunk
(:func:`bin_chunk`); the partial, :class:`ColumnBins`, merges by addition.

Finding a value's bin costs O(1) on average: a lookup table of ``4 m`` equal cells over
``[e_0, e_{m-1}]`` (the column's m edges) holds, for each cell, the range of bins its values
can fall in, and a binary search inside that range (usually 1-2 bins wide; a few steps where
the quantiles crowd, e.g. heavy tails) finishes it exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numba
import numpy as np

from .compiled import jit

__all__ = ["BinEdges", "ColumnBins", "bin_chunk", "column_median_heuristics", "quantile_bins"]

#: Cells of a column's lookup table per edge.
CELLS_PER_EDGE = 4


@dataclass(frozen=True, eq=False)
class BinEdges:
    """Each column's sorted distinct bin edges and their lookup table (padded to the widest column).

    Column c has ``n_edges[c] = m`` edges ``edges[c, :m]`` and ``m + 1`` bins: bin k holds the
    values with exactly k edges ``<= value`` (bin 0 below the first edge, bin m from the last
    edge up; NaN goes to bin 0).
    """

    edges: np.ndarray  # (C, M) float64
    n_edges: np.ndarray  # (C,) int64
    lookup: np.ndarray  # (C, G + 1) int64: lookup[c, g] = #{edges whose cell < g}
    cell_scale: np.ndarray  # (C,) float64: cells per unit of value

    @property
    def n_bins(self) -> np.ndarray:
        """Bins per column, ``n_edges + 1``."""
        return self.n_edges + 1


@jit(parallel=True, nogil=True)  # one column per thread: each column's median is its own
def _sorted_distance_medians(sorted_columns, out):  # pragma: no cover - compiled
    n_columns, n_rows = sorted_columns.shape
    for column in numba.prange(n_columns):
        values = sorted_columns[column]
        distances = np.empty(n_rows * (n_rows - 1) // 2)
        count = 0
        for i in range(n_rows):
            for j in range(i + 1, n_rows):
                distance = values[j] - values[i]  # sorted: |x_j - x_i|, correctly rounded as pdist's
                if distance > 0:
                    distances[count] = distance
                    count += 1
        out[column] = np.median(distances[:count]) if count else 1.0


def column_median_heuristics(sample: np.ndarray) -> np.ndarray:
    """Each column's median heuristic alone: :func:`streamrff._base.sampling.median_heuristic` of ``sample[:, [c]]``.

    The median of the column's positive pairwise distances (1.0 for a constant column), computed
    for every column at once in one compiled loop, a column per thread: the 16 columns of a
    1 000-row sample take a few hundredths of a second instead of the tenths that 16 ``pdist``
    calls and medians of 500 000 distances take.

    Examples
    --------
    >>> import numpy as np
    >>> column_median_heuristics(np.array([[0.0, 5.0], [1.0, 5.0], [3.0, 5.0]])).tolist()
    [2.0, 1.0]
    """
    values = np.sort(np.asarray(sample, dtype=np.float64), axis=0).T.copy()
    out = np.empty(values.shape[0])
    if values.shape[1] < 2:
        out[:] = 1.0
        return out
    _sorted_distance_medians(values, out)
    return out


def _cells(values: np.ndarray, low: float, scale: float, n_cells: int) -> np.ndarray:
    # The same float operations as the compiled kernel's, so both agree on every edge's cell.
    return np.minimum(((values - low) * scale).astype(np.int64), n_cells - 1)


def quantile_bins(sample: np.ndarray, n_bins: int) -> BinEdges:
    """Edges of ``n_bins`` quantile bins of each column of ``sample`` (duplicates merged).

    The edges are sample values (quantiles at levels ``0, 1/n_bins, ..., 1``, lower order
    statistic), so a column of fewer than ``n_bins`` distinct values gets one bin per value
    seen in the sample.

    Examples
    --------
    >>> bins = quantile_bins(np.array([[0.0], [1.0], [1.0], [2.0]]), 8)
    >>> bins.edges[0, : bins.n_edges[0]].tolist(), int(bins.n_bins[0])
    ([0.0, 1.0, 2.0], 4)
    """
    sample = np.asarray(sample, dtype=np.float64)
    levels = np.linspace(0.0, 1.0, n_bins + 1)
    per_column = [np.unique(np.quantile(sample[:, c], levels, method="lower")) for c in range(sample.shape[1])]
    width = max(len(edges) for edges in per_column)
    n_cells = CELLS_PER_EDGE * width
    edges = np.zeros((len(per_column), width))
    lookup = np.zeros((len(per_column), n_cells + 1), dtype=np.int64)
    scale = np.zeros(len(per_column))
    for c, column_edges in enumerate(per_column):
        edges[c, : len(column_edges)] = column_edges
        edges[c, len(column_edges) :] = column_edges[-1]
        low, high = column_edges[0], column_edges[-1]
        if high > low:
            scale[c] = n_cells / (high - low)
            lookup[c] = np.searchsorted(_cells(column_edges, low, scale[c], n_cells), np.arange(n_cells + 1))
    return BinEdges(edges, np.array([len(e) for e in per_column], dtype=np.int64), lookup, scale)


@jit(nogil=True, boundscheck=False, error_model="numpy")
def _bin_rows(values, first_column, a_rows, edges, n_edges, lookup, cell_scale, counts, sums):  # pragma: no cover
    n_cells = lookup.shape[1] - 1
    for i in range(values.shape[0]):
        sample = 0 if i < a_rows else 1
        for c in range(edges.shape[0]):
            value = np.float64(values[i, first_column + c])
            last = n_edges[c] - 1
            if not value >= edges[c, 0]:  # below the first edge, or NaN
                bin_index = 0
            elif value >= edges[c, last]:
                bin_index = last + 1
            else:
                cell = np.int64((value - edges[c, 0]) * cell_scale[c])
                if cell > n_cells - 1:
                    cell = n_cells - 1
                low = lookup[c, cell]
                high = lookup[c, cell + 1]
                while low < high:  # the number of edges <= value lies in [lookup[cell], lookup[cell + 1]]
                    middle = (low + high) // 2
                    if edges[c, middle] <= value:
                        low = middle + 1
                    else:
                        high = middle
                bin_index = low
            counts[sample, c, bin_index] += 1
            sums[c, bin_index] += value


@dataclass(frozen=True, eq=False)
class ColumnBins:
    """Per column and bin: A rows, B rows and the pooled sum of the values. Merges by addition.

    Attributes
    ----------
    counts : ndarray of int64, shape (2, C, K)
        ``counts[0]`` A's rows per column and bin, ``counts[1]`` B's (K: the widest column's bins).
    sums : ndarray of float64, shape (C, K)
        The sum of the values of both samples' rows in each bin.
    """

    counts: np.ndarray
    sums: np.ndarray

    def merge(self, other: ColumnBins) -> ColumnBins:
        return self.merge_many([other])

    def merge_many(self, others: Sequence[ColumnBins]) -> ColumnBins:
        counts, sums = self.counts.copy(), self.sums.copy()
        for other in others:
            counts += other.counts
            sums += other.sums
        return ColumnBins(counts, sums)

    def shows_non_finite(self) -> bool:
        """Whether a non-finite value was binned (its bin's sum is then NaN or inf)."""
        return not bool(np.isfinite(self.sums).all())


def bin_chunk(values: np.ndarray, first_column: int, a_rows: int, bins: BinEdges) -> ColumnBins:
    """Bin columns ``first_column ..`` of a chunk's ``values``; its first ``a_rows`` rows are A's.

    Examples
    --------
    >>> bins = quantile_bins(np.array([[0.0], [1.0], [2.0]]), 4)
    >>> partial = bin_chunk(np.array([[-5.0], [0.5], [1.0], [9.0]]), 0, 2, bins)
    >>> partial.counts[:, 0].tolist(), partial.sums[0].tolist()
    ([[1, 1, 0, 0], [0, 0, 1, 1]], [-5.0, 0.5, 1.0, 9.0])
    """
    n_columns, width = bins.edges.shape[0], int(bins.n_edges.max()) + 1
    counts = np.zeros((2, n_columns, width), dtype=np.int64)
    sums = np.zeros((n_columns, width))
    rows = values if values.dtype in (np.float32, np.float64) else values.astype(np.float64)
    _bin_rows(
        np.ascontiguousarray(rows), first_column, a_rows, bins.edges, bins.n_edges, bins.lookup,
        bins.cell_scale, counts, sums,
    )  # fmt: skip
    return ColumnBins(counts, sums)
