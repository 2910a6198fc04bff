"""Where two samples differ: the witness function of the sketch's kernel, and the rows where it is extreme.

The MMD witness of samples A and B (Gretton et al. 2012, sec. 2.3; Lloyd & Ghahramani
2015) is ``f(x) = mean_i k(x, a_i) - mean_j k(x, b_j)``: positive where A has more
mass than B, negative where B has. For a random-feature kernel ``k(x, y) = z(x).z(y)``
it is ``z(x).(mu_A - mu_B)``, with the means already in every mean sketch, so it costs
one embedding and one dot product per row. :meth:`Witness.top_rows` finds the rows
of a source where it is most extreme in one pass of bounded memory: a per-chunk
top-k (:class:`TopRows`) that merges like any sketch through the engine.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import numpy as np

from .._base.blas import single_blas_thread
from .._base.validation import check_positive_int
from .._estimators import apply_to_rows
from ..engine import current_job_options, run_row_pass
from ..errors import InputError
from ..maps import FeatureMap
from ..sketches.base import load
from ..sketches.mean import MeanSketch
from ..typing import StorageOptions
from .effect import EffectSize, effect_of_sketches

__all__ = ["Witness", "TopRows", "witness", "WHICH"]

#: ``top_rows(which=...)``: the rows where A is most over-represented ("largest") or B is ("smallest").
WHICH = ("largest", "smallest")


class TopRows:
    """The k rows with the most extreme values seen so far: a partial that merges (top-k of the union).

    Ties are broken by the smaller global row index, so the k kept rows, and
    their order, do not depend on how the rows were split into chunks or in
    which order the partials merge.

    Parameters
    ----------
    k : int
        Rows kept.
    which : {"largest", "smallest"}
    rows : ndarray of int64
        Global row indices, most extreme first.
    values : ndarray of float64
        Their values.
    count : int
        Rows seen.

    Examples
    --------
    >>> import numpy as np
    >>> a = TopRows.of_values(np.array([0.1, 0.9, 0.5]), 0, k=2, which="largest")
    >>> b = TopRows.of_values(np.array([0.7, 0.9]), 3, k=2, which="largest")
    >>> merged = a.merge_many([b])
    >>> merged.rows.tolist(), merged.values.tolist(), merged.count
    ([1, 4], [0.9, 0.9], 5)
    """

    def __init__(self, k: int, which: str, rows: np.ndarray, values: np.ndarray, count: int) -> None:
        self.k, self.which, self.count = k, which, count
        self.rows = np.asarray(rows, dtype=np.int64)
        self.values = np.asarray(values, dtype=np.float64)

    @classmethod
    def of_values(cls, values: np.ndarray, row_offset: int, k: int, which: str, rows: np.ndarray | None = None):
        """The top ``k`` of one chunk's ``values`` (global rows ``row_offset + i``, or ``rows``)."""
        rows = row_offset + np.arange(values.shape[0], dtype=np.int64) if rows is None else rows
        keep = _most_extreme(values, rows, k, which)
        return cls(k, which, rows[keep], values[keep], int(values.shape[0]))

    def merge_many(self, others: list[TopRows]) -> TopRows:
        """The top k of the union of this partial and ``others``."""
        parts = [self, *others]
        values = np.concatenate([part.values for part in parts])
        rows = np.concatenate([part.rows for part in parts])
        keep = _most_extreme(values, rows, self.k, self.which)
        return TopRows(self.k, self.which, rows[keep], values[keep], sum(part.count for part in parts))

    def merge(self, other: TopRows) -> TopRows:
        """The top k of the union of two partials."""
        return self.merge_many([other])

    def __repr__(self) -> str:
        return f"TopRows(k={self.k}, which={self.which!r}, count={self.count})"


def _most_extreme(values: np.ndarray, rows: np.ndarray, k: int, which: str) -> np.ndarray:
    """Indices of the ``k`` most extreme ``values``, most extreme first, ties by the smaller row."""
    key = -values if which == "largest" else values
    if key.shape[0] > 4 * k:  # a partial sort first: O(n), then only the candidates are sorted
        threshold = np.partition(key, k - 1)[k - 1]
        candidates = np.flatnonzero(key <= threshold)
    else:
        candidates = np.arange(key.shape[0])
    order = np.lexsort((rows[candidates], key[candidates]))
    return candidates[order[:k]]


class Witness:
    """The witness ``f(x) = z(x).(mu_A - mu_B) / kbar`` of two samples sketched with one map, in kernel units.

    ``mu_A``, ``mu_B`` are the mean feature vectors and ``kbar`` the pooled mean of
    ``||z||^2`` (the features' estimate of ``k(x, x) = 1``; exactly 1 for sincos RFF),
    so ``f`` estimates ``mean_i k(x, a_i) - mean_j k(x, b_j)`` for the Gaussian kernel:
    between -1 and 1, positive where A is over-represented against B.

    Made by :func:`witness` from two mean sketches, or by
    :meth:`TwoSampleResult.witness` from a test.

    Parameters
    ----------
    feature_map : FeatureMap
        The fitted map of both sketches.
    mean_a, mean_b : ndarray of shape (D,)
        Mean feature vectors of A and B.
    kernel_diagonal : float, default=1.0
        ``kbar``.

    Attributes
    ----------
    direction : ndarray of shape (D,), float64
        ``(mu_A - mu_B) / kbar``: ``f(x) = z(x).direction``.
    n_features_in_ : int
        Width of the rows.

    References
    ----------
    Gretton, A. et al. (2012). A kernel two-sample test. JMLR 13, sec. 2.3.
    Lloyd, J. R. & Ghahramani, Z. (2015). Statistical model criticism using kernel two
    sample tests. NeurIPS.

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> rng = np.random.default_rng(0)
    >>> A, B = rng.normal(size=(2000, 1)), rng.normal(2.0, 1.0, size=(2000, 1))
    >>> rff = srf.RFF(n_features=1024, bandwidth=1.0).fit(A)
    >>> f = srf.witness(srf.sketch_array(A, rff), srf.sketch_array(B, rff))
    >>> values = f(np.array([[-1.0], [1.0], [3.0]]))
    >>> bool(values[0] > 0 > values[2]), values.dtype
    (True, dtype('float64'))
    >>> rows, top = f.top_rows(np.vstack([A, B]), k=3, which="smallest")  # most B-like rows
    >>> bool((rows >= 2000).all()), bool(top[0] <= top[1] <= top[2])
    (True, True)
    """

    def __init__(
        self, feature_map: FeatureMap, mean_a: np.ndarray, mean_b: np.ndarray, kernel_diagonal: float = 1.0
    ) -> None:
        self.feature_map = feature_map
        self.n_features_in_ = feature_map.n_features_in_
        self.direction = (np.asarray(mean_a, np.float64) - np.asarray(mean_b, np.float64)) / float(kernel_diagonal)
        self.direction.setflags(write=False)

    @classmethod
    def of_effect(cls, effect: EffectSize) -> Witness:
        """The witness of a test's :class:`~streamrff.twosample.effect.EffectSize`."""
        return cls(effect.feature_map, effect.mean_x, effect.mean_y, effect.kernel_diagonal)

    @single_blas_thread
    def values(self, rows: np.ndarray) -> np.ndarray:
        """``f`` of trusted, finite rows (no checks): float64, one value per row.

        The features' products with :attr:`direction` are summed as the features are made
        (for RFF maps with float32 phases, one compiled loop; others tile by tile), so no
        block of features is kept: a row's value is its float32 features' dot product with
        the direction to float32 rounding, whatever the chunking or thread count.
        """
        return self.feature_map._feature_dots(rows, self.direction)

    def __call__(self, X: Any, storage_options: StorageOptions = None) -> Any:
        """``f`` of rows: numpy in, numpy out; dask, xarray or a zarr path/URL in, a lazy dask array out.

        Raises
        ------
        InputError
            On rows of another width, or NaN/inf (in memory: at once; otherwise when computed).
        """
        return apply_to_rows(self.feature_map, X, self.values, storage_options, np.float64, None)

    def top_rows(
        self,
        source: Any,
        k: int = 20,
        which: str = "largest",
        **options: Any,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` rows of ``source`` where the witness is largest (or smallest), in one pass.

        Each task keeps its chunk's top k (global row indices and values); the partials
        merge as the top k of their union through the engine's tree reduction, so memory
        is bounded by a chunk plus k rows per partial, on a laptop or a cluster.

        Parameters
        ----------
        source : ndarray, dask Array, xarray DataArray, str/PathLike or RowSource
            The rows to rank (any source :func:`streamrff.sketch` reads).
        k : int, default=20
            Rows returned (all of them when the source has fewer).
        which : {"largest", "smallest"}, default="largest"
            ``"largest"``: where A is most over-represented against B; ``"smallest"``: where B is.
        **options
            The job options (``client``, ``storage_options``, ``progress``, ...), as for
            :func:`streamrff.sketch`; with ``on_invalid="skip"`` NaN/inf rows are never returned.

        Returns
        -------
        rows : ndarray of int64, shape (k,)
            Global row indices in ``source``, most extreme first (ties: smaller index first).
        values : ndarray of float64, shape (k,)
            The witness at those rows.

        Raises
        ------
        InputError
            On a bad ``k`` or ``which``, a source of another width, or NaN/inf rows with ``on_invalid="raise"``.
        """
        k = check_positive_int(k, "k")
        if which not in WHICH:
            raise InputError(f"which must be one of {WHICH}. Got {which!r}.")
        kernel = functools.partial(_top_rows_kernel, witness=self, k=k, which=which)
        job = current_job_options(**options)
        top = run_row_pass(source, kernel, self.direction.shape[0], self.n_features_in_, job, "the witness's map")
        return top.rows, top.values

    def __repr__(self) -> str:
        return f"Witness(n_features={self.direction.shape[0]}, n_features_in={self.n_features_in_})"


def _top_rows_kernel(
    rows: np.ndarray, row_offset: int, valid: np.ndarray | None, witness: Witness, k: int, which: str
) -> TopRows:
    indices = None if valid is None else row_offset + np.flatnonzero(valid).astype(np.int64)
    return TopRows.of_values(witness.values(rows), row_offset, k, which, indices)


def _as_mean_sketch(sketch: Any, name: str, storage_options: StorageOptions) -> MeanSketch:
    if isinstance(sketch, (str, bytes, os.PathLike)):
        sketch = load(sketch, storage_options=storage_options)
    if not isinstance(sketch, MeanSketch):
        raise InputError(
            f"{name} must be a MeanSketch or the path/URL of a saved mean sketch. Got "
            f"{getattr(sketch, 'kind', type(sketch).__name__)!r}; sketch the sample with streamrff.sketch "
            "(CLI: streamrff sketch)."
        )
    if sketch.count < 1:
        raise InputError(f"{name} is empty (0 rows); the witness needs the mean of at least one row.")
    return sketch


def witness(a: Any, b: Any, storage_options: StorageOptions = None) -> Witness:
    """The witness of sample A against sample B from their mean sketches (made with one map).

    Parameters
    ----------
    a, b : MeanSketch, str or PathLike
        Mean sketches of A and B (moments not needed), or the paths/URLs of saved ones.
    storage_options : dict, optional
        fsspec options for URLs.

    Returns
    -------
    Witness
        ``f(x) ~ mean_i k(x, a_i) - mean_j k(x, b_j)``.

    Raises
    ------
    InputError
        If an argument is not a mean sketch, or is empty.
    SketchMismatchError
        If the sketches come from different maps.

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> rng = np.random.default_rng(1)
    >>> A, B = rng.normal(size=(500, 2)), rng.normal(size=(500, 2))
    >>> rff = srf.RFF(n_features=256, bandwidth=1.0).fit(A)
    >>> srf.witness(srf.sketch_array(A, rff), srf.sketch_array(B, rff))
    Witness(n_features=256, n_features_in=2)
    """
    a, b = _as_mean_sketch(a, "a", storage_options), _as_mean_sketch(b, "b", storage_options)
    if a.fingerprint != b.fingerprint:
        a.check_compatible(b)
    return Witness.of_effect(effect_of_sketches(_without_moments(a), _without_moments(b)))


def _without_moments(sketch: MeanSketch) -> MeanSketch:
    """The sketch's sums alone (the witness needs no variance)."""
    if not sketch.has_moments:
        return sketch
    return MeanSketch(sketch.feature_map, sketch.count, sketch.feature_sum, sketch.squared_norm_sum, None)
