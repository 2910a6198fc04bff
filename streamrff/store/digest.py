"""The identity of the rows a bucket holds: a content digest that adds up chunk by chunk."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._base.memory import check_sizes_fit
from .._kernels.finite import all_finite
from .._kernels.rowhash import hash_lanes
from ..engine.options import JobOptions
from ..engine.run import compute, run_chunks
from ..engine.tasks import memory_per_thread, plan_chunks
from ..errors import InputError
from ..maps import FeatureMap
from ..sketches.base import ChunkKernel, Sketch
from ..sketches.mean import MeanSketch
from ..sources.rows import RowSource

__all__ = ["rows_digest", "source_digest", "sketch_with_digest"]


def _mix(values: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on uint64 values (wrapping arithmetic)."""
    values = (values ^ (values >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    values = (values ^ (values >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return values ^ (values >> np.uint64(31))


_LANE_KEYS = np.array([0x9E3779B97F4A7C15, 0xD1B54A32D192ED03], dtype=np.uint64)


@functools.lru_cache(maxsize=64)
def _column_keys(width: int) -> np.ndarray:
    """(width, 2) odd 64-bit multipliers, one per column and lane: a column's values count with its own key."""
    with np.errstate(over="ignore"):
        columns = np.arange(width, dtype=np.uint64)[:, None] * np.uint64(2) + np.arange(2, dtype=np.uint64)
        return _mix(columns + np.uint64(0x632BE59BD9B4E019)) | np.uint64(1)


_INVALID_KEY = np.uint64(0x2545F4914F6CDD1D)


def _digest_lanes(rows: np.ndarray, first_row: int, valid: np.ndarray | None = None) -> np.ndarray:
    """Two 64-bit sums over the rows of ``rows`` of a hash of (the row's float64 bits, its global index).

    A row's value in a lane is ``sum_j bits_j K_j`` (odd keys ``K_j``, modulo 2**64: a change of
    one value always changes it), mixed with the row's index; the rows' values are summed modulo
    2**64, so blocks of rows add up in any grouping: a bucket's digest does not depend on how its
    rows were chunked. With ``valid`` (the chunk's finite-row mask, as the engine's kernels get
    it), ``rows`` are the finite rows only and every other row counts as a keyed marker of its
    index: a non-finite row is invalid whatever its values.
    """
    n_rows, width = rows.shape
    if valid is None:
        index = np.arange(first_row, first_row + n_rows, dtype=np.uint64)
    else:
        index = (np.flatnonzero(valid) + first_row).astype(np.uint64)
    lanes = hash_lanes(rows, index, _column_keys(width), _LANE_KEYS)  # compiled: one read of the rows
    with np.errstate(over="ignore"):
        if valid is not None and not valid.all():
            invalid = (np.flatnonzero(~valid) + first_row).astype(np.uint64)
            lanes += _mix(_mix(invalid[:, None] ^ _LANE_KEYS) ^ _INVALID_KEY).sum(axis=0, dtype=np.uint64)
        return lanes


def _checked_lanes(rows: np.ndarray, first_row: int) -> np.ndarray:
    """:func:`_digest_lanes` of any rows: non-finite ones count as invalid markers."""
    rows = np.asarray(rows)
    if all_finite(rows):
        return _digest_lanes(rows, first_row)
    finite = np.isfinite(rows).all(axis=1)
    return _digest_lanes(rows[finite], first_row, finite)


def rows_digest(rows: Any, first_row: int = 0) -> str:
    """The identity of a block of rows as a store records it: sha256 of two keyed 64-bit content hashes.

    Every row is hashed with its global index (``first_row + i``), each column with a key of its
    own, and the hashes are summed modulo 2**64, so the digest is computed chunk by chunk in any
    grouping and changes when any one value changes (and, but for a 2**-128 chance, when several do).
    Values are compared as float64
    (float32 rows and their float64 copy agree; -0.0 equals 0.0); a row holding NaN or inf counts
    as invalid (a marker of its index, whatever its values), as the sketch counts it. It detects rows that differ,
    not an adversary: signatures (``signing_key``) do that.

    Parameters
    ----------
    rows : array-like of shape (n, d)
    first_row : int, default=0
        The global index of the first row.

    Returns
    -------
    str
        64 hexadecimal digits.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.arange(12.0).reshape(6, 2)
    >>> rows_digest(X) == rows_digest(X.astype("float32"))
    True
    >>> rows_digest(X[3:], first_row=3) == rows_digest(X[3:])  # the position counts
    False
    """
    rows = np.asarray(rows)
    if rows.ndim != 2:
        raise InputError(f"rows must be 2-D (rows, columns). Got shape {rows.shape}.")
    return _finish_digest(_checked_lanes(rows, int(first_row)), rows.shape[0], rows.shape[1])


def _finish_digest(lanes: np.ndarray, n_rows: int, width: int) -> str:
    message = b"streamrff rows v1\n" + lanes.astype("<u8").tobytes() + f"{n_rows},{width}".encode("ascii")
    return hashlib.sha256(message).hexdigest()


def source_digest(source: RowSource, start: int, stop: int, first_row: int, client: Any) -> str:
    """:func:`rows_digest` of rows ``start..stop-1`` of ``source`` (global index of ``start``: ``first_row``)."""
    if source.rows is not None:
        return rows_digest(source.rows[start:stop], first_row)
    import dask

    block = source.array[start:stop]
    offsets = np.cumsum((0, *block.chunks[0][:-1]))
    parts = [
        dask.delayed(_checked_lanes, pure=True)(piece, first_row + int(offset))
        for piece, offset in zip(block.to_delayed().ravel(), offsets)
    ]
    lanes = compute(dask.delayed(_sum_lanes)(parts), client)
    return _finish_digest(lanes, stop - start, source.shape[1])


def _sum_lanes(parts: list[np.ndarray]) -> np.ndarray:
    with np.errstate(over="ignore"):
        return np.sum(np.stack(parts), axis=0, dtype=np.uint64)


@dataclasses.dataclass(frozen=True)
class _Digested:
    """A chunk's partial sketch and the digest lanes of its rows: what a bucket's tasks return and merge."""

    sketch: Sketch
    lanes: np.ndarray

    def merge_many(self, others: Sequence[_Digested]) -> _Digested:
        with np.errstate(over="ignore"):
            lanes = self.lanes + sum((other.lanes for other in others), np.zeros(2, dtype=np.uint64))
        return _Digested(self.sketch.merge_many([other.sketch for other in others]), lanes)


def _digested_kernel(
    rows: np.ndarray, row_offset: int, valid: np.ndarray | None, kernel: ChunkKernel, first_row: int
) -> _Digested:
    """The kind's partial of a chunk and the digest lanes of the same rows, from one read of them."""
    return _Digested(kernel(rows, row_offset, valid), _digest_lanes(rows, first_row + row_offset, valid))


def _digested_not_finite(partial: _Digested, shows_non_finite: Callable[[Sketch], bool]) -> bool:
    return shows_non_finite(partial.sketch)


def sketch_with_digest(
    source: RowSource, feature_map: FeatureMap, options: JobOptions, first_row: int, **params: Any
) -> tuple[MeanSketch, str]:
    """The mean sketch of an opened ``source`` and :func:`rows_digest` of its rows, in one pass.

    Each chunk task embeds its rows and hashes the same rows (no second read); partials merge in
    chunk order as :func:`streamrff.engine.run_chunks` merges any kind's, and the digest lanes,
    sums modulo 2**64, add up with them. ``first_row`` is the global index of the source's first
    row; ``params`` are :meth:`MeanSketch.chunk_job`'s; ``options.client`` is connected.
    """
    job = MeanSketch.chunk_job(feature_map, **params)
    check_sizes_fit(feature_map, source.shape[1], memory_per_thread(options.client), job.moments,
                    split_every=options.split_every)  # fmt: skip
    if options.chunk_rows is None:
        source = plan_chunks(source, job.width, job.moments, options.client)
    shows = job.shows_non_finite
    result = run_chunks(
        [source], functools.partial(_digested_kernel, kernel=job.kernel, first_row=int(first_row)),
        options.replace(checkpoint=None),
        shows_non_finite=None if shows is None else functools.partial(_digested_not_finite, shows_non_finite=shows),
    )  # fmt: skip
    return result.sketch, _finish_digest(result.lanes, source.shape[0], source.shape[1])
