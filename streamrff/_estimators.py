"""Plumbing shared by the estimators (:class:`~streamrff.KernelPCA`, :class:`~streamrff.KernelKMeans`,
:class:`~streamrff.KernelRidge`): the map an estimator builds from its parameters, the sketch that
``fit_from_sketch`` takes as an object or as the path of a saved one, and ``transform``/``predict``
on any source."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ._base.validation import check_rows, check_width, is_in_memory, validate_estimator_input
from .errors import InputError
from .maps import KJL, RFF, FeatureMap
from .sketches.base import Sketch, load
from .sources.rows import open_source
from .typing import Seed, StorageOptions


def initial_feature_map(
    method: str, n_features: int, bandwidth: float | str, seed: Seed, n_landmarks: int | None = None
) -> FeatureMap:
    """The unfitted map of an estimator's parameters: ``RFF(n_features)``, or ``KJL`` for ``method="kjl"``.

    Examples
    --------
    >>> initial_feature_map("kjl", 16, 2.0, 0, n_landmarks=50)
    KJL(bandwidth=2.0, n_components=16, n_landmarks=50)
    """
    if method == "kjl":
        return KJL(n_landmarks=n_landmarks, n_components=n_features, bandwidth=bandwidth, seed=seed)
    return RFF(n_features=n_features, bandwidth=bandwidth, seed=seed)


def sketch_or_load(
    sketch: Any, kinds: tuple[type[Sketch], ...], storage_options: StorageOptions, takes: str, needs: str
) -> Any:
    """``sketch`` itself when it is one of ``kinds``, else the sketch saved at the path or URL ``sketch``.

    ``takes`` says what ``fit_from_sketch`` takes, ``needs`` which kinds the estimator needs; each
    names the fix in the InputError raised for another object or another kind of saved sketch.

    Examples
    --------
    >>> from streamrff.sketches import MeanSketch
    >>> sketch_or_load(3, (MeanSketch,), None, "a MeanSketch or the path/URL of a saved one", "A mean sketch")
    Traceback (most recent call last):
    ...
    streamrff.errors.InputError: fit_from_sketch takes a MeanSketch or the path/URL of a saved one. Got int.
    """
    if isinstance(sketch, kinds):
        return sketch
    if not isinstance(sketch, (str, bytes)) and not hasattr(sketch, "__fspath__"):
        raise InputError(f"fit_from_sketch takes {takes}. Got {type(sketch).__name__}.")
    loaded = load(sketch, storage_options=storage_options)
    if not isinstance(loaded, kinds):
        raise InputError(f"{needs}. Got a {loaded.kind!r} sketch.")
    return loaded


def apply_to_rows(
    estimator: Any,
    X: Any,
    rows_function: Callable[[np.ndarray], np.ndarray],
    storage_options: StorageOptions,
    dtype: Any,
    n_columns: int | None,
) -> Any:
    """``rows_function`` of the rows of ``X``: numpy in, numpy out; any other source gives a lazy dask array.

    In-memory rows are validated at once against the fitted ``estimator`` (width, NaN/inf).
    Other sources are checked for width here and read chunk by chunk when the result is
    computed, each chunk's NaN/inf rows raising then. ``n_columns`` is the width of the result,
    ``None`` for one value per row. ``rows_function`` must be cheap to ship to workers (a
    function of the fitted state, not of the training data).

    Examples
    --------
    >>> import dask.array as da, numpy as np, streamrff as srf
    >>> X = np.random.default_rng(0).normal(size=(40, 3))
    >>> rff = srf.RFF(n_features=8, bandwidth=1.0).fit(X)
    >>> lazy = apply_to_rows(rff, da.from_array(X, chunks=10), rff.transform, None, np.float32, 8)
    >>> bool(np.array_equal(lazy.compute(), apply_to_rows(rff, X, rff.transform, None, np.float32, 8)))
    True
    """
    if is_in_memory(X):
        return rows_function(validate_estimator_input(estimator, X, reset=False))
    source = open_source(X, storage_options=storage_options)
    source.check_chunks_stored()  # a chunk missing from its store: refused before any work
    array = source.array
    check_width(array, estimator.n_features_in_, type(estimator).__name__)
    if n_columns is None:
        return array.map_blocks(_checked_block, rows_function, dtype=dtype, drop_axis=1, chunks=(array.chunks[0],))
    return array.map_blocks(_checked_block, rows_function, dtype=dtype, chunks=(array.chunks[0], (n_columns,)))


#: What a chunk's NaN/inf rows error says: where the first one is in the whole source, and the fix.
_CHUNK_FIX = (
    "Row {first} of this chunk is row {row:,} of X. Drop or impute those rows, or skip them (CLI: --on-invalid skip)."
)


def _checked_block(
    block: np.ndarray, rows_function: Callable[[np.ndarray], np.ndarray], block_info: dict | None = None
) -> np.ndarray:
    if not block.shape[0]:
        return rows_function(block.astype(np.float64))
    offset = block_info[0]["array-location"][0][0] if block_info else 0  # the chunk's first row in the source
    return rows_function(check_rows(block, "X", allow_empty=True, fix=_CHUNK_FIX, row_offset=offset))
