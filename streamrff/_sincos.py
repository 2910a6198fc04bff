"""Compiled float32 sine and cosine, fused with what the RFF hot paths do next.

numpy evaluates ``cos`` and ``sin`` in separate passes, each with its own
range reduction, and cannot fuse them with the scaling and the column sums
that follow, so a float32 RFF tile is read and written four or five times.
These kernels (compiled by numba, without the GIL) evaluate both functions
from one reduction by pi/2 and either write the scaled features
(:func:`sincos_features`, :func:`cos_features`: 2.0x numpy's passes on a
256 x 512 tile) or accumulate their column sums (:func:`sincos_feature_sums`,
:func:`cos_feature_sums`: a whole chunk in one call; 1.3x numpy's tile loop
with the projection that both share, ``benchmarks/bench_sincos.py``). One
call per chunk also keeps other threads' Python (zarr's reads) from stalling
the kernel: it takes the GIL once, not a few times per tile.

Accuracy. The phase ``x`` is reduced as ``r = x - k pi/2`` with pi/2 split
in three float32 parts (Cody-Waite, as in Cephes' ``sinf``), and ``sin r``,
``cos r`` on ``|r| <= pi/4`` are Cephes' float32 minimax polynomials: at most
1.5 ulp from the float64 value (numpy's: 1 ulp), without bias. The split is
exact while ``|x| <= MAX_FAST_PHASE``. Beyond it (a tiny bandwidth, or
outliers), the sum kernels evaluate that tile as float32 of libm's float64
sin and cos, and callers of the feature kernels check :func:`largest_phase`
first and use numpy for that tile. Column sums are accumulated in float32
over 64 rows, then in float64: their norm-wise error (~1e-7) is that of
numpy's float32 features summed by a float32 GEMV.

Every kernel takes C-contiguous float32 arrays; outputs never overlap inputs.
"""

from __future__ import annotations

import numpy as np

from ._compiled import jit

__all__ = [
    "MAX_FAST_PHASE",
    "cos_feature_sums",
    "cos_features",
    "largest_phase",
    "rff_features",
    "sincos_feature_sums",
    "sincos_features",
]

#: Largest |phase| for which ``k * _PIO2_2`` stays exact (k < 2**13, the bound of Cephes'
#: reduction) with margin. A float32 phase this large already carries a rounding error of
#: |x| * 6e-8 radians.
MAX_FAST_PHASE = 8192.0

#: Rows summed in float32 before the float64 accumulation.
_SEGMENT_ROWS = 64

_TWO_OVER_PI = np.float32(2.0 / np.pi)
# pi/2 = _PIO2_1 + _PIO2_2 + _PIO2_3; the first two have short mantissas, so k * part is exact.
_PIO2_1 = np.float32(1.5703125)
_PIO2_2 = np.float32(4.837512969970703125e-4)
_PIO2_3 = np.float32(7.54978995489188216e-8)
# Cephes sinf / cosf minimax coefficients on [-pi/4, pi/4].
_S1, _S2, _S3 = np.float32(-1.6666654611e-1), np.float32(8.3321608736e-3), np.float32(-1.9515295891e-4)
_C1, _C2, _C3 = np.float32(4.166664568298827e-2), np.float32(-1.388731625493765e-3), np.float32(2.443315711809948e-5)

_jit = jit(nogil=True, boundscheck=False, error_model="numpy")


@jit(nogil=True, boundscheck=False, error_model="numpy", inline="always")
def _sincos(x):  # pragma: no cover - compiled
    """(sin x, cos x) in float32, exact reduction for |x| <= MAX_FAST_PHASE."""
    k = np.rint(x * _TWO_OVER_PI)
    r = ((x - k * _PIO2_1) - k * _PIO2_2) - k * _PIO2_3
    r2 = r * r
    s = r + r * r2 * (_S1 + r2 * (_S2 + r2 * _S3))
    c = np.float32(1.0) - np.float32(0.5) * r2 + r2 * r2 * (_C1 + r2 * (_C2 + r2 * _C3))
    q = np.int32(k)
    sin_x = c if q & 1 else s
    cos_x = s if q & 1 else c
    return (-sin_x if q & 2 else sin_x), (-cos_x if (q + 1) & 2 else cos_x)


@_jit
def largest_phase(phases, offsets):  # pragma: no cover - compiled
    """``max |phases + offsets|`` (``offsets`` may have length 0), to check a tile before
    :func:`sincos_features` or :func:`cos_features`.

    (Inside those kernels the check would stop their loops from vectorising.)
    """
    rows, m = phases.shape
    largest = np.zeros(m, np.float32)  # per column, so that the loop vectorises
    if offsets.shape[0]:
        for i in range(rows):
            for j in range(m):
                largest[j] = max(largest[j], abs(phases[i, j] + offsets[j]))
    else:  # no offsets (the sincos variant)
        for i in range(rows):
            for j in range(m):
                largest[j] = max(largest[j], abs(phases[i, j]))
    return largest.max()


@_jit
def sincos_feature_sums(rows, frequencies, tile_rows, out):  # pragma: no cover - compiled
    """Add the column sums of ``cos(rows @ frequencies)`` to ``out[0]`` and of the sines to ``out[1]``.

    ``rows``: float32 (n, d); ``frequencies``: float32 (d, m); ``out``: float64 (2, m). The
    projection runs tile by tile (BLAS sgemm), all in one call without the GIL.
    """
    out += _column_sums(rows, frequencies, np.zeros(0, np.float32), tile_rows)


@_jit
def cos_feature_sums(rows, frequencies, offsets, tile_rows, out):  # pragma: no cover - compiled
    """Add the column sums of ``cos(rows @ frequencies + offsets)`` to ``out``; return the sum of their squares.

    ``rows``: float32 (n, d); ``frequencies``: float32 (d, m); ``offsets``: float32 (m,);
    ``out``: float64 (m,).
    """
    totals = _column_sums(rows, frequencies, offsets, tile_rows)
    out += totals[0]
    return totals[1].sum()


@_jit
def _column_sums(rows, frequencies, offsets, tile_rows):  # pragma: no cover - compiled
    """Float64 (2, m) totals over all rows of what :func:`_fast_sums` sums per tile."""
    n, m = rows.shape[0], frequencies.shape[1]
    # Scratch for the whole call: allocating per tile fragments the heap between the large
    # buffers of zarr reads, whose pages then fault afresh (~2 ms per 6 MB).
    projection = np.empty((min(tile_rows, n), m), np.float32)
    scratch = np.empty((3, m), np.float32)
    tile = np.empty((2, m))
    totals = np.zeros((2, m))
    for start in range(0, n, tile_rows):
        phases = projection[: min(n, start + tile_rows) - start]
        np.dot(rows[start : start + phases.shape[0]], frequencies, phases)
        if not _fast_sums(phases, offsets, scratch, tile):
            _exact_sums(phases, offsets, tile)
        totals += tile
    return totals


@_jit
def _fast_sums(phases, offsets, scratch, tile):  # pragma: no cover - compiled
    """Column sums of a tile's features, in float64, into ``tile``; False if a phase exceeds
    MAX_FAST_PHASE (then ``tile`` is garbage).

    Without ``offsets`` (length 0): ``tile[0]`` = sums of ``cos(phases)``, ``tile[1]`` = sums of
    ``sin(phases)``. With them: ``tile[0]`` = sums of ``cos(phases + offsets)``, ``tile[1]`` =
    sums of their squares. ``scratch``: float32 (3, m), overwritten.
    """
    rows, m = phases.shape
    largest, segment = scratch[0], scratch[1:]
    largest[:] = 0.0  # per column, so that the loops vectorise
    tile[:] = 0.0
    for start in range(0, rows, _SEGMENT_ROWS):
        segment[:] = 0.0
        for i in range(start, min(rows, start + _SEGMENT_ROWS)):
            row = phases[i]
            if offsets.shape[0]:
                for j in range(m):
                    x = row[j] + offsets[j]
                    largest[j] = max(largest[j], abs(x))
                    c = _sincos(x)[1]
                    segment[0, j] += c
                    segment[1, j] += c * c
            else:
                for j in range(m):
                    x = row[j]
                    largest[j] = max(largest[j], abs(x))
                    s, c = _sincos(x)
                    segment[0, j] += c
                    segment[1, j] += s
        tile += segment
    return largest.max() <= MAX_FAST_PHASE


@_jit
def _exact_sums(phases, offsets, tile):  # pragma: no cover - compiled
    """:func:`_fast_sums` for any phase: float32 of libm's float64 cos and sin."""
    rows, m = phases.shape
    tile[:] = 0.0
    for i in range(rows):
        for j in range(m):
            if offsets.shape[0]:
                c = np.float64(np.float32(np.cos(np.float64(phases[i, j] + offsets[j]))))
                tile[0, j] += c
                tile[1, j] += c * c
            else:
                x = np.float64(phases[i, j])
                tile[0, j] += np.float64(np.float32(np.cos(x)))
                tile[1, j] += np.float64(np.float32(np.sin(x)))


@_jit
def sincos_features(phases, scale, out):  # pragma: no cover - compiled
    """``out[:, :m] = scale * cos(phases)``, ``out[:, m:] = scale * sin(phases)``.

    ``phases``: float32 (rows, m) with ``largest_phase(phases) <= MAX_FAST_PHASE``;
    ``out``: float32 (rows, 2 m).
    """
    rows, m = phases.shape
    factor = np.float32(scale)
    for i in range(rows):
        row, cosines, sines = phases[i], out[i, :m], out[i, m:]  # 1-D views: the loop vectorises
        for j in range(m):
            s, c = _sincos(row[j])
            cosines[j] = factor * c
            sines[j] = factor * s


@_jit
def cos_features(phases, offsets, scale, out):  # pragma: no cover - compiled
    """``out = scale * cos(phases + offsets)``.

    ``phases``, ``out``: float32 (rows, m) with ``largest_phase(phases, offsets) <=
    MAX_FAST_PHASE``; ``offsets``: float32 (m,).
    """
    rows, m = phases.shape
    factor = np.float32(scale)
    for i in range(rows):
        row, cosines = phases[i], out[i]
        for j in range(m):
            cosines[j] = factor * _sincos(row[j] + offsets[j])[1]


@_jit
def rff_features(rows, frequencies, offsets, scale, projection, out):  # pragma: no cover - compiled
    """Float32 RFF features of a tile: ``projection = rows @ frequencies``, then the scaled
    cos/sin (``offsets`` of length 0) or cos of phase plus offset into ``out``.

    The one float32 RFF embedding that :meth:`RFF.transform` and the compiled
    Lloyd kernel share, so both see the same features bit for bit. Tiles with a
    phase beyond MAX_FAST_PHASE take float32 of libm's float64 cos and sin.
    ``rows``: float32 (t, d); ``frequencies``: float32 (d, m); ``projection``:
    float32 (t, m) scratch; ``out``: float32 (t, 2 m) or (t, m).
    """
    np.dot(rows, frequencies, projection)
    sincos = offsets.shape[0] == 0
    if largest_phase(projection, offsets) <= MAX_FAST_PHASE:
        if sincos:
            sincos_features(projection, scale, out)
        else:
            cos_features(projection, offsets, scale, out)
        return
    factor = np.float32(scale)
    rows_, m = projection.shape
    for i in range(rows_):
        for j in range(m):
            if sincos:
                x = np.float64(projection[i, j])
                out[i, j] = factor * np.float32(np.cos(x))
                out[i, m + j] = factor * np.float32(np.sin(x))
            else:
                out[i, j] = factor * np.float32(np.cos(np.float64(projection[i, j] + offsets[j])))
