"""The Dask engine: broadcast a fitted map, embed each chunk in one task, tree-merge the partials.

Every algorithm in streamrff is a pure per-chunk kernel ``rows -> partial
sketch`` plus an associative ``merge``; this module only maps and reduces.
The reduction tree is fixed by chunk order (groups of ``split_every``), so the
answer does not depend on how many workers run it, and tasks are pure, so a
lost worker's tasks are retried with the same result.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import dask
import dask.array as da
import numpy as np
from sklearn.base import clone

from .._base.blas import one_blas_thread
from .._base.memory import check_plan_fits, check_sizes_fit, memory_available
from .._base.sampling import bottom_k, row_keys
from .._base.validation import check_feature_dtype, check_positive_int, normalize_seed
from ..errors import InputError, SketchFormatError, SourceError
from ..maps import RFF, FeatureMap
from ..sketches.base import Sketch
from ..sketches.columns import (
    DEFAULT_COLUMN_FEATURES,
    ColumnMaps,
    check_column_part_fits,
    check_columns,
    column_maps_key,
)
from ..sketches.landmark import LandmarkSketch, landmark_sketch_of_chunk
from ..sketches.mean import MeanSketch, check_sum_method, mean_sketch_of_chunk
from ..sketches.nystrom import NystromSketch, check_sketch_size, nystrom_sketch_of_chunk
from ..sketches.regression import (
    NystromRegressionSketch,
    RegressionSketch,
    first_target_values,
    regression_sketch_of_chunk,
)
from ..sources.rows import RowSource, _is_remote, open_source, open_sources
from ..typing import StorageOptions
from .checkpoint import chunk_identities, load_partial, open_checkpoint
from .connection import connect, wait_for_result
from .tasks import (
    _ON_INVALID,
    ChunkKernel,
    _max_tasks,
    _merge_group,
    chunk_groups,
    group_data,
    group_identity,
    group_task,
)

__all__ = ["sketch", "nystrom_sketch", "connect", "fit_map", "run_chunks", "landmark_sample", "auto_chunk_rows"]

logger = logging.getLogger("streamrff.engine")

def _feature_sum_not_finite(partial: MeanSketch) -> bool:
    return not bool(np.isfinite(partial.feature_sum).all())


def _sums_show_non_finite(feature_map: FeatureMap, dtype: np.dtype, method: str) -> bool:
    """Whether a mean sketch's feature sum is non-finite whenever a row of its chunk is (NaN or inf).

    So for RFF maps, dense or structured, with float32 features (compiled, no warnings) on the
    direct path ("auto" takes it for non-finite rows): a NaN in a row makes every phase it enters
    NaN, an inf makes them infinite or NaN, and the sine and cosine of either are NaN, which
    every sum keeps. Saves a pass over the chunk: 104 ns per row at d = 768 (3.8% of the
    structured kernel at D = 4096; one core).
    """
    return isinstance(feature_map, RFF) and dtype == np.float32 and method != "nufft"


def run_chunks(
    sources: Sequence[RowSource | da.Array],
    kernel: ChunkKernel,
    client: Any = None,
    on_invalid: str = "raise",
    split_every: int = 8,
    progress: bool = False,
    checkpoint: str | None = None,
    checkpoint_job: str = "",
    storage_options: StorageOptions = None,
    retries: int = 3,
    chunk_filter: Callable[[int, int], bool] | None = None,
    names: Sequence[str] | None = None,
    shows_non_finite: Callable[[Sketch], bool] | None = None,
    max_tasks: int | None = None,
) -> Sketch:
    """Apply ``kernel`` to every row chunk of ``sources`` (pooled, in order) and tree-merge the partials.

    ``sources`` are opened sources (:func:`streamrff.sources.rows.open_source`; a dask
    array is wrapped as it is). Global row indices run through the sources in
    order, so a chunk of the second source starts at ``len(sources[0])`` plus
    its own offset. A job has at most ``max_tasks`` tasks (default: the dask
    config key ``streamrff.max-tasks``, else 10 000) plus
    one per source: beyond that, consecutive chunks are grouped into one task,
    which reads and embeds them one at a time (a zarr source's task reads its
    stored chunks itself; a dask source's group arrives as one block of rows),
    so results differ from one task per chunk only by float64 rounding. The
    plan is checked against the client's memory before its graph is built, and
    a zarr chunk absent from its store is refused before any work (unless the
    source allows missing chunks). With ``checkpoint``, each task's partial is
    saved under ``checkpoint/checkpoint_job/rows-START-STOP-IDENTITY.zarr``
    (the identity of its chunks) and reused on later runs.
    ``chunk_filter(start, stop)`` may skip chunks (the landmark pass reads
    only the chunks that hold sampled rows). ``names`` label the sources in
    error messages (default: each source's name); ``on_invalid="require"`` fails on NaN/inf
    rows without suggesting to skip them (for analyses that need every row).
    ``shows_non_finite(partial)``, for a kernel whose result is non-finite
    whenever a row is, replaces the finiteness pass over every chunk by a
    look at the kernel's result; rows are checked only when it says so.
    """
    if on_invalid not in (*_ON_INVALID, "require"):
        raise InputError(f"on_invalid must be 'raise' or 'skip'. Got {on_invalid!r}.")
    max_tasks = _max_tasks(max_tasks)
    sources = [open_source(source) for source in sources]
    names = list(names) if names is not None else [source.name for source in sources]
    if checkpoint is not None and (len(sources) != 1 or chunk_filter is not None):
        raise InputError("A checkpoint keeps the chunks of one source, all of them.")
    n_chunks = sum(len(source.array.chunks[0]) for source in sources)
    per_task = max(1, -(-n_chunks // max_tasks))
    n_tasks = sum(-(-len(source.array.chunks[0]) // per_task) for source in sources)
    grouped_rows = max(
        (per_task * max(source.array.chunks[0]) * source.shape[1] * source.dtype.itemsize for source in sources
         if per_task > 1 and source.zarr_array is None and source.rows is None),
        default=0,
    )  # fmt: skip
    check_plan_fits(
        n_chunks, n_tasks, memory_available(), split_every, task_rows_bytes=grouped_rows,
        memory_per_thread=_memory_per_thread(client if not isinstance(client, str) else None),
    )  # fmt: skip
    listed = [source.check_chunks_stored() for source in sources]  # a missing chunk: refused before any work
    job_key = uuid.uuid4().hex
    with contextlib.ExitStack() as stack:
        job = None
        if checkpoint is not None:
            job = stack.enter_context(open_checkpoint(checkpoint, checkpoint_job, sources[0], storage_options))
        # One key for the kernel (and the map inside it): the map is shipped once, not per task.
        kernel_key = dask.delayed(kernel, pure=True, traverse=False)
        # One compute, or, for a dask source of very many chunks, one per wave, built when its turn
        # comes (a wave's graph is dropped once computed); results merge in chunk order.
        current: list[Any] = []
        current_wave: Any = None
        results: list[Any] = []
        n_tasks = reused = n_planned = 0
        identified_late = False

        def add(partial: Any, wave: Any) -> None:
            nonlocal current, current_wave
            if current and wave != current_wave:
                results.append(_compute(_merge_tree(current, split_every), client, progress, retries))
                current = []
            current.append(partial)
            current_wave = wave

        global_base = 0
        for source, name, is_listed in zip(sources, names, listed):
            groups = list(chunk_groups(source, name, global_base, per_task, chunk_filter))
            global_base += source.shape[0]
            if not groups:
                continue
            identities = chunk_identities(source) if job is not None else None
            for group, data in group_data(source, groups, per_task, is_listed):
                n_planned += len(group.sizes)
                n_tasks += 1
                wave = None if group.wave is None else (id(source), group.wave)
                slot = None
                if job is not None:
                    first, last = int(group.indices[0]), int(group.indices[-1])
                    identity = group_identity(identities[first : last + 1])
                    stop = int(group.local_starts[-1] + group.sizes[-1])
                    slot = job.slot(int(group.local_starts[0]), stop, identity)
                    identified_late = identified_late or identity is None
                    if identity is not None and slot.saved:
                        add(dask.delayed(load_partial, pure=True)(slot.path, slot.storage_options), wave)
                        reused += len(group.sizes)
                        continue
                task = dask.delayed(group_task)(
                    data, group, kernel_key, on_invalid, slot, shows_non_finite, split_every,
                    dask_key_name=f"chunk_task-{job_key}-{n_tasks}",
                )  # fmt: skip
                add(task, wave)
        if not current:
            raise InputError("No chunks to process: the data has no rows.")
        logger.info(
            "sketching %d chunk(s): %d from checkpoint, %d to compute%s, in %d task(s)", n_planned, reused,
            n_planned - reused, " or from checkpoint as read" if identified_late else "", n_tasks,
        )  # fmt: skip
        results.append(_compute(_merge_tree(current, split_every), client, progress, retries))
        return results[0] if len(results) == 1 else _merge_tree(results, split_every, merge=_merge_group)


def _merge_tree(partials: list[Any], split_every: int, merge: Callable[..., Any] | None = None) -> Any:
    """Partials merged in groups of ``split_every``, level by level, in order (delayed unless ``merge``)."""
    merge = merge or dask.delayed(_merge_group, pure=True)
    level = partials
    while len(level) > 1:
        level = [merge(*level[i : i + split_every]) for i in range(0, len(level), split_every)]
    return level[0]


def _compute(result: Any, client: Any, progress: bool, retries: int) -> Any:
    with connect(client) as active:
        if active is None:
            bar = contextlib.nullcontext()
            if progress:
                from dask.diagnostics import ProgressBar

                bar = ProgressBar()
            # The kernels run with one BLAS thread anyway (results must not depend on the thread
            # count); holding the limit for the whole compute makes their own guards free.
            with bar, one_blas_thread():
                (value,) = dask.compute(result, scheduler="threads")
            return value
        future = active.compute(result, retries=retries)
        if progress:
            from distributed import progress as show_progress

            show_progress(future)
        return wait_for_result(future, active)  # fails after streamrff.no-workers-timeout without workers


def landmark_sample(
    sources: Sequence[RowSource], k: int, seed: int, client: Any = None, progress: bool = False
) -> LandmarkSketch:
    """The bottom-``k`` row sample of the pooled sources by keyed hash of the global row index.

    Keys depend only on row indices, so the driver first finds the ``k``
    smallest keys in blocks (no data read), then reads only the chunks that
    hold those rows; non-finite rows are never sampled.
    """
    sources = [open_source(source) for source in sources]
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

    kernel = functools.partial(_landmark_kernel, k=k, seed=seed)
    sample = run_chunks(
        sources, kernel, client=client, on_invalid="skip", progress=progress, chunk_filter=holds_sampled_row
    )
    if skipped and not (sample.keys.shape[0] == k and sample.keys[-1] <= threshold):
        # More non-finite rows among the candidates than spare keys: the k smallest finite
        # keys may lie in chunks that were skipped, so read them all.
        sample = run_chunks(sources, kernel, client=client, on_invalid="skip", progress=progress)
    return sample


def _kth_smallest_key(seed: int, n_total: int, k: int, block: int = 2**22) -> np.uint64:
    # Keep a few extra keys so that rows skipped as non-finite can be replaced by the next ones.
    keep = min(n_total, 2 * k + 64)
    best = np.empty(0, dtype=np.uint64)
    for start in range(0, n_total, block):
        keys = np.concatenate([best, row_keys(seed, start, min(n_total, start + block))])
        best = keys[bottom_k(keys, keep)]
    return best[-1]


def _landmark_kernel(rows: np.ndarray, row_offset: int, valid: np.ndarray | None, k: int, seed: int) -> LandmarkSketch:
    return landmark_sketch_of_chunk(rows, k, seed, row_offset, valid)


def _mean_kernel(
    rows: np.ndarray,
    row_offset: int,
    valid: np.ndarray | None,
    feature_map: FeatureMap,
    moments: bool,
    dtype: Any = "float32",
    method: str = "auto",
    column_maps: ColumnMaps | None = None,
) -> MeanSketch:
    n_invalid = 0 if valid is None else int(valid.shape[0] - valid.sum())
    return mean_sketch_of_chunk(
        rows, feature_map, moments=moments, n_invalid=n_invalid, dtype=dtype, method=method, column_maps=column_maps
    )


def _regression_kernel(
    rows: np.ndarray,
    row_offset: int,
    valid: np.ndarray | None,
    feature_map: FeatureMap,
    n_columns: int,
    rows_dtype: np.dtype,
    target_ndim: int,
    dtype: Any = "float32",
    sketch_size: int | None = None,
    test_seed: int = 0,
    target_shift: tuple[float, ...] | None = None,
) -> RegressionSketch | NystromRegressionSketch:
    n_invalid = 0 if valid is None else int(valid.shape[0] - valid.sum())
    data, targets = _rows_and_targets(rows, n_columns, rows_dtype)
    return regression_sketch_of_chunk(
        data, targets, feature_map, n_invalid=n_invalid, dtype=dtype, target_ndim=target_ndim,
        sketch_size=sketch_size, test_seed=test_seed, target_shift=target_shift,
    )  # fmt: skip


def _rows_and_targets(block: np.ndarray, n_columns: int, rows_dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """Split a block of the data's ``n_columns`` columns followed by the target's (``RowSource.with_columns_of``);
    float32 data widened to float64 beside float64 targets narrows back exactly."""
    return np.ascontiguousarray(block[:, :n_columns], dtype=rows_dtype), block[:, n_columns:]


def _nystrom_kernel(
    rows: np.ndarray,
    row_offset: int,
    valid: np.ndarray | None,
    feature_map: FeatureMap,
    sketch_size: int,
    test_seed: int,
    dtype: Any = "float32",
) -> NystromSketch:
    n_invalid = 0 if valid is None else int(valid.shape[0] - valid.sum())
    return nystrom_sketch_of_chunk(rows, feature_map, sketch_size, test_seed, n_invalid=n_invalid, dtype=dtype)


#: Rows per task of in-memory data: each task embeds about this many feature values (rows x D,
#: ~0.1-0.3 s on one core), which amortises scheduling (~1 ms locally, more on a cluster) and,
#: with moments, merging its D x D partial; a task's input stays under 1/8 of a thread's memory.
_TASK_FEATURE_VALUES = 2**27
_MAX_TASK_INPUT_BYTES = 256 * 2**20


def _memory_per_thread(client: Any) -> float:
    """Smallest memory per task thread of the cluster's workers, or of this machine."""
    if client is not None:
        workers = client.scheduler_info().get("workers", {}).values()
        limits = [w["memory_limit"] / max(int(w.get("nthreads", 1)), 1) for w in workers if w.get("memory_limit")]
        if limits:
            return min(limits)
    import psutil

    return psutil.virtual_memory().total / (os.cpu_count() or 1)


def _task_input_cap(memory_per_thread: float) -> float:
    return min(_MAX_TASK_INPUT_BYTES, memory_per_thread / 8)


def auto_chunk_rows(n_rows: int, n_columns: int, width: int, moments: bool, memory_per_thread: float) -> int:
    """Rows per task for a sketch of ``n_rows`` x ``n_columns`` data into ``width`` features.

    About ``2**27 / width`` rows (at least ``8 * width`` with moments, so the
    rank-k updates outweigh merging D x D partials), at most what keeps a
    task's float64 input under 1/8 of a thread's memory and 256 MiB. It does
    not depend on the number of workers, so neither does the result.

    Examples
    --------
    >>> auto_chunk_rows(10_000_000, 32, 1024, False, memory_per_thread=4e9)
    131072
    >>> auto_chunk_rows(10_000, 32, 1024, False, memory_per_thread=4e9)
    10000
    """
    most = max(1, int(_task_input_cap(memory_per_thread) // (9 * n_columns)))  # float64 rows + finite mask
    wanted = max(_TASK_FEATURE_VALUES // max(width, 1), 8 * width if moments else 1)
    return int(max(1, min(n_rows, most, wanted)))


def _plan_chunks(source: RowSource, width: int, moments: bool, client: Any) -> RowSource:
    """Rows per task when the caller gave none: :func:`auto_chunk_rows` for in-memory arrays
    (dask's default chunks for them ignore D); a chunked source keeps its chunks (they are
    the unit of reading and of checkpoints) unless a chunk is too big for a worker's memory."""
    memory = _memory_per_thread(client)
    too_big = max(source.row_chunks) * 9 * source.shape[1] > _task_input_cap(memory)
    if not (source.in_memory or too_big):
        return source
    rows = auto_chunk_rows(source.shape[0], source.shape[1], width, moments, memory)
    logger.info("rows per task: %d (D = %d, moments: %s)", rows, width, moments)
    return source.with_chunk_rows(rows)


def fit_map(
    feature_map: FeatureMap,
    arrays: Sequence[Any],
    client: Any = None,
    progress: bool = False,
    storage_options: StorageOptions = None,
    allow_missing_chunks: bool | None = None,
) -> FeatureMap:
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
        (:func:`streamrff.sources.rows.open_source`), of the same width.
    client : None, distributed.Client or str, default=None
        Where the sampling pass runs (see :func:`sketch`).
    progress : bool, default=False
        Show a progress bar.
    storage_options : dict, optional
        fsspec options for URL sources. Never logged.
    allow_missing_chunks : bool, optional
        Read zarr chunks absent from their store as the fill value, on
        purpose; by default they are refused, naming the chunk (see
        :func:`streamrff.sources.rows.open_source`).

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
    sources = open_sources(
        arrays, storage_options=storage_options, argument="arrays", allow_missing_chunks=allow_missing_chunks
    )
    with connect(client) as active:  # a map that cannot fit a task thread is one line, as for sketch()
        check_sizes_fit(feature_map, sources[0].shape[1], _memory_per_thread(active))
        return fit_map_and_sample(feature_map, sources, 0, 0, client=active, progress=progress)[0]


def fit_map_and_sample(
    feature_map: FeatureMap, sources: Sequence[RowSource], n_rows: int, seed: int, client: Any = None,
    progress: bool = False,
) -> tuple[FeatureMap, np.ndarray]:  # fmt: skip
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
    >>> from streamrff.engine.jobs import fit_map_and_sample
    >>> from streamrff.sources.rows import open_source
    >>> X = np.random.default_rng(0).normal(size=(3000, 2))
    >>> fitted, sample = fit_map_and_sample(srf.RFF(n_features=16), [open_source(X)], 2500, seed=1)
    >>> fitted.fingerprint == srf.RFF(n_features=16).fit(X).fingerprint, sample.shape
    (True, (2500, 2))
    """
    width = sources[0].shape[1]
    already_fitted = feature_map.is_fitted()
    if already_fitted:
        if feature_map.n_features_in_ != width:
            raise InputError(
                f"The data has {width} features, but {type(feature_map).__name__} is expecting "
                f"{feature_map.n_features_in_} features as input. Pass data with "
                f"{feature_map.n_features_in_} columns, or pass an unfitted map to fit it on this data."
            )
        fitted, n_map_rows, sample_seed = feature_map, 0, seed
    else:
        fitted = clone(feature_map)
        n_map_rows, sample_seed = fitted._begin_fit(width)
        sample_seed = sample_seed if n_map_rows else seed
    n_sampled = max(n_map_rows, n_rows)
    sample = np.empty((0, width))
    if n_sampled:
        sample = landmark_sample(sources, n_sampled, sample_seed, client=client, progress=progress).rows
    if not already_fitted:
        fitted = fitted._finish_fit(sample[:n_map_rows])
    return fitted, sample[:n_rows]


def sketch(
    source: Any,
    feature_map: FeatureMap,
    moments: bool = False,
    client: Any = None,
    storage_options: StorageOptions = None,
    sample_dim: str | None = None,
    chunk_rows: int | None = None,
    checkpoint: str | os.PathLike | None = None,
    on_invalid: str = "raise",
    progress: bool = False,
    split_every: int = 8,
    retries: int = 3,
    dtype: Any = "float32",
    method: str = "auto",
    target: Any = None,
    allow_missing_chunks: bool | None = None,
    max_tasks: int | None = None,
    columns: bool = False,
    column_features: int = DEFAULT_COLUMN_FEATURES,
    column_bandwidth: float | None = None,
) -> MeanSketch:
    """Sketch out-of-core data in one pass on Dask: count, feature sum and optional second moment.

    Each task reads one chunk of rows, checks it (finite, right width), embeds
    it tile by tile with the broadcast map and returns a partial
    :class:`MeanSketch`; partials are tree-merged. No task holds more than one
    chunk's features.

    Parameters
    ----------
    source : ndarray, dask Array, xarray DataArray, str/PathLike or RowSource
        The rows. A str is a zarr array path or URL (plain path, ``file://``,
        ``s3://...``), or a zarr group path with the array name appended; a
        :class:`~streamrff.sources.rows.RowSource` is a source opened once with
        :func:`streamrff.sources.rows.open_source`.
    feature_map : FeatureMap
        A fitted map is used as is; an unfitted one is cloned and fitted on
        the seeded bottom-k row sample (``bandwidth="median"`` uses it).
        The fitted map is ``result.feature_map``.
    moments : bool, default=False
        Also accumulate the D x D second moment (for KPCA and the spectral and
        Hotelling tests); costs D^2 float64 per task.
    client : None, distributed.Client or str, default=None
        None runs on the embedded local default (threads, one per core); a
        Client or a scheduler address (``tcp://host:8786``) runs on that cluster.
    storage_options : dict, optional
        fsspec options for URL sources and checkpoints. Never logged.
    sample_dim : str, optional
        For a DataArray, the sample dimension (default: its first).
    chunk_rows : int, optional
        Rows per task. By default in-memory arrays are split by
        :func:`auto_chunk_rows` (about ``2**27 / D`` rows: enough to amortise
        scheduling, small enough for the worker's memory), and chunked
        sources keep their own chunks unless one is too large for a worker.
    checkpoint : str or PathLike, optional
        Directory or URL for per-chunk partial sketches: a rerun computes only
        the chunks without a valid partial (after an interruption, rows
        appended to a zarr array, or chunks rewritten upstream). The folder
        belongs to one source (another is refused with
        :class:`~streamrff.CheckpointMismatchError`); a partial is reused only
        for the same unchanged rows (see :mod:`streamrff.engine.checkpoint`).
    on_invalid : {"raise", "skip"}, default="raise"
        What to do with NaN/inf rows: fail naming the chunk and rows, or skip
        them and count them in ``result.n_invalid``. (``"require"`` fails like
        "raise" without suggesting to skip, for callers that cannot skip rows.)
    progress : bool, default=False
        Show a progress bar (dask's for local runs, distributed's on a cluster).
    split_every : int, default=8
        Fan-in of the merge tree.
    retries : int, default=3
        Retries of a failed task on a cluster (a lost worker's tasks are rerun).
    dtype : {"float32", "float64"}, default="float32"
        Precision of the features; sums are float64 either way. float32
        features carry a phase error of about ``|w.x| * 6e-8`` (relative
        1e-7..1e-6 on the kernel-mean sums); float64 removes it at about 10x
        the time, since numpy's float64 sin/cos are not vectorised. Float32
        and float64 sketches of the same map merge.
    method : {"auto", "direct", "nufft"}, default="auto"
        How each chunk's sums are computed. "direct" embeds every row.
        "nufft" evaluates them as one type-3 non-uniform FFT (d <= 3, RFF and
        RelativeErrorRFF maps, float32, no moments; needs the extra
        ``streamrff[nufft]``): 20-80x faster at d = 2, D = 4096, equal to
        float32 rounding. "auto" uses the NUFFT for a chunk when it applies
        and is predicted at least 2x faster (:func:`streamrff.maps.nufft.nufft_applies`).
    target : ndarray, dask Array, xarray DataArray, or str/PathLike, optional
        Regression targets, one row per row of ``source``: shape (n,) or
        (n, t), any source the engine reads (a zarr path/URL included). The
        result is then a :class:`RegressionSketch`, which always holds the
        second moment (the normal equations need it) plus ``Z^T y``,
        ``sum y`` and ``y^T y``; the target is read chunk by chunk beside the
        rows (rechunked to the rows' chunks), and NaN/inf in it count as
        invalid rows. See :class:`streamrff.KernelRidge`.
    allow_missing_chunks : bool, optional
        Read zarr chunks absent from their store as the fill value, on
        purpose. By default (None: the dask config key
        ``streamrff.allow-missing-chunks``, else False) a missing chunk is a
        :class:`~streamrff.SourceError` naming it, before any work where the
        store lists its keys, else when a task reaches it.
    max_tasks : int, optional
        Most tasks of the job (default: the dask config key
        ``streamrff.max-tasks``, else 10 000). A store of more chunks has
        consecutive chunks grouped into one task, which reads them one at a
        time; the result differs only by float64 rounding.
    columns : bool, default=False
        Also sketch every input column alone, in the same pass: per column
        the sum and second moment (float64) of a 1-D sincos map of
        ``column_features`` features (:mod:`streamrff.sketches.columns`), which
        :func:`streamrff.explain` reads for its column table. Costs
        ``d * column_features^2`` float64 per task. Not with ``target``.
    column_features : int, default=64
        Features of each column's map (even).
    column_bandwidth : float, optional
        Every column kernel's width, stored in the sketch; by default the
        map's bandwidth over ``sqrt(d)`` (each column's share of the median
        distance for standardised columns). Sites that merge or compare their
        sketches must use the same value.

    Returns
    -------
    MeanSketch
        A :class:`RegressionSketch` when ``target`` is given.

    Raises
    ------
    InputError
        Non-numeric, non-2-D data, a width different from a fitted map, NaN/inf
        rows with ``on_invalid="raise"``, bad arguments.
    SourceError
        Missing path, array or bucket.
    ClusterError
        Unreachable scheduler.

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> X = np.random.default_rng(0).normal(size=(10_000, 8)).astype("float32")
    >>> s = srf.sketch(X, srf.RFF(n_features=256, bandwidth="median"), chunk_rows=2_500)
    >>> s.count, s.feature_sum.shape
    (10000, (256,))

    Chunking changes only float32 rounding: against float64 features of the same
    map, the mean embedding agrees to 1e-6 (float32 features carry an absolute
    error of about ``|w.x| * 6e-8`` each; a sum of near-cancelling terms has no
    relative bound, hence the absolute one on the mean).

    >>> exact = srf.sketch_array(X.astype("float64"), s.feature_map, dtype="float64")
    >>> bool(np.abs(s.feature_sum - exact.feature_sum).max() / s.count < 1e-6)
    True
    """
    if not isinstance(moments, (bool, np.bool_)):
        raise InputError(f"moments must be True or False. Got {moments!r}.")
    moments = bool(moments) or target is not None  # a regression sketch always holds the second moment
    if target is not None and columns is not False:
        raise InputError(
            f"columns sketches the input columns of a mean sketch; a regression sketch (target=) has none. Got "
            f"columns={columns!r}; sketch the rows again without target= for the column part."
        )
    _check_job_options(split_every, on_invalid)
    dtype = check_feature_dtype(dtype)
    method = check_sum_method(method, moments, dtype)
    max_tasks = _max_tasks(max_tasks)
    source = open_source(
        source, storage_options=storage_options, sample_dim=sample_dim, chunk_rows=chunk_rows,
        allow_missing_chunks=allow_missing_chunks,
    )  # fmt: skip
    with connect(client) as active:
        memory = _memory_per_thread(active)
        check_sizes_fit(feature_map, source.shape[1], memory, moments, split_every=split_every)
        fitted = fit_map(feature_map, [source], client=active, progress=progress)
        check_sum_method(method, moments, dtype, fitted)
        column_maps = check_columns(columns, fitted, column_features, column_bandwidth)
        if column_maps is not None:
            check_column_part_fits(column_maps, memory, split_every)
        kernel = functools.partial(
            _mean_kernel, feature_map=fitted, moments=moments, dtype=dtype, method=method, column_maps=column_maps
        )
        job = f"mean-{fitted.fingerprint[:20]}-{'moments' if moments else 'sums'}-{on_invalid}"
        if column_maps is not None:
            job += f"-columns-{column_maps_key(column_maps)}"
        kind: type[MeanSketch] = MeanSketch
        shows_non_finite = _feature_sum_not_finite if _sums_show_non_finite(fitted, dtype, method) else None
        if target is not None:
            source, columns = _join_target(
                source, target, fitted, chunk_rows, True, active, storage_options, sample_dim
            )
            kernel = functools.partial(_regression_kernel, feature_map=fitted, dtype=dtype, **columns)
            n_targets = source.shape[1] - columns["n_columns"]
            job = f"regression-{fitted.fingerprint[:20]}-{n_targets}-{on_invalid}"
            kind, shows_non_finite = RegressionSketch, None
        return _run_job(
            source, fitted, kernel, job, dtype, kind, active,
            plan=chunk_rows is None and target is None, moments=moments, on_invalid=on_invalid,
            split_every=split_every, progress=progress, checkpoint=checkpoint, storage_options=storage_options,
            retries=retries, shows_non_finite=shows_non_finite, max_tasks=max_tasks,
        )  # fmt: skip


def nystrom_sketch(
    source: Any,
    feature_map: FeatureMap,
    sketch_size: int = 512,
    seed: int = 0,
    client: Any = None,
    storage_options: StorageOptions = None,
    sample_dim: str | None = None,
    chunk_rows: int | None = None,
    checkpoint: str | os.PathLike | None = None,
    on_invalid: str = "raise",
    progress: bool = False,
    split_every: int = 8,
    retries: int = 3,
    dtype: Any = "float32",
    target: Any = None,
    allow_missing_chunks: bool | None = None,
    max_tasks: int | None = None,
) -> NystromSketch:
    """Sketch out-of-core data in one pass into a :class:`NystromSketch` (``Y = sum z z^T Omega``).

    The low-rank counterpart of ``sketch(..., moments=True)`` for wide maps:
    each task keeps a D x ``sketch_size`` float64 partial instead of D x D, and
    the partials merge as sums. The test matrix ``Omega`` is regenerated on
    each worker from ``(seed, D, sketch_size)``. Arguments other than
    ``sketch_size`` and ``seed`` are those of :func:`sketch`.

    Parameters
    ----------
    sketch_size : int, default=512
        Columns l of the test matrix, ``1 <= l <= D``. For rank-k eigenpairs
        take ``l > k + 1``; the expected error bound falls as ``k / (l - k - 1)``
        (see :class:`streamrff.KernelPCA`).
    seed : int, default=0
        Seed of the test matrix.
    target : ndarray, dask Array, xarray DataArray, or str/PathLike, optional
        Regression targets, as for :func:`sketch`: the result is then a
        :class:`~streamrff.NystromRegressionSketch`, the range sketch plus
        ``Z^T y``, ``sum y`` and ``y^T y``, for :class:`streamrff.KernelRidge`
        with ``rank`` on wide maps.
    allow_missing_chunks, max_tasks
        As for :func:`sketch`.

    Returns
    -------
    NystromSketch
        A :class:`~streamrff.NystromRegressionSketch` when ``target`` is given.

    Examples
    --------
    >>> import numpy as np, streamrff as srf
    >>> X = np.random.default_rng(0).normal(size=(2_000, 4)).astype("float32")
    >>> s = srf.nystrom_sketch(X, srf.RFF(n_features=128, bandwidth=1.0), sketch_size=32, chunk_rows=500)
    >>> s.count, s.range_sketch.shape
    (2000, (128, 32))

    The range sketch is the second moment times the seeded test matrix, ``(Z^T Z) Omega``:

    >>> from streamrff.sketches.nystrom import test_matrix
    >>> Z = s.feature_map.transform(X).astype(np.float64)
    >>> reference = Z.T @ (Z @ test_matrix(s.test_seed, 128, 32))
    >>> bool(np.allclose(s.range_sketch, reference, rtol=0, atol=1e-4))
    True
    """
    _check_job_options(split_every, on_invalid)
    check_positive_int(sketch_size, "sketch_size")
    seed = normalize_seed(seed)
    dtype = check_feature_dtype(dtype)
    max_tasks = _max_tasks(max_tasks)
    source = open_source(
        source, storage_options=storage_options, sample_dim=sample_dim, chunk_rows=chunk_rows,
        allow_missing_chunks=allow_missing_chunks,
    )  # fmt: skip
    with connect(client) as active:
        fitted = fit_map(feature_map, [source], client=active, progress=progress)
        sketch_size = check_sketch_size(sketch_size, fitted.n_features_out_)
        kernel = functools.partial(
            _nystrom_kernel, feature_map=fitted, sketch_size=sketch_size, test_seed=seed, dtype=dtype
        )
        job = f"nystrom-{fitted.fingerprint[:20]}-{sketch_size}-{seed}-{on_invalid}"
        kind: type[NystromSketch] = NystromSketch
        if target is not None:
            source, columns = _join_target(
                source, target, fitted, chunk_rows, False, active, storage_options, sample_dim
            )
            kernel = functools.partial(
                _regression_kernel, feature_map=fitted, sketch_size=sketch_size, test_seed=seed, dtype=dtype, **columns
            )
            job = f"nystrom-regression-{fitted.fingerprint[:20]}-{sketch_size}-{seed}-" + (
                f"{source.shape[1] - columns['n_columns']}-{on_invalid}"
            )
            kind = NystromRegressionSketch
        return _run_job(
            source, fitted, kernel, job, dtype, kind, active,
            plan=chunk_rows is None and target is None, moments=False, on_invalid=on_invalid, split_every=split_every,
            progress=progress, checkpoint=checkpoint, storage_options=storage_options, retries=retries,
            max_tasks=max_tasks,
        )  # fmt: skip


def _join_target(
    source: RowSource, target: Any, fitted: FeatureMap, chunk_rows: int | None, moments: bool, client: Any,
    storage_options: StorageOptions, sample_dim: str | None,
) -> tuple[RowSource, dict[str, Any]]:  # fmt: skip
    """The rows with the target's columns joined (chunked like them), and how a kernel splits a block again.

    One task then reads a chunk of rows and its targets, and the finiteness check and the
    checkpoint cover both. Without ``chunk_rows`` the rows' chunks are planned first.
    """
    if chunk_rows is None:
        source = _plan_chunks(source, fitted.n_features_out_, moments, client)
    targets = open_source(target, storage_options=storage_options, sample_dim=sample_dim, name="target",
                          allow_missing_chunks=source.allow_missing_chunks,
                          allow_vector=True)  # fmt: skip
    columns = {
        "n_columns": source.shape[1],
        "rows_dtype": np.dtype(np.float32 if source.dtype == np.float32 else np.float64),
        "target_ndim": targets.given_ndim,
        "target_shift": _target_shift(targets, client),
    }
    return source.with_columns_of(targets), columns


#: Rows of the target read before the pass for its shift (:func:`_target_shift`).
_SHIFT_ROWS = 4096


def _target_shift(targets: RowSource, client: Any) -> tuple[float, ...]:
    """One shift for every chunk of a regression job: each target column's first finite value among its first
    rows (:func:`streamrff.sketches.regression.first_target_values`), so the sums do not depend on the chunking."""
    head = _compute(targets.array[: min(_SHIFT_ROWS, targets.shape[0])], client, False, retries=3)
    head = np.asarray(head, dtype=np.float64)
    return tuple(float(value) for value in first_target_values(head))


def _check_job_options(split_every: Any, on_invalid: Any) -> None:
    if isinstance(split_every, bool) or not isinstance(split_every, int) or split_every < 2:
        raise InputError(f"split_every must be an integer >= 2. Got {split_every!r}.")
    if on_invalid not in (*_ON_INVALID, "require"):
        raise InputError(f"on_invalid must be 'raise' or 'skip'. Got {on_invalid!r}.")


def _run_job(
    source: RowSource, feature_map: FeatureMap, kernel: ChunkKernel, job: str, dtype: np.dtype, kind: type[Sketch],
    client: Any, *, plan: bool, moments: bool, on_invalid: str, split_every: int, progress: bool, checkpoint: Any,
    storage_options: StorageOptions, retries: int, shows_non_finite: Callable[[Sketch], bool] | None = None,
    max_tasks: int | None = None,
) -> Any:  # fmt: skip
    """Run a sketch job over ``source``'s chunks, planned first if ``plan``; ``job`` names its checkpoint partials
    (``shows_non_finite``: see :func:`run_chunks`)."""
    if plan:
        source = _plan_chunks(source, feature_map.n_features_out_, moments, client)
    if dtype == np.float64:
        job += "-float64"
    logger.info("%s of %s with %s", kind.__name__, source.description, type(feature_map).__name__)
    result = run_chunks(
        [source],
        kernel,
        client=client,
        on_invalid=on_invalid,
        split_every=split_every,
        progress=progress,
        checkpoint=None if checkpoint is None else os.fspath(checkpoint),
        checkpoint_job=job,
        storage_options=storage_options,
        retries=retries,
        shows_non_finite=shows_non_finite,
        max_tasks=max_tasks,
    )
    if not isinstance(result, kind):  # pragma: no cover - defensive: the kernels return this kind
        raise SketchFormatError(f"Internal error: expected a {kind.__name__}, got {type(result).__name__}.")
    return result


def write_zarr(
    array: da.Array,
    path_or_url: str | os.PathLike,
    storage_options: StorageOptions = None,
    client: Any = None,
    overwrite: bool = False,
) -> str:
    """Compute a lazy dask array (labels, scores) into a zarr array, chunk by chunk.

    A local target is written under a temporary name and published in one
    step, so an interrupted job never leaves a half-written array at
    ``path_or_url`` and a concurrent writer's output is never replaced without
    ``overwrite``. A URL target is written in place (object stores have no rename).

    Raises
    ------
    FileExistsError
        If the target exists and ``overwrite`` is False: checked before any work
        and, for a local target, again atomically when publishing.
    OutputError
        If the local file system is read-only or forbids writing (checked
        before computing), or fills up while writing; the staging copy is removed.
    """
    from .._files.publish import check_output_location, output_errors, publish, remove_path, staging_path

    target = os.fspath(path_or_url)
    remote = _is_remote(target)
    if remote:
        import fsspec

        fs, root = fsspec.core.url_to_fs(target, **(storage_options or {}))
        if fs.exists(root) and not overwrite:
            raise FileExistsError(f"{target} already exists. Choose another output or pass --overwrite.")
        staging = target
    else:
        local = target[len("file://") :] if target.startswith("file://") else target
        if os.path.exists(local) and not overwrite:
            raise FileExistsError(f"{local} already exists. Choose another output or pass --overwrite.")
        parent = os.path.dirname(os.path.abspath(local))
        if not os.path.isdir(parent):
            raise SourceError(f"Cannot write {local}: directory {parent} does not exist. Create it first.")
        staging = os.fspath(staging_path(os.path.join(parent, os.path.basename(local))))
        check_output_location(local)  # read-only or forbidden: fail before the compute (compressed size unknown)
    try:
        with output_errors(target):
            stored = array.to_zarr(
                staging, storage_options=storage_options if remote else None, overwrite=True, compute=False
            )
            with connect(client) as active:
                if active is None:
                    stored.compute(scheduler="threads")
                else:
                    active.compute(stored).result()
            if not remote:
                publish(staging, local, overwrite)  # never replaces an output that appeared meanwhile
    finally:
        if not remote:
            remove_path(staging)
    return target
