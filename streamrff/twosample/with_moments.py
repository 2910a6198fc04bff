"""The permutation pass that also sketches each sample's second moments (``two_sample_test(..., moments=True)``).

The permutation sums give the statistic and its exact null; the confidence interval of
MMD^2 needs the second moments of each sample (:mod:`streamrff.twosample.effect`). One
chunk kernel gives both, so the interval costs no second pass: its partial is the
tuple of the test's partial and, per map, the moment sketches of the chunk's X rows and
Y rows, merged element by element.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..maps import FeatureMap
from ..sketches.mean import MeanSketch, mean_sketch_of_chunk

__all__ = ["JoinedPartials", "with_moments_kernel"]


class JoinedPartials:
    """Several partials of one chunk, merged element by element (each with its own ``merge_many``).

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> rff = srf.RFF(n_features=8, bandwidth=1.0).fit(np.zeros((1, 1)))
    >>> a = JoinedPartials((srf.sketch_array(np.ones((2, 1)), rff),))
    >>> b = JoinedPartials((srf.sketch_array(np.zeros((3, 1)), rff),))
    >>> a.merge_many([b]).parts[0].count
    5
    """

    def __init__(self, parts: Sequence[Any]) -> None:
        self.parts = tuple(parts)

    def merge_many(self, others: Sequence[JoinedPartials]) -> JoinedPartials:
        """Merge each part with the same part of ``others``."""
        return JoinedPartials(
            part.merge_many([other.parts[index] for other in others]) for index, part in enumerate(self.parts)
        )


def _moment_sketches(rows: np.ndarray, feature_map: FeatureMap) -> MeanSketch:
    if rows.shape[0] == 0:
        return MeanSketch.empty(feature_map, moments=True)
    return mean_sketch_of_chunk(rows, feature_map, moments=True)


def with_moments_kernel(
    rows: np.ndarray,
    row_offset: int,
    valid: np.ndarray | None,
    kernel: Callable[[np.ndarray, int, np.ndarray | None], Any],
    feature_maps: tuple[FeatureMap, ...],
    n_x: int,
    columns: Sequence[Sequence[int] | None] | None = None,
) -> JoinedPartials:
    """``kernel``'s partial, then per map the moment sketches of the chunk's X rows and of its Y rows.

    Runs with ``on_invalid="require"`` (as the permutation kernels): the chunk's rows are all
    here, so the global row ``row_offset + i`` is in X when it is below ``n_x``. ``columns[m]``,
    if not None, are the input columns map m reads (the per-column maps of the aggregated test on tables).
    """
    split = int(np.clip(n_x - row_offset, 0, rows.shape[0]))
    moments = []
    for index, feature_map in enumerate(feature_maps):
        column = None if columns is None else columns[index]
        part = rows if column is None else rows[:, list(column)]
        moments.extend((_moment_sketches(part[:split], feature_map), _moment_sketches(part[split:], feature_map)))
    return JoinedPartials((kernel(rows, row_offset, valid), *moments))
