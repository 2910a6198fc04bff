"""Compiled +/-1 category hashes of the mixed map (:mod:`streamrff.maps.categorical`), once per distinct code.

For row ``i`` and frequency ``j`` the sign is the parity of the top bits of splitmix64's finaliser
applied to ``bits[i, c] ^ keys[j, c] + golden`` over the categorical columns ``c`` that frequency
``j`` hashes (``mask[j, c]``). A column's hash depends on the row only through its code, so
:func:`category_entries` hashes each distinct code once: an open-addressing table per column (in the
kernel, no sort; the caller keeps it across chunks) finds a code's entry, its flips under every
frequency packed into ``ceil(m / 64)`` uint64 words, and a row's words are the XOR of its columns'
entries (a few dozen XORs per row instead of one hash per row and hashed frequency), formed where
they are used: in the fused float32 sums (:func:`signed_float32_sums`), or by :func:`gather_words`
for :func:`flip_signs`, which negates the features whose bit is set. The arithmetic is uint64
throughout (constants and shift counts typed as such: numba would promote a uint64 mixed with an
int64 to float64), so the result is bit for bit that of the formula; a sign flip is exactly a product by -1.
"""

from __future__ import annotations

import numpy as np

from .compiled import jit
from .sincos import MAX_FAST_PHASE, WIDE_VECTORS, _sincos, _wide_lanes, largest_phase

__all__ = [
    "category_entries",
    "flip_signs",
    "gather_words",
    "reduce_phases",
    "signed_feature_sums",
    "signed_float32_sums",
]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31, _S63 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(63)
_ONE, _LOW6, _S6 = np.uint64(1), np.uint64(63), np.uint64(6)
_NEGATIVE_ZERO = np.uint64(0x8000000000000000)
_ONE_BITS, _S31_32 = np.uint32(0x3F800000), np.uint64(31)  # float32 1.0; a flip sets its sign bit


@jit(nogil=True, inline="always")
def _finalise(z):  # pragma: no cover - compiled
    z = (z ^ (z >> _S30)) * _MIX1
    z = (z ^ (z >> _S27)) * _MIX2
    return z ^ (z >> _S31)


@jit(nogil=True)
def category_entries(
    bits, by_column, columns, starts, frequencies, keys, slots, values, filled, entries
):  # pragma: no cover - compiled
    """``entries[i, c]``: the row of ``values`` holding the flips of row ``i``'s code in column ``c`` (-1 for a
    column no frequency hashes), whose XOR over the columns packs row ``i``'s signs (:func:`gather_words`);
    False (``entries`` unfinished) when a table below is full.

    ``bits``: (rows, any columns) uint64, the rows' float64 bit patterns (-0.0 read as 0.0), or its
    transpose with ``by_column`` (a column-major chunk, read in place); the codes are its columns
    ``columns`` (int64). The ``c``-th of those is hashed by the frequencies
    ``frequencies[starts[c]:starts[c + 1]]`` with the keys ``keys[starts[c]:starts[c + 1]]`` (the mask in
    compressed columns). ``entries``: (rows, columns) int32.

    The tables, kept by the caller across calls: per column an open-addressing table of ``size`` slots
    (``slots``: (columns, size, 2) uint64, a code beside its row of ``values`` plus one, 0 for an empty
    slot; at most half full; a code's first slot the top bits of its product by the golden ratio) from a
    code to its row of ``values`` ((capacity, ceil(m / 64)) uint64: its flips, packed); ``filled``: (columns + 1,)
    int64, the codes of each column's table and the rows of ``values`` in use. Column by column (read in
    place) each code is looked up (hashed when first seen, bit ``j % 64`` of word ``j // 64`` the flip of
    frequency ``j``) and its row noted.
    """
    n_rows, n_columns = bits.shape[1] if by_column else bits.shape[0], columns.shape[0]
    size = slots.shape[1]
    log_size = 1  # size: a power of two, at least 2
    while (1 << log_size) < size:
        log_size += 1
    slot_mask, shift = np.uint64(size - 1), np.uint64(64 - log_size)
    for column in range(n_columns):  # a column at a time: its table stays in cache
        first, last = starts[column], starts[column + 1]
        if first == last:
            entries[:, column] = -1
            continue
        for i in range(n_rows):
            code = bits[columns[column], i] if by_column else bits[i, columns[column]]
            if code == _NEGATIVE_ZERO:
                code = np.uint64(0)
            slot = (code * _GOLDEN) >> shift
            while slots[column, slot, 1] != 0 and slots[column, slot, 0] != code:
                slot = (slot + _ONE) & slot_mask
            value = np.int64(slots[column, slot, 1]) - 1
            if value < 0:  # a code first seen here: its flips under every frequency that hashes the column
                if 2 * (filled[column] + 1) > size or filled[n_columns] == values.shape[0]:
                    return False
                value = filled[n_columns]
                filled[n_columns] += 1
                filled[column] += 1
                slots[column, slot, 0] = code
                slots[column, slot, 1] = np.uint64(value + 1)
                values[value, :] = 0
                for position in range(first, last):
                    z = _finalise((code ^ keys[position]) + _GOLDEN)
                    j = np.uint64(frequencies[position])
                    values[value, j >> _S6] |= (z >> _S63) << (j & _LOW6)
            entries[i, column] = value
    return True


@jit(nogil=True, inline="always")
def _row_words(entries, values, i, row):  # pragma: no cover - compiled
    """``row`` = the XOR of row ``i``'s entries' rows of ``values`` (its packed signs)."""
    row[:] = 0
    for column in range(entries.shape[1]):
        value = entries[i, column]
        if value >= 0:
            for word in range(row.shape[0]):
                row[word] ^= values[value, word]


@jit(nogil=True)
def gather_words(entries, values, words):  # pragma: no cover - compiled
    """``words[i]``: row ``i``'s packed signs from :func:`category_entries` ((rows, ceil(m / 64)) uint64)."""
    for i in range(entries.shape[0]):
        _row_words(entries, values, i, words[i])


@jit(nogil=True)
def flip_signs(words, out, m, row_bits, row, one_bits, sign_shift):  # pragma: no cover - compiled
    """Multiply ``out[i, j]`` (and ``out[i, m + j]`` when ``out`` has 2m columns) by -1 where bit ``j`` of
    ``words[i]`` is set, else by 1 (a product by +/-1 is exact).

    ``row``: (m,) scratch of ``out``'s dtype and ``row_bits`` the same memory as unsigned integers;
    ``one_bits``: the bits of 1.0 in that dtype and ``sign_shift`` the sign bit's position (uint64
    scalars): a row's +/-1 are written as bits, a loop with no branch and no lookup.
    """
    halves = out.shape[1] // m
    n_words = words.shape[1]
    for i in range(out.shape[0]):
        for word in range(n_words):
            bits = words[i, word]
            base = word * 64
            for b in range(min(64, m - base)):
                row_bits[base + b] = one_bits | (((bits >> np.uint64(b)) & _ONE) << sign_shift)
        for half in range(halves):
            block = out[i, half * m : (half + 1) * m]
            for j in range(m):
                block[j] *= row[j]


_INVERSE_TURN = 1.0 / (2.0 * np.pi)
_TURN = 2.0 * np.pi


@jit(nogil=True)
def reduce_phases(projection: np.ndarray, phases: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover - compiled
    """``out = float32(p - rint(p / 2 pi) * 2 pi)`` with ``p = projection (+ phases)``, float64 until the cast.

    The mixed map's phases (float64, as :meth:`streamrff.RFF._embed_float64_phases` reduces them with
    NumPy, operation for operation, so bit for bit: no fused multiply-add without fastmath) in one
    pass; ``phases`` of length 0 for the sincos variant.
    """
    rows, m = projection.shape
    offsets = phases.shape[0] > 0
    for i in range(rows):
        for j in range(m):
            p = projection[i, j]
            if offsets:
                p = p + phases[j]
            turns = np.rint(p * _INVERSE_TURN)
            out[i, j] = np.float32(p - turns * _TURN)


@jit(nogil=True)
def signed_feature_sums(projection, phases, words, sums):  # pragma: no cover - compiled
    """Add to ``sums`` (float64, (2, m)) the column sums of a mixed map's unscaled features of one tile.

    The features are ``sign * cos`` and ``sign * sin`` (or, with ``phases``, ``sign * cos`` and its
    square) of the phases :func:`reduce_phases` gives, signs from ``words`` (:func:`gather_words`),
    sines and cosines from the kernels of :mod:`streamrff._kernels.sincos` (16 lanes at a time where
    the CPU has them), so they agree with :func:`flip_signs` of ``sincos_features`` to float32
    rounding. Summed in float32 over segments of 256 rows, the segments in float64 (as
    :func:`streamrff.maps.base.tile_column_sums`), with no feature written.
    """
    rows, m = projection.shape
    offsets = phases.shape[0] > 0
    first, second = np.zeros(m, dtype=np.float32), np.zeros(m, dtype=np.float32)
    signs, reduced = np.empty(m, dtype=np.float32), np.empty(m, dtype=np.float32)
    cosines, sines, zeros = np.empty(m, dtype=np.float32), np.empty(m, dtype=np.float32), np.zeros(m, np.float32)
    one, two = np.float32(1.0), np.float32(2.0)
    for start in range(0, rows, 256):
        first[:] = 0.0
        second[:] = 0.0
        for i in range(start, min(rows, start + 256)):
            for word in range(words.shape[1]):
                bits = words[i, word]
                for b in range(min(64, m - 64 * word)):
                    signs[64 * word + b] = one - two * np.float32(np.int32((bits >> np.uint64(b)) & _ONE))
            for j in range(m):
                p = projection[i, j]
                if offsets:
                    p = p + phases[j]
                reduced[j] = np.float32(p - np.rint(p * _INVERSE_TURN) * _TURN)
            low = 0
            if WIDE_VECTORS:
                if offsets:
                    low = _wide_lanes(reduced, zeros, one, cosines, cosines, reduced, 2)
                else:
                    low = _wide_lanes(reduced, reduced, one, cosines, sines, reduced, 0)
            for j in range(low, m):
                sines[j], cosines[j] = _sincos(reduced[j])
            if offsets:
                for j in range(m):
                    c = signs[j] * cosines[j]
                    first[j] += c
                    second[j] += c * c
            else:
                for j in range(m):
                    first[j] += signs[j] * cosines[j]
                    second[j] += signs[j] * sines[j]
        for j in range(m):
            sums[0, j] += first[j]
            sums[1, j] += second[j]


@jit(nogil=True, boundscheck=False, error_model="numpy")
def signed_float32_sums(
    rows, by_column, columns, frequencies, offsets, entries, values, tile_rows, sums
):  # pragma: no cover - compiled
    """:func:`signed_feature_sums` from float32 phases: per tile of ``tile_rows`` rows the projection
    ``rows @ frequencies`` (BLAS sgemm, as :func:`streamrff._kernels.sincos.sincos_feature_sums`), then
    the signed ``cos`` and ``sin`` (``offsets`` of length 0) or ``cos(phase + offsets)`` and its square.

    ``rows``: float32 or float64 (n, any columns), or its transpose with ``by_column`` (a column-major
    chunk, read in place), of which the numeric ``columns`` (int64, d of them) are copied to float32 a
    tile at a time; ``frequencies``: float32 (d, m); ``offsets``: float32 (m,) or (0,);
    ``entries``, ``values``: the signs (:func:`category_entries`, XORed here row by row);
    ``sums``: float64 (2, m), added to.
    The sines and cosines are those of :func:`streamrff._kernels.sincos.rff_features` (a tile with a
    phase beyond ``MAX_FAST_PHASE``: float32 of libm's float64 ones), so the sums agree with
    :func:`flip_signs` of its features to float32 rounding; summed in float32 over 256 rows, then float64.
    """
    n, m = rows.shape[1] if by_column else rows.shape[0], frequencies.shape[1]
    with_offsets = offsets.shape[0] > 0
    projection = np.empty((min(tile_rows, n), m), np.float32)
    numeric = np.empty((min(tile_rows, n), columns.shape[0]), np.float32)
    first, second = np.zeros(m, dtype=np.float32), np.zeros(m, dtype=np.float32)
    signs, words = np.empty(m, np.float32), np.empty(values.shape[1], dtype=np.uint64)
    packed = words.view(np.uint16)  # 16 lanes' signs each, for the wide loop (little-endian: lane order)
    sign_bits = signs.view(np.uint32)  # +/-1.0 written as bits: a loop with no branch, which vectorises
    one = np.float32(1.0)
    # |phase| <= sum_k |x_k| max_j |W_kj| (+ the largest offset): when that bound, with room for the
    # GEMM's rounding, is within MAX_FAST_PHASE the tile needs no pass over its phases to say so.
    reach = np.zeros(columns.shape[0])
    for k in range(columns.shape[0]):
        for j in range(m):
            reach[k] = max(reach[k], abs(np.float64(frequencies[k, j])))
    largest_offset = 0.0
    for j in range(offsets.shape[0]):
        largest_offset = max(largest_offset, abs(np.float64(offsets[j])))
    row_bounds = np.empty(min(tile_rows, n))
    for start in range(0, n, tile_rows):
        phases, tile = projection[: min(n, start + tile_rows) - start], numeric[: min(n, start + tile_rows) - start]
        bounds = row_bounds[: tile.shape[0]]
        bounds[:] = 0.0
        for k in range(columns.shape[0]):  # a column at a time: read in place either way
            column = columns[k]
            if by_column:
                for i in range(tile.shape[0]):
                    tile[i, k] = np.float32(rows[column, start + i])
            else:
                for i in range(tile.shape[0]):
                    tile[i, k] = np.float32(rows[start + i, column])
            for i in range(tile.shape[0]):
                bounds[i] += abs(np.float64(tile[i, k])) * reach[k]
        bound = 0.0
        for i in range(tile.shape[0]):
            if bounds[i] > bound or bounds[i] != bounds[i]:  # a NaN stays: the pass below then decides
                bound = bounds[i]
        np.dot(tile, frequencies, phases)
        fast = (bound + largest_offset) * 1.001 <= MAX_FAST_PHASE and np.isfinite(bound)
        fast = fast or largest_phase(phases, offsets) <= MAX_FAST_PHASE
        for segment in range(0, phases.shape[0], 256):
            first[:] = 0.0
            second[:] = 0.0
            for i in range(segment, min(phases.shape[0], segment + 256)):
                _row_words(entries, values, start + i, words)
                row = phases[i]
                low = 0
                if fast and WIDE_VECTORS:  # 16 lanes at a time, the packed signs applied and summed in the vector
                    if with_offsets:
                        low = _wide_lanes(row, offsets, one, first, second, packed, 5)
                    else:
                        low = _wide_lanes(row, row, one, first, second, packed, 4)
                if low < m:  # the lanes left to the loops below: their signs as +/-1.0
                    for word in range(words.shape[0]):
                        bits = words[word]
                        for b in range(min(64, m - 64 * word)):
                            sign_bits[64 * word + b] = _ONE_BITS | np.uint32(((bits >> np.uint64(b)) & _ONE) << _S31_32)
                if fast:
                    for j in range(low, m):
                        if with_offsets:
                            c = signs[j] * _sincos(row[j] + offsets[j])[1]
                            first[j] += c
                            second[j] += c * c
                        else:
                            sine, cosine = _sincos(row[j])
                            first[j] += signs[j] * cosine
                            second[j] += signs[j] * sine
                else:
                    for j in range(m):
                        if with_offsets:
                            c = signs[j] * np.float32(np.cos(np.float64(row[j] + offsets[j])))
                            first[j] += c
                            second[j] += c * c
                        else:
                            first[j] += signs[j] * np.float32(np.cos(np.float64(row[j])))
                            second[j] += signs[j] * np.float32(np.sin(np.float64(row[j])))
            for j in range(m):
                sums[0, j] += first[j]
                sums[1, j] += second[j]
