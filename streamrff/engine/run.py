"""The engine's core: run a chunk kernel over the planned chunks of opened sources and tree-merge the partials.

It knows no sketch kind: a kernel is a pure function ``(rows, row_offset, valid) -> partial`` whose
partials merge (:class:`~streamrff.sketches.ChunkJob` says how a kind builds one). The reduction tree
is fixed by chunk order (groups of ``split_every``), so the answer does not depend on how many workers
run it, and tasks are pure, so a lost worker's tasks are retried with the same result.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import dask
import dask.array as da
import numpy as np

from .._base.blas import one_blas_thread
from .._base.memory import check_plan_fits, memory_available
from ..errors import InputError
from ..sketches.base import Sketch
from ..sources.rows import RowSource, open_source
from .checkpoint import chunk_identities, load_partial, open_checkpoint
from .connection import connect, wait_for_result
from .options import JobOptions, current_job_options, worker_storage_options
from .tasks import (
    ChunkKernel,
    chunk_groups,
    group_data,
    group_identity,
    group_task,
    memory_per_thread,
    merge_group,
    resolve_max_tasks,
)

__all__ = ["run_chunks", "compute", "read_chunks_in_order"]

logger = logging.getLogger("streamrff.engine")


def run_chunks(
    sources: Sequence[RowSource | da.Array],
    kernel: ChunkKernel,
    options: JobOptions | None = None,
    *,
    checkpoint_job: str = "",
    chunk_filter: Callable[[int, int], bool] | None = None,
    names: Sequence[str] | None = None,
    shows_non_finite: Callable[[Sketch], bool] | None = None,
) -> Sketch:
    """Apply ``kernel`` to every row chunk of ``sources`` (pooled, in order) and tree-merge the partials.

    ``sources`` are opened sources (:func:`streamrff.sources.open_source`; a dask
    array is wrapped as it is). ``options`` are the job's (:class:`JobOptions`;
    default: those in force, :func:`job_options`); its ``client`` should be
    connected already (:func:`connect`). Global row indices run through the sources in
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
    options = current_job_options() if options is None else options
    client, split_every, progress, retries = options.client, options.split_every, options.progress, options.retries
    checkpoint = options.checkpoint_path
    max_tasks = resolve_max_tasks(options.max_tasks)
    sources = [source if isinstance(source, RowSource) else open_source(source) for source in sources]
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
        memory_per_thread=memory_per_thread(client),
    )  # fmt: skip
    listed = [source.check_chunks_stored() for source in sources]  # a missing chunk: refused before any work
    job_key = uuid.uuid4().hex
    with contextlib.ExitStack() as stack:
        job = None
        if checkpoint is not None:
            stored = worker_storage_options(checkpoint, options.storage_options, client)
            job = stack.enter_context(open_checkpoint(checkpoint, checkpoint_job, sources[0], stored))
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
                results.append(compute(_merge_tree(current, split_every), client, progress, retries))
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
                    data, group, kernel_key, options.on_invalid, slot, shows_non_finite, split_every,
                    dask_key_name=f"chunk_task-{job_key}-{n_tasks}",
                )  # fmt: skip
                add(task, wave)
        if not current:
            raise InputError("No chunks to process: the data has no rows.")
        logger.info(
            "sketching %d chunk(s): %d from checkpoint, %d to compute%s, in %d task(s)", n_planned, reused,
            n_planned - reused, " or from checkpoint as read" if identified_late else "", n_tasks,
        )  # fmt: skip
        results.append(compute(_merge_tree(current, split_every), client, progress, retries))
        return results[0] if len(results) == 1 else _merge_tree(results, split_every, merge=merge_group)


def read_chunks_in_order(
    source: Any, options: JobOptions | None = None, name: str = "source"
) -> Iterator[tuple[int, np.ndarray]]:
    """The rows of ``source`` one row chunk at a time, in row order: ``(first row, rows)`` pairs.

    For a consumer whose answer depends on the order of the rows (a sequential test), where
    :func:`run_chunks` merges partials in any order of completion. ``source`` is anything
    :func:`~streamrff.sources.open_source` opens (numpy, dask, xarray, a zarr path or URL with the
    job's ``storage_options``) and is opened here with the job's options; chunks are those a sketch's
    tasks read (a zarr source's stored chunks, a dask source's blocks; in-memory rows in tiles of
    ``chunk_rows``, or whole), planned by the same :func:`~streamrff.engine.tasks.chunk_groups` and
    read by the same task data (:func:`~streamrff.engine.tasks.group_data`: a zarr chunk through
    :class:`~streamrff.sources.chunkread.ChunkRows`, so an absent chunk is refused as in a sketch),
    one compute each on the job's client (or locally). Only one chunk's rows are held at a time.

    Examples
    --------
    >>> import numpy as np, dask.array as da
    >>> from streamrff.engine import read_chunks_in_order
    >>> rows = da.from_array(np.arange(20.0).reshape(10, 2), chunks=(4, 2))
    >>> [(start, chunk.shape[0]) for start, chunk in read_chunks_in_order(rows)]
    [(0, 4), (4, 4), (8, 2)]
    """
    options = current_job_options() if options is None else options
    opened = source if isinstance(source, RowSource) else open_source(
        source, storage_options=options.storage_options, sample_dim=options.sample_dim,
        chunk_rows=options.chunk_rows, name=name, allow_missing_chunks=options.allow_missing_chunks,
    )  # fmt: skip
    listed = opened.check_chunks_stored()
    groups = list(chunk_groups(opened, name, 0, 1, None))
    with connect(options.client) as active:
        for group, data in group_data(opened, groups, 1, listed):
            start, size = int(group.local_starts[0]), int(group.sizes[0])
            if isinstance(data, np.ndarray):
                rows = data
            else:
                read = dask.delayed(_chunk_rows, pure=True)(data, start - group.read_base, size)
                rows = compute(read, active, False, options.retries)
            yield start, np.asarray(rows)


def _chunk_rows(data: Any, start: int, size: int) -> np.ndarray:
    """Rows ``start:start + size`` of a task's data (its stored array or its block), as numpy."""
    return np.asarray(data[start : start + size, :])


def _merge_tree(partials: list[Any], split_every: int, merge: Callable[..., Any] | None = None) -> Any:
    """Partials merged in groups of ``split_every``, level by level, in order (delayed unless ``merge``)."""
    merge = merge or dask.delayed(merge_group, pure=True)
    level = partials
    while len(level) > 1:
        level = [merge(*level[i : i + split_every]) for i in range(0, len(level), split_every)]
    return level[0]


def compute(result: Any, client: Any, progress: bool = False, retries: int = 3) -> Any:
    """Compute a dask collection or delayed value on ``client`` (or locally, one BLAS thread per task thread)."""
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
