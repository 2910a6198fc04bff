"""Compiled dot products of every row's RFF features with one direction, features never stored.

A witness ``f(x) = z(x) . w`` ranks the rows of a source (:meth:`Witness.top_rows
<streamrff.twosample.witness.Witness.top_rows>`, :func:`streamrff.explain`). Embedding a
tile and multiplying it by ``w`` writes the tile's features, checks their phases in a
pass of its own and reads the features back in a GEMV; :func:`rff_feature_dots`
instead projects a tile (BLAS sgemm, as the mean-sketch pass
:func:`streamrff._kernels.sincos.sincos_feature_sums` does), then per row evaluates the sines
and cosines of :mod:`streamrff._kernels.sincos` (the explicit 16-lane vectors on AVX-512
cores) into one row of scratch that stays in L1 and sums their products with ``w``
right away: one call per chunk, without the GIL, features never stored. A row's phases
are bounded by Cauchy-Schwarz (``||x|| max_j ||W_j|| + max |b|``), so only rows whose
bound exceeds :data:`streamrff._kernels.sincos.MAX_FAST_PHASE` are checked, and a row whose
phases do exceed it takes float32 of libm's float64 sin and cos, as the feature
kernels do.

Accuracy. The features are those of :meth:`RFF.transform <streamrff.RFF.transform>`
before the scale (the same float32 sin/cos, bit for bit); their products with ``w``
are summed in float32 in the order of LLVM's vectorised reduction (fixed for a compiled
kernel: lane-wise partial sums, then their tree) and the total is scaled in float64.
So a row's value depends on that row alone (not on the chunking, the tile or the
thread count) and is within Higham's bound ``gamma_D sum_j |z_j w_j|`` (Higham 2002,
eq. 3.5) of the exact dot product of the float32 features, as a float32 GEMV's is.
"""

from __future__ import annotations

import numpy as np

from .compiled import jit
from .sincos import MAX_FAST_PHASE, WIDE_VECTORS, _sincos, _wide_lanes

__all__ = ["rff_feature_dots"]

_jit = jit(nogil=True, boundscheck=False, error_model="numpy")


@_jit
def rff_feature_dots(rows, frequencies, offsets, direction, tile_rows, out):  # pragma: no cover - compiled
    """``out[i] = sum_j direction[j] * u_j(rows[i])``, ``u`` the unscaled float32 RFF features.

    Without ``offsets`` (length 0): ``u = (cos p, sin p)`` with ``p = rows @ frequencies``
    and ``direction`` of length 2 m (the cosines' weights, then the sines'); with them:
    ``u = cos(p + offsets)`` and ``direction`` of length m.

    ``rows``: C-contiguous float32 (n, d); ``frequencies``: float32 (d, m); ``offsets``:
    float32 (m,) or (0,); ``direction``: float32; ``out``: float64 (n,). The caller
    multiplies ``out`` by the features' scale.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X, W = rng.normal(size=(5, 3)).astype(np.float32), rng.normal(size=(3, 40)).astype(np.float32)
    >>> w = rng.normal(size=80).astype(np.float32)
    >>> out = np.empty(5)
    >>> rff_feature_dots(X, W, np.zeros(0, np.float32), w, 2, out)
    >>> phases = X.astype(np.float64) @ W
    >>> exact = np.cos(phases) @ w[:40] + np.sin(phases) @ w[40:]
    >>> bool(np.allclose(out, exact, rtol=0, atol=1e-4))
    True
    """
    n, d, m = rows.shape[0], rows.shape[1], frequencies.shape[1]
    projection = np.empty((min(tile_rows, n), m), np.float32)
    scratch = np.empty((2, m), np.float32)
    # |phase_ij| <= ||x_i|| max_j ||W_:j|| + max |offsets| (Cauchy-Schwarz, in float64 with a
    # margin for the float32 projection's rounding): rows within MAX_FAST_PHASE of it skip the check.
    widest = 0.0
    for j in range(m):
        norm = 0.0
        for k in range(d):
            norm += np.float64(frequencies[k, j]) ** 2
        widest = max(widest, np.sqrt(norm))
    shift = 0.0
    for j in range(offsets.shape[0]):
        shift = max(shift, abs(np.float64(offsets[j])))
    for start in range(0, n, tile_rows):
        phases = projection[: min(n, start + tile_rows) - start]
        np.dot(rows[start : start + phases.shape[0]], frequencies, phases)
        for i in range(phases.shape[0]):
            norm = 0.0
            for k in range(d):
                norm += np.float64(rows[start + i, k]) ** 2
            fast = np.sqrt(norm) * widest * (1.0 + 1e-4) + shift <= MAX_FAST_PHASE
            if fast or _largest_phase(phases[i], offsets) <= MAX_FAST_PHASE:
                out[start + i] = _row_dot(phases[i], offsets, direction, scratch)
            else:
                out[start + i] = _exact_row_dot(phases[i], offsets, direction)


@jit(nogil=True, boundscheck=False, error_model="numpy", inline="always")
def _largest_phase(row, offsets):  # pragma: no cover - compiled
    """``max_j |row[j] + offsets[j]|`` (``offsets`` may have length 0)."""
    largest = np.float32(0.0)
    for j in range(row.shape[0]):
        largest = max(largest, abs(row[j] + offsets[j] if offsets.shape[0] else row[j]))
    return largest


@jit(nogil=True, boundscheck=False, error_model="numpy", inline="always")
def _row_dot(row, offsets, direction, scratch):  # pragma: no cover - compiled
    """One row's dot product (see :func:`rff_feature_dots`), its phases at most MAX_FAST_PHASE.

    ``scratch``: float32 (2, m), overwritten.
    """
    m = row.shape[0]
    cosines, sines = scratch[0], scratch[1]
    one = np.float32(1.0)
    first = 0
    wide = WIDE_VECTORS and row.strides[0] == 4 and cosines.strides[0] == 4
    if offsets.shape[0]:
        if wide and offsets.strides[0] == 4:
            first = _wide_lanes(row, offsets, one, cosines, cosines, row, 2)
        for j in range(first, m):
            cosines[j] = _sincos(row[j] + offsets[j])[1]
        return _lane_sum(cosines, direction[:m], cosines, direction[:0])
    if wide:
        first = _wide_lanes(row, row, one, cosines, sines, row, 0)
    for j in range(first, m):
        sines[j], cosines[j] = _sincos(row[j])
    return _lane_sum(cosines, direction[:m], sines, direction[m:])


@jit(nogil=True, boundscheck=False, error_model="numpy", fastmath={"reassoc"})
def _lane_sum(first, first_weights, second, second_weights):  # pragma: no cover - compiled
    """``first . first_weights + second . second_weights`` (the second pair may be empty) in float32.

    ``reassoc`` lets LLVM vectorise the sum (lane-wise partial sums, then a tree): without
    it the float32 additions run one after another, and the row's dot costs a third of
    its sines and cosines. The order is fixed by the compiled code, the same for every row.
    """
    m = first.shape[0]
    total = np.float32(0.0)
    if second_weights.shape[0]:
        for j in range(m):
            total += first_weights[j] * first[j] + second_weights[j] * second[j]
    else:
        for j in range(m):
            total += first_weights[j] * first[j]
    return np.float64(total)


@_jit
def _exact_row_dot(row, offsets, direction):  # pragma: no cover - compiled
    """:func:`_row_dot` for any phase: float32 of libm's float64 cos and sin, summed in float64."""
    m = row.shape[0]
    total = 0.0
    for j in range(m):
        if offsets.shape[0]:
            total += np.float64(direction[j]) * np.float64(np.float32(np.cos(np.float64(row[j] + offsets[j]))))
        else:
            x = np.float64(row[j])
            total += np.float64(direction[j]) * np.float64(np.float32(np.cos(x)))
            total += np.float64(direction[m + j]) * np.float64(np.float32(np.sin(x)))
    return total
