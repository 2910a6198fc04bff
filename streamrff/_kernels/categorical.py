"""Compiled +/-1 category hashes of the mixed map (:mod:`streamrff.maps.categorical`), one row at a time.

For row ``i`` and frequency ``j`` the sign is the parity of the top bits of splitmix64's finaliser
applied to ``bits[i, c] ^ keys[j, c] + golden`` over the categorical columns ``c`` that frequency
``j`` hashes (``mask[j, c]``). NumPy would hold a (rows x hashed frequencies) uint64 array per column
and pass over it ten times; here each hash lives in registers, so a table's categorical columns cost
about what its numeric projection does (``benchmarks/bench_tables_sketch.py``). The arithmetic is
uint64 throughout (constants and shift counts typed as such: numba would promote a uint64 mixed with
an int64 to float64), so the result is bit for bit that of the formula.
"""

from __future__ import annotations

import numpy as np

from .compiled import jit

__all__ = ["category_flips"]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31, _S63 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(63)


@jit(nogil=True)
def category_flips(
    bits: np.ndarray, starts: np.ndarray, columns: np.ndarray, keys: np.ndarray, out: np.ndarray
) -> None:  # pragma: no cover - compiled
    """``out[i, j] = 1 - 2 * parity`` (float32) of the hashed bits of row ``i`` under frequency ``j``.

    ``bits``: (rows, columns) uint64, the codes' float64 bit patterns. Frequency ``j`` hashes the
    columns ``columns[starts[j]:starts[j + 1]]`` with the keys ``keys[starts[j]:starts[j + 1]]`` (the
    mask in compressed rows: no branch in the inner loop). ``out``: (rows, frequencies) float32.
    """
    n_rows = bits.shape[0]
    n_frequencies = starts.shape[0] - 1
    for i in range(n_rows):
        for j in range(n_frequencies):
            flip = np.uint64(0)
            for position in range(starts[j], starts[j + 1]):
                z = (bits[i, columns[position]] ^ keys[position]) + _GOLDEN
                z = (z ^ (z >> _S30)) * _MIX1
                z = (z ^ (z >> _S27)) * _MIX2
                z = z ^ (z >> _S31)
                flip ^= z >> _S63
            out[i, j] = np.float32(1.0) - np.float32(2.0) * np.float32(flip)
