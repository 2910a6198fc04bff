"""Compiled fast Walsh-Hadamard transforms, fused with the diagonals of structured random features.

The transform is the *unnormalised* Sylvester-Hadamard matrix ``H`` (entries
+-1, ``H H^T = n I``; :func:`scipy.linalg.hadamard`), applied in place to
float32 vectors of length ``n = 2^k``; callers fold the ``n^-1/2`` of the
orthonormal transform into one final scale, so the butterflies are bare adds.

Layout. A tile of ``t`` rows is transformed *transposed*: a float32 ``(n, t)``
block whose row ``j`` holds coordinate ``j`` of every row of the tile. Each
butterfly then adds and subtracts two contiguous vectors of ``t`` lanes, so
every stage vectorises, the short ones (half-lengths 1, 2, 4, 8) included,
which a row-major transform of one vector cannot do. Two stages run per pass
over the block (radix 4), so a transform of length 1024 reads and writes the
block five times. When numba compiles for AVX-512 and t is a multiple of 16,
four stages run per pass in explicit 16-lane vectors held in registers (three
passes at n = 1024: 1.9x the loops on one core, measured against a 63-column
block in one run; LLVM's auto-vectoriser stops at 256 bits there); a SORF
block then takes its sign diagonals in the first pass of each transform as
the vectors load (:func:`sorf_columns`). Every
lane sees the same adds in the same order, stage after stage, however the
stages are grouped, so a row's result does not depend on the tile it is in,
on ``t``, on the vector width or on the thread count.

Blocks (a block maps a zero-padded row ``x`` in R^n to n projections):

* SORF (Yu et al. 2016): ``H D1 H D2 H D3 x`` with D1, D2, D3 diagonal
  matrices of random signs (:func:`sorf_block`);
* Fastfood (Le, Sarlos & Smola 2013): ``H G Pi H B x`` with B random signs,
  Pi a random permutation and G a Gaussian diagonal (:func:`fastfood_block`).

The row scales (the paper's S, and ``sigma^-1``, and the powers of ``n`` of the
unnormalised transforms) are applied by the caller when it writes the
projections out (:mod:`streamrff._kernels.sorf`).

Accuracy. Each of the ``log2 n`` stages rounds once, so an output of ``H x``
is within ``gamma_k sum_j |x_j|`` of the exact value (``k = log2 n``,
``gamma_k = k u / (1 - k u)``, u = 2^-24; Higham 2002, eq. 3.5 for a summation
tree of depth k); for integers below 2^24 / n it is exact.

References
----------
Yu, F. X., Suresh, A. T., Choromanski, K., Holtmann-Rice, D. & Kumar, S.
(2016). Orthogonal random features. NeurIPS. Sec. 4 (SORF).
Le, Q., Sarlos, T. & Smola, A. (2013). Fastfood - approximating kernel
expansions in loglinear time. ICML. Sec. 3, eq. (7).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .compiled import jit
from .rowdot import _compiles_for_avx512

__all__ = ["fastfood_block", "padded_width", "sorf_block", "sorf_columns", "walsh_hadamard", "walsh_hadamard_columns"]

_jit = jit(nogil=True, boundscheck=False, error_model="numpy")  # cached in the per-user folder (_compiled)

#: Float32 lanes of one explicit vector (512 bits).
LANES = 16
#: Whether butterflies on blocks of a multiple of 16 columns run in explicit ``<16 x float>``
#: vectors (:func:`_butterflies`): when numba compiles for AVX-512, where LLVM's auto-vectoriser
#: stops at 256 bits. The same adds in the same order as the loops: the same bits.
WIDE_VECTORS = _compiles_for_avx512()

_vector = ir.VectorType(ir.FloatType(), LANES)
_index = ir.IntType(32)


@intrinsic
def _butterflies(typingctx, block, j, half, lane, radix, signs, source):
    """Stages ``half, 2 half, ..., radix half / 2`` of the transform on rows ``j + i half``
    (``i < radix``, a literal power of two up to 16) of the C-contiguous float32 (n, t)
    ``block``, on the 16 lanes from ``lane``, in registers. Every stage is the adds and
    subtractions of :func:`walsh_hadamard_columns` in the same order, so any grouping of the
    stages gives the same bits. ``signs``: None, or a float32 (n,) diagonal of +-1 that row
    ``j + i half`` is multiplied by as it is loaded (exact: the same bits as a pass of
    :func:`_scale_rows` before). ``source``: None, or a C-contiguous float32 (d, t) array to
    load the rows from instead of ``block`` (the results still go to ``block``; the caller
    keeps every row ``j + i half`` below d): a copy into the block fused with the pass."""
    if not isinstance(radix, types.IntegerLiteral) or radix.literal_value not in (2, 4, 8, 16):
        return None
    if not (isinstance(block, types.Array) and block.ndim == 2 and block.dtype == types.float32):
        return None
    if block.layout != "C":
        return None
    signed = isinstance(signs, types.Array)
    if signed and not (signs.ndim == 1 and signs.dtype == types.float32):
        return None
    if not signed and not isinstance(signs, (types.NoneType, types.Omitted)):
        return None
    copied = isinstance(source, types.Array)
    if copied and not (source.ndim == 2 and source.dtype == types.float32 and source.layout == "C"):
        return None
    if not copied and not isinstance(source, (types.NoneType, types.Omitted)):
        return None
    size = radix.literal_value
    signature = types.void(block, j, half, lane, radix, signs, source)

    def codegen(context, builder, signature, args):
        intp = context.get_value_type(types.intp)
        array = context.make_array(signature.args[0])(context, builder, args[0])
        columns = cgutils.unpack_tuple(builder, array.shape, 2)[1]
        row, step, lane_index = (context.cast(builder, args[k], signature.args[k], types.intp) for k in (1, 2, 3))
        pointers = []
        for i in range(size):
            first_row = builder.add(row, builder.mul(step, ir.Constant(intp, i)))
            index = builder.add(builder.mul(first_row, columns), lane_index)
            pointers.append(builder.bitcast(builder.gep(array.data, [index]), _vector.as_pointer()))
        loads = pointers
        if copied:
            origin = context.make_array(signature.args[6])(context, builder, args[6])
            origin_columns = cgutils.unpack_tuple(builder, origin.shape, 2)[1]
            loads = []
            for i in range(size):
                first_row = builder.add(row, builder.mul(step, ir.Constant(intp, i)))
                index = builder.add(builder.mul(first_row, origin_columns), lane_index)
                loads.append(builder.bitcast(builder.gep(origin.data, [index]), _vector.as_pointer()))
        values = [builder.load(pointer, align=4) for pointer in loads]
        if signed:
            diagonal = context.make_array(signature.args[5])(context, builder, args[5])
            stride = cgutils.unpack_tuple(builder, diagonal.strides, 1)[0]
            base = builder.ptrtoint(diagonal.data, intp)
            for i in range(size):
                offset = builder.mul(builder.add(row, builder.mul(step, ir.Constant(intp, i))), stride)
                address = builder.inttoptr(builder.add(base, offset), ir.FloatType().as_pointer())
                sign = builder.load(address, align=4)
                lanes = builder.insert_element(ir.Constant(_vector, None), sign, ir.Constant(_index, 0))
                splat = builder.shuffle_vector(lanes, lanes, ir.Constant(ir.VectorType(_index, LANES), [0] * LANES))
                values[i] = builder.fmul(values[i], splat)
        bit = 1
        while bit < size:  # stage by stage, lowest bit first, as the loops
            for i in range(size):
                if not i & bit:
                    a, b = values[i], values[i | bit]
                    values[i], values[i | bit] = builder.fadd(a, b), builder.fsub(a, b)
            bit *= 2
        for pointer, value in zip(pointers, values, strict=True):
            builder.store(value, pointer, align=4)
        return context.get_dummy_value()

    return signature, codegen


@intrinsic
def _transpose_square(typingctx, rows, first_row, column, out, lane):
    """``out[column + i, lane + r] = rows[first_row + r, column + i]`` for ``i, r < 16``: a 16 x 16
    square of float32 ``rows`` (2-D, unit stride along a row; the caller checks) into the C-contiguous
    float32 ``out``, in sixteen 16-lane loads, 64 two-vector shuffles (the off-diagonal halves,
    quarters, ... of the square swapped) and sixteen stores. Moves values only: the same bits.
    A 32-row tile: 1.5-1.9x the scalar loops (d = 100, 768, 2000; one core, loaded machine)."""
    for array in (rows, out):
        if not (isinstance(array, types.Array) and array.ndim == 2 and array.dtype == types.float32):
            return None
    if out.layout != "C" or rows.layout not in ("C", "A"):
        return None
    signature = types.void(rows, first_row, column, out, lane)

    def codegen(context, builder, signature, args):
        intp = context.get_value_type(types.intp)
        source = context.make_array(signature.args[0])(context, builder, args[0])
        row_stride = cgutils.unpack_tuple(builder, source.strides, 2)[0]
        target = context.make_array(signature.args[3])(context, builder, args[3])
        target_columns = cgutils.unpack_tuple(builder, target.shape, 2)[1]
        first, start, offset = (context.cast(builder, args[k], signature.args[k], types.intp) for k in (1, 2, 4))
        origin = builder.add(builder.ptrtoint(source.data, intp), builder.mul(start, ir.Constant(intp, 4)))
        values = []
        for i in range(LANES):
            address = builder.add(origin, builder.mul(builder.add(first, ir.Constant(intp, i)), row_stride))
            values.append(builder.load(builder.inttoptr(address, _vector.as_pointer()), align=4))
        step = LANES // 2
        while step:
            keep = [lane if not lane & step else LANES + lane - step for lane in range(LANES)]
            swap = [lane + step if not lane & step else LANES + lane for lane in range(LANES)]
            for i in range(LANES):
                if not i & step:
                    a, b = values[i], values[i + step]
                    values[i] = builder.shuffle_vector(a, b, ir.Constant(ir.VectorType(_index, LANES), keep))
                    values[i + step] = builder.shuffle_vector(a, b, ir.Constant(ir.VectorType(_index, LANES), swap))
            step //= 2
        for i, value in enumerate(values):
            index = builder.add(builder.mul(builder.add(start, ir.Constant(intp, i)), target_columns), offset)
            builder.store(value, builder.bitcast(builder.gep(target.data, [index]), _vector.as_pointer()), align=4)
        return context.get_dummy_value()

    return signature, codegen


def padded_width(n_features_in: int) -> int:
    """The smallest power of two >= ``n_features_in`` (>= 1): the length of the transform.

    Examples
    --------
    >>> from streamrff._kernels.hadamard import padded_width
    >>> [padded_width(d) for d in (1, 2, 3, 768, 1024, 1025)]
    [1, 2, 4, 1024, 1024, 2048]
    """
    return 1 << max(0, int(n_features_in) - 1).bit_length()


@_jit
def walsh_hadamard_columns(block):  # pragma: no cover - compiled
    """``block = H @ block`` in place: the unnormalised Walsh-Hadamard transform of every column.

    ``block``: float32 (n, t), C-contiguous, n a power of two.
    """
    n, t = block.shape
    if WIDE_VECTORS and t % LANES == 0:
        _walsh_hadamard_wide(block)
        return
    half = 1
    while 4 * half <= n:  # two stages per pass: bits `half` and `2 half` of the row index
        for start in range(0, n, 4 * half):
            for j in range(start, start + half):
                a, b, c, d = block[j], block[j + half], block[j + 2 * half], block[j + 3 * half]
                for r in range(t):
                    a0, b0, c0, d0 = a[r], b[r], c[r], d[r]
                    s0, s1, s2, s3 = a0 + b0, a0 - b0, c0 + d0, c0 - d0
                    a[r] = s0 + s2
                    b[r] = s1 + s3
                    c[r] = s0 - s2
                    d[r] = s1 - s3
        half *= 4
    if half < n:  # an odd number of stages: one radix-2 pass
        for j in range(half):
            a, b = block[j], block[j + half]
            for r in range(t):
                a0, b0 = a[r], b[r]
                a[r] = a0 + b0
                b[r] = a0 - b0


@_jit
def _walsh_hadamard_wide(block):  # pragma: no cover - compiled
    """:func:`walsh_hadamard_columns` in 16-lane vectors, for a C-contiguous block of 16 k columns:
    four stages per pass over the block (n = 1024: three passes instead of five)."""
    n, t = block.shape
    half = 1
    while 16 * half <= n:
        for start in range(0, n, 16 * half):
            for j in range(start, start + half):
                for lane in range(0, t, LANES):
                    _butterflies(block, j, half, lane, 16, None, None)
        half *= 16
    if 8 * half == n:
        for j in range(half):
            for lane in range(0, t, LANES):
                _butterflies(block, j, half, lane, 8, None, None)
    elif 4 * half == n:
        for j in range(half):
            for lane in range(0, t, LANES):
                _butterflies(block, j, half, lane, 4, None, None)
    elif 2 * half == n:
        for j in range(half):
            for lane in range(0, t, LANES):
                _butterflies(block, j, half, lane, 2, None, None)


@_jit
def _radix_pass(block, half, radix, signs, source=None, first=0, stop=-1):  # pragma: no cover - compiled
    """Stages ``half .. radix half / 2`` of the transform of a block of 16 k columns, in 16-lane
    vectors (:func:`_butterflies`; ``signs``: None or the diagonal applied as the rows load;
    ``source``: None or the array the rows load from), on the groups of rows from row ``first``
    (a multiple of ``radix half``) to ``stop`` (-1: the end)."""
    n, t = block.shape
    end = n if stop < 0 else stop
    for start in range(first, end, radix * half):
        for j in range(start, start + half):
            for lane in range(0, t, LANES):
                if radix == 16:
                    _butterflies(block, j, half, lane, 16, signs, source)
                elif radix == 8:
                    _butterflies(block, j, half, lane, 8, signs, source)
                elif radix == 4:
                    _butterflies(block, j, half, lane, 4, signs, source)
                else:
                    _butterflies(block, j, half, lane, 2, signs, source)


@_jit
def sorf_columns(columns, signs, block):  # pragma: no cover - compiled
    """``block = H D1 H D2 H D3 [columns; 0]``, ``signs = [D3, D2, D1]`` (float32 (3, n) of +-1).

    ``columns``: float32 (d, t), the transposed rows of a tile; ``block``: float32 (n, t),
    C-contiguous, n >= max(d, 16) a power of two, t a multiple of 16 (the vectors of
    :func:`_butterflies`: call it when WIDE_VECTORS). The same bits as :func:`sorf_block` on the
    zero-padded rows (every lane sees the same adds in the same order; the signs are exact; only
    a zero may differ in sign, as the first transform leaves the groups of padding rows +0
    instead of adding signed zeros), with each sign diagonal applied by the first pass of its
    transform as it loads the rows, and the copy into the block done by the first pass too: it
    loads the groups of 16 rows below d from ``columns``; only the last ``d mod 16`` rows are
    copied, and the padding zeroed, in flat loops. The fused copy: 1.08-1.10x a flat copy of all
    d rows first (n = 1024, d = 768 and n = 2048, d = 2000, t = 32; 1.01x at n = 128, d = 100;
    one core, loaded machine, one run), which was itself 0.91-0.95x the time of the copy, sign
    passes and transforms apart. Running the first stages on groups of 64-256 rows held in L1
    made no measurable difference (0.98-1.00x at n = 1024), nor did rows padded to 48 lanes
    against the cache's set conflicts (slower), nor 32 rows per pass (radix 32: 0.55x, the
    values spill). Running the last pass of a transform with the first pass of the next one in
    pieces of 16 rows held in L1 was 1.07x alone at n = 1024 but made no difference to
    ``structured_feature_sums`` (0.95-1.00x), nor did running the third transform's last pass
    with the sums.
    """
    d, t = columns.shape
    n = block.shape[0]
    loaded = d // LANES * LANES  # the groups of 16 rows that the first pass loads from `columns`
    source, target = columns.ravel()[loaded * t :], block.ravel()[loaded * t :]  # flat: the loops vectorise
    for i in range((d - loaded) * t):  # indices from 0: no wrap-around checks
        target[i] = source[i]
    padding = target[(d - loaded) * t :]
    for i in range((n - d) * t):
        padding[i] = 0.0
    for k in range(3):
        # The first transform skips the groups of rows that are all padding: their butterflies
        # would only add zeros to zeros, and the rows stay the zeros written above (d = 768:
        # a quarter of the first two passes of that transform).
        if k == 0:
            _radix_pass(block, 1, 16, signs[0], columns, 0, loaded)
            _radix_pass(block, 1, 16, signs[0], None, loaded, _groups_end(d, 16, n))
        else:
            _radix_pass(block, 1, 16, signs[k])
        half = 16
        while half < n:
            radix = min(16, n // half)
            _radix_pass(block, half, radix, None, None, 0, _groups_end(d, radix * half, n) if k == 0 else -1)
            half *= radix


@_jit
def _groups_end(d, group, n):  # pragma: no cover - compiled
    """The end of the last group of ``group`` rows that holds any of the first ``d`` rows (at most n)."""
    return min(n, -(-d // group) * group)


@_jit
def _scale_rows(block, factors):  # pragma: no cover - compiled
    """``block[j] *= factors[j]`` for every row j of the (n, t) block."""
    for j in range(block.shape[0]):
        row, factor = block[j], factors[j]
        for r in range(block.shape[1]):
            row[r] *= factor


@_jit
def sorf_block(block, signs):  # pragma: no cover - compiled
    """``block = H D1 H D2 H D3 block`` in place, with ``signs = [D3, D2, D1]`` (float32 (3, n) of +-1).

    ``block``: float32 (n, t), the transposed rows of a tile (see the module docstring).
    """
    for k in range(3):
        _scale_rows(block, signs[k])
        walsh_hadamard_columns(block)


@_jit
def fastfood_block(block, signs, permutation, gaussian, scratch):  # pragma: no cover - compiled
    """``block = H G Pi H B block`` in place; ``scratch`` (same shape as ``block``) is overwritten.

    ``signs`` (B): float32 (n,) of +-1; ``permutation`` (Pi): int64 (n,), ``(Pi v)[j] =
    v[permutation[j]]``; ``gaussian`` (G): float32 (n,).
    """
    n, t = block.shape
    _scale_rows(block, signs)
    walsh_hadamard_columns(block)
    for j in range(n):
        source, target, factor = block[permutation[j]], scratch[j], gaussian[j]
        for r in range(t):
            target[r] = source[r] * factor
    walsh_hadamard_columns(scratch)
    block[:] = scratch


@_jit
def walsh_hadamard(rows, out):  # pragma: no cover - compiled
    """``out = rows @ H[:d]``: the unnormalised transform of every row of ``rows`` zero-padded to
    ``n = out.shape[1]`` (``H`` is symmetric, so row i of ``out`` is ``H`` times padded row i).

    ``rows``: float32 (N, d); ``out``: float32 (N, n), n a power of two >= d. Runs in tiles of
    64 rows through :func:`walsh_hadamard_columns`.
    """
    count, d = rows.shape
    n = out.shape[1]
    tile = 64
    for start in range(0, count, tile):
        t = min(tile, count - start)
        columns = np.zeros((n, t), np.float32)
        for r in range(t):
            for j in range(d):
                columns[j, r] = rows[start + r, j]
        walsh_hadamard_columns(columns)
        for r in range(t):
            for j in range(n):
                out[start + r, j] = columns[j, r]
