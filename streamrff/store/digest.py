"""The identity of the rows a bucket holds: a content digest that adds up chunk by chunk."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from ..engine.run import compute
from ..errors import InputError
from ..sources.rows import RowSource

__all__ = ["rows_digest", "source_digest"]


def _mix(values: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on uint64 values (wrapping arithmetic)."""
    values = (values ^ (values >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    values = (values ^ (values >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return values ^ (values >> np.uint64(31))


_LANE_KEYS = np.array([0x9E3779B97F4A7C15, 0xD1B54A32D192ED03], dtype=np.uint64)


def _column_keys(width: int) -> np.ndarray:
    """(width, 2) odd 64-bit multipliers, one per column and lane: a column's values count with its own key."""
    with np.errstate(over="ignore"):
        columns = np.arange(width, dtype=np.uint64)[:, None] * np.uint64(2) + np.arange(2, dtype=np.uint64)
        return _mix(columns + np.uint64(0x632BE59BD9B4E019)) | np.uint64(1)


def _digest_lanes(rows: np.ndarray, first_row: int) -> np.ndarray:
    """Two 64-bit sums over the rows of ``rows`` of a hash of (the row's float64 bits, its global index).

    A row's value in a lane is ``sum_j bits_j K_j`` (odd keys ``K_j``, modulo 2**64: a change of
    one value always changes it), mixed with the row's index; the rows' values are summed modulo
    2**64, so blocks of rows add up in any grouping: a bucket's digest does not depend on how its
    rows were chunked.
    """
    values = np.ascontiguousarray(rows, dtype="<f8") + 0.0  # -0.0 reads as 0.0: the same value
    bits = values.view(np.uint64)
    n_rows, width = bits.shape
    with np.errstate(over="ignore"):
        combined = bits @ _column_keys(width)  # (n, 2), wrapping integer arithmetic
        position = np.arange(first_row, first_row + n_rows, dtype=np.uint64)[:, None] ^ _LANE_KEYS
        return _mix(combined ^ _mix(position)).sum(axis=0, dtype=np.uint64)


def rows_digest(rows: Any, first_row: int = 0) -> str:
    """The identity of a block of rows as a store records it: sha256 of two keyed 64-bit content hashes.

    Every row is hashed with its global index (``first_row + i``), each column with a key of its
    own, and the hashes are summed modulo 2**64, so the digest is computed chunk by chunk in any
    grouping and changes when any one value changes (and, but for a 2**-128 chance, when several do).
    Values are compared as float64
    (float32 rows and their float64 copy agree; -0.0 equals 0.0). It detects rows that differ,
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
    return _finish_digest(_digest_lanes(rows, int(first_row)), rows.shape[0], rows.shape[1])


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
        dask.delayed(_digest_lanes, pure=True)(piece, first_row + int(offset))
        for piece, offset in zip(block.to_delayed().ravel(), offsets)
    ]
    lanes = compute(dask.delayed(_sum_lanes)(parts), client)
    return _finish_digest(lanes, stop - start, source.shape[1])


def _sum_lanes(parts: list[np.ndarray]) -> np.ndarray:
    with np.errstate(over="ignore"):
        return np.sum(np.stack(parts), axis=0, dtype=np.uint64)
