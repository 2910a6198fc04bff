"""Refuse feature-space sizes that cannot fit in a worker's memory, before any work.

A task of the engine holds the map's random parameters (about D x d float64), a
tile of features (256 rows x D, with moments 2048 float64 or 4096 float32 rows, plus a D x D tile
moment; counted as float64) and, in the merge tree, up to
``split_every + 1`` partial sketches at once: their sums (D float64), second
moments (D x D float64) and permutation sums (B x D float64). That is compared with
the memory of one task thread (the smallest worker memory limit divided by its
threads, or this machine's memory divided by its cores).
"""

from __future__ import annotations

import resource
from pathlib import Path
from typing import Any

from ..errors import InputError

__all__ = [
    "task_bytes", "check_sizes_fit", "monitor_bytes", "check_monitor_fits", "memory_available", "plan_bytes",
    "check_plan_fits",
]

#: Feature tile rows the chunk kernels use at most (projection tiles; moment tiles).
_TILE_ROWS, _MOMENT_TILE_ROWS = 256, 2048


def task_bytes(
    n_features: int, n_features_in: int, moments: bool = False, n_permutations: int = 0, split_every: int = 8
) -> int:
    """Bytes one task thread needs at most for a map of ``n_features`` outputs on ``n_features_in`` columns.

    Examples
    --------
    >>> round(task_bytes(1024, 8) / 2**20, 2)  # MiB: mostly the 256 x D feature tile
    2.14
    >>> task_bytes(4096, 8, moments=True) // 2**20  # nine 128 MiB D x D partials in the merge tree
    1344
    """
    partials = split_every + 1
    per_partial = n_features * (1 + (n_features if moments else 0) + n_permutations) * 8
    tile = n_features * ((_MOMENT_TILE_ROWS + n_features) if moments else _TILE_ROWS) * 8
    return n_features * (n_features_in + 1) * 8 + tile + partials * per_partial


def _largest(fits: Any, upper: int) -> int:
    """Largest integer in [0, upper] for which the monotone predicate ``fits`` holds."""
    low, high = 0, upper
    while low < high:
        middle = (low + high + 1) // 2
        if fits(middle):
            low = middle
        else:
            high = middle - 1
    return low


def _gib(n_bytes: float) -> str:
    return f"{n_bytes / 2**30:.1f} GiB"


def _map_width(feature_map: Any) -> int | None:
    for name in ("n_features_out_", "n_components", "n_features"):
        value = getattr(feature_map, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def check_sizes_fit(
    feature_map: Any,
    n_features_in: int,
    memory_per_thread: float,
    moments: bool = False,
    n_permutations: int = 0,
    split_every: int = 8,
) -> None:
    """Raise InputError naming the parameter (and CLI flag) whose size cannot fit, and the largest that fits.

    Raises
    ------
    InputError
        If :func:`task_bytes` exceeds ``memory_per_thread``.

    Examples
    --------
    >>> import streamrff as srf
    >>> check_sizes_fit(srf.RFF(n_features=1024, bandwidth=1.0), 8, memory_per_thread=2**30)
    >>> check_sizes_fit(srf.RFF(n_features=10**9, bandwidth=1.0), 8, memory_per_thread=2**30)
    Traceback (most recent call last):
    ...
    streamrff.errors.InputError: n_features (CLI --features) = 1,000,000,000 needs about 2041.5 GiB per task
    thread (map parameters, features and the merge tree); a task thread has 1.0 GiB. The largest n_features
    that fits is 489,845: use that or less, or workers with more memory.
    """
    width = _map_width(feature_map)
    if width is None:
        return
    need = task_bytes(width, n_features_in, moments, n_permutations, split_every)
    if need <= memory_per_thread:
        return
    parts = "map parameters, features" + (", the D x D second moment" if moments else "") + " and the merge tree"
    if n_permutations and task_bytes(width, n_features_in, moments, 0, split_every) <= memory_per_thread:
        largest = _largest(
            lambda b: task_bytes(width, n_features_in, moments, b, split_every) <= memory_per_thread, n_permutations
        )
        raise InputError(
            f"n_permutations (CLI --permutations) = {n_permutations:,} with {width:,} features needs about "
            f"{_gib(need)} per task thread for the B x D permutation sums in the merge tree; a task thread has "
            f"{_gib(memory_per_thread)}. The largest n_permutations that fits is {largest:,}: use that or less, "
            "fewer features, or workers with more memory."
        )
    largest = _largest(
        lambda d: task_bytes(d, n_features_in, moments, n_permutations, split_every) <= memory_per_thread, width
    )
    raise InputError(
        f"n_features (CLI --features) = {width:,} needs about {_gib(need)} per task thread ({parts}); a task "
        f"thread has {_gib(memory_per_thread)}. The largest n_features that fits is {largest:,}: use that or "
        "less, or workers with more memory."
    )


def monitor_bytes(window: int, n_features: int, n_streams: int, n_columns: int = 0) -> int:
    """Bytes a drift monitor of ``window`` rows and ``n_features`` features needs at most, ``n_streams`` calibrating.

    The window's ring buffer (window x D float32 features and their float64 norms), the ring
    buffer of its raw rows (window x ``n_columns`` float64, kept by a monitor fitted on data for
    its per-column statistics; 0 columns for one fitted on a sketch) and the calibration's
    simulated streams (``n_streams`` x 2 window int32 row indices and float64 statistics).

    Examples
    --------
    >>> round(monitor_bytes(200, 512, 20_000) / 2**20)  # MiB: mostly the calibration's statistics
    92
    >>> monitor_bytes(200, 512, 0, n_columns=16) - monitor_bytes(200, 512, 0)  # the raw rows: 200 x 16 float64
    25600
    """
    return window * (n_features * 4 + 8 + n_columns * 8) + n_streams * 2 * window * (4 + 8)


def check_monitor_fits(window: int, n_features: int, n_streams: int, available: float, n_columns: int = 0) -> None:
    """Raise InputError naming ``window`` (CLI --window) when such a monitor cannot fit, and the largest that fits.

    ``n_columns``: the width of the raw rows the monitor keeps beside the features (0 for none).

    Examples
    --------
    >>> check_monitor_fits(200, 512, 20_000, available=2**30)
    >>> check_monitor_fits(10**9, 512, 2000, available=2**30)
    Traceback (most recent call last):
    ...
    streamrff.errors.InputError: window (CLI --window) = 1,000,000,000 rows with 512 features needs about 46618.3
    GiB (the window's features and the calibration's 2,000 simulated streams); this process has 1.0 GiB available.
    The largest window that fits is 21,450: use that or less, fewer features or streams, or a machine with more
    memory.
    """
    need = monitor_bytes(window, n_features, n_streams, n_columns)
    if need <= available:
        return
    largest = _largest(lambda rows: monitor_bytes(rows, n_features, n_streams, n_columns) <= available, window)
    raw = f", its raw rows ({n_columns:,} float64 columns)" if n_columns else ""
    raise InputError(
        f"window (CLI --window) = {window:,} rows with {n_features:,} features needs about {_gib(need)} (the "
        f"window's features{raw} and the calibration's {n_streams:,} simulated streams); this process has "
        f"{_gib(available)} available. The largest window that fits is {largest:,}: use that or less, fewer "
        "features or streams, or a machine with more memory."
    )


def _cgroup_headroom() -> int | None:
    """Bytes left under this process's cgroup v2 memory limit, None without a limit."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
        path = next(line[3:] for line in lines if line.startswith("0::"))  # the unified (v2) hierarchy
        group = Path("/sys/fs/cgroup") / path.lstrip("/")
        limit = (group / "memory.max").read_text().strip()
        if limit == "max":
            return None
        return int(limit) - int((group / "memory.current").read_text())
    except (OSError, StopIteration, ValueError):
        return None


def memory_available() -> int:
    """Bytes this process can still allocate: the least of the machine's available memory,
    the room left under its address-space limit (``ulimit -v``) and under its cgroup's limit.

    Examples
    --------
    >>> import psutil
    >>> 0 < memory_available() <= psutil.virtual_memory().total
    True
    """
    import psutil

    limits = [psutil.virtual_memory().available]
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        limits.append(soft - psutil.Process().memory_info().vms)
    cgroup = _cgroup_headroom()
    if cgroup is not None:
        limits.append(cgroup)
    return max(0, min(limits))


#: What the client (and the scheduler) keep per planned chunk and per task of a job's graph: a
#: chunk's place in dask's chunk tuple and in the task that reads it; a task's spec, key,
#: dependencies and state (measured: a few kilobytes with distributed, ~1 KB with threads).
_CHUNK_PLAN_BYTES, _TASK_GRAPH_BYTES = 256, 8 * 2**10


def plan_bytes(n_chunks: int, n_tasks: int, split_every: int = 8, partial_bytes: int = 0) -> int:
    """Bytes the client and the scheduler hold for a job of ``n_tasks`` tasks over ``n_chunks`` chunks.

    The chunk tasks, the merge tree over them (about ``n_tasks / (split_every - 1)`` merges), a
    place per chunk, and the ``split_every + 1`` partials of the last merge, on the client.

    Examples
    --------
    >>> plan_bytes(1_000_000, 10_000) // 2**20  # MiB: a million chunks in ten thousand tasks
    333
    """
    merges = -(-max(n_tasks - 1, 0) // (split_every - 1))
    return n_chunks * _CHUNK_PLAN_BYTES + (n_tasks + merges) * _TASK_GRAPH_BYTES + (split_every + 1) * partial_bytes


def check_plan_fits(
    n_chunks: int,
    n_tasks: int,
    available: float,
    split_every: int = 8,
    partial_bytes: int = 0,
    task_rows_bytes: float = 0.0,
    memory_per_thread: float = float("inf"),
) -> None:
    """Raise InputError (one line, the numbers and the fix) when a job's plan cannot fit, before its graph is built.

    ``task_rows_bytes`` is what the largest task holds of rows at once (a group of dask chunks
    arrives whole), checked against ``memory_per_thread`` / 8 like a chunk's rows.

    Examples
    --------
    >>> check_plan_fits(10_000, 10_000, available=2**30)
    >>> check_plan_fits(10**8, 10**8, available=2**30)
    Traceback (most recent call last):
    ...
    streamrff.errors.InputError: The job plans 100,000,000 tasks (and 14,285,715 merges) over 100,000,000
    chunks: about ... GiB on the client and the scheduler, where 1.0 GiB is available. Pass a smaller
    max_tasks (CLI --max-tasks, default 10,000), or rewrite the source in larger chunks.
    """
    need = plan_bytes(n_chunks, n_tasks, split_every, partial_bytes)
    if need > available:
        merges = -(-max(n_tasks - 1, 0) // (split_every - 1))
        raise InputError(
            f"The job plans {n_tasks:,} tasks (and {merges:,} merges) over {n_chunks:,} chunks: about {_gib(need)} on "
            f"the client and the scheduler, where {_gib(available)} is available. Pass a smaller max_tasks (CLI "
            "--max-tasks, default 10,000), or rewrite the source in larger chunks."
        )
    if task_rows_bytes > memory_per_thread / 8:
        raise InputError(
            f"The job groups {n_chunks:,} chunks into {n_tasks:,} tasks, so a task receives {_gib(task_rows_bytes)} of "
            f"rows at once; a task thread has {_gib(memory_per_thread)} (at most 1/8 for rows). Pass a larger "
            "max_tasks (CLI --max-tasks), or rechunk the dask array into fewer, larger chunks first."
        )
