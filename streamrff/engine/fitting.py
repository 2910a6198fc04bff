"""Fitting a map on the seeded row sample of its sources, in one pass that reads only the sampled chunks.

The sample is the bottom-k rows by a keyed hash of the global row index (a :class:`LandmarkSketch`,
whose chunk kernel the pass runs), so it does not depend on the chunking, the number of workers or the
order in which chunks are read, and it is the sample ``feature_map.fit`` takes on the rows in memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from sklearn.base import clone

from .._base.memory import check_sizes_fit
from .._base.sampling import bottom_k, row_keys
from ..errors import InputError
from ..maps import RFF, FeatureMap
from ..sketches.landmark import LandmarkSketch
from ..sources.rows import RowSource, open_source, open_sources
from .connection import connect
from .options import JobOptions, current_job_options
from .run import run_chunks
from .tasks import memory_per_thread

__all__ = ["fit_map", "fit_map_and_sample", "landmark_sample"]


def landmark_sample(
    sources: Sequence[RowSource], k: int, seed: int, options: JobOptions | None = None
) -> LandmarkSketch:
    """The bottom-``k`` row sample of the pooled sources by keyed hash of the global row index.

    Keys depend only on row indices, so the driver first finds the ``k``
    smallest keys in blocks (no data read), then reads only the chunks that
    hold those rows; non-finite rows are never sampled. ``options`` are the
    job's (default: those in force); the sample pass skips non-finite rows
    and keeps no checkpoint.
    """
    options = (current_job_options() if options is None else options).replace(on_invalid="skip", checkpoint=None)
    sources = [source if isinstance(source, RowSource) else open_source(source) for source in sources]
    for source in sources:  # before the keys of every row are drawn: a source of missing chunks fails at once
        source.check_chunks_stored()
    n_total = sum(source.shape[0] for source in sources)
    threshold = _kth_smallest_key(seed, n_total, k)

    skipped: list[int] = []

    def holds_sampled_row(start: int, stop: int) -> bool:
        holds = bool((row_keys(seed, start, stop) <= threshold).any())
        if not holds:
            skipped.append(start)
        return holds

    kernel = LandmarkSketch.chunk_job(k, seed).kernel
    sample = run_chunks(sources, kernel, options, chunk_filter=holds_sampled_row)
    if skipped and not (sample.keys.shape[0] == k and sample.keys[-1] <= threshold):
        # More non-finite rows among the candidates than spare keys: the k smallest finite
        # keys may lie in chunks that were skipped, so read them all.
        sample = run_chunks(sources, kernel, options)
    return sample


def _kth_smallest_key(seed: int, n_total: int, k: int, block: int = 2**22) -> np.uint64:
    # Keep a few extra keys so that rows skipped as non-finite can be replaced by the next ones.
    keep = min(n_total, 2 * k + 64)
    best = np.empty(0, dtype=np.uint64)
    for start in range(0, n_total, block):
        keys = np.concatenate([best, row_keys(seed, start, min(n_total, start + block))])
        best = keys[bottom_k(keys, keep)]
    return best[-1]


def fit_map(feature_map: FeatureMap, arrays: Sequence[Any], **options: Any) -> FeatureMap:
    """A fitted copy of ``feature_map``: itself if already fitted, else fitted on the seeded row sample.

    With several sources the rows are pooled in order (global row indices run
    through the first source, then the second, ...) and ONE seeded bottom-k
    sample is drawn from the pool, so the median bandwidth (and K-JL's
    landmarks) favour no source. The sample is the same bottom-k sample that
    ``feature_map.fit`` takes on the stacked rows in memory, so both paths
    give the same fitted map.

    Parameters
    ----------
    feature_map : FeatureMap
        A fitted map is returned as is (after a width check).
    arrays : sequence of sources
        Numpy, dask or xarray arrays, zarr paths/URLs or opened sources
        (:func:`streamrff.sources.open_source`), of the same width.
    **options
        The job options (:class:`~streamrff.engine.JobOptions`: ``client``,
        ``storage_options``, ``progress``, ``allow_missing_chunks``, ...) for
        the sampling pass; default: those in force (:func:`~streamrff.job_options`).

    Returns
    -------
    FeatureMap

    Raises
    ------
    InputError
        If the sources differ in width, a fitted map expects another width, or the map
        cannot fit in a task thread's memory (the message gives the largest width that fits).

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> rng = np.random.default_rng(0)
    >>> A, B = rng.normal(size=(500, 3)), rng.normal(size=(300, 3))
    >>> pooled = srf.fit_map(srf.RFF(n_features=64, bandwidth="median"), [A, B])
    >>> pooled.fingerprint == srf.RFF(n_features=64, bandwidth="median").fit(np.vstack([A, B])).fingerprint
    True
    """
    if not isinstance(feature_map, FeatureMap):
        raise InputError(f"feature_map must be a streamrff FeatureMap such as RFF(). Got {type(feature_map).__name__}.")
    job = current_job_options(**options)
    sources = open_sources(
        arrays, storage_options=job.storage_options, argument="arrays", allow_missing_chunks=job.allow_missing_chunks
    )
    with connect(job.client) as active:
        return fit_map_and_sample(feature_map, sources, 0, 0, job.replace(client=active))[0]


def fit_map_and_sample(
    feature_map: FeatureMap, sources: Sequence[RowSource], n_rows: int, seed: int, options: JobOptions | None = None
) -> tuple[FeatureMap, np.ndarray]:
    """:func:`fit_map` on opened ``sources``, and a seeded bottom-``n_rows`` row sample of them, from one pass.

    When the map takes a sample (``n_map`` rows with its own seed), one bottom-k
    sample of ``max(n_map, n_rows)`` rows is drawn with the map's seed: its
    first ``n_map`` rows (in key order) are exactly the map's sample, so the map
    is the one :func:`fit_map` fits, and its first ``n_rows`` rows are returned.
    A map that takes no sample (fitted, or a fixed bandwidth) leaves the seed to
    ``seed``.

    Returns
    -------
    feature_map : FeatureMap
    sample : ndarray of shape (min(n_rows, rows of the sources), n_features_in), float64

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> from streamrff.engine import fit_map_and_sample
    >>> from streamrff.sources import open_source
    >>> X = np.random.default_rng(0).normal(size=(3000, 2))
    >>> fitted, sample = fit_map_and_sample(srf.RFF(n_features=16), [open_source(X)], 2500, seed=1)
    >>> fitted.fingerprint == srf.RFF(n_features=16).fit(X).fingerprint, sample.shape
    (True, (2500, 2))
    """
    options = current_job_options() if options is None else options
    width = sources[0].shape[1]
    already_fitted = feature_map.is_fitted()
    if not already_fitted:  # a map that cannot fit a task thread is one line, before any read
        check_sizes_fit(feature_map, width, memory_per_thread(options.client))
    if already_fitted:
        if feature_map.n_features_in_ != width:
            raise InputError(
                f"The data has {width} features, but {type(feature_map).__name__} is expecting "
                f"{feature_map.n_features_in_} features as input. Pass data with "
                f"{feature_map.n_features_in_} columns, or pass an unfitted map to fit it on this data."
            )
        fitted, n_map_rows, sample_seed = feature_map, 0, seed
    else:
        fitted = _with_table_categories(clone(feature_map), sources[0])
        n_map_rows, sample_seed = fitted._begin_fit(width)
        sample_seed = sample_seed if n_map_rows else seed
    n_sampled = max(n_map_rows, n_rows)
    sample = np.empty((0, width))
    if n_sampled:
        sample = landmark_sample(sources, n_sampled, sample_seed, options).rows
    if not already_fitted:
        fitted = fitted._finish_fit(sample[:n_map_rows])
    return fitted, sample[:n_rows]


def _with_table_categories(feature_map: FeatureMap, source: RowSource) -> FeatureMap:
    """An unfitted map for a table: an RFF that names no categorical columns takes the table's; a map
    that cannot compare categories by equality is refused (it would read category codes as numbers)."""
    if not source.categorical_columns:
        return feature_map
    if isinstance(feature_map, RFF) and not feature_map.structured:
        if feature_map.categorical is None:
            feature_map.set_params(categorical=list(source.categorical_columns))
        return feature_map
    names = [source.columns[index] for index in source.categorical_columns] if source.columns else []
    raise InputError(
        f"{source.description} has categorical columns {names}, which a {type(feature_map).__name__} map would read "
        "as numbers. Use a dense RFF map (it compares categories by equality), or leave them out with columns=."
    )
