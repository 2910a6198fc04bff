"""The sketch jobs: open a source once, fit the map, and run a sketch kind's chunk job over the source's chunks.

:func:`run_sketch` is the one way a job runs: it takes an opened source and a fitted map, asks the
kind (by its registered ``kind`` name, never by class) for its :class:`~streamrff.sketches.ChunkJob`,
plans the rows per task, and hands the kernel to :func:`~streamrff.engine.run_chunks`.
:func:`sketch` and :func:`nystrom_sketch` are the public jobs built on it; :func:`write_zarr`
computes a lazy result (labels, scores) into a zarr array.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import dask.array as da
import numpy as np

from .._base.memory import check_sizes_fit
from .._base.validation import check_feature_dtype, check_positive_int, normalize_seed
from ..errors import InputError, SketchFormatError, SourceError
from ..maps import FeatureMap
from ..sketches.base import ChunkKernel, Sketch
from ..sketches.columns import DEFAULT_COLUMN_FEATURES, check_column_part_fits, check_columns
from ..sketches.mean import MeanSketch, check_sum_method
from ..sketches.nystrom import NystromSketch, check_sketch_size
from ..sources.rows import RowSource, _is_remote, open_source
from ..typing import StorageOptions
from .connection import connect
from .fitting import fit_map_and_sample
from .options import JobOptions, current_job_options, worker_storage_options
from .run import compute, run_chunks
from .tasks import memory_per_thread, plan_chunks

__all__ = ["sketch", "nystrom_sketch", "run_sketch", "run_row_pass", "open_job_source", "write_zarr"]

logger = logging.getLogger("streamrff.engine")


def open_job_source(source: Any, options: JobOptions, name: str | None = None, **kwargs: Any) -> RowSource:
    """``source`` opened with the job's storage, sample dimension, chunking and missing-chunk options."""
    return open_source(
        source, storage_options=worker_storage_options(source, options.storage_options, options.client),
        sample_dim=options.sample_dim,
        chunk_rows=options.chunk_rows, name=name, allow_missing_chunks=options.allow_missing_chunks, **kwargs,
    )  # fmt: skip


def run_sketch(source: RowSource, kind: str, feature_map: FeatureMap, options: JobOptions, **params: Any) -> Sketch:
    """Run the chunk job of sketch kind ``kind`` (``params`` are its ``chunk_job``'s) over an opened ``source``.

    ``feature_map`` is fitted and ``options.client`` connected. Without ``chunk_rows``, in-memory
    rows are split into tasks by :func:`~streamrff.engine.auto_chunk_rows` (a chunked source keeps
    its chunks); the job's checkpoint partials are named by the kind's key and ``on_invalid``.
    """
    from ..sketches import register_kinds

    register_kinds()
    job = Sketch._registry[kind].chunk_job(feature_map, **params)
    width_in = source.shape[1] if not source.joined else source.joined[0].shape[1]
    memory = memory_per_thread(options.client)
    check_sizes_fit(feature_map, width_in, memory, job.moments, split_every=options.split_every)
    if options.chunk_rows is None and not source.joined:
        source = plan_chunks(source, job.width, job.moments, options.client)
    logger.info("%s of %s with %s", job.kind.__name__, source.description, type(feature_map).__name__)
    result = run_chunks(
        [source], job.kernel, options, checkpoint_job=f"{job.key}-{options.on_invalid}",
        shows_non_finite=job.shows_non_finite,
    )  # fmt: skip
    if not isinstance(result, job.kind):  # pragma: no cover - defensive: the kernels return this kind
        raise SketchFormatError(f"Internal error: expected a {job.kind.__name__}, got {type(result).__name__}.")
    return result


def run_row_pass(
    source: Any, kernel: ChunkKernel, width: int, n_features_in: int, options: JobOptions, what: str
) -> Any:
    """One pass of a kernel whose partials are not sketches (top rows, histograms) over ``source``, opened here.

    ``width`` is the kernel's features per row (for rows per task), ``n_features_in`` the columns the
    source must have (``what`` names what takes them in the message). No checkpoint: its partials
    are sketch files.
    """
    opened = open_job_source(source, options, name="source")
    if opened.shape[1] != n_features_in:
        raise InputError(
            f"The source has {opened.shape[1]} columns; {what} takes {n_features_in}. "
            "Use rows of the data the sketches were made from."
        )
    with connect(options.client) as active:
        job = options.replace(client=active, checkpoint=None)
        if job.chunk_rows is None:
            opened = plan_chunks(opened, width, False, active)
        return run_chunks([opened], kernel, job)


def sketch(
    source: Any,
    feature_map: FeatureMap,
    moments: bool = False,
    dtype: Any = "float32",
    method: str = "auto",
    target: Any = None,
    columns: bool = False,
    column_features: int = DEFAULT_COLUMN_FEATURES,
    column_bandwidth: float | None = None,
    **options: Any,
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
        :class:`~streamrff.sources.RowSource` is a source opened once with
        :func:`streamrff.sources.open_source`.
    feature_map : FeatureMap
        A fitted map is used as is; an unfitted one is cloned and fitted on
        the seeded bottom-k row sample (``bandwidth="median"`` uses it).
        The fitted map is ``result.feature_map``.
    moments : bool, default=False
        Also accumulate the D x D second moment (for KPCA and the spectral and
        Hotelling tests); costs D^2 float64 per task.
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

    **options
        The job options (:class:`~streamrff.engine.JobOptions`): ``client``,
        ``storage_options``, ``sample_dim``, ``chunk_rows``, ``checkpoint``,
        ``on_invalid``, ``progress``, ``split_every``, ``retries``,
        ``allow_missing_chunks``, ``max_tasks``; default: those in force
        (:func:`~streamrff.job_options`). ``client`` None runs on the embedded
        local default (threads, one per core); a Client or a scheduler address
        (``tcp://host:8786``) runs on that cluster.

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
    job = current_job_options(**options)
    if not isinstance(moments, (bool, np.bool_)):
        raise InputError(f"moments must be True or False. Got {moments!r}.")
    moments = bool(moments) or target is not None  # a regression sketch always holds the second moment
    if target is not None and columns is not False:
        raise InputError(
            f"columns sketches the input columns of a mean sketch; a regression sketch (target=) has none. Got "
            f"columns={columns!r}; sketch the rows again without target= for the column part."
        )
    dtype = check_feature_dtype(dtype)
    method = check_sum_method(method, moments, dtype)
    opened = open_job_source(source, job)
    with connect(job.client) as active:
        job = job.replace(client=active)
        memory = memory_per_thread(active)
        check_sizes_fit(feature_map, opened.shape[1], memory, moments, split_every=job.split_every)
        fitted = fit_map_and_sample(feature_map, [opened], 0, 0, job)[0]
        if target is not None:
            joined, split = _join_target(opened, target, fitted, moments, job)
            return run_sketch(joined, "regression", fitted, job, dtype=dtype, **split)
        column_maps = check_columns(columns, fitted, column_features, column_bandwidth)
        if column_maps is not None:
            check_column_part_fits(column_maps, memory, job.split_every)
        return run_sketch(
            opened, "mean", fitted, job, moments=moments, dtype=dtype, method=method, column_maps=column_maps
        )


def nystrom_sketch(
    source: Any,
    feature_map: FeatureMap,
    sketch_size: int = 512,
    seed: int = 0,
    dtype: Any = "float32",
    target: Any = None,
    **options: Any,
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
    dtype : {"float32", "float64"}, default="float32"
        As for :func:`sketch`.
    **options
        The job options, as for :func:`sketch`.

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
    job = current_job_options(**options)
    check_positive_int(sketch_size, "sketch_size")
    seed = normalize_seed(seed)
    dtype = check_feature_dtype(dtype)
    opened = open_job_source(source, job)
    with connect(job.client) as active:
        job = job.replace(client=active)
        fitted = fit_map_and_sample(feature_map, [opened], 0, 0, job)[0]
        sketch_size = check_sketch_size(sketch_size, fitted.n_features_out_)
        if target is not None:
            joined, split = _join_target(opened, target, fitted, False, job)
            return run_sketch(
                joined, "nystrom-regression", fitted, job, dtype=dtype, sketch_size=sketch_size, test_seed=seed,
                **split,
            )  # fmt: skip
        return run_sketch(opened, "nystrom", fitted, job, sketch_size=sketch_size, test_seed=seed, dtype=dtype)


#: Rows of the target read before the pass, for the shift of its sums (the first finite values).
_TARGET_HEAD_ROWS = 4096


def _join_target(
    source: RowSource, target: Any, fitted: FeatureMap, moments: bool, options: JobOptions
) -> tuple[RowSource, dict[str, Any]]:
    """The rows with the target's columns joined (chunked like them), and what the kind's kernel needs to split
    a block again: the data's width and dtype, the target's given ndim and its first rows.

    One task then reads a chunk of rows and its targets, and the finiteness check and the
    checkpoint cover both. Without ``chunk_rows`` the rows' chunks are planned first.
    """
    if options.chunk_rows is None:
        source = plan_chunks(source, fitted.n_features_out_, moments, options.client)
    targets = open_job_source(
        target, options.replace(chunk_rows=None, allow_missing_chunks=source.allow_missing_chunks), name="target",
        allow_vector=True,
    )  # fmt: skip
    head = compute(targets.array[: min(_TARGET_HEAD_ROWS, targets.shape[0])], options.client)
    split = {
        "n_columns": source.shape[1],
        "rows_dtype": np.dtype(np.float32 if source.dtype == np.float32 else np.float64),
        "target_ndim": targets.given_ndim,
        "target_head": np.asarray(head, dtype=np.float64),
    }
    return source.with_columns_of(targets), split


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
    storage_options = worker_storage_options(target, storage_options, client)
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
