"""Structured orthogonal random features: Gaussian-kernel frequencies as Walsh-Hadamard products.

For rows of hundreds to thousands of columns the dense projection ``X W^T``
(``W``: m x d Gaussian) is nearly all the work of a sketch. Here ``W`` is a
stack of ``ceil(m / n)`` independent square blocks of side ``n`` (d zero-padded
to ``n = 2^k``), each a product of fast Walsh-Hadamard transforms and random
diagonals (:mod:`streamrff._kernels.hadamard`), so a row costs O(m log n) instead of
O(m d), and ``W`` is never materialised. The phases then go through the same
compiled sin/cos as the dense map (:mod:`streamrff._kernels.sincos`).

Which structure. SORF (Yu et al. 2016, sec. 4): a block is
``(1 / sigma) S H D1 H D2 H D3`` with ``H`` the orthonormal Hadamard matrix,
D1..D3 random sign diagonals and S a diagonal of row norms, so its rows are
exactly orthogonal. The paper takes every norm ``sqrt(n)``; here they are
independent chi(n) draws, the norms of Gaussian rows, as in their ORF (sec.
3): the error is the same and the bias of the kernel estimate, which the
paper's Thm. 4 bounds by O(1/sqrt(n)), is 5-20x smaller (measured at d = 16
and 100 for ``||x - y|| / sigma`` in 0.5..2: within the Monte-Carlo error of
3 000 seeds with chi norms, 4-20 standard errors off with sqrt(n)). For d <= 4
(n = 4) the structured rows are far from Haar and the estimate stays biased
(-0.08 at ``||x - y|| = 2 sigma``): use dense features there, where they cost
nothing anyway. Fastfood (Le, Sarlos & Smola 2013, eq. 7):
``(1 / sigma) S H G Pi H B`` with a Gaussian diagonal G, a permutation Pi and
chi(n) row norms S; two transforms instead of three, but its rows are not
orthogonal. Measured (``python benchmarks/bench_highdim.py --error-only``:
mean squared error of the 400 x 400 Gram matrix against the exact Gaussian
kernel, rows N(0, I_d), bandwidth sqrt(d), sin/cos variant, mean of three
seeds, d = 768, D = 4096):

=====================  ==========  ======================
features               MSE         / dense orthogonal
=====================  ==========  ======================
dense iid              1.83e-4     3.0x
dense orthogonal       6.09e-5     1.0x
SORF, chi(n) norms     5.09e-5     0.84x
SORF, sqrt(n) norms    5.05e-5     0.83x
Fastfood               2.94e-4     4.8x
=====================  ==========  ======================

(the sqrt(n) row: the same signs with ``row_scales`` set to ``1 / (n sigma)``.)

So SORF with chi(n) norms is the structure for ``RFF(structured=True)``: at
or below the error of dense orthogonal features (at d = 128, D = 1024, where
no padding is needed: 1.03x), a third of iid features' error; its three
transforms cost 1.5x Fastfood's two, still O(m log n). Fastfood stays here
for the benchmark.

The signs and norms of all blocks come from the generator the caller seeds
from the map's spec, so a spec regenerates them on every worker.

References
----------
Yu, F. X., Suresh, A. T., Choromanski, K., Holtmann-Rice, D. & Kumar, S.
(2016). Orthogonal random features. NeurIPS. Sec. 3 (ORF), sec. 4 (SORF).
Le, Q., Sarlos, T. & Smola, A. (2013). Fastfood - approximating kernel
expansions in loglinear time. ICML. Sec. 3, eq. (7).
"""

from __future__ import annotations

import numpy as np

from ..errors import InputError
from . import hadamard as _hadamard
from . import sincos as _sincos
from .compiled import jit

__all__ = [
    "STRUCTURED_METHODS",
    "structured_feature_sums",
    "structured_features",
    "structured_params",
    "structured_projection",
    "structured_rff_features",
]

#: The structures :func:`structured_params` draws.
STRUCTURED_METHODS = ("sorf", "fastfood")

#: Rows of a tile transformed together: the lanes of every butterfly (two 16-lane vectors).
#: A transform of length 1024 on 16 or 32 lanes ran at 2.2x its speed on 64 or 128 (the
#: (n, t) block is 128 KiB against 256 KiB; one core, one run).
_TILE_ROWS = 32

_jit = jit(nogil=True, boundscheck=False, error_model="numpy")  # cached in the per-user folder (_compiled)


def structured_params(
    rng: np.random.Generator, n_features_in: int, n_frequencies: int, bandwidth: float, method: str = "sorf"
) -> dict[str, np.ndarray]:
    """Draw the random diagonals of ``n_frequencies`` structured Gaussian frequencies.

    Parameters
    ----------
    rng : numpy.random.Generator
        Source of the signs (and of Fastfood's permutations and Gaussians); seeded from the
        map's spec so that every worker draws the same ones.
    n_features_in : int
        Input width d; padded to ``n = padded_width(d)``.
    n_frequencies : int
        Rows m of the implicit frequency matrix W (m x d), in ``ceil(m / n)`` blocks.
    bandwidth : float
        Kernel width sigma: ``E[cos(w . (x - y))] ~ exp(-||x - y||^2 / (2 sigma^2))``.
    method : {"sorf", "fastfood"}, default="sorf"
        The block structure (see the module docstring).

    Returns
    -------
    dict of numpy.ndarray
        ``signs``: float32 (blocks, 3, n) for SORF ([D3, D2, D1] of each block), (blocks, 1, n)
        for Fastfood (B); ``permutation``: int64 (blocks, n) (Fastfood; (blocks, 0) for SORF);
        ``gaussian``: float32 (blocks, n) (Fastfood; (blocks, 0) for SORF); ``row_scales``:
        float32 (m,), the factor that turns the unnormalised transforms' outputs into ``W x``
        (row norm over sigma, times ``n^-3/2`` for SORF's three transforms, ``n^-1`` for
        Fastfood's two).

    Examples
    --------
    >>> import numpy as np
    >>> from streamrff._kernels.sorf import structured_params, structured_projection
    >>> params = structured_params(np.random.default_rng(0), 4, 8, bandwidth=2.0)
    >>> params["signs"].shape, params["row_scales"].shape
    ((2, 3, 4), (8,))
    >>> W = structured_projection(np.eye(4, dtype=np.float32), params, np.empty((4, 8), np.float32)).T
    >>> gram = W[:4] @ W[:4].T  # one block: orthogonal rows
    >>> bool(np.allclose(gram, np.diag(np.diag(gram)), atol=1e-6))
    True
    """
    n = _hadamard.padded_width(n_features_in)
    blocks = -(-int(n_frequencies) // n)
    if method == "sorf":
        signs = (2 * rng.integers(0, 2, size=(blocks, 3, n)) - 1).astype(np.float32)
        # (chi / sigma) (H / sqrt(n))^3: unit rows of the orthonormal product scaled to chi(n)
        # norms, Gaussian rows' norms (the module docstring says why not sqrt(n)).
        chi = np.sqrt(rng.chisquare(n, size=blocks * n))
        row_scales = chi / (n**1.5 * bandwidth)
        permutation = np.zeros((blocks, 0), np.int64)
        gaussian = np.zeros((blocks, 0), np.float32)
    elif method == "fastfood":
        signs = (2 * rng.integers(0, 2, size=(blocks, 1, n)) - 1).astype(np.float32)
        permutation = np.stack([rng.permutation(n) for _ in range(blocks)]).astype(np.int64)
        gaussian = rng.standard_normal((blocks, n)).astype(np.float32)
        # Row i of H G Pi H B has norm sqrt(n) ||G||_F; S rescales it to an independent chi(n)
        # norm (Le et al. 2013, eq. 7), over sigma.
        chi = np.sqrt(rng.chisquare(n, size=(blocks, n)))
        frobenius = np.linalg.norm(gaussian.astype(np.float64), axis=1, keepdims=True)
        row_scales = (chi / (np.sqrt(n) * frobenius * bandwidth)).reshape(-1)
    else:
        raise InputError(f"method must be one of {STRUCTURED_METHODS}. Got {method!r}; use 'sorf'.")
    return {
        "signs": signs,
        "permutation": permutation,
        "gaussian": gaussian,
        "row_scales": row_scales[: int(n_frequencies)].astype(np.float32),
    }


def _kernel_args(params: dict[str, np.ndarray]) -> tuple[np.ndarray, ...]:
    return params["signs"], params["permutation"], params["gaussian"], params["row_scales"]


@_jit
def _transpose_tile(rows, start, t, rows_t):  # pragma: no cover - compiled
    """``rows_t[:, :t] = rows[start:start + t].T`` into a contiguous (d, t) view, returned."""
    d = rows.shape[1]
    view = rows_t.ravel()[: d * t].reshape(d, t)
    squares = 0  # columns moved in 16 x 16 squares of vectors (AVX-512, whole tiles)
    if _hadamard.WIDE_VECTORS and t % _hadamard.LANES == 0 and rows.strides[1] == 4:
        squares = d // _hadamard.LANES * _hadamard.LANES
        for j in range(0, squares, _hadamard.LANES):
            for r in range(0, t, _hadamard.LANES):
                _hadamard._transpose_square(rows, start + r, j, view, r)
    for j in range(squares, d):  # strided reads, contiguous writes: 5x the other order (d = 768, t = 64)
        column = view[j]
        for r in range(t):
            column[r] = rows[start + r, j]
    return view


@_jit
def _project_block(columns, b, signs, permutation, gaussian, block, scratch):  # pragma: no cover - compiled
    """``block`` = the unnormalised transform of block ``b`` of the (d, t) transposed tile ``columns``."""
    d, t = columns.shape
    n = block.shape[0]
    if signs.shape[1] == 3 and _hadamard.WIDE_VECTORS and t % _hadamard.LANES == 0 and n >= _hadamard.LANES:
        _hadamard.sorf_columns(columns, signs[b], block)  # the same bits, in L1-sized groups
        return
    block[d:] = 0.0
    if signs.shape[1] == 3:
        first = signs[b, 0]
        for j in range(d):  # the copy and D3 in one pass
            source, target, sign = columns[j], block[j], first[j]
            for r in range(t):
                target[r] = source[r] * sign
        _hadamard.walsh_hadamard_columns(block)
        for k in (1, 2):
            _hadamard._scale_rows(block, signs[b, k])
            _hadamard.walsh_hadamard_columns(block)
    else:
        block[:d] = columns
        _hadamard.fastfood_block(block, signs[b, 0], permutation[b], gaussian[b], scratch)


@_jit
def _write_phases(block, row_scales, first, phases, column):  # pragma: no cover - compiled
    """``phases[r, column + j] = block[j, r] * row_scales[first + j]`` for the columns ``phases`` has room for."""
    t = block.shape[1]
    width = min(block.shape[0], phases.shape[1] - column)
    step = 8  # a transpose in 8 x 8 squares: 1.6x either plain loop order (n = 1024, t = 64)
    for r0 in range(0, t, step):
        r1 = min(t, r0 + step)
        for j0 in range(0, width, step):
            for j in range(j0, min(width, j0 + step)):
                source, factor = block[j], row_scales[first + j]
                for r in range(r0, r1):
                    phases[r, column + j] = source[r] * factor


@_jit
def _buffers(n, d):  # pragma: no cover - compiled
    return (
        np.empty((d, _TILE_ROWS), np.float32),
        np.empty((n, _TILE_ROWS), np.float32),
        np.empty((n, _TILE_ROWS), np.float32),
    )


@_jit
def _projection(rows, signs, permutation, gaussian, row_scales, out):  # pragma: no cover - compiled
    """``out = rows @ W^T`` (float32 (N, m)) for the structured W of the arguments."""
    count, d = rows.shape
    blocks, n = signs.shape[0], signs.shape[2]
    rows_t, block_buffer, scratch_buffer = _buffers(n, d)
    for start in range(0, count, _TILE_ROWS):
        t = min(_TILE_ROWS, count - start)
        columns = _transpose_tile(rows, start, t, rows_t)
        block = block_buffer.ravel()[: n * t].reshape(n, t)
        scratch = scratch_buffer.ravel()[: n * t].reshape(n, t)
        tile_out = out[start : start + t]
        for b in range(blocks):
            _project_block(columns, b, signs, permutation, gaussian, block, scratch)
            _write_phases(block, row_scales, b * n, tile_out, b * n)


def structured_projection(X: np.ndarray, params: dict[str, np.ndarray], out: np.ndarray) -> np.ndarray:
    """``out = X @ W^T`` for the structured frequencies ``W`` of ``params``, without forming W.

    Parameters
    ----------
    X : numpy.ndarray
        float32 (N, d), C-contiguous.
    params : dict of numpy.ndarray
        From :func:`structured_params` with ``n_features_in = d``.
    out : numpy.ndarray
        float32 (N, m), C-contiguous, m = ``params["row_scales"].shape[0]``; overwritten.

    Returns
    -------
    numpy.ndarray
        ``out``. A row's values depend on that row only (not on N or the other rows).

    Examples
    --------
    >>> import numpy as np
    >>> from streamrff._kernels.sorf import structured_params, structured_projection
    >>> params = structured_params(np.random.default_rng(0), 5, 8, bandwidth=1.0)
    >>> W = structured_projection(np.eye(5, dtype=np.float32), params, np.empty((5, 8), np.float32)).T
    >>> x = np.random.default_rng(1).normal(size=(3, 5)).astype(np.float32)
    >>> bool(np.allclose(structured_projection(x, params, np.empty((3, 8), np.float32)), x @ W.T, atol=1e-5))
    True
    """
    _projection(X, *_kernel_args(params), out)
    return out


@_jit
def _block_sums(block, row_scales, first, offsets, lanes, largest, totals, out):  # pragma: no cover - compiled
    """Add the column sums of the features of one transformed (n, t) block to ``out`` (float64
    (2, >= width)), in the block's own layout; False if a phase exceeds MAX_FAST_PHASE (then
    nothing is added).

    Row j of the block holds frequency ``first + j`` of the t rows: its phases are
    ``block[j] * row_scales[first + j]`` (plus the offset), their cos and sin (or cos and its
    square) go to vectors of t lanes (``lanes``: float32 (3, t) scratch), summed by a fixed
    tree (the same for every call), then in float64. On AVX-512, full tiles run
    :func:`streamrff._kernels.sincos._wide_row_sums` (the same operations in registers, the float32
    totals in ``totals``, float32 (2, n)).
    """
    n, t = block.shape
    width = min(n, row_scales.shape[0] - first)
    largest[:t] = 0.0
    if _sincos.WIDE_VECTORS and t == _TILE_ROWS:
        whole = width // _sincos.LANES * _sincos.LANES
        for j in range(0, whole, _sincos.LANES):  # 16 rows at a time: their lane sums share vector adds
            if offsets.shape[0]:
                _sincos._wide_row_sums(block, j, row_scales, first, offsets, largest, totals, 3, 16)
            else:
                _sincos._wide_row_sums(block, j, row_scales, first, offsets, largest, totals, 1, 16)
        for j in range(whole, width):
            if offsets.shape[0]:
                _sincos._wide_row_sums(block, j, row_scales, first, offsets, largest, totals, 3, 1)
            else:
                _sincos._wide_row_sums(block, j, row_scales, first, offsets, largest, totals, 1, 1)
        for j in range(width):
            out[0, j] += totals[0, j]
            out[1, j] += totals[1, j]
        return largest[:t].max() <= _sincos.MAX_FAST_PHASE
    phases, cosines, second = lanes[0, :t], lanes[1, :t], lanes[2, :t]
    for j in range(width):
        source, factor = block[j], row_scales[first + j]
        if offsets.shape[0]:  # the phases exactly as structured_features computes them
            offset = offsets[first + j]
            for r in range(t):
                x = source[r] * factor + offset
                phases[r] = x
                largest[r] = max(largest[r], abs(x))
        else:
            for r in range(t):
                x = source[r] * factor
                phases[r] = x
                largest[r] = max(largest[r], abs(x))
        for r in range(t):
            s, c = _sincos._sincos(phases[r])
            cosines[r] = c
            second[r] = s
        if offsets.shape[0]:
            for r in range(t):
                second[r] = cosines[r] * cosines[r]
        size = t
        if t == _TILE_ROWS:  # a full tile: fold to 16 lanes as the 16-lane kernel does
            for r in range(16):
                cosines[r] = cosines[r] + cosines[r + 16]
                second[r] = second[r] + second[r + 16]
            size = 16
        while size > 1:  # a fixed halving tree over the t lanes
            half = size // 2
            rest = size - half
            for r in range(half):
                cosines[r] += cosines[rest + r]
                second[r] += second[rest + r]
            size = rest
        out[0, j] += cosines[0]
        out[1, j] += second[0]
    return largest[:t].max() <= _sincos.MAX_FAST_PHASE


@_jit
def _exact_block_sums(block, row_scales, first, offsets, out):  # pragma: no cover - compiled
    """:func:`_block_sums` for any phase: float32 of libm's float64 cos and sin."""
    n, t = block.shape
    width = min(n, row_scales.shape[0] - first)
    for j in range(width):
        factor = row_scales[first + j]
        for r in range(t):
            x = block[j, r] * factor
            if offsets.shape[0]:
                c = np.float64(np.float32(np.cos(np.float64(x + offsets[first + j]))))
                out[0, j] += c
                out[1, j] += c * c
            else:
                out[0, j] += np.float64(np.float32(np.cos(np.float64(x))))
                out[1, j] += np.float64(np.float32(np.sin(np.float64(x))))


@_jit
def _feature_sums(rows, signs, permutation, gaussian, row_scales, offsets, out):  # pragma: no cover - compiled
    """Add the float64 (2, m) column sums of the features of all ``rows`` to ``out`` (see
    structured_feature_sums)."""
    count, d = rows.shape
    blocks, n = signs.shape[0], signs.shape[2]
    rows_t, block_buffer, scratch_buffer = _buffers(n, d)
    lanes = np.empty((3, _TILE_ROWS), np.float32)
    totals = np.empty((2, n), np.float32)
    largest = np.empty(_TILE_ROWS, np.float32)
    tile_sums = np.empty((2, n))
    for start in range(0, count, _TILE_ROWS):
        t = min(_TILE_ROWS, count - start)
        columns = _transpose_tile(rows, start, t, rows_t)
        block = block_buffer.ravel()[: n * t].reshape(n, t)
        scratch = scratch_buffer.ravel()[: n * t].reshape(n, t)
        for b in range(blocks):
            _project_block(columns, b, signs, permutation, gaussian, block, scratch)
            tile_sums[:] = 0.0
            if not _block_sums(block, row_scales, b * n, offsets, lanes, largest, totals, tile_sums):
                tile_sums[:] = 0.0
                _exact_block_sums(block, row_scales, b * n, offsets, tile_sums)
            width = min(n, row_scales.shape[0] - b * n)
            out[:, b * n : b * n + width] += tile_sums[:, :width]


def structured_feature_sums(
    X: np.ndarray, params: dict[str, np.ndarray], offsets: np.ndarray, out: np.ndarray
) -> float:
    """Add the column sums of the unscaled features of ``X`` to ``out``, without writing the features.

    The fused pass of a sketch: per tile of 32 rows, per block, the transforms, the phases,
    their compiled sin/cos (:mod:`streamrff._kernels.sincos`) and the column sums, all in one call
    without the GIL.

    Parameters
    ----------
    X : numpy.ndarray
        float32 (N, d), C-contiguous.
    params : dict of numpy.ndarray
        From :func:`structured_params`.
    offsets : numpy.ndarray
        float32 (m,) phases b of the cos+phase variant, or (0,) for the sin/cos variant.
    out : numpy.ndarray
        float64 (2, m). Sin/cos: ``out[0] += sum_i cos(W x_i)``, ``out[1] += sum_i sin(W x_i)``.
        Cos+phase: ``out[0] += sum_i cos(W x_i + b)``, ``out[1] += sum_i cos(W x_i + b)^2``.

    Returns
    -------
    float
        The sum of all squared unscaled features (``N m`` for sin/cos), as the dense kernels'.

    Examples
    --------
    >>> import numpy as np
    >>> from streamrff._kernels.sorf import structured_feature_sums, structured_params, structured_projection
    >>> params = structured_params(np.random.default_rng(0), 6, 16, bandwidth=1.0)
    >>> X = np.random.default_rng(1).normal(size=(100, 6)).astype(np.float32)
    >>> sums = np.zeros((2, 16))
    >>> _ = structured_feature_sums(X, params, np.zeros(0, np.float32), sums)
    >>> phases = structured_projection(X, params, np.empty((100, 16), np.float32)).astype(np.float64)
    >>> bool(np.allclose(sums, [np.cos(phases).sum(0), np.sin(phases).sum(0)], rtol=0, atol=1e-4))
    True
    """
    _feature_sums(X, *_kernel_args(params), offsets, out)
    if offsets.shape[0]:
        return float(out[1].sum())
    return float(X.shape[0] * out.shape[1])


@_jit
def structured_rff_features(rows, signs, permutation, gaussian, row_scales, offsets, scale, out):  # pragma: no cover
    """The compiled body of :func:`structured_features`, callable from other numba kernels (the
    Lloyd step embeds its tiles with it, as it does with :func:`streamrff._kernels.sincos.rff_features`).

    ``signs``, ``permutation``, ``gaussian``, ``row_scales``: the arrays of
    :func:`structured_params`; ``scale``: float32; the rest as :func:`structured_features`.
    """
    count = rows.shape[0]
    m = row_scales.shape[0]
    phases = np.empty((min(count, _TILE_ROWS), m), np.float32)
    for start in range(0, count, _TILE_ROWS):
        t = min(_TILE_ROWS, count - start)
        tile_phases = phases[:t]
        _projection(rows[start : start + t], signs, permutation, gaussian, row_scales, tile_phases)
        tile_out = out[start : start + t]
        if _sincos.largest_phase(tile_phases, offsets) <= _sincos.MAX_FAST_PHASE:
            if offsets.shape[0]:
                _sincos.cos_features(tile_phases, offsets, scale, tile_out)
            else:
                _sincos.sincos_features(tile_phases, scale, tile_out)
            continue
        factor = np.float32(scale)
        for i in range(t):
            for j in range(m):
                if offsets.shape[0]:
                    tile_out[i, j] = factor * np.float32(np.cos(np.float64(tile_phases[i, j] + offsets[j])))
                else:
                    x = np.float64(tile_phases[i, j])
                    tile_out[i, j] = factor * np.float32(np.cos(x))
                    tile_out[i, m + j] = factor * np.float32(np.sin(x))


def structured_features(
    X: np.ndarray, params: dict[str, np.ndarray], offsets: np.ndarray, scale: float, out: np.ndarray
) -> np.ndarray:
    """Float32 RFF features of ``X`` with structured frequencies: the ``transform`` of the map.

    ``out[:, :m] = scale * cos(W x)``, ``out[:, m:] = scale * sin(W x)`` (``offsets`` of
    length 0), or ``out = scale * cos(W x + offsets)``; each feature is ``float32(scale) *``
    the very value :func:`structured_feature_sums` adds for it.

    Parameters
    ----------
    X, params, offsets
        As for :func:`structured_feature_sums`.
    scale : float
        Feature scale (``m^-1/2`` for sin/cos, ``sqrt(2 / m)`` for cos+phase).
    out : numpy.ndarray
        float32 (N, 2 m) or (N, m); overwritten.

    Returns
    -------
    numpy.ndarray
        ``out``.

    Examples
    --------
    >>> import numpy as np
    >>> from streamrff._kernels.sorf import structured_features, structured_params
    >>> from streamrff.maps import exact_kernel
    >>> X = np.random.default_rng(0).normal(size=(5, 20)).astype(np.float32)
    >>> params = structured_params(np.random.default_rng(1), 20, 2048, bandwidth=5.0)
    >>> Z = structured_features(X, params, np.zeros(0, np.float32), 2048**-0.5, np.empty((5, 4096), np.float32))
    >>> bool(np.abs(Z @ Z.T - exact_kernel(X, X, 5.0)).max() < 0.05)
    True
    """
    structured_rff_features(X, *_kernel_args(params), offsets, np.float32(scale), out)
    return out
