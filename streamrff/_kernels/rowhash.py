"""A compiled content hash of rows: two 64-bit lanes summed over rows, in one read and no temporary.

The hash that :func:`streamrff.store.rows_digest` defines (a row's value in a lane is
``mix(sum_j bits_j K_j ^ mix(index ^ L))`` over the float64 bits of its values, with odd keys
``K_j``, wrapping arithmetic, splitmix64's finaliser ``mix``; the lanes sum it over rows modulo
2**64). NumPy needs a float64 copy of the rows, an integer matrix product and five temporaries
of the rows' size; here each row is converted, hashed and added in registers.
"""

from __future__ import annotations

import numpy as np

from .compiled import jit

__all__ = ["hash_lanes"]


@jit(nogil=True, boundscheck=False, inline="always")
def _mix(value):  # pragma: no cover - compiled
    """splitmix64's finaliser (wrapping uint64 arithmetic)."""
    value = (value ^ (value >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    value = (value ^ (value >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return value ^ (value >> np.uint64(31))


@jit(nogil=True, boundscheck=False)
def _lanes(rows, index, keys, lane_keys):  # pragma: no cover - compiled
    n_rows, width = rows.shape
    buffer = np.empty(width, np.float64)
    bits = buffer.view(np.uint64)
    lanes = np.zeros(2, np.uint64)
    for i in range(n_rows):
        for j in range(width):
            buffer[j] = np.float64(rows[i, j]) + 0.0  # -0.0 reads as 0.0
        position = index[i]
        for lane in range(2):
            combined = np.uint64(0)
            for j in range(width):
                combined += bits[j] * keys[j, lane]
            lanes[lane] += _mix(combined ^ _mix(position ^ lane_keys[lane]))
    return lanes


def hash_lanes(rows: np.ndarray, index: np.ndarray, keys: np.ndarray, lane_keys: np.ndarray) -> np.ndarray:
    """The two lanes of ``rows`` (float32 or float64, 2-D) at global row indices ``index`` (uint64).

    ``keys`` are the (width, 2) odd column keys, ``lane_keys`` the two lane keys (uint64).
    Other dtypes are converted to float64 first.

    Examples
    --------
    >>> import numpy as np
    >>> from streamrff._kernels.rowhash import hash_lanes
    >>> keys = np.array([[3, 5], [7, 9]], dtype=np.uint64)
    >>> rows = np.array([[1.0, -0.0]])
    >>> same = hash_lanes(rows, np.zeros(1, np.uint64), keys, np.ones(2, np.uint64))
    >>> bool((same == hash_lanes(np.zeros((1, 2)) + [1, 0], np.zeros(1, np.uint64), keys, np.ones(2, np.uint64))).all())
    True
    """
    if rows.dtype not in (np.float32, np.float64):
        rows = rows.astype(np.float64)
    return _lanes(rows, np.ascontiguousarray(index, dtype=np.uint64), keys, lane_keys)
