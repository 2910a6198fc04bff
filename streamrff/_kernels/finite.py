"""A compiled check that an array holds no NaN or inf, in one read and no temporary.

``np.isfinite(rows).all()`` writes a boolean array as large as a quarter (float32) of the rows
and reads it back; a chunk of 10 000 x 768 float32 rows is 30 MB, far beyond the caches, so the
check costs a pass over memory and a third. Here the largest exponent field of the values' bits
is reduced in 64 independent integer lanes (the loop vectorises; float comparisons would not,
without reordering): 1.4-1.7x ``np.isfinite(rows).all()`` for float32 chunks of 10 000 x 768
and 200 000 x 32 (one core, CPU time, loaded machine, one run), with the same answer: a value
is NaN or inf exactly when its exponent field is all ones.
"""

from __future__ import annotations

import numpy as np

from .compiled import jit

__all__ = ["all_finite"]

#: The exponent field of IEEE 754 binary32 and binary64, as unsigned integers of the same width.
_EXPONENT_MASKS = {np.dtype(np.float32): np.uint32(0x7F800000), np.dtype(np.float64): np.uint64(0x7FF0000000000000)}

_LANES = 64


@jit(nogil=True, boundscheck=False)
def _largest_exponent(bits, mask):  # pragma: no cover - compiled
    """``max(bits & mask)`` over a 1-D unsigned integer array, in 64 lanes so that the loop vectorises."""
    lanes = np.zeros(_LANES, bits.dtype)
    whole = bits.shape[0] // _LANES * _LANES
    for start in range(0, whole, _LANES):
        for k in range(_LANES):
            lanes[k] = max(lanes[k], bits[start + k] & mask)
    largest = lanes.max()
    for i in range(whole, bits.shape[0]):
        largest = max(largest, bits[i] & mask)
    return largest


def all_finite(array: np.ndarray) -> bool:
    """Whether ``array`` holds no NaN and no inf: ``np.isfinite(array).all()``, faster.

    C-contiguous float32 and float64 arrays take the compiled pass; any other array numpy's.

    Examples
    --------
    >>> import numpy as np
    >>> from streamrff._kernels.finite import all_finite
    >>> rows = np.random.default_rng(0).normal(size=(100, 7)).astype(np.float32)
    >>> all_finite(rows), bool(np.isfinite(rows).all())
    (True, True)
    >>> rows[42, 3] = -np.inf
    >>> all_finite(rows), bool(np.isfinite(rows).all())
    (False, False)
    """
    mask = _EXPONENT_MASKS.get(array.dtype)
    if mask is None or not array.flags.c_contiguous or array.size == 0:
        return bool(np.isfinite(array).all())
    return bool(_largest_exponent(array.reshape(-1).view(mask.dtype), mask) != mask)
