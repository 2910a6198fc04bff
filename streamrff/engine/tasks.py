"""The tasks of a job: rows per task, and consecutive chunks of a source grouped into at most ``max_tasks`` tasks.

A task reads its chunks one after the other (a zarr source's task reads its stored chunks itself;
a numpy source's gets a view of its rows; a dask source's gets its group's block), embeds each as
it would alone with the job's chunk kernel, checks it (finite rows), and merges the partials in
chunk order, at most ``split_every`` at once; so a task never holds more than one chunk's
features, and the result differs from one task per chunk by float64 rounding only.
:func:`plan_chunks` picks the rows per task of sources without a chunking of their own (from the
workers' memory per thread, never their number); :func:`streamrff.engine.run_chunks` groups the chunks
and tree-merges the tasks' partials.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import dask
import numpy as np

from .._kernels.finite import all_finite
from ..errors import InputError
from ..sketches.base import Sketch
from ..sources.chunkread import ChunkRows
from ..sources.rows import RowSource, chunk_digest
from .checkpoint import PartialSlot, load_partial

__all__ = [
    "ChunkKernel", "DEFAULT_MAX_TASKS", "auto_chunk_rows", "chunk_groups", "group_data", "group_identity", "group_task",
    "memory_per_thread", "merge_group", "plan_chunks", "resolve_max_tasks",
]

logger = logging.getLogger("streamrff.engine")

#: A per-chunk kernel: (finite rows, global index of the chunk's first row,
#: boolean mask of the finite rows within the chunk or None) -> partial sketch.
ChunkKernel = Callable[[np.ndarray, int, "np.ndarray | None"], Sketch]

@dataclasses.dataclass(frozen=True)
class _ChunkGroup:
    """Consecutive chunks of one source that one task reads and embeds one after the other.

    ``local_starts`` and ``sizes`` are the chunks' first rows in the source and their row counts;
    the task's rows are read at ``local_start - read_base`` (0 for a stored array the task reads
    itself, the group's first row for rows handed to the task). Arrays, so that a group of many
    chunks costs the graph a few bytes per chunk.
    """

    name: str
    indices: np.ndarray
    local_starts: np.ndarray
    sizes: np.ndarray
    global_base: int
    read_base: int
    wave: int | None = None
    data_columns: int | None = None

    def where(self, position: int) -> tuple[str, int, int, int | None]:
        """The source's name, the chunk's index, its first row, and for rows joined with their targets the
        number of data columns (the rest are the target's)."""
        return (self.name, int(self.indices[position]), int(self.local_starts[position]), self.data_columns)


def group_task(
    data: Any,
    group: _ChunkGroup,
    kernel: ChunkKernel,
    on_invalid: str,
    slot: PartialSlot | None,
    shows_non_finite: Callable[[Sketch], bool] | None,
    split_every: int,
) -> Sketch:
    """The merged partial sketch of a group of chunks, read and embedded one chunk at a time.

    ``data`` is the group's rows (a numpy view or a dask block) or the stored array
    (:class:`~streamrff.sources.chunkread.ChunkRows`), read chunk by chunk. Partials merge in chunk
    order, at most ``split_every`` at once.
    """

    def rows_of(position: int) -> np.ndarray:
        start = int(group.local_starts[position]) - group.read_base
        return np.asarray(data[start : start + int(group.sizes[position]), :])

    if slot is not None and slot.identity is None:  # a dask chunk: its identity is its content, known now
        slot = slot.identified(group_identity([chunk_digest(rows_of(i)) for i in range(len(group.sizes))]))
        if slot.saved:
            return load_partial(slot.path, slot.storage_options)
    partials: list[Sketch] = []
    for position in range(len(group.sizes)):
        offset = group.global_base + int(group.local_starts[position])
        partials.append(
            _chunk_partial(rows_of(position), offset, group.where(position), kernel, on_invalid, shows_non_finite)
        )
        if len(partials) == split_every:
            partials = [merge_group(*partials)]
    return _saved(partials[0] if len(partials) == 1 else merge_group(*partials), slot)


def group_identity(identities: Sequence[str | None]) -> str | None:
    """A group's identity: its chunk's, or a digest of its chunks' (None if one is not known yet)."""
    if any(identity is None for identity in identities):
        return None
    if len(identities) == 1:
        return identities[0]
    return hashlib.sha256("\n".join(identities).encode()).hexdigest()  # type: ignore[arg-type]


def _chunk_partial(
    rows: np.ndarray,
    row_offset: int,
    where: tuple[str, int, int, int | None],
    kernel: ChunkKernel,
    on_invalid: str,
    shows_non_finite: Callable[[Sketch], bool] | None = None,
) -> Sketch:
    if rows.dtype not in (np.float32, np.float64):
        rows = rows.astype(np.float64)
    valid = None
    if shows_non_finite is not None:
        # The kernel's result is non-finite whenever a row is: look at the rows only then (the
        # result of finite rows that overflow is kept, as the check-first path keeps it).
        partial = kernel(rows, row_offset, None)
        if not shows_non_finite(partial) or all_finite(rows):
            return partial
        valid = _finite_rows(rows, where, on_invalid)
    elif not all_finite(rows):  # one compiled pass first: per-row flags cost 6x as much
        valid = _finite_rows(rows, where, on_invalid)
    return kernel(rows if valid is None else rows[valid], row_offset, valid)


def _finite_rows(rows: np.ndarray, where: tuple[str, int, int, int | None], on_invalid: str) -> np.ndarray:
    """Which rows of a chunk holding NaN or inf are finite; raises naming the chunk and its first bad row
    unless ``on_invalid`` is "skip" (``where``: :meth:`_ChunkGroup.where`)."""
    finite = np.isfinite(rows).all(axis=1)
    if on_invalid != "skip":
        bad = np.flatnonzero(~finite)
        name, chunk_index, local_start, data_columns = where
        first = int(bad[0])
        # A row whose data is finite is bad for its target: name it as the target's row.
        in_target = data_columns is not None and bool(np.isfinite(rows[first, :data_columns]).all())
        hint = (
            "Clean the data, or pass on_invalid='skip' (CLI: --on-invalid skip) to skip such rows."
            if on_invalid == "raise"
            else "Clean the data first: every row is needed here."
        )
        raise InputError(
            f"NaN or inf in {bad.size} row(s) of {name} chunk {chunk_index} (rows {local_start}.."
            f"{local_start + rows.shape[0] - 1}); first bad row: {'target' if in_target else name} row "
            f"{local_start + first}. {hint}"
        )
    return finite


def _saved(partial: Sketch, slot: PartialSlot | None) -> Sketch:
    if slot is not None:
        slot.save(partial)
    return partial


def merge_group(*partials: Sketch) -> Sketch:
    return partials[0].merge_many(partials[1:])


#: Most tasks of one job by default: consecutive chunks are grouped into one task beyond this. A task
#: costs the client and the scheduler a few kilobytes (:func:`streamrff._base.memory.plan_bytes`), so a
#: job's graph stays under about a hundred MB; ten thousand tasks keep any cluster busy.
DEFAULT_MAX_TASKS = 10_000


#: Chunks of a dask source run in one compute. Dask holds a few kilobytes of state for every task of
#: a graph it runs, and a dask source has a task per chunk, so a source of more chunks runs in
#: waves of this many (results merged in chunk order, as one graph would).
WAVE_CHUNKS = 2**15


def resolve_max_tasks(max_tasks: Any) -> int:
    """``max_tasks``, or the dask config key ``streamrff.max-tasks`` (default :data:`DEFAULT_MAX_TASKS`)."""
    if max_tasks is None:
        max_tasks = dask.config.get("streamrff.max-tasks", DEFAULT_MAX_TASKS)
    if isinstance(max_tasks, bool) or not isinstance(max_tasks, (int, np.integer)) or max_tasks < 1:
        raise InputError(f"max_tasks must be a positive integer (CLI --max-tasks). Got {max_tasks!r}.")
    return int(max_tasks)


def chunk_groups(
    source: RowSource, name: str, global_base: int, per_task: int, chunk_filter: Callable[[int, int], bool] | None
) -> Iterator[_ChunkGroup]:
    """The groups of ``per_task`` consecutive chunks of ``source`` (less those ``chunk_filter`` skips)."""
    data_columns = source.joined[0].shape[1] if source.joined else None
    sizes = np.asarray(source.array.chunks[0], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes[:-1])]).astype(np.int64)
    keep = None
    if chunk_filter is not None:
        bounds = zip((global_base + starts).tolist(), (global_base + starts + sizes).tolist())
        keep = np.array([chunk_filter(start, stop) for start, stop in bounds], dtype=bool)
    for first in range(0, sizes.size, per_task):
        indices = np.arange(first, min(first + per_task, sizes.size))
        if keep is not None:
            indices = indices[keep[indices]]
        if indices.size:
            yield _ChunkGroup(name, indices, starts[indices], sizes[indices], global_base, 0, data_columns=data_columns)


def group_data(source: RowSource, groups: list[_ChunkGroup], per_task: int, listed: bool) -> Any:
    """Each group with what its task reads, from which row (``read_base``): the stored array itself
    (zarr), a view of the rows (numpy), or the group's block of a dask array (its chunks, merged if grouped)."""
    if source.zarr_array is not None:
        stored = ChunkRows(
            source.zarr_array, source.allow_missing_chunks, check_stored=not listed, location=source.location
        )
        stored_key = dask.delayed(stored, pure=True, traverse=False)  # shipped once, like the kernel
        for group in groups:
            yield group, stored_key
        return
    if source.rows is not None:
        for group in groups:
            first, stop = int(group.local_starts[0]), int(group.local_starts[-1] + group.sizes[-1])
            yield dataclasses.replace(group, read_base=first), source.rows[first:stop]
        return
    sizes = source.array.chunks[0]
    if per_task == 1:
        blocks = source.array.to_delayed().ravel()
        for group in groups:
            yield dataclasses.replace(group, read_base=int(group.local_starts[0])), blocks[int(group.indices[0])]
        return
    merged = tuple(sum(sizes[first : first + per_task]) for first in range(0, len(sizes), per_task))
    block_starts = np.concatenate([[0], np.cumsum(merged)]).astype(np.int64)
    per_wave = max(1, WAVE_CHUNKS // per_task)  # groups of one wave
    waves: dict[int, Any] = {}
    for group in groups:
        block = int(group.indices[0]) // per_task
        wave = block // per_wave
        if wave not in waves:  # dask materialises only this wave's chunks of the source when it runs
            first, last = wave * per_wave, min((wave + 1) * per_wave, len(merged))
            rows = source.array[int(block_starts[first]) : int(block_starts[last])]
            waves = {wave: rows.rechunk({0: merged[first:last], 1: -1}).to_delayed(optimize_graph=False).ravel()}
        yield dataclasses.replace(group, read_base=int(block_starts[block]), wave=wave), waves[wave][block % per_wave]


#: Rows per task of in-memory data: each task embeds about this many feature values (rows x D,
#: ~0.1-0.3 s on one core), which amortises scheduling (~1 ms locally, more on a cluster) and,
#: with moments, merging its D x D partial; a task's input stays under 1/8 of a thread's memory.
_TASK_FEATURE_VALUES = 2**27


_MAX_TASK_INPUT_BYTES = 256 * 2**20


def memory_per_thread(client: Any) -> float:
    """Smallest memory per task thread of the cluster's workers, or of this machine (no client, or an address
    not connected yet)."""
    if client is not None and not isinstance(client, str):
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


def plan_chunks(source: RowSource, width: int, moments: bool, client: Any) -> RowSource:
    """Rows per task when the caller gave none: :func:`auto_chunk_rows` for in-memory arrays
    (dask's default chunks for them ignore D); a chunked source keeps its chunks (they are
    the unit of reading and of checkpoints) unless a chunk is too big for a worker's memory."""
    memory = memory_per_thread(client)
    too_big = max(source.row_chunks) * 9 * source.shape[1] > _task_input_cap(memory)
    if not (source.in_memory or too_big):
        return source
    rows = auto_chunk_rows(source.shape[0], source.shape[1], width, moments, memory)
    logger.info("rows per task: %d (D = %d, moments: %s)", rows, width, moments)
    return source.with_chunk_rows(rows)
